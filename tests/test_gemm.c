/* The CPU matrix product: cblas conventions, the documented rounding, the epilogue, bad input. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>   /* _mm_getcsr / _mm_setcsr: the FPU's denormals-are-zero mode */
#endif

/* ---- helpers ------------------------------------------------------------------------------ */

static uint32_t rng_state = 12345u;
static int full_bits;   /* 1: rnd() gives 24-bit mantissas, so that a * b is inexact in f32 */
static float rnd(void) { /* uniform in [-1, 1) with 12 random bits: exact in every type */
  rng_state = rng_state * 1664525u + 1013904223u;
  if (full_bits) return (float)((int)(rng_state >> 8) - 8388608) / 8388608.0f;
  return (float)((int)(rng_state >> 20) - 2048) / 2048.0f;
}

/* fma(a, b, c) rounded once: libm's fmaf through a pointer the compiler cannot see through, since
   clang under -ffast-math (-Ofast) on a target without FMA instructions splits a fmaf() call it
   can see into a multiply and an add (two roundings): the reference must not depend on the flags */
static float (*volatile fma_ref)(float, float, float) = fmaf;

static const char *tname(amp_dtype t) { return t == AMP_F32 ? "f32" : t == AMP_F16 ? "f16" : "bf16"; }
static double unit_roundoff(amp_dtype t) { return t == AMP_F32 ? 0x1p-24 : t == AMP_F16 ? 0x1p-11 : 0x1p-8; }
/* half the smallest subnormal: the absolute error of rounding a tiny value */
static double tiny(amp_dtype t) { return t == AMP_F32 ? 0x1p-150 : t == AMP_F16 ? 0x1p-25 : 0x1p-134; }

/* A matrix as the caller stores it: `rows x cols` of op(X) seen through layout/trans with leading
   dimension ld; the storage's padding holds NaN so that a read outside the matrix shows. */
typedef struct { void *p; amp_dtype t; int ld; size_t n; size_t rs, cs; } mat;

static mat mat_make(amp_layout L, amp_trans tr, int rows, int cols, amp_dtype t, int pad) {
  mat x;
  int srows = tr == AMP_NO_TRANS ? rows : cols, scols = tr == AMP_NO_TRANS ? cols : rows; /* as stored */
  int inner = L == AMP_ROW_MAJOR ? scols : srows, outer = L == AMP_ROW_MAJOR ? srows : scols;
  size_t i;
  x.t = t;
  x.ld = (inner > 1 ? inner : 1) + pad;
  x.n = (size_t)x.ld * (size_t)(outer > 1 ? outer : 1);
  x.p = malloc(x.n * amp_dtype_size(t));
  for (i = 0; i < x.n; i++) amp__store(x.p, t, i, NAN);
  /* stride of op(X)(r, c) */
  if (L == AMP_ROW_MAJOR) { x.rs = tr == AMP_NO_TRANS ? (size_t)x.ld : 1; x.cs = tr == AMP_NO_TRANS ? 1 : (size_t)x.ld; }
  else { x.rs = tr == AMP_NO_TRANS ? 1 : (size_t)x.ld; x.cs = tr == AMP_NO_TRANS ? (size_t)x.ld : 1; }
  { int r, c; for (r = 0; r < rows; r++) for (c = 0; c < cols; c++) amp__store(x.p, t, r * x.rs + c * x.cs, rnd()); }
  return x;
}
static float mat_get(const mat *x, int r, int c) { return amp__load(x->p, x->t, (size_t)r * x->rs + (size_t)c * x->cs); }

/* The double-precision truth of one element before rounding, and an upper bound on the distance
   between it and what amp_gemm must return:
     summation: k * u32 * sum|a b| * |alpha| (products of f16/bf16 are exact in f32; of f32 add u32 each),
     the blend and the bias: 4 * u32 * (|alpha acc| + |beta c| + |bias|),
     GELU: Lipschitz 1.13 and tanh's rounding, then the one rounding to the output type. */
static double truth(const mat *A, const mat *B, int i, int j, int k, double alpha, double beta, double c,
                    int has_bias, double bias, int act, amp_dtype out, double *bound) {
  double s = 0, sabs = 0, t, e;
  int p;
  for (p = 0; p < k; p++) { double v = (double)mat_get(A, i, p) * (double)mat_get(B, p, j); s += v; sabs += fabs(v); }
  t = alpha * s + (beta != 0 ? beta * c : 0) + (has_bias ? bias : 0);
  e = fabs(alpha) * (k + 2) * 0x1p-24 * sabs * 1.01 + 4 * 0x1p-24 * (fabs(alpha * s) + fabs(beta * c) + fabs(bias));
  if (act == AMP_ACT_RELU) t = t > 0 ? t : 0;
  if (act == AMP_ACT_GELU) { t = 0.5 * t * (1 + tanh(0.7978845608028654 * (t + 0.044715 * t * t * t))); e = 1.13 * e + 8 * 0x1p-24 * (fabs(t) + 1e-3); }
  *bound = e * (1 + unit_roundoff(out)) + unit_roundoff(out) * fabs(t) + tiny(out);
  return t;
}

/* Runs one product and checks every element of C against truth(), and that C's padding is intact. */
static int check_product(amp_layout L, amp_trans ta, amp_trans tb, int m, int n, int k, float alpha, float beta,
                         amp_dtype in, amp_dtype out, int pad, const amp_gemm_opts *o) {
  mat A = mat_make(L, ta, m, k, in, pad), B = mat_make(L, tb, k, n, in, pad + 1), C = mat_make(L, AMP_NO_TRANS, m, n, out, pad);
  void *C0 = malloc(C.n * amp_dtype_size(out));
  int i, j, bad = 0, has_bias = o && o->bias, act = o ? (int)o->act : 0;
  size_t q;
  amp_status st;
  memcpy(C0, C.p, C.n * amp_dtype_size(out));
  st = amp_gemm_ex(amp_cpu(), L, ta, tb, m, n, k, alpha, A.p, in, A.ld, B.p, in, B.ld, beta, C.p, out, C.ld, o);
  EXPECT(st == AMP_OK, "%s %s %s m %d n %d k %d: status %s (%s)", L ? "col" : "row", ta ? "T" : "N", tb ? "T" : "N",
         m, n, k, amp_status_string(st), amp_last_error());
  for (i = 0; i < m && !bad; i++)
    for (j = 0; j < n && !bad; j++) {
      double bound, c = amp__load(C0, out, (size_t)i * C.rs + (size_t)j * C.cs);
      double bias = has_bias ? amp__load(o->bias, o->bias_type, (size_t)j) : 0;
      double want = truth(&A, &B, i, j, k, alpha, beta, c, has_bias, bias, act, out, &bound);
      double got = amp__load(C.p, out, (size_t)i * C.rs + (size_t)j * C.cs);
      if (!(fabs(got - want) <= bound)) {
        bad = 1;
        EXPECT(0, "%s %s %s %s->%s m %d n %d k %d alpha %g beta %g act %d bias %d: C(%d,%d) expected %.9g +- %.3g, got %.9g",
               L ? "col" : "row", ta ? "T" : "N", tb ? "T" : "N", tname(in), tname(out), m, n, k, alpha, beta, act,
               has_bias, i, j, want, bound, got);
      }
    }
  /* the padding between C's rows (or columns) is not written */
  for (q = 0; q < C.n && !bad; q++) {
    size_t inner = q % (size_t)C.ld, outer = q / (size_t)C.ld;
    size_t lim = L == AMP_ROW_MAJOR ? (size_t)n : (size_t)m, olim = L == AMP_ROW_MAJOR ? (size_t)m : (size_t)n;
    if (inner >= lim || outer >= olim) {
      uint32_t a = 0, b = 0;
      memcpy(&a, (char *)C.p + q * amp_dtype_size(out), amp_dtype_size(out));
      memcpy(&b, (char *)C0 + q * amp_dtype_size(out), amp_dtype_size(out));
      if (a != b) { bad = 1; EXPECT(0, "m %d n %d ldc %d: padding element %zu of C was written", m, n, C.ld, q); }
    }
  }
  free(A.p); free(B.p); free(C.p); free(C0);
  return !bad;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void gemm_matches_double_product_for_every_layout_transpose_and_type(void) {
  static const int shapes[][3] = {{1, 1, 1}, {3, 17, 33}, {17, 3, 65}, {33, 65, 17}, {7, 1, 5}, {1, 9, 2}};
  static const float ab[][2] = {{1, 0}, {0.5f, -1.5f}, {-2, 1}};
  static const amp_dtype types[] = {AMP_F32, AMP_F16, AMP_BF16};
  int L, ta, tb, s, it, ot, a, count = 0;
  for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++) for (tb = 0; tb < 2; tb++)
    for (s = 0; s < 6; s++) for (it = 0; it < 3; it++) for (ot = 0; ot < 3; ot++) for (a = 0; a < 3; a++) {
      if (t_quick() && (count++ % 7)) continue;
      if (!check_product((amp_layout)L, (amp_trans)ta, (amp_trans)tb, shapes[s][0], shapes[s][1], shapes[s][2],
                         ab[a][0], ab[a][1], types[it], types[ot], (s + a) % 3, NULL)) return;
    }
}

static void gemm_error_stays_within_bound_for_long_k(void) {
  int k = t_quick() ? 700 : 4099;
  check_product(AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 19, 37, k, 1.0f, 0.0f, AMP_F16, AMP_F32, 0, NULL);
  check_product(AMP_COL_MAJOR, AMP_TRANS, AMP_NO_TRANS, 37, 19, k, 0.25f, 2.0f, AMP_BF16, AMP_BF16, 2, NULL);
  check_product(AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 13, 21, k, 1.0f, 1.0f, AMP_F32, AMP_F16, 1, NULL);
}

/* The documented order of the reference (AMP_GEMM_REFERENCE): acc = 0; acc = acc + (a*b rounded)
   for p = 0..k-1; then the blend and one rounding. The blocked code must give exactly these bits,
   also across its block edges (MC 96, NC 512, KC 256 and the 6 x 16 tiles). The second pass uses
   f32 inputs with full 24-bit mantissas: there a * b is inexact, so an FMA anywhere would show
   (tests/run.sh also builds this file with gcc and clang -Ofast -march=native). The plain loop
   rounds each product through a volatile, so that no flag fuses it either. */
