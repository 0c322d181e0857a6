#!/usr/bin/env bash
# Steps without an MPI gradient sync (issue 21): what balancing gains when
# the shim delimits steps by hand-offs, and what trainer MPI traffic that is
# no sync does to it. Prints figures, asserts nothing. The machine is noisy:
# every cell's variants run back to back, rep after rep (their order turned
# each rep), and each figure is the median over reps of the per-rep value
# (a ratio: against the run without the shim of the same rep).
#
# steps  reftrain as tools/demo.sh --quick runs it (sft, seed 7, 10 steps,
#        time scale 1, warm-up 2-5; MPI_Allreduce sync) at DP 8, 16, 32:
#        without the shim (none), with steps delimited by hand-offs
#        (DPSHIM_STEP=handoff) and by the sync (DPSHIM_STEP=sync). Per mode:
#        the TGS gain over none (steps after the warm-up, as
#        tools/demo_report.py counts them), the fit the summary reports and
#        its errors (per point; step times), plans applied. Hand-off steps
#        fit from step times (three in the quick warm-up: two unknowns)
#        and refit on the balanced steps where it stops predicting them.
# shm    reftrain --sync shm (no MPI in the steps) at 8 ranks, the long
#        profile (seed 5, 16 steps, time scale 0.1, warm-up 2-6), beside
#        each distractor: none, --chatter MS, --loss-allreduce, both.
#        Mean step time after the warm-up without the shim, with it
#        (DPSHIM_STEP and DPSHIM_FIT at their defaults, auto) and with it
#        told the true cost (DPSHIM_COEFS from reftrain --print-coefs:
#        the emulated GPU's time per sample, which follows len^2).
#
#   tools/step_bench.sh [--build DIR] [--quick] [--only steps|shm]
#                       [--reps N] [--dp "8 16 32"] [--chatter MS]
#                       [--steps N --warmup A-B] [--out DIR]
#
# --steps and --warmup change the steps part's run length and warm-up
# (default 10 and 2-5, the quick demo's; the full demo's are 24 and 2-11).
#
# About 7-8 minutes here (2 cores) with the defaults, 3 reps; --quick:
# DP 8 and 16, one rep, about 2 minutes. --out DIR keeps every run's files
# (JSON line, stderr with the shim's summary, --stats-out) there; without,
# they go to a temporary directory. Builds nothing:
#   ninja -C build tools/reftrain/reftrain tools/packload/libdpshim_packload.so
set -euo pipefail

usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "step_bench.sh: $*" >&2; exit 2; }

build=build reps=3 dps="8 16 32" chatter=2 only="" out="" steps=10 steps_warmup=2-5
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a directory}; shift ;;
    --quick) reps=1 dps="8 16" ;;
    --only) only=${2:?--only needs steps or shm}; shift ;;
    --reps) reps=${2:?--reps needs a number}; shift ;;
    --dp) dps=${2:?--dp needs sizes like \"8 16 32\"}; shift ;;
    --chatter) chatter=${2:?--chatter needs milliseconds}; shift ;;
    --steps) steps=${2:?--steps needs a number}; shift ;;
    --warmup) steps_warmup=${2:?--warmup needs steps like 2-11}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[[ $reps =~ ^[1-9][0-9]*$ ]] || die "--reps '$reps': expected a number >= 1"
[[ $chatter =~ ^[1-9][0-9]*$ ]] || die "--chatter '$chatter': expected milliseconds >= 1"
for dp in $dps; do
  [[ $dp =~ ^[1-9][0-9]*$ ]] || die "--dp '$dps': expected sizes like \"8 16 32\""
done
case $only in "" | steps | shm) ;; *) die "--only '$only': expected steps or shm" ;; esac

# Absolute: every rank resolves LD_PRELOAD on its own.
[[ -d $build ]] || die "--build: no directory $build"
build=$(cd "$build" && pwd)
train=$build/tools/reftrain/reftrain shim=$build/shim/libdpshim.so
adapter=$build/tools/packload/libdpshim_packload.so
for f in "$train" "$shim" "$adapter"; do
  [[ -e $f ]] || die "no $f; build it first: ninja -C $build tools/reftrain/reftrain tools/packload/libdpshim_packload.so"
