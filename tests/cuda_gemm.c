/* amp_gemm on a CUDA device (cuBLASLt, the WMMA teaching kernel, the plain kernel) against the CPU
   reference on the same inputs. Without a GPU only the checks that need none run; the rest says
   "skipped".

   How close GPU and CPU must be, and why. Both convert the inputs exactly to f32 and accumulate in
   f32; products of f16/bf16 numbers are exact in f32, so they differ only in the order of the
   additions (Tensor Core fragments, split-k, FMA) and in where the result is rounded. Each order is
   within k * 2^-24 * sum_p |a(i,p) b(p,j)| of the exact sum, so per element
       E = |alpha| (2k + 4) 2^-24 sum|ab| + 8 * 2^-24 (|alpha acc| + |beta c| + |bias|)
   (the last term: the blend and bias additions, FMA or not), times 1.13 through GELU (its slope
   is at most 1.13) plus tanh's rounding; and since each side rounds once to the output type
   (twice on the GPU when the epilogue runs after cuBLASLt), |gpu - cpu| <= E + 3 u_out (|cpu| + E)
   + 2 * (half the smallest subnormal), u_out = 2^-24, 2^-11, 2^-8 for f32, f16, bf16.
   When the epilogue runs after cuBLASLt (AUTO with a bias cuBLASLt does not fuse, and GELU always),
   cuBLASLt's rounding is of the value before our epilogue, so E also gets u_out (|alpha acc| +
   |beta c| + |bias|): with a bias that cancels the product, that rounding can be far larger than
   u_out |cpu|. GELU never runs in cuBLASLt (its tanh's accuracy is not documented): it is always
   amp__gelu_tanh, whose tanh (amp__tanh, in double) gives the CPU's bits for the same input; the
   8 * 2^-24 term above covers its rounding.
   TF32 (opt-in) rounds each f32 input to 11 significant bits: + |alpha| 2^-9 sum|ab|. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <pthread.h>

/* The few CUDA runtime calls this test needs, declared here so that it builds as plain C without
   the CUDA headers (cudaError_t is an int-sized enum, 0 = cudaSuccess). */
extern int cudaMalloc(void **p, size_t bytes);
extern int cudaFree(void *p);
extern int cudaMemcpy(void *dst, const void *src, size_t bytes, int kind);   /* 1 = to device, 2 = to host */
extern int cudaDeviceSynchronize(void);
extern int cudaMemset(void *p, int value, size_t bytes);

static amp_device *dev;

static void *dmalloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != 0) { printf("FAIL cudaMalloc(%zu)\n", bytes); exit(1); }
  return p;
}
static void up(void *d, const void *h, size_t bytes) { if (cudaMemcpy(d, h, bytes, 1) != 0) { printf("FAIL upload\n"); exit(1); } }
static void down(void *h, const void *d, size_t bytes) { if (cudaMemcpy(h, d, bytes, 2) != 0) { printf("FAIL download\n"); exit(1); } }

static uint32_t rng_state = 777u;
static float rnd(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((int)(rng_state >> 20) - 2048) / 2048.0f;
}
static const char *tname(amp_dtype t) { return t == AMP_F32 ? "f32" : t == AMP_F16 ? "f16" : "bf16"; }
static double unit_roundoff(amp_dtype t) { return t == AMP_F32 ? 0x1p-24 : t == AMP_F16 ? 0x1p-11 : 0x1p-8; }
static double tiny(amp_dtype t) { return t == AMP_F32 ? 0x1p-150 : t == AMP_F16 ? 0x1p-25 : 0x1p-134; }

/* A host matrix with its device copy; `off` elements of slack before it make the device pointer
   misaligned (off 1: 2-byte aligned for f16). */
typedef struct { void *h, *d, *dbase; amp_dtype t; int ld; size_t n, rs, cs; } mat;

static mat mat_make(amp_layout L, amp_trans tr, int rows, int cols, amp_dtype t, int pad, int off) {
  mat x;
  int srows = tr == AMP_NO_TRANS ? rows : cols, scols = tr == AMP_NO_TRANS ? cols : rows;
  int inner = L == AMP_ROW_MAJOR ? scols : srows, outer = L == AMP_ROW_MAJOR ? srows : scols;
  size_t i, es = amp_dtype_size(t);
  int r, c;
  x.t = t;
  x.ld = (inner > 1 ? inner : 1) + pad;
  x.n = (size_t)x.ld * (size_t)(outer > 1 ? outer : 1);
  x.h = malloc(x.n * es);
  for (i = 0; i < x.n; i++) amp__store(x.h, t, i, NAN);
  if (L == AMP_ROW_MAJOR) { x.rs = tr == AMP_NO_TRANS ? (size_t)x.ld : 1; x.cs = tr == AMP_NO_TRANS ? 1 : (size_t)x.ld; }
  else { x.rs = tr == AMP_NO_TRANS ? 1 : (size_t)x.ld; x.cs = tr == AMP_NO_TRANS ? (size_t)x.ld : 1; }
  for (r = 0; r < rows; r++) for (c = 0; c < cols; c++) amp__store(x.h, t, r * x.rs + c * x.cs, rnd());
  x.dbase = dmalloc((x.n + (size_t)off) * es);
  x.d = (char *)x.dbase + (size_t)off * es;
  up(x.d, x.h, x.n * es);
  return x;
}
static void mat_free(mat *x) { free(x->h); cudaFree(x->dbase); }
static float mat_get(const mat *x, int r, int c) { return amp__load(x->h, x->t, (size_t)r * x->rs + (size_t)c * x->cs); }

typedef struct { amp_layout L; amp_trans ta, tb; int m, n, k; float alpha, beta; amp_dtype in, out; int pad, off; } problem;

/* Runs the product on the GPU (with opts) and on the CPU (same inputs, same epilogue) and checks
   the bound above for every element, and that C's padding is unchanged. */
static int check_gpu(const problem *P, const amp_gemm_opts *o, double tf32) {
  mat A = mat_make(P->L, P->ta, P->m, P->k, P->in, P->pad, P->off);
  mat B = mat_make(P->L, P->tb, P->k, P->n, P->in, P->pad + 1, P->off);
  mat C = mat_make(P->L, AMP_NO_TRANS, P->m, P->n, P->out, P->pad, P->off);
  size_t es = amp_dtype_size(P->out);
  void *cpu = malloc(C.n * es), *gpu = malloc(C.n * es);
  amp_gemm_opts ho;
  void *dbias = NULL;
  int i, j, bad = 0, act = o ? (int)o->act : 0;
  /* AUTO with an epilogue: cuBLASLt may fuse the bias and ReLU, or round first for our epilogue kernel */
  int split = o && o->algo == AMP_GEMM_AUTO && (o->bias || o->act != AMP_ACT_NONE);
  amp_status st;
  memset(&ho, 0, sizeof ho);
  if (o) ho = *o;
  ho.algo = AMP_GEMM_REFERENCE;   /* the exact in-order CPU product the bound is stated against */
  memcpy(cpu, C.h, C.n * es);
  if (o && o->bias) {   /* o->bias is a host array of n values: give the GPU its own copy */
    size_t bs = amp_dtype_size(o->bias_type) * (size_t)P->n;
    dbias = dmalloc(bs);
    up(dbias, o->bias, bs);
  }
  EXPECT(amp_gemm_ex(amp_cpu(), P->L, P->ta, P->tb, P->m, P->n, P->k, P->alpha, A.h, P->in, A.ld, B.h, P->in, B.ld,
                     P->beta, cpu, P->out, C.ld, &ho) == AMP_OK, "cpu: %s", amp_last_error());
  {
    amp_gemm_opts go;
    memset(&go, 0, sizeof go);
    if (o) { go = *o; go.bias = dbias; }
    st = amp_gemm_ex(dev, P->L, P->ta, P->tb, P->m, P->n, P->k, P->alpha, A.d, P->in, A.ld, B.d, P->in, B.ld, P->beta,
                     C.d, P->out, C.ld, o ? &go : NULL);
  }
  EXPECT(st == AMP_OK, "gpu: %s", amp_last_error());
  EXPECT(amp_device_sync(dev) == AMP_OK, "sync: %s", amp_last_error());
  down(gpu, C.d, C.n * es);
  for (i = 0; i < P->m && !bad; i++)
    for (j = 0; j < P->n && !bad; j++) {
      size_t at = (size_t)i * C.rs + (size_t)j * C.cs;
      double s = 0, sabs = 0, c0 = amp__load(C.h, P->out, at), bias = 0, e;
      double want = amp__load(cpu, P->out, at), got = amp__load(gpu, P->out, at);
      int p;
      for (p = 0; p < P->k; p++) { double v = (double)mat_get(&A, i, p) * mat_get(&B, p, j); s += v; sabs += fabs(v); }
      if (o && o->bias) bias = amp__load(o->bias, o->bias_type, (size_t)j);
      e = fabs(P->alpha) * ((2.0 * P->k + 4) * 0x1p-24 + tf32) * sabs
        + 8 * 0x1p-24 * (fabs(P->alpha * s) + fabs(P->beta * c0) + fabs(bias));
      if (split) e += unit_roundoff(P->out) * (fabs(P->alpha * s) + fabs(P->beta * c0) + fabs(bias));
      if (act == AMP_ACT_GELU) e = 1.13 * e + 8 * 0x1p-24 * (fabs(want) + 1e-3);
      e = e + 3 * unit_roundoff(P->out) * (fabs(want) + e) + 2 * tiny(P->out);
      if (!(fabs(got - want) <= e)) {
        bad = 1;
        EXPECT(0, "algo %d %s %s %s %s->%s m %d n %d k %d alpha %g beta %g pad %d off %d act %d bias %d: C(%d,%d) cpu %.9g, gpu %.9g, bound %.3g",
               o ? (int)o->algo : 0, P->L ? "col" : "row", P->ta ? "T" : "N", P->tb ? "T" : "N", tname(P->in), tname(P->out),
               P->m, P->n, P->k, P->alpha, P->beta, P->pad, P->off, act, o && o->bias, i, j, want, got, e);
      }
    }
  for (i = 0; i < (int)C.n && !bad; i++) {   /* padding: the bits the GPU must not touch */
    size_t inner = (size_t)i % (size_t)C.ld, outer = (size_t)i / (size_t)C.ld;
    int pad_elem = P->L == AMP_ROW_MAJOR ? (inner >= (size_t)P->n || outer >= (size_t)P->m)
                                         : (inner >= (size_t)P->m || outer >= (size_t)P->n);
    if (pad_elem && memcmp((char *)gpu + (size_t)i * es, (char *)C.h + (size_t)i * es, es)) {
      bad = 1; EXPECT(0, "m %d n %d ldc %d: padding element %d of C was written", P->m, P->n, C.ld, i);
    }
  }
  mat_free(&A); mat_free(&B); mat_free(&C); free(cpu); free(gpu);
  if (dbias) cudaFree(dbias);
  return !bad;
}

