#!/usr/bin/env python3
"""The ViT-level balance under real mpirun: vlmtrain over libvlmload.so and
libvit.so, with and without libdpshim.so, whose DPSHIM_VIT_BALANCE=1
interposes vit_forward(), vit_backward() and vit_saved_free() and moves
images between DP ranks so that each rank's encoder work is even.

    check_vlm_vit.py LAYOUT --preload LIBDPSHIM:ADAPTERS --vlmtrain vlmtrain [--tp N]

For the layout (internvl, qwen2vl, qwen3vl), 4 DP ranks (with --tp N: 2 DP
ranks of N TP ranks each, DPSHIM_TP_SIZE=N), every run with --check. The
shim runs have check_vlm.py's SHIM_ENV (the LLM-level balance on) plus
DPSHIM_VIT_BALANCE=1, DPSHIM_VIT_COEFS=1,0,0 and DPSHIM_VERBOSE=1. "Applied"
below means "[DP Balance][ViT] APPLY" on stderr, or a finalize summary
"dpshim:   ViT: N encoder calls balanced: M applied" with M > 0: a ViT
balance that never applied fails the scenario. "The digests" are the consumed, images,
embeddings and ViT-gradient digests, and the patch-gradient digest where
the encoder is asked for patch gradients.
  - mixed: multi-image samples (and videos for Qwen), 2 micro-batches,
    patch gradients: check_errors 0, the digests of the run without the
    shim, applied; --stats-out gives every rank's vit_ms (the encoder's
    calls, the shim's exchanges inside them included) at every step,
    within its compute_ms;
  - frames (qwen3vl): mixed with the qwen3-vl-8b preset, whose encoder
    attends a video's frames apart, the adapter showing such a video as an
    image a frame: the same;
  - text-heavy: 5 % of samples with images, so that ranks make encoder
    calls with no image: the same;
  - fitted: mixed without DPSHIM_VIT_COEFS (the shim finds the ViT cost
    itself): the same;
  - schedules: 3 micro-batches, 1f1b and afab (all forwards, then the
    backwards in reverse order): without the shim both give the same
    digests (the trainer's outputs do not depend on the schedule); with
    it, the digests of the runs without it, applied in each schedule;
  - shipped: the schedules' runs with --vit-ship (each micro-batch's
    encoder calls shipped at its hand-off through vit_ship(), the adapter's
    dpshim_encoder_ship()), afab's with --vit-async too (forwards through
    vit_forward_async(), each waited for with vit_wait() before the LLM
    reads its embeddings), and 1f1b with --vit-ship-thread (shipped from a
    thread of their own) with DPSHIM_LOADER_THREAD=1 and without: the
    digests of the runs without the shim, no "out of step" line, applied,
    and the summary's count of forwards that took their ship (some) and of
    those planned again (0); without MPI_THREAD_MULTIPLE no such count and
    one note that nothing is shipped;
  - gated: the schedules' runs under the default DPSHIM_VIT_TRIGGER_THRESHOLD
    (auto; the other scenarios set 0.1, so that every call meets): the
    digests, no "out of step" line, and the summary's "ViT gate" line
    counting the hand-offs that decided (some) as the verbose MEET / APART
    lines do; 1f1b again with the images' term dominating the cost
    (DPSHIM_COEFS=1,0,0,1000,0): some calls meet, and the summary's line of
    what was predicted for them (saving > 1.5 x cost) and what meeting
    took; and with one rank's extra forward (the extra fault below), no
    hang and the faulted run's digests;
  - grid fault: at step 5 rank 1 (with TP, world rank N) passes a grid
    whose rows do not add up to its patch rows; every rank then releases
    what that forward gave it and redoes it. Without the shim and with it:
    vit_faults_seen 1 (libvit's -1 reached the trainer) and the digests of
    the run without the fault; with it, one error line naming that rank,
    no "out of step" line (the calls stayed in step), applied;
  - extra fault: at step 5 rank 1 makes one forward more than the others
    and releases it at once: the digests of the run without the shim with
    the same fault (and of the run without the fault); with the shim, one
    agreed line with "ViT" and "out of step" (at least one with TP);
  - rebackward fault (shim only: without it, it is a double free): after
    its first backward of step 5, rank 1 calls vit_backward again on the
    consumed saved, in the afab schedule: the shim refuses it (-1, counted
    in vit_faults_seen: 1) without a collective, exit 0, no "out of step"
    line, the digests of the run without the shim and without the fault.
--only NAME (repeatable) runs those scenarios alone (mixed, frames,
text-heavy, fitted, schedules, shipped, gated, grid, extra, rebackward). Every run is bounded (a hang
is a failed check, its processes killed), and the whole script by a budget
below meson's timeout. Exit status 0 when every check holds.
"""
import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))

