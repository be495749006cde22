/* amp_gemm_ex with fp8 inputs and outputs on the CPU (the manual's "fp8 inputs and outputs"):
   inputs made by amp_quantize / amp_quantize_blocks, the reference against a plain loop written
   here (its own fp8 decoder and scale indexing) bit for bit, the fast kernels within the stated
   bound of the exact (double) value, an fp8 C with c_scale and c_amax, the epilogue, and the
   refusals, which change nothing. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>

static uint32_t rng = 88172645u;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }
/* uniform in [-1, 1), with a rare outlier (x 100) so that the blocks' scales differ */
static float urand(void) {
  float v = (float)((int)(rnd() >> 8) - 8388608) / 8388608.0f;
  return rnd() % 97 == 0 ? v * 100.0f : v;
}
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* fp8 code -> value, written from the formats' definitions (not amp.h's decoder) */
static float dec8(uint8_t c, amp_dtype t) {
  int neg = c >> 7;
  double v;
  if (t == AMP_E4M3) {
    int e = (c >> 3) & 15, mm = c & 7;
    if ((c & 0x7f) == 0x7f) return NAN;
    v = e ? ldexp(8 + mm, e - 10) : ldexp(mm, -9);
  } else {
    int e = (c >> 2) & 31, mm = c & 3;
    if (e == 31) return mm ? NAN : (neg ? -INFINITY : INFINITY);
    v = e ? ldexp(4 + mm, e - 17) : ldexp(mm, -16);
  }
  return (float)(neg ? -v : v);
}
static int is8(amp_dtype t) { return t == AMP_E4M3 || t == AMP_E5M2; }
static const char *tn(amp_dtype t) {
  return t == AMP_F32 ? "f32" : t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : t == AMP_E4M3 ? "e4m3" : "e5m2";
}
static const char *kn(int kind) { return kind < 0 ? "per-tensor" : kind == 0 ? "MX_RCEIL" : kind == 1 ? "MX_FLOOR" : kind == 2 ? "1x128" : "128x128"; }

/* One operand as the caller stores it: a row-major rows x cols matrix S (ld elements a row;
   the padding holds NaN codes), op(X)(r, c) = S[kcol ? (r, c) : (c, r)] for A (r = i, c = p), and
   S[kcol ? (c, r) : (r, c)] for B (r = p, c = j), with its per-tensor scale_inv or its block
   scales. */
typedef struct {
  amp_dtype t;
  int rows, cols, ld, kcol, kind;   /* kind -1: per-tensor */
  void *q;
  float scale_inv;
  void *scales;
} opnd;

static float s_at(const opnd *x, int r, int c) {   /* element (r, c) of S as f32 */
  size_t at = (size_t)r * (size_t)x->ld + (size_t)c;
  if (is8(x->t)) return dec8(((const uint8_t *)x->q)[at], x->t);
  return amp__load(x->q, x->t, at);
}
/* the scale of S's block holding (r, c), from the packed layout the manual states */
static float s_scale(const opnd *x, int r, int c) {
  if (x->kind < 0) return 1.0f;
  if (x->kind <= 1) return ldexpf(1.0f, (int)((const uint8_t *)x->scales)[(size_t)r * ((x->cols + 31) / 32) + c / 32] - 127);
  if (x->kind == 3) r /= 128;
  return ((const float *)x->scales)[(size_t)r * ((x->cols + 127) / 128) + c / 128];
}
static float a_get(const opnd *a, int i, int p) { return a->kcol ? s_at(a, i, p) : s_at(a, p, i); }
static float b_get(const opnd *b, int p, int j) { return b->kcol ? s_at(b, j, p) : s_at(b, p, j); }
static float a_sc(const opnd *a, int i, int p) { return a->kcol ? s_scale(a, i, p) : s_scale(a, p, i); }
static float b_sc(const opnd *b, int p, int j) { return b->kcol ? s_scale(b, j, p) : s_scale(b, p, j); }

/* Makes S from random f32 values: fp8 by amp_quantize (per-tensor: scale from the amax, TE's
   current scaling 448 / amax) or amp_quantize_blocks; other types by amp_convert. */
static opnd op_make(amp_dtype t, int rows, int cols, int kcol, int kind, int pad) {
  opnd x;
  int ld = cols + pad, r, c;
  float *f = (float *)malloc(sizeof(float) * (size_t)rows * ld + 4);
  x.t = t; x.rows = rows; x.cols = cols; x.ld = ld; x.kcol = kcol; x.kind = kind; x.scales = NULL;
  x.scale_inv = 1.0f;
  x.q = malloc(amp_dtype_size(t) * (size_t)rows * ld + 4);
  for (r = 0; r < rows; r++)
    for (c = 0; c < ld; c++) f[(size_t)r * ld + c] = c < cols ? urand() : NAN;
  if (!is8(t)) {
    amp_convert(x.q, t, f, AMP_F32, (size_t)rows * ld);
  } else if (kind < 0) {
    float amax = 0, scale;
    memset(x.q, 0x7f, (size_t)rows * ld);
    for (r = 0; r < rows; r++) for (c = 0; c < cols; c++) amax = fabsf(f[(size_t)r * ld + c]) > amax ? fabsf(f[(size_t)r * ld + c]) : amax;
    scale = (t == AMP_E4M3 ? 448.0f : 57344.0f) / (amax > 0 ? amax : 1.0f);
    x.scale_inv = 1.0f / scale;
    for (r = 0; r < rows; r++) amp_quantize(amp_cpu(), (uint8_t *)x.q + (size_t)r * ld, t, f + (size_t)r * ld, AMP_F32, (size_t)cols, &scale, NULL);
  } else {
    int bh = kind == 3 ? 128 : 1, bw = kind <= 1 ? 32 : 128;
    size_t ns = (size_t)((rows + bh - 1) / bh) * ((cols + bw - 1) / bw);
    x.scales = malloc(ns * (kind <= 1 ? 1 : 4) + 4);
    memset(x.q, 0x7f, (size_t)rows * ld);
    EXPECT(amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, t, rows, cols, f, AMP_F32, ld, x.q, ld, x.scales) == AMP_OK,
           "%s", amp_last_error());
  }
  free(f);
  return x;
}
static void op_free(opnd *x) { free(x->q); free(x->scales); }

