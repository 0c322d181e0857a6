#!/usr/bin/env bash
# The main job: the reference trainer under real mpirun at several DP sizes,
# without the shim, with the original's solver (DPSHIM_SOLVER=seed) and with
# dpshim's default solver, on the same data; then the gain. Does its own
# set-up (apt packages, meson build). Writes demo-out/.
#
#   tools/demo.sh                 DP 4 8 16 32 (and 64), about 10 minutes,
#                                 then the VLM section (below), about 4
#   tools/demo.sh --quick         DP 4 and 8 (VLM: 8), few steps, 1-2 minutes;
#                                 with the hand-off row (below)
#   tools/demo.sh --profile long  sft (default), long or fewlong
#   tools/demo.sh --lengths FILE  sample lengths, one per line
#   tools/demo.sh --corpus DIR    lengths of the text documents under DIR
#   tools/demo.sh --dp "4 8"      DP sizes
#   tools/demo.sh --steps N       steps per run (warm-up is steps 2-11)
#   tools/demo.sh --time-scale X  emulated GPU time x X (default 5)
#   tools/demo.sh --out DIR       where to write (default demo-out)
#   tools/demo.sh --handoff-row   one more text run at the largest DP size:
#                                 default@handoff, dpshim's default solver
#                                 with hand-off steps (DPSHIM_STEP=handoff:
#                                 a step is DPSHIM_MICRO_BATCHES hand-offs,
#                                 the cost fitted from step times), what a
#                                 trainer whose gradient sync is not an MPI
#                                 call gets (reftrain's still is one); on
#                                 in --quick, --no-handoff-row turns it off
#
# The VLM section: vlmtrain (tools/vlmtrain) under a realistic model preset
# of the emulated GPU, none / seed / default / default:0.2 (default at the
# original's fixed trigger, DPSHIM_TRIGGER_THRESHOLD=0.2, beside the
# default auto) / default+vit (the ViT-level balance too:
# DPSHIM_VIT_BALANCE=1, its cost fitted in the warm-up) on the same data
# (seed 7) at each DP size, warm-up 2-6; digests checked equal.
# Then dpshim-sim on the same layout and preset, --vit-balance, at DP 4 to
# 4096, and again on the encoder-heavy mix (--mix encoder-heavy) unless the
# runs drew it. About 8 minutes here (--quick: DP 8, 10 steps, about a
# minute). Into the tables, results.json ("vlm", "vlm_sim",
# "vlm_sim_encoder_heavy"), vlm_tgs_vs_dp.png and vlm_sim_tgs_vs_dp.png.
#   --vlm-layout L       internvl (default), qwen2vl or qwen3vl
#   --vlm-model M        a tools/emu preset (default: the layout's,
#                        internvl2-8b, qwen2-vl-7b, qwen3-vl-8b)
#   --vlm-dp "8 16 32"   its DP sizes (default 8 16 32)
#   --vlm-steps N        steps per run (default 16; above 6, the warm-up)
#   --vlm-time-scale X   emulated GPU time x X (default 0.25)
#   --vlm-args "..."     vlmtrain's data options (default: the layout's,
#                        internvl: --pack-tokens 32768 --tile-size 16;
#                        qwen: --pack-tokens 8192 --max-side 32); add
#                        --mix encoder-heavy for the encoder-heavy mix
#                        (the simulator draws it too)
#   --vlm-shim-env "NAME=VALUE ..."  more DPSHIM_* settings for its runs
#                        with the shim (e.g. DPSHIM_TRIGGER_THRESHOLD=0.05;
#                        default: none, the shim's defaults); the simulator
#                        takes the trigger thresholds and caps among them
#   --no-vlm-vit         leave default+vit out (runs and simulator)
#   --vlm-sim-time-scale X  the simulator's time scale (default 1: an H100;
#                        the runs' is --vlm-time-scale)
#   --no-vlm             leave the VLM section out
#   --vlm-only           the VLM section alone: results.json keeps the text
#                        runs of an earlier demo, its "vlm" and
#                        "vlm_sim" are replaced
#
# Across hosts (as root): hosts made of network namespaces, OpenMPI over
# TCP between them (tools/multihost/hosts.py); reftrain on N hosts x 4
# ranks without the shim and with it, plans told the hosts and not: TGS,
# the digest, the bytes moved across hosts. Into OUT/hosts.txt; then
# dpshim-sim --calibrate on those runs (OUT/hosts_calibration_runs.json)
# into OUT/hosts_calibration.txt. Nothing else runs.
#   --hosts N            2-4 hosts
#   --link-rate RATE     shape each host's link (tc tbf), e.g. 200mbit
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "demo: $*" >&2; exit 2; }

