#!/usr/bin/env python3
"""tools/demo_report.py --vlm-only on made-up VLM runs (no MPI, no build):
the default+vit variant's columns and results.json fields, the digests
compared with none's, and "vlm_sim" from a dpshim-sim JSON; then the same
without default+vit (demo.sh --no-vlm-vit, or a setup.json from before it).

    check_demo_report.py [REPO]     REPO: the source tree (default: ..)
"""
import json
import os
import subprocess
import sys
import tempfile

REPO = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
REPORT = os.path.join(REPO, "tools", "demo_report.py")
DP, STEPS, LAST = 4, 8, 6
DIGESTS = {"consumed_digest": "c0", "images_digest": "i0",
           "embeddings_digest": "e0", "vit_grad_digest": "g0"}


def write_jsonl(path, lines):
    with open(path, "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in lines)


def make_run(runs, variant, step_ms, vit_max, digests):
    """vit_max: the slowest rank's encoder ms per step (the others': 10),
    after the warm-up; 1000 before it, which must not count."""
    base = os.path.join(runs, "dp%d_%s" % (DP, variant))
    write_jsonl(base + ".stats.jsonl", [{
        "step": s, "step_ms": step_ms, "wait_ms": [1.0, 2.0, 3.0, 4.0],
        "tokens": [1000] * DP, "emu_ms": [100.0, 100.0, 100.0, 120.0],
        "compute_ms": [101.0] * DP, "handoff_ms": [0.5] * DP,
        "vit_emu_ms": [10.0, 10.0, 10.0, vit_max if s >= LAST else 1000.0]}
        for s in range(STEPS)])
    if variant != "none":
        log = [{"step": s, "decision": "skip", "reason": "balanced",
                "shim_ms": [0.1] * DP} for s in range(LAST + 1, STEPS + 1)]
        if variant.endswith("+vit"):
            for e in log:
                e["vit"] = {"calls": 1, "applied": 1, "skipped": 0,
                            "failed": 0, "imbalance_before": 0.3,
                            "imbalance_after": 0.01, "bytes_moved": 2e6}
        write_jsonl(base + ".log.jsonl", log)
    with open(base + ".json", "w") as f:
        f.write(json.dumps(dict(digests, steps=STEPS, tgs=1.0,
                                step_ms_mean=step_ms, check_errors=0,
                                vit_seconds_max=1.0,
                                vit_seconds_mean=0.5)) + "\n")
    open(base + ".err", "w").close()


def make_out(out, variants, vit_digests=DIGESTS):
    runs = os.path.join(out, "vlm-runs")
    os.makedirs(runs)
    setup = {"layout": "internvl", "model": "internvl2-8b", "seed": 7,
             "steps": STEPS, "warmup": "2-%d" % LAST, "warmup_last": LAST,
             "time_scale": 0.25, "args": [], "tp": 1, "shim_env": [],
             "wall_s": 1, "sim_args": ["--layout", "internvl",
                                       "--time-scale", "1"]}
    if variants:
        setup["variants"] = variants
    with open(os.path.join(runs, "setup.json"), "w") as f:
        json.dump(setup, f)
    for v in variants or ["none", "seed", "default"]:
        make_run(runs, v, 1000.0 if v == "none" else 950.0,
                 10.0 + (4.0 if v.endswith("+vit") else 40.0),
                 vit_digests if v.endswith("+vit") else DIGESTS)
    sim = []
    for n in (4, 8):
        for algo, tgs in (("none", 100.0), ("seed", 101.0), ("default", 102.0),
                          ("seed+vit", 99.0), ("default+vit", 105.0)):
            if "+vit" in algo and "default+vit" not in (variants or []):
                continue
            sim.append({"ranks": n, "algo": algo, "tgs": tgs,
                        "bytes_moved_per_step": 0 if algo == "none" else 10,
                        "shim_share": 0.01, "vit_wait_ms": 2.0 if "+vit"
                        in algo else 30.0,
                        "vit_bytes_moved_per_step": 3e9 if "+vit" in algo
                        else 0})
    with open(os.path.join(runs, "sim.json"), "w") as f:
        json.dump(sim, f)


def report(out):
    r = subprocess.run([sys.executable, REPORT, out, "--vlm-only"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("demo_report.py failed (%d): %s" % (r.returncode, r.stderr))
    with open(os.path.join(out, "results.json")) as f:
        return r.stdout, json.load(f)


def expect(cond, what):
    if not cond:
        sys.exit("check_demo_report: " + what)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "vit")
        make_out(out, ["none", "seed", "default", "default+vit"])
        text, doc = report(out)
        d = doc["vlm"]["per_dp"][0]
        expect(doc["vlm"]["variants"][-1] == "default+vit",
               "vlm.variants lacks default+vit: %s" % doc["vlm"]["variants"])
        expect([r["variant"] for r in d["runs"]] ==
               ["none", "seed", "default", "default+vit"],
               "vlm runs: %s" % [r["variant"] for r in d["runs"]])
        expect(d["digests_equal"] and all(d["digests_equal_to_none"].values()),
               "digests should be equal: %s" % d["digests_equal_to_none"])
        expect(abs(d["vit_wait_ms"]["none"] - 30.0) < 1e-9 and
               abs(d["vit_wait_ms"]["default+vit"] - 3.0) < 1e-9,
               "vit_wait_ms = mean over steps after the warm-up of max - "
               "mean: %s" % d["vit_wait_ms"])
        expect(d["vit_bytes_moved_per_step"] == {"default+vit": 2e6},
               "vit bytes: %s" % d["vit_bytes_moved_per_step"])
        expect(d["vit_plans"]["default+vit"]["applied"] == STEPS - LAST,
               "vit plans: %s" % d["vit_plans"])
        for key in ("tgs", "gain", "wait_share", "bytes_moved_per_step",
                    "plans"):  # the keys from before default+vit stay
            expect(key in d, "vlm per_dp lost '%s'" % key)
        expect("VLM: default+vit" in text and "ViT 2 / 2 calls" in text,
               "printed tables lack default+vit:\n" + text)
        sim = doc["vlm_sim"]
        expect(sim["algos"] == ["none", "seed", "default", "seed+vit",
                                "default+vit"] and sim["time_scale"] == 1,
               "vlm_sim setup: %s" % {k: sim[k] for k in sim if k != "per_dp"})
        s4 = sim["per_dp"][0]
        expect(s4["dp"] == 4 and abs(s4["gain"]["default+vit"] - 1.05) < 1e-9
               and s4["vit_wait_ms"]["default+vit"] == 2.0 and
               s4["vit_bytes_moved_per_step"]["default+vit"] == 3e9,
               "vlm_sim per DP 4: %s" % s4)
        expect("+5.0%" in text and "30.0 -> 2.0" in text,
               "the simulated table:\n" + text)

        out = os.path.join(tmp, "differ")
        make_out(out, ["none", "seed", "default", "default+vit"],
                 dict(DIGESTS, embeddings_digest="e1"))
        text, doc = report(out)
        d = doc["vlm"]["per_dp"][0]
        expect(not d["digests_equal"] and
               d["digests_equal_to_none"] == {"seed": True, "default": True,
                                              "default+vit": False},
               "a differing embeddings digest: %s" % d["digests_equal_to_none"])
        expect("DIFFER from none's: default+vit" in text,
               "the differing digest is not printed:\n" + text)

        out = os.path.join(tmp, "old")  # a setup.json without "variants"
        make_out(out, None)
        text, doc = report(out)
        d = doc["vlm"]["per_dp"][0]
        expect(doc["vlm"]["variants"] == ["none", "seed", "default"] and
               d["digests_equal"] and "default+vit" not in text,
               "without default+vit: %s" % doc["vlm"]["variants"])
    print("check_demo_report: ok")


if __name__ == "__main__":
    main()
