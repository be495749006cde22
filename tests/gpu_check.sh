#!/bin/sh
# tests/gpu_check.sh - `make gpu-check`: everything that needs an NVIDIA GPU, in one go.
#
#   0. the machine: nvidia-smi must list a GPU (else this stops at once, nothing built);
#   1. build: amp_kernels.o with the Makefile's NVCC_FLAGS (warnings as errors), and the benchmarks
#      and the CUDA demo that steps 4 and 5 run (in parallel);
#   2. AMP_REQUIRE_GPU=1 AMP_TEST_ONLY=gpu make test: the CUDA build, every tests/cuda_* program (a
#      GPU test that cannot run counts as a failure), NCCL where the Makefile finds it (NCCL_HOME:
#      the toolkit, /usr, or the NCCL beside PyTorch) and the examples that use a GPU; the CPU tests
#      are left out (CI runs them on every change, and a GPU's minutes are few);
#   3. compute-sanitizer memcheck (with leak check), racecheck, synccheck and initcheck over every
#      tests/cuda_* program that step 2 built (eight at a time; AMP_TEST_QUICK=1 sizes);
#      The fp8 product's GPU tests are named in the output (which ran, which were skipped): the
#      plain kernel's bits, cuBLASLt per-tensor within the bound, cuBLASLt's block-scaled modes
#      (1 x 128 / 128 x 128, Hopper with cuBLAS 12.9+; elsewhere the plain kernel, the same test)
#      and fp8_fast_accum (a sanity bound, and the largest error seen); so are the bf16, 8-bit and
#      fp8 moments' (the CPU's bits);
#   4. make bench-gpu (PyTorch measured first, in the same run); the fp8 lines are listed apart:
#      gemm_e4m3[_fast] against torch._scaled_mm (use_fast_accum off / on), gemm_e4m3_blk128
#      against our per-tensor product (near 1x: cuBLASLt's block-scaled kernels ran; far below:
#      the plain kernel did, cuBLASLt had no algorithm), the fp8 MLP step against f16 AMP and bf16;
#   5. make demo-gpu (the built-in synthetic set where Fashion-MNIST is absent).
# Step 1's nvcc builds of amp_kernels.cu are most of its time (ptxas, several CPU minutes each):
# `make gpu-prebuild` (this script with the argument prebuild, no GPU needed) builds the two objects
# on any machine with the same CUDA toolkit and writes beside each a key, the hash of what it was
# built from (amp_kernels.cu, amp_kernels.h, amp.h, nvcc's version and flags, NCCL's flags and
# nccl.h). Carried to the GPU machine (build/amp_kernels.o, build/amp_kernels_nccl.o and their .key
# files), an object whose key matches what is there is used as built (made newer than its sources
# for make); one whose key does not is removed, and step 1 builds it.
# Each step has a time limit, cut to what is left of GPU_CHECK_BUDGET seconds (default 530) after
# the time kept for the steps after it, so the whole stays under 9 minutes. Logs go to $OUT when it is set,
# else to build/gpu-check: env.log, build.log, test.log, cuda_tests.log (every CUDA test program's
# output), sanitize.log, bench.log, demo.log, summary.log (8 files). The last line printed is the summary. Nothing is downloaded.
set -u
cd "$(dirname "$0")/.." || exit 1
# gpu_key OBJECT: the hash of what OBJECT (build/amp_kernels.o or build/amp_kernels_nccl.o) is built from
gpu_key() {
  {
    cat amp_kernels.cu amp_kernels.h amp.h
    make -s print-nvcc-flags
    ${NVCC:-nvcc} --version 2>&1
    if [ "$1" = build/amp_kernels_nccl.o ]; then
      make -s print-nccl-cflags
      h=$(make -s print-nccl-home); [ -n "$h" ] && cat "$h/include/nccl.h"
    fi
  } | sha256sum | cut -d' ' -f1
}
KOBJS="build/amp_kernels.o $([ -n "$(make -s print-nccl-home)" ] && echo build/amp_kernels_nccl.o)"
if [ "${1:-}" = prebuild ]; then   # make gpu-prebuild: the objects and their keys, no GPU needed
  mkdir -p build || exit 1
  # shellcheck disable=SC2086
  make -j"$(nproc)" $KOBJS || exit 1
  for o in $KOBJS; do gpu_key "$o" > "$o.key" || exit 1; done
  echo "gpu-prebuild: built $KOBJS with their keys; carry them and their .key files to the GPU machine for make gpu-check"
  exit 0
