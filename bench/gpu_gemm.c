/* bench/gpu_gemm.c - amp_gemm on the GPU (cuBLASLt) against torch.matmul in the same dtype, and
   the WMMA teaching kernel against amp_gemm. TFLOP/s = 2 m n k / time; row-major C = A B with
   C in the input type (what torch.matmul returns). One figure: 3 warm-up calls, then 7 timed
   repetitions (cudaEvent around enough calls to last >= 20 ms), the median. A GPU's clock moves
   from one second to the next (the same binary differs by up to 8% between two runs on an H100),
   so each line is the median of 5 rounds, and in each round amp_gemm and then torch.matmul are
   timed: PyTorch runs beside this program (`python3 bench/torch_ref.py --serve-matmul`, started
   here, one request per round).
   The fp8 lines: amp_gemm_ex's fp8 layer forward (E4M3 x and W, row-major x W^T, scale_invs 1 on
   the device, a bf16 result: cuBLASLt's fp8 kernels in their TN form, no packing) against
   torch._scaled_mm on the same operands (use_fast_accum off on both), 4096^3 and 8192^3; the same
   with fast accumulation on both (opts->fp8_fast_accum 1, use_fast_accum=True); and the
   block-scaled product (x in 1 x 128 blocks, W in 128 x 128, DeepSeek-V3's forward: cuBLASLt's
   block-scaled modes on Hopper) against our own per-tensor product in the same rounds (torch's
   _scaled_mm takes these scales only in some versions, so it is not the peer here); at 4096, the
   per-tensor product with an f32 C against the same with a bf16 C (whether cuBLASLt runs f32 C). */
#define _POSIX_C_SOURCE 200809L   /* fork, pipe, fdopen */
#include "bench.h"
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 5

/* The CUDA runtime calls used here, declared so that this file builds as plain C without the CUDA
   headers (cudaError_t is an int-sized enum, 0 = success; events are pointers). */
extern int cudaMalloc(void **p, size_t bytes);
extern int cudaFree(void *p);
extern int cudaMemcpy(void *dst, const void *src, size_t bytes, int kind);   /* 1 = host to device */
extern int cudaDeviceSynchronize(void);
extern int cudaEventCreate(void **e);
extern int cudaEventRecord(void *e, void *stream);
extern int cudaEventSynchronize(void *e);
extern int cudaEventElapsedTime(float *ms, void *start, void *stop);
extern int cudaEventDestroy(void *e);

/* The PyTorch peer: a python3 child reading requests on one pipe and answering on the other. */
static FILE *torch_in, *torch_out;
static pid_t torch_pid = -1;
static void torch_start(void) {
  int to[2], from[2];
  signal(SIGPIPE, SIG_IGN);   /* a peer that died reads as "no figure", not as our death */
  if (pipe(to) || pipe(from)) return;
  torch_pid = fork();
  if (torch_pid == 0) {
    dup2(to[0], 0); dup2(from[1], 1);
    close(to[0]); close(to[1]); close(from[0]); close(from[1]);
    execlp("python3", "python3", "bench/torch_ref.py", "--serve-matmul", (char *)NULL);
    _exit(127);
  }
  close(to[0]); close(from[1]);
  torch_in = fdopen(to[1], "w"); torch_out = fdopen(from[0], "r");
}
/* torch.matmul's TFLOP/s for this product called from Python, and in *graphed replayed from a CUDA
   graph (0 when the peer cannot give one). */
static double torch_tflops(const char *dtype, int m, int n, int k, double *graphed) {
  char line[96];
  double eager = 0;
  *graphed = 0;
  if (!torch_in || !torch_out) return 0;
  if (fprintf(torch_in, "%s %d %d %d\n", dtype, m, n, k) < 0 || fflush(torch_in)) return 0;
  if (!fgets(line, sizeof line, torch_out)) return 0;
  if (sscanf(line, "%lf %lf", &eager, graphed) < 1) return 0;
  return eager;
}
static void torch_stop(void) {
  if (torch_in) fclose(torch_in);
  if (torch_out) fclose(torch_out);
  if (torch_pid > 0) waitpid(torch_pid, NULL, 0);
}

static amp_device *dev;
static void *ev0, *ev1;

static void *dfill(size_t n, amp_dtype t) {
  size_t i, es = amp_dtype_size(t);
  uint16_t *h = (uint16_t *)malloc(n * es);
  void *d = NULL;
  uint32_t s = 1234567u;
  if (!h || cudaMalloc(&d, n * es) != 0) { printf("out of memory for %zu elements\n", n); exit(0); }
  for (i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    amp__store(h, t, i, (float)((int)(s >> 20) - 2048) / 2048.0f);
  }
  cudaMemcpy(d, h, n * es, 1);
  free(h);
  return d;
}

/* Median seconds of one call: C (m x n, type ct) = A (m x k, type t) op(B), row-major; op(B) = B
   (k x n) or, with tb, B^T (B n x k). */
