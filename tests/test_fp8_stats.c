/* tests/test_fp8_stats.c - fp8 cast telemetry: amp_quantize_ex's counts, the fp8 scaler's stats.

   The counts of amp_quantize_ex against a count written here from the public scalar casts, not
   from amp.h's classification: an element is saturated when the saturating cast gives another
   code than the plain one (amp_f32_to_e4m3 / _e5m2 with saturate 1 and 0) and y is not NaN;
   flushed when x is nonzero and not NaN and its code is +-0; NaN when x is. At every SIMD level,
   every input type, both formats, scales from 0 to FLT_MAX, inf and NaN, every tail length, odd
   addresses, q and amax_out NULL; the edge values by name (exactly fmax, the tie above it and
   the float past it, inf, NaN, the tie below the smallest subnormal and the float past it, -0 and
   0); the scaler's stats over steps (update moves and clears; amax_used and scale_used; scales,
   histories and codes the same as without stats; checkpoints hold no counts); stats off; every
   refusal. Tests by bits: the -Ofast builds fold isnan() away. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <math.h>

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float f32_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static int nan_bits(float x) { return (bits_of(x) & 0x7fffffffu) > 0x7f800000u; }

static uint32_t rng = 88172645u;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }

/* ---- the count, written again ---------------------------------------------------------------- */

/* x[i] widened to f32 through the public conversions */
static float widen(const void *x, amp_dtype t, size_t i) {
  if (t == AMP_F16) { amp_f16 h; memcpy(&h, (const char *)x + 2 * i, 2); return amp_f16_to_f32(h); }
  if (t == AMP_BF16) { amp_bf16 h; memcpy(&h, (const char *)x + 2 * i, 2); return amp_bf16_to_f32(h); }
  { float v; memcpy(&v, (const char *)x + 4 * i, 4); return v; }
}
static void store_as(void *x, amp_dtype t, size_t i, float v) {
  if (t == AMP_F16) { amp_f16 h = amp_f32_to_f16(v); memcpy((char *)x + 2 * i, &h, 2); }
  else if (t == AMP_BF16) { amp_bf16 h = amp_f32_to_bf16(v); memcpy((char *)x + 2 * i, &h, 2); }
  else memcpy((char *)x + 4 * i, &v, 4);
}
static amp_fp8 cast(float y, int e5m2, int sat) { return e5m2 ? amp_f32_to_e5m2(y, sat) : amp_f32_to_e4m3(y, sat); }

/* want[0..3] += n, saturated, flushed, NaN of the cast of x * k; codes into q (may be NULL) */
static void ref_count(const void *x, amp_dtype t, size_t n, float k, int e5m2, uint64_t *want, amp_fp8 *q) {
  size_t i;
  for (i = 0; i < n; i++) {
    float v = widen(x, t, i);
    volatile float y = v * k;   /* one IEEE product, as the cast's */
    amp_fp8 c = cast(y, e5m2, 1);
    uint32_t a = bits_of(v) & 0x7fffffffu;
    if (q) q[i] = c;
    want[1] += !nan_bits(y) && c != cast(y, e5m2, 0);
    want[2] += a != 0u && !nan_bits(v) && (c & 0x7fu) == 0u;
    want[3] += nan_bits(v);
  }
  want[0] += n;
}

/* the values the counts turn on, as f32 bits (E4M3: 448 is fmax, 464 the tie that rounds to it,
   2^-10 the tie below 2^-9, the smallest subnormal; E5M2: 57344, 61440, 2^-17 below 2^-16) */
static const uint32_t edges[] = {
  0x43e00000u /* 448 */, 0x43e80000u /* 464 */, 0x43e80001u, 0x43f00000u /* 480 */, 0x47600000u /* 57344 */,
  0x476fffffu, 0x47700000u /* 61440 */, 0x47700001u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
  0x7f800001u, 0x3a800000u /* 2^-10 */, 0x3a800001u, 0x3a7fffffu, 0xba800000u, 0x37000000u /* 2^-17 */,
  0x37000001u, 0xb6ffffffu, 0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3b000000u /* 2^-9 */,
  0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0x0da24260u };