typedef struct {
  amp_layout L;
  amp_trans ta, tb;
  int m, n, k;
  float alpha, beta;
  amp_dtype ct;
  int bias, act, pts;   /* pts: pass a_scale_inv / b_scale_inv */
} job;

/* The plain loop: the manual's definition, one rounding at a time through volatiles. */
static float plain(const job *J, const opnd *A, const opnd *B, int i, int j, float c, const float *bias) {
  volatile float acc = 0.0f, part, prod, w, x, s, t, bc;
  int p, p0, wdt = A->kind >= 0 ? (A->kind <= 1 ? 32 : 128) : B->kind >= 0 ? (B->kind <= 1 ? 32 : 128) : 0;
  if (J->k == 0 || J->alpha == 0.0f) acc = 0.0f;
  else if (!wdt) {
    for (p = 0; p < J->k; p++) { prod = a_get(A, i, p) * b_get(B, p, j); acc = acc + prod; }
  } else {
    for (p0 = 0; p0 < J->k; p0 += wdt) {
      part = 0.0f;
      for (p = p0; p < J->k && p < p0 + wdt; p++) { prod = a_get(A, i, p) * b_get(B, p, j); part = part + prod; }
      w = a_sc(A, i, p0) * b_sc(B, p0, j);
      x = w * part;
      acc = acc + x;
    }
  }
  s = J->alpha;
  if (J->pts) { s = s * A->scale_inv; s = s * B->scale_inv; }
  t = s * acc;
  if (J->beta != 0.0f) { bc = J->beta * c; t = t + bc; }
  if (bias) t = t + bias[j];
  if (J->act == AMP_ACT_RELU) t = t > 0.0f ? t : 0.0f;
  return t;
}
/* The exact value (double) and the manual's bound for the fast kernels before the epilogue:
   per-tensor |s| (k + 2) 2^-24 sum |a b|; blocks (k + nb + 4) 2^-24 sum_blocks |w| sum |a b|; then
   the rounding of s * acc. */
static double exact(const job *J, const opnd *A, const opnd *B, int i, int j, double *bound) {
  double sum = 0, sabs = 0, s = J->alpha;
  int p, p0, wdt = A->kind >= 0 ? (A->kind <= 1 ? 32 : 128) : B->kind >= 0 ? (B->kind <= 1 ? 32 : 128) : J->k + 1, nb = 0;
  if (J->pts) s = s * (double)A->scale_inv * (double)B->scale_inv;
  for (p0 = 0; p0 < J->k; p0 += wdt, nb++) {
    double part = 0, pabs = 0, w = (double)a_sc(A, i, p0) * (double)b_sc(B, p0, j);
    for (p = p0; p < J->k && p < p0 + wdt; p++) {
      double v = (double)a_get(A, i, p) * (double)b_get(B, p, j);
      part += v; pabs += fabs(v);
    }
    sum += w * part; sabs += fabs(w) * pabs;
  }
  *bound = fabs(s) * (J->k + nb + 4) * 0x1p-24 * sabs * 1.01 + 3 * 0x1p-24 * fabs(s * sum) + 0x1p-140;
  return s * sum;
}

/* Runs one product with both algos and checks: REFERENCE == plain loop bit for bit (C, c_amax),
   AUTO (f32 C, no epilogue) within the bound. Returns the number of bad elements. */
