/* bench/bench_optim.c - the CPU mixed-precision optimizer step, one thread, built as users build
   it (`cc -O2`, no -march: the runtime dispatch picks the loops). Peers measured in the same run:
     - memcpy of the same byte count (the bandwidth limit);
     - PyTorch's CPU mixed AdamW step (bench/cpu_peers.py: f16 grads cast, unscaled and checked,
       torch.optim.AdamW on the f32 master, the f16 model copy written back);
     - a plain fp32 AdamW loop in intrinsics (AVX-512 or AVX2+FMA, FMA and reciprocals allowed:
       what llm.c's loop compiles to with -Ofast -march=native) on a small in-cache model;
     - a plain intrinsic sum-of-squares loop over the f16 grads, for the scan pass.
   AdamW: f16 grads, f32 master/m/v, f16 model copy = 28 bytes/param (grads 2, master 4+4, m 4+4,
   v 4+4, model 2: the traffic of one fused pass). SGD with momentum: 20 B/param. Each of our steps
   is a whole amp_scaler_step (scan pass + fused update) + amp_scaler_update. Medians of REPS.
   Then every master mode and model copy (bench_modes, below; BENCH_OPTIM_MODES=1 runs only those,
   BENCH_OPTIM_MODES=text only the modes whose name holds text): at 834k params against llm.c's
   plain fp32 AdamW loop as written in C (ref_adamw_c, this file's -O2 build: what a drop-in user
   compares with), at 16M against memcpy of the bytes the mode moves. Then AdamW with each moment
   type (bench_moments: f32, bf16, 8-bit, fp8; BENCH_OPTIM_MODES=moments runs only those) at 16M,
   against the f32-moment step and memcpy, and where a vector level runs against the same step on
   the portable loops (the moment loops against the plain path), taking turns in the same run.
   Built with -fopenmp (make bench builds build/bench_optim_openmp so and runs its moment types):
   every step and the memcpy on all the OpenMP threads, and each moment type's step against the
   same step on one thread, taking turns. */
#include "bench.h"   /* first: it sets _POSIX_C_SOURCE for clock_gettime and popen */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "peers.h"
#include <math.h>

#define NPARAM (bench_emulated() ? (size_t)1 << 16 : (size_t)16 << 20)
#define NSMALL (bench_emulated() ? (size_t)1 << 12 : (size_t)1 << 20)
#define NCACHE (bench_emulated() ? (size_t)4096 : (size_t)834000)   /* GPT-2 124M's smallest tensors, in cache */
#define REPS 7

/* memcpy of bytes/2 = bytes of traffic (read + write); buffers set up once, reused */
static char *mc_a, *mc_b;
static size_t mc_bytes;
static double memcpy_once(void) {
  double t0 = bench_now();
#ifdef _OPENMP   /* the threads' build: each thread copies its slice (the bandwidth of all of them) */
  int t, nth = omp_get_max_threads();
#pragma omp parallel for num_threads(nth) schedule(static, 1)
  for (t = 0; t < nth; t++) {
    size_t lo = mc_bytes / 2 * (size_t)t / (size_t)nth, hi = mc_bytes / 2 * (size_t)(t + 1) / (size_t)nth;
    memcpy(mc_b + lo, mc_a + lo, hi - lo);
  }
#else
  memcpy(mc_b, mc_a, mc_bytes / 2);
#endif
  return bench_now() - t0;
}

typedef struct model { amp_f16 *w, *g; amp_optimizer *o; amp_scaler *s; size_t n; } model;
static void model_init(model *M, amp_optim_kind kind, size_t n, int stats) {
  amp_optim_config oc; amp_scaler_config sc;
  size_t i;
  M->n = n;
  M->w = (amp_f16 *)malloc(n * sizeof(amp_f16)); M->g = (amp_f16 *)malloc(n * sizeof(amp_f16));
  memset(&oc, 0, sizeof oc); memset(&sc, 0, sizeof sc);
  oc.kind = kind; oc.weight_decay = 0.01f; oc.momentum = kind == AMP_SGD ? 0.9f : 0.0f; oc.stats = stats;
  sc.init_scale = 1024.0f;
  for (i = 0; i < n; i++) { M->w[i] = amp_f32_to_f16(0.01f * (float)(i % 97)); M->g[i] = amp_f32_to_f16(0.5f * (float)(i % 13) - 3.0f); }
  if (amp_optimizer_create(&M->o, amp_cpu(), &oc) || amp_scaler_create(&M->s, amp_cpu(), &sc) ||
      amp_optimizer_add(M->o, AMP_F16, M->w, M->g, n)) { printf("setup failed: %s\n", amp_last_error()); exit(0); }
}
static void model_step(model *M) { amp_scaler_step(M->s, M->o); amp_scaler_update(M->s); }
static void model_free(model *M) { amp_optimizer_destroy(M->o); amp_scaler_destroy(M->s); free(M->w); free(M->g); }

