/* tests/test_convert.c - the number formats: named edge cases, every f16/bf16 pattern back to f32,
   round trips, amp_convert against the scalar functions on both paths (F16C/AVX2 and portable)
   for every pair of types, overlapping buffers, and bad input. The exhaustive sweep over all
   2^32 f32 patterns is tests/test_convert_exhaustive.c. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include "test_convert_ref.h"

static const amp_dtype types[3] = { AMP_F32, AMP_F16, AMP_BF16 };
static const char *tname(amp_dtype t) { return t == AMP_F32 ? "f32" : t == AMP_F16 ? "f16" : "bf16"; }

/* ---- edge cases --------------------------------------------------------------------------- */

typedef struct edge { uint32_t in; uint16_t want; const char *what; } edge;

static const edge f16_edges[] = {
  { 0x00000000u, 0x0000, "+0" },
  { 0x80000000u, 0x8000, "-0 keeps its sign" },
  { 0x7f800000u, 0x7c00, "+inf" },
  { 0xff800000u, 0xfc00, "-inf" },
  { 0x7fc00000u, 0x7e00, "quiet NaN" },
  { 0xffc00000u, 0xfe00, "negative quiet NaN" },
  { 0x7f800001u, 0x7e00, "signalling NaN, payload below the cut: quiet NaN, not inf" },
  { 0xff800001u, 0xfe00, "negative signalling NaN" },
  { 0x7fa00000u, 0x7f00, "signalling NaN, top payload bit kept, quiet bit set" },
  { 0x7f802000u, 0x7e01, "signalling NaN, lowest kept payload bit" },
  { 0x7fffffffu, 0x7fff, "NaN with every payload bit" },
  { 0xffbfe000u, 0xffff, "negative signalling NaN with a full kept payload" },
  { 0x3f800000u, 0x3c00, "1.0" },
  { 0x477fe000u, 0x7bff, "65504, the largest half" },
  { 0x477fefffu, 0x7bff, "65519.99 (just below 65520) rounds down to 65504" },
  { 0x477ff000u, 0x7c00, "65520, the overflow tie, rounds to even: inf" },
  { 0xc77ff000u, 0xfc00, "-65520 -> -inf" },
  { 0x47800000u, 0x7c00, "65536 -> inf" },
  { 0x7f7fffffu, 0x7c00, "FLT_MAX -> inf" },
  { 0x38800000u, 0x0400, "2^-14, the smallest normal" },
  { 0x387fc000u, 0x03ff, "1023 * 2^-24, the largest subnormal" },
  { 0x387fe000u, 0x0400, "1023.5 * 2^-24, subnormal tie carrying into the smallest normal" },
  { 0x387fffffu, 0x0400, "just below 2^-14 rounds up to it" },
  { 0x33800000u, 0x0001, "2^-24, the smallest subnormal" },
  { 0x33000000u, 0x0000, "2^-25, half the smallest subnormal, ties to even: 0" },
  { 0xb3000000u, 0x8000, "-2^-25 -> -0" },
  { 0x33000001u, 0x0001, "just above 2^-25 rounds up to 2^-24 (sticky bits count)" },
  { 0x32ffffffu, 0x0000, "just below 2^-25 -> 0" },
  { 0x33c00000u, 0x0002, "1.5 * 2^-24, subnormal tie rounds up to even 2" },
  { 0x34200000u, 0x0002, "2.5 * 2^-24, subnormal tie rounds down to even 2" },
  { 0x34200001u, 0x0003, "just above 2.5 * 2^-24 rounds up" },
  { 0x00000001u, 0x0000, "smallest f32 subnormal -> 0" },
  { 0x3f801000u, 0x3c00, "1 + 2^-11, normal tie rounds down to even" },
  { 0x3f803000u, 0x3c02, "1 + 3 * 2^-11, normal tie rounds up to even" },
  { 0x3f801001u, 0x3c01, "just above the tie rounds up" },
  { 0x3f800fffu, 0x3c00, "just below the tie rounds down" },
  { 0x3ffff000u, 0x4000, "2 - 2^-11, tie carrying into the exponent: 2.0" },
  { 0xbffff000u, 0xc000, "-(2 - 2^-11) -> -2.0" },
  { 0x477fd000u, 0x7bfe, "65488, tie between 65472 and 65504 rounds to even 65472" },
};

static const edge bf16_edges[] = {
  { 0x00000000u, 0x0000, "+0" },
  { 0x80000000u, 0x8000, "-0 keeps its sign" },
  { 0x7f800000u, 0x7f80, "+inf" },
  { 0xff800000u, 0xff80, "-inf" },
  { 0x7fc00000u, 0x7fc0, "quiet NaN" },
  { 0xffc00000u, 0xffc0, "negative quiet NaN" },
  { 0x7f800001u, 0x7fc0, "signalling NaN, payload below the cut: (bits >> 16) | 0x40, not inf" },
  { 0xff800001u, 0xffc0, "negative signalling NaN" },
  { 0x7fa00000u, 0x7fe0, "signalling NaN, top payload bit kept" },
  { 0x7f810000u, 0x7fc1, "signalling NaN, lowest kept payload bit" },
  { 0x7fffffffu, 0x7fff, "NaN with every payload bit: no rounding carry" },
  { 0x3f800000u, 0x3f80, "1.0" },
  { 0x3f808000u, 0x3f80, "1 + 2^-8, tie rounds down to even" },
  { 0x3f818000u, 0x3f82, "1 + 3 * 2^-8, tie rounds up to even" },
  { 0x3f808001u, 0x3f81, "just above the tie rounds up" },
  { 0x3f807fffu, 0x3f80, "just below the tie rounds down" },
  { 0x3fffffffu, 0x4000, "just below 2.0 carries into the exponent" },
  { 0x7f7f0000u, 0x7f7f, "the largest bf16" },
  { 0x7f7f7fffu, 0x7f7f, "just below the overflow tie stays finite" },
  { 0x7f7f8000u, 0x7f80, "the overflow tie rounds to even: inf" },
  { 0x7f7fffffu, 0x7f80, "FLT_MAX rounds to inf" },
  { 0xff7fffffu, 0xff80, "-FLT_MAX rounds to -inf" },
  { 0x00800000u, 0x0080, "FLT_MIN" },
  { 0x007fffffu, 0x0080, "the largest f32 subnormal carries into FLT_MIN (not flushed)" },
  { 0x00010000u, 0x0001, "a subnormal bf16 is kept" },
  { 0x00008000u, 0x0000, "subnormal tie rounds down to even 0" },
  { 0x00018000u, 0x0002, "subnormal tie rounds up to even" },
  { 0x00008001u, 0x0001, "just above a subnormal tie" },
  { 0x80000001u, 0x8000, "-smallest subnormal -> -0" },
};

static void f32_to_f16_named_edge_cases(void) {
  size_t i;
  for (i = 0; i < sizeof f16_edges / sizeof f16_edges[0]; i++) {
    const edge *c = &f16_edges[i];
    uint16_t got = amp_f32_to_f16(f32_of(c->in)), ref = ref_f32_to_f16(f32_of(c->in));
    EXPECT(got == c->want, "%s: in 0x%08x (%.9g) expected 0x%04x got 0x%04x", c->what, c->in, (double)f32_of(c->in), c->want, got);
    EXPECT(!REF_IEEE || ref == c->want, "double reference, %s: in 0x%08x expected 0x%04x got 0x%04x", c->what, c->in, c->want, ref);
  }
}