/* ---- without a GPU ----------------------------------------------------------------------------- */

static void cpu_device_still_runs_the_reference_in_a_cuda_build(void) {
  float A[4] = {1, 2, 3, 4}, B[4] = {1, 0, 0, 1}, C[4] = {0, 0, 0, 0};
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1, A, AMP_F32, 2, B, AMP_F32, 2, 0, C,
                  AMP_F32, 2) == AMP_OK, "%s", amp_last_error());
  EXPECT(C[0] == 1 && C[1] == 2 && C[2] == 3 && C[3] == 4, "A * I: expected 1 2 3 4, got %g %g %g %g", C[0], C[1], C[2], C[3]);
}

/* ---- on the GPU ---------------------------------------------------------------------------------- */

static const int shapes[][3] = {{1, 1, 1}, {3, 17, 33}, {65, 33, 17}, {127, 129, 255}, {256, 128, 64}, {200, 300, 100}};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static void cublaslt_matches_cpu_for_every_layout_transpose_and_type(void) {
  static const amp_dtype ins[] = {AMP_F16, AMP_F16, AMP_BF16, AMP_BF16, AMP_F32, AMP_F16, AMP_F32};
  static const amp_dtype outs[] = {AMP_F16, AMP_F32, AMP_BF16, AMP_F32, AMP_F32, AMP_BF16, AMP_F16};
  int L, ta, tb, s, t;
  for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++) for (tb = 0; tb < 2; tb++) for (s = 0; s < NSHAPES; s++) for (t = 0; t < 7; t++) {
    problem P;
    P.L = (amp_layout)L; P.ta = (amp_trans)ta; P.tb = (amp_trans)tb;
    P.m = shapes[s][0]; P.n = shapes[s][1]; P.k = shapes[s][2];
    P.alpha = (s % 2) ? 0.5f : 1.0f; P.beta = (t % 3 == 1) ? -1.0f : 0.0f;
    P.in = ins[t]; P.out = outs[t]; P.pad = (s + t) % 3; P.off = 0;
    if (!check_gpu(&P, NULL, 0)) return;
  }
}

static void cublaslt_handles_unaligned_pointers_and_odd_leading_dimensions(void) {
  int s, off, L;
  for (L = 0; L < 2; L++) for (s = 1; s < NSHAPES; s++) for (off = 1; off < 4; off += 2) {
    problem P = {(amp_layout)L, AMP_NO_TRANS, AMP_TRANS, 0, 0, 0, 1.0f, 0.5f, AMP_F16, AMP_F16, 1, 0};
    P.m = shapes[s][0]; P.n = shapes[s][1]; P.k = shapes[s][2]; P.off = off; P.in = off == 1 ? AMP_F16 : AMP_BF16;
    P.out = P.in;
    if (!check_gpu(&P, NULL, 0)) return;
  }
}

static void gpu_epilogues_match_cpu(void) {
  static const amp_dtype bts[] = {AMP_F32, AMP_F16, AMP_BF16};
  int algo, L, act, bt;
  for (algo = 0; algo < 3; algo++) for (L = 0; L < 2; L++) for (act = 0; act < 3; act++) for (bt = 0; bt < 4; bt++) {
    float bf[300];
    uint16_t bh[300];
    amp_gemm_opts o;
    problem P = {(amp_layout)L, AMP_NO_TRANS, AMP_NO_TRANS, 130, 300, 70, 1.0f, 0.0f, AMP_F16, AMP_F16, 0, 0};
    int j;
    memset(&o, 0, sizeof o);
    o.algo = (amp_gemm_algo)algo; o.act = (amp_act)act;
    if (bt < 3) {
      for (j = 0; j < 300; j++) { float v = 2 * rnd(); bf[j] = v; bh[j] = bt == 1 ? amp_f32_to_f16(v) : amp_f32_to_bf16(v); }
      o.bias = bt == 0 ? (const void *)bf : (const void *)bh; o.bias_type = bts[bt];
    }
    P.out = (act + bt) % 2 ? AMP_F32 : AMP_F16;
    P.beta = act == 1 ? 0.5f : 0.0f;
    if (!check_gpu(&P, &o, 0)) return;
  }
}

static void wmma_kernel_matches_cpu_on_any_shape(void) {
  static const int wshapes[][3] = {{1, 1, 1}, {16, 16, 16}, {17, 15, 33}, {128, 128, 32}, {129, 257, 65}, {300, 200, 100}, {64, 640, 1000}};
  int L, ta, tb, s, t;
  for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++) for (tb = 0; tb < 2; tb++) for (s = 0; s < 7; s++) for (t = 0; t < 2; t++) {
    amp_gemm_opts o;
    problem P;
    memset(&o, 0, sizeof o);
    o.algo = AMP_GEMM_WMMA;
    P.L = (amp_layout)L; P.ta = (amp_trans)ta; P.tb = (amp_trans)tb;
    P.m = wshapes[s][0]; P.n = wshapes[s][1]; P.k = wshapes[s][2];
    P.alpha = t ? 1.0f : -0.5f; P.beta = t ? 0.0f : 2.0f;
    P.in = t ? AMP_BF16 : AMP_F16; P.out = s % 2 ? AMP_F32 : P.in;
    P.pad = s % 2 ? 0 : 3; P.off = s == 4 ? 1 : 0;      /* aligned (16-byte loads) and not */
    if (!check_gpu(&P, &o, 0)) return;
  }
}

static void simple_kernel_matches_cpu(void) {
  int L, ta, tb;
  for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++) for (tb = 0; tb < 2; tb++) {
    amp_gemm_opts o;
    problem P = {(amp_layout)L, (amp_trans)ta, (amp_trans)tb, 37, 29, 71, 1.5f, -1.0f, AMP_BF16, AMP_F32, 2, 1};
    memset(&o, 0, sizeof o);
    o.algo = AMP_GEMM_SIMPLE;
    if (!check_gpu(&P, &o, 0)) return;
  }
}

static void tf32_is_opt_in_and_within_its_bound(void) {
  amp_gemm_opts o;
  problem P = {AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 96, 80, 512, 1.0f, 0.0f, AMP_F32, AMP_F32, 0, 0};
  memset(&o, 0, sizeof o);
  check_gpu(&P, NULL, 0);          /* default: full f32 products, the f32 bound */
  o.allow_tf32 = 1;
  check_gpu(&P, &o, 0x1p-9);       /* TF32: 11-bit inputs */
}