/* Seconds per step (median of REPS after one untimed step: first touch), taking turns with a
   memcpy of the same traffic (its median into *mc) so that a noisy neighbour slows both alike. */
static double time_steps(model *M, int level, double *mc) {
  double t[REPS], tm[REPS];
  int r;
  amp__opt_simd = level;
  model_step(M);
  for (r = 0; r < REPS; r++) {
    double t0;
    tm[r] = memcpy_once();
    t0 = bench_now(); model_step(M); t[r] = bench_now() - t0;
  }
  amp__opt_simd = -1;
  if (mc) *mc = bench_median(tm, REPS);
  return bench_median(t, REPS);
}

/* ---- the plain intrinsic references ---- */
typedef struct ref_adamw { float *p, *g, *m, *v; size_t n; long t; } ref_adamw;
static void ref_adamw_c(ref_adamw *R) {   /* llm.c's loop, for CPUs without the intrinsic ones */
  float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f, wd = 0.01f;
  float c1 = 1.0f / (1.0f - powf(b1, (float)++R->t)), c2 = 1.0f / (1.0f - powf(b2, (float)R->t));
  size_t i;
  for (i = 0; i < R->n; i++) {
    float g = R->g[i], m = b1 * R->m[i] + (1 - b1) * g, v = b2 * R->v[i] + (1 - b2) * g * g;
    R->m[i] = m; R->v[i] = v;
    R->p[i] -= lr * (m * c1 / (sqrtf(v * c2) + eps) + wd * R->p[i]);
  }
}
static double ref_sumsq_c(const amp_f16 *g, size_t n) {
  float s = 0;
  size_t i;
  for (i = 0; i < n; i++) { float x = amp_f16_to_f32(g[i]) * (1.0f / 1024.0f); s += x * x; }
  return s;
}
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_INTRIN 1
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define T256 __attribute__((target("avx2,fma,f16c")))
T512 static void ref_adamw_512(ref_adamw *R) {
  float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f, wd = 0.01f;
  float c1 = 1.0f / (1.0f - powf(b1, (float)++R->t)), c2 = 1.0f / (1.0f - powf(b2, (float)R->t));
  __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), o1 = _mm512_set1_ps(1 - b1), o2 = _mm512_set1_ps(1 - b2);
  __m512 vc1 = _mm512_set1_ps(c1), vc2 = _mm512_set1_ps(c2), vlr = _mm512_set1_ps(lr), ve = _mm512_set1_ps(eps), vwd = _mm512_set1_ps(wd);
  size_t i;
  for (i = 0; i + 16 <= R->n; i += 16) {
    __m512 g = _mm512_loadu_ps(R->g + i), p = _mm512_loadu_ps(R->p + i);
    __m512 m = _mm512_fmadd_ps(vb1, _mm512_loadu_ps(R->m + i), _mm512_mul_ps(o1, g));
    __m512 v = _mm512_fmadd_ps(vb2, _mm512_loadu_ps(R->v + i), _mm512_mul_ps(_mm512_mul_ps(o2, g), g));
    __m512 u = _mm512_div_ps(_mm512_mul_ps(m, vc1), _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(v, vc2)), ve));
    _mm512_storeu_ps(R->m + i, m); _mm512_storeu_ps(R->v + i, v);
    _mm512_storeu_ps(R->p + i, _mm512_fnmadd_ps(vlr, _mm512_fmadd_ps(vwd, p, u), p));
  }
}
T256 static void ref_adamw_256(ref_adamw *R) {
  float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f, wd = 0.01f;
  float c1 = 1.0f / (1.0f - powf(b1, (float)++R->t)), c2 = 1.0f / (1.0f - powf(b2, (float)R->t));
  __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2), o1 = _mm256_set1_ps(1 - b1), o2 = _mm256_set1_ps(1 - b2);
  __m256 vc1 = _mm256_set1_ps(c1), vc2 = _mm256_set1_ps(c2), vlr = _mm256_set1_ps(lr), ve = _mm256_set1_ps(eps), vwd = _mm256_set1_ps(wd);
  size_t i;
  for (i = 0; i + 8 <= R->n; i += 8) {
    __m256 g = _mm256_loadu_ps(R->g + i), p = _mm256_loadu_ps(R->p + i);
    __m256 m = _mm256_fmadd_ps(vb1, _mm256_loadu_ps(R->m + i), _mm256_mul_ps(o1, g));
    __m256 v = _mm256_fmadd_ps(vb2, _mm256_loadu_ps(R->v + i), _mm256_mul_ps(_mm256_mul_ps(o2, g), g));
    __m256 u = _mm256_div_ps(_mm256_mul_ps(m, vc1), _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(v, vc2)), ve));
    _mm256_storeu_ps(R->m + i, m); _mm256_storeu_ps(R->v + i, v);
    _mm256_storeu_ps(R->p + i, _mm256_fnmadd_ps(vlr, _mm256_fmadd_ps(vwd, p, u), p));
  }
}
T512 static double ref_sumsq_512(const amp_f16 *g, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, s = _mm512_set1_ps(1.0f / 1024.0f);
  size_t i;
  for (i = 0; i + 32 <= n; i += 32) {
    __m512 x = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + i))), s);
    __m512 y = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + i + 16))), s);
    a0 = _mm512_fmadd_ps(x, x, a0); a1 = _mm512_fmadd_ps(y, y, a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}
