#!/usr/bin/env python3
"""The VLM layouts under real mpirun: vlmtrain over libvlmload.so, with
and without libdpshim.so and libdpshim_vlmload.so (the adapter that
balances vlmload_next() through <dpshim/vlm.h>).

    check_vlm.py LAYOUT --preload LIBDPSHIM:ADAPTERS --vlmtrain vlmtrain [--tp N]

For the layout (internvl, qwen2vl, qwen3vl), 4 DP ranks, each run
with --check (every sample, tile, patch row, grid row and flag re-derived
from its key, exactly once per step, consumed == produced):
  - mixed: multi-image samples, text-only samples beside them (and videos
    for Qwen), 2 micro-batches per step, patch gradients asked of the
    encoder (libvit.so): check_errors 0, the same consumed, images,
    embeddings, ViT-gradient and patch-gradient digests as without the
    shim, plans applied (and none raising the imbalance), DPSHIM_VERIFY on;
    the encoder's digests present and the same in a second run without it;
  - text-heavy: 5 % of samples with images, so that ranks hold packs
    without any image: the same checks;
  - prefetch: the loader builds packs ahead in its own thread
    (--prefetch 2): the consumed and images digests of the run that builds
    them in the call, with the shim and without it, check_errors 0, plans
    applied;
  - fitted: no DPSHIM_COEFS, so the warm-up fits the cost; the layout's
    images reach the fit (its summary line gives the error without the
    vision terms beside its own);
  - malformed: rank 1's loader breaks its 6th pack's layout (a tile flag,
    a grid row): one stderr line names rank 1 and the field, the hand-off
    fails on every rank with batches untouched (digests as without the
    shim, which sees the same broken pack), the run goes on.
With --tp N: 2 DP ranks of N TP ranks each, DPSHIM_TP_SIZE=N; TP peers
read the same data and must stay identical. Exit status 0 when every check holds.
"""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))

from mpitest import (HANG_RC, MPIRUN, check, check_plans_applied, failures,
                     read_jsonl, run)

STEPS = 8
# Small tiles and images, so that a pack's pixels stay a few MB; a cost of
# attention alone (the emulated compute is too short to fit on), under
# which packs of equal tokens are unequal.
TRAIN = ["--steps", str(STEPS), "--check", "--pack-tokens", "8192",
         "--tile-size", "8", "--num-image-token", "64", "--max-side", "16",
         "--time-scale", "0.05", "--seed", "3"]
SHIM_ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-4",
            "DPSHIM_VERIFY": "1", "DPSHIM_COEFS": "1,0,0"}
FIELDS = {"internvl": "image_flags", "qwen2vl": "image_grid_thw",
          "qwen3vl": "image_grid_thw"}


def vlmtrain(args, extra, shim=False, log=None, what="vlmtrain", env=None,
             timeout=240):
    """One run; (result, stderr). A hang (no exit within `timeout` s) or a
    failed exit is a failed check naming `what`; the result is then {}."""
    env = dict(env or SHIM_ENV, DPSHIM_TP_SIZE=str(args.tp)) if shim else {}
    if log:
        env["DPSHIM_LOG"] = log
    cmd = MPIRUN + ["-np", str(dp_size(args) * args.tp), args.vlmtrain, "--layout",
                    args.layout, "--tp", str(args.tp)] + TRAIN + extra
    rc, out, err = run(cmd, env=env, preload=args.preload if shim else None,
                       timeout=timeout)
    if rc == HANG_RC:
        return {}, err
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not check(rc == 0 and len(lines) == 1, "%s: exit %d, output %r: %s"
                 % (what, rc, out[-200:], err.strip()[-400:])):
        return {}, err
    return json.loads(lines[0]), err


def dp_size(args):
    """4 DP ranks, or 2 with TP (8 ranks in all for TP=4)."""
    return 4 if args.tp == 1 else 2


# The encoder's (libvit.so) outputs, keyed by sample or summed exactly:
# the same wherever the samples were consumed.
ENCODER_DIGESTS = ("embeddings_digest", "vit_grad_digest")


def same_digests(what, on, plain, keys=("consumed_digest", "images_digest")
                 + ENCODER_DIGESTS, than="without the shim"):
    for key in keys:
        check(on.get(key) == plain.get(key), "%s: %s %s != %s %s"
              % (what, key, on.get(key), than, plain.get(key)))


def encoder_keys(extra):
    return ENCODER_DIGESTS + (("patch_grad_digest",)
                              if "--patch-grads" in extra else ())


def check_encoder_digests(what, first, second, extra):
    """The encoder's digests in the result, and the same in a second
    identical run."""
    for key in encoder_keys(extra):
        check(re.fullmatch(r"[0-9a-f]{16}", str(first.get(key))),
              "%s: %s missing or malformed: %r" % (what, key, first.get(key)))
    same_digests(what, second, first, encoder_keys(extra),
                 than="in the first run")


