#!/usr/bin/env bash
# The main job: the reference trainer under real mpirun at several DP sizes,
# without the shim, with the original's solver (DPSHIM_SOLVER=seed) and with
# dpshim's default solver, on the same data; then the gain. Does its own
# set-up (apt packages, meson build). Writes demo-out/.
#
#   tools/demo.sh                 DP 4 8 16 32 (and 64), about 10 minutes
#   tools/demo.sh --quick         DP 4 and 8, few steps, about a minute
#   tools/demo.sh --profile long  sft (default), long or fewlong
#   tools/demo.sh --lengths FILE  sample lengths, one per line
#   tools/demo.sh --corpus DIR    lengths of the text documents under DIR
#   tools/demo.sh --dp "4 8"      DP sizes
#   tools/demo.sh --steps N       steps per run (warm-up is steps 2-11)
# It ends with a VLM workload (tools/vlm_bench.sh: vlmtrain, Qwen2-VL layout,
# qwen2-vl-7b preset, DP 8, none / seed / default).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "demo: $*" >&2; exit 2; }

profile=sft lengths="" corpus="" dps="4 8 16 32 64" steps=24 warmup=2-11
time_scale=5 out=demo-out
while [ $# -gt 0 ]; do
  case $1 in
    --quick) dps="4 8" steps=10 warmup=2-5 time_scale=1 ;;
    --profile) profile=${2:?--profile needs sft, long or fewlong}; shift ;;
    --lengths) lengths=${2:?--lengths needs a file}; shift ;;
    --corpus) corpus=${2:?--corpus needs a directory}; shift ;;
    --dp) dps=${2:?--dp needs sizes like "4 8 16"}; shift ;;
    --steps) steps=${2:?--steps needs a number}; shift ;;
    --time-scale) time_scale=${2:?--time-scale needs a number}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
warmup_last=${warmup#*-}
[ "$steps" -gt "$warmup_last" ] 2>/dev/null ||
  die "--steps $steps: expected a number above the warm-up's last step ($warmup_last)"

echo "== set-up"
tools/deps.sh demo
[ -d build/meson-private ] || meson setup build >/dev/null
ninja -C build >/dev/null

mkdir -p "$out/runs"
rm -f "$out"/runs/*
data=(--profile "$profile")
if [ -n "$corpus" ]; then
  [ -d "$corpus" ] || die "--corpus '$corpus': not a directory"
  python3 tools/corpus_lengths.py "$corpus" > "$out/corpus.lengths"
  lengths="$out/corpus.lengths"
fi
if [ -n "$lengths" ]; then
  [ -r "$lengths" ] || die "--lengths '$lengths': cannot read it"
  data+=(--lengths "$lengths")
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sleeping ranks share this machine's cores: oversubscribe, and let idle
# ranks yield the CPU instead of spinning.
mpirun=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
# DP 64 only when the machine holds it: 64 processes need memory, not cores.
fits() { [ "$1" -le 32 ] || [ "$(awk '/MemAvailable/ {print $2}' /proc/meminfo)" -gt $(( $1 * 150000 )) ]; }

run() { # dp variant
  local dp=$1 variant=$2 base="$out/runs/dp$1_$2" env=()
  if [ "$variant" != none ]; then
    env=(-x LD_PRELOAD="$PWD/build/shim/libdpshim.so" -x DPSHIM_VLM_BALANCE=1
         -x DPSHIM_WARMUP_ITERS="$warmup" -x DPSHIM_SOLVER="$variant"
         -x DPSHIM_LOG="$PWD/$base.log.jsonl")
  fi
  "${mpirun[@]}" -np "$dp" "${env[@]}" build/tools/reftrain/reftrain \
    --mode emulate "${data[@]}" --seed 7 --steps "$steps" \
    --time-scale "$time_scale" --stats-out "$base.stats.jsonl" \
    > "$base.json" 2> "$base.err" ||
    { cat "$base.err" >&2; die "reftrain failed at DP $dp ($variant)"; }
}

sizes=()
for dp in $dps; do
  if fits "$dp"; then sizes+=("$dp"); else echo "(DP $dp skipped: not enough memory)"; fi
done
total=$(( ${#sizes[@]} * 3 )) n=0 start=$SECONDS
echo "== runs: DP ${sizes[*]} x {none, seed, default}, $steps steps each (warm-up $warmup)"
for dp in "${sizes[@]}"; do
  for variant in none seed default; do
    n=$(( n + 1 ))
    printf '[%2d/%d] DP %-3s %-8s' "$n" "$total" "$dp" "$variant"
    t0=$SECONDS
    run "$dp" "$variant"
    printf ' %4ds   (%ds so far)\n' $(( SECONDS - t0 )) $(( SECONDS - start ))
  done
done

echo "== results"
python3 tools/demo_report.py "$out" --warmup-last "$warmup_last" \
  --steps "$steps" --profile "$profile" ${lengths:+--lengths "$lengths"} \
  --seed 7 --time-scale "$time_scale"

echo "== the simulator against these runs (DP <= 32), then at scale"
# The calibration replays the measured runs at DP 4-32: those of the demo.
python3 - "$out/results.json" "$out/calibration_runs.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["runs"] = [x for x in r["runs"] if x["dp"] <= 32]
json.dump(r, open(sys.argv[2], "w"), indent=1)
PY
build/tools/sim/dpshim-sim --calibrate "$out/calibration_runs.json" |
  tee "$out/calibration.txt"
build/tools/sim/dpshim-sim --profile "$profile" ${lengths:+--lengths "$lengths"} \
  --time-scale "$time_scale" --seed 7 --warmup-last "$warmup_last" \
  --json "$out/sim.json" \
  --png "$out/sim_tgs_vs_dp.png" 2> "$out/sim_summary.txt" > /dev/null
cat "$out/sim_summary.txt"
echo "wrote $out/calibration.txt, sim.json, sim_tgs_vs_dp.png"

echo "== a VLM workload: the Qwen2-VL layout under the qwen2-vl-7b preset, DP 8"
tools/vlm_bench.sh --layout qwen2vl --model qwen2-vl-7b --ranks 8 |
  tee "$out/vlm.txt"
echo "wrote $out/vlm.txt"
