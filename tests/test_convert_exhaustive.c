/* tests/test_convert_exhaustive.c - every one of the 2^32 f32 bit patterns through amp_f32_to_f16
   and amp_f32_to_bf16, against the double-arithmetic reference and the hardware (F16C vcvtps2ph;
   AVX512-BF16 vcvtneps2bf16 on normal inputs) where the CPU has it, and through amp_convert's
   bulk path, each SIMD level's kernels the CPU has (AVX2+F16C, AVX-512) and the portable loops. Two threads, one binade (sign, exponent field) at a time. AMP_TEST_QUICK=1 samples
   every 8191st mantissa of each binade. */
#define _POSIX_C_SOURCE 200809L
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include "test_convert_ref.h"
#include <pthread.h>
#include <time.h>

#define CHUNK 4096
#define NFAIL 6

typedef struct fail_rec { uint32_t in; uint16_t want, got; const char *what; } fail_rec;
typedef struct job {
  int tid, nthreads, hw16, hwbf;
  uint32_t step;
  unsigned long long checked, nfail;
  fail_rec fails[NFAIL];
} job;

static void note(job *j, uint32_t in, uint16_t want, uint16_t got, const char *what) {
  if (j->nfail < NFAIL) { fail_rec r; r.in = in; r.want = want; r.got = got; r.what = what; j->fails[j->nfail] = r; }
  j->nfail++;
}

/* On a mismatch between two arrays of results: every differing element is noted. */
static void compare(job *j, const float *in, const uint16_t *want, const uint16_t *got, size_t n, const char *what) {
  size_t i;
  if (memcmp(want, got, n * 2) == 0) return;
  for (i = 0; i < n; i++) if (want[i] != got[i]) note(j, bits_of(in[i]), want[i], got[i], what);
}

static void *sweep(void *arg) {
  job *j = (job *)arg;
  enum { IN, SC16, SCBF, REF16, REFBF, HW16, HWBF, BULK16, BULKBF, PORT16, PORTBF, V16, VBF, NBUF };
  uint16_t *buf[NBUF];
  float *in = (float *)malloc(CHUNK * sizeof(float));
  unsigned blk;
  int k;
  for (k = 0; k < NBUF; k++) buf[k] = (uint16_t *)malloc(CHUNK * 2);
  /* blocks interleaved between the threads so both get a share of the NaN binades */
  for (blk = (unsigned)j->tid; blk < 512; blk += (unsigned)j->nthreads) {
    uint32_t sign = (blk >> 8) << 31, E = blk & 255, m = 0;
    uint16_t s16 = (uint16_t)(sign >> 16);
    int e = 0;
    ref_binade b16, bbf;
    frexp((double)f32_of(E ? E << 23 : 1u), &e); /* the binade of the block (all of E = 0 share one quantum) */
    b16 = ref_f16_binade(e); bbf = ref_bf16_binade(e);
    while (m < (1u << 23)) {
      size_t n = 0, padded, i;
      for (; n < CHUNK && m < (1u << 23); n++, m += j->step) in[n] = f32_of(sign | (E << 23) | m);
      for (padded = n; padded % 8; padded++) in[padded] = 0.0f; /* the hardware takes 8 at a time */
      for (i = 0; i < n; i++) buf[SC16][i] = amp_f32_to_f16(in[i]);
      for (i = 0; i < n; i++) buf[SCBF][i] = amp_f32_to_bf16(in[i]);
      if (E == 255) for (i = 0; i < n; i++) { buf[REF16][i] = ref_f32_to_f16(in[i]); buf[REFBF][i] = ref_f32_to_bf16(in[i]); }
      else for (i = 0; i < n; i++) {
        double a = fabs((double)in[i]);
        buf[REF16][i] = (uint16_t)(s16 | ref_f16_in(a, b16));
        buf[REFBF][i] = (uint16_t)(s16 | ref_bf16_in(a, bbf));
      }
      if (REF_IEEE) {
        compare(j, in, buf[REF16], buf[SC16], n, "f16 vs double reference");
        compare(j, in, buf[REFBF], buf[SCBF], n, "bf16 vs double reference");
      }
      if (j->hw16) {
        hw_f32_to_f16(buf[HW16], in, padded);
        compare(j, in, buf[HW16], buf[SC16], n, "f16 vs F16C vcvtps2ph");
      }
      if (j->hwbf && E != 0) { /* vcvtneps2bf16 flushes subnormal inputs */
        hw_f32_to_bf16(buf[HWBF], in, padded);
        compare(j, in, buf[HWBF], buf[SCBF], n, "bf16 vs AVX512-BF16 vcvtneps2bf16");
      }
      amp_convert(buf[BULK16], AMP_F16, in, AMP_F32, n);
      amp_convert(buf[BULKBF], AMP_BF16, in, AMP_F32, n);
      compare(j, in, buf[SC16], buf[BULK16], n, "amp_convert f32->f16 vs amp_f32_to_f16");
      compare(j, in, buf[SCBF], buf[BULKBF], n, "amp_convert f32->bf16 vs amp_f32_to_bf16");
      /* the portable loops, called directly (amp_simd_enable is one global switch, not per thread) */
      amp__convert_portable(buf[PORT16], AMP_F16, in, AMP_F32, n);
      amp__convert_portable(buf[PORTBF], AMP_BF16, in, AMP_F32, n);
      compare(j, in, buf[SC16], buf[PORT16], n, "portable f32->f16 vs amp_f32_to_f16");
      compare(j, in, buf[SCBF], buf[PORTBF], n, "portable f32->bf16 vs amp_f32_to_bf16");
#ifdef AMP__X86_SIMD
      /* each level's kernels, called directly (amp_convert runs only the CPU's best) */
      if (amp__cpu_level() >= 1) {
        amp__cvt_avx2(buf[V16], AMP_F16, in, AMP_F32, n); amp__cvt_avx2(buf[VBF], AMP_BF16, in, AMP_F32, n);
        compare(j, in, buf[SC16], buf[V16], n, "AVX2+F16C kernel f32->f16 vs amp_f32_to_f16");
        compare(j, in, buf[SCBF], buf[VBF], n, "AVX2 kernel f32->bf16 vs amp_f32_to_bf16");
      }
      if (amp__cpu_level() >= 2) {
        amp__cvt_avx512(buf[V16], AMP_F16, in, AMP_F32, n); amp__cvt_avx512(buf[VBF], AMP_BF16, in, AMP_F32, n);
        compare(j, in, buf[SC16], buf[V16], n, "AVX-512 kernel f32->f16 vs amp_f32_to_f16");
        compare(j, in, buf[SCBF], buf[VBF], n, "AVX-512 kernel f32->bf16 vs amp_f32_to_bf16");
      }
#endif
      j->checked += n;
    }
  }
  free(in);
  for (k = 0; k < NBUF; k++) free(buf[k]);
  return NULL;
}

