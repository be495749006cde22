/* bench/bench_convert.c - amp_convert throughput for every pair of F32/F16/BF16 at 64M elements,
   in GB/s counting bytes read + written, median of 7, against references run on the same buffers
   in the same run: a plain F16C intrinsic loop (f32<->f16), a plain AVX2 loop doing the same
   rounding (the bf16 pairs), memcpy (same type, and for every pair). The portable path
   (amp_simd_enable(0)) the same way. */
#include "bench.h"
#define AMP_IMPLEMENTATION
#include "amp.h"

#define N ((size_t)64 << 20)
#define REPS 7

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
#endif

typedef void (*conv_fn)(void *, const void *, size_t);
static amp_dtype g_dt, g_st;
static size_t g_bytes;
static void run_simd(void *d, const void *s, size_t n) { amp_simd_enable(1); amp_convert(d, g_dt, s, g_st, n); }
static void run_portable(void *d, const void *s, size_t n) { amp_simd_enable(0); amp_convert(d, g_dt, s, g_st, n); amp_simd_enable(1); }
static void run_memcpy(void *d, const void *s, size_t n) { (void)n; memcpy(d, s, g_bytes); }

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
  int a, b, simd = amp_simd_active();
  (void)bench_ref;  /* bench.h helper not used here (CPU benchmark: no PyTorch figures) */
  uint32_t x = 1;
  for (a = 0; a < 3; a++) {
    buf[a] = malloc(N * amp_dtype_size(ty[a]));
    out[a] = malloc(N * amp_dtype_size(ty[a]));
    if (!buf[a] || !out[a]) { printf("bench_convert: out of memory\n"); return 0; }
  }
  /* roughly standard normal values (a sum of four uniforms), like the randn data the NumPy
     figure is usually quoted for: nearly all are normal halves */
  for (i = 0; i < N; i++) {
    float v = 0;
    int k;
    for (k = 0; k < 4; k++) { x = x * 1664525u + 1013904223u; v += (float)(x >> 8) / 16777216.0f; }
    ((float *)buf[0])[i] = (v - 2.0f) * 1.7320508f;
  }
  amp_convert(buf[1], AMP_F16, buf[0], AMP_F32, N);
  amp_convert(buf[2], AMP_BF16, buf[0], AMP_F32, N);
  printf("amp_convert, %zu elements, GB/s (bytes read + written), median of %d; SIMD path: %s\n", N, REPS,
         simd ? "F16C/AVX2" : "not available");
  for (b = 0; b < 3; b++) for (a = 0; a < 3; a++) {
    amp_dtype st = ty[b], dt = ty[a];
    double bytes = (double)N * (double)(amp_dtype_size(st) + amp_dtype_size(dt));
    double ours, port, mc, ref, gbs[4], by[4];
    char name[96];
    const char *refname = "memcpy";
    conv_fn f[4];
    int m = 0;
    g_st = st; g_dt = dt;
    /* memcpy on the same buffers: as many bytes as the smaller side, read and written */
    g_bytes = N * (amp_dtype_size(st) < amp_dtype_size(dt) ? amp_dtype_size(st) : amp_dtype_size(dt));
    f[m] = run_memcpy; by[m++] = 2.0 * (double)g_bytes;
    f[m] = run_simd; by[m++] = bytes;
    f[m] = run_portable; by[m++] = bytes;
#ifdef HAVE_REF
    if (simd) {
      if (st == AMP_F32 && dt == AMP_F16) { f[m] = ref_f32_f16; refname = "F16C loop"; }
      if (st == AMP_F16 && dt == AMP_F32) { f[m] = ref_f16_f32; refname = "F16C loop"; }
      if (st == AMP_F32 && dt == AMP_BF16) { f[m] = ref_f32_bf16; refname = "AVX2 loop"; }
      if (st == AMP_BF16 && dt == AMP_F32) { f[m] = ref_bf16_f32; refname = "AVX2 loop"; }
      if (st == AMP_F16 && dt == AMP_BF16) { f[m] = ref_f16_bf16; refname = "F16C+AVX2 loop"; }
      if (st == AMP_BF16 && dt == AMP_F16) { f[m] = ref_bf16_f16; refname = "F16C+AVX2 loop"; }
      if (st != dt) by[m++] = bytes;
    }
#endif
    rates(f, by, gbs, m, out[a], buf[b], N);
    mc = gbs[0]; ours = gbs[1]; port = gbs[2]; ref = m > 3 ? gbs[3] : mc;
    if (m > 3) {
      snprintf(name, sizeof name, "%s->%s amp_convert vs %s", tn(st), tn(dt), refname);
      bench_line(name, ours, ref, "GB/s");
    }
    snprintf(name, sizeof name, "%s->%s amp_convert vs memcpy", tn(st), tn(dt));
    bench_line(name, ours, mc, "GB/s");
    snprintf(name, sizeof name, "%s->%s portable vs %s", tn(st), tn(dt), refname);
    bench_line(name, port, ref, "GB/s");
    if (st == AMP_F32 && dt == AMP_F16)
      bench_line("f32->f16 portable vs NumPy 2.1 (PERF.md figure, not measured here)", port, 2.1, "GB/s");
  }
  for (a = 0; a < 3; a++) { free(buf[a]); free(out[a]); }
  return 0;
}