fi
LOG=${OUT:-build/gpu-check}
mkdir -p "$LOG" build/gpu-check || exit 1
T0=$(date +%s)
SUMMARY=""
BAD=0
now() { date +%s; }
BUDGET=${GPU_CHECK_BUDGET:-530}
# cap LIMIT RESERVE: LIMIT seconds, or what is left of the budget after RESERVE seconds, at least 10.
# LIMIT and RESERVE are sized for the default budget of 530 s and scale with a smaller one (a fixed
# reserve once left a 440 s budget's build 54 s, too few for nvcc, and every later step starved).
cap() {
  l=$1; r=$2
  if [ "$BUDGET" -lt 530 ]; then l=$(( l * BUDGET / 530 )); r=$(( r * BUDGET / 530 )); fi
  c=$(( T0 + BUDGET - $(now) - r )); [ "$c" -gt "$l" ] && c=$l; [ "$c" -lt 10 ] && c=10; echo "$c"
}
note() { SUMMARY="$SUMMARY $1"; }   # one word per step: name=ok|FAIL(...)

# 0. a GPU, or stop here --------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "host: $(uname -srm), $(nproc 2>/dev/null) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>&1 | sed 's/^/compute capability: /'
  ${NVCC:-nvcc} --version 2>&1 | tail -n 2
  # cuBLASLt's block-scaled fp8 needs cuBLAS 12.9 or newer at build time (and sm_90 at run time)
  grep -h '^#define CUBLAS_VER_\(MAJOR\|MINOR\|PATCH\)' "${CUDA_HOME:-/usr/local/cuda}/include/cublas_api.h" 2>&1 | tr '\n' ' '; echo
  command -v compute-sanitizer && compute-sanitizer --version 2>&1 | tail -n 1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  # what make test needs besides nvcc: a missing piece here explains a failure further down
  for t in gcc make python3 nvidia-smi compute-sanitizer; do command -v "$t" >/dev/null 2>&1 || echo "MISSING: $t"; done
  printf '#include <zlib.h>\nint main(void){return !zlibVersion();}\n' > build/gpu-check/zlib.c
  gcc build/gpu-check/zlib.c -o build/gpu-check/zlib -lz >/dev/null 2>&1 || echo "MISSING: zlib (zlib.h and -lz: the trainer examples and make demo-gpu need them)"
  echo "NCCL_HOME: $(make -s print-nccl-home)"; [ -n "$(make -s print-nccl-home)" ] || echo "note: no NCCL found: tests/cuda_nccl.c builds without it"
} > "$LOG/env.log" 2>&1
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu-check: FAIL: no NVIDIA GPU here (nvidia-smi lists none); make gpu-check is for a machine with one, make test checks the rest" |
    tee "$LOG/summary.log"
  exit 2
fi
if ! command -v compute-sanitizer >/dev/null 2>&1; then
  echo "gpu-check: FAIL: compute-sanitizer is not on PATH (it comes with the CUDA toolkit: add its bin/ to PATH)" | tee "$LOG/summary.log"
  exit 2
fi
cat "$LOG/env.log"

# run_step NAME LIMIT LOGFILE CMD...: runs CMD under a time limit, output to LOGFILE; notes the outcome.
run_step() {
  rname=$1; rlimit=$2; rlog=$3; shift 3
  rt=$(now)
  echo "== $rname (limit ${rlimit}s) -> $rlog"
  timeout -k 10 "$rlimit" "$@" > "$rlog" 2>&1
  rrc=$?
  rt=$(( $(now) - rt ))
  if [ $rrc -eq 0 ]; then note "$rname=ok(${rt}s)"; echo "   ok (${rt}s)"; return 0; fi
  BAD=1
  if [ $rrc -eq 124 ] || [ $rrc -eq 137 ]; then note "$rname=FAIL(time-limit-${rlimit}s)"; else note "$rname=FAIL(exit-$rrc,${rt}s)"; fi
  echo "   FAILED (exit $rrc after ${rt}s); the end of $rlog:"; tail -n 25 "$rlog" | sed 's/^/   /'
  return 1
}

