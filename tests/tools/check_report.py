#!/usr/bin/env python3
"""tools/dpshim-report on made-up step logs whose figures are known:
  - a short log of two DP groups: the counts by decision and skip reason,
    the imbalance means (all solved steps, and the applied ones), the
    bytes, the time shares, the wait per rank in warm-up and balanced
    steps (a null time skipped), the fitted model; with --out, summary.txt
    equal to stdout and the three plots written (when gnuplot is here);
  - a long log (5000 steps): read with its series in bins, the plot titles
    saying so;
  - a malformed line: exit 2 naming the line; a log without a step line:
    exit 1.
    check_report.py REPO
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))
from mpitest import check, outcome  # noqa: E402

REPO = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(REPO, "tools", "dpshim-report")


def report(*args):
    p = subprocess.run([sys.executable, TOOL] + list(args),
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def step(n, group, decision, imb=None, reason=None, moved=0, wait=None,
         model=True):
    e = {"step": n, "group": group, "ranks": 2, "decision": decision}
    if reason:
        e["reason"] = reason
    if imb:
        e.update(imbalance_before=imb[0], imbalance_after=imb[1],
                 lower_bound=1.0, load_before=[1.0, 3.0],
                 load_after=[2.0, 2.0] if decision == "apply" else [1.0, 3.0],
                 bytes_moved=moved, bytes_inter_host=moved // 4,
                 bytes_total=1000, hosts=2)
        if model:
            e["model"] = {"a": 1, "b": 2, "c": 3, "d": 0, "e": 0,
                          "source": "fit", "fit_error_mean": 0.01,
                          "fit_error_max": 0.05}
    e.update(compute_ms=[6.0, 6.0], wait_ms=wait or [2.0, 2.0],
             shim_ms=[1.0, 1.0], arrival_ms=[1.0, 1.0],
             encoder_ms=[0.0, 0.0])
    return e


def short_log(path):
    lines = [step(1, 0, "warmup", wait=[4.0, None]),
             step(1, 1, "warmup", wait=[6.0, 2.0]),
             step(2, 0, "apply", (0.5, 0.1), moved=100),
             step(2, 1, "apply", (0.3, 0.1), moved=300),
             step(3, 0, "skip", (0.1, 0.1), reason="balanced"),
             step(3, 1, "skip", (0.2, 0.2), reason="no_gain"),
             step(4, 0, "error")]
    with open(path, "w") as f:
        for e in lines:
            f.write(json.dumps(e) + "\n")
        f.write("\n")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        short_log(log)
        out = os.path.join(tmp, "out")
        rc, text, err = report(log, "--out", out)
        check(rc == 0, "short log: exit %d: %s" % (rc, err))
        want = [
            "7 step lines, 2 DP groups of 2 ranks",
            "decisions: warm-up 2, applied 2, skipped 2 (balanced 1, "
            "no_gain 1), errors 1",
            # (0.5 + 0.3 + 0.1 + 0.2) / 4, (0.1 + 0.1 + 0.1 + 0.2) / 4
            "over the 4 steps solved: before 0.2750, after 0.1250",
            "on the 2 steps applied: 0.4000 -> 0.1000",
            # 400 bytes, 200 per step applied, of 4000 solved over
            "bytes moved: 0.000 MB in all, 0.000 MB per step applied, 10.0%",
            "of those, 25.0% across hosts (2 hosts)",
            # 7 lines x 2 ranks: compute 84, wait 32 (4 + null, 6 + 2,
            # then 2 + 2), shim 14, arrival 14: total 144
            "compute 58.3%, wait at the sync 22.2%, shim 9.7%, arrival 9.7%",
            # warm-up waits: rank 0 (4 + 6) / 2 = 5, rank 1 2 (its null
            # skipped)
            "warm-up steps: mean 3.5 ms, least 2, most 5 (rank 0)",
            "balanced steps: mean 2 ms",
            "cost model (fitted in warm-up): 1*len^2 + 2*len + 3, "
            "prediction error mean 1.00%, max 5.00%"]
        for w in want:
            check(w in text, "short log: %r not in\n%s" % (w, text))
        summary = "".join(l + "\n" for l in text.splitlines()
                          if not l.startswith("wrote "))
        check(os.path.exists(os.path.join(out, "summary.txt")) and
              open(os.path.join(out, "summary.txt")).read() == summary,
              "summary.txt differs from stdout")
        if shutil.which("gnuplot"):
            for png in ("imbalance.png", "loads.png", "wait.png"):
                p = os.path.join(out, png)
                check(os.path.exists(p) and os.path.getsize(p) > 1000,
                      "no plot %s: %s" % (png, err))
        else:
            print("(no gnuplot: plots not checked)")
        # A long log: bins of consecutive steps.
        long_log = os.path.join(tmp, "long.jsonl")
        with open(long_log, "w") as f:
            for n in range(1, 5001):
                f.write(json.dumps(step(n, 0, "apply", (0.5, 0.1), moved=1))
                        + "\n")
        rc, text, err = report(long_log, "--out", os.path.join(tmp, "long"))
        check(rc == 0 and "5000 step lines" in text and
              "applied 5000" in text, "long log: exit %d, %r %r" % (
                  rc, text, err))
        # Malformed and empty.
        bad = os.path.join(tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps(step(1, 0, "warmup")) + "\n{not json\n")
        rc, _, err = report(bad)
        check(rc == 2 and "bad.jsonl:2:" in err and
              len(err.strip().splitlines()) == 1,
              "malformed: exit %d, %r" % (rc, err))
        empty = os.path.join(tmp, "empty.jsonl")
        with open(empty, "w") as f:
            f.write('{"other": 1}\n')
        rc, _, err = report(empty)
        check(rc == 1 and "no step line" in err,
              "no step line: exit %d, %r" % (rc, err))
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
