#!/usr/bin/env python3
"""The demo's figures, from the runs tools/demo.sh leaves in OUT/runs/ (the
tiny text model, reftrain) and OUT/vlm-runs/ (the VLM section, vlmtrain).

    demo_report.py OUT --warmup-last 11 --steps N [--profile NAME]
                   [--lengths FILE] [--seed S] [--grad-bytes B] [--time-scale X]
                   [--handoff-dp N]
    demo_report.py OUT --vlm-only     the VLM section alone: OUT/results.json
                                      keeps its text runs, gets a new "vlm"

For each DP size and variant (none, seed, default; the VLM section also
default+vit), over the steps after
warm-up (when the shim balances):
  tgs        tokens per GPU per second
  step_ms    mean step time
  wait       straggler wait: each rank's time in the gradient all-reduce
             beyond the last-arriving rank's, as a share of step time
  ideal      the gain a perfect plan would give: none's max load / LB, from
             the shim's log (the loads before balancing are none's loads)
  achieved   none's step time / this variant's step time
  moved      bytes moved per step
  shim       the shim's own time per step (waiting for the other ranks at
             the hand-off excluded), as a share of step time
Writes OUT/results.json, OUT/tgs_vs_dp.png and OUT/imbalance.png (gnuplot).

The hand-off row (demo.sh --quick or --handoff-row; --handoff-dp N says
that it was run, at DP N, and that its absence is an error): the text run
default@handoff, the default solver with DPSHIM_STEP=handoff (a step is
DPSHIM_MICRO_BATCHES hand-offs, the cost fitted from step times: what a
trainer whose gradient sync is not an MPI call gets; reftrain's sync still
is one). Its row joins the DP's table; below, its TGS gain over none
beside default's (sync steps), how the shim's summary says it told steps
and fitted the cost (fit_from, fit_method, fit_error_pct, step_error_pct),
and its consumed digest against none's. In results.json it is one of the
"runs" (variant "default@handoff"), and "handoff" sums it up.

The VLM section (when OUT/vlm-runs/setup.json exists: layout, preset, steps,
warm-up, time scale, vlmtrain arguments, as demo.sh ran them) has the same
figures but the ideal gain (the shim's loads are its cost model's, which
leaves out the vision encoder), and:
  gain       this variant's TGS / none's
  emu_imb    the emulated GPU's imbalance: max / mean of the ranks' modelled
             compute per step (what the variant left for the straggler;
             none's is what balancing can win at most)
  applied / skipped   the shim's decisions after warm-up, skips by reason
  vit wait   the ViT straggler wait per step after the warm-up: the
             slowest rank's emulated encoder time less the mean (vlmtrain's
             --stats-out vit_emu_ms), in ms
  vit MB     the ViT-level balance's bytes moved per step (default+vit,
             the shim's log's "vit" bytes_moved: the moved images' inputs,
             embeddings and embedding gradients)
  ViT adds / saves   (default+vit) the ViT balance's own time per step (its
             share of wall time in the shim's summary, times the step)
             against the encoder's straggler wait it took away (default's
             vit wait less its own), in ms
  digests    consumed, images, embeddings and vit_grad digests equal across
             the variants
It goes to results.json's "vlm" and OUT/vlm_tgs_vs_dp.png.

With OUT/vlm-runs/sim.json (dpshim-sim on the same layout and preset, as
demo.sh runs it after the VLM runs): per simulated DP size and algo, TGS,
gain over none, the ViT phase's straggler wait (vit_wait_ms) and the bytes
each level moves, into results.json's "vlm_sim" and a table.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

VARIANTS = ("none", "seed", "default")
HANDOFF = "default@handoff"  # default, steps told by hand-offs
TEXT_VARIANTS = VARIANTS + (HANDOFF,)
SIM_ALGOS = ("none", "seed", "default", "seed+vit", "default+vit")


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def straggler_share(stats):
    """Mean over ranks and steps of the time in the all-reduce beyond the
    last-arriving rank's, as a share of step time."""
    return mean([sum(w - min(s["wait_ms"]) for w in s["wait_ms"]) /
                 (len(s["wait_ms"]) * s["step_ms"]) for s in stats])


def fit_error(err_path):
    """(mean, max) prediction error of the warm-up fit, from the summary."""
    if not os.path.exists(err_path):
        return None
    with open(err_path) as f:
        m = re.search(r"prediction error mean ([0-9.]+)%, max ([0-9.]+)%",
                      f.read())
    return (float(m.group(1)), float(m.group(2))) if m else None


