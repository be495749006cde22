/* tests/test_fp8_blocks.c - amp_quantize_blocks (the manual's BLOCK SCALING) against the rules
   written out again here, in double, with none of amp.h's code: every input element decoded from
   its bits, the block's amax, its scale (RCEIL's E8M0 round-up of fl32(amax * fl32(1/fmax)),
   FLOOR's exponent of amax less emax, DeepSeek's fl32(max(amax, 1e-4) / fmax)), fl32() of each
   scaled element emulated with rint on doubles (gradual underflow included) and the saturating fp8
   cast as "the nearest fp8 value, ties to the even code". Every kind x both formats x f32/f16/bf16,
   partial blocks, leading dimensions above cols (their padding holds NaN, which must not be read),
   blocks of zeros, of subnormals, at the RCEIL rounding edge near 2^-127, an outlier, inf and NaN;
   every SIMD level the CPU has must give these bits (so the plain loop's); bad arguments are
   refused naming themselves, with canaries showing nothing was written. The -Ofast builds of this
   file (flush-to-zero, denormals-are-zero) must give the same bits: the reference computes only on
   doubles far above their subnormal range. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>

static const double FMAX[2] = {448.0, 57344.0};   /* E4M3, E5M2 */
static const int EMAX[2] = {8, 15};
static const amp_dtype FP8[2] = {AMP_E4M3, AMP_E5M2};
static const amp_dtype XT[3] = {AMP_F32, AMP_F16, AMP_BF16};
static const char *KNAME[4] = {"MX_RCEIL", "MX_FLOOR", "1x128", "128x128"};

static uint32_t rng = 2463534242u;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }

/* ---- the reference ------------------------------------------------------------------------- */

/* One input element: its value (exact), its sign bit, and 1 inf / 2 NaN. */
typedef struct elem { double v; int neg, special; } elem;
/* A binary float of ebits/mbits from its bits: ldexp of the integer significand, no float arithmetic. */
static elem decode(uint32_t u, int ebits, int mbits) {
  uint32_t m = u & ((1u << mbits) - 1u), e = (u >> mbits) & ((1u << ebits) - 1u);
  int bias = (1 << (ebits - 1)) - 1;
  elem r;
  r.neg = (int)((u >> (ebits + mbits)) & 1u);
  r.special = e == (1u << ebits) - 1u ? (m ? 2 : 1) : 0;
  r.v = e ? ldexp((double)(m | (1u << mbits)), (int)e - bias - mbits) : ldexp((double)m, 1 - bias - mbits);
  if (r.neg) r.v = -r.v;
  return r;
}
static elem elem_at(const void *x, int t, size_t i) {
  if (t == 0) { uint32_t u; memcpy(&u, (const char *)x + 4 * i, 4); return decode(u, 8, 23); }
  { uint16_t h; memcpy(&h, (const char *)x + 2 * i, 2); return t == 1 ? decode(h, 5, 10) : decode((uint32_t)h << 16, 8, 23); }
}
/* The value of a positive fp8 code (no specials among those asked for). */
static double fp8_value(int f, int c) { return f ? decode((uint32_t)c, 5, 2).v : decode((uint32_t)c, 4, 3).v; }
static int fp8_top(int f) { return f ? 0x7b : 0x7e; }   /* 57344, 448 */
/* sat(): |y| to the nearest fp8 value, a tie to the even code, beyond the largest the largest; the
   sign given (y's is that of x: the scale is positive). */
static uint8_t ref_fp8(double y, int neg, int f) {
  int lo = 0, hi = fp8_top(f), c;
  double a = fabs(y), mid;
  if (a >= fp8_value(f, hi)) return (uint8_t)(hi | (neg ? 0x80 : 0));
  while (hi - lo > 1) { int m = (lo + hi) / 2; if (fp8_value(f, m) <= a) lo = m; else hi = m; }
  mid = (fp8_value(f, lo) + fp8_value(f, lo + 1)) / 2;   /* exact: few bits */
  c = a < mid ? lo : a > mid ? lo + 1 : (lo % 2 ? lo + 1 : lo);
  return (uint8_t)(c | (neg ? 0x80 : 0));
}
/* fl32(v): to nearest even at f32's precision, subnormals' spacing 2^-149 below 2^-126. */
static double ref_fl32(double v) {
  int ex;
  double a = fabs(v), qnt;
  if (a == 0) return v;
  (void)frexp(a, &ex);   /* a = fr 2^ex, fr in [0.5, 1) */
  qnt = ldexp(1.0, (ex - 1 >= -126 ? ex - 1 : -126) - 23);
  a = rint(a / qnt) * qnt;
  return v < 0 ? -a : a;
}
/* A float's bits from a double that is a normal float's value (a conversion, no subnormal). */
static uint32_t f32_bits_of(double d) { float f = (float)d; uint32_t u; memcpy(&u, &f, 4); return u; }

