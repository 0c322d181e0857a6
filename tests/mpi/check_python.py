#!/usr/bin/env python3
"""The Python package (python/dpshim) under mpirun:
  py_handoff.py   NumPy and torch batches balanced in place (each sample
                  once over the ranks, every sample's rows intact, some
                  moved); a batch one rank cannot describe: TypeError there,
                  dpshim.Error(EINVAL) on the others, nothing moved, no
                  hang; without the preload nothing is done;
  train.py        the PyTorch + mpi4py example at 4 ranks through its
                  BalancedLoader: the same samples each step as without the
                  shim, each exactly once, plans applied, the loss of every
                  step equal up to summation order; with the shim preloaded
                  and balancing off, every rank's samples as without it.
Skipped (77) without Debian's python3-torch and python3-mpi4py.

    check_python.py --run DPSHIM_RUN --shim LIBDPSHIM --python DIR
                    --train TRAIN_PY --handoff PY_HANDOFF
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

from mpitest import (MPIRUN, check, check_plans_applied, outcome,
                     read_jsonl, run)

PY = "/usr/bin/python3"
SHIM = ["--use-vlm-dp-balance", "--vlm-dp-balance-warmup-iters", "2", "3",
        "4"]


def launch(args, flags, cmd, ranks, env=None, timeout=300):
    """cmd under mpirun at `ranks`, through dpshim-run with `flags` (None:
    plain mpirun, no preload); returns (rc, stdout, stderr)."""
    mpi = MPIRUN + ["-x", "PYTHONPATH", "-np", str(ranks), PY] + cmd
    full = dict(env or {}, PYTHONPATH=args.python)
    if flags is None:
        return run(mpi, env=full, timeout=timeout)
    return run([args.run, "--lib", args.shim] + flags + ["--"] + mpi,
               env=full, timeout=timeout)


def json_lines(out):
    """The JSON objects in out: ranks' lines may run into one another when
    mpirun forwards them."""
    objs, dec = [], json.JSONDecoder()
    for line in out.splitlines():
        k = line.find("{")
        while k >= 0:
            try:
                obj, end = dec.raw_decode(line, k)
            except ValueError:
                break
            objs.append(obj)
            k = line.find("{", end)
    return objs


def handoffs(args):
    rc, out, err = launch(args, ["--use-vlm-dp-balance", "--coefs", "0,1,0",
                                 "--trigger-threshold", "0"],
                          [args.handoff], 3)
    ranks = sorted(json_lines(out), key=lambda r: r["rank"])
    if not check(rc == 0 and len(ranks) == 3, "py_handoff: rc %d, %r" % (
            rc, err[-500:])):
        return
    for k in (0, 2):
        calls = [r["calls"][k] for r in ranks]
        before = collections.Counter(i for c in calls for i in c["before"])
        after = collections.Counter(i for c in calls for i in c["after"])
        check(all(c["outcome"] == "ok" and c["intact"] for c in calls) and
              before == after and max(after.values()) == 1 and
              any(c["before"] != c["after"] for c in calls),
              "py_handoff call %d (%s): %s" % (k, "torch" if k else "numpy",
                                               calls))
    calls = [r["calls"][1] for r in ranks]
    check([c["outcome"] for c in calls] == ["Error -22", "TypeError",
                                            "Error -22"] and
          all(c["before"] == c["after"] and c["intact"] for c in calls) and
          "rank 1: cu_seqlens" in err,
          "py_handoff, a batch rank 1 cannot describe: %s, %r" % (calls,
                                                                   err[-300:]))
    rc, out, err = launch(args, None, [args.handoff], 3)
    ranks = json_lines(out)
    check(rc == 0 and len(ranks) == 3 and all(
        not r["available"] and all(c["before"] == c["after"] and
                                   c["outcome"] == "ok" for c in r["calls"])
        for r in ranks), "py_handoff without the preload: %r %r" % (
            ranks, err[-300:]))


def ids_by_step(path):
    """{step: {rank: [ids]}} from train.py --ids-out."""
    steps = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            w = line.split()
            steps[int(w[0])][int(w[1])] = w[2:]
    return steps


def training(args):
    steps = 10
    with tempfile.TemporaryDirectory() as tmp:
        res = {}
        for name, flags in (("plain", None), ("shim", SHIM),
                            ("off", ["--vlm-balance=0"])):
            ids = os.path.join(tmp, name + ".ids")
            log = os.path.join(tmp, name + ".jsonl")
            rc, out, err = launch(
                args, None if flags is None else flags + ["--log", log],
                [args.train, "--steps", str(steps), "--ids-out", ids], 4)
            lines = json_lines(out)
            check(rc == 0 and len(lines) == steps + 1,
                  "train.py %s: rc %d, %r" % (name, rc, err[-500:]))
            res[name] = (lines, ids_by_step(ids) if os.path.exists(ids)
                         else {}, read_jsonl(log))
            if lines:
                print("train.py %s: %s" % (name, json.dumps(lines[-1])))
        plain, shim, off = res["plain"], res["shim"], res["off"]
        for step in range(1, steps + 1):
            p, s = plain[1].get(step, {}), shim[1].get(step, {})
            everyone = [i for ids in s.values() for i in ids]
            check(sorted(everyone) == sorted(
                i for ids in p.values() for i in ids) and
                len(everyone) == len(set(everyone)),
                "step %d: other samples with the shim, or some twice" % step)
            check(off[1].get(step) == p, "step %d: balancing off, yet the "
                  "ranks' samples differ from the plain run's" % step)
        check_plans_applied(shim[2], 3, "train.py with the shim")
        check(any(e.get("decision") == "apply" and e.get("bytes_moved", 0)
                  for e in shim[2]), "train.py: no plan moved a sample")
        for a, b in zip(plain[0][:steps], shim[0][:steps]):
            check(a["tokens"] == b["tokens"] and
                  abs(a["loss"] - b["loss"]) <= 1e-9 * abs(a["loss"]),
                  "step %d: loss %r without the shim, %r with it" % (
                      a["step"], a["loss"], b["loss"]))


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--run", "--shim", "--python", "--train", "--handoff"):
        ap.add_argument(opt, required=True)
    args = ap.parse_args()
    probe = subprocess.run([PY, "-c", "import torch, mpi4py, numpy"],
                           capture_output=True)
    if probe.returncode != 0:
        print("SKIP: %s lacks torch or mpi4py (apt-get install python3-torch "
              "python3-mpi4py)" % PY)
        return 77
    handoffs(args)
    training(args)
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
