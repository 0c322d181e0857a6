#!/usr/bin/env python3
"""The Python side (tools/python/dpshim, tools/python/boot) under mpirun:
  py_handoff.py   NumPy and torch batches balanced in place (each sample
                  once over the ranks, every sample's rows intact, some
                  moved); a batch one rank cannot describe: TypeError there,
                  dpshim.Error(EINVAL) on the others, nothing moved, no
                  hang; without the preload nothing is done;
  py_hook.py      dpshim-run's start-up hook on plain DataLoaders:
    hooked        3 ranks: packed batches balanced (each sample once over
                  the ranks, rows intact, some moved); batches that are no
                  packed dicts, and a loader kept out by dpshim.exclude(),
                  iterated by rank 0 alone: untouched, no hang; a batch
                  rank 1 cannot describe: every rank's batch as made, rank
                  1's reason said, no hang; a BalancedLoader balanced once
                  (the shim counts one hand-off a step);
    marks         dpshim.step_end(): 4 marks over 8 hand-offs make 4 steps;
    inert         no torch or dpshim imported, DataLoader as it is, its
                  batches the very objects made, step_end() 0: without the
                  preload, with balancing off, with DPSHIM_PY_WRAP=0; with
                  all three on the hook is there (and torch still not
                  imported at start-up, and the hook starts MPI for a
                  process without it: a world of one rank, said); the
                  system's sitecustomize runs;
  py_ahead.py     (beside py_hook.py; one process, no MPI) dpshim.ahead's
                  thread with the library stood in for: order, one take a
                  hand-off, errors where they were raised, the end, a
                  dropped iterator, two iterators by turns, the gate (what
                  passes untouched, decided on the trainer's thread),
                  BalancedLoader's ahead=, DPSHIM_AHEAD's values;
  train.py        the PyTorch trainer, which knows nothing of dpshim, at 4
                  ranks through dpshim-run: --sync gloo (DDP) with 1 and 2
                  micro-batches a step (2 derived by dpshim-run from
                  --global-batch-size/--micro-batch-size), each balanced
                  ahead (the default) and inline (DPSHIM_AHEAD=0), and
                  --sync mpi with 2, ahead: each sample exactly once a step
                  and the samples of the run without the shim, every step's
                  loss that run's within 1e-9 relative, plans applied after
                  the warm-up, and the fit (with gloo: from the step times);
                  ahead, every hand-off made on the hook's thread (its
                  line at exit says so), inline none.
Skipped (77) without Debian's python3-torch and python3-mpi4py.

    check_python.py --run DPSHIM_RUN --shim LIBDPSHIM --python DIR
                    --train TRAIN_PY --handoff PY_HANDOFF --hook PY_HOOK
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))

from mpitest import (MPIRUN, check, check_plans_applied, outcome,
                     read_jsonl, run)

PY = "/usr/bin/python3"
# Eight warm-up steps: three step times fit the three cost terms exactly,
# and on a loaded machine the noise then often leaves only the linear term,
# which sees nothing to balance in equal packs; five still found no len^2
# term in 1 run of 4 of torch's timings on a busy 2-core machine.
SHIM = ["--use-vlm-dp-balance", "--vlm-dp-balance-warmup-iters", "2", "3",
        "4", "5", "6", "7", "8", "9", "--trigger-threshold", "0"]
STEPS, PACK = 13, 1024  # train.py: 4 steps balanced after the warm-up


def launch(args, flags, cmd, ranks, env=None, timeout=300):
    """cmd under mpirun at `ranks`, through dpshim-run with `flags` (None:
    plain mpirun, no preload); returns (rc, stdout, stderr)."""
    mpi = MPIRUN + ["-x", "PYTHONPATH"] + [
        a for k in sorted(env or {}) for a in ("-x", k)] + [
            "-np", str(ranks), PY] + cmd
    full = dict(env or {}, PYTHONPATH=args.python)
    if flags is None:
        return run(mpi, env=full, timeout=timeout)
    return run([args.run, "--lib", args.shim] + flags + ["--"] + mpi,
               env=full, timeout=timeout)


def json_lines(out):
    """The JSON objects in out: ranks' lines may run into one another when
    mpirun forwards them."""
    objs, dec = [], json.JSONDecoder()
    for line in out.splitlines():
        k = line.find("{")
        while k >= 0:
            try:
                obj, end = dec.raw_decode(line, k)
            except ValueError:
                break
            objs.append(obj)
            k = line.find("{", end)
    return objs


def handoffs(args):
    # --step sync: the script's Allreduce ends its steps from the first
    # (auto measures a hand-off or more before it decides).
    rc, out, err = launch(args, ["--use-vlm-dp-balance", "--coefs", "0,1,0",
                                 "--trigger-threshold", "0", "--step", "sync"],
                          [args.handoff], 3)
    ranks = sorted(json_lines(out), key=lambda r: r["rank"])
    if not check(rc == 0 and len(ranks) == 3, "py_handoff: rc %d, %r" % (
            rc, err[-500:])):
        return
    for k in (0, 2):
        calls = [r["calls"][k] for r in ranks]
        before = collections.Counter(i for c in calls for i in c["before"])
        after = collections.Counter(i for c in calls for i in c["after"])
        check(all(c["outcome"] == "ok" and c["intact"] for c in calls) and
              before == after and max(after.values()) == 1 and
              any(c["before"] != c["after"] for c in calls),
              "py_handoff call %d (%s): %s" % (k, "torch" if k else "numpy",
                                               calls))
    calls = [r["calls"][1] for r in ranks]
    check([c["outcome"] for c in calls] == ["Error -22", "TypeError",
                                            "Error -22"] and
          all(c["before"] == c["after"] and c["intact"] for c in calls) and
          "rank 1: cu_seqlens" in err,
          "py_handoff, a batch rank 1 cannot describe: %s, %r" % (calls,
                                                                   err[-300:]))
    rc, out, err = launch(args, None, [args.handoff], 3)
    ranks = json_lines(out)
    check(rc == 0 and len(ranks) == 3 and all(
        not r["available"] and all(c["before"] == c["after"] and
                                   c["outcome"] == "ok" for c in r["calls"])
        for r in ranks), "py_handoff without the preload: %r %r" % (
            ranks, err[-300:]))


def ids_by_step(path):
    """{step: {rank: [ids]}} from train.py --ids-out."""
    steps = collections.defaultdict(dict)
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                w = line.split()
                steps[int(w[0])][int(w[1])] = w[2:]
    return steps


def summary(err):
    """The shim's summary: {"steps", "applied", "skipped", "failed"} and
    its lines; {} when it printed none."""
    out = {"lines": [l for l in err.splitlines() if l.startswith("dpshim:")]}
    m = re.search(r"dpshim: summary: (\d+) steps", err)
    if m:
        out["steps"] = int(m.group(1))
    m = re.search(r"dpshim:   hand-offs balanced: (\d+) applied, (\d+) "
                  r"skipped, (\d+) failed", err)
    if m:
        out.update(zip(("applied", "skipped", "failed"), map(int, m.groups())))
    return out


# ---- the start-up hook ------------------------------------------------------

def hook_hooked(args):
    rc, out, err = launch(args, ["--use-vlm-dp-balance", "--coefs", "0,1,0",
                                 "--trigger-threshold", "0", "--step", "sync"],
                          [args.hook, "hooked"], 3, timeout=120)
    ranks = sorted(json_lines(out), key=lambda r: r["rank"])
    if not check(rc == 0 and len(ranks) == 3, "py_hook hooked: rc %d, %r"
                 % (rc, err[-500:])):
        return
    check(all(r["wrapped"] and not r["startup"]["torch"] for r in ranks),
          "py_hook hooked: DataLoader not wrapped, or torch imported at "
          "start-up: %s" % [(r["wrapped"], r["startup"]) for r in ranks])
    for k, step in enumerate(zip(*[r["steps"] for r in ranks]), 1):
        made = collections.Counter(i for s in step for i in s["made"])
        got = collections.Counter(i for s in step for i in s["got"])
        moved = any(s["made"] != s["got"] for s in step)
        check(made == got and max(got.values()) == 1 and
              all(s["intact"] and s["note"] == "step %d" % k for s in step),
              "py_hook step %d: other samples, some twice, or rows broken: "
              "%s" % (k, step))
        check(moved == (k != 4), "py_hook step %d: %s" % (k, "nothing moved"
              if k != 4 else "moved, though rank 1's batch was bad"))
    check("rank 1: cu_seqlens" in err, "py_hook: rank 1's bad batch not "
          "named: %r" % err[-500:])
    check(ranks[0].get("plain_untouched") and
          ranks[0].get("excluded_untouched"), "py_hook: rank 0's batches "
          "that are no packed dicts, or of an excluded loader, were changed")
    n = summary(err)
    check(n.get("applied", 0) + n.get("skipped", 0) + n.get("failed", 0) == 6
          and n.get("failed") == 1, "py_hook: %s: expected 6 hand-offs, 1 "
          "failed (a BalancedLoader's batches balanced once)" % n)


def hook_marks(args):
    rc, out, err = launch(args, ["--use-vlm-dp-balance", "--coefs", "0,1,0",
                                 "--step", "handoff"],
                          [args.hook, "marks"], 3, timeout=120)
    ranks = json_lines(out)
    check(rc == 0 and len(ranks) == 3 and
          all(r["marks"] == [0, 0, 0, 0] for r in ranks),
          "py_hook marks: rc %d, %s, %r" % (rc, ranks, err[-500:]))
    n = summary(err)
    check(n.get("steps") == 4, "py_hook marks: 4 dpshim.step_end() marks "
          "over 8 hand-offs, yet %s steps: %s" % (n.get("steps"), n["lines"]))


def hook_inert(args):
    """The hook off in three ways and on (the control) in a plain python,
    no MPI: its start-up state, DataLoader, a batch, step_end()."""
    p = subprocess.run([PY, "-c", "import sitecustomize; "
                        "print(sitecustomize.__file__)"],
                       capture_output=True, text=True)
    system = p.stdout.strip() if p.returncode == 0 else None
    run_py = [args.run, "--lib", args.shim]
    hook = [PY, args.hook, "inert"]
    paths = os.path.join(args.python, "boot") + ":" + args.python
    cases = [
        ("without the preload", hook,
         {"PYTHONPATH": paths, "DPSHIM_VLM_BALANCE": "1"}, False),
        ("balancing off", run_py + ["--vlm-balance=0", "--"] + hook, {},
         False),
        ("DPSHIM_PY_WRAP=0", run_py + ["--use-vlm-dp-balance", "--"] + hook,
         {"DPSHIM_PY_WRAP": "0"}, False),
        ("on (the control)", run_py + ["--use-vlm-dp-balance", "--"] + hook,
         {}, True)]
    for what, cmd, env, on in cases:
        rc, out, err = run(cmd, env=env, timeout=120)
        res = (json_lines(out) or [{}])[0]
        start = res.get("startup", {})
        if on:
            # No MPI of its own: the hook starts it (mpi4py, through the
            # shim), which finds a world of one rank and says so.
            ok = (start.get("finder") and not start.get("torch") and
                  res.get("wrapped") and "nothing is balanced: every DP "
                  "group has one rank" in err)
        else:
            ok = (start == {"torch": False, "dpshim": [], "finder": False}
                  and res.get("wrapped") is False and res.get("untouched"))
        check(rc == 0 and ok and
              res.get("step_end") == 0 and res.get("chained") == system,
              "py_hook inert, %s: rc %d, %s (the system's sitecustomize: "
              "%s), %r" % (what, rc, res, system, err[-300:]))


def ahead_unit(args):
    """py_ahead.py: dpshim.ahead's thread on its own."""
    script = os.path.join(os.path.dirname(os.path.abspath(args.hook)),
                          "py_ahead.py")
    rc, out, err = run([PY, script], env={"PYTHONPATH": args.python},
                       timeout=120)
    res = (json_lines(out) or [None])[0]
    if not check(rc == 0 and isinstance(res, dict) and len(res) == 7,
                 "py_ahead: rc %d, %r %r" % (rc, out[-300:], err[-500:])):
        return
    for case, failures in res.items():
        check(not failures, "py_ahead %s: %s" % (case, failures))