static int bh_of(int kind) { return kind == AMP_BLOCK_128x128 ? 128 : 1; }
static int bw_of(int kind) { return kind <= AMP_BLOCK_MX_FLOOR ? 32 : 128; }
static size_t n_scales(int kind, int rows, int cols) {
  return (size_t)((rows + bh_of(kind) - 1) / bh_of(kind)) * (size_t)((cols + bw_of(kind) - 1) / bw_of(kind));
}
static size_t scale_size(int kind) { return kind <= AMP_BLOCK_MX_FLOOR ? 1u : 4u; }

typedef struct kase { int kind, f, t, rows, cols, ldx, ldq; } kase;

/* The rules of the manual, block by block: q (row stride ldq) and the scales as bytes. */
static void ref_quantize(const kase *k, const void *x, uint8_t *q, uint8_t *scales) {
  const int bh = bh_of(k->kind), bw = bw_of(k->kind), f = k->f;
  const size_t nbc = (size_t)((k->cols + bw - 1) / bw);
  int r0, c0, r, c;
  for (r0 = 0; r0 < k->rows; r0 += bh)
    for (c0 = 0; c0 < k->cols; c0 += bw) {
      const int r1 = r0 + bh < k->rows ? r0 + bh : k->rows, c1 = c0 + bw < k->cols ? c0 + bw : k->cols;
      const size_t at = (size_t)(r0 / bh) * nbc + (size_t)(c0 / bw);
      double amax = 0, mul = 1;
      int bad = 0, e = 127, pow2 = 0;
      for (r = r0; r < r1; r++)
        for (c = c0; c < c1; c++) {
          elem x_ = elem_at(x, k->t, (size_t)r * (size_t)k->ldx + (size_t)c);
          bad |= x_.special;
          if (fabs(x_.v) > amax) amax = fabs(x_.v);
        }
      if (bad) {   /* an inf or a NaN: the NaN scale, NaN codes */
        if (k->kind <= AMP_BLOCK_MX_FLOOR) scales[at] = 0xff;
        else { uint32_t nan = 0x7fc00000u; memcpy(scales + 4 * at, &nan, 4); }
        for (r = r0; r < r1; r++) memset(q + (size_t)r * (size_t)k->ldq + c0, 0x7f, (size_t)(c1 - c0));
        continue;
      }
      if (k->kind == AMP_BLOCK_MX_RCEIL && amax > 0) {   /* the smallest power of two >= fl32(amax * fl32(1/fmax)) */
        volatile double inv = 1.0 / FMAX[f];
        double v = ref_fl32(amax * (double)(float)inv), fr;
        int ex, j = -127;
        if (v > 0) { fr = frexp(v, &ex); j = fr == 0.5 ? ex - 1 : ex; }
        e = (j < -127 ? -127 : j > 127 ? 127 : j) + 127;
      } else if (k->kind == AMP_BLOCK_MX_FLOOR && amax > 0) {   /* floor(log2 amax) - emax */
        int ex, j;
        (void)frexp(amax, &ex);
        j = ex - 1 - EMAX[f];
        e = (j < -127 ? -127 : j > 127 ? 127 : j) + 127;
      }
      if (k->kind <= AMP_BLOCK_MX_FLOOR) { scales[at] = (uint8_t)e; pow2 = 1; }
      else {
        double a = amax > (double)1e-4f ? amax : (double)1e-4f;
        volatile double m = FMAX[f] / a, s = a / FMAX[f];   /* rounded to double, then to float: one rounding's result */
        uint32_t sb = f32_bits_of(s);
        mul = (double)(float)m;
        memcpy(scales + 4 * at, &sb, 4);
      }
      for (r = r0; r < r1; r++)
        for (c = c0; c < c1; c++) {
          elem x_ = elem_at(x, k->t, (size_t)r * (size_t)k->ldx + (size_t)c);
          double y = pow2 ? ref_fl32(ldexp(x_.v, 127 - e)) : ref_fl32(x_.v * mul);
          q[(size_t)r * (size_t)k->ldq + (size_t)c] = ref_fp8(y, x_.neg, f);
        }
    }
}