/* k 0, alpha 0, beta 0 with NaN in C, m or n 0: the BLAS special cases, on the device. */
static void gpu_follows_blas_special_cases(void) {
  float h[4] = {NAN, NAN, NAN, NAN}, a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, anan[4] = {NAN, NAN, NAN, NAN}, r[4];
  float *dc = (float *)dmalloc(16), *da = (float *)dmalloc(16), *db = (float *)dmalloc(16), *dn = (float *)dmalloc(16);
  up(dc, h, 16); up(da, a, 16); up(db, b, 16); up(dn, anan, 16);
  EXPECT(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1, da, AMP_F32, 2, db, AMP_F32, 2, 0, dc, AMP_F32, 2) == AMP_OK,
         "%s", amp_last_error());
  amp_device_sync(dev); down(r, dc, 16);
  EXPECT(r[0] == 1 && r[1] == 2 && r[2] == 3 && r[3] == 4, "beta 0, C NaN: expected 1 2 3 4, got %g %g %g %g", r[0], r[1], r[2], r[3]);
  EXPECT(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 0, 1, NULL, AMP_F32, 1, NULL, AMP_F32, 2, 3, dc, AMP_F32, 2) == AMP_OK,
         "%s", amp_last_error());
  amp_device_sync(dev); down(r, dc, 16);
  EXPECT(r[0] == 3 && r[1] == 6 && r[2] == 9 && r[3] == 12, "k 0, beta 3: expected 3 6 9 12, got %g %g %g %g", r[0], r[1], r[2], r[3]);
  EXPECT(amp_gemm(dev, AMP_COL_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 0, dn, AMP_F32, 2, dn, AMP_F32, 2, 1, dc, AMP_F32, 2) == AMP_OK,
         "%s", amp_last_error());
  amp_device_sync(dev); down(r, dc, 16);
  EXPECT(r[0] == 3 && r[1] == 6 && r[2] == 9 && r[3] == 12, "alpha 0, A NaN, beta 1: expected 3 6 9 12, got %g %g %g %g", r[0], r[1], r[2], r[3]);
  EXPECT(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 0, 2, 2, 1, NULL, AMP_F32, 2, NULL, AMP_F32, 2, 0, NULL, AMP_F32, 2) == AMP_OK,
         "m 0: %s", amp_last_error());
  cudaFree(dc); cudaFree(da); cudaFree(db); cudaFree(dn);
}

/* More shapes than the plan cache holds, then the first again: evicted plans are rebuilt, and a
   repeated call gives the same bits. */
static void plan_cache_survives_eviction_and_repeats_bit_for_bit(void) {
  int round, s;
  for (round = 0; round < 2; round++)
    for (s = 0; s < 40; s++) {
      problem P = {AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 8 + s, 24, 40 + s % 3, 1.0f, 0.0f, AMP_F16, AMP_F32, 0, 0};
      if (!check_gpu(&P, NULL, 0)) return;
    }
  {
    mat A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, 64, 96, AMP_BF16, 0, 0), B = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, 96, 48, AMP_BF16, 0, 0);
    float r1[64 * 48], r2[64 * 48];
    float *dc = (float *)dmalloc(sizeof r1);
    int finite = 1, e;
    if (cudaMemset(dc, 0xFF, sizeof r1) != 0) { printf("FAIL cudaMemset\n"); exit(1); }   /* NaN where the product writes nothing */
    EXPECT(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 64, 48, 96, 1, A.d, AMP_BF16, A.ld, B.d, AMP_BF16, B.ld, 0, dc, AMP_F32, 48) == AMP_OK, "%s", amp_last_error());
    amp_device_sync(dev); down(r1, dc, sizeof r1);
    EXPECT(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 64, 48, 96, 1, A.d, AMP_BF16, A.ld, B.d, AMP_BF16, B.ld, 0, dc, AMP_F32, 48) == AMP_OK, "%s", amp_last_error());
    amp_device_sync(dev); down(r2, dc, sizeof r2);
    EXPECT(!memcmp(r1, r2, sizeof r1), "two identical calls differ (C[0] %g vs %g)", r1[0], r2[0]);
    for (e = 0; e < 64 * 48; e++) finite &= isfinite(r1[e]) != 0;
    EXPECT(finite, "the product left part of C unwritten (NaN where the fill was)");
    mat_free(&A); mat_free(&B); cudaFree(dc);
  }
}

/* ---- two threads, one device: the plan cache and the bias pointer are shared ------------------ */

enum { TM = 64, TN = 64, TK = 64 };
/* products per thread: 100, or 12 (each of the 6 widths twice) with AMP_TEST_QUICK=1, as make gpu-check
   runs the tests under compute-sanitizer's racecheck, which makes each cuBLASLt kernel slow */
static int titer(void) { const char *q = getenv("AMP_TEST_QUICK"); return q && *q && strcmp(q, "0") ? 12 : 100; }
typedef struct gthread {
  int id;
  const void *da, *db;        /* f16 A (TM x TK) and B (TK x TN), row-major, entries -1, 0, 1 */
  const float *p;             /* the exact product A B on the host */
  void *dc, *dbias;           /* this thread's own C (f16, TM x TN) and bias (f16, TN) */
  float bias[TN];
  int ok;
  char err[1024];
} gthread;

/* titer() products C = A B + bias through cuBLASLt with the fused bias epilogue, over 6 widths that
   both threads share (one plan each in the one cache), each thread with its own bias: every value is
   a small integer, exact in f16, so each result must be exact. A bias pointer written into a shared
   descriptor by one thread and used by the other's product shows as the other thread's bias. */
static void *gemm_thread(void *arg) {
  gthread *g = (gthread *)arg;
  amp_f16 c[TM * TN];
  amp_gemm_opts o;
  int it, i, j;
  memset(&o, 0, sizeof o);
  o.bias = g->dbias; o.bias_type = AMP_F16;
  g->ok = 0;
  for (it = 0; it < titer(); it++) {
    int n = TN - 8 * ((it + g->id) % 6);
    if (amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, TM, n, TK, 1.0f, g->da, AMP_F16, TK, g->db, AMP_F16, TN, 0.0f,
                    g->dc, AMP_F16, TN, &o) != AMP_OK || amp_device_sync(dev) != AMP_OK) {
      snprintf(g->err, sizeof g->err, "iteration %d: %s", it, amp_last_error()); return NULL;
    }
    if (cudaMemcpy(c, g->dc, sizeof c, 2) != 0) { snprintf(g->err, sizeof g->err, "iteration %d: download failed", it); return NULL; }
    for (i = 0; i < TM; i++)
      for (j = 0; j < n; j++) {
        float want = g->p[i * TN + j] + g->bias[j], got = amp_f16_to_f32(c[i * TN + j]);
        if (got != want) {
          snprintf(g->err, sizeof g->err, "iteration %d (n %d): C(%d,%d) = %g, want %g (A B %g + this thread's bias %g)", it, n, i, j,
                   (double)got, (double)want, (double)g->p[i * TN + j], (double)g->bias[j]);
          return NULL;
        }
      }
  }
  g->ok = 1;
  return NULL;
}

static void two_threads_share_the_plan_cache_and_get_their_own_bias(void) {
  static amp_f16 a[TM * TK], b[TK * TN], hb[TN];
  static float p[TM * TN];
  gthread g[2];
  pthread_t th[2];
  void *da = dmalloc(sizeof a), *db = dmalloc(sizeof b);
  int i, j, q, t;
  for (i = 0; i < TM * TK; i++) a[i] = amp_f32_to_f16(rnd() < -0.33f ? -1.0f : rnd() < 0.0f ? 0.0f : 1.0f);
  for (i = 0; i < TK * TN; i++) b[i] = amp_f32_to_f16(rnd() < -0.33f ? -1.0f : rnd() < 0.0f ? 0.0f : 1.0f);
  for (i = 0; i < TM; i++)
    for (j = 0; j < TN; j++) {
      float s = 0;
      for (q = 0; q < TK; q++) s += amp_f16_to_f32(a[i * TK + q]) * amp_f16_to_f32(b[q * TN + j]);
      p[i * TN + j] = s;
    }
  up(da, a, sizeof a); up(db, b, sizeof b);
  memset(g, 0, sizeof g);
  for (t = 0; t < 2; t++) {
    g[t].id = t; g[t].da = da; g[t].db = db; g[t].p = p;
    g[t].dc = dmalloc(TM * TN * sizeof(amp_f16)); g[t].dbias = dmalloc(sizeof hb);
    if (cudaMemset(g[t].dc, 0, TM * TN * sizeof(amp_f16)) != 0) { printf("FAIL cudaMemset\n"); exit(1); }   /* narrow products leave columns unwritten */
    for (j = 0; j < TN; j++) { g[t].bias[j] = (float)(100 * (t + 1) + j % 7); hb[j] = amp_f32_to_f16(g[t].bias[j]); }
    up(g[t].dbias, hb, sizeof hb);
  }
  for (t = 0; t < 2; t++) pthread_create(&th[t], NULL, gemm_thread, &g[t]);
  for (t = 0; t < 2; t++) pthread_join(th[t], NULL);
  for (t = 0; t < 2; t++) EXPECT(g[t].ok, "thread %d: %s", t, g[t].err);
  for (t = 0; t < 2; t++) { cudaFree(g[t].dc); cudaFree(g[t].dbias); }
  cudaFree(da); cudaFree(db);
}

/* Mixed input types on the GPU: each 16-bit operand widened into a stream-ordered f32 scratch, then
   the f32 product: bit for bit the product of f32 copies widened beforehand (the same cuBLASLt
   call), for every pair and transpose. */
