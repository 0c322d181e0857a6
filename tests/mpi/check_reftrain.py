#!/usr/bin/env python3
"""Integration tests: reftrain under real mpirun, with and without libdpshim.so.

    check_reftrain.py SCENARIO --preload LIBDPSHIM:ADAPTERS --reftrain reftrain

Scenarios:
  inert       the preload changes nothing in non-MPI processes and mpirun
  balance     N ranks (--ranks): every sample id exactly once per step, the
              same ids per step and the same digest as without the shim,
              imbalance after <= before, and some plans applied
  tp2         8 ranks as TP=2 x DP=4: TP peers get identical batches, same
              digest as 4 ranks without the shim
  badconfig   a bad DPSHIM_* value: one line naming it, the trainer runs on
              untouched
  thread      hand-offs from a loader thread (DPSHIM_LOADER_THREAD=1):
              samples exactly once, same digest, plans applied, no warm-up
              fit
The scenarios below give every mpirun HANG_S seconds; past that, the run is
killed and a "hang:" line says so.
  stray_self  reftrain --stray-collective self (an MPI_Allreduce on
              MPI_COMM_SELF after each hand-off, not the gradient sync): no
              hang, same digest, one log line per step, plans applied
  stray_half  the same on a communicator of half the ranks (the others make
              no such call)
  prefetch    a loader thread running 1, 2, 3 batches ahead
              (DPSHIM_LOADER_THREAD=1), each without and with DPSHIM_COEFS:
              no hang, same digest, every step's ids exactly once and as
              without the shim, no failed hand-off; plans applied with
              DPSHIM_COEFS (without, the cost is linear: nothing to move)
  nonblocking_sync
              the gradient sync as MPI_Iallreduce buckets ended by MPI_Wait,
              MPI_Waitall or MPI_Testall: one log line per step (each step
              is seen ending), the warm-up fit ("fitted cost"), plans applied
              after the warm-up, same digest
  thread_level
              balancing on, DPSHIM_LOADER_THREAD unset: reftrain's
              thread_level (MPI_Init, and MPI_Init_thread with
              --loader-thread) as without the preload; with
              DPSHIM_LOADER_THREAD=1 and --loader-thread it balances
  thread_without_setting
              a prefetching loader thread, balancing on, DPSHIM_LOADER_THREAD
              unset: no hang, same digest, one stderr line naming
              DPSHIM_LOADER_THREAD
  log_unwritable
              DPSHIM_LOG=/dev/full: runs on, same digest, one stderr line
              naming DPSHIM_LOG
  summary_shares
              every percentage of rank 0's summary at MPI_Finalize lies in
              [0, 100]; also with a prefetching loader thread
The gradient sync outside MPI (reftrain --sync shm: shared memory and a
process-shared barrier, no MPI call in the steps), DPSHIM_STEP left at its
default (auto). Each run is bounded by HANG_S; the step count is the
summary's ("dpshim: summary: N steps").
  shm_micro_batches
              --micro-batches 1, 2, 3 with DPSHIM_MICRO_BATCHES alike: the
              digest of the run without the shim, samples intact, as many
              steps as --steps, plans applied; and the control: with
              DPSHIM_STEP=sync nothing can be balanced, and the summary says
              so ("nothing is balanced"), applying none
  shm_chatter reftrain --chatter 2 beside it (a coordinator thread's
              MPI_Allreduce every 2 ms on a duplicate of MPI_COMM_WORLD):
              no hang, the digest, as many steps as --steps (the chatter's
              hundreds of all-reduces are not steps), the chatter ran
  shm_loss_allreduce
              reftrain --loss-allreduce beside it (an MPI_Allreduce of the
              loss on MPI_COMM_WORLD after the sync): no hang, the digest,
              as many steps as --steps, the loss summed as without the shim
  shm_chatter_loss
              both at once
Exit status 0 when every check holds; each failed check prints one line.
"""
import argparse
import collections
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))

from mpitest import (HANG_RC, MPIRUN, check, check_plans_applied, failures,
                     read_jsonl, run)

