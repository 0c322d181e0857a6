#!/usr/bin/env bash
# Installs the Debian packages dpshim needs, skipping those already present.
# Run as root (or with sudo available) on Debian 12 or later.
#   tools/deps.sh          what building, the tests, the tools and the demo
#                          need
set -euo pipefail

packages=(
  meson ninja-build pkg-config gcc
  libopenmpi-dev openmpi-bin    # MPI for the shim and its tests
  libpapi-dev                   # warm-up timing (optional at run time)
  libnlopt-dev                  # bounded optimiser for the seed fit
  libcriterion-dev              # unit tests
  python3                       # the MPI tests' driver (meson needs it too)
  python3-scipy                 # tools/dpshim-optcheck (MILP, HiGHS)
  help2man                      # the tools' man pages, from their --help
  gnuplot-nox                   # dpshim-report's and the demo's plots
  python3-numpy python3-torch python3-mpi4py  # the Python package's example
                                              # trainer and its test
  iproute2                      # tests/multihost: hosts as network namespaces
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
