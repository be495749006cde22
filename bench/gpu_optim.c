/* bench/gpu_optim.c - the CUDA scaler/optimizer kernels against a device-to-device copy and against
   PyTorch (figures from bench/torch_ref*.py in the same run, read with bench_ref).
   Rates are effective bandwidth: the bytes a kernel must move (read + written) over its time. */
#include "bench.h"
#define AMP_IMPLEMENTATION
#include "amp.h"

static void *ST;
static char msg[512];

#define CK(call) do { if ((call) != AMP_OK) { printf("%s: %s\n", #call, msg); exit(0); } } while (0)

static void *dmalloc(size_t bytes) { void *p = NULL; CK(amp__cu_malloc(ST, &p, bytes, msg, sizeof msg)); return p; }
static void sync_(void) { CK(amp__cu_sync(ST, msg, sizeof msg)); }

/* Median seconds per call of fn over 7 runs of `iters` calls each (after one warm-up run). */
typedef void (*bench_fn)(void *);
static double timeit(bench_fn fn, void *arg, int iters) {
  double t[7];
  for (int i = 0; i < iters; i++) fn(arg);
  sync_();
  for (int r = 0; r < 7; r++) {
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) fn(arg);
    sync_();
    t[r] = (bench_now() - t0) / iters;
  }
  return bench_median(t, 7);
}

typedef struct copy_arg { void *dst; const void *src; size_t bytes; } copy_arg;
static void run_copy(void *a) { copy_arg *c = (copy_arg *)a; CK(amp__cu_copy(ST, c->dst, c->src, c->bytes, 2, msg, sizeof msg)); }

typedef struct step_arg { void *o, *sc; int what; } step_arg;   /* what: 0 unscale, 1 step, 2 both */
static void run_step(void *a) {
  step_arg *s = (step_arg *)a;
  if (s->what != 1) CK(amp__cu_optim_unscale(ST, s->o, s->sc, msg, sizeof msg));
  if (s->what != 0) CK(amp__cu_optim_step(ST, s->o, s->sc, 1, msg, sizeof msg));
}

typedef struct cast_arg { void *dst; const void *src; int dt, st; size_t n; } cast_arg;
static void run_cast(void *a) { cast_arg *c = (cast_arg *)a; CK(amp__cu_cast(ST, c->dst, c->dt, c->src, c->st, c->n, msg, sizeof msg)); }

static void run_graph(void *g) { CK(amp__cu_graph_launch(ST, g, msg, sizeof msg)); }

/* k tensors of n elements each: finite grads (so no step is skipped) and model copies; the model
   copies `off` elements past a 16-byte boundary (off 1: the step's scalar path). */
static void make_tensors_off(amp__tensor *t, int k, size_t n, int dtype, size_t off) {
  size_t es = amp_dtype_size((amp_dtype)dtype);
  float *f = (float *)malloc(n * 4);
  void *h = malloc(n * es);
  if (!f || !h) { printf("out of host memory\n"); exit(0); }
  for (size_t j = 0; j < n; j++) f[j] = (float)((int)(j % 2001) - 1000) * 0.5f;   /* up to 500: scaled grads */
  amp_convert(h, (amp_dtype)dtype, f, AMP_F32, n);
  for (int i = 0; i < k; i++) {
    memset(&t[i], 0, sizeof t[i]);   /* group 0, round_to AMP_F32 */
    t[i].g = dmalloc(n * es); t[i].w = (char *)dmalloc((n + off) * es) + off * es;
    t[i].n = n; t[i].wtype = dtype; t[i].gtype = dtype;
    CK(amp__cu_copy(ST, (void *)t[i].g, h, n * es, 0, msg, sizeof msg));
    CK(amp__cu_copy(ST, t[i].w, h, n * es, 0, msg, sizeof msg));
  }
  free(f); free(h);
}
static void make_tensors(amp__tensor *t, int k, size_t n, int dtype) { make_tensors_off(t, k, n, dtype, 0); }
static void free_tensors_off(amp__tensor *t, int k, size_t off) {
  for (int i = 0; i < k; i++) {
    amp__cu_free(ST, (void *)t[i].g);
    amp__cu_free(ST, (char *)t[i].w - off * amp_dtype_size((amp_dtype)t[i].wtype));
  }
}
static void free_tensors(amp__tensor *t, int k) { free_tensors_off(t, k, 0); }

