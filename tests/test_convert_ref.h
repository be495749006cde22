/* tests/test_convert_ref.h - the oracles the conversion tests compare amp.h with.

   1. A software reference written through double arithmetic, not bit tricks: frexp finds the
      binade, the value is scaled to a count of quanta (ulps of the target format in that binade)
      and rounded by nearbyint (ties to even in the default rounding mode); the bits are then the
      binade's exponent and that count. Only NaN payloads are written as bits (the rule is a
      bit rule: F16C keeps the payload's top bits and sets the quiet bit).
   2. The hardware: F16C vcvtps2ph / vcvtph2ps (round to nearest even), and AVX512-BF16
      vcvtneps2bf16 for f32 -> bf16 on normal inputs (it flushes subnormals, so those are not
      compared with it), each in a target-attributed function, used only where CPUID says the CPU
      has it. */
#ifndef TEST_CONVERT_REF_H
#define TEST_CONVERT_REF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Built with -ffast-math / -Ofast, the double reference is not IEEE arithmetic any more: ref_round's
   add is folded away and -Ofast's startup code makes subnormals read and compute as zero. Such a
   build skips the comparisons with it (REF_IEEE 0); the F16C oracle, the named expected bits and
   the amp.h paths against each other still run. */
#if defined(__FAST_MATH__)
#define REF_IEEE 0
#else
#define REF_IEEE 1
#endif
#define REF_SKIP_MSG "skipped: the double reference (built with -ffast-math: no IEEE arithmetic)\n"

static inline uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float f32_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* f16: a = |x| lies in [2^(e-1), 2^e) (frexp); the quantum of that binade is 2^(e-11), but never
   finer than the subnormal quantum 2^-24 (e >= -13). q = a / quantum rounded to an integer, 0..2048;
   the f16 with biased exponent e+14 and 1024 implied quanta is ((e+14) << 10) + q - 1024, which for
   e = -13 is q itself (the subnormal encoding) and which carries into the next exponent at
   q = 2048. Anything rounding above 65504 is inf. A binade is set up once (the exhaustive test
   walks f32 patterns one binade at a time), its values then cost one multiply and one nearbyint. */
/* Round to an integer, ties to even, for 0 <= v < 2^51: adding 1.5 * 2^52 leaves no fraction bits, so the
   FPU rounds (to nearest even, the default mode) exactly as nearbyint does, without a libm call. */
static inline double ref_round(double v) {
  const double big = 6755399441055744.0; /* 1.5 * 2^52 (IEEE arithmetic: no compiler may fold this) */
  return (v + big) - big;
}
typedef struct ref_binade { int e; double scale, limit; } ref_binade;
static inline ref_binade ref_f16_binade(int e) {
  ref_binade b;
  b.e = e < -13 ? -13 : e;
  b.scale = ldexp(1.0, 11 - b.e);
  b.limit = 65504.0 * b.scale;
  return b;
}
static inline uint16_t ref_f16_in(double a, ref_binade b) {
  double q = ref_round(a * b.scale);
  return q > b.limit ? (uint16_t)0x7c00 : (uint16_t)(((b.e + 14) << 10) + (int)q - 1024);
}
/* bf16: the same with 8 significant bits: quantum 2^(e-8), at least 2^-133 (e >= -125);
   bits ((e+126) << 7) + q - 128; above the largest bf16 (255 * 2^120) is inf. */
