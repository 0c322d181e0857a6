#!/usr/bin/env python3
"""Random small solver instances in dpshim-solve-bench --dump-instances's
format (dpshim-instance-1), for tools/dpshim-optcheck: each rank a pack of
3-10 log-normal lengths (median 2000, sigma 1.2, at most 16384), 12 bytes a
token, cost model a=1, b=8000, c=0, token cap 1.2 x the mean tokens per
rank; two made-up plans, "none" (every sample at home) and "lpt" (costliest
first to the least-loaded rank with token room; "none" when one does not
fit).

    gen_instances.py DIR [--ranks 4,8,16] [--seeds 3] [--first-seed 1]
"""
import argparse
import json
import math
import os
import random

MODEL = {"a": 1.0, "b": 8000.0, "c": 0.0, "d": 0.0, "e": 0.0}


def cost(model, n):
    return model["a"] * n * n + model["b"] * n + model["c"]


def plan_figures(inst, dest, applied=True):
    loads = [0.0] * inst["ranks"]
    for (n, _, _), r in zip(inst["samples"], dest):
        loads[r] += cost(inst["model"], n)
    return {"max_load": max(loads), "applied": applied,
            "bytes_moved": sum(b for (_, b, o), r in
                               zip(inst["samples"], dest) if o != r)}


def lpt(inst):
    P, cap = inst["ranks"], inst["cap_tokens"]
    loads, toks = [0.0] * P, [0] * P
    samples = inst["samples"]
    order = sorted(range(len(samples)),
                   key=lambda i: (-samples[i][0], i))
    dest = [None] * len(samples)
    for i in order:
        n = samples[i][0]
        ok = [r for r in range(P) if cap is None or toks[r] + n <= cap]
        if not ok:
            return None
        r = min(ok, key=lambda r: (loads[r], r))
        dest[i] = r
        loads[r] += cost(inst["model"], n)
        toks[r] += n
    return dest


def make(P, seed, cap_ratio=1.2, model=MODEL):
    rng = random.Random(seed * 1000 + P)
    samples = []
    for r in range(P):
        for _ in range(rng.randint(3, 10)):
            n = int(min(16384, max(1, round(rng.lognormvariate(
                math.log(2000), 1.2)))))
            samples.append([n, 12 * n, r])
    total = sum(s[0] for s in samples)
    cap = None if cap_ratio is None else int(cap_ratio * total / P)
    if cap is not None and max(s[0] for s in samples) > cap:
        cap = max(s[0] for s in samples)  # keep it feasible
    inst = {"format": "dpshim-instance-1", "profile": "gen", "ranks": P,
            "seed": seed, "cap_ratio": cap_ratio, "cap_tokens": cap,
            "model": dict(model), "threshold": 0.0, "samples": samples}
    home = [s[2] for s in samples]
    dest = lpt(inst)
    inst["plans"] = {"none": plan_figures(inst, home, False),
                     "lpt": plan_figures(inst, dest or home, dest is not None)}
    return inst


def write(path, inst):
    with open(path, "w") as f:
        json.dump(inst, f)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--ranks", default="4,8,16")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    for P in (int(x) for x in args.ranks.split(",")):
        for s in range(args.first_seed, args.first_seed + args.seeds):
            write(os.path.join(args.dir, "gen-P%d-s%d.json" % (P, s)),
                  make(P, s))


if __name__ == "__main__":
    main()
