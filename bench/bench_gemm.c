/* bench/bench_gemm.c - amp_gemm on one CPU thread against its peers, measured in the same run:
     f32:  OpenBLAS cblas_sgemm, one thread (libopenblas loaded at run time with its own core
           detection, OPENBLAS_CORETYPE unset; skipped with a message where it is absent), and
           PyTorch's CPU torch.matmul in f32;
     bf16: PyTorch's CPU torch.matmul in bf16 (oneDNN: vdpbf16ps on an AVX512_BF16 CPU);
     f16:  the f32 peers (no CPU peer multiplies f16 faster than it converts it to f32).
   PyTorch runs as a python3 subprocess (torch.set_num_threads(1), glibc told to keep its memory,
   OPENBLAS_CORETYPE unset for that command only), skipped with a message where torch is absent.
   Shapes: the demo's MLP (examples/train_mlp.c: 784-256-128-10, batch 64: the forward products
   and the two of the backward pass) and squares 512-2048. Each figure is the median of 7 timed
   rounds of thread CPU time (ours and OpenBLAS alternate round by round); ours is built the way a user builds it (`cc -O2`, no -march: CPUID picks the kernel).
   Line: name  ours  reference  ratio  (GFLOP/s, ratio = ours / peer). */
#include "bench.h"
#include <dlfcn.h>
#define AMP_IMPLEMENTATION
#include "amp.h"

typedef struct { const char *name; amp_trans ta, tb; int m, n, k; } shape;
static const shape shapes[] = {
  {"mlp_fwd1", AMP_NO_TRANS, AMP_NO_TRANS, 64, 256, 784},   /* x W1: batch x 784 times 784 x 256 */
  {"mlp_fwd2", AMP_NO_TRANS, AMP_NO_TRANS, 64, 128, 256},
  {"mlp_dW1", AMP_TRANS, AMP_NO_TRANS, 784, 256, 64},       /* x^T dz1 */
  {"mlp_dh1", AMP_NO_TRANS, AMP_TRANS, 64, 256, 128},       /* dz2 W2^T */
  {"mlp_fwd1_b256", AMP_NO_TRANS, AMP_NO_TRANS, 256, 256, 784},
  {"square", AMP_NO_TRANS, AMP_NO_TRANS, 512, 512, 512},
  {"square", AMP_NO_TRANS, AMP_NO_TRANS, 1024, 1024, 1024},
  {"square", AMP_NO_TRANS, AMP_NO_TRANS, 2048, 2048, 2048},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static double gflops(const shape *s, double sec) { return 2.0 * s->m * s->n * s->k / sec * 1e-9; }

/* Every product here runs on the calling thread, so its time is the thread's CPU time: on a
   machine shared with other jobs that leaves out the time they took (on an idle one it is the
   wall time). PyTorch is timed the same way (time.thread_time, one thread). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median seconds of one call over 7 rounds, each round long enough (~0.1 s) to time. With a
   second function g, its rounds alternate with f's (on a shared machine both see the same load)
   and *tg gets its median. */
typedef void (*call_fn)(const shape *s, void *a, void *b, float *c, amp_dtype t);
static double time_pair(call_fn f, call_fn g, double *tg, const shape *s, void *a, void *b, float *c, amp_dtype t) {
  double flop = 2.0 * s->m * s->n * s->k, ts[7], us[7];
  int reps = flop < 2e8 ? (int)(2e8 / flop) + 1 : 1, r, i;
  f(s, a, b, c, t);
  if (g) g(s, a, b, c, t);
  for (r = 0; r < 7; r++) {
    double t0 = cpu_now();
    for (i = 0; i < reps; i++) f(s, a, b, c, t);
    ts[r] = (cpu_now() - t0) / reps;
    if (g) {
      t0 = cpu_now();
      for (i = 0; i < reps; i++) g(s, a, b, c, t);
      us[r] = (cpu_now() - t0) / reps;
    }
  }
  if (g) *tg = bench_median(us, 7);
  return bench_median(ts, 7);
}
static double time_call(call_fn f, const shape *s, void *a, void *b, float *c, amp_dtype t) {
  return time_pair(f, NULL, NULL, s, a, b, c, t);
}

static void ours(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, t, s->ta ? s->m : s->k, b, t,
           s->tb ? s->k : s->n, 0.0f, c, AMP_F32, s->n);
}

/* fp8 (E4M3) inputs with per-tensor scale_invs (widened while packing, the same kernels), and
   block-scaled: the DeepSeek-V3 forward y = x W^T, x in 1x128 tiles and W (n x k) in 128 x 128
   blocks, tb AMP_TRANS whatever the shape's transposes (the product runs once per 128 of k). */
static float fp8_si = 0.25f;
static const void *fp8_xs, *fp8_ws;
static void ours_fp8(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.a_scale_inv = &fp8_si; o.b_scale_inv = &fp8_si;
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, t, s->ta ? s->m : s->k, b, t,
              s->tb ? s->k : s->n, 0.0f, c, AMP_F32, s->n, &o);
}
static void ours_fp8_blocks(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.a_blocks = AMP_BLOCK_1x128; o.a_scales = fp8_xs;
  o.b_blocks = AMP_BLOCK_128x128; o.b_scales = fp8_ws;
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, s->m, s->n, s->k, 1.0f, a, t, s->k, b, t, s->k, 0.0f,
              c, AMP_F32, s->n, &o);
}

