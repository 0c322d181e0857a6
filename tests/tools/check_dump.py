#!/usr/bin/python3
"""dpshim-solve-bench --dump-instances on a tiny grid (seconds): each file is
format dpshim-instance-1 and parses; its samples add up (every rank holds
some, no more than --max-samples; the cap is the solver's); the instances are
the same whether the bench solves or not, and a mix re-run alone gives the
same instances; with --algos, `none`'s max_load is the largest rank load
recomputed from the samples and the cost model, and every plan's dest adds
up to its max_load and bytes_moved.

    check_dump.py BENCH     BENCH: the dpshim-solve-bench executable
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))
from mpitest import check, outcome  # noqa: E402

BENCH = sys.argv[1]
PROFILES = ["sft", "long", "fewlong", "mix1", "mix2", "mix3"]
RANKS, SEEDS, MAX_SAMPLES = [4, 8], 2, 4
BYTES_PER_TOKEN = 12
KEYS = {"format", "profile", "ranks", "seed", "cap_ratio", "cap_tokens",
        "model", "threshold", "samples"}
NAME = re.compile(r"^(?P<profile>[a-z0-9]+)-P(?P<ranks>\d+)-s(?P<seed>\d+)\.json$")


def fail(msg):
    """A failed check ends the run: what follows reads what failed."""
    check(False, "check_dump: " + msg)
    sys.exit(outcome())


def bench(*args):
    r = subprocess.run([BENCH, *args], capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s exited %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r.stdout


def dump(outdir, *extra):
    bench("--dump-instances", outdir, "--profile", "sft,long,fewlong,mix:3",
          "--ranks", ",".join(map(str, RANKS)), "--seeds", str(SEEDS),
          "--max-samples", str(MAX_SAMPLES), *extra)
    return {f: json.load(open(os.path.join(outdir, f)))
            for f in sorted(os.listdir(outdir))}


def cost(model, length):
    return model["a"] * length * length + model["b"] * length + model["c"]


def loads(inst, dest=None):
    """Per-rank loads with sample i on dest[i] (default: its origin)."""
    load = [0.0] * inst["ranks"]
    for i, (length, _, origin) in enumerate(inst["samples"]):
        load[origin if dest is None else dest[i]] += cost(inst["model"], length)
    return load


def check_instance(fname, inst):
    m = NAME.match(fname)
    if not m:
        fail("%s: name not <profile>-P<ranks>-s<seed>.json" % fname)
    if set(inst) - {"plans", "solver_bounds"} != KEYS:
        fail("%s: keys %s" % (fname, sorted(inst)))
    if inst["format"] != "dpshim-instance-1":
        fail("%s: format %r" % (fname, inst["format"]))
    if (inst["profile"], inst["ranks"], inst["seed"]) != (
            m["profile"], int(m["ranks"]), int(m["seed"])):
        fail("%s: profile/ranks/seed differ from the name" % fname)
    if inst["model"] != {"a": 1, "b": 8000, "c": 0, "d": 0, "e": 0}:
        fail("%s: model %r" % (fname, inst["model"]))
    P = inst["ranks"]
    count = [0] * P
    tokens = 0
    for length, nbytes, origin in inst["samples"]:
        if not (isinstance(length, int) and length >= 1):
            fail("%s: length %r" % (fname, length))
        if nbytes != BYTES_PER_TOKEN * length:
            fail("%s: %d bytes for %d tokens" % (fname, nbytes, length))
        if not 0 <= origin < P:
            fail("%s: origin %r" % (fname, origin))
        count[origin] += 1
        tokens += length
    if min(count) < 1 or max(count) > MAX_SAMPLES:
        fail("%s: samples per rank %r" % (fname, count))
    # The solver's expression, in its order: (ratio * tokens) / ranks.
    if inst["cap_tokens"] != math.floor(inst["cap_ratio"] * tokens / P):
        fail("%s: cap_tokens %r" % (fname, inst["cap_tokens"]))


def check_plans(fname, inst, algos):
    plans = inst.get("plans")
    if plans is None or list(plans) != algos:
        fail("%s: plans %r, expected %r" % (fname, plans, algos))
    # The solver's bounds ride with its plans: no plan goes below them.
    b = inst.get("solver_bounds", {})
    if not 0 <= b.get("lower_bound", -1) <= b.get("lower_bound_cap", -2) or any(
            p["max_load"] < b["lower_bound"] * (1 - 1e-12)
            for p in plans.values()):
        fail("%s: solver_bounds %r" % (fname, b))
    for algo, p in plans.items():
        if set(p) != {"max_load", "bytes_moved", "applied", "dest"} or \
                not isinstance(p["applied"], bool):
            fail("%s: plan %s %r" % (fname, algo, p))
            continue
        # The plan itself adds up to its figures.
        n, P = len(inst["samples"]), inst["ranks"]
        if len(p["dest"]) != n or not all(0 <= r < P for r in p["dest"]):
            fail("%s: plan %s: dest %r" % (fname, algo, p["dest"]))
            continue
        moved = sum(b for (_, b, o), r in zip(inst["samples"], p["dest"])
                    if r != o)
        top = max(loads(inst, p["dest"]))
        if moved != p["bytes_moved"] or abs(top - p["max_load"]) > 1e-9 * top:
            fail("%s: plan %s: dest moves %d bytes to a max of %r, the file "
                 "says %d, %r" % (fname, algo, moved, top, p["bytes_moved"],
                                  p["max_load"]))
    before = max(loads(inst))
    none = plans["none"]
    if none["applied"] or none["bytes_moved"] != 0 or \
            abs(none["max_load"] - before) > 1e-12 * before:
        fail("%s: none's plan %r, loads add up to %r" % (fname, none, before))
    if plans["default"]["max_load"] > before * (1 + 1e-12):
        fail("%s: default above the original" % fname)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        plain = dump(os.path.join(tmp, "plain"))
        want = len(PROFILES) * len(RANKS) * SEEDS
        if len(plain) != want:
            fail("%d files, expected %d" % (len(plain), want))
        for fname, inst in plain.items():
            check_instance(fname, inst)
            if "plans" in inst:
                fail("%s: plans without --algos" % fname)
        algos = ["none", "seed", "default"]
        solved = dump(os.path.join(tmp, "solved"), "--algos", ",".join(algos),
                      "--reps", "1")
        for fname, inst in solved.items():
            plans = inst.pop("plans", None)
            bounds = inst.pop("solver_bounds", None)
            if inst != plain[fname]:
                fail("%s: another instance when the bench solves" % fname)
            inst["plans"] = plans
            inst["solver_bounds"] = bounds
            check_plans(fname, inst, algos)
        alone = os.path.join(tmp, "alone")
        bench("--dump-instances", alone, "--profile", "mix2", "--ranks", "8",
              "--seeds", str(SEEDS), "--max-samples", str(MAX_SAMPLES))
        for fname in os.listdir(alone):
            if json.load(open(os.path.join(alone, fname))) != plain[fname]:
                fail("%s: mix2 alone differs from mix2 of mix:3" % fname)
    described = [json.loads(line) for line in
                 bench("--profile", "mix:3", "--describe-mixes").splitlines()]
    if [d["mix"] for d in described] != ["mix1", "mix2", "mix3"]:
        fail("--describe-mixes: %r" % described)
    print("check_dump: %d instances, ok" % want)


main()