/* ---- running the library ------------------------------------------------------------------- */


#define CANARY 0xa5
static size_t xbytes(const kase *k) { return (size_t)k->rows * (size_t)k->ldx * amp_dtype_size(XT[k->t]); }
static size_t qbytes(const kase *k) { return (size_t)k->rows * (size_t)k->ldq; }
static size_t sbytes(const kase *k) { return n_scales(k->kind, k->rows, k->cols) * scale_size(k->kind); }

/* One case at every level against the reference, the padding of q and 16 bytes after the scales
   included (they must keep the canary). Returns the number of levels that differed. */
static int check_case(const kase *k, const void *x, const char *what) {
  size_t qn = qbytes(k), sn = sbytes(k) + 16;
  uint8_t *wq = (uint8_t *)malloc(qn), *ws = (uint8_t *)malloc(sn), *gq = (uint8_t *)malloc(qn), *gs = (uint8_t *)malloc(sn);
  int l, bad = 0;
  memset(wq, CANARY, qn); memset(ws, CANARY, sn);
  ref_quantize(k, x, wq, ws);
  for (l = 0; l < t_simd_levels(); l++) {
    amp_status st;
    size_t i;
    t_simd_level(l);
    memset(gq, CANARY, qn); memset(gs, CANARY, sn);
    st = amp_quantize_blocks(amp_cpu(), (amp_block_scaling)k->kind, FP8[k->f], k->rows, k->cols, x, XT[k->t], k->ldx, gq,
                             k->ldq, gs);
    if (st != AMP_OK) { EXPECT(0, "%s: level %d: %s", what, l, amp_last_error()); bad++; continue; }
    for (i = 0; i < sn && gs[i] == ws[i]; i++) {}
    if (i < sn) {
      EXPECT(0, "%s %s %s %s %dx%d ldx %d ldq %d level %d: scale byte %zu is 0x%02x, want 0x%02x", what, KNAME[k->kind],
             k->f ? "e5m2" : "e4m3", amp__dtype_name(XT[k->t]), k->rows, k->cols, k->ldx, k->ldq, l, i, gs[i], ws[i]);
      bad++; continue;
    }
    for (i = 0; i < qn && gq[i] == wq[i]; i++) {}
    if (i < qn) {
      int r = (int)(i / (size_t)k->ldq), c = (int)(i % (size_t)k->ldq);
      elem x_ = c < k->cols ? elem_at(x, k->t, (size_t)r * (size_t)k->ldx + (size_t)c) : elem_at(x, k->t, 0);
      EXPECT(0, "%s %s %s %s %dx%d ldx %d ldq %d level %d: q[%d][%d] (x %a) is 0x%02x, want 0x%02x", what, KNAME[k->kind],
             k->f ? "e5m2" : "e4m3", amp__dtype_name(XT[k->t]), k->rows, k->cols, k->ldx, k->ldq, l, r, c, x_.v, gq[i], wq[i]);
      bad++;
    }
  }
  t_simd_level(2);
  amp_simd_enable(1);
  free(wq); free(ws); free(gq); free(gs);
  return bad;
}

/* Element i of type t from a sign, an exponent field and mantissa bits (the field's width is the
   type's): f32 / bf16 8 bits, f16 5. */
static void put(void *x, int t, size_t i, uint32_t sign, uint32_t field, uint32_t mant) {
  if (t == 0) { uint32_t u = sign << 31 | field << 23 | (mant & 0x7fffffu); memcpy((char *)x + 4 * i, &u, 4); }
  else if (t == 1) { uint16_t h = (uint16_t)(sign << 15 | field << 10 | (mant & 0x3ffu)); memcpy((char *)x + 2 * i, &h, 2); }
  else { uint16_t h = (uint16_t)(sign << 15 | field << 7 | (mant & 0x7fu)); memcpy((char *)x + 2 * i, &h, 2); }
}
static void put_nan(void *x, int t, size_t i) { put(x, t, i, rnd() & 1u, t == 1 ? 31u : 255u, 1u | rnd()); }
/* A matrix whose 32-wide row pieces each have a magnitude of their own (any exponent field, the
   subnormal 0 included), elements up to `spread` binades below it, a few zeros; the padding NaN. */
