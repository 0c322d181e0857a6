#!/usr/bin/python3
"""The README's headline figure: what a user of a 7-8B vision-language
model would see. TGS gain over no balancing (%) against DP size, from

  * dpshim-sim on each realistic preset, as tools/sim_vlm.sh runs it:
    internvl2-8b (layout internvl), qwen2-vl-7b and qwen2.5-vl-7b
    (qwen2vl), qwen3-vl-8b (qwen3vl), each with `--tp model --vit-balance`,
    DP 4..4096, the shim's defaults (the trigger auto), H100 times, 400 Gb/s,
    5 us. Plotted: `default` (dpshim's solver) for every preset, `seed` (the
    original's algorithm, as re-implemented) for internvl2-8b, dashed.
    One more run, internvl2-8b at `--threshold 0.2` (none, seed,
    default), dotted: the original's fixed trigger, the default until
    2026-12-03;
  * the real runs (tools/figures/headline_runs.json: internvl2-8b, DP
    8/16/32, `tools/demo.sh --vlm-only` at the trigger auto and at 0.2, on
    the 2-core development machine, time scale 0.25; copied from
    tools/README.md), as markers;
  * the original's published result (InternVL, TP 4), which is qualitative
    only: no gain at DP 4-16, a gain growing with DP from 32. It is drawn
    as shaded regions with words, not as a curve: no figures were
    published.

The tiny text model's demo gains (+36 to +48 % at DP 8-32) are a stress
case and are left out (the figure says so).

    tools/figures/headline.py [--build DIR] [--out PNG] [--json-out FILE]
                              [--from-json FILE]

--build: the meson build directory holding tools/sim/dpshim-sim [build]
  (ninja -C build tools/sim/dpshim-sim builds it); --out: the PNG
  [tools/figures/headline.png]; --json-out: also write the simulator's
  results, the plotted gains and the real points as JSON; --from-json: plot
  from such a file instead of running the simulator.

Prints the table of the plotted gains (DP x series), in markdown, and a
second table of the gains computed but not plotted. Takes about 2 minutes
on the 2-core development machine (20-30 s per preset with the ViT
balance, 8-20 s for the trigger-0.2 run; the runs go one at a time).
The simulator times the real solver on this machine's CPU, so the gains
at DP 1024-4096 move by up to a point or so from run to run, more when
the machine is busy; below DP 256 they repeat to 0.2 %.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_RUNS = os.path.join(HERE, "headline_runs.json")

# (preset, layout), as tools/sim_vlm.sh.
PRESETS = [("internvl2-8b", "internvl"), ("qwen2-vl-7b", "qwen2vl"),
           ("qwen2.5-vl-7b", "qwen2vl"), ("qwen3-vl-8b", "qwen3vl")]
SIM_ARGS = ["--tp", "model", "--vit-balance"]
# The run at the original's fixed trigger, beside the real ones at it.
FIXED_TRIGGER = ("internvl2-8b", "internvl", 0.2)
COLOURS = {"internvl2-8b": "#1f77b4", "qwen2-vl-7b": "#2ca02c",
           "qwen2.5-vl-7b": "#9467bd", "qwen3-vl-8b": "#d62728"}


def die(msg):
    print(f"headline.py: {msg}", file=sys.stderr)
    sys.exit(2)


def run_sim(sim, args, label):
    """Runs dpshim-sim with args; returns its JSON array and the seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sim.json")
        cmd = [sim] + args + ["--json", path]
        start = time.monotonic()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        secs = time.monotonic() - start
        if p.returncode != 0:
            tail = p.stderr.strip().splitlines()[-1:] or ["(no message)"]
            die(f"{' '.join(cmd)} failed (exit {p.returncode}): {tail[0]}")
        try:
            with open(path) as f:
                results = json.load(f)
        except (OSError, ValueError) as e:
            die(f"{label}: dpshim-sim wrote no readable JSON ({e})")
    print(f"  ({label}: {secs:.0f} s)", file=sys.stderr)
    return results, secs


def gains(results):
    """{algo: {dp: gain over none, %}} from one dpshim-sim JSON array."""
    tgs = {(r["ranks"], r["algo"]): r["tgs"] for r in results}
    out = {}
    for (dp, algo), t in tgs.items():
        none = tgs.get((dp, "none"))
        if algo != "none" and none:
            out.setdefault(algo, {})[dp] = 100.0 * (t / none - 1.0)
    return out


def simulate(build):
    sim = os.path.join(build, "tools", "sim", "dpshim-sim")
    if not os.access(sim, os.X_OK):
        die(f"no {sim}; build it with: ninja -C {build} tools/sim/dpshim-sim")
    print("running dpshim-sim, one preset at a time (about 2 minutes "
          "on 2 cores)", file=sys.stderr)
    runs, cmds, total = {}, {}, 0.0
    for model, layout in PRESETS:
        args = ["--layout", layout, "--model", model] + SIM_ARGS
        runs[model], secs = run_sim(sim, args, model)
        cmds[model] = " ".join(["dpshim-sim"] + args)
        total += secs
    model, layout, thr = FIXED_TRIGGER
    key = f"{model}@{thr}"
    args = ["--layout", layout, "--model", model, "--tp", "model",
            "--threshold", str(thr), "--algos", "none,seed,default"]
    runs[key], secs = run_sim(sim, args, f"{model}, trigger {thr}")
    cmds[key] = " ".join(["dpshim-sim"] + args)
    total += secs
    return runs, cmds, total