static void mixed_types_equal_the_product_of_widened_copies(void) {
  static const amp_dtype types[3] = {AMP_F32, AMP_F16, AMP_BF16};
  enum { M = 37, N = 45, K = 70, LD = 80, S = 80 * 80 };
  static float hf[S], r1[S], r2[S];
  void *da = dmalloc((size_t)S * 4), *db = dmalloc((size_t)S * 4), *wa = dmalloc((size_t)S * 4), *wb = dmalloc((size_t)S * 4);
  float *c1 = (float *)dmalloc((size_t)S * 4), *c2 = (float *)dmalloc((size_t)S * 4), *src = (float *)dmalloc((size_t)S * 4);
  int ia, ib, tr, i;
  for (i = 0; i < S; i++) hf[i] = (float)((i * 37) % 101) / 50.0f - 1.0f + (float)i * 0x1p-20f;
  up(src, hf, sizeof hf);
  cudaMemset(c1, 0, (size_t)S * 4); cudaMemset(c2, 0, (size_t)S * 4);   /* C's padding past n: the same, and initialised */
  for (ia = 0; ia < 3; ia++) for (ib = 0; ib < 3; ib++) for (tr = 0; tr < 4; tr++) {
    amp_trans ta = tr & 1 ? AMP_TRANS : AMP_NO_TRANS, tb = tr & 2 ? AMP_TRANS : AMP_NO_TRANS;
    amp_status s1, s2;
    char m[256] = "";
    if (ia == ib) continue;
    if (amp__cu_cast(dev->cuda, da, types[ia], src, AMP_F32, S, m, sizeof m) || amp__cu_cast(dev->cuda, wa, AMP_F32, da, types[ia], S, m, sizeof m) ||
        amp__cu_cast(dev->cuda, db, types[ib], src, AMP_F32, S, m, sizeof m) || amp__cu_cast(dev->cuda, wb, AMP_F32, db, types[ib], S, m, sizeof m)) {
      EXPECT(0, "cast: %s", m); break;
    }
    s1 = amp_gemm(dev, AMP_ROW_MAJOR, ta, tb, M, N, K, 1.0f, da, types[ia], LD, db, types[ib], LD, 0.0f, c1, AMP_F32, LD);
    s2 = amp_gemm(dev, AMP_ROW_MAJOR, ta, tb, M, N, K, 1.0f, wa, AMP_F32, LD, wb, AMP_F32, LD, 0.0f, c2, AMP_F32, LD);
    EXPECT(s1 == AMP_OK && s2 == AMP_OK, "A %d x B %d trans %d: %s", ia, ib, tr, amp_last_error());
    amp_device_sync(dev);
    down(r1, c1, sizeof r1); down(r2, c2, sizeof r2);
    EXPECT(!memcmp(r1, r2, (size_t)M * LD * 4), "A %d x B %d trans %d: the mixed product differs from the widened one (C[0] %g vs %g)",
           ia, ib, tr, (double)r1[0], (double)r2[0]);
  }
  cudaFree(da); cudaFree(db); cudaFree(wa); cudaFree(wb); cudaFree(c1); cudaFree(c2); cudaFree(src);
}

static void gpu_rejects_bad_input_and_leaves_c_unchanged(void) {
  float h[6] = {1, 2, 3, 4, 5, 6}, r[6];
  float *d = (float *)dmalloc(sizeof h);
  amp_gemm_opts o;
  amp_status st;
  up(d, h, sizeof h);
  memset(&o, 0, sizeof o);
  o.algo = AMP_GEMM_WMMA;
  st = amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 3, 1, 1, d, AMP_F32, 1, d, AMP_F32, 3, 0, d, AMP_F32, 3, &o);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "AMP_GEMM_WMMA"), "WMMA with f32: got %s (%s)", amp_status_string(st), amp_last_error());
  st = amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 3, 1, 1, d, AMP_F32, 1, d, AMP_F32, 3, 0, d, AMP_F32, 2);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "ldc 2"), "ldc 2 < n 3: got %s (%s)", amp_status_string(st), amp_last_error());
  st = amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 3, 1, 1, d, AMP_F16, 1, d, AMP_BF16, 3, 0, d, AMP_F32, 3, &o);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "one 16-bit type"), "WMMA with f16 x bf16: got %s (%s)", amp_status_string(st),
         amp_last_error());
  amp_device_sync(dev);
  down(r, d, sizeof r);
  EXPECT(!memcmp(r, h, sizeof h), "a refused call changed C: %g %g %g", r[0], r[1], r[2]);
  cudaFree(d);
}

/* ---- the fp8 product -----------------------------------------------------------------------------

   Against the CPU reference (AMP_GEMM_REFERENCE: the in-order f32 sum, which equals a plain loop
   over the codes bit for bit, tests/test_gemm_fp8.c), with a_scale_inv, b_scale_inv, c_scale and
   c_amax as device pointers on the GPU. Two claims:
   - The plain fp8 kernel (AMP_GEMM_SIMPLE, and AUTO for a pair cuBLASLt does not take, such as
     fp8 x f16 or fp8 x f32) gives the reference's bits, C and c_amax, with ReLU or no activation:
     it adds the same products in the same k order, each rounded to f32 before its add as the
     reference rounds it (an fp8 x f32 or f32 x f32 product is inexact: an fma would differ), and
     the rest is the CPU's own element functions (amp__gemm_fp8_factor, amp__gemm_fp8_epi; GELU's
     tanh is amp__tanh, in double on both sides).
   - cuBLASLt (AUTO, fp8 x fp8 on sm_89 and newer) sums in its own order (Tensor Core fragments,
     split-k partials in f32, FMA) and applies alpha and the scales in its own order. Per result t
     (before c_scale), s = alpha a_scale_inv b_scale_inv:
         E = |s| ((2k + 4) 2^-24 + 2^-11) sum_p |a(i,p) b(p,j)| + 8 2^-24 (|s acc| + |beta c| + |bias|)
     (2^-11: the Tensor Cores' narrower accumulator between promotions, amp.h's manual), times 1.13 plus 8 2^-24 (|t| + 1e-3) through GELU (its slope is at most 1.13; tanh's rounding).
     Each side then rounds once to C's type (fl32(t c_scale) first for an fp8 C: in the 8 2^-24
     term), so the stored values differ by at most cs E + 3 u (|cpu| + cs E) + 2 h, cs = c_scale
     (1 for another C), u the type's unit roundoff (2^-24 f32, 2^-11 f16, 2^-8 bf16, 2^-4 E4M3,
     2^-3 E5M2), h half its smallest subnormal. A saturated result stores the largest finite value
     on both sides (cuBLASLt's fp8 D must saturate too: the cases with a large c_scale check it).
     c_amax: max |t| on both sides, so they differ by at most the largest E. */
static double u_of(amp_dtype t) {
  return t == AMP_F32 ? 0x1p-24 : t == AMP_F16 ? 0x1p-11 : t == AMP_BF16 ? 0x1p-8 : t == AMP_E4M3 ? 0x1p-4 : 0x1p-3;
}
static double h_of(amp_dtype t) {
  return t == AMP_F32 ? 0x1p-150 : t == AMP_F16 ? 0x1p-25 : t == AMP_BF16 ? 0x1p-134 : t == AMP_E4M3 ? 0x1p-10 : 0x1p-17;
}
static int is8(amp_dtype t) { return t == AMP_E4M3 || t == AMP_E5M2; }
static const char *t8name(amp_dtype t) { return is8(t) ? (t == AMP_E4M3 ? "e4m3" : "e5m2") : tname(t); }

typedef struct {
  amp_layout L; amp_trans ta, tb; int m, n, k; float alpha, beta;
  amp_dtype at, bt, ct;
  int pad_a, pad_b, off;          /* leading-dimension padding of A (and C) and of B; pointer offset in elements */
  amp_gemm_algo algo; int bias; amp_act act; int amax;
  float sa, sb, cs;               /* 0: not given (1) */
} fp8prob;

/* The largest |gpu - cpu| / (|s| sum_p |a b|) seen on results cuBLASLt may have computed (f32 C,
   no activation), for the record beside the Tensor Core term's 2^-11. */
static double tc_worst;