done
if [[ -n $out ]]; then
  mkdir -p "$out" || die "--out '$out': cannot create it"
  out=$(cd "$out" && pwd)
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sleeping ranks share the cores: oversubscribe, idle ranks yield.
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

# The workloads (tools/demo.sh --quick's; tools/multihost/figures.py's
# profile and seed, shorter and faster).
[[ $steps =~ ^[1-9][0-9]*$ && $steps_warmup =~ ^[1-9][0-9]*-[1-9][0-9]*$ &&
   $steps -gt ${steps_warmup#*-} ]] ||
  die "--steps '$steps' --warmup '$steps_warmup': expected a range like 2-11 and more steps than its last"
steps_args=(--mode emulate --profile sft --seed 7 --steps "$steps" --time-scale 1)
shm_scale=0.1
shm_args=(--mode emulate --profile long --seed 5 --steps 16
          --time-scale "$shm_scale" --grad-bytes 1048576 --sync shm)
shm_warmup=2-6
coefs=$("$train" --print-coefs --time-scale "$shm_scale")

# One run: base path, ranks, shim settings ("none": no preload; else
# NAME=VALUE words), then reftrain's arguments. A failed run is said and
# left without figures; the bench goes on.
run() {
  local base=$1 np=$2 settings=$3 env=()
  shift 3
  if [[ $settings != none ]]; then
    env=(-x LD_PRELOAD="$shim:$adapter" -x DPSHIM_VLM_BALANCE=1)
    for kv in $settings; do env+=(-x "$kv"); done
  fi
  "${mpi[@]}" -np "$np" "${env[@]}" "$train" "$@" \
    --stats-out "$base.stats.jsonl" > "$base.json" 2> "$base.err" || {
    echo "   (failed: ${base##*/}; its stderr ends:)" >&2
    tail -3 "$base.err" | sed 's/^/     /' >&2
    rm -f "$base.stats.jsonl"
  }
}

# Every variant of one cell, in an order turned by the rep: cell path,
# rep, ranks, then "name|settings" pairs, "--", and reftrain's arguments.
cell() {
  local path=$1 rep=$2 np=$3 variants=()
  shift 3
  while [[ $1 != -- ]]; do variants+=("$1"); shift; done
  shift
  local n=${#variants[@]}
  for ((k = 0; k < n; k++)); do
    local v=${variants[$(((k + rep) % n))]}
    printf '   rep %d %-34s %s\n' "$rep" "${path##*/}" "${v%%|*}" >&2
    run "${path}_${v%%|*}_r$rep" "$np" "${v#*|}" "$@"
  done
}

if [[ $only != shm ]]; then
  rm -rf "$out/steps"
  mkdir -p "$out/steps"
  echo "== steps: hand-off steps against sync steps, DP $dps, $reps rep(s)" >&2
  common="DPSHIM_WARMUP_ITERS=$steps_warmup"
  for ((rep = 0; rep < reps; rep++)); do
    for dp in $dps; do
      cell "$out/steps/dp$dp" "$rep" "$dp" "none|none" \
        "handoff|$common DPSHIM_STEP=handoff" "sync|$common DPSHIM_STEP=sync" \
        -- "${steps_args[@]}"
    done
  done
fi

if [[ $only != steps ]]; then
  rm -rf "$out/shm"
  mkdir -p "$out/shm"
  echo "== shm: --sync shm at 8 ranks beside each distractor, $reps rep(s); true cost $coefs" >&2
  common="DPSHIM_WARMUP_ITERS=$shm_warmup"
  for ((rep = 0; rep < reps; rep++)); do
    for d in none chatter loss both; do
      case $d in
        none) extra=() ;;
        chatter) extra=(--chatter "$chatter") ;;
        loss) extra=(--loss-allreduce) ;;
        both) extra=(--chatter "$chatter" --loss-allreduce) ;;
      esac
      cell "$out/shm/$d" "$rep" 8 "none|none" "shim|$common" \
        "coefs|$common DPSHIM_COEFS=$coefs" -- "${shm_args[@]}" "${extra[@]}"
    done
  done
