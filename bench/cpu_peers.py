"""bench/cpu_peers.py - the CPU peers that bench_optim and bench_convert measure in the same run.

  python3 bench/cpu_peers.py adamw N REPS   PyTorch's CPU mixed-precision AdamW step on N params:
                                            f16 grads cast to f32 and unscaled, inf/NaN checked,
                                            torch.optim.AdamW on the f32 master, the f16 model copy
                                            written back; prints `torch_adamw_s <median seconds>`
  python3 bench/cpu_peers.py astype N REPS  NumPy astype f32->f16 and f16->f32 on N elements;
                                            prints `numpy_f32_f16_s` and `numpy_f16_f32_s`

One thread. The caller runs it with glibc told to keep freed memory (MALLOC_MMAP_MAX_=0,
MALLOC_TRIM_THRESHOLD_=...): otherwise PyTorch's temporaries page-fault on every step.
"""
import sys
import time


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def timed(fn, reps):
    fn()  # untimed: first touch, allocator warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def adamw(n, reps):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    w16 = (torch.randn(n) * 0.1).half()
    g16 = (torch.randn(n) * 1024.0).half()
    master = w16.float()
    opt = torch.optim.AdamW([master], lr=1e-3, weight_decay=0.01)
    inv_scale = 1.0 / 1024.0

    def step():
        g = g16.float()
        g.mul_(inv_scale)
        if bool(torch.isfinite(g).all()):
            master.grad = g
            opt.step()
            w16.copy_(master)

    print("torch_version %s" % torch.__version__.split("+")[0].replace("a0", ""))
    print("torch_adamw_s %.9f" % timed(step, reps))


def astype(n, reps):
    import numpy as np
    x32 = (np.random.default_rng(0).standard_normal(n)).astype(np.float32)
    x16 = x32.astype(np.float16)
    o16 = np.empty(n, np.float16)
    o32 = np.empty(n, np.float32)
    print("numpy_version %s" % np.__version__)
    print("numpy_f32_f16_s %.9f" % timed(lambda: np.copyto(o16, x32, casting="unsafe"), reps))
    print("numpy_f16_f32_s %.9f" % timed(lambda: np.copyto(o32, x16, casting="unsafe"), reps))


if __name__ == "__main__":
    what, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    {"adamw": adamw, "astype": astype}[what](n, reps)