from check_vlm import (STEPS, SHIM_ENV, dp_size, encoder_keys, same_digests,
                       vlmtrain)
from mpitest import check, failures, intact, read_jsonl

# A ratio for the ViT trigger (its `auto` default gates the calls; see the
# gated scenario): every encoder call meets, so that the exchanges run.
VIT_ENV = dict(SHIM_ENV, DPSHIM_VIT_BALANCE="1", DPSHIM_VIT_COEFS="1,0,0",
               DPSHIM_VIT_TRIGGER_THRESHOLD="0.1", DPSHIM_VERBOSE="1")
GATED_ENV = {k: v for k, v in VIT_ENV.items()
             if k != "DPSHIM_VIT_TRIGGER_THRESHOLD"}
MIXED = ["--micro-batches", "2", "--patch-grads"]
TEXT_HEAVY = ["--image-fraction", "0.05"]
# Three micro-batches: the backwards of afab run in another order than
# their forwards.
ONE_F_ONE_B = ["--micro-batches", "3", "--patch-grads", "--schedule", "1f1b"]
AFAB = ["--micro-batches", "3", "--patch-grads", "--schedule", "afab"]
# After the warm-up (DPSHIM_WARMUP_ITERS=2-4), with steps left after it.
FAULT_STEP = 5
# A run takes seconds; a hang fails the check after this, and the script
# stops starting runs before meson's 600 s timeout would kill it.
RUN_TIMEOUT = 90
BUDGET = 540
STARTED = time.monotonic()

# Plain runs (no shim) by their arguments: several scenarios compare with
# the same one.
plain_runs = {}


def bounded_run(args, extra, what, **kw):
    """vlmtrain() within the script's budget; {} (a failed check) past it."""
    left = BUDGET - (time.monotonic() - STARTED)
    if not check(left > 10, "%s: not run, the script's %d s are spent"
                 % (what, BUDGET)):
        return {}, ""
    return vlmtrain(args, extra, what=what,
                    timeout=int(min(RUN_TIMEOUT, left)), **kw)


def plain(args, extra, what):
    key = tuple(extra)
    if key not in plain_runs:
        plain_runs[key], _ = bounded_run(args, extra,
                                         what + ", without the shim")
    return plain_runs[key]


def with_shim(args, extra, what, env=None):
    return bounded_run(args, extra, what, shim=True, env=env or VIT_ENV)


def vit_applied(err):
    """ViT balances applied: the verbose lines, or the summary's count."""
    lines = err.count("[DP Balance][ViT] APPLY")
    m = re.search(r"ViT: \d+ encoder calls balanced: (\d+) applied", err)
    return max(lines, int(m.group(1)) if m else 0)


def check_applied(what, err):
    check(vit_applied(err) > 0, "%s: the ViT balance never applied (no "
          "'[DP Balance][ViT] APPLY', no 'ViT: N encoder calls balanced: M "
          "applied' with M > 0)" % what)


def out_of_step_lines(err):
    return [l for l in err.splitlines() if "ViT" in l and "out of step" in l]


def fault_rank(args):
    """DP rank 1: world rank 1, or the first of the second TP group."""
    return args.tp


def fault(args, kind):
    return ["--vit-fault", "%s:%d:%d" % (kind, fault_rank(args), FAULT_STEP)]


def digests_of(args, extra):
    return tuple(encoder_keys(extra)) + ("consumed_digest", "images_digest")


def scenario_balanced(args, name, extra, env=None, stats=None):
    what = "%s, %s" % (args.layout, name)
    base = plain(args, extra, what)
    on, err = with_shim(args, extra + (["--stats-out", stats] if stats
                                       else []), what, env)
    if not intact(what, base, on):
        return
    same_digests(what, on, base, digests_of(args, extra))
    check_applied(what, err)
    if stats:
        check_vit_ms(args, what, read_jsonl(stats))


