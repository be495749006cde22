#!/bin/sh
# tests/run.sh - everything `make test` runs, ending with one line "N passed, M failed".
#
#   1. the header compiles clean with gcc -std=c99, clang -std=c11, g++ and clang++ (-Werror),
#      with and without AMP_STATIC, and two translation units link;
#   2. every tests/test_*.c built with gcc -O2 and run (its RESULT line counts);
#   3. each of them again built with -Ofast, with clang -Ofast -march=native, under gcc ASan+UBSan,
#      and the plain build run under valgrind (AMP_TEST_QUICK=1: sampled); a test file with a line
#      `// TSAN: yes` also under clang's ThreadSanitizer (any report fails it; the longest access
#      history, so a race is never left unreported because the earlier access fell out of it); and
#      cross-built for AArch64 (gcc and clang, -O2 and -Ofast, two of those four a file; test_convert also gcc
#      -march=armv8.6-a, for BFCVTN) and for armhf (gcc -O2, 32-bit ARM) and run under qemu-user
#      where those tools are installed (each file's builds in order);
#   4. amp_kernels.cu compiled with nvcc (the Makefile's NVCC_FLAGS: sm_80 and sm_90 SASS, compute_90
#      PTX, warnings as errors; where no GPU can run it, sm_80 as PTX only), every tests/cuda_*.c
#      linked against it and run (they report "skipped" where no GPU is present; with
#      AMP_REQUIRE_GPU=1 each such skip is a failure);
#   5. the libFuzzer targets in tests/fuzz/ for a bounded time each;
#   6. tests/examples.sh, when present (the examples, run and their claims checked);
#   7. the numbered examples cross-built for AArch64 (gcc -O2 and clang -O2) and armhf (gcc -O2),
#      run under qemu-user, their output and SVGs compared with the x86 build's byte for byte, and
#      for AArch64 with gcc -Ofast and clang -Ofast, where they must pass (their claims hold); tcc
#      builds the implementation (no thread-local storage), and clang++ compiles it as C++ for
#      AArch64.
#
# A test file may carry a line `// LDLIBS: -lz` naming extra libraries to link, and a line
# `// LANG: c++` to be built as C++ (g++ -x c++ / clang++ -x c++, -std=c++11) with the CUDA
# toolkit's headers ($CUDA_HOME/include, no nvcc needed) on the include path: the fp8 test compares
# with the toolkit's host code in cuda_fp8.h, which is C++.
# Set AMP_TEST_ONLY=name to run only tests/test_name.c (no compile matrix, fuzz or CUDA);
# AMP_TEST_ONLY=cuda runs step 4 alone; AMP_TEST_ONLY=gpu step 4 and the examples that use a GPU
# (make gpu-check); AMP_TEST_ONLY=other the AArch64 and armhf builds and tcc alone.
# AMP_KERNELS_O=path: step 4 copies that amp_kernels.o (make's, the same flags) where it is newer
# than amp_kernels.cu, amp_kernels.h and amp.h, instead of compiling them again.
# AMP_REQUIRE_GPU=1: a GPU test that finds no usable GPU fails instead of saying "skipped".
# The steps run side by side, nproc parts at a time (AMP_TEST_JOBS=N; "the run" at the end says how).
# AMP_TEST_SKIP_SLOW_CPU=1 (make gpu-check sets it): step 1 (the compile matrix, which needs clang),
#   step 3 (the -Ofast, ASan+UBSan and valgrind re-runs) and step 5 (fuzzing) are left out: they
#   are CPU only, and CI runs them on every change.
set -u
cd "$(dirname "$0")/.." || exit 1
B=build/test
mkdir -p "$B"
PASS=0
FAIL=0
FAILED=""
WARN="-Wall -Wextra -Wpedantic -Werror"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
SLOW_CPU=1
LAST="$B/last.log"
T0=${AMP__T0:-$(date +%s)}
at() { echo "(at $(( $(date +%s) - T0 )) s)"; }   # how far into this run a section starts
[ -n "${AMP_TEST_SKIP_SLOW_CPU:-}" ] && [ "${AMP_TEST_SKIP_SLOW_CPU}" != 0 ] && SLOW_CPU=0
# The nvcc flags: the Makefile's NVCC_FLAGS, the one place they are defined.
NVCC_FLAGS=$(make -s --no-print-directory print-nvcc-flags 2>/dev/null) || NVCC_FLAGS=""
# NCCL: where the Makefile finds it (NCCL_HOME; empty: not installed), and how to compile and link with it.
NCCL_HOME=$(make -s --no-print-directory print-nccl-home 2>/dev/null) || NCCL_HOME=""
NCCL_CFLAGS=$(make -s --no-print-directory print-nccl-cflags 2>/dev/null) || NCCL_CFLAGS=""
NCCL_LIBS=$(make -s --no-print-directory print-nccl-libs 2>/dev/null) || NCCL_LIBS=""
# fresh OBJ: OBJ is set and newer than amp_kernels.cu, amp.h and amp_kernels.h (an object make
# built just before with the same flags, copied rather than compiled again)
fresh() { [ -n "$1" ] && [ "$1" -nt amp_kernels.cu ] && [ "$1" -nt amp.h ] && [ "$1" -nt amp_kernels.h ]; }