#define N_EDGES (sizeof edges / sizeof edges[0])

static float random_x(void) {
  uint32_t r = next_u32() % 64;
  if (r < 6) return f32_of(edges[next_u32() % N_EDGES]);
  if (r == 6) return f32_of(0x7fc00000u | (next_u32() & 0x803fffffu));   /* NaN, either sign, a payload */
  if (r == 7) return f32_of(next_u32() & 0x807fffffu);                   /* subnormal */
  return f32_of((next_u32() & 0x80000000u) | ((95u + next_u32() % 70u) << 23) | (next_u32() & 0x7fffffu));
}

static void counts_equal_an_independent_count_at_every_level(void) {
  static const size_t lens[] = { 0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 1000, 4099 };
  static const float scales[] = { 1.0f, 0.37f, 1024.0f, 3.4028235e38f, 0.0f, 1e-30f, 6.5e-6f };
  enum { MAXN = 4099 + 8, NS = sizeof scales / sizeof scales[0] };
  static float xs[MAXN], xbuf_[MAXN + 8];
  static unsigned char q[MAXN + 8], want_q[MAXN + 8];
  unsigned char *xbuf = (unsigned char *)xbuf_;
  amp_dtype xt;
  int lv, s, f, off, checked = 0;
  size_t li, i;
  for (i = 0; i < MAXN; i++) xs[i] = random_x();
  for (lv = 0; lv < t_simd_levels(); lv++) {
    t_simd_level(lv);
    for (xt = AMP_F32; xt <= AMP_BF16; xt = (amp_dtype)(xt + 1))
      for (f = 0; f < 2; f++)
        for (s = 0; s < NS + 3; s++)
          for (li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (off = 0; off < 2; off++) {
              size_t n = lens[li];
              amp_dtype fmt = f ? AMP_E5M2 : AMP_E4M3;
              unsigned char *x = xbuf + off * amp_dtype_size(xt);   /* a start that is not 16-byte aligned */
              float inf = f32_of(0x7f800000u), nan = f32_of(0x7fc00000u);
              const float *sc = s < NS ? &scales[s] : s == NS ? &inf : s == NS + 1 ? &nan : NULL;
              float k = sc ? *sc : 1.0f, amax = 0.0f, amax2 = 0.0f;
              uint64_t want[4] = { 5, 6, 7, 8 }, got[4] = { 5, 6, 7, 8 }, got2[4] = { 0, 0, 0, 0 };
              if (t_quick() && (li + (size_t)s + (size_t)off) % 3 != 0) continue;
              for (i = 0; i < n; i++) store_as(x, xt, i, xs[(i * 7 + li * 13 + (size_t)s) % MAXN]);
              ref_count(x, xt, n, k, f, want, want_q);
              memset(q, 0xa5, n + 8);
              EXPECT(amp_quantize_ex(amp_cpu(), q, fmt, x, xt, n, sc, &amax, got) == AMP_OK, "%s", amp_last_error());
              EXPECT(memcmp(got, want, sizeof want) == 0,
                     "level %d x_type %d fmt %d scale %d n %zu: counts %llu %llu %llu %llu, want %llu %llu %llu %llu",
                     lv, (int)xt, f, s, n, (unsigned long long)got[0], (unsigned long long)got[1],
                     (unsigned long long)got[2], (unsigned long long)got[3], (unsigned long long)want[0],
                     (unsigned long long)want[1], (unsigned long long)want[2], (unsigned long long)want[3]);
              EXPECT(memcmp(q, want_q, n) == 0 && q[n] == 0xa5, "level %d x_type %d fmt %d n %zu: codes differ", lv,
                     (int)xt, f, n);
              /* the same counts with q NULL, with amax_out NULL, and the amax of amp_quantize */
              EXPECT(amp_quantize_ex(amp_cpu(), NULL, fmt, x, xt, n, sc, &amax2, got2) == AMP_OK, "%s", amp_last_error());
              EXPECT(amp_quantize_ex(amp_cpu(), q, fmt, x, xt, n, sc, NULL, got2) == AMP_OK, "%s", amp_last_error());
              EXPECT(got2[0] == 2 * (want[0] - 5) && got2[1] == 2 * (want[1] - 6) && got2[2] == 2 * (want[2] - 7) &&
                         got2[3] == 2 * (want[3] - 8), "level %d n %zu: q NULL / amax NULL count otherwise", lv, n);
              amax2 = 0.0f;
              EXPECT(amp_quantize(amp_cpu(), NULL, fmt, x, xt, n, sc, &amax2) == AMP_OK && bits_of(amax2) == bits_of(amax),
                     "level %d n %zu: amax %a with counts, %a without", lv, n, (double)amax, (double)amax2);
              checked++;
            }
  }
  t_simd_level(2);
  EXPECT(checked >= (t_quick() ? 600 : 2000), "only %d casts checked", checked);
}

/* The edges by name, with the counts written out: a test that does not lean on the reference. */
static void edge_values_count_as_named(void) {
  static const struct {
    uint32_t x; int e5m2; uint32_t k;   /* x's and the scale's bits */
    int sat, flushed, nan; const char *what;
  } cases[] = {
    { 0x43e00000u, 0, 0x3f800000u, 0, 0, 0, "E4M3 448 (fmax) is not saturated" },
    { 0x43e80000u, 0, 0x3f800000u, 0, 0, 0, "E4M3 464 (the tie, rounds to 448) is not saturated" },
    { 0x43e80001u, 0, 0x3f800000u, 1, 0, 0, "E4M3 the float past 464 is saturated" },
    { 0x3f800000u, 0, 0x43e80000u, 0, 0, 0, "E4M3 1 * 464 is not saturated" },
    { 0x3f800001u, 0, 0x43e80000u, 1, 0, 0, "E4M3 (1 + ulp) * 464 is saturated" },
    { 0x47600000u, 1, 0x3f800000u, 0, 0, 0, "E5M2 57344 (fmax) is not saturated" },
    { 0x476fffffu, 1, 0x3f800000u, 0, 0, 0, "E5M2 the float below 61440 is not saturated" },
    { 0x47700000u, 1, 0x3f800000u, 1, 0, 0, "E5M2 61440 (the tie, rounds to inf) is saturated" },
    { 0x7f800000u, 0, 0x3f800000u, 1, 0, 0, "E4M3 inf is saturated" },
    { 0xff800000u, 1, 0x3f800000u, 1, 0, 0, "E5M2 -inf is saturated" },
    { 0x3f800000u, 0, 0x00000000u, 0, 1, 0, "1 at scale 0 is flushed" },
    { 0x7f800000u, 0, 0x00000000u, 0, 0, 0, "inf at scale 0 (NaN) is in no count" },
    { 0x7fc00000u, 0, 0x3f800000u, 0, 0, 1, "NaN is counted as NaN" },
    { 0xffc00001u, 1, 0x3f800000u, 0, 0, 1, "-NaN with a payload is NaN" },
    { 0x3a800000u, 0, 0x3f800000u, 0, 1, 0, "E4M3 2^-10 (the tie below 2^-9) flushes" },
    { 0x3a800001u, 0, 0x3f800000u, 0, 0, 0, "E4M3 the float past 2^-10 rounds to 2^-9" },
    { 0xba800000u, 0, 0x3f800000u, 0, 1, 0, "E4M3 -2^-10 flushes" },
    { 0x37000000u, 1, 0x3f800000u, 0, 1, 0, "E5M2 2^-17 flushes" },
    { 0x37000001u, 1, 0x3f800000u, 0, 0, 0, "E5M2 the float past 2^-17 rounds to 2^-16" },
    { 0x3a800001u, 1, 0x3f800000u, 0, 0, 0, "E5M2 2^-10 is a subnormal code" },
    { 0x00000001u, 0, 0x3f800000u, 0, 1, 0, "an f32 subnormal flushes" },
    { 0x00000000u, 0, 0x3f800000u, 0, 0, 0, "0 is not flushed" },
    { 0x80000000u, 1, 0x3f800000u, 0, 0, 0, "-0 is not flushed" },
    { 0x3f800000u, 0, 0x7fc00000u, 0, 0, 0, "1 at a NaN scale is in no count" },
    { 0x3f800000u, 1, 0x7f800000u, 1, 0, 0, "1 at an inf scale is saturated" },
  };
  size_t c;
  int lv, len;
  for (lv = 0; lv < t_simd_levels(); lv++) {
    t_simd_level(lv);
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++)
      for (len = 1; len <= 40; len += 39) {   /* alone (a tail), and at lane 37 of 40 (inside a vector) */
        float x[40], k = f32_of(cases[c].k);
        unsigned char q[40];
        uint64_t got[4] = { 0, 0, 0, 0 };
        int i;
        for (i = 0; i < len; i++) x[i] = 0.0f;
        x[len - 3 > 0 ? len - 3 : 0] = f32_of(cases[c].x);
        EXPECT(amp_quantize_ex(amp_cpu(), q, cases[c].e5m2 ? AMP_E5M2 : AMP_E4M3, x, AMP_F32, (size_t)len, &k,
                               NULL, got) == AMP_OK, "%s", amp_last_error());
        EXPECT(got[0] == (uint64_t)len && got[1] == (uint64_t)cases[c].sat && got[2] == (uint64_t)cases[c].flushed &&
                   got[3] == (uint64_t)cases[c].nan, "level %d n %d: %s (got %llu saturated, %llu flushed, %llu NaN)", lv,
               len, cases[c].what, (unsigned long long)got[1], (unsigned long long)got[2], (unsigned long long)got[3]);
      }
  }
  t_simd_level(2);
}