static void fill(const kase *k, void *x, int spread) {
  const uint32_t top = k->t == 1 ? 30u : 254u;
  int r, c;
  for (r = 0; r < k->rows; r++) {
    uint32_t base = 0;
    for (c = 0; c < k->ldx; c++) {
      size_t i = (size_t)r * (size_t)k->ldx + (size_t)c;
      uint32_t down = rnd() % (uint32_t)(spread + 1), field;
      if (c % 32 == 0) base = rnd() % (top + 1u);
      field = base > down ? base - down : 0u;
      if (c >= k->cols) put_nan(x, k->t, i);
      else if (rnd() % 16 == 0) put(x, k->t, i, rnd() & 1u, 0, 0);
      else put(x, k->t, i, rnd() & 1u, field, rnd());
    }
  }
}

/* ---- the tests ----------------------------------------------------------------------------- */

/* Every kind, format and input type over shapes with partial blocks on both edges, leading
   dimensions above cols, and every level, against the reference. */
static void every_kind_format_and_type_follows_the_rules(void) {
  static const int shapes[][4] = { /* rows, cols, ldx - cols, ldq - cols */
    {1, 1, 0, 0}, {1, 31, 1, 0}, {2, 32, 0, 3}, {3, 33, 5, 1}, {4, 128, 0, 0}, {2, 129, 7, 9}, {5, 100, 0, 2},
    {130, 45, 3, 0}, {129, 257, 1, 2}, {256, 300, 4, 0} };
  int ns = t_quick() ? 7 : (int)(sizeof shapes / sizeof shapes[0]);
  int kind, f, t, s;
  for (kind = 0; kind < 4; kind++)
    for (f = 0; f < 2; f++)
      for (t = 0; t < 3; t++)
        for (s = 0; s < ns; s++) {
          kase k;
          void *x;
          k.kind = kind; k.f = f; k.t = t; k.rows = shapes[s][0]; k.cols = shapes[s][1];
          k.ldx = k.cols + shapes[s][2]; k.ldq = k.cols + shapes[s][3];
          x = malloc(xbytes(&k));
          fill(&k, x, s % 2 ? 6 : 24);
          check_case(&k, x, "random blocks");
          free(x);
        }
}

/* Raw random bits of every class (subnormals, huge, tiny; inf and NaN now and then), so that the
   vector loops meet every lane pattern: every level must give the reference's bits. */
static void random_bits_at_every_level(void) {
  int kind, f, t, rep, reps = t_quick() ? 1 : 4;
  for (rep = 0; rep < reps; rep++)
    for (kind = 0; kind < 4; kind++)
      for (f = 0; f < 2; f++)
        for (t = 0; t < 3; t++) {
          kase k;
          uint8_t *x;
          size_t i, n;
          k.kind = kind; k.f = f; k.t = t; k.rows = kind == 3 ? 131 : 7; k.cols = 161; k.ldx = 161; k.ldq = 163;
          n = (size_t)k.rows * (size_t)k.ldx;
          x = (uint8_t *)malloc(xbytes(&k));
          for (i = 0; i < n; i++) {
            uint32_t u = rnd();
            elem e_;
            if (t == 0) memcpy(x + 4 * i, &u, 4); else { uint16_t h = (uint16_t)u; memcpy(x + 2 * i, &h, 2); }
            e_ = elem_at(x, t, i);
            if (e_.special && rnd() % 64) put(x, t, i, 0, 0, 0);   /* most specials out: blocks would all be NaN */
          }
          check_case(&k, x, "random bits");
          free(x);
        }
}

/* One row of one block, given as f32 bit patterns, for every kind and format, against the
   reference; plus what a person works out for some of them (want_e4 >= 0: the E4M3 scale byte of
   the MX kinds and the code of element 0). */
