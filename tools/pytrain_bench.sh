#!/usr/bin/env bash
# tools/pytrain/train.py with its gradients through PyTorch DDP over Gloo
# (a sync the shim cannot see), without the shim ("none") and through
# dpshim-run's start-up hook (no dpshim line in the trainer) balancing each
# batch inline ("inline", DPSHIM_AHEAD=0) and ahead on the hook's thread
# ("ahead", the default DPSHIM_AHEAD=1), the three alternated: steps/s and
# the share of time in the gradient all-reduce (train.py's wait_share), the
# median of the runs of each, and their ratios to none; the shim's time on
# the trainer's path and beside it (its summary). Prints the table and
# writes it, headed by the command, the commit, the host, its cores and the
# date, to --out (default tools/pytrain/results.md). Asserts nothing; the
# machine is noisy, so the runs alternate.
#
#   tools/pytrain_bench.sh [--build DIR] [--ranks N] [--runs N] [--steps N]
#                          [--micro-batches M] [--out FILE]
#                          [-- TRAIN.PY ARGS...]
#
# Defaults: build, 4 ranks, 4 runs of each, 30 steps, 1 micro-batch; the
# shim with --use-vlm-dp-balance, warm-up 2-6. Builds nothing:
#   ninja -C build shim/libdpshim.so tools/run/dpshim-run
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "pytrain_bench.sh: $*" >&2; exit 2; }

build=build ranks=4 runs=4 steps=30 micro=1 out=tools/pytrain/results.md
extra=()
command="tools/pytrain_bench.sh $*"
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a directory}; shift ;;
    --ranks) ranks=${2:?--ranks needs a number}; shift ;;
    --runs) runs=${2:?--runs needs a number}; shift ;;
    --steps) steps=${2:?--steps needs a number}; shift ;;
    --micro-batches) micro=${2:?--micro-batches needs a number}; shift ;;
    --out) out=${2:?--out needs a file}; shift ;;
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

shim_run() { # VARIANT DPSHIM_AHEAD: through dpshim-run's hook
  DPSHIM_AHEAD=$2 "$run" --lib "$shim" --use-vlm-dp-balance \
    --vlm-dp-balance-warmup-iters 2 3 4 5 6 --micro-batches "$micro" -- \
    "${mpirun[@]}" -x DPSHIM_AHEAD "${train[@]}" \
    > "$tmp/$1.$k" 2> "$tmp/$1.$k.err" ||
    { cat "$tmp/$1.$k.err" >&2; die "the run '$1' failed"; }
}
for ((k = 0; k < runs; k++)); do
  echo "run $((k + 1))/$runs" >&2
  env -u DPSHIM_AHEAD "${mpirun[@]}" "${train[@]}" > "$tmp/none.$k" \
    2> "$tmp/none.$k.err" ||
    { cat "$tmp/none.$k.err" >&2; die "the run without the shim failed"; }
  shim_run inline 0
  shim_run ahead 1
done

{
  echo "# tools/pytrain/train.py: no shim, inline, ahead"
  echo
  echo "    $command"
  echo
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "$(git diff --quiet HEAD -- tools/python tools/pytrain 2>/dev/null ||
          echo '(tools/python or tools/pytrain changed since)'), host" \
       "$(uname -n), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
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

def on_path(path):
    """The shim's time on the trainer's path and its time balancing ahead
    beside the compute, shares of wall time (its summary), or None."""
    text = open(path).read()
    m = re.search(r"shim time (?:on the trainer's path )?([0-9.]+)%", text)
    a = re.search(r"balancing ahead, beside the compute: ([0-9.]+)%", text)
    return (float(m.group(1)) if m else None,
            float(a.group(1)) if a else 0.0)

def ahead(path):
    """(hand-offs ahead, seconds the trainer waited for them) from the
    hook's line at exit; (0, 0) without one."""
    m = re.search(r"python: (\d+) hand-offs balanced ahead .* waited "
                  r"([0-9.]+) s", open(path).read())
    return (int(m.group(1)), float(m.group(2))) if m else (0, 0.0)

variants = ("none", "inline", "ahead")
res = {v: [last("%s/%s.%d" % (tmp, v, k)) for k in range(runs)]
       for v in variants}
med = {v: (statistics.median(r["steps_per_s"] for r in res[v]),
           statistics.median(r["wait_share"] for r in res[v]))
       for v in variants}
print("pytrain --sync gloo (DDP over Gloo), %s ranks, %s steps, %s "
      "micro-batch(es) a step; medians of %d alternating runs each"
      % (ranks, steps, micro, runs))
print()
print("| | steps/s | / none | gradient all-reduce | shim on the trainer's "
      "path, beside it (% of wall) | plans applied per run | hand-offs "
      "ahead, trainer's wait for them (s) per run |")
print("|---|---:|---:|---:|---:|---|---|")
names = {"none": "none (no shim)", "inline": "inline (DPSHIM_AHEAD=0)",
         "ahead": "ahead (DPSHIM_AHEAD=1, default)"}
for v in variants:
    plans = ("-" if v == "none" else ", ".join(
        str(applied("%s/%s.%d.err" % (tmp, v, k))) for k in range(runs)))
    went = ("-" if v == "none" else ", ".join(
        "%d, %.3f" % ahead("%s/%s.%d.err" % (tmp, v, k))
        for k in range(runs)))
    shares = [on_path("%s/%s.%d.err" % (tmp, v, k)) for k in range(runs)]
    path = ("-" if v == "none" or None in (x for x, _ in shares) else
            "%.2f, %.2f" % (statistics.median(x for x, _ in shares),
                            statistics.median(y for _, y in shares)))
    print("| %s | %.3f | x%.3f | %.1f %% | %s | %s | %s |" % (
        names[v], med[v][0], med[v][0] / med["none"][0], 100 * med[v][1],
        path, plans, went))
print()
print("steps/s per run: " + "; ".join(
    "%s %s" % (v, " ".join("%.3f" % r["steps_per_s"] for r in res[v]))
    for v in variants))
PY
} | tee "$out.tmp"
mv "$out.tmp" "$out"
echo "pytrain_bench.sh: written to $out" >&2
