/* tests/test_fp8.c - the fp8 formats by name: E4M3 and E5M2 encodes at their edges (max, the
   overflow tie, min normal, min subnormal, half of it, ties, inf, NaN, -0) in both saturation
   modes and E8M0 in both roundings (one table, every encoder on every row), all 256 codes of each format decoded against a formula written
   with ldexp, round trips, and the bulk loops at every SIMD level the CPU has (and the portable
   one): f32 at odd addresses and every tail length, and every f16 and bf16 pattern into fp8 (which
   must equal the f32 conversion of the widened value) and every code back out to f16/bf16.
   The sweep over all 2^32 f32 inputs against cuda_fp8.h is tests/test_fp8_exhaustive.c. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <fenv.h>
#include <math.h>

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float f32_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
/* NaN by its bits: the -Ofast build of this file folds isnan() to 0 */
static int nan_bits(float x) { return (bits_of(x) & 0x7fffffffu) > 0x7f800000u; }

/* ---- encodes by name ---------------------------------------------------------------------- */

/* Each input with what every encoder must give: E4M3 and E5M2 saturating and not, E8M0 rounded up
   and down (the bits of cuda_fp8.h); the text says which edge of which format the row is for. */
enum { SAT4, NOSAT4, SAT5, NOSAT5, UP, DOWN, NOUT };
typedef struct edge { uint32_t in; uint8_t want[NOUT]; const char *what; } edge;
static const edge edges[] = {
  { 0x00000000u, { 0x00, 0x00, 0x00, 0x00, 0, 0 }, "+0 (E8M0: 2^-127, it has no zero)" },
  { 0x80000000u, { 0x80, 0x80, 0x80, 0x80, 0, 0 }, "-0 keeps its sign" },
  { 0x3f800000u, { 0x38, 0x38, 0x3c, 0x3c, 127, 127 }, "1.0" },
  { 0xbf800000u, { 0xb8, 0xb8, 0xbc, 0xbc, 127, 127 }, "E4M3 -1.0" },
  { 0x43e00000u, { 0x7e, 0x7e, 0x5f, 0x5f, 136, 135 }, "E4M3 448, the largest E4M3" },
  { 0xc3e00000u, { 0xfe, 0xfe, 0xdf, 0xdf, 136, 135 }, "E4M3 -448" },
  { 0x43e7ffffu, { 0x7e, 0x7e, 0x5f, 0x5f, 136, 135 }, "E4M3 just below 464 (448 + half an ulp) rounds down to 448" },
  { 0x43e80000u, { 0x7e, 0x7e, 0x5f, 0x5f, 136, 135 }, "E4M3 464, the overflow tie, rounds to even: 448 (0x7f is NaN, not 480)" },
  { 0x43e80001u, { 0x7e, 0x7f, 0x5f, 0x5f, 136, 135 }, "E4M3 just above 464: 448 saturating, NaN not (no inf in E4M3)" },
  { 0xc3e80001u, { 0xfe, 0xff, 0xdf, 0xdf, 136, 135 }, "E4M3 just below -464: -448, or NaN with the sign (as cuda_fp8.h)" },
  { 0x43f00000u, { 0x7e, 0x7f, 0x60, 0x60, 136, 135 }, "E4M3 480" },
  { 0x7f7fffffu, { 0x7e, 0x7f, 0x7b, 0x7c, 254, 254 }, "E4M3 FLT_MAX; E8M0 FLT_MAX" },
  { 0x7f800000u, { 0x7e, 0x7f, 0x7b, 0x7c, 254, 254 }, "E4M3 +inf: 448 saturating, NaN not; E5M2 +inf: 57344 saturating, inf not; E8M0 inf saturates (__NV_SATFINITE)" },
  { 0xff800000u, { 0xfe, 0xff, 0xfb, 0xfc, 254, 254 }, "E4M3 -inf; E5M2 -inf; E8M0 -inf" },
  { 0x7fc00000u, { 0x7f, 0x7f, 0x7f, 0x7f, 255, 255 }, "E4M3 quiet NaN: 0x7f; E5M2 quiet NaN: 0x7f; E8M0 NaN: 0xff" },
  { 0xffc00000u, { 0x7f, 0x7f, 0x7f, 0x7f, 255, 255 }, "E4M3 negative NaN: 0x7f, the sign dropped (as cuda_fp8.h and the GPU); E5M2 negative NaN: 0x7f (as cuda_fp8.h)" },
  { 0x7f800001u, { 0x7f, 0x7f, 0x7f, 0x7f, 255, 255 }, "E4M3 signalling NaN: NaN, never inf or max; E5M2 signalling NaN: NaN, not inf" },
  { 0x3c800000u, { 0x08, 0x08, 0x24, 0x24, 121, 121 }, "E4M3 2^-6, the smallest normal" },
  { 0x3c7fffffu, { 0x08, 0x08, 0x24, 0x24, 121, 120 }, "E4M3 just below 2^-6 rounds up to it" },
  { 0x3c700000u, { 0x08, 0x08, 0x24, 0x24, 121, 120 }, "E4M3 7.5 * 2^-9, the tie between the largest subnormal and 2^-6: even, 2^-6" },
  { 0x3c600000u, { 0x07, 0x07, 0x23, 0x23, 121, 120 }, "E4M3 7 * 2^-9, the largest subnormal" },
  { 0x3b000000u, { 0x01, 0x01, 0x18, 0x18, 118, 118 }, "E4M3 2^-9, the smallest subnormal" },
  { 0xbb000000u, { 0x81, 0x81, 0x98, 0x98, 118, 118 }, "E4M3 -2^-9" },
  { 0x3a800000u, { 0x00, 0x00, 0x14, 0x14, 117, 117 }, "E4M3 2^-10, half the smallest subnormal: the tie goes to even, 0" },
  { 0xba800000u, { 0x80, 0x80, 0x94, 0x94, 117, 117 }, "E4M3 -2^-10 -> -0" },
  { 0x3a800001u, { 0x01, 0x01, 0x14, 0x14, 118, 117 }, "E4M3 just above 2^-10 rounds up to 2^-9" },
  { 0x3a7fffffu, { 0x00, 0x00, 0x14, 0x14, 117, 116 }, "E4M3 just below 2^-10 -> 0" },
  { 0x3b400000u, { 0x02, 0x02, 0x1a, 0x1a, 119, 118 }, "E4M3 1.5 * 2^-9, a subnormal tie: even, 2 * 2^-9" },
  { 0x3ba00000u, { 0x02, 0x02, 0x1d, 0x1d, 120, 119 }, "E4M3 2.5 * 2^-9, a subnormal tie: even, 2 * 2^-9" },
  { 0x3f880000u, { 0x38, 0x38, 0x3c, 0x3c, 128, 127 }, "E4M3 1.0625, a tie: even, 1.0" },
  { 0x3f980000u, { 0x3a, 0x3a, 0x3d, 0x3d, 128, 127 }, "E4M3 1.1875, a tie: even, 1.25" },
  { 0x3f880001u, { 0x39, 0x39, 0x3c, 0x3c, 128, 127 }, "E4M3 just above the tie: 1.125" },
  { 0x00000001u, { 0x00, 0x00, 0x00, 0x00, 0, 0 }, "E4M3 the smallest f32 subnormal -> 0; E8M0 the smallest f32 subnormal: 2^-127 covers it (cuda_fp8.h)" },
  { 0x80000001u, { 0x80, 0x80, 0x80, 0x80, 0, 0 }, "E4M3 a negative f32 subnormal -> -0; E5M2 a negative f32 subnormal -> -0" },
  { 0x47600000u, { 0x7e, 0x7f, 0x7b, 0x7b, 143, 142 }, "E5M2 57344, the largest E5M2" },
  { 0x476fffffu, { 0x7e, 0x7f, 0x7b, 0x7b, 143, 142 }, "E5M2 just below 61440 (57344 + half an ulp) rounds down" },
  { 0x47700000u, { 0x7e, 0x7f, 0x7b, 0x7c, 143, 142 }, "E5M2 61440, the overflow tie: even is inf; saturating, 57344" },
  { 0xc7700000u, { 0xfe, 0xff, 0xfb, 0xfc, 143, 142 }, "E5M2 -61440: -57344 or -inf" },
  { 0x47800000u, { 0x7e, 0x7f, 0x7b, 0x7c, 143, 143 }, "E5M2 65536" },
  { 0x38800000u, { 0x00, 0x00, 0x04, 0x04, 113, 113 }, "E5M2 2^-14, the smallest normal" },
  { 0x38600000u, { 0x00, 0x00, 0x04, 0x04, 113, 112 }, "E5M2 3.5 * 2^-16, the tie between the largest subnormal and 2^-14: even, 2^-14" },
  { 0x38400000u, { 0x00, 0x00, 0x03, 0x03, 113, 112 }, "E5M2 3 * 2^-16, the largest subnormal" },
  { 0x37800000u, { 0x00, 0x00, 0x01, 0x01, 111, 111 }, "E5M2 2^-16, the smallest subnormal" },
  { 0x37000000u, { 0x00, 0x00, 0x00, 0x00, 110, 110 }, "E5M2 2^-17, half the smallest subnormal: even, 0" },
  { 0xb7000000u, { 0x80, 0x80, 0x80, 0x80, 110, 110 }, "E5M2 -2^-17 -> -0" },
  { 0x37000001u, { 0x00, 0x00, 0x01, 0x01, 111, 110 }, "E5M2 just above 2^-17 rounds up to 2^-16" },
  { 0x37c00000u, { 0x00, 0x00, 0x02, 0x02, 112, 111 }, "E5M2 1.5 * 2^-16, a subnormal tie: even, 2 * 2^-16" },
  { 0x3f900000u, { 0x39, 0x39, 0x3c, 0x3c, 128, 127 }, "E5M2 1.125, a tie: even, 1.0" },
  { 0x3fb00000u, { 0x3b, 0x3b, 0x3e, 0x3e, 128, 127 }, "E5M2 1.375, a tie: even, 1.5" },
  { 0x3fc00000u, { 0x3c, 0x3c, 0x3e, 0x3e, 128, 127 }, "E8M0 1.5: up 2, down 1" },
  { 0xc0400000u, { 0xc4, 0xc4, 0xc2, 0xc2, 129, 128 }, "E8M0 -3: the scale of |x|" },
  { 0x40000000u, { 0x40, 0x40, 0x40, 0x40, 128, 128 }, "E8M0 2.0" },
  { 0x3f800001u, { 0x38, 0x38, 0x3c, 0x3c, 128, 127 }, "E8M0 just above 1: up to 2" },
  { 0x00400000u, { 0x00, 0x00, 0x00, 0x00, 0, 0 }, "E8M0 2^-127 itself" },
  { 0x00400001u, { 0x00, 0x00, 0x00, 0x00, 1, 0 }, "E8M0 just above 2^-127: up to 2^-126" },
  { 0x00800000u, { 0x00, 0x00, 0x00, 0x00, 1, 1 }, "E8M0 2^-126, the smallest normal f32" },
  { 0x00800001u, { 0x00, 0x00, 0x00, 0x00, 2, 1 }, "E8M0 just above 2^-126" },
  { 0x7f000000u, { 0x7e, 0x7f, 0x7b, 0x7c, 254, 254 }, "E8M0 2^127, the largest E8M0" },
  { 0x7f000001u, { 0x7e, 0x7f, 0x7b, 0x7c, 254, 254 }, "E8M0 above 2^127: up saturates to 254" },
  { 0xffc00001u, { 0x7f, 0x7f, 0x7f, 0x7f, 255, 255 }, "E8M0 negative NaN: 0xff" },
};
static const char *const out_name[NOUT] = { "e4m3 saturating", "e4m3 not saturating", "e5m2 saturating",
                                            "e5m2 not saturating", "e8m0 round up", "e8m0 round down" };

