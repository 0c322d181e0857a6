#!/usr/bin/env python3
"""dpshim-run, the launcher:
  dry runs   the original's flags (a switch, a list of steps, None), dpshim's
             own and the --tp alias become one -x per variable after mpirun,
             LD_PRELOAD first and ahead of one already set, DPSHIM_* from
             the environment forwarded (a flag overrides it); `-np N prog`
             implies mpirun; a command that is no launcher gets them as
             `env` assignments; a command that runs python* gets the
             start-up hook's and the package's directories ahead of its
             PYTHONPATH, and DPSHIM_PY_* from the environment (another
             command gets neither); --global-batch-size G
             --micro-batch-size M give DPSHIM_MICRO_BATCHES = G / (M * DP)
             for -np and -n, an equal --micro-batches too;
  refusals   a bad value: exit 2, one line naming the variable as the shim
             says it, and the command never runs; an unknown flag, no
             command: exit 2; batch sizes that do not divide, one without
             the other, no -np, a --micro-batches that disagrees, a bad
             DPSHIM_PY_WRAP: exit 2, one line naming the flags, nothing
             run;
  adapters   --adapter NAME (the build tree's) and PATH preloaded after the
             shim; an unknown name, an unreadable path: exit 2, one line;
  real runs  reftrain at 4 ranks through dpshim-run with the original's
             flags and --adapter packload: plans applied (DPSHIM_LOG), the digest of the run
             without the shim, dpshim-report's counts equal to the log's;
             and the exit status is the command's.

    check_run.py --run DPSHIM_RUN --shim LIBDPSHIM --adapter LIBPACKLOAD_ADAPTER
                 --reftrain REFTRAIN --report DPSHIM_REPORT --python DIR
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))

from mpitest import (MPIRUN, check, check_plans_applied, outcome,
                     read_jsonl, run)

TRAIN = ["--mode", "emulate", "--profile", "long", "--time-scale", "0.02",
         "--seed", "5", "--steps", "10", "--check"]


def launcher(args, *argv, env=None):
    """dpshim-run with argv; returns (rc, stdout, stderr)."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("DPSHIM_") and k != "LD_PRELOAD"}
    full.update({"OMPI_ALLOW_RUN_AS_ROOT": "1",
                 "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    full.update(env or {})
    p = subprocess.run([args.run, "--lib", args.shim] + list(argv), env=full,
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def exports(words):
    """The -x NAME=VALUE pairs of a command, in order."""
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-x"]


def dry_runs(args):
    rc, out, err = launcher(
        args, "--use-vlm-dp-balance", "--vlm-dp-balance-warmup-iters", "2",
        "3", "4", "--dp-balance-max-len-ratio-vlm", "None", "--solver=seed",
        "--tp", "2", "--dry-run", "-np", "8", "./trainer", "--lr", "1e-4",
        env={"DPSHIM_SOLVER": "kk", "DPSHIM_VERIFY": "1",
             "LD_PRELOAD": "/opt/other.so"})
    words = shlex.split(out)
    check(rc == 0 and words[:1] == ["mpirun"] and
          words[-5:] == ["-np", "8", "./trainer", "--lr", "1e-4"],
          "dry run: rc %d, %r %r" % (rc, out, err))
    want = ["LD_PRELOAD=%s:/opt/other.so" % args.shim,
            "DPSHIM_VLM_BALANCE=1", "DPSHIM_WARMUP_ITERS=2,3,4",
            "DPSHIM_MAX_LEN_RATIO=none", "DPSHIM_SOLVER=seed",
            "DPSHIM_TP_SIZE=2", "DPSHIM_VERIFY=1"]
    check(exports(words) == want, "dry run: exports %s, expected %s"
          % (exports(words), want))
    rc, out, _ = launcher(args, "--verbose", "--dry-run", "--", "./trainer",
                          "a b")
    check(rc == 0 and shlex.split(out) == [
        "env", "LD_PRELOAD=" + args.shim, "DPSHIM_VERBOSE=1", "./trainer",
        "a b"], "dry run of a plain command: %r" % out)


def adapters(args):
    """--adapter: a name from the build tree and a path, after the shim and
    before what was preloaded; an unknown name or an unreadable path is a
    one-line refusal."""
    rc, out, err = launcher(args, "--adapter", "packload", "--adapter=/dev/null",
                            "--dry-run", "-np", "2", "./trainer",
                            env={"LD_PRELOAD": "/opt/other.so"})
    want = "LD_PRELOAD=%s:%s:/dev/null:/opt/other.so" % (args.shim,
                                                         args.adapter)
    check(rc == 0 and exports(shlex.split(out)) == [want],
          "--adapter dry run: rc %d, exports %s, expected %s %r"
          % (rc, exports(shlex.split(out)), [want], err))
    for bad, says in (("nosuch", "no such adapter"),
                      ("/nonexistent/libx.so", "cannot read")):
        rc, _, err = launcher(args, "--adapter", bad, "-np", "2", "true")
        check(rc == 2 and says in err and len(err.strip().splitlines()) == 1,
              "--adapter %s: rc %d, stderr %r" % (bad, rc, err))


def python_dry_runs(args):
    """The start-up hook's PYTHONPATH and settings, for python only."""
    ours = "%s/boot:%s" % (args.python, args.python)
    env = {"PYTHONPATH": "/opt/site", "DPSHIM_PY_WRAP": "0",
           "DPSHIM_PY_CU_KEY": "cu"}
    rc, out, err = launcher(args, "--use-vlm-dp-balance", "--dry-run", "--",
                            "mpirun", "-np", "4", "-x", "PYTHONPATH",
                            "/usr/bin/python3.11", "train.py", env=env)
    want = ["LD_PRELOAD=" + args.shim, "DPSHIM_VLM_BALANCE=1",
            "PYTHONPATH=%s:/opt/site" % ours, "DPSHIM_PY_WRAP=0",
            "DPSHIM_PY_CU_KEY=cu", "PYTHONPATH"]
    check(rc == 0 and exports(shlex.split(out)) == want,
          "dry run of python under mpirun: rc %d, exports %s, expected %s %r"
          % (rc, exports(shlex.split(out)), want, err))
    rc, out, _ = launcher(args, "--dry-run", "--", "python3", "-c", "pass")
    check(rc == 0 and shlex.split(out) == [
        "env", "LD_PRELOAD=" + args.shim, "PYTHONPATH=" + ours, "python3",
        "-c", "pass"], "dry run of a plain python: %r" % out)
    rc, out, _ = launcher(args, "--dry-run", "-np", "2", "./trainer",
                          env=env)
    check(rc == 0 and not any(w.startswith(("PYTHONPATH", "DPSHIM_PY"))
                              for w in exports(shlex.split(out))),
          "dry run of no python, yet: %r" % out)


def batch_sizes(args):
    """Megatron's --global-batch-size/--micro-batch-size: accepted forms."""
    cases = [(["--tp", "2", "--dry-run", "-np", "8", "./t"], "8"),
             (["--dry-run", "--", "mpirun", "-n", "4", "./t"], "8"),
             (["--micro-batches", "16", "--dry-run", "-np", "2", "./t"],
              "16")]
    for argv, want in cases:
        rc, out, err = launcher(args, "--global-batch-size", "64",
                                "--micro-batch-size=2", *argv)
        got = [e for e in exports(shlex.split(out))
               if e.startswith("DPSHIM_MICRO_BATCHES=")]
        check(rc == 0 and got == ["DPSHIM_MICRO_BATCHES=" + want],
              "batch sizes 64/2 with %s: rc %d, %s, %r" % (
                  " ".join(argv), rc, got, err))


def refusals(args):
    with tempfile.TemporaryDirectory() as tmp:
        marker = os.path.join(tmp, "ran")
        rc, out, err = launcher(args, "--dp-balance-trigger-threshold-vlm",
                                "abc", "--", "touch", marker)
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and
              "DPSHIM_TRIGGER_THRESHOLD='abc': expected a number >= 0"
              in lines[0] and not os.path.exists(marker),
              "bad value: rc %d, stderr %r, ran: %s"
              % (rc, err, os.path.exists(marker)))
        rc, _, err = launcher(args, "--", "touch", marker,
                              env={"DPSHIM_SOLVER": "fast"})
        check(rc == 2 and "DPSHIM_SOLVER='fast'" in err and
              not os.path.exists(marker),
              "bad value from the environment: rc %d, %r" % (rc, err))
        flags = ("--global-batch-size", "--micro-batch-size")
        for argv, words in (
                (["--global-batch-size", "60", "--micro-batch-size", "4",
                  "--tp", "2", "-np", "8"], flags),
                (["--global-batch-size", "64", "-np", "8"], flags),
                (["--global-batch-size", "64", "--micro-batch-size", "2",
                  "--tp", "3", "-np", "8"], flags + ("-np 8",)),
                (["--global-batch-size", "64", "--micro-batch-size", "2",
                  "--", "env"], flags + ("-np",)),
                (["--global-batch-size", "64", "--micro-batch-size", "2",
                  "--micro-batches", "3", "-np", "8"],
                 flags + ("--micro-batches 3", "= 4"))):
            rc, _, err = launcher(args, *argv, "touch", marker)
            check(rc == 2 and len(err.strip().splitlines()) == 1 and
                  all(w in err for w in words) and
                  not os.path.exists(marker),
                  "%s: rc %d, stderr %r (expected it to name %s), ran: %s"
                  % (" ".join(argv), rc, err, words, os.path.exists(marker)))
        rc, _, err = launcher(args, "--", "python3", "-c", "pass",
                              env={"DPSHIM_PY_WRAP": "maybe"})
        check(rc == 2 and "DPSHIM_PY_WRAP='maybe'" in err and
              len(err.strip().splitlines()) == 1,
              "DPSHIM_PY_WRAP=maybe: rc %d, %r" % (rc, err))
    for argv in (["--bogus", "-np", "2", "true"], ["--solver", "seed"]):
        rc, _, err = launcher(args, *argv)
        check(rc == 2 and len(err.strip().splitlines()) == 1,
              "%s: rc %d, stderr %r" % (" ".join(argv), rc, err))


def real_runs(args):
    rc, out, err = run(MPIRUN + ["-np", "4", args.reftrain] + TRAIN)
    plain = [l for l in out.splitlines() if l.startswith("{")]
    check(rc == 0 and len(plain) == 1, "without the shim: rc %d %r"
          % (rc, err[-300:]))
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        rc, out, err = launcher(
            args, "--use-vlm-dp-balance", "--vlm-dp-balance-warmup-iters",
            "2", "3", "4", "--log", log, "--verify", "--adapter", "packload",
            "--",
            *MPIRUN, "-np", "4", args.reftrain, *TRAIN)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        check(rc == 0 and len(lines) == 1, "through dpshim-run: rc %d %r"
              % (rc, err[-300:]))
        if plain and lines:
            a, b = json.loads(plain[0]), json.loads(lines[0])
            check(b.get("check_errors") == 0 and
                  a.get("consumed_digest") == b.get("consumed_digest"),
                  "through dpshim-run: check_errors %s, digest %s != %s" % (
                      b.get("check_errors"), b.get("consumed_digest"),
                      a.get("consumed_digest")))
        entries = read_jsonl(log)
        check_plans_applied(entries, 3, "through dpshim-run")
        # dpshim-report on this real log: its counts are the log's, and the
        # model is the warm-up's fit.
        applied = sum(e.get("decision") == "apply" for e in entries)
        p = subprocess.run([sys.executable, args.report, log], text=True,
                           capture_output=True, timeout=120)
        check(p.returncode == 0 and "applied %d," % applied in p.stdout and
              "cost model (fitted in warm-up)" in p.stdout,
              "dpshim-report on the run's log: rc %d, %r %r (%d applied)" % (
                  p.returncode, p.stdout, p.stderr, applied))
    rc, _, _ = launcher(args, "--", *MPIRUN, "-np", "2", "false")
    check(rc != 0, "mpirun -np 2 false through dpshim-run: rc %d" % rc)
    rc, _, _ = launcher(args, "--", "sh", "-c", "exit 7")
    check(rc == 7, "sh -c 'exit 7' through dpshim-run: rc %d" % rc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--adapter", required=True,
                    help="the build tree's libdpshim_packload.so")
    ap.add_argument("--reftrain", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--python", required=True)
    args = ap.parse_args()
    dry_runs(args)
    adapters(args)
    python_dry_runs(args)
    batch_sizes(args)
    refusals(args)
    real_runs(args)
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