static void one_row(const uint32_t *bits, int n, const char *what) {
  int kind, f, t;
  for (kind = 0; kind < 4; kind++)
    for (f = 0; f < 2; f++)
      for (t = 0; t < 3; t++) {
        kase k;
        float xs[128];   /* f32-aligned storage for any of the three types */
        uint8_t *x = (uint8_t *)xs;
        int i, ok = 1;
        k.kind = kind; k.f = f; k.t = t; k.rows = 1; k.cols = n; k.ldx = n; k.ldq = n;
        for (i = 0; i < n && ok; i++) {   /* f16 / bf16: only rows they hold exactly */
          if (t == 0) memcpy(x + 4 * i, &bits[i], 4);
          else if (t == 2) { uint16_t h = (uint16_t)(bits[i] >> 16); ok = (bits[i] & 0xffffu) == 0; memcpy(x + 2 * i, &h, 2); }
          else {   /* the f16 with the same value, if there is one (the conversion only proposes it) */
            float v;
            amp_f16 h;
            elem e = decode(bits[i], 8, 23), g;
            memcpy(&v, &bits[i], 4);
            h = amp_f32_to_f16(v);
            g = decode(h, 5, 10);
            ok = g.special == e.special && g.neg == e.neg && (e.special || g.v == e.v);
            memcpy(x + 2 * i, &h, 2);
          }
        }
        if (ok) check_case(&k, x, what);
      }
}
static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

static void edge_blocks(void) {
  uint32_t b[128];
  int i;
  /* zeros of both signs: MX scale 1, codes +-0 */
  for (i = 0; i < 40; i++) b[i] = i % 3 ? 0x80000000u : 0u;
  one_row(b, 40, "zeros");
  {
    uint8_t q[40], s[2];
    float z[40];
    memcpy(z, b, sizeof z);
    EXPECT(amp_quantize_blocks(amp_cpu(), AMP_BLOCK_MX_FLOOR, AMP_E4M3, 1, 40, z, AMP_F32, 40, q, 40, s) == AMP_OK &&
           s[0] == 0x7f && s[1] == 0x7f && q[0] == 0x00 && q[1] == 0x80, "zeros: scales 0x%02x 0x%02x, codes 0x%02x 0x%02x, "
           "want 0x7f 0x7f 0x00 0x80", s[0], s[1], q[0], q[1]);
  }
  /* every amax of the binade of 448 and its neighbours, small values beside it */
  for (i = 0; i < 32; i++) b[i] = bits_of(0.75f) + (uint32_t)i * 0x2000u;
  b[5] = bits_of(500.0f); one_row(b, 32, "amax 500");
  {   /* E4M3 amax 500: FLOOR's scale is 2^0 and 500 clips to 448; RCEIL's is 2^1, no clip */
    float xs[32];
    uint8_t q[32], s;
    memcpy(xs, b, sizeof xs);
    EXPECT(amp_quantize_blocks(amp_cpu(), AMP_BLOCK_MX_FLOOR, AMP_E4M3, 1, 32, xs, AMP_F32, 32, q, 32, &s) == AMP_OK &&
           s == 127 && q[5] == 0x7e, "FLOOR amax 500: scale 0x%02x code 0x%02x, want 0x7f 0x7e (448, clipped)", s, q[5]);
    EXPECT(amp_quantize_blocks(amp_cpu(), AMP_BLOCK_MX_RCEIL, AMP_E4M3, 1, 32, xs, AMP_F32, 32, q, 32, &s) == AMP_OK &&
           s == 128 && q[5] == 0x78, "RCEIL amax 500: scale 0x%02x code 0x%02x, want 0x80 0x78 (250 -> 256)", s, q[5]);
  }
  for (i = 0; i < 32; i++) b[i] = 0x7f7fffffu - (uint32_t)i * 0x01000001u;   /* FLT_MAX and huge */
  one_row(b, 32, "FLT_MAX");
  for (i = 0; i < 128; i++) b[i] = (uint32_t)(i * 65537 + 1) & 0x807fffffu;   /* subnormals only */
  one_row(b, 128, "subnormals");
  {   /* subnormals scaled by 2^127 under RCEIL: a -Ofast build's denormals-are-zero must not zero them */
    float xs[32];
    uint8_t q[32], s;
    for (i = 0; i < 32; i++) b[i] = 0x00400000u;   /* 2^-127 */
    memcpy(xs, b, sizeof xs);
    EXPECT(amp_quantize_blocks(amp_cpu(), AMP_BLOCK_MX_RCEIL, AMP_E5M2, 1, 32, xs, AMP_F32, 32, q, 32, &s) == AMP_OK &&
           s == 0 && q[0] == 0x3c, "2^-127 in E5M2: scale 0x%02x code 0x%02x, want 0x00 (2^-127) and 0x3c (1.0)", s, q[0]);
  }
  for (i = 0; i < 32; i++) b[i] = 0x00800000u + (uint32_t)i;   /* the smallest normals */
  one_row(b, 32, "smallest normals");
  for (i = 0; i < 128; i++) b[i] = bits_of(1e-4f) - 64u + (uint32_t)i;   /* amax around DeepSeek's floor 1e-4 */
  one_row(b, 128, "amax near 1e-4");
  {   /* RCEIL near v = 2^-127: amax = 2^-127 (1 + 2^-23) fmax / fl32(fmax)... every f32 around it */
    int f;
    for (f = 0; f < 2; f++) {
      volatile double inv = 1.0 / FMAX[f];
      double edge = ldexp(1.0, -127) * (1.0 + ldexp(1.0, -23)) / (double)(float)inv;
      uint32_t c = f32_bits_of(edge);
      for (i = 0; i < 32; i++) b[i] = c - 16u + (uint32_t)i;
      one_row(b, 32, f ? "RCEIL edge at 2^-127 (E5M2's)" : "RCEIL edge at 2^-127 (E4M3's)");
      for (i = 0; i < 32; i++) b[i] = f32_bits_of(ldexp(1.0, -126) / (double)(float)inv) - 16u + (uint32_t)i;
      one_row(b, 32, "RCEIL edge at 2^-126");
      for (i = 0; i < 32; i++) b[i] = f32_bits_of(FMAX[f]) - 16u + (uint32_t)i;   /* amax at fmax: scale 1 or 2 */
      one_row(b, 32, "amax near fmax");
    }
  }
}