/* ---- the scaler's stats ------------------------------------------------------------------------ */

static float hist_amax(const float *h, int len, int max) {   /* the amax the recipe reads, written again */
  float a = 0.0f;
  int j;
  if (!max) return h[0];
  for (j = 0; j < len; j++)
    if (!nan_bits(h[j]) && !(bits_of(h[j]) >> 31) && h[j] > a) a = h[j];
  return a;
}

static void stats_follow_the_steps(void) {
  enum { NT = 3, N = 301 };
  amp_dtype fmt[NT] = { AMP_E4M3, AMP_E5M2, AMP_E4M3 };
  int round;
  for (round = 0; round < 4; round++) {
    amp_fp8_config c;
    amp_fp8_scaler *f = NULL, *plain = NULL;
    int step, i, len, lv = round % t_simd_levels();
    t_simd_level(lv);
    memset(&c, 0, sizeof c);
    c.recipe = round == 3 ? AMP_FP8_CURRENT : AMP_FP8_DELAYED;
    if (round < 3) { c.history_len = round == 2 ? 1 : 4; c.most_recent = round == 1; }
    len = c.history_len ? c.history_len : 1;
    EXPECT(amp_fp8_scaler_create(&plain, amp_cpu(), &c, NT, fmt) == AMP_OK, "%s", amp_last_error());
    c.stats = 7;   /* any nonzero is on */
    EXPECT(amp_fp8_scaler_create(&f, amp_cpu(), &c, NT, fmt) == AMP_OK, "%s", amp_last_error());
    if (!f || !plain) return;
    EXPECT(amp_fp8_scaler_config(f).stats == 1 && amp_fp8_scaler_config(plain).stats == 0, "resolved stats %d / %d",
           amp_fp8_scaler_config(f).stats, amp_fp8_scaler_config(plain).stats);
    for (i = 0; i < NT; i++) {   /* before the first update: all 0 */
      amp_fp8_stats st;
      memset(&st, 0xff, sizeof st);
      EXPECT(amp_fp8_scaler_stats(f, (size_t)i, &st) == AMP_OK && st.n == 0 && st.saturated == 0 && st.flushed == 0 &&
                 st.nan == 0 && st.amax_used == 0.0f && st.scale_used == 0.0f, "fresh stats are not 0");
    }
    for (step = 0; step < 12; step++) {
      uint64_t want[NT][4];
      float scale_before[NT], amax_want[NT];
      for (i = 0; i < NT; i++) {
        static float x[N];
        unsigned char qa[N], qb[N];
        int j, casts = 1 + (step + i) % 2;   /* one or two casts of the tensor this step */
        uint64_t *cp = amp_fp8_scaler_counts_ptr(f, (size_t)i);
        memset(want[i], 0, sizeof want[i]);
        EXPECT(cp != NULL, "counts_ptr: %s", amp_last_error());
        if (!cp) return;
        EXPECT(cp[0] == 0 && cp[1] == 0 && cp[2] == 0 && cp[3] == 0, "step %d tensor %d: this step's counts not cleared", step, i);
        scale_before[i] = amp_fp8_scaler_get_scale(f, (size_t)i);
        for (j = 0; j < casts; j++) {
          int e, nn = N - 17 * j;
          float spread = step == 5 && i == 0 ? 1e4f : 1.0f;   /* a spike: saturates at the old scale */
          for (e = 0; e < nn; e++) {
            float u = (float)((next_u32() % 2001u)) / 1000.0f - 1.0f;
            x[e] = u * spread * (float)ldexp(1.0, (int)(next_u32() % 24u) - 20 + step);
          }
          if (step == 7) x[3] = f32_of(0x7fc00000u);
          ref_count(x, AMP_F32, (size_t)nn, scale_before[i], fmt[i] == AMP_E5M2, want[i], qa);
          EXPECT(amp_quantize_ex(amp_cpu(), qb, fmt[i], x, AMP_F32, (size_t)nn, amp_fp8_scaler_scale_ptr(f, (size_t)i),
                                 amp_fp8_scaler_amax_ptr(f, (size_t)i), cp) == AMP_OK, "%s", amp_last_error());
          EXPECT(memcmp(qa, qb, (size_t)nn) == 0, "step %d tensor %d: codes differ", step, i);
          EXPECT(amp_quantize(amp_cpu(), qa, fmt[i], x, AMP_F32, (size_t)nn, amp_fp8_scaler_scale_ptr(plain, (size_t)i),
                              amp_fp8_scaler_amax_ptr(plain, (size_t)i)) == AMP_OK, "%s", amp_last_error());
          EXPECT(memcmp(qa, qb, (size_t)nn) == 0, "step %d tensor %d: the codes without stats differ", step, i);
        }
        EXPECT(memcmp(cp, want[i], sizeof want[i]) == 0, "step %d tensor %d: this step's counts differ before update", step, i);
        {
          float h[4];
          amp_fp8_scaler_history(f, (size_t)i, h, len);
          amax_want[i] = hist_amax(h, len, c.recipe == AMP_FP8_DELAYED && !c.most_recent);
        }
      }
      EXPECT(amp_fp8_scaler_update(f) == AMP_OK && amp_fp8_scaler_update(plain) == AMP_OK, "%s", amp_last_error());
      for (i = 0; i < NT; i++) {
        amp_fp8_stats st;
        float ha[4], hb[4];
        uint64_t *cp = amp_fp8_scaler_counts_ptr(f, (size_t)i);
        EXPECT(amp_fp8_scaler_stats(f, (size_t)i, &st) == AMP_OK, "%s", amp_last_error());
        EXPECT(st.n == want[i][0] && st.saturated == want[i][1] && st.flushed == want[i][2] && st.nan == want[i][3],
               "round %d step %d tensor %d: stats %llu %llu %llu %llu, want %llu %llu %llu %llu", round, step, i,
               (unsigned long long)st.n, (unsigned long long)st.saturated, (unsigned long long)st.flushed,
               (unsigned long long)st.nan, (unsigned long long)want[i][0], (unsigned long long)want[i][1],
               (unsigned long long)want[i][2], (unsigned long long)want[i][3]);
        EXPECT(bits_of(st.scale_used) == bits_of(scale_before[i]) && bits_of(st.amax_used) == bits_of(amax_want[i]),
               "round %d step %d tensor %d: scale_used %g (want %g), amax_used %g (want %g)", round, step, i,
               (double)st.scale_used, (double)scale_before[i], (double)st.amax_used, (double)amax_want[i]);
        EXPECT(cp[0] == 0 && cp[1] == 0 && cp[2] == 0 && cp[3] == 0, "update left this step's counts");
        EXPECT(bits_of(amp_fp8_scaler_get_scale(f, (size_t)i)) == bits_of(amp_fp8_scaler_get_scale(plain, (size_t)i)),
               "round %d step %d: stats changed the scale", round, step);
        amp_fp8_scaler_history(f, (size_t)i, ha, len); amp_fp8_scaler_history(plain, (size_t)i, hb, len);
        EXPECT(memcmp(ha, hb, (size_t)len * sizeof(float)) == 0, "stats changed the history");
        if (step == 5 && i == 0 && round < 3) EXPECT(st.saturated > 0, "the spike step saturated nothing");
        if (step == 7) EXPECT(st.nan == (uint64_t)(1 + (step + i) % 2), "step 7: %llu NaN", (unsigned long long)st.nan);
      }
    }
    {   /* an update with no casts: the last step's counts are 0 again */
      amp_fp8_stats st;
      amp_fp8_scaler_update(f);
      EXPECT(amp_fp8_scaler_stats(f, 1, &st) == AMP_OK && st.n == 0 && st.saturated == 0, "a step without casts");
    }
    amp_fp8_scaler_destroy(f); amp_fp8_scaler_destroy(plain);
  }
  t_simd_level(2);
}

