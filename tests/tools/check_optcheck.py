#!/usr/bin/env python3
"""tools/dpshim-optcheck on tiny instances whose optimum is known: two
built by hand (OPT and the fewest bytes obvious, one where the token cap
raises OPT above every bound but the cap's), and random ones with P = 2..3
and at most 8 samples, with and without a cap, checked against brute force
over every assignment; then the plans' ratios (bytes/fewest "inf" when the
fewest is 0) and a malformed file named in one line. Skipped (77) when the
checker's interpreter (its shebang) has no scipy.optimize.milp.

    check_optcheck.py [REPO]     REPO: the source tree (default: ..)
"""
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))
from mpitest import check, outcome  # noqa: E402

REPO = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECKER = os.path.join(REPO, "tools", "dpshim-optcheck")
EPS = 1e-3
MODEL = {"a": 1.0, "b": 8.0, "c": 3.0, "d": 0, "e": 0}


def interpreter():
    with open(CHECKER) as f:
        line = f.readline()
    return line[2:].strip().split()[0] if line.startswith("#!") else "python3"


def cost(n):
    return MODEL["a"] * n * n + MODEL["b"] * n + MODEL["c"]


def instance(P, samples, cap=None, plans=None):
    d = {"format": "dpshim-instance-1", "profile": "test", "ranks": P,
         "seed": 0, "cap_ratio": None, "cap_tokens": cap, "model": MODEL,
         "threshold": 0.0, "samples": samples}
    if plans is not None:
        d["plans"] = plans
    return d


def brute(inst):
    """(OPT, fewest bytes within (1 + EPS) * OPT) over every assignment;
    None when none fits the cap."""
    P, cap, S = inst["ranks"], inst["cap_tokens"], inst["samples"]
    plans = []
    for dest in itertools.product(range(P), repeat=len(S)):
        loads, toks = [0.0] * P, [0] * P
        for (n, _, _), r in zip(S, dest):
            loads[r] += cost(n)
            toks[r] += n
        if cap is not None and max(toks) > cap:
            continue
        plans.append((max(loads), sum(b for (_, b, o), r in zip(S, dest)
                                      if o != r)))
    if not plans:
        return None
    opt = min(m for m, _ in plans)
    return opt, min(b for m, b in plans if m <= (1 + EPS) * opt)


def run(args):
    return subprocess.run([interpreter(), CHECKER] + args,
                          capture_output=True, text=True, timeout=120)


