/* Data-parallel training: N threads play N ranks, joined by an in-process all-reduce (a barrier,
   then every rank sums the ranks' contributions in rank order 0..N-1, so all get the same bits).
   The scaler's all-reduce hook must make the ranks skip together and clip by the global norm.

   Sharded runs (ZeRO-1 style): rank r's optimizer owns whole tensors [r*T/N, (r+1)*T/N) of a
   model of T tensors; a single optimizer over all T tensors, fed the same grads and the same
   planted infs, is the single-process reference. Every rank's scale state, skip flag, step count
   and clipping norm must equal the reference's after every step, and the weights bit for bit.
   The norms are compared exactly, not within a tolerance: every grad is an f16 value in
   [1/16, 4) at a power-of-two scale, so each tensor's partial sums are computed the same way in
   both runs (whole tensors per rank) and the sums across tensors and ranks are exact in double
   (every term a multiple of 2^-31 below 2^21), whatever their order. */
// LDLIBS: -lpthread
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <pthread.h>
#include <string.h>
#include <math.h>

#define MAXR 4
#define MAXT 64

/* ---- the in-process network ------------------------------------------------------------ */

typedef struct group {
  int world;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiting;
  unsigned long gen;
  double slot[MAXR][3];       /* each rank's contribution: its status, then buf[0], buf[1] */
  double amax[MAXR][MAXT];    /* n < 0 (an fp8 scaler's amaxes): each rank's -n values, reduced by MAX */
  const amp_f16 *pub[MAXR];   /* gradient all-reduce: each rank's grads */
  int fail_rank;              /* the hook of this rank fails (-1: none, MAXR: every rank) */
  int fail_status;            /* with this status (may be out of amp_status's range) */
  int calls[MAXR];            /* hook calls per rank */
  int odd_args[MAXR];         /* hook calls with n != 2 or a stream */
} group;

typedef struct rank_ctx { group *g; int rank; void *owner; } rank_ctx;

static void group_init(group *g, int world) {
  memset(g, 0, sizeof *g);
  g->world = world;
  g->fail_rank = -1;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
}
static void group_free(group *g) { pthread_mutex_destroy(&g->mu); pthread_cond_destroy(&g->cv); }

static void group_barrier(group *g) {
  unsigned long gen;
  pthread_mutex_lock(&g->mu);
  gen = g->gen;
  if (++g->waiting == g->world) { g->waiting = 0; g->gen++; pthread_cond_broadcast(&g->cv); }
  else while (gen == g->gen) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

/* The scaler's hook. A rank whose "network" fails still takes part in the exchange and reports
   its status through it, so every rank returns the same status (NCCL aborts a communicator on all
   ranks alike): the first failing rank's, in rank order. */
static amp_status group_hook(void *user, double *buf, int n, void *stream) {
  rank_ctx *c = (rank_ctx *)user;
  group *g = c->g;
  int r = c->rank, q, i, st = 0;
  g->calls[r]++;
  if (n < 0 && -n <= MAXT && !stream) {   /* the MAX of -n values (the fp8 scalers' amaxes) */
    for (i = 0; i < -n; i++) g->amax[r][i] = buf[i];
    group_barrier(g);
    for (i = 0; i < -n; i++)
      for (q = 0; q < g->world; q++) buf[i] = g->amax[q][i] > buf[i] ? g->amax[q][i] : buf[i];
    group_barrier(g);
    return AMP_OK;
  }
  if (n != 2 || stream) { g->odd_args[r]++; if (n != 2) return AMP_ERR_ARG; }
  g->slot[r][0] = (g->fail_rank == r || g->fail_rank == MAXR) ? (double)g->fail_status : 0.0;
  g->slot[r][1] = buf[0]; g->slot[r][2] = buf[1];
  group_barrier(g);
  for (q = 0; q < g->world && !st; q++) st = (int)g->slot[q][0];
  if (!st)
    for (i = 0; i < 2; i++) {
      double s = 0.0;
      for (q = 0; q < g->world; q++) s += g->slot[q][1 + i];
      buf[i] = s;
    }
  group_barrier(g);   /* nobody refills a slot before everyone has read them all */
  return (amp_status)st;
}

/* The gradient all-reduce of replicated runs: the mean over ranks, summed in f32 in rank order. */
static void group_mean_grads(group *g, int rank, amp_f16 *grads, float *tmp, size_t n) {
  size_t i;
  int q;
  g->pub[rank] = grads;
  group_barrier(g);
  for (i = 0; i < n; i++) {
    float s = 0.0f;
    for (q = 0; q < g->world; q++) s += amp_f16_to_f32(g->pub[q][i]);
    tmp[i] = s * (1.0f / (float)g->world);
  }
  group_barrier(g);
  for (i = 0; i < n; i++) grads[i] = amp_f32_to_f16(tmp[i]);
}

/* ---- deterministic data -------------------------------------------------------------------- */

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
  h ^= (c + 0x85EBCA77C2B2AE63ull) * 0x94D049BB133111EBull; h ^= h >> 31;
  h ^= (d + 0x27D4EB2F165667C5ull) * 0x9E3779B97F4A7C15ull; h ^= h >> 29;
  return h * 0xBF58476D1CE4E5B9ull ^ (h >> 32);
}
/* A gradient (before scaling): +-(1 + k/1024) 2^e, e in -4..1: exact in f16, at most 4. */
static float grad_value(unsigned seed, int step, int t, size_t i) {
  uint64_t h = mix(seed, (uint64_t)(step + 7), (uint64_t)t, i);
  float m = (1.0f + (float)(h & 1023u) / 1024.0f) * ldexpf(1.0f, (int)((h >> 10) % 6) - 4);
  return (h >> 20) & 1 ? -m : m;
}