profile=sft lengths="" corpus="" dps="4 8 16 32 64" steps=24 warmup=2-11
time_scale=5 out=demo-out
vlm=1 text=1 vlm_layout=internvl vlm_model="" vlm_dps="8 16 32" vlm_steps=16
vlm_warmup=2-6 vlm_scale=0.25 vlm_args="" vlm_env="" vlm_vit=1 vlm_sim_scale=1
set_vlm_args=0 hosts="" link_rate="" handoff_row=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) dps="4 8" steps=10 warmup=2-5 time_scale=1 vlm_dps=8 vlm_steps=10
             [ "$handoff_row" = off ] || handoff_row=1 ;;
    --handoff-row) handoff_row=1 ;;
    --no-handoff-row) handoff_row=off ;;
    --hosts) hosts=${2:?--hosts needs a number of hosts, 2-4}; shift ;;
    --link-rate) link_rate=${2:?--link-rate needs a rate like 200mbit}; shift ;;
    --vlm-layout) vlm_layout=${2:?--vlm-layout needs internvl, qwen2vl or qwen3vl}; shift ;;
    --vlm-model) vlm_model=${2:?--vlm-model needs a preset name}; shift ;;
    --vlm-dp) vlm_dps=${2:?--vlm-dp needs sizes like "8 16 32"}; shift ;;
    --vlm-steps) vlm_steps=${2:?--vlm-steps needs a number}; shift ;;
    --vlm-time-scale) vlm_scale=${2:?--vlm-time-scale needs a number}; shift ;;
    --vlm-args) [ $# -ge 2 ] || die "--vlm-args needs vlmtrain options (\"\" for none)"
                vlm_args=$2 set_vlm_args=1; shift ;;
    --vlm-shim-env) vlm_env=${2?--vlm-shim-env needs NAME=VALUE settings}; shift ;;
    --no-vlm-vit) vlm_vit=0 ;;
    --vlm-sim-time-scale) vlm_sim_scale=${2:?--vlm-sim-time-scale needs a number}; shift ;;
    --no-vlm) vlm=0 ;;
    --vlm-only) text=0 ;;
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
[ "$text" = 1 ] || [ "$vlm" = 1 ] || die "--no-vlm with --vlm-only: nothing to run"
number='^[0-9]+([.][0-9]+)?$'
[[ $time_scale =~ $number ]] || die "--time-scale '$time_scale': expected a number like 5 or 0.5"
for dp in $dps; do [[ $dp =~ ^[1-9][0-9]*$ ]] || die "--dp '$dps': expected sizes like \"4 8 16\""; done
if [ "$vlm" = 1 ]; then
  case $vlm_layout in
    internvl) default_model=internvl2-8b default_args="--pack-tokens 32768 --tile-size 16" ;;
    qwen2vl) default_model=qwen2-vl-7b default_args="--pack-tokens 8192 --max-side 32" ;;
    qwen3vl) default_model=qwen3-vl-8b default_args="--pack-tokens 8192 --max-side 32" ;;
    *) die "--vlm-layout '$vlm_layout': expected internvl, qwen2vl or qwen3vl" ;;
  esac
  : "${vlm_model:=$default_model}"
  [ "$set_vlm_args" = 1 ] || vlm_args=$default_args
  vlm_warmup_last=${vlm_warmup#*-}
  [[ $vlm_steps =~ ^[0-9]+$ ]] && [ "$vlm_steps" -gt "$vlm_warmup_last" ] ||
    die "--vlm-steps '$vlm_steps': expected a number above the warm-up's last step ($vlm_warmup_last)"
  [[ $vlm_scale =~ $number ]] || die "--vlm-time-scale '$vlm_scale': expected a number like 0.25"
  [[ $vlm_sim_scale =~ $number ]] ||
    die "--vlm-sim-time-scale '$vlm_sim_scale': expected a number like 1 or 0.25"
  [ -n "${vlm_dps// }" ] || die "--vlm-dp '': expected sizes like \"8 16 32\""
  for dp in $vlm_dps; do
    [[ $dp =~ ^[1-9][0-9]*$ ]] || die "--vlm-dp '$vlm_dps': expected sizes like \"8 16 32\""
  done
  read -ra vlm_argv <<< "$vlm_args"
  read -ra vlm_envv <<< "$vlm_env"
  for kv in "${vlm_envv[@]}"; do
    [[ $kv =~ ^DPSHIM_[A-Z_]+=. ]] ||
      die "--vlm-shim-env '$kv': expected DPSHIM_NAME=VALUE"
  done
fi

# The shim's logs need an absolute path (the ranks' working directory is
# mpirun's, but a relative --out would be joined to $PWD twice).
mkdir -p "$out" || die "--out '$out': cannot create it"
out=$(cd "$out" && pwd)

echo "== set-up"
tools/deps.sh
[ -d build/meson-private ] || meson setup build >/dev/null
ninja -C build >/dev/null

if [ -n "$hosts" ]; then
  case $hosts in 2|3|4) ;; *) die "--hosts '$hosts': expected 2, 3 or 4" ;; esac
  echo "== across $hosts hosts x 4 ranks (network namespaces, TCP)"
  /usr/bin/python3 tools/multihost/figures.py "$hosts" 4 build $link_rate \
    --calibration "$out/hosts_calibration_runs.json" | tee "$out/hosts.txt"
  echo "== the simulator against these runs (two-level network)"
  # Exit 1 only says the fit is not within 5 %: the table is the result.
  build/tools/sim/dpshim-sim --calibrate "$out/hosts_calibration_runs.json" |
    tee "$out/hosts_calibration.txt" ||
    echo "(dpshim-sim --calibrate: exit status $?, see above)"
  echo "wrote $out/hosts.txt, hosts_calibration.txt"
  exit 0