static void every_encoder_at_the_edges(void) {
  size_t i;
  int k;
  for (i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    float x = f32_of(edges[i].in);
    uint8_t got[NOUT];
    got[SAT4] = amp_f32_to_e4m3(x, 1); got[NOSAT4] = amp_f32_to_e4m3(x, 0);
    got[SAT5] = amp_f32_to_e5m2(x, 1); got[NOSAT5] = amp_f32_to_e5m2(x, 0);
    got[UP] = amp_f32_to_e8m0(x, 1); got[DOWN] = amp_f32_to_e8m0(x, 0);
    for (k = 0; k < NOUT; k++)
      EXPECT(got[k] == edges[i].want[k], "%s, %s: in 0x%08x expected 0x%02x got 0x%02x", out_name[k], edges[i].what,
             edges[i].in, edges[i].want[k], got[k]);
  }
}

/* ---- decodes ------------------------------------------------------------------------------ */

/* The value of a code from its fields, in double: E = 0: m * 2^(1 - B - M); else
   (2^M + m) * 2^(E - B - M); E4M3's S.1111.111 and E5M2's exponent 31 with m != 0 are NaN, E5M2's
   31 with m = 0 inf. Returns 1 for NaN, 2 for inf (*v unset then), else 0. */
static int ref_decode(int c, int e5m2, double *v) {
  int M = e5m2 ? 2 : 3, B = e5m2 ? 15 : 7, E = (c & 0x7f) >> M, m = c & ((1 << M) - 1);
  double s = (c & 0x80) ? -1.0 : 1.0;
  if (e5m2 ? (E == 31 && m) : (c & 0x7f) == 0x7f) return 1;
  if (e5m2 && E == 31) return 2;
  *v = s * (E ? ldexp((double)((1 << M) + m), E - B - M) : ldexp((double)m, 1 - B - M));
  return 0;
}
static void all_codes_decode_exactly(void) {
  int f, c;
  for (f = 0; f < 2; f++)
    for (c = 0; c < 256; c++) {
      double v = 0.0;
      float x = f ? amp_e5m2_to_f32((amp_fp8)c) : amp_e4m3_to_f32((amp_fp8)c);
      int kind = ref_decode(c, f, &v);
      if (kind == 1)
        EXPECT(nan_bits(x) && (bits_of(x) >> 31) == (unsigned)(c >> 7) && (bits_of(x) & 0x400000u),
               "%s code 0x%02x: expected a quiet NaN of its sign, got 0x%08x", f ? "e5m2" : "e4m3", c, bits_of(x));
      else if (kind == 2)
        EXPECT(bits_of(x) == (0x7f800000u | (uint32_t)(c >> 7) << 31), "e5m2 code 0x%02x: expected inf of its sign, got 0x%08x", c, bits_of(x));
      else
        EXPECT(bits_of(x) == bits_of((float)v), "%s code 0x%02x: expected %.9g got %.9g (0x%08x)", f ? "e5m2" : "e4m3", c, v, (double)x, bits_of(x));
    }
  EXPECT(amp_e4m3_to_f32(0x7e) == 448.0f && amp_e4m3_to_f32(0x01) == ldexpf(1.0f, -9) && amp_e4m3_to_f32(0x08) == ldexpf(1.0f, -6),
         "e4m3 448 / 2^-9 / 2^-6");
  EXPECT(bits_of(amp_e4m3_to_f32(0x80)) == 0x80000000u && bits_of(amp_e5m2_to_f32(0x80)) == 0x80000000u, "-0 decodes as -0");
  EXPECT(amp_e5m2_to_f32(0x7b) == 57344.0f && amp_e5m2_to_f32(0x01) == ldexpf(1.0f, -16) && bits_of(amp_e5m2_to_f32(0xfc)) == 0xff800000u,
         "e5m2 57344 / 2^-16 / -inf");
}
/* Each non-NaN code comes back from its value in both modes (E5M2's inf saturating: max). */
static void round_trips(void) {
  int f, c, s;
  for (f = 0; f < 2; f++)
    for (s = 0; s < 2; s++)
      for (c = 0; c < 256; c++) {
        double v;
        int want = c;
        uint8_t got;
        if (ref_decode(c, f, &v) == 1) continue;
        if (f && s && (c & 0x7f) == 0x7c) want = (c & 0x80) | 0x7b;
        got = f ? amp_f32_to_e5m2(amp_e5m2_to_f32((amp_fp8)c), s) : amp_f32_to_e4m3(amp_e4m3_to_f32((amp_fp8)c), s);
        EXPECT(got == want, "%s saturate %d: code 0x%02x came back as 0x%02x", f ? "e5m2" : "e4m3", s, c, got);
      }
}