/* The counts are telemetry: a checkpoint holds none (the file of a scaler with stats is the file
   of one without), and a load leaves them as they are. */
#define STATS_CKPT "build/test/fp8_stats_a.ckpt"
#define PLAIN_CKPT "build/test/fp8_stats_b.ckpt"
static int file_bytes(const char *path, unsigned char *buf, size_t cap) {
  FILE *fp = fopen(path, "rb");
  size_t n = fp ? fread(buf, 1, cap, fp) : 0;
  if (fp) fclose(fp);
  return (int)n;
}
static void checkpoints_hold_no_counts(void) {
  static unsigned char fa[8192], fb[8192];
  amp_fp8_config c;
  amp_fp8_scaler *a = NULL, *b = NULL;
  float x[5] = { 1.0f, 1e9f, 1e-20f, 0.0f, 3.0f };
  uint64_t *cp, cp_before[4];
  amp_fp8_stats st, st_before;
  int na, nb, step;
  memset(&c, 0, sizeof c);
  c.history_len = 8;
  amp_fp8_scaler_create(&b, amp_cpu(), &c, 2, NULL);
  c.stats = 1;
  amp_fp8_scaler_create(&a, amp_cpu(), &c, 2, NULL);
  if (!a || !b) { EXPECT(0, "create: %s", amp_last_error()); return; }
  for (step = 0; step < 3; step++) {
    amp_quantize_ex(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, 5, amp_fp8_scaler_scale_ptr(a, 0), amp_fp8_scaler_amax_ptr(a, 0),
                    amp_fp8_scaler_counts_ptr(a, 0));
    amp_quantize(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, 5, amp_fp8_scaler_scale_ptr(b, 0), amp_fp8_scaler_amax_ptr(b, 0));
    amp_fp8_scaler_update(a); amp_fp8_scaler_update(b);
  }
  amp_quantize_ex(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, 5, NULL, amp_fp8_scaler_amax_ptr(a, 0), amp_fp8_scaler_counts_ptr(a, 0));
  amp_quantize(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, 5, NULL, amp_fp8_scaler_amax_ptr(b, 0));
  EXPECT(amp_fp8_scaler_save(a, STATS_CKPT) == AMP_OK && amp_fp8_scaler_save(b, PLAIN_CKPT) == AMP_OK, "%s", amp_last_error());
  na = file_bytes(STATS_CKPT, fa, sizeof fa); nb = file_bytes(PLAIN_CKPT, fb, sizeof fb);
  EXPECT(na > 0 && na == nb && memcmp(fa, fb, (size_t)na) == 0, "the files differ (%d and %d bytes)", na, nb);
  cp = amp_fp8_scaler_counts_ptr(a, 0);
  if (!cp) { EXPECT(0, "%s", amp_last_error()); return; }
  memcpy(cp_before, cp, sizeof cp_before);
  EXPECT(cp[0] == 5 && cp[1] == 1 && cp[2] == 1 && cp[3] == 0, "this step's counts (1e9 saturates, 1e-20 flushes)");
  EXPECT(amp_fp8_scaler_stats(a, 0, &st_before) == AMP_OK && st_before.n == 5 && st_before.flushed == 3,
         "the last step's counts: %llu flushed (1, 3 and 1e-20 at scale 448 / 1e9)", (unsigned long long)st_before.flushed);
  EXPECT(amp_fp8_scaler_load(a, PLAIN_CKPT) == AMP_OK, "a stats scaler loads a plain file: %s", amp_last_error());
  EXPECT(amp_fp8_scaler_load(b, STATS_CKPT) == AMP_OK, "and the other way: %s", amp_last_error());
  EXPECT(memcmp(cp, cp_before, sizeof cp_before) == 0, "the load changed this step's counts");
  EXPECT(amp_fp8_scaler_stats(a, 0, &st) == AMP_OK && memcmp(&st, &st_before, sizeof st) == 0,
         "the load changed the last step's stats");
  EXPECT(amp_fp8_scaler_config(b).stats == 0 && amp_fp8_scaler_config(a).stats == 1, "a load keeps the live config");
  amp_fp8_scaler_destroy(a); amp_fp8_scaler_destroy(b);
}

