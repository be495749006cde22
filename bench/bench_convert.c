/* bench/bench_convert.c - amp_convert throughput for every pair of F32/F16/BF16 at 64M elements
   (and f32 into each fp8 format against f32 -> f16, the last lines),
   in GB/s counting bytes read + written, median of 11, built as users build (`cc -O2`, no -march),
   against references run on the same buffers in the same run, taking turns: the plain intrinsic
   loops (AVX2 + F16C, AVX-512, AVX512-BF16's vcvtneps2bf16 for f32->bf16, each where the CPU has
   it; the line compares with the widest one), memcpy, and NumPy's astype (bench/cpu_peers.py,
   f32<->f16, into a preallocated array: np.copyto with the cast, what astype does minus the
   allocation).
   The portable path (amp_simd_enable(0)) the same way. BENCH_CONVERT_LEVEL=1 caps amp_convert's
   loops and the plain references at AVX2 (on an AVX-512 CPU). */
#include "bench.h"
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "peers.h"

#define N (bench_emulated() ? (size_t)1 << 16 : (size_t)64 << 20)
#define REPS 11

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define HAVE_REF 1
#include <immintrin.h>
#define T __attribute__((target("avx2,f16c")))
/* The plain loops: 8 elements an iteration, unaligned loads and stores, no unrolling; n % 8 == 0. */
T static void ref_f32_f16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8)
    _mm_storeu_si128((__m128i *)((uint16_t *)d + i), _mm256_cvtps_ph(_mm256_loadu_ps((const float *)s + i), _MM_FROUND_TO_NEAREST_INT));
}
T static void ref_f16_f32(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8) _mm256_storeu_ps((float *)d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)s + i))));
}
T static __m128i ref_bf16_8(__m256i u) {  /* round to nearest even, NaN -> (bits >> 16) | 0x40 */
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
T static void ref_f32_bf16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8) _mm_storeu_si128((__m128i *)((uint16_t *)d + i), ref_bf16_8(_mm256_loadu_si256((const __m256i *)((const float *)s + i))));
}
T static void ref_bf16_f32(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8)
    _mm256_storeu_si256((__m256i *)((float *)d + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)s + i))), 16));
}
T static void ref_f16_bf16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8)
    _mm_storeu_si128((__m128i *)((uint16_t *)d + i), ref_bf16_8(_mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)s + i))))));
}
T static void ref_bf16_f16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 8) {
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)s + i))), 16);
    _mm_storeu_si128((__m128i *)((uint16_t *)d + i), _mm256_cvtps_ph(_mm256_castsi256_ps(w), _MM_FROUND_TO_NEAREST_INT));
  }
}
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))
/* The same loops on 16 lanes; n % 16 == 0. */
T5 static void ref5_f32_f16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 16)
    _mm256_storeu_si256((__m256i *)((uint16_t *)d + i), _mm512_cvtps_ph(_mm512_loadu_ps((const float *)s + i), _MM_FROUND_TO_NEAREST_INT));
}
T5 static void ref5_f16_f32(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 16) _mm512_storeu_ps((float *)d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)s + i))));
}
T5 static __m256i ref5_bf16_16(__m512i u) {
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40)));
}
T5 static void ref5_f32_bf16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 16) _mm256_storeu_si256((__m256i *)((uint16_t *)d + i), ref5_bf16_16(_mm512_loadu_si512((const float *)s + i)));
}
T5 static void ref5_bf16_f32(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 16)
    _mm512_storeu_si512((float *)d + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)s + i))), 16));
}
T5 static void ref5_f16_bf16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 16)
    _mm256_storeu_si256((__m256i *)((uint16_t *)d + i), ref5_bf16_16(_mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)s + i))))));
}
T5 static void ref5_bf16_f16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 16) {
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)s + i))), 16);
    _mm256_storeu_si256((__m256i *)((uint16_t *)d + i), _mm512_cvtps_ph(_mm512_castsi512_ps(w), _MM_FROUND_TO_NEAREST_INT));
  }
}
/* AVX512-BF16: vcvtne2ps2bf16, 32 a time (flushes subnormal inputs: a speed reference only) */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void refbf_f32_bf16(void *d, const void *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i += 32) {
    __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps((const float *)s + i + 16), _mm512_loadu_ps((const float *)s + i));
    _mm512_storeu_si512((uint16_t *)d + i, (__m512i)h);
  }
}
static int cpu_has_avx512bf16(void) {
  unsigned r[4];
  if (amp__cpu_level() < 2) return 0;
  __asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(7u), "c"(1u));   /* leaf 7 subleaf 1 */
  return (r[0] >> 5) & 1u;
}
#endif

