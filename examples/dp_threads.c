/* examples/dp_threads.c - data-parallel mixed precision on threads: ranks that skip together.

   Build: cc -std=c99 -O2 -pthread -I. examples/dp_threads.c -o dp_threads -lm
   Run:   ./dp_threads [ranks]          (2..8, default 4; exits 1 if the ranks fall out of step)

   The logic of a multi-GPU trainer, runnable anywhere:
     1. N threads play N GPUs. They share nothing but a tiny "network": an all-reduce built from a
        barrier. Every rank posts its numbers, waits for the others, then adds up all the posts in
        rank order 0..N-1, so every rank gets the very same bits (NCCL gives that guarantee too).
     2. Each rank holds the whole model in f16, computes the gradient of the scaled loss on its own
        shard of the data, and the ranks average their gradients through the network.
     3. ZeRO-1: each rank's optimizer owns only 1/N of the fp32 master weights and updates just that
        slice; then the ranks swap their updated slices (an all-gather).
     4. The scaler's all-reduce hook: once a step, {found inf?, sum of squared grads} go through the
        network. A step that overflowed on any rank is skipped on every rank, every scaler backs off
        together, and clipping sees the norm of the whole gradient, not of one slice.
     5. At step 40 one rank's backward overflows (an inf planted in one of its gradients). After the
        all-reduce only the rank that owns that weight sees the inf; the hook tells everyone.
     6. The same run without the hook, to see what goes wrong.
     7. fp8: each rank also keeps an fp8 scaler (delayed scaling) for its activations, whose amax
        differs from shard to shard. amp_fp8_scaler_reduce_over(f8, scaler) sends the amaxes through
        the same hook (a MAX this time), so every rank casts with the same scale; without the hook
        each rank would pick its own. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define MAXR 8
#define FEAT 16                 /* y = x . w_true + b_true: 16 weights and a bias */
#define P (FEAT + 1)            /* parameters */
#define SAMPLES 1024            /* split evenly over the ranks */
#define STEPS 300
#define PLANT_STEP 40           /* the step whose backward overflows on one rank */
#define PLANT_PARAM 5           /* ... in this gradient */
#define MAX_NORM 0.5f           /* clip the global gradient norm to this */

/* ---- 1. the network: a barrier and an all-reduce ------------------------------------------- */

static struct {
  int n;                                /* ranks */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiting;
  unsigned long round;
  double post[MAXR][P];                 /* what each rank contributes to the current all-reduce */
} net;

static void net_barrier(void) {
  unsigned long round;
  pthread_mutex_lock(&net.mu);
  round = net.round;
  if (++net.waiting == net.n) { net.waiting = 0; net.round++; pthread_cond_broadcast(&net.cv); }
  else while (round == net.round) pthread_cond_wait(&net.cv, &net.mu);
  pthread_mutex_unlock(&net.mu);
}

/* buf[0..n) = the sum over ranks of buf, summed in rank order: identical bits on every rank. */
static void net_allreduce_sum(int rank, double *buf, int n) {
  int i, q;
  memcpy(net.post[rank], buf, (size_t)n * sizeof(double));
  net_barrier();
  for (i = 0; i < n; i++) {
    double s = 0.0;
    for (q = 0; q < net.n; q++) s += net.post[q][i];
    buf[i] = s;
  }
  net_barrier();        /* nobody posts the next all-reduce before everyone has read this one */
}
/* buf[0..n) = the largest over ranks of buf (an fp8 scaler's amaxes) */
static void net_allreduce_max(int rank, double *buf, int n) {
  int i, q;
  memcpy(net.post[rank], buf, (size_t)n * sizeof(double));
  net_barrier();
  for (i = 0; i < n; i++)
    for (q = 0; q < net.n; q++) buf[i] = net.post[q][i] > buf[i] ? net.post[q][i] : buf[i];
  net_barrier();
}

/* ---- 2. a rank: the model, its data, its scaler and optimizer ------------------------------ */

typedef struct rank {
  int id;
  int lo, hi;                  /* the slice of the weights this rank's optimizer owns */
  amp_f16 w[P];                /* the whole model in f16 (every rank has a copy) */
  amp_f16 g[P];                /* the gradient of the scaled loss, f16 */
  amp_scaler *sc;
  amp_optimizer *opt;
  amp_fp8_scaler *f8;          /* 7. the E4M3 scale of this rank's activations (the predictions) */
  float f8scale[STEPS];
  /* what happened, step by step, for main() to print */
  float scale[STEPS], norm[STEPS];
  double loss[STEPS];
  int skipped[STEPS], saw_inf_in_slice[STEPS];
} rank;