static void f32_to_bf16_named_edge_cases(void) {
  size_t i;
  for (i = 0; i < sizeof bf16_edges / sizeof bf16_edges[0]; i++) {
    const edge *c = &bf16_edges[i];
    uint16_t got = amp_f32_to_bf16(f32_of(c->in)), ref = ref_f32_to_bf16(f32_of(c->in));
    EXPECT(got == c->want, "%s: in 0x%08x (%.9g) expected 0x%04x got 0x%04x", c->what, c->in, (double)f32_of(c->in), c->want, got);
    EXPECT(!REF_IEEE || ref == c->want, "double reference, %s: in 0x%08x expected 0x%04x got 0x%04x", c->what, c->in, c->want, ref);
  }
}

/* The edge cases through the F16C instruction: the table itself is what F16C does. */
static void f16_edge_cases_are_what_f16c_does(void) {
  float in[64];
  uint16_t hw[64];
  size_t i, n = sizeof f16_edges / sizeof f16_edges[0];
  if (!cpu_has_f16c()) { printf("skipped: F16C oracle (this CPU has no F16C)\n"); return; }
  for (i = 0; i < 64; i++) in[i] = i < n ? f32_of(f16_edges[i].in) : 0.0f;
  hw_f32_to_f16(hw, in, 64);
  for (i = 0; i < n; i++)
    EXPECT(hw[i] == f16_edges[i].want, "vcvtps2ph, %s: in 0x%08x expected 0x%04x got 0x%04x", f16_edges[i].what, f16_edges[i].in, f16_edges[i].want, hw[i]);
}

/* ---- every 16-bit pattern back to f32 ------------------------------------------------------ */

static void f16_to_f32_is_exact_for_all_65536_patterns(void) {
  uint32_t h;
  for (h = 0; h < 65536; h++) {
    uint32_t got = bits_of(amp_f16_to_f32((amp_f16)h)), want = ref_f16_to_f32((uint16_t)h);
    EXPECT(got == want, "in 0x%04x expected 0x%08x got 0x%08x", h, want, got);
  }
  EXPECT(amp_f16_to_f32(0x7bff) == 65504.0f, "in 0x7bff expected 65504 got %.9g", (double)amp_f16_to_f32(0x7bff));
  EXPECT(amp_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "in 0x0001 expected 2^-24 got %.9g", (double)amp_f16_to_f32(0x0001));
}

static void f16_to_f32_matches_vcvtph2ps_for_all_65536_patterns(void) {
  static uint16_t in[65536];
  static float hw[65536];
  uint32_t h;
  if (!cpu_has_f16c()) { printf("skipped: F16C oracle (this CPU has no F16C)\n"); return; }
  for (h = 0; h < 65536; h++) in[h] = (uint16_t)h;
  hw_f16_to_f32(hw, in, 65536);
  for (h = 0; h < 65536; h++) {
    uint32_t got = bits_of(amp_f16_to_f32((amp_f16)h)), want = bits_of(hw[h]);
    EXPECT(got == want, "in 0x%04x expected (vcvtph2ps) 0x%08x got 0x%08x", h, want, got);
  }
}

static void bf16_to_f32_is_exact_for_all_65536_patterns(void) {
  uint32_t h;
#if !REF_IEEE
  printf(REF_SKIP_MSG); return;
#endif
  for (h = 0; h < 65536; h++) {
    uint32_t got = bits_of(amp_bf16_to_f32((amp_bf16)h)), want = ref_bf16_to_f32((uint16_t)h);
    EXPECT(got == want, "in 0x%04x expected 0x%08x got 0x%08x", h, want, got);
  }
}

/* A half or bf16 that goes to f32 and back is unchanged; a NaN comes back quiet, sign and kept
   payload intact, never inf. */
static void round_trip_through_f32_is_the_identity(void) {
  uint32_t h;
  for (h = 0; h < 65536; h++) {
    uint16_t b16 = amp_f32_to_f16(amp_f16_to_f32((amp_f16)h));
    uint16_t bbf = amp_f32_to_bf16(amp_bf16_to_f32((amp_bf16)h));
    int nan16 = (h & 0x7c00) == 0x7c00 && (h & 0x3ff), nanbf = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    uint16_t w16 = (uint16_t)(nan16 ? h | 0x200 : h), wbf = (uint16_t)(nanbf ? h | 0x40 : h);
    EXPECT(b16 == w16, "f16 0x%04x -> f32 -> f16: expected 0x%04x got 0x%04x", h, w16, b16);
    EXPECT(bbf == wbf, "bf16 0x%04x -> f32 -> bf16: expected 0x%04x got 0x%04x", h, wbf, bbf);
  }
}

/* A sample of f32 patterns (a prime stride; the whole 2^32 is test_convert_exhaustive) against
   the double reference. */
static void f32_sample_rounds_like_the_double_reference(void) {
  uint64_t k;
  uint32_t stride = t_quick() ? 1000003u : 65537u;
#if !REF_IEEE
  printf(REF_SKIP_MSG); return;
#endif
  for (k = 0; k < (1ull << 32); k += stride) {
    float x = f32_of((uint32_t)k);
    uint16_t h = amp_f32_to_f16(x), r = ref_f32_to_f16(x), b = amp_f32_to_bf16(x), rb = ref_f32_to_bf16(x);
    EXPECT(h == r, "f16: in 0x%08x expected 0x%04x got 0x%04x", (uint32_t)k, r, h);
    EXPECT(b == rb, "bf16: in 0x%08x expected 0x%04x got 0x%04x", (uint32_t)k, rb, b);
  }
}

/* ---- amp_convert against the scalar functions ----------------------------------------------- */

static uint32_t rng_state = 12345u;
static uint32_t rng(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 17; rng_state ^= rng_state << 5; return rng_state; }

/* Random bits with a good share of specials: NaNs (both kinds, both signs), infs, zeros,
   subnormals of every format, values near the f16 overflow and rounding ties. */
static uint32_t interesting_f32(void) {
  uint32_t r = rng(), s = rng() & 0x80000000u;
  switch (r % 10) {
    case 0: return s | 0x7f800000u | (rng() & 0x7fffffu);         /* NaN or inf */
    case 1: return s | (rng() & 0x7fffffu);                         /* f32 subnormal or 0 */
    case 2: return s | (0x33000000u + (rng() % 0x5800000u));        /* the f16 subnormal range */
    case 3: return s | (0x477f0000u + (rng() & 0xffffu));           /* around 65504..65536 */
    case 4: return (rng() & 0xffffe000u) | 0x1000u;                 /* f16 ties */
    case 5: return (rng() & 0xffff0000u) | 0x8000u;                 /* bf16 ties */
    default: return rng();
  }
}
static uint16_t interesting_16(void) {
  uint16_t r = (uint16_t)rng();
  return (rng() % 4 == 0) ? (uint16_t)(r | 0x7f80) : r;  /* extra NaN/inf patterns for both formats */
}
/* Finite values inside the f16 range, a few of them f16 subnormals (a block of those and normal
   halves only, with no inf or NaN beside them, takes other turns in the portable loops). */