/* The model: T tensors of random sizes; tensor t's elements start at off[t] of one flat array. */
typedef struct model { int T; size_t n[MAXT], off[MAXT], total; } model;
static void model_init(model *m, unsigned seed, int T) {
  int t;
  m->T = T; m->total = 0;
  for (t = 0; t < T; t++) { m->n[t] = 1 + (size_t)(mix(seed, 1, (uint64_t)t, 2) % 97); m->off[t] = m->total; m->total += m->n[t]; }
}
static int owner_lo(const model *m, int world, int r) { return r * m->T / world; }

/* A planted overflow: which element of which tensor, and what (inf, -inf, NaN); none: t < 0. */
typedef struct plant { int t; size_t i; amp_f16 bits; } plant;
static plant plant_for(unsigned seed, const model *m, int world, int step, int rank) {
  plant p;
  uint64_t h = mix(seed, (uint64_t)step, (uint64_t)rank, 99);
  int lo = owner_lo(m, world, rank), hi = owner_lo(m, world, rank + 1);
  static const amp_f16 kinds[3] = {0x7c00, 0xfc00, 0x7e00};
  p.t = -1; p.i = 0; p.bits = 0;
  if (h % 100 >= 8 || hi <= lo) return p;   /* 8% of steps, per rank */
  p.t = lo + (int)((h >> 8) % (uint64_t)(hi - lo));
  p.i = (size_t)((h >> 20) % m->n[p.t]);
  p.bits = kinds[(h >> 40) % 3];
  return p;
}

/* Writes tensors [lo, hi)'s grads for this step at this scale, plus the planted values of ranks
   [r0, r1) (the reference plants everyone's; a rank its own). */
static void fill_grads(amp_f16 *g, const model *m, unsigned seed, int step, float scale, int lo, int hi,
                       int world, int r0, int r1) {
  int t, r;
  size_t i;
  for (t = lo; t < hi; t++)
    for (i = 0; i < m->n[t]; i++) g[m->off[t] + i] = amp_f32_to_f16(grad_value(seed, step, t, i) * scale);
  for (r = r0; r < r1; r++) {
    plant p = plant_for(seed, m, world, step, r);
    if (p.t >= lo && p.t < hi) g[m->off[p.t] + p.i] = p.bits;
  }
}

/* ---- a run: the reference and the ranks ---------------------------------------------------- */

typedef struct step_log {
  amp_scale_state st;
  int skipped, status;
  float norm;
  long t;
} step_log;

typedef struct run {
  model m;
  int world, steps, use_hook;
  int s0, s1;                 /* the steps the next run_threads runs */
  unsigned seed;
  amp_scaler_config sconf;
  amp_optim_config oconf;
  group g;
  rank_ctx ctx[MAXR];
  amp_scaler *sc[MAXR];
  amp_optimizer *op[MAXR];
  amp_f16 *w, *gr;            /* every rank's tensors live in one array: ranks own disjoint parts */
  step_log *log[MAXR];
  int created;
} run;

static void init_weights(amp_f16 *w, const model *m, unsigned seed) {
  int t;
  size_t i;
  for (t = 0; t < m->T; t++)
    for (i = 0; i < m->n[t]; i++) w[m->off[t] + i] = amp_f32_to_f16(grad_value(seed, -1, t, i));
}

static amp_optim_config optim_for(int k) {
  amp_optim_config c;
  memset(&c, 0, sizeof c);
  if (k % 2) { c.kind = AMP_SGD; c.lr = 0.01f; c.momentum = 0.9f; }
  else { c.kind = AMP_ADAMW; c.lr = 1e-3f; c.weight_decay = 0.01f; }
  c.max_grad_norm = 30.0f;    /* the norms are about 10..60: some steps clip, some do not */
  return c;
}

/* Creates every rank's scaler and optimizer on the main thread (amp.h's objects are not shared). */
static int run_create(run *R) {
  int r, t;
  R->w = (amp_f16 *)calloc(R->m.total, sizeof(amp_f16));
  R->gr = (amp_f16 *)calloc(R->m.total, sizeof(amp_f16));
  if (!R->w || !R->gr) return 0;
  init_weights(R->w, &R->m, R->seed);
  group_init(&R->g, R->world);
  for (r = 0; r < R->world; r++) {
    R->ctx[r].g = &R->g; R->ctx[r].rank = r; R->ctx[r].owner = R;
    R->log[r] = (step_log *)calloc((size_t)R->steps, sizeof(step_log));
    if (!R->log[r] || amp_scaler_create(&R->sc[r], amp_cpu(), &R->sconf) != AMP_OK ||
        amp_optimizer_create(&R->op[r], amp_cpu(), &R->oconf) != AMP_OK) return 0;
    for (t = owner_lo(&R->m, R->world, r); t < owner_lo(&R->m, R->world, r + 1); t++)
      if (amp_optimizer_add(R->op[r], AMP_F16, R->w + R->m.off[t], R->gr + R->m.off[t], R->m.n[t]) != AMP_OK) return 0;
    if (R->use_hook) amp_scaler_set_allreduce(R->sc[r], group_hook, &R->ctx[r]);
  }
  R->created = 1;
  return 1;
}
static void run_free(run *R) {
  int r;
  for (r = 0; r < R->world; r++) { amp_scaler_destroy(R->sc[r]); amp_optimizer_destroy(R->op[r]); free(R->log[r]); }
  if (R->created) group_free(&R->g);
  free(R->w); free(R->gr);
}

static void log_step(step_log *L, amp_scaler *sc, amp_optimizer *op, int status) {
  amp_scaler_get_state(sc, &L->st, NULL);
  L->skipped = amp_scaler_last_skipped(sc);
  L->norm = amp_optimizer_grad_norm(op);
  L->t = amp_optimizer_step_count(op);
  L->status = status;
}

/* One step of rank r: its grads at its scale, its plants, then (unscale,) step, update. Every
   third step unscales before step(): the hook still runs once. */