def check_repack_line(what, err):
    """The summary says what applying took and what the repack copied: no
    more than shifting what stays and copying in what arrived would have
    (the ranks' means)."""
    m = re.search(r"applying a plan: [0-9.]+ ms in the exchange and "
                  r"[0-9.]+ ms in the repack, which copied ([0-9.]+) MB "
                  r"where shifting what stays and copying in what arrived "
                  r"would have copied ([0-9.]+) MB",
                  err)
    check(m, "%s: no 'applying a plan:' line: %r" % (what, err[-600:]))
    if m:
        copied, shift = float(m.group(1)), float(m.group(2))
        check(copied <= shift + 0.01, "%s: the repack copied %.2f MB, "
              "shifting %.2f MB" % (what, copied, shift))


def scenario_balanced(args, name, extra):
    what = "%s, %s" % (args.layout, name)
    with tempfile.TemporaryDirectory() as tmp:
        log = tmp + "/steps.jsonl"
        plain, _ = vlmtrain(args, extra, what=what + ", without the shim")
        on, err = vlmtrain(args, extra, shim=True, log=log, what=what)
        if not plain or not on:
            return
        check_repack_line(what, err)
        if "--patch-grads" in extra:
            again, _ = vlmtrain(args, extra, what=what + ", again")
            check_encoder_digests(what, plain, again, extra)
        for variant, res in (("without the shim", plain), ("with it", on)):
            check(res["check_errors"] == 0, "%s, %s: check_errors %d"
                  % (what, variant, res["check_errors"]))
        same_digests(what, on, plain, tuple(encoder_keys(extra))
                     + ("consumed_digest", "images_digest"))
        check_plans_applied(read_jsonl(log), 2, what)


def scenario_prefetch(args):
    """The loader building packs ahead in its own thread (--prefetch 2, as
    a DataLoader's workers): the same packs in the same order, so the
    digests of the run that builds them in the hand-off, with the shim and
    without it; check_errors 0; plans applied."""
    what = "%s, prefetching loader" % args.layout
    with tempfile.TemporaryDirectory() as tmp:
        log = tmp + "/steps.jsonl"
        sync, _ = vlmtrain(args, [], what=what + ", packs built in the call")
        ahead, _ = vlmtrain(args, ["--prefetch", "2"],
                            what=what + ", without the shim")
        on, _ = vlmtrain(args, ["--prefetch", "2"], shim=True, log=log,
                         what=what)
        if not sync or not ahead or not on:
            return
        for variant, res in (("without the shim", ahead), ("with it", on)):
            check(res["check_errors"] == 0, "%s, %s: check_errors %d"
                  % (what, variant, res["check_errors"]))
            same_digests("%s, %s" % (what, variant), res, sync,
                         ("consumed_digest", "images_digest"),
                         than="built in the call")
        check_plans_applied(read_jsonl(log), 2, what)


def scenario_fitted(args):
    what = "%s, fitted cost" % args.layout
    env = {k: v for k, v in SHIM_ENV.items() if k != "DPSHIM_COEFS"}
    on, err = vlmtrain(args, [], shim=True, what=what, env=env)
    if not on:
        return
    fit = [l for l in err.splitlines() if "  fit from " in l]
    check(len(fit) == 1 and "without the vision terms" in fit[0],
          "%s: expected the summary's fit line with the error without the "
          "vision terms beside it, got %r" % (what, fit))


def scenario_malformed(args):
    what = "%s, malformed layout on rank 1" % args.layout
    extra = ["--fault-pack", "6", "--fault-rank", str(args.tp)]
    plain, _ = vlmtrain(args, extra, what=what + ", without the shim")
    on, err = vlmtrain(args, extra, shim=True, what=what)
    if not plain or not on:
        return
    same_digests(what, on, plain)
    field = FIELDS[args.layout]
    lines = [l for l in err.splitlines() if field in l]
    check(len(lines) == 1 and re.search(r"\brank %d\b" % args.tp, lines[0]),
          "%s: expected one line naming world rank %d and %s, got %r"
          % (what, args.tp, field, lines))
    m = re.search(r"hand-offs balanced: \d+ applied, \d+ skipped, (\d+) "
                  r"failed", err)
    # One hand-off fails in every DP group: the bad rank's, and its TP
    # peers' groups with it.
    check(m and int(m.group(1)) == args.tp, "%s: expected %d failed "
          "hand-off(s) in the summary: %r" % (what, args.tp, err[-400:]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("layout", choices=sorted(FIELDS))
    p.add_argument("--preload", required=True,
                   help="libdpshim.so and the adapters, as LD_PRELOAD takes them")
    p.add_argument("--vlmtrain", required=True)
    p.add_argument("--tp", type=int, default=1)
    args = p.parse_args()
    scenario_balanced(args, "mixed", ["--micro-batches", "2",
                                      "--patch-grads"])
    scenario_balanced(args, "text-heavy", ["--image-fraction", "0.05"])
    scenario_prefetch(args)
    scenario_fitted(args)
    scenario_malformed(args)
    print("vlm %s: %d failed checks" % (args.layout, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
