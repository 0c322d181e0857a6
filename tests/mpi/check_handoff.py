#!/usr/bin/env python3
"""Edge cases of dpshim_balance_batch() under real mpirun: handoff_cases
hands its own batches to the preloaded shim and injects one fault per run.

    check_handoff.py GROUP --shim libdpshim.so --prog handoff_cases

GROUP picks the checks below: malformed, fields, sizes, tp2,
after_finalize, no_handoff, thread_level, ahead.

Each run: 4 ranks (8 for the TP case), 8 steps, warm-up 2-4, DPSHIM_VERIFY=1,
no DPSHIM_COEFS. The reference of each run is the same run with --plain and
no preload (the hand-off a no-op). Checks:
  - none: same samples and digest as the reference, nothing corrupt, and the
    shim applied plans (else the faults below hit nothing);
  - null-batch, null-cu-seqlens, absurd-nsamples at hand-off 3 (in the
    warm-up) and 6 (after it); fields-order, field-renamed, huge-capacity at
    6: no crash, nothing corrupt, batches unchanged at the faulty call,
    digest as the reference, the call fails on every rank, and exactly one
    stderr line "dpshim: ..." is about the fault: it names the bad world
    rank (rank 1; huge-capacity is every rank's) and what is wrong;
  - TP=2 (8 ranks), fields-order on world rank 3 (DP group 1): the line
    names rank 3 (the world rank, not its DP rank 1); group 1 fails the
    call, and group 0 with it (TP peers keep identical batches), saying
    so in a line of its own;
  - after-finalize: a hand-off after MPI_Finalize returns, nothing aborts;
  - no-handoff: DPSHIM_LOG is not created when nothing is handed off;
  - thread-level: MPI_Init_thread's provided (and MPI_Query_thread) under
    the preload are what MPI gives without it;
  - ahead: handoff_cases --ahead (each batch drawn and handed off on the
    shim's own thread, <dpshim/ahead.h>): none as above, and the summary
    says the hand-offs were balanced ahead; fields-order at 6 and
    null-batch at 3 as above (agreed, every batch untouched); ends-early
    at 5 (rank 1's loader ends: no hang, every call from 5 on fails on
    every rank, nothing corrupt, one line naming rank 1 and the end).
Every mpirun has a hard timeout: a hung run is killed (its whole session)
and reported as "hang". Exit status 0 when every check holds.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))

from mpitest import HANG_RC, MPIRUN, check, failures, run

STEPS = 8
RANKS = 4
SHIM_ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-4",
            "DPSHIM_VERIFY": "1"}
RUN_TIMEOUT = 60   # seconds per mpirun; a run takes ~1-2 s
TOTAL_BUDGET = 480  # seconds for all runs: hangs must not outlast meson's 600
DEADLINE = time.monotonic() + TOTAL_BUDGET

# The faults the shim must reject, what its one line must name (each group:
# at least one of its words), and the hand-offs they are injected at.
FAULTS = [
    ("null-batch", [["batch"]], (3, 6)),
    ("null-cu-seqlens", [["cu_seqlens"]], (3, 6)),
    ("absurd-nsamples", [["nsamples"]], (3, 6)),
    ("fields-order", [["tokens", "labels"]], (6,)),
    ("field-renamed", [["labels", "targets"]], (6,)),
    ("huge-capacity", [["tokens"], ["capacity_rows", "int32"]], (6,)),
]


class Run:
    """One mpirun: rc, stdout, stderr, the result line, hang."""

    def __init__(self, rc, out, err, hang):
        self.rc, self.out, self.err, self.hang = rc, out, err, hang
        lines = [l for l in out.splitlines()
                 if l.startswith("{") and ('"samples"' in l or
                                           '"provided"' in l)]
        self.res = json.loads(lines[-1]) if lines else None


def mpirun(args, ranks, prog_args, env, preload, what):
    """Runs handoff_cases under mpirun with env exported; a Run."""
    left = int(DEADLINE - time.monotonic())
    if not check(left > 5, "%s: not run, the test's %d s are spent"
                 % (what, TOTAL_BUDGET)):
        return Run(None, "", "", True)
    rc, out, err = run(MPIRUN + ["-np", str(ranks), args.prog] + prog_args,
                       env=env, preload=preload,
                       timeout=min(RUN_TIMEOUT, left))
    if rc == HANG_RC:
        print("  (%s hung; its stderr ends: %r)" % (what, err[-300:]))
        return Run(None, out, err, True)
    return Run(rc, out, err, False)


EXTRA = []  # handoff_cases arguments of every run of the group


def case_args(case, at=None, bad=None):
    a = ["--steps", str(STEPS), "--case", case] + EXTRA
    a += ["--at", str(at)] if at else []
    return a + (["--bad-rank", str(bad)] if bad is not None else [])


def reference(args, prog_args, what, ranks=RANKS, env=None):
    """The same run without the preload, the hand-off a no-op."""
    r = mpirun(args, ranks, prog_args + ["--plain"], env or {}, None,
               what + ", reference")
    return r if completed(r, what + ", reference") else None


def shim_run(args, prog_args, what, ranks=RANKS, env=None):
    return mpirun(args, ranks, prog_args, dict(SHIM_ENV, **(env or {})),
                  args.shim, what)


def completed(r, what):
    """Checks that the run ended well (no crash, nothing corrupt); returns
    whether it left a result line to check further."""
    if r.hang:
        return False
    check(r.rc == 0 and "Segmentation" not in r.err,
          "%s: mpirun exited %s: %s" % (what, r.rc, r.err.strip()[-400:]))
    if not check(r.res is not None, "%s: no result line in %r"
                 % (what, r.out[-300:])):
        return False
    check(r.res["corrupt"] == 0, "%s: %d corrupt (%d samples not intact, %d "
          "changes across the faulty hand-off)" % (
              what, r.res["corrupt"], r.res["not_intact"], r.res["changed"]))
    return True


def same_samples(r, ref, what):
    if ref is None or r.res is None:
        return
    check((r.res["samples"], r.res["digest"]) ==
          (ref.res["samples"], ref.res["digest"]),
          "%s: %s samples, digest %s; without the preload %s, %s"
          % (what, r.res["samples"], r.res["digest"], ref.res["samples"],
             ref.res["digest"]))


def fault_lines(err, words):
    """The shim's lines about the fault: those that name a rank or what is
    wrong. Not the summary, nor a note such as the clock's."""
    return [l for l in err.splitlines() if l.startswith("dpshim:") and
            (re.search(r"\brank \d+\b", l) or any(w in l for w in words))]