# Short emulated steps, the `long` profile (where imbalance is large), and a
# short warm-up so that most steps are balanced.
TRAIN = ["--mode", "emulate", "--profile", "long", "--time-scale", "0.02",
         "--seed", "5"]
SHIM_ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-4",
            "DPSHIM_VERIFY": "1"}
# Seconds each mpirun of the newer scenarios may take before it counts as a
# hang (they take a few seconds); the older ones keep run()'s default.
HANG_S = 120
# meson gives a test 600 s: a scenario whose runs all hang must still end
# with its own report before that, so later runs get what is left.
DEADLINE = time.monotonic() + 540


def hang_timeout():
    """Seconds the next run of a newer scenario may take."""
    return max(5, min(HANG_S, int(DEADLINE - time.monotonic())))


# A cost model for runs whose hand-offs come from a loader thread, where
# the shim may not fit one: attention-heavy (len^2 weighs in from len ~8000,
# as in the emulated GPU), so that the `long` profile's packs are unequal.
THREAD_COEFS = "1,8000,0"
# Ranks of the newer scenarios, and steps: the warm-up is 2-4, so steps
# 5-10 may apply a plan.
RANKS, STEPS = 4, 10


def reftrain(args, ranks, steps, shim=None, env=None, ids=None, log=None,
             extra=(), timeout=600, what="reftrain"):
    """One reftrain run; returns (result json, stderr). A hang or a failed
    exit returns what the run printed, with a failed check naming `what`."""
    env = dict(env or {})
    if log:
        env["DPSHIM_LOG"] = log
    cmd = MPIRUN + ["-np", str(ranks), args.reftrain, "--steps", str(steps),
                    "--check"] + TRAIN + list(extra)
    if ids:
        cmd += ["--ids-out", ids]
    rc, out, err = run(cmd, env=env, preload=shim, timeout=timeout)
    if rc == HANG_RC:
        print("  (%s hung; its stderr ends: %r)" % (what, err[-300:]))
        return {}, err
    check(rc == 0, "%s: reftrain exited %d: %s" % (what, rc,
                                                   err.strip()[-500:]))
    lines = [l for l in out.splitlines() if l.startswith("{")]
    check(len(lines) == 1, "%s: expected one JSON line, got %r"
          % (what, out[-300:]))
    return (json.loads(lines[-1]) if lines else {}), err


def plain_run(args, extra=(), ids=None, steps=STEPS):
    """reftrain without the preload: the reference digest and ids."""
    res, _ = reftrain(args, RANKS, steps, ids=ids, extra=extra,
                      timeout=hang_timeout(), what="without the shim")
    check("consumed_digest" in res, "no reference digest without the shim")
    return res


def shim_run(args, what, env, extra=(), ids=None, log=None, steps=STEPS):
    """reftrain under the preload, with the newer scenarios' timeout."""
    return reftrain(args, RANKS, steps, shim=args.preload, env=env, ids=ids,
                    log=log, extra=extra, timeout=hang_timeout(),
                    what=what)


def check_same_result(what, res, plain):
    """Every sample intact and exactly once (reftrain --check), and the
    digest of the run without the shim. Silent when the run gave no result:
    its hang or exit status is said already."""
    if not res:
        return
    check(res.get("check_errors") == 0, "%s: check_errors %s (samples lost, "
          "duplicated or damaged)" % (what, res.get("check_errors")))
    check(res.get("consumed_digest") == plain.get("consumed_digest"),
          "%s: digest %s != without the shim %s" % (
              what, res.get("consumed_digest"), plain.get("consumed_digest")))


def check_one_line_per_step(what, entries, steps):
    """DPSHIM_LOG of one DP group: one line for each step, none twice."""
    seen = collections.Counter(e.get("step") for e in entries)
    check(len(entries) == steps and len(seen) == steps,
          "%s: log has %d lines for %d distinct steps, expected one for "
          "each of %d steps" % (what, len(entries), len(seen), steps))