def main():
    py = interpreter()
    try:
        probe = subprocess.run([py, "-c", "from scipy.optimize import milp"],
                               capture_output=True).returncode
    except OSError:
        probe = -1
    if probe != 0:
        print("SKIP: %s has no scipy.optimize.milp (apt-get install "
              "python3-scipy)" % py)
        return 77
    rng = random.Random(11)
    tmp = tempfile.mkdtemp(prefix="optcheck.")
    cases = {}
    # Four equal samples all on rank 0 of 2: OPT two of them, two move.
    cases["equal"] = (instance(2, [[10, 100, 0]] * 4),
                      2 * cost(10), 200)
    # Lengths 9, 1, 1, 5, 4 on 2 ranks, cap 10 tokens: every rank holds
    # exactly 10, so the 9 takes a 1: OPT = cost(9) + cost(1) = 168, above
    # the bounds without the cap (cost(9) = 156 is OPT without it), equal
    # to the cap bound. Fewest: the 9 (1 byte) joins the 1 on rank 1.
    cases["cap"] = (instance(2, [[9, 1, 0], [1, 5, 0], [1, 7, 1],
                                 [5, 3, 0], [4, 2, 0]], cap=10),
                    cost(9) + cost(1), 1)
    for k in range(8):
        P = 2 + k % 2
        n = rng.randint(4, 8 if P == 2 else 7)
        S = [[rng.randint(1, 40), rng.randint(0, 50), rng.randrange(P)]
             for _ in range(n)]
        total = sum(s[0] for s in S)
        cap = None if k < 3 else max(max(s[0] for s in S),
                                     int(total / P * rng.uniform(1.0, 1.3)))
        while cap is not None and brute(instance(P, S, cap)) is None:
            cap += 1  # no plan within it
        cases["rand%d" % k] = (instance(P, S, cap), None, None)
    for name, (inst, opt, few) in cases.items():
        bopt, bfew = brute(inst)
        if opt is not None:
            check(abs(bopt - opt) < 1e-9 and bfew == few,
                   "%s: brute force %g %d, built %g %d" % (name, bopt, bfew,
                                                           opt, few))
        cases[name] = (inst, bopt, bfew)
        with open(os.path.join(tmp, name + ".json"), "w") as f:
            json.dump(inst, f)
    out = tmp + ".out.json"
    r = run([tmp, "--json", out, "--time-limit", "20"])
    # With presolve (rand0 is a model scipy 1.10's HiGHS's presolve calls
    # infeasible): the same figures.
    r2 = run([tmp, "--json", out + "2", "--presolve"])
    check(r2.returncode == 0, "--presolve: exit %d: %s" % (r2.returncode,
                                                          r2.stderr))
    if r2.returncode == 0:
        figs = [[(x["opt"]["value"], x["fewest_bytes"]["value"])
                 for x in json.load(open(o))["instances"]]
                for o in (out, out + "2")]
        check(figs[0] == figs[1], "--presolve: other figures %s" % figs)
    check(r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr))
    if r.returncode != 0:
        return 1
    recs = {os.path.basename(x["file"])[:-5]: x
            for x in json.load(open(out))["instances"]}
    for name, (inst, bopt, bfew) in cases.items():
        x = recs[name]
        check(x["opt"]["proven"] and x["fewest_bytes"]["proven"],
               "%s: not proven" % name)
        check(abs(x["opt"]["value"] - bopt) <= 1e-9 * bopt,
               "%s: OPT %g, brute force %g" % (name, x["opt"]["value"], bopt))
        check(x["fewest_bytes"]["value"] == bfew,
               "%s: fewest bytes %s, brute force %d" % (
                   name, x["fewest_bytes"]["value"], bfew))
        check(x["lower_bounds"]["lb"] <= bopt * (1 + 1e-12),
               "%s: LB %g above OPT %g" % (name, x["lower_bounds"]["lb"],
                                           bopt))
    cb = recs["cap"]["lower_bounds"]
    check(max(cb["mean"], cb["largest"], cb["pairs"]) < cases["cap"][1]
           and cb["cap"] >= cases["cap"][1] * (1 - 1e-9),
           "cap: bounds %s, OPT %g: the cap's should reach it alone" % (
               cb, cases["cap"][1]))
    # Plans: home is optimal on "home"; a plan there moving bytes is "inf".
    home = instance(2, [[10, 100, 0], [10, 100, 1]], plans={
        "stay": {"max_load": cost(10), "bytes_moved": 0, "applied": False},
        "swap": {"max_load": cost(10), "bytes_moved": 200, "applied": True},
        "bad": {"max_load": 2 * cost(10), "bytes_moved": 100,
                "applied": True}})
    path = os.path.join(tmp, "home.json")
    with open(path, "w") as f:
        json.dump(home, f)
    r = run([path, "--json", out])
    check(r.returncode == 0, "home: exit %d: %s" % (r.returncode, r.stderr))
    if r.returncode == 0:
        a = json.load(open(out))["instances"][0]["algos"]
        check(a["stay"]["bytes_over_fewest"] == 1.0
               and a["swap"]["bytes_over_fewest"] == "inf"
               and a["bad"]["max_over_opt"] == 2.0,
               "home: plan ratios %s" % a)
        check("inf" in r.stdout, "home: no 'inf' in the table")
    # Plans with dest: the checker recomputes their figures (a plan whose
    # dest disagrees fails the run, named), and --fewest-at-plan gives the
    # fewest bytes at the plan's own maximum. On "equal" with a cap of 25
    # tokens, a plan two and two on the ranks is optimal and moves 200.
    two = instance(2, [[10, 100, 0]] * 4, cap=25, plans={
        "good": {"max_load": 2 * cost(10), "bytes_moved": 200,
                 "applied": True, "dest": [0, 0, 1, 1]},
        "lies": {"max_load": cost(10), "bytes_moved": 200, "applied": True,
                 "dest": [0, 0, 1, 1]}})
    path = os.path.join(tmp, "dest.json")
    with open(path, "w") as f:
        json.dump(two, f)
    r = run([path, "--json", out, "--fewest-at-plan", "good"])
    check(r.returncode == 1 and "lies: dest gives max load" in r.stdout,
           "dest: exit %d, stdout %r" % (r.returncode, r.stdout))
    if r.returncode == 1:
        x = json.load(open(out))["instances"][0]
        g = x["algos"]["good"]
        check(g["fewest_at_plan"]["value"] == 200 and
               g["bytes_over_fewest_at_plan"] == 1.0 and
               len(x["plan_errors"]) == 1,
               "dest: figures %s, errors %s" % (g, x.get("plan_errors")))
    # A malformed file: one line naming the file and the field.
    bad = dict(home, samples=[[10, 100, 0], [10, 100, 2]])
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        json.dump(bad, f)
    r = run([path])
    lines = r.stderr.strip().splitlines()
    check(r.returncode != 0 and len(lines) == 1 and "bad.json" in lines[0]
           and "samples[1][2]" in lines[0],
           "malformed: exit %d, stderr %r" % (r.returncode, r.stderr))
    shutil.rmtree(tmp)
    for o in (out, out + "2"):
        if os.path.exists(o):
            os.remove(o)
    print("%d instances against brute force" % len(cases))
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