fi

python3 - "$out" "$reps" "${steps_warmup#*-}" "${shm_warmup#*-}" "$dps" \
  "$chatter" "$coefs" "$only" <<'PY'
import glob, json, os, re, statistics, sys

out, reps, steps_last, shm_last, dps, chatter, coefs, only = sys.argv[1:]
reps, steps_last, shm_last = int(reps), int(steps_last), int(shm_last)


def jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def text(path):
    return open(path).read() if os.path.exists(path) else ""


def run(base, last):
    """One run's figures over the steps after the warm-up (0-based steps
    from `last`, as tools/demo_report.py), or None when it failed."""
    stats = [s for s in jsonl(base + ".stats.jsonl") if s["step"] >= last]
    if not stats:
        return None
    seconds = sum(s["step_ms"] for s in stats) / 1e3
    tokens = sum(sum(s["tokens"]) for s in stats)
    line = [l for l in text(base + ".json").splitlines() if l.startswith("{")]
    err = text(base + ".err")
    return {"tgs": tokens / len(stats[0]["tokens"]) / seconds,
            "step_ms": 1e3 * seconds / len(stats),
            "digest": json.loads(line[-1])["consumed_digest"] if line else None,
            **summary(err)}


def summary(err):
    """What the shim's summary says, loosely parsed: its lines are the
    core's to word."""
    r = {}
    m = re.search(r"hand-offs balanced: (\d+) applied", err)
    r["applied"] = int(m.group(1)) if m else None
    m = re.search(r"^dpshim:\s+steps: (.*)", err, re.M)
    r["steps_by"] = (None if not m else "hand-offs" if "hand-off" in m.group(1)
                     else "the sync" if "sync" in m.group(1)
                     else m.group(1)[:12])
    r["fit"] = fit_name(err)
    m = re.search(r"prediction error mean ([0-9.]+)%", err)
    r["point_err"] = float(m.group(1)) if m else None
    r["step_err"] = step_error(err, r["fit"])
    r["noop"] = "nothing is balanced" in err
    return r


def fit_name(err):
    """The fit the summary names: the word in parentheses of its fit line
    (ranks, or the step-time fit's), coefs, none; None without a line."""
    m = re.search(r"^dpshim:\s+(fit[^:]*|cost model|no fitted)", err, re.M)
    if not m:
        return None
    word = re.search(r"\((\w+)[),]", m.group(1))
    return (word.group(1) if word else "coefs" if m.group(1) == "cost model"
            else "none" if m.group(1) == "no fitted" else "?")


def step_error(err, fit):
    """How well the fit taken predicts the step times: the summary gives
    it for each fit made ("within X% ... by the per-rank fit, Y% ... by the
    step-time fit")."""
    found = re.findall(r"within ([0-9.]+)% \(max [0-9.]+%\) by the "
                       r"([\w-]+) fit", err)
    if not found:
        return None
    for pct, by in found:
        if (by == "per-rank") == (fit == "ranks"):
            return float(pct)
    return float(found[0][0])


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec, width):
    return ("%" + spec) % v if v is not None else "-".rjust(width)


def cell(prefix, variants, last):
    """{variant: [figures of each rep]} of one cell."""
    return {v: [run("%s_%s_r%d" % (prefix, v, k), last) for k in range(reps)]
            for v in variants}


def ratio(c, v, key, ref="none"):
    """Median over reps of c[v]/c[ref] for one figure."""
    return med([a[key] / b[key] for a, b in zip(c[v], c[ref]) if a and b])


def same_digest(c, v):
    pairs = [(a["digest"], b["digest"]) for a, b in zip(c[v], c["none"])
             if a and b]
    return "-" if not pairs else "yes" if all(x == y for x, y in pairs) \
        else "NO"