# ---- train.py ---------------------------------------------------------------

def train(args, flags, sync, micro, tmp, name, env=None):
    """train.py at 4 ranks: (rank 0's JSON lines, ids by step, stderr)."""
    ids = os.path.join(tmp, name + ".ids")
    rc, out, err = launch(
        args, flags, [args.train, "--steps", str(STEPS), "--pack", str(PACK),
                      "--sync", sync, "--micro-batches", str(micro),
                      "--ids-out", ids], 4, env=env, timeout=150)
    lines = json_lines(out)
    check(rc == 0 and len(lines) == STEPS + 1, "train.py %s: rc %d, %r"
          % (name, rc, err[-500:]))
    if lines:
        print("train.py %s: %s" % (name, json.dumps(lines[-1])))
    return lines, ids_by_step(ids), err


def same_training(name, ref, run_):
    """Every step: the reference's samples, each once over the ranks, and
    its loss within 1e-9 relative."""
    for step in range(1, STEPS + 1):
        want = sorted(i for ids in ref[1].get(step, {}).values() for i in ids)
        got = [i for ids in run_[1].get(step, {}).values() for i in ids]
        check(want and sorted(got) == want and len(got) == len(set(got)),
              "%s, step %d: other samples than without the shim, or some "
              "twice" % (name, step))
    for a, b in zip(ref[0][:STEPS], run_[0][:STEPS]):
        check(a["tokens"] == b["tokens"] and
              abs(a["loss"] - b["loss"]) <= 1e-9 * abs(a["loss"]),
              "%s, step %d: loss %r without the shim, %r with it" % (
                  name, a["step"], a["loss"], b["loss"]))