fi

if [ "$vlm" = 1 ]; then
  # vlmtrain parses before MPI starts: a bad preset or data option is named
  # here, in vlmtrain's words, before any run (--steps 0 is the one error
  # expected when all the others are good).
  msg=$(build/tools/vlmtrain/vlmtrain --layout "$vlm_layout" --model "$vlm_model" \
        "${vlm_argv[@]}" --steps 0 2>&1 | head -1) || true
  case $msg in
    "vlmtrain: --steps: "*) ;;
    "vlmtrain: --model: "*) die "--vlm-model '$vlm_model': no such preset (tiny, internvl2-8b, qwen2-vl-7b, qwen2.5-vl-7b, qwen3-vl-8b)" ;;
    *) die "--vlm-args '$vlm_args': ${msg#vlmtrain: }" ;;
  esac
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sleeping ranks share this machine's cores: oversubscribe, and let idle
# ranks yield the CPU instead of spinning.
mpirun=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
# DP 64 only when the machine holds it: 64 processes need memory, not cores.
fits() { [ "$1" -le 32 ] || [ "$(awk '/MemAvailable/ {print $2}' /proc/meminfo)" -gt $(( $1 * 150000 )) ]; }

# What a trainer runs with: libdpshim.so, then the adapters of the
# reference loader (reftrain) or of the VLM loader and encoder (vlmtrain).
preload() {
  local b=$PWD/build
  case ${1##*/} in
    reftrain) echo "$b/shim/libdpshim.so:$b/tools/packload/libdpshim_packload.so" ;;
    *) echo "$b/shim/libdpshim.so:$b/tools/vlmload/libdpshim_vlmload.so:$b/tools/vit/libdpshim_vit.so" ;;
  esac
}

# One run of a section: base path, DP size, variant, warm-up, trainer and its
# arguments. Without the shim for none; with it, DPSHIM_SOLVER=variant, for
# SOLVER+vit DPSHIM_SOLVER=SOLVER and DPSHIM_VIT_BALANCE=1, for SOLVER@STEP
# DPSHIM_SOLVER=SOLVER and DPSHIM_STEP=STEP, and for SOLVER:RATIO
# DPSHIM_SOLVER=SOLVER and DPSHIM_TRIGGER_THRESHOLD=RATIO.
run() {
  local base=$1 dp=$2 variant=$3 warm=$4 env=() solver=${3%@*}
  solver=${solver%:*}
  shift 4
  if [ "$variant" != none ]; then
    env=(-x LD_PRELOAD="$(preload "$1")" -x DPSHIM_VLM_BALANCE=1
         -x DPSHIM_WARMUP_ITERS="$warm" -x DPSHIM_SOLVER="${solver%+vit}"
         -x DPSHIM_LOG="$base.log.jsonl")
    [[ $solver != *+vit ]] || env+=(-x DPSHIM_VIT_BALANCE=1)
    [[ $variant != *@* ]] || env+=(-x DPSHIM_STEP="${variant#*@}")
    [[ $variant != *:* ]] || env+=(-x DPSHIM_TRIGGER_THRESHOLD="${variant#*:}")
    for kv in "${shim_env[@]}"; do env+=(-x "$kv"); done
  fi
  "${mpirun[@]}" -np "$dp" "${env[@]}" "$@" --stats-out "$base.stats.jsonl" \
    > "$base.json" 2> "$base.err" ||
    { cat "$base.err" >&2; die "${1##*/} failed at DP $dp ($variant)"; }
}