int main(void) {
  amp_device *dev;
  void *stream = NULL;
  const size_t TOTAL = (size_t)256 << 20;        /* 256M elements / parameters */
  const int K = 256;                             /* tensors (>= 200) */
  const size_t N = TOTAL / K;
  amp_scale_params pr;
  amp_scale_state s0;
  void *sc = NULL;
  double copy_gbps;
  if (amp__cu_stream_create(0, &stream, msg, sizeof msg) != AMP_OK) stream = NULL;
  if (amp_cuda_open(&dev, 0, stream) != AMP_OK) { printf("skipped: %s\n", amp_last_error()); return 0; }
  ST = dev->cuda;
  memset(&pr, 0, sizeof pr);
  pr.growth = 2; pr.backoff = 0.5f; pr.floor = 1.17549435e-38f; pr.interval = 2000; pr.hysteresis = 1;
  memset(&s0, 0, sizeof s0); s0.scale = 65536.0f;
  CK(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg));

  { /* device copy: the physical reference, 1 GiB each way */
    copy_arg c;
    c.bytes = TOTAL * 4; c.src = dmalloc(c.bytes); c.dst = dmalloc(c.bytes);
    copy_gbps = 2.0 * (double)c.bytes / timeit(run_copy, &c, 10) / 1e9;
    bench_line("device copy (read + write)", copy_gbps, bench_ref("copy_gbps"), "GB/s (ref: torch copy_)");
    amp__cu_free(ST, (void *)c.src); amp__cu_free(ST, c.dst);
  }
  { /* unscale + inf/NaN check + sum of squares, f16 grads: 2 B/element read */
    amp__tensor *t = (amp__tensor *)calloc(K, sizeof *t);
    amp_optim_config h;
    step_arg a;
    memset(&h, 0, sizeof h); h.kind = AMP_SGD; h.lr = 1e-3f;
    make_tensors(t, K, N, AMP_F16);
    CK(amp__cu_optim_create(ST, &a.o, t, K, NULL, NULL, &h, msg, sizeof msg));
    a.sc = sc; a.what = 0;
    double gbps = 2.0 * (double)TOTAL / timeit(run_step, &a, 20) / 1e9;
    bench_line("unscale+check+norm f16 256M/256 vs copy", gbps, copy_gbps, "GB/s");
    bench_line("unscale+check+norm vs torch foreach unscale", gbps, bench_ref("unscale_f16_gbps"), "GB/s");
    amp__cu_optim_destroy(ST, a.o);
    free_tensors(t, K); free(t);
  }
  { /* AdamW: grad 2 + master 4+4 + m 4+4 + v 4+4 + model 2 = 28 B/param */
    amp__tensor *t = (amp__tensor *)calloc(K, sizeof *t);
    amp_optim_config h;
    step_arg a;
    memset(&h, 0, sizeof h); h.kind = AMP_ADAMW; h.lr = 1e-3f; h.weight_decay = 1e-2f;
    h.beta1 = 0.9f; h.beta2 = 0.999f; h.eps = 1e-8f; h.max_grad_norm = 1.0f;
    make_tensors(t, K, N, AMP_F16);
    CK(amp__cu_optim_create(ST, &a.o, t, K, NULL, NULL, &h, msg, sizeof msg));
    a.sc = sc; a.what = 0; run_step(&a);
    a.what = 1;
    double gbps = 28.0 * (double)TOTAL / timeit(run_step, &a, 10) / 1e9;
    bench_line("adamw step f16 (28 B/param) vs copy", gbps, copy_gbps, "GB/s");
    a.what = 2;
    double full = 28.0 * (double)TOTAL / timeit(run_step, &a, 10) / 1e9;
    bench_line("adamw unscale+step vs torch cast+fused+copy", full, bench_ref("adamw_mixed_gbps"), "GB/s at 28 B/param");
    amp__cu_optim_destroy(ST, a.o);
    {   /* the same step with the moments kept in fewer bytes (amp_tensor_desc.moments): bf16 words
           (20 B/param), 8-bit codes with an absmax per 256 (16 + 8/256 B/param), fp8 codes with a scale per
           array (16 B/param, the grads and moments read twice: the first launch takes the amaxes),
           against f32's time */
      static const int types[3] = {AMP_MOMENTS_BF16, AMP_MOMENTS_8BIT, AMP_MOMENTS_FP8};
      static const char *names[3] = {"adamw step f16, bf16 moments vs f32 moments", "adamw step f16, 8-bit moments vs f32 moments",
                                     "adamw step f16, fp8 moments vs f32 moments"};
      const double tf = 28.0 * (double)TOTAL / gbps / 1e9;
      for (int j = 0; j < 3; j++) {
        for (int i = 0; i < K; i++) t[i].moments = types[j];
        CK(amp__cu_optim_create(ST, &a.o, t, K, NULL, NULL, &h, msg, sizeof msg));
        a.what = 0; run_step(&a);
        a.what = 1;
        bench_line(names[j], 1e3 * timeit(run_step, &a, 10), 1e3 * tf, "ms per step, lower is better");
        amp__cu_optim_destroy(ST, a.o);
      }
      for (int i = 0; i < K; i++) t[i].moments = AMP_MOMENTS_F32;
    }
    free_tensors(t, K); free(t);
    /* The same with every model copy 2 bytes off 16: the step takes its scalar path (no 16-byte
       loads of grads, master or moments); the unscale reads only the grads and keeps its vectors.
       A first-run lead: how much the scalar path costs. */
    t = (amp__tensor *)calloc(K, sizeof *t);
    make_tensors_off(t, K, N, AMP_F16, 1);
    CK(amp__cu_optim_create(ST, &a.o, t, K, NULL, NULL, &h, msg, sizeof msg));
    a.what = 0; run_step(&a);
    a.what = 1;
    bench_line("adamw step f16, model copy misaligned vs aligned", 28.0 * (double)TOTAL / timeit(run_step, &a, 10) / 1e9, gbps, "GB/s");
    a.what = 0;
    bench_line("unscale f16, model copy misaligned vs copy", 2.0 * (double)TOTAL / timeit(run_step, &a, 10) / 1e9, copy_gbps, "GB/s");
    amp__cu_optim_destroy(ST, a.o);
    free_tensors_off(t, K, 1); free(t);
  }
  { /* SGD momentum: grad 2 + master 4+4 + buf 4+4 + model 2 = 20 B/param */
    amp__tensor *t = (amp__tensor *)calloc(K, sizeof *t);
    amp_optim_config h;
    step_arg a;
    memset(&h, 0, sizeof h); h.kind = AMP_SGD; h.lr = 1e-3f; h.momentum = 0.9f;
    make_tensors(t, K, N, AMP_F16);
    CK(amp__cu_optim_create(ST, &a.o, t, K, NULL, NULL, &h, msg, sizeof msg));
    a.sc = sc; a.what = 0; run_step(&a);
    a.what = 1;
    double gbps = 20.0 * (double)TOTAL / timeit(run_step, &a, 10) / 1e9;
    bench_line("sgd-momentum step f16 (20 B/param) vs copy", gbps, copy_gbps, "GB/s");
    amp__cu_optim_destroy(ST, a.o);
    free_tensors(t, K); free(t);
  }
  { /* casts: 6 B/element */
    static const int pairs[4][2] = {{AMP_F32, AMP_F16}, {AMP_F16, AMP_F32}, {AMP_F32, AMP_BF16}, {AMP_BF16, AMP_F32}};
    static const char *names[4] = {"cast f32->f16 vs copy", "cast f16->f32 vs copy", "cast f32->bf16 vs copy", "cast bf16->f32 vs copy"};
    void *f32 = dmalloc(TOTAL * 4), *f16 = dmalloc(TOTAL * 2);
    CK(amp__cu_cast(ST, f16, AMP_F16, f32, AMP_F32, TOTAL, msg, sizeof msg));
    for (int p = 0; p < 4; p++) {
      cast_arg c;
      c.st = pairs[p][0]; c.dt = pairs[p][1]; c.n = TOTAL;
      c.src = c.st == AMP_F32 ? f32 : f16; c.dst = c.dt == AMP_F32 ? f32 : f16;
      double gbps = 6.0 * (double)TOTAL / timeit(run_cast, &c, 10) / 1e9;
      bench_line(names[p], gbps, copy_gbps, "GB/s");
    }
    amp__cu_free(ST, f32); amp__cu_free(ST, f16);
  }
  if (stream) { /* 500 small tensors: launches per step, and the time of one step */
    enum { S = 500 };
    amp__tensor t[S];
    amp_optim_config h;
    step_arg a;
    void *g = NULL;
    size_t kernels = 0;
    memset(&h, 0, sizeof h); h.kind = AMP_ADAMW; h.lr = 1e-3f; h.weight_decay = 1e-2f;
    h.beta1 = 0.9f; h.beta2 = 0.999f; h.eps = 1e-8f; h.max_grad_norm = 1.0f;
    make_tensors(t, S, 4096, AMP_F16);
    CK(amp__cu_optim_create(ST, &a.o, t, S, NULL, NULL, &h, msg, sizeof msg));
    a.sc = sc; a.what = 2;
    CK(amp__cu_capture_begin(ST, msg, sizeof msg));
    run_step(&a);
    CK(amp__cu_capture_end(ST, &g, &kernels, msg, sizeof msg));
    bench_line("whole step, 500 tensors: kernel launches", (double)kernels, 3.0, "launches (target <= 3)");
    double eager = timeit(run_step, &a, 200) * 1e6, graph = timeit(run_graph, g, 200) * 1e6;
    bench_line("whole step, 500x4096 f16: graph vs eager", graph, eager, "us per step");
    /* PyTorch three ways (bench/torch_ref.py): fused AdamW as users write it, with capturable=True,
       and that step replayed from a CUDA graph; ours eager and graphed. Lower is better. */
    bench_line("whole step, 500x4096 f16, eager vs torch eager (fused AdamW)", eager, bench_ref("adamw_500_small_us"), "us per step (lower is better)");
    bench_line("whole step, 500x4096 f16, eager vs torch eager (capturable)", eager, bench_ref("adamw_500_small_capturable_us"), "us per step (lower is better)");
    bench_line("whole step, 500x4096 f16, graph vs torch graph (capturable)", graph, bench_ref("adamw_500_small_graph_us"), "us per step (lower is better)");
    amp__cu_graph_destroy(g);
    amp__cu_optim_destroy(ST, a.o);
    free_tensors(t, S);
  }
  amp__cu_scaler_destroy(ST, sc);
  amp_device_close(dev);
  amp__cu_stream_destroy(stream);
  return 0;
}
