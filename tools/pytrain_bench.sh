#!/usr/bin/env bash
# tools/pytrain/train.py with its gradients through PyTorch DDP over Gloo
# (a sync the shim cannot see), without the shim and through dpshim-run's
# start-up hook (no dpshim line in the trainer), alternated: steps/s and
# the share of time in the gradient all-reduce (train.py's wait_share), the
# median of the runs of each, and their ratio. Prints figures, asserts
# nothing; the machine is noisy, so the runs alternate.
#
#   tools/pytrain_bench.sh [--build DIR] [--ranks N] [--runs N] [--steps N]
#                          [--micro-batches M] [-- TRAIN.PY ARGS...]
#
# Defaults: build, 4 ranks, 4 runs of each, 30 steps, 1 micro-batch; the
# shim with --use-vlm-dp-balance, warm-up 2-6. Builds nothing:
#   ninja -C build shim/libdpshim.so tools/run/dpshim-run
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "pytrain_bench.sh: $*" >&2; exit 2; }

build=build ranks=4 runs=4 steps=30 micro=1 extra=()
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a directory}; shift ;;
    --ranks) ranks=${2:?--ranks needs a number}; shift ;;
    --runs) runs=${2:?--runs needs a number}; shift ;;
    --steps) steps=${2:?--steps needs a number}; shift ;;
    --micro-batches) micro=${2:?--micro-batches needs a number}; shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
for v in "$ranks" "$runs" "$steps" "$micro"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v': expected a number >= 1"
done
run=$build/tools/run/dpshim-run shim=$build/shim/libdpshim.so
for f in "$run" "$shim"; do [[ -e $f ]] || die "no $f: build it first"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
        -np "$ranks")
train=(/usr/bin/python3 tools/pytrain/train.py --sync gloo --steps "$steps"
       --micro-batches "$micro" "${extra[@]}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for ((k = 0; k < runs; k++)); do
  echo "run $((k + 1))/$runs" >&2
  "${mpirun[@]}" "${train[@]}" > "$tmp/none.$k" 2> "$tmp/none.$k.err" ||
    { cat "$tmp/none.$k.err" >&2; die "the run without the shim failed"; }
  "$run" --lib "$shim" --use-vlm-dp-balance --vlm-dp-balance-warmup-iters 2 3 4 5 6 \
    --micro-batches "$micro" -- "${mpirun[@]}" "${train[@]}" \
    > "$tmp/shim.$k" 2> "$tmp/shim.$k.err" ||
    { cat "$tmp/shim.$k.err" >&2; die "the run with the shim failed"; }
done

python3 - "$tmp" "$runs" "$ranks" "$steps" "$micro" <<'PY'
import json, re, statistics, sys
tmp, runs, ranks, steps, micro = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]

def last(path):
    """train.py's final JSON object (rank 0's)."""
    found = None
    for line in open(path):
        k = line.find('{"steps_per_s"')
        if k >= 0:
            found = json.loads(line[k:])
    return found

def applied(path):
    m = re.search(r"hand-offs balanced: (\d+) applied", open(path).read())
    return int(m.group(1)) if m else None

res = {v: [last("%s/%s.%d" % (tmp, v, k)) for k in range(runs)]
       for v in ("none", "shim")}
med = {v: (statistics.median(r["steps_per_s"] for r in res[v]),
           statistics.median(r["wait_share"] for r in res[v]))
       for v in res}
plans = [applied("%s/shim.%d.err" % (tmp, k)) for k in range(runs)]
print("pytrain --sync gloo (DDP over Gloo), %s ranks, %s steps, %s "
      "micro-batch(es) a step; medians of %d alternating runs each"
      % (ranks, steps, micro, runs))
print("  %-22s %10s %22s" % ("", "steps/s", "gradient all-reduce"))
for v, name in (("none", "without the shim"), ("shim", "dpshim-run (hook)")):
    print("  %-22s %10.3f %21.1f%%" % (name, med[v][0], 100 * med[v][1]))
print("  shim / none: steps/s x%.3f, all-reduce share %+.1f points; plans "
      "applied per run: %s" % (med["shim"][0] / med["none"][0],
                               100 * (med["shim"][1] - med["none"][1]), plans))
PY