def check_message(err, bad, words, what):
    """Exactly one line about the fault: it names the bad world rank (any
    when every rank is bad: bad is None) and what is wrong."""
    lines = fault_lines(err, words[0])
    if not check(len(lines) == 1, "%s: expected one 'dpshim:' line about "
                 "the fault, got %d: %r" % (what, len(lines), lines)):
        return
    line = lines[0]
    check(bad is None or re.search(r"\brank %d\b" % bad, line) is not None,
          "%s: the line does not name world rank %s: %r" % (what, bad, line))
    for group in words:
        check(any(w in line for w in group), "%s: the line names none of %s: "
              "%r" % (what, "/".join(group), line))


def check_failed_call(r, at, failing, what):
    """Call `at` returned < 0 on the ranks in `failing`, >= 0 elsewhere."""
    if r.res is None:
        return
    rc = [calls[at - 1] for calls in r.res["rc_all"]]
    bad = [q for q, v in enumerate(rc) if (v < 0) != (q in failing)]
    check(not bad, "%s: hand-off %d returned %s on ranks 0..%d; expected < 0 "
          "on %s, >= 0 elsewhere" % (what, at, rc, len(rc) - 1,
                                     sorted(failing)))
    check(r.res["rc"][at - 1] < 0 or 0 not in failing,
          "%s: rank 0's rc for hand-off %d is %d" % (what, at,
                                                     r.res["rc"][at - 1]))


def applied_in_summary(err):
    m = re.search(r"hand-offs balanced: (\d+) applied", err)
    return int(m.group(1)) if m else None


def check_none(args):
    what = "none"
    ref = reference(args, case_args("none"), what)
    r = shim_run(args, case_args("none"), what)
    if not completed(r, what):
        return ref
    same_samples(r, ref, what)
    check(all(v >= 0 for v in r.res["rc"]), "%s: rc %s" % (what, r.res["rc"]))
    n = applied_in_summary(r.err)
    check(n is not None and n >= 1, "%s: the shim applied %s plans, so the "
          "faults after the warm-up hit no plan: %r" % (what, n, r.err[-300:]))
    return ref


def check_fault(args, none_ref, case, words, at):
    what = "%s at hand-off %d" % (case, at)
    prog_args = case_args(case, at, 1)
    # A NULL batch holds no samples for its call: its own reference.
    ref = reference(args, prog_args, what) if case == "null-batch" \
        else none_ref
    r = shim_run(args, prog_args, what)
    if not completed(r, what):
        return
    same_samples(r, ref, what)
    check_failed_call(r, at, set(range(RANKS)), what)
    # huge-capacity is every rank's fault: any rank may be named.
    check_message(r.err, None if case == "huge-capacity" else 1, words, what)


def check_tp2(args):
    """DP groups {0,2,4,6} and {1,3,5,7}: only group 1 has the fault, but
    group 0 holds the same samples (TP peers) and must not move them
    alone."""
    what, env, at = "TP=2, fields-order on rank 3", {"DPSHIM_TP_SIZE": "2"}, 6
    ref = reference(args, case_args("none"), what, 8, env)
    r = shim_run(args, case_args("fields-order", at, 3), what, 8, env)
    if not completed(r, what):
        return
    same_samples(r, ref, what)
    check_failed_call(r, at, set(range(8)), what)
    check_message(r.err, 3, [["tokens", "labels"]], what)
    peer = [l for l in r.err.splitlines() if "peer" in l]
    check(len(peer) == 1, "%s: expected group 0 to say once that a peer "
          "group failed, got %r" % (what, peer))