static int run_job(const job *J, amp_dtype at, amp_dtype bt, int akind, int bkind) {
  int row = J->L == AMP_ROW_MAJOR, m = J->m, n = J->n, k = J->k, i, j, bad = 0, algo;
  int akcol = row == (J->ta == AMP_NO_TRANS), bkcol = row == (J->tb == AMP_TRANS);
  opnd A = op_make(at, akcol ? m : k, akcol ? k : m, akcol, akind, 3);
  opnd B = op_make(bt, bkcol ? n : k, bkcol ? k : n, bkcol, bkind, 5);
  int ldc = (row ? n : m) + 2;
  size_t cn = (size_t)ldc * (size_t)(row ? m : n), csz = amp_dtype_size(J->ct);
  void *C = malloc(cn * csz + 4), *C0 = malloc(cn * csz + 4);
  float *bias = J->bias ? (float *)malloc(sizeof(float) * (size_t)n) : NULL, cscale = 0.75f, amax = -1.0f;
  uint32_t want_amax = 0;
  amp_gemm_opts o;
  for (i = 0; (size_t)i < cn; i++) amp__store(C0, J->ct, (size_t)i, is8(J->ct) ? 3.0f : urand());
  for (j = 0; bias && j < n; j++) bias[j] = urand();
  /* algo 0: the reference with c_amax (through the f32 buffer), 1: without (an f16/bf16/f32 C:
     straight into C), 2: AMP_GEMM_AUTO */
  for (algo = 0; algo < 3 && !bad; algo++) {
    memset(&o, 0, sizeof o);
    o.algo = algo == 2 ? AMP_GEMM_AUTO : AMP_GEMM_REFERENCE;
    o.bias = bias; o.act = (amp_act)J->act;
    if (J->pts) { o.a_scale_inv = &A.scale_inv; o.b_scale_inv = &B.scale_inv; }
    if (akind >= 0) { o.a_blocks = (amp_block_scaling)akind; o.a_scales = A.scales; }
    if (bkind >= 0) { o.b_blocks = (amp_block_scaling)bkind; o.b_scales = B.scales; }
    if (is8(J->ct)) o.c_scale = &cscale;
    if (algo == 0 || is8(J->ct)) o.c_amax = &amax;
    amax = -1.0f;
    memcpy(C, C0, cn * csz);
    {
      amp_status st = amp_gemm_ex(amp_cpu(), J->L, J->ta, J->tb, m, n, k, J->alpha, A.q, at, A.ld, B.q, bt, B.ld, J->beta,
                                  C, J->ct, ldc, &o);
      EXPECT(st == AMP_OK, "%s x %s (%s, %s) -> %s: %s", tn(at), tn(bt), kn(akind), kn(bkind), tn(J->ct), amp_last_error());
      if (st != AMP_OK) { bad = 1; break; }
    }
    want_amax = 0;
    for (i = 0; i < m && bad < 3; i++)
      for (j = 0; j < n && bad < 3; j++) {
        size_t at2 = row ? (size_t)i * ldc + j : (size_t)j * ldc + i;
        float c = amp__load(C0, J->ct, at2), t = plain(J, &A, &B, i, j, c, bias);
        float got = amp__load(C, J->ct, at2);
        if (algo < 2) {
          float want;
          if (is8(J->ct)) {   /* the saturating cast itself is test_fp8's */
            volatile float y = t * cscale;
            want = dec8(J->ct == AMP_E4M3 ? amp_f32_to_e4m3(y, 1) : amp_f32_to_e5m2(y, 1), J->ct);
          } else {
            float tmp = 0.0f;
            amp__store(&tmp, J->ct, 0, t);
            want = amp__load(&tmp, J->ct, 0);
          }
          if ((bits(t) & 0x7fffffffu) > want_amax) want_amax = bits(t) & 0x7fffffffu;
          if (bits(got) != bits(want)) {
            bad++;
            EXPECT(0, "%s %c%c m %d n %d k %d %s x %s (%s, %s) -> %s: C(%d,%d) reference %.9g (0x%08x), plain loop %.9g (0x%08x)",
                   row ? "row" : "col", J->ta ? 'T' : 'N', J->tb ? 'T' : 'N', m, n, k, tn(at), tn(bt), kn(akind),
                   kn(bkind), tn(J->ct), i, j, got, bits(got), want, bits(want));
          }
        } else if (J->ct == AMP_F32 && !bias && J->act == 0 && J->beta == 0.0f) {
          double bound, want = exact(J, &A, &B, i, j, &bound);
          if (!(fabs((double)got - want) <= bound)) {
            bad++;
            EXPECT(0, "%s %c%c m %d n %d k %d %s x %s (%s, %s): C(%d,%d) fast %.9g, exact %.9g, bound %.3g",
                   row ? "row" : "col", J->ta ? 'T' : 'N', J->tb ? 'T' : 'N', m, n, k, tn(at), tn(bt), kn(akind),
                   kn(bkind), i, j, got, want, bound);
          }
        }
      }
    if (algo < 2 && o.c_amax && bad == 0 && bits(amax) != want_amax) {
      bad++;
      EXPECT(0, "c_amax 0x%08x, the plain loop's 0x%08x (m %d n %d k %d)", bits(amax), want_amax, m, n, k);
    }
    /* C's padding untouched */
    for (i = 0; (size_t)i < cn && bad == 0; i++) {
      if (i % ldc >= (row ? n : m)) {   /* past a stored line's length */
        if (memcmp((char *)C + (size_t)i * csz, (char *)C0 + (size_t)i * csz, csz)) {
          bad++; EXPECT(0, "C's padding at %d changed", i);
        }
      }
    }
  }
  op_free(&A); op_free(&B); free(C); free(C0); free(bias);
  return bad;
}

static const int SIZES[][3] = {{1, 1, 1}, {5, 7, 3}, {13, 17, 130}, {3, 140, 200}, {33, 29, 257}, {17, 20, 600}};
#define NSIZES (int)(sizeof SIZES / sizeof SIZES[0])

/* Per-tensor fp8: every layout and transpose, E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3, an fp8
   operand with an f32 / bf16 other, odd sizes, the scale_invs given and not. */
static void per_tensor_every_layout_reference_bits_and_fast_bound(void) {
  static const amp_dtype PAIRS[][2] = {{AMP_E4M3, AMP_E4M3}, {AMP_E4M3, AMP_E5M2}, {AMP_E5M2, AMP_E4M3},
                                       {AMP_E4M3, AMP_BF16}, {AMP_F32, AMP_E5M2}, {AMP_F16, AMP_E4M3}};
  int L, ta, tb, s, p, bad = 0;
  for (L = 0; L < 2; L++)
    for (ta = 0; ta < 2; ta++)
      for (tb = 0; tb < 2; tb++)
        for (s = 0; s < NSIZES; s++)
          for (p = 0; p < 6; p++) {
            job J;
            if (t_quick() && (s == NSIZES - 1 || (p + s) % 3)) continue;
            memset(&J, 0, sizeof J);
            J.L = (amp_layout)L; J.ta = (amp_trans)ta; J.tb = (amp_trans)tb;
            J.m = SIZES[s][0]; J.n = SIZES[s][1]; J.k = SIZES[s][2];
            J.alpha = p == 3 ? -0.5f : 1.0f; J.ct = AMP_F32; J.pts = p != 2;
            bad += run_job(&J, PAIRS[p][0], PAIRS[p][1], -1, -1);
          }
  (void)bad;
}

