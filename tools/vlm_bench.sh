#!/usr/bin/env bash
# The VLM layouts under a realistic model preset: vlmtrain without the shim,
# with the original's solver (seed) and with dpshim's (default), on the same
# data, in one run; prints TGS and its gain, and from DPSHIM_LOG the time in
# the sync collective (straggler wait) and the bytes moved per balanced
# step. The shim's run with DPSHIM_SOLVER=none (gather and solve, move
# nothing) gives the wait before balancing; the fit's step-time prediction
# error, with and without the vision terms, comes from its summary. With
# --vit, seed+vit and default+vit add the ViT-level balance
# (DPSHIM_VIT_BALANCE=1, its cost fitted in the warm-up). Every variant
# reports the encoder's straggler wait (per step after the warm-up, the
# slowest rank's emulated encoder time less the mean, from vlmtrain's
# --stats-out); the ViT variants their bytes moved per step and the ViT
# fit's error. With --vit --ship, default+vit+ship adds default+vit with
# vlmtrain --vit-ship (each micro-batch's encoder calls shipped at its
# hand-off: dpshim_encoder_ship). The shim's variants balance inline
# (DPSHIM_AHEAD=0); --ahead adds default@ahead, dpshim's solver balancing
# each batch ahead on the shim's own thread (DPSHIM_AHEAD=1), and
# --ahead-only runs none and default@ahead alone. Builds nothing:
#
#   ninja -C build tools/vlmtrain/vlmtrain tools/vlmload/libdpshim_vlmload.so \
#     tools/vit/libdpshim_vit.so
#   tools/vlm_bench.sh [--build DIR] [--layout L] [--model M] [--ranks N]
#                      [--tp N] [--steps N] [--time-scale X] [--threshold X]
#                      [--vit [--ship]] [--ahead | --ahead-only] [--mix M]
#                      [-- vlmtrain args]
# --threshold sets DPSHIM_TRIGGER_THRESHOLD (the original's 0.2 by default);
# --mix is vlmtrain's (default, or encoder-heavy).
set -euo pipefail

build=build layout=qwen2vl model=qwen2-vl-7b ranks=8 tp=1 steps=16
scale=0.2 threshold=0.2 vit=0 ship=0 ahead=0 mix=default extra=()
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --layout) layout=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --tp) tp=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --time-scale) scale=$2; shift 2 ;;
    --threshold) threshold=$2; shift 2 ;;
    --mix) mix=$2; shift 2 ;;
    --vit) vit=1; shift ;;
    --ship) ship=1; shift ;;
    --ahead) ahead=1; shift ;;
    --ahead-only) ahead=2; shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,29s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "vlm_bench.sh: unknown option '$1'; try --help" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
