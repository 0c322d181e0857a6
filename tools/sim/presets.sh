# Sourced by tools/sim_vlm.sh and tools/sim_trigger.sh: the realistic VLM
# presets they run, as MODEL:LAYOUT (each with its family's layout), and
# their output folder.
presets=(internvl2-8b:internvl qwen2-vl-7b:qwen2vl qwen2.5-vl-7b:qwen2vl
         qwen3-vl-8b:qwen3vl)

# $out made; when empty, a temporary folder removed at exit.
make_out_dir() {
  if [[ -z $out ]]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
  fi
  mkdir -p "$out"
}