static void every_f32_pattern_rounds_like_both_oracles(void) {
  job jobs[2];
  pthread_t th[2];
  int t, hw16 = cpu_has_f16c(), hwbf = cpu_has_avx512bf16();
  unsigned long long checked = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!hw16) printf("skipped: F16C oracle (this CPU has no F16C); the double reference still runs\n");
  if (!REF_IEEE) printf(REF_SKIP_MSG);
  if (!hwbf) printf("skipped: AVX512-BF16 oracle for f32->bf16 (not on this CPU)\n");
  for (t = 0; t < 2; t++) {
    memset(&jobs[t], 0, sizeof jobs[t]);
    jobs[t].tid = t; jobs[t].nthreads = 2; jobs[t].hw16 = hw16; jobs[t].hwbf = hwbf;
    jobs[t].step = t_quick() ? 8191u : 1u;
    EXPECT(pthread_create(&th[t], NULL, sweep, &jobs[t]) == 0, "pthread_create %d", t);
  }
  for (t = 0; t < 2; t++) {
    unsigned long long k;
    pthread_join(th[t], NULL);
    checked += jobs[t].checked;
    for (k = 0; k < jobs[t].nfail && k < NFAIL; k++) {
      fail_rec r = jobs[t].fails[k];
      EXPECT(0, "%s: in 0x%08x (%.9g) expected 0x%04x got 0x%04x", r.what, r.in, (double)f32_of(r.in), r.want, r.got);
    }
    EXPECT(jobs[t].nfail == 0, "thread %d: %llu mismatches in all", t, jobs[t].nfail);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  EXPECT(t_quick() || checked == (1ull << 32), "patterns checked: expected %llu got %llu", 1ull << 32, checked);
  printf("  %llu f32 patterns checked (simd %d, F16C oracle %d, AVX512-BF16 oracle %d) in %.1f s\n",
         checked, amp_simd_active(), hw16, hwbf, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
}

int main(void) {
  RUN(every_f32_pattern_rounds_like_both_oracles);
  TEST_END();
}