/* Block scales: 1x128 A (k along its rows) with 128x128 B in every orientation; 128x128 A with k
   down its columns; MX with MX; one operand block-scaled with a per-tensor other. */
static void block_scaled_reference_bits_and_fast_bound(void) {
  int L, ta, tb, s, v, bad = 0, l;
  for (l = t_simd_levels() - 1; l >= 0; l--) {   /* the blocks' sums are added by each level's loop */
  t_simd_level(l);
  for (L = 0; L < 2; L++)
    for (ta = 0; ta < 2; ta++)
      for (tb = 0; tb < 2; tb++)
        for (s = 0; s < NSIZES; s++)
          for (v = 0; v < 5; v++) {
            int row = L == 0, akcol = row == (ta == 0), bkcol = row == (tb == 1);
            int ak = v == 0 ? 2 : v == 1 ? 3 : v == 2 ? 0 : v == 3 ? 1 : -1;
            int bk = v == 0 ? 3 : v == 1 ? 3 : v == 2 ? 1 : v == 3 ? -1 : 3;
            job J;
            if ((ak >= 0 && ak != 3 && !akcol) || (bk >= 0 && bk != 3 && !bkcol)) continue;   /* refused (tested below) */
            if (t_quick() && (s == NSIZES - 1 || (v + s) % 3)) continue;
            if (l < t_simd_levels() - 1 && (s == NSIZES - 1 || (L + ta + tb + v) % 2)) continue;   /* the narrower levels: a half */
            memset(&J, 0, sizeof J);
            J.L = (amp_layout)L; J.ta = (amp_trans)ta; J.tb = (amp_trans)tb;
            J.m = SIZES[s][0]; J.n = SIZES[s][1]; J.k = SIZES[s][2];
            J.alpha = v == 4 ? 2.0f : 1.0f; J.pts = v >= 3;
            J.ct = v == 1 ? AMP_BF16 : v == 3 ? AMP_F16 : AMP_F32;   /* each C row cast as it is stored */
            bad += run_job(&J, AMP_E4M3, v == 2 ? AMP_E5M2 : AMP_E4M3, ak, bk);
          }
  }
  t_simd_level(2);
  (void)bad;
}

/* The DeepSeek-V3 / TE layer forward y = x W^T + b: fp8 C (E4M3 and E5M2) with c_scale and c_amax,
   bias and ReLU; bf16 C with beta; f16 C with c_amax. */
static void fp8_c_amax_and_epilogue(void) {
  int s, v;
  for (s = 0; s < NSIZES; s++)
    for (v = 0; v < 6; v++) {
      job J;
      if (t_quick() && s == NSIZES - 1) continue;
      memset(&J, 0, sizeof J);
      J.L = AMP_ROW_MAJOR; J.ta = AMP_NO_TRANS; J.tb = AMP_TRANS;
      J.m = SIZES[s][0]; J.n = SIZES[s][1]; J.k = SIZES[s][2];
      J.alpha = 1.0f; J.ct = v == 0 || v == 3 ? AMP_E4M3 : v == 1 ? AMP_E5M2 : v == 2 ? AMP_BF16 : AMP_F16;
      J.bias = v != 1; J.act = v == 0 || v == 4 ? AMP_ACT_RELU : AMP_ACT_NONE; J.pts = v < 2 || v == 5;
      J.beta = v == 2 || v == 5 ? 0.5f : 0.0f;
      run_job(&J, AMP_E4M3, AMP_E4M3, v == 3 || v == 4 ? 2 : -1, v == 3 || v == 4 ? 3 : -1);
    }
}

/* alpha 0 and k 0: C = beta C (+ bias), A, B and the scales not read; m 0: c_amax 0. */
static void degenerate_sizes(void) {
  float c[6] = {1, 2, 3, 4, 5, 6}, amax = -1, sc = 2.0f, bias[3] = {0.5f, -8.0f, 1.0f};
  amp_fp8 c8[6], a[10] = {0x40}, b[15] = {0x40};
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.c_amax = &amax;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 2, 3, 0, 1.0f, NULL, AMP_E4M3, 1, NULL, AMP_E4M3,
                     1, 0.5f, c, AMP_F32, 3, &o) == AMP_OK, "%s", amp_last_error());
  EXPECT(c[0] == 0.5f && c[5] == 3.0f && amax == 3.0f, "k 0: c %g %g amax %g", c[0], c[5], amax);
  amax = -1;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 0, 3, 4, 1.0f, NULL, AMP_E4M3, 4, NULL, AMP_E4M3,
                     4, 0.0f, NULL, AMP_F32, 3, &o) == AMP_OK && amax == 0.0f, "m 0: amax %g (%s)", amax, amp_last_error());
  o.c_scale = &sc; o.bias = bias;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 2, 3, 5, 0.0f, a, AMP_E4M3, 5, b, AMP_E4M3,
                     5, 0.0f, c8, AMP_E4M3, 3, &o) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_e4m3_to_f32(c8[0]) == 1.0f && amp_e4m3_to_f32(c8[1]) == -16.0f && amax == 8.0f, "alpha 0: %g %g amax %g",
         amp_e4m3_to_f32(c8[0]), amp_e4m3_to_f32(c8[1]), amax);
  {   /* alpha 0 or k 0 with beta * c = -0: the sum counts as +0 (the manual), so C holds +0 on the
         per-tensor path alone, with c_amax, and with block scales, as the CUDA kernels store it */
    static const float scales[2] = {1.0f, 1.0f};
    int path, kk;
    for (kk = 0; kk <= 5; kk += 5)
      for (path = 0; path < 3; path++) {
        float cz[6] = {0.0f, 0.0f, 0.0f, -0.0f, -0.0f, -0.0f}, am = 0.0f;
        amp_gemm_opts oz;
        int i, bad = 0;
        memset(&oz, 0, sizeof oz);
        if (path == 1) oz.c_amax = &am;
        if (path == 2) { oz.a_scales = scales; oz.a_blocks = AMP_BLOCK_1x128; oz.b_scales = scales; oz.b_blocks = AMP_BLOCK_1x128; }
        EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 2, 3, kk, kk ? 0.0f : 1.0f, a, AMP_E4M3, 5, b,
                           AMP_E4M3, 5, kk ? -1.0f : 1.0f, cz, AMP_F32, 3, &oz) == AMP_OK, "%s", amp_last_error());
        for (i = 0; i < 6; i++) bad += bits(cz[i]) != 0u;
        EXPECT(bad == 0, "k %d, %s: %d of 6 results are not +0 (the first %08x)", kk,
               path == 0 ? "per-tensor" : path == 1 ? "with c_amax" : "block-scaled", bad, bits(cz[0]));
      }
  }
}