# 1. build ----------------------------------------------------------------------------------------
# objects carried from make gpu-prebuild: used where their keys match, else removed and rebuilt
for o in $KOBJS; do
  [ -f "$o.key" ] || continue
  if [ -f "$o" ] && [ "$(cat "$o.key")" = "$(gpu_key "$o")" ]; then
    touch "$o"; echo "== $o: carried, its key matches this tree and toolkit: used as built"; note "carried:$o"
  else
    rm -f "$o" "$o.key"; echo "== $o: its key does not match this tree or toolkit: built again"
  fi
done
run_step build "$(cap 150 380)" "$LOG/build.log" sh -c \
  'make -s print-nvcc-flags && make -j"$(nproc)" '"$KOBJS"' build/train_mlp_cuda $(ls bench/gpu_*.c bench/gpu_*.cu 2>/dev/null | sed "s|bench/\(.*\)\.cu*$|build/\1|")'

# 2. the tests, a GPU required --------------------------------------------------------------------
# (tests/run.sh itself: make test's check of the CPU tests' Debian packages does not apply here)
# (the objects step 1 built with the same flags are reused: two nvcc runs of amp_kernels.cu fewer)
run_step test "$(cap 360 150)" "$LOG/test.log" env AMP_REQUIRE_GPU=1 AMP_TEST_ONLY=gpu AMP_KERNELS_O=build/amp_kernels.o \
  AMP_KERNELS_NCCL_O=build/amp_kernels_nccl.o \
  sh tests/run.sh
grep -E '^(failed:|[0-9]+ passed, [0-9]+ failed)' "$LOG/test.log" | tail -n 2 | sed 's/^/   /'
# the fp8 product's and the low-precision moments' GPU tests, each by name (program:test; ok / FAIL
# / absent: tests/run.sh keeps each program's own output in build/test/NAME.log, copied beside the
# logs), and fast accumulation's record
for pt in cuda_gemm:fp8_plain_kernel_gives_the_cpus_bits cuda_gemm:fp8_cublaslt_matches_cpu_within_the_bound \
          cuda_gemm:fp8_block_scales_on_the_device_give_the_cpus_bits cuda_gemm:fp8_block_scaled_cublaslt_within_the_bound \
          cuda_gemm:fp8_fast_accum_is_opt_in_and_sane cuda_amp:bf16_moments_on_gpu_are_the_cpus_bits \
          cuda_amp:eight_bit_moments_on_gpu_are_the_cpus_bits cuda_amp:fp8_moments_on_gpu_are_the_cpus_bits \
          cuda_amp:mixed_moment_forms_on_gpu_are_the_cpus_bits; do
  p=${pt%%:*}; t=${pt#*:}
  line=$(grep -E "^(ok|FAIL) +$t\b" build/test/$p.log 2>/dev/null | tail -n 1)
  echo "   ${line:-absent $t}"
  case $line in ok*) ;; *) note "$t=${line%% *}";; esac
done
grep -E '(fp8_fast_accum 1|fp8 per-tensor|fp8 block-scaled): largest' build/test/cuda_gemm.log 2>/dev/null | sed 's/^/   /'
# every CUDA test program's own output in one file (what comes back from a device machine is at
# most 8 files: env, build, test, cuda_tests, sanitize, bench, demo and summary)
for f in build/test/cuda_*.log; do
  case $f in *.cc.log) continue;; esac
  [ -f "$f" ] && { echo "==== $f"; cat "$f"; echo; }
done > "$LOG/cuda_tests.log" 2>/dev/null

# 3. compute-sanitizer over every tests/cuda_* program, eight runs at a time ------------------------
rt=$(now)
: > "$LOG/sanitize.log"
rm -f build/gpu-check/cuda_*.log build/gpu-check/cuda_*.log.verdict
jobs=""
for src in tests/cuda_*.c; do
  prog=build/test/$(basename "$src" .c)
  if [ ! -x "$prog" ]; then echo "$prog: not built by make test" >> "$LOG/sanitize.log"; BAD=1; jobs="$jobs missing:$prog"; continue; fi
  for tool in memcheck racecheck synccheck initcheck; do jobs="$jobs $prog:$tool"; done