static void gemm_reference_equals_plain_loop_bit_for_bit(void) {
  static const int shapes[][3] = {{100, 530, 300}, {97, 17, 257}, {6, 16, 256}, {1, 513, 513}};
  static const amp_dtype outs[] = {AMP_F32, AMP_F16, AMP_BF16};
  int s, o, pass, ns = t_quick() ? 2 : 4;
  amp_gemm_opts ref;
  memset(&ref, 0, sizeof ref);
  ref.algo = AMP_GEMM_REFERENCE;
  for (pass = 0; pass < 2; pass++)
  for (s = 1; s <= ns; s++) for (o = 0; o < 3; o++) {
    int sh = s % 4, m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2], i, j, p, bad = 0;
    amp_dtype in = pass ? AMP_F32 : o == 1 ? AMP_F16 : o == 2 ? AMP_BF16 : AMP_F32;
    float alpha = o == 0 ? 1.0f : 0.75f, beta = o == 2 ? -0.5f : 0.0f;
    mat A, B, C;
    void *C0;
    full_bits = pass;
    A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, k, in, 0); B = mat_make(AMP_ROW_MAJOR, AMP_TRANS, k, n, in, 1);
    C = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, n, outs[o], 0);
    full_bits = 0;
    C0 = malloc(C.n * amp_dtype_size(outs[o]));
    memcpy(C0, C.p, C.n * amp_dtype_size(outs[o]));
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, m, n, k, alpha, A.p, in, A.ld, B.p, in, B.ld,
                       beta, C.p, outs[o], C.ld, &ref) == AMP_OK, "%s", amp_last_error());
    for (i = 0; i < m && !bad; i++)
      for (j = 0; j < n && !bad; j++) {
        float acc = 0.0f, t, c0 = amp__load(C0, outs[o], (size_t)i * C.ld + j);
        volatile float prod, at, bc;
        uint32_t want, got = 0;
        for (p = 0; p < k; p++) { prod = mat_get(&A, i, p) * mat_get(&B, p, j); acc = acc + prod; }
        at = alpha * acc;
        t = at;
        if (beta != 0.0f) { bc = beta * c0; t = at + bc; }
        want = amp__f32_bits(amp__round_to(t, outs[o]));
        got = amp__f32_bits(amp__load(C.p, outs[o], (size_t)i * C.ld + j));
        if (want != got) {
          bad = 1;
          EXPECT(0, "%s->%s%s m %d n %d k %d: C(%d,%d) plain loop %.9g (0x%08x), blocked %.9g (0x%08x)", tname(in),
                 tname(outs[o]), pass ? " (24-bit mantissas)" : "", m, n, k, i, j, amp__bits_f32(want), (unsigned)want,
                 amp__bits_f32(got), (unsigned)got);
        }
      }
    free(A.p); free(B.p); free(C.p); free(C0);
  }
}

/* The CPU levels the fast default can run at (amp__gemm_isa_allowed masks CPUID's answer), best
   first; 0 is the reference. Only the levels this CPU has are run; each test says which ran. An
   AVX512_BF16 CPU runs its level twice, bf16 products forced onto each kernel whatever the
   calibration chose (amp__gemm_dpbf16_forced): 4|3|8 vdpbf16ps, 4|3|16 bf16 widened while packing
   and the FMA kernel; an AArch64 CPU with FEAT_BF16 three times: 1|8 BFDOT, 1|32 BFMMLA, 1|16
   widened and FMLA. A CPU with AMX (that Linux lets this process use) runs 7|64 first: bf16 on the
   tile unit (the levels without 64 mask it out). set_level(LV_CPU) returns to the CPU's own choice. */
#define LV_DPBF16 8
#define LV_WIDEN 16
#define LV_MMLA 32
#define LV_AMX 64
#define LV_CPU (7 | LV_AMX)
#define LV_DOT (LV_DPBF16 | LV_MMLA | LV_AMX)   /* a bf16 dot-product kernel: subnormals flushed, other bits */
static int levels(int *lv) {
  int n = 0;
#ifdef AMP__GEMM_FAST
  int have = amp__gemm_isa();
#ifdef AMP__GEMM_AMX
  if (amp__gemm_amx()) lv[n++] = 7 | LV_AMX;
#endif
  if (have & AMP__GEMM_ISA_BF16) { lv[n++] = 7 | LV_DPBF16; lv[n++] = 7 | LV_WIDEN; }
  if (have & AMP__GEMM_ISA_512) lv[n++] = 3;
  if (have & AMP__GEMM_ISA_FMA) lv[n++] = 1;
#elif defined(AMP__GEMM_NEON)
  /* AArch64: the NEON FMLA kernel; with FEAT_BF16 bf16 products forced onto BFDOT, BFMMLA and FMLA */
#ifdef AMP__GEMM_BFDOT
  if (amp__cpu_bf16()) { lv[n++] = 1 | LV_DPBF16; lv[n++] = 1 | LV_MMLA; lv[n++] = 1 | LV_WIDEN; } else
#endif
  lv[n++] = 1;
#endif
  lv[n++] = 0;
  return n;
}
static void set_level(int l) {
#ifdef AMP__GEMM_FAST
  amp__gemm_isa_allowed = (l & 7) | (l & LV_AMX ? AMP__GEMM_ISA_AMX : 0);
  amp__gemm_dpbf16_forced = l & LV_DPBF16 ? 1 : l & LV_WIDEN ? 0 : -1;
#elif defined(AMP__GEMM_NEON)
  amp__gemm_neon_allowed = l & 1;
#ifdef AMP__GEMM_BFDOT
  amp__gemm_dpbf16_forced = l & LV_MMLA ? 2 : l & LV_DPBF16 ? 1 : l & LV_WIDEN ? 0 : -1;
#endif
#else
  (void)l;
#endif
}
static const char *level_name(int l) {
#ifdef AMP__GEMM_NEON
  if (l & 1)
    return l & LV_DPBF16 ? "NEON, bf16 by BFDOT" : l & LV_MMLA ? "NEON, bf16 by BFMMLA"
         : l & LV_WIDEN ? "NEON FMLA, bf16 widened while packing" : "NEON FMLA";
#endif
  return l & LV_AMX ? "AVX-512 + AMX, bf16 on the tile unit"
       : l & LV_DPBF16 ? "AVX-512 + AVX512_BF16, bf16 by vdpbf16ps"
       : l & LV_WIDEN  ? "AVX-512 + AVX512_BF16, bf16 widened while packing"
       : l & 4 ? "AVX-512 + AVX512_BF16" : l & 2 ? "AVX-512 FMA" : l & 1 ? "AVX2 FMA" : "reference (no FMA)";
}

/* The fast default on an FMA CPU, f32, f16 and bf16 inputs (bf16 where it is widened while
   packing, not on the vdpbf16ps kernel): acc = fma(a, b, acc) for p = 0, 1, ..., k-1 in that order,
   whatever the kernel (AVX-512 or AVX2), the blocking or the thread count: the bits of a plain
   fmaf loop. Inputs with full 24-bit mantissas (f32), so the FMA's single rounding
   shows. Shapes cross every block edge (KC 256, MC 96/128, NC 512, tiles 6 x 16 and 8 x 32). */
static void gemm_fast_default_is_an_fma_chain_in_order_bit_for_bit(void) {
  static const int shapes[][3] = {{130, 530, 300}, {9, 33, 517}, {64, 10, 128}};
  int lv[6], nl = levels(lv), li, s, L, ta, tb, count = 0;
  for (li = 0; li < nl; li++) {
    if (!(lv[li] & 1)) continue;   /* the reference is checked above */
    set_level(lv[li]);
    printf("  fast kernel: %s\n", level_name(lv[li]));
    for (s = 0; s < 3; s++) for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++) for (tb = 0; tb < 2; tb++) {
      int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], i, j, p, bad = 0;
      amp_dtype in = (s + ta) % 2 ? (tb && !(lv[li] & LV_DOT) ? AMP_BF16 : AMP_F16) : AMP_F32;
      mat A, B, C;
      if (t_quick() && (count++ % 4)) continue;
      full_bits = in == AMP_F32;
      A = mat_make((amp_layout)L, (amp_trans)ta, m, k, in, 1); B = mat_make((amp_layout)L, (amp_trans)tb, k, n, in, 0);
      C = mat_make((amp_layout)L, AMP_NO_TRANS, m, n, AMP_F32, 2);
      full_bits = 0;
      EXPECT(amp_gemm(amp_cpu(), (amp_layout)L, (amp_trans)ta, (amp_trans)tb, m, n, k, 1.0f, A.p, in, A.ld,
                      B.p, in, B.ld, 0.0f, C.p, AMP_F32, C.ld) == AMP_OK, "%s", amp_last_error());
      for (i = 0; i < m && !bad; i++)
        for (j = 0; j < n && !bad; j++) {
          float acc = 0.0f, got = mat_get(&C, i, j);
          for (p = 0; p < k; p++) acc = fma_ref(mat_get(&A, i, p), mat_get(&B, p, j), acc);
          if (amp__f32_bits(acc) != amp__f32_bits(got)) {
            bad = 1;
            EXPECT(0, "%s, %s %s %s %s m %d n %d k %d: C(%d,%d) fmaf loop %.9g (0x%08x), amp_gemm %.9g (0x%08x)",
                   level_name(lv[li]), L ? "col" : "row", ta ? "T" : "N", tb ? "T" : "N", tname(in), m, n, k, i, j, acc,
                   (unsigned)amp__f32_bits(acc), got, (unsigned)amp__f32_bits(got));
          }
        }
      free(A.p); free(B.p); free(C.p);
    }
  }
  set_level(LV_CPU);
}

/* The fast kernels' epilogue (written from the registers into C, amp__gemm_put / amp__gemm_put_fma)
   is the scalar one: C = act(alpha acc (+ beta c) (+ bias)) with each product rounded before it
   is added (amp__gemm_blend, amp__gemm_epi), then one rounding to C's type, on the fmaf chain's
   acc; bit for bit, for f32, f16 and bf16 C, both layouts (a column-major C takes the buffered
   path), edge tiles and k slices. Full 24-bit mantissas, so a multiply fused into an add shows
   (GCC fuses plain vector arithmetic in GNU C, clang under -Ofast: tests/run.sh builds both). */