T256 static double ref_sumsq_256(const amp_f16 *g, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, s = _mm256_set1_ps(1.0f / 1024.0f);
  float l[8];
  size_t i;
  for (i = 0; i + 16 <= n; i += 16) {
    __m256 x = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + i))), s);
    __m256 y = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + i + 8))), s);
    a0 = _mm256_fmadd_ps(x, x, a0); a1 = _mm256_fmadd_ps(y, y, a1);
  }
  _mm256_storeu_ps(l, _mm256_add_ps(a0, a1));
  return (double)l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
#endif
static int level(void) {
#if defined(AMP__X86_SIMD) || defined(AMP__NEON_SIMD)
  return amp__cpu_level();
#else
  return 0;
#endif
}
#ifdef AMP__NEON_SIMD
static const char *level_name(int l) { return l >= 1 ? "NEON" : "portable"; }
#else
static const char *level_name(int l) { return l >= 2 ? "AVX-512" : l == 1 ? "AVX2+F16C" : "portable"; }
#endif
static void ref_adamw_step(ref_adamw *R) {
#ifdef HAVE_INTRIN
  if (level() >= 2) { ref_adamw_512(R); return; }
  if (level() == 1) { ref_adamw_256(R); return; }
#endif
  ref_adamw_c(R);
}
static double ref_sumsq(const amp_f16 *g, size_t n) {
#ifdef HAVE_INTRIN
  if (level() >= 2) return ref_sumsq_512(g, n);
  if (level() == 1) return ref_sumsq_256(g, n);
#endif
  return ref_sumsq_c(g, n);
}

/* ---- every master mode and model copy (one thread) ----
   Each mode: one optimizer over one tensor of N params (AdamW unless named), stepped as a trainer
   steps it (amp_optimizer_step; amp_scaler_step + update where "scaler"), against llm.c's plain
   fp32 AdamW loop (ref_adamw_c, built with the same -O2) on the same N in cache, and against
   memcpy of the same bytes out of cache. Bytes moved per param: the grads read twice (the scan
   pass and the update), the master read and written (f32: 8; split: the bf16 copy and the
   remainder, 8; none: the bf16 copy, 4), each fp32 moment read and written (8), the model copy
   written (f32 master only: its size). */