static rank ranks[MAXR];
static float X[SAMPLES][FEAT], Y[SAMPLES];

/* The hook amp.h calls once per step with {1 if my grads held inf/NaN, my sum of squares} (a
   sum), and once per fp8 update with n < 0: -n amaxes (a max). */
static amp_status hook(void *user, double *buf, int n, void *stream) {
  rank *r = (rank *)user;
  (void)stream;                /* NULL on the CPU; on a GPU the all-reduce goes on this stream */
  if (n < 0) net_allreduce_max(r->id, buf, -n);
  else net_allreduce_sum(r->id, buf, n);
  return AMP_OK;
}

static void *rank_main(void *arg) {
  rank *r = (rank *)arg;
  int per = SAMPLES / net.n, first = r->id * per, step, i, k, q;
  for (step = 0; step < STEPS; step++) {
    /* forward and backward on my shard: loss = mean (x . w + b - y)^2, read from the f16 model */
    float scale = amp_scaler_get_scale(r->sc), w[P], preds[SAMPLES];
    double grad[P], loss = 0.0;
    memset(grad, 0, sizeof grad);
    for (k = 0; k < P; k++) w[k] = amp_f16_to_f32(r->w[k]);
    for (i = first; i < first + per; i++) {
      float pred = w[FEAT], err;
      for (k = 0; k < FEAT; k++) pred += X[i][k] * w[k];
      preds[i - first] = pred;
      err = pred - Y[i];
      loss += (double)err * err;
      for (k = 0; k < FEAT; k++) grad[k] += 2.0 * err * X[i][k];
      grad[FEAT] += 2.0 * err;
    }
    /* 7. the activations' amax into the fp8 scaler (an fp8 trainer's cast would write it), and
       the next scale: with the hook, the MAX over the ranks */
    r->f8scale[step] = amp_fp8_scaler_get_scale(r->f8, 0);
    if (amp_quantize(amp_cpu(), NULL, AMP_E4M3, preds, AMP_F32, (size_t)per, NULL, amp_fp8_scaler_amax_ptr(r->f8, 0)) !=
            AMP_OK || amp_fp8_scaler_update(r->f8) != AMP_OK) {
      fprintf(stderr, "rank %d: %s\n", r->id, amp_last_error());
      exit(1);
    }
    /* backward of (loss * scale): the gradients come out scaled, stored in f16 as on a GPU, and
       averaged over the ranks (the f16 values go over the network; all ranks get the same bits) */
    for (k = 0; k < P; k++) r->g[k] = amp_f32_to_f16((float)(grad[k] / (net.n * per)) * scale);
    if (step == PLANT_STEP && r->id == net.n / 2) r->g[PLANT_PARAM] = 0x7c00;   /* +inf: an overflow on this rank only */
    for (k = 0; k < P; k++) grad[k] = amp_f16_to_f32(r->g[k]);
    net_allreduce_sum(r->id, grad, P);
    for (k = 0; k < P; k++) r->g[k] = amp_f32_to_f16((float)(grad[k] / net.n));
    for (k = r->lo; k < r->hi; k++) r->saw_inf_in_slice[step] |= amp_f16_to_f32(r->g[k]) - amp_f16_to_f32(r->g[k]) != 0.0f;

    /* the AMP step: unscale my slice, (hook: all ranks agree), skip or update, then the scale rule */
    if (amp_scaler_step(r->sc, r->opt) != AMP_OK || amp_scaler_update(r->sc) != AMP_OK) {
      fprintf(stderr, "rank %d: %s\n", r->id, amp_last_error());
      exit(1);
    }
    /* 3. all-gather: copy the other ranks' freshly updated slices into my model */
    net_barrier();
    for (q = 0; q < net.n; q++)
      if (q != r->id) memcpy(r->w + ranks[q].lo, ranks[q].w + ranks[q].lo, (size_t)(ranks[q].hi - ranks[q].lo) * sizeof(amp_f16));
    net_barrier();

    loss /= per;
    net_allreduce_sum(r->id, &loss, 1);
    r->loss[step] = loss / net.n;
    r->scale[step] = scale;
    r->norm[step] = amp_optimizer_grad_norm(r->opt);
    r->skipped[step] = amp_scaler_last_skipped(r->sc);
  }
  return NULL;
}