static void gemm_fast_epilogue_is_the_scalar_epilogue_bit_for_bit(void) {
  static const int shapes[][3] = {{13, 37, 300}, {70, 17, 9}};
  static const float ab[][2] = {{0.75f, -0.3f}, {1.0f, 0.0f}, {-1.1f, 1.3f}};   /* products inexact */
  int lv[6], nl = levels(lv), li, s, L, oi, a, cases = 0;
  for (li = 0; li < nl; li++) {
    if (!(lv[li] & 1) || (lv[li] & LV_DOT)) continue;
    set_level(lv[li]);
    printf("  fast kernel: %s\n", level_name(lv[li]));
    for (s = 0; s < 2; s++) for (L = 0; L < 2; L++) for (oi = 0; oi < 3; oi++) for (a = 0; a < 3; a++) {
      int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], i, j, p, bad = 0;
      amp_dtype out = (amp_dtype)oi;
      float alpha = ab[a][0], beta = ab[a][1], bias[37];
      amp_gemm_opts o;
      mat A, B, C;
      void *C0;
      full_bits = 1;
      A = mat_make((amp_layout)L, AMP_NO_TRANS, m, k, AMP_F32, 1);
      B = mat_make((amp_layout)L, AMP_NO_TRANS, k, n, AMP_F32, 0);
      C = mat_make((amp_layout)L, AMP_NO_TRANS, m, n, out, 2);
      for (j = 0; j < n; j++) bias[j] = rnd();
      full_bits = 0;
      C0 = malloc(C.n * amp_dtype_size(out));
      memcpy(C0, C.p, C.n * amp_dtype_size(out));
      memset(&o, 0, sizeof o);
      if (a != 1) o.bias = bias;
      o.act = (amp_act)((s + a + L) % 3);   /* NONE, RELU and GELU (amp__gelu_line) in turn */
      EXPECT(amp_gemm_ex(amp_cpu(), (amp_layout)L, AMP_NO_TRANS, AMP_NO_TRANS, m, n, k, alpha, A.p, AMP_F32, A.ld, B.p,
                         AMP_F32, B.ld, beta, C.p, out, C.ld, &o) == AMP_OK, "%s", amp_last_error());
      for (i = 0; i < m && !bad; i++)
        for (j = 0; j < n && !bad; j++) {
          size_t at = (size_t)i * C.rs + (size_t)j * C.cs;
          float acc = 0.0f, t;
          uint32_t want, got;
          for (p = 0; p < k; p++) acc = fma_ref(mat_get(&A, i, p), mat_get(&B, p, j), acc);
          t = amp__gemm_epi(amp__gemm_blend(acc, alpha, beta, beta != 0.0f ? amp__load(C0, out, at) : 0.0f), o.bias != NULL,
                            o.bias ? bias[j] : 0.0f, (int)o.act);
          want = amp__f32_bits(amp__round_to(t, out));
          got = amp__f32_bits(amp__load(C.p, out, at));
          if (want != got) {
            bad = 1;
            EXPECT(0, "%s, %s, %s C, m %d n %d k %d alpha %g beta %g bias %d act %d: C(%d,%d) scalar epilogue %.9g (0x%08x), amp_gemm %.9g (0x%08x)",
                   level_name(lv[li]), L ? "col" : "row", tname(out), m, n, k, alpha, beta, o.bias != NULL, (int)o.act, i, j,
                   amp__bits_f32(want), (unsigned)want, amp__bits_f32(got), (unsigned)got);
          }
        }
      cases++;
      free(A.p); free(B.p); free(C.p); free(C0);
    }
  }
  set_level(LV_CPU);
  printf("  %d products compared\n", cases);
}

/* The fast kernels store a whole tile of an f32 C with alpha 1, beta 0 and no epilogue straight
   from their registers (1 * acc is acc), except where the FPU reads subnormals as 0 without
   flushing results (MXCSR's DAZ without FTZ): there 1 * acc is 0 for an acc the FMAs left
   subnormal, and the stored tile must say so too (the kernels multiply by alpha in their
   registers, as they do for alpha != 1). k = 1, each product 2^-140 (a subnormal), whole
   tiles of every kernel's shape: C is 1 * 2^-140 as this FPU computes it, at every level. */
static void gemm_plain_tiles_keep_the_epilogue_bits_under_denormals_are_zero(void) {
#if defined(__x86_64__) || defined(__i386__)
  enum { M = 32, N = 64 };
  static float a[M], b[N], c[M * N];
  volatile float one = 1.0f, tiny = 0x1p-140f;
  unsigned csr = _mm_getcsr();
  int lv[6], nl = levels(lv), li, i;
  for (i = 0; i < M; i++) a[i] = 0x1p-70f;
  for (i = 0; i < N; i++) b[i] = 0x1p-70f;
  for (li = 0; li < nl; li++) {
    float want;
    int bad = 0;
    set_level(lv[li]);
    _mm_setcsr((csr & ~0x8000u) | 0x40u);   /* DAZ on, FTZ off */
    want = one * tiny;
    EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, M, N, 1, one, a, AMP_F32, 1, b, AMP_F32, N, 0.0f,
                    c, AMP_F32, N) == AMP_OK, "%s", amp_last_error());
    _mm_setcsr(csr);
    for (i = 0; i < M * N && !bad; i++)
      if (amp__f32_bits(c[i]) != amp__f32_bits(want)) {
        bad = 1;
        EXPECT(0, "%s, DAZ without FTZ: C(%d,%d) = %a, 1 * 2^-140 here is %a", level_name(lv[li]), i / N, i % N, c[i], want);
      }
  }
  set_level(LV_CPU);
#endif
}

/* Every kernel the CPU runs (each level, the reference last) stays within the documented bound of
   every layout, transpose, input and output type, alpha/beta, bias and activation. */
static void gemm_every_cpu_kernel_stays_within_the_documented_bound(void) {
  static const int shapes[][3] = {{33, 65, 17}, {70, 45, 300}, {8, 32, 2}};
  static const amp_dtype types[] = {AMP_F32, AMP_F16, AMP_BF16};
  int lv[6], nl = levels(lv), li, s, L, ta, tb, it, count = 0;
  for (li = 0; li < nl; li++) {
    set_level(lv[li]);
    printf("  kernel: %s\n", level_name(lv[li]));
    for (s = 0; s < 3; s++) for (L = 0; L < 2; L++) for (ta = 0; ta < 2; ta++) for (tb = 0; tb < 2; tb++)
      for (it = 0; it < 3; it++) {
        amp_gemm_opts o;
        float bias[65];
        int j, ok;
        if (t_quick() && (count++ % 5)) continue;
        memset(&o, 0, sizeof o);
        for (j = 0; j < 65; j++) bias[j] = rnd();
        if ((s + it) % 2) { o.bias = bias; o.act = (amp_act)((s + L + ta) % 3); }
        ok = check_product((amp_layout)L, (amp_trans)ta, (amp_trans)tb, shapes[s][0], shapes[s][1], shapes[s][2],
                           it == 1 ? 0.5f : 1.0f, it == 2 ? -1.0f : 0.0f, types[it], types[(it + s) % 3], s, &o);
        if (!ok) { printf("  (kernel %s)\n", level_name(lv[li])); set_level(LV_CPU); return; }
      }
  }
  set_level(LV_CPU);
}

/* The f16/bf16 C of a product (written by the fast kernels straight from their accumulators) is
   the f32 C of the same product, epilogue included, rounded once by amp_convert: alpha, beta (C
   holding the same values in both types), bias and ReLU, shapes across the k slices and the
   edge tiles. */
static void gemm_narrow_c_is_the_f32_c_rounded_once(void) {
  static const int shapes[][3] = {{37, 70, 600}, {64, 33, 64}, {9, 530, 17}};
  static const amp_dtype ins[] = {AMP_F32, AMP_F16, AMP_BF16}, outs[] = {AMP_F16, AMP_BF16};
  int s, ii, oi, bad = 0;
  for (s = 0; s < 3; s++) for (ii = 0; ii < 3; ii++) for (oi = 0; oi < 2 && !bad; oi++) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], i;
    amp_dtype in = ins[ii], out = outs[oi];
    mat A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, k, in, 1), B = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, k, n, in, 0);
    size_t nc = (size_t)m * n;
    float *c32 = (float *)malloc(nc * 4), *want = (float *)malloc(nc * 4), bias[530];
    uint16_t *c16 = (uint16_t *)malloc(nc * 2), *w16 = (uint16_t *)malloc(nc * 2);
    float alpha = s == 1 ? 0.75f : 1.0f, beta = s == 0 ? 0.0f : -0.5f;
    amp_gemm_opts o;
    memset(&o, 0, sizeof o);
    for (i = 0; i < n; i++) bias[i] = rnd();
    if (s != 1) { o.bias = bias; o.act = s == 0 ? AMP_ACT_RELU : AMP_ACT_NONE; }
    for (i = 0; i < (int)nc; i++) { float v = rnd(); amp__store(c16, out, (size_t)i, v); c32[i] = amp__load(c16, out, (size_t)i); }
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, m, n, k, alpha, A.p, in, A.ld, B.p, in, B.ld,
                       beta, c32, AMP_F32, n, &o) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, m, n, k, alpha, A.p, in, A.ld, B.p, in, B.ld,
                       beta, c16, out, n, &o) == AMP_OK, "%s", amp_last_error());
    memcpy(want, c32, nc * 4);
    amp_convert(w16, out, want, AMP_F32, nc);
    for (i = 0; i < (int)nc && !bad; i++)
      if (c16[i] != w16[i]) {
        bad = 1;
        EXPECT(0, "%s in, %s out, m %d n %d k %d alpha %g beta %g: C(%d,%d) f32 C %.9g rounded 0x%04x, %s C 0x%04x",
               tname(in), tname(out), m, n, k, alpha, beta, i / n, i % n, c32[i], w16[i], tname(out), c16[i]);
      }
    free(A.p); free(B.p); free(c32); free(want); free(c16); free(w16);
  }
}

/* The FMA kernels (AVX-512, AVX2) read an A with rows contiguous along k in place
   (amp__gemm_micro_512_ra, amp__gemm_micro_fma_ra; f32 as it is, f16 and bf16 widened row by row
   first); with A packed (amp__gemm_ra_ok 0) the same FMAs
   get the same operands: the same bits, for every input and output type, with the epilogue,
   shapes with edges (rows past A's end in the last tile), both layouts and a leading dimension
   above the minimum (once a multiple of 1024 elements: an f32 A copied row by row, not read in
   place). (bf16 x bf16 runs the widened kernel here, forced.) */