typedef struct mode { const char *name; amp_optim_kind kind; amp_dtype wt, gt, rt; int master_mode, sr, scaler, moments; } mode;
static const mode modes[] = {
  {"adamw f32 copy, f32 grads",                  AMP_ADAMW, AMP_F32,  AMP_F32,  AMP_F32,  AMP_MASTER_F32,   0, 0, AMP_MOMENTS_F32},
  {"adamw f32 copy round_to bf16, f32 grads",    AMP_ADAMW, AMP_F32,  AMP_F32,  AMP_BF16, AMP_MASTER_F32,   0, 0, AMP_MOMENTS_F32},
  {"adamw f32 copy round_to f16, scaler",        AMP_ADAMW, AMP_F32,  AMP_F32,  AMP_F16,  AMP_MASTER_F32,   0, 1, AMP_MOMENTS_F32},
  {"adamw bf16 copy, bf16 grads",                AMP_ADAMW, AMP_BF16, AMP_BF16, AMP_F32,  AMP_MASTER_F32,   0, 0, AMP_MOMENTS_F32},
  {"adamw f16 copy, f16 grads, scaler",          AMP_ADAMW, AMP_F16,  AMP_F16,  AMP_F32,  AMP_MASTER_F32,   0, 1, AMP_MOMENTS_F32},
  {"adamw bf16 copy stochastic",                 AMP_ADAMW, AMP_BF16, AMP_BF16, AMP_F32,  AMP_MASTER_F32,   1, 0, AMP_MOMENTS_F32},
  {"adamw bf16 AMP_MASTER_SPLIT",                AMP_ADAMW, AMP_BF16, AMP_BF16, AMP_F32,  AMP_MASTER_SPLIT, 0, 0, AMP_MOMENTS_F32},
  {"adamw bf16 AMP_MASTER_NONE",                 AMP_ADAMW, AMP_BF16, AMP_BF16, AMP_F32,  AMP_MASTER_NONE,  1, 0, AMP_MOMENTS_F32},
  {"sgd-momentum bf16 copy",                     AMP_SGD,   AMP_BF16, AMP_BF16, AMP_F32,  AMP_MASTER_F32,   0, 0, AMP_MOMENTS_F32},
  {"lion bf16 copy",                             AMP_LION,  AMP_BF16, AMP_BF16, AMP_F32,  AMP_MASTER_F32,   0, 0, AMP_MOMENTS_F32},
  {"lion f32 copy round_to bf16",                AMP_LION,  AMP_F32,  AMP_F32,  AMP_BF16, AMP_MASTER_F32,   0, 0, AMP_MOMENTS_F32},
};
typedef struct mrig { void *w, *g; amp_optimizer *o; amp_scaler *s; size_t n; } mrig;
static double mode_bytes(const mode *md) {
  double gs = (double)amp_dtype_size(md->gt), ws = (double)amp_dtype_size(md->wt);
  double master = md->master_mode == AMP_MASTER_NONE ? 4 : 8;
  /* each moment read and written in its stored type (8-bit: a code, its block's absmax; fp8: a code) */
  double mom = md->moments == AMP_MOMENTS_BF16 ? 4.0 : md->moments == AMP_MOMENTS_8BIT ? 2.0 + 8.0 / 256
             : md->moments == AMP_MOMENTS_FP8 ? 2.0 : 8.0;
  int nm = md->kind == AMP_SGD || md->kind == AMP_LION ? 1 : 2;
  return 2 * gs + master + mom * nm + (md->master_mode == AMP_MASTER_F32 ? ws : 0);
}
static int mrig_init(mrig *R, const mode *md, size_t n) {
  amp_optim_config oc = amp_optimizer_defaults(md->kind);
  amp_tensor_desc t;
  size_t i;
  memset(R, 0, sizeof *R);
  R->n = n;
  R->w = malloc(n * amp_dtype_size(md->wt)); R->g = malloc(n * amp_dtype_size(md->gt));
  oc.weight_decay = 0.01f;
  if (md->kind == AMP_SGD) oc.momentum = 0.9f;
  for (i = 0; i < n; i++) {
    amp__store(R->w, md->wt, i, 0.01f * (float)(i % 97));
    amp__store(R->g, md->gt, i, (0.5f * (float)(i % 13) - 3.0f) * (md->scaler ? 1024.0f : 1.0f));
  }
  memset(&t, 0, sizeof t);
  t.weights = R->w; t.dtype = md->wt; t.grads = R->g; t.grad_dtype = md->gt; t.n = n;
  t.round_to = md->rt; t.stochastic = md->sr; t.master_mode = md->master_mode; t.moments = md->moments;
  if (amp_optimizer_create(&R->o, amp_cpu(), &oc) || amp_optimizer_add_tensor(R->o, &t)) return 0;
  if (md->scaler) {
    amp_scaler_config sc;
    memset(&sc, 0, sizeof sc); sc.init_scale = 1024.0f;
    if (amp_scaler_create(&R->s, amp_cpu(), &sc)) return 0;
  }
  return 1;
}
static void mrig_step(mrig *R) {
  if (R->s) { amp_scaler_step(R->s, R->o); amp_scaler_update(R->s); }
  else amp_optimizer_step(R->o);
}
static void mrig_free(mrig *R) { amp_optimizer_destroy(R->o); amp_scaler_destroy(R->s); free(R->w); free(R->g); }
static void bench_modes(size_t n_cache, size_t n_big) {
  size_t k, i;
  int r;
  const char *lv = getenv("BENCH_OPTIM_LEVEL");   /* 0 portable, 1 AVX2, 2 AVX-512 at most; unset: the CPU's best */
  if (lv && *lv) amp__opt_simd = atoi(lv);
  printf("every mode: loops %s\n", level_name(lv && *lv && atoi(lv) < level() ? atoi(lv) : level()));
  for (k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    const mode *md = &modes[k];
    mrig R;
    ref_adamw F;
    double to[REPS], tr[REPS], tm[REPS];
    char name[128];
    const char *only = getenv("BENCH_OPTIM_MODES");   /* 1: every mode; other text: the modes naming it */
    if (only && *only && strcmp(only, "1") && !strstr(md->name, only)) continue;
    /* in cache: against llm.c's fp32 AdamW loop on the same n, taking turns */
    if (!mrig_init(&R, md, n_cache)) { printf("%s: setup failed: %s\n", md->name, amp_last_error()); exit(0); }
    F.n = n_cache; F.t = 0;
    F.p = (float *)malloc(n_cache * 4); F.g = (float *)malloc(n_cache * 4); F.m = (float *)calloc(n_cache, 4); F.v = (float *)calloc(n_cache, 4);
    for (i = 0; i < n_cache; i++) { F.p[i] = 0.01f * (float)(i % 97); F.g[i] = 0.5f * (float)(i % 13) - 3.0f; }
    mrig_step(&R); ref_adamw_c(&F);
    for (r = 0; r < REPS; r++) {
      double t0 = bench_now();
      mrig_step(&R); to[r] = bench_now() - t0;
      t0 = bench_now(); ref_adamw_c(&F); tr[r] = bench_now() - t0;
    }
    snprintf(name, sizeof name, "%zuk: %s", n_cache / 1000, md->name);
    bench_line(name, 1e6 * bench_median(to, REPS), 1e6 * bench_median(tr, REPS), "us vs llm.c fp32 AdamW loop, lower is better");
    free(F.p); free(F.g); free(F.m); free(F.v);
    mrig_free(&R);
    /* out of cache: bytes moved per second against memcpy of the same bytes, taking turns */
    if (!mrig_init(&R, md, n_big)) { printf("%s: setup failed: %s\n", md->name, amp_last_error()); exit(0); }
    mc_bytes = (size_t)(mode_bytes(md) * (double)n_big);
    mc_a = (char *)malloc(mc_bytes / 2); mc_b = (char *)malloc(mc_bytes / 2);
    memset(mc_a, 1, mc_bytes / 2); memset(mc_b, 2, mc_bytes / 2);
    mrig_step(&R);
    for (r = 0; r < REPS; r++) {
      double t0;
      tm[r] = memcpy_once();
      t0 = bench_now(); mrig_step(&R); to[r] = bench_now() - t0;
    }
    snprintf(name, sizeof name, "%zuM: %s", n_big >> 20, md->name);
    {
      char unit[64];
      snprintf(unit, sizeof unit, "GB/s vs memcpy, at %g B/param", mode_bytes(md));
      bench_line(name, (double)mc_bytes / bench_median(to, REPS) / 1e9, (double)mc_bytes / bench_median(tm, REPS) / 1e9, unit);
    }
    free(mc_a); free(mc_b);
    mrig_free(&R);
  }
}