/* ---- one training run ---------------------------------------------------------------------- */

/* Trains n ranks; returns the first step at which the ranks disagree (scale, skip or weights),
   or -1 when they stayed in lockstep to the end. */
static int train(int n, int use_hook) {
  pthread_t th[MAXR];
  amp_optim_config oc;
  int r, s, k;
  memset(&oc, 0, sizeof oc);
  oc.kind = AMP_ADAMW; oc.lr = 0.02f; oc.max_grad_norm = MAX_NORM;   /* clip by the global norm */
  memset(ranks, 0, sizeof ranks);
  net.n = n; net.waiting = 0; net.round = 0;
  for (r = 0; r < n; r++) {
    rank *R = &ranks[r];
    R->id = r; R->lo = r * P / n; R->hi = (r + 1) * P / n;
    for (k = 0; k < P; k++) R->w[k] = 0;                        /* every replica starts equal */
    if (amp_scaler_create(&R->sc, amp_cpu(), NULL) != AMP_OK ||  /* PyTorch's GradScaler defaults */
        amp_optimizer_create(&R->opt, amp_cpu(), &oc) != AMP_OK ||
        amp_optimizer_add(R->opt, AMP_F16, R->w + R->lo, R->g + R->lo, (size_t)(R->hi - R->lo)) != AMP_OK ||
        amp_fp8_scaler_create(&R->f8, amp_cpu(), NULL, 1, NULL) != AMP_OK ||       /* TE's delayed scaling */
        (use_hook && amp_fp8_scaler_reduce_over(R->f8, R->sc) != AMP_OK)) {         /* 7. the same group */
      fprintf(stderr, "%s\n", amp_last_error());
      exit(1);
    }
    if (use_hook) amp_scaler_set_allreduce(R->sc, hook, R);    /* 4. the one line */
  }
  for (r = 0; r < n; r++) pthread_create(&th[r], NULL, rank_main, &ranks[r]);
  for (r = 0; r < n; r++) pthread_join(th[r], NULL);

  for (s = 0; s < STEPS; s++)
    for (r = 1; r < n; r++)
      if (ranks[r].scale[s] != ranks[0].scale[s] || ranks[r].skipped[s] != ranks[0].skipped[s]) return s;
  for (r = 1; r < n; r++)
    if (memcmp(ranks[r].w, ranks[0].w, sizeof ranks[0].w) != 0 ||
        amp_scaler_get_scale(ranks[r].sc) != amp_scaler_get_scale(ranks[0].sc)) return STEPS;
  return -1;
}

/* 7. the first step at which two ranks cast with different fp8 scales (-1: none) */
static int fp8_divergence(int n, int *rank) {
  int r, s;
  for (s = 0; s < STEPS; s++)
    for (r = 1; r < n; r++)
      if (ranks[r].f8scale[s] != ranks[0].f8scale[s]) { *rank = r; return s; }
  return -1;
}