/* OpenBLAS through dlopen: no link-time dependency, one thread. */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
static sgemm_fn cblas_sgemm_p;
static void openblas(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  (void)t;   /* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112 */
  cblas_sgemm_p(101, s->ta ? 112 : 111, s->tb ? 112 : 111, s->m, s->n, s->k, 1.0f, (const float *)a, s->ta ? s->m : s->k,
                (const float *)b, s->tb ? s->k : s->n, 0.0f, c, s->n);
}
static int openblas_open(void) {
  static const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"};
  void (*set_threads)(int);
  void *h = NULL;
  int i;
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  unsetenv("OPENBLAS_CORETYPE");   /* a forced core type (Haswell here) slows current builds */
  for (i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("OpenBLAS: not found (%s): its column is skipped (apt install libopenblas-dev)\n", dlerror()); return 0; }
  *(void **)&cblas_sgemm_p = dlsym(h, "cblas_sgemm");
  *(void **)&set_threads = dlsym(h, "openblas_set_num_threads");
  if (!cblas_sgemm_p) { printf("OpenBLAS: no cblas_sgemm in the library: its column is skipped\n"); return 0; }
  if (set_threads) set_threads(1);
  return 1;
}

/* PyTorch: one subprocess measures every shape in f32 and bf16 (median of 7 rounds, as ours). */
static double torch_gf[NSHAPES][2];
static int torch_run(void) {
  char cmd[4096], line[256];
  size_t len;
  int i, got = 0;
  FILE *p;
  len = (size_t)snprintf(cmd, sizeof cmd,
    "PY=; for p in python3 /usr/bin/python3; do if $p -c 'import torch' 2>/dev/null; then PY=$p; break; fi; done; "
    "[ -n \"$PY\" ] || { echo 'notorch'; exit 0; }; "
    "env -u OPENBLAS_CORETYPE MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 $PY -c '\n"
    "import torch, time, statistics\n"
    "torch.set_num_threads(1)\n"
    "shapes = [");
  for (i = 0; i < NSHAPES; i++)
    len += (size_t)snprintf(cmd + len, sizeof cmd - len, "(%d,%d,%d,%d,%d),", shapes[i].m, shapes[i].n, shapes[i].k,
                            (int)shapes[i].ta, (int)shapes[i].tb);
  snprintf(cmd + len, sizeof cmd - len, "]\n"
    "for i, (m, n, k, ta, tb) in enumerate(shapes):\n"
    "  for d, dt in enumerate((torch.float32, torch.bfloat16)):\n"
    "    a = (torch.randn(k, m) if ta else torch.randn(m, k)).to(dt)\n"
    "    b = (torch.randn(n, k) if tb else torch.randn(k, n)).to(dt)\n"
    "    a = a.t() if ta else a\n"
    "    b = b.t() if tb else b\n"
    "    reps = int(2e8 / (2.0 * m * n * k)) + 1\n"
    "    torch.matmul(a, b)\n"
    "    ts = []\n"
    "    for r in range(7):\n"
    "      t0 = time.thread_time()\n"
    "      for _ in range(reps): torch.matmul(a, b)\n"
    "      ts.append((time.thread_time() - t0) / reps)\n"
    "    print(i, d, 2.0 * m * n * k / statistics.median(ts) * 1e-9, flush=True)\n"
    "' 2>&1");
  p = popen(cmd, "r");
  if (!p) { printf("PyTorch: cannot start python3: its columns are skipped\n"); return 0; }
  while (fgets(line, sizeof line, p)) {
    int si, d;
    double g;
    if (!strncmp(line, "notorch", 7)) { printf("PyTorch: python3 has no torch module: its columns are skipped (apt install python3-torch)\n"); break; }
    if (sscanf(line, "%d %d %lf", &si, &d, &g) == 3 && si >= 0 && si < NSHAPES && (d == 0 || d == 1)) { torch_gf[si][d] = g; got++; }
  }
  pclose(p);
  if (!got) printf("PyTorch: the subprocess printed no figures: its columns are skipped\n");
  return got > 0;
}