def check_vit_ms(args, what, entries):
    """Every step has every rank's vit_ms, >= 0 and within compute_ms
    (which holds the encoder's calls); some of it > 0."""
    ranks = dp_size(args) * args.tp
    check(len(entries) == STEPS, "%s: --stats-out has %d steps, expected %d"
          % (what, len(entries), STEPS))
    for e in entries:
        vit, compute = e.get("vit_ms", []), e.get("compute_ms", [])
        if not check(len(vit) == ranks == len(compute), "%s, step %s: "
                     "vit_ms %r for %d ranks" % (what, e.get("step"), vit,
                                                 ranks)):
            return
        check(all(0 <= v <= c + 0.01 for v, c in zip(vit, compute)),
              "%s, step %d: vit_ms %r not within compute_ms %r"
              % (what, e["step"], vit, compute))
    check(any(v > 0 for e in entries for v in e["vit_ms"]),
          "%s: vit_ms all 0" % what)


def scenario_mixed(args):
    with tempfile.TemporaryDirectory() as tmp:
        scenario_balanced(args, "mixed", MIXED, stats=tmp + "/stats.jsonl")


def scenario_fitted(args):
    env = {k: v for k, v in VIT_ENV.items() if k != "DPSHIM_VIT_COEFS"}
    scenario_balanced(args, "fitted ViT cost", MIXED, env)


def scenario_schedules(args):
    what = "%s, 3 micro-batches" % args.layout
    one, afab = plain(args, ONE_F_ONE_B, what + ", 1f1b"), \
        plain(args, AFAB, what + ", afab")
    if intact(what + ", without the shim", one, afab):
        same_digests(what + ", afab without the shim", afab, one,
                     digests_of(args, AFAB), than="1f1b's")
    for name, extra in (("1f1b", ONE_F_ONE_B), ("afab", AFAB)):
        scenario_balanced(args, "3 micro-batches, " + name, extra)


def check_gate_summary(what, err, must_meet=False):
    """The summary's gate line counts as many decided hand-offs as the
    verbose MEET / APART lines, some; where some met, its prediction line
    (a saving above 1.5 x the cost, retries aside, and what meeting took) is
    there, and only then."""
    m = re.search(r"ViT gate \(DPSHIM_VIT_TRIGGER_THRESHOLD=auto\): the "
                  r"encoder calls met at (\d+) of (\d+) hand-offs", err)
    lines = len(re.findall(r"^\[DP Balance\]\[ViT\] (?:MEET|APART) ",
                           err, re.M))
    if not check(m is not None, "%s: no 'ViT gate (...=auto): the encoder "
                 "calls met at M of N hand-offs' in the summary" % what):
        return
    check(int(m.group(2)) > 0 and int(m.group(2)) == lines,
          "%s: the summary counts %s decided hand-offs, the verbose lines %d"
          % (what, m.group(2), lines))
    met = re.search(r"ViT gate: (?:a met hand-off was predicted to save "
                    r"([0-9.e+-]+) ms against ([0-9.e+-]+) ms of meeting|met "
                    r"only to measure meeting again); meeting took "
                    r"([0-9.e+-]+) ms a rank", err)
    check(int(m.group(1)) > 0 or not must_meet,
          "%s: no hand-off met where the encoder's cost dominates" % what)
    check((met is not None) == (int(m.group(1)) > 0),
          "%s: %s hand-offs met, and the summary's prediction line is %s"
          % (what, m.group(1), "there" if met else "missing"))
    if met and met.group(1):
        check(float(met.group(1)) > 1.5 * float(met.group(2)),
              "%s: met where the saving %s ms was below 1.5 x the cost %s ms"
              % (what, met.group(1), met.group(2)))