static void free_ranks(int n) {
  int r;
  for (r = 0; r < n; r++) {
    amp_scaler_destroy(ranks[r].sc); amp_optimizer_destroy(ranks[r].opt); amp_fp8_scaler_destroy(ranks[r].f8);
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4, i, k, r, s, bad, drift, owner = 0, skips = 0, status = 0, f8r = 0, f8s;
  float w_true[P];
  unsigned long seed = 12345;
  if (n < 2 || n > MAXR) { fprintf(stderr, "usage: %s [ranks 2..%d]\n", argv[0], MAXR); return 2; }
  pthread_mutex_init(&net.mu, NULL);
  pthread_cond_init(&net.cv, NULL);

  /* synthetic data: y = x . w_true + b_true + a little noise */
  for (k = 0; k < P; k++) { seed = seed * 6364136223846793005ul + 1442695040888963407ul; w_true[k] = (float)((seed >> 33) % 4001) / 1000.0f - 2.0f; }
  for (i = 0; i < SAMPLES; i++) {
    float y = w_true[FEAT];
    for (k = 0; k < FEAT; k++) {
      seed = seed * 6364136223846793005ul + 1442695040888963407ul;
      X[i][k] = (float)((seed >> 33) % 2001) / 1000.0f - 1.0f;
      y += X[i][k] * w_true[k];
    }
    seed = seed * 6364136223846793005ul + 1442695040888963407ul;
    Y[i] = y + ((float)((seed >> 33) % 201) / 1000.0f - 0.1f);
  }

  printf("Data-parallel AMP on %d threads: %d samples split %d per rank, a %d-parameter f16 model,\n"
         "each rank's optimizer owning a slice of the fp32 masters (ZeRO-1), AdamW, clip at norm 0.5.\n\n",
         n, SAMPLES, SAMPLES / n, P);

  /* 5. the run with the hook */
  bad = train(n, 1);
  for (r = 0; r < n; r++) if (PLANT_PARAM >= ranks[r].lo && PLANT_PARAM < ranks[r].hi) owner = r;
  for (s = 0; s < STEPS; s++) {
    skips += ranks[0].skipped[s];
    if (s < 4 || s == PLANT_STEP || s % 50 == 0 || s == STEPS - 1) {
      printf("step %3d  loss %-9.5f scale %-6g global grad norm %-9.3g %s\n", s, ranks[0].loss[s], (double)ranks[0].scale[s],
             (double)ranks[0].norm[s], ranks[0].skipped[s] ? "all ranks skipped" :
             ranks[0].norm[s] > MAX_NORM ? "all ranks updated, clipped to 0.5" : "all ranks updated");
      if (s == PLANT_STEP)
        printf("          ^ rank %d's backward overflowed (gradient %d = inf). After the gradient all-reduce only\n"
               "            rank %d, whose optimizer owns weights %d..%d, finds it in its slice%s; the hook told\n"
               "            the other ranks, and every rank skipped and halved its scale.\n",
               n / 2, PLANT_PARAM, owner, ranks[owner].lo, ranks[owner].hi - 1,
               ranks[owner].saw_inf_in_slice[s] && !ranks[(owner + 1) % n].saw_inf_in_slice[s] ? "" : " (?)");
    }
  }
  printf("\n%d of %d steps skipped. Every rank printed the same norm: the norm of all %d gradients, though\n"
         "each optimizer holds only its own slice of them.\n", skips, STEPS, P);
  if (bad < 0) {
    printf("With the hook: all %d ranks ended with the same scale (%g) and bit-identical weights.\n", n,
           (double)amp_scaler_get_scale(ranks[0].sc));
    if ((f8s = fp8_divergence(n, &f8r)) < 0)
      printf("fp8: every rank cast its activations with the same E4M3 scale at every step (the last %g): the\n"
             "largest amax of all the shards, through the same hook.\n", (double)ranks[0].f8scale[STEPS - 1]);
    else {
      printf("fp8: with the hook rank %d's scale differs from rank 0's at step %d: a bug.\n", f8r, f8s);
      status = 1;
    }
    printf("Learned bias %.3f (true %.3f), weight 0 %.3f (true %.3f).\n", (double)amp_f16_to_f32(ranks[0].w[FEAT]),
           (double)w_true[FEAT], (double)amp_f16_to_f32(ranks[0].w[0]), (double)w_true[0]);
  } else {
    printf("With the hook: the ranks DIVERGED at step %d; this is a bug.\n", bad);
    status = 1;
  }
  if (!(ranks[0].skipped[PLANT_STEP])) { printf("The planted inf was not skipped: a bug.\n"); status = 1; }
  free_ranks(n);

  /* 6. the same run without the hook */
  drift = train(n, 0);
  if (drift >= 0 && drift < STEPS) {
    printf("\nWithout the hook, at step %d: rank %d skipped and halved its scale to %g, while rank %d updated and\n"
           "kept %g. From then on the ranks scale their gradients differently before averaging them: the\n"
           "model is being trained on a wrong gradient, and nothing reports an error.\n",
           drift, owner, (double)ranks[owner].scale[drift + 1 < STEPS ? drift + 1 : drift], (owner + 1) % n,
           (double)ranks[(owner + 1) % n].scale[drift + 1 < STEPS ? drift + 1 : drift]);
  } else {
    printf("\nWithout the hook the ranks stayed in step: the demonstration did not happen (a bug).\n");
    status = 1;
  }
  if ((f8s = fp8_divergence(n, &f8r)) >= 0)
    printf("And the fp8 scales: from step %d rank 0 casts its activations with scale %g, rank %d with %g (each\n"
           "its own shard's amax), so the same value becomes different fp8 codes on different ranks.\n", f8s,
           (double)ranks[0].f8scale[f8s], f8r, (double)ranks[f8r].f8scale[f8s]);
  else {
    printf("Without the hook the fp8 scales stayed equal: the demonstration did not happen (a bug).\n");
    status = 1;
  }
  free_ranks(n);
  return status;
}