static int check_fp8(const fp8prob *P) {
  mat A = mat_make(P->L, P->ta, P->m, P->k, P->at, P->pad_a, P->off);
  mat B = mat_make(P->L, P->tb, P->k, P->n, P->bt, P->pad_b, P->off);
  mat C = mat_make(P->L, AMP_NO_TRANS, P->m, P->n, P->ct, P->pad_a, P->off);
  size_t es = amp_dtype_size(P->ct);
  void *cpu = malloc(C.n * es), *gpu = malloc(C.n * es);
  amp_bf16 *bias = (amp_bf16 *)malloc(sizeof(amp_bf16) * (size_t)(P->n > 0 ? P->n : 1));
  float hs[4], *ds = (float *)dmalloc(sizeof hs), gamax = 0.0f, camax = -1.0f;
  void *dbias = dmalloc(sizeof(amp_bf16) * (size_t)(P->n > 0 ? P->n : 1));
  /* bits only where the plain kernel runs for sure (GELU included: amp__tanh on both sides) */
  int exact = P->algo == AMP_GEMM_SIMPLE || !(is8(P->at) && is8(P->bt));
  /* cuBLASLt may have run: the manual's Tensor Core term joins the bound */
  int tensor_cores = P->algo != AMP_GEMM_SIMPLE && is8(P->at) && is8(P->bt);
  int i, j, bad = 0;
  double emax = 0.0, cs = P->cs != 0.0f ? P->cs : 1.0;
  amp_gemm_opts ho, go;
  amp_status st;
  for (j = 0; j < P->n; j++) bias[j] = amp_f32_to_bf16(rnd());
  up(dbias, bias, sizeof(amp_bf16) * (size_t)(P->n > 0 ? P->n : 1));
  hs[0] = P->sa; hs[1] = P->sb; hs[2] = P->cs; hs[3] = -1.0f;   /* -1: the amax must be written */
  up(ds, hs, sizeof hs);
  memset(&ho, 0, sizeof ho);
  ho.act = P->act; ho.bias_type = AMP_BF16; ho.bias = P->bias ? bias : NULL;
  ho.a_scale_inv = P->sa != 0.0f ? &hs[0] : NULL; ho.b_scale_inv = P->sb != 0.0f ? &hs[1] : NULL;
  ho.c_scale = P->cs != 0.0f ? &hs[2] : NULL; ho.c_amax = P->amax ? &camax : NULL;
  go = ho;
  go.bias = P->bias ? dbias : NULL; go.algo = P->algo;
  go.a_scale_inv = ho.a_scale_inv ? ds : NULL; go.b_scale_inv = ho.b_scale_inv ? ds + 1 : NULL;
  go.c_scale = ho.c_scale ? ds + 2 : NULL; go.c_amax = P->amax ? ds + 3 : NULL;
  ho.algo = AMP_GEMM_REFERENCE;
  memcpy(cpu, C.h, C.n * es);
  EXPECT(amp_gemm_ex(amp_cpu(), P->L, P->ta, P->tb, P->m, P->n, P->k, P->alpha, A.h, P->at, A.ld, B.h, P->bt, B.ld,
                     P->beta, cpu, P->ct, C.ld, &ho) == AMP_OK, "cpu: %s", amp_last_error());
  st = amp_gemm_ex(dev, P->L, P->ta, P->tb, P->m, P->n, P->k, P->alpha, A.d, P->at, A.ld, B.d, P->bt, B.ld, P->beta,
                   C.d, P->ct, C.ld, &go);
  EXPECT(st == AMP_OK, "gpu: %s", amp_last_error());
  EXPECT(amp_device_sync(dev) == AMP_OK, "sync: %s", amp_last_error());
  down(gpu, C.d, C.n * es);
  down(&gamax, ds + 3, sizeof gamax);
  for (i = 0; i < P->m && !bad; i++)
    for (j = 0; j < P->n && !bad; j++) {
      size_t at = (size_t)i * C.rs + (size_t)j * C.cs;
      double s = (double)P->alpha * (P->sa != 0.0f ? P->sa : 1.0f) * (P->sb != 0.0f ? P->sb : 1.0f);
      double sum = 0, sabs = 0, c0 = P->beta != 0.0f ? amp__load(C.h, P->ct, at) : 0.0, b = 0, e, tol;
      double want = amp__load(cpu, P->ct, at), got = amp__load(gpu, P->ct, at);
      int p;
      for (p = 0; p < P->k; p++) { double v = (double)mat_get(&A, i, p) * mat_get(&B, p, j); sum += v; sabs += fabs(v); }
      if (P->bias) b = amp_bf16_to_f32(bias[j]);
      e = fabs(s) * (2.0 * P->k + 4) * 0x1p-24 * sabs + 8 * 0x1p-24 * (fabs(s * sum) + fabs(P->beta * c0) + fabs(b));
      if (tensor_cores) e += fabs(s) * 0x1p-11 * sabs;   /* the Tensor Cores' narrower accumulator */
      if (P->act == AMP_ACT_GELU) e = 1.13 * e + 8 * 0x1p-24 * (fabs(s * sum + P->beta * c0 + b) + 1e-3);
      emax = e > emax ? e : emax;
      tol = cs * e + 3 * u_of(P->ct) * (fabs(want) + cs * e) + 2 * h_of(P->ct);
      if (tensor_cores && P->ct == AMP_F32 && P->act == AMP_ACT_NONE && s * sabs > 0.0 &&
          fabs(got - want) / (fabs(s) * sabs) > tc_worst)
        tc_worst = fabs(got - want) / (fabs(s) * sabs);
      if (exact ? memcmp((char *)gpu + at * es, (char *)cpu + at * es, es) != 0 : !(fabs(got - want) <= tol)) {
        bad = 1;
        EXPECT(0, "fp8 algo %d %s %s %s %s x %s -> %s m %d n %d k %d alpha %g beta %g pads %d %d off %d act %d bias %d "
               "scales %g %g %g: C(%d,%d) cpu %.9g, gpu %.9g, %s %.3g", (int)P->algo, P->L ? "col" : "row",
               P->ta ? "T" : "N", P->tb ? "T" : "N", t8name(P->at), t8name(P->bt), t8name(P->ct), P->m, P->n, P->k,
               P->alpha, P->beta, P->pad_a, P->pad_b, P->off, (int)P->act, P->bias, P->sa, P->sb, P->cs, i, j, want,
               got, exact ? "bit for bit; bound would be" : "bound", tol);
      }
    }
  if (P->amax && !bad) {
    int ok = exact ? !memcmp(&gamax, &camax, 4) : fabs((double)gamax - camax) <= emax;
    bad = !ok;
    EXPECT(ok, "fp8 m %d n %d k %d %s x %s -> %s act %d: c_amax cpu %.9g, gpu %.9g (%s %.3g)", P->m, P->n, P->k,
           t8name(P->at), t8name(P->bt), t8name(P->ct), (int)P->act, (double)camax, (double)gamax,
           exact ? "bit for bit" : "bound", emax);
  }
  for (i = 0; i < (int)C.n && !bad; i++) {   /* padding: the bits the GPU must not touch */
    size_t inner = (size_t)i % (size_t)C.ld, outer = (size_t)i / (size_t)C.ld;
    int pad_elem = P->L == AMP_ROW_MAJOR ? (inner >= (size_t)P->n || outer >= (size_t)P->m)
                                         : (inner >= (size_t)P->m || outer >= (size_t)P->n);
    if (pad_elem && memcmp((char *)gpu + (size_t)i * es, (char *)C.h + (size_t)i * es, es)) {
      bad = 1; EXPECT(0, "fp8 m %d n %d ldc %d: padding element %d of C was written", P->m, P->n, C.ld, i);
    }
  }
  mat_free(&A); mat_free(&B); mat_free(&C); free(cpu); free(gpu); free(bias); cudaFree(ds); cudaFree(dbias);
  return !bad;
}

static const amp_dtype fp8_outs[5] = {AMP_F32, AMP_F16, AMP_BF16, AMP_E4M3, AMP_E5M2};

/* The plain fp8 kernel: every pair it takes (the three fp8 pairs, fp8 beside f16, bf16 or f32, and
   f32 x f32, in the fp8 product through its c_amax), every output type, layout and transpose, odd
   shapes, scales, bias and ReLU, beta or c_scale: the CPU reference's bits. */
static void fp8_plain_kernel_gives_the_cpus_bits(void) {
  static const amp_dtype pairs[7][2] = {{AMP_E4M3, AMP_E4M3}, {AMP_E4M3, AMP_E5M2}, {AMP_E5M2, AMP_E4M3},
                                        {AMP_E4M3, AMP_F16},  {AMP_BF16, AMP_E5M2}, {AMP_F32, AMP_E4M3},
                                        {AMP_F32, AMP_F32}};
  static const int sh[3][3] = {{1, 1, 1}, {5, 7, 19}, {33, 17, 40}};
  int ip, io, L, ta, tb, s;
  for (ip = 0; ip < 7; ip++) for (io = 0; io < 5; io++) for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++)
    for (tb = 0; tb < 2; tb++) for (s = 0; s < 3; s++) {
      int c8 = is8(fp8_outs[io]), v = (ip + io + s) % 2;
      fp8prob P = {(amp_layout)L, (amp_trans)ta, (amp_trans)tb, sh[s][0], sh[s][1], sh[s][2], 1.5f, c8 ? 0.0f : 0.5f,
                   pairs[ip][0], pairs[ip][1], fp8_outs[io], s, s + 1, s % 2, AMP_GEMM_SIMPLE, v,
                   v ? AMP_ACT_RELU : AMP_ACT_NONE, 1, 0.5f, v ? 0.375f : 0.0f, c8 ? 16.0f : 0.0f};
      if (!check_fp8(&P)) return;
    }
}

/* cuBLASLt's fp8 path (AUTO, the three fp8 pairs): the layer forward's TN form aligned (cuBLASLt
   reads A and B in place), every other layout and transpose, odd and unaligned shapes (packed
   copies), each output type; plain, bias + GELU (our epilogue after cuBLASLt's f32 result) and an
   amax of a 16-bit C (the same); a c_scale large enough to saturate part of an fp8 C. */
