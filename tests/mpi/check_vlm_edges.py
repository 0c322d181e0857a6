#!/usr/bin/env python3
"""Two edge cases of the VLM layouts under real mpirun, each shown to have
happened, not only survived: vlmtrain over libvlmload.so, with and without
libdpshim.so, 4 DP ranks, every run with --check.

    check_vlm_edges.py one-image|rows-cap LAYOUT --preload LIBDPSHIM:ADAPTERS \\
        --vlmtrain vlmtrain

one-image: a text-heavy mix, one single-tile image per image sample, so
    that balanced ranks often end a hand-off with exactly one image (Qwen:
    one image_grid_thw row, [1, 3]; InternVL: one real tile). vlmtrain
    counts the hand-offs that returned exactly one image while holding a
    sample of another rank: some must, with the shim (none without it);
    check_errors 0 and the digests of the run without the shim.
rows-cap: packs hold at most half the image rows (patch rows, tiles) of
    the fullest pack of an unlimited run, and each rank's image buffer
    exactly one pack's worth. With a roomy buffer (and the same packs) the
    shim's plans give some rank more image rows than that: so the tight
    run's plans are applied only if the solver caps each rank's image rows
    at its capacity, and a plan it did not cap would be skipped
    ("capacity"). The tight run must apply plans, skip none for capacity,
    hold no more rows than its buffers, keep the digests, and stage what
    arrives (its full buffers cannot take it past their rows); the roomy
    run takes it in place.
Exit status 0 when every check holds.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))

from check_vlm import same_digests, vlmtrain
from mpitest import check, check_plans_applied, failures, intact, read_jsonl

# Rare images, one per image sample, each one tile (InternVL) or any size
# (Qwen); no videos, which have buffers of their own.
ONE_IMAGE = ["--image-fraction", "0.1", "--max-images", "1",
             "--max-tiles", "1", "--video-fraction", "0"]
ROWS_CAP = ["--video-fraction", "0"]
# The image-row budget of a pack, as a share of the fullest unlimited
# pack's: packs then fill up with images before tokens.
PACK_ROWS_SHARE = 0.5
ROOMY = "4"  # image buffer of the run without a binding cap, in packs
STAGED = "staged what arrived"  # the summary's line (exchange.h)


def scenario_one_image(args):
    what = "%s, one image per rank" % args.layout
    with tempfile.TemporaryDirectory() as tmp:
        log = tmp + "/steps.jsonl"
        plain, _ = vlmtrain(args, ONE_IMAGE, what=what + ", without the shim")
        on, _ = vlmtrain(args, ONE_IMAGE, shim=True, log=log, what=what)
        if not intact(what, plain, on):
            return
        same_digests(what, on, plain)
        check_plans_applied(read_jsonl(log), 2, what)
    check(plain["one_image_moved"] == 0, "%s: %d hand-offs without the shim "
          "held another rank's sample" % (what, plain["one_image_moved"]))
    check(on["one_image_moved"] > 0, "%s: no balanced hand-off ended with "
          "exactly one image (%d did without moving a sample): the case was "
          "not exercised" % (what, on["one_image"]))


def capacity_skips(entries):
    return [e["step"] for e in entries if e.get("reason") == "capacity"]


def scenario_rows_cap(args):
    what = "%s, image rows capped" % args.layout
    free, _ = vlmtrain(args, ROWS_CAP, what=what + ", packs without a limit")
    if not intact(what, free):
        return
    rows = int(free["image_rows_max"] * PACK_ROWS_SHARE)
    limited = ROWS_CAP + ["--image-rows", str(rows)]
    tight = limited + ["--image-headroom", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        log = tmp + "/steps.jsonl"
        plain, _ = vlmtrain(args, tight, what=what + ", without the shim")
        roomy, roomy_err = vlmtrain(args, limited + ["--image-headroom", ROOMY],
                                    shim=True, what=what + ", roomy buffers")
        on, err = vlmtrain(args, tight, shim=True, log=log, what=what)
        entries = read_jsonl(log)
    if not intact(what, plain, roomy, on):
        return
    same_digests(what, on, plain)
    same_digests(what + ", roomy buffers", roomy, plain)
    cap = on["image_rows_capacity"]
    check(roomy["image_rows_max"] > cap, "%s: uncapped plans gave a rank at "
          "most %d image rows, within the tight buffers' %d: the cap never "
          "bound" % (what, roomy["image_rows_max"], cap))
    check(on["image_rows_max"] <= cap, "%s: a rank returned %d image rows, "
          "its buffer holds %d" % (what, on["image_rows_max"], cap))
    check(not capacity_skips(entries), "%s: steps %s skipped for capacity: "
          "the solver did not cap the image rows" % (what,
                                                     capacity_skips(entries)))
    check_plans_applied(entries, 2, what)
    # Full image buffers cannot take what arrives past their rows: it is
    # staged; four packs' worth of room takes it in place.
    check(STAGED in err, "%s: full buffers, yet no rank staged what arrived"
          % what)
    check(STAGED not in roomy_err, "%s, roomy buffers: a rank staged what "
          "arrived" % what)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["one-image", "rows-cap"])
    p.add_argument("layout", choices=["internvl", "qwen2vl", "qwen3vl"])
    p.add_argument("--preload", required=True,
                   help="libdpshim.so and the adapters, as LD_PRELOAD takes them")
    p.add_argument("--vlmtrain", required=True)
    args = p.parse_args()
    args.tp = 1  # check_vlm's runs read it
    if args.scenario == "one-image":
        scenario_one_image(args)
    else:
        scenario_rows_cap(args)
    print("vlm %s %s: %d failed checks" % (args.scenario, args.layout,
                                           len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