static amp_status rank_step(run *R, int r, int s) {
  int lo = owner_lo(&R->m, R->world, r), hi = owner_lo(&R->m, R->world, r + 1);
  amp_status st = AMP_OK;
  fill_grads(R->gr, &R->m, R->seed, s, amp_scaler_get_scale(R->sc[r]), lo, hi, R->world, r, r + 1);
  if (s % 3 == 0) st = amp_scaler_unscale(R->sc[r], R->op[r]);
  if (st == AMP_OK) st = amp_scaler_step(R->sc[r], R->op[r]);
  if (st == AMP_OK) st = amp_scaler_update(R->sc[r]);
  log_step(&R->log[r][s], R->sc[r], R->op[r], (int)st);
  return st;
}
/* A rank's thread: steps [s0, s1). */
static void *rank_main(void *arg) {
  rank_ctx *c = (rank_ctx *)arg;
  run *R = (run *)c->owner;
  int s;
  for (s = R->s0; s < R->s1; s++) rank_step(R, c->rank, s);
  return NULL;
}

static int run_threads(run *R, void *(*fn)(void *)) {
  pthread_t th[MAXR];
  int r, ok = 1;
  for (r = 0; r < R->world; r++) if (pthread_create(&th[r], NULL, fn, &R->ctx[r]) != 0) return 0;
  for (r = 0; r < R->world; r++) ok &= pthread_join(th[r], NULL) == 0;
  return ok;
}

/* The single-process reference: one optimizer over all tensors, every rank's plants. */
typedef struct ref { amp_scaler *sc; amp_optimizer *op; amp_f16 *w, *gr; step_log *log; } ref;
static int ref_run(ref *F, const run *R) {
  int t, s;
  memset(F, 0, sizeof *F);
  F->w = (amp_f16 *)calloc(R->m.total, sizeof(amp_f16)); F->gr = (amp_f16 *)calloc(R->m.total, sizeof(amp_f16));
  F->log = (step_log *)calloc((size_t)R->steps, sizeof(step_log));
  if (!F->w || !F->gr || !F->log) return 0;
  init_weights(F->w, &R->m, R->seed);
  if (amp_scaler_create(&F->sc, amp_cpu(), &R->sconf) != AMP_OK || amp_optimizer_create(&F->op, amp_cpu(), &R->oconf) != AMP_OK)
    return 0;
  for (t = 0; t < R->m.T; t++)
    if (amp_optimizer_add(F->op, AMP_F16, F->w + R->m.off[t], F->gr + R->m.off[t], R->m.n[t]) != AMP_OK) return 0;
  for (s = 0; s < R->steps; s++) {
    amp_status st;
    fill_grads(F->gr, &R->m, R->seed, s, amp_scaler_get_scale(F->sc), 0, R->m.T, R->world, 0, R->world);
    st = amp_scaler_step(F->sc, F->op);
    if (st == AMP_OK) st = amp_scaler_update(F->sc);
    log_step(&F->log[s], F->sc, F->op, (int)st);
  }
  return 1;
}
static void ref_free(ref *F) {
  amp_scaler_destroy(F->sc); amp_optimizer_destroy(F->op);
  free(F->w); free(F->gr); free(F->log);
}

/* NaN on the bits: a build with -ffast-math (clang -Ofast) may fold a != a to 0 */
static int nan_bits(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return (u & 0x7fffffffu) > 0x7f800000u; }
static int same_norm(float a, float b) { return (nan_bits(a) && nan_bits(b)) || a == b; }
static int same_log(const step_log *a, const step_log *b) {
  return a->st.scale == b->st.scale && a->st.tracker == b->st.tracker && a->st.hyst == b->st.hyst &&
         a->st.at_floor == b->st.at_floor && a->skipped == b->skipped && same_norm(a->norm, b->norm) &&
         a->t == b->t && a->status == b->status;
}

static const char *preset_names[5] = {"PyTorch", "Paddle", "DeepSpeed", "apex", "Keras"};

/* Sets up a sharded run: world ranks, preset p (growth every 3 clean steps, so growth, back-off,
   hysteresis and floors all happen within the run), T tensors. */
static void run_setup(run *R, int world, int p, unsigned seed, int steps, int use_hook) {
  memset(R, 0, sizeof *R);
  R->world = world; R->seed = seed; R->steps = steps; R->use_hook = use_hook;
  model_init(&R->m, seed, 4 * world + 3);
  R->sconf = amp_scaler_preset((amp_preset)p);
  R->sconf.growth_interval = 3;
  R->oconf = optim_for(p);
  R->s0 = 0; R->s1 = steps;
}

