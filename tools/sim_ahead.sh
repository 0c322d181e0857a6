#!/usr/bin/env bash
# dpshim-sim balancing inline against balancing one micro-batch ahead
# (--ahead 1) on the four realistic VLM presets (tools/sim/presets.sh), each
# with its family's layout and the preset's TP, at DP 8, 64, 512 and 4096,
# seeds 1-3, algos none, seed and default. Writes a markdown table of the
# medians over seeds per (preset, DP): the gain over none inline and ahead,
# the shim's share of the step inline and its share on the step's path
# ahead, and whether both rules of issue 41 hold (on-path share <= 0.1 %;
# gain ahead >= gain inline - 0.3 points). Builds nothing:
#
#   ninja -C build tools/sim/dpshim-sim
#   tools/sim_ahead.sh [--build DIR] [--out FILE] [--seeds "1 2 3"]
#                      [-- dpshim-sim args]
#
# --out: the results file [tools/sim/results/ahead.md]; dpshim-sim args
# apply to every run (e.g. --micro-batches 4). One process at a time.
set -euo pipefail

build=build results="" seeds="1 2 3" extra=()
command="$0 $*"
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) results=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "sim_ahead.sh: unknown option '$1'; try --help" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
results=${results:-$here/sim/results/ahead.md}
sim=$build/tools/sim/dpshim-sim
[[ -x $sim ]] || { echo "sim_ahead.sh: no $sim; build it first" >&2; exit 2; }
# shellcheck source=tools/sim/presets.sh
. "$here/sim/presets.sh"
out=""
make_out_dir
mkdir -p "$(dirname "$results")"
for s in $seeds; do
  for p in "${presets[@]}"; do
    model=${p%%:*} layout=${p##*:}
    for k in 0 1; do
      start=$SECONDS
      "$sim" --layout "$layout" --model "$model" --tp model \
        --ranks 8,64,512,4096 --algos none,seed,default --seed "$s" \
        --ahead "$k" --json "$out/$model-s$s-a$k.json" "${extra[@]}" \
        >/dev/null 2>"$out/$model-s$s-a$k.err"
      echo "  ($model seed $s ahead $k: $((SECONDS - start)) s)" >&2
    done
  done
done

{
  echo "# dpshim-sim: balancing inline against one micro-batch ahead"
  echo
  echo "- command: \`$command\`"
  echo "- commit: $(git -C "$here/.." rev-parse --short HEAD)" \
    "(tracked files modified in the tree: $(git -C "$here/.." status \
    --porcelain -uno | wc -l))"
  echo "- machine: $(uname -n), $(nproc) cores"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- runs: \`$sim --layout L --model M --tp model --ranks" \
    "8,64,512,4096 --algos none,seed,default --seed S --ahead K" \
    "${extra[*]}\` for S in $seeds, K in 0 1"
  echo
  python3 - "$out" "$seeds" "${presets[@]%%:*}" <<'EOF'
import json, statistics, sys
out, seeds, models = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
run = {(m, s, k): {(d["ranks"], d["algo"]): d
                   for d in json.load(open(f"{out}/{m}-s{s}-a{k}.json"))}
       for m in models for s in seeds for k in (0, 1)}
ranks = sorted({n for r in run.values() for n, _ in r})

def med(f):
    return statistics.median(f(s) for s in seeds)

def gain(m, n, algo, k):
    return med(lambda s: 100 * (run[m, s, k][n, algo]["tgs"] /
                                run[m, s, k][n, "none"]["tgs"] - 1))

def share(m, n, algo, k, key):
    return med(lambda s: 100 * run[m, s, k][n, algo][key])

def table(algo):
    print(f"`{algo}`, medians of seeds {', '.join(seeds)}: gain over none "
          "(points), the shim's share of the step inline, its share on "
          "the step's path with `--ahead 1`; the rules: on path <= 0.1 % "
          "and gain ahead >= gain inline - 0.3")
    print()
    print("| preset | DP | gain inline | gain ahead | shim share inline "
          "| on-path share ahead | shim share ahead | rules |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    held = 0
    for m in models:
        for n in ranks:
            g0, g1 = gain(m, n, algo, 0), gain(m, n, algo, 1)
            s0 = share(m, n, algo, 0, "shim_share")
            s1 = share(m, n, algo, 1, "shim_on_path_share")
            w1 = share(m, n, algo, 1, "shim_share")
            ok = s1 <= 0.1 and g1 >= g0 - 0.3
            held += ok
            print(f"| {m} | {n} | {g0:+.2f} | {g1:+.2f} | {s0:.3f} % "
                  f"| {s1:.3f} % | {w1:.3f} % | {'hold' if ok else 'FAIL'} |")
    print()
    print(f"Both rules hold in {held} of {len(models) * len(ranks)} cells.")
    print()

table("default")
table("seed")
EOF
} >"$results"
cat "$results"