done
SAN_LIMIT=$(cap 150 120)
echo "== sanitize (limit ${SAN_LIMIT}s a run, 8 at a time) -> $LOG/sanitize.log"
# one run: the tool's verdict (--error-exitcode) and the program's own RESULT line must both be clean
printf '%s\n' $jobs | grep -v '^missing:' | SAN_LIMIT=$SAN_LIMIT xargs -P 8 -I{} sh -c '
  prog=${1%%:*}; tool=${1##*:}; out=build/gpu-check/$(basename "$prog").$tool.log
  extra=""; [ "$tool" = memcheck ] && extra="--leak-check full"
  # NCCL probes for kernel images of other GPUs at its start (cudaFuncGetAttributes failing with
  # error 209 inside libnccl, handled there): API errors are not reported for the NCCL program
  case $prog in *cuda_nccl) extra="$extra --report-api-errors no";; esac
  timeout -k 10 "$SAN_LIMIT" env AMP_TEST_QUICK=1 AMP_REQUIRE_GPU=1 compute-sanitizer --tool "$tool" $extra --error-exitcode 99 "$prog" > "$out" 2>&1
  rc=$?
  clean=0; grep -q "^RESULT [0-9]* passed, 0 failed" "$out" && clean=1
  if [ $rc -eq 0 ] && [ $clean -eq 1 ]; then echo "ok" > "$out.verdict"
  # a program that made no CUDA call (cuda_nccl built without NCCL) leaves the tool nothing to check
  elif [ $clean -eq 1 ] && grep -q "terminated before first instrumented API call" "$out"; then echo "ok" > "$out.verdict"
  else echo "FAIL (exit $rc)" > "$out.verdict"; fi
' _ {}
clean=0; total=0; dirty=""
for j in $jobs; do
  case $j in missing:*) total=$((total + 1)); dirty="$dirty ${j#missing:}"; continue;; esac
  prog=${j%%:*}; tool=${j##*:}; out=build/gpu-check/$(basename "$prog").$tool.log
  total=$((total + 1))
  verdict=$(cat "$out.verdict" 2>/dev/null || echo "FAIL (no verdict)")
  { echo "==== $(basename "$prog") under compute-sanitizer $tool: $verdict"; cat "$out" 2>/dev/null; echo; } >> "$LOG/sanitize.log"
  if [ "$verdict" = ok ]; then clean=$((clean + 1)); else dirty="$dirty $(basename "$prog"):$tool"; fi
done
rt=$(( $(now) - rt ))
if [ "$clean" -eq "$total" ] && [ "$total" -gt 0 ]; then note "sanitize=ok($clean/$total,${rt}s)"; echo "   ok: $clean of $total runs clean (${rt}s)"
else BAD=1; note "sanitize=FAIL($clean/$total-clean,${rt}s)"; echo "   FAILED: $clean of $total runs clean; not clean:$dirty"; fi

# 4. benchmarks against PyTorch, 5. the demo -------------------------------------------------------
# GPU_CHECK_SKIP_BENCH=1 leaves the benchmarks out (a rerun after a fix, when their figures are in)
if [ -n "${GPU_CHECK_SKIP_BENCH:-}" ]; then note "bench=skipped"; else
run_step bench "$(cap 180 45)" "$LOG/bench.log" env PYTHONUNBUFFERED=1 make bench-gpu &&
  grep -v -E '^(make|cc |gcc |nvcc |/)' "$LOG/bench.log" | head -n 60 | sed 's/^/   /'
# the fp8 lines (a benchmark never fails the check: a missing line is noted, e.g. a torch without
# _scaled_mm prints no torch line)
echo "   fp8 lines:"
grep -E '^(gemm_e4m3|mlp .*fp8|fp8 casts)' "$LOG/bench.log" | sed 's/^/     /'
for l in 'gemm_e4m3_4096 vs' 'gemm_e4m3_fast_4096 vs' 'gemm_e4m3_blk128_4096' 'train step, fp8 vs f16'; do
  grep -q "$l" "$LOG/bench.log" || note "bench-line-missing:$(echo "$l" | tr ' ' '_')"
done
fi
run_step demo "$(cap 60 0)" "$LOG/demo.log" env AMP_REQUIRE_GPU=1 make demo-gpu && tail -n 6 "$LOG/demo.log" | sed 's/^/   /'

total_s=$(( $(now) - T0 ))
if [ $BAD -eq 0 ]; then verdict=PASS; else verdict=FAIL; fi
echo "gpu-check: $verdict in ${total_s}s:$SUMMARY (logs in $LOG)" | tee "$LOG/summary.log"
[ $BAD -eq 0 ]