static double time_gemm_ex(int m, int n, int k, amp_dtype t, amp_trans tb, amp_dtype ct, const void *A, const void *B,
                           void *C, const amp_gemm_opts *o) {
  double reps[7], one;
  int i, r, iters, ldb = tb == AMP_TRANS ? k : n;
  float ms = 0;
  for (i = 0; i < 3; i++)
    if (amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, tb, m, n, k, 1.0f, A, t, k, B, t, ldb, 0.0f, C, ct, n, o) != AMP_OK) {
      printf("amp_gemm: %s\n", amp_last_error()); return 0;
    }
  cudaEventRecord(ev0, NULL);
  amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, tb, m, n, k, 1.0f, A, t, k, B, t, ldb, 0.0f, C, ct, n, o);
  cudaEventRecord(ev1, NULL);
  cudaEventSynchronize(ev1);
  cudaEventElapsedTime(&ms, ev0, ev1);
  one = ms > 0 ? ms * 1e-3 : 1e-6;
  iters = (int)(0.02 / one) + 1;
  for (r = 0; r < 7; r++) {
    cudaEventRecord(ev0, NULL);
    for (i = 0; i < iters; i++)
      amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, tb, m, n, k, 1.0f, A, t, k, B, t, ldb, 0.0f, C, ct, n, o);
    cudaEventRecord(ev1, NULL);
    cudaEventSynchronize(ev1);
    cudaEventElapsedTime(&ms, ev0, ev1);
    reps[r] = ms * 1e-3 / iters;
  }
  return bench_median(reps, 7);
}
static double time_gemm(int m, int n, int k, amp_dtype t, const void *A, const void *B, void *C, amp_gemm_algo algo) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.algo = algo;
  return time_gemm_ex(m, n, k, t, AMP_NO_TRANS, t, A, B, C, &o);
}

/* The fp8 lines (see the top): ours and torch._scaled_mm's, alternating, the medians. */
static void fp8_lines(void) {
  static const int sizes[2] = {4096, 8192};
  float one = 1.0f, *ds = NULL;
  int s, r;
  if (cudaMalloc((void **)&ds, sizeof one) != 0) return;
  cudaMemcpy(ds, &one, sizeof one, 1);
  for (s = 0; s < 2; s++) {
    int m = sizes[s], n = sizes[s], k = sizes[s], f;
    void *A = dfill((size_t)m * k, AMP_E4M3), *B = dfill((size_t)n * k, AMP_E4M3), *C = dfill((size_t)m * n, AMP_BF16);
    double flop = 2.0 * m * n * k, ours[ROUNDS], theirs[ROUNDS], graphed[ROUNDS], mine = 0, blk[ROUNDS], per[ROUNDS];
    size_t nsa = (size_t)m * (size_t)((k + 127) / 128), nsb = (size_t)((n + 127) / 128) * (size_t)((k + 127) / 128), i;
    float *hs = (float *)malloc(nsa * sizeof(float)), *dsa = NULL, *dsb = NULL;
    amp_gemm_opts o, ob;
    char name[64];
    memset(&ob, 0, sizeof ob);   /* block scales of 1: the same values as the per-tensor product */
    if (hs && cudaMalloc((void **)&dsa, nsa * sizeof(float)) == 0 && cudaMalloc((void **)&dsb, nsb * sizeof(float)) == 0) {
      for (i = 0; i < nsa; i++) hs[i] = 1.0f;
      cudaMemcpy(dsa, hs, nsa * sizeof(float), 1); cudaMemcpy(dsb, hs, nsb * sizeof(float), 1);
      ob.a_blocks = AMP_BLOCK_1x128; ob.a_scales = dsa; ob.b_blocks = AMP_BLOCK_128x128; ob.b_scales = dsb;
    }
    free(hs);
    for (f = 0; f < 2; f++) {   /* split accumulation, then fast */
      memset(&o, 0, sizeof o);
      o.a_scale_inv = ds; o.b_scale_inv = ds; o.fp8_fast_accum = f;
      for (r = 0; r < ROUNDS; r++) {
        double sec = time_gemm_ex(m, n, k, AMP_E4M3, AMP_TRANS, AMP_BF16, A, B, C, &o);
        ours[r] = sec > 0 ? flop / sec * 1e-12 : 0;
        theirs[r] = torch_tflops(f ? "e4m3fast" : "e4m3", m, n, k, &graphed[r]);
      }
      mine = bench_median(ours, ROUNDS);
      snprintf(name, sizeof name, "gemm_e4m3%s_%d vs torch._scaled_mm eager", f ? "_fast" : "", sizes[s]);
      if (mine > 0) bench_line(name, mine, bench_median(theirs, ROUNDS), "TFLOP/s");
      snprintf(name, sizeof name, "gemm_e4m3%s_%d vs torch._scaled_mm graph", f ? "_fast" : "", sizes[s]);
      if (mine > 0) bench_line(name, mine, bench_median(graphed, ROUNDS), "TFLOP/s");
    }
    memset(&o, 0, sizeof o);
    o.a_scale_inv = ds; o.b_scale_inv = ds;
    for (r = 0; r < ROUNDS && ob.a_scales; r++) {   /* block-scaled against per-tensor, alternating */
      double sb = time_gemm_ex(m, n, k, AMP_E4M3, AMP_TRANS, AMP_BF16, A, B, C, &ob);
      double sp = time_gemm_ex(m, n, k, AMP_E4M3, AMP_TRANS, AMP_BF16, A, B, C, &o);
      blk[r] = sb > 0 ? flop / sb * 1e-12 : 0; per[r] = sp > 0 ? flop / sp * 1e-12 : 0;
    }
    snprintf(name, sizeof name, "gemm_e4m3_blk128_%d (ref: per-tensor)", sizes[s]);
    if (ob.a_scales) bench_line(name, bench_median(blk, ROUNDS), bench_median(per, ROUNDS), "TFLOP/s");
    if (s == 0) {   /* an f32 C against the bf16 one, alternating: near 1x where cuBLASLt ran the f32
                       product, far below where it refused every algorithm and the plain kernel did */
      void *C32 = dfill((size_t)m * n, AMP_F32);
      for (r = 0; r < ROUNDS && C32; r++) {
        double s32 = time_gemm_ex(m, n, k, AMP_E4M3, AMP_TRANS, AMP_F32, A, B, C32, &o);
        double s16 = time_gemm_ex(m, n, k, AMP_E4M3, AMP_TRANS, AMP_BF16, A, B, C, &o);
        blk[r] = s32 > 0 ? flop / s32 * 1e-12 : 0; per[r] = s16 > 0 ? flop / s16 * 1e-12 : 0;
      }
      snprintf(name, sizeof name, "gemm_e4m3_f32out_%d (ref: bf16 out)", sizes[s]);
      if (C32) bench_line(name, bench_median(blk, ROUNDS), bench_median(per, ROUNDS), "TFLOP/s");
      cudaFree(C32);
    }
    cudaFree(dsa); cudaFree(dsb);
    cudaFree(A); cudaFree(B); cudaFree(C);
  }
  cudaFree(ds);
}

