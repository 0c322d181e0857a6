#!/usr/bin/python3
"""Two builds' dpshim-sim side by side: the same runs, the builds taking
turns (which goes first alternates), so that a shared, noisy machine slows
both alike. For each build the median and the least of the `default`
row's solve time (thread CPU time, dpshim-sim's solve_ms) and of the
shim's share of the step, the shim's time less the solve, and the median
over runs of the solve time's ratio (B over A, each pair of runs).
Prints figures; asserts nothing.

    tools/sim_ab.py A_BUILD B_BUILD [--rounds N] [--seeds 1,2,3] -- SIM_ARGS
        e.g. tools/sim_ab.py /tmp/old/build build -- --layout qwen2vl
             --model qwen2-vl-7b --tp model --ranks 4096 --steps 10
             --warmup-last 6 --algos none,default --solve-reps 3

SIM_ARGS must run one rank count and the `default` algorithm; --seed is
set here. About 2 s a run at DP 4096.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def sim_default_row(build, sim_args, seed):
    """The `default` row of one dpshim-sim run."""
    sim = os.path.join(build, "tools", "sim", "dpshim-sim")
    if not os.access(sim, os.X_OK):
        sys.exit(f"sim_ab.py: no {sim}; build it: ninja -C {build} "
                 "tools/sim/dpshim-sim")
    run = subprocess.run([sim, *sim_args, "--seed", str(seed)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"sim_ab.py: {sim} failed (exit {run.returncode}): "
                 f"{run.stderr.strip()}")
    rows = [json.loads(line) for line in run.stdout.splitlines()
            if line.startswith("{")]
    rows = [r for r in rows if r.get("algo") == "default"]
    if len(rows) != 1:
        sys.exit("sim_ab.py: expected one `default` row per run (one rank "
                 f"count, --algos with default), got {len(rows)}")
    r = rows[0]
    return r["solve_ms"], 100 * r["shim_share"], r["shim_ms"] - r["solve_ms"]


def main():
    p = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1].strip())
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seeds", default="1,2,3")
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("expected -- and dpshim-sim's arguments after the builds")
    cut = argv.index("--")
    o = p.parse_args(argv[:cut])
    sim_args = argv[cut + 1:]
    try:
        seeds = [int(s) for s in o.seeds.split(",")]
    except ValueError:
        sys.exit(f"sim_ab.py: --seeds '{o.seeds}': expected numbers "
                 "separated by commas")
    if o.rounds < 1:
        sys.exit(f"sim_ab.py: --rounds {o.rounds}: expected >= 1")
    got = {"A": [], "B": []}
    ratio = []
    turn = 0
    for _ in range(o.rounds):
        for seed in seeds:
            pair = {}
            order = ("A", "B") if turn % 2 == 0 else ("B", "A")
            turn += 1
            for name in order:
                build = o.a if name == "A" else o.b
                pair[name] = sim_default_row(build, sim_args, seed)
                got[name].append(pair[name])
            ratio.append(pair["B"][0] / pair["A"][0])
    for name, build in (("A", o.a), ("B", o.b)):
        v = got[name]
        print("%s %s: solve median %.2f least %.2f ms | share median %.3f %% "
              "least %.3f %% | rest %.2f ms (%d runs)" % (
                  name, build, statistics.median(x[0] for x in v),
                  min(x[0] for x in v), statistics.median(x[1] for x in v),
                  min(x[1] for x in v), statistics.median(x[2] for x in v),
                  len(v)))
    print("B/A solve time, median over pairs: %.3f" % statistics.median(ratio))


if __name__ == "__main__":
    main()
