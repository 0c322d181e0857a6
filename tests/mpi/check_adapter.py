#!/usr/bin/env python3
"""Integration test of the adapter example: vlmtrain over libvlmload.so under
real mpirun, balanced through libdpshim_vlm.so.

    check_adapter.py --shim libdpshim.so --adapter libdpshim_vlm.so \
                     --vlmtrain vlmtrain [--ranks 4]

Checks:
  - without any preload: every sample intact, exactly once (check_errors 0);
  - libdpshim.so alone: the shim is up (its summary prints) but balances no
    hand-off, since nothing hooks vlmload_next; same digest;
  - libdpshim.so + libdpshim_vlm.so: same digest, check_errors 0, and the
    step log shows plans applied, each with imbalance after <= before;
  - both preloaded, a non-MPI process behaves as without them.
Exit status 0 when every check holds; each failed check prints one line.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe",
          "--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"]
STEPS = 14
SHIM_ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-4",
            "DPSHIM_VERIFY": "1"}
MIN_APPLIED = 3  # of the 10 steps after the warm-up (seed 1 applies ~6)

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def run(cmd, env=None, preload=None):
    """Runs cmd; returns (rc, stdout, stderr). env entries and LD_PRELOAD
    are exported to the ranks with -x when cmd is an mpirun."""
    full_env = dict(os.environ)
    full_env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1",
                     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    full_env.update(env or {})
    if preload:
        full_env["LD_PRELOAD"] = preload
    if cmd[0] == "mpirun":
        names = list((env or {}).keys()) + (["LD_PRELOAD"] if preload else [])
        cmd = cmd[:1] + [a for n in names for a in ("-x", n)] + cmd[1:]
    p = subprocess.run(cmd, env=full_env, capture_output=True, text=True,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr


def vlmtrain(args, what, preload=None, env=None):
    """One run; returns (result json, stderr)."""
    cmd = MPIRUN + ["-np", str(args.ranks), args.vlmtrain,
                    "--steps", str(STEPS), "--seed", "1"]
    rc, out, err = run(cmd, env=env, preload=preload)
    check(rc == 0, "%s: vlmtrain exited %d: %s" % (what, rc,
                                                   err.strip()[-500:]))
    lines = [l for l in out.splitlines() if l.startswith("{")]
    check(len(lines) == 1, "%s: expected one JSON line, got %r"
          % (what, out[-300:]))
    res = json.loads(lines[-1]) if lines else {}
    check(res.get("check_errors") == 0, "%s: check_errors %s"
          % (what, res.get("check_errors")))
    return res, err


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def applied_in_summary(err):
    m = re.search(r"hand-offs balanced: (\d+) applied", err)
    return int(m.group(1)) if m else None


def check_shim_alone(args, tmp, plain):
    """The shim is up, but nothing hooks the hand-off: no plan applied."""
    log = tmp + "/alone.jsonl"
    res, err = vlmtrain(args, "libdpshim.so alone", preload=args.shim,
                        env=dict(SHIM_ENV, DPSHIM_LOG=log))
    check(res.get("consumed_digest") == plain.get("consumed_digest"),
          "libdpshim.so alone: digest %s != %s without preload"
          % (res.get("consumed_digest"), plain.get("consumed_digest")))
    check("summary" in err, "libdpshim.so alone: no summary, so the shim "
          "was not up and this check proves nothing: %r" % err[-300:])
    check(applied_in_summary(err) == 0, "libdpshim.so alone: the summary "
          "says %s hand-offs applied, expected 0" % applied_in_summary(err))
    applied = [e for e in read_log(log) if e.get("decision") == "apply"]
    check(not applied, "libdpshim.so alone: %d steps applied a plan"
          % len(applied))


def check_applied(entries):
    applied = [e for e in entries if e.get("decision") == "apply"]
    check(len(applied) >= MIN_APPLIED, "with the adapter: only %d of %d "
          "steps applied a plan" % (len(applied), STEPS))
    for e in applied:
        check(e["imbalance_after"] <= e["imbalance_before"],
              "step %d: imbalance after %g > before %g" % (
                  e["step"], e["imbalance_after"], e["imbalance_before"]))
        check(max(e["load_after"]) <= max(e["load_before"]),
              "step %d: max load rose" % e["step"])


def check_with_adapter(args, tmp, plain):
    log = tmp + "/adapter.jsonl"
    res, err = vlmtrain(args, "with the adapter",
                        preload=args.shim + ":" + args.adapter,
                        env=dict(SHIM_ENV, DPSHIM_LOG=log))
    check(res.get("consumed_digest") == plain.get("consumed_digest"),
          "with the adapter: digest %s != %s without preload"
          % (res.get("consumed_digest"), plain.get("consumed_digest")))
    entries = read_log(log)
    check(len(entries) == STEPS, "with the adapter: log has %d lines, "
          "expected %d" % (len(entries), STEPS))
    check_applied(entries)
    n = applied_in_summary(err)
    check(n is not None and n >= MIN_APPLIED, "with the adapter: the "
          "summary says %s hand-offs applied" % n)
    errors = [e["step"] for e in entries if e.get("decision") == "error"]
    check(not errors, "with the adapter: hand-offs failed at steps %s: %r"
          % (errors, err[-300:]))


def check_inert(args):
    cmd = ["bash", "-c", "echo $((6 * 7))"]
    plain = run(cmd)
    both = run(cmd, env={"DPSHIM_VLM_BALANCE": "1"},
               preload=args.shim + ":" + args.adapter)
    check(plain == both, "bash differs under both preloads: %r vs %r"
          % (plain, both))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shim", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--vlmtrain", required=True)
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args()
    check_inert(args)
    with tempfile.TemporaryDirectory() as tmp:
        plain, _ = vlmtrain(args, "without preload")
        check_shim_alone(args, tmp, plain)
        check_with_adapter(args, tmp, plain)
    print("adapter: %d failed checks" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