def shim_summary(err_path):
    """How the shim's summary (rank 0's stderr) says it told steps apart
    and fitted the cost: steps_by ("hand-offs", "the sync", "marks"),
    fit_from ("step times", "per-rank times"), fit_method (the fit's name:
    "steps", "ranks", "seed"), step_error_pct ({"per-rank"|"step-time":
    [mean, max]}, the step times each fit predicted). None where it does
    not say."""
    r = {"steps_by": None, "fit_from": None, "fit_method": None,
         "step_error_pct": {}, "vit_own_pct": None}
    if not os.path.exists(err_path):
        return r
    with open(err_path) as f:
        err = f.read()
    m = re.search(r"^dpshim:\s+steps: (.*)$", err, re.M)
    if m:
        r["steps_by"] = ("marks" if "dpshim_step_end" in m.group(1) else
                         "hand-offs" if "hand-off" in m.group(1) else
                         "the sync" if "gradient sync" in m.group(1) else None)
    m = re.search(r"^dpshim:\s+ViT: encoder time [0-9.]+% of wall time, "
                  r"the balance's own ([0-9.]+)%", err, re.M)
    if m:
        r["vit_own_pct"] = float(m.group(1))
    m = re.search(r"^dpshim:\s+fit from (step times|per-rank times) "
                  r"\(([a-z]+)(?:, [^)]*)?\)(.*)$", err, re.M)
    if m:
        r["fit_from"], r["fit_method"] = m.group(1), m.group(2)
        for mean_, max_, name in re.findall(
                r"([0-9.]+)% \(max ([0-9.]+)%\) by the ([a-z-]+) fit",
                m.group(3)):
            r["step_error_pct"][name] = [float(mean_), float(max_)]
    return r


def run_figures(out, dp, variant, warmup_last, runs_dir="runs"):
    """Figures of one run over the balanced steps; None if it is missing."""
    base = os.path.join(out, runs_dir, "dp%d_%s" % (dp, variant))
    every = read_jsonl(base + ".stats.jsonl")
    stats = [s for s in every if s["step"] >= warmup_last]  # from 0
    warm = [s for s in every if 0 < s["step"] < warmup_last]
    if not stats:
        return None
    log = [e for e in read_jsonl(base + ".log.jsonl")
           if e["step"] > warmup_last]
    with open(base + ".json") as f:
        summary = json.loads(f.read().strip().splitlines()[-1])
    seconds = sum(s["step_ms"] for s in stats) / 1e3
    tokens = sum(sum(s["tokens"]) for s in stats)
    world = len(stats[0]["tokens"])  # ranks: dp x tp
    solved = [e for e in log if "lower_bound" in e]
    shim = [mean(e["shim_ms"]) for e in log]
    return {
        "dp": dp, "variant": variant,
        "tgs": tokens / world / seconds,
        "step_ms_balanced": 1e3 * seconds / len(stats),
        "step_ms_mean": summary["step_ms_mean"],
        "tgs_all_steps": summary["tgs"],
        "wait_share": straggler_share(stats),
        "wait_share_warmup": straggler_share(warm),
        "fit_error_pct": fit_error(base + ".err"),
        "ideal_gain": (sum(max(e["load_before"]) for e in solved) /
                       sum(e["lower_bound"] for e in solved)) if solved else None,
        "bytes_moved_per_step": mean([e.get("bytes_moved", 0) for e in log]),
        "shim_share": (sum(shim) / (1e3 * seconds)) if log else 0.0,
        "applied": sum(1 for e in log if e["decision"] == "apply"),
        "balanced_steps": len(stats),
        "consumed_digest": summary["consumed_digest"],
        **(shim_summary(base + ".err") if variant != "none" else {}),
    }


def add_gains(runs):
    for dp in sorted({r["dp"] for r in runs}):
        at = {r["variant"]: r for r in runs if r["dp"] == dp}
        if "none" not in at:
            continue
        ideal = (at.get("default") or {}).get("ideal_gain")
        for r in at.values():
            r["achieved_gain"] = at["none"]["step_ms_balanced"] / r["step_ms_balanced"]
            r["gain"] = r["tgs"] / at["none"]["tgs"]
            r["digest_equal_to_none"] = (r["consumed_digest"] ==
                                         at["none"]["consumed_digest"])
            r["ideal_gain"] = ideal
            r["share_of_ideal"] = ((r["achieved_gain"] - 1) / (ideal - 1)
                                   if ideal and ideal > 1 else None)