/* ---- AdamW with each moment type at 16M (one thread): bf16 copy and grads, fp32 master; each type
   against the f32-moment step (ms per step) and against memcpy of the bytes it moves (GB/s), all
   three taking turns in the same run. fp8 runs over the tensor twice (the first pass computes
   only the new moments, for their amax), so it reads grads and moments twice (the master too only
   with L2 weight decay on the grad, not in this AdamW run): its bytes are counted once, as the
   others'. ---- */
#ifdef AMP__X86_SIMD
/* The 8-bit step on a gather-free path (what *forced 1 picks) against the gathers (0), taking
   turns, and which one the library's calibration chose. */
static void bench_q8_paths(mrig *R, size_t n, int *forced, int chosen, const char *path) {
  double tq[REPS], tg[REPS], t0;
  char name[128];
  int r;
  for (r = 0; r < REPS; r++) {
    *forced = 1; t0 = bench_now(); mrig_step(R); tq[r] = bench_now() - t0;
    *forced = 0; t0 = bench_now(); mrig_step(R); tg[r] = bench_now() - t0;
  }
  *forced = -1;
  snprintf(name, sizeof name, "%zuM: adamw 8-bit moments, %s vs gathers", n >> 20, path);
  bench_line(name, 1e3 * bench_median(tq, REPS), 1e3 * bench_median(tg, REPS), "ms per step, lower is better");
  printf("  (the calibration chose the %s)\n", chosen ? path : "gathers");
}
#endif
static void bench_moments(size_t n) {
  static const struct { const char *name; int moments; } types[] = {
    {"f32", AMP_MOMENTS_F32}, {"bf16", AMP_MOMENTS_BF16}, {"8-bit", AMP_MOMENTS_8BIT}, {"fp8", AMP_MOMENTS_FP8}};
  mode base = {"adamw bf16 copy, bf16 grads", AMP_ADAMW, AMP_BF16, AMP_BF16, AMP_F32, AMP_MASTER_F32, 0, 0, AMP_MOMENTS_F32};
  size_t k;
  const char *lv = getenv("BENCH_OPTIM_LEVEL");   /* as bench_modes: 0 portable, 1 AVX2, 2 AVX-512 at most */
  int want = lv && *lv ? atoi(lv) : -1, lvl = want >= 0 && want < level() ? want : level();
  amp__opt_simd = want;
  printf("moment types: loops %s\n", level_name(lvl));
  for (k = 0; k < sizeof types / sizeof types[0]; k++) {
    mode md = base;
    mrig R, F, P;
    double to[REPS], tf[REPS], tm[REPS], tp[REPS], t1[REPS];
    char name[128], unit[64];
    int r;
    md.moments = types[k].moments;
    if (!mrig_init(&F, &base, n) || !mrig_init(&R, &md, n) || (lvl && !mrig_init(&P, &md, n))) {
      printf("moments %s: setup failed: %s\n", types[k].name, amp_last_error());
      exit(0);
    }
    mc_bytes = (size_t)(mode_bytes(&md) * (double)n);
    mc_a = (char *)malloc(mc_bytes / 2); mc_b = (char *)malloc(mc_bytes / 2);
    memset(mc_a, 1, mc_bytes / 2); memset(mc_b, 2, mc_bytes / 2);
    mrig_step(&F); mrig_step(&R);
    if (lvl) { amp__opt_simd = 0; mrig_step(&P); amp__opt_simd = want; }
    for (r = 0; r < REPS; r++) {
      double t0;
      tm[r] = memcpy_once();
      t0 = bench_now(); mrig_step(&F); tf[r] = bench_now() - t0;
      t0 = bench_now(); mrig_step(&R); to[r] = bench_now() - t0;
#ifdef _OPENMP   /* the same step on one thread, taking turns */
      {
        int nth = omp_get_max_threads();
        omp_set_num_threads(1);
        t0 = bench_now(); mrig_step(&R); t1[r] = bench_now() - t0;
        omp_set_num_threads(nth);
      }
#else
      t1[r] = 0;   /* one thread is all there is */
      (void)t1;
#endif
      if (lvl) {   /* the same step on the portable loops, taking turns */
        amp__opt_simd = 0;
        t0 = bench_now(); mrig_step(&P); tp[r] = bench_now() - t0;
        amp__opt_simd = want;
      }
    }
    snprintf(name, sizeof name, "%zuM: adamw %s moments vs f32 moments", n >> 20, types[k].name);
    bench_line(name, 1e3 * bench_median(to, REPS), 1e3 * bench_median(tf, REPS), "ms per step, lower is better");
#ifdef _OPENMP
    snprintf(name, sizeof name, "%zuM: adamw %s moments, %d threads vs 1", n >> 20, types[k].name, omp_get_max_threads());
    bench_line(name, 1e3 * bench_median(to, REPS), 1e3 * bench_median(t1, REPS), "ms per step, lower is better");
#endif
    snprintf(name, sizeof name, "%zuM: adamw %s moments vs memcpy", n >> 20, types[k].name);
    snprintf(unit, sizeof unit, "GB/s vs memcpy, at %g B/param", mode_bytes(&md));
    bench_line(name, (double)mc_bytes / bench_median(to, REPS) / 1e9, (double)mc_bytes / bench_median(tm, REPS) / 1e9, unit);
#ifdef AMP__X86_SIMD
    /* the 8-bit codes' two vector paths at this level (the same bits), taking turns */
    if (md.moments == AMP_MOMENTS_8BIT && lvl >= 2 && (amp__cpu_features() & AMP__CPU_VBMI))
      bench_q8_paths(&R, n, &amp__q8_perm_forced, amp__q8_perm(&R.o->qmap[0]), "permutes");
    if (md.moments == AMP_MOMENTS_8BIT && lvl == 1)
      bench_q8_paths(&R, n, &amp__q8_loads_forced, amp__q8_loads(&R.o->qmap[0]), "plain loads");
#endif
    if (lvl) {   /* the moment loops against the plain path */
      snprintf(name, sizeof name, "%zuM: adamw %s moments vs portable loops", n >> 20, types[k].name);
      bench_line(name, 1e3 * bench_median(to, REPS), 1e3 * bench_median(tp, REPS), "ms per step, lower is better");
      mrig_free(&P);
    }
    free(mc_a); free(mc_b);
    mrig_free(&R); mrig_free(&F);
  }
}