def check_ids_per_step(what, plain_ids, ids):
    """--ids-out: every step's ids exactly once, and those of the run
    without the shim."""
    before, after = ids_by_step(plain_ids), ids_by_step(ids)
    check(sorted(after) == sorted(before), "%s: ids for steps %s, expected "
          "%s" % (what, sorted(after), sorted(before)))
    for step, got in sorted(after.items()):
        dup = [i for i, n in got.items() if n > 1]
        check(not dup, "%s, step %d: ids delivered twice: %s"
              % (what, step, dup[:5]))
        check(got == before.get(step), "%s, step %d: other ids than without "
              "the shim" % (what, step))


def lines_naming(err, name):
    """The stderr lines that mention name."""
    return [l for l in err.splitlines() if name in l]


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
        shimmed = run(cmd, env={"DPSHIM_VLM_BALANCE": "1"}, preload=args.preload)
        check(plain == shimmed, "%s differs under the preload: %r vs %r"
              % (" ".join(cmd), plain, shimmed))
    rc, _, err = run(["bash", "-c", "true"], preload=args.preload)
    check(rc == 0 and err == "", "bash -c true under the preload: rc %d, "
          "stderr %r" % (rc, err))


def scenario_balance(args):
    steps, ranks = 10, args.ranks
    with tempfile.TemporaryDirectory() as tmp:
        plain_ids, on_ids = tmp + "/plain.ids", tmp + "/on.ids"
        log = tmp + "/steps.jsonl"
        plain, _ = reftrain(args, ranks, steps, ids=plain_ids)
        off, _ = reftrain(args, ranks, steps, shim=args.preload)
        on, err = reftrain(args, ranks, steps, shim=args.preload, env=SHIM_ENV,
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
    on, err = reftrain(args, 8, 8, shim=args.preload, env=env,
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
    bad, err = reftrain(args, 4, 4, shim=args.preload, env=env)
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
        # environment (roughly the emulated GPU's, in microseconds). A
        # loader thread must be declared (thread_without_setting checks
        # what happens when it is not).
        threaded = dict(SHIM_ENV, DPSHIM_LOADER_THREAD="1")
        env = dict(threaded, DPSHIM_COEFS="0.000375,3.1,40")
        log = tmp + "/steps.jsonl"
        on, err = reftrain(args, 4, steps, shim=args.preload, env=env, log=log,
                           extra=["--loader-thread"])
        check(on.get("check_errors", 1) == 0, "samples lost, duplicated or "
              "damaged with a loader thread")
        check(on.get("consumed_digest") == plain.get("consumed_digest"),
              "digest differs with a loader thread")
        check_plans_applied(read_jsonl(log), 3, "loader thread")
        # Without DPSHIM_COEFS: the loader's batches are consumed at the
        # MPI sync, so the warm-up fits as inline, and plans apply after.
        log = tmp + "/fit.jsonl"
        on, err = reftrain(args, 4, steps, shim=args.preload,
                           env=dict(threaded, DPSHIM_VERBOSE="1"), log=log,
                           extra=["--loader-thread"])
        check(on.get("consumed_digest") == plain.get("consumed_digest"),
              "digest differs with a loader thread, fitted")
        check("fitted cost" in err and "no warm-up fit" not in err,
              "expected a warm-up fit with a loader thread: %r" % err[-400:])
        after = [e for e in read_jsonl(log) if e.get("step", 0) > 4]
        check_plans_applied(after, 2, "loader thread, fitted")


def stray(args, kind):
    """--stray-collective kind under the shim: an MPI_Allreduce on another
    communicator is no gradient sync, so steps end as without it."""
    extra = ["--stray-collective", kind]
    what = "stray collective on %s" % kind
    with tempfile.TemporaryDirectory() as tmp:
        plain = plain_run(args, extra)
        log = tmp + "/steps.jsonl"
        on, _ = shim_run(args, what, SHIM_ENV, extra, log=log)
        check_same_result(what, on, plain)
        if not on:
            return  # the hang or the exit status is said already
        entries = read_jsonl(log)
        check_one_line_per_step(what, entries, STEPS)
        check_plans_applied(entries, 3, what)
        check_compute_seen(what, entries)


def check_compute_seen(what, entries):
    """Steps end at the real sync: the emulated GPU's time (tens of ms per
    step here) is each rank's compute. A stray call taken for the sync would
    end that rank's steps at the hand-off, with ~0 compute."""
    ranks = max((len(e.get("compute_ms", [])) for e in entries), default=0)
    for r in range(ranks):
        ms = sorted(e["compute_ms"][r] for e in entries
                    if len(e.get("compute_ms", [])) > r)
        check(ms[len(ms) // 2] >= 5, "%s: rank %d's median compute per step "
              "%.3f ms, expected the emulated GPU's >= 5 ms (did a stray "
              "collective end its steps?)" % (what, r, ms[len(ms) // 2]))


def scenario_stray_self(args):
    stray(args, "self")


def scenario_stray_half(args):
    stray(args, "half")


def scenario_prefetch(args):
    steps = 8
    base = ["--loader-thread"]
    env = dict(SHIM_ENV, DPSHIM_LOADER_THREAD="1")
    with tempfile.TemporaryDirectory() as tmp:
        plain_ids = tmp + "/plain.ids"
        # Prefetching changes when batches are fetched, not which.
        plain = plain_run(args, base, ids=plain_ids, steps=steps)
        for n in (1, 2, 3):
            for coefs in (None, THREAD_COEFS):
                what = "prefetch %d, %s" % (
                    n, "DPSHIM_COEFS=" + coefs if coefs else "no DPSHIM_COEFS")
                name = "%s/prefetch%d%s" % (tmp, n, "coefs" if coefs else "")
                ids, log = name + ".ids", name + ".jsonl"
                run_env = dict(env, DPSHIM_COEFS=coefs) if coefs else env
                on, _ = shim_run(args, what, run_env,
                                 base + ["--prefetch", str(n)], ids=ids,
                                 log=log, steps=steps)
                check_same_result(what, on, plain)
                if on:
                    check_ids_per_step(what, plain_ids, ids)
                    check_prefetch_log(what, read_jsonl(log), coefs)


def check_prefetch_log(what, entries, coefs):
    """The log of a prefetching run: lines, no failed hand-off, and plans
    applied: with DPSHIM_COEFS, or without from the warm-up's fit (a batch
    fetched ahead is tied to the step that consumes it by its place in the
    sequence, consumed at the MPI sync)."""
    check(entries, "%s: DPSHIM_LOG is empty" % what)
    failed = [e.get("step") for e in entries if e.get("decision") == "error"]
    check(not failed, "%s: hand-offs failed in steps %s" % (what, failed))
    check_plans_applied(entries, 1, what)


def scenario_nonblocking_sync(args):
    env = dict(SHIM_ENV, DPSHIM_VERBOSE="1")
    with tempfile.TemporaryDirectory() as tmp:
        # The digest does not depend on how the gradient is reduced.
        plain = plain_run(args)
        for mode in ("iallreduce-wait", "iallreduce-waitall",
                     "iallreduce-test"):
            what = "--sync " + mode
            log = "%s/%s.jsonl" % (tmp, mode)
            on, err = shim_run(args, what, env,
                               ["--sync", mode, "--buckets", "3"], log=log)
            check_same_result(what, on, plain)
            if not on:
                continue
            entries = read_jsonl(log)
            check_one_line_per_step(what, entries, STEPS)
            check("fitted cost" in err, "%s: no warm-up fit ('fitted cost') "
                  "on stderr: %r" % (what, err[-300:]))
            # Steps 5-10 follow the warm-up (2-4) and its fit.
            after = [e for e in entries if e.get("step", 0) > 4]
            check_plans_applied(after, 3, what + ", after the warm-up")


def scenario_thread_level(args):
    # Both ways in: MPI_Init, and MPI_Init_thread(FUNNELED) with a loader
    # thread. Balancing on, but no loader-thread setting: the shim has no
    # reason to ask for more than the trainer did.
    for extra in ([], ["--loader-thread"]):
        what = "thread level with %s, DPSHIM_LOADER_THREAD unset" % (
            "MPI_Init_thread" if extra else "MPI_Init")
        plain = plain_run(args, extra, steps=5)
        on, _ = shim_run(args, what, SHIM_ENV, extra, steps=5)
        check("thread_level" in plain, "no thread_level in reftrain's line")
        if on:
            check(on.get("thread_level") == plain.get("thread_level"),
                  "%s: %s, without the shim %s" % (
                      what, on.get("thread_level"), plain.get("thread_level")))
    with tempfile.TemporaryDirectory() as tmp:
        what = "DPSHIM_LOADER_THREAD=1 and --loader-thread"
        extra = ["--loader-thread"]
        plain = plain_run(args, extra)
        env = dict(SHIM_ENV, DPSHIM_LOADER_THREAD="1",
                   DPSHIM_COEFS=THREAD_COEFS)
        log = tmp + "/steps.jsonl"
        on, _ = shim_run(args, what, env, extra, log=log)
        check_same_result(what, on, plain)
        if on:
            check(on.get("thread_level", -1) >= plain.get("thread_level", 0),
                  "%s: thread level %s below the trainer's own %s" % (
                      what, on.get("thread_level"), plain.get("thread_level")))
            check_plans_applied(read_jsonl(log), 3, what)


def scenario_thread_without_setting(args):
    what = "loader thread without DPSHIM_LOADER_THREAD"
    extra = ["--loader-thread", "--prefetch", "1"]
    plain = plain_run(args, extra)
    on, err = shim_run(args, what, SHIM_ENV, extra)
    check_same_result(what, on, plain)
    lines = lines_naming(err, "DPSHIM_LOADER_THREAD")
    check(len(lines) == 2 and "nothing is balanced" in lines[0] and
          lines[1].startswith("dpshim:   nothing is balanced"),
          "%s: expected one stderr line naming DPSHIM_LOADER_THREAD and the "
          "summary's repeat, got %d: %r" % (what, len(lines), lines[:4]))


def scenario_log_unwritable(args):
    what = "DPSHIM_LOG=/dev/full"
    plain = plain_run(args)
    on, err = shim_run(args, what, dict(SHIM_ENV, DPSHIM_LOG="/dev/full"))
    check_same_result(what, on, plain)
    lines = lines_naming(err, "DPSHIM_LOG")
    check(len(lines) == 1, "%s: expected one stderr line naming DPSHIM_LOG, "
          "got %d: %r" % (what, len(lines), lines[:4]))


# A number followed by '%': signs, exponents, nan and inf included, so that
# a broken share cannot slip past the range check.
PERCENT = re.compile(r"([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
                     r"|nan|inf(?:inity)?))\s*%", re.IGNORECASE)


def check_summary_shares(what, err):
    """Every percentage in the shim's lines with one lies in [0, 100]. Not
    the fit's prediction errors (on a line saying "error"): they are no
    share of anything, and on this oversubscribed machine the warm-up's
    timings are noisy enough for one rank-step to be off by over 100 %."""
    lines = [l for l in err.splitlines()
             if l.startswith("dpshim:") and "%" in l and "error" not in l]
    shares = [(float(m), l) for l in lines for m in PERCENT.findall(l)]
    check(shares, "%s: no percentage in the shim's summary: %r"
          % (what, err[-400:]))
    for v, line in shares:
        check(0 <= v <= 100, "%s: share %g outside [0, 100]: %s"
              % (what, v, line.strip()))


def scenario_summary_shares(args):
    env = dict(SHIM_ENV, DPSHIM_VERBOSE="0")
    threaded = dict(env, DPSHIM_LOADER_THREAD="1")
    for what, run_env, extra in (
            ("summary", env, []),
            ("summary, prefetch 2", threaded,
             ["--loader-thread", "--prefetch", "2"])):
        on, err = shim_run(args, what, run_env, extra)
        if on:
            check(on.get("check_errors") == 0, "%s: check_errors %s"
                  % (what, on.get("check_errors")))
            check_summary_shares(what, err)


# ---- the gradient sync outside MPI (--sync shm) ---------------------------

# Without per-rank times the fit is made from step times, one point a step
# (the original's), and this machine's own per-token work (packing,
# --check) is in them: emulated steps 2.5x TRAIN's keep the attention the
# larger part, and a warm-up of 2-8 gives the fit six points (the first is
# dropped), where 2-4 would give two. Steps 9-16 follow the fit (refitted
# after each): enough that a plan applies on a loaded machine too. A
# later --time-scale overrides TRAIN's.
SHM = ["--sync", "shm", "--time-scale", "0.05"]
SHM_WARMUP, SHM_STEPS = "2-8", 16
SUMMARY_STEPS = re.compile(r"^dpshim: summary: (\d+) steps on", re.MULTILINE)
HANDOFFS = re.compile(r"^dpshim:\s+hand-offs balanced: (\d+) applied, "
                      r"(\d+) skipped, (\d+) failed", re.MULTILINE)
CHATTER_ROUNDS = re.compile(r"^reftrain: --chatter: (\d+) rounds",
                            re.MULTILINE)
LOSS_SUM = re.compile(r"^reftrain: --loss-allreduce: loss summed over steps "
                      r"(\d+), rank 0's own (\d+)", re.MULTILINE)


def summary_counts(what, err):
    """(steps, applied) from rank 0's summary; None for what is missing,
    with a failed check."""
    steps, handoffs = SUMMARY_STEPS.search(err), HANDOFFS.search(err)
    check(steps, "%s: no 'dpshim: summary: N steps' line: %r"
          % (what, err[-400:]))
    check(handoffs, "%s: no 'hand-offs balanced' line: %r"
          % (what, err[-400:]))
    return (int(steps.group(1)) if steps else None,
            int(handoffs.group(1)) if handoffs else None)


def check_shm_steps(what, err, steps):
    """The summary counts one step per reftrain step: none lost (steps
    not seen), none extra (another collective taken for the sync).
    Returns the hand-offs applied."""
    got, applied = summary_counts(what, err)
    if got is not None:
        check(got == steps, "%s: the summary counts %d steps, reftrain made "
              "%d" % (what, got, steps))
    return applied


def shm_env(micro=1):
    """Balancing with hand-off steps, DPSHIM_MICRO_BATCHES a step, the
    trigger at its default (auto: a plan that saves more seconds than it
    costs). Not a ratio: a step-time fit puts what every step pays into
    the features (full packs cannot tell it apart), which dilutes the
    imbalance ratio of every plan, and these checks are of the steps, not
    of that rule."""
    return dict(SHIM_ENV, DPSHIM_WARMUP_ITERS=SHM_WARMUP,
                DPSHIM_MICRO_BATCHES=str(micro))


def scenario_shm_micro_batches(args):
    for micro in (1, 2, 3):
        what = "--sync shm, --micro-batches %d" % micro
        extra = SHM + ["--micro-batches", str(micro)]
        plain = plain_run(args, extra, steps=SHM_STEPS)
        on, err = shim_run(args, what, shm_env(micro), extra,
                           steps=SHM_STEPS)
        check_same_result(what, on, plain)
        if on:
            applied = check_shm_steps(what, err, SHM_STEPS)
            check(applied is None or applied > 0, "%s: no plan applied"
                  % what)
        if micro == 1:
            shm_control(args, plain, extra)


def shm_control(args, plain, extra):
    """Steps at the sync, which the shim never sees: nothing can be
    balanced, which it must say rather than skip in silence."""
    what = "--sync shm, DPSHIM_STEP=sync"
    on, err = shim_run(args, what, dict(shm_env(), DPSHIM_STEP="sync"), extra,
                       steps=SHM_STEPS)
    check_same_result(what, on, plain)
    if not on:
        return
    check(lines_naming(err, "nothing is balanced"), "%s: no 'nothing is "
          "balanced' line: %r" % (what, err[-400:]))
    _, applied = summary_counts(what, err)
    check(applied == 0, "%s: %s hand-offs applied, expected none"
          % (what, applied))


def distractors(args, what, extra):
    """--sync shm beside trainer MPI traffic that is no gradient sync;
    reftrain --verbose says how much of it there was."""
    extra = SHM + list(extra) + ["--verbose"]
    plain, plain_err = reftrain(args, RANKS, SHM_STEPS, extra=extra,
                                timeout=hang_timeout(),
                                what="without the shim")
    on, err = shim_run(args, what, shm_env(), extra, steps=SHM_STEPS)
    check_same_result(what, on, plain)
    if not on:
        return
    check_shm_steps(what, err, SHM_STEPS)
    if "--chatter" in extra:
        rounds = CHATTER_ROUNDS.search(err)
        check(rounds and int(rounds.group(1)) >= SHM_STEPS, "%s: the chatter "
              "thread made %s rounds, expected at least one a step"
              % (what, rounds.group(1) if rounds else "no"))
    if "--loss-allreduce" in extra:
        check_loss(what, LOSS_SUM.search(err), LOSS_SUM.search(plain_err))


def check_loss(what, mine, ref):
    """The all-reduced loss: as without the shim, and more than rank 0's
    own (it was summed over the ranks, not left alone)."""
    if not check(mine and ref, "%s: no loss line from reftrain --verbose"
                 % what):
        return
    check(mine.group(1) == ref.group(1), "%s: loss summed %s, without the "
          "shim %s" % (what, mine.group(1), ref.group(1)))
    check(int(mine.group(1)) > int(mine.group(2)), "%s: loss summed %s, no "
          "more than rank 0's own %s" % (what, mine.group(1), mine.group(2)))


def scenario_shm_chatter(args):
    distractors(args, "--sync shm --chatter 2", ["--chatter", "2"])


def scenario_shm_loss_allreduce(args):
    distractors(args, "--sync shm --loss-allreduce", ["--loss-allreduce"])


def scenario_shm_chatter_loss(args):
    distractors(args, "--sync shm --chatter 2 --loss-allreduce",
                ["--chatter", "2", "--loss-allreduce"])


def scenario_backoff(args):
    """auto with plans that never pay (a cost model of picoseconds): after
    two priced out, hand-offs pass by without gathering, alike on every
    rank and in both DP groups under TP 2 (a one-sided pass would hang);
    every sample still consumed once per step, one log line per step.
    Inline hand-offs: the back-off spares the step's path a gather, and
    hand-offs balanced ahead are off it."""
    steps = 16
    env = dict(SHIM_ENV, DPSHIM_COEFS="1e-9,0,0", DPSHIM_AHEAD="0")
    with tempfile.TemporaryDirectory() as tmp:
        plain_ids, ids, log = tmp + "/plain.ids", tmp + "/on.ids", tmp + "/log"
        plain = plain_run(args, ids=plain_ids, steps=steps)
        for what, extra, ranks in (("DP 4", [], RANKS), ("TP 2", ["--tp", "2"],
                                                         2 * RANKS)):
            run_env = dict(env, DPSHIM_TP_SIZE="2") if extra else env
            res, err = reftrain(args, ranks, steps, shim=args.preload,
                                env=run_env, ids=ids, log=log, extra=extra,
                                timeout=hang_timeout(), what=what)
            check_same_result(what, res, plain)
            check_ids_per_step(what, plain_ids, ids)
            entries = read_jsonl(log)
            check_one_line_per_step(what, [e for e in entries
                                           if e.get("group") == 0], steps)
            passed = [e for e in entries if e.get("reason") == "backed-off"]
            check(len(passed) >= steps // 3, "%s: %d log lines backed off, "
                  "expected at least %d" % (what, len(passed), steps // 3))
            check(lines_naming(err, "passed by without gathering"),
                  "%s: the summary does not count the back-off" % what)
            os.remove(log)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario",
                   choices=["inert", "balance", "tp2", "badconfig",
                            "thread", "stray_self", "stray_half", "prefetch",
                            "nonblocking_sync", "thread_level",
                            "thread_without_setting", "log_unwritable",
                            "summary_shares", "shm_micro_batches",
                            "shm_chatter", "shm_loss_allreduce",
                            "shm_chatter_loss", "backoff"])
    p.add_argument("--preload", required=True,
                   help="libdpshim.so and the adapters, as LD_PRELOAD takes them")
    p.add_argument("--reftrain", required=True)
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args()
    globals()["scenario_" + args.scenario](args)
    print("%s: %d failed checks" % (args.scenario, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