/* Compares every rank with the reference, step by step; returns the first bad step (or -1). */
static int first_divergence(const run *R, const ref *F, int *bad_rank) {
  int s, r;
  for (s = 0; s < R->steps; s++)
    for (r = 0; r < R->world; r++)
      if (!same_log(&R->log[r][s], &F->log[s])) { *bad_rank = r; return s; }
  return -1;
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void every_rank_skips_and_scales_like_one_process_for_every_preset(void) {
  int steps = t_quick() ? 40 : 600, world, p;
  for (world = 2; world <= 4; world++)
    for (p = 0; p < 5; p++) {
      run R;
      ref F;
      int s, r, bad_rank = -1, bad, one_rank_plants = 0, skips = 0, clipped = 0, grew = 0;
      run_setup(&R, world, p, 1000u + (unsigned)(world * 10 + p), steps, 1);
      if (!ref_run(&F, &R) || !run_create(&R) || !run_threads(&R, rank_main)) {
        EXPECT(0, "world %d preset %s: setup failed: %s", world, preset_names[p], amp_last_error());
        ref_free(&F); run_free(&R); continue;
      }
      bad = first_divergence(&R, &F, &bad_rank);
      if (bad >= 0) {
        const step_log *a = &R.log[bad_rank][bad], *b = &F.log[bad];
        EXPECT(0, "world %d preset %s step %d rank %d: expected scale %g tracker %d hyst %d skipped %d norm %.9g t %ld "
               "status %d, got scale %g tracker %d hyst %d skipped %d norm %.9g t %ld status %d", world, preset_names[p],
               bad, bad_rank, (double)b->st.scale, b->st.tracker, b->st.hyst, b->skipped, (double)b->norm, b->t, b->status,
               (double)a->st.scale, a->st.tracker, a->st.hyst, a->skipped, (double)a->norm, a->t, a->status);
      }
      EXPECT(memcmp(R.w, F.w, R.m.total * sizeof(amp_f16)) == 0,
             "world %d preset %s: the ranks' weights differ from the single-process weights after %d steps",
             world, preset_names[p], steps);
      for (r = 0; r < world; r++) {
        int t;
        for (t = owner_lo(&R.m, world, r); t < owner_lo(&R.m, world, r + 1); t++) {
          size_t n1 = 0, n2 = 0;
          const float *a = amp_optimizer_master(R.op[r], (size_t)(t - owner_lo(&R.m, world, r)), &n1);
          const float *b = amp_optimizer_master(F.op, (size_t)t, &n2);
          EXPECT(a && b && n1 == n2 && memcmp(a, b, n1 * sizeof(float)) == 0,
                 "world %d preset %s: rank %d's master of tensor %d differs from the reference", world, preset_names[p], r, t);
        }
        EXPECT(amp_scaler_skipped_steps(R.sc[r]) == amp_scaler_skipped_steps(F.sc),
               "world %d preset %s rank %d: skipped %ld, expected %ld", world, preset_names[p], r,
               amp_scaler_skipped_steps(R.sc[r]), amp_scaler_skipped_steps(F.sc));
      }
      /* the run must have exercised what it claims */
      for (s = 0; s < steps; s++) {
        int planted = 0, all_skipped = 1;
        for (r = 0; r < world; r++) { planted += plant_for(R.seed, &R.m, world, s, r).t >= 0; all_skipped &= R.log[r][s].skipped; }
        if (planted == 1) { one_rank_plants++; EXPECT(all_skipped, "world %d preset %s step %d: inf planted on one rank, not every rank skipped",
                                                      world, preset_names[p], s); }
        skips += F.log[s].skipped;
        clipped += !F.log[s].skipped && F.log[s].norm > R.oconf.max_grad_norm;
        grew += s > 0 && F.log[s].st.scale > F.log[s - 1].st.scale;
      }
      EXPECT(one_rank_plants >= 1 && skips >= 2 && (t_quick() || (clipped >= 1 && grew >= 1)),
             "world %d preset %s: the run is too tame: %d one-rank plants, %d skips, %d clipped steps, %d growths",
             world, preset_names[p], one_rank_plants, skips, clipped, grew);
      ref_free(&F); run_free(&R);
    }
}

/* The same run without the hook must drift: this is what the hook is for (and proves the
   comparison above can fail). */
static void ranks_without_the_hook_drift_apart(void) {
  run R;
  ref F;
  int bad_rank = -1, bad;
  run_setup(&R, 3, AMP_PRESET_PYTORCH, 77u, t_quick() ? 40 : 120, 0);
  if (!ref_run(&F, &R) || !run_create(&R) || !run_threads(&R, rank_main)) {
    EXPECT(0, "setup failed: %s", amp_last_error()); ref_free(&F); run_free(&R); return;
  }
  bad = first_divergence(&R, &F, &bad_rank);
  EXPECT(bad >= 0, "3 ranks without the hook stayed in lockstep with one process for %d steps (expected a divergence)", R.steps);
  ref_free(&F); run_free(&R);
}

/* Clipping: every rank's norm is the norm of all ranks' grads together: exactly the single-process
   optimizer's, and within float rounding of a direct double sum over the concatenated grads (the
   library sums squares in float lanes within 64-element blocks, hence the 1e-6). */
static void *unscale_main(void *arg) {
  rank_ctx *c = (rank_ctx *)arg;
  run *R = (run *)c->owner;
  R->log[c->rank][0].status = (int)amp_scaler_unscale(R->sc[c->rank], R->op[c->rank]);
  R->log[c->rank][0].norm = amp_optimizer_grad_norm(R->op[c->rank]);
  return NULL;
}
static void clipping_uses_the_global_norm_of_all_ranks(void) {
  int world;
  for (world = 2; world <= 4; world++) {
    run R;
    ref F;
    int r, t;
    size_t i;
    double sumsq = 0.0;
    float direct;
    run_setup(&R, world, AMP_PRESET_PYTORCH, 4242u + (unsigned)world, 1, 1);
    R.sconf.init_scale = 1024.0f;    /* no natural overflow at this scale */
    if (!ref_run(&F, &R) || !run_create(&R)) { EXPECT(0, "setup failed: %s", amp_last_error()); ref_free(&F); run_free(&R); continue; }
    memcpy(R.gr, F.gr, R.m.total * sizeof(amp_f16));   /* the grads the reference stepped with */
    for (t = 0; t < R.m.T; t++)
      for (i = 0; i < R.m.n[t]; i++) { double v = amp_f16_to_f32(R.gr[R.m.off[t] + i]) / 1024.0; sumsq += v * v; }
    direct = (float)sqrt(sumsq);
    EXPECT(run_threads(&R, unscale_main), "threads failed");
    for (r = 0; r < world; r++) {
      float got = R.log[r][0].norm;
      EXPECT(R.log[r][0].status == AMP_OK, "world %d rank %d: unscale returned %d: %s", world, r, R.log[r][0].status, amp_last_error());
      if (F.log[0].skipped) continue;   /* a plant at step 0: the norm is inf/NaN, checked elsewhere */
      EXPECT(got == F.log[0].norm, "world %d rank %d: global norm %.9g, the single-process norm is %.9g", world, r,
             (double)got, (double)F.log[0].norm);
      EXPECT(fabs((double)got - (double)direct) <= 1e-6 * (double)direct,
             "world %d rank %d: global norm %.9g, sqrt of the squares of the concatenated grads %.9g", world, r,
             (double)got, (double)direct);
      EXPECT(got > R.oconf.max_grad_norm, "world %d: norm %g does not exceed max_grad_norm %g: nothing clipped", world,
             (double)got, (double)R.oconf.max_grad_norm);
    }
    ref_free(&F); run_free(&R);
  }
}

/* A hook that fails: every rank's step fails with the hook's status (AMP_ERR_DEVICE for one out
   of amp_status's range), no rank changes anything, and a retry continues exactly as if the
   failure had not happened. One rank failing (its status travels through the exchange) and every
   rank failing are both covered; so are a failing unscale() and a failing step(). */
typedef struct snapshot { amp_f16 *w; float *master[MAXT]; amp_scale_state st[MAXR]; long t[MAXR], skipped[MAXR]; } snapshot;
static int snap_take(snapshot *S, const run *R) {
  int r, t;
  size_t n;
  memset(S, 0, sizeof *S);
  if (!(S->w = (amp_f16 *)malloc(R->m.total * sizeof(amp_f16)))) return 0;
  memcpy(S->w, R->w, R->m.total * sizeof(amp_f16));
  for (r = 0; r < R->world; r++) {
    int lo = owner_lo(&R->m, R->world, r);
    amp_scaler_get_state(R->sc[r], &S->st[r], NULL);
    S->t[r] = amp_optimizer_step_count(R->op[r]); S->skipped[r] = amp_scaler_skipped_steps(R->sc[r]);
    for (t = lo; t < owner_lo(&R->m, R->world, r + 1); t++) {
      const float *m = amp_optimizer_master(R->op[r], (size_t)(t - lo), &n);
      if (!(S->master[t] = (float *)malloc(n * sizeof(float)))) return 0;
      memcpy(S->master[t], m, n * sizeof(float));
    }
  }
  return 1;
}
static int snap_same(const snapshot *S, const run *R, int *rank) {
  int r, t;
  size_t n;
  for (r = 0; r < R->world; r++) {
    int lo = owner_lo(&R->m, R->world, r);
    amp_scale_state st;
    amp_scaler_get_state(R->sc[r], &st, NULL);
    *rank = r;
    if (memcmp(&st, &S->st[r], sizeof st) || S->t[r] != amp_optimizer_step_count(R->op[r]) ||
        S->skipped[r] != amp_scaler_skipped_steps(R->sc[r])) return 0;
    for (t = lo; t < owner_lo(&R->m, R->world, r + 1); t++) {
      const float *m = amp_optimizer_master(R->op[r], (size_t)(t - lo), &n);
      if (memcmp(m, S->master[t], n * sizeof(float))) return 0;
      if (memcmp(R->w + R->m.off[t], S->w + R->m.off[t], R->m.n[t] * sizeof(amp_f16))) return 0;
    }
  }
  return 1;
}
static void snap_free(snapshot *S) { int t; free(S->w); for (t = 0; t < MAXT; t++) free(S->master[t]); }

static void a_failing_hook_fails_every_rank_and_updates_none(void) {
  static const struct { int rank, status, expect; } cases[] = {
    {1, AMP_ERR_IO, AMP_ERR_IO},            /* one rank's network fails */
    {MAXR, AMP_ERR_NOMEM, AMP_ERR_NOMEM},   /* every rank's */
    {0, 42, AMP_ERR_DEVICE},                /* not an amp_status */
    {2, -3, AMP_ERR_DEVICE},
  };
  run R;
  ref F;
  int k, r, bad_rank = -1, bad, world = 3, fail_step = 4, steps = 9;
  run_setup(&R, world, AMP_PRESET_DEEPSPEED, 31337u, steps, 1);
  if (!ref_run(&F, &R) || !run_create(&R)) { EXPECT(0, "setup failed: %s", amp_last_error()); ref_free(&F); run_free(&R); return; }
  R.s0 = 0; R.s1 = fail_step;
  EXPECT(run_threads(&R, rank_main), "threads failed");
  for (k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
    int u;
    for (u = 0; u < 2; u++) {   /* u = 1: fail_step + 2 unscales first (every third step) */
      snapshot S;
      int same;
      int s = fail_step + 2 * u;
      if (!snap_take(&S, &R)) { EXPECT(0, "out of memory"); snap_free(&S); continue; }
      R.g.fail_rank = cases[k].rank; R.g.fail_status = cases[k].status;
      R.s0 = s; R.s1 = s + 1;
      EXPECT(run_threads(&R, rank_main), "threads failed");
      for (r = 0; r < world; r++)
        EXPECT(R.log[r][s].status == cases[k].expect, "hook failing with %d on rank %d (%s first): rank %d's step returned %d, expected %d",
               cases[k].status, cases[k].rank, s % 3 == 0 ? "unscale" : "step", r, R.log[r][s].status, cases[k].expect);
      same = snap_same(&S, &R, &r);
      EXPECT(same, "hook failing with %d on rank %d: rank %d changed its weights, masters, step count or scale state",
             cases[k].status, cases[k].rank, r);
      snap_free(&S);
      R.g.fail_rank = -1;
    }
  }
  {   /* the message names the hook and the status (checked on this thread) */
    amp_scaler *sc = NULL;
    amp_optimizer *op = NULL;
    amp_f16 w[4] = {0, 0, 0, 0}, g[4] = {0, 0, 0, 0};
    group one;
    rank_ctx c;
    amp_status st = AMP_OK;
    group_init(&one, 1);
    one.fail_rank = 0; one.fail_status = AMP_ERR_IO;
    c.g = &one; c.rank = 0; c.owner = NULL;
    if (amp_scaler_create(&sc, amp_cpu(), NULL) == AMP_OK && amp_optimizer_create(&op, amp_cpu(), NULL) == AMP_OK &&
        amp_optimizer_add(op, AMP_F16, w, g, 4) == AMP_OK && amp_scaler_set_allreduce(sc, group_hook, &c) == AMP_OK) {
      (void)amp_convert(NULL, AMP_F16, NULL, AMP_F32, 1);   /* an earlier, unrelated error on this thread */
      st = amp_scaler_step(sc, op);
    }
    EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "amp_scaler_step") && strstr(amp_last_error(), "hook") &&
           strstr(amp_last_error(), "AMP_ERR_IO"), "a failing hook: status %d, message \"%s\"", (int)st, amp_last_error());
    EXPECT(!strstr(amp_last_error(), "amp_convert"), "a stale message leaked into the hook's error: \"%s\"", amp_last_error());
    amp_scaler_destroy(sc); amp_optimizer_destroy(op); group_free(&one);
  }
  /* the retries: the failed attempts left no trace */
  R.s0 = fail_step; R.s1 = steps;
  EXPECT(run_threads(&R, rank_main), "threads failed");
  bad = first_divergence(&R, &F, &bad_rank);
  EXPECT(bad < 0, "after the failed attempts, rank %d departs from the reference at step %d", bad_rank, bad);
  EXPECT(memcmp(R.w, F.w, R.m.total * sizeof(amp_f16)) == 0, "after the failed attempts the weights differ from the reference");
  ref_free(&F); run_free(&R);
}

