#!/usr/bin/env python3
"""dpshim-sim --ahead K, end to end on a small sweep (the pricing itself is
tests/unit/test_sim_ahead.c's):
  - every JSON line (stdout and --json) has shim_on_path_ms and
    shim_on_path_share beside shim_ms and shim_share; inline (no --ahead,
    or --ahead 0) they equal the shim's, and `none` has none of either;
  - --ahead 1: on path never above the shim's time and below it for
    `default` (seconds of compute hide a millisecond's work), the step
    shorter by that; the same plans as inline (bytes moved, hand-offs);
    the summary says the share on the path;
  - with copies at 100 kB/s the work outlasts the compute: some of it stays
    on the path, less than all of it;
  - bad values: exit 2, one line naming --ahead.
    check_sim_ahead.py DPSHIM_SIM
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))
from mpitest import check, outcome  # noqa: E402

SIM = sys.argv[1]
SMALL = ["--profile", "long", "--seed", "5", "--warmup-last", "4",
         "--steps", "3", "--ranks", "8,32", "--algos", "none,default",
         "--solve-reps", "1"]


def sim(*args):
    p = subprocess.run([SIM] + list(args), capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def sweep(*args):
    """The JSON lines by (ranks, algo), the --json file's, the summary."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sim.json")
        rc, out, err = sim(*(SMALL + list(args) + ["--json", path]))
        check(rc == 0, "sweep %s: rc %d, %s" % (" ".join(args), rc,
                                                err[-400:]))
        lines = [json.loads(l) for l in out.splitlines() if l.strip()]
        with open(path) as f:
            check(json.load(f) == lines, "--json differs from stdout")
    return {(d["ranks"], d["algo"]): d for d in lines}, err


def check_inline(args):
    res, _ = sweep(*args)
    for key, d in sorted(res.items()):
        what = "%s DP %d %s" % (" ".join(args) or "inline", *key)
        check("shim_on_path_ms" in d and "shim_on_path_share" in d,
              "%s: no on-path fields" % what)
        check(d.get("shim_on_path_ms") == d["shim_ms"] and
              d.get("shim_on_path_share") == d["shim_share"],
              "%s: on path %s of %s ms" % (what, d.get("shim_on_path_ms"),
                                          d["shim_ms"]))
        if key[1] == "none":
            check(d["shim_ms"] == 0, "%s: shim time" % what)
    return res


def check_one_ahead(inline):
    res, summary = sweep("--ahead", "1")
    check("on path" in summary, "summary without the on-path share: %r"
          % summary)
    for key, d in sorted(res.items()):
        what = "--ahead 1 DP %d %s" % key
        check(d["shim_on_path_ms"] <= d["shim_ms"], "%s: on path %g > %g"
              % (what, d["shim_on_path_ms"], d["shim_ms"]))
        same = inline[key]
        check(d["bytes_moved_per_step"] == same["bytes_moved_per_step"] and
              d["applied"] == same["applied"], "%s: other plans" % what)
        if key[1] != "default":
            continue
        check(d["shim_ms"] > 0 and d["shim_on_path_ms"] < d["shim_ms"],
              "%s: on path %g of %g ms" % (what, d["shim_on_path_ms"],
                                           d["shim_ms"]))
        # the step: compute + on path + all-reduce, as inline with shim_ms
        step = d["compute_max_ms"] + d["shim_on_path_ms"] + d["allreduce_ms"]
        check(abs(d["step_ms"] - step) < 2e-3, "%s: step %g != %g"
              % (what, d["step_ms"], step))


def check_work_outlasts():
    res, _ = sweep("--ahead", "1", "--threshold", "0.1", "--memcpy-gbs",
                   "0.0001")
    d = res[(32, "default")]
    check(0 < d["shim_on_path_ms"] < d["shim_ms"],
          "slow copies: on path %g of %g ms" % (d["shim_on_path_ms"],
                                                d["shim_ms"]))


def check_bad_values():
    for value in ("-1", "x", "1.5", "65", ""):
        rc, out, err = sim("--ahead", value)
        check(rc == 2 and len(err.splitlines()) == 1 and "--ahead" in err
              and not out, "--ahead %r: rc %d, %r" % (value, rc, err))


def main():
    inline = check_inline([])
    check_inline(["--ahead", "0"])
    check_one_ahead(inline)
    check_work_outlasts()
    check_bad_values()
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
