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
echo "== tests"
meson test -C build --print-errorlogs

echo "== unit tests under ASan+UBSan"
configure build-asan -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --suite unit --print-errorlogs
