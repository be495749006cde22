#!/usr/bin/env python3
"""bench/torch_ref.py - PyTorch reference figures for `make bench-gpu`.

Prints `key value` lines on stdout (build/torch_ref.txt), which bench/bench.h's bench_ref(key)
reads. One function per benchmark group; main() runs every function in GROUPS. Without torch or
without a CUDA device it prints nothing and exits 0. `--serve-matmul` instead answers
bench/gpu_gemm.c's requests one by one (serve_matmul).
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


def serve_matmul():
    """`torch_ref.py --serve-matmul`: bench/gpu_gemm.c's peer, run beside it. Reads lines
    `f16|bf16|e4m3|e4m3fast m n k` on stdin; for each, times torch.matmul(a, b, out=c) row-major in that dtype
    (e4m3: torch._scaled_mm(a, b.t()) with a m x k and b n x k row-major E4M3, scales 1 on the
    device, a bf16 result, use_fast_accum off: amp_gemm_ex's fp8 layer forward, same arguments;
    e4m3fast: the same with use_fast_accum on, against opts->fp8_fast_accum 1)
    (cuda_time: warm-up, then the median of 7 timed batches) and prints one line, its TFLOP/s
    called eagerly from Python, then its TFLOP/s replayed from a CUDA graph of 20 products (Python's
    dispatch taken out; 0 0 without torch or a CUDA device). gpu_gemm alternates its own figure and this one, round
    after round, so that both sides see the GPU in the same state."""
    try:
        import torch
        ok = torch.cuda.is_available()
    except Exception:
        ok = False
    cache = {}
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 4 or not ok:
            print("0 0", flush=True)
            continue
        dname, m, n, k = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
        dtype = torch.float16 if dname == "f16" else torch.bfloat16
        key = (dname, m, n, k)
        if key not in cache:
            cache.clear()
            torch.cuda.empty_cache()
            if dname in ("e4m3", "e4m3fast"):
                a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
                b = (torch.rand(n, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
                one = torch.ones((), device="cuda")
                fast = dname == "e4m3fast"
                cache[key] = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                      use_fast_accum=fast)
            else:
                a = torch.rand(m, k, device="cuda", dtype=dtype) * 2 - 1
                b = torch.rand(k, n, device="cuda", dtype=dtype) * 2 - 1
                c = torch.empty(m, n, device="cuda", dtype=dtype)
                cache[key] = lambda: torch.matmul(a, b, out=c)
        product = cache[key]
        flop = 2.0 * m * n * k
        try:
            sec = cuda_time(product)
        except Exception:   # a torch without _scaled_mm, or a GPU without fp8
            print("0 0", flush=True)
            continue
        # the same product with Python's per-call dispatch taken out: 20 products captured in one
        # CUDA graph (torch.cuda.graph), the replay timed and divided by 20
        try:
            g = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    product()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(g):
                for _ in range(20):
                    product()
            gsec = cuda_time(g.replay) / 20
        except Exception:
            gsec = 0
        print(f"{flop / sec * 1e-12:.6g} {flop / gsec * 1e-12 if gsec > 0 else 0:.6g}", flush=True)


def _time(torch, fn, iters):
    """Median seconds per call over 7 runs of `iters` calls, timed with CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / iters)
    times.sort()
    return times[3]


def optim_group(out):
    """Unscale, mixed AdamW, and a 500-small-tensor step, as bench/gpu_optim.c measures them
    (256M f16 elements in 256 tensors; rates are effective bandwidth counted as the C side does)."""
    import torch
    total, k = 256 << 20, 256
    n = total // k
    dev = "cuda"

    # device copy, 1 GiB each way
    src = torch.empty(total, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    t = _time(torch, lambda: dst.copy_(src), 10)
    out("copy_gbps", 2.0 * total * 4 / t / 1e9)
    del src, dst

    # GradScaler's unscale: torch._amp_foreach_non_finite_check_and_unscale_ on f16 grads
    grads = [torch.full((n,), 0.5, dtype=torch.float16, device=dev) for _ in range(k)]
    found_inf = torch.zeros(1, dtype=torch.float32, device=dev)
    inv = torch.ones(1, dtype=torch.float32, device=dev)   # x * 1: the grads stay as they are
    t = _time(torch, lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv), 20)
    out("unscale_f16_gbps", 2.0 * total / t / 1e9)

    # the mixed AdamW step PyTorch users write: f16 grads cast into fp32 master grads, fused AdamW
    # on the fp32 master, master copied back into the f16 model (rate at 28 B/param, as the C side)
    model = [torch.full((n,), 0.25, dtype=torch.float16, device=dev) for _ in range(k)]
    master = [m.float().requires_grad_() for m in model]
    for p in master:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(master, lr=1e-3, weight_decay=1e-2, fused=True)
    mg = [p.grad for p in master]

    def adamw_step():
        torch._foreach_copy_(mg, grads)
        opt.step()
        torch._foreach_copy_(model, master)
    t = _time(torch, adamw_step, 10)
    out("adamw_mixed_gbps", 28.0 * total / t / 1e9)
    del opt, master, mg, model, grads

    # 500 small tensors: one whole step with the scaler (unscale, clip, AdamW, update). Three ways:
    # as a user writes it (fused AdamW, eager), with capturable=True (the step count on the device),
    # and that step captured in a CUDA graph and replayed (PyTorch's best practice for small tensors).
    def small_setup(capturable):
        small = [torch.full((4096,), 0.5, dtype=torch.float16, device=dev) for _ in range(500)]
        sp = [s.float().requires_grad_() for s in small]
        for p in sp:
            p.grad = torch.zeros_like(p)
        sopt = torch.optim.AdamW(sp, lr=1e-3, weight_decay=1e-2, fused=True, capturable=capturable)
        sg = [torch.full((4096,), 0.5, dtype=torch.float16, device=dev) for _ in range(500)]
        spg = [p.grad for p in sp]
        scale = torch.full((1,), 65536.0, device=dev)
        tracker = torch.zeros(1, dtype=torch.int32, device=dev)
        fi = torch.zeros(1, dtype=torch.float32, device=dev)

        def small_step():
            fi.zero_()
            torch._foreach_copy_(spg, sg)
            torch._amp_foreach_non_finite_check_and_unscale_(spg, fi, inv)
            torch.nn.utils.clip_grad_norm_(sp, 1.0, foreach=True)
            sopt.step()   # GradScaler.step would read found_inf on the host here; fused AdamW takes it on device
            torch._foreach_copy_(small, sp)
            torch._amp_update_scale_(scale, tracker, fi, 2.0, 0.5, 2000)
        return small_step

    step = small_setup(False)
    out("adamw_500_small_us", _time(torch, step, 200) * 1e6)
    try:   # where an eager step's time goes: the top operators by host time, on stderr (the bench log)
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print("torch_ref.py: one eager 500-tensor step, 5 steps profiled, top operators by host time:\n" +
              prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8), file=sys.stderr)
    except Exception as e:
        print(f"torch_ref.py: profiler: {e}", file=sys.stderr)
    step = small_setup(True)
    out("adamw_500_small_capturable_us", _time(torch, step, 200) * 1e6)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    out("adamw_500_small_graph_us", _time(torch, g.replay, 200) * 1e6)


# Other groups append their function here.
GROUPS = [optim_group]


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
    if sys.argv[1:] == ["--serve-matmul"]:
        serve_matmul()
        sys.exit(0)
    sys.exit(main())