static uint32_t finite_f32(void) {
  uint32_t s = rng() & 0x80000000u, r = rng() % 64;
  if (r == 0) return s | (0x33000000u + (rng() % 0x5800000u));   /* f16 subnormal range */
  if (r == 1) return s;                                           /* +-0 */
  return s | (0x38800000u + (rng() % (0x477fe000u - 0x38800000u)));
}
static uint16_t finite_16(void) {
  uint16_t r = (uint16_t)rng();
  return (r & 0x7c00) == 0x7c00 ? (uint16_t)(r & 0xbfff) : r;    /* no f16 inf/NaN */
}
static int finite_only;  /* fill_random draws from finite_f32 / finite_16 */
static void fill_random(void *p, amp_dtype t, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    if (t == AMP_F32) { uint32_t u = finite_only ? finite_f32() : interesting_f32(); memcpy((char *)p + 4 * i, &u, 4); }
    else { uint16_t u = finite_only ? finite_16() : interesting_16(); memcpy((char *)p + 2 * i, &u, 2); }
  }
}
/* What amp_convert must give: the scalar functions, element by element (f16 <-> bf16 via f32). */
static void convert_scalar(void *dst, amp_dtype dt, const void *src, amp_dtype st, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    float x;
    if (st == AMP_F32) memcpy(&x, (const char *)src + 4 * i, 4);
    else { uint16_t h; memcpy(&h, (const char *)src + 2 * i, 2); x = st == AMP_F16 ? amp_f16_to_f32(h) : amp_bf16_to_f32(h); }
    if (dt == AMP_F32) {
      if (st == AMP_F32) memcpy((char *)dst + 4 * i, (const char *)src + 4 * i, 4); /* a copy, even of a NaN */
      else memcpy((char *)dst + 4 * i, &x, 4);
    } else {
      uint16_t h;
      if (dt == st) memcpy(&h, (const char *)src + 2 * i, 2);
      else h = dt == AMP_F16 ? amp_f32_to_f16(x) : amp_f32_to_bf16(x);
      memcpy((char *)dst + 2 * i, &h, 2);
    }
  }
}
static uint32_t elem_bits(const void *p, amp_dtype t, size_t i) {
  if (t == AMP_F32) { uint32_t u; memcpy(&u, (const char *)p + 4 * i, 4); return u; }
  else { uint16_t u; memcpy(&u, (const char *)p + 2 * i, 2); return u; }
}

/* The paths a suite runs: the portable one (0) and each SIMD level the CPU has (x86: 1 AVX2 + F16C,
   2 AVX-512; AArch64: 1 NEON, 2 NEON + BFCVTN); set_path(l) picks one, set_path(-1) returns to the
   CPU's best. */
static int simd_paths[3];
static void set_path(int level) {
#ifdef AMP__CPU_SIMD
  amp__isa_cap = level > 0 ? level : 2;
#endif
  amp_simd_enable(level != 0);
}
static int n_paths(void) {
  int np = 1;
  set_path(-1);
  simd_paths[0] = 0;
#ifdef AMP__CPU_SIMD
  while (np <= amp__cpu_level()) { simd_paths[np] = np; np++; }
#endif
  return np;
}

/* n = 0..67 at every start offset 0..7 of dst and src, each pair, both paths. The bytes around
   the destination range must stay as they were. */
static void bulk_equals_scalar_for_every_pair_small_n_unaligned(void) {
  enum { MAXN = 67, PAD = 8 };
  enum { SRC_BYTES = 4 * (MAXN + PAD), DST_BYTES = 4 * (MAXN + 2 * PAD) };
  /* malloc: aligned for every element type (and to 16 bytes), so offsets 0..7 reach every
     alignment the 32-byte vectors care about */
  unsigned char *src = (unsigned char *)malloc(SRC_BYTES), *dst = (unsigned char *)malloc(DST_BYTES),
                *want = (unsigned char *)malloc(DST_BYTES);
  int p, np = n_paths(), a, b;
  if (np == 1) printf("skipped: the SIMD path (no F16C/AVX2 here); the portable path is tested\n");
  for (p = 0; p < np; p++) {
    set_path(simd_paths[p]);
    for (a = 0; a < 3; a++) for (b = 0; b < 3; b++) {
      amp_dtype dt = types[a], st = types[b];
      size_t ds = amp_dtype_size(dt), n, so, dof;
      for (n = 0; n <= MAXN; n++) for (so = 0; so < 8; so++) for (dof = 0; dof < 8; dof++) {
        size_t i, lo = PAD * 4 + dof * ds;
        unsigned char *s = src + so * amp_dtype_size(st), *d = dst + lo;
        amp_status rc;
        fill_random(src, st, MAXN + PAD);
        for (i = 0; i < DST_BYTES; i++) dst[i] = want[i] = (unsigned char)(0xa5 ^ i);
        convert_scalar(want + lo, dt, s, st, n);
        rc = amp_convert(d, dt, s, st, n);
        EXPECT(rc == AMP_OK, "%s->%s n %zu: status %s (%s)", tname(st), tname(dt), n, amp_status_string(rc), amp_last_error());
        if (memcmp(dst, want, DST_BYTES) != 0) {
          for (i = 0; i < n; i++) if (elem_bits(d, dt, i) != elem_bits(want + lo, dt, i)) break;
          if (i < n) EXPECT(0, "simd %d %s->%s n %zu src+%zu dst+%zu element %zu: in 0x%x expected 0x%x got 0x%x",
                            simd_paths[p], tname(st), tname(dt), n, so, dof, i, elem_bits(s, st, i), elem_bits(want + lo, dt, i), elem_bits(d, dt, i));
          else EXPECT(0, "simd %d %s->%s n %zu src+%zu dst+%zu: wrote outside dst[0..n)", simd_paths[p], tname(st), tname(dt), n, so, dof);
        }
      }
    }
  }
  set_path(-1);
  free(src); free(dst); free(want);
}

static void bulk_equals_scalar_on_a_large_random_buffer(void) {
  size_t n = t_quick() ? 5003 : (1u << 20) + 13, i;
  void *src = malloc(4 * n + 4), *dst = malloc(4 * n + 4), *want = malloc(4 * n + 4);
  int p, np = n_paths(), a, b, fin;
  for (fin = 0; fin < 2; fin++) for (p = 0; p < np; p++) {
    set_path(simd_paths[p]);
    finite_only = fin;
    for (a = 0; a < 3; a++) for (b = 0; b < 3; b++) {
      amp_dtype dt = types[a], st = types[b];
      /* one element past the (malloc-aligned) start: unaligned for the 32-byte loads and stores */
      const char *s = (const char *)src + amp_dtype_size(st);
      char *d = (char *)dst + amp_dtype_size(dt), *w = (char *)want + amp_dtype_size(dt);
      amp_status rc;
      fill_random((void *)s, st, n);
      convert_scalar(w, dt, s, st, n);
      rc = amp_convert(d, dt, s, st, n);
      EXPECT(rc == AMP_OK, "%s->%s: status %s", tname(st), tname(dt), amp_status_string(rc));
      for (i = 0; i < n; i++) if (elem_bits(d, dt, i) != elem_bits(w, dt, i)) break;
      EXPECT(i == n, "simd %d finite-only %d %s->%s n %zu element %zu: in 0x%x expected 0x%x got 0x%x", simd_paths[p], fin, tname(st), tname(dt), n, i,
             i < n ? elem_bits(s, st, i) : 0, i < n ? elem_bits(w, dt, i) : 0, i < n ? elem_bits(d, dt, i) : 0);
    }
  }
  set_path(-1);
  finite_only = 0;
  free(src); free(dst); free(want);
}

