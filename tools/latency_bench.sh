#!/usr/bin/env bash
# What the shim costs a trainer's small MPI calls: dpshim-latency-bench run
# without the shim and with it preloaded (balancing on), in interleaved
# pairs, so that drift on a busy machine hits both alike. Per metric it
# prints the median over pairs of shim/plain, and the thread level MPI gave
# each variant. Builds nothing:
#
#   ninja -C build tools/dpshim-latency-bench shim/libdpshim.so
#   tools/latency_bench.sh [--build DIR] [--ranks N] [--rounds R]
#                          [--iters N] [--warmup N]
set -euo pipefail

usage() {
  sed -n '2,10s/^# \{0,1\}//p' "$0"
  echo "defaults: --build build --ranks 2 --rounds 7; --iters, --warmup:"
  echo "the bench's own (20000, 1000)"
}

build=build ranks=2 rounds=7 bench_args=()
while (($#)); do
  case "$1" in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --iters | --warmup) bench_args+=("$1" "${2:?$1 needs a number}"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "latency_bench.sh: unknown option '$1'; try --help" >&2; exit 2 ;;
  esac
done
[[ $ranks =~ ^[0-9]+$ && $ranks -ge 2 ]] || { echo "latency_bench.sh: --ranks: an integer >= 2" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 ]] || { echo "latency_bench.sh: --rounds: an integer >= 1" >&2; exit 2; }

# Absolute, as every rank resolves LD_PRELOAD on its own.
[[ -d $build ]] || { echo "latency_bench.sh: --build: no directory $build" >&2; exit 2; }
build=$(cd "$build" && pwd)
bench=$build/tools/dpshim-latency-bench
shim=$build/shim/libdpshim.so
for f in "$bench" "$shim"; do
  [[ -e $f ]] || { echo "latency_bench.sh: no $f; build it first:" \
    "ninja -C $build tools/dpshim-latency-bench shim/libdpshim.so" >&2; exit 2; }
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Bound to cores: unbound ranks sharing cores land in a different placement
# each run, and small-message latency swings 1.5x with it, whichever variant.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to core:overload-allowed
  -np "$ranks")

results=$(mktemp) log=$(mktemp)
trap 'rm -f "$results" "$log"' EXIT

# One run of a variant ("plain" or "shim"), appended to $results. The shim's
# own lines (its summary) go to $log, shown only if the run fails.
run() {
  local out
  if [[ $1 == plain ]]; then
    out=$(env -u LD_PRELOAD -u DPSHIM_VLM_BALANCE \
      "${mpi[@]}" "$bench" "${bench_args[@]}" 2>"$log") || true
  else
    out=$(LD_PRELOAD=$shim DPSHIM_VLM_BALANCE=1 "${mpi[@]}" \
      -x LD_PRELOAD -x DPSHIM_VLM_BALANCE "$bench" "${bench_args[@]}" 2>"$log") || true
  fi
  out=$(grep '^{"allreduce_8_us"' <<<"$out") || {
    echo "latency_bench.sh: the $1 run printed no result:" >&2
    cat "$log" >&2
    exit 1
  }
  printf '%s %s\n' "$1" "$out" >>"$results"
}

# The order alternates (plain-shim, shim-plain, ...), so that whatever favours
# the first or the second run of a pair favours neither variant.
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then run plain; run shim; else run shim; run plain; fi
done

python3 - "$results" "$ranks" "$rounds" <<'EOF'
import json, statistics, sys

path, ranks, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {"plain": [], "shim": []}
for line in open(path):
    variant, _, js = line.partition(" ")
    runs[variant].append(json.loads(js))

# MPI_THREAD_* values as Open MPI and MPICH number them.
LEVELS = {0: "SINGLE", 1: "FUNNELED", 2: "SERIALIZED", 3: "MULTIPLE"}
metrics = ["allreduce_8_us", "allreduce_1k_us", "pingpong_8_us"]
print(f"dpshim-latency-bench: {ranks} ranks, {rounds} pairs (plain, shim)")
print(f"{'metric':<18}{'plain us':>10}{'shim us':>10}{'shim/plain':>12}")
for m in metrics:
    plain = [r[m] for r in runs["plain"]]
    shim = [r[m] for r in runs["shim"]]
    ratio = statistics.median(s / p for p, s in zip(plain, shim))
    print(f"{m:<18}{statistics.median(plain):>10.3f}"
          f"{statistics.median(shim):>10.3f}{ratio:>12.3f}")
print("medians over pairs; shim/plain is the median of per-pair ratios")
for v in ("plain", "shim"):
    seen = sorted({r["thread_level"] for r in runs[v]})
    names = ", ".join(f"{l} ({LEVELS.get(l, '?')})" for l in seen)
    print(f"thread level, {v}: {names}")
EOF
