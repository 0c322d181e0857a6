#!/usr/bin/env bash
# What the shim costs a trainer's small MPI calls: dpshim-latency-bench run
# without the shim and with it preloaded (balancing on), in interleaved
# rounds, so that drift on a busy machine hits both alike. Per metric it
# prints the median over rounds of shim/plain, and the thread level MPI gave
# each variant. --with-off adds a third variant, "off": preloaded with
# balancing off (what the preload costs apart from the wrappers' work).
# --instructions instead counts, under valgrind's callgrind on one rank,
# the instructions the shim adds to each MPI_Allreduce: a figure that no
# noise moves. Builds nothing:
#
#   ninja -C build tools/dpshim-latency-bench shim/libdpshim.so
#   tools/latency_bench.sh [--build DIR] [--ranks N] [--rounds R]
#                          [--iters N] [--warmup N] [--with-off]
#   tools/latency_bench.sh [--build DIR] --instructions
set -euo pipefail

usage() {
  sed -n '2,15s/^# \{0,1\}//p' "$0"
  echo "defaults: --build build --ranks 2 --rounds 7; --iters, --warmup:"
  echo "the bench's own (20000, 1000)"
}

build=build ranks=2 rounds=7 bench_args=() variants=(plain shim) count=0
while (($#)); do
  case "$1" in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --with-off) variants+=(off); shift ;;
    --instructions) count=1; shift ;;
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

# Instructions of one run on one rank under callgrind, --iters $1, no
# warm-up; $2: plain or shim.
instructions() {
  local out=$results.cg preload=()
  [[ $2 == shim ]] && preload=(-x LD_PRELOAD="$shim" -x DPSHIM_VLM_BALANCE=1)
  env -u LD_PRELOAD mpirun --allow-run-as-root -np 1 "${preload[@]}" \
    valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$bench" --iters "$1" --warmup 0 >/dev/null 2>"$log" || {
    echo "latency_bench.sh: the $2 run under callgrind failed:" >&2
    cat "$log" >&2
    exit 1
  }
  awk '/^summary:/ {print $2}' "$out"
  rm -f "$out"
}

# Each run makes 2 * iters timed MPI_Allreduce calls (8 B and 1 KiB); the
# difference of two iteration counts leaves out MPI_Init and the rest, and
# the difference of the variants what the wrappers add per call.
if ((count)); then
  command -v valgrind >/dev/null || {
    echo "latency_bench.sh: --instructions needs valgrind (apt install valgrind)" >&2
    exit 2
  }
  lo=20000 hi=120000
  declare -A ir
  for v in plain shim; do
    for n in $lo $hi; do ir[$v$n]=$(instructions $n $v); done
  done
  python3 -c "
import sys
pl, ph, sl, sh, lo, hi = map(int, sys.argv[1:])
calls = 2 * (hi - lo)
plain, shim = (ph - pl) / calls, (sh - sl) / calls
print(f'instructions per MPI_Allreduce iteration, one rank: plain {plain:.1f}, '
      f'shim {shim:.1f}: the shim adds {shim - plain:.1f}')
" "${ir[plain$lo]}" "${ir[plain$hi]}" "${ir[shim$lo]}" "${ir[shim$hi]}" $lo $hi
  exit 0
fi

# One run of a variant ("plain", "shim" or "off"), appended to $results.
# The shim's own lines (its summary) go to $log, shown only if it fails.
run() {
  local out
  if [[ $1 == plain ]]; then
    out=$(env -u LD_PRELOAD -u DPSHIM_VLM_BALANCE \
      "${mpi[@]}" "$bench" "${bench_args[@]}" 2>"$log") || true
  else
    out=$(LD_PRELOAD=$shim DPSHIM_VLM_BALANCE=$([[ $1 == shim ]] && echo 1 || echo 0) \
      "${mpi[@]}" -x LD_PRELOAD -x DPSHIM_VLM_BALANCE "$bench" \
      "${bench_args[@]}" 2>"$log") || true
  fi
  out=$(grep '^{"allreduce_8_us"' <<<"$out") || {
    echo "latency_bench.sh: the $1 run printed no result:" >&2
    cat "$log" >&2
    exit 1
  }
  printf '%s %s\n' "$1" "$out" >>"$results"
}

# The order rotates from round to round (plain-shim, shim-plain, ...), so
# that whatever favours a place in the round favours no variant.
n=${#variants[@]}
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < n; k++)); do run "${variants[(r + k) % n]}"; done
done

python3 - "$results" "$ranks" "$rounds" <<'EOF'
import collections, json, statistics, sys

path, ranks, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
runs = collections.defaultdict(list)  # variant -> its runs, round by round
for line in open(path):
    variant, _, js = line.partition(" ")
    runs[variant].append(json.loads(js))
others = [v for v in ("shim", "off") if v in runs]
shown = ["plain"] + others

# MPI_THREAD_* values as Open MPI and MPICH number them.
LEVELS = {0: "SINGLE", 1: "FUNNELED", 2: "SERIALIZED", 3: "MULTIPLE"}
metrics = ["allreduce_8_us", "allreduce_1k_us", "pingpong_8_us"]
print(f"dpshim-latency-bench: {ranks} ranks, {rounds} rounds "
      f"({', '.join(shown)})")
print(f"{'metric':<18}" + "".join(f"{v + ' us':>10}" for v in shown)
      + "".join(f"{v + '/plain':>12}" for v in others))
for m in metrics:
    med = {v: statistics.median(r[m] for r in runs[v]) for v in shown}
    ratio = {v: statistics.median(o[m] / p[m] for p, o in
                                  zip(runs["plain"], runs[v])) for v in others}
    print(f"{m:<18}" + "".join(f"{med[v]:>10.3f}" for v in shown)
          + "".join(f"{ratio[v]:>12.3f}" for v in others))
print("medians over rounds; a ratio is the median of per-round ratios")
for v in shown:
    seen = sorted({r["thread_level"] for r in runs[v]})
    names = ", ".join(f"{l} ({LEVELS.get(l, '?')})" for l in seen)
    print(f"thread level, {v}: {names}")
EOF