/* Same element size: dst == src (in place) and dst shifted either way by 1..40 elements, or by an
   odd number of bytes (an address no element pointer may take: the portable path's bounce
   buffers, whose 256-element chunks once overwrote the next chunk's source), give what converting
   from a copy of src gives, for n across the 1024-element chunk of the shifted case. */
static void overlapping_buffers_of_one_size_convert_as_from_a_copy(void) {
  static const size_t ns[] = { 1, 7, 31, 32, 33, 100, 1023, 1024, 1025, 3000 };
  static const int shifts[] = { 0, 1, -1, 2, -2, 7, -7, 15, -16, 17, -33, 40 };
  static const int bytes[] = { 1, -1, 3, -3, 5 };   /* shifts in bytes */
  enum { NSH = sizeof shifts / sizeof shifts[0], CAP = 3100 + 80 };
  char *buf = (char *)malloc(4 * CAP), *copy = (char *)malloc(4 * CAP), *want = (char *)malloc(4 * CAP);
  int p, np = n_paths(), a, b;
  size_t k, q;
  for (p = 0; p < np; p++) {
    set_path(simd_paths[p]);
    for (a = 0; a < 3; a++) for (b = 0; b < 3; b++) {
      amp_dtype dt = types[a], st = types[b];
      size_t es = amp_dtype_size(st);
      if (es != amp_dtype_size(dt)) continue;
      for (k = 0; k < sizeof ns / sizeof ns[0]; k++) for (q = 0; q < NSH + sizeof bytes / sizeof bytes[0]; q++) {
        size_t n = ns[k], i;
        long off = q < NSH ? shifts[q] * (long)es : bytes[q - NSH];
        char *s = buf + 40 * es, *d = s + off;
        amp_status rc;
        fill_random(buf, st, CAP);
        memcpy(want, buf, es * CAP);
        memcpy(copy, s, es * n);
        convert_scalar(want + (d - buf), dt, copy, st, n);
        rc = amp_convert(d, dt, s, st, n);
        EXPECT(rc == AMP_OK, "%s->%s n %zu shift %ld bytes: status %s (%s)", tname(st), tname(dt), n, off, amp_status_string(rc), amp_last_error());
        for (i = 0; i < CAP; i++) if (elem_bits(buf, dt, i) != elem_bits(want, dt, i)) break;
        EXPECT(i == CAP, "simd %d %s->%s n %zu dst = src %+ld bytes: buffer element %zu expected 0x%x got 0x%x",
               simd_paths[p], tname(st), tname(dt), n, off, i, i < CAP ? elem_bits(want, dt, i) : 0, i < CAP ? elem_bits(buf, dt, i) : 0);
      }
    }
  }
  set_path(-1);
  free(buf); free(copy); free(want);
}

/* Large outputs use streaming (non-temporal) stores after an aligning scalar head. The suites
   above again, with the library's threshold set to 0 so that every call streams. */
static void bulk_with_streaming_stores_equals_scalar(void) {
#ifdef AMP__X86_SIMD
  size_t keep = amp__nt_bytes;
  if (!amp_simd_active()) { printf("skipped: the SIMD path (no F16C/AVX2 here)\n"); return; }
  amp__nt_bytes = 0;
  bulk_equals_scalar_for_every_pair_small_n_unaligned();
  bulk_equals_scalar_on_a_large_random_buffer();
  overlapping_buffers_of_one_size_convert_as_from_a_copy();
  amp__nt_bytes = keep;
#else
  printf("skipped: no streaming stores in this build (x86-64's SIMD paths only)\n");
#endif
}

/* Every one of the 65536 f16 and bf16 patterns through amp_convert to each other type, on every
   path, against the scalar functions. */
static void every_16bit_input_converts_like_the_scalar_functions_on_every_path(void) {
  static uint16_t in[65536], out16[65536], want16[65536];
  static float out32[65536], want32[65536];
  int p, np = n_paths(), a, b;
  size_t i;
  for (i = 0; i < 65536; i++) in[i] = (uint16_t)i;
  for (p = 0; p < np; p++) {
    set_path(simd_paths[p]);
    for (b = 1; b < 3; b++) for (a = 0; a < 3; a++) {
      amp_dtype st = types[b], dt = types[a];
      void *out = dt == AMP_F32 ? (void *)out32 : (void *)out16, *want = dt == AMP_F32 ? (void *)want32 : (void *)want16;
      if (st == dt) continue;
      convert_scalar(want, dt, in, st, 65536);
      EXPECT(amp_convert(out, dt, in, st, 65536) == AMP_OK, "%s->%s: %s", tname(st), tname(dt), amp_last_error());
      for (i = 0; i < 65536; i++) if (elem_bits(out, dt, i) != elem_bits(want, dt, i)) break;
      EXPECT(i == 65536, "path %d %s->%s: input 0x%04zx expected 0x%x got 0x%x", simd_paths[p], tname(st), tname(dt), i,
             i < 65536 ? elem_bits(want, dt, i) : 0, i < 65536 ? elem_bits(out, dt, i) : 0);
    }
  }
  set_path(-1);
}

/* Odd addresses (not a multiple of the element size) for src, dst or both, every pair and path,
   with an output above the streaming threshold: a streaming store needs an aligned address that
   such a destination never reaches, so it must be written with ordinary stores (issue: it crashed).
   The full run uses the library's own threshold (8 MiB outputs); AMP_TEST_QUICK lowers it. Every
   element is checked against the scalar functions and the bytes around dst stay untouched. */
static void odd_addresses_above_the_streaming_threshold_convert_every_pair(void) {
#ifdef AMP__X86_SIMD
  size_t keep = amp__nt_bytes;
#endif
  size_t n, i;
  unsigned char *src, *dst, *want;
  int p, np = n_paths(), a, b, so, dof;
#ifdef AMP__X86_SIMD
  if (t_quick()) amp__nt_bytes = 4096;
  n = amp__nt_bytes / 2 + 1001;
#else
  n = t_quick() ? 3001 : ((size_t)4 << 20) + 1001;
#endif
  src = (unsigned char *)malloc(4 * n + 16); dst = (unsigned char *)malloc(4 * n + 16); want = (unsigned char *)malloc(4 * n + 16);
  for (p = 0; p < np; p++) {
    set_path(simd_paths[p]);
    for (a = 0; a < 3; a++) for (b = 0; b < 3; b++) for (so = 0; so < 2; so++) for (dof = 0; dof < 2; dof++) {
      amp_dtype dt = types[a], st = types[b];
      size_t ds = amp_dtype_size(dt);
      unsigned char *s = src + 1 + 2 * (size_t)so, *d = dst + 1 + 2 * (size_t)dof;  /* odd, at two offsets */
      amp_status rc;
      fill_random(s, st, n);
      memset(dst, 0xa5, 4 * n + 16); memset(want, 0xa5, 4 * n + 16);
      convert_scalar(want + (d - dst), dt, s, st, n);
      rc = amp_convert(d, dt, s, st, n);
      EXPECT(rc == AMP_OK, "%s->%s odd: status %s (%s)", tname(st), tname(dt), amp_status_string(rc), amp_last_error());
      if (memcmp(dst, want, 4 * n + 16) != 0) {
        for (i = 0; i < n; i++) if (elem_bits(d, dt, i) != elem_bits(want + (d - dst), dt, i)) break;
        EXPECT(0, "path %d %s->%s n %zu src %p dst %p (ds %zu): element %zu of %zu differs or bytes outside dst changed",
               simd_paths[p], tname(st), tname(dt), n, (void *)s, (void *)d, ds, i, n);
      }
    }
  }
  set_path(-1);
#ifdef AMP__X86_SIMD
  amp__nt_bytes = keep;
#endif
  free(src); free(dst); free(want);
}

