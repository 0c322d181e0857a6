#!/usr/bin/env python3
"""dpshim-sim's two-level network model against real multi-host runs (a
benchmark, not a test; as root): figures.py's runs on 2 and 4 hosts x 4
ranks, links unshaped and shaped to 200 Mbit/s, REPS times each, and each
run's step time the median of its REPS (the 2-core machine is shared: one
run in a dozen comes out 5-12 % slow); then

  1. dpshim-sim --calibrate on all of them: the simulated step time
     against the measured one, with the default parameters and fitted;
  2. held out: the parameters fitted on the 2-host runs alone price the
     4-host runs (the given-parameters table of that second calibration).

    calibrate.py BUILD OUTDIR [--reps N]

OUTDIR gets each figures.py output and calibration file, all.json,
two.json and four.json (the runs merged), and calibration.txt (what the
two calibrations printed).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = [(2, 4, None), (2, 4, "200mbit"), (4, 4, None), (4, 4, "200mbit")]


def measure(build, out, reps):
    for rep in range(1, reps + 1):
        for hosts, ranks, rate in CONFIGS:
            tag = "h%dr%d%s-%d" % (hosts, ranks, "s" if rate else "", rep)
            cmd = [sys.executable, os.path.join(HERE, "figures.py"),
                   str(hosts), str(ranks), build] + ([rate] if rate else [])
            cmd += ["--calibration", os.path.join(out, tag + ".json")]
            with open(os.path.join(out, tag + ".txt"), "w") as f:
                subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                               check=True)


def merge(paths, to):
    """One calibration file of the runs of several (the same workload),
    each run's step time the median over the files that have it."""
    docs = [json.load(open(p)) for p in paths]
    times = {}
    for d in docs:
        for r in d["runs"]:
            key = json.dumps({k: v for k, v in r.items()
                              if k != "step_ms_balanced"}, sort_keys=True)
            times.setdefault(key, []).append(r["step_ms_balanced"])
    runs = [dict(json.loads(k), step_ms_balanced=statistics.median(v))
            for k, v in times.items()]
    with open(to, "w") as f:
        json.dump(dict(docs[0], runs=runs), f, indent=1)
    return to


def calibrate(sim, path, log, *given):
    p = subprocess.run([sim, "--calibrate", path] + list(given),
                       capture_output=True, text=True)
    log.write("$ dpshim-sim --calibrate %s %s\n%s%s\n" % (
        os.path.basename(path), " ".join(given), p.stdout, p.stderr))
    return p


def fitted_options(fit_json):
    """The --calibrate --json file's fitted parameters as sim options."""
    f = json.load(open(fit_json))["fitted"]
    return ["--latency-us", "%.6g" % f["latency_us"],
            "--bandwidth-gbps", "%.6g" % (8 * f["bandwidth_gbs"]),
            "--serial-us", "%.6g" % f["serial_us"],
            "--inter-latency-us", "%.6g" % f["inter_latency_us"],
            "--inter-gbs", "%.6g" % f["inter_bandwidth_gbs"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    measure(args.build, args.out, args.reps)
    runs = lambda pattern: sorted(glob.glob(os.path.join(args.out, pattern)))
    every = merge(runs("h?r4*-*.json"), os.path.join(args.out, "all.json"))
    two = merge(runs("h2r4*-*.json"), os.path.join(args.out, "two.json"))
    four = merge(runs("h4r4*-*.json"), os.path.join(args.out, "four.json"))
    sim = os.path.join(args.build, "tools", "sim", "dpshim-sim")
    fit = os.path.join(args.out, "two_fit.json")
    with open(os.path.join(args.out, "calibration.txt"), "w") as log:
        calibrate(sim, every, log)
        calibrate(sim, two, log, "--json", fit)
        calibrate(sim, four, log, *fitted_options(fit))
    with open(os.path.join(args.out, "calibration.txt")) as f:
        print(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