static void fp8_cublaslt_matches_cpu_within_the_bound(void) {
  static const amp_dtype pairs[3][2] = {{AMP_E4M3, AMP_E4M3}, {AMP_E4M3, AMP_E5M2}, {AMP_E5M2, AMP_E4M3}};
  static const int sh[4][5] = {   /* m, n, k, pad_a, pad_b: the first two in TN form need no packing */
    {64, 48, 64, 0, 0}, {128, 96, 256, 16, 0}, {33, 17, 40, 0, 1}, {1, 16, 16, 0, 0}};
  int ip, io, L, ta, tb, s, ep;
  tc_worst = 0.0;
  for (ip = 0; ip < 3; ip++) for (io = 0; io < 5; io++) for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++)
    for (tb = 0; tb < 2; tb++) for (s = 0; s < 4; s++) for (ep = 0; ep < 3; ep++) {
      int c8 = is8(fp8_outs[io]);
      if (s == 1 && titer() < 100) continue;   /* AMP_TEST_QUICK (compute-sanitizer): not the largest */
      fp8prob P = {(amp_layout)L, (amp_trans)ta, (amp_trans)tb, sh[s][0], sh[s][1], sh[s][2], ep == 1 ? -1.0f : 1.0f,
                   c8 || ep ? 0.0f : 0.5f, pairs[ip][0], pairs[ip][1], fp8_outs[io], sh[s][3], sh[s][4],
                   s == 2 && ep == 2, AMP_GEMM_AUTO, ep == 1, ep == 1 ? AMP_ACT_GELU : AMP_ACT_NONE, ep == 2 || c8,
                   0.5f, 0.25f, !c8 ? 0.0f : ep == 0 ? 4096.0f : 8.0f};
      if (!check_fp8(&P)) return;
    }
  printf("  fp8 per-tensor: largest |gpu - cpu| / (|s| sum|ab|) %.3g (the Tensor Core term: 2^-11 = %.3g)\n",
         tc_worst, 0x1p-11);
}

/* Block scales on the device beside a per-tensor scale_inv (the plain fp8 kernel: cuBLASLt's
   block-scaled modes take no scale_inv beside the blocks): each kind on A and on B, alone and together, every layout and transpose the
   blocks allow, k 300 (a partial last block), scales that are not powers of two; AUTO and SIMPLE
   give the CPU reference's bits, C and c_amax (tests/test_device_line.c runs the same element
   functions without a GPU). */
static void fp8_block_scales_on_the_device_give_the_cpus_bits(void) {
  static const amp_block_scaling kinds[3] = {AMP_BLOCK_MX_RCEIL, AMP_BLOCK_1x128, AMP_BLOCK_128x128};
  enum { M = 37, N = 45, K = 300, LD = 301, S = LD * LD, NS = S / 32 + 64 };
  static amp_fp8 a[S], b[S];
  static float c1[M * N], c2[M * N], sc[2][NS];
  static uint8_t mx[2][NS];
  void *da = dmalloc(S), *db = dmalloc(S), *dc = dmalloc(sizeof c1), *dsc[2], *dmx[2];
  float *dam = (float *)dmalloc(4), am1, am2;
  int ka, kb, tr, lay, algo, i, w;
  for (i = 0; i < S; i++) { a[i] = amp_f32_to_e4m3(4 * rnd(), 1); b[i] = amp_f32_to_e5m2(4 * rnd(), 1); }
  for (w = 0; w < 2; w++) {
    for (i = 0; i < NS; i++) { sc[w][i] = 0.3f + 0.17f * (float)((i * 3 + w) % 9); mx[w][i] = (uint8_t)(120 + (i * 7 + w) % 15); }
    dsc[w] = dmalloc(sizeof sc[w]); dmx[w] = dmalloc(sizeof mx[w]);
    up(dsc[w], sc[w], sizeof sc[w]); up(dmx[w], mx[w], sizeof mx[w]);
  }
  up(da, a, S); up(db, b, S);
  for (ka = -1; ka < 3; ka++) for (kb = -1; kb < 3; kb++) for (tr = 0; tr < 4; tr++) for (lay = 0; lay < 2; lay++)
    for (algo = 0; algo < 2; algo++) {
      amp_trans ta = tr & 1 ? AMP_TRANS : AMP_NO_TRANS, tb = tr & 2 ? AMP_TRANS : AMP_NO_TRANS;
      amp_layout L = lay ? AMP_COL_MAJOR : AMP_ROW_MAJOR;
      int a_kcol = (L == AMP_ROW_MAJOR) == (ta == AMP_NO_TRANS), b_kcol = (L == AMP_ROW_MAJOR) == (tb == AMP_TRANS);
      int ldc = L == AMP_ROW_MAJOR ? N : M;
      amp_gemm_opts ho, go;
      if (ka < 0 && kb < 0) continue;
      if ((ka >= 0 && kinds[ka] != AMP_BLOCK_128x128 && !a_kcol) || (kb >= 0 && kinds[kb] != AMP_BLOCK_128x128 && !b_kcol))
        continue;   /* refused on every device (tests/test_gemm_fp8.c) */
      if (ka >= 0 && kb >= 0 && (ka == 0) != (kb == 0)) continue;   /* MX beside 1x128: refused */
      memset(&ho, 0, sizeof ho);
      ho.a_scale_inv = &sc[0][0]; ho.c_amax = &am2; ho.algo = AMP_GEMM_REFERENCE;   /* a per-tensor scale too: 0.3 */
      if (ka >= 0) { ho.a_blocks = kinds[ka]; ho.a_scales = ka == 0 ? (const void *)mx[0] : (const void *)sc[0]; }
      if (kb >= 0) { ho.b_blocks = kinds[kb]; ho.b_scales = kb == 0 ? (const void *)mx[1] : (const void *)sc[1]; }
      go = ho;
      go.a_scale_inv = (const float *)dsc[0]; go.c_amax = dam; go.algo = algo ? AMP_GEMM_SIMPLE : AMP_GEMM_AUTO;
      if (ka >= 0) go.a_scales = ka == 0 ? dmx[0] : dsc[0];
      if (kb >= 0) go.b_scales = kb == 0 ? dmx[1] : dsc[1];
      EXPECT(amp_gemm_ex(amp_cpu(), L, ta, tb, M, N, K, 1.25f, a, AMP_E4M3, LD, b, AMP_E5M2, LD, 0.0f, c2, AMP_F32, ldc,
                         &ho) == AMP_OK, "cpu: %s", amp_last_error());
      EXPECT(amp_gemm_ex(dev, L, ta, tb, M, N, K, 1.25f, da, AMP_E4M3, LD, db, AMP_E5M2, LD, 0.0f, dc, AMP_F32, ldc,
                         &go) == AMP_OK, "gpu: %s", amp_last_error());
      amp_device_sync(dev); down(c1, dc, sizeof c1); down(&am1, dam, 4);
      if (memcmp(c1, c2, sizeof c1) || memcmp(&am1, &am2, 4)) {
        EXPECT(0, "kinds %d %d trans %d layout %d algo %d: the device's block-scaled product differs from the CPU's "
               "(C[0] %.9g vs %.9g, amax %.9g vs %.9g)", ka, kb, tr, lay, algo, c1[0], c2[0], am1, am2);
        goto done;
      }
    }
done:
  cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(dam);
  for (w = 0; w < 2; w++) { cudaFree(dsc[w]); cudaFree(dmx[w]); }
}

/* The scale of op(X)(r, c) (X as mat_make made it) under amp_quantize_blocks' layout: its stored
   rows are the lines of stride 1 (row-major rows, col-major columns), w wide. */
static double blk_scale(const mat *x, const float *sc, amp_block_scaling kind, int rows, int cols, int r, int c) {
  int sr = x->cs == 1 ? r : c, scol = x->cs == 1 ? c : r, w = x->cs == 1 ? cols : rows, nb = (w + 127) / 128;
  return sc[(size_t)(kind == AMP_BLOCK_128x128 ? sr / 128 : sr) * (size_t)nb + (size_t)(scol / 128)];
}

/* Block scales of 1 x 128 and 128 x 128 on both operands, no per-tensor scale_inv: cuBLASLt's
   block-scaled modes on Hopper (cuBLAS 12.9 or newer), the plain kernel elsewhere (then the CPU's
   bits, within the bound too). The forward's 1x128 x 128x128, the backward's 1x128 x 128x128 with
   the weights' k down their stored columns, 128x128 x 1x128 and 1x128 x 1x128; every layout and
   transpose the blocks allow; k 512, 300 (a partial block, and k padded for cuBLASLt) and 128;
   f32 and bf16 C, c_amax (with a 16-bit C: cuBLASLt's f32 scratch and the finishing kernel).
   Bound per result (amp.h's manual): E = |alpha| ((2k + 2 nb + 4) 2^-24 + 2^-11) sum_p
   |sa sb a(i,p) b(p,j)| + 8 2^-24 |t| (2^-11: the Tensor Cores' narrower accumulator between
   promotions), then |gpu - cpu| <= E + 3 u (|cpu| + E) + 2 h as in check_fp8; it prints the
   largest error seen in units of |alpha| sum_p |sa sb a b|, for the record. */