int main(void) {
  int have_blas = openblas_open(), have_torch, i;
  int isa = 0;
#ifdef AMP__GEMM_FAST
  isa = amp__gemm_isa();
#endif
  printf("amp_gemm, 1 thread: kernel %s (GFLOP/s; ratio = ours / peer)\n",
         isa & 4 ? "AVX-512 FMA, bf16 inputs AVX512_BF16" : isa & 2 ? "AVX-512 FMA" : isa & 1 ? "AVX2 FMA" : "reference (no FMA)");
  printf("measuring PyTorch (subprocess, 1 thread)...\n");
  fflush(stdout);
  have_torch = torch_run();
  printf("%-44s %10s %10s %8s\n", "name", "ours", "reference", "ratio");
  for (i = 0; i < NSHAPES; i++) {
    const shape *s = &shapes[i];
    size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, j;
    float *af = (float *)malloc(na * 4), *bf = (float *)malloc(nb * 4), *c = (float *)malloc((size_t)s->m * s->n * 4);
    void *ah = malloc(na * 2), *bh = malloc(nb * 2);
    double o32, o16, obf, g;
    char name[128];
    for (j = 0; j < na; j++) af[j] = (float)((int)(j * 37 % 101) - 50) / 64.0f;
    for (j = 0; j < nb; j++) bf[j] = (float)((int)(j * 53 % 97) - 48) / 64.0f;
    g = 0;
    o32 = gflops(s, time_pair(ours, have_blas ? openblas : NULL, &g, s, af, bf, c, AMP_F32));
    if (have_blas) {
      g = gflops(s, g);
      snprintf(name, sizeof name, "gemm_f32_%s_%dx%dx%d_vs_openblas", s->name, s->m, s->n, s->k);
      bench_line(name, o32, g, "GFLOP/s");
    }
    if (have_torch && torch_gf[i][0] > 0) {
      snprintf(name, sizeof name, "gemm_f32_%s_%dx%dx%d_vs_torch", s->name, s->m, s->n, s->k);
      bench_line(name, o32, torch_gf[i][0], "GFLOP/s");
    }
    if (!have_blas && !(have_torch && torch_gf[i][0] > 0)) {
      snprintf(name, sizeof name, "gemm_f32_%s_%dx%dx%d", s->name, s->m, s->n, s->k);
      bench_line(name, o32, 0, "GFLOP/s (no peer)");
    }
    amp_convert(ah, AMP_BF16, af, AMP_F32, na); amp_convert(bh, AMP_BF16, bf, AMP_F32, nb);
    obf = gflops(s, time_call(ours, s, ah, bh, c, AMP_BF16));
    snprintf(name, sizeof name, "gemm_bf16_%s_%dx%dx%d_vs_torch", s->name, s->m, s->n, s->k);
    bench_line(name, obf, have_torch ? torch_gf[i][1] : 0, "GFLOP/s (bf16 in, f32 out; torch: bf16 out)");
    amp_convert(ah, AMP_F16, af, AMP_F32, na); amp_convert(bh, AMP_F16, bf, AMP_F32, nb);
    o16 = gflops(s, time_call(ours, s, ah, bh, c, AMP_F16));
    snprintf(name, sizeof name, "gemm_f16_%s_%dx%dx%d_vs_ours_f32", s->name, s->m, s->n, s->k);
    bench_line(name, o16, o32, "GFLOP/s (f16 in: converted while packing)");
    {   /* fp8: the codes of the same values (all exact in E4M3 after x 4), scale_inv 1/4 */
      float four = 4.0f, *xs = (float *)malloc(sizeof(float) * ((size_t)s->m * ((s->k + 127) / 128) + 1));
      float *ws = (float *)malloc(sizeof(float) * ((size_t)((s->n + 127) / 128) * ((s->k + 127) / 128) + 1));
      void *bt = malloc(nb);
      double o8, o8b;
      amp_quantize(amp_cpu(), ah, AMP_E4M3, af, AMP_F32, na, &four, NULL);
      amp_quantize(amp_cpu(), bh, AMP_E4M3, bf, AMP_F32, nb, &four, NULL);
      o8 = gflops(s, time_call(ours_fp8, s, ah, bh, c, AMP_E4M3));
      snprintf(name, sizeof name, "gemm_e4m3_%s_%dx%dx%d_vs_ours_bf16", s->name, s->m, s->n, s->k);
      bench_line(name, o8, obf, "GFLOP/s (e4m3 in, per-tensor scale_invs, f32 out)");
      snprintf(name, sizeof name, "gemm_e4m3_%s_%dx%dx%d_vs_ours_f32", s->name, s->m, s->n, s->k);
      bench_line(name, o8, o32, "GFLOP/s (e4m3 in, per-tensor scale_invs, f32 out)");
      /* x (m x k) in 1x128 tiles, W = the n x k matrix bf read as such, in 128 x 128 blocks */
      amp_quantize_blocks(amp_cpu(), AMP_BLOCK_1x128, AMP_E4M3, s->m, s->k, af, AMP_F32, s->k, ah, s->k, xs);
      amp_quantize_blocks(amp_cpu(), AMP_BLOCK_128x128, AMP_E4M3, s->n, s->k, bf, AMP_F32, s->k, bt, s->k, ws);
      fp8_xs = xs; fp8_ws = ws;
      o8b = gflops(s, time_call(ours_fp8_blocks, s, ah, bt, c, AMP_E4M3));
      snprintf(name, sizeof name, "gemm_e4m3_blocks_xWt_%dx%dx%d_vs_ours_e4m3", s->m, s->n, s->k);
      bench_line(name, o8b, o8, "GFLOP/s (1x128 x 128x128 block scales, y = x W^T, against per-tensor)");
      free(xs); free(ws); free(bt);
    }
    free(af); free(bf); free(c); free(ah); free(bh);
  }
  return 0;
}
