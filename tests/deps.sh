#!/bin/sh
# tests/deps.sh - the Debian packages `make test` needs, listed in this one place.
#   sh tests/deps.sh check     (make test runs it first) exit 1 when a needed piece is missing,
#                            printing the one command that installs them all
#   sh tests/deps.sh install   (make deps, .ci/run) apt-get install the missing ones, with sudo
#                            when not root
# NEEDED: what the tests cannot run without (compilers, clang's sanitizer and libFuzzer runtime,
# LLVM's OpenMP runtime (clang -fopenmp, for ThreadSanitizer on OpenMP threads), valgrind, zlib's header, NumPy and PyTorch for the reference tests). DATA: the data sets the
# examples use where present; without them they fall back to built-in data, so `make deps`
# installs them but the check does not require them. A package counts as present when what it
# provides works (a command, a header, a Python module), however it was installed; with
# AMP_TEST_SKIP_SLOW_CPU=1 (make gpu-check) the tools of the parts it leaves out (clang, its
# runtime, valgrind) are not required.
# (AMP_DEPS_NEEDED / AMP_DEPS_DATA replace the lists: tests/examples.sh checks the check with them.)
set -u
NEEDED=${AMP_DEPS_NEEDED-"make gcc g++ clang libclang-rt-14-dev libomp-14-dev valgrind zlib1g-dev python3 python3-numpy python3-torch"}
DATA=${AMP_DEPS_DATA-"dataset-fashion-mnist fortunes-min"}
# OTHER: other compilers and targets (tcc; AArch64 and armhf cross compilers and qemu-user): installed
# with the data, not required (make test says which of its steps it left out without them)
OTHER=${AMP_DEPS_OTHER-"tcc qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross"}
SLOW_CPU_ONLY="clang libclang-rt-14-dev libomp-14-dev valgrind"

tmp=$(mktemp -d 2>/dev/null || echo "/tmp/amp-deps.$$")
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

# pymod MODULE: 0 when the python3 on PATH or Debian's /usr/bin/python3 imports it
pymod() { python3 -c "import $1" || /usr/bin/python3 -c "import $1"; }
# present PACKAGE: 0 when what the package provides is here
present() {
  case $1 in
    make|gcc|g++|clang|valgrind|python3|tcc) command -v "$1" ;;
    qemu-user) command -v qemu-aarch64 ;;
    gcc-aarch64-linux-gnu) command -v aarch64-linux-gnu-gcc ;;
    libc6-dev-arm64-cross) [ -f /usr/aarch64-linux-gnu/include/stdio.h ] ;;
    gcc-arm-linux-gnueabihf) command -v arm-linux-gnueabihf-gcc ;;
    libc6-dev-armhf-cross) [ -f /usr/arm-linux-gnueabihf/include/stdio.h ] ;;
    libclang-rt-*) printf 'int main(void) { return 0; }\n' > "$tmp/rt.c" &&
                   clang -fsanitize=address,undefined "$tmp/rt.c" -o "$tmp/rt" ;;
    libomp-*) printf 'int main(void) { return 0; }\n' > "$tmp/omp.c" &&
              clang -fopenmp "$tmp/omp.c" -o "$tmp/omp" ;;
    zlib1g-dev) ${CC:-cc} -E -include zlib.h -x c /dev/null ;;
    python3-numpy) pymod numpy ;;
    python3-torch) pymod torch ;;
    dataset-fashion-mnist) [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ;;
    fortunes-min) [ -f /usr/share/games/fortunes/fortunes ] ;;
    *) dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' ;;
  esac
}
missing() { # the packages of $* that are not present
  for p in "$@"; do
    if [ -n "${AMP_TEST_SKIP_SLOW_CPU:-}" ] && [ "${AMP_TEST_SKIP_SLOW_CPU}" != 0 ]; then
      case " $SLOW_CPU_ONLY " in *" $p "*) continue ;; esac
    fi
    present "$p" >/dev/null 2>&1 || printf ' %s' "$p"
  done
}

need=$(missing $NEEDED)
data=$(missing $DATA)
other=$(missing $OTHER)
s=""; [ "$(id -u)" -ne 0 ] && s="sudo "

case "${1:-check}" in
check)
  if [ -n "$data" ]; then
    echo "deps: optional data not installed:$data (the examples use built-in data instead; make deps installs it)"
  fi
  if [ -n "$other" ]; then
    echo "deps: optional compilers not installed:$other (make test leaves out the tcc, AArch64 and armhf checks; make deps installs them)"
  fi
  if ! { command -v "${NVCC:-nvcc}" || [ -x /usr/local/cuda/bin/nvcc ]; } >/dev/null 2>&1; then
    echo "deps: nvcc not found: the CUDA build checks of make test will fail (install the CUDA toolkit in /usr/local/cuda, or set NVCC=)"
  fi
  if [ -n "$need" ]; then
    echo "deps: make test needs these Debian packages, not installed here:$need" >&2
    echo "deps: install them (and the optional data) with:  make deps" >&2
    echo "deps: which runs:  ${s}apt-get update && ${s}apt-get install -y --no-install-recommends$need$data" >&2
    exit 1
  fi
  ;;
install)
  all="$need$data$other"
  [ -z "$all" ] && { echo "deps: everything make test needs is installed"; exit 0; }
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "deps: no apt-get here (not Debian): install the equivalents of:$all" >&2; exit 1
  fi
  if [ -n "$s" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "deps: run as root:  apt-get update && apt-get install -y --no-install-recommends$all" >&2; exit 1
  fi
  ${s}apt-get update -q || exit 1
  if [ -n "$need" ]; then
    ${s}env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need || exit 1
  fi
  # the other compilers are optional too: make test says which checks it left out without them
  if [ -n "$other" ]; then
    ${s}env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $other ||
      echo "deps: optional compilers not installed:$other"
  fi
  # the data are optional: where a package cannot be had, the examples use their built-in data
  if [ -n "$data" ]; then
    ${s}env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $data ||
      echo "deps: optional data not installed:$data (the examples use built-in data)"
  fi
  ;;
*)
  echo "usage: sh tests/deps.sh check|install" >&2; exit 2 ;;
esac