train=$build/tools/vlmtrain/vlmtrain shim=$build/shim/libdpshim.so
adapters=$build/tools/vlmload/libdpshim_vlmload.so:$build/tools/vit/libdpshim_vit.so
for f in "$train" "$shim" ${adapters//:/ }; do
  [[ -e $f ]] || { echo "vlm_bench.sh: no $f; build it first" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(--layout "$layout" --model "$model" --tp "$tp" --steps "$steps" --mix "$mix"
      --time-scale "$scale" --pack-tokens 8192 --max-side 32 "${extra[@]}")
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
     -np "$ranks")

# variant, solver ("" without the shim), ViT balance (0/1), vlmtrain
# arguments of the variant's own; inline unless the variant is @ahead
run() {
  local env=()
  if [[ -n $2 ]]; then
    env=(-x LD_PRELOAD="$shim:$adapters" -x DPSHIM_VLM_BALANCE=1 -x DPSHIM_SOLVER="$2"
         -x DPSHIM_TP_SIZE="$tp" -x DPSHIM_WARMUP_ITERS=2-6
         -x DPSHIM_TRIGGER_THRESHOLD="$threshold"
         -x DPSHIM_VIT_BALANCE="${3:-0}" -x MALLOC_PERTURB_=0
         -x DPSHIM_AHEAD="$([[ $1 == *@ahead ]] && echo 1 || echo 0)"
         -x DPSHIM_LOG="$out/$1.jsonl")
  fi
  "${mpi[@]}" "${env[@]}" "$train" "${args[@]}" "${@:4}" \
    --stats-out "$out/$1.stats" 2>"$out/$1.err" |
    grep '^{' >"$out/$1.json" || { cat "$out/$1.err" >&2; exit 1; }
}
run none ""
run measured none
variants="none"
if ((ahead < 2)); then
  run seed seed
  run default default
  variants="$variants seed default"
fi
if ((ahead)); then
  run default@ahead default
  variants="$variants default@ahead"
fi
if ((vit && ahead < 2)); then
  run seed+vit seed 1
  run default+vit default 1
  variants="$variants seed+vit default+vit"
  if ((ship)); then
    run default+vit+ship default 1 --vit-ship
    variants="$variants default+vit+ship"
  fi
fi

python3 - "$out" "$layout" "$model" "$ranks" "$tp" "$threshold" \
  "$steps" $variants <<'EOF'
import json, re, sys
out, layout, model, ranks, tp, threshold, steps = sys.argv[1:8]
variants, steps = sys.argv[8:], int(steps)
def result(v):
    return json.load(open(f"{out}/{v}.json"))
def log(v):
    try:
        return [json.loads(l) for l in open(f"{out}/{v}.jsonl")]
    except OSError:
        return []
def after_warmup(v):
    return [e for e in log(v) if e["step"] > 6]
def wait_share(v):
    lines = after_warmup(v)
    w = sum(sum(e["wait_ms"]) for e in lines)
    c = sum(sum(e["compute_ms"]) + sum(e["wait_ms"]) + sum(e["shim_ms"])
            for e in lines)
    return 100.0 * w / c if c else float("nan")
def mb_per_step(v, key=None):
    lines = after_warmup(v)
    moved = sum((e.get(key, {}) if key else e).get("bytes_moved", 0)
                for e in lines)
    return moved / max(1, len(lines)) / 1e6
def vit_wait_ms(v):
    lines = [json.loads(l) for l in open(f"{out}/{v}.stats")][6:]
    waits = [max(e["vit_emu_ms"]) - sum(e["vit_emu_ms"]) / len(e["vit_emu_ms"])
             for e in lines]
    return sum(waits) / max(1, len(waits))
base = result("none")
def plans(v):
    lines = after_warmup(v)
    return sum(e.get("decision") == "apply" for e in lines), len(lines)
def vit_fit_error(v):
    text = open(f"{out}/{v}.err").read()
    m = re.search(r"ViT fit \(\w+\): .*prediction error mean ([0-9.]+)%, max "
                  r"([0-9.]+)%", text)
    return m.groups() if m else None
def fit_errors(v):
    text = open(f"{out}/{v}.err").read()
    m = re.search(r"  fit \(\w+\): .*prediction error mean ([0-9.]+)%, max "
                  r"([0-9.]+)%(?: \(without the vision terms: mean ([0-9.]+)%, "
                  r"max ([0-9.]+)%\))?", text)
    return m.groups() if m else None
print(f"vlm_bench: {layout}, {model}, {ranks} ranks (tp {tp}), "
      f"trigger threshold {threshold}")
print(f"{'variant':<17}{'TGS':>10}{'gain':>8}{'step ms':>10}"
      f"{'sync wait':>11}{'MB/step':>9}{'applied':>9}{'ViT wait':>10}"
      f"{'ViT MB':>8}  digests")
keys = ("consumed_digest", "images_digest", "embeddings_digest",
        "vit_grad_digest")
same = lambda r: all(r.get(k) == base.get(k) for k in keys)
for v in variants:
    r = result(v)
    wait = wait_share("measured" if v == "none" else v)
    mb = 0.0 if v == "none" else mb_per_step(v)
    vit_mb = mb_per_step(v, "vit") if "+vit" in v else 0.0
    applied = "-" if v == "none" else "%d/%d" % plans(v)
    print(f"{v:<17}{r['tgs']:>10.1f}{100 * (r['tgs'] / base['tgs'] - 1):>7.1f}%"
          f"{r['step_ms_mean']:>10.1f}{wait:>10.1f}%{mb:>9.2f}{applied:>9}"
          f"{vit_wait_ms(v):>8.1f}ms{vit_mb:>8.2f}  "
          f"{'same' if same(r) else 'DIFFER'}")
print("sync wait: time in the gradient all-reduce over all ranks' step time, "
      "after the warm-up (none: the shim with DPSHIM_SOLVER=none)")
fit = fit_errors("default")
if fit:
    line = f"fit: step-time prediction error mean {fit[0]}%, max {fit[1]}%"
    if fit[2]:
        line += f"; without the vision terms mean {fit[2]}%, max {fit[3]}%"
    print(line + " (the same warm-up points)")
if "default+vit" in variants:
    fit = vit_fit_error("default+vit")
    print("ViT fit: per-call encoder time prediction error " +
          (f"mean {fit[0]}%, max {fit[1]}%" if fit else "(no fit)"))
print("ViT wait: per step after the warm-up, the slowest rank's emulated "
      "encoder time less the mean; ViT MB: the encoder's inputs, embeddings "
      "and embedding gradients moved per step")
EOF