pass() { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); FAILED="$FAILED $1"; echo "FAIL $1"; }
# check NAME CMD...: one pass/fail from the command's exit status; its output is shown on failure.
check() {
  cname=$1; shift
  if "$@" >"$LAST" 2>&1; then pass "$cname"; else fail "$cname"; sed 's/^/    /' "$LAST" | tail -n 40; fi
}
# runtest NAME CMD...: runs a test program, adds up its RESULT line.
runtest() {
  rname=$1; shift
  "$@" >"$B/$rname.log" 2>&1
  report "$rname" $?
}
# report NAME RC: adds up the RESULT line of $B/NAME.log, the output of a run that exited with RC.
report() {
  rname=$1; rc=$2
  line=$(grep '^RESULT ' "$B/$rname.log" | tail -n 1)
  grep -E '^(FAIL|  FAIL|skipped|SKIP)' "$B/$rname.log" | head -n 40
  if [ -z "$line" ]; then
    fail "$rname (exit $rc, no RESULT line)"; tail -n 30 "$B/$rname.log" | sed 's/^/    /'; return
  fi
  p=$(echo "$line" | sed 's/^RESULT \([0-9]*\) passed, \([0-9]*\) failed.*/\1/')
  f=$(echo "$line" | sed 's/^RESULT \([0-9]*\) passed, \([0-9]*\) failed.*/\2/')
  PASS=$((PASS + p)); FAIL=$((FAIL + f))
  [ "$f" -gt 0 ] && FAILED="$FAILED $rname"
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then fail "$rname (exit $rc)"; tail -n 30 "$B/$rname.log" | sed 's/^/    /'; fi
  echo "---- $rname: $p passed, $f failed"
}
ldlibs() { sed -n 's|^// LDLIBS: *||p' "$1" | head -n 1; }
# gcc_for / clang_for SRC: the compiler and language options a test file is built with.
gcc_for() { if grep -q '^// LANG: c++' "$1"; then echo "g++ -x c++ -std=c++11 -isystem $CUDA_HOME/include"; else echo "gcc -std=c99"; fi; }
clang_for() { if grep -q '^// LANG: c++' "$1"; then echo "clang++ -x c++ -std=c++11 -isystem $CUDA_HOME/include"; else echo "clang -std=c11"; fi; }

ONLY=${AMP_TEST_ONLY:-}

# 1. the header on its own, in every language mode ------------------------------------------
part_header() {
  echo "== header compile matrix $(at)"
  printf '#define AMP_IMPLEMENTATION\n#include "amp.h"\nint main(void){ return amp_f32_to_f16(1.0f) == 0x3c00 ? 0 : 1; }\n' > "$B/impl.c"
  printf '#include "amp.h"\nint amp_other(void);\nint amp_other(void){ return (int)amp_f16_to_f32(0x3c00); }\n' > "$B/other.c"
  printf '#define AMP_IMPLEMENTATION\n#include "amp.h"\nint amp_other(void);\nint main(void){ return amp_other() == 1 && amp_dtype_size(AMP_F16) == 2 ? 0 : 1; }\n' > "$B/main2.c"
  cp "$B/impl.c" "$B/impl.cpp"
  for cc in "gcc -std=c99" "clang -std=c11" "gcc -std=c11" "clang -std=c99"; do
    for st in "" "-DAMP_STATIC"; do
      check "compile: $cc $st" sh -c "$cc $WARN $st -I. $B/impl.c -o $B/impl -lm && $B/impl"
    done
  done
  for cc in "g++ -std=c++11" "clang++ -std=c++17"; do
    for st in "" "-DAMP_STATIC"; do
      check "compile: $cc $st" sh -c "$cc $WARN $st -I. $B/impl.cpp -o $B/impl -lm && $B/impl"
    done
  done
  check "link: two translation units (gcc)" sh -c "gcc -std=c99 $WARN -I. -c $B/other.c -o $B/other.o && gcc -std=c99 $WARN -I. $B/main2.c $B/other.o -o $B/two -lm && $B/two"
  check "link: two translation units (g++)" sh -c "cp $B/other.c $B/other.cpp && cp $B/main2.c $B/main2.cpp && g++ $WARN -I. -c $B/other.cpp -o $B/otherpp.o && g++ $WARN -I. $B/main2.cpp $B/otherpp.o -o $B/twopp -lm && $B/twopp"
  # The manual's quick start (the top of amp.h) must compile with -Werror and run.
  sed -n '/^   QUICK START/,/^   COMPILE-TIME OPTIONS/p' amp.h | sed '1d;$d' | sed 's/^      //' > "$B/quickstart.c"
  check "manual: the quick start at the top of amp.h compiles and runs" sh -c "gcc -std=c99 $WARN -I. $B/quickstart.c -o $B/quickstart -lm && $B/quickstart"
  check "compile: gcc -O2 -fsanitize=undefined (no maybe-uninitialized)" sh -c "gcc -std=c99 $WARN -O2 -fsanitize=undefined -I. $B/impl.c -o $B/impl -lm && $B/impl"
  for cc in "gcc -std=c99" "clang -std=c11"; do
    check "compile: $cc -Ofast (the implementation unit under fast-math)" sh -c "$cc $WARN -Ofast -I. $B/impl.c -o $B/impl -lm && $B/impl"
  done
  check "compile: the portable C stdio file I/O of checkpoints (as on non-POSIX systems)" sh -c "gcc -std=c99 $WARN -DAMP__STDIO_FILES -I. $B/impl.c -o $B/impl -lm && $B/impl"
  check "compile: AMP_NO_SIMD" sh -c "gcc -std=c99 $WARN -DAMP_NO_SIMD -I. $B/impl.c -o $B/impl -lm && $B/impl"
  for cc in "gcc -std=c99" "g++ -x c++"; do
    check "compile: $cc -fopenmp (the CPU product's optional pragmas)" sh -c "$cc $WARN -O2 -fopenmp -I. $B/impl.c -o $B/impl -lm && $B/impl"
  done
  check "compile: AMP_MALLOC/AMP_FREE overridden" sh -c "gcc -std=c99 $WARN -I. -include stdlib.h -D'AMP_MALLOC(s)=malloc(s)' -D'AMP_FREE(p)=free(p)' $B/impl.c -o $B/impl -lm && $B/impl"
  check "compile: AMP_MALLOC alone is refused" sh -c "! gcc -std=c99 -I. -D'AMP_MALLOC(s)=malloc(s)' -c $B/impl.c -o $B/impl.o 2>/dev/null"
}