/* ---- the bulk loops ----------------------------------------------------------------------- */


static uint32_t rng = 12345u;
static uint32_t next_u32(void) { rng = rng * 1664525u + 1013904223u; return rng ^ (rng >> 15); }

/* f32 -> fp8 and back at addresses 0..3 bytes off and every length 0..100: the scalar functions'
   bits, and no byte written outside the range. Inputs from every binade, the edges among them. */
static void bulk_tails_and_odd_addresses(void) {
  enum { N = 100 };
  float in[N];
  unsigned char src[4 * N + 8], dst[4 * N + 16], dec[4 * N + 16];
  int l, f, off, n, i;
  for (i = 0; i < N; i++) in[i] = f32_of(i < (int)(sizeof edges / sizeof edges[0]) ? edges[i].in : next_u32());
  for (l = 0; l < t_simd_levels(); l++) {
    t_simd_level(l);
    for (f = 0; f < 2; f++)
      for (off = 0; off < 4; off++)
        for (n = 0; n <= N; n++) {
          amp_fp8 want[N];
          float back[N];
          memcpy(src + off, in, sizeof in);
          memset(dst, 0xa5, sizeof dst);
          amp__fp8_bulk(dst + off, src + off, (size_t)n, f, 0);
          for (i = 0; i < n; i++) want[i] = f ? amp_f32_to_e5m2(in[i], 1) : amp_f32_to_e4m3(in[i], 1);
          EXPECT(memcmp(dst + off, want, (size_t)n) == 0, "level %d %s: f32 -> fp8, offset %d, n %d differs", l, f ? "e5m2" : "e4m3", off, n);
          EXPECT(dst[off + n] == 0xa5 && (off == 0 || dst[off - 1] == 0xa5), "level %d: f32 -> fp8 wrote outside, offset %d n %d", l, off, n);
          memset(dec, 0xa5, sizeof dec);
          amp__fp8_bulk(dec + off, dst + off, (size_t)n, f, 1);
          for (i = 0; i < n; i++) back[i] = f ? amp_e5m2_to_f32(want[i]) : amp_e4m3_to_f32(want[i]);
          EXPECT(memcmp(dec + off, back, (size_t)n * 4) == 0, "level %d %s: fp8 -> f32, offset %d, n %d differs", l, f ? "e5m2" : "e4m3", off, n);
          EXPECT(dec[off + 4 * n] == 0xa5 && (off == 0 || dec[off - 1] == 0xa5), "level %d: fp8 -> f32 wrote outside, offset %d n %d", l, off, n);
        }
  }
  t_simd_level(2);
  amp_simd_enable(1);
}