static void fp8_block_scaled_cublaslt_within_the_bound(void) {
  static const amp_block_scaling kinds[3][2] = {{AMP_BLOCK_1x128, AMP_BLOCK_128x128},
                                                {AMP_BLOCK_128x128, AMP_BLOCK_1x128},
                                                {AMP_BLOCK_1x128, AMP_BLOCK_1x128}};
  static const amp_dtype pairs[2][2] = {{AMP_E4M3, AMP_E4M3}, {AMP_E5M2, AMP_E4M3}};
  static const int sh[3][3] = {{128, 256, 512}, {96, 136, 300}, {200, 64, 128}};
  int kd, ip, s, L, ta, tb, io, x;
  double worst = 0.0;
  for (kd = 0; kd < 3; kd++) for (ip = 0; ip < 2; ip++) for (s = 0; s < 3; s++) for (L = 0; L < 2; L++)
    for (ta = 0; ta < 2; ta++) for (tb = 0; tb < 2; tb++) for (io = 0; io < 2; io++) {
      const int m = sh[s][0], n = sh[s][1], k = sh[s][2], nkb = (k + 127) / 128;
      const amp_layout lay = (amp_layout)L;
      const amp_dtype ct = io ? AMP_BF16 : AMP_F32;
      const float alpha = io ? 1.0f : 1.5f;
      int a_kcol = (lay == AMP_ROW_MAJOR) == (ta == AMP_NO_TRANS), b_kcol = (lay == AMP_ROW_MAJOR) == (tb == AMP_TRANS);
      mat A, B, C;
      float *hs[2], gamax = 0.0f, camax = -1.0f, *dam;
      void *ds[2], *cpu, *gpu;
      size_t ns[2], es = amp_dtype_size(ct), i;
      amp_gemm_opts ho, go;
      double emax = 0.0;
      int r, c, p, bad = 0;
      if ((kinds[kd][0] == AMP_BLOCK_1x128 && !a_kcol) || (kinds[kd][1] == AMP_BLOCK_1x128 && !b_kcol)) continue;
      if (titer() < 100 && s == 0) continue;   /* AMP_TEST_QUICK (compute-sanitizer): the smaller shapes */
      A = mat_make(lay, (amp_trans)ta, m, k, pairs[ip][0], 0, 0);
      B = mat_make(lay, (amp_trans)tb, k, n, pairs[ip][1], 0, 0);
      C = mat_make(lay, AMP_NO_TRANS, m, n, ct, 0, 0);
      for (x = 0; x < 2; x++) {   /* every stored shape's scale count is at most ceil(dim / 1) x ceil(dim / 128) */
        int big = x ? (n > k ? n : k) : (m > k ? m : k);
        ns[x] = (size_t)big * (size_t)((big + 127) / 128);
        hs[x] = (float *)malloc(ns[x] * sizeof(float));
        for (i = 0; i < ns[x]; i++) hs[x][i] = 0.3f + 0.17f * (float)((i * 5 + (size_t)x) % 9) + (rnd() + 1.0f) / 64;
        ds[x] = dmalloc(ns[x] * sizeof(float));
        up(ds[x], hs[x], ns[x] * sizeof(float));
      }
      dam = (float *)dmalloc(4);
      cpu = malloc(C.n * es); gpu = malloc(C.n * es);
      memcpy(cpu, C.h, C.n * es);
      memset(&ho, 0, sizeof ho);
      ho.a_blocks = kinds[kd][0]; ho.b_blocks = kinds[kd][1]; ho.a_scales = hs[0]; ho.b_scales = hs[1];
      ho.algo = AMP_GEMM_REFERENCE; ho.c_amax = io ? &camax : NULL;
      go = ho; go.a_scales = ds[0]; go.b_scales = ds[1]; go.algo = AMP_GEMM_AUTO; go.c_amax = io ? dam : NULL;
      EXPECT(amp_gemm_ex(amp_cpu(), lay, (amp_trans)ta, (amp_trans)tb, m, n, k, alpha, A.h, A.t, A.ld, B.h, B.t, B.ld,
                         0.0f, cpu, ct, C.ld, &ho) == AMP_OK, "cpu: %s", amp_last_error());
      EXPECT(amp_gemm_ex(dev, lay, (amp_trans)ta, (amp_trans)tb, m, n, k, alpha, A.d, A.t, A.ld, B.d, B.t, B.ld, 0.0f,
                         C.d, ct, C.ld, &go) == AMP_OK, "gpu: %s", amp_last_error());
      EXPECT(amp_device_sync(dev) == AMP_OK, "sync: %s", amp_last_error());
      down(gpu, C.d, C.n * es); down(&gamax, dam, 4);
      for (r = 0; r < m && !bad; r++) for (c = 0; c < n && !bad; c++) {
        size_t at = (size_t)r * C.rs + (size_t)c * C.cs;
        double sabs = 0.0, t = 0.0, e, tol, want = amp__load(cpu, ct, at), got = amp__load(gpu, ct, at);
        for (p = 0; p < k; p++) {
          double v = (double)mat_get(&A, r, p) * mat_get(&B, p, c) * blk_scale(&A, hs[0], kinds[kd][0], m, k, r, p) *
                     blk_scale(&B, hs[1], kinds[kd][1], k, n, p, c);
          sabs += fabs(v); t += v;
        }
        e = fabs(alpha) * ((2.0 * k + 2.0 * nkb + 4 + 0x1p13) * 0x1p-24 * sabs + 8 * 0x1p-24 * fabs(t));   /* 2^13 2^-24: the Tensor Cores' 2^-11 */
        emax = e > emax ? e : emax;
        tol = e + 3 * u_of(ct) * (fabs(want) + e) + 2 * h_of(ct);
        if (ct == AMP_F32 && sabs > 0.0 && fabs(got - want) / (fabs(alpha) * sabs) > worst)
          worst = fabs(got - want) / (fabs(alpha) * sabs);
        if (!(fabs(got - want) <= tol)) {
          bad = 1;
          EXPECT(0, "block-scaled %s x %s (%s x %s) -> %s, %s ta %d tb %d, m %d n %d k %d: C(%d,%d) cpu %.9g, gpu %.9g, "
                 "bound %.3g", kinds[kd][0] == AMP_BLOCK_1x128 ? "1x128" : "128x128",
                 kinds[kd][1] == AMP_BLOCK_1x128 ? "1x128" : "128x128", t8name(A.t), t8name(B.t), t8name(ct),
                 L ? "col" : "row", ta, tb, m, n, k, r, c, want, got, tol);
        }
      }
      if (io && !bad && !(fabs((double)gamax - camax) <= emax)) {
        bad = 1;
        EXPECT(0, "block-scaled m %d n %d k %d: c_amax cpu %.9g, gpu %.9g, bound %.3g", m, n, k, camax, gamax, emax);
      }
      mat_free(&A); mat_free(&B); mat_free(&C); free(cpu); free(gpu); cudaFree(dam);
      for (x = 0; x < 2; x++) { free(hs[x]); cudaFree(ds[x]); }
      if (bad) return;
    }
  printf("  fp8 block-scaled: largest |gpu - cpu| / (|alpha| sum|sa sb ab|) %.3g (the Tensor Core term: 2^-11 = %.3g)\n",
         worst, 0x1p-11);
}

/* opts->fp8_fast_accum 1: cuBLASLt's FAST_ACCUM on the per-tensor path (the plain kernel on GPUs
   before sm_89). amp.h promises no bound for it (the manual: the Tensor Cores' narrower
   accumulator), so this checks what a wrong result would break: every element within |s| 2^-6
   sum|ab| of the reference (a lost scale, a wrong layout or a garbage sum lands far outside), with
   the scales and the TN form aligned and packed; it prints the largest error seen in units of the
   split-accumulation bound, for the record. The same call with 0 stays within that bound. */
