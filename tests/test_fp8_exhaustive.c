/* tests/test_fp8_exhaustive.c - every one of the 2^32 f32 bit patterns through amp_f32_to_e4m3 and
   amp_f32_to_e5m2, saturating and not, against the CUDA toolkit's own host code in cuda_fp8.h
   (__nv_cvt_float_to_fp8 with __NV_SATFINITE / __NV_NOSAT), bit for bit (NaN included: both write
   0x7f); amp_f32_to_e8m0 against __nv_cvt_float_to_e8m0 (cudaRoundPosInf and cudaRoundZero, both
   __NV_SATFINITE) on every pattern, and rounding down also against frexp; the saturating bulk loops
   at each SIMD level the CPU has (AVX-512, AVX2) and the portable one against the scalar functions
   on every pattern; all 256 codes of each format decoded against __nv_cvt_fp8_to_halfraw widened,
   by the scalar functions and by each level's bulk loop.
   cuda_fp8.h is C++: tests/run.sh builds this file as C++ (the line below) with the toolkit's
   include directory ($CUDA_HOME/include) on the path. Without the header (or built as C) the
   oracle comparisons say "skipped" and the rest runs.
   Threads: one per core (at most 16), the 512 binades (sign, exponent field) dealt out in turn.
   AMP_TEST_QUICK=1 samples every 8191st mantissa of each binade, and those at and beside its ties.
   The edge cases by name are in tests/test_fp8.c. */
// LANG: c++
#define _POSIX_C_SOURCE 200809L
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#if defined(__cplusplus) && defined(__has_include)
#if __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define HAVE_NV 1
#endif
#endif
#ifndef HAVE_NV
#define HAVE_NV 0
#endif

#define CHUNK 4096
#define NFAIL 6

static inline uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float f32_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
/* NaN and inf by their bits: the -Ofast build folds isnan() and isinf() */
static inline int nan_bits(float x) { return (bits_of(x) & 0x7fffffffu) > 0x7f800000u; }
static inline int inf_bits(float x) { return (bits_of(x) & 0x7fffffffu) == 0x7f800000u; }

/* A thread's share: binades tid, tid + nthreads, ...; what it checked and the first NFAIL
   mismatches, written out as messages. */
typedef struct job {
  int tid, nthreads, level;
  uint32_t step;
  unsigned long long checked, nfail;
  char msg[NFAIL][160];
} job;

static void note(job *j, uint32_t in, unsigned want, unsigned got, const char *what) {
  if (j->nfail < NFAIL)
    snprintf(j->msg[j->nfail], sizeof j->msg[0], "%s: in 0x%08x (%.9g) expected 0x%02x got 0x%02x", what, in,
             (double)f32_of(in), want, got);
  j->nfail++;
}
/* want against got, n codes: every difference noted. */
static void compare(job *j, const float *in, const uint8_t *want, const uint8_t *got, size_t n, const char *what) {
  size_t i;
  if (memcmp(want, got, n) != 0)
    for (i = 0; i < n; i++) if (want[i] != got[i]) note(j, bits_of(in[i]), want[i], got[i], what);
}

/* E8M0 rounded down, from frexp: |x| = f 2^k with f in [0.5, 1) lies in [2^(k-1), 2^k), so its
   power-of-two floor is 2^(k-1), e = k - 1 + 127, held to 0..254 (0 and subnormals: 0; inf: 254). */
static uint8_t ref_e8m0_down(float x) {
  int k = 0;
  double a = fabs((double)x);
  if (nan_bits(x)) return 0xff;
  if (inf_bits(x)) return 254;
  if (a == 0.0) return 0;
  frexp(a, &k);
  k += 126;
  return (uint8_t)(k < 0 ? 0 : k > 254 ? 254 : k);
}

enum { SAT4, NOSAT4, SAT5, NOSAT5, UP, DOWN, NCASE };
static const char *const nv_what[NCASE] = {
  "e4m3 satfinite vs __nv_cvt_float_to_fp8", "e4m3 nosat vs __nv_cvt_float_to_fp8",
  "e5m2 satfinite vs __nv_cvt_float_to_fp8", "e5m2 nosat vs __nv_cvt_float_to_fp8",
  "e8m0 round up vs __nv_cvt_float_to_e8m0(cudaRoundPosInf)", "e8m0 round down vs __nv_cvt_float_to_e8m0(cudaRoundZero)" };

#if HAVE_NV
/* The toolkit's answers for a block. flatten: every call inlined, so the constant saturation and
   format arguments specialise cuda_fp8.h's code (its code is unchanged; it runs about twice as fast). */
#if defined(__GNUC__)
__attribute__((flatten))
#endif
static void nv_block(uint8_t *const *want, const float *in, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    float x = in[i];
    want[SAT4][i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    want[NOSAT4][i] = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3);
    want[SAT5][i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    want[NOSAT5][i] = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
    want[UP][i] = __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf);
    want[DOWN][i] = __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero);
  }
}
#endif