/* ---- stats off, bad input ----------------------------------------------------------------------- */

static void stats_off_and_bad_input_are_refused(void) {
  amp_fp8_scaler *f = NULL, *g = NULL;
  amp_fp8_config c;
  amp_fp8_stats st, before;
  float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, amax = 0.0f;
  uint64_t cnt[6] = { 1, 2, 3, 4, 5, 6 };
  unsigned char q[8];
  memset(&c, 0, sizeof c);
  EXPECT(amp_fp8_scaler_create(&f, amp_cpu(), &c, 2, NULL) == AMP_OK, "%s", amp_last_error());
  c.stats = 1;
  EXPECT(amp_fp8_scaler_create(&g, amp_cpu(), &c, 2, NULL) == AMP_OK, "%s", amp_last_error());
  if (!f || !g) return;
  memset(&st, 0x5a, sizeof st); before = st;
  EXPECT(amp_fp8_scaler_counts_ptr(f, 0) == NULL && strstr(amp_last_error(), "amp_fp8_scaler_counts_ptr") &&
             strstr(amp_last_error(), "stats are off"), "stats off: %s", amp_last_error());
  EXPECT(amp_fp8_scaler_stats(f, 0, &st) == AMP_ERR_STATE && strstr(amp_last_error(), "amp_fp8_scaler_stats: stats are off"),
         "stats off: %s", amp_last_error());
  EXPECT(memcmp(&st, &before, sizeof st) == 0, "a refused stats call wrote");
  EXPECT(amp_fp8_scaler_stats(NULL, 0, &st) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_fp8_scaler_stats: f is NULL"),
         "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_stats(g, 2, &st) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_fp8_scaler_stats: tensor 2 is out of range"),
         "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_stats(g, 0, NULL) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_fp8_scaler_stats: out is NULL"),
         "%s", amp_last_error());
  EXPECT(memcmp(&st, &before, sizeof st) == 0, "a refused stats call wrote");
  EXPECT(amp_fp8_scaler_counts_ptr(g, 2) == NULL && strstr(amp_last_error(), "amp_fp8_scaler_counts_ptr: tensor 2"),
         "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_counts_ptr(NULL, 0) == NULL && strstr(amp_last_error(), "amp_fp8_scaler_counts_ptr: f is NULL"),
         "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_counts_ptr(g, 1) == amp_fp8_scaler_counts_ptr(g, 0) + 4, "tensor 1's counters follow tensor 0's");

  /* amp_quantize_ex's refusals name it and change nothing (counts included) */
  memset(q, 0x5a, sizeof q);
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_BF16, x, AMP_F32, 4, NULL, &amax, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: fp8"), "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_E4M3, 4, NULL, &amax, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: x_type"), "%s", amp_last_error());
  EXPECT(amp_quantize_ex(NULL, q, AMP_E4M3, x, AMP_F32, 4, NULL, &amax, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: d is NULL"), "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, 4, NULL, NULL, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: q and amax_out are both NULL"), "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, NULL, AMP_F32, 4, NULL, &amax, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: x is NULL"), "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 4, NULL, &amax, (uint64_t *)((char *)cnt + 4)) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: counts") && strstr(amp_last_error(), "8-byte aligned"),
         "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), (unsigned char *)cnt + 8, AMP_E4M3, x, AMP_F32, 8, NULL, &amax, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: counts overlaps q"), "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), (unsigned char *)x + 3, AMP_E4M3, x, AMP_F32, 4, NULL, &amax, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: q overlaps x"), "%s", amp_last_error());
  /* a misaligned x, scale or amax_out (no element pointer may point there), an amax_out inside x
     or q (written after the pass: the amax lost, or read as x mid-pass) */
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, (const char *)x + 2, AMP_F32, 4, NULL, &amax, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: x") && strstr(amp_last_error(), "not aligned to its element size"),
         "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 4, (const float *)(const void *)((const char *)x + 1), &amax,
                         cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: scale") && strstr(amp_last_error(), "not aligned to 4 bytes"),
         "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 4, NULL, (float *)(void *)((char *)&amax + 1), cnt) ==
                 AMP_ERR_ARG && strstr(amp_last_error(), "amp_quantize_ex: amax_out"), "%s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 4, NULL, (float *)(void *)(q + (4u - (uintptr_t)q % 4u) % 4u), cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: amax_out") && strstr(amp_last_error(), "on q"),
         "%s", amp_last_error());
  {
    float k1 = 1.0f;
    EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 4, &k1, &k1, cnt) == AMP_ERR_ARG &&
               strstr(amp_last_error(), "amp_quantize_ex: amax_out") && strstr(amp_last_error(), "on scale"),
           "%s", amp_last_error());
    EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 4, NULL, (float *)(void *)(cnt + 1), cnt) == AMP_ERR_ARG &&
               strstr(amp_last_error(), "amp_quantize_ex: amax_out") && strstr(amp_last_error(), "on counts"),
           "%s", amp_last_error());
    EXPECT(k1 == 1.0f, "a refused call wrote the scale");
  }
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 4, NULL, x + 2, cnt) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize_ex: amax_out") && strstr(amp_last_error(), "on x"),
         "%s", amp_last_error());
  EXPECT(cnt[0] == 1 && cnt[1] == 2 && cnt[2] == 3 && cnt[3] == 4 && cnt[4] == 5 && amax == 0.0f, "a refused call wrote");
  {
    size_t i;
    for (i = 0; i < sizeof q; i++) EXPECT(q[i] == 0x5a, "byte %zu written by a refused call", i);
  }
  EXPECT(amp_quantize(amp_cpu(), q, AMP_BF16, x, AMP_F32, 4, NULL, &amax) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize: fp8"), "amp_quantize still names itself: %s", amp_last_error());
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, NULL, AMP_F32, 0, NULL, &amax, cnt) == AMP_OK && cnt[0] == 1,
         "n 0 is fine and counts nothing");
  EXPECT(amp_quantize_ex(amp_cpu(), q, AMP_E4M3, x, AMP_F32, 8, NULL, NULL, NULL) == AMP_OK, "counts NULL: none");
  amp_fp8_scaler_destroy(f); amp_fp8_scaler_destroy(g);
}

int main(void) {
  RUN(counts_equal_an_independent_count_at_every_level);
  RUN(edge_values_count_as_named);
  RUN(stats_follow_the_steps);
  RUN(checkpoints_hold_no_counts);
  RUN(stats_off_and_bad_input_are_refused);
  TEST_END();
}