static void gemm_a_read_in_place_equals_packed_a_bit_for_bit(void) {
#ifdef AMP__GEMM_FAST
  /* the last: A's leading dimension 1021 + 3 = 1024 row-major, where an f32 A is copied row by row */
  static const int shapes[][3] = {{64, 128, 256}, {13, 70, 300}, {130, 33, 17}, {1, 1, 1}, {14, 40, 1021}};
  int lv[6], nl = levels(lv), li, s, oi, L, ii, bad = 0, cases = 0;
  for (li = 0; li < nl; li++) {
  if (!(lv[li] & 1) || (lv[li] & LV_DOT)) continue;   /* the FMA kernels (AVX-512, AVX2) */
  set_level(lv[li]);
  for (ii = 0; ii < 3; ii++)
  for (s = 0; s < 5; s++) for (oi = 0; oi < 3 && !bad; oi++) for (L = 0; L < 2 && !bad; L++) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], i;
    amp_dtype out = (amp_dtype)oi, in = (amp_dtype)ii;
    amp_trans ta = L ? AMP_TRANS : AMP_NO_TRANS;   /* rows of op(A) contiguous in both layouts */
    mat A, B, C1, C2;
    float bias[130];
    amp_gemm_opts o;
    full_bits = 1;
    A = mat_make((amp_layout)L, ta, m, k, in, 3); B = mat_make((amp_layout)L, AMP_NO_TRANS, k, n, in, 1);
    full_bits = 0;
    C1 = mat_make((amp_layout)L, AMP_NO_TRANS, m, n, out, 2);
    C2 = C1; C2.p = malloc(C1.n * amp_dtype_size(out)); memcpy(C2.p, C1.p, C1.n * amp_dtype_size(out));
    memset(&o, 0, sizeof o);
    for (i = 0; i < n; i++) bias[i] = rnd();
    if (s % 2) { o.bias = bias; o.act = AMP_ACT_RELU; }
    EXPECT(amp_gemm_ex(amp_cpu(), (amp_layout)L, ta, AMP_NO_TRANS, m, n, k, 1.5f, A.p, in, A.ld, B.p, in, B.ld,
                       s == 2 ? 0.25f : 0.0f, C1.p, out, C1.ld, &o) == AMP_OK, "%s", amp_last_error());
    amp__gemm_ra_ok = 0;
    EXPECT(amp_gemm_ex(amp_cpu(), (amp_layout)L, ta, AMP_NO_TRANS, m, n, k, 1.5f, A.p, in, A.ld, B.p, in, B.ld,
                       s == 2 ? 0.25f : 0.0f, C2.p, out, C2.ld, &o) == AMP_OK, "%s", amp_last_error());
    amp__gemm_ra_ok = 1;
    if (memcmp(C1.p, C2.p, C1.n * amp_dtype_size(out))) {
      bad = 1;
      EXPECT(0, "%s: %s in, %s C, %s, m %d n %d k %d: A read in place differs from A packed", level_name(lv[li]),
             tname(in), tname(out), L ? "col" : "row", m, n, k);
    }
    cases++;
    free(A.p); free(B.p); free(C1.p); free(C2.p);
  }
  printf("  fast kernel: %s\n", level_name(lv[li]));
  }
  set_level(LV_CPU);
  printf("  %d products compared\n", cases);
#endif
}

/* The AMX kernel (bf16 x bf16 on an AMX CPU, the default there): chosen by default, and within the
   bound on shapes that cross each of its edges: k past several 256-deep slices (the tiles carried
   between slices through memory), pairs past a multiple of 16 (the zero-padded last strips) and odd
   k, rows past its 32-row slivers and 64-row blocks, columns past its 32-column slivers and
   512-wide panels; every layout and transpose (A packed by rows or, transposed, by columns), f32 and
   bf16 C with alpha, beta, bias and activations. The same call twice gives the same bits. */
static void gemm_amx_kernel_is_the_default_and_stays_within_the_bound_across_its_blocks(void) {
#ifdef AMP__GEMM_AMX
  static const int shapes[][3] = {{130, 530, 1100}, {32, 32, 32}, {33, 17, 1}, {1, 40, 545}, {161, 64, 31}};
  int s, L, ta, tb, oi, count = 0, ok = 1;
  if (!amp__gemm_amx()) { printf("  no AMX this process may use: nothing to check\n"); return; }
  set_level(LV_CPU);
  EXPECT(amp__gemm_pick(AMP_BF16, 0) == &amp__gemm_kernel_amx, "the default bf16 product is not on the AMX kernel");
  EXPECT(amp__gemm_pick(AMP_F16, 0) != &amp__gemm_kernel_amx, "an f16 product was sent to the AMX kernel");
  for (s = 0; s < 5 && ok; s++) for (L = 0; L < 2 && ok; L++) for (ta = 0; ta < 2 && ok; ta++)
    for (tb = 0; tb < 2 && ok; tb++) for (oi = 0; oi < 2 && ok; oi++) {
      amp_gemm_opts o;
      float bias[530];
      int j;
      if (t_quick() && (count++ % 3)) continue;
      memset(&o, 0, sizeof o);
      for (j = 0; j < 530; j++) bias[j] = rnd();
      if ((s + oi) % 2) { o.bias = bias; o.act = (amp_act)((s + L + ta + tb) % 3); }
      ok = check_product((amp_layout)L, (amp_trans)ta, (amp_trans)tb, shapes[s][0], shapes[s][1], shapes[s][2],
                         oi ? 0.5f : 1.0f, (s + tb) % 2 ? -1.0f : 0.0f, AMP_BF16, oi ? AMP_BF16 : AMP_F32, s, &o);
    }
  {   /* the same bits from a second call */
    int m = 130, n = 530, k = 1100;
    mat A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, k, AMP_BF16, 0), B = mat_make(AMP_ROW_MAJOR, AMP_TRANS, k, n, AMP_BF16, 0);
    float *c1 = (float *)malloc((size_t)m * n * 4), *c2 = (float *)malloc((size_t)m * n * 4);
    EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, m, n, k, 1.0f, A.p, AMP_BF16, A.ld, B.p, AMP_BF16, B.ld,
                    0.0f, c1, AMP_F32, n) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, m, n, k, 1.0f, A.p, AMP_BF16, A.ld, B.p, AMP_BF16, B.ld,
                    0.0f, c2, AMP_F32, n) == AMP_OK, "%s", amp_last_error());
    EXPECT(memcmp(c1, c2, (size_t)m * n * 4) == 0, "two AMX products of the same operands differ");
    free(A.p); free(B.p); free(c1); free(c2);
  }
  printf("  AMX products checked against the bound\n");
#else
  printf("  no AMX kernel in this build (x86-64 Linux only)\n");
#endif
}

/* The bf16 kernel reads a row-major B of at most 64 rows of C in place and makes its pairs in
   registers; with B packed (amp__gemm_rb_ok 0, the path of other shapes) every vdpbf16ps gets the
   same operands: the same bits, f32 and bf16 C, with the epilogue, across slices, panels and edges. */
static void gemm_bf16_with_b_read_in_place_equals_packed_b_bit_for_bit(void) {
#ifdef AMP__GEMM_FAST
  static const int shapes[][3] = {{64, 70, 784}, {9, 33, 2}, {64, 530, 40}, {17, 7, 1030}};
  int s, oi, bad = 0;
  if (!(amp__gemm_isa() & AMP__GEMM_ISA_BF16)) { printf("  no AVX512_BF16 on this CPU: nothing to compare\n"); return; }
  set_level(7 | LV_DPBF16);   /* whatever the calibration chose */
  for (s = 0; s < 4; s++) for (oi = 0; oi < 2 && !bad; oi++) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], i;
    amp_dtype out = oi ? AMP_BF16 : AMP_F32;
    size_t es = amp_dtype_size(out), nc = (size_t)m * n;
    mat A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, k, AMP_BF16, 0), B = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, k, n, AMP_BF16, 3);
    char *c1 = (char *)malloc(nc * es), *c2 = (char *)malloc(nc * es);
    float bias[530];
    amp_gemm_opts o;
    memset(&o, 0, sizeof o);
    for (i = 0; i < n; i++) bias[i] = rnd();
    if (s % 2) { o.bias = bias; o.act = AMP_ACT_RELU; }
    for (i = 0; i < (int)nc; i++) amp__store(c1, out, (size_t)i, rnd());
    memcpy(c2, c1, nc * es);
    full_bits = 0;
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, m, n, k, 1.5f, A.p, AMP_BF16, A.ld, B.p, AMP_BF16,
                       B.ld, s == 2 ? 0.25f : 0.0f, c1, out, n, &o) == AMP_OK, "%s", amp_last_error());
    amp__gemm_rb_ok = 0;
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, m, n, k, 1.5f, A.p, AMP_BF16, A.ld, B.p, AMP_BF16,
                       B.ld, s == 2 ? 0.25f : 0.0f, c2, out, n, &o) == AMP_OK, "%s", amp_last_error());
    amp__gemm_rb_ok = 1;
    for (i = 0; i < (int)nc && !bad; i++)
      if (memcmp(c1 + (size_t)i * es, c2 + (size_t)i * es, es)) {
        bad = 1;
        EXPECT(0, "%s out, m %d n %d k %d: C(%d,%d) B in place %.9g, B packed %.9g", tname(out), m, n, k, i / n, i % n,
               amp__load(c1, out, (size_t)i), amp__load(c2, out, (size_t)i));
      }
    free(A.p); free(B.p); free(c1); free(c2);
  }
  set_level(LV_CPU);
#else
  printf("  no fast kernels in this build: nothing to compare\n");
#endif
}

/* bf16 C on an AVX512_BF16 CPU is rounded by vcvtne2ps2bf16, which flushes f32 subnormals; the
   rows that hold one are rounded by amp_convert's code: results that are subnormal, zero, NaN,
   infinite and normal, from f32 and bf16 inputs, give amp_convert's bits of the f32 C. */
static void gemm_bf16_c_of_subnormal_nan_and_inf_results_is_amp_convert_of_f32_c(void) {
  static const amp_dtype ins[] = {AMP_F32, AMP_BF16};
  int ii, i, j, bad = 0;
  for (ii = 0; ii < 2 && !bad; ii++) {
    enum { M = 16, N = 40, K = 2 };
    float a[M * K], b[K * N], c32[M * N], want[M * N];
    uint16_t ah[M * K], bh[K * N], c16[M * N], w16[M * N];
    const void *A = a, *B = b;
    float alpha = 0x1p-100f;
    for (i = 0; i < M; i++) {   /* row i: a(i,0) b(0,j) + a(i,1) b(1,j), scaled by 2^-100 */
      a[i * K] = i == 3 ? NAN : i == 5 ? INFINITY : (float)(i + 1) * 0x1p-28f * (i % 2 ? -1.0f : 1.0f);
      a[i * K + 1] = i >= 12 ? 0x1p90f : 0.0f;
    }
    for (j = 0; j < N; j++) { b[j] = 1.0f + (float)j / 64.0f; b[N + j] = j % 3 ? 1.0f : 0.0f; }
    if (ins[ii] == AMP_BF16) {
      amp_convert(ah, AMP_BF16, a, AMP_F32, M * K); amp_convert(bh, AMP_BF16, b, AMP_F32, K * N);
      A = ah; B = bh;
    }
    EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, M, N, K, alpha, A, ins[ii], K, B, ins[ii], N,
                    0.0f, c32, AMP_F32, N) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, M, N, K, alpha, A, ins[ii], K, B, ins[ii], N,
                    0.0f, c16, AMP_BF16, N) == AMP_OK, "%s", amp_last_error());
    memcpy(want, c32, sizeof want);
    amp_convert(w16, AMP_BF16, want, AMP_F32, M * N);
    {   /* -Ofast links code that flushes subnormal results to 0 in the whole process: then there are none */
      volatile float tiny = 0x1p-100f;
      if (tiny * 0x1p-30f != 0.0f)
        EXPECT(fpclassify(c32[0]) == FP_SUBNORMAL, "%s in: C(0,0) %g is not subnormal: the test lost its point", tname(ins[ii]), c32[0]);
      else if (ii == 0) printf("  this build flushes subnormals (-Ofast): no subnormal results to round\n");
    }
    for (i = 0; i < M * N && !bad; i++)
      if (c16[i] != w16[i]) {
        bad = 1;
        EXPECT(0, "%s in, bf16 out: C(%d,%d) f32 C %g (0x%08x) rounded 0x%04x, bf16 C 0x%04x", tname(ins[ii]), i / N, i % N,
               c32[i], (unsigned)amp__f32_bits(c32[i]), w16[i], c16[i]);
      }
  }
}