typedef void (*conv_fn)(void *, const void *, size_t);
static amp_dtype g_dt, g_st;
static size_t g_bytes;
static void run_simd(void *d, const void *s, size_t n) { amp_simd_enable(1); amp_convert(d, g_dt, s, g_st, n); }
static void run_portable(void *d, const void *s, size_t n) { amp_simd_enable(0); amp_convert(d, g_dt, s, g_st, n); amp_simd_enable(1); }
static void run_memcpy(void *d, const void *s, size_t n) { (void)n; memcpy(d, s, g_bytes); }
/* fp8 against the f16 cast of the same f32 input, on the same buffers (the f16 output holds either) */
static void run_f32_e4m3(void *d, const void *s, size_t n) { amp_convert(d, AMP_E4M3, s, AMP_F32, n); }
static void run_f32_e5m2(void *d, const void *s, size_t n) { amp_convert(d, AMP_E5M2, s, AMP_F32, n); }
static void run_f32_f16(void *d, const void *s, size_t n) { amp_convert(d, AMP_F16, s, AMP_F32, n); }
/* fp8 back to f32 against f16 -> f32: the codes are the casts of the same f32 input (g_e4m3,
   g_e5m2); the f16 source is the s passed */
static amp_fp8 *g_e4m3, *g_e5m2;
static void run_e4m3_f32(void *d, const void *s, size_t n) { (void)s; amp_convert(d, AMP_F32, g_e4m3, AMP_E4M3, n); }
static void run_e5m2_f32(void *d, const void *s, size_t n) { (void)s; amp_convert(d, AMP_F32, g_e5m2, AMP_E5M2, n); }
static void run_f16_f32(void *d, const void *s, size_t n) { amp_convert(d, AMP_F32, s, AMP_F16, n); }
/* amp_quantize: the scaled cast into E4M3 and the amax of the input, in one pass */
static void run_quantize(void *d, const void *s, size_t n) {
  float scale = 3.0f, amax = 0.0f;
  amp_quantize(amp_cpu(), d, AMP_E4M3, s, AMP_F32, n, &scale, &amax);
}

/* amp_quantize with no output: the amax alone, the same reads as the quantize and no writes */
static void run_amax(void *d, const void *s, size_t n) {
  float scale = 3.0f, amax = 0.0f;
  (void)d;
  amp_quantize(amp_cpu(), NULL, AMP_E4M3, s, AMP_F32, n, &scale, &amax);
}

/* GB/s of each of m functions (bytes[k] moved each), median of REPS timed runs after one untimed.
   The functions take turns within each repetition so that a noisy neighbour slows all alike. */
static void rates(conv_fn *f, const double *bytes, double *gbs, int m, void *d, const void *s, size_t n) {
  double t[8][REPS];
  int r, k;
  for (k = 0; k < m; k++) f[k](d, s, n);
  for (r = 0; r < REPS; r++)
    for (k = 0; k < m; k++) { double t0 = bench_now(); f[k](d, s, n); t[k][r] = bench_now() - t0; }
  for (k = 0; k < m; k++) gbs[k] = bytes[k] / bench_median(t[k], REPS) / 1e9;
}

static const char *tn(amp_dtype t) { return t == AMP_F32 ? "f32" : t == AMP_F16 ? "f16" : "bf16"; }