int main(void) {
  /* the last two are skinny (few rows, or a long k): where split-k pays, and where keeping its
     partial sums in fp32 (no split-k reduction in f16/bf16) may cost against torch.matmul */
  static const int shapes[][3] = {{1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 8192, 8192}, {16, 4096, 4096}, {256, 256, 16384}};
  static const char *names[] = {"1024", "4096", "8192", "16x4096x4096", "256x256x16384"};
  static const amp_dtype types[] = {AMP_F16, AMP_BF16};
  int s, t, r;
  (void)bench_now; (void)bench_ref;
  if (amp_cuda_open(&dev, 0, NULL) != AMP_OK) { printf("gpu_gemm: skipped (%s)\n", amp_last_error()); return 0; }
  cudaEventCreate(&ev0); cudaEventCreate(&ev1);
  torch_start();
  printf("amp_gemm (cuBLASLt, called from C) vs torch.matmul (called from Python; and replayed from a CUDA graph), TFLOP/s, median of %d alternating rounds   [ours, torch, ratio]\n", ROUNDS);
  for (t = 0; t < 2; t++)
    for (s = 0; s < 5; s++) {
      int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      const char *tn = types[t] == AMP_F16 ? "f16" : "bf16";
      void *A = dfill((size_t)m * k, types[t]), *B = dfill((size_t)k * n, types[t]), *C = dfill((size_t)m * n, types[t]);
      double flop = 2.0 * m * n * k, ours[ROUNDS], theirs[ROUNDS], graphed[ROUNDS], mine;
      char name[64];
      for (r = 0; r < ROUNDS; r++) {
        double sec = time_gemm(m, n, k, types[t], A, B, C, AMP_GEMM_AUTO);
        ours[r] = sec > 0 ? flop / sec * 1e-12 : 0;
        theirs[r] = torch_tflops(tn, m, n, k, &graphed[r]);
      }
      mine = bench_median(ours, ROUNDS);
      /* two peers: torch.matmul called from Python (what a PyTorch loop pays, dispatch included),
         and replayed from a CUDA graph (cuBLAS's time alone; ours is an eager C call) */
      snprintf(name, sizeof name, "gemm_%s_%s vs torch eager", tn, names[s]);
      if (mine > 0) bench_line(name, mine, bench_median(theirs, ROUNDS), "TFLOP/s");
      snprintf(name, sizeof name, "gemm_%s_%s vs torch graph", tn, names[s]);
      if (mine > 0) bench_line(name, mine, bench_median(graphed, ROUNDS), "TFLOP/s");
      if (s == 1 && mine > 0) {   /* the teaching kernel against amp_gemm at 4096^3 (target >= 0.07x) */
        double w = time_gemm(m, n, k, types[t], A, B, C, AMP_GEMM_WMMA);
        snprintf(name, sizeof name, "gemm_wmma_%s_%s (ref: amp_gemm)", tn, names[s]);
        if (w > 0) bench_line(name, flop / w * 1e-12, mine, "TFLOP/s");
      }
      cudaFree(A); cudaFree(B); cudaFree(C);
    }
  fp8_lines();
  torch_stop();
  cudaEventDestroy(ev0); cudaEventDestroy(ev1);
  amp_device_close(dev);
  return 0;
}