/* vdpbf16ps (the bf16 kernel on AVX512_BF16 CPUs where it pays) treats subnormal bf16 inputs and
   results below 2^-126 as 0: the manual's bound has a term for it. On that kernel a subnormal input
   gives exactly 0 or the exact product; on every other (bf16 widened, the reference) the exact
   product, or 0 where the FPU reads subnormals as 0 (-Ofast's denormals-are-zero mode). */
static void gemm_bf16_subnormal_inputs_give_zero_or_the_exact_product(void) {
  amp_bf16 a[2], b[2];
  int lv[6], nl = levels(lv), li;
  volatile float sub = 0x1p-130f;
  int daz = sub + sub == 0.0f;
  a[0] = amp_f32_to_bf16(0x1p-130f); a[1] = 0; b[0] = amp_f32_to_bf16(0x1p100f); b[1] = 0;
  for (li = 0; li < nl; li++) {
    float c = -1.0f;
    amp_gemm_opts o;
    memset(&o, 0, sizeof o);
    if (!lv[li]) o.algo = AMP_GEMM_REFERENCE;
    set_level(lv[li]);
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 1, 1, 2, 1.0f, a, AMP_BF16, 2, b, AMP_BF16, 1,
                       0.0f, &c, AMP_F32, 1, &o) == AMP_OK, "%s", amp_last_error());
    if (lv[li] & LV_DOT || daz)
      EXPECT(c == 0x1p-30f || c == 0.0f, "%s: 2^-130 * 2^100 in bf16: expected 2^-30 or 0 (flushed), got %a",
             level_name(lv[li]), c);
    else EXPECT(c == 0x1p-30f, "%s: 2^-130 * 2^100 in bf16: expected 2^-30, got %a", level_name(lv[li]), c);
  }
  set_level(LV_CPU);
}

/* The bf16 kernel is chosen once per process by what the core delivers (amp__gemm_dpbf16: a short
   calibration of vdpbf16ps against vfmadd231ps): every call answers the same, and a bf16 product
   with nothing forced has the bits of the kernel chosen. Prints the choice. */
static void gemm_bf16_kernel_is_chosen_once_and_is_the_one_that_runs(void) {
#if defined(AMP__GEMM_FAST) || defined(AMP__GEMM_BFDOT)
  int m = 20, n = 40, k = 70, v, i, c;
  mat A, B;
  float *c0, *c1;
#ifdef AMP__GEMM_FAST
  if (!(amp__gemm_isa() & AMP__GEMM_ISA_BF16)) { printf("  no AVX512_BF16 on this CPU: bf16 is always widened\n"); return; }
#else
  if (!amp__cpu_bf16()) { printf("  no FEAT_BF16 on this CPU: bf16 is always widened\n"); return; }
#endif
  set_level(LV_CPU);
  v = amp__gemm_dpbf16();
#ifdef AMP__GEMM_FAST
  EXPECT(v == 0 || v == 1, "amp__gemm_dpbf16() = %d", v);
#else
  EXPECT(v >= 0 && v <= 2, "amp__gemm_dpbf16() = %d", v);   /* 2: BFMMLA */
#endif
  for (i = 0; i < 5; i++) EXPECT(amp__gemm_dpbf16() == v, "the choice changed within the process");
  printf("  this core: bf16 products by %s\n", v == 2 ? "BFMMLA (at least FMLA's flop rate, above BFDOT's)"
                                              : v ? "the dot-product instruction (at least the FMA's flop rate)"
                                                  : "widening and FMA (the dot-product instruction is slower here)");
  A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, k, AMP_BF16, 0); B = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, k, n, AMP_BF16, 0);
  c0 = (float *)malloc((size_t)m * n * 4); c1 = (float *)malloc((size_t)m * n * 4);
  for (c = 0; c < 2; c++) {
    float *out = c ? c1 : c0;
    set_level(c ? 7 : 7 | (v == 2 ? LV_MMLA : v ? LV_DPBF16 : LV_WIDEN));
    EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, m, n, k, 1.0f, A.p, AMP_BF16, A.ld, B.p, AMP_BF16,
                    B.ld, 0.0f, out, AMP_F32, n) == AMP_OK, "%s", amp_last_error());
  }
  EXPECT(memcmp(c0, c1, (size_t)m * n * 4) == 0, "the default bf16 product differs from the chosen kernel's");
  set_level(LV_CPU);
  free(A.p); free(B.p); free(c0); free(c1);
#endif
}

/* BFDOT's arithmetic as the Arm ARM's BFDotAdd (FEAT_EBF16 absent or FPCR.EBF 0) states it, in
   integers: sum = RO(acc + RO(RO(a0 b0) + RO(a1 b1))), RO rounding to odd (an inexact result is
   truncated and gets bit 0 set), subnormal inputs and results below 2^-126 flushed to signed 0,
   an overflow to infinity. Finite operands only (the test makes no NaN or infinity). */
#ifdef AMP__GEMM_BFDOT
static uint32_t ro_pack(int sign, uint64_t m, int e, int sticky) {   /* (-1)^sign (m + sticky fraction) 2^e */
  int t = 63;
  if (m == 0) return 0u;   /* an exact cancellation: +0 */
  while (!(m >> t)) t--;
  if (t > 23) { int sh = t - 23; sticky |= (m & ((1ull << sh) - 1)) != 0; m >>= sh; e += sh; }
  else { m <<= 23 - t; e -= 23 - t; }
  e += 23 + 127;   /* biased exponent of m 2^e, m in [2^23, 2^24) */
  if (e < 1) return (uint32_t)sign << 31;                       /* flushed */
  if (e >= 255) return (uint32_t)sign << 31 | 0x7f800000u;      /* overflow */
  return (uint32_t)sign << 31 | (uint32_t)e << 23 | ((uint32_t)m & 0x7fffffu) | (sticky ? 1u : 0u);
}
static int unpack32(uint32_t x, uint64_t *m, int *e) {   /* sign; 0 mantissa for a zero (or flushed) */
  int be = (int)(x >> 23 & 0xff);
  *m = be ? (x & 0x7fffffu) | 0x800000u : 0; *e = be - 127 - 23;
  return (int)(x >> 31);
}
static uint32_t ro_mul(uint16_t a, uint16_t b) {
  uint64_t ma, mb; int ea, eb, s = unpack32((uint32_t)a << 16, &ma, &ea) ^ unpack32((uint32_t)b << 16, &mb, &eb);
  if (!ma || !mb) return (uint32_t)s << 31;
  return ro_pack(s, ma * mb, ea + eb, 0);
}
static uint32_t ro_add(uint32_t x, uint32_t y) {
  uint64_t mx, my, big, small; int ex, ey, sx = unpack32(x, &mx, &ex), sy = unpack32(y, &my, &ey), d, sticky = 0;
  if (!mx && !my) return (uint32_t)(sx & sy) << 31;
  if (!mx) return y & 0xff800000u ? y : (uint32_t)sy << 31;
  if (!my) return x & 0xff800000u ? x : (uint32_t)sx << 31;
  if (ex < ey || (ex == ey && mx < my)) { uint64_t tm = mx; int te = ex, ts = sx; mx = my; ex = ey; sx = sy; my = tm; ey = te; sy = ts; }
  d = ex - ey;
  big = mx << 38;
  if (d > 62) { small = 0; sticky = 1; }
  else { small = (my << 38) >> d; sticky = ((my << 38) & ((1ull << d) - 1)) != 0; }
  if (sx == sy) return ro_pack(sx, big + small, ex - 38, sticky);
  if (big == small && !sticky) return 0u;
  return ro_pack(sx, big - small - (sticky ? 1 : 0), ex - 38, sticky);
}
static uint32_t bfdotadd(uint32_t acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
  return ro_add(acc, ro_add(ro_mul(a0, b0), ro_mul(a1, b1)));
}
#endif

/* On a CPU with FEAT_BF16 the BFDOT and the BFMMLA kernels (each forced) give C = the chain of
   BFDotAdd over the pairs q = 0, 1, ... of k in order, from +0, bit for bit: inputs with wide
   exponents (products that round, cancel, fall below 2^-126 and are flushed; subnormal inputs), odd
   k (the last pair padded with 0), an odd number of pairs in a slice (BFMMLA's last pair alone), k
   across the 512-element slice, m and n off both kernels' tiles (6 x 16, 8 x 8), both layouts and
   both transposes of A and B; and a sum flushed to -0 by the last pair, which stays -0. */