# 2-3. the unit tests, plain, under ASan+UBSan, under valgrind (and step 7's AArch64 builds) --------
# matrix SRC: every build and run of one test file, in order (they share the files the test writes
# under build/test); make test runs each file's matrix as one part (see "the run" at the end).
matrix() {
  src=$1
  name=$(basename "$src" .c)
  libs=$(ldlibs "$src")
  gcc_src=$(gcc_for "$src"); clang_src=$(clang_for "$src")
  echo "== $name"
  if [ "$ONLY" != other ]; then
    if $gcc_src -O2 $WARN -I. "$src" -o "$B/$name" $libs -lm -lpthread 2>"$B/$name.cc.log"; then
      runtest "$name" "$B/$name"
    else
      fail "$name: build"; sed 's/^/    /' "$B/$name.cc.log" | head -n 30; return
    fi
  fi
  [ "$SLOW_CPU" = 1 ] || return
  [ "$ONLY" = other ] || matrix_x86 "$src"
  matrix_aarch64 "$src"
}
matrix_x86() {
  # built with -Ofast as llm.c-style trainers build everything (sampled, AMP_TEST_QUICK=1)
  if $gcc_src -Ofast $WARN -I. "$src" -o "$B/$name.ofast" $libs -lm -lpthread 2>"$B/$name.ofast.cc.log"; then
    runtest "$name.ofast" env AMP_TEST_QUICK=1 "$B/$name.ofast"
  else
    fail "$name: -Ofast build"; sed 's/^/    /' "$B/$name.ofast.cc.log" | head -n 30
  fi
  # test_gemm: the reference's no-FMA promise under the flags most likely to break it (-Ofast
  # -march=native lets both compilers fuse a * b + c), and the product built with OpenMP
  # clang -Ofast -march=native (llm.c's flags with CC=clang): clang fuses across statements under
  # -ffp-contract=fast whatever the pragmas say, so every test also runs built so (sampled)
  clang_ofast=$(clang_for "$src" | sed 's/-std=c11/-std=c99/')
  if $clang_ofast -Ofast -march=native $WARN -I. "$src" -o "$B/$name.clang-ofast" $libs -lm -lpthread \
       2>"$B/$name.clang-ofast.cc.log"; then
    runtest "$name.clang-ofast" env AMP_TEST_QUICK=1 "$B/$name.clang-ofast"
  else
    fail "$name: clang -Ofast -march=native build"; sed 's/^/    /' "$B/$name.clang-ofast.cc.log" | head -n 30
  fi
  if [ "$name" = test_gemm ]; then
    # (clang -Ofast -march=native: every test's clang-ofast build above). GNU C, as users' builds
    # default to: there GCC fuses plain vector arithmetic (the intrinsics' multiplies and adds)
    if gcc -std=gnu99 -Ofast -march=native $WARN -I. "$src" -o "$B/$name.native.gcc" $libs -lm -lpthread 2>"$B/$name.native.cc.log"; then
      runtest "$name.native.gcc" env AMP_TEST_QUICK=1 "$B/$name.native.gcc"
    else
      fail "$name: gcc -Ofast -march=native build"; sed 's/^/    /' "$B/$name.native.cc.log" | head -n 30
    fi
  fi
  # built with OpenMP, two threads: the product's row blocks (test_gemm_fp8: with block scales too)
  # and the optimizer step's slices shared among them (each test checks the one-thread bits:
  # test_moments every moment type and master mode)
  case "$name" in test_gemm|test_gemm_fp8|test_moments)
    if gcc -std=c99 -O2 -fopenmp $WARN -I. "$src" -o "$B/$name.openmp" $libs -lm -lpthread 2>"$B/$name.openmp.cc.log"; then
      runtest "$name.openmp" env OMP_NUM_THREADS=2 AMP_TEST_QUICK=1 "$B/$name.openmp"
    else
      fail "$name: -fopenmp build"; sed 's/^/    /' "$B/$name.openmp.cc.log" | head -n 30
    fi ;;
  esac
  # the product's and the optimizer step's OpenMP threads under ThreadSanitizer (clang with LLVM's
  # OpenMP runtime, whose own uninstrumented code TSan is told to ignore, as it asks): no byte
  # shared unsynchronised
  if [ "$name" = test_gemm ] || [ "$name" = test_gemm_fp8 ] || [ "$name" = test_moments ]; then
    if $clang_src -O1 -g -fsanitize=thread -fopenmp -fno-omit-frame-pointer $WARN -I. "$src" -o "$B/$name.tsan-openmp" \
         $libs -lm -lpthread 2>"$B/$name.tsan-openmp.cc.log"; then
      norand=""; setarch "$(uname -m)" -R true 2>/dev/null && norand="setarch $(uname -m) -R"
      check "$name under ThreadSanitizer on two OpenMP threads" env OMP_NUM_THREADS=2 AMP_TEST_QUICK=1 \
        TSAN_OPTIONS="halt_on_error=1 history_size=7 ignore_noninstrumented_modules=1" $norand "$B/$name.tsan-openmp"
    else
      fail "$name: TSan -fopenmp build"; sed 's/^/    /' "$B/$name.tsan-openmp.cc.log" | head -n 30
    fi
  fi
  # ASan+UBSan with gcc: about 60% of clang's build time for this header (clang builds every test at
  # -Ofast above, and the TSan build below). -g1: line tables, enough for the reports' file:line, at
  # 60% of -g's build time (a 35 s build against 59 s)
  if $gcc_src -O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
       $WARN -I. "$src" -o "$B/$name.asan" $libs -lm -lpthread 2>"$B/$name.asan.cc.log"; then
    check "$name under ASan+UBSan" env AMP_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 "$B/$name.asan"
  else
    fail "$name: ASan build"; sed 's/^/    /' "$B/$name.asan.cc.log" | head -n 30
  fi
  if grep -q '^// TSAN: yes' "$src"; then
    if $clang_src -O1 -g -fsanitize=thread -fno-omit-frame-pointer $WARN -I. "$src" -o "$B/$name.tsan" $libs -lm -lpthread \
         2>"$B/$name.tsan.cc.log"; then
      # without address randomisation where setarch can turn it off: clang 14's TSan refuses the
      # memory layout of kernels with more mmap randomisation bits than it knows
      norand=""; setarch "$(uname -m)" -R true 2>/dev/null && norand="setarch $(uname -m) -R"
      check "$name under ThreadSanitizer" env AMP_TEST_QUICK=1 TSAN_OPTIONS="halt_on_error=1 history_size=7" $norand "$B/$name.tsan"
    else
      fail "$name: TSan build"; sed 's/^/    /' "$B/$name.tsan.cc.log" | head -n 30
    fi
  fi
  if command -v valgrind >/dev/null 2>&1; then
    # the plain build above (gcc -O2, what users run; its reports name functions, not lines)
    check "$name under valgrind" env AMP_TEST_QUICK=1 valgrind -q --error-exitcode=99 --leak-check=full \
      --errors-for-leak-kinds=definite,indirect "$B/$name"
  else
    fail "$name under valgrind: valgrind is not installed"
  fi
}
# matrix_aarch64 SRC (step 7): AArch64 as a Mac or Grace builds it: the test cross-built with gcc and
# clang at -O2 and -Ofast (-Werror; two of the four a file, in turn), and run under qemu-user (sampled: qemu is slow). gcc -Ofast
# is the one build where GCC may fuse a * b + c into an FMA on this target (the element functions'
# no-fast-math attribute is what keeps their bits); clang fuses by default on AArch64; -O2 keeps
# subnormals (the FPCR state in which the NEON conversions run and subnormal results are checked),
# -Ofast flushes them. Each test checks the promised bits itself (every SIMD level against the
# scalar loop, the split master against the fp32 master, the references).
# Where the tools are missing (not Debian; `make deps` installs them) make test says so once and
# the rest still runs.
# armhf (32-bit ARM, Debian's -mfpu=neon-vfpv4 -mfloat-abi=hard): gcc -O2, run under qemu-arm. amp.h's
# NEON paths are AArch64's, so armhf runs the portable loops and the reference product: each test
# checks their bits as on x86 (the same checks, so the same promised bits).
arm_sysroot=/usr/aarch64-linux-gnu
armhf_sysroot=/usr/arm-linux-gnueabihf
HAVE_ARM=0; HAVE_ARMHF=0
command -v qemu-aarch64 >/dev/null 2>&1 && command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && [ -d "$arm_sysroot" ] && HAVE_ARM=1
command -v qemu-arm >/dev/null 2>&1 && command -v arm-linux-gnueabihf-gcc >/dev/null 2>&1 && [ -d "$armhf_sysroot" ] && HAVE_ARMHF=1
# cross_run TARGET QEMU SYSROOT TAG CC...: the test built by CC and run under QEMU (sampled).
cross_run() {
  target=$1; qemu=$2; sysroot=$3; tag=$4; shift 4
  if "$@" $WARN -I. "$src" -o "$B/$name.$target-$tag" $libs -lm -lpthread 2>"$B/$name.$target-$tag.cc.log"; then
    runtest "$name.$target-$tag" env AMP_TEST_QUICK=1 QEMU_LD_PREFIX=$sysroot $qemu "$B/$name.$target-$tag"
  else
    fail "$name: $target $tag build"; sed 's/^/    /' "$B/$name.$target-$tag.cc.log" | head -n 30
  fi
}
matrix_aarch64() {
  grep -q '^// LANG: c++' "$src" && return   # the toolkit's fp8 oracle: x86 host code only
  case "$libs" in *-lz*) return ;; esac       # zlib: no ARM zlib in the cross sysroots
  if [ "$HAVE_ARM" = 1 ]; then
    # two of the four builds a file, in turn along the list of test files: every file with both
    # compilers and both flag sets, every pair of compiler and flags over half of the files (all
    # four for every file took make test past 90 minutes on a 2-core Zen 3 VM)
    i=0; for f in tests/test_*.c; do i=$((i + 1)); [ "$f" = "$src" ] && break; done
    if [ $((i % 2)) -eq 0 ]; then
      cross_run aarch64 qemu-aarch64 $arm_sysroot gcc-O2 aarch64-linux-gnu-gcc -std=c99 -O2
      cross_run aarch64 qemu-aarch64 $arm_sysroot clang-Ofast clang --target=aarch64-linux-gnu -std=c99 -Ofast
    else
      cross_run aarch64 qemu-aarch64 $arm_sysroot gcc-Ofast aarch64-linux-gnu-gcc -std=c99 -Ofast
      cross_run aarch64 qemu-aarch64 $arm_sysroot clang-O2 clang --target=aarch64-linux-gnu -std=c99 -O2
    fi
    # test_convert also built for a BF16 CPU (-march=armv8.6-a): amp_convert's BFCVTN level, which
    # qemu's default CPU has
    [ "$name" = test_convert ] && cross_run aarch64 qemu-aarch64 $arm_sysroot gcc-bf16 aarch64-linux-gnu-gcc -std=c99 -O2 -march=armv8.6-a
  fi
  if [ "$HAVE_ARMHF" = 1 ]; then
    cross_run armhf qemu-arm $armhf_sysroot gcc-O2 arm-linux-gnueabihf-gcc -std=c99 -O2 -mfpu=neon-vfpv4 -mfloat-abi=hard
  fi
  return 0
}