/* f32 -> f16 and bf16 through amp_convert on every path, against the scalar functions, over a
   dense strided sample of all 2^32 patterns (every 4099th; every 65537th with AMP_TEST_QUICK) and
   every special class: each of the 65536 upper halves with the low halves around bf16's rounding
   (0, 1, 0x7fff, 0x8000 the tie, 0x8001, 0xffff) and f16's (the 13 cut bits at 0, 0x0fff, 0x1000
   the tie, 0x1001, 0x1fff, with the lowest kept bit 0 and 1): every sign, exponent (zeros,
   subnormals, normals at both ends of f16's range, overflow, inf, quiet and signalling NaNs
   with payloads above and below each cut) and both ties. */
/* the scalar functions' widening of n 16-bit values of type t into d */
static void widen_scalar(float *d, const uint16_t *s, amp_dtype t, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    float x = t == AMP_F16 ? amp_f16_to_f32(s[i]) : amp_bf16_to_f32(s[i]);
    memcpy(d + i, &x, 4);
  }
}
static uint32_t f32_class_low(size_t j) {
  static const uint32_t lows[] = { 0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu,
                                   0x0fffu, 0x1000u, 0x1001u, 0x1fffu, 0x2fffu, 0x3000u, 0x3001u, 0x5000u, 0xf000u };
  return lows[j];
}
enum { N_LOWS = 15 };
static void f32_sample_and_special_classes_convert_like_the_scalar_functions_on_every_path(void) {
  size_t step = t_quick() ? 65537u : 4099u, n_stride = (size_t)(0xffffffffu / step) + 1, n_class = 65536u * N_LOWS;
  size_t n = n_stride + n_class, i;
  uint32_t *in = (uint32_t *)malloc(4 * n);
  uint16_t *out = (uint16_t *)malloc(2 * n), *want = (uint16_t *)malloc(2 * n);
  float *back = (float *)malloc(4 * n), *wback = (float *)malloc(4 * n);
  int p, np = n_paths(), a;
  for (i = 0; i < n_stride; i++) in[i] = (uint32_t)(i * step);
  for (i = 0; i < n_class; i++) in[n_stride + i] = ((uint32_t)(i / N_LOWS) << 16) | f32_class_low(i % N_LOWS);
  for (p = 0; p < np; p++) {
    set_path(simd_paths[p]);
    for (a = 1; a < 3; a++) {
      amp_dtype dt = types[a];
      convert_scalar(want, dt, in, AMP_F32, n);
      EXPECT(amp_convert(out, dt, in, AMP_F32, n) == AMP_OK, "f32->%s: %s", tname(dt), amp_last_error());
      for (i = 0; i < n; i++) if (out[i] != want[i]) break;
      EXPECT(i == n, "path %d f32->%s: input 0x%08x expected 0x%04x got 0x%04x", simd_paths[p], tname(dt),
             i < n ? in[i] : 0u, i < n ? want[i] : 0u, i < n ? out[i] : 0u);
      /* and back: the 16-bit results widened (NaNs of every payload among them) */
      widen_scalar(wback, want, dt, n);
      EXPECT(amp_convert(back, AMP_F32, want, dt, n) == AMP_OK, "%s->f32: %s", tname(dt), amp_last_error());
      for (i = 0; i < n; i++) if (elem_bits(back, AMP_F32, i) != elem_bits(wback, AMP_F32, i)) break;
      EXPECT(i == n, "path %d %s->f32: input 0x%04x expected 0x%08x got 0x%08x", simd_paths[p], tname(dt),
             i < n ? want[i] : 0u, i < n ? elem_bits(wback, AMP_F32, i) : 0u, i < n ? elem_bits(back, AMP_F32, i) : 0u);
    }
  }
  set_path(-1);
  free(in); free(out); free(want); free(back); free(wback);
}

/* AArch64: FCVTN/FCVTL/BFCVTN read the FPCR, the scalar functions do not. With the rounding mode
   changed, default-NaN mode, or flush-to-zero set, amp_convert still gives the scalar bits (the
   call takes the portable loops, or level 1 under flush-to-zero). */
#ifdef AMP__NEON_SIMD
static uint64_t get_fpcr(void) { uint64_t f; __asm__ __volatile__("mrs %0, fpcr" : "=r"(f)); return f; }
static void set_fpcr(uint64_t f) { __asm__ __volatile__("msr fpcr, %0" : : "r"(f)); }
#endif
static void convert_gives_the_scalar_bits_whatever_the_fpcr_holds(void) {
#ifdef AMP__NEON_SIMD
  static const struct { uint64_t bits; const char *what; } modes[] = {
    { 1u << 22, "round towards +inf" }, { 2u << 22, "round towards -inf" }, { 3u << 22, "round towards zero" },
    { 1u << 25, "default NaN" }, { 1u << 24, "flush to zero" },
  };
  enum { N = 4096 + 5 };
  static uint32_t in[N];
  static uint16_t out[N], want[N];
  static float back[N], wback[N];
  uint64_t keep = get_fpcr();
  size_t i, m;
  int a;
  for (i = 0; i < N; i++)   /* every 16th upper half with the special low halves, then scattered bits */
    in[i] = i < 65536u / 16 ? ((uint32_t)(i * 16) << 16) | f32_class_low(i % N_LOWS) : (uint32_t)(i * 2654435761u);
  for (m = 0; m < sizeof modes / sizeof modes[0]; m++) for (a = 1; a < 3; a++) {
    amp_dtype dt = types[a];
    convert_scalar(want, dt, in, AMP_F32, N);
    widen_scalar(wback, want, dt, N);
    set_fpcr(keep | modes[m].bits);
    amp_convert(out, dt, in, AMP_F32, N);
    amp_convert(back, AMP_F32, want, dt, N);
    set_fpcr(keep);
    for (i = 0; i < N; i++) if (out[i] != want[i]) break;
    EXPECT(i == N, "%s: f32->%s input 0x%08x expected 0x%04x got 0x%04x", modes[m].what, tname(dt), i < N ? in[i] : 0u,
           i < N ? want[i] : 0u, i < N ? out[i] : 0u);
    for (i = 0; i < N; i++) if (elem_bits(back, AMP_F32, i) != elem_bits(wback, AMP_F32, i)) break;
    EXPECT(i == N, "%s: %s->f32 input 0x%04x expected 0x%08x got 0x%08x", modes[m].what, tname(dt), i < N ? want[i] : 0u,
           i < N ? elem_bits(wback, AMP_F32, i) : 0u, i < N ? elem_bits(back, AMP_F32, i) : 0u);
  }
#else
  printf("skipped: no NEON path in this build (the FPCR is AArch64's)\n");
#endif
}

