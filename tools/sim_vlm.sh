#!/usr/bin/env bash
# dpshim-sim on the VLM workloads under each realistic preset, each with its
# family's layout and the preset's TP: internvl2-8b (internvl), qwen2-vl-7b
# and qwen2.5-vl-7b (qwen2vl), qwen3-vl-8b (qwen3vl), with the ViT balance
# too (--vit-balance). Prints each run's summary, then per DP size, one
# column per preset: the TGS gain over none of seed and default (the LLM
# level), of seed+vit and default+vit (LLM + ViT level), the encoder phase's
# straggler wait and the bytes each level moves. Builds nothing:
#
#   ninja -C build tools/sim/dpshim-sim
#   tools/sim_vlm.sh [--build DIR] [--out DIR] [--mix M] [-- dpshim-sim args]
#
# --mix: default, or encoder-heavy (each layout's: InternVL up to 24 tiles
# per image, 90 % of samples with images; Qwen larger images, Qwen3-VL long
# videos; dpshim-sim --mix). dpshim-sim args apply to every run (e.g.
# --ranks 4,64 --pack-tokens 8192); --out keeps each preset's JSON
# (PRESET.json) there.
set -euo pipefail

build=build out="" mix=default extra=()
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --mix) mix=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "sim_vlm.sh: unknown option '$1'; try --help" >&2; exit 2 ;;
  esac
done
sim=$build/tools/sim/dpshim-sim
[[ -x $sim ]] || { echo "sim_vlm.sh: no $sim; build it first" >&2; exit 2; }
# shellcheck source=tools/sim/presets.sh
. "$(dirname "$0")/sim/presets.sh"
make_out_dir
for p in "${presets[@]}"; do
  model=${p%%:*} layout=${p##*:}
  start=$SECONDS
  "$sim" --layout "$layout" --model "$model" --tp model --vit-balance \
    --mix "$mix" --json "$out/$model.json" "${extra[@]}" >/dev/null
  echo "  ($model: $((SECONDS - start)) s)" >&2
done

python3 - "$out" "${presets[@]%%:*}" <<'EOF'
import json, sys
out, models = sys.argv[1], sys.argv[2:]
runs = {m: json.load(open(f"{out}/{m}.json")) for m in models}
tgs = {m: {(r["ranks"], r["algo"]): r["tgs"] for r in rs}
       for m, rs in runs.items()}
ranks = sorted({r["ranks"] for rs in runs.values() for r in rs})
def gain(m, n, algo):
    t, none = tgs[m].get((n, algo)), tgs[m].get((n, "none"))
    return f"{100 * (t / none - 1):+.1f}%" if t and none else "-"
field = {m: {(r["ranks"], r["algo"]): r for r in rs} for m, rs in runs.items()}
def ms(m, n, algo, key):
    r = field[m].get((n, algo))
    return f"{r[key]:.1f}" if r and key in r else "-"
def gb(m, n, algo, key):
    r = field[m].get((n, algo))
    return f"{r[key] / 1e9:.2f}" if r and key in r else "-"
def table(title, cell):
    print(title)
    print("| DP | " + " | ".join(models) + " |")
    print("|---:|" + "---:|" * len(models))
    for n in ranks:
        print(f"| {n} | " + " | ".join(cell(m, n) for m in models) + " |")
table("TGS gain over none (seed / default) by DP size:",
      lambda m, n: f"{gain(m, n, 'seed')} / {gain(m, n, 'default')}")
table("\nTGS gain over none with the ViT balance too (seed+vit / "
      "default+vit) by DP size:",
      lambda m, n: f"{gain(m, n, 'seed+vit')} / {gain(m, n, 'default+vit')}")
table("\nViT phase straggler wait (max - mean), ms per step "
      "(none / default / default+vit):",
      lambda m, n: " / ".join(ms(m, n, a, "vit_wait_ms")
                              for a in ("none", "default", "default+vit")))
table("\nGB moved per step by default+vit (LLM level / ViT level):",
      lambda m, n: f"{gb(m, n, 'default+vit', 'bytes_moved_per_step')} / "
                   f"{gb(m, n, 'default+vit', 'vit_bytes_moved_per_step')}")
EOF