/* An outlier costs precision in its own block only: values in [1e-3, 1.5e-3) (no block clips, FLOOR's
   either) with one 1e4; the blocks without it dequantise (code value times scale) within fp8's
   half ulp of x. */
static void an_outlier_keeps_the_other_blocks(void) {
  enum { R = 130, C = 256 };
  static float x[R * C];
  static uint8_t q[R * C];
  static float sf[R * 8];   /* float-aligned: the 1x128 / 128x128 scales */
  uint8_t *s = (uint8_t *)sf;
  int kind, f, r, c;
  for (r = 0; r < R; r++)
    for (c = 0; c < C; c++) x[r * C + c] = (1.0f + (float)((r * 7 + c * 13) % 97) / 194.0f) * 1e-3f * (c % 2 ? -1.0f : 1.0f);
  x[0] = 1e4f;   /* in the first block of every kind */
  for (kind = 0; kind < 4; kind++)
    for (f = 0; f < 2; f++) {
      int bw = bw_of(kind), bh = bh_of(kind), worst_c = -1, worst_r = -1;
      double worst = 0, ulp = f ? 0.125 : 0.0625;   /* half an ulp, relative: 2^-3 (2 mantissa bits), 2^-4 (3) */
      EXPECT(amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, FP8[f], R, C, x, AMP_F32, C, q, C, s) == AMP_OK, "%s",
             amp_last_error());
      for (r = 0; r < R; r++)
        for (c = 0; c < C; c++) {
          size_t at = (size_t)(r / bh) * (size_t)((C + bw - 1) / bw) + (size_t)(c / bw);
          double scale, v, rel;
          if (r < bh && c < bw) continue;   /* the outlier's block */
          if (kind <= AMP_BLOCK_MX_FLOOR) scale = ldexp(1.0, (int)s[at] - 127);
          else { float sf; memcpy(&sf, s + 4 * at, 4); scale = (double)sf; }
          v = fp8_value(f, q[r * C + c] & 0x7f) * (q[r * C + c] & 0x80 ? -1 : 1) * scale;
          rel = fabs(v - (double)x[r * C + c]) / fabs((double)x[r * C + c]);
          if (rel > worst) { worst = rel; worst_r = r; worst_c = c; }
        }
      EXPECT(worst <= ulp, "%s %s: x[%d][%d] dequantises %g off (relative), more than half an ulp %g", KNAME[kind],
             f ? "e5m2" : "e4m3", worst_r, worst_c, worst, ulp);
    }
}