def balanced_run(name, res, fit_line):
    n = summary(res[2])
    check(n.get("applied", 0) > 0, "%s: no plan applied after the warm-up: "
          "%s" % (name, n["lines"]))
    check(any(l.startswith(fit_line) for l in n["lines"]),
          "%s: no line '%s...': %s" % (name, fit_line, n["lines"]))
    check(res[0] and res[0][-1].get("balancing") is True,
          "%s: libdpshim.so not in the trainer" % name)


AHEAD_LINE = re.compile(r"dpshim: python: (\d+) hand-offs balanced ahead on "
                        r"a loader thread \(DPSHIM_AHEAD=(\d+)\), (\d+) "
                        r"inline")


def has_taken(shim):
    """Whether this libdpshim.so exports dpshim_batch_taken(), which
    balancing ahead needs (an older one: every batch inline, said once)."""
    import ctypes
    try:
        return hasattr(ctypes.CDLL(shim), "dpshim_batch_taken")
    except OSError:
        return False


def ahead_run(name, res, micro, ahead, taken=True):
    """Ahead: every hand-off made on the hook's thread (rank 0's line at
    exit), and the shim's summary gives its time balancing ahead. Inline:
    no thread, neither line. Ahead with a
    shim without dpshim_batch_taken(): inline, said once."""
    found = AHEAD_LINE.findall(res[2])
    # The shim's own word: its time balancing beside the compute.
    beside = any(l.startswith("dpshim:   balancing ahead, beside the "
                              "compute") for l in summary(res[2])["lines"])
    check(beside == bool(ahead and taken), "%s: the shim's summary %s "
          "balancing ahead: %s" % (name, "lacks" if ahead and taken else
                                   "has", summary(res[2])["lines"]))
    if ahead and not taken:
        check(not found and res[2].count("has no dpshim_batch_taken()") == 1,
              "%s: a shim without dpshim_batch_taken(), yet not inline with "
              "one line saying so: %s" % (name, summary(res[2])["lines"]))
    elif ahead:
        want = [(str(STEPS * micro), str(ahead), "0")]
        check(found == want, "%s: expected the line 'dpshim: python: %s "
              "hand-offs balanced ahead ...(DPSHIM_AHEAD=%s), %s inline', "
              "got %s: %s" % ((name,) + want[0] + (found,
                                                   summary(res[2])["lines"])))
    else:
        check(not found and "dpshim: python:" not in res[2],
              "%s: balanced ahead, though DPSHIM_AHEAD=0: %s" % (
                  name, summary(res[2])["lines"]))