/* A NaN code in A: that result is NaN, and c_amax is NaN whatever the larger finite results
   (the bits' max, as amp_quantize's amax); the fp8 C holds the NaN code. */
static void c_amax_nan_wins(void) {
  amp_fp8 a[4] = {0x7f, 0x38, 0x7e, 0x38}, b[2] = {0x38, 0x38}, c8[8];   /* NaN, 1, 448, 1; B: 1, 1 */
  float amax = 0, cs = 0.5f, c[4];
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.c_amax = &amax; o.c_scale = &cs;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 4, 2, 1, 1.0f, a, AMP_E4M3, 1, b, AMP_E4M3, 2,
                     0.0f, c8, AMP_E4M3, 2, &o) == AMP_OK, "%s", amp_last_error());
  EXPECT((bits(amax) & 0x7fffffffu) > 0x7f800000u, "c_amax 0x%08x is not NaN", bits(amax));
  EXPECT((c8[0] & 0x7f) == 0x7f && (c8[1] & 0x7f) == 0x7f && c8[2] == 0x30 && c8[3] == 0x30 && c8[4] == 0x76 &&
         c8[5] == 0x76 && c8[6] == 0x30, "fp8 C %02x %02x %02x %02x %02x", c8[0], c8[1], c8[2], c8[3], c8[4]);
  o.c_scale = NULL; amax = 0;
  EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 1, 1.0f, a + 2, AMP_E4M3, 1, b, AMP_E4M3,
                     2, 0.0f, c, AMP_F32, 2, &o) == AMP_OK && amax == 448.0f && c[0] == 448.0f && c[3] == 1.0f,
         "amax %g c %g %g", amax, c[0], c[3]);
}

/* What a CUDA device refuses of the fp8 product, before it reaches the device: 1 x 128 blocks
   across k (AMP_ERR_UNSUPPORTED, as on the CPU), AMP_GEMM_WMMA with fp8 inputs and an fp8 C
   without c_scale (AMP_ERR_ARG), E5M2 x E5M2 (AMP_ERR_UNSUPPORTED); each message naming
   amp_gemm_ex and the bad value, C untouched each time. The device is a record with is_cuda set (this test includes the
   implementation); nothing of it is used past the checks, so a case the checks let through would
   crash here rather than pass. */
static void cuda_device_refuses_what_it_lacks(void) {
  amp_device fake;
  amp_fp8 a[4] = {0x38, 0x38, 0x38, 0x38};
  float c[4] = {5, 5, 5, 5}, sc[1] = {1.0f};
  amp_gemm_opts o;
  int r;
  memset(&fake, 0, sizeof fake);
  fake.is_cuda = 1;
  for (r = 0; r < 5; r++) {
    amp_status st, want = r == 2 || r == 3 ? AMP_ERR_ARG : AMP_ERR_UNSUPPORTED;
    const char *say[] = {"opts->a_blocks is 1 x 128", "opts->b_blocks is 1 x 32", "AMP_GEMM_WMMA", "c_scale is NULL",
                         "AMP_E5M2"};
    amp_dtype at = r == 4 ? AMP_E5M2 : AMP_E4M3, ct = r == 3 ? AMP_E4M3 : AMP_F32;
    memset(&o, 0, sizeof o);
    o.a_blocks = AMP_BLOCK_1x128; o.b_blocks = AMP_BLOCK_MX_RCEIL;
    if (r == 0) o.a_scales = sc;   /* A row-major with ta AMP_TRANS: k runs down A's stored columns */
    if (r == 1) o.b_scales = sc;   /* B row-major with tb AMP_NO_TRANS: the same */
    if (r == 2) o.algo = AMP_GEMM_WMMA;
    st = amp_gemm_ex(&fake, AMP_ROW_MAJOR, r == 0 ? AMP_TRANS : AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, a, at, 2, a,
                     at, 2, 0.0f, c, ct, 2, &o);
    EXPECT(st == want && strstr(amp_last_error(), "amp_gemm_ex") && strstr(amp_last_error(), say[r]),
           "case %d: %s (%s)", r, amp_status_string(st), amp_last_error());
    EXPECT(c[0] == 5 && c[3] == 5, "case %d changed C", r);
  }
}

/* Every fp8 code through the fast kernels' packing (AVX-512: the vector fp8 loads), in every
   layout: A (256 x 16) holds code i at (i, i % 16) and zeros, B is the 16 x 16 identity, so every
   product and sum is exact and the fast result must be the reference's bits (both NaN where a NaN
   or an inf code meets a 0). */