def sizes_in(out, runs_dir):
    path = os.path.join(out, runs_dir)
    if not os.path.isdir(path):
        return []
    return sorted({int(n[2:].split("_")[0]) for n in os.listdir(path)
                   if re.match(r"dp[0-9]+_", n)})


def vit_adds_saves(vit, base):
    """What the ViT level adds to a step (the balance's own time in the
    encoder calls, its share of wall time times the step) against what it
    saves (the encoder's straggler wait of the run without it, less its
    own), in ms; None where a figure is missing."""
    own = vit.get("vit_own_pct")
    adds = own / 100 * vit["step_ms_balanced"] if own is not None else None
    saves = (base["vit_wait_ms"] - vit["vit_wait_ms"]
             if base and base.get("vit_wait_ms") is not None and
             vit.get("vit_wait_ms") is not None else None)
    return {"adds_ms": adds, "saves_ms": saves}


def vlm_section(out):
    """The VLM section's figures, from OUT/vlm-runs; None without it."""
    path = os.path.join(out, "vlm-runs", "setup.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        setup = json.load(f)
    last = setup["warmup_last"]
    variants = tuple(setup.get("variants", VARIANTS))
    per_dp = []
    for dp in sizes_in(out, "vlm-runs"):
        at = {}
        for v in variants:
            r = run_figures(out, dp, v, last, "vlm-runs")
            if not r:
                continue
            base = os.path.join(out, "vlm-runs", "dp%d_%s" % (dp, v))
            stats = [x for x in read_jsonl(base + ".stats.jsonl")
                     if x["step"] >= last]
            log = [e for e in read_jsonl(base + ".log.jsonl")
                   if e["step"] > last]
            with open(base + ".json") as f:
                summary = json.loads(f.read().strip().splitlines()[-1])
            skipped = {}
            for e in log:
                if e["decision"] == "skip":
                    k = e.get("reason", "?")
                    skipped[k] = skipped.get(k, 0) + 1
            # the encoder calls' decisions and bytes, summed over the steps
            vit = {k: sum(e.get("vit", {}).get(k, 0) for e in log)
                   for k in ("calls", "applied", "skipped", "failed")}
            del r["ideal_gain"]  # the shim's loads leave out the encoder
            r.update({
                "emu_imbalance": mean([max(x["emu_ms"]) / mean(x["emu_ms"])
                                       for x in stats]),
                # the ranks' compute beyond their emulated GPU time and the
                # hand-off (the loader's CPU work, with the shim the shim's
                # too), as a share of step time: without the shim, this
                # machine's CPU contention
                "overrun_handoff_share": mean([
                    sum(c - e + h for c, e, h in zip(
                        x["compute_ms"], x["emu_ms"], x["handoff_ms"])) /
                    (len(x["emu_ms"]) * x["step_ms"]) for x in stats]),
                "skipped": skipped,
                "images_digest": summary["images_digest"],
                "embeddings_digest": summary.get("embeddings_digest"),
                "vit_grad_digest": summary.get("vit_grad_digest"),
                "check_errors": summary["check_errors"],
                "vit_seconds_max": summary.get("vit_seconds_max"),
                "vit_seconds_mean": summary.get("vit_seconds_mean"),
                # the encoder's straggler wait per step: the slowest
                # rank's emulated encoder time less the mean
                "vit_wait_ms": (mean([max(x["vit_emu_ms"]) -
                                      mean(x["vit_emu_ms"]) for x in stats])
                                if stats and "vit_emu_ms" in stats[0]
                                else None),
                "vit_bytes_moved_per_step": mean([
                    e.get("vit", {}).get("bytes_moved", 0) for e in log]),
                "vit_plans": vit,
            })
            at[v] = r
        if "none" not in at:
            continue
        for r in at.values():
            r["gain"] = r["tgs"] / at["none"]["tgs"]
        def digests_of(r):
            return (r["consumed_digest"], r["images_digest"],
                    r["embeddings_digest"], r["vit_grad_digest"])
        digests = {digests_of(r) for r in at.values()}
        per_dp.append({
            "dp": dp,
            "tgs": {v: r["tgs"] for v, r in at.items()},
            "gain": {v: r["gain"] for v, r in at.items() if v != "none"},
            "wait_share": {v: r["wait_share"] for v, r in at.items()},
            "bytes_moved_per_step": {v: r["bytes_moved_per_step"]
                                     for v, r in at.items() if v != "none"},
            "plans": {v: {"applied": r["applied"], "skipped": r["skipped"]}
                      for v, r in at.items() if v != "none"},
            "digests_equal": len(digests) == 1 and len(at) == len(variants)
                             and not any(r["check_errors"] for r in at.values()),
            "digests_equal_to_none": {
                v: digests_of(r) == digests_of(at["none"]) and
                not r["check_errors"] for v, r in at.items() if v != "none"},
            "vit_wait_ms": {v: r["vit_wait_ms"] for v, r in at.items()},
            "vit_bytes_moved_per_step": {
                v: r["vit_bytes_moved_per_step"] for v, r in at.items()
                if v.endswith("+vit")},
            "vit_plans": {v: r["vit_plans"] for v, r in at.items()
                          if v.endswith("+vit")},
            "vit_adds_saves": {v: vit_adds_saves(r, at.get(v[:-4]))
                               for v, r in at.items() if v.endswith("+vit")},
            "runs": [at[v] for v in variants if v in at],
        })
    return dict(setup, variants=list(variants), per_dp=per_dp)


def vlm_sim_section(out, vlm, name="sim.json"):
    """dpshim-sim's figures on the VLM section's workload, from
    OUT/vlm-runs/NAME (sim_encoder_heavy.json: its encoder-heavy mix);
    None without it."""
    path = os.path.join(out, "vlm-runs", name)
    if not vlm or not os.path.exists(path):
        return None
    with open(path) as f:
        lines = json.load(f)
    at = {(x["ranks"], x["algo"]): x for x in lines}
    algos = [a for a in SIM_ALGOS if any(k[1] == a for k in at)]
    per_dp = []
    for dp in sorted({x["ranks"] for x in lines}):
        row = {a: at[(dp, a)] for a in algos if (dp, a) in at}
        none = row.get("none")
        per_dp.append({
            "dp": dp,
            "tgs": {a: x["tgs"] for a, x in row.items()},
            "gain": {a: x["tgs"] / none["tgs"] for a, x in row.items()
                     if none and a != "none"},
            "vit_wait_ms": {a: x.get("vit_wait_ms") for a, x in row.items()},
            "vit_bytes_moved_per_step": {
                a: x.get("vit_bytes_moved_per_step", 0)
                for a, x in row.items() if a.endswith("+vit")},
            "bytes_moved_per_step": {a: x["bytes_moved_per_step"]
                                     for a, x in row.items() if a != "none"},
            "shim_share": {a: x["shim_share"] for a, x in row.items()
                           if a != "none"},
            # the ViT level's own time per step against the encoder's
            # straggler wait it took away from the algo without it
            "vit_adds_saves": {
                a: {"adds_ms": x.get("vit_shim_ms"),
                    "saves_ms": row[a[:-4]]["vit_wait_ms"] - x["vit_wait_ms"]
                    if a[:-4] in row else None}
                for a, x in row.items() if a.endswith("+vit")},
        })
    args = vlm.get("sim_args" if name == "sim.json" else "sim_heavy_args", [])
    scale = args[args.index("--time-scale") + 1] \
        if "--time-scale" in args[:-1] else "1"
    return {"layout": vlm["layout"], "model": vlm["model"],
            "time_scale": float(scale), "args": args, "algos": algos,
            "per_dp": per_dp}


def print_vlm_sim(sim, mix=""):
    vit = "default+vit" if "default+vit" in sim["algos"] else "default"
    print("\nSimulated%s (dpshim-sim %s): TGS gain over none by DP size; the "
          "ViT phase's straggler wait, ms per step (none -> %s); the bytes "
          "the ViT level moves per step, GB over the group (%s); what the "
          "ViT level adds to a step against the encoder wait it saves, ms "
          "(%s)" % (mix, " ".join(sim["args"]), vit, vit, vit))
    gains = [a for a in sim["algos"] if a != "none"]
    print("  %-5s %9s" % ("DP", "none TGS") +
          "".join(" %12s" % a for a in gains) + " %18s %10s %16s" % (
              "ViT wait ms", "ViT GB", "ViT adds/saves"))
    for d in sim["per_dp"]:
        wait = d["vit_wait_ms"]
        print("  %-5d %9s" % (d["dp"], fmt(d["tgs"].get("none"), ".0f")) +
              "".join(" %12s" % (fmt(d["gain"].get(a) and
                                     100 * (d["gain"][a] - 1), "+.1f") +
                                 ("%" if a in d["gain"] else ""))
                      for a in gains) +
              " %18s %10s" % (
                  "%s -> %s" % (fmt(wait.get("none"), ".1f"),
                                fmt(wait.get(vit), ".1f")),
                  fmt(d["vit_bytes_moved_per_step"].get(vit) and
                      d["vit_bytes_moved_per_step"][vit] / 1e9,
                      ".2f")) +
              " %16s" % adds_saves(d["vit_adds_saves"].get(vit, {})))


def adds_saves(ab):
    return "%s / %s" % (fmt(ab.get("adds_ms"), ".1f"),
                        fmt(ab.get("saves_ms"), ".1f"))


def vlm_label(vlm):
    return "VLM: %s layout, %s preset (%s)%s" % (
        vlm["layout"], vlm["model"], " ".join(vlm["args"]) or "defaults",
        "".join(", " + e for e in vlm.get("shim_env", [])))


def print_vlm_table(vlm):
    print("\n%s; vlmtrain, time scale %g, %d steps, warm-up %s, figures over "
          "the steps after it" % (vlm_label(vlm), vlm["time_scale"],
                                  vlm["steps"], vlm["warmup"]))
    head = ("variant", "TGS", "gain", "step ms", "wait", "emu imb", "MB moved",
            "vit wait", "vit MB", "shim", "plans applied / skipped")
    for d in vlm["per_dp"]:
        print("\nVLM DP %d" % d["dp"])
        print("  %-11s %9s %7s %8s %6s %7s %8s %8s %7s %6s  %s" % head)
        for r in d["runs"]:
            plans = "" if r["variant"] == "none" else "%d / %s" % (
                r["applied"], ", ".join("%d %s" % (n, k) for k, n in
                                        sorted(r["skipped"].items())) or "0")
            vp = r.get("vit_plans") or {}
            if r["variant"].endswith("+vit"):
                plans += "; ViT %d / %d calls%s" % (
                    vp.get("applied", 0), vp.get("calls", 0),
                    ", %d failed" % vp["failed"] if vp.get("failed") else "")
                plans += "; ViT adds / saves %s ms a step" % adds_saves(
                    d["vit_adds_saves"].get(r["variant"], {}))
            print("  %-11s %9.0f %6.1f%% %8.1f %5.1f%% %7.3f %8.2f %8s %7s "
                  "%5.2f%%  %s" % (
                      r["variant"], r["tgs"], 100 * (r["gain"] - 1),
                      r["step_ms_balanced"], 100 * r["wait_share"],
                      r["emu_imbalance"], r["bytes_moved_per_step"] / 1e6,
                      fmt(r.get("vit_wait_ms"), ".1f"),
                      fmt(r["vit_bytes_moved_per_step"] / 1e6, ".2f")
                      if r["variant"].endswith("+vit") else "",
                      100 * r["shim_share"], plans))
        differ = [v for v, same in d.get("digests_equal_to_none", {}).items()
                  if not same]
        print("  digests (consumed, images, embeddings, vit_grad) %s; this "
              "machine's CPU contention %.1f%% of step time (none)" % (
                  "equal" if d["digests_equal"] else "DIFFER" + (
                      " from none's: " + ", ".join(differ) if differ else ""),
                  100 * d["runs"][0]["overrun_handoff_share"]))


def print_gains(runs, vlm):
    """The gain of seed and default over none, the tiny text model beside the
    VLM preset, one line per DP size."""
    text = {(r["dp"], r["variant"]): r for r in runs}
    dps = sorted({r["dp"] for r in runs} |
                 {d["dp"] for d in (vlm or {}).get("per_dp", [])})
    vl = {d["dp"]: d for d in (vlm or {}).get("per_dp", [])}
    print("\nTGS gain over none, after warm-up: tiny text model (reftrain) "
          "beside %s" % (vlm_label(vlm) if vlm else "no VLM section"))
    vv = [v for v in (vlm or {}).get("variants", VARIANTS) if v != "none"]
    tv = [v for v in TEXT_VARIANTS[1:]
          if v in VARIANTS or any(r["variant"] == v for r in runs)]
    tw = [max(17, len("tiny: " + v)) for v in tv]
    print("  %-4s" % "DP" + "".join(" %*s" % (w, "tiny: " + v)
                                    for w, v in zip(tw, tv)) +
          "  " + "".join(" %17s" % ("VLM: " + v) for v in vv))
    def g(r):
        return "-" if r is None else "%+.1f%%" % (100 * (r - 1))
    for dp in dps:
        t = {v: text.get((dp, v)) for v in TEXT_VARIANTS}
        tg = [None if not (t[v] and t["none"]) else t[v]["tgs"] / t["none"]["tgs"]
              for v in tv]
        vg = [vl[dp]["gain"].get(v) if dp in vl else None for v in vv]
        print("  %-4d" % dp + "".join(" %*s" % (w, g(x))
                                      for w, x in zip(tw, tg)) + "  " +
              "".join(" %17s" % g(x) for x in vg))
    if HANDOFF in tv:
        print("  (tiny: %s: hand-off steps, see above)" % HANDOFF)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


# The fit's coefficients (a, b, c of a*len^2 + b*len + c).
COEFS = 3


def fit_steps(warmup_last):
    """The warm-up steps a fit is over: demo.sh's warm-up is 2-N and the
    shim drops its first step."""
    return warmup_last - 2


def exact_note(r, warmup_last):
    """A fit from step times over no more steps than it has coefficients
    fits them exactly: its error is 0 by construction and says nothing."""
    n = fit_steps(warmup_last)
    if r.get("fit_from") != "step times" or n > COEFS:
        return ""
    return (" (%d step times for %d coefficients: exact by construction, "
            "the error says nothing)" % (n, COEFS))


def print_table(runs, warmup_last):
    head = ("variant", "TGS", "step ms", "wait", "ideal", "achieved",
            "of ideal", "MB moved", "shim")
    w = max([8] + [len(r["variant"]) for r in runs])
    for dp in sorted({r["dp"] for r in runs}):
        print("\nDP %d" % dp)
        print(("  %-*s %9s %8s %6s %6s %8s %8s %8s %6s") % ((w,) + head))
        at = sorted((r for r in runs if r["dp"] == dp),
                    key=lambda r: TEXT_VARIANTS.index(r["variant"]))
        for r in at:
            print("  %-*s %9.0f %8.1f %5.1f%% %6s %8s %8s %8.2f %5.2f%%" % (
                w, r["variant"], r["tgs"], r["step_ms_balanced"],
                100 * r["wait_share"], fmt(r["ideal_gain"], ".3f"),
                fmt(r["achieved_gain"], ".3f"),
                fmt(r["share_of_ideal"] and 100 * r["share_of_ideal"], ".0f") +
                ("%" if r["share_of_ideal"] is not None else ""),
                r["bytes_moved_per_step"] / 1e6, 100 * r["shim_share"]))
        if any(r["variant"] == HANDOFF for r in at):
            print("  (%s: the default solver with hand-off steps, "
                  "DPSHIM_STEP=handoff: see below)" % HANDOFF)
    print("\ndefault: straggler wait in the warm-up steps (nothing moved) "
          "-> after; the warm-up fit's error")
    for r in sorted((r for r in runs if r["variant"] == "default"),
                    key=lambda r: r["dp"]):
        fit = r["fit_error_pct"]
        print("  DP %-3d wait %5.1f%% -> %5.1f%%   fit error mean "
              "%s%%, max %s%%%s" % (r["dp"], 100 * r["wait_share_warmup"],
                                    100 * r["wait_share"],
                                    fit[0] if fit else "-",
                                    fit[1] if fit else "-",
                                    exact_note(r, warmup_last)))
    print_handoff(runs, warmup_last)
    digests = {(r["dp"], r["consumed_digest"]) for r in runs}
    same = len(digests) == len({r["dp"] for r in runs})
    differ = ["%s at DP %d" % (r["variant"], r["dp"]) for r in runs
              if r.get("digest_equal_to_none") is False]
    print("\nconsumed digests %s across variants at every DP"
          % ("equal" if same else "DIFFER" + (
              " from none's: " + ", ".join(differ) if differ else "")))


def handoff_summary(runs, warmup_last):
    """results.json's "handoff": the hand-off row beside default's and
    none's of its DP; None without it."""
    at = {(r["dp"], r["variant"]): r for r in runs}
    h = [r for r in runs if r["variant"] == HANDOFF]
    if not h:
        return None
    r = max(h, key=lambda r: r["dp"])
    sync = at.get((r["dp"], "default"))
    return {
        "dp": r["dp"], "variant": HANDOFF, "tgs": r["tgs"],
        "gain": r.get("gain"),
        "default_gain": sync.get("gain") if sync else None,
        "steps_by": r["steps_by"], "fit_from": r["fit_from"],
        "fit_method": r["fit_method"], "fit_error_pct": r["fit_error_pct"],
        "step_error_pct": r["step_error_pct"],
        "fit_steps": fit_steps(warmup_last),
        "fit_exact": bool(exact_note(r, warmup_last)),
        "default_fit_from": sync["fit_from"] if sync else None,
        "default_fit_error_pct": sync["fit_error_pct"] if sync else None,
        "digest_equal_to_none": r.get("digest_equal_to_none"),
    }


def print_handoff(runs, warmup_last):
    h = handoff_summary(runs, warmup_last)
    if not h:
        return
    def g(x):
        return "-" if x is None else "%+.1f%%" % (100 * (x - 1))
    fit = h["fit_error_pct"]
    step = h["step_error_pct"].get("step-time" if h["fit_method"] == "steps"
                                   else "per-rank")
    print("\n%s: hand-off steps (DPSHIM_STEP=handoff): a step is "
          "DPSHIM_MICRO_BATCHES hand-offs and the cost is fitted from step "
          "times, what a trainer whose gradient sync the shim cannot see "
          "(DDP over NCCL) gets; reftrain's sync is still an MPI_Allreduce"
          % HANDOFF)
    print("  DP %-3d TGS %.0f, gain over none %s (default, steps at the "
          "sync: %s); steps told by %s" % (
              h["dp"], h["tgs"], g(h["gain"]), g(h["default_gain"]),
              h["steps_by"] or "? (the summary does not say)"))
    print("         fit from %s%s: prediction error mean %s%%, max %s%%; "
          "step times predicted within %s%% (max %s%%)%s; consumed digest "
          "%s none's" % (
              h["fit_from"] or "? (no fit in the summary)",
              " (%s)" % h["fit_method"] if h["fit_method"] else "",
              fmt(fit and fit[0], ".2f"), fmt(fit and fit[1], ".2f"),
              fmt(step and step[0], ".2f"), fmt(step and step[1], ".2f"),
              exact_note(h, warmup_last),
              "equal to" if h["digest_equal_to_none"] else "DIFFERS from"))


def gnuplot(script):
    if not shutil.which("gnuplot"):
        print("demo: gnuplot not found (apt-get install gnuplot-nox): no plots")
        return
    r = subprocess.run(["gnuplot"], input=script, text=True)
    if r.returncode != 0:
        print("demo: gnuplot failed (exit %d): a plot is missing" % r.returncode)


def plot_tgs(out, runs, name="tgs_vs_dp",
             title="Tokens per GPU per second against DP size (after warm-up)",
             variants=VARIANTS):
    data = os.path.join(out, name + ".dat")
    dps = [r["dp"] for r in runs]
    with open(data, "w") as f:
        for v in variants:
            f.write("# %s\n" % v)
            for r in sorted((r for r in runs if r["variant"] == v),
                            key=lambda r: r["dp"]):
                f.write("%d %.1f\n" % (r["dp"], r["tgs"]))
            f.write("\n\n")
    gnuplot("""set terminal pngcairo size 800,500
set output '%s'
set title '%s'
set xlabel 'DP size'; set ylabel 'TGS'; set logscale x 2; set grid
set xrange [%g:%g]; set key bottom left
plot for [i=0:%d] '%s' index i with linespoints lw 2 title word('%s', i+1)
""" % (os.path.join(out, name + ".png"), title, min(dps) / 1.25, max(dps) * 1.25,
       len(variants) - 1, data, " ".join(variants)))


def plot_imbalance(out, runs, warmup_last):
    dp = max(r["dp"] for r in runs)
    data = os.path.join(out, "imbalance.dat")
    with open(data, "w") as f:
        for v in ("seed", "default"):
            f.write("# %s at DP %d: step, before, after\n" % (v, dp))
            path = os.path.join(out, "runs", "dp%d_%s.log.jsonl" % (dp, v))
            for e in read_jsonl(path):
                if "imbalance_before" in e and e["step"] > warmup_last:
                    f.write("%d %.4f %.4f\n" % (e["step"], e["imbalance_before"],
                                                e["imbalance_after"]))
            f.write("\n\n")
    gnuplot("""set terminal pngcairo size 800,500
set output '%s'
set title 'Predicted imbalance (max/mean - 1) per step at DP %d, after warm-up'
set xlabel 'step'; set ylabel 'imbalance'; set grid; set logscale y
set key outside
plot '%s' index 1 using 1:2 with linespoints title 'before', \\
     '%s' index 0 using 1:3 with linespoints title 'after (seed)', \\
     '%s' index 1 using 1:3 with linespoints title 'after (default)'
""" % (os.path.join(out, "imbalance.png"), dp, data, data, data))


def job_report(out, runs):
    """dpshim-report on the log of `default` at the largest DP size: its
    summary and plots (imbalance, per-rank loads, wait per rank) into
    OUT/report-dpN/. Returns that directory, or None."""
    dp = max(r["dp"] for r in runs)
    log = os.path.join(out, "runs", "dp%d_default.log.jsonl" % dp)
    where = os.path.join(out, "report-dp%d" % dp)
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "dpshim-report")
    if not os.path.exists(log):
        return None
    r = subprocess.run([sys.executable, tool, log, "--out", where],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("demo: dpshim-report failed (exit %d): %s" % (
            r.returncode, r.stderr.strip()[-300:]))
        return None
    print("\ndpshim-report on default at DP %d:\n%s" % (dp, "".join(
        l + "\n" for l in r.stdout.splitlines() if not l.startswith("wrote "))))
    return where


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--warmup-last", type=int)
    p.add_argument("--profile", default="sft")
    p.add_argument("--lengths", default="")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--steps", type=int)
    p.add_argument("--grad-bytes", type=int, default=1 << 20)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--vlm-only", action="store_true",
                   help="the VLM section alone, into results.json's 'vlm'")
    p.add_argument("--handoff-dp", type=int,
                   help="the hand-off row (%s) was run at this DP size: "
                   "an error without it" % HANDOFF)
    args = p.parse_args()
    if not args.vlm_only and (args.warmup_last is None or args.steps is None):
        p.error("--warmup-last and --steps are needed (or --vlm-only)")
    results = os.path.join(args.out, "results.json")
    vlm = vlm_section(args.out)
    if args.vlm_only:
        if not vlm or not vlm["per_dp"]:
            print("demo: no VLM runs under %s/vlm-runs" % args.out)
            return 1
        doc = {}
        if os.path.exists(results):
            with open(results) as f:
                doc = json.load(f)
        runs = doc.get("runs", [])
    else:
        runs = [r for dp in sizes_in(args.out, "runs") for v in TEXT_VARIANTS
                if (r := run_figures(args.out, dp, v, args.warmup_last))]
        if not runs:
            print("demo: no runs under %s/runs" % args.out)
            return 1
        if args.handoff_dp and not any(
                r["dp"] == args.handoff_dp and r["variant"] == HANDOFF
                for r in runs):
            print("demo: no %s run at DP %d under %s/runs (its steps after "
                  "the warm-up are missing)" % (HANDOFF, args.handoff_dp,
                                               args.out))
            return 1
        add_gains(runs)
        print_table(runs, args.warmup_last)
        # What dpshim-sim --calibrate replays: the same runs, simulated.
        doc = {"profile": args.profile, "seed": args.seed,
               "time_scale": args.time_scale, "steps": args.steps,
               "warmup_last": args.warmup_last,
               "grad_bytes": args.grad_bytes, "micro_batches": 1}
        if args.lengths:
            doc["lengths"] = os.path.abspath(args.lengths)
        doc["runs"] = runs
        if handoff_summary(runs, args.warmup_last):
            doc["handoff"] = handoff_summary(runs, args.warmup_last)
    doc.pop("vlm", None)
    doc.pop("vlm_sim", None)
    doc.pop("vlm_sim_encoder_heavy", None)
    if vlm:
        doc["vlm"] = vlm
        print_vlm_table(vlm)
    print_gains(runs, vlm)
    sim = vlm_sim_section(args.out, vlm)
    if sim:
        doc["vlm_sim"] = sim
        print_vlm_sim(sim)
    heavy = vlm_sim_section(args.out, vlm, "sim_encoder_heavy.json")
    if heavy:
        doc["vlm_sim_encoder_heavy"] = heavy
        print_vlm_sim(heavy, ", the encoder-heavy mix")
    with open(results, "w") as f:
        json.dump(doc, f, indent=1)
    wrote = ["results.json"]
    if not args.vlm_only:
        plot_tgs(args.out, runs)
        plot_imbalance(args.out, runs, args.warmup_last)
        wrote += ["tgs_vs_dp.png", "imbalance.png"]
        report = job_report(args.out, runs)
        if report:
            wrote.append(os.path.relpath(report, args.out) +
                         "/ (dpshim-report: summary.txt, imbalance.png, "
                         "loads.png, wait.png)")
    if vlm and vlm["per_dp"]:
        plot_tgs(args.out, [r for d in vlm["per_dp"] for r in d["runs"]],
                 "vlm_tgs_vs_dp", "VLM (%s, %s): TGS against DP size "
                 "(after warm-up)" % (vlm["layout"], vlm["model"]),
                 vlm["variants"])
        wrote.append("vlm_tgs_vs_dp.png")
    if sim and os.path.exists(os.path.join(args.out, "vlm_sim_tgs_vs_dp.png")):
        wrote.append("vlm_sim_tgs_vs_dp.png (dpshim-sim's)")
    print("\nwrote %s/%s" % (args.out, ", ".join(wrote)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