/* amp_convert: every f16 and every bf16 pattern into fp8 (saturating), at every level: the f32
   conversion of the widened value (f16 and bf16 widen exactly). Every fp8 code out to f16 and
   bf16: exact, so the f16/bf16 rounding of the f32 value is the value itself. The source one byte
   off as well. */
static void f16_bf16_to_fp8_as_through_f32(void) {
  uint16_t *h = (uint16_t *)malloc(65536 * 2 + 2);
  amp_fp8 *q = (amp_fp8 *)malloc(65536), codes[256];
  uint16_t out[256];
  int l, f, t, i;
  for (i = 0; i < 256; i++) codes[i] = (amp_fp8)i;
  for (l = 0; l < t_simd_levels(); l++) {
    t_simd_level(l);
    for (t = 0; t < 2; t++) {
      amp_dtype st = t ? AMP_BF16 : AMP_F16;
      for (i = 0; i < 65536; i++) h[i] = (uint16_t)i;
      for (f = 0; f < 2; f++) {
        int bad = 0, first = -1, off;
        for (off = 0; off < 2; off++) {
          if (off) { memmove((char *)h + 1, h, 65536 * 2); }
          amp_convert(q, f ? AMP_E5M2 : AMP_E4M3, (char *)h + off, st, 65536);
          if (off) memmove(h, (char *)h + 1, 65536 * 2);
          for (i = 0; i < 65536; i++) {
            float x = t ? amp_bf16_to_f32((amp_bf16)i) : amp_f16_to_f32((amp_f16)i);
            amp_fp8 w = f ? amp_f32_to_e5m2(x, 1) : amp_f32_to_e4m3(x, 1);
            if (q[i] != w) { bad++; if (first < 0) first = i; }
          }
        }
        EXPECT(bad == 0, "level %d: %s -> %s: %d differ from the f32 conversion, first 0x%04x", l, t ? "bf16" : "f16",
               f ? "e5m2" : "e4m3", bad, first);
        amp_convert(out, st, codes, f ? AMP_E5M2 : AMP_E4M3, 256);
        for (i = 0, bad = 0; i < 256; i++) {
          float x = f ? amp_e5m2_to_f32((amp_fp8)i) : amp_e4m3_to_f32((amp_fp8)i);
          uint16_t w = t ? amp_f32_to_bf16(x) : amp_f32_to_f16(x);
          float back = t ? amp_bf16_to_f32(out[i]) : amp_f16_to_f32(out[i]);
          bad += out[i] != w || (!nan_bits(x) && bits_of(back) != bits_of(x));
        }
        EXPECT(bad == 0, "level %d: %s -> %s: %d codes not exact", l, f ? "e5m2" : "e4m3", t ? "bf16" : "f16", bad);
      }
    }
  }
  t_simd_level(2);
  amp_simd_enable(1);
  free(h); free(q);
}