/* The hook runs once per unscale, never per tensor: 50 tensors a rank, a step alone, unscale then
   step, and two optimizers on one scaler (one call each). It gets n = 2 and no stream on the CPU. */
typedef struct count_ctx {
  rank_ctx rc;
  amp_scaler *sc;
  amp_optimizer *o50, *oa, *ob;
  int calls[4];
  amp_status st;
} count_ctx;
static void *count_main(void *arg) {
  count_ctx *c = (count_ctx *)arg;
  group *g = c->rc.g;
  int r = c->rc.rank;
  amp_status st = AMP_OK;
#define C_OK(x) do { if (st == AMP_OK) st = (x); } while (0)
  C_OK(amp_scaler_step(c->sc, c->o50)); C_OK(amp_scaler_update(c->sc));
  c->calls[0] = g->calls[r];
  C_OK(amp_scaler_unscale(c->sc, c->o50)); C_OK(amp_scaler_step(c->sc, c->o50)); C_OK(amp_scaler_update(c->sc));
  c->calls[1] = g->calls[r];
  C_OK(amp_scaler_unscale(c->sc, c->oa)); C_OK(amp_scaler_unscale(c->sc, c->ob));
  C_OK(amp_scaler_step(c->sc, c->oa)); C_OK(amp_scaler_step(c->sc, c->ob)); C_OK(amp_scaler_update(c->sc));
  c->calls[2] = g->calls[r];
  C_OK(amp_scaler_step(c->sc, c->oa)); C_OK(amp_scaler_step(c->sc, c->ob)); C_OK(amp_scaler_update(c->sc));
  c->calls[3] = g->calls[r];
#undef C_OK
  c->st = st;
  return NULL;
}
static void the_hook_runs_once_per_unscale_not_per_tensor(void) {
  enum { W = 2, NT = 50, LEN = 8 };
  static amp_f16 w[W][3][NT][LEN], gr[W][3][NT][LEN];
  count_ctx c[W];
  pthread_t th[W];
  group g;
  int r, k, i;
  static const int expect[4] = {1, 2, 4, 6};
  group_init(&g, W);
  memset(c, 0, sizeof c);
  for (r = 0; r < W; r++) {
    c[r].rc.g = &g; c[r].rc.rank = r; c[r].st = AMP_ERR_STATE;
    if (amp_scaler_create(&c[r].sc, amp_cpu(), NULL) != AMP_OK || amp_optimizer_create(&c[r].o50, amp_cpu(), NULL) != AMP_OK ||
        amp_optimizer_create(&c[r].oa, amp_cpu(), NULL) != AMP_OK || amp_optimizer_create(&c[r].ob, amp_cpu(), NULL) != AMP_OK) {
      EXPECT(0, "setup: %s", amp_last_error()); continue;
    }
    for (i = 0; i < NT; i++) {
      amp_optimizer_add(c[r].o50, AMP_F16, w[r][0][i], gr[r][0][i], LEN);
      amp_optimizer_add(i % 2 ? c[r].oa : c[r].ob, AMP_F16, w[r][1 + i % 2][i], gr[r][1 + i % 2][i], LEN);
    }
    amp_scaler_set_allreduce(c[r].sc, group_hook, &c[r].rc);
  }
  EXPECT(amp_optimizer_count(c[0].o50) == NT, "the optimizer holds %zu tensors, expected %d", amp_optimizer_count(c[0].o50), NT);
  for (r = 0; r < W; r++) pthread_create(&th[r], NULL, count_main, &c[r]);
  for (r = 0; r < W; r++) pthread_join(th[r], NULL);
  for (r = 0; r < W; r++) {
    EXPECT(c[r].st == AMP_OK, "rank %d: a call failed with %d", r, (int)c[r].st);
    for (k = 0; k < 4; k++)
      EXPECT(c[r].calls[k] == expect[k], "rank %d after phase %d: %d hook calls, expected %d", r, k, c[r].calls[k], expect[k]);
    EXPECT(g.odd_args[r] == 0, "rank %d: %d hook calls had n != 2 or a stream", r, g.odd_args[r]);
    amp_scaler_destroy(c[r].sc); amp_optimizer_destroy(c[r].o50); amp_optimizer_destroy(c[r].oa); amp_optimizer_destroy(c[r].ob);
  }
  group_free(&g);
}