static void fp8_fast_accum_is_opt_in_and_sane(void) {
  static const int sh[2][3] = {{128, 128, 4096}, {40, 24, 1000}};
  double worst = 0.0;
  int s, fast, tb;
  for (s = 0; s < 2; s++) for (tb = 0; tb < 2; tb++) for (fast = 0; fast < 2; fast++) {
    const int m = sh[s][0], n = sh[s][1], k = sh[s][2];
    mat A, B, C;
    if (s == 0 && titer() < 100) continue;   /* AMP_TEST_QUICK (compute-sanitizer): the smaller shape */
    A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, k, AMP_E4M3, 0, 0);
    B = mat_make(AMP_ROW_MAJOR, tb ? AMP_TRANS : AMP_NO_TRANS, k, n, AMP_E4M3, 0, 0);
    C = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, n, AMP_F32, 0, 0);
    float hs[2] = {0.75f, 0.3125f}, *ds = (float *)dmalloc(sizeof hs), *cpu = (float *)malloc(C.n * 4),
          *gpu = (float *)malloc(C.n * 4);
    const double sc = 1.25 * hs[0] * hs[1];
    amp_gemm_opts ho, go;
    int r, c, p, bad = 0;
    up(ds, hs, sizeof hs);
    memcpy(cpu, C.h, C.n * 4);
    memset(&ho, 0, sizeof ho);
    ho.a_scale_inv = &hs[0]; ho.b_scale_inv = &hs[1]; ho.algo = AMP_GEMM_REFERENCE;
    go = ho; go.a_scale_inv = ds; go.b_scale_inv = ds + 1; go.algo = AMP_GEMM_AUTO; go.fp8_fast_accum = fast;
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, tb ? AMP_TRANS : AMP_NO_TRANS, m, n, k, 1.25f, A.h, A.t,
                       A.ld, B.h, B.t, B.ld, 0.0f, cpu, AMP_F32, C.ld, &ho) == AMP_OK, "cpu: %s", amp_last_error());
    EXPECT(amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, tb ? AMP_TRANS : AMP_NO_TRANS, m, n, k, 1.25f, A.d, A.t, A.ld,
                       B.d, B.t, B.ld, 0.0f, C.d, AMP_F32, C.ld, &go) == AMP_OK, "gpu: %s", amp_last_error());
    EXPECT(amp_device_sync(dev) == AMP_OK, "sync: %s", amp_last_error());
    down(gpu, C.d, C.n * 4);
    for (r = 0; r < m && !bad; r++) for (c = 0; c < n && !bad; c++) {
      size_t at = (size_t)r * C.rs + (size_t)c * C.cs;
      double sabs = 0.0, t = 0.0, split, tol, d = fabs((double)gpu[at] - cpu[at]);
      for (p = 0; p < k; p++) { double v = (double)mat_get(&A, r, p) * mat_get(&B, p, c); sabs += fabs(v); t += v; }
      split = sc * ((2.0 * k + 4) * 0x1p-24 + 0x1p-11) * sabs + 8 * 0x1p-24 * sc * fabs(t) + 3 * 0x1p-24 * fabs(cpu[at]) +
              0x1p-149;   /* (2^-11: the Tensor Cores' term, amp.h's manual) */
      tol = fast ? sc * 0x1p-6 * sabs + split : split;
      if (fast && split > 0.0 && d / split > worst) worst = d / split;
      if (!(d <= tol)) {
        bad = 1;
        EXPECT(0, "fp8_fast_accum %d, m %d n %d k %d tb %d: C(%d,%d) cpu %.9g, gpu %.9g, %s %.3g", fast, m, n, k, tb, r, c,
               cpu[at], gpu[at], fast ? "sanity bound" : "bound", tol);
      }
    }
    mat_free(&A); mat_free(&B); mat_free(&C); free(cpu); free(gpu); cudaFree(ds);
    if (bad) return;
  }
  printf("  fp8_fast_accum 1: largest |gpu - cpu| %.3g times the split-accumulation bound\n", worst);
}

/* alpha 0 or k 0 (A and B are not read: NaN codes there change nothing), a scale_inv of 0 on the
   plain kernel (the same), m 0 with c_amax (the device writes 0). */
static void fp8_special_cases_on_the_device(void) {
  amp_fp8 nan8[4] = {0x7f, 0x7f, 0x7f, 0x7f};
  float c[4] = {1, 2, 3, 4}, r[4], h[3] = {0.0f, 1.0f, -1.0f}, amax = -1.0f;
  amp_fp8 *da = (amp_fp8 *)dmalloc(4);
  float *dc = (float *)dmalloc(sizeof c), *ds = (float *)dmalloc(sizeof h);
  amp_gemm_opts o;
  int algo, which;
  up(da, nan8, 4); up(ds, h, sizeof h);
  for (algo = 0; algo < 2; algo++) for (which = 0; which < 3; which++) {
    float alpha = which == 0 ? 0.0f : 1.0f;
    int k = which == 1 ? 0 : 2;
    memset(&o, 0, sizeof o);
    o.algo = algo ? AMP_GEMM_SIMPLE : AMP_GEMM_AUTO;
    o.c_amax = ds + 2;
    if (which == 2) { o.a_scale_inv = ds; if (!algo) continue; }   /* a scale 0: the plain kernel's promise */
    up(dc, c, sizeof c);
    EXPECT(amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, k, alpha, da, AMP_E4M3, 2, da, AMP_E4M3, 2,
                       2.0f, dc, AMP_F32, 2, &o) == AMP_OK, "%s", amp_last_error());
    amp_device_sync(dev); down(r, dc, sizeof r); down(&amax, ds + 2, 4);
    EXPECT(r[0] == 2 && r[1] == 4 && r[2] == 6 && r[3] == 8 && amax == 8.0f,
           "algo %d case %d: C = 2 C expected 2 4 6 8, amax 8; got %g %g %g %g, amax %g", algo, which, r[0], r[1], r[2],
           r[3], amax);
  }
  memset(&o, 0, sizeof o);
  o.c_amax = ds + 2;
  EXPECT(amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 0, 2, 2, 1.0f, da, AMP_E4M3, 2, da, AMP_E4M3, 2,
                     0.0f, dc, AMP_F32, 2, &o) == AMP_OK, "m 0: %s", amp_last_error());
  amp_device_sync(dev); down(&amax, ds + 2, 4);
  EXPECT(amax == 0.0f, "m 0: c_amax %g, expected 0", amax);
  cudaFree(da); cudaFree(dc); cudaFree(ds);
}

/* What the device refuses of the fp8 product: AMP_ERR_UNSUPPORTED for 1 x 128 blocks across k and E5M2 x E5M2,
   AMP_ERR_ARG for WMMA with fp8, an fp8 C without c_scale or with beta, c_scale with an f32 C; each
   message names amp_gemm_ex and the bad value, and C is unchanged. */
static void fp8_refusals_on_the_device(void) {
  static const char *say[6] = {"opts->a_blocks is 1 x 128", "AMP_E5M2", "AMP_GEMM_WMMA", "c_scale is NULL", "beta", "c_scale"};
  amp_fp8 h8[16];
  float one = 1.0f, *ds = (float *)dmalloc(4);
  amp_fp8 *da = (amp_fp8 *)dmalloc(16), *dc = (amp_fp8 *)dmalloc(16), r[16];
  int c;
  memset(h8, 0x38, sizeof h8);
  up(da, h8, 16); up(dc, h8, 16); up(ds, &one, 4);
  for (c = 0; c < 6; c++) {
    amp_gemm_opts o;
    amp_dtype at = c == 1 ? AMP_E5M2 : AMP_E4M3, ct = c == 5 ? AMP_F32 : AMP_E4M3;
    amp_status st, want = c < 2 ? AMP_ERR_UNSUPPORTED : AMP_ERR_ARG;
    memset(&o, 0, sizeof o);
    o.c_scale = c == 3 ? NULL : ds;
    if (c == 0) { o.a_scales = ds; o.a_blocks = AMP_BLOCK_1x128; }   /* with ta AMP_TRANS: k down A's columns */
    if (c == 2) o.algo = AMP_GEMM_WMMA;
    st = amp_gemm_ex(dev, AMP_ROW_MAJOR, c == 0 ? AMP_TRANS : AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, da, at, 2, da,
                     at, 2, c == 4 ? 1.0f : 0.0f, dc, ct, 2, &o);
    EXPECT(st == want && strstr(amp_last_error(), "amp_gemm_ex") && strstr(amp_last_error(), say[c]),
           "case %d: %s (%s)", c, amp_status_string(st), amp_last_error());
  }
  amp_device_sync(dev); down(r, dc, 16);
  EXPECT(!memcmp(r, h8, 16), "a refused fp8 call changed C");
  cudaFree(ds); cudaFree(da); cudaFree(dc);
}

int main(void) {
  amp_status st = amp_cuda_open(&dev, 0, NULL);
  RUN(cpu_device_still_runs_the_reference_in_a_cuda_build);
  if (st == AMP_ERR_UNSUPPORTED) {
    t_no_gpu("GPU tests of amp_gemm", amp_last_error());
    TEST_END();
  }
  if (st != AMP_OK) { printf("FAIL amp_cuda_open: %s\n", amp_last_error()); return 1; }
  RUN(cublaslt_matches_cpu_for_every_layout_transpose_and_type);
  RUN(cublaslt_handles_unaligned_pointers_and_odd_leading_dimensions);
  RUN(gpu_epilogues_match_cpu);
  RUN(wmma_kernel_matches_cpu_on_any_shape);
  RUN(simple_kernel_matches_cpu);
  RUN(tf32_is_opt_in_and_within_its_bound);
  RUN(gpu_follows_blas_special_cases);
  RUN(plan_cache_survives_eviction_and_repeats_bit_for_bit);
  RUN(two_threads_share_the_plan_cache_and_get_their_own_bias);
  RUN(mixed_types_equal_the_product_of_widened_copies);
  RUN(gpu_rejects_bad_input_and_leaves_c_unchanged);
  RUN(fp8_plain_kernel_gives_the_cpus_bits);
  RUN(fp8_cublaslt_matches_cpu_within_the_bound);
  RUN(fp8_block_scales_on_the_device_give_the_cpus_bits);
  RUN(fp8_block_scaled_cublaslt_within_the_bound);
  RUN(fp8_fast_accum_is_opt_in_and_sane);
  RUN(fp8_special_cases_on_the_device);
  RUN(fp8_refusals_on_the_device);
  amp_device_close(dev);
  cudaDeviceSynchronize();
  TEST_END();
}