static void gemm_bfdot_and_bfmmla_kernels_are_the_arm_bfdotadd_chain_bit_for_bit(void) {
#ifdef AMP__GEMM_BFDOT
  static const int shapes[][3] = {{7, 19, 37}, {13, 33, 1030}, {6, 16, 2}, {9, 10, 515}, {17, 9, 8}, {1, 1, 1},
                                  {16, 24, 4}, {3, 5, 6}};
  static const int kern[2] = {LV_DPBF16, LV_MMLA};
  int s, t, ki, bad = 0, cases = 0;
  if (!amp__cpu_bf16()) { printf("  no FEAT_BF16 on this CPU: no BFDOT or BFMMLA kernel to check\n"); return; }
  for (ki = 0; ki < 2; ki++)
  for (s = 0; s < 8; s++) for (t = 0; t < 8 && !bad; t++) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], i, j, p;
    int ta = t & 1, tb = t >> 1 & 1, col = t >> 2;
    /* strides of op(A), op(B) and C, and the leading dimensions amp_gemm gets */
    int arow = !col ^ ta, brow = !col ^ tb;   /* op(A)'s rows (op(B)'s) contiguous */
    size_t ars = arow ? (size_t)k : 1, acs = arow ? 1 : (size_t)m, brs = brow ? (size_t)n : 1, bcs = brow ? 1 : (size_t)k;
    size_t crs = col ? 1 : (size_t)n, ccs = col ? (size_t)m : 1;
    uint16_t *a = (uint16_t *)malloc((size_t)m * k * 2), *b = (uint16_t *)malloc((size_t)k * n * 2);
    float *c = (float *)malloc((size_t)m * n * 4);
    for (i = 0; i < m * k + k * n; i++) {   /* wide exponents, both signs; some subnormal and some zero */
      uint16_t v;
      rng_state = rng_state * 1664525u + 1013904223u;
      v = (uint16_t)(rng_state >> 16);
      v = (uint16_t)((v & 0x807f) | (uint16_t)(((rng_state >> 8) % 100u) + (i % 3 ? 60u : 12u)) << 7);
      if (i % 29 == 0) v &= 0x807f;   /* subnormal (or zero) */
      if (i < m * k) a[i] = v; else b[i - m * k] = v;
    }
    set_level(1 | kern[ki]);
    EXPECT(amp_gemm(amp_cpu(), col ? AMP_COL_MAJOR : AMP_ROW_MAJOR, ta ? AMP_TRANS : AMP_NO_TRANS,
                    tb ? AMP_TRANS : AMP_NO_TRANS, m, n, k, 1.0f, a, AMP_BF16, (int)(arow ? ars : acs), b, AMP_BF16,
                    (int)(brow ? brs : bcs), 0.0f, c, AMP_F32, col ? m : n) == AMP_OK, "%s", amp_last_error());
    for (i = 0; i < m && !bad; i++)
      for (j = 0; j < n && !bad; j++) {
        uint32_t acc = 0, got = amp__f32_bits(c[(size_t)i * crs + (size_t)j * ccs]);
#define AE(p) a[(size_t)i * ars + (size_t)(p) * acs]
#define BE(p) b[(size_t)(p) * brs + (size_t)j * bcs]
        for (p = 0; p < k; p += 2)
          acc = bfdotadd(acc, AE(p), p + 1 < k ? AE(p + 1) : 0, BE(p), p + 1 < k ? BE(p + 1) : 0);
#undef AE
#undef BE
        if (acc != got) {
          bad = 1;
          EXPECT(0, "%s, %s A%s B%s m %d n %d k %d: C(%d,%d) BFDotAdd chain 0x%08x, amp_gemm 0x%08x",
                 level_name(1 | kern[ki]), col ? "col" : "row", ta ? "T" : "N", tb ? "T" : "N", m, n, k, i, j,
                 (unsigned)acc, (unsigned)got);
        }
      }
    cases++;
    free(a); free(b); free(c);
  }
  /* a sum flushed to -0 by a slice's last pair, the third of three (BFMMLA's pair alone):
     2^-120 (pair 0), +0 (pair 1), then -(1 + 2^-7) 2^-120 leaves -2^-127, flushed to -0, which a
     further step adding a zero pair would make +0 */
  for (ki = 0; ki < 2 && !bad; ki++) {
    static const uint16_t a6[6] = {0x3f80, 0, 0, 0, 0xbf81, 0}, b6[6] = {0x0380, 0, 0, 0, 0x0380, 0};
    uint32_t acc = 0;
    float c = 1.0f;
    for (s = 0; s < 6; s += 2) acc = bfdotadd(acc, a6[s], a6[s + 1], b6[s], b6[s + 1]);
    EXPECT(acc == 0x80000000u, "the BFDotAdd chain gives 0x%08x, not -0: the case lost its point", (unsigned)acc);
    set_level(1 | kern[ki]);
    EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 1, 1, 6, 1.0f, a6, AMP_BF16, 6, b6, AMP_BF16, 1,
                    0.0f, &c, AMP_F32, 1) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp__f32_bits(c) == acc, "%s: 1 x 1 x 6: BFDotAdd chain 0x%08x, amp_gemm 0x%08x", level_name(1 | kern[ki]),
           (unsigned)acc, (unsigned)amp__f32_bits(c));
    cases++;
  }
  set_level(LV_CPU);
  printf("  %d products compared with the BFDotAdd chain\n", cases);
#else
  printf("  no BFDOT or BFMMLA kernel in this build\n");
#endif
}

static void gemm_beta_zero_does_not_read_c(void) {
  float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 0, 1, 1, 1}, C[4] = {NAN, INFINITY, NAN, -INFINITY};
  /* row-major 2x3 * 3x2 = [[1+3, 2+3], [4+6, 5+6]] */
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 3, 1.0f, A, AMP_F32, 3, B, AMP_F32, 2, 0.0f,
                  C, AMP_F32, 2) == AMP_OK, "%s", amp_last_error());
  EXPECT(C[0] == 4 && C[1] == 5 && C[2] == 10 && C[3] == 11, "C with NaN/inf, beta 0: expected 4 5 10 11, got %g %g %g %g",
         C[0], C[1], C[2], C[3]);
}

static void gemm_k_zero_sets_c_to_beta_c_without_reading_a_or_b(void) {
  float C[4] = {1, -2, 3, -4};
  amp_f16 H[4];
  int i;
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 0, 1.0f, NULL, AMP_F16, 1, NULL, AMP_F16, 2,
                  2.0f, C, AMP_F32, 2) == AMP_OK, "k 0, A and B NULL: %s", amp_last_error());
  EXPECT(C[0] == 2 && C[1] == -4 && C[2] == 6 && C[3] == -8, "k 0, beta 2: expected 2 -4 6 -8, got %g %g %g %g", C[0], C[1], C[2], C[3]);
  for (i = 0; i < 4; i++) H[i] = amp_f32_to_f16(NAN);
  EXPECT(amp_gemm(amp_cpu(), AMP_COL_MAJOR, AMP_TRANS, AMP_NO_TRANS, 2, 2, 0, 1.0f, NULL, AMP_BF16, 1, NULL, AMP_BF16, 1,
                  0.0f, H, AMP_F16, 2) == AMP_OK, "k 0, beta 0: %s", amp_last_error());
  EXPECT(H[0] == 0 && H[1] == 0 && H[2] == 0 && H[3] == 0, "k 0, beta 0, C NaN: expected zeros, got %04x %04x %04x %04x",
         H[0], H[1], H[2], H[3]);
}

static void gemm_alpha_zero_does_not_read_a_or_b(void) {
  float A[4] = {NAN, INFINITY, NAN, NAN}, B[4] = {INFINITY, 0, NAN, 1}, C[4] = {1, 2, 3, -0.0f};
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 0.0f, A, AMP_F32, 2, B, AMP_F32, 2, 1.0f,
                  C, AMP_F32, 2) == AMP_OK, "%s", amp_last_error());
  /* -0 on the bits: under -fno-signed-zeros (-Ofast) a compiler may fold signbit() after C[3] == 0 */
  EXPECT(C[0] == 1 && C[1] == 2 && C[2] == 3 && amp__f32_bits(C[3]) == 0x80000000u,
         "alpha 0, beta 1, A/B NaN: expected 1 2 3 -0, got %g %g %g %g", C[0], C[1], C[2], C[3]);
}

static void gemm_with_m_or_n_zero_changes_nothing(void) {
  float C[2] = {7, 8};
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 0, 2, 3, 1.0f, NULL, AMP_F32, 3, NULL, AMP_F32, 2,
                  0.0f, NULL, AMP_F32, 2) == AMP_OK, "m 0 with NULL pointers: %s", amp_last_error());
  EXPECT(amp_gemm(amp_cpu(), AMP_COL_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 0, 3, 1.0f, NULL, AMP_F32, 2, NULL, AMP_F32, 3,
                  0.0f, C, AMP_F32, 2) == AMP_OK, "n 0: %s", amp_last_error());
  EXPECT(C[0] == 7 && C[1] == 8, "n 0: C changed to %g %g", C[0], C[1]);
}

static void gemm_epilogue_adds_bias_then_activation(void) {
  static const amp_dtype types[] = {AMP_F32, AMP_F16, AMP_BF16};
  int act, bt, L, tb, count = 0;
  for (act = 0; act < 3; act++) for (bt = 0; bt < 4; bt++) for (L = 0; L < 2; L++) for (tb = 0; tb < 2; tb++) {
    float biasf[41];
    uint16_t biash[41];
    amp_gemm_opts o;
    int j;
    if (t_quick() && (count++ % 3)) continue;
    memset(&o, 0, sizeof o);
    o.act = (amp_act)act;
    if (bt < 3) {
      for (j = 0; j < 41; j++) { float v = 2 * rnd(); biasf[j] = v; biash[j] = bt == 1 ? amp_f32_to_f16(v) : amp_f32_to_bf16(v); }
      o.bias = bt == 0 ? (const void *)biasf : (const void *)biash;
      o.bias_type = types[bt];
    }
    if (!check_product((amp_layout)L, AMP_NO_TRANS, (amp_trans)tb, 23, 41, 37, 1.5f, L ? 0.5f : 0.0f, AMP_F16,
                       types[(act + bt) % 3], L, &o)) return;
  }
}

/* The bias is added to the rounded alpha * acc (and beta * c), never fused with it: one element
   whose product the bias cancels exactly (0.1f * 3 + -fl(0.1f * 3) is 0; fused, it is the
   product's rounding error), through the reference with beta 0, with alpha 0 and with k 0
   (C = beta * C + bias), and the per-tensor fp8 product (s = fl(fl(alpha * a_scale_inv) * 1)).
   make test runs this file under gcc and clang -Ofast -march=native, whose contraction found it. */
static void gemm_bias_is_added_to_the_rounded_product(void) {
  amp_gemm_opts o;
  volatile float prod;
  float a = 1.0f, b = 3.0f, c, bias;
  amp_fp8 a8 = amp_f32_to_e4m3(1.0f, 1), b8 = amp_f32_to_e4m3(3.0f, 1);
  const float alpha = 0.1f, third = 1.0f / 3.0f, si = 0.3f;
  int k;
  memset(&o, 0, sizeof o);
  o.algo = AMP_GEMM_REFERENCE; o.bias = &bias;
  prod = alpha * 3.0f; bias = -prod;
  EXPECT((double)alpha * 3.0 != (double)prod, "the test needs an inexact product");
  c = 5.0f;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 1, 1, 1, alpha, &a, AMP_F32, 1, &b, AMP_F32, 1,
                     0.0f, &c, AMP_F32, 1, &o) == AMP_OK && amp__f32_bits(c) == 0u,
         "f32, beta 0: C = %a, want +0 (bias %a)", (double)c, (double)bias);
  for (k = 0; k < 2; k++) {   /* alpha 0 (k 1), then k 0: C = beta * C + bias */
    c = 3.0f;
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 1, 1, k ? 0 : 1, k ? 1.0f : 0.0f, &a, AMP_F32,
                       1, &b, AMP_F32, 1, alpha, &c, AMP_F32, 1, &o) == AMP_OK && amp__f32_bits(c) == 0u,
           "f32, %s: C = %a, want +0", k ? "k 0" : "alpha 0", (double)c);
  }
  /* fp8: the sum 3 times s = fl(fl(third * si) * 1) */
  prod = third * si; prod = prod * 3.0f; bias = -prod;
  o.a_scale_inv = &si;
  c = 5.0f;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 1, 1, 1, third, &a8, AMP_E4M3, 1, &b8, AMP_E4M3,
                     1, 0.0f, &c, AMP_F32, 1, &o) == AMP_OK && amp__f32_bits(c) == 0u,
         "fp8, beta 0: C = %a, want +0 (bias %a)", (double)c, (double)bias);
}

