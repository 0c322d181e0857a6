#!/usr/bin/env bash
# Balancing ahead against inline, in real runs on this machine (issue 41's
# figures). Prints figures, asserts nothing; writes them, with the command,
# the commit, the machine and the date, to tools/results/ahead.md (--out
# FILE elsewhere). The variants of each rep run back to back, reps after
# reps; each figure is the median over reps of the per-rep value.
#
# reftrain  reftrain (sft, seed 7, --steps 24, warm-up 2-6, no
#           DPSHIM_COEFS) at --dp ranks: none (no shim); inline
#           (DPSHIM_AHEAD=0); ahead (the shim's own thread, DPSHIM_AHEAD=1,
#           the default); prefetch (reftrain's own loader thread,
#           --loader-thread --prefetch 1, DPSHIM_LOADER_THREAD=1). Gain:
#           the mean step time of steps 9-24 (after the fit, and the batch
#           balanced ahead before it) against none's.
# vlm       tools/vlm_bench.sh --ahead --threshold auto at --dp ranks:
#           qwen2-vl-7b with 8K packs, internvl2-8b with 32K packs; its
#           none / seed / default (inline) / default@ahead gains. vlmtrain
#           builds its packs ahead on a thread of the loader's own
#           (--prefetch 2, as a DataLoader's workers) in every variant:
#           else the shim's thread, calling the loader ahead, would take
#           the pack building off the step's path too, and default@ahead
#           would gain what any prefetching loader gains (InternVL 32K at
#           DP 4 here: +16.9 % against default's -0.4 %).
#
#   tools/ahead_bench.sh [--build DIR] [--reps N] [--dp N]
#                        [--only reftrain|vlm] [--out FILE]
#
# Defaults: build, 3 reps, DP 8. About 25 minutes here (2 cores, so DP 8
# measures oversubscription too: the variants' ratios are what to read).
# Builds nothing:
#   ninja -C build tools/reftrain/reftrain tools/packload/libdpshim_packload.so \
#     tools/vlmtrain/vlmtrain tools/vlmload/libdpshim_vlmload.so \
#     tools/vit/libdpshim_vit.so
set -euo pipefail
cd "$(dirname "$0")/.."

build=build reps=3 dp=8 only="" out=tools/results/ahead.md
cmdline="tools/ahead_bench.sh $*"
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --dp) dp=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,33s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "ahead_bench.sh: unknown option '$1'; try --help" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
for f in "$build/tools/reftrain/reftrain" "$build/shim/libdpshim.so" \
         "$build/tools/packload/libdpshim_packload.so"; do
  [[ -e $f ]] || { echo "ahead_bench.sh: no $f; build it first" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
     -np "$dp")
preload=$build/shim/libdpshim.so:$build/tools/packload/libdpshim_packload.so

# variant, rep: one reftrain run, its --stats-out kept
reftrain_run() {
  local env=() extra=()
  case $1 in
    inline) env=(-x DPSHIM_AHEAD=0) ;;
    ahead) env=(-x DPSHIM_AHEAD=1) ;;
    prefetch) env=(-x DPSHIM_LOADER_THREAD=1)
              extra=(--loader-thread --prefetch 1) ;;
  esac
  [[ $1 == none ]] || env+=(-x LD_PRELOAD="$preload" -x DPSHIM_VLM_BALANCE=1
                            -x DPSHIM_WARMUP_ITERS=2-6)
  "${mpi[@]}" "${env[@]}" "$build/tools/reftrain/reftrain" --profile sft \
    --seed 7 --steps 24 --time-scale 1 "${extra[@]}" \
    --stats-out "$tmp/reftrain-$1-$2.stats" >"$tmp/reftrain-$1-$2.json" \
    2>"$tmp/reftrain-$1-$2.err" ||
    { cat "$tmp/reftrain-$1-$2.err" >&2; exit 1; }
}

# preset, pack tokens, layout, rep: vlm_bench's table
vlm_run() {
  tools/vlm_bench.sh --build "$build" --ranks "$dp" --layout "$3" \
    --model "$1" --tp 1 --threshold auto --ahead -- --pack-tokens "$2" \
    --prefetch 2 >"$tmp/vlm-$1-$4.txt"
}

for ((r = 1; r <= reps; r++)); do
  if [[ $only != vlm ]]; then
    for v in none inline ahead prefetch; do reftrain_run "$v" "$r"; done
  fi
  if [[ $only != reftrain ]]; then
    vlm_run qwen2-vl-7b 8192 qwen2vl "$r"
    vlm_run internvl2-8b 32768 internvl "$r"
  fi
  echo "ahead_bench: rep $r of $reps done" >&2