def training(args):
    step_fit = "dpshim:   fit from step times"
    two = SHIM + ["--global-batch-size", "8", "--micro-batch-size", "1"]
    inline = {"DPSHIM_AHEAD": "0"}
    taken = has_taken(args.shim)
    if not taken:
        print("NOTE: %s has no dpshim_batch_taken(): the runs 'ahead' are "
              "checked to stay inline" % args.shim)
    with tempfile.TemporaryDirectory() as tmp:
        ref = {m: train(args, None, "gloo", m, tmp, "gloo x%d" % m)
               for m in (1, 2)}
        runs = [
            ("gloo x1 ahead", SHIM, "gloo", 1, step_fit, None),
            ("gloo x2 ahead", two, "gloo", 2, step_fit, None),
            ("gloo x1 inline", SHIM, "gloo", 1, step_fit, inline),
            ("gloo x2 inline", two, "gloo", 2, step_fit, inline),
            ("mpi x2 ahead", SHIM, "mpi", 2, "dpshim:   fit from", None)]
        for name, flags, sync, micro, fit_line, env in runs:
            res = train(args, flags, sync, micro, tmp, name, env)
            same_training("train.py " + name, ref[micro], res)
            balanced_run("train.py " + name, res, fit_line)
            ahead_run("train.py " + name, res, micro, 0 if env else 1,
                      taken)


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--run", "--shim", "--python", "--train", "--handoff",
                "--hook"):
        ap.add_argument(opt, required=True)
    args = ap.parse_args()
    probe = subprocess.run([PY, "-c", "import torch, mpi4py, numpy"],
                           capture_output=True)
    if probe.returncode != 0:
        print("SKIP: %s lacks torch or mpi4py (apt-get install python3-torch "
              "python3-mpi4py)" % PY)
        return 77
    ahead_unit(args)
    handoffs(args)
    hook_inert(args)
    hook_hooked(args)
    hook_marks(args)
    training(args)
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