static void gemm_relu_epilogue_turns_nan_into_zero_like_cublaslt(void) {
  float A[2] = {NAN, 1}, B[2] = {1, 1}, C[2] = {5, 5};
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.act = AMP_ACT_RELU;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 1, 1, 1.0f, A, AMP_F32, 1, B, AMP_F32, 1, 0.0f,
                     C, AMP_F32, 1, &o) == AMP_OK, "%s", amp_last_error());
  EXPECT(C[0] == 0 && C[1] == 1, "relu of NaN and 1: expected 0 1, got %g %g", C[0], C[1]);
}

static void gemm_gelu_is_the_tanh_approximation(void) {
  /* 1 x 1 x 1 products: C = gelu(x) for a few x; the erf form differs from the tanh form by up to 1e-3 */
  static const float xs[] = {-3.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f, 3.0f};
  amp_gemm_opts o;
  int i;
  memset(&o, 0, sizeof o);
  o.act = AMP_ACT_GELU;
  for (i = 0; i < 8; i++) {
    float one = 1.0f, c = 0.0f;
    double x = xs[i], want = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 1, 1, 1, 1.0f, &xs[i], AMP_F32, 1, &one,
                       AMP_F32, 1, 0.0f, &c, AMP_F32, 1, &o) == AMP_OK, "%s", amp_last_error());
    EXPECT(fabs(c - want) <= 1e-6 * (1 + fabs(want)), "gelu(%g): expected %.9g (tanh form), got %.9g", x, want, c);
  }
}

/* amp.h's tanh (amp__tanh, the GELU epilogue's) is tanh rounded once to f32: against the C library's
   double tanh rounded to f32, every float in [2^-12, 10) where amp__tanh computes (every 3rd;
   every 4099th under AMP_TEST_QUICK), both signs; and its answers from the bits: NaN quieted with
   its payload, +-inf and |x| >= 10 to +-1, |x| < 2^-12 (zeros and subnormals too) to x. A libm
   whose double tanh is off near a midpoint of two floats could differ: such inputs are counted
   apart and must stay within 0.5 ulp + 2^-20 of tanh and few (none with glibc). */
static void tanh_is_tanh_rounded_once(void) {
  const uint32_t step = t_quick() ? 4099u : 3u;
  uint64_t n = 0, near = 0;
  uint32_t b;
  int sg;
  for (sg = 0; sg < 2; sg++)
    for (b = 0x39800000u; b < 0x41200000u; b += step) {
      float x = amp__bits_f32(b | (sg ? 0x80000000u : 0u)), got = amp__tanh(x);
      double t = tanh((double)x);
      float want = (float)t;
      n++;
      if (amp__f32_bits(got) != amp__f32_bits(want)) {
        double ulp = ldexp(1.0, ilogb(want) - 23), err = fabs((double)got - t) / ulp;
        near++;
        EXPECT(err <= 0.5 + 0x1p-20, "tanh(%a): libm's double rounded %a, amp__tanh %a (%.6f ulp off)", x, want, got, err);
      }
    }
  EXPECT(near <= 16, "tanh: %llu of %llu inputs differ from the C library's double tanh rounded to f32", (unsigned long long)near,
         (unsigned long long)n);
  printf("  %llu inputs, %llu of them beside libm's double tanh rounded\n", (unsigned long long)n, (unsigned long long)near);
  {
    /* volatile: read at run time (under -Ofast a constant -0.0 may be folded to +0.0 in this file) */
    static const volatile uint32_t same[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x39800000u - 1u,
                                    0xb97fffffu};
    static const volatile uint32_t one[] = {0x41200000u, 0x7f7fffffu, 0x7f800000u, 0x4b000000u};
    int i;
    for (i = 0; i < (int)(sizeof same / sizeof same[0]); i++)
      EXPECT(amp__f32_bits(amp__tanh(amp__bits_f32(same[i]))) == same[i], "tanh(0x%08x): expected itself, got 0x%08x",
             (unsigned)same[i], (unsigned)amp__f32_bits(amp__tanh(amp__bits_f32(same[i]))));
    for (i = 0; i < 4; i++)
      for (sg = 0; sg < 2; sg++) {
        uint32_t x = one[i] | (sg ? 0x80000000u : 0u), want = sg ? 0xbf800000u : 0x3f800000u;
        EXPECT(amp__f32_bits(amp__tanh(amp__bits_f32(x))) == want, "tanh(0x%08x): expected 0x%08x, got 0x%08x", (unsigned)x,
               (unsigned)want, (unsigned)amp__f32_bits(amp__tanh(amp__bits_f32(x))));
      }
    EXPECT(amp__f32_bits(amp__tanh(amp__bits_f32(0x7f800001u))) == 0x7fc00001u, "tanh of an sNaN: expected 0x7fc00001, got 0x%08x",
           (unsigned)amp__f32_bits(amp__tanh(amp__bits_f32(0x7f800001u))));
    EXPECT(amp__f32_bits(amp__tanh(amp__bits_f32(0xffc01234u))) == 0xffc01234u, "tanh of a qNaN: expected 0xffc01234, got 0x%08x",
           (unsigned)amp__f32_bits(amp__tanh(amp__bits_f32(0xffc01234u))));
  }
}

/* amp__gelu_line (the GELU epilogue's loop) gives amp__gelu_tanh's bits, element by element, at every
   vector level the CPU has (AVX-512, AVX2; elsewhere the plain loop): every 251st of all 2^32
   patterns (every 65537th under AMP_TEST_QUICK; the -Ofast builds run it with denormals-are-zero
   and flush-to-zero set), in lines of odd lengths so that every tail is taken, and a line in
   [-12, 12] dense. */
static void gelu_line_is_gelu_element_by_element(void) {
  enum { LINE = 4093 };
  static float x[LINE], y[LINE];
  const uint64_t step = t_quick() ? 65537u : 251u;
  int caps[2] = {2, 1}, ci, nc = 1;
  uint64_t b, bad = 0, n = 0;
#ifdef AMP__X86_SIMD
  nc = amp_simd_active() && amp__cpu_level() >= 2 ? 2 : 1;
#endif
  for (ci = 0; ci < nc; ci++) {
    int pass;
#ifdef AMP__X86_SIMD
    amp__isa_cap = caps[ci];
#else
    (void)caps;
#endif
    for (pass = 0; pass < 2; pass++) {
      for (b = 0; b < (1ull << 32); ) {
        size_t len = LINE - (size_t)(n % 17), i;   /* odd and even lengths, every tail */
        for (i = 0; i < len; i++) x[i] = pass ? (float)((double)((b + i) % 24001) / 1000.0 - 12.0)
                                              : amp__bits_f32((uint32_t)(b + i * step));
        memcpy(y, x, len * sizeof(float));
        amp__gelu_line(y, len);
        for (i = 0; i < len; i++) {
          float want = amp__gelu_tanh(x[i]);
          if (amp__f32_bits(want) != amp__f32_bits(y[i]) && bad++ < 8)
            EXPECT(0, "isa cap %d: gelu(%a): amp__gelu_tanh 0x%08x, amp__gelu_line 0x%08x", caps[ci], x[i],
                   (unsigned)amp__f32_bits(want), (unsigned)amp__f32_bits(y[i]));
        }
        n += len;
        b += pass ? len : len * step;
        if (pass && b >= 24001) break;
      }
    }
  }
#ifdef AMP__X86_SIMD
  amp__isa_cap = 2;
#endif
  EXPECT(bad == 0, "%llu of %llu elements differ", (unsigned long long)bad, (unsigned long long)n);
}

/* A and B of different types (f32 activations x bf16 weights, f16 x bf16, ...): never narrowed,
   each widened exactly while packing, so the product equals that of the widened f32 matrices by
   the same kernel, bit for bit, at every level the CPU runs (the reference included), for both
   transposes and layouts, shapes with tails, a leading dimension above the minimum, and C of each
   type. */
static void mixed_input_types_equal_the_product_of_the_widened_matrices(void) {
  static const amp_dtype types[3] = {AMP_F32, AMP_F16, AMP_BF16};
  static const int shapes[3][3] = {{1, 1, 1}, {7, 19, 13}, {33, 70, 129}};
  enum { LD = 140, SA = 140 * 140, SC = 140 * 140 };
  static float af[SA], bf[SA], wa[SA], wb[SA];
  static unsigned char a[4 * SA], b[4 * SA], c1[4 * SC], c2[4 * SC];
  int lv[6], nl = levels(lv), li, ia, ib, sh, tr, i, cases = 0;
  full_bits = 1;   /* 24-bit mantissas: narrowing an f32 input would show */
  for (i = 0; i < SA; i++) { af[i] = rnd(); bf[i] = rnd(); }
  full_bits = 0;
  for (li = 0; li < nl; li++) for (ia = 0; ia < 3; ia++) for (ib = 0; ib < 3; ib++) for (sh = 0; sh < 3; sh++)
    for (tr = 0; tr < 8; tr++) {
      int m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2];
      amp_trans ta = tr & 1 ? AMP_TRANS : AMP_NO_TRANS, tb = tr & 2 ? AMP_TRANS : AMP_NO_TRANS;
      amp_layout L = tr & 4 ? AMP_COL_MAJOR : AMP_ROW_MAJOR;
      amp_dtype ct = types[(ia + ib + sh) % 3];
      amp_gemm_opts o;
      amp_status s1, s2;
      if (ia == ib) continue;
      if (t_quick() && (ia + ib + sh + tr) % 4) continue;
      memset(&o, 0, sizeof o);
      if (!lv[li]) o.algo = AMP_GEMM_REFERENCE;
      set_level(lv[li] ? lv[li] : LV_CPU);
      amp_convert(a, types[ia], af, AMP_F32, SA); amp_convert(wa, AMP_F32, a, types[ia], SA);
      amp_convert(b, types[ib], bf, AMP_F32, SA); amp_convert(wb, AMP_F32, b, types[ib], SA);
      for (i = 0; i < SC; i++) { amp__store(c1, ct, (size_t)i, 0.25f); amp__store(c2, ct, (size_t)i, 0.25f); }
      s1 = amp_gemm_ex(amp_cpu(), L, ta, tb, m, n, k, 0.75f, a, types[ia], LD, b, types[ib], LD, 0.5f, c1, ct, LD, &o);
      s2 = amp_gemm_ex(amp_cpu(), L, ta, tb, m, n, k, 0.75f, wa, AMP_F32, LD, wb, AMP_F32, LD, 0.5f, c2, ct, LD, &o);
      EXPECT(s1 == AMP_OK && s2 == AMP_OK, "%s: %s", level_name(lv[li]), amp_last_error());
      EXPECT(memcmp(c1, c2, (size_t)SC * amp_dtype_size(ct)) == 0, "%s: A %s x B %s, %d x %d x %d, trans %d: the mixed product "
             "differs from the widened one", level_name(lv[li]), tname(types[ia]), tname(types[ib]), m, n, k, tr);
      cases++;
    }
  set_level(LV_CPU);
  printf("  %d mixed-type products, levels run:", cases);
  for (li = 0; li < nl; li++) printf(" %s;", level_name(lv[li]));
  printf("\n");
}