static void every_code_through_the_fast_packing(void) {
  int f, L, ta, tb, i, p, bad = 0;
  for (f = 0; f < 2; f++)
    for (L = 0; L < 2; L++)
      for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++) {
          amp_dtype t = f ? AMP_E5M2 : AMP_E4M3, bt = f ? AMP_E4M3 : AMP_E5M2;   /* never E5M2 x E5M2 */
          int row = L == 0, lda = (row == (ta == 0)) ? 16 : 256, ldb = 16;
          amp_fp8 a[256 * 16], b[256];
          float c0[256 * 16], c1[256 * 16];
          amp_gemm_opts o;
          for (i = 0; i < 256; i++)
            for (p = 0; p < 16; p++) {
              amp_fp8 v = (amp_fp8)(p == i % 16 ? i : 0);
              if (row == (ta == 0)) a[i * 16 + p] = v; else a[p * 256 + i] = v;   /* (i, p) stored at row i, else column */
            }
          for (i = 0; i < 256; i++) b[i] = (amp_fp8)(i / 16 == i % 16 ? (f ? 0x38 : 0x3c) : 0);   /* 1.0 */
          memset(&o, 0, sizeof o);
          o.algo = AMP_GEMM_REFERENCE;
          EXPECT(amp_gemm_ex(amp_cpu(), (amp_layout)L, (amp_trans)ta, (amp_trans)tb, 256, 16, 16, 1.0f, a, t, lda, b, bt, ldb,
                             0.0f, c0, AMP_F32, row ? 16 : 256, &o) == AMP_OK, "%s", amp_last_error());
          o.algo = AMP_GEMM_AUTO;
          EXPECT(amp_gemm_ex(amp_cpu(), (amp_layout)L, (amp_trans)ta, (amp_trans)tb, 256, 16, 16, 1.0f, a, t, lda, b, bt, ldb,
                             0.0f, c1, AMP_F32, row ? 16 : 256, &o) == AMP_OK, "%s", amp_last_error());
          for (i = 0; i < 256 * 16 && bad < 4; i++)
            if (bits(c0[i]) != bits(c1[i]) && !((bits(c0[i]) & 0x7fffffffu) > 0x7f800000u && (bits(c1[i]) & 0x7fffffffu) > 0x7f800000u)) {
              bad++;
              EXPECT(0, "%s %s %c%c: C[%d] fast 0x%08x, reference 0x%08x", tn(t), row ? "row" : "col", ta ? 'T' : 'N',
                     tb ? 'T' : 'N', i, bits(c1[i]), bits(c0[i]));
            }
        }
}

/* Each refusal: its status, a message naming amp_gemm_ex and the argument, C and c_amax untouched. */
static void refusals_change_nothing(void) {
  amp_fp8 a[256], b[256];
  float c[64], c0[64], amax = 7.0f, sc = 1.0f, fs[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  amp_fp8 c8[64];
  int i, r;
  for (i = 0; i < 256; i++) { a[i] = (amp_fp8)(i & 0x3f); b[i] = (amp_fp8)((i * 7) & 0x3f); }
  for (i = 0; i < 64; i++) c0[i] = (float)i;
  for (r = 0; r < 12; r++) {
    amp_gemm_opts o;
    amp_dtype at = AMP_E4M3, bt = AMP_E4M3, ct = AMP_F32;
    amp_layout L = AMP_ROW_MAJOR;
    amp_trans ta = AMP_NO_TRANS, tb = AMP_TRANS;
    float beta = 0.0f;
    amp_status want = AMP_ERR_ARG, st;
    const char *word = "";
    void *C = c;
    memset(&o, 0, sizeof o);
    o.c_amax = &amax;
    switch (r) {
      case 0: at = bt = AMP_E5M2; want = AMP_ERR_UNSUPPORTED; word = "E5M2"; break;
      case 1: ct = AMP_E4M3; C = c8; word = "c_scale"; break;                            /* no c_scale */
      case 2: o.c_scale = &sc; word = "c_scale"; break;                                   /* c_scale, f32 C */
      case 3: ct = AMP_E5M2; C = c8; o.c_scale = &sc; beta = 1.0f; word = "beta"; break;  /* beta, fp8 C */
      case 4: at = AMP_BF16; o.a_scales = fs; o.a_blocks = AMP_BLOCK_1x128; word = "a_scales"; break;
      case 5: o.b_scales = (const char *)fs + 1; o.b_blocks = AMP_BLOCK_128x128; word = "b_scales"; break;   /* misaligned */
      case 6: o.a_scales = fs; o.a_blocks = (amp_block_scaling)9; word = "a_blocks"; break;
      case 7: ta = AMP_TRANS; o.a_scales = fs; o.a_blocks = AMP_BLOCK_1x128; want = AMP_ERR_UNSUPPORTED; word = "a_blocks"; break;
      case 8: L = AMP_COL_MAJOR; o.b_scales = fs; o.b_blocks = AMP_BLOCK_MX_RCEIL; want = AMP_ERR_UNSUPPORTED; word = "b_blocks"; break;
      case 9: o.a_scales = fs; o.a_blocks = AMP_BLOCK_1x128; o.b_scales = fs; o.b_blocks = AMP_BLOCK_MX_FLOOR; word = "b_blocks"; break;
      case 10: o.fp8_fast_accum = 2; word = "fp8_fast_accum 2"; break;
      default: o.fp8_fast_accum = -1; word = "fp8_fast_accum -1"; break;
    }
    memcpy(c, c0, sizeof c);
    memset(c8, 0x11, sizeof c8);
    amax = 7.0f;
    st = amp_gemm_ex(amp_cpu(), L, ta, tb, 8, 8, 16, 1.0f, a, at, 16, b, bt, L == AMP_ROW_MAJOR ? 16 : 8, beta, C, ct, 8, &o);
    EXPECT(st == want, "refusal %d: status %s, want %s (%s)", r, amp_status_string(st), amp_status_string(want), amp_last_error());
    EXPECT(strstr(amp_last_error(), "amp_gemm_ex") && strstr(amp_last_error(), word), "refusal %d: message \"%s\" names %s", r,
           amp_last_error(), word);
    EXPECT(!memcmp(c, c0, sizeof c) && amax == 7.0f, "refusal %d changed C or c_amax", r);
    for (i = 0; i < 64; i++) EXPECT(c8[i] == 0x11, "refusal %d changed the fp8 C", r);
  }
}

/* opts->fp8_fast_accum 1 is accepted on the CPU and changes nothing there: the same bits as 0, from
   the reference and from the fast kernel (the CPU has one exact fp8 path; the flag is cuBLASLt's). */
static void fast_accum_leaves_the_cpu_unchanged(void) {
  enum { M = 7, N = 9, K = 300 };
  static amp_fp8 a[M * K], b[N * K];
  float c0[M * N], c1[M * N], si = 0.25f, amax0 = -1.0f, amax1 = -2.0f;
  int i, g;
  for (i = 0; i < M * K; i++) a[i] = (amp_fp8)((i * 37 + 11) & 0x7e);
  for (i = 0; i < N * K; i++) b[i] = (amp_fp8)(((i * 53 + 5) % 0x78) | ((i & 1) << 7));   /* finite E5M2 */
  for (g = 0; g < 2; g++) {
    amp_gemm_opts o;
    memset(&o, 0, sizeof o);
    o.algo = g ? AMP_GEMM_REFERENCE : AMP_GEMM_AUTO;
    o.a_scale_inv = &si; o.c_amax = &amax0;
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, M, N, K, 1.5f, a, AMP_E4M3, K, b, AMP_E5M2, K,
                       0.0f, c0, AMP_F32, N, &o) == AMP_OK, "%s", amp_last_error());
    o.fp8_fast_accum = 1; o.c_amax = &amax1;
    EXPECT(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, M, N, K, 1.5f, a, AMP_E4M3, K, b, AMP_E5M2, K,
                       0.0f, c1, AMP_F32, N, &o) == AMP_OK, "%s", amp_last_error());
    EXPECT(!memcmp(c0, c1, sizeof c0) && amax0 == amax1 && amax0 > 0.0f, "algo %d: fp8_fast_accum 1 changed the CPU's result", g);
  }
}