def most(c, v, key):
    """The value most reps gave (ties: the first)."""
    vals = [r[key] for r in c[v] if r and r[key] is not None]
    return max(vals, key=vals.count) if vals else None


def figure(c, v, key):
    return med([r[key] for r in c[v] if r])


def steps_part():
    print("steps: hand-off steps (DPSHIM_STEP=handoff) against sync steps "
          "(DPSHIM_STEP=sync); reftrain sft, DP as below, %d rep(s), medians"
          % reps)
    print("  gain: TGS over none after the warm-up; fit: which the summary "
          "names; point err: its mean prediction error; step err: step "
          "times predicted within")
    print("  (warm-up 2-%d, the first step dropped: a fit from step times "
          "has %d points, so at most %d unknowns%s)" % (
              steps_last, steps_last - 2, steps_last - 3,
              ": its errors are ~0 by construction" if steps_last <= 5
              else ""))
    print("  %-4s %9s | %-7s %7s %5s %6s %9s %8s %7s" % (
        "DP", "TGS none", "mode", "gain", "fit", "K", "point err",
        "step err", "digest"))
    for dp in dps.split():
        c = cell(os.path.join(out, "steps", "dp" + dp),
                 ["none", "handoff", "sync"], steps_last)
        for i, v in enumerate(["handoff", "sync"]):
            gain = ratio(c, v, "tgs")
            print("  %-4s %9s | %-7s %7s %5s %6s %9s %8s %7s%s" % (
                dp if i == 0 else "",
                fmt(figure(c, "none", "tgs"), ".0f", 9) if i == 0 else "",
                v, fmt(100 * (gain - 1) if gain else None, "+.1f%%", 7),
                most(c, v, "fit") or "-", fmt(figure(c, v, "applied"),
                                              ".0f", 6),
                fmt(figure(c, v, "point_err"), ".1f%%", 9),
                fmt(figure(c, v, "step_err"), ".1f%%", 8),
                same_digest(c, v),
                "  (says nothing is balanced)" if most(c, v, "noop") else ""))


def shm_part():
    print("shm: reftrain --sync shm at 8 ranks, long, %d rep(s), medians; "
          "mean step time after the warm-up" % reps)
    print("  shim: DPSHIM_STEP, DPSHIM_FIT auto; coefs: DPSHIM_COEFS=%s "
          "(the emulated cost, reftrain --print-coefs)" % coefs)
    print("  ratio: with the shim / without, of the same rep (below 1: "
          "faster); K: hand-offs balanced")
    print("  %-16s %9s | %9s %7s %4s %-12s | %9s %7s %4s | %s" % (
        "distractor", "none ms", "shim ms", "ratio", "K", "steps by",
        "coefs ms", "ratio", "K", "digest"))
    names = {"none": "none", "chatter": "--chatter %s" % chatter,
             "loss": "--loss-allreduce", "both": "both"}
    for d in ["none", "chatter", "loss", "both"]:
        c = cell(os.path.join(out, "shm", d), ["none", "shim", "coefs"],
                 shm_last)
        digests = {same_digest(c, v) for v in ("shim", "coefs")}
        print("  %-16s %9s | %9s %7s %4s %-12s | %9s %7s %4s | %s" % (
            names[d], fmt(figure(c, "none", "step_ms"), ".1f", 9),
            fmt(figure(c, "shim", "step_ms"), ".1f", 9),
            fmt(ratio(c, "shim", "step_ms"), ".3f", 7),
            fmt(figure(c, "shim", "applied"), ".0f", 4),
            most(c, "shim", "steps_by") or "-",
            fmt(figure(c, "coefs", "step_ms"), ".1f", 9),
            fmt(ratio(c, "coefs", "step_ms"), ".3f", 7),
            fmt(figure(c, "coefs", "applied"), ".0f", 4),
            "NO" if "NO" in digests else "yes" if "yes" in digests else "-"))


if only != "shm":
    steps_part()
if only == "":
    print()
if only != "steps":
    shm_part()
PY
