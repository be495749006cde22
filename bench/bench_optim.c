/* bench/bench_optim.c - the CPU mixed-precision optimizer step, one thread, 16M params.
   AdamW: f16 grads, f32 master/m/v, f16 model copy = 28 bytes/param (grads 2, master 4+4,
   m 4+4, v 4+4, model 2: the effective traffic of one fused pass). SGD with momentum: 20 B/param.
   Each step is a whole amp_scaler_step (unscale pass + fused update) + amp_scaler_update, timed
   as the median of 7, and reported as effective GB/s against memcpy of the same byte count in the
   same run, and (AdamW) against the PERF.md figure for PyTorch's CPU path (2.3 GB/s, measured
   on an AVX2 EPYC core; not measured in this run). */
#include "bench.h"   /* first: it sets _POSIX_C_SOURCE for clock_gettime */
#define AMP_IMPLEMENTATION
#include "amp.h"

#define NPARAM (16u << 20)
#define REPS 7

static double bench_memcpy(size_t bytes) {
  char *a = (char *)malloc(bytes), *b = (char *)malloc(bytes);
  double t[REPS];
  int r;
  memset(a, 1, bytes); memset(b, 2, bytes);
  for (r = 0; r < REPS; r++) { double t0 = bench_now(); memcpy(b, a, bytes / 2); t[r] = bench_now() - t0; a[r] = b[r + 1]; }
  free(a); free(b);
  /* bytes/2 copied = bytes/2 read + bytes/2 written: `bytes` of traffic */
  return (double)bytes / bench_median(t, REPS) / 1e9;
}

static double bench_kind(amp_optim_kind kind, int simd, double bytes_per_param) {
  amp_f16 *w = (amp_f16 *)malloc(NPARAM * sizeof(amp_f16)), *g = (amp_f16 *)malloc(NPARAM * sizeof(amp_f16));
  amp_optim_config oc; amp_scaler_config sc;
  amp_optimizer *o; amp_scaler *s;
  double t[REPS];
  size_t i;
  int r;
  memset(&oc, 0, sizeof oc); memset(&sc, 0, sizeof sc);
  oc.kind = kind; oc.weight_decay = 0.01f; oc.momentum = kind == AMP_SGD ? 0.9f : 0.0f;
  sc.init_scale = 1024.0f;
  for (i = 0; i < NPARAM; i++) { w[i] = amp_f32_to_f16(0.01f * (float)(i % 97)); g[i] = amp_f32_to_f16(0.5f * (float)(i % 13) - 3.0f); }
  if (amp_optimizer_create(&o, amp_cpu(), &oc) || amp_scaler_create(&s, amp_cpu(), &sc) ||
      amp_optimizer_add(o, AMP_F16, w, g, NPARAM)) { printf("setup failed: %s\n", amp_last_error()); exit(0); }
  amp__opt_simd = simd;
  for (r = 0; r < REPS + 1; r++) {
    double t0 = bench_now();
    amp_scaler_step(s, o);
    amp_scaler_update(s);
    if (r) t[r - 1] = bench_now() - t0;   /* the first touches the pages */
  }
  amp__opt_simd = -1;
  amp_optimizer_destroy(o); amp_scaler_destroy(s); free(w); free(g);
  return bytes_per_param * NPARAM / bench_median(t, REPS) / 1e9;
}

int main(void) {
  double mc = bench_memcpy((size_t)28 * NPARAM);
  double adamw = bench_kind(AMP_ADAMW, -1, 28.0), sgd = bench_kind(AMP_SGD, -1, 20.0);
  double adamw_plain = bench_kind(AMP_ADAMW, 0, 28.0);
  printf("16M params, one thread; %s loops (GB/s effective)\n", amp__opt_use_simd() ? "AVX2" : "portable");
  bench_line("memcpy (same run)", mc, 0, "GB/s");
  bench_line("adamw f16 step vs memcpy", adamw, mc, "GB/s");
  bench_line("adamw f16 step vs PERF.md PyTorch CPU 2.3", adamw, 2.3, "GB/s");
  if (bench_ref("cpu_adamw_gbs") > 0)   /* a PyTorch CPU figure measured in the same run, if any */
    bench_line("adamw f16 step vs PyTorch CPU (same run)", adamw, bench_ref("cpu_adamw_gbs"), "GB/s");
  bench_line("adamw f16 step, portable loops vs memcpy", adamw_plain, mc, "GB/s");
  bench_line("sgd-momentum f16 step vs memcpy", sgd, mc, "GB/s");
  return 0;
}
