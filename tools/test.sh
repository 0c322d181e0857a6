#!/usr/bin/env bash
# Builds dpshim and runs every test suite, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer. Does its own set-up.
#   tools/test.sh            build dirs: build/ and build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."

tools/deps.sh

configure() { # dir, extra meson args...
  local dir=$1; shift
  if [ -d "$dir/meson-private" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

echo "== build"
configure build
ninja -C build
# meson's own summary is not a line CI reads; this adds "N passed, N failed".
run_suite() { # label, meson test args...
  local label=$1 out rc=0; shift
  out=$(mktemp)
  meson test "$@" --print-errorlogs 2>&1 | tee "$out" || rc=$?
  passed=$(( passed + $(awk '/^Ok:/ {print $2}' "$out") ))
  failed=$(( failed + $(awk '/^(Fail|Timeout|Unexpected Pass):/ {n += $NF} END {print n+0}' "$out") ))
  rm -f "$out"
  [ "$rc" -eq 0 ] || { echo "$label: $passed passed, $failed failed"; exit "$rc"; }
}
passed=0 failed=0

echo "== tests"
run_suite tests -C build

echo "== unit tests under ASan+UBSan"
configure build-asan -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-asan
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run_suite sanitizers -C build-asan --suite unit
echo "all: $passed passed, $failed failed"