def load_real(path):
    try:
        with open(path) as f:
            real = json.load(f)
    except OSError as e:
        die(f"cannot read the real runs' file {path}: {e.strerror}")
    except ValueError as e:
        die(f"{path}: not JSON ({e})")
    return real


def series_from(runs, real):
    """The plotted series and the computed-only ones: name -> {dp: %}."""
    g = {k: gains(v) for k, v in runs.items()}
    m, _, thr = FIXED_TRIGGER
    plotted = {}
    for model, _ in PRESETS:
        plotted[f"{model} dpshim"] = g[model]["default"]
    plotted[f"{m} seed"] = g[m]["seed"]
    plotted[f"{m} dpshim trig {thr}"] = g[f"{m}@{thr}"]["default"]
    for s in real["series"]:
        if not s.get("plot", True):
            continue
        for algo in ("default", "seed"):
            pts = {p["dp"]: p["gain_pct"] for p in s["points"]
                   if p["algo"] == algo}
            plotted[f"real {algo} trig {s['threshold']}"] = pts
    other = {}
    for model, _ in PRESETS:
        for algo in ("seed", "seed+vit", "default+vit"):
            if algo in g[model] and not (model == m and algo == "seed"):
                other[f"{model} {algo}"] = g[model][algo]
    other[f"{m} seed trig {thr}"] = g[f"{m}@{thr}"]["seed"]
    return plotted, other