def scenario_gated(args):
    """The default `auto` ViT trigger: each hand-off decides whether its
    micro-batch's encoder calls meet. Both schedules (afab's backwards come
    after later hand-offs' decisions): the digests of the runs without the
    shim, no out-of-step line and the summary's gate lines
    (check_gate_summary); and 1f1b with a cost model whose images' term
    dominates (DPSHIM_COEFS=1,0,0,1000,0), where some calls must meet."""
    heavy = dict(GATED_ENV, DPSHIM_COEFS="1,0,0,1000,0")
    for name, extra, env in (("1f1b", ONE_F_ONE_B, GATED_ENV),
                             ("afab", AFAB, GATED_ENV),
                             ("1f1b, images dominating", ONE_F_ONE_B, heavy)):
        what = "%s, ViT gate, 3 micro-batches, %s" % (args.layout, name)
        base = plain(args, extra, what)
        on, err = with_shim(args, extra, what, env)
        if not intact(what, base, on):
            continue
        same_digests(what, on, base, digests_of(args, extra))
        check(not out_of_step_lines(err), "%s: the calls fell out of step: "
              "%r" % (what, out_of_step_lines(err)))
        check_gate_summary(what, err, must_meet=env is heavy)
    # One rank's extra forward: kept apart it meets nobody, met it is
    # found out of step; either way no hang and the faulted run's digests.
    what = "%s, ViT gate, extra forward on rank %d" % (args.layout,
                                                       fault_rank(args))
    extra = ONE_F_ONE_B + fault(args, "extra")
    faulted = plain(args, extra, what)
    on, _ = with_shim(args, extra, what, GATED_ENV)
    if intact(what, faulted, on):
        same_digests(what, on, faulted, digests_of(args, extra),
                     than="without the shim, with the fault,")


def fault_runs(args, kind, title):
    """A fault of `kind` at step 5, 1f1b: (what, its vlmtrain options, the
    run without the fault, with it, with it under the shim, the shim run's
    stderr), or None when a run gave no result."""
    what = "%s, %s on rank %d" % (args.layout, title, fault_rank(args))
    extra = ONE_F_ONE_B + fault(args, kind)
    base = plain(args, ONE_F_ONE_B, what + ", no fault")
    faulted = plain(args, extra, what)
    on, err = with_shim(args, extra, what)
    if not intact(what, base, faulted, on):
        return None
    return what, extra, base, faulted, on, err


def scenario_grid(args):
    runs = fault_runs(args, "grid", "grid fault")
    if not runs:
        return
    what, extra, base, faulted, on, err = runs
    for variant, res in (("without the shim", faulted), ("with it", on)):
        check(res.get("vit_faults_seen") == 1, "%s, %s: vit_faults_seen %r, "
              "expected 1" % (what, variant, res.get("vit_faults_seen")))
        same_digests("%s, %s" % (what, variant), res, base,
                     digests_of(args, extra), than="without the fault")
    named = [l for l in err.splitlines() if "ViT" in l
             and not l.startswith("[DP Balance]")
             and re.search(r"\brank %d\b" % fault_rank(args), l)]
    check(len(named) == 1 if args.tp == 1 else len(named) >= 1,
          "%s: expected one error line with 'ViT' naming rank %d, got %r"
          % (what, fault_rank(args), named))
    check(not out_of_step_lines(err), "%s: the calls fell out of step: %r"
          % (what, out_of_step_lines(err)))
    check_applied(what, err)


def scenario_extra(args):
    runs = fault_runs(args, "extra", "extra forward")
    if not runs:
        return
    what, extra, base, faulted, on, err = runs
    same_digests(what, on, faulted, digests_of(args, extra),
                 than="without the shim, with the fault,")
    same_digests(what + ", without the shim", faulted, base,
                 digests_of(args, extra), than="without the fault")
    lines = out_of_step_lines(err)
    check(len(lines) == 1 if args.tp == 1 else len(lines) >= 1,
          "%s: expected one line with 'ViT' and 'out of step', got %r"
          % (what, lines))


def scenario_rebackward(args):
    what = "%s, second backward on rank %d" % (args.layout, fault_rank(args))
    base = plain(args, AFAB, what + ", no fault")
    on, err = with_shim(args, AFAB + fault(args, "rebackward"), what)
    if not intact(what, base, on):
        return
    check(on.get("vit_faults_seen") == 1, "%s: vit_faults_seen %r, expected "
          "1 (the second vit_backward refused)" % (what,
                                                   on.get("vit_faults_seen")))
    same_digests(what, on, base, digests_of(args, AFAB),
                 than="without the shim and the fault")
    check(not out_of_step_lines(err), "%s: the calls fell out of step: %r"
          % (what, out_of_step_lines(err)))


