#!/usr/bin/env python3
"""bench/torch_ref.py - PyTorch reference figures for `make bench-gpu`.

Prints `key value` lines on stdout (build/torch_ref.txt), which bench/bench.h's bench_ref(key)
reads. One function per benchmark group; main() runs every function in GROUPS. Without torch or
without a CUDA device it prints nothing and exits 0.
"""
import statistics
import sys


def cuda_time(fn, min_seconds=0.02, reps=7, warmup=3):
    """Median seconds of one fn() call: warm-up, then reps timed batches (cudaEvent) of enough
    calls to last >= min_seconds."""
    import torch
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); fn(); stop.record(); stop.synchronize()
    one = max(start.elapsed_time(stop) * 1e-3, 1e-6)
    iters = int(min_seconds / one) + 1
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(iters):
            fn()
        stop.record(); stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3 / iters)
    return statistics.median(times)


def gemm_group(out):
    """torch.matmul, row-major C = A B in f16 and bf16: TFLOP/s (bench/gpu_gemm.c's shapes)."""
    import torch
    shapes = [("1024", 1024, 1024, 1024), ("4096", 4096, 4096, 4096),
              ("8192", 8192, 8192, 8192), ("16x4096x4096", 16, 4096, 4096)]
    for dname, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        for name, m, n, k in shapes:
            a = torch.rand(m, k, device="cuda", dtype=dtype) * 2 - 1
            b = torch.rand(k, n, device="cuda", dtype=dtype) * 2 - 1
            c = torch.empty(m, n, device="cuda", dtype=dtype)
            sec = cuda_time(lambda: torch.matmul(a, b, out=c))
            out(f"torch_matmul_{dname}_{name}", 2.0 * m * n * k / sec * 1e-12)
            del a, b, c
    torch.cuda.empty_cache()


# Other groups append their function here.
GROUPS = [gemm_group]


def main():
    try:
        import torch
        if not torch.cuda.is_available():
            return 0
    except Exception:
        return 0

    def out(key, value):
        print(f"{key} {value:.6g}", flush=True)

    for group in GROUPS:
        try:
            group(out)
        except Exception as e:  # one group failing must not lose the others' figures
            print(f"torch_ref.py: {group.__name__}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
