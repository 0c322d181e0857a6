#!/usr/bin/env python3
"""tools/demo_report.py --vlm-only on made-up VLM runs (no MPI, no build):
the default+vit variant's columns and results.json fields (what the ViT
level adds to a step against what it saves among them), the digests
compared with none's, and "vlm_sim" and "vlm_sim_encoder_heavy" from
dpshim-sim JSONs; then the same without default+vit (demo.sh --no-vlm-vit,
or a setup.json from before it).

Then tools/demo_report.py on made-up text runs (reftrain's: none, seed,
default at DP 4 and 8) with the hand-off row (default@handoff at DP 8,
--handoff-dp 8, as demo.sh --quick runs it): its row in the DP 8 table,
labelled hand-off steps, its TGS gain over none beside default's, the fit
from step times and its errors as the shim's summary says them, its
consumed digest against none's, in the printed text and in results.json
("runs" and "handoff"); the report fails when --handoff-dp names a row
that is missing; a digest that differs from none's is named; without the
row (and without --handoff-dp) nothing of it appears.

    check_demo_report.py [REPO]     REPO: the source tree (default: ..)
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))
from mpitest import check, outcome  # noqa: E402

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
    with open(base + ".err", "w") as f:
        if variant.endswith("+vit"):
            f.write("dpshim:   ViT: encoder time 5.00% of wall time, the "
                    "balance's own 1.00%, plus 0.50% waiting at the "
                    "encoder's calls for the other ranks\n")


def make_out(out, variants, vit_digests=DIGESTS):
    runs = os.path.join(out, "vlm-runs")
    os.makedirs(runs)
    setup = {"layout": "internvl", "model": "internvl2-8b", "seed": 7,
             "steps": STEPS, "warmup": "2-%d" % LAST, "warmup_last": LAST,
             "time_scale": 0.25, "args": [], "tp": 1, "shim_env": [],
             "wall_s": 1, "sim_args": ["--layout", "internvl",
                                       "--time-scale", "1"],
             "sim_heavy_args": ["--layout", "internvl", "--time-scale", "1",
                                "--mix", "encoder-heavy"]}
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
                        else 0, "vit_shim_ms": 1.5 if "+vit" in algo
                        else 0.0})
    with open(os.path.join(runs, "sim.json"), "w") as f:
        json.dump(sim, f)
    if variants:  # the encoder-heavy mix beside it (demo.sh's second run)
        with open(os.path.join(runs, "sim_encoder_heavy.json"), "w") as f:
            json.dump([dict(x, vit_wait_ms=x["vit_wait_ms"] + 10)
                       for x in sim], f)


def report(out):
    r = subprocess.run([sys.executable, REPORT, out, "--vlm-only"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("demo_report.py failed (%d): %s" % (r.returncode, r.stderr))
    with open(os.path.join(out, "results.json")) as f:
        return r.stdout, json.load(f)


# ---- the text runs and the hand-off row --------------------------------------

T_STEPS, T_LAST = 10, 5  # demo.sh --quick: 10 steps, warm-up 2-5
T_STEP_MS = {"none": 1000.0, "seed": 960.0, "default": 950.0,
             "default@handoff": 970.0}
SUMMARY = {  # what the shim's summary says (rank 0's stderr)
    "seed": "dpshim:   steps: end at the gradient sync (DPSHIM_SYNC_OPS)\n"
            "dpshim:   fit from step times (seed): cost = 0.001*L^2 + 0.5*L "
            "+ 10 us per sample; prediction error mean 3.10%, max 6.20%; "
            "step times predicted within 3.00% (max 6.00%) by the step-time "
            "fit\n",
    "default": "dpshim:   steps: end at the gradient sync (DPSHIM_SYNC_OPS)\n"
               "dpshim:   fit from per-rank times (ranks): cost = 0.001*L^2 "
               "+ 0.5*L + 10 us per sample; prediction error mean 0.90%, "
               "max 2.00%; step times predicted within 1.80% (max 2.59%) by "
               "the per-rank fit, 2.06% (max 3.08%) by the step-time fit\n",
    "default@handoff": "dpshim:   steps: 1 hand-off each "
                       "(DPSHIM_MICRO_BATCHES; DPSHIM_STEP=handoff)\n"
                       "dpshim:   fit from step times (steps, refitted on "
                       "balanced steps): cost = "
                       "0.001*L^2 + 0.5*L + 10 us per sample; prediction "
                       "error mean 1.32%, max 2.49%; step times predicted "
                       "within 1.33% (max 2.47%) by the step-time fit\n",
}


def make_text_run(runs, dp, variant, digest="c0"):
    base = os.path.join(runs, "dp%d_%s" % (dp, variant))
    step_ms = T_STEP_MS[variant]
    write_jsonl(base + ".stats.jsonl", [{
        "step": s, "step_ms": step_ms,
        "wait_ms": [1.0 + r for r in range(dp)], "tokens": [1000] * dp}
        for s in range(T_STEPS)])
    if variant != "none":
        write_jsonl(base + ".log.jsonl", [{
            "step": s, "decision": "apply", "shim_ms": [0.5] * dp,
            "load_before": [1100.0] + [1000.0] * (dp - 1),
            "lower_bound": 1000.0, "bytes_moved": 1e5,
            "imbalance_before": 0.1, "imbalance_after": 0.01}
            for s in range(T_LAST + 1, T_STEPS + 1)])
    with open(base + ".json", "w") as f:
        f.write(json.dumps({"steps": T_STEPS, "tgs": 1.0,
                            "step_ms_mean": step_ms,
                            "consumed_digest": digest}) + "\n")
    with open(base + ".err", "w") as f:
        if variant != "none":
            f.write("dpshim: summary: %d steps on %d ranks (1 DP group of "
                    "%d), solver %s\n" % (T_STEPS, dp, dp,
                                          variant.split("@")[0]))
            f.write(SUMMARY[variant])


def make_text_out(out, handoff=True, handoff_digest="c0"):
    runs = os.path.join(out, "runs")
    os.makedirs(runs)
    for dp in (4, 8):
        for v in ("none", "seed", "default"):
            make_text_run(runs, dp, v)
    if handoff:
        make_text_run(runs, 8, "default@handoff", handoff_digest)


def text_report(out, *extra, last=T_LAST):
    r = subprocess.run([sys.executable, REPORT, out, "--warmup-last",
                        str(last), "--steps", str(T_STEPS)] + list(extra),
                       capture_output=True, text=True)
    doc = None
    if os.path.exists(os.path.join(out, "results.json")):
        with open(os.path.join(out, "results.json")) as f:
            doc = json.load(f)
    return r.returncode, r.stdout + r.stderr, doc


def near(x, y):
    return x is not None and abs(x - y) < 1e-9


def check_handoff(tmp):
    out = os.path.join(tmp, "handoff")
    make_text_out(out)
    rc, text, doc = text_report(out, "--handoff-dp", "8")
    check(rc == 0 and doc, "demo_report.py with the hand-off row failed "
           "(%d):\n%s" % (rc, text))
    at = {(r["dp"], r["variant"]): r for r in doc["runs"]}
    check(sorted(at) == [(4, "default"), (4, "none"), (4, "seed"),
                          (8, "default"), (8, "default@handoff"),
                          (8, "none"), (8, "seed")],
           "results.json's runs: %s" % sorted(at))
    h = at[(8, "default@handoff")]
    check(near(h["gain"], 1000.0 / 970.0) and
           near(h["tgs"], 1000.0 / 0.970) and
           near(h["achieved_gain"], 1000.0 / 970.0),
           "the hand-off row's TGS and gain: %s" % h)
    check(h["steps_by"] == "hand-offs" and h["fit_from"] == "step times"
           and h["fit_method"] == "steps" and
           h["fit_error_pct"] == [1.32, 2.49] and
           h["step_error_pct"] == {"step-time": [1.33, 2.47]} and
           h["digest_equal_to_none"] is True,
           "the hand-off row's steps, fit and digest: %s" % h)
    d = at[(8, "default")]
    check(d["steps_by"] == "the sync" and d["fit_from"] == "per-rank times"
           and d["fit_method"] == "ranks" and
           d["step_error_pct"] == {"per-rank": [1.8, 2.59],
                                   "step-time": [2.06, 3.08]},
           "default's steps and fit: %s" % d)
    check(doc.get("handoff") and doc["handoff"]["dp"] == 8 and
           doc["handoff"]["variant"] == "default@handoff" and
           near(doc["handoff"]["gain"], 1000.0 / 970.0) and
           near(doc["handoff"]["default_gain"], 1000.0 / 950.0) and
           doc["handoff"]["fit_from"] == "step times" and
           doc["handoff"]["digest_equal_to_none"] is True,
           "results.json's handoff: %s" % doc.get("handoff"))
    # The DP 8 table has the row, labelled; DP 4's has not.
    tables = text.split("\nDP ")
    dp8 = [t for t in tables if t.startswith("8\n")]
    dp4 = [t for t in tables if t.startswith("4\n")]
    check(dp8 and any(l.startswith("  default@handoff ")
                       for l in dp8[0].splitlines()) and
           "hand-off steps" in dp8[0] and "DPSHIM_STEP=handoff" in dp8[0],
           "no labelled default@handoff row in the DP 8 table:\n" + text)
    check(dp4 and "default@handoff" not in dp4[0].split("\n\n")[0],
           "a default@handoff row at DP 4:\n" + text)
    # Below: its gain beside default's, the fit from step times, errors.
    check("gain over none +3.1% (default, steps at the sync: +5.3%)" in text
           and "steps told by hand-offs" in text and
           "fit from step times (steps): prediction error mean 1.32%, "
           "max 2.49%; step times predicted within 1.33% (max 2.47%)" in text
           and "consumed digest equal to none's" in text and
           "consumed digests equal across variants" in text,
           "the hand-off row's lines:\n" + text)
    # Warm-up 2-5 (--quick): 3 step times for 3 coefficients, an exact fit
    # whose error says nothing; said for the hand-off row, not for default
    # (fitted from per-rank times). With a longer warm-up, not said.
    line = [l for l in text.splitlines() if "fit from step times (steps)"
            in l]
    check(line and "exact by construction" in line[0] and
           doc["handoff"]["fit_exact"] is True and
           doc["handoff"]["fit_steps"] == 3 and
           text.count("exact by construction") == 1,
           "the exact step-time fit is not said (once):\n" + text)
    rc, text, doc = text_report(out, "--handoff-dp", "8", last=6)
    check(rc == 0 and "exact by construction" not in text and
           doc["handoff"]["fit_exact"] is False and
           "fit from step times (steps): prediction error mean 1.32%" in text,
           "warm-up 2-6: the step-time fit said exact:\n" + text)
    check("tiny: default@handoff" in text,
           "the gains table lacks the hand-off row:\n" + text)

    # Expected (--handoff-dp) but missing: the report fails, saying so.
    out = os.path.join(tmp, "missing")
    make_text_out(out, handoff=False)
    rc, text, doc = text_report(out, "--handoff-dp", "8")
    check(rc != 0 and "no default@handoff run at DP 8" in text,
           "a missing hand-off row passed (%d):\n%s" % (rc, text))

    # Its digest differs from none's: said, by name.
    out = os.path.join(tmp, "handoff-differ")
    make_text_out(out, handoff_digest="c1")
    rc, text, doc = text_report(out, "--handoff-dp", "8")
    check(rc == 0 and doc and
           {(r["dp"], r["variant"]): r for r in doc["runs"]}[
               (8, "default@handoff")]["digest_equal_to_none"] is False and
           doc["handoff"]["digest_equal_to_none"] is False and
           "DIFFER from none's: default@handoff at DP 8" in text and
           "consumed digest DIFFERS from none's" in text,
           "a differing hand-off digest is not said:\n" + text)

    # Without the row (the full demo's default): nothing of it.
    out = os.path.join(tmp, "no-handoff")
    make_text_out(out, handoff=False)
    rc, text, doc = text_report(out)
    check(rc == 0 and doc and "handoff" not in doc and
           "default@handoff" not in text and
           len(doc["runs"]) == 6 and "consumed digests equal" in text,
           "without the hand-off row (%d):\n%s" % (rc, text))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "vit")
        make_out(out, ["none", "seed", "default", "default+vit"])
        text, doc = report(out)
        d = doc["vlm"]["per_dp"][0]
        check(doc["vlm"]["variants"][-1] == "default+vit",
               "vlm.variants lacks default+vit: %s" % doc["vlm"]["variants"])
        check([r["variant"] for r in d["runs"]] ==
               ["none", "seed", "default", "default+vit"],
               "vlm runs: %s" % [r["variant"] for r in d["runs"]])
        check(d["digests_equal"] and all(d["digests_equal_to_none"].values()),
               "digests should be equal: %s" % d["digests_equal_to_none"])
        check(abs(d["vit_wait_ms"]["none"] - 30.0) < 1e-9 and
               abs(d["vit_wait_ms"]["default+vit"] - 3.0) < 1e-9,
               "vit_wait_ms = mean over steps after the warm-up of max - "
               "mean: %s" % d["vit_wait_ms"])
        check(d["vit_bytes_moved_per_step"] == {"default+vit": 2e6},
               "vit bytes: %s" % d["vit_bytes_moved_per_step"])
        check(d["vit_plans"]["default+vit"]["applied"] == STEPS - LAST,
               "vit plans: %s" % d["vit_plans"])
        for key in ("tgs", "gain", "wait_share", "bytes_moved_per_step",
                    "plans"):  # the keys from before default+vit stay
            check(key in d, "vlm per_dp lost '%s'" % key)
        check("VLM: default+vit" in text and "ViT 2 / 2 calls" in text,
               "printed tables lack default+vit:\n" + text)
        sim = doc["vlm_sim"]
        check(sim["algos"] == ["none", "seed", "default", "seed+vit",
                                "default+vit"] and sim["time_scale"] == 1,
               "vlm_sim setup: %s" % {k: sim[k] for k in sim if k != "per_dp"})
        s4 = sim["per_dp"][0]
        check(s4["dp"] == 4 and abs(s4["gain"]["default+vit"] - 1.05) < 1e-9
               and s4["vit_wait_ms"]["default+vit"] == 2.0 and
               s4["vit_bytes_moved_per_step"]["default+vit"] == 3e9,
               "vlm_sim per DP 4: %s" % s4)
        check("+5.0%" in text and "30.0 -> 2.0" in text,
               "the simulated table:\n" + text)
        # What the ViT level adds against what it saves: the run's (its
        # share of wall time x 950 ms; default's vit wait 30 less its 3)
        # and the simulator's (vit_shim_ms; 30 less 2, heavy 40 less 12).
        check(d["vit_adds_saves"]["default+vit"] ==
               {"adds_ms": 9.5, "saves_ms": 27.0} and
               "ViT adds / saves 9.5 / 27.0 ms a step" in text,
               "the run's ViT adds / saves: %s\n%s"
               % (d["vit_adds_saves"], text))
        check(s4["vit_adds_saves"]["default+vit"] ==
               {"adds_ms": 1.5, "saves_ms": 28.0} and "1.5 / 28.0" in text,
               "the simulated ViT adds / saves: %s" % s4["vit_adds_saves"])
        heavy = doc.get("vlm_sim_encoder_heavy")
        check(heavy and heavy["args"][-1] == "encoder-heavy" and
               heavy["per_dp"][0]["vit_wait_ms"]["none"] == 40.0 and
               "Simulated, the encoder-heavy mix (dpshim-sim" in text,
               "the encoder-heavy table: %s\n%s" % (heavy, text))

        out = os.path.join(tmp, "differ")
        make_out(out, ["none", "seed", "default", "default+vit"],
                 dict(DIGESTS, embeddings_digest="e1"))
        text, doc = report(out)
        d = doc["vlm"]["per_dp"][0]
        check(not d["digests_equal"] and
               d["digests_equal_to_none"] == {"seed": True, "default": True,
                                              "default+vit": False},
               "a differing embeddings digest: %s" % d["digests_equal_to_none"])
        check("DIFFER from none's: default+vit" in text,
               "the differing digest is not printed:\n" + text)

        out = os.path.join(tmp, "old")  # a setup.json without "variants"
        make_out(out, None)
        text, doc = report(out)
        d = doc["vlm"]["per_dp"][0]
        check(doc["vlm"]["variants"] == ["none", "seed", "default"] and
               d["digests_equal"] and "default+vit" not in text,
               "without default+vit: %s" % doc["vlm"]["variants"])

        check_handoff(tmp)
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
