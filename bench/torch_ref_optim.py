#!/usr/bin/env python3
"""bench/torch_ref_optim.py - the PyTorch side of bench/gpu_optim.c (to be merged into
bench/torch_ref.py as one function per group). Prints `key value` lines that bench_ref() reads;
exits 0, printing nothing, where torch or a GPU is missing.

Sizes match bench/gpu_optim.c: 256M f16 elements in 256 tensors; 500 tensors of 4096 for the
small-tensor step. Rates are effective bandwidth: the bytes the work must move over its time, counted
exactly as the C side counts them (so the ratio printed there is a speed ratio)."""
import sys


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


def optim_refs(torch):
    total, k = 256 << 20, 256
    n = total // k
    dev = "cuda"

    # device copy, 1 GiB each way
    src = torch.empty(total, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    t = _time(torch, lambda: dst.copy_(src), 10)
    print("copy_gbps %.3f" % (2.0 * total * 4 / t / 1e9))
    del src, dst

    # GradScaler's unscale: torch._amp_foreach_non_finite_check_and_unscale_ on f16 grads
    grads = [torch.full((n,), 0.5, dtype=torch.float16, device=dev) for _ in range(k)]
    found_inf = torch.zeros(1, dtype=torch.float32, device=dev)
    inv = torch.ones(1, dtype=torch.float32, device=dev)   # x * 1: the grads stay as they are
    t = _time(torch, lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv), 20)
    print("unscale_f16_gbps %.3f" % (2.0 * total / t / 1e9))

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
    print("adamw_mixed_gbps %.3f" % (28.0 * total / t / 1e9))
    del opt, master, mg, model, grads

    # 500 small tensors: one whole step with the scaler (unscale, AdamW, update), eager
    small = [torch.full((4096,), 0.5, dtype=torch.float16, device=dev) for _ in range(500)]
    sp = [s.float().requires_grad_() for s in small]
    for p in sp:
        p.grad = torch.zeros_like(p)
    sopt = torch.optim.AdamW(sp, lr=1e-3, weight_decay=1e-2, fused=True)
    sg = [torch.full((4096,), 0.5, dtype=torch.float16, device=dev) for _ in range(500)]
    spg = [p.grad for p in sp]
    scale = torch.full((1,), 65536.0, device=dev)
    tracker = torch.zeros(1, dtype=torch.int32, device=dev)

    def small_step():
        found_inf.zero_()
        torch._foreach_copy_(spg, sg)
        torch._amp_foreach_non_finite_check_and_unscale_(spg, found_inf, inv)
        torch.nn.utils.clip_grad_norm_(sp, 1.0, foreach=True)
        sopt.step()   # GradScaler.step would read found_inf on the host here; fused AdamW takes it on device
        torch._foreach_copy_(small, sp)
        torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2000)
    t = _time(torch, small_step, 200)
    print("adamw_500_small_us %.3f" % (t * 1e6))


def main():
    try:
        import torch
    except Exception:
        return 0
    if not torch.cuda.is_available():
        return 0
    optim_refs(torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