/* ---- bad input ------------------------------------------------------------------------------ */

static int untouched(const unsigned char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) if (p[i] != (unsigned char)(0x5a ^ i)) return 0;
  return 1;
}
static void mark(unsigned char *p, size_t n) { size_t i; for (i = 0; i < n; i++) p[i] = (unsigned char)(0x5a ^ i); }

static void convert_rejects_null_pointers_and_names_them(void) {
  unsigned char dst[64];
  float src[16] = { 1.0f };
  amp_status rc;
  mark(dst, sizeof dst);
  rc = amp_convert(NULL, AMP_F16, src, AMP_F32, 16);
  EXPECT(rc == AMP_ERR_ARG, "dst NULL n 16: expected AMP_ERR_ARG got %s", amp_status_string(rc));
  EXPECT(strstr(amp_last_error(), "dst") != NULL, "dst NULL: message should name dst: \"%s\"", amp_last_error());
  rc = amp_convert(dst, AMP_F16, NULL, AMP_F32, 16);
  EXPECT(rc == AMP_ERR_ARG, "src NULL n 16: expected AMP_ERR_ARG got %s", amp_status_string(rc));
  EXPECT(strstr(amp_last_error(), "src is NULL") != NULL, "src NULL: message should name src: \"%s\"", amp_last_error());
  EXPECT(untouched(dst, sizeof dst), "src NULL: dst was written: byte 0 0x%02x expected 0x%02x", dst[0], 0x5a);
}

static void convert_rejects_an_unknown_dtype_and_names_it(void) {
  unsigned char dst[64];
  float src[16] = { 1.0f };
  amp_status rc;
  mark(dst, sizeof dst);
  rc = amp_convert(dst, (amp_dtype)7, src, AMP_F32, 16);
  EXPECT(rc == AMP_ERR_ARG, "dst_type 7: expected AMP_ERR_ARG got %s", amp_status_string(rc));
  EXPECT(strstr(amp_last_error(), "dst_type 7") != NULL, "dst_type 7: message should name it: \"%s\"", amp_last_error());
  rc = amp_convert(dst, AMP_F16, src, (amp_dtype)-1, 16);
  EXPECT(rc == AMP_ERR_ARG, "src_type -1: expected AMP_ERR_ARG got %s", amp_status_string(rc));
  EXPECT(strstr(amp_last_error(), "src_type -1") != NULL, "src_type -1: message should name it: \"%s\"", amp_last_error());
  rc = amp_convert(dst, (amp_dtype)AMP__DTYPE_COUNT, src, AMP_F32, 0);
  EXPECT(rc == AMP_ERR_ARG, "dst_type %d with n 0: expected AMP_ERR_ARG got %s", (int)AMP__DTYPE_COUNT, amp_status_string(rc));
  EXPECT(untouched(dst, sizeof dst), "unknown dtype: dst was written: byte 0 0x%02x", dst[0]);
  EXPECT(amp_dtype_size((amp_dtype)AMP__DTYPE_COUNT) == 0 && amp_dtype_size(AMP_GRAD_F32) == 0, "amp_dtype_size past the table: %zu",
         amp_dtype_size((amp_dtype)AMP__DTYPE_COUNT));
}

/* The traits table (AMP__DTYPES): one row per format, in enum order, with the known size, name,
   largest finite value and smallest normal; each row's values agree with its own element functions
   (max and min normal survive a store/load, the value above max rounds to inf, the smallest normal
   classes as normal and the float below it as subnormal). */
static void traits_table_rows_hold_the_known_values(void) {
  static const struct { amp_dtype t; const char *name; size_t size; float max, min_normal; } want[] = {
    { AMP_F32, "AMP_F32", 4, 3.40282347e38f, 1.17549435e-38f },
    { AMP_F16, "AMP_F16", 2, 65504.0f, 6.10351562e-05f },
    { AMP_BF16, "AMP_BF16", 2, 3.38953139e38f, 1.17549435e-38f },
    { AMP_E4M3, "AMP_E4M3", 1, 448.0f, 0.015625f },
    { AMP_E5M2, "AMP_E5M2", 1, 57344.0f, 6.10351562e-05f },
  };
  size_t i;
  EXPECT(AMP__DTYPE_COUNT == 5, "the table has %d rows, expected 5", (int)AMP__DTYPE_COUNT);
  EXPECT(AMP_F32 == 0 && AMP_F16 == 1 && AMP_BF16 == 2 && AMP_E4M3 == 3 && AMP_E5M2 == 4, "the enum values moved");
  EXPECT(sizeof amp__dtype_table / sizeof *amp__dtype_table == (size_t)AMP__DTYPE_COUNT, "table rows %zu",
         sizeof amp__dtype_table / sizeof *amp__dtype_table);
  for (i = 0; i < sizeof want / sizeof *want; i++) {
    const amp__dtype_traits *r = amp__dtype_row(want[i].t);
    float max, mn, up;
    EXPECT(r != NULL && r == &amp__dtype_table[(int)want[i].t], "%s: no row", want[i].name);
    if (!r) continue;
    max = amp__bits_f32(r->max_bits); mn = amp__bits_f32(r->min_normal_bits);
    EXPECT(strcmp(r->name, want[i].name) == 0 && strcmp(amp__dtype_name(want[i].t), want[i].name) == 0,
           "row %d: name %s, expected %s", (int)want[i].t, r->name, want[i].name);
    EXPECT(r->size == want[i].size && amp_dtype_size(want[i].t) == want[i].size, "%s: size %zu / %zu, expected %zu",
           want[i].name, r->size, amp_dtype_size(want[i].t), want[i].size);
    EXPECT(max == want[i].max, "%s: max %.9g, expected %.9g", want[i].name, (double)max, (double)want[i].max);
    EXPECT(mn == want[i].min_normal, "%s: min normal %.9g, expected %.9g", want[i].name, (double)mn, (double)want[i].min_normal);
    EXPECT(amp__dtype_min_normal_bits(want[i].t) == r->min_normal_bits, "%s: amp__dtype_min_normal_bits", want[i].name);
    EXPECT(r->size == 1 ? r->cpu_vec == 0 && r->gpu_vec == 0 && !r->compute : r->cpu_vec == 1 && r->gpu_vec == 1 && r->compute,
           "%s: vector paths %d %d, compute %d", want[i].name, r->cpu_vec, r->gpu_vec, r->compute);
    EXPECT(amp__round_to(max, want[i].t) == max && amp__round_to(-max, want[i].t) == -max, "%s: max does not round to itself",
           want[i].name);
    EXPECT(amp__round_to(mn, want[i].t) == mn, "%s: min normal does not round to itself", want[i].name);
    /* the next value up (one ulp of the format above max) rounds to inf: max is the largest finite */
    up = amp__bits_f32(r->max_bits + (want[i].size == 4 ? 1u : want[i].t == AMP_F16 ? 0x2000u : want[i].t == AMP_BF16 ? 0x10000u :
                                      want[i].t == AMP_E4M3 ? 0x100000u : 0x200000u));
    if (want[i].size == 1)   /* fp8 stores saturate: one ulp above max (NaN / inf as a code) comes back as max */
      EXPECT(amp__round_to(up, want[i].t) == max, "%s: %.9g above max gives %.9g, not max", want[i].name, (double)up,
             (double)amp__round_to(up, want[i].t));
    else
      EXPECT(!amp__finite(amp__round_to(up, want[i].t)) || want[i].size == 4, "%s: %.9g above max stays finite", want[i].name,
             (double)up);
    EXPECT(amp__grad_class(mn, mn, want[i].t) == AMP__G_NORMAL, "%s: min normal is not normal", want[i].name);
    EXPECT(amp__grad_class(amp__bits_f32(r->min_normal_bits - 1u), 1.0f, want[i].t) == AMP__G_SUBNORMAL,
           "%s: the float below min normal is not subnormal", want[i].name);
  }
  EXPECT(amp__dtype_row((amp_dtype)AMP__DTYPE_COUNT) == NULL && amp__dtype_row((amp_dtype)-1) == NULL, "a row past the table");
  EXPECT(strcmp(amp__dtype_name((amp_dtype)AMP__DTYPE_COUNT), "unknown") == 0, "name past the table: %s",
         amp__dtype_name((amp_dtype)AMP__DTYPE_COUNT));
}