# Every size times every variant (none, seed, default[, default+vit]):
# label, runs dir, warm-up, sizes, variants, then the trainer and its
# arguments.
runs() {
  local label=$1 dir=$2 warm=$3 sizes=($4) variants=($5) n=0 start=$SECONDS
  shift 5
  local total=$(( ${#sizes[@]} * ${#variants[@]} ))
  for dp in "${sizes[@]}"; do
    for variant in "${variants[@]}"; do
      n=$(( n + 1 ))
      printf '[%2d/%d] %s DP %-3s %-11s' "$n" "$total" "$label" "$dp" "$variant"
      t0=$SECONDS
      run "$dir/dp${dp}_$variant" "$dp" "$variant" "$warm" "$@"
      printf ' %4ds   (%ds so far)\n' $(( SECONDS - t0 )) $(( SECONDS - start ))
    done
  done
}

shim_env=()
if [ "$text" = 1 ]; then
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
  sizes=()
  for dp in $dps; do
    if fits "$dp"; then sizes+=("$dp"); else echo "(DP $dp skipped: not enough memory)"; fi
  done
  echo "== runs: the tiny text model (reftrain), DP ${sizes[*]} x {none, seed, default}, $steps steps each (warm-up $warmup)"
  reftrain=(build/tools/reftrain/reftrain
    --mode emulate "${data[@]}" --seed 7 --steps "$steps" --time-scale "$time_scale")
  runs tiny "$out/runs" "$warmup" "${sizes[*]}" "none seed default" "${reftrain[@]}"
  handoff_dp=""
  if [ "$handoff_row" = 1 ] && [ ${#sizes[@]} -gt 0 ]; then
    handoff_dp=$(printf '%s\n' "${sizes[@]}" | sort -n | tail -1)
    echo "== one more: DP $handoff_dp with hand-off steps (DPSHIM_STEP=handoff: the cost fitted from step times, as for a gradient sync outside MPI)"
    runs tiny "$out/runs" "$warmup" "$handoff_dp" default@handoff "${reftrain[@]}"
  fi
fi

rm -rf "$out/vlm-runs"
if [ "$vlm" = 1 ]; then
  mkdir -p "$out/vlm-runs"
  # default:0.2 is default at the original's fixed trigger, beside auto's.
  vlm_variants="none seed default default:0.2"
  [ "$vlm_vit" = 0 ] || vlm_variants+=" default+vit"
  echo "== runs: VLM, $vlm_layout layout, $vlm_model preset ($vlm_args), DP $vlm_dps x {${vlm_variants// /, }}, $vlm_steps steps each (warm-up $vlm_warmup, time scale $vlm_scale)"
  vlm_start=$SECONDS
  shim_env=("${vlm_envv[@]}")
  runs vlm "$out/vlm-runs" "$vlm_warmup" "$vlm_dps" "$vlm_variants" \
    build/tools/vlmtrain/vlmtrain \
    --layout "$vlm_layout" --model "$vlm_model" --seed 7 --steps "$vlm_steps" \
    --time-scale "$vlm_scale" "${vlm_argv[@]}"
  vlm_wall=$(( SECONDS - vlm_start ))

  # The simulator on the same layout, preset (its TP), seed, warm-up and
  # measured steps, at DP 4 to 4096: vlmtrain's --pack-tokens and --mix and
  # the shim's thresholds and caps from --vlm-shim-env carry over; its other
  # data options do not (the simulator draws with vlmload's defaults: 448-px
  # tiles, image sides up to 64 patches).
  sim_args=(--layout "$vlm_layout" --model "$vlm_model" --tp model --seed 7
            --warmup-last "$vlm_warmup_last"
            --steps $(( vlm_steps - vlm_warmup_last ))
            --time-scale "$vlm_sim_scale")
  [ "$vlm_vit" = 0 ] || sim_args+=(--vit-balance)
  for i in "${!vlm_argv[@]}"; do
    [ "${vlm_argv[$i]}" != --pack-tokens ] || sim_args+=(--pack-tokens "${vlm_argv[$((i + 1))]:-}")
    [ "${vlm_argv[$i]}" != --mix ] || sim_args+=(--mix "${vlm_argv[$((i + 1))]:-}")
  done
  for kv in "${vlm_envv[@]}"; do
    case ${kv%%=*} in
      DPSHIM_TRIGGER_THRESHOLD) sim_args+=(--threshold "${kv#*=}") ;;
      DPSHIM_MAX_LEN_RATIO) sim_args+=(--cap-ratio "${kv#*=}") ;;
      DPSHIM_VIT_TRIGGER_THRESHOLD) sim_args+=(--vit-threshold "${kv#*=}") ;;
      DPSHIM_VIT_MAX_PATCH_RATIO) sim_args+=(--vit-cap-ratio "${kv#*=}") ;;
    esac
  done
  echo "== the simulator on the VLM workload, DP 4 to 4096 (dpshim-sim ${sim_args[*]})"
  sim_start=$SECONDS
  build/tools/sim/dpshim-sim "${sim_args[@]}" --json "$out/vlm-runs/sim.json" \
    --png "$out/vlm_sim_tgs_vs_dp.png" 2> "$out/vlm_sim_summary.txt" > /dev/null ||
    { cat "$out/vlm_sim_summary.txt" >&2; die "dpshim-sim failed on the VLM workload (${sim_args[*]})"; }
  echo "   ($(( SECONDS - sim_start )) s; its summary: $out/vlm_sim_summary.txt)"
  # The encoder-heavy mix beside it (where an encoder balance can win at
  # all), unless the runs drew that mix already.
  heavy_args=()
  if [[ " ${sim_args[*]} " != *" --mix encoder-heavy "* ]]; then
    heavy_args=("${sim_args[@]}" --mix encoder-heavy)
    echo "== the simulator on the encoder-heavy mix (dpshim-sim ${heavy_args[*]})"
    build/tools/sim/dpshim-sim "${heavy_args[@]}" \
      --json "$out/vlm-runs/sim_encoder_heavy.json" \
      2> "$out/vlm_sim_heavy_summary.txt" > /dev/null ||
      { cat "$out/vlm_sim_heavy_summary.txt" >&2; die "dpshim-sim failed on the encoder-heavy mix (${heavy_args[*]})"; }
  fi

  python3 - "$out/vlm-runs/setup.json" "$vlm_layout" "$vlm_model" "$vlm_steps" \
    "$vlm_warmup" "$vlm_scale" "$vlm_wall" "$vlm_env" "$vlm_variants" \
    "${sim_args[*]}" "${heavy_args[*]}" "${vlm_argv[@]}" <<'PY'
import json, sys
path, layout, model, steps, warmup, scale, wall, env, variants, sim, heavy, \
    *args = sys.argv[1:]
json.dump({"layout": layout, "model": model, "seed": 7, "steps": int(steps),
           "warmup": warmup, "warmup_last": int(warmup.split("-")[-1]),
           "time_scale": float(scale), "args": args, "tp": 1,
           "shim_env": env.split(), "wall_s": int(wall),
           "variants": variants.split(), "sim_args": sim.split(),
           "sim_heavy_args": heavy.split()},
          open(path, "w"), indent=1)
PY
fi

echo "== results"
if [ "$text" = 1 ]; then
  python3 tools/demo_report.py "$out" --warmup-last "$warmup_last" \
    --steps "$steps" --profile "$profile" ${lengths:+--lengths "$lengths"} \
    --seed 7 --time-scale "$time_scale" ${handoff_dp:+--handoff-dp "$handoff_dp"}
else
  python3 tools/demo_report.py "$out" --vlm-only
  exit 0
fi

echo "== the simulator against these runs (DP <= 32), then at scale"
# The calibration replays the measured runs at DP 4-32: those of the demo
# (the text runs: the simulator does not model the VLM workloads, nor steps
# told by hand-offs, the default@handoff row's).
python3 - "$out/results.json" "$out/calibration_runs.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r.pop("vlm", None)
r.pop("vlm_sim", None)
r.pop("handoff", None)
r["runs"] = [x for x in r["runs"] if x["dp"] <= 32 and "@" not in x["variant"]]
json.dump(r, open(sys.argv[2], "w"), indent=1)
PY
# Exit 1 only says the fit is not within 5 %: the table is the result.
build/tools/sim/dpshim-sim --calibrate "$out/calibration_runs.json" |
  tee "$out/calibration.txt" ||
  echo "(dpshim-sim --calibrate: exit status $?, see above)"
build/tools/sim/dpshim-sim --profile "$profile" ${lengths:+--lengths "$lengths"} \
  --time-scale "$time_scale" --seed 7 --warmup-last "$warmup_last" \
  --json "$out/sim.json" \
  --png "$out/sim_tgs_vs_dp.png" 2> "$out/sim_summary.txt" > /dev/null
cat "$out/sim_summary.txt"
echo "wrote $out/calibration.txt, sim.json, sim_tgs_vs_dp.png"