done

mkdir -p "$(dirname "$out")"
python3 - "$tmp" "$reps" "$dp" "$only" "$cmdline" \
  "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- shim tools || echo +)" \
  >"$out" <<'EOF'
import datetime, json, os, re, statistics, sys
tmp, reps, dp, only, cmd, commit = sys.argv[1:]
reps, dp = int(reps), int(dp)
med = statistics.median
print("# Balancing ahead against inline, real runs\n")
print(f"    {cmd}\n")
print(f"commit {commit}, host {os.uname().nodename}, {os.cpu_count()} cores, "
      f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; DP {dp} on "
      f"{os.cpu_count()} cores (oversubscribed: read the ratios); medians "
      f"of {reps} reps, the variants back to back in each\n")
if only != "vlm":
    def steps(v, r):
        return [json.loads(l) for l in open(f"{tmp}/reftrain-{v}-{r}.stats")]
    def mean_ms(v, r):
        ms = [e["step_ms"] for e in steps(v, r) if e["step"] >= 9]
        return sum(ms) / len(ms)
    def applied(v, r):
        m = re.search(r"hand-offs balanced: (\d+) applied",
                      open(f"{tmp}/reftrain-{v}-{r}.err").read())
        return m.group(1) if m else "-"
    def digest(v, r):
        return json.loads(open(f"{tmp}/reftrain-{v}-{r}.json").read())[
            "consumed_digest"]
    print("## reftrain (sft, seed 7, 24 steps, warm-up 2-6, no DPSHIM_COEFS)\n")
    print("| variant | step ms (steps 9-24) | gain over none | gain per rep "
          "| plans applied per rep | digest as none |")
    print("|---|---:|---:|---|---|---|")
    rows = ("none", "inline", "ahead", "prefetch")
    for v in rows:
        gains = [100 * (mean_ms("none", r) / mean_ms(v, r) - 1)
                 for r in range(1, reps + 1)]
        same = all(digest(v, r) == digest("none", r)
                   for r in range(1, reps + 1))
        print(f"| {v} | {med(mean_ms(v, r) for r in range(1, reps + 1)):.1f} "
              f"| {med(gains):+.2f} % | "
              + " ".join(f"{g:+.1f}" for g in gains) + " | "
              + ("-" if v == "none" else
                 " ".join(applied(v, r) for r in range(1, reps + 1)))
              + f" | {'yes' if same else 'NO'} |")
    print("\ninline: DPSHIM_AHEAD=0; ahead: the shim's own thread "
          "(DPSHIM_AHEAD=1, the default); prefetch: reftrain --loader-thread "
          "--prefetch 1 with DPSHIM_LOADER_THREAD=1 (consumed at the MPI "
          "sync, fitted as inline)\n")
if only != "reftrain":
    row = re.compile(r"^(none|seed|default|default@ahead)\s+([0-9.]+)\s+"
                     r"(-?[0-9.]+)%.*?(\S+)\s+[0-9.]+ms\s+[0-9.]+\s+(\S+)$")
    for preset, tokens in (("qwen2-vl-7b", 8192), ("internvl2-8b", 32768)):
        got = {}
        for r in range(1, reps + 1):
            for line in open(f"{tmp}/vlm-{preset}-{r}.txt"):
                m = row.match(line.strip())
                if m:
                    got.setdefault(m.group(1), []).append(
                        (float(m.group(3)), m.group(4), m.group(5)))
        print(f"## vlmtrain {preset}, {tokens // 1024}K packs "
              f"(tools/vlm_bench.sh --ahead --threshold auto -- "
              f"--prefetch 2)\n")
        print("| variant | gain over none | gain per rep | plans applied per "
              "rep | digests |")
        print("|---|---:|---|---|---|")
        for v in ("none", "seed", "default", "default@ahead"):
            runs = got.get(v, [])
            if not runs:
                continue
            print(f"| {v} | {med(g for g, _, _ in runs):+.2f} % | "
                  + " ".join(f"{g:+.1f}" for g, _, _ in runs) + " | "
                  + " ".join(a for _, a, _ in runs) + " | "
                  + ("same" if all(d == "same" for _, _, d in runs)
                     else "DIFFER") + " |")
        print()
EOF
echo "ahead_bench: wrote $out" >&2
cat "$out"