/* inf or NaN in a block: its scale NaN (0xff / 0x7fc00000, whatever the NaN's payload and sign) and
   every code 0x7f; the blocks beside it as the rules give. */
static void inf_and_nan_poison_only_their_block(void) {
  int kind, f, t;
  for (kind = 0; kind < 4; kind++)
    for (f = 0; f < 2; f++)
      for (t = 0; t < 3; t++) {
        kase k;
        void *x;
        uint8_t *q, *s;
        int bw = bw_of(kind), bh = bh_of(kind), c;
        k.kind = kind; k.f = f; k.t = t; k.rows = kind == 3 ? 129 : 2; k.cols = 3 * bw; k.ldx = k.cols; k.ldq = k.cols;
        x = malloc(xbytes(&k)); q = (uint8_t *)malloc(qbytes(&k)); s = (uint8_t *)malloc(sbytes(&k));
        fill(&k, x, 8);
        put(x, t, 3, 1, t == 1 ? 31u : 255u, 0);                 /* -inf in block (0, 0) */
        put(x, t, (size_t)(2 * bw + 1), 1, t == 1 ? 31u : 255u, 5);   /* a negative NaN with a payload in block (0, 2) */
        check_case(&k, x, "inf and NaN");
        EXPECT(amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, FP8[f], k.rows, k.cols, x, XT[t], k.ldx, q, k.ldq, s) ==
               AMP_OK, "%s", amp_last_error());
        for (c = 0; c < 3; c += 2) {
          uint32_t sc = 0;
          int r, bad = 0;
          if (kind <= AMP_BLOCK_MX_FLOOR) sc = s[c]; else memcpy(&sc, s + 4 * (size_t)c, 4);
          for (r = 0; r < bh && r < k.rows; r++) { int j; for (j = 0; j < bw; j++) bad += q[(size_t)r * (size_t)k.ldq + (size_t)(c * bw + j)] != 0x7f; }
          EXPECT(sc == (kind <= AMP_BLOCK_MX_FLOOR ? 0xffu : 0x7fc00000u) && bad == 0, "%s %s %s block %d: scale 0x%x, %d codes "
                 "not 0x7f", KNAME[kind], f ? "e5m2" : "e4m3", amp__dtype_name(XT[t]), c, sc, bad);
        }
        {
          uint32_t mid = 0;
          if (kind <= AMP_BLOCK_MX_FLOOR) mid = s[1]; else memcpy(&mid, s + 4, 4);
          EXPECT(mid != (kind <= AMP_BLOCK_MX_FLOOR ? 0xffu : 0x7fc00000u), "%s: the middle block's scale is NaN too", KNAME[kind]);
        }
        free(x); free(q); free(s);
      }
}