/* Replicated data parallelism (every rank steps the whole model): each rank's grads from its own
   data, averaged by an in-process all-reduce into the same bits everywhere; then an inf appears on
   one rank only (a rank-local overflow after the reduction). With the hook every rank skips and
   the replicas stay bit for bit equal. No clipping here: with replicated grads the summed squared
   norm would count each rank once (see the manual: plain DDP needs no hook). */
typedef struct repl {
  group g;
  rank_ctx ctx[MAXR];
  amp_scaler *sc[MAXR];
  amp_optimizer *op[MAXR];
  amp_f16 *w[MAXR], *gr[MAXR];
  float *tmp[MAXR];
  model m;
  int world, steps;
  unsigned seed;
  step_log *log[MAXR];
  int planted_on[512];   /* the rank that got the inf at each step, or -1 */
} repl;
static void *repl_main(void *arg) {
  rank_ctx *c = (rank_ctx *)arg;
  repl *P = (repl *)c->owner;
  int r = c->rank, s, t;
  size_t i;
  for (s = 0; s < P->steps; s++) {
    float scale = amp_scaler_get_scale(P->sc[r]);
    amp_status st;
    for (t = 0; t < P->m.T; t++)
      for (i = 0; i < P->m.n[t]; i++)
        P->gr[r][P->m.off[t] + i] = amp_f32_to_f16(grad_value(P->seed + (unsigned)r, s, t, i) * scale * 0.25f);
    group_mean_grads(&P->g, r, P->gr[r], P->tmp[r], P->m.total);
    if (P->planted_on[s] == r) P->gr[r][(size_t)s % P->m.total] = 0x7c00;
    st = amp_scaler_step(P->sc[r], P->op[r]);
    if (st == AMP_OK) st = amp_scaler_update(P->sc[r]);
    log_step(&P->log[r][s], P->sc[r], P->op[r], (int)st);
  }
  return NULL;
}
static void replicated_ranks_skip_together_and_stay_identical(void) {
  repl P;
  pthread_t th[MAXR];
  int r, s, t, ok = 1, plants = 0;
  amp_scaler_config sc = amp_scaler_preset(AMP_PRESET_APEX);
  amp_optim_config oc = optim_for(0);
  memset(&P, 0, sizeof P);
  P.world = 3; P.seed = 555u; P.steps = t_quick() ? 30 : 200;
  oc.max_grad_norm = 0.0f;
  sc.growth_interval = 4;
  model_init(&P.m, P.seed, 9);
  group_init(&P.g, P.world);
  for (s = 0; s < P.steps; s++) {
    uint64_t h = mix(P.seed, (uint64_t)s, 5, 5);
    P.planted_on[s] = h % 100 < 10 ? (int)((h >> 8) % (uint64_t)P.world) : -1;
    plants += P.planted_on[s] >= 0;
  }
  for (r = 0; r < P.world && ok; r++) {
    size_t i;
    P.ctx[r].g = &P.g; P.ctx[r].rank = r; P.ctx[r].owner = &P;
    P.w[r] = (amp_f16 *)calloc(P.m.total, sizeof(amp_f16)); P.gr[r] = (amp_f16 *)calloc(P.m.total, sizeof(amp_f16));
    P.tmp[r] = (float *)calloc(P.m.total, sizeof(float)); P.log[r] = (step_log *)calloc((size_t)P.steps, sizeof(step_log));
    ok = P.w[r] && P.gr[r] && P.tmp[r] && P.log[r] && amp_scaler_create(&P.sc[r], amp_cpu(), &sc) == AMP_OK &&
         amp_optimizer_create(&P.op[r], amp_cpu(), &oc) == AMP_OK;
    for (i = 0; ok && i < P.m.total; i++) P.w[r][i] = amp_f32_to_f16(grad_value(P.seed, -1, 0, i));
    for (t = 0; ok && t < P.m.T; t++) ok = amp_optimizer_add(P.op[r], AMP_F16, P.w[r] + P.m.off[t], P.gr[r] + P.m.off[t], P.m.n[t]) == AMP_OK;
    if (ok) amp_scaler_set_allreduce(P.sc[r], group_hook, &P.ctx[r]);
  }
  EXPECT(ok, "setup: %s", amp_last_error());
  if (ok) {
    for (r = 0; r < P.world; r++) pthread_create(&th[r], NULL, repl_main, &P.ctx[r]);
    for (r = 0; r < P.world; r++) pthread_join(th[r], NULL);
    for (s = 0; s < P.steps; s++) {
      for (r = 1; r < P.world; r++)
        EXPECT(same_log(&P.log[r][s], &P.log[0][s]), "step %d: rank %d (scale %g skipped %d t %ld) differs from rank 0 "
               "(scale %g skipped %d t %ld)", s, r, (double)P.log[r][s].st.scale, P.log[r][s].skipped, P.log[r][s].t,
               (double)P.log[0][s].st.scale, P.log[0][s].skipped, P.log[0][s].t);
      if (P.planted_on[s] >= 0)
        for (r = 0; r < P.world; r++)
          EXPECT(P.log[r][s].skipped, "step %d: inf planted on rank %d only, rank %d did not skip", s, P.planted_on[s], r);
      EXPECT(P.log[0][s].status == AMP_OK, "step %d: status %d", s, P.log[0][s].status);
    }
    for (r = 1; r < P.world; r++)
      EXPECT(memcmp(P.w[r], P.w[0], P.m.total * sizeof(amp_f16)) == 0, "rank %d's replica differs from rank 0's", r);
    EXPECT(plants >= 1 && P.log[0][P.steps - 1].t >= P.steps / 2, "too tame: %d plants, %ld updates of %d steps",
           plants, P.log[0][P.steps - 1].t, P.steps);
  }
  for (r = 0; r < P.world; r++) {
    amp_scaler_destroy(P.sc[r]); amp_optimizer_destroy(P.op[r]);
    free(P.w[r]); free(P.gr[r]); free(P.tmp[r]); free(P.log[r]);
  }
  group_free(&P.g);
}