# 4. CUDA: build for sm_80 and sm_90, link, run where a GPU is present ------------------------
part_cuda() {
  echo "== CUDA $(at)"
  if [ -x "$NVCC" ] || command -v "$NVCC" >/dev/null 2>&1; then
    [ -n "$NVCC_FLAGS" ] || fail "make -s print-nvcc-flags printed nothing"
    # Where no GPU can run the kernels (no nvidia-smi listing one, AMP_REQUIRE_GPU unset), sm_80 is
    # compiled to PTX only: every line still goes through the compiler for compute_80 with the
    # warnings as errors, and ptxas still builds sm_90's SASS of every kernel, but sm_80's ptxas
    # (the longest step of the build: 144 s of one core) runs only where a GPU is (gpu-check).
    plain_flags=$NVCC_FLAGS; plain_what=$NVCC_FLAGS
    nccl_flags=$NVCC_FLAGS; nccl_what="NCCL from $NCCL_HOME"
    if [ "${AMP_REQUIRE_GPU:-0}" != 1 ] && ! { nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
      gen_off=$(echo "$NVCC_FLAGS" | sed 's/-gencode [^ ]*//g')
      plain_flags="$gen_off -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
      plain_what="$plain_flags; no GPU here: sm_80 as PTX only"
      # The -DAMP_NCCL build: the device code only as compute_90 PTX: the same compile of every
      # line with the warnings as errors, and the link (the kernels' SASS is the plain build's).
      nccl_flags="$gen_off -gencode arch=compute_90,code=compute_90"
      nccl_what="$nccl_what; no GPU here: compute_90 PTX only"
    fi
    # AMP_KERNELS_O: an amp_kernels.o that make built just before with the same flags (make
    # gpu-check's first step), copied rather than compiled again where it is newer than its sources.
    # Compiled here, nvcc keeps its compute_90 PTX (--keep) for the two checks below, which read it
    # (the same text as nvcc -arch=compute_90 -ptx gives: one front-end pass fewer).
    rm -rf "$B/nvcc-keep"; rm -f "$B/amp_kernels.ptx"
    if if fresh "${AMP_KERNELS_O:-}"; then
         check "nvcc: amp_kernels.cu ($NVCC_FLAGS; make's $AMP_KERNELS_O)" cp "$AMP_KERNELS_O" "$B/amp_kernels.o"
       else
         mkdir -p "$B/nvcc-keep" &&
         check "nvcc: amp_kernels.cu ($plain_what)" "$NVCC" $plain_flags --keep --keep-dir "$B/nvcc-keep" -I. \
           -c amp_kernels.cu -o "$B/amp_kernels.o"
       fi; then
      if [ -f "$B/nvcc-keep/amp_kernels.compute_90.ptx" ]; then
        mv "$B/nvcc-keep/amp_kernels.compute_90.ptx" "$B/amp_kernels.ptx"
      fi
      rm -rf "$B/nvcc-keep"
      # nvcc fuses a * b + c into an FMA by default: the element functions use the _rn intrinsics so
      # that every loop of the step and unscale kernels rounds as the CPU does. Their PTX must hold
      # no f32 FMA (an FMA there is a product some code left to the compiler).
      check "nvcc: the step and unscale kernels' PTX holds no contracted f32 FMA" sh -c '
        [ -f "$2/amp_kernels.ptx" ] || "$1" -O3 -std=c++17 -arch=compute_90 -ptx -I. amp_kernels.cu -o "$2/amp_kernels.ptx" || exit 1
        awk "/^[.a-z ]*\\.entry /{ on = /amp__cu_step_kernel|amp__cu_unscale_kernel/; if (on) k++ }
             on && /fma\\.rn\\.f32/ { n++ } END { print k \" kernels, \" n + 0 \" f32 FMA\"; exit !(k >= 2 && n == 0) }" \
          "$2/amp_kernels.ptx"' _ "$NVCC" "$B"
      # The f32 form of the step kernel (the form every f32-moment step runs) holds none of the
      # low-precision forms' code: ptxas (those four entries of the PTX above, sm_90) must give each
      # at most 64 registers (4 blocks of 256 threads an SM) and no stack. With every form in one
      # kernel it took 102-104 registers and a 256-byte stack.
      check "ptxas: the f32 form of the step kernel keeps at most 64 registers and no stack (sm_90)" sh -c '
        ptx="$2/amp_kernels.ptx"; px=$(dirname "$(command -v "$1")")/ptxas
        ents=$(grep -o "\.entry _Z19amp__cu_step_kernelILi[0-9]*ELi1EEv[A-Za-z0-9_]*" "$ptx" | sed "s/^\.entry //" | sort -u)
        [ -n "$ents" ] || { echo "no f32-form step kernel in $ptx"; exit 1; }
        "$px" -arch=sm_90 -v $(for e in $ents; do printf -- "-e %s " "$e"; done) "$ptx" -o "$2/step_f32.cubin" 2>&1 |
          awk "/Compiling entry function/ { k++ } /Used [0-9]+ registers/ { r = \$5; if (r + 0 > 64) bad++; if (r + 0 > top) top = r + 0 }
               /bytes stack frame/ && \$1 + 0 > 0 { bad++; stack = \$1 }
               END { print k \" kernels, at most \" top \" registers, stack \" stack + 0; exit !(k >= 4 && !bad) }"' _ "$NVCC" "$B"
      for src in tests/cuda_*.c; do
        [ -e "$src" ] || continue
        name=$(basename "$src" .c)
        obj="$B/amp_kernels.o"; nflags=""; nlibs=""
        # tests/cuda_nccl.c: amp_kernels.cu again with -DAMP_NCCL (nccl_flags above), linked with
        # -lnccl, where NCCL is installed (AMP_KERNELS_NCCL_O: the object make gpu-check's first
        # step built, reused as AMP_KERNELS_O is)
        if [ "$name" = cuda_nccl ] && [ -n "$NCCL_HOME" ] &&
           if fresh "${AMP_KERNELS_NCCL_O:-}"; then
             check "nvcc: amp_kernels.cu with -DAMP_NCCL (make's $AMP_KERNELS_NCCL_O)" cp "$AMP_KERNELS_NCCL_O" \
               "$B/amp_kernels_nccl.o"
           else
             check "nvcc: amp_kernels.cu with -DAMP_NCCL ($nccl_what)" "$NVCC" $nccl_flags -I. $NCCL_CFLAGS \
               -c amp_kernels.cu -o "$B/amp_kernels_nccl.o"
           fi; then
          obj="$B/amp_kernels_nccl.o"; nflags=$NCCL_CFLAGS; nlibs=$NCCL_LIBS
        fi
        if gcc -std=c99 -O2 $WARN -DAMP_CUDA $nflags -I. -isystem "$CUDA_HOME/include" "$src" "$obj" -o "$B/$name" \
             -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" $nlibs -lcudart -lcublasLt -lcublas -lstdc++ -lm -lpthread 2>"$B/$name.cc.log"; then
          pass "$name: links against amp_kernels.o"
          runtest "$name" "$B/$name"
        else
          fail "$name: link"; sed 's/^/    /' "$B/$name.cc.log" | head -n 30
        fi
      done
    fi
  else
    fail "nvcc not found (set NVCC=)"
  fi
}

# 5. fuzzing -----------------------------------------------------------------------------------
part_fuzz() {
  for src in tests/fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    name=$(basename "$src" .c)
    echo "== $name (${FUZZ_SECONDS}s) $(at)"
    corpus="tests/fuzz/corpus_${name#fuzz_}"
    mkdir -p "$B/$name.corpus"
    if clang -g -O1 -fsanitize=fuzzer,address,undefined -I. "$src" -o "$B/$name" -lm 2>"$B/$name.cc.log"; then
      check "$name: ${FUZZ_SECONDS}s of libFuzzer, no crash or leak" "$B/$name" -max_total_time="$FUZZ_SECONDS" \
        -timeout=10 -rss_limit_mb=1024 -artifact_prefix="$B/$name-" "$B/$name.corpus" "$corpus"
    else
      fail "$name: build"; sed 's/^/    /' "$B/$name.cc.log" | head -n 20
    fi
  done
}

# 6. the examples ------------------------------------------------------------------------------
part_examples() {
  [ -f tests/examples.sh ] || return 0
  echo "== examples $(at)"
  . tests/examples.sh
}

# 7. other compilers and targets ---------------------------------------------------------------
# The numbered examples (each checks its own claims) built for AArch64 (gcc -O2, and clang -O2) and
# armhf (gcc -O2) and run under qemu-user: their output and the SVGs they write must be the x86
# build's, byte for byte (none uses the product, whose AUTO kernels differ between CPUs by design).
# The examples' own loops are compared too (06's dot product, outside amp.h): gcc -std=c99 never
# fuses a * b + c into an FMA, clang does by default on AArch64 (-ffp-contract=on), so its build
# says -ffp-contract=off, the flag the x86 build and gcc's have in effect. AArch64 gcc -Ofast and
# clang -Ofast builds must pass too (fast-math lets the examples' own loops round differently, so
# their digits are not compared; amp.h's bits under -Ofast are the unit tests' to check).
# cross_examples TARGET TAG QEMU SYSROOT CC...: TAG names a second compiler's build in the checks
# (empty for the first); the x86 build of each example is made once per target, for all its TAGs.
cross_examples() {
  target=$1; tag=$2; qemu=$3; sysroot=$4; shift 4
  LAST="$B/examples-$target.last.log"
  for ex in 01_number_lines 02_master_weights 03_loss_scaling 04_dynamic_scaler 05_policy 06_drop_in_fp32 \
            06_drop_in_amp 07_fp8; do
    d="$B/examples-$target${tag:+-$tag}"; dx="$B/examples-x86-$target"   # (each target its own x86 build: they run side by side)
    mkdir -p "$d" "$dx"
    arg=""; case $ex in 03*|04*|07*) arg=DIR ;; 05*) arg=examples/mixlist.json ;; esac
    # -Ofast: the example's own float code (its model, its loss) may round differently on each
    # target under fast-math, so such a build must pass (its claims hold), not print the same digits
    same=1; what="passes, prints and writes what the x86 build does"
    case $tag in *Ofast*) same=0; what="passes (its claims hold)" ;; esac
    check "example $ex on $target${tag:+ ($tag)} under qemu: $what" sh -c '
      ex=$1; d=$2; dx=$3; arg=$4; qemu=$5; sysroot=$6; same=$7; shift 7
      if [ ! -f "$dx/$ex.cmp" ]; then
        gcc -std=c99 -O2 '"$WARN"' -I. "examples/$ex.c" -o "$dx/$ex" -lm || exit 1
        a=$arg; [ "$arg" = DIR ] && a=$dx
        "$dx/$ex" $a > "$dx/$ex.out" 2>&1 || { echo "x86 build failed"; cat "$dx/$ex.out"; exit 1; }
        sed "s|$dx|DIR|g" "$dx/$ex.out" > "$dx/$ex.cmp"
      fi
      "$@" '"$WARN"' -I. "examples/$ex.c" -o "$d/$ex" -lm || exit 1
      a=$arg; [ "$arg" = DIR ] && a=$d
      QEMU_LD_PREFIX=$sysroot $qemu "$d/$ex" $a > "$d/$ex.out" 2>&1 || { echo "failed under qemu"; cat "$d/$ex.out"; exit 1; }
      [ "$same" = 1 ] || exit 0
      sed "s|$d|DIR|g" "$d/$ex.out" > "$d/$ex.cmp"
      diff "$dx/$ex.cmp" "$d/$ex.cmp" || exit 1
      for f in "$d"/*.svg; do [ -e "$f" ] || continue; cmp "$dx/${f##*/}" "$f" || exit 1; done' _ \
      "$ex" "$d" "$dx" "$arg" "$qemu" "$sysroot" "$same" "$@"
  done
}
# part_cross_examples TARGET: the examples on aarch64 or armhf, where its tools are installed.
part_cross_examples() {
  rm -rf "$B/examples-$1" "$B/examples-$1-"* "$B/examples-x86-$1"
  if [ "$1" = aarch64 ] && [ "$HAVE_ARM" = 1 ]; then
    echo "== the examples on AArch64 under qemu-user $(at)"
    cross_examples aarch64 "" qemu-aarch64 "$arm_sysroot" aarch64-linux-gnu-gcc -std=c99 -O2
    cross_examples aarch64 clang-O2 qemu-aarch64 "$arm_sysroot" clang --target=aarch64-linux-gnu -std=c99 -O2 \
      -ffp-contract=off
    cross_examples aarch64 gcc-Ofast qemu-aarch64 "$arm_sysroot" aarch64-linux-gnu-gcc -std=c99 -Ofast
    cross_examples aarch64 clang-Ofast qemu-aarch64 "$arm_sysroot" clang --target=aarch64-linux-gnu -std=c99 -Ofast
  fi
  if [ "$1" = armhf ] && [ "$HAVE_ARMHF" = 1 ]; then
    echo "== the examples on armhf under qemu-user $(at)"
    cross_examples armhf "" qemu-arm "$armhf_sysroot" arm-linux-gnueabihf-gcc -std=c99 -O2 -mfpu=neon-vfpv4 -mfloat-abi=hard
  fi
}