/* The bulk loops into fp8 and back at every level with streaming stores (the library's threshold
   set to 0: every call streams after its aligning head; an f32 output streams only at an offset
   that is a multiple of 4) and with ordinary ones, under each rounding mode of
   the FPU and, on x86, with flush-to-zero and denormals-are-zero set (what -Ofast sets at
   startup): the vector loops round with float instructions whose rounding is in the instruction,
   so the bits must not move. Inputs: the edges, then random signs and mantissas in the binades
   around both formats' ranges, and their ties and neighbours. */
static void bulk_under_every_fpu_mode_and_streaming(void) {
  enum { N = 3000 };
  static float in[N];
  static amp_fp8 want[2][N];
  static unsigned char dst[N + 80], dec[4 * N + 80];
  static float back[2][N];
  static const int modes[] = { FE_TONEAREST,
#ifdef FE_UPWARD
                               FE_UPWARD,
#endif
#ifdef FE_DOWNWARD
                               FE_DOWNWARD,
#endif
#ifdef FE_TOWARDZERO
                               FE_TOWARDZERO,
#endif
  };
  int l, f, m, ftz, nt, off, i, nmodes = (int)(sizeof modes / sizeof modes[0]);
  for (i = 0; i < N; i++) {
    uint32_t r = next_u32(), e = 90u + next_u32() % 80u, mant = r & 0x7fffffu;
    if (i % 3 == 1) mant = ((mant >> 16) << 16) + (r >> 30) - 1u;   /* at or beside a tie of either format */
    in[i] = i < (int)(sizeof edges / sizeof edges[0]) ? f32_of(edges[i].in) : f32_of((r & 0x80000000u) | (e << 23) | (mant & 0x7fffffu));
  }
  for (f = 0; f < 2; f++)
    for (i = 0; i < N; i++) {
      want[f][i] = f ? amp_f32_to_e5m2(in[i], 1) : amp_f32_to_e4m3(in[i], 1);
      back[f][i] = f ? amp_e5m2_to_f32(want[f][i]) : amp_e4m3_to_f32(want[f][i]);
    }
  for (l = 0; l < t_simd_levels(); l++) {
    t_simd_level(l);
    for (ftz = 0; ftz < 2; ftz++)
      for (m = 0; m < nmodes; m++)
        for (nt = 0; nt < 2; nt++)
          for (f = 0; f < 2; f++)
            for (off = 0; off < 4; off++) {
#if defined(AMP__X86_SIMD)
              size_t keep = amp__nt_bytes;
              unsigned csr = _mm_getcsr();
              if (ftz) _mm_setcsr(csr | 0x8040u);   /* FTZ and DAZ */
              if (nt) amp__nt_bytes = 0;
#else
              if (ftz || nt) continue;   /* no MXCSR, no streaming stores */
#endif
              EXPECT(fesetround(modes[m]) == 0, "fesetround(%d)", modes[m]);
              memset(dst, 0xa5, sizeof dst);
              memset(dec, 0xa5, sizeof dec);
              amp__fp8_bulk(dst + off, in, N, f, 0);
              amp__fp8_bulk(dec + off, want[f], N, f, 1);
              fesetround(FE_TONEAREST);
#if defined(AMP__X86_SIMD)
              _mm_setcsr(csr);
              amp__nt_bytes = keep;
#endif
              EXPECT(memcmp(dst + off, want[f], N) == 0 && dst[off + N] == 0xa5 && (off == 0 || dst[off - 1] == 0xa5),
                     "level %d %s, rounding mode %d, ftz/daz %d, streaming %d, offset %d: differs or wrote outside", l,
                     f ? "e5m2" : "e4m3", modes[m], ftz, nt, off);
              EXPECT(memcmp(dec + off, back[f], 4 * N) == 0 && dec[off + 4 * N] == 0xa5 && (off == 0 || dec[off - 1] == 0xa5),
                     "level %d %s -> f32, rounding mode %d, ftz/daz %d, streaming %d, offset %d: differs or wrote outside", l,
                     f ? "e5m2" : "e4m3", modes[m], ftz, nt, off);
            }
  }
  t_simd_level(2);
  amp_simd_enable(1);
}