def print_table(title, series):
    dps = sorted({dp for s in series.values() for dp in s})
    names = list(series)
    print(title)
    print("| DP | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for dp in dps:
        cells = [f"{series[n][dp]:+.1f} %" if dp in series[n] else ""
                 for n in names]
        print(f"| {dp} | " + " | ".join(cells) + " |")


def plot(plotted, real, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.transforms import blended_transform_factory
    except ImportError:
        die("no matplotlib for this python; apt-get install -y "
            "python3-matplotlib, and run it with /usr/bin/python3")

    m, _, thr = FIXED_TRIGGER
    fig, ax = plt.subplots(figsize=(8, 5), dpi=150)
    fig.subplots_adjust(left=0.075, right=0.70, top=0.925, bottom=0.235)

    def xy(s):
        dps = sorted(s)
        return dps, [s[d] for d in dps]

    all_dp = sorted({d for s in plotted.values() for d in s})
    lo, hi = min(all_dp), max(all_dp)
    ax.set_xscale("log", base=2)
    ax.set_xlim(lo / 1.25, hi * 1.25)
    ax.set_xticks(all_dp)
    ax.set_xticklabels([str(d) for d in all_dp], fontsize=8.5)
    ax.minorticks_off()
    ax.tick_params(axis="y", labelsize=8.5)

    # The original's published result: words and shading, no numbers.
    blend = blended_transform_factory(ax.transData, ax.transAxes)
    ax.axvspan(lo / 1.25, 16 * 1.12, color="0.6", alpha=0.16, lw=0,
               zorder=0)
    ax.axvspan(32 / 1.12, hi * 1.25, color="0.6", alpha=0.07, lw=0,
               zorder=0)
    ax.text(math.sqrt(lo * 16), 0.975, "original\n(InternVL, TP 4):\n"
            "no gain at\nDP 4–16", transform=blend, ha="center",
            va="top", fontsize=8, color="0.25", style="italic")
    ax.text(math.sqrt(32 * hi), 0.975,
            "original (InternVL, TP 4): a gain that\ngrows with DP from 32 "
            "(qualitative only:\nno figures published)",
            transform=blend, ha="center", va="top", fontsize=8,
            color="0.25", style="italic")
    ax.axhline(0, color="0.3", lw=0.9, zorder=1)

    # qwen2-vl-7b and qwen2.5-vl-7b nearly coincide: the first is drawn
    # wide, the second narrow on top of it.
    widths = {"qwen2-vl-7b": 3.6, "qwen2.5-vl-7b": 1.5}
    sim_handles = []
    for model, _ in PRESETS:
        h, = ax.plot(*xy(plotted[f"{model} dpshim"]), color=COLOURS[model],
                     lw=widths.get(model, 2), marker=".", ms=5, zorder=3,
                     label=f"{model}")
        sim_handles.append(h)
    h, = ax.plot(*xy(plotted[f"{m} seed"]), color=COLOURS[m], lw=1.4,
                 ls="--", zorder=3, label=f"{m}: the original's\n"
                 "algorithm (seed)")
    sim_handles.append(h)
    h, = ax.plot(*xy(plotted[f"{m} dpshim trig {thr}"]), color=COLOURS[m],
                 lw=1.3, ls=":", zorder=3, label=f"{m}: dpshim,\n"
                 f"trigger {thr} (the original's)")
    sim_handles.append(h)

    # seed's markers are larger rings, so that a default dot on the same
    # spot shows inside them.
    styles = {"default": dict(ms=5.5, mfc="black"),
              "seed": dict(ms=9, mfc="none")}
    real_handles = []
    for s in real["series"]:
        t = s["threshold"]
        if not s.get("plot", True):
            continue
        for algo in ("default", "seed"):
            name = "dpshim" if algo == "default" else "seed"
            trig = ("trigger auto (default)" if t == "auto"
                    else f"trigger {t} (the original's)")
            h, = ax.plot(*xy(plotted[f"real {algo} trig {t}"]), ls="none",
                         marker="o" if t == "auto" else "^", mec="black",
                         mew=1.1, zorder=4, label=f"{name}, {trig}",
                         **styles[algo])
            real_handles.append(h)

    ymin = min(v for s in plotted.values() for v in s.values())
    ymax = max(v for s in plotted.values() for v in s.values())
    ax.set_ylim(math.floor(ymin) - 1.5, math.ceil(ymax) + 6)
    ax.set_xlabel("DP size (ranks)", fontsize=9.5)
    ax.set_ylabel("TGS gain over no balancing (%)", fontsize=9.5)
    fig.suptitle("What a 7–8B vision-language model gains from balancing",
                 x=0.01, ha="left", fontsize=11.5)
    ax.grid(True, which="major", axis="y", color="0.88", lw=0.6)
    leg = ax.legend(handles=sim_handles, loc="upper left",
                    bbox_to_anchor=(1.02, 1.0), fontsize=7.8,
                    title="dpshim-sim, TP 4, trigger auto:\n"
                    "dpshim (default) unless noted", title_fontsize=7.8,
                    alignment="left", frameon=False)
    ax.add_artist(leg)
    ax.legend(handles=real_handles, loc="lower left",
              bbox_to_anchor=(1.02, 0.0), fontsize=7.8,
              title=f"real runs (2-core machine),\n{m}, DP 8–32",
              title_fontsize=7.8, alignment="left", frameon=False)
    fig.text(0.01, 0.012,
             "Lines: dpshim-sim run by tools/figures/headline.py with "
             "tools/sim_vlm.sh's settings (vlmload's data, 32K-token packs, "
             "the preset's TP,\nH100 times, 400 Gb/s, 5 µs). Markers: "
             "tools/demo.sh --vlm-only at the trigger auto (2026-12-03) and "
             "at 0.2 (2026-12-02), tools/README.md:\n8–32 "
             "ranks sharing 2 cores, time scale 0.25 "
             "(tools/figures/headline_runs.json). Not shown: the tiny text "
             "model's demo gains (+36 to +48 %\nat DP 8–32): a stress case, "
             "a small model whose step is mostly attention, so that packs of "
             "equal tokens differ far more in cost.",
             fontsize=7.3, color="0.2", va="bottom")
    fig.savefig(out)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(
        description="The README's headline figure: TGS gain over no "
        "balancing against DP for the realistic VLM presets (dpshim-sim), "
        "with the real runs and the original's published result.")
    ap.add_argument("--build", default="build",
                    help="meson build directory [build]")
    ap.add_argument("--out", default=os.path.join("tools", "figures",
                                                  "headline.png"),
                    help="PNG to write [tools/figures/headline.png]")
    ap.add_argument("--json-out", metavar="FILE",
                    help="also write the results and gains as JSON")
    ap.add_argument("--from-json", metavar="FILE",
                    help="plot a --json-out file's results instead of "
                    "running the simulator")
    a = ap.parse_args()

    out_dir = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(out_dir):
        die(f"--out {a.out}: no directory {out_dir}")
    real = load_real(REAL_RUNS)
    if a.from_json:
        try:
            with open(a.from_json) as f:
                saved = json.load(f)
            runs, cmds, secs = saved["sim_runs"], saved["sim_commands"], 0.0
        except (OSError, ValueError, KeyError) as e:
            die(f"--from-json {a.from_json}: not a headline.py --json-out "
                f"file ({e})")
    else:
        runs, cmds, secs = simulate(a.build)
    plotted, other = series_from(runs, real)

    print_table("TGS gain over none, as plotted (dpshim = default; "
                f"'trig {FIXED_TRIGGER[2]}': --threshold {FIXED_TRIGGER[2]}; "
                "real: tools/figures/headline_runs.json):", plotted)
    print()
    print_table("Computed, not plotted:", other)
    plot(plotted, real, a.out)
    print(f"\nwrote {a.out}" + (f" (simulator: {secs:.0f} s)" if secs else ""))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"sim_commands": cmds, "sim_seconds": round(secs, 1),
                       "plotted_gain_pct": plotted,
                       "other_gain_pct": other, "real_runs": real,
                       "sim_runs": runs}, f, indent=1)
        print(f"wrote {a.json_out}")


if __name__ == "__main__":
    main()
