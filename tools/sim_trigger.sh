#!/usr/bin/env bash
# The trigger in the simulator (issue 23): dpshim-sim on the four realistic
# VLM presets (as tools/sim_vlm.sh runs them), `default` with
# DPSHIM_TRIGGER_THRESHOLD=auto beside each fixed ratio, and `default+vit`
# with both triggers at auto beside `default` (the ViT level's auto is a
# gate modelled in the simulator only; see tools/sim/README.md). Each cell
# is the median over run seeds of the TGS gain over none in the same run.
# Prints, per preset and DP size, the gains and the two rules:
#   auto >= none - 0.3 % and >= the best fixed ratio - 0.3 %;
#   default+vit (auto) >= default (auto) - 0.3 %.
# Prints figures; exits 0 whether or not a rule holds. Builds nothing:
#
#   ninja -C build tools/sim/dpshim-sim
#   tools/sim_trigger.sh [--build DIR] [--seeds N] [--ratios "0.02 0.05 0.1 0.2"]
#                        [--out DIR] [-- dpshim-sim args]
#
# About 5 minutes here with 3 seeds. dpshim-sim args apply to every run
# (e.g. --ranks 8,64,4096); --out keeps every run's JSON there.
set -euo pipefail

die() { echo "sim_trigger.sh: $*" >&2; exit 2; }
build=build seeds=3 ratios="0.02 0.05 0.1 0.2" out="" extra=()
while (($#)); do
  case "$1" in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --seeds) seeds=${2:?--seeds needs a number}; shift 2 ;;
    --ratios) ratios=${2:?--ratios needs numbers}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $seeds =~ ^[1-9][0-9]*$ ]] || die "--seeds '$seeds': expected a number >= 1"
sim=$build/tools/sim/dpshim-sim
[[ -x $sim ]] || die "no $sim; build it first: ninja -C $build tools/sim/dpshim-sim"
# shellcheck source=tools/sim/presets.sh
. "$(dirname "$0")/sim/presets.sh"
make_out_dir
for p in "${presets[@]}"; do
  model=${p%%:*} layout=${p##*:}
  start=$SECONDS
  for ((s = 1; s <= seeds; s++)); do
    for t in auto $ratios; do
      vit=()
      [[ $t == auto ]] && vit=(--vit-balance --vit-threshold auto)
      "$sim" --layout "$layout" --model "$model" --tp model --seed "$s" \
        --algos none,default "${vit[@]}" --threshold "$t" \
        --json "$out/$model-$t-$s.json" "${extra[@]}" >/dev/null
    done
  done
  echo "  ($model: $((SECONDS - start)) s)" >&2
done

python3 - "$out" "$seeds" "$ratios" "${presets[@]%%:*}" <<'EOF'
import json, statistics, sys

out, seeds, ratios, models = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
SLACK = 0.3  # points


def gains(model, t, algo):
    """{ranks: median over seeds of the gain over none, in %}."""
    per = {}
    for s in range(1, seeds + 1):
        runs = json.load(open(f"{out}/{model}-{t}-{s}.json"))
        tgs = {(r["ranks"], r["algo"]): r["tgs"] for r in runs}
        for (n, a), v in tgs.items():
            if a == algo and (n, "none") in tgs:
                per.setdefault(n, []).append(100 * (v / tgs[(n, "none")] - 1))
    return {n: statistics.median(v) for n, v in per.items()}


print(f"default's TGS gain over none (median over {seeds} run seeds), "
      "DPSHIM_TRIGGER_THRESHOLD auto beside fixed ratios; "
      "default+vit with both levels at auto (the ViT gate)")
print("  rules: auto >= none - 0.3 and >= the best ratio - 0.3; "
      "+vit >= default - 0.3 (points)")
failed = 0
for m in models:
    auto, vit = gains(m, "auto", "default"), gains(m, "auto", "default+vit")
    fixed = {t: gains(m, t, "default") for t in ratios}
    print(f"\n{m}")
    print("  %6s %8s " % ("DP", "auto") +
          " ".join("%7s" % t for t in ratios) + " %8s  rules" % "+vit")
    for n in sorted(auto):
        best = max(fixed[t][n] for t in ratios)
        ok = [auto[n] >= -SLACK, auto[n] >= best - SLACK,
              n not in vit or vit[n] >= auto[n] - SLACK]
        failed += not all(ok)
        print("  %6d %+7.1f%% " % (n, auto[n]) +
              " ".join("%+6.1f%%" % fixed[t][n] for t in ratios) +
              (" %+7.1f%%" % vit[n] if n in vit else " %8s" % "-") +
              "  " + " ".join("ok" if k else "NO" for k in ok))
print(f"\ncells breaking a rule: {failed}")
EOF