/* Bad arguments: AMP_ERR_ARG naming amp_quantize_blocks and the value, q and scales untouched. */
static void bad_input_is_refused_and_changes_nothing(void) {
  static float x[64 * 40];
  static uint32_t qw[(64 * 40 + 64) / 4], sw[64];   /* 4-byte aligned: float scales may live in either */
  static uint8_t q0[sizeof qw], s0[sizeof sw];
  uint8_t *q = (uint8_t *)qw, *s = (uint8_t *)sw;
  amp_device *cpu = amp_cpu();
  int i;
  for (i = 0; i < 64 * 40; i++) x[i] = (float)(i % 17) - 8.0f;
  memset(q, CANARY, sizeof qw); memset(s, CANARY, sizeof sw);
  memcpy(q0, q, sizeof qw); memcpy(s0, s, sizeof sw);
#define BAD(call, text) do { amp_status st_ = (call); \
    EXPECT(st_ == AMP_ERR_ARG && strstr(amp_last_error(), "amp_quantize_blocks: ") && strstr(amp_last_error(), text), \
           "want AMP_ERR_ARG naming '%s', got %s: '%s'", text, amp_status_string(st_), amp_last_error()); } while (0)
  BAD(amp_quantize_blocks(NULL, AMP_BLOCK_MX_RCEIL, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, s), "d is NULL");
  BAD(amp_quantize_blocks(cpu, (amp_block_scaling)4, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, s), "kind 4");
  BAD(amp_quantize_blocks(cpu, (amp_block_scaling)-1, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, s), "kind -1");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_RCEIL, AMP_F16, 4, 40, x, AMP_F32, 40, q, 40, s), "fp8 1 (AMP_F16)");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_RCEIL, (amp_dtype)9, 4, 40, x, AMP_F32, 40, q, 40, s), "fp8 9");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_1x128, AMP_E5M2, 4, 40, x, AMP_E4M3, 40, q, 40, s), "x_type 3 (AMP_E4M3)");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_1x128, AMP_E5M2, 4, 40, x, (amp_dtype)7, 40, q, 40, s), "x_type 7");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, -1, 40, x, AMP_F32, 40, q, 40, s), "rows -1");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, -2, x, AMP_F32, 40, q, 40, s), "cols -2");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, x, AMP_F32, 39, q, 40, s),
      "ldx 39 is less than cols 40 (a leading dimension smaller than its row)");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 38, s),
      "ldq 38 is less than cols 40 (a leading dimension smaller than its row)");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, NULL, AMP_F32, 40, q, 40, s), "x is NULL");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, x, AMP_F32, 40, NULL, 40, s), "q is NULL");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, NULL), "scales is NULL");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, (char *)x + 2, AMP_F32, 40, q, 40, s),
      "is not aligned to its element size");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_1x128, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, s + 1), "not 4-byte aligned");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, x, AMP_F32, 40, (uint8_t *)x + 100, 40, s), "overlaps x");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, x, AMP_F32, 40, (uint8_t *)x + 639, 40, s), "overlaps x");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_FLOOR, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, (uint8_t *)x + 636), "overlaps x");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_1x128, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, q + 120), "overlaps q");
  BAD(amp_quantize_blocks(cpu, AMP_BLOCK_MX_RCEIL, AMP_E4M3, 4, 40, x, AMP_F32, 40, q + 20, 40, q + 13), "overlaps q");
#undef BAD
  EXPECT(memcmp(q, q0, sizeof qw) == 0 && memcmp(s, s0, sizeof sw) == 0, "a refused call wrote into q or scales");
  {   /* just outside each other: accepted */
    EXPECT(amp_quantize_blocks(cpu, AMP_BLOCK_1x128, AMP_E4M3, 4, 40, x, AMP_F32, 40, q, 40, q + 160) == AMP_OK &&
           amp_quantize_blocks(cpu, AMP_BLOCK_1x128, AMP_E4M3, 4, 40, x, AMP_F32, 40, q + 16, 40, q) == AMP_OK,
           "adjacent buffers: %s", amp_last_error());
  }
}

/* rows or cols 0: AMP_OK with NULL pointers, and nothing written with real ones. */
static void empty_matrices_write_nothing(void) {
  uint8_t q[64], s[64];
  float x[64];
  int kind;
  memset(x, 0, sizeof x); memset(q, CANARY, sizeof q); memset(s, CANARY, sizeof s);
  for (kind = 0; kind < 4; kind++) {
    EXPECT(amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, AMP_E4M3, 0, 5, NULL, AMP_F32, 5, NULL, 5, NULL) == AMP_OK,
           "rows 0 with NULL: %s", amp_last_error());
    EXPECT(amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, AMP_E5M2, 3, 0, NULL, AMP_BF16, 0, NULL, 0, NULL) == AMP_OK,
           "cols 0 with NULL: %s", amp_last_error());
    EXPECT(amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, AMP_E5M2, 0, 8, x, AMP_F32, 8, q, 8, s) == AMP_OK &&
           amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, AMP_E5M2, 8, 0, x, AMP_F32, 8, q, 8, s) == AMP_OK,
           "empty: %s", amp_last_error());
  }
  {
    int i, bad = 0;
    for (i = 0; i < 64; i++) bad += q[i] != CANARY || s[i] != CANARY;
    EXPECT(bad == 0, "an empty matrix wrote %d bytes", bad);
  }
}

int main(void) {
  RUN(every_kind_format_and_type_follows_the_rules);
  RUN(random_bits_at_every_level);
  RUN(edge_blocks);
  RUN(an_outlier_keeps_the_other_blocks);
  RUN(inf_and_nan_poison_only_their_block);
  RUN(bad_input_is_refused_and_changes_nothing);
  RUN(empty_matrices_write_nothing);
  TEST_END();
}
