#!/usr/bin/env bash
# What applying a plan costs in real runs (issue 23): vlmtrain's 32K-token
# packs (internvl2-8b, qwen2-vl-7b, qwen3-vl-8b; time scale 0.25, warm-up
# 2-6, `default` at a fixed trigger of 0.02 so that most hand-offs apply a
# plan) under each build given, the builds alternating within each rep.
# Prints per preset and build, after the warm-up: the slowest rank's shim
# time per hand-off that applied a plan, the MB moved between ranks per
# applied hand-off, and that time against the first build's; and where the
# build's summary says them (since the repack that fills holes), the means
# over ranks per applied hand-off of the time in the exchange and in the
# repack, the MB the repack copied and those shifting would have copied
# (since the exchange from batch to batch: and copying in what arrived).
# Prints figures; asserts nothing.
# Builds nothing:
#
#   ninja -C DIR shim/libdpshim.so tools/vlmtrain/vlmtrain \
#     tools/vlmload/libdpshim_vlmload.so tools/vit/libdpshim_vit.so
#   tools/repack_bench.sh [--build DIR]... [--models "..."] [--dp N]
#                         [--steps N] [--reps N]
#
# Two --build directories compare two builds (e.g. a worktree of an older
# commit); without any, build/. About 30 s a run at DP 8 here (2 cores).
set -euo pipefail

die() { echo "repack_bench.sh: $*" >&2; exit 2; }
builds=() models="internvl2-8b qwen2-vl-7b qwen3-vl-8b" dp=8 steps=12 reps=1
while (($#)); do
  case $1 in
    --build) builds+=("${2:?--build needs a directory}"); shift ;;
    --models) models=${2:?--models needs preset names}; shift ;;
    --dp) dp=${2:?--dp needs a number}; shift ;;
    --steps) steps=${2:?--steps needs a number}; shift ;;
    --reps) reps=${2:?--reps needs a number}; shift ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
((${#builds[@]})) || builds=(build)
for n in "$dp" "$steps" "$reps"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "'$n': expected a number >= 1"
done
((steps > 7)) || die "--steps $steps: expected more than the warm-up (7)"
for i in "${!builds[@]}"; do
  [[ -d ${builds[$i]} ]] || die "--build: no directory ${builds[$i]}"
  b=$(cd "${builds[$i]}" && pwd) builds[$i]=$b
  for f in shim/libdpshim.so tools/vlmtrain/vlmtrain \
           tools/vlmload/libdpshim_vlmload.so tools/vit/libdpshim_vit.so; do
    [[ -e $b/$f ]] || die "no $b/$f; build it first (see --help)"
  done
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

layout_of() {
  case $1 in internvl*) echo internvl ;; qwen2*) echo qwen2vl ;; *) echo qwen3vl ;; esac
}
for rep in $(seq "$reps"); do
  for model in $models; do
    for i in "${!builds[@]}"; do
      b=${builds[$i]}
      mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np "$dp" \
        -x LD_PRELOAD="$b/shim/libdpshim.so:$b/tools/vlmload/libdpshim_vlmload.so:$b/tools/vit/libdpshim_vit.so" \
        -x DPSHIM_VLM_BALANCE=1 -x DPSHIM_WARMUP_ITERS=2-6 \
        -x DPSHIM_TRIGGER_THRESHOLD=0.02 -x DPSHIM_LOG="$out/$model.$i.$rep.jsonl" \
        "$b/tools/vlmtrain/vlmtrain" --layout "$(layout_of "$model")" \
        --model "$model" --tp 1 --steps "$steps" --time-scale 0.25 \
        --pack-tokens 32768 >/dev/null 2>"$out/$model.$i.$rep.err" ||
        { cat "$out/$model.$i.$rep.err" >&2; die "$model under ${builds[$i]} failed"; }
    done
  done
done

python3 - "$out" "$dp" "$models" "${builds[@]}" <<'PY'
import glob, json, re, sys
out, dp, models, builds = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
def steps(model, i):
    for path in sorted(glob.glob(f"{out}/{model}.{i}.*.jsonl")):
        for line in open(path):
            e = json.loads(line)
            if e["step"] > 6:
                yield e
APPLY = re.compile(r"applying a plan: ([0-9.]+) ms in the exchange and "
                   r"([0-9.]+) ms in the repack, which copied ([0-9.]+) MB "
                   r"where shifting what stays (?:and copying in what arrived )?"
                   r"would have copied ([0-9.]+) MB")
def split(model, i):
    runs = [APPLY.search(open(p).read())
            for p in sorted(glob.glob(f"{out}/{model}.{i}.*.err"))]
    runs = [[float(x) for x in m.groups()] for m in runs if m]
    return [sum(col) / len(col) for col in zip(*runs)] if runs else None
def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")
print(f"repack_bench: DP {dp}, 32K-token packs, trigger 0.02; per applied "
      "hand-off after the warm-up")
print(f"{'preset':<14}{'build':<6}{'applied':>9}{'shim ms':>9}{'vs first':>9}"
      f"{'MB moved':>10}{'exch ms':>9}{'repack ms':>10}{'copied MB':>10}"
      f"{'shift MB':>9}")
for model in models:
    first = None
    for i, b in enumerate(builds):
        lines = list(steps(model, i))
        done = [e for e in lines if e.get("decision") == "apply"]
        ms = mean([max(e["shim_ms"]) for e in done])
        first = ms if first is None else first
        row = (f"{model:<14}{i:<6}{len(done):>5}/{len(lines):<3}{ms:>9.1f}"
               f"{first / ms if ms else float('nan'):>8.1f}x"
               f"{mean([e.get('bytes_moved', 0) / 1e6 for e in done]):>10.1f}")
        s = split(model, i)
        row += (f"{s[0]:>9.1f}{s[1]:>10.1f}{s[2]:>10.2f}{s[3]:>9.2f}" if s
                else f"{'-':>9}{'-':>10}{'-':>10}{'-':>9}")
        print(row)
print("shim ms: the slowest rank's; exch, repack, copied, shift: means over "
      "ranks (the summary's)")
for i, b in enumerate(builds):
    print(f"build {i}: {b}")
PY