/* fp8 is a storage format: amp_convert casts to and from it, and every entry point that computes or
   steps in a type refuses AMP_E4M3 / AMP_E5M2 by name (AMP_ERR_ARG), changing nothing. */
static void fp8_is_refused_where_a_compute_type_is_needed(void) {
  static const amp_dtype f8[2] = { AMP_E4M3, AMP_E5M2 };
  float w[8] = { 1.0f }, g[8] = { 0.0f }, a[4] = { 1.0f }, b[4] = { 1.0f }, c[4] = { 0.0f };
  amp_fp8 q[8] = { 0 };
  char what[48];
  int k;
  for (k = 0; k < 2; k++) {
    amp_dtype t = f8[k];
    amp_optimizer *o = NULL;
    amp_scaler *sc = NULL;
    amp_policy *p = NULL;
    amp_tensor_desc d;
    amp_gemm_opts go;
    amp_status rc;
    EXPECT(amp_convert(q, t, a, AMP_F32, 4) == AMP_OK && amp_convert(c, AMP_F32, q, t, 4) == AMP_OK && c[0] == 1.0f,
           "amp_convert through %s: %s", amp__dtype_name(t), amp_last_error());
    EXPECT(amp_optimizer_create(&o, amp_cpu(), NULL) == AMP_OK, "%s", amp_last_error());
    if (!o) continue;
    memset(&d, 0, sizeof d);
    d.weights = q; d.dtype = t; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = 8;
    rc = amp_optimizer_add_tensor(o, &d);
    snprintf(what, sizeof what, "weights dtype %d (%s)", (int)t, amp__dtype_name(t));
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), what) && strstr(amp_last_error(), "storage format"), "add: %s '%s'",
           amp_status_string(rc), amp_last_error());
    d.weights = w; d.dtype = AMP_F32; d.grads = q; d.grad_dtype = t;
    rc = amp_optimizer_add_tensor(o, &d);
    snprintf(what, sizeof what, "grads dtype %d (%s)", (int)t, amp__dtype_name(t));
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), what), "add grads: %s '%s'", amp_status_string(rc), amp_last_error());
    d.grads = g; d.grad_dtype = AMP_F32; d.round_to = t;
    rc = amp_optimizer_add_tensor(o, &d);
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "round_to") && strstr(amp_last_error(), amp__dtype_name(t)),
           "round_to: %s '%s'", amp_status_string(rc), amp_last_error());
    EXPECT(amp_optimizer_count(o) == 0, "a refused tensor was added");
    amp_optimizer_destroy(o);
    {   /* an fp8 A is a product input now (the manual's fp8 inputs): the product of its widened values */
      float wide[4], want[4];
      amp_convert(wide, AMP_F32, q, t, 4);
      rc = amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, q, t, 2, b, AMP_F32, 2, 0.0f, c, AMP_F32, 2);
      amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, wide, AMP_F32, 2, b, AMP_F32, 2, 0.0f, want,
               AMP_F32, 2);
      EXPECT(rc == AMP_OK && memcmp(c, want, sizeof want) == 0, "gemm with an fp8 A: %s '%s'", amp_status_string(rc),
             amp_last_error());
    }
    rc = amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, a, AMP_F32, 2, b, AMP_F32, 2, 0.0f, q, t, 2);
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "c_type"), "gemm c: '%s'", amp_last_error());
    memset(&go, 0, sizeof go); go.bias = q; go.bias_type = t;
    rc = amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, a, AMP_F32, 2, b, AMP_F32, 2, 0.0f, c, AMP_F32, 2, &go);
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "bias_type"), "gemm bias: '%s'", amp_last_error());
    if (amp_scaler_create(&sc, amp_cpu(), NULL) == AMP_OK) {
      rc = amp_scaler_scale_buffer(sc, q, t, 8);
      EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "amp_scaler_scale_buffer") && strstr(amp_last_error(), amp__dtype_name(t)),
             "scale_buffer: '%s'", amp_last_error());
      amp_scaler_destroy(sc);
    }
    rc = amp_policy_create(&p, AMP_MODE_MIXED, t);
    EXPECT(rc == AMP_ERR_ARG && p == NULL && strstr(amp_last_error(), amp__dtype_name(t)), "policy low: '%s'", amp_last_error());
  }
}

/* A dtype the table lacks (the first value past it, and -1) is refused by every entry point that
   takes one, with AMP_ERR_ARG, the function and the value named and the formats listed. */
static void a_dtype_outside_the_table_is_refused_everywhere(void) {
  const int bad[2] = { (int)AMP__DTYPE_COUNT, -1 };
  float w[8] = { 1.0f }, g[8] = { 0.0f }, a[4] = { 1.0f }, b[4] = { 1.0f }, c[4] = { 0.0f };
  char what[32];
  int k;
  for (k = 0; k < 2; k++) {
    amp_dtype t = (amp_dtype)bad[k];
    amp_optimizer *o = NULL;
    amp_tensor_desc d;
    amp_status rc;
    EXPECT(amp_dtype_size(t) == 0, "amp_dtype_size(%d) = %zu", bad[k], amp_dtype_size(t));
    rc = amp_convert(c, t, a, AMP_F32, 4);
    snprintf(what, sizeof what, "dst_type %d", bad[k]);
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "amp_convert") && strstr(amp_last_error(), what) &&
           strstr(amp_last_error(), "AMP_F32, AMP_F16, AMP_BF16"), "amp_convert %s: %s '%s'", what, amp_status_string(rc),
           amp_last_error());
    rc = amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, a, AMP_F32, 2, b, t, 2, 0.0f, c, AMP_F32, 2);
    snprintf(what, sizeof what, "b_type %d", bad[k]);
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "amp_gemm") && strstr(amp_last_error(), what),
           "amp_gemm %s: %s '%s'", what, amp_status_string(rc), amp_last_error());
    EXPECT(amp_optimizer_create(&o, amp_cpu(), NULL) == AMP_OK, "%s", amp_last_error());
    if (!o) continue;
    memset(&d, 0, sizeof d);
    d.weights = w; d.dtype = t; d.grads = g; d.grad_dtype = AMP_F32; d.n = 8;
    rc = amp_optimizer_add_tensor(o, &d);
    snprintf(what, sizeof what, "weights dtype %d", bad[k]);
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add_tensor") && strstr(amp_last_error(), what),
           "add_tensor %s: %s '%s'", what, amp_status_string(rc), amp_last_error());
    d.dtype = AMP_F32; d.grad_dtype = t;
    rc = amp_optimizer_add_tensor(o, &d);
    snprintf(what, sizeof what, "grads dtype %d", bad[k]);
    EXPECT(rc == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add_tensor") && strstr(amp_last_error(), what),
           "add_tensor %s: %s '%s'", what, amp_status_string(rc), amp_last_error());
    EXPECT(amp_optimizer_count(o) == 0, "a refused tensor was added");
    amp_optimizer_destroy(o);
  }
}