/* amp_convert between f32 and fp8 is the bulk loop (every level), and E4M3 <-> E5M2 goes through
   f32: every code of one format to the other is the other's saturating rounding of its value;
   into fp8 in place over a shifted overlap of one byte too (the two formats have one size). */
static void amp_convert_takes_every_fp8_pair(void) {
  enum { N = 4099 };
  static float x[N];
  static amp_fp8 a[N], b[N], codes[256], out[258];
  int l, f, i, bad;
  uint64_t r = 99;
  for (i = 0; i < N; i++) {
    uint32_t u;
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    u = (uint32_t)(r >> 32);
    memcpy(&x[i], &u, 4);
  }
  for (l = 0; l < t_simd_levels(); l++) {
    t_simd_level(l);
    for (f = 0; f < 2; f++) {
      amp_dtype t = f ? AMP_E5M2 : AMP_E4M3, o = f ? AMP_E4M3 : AMP_E5M2;
      EXPECT(amp_convert(a, t, x, AMP_F32, N) == AMP_OK, "level %d: %s", l, amp_last_error());
      amp__fp8_bulk(b, x, N, f, 0);
      EXPECT(memcmp(a, b, N) == 0, "level %d: amp_convert f32 -> %s differs from the bulk loop", l, f ? "e5m2" : "e4m3");
      for (i = 0; i < 256; i++) codes[i] = (amp_fp8)i;
      EXPECT(amp_convert(out, o, codes, t, 256) == AMP_OK, "level %d: %s", l, amp_last_error());
      for (i = 0, bad = 0; i < 256; i++) {
        float v = f ? amp_e5m2_to_f32((amp_fp8)i) : amp_e4m3_to_f32((amp_fp8)i);
        bad += out[i] != (f ? amp_f32_to_e4m3(v, 1) : amp_f32_to_e5m2(v, 1));
      }
      EXPECT(bad == 0, "level %d: %s -> %s: %d codes differ", l, f ? "e5m2" : "e4m3", f ? "e4m3" : "e5m2", bad);
      for (i = 0; i < 256; i++) out[i + 1] = (amp_fp8)i;   /* in place, shifted by one */
      EXPECT(amp_convert(out, o, out + 1, t, 256) == AMP_OK, "level %d: %s", l, amp_last_error());
      for (i = 0, bad = 0; i < 256; i++) {
        float v = f ? amp_e5m2_to_f32((amp_fp8)i) : amp_e4m3_to_f32((amp_fp8)i);
        bad += out[i] != (f ? amp_f32_to_e4m3(v, 1) : amp_f32_to_e5m2(v, 1));
      }
      EXPECT(bad == 0, "level %d: %s -> %s over a shifted overlap: %d codes differ", l, f ? "e5m2" : "e4m3", f ? "e4m3" : "e5m2", bad);
    }
  }
  t_simd_level(2);
  amp_simd_enable(1);
}