static void *sweep(void *arg) {
  job *j = (job *)arg;
  float *in = (float *)malloc(CHUNK * sizeof(float));
  uint8_t *got[NCASE], *want[NCASE], *bulk = (uint8_t *)malloc(CHUNK);
  unsigned blk;
  int k;
  for (k = 0; k < NCASE; k++) { got[k] = (uint8_t *)malloc(CHUNK); want[k] = (uint8_t *)malloc(CHUNK); }
  for (blk = (unsigned)j->tid; blk < 512; blk += (unsigned)j->nthreads) {
    uint32_t sign = (blk >> 8) << 31, E = blk & 255, m = 0;
    int ties = j->step > 1;   /* sampling: first the mantissas at and beside every tie of both formats */
    while (m < (1u << 23)) {
      size_t n = 0, i;
      if (ties) { /* multiples of 2^16 and their neighbours: the ties (a half ulp) of every fp8
                     result, normal or subnormal, sit on such multiples */
        uint32_t t;
        for (t = 0; t < 128u * 3u; t++) in[n++] = f32_of(sign | (E << 23) | (((t / 3u) << 16) + t % 3u - 1u) % (1u << 23));
        ties = 0;
      } else   /* the full sweep deals each block mantissas from across the binade (block b: b, b +
                  2^23 / CHUNK, ...), so that neighbouring lanes get different codes and a lane
                  out of place in a bulk loop shows */
        for (; n < CHUNK && m < (1u << 23); n++, m += j->step)
          in[n] = f32_of(sign | (E << 23) | (j->step == 1 ? (m % CHUNK) * ((1u << 23) / CHUNK) + m / CHUNK : m));
      /* one loop for the six (the compiler shares what the calls of a format have in common) */
      for (i = 0; i < n; i++) {
        float x = in[i];
        got[SAT4][i] = amp_f32_to_e4m3(x, 1); got[NOSAT4][i] = amp_f32_to_e4m3(x, 0);
        got[SAT5][i] = amp_f32_to_e5m2(x, 1); got[NOSAT5][i] = amp_f32_to_e5m2(x, 0);
        got[UP][i] = amp_f32_to_e8m0(x, 1); got[DOWN][i] = amp_f32_to_e8m0(x, 0);
      }
#if HAVE_NV
      nv_block(want, in, n);
      for (k = 0; k < NCASE; k++) compare(j, in, want[k], got[k], n, nv_what[k]);
#endif
      /* the floor by frexp: one binade has one answer (the f32 subnormals: 0), so a sample of
         each binade shows it (frexp on every pattern would double the test's time) */
      for (i = 0; i < n; i += 61) if (ref_e8m0_down(in[i]) != got[DOWN][i])
        note(j, bits_of(in[i]), ref_e8m0_down(in[i]), got[DOWN][i], "e8m0 round down vs frexp");
      /* the saturating bulk loops: the portable one and each SIMD level's kernels, called directly */
      amp__f32_to_fp8_portable(bulk, in, n, 0); compare(j, in, got[SAT4], bulk, n, "portable f32->e4m3 vs amp_f32_to_e4m3");
      amp__f32_to_fp8_portable(bulk, in, n, 1); compare(j, in, got[SAT5], bulk, n, "portable f32->e5m2 vs amp_f32_to_e5m2");
#ifdef AMP__X86_SIMD
      if (j->level >= 1) {
        amp__cvt_f32_to_e4m3_avx2(bulk, in, n); compare(j, in, got[SAT4], bulk, n, "AVX2 f32->e4m3 vs amp_f32_to_e4m3");
        amp__cvt_f32_to_e5m2_avx2(bulk, in, n); compare(j, in, got[SAT5], bulk, n, "AVX2 f32->e5m2 vs amp_f32_to_e5m2");
      }
      if (j->level >= 2) {
        amp__cvt_f32_to_e4m3_avx512(bulk, in, n); compare(j, in, got[SAT4], bulk, n, "AVX-512 f32->e4m3 vs amp_f32_to_e4m3");
        amp__cvt_f32_to_e5m2_avx512(bulk, in, n); compare(j, in, got[SAT5], bulk, n, "AVX-512 f32->e5m2 vs amp_f32_to_e5m2");
      }
#endif
      j->checked += n;
    }
  }
  free(in); free(bulk);
  for (k = 0; k < NCASE; k++) { free(got[k]); free(want[k]); }
  return NULL;
}

static int cpu_level(void) {
#ifdef AMP__X86_SIMD
  return amp__cpu_level();
#else
  return 0;
#endif
}

