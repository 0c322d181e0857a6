#!/usr/bin/env python3
"""Integration tests: reftrain under real mpirun, with and without libdpshim.so.

    check_reftrain.py SCENARIO --shim libdpshim.so --reftrain reftrain

Scenarios:
  inert       the preload changes nothing in non-MPI processes and mpirun
  balance     N ranks (--ranks): every sample id exactly once per step, the
              same ids per step and the same digest as without the shim,
              imbalance after <= before, and some plans applied
  tp2         8 ranks as TP=2 x DP=4: TP peers get identical batches, same
              digest as 4 ranks without the shim
  badconfig   a bad DPSHIM_* value: one line naming it, the trainer runs on
              untouched
  thread      hand-offs from a loader thread (MPI_THREAD_MULTIPLE): samples
              exactly once, same digest, plans applied, no warm-up fit
Exit status 0 when every check holds; each failed check prints one line.
"""
import argparse
import collections
import json
import sys
import tempfile

from mpitest import (MPIRUN, check, check_plans_applied, failures, read_jsonl,
                     run)

# Short emulated steps, the `long` profile (where imbalance is large), and a
# short warm-up so that most steps are balanced.
TRAIN = ["--mode", "emulate", "--profile", "long", "--time-scale", "0.02",
         "--seed", "5"]
SHIM_ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-4",
            "DPSHIM_VERIFY": "1"}





def reftrain(args, ranks, steps, shim=None, env=None, ids=None, log=None,
             extra=()):
    """One reftrain run; returns (result json, stderr)."""
    env = dict(env or {})
    if log:
        env["DPSHIM_LOG"] = log
    cmd = MPIRUN + ["-np", str(ranks), args.reftrain, "--steps", str(steps),
                    "--check"] + TRAIN + list(extra)
    if ids:
        cmd += ["--ids-out", ids]
    rc, out, err = run(cmd, env=env, preload=shim)
    check(rc == 0, "reftrain exited %d: %s" % (rc, err.strip()[-500:]))
    lines = [l for l in out.splitlines() if l.startswith("{")]
    check(len(lines) == 1, "expected one JSON line, got %r" % out[-300:])
    return (json.loads(lines[-1]) if lines else {}), err


def ids_by_step(path):
    """{step: Counter(id)} over all DP slots, from --ids-out."""
    steps = collections.defaultdict(collections.Counter)
    with open(path) as f:
        for line in f:
            fields = line.split()
            steps[int(fields[0])].update(fields[2:])
    return steps



def scenario_inert(args):
    for cmd in (["bash", "-c", "echo $((6 * 7))"], ["mpirun", "--version"]):
        plain = run(cmd)
        shimmed = run(cmd, env={"DPSHIM_VLM_BALANCE": "1"}, preload=args.shim)
        check(plain == shimmed, "%s differs under the preload: %r vs %r"
              % (" ".join(cmd), plain, shimmed))
    rc, _, err = run(["bash", "-c", "true"], preload=args.shim)
    check(rc == 0 and err == "", "bash -c true under the preload: rc %d, "
          "stderr %r" % (rc, err))


def scenario_balance(args):
    steps, ranks = 10, args.ranks
    with tempfile.TemporaryDirectory() as tmp:
        plain_ids, on_ids = tmp + "/plain.ids", tmp + "/on.ids"
        log = tmp + "/steps.jsonl"
        plain, _ = reftrain(args, ranks, steps, ids=plain_ids)
        off, _ = reftrain(args, ranks, steps, shim=args.shim)
        on, err = reftrain(args, ranks, steps, shim=args.shim, env=SHIM_ENV,
                           ids=on_ids, log=log)
        for name, res in (("shim off", off), ("shim on", on)):
            check(res.get("consumed_digest") == plain.get("consumed_digest"),
                  "digest %s %s != without the shim %s" % (
                      name, res.get("consumed_digest"),
                      plain.get("consumed_digest")))
        before, after = ids_by_step(plain_ids), ids_by_step(on_ids)
        for step, ids in after.items():
            dup = [i for i, n in ids.items() if n > 1]
            check(not dup, "step %d: ids delivered twice: %s" % (step, dup[:5]))
            check(ids == before.get(step), "step %d: other ids than without "
                  "the shim" % step)
        entries = read_jsonl(log)
        check(len(entries) == steps, "log has %d lines, expected %d"
              % (len(entries), steps))
        check_plans_applied(entries, 3, "balance")
        check("summary" in err, "no summary on rank 0's stderr")


def scenario_tp2(args):
    plain, _ = reftrain(args, 4, 8)
    env = dict(SHIM_ENV, DPSHIM_TP_SIZE="2")
    on, err = reftrain(args, 8, 8, shim=args.shim, env=env,
                       extra=["--tp", "2"])
    # reftrain --check compares the batches of model-parallel peers.
    check(on.get("check_errors", 1) == 0, "TP peers or samples differ")
    check(on.get("consumed_digest") == plain.get("consumed_digest"),
          "TP=2 digest differs from 4 ranks without the shim")
    check("2 DP groups of 4" in err, "expected 2 DP groups of 4 ranks: %s"
          % err[-300:])


def scenario_badconfig(args):
    plain, _ = reftrain(args, 4, 4)
    env = dict(SHIM_ENV, DPSHIM_MAX_LEN_RATIO="abc")
    bad, err = reftrain(args, 4, 4, shim=args.shim, env=env)
    lines = [l for l in err.splitlines() if "DPSHIM_MAX_LEN_RATIO" in l]
    check(len(lines) == 1 and "'abc'" in lines[0] and "expected" in lines[0],
          "expected one line naming DPSHIM_MAX_LEN_RATIO='abc': %r" % err)
    check(bad.get("consumed_digest") == plain.get("consumed_digest"),
          "digest changed with a bad configuration")


def scenario_thread(args):
    steps = 8
    with tempfile.TemporaryDirectory() as tmp:
        plain, _ = reftrain(args, 4, steps, extra=["--loader-thread"])
        # No warm-up fit from a loader thread: the model comes from the
        # environment (roughly the emulated GPU's, in microseconds).
        env = dict(SHIM_ENV, DPSHIM_COEFS="0.000375,3.1,40")
        log = tmp + "/steps.jsonl"
        on, err = reftrain(args, 4, steps, shim=args.shim, env=env, log=log,
                           extra=["--loader-thread"])
        check(on.get("check_errors", 1) == 0, "samples lost, duplicated or "
              "damaged with a loader thread")
        check(on.get("consumed_digest") == plain.get("consumed_digest"),
              "digest differs with a loader thread")
        check_plans_applied(read_jsonl(log), 3, "loader thread")
        _, err = reftrain(args, 4, 5, shim=args.shim, env=SHIM_ENV,
                          extra=["--loader-thread"])
        check("loader thread" in err and "no warm-up fit" in err,
              "expected the no-fit message for a loader thread: %r"
              % err[-400:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario",
                   choices=["inert", "balance", "tp2", "badconfig",
                            "thread"])
    p.add_argument("--shim", required=True)
    p.add_argument("--reftrain", required=True)
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args()
    globals()["scenario_" + args.scenario](args)
    print("%s: %d failed checks" % (args.scenario, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
