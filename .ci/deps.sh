#!/bin/sh
# .ci/deps.sh - the Debian packages `make test` needs, listed in this one place.
#   sh .ci/deps.sh check     (make test runs it first) exit 1 when a needed package is missing,
#                            printing the one command that installs them all
#   sh .ci/deps.sh install   (make deps, .ci/run) apt-get install the missing ones, with sudo
#                            when not root
# NEEDED: the tools the tests cannot run without (compilers, clang's sanitizer and libFuzzer
# runtime, valgrind, zlib's header, PyTorch for the reference tests). DATA: the data sets the
# examples use where present; without them they fall back to built-in data, so they are
# installed by `make deps` but not required.
# (AMP_DEPS_NEEDED / AMP_DEPS_DATA replace the lists: tests/examples.sh checks the check with them.)
set -u
NEEDED=${AMP_DEPS_NEEDED-"make gcc g++ clang libclang-rt-14-dev valgrind zlib1g-dev python3 python3-numpy python3-torch"}
DATA=${AMP_DEPS_DATA-"dataset-fashion-mnist fortunes-min"}

missing() { # the packages of $* that dpkg does not list as installed
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || printf ' %s' "$p"
  done
}

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps: not a Debian system; make test needs the equivalents of:$NEEDED" >&2
  [ "${1:-check}" = check ] && exit 0
  exit 1
fi
need=$(missing $NEEDED)
data=$(missing $DATA)

case "${1:-check}" in
check)
  if [ -n "$data" ]; then
    echo "deps: optional data not installed:$data (the examples use built-in data instead; make deps installs it)"
  fi
  if ! { command -v "${NVCC:-nvcc}" || [ -x /usr/local/cuda/bin/nvcc ]; } >/dev/null 2>&1; then
    echo "deps: nvcc not found: the CUDA build checks of make test will fail (install the CUDA toolkit in /usr/local/cuda, or set NVCC=)"
  fi
  if [ -n "$need" ]; then
    echo "deps: make test needs these Debian packages, not installed here:$need" >&2
    echo "deps: install them (and the optional data) with:  make deps" >&2
    s=""; [ "$(id -u)" -ne 0 ] && s="sudo "
    echo "deps: which runs:  ${s}apt-get update && ${s}apt-get install -y --no-install-recommends$need$data" >&2
    exit 1
  fi
  ;;
install)
  all="$need$data"
  [ -z "$all" ] && { echo "deps: every package is installed"; exit 0; }
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo
    else echo "deps: run as root:  apt-get update && apt-get install -y --no-install-recommends$all" >&2; exit 1; fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends $all
  ;;
*)
  echo "usage: sh .ci/deps.sh check|install" >&2; exit 2 ;;
esac
