#!/usr/bin/env python3
"""The demo's figures, from the runs tools/demo.sh leaves in OUT/runs/.

    demo_report.py OUT --warmup-last 11 --steps N [--profile NAME]
                   [--lengths FILE] [--seed S] [--grad-bytes B] [--time-scale X]

For each DP size and variant (none, seed, default), over the steps after
warm-up (when the shim balances):
  tgs        tokens per GPU per second
  step_ms    mean step time
  wait       straggler wait: each rank's time in the gradient all-reduce
             beyond the last-arriving rank's, as a share of step time
  ideal      the gain a perfect plan would give: none's max load / LB, from
             the shim's log (the loads before balancing are none's loads)
  achieved   none's step time / this variant's step time
  moved      bytes moved per step
  shim       the shim's own time per step (waiting for the other ranks at
             the hand-off excluded), as a share of step time
Writes OUT/results.json, OUT/tgs_vs_dp.png and OUT/imbalance.png (gnuplot).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

VARIANTS = ("none", "seed", "default")


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def straggler_share(stats):
    """Mean over ranks and steps of the time in the all-reduce beyond the
    last-arriving rank's, as a share of step time."""
    return mean([sum(w - min(s["wait_ms"]) for w in s["wait_ms"]) /
                 (len(s["wait_ms"]) * s["step_ms"]) for s in stats])


def fit_error(err_path):
    """(mean, max) prediction error of the warm-up fit, from the summary."""
    if not os.path.exists(err_path):
        return None
    with open(err_path) as f:
        m = re.search(r"prediction error mean ([0-9.]+)%, max ([0-9.]+)%",
                      f.read())
    return (float(m.group(1)), float(m.group(2))) if m else None


def run_figures(out, dp, variant, warmup_last):
    """Figures of one run over the balanced steps; None if it is missing."""
    base = os.path.join(out, "runs", "dp%d_%s" % (dp, variant))
    every = read_jsonl(base + ".stats.jsonl")
    stats = [s for s in every if s["step"] >= warmup_last]  # from 0
    warm = [s for s in every if 0 < s["step"] < warmup_last]
    if not stats:
        return None
    log = [e for e in read_jsonl(base + ".log.jsonl")
           if e["step"] > warmup_last]
    with open(base + ".json") as f:
        summary = json.loads(f.read().strip().splitlines()[-1])
    seconds = sum(s["step_ms"] for s in stats) / 1e3
    tokens = sum(sum(s["tokens"]) for s in stats)
    solved = [e for e in log if "lower_bound" in e]
    shim = [mean(e["shim_ms"]) for e in log]
    return {
        "dp": dp, "variant": variant,
        "tgs": tokens / dp / seconds,
        "step_ms_balanced": 1e3 * seconds / len(stats),
        "step_ms_mean": summary["step_ms_mean"],
        "tgs_all_steps": summary["tgs"],
        "wait_share": straggler_share(stats),
        "wait_share_warmup": straggler_share(warm),
        "fit_error_pct": fit_error(base + ".err"),
        "ideal_gain": (sum(max(e["load_before"]) for e in solved) /
                       sum(e["lower_bound"] for e in solved)) if solved else None,
        "bytes_moved_per_step": mean([e.get("bytes_moved", 0) for e in log]),
        "shim_share": (sum(shim) / (1e3 * seconds)) if log else 0.0,
        "applied": sum(1 for e in log if e["decision"] == "apply"),
        "balanced_steps": len(stats),
        "consumed_digest": summary["consumed_digest"],
    }


def add_gains(runs):
    for dp in sorted({r["dp"] for r in runs}):
        at = {r["variant"]: r for r in runs if r["dp"] == dp}
        if "none" not in at:
            continue
        ideal = (at.get("default") or {}).get("ideal_gain")
        for r in at.values():
            r["achieved_gain"] = at["none"]["step_ms_balanced"] / r["step_ms_balanced"]
            r["ideal_gain"] = ideal
            r["share_of_ideal"] = ((r["achieved_gain"] - 1) / (ideal - 1)
                                   if ideal and ideal > 1 else None)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(runs):
    head = ("variant", "TGS", "step ms", "wait", "ideal", "achieved",
            "of ideal", "MB moved", "shim")
    for dp in sorted({r["dp"] for r in runs}):
        print("\nDP %d" % dp)
        print("  %-8s %9s %8s %6s %6s %8s %8s %8s %6s" % head)
        for r in sorted((r for r in runs if r["dp"] == dp),
                        key=lambda r: VARIANTS.index(r["variant"])):
            print("  %-8s %9.0f %8.1f %5.1f%% %6s %8s %8s %8.2f %5.2f%%" % (
                r["variant"], r["tgs"], r["step_ms_balanced"],
                100 * r["wait_share"], fmt(r["ideal_gain"], ".3f"),
                fmt(r["achieved_gain"], ".3f"),
                fmt(r["share_of_ideal"] and 100 * r["share_of_ideal"], ".0f") +
                ("%" if r["share_of_ideal"] is not None else ""),
                r["bytes_moved_per_step"] / 1e6, 100 * r["shim_share"]))
    print("\ndefault: straggler wait in the warm-up steps (nothing moved) "
          "-> after; the warm-up fit's error")
    for r in sorted((r for r in runs if r["variant"] == "default"),
                    key=lambda r: r["dp"]):
        fit = r["fit_error_pct"]
        print("  DP %-3d wait %5.1f%% -> %5.1f%%   fit error mean "
              "%s%%, max %s%%" % (r["dp"], 100 * r["wait_share_warmup"],
                                  100 * r["wait_share"],
                                  fit[0] if fit else "-",
                                  fit[1] if fit else "-"))
    digests = {(r["dp"], r["consumed_digest"]) for r in runs}
    same = len(digests) == len({r["dp"] for r in runs})
    print("\nconsumed digests %s across variants at every DP"
          % ("equal" if same else "DIFFER"))