/* On x86-64 an fp8 operand beside a bf16 one takes the bf16 kernels (AMX, vdpbf16ps, or bf16
   widened to f32, as the CPU and the calibration choose), the fp8 codes widened to bf16 while
   packed: the product equals that of the two as bf16 matrices by the same kernel, bit for bit, at
   every level (the reference, the FMA kernels, each bf16 choice forced, AMX where the CPU has it),
   both layouts and every transpose, odd shapes, C f32 and bf16 with beta. Other builds (AArch64,
   AMP_NO_SIMD) widen such a pair to f32, as any mixed pair: there the product equals that of the
   two as f32 matrices. */
static void fp8_beside_bf16_is_the_bf16_product(void) {
  enum { LD = 300, SZ = 300 * 300 };
  static const int shapes[3][3] = {{7, 19, 13}, {33, 70, 129}, {64, 96, 256}};
  static float f[SZ];
  static amp_fp8 q[SZ];
  static amp_bf16 qb[SZ], w[SZ];
#ifndef AMP__GEMM_FAST
  static float qf[SZ], wf[SZ];   /* the common type there: f32 */
#endif
  static float c1[SZ], c2[SZ];
  int lvl, sh, tr, side, ci, i, cases = 0;
  for (i = 0; i < SZ; i++) f[i] = (float)((i * 7919 + 13) % 2001 - 1000) / 97.0f;
  amp_convert(w, AMP_BF16, f, AMP_F32, SZ);
  for (lvl = 0; lvl < 5; lvl++) {
#ifdef AMP__GEMM_FAST
    int isa_was = amp__gemm_isa_allowed;
    if (lvl == 2 || lvl == 3) {   /* each bf16 choice forced, AMX off */
      if (!(amp__gemm_isa() & AMP__GEMM_ISA_BF16)) continue;
      amp__gemm_isa_allowed = isa_was & ~AMP__GEMM_ISA_AMX;
      amp__gemm_dpbf16_forced = lvl - 2;
    }
    if (lvl == 4) amp__gemm_isa_allowed = AMP__GEMM_ISA_FMA;
#else
    if (lvl >= 2) break;
#endif
    for (side = 0; side < 2; side++) {
      amp_dtype ft = side ? AMP_E5M2 : AMP_E4M3;
      amp_convert(q, ft, f, AMP_F32, SZ);              /* the codes (saturating) */
      amp_convert(qb, AMP_BF16, q, ft, SZ);            /* the same values as bf16, exactly */
#ifndef AMP__GEMM_FAST
      amp_convert(qf, AMP_F32, q, ft, SZ);
      amp_convert(wf, AMP_F32, w, AMP_BF16, SZ);
#endif
      for (sh = 0; sh < 3; sh++)
        for (tr = 0; tr < 8; tr++)
          for (ci = 0; ci < 2; ci++) {
            int m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2];
            amp_trans ta = tr & 1 ? AMP_TRANS : AMP_NO_TRANS, tb = tr & 2 ? AMP_TRANS : AMP_NO_TRANS;
            amp_layout L = tr & 4 ? AMP_COL_MAJOR : AMP_ROW_MAJOR;
            amp_dtype ct = ci ? AMP_BF16 : AMP_F32;
            float beta = ci ? 0.5f : 0.0f;
            amp_gemm_opts o;
            amp_status s1, s2;
            memset(&o, 0, sizeof o);
            if (lvl == 1) o.algo = AMP_GEMM_REFERENCE;
            for (i = 0; i < SZ; i++) c1[i] = c2[i] = 0.25f;   /* (a bf16 C reads the first half: 0.25 pairs) */
            {   /* side 0: fp8 A, bf16 B; side 1: bf16 A, fp8 B; then the same values in the common type */
#ifdef AMP__GEMM_FAST
              const void *cq = qb, *cw = w;
              const amp_dtype cty = AMP_BF16;
#else
              const void *cq = qf, *cw = wf;
              const amp_dtype cty = AMP_F32;
#endif
              const void *a1 = side ? (const void *)w : (const void *)q, *b1 = side ? (const void *)q : (const void *)w;
              const void *a2 = side ? cw : cq, *b2 = side ? cq : cw;
              s1 = amp_gemm_ex(amp_cpu(), L, ta, tb, m, n, k, 0.75f, a1, side ? AMP_BF16 : ft, LD, b1, side ? ft : AMP_BF16, LD,
                               beta, c1, ct, LD, &o);
              s2 = amp_gemm_ex(amp_cpu(), L, ta, tb, m, n, k, 0.75f, a2, cty, LD, b2, cty, LD, beta, c2, ct, LD, &o);
            }
            EXPECT(s1 == AMP_OK && s2 == AMP_OK, "%s", amp_last_error());
            EXPECT(!memcmp(c1, c2, sizeof c1), "level %d: %s %s x %s, %d x %d x %d, trans %d, C %s: the fp8 product differs "
                   "from the common type's", lvl, L == AMP_ROW_MAJOR ? "row" : "col", side ? "bf16" : tn(ft), side ? tn(ft) : "bf16",
                   m, n, k, tr, tn(ct));
            cases++;
          }
    }
#ifdef AMP__GEMM_FAST
    amp__gemm_isa_allowed = isa_was;
    amp__gemm_dpbf16_forced = -1;
#endif
  }
  EXPECT(cases >= 2 * 2 * 3 * 8 * 2, "only %d products compared", cases);
}