static inline ref_binade ref_bf16_binade(int e) {
  ref_binade b;
  b.e = e < -125 ? -125 : e;
  b.scale = ldexp(1.0, 8 - b.e);
  b.limit = ldexp(255.0, 120) * b.scale;
  return b;
}
static inline uint16_t ref_bf16_in(double a, ref_binade b) {
  double q = ref_round(a * b.scale);
  return q > b.limit ? (uint16_t)0x7f80 : (uint16_t)(((b.e + 126) << 7) + (int)q - 128);
}
static inline uint16_t ref_f32_to_f16(float x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs((double)x);
  int e = 0;
  if (isnan(x)) return (uint16_t)(sign | 0x7e00 | ((bits_of(x) >> 13) & 0x3ff));
  if (isinf(x)) return (uint16_t)(sign | 0x7c00);
  frexp(a, &e);
  return (uint16_t)(sign | ref_f16_in(a, ref_f16_binade(a == 0 ? -13 : e)));
}
static inline uint16_t ref_f32_to_bf16(float x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs((double)x);
  int e = 0;
  if (isnan(x)) return (uint16_t)((bits_of(x) >> 16) | 0x40);
  if (isinf(x)) return (uint16_t)(sign | 0x7f80);
  frexp(a, &e);
  return (uint16_t)(sign | ref_bf16_in(a, ref_bf16_binade(a == 0 ? -125 : e)));
}

/* f16 -> f32: exponent field 0 counts quanta of 2^-24, otherwise (1024 + m) quanta of 2^(E-25).
   A NaN comes out quiet with its payload, as vcvtph2ps gives it. */
static inline uint32_t ref_f16_to_f32(uint16_t h) {
  int E = (h >> 10) & 31, m = h & 1023;
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  if (E == 31) return m ? sign | 0x7fc00000u | ((uint32_t)m << 13) : sign | 0x7f800000u;
  return sign | bits_of((float)(E ? ldexp(1024 + m, E - 25) : ldexp(m, -24)));
}
/* bf16 -> f32: (128 + m) quanta of 2^(E-134), or m quanta of 2^-133; NaN bits shifted up. */
static inline uint32_t ref_bf16_to_f32(uint16_t h) {
  int E = (h >> 7) & 255, m = h & 127;
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  if (E == 255) return m ? (uint32_t)h << 16 : sign | 0x7f800000u;
  return sign | bits_of((float)(E ? ldexp(128 + m, E - 134) : ldexp(m, -133)));
}

/* ---- hardware oracles ---------------------------------------------------------------------- */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define HAVE_X86_ORACLES 1
#include <cpuid.h>
#include <immintrin.h>
static inline unsigned long long xcr0(void) {
  unsigned lo, hi;
  __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0u));
  return ((unsigned long long)hi << 32) | lo;
}
/* F16C needs the AVX state saved by the OS (CPUID.1:ECX OSXSAVE and AVX, XCR0 bits 1-2). */
static inline int cpu_has_f16c(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!(c & bit_OSXSAVE) || !(c & bit_AVX) || !(c & bit_F16C)) return 0;
  return (xcr0() & 6) == 6;
}
/* AVX512-BF16 on 256-bit vectors: CPUID.(7,1):EAX bit 5, AVX512VL, and the OS saving ZMM state. */
static inline int cpu_has_avx512bf16(void) {
  unsigned a, b, c, d;
  if (!cpu_has_f16c() || (xcr0() & 0xe6) != 0xe6) return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 31)) || !(b & (1u << 16))) return 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
  return (a >> 5) & 1;
}
/* n a multiple of 8 */
__attribute__((target("avx,f16c"))) static inline void hw_f32_to_f16(uint16_t *d, const float *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("avx,f16c"))) static inline void hw_f16_to_f32(float *d, const uint16_t *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
}
__attribute__((target("avx512f,avx512vl,avx512bf16"))) static inline void hw_f32_to_bf16(uint16_t *d, const float *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8) {
    __m128bh r = _mm256_cvtneps_pbh(_mm256_loadu_ps(s + i));
    memcpy(d + i, &r, 16);
  }
}
#else
static inline int cpu_has_f16c(void) { return 0; }
static inline int cpu_has_avx512bf16(void) { return 0; }
static inline void hw_f32_to_f16(uint16_t *d, const float *s, size_t n) { (void)d; (void)s; (void)n; }
static inline void hw_f16_to_f32(float *d, const uint16_t *s, size_t n) { (void)d; (void)s; (void)n; }
static inline void hw_f32_to_bf16(uint16_t *d, const float *s, size_t n) { (void)d; (void)s; (void)n; }
#endif
#endif