def check_after_finalize(args):
    what = "after-finalize"
    r = shim_run(args, case_args("after-finalize"), what)
    if r.hang:
        return
    check(r.rc == 0, "%s: mpirun exited %s: %s" % (what, r.rc,
                                                  r.err.strip()[-400:]))
    bad = [w for w in ("abort", "MPI_ERR", "Segmentation")
           if w.lower() in r.err.lower()]
    check(not bad, "%s: stderr says %s: %s" % (what, bad,
                                               r.err.strip()[-400:]))
    back = r.out.count('"after_finalize_rc"')
    check(back == RANKS, "%s: %d of %d ranks returned from the call"
          % (what, back, RANKS))


def check_no_handoff(args, tmp):
    what, log = "no-handoff", os.path.join(tmp, "log.jsonl")
    r = shim_run(args, case_args("no-handoff"), what, env={"DPSHIM_LOG": log})
    if r.hang:
        return
    check(r.rc == 0, "%s: mpirun exited %s: %s" % (what, r.rc,
                                                  r.err.strip()[-400:]))
    check(not os.path.exists(log), "%s: DPSHIM_LOG %s was created, with no "
          "step to log" % (what, log))


def thread_result(r, what):
    if r.hang:
        return None
    ok = check(r.rc == 0 and r.res is not None, "%s: mpirun exited %s, "
               "result %r: %s" % (what, r.rc, r.out[-200:],
                                  r.err.strip()[-300:]))
    return r.res if ok else None


def check_thread_level(args, level):
    what = "thread-level %d" % level
    prog_args = ["--case", "thread-level", "--required", str(level)]
    plain = thread_result(mpirun(args, RANKS, prog_args, {}, None,
                                 what + ", without the preload"), what)
    shim = thread_result(shim_run(args, prog_args, what), what)
    loader = thread_result(shim_run(args, prog_args, what + ", loader thread",
                                    env={"DPSHIM_LOADER_THREAD": "1"}), what)
    if plain is None:
        return
    if shim is not None:
        check((shim["provided"], shim["query"]) ==
              (plain["provided"], plain["query"]),
              "%s: under the preload provided %d, query %d; without it %d, %d"
              % (what, shim["provided"], shim["query"], plain["provided"],
                 plain["query"]))
    if loader is not None:
        check(loader["provided"] == plain["provided"],
              "%s, DPSHIM_LOADER_THREAD=1: provided %d; without the preload %d"
              % (what, loader["provided"], plain["provided"]))


def faults(cases):
    """The checks of the FAULTS in `cases`, against one fault-free run."""
    def run(args):
        none_ref = check_none(args)
        for case, words, ats in FAULTS:
            if case in cases:
                for at in ats:
                    check_fault(args, none_ref, case, words, at)
    return run


def group_ahead(args):
    EXTRA.append("--ahead")
    none_ref = check_none(args)
    r = shim_run(args, case_args("none"), "ahead, none")
    check(r.hang or "balancing ahead, beside the compute" in r.err,
          "ahead: the summary has no 'balancing ahead' line: %r"
          % r.err[-400:])
    for case, words, ats in FAULTS:
        if case in ("fields-order", "null-batch"):
            check_fault(args, none_ref, case, words, ats[0])
    what, at = "ahead, rank 1's loader ends at 5", 5
    ref = reference(args, case_args("ends-early", at, 1), what)
    r = shim_run(args, case_args("ends-early", at, 1), what)
    if not completed(r, what):
        return
    same_samples(r, ref, what)
    for call in range(at, STEPS + 1):
        check_failed_call(r, call, set(range(RANKS)), what)
    check_message(r.err, 1, [["ended"]], what)


def group_no_handoff(args):
    with tempfile.TemporaryDirectory() as tmp:
        check_no_handoff(args, tmp)


def group_thread_level(args):
    for level in (0, 1, 2):
        check_thread_level(args, level)


# One meson test each (tests/mpi/meson.build), so that a failure names the
# case it breaks.
GROUPS = {
    "malformed": faults(("null-batch", "null-cu-seqlens", "absurd-nsamples")),
    "fields": faults(("fields-order", "field-renamed")),
    "sizes": faults(("huge-capacity",)),  # what int32 offsets cannot hold
    "tp2": check_tp2,                     # errors in any DP group
    "after_finalize": check_after_finalize,
    "no_handoff": group_no_handoff,       # no empty DPSHIM_LOG
    "thread_level": group_thread_level,   # MPI_Init_thread's provided
    "ahead": group_ahead,                 # the shim's own thread
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("group", choices=sorted(GROUPS))
    p.add_argument("--shim", required=True)
    p.add_argument("--prog", required=True)
    args = p.parse_args()
    GROUPS[args.group](args)
    print("handoff %s: %d failed checks" % (args.group, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