/* The AVX2 + FMA kernel (6 x 16 tiles) on a CPU that has AVX-512 too (the default there is the
   8 x 32 kernel): the same checks, through it. */
static void the_avx2_fma_kernel_too(void) {
#ifdef AMP__GEMM_FAST
  int isa_was = amp__gemm_isa_allowed;
  amp__gemm_isa_allowed = AMP__GEMM_ISA_FMA;
  per_tensor_every_layout_reference_bits_and_fast_bound();
  block_scaled_reference_bits_and_fast_bound();
  amp__gemm_isa_allowed = isa_was;
#endif
}

#ifdef AMP__GEMM_FAST
/* The fast-kernel checks above with the calibration's bf16 choice forced each way (vdpbf16ps, then
   widened to f32). */
static void checks_with_each_bf16_choice(void) {
  int f;
  for (f = 0; f < 2; f++) {
    amp__gemm_dpbf16_forced = f;
    per_tensor_every_layout_reference_bits_and_fast_bound();
    block_scaled_reference_bits_and_fast_bound();
    every_code_through_the_fast_packing();
  }
  amp__gemm_dpbf16_forced = -1;
}
#endif

/* On a CPU with AVX512_BF16 the calibration sends bf16 and fp8 inputs to the vdpbf16ps kernel (fp8
   widened to bf16 while packed) or to the FMA kernel (widened to f32): each forced in turn, the
   same checks through it. */
static void both_kernels_of_the_bf16_choice(void) {
#ifdef AMP__GEMM_FAST
  int isa_was = amp__gemm_isa_allowed;
  if (!(amp__gemm_isa() & AMP__GEMM_ISA_BF16)) return;
  amp__gemm_isa_allowed = isa_was & ~AMP__GEMM_ISA_AMX;   /* (AMX, where the CPU has it, comes before the choice) */
  checks_with_each_bf16_choice();
  amp__gemm_isa_allowed = isa_was;
#endif
}

/* On a CPU with AMX (Intel Xeon from Sapphire Rapids on, Linux) fp8 x fp8 runs on the tile unit,
   both operands widened to bf16 while packed (A by amp__gemm_pack_rows_amx): the kernel is the one
   picked, and the same checks pass through it (the tests above ran it too, as the default; here
   with the vdpbf16ps choice forced each way, which AMX must not depend on). */
static void the_amx_kernel_for_fp8(void) {
#ifdef AMP__GEMM_AMX
  if (!amp__gemm_amx()) return;
  EXPECT(amp__gemm_pick(AMP_E4M3, 0) == &amp__gemm_kernel_amx && amp__gemm_pick(AMP_E5M2, 0) == &amp__gemm_kernel_amx,
         "fp8 inputs on an AMX CPU did not pick the AMX kernel");
  EXPECT(amp__gemm_pick(AMP_E4M3, 1) != &amp__gemm_kernel_amx, "AMP_GEMM_REFERENCE picked the AMX kernel");
  checks_with_each_bf16_choice();
#endif
}

int main(void) {
  RUN(per_tensor_every_layout_reference_bits_and_fast_bound);
  RUN(block_scaled_reference_bits_and_fast_bound);
  RUN(fp8_c_amax_and_epilogue);
  RUN(every_code_through_the_fast_packing);
  RUN(the_avx2_fma_kernel_too);
  RUN(fp8_beside_bf16_is_the_bf16_product);
  RUN(both_kernels_of_the_bf16_choice);
  RUN(the_amx_kernel_for_fp8);
  RUN(degenerate_sizes);
  RUN(c_amax_nan_wins);
  RUN(refusals_change_nothing);
  RUN(fast_accum_leaves_the_cpu_unchanged);
  RUN(cuda_device_refuses_what_it_lacks);
  TEST_END();
}