/* DeepSpeed's preset sometimes sinks to its floor under this many overflows; the log line that says
   so is expected here, not shown. */
static void quiet(void *user, const char *msg) { (void)user; (void)msg; }

/* fp8 amaxes over the ranks: each rank's fp8 scaler reduced over its loss scaler's group
   (amp_fp8_scaler_reduce_over) gets, every step, the scales of one scaler that saw the MAX of all
   ranks' amaxes (NaN on one rank included); without it the ranks' scales differ. */
enum { FP8_T = 5, FP8_STEPS = 30 };
typedef struct fp8_rank { group *g; int rank, attach; amp_scaler *sc; amp_fp8_scaler *f; float scale[FP8_STEPS][FP8_T]; int status; } fp8_rank;
static float fp8_amax(int rank, int step, int t) {
  if (step == 17 && t == 2 && rank == 1) { float nan; uint32_t u = 0x7fc00000u; memcpy(&nan, &u, 4); return nan; }
  return (float)((rank * 31 + step * 7 + t * 13) % 23) * (rank == step % 3 ? 8.0f : 1.0f);
}
static void *fp8_rank_main(void *arg) {
  fp8_rank *k = (fp8_rank *)arg;
  rank_ctx ctx;
  int s, t;
  ctx.g = k->g; ctx.rank = k->rank; ctx.owner = NULL;
  amp_scaler_set_allreduce(k->sc, group_hook, &ctx);
  if (k->attach) k->status |= (int)amp_fp8_scaler_reduce_over(k->f, k->sc);
  for (s = 0; s < FP8_STEPS; s++) {
    for (t = 0; t < FP8_T; t++) k->status |= (int)amp_fp8_scaler_record(k->f, (size_t)t, fp8_amax(k->rank, s, t));
    k->status |= (int)amp_fp8_scaler_update(k->f);
    for (t = 0; t < FP8_T; t++) k->scale[s][t] = amp_fp8_scaler_get_scale(k->f, (size_t)t);
  }
  return NULL;
}
static amp_status value_hook(void *user, double *buf, int n, void *stream) {   /* every slot *user */
  int i;
  (void)stream;
  for (i = 0; i < (n < 0 ? -n : n); i++) buf[i] = *(const double *)user;
  return AMP_OK;
}
static void fp8_amaxes_are_reduced_over_the_loss_scalers_group(void) {
  int attach;
  for (attach = 0; attach < 2; attach++) {
    int world = 3, r, s, t, same_all = 1;
    group g;
    fp8_rank k[MAXR];
    pthread_t th[MAXR];
    amp_fp8_config c;
    amp_fp8_scaler *ref = NULL;
    memset(&c, 0, sizeof c); c.history_len = 4;
    group_init(&g, world);
    amp_fp8_scaler_create(&ref, amp_cpu(), &c, FP8_T, NULL);
    for (r = 0; r < world; r++) {
      memset(&k[r], 0, sizeof k[r]);
      k[r].g = &g; k[r].rank = r; k[r].attach = attach;
      amp_scaler_create(&k[r].sc, amp_cpu(), NULL);
      amp_fp8_scaler_create(&k[r].f, amp_cpu(), &c, FP8_T, NULL);
    }
    for (r = 0; r < world; r++) pthread_create(&th[r], NULL, fp8_rank_main, &k[r]);
    for (r = 0; r < world; r++) pthread_join(th[r], NULL);
    for (s = 0; s < FP8_STEPS && ref; s++) {   /* the one process that sees every rank's amax */
      for (t = 0; t < FP8_T; t++)
        for (r = 0; r < world; r++) amp_fp8_scaler_record(ref, (size_t)t, fp8_amax(r, s, t));
      amp_fp8_scaler_update(ref);
      for (t = 0; t < FP8_T; t++) {
        float want = amp_fp8_scaler_get_scale(ref, (size_t)t);
        for (r = 0; r < world; r++) {
          int same = memcmp(&k[r].scale[s][t], &want, 4) == 0;
          if (attach) EXPECT(same, "rank %d step %d tensor %d: scale %g, the one process's %g", r, s, t,
                             (double)k[r].scale[s][t], (double)want);
          same_all &= same;
        }
      }
    }
    for (r = 0; r < world; r++) {
      EXPECT(k[r].status == 0, "rank %d: a call failed", r);
      amp_fp8_scaler_destroy(k[r].f); amp_scaler_destroy(k[r].sc);
    }
    if (!attach) EXPECT(!same_all, "without reduce_over the ranks' scales should differ from the reduced ones");
    amp_fp8_scaler_destroy(ref);
    group_free(&g);
  }
  {   /* refusals */
    amp_fp8_scaler *f = NULL;
    amp_fp8_scaler_create(&f, amp_cpu(), NULL, 1, NULL);
    EXPECT(amp_fp8_scaler_reduce_over(NULL, NULL) == AMP_ERR_ARG, "f NULL");
    EXPECT(amp_fp8_scaler_reduce_over(f, NULL) == AMP_OK, "s NULL detaches");
    {   /* a hook that gives back no amax's bits (not an integer; past 2^31 - 1, the bits of a
           negative float such as -1's) is refused, the slot kept */
      static const double bad[3] = {0.5, 2147483648.0, 3212836864.0};
      int b;
      for (b = 0; b < 3; b++) {
        amp_scaler *sc = NULL;
        float h = 0.0f;
        amp_scaler_create(&sc, amp_cpu(), NULL);
        amp_scaler_set_allreduce(sc, value_hook, (void *)&bad[b]);
        amp_fp8_scaler_reduce_over(f, sc);
        amp_fp8_scaler_record(f, 0, 3.0f);
        EXPECT(amp_fp8_scaler_update(f) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_fp8_scaler_update") &&
                   strstr(amp_last_error(), "no amax's bits"), "hook value %.17g: %s", bad[b], amp_last_error());
        EXPECT(amp_fp8_scaler_history(f, 0, &h, 1) == AMP_OK && h == 3.0f && amp_fp8_scaler_get_scale(f, 0) == 1.0f,
               "hook value %.17g: the refused update changed the state (slot 0 %g)", bad[b], (double)h);
        amp_fp8_scaler_reduce_over(f, NULL);
        amp_scaler_destroy(sc);
      }
    }
    amp_fp8_scaler_destroy(f);
  }
}

int main(void) {
  amp_set_log(quiet, NULL);
  RUN(every_rank_skips_and_scales_like_one_process_for_every_preset);
  RUN(ranks_without_the_hook_drift_apart);
  RUN(clipping_uses_the_global_norm_of_all_ranks);
  RUN(a_failing_hook_fails_every_rank_and_updates_none);
  RUN(the_hook_runs_once_per_unscale_not_per_tensor);
  RUN(replicated_ranks_skip_together_and_stay_identical);
  RUN(fp8_amaxes_are_reduced_over_the_loss_scalers_group);
  TEST_END();
}