int main(void) {
  static const amp_dtype ty[3] = { AMP_F32, AMP_F16, AMP_BF16 };
  void *buf[3], *out[3];
  size_t i;
  int a, b, simd = amp_simd_active(), lvl = 0;
#ifdef HAVE_REF
  int bf = 0;
#endif
  peers P;
  char why[200] = "";
  uint32_t x = 1;
  (void)bench_ref;  /* bench.h helper not used here */
  memset(&P, 0, sizeof P);
#ifdef HAVE_REF
  lvl = amp__cpu_level(); bf = cpu_has_avx512bf16();
  {   /* BENCH_CONVERT_LEVEL=1: amp_convert's loops and the plain ones at AVX2 on an AVX-512 CPU */
    const char *cap = getenv("BENCH_CONVERT_LEVEL");
    if (cap && *cap && atoi(cap) >= 1 && atoi(cap) < lvl) { lvl = atoi(cap); amp__isa_cap = lvl; bf = 0; }
  }
#endif
  for (a = 0; a < 3; a++) {
    buf[a] = malloc(N * amp_dtype_size(ty[a]));
    out[a] = malloc(N * amp_dtype_size(ty[a]));
    if (!buf[a] || !out[a]) { printf("bench_convert: out of memory\n"); return 0; }
  }
  /* roughly standard normal values (a sum of four uniforms), like the randn data of the NumPy
     peer: nearly all are normal halves */
  for (i = 0; i < N; i++) {
    float v = 0;
    int k;
    for (k = 0; k < 4; k++) { x = x * 1664525u + 1013904223u; v += (float)(x >> 8) / 16777216.0f; }
    ((float *)buf[0])[i] = (v - 2.0f) * 1.7320508f;
  }
  amp_convert(buf[1], AMP_F16, buf[0], AMP_F32, N);
  amp_convert(buf[2], AMP_BF16, buf[0], AMP_F32, N);
#ifdef AMP__NEON_SIMD
  lvl = amp__isa();
  (void)simd;   /* NEON: always there */
#endif
  printf("bench_convert: amp_convert, %zu elements, GB/s (bytes read + written), median of %d; SIMD path: %s\n", N, REPS,
#ifdef AMP__NEON_SIMD
         lvl >= 2 ? "NEON + BFCVTN" : "NEON"
#else
         !simd ? "not available" : lvl >= 2 ? "AVX-512" : "AVX2+F16C"
#endif
         );
  for (b = 0; b < 3; b++) for (a = 0; a < 3; a++) {
    amp_dtype st = ty[b], dt = ty[a];
    double bytes = (double)N * (double)(amp_dtype_size(st) + amp_dtype_size(dt));
    double ours, port, mc, ref = 0, gbs[8], by[8];
    char name[96];
    const char *refname = "";
    const char *rn[8];
    conv_fn f[8];
    int m = 0, k;
    g_st = st; g_dt = dt;
    /* memcpy on the same buffers: as many bytes as the smaller side, read and written */
    g_bytes = N * (amp_dtype_size(st) < amp_dtype_size(dt) ? amp_dtype_size(st) : amp_dtype_size(dt));
    f[m] = run_memcpy; by[m++] = 2.0 * (double)g_bytes;
    f[m] = run_simd; by[m++] = bytes;
    f[m] = run_portable; by[m++] = bytes;
#ifdef HAVE_REF
    if (st != dt && lvl >= 1) {   /* the plain loops */
      conv_fn r2 = st == AMP_F32 ? (dt == AMP_F16 ? ref_f32_f16 : ref_f32_bf16) : st == AMP_F16 ? (dt == AMP_F32 ? ref_f16_f32 : ref_f16_bf16)
                                 : (dt == AMP_F32 ? ref_bf16_f32 : ref_bf16_f16);
      conv_fn r5 = st == AMP_F32 ? (dt == AMP_F16 ? ref5_f32_f16 : ref5_f32_bf16) : st == AMP_F16 ? (dt == AMP_F32 ? ref5_f16_f32 : ref5_f16_bf16)
                                 : (dt == AMP_F32 ? ref5_bf16_f32 : ref5_bf16_f16);
      rn[m] = "AVX2"; f[m] = r2; by[m++] = bytes;
      if (lvl >= 2) { rn[m] = "AVX-512"; f[m] = r5; by[m++] = bytes; }
      if (bf && st == AMP_F32 && dt == AMP_BF16) { rn[m] = "AVX512-BF16"; f[m] = refbf_f32_bf16; by[m++] = bytes; }
    }
#endif
    rates(f, by, gbs, m, out[a], buf[b], N);
    mc = gbs[0]; ours = gbs[1]; port = gbs[2];
    /* the reference: the plain loop of the widest ISA the CPU has (the last one added), which is
       the fastest one on a quiet machine; not the maximum of the noisy medians, which would favour
       whichever loop a neighbour happened to disturb least */
    if (m > 3) { ref = gbs[m - 1]; refname = rn[m - 1]; }
    for (k = 3; k < m - 1; k++)   /* a narrower loop that measured faster is named beside it */
      if (gbs[k] > ref) printf("  (%s->%s: the plain %s loop measured %.2f GB/s in this run)\n", tn(st), tn(dt), rn[k], gbs[k]);
    if (ref > 0) {
      snprintf(name, sizeof name, "%s->%s vs plain %s loop", tn(st), tn(dt), refname);
      bench_line(name, ours, ref, "GB/s");
    }
    snprintf(name, sizeof name, "%s->%s vs memcpy", tn(st), tn(dt));
    bench_line(name, ours, mc, "GB/s");
    snprintf(name, sizeof name, "%s->%s portable vs %s", tn(st), tn(dt), ref > 0 ? "plain loop" : "memcpy");
    bench_line(name, port, ref > 0 ? ref : mc, "GB/s");
#ifdef AMP__NEON_SIMD
    if (st != dt) {   /* AArch64: the NEON loops against the portable ones */
      snprintf(name, sizeof name, "%s->%s NEON vs portable", tn(st), tn(dt));
      bench_line(name, ours, port, "GB/s");
    }
#endif
    if (st != dt && st != AMP_BF16 && dt != AMP_BF16) {   /* NumPy has no bf16 */
      if (!P.n && !why[0]) peers_run(&P, "astype", "numpy", N, REPS, why, sizeof why);
      if (P.n) {
        double tnp = peers_num(&P, st == AMP_F32 ? "numpy_f32_f16_s" : "numpy_f16_f32_s");
        snprintf(name, sizeof name, "%s->%s vs NumPy %s astype", tn(st), tn(dt), peers_get(&P, "numpy_version") ? peers_get(&P, "numpy_version") : "");
        if (tnp > 0) bench_line(name, ours, bytes / tnp / 1e9, "GB/s");
      } else printf("%s->%s vs NumPy astype: skipped (%s)\n", tn(st), tn(dt), why);
    }
  }
  {   /* fp8: f32 -> E4M3 / E5M2 (saturating) against f32 -> f16, taking turns, in bytes moved */
    conv_fn f[3] = { run_f32_e4m3, run_f32_e5m2, run_f32_f16 };
    double by[3] = { 5.0 * (double)N, 5.0 * (double)N, 6.0 * (double)N }, gbs[3];
    rates(f, by, gbs, 3, out[1], buf[0], N);
    bench_line("f32->e4m3 vs f32->f16 (amp_convert)", gbs[0], gbs[2], "GB/s");
    bench_line("f32->e5m2 vs f32->f16 (amp_convert)", gbs[1], gbs[2], "GB/s");
  }
  {   /* fp8 -> f32 against f16 -> f32, taking turns, in bytes moved */
    conv_fn f[3] = { run_e4m3_f32, run_e5m2_f32, run_f16_f32 };
    double by[3] = { 5.0 * (double)N, 5.0 * (double)N, 6.0 * (double)N }, gbs[3];
    g_e4m3 = (amp_fp8 *)malloc(N); g_e5m2 = (amp_fp8 *)malloc(N);
    if (!g_e4m3 || !g_e5m2) { printf("bench_convert: out of memory\n"); return 0; }
    amp_convert(g_e4m3, AMP_E4M3, buf[0], AMP_F32, N);
    amp_convert(g_e5m2, AMP_E5M2, buf[0], AMP_F32, N);
    rates(f, by, gbs, 3, out[0], buf[1], N);
    bench_line("e4m3->f32 vs f16->f32 (amp_convert)", gbs[0], gbs[2], "GB/s");
    bench_line("e5m2->f32 vs f16->f32 (amp_convert)", gbs[1], gbs[2], "GB/s");
    free(g_e4m3); free(g_e5m2);
  }
  {   /* fp8 quantize (scale, cast, amax in one pass) against the f16 cast, against memcpy of the
         input, and against its own reads alone (the amax pass, in elements per second: the same
         input read, 1 byte a value fewer written) */
    conv_fn f[4] = { run_quantize, run_f32_f16, run_memcpy, run_amax };
    double by[4] = { 5.0 * (double)N, 6.0 * (double)N, 8.0 * (double)N, 5.0 * (double)N }, gbs[4];
    g_bytes = 4 * N;   /* the f32 output buffer holds the copy */
    rates(f, by, gbs, 4, out[0], buf[0], N);
    bench_line("f32->e4m3 quantize+amax vs f32->f16 (amp_convert)", gbs[0], gbs[1], "GB/s");
    bench_line("f32->e4m3 quantize+amax vs memcpy", gbs[0], gbs[2], "GB/s");
    bench_line("f32->e4m3 quantize+amax vs the amax pass alone (no output)", gbs[0] / 5.0, gbs[3] / 5.0, "G values/s");
  }
  for (a = 0; a < 3; a++) { free(buf[a]); free(out[a]); }
  return 0;
}