int main(void) {
  double t_torch = 0, sink = 0;
  model M;
  peers P;
  char why[200] = "";
  int l = level();
  mc_bytes = (size_t)28 * NPARAM;
  mc_a = (char *)malloc(mc_bytes / 2); mc_b = (char *)malloc(mc_bytes / 2);
  memset(mc_a, 1, mc_bytes / 2); memset(mc_b, 2, mc_bytes / 2);
#ifdef _OPENMP
  printf("bench_optim: built with -fopenmp, %d threads (memcpy too), without -march; loops: %s; medians of %d\n",
         omp_get_max_threads(), level_name(l), REPS);
#else
  printf("bench_optim: one thread, built without -march; loops: %s; medians of %d\n", level_name(l), REPS);
#endif
  if (getenv("BENCH_OPTIM_MODES") && !strcmp(getenv("BENCH_OPTIM_MODES"), "moments")) {   /* these alone */
    free(mc_a); free(mc_b);
    bench_moments(NPARAM);
    return 0;
  }
  if (getenv("BENCH_OPTIM_MODES")) { bench_modes(NCACHE, NPARAM); return 0; }   /* these alone */

  /* 16M params: ours (taking turns with memcpy), then PyTorch's step in a subprocess */
  model_init(&M, AMP_ADAMW, NPARAM, 0);
  {
    double tmc, tmc2, t = time_steps(&M, -1, &tmc), tp = time_steps(&M, 0, &tmc2), ts[3 * REPS], tr[3 * REPS];
    double adamw = 28.0 * (double)NPARAM / t / 1e9, mc = (double)mc_bytes / tmc / 1e9;
    int r;
    bench_line("memcpy, read + write (same run)", mc, 0, "GB/s");
    bench_line("adamw mixed 16M vs memcpy", adamw, mc, "GB/s at 28 B/param");
    if (peers_run(&P, "adamw", "torch", NPARAM, REPS, why, sizeof why) && (t_torch = peers_num(&P, "torch_adamw_s")) > 0) {
      char name[96];
      snprintf(name, sizeof name, "adamw mixed 16M vs PyTorch %s", peers_get(&P, "torch_version") ? peers_get(&P, "torch_version") : "");
      bench_line(name, adamw, 28.0 * (double)NPARAM / t_torch / 1e9, "GB/s at 28 B/param");
    } else printf("adamw mixed 16M vs PyTorch: skipped (%s)\n", why);
    bench_line("adamw mixed 16M portable vs memcpy", 28.0 * (double)NPARAM / tp / 1e9, (double)mc_bytes / tmc2 / 1e9, "GB/s at 28 B/param");
#ifdef AMP__NEON_SIMD
    bench_line("adamw mixed 16M NEON vs portable", adamw, 28.0 * (double)NPARAM / tp / 1e9, "GB/s at 28 B/param");
#endif
    /* the scan pass alone (unscale + inf/NaN check + sum of squares) against a plain loop that
       reads the same grads and sums their squares in float with FMA; taking turns, 3 x REPS
       (a pass takes about a millisecond: more samples against the neighbours' noise) */
    for (r = 0; r < 3 * REPS; r++) {
      double s0 = 0, t0 = bench_now();
      int bad = 0;
      amp__o_scan(M.g, AMP_F16, NPARAM, 1.0f / 1024.0f, &s0, &bad);
      ts[r] = bench_now() - t0;
      t0 = bench_now(); sink += ref_sumsq(M.g, NPARAM); tr[r] = bench_now() - t0;
      sink += s0;
    }
    bench_line("scan 16M f16 vs plain intrinsic loop", 2.0 * (double)NPARAM / bench_median(ts, 3 * REPS) / 1e9,
               2.0 * (double)NPARAM / bench_median(tr, 3 * REPS) / 1e9, "GB/s at 2 B/param");
  }
  /* the same AdamW step with gradient stats on (amp_optim_config.stats) against stats off, taking
     turns (the stats are read in the same pass; the manual's target: at most 10% more time) */
  {
    model S;
    double t_on[REPS], t_off[REPS];
    int r;
    model_init(&S, AMP_ADAMW, NPARAM, 1);
    model_step(&S); model_step(&M);
    for (r = 0; r < REPS; r++) {
      double t0 = bench_now();
      model_step(&S); t_on[r] = bench_now() - t0;
      t0 = bench_now(); model_step(&M); t_off[r] = bench_now() - t0;
    }
    bench_line("adamw 16M step, stats on vs off", 1e3 * bench_median(t_on, REPS), 1e3 * bench_median(t_off, REPS), "ms, lower is better");
    model_free(&S);
  }
  model_free(&M);
  model_init(&M, AMP_SGD, NPARAM, 0);
  {
    double tmc, t;
    mc_bytes = (size_t)20 * NPARAM;
    t = time_steps(&M, -1, &tmc);
    bench_line("sgd-momentum mixed 16M vs memcpy", 20.0 * (double)NPARAM / t / 1e9, (double)mc_bytes / tmc / 1e9, "GB/s at 20 B/param");
  }
  model_free(&M);
  free(mc_a); free(mc_b);

  /* the small in-cache model: our whole mixed step against the plain fp32 AdamW loop, taking turns */
  {
    ref_adamw R;
    double to[REPS], tr[REPS];
    size_t i;
    int r;
    char name[96];
    model_init(&M, AMP_ADAMW, NSMALL, 0);
    R.n = NSMALL; R.t = 0;
    R.p = (float *)malloc(NSMALL * 4); R.g = (float *)malloc(NSMALL * 4); R.m = (float *)calloc(NSMALL, 4); R.v = (float *)calloc(NSMALL, 4);
    for (i = 0; i < NSMALL; i++) { R.p[i] = 0.01f * (float)(i % 97); R.g[i] = 0.5f * (float)(i % 13) - 3.0f; }
    model_step(&M); ref_adamw_step(&R);
    for (r = 0; r < REPS; r++) {
      double t0 = bench_now();
      model_step(&M); to[r] = bench_now() - t0;
      t0 = bench_now(); ref_adamw_step(&R); tr[r] = bench_now() - t0;
    }
    sink += R.p[7];
#ifdef HAVE_INTRIN
    snprintf(name, sizeof name, "adamw 1M step vs fp32 %s loop", level_name(l));
#else
    snprintf(name, sizeof name, "adamw 1M step vs fp32 C loop");   /* ref_adamw_c: no intrinsic loop here */
#endif
    bench_line(name, 1e6 * bench_median(to, REPS), 1e6 * bench_median(tr, REPS), "us, lower is better");
    free(R.p); free(R.g); free(R.m); free(R.v);
    model_free(&M);
  }
  bench_modes(NCACHE, NPARAM);
  bench_moments(NPARAM);
  if (sink == 12345.678) printf("%g\n", sink);
  return 0;
}