# tcc (no thread-local storage: AMP_THREAD_LOCAL). (AArch64 under qemu-user: each test's matrix above.)
part_other() {
  echo "== other compilers: tcc, clang++ for AArch64 $(at)"
  if command -v tcc >/dev/null 2>&1; then
    check "tcc: the implementation builds and test_scaler runs" sh -c "tcc -I. tests/test_scaler.c -o $B/test_scaler.tcc -lm -lpthread && $B/test_scaler.tcc"
  else
    echo "skipped: tcc (not installed)"
  fi
  # amp.h as C++ for AArch64 (compiled, not run: Debian's cross packages here have no AArch64
  # libstdc++, so the C library's headers stand in for the C++ ones, -nostdinc++)
  if [ "$HAVE_ARM" = 1 ]; then
    printf '#define AMP_IMPLEMENTATION\n#include "amp.h"\nint main(void){ return amp_f32_to_f16(1.0f) == 0x3c00 ? 0 : 1; }\n' > "$B/impl-a64.cpp"
    for f in -O2 -Ofast; do
      check "compile: clang++ -x c++ for AArch64 $f" sh -c "clang++ --target=aarch64-linux-gnu -nostdinc++ -x c++ -std=c++11 $f $WARN -I. -c $B/impl-a64.cpp -o $B/impl-a64pp.o"
    done
  fi
}

