/* bench/bench_gemm.c - the CPU reference product (one thread): GFLOP/s for the shapes of a small
   MLP (Fashion-MNIST, 784-256-128-10, batch 128: forward, and the two products of the backward
   pass) and square sizes, each input type. The reference column is the same product as a plain
   triple loop (i, j, p) over f32 data, the textbook code a trainer without a BLAS would have. */
#include "bench.h"
#define AMP_IMPLEMENTATION
#include "amp.h"

static double gflops(int m, int n, int k, double s) { return 2.0 * m * n * k / s * 1e-9; }

/* the naive loop, on f32 copies of the inputs */
static void naive(int m, int n, int k, const float *A, const float *B, float *C) {
  int i, j, p;
  for (i = 0; i < m; i++)
    for (j = 0; j < n; j++) {
      float acc = 0.0f;
      for (p = 0; p < k; p++) acc += A[(size_t)i * k + p] * B[(size_t)p * n + j];
      C[(size_t)i * n + j] = acc;
    }
}

static void run(const char *what, amp_trans ta, amp_trans tb, int m, int n, int k, amp_dtype t, int with_naive) {
  size_t es = amp_dtype_size(t);
  float *af = (float *)malloc((size_t)m * k * 4), *bf = (float *)malloc((size_t)k * n * 4);
  void *a = malloc((size_t)m * k * es), *b = malloc((size_t)k * n * es);
  float *c = (float *)malloc((size_t)m * n * 4);
  double ts[7], tn[3], ours, ref = 0;
  double flop = 2.0 * m * n * k;
  int reps, r, i;
  char name[128];
  for (i = 0; i < m * k; i++) af[i] = (float)((i * 37 % 101) - 50) / 64.0f;
  for (i = 0; i < k * n; i++) bf[i] = (float)((i * 53 % 97) - 48) / 64.0f;
  amp_convert(a, t, af, AMP_F32, (size_t)m * k);
  amp_convert(b, t, bf, AMP_F32, (size_t)k * n);
  reps = flop < 1e9 ? (int)(1e9 / flop) + 1 : 1;
  amp_gemm(amp_cpu(), AMP_ROW_MAJOR, ta, tb, m, n, k, 1.0f, a, t, ta ? m : k, b, t, tb ? k : n, 0.0f, c, AMP_F32, n);
  for (r = 0; r < 7; r++) {
    double t0 = bench_now();
    for (i = 0; i < reps; i++)
      amp_gemm(amp_cpu(), AMP_ROW_MAJOR, ta, tb, m, n, k, 1.0f, a, t, ta ? m : k, b, t, tb ? k : n, 0.0f, c, AMP_F32, n);
    ts[r] = (bench_now() - t0) / reps;
  }
  ours = gflops(m, n, k, bench_median(ts, 7));
  if (with_naive) {
    for (r = 0; r < 3; r++) { double t0 = bench_now(); naive(m, n, k, af, bf, c); tn[r] = bench_now() - t0; }
    ref = gflops(m, n, k, bench_median(tn, 3));
  }
  snprintf(name, sizeof name, "gemm_cpu_%s_%s_%dx%dx%d", what, t == AMP_F32 ? "f32" : t == AMP_F16 ? "f16" : "bf16", m, n, k);
  bench_line(name, ours, ref, "GFLOP/s (vs naive loop)");
  free(af); free(bf); free(a); free(b); free(c);
}

int main(void) {
  (void)bench_ref;
  printf("CPU reference product, 1 thread: GFLOP/s   [ours, naive f32 triple loop, ratio]\n");
  run("mlp_fwd1", AMP_NO_TRANS, AMP_TRANS, 128, 256, 784, AMP_F32, 1);   /* x W1^T */
  run("mlp_fwd1", AMP_NO_TRANS, AMP_TRANS, 128, 256, 784, AMP_F16, 0);
  run("mlp_dW1", AMP_TRANS, AMP_NO_TRANS, 256, 784, 128, AMP_F32, 1);    /* dY^T X */
  run("mlp_dX2", AMP_NO_TRANS, AMP_NO_TRANS, 128, 256, 128, AMP_F32, 1); /* dY W */
  run("square", AMP_NO_TRANS, AMP_NO_TRANS, 512, 512, 512, AMP_F32, 1);
  run("square", AMP_NO_TRANS, AMP_NO_TRANS, 1024, 1024, 1024, AMP_F32, 0);
  run("square", AMP_NO_TRANS, AMP_NO_TRANS, 1024, 1024, 1024, AMP_F16, 0);
  run("square", AMP_NO_TRANS, AMP_NO_TRANS, 1024, 1024, 1024, AMP_BF16, 0);
  return 0;
}