static void gemm_ex_with_zero_options_is_gemm(void) {
  mat A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, 9, 11, AMP_BF16, 0), B = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, 11, 13, AMP_BF16, 0);
  float C1[9 * 13], C2[9 * 13];
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 9, 13, 11, 1, A.p, AMP_BF16, A.ld, B.p, AMP_BF16,
                  B.ld, 0, C1, AMP_F32, 13) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 9, 13, 11, 1, A.p, AMP_BF16, A.ld, B.p, AMP_BF16,
                     B.ld, 0, C2, AMP_F32, 13, &o) == AMP_OK, "%s", amp_last_error());
  EXPECT(!memcmp(C1, C2, sizeof C1), "amp_gemm_ex with zero opts differs from amp_gemm (C[0] %g vs %g)", C1[0], C2[0]);
  free(A.p); free(B.p);
}

/* Each bad argument: AMP_ERR_ARG, a message naming it, and C untouched. */
static void gemm_rejects_bad_arguments_and_leaves_c_unchanged(void) {
  float A[12], B[12], C[12], C0[12], bias[4] = {0};
  int i;
  amp_gemm_opts o;
  for (i = 0; i < 12; i++) { A[i] = (float)i; B[i] = 1.0f; C[i] = C0[i] = -1.0f; }
#define BAD(call, word) do { amp_status st_ = (call); \
    EXPECT(st_ == AMP_ERR_ARG, "%s: expected AMP_ERR_ARG, got %s", #call, amp_status_string(st_)); \
    EXPECT(strstr(amp_last_error(), word) != NULL, "%s: message \"%s\" does not name %s", #call, amp_last_error(), word); \
    EXPECT(!memcmp(C, C0, sizeof C), "%s: C was changed", #call); } while (0)
  /* row-major 3x4 = (3x2)(2x4): lda >= 2, ldb >= 4, ldc >= 4 */
  BAD(amp_gemm(NULL, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "d is NULL");
  BAD(amp_gemm(amp_cpu(), (amp_layout)2, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "layout 2");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, (amp_trans)5, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "ta 5");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, (amp_trans)-1, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "tb -1");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, -1, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "m -1");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, -4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "n -4");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, -2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "k -2");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, (amp_dtype)7, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "a_type 7");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, (amp_dtype)9, 4, 0, C, AMP_F32, 4), "b_type 9");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, (amp_dtype)3, 4), "c_type 3");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 1, B, AMP_F32, 4, 0, C, AMP_F32, 4), "lda 1");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "lda 2");
  BAD(amp_gemm(amp_cpu(), AMP_COL_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 2, 0, C, AMP_F32, 3), "lda 2");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 3, 0, C, AMP_F32, 4), "ldb 3");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 1, 0, C, AMP_F32, 4), "ldb 1");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 3), "ldc 3");
  BAD(amp_gemm(amp_cpu(), AMP_COL_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 3, B, AMP_F32, 2, 0, C, AMP_F32, 2), "ldc 2");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 0, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 0), "ldc 0");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, NULL, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4), "A is NULL");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, NULL, AMP_F32, 4, 0, C, AMP_F32, 4), "B is NULL");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, NULL, AMP_F32, 4), "C is NULL");
  /* each message names the function called: amp_gemm_ex's own, and amp_gemm's its */
  BAD(amp_gemm_ex(NULL, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4, NULL), "amp_gemm_ex: d is NULL");
  BAD(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 1, B, AMP_F32, 4, 0, C, AMP_F32, 4, NULL), "amp_gemm_ex: lda 1");
  BAD(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, (amp_dtype)7, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4, NULL), "amp_gemm_ex: a_type 7");
  BAD(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 1, B, AMP_F32, 4, 0, C, AMP_F32, 4), "amp_gemm: lda 1");
  memset(&o, 0, sizeof o); o.bias = bias; o.bias_type = (amp_dtype)4;
  BAD(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4, &o), "bias_type 4");
  memset(&o, 0, sizeof o); o.act = (amp_act)3;
  BAD(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4, &o), "act 3");
  memset(&o, 0, sizeof o); o.algo = (amp_gemm_algo)4;
  BAD(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4, &o), "algo 4");
  memset(&o, 0, sizeof o); o.algo = AMP_GEMM_WMMA;
  BAD(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4, &o), "AMP_GEMM_WMMA");
  memset(&o, 0, sizeof o); o.algo = AMP_GEMM_SIMPLE;
  BAD(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 4, 2, 1, A, AMP_F32, 2, B, AMP_F32, 4, 0, C, AMP_F32, 4, &o), "CUDA");
#undef BAD
}

/* Every kernel leaves the upper halves of the vector registers clean (vzeroupper) when amp_gemm
   returns: with them dirty, the trainer's own SSE code (libm's tanhf in a GELU) ran at half speed
   on this project's AMD CPU after each bf16 product. XGETBV with ECX = 1 reads which state is in
   use (bit 2: the upper 128 bits of YMM0-15, bit 6: the upper 256 bits of ZMM0-15; on an AMX CPU
   bits 17-18, the tile configuration and data, which the AMX kernel releases before it returns:
   held, they cost every context switch 8 KiB more to save); it is skipped where the CPU lacks it,
   and under valgrind, which does not model it. */
static void gemm_leaves_the_upper_vector_state_clean(void) {
#if defined(AMP__GEMM_FAST)
  unsigned r[4];
  const char *pre = getenv("LD_PRELOAD");
  int lv[6], nl = levels(lv), l, ii, ci, s, checked = 0;
  static const int shapes[2][3] = {{64, 70, 96}, {130, 40, 50}};   /* B read in place (bf16), B packed */
  if (pre && strstr(pre, "vgpreload")) { printf("  under valgrind: not checked\n"); return; }
  __asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(0xdu), "c"(1u));
  if (!(r[0] & 4u)) { printf("  no XGETBV with ECX = 1 on this CPU: not checked\n"); return; }
  for (l = 0; l < nl; l++)
    for (ii = 0; ii < 3; ii++)
    for (ci = 0; ci < 3; ci++)
      for (s = 0; s < 2; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        amp_dtype in = (amp_dtype)ii, out = (amp_dtype)ci;
        mat A = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, m, k, in, 0), B = mat_make(AMP_ROW_MAJOR, AMP_NO_TRANS, k, n, in, 3);
        char *c = (char *)calloc((size_t)m * n, 4);
        unsigned lo, hi;
        amp_status st;
        set_level(lv[l]);
        __asm__ __volatile__("vzeroupper");
        st = amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, m, n, k, 1.0f, A.p, in, A.ld, B.p, in, B.ld, 0.0f, c, out, n);
        __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1u));
        (void)hi;
        set_level(LV_CPU);
        EXPECT(st == AMP_OK, "%s", amp_last_error());
        EXPECT(!(lo & 0x60044u), "%s, %s in, %s C, %dx%dx%d: amp_gemm returned with the upper vector or tile state in use (XINUSE 0x%x)",
               level_name(lv[l]), amp__dtype_name(in), amp__dtype_name(out), m, n, k, lo);
        checked++;
        free(A.p); free(B.p); free(c);
      }
  printf("  %d products checked\n", checked);
#endif
}

int main(void) {
  RUN(gemm_matches_double_product_for_every_layout_transpose_and_type);
  RUN(gemm_error_stays_within_bound_for_long_k);
  RUN(gemm_reference_equals_plain_loop_bit_for_bit);
  RUN(gemm_fast_default_is_an_fma_chain_in_order_bit_for_bit);
  RUN(gemm_fast_epilogue_is_the_scalar_epilogue_bit_for_bit);
  RUN(gemm_plain_tiles_keep_the_epilogue_bits_under_denormals_are_zero);
  RUN(gemm_every_cpu_kernel_stays_within_the_documented_bound);
  RUN(gemm_narrow_c_is_the_f32_c_rounded_once);
  RUN(gemm_a_read_in_place_equals_packed_a_bit_for_bit);
  RUN(gemm_bf16_with_b_read_in_place_equals_packed_b_bit_for_bit);
  RUN(gemm_amx_kernel_is_the_default_and_stays_within_the_bound_across_its_blocks);
  RUN(gemm_bf16_c_of_subnormal_nan_and_inf_results_is_amp_convert_of_f32_c);
  RUN(gemm_bf16_subnormal_inputs_give_zero_or_the_exact_product);
  RUN(gemm_bf16_kernel_is_chosen_once_and_is_the_one_that_runs);
  RUN(gemm_bfdot_and_bfmmla_kernels_are_the_arm_bfdotadd_chain_bit_for_bit);
  RUN(gemm_beta_zero_does_not_read_c);
  RUN(gemm_k_zero_sets_c_to_beta_c_without_reading_a_or_b);
  RUN(gemm_alpha_zero_does_not_read_a_or_b);
  RUN(gemm_with_m_or_n_zero_changes_nothing);
  RUN(gemm_epilogue_adds_bias_then_activation);
  RUN(gemm_bias_is_added_to_the_rounded_product);
  RUN(gemm_relu_epilogue_turns_nan_into_zero_like_cublaslt);
  RUN(gemm_gelu_is_the_tanh_approximation);
  RUN(tanh_is_tanh_rounded_once);
  RUN(gelu_line_is_gelu_element_by_element);
  RUN(mixed_input_types_equal_the_product_of_the_widened_matrices);
  RUN(gemm_ex_with_zero_options_is_gemm);
  RUN(gemm_rejects_bad_arguments_and_leaves_c_unchanged);
  RUN(gemm_leaves_the_upper_vector_state_clean);
  TEST_END();
}