/* Every f32 top half (sign, exponent, the mantissa's top 7 bits) with the low halves that hold
   every tie and its neighbours of both formats (a tie of either is at mantissa bit 19 or 20 or
   above, subnormal results included, so the low 16 bits are 0 there) and a random one, through
   the bulk loop at every level: the scalar functions' codes (half a million inputs a format, short
   enough under qemu; tests/test_fp8_exhaustive.c takes every f32 on x86), and all 256 codes of
   each format back to f32: amp_e4m3_to_f32 / amp_e5m2_to_f32's bits. */
static void every_top_half_and_every_code_at_every_level(void) {
  enum { LOWS = 8, N = 65536 * LOWS };
  static const uint16_t lows[LOWS - 1] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
  static float in[N], back[256], want_back[256];
  static amp_fp8 got[N], codes[256];
  int l, f;
  size_t i;
  for (i = 0; i < N; i++) {
    uint32_t lo = i % LOWS < LOWS - 1 ? lows[i % LOWS] : next_u32() & 0xffffu;
    in[i] = f32_of((uint32_t)(i / LOWS) << 16 | lo);
  }
  for (i = 0; i < 256; i++) codes[i] = (amp_fp8)i;
  for (l = 0; l < t_simd_levels(); l++) {
    t_simd_level(l);
    for (f = 0; f < 2; f++) {
      size_t bad = 0, first = 0;
      amp__fp8_bulk(got, in, N, f, 0);
      for (i = 0; i < N; i++)
        if (got[i] != (f ? amp_f32_to_e5m2(in[i], 1) : amp_f32_to_e4m3(in[i], 1)) && !bad++) first = i;
      EXPECT(bad == 0, "level %d %s: %zu of %d inputs differ from the scalar function, first 0x%08x -> 0x%02x, want 0x%02x", l,
             f ? "e5m2" : "e4m3", bad, N, bits_of(in[first]), got[first],
             f ? amp_f32_to_e5m2(in[first], 1) : amp_f32_to_e4m3(in[first], 1));
      amp__fp8_bulk(back, codes, 256, f, 1);
      for (i = 0; i < 256; i++) want_back[i] = f ? amp_e5m2_to_f32((amp_fp8)i) : amp_e4m3_to_f32((amp_fp8)i);
      EXPECT(memcmp(back, want_back, sizeof back) == 0, "level %d %s: a code decodes to other bits than the scalar function's", l,
             f ? "e5m2" : "e4m3");
    }
  }
  t_simd_level(2);
  amp_simd_enable(1);
}

int main(void) {
  RUN(every_encoder_at_the_edges);
  RUN(all_codes_decode_exactly);
  RUN(round_trips);
  RUN(bulk_tails_and_odd_addresses);
  RUN(f16_bf16_to_fp8_as_through_f32);
  RUN(amp_convert_takes_every_fp8_pair);
  RUN(bulk_under_every_fpu_mode_and_streaming);
  RUN(every_top_half_and_every_code_at_every_level);
  TEST_END();
}