/* f32 <-> 16-bit sharing any byte is refused, in either direction, and nothing is written. */
static void convert_rejects_overlap_of_different_element_sizes(void) {
  unsigned char buf[4 * 64];
  static const long offs[] = { 0, 2, 4, 62, 126, -2, -4, -62 };  /* each shares >= 2 bytes */
  size_t k;
  int dir;
  for (dir = 0; dir < 2; dir++) for (k = 0; k < sizeof offs / sizeof offs[0]; k++) {
    size_t n = 32;
    unsigned char *wide = buf + 128, *narrow = wide + offs[k];  /* 32 f32 = 128 bytes, 32 halves = 64 */
    amp_status rc;
    if (narrow < buf || narrow + 64 > buf + sizeof buf) continue;
    mark(buf, sizeof buf);
    rc = dir ? amp_convert(wide, AMP_F32, narrow, AMP_BF16, n) : amp_convert(narrow, AMP_F16, wide, AMP_F32, n);
    EXPECT(rc == AMP_ERR_ARG, "%s, 16-bit at f32 %+ld bytes: expected AMP_ERR_ARG got %s", dir ? "bf16->f32" : "f32->f16", offs[k], amp_status_string(rc));
    EXPECT(strstr(amp_last_error(), "overlap") != NULL && strstr(amp_last_error(), "dst") != NULL,
           "message should name dst/src and the overlap: \"%s\"", amp_last_error());
    EXPECT(untouched(buf, sizeof buf), "%s %+ld: the buffer was written", dir ? "bf16->f32" : "f32->f16", offs[k]);
  }
  /* just touching (no shared byte) is fine */
  {
    float w[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    amp_status rc = amp_convert((char *)w + 16, AMP_F16, w, AMP_F32, 4);  /* halves right after 4 floats */
    EXPECT(rc == AMP_OK, "adjacent, not overlapping: expected AMP_OK got %s (%s)", amp_status_string(rc), amp_last_error());
  }
}

static void convert_with_n_zero_accepts_null_pointers(void) {
  int a, b;
  for (a = 0; a < 3; a++) for (b = 0; b < 3; b++) {
    amp_status rc = amp_convert(NULL, types[a], NULL, types[b], 0);
    EXPECT(rc == AMP_OK, "%s->%s n 0 NULL: expected AMP_OK got %s", tname(types[b]), tname(types[a]), amp_status_string(rc));
  }
}

/* The SIMD path is on exactly where the CPU has F16C and AVX2 (and the OS their state);
   amp_simd_enable(0) forces the portable path and (1) returns to it. */
static void simd_path_follows_the_cpu_and_the_switch(void) {
  int want = 0, level = 0;
#if defined(HAVE_X86_ORACLES) && !defined(AMP_NO_SIMD)
  unsigned a, b, c, d, lo, hi;
  want = cpu_has_f16c() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 5));
  level = want;
  if (want) {   /* AVX-512 F, DQ, BW, VL and the OS saving opmask/ZMM state (XCR0 bits 5-7) */
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0u));
    (void)hi;
    if ((b & 0xc0030000u) == 0xc0030000u && (lo & 0xe0u) == 0xe0u) level = 2;
  }
  EXPECT(amp__cpu_level() == level, "SIMD level: expected %d got %d", level, amp__cpu_level());
#elif defined(AMP__NEON_SIMD)
  want = 1;   /* NEON: every AArch64 CPU; level 2 where BFCVTN is compiled in and the CPU has BF16 */
  level = 1;
#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC) && defined(__linux__)
  if (getauxval(AT_HWCAP2) & (1ul << 14)) level = 2;
#endif
  EXPECT(amp__cpu_level() == level, "SIMD level: expected %d got %d", level, amp__cpu_level());
#endif
  amp_simd_enable(1);
  EXPECT(amp_simd_active() == want, "simd active: expected %d got %d", want, amp_simd_active());
  amp_simd_enable(0);
  EXPECT(amp_simd_active() == 0, "after amp_simd_enable(0): expected 0 got %d", amp_simd_active());
  amp_simd_enable(1);
  EXPECT(amp_simd_active() == want, "after amp_simd_enable(1): expected %d got %d", want, amp_simd_active());
#ifdef AMP__NEON_SIMD
  printf("  SIMD path: %s\n", level >= 2 ? "NEON + BFCVTN" : "NEON");
#else
  printf("  SIMD path: %s\n", level >= 2 ? "AVX-512" : want ? "F16C/AVX2" : "not available (portable only)");
#endif
}

int main(void) {
  RUN(f32_to_f16_named_edge_cases);
  RUN(f32_to_bf16_named_edge_cases);
  RUN(f16_edge_cases_are_what_f16c_does);
  RUN(f16_to_f32_is_exact_for_all_65536_patterns);
  RUN(f16_to_f32_matches_vcvtph2ps_for_all_65536_patterns);
  RUN(bf16_to_f32_is_exact_for_all_65536_patterns);
  RUN(round_trip_through_f32_is_the_identity);
  RUN(f32_sample_rounds_like_the_double_reference);
  RUN(simd_path_follows_the_cpu_and_the_switch);
  RUN(bulk_equals_scalar_for_every_pair_small_n_unaligned);
  RUN(bulk_equals_scalar_on_a_large_random_buffer);
  RUN(overlapping_buffers_of_one_size_convert_as_from_a_copy);
  RUN(bulk_with_streaming_stores_equals_scalar);
  RUN(odd_addresses_above_the_streaming_threshold_convert_every_pair);
  RUN(every_16bit_input_converts_like_the_scalar_functions_on_every_path);
  RUN(f32_sample_and_special_classes_convert_like_the_scalar_functions_on_every_path);
  RUN(convert_gives_the_scalar_bits_whatever_the_fpcr_holds);
  RUN(convert_rejects_null_pointers_and_names_them);
  RUN(convert_rejects_an_unknown_dtype_and_names_it);
  RUN(convert_rejects_overlap_of_different_element_sizes);
  RUN(convert_with_n_zero_accepts_null_pointers);
  RUN(traits_table_rows_hold_the_known_values);
  RUN(a_dtype_outside_the_table_is_refused_everywhere);
  RUN(fp8_is_refused_where_a_compute_type_is_needed);
  TEST_END();
}