def gnuplot(script):
    if not shutil.which("gnuplot"):
        print("demo: gnuplot not found (apt-get install gnuplot-nox): no plots")
        return
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def plot_tgs(out, runs):
    data = os.path.join(out, "tgs_vs_dp.dat")
    with open(data, "w") as f:
        for v in VARIANTS:
            f.write("# %s\n" % v)
            for r in sorted((r for r in runs if r["variant"] == v),
                            key=lambda r: r["dp"]):
                f.write("%d %.1f\n" % (r["dp"], r["tgs"]))
            f.write("\n\n")
    gnuplot("""set terminal pngcairo size 800,500
set output '%s'
set title 'Tokens per GPU per second against DP size (after warm-up)'
set xlabel 'DP size'; set ylabel 'TGS'; set logscale x 2; set grid
set key bottom left
plot for [i=0:2] '%s' index i with linespoints lw 2 title word('none seed default', i+1)
""" % (os.path.join(out, "tgs_vs_dp.png"), data))


def plot_imbalance(out, runs, warmup_last):
    dp = max(r["dp"] for r in runs)
    data = os.path.join(out, "imbalance.dat")
    with open(data, "w") as f:
        for v in ("seed", "default"):
            f.write("# %s at DP %d: step, before, after\n" % (v, dp))
            path = os.path.join(out, "runs", "dp%d_%s.log.jsonl" % (dp, v))
            for e in read_jsonl(path):
                if "imbalance_before" in e and e["step"] > warmup_last:
                    f.write("%d %.4f %.4f\n" % (e["step"], e["imbalance_before"],
                                                e["imbalance_after"]))
            f.write("\n\n")
    gnuplot("""set terminal pngcairo size 800,500
set output '%s'
set title 'Predicted imbalance (max/mean - 1) per step at DP %d, after warm-up'
set xlabel 'step'; set ylabel 'imbalance'; set grid; set logscale y
set key outside
plot '%s' index 1 using 1:2 with linespoints title 'before', \\
     '%s' index 0 using 1:3 with linespoints title 'after (seed)', \\
     '%s' index 1 using 1:3 with linespoints title 'after (default)'
""" % (os.path.join(out, "imbalance.png"), dp, data, data, data))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--warmup-last", type=int, required=True)
    p.add_argument("--profile", default="sft")
    p.add_argument("--lengths", default="")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--grad-bytes", type=int, default=1 << 20)
    p.add_argument("--time-scale", type=float, default=1.0)
    args = p.parse_args()
    sizes = sorted({int(n[2:].split("_")[0])
                    for n in os.listdir(os.path.join(args.out, "runs"))
                    if n.startswith("dp")})
    runs = [r for dp in sizes for v in VARIANTS
            if (r := run_figures(args.out, dp, v, args.warmup_last))]
    if not runs:
        print("demo: no runs under %s/runs" % args.out)
        return 1
    add_gains(runs)
    print_table(runs)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        # What dpshim-sim --calibrate replays: the same runs, simulated.
        setup = {"profile": args.profile, "seed": args.seed,
                 "time_scale": args.time_scale, "steps": args.steps,
                 "warmup_last": args.warmup_last,
                 "grad_bytes": args.grad_bytes, "micro_batches": 1}
        if args.lengths:
            setup["lengths"] = os.path.abspath(args.lengths)
        json.dump(dict(setup, runs=runs), f, indent=1)
    plot_tgs(args.out, runs)
    plot_imbalance(args.out, runs, args.warmup_last)
    print("\nwrote %s/results.json, tgs_vs_dp.png, imbalance.png" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