# ---- the run -----------------------------------------------------------------------------------
# make test runs its parts (the header matrix, each test file's matrix, CUDA and then the examples,
# which link CUDA's objects, the fuzzing, the examples on each other target, the other compilers)
# nproc at a time (AMP_TEST_JOBS=N), the longest first, each in a child `sh tests/run.sh` with
# AMP__PART=PART writing its own log, and shows the logs in the order of the steps above once all
# are done. A part's builds run one after the other: they share the files it writes under build/test.
part_log() { case $1 in tests/*) echo "$B/$(basename "$1" .c).matrix.log" ;; *) echo "$B/part-$1.log" ;; esac; }
if [ -n "${AMP__PART:-}" ]; then   # a child: one part into its log, then its counts for the parent
  t0=$(date +%s)
  exec 3>&1 > "$(part_log "$AMP__PART")" 2>&1   # fd 3: the pool's output, for the done line alone
  {
    case $AMP__PART in
      tests/*) LAST="$B/$(basename "$AMP__PART" .c).last.log"; matrix "$AMP__PART" ;;
      cuda) LAST="$B/cuda.last.log"; part_cuda; part_examples ;;
      examples-*) part_cross_examples "${AMP__PART#examples-}" ;;
      header|fuzz|other) LAST="$B/$AMP__PART.last.log"; part_$AMP__PART ;;
      *) fail "tests/run.sh: no part $AMP__PART" ;;
    esac
  } 3>&-   # (what the part runs does not hold the pool's output open)
  echo "MATRIX $PASS $FAIL$FAILED"
  echo "   done $AMP__PART in $(( $(date +%s) - t0 )) s, at $(( $(date +%s) - T0 )) s" >&3
  exit 0
fi
in_list() { x=$1; shift; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }
if { [ -z "$ONLY" ] && [ "$SLOW_CPU" = 1 ]; } || [ "$ONLY" = other ]; then
  [ "$ONLY" = other ] && echo "== other compilers and targets: AArch64 and armhf under qemu-user"
  [ "$HAVE_ARM" = 0 ] && echo "skipped: AArch64 under qemu-user (install qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"
  [ "$HAVE_ARMHF" = 0 ] && echo "skipped: armhf under qemu-user (install qemu-user gcc-arm-linux-gnueabihf libc6-dev-armhf-cross)"
  JOBS=${AMP_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
  tests=$(echo tests/test_*.c)
  # the longest first (CUDA with the examples, the examples on ARM, the header matrix, the fuzzing:
  # 4-15 minutes each on 2 cores; then the tests, 2-6 each); AMP_TEST_ONLY=other: the tests'
  # AArch64 and armhf builds, the examples there, the other compilers
  first="cuda examples-aarch64 examples-armhf header fuzz"; last="other"
  [ "$ONLY" = other ] && first="examples-aarch64 examples-armhf"
  echo "== make test's parts, $JOBS at a time (each part's log is shown when all are done) $(at)"
  for p in $first $tests $last; do rm -f "$(part_log "$p")"; done   # no earlier run's counts
  for p in $first $tests $last; do echo "$p"; done |
    B=$B AMP__T0=$T0 AMP_TEST_ONLY=$ONLY xargs -P "$JOBS" -I{} env AMP__PART={} sh tests/run.sh
  shown=0
  for p in header $tests cuda fuzz examples-aarch64 examples-armhf other; do
    in_list "$p" $first $tests $last || continue
    shown=$((shown + 1))
    log=$(part_log "$p")
    grep -v '^MATRIX ' "$log"
    counts=$(grep '^MATRIX ' "$log" | tail -n 1)
    if [ -z "$counts" ]; then fail "$p: its part ended without counts"; continue; fi
    set -- $counts
    PASS=$((PASS + $2)); FAIL=$((FAIL + $3)); shift 3
    for f in "$@"; do FAILED="$FAILED $f"; done
  done
  set -- $first $tests $last
  [ "$shown" -eq $# ] || fail "tests/run.sh: $# parts ran, the counts of $shown were added"
else   # a part alone (AMP_TEST_ONLY), or without the slow CPU steps (AMP_TEST_SKIP_SLOW_CPU=1): in order
  for src in tests/test_*.c; do
    name=$(basename "$src" .c)
    [ -z "$ONLY" ] || [ "$name" = "test_$ONLY" ] || [ "$name" = "$ONLY" ] || continue
    matrix "$src"
  done
  if [ -z "$ONLY" ] || [ "${ONLY#cuda}" != "$ONLY" ] || [ "$ONLY" = gpu ]; then part_cuda; fi
  if [ -z "$ONLY" ] || [ "$ONLY" = gpu ]; then part_examples; fi
fi

echo
echo "make test took $(( $(date +%s) - T0 )) s"
[ -n "$FAILED" ] && echo "failed:$FAILED"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