static void every_f32_pattern_like_cuda_fp8_h(void) {
  job jobs[16];
  pthread_t th[16];
  long np = sysconf(_SC_NPROCESSORS_ONLN);
  int t, nt = np < 1 ? 1 : np > 16 ? 16 : (int)np, level = cpu_level();
  unsigned long long checked = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!HAVE_NV) printf("skipped: the cuda_fp8.h oracle (no <cuda_fp8.h> under CUDA_HOME/include, or built as C)\n");
  if (level < 2) printf("skipped: the AVX-512 kernels (not on this CPU)\n");
  if (level < 1) printf("skipped: the AVX2 kernels (not on this CPU, or AMP_NO_SIMD)\n");
#ifdef AMP__X86_SIMD
  /* the kernels as large outputs run them (aligning head, streaming stores, the prefetching loop,
     masked tail) on every full block of CHUNK codes, so on every pattern of the full sweep; the
     shorter blocks of AMP_TEST_QUICK take the ordinary stores, as tests/test_fp8.c does too */
  amp__nt_bytes = CHUNK;
#endif
  for (t = 0; t < nt; t++) {
    memset(&jobs[t], 0, sizeof jobs[t]);
    jobs[t].tid = t; jobs[t].nthreads = nt; jobs[t].level = level;
    jobs[t].step = t_quick() ? 8191u : 1u;
    EXPECT(pthread_create(&th[t], NULL, sweep, &jobs[t]) == 0, "pthread_create %d", t);
  }
  for (t = 0; t < nt; t++) {
    unsigned long long k;
    pthread_join(th[t], NULL);
    checked += jobs[t].checked;
    for (k = 0; k < jobs[t].nfail && k < NFAIL; k++) EXPECT(0, "%s", jobs[t].msg[k]);
    EXPECT(jobs[t].nfail == 0, "thread %d: %llu mismatches in all", t, jobs[t].nfail);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  EXPECT(t_quick() || checked == (1ull << 32), "patterns checked: expected %llu got %llu", 1ull << 32, checked);
  printf("  %llu f32 patterns checked (oracle %d, SIMD level %d, %d threads) in %.1f s\n", checked, HAVE_NV, level, nt,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
}

/* All 256 codes of each format: the scalar decoders against the toolkit (fp8 -> f16 there, which
   amp_f16_to_f32 widens exactly; NaN compared as NaN, since the toolkit writes its own NaN), and
   each level's bulk decoder against the scalar one, bit for bit. */
static void all_codes_decode_like_cuda_fp8_h(void) {
  amp_fp8 codes[256 + 3];
  float sc[2][256], bulk[256 + 3];
  int f, c, level = cpu_level();
  for (c = 0; c < 256; c++) codes[c] = (amp_fp8)c;
  for (f = 0; f < 2; f++) {
    for (c = 0; c < 256; c++) {
      float x = f ? amp_e5m2_to_f32((amp_fp8)c) : amp_e4m3_to_f32((amp_fp8)c);
      sc[f][c] = x;
#if HAVE_NV
      {
        __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, f ? __NV_E5M2 : __NV_E4M3);
        float w = amp_f16_to_f32(h.x);
        EXPECT(nan_bits(w) ? nan_bits(x) : bits_of(w) == bits_of(x), "%s code 0x%02x: toolkit %.9g (0x%08x), amp %.9g (0x%08x)",
               f ? "e5m2" : "e4m3", c, (double)w, bits_of(w), (double)x, bits_of(x));
      }
#endif
    }
    /* the bulk decoders, the 256 codes at an offset of 3 (a tail of 3, odd addresses) */
    memmove(codes + 3, codes, 256);
    amp__fp8_to_f32_portable(bulk + 3, codes + 3, 256, f);
    EXPECT(memcmp(bulk + 3, sc[f], sizeof sc[f]) == 0, "portable %s -> f32 differs from the scalar decoder", f ? "e5m2" : "e4m3");
#ifdef AMP__X86_SIMD
    if (level >= 1) {
      if (f) amp__cvt_e5m2_to_f32_avx2(bulk + 3, codes + 3, 256); else amp__cvt_e4m3_to_f32_avx2(bulk + 3, codes + 3, 256);
      EXPECT(memcmp(bulk + 3, sc[f], sizeof sc[f]) == 0, "AVX2 %s -> f32 differs from the scalar decoder", f ? "e5m2" : "e4m3");
    }
    if (level >= 2) {
      if (f) amp__cvt_e5m2_to_f32_avx512(bulk + 3, codes + 3, 256); else amp__cvt_e4m3_to_f32_avx512(bulk + 3, codes + 3, 256);
      EXPECT(memcmp(bulk + 3, sc[f], sizeof sc[f]) == 0, "AVX-512 %s -> f32 differs from the scalar decoder", f ? "e5m2" : "e4m3");
    }
#endif
    memmove(codes, codes + 3, 256);
  }
  (void)level;
}

int main(void) {
  RUN(all_codes_decode_like_cuda_fp8_h);
  RUN(every_f32_pattern_like_cuda_fp8_h);
  TEST_END();
}