SHIP_THREAD_NOTE = ("dpshim_encoder_ship() was called from a thread other "
                    "than MPI_Init's, without MPI_THREAD_MULTIPLE")


def scenario_shipped(args):
    """--vit-ship: each micro-batch's encoder calls shipped at its hand-off
    (dpshim_encoder_ship through libdpshim_vit.so's vit_ship), in both
    schedules, afab's forwards also async (--vit-async: the embeddings'
    return waited for before the LLM reads them); --vit-ship-thread: shipped
    from a thread of their own, with DPSHIM_LOADER_THREAD=1 (MPI_THREAD_
    MULTIPLE) and without (nothing shipped, said once, the forwards
    balanced as before). Each: the digests of the runs without the shim,
    no "out of step" line, applied, and the summary counting forwards that
    took their ship (some, and none planned again) or no such line."""
    loader = dict(VIT_ENV, DPSHIM_LOADER_THREAD="1")
    for name, extra, more, env in (
            ("1f1b", ONE_F_ONE_B, ["--vit-ship"], VIT_ENV),
            ("afab, async", AFAB, ["--vit-ship", "--vit-async"], VIT_ENV),
            ("1f1b, loader thread", ONE_F_ONE_B, ["--vit-ship-thread"],
             loader),
            ("1f1b, thread without MPI_THREAD_MULTIPLE", ONE_F_ONE_B,
             ["--vit-ship-thread"], VIT_ENV)):
        what = "%s, shipped, 3 micro-batches, %s" % (args.layout, name)
        base = plain(args, extra, what)
        on, err = with_shim(args, extra + more, what, env)
        if not intact(what, base, on):
            continue
        same_digests(what, on, base, digests_of(args, extra),
                     than="without the shim and without shipping")
        check(not out_of_step_lines(err), "%s: the calls fell out of step: "
              "%r" % (what, out_of_step_lines(err)))
        check_applied(what, err)
        m = re.search(r"ViT: (\d+) forwards took the plan and inputs shipped "
                      r"ahead of them \(dpshim_encoder_ship\), (\d+) were "
                      r"planned again", err)
        if "without" in name:
            check(m is None and err.count(SHIP_THREAD_NOTE) == 1,
                  "%s: expected no forward taking a ship and the note %r "
                  "once, got %r and %d notes" % (
                      what, SHIP_THREAD_NOTE, m.group(0) if m else None,
                      err.count(SHIP_THREAD_NOTE)))
            continue
        check(m is not None and int(m.group(1)) > 0 and m.group(2) == "0",
              "%s: expected the summary's 'ViT: N forwards took the plan and "
              "inputs shipped ahead of them ..., 0 were planned again' with "
              "N > 0, got %r" % (what, m.group(0) if m else None))


def scenario_frames(args):
    """Qwen3-VL's encoder (qwen3-vl-8b) attends a video's frames apart, and
    libdpshim_vit.so shows such a video as an image a frame, so that its
    frames may be encoded on several ranks: the digests stay exact."""
    if args.layout == "qwen3vl":
        scenario_balanced(args, "frames apart", MIXED + ["--model",
                                                         "qwen3-vl-8b"])


SCENARIOS = {
    "mixed": scenario_mixed,
    "frames": scenario_frames,
    "text-heavy": lambda a: scenario_balanced(a, "text-heavy", TEXT_HEAVY),
    "fitted": scenario_fitted,
    "schedules": scenario_schedules,
    "shipped": scenario_shipped,
    "gated": scenario_gated,
    "grid": scenario_grid,
    "extra": scenario_extra,
    "rebackward": scenario_rebackward,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("layout", choices=["internvl", "qwen2vl", "qwen3vl"])
    p.add_argument("--preload", required=True,
                   help="libdpshim.so and the adapters, as LD_PRELOAD takes them")
    p.add_argument("--vlmtrain", required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--only", action="append", choices=sorted(SCENARIOS),
                   help="run only these scenarios (repeatable)")
    args = p.parse_args()
    for name, scenario in SCENARIOS.items():
        if not args.only or name in args.only:
            scenario(args)
    print("vlm vit %s%s: %d failed checks in %.0f s" % (
        args.layout, " tp %d" % args.tp if args.tp > 1 else "",
        len(failures), time.monotonic() - STARTED))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
