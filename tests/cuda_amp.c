/* The public scaler / optimizer / checkpoint API on a CUDA device, side by side with the same calls
   on the CPU over the same random data. Without a GPU only the CPU forms of the new calls
   (amp_scaler_scale_ptr, amp_scaler_scale_buffer) and amp_cuda_open's refusal run; the rest says
   "skipped".

   How close GPU and CPU must be (tests/cuda_kernels.c says why):
   - the scale, the scale rule's whole state, skip counts, step counts: exactly;
   - masters and moments after k steps: |gpu - cpu| <= 4 k FLT_EPSILON (|cpu| + rms), rms the
     tensor's root mean square of that quantity (the device's pow in Adam's bias corrections; with clipping also
     the grad norm's summation order, about 1e-7 relative, inside the same bound);
   - the model copy: exactly the device master rounded to the model's dtype;
   - GPU against GPU (graph replay, the identity all-reduce hook, skipped steps): bit for bit. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>

static amp_device *gpu;   /* NULL without a GPU */
static void *gpu_stream;  /* our own stream (graphs cannot capture the legacy default stream) */
static char msg[512];

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static float srand1(void) { return 2.0f * (float)(rnd() & 0xffffff) / 16777216.0f - 1.0f; }   /* [-1, 1) */

#define OK(call) do { amp_status s_ = (call); \
    if (s_ != AMP_OK) { EXPECT(0, "%s -> %s: %s", #call, amp_status_string(s_), amp_last_error()); return; } } while (0)

static void *xmalloc(size_t bytes) { void *p = malloc(bytes ? bytes : 1); if (!p) { printf("out of memory\n"); exit(1); } return p; }
static void *dmalloc(size_t bytes) {
  void *p = NULL;
  if (amp__cu_malloc(gpu->cuda, &p, bytes, msg, sizeof msg) != AMP_OK) { printf("amp__cu_malloc(%zu): %s\n", bytes, msg); exit(1); }
  return p;
}
static void up(void *d, const void *h, size_t bytes) {
  if (amp__cu_copy(gpu->cuda, d, h, bytes, 0, msg, sizeof msg) != AMP_OK) { printf("upload: %s\n", msg); exit(1); }
}
static void down(void *h, const void *d, size_t bytes) {
  if (amp__cu_copy(gpu->cuda, h, d, bytes, 1, msg, sizeof msg) != AMP_OK) { printf("download: %s\n", msg); exit(1); }
}

/* ---- without a GPU too ------------------------------------------------------------------------ */

static void cuda_open_without_gpu_is_unsupported(void) {
  amp_device *d = NULL;
  amp_status s;
  if (gpu) return;   /* a GPU is present: main opened it */
  s = amp_cuda_open(&d, 0, NULL);
  EXPECT(s == AMP_ERR_UNSUPPORTED && d == NULL, "amp_cuda_open without a GPU: %s (d %p), want AMP_ERR_UNSUPPORTED",
         amp_status_string(s), (void *)d);
  EXPECT(strstr(amp_last_error(), "amp_cuda_open") != NULL, "message '%s' does not name the call", amp_last_error());
}

/* The same checks on the CPU and (when present) the GPU scaler. */
static void check_scale_ptr_and_buffer(amp_device *d, const char *where) {
  amp_scaler *s = NULL;
  amp_scaler_config c = amp_scaler_preset(AMP_PRESET_PYTORCH);
  size_t n = 1003;
  float *p, v = 0;
  c.init_scale = 1024.0f;
  OK(amp_scaler_create(&s, d, &c));
  p = amp_scaler_scale_ptr(s);
  EXPECT(p != NULL, "%s: scale_ptr is NULL", where);
  for (int round = 0; round < 2 && p; round++) {
    float want = round ? 512.0f : 1024.0f;
    if (amp_device_is_cuda(d)) down(&v, p, 4); else v = *p;
    EXPECT(v == want && amp_scaler_get_scale(s) == want, "%s round %d: *scale_ptr %g, get_scale %g, want %g", where, round,
           (double)v, (double)amp_scaler_get_scale(s), (double)want);
    for (int t = 0; t < 3; t++) {
      size_t es = amp_dtype_size((amp_dtype)t);
      unsigned char *h = (unsigned char *)xmalloc(n * es), *r = (unsigned char *)xmalloc(n * es);
      void *buf = amp_device_is_cuda(d) ? dmalloc(n * es + es) : xmalloc(n * es);
      void *at = amp_device_is_cuda(d) && t == AMP_F16 ? (char *)buf + es : buf;   /* one misaligned case */
      for (size_t i = 0; i < n; i++) amp__store(h, (amp_dtype)t, i, srand1() * (i % 7 == 0 ? 100.0f : 1.0f));
      amp__store(h, (amp_dtype)t, 4, INFINITY);   /* (no NaN: a GPU's multiply gives the canonical NaN, not the payload) */
      if (amp_device_is_cuda(d)) up(at, h, n * es); else memcpy(at, h, n * es);
      OK(amp_scaler_scale_buffer(s, at, (amp_dtype)t, n));
      if (amp_device_is_cuda(d)) down(r, at, n * es); else memcpy(r, at, n * es);
      for (size_t i = 0; i < n; i++) {
        unsigned char want_b[4];
        amp__store(want_b, (amp_dtype)t, 0, amp__load(h, (amp_dtype)t, i) * want);
        if (memcmp(want_b, r + i * es, es)) {
          EXPECT(0, "%s: %s element %zu: %g * %g gave %g", where, amp__dtype_name((amp_dtype)t), i,
                 (double)amp__load(h, (amp_dtype)t, i), (double)want, (double)amp__load(r, (amp_dtype)t, i));
          break;
        }
      }
      free(h); free(r);
      if (amp_device_is_cuda(d)) amp__cu_free(gpu->cuda, buf); else free(buf);
    }
    OK(amp_scaler_update_found_inf(s, 1));   /* back off: 512 next round, through the same pointer */
  }
  EXPECT(amp_scaler_scale_buffer(s, NULL, AMP_F16, 4) == AMP_ERR_ARG, "%s: buf NULL accepted", where);
  EXPECT(amp_scaler_scale_buffer(s, &v, (amp_dtype)7, 1) == AMP_ERR_ARG && strstr(amp_last_error(), "dtype 7"),
         "%s: dtype 7: '%s'", where, amp_last_error());
  EXPECT(amp_scaler_scale_buffer(s, NULL, AMP_F16, 0) == AMP_OK, "%s: n 0 refused", where);
  amp_scaler_destroy(s);
}

static void scale_ptr_and_scale_buffer_follow_the_scale(void) {
  check_scale_ptr_and_buffer(amp_cpu(), "cpu");
  EXPECT(amp_scaler_scale_ptr(NULL) == NULL && strstr(amp_last_error(), "amp_scaler_scale_ptr"), "scale_ptr(NULL): '%s'", amp_last_error());
  EXPECT(amp_scaler_scale_buffer(NULL, &rng, AMP_F32, 1) == AMP_ERR_ARG, "scale_buffer(NULL scaler) accepted");
  if (gpu) check_scale_ptr_and_buffer(gpu, "cuda");
}

/* ---- GPU: the scale rule ---------------------------------------------------------------------- */

static void scale_trajectories_equal_the_cpu_for_every_preset(void) {
  amp_scaler_config cfg[8];
  const char *name[8] = {"pytorch", "paddle", "deepspeed", "apex", "keras", "fixed", "to FLT_MIN", "rounding factors"};
  int iters = t_quick() ? 80 : 400;
  for (int p = 0; p < 5; p++) { cfg[p] = amp_scaler_preset((amp_preset)p); cfg[p].growth_interval = 3 + p; }
  cfg[3].max_scale = 262144.0f;
  cfg[5] = amp_scaler_preset(AMP_PRESET_PYTORCH); cfg[5].fixed = 1; cfg[5].init_scale = 128.0f;
  cfg[6] = amp_scaler_preset(AMP_PRESET_PYTORCH); cfg[6].init_scale = 1e-36f; cfg[6].backoff_factor = 0.25f; cfg[6].growth_interval = 50;
  cfg[7] = amp_scaler_preset(AMP_PRESET_APEX); cfg[7].growth_factor = 3.0f; cfg[7].backoff_factor = 0.8f; cfg[7].growth_interval = 2;
  cfg[7].max_scale = 0; cfg[7].hysteresis = 3;
  for (int c = 0; c < 8; c++) {
    amp_scaler *cs = NULL, *gs = NULL;
    OK(amp_scaler_create(&cs, amp_cpu(), &cfg[c]));
    OK(amp_scaler_create(&gs, gpu, &cfg[c]));
    for (int i = 0; i < iters && !t__cur; i++) {
      amp_scale_state a, b;
      amp_scale_params pa, pb;
      /* bursts of overflows and of clean stretches: hysteresis, growth, cap and floor all act */
      int f = c == 6 ? (i < 40) : (int)(rnd() % 100) < (i % 40 < 10 ? 70 : 15);
      OK(amp_scaler_update_found_inf(cs, f));
      OK(amp_scaler_update_found_inf(gs, f));
      OK(amp_scaler_get_state(cs, &a, &pa));
      OK(amp_scaler_get_state(gs, &b, &pb));
      EXPECT(memcmp(&a, &b, sizeof a) == 0 && memcmp(&pa, &pb, sizeof pa) == 0,
             "%s iter %d found_inf %d: cpu scale %a tracker %d hyst %d floor %d, gpu %a %d %d %d", name[c], i, f,
             (double)a.scale, a.tracker, a.hyst, a.at_floor, (double)b.scale, b.tracker, b.hyst, b.at_floor);
      EXPECT(amp_scaler_last_skipped(cs) == amp_scaler_last_skipped(gs) && amp_scaler_skipped_steps(cs) == amp_scaler_skipped_steps(gs) &&
             amp_scaler_at_floor(cs) == amp_scaler_at_floor(gs),
             "%s iter %d: cpu last_skipped %d skipped %ld floor %d, gpu %d %ld %d", name[c], i, amp_scaler_last_skipped(cs),
             amp_scaler_skipped_steps(cs), amp_scaler_at_floor(cs), amp_scaler_last_skipped(gs), amp_scaler_skipped_steps(gs),
             amp_scaler_at_floor(gs));
      EXPECT(amp__f32_bits(amp_scaler_get_scale(cs)) == amp__f32_bits(amp_scaler_get_scale(gs)), "%s iter %d: get_scale differs", name[c], i);
    }
    if (c == 6) EXPECT(amp_scaler_get_scale(gs) >= FLT_MIN, "the floor: scale %g below FLT_MIN", (double)amp_scaler_get_scale(gs));
    amp_scaler_destroy(cs); amp_scaler_destroy(gs);
  }
}

/* ---- tensors on both sides -------------------------------------------------------------------- */

enum { KMAX = 6 };
typedef struct tens {                       /* the data: host copies of the initial weights, current grads */
  size_t k, n[KMAX];
  amp_dtype wt[KMAX], gt[KMAX];
  void *w0[KMAX], *g[KMAX];
} tens;
typedef struct side {                       /* one optimizer over a tens, on the CPU or the GPU */
  amp_device *d;
  amp_optimizer *o;
  void *wbase[KMAX], *gbase[KMAX], *w[KMAX], *g[KMAX];
} side;

static void tens_make(tens *t, size_t k, const size_t *n, const amp_dtype *wt, const amp_dtype *gt) {
  memset(t, 0, sizeof *t);
  t->k = k;
  for (size_t i = 0; i < k; i++) {
    t->n[i] = n[i]; t->wt[i] = wt[i]; t->gt[i] = gt[i];
    t->w0[i] = xmalloc(n[i] * amp_dtype_size(wt[i]));
    t->g[i] = xmalloc(n[i] * amp_dtype_size(gt[i]));
    for (size_t j = 0; j < n[i]; j++) { amp__store(t->w0[i], wt[i], j, srand1()); amp__store(t->g[i], gt[i], j, 0.0f); }
  }
}
static void tens_free(tens *t) { for (size_t i = 0; i < t->k; i++) { free(t->w0[i]); free(t->g[i]); } }
/* New grads: uniform in (-scale, scale) in each grad dtype (an f16 grad near 65536 rounds to inf,
   as a real overflow does); bad_tensor >= 0 puts `bad` at one element of it. */
static void tens_grads(tens *t, float scale, int bad_tensor, float bad) {
  for (size_t i = 0; i < t->k; i++)
    for (size_t j = 0; j < t->n[i]; j++) amp__store(t->g[i], t->gt[i], j, srand1() * scale);
  if (bad_tensor >= 0) amp__store(t->g[bad_tensor], t->gt[bad_tensor], t->n[bad_tensor] / 2, bad);
}

/* side_groups 1: side_make sets up param groups (group 1: lr x 0.5, no decay; group 2: lr x 2,
   decay 0.3; tensor i in group i % 3), a float model copy rounded to bf16 (every AMP_F32 model
   copy), stochastic rounding of every bf16 model copy and, for tensor 0, an fp32 master seeded
   with values its model copy cannot hold. */
static int side_groups = 0;
static float *seed_values(const tens *t) {   /* tensor 0's initial weights, 2^-20 relative off */
  float *v = (float *)xmalloc(t->n[0] * 4);
  for (size_t j = 0; j < t->n[0]; j++) v[j] = amp__load(t->w0[0], t->wt[0], j) * (1.0f + 0x1p-20f) + 0x1p-30f;
  return v;
}
static amp_status side_add(side *s, const tens *t, size_t i, int g1, int g2) {
  amp_tensor_desc d;
  float *seed = NULL;
  void *dseed = NULL;
  amp_status st;
  if (!side_groups) return amp_optimizer_add_mixed(s->o, t->wt[i], s->w[i], t->gt[i], s->g[i], t->n[i]);
  memset(&d, 0, sizeof d);
  d.weights = s->w[i]; d.dtype = t->wt[i]; d.grads = s->g[i]; d.grad_dtype = t->gt[i] == AMP_F32 ? AMP_GRAD_F32 : t->gt[i]; d.n = t->n[i];
  d.group = i % 3 == 0 ? 0 : i % 3 == 1 ? g1 : g2;
  if (t->wt[i] == AMP_F32) d.round_to = AMP_BF16;
  if (t->wt[i] == AMP_BF16) d.stochastic = 1;
  if (i == 0) {
    seed = seed_values(t);
    if (amp_device_is_cuda(s->d)) { dseed = dmalloc(t->n[0] * 4); up(dseed, seed, t->n[0] * 4); d.master = (const float *)dseed; }
    else d.master = seed;
  }
  st = amp_optimizer_add_tensor(s->o, &d);
  if (dseed) { amp_device_sync(s->d); amp__cu_free(gpu->cuda, dseed); }   /* the add's copy has run */
  free(seed);
  return st;
}

static amp_status side_make(side *s, const tens *t, amp_device *d, const amp_optim_config *cfg) {
  amp_status st;
  int g1 = 0, g2 = 0;
  memset(s, 0, sizeof *s);
  s->d = d;
  if ((st = amp_optimizer_create(&s->o, d, cfg)) != AMP_OK) return st;
  if (side_groups && ((st = amp_optimizer_add_group(s->o, 0.5f, 0.0f, &g1)) != AMP_OK ||
                      (st = amp_optimizer_add_group(s->o, 2.0f, 0.3f, &g2)) != AMP_OK)) return st;
  for (size_t i = 0; i < t->k; i++) {
    size_t ws = amp_dtype_size(t->wt[i]), gs = amp_dtype_size(t->gt[i]);
    if (amp_device_is_cuda(d)) {   /* tensor 1 sits one element off 16 bytes: the scalar paths */
      s->wbase[i] = dmalloc(t->n[i] * ws + 16); s->gbase[i] = dmalloc(t->n[i] * gs + 16);
      s->w[i] = (char *)s->wbase[i] + (i == 1 ? ws : 0); s->g[i] = (char *)s->gbase[i] + (i == 1 ? gs : 0);
      up(s->w[i], t->w0[i], t->n[i] * ws);
    } else {
      s->w[i] = s->wbase[i] = xmalloc(t->n[i] * ws); s->g[i] = s->gbase[i] = xmalloc(t->n[i] * gs);
      memcpy(s->w[i], t->w0[i], t->n[i] * ws);
    }
    if ((st = side_add(s, t, i, g1, g2)) != AMP_OK) return st;
  }
  return AMP_OK;
}
static void side_push(side *s, const tens *t) {
  for (size_t i = 0; i < t->k; i++) {
    size_t bytes = t->n[i] * amp_dtype_size(t->gt[i]);
    if (amp_device_is_cuda(s->d)) up(s->g[i], t->g[i], bytes); else memcpy(s->g[i], t->g[i], bytes);
  }
}
static void side_free(side *s, const tens *t) {
  amp_optimizer_destroy(s->o);
  for (size_t i = 0; i < t->k; i++) {
    if (amp_device_is_cuda(s->d)) { amp__cu_free(gpu->cuda, s->wbase[i]); amp__cu_free(gpu->cuda, s->gbase[i]); }
    else { free(s->wbase[i]); free(s->gbase[i]); }
  }
}
/* which 0: master, 1: first moment / momentum, 2: second moment, into out[n]. */
static int side_state(const side *s, size_t i, int which, float *out) {
  size_t n = 0;
  const float *p;
  if (amp_device_is_cuda(s->d)) {
    if (which == 0) {
      p = amp_optimizer_master(s->o, i, &n);
      if (!p) return 0;
      down(out, p, n * 4);
      return 1;
    }
    return amp__cu_optim_state_io(gpu->cuda, s->o->cu, i, which, out, 0, msg, sizeof msg) == AMP_OK;
  }
  p = which == 0 ? amp_optimizer_master(s->o, i, &n) : which == 1 ? s->o->t[i].m : s->o->t[i].v;
  if (!p) return 0;
  memcpy(out, p, s->o->t[i].n * 4);
  return 1;
}
static void side_model(const side *s, const tens *t, size_t i, void *out) {
  size_t bytes = t->n[i] * amp_dtype_size(t->wt[i]);
  if (amp_device_is_cuda(s->d)) down(out, s->w[i], bytes); else memcpy(out, s->w[i], bytes);
}

/* Everything an optimizer holds, as one byte string: masters, moments, model copies, step count. */
typedef struct blob { unsigned char *p; size_t len; } blob;
static void blob_add(blob *b, const void *src, size_t n) {
  unsigned char *q = (unsigned char *)realloc(b->p, b->len + n);
  if (!q) { printf("out of memory\n"); exit(1); }
  b->p = q; memcpy(b->p + b->len, src, n); b->len += n;
}
static blob snapshot(const side *s, const tens *t) {
  blob b = {NULL, 0};
  int nm = amp__o_moments(&s->o->cfg);
  long steps = amp_optimizer_step_count(s->o);
  for (size_t i = 0; i < t->k; i++) {
    float *f = (float *)xmalloc(t->n[i] * 4);
    void *w = xmalloc(t->n[i] * amp_dtype_size(t->wt[i]));
    for (int k = 0; k <= nm; k++) { if (!side_state(s, i, k, f)) memset(f, 0xff, t->n[i] * 4); blob_add(&b, f, t->n[i] * 4); }
    side_model(s, t, i, w);
    blob_add(&b, w, t->n[i] * amp_dtype_size(t->wt[i]));
    free(f); free(w);
  }
  blob_add(&b, &steps, sizeof steps);
  return b;
}
static int blob_same(const blob *a, const blob *b) { return a->len == b->len && memcmp(a->p, b->p, a->len) == 0; }

/* The GPU side against the CPU side after `steps` steps: the documented bound, and the model copy
   exactly the device master rounded. */
static void compare_sides(const char *name, const side *c, const side *g, const tens *t, int steps) {
  int nm = amp__o_moments(&c->o->cfg);
  const char *what[3] = {"master", "m", "v"};
  for (size_t i = 0; i < t->k && !t__cur; i++) {
    size_t n = t->n[i];
    float *a = (float *)xmalloc(n * 4), *b = (float *)xmalloc(n * 4);
    void *model = xmalloc(n * amp_dtype_size(t->wt[i]));
    for (int k = 0; k <= nm; k++) {
      double rms = 0;
      EXPECT(side_state(c, i, k, a) && side_state(g, i, k, b), "%s tensor %zu: %s not readable: %s", name, i, what[k], msg);
      for (size_t j = 0; j < n; j++) rms += (double)a[j] * a[j];
      rms = sqrt(rms / (double)n);
      for (size_t j = 0; j < n; j++) {
        double tol = 4.0 * steps * FLT_EPSILON * (fabs(a[j]) + rms);
        if (!(fabs((double)b[j] - a[j]) <= tol)) {
          EXPECT(0, "%s tensor %zu (weights %s, grads %s, n %zu) %s[%zu] after %d steps: cpu %.9g gpu %.9g (tol %.3g)", name, i,
                 amp__dtype_name(t->wt[i]), amp__dtype_name(t->gt[i]), n, what[k], j, steps, (double)a[j], (double)b[j], tol);
          break;
        }
      }
    }
    side_state(g, i, 0, b);
    side_model(g, t, i, model);
    for (size_t j = 0; j < n; j++) {
      float want = amp__round_to(amp__round_to(b[j], g->o->t[i].round_to), t->wt[i]), got = amp__load(model, t->wt[i], j);
      if (g->o->t[i].stochastic)   /* the bits of the last update's key, as the CPU draws them */
        want = amp_bf16_to_f32(amp__f32_to_bf16_sr(b[j], amp__sr_bits16(amp__sr_key(g->o->cfg.seed,
                                 (int64_t)amp_optimizer_step_count(g->o), (uint64_t)i), (uint64_t)j)));
      if (amp__f32_bits(want) != amp__f32_bits(got)) {
        EXPECT(0, "%s tensor %zu model[%zu]: %a, want the device master %a rounded: %a", name, i, j, (double)got, (double)b[j], (double)want);
        break;
      }
    }
    free(a); free(b); free(model);
  }
}

static amp_optim_config ocfg(amp_optim_kind kind, float lr, float wd, float mom, float damp, int nest, float maxnorm) {
  amp_optim_config c;
  memset(&c, 0, sizeof c);
  c.kind = kind; c.lr = lr; c.weight_decay = wd; c.momentum = mom; c.dampening = damp; c.nesterov = nest;
  c.max_grad_norm = maxnorm;
  return c;
}
static amp_scaler_config scfg(float init, int interval) {
  amp_scaler_config c = amp_scaler_preset(AMP_PRESET_PYTORCH);
  c.init_scale = init; c.growth_interval = interval;
  return c;
}

/* The standard tensor set: every dtype, two mixed (f32 grads for bf16 / f16 weights), one
   misaligned on the device, one spanning two chunks. */
static void standard_tens(tens *t) {
  size_t n[5] = {5, 1003, 70001, 64, 4096};
  amp_dtype wt[5] = {AMP_F16, AMP_BF16, AMP_F32, AMP_BF16, AMP_F16};
  amp_dtype gt[5] = {AMP_F16, AMP_BF16, AMP_F32, AMP_F32, AMP_F32};
  if (t_quick()) n[2] = 3001;
  tens_make(t, 5, n, wt, gt);
}

/* ---- GPU: optimizers against the CPU ---------------------------------------------------------- */

static void run_against_cpu(const char *name, amp_optim_config oc, int steps) {
  tens t;
  side c, g;
  amp_scaler *cs = NULL, *gs = NULL;
  amp_scaler_config sc = scfg(4096.0f, 2);   /* grows every 2 clean steps: f16 grads overflow at 65536 */
  int skipped = 0;
  standard_tens(&t);
  OK(amp_scaler_create(&cs, amp_cpu(), &sc));
  OK(amp_scaler_create(&gs, gpu, &sc));
  OK(side_make(&c, &t, amp_cpu(), &oc));
  OK(side_make(&g, &t, gpu, &oc));
  for (int step = 1; step <= steps && !t__cur; step++) {
    float scale = amp_scaler_get_scale(cs), gscale = amp_scaler_get_scale(gs);
    int bad = step % 5 == 3 ? (step / 5) % 5 : -1;   /* injected NaN besides any natural f16 overflow */
    EXPECT(amp__f32_bits(scale) == amp__f32_bits(gscale), "%s step %d: cpu scale %g gpu %g", name, step, (double)scale, (double)gscale);
    if (step == 4) { OK(amp_optimizer_set_lr(c.o, oc.lr * 0.5f)); OK(amp_optimizer_set_lr(g.o, oc.lr * 0.5f)); }   /* a schedule */
    tens_grads(&t, scale, bad, NAN);
    side_push(&c, &t); side_push(&g, &t);
    if (step % 2) { OK(amp_scaler_unscale(cs, c.o)); OK(amp_scaler_unscale(gs, g.o)); }   /* explicit, or inside step */
    OK(amp_scaler_step(cs, c.o));
    OK(amp_scaler_step(gs, g.o));
    {
      float cn = amp_optimizer_grad_norm(c.o), gn = amp_optimizer_grad_norm(g.o);
      if (cn - cn == 0.0f) EXPECT(fabs((double)gn - cn) <= 1e-5 * cn, "%s step %d: grad norm cpu %.9g gpu %.9g", name, step, (double)cn, (double)gn);
    }
    OK(amp_scaler_update(cs));
    OK(amp_scaler_update(gs));
    skipped += amp_scaler_last_skipped(cs);
    EXPECT(amp_scaler_last_skipped(cs) == amp_scaler_last_skipped(gs) && amp_optimizer_step_count(c.o) == amp_optimizer_step_count(g.o),
           "%s step %d: cpu skipped %d steps %ld, gpu %d %ld", name, step, amp_scaler_last_skipped(cs), amp_optimizer_step_count(c.o),
           amp_scaler_last_skipped(gs), amp_optimizer_step_count(g.o));
  }
  EXPECT(skipped > 0 && skipped < steps, "%s: %d of %d steps skipped: the test wants both kinds", name, skipped, steps);
  compare_sides(name, &c, &g, &t, steps);
  side_free(&c, &t); side_free(&g, &t);
  amp_scaler_destroy(cs); amp_scaler_destroy(gs);
  tens_free(&t);
}

/* Param groups, round_to and a seeded master on the GPU against the CPU (side_groups). */
static void groups_on_gpu_match_the_cpu(void) {
  int steps = t_quick() ? 8 : 14;
  side_groups = 1;
  run_against_cpu("groups sgd momentum", ocfg(AMP_SGD, 0.05f, 1e-2f, 0.9f, 0, 0, 1.0f), steps);
  run_against_cpu("groups adamw clipped", ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 1.0f), steps);
  run_against_cpu("groups lion clipped", ocfg(AMP_LION, 1e-3f, 0.1f, 0, 0, 0, 1.0f), steps);
  side_groups = 0;
}
/* The seeded master on the GPU: bit for bit the seed, and the model copy the seed rounded. */
static void seeded_master_on_gpu_is_bit_for_bit(void) {
  tens t;
  side g;
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-2f, 0, 0, 0, 0, 0);
  standard_tens(&t);
  side_groups = 1;
  OK(side_make(&g, &t, gpu, &oc));
  side_groups = 0;
  {
    float *seed = seed_values(&t), *m = (float *)xmalloc(t.n[0] * 4);
    void *w = xmalloc(t.n[0] * amp_dtype_size(t.wt[0]));
    size_t differs = 0;
    EXPECT(side_state(&g, 0, 0, m), "master not readable: %s", amp_last_error());
    side_model(&g, &t, 0, w);
    for (size_t j = 0; j < t.n[0]; j++) {
      EXPECT(amp__f32_bits(m[j]) == amp__f32_bits(seed[j]), "elem %zu: seed %a, device master %a", j, (double)seed[j], (double)m[j]);
      EXPECT(amp__f32_bits(amp__load(w, t.wt[0], j)) == amp__f32_bits(amp__round_to(seed[j], t.wt[0])),
             "elem %zu: model copy %a, want the seed rounded %a", j, (double)amp__load(w, t.wt[0], j), (double)amp__round_to(seed[j], t.wt[0]));
      differs += amp__f32_bits(amp__round_to(seed[j], t.wt[0])) != amp__f32_bits(seed[j]);
    }
    EXPECT(differs > 0, "every seed value fits the model copy's type: the test proves nothing");
    free(seed); free(m); free(w);
  }
  side_free(&g, &t);
  tens_free(&t);
}

static void optimizers_on_gpu_match_the_cpu(void) {
  int steps = t_quick() ? 8 : 14;
  run_against_cpu("sgd", ocfg(AMP_SGD, 0.1f, 0, 0, 0, 0, 0), steps);
  run_against_cpu("sgd momentum+wd+dampening", ocfg(AMP_SGD, 0.05f, 1e-2f, 0.9f, 0.1f, 0, 0), steps);
  run_against_cpu("sgd nesterov", ocfg(AMP_SGD, 0.05f, 0, 0.9f, 0, 1, 0), steps);
  run_against_cpu("adam l2", ocfg(AMP_ADAM, 1e-2f, 1e-2f, 0, 0, 0, 0), steps);
  run_against_cpu("adamw clipped", ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 1.0f), steps);
  run_against_cpu("lion clipped", ocfg(AMP_LION, 1e-3f, 0.1f, 0, 0, 0, 1.0f), steps);
}

/* ---- GPU: skipped steps ----------------------------------------------------------------------- */

static void skipped_step_leaves_device_state_bit_identical(void) {
  tens t;
  side g;
  amp_scaler *gs = NULL, *cs = NULL;
  amp_scaler_config sc = scfg(1024.0f, 2000);
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 1.0f);
  float bad[3] = {INFINITY, NAN, -INFINITY};
  standard_tens(&t);
  OK(amp_scaler_create(&gs, gpu, &sc));
  OK(amp_scaler_create(&cs, amp_cpu(), &sc));
  OK(side_make(&g, &t, gpu, &oc));
  for (int k = 0; k < 2; k++) {
    tens_grads(&t, 1024.0f, -1, 0); side_push(&g, &t);
    OK(amp_scaler_step(gs, g.o)); OK(amp_scaler_update(gs)); OK(amp_scaler_update_found_inf(cs, 0));
  }
  for (int f = 0; f < 5; f++) {   /* one bad element in each tensor in turn: f16, bf16, f32, f32 grads of bf16, ... */
    blob before, after;
    tens_grads(&t, 1024.0f, f, bad[f % 3]); side_push(&g, &t);
    before = snapshot(&g, &t);
    if (f % 2) OK(amp_scaler_unscale(gs, g.o));
    OK(amp_scaler_step(gs, g.o));
    OK(amp_scaler_update(gs));
    OK(amp_scaler_update_found_inf(cs, 1));
    after = snapshot(&g, &t);
    EXPECT(blob_same(&before, &after), "%g in tensor %d (%s grads): the skipped step changed the device state", (double)bad[f % 3], f,
           amp__dtype_name(t.gt[f]));
    EXPECT(amp_scaler_get_scale(gs) == amp_scaler_get_scale(cs) && amp_scaler_last_skipped(gs) == 1 && amp_scaler_skipped_steps(gs) == f + 1,
           "after overflow %d: scale %g (cpu %g) last_skipped %d skipped %ld", f, (double)amp_scaler_get_scale(gs),
           (double)amp_scaler_get_scale(cs), amp_scaler_last_skipped(gs), amp_scaler_skipped_steps(gs));
    free(before.p); free(after.p);
  }
  tens_grads(&t, amp_scaler_get_scale(gs), -1, 0); side_push(&g, &t);
  OK(amp_scaler_step(gs, g.o)); OK(amp_scaler_update(gs));
  EXPECT(amp_optimizer_step_count(g.o) == 3 && amp_scaler_last_skipped(gs) == 0, "a clean step after the overflows: step count %ld, want 3",
         amp_optimizer_step_count(g.o));
  side_free(&g, &t);
  amp_scaler_destroy(gs); amp_scaler_destroy(cs);
  tens_free(&t);
}

/* ---- GPU: amp_optimizer_step (no scaler) ----------------------------------------------------- */

/* The scaler-less step on the GPU against the CPU: the same skip decisions (inf/NaN in each grad
   type in turn), step counts, last_skipped; a skipped step leaves the device state bit for bit;
   masters and moments within the documented bound; a scaler on it is refused. */
static void stepless_step_on_gpu_matches_the_cpu(void) {
  tens t;
  side c, g;
  amp_scaler *gs = NULL;
  amp_optim_config oc = amp_optimizer_defaults(AMP_ADAMW);
  float bad[3] = {INFINITY, NAN, -INFINITY};
  int steps = t_quick() ? 8 : 14, skipped = 0;
  oc.lr = 1e-2f; oc.weight_decay = 1e-2f; oc.max_grad_norm = 1.0f; oc.beta1 = 0.0f;   /* beta1 0: zero_is_zero */
  standard_tens(&t);
  OK(side_make(&c, &t, amp_cpu(), &oc));
  OK(side_make(&g, &t, gpu, &oc));
  EXPECT(amp_optimizer_last_skipped(g.o) == 0, "before any step: last_skipped %d", amp_optimizer_last_skipped(g.o));
  for (int step = 1; step <= steps && !t__cur; step++) {
    int where = step % 4 == 2 ? (step / 4) % 5 : -1;
    blob before, after;
    tens_grads(&t, step % 3 ? 0.1f : 3.0f, where, bad[step % 3]);   /* some steps clip */
    side_push(&c, &t); side_push(&g, &t);
    before = snapshot(&g, &t);
    OK(amp_optimizer_step(c.o));
    OK(amp_optimizer_step(g.o));
    after = snapshot(&g, &t);
    EXPECT(amp_optimizer_last_skipped(c.o) == (where >= 0) && amp_optimizer_last_skipped(g.o) == (where >= 0),
           "step %d (bad tensor %d): last_skipped cpu %d gpu %d", step, where, amp_optimizer_last_skipped(c.o), amp_optimizer_last_skipped(g.o));
    EXPECT(amp_optimizer_step_count(c.o) == amp_optimizer_step_count(g.o), "step %d: step counts cpu %ld gpu %ld", step,
           amp_optimizer_step_count(c.o), amp_optimizer_step_count(g.o));
    if (where >= 0) {
      skipped++;
      EXPECT(blob_same(&before, &after), "step %d: %g in tensor %d (%s grads): the skipped step changed the device state", step,
             (double)bad[step % 3], where, amp__dtype_name(t.gt[where]));
    } else {
      float cn = amp_optimizer_grad_norm(c.o), gn = amp_optimizer_grad_norm(g.o);
      EXPECT(fabs((double)gn - cn) <= 1e-5 * cn, "step %d: grad norm cpu %.9g gpu %.9g", step, (double)cn, (double)gn);
    }
    free(before.p); free(after.p);
  }
  EXPECT(skipped > 0 && skipped < steps, "%d of %d steps skipped: the test wants both kinds", skipped, steps);
  compare_sides("amp_optimizer_step", &c, &g, &t, steps);
  OK(amp_scaler_create(&gs, gpu, NULL));
  {
    amp_status st = amp_scaler_step(gs, g.o);
    EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "without a scaler"), "a scaler step on a scaler-less optimizer: %s '%s'",
           amp_status_string(st), amp_last_error());
  }
  amp_scaler_destroy(gs);
  side_free(&c, &t); side_free(&g, &t);
  tens_free(&t);
}

/* amp_optimizer_step captured in a graph is 2 kernels (unscale, update), and 6 replays (one with
   an overflow) equal 6 eager steps bit for bit. */
static void captured_stepless_step_replays_like_eager(void) {
  tens t;
  side a, b;
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 2.0f);
  void *graph = NULL;
  size_t kernels = 0;
  standard_tens(&t);
  OK(side_make(&a, &t, gpu, &oc)); OK(side_make(&b, &t, gpu, &oc));
  tens_grads(&t, 1.0f, -1, 0); side_push(&a, &t); side_push(&b, &t);
  OK(amp_optimizer_step(a.o)); OK(amp_optimizer_step(b.o));   /* eager first steps build the device optimizers */
  OK(amp__cu_capture_begin(gpu->cuda, msg, sizeof msg));
  {
    amp_status s1 = amp_optimizer_step(b.o);
    amp_status e = amp__cu_capture_end(gpu->cuda, &graph, &kernels, msg, sizeof msg);
    EXPECT(s1 == AMP_OK && e == AMP_OK, "capture: step %s end %s (%s / %s)", amp_status_string(s1), amp_status_string(e), amp_last_error(), msg);
    if (e != AMP_OK) { side_free(&a, &t); side_free(&b, &t); tens_free(&t); return; }
  }
  EXPECT(kernels == 2, "a captured amp_optimizer_step has %zu kernel nodes, want 2", kernels);
  for (int r = 0; r < 6; r++) {
    tens_grads(&t, 1.0f, r == 3 ? 2 : -1, INFINITY);
    side_push(&a, &t); side_push(&b, &t);
    OK(amp_optimizer_step(a.o));
    OK(amp__cu_graph_launch(gpu->cuda, graph, msg, sizeof msg));
    EXPECT(amp_optimizer_last_skipped(a.o) == (r == 3) && amp_optimizer_last_skipped(b.o) == (r == 3),
           "replay %d: last_skipped eager %d replayed %d", r, amp_optimizer_last_skipped(a.o), amp_optimizer_last_skipped(b.o));
  }
  {
    blob ba = snapshot(&a, &t), bb = snapshot(&b, &t);
    EXPECT(blob_same(&ba, &bb) && amp_optimizer_step_count(a.o) == 6, "6 replays differ from 6 eager steps (steps: eager %ld, replayed %ld)",
           amp_optimizer_step_count(a.o), amp_optimizer_step_count(b.o));
    free(ba.p); free(bb.p);
  }
  amp__cu_graph_destroy(graph);
  side_free(&a, &t); side_free(&b, &t);
  tens_free(&t);
}

/* Two optimizers on one scaler: an overflow in either skips both when both were unscaled before
   the first step, and only the later one when the first had already stepped, as on the CPU. */
static void optimizers_sharing_a_scaler_skip_together(void) {
  tens ta, tb;
  side ca, cb, ga, gb;
  amp_scaler *cs = NULL, *gs = NULL;
  amp_scaler_config sc = scfg(1024.0f, 2000);
  amp_optim_config oa = ocfg(AMP_ADAM, 1e-2f, 0, 0, 0, 0, 0), ob = ocfg(AMP_SGD, 0.1f, 0, 0.9f, 0, 0, 0);
  standard_tens(&ta); standard_tens(&tb);
  OK(amp_scaler_create(&cs, amp_cpu(), &sc)); OK(amp_scaler_create(&gs, gpu, &sc));
  OK(side_make(&ca, &ta, amp_cpu(), &oa)); OK(side_make(&cb, &tb, amp_cpu(), &ob));
  OK(side_make(&ga, &ta, gpu, &oa)); OK(side_make(&gb, &tb, gpu, &ob));
  for (int it = 0; it < 6 && !t__cur; it++) {
    float scale = amp_scaler_get_scale(cs);
    int order = it % 2;              /* 0: unscale both, then step both; 1: step a, then step b */
    int where = it % 3;              /* 0: clean; 1: inf in a; 2: inf in b */
    blob a0 = snapshot(&ga, &ta), b0 = snapshot(&gb, &tb), a1, b1;
    tens_grads(&ta, scale, where == 1 ? 2 : -1, INFINITY); tens_grads(&tb, scale, where == 2 ? 0 : -1, INFINITY);
    side_push(&ca, &ta); side_push(&ga, &ta); side_push(&cb, &tb); side_push(&gb, &tb);
    if (order == 0) {
      OK(amp_scaler_unscale(cs, ca.o)); OK(amp_scaler_unscale(cs, cb.o));
      OK(amp_scaler_unscale(gs, ga.o)); OK(amp_scaler_unscale(gs, gb.o));
    }
    OK(amp_scaler_step(cs, ca.o)); OK(amp_scaler_step(cs, cb.o)); OK(amp_scaler_update(cs));
    OK(amp_scaler_step(gs, ga.o)); OK(amp_scaler_step(gs, gb.o)); OK(amp_scaler_update(gs));
    a1 = snapshot(&ga, &ta); b1 = snapshot(&gb, &tb);
    EXPECT(amp_optimizer_step_count(ca.o) == amp_optimizer_step_count(ga.o) && amp_optimizer_step_count(cb.o) == amp_optimizer_step_count(gb.o),
           "iteration %d (order %d, inf in %d): cpu steps %ld %ld, gpu %ld %ld", it, order, where, amp_optimizer_step_count(ca.o),
           amp_optimizer_step_count(cb.o), amp_optimizer_step_count(ga.o), amp_optimizer_step_count(gb.o));
    if (where != 0 && order == 0)
      EXPECT(blob_same(&a0, &a1) && blob_same(&b0, &b1), "iteration %d: inf in %s, both unscaled first: a changed %d, b changed %d",
             it, where == 1 ? "a" : "b", !blob_same(&a0, &a1), !blob_same(&b0, &b1));
    if (where == 2 && order == 1)
      EXPECT(!blob_same(&a0, &a1) && blob_same(&b0, &b1), "iteration %d: a stepped before b's inf was seen: a changed %d (want 1), b %d (want 0)",
             it, !blob_same(&a0, &a1), !blob_same(&b0, &b1));
    EXPECT(amp__f32_bits(amp_scaler_get_scale(cs)) == amp__f32_bits(amp_scaler_get_scale(gs)), "iteration %d: scale cpu %g gpu %g", it,
           (double)amp_scaler_get_scale(cs), (double)amp_scaler_get_scale(gs));
    free(a0.p); free(b0.p); free(a1.p); free(b1.p);
  }
  compare_sides("shared scaler a", &ca, &ga, &ta, 6);
  compare_sides("shared scaler b", &cb, &gb, &tb, 6);
  side_free(&ca, &ta); side_free(&cb, &tb); side_free(&ga, &ta); side_free(&gb, &tb);
  amp_scaler_destroy(cs); amp_scaler_destroy(gs);
  tens_free(&ta); tens_free(&tb);
}

/* ---- GPU: graphs and launch counts ------------------------------------------------------------ */

static void captured_public_step_replays_like_eager(void) {
  tens t;
  side a, b;
  amp_scaler *sa = NULL, *sb = NULL;
  amp_scaler_config sc = scfg(1024.0f, 2);   /* the scale grows inside the replays */
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 2.0f);
  void *graph = NULL;
  size_t kernels = 0;
  standard_tens(&t);
  OK(amp_scaler_create(&sa, gpu, &sc)); OK(amp_scaler_create(&sb, gpu, &sc));
  OK(side_make(&a, &t, gpu, &oc)); OK(side_make(&b, &t, gpu, &oc));
  tens_grads(&t, 1024.0f, -1, 0); side_push(&a, &t); side_push(&b, &t);
  OK(amp_scaler_step(sa, a.o)); OK(amp_scaler_update(sa));   /* eager first steps build the device optimizers */
  OK(amp_scaler_step(sb, b.o)); OK(amp_scaler_update(sb));
  OK(amp__cu_capture_begin(gpu->cuda, msg, sizeof msg));
  {
    amp_status s1 = amp_scaler_unscale(sb, b.o), s2 = amp_scaler_step(sb, b.o), s3 = amp_scaler_update(sb);
    amp_status e = amp__cu_capture_end(gpu->cuda, &graph, &kernels, msg, sizeof msg);
    EXPECT(s1 == AMP_OK && s2 == AMP_OK && s3 == AMP_OK && e == AMP_OK, "capture: unscale %s step %s update %s end %s (%s / %s)",
           amp_status_string(s1), amp_status_string(s2), amp_status_string(s3), amp_status_string(e), amp_last_error(), msg);
    if (e != AMP_OK) { side_free(&a, &t); side_free(&b, &t); amp_scaler_destroy(sa); amp_scaler_destroy(sb); tens_free(&t); return; }
  }
  EXPECT(kernels == 3, "a captured unscale + step + update has %zu kernel nodes, want 3", kernels);
  for (int r = 0; r < 6; r++) {
    float scale = amp_scaler_get_scale(sa);
    tens_grads(&t, scale, r == 3 ? 1 : -1, NAN);   /* one overflow among the replays */
    side_push(&a, &t); side_push(&b, &t);
    OK(amp_scaler_unscale(sa, a.o)); OK(amp_scaler_step(sa, a.o)); OK(amp_scaler_update(sa));
    OK(amp__cu_graph_launch(gpu->cuda, graph, msg, sizeof msg));
  }
  {
    blob ba = snapshot(&a, &t), bb = snapshot(&b, &t);
    amp_scale_state xa, xb;
    EXPECT(blob_same(&ba, &bb), "6 graph replays differ from 6 eager steps (eager step count %ld, replayed %ld)",
           amp_optimizer_step_count(a.o), amp_optimizer_step_count(b.o));
    EXPECT(amp_optimizer_step_count(a.o) == 6 && amp_scaler_skipped_steps(sa) == 1 && amp_scaler_skipped_steps(sb) == 1,
           "eager: %ld updates and %ld skipped, want 6 and 1 (replayed: %ld skipped)", amp_optimizer_step_count(a.o),
           amp_scaler_skipped_steps(sa), amp_scaler_skipped_steps(sb));
    OK(amp_scaler_get_state(sa, &xa, NULL)); OK(amp_scaler_get_state(sb, &xb, NULL));
    EXPECT(memcmp(&xa, &xb, sizeof xa) == 0, "scaler: eager scale %g tracker %d, replayed %g %d", (double)xa.scale, xa.tracker,
           (double)xb.scale, xb.tracker);
    free(ba.p); free(bb.p);
  }
  amp__cu_graph_destroy(graph);
  side_free(&a, &t); side_free(&b, &t);
  amp_scaler_destroy(sa); amp_scaler_destroy(sb);
  tens_free(&t);
}

/* A schedule with a captured step: set_lr before each launch of the graph (the step reads the lr
   from device memory when it runs) gives, bit for bit, the eager steps with the same schedule, and
   differs from the lr of capture time; set_lr while capturing is refused (a captured lr would be
   replayed unchanged by every launch) and changes nothing. */
static void captured_step_replays_with_a_changing_lr_run(void) {
  tens t;
  side a, b, e;
  amp_scaler *sa = NULL, *sb = NULL, *se = NULL;
  amp_scaler_config sc = scfg(1024.0f, 1000);
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 0);
  void *graph = NULL;
  size_t kernels = 0;
  standard_tens(&t);
  OK(amp_scaler_create(&sa, gpu, &sc)); OK(amp_scaler_create(&sb, gpu, &sc)); OK(amp_scaler_create(&se, gpu, &sc));
  OK(side_make(&a, &t, gpu, &oc)); OK(side_make(&b, &t, gpu, &oc)); OK(side_make(&e, &t, gpu, &oc));
  tens_grads(&t, 1024.0f, -1, 0); side_push(&a, &t); side_push(&b, &t); side_push(&e, &t);
  OK(amp_scaler_step(sa, a.o)); OK(amp_scaler_update(sa));   /* eager first steps build the device optimizers */
  OK(amp_scaler_step(sb, b.o)); OK(amp_scaler_update(sb));
  OK(amp_scaler_step(se, e.o)); OK(amp_scaler_update(se));
  OK(amp__cu_capture_begin(gpu->cuda, msg, sizeof msg));
  {
    amp_status l = amp_optimizer_set_lr(b.o, 0.5f);
    char lmsg[512];
    snprintf(lmsg, sizeof lmsg, "%s", amp_last_error());
    amp_status s1 = amp_scaler_unscale(sb, b.o), s2 = amp_scaler_step(sb, b.o), s3 = amp_scaler_update(sb);
    amp_status end = amp__cu_capture_end(gpu->cuda, &graph, &kernels, msg, sizeof msg);
    EXPECT(l == AMP_ERR_STATE && strstr(lmsg, "amp_optimizer_set_lr") && strstr(lmsg, "captur") && b.o->cfg.lr == oc.lr,
           "set_lr while capturing: %s \"%s\", lr now %g (want AMP_ERR_STATE and %g)", amp_status_string(l), lmsg,
           (double)b.o->cfg.lr, (double)oc.lr);
    EXPECT(s1 == AMP_OK && s2 == AMP_OK && s3 == AMP_OK && end == AMP_OK, "capture: unscale %s step %s update %s end %s (%s / %s)",
           amp_status_string(s1), amp_status_string(s2), amp_status_string(s3), amp_status_string(end), amp_last_error(), msg);
    if (end != AMP_OK) goto out;
  }
  EXPECT(kernels == 3, "the refused set_lr left %zu kernel nodes in the graph, want 3", kernels);
  for (int r = 0; r < 5; r++) {
    float lr = 1e-2f * (float)(r + 2) / 3.0f;   /* the schedule */
    tens_grads(&t, amp_scaler_get_scale(sa), -1, 0);
    side_push(&a, &t); side_push(&b, &t); side_push(&e, &t);
    OK(amp_optimizer_set_lr(a.o, lr));
    OK(amp_scaler_unscale(sa, a.o)); OK(amp_scaler_step(sa, a.o)); OK(amp_scaler_update(sa));
    OK(amp_optimizer_set_lr(b.o, lr));
    OK(amp__cu_graph_launch(gpu->cuda, graph, msg, sizeof msg));
    OK(amp_scaler_unscale(se, e.o)); OK(amp_scaler_step(se, e.o)); OK(amp_scaler_update(se));   /* the lr of capture time */
  }
  {
    blob ba = snapshot(&a, &t), bb = snapshot(&b, &t), be = snapshot(&e, &t);
    EXPECT(blob_same(&ba, &bb), "5 replays with set_lr before each differ from 5 eager steps with the same schedule (steps %ld / %ld)",
           amp_optimizer_step_count(a.o), amp_optimizer_step_count(b.o));
    EXPECT(!blob_same(&bb, &be), "the replays equal steps at the lr of capture time: the schedule did not reach the graph");
    free(ba.p); free(bb.p); free(be.p);
  }
out:
  amp__cu_graph_destroy(graph);
  side_free(&a, &t); side_free(&b, &t); side_free(&e, &t);
  amp_scaler_destroy(sa); amp_scaler_destroy(sb); amp_scaler_destroy(se);
  tens_free(&t);
}

static void captured_step_replays_with_a_changing_lr(void) {
  captured_step_replays_with_a_changing_lr_run();
  side_groups = 1;   /* each group's lr follows set_lr in the replays (the device table's lr_scale) */
  captured_step_replays_with_a_changing_lr_run();
  side_groups = 0;
}

/* Finite grads near 1.8e19 (f32 and bf16; f16 cannot hold them) square past FLT_MAX: the device
   norm must be finite (double sums) and equal the CPU's, and the clipped step must move every
   weight by lr g max_norm / norm as on the CPU (a float sum gives norm inf, coefficient 0, and a
   step that moves nothing). */
static void huge_finite_grads_give_a_finite_norm_and_the_cpu_step(void) {
  size_t n[2] = {70001, 1003};
  amp_dtype wt[2] = {AMP_F32, AMP_BF16}, gt[2] = {AMP_F32, AMP_BF16};
  amp_optim_config oc = ocfg(AMP_SGD, 0.5f, 0, 0, 0, 0, 1.0f);
  amp_scaler_config sc = scfg(1.0f, 1000);
  amp_scaler *cs = NULL, *gs = NULL;
  side c, g;
  tens t;
  double sum = 0;
  tens_make(&t, 2, n, wt, gt);
  for (size_t i = 0; i < 2; i++)
    for (size_t j = 0; j < n[i]; j++) {
      amp__store(t.g[i], gt[i], j, (j % 3 ? 1.8e19f : -1.7e19f) * (1.0f + (float)(j % 7) / 64.0f));
      sum += (double)amp__load(t.g[i], gt[i], j) * amp__load(t.g[i], gt[i], j);
    }
  OK(amp_scaler_create(&cs, amp_cpu(), &sc)); OK(amp_scaler_create(&gs, gpu, &sc));
  OK(side_make(&c, &t, amp_cpu(), &oc)); OK(side_make(&g, &t, gpu, &oc));
  side_push(&c, &t); side_push(&g, &t);
  OK(amp_scaler_step(cs, c.o)); OK(amp_scaler_step(gs, g.o));
  {
    double want = sqrt(sum), cn = amp_optimizer_grad_norm(c.o), gn = amp_optimizer_grad_norm(g.o);
    EXPECT(fabs(gn - want) <= 1e-6 * want && fabs(cn - want) <= 1e-6 * want, "norm: want %.9g, cpu %.9g, gpu %.9g", want, cn, gn);
    EXPECT(amp_scaler_last_skipped(gs) == 0 && amp_optimizer_step_count(g.o) == 1, "gpu: skipped %d, steps %ld",
           amp_scaler_last_skipped(gs), amp_optimizer_step_count(g.o));
  }
  for (size_t i = 0; i < 2 && !t__cur; i++) {
    float *a = (float *)xmalloc(n[i] * 4), *b = (float *)xmalloc(n[i] * 4);
    EXPECT(side_state(&c, i, 0, a) && side_state(&g, i, 0, b), "masters not readable: %s", msg);
    for (size_t j = 0; j < n[i]; j++) {
      float w0 = amp__load(t.w0[i], wt[i], j);
      if (!(fabs((double)a[j] - b[j]) <= 1e-6) || !(fabs((double)b[j] - w0) > 1e-3)) {
        EXPECT(0, "tensor %zu [%zu]: initial %.9g, cpu %.9g, gpu %.9g (the step must move it by about 0.002 on both)", i, j,
               (double)w0, (double)a[j], (double)b[j]);
        break;
      }
    }
    free(a); free(b);
  }
  side_free(&c, &t); side_free(&g, &t);
  amp_scaler_destroy(cs); amp_scaler_destroy(gs);
  tens_free(&t);
}

/* Every finite f16 grad (and +-inf in the unscale's check): the step decodes f16 grads with the
   hardware conversion, which must give amp.h's bits for each. SGD with lr 1 from master 0: the
   master becomes -g exactly, on the CPU and the GPU; both must agree bit for bit. n is not a
   multiple of 4: the vector path and the scalar tail both run. */
static void every_finite_f16_grad_decodes_to_the_cpu_bits(void) {
  size_t n[1] = {63488 + 3};
  amp_dtype wt[1] = {AMP_F32}, gt[1] = {AMP_F16};
  amp_optim_config oc = ocfg(AMP_SGD, 1.0f, 0, 0, 0, 0, 0);
  amp_scaler_config sc = scfg(1.0f, 1000);
  amp_scaler *cs = NULL, *gs = NULL;
  side c, g;
  tens t;
  size_t j, k = 0;
  tens_make(&t, 1, n, wt, gt);
  for (uint32_t u = 0; u < 65536; u++)
    if ((u & 0x7c00) != 0x7c00) ((amp_f16 *)t.g[0])[k++] = (amp_f16)u;
  for (; k < n[0]; k++) ((amp_f16 *)t.g[0])[k] = (amp_f16)(0x3c00 + k);   /* the tail: a few normal values */
  for (j = 0; j < n[0]; j++) ((float *)t.w0[0])[j] = 0.0f;
  OK(amp_scaler_create(&cs, amp_cpu(), &sc)); OK(amp_scaler_create(&gs, gpu, &sc));
  OK(side_make(&c, &t, amp_cpu(), &oc)); OK(side_make(&g, &t, gpu, &oc));
  side_push(&c, &t); side_push(&g, &t);
  OK(amp_scaler_step(cs, c.o)); OK(amp_scaler_step(gs, g.o));
  EXPECT(amp_scaler_last_skipped(gs) == 0 && amp_scaler_last_skipped(cs) == 0, "a finite grad was taken for inf/NaN (cpu %d gpu %d)",
         amp_scaler_last_skipped(cs), amp_scaler_last_skipped(gs));
  {
    double cn = amp_optimizer_grad_norm(c.o), gn = amp_optimizer_grad_norm(g.o);
    EXPECT(fabs(gn - cn) <= 1e-6 * cn, "norm over every finite f16: cpu %.9g, gpu %.9g", cn, gn);
  }
  {
    float *a = (float *)xmalloc(n[0] * 4), *b = (float *)xmalloc(n[0] * 4);
    EXPECT(side_state(&c, 0, 0, a) && side_state(&g, 0, 0, b), "masters not readable: %s", msg);
    for (j = 0; j < n[0]; j++)
      if (amp__f32_bits(a[j]) != amp__f32_bits(b[j])) {
        EXPECT(0, "f16 grad 0x%04x (%a): master cpu %a, gpu %a", ((amp_f16 *)t.g[0])[j], (double)amp_f16_to_f32(((amp_f16 *)t.g[0])[j]),
               (double)a[j], (double)b[j]);
        break;
      }
    free(a); free(b);
  }
  /* +-inf: found by the unscale, the step skipped */
  for (int s = 0; s < 2; s++) {
    ((amp_f16 *)t.g[0])[n[0] / 3] = s ? 0xfc00 : 0x7c00;
    side_push(&g, &t);
    OK(amp_scaler_update(gs));
    OK(amp_scaler_step(gs, g.o));
    EXPECT(amp_optimizer_step_count(g.o) == 1, "an f16 %cinf grad did not skip the step (steps %ld)", s ? '-' : '+', amp_optimizer_step_count(g.o));
  }
  side_free(&c, &t); side_free(&g, &t);
  amp_scaler_destroy(cs); amp_scaler_destroy(gs);
  tens_free(&t);
}

static void public_step_over_500_tensors_is_three_launches(void) {
  enum { K = 500 };
  void *mem[2 * K], *graph = NULL;
  amp_scaler *s = NULL;
  amp_optimizer *o = NULL;
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-3f, 1e-2f, 0, 0, 0, 1.0f);
  size_t kernels = 0;
  OK(amp_scaler_create(&s, gpu, NULL));
  OK(amp_optimizer_create(&o, gpu, &oc));
  for (int i = 0; i < K; i++) {
    size_t n = 100 + rnd() % 3000;
    uint16_t *z = (uint16_t *)calloc(n, 2);
    mem[2 * i] = dmalloc(n * 2); mem[2 * i + 1] = dmalloc(n * 2);
    up(mem[2 * i], z, n * 2); up(mem[2 * i + 1], z, n * 2);
    free(z);
    OK(amp_optimizer_add(o, i % 2 ? AMP_BF16 : AMP_F16, mem[2 * i + 1], mem[2 * i], n));
  }
  OK(amp_scaler_step(s, o)); OK(amp_scaler_update(s));
  OK(amp__cu_capture_begin(gpu->cuda, msg, sizeof msg));
  amp_scaler_unscale(s, o); amp_scaler_step(s, o); amp_scaler_update(s);
  OK(amp__cu_capture_end(gpu->cuda, &graph, &kernels, msg, sizeof msg));
  EXPECT(kernels == 3, "unscale + step + update over %d tensors: %zu kernels, want 3", K, kernels);
  OK(amp__cu_graph_launch(gpu->cuda, graph, msg, sizeof msg));
  EXPECT(amp_optimizer_step_count(o) == 2, "an eager step and a replay: step count %ld, want 2", amp_optimizer_step_count(o));
  amp__cu_graph_destroy(graph);
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
  for (int i = 0; i < 2 * K; i++) amp__cu_free(gpu->cuda, mem[i]);
}

/* ---- GPU: the data-parallel hook -------------------------------------------------------------- */

typedef struct hook_log { int calls, wrong, mode; double seen[2]; } hook_log;   /* mode 0 identity, 1 AMP_ERR_IO, 2 status 42, 3 another rank overflowed */
static amp_status test_hook(void *user, double *buf, int n, void *stream) {
  hook_log *h = (hook_log *)user;
  h->calls++;
  if (n != 2 || !buf || stream != gpu_stream) h->wrong++;
  if (h->mode == 1) return AMP_ERR_IO;
  if (h->mode == 2) return (amp_status)42;
  /* a test may wait: read what this rank found (the buffer is device memory) */
  if (amp__cu_copy(gpu->cuda, h->seen, buf, sizeof h->seen, 1, msg, sizeof msg) != AMP_OK) h->wrong++;
  if (h->mode == 3) {
    double sum[2];
    sum[0] = h->seen[0] + 1.0; sum[1] = h->seen[1] + 1.0;
    if (amp__cu_copy(gpu->cuda, buf, sum, sizeof sum, 0, msg, sizeof msg) != AMP_OK) h->wrong++;
  }
  return AMP_OK;
}

static void allreduce_hook_on_gpu_identity_equals_none_and_failure_changes_nothing(void) {
  tens t;
  side x, y;
  amp_scaler *sx = NULL, *sy = NULL;
  amp_scaler_config sc = scfg(1024.0f, 2000);
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 1.0f);
  hook_log h;
  memset(&h, 0, sizeof h);
  standard_tens(&t);
  OK(amp_scaler_create(&sx, gpu, &sc)); OK(amp_scaler_create(&sy, gpu, &sc));
  OK(side_make(&x, &t, gpu, &oc)); OK(side_make(&y, &t, gpu, &oc));
  OK(amp_scaler_set_allreduce(sy, test_hook, &h));
  for (int step = 0; step < 3; step++) {
    tens_grads(&t, 1024.0f, -1, 0); side_push(&x, &t); side_push(&y, &t);
    OK(amp_scaler_step(sx, x.o)); OK(amp_scaler_step(sy, y.o));
    EXPECT(amp__f32_bits(amp_optimizer_grad_norm(x.o)) == amp__f32_bits(amp_optimizer_grad_norm(y.o)) &&
           amp__f32_bits((float)sqrt(h.seen[1])) == amp__f32_bits(amp_optimizer_grad_norm(y.o)) && h.seen[0] == 0.0,
           "step %d: norm without hook %.9g, with %.9g, sqrt of the hook's sum %.9g, found %g", step,
           (double)amp_optimizer_grad_norm(x.o), (double)amp_optimizer_grad_norm(y.o), sqrt(h.seen[1]), h.seen[0]);
    OK(amp_scaler_update(sx)); OK(amp_scaler_update(sy));
  }
  EXPECT(h.calls == 3 && h.wrong == 0, "hook called %d times (want 3), %d with a wrong buffer, count or stream", h.calls, h.wrong);
  {
    blob bx = snapshot(&x, &t), by = snapshot(&y, &t);
    EXPECT(blob_same(&bx, &by), "an identity hook changed the result");
    free(bx.p); free(by.p);
  }
  for (int mode = 1; mode <= 2; mode++) {   /* a failing hook: the step fails and nothing changes */
    blob b0, b1;
    float scale = amp_scaler_get_scale(sy);
    amp_status st;
    h.mode = mode;
    tens_grads(&t, 1024.0f, -1, 0); side_push(&y, &t);
    b0 = snapshot(&y, &t);
    st = amp_scaler_step(sy, y.o);
    EXPECT(st == (mode == 1 ? AMP_ERR_IO : AMP_ERR_DEVICE) && strstr(amp_last_error(), "amp_scaler_step") && strstr(amp_last_error(), "allreduce hook"),
           "hook mode %d: step gave %s '%s'", mode, amp_status_string(st), amp_last_error());
    EXPECT(amp_scaler_update(sy) == AMP_ERR_STATE, "update after a failed step: %s, want AMP_ERR_STATE (nothing recorded)", amp_last_error());
    b1 = snapshot(&y, &t);
    EXPECT(blob_same(&b0, &b1) && amp_scaler_get_scale(sy) == scale, "hook mode %d: the failed step changed the state (scale %g -> %g)", mode,
           (double)scale, (double)amp_scaler_get_scale(sy));
    free(b0.p); free(b1.p);
  }
  { /* another rank saw inf/NaN: this one skips too and backs off */
    blob b0, b1;
    float scale = amp_scaler_get_scale(sy);
    h.mode = 3;
    tens_grads(&t, 1024.0f, -1, 0); side_push(&y, &t);
    b0 = snapshot(&y, &t);
    OK(amp_scaler_step(sy, y.o)); OK(amp_scaler_update(sy));
    b1 = snapshot(&y, &t);
    EXPECT(blob_same(&b0, &b1) && amp_scaler_last_skipped(sy) == 1 && amp_scaler_get_scale(sy) == scale * 0.5f,
           "an overflow on another rank: changed %d, last_skipped %d, scale %g -> %g", !blob_same(&b0, &b1), amp_scaler_last_skipped(sy),
           (double)scale, (double)amp_scaler_get_scale(sy));
    free(b0.p); free(b1.p);
  }
  side_free(&x, &t); side_free(&y, &t);
  amp_scaler_destroy(sx); amp_scaler_destroy(sy);
  tens_free(&t);
}

/* ---- GPU: checkpoints ------------------------------------------------------------------------- */


static void checkpoint_moves_cpu_to_gpu_and_back_bit_exact(void) {
  const char *p1 = t_own_path("cuda_amp_ckpt1.bin"), *p2 = t_own_path("cuda_amp_ckpt2.bin");
  tens t;
  side c, g, c2;
  amp_scaler *cs = NULL, *gs = NULL, *cs2 = NULL;
  amp_scaler_config sc = scfg(2048.0f, 3);
  amp_optim_config oc = ocfg(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 1.0f);
  unsigned char *f1, *f2;
  size_t l1, l2;
  standard_tens(&t);
  OK(amp_scaler_create(&cs, amp_cpu(), &sc)); OK(amp_scaler_create(&gs, gpu, &sc)); OK(amp_scaler_create(&cs2, amp_cpu(), &sc));
  OK(side_make(&c, &t, amp_cpu(), &oc)); OK(side_make(&g, &t, gpu, &oc)); OK(side_make(&c2, &t, amp_cpu(), &oc));
  for (int step = 0; step < 5; step++) {   /* a CPU history with one overflow */
    tens_grads(&t, amp_scaler_get_scale(cs), step == 2 ? 0 : -1, INFINITY); side_push(&c, &t);
    OK(amp_scaler_step(cs, c.o)); OK(amp_scaler_update(cs));
  }
  OK(amp_optimizer_set_lr(c.o, 3e-3f));
  OK(amp_checkpoint_save(p1, c.o, cs));
  OK(amp_checkpoint_load(p1, g.o, gs));
  {
    blob bc = snapshot(&c, &t), bg = snapshot(&g, &t);
    amp_scale_state a, b;
    EXPECT(blob_same(&bc, &bg), "CPU -> GPU: the device masters, moments, model copies or step count differ from the CPU's");
    OK(amp_scaler_get_state(cs, &a, NULL)); OK(amp_scaler_get_state(gs, &b, NULL));
    EXPECT(memcmp(&a, &b, sizeof a) == 0 && amp_scaler_skipped_steps(gs) == 1 && amp_scaler_last_skipped(gs) == amp_scaler_last_skipped(cs),
           "CPU -> GPU scaler: scale %g / %g, tracker %d / %d, skipped %ld", (double)a.scale, (double)b.scale, a.tracker, b.tracker,
           amp_scaler_skipped_steps(gs));
    free(bc.p); free(bg.p);
  }
  OK(amp_checkpoint_save(p2, g.o, gs));
  f1 = t_read_file(p1, &l1); f2 = t_read_file(p2, &l2);
  EXPECT(f1 && f2 && l1 == l2 && memcmp(f1, f2, l1) == 0, "the GPU's checkpoint (%zu bytes) is not the CPU's (%zu bytes) byte for byte", l2, l1);
  free(f1); free(f2);
  OK(amp_checkpoint_load(p2, c2.o, cs2));
  {
    blob bc = snapshot(&c, &t), b2 = snapshot(&c2, &t);
    EXPECT(blob_same(&bc, &b2), "CPU -> GPU -> CPU: the state differs from the original");
    free(bc.p); free(b2.p);
  }
  /* both go on the same way: one more step each */
  tens_grads(&t, amp_scaler_get_scale(cs), -1, 0); side_push(&c, &t); side_push(&g, &t);
  OK(amp_scaler_step(cs, c.o)); OK(amp_scaler_update(cs));
  OK(amp_scaler_step(gs, g.o)); OK(amp_scaler_update(gs));
  compare_sides("after a restored step", &c, &g, &t, 1);
  remove(p1); remove(p2);
  side_free(&c, &t); side_free(&g, &t); side_free(&c2, &t);
  amp_scaler_destroy(cs); amp_scaler_destroy(gs); amp_scaler_destroy(cs2);
  tens_free(&t);
}

/* ---- GPU: bad input --------------------------------------------------------------------------- */

static void never_called(void *user, float *master, const float *grad, size_t n, size_t index, long step) {
  (void)user; (void)master; (void)grad; (void)n; (void)index; (void)step;
}

static void bad_input_on_gpu_is_refused(void) {
  amp_scaler *gs = NULL, *cs = NULL;
  amp_optimizer *o = NULL, *e = NULL, *cu = NULL;
  amp_optim_config custom = ocfg(AMP_CUSTOM, 1e-3f, 0, 0, 0, 0, 0);
  char cpu_msg[512];
  void *w = dmalloc(64), *g = dmalloc(64), *w2 = dmalloc(64), *g2 = dmalloc(64);
  amp_status st;
  OK(amp_scaler_create(&gs, gpu, NULL)); OK(amp_scaler_create(&cs, amp_cpu(), NULL));
  OK(amp_optimizer_create(&o, gpu, NULL)); OK(amp_optimizer_create(&e, gpu, NULL));
  {
    uint16_t z[32];
    memset(z, 0, sizeof z); up(w, z, 64); up(g, z, 64); up(w2, z, 64); up(g2, z, 64);
  }
  custom.custom_step = never_called;
  st = amp_optimizer_create(&cu, gpu, &custom);
  EXPECT(st == AMP_ERR_UNSUPPORTED && cu == NULL && strstr(amp_last_error(), "AMP_CUSTOM"), "AMP_CUSTOM on CUDA: %s '%s'",
         amp_status_string(st), amp_last_error());
  {   /* fp8 moments: kept on CUDA as on the CPU, so the add is taken (fp8_moments_on_gpu_are_the_cpus_bits
         checks their bits) */
    amp_optim_config ac = amp_optimizer_defaults(AMP_ADAMW);
    amp_optimizer *ad = NULL;
    amp_tensor_desc t;
    OK(amp_optimizer_create(&ad, gpu, &ac));
    memset(&t, 0, sizeof t);
    t.weights = w; t.dtype = AMP_F16; t.grads = g; t.grad_dtype = AMP_F16; t.n = 32; t.moments = AMP_MOMENTS_FP8;
    st = amp_optimizer_add_tensor(ad, &t);
    EXPECT(st == AMP_OK && amp_optimizer_count(ad) == 1,
           "fp8 moments on CUDA: %s '%s', %zu tensors", amp_status_string(st), amp_last_error(), amp_optimizer_count(ad));
    amp_optimizer_destroy(ad);
  }
  OK(amp_optimizer_add(o, AMP_F16, w, g, 32));
  st = amp_scaler_step(cs, o);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "different devices"), "CPU scaler, CUDA optimizer: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_step(NULL, o) == AMP_ERR_ARG && amp_scaler_step(gs, NULL) == AMP_ERR_ARG, "NULL scaler or optimizer accepted");
  st = amp_scaler_update(gs);
  snprintf(cpu_msg, sizeof cpu_msg, "%s", amp_last_error());
  EXPECT(st == AMP_ERR_STATE && amp_scaler_update(cs) == AMP_ERR_STATE && strcmp(cpu_msg, amp_last_error()) == 0,
         "update with nothing recorded: gpu %s '%s', cpu '%s'", amp_status_string(st), cpu_msg, amp_last_error());
  st = amp_scaler_step(gs, e);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "no tensors"), "a step with no tensor on CUDA: %s '%s'", amp_status_string(st), amp_last_error());
  OK(amp_scaler_unscale(gs, o));
  st = amp_scaler_unscale(gs, o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "already been called"), "second unscale: %s '%s'", amp_status_string(st), amp_last_error());
  OK(amp_scaler_step(gs, o));
  st = amp_scaler_step(gs, o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "step() has already"), "second step: %s '%s'", amp_status_string(st), amp_last_error());
  OK(amp_scaler_update(gs));
  st = amp_optimizer_add(o, AMP_F16, w2, g2, 32);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "before the first step") && amp_optimizer_count(o) == 1,
         "add after the first step: %s '%s', %zu tensors", amp_status_string(st), amp_last_error(), amp_optimizer_count(o));
  EXPECT(amp_optimizer_master(o, 1, NULL) == NULL && amp_optimizer_master(o, 0, NULL) != NULL, "master(1) of 1 tensor, or master(0) is NULL");
  EXPECT(amp_optimizer_step_count(o) == 1, "step count %ld after one clean step, want 1", amp_optimizer_step_count(o));
  EXPECT(amp_optimizer_set_lr(o, -1.0f) == AMP_ERR_ARG, "set_lr(-1) accepted");
  amp_optimizer_destroy(o); amp_optimizer_destroy(e);
  amp_scaler_destroy(gs); amp_scaler_destroy(cs);
  amp__cu_free(gpu->cuda, w); amp__cu_free(gpu->cuda, g); amp__cu_free(gpu->cuda, w2); amp__cu_free(gpu->cuda, g2);
}

/* Gradient stats (amp_optim_config.stats) written by the unscale kernel: the CPU's exactly (counts
   and amax), with planted zeros, subnormals of each grad type and inf/NaN in a chosen tensor, both
   through a scaler and through amp_optimizer_step; the overflowed tensor named alike; and a GPU
   optimizer with stats off steps bit for bit as one with stats on. */
static void plant_stats(tens *t, int bad_tensor, int bad_kind) {
  for (size_t i = 0; i < t->k; i++) {
    size_t es = amp_dtype_size(t->gt[i]);
    unsigned char *g = (unsigned char *)t->g[i];
    uint32_t sub = 0x00000005u, negz = es == 4 ? 0x80000000u : 0x8000u;
    if (t->n[i] < 5) continue;
    memset(g + 1 * es, 0, es);
    memcpy(g + 2 * es, &negz, es);            /* little-endian: the low bytes are the 16-bit value */
    memcpy(g + 3 * es, &sub, es);
    memcpy(g + (t->n[i] - 1) * es, &sub, es);
  }
  if (bad_tensor >= 0) amp__store(t->g[bad_tensor], t->gt[bad_tensor], t->n[bad_tensor] / 3,
                                  bad_kind == 0 ? INFINITY : bad_kind == 1 ? NAN : -INFINITY);
}
static char ov_log[4][256];
static int ov_n;
static void ov_catch(void *user, const char *msg) {
  (void)user;
  if (ov_n < 4) snprintf(ov_log[ov_n], sizeof ov_log[0], "%s", msg);
  ov_n++;
}
/* (and the overflow log line: the CPU's at its unscale, the GPU's at the host's first read after
   the overflow, the same text, once each) */
static void gradient_stats_on_gpu_equal_the_cpus(void) {
  tens t;
  side c, g, goff;
  amp_scaler *cs = NULL, *gs = NULL, *goffs = NULL;
  amp_optim_config oc = amp_optimizer_defaults(AMP_ADAM), off;
  amp_scaler_config sc = scfg(1024.0f, 3);
  int steps = t_quick() ? 6 : 10;
  oc.lr = 1e-2f; oc.max_grad_norm = 1.0f;
  off = oc;
  oc.stats = 1;
  standard_tens(&t);
  OK(side_make(&c, &t, amp_cpu(), &oc));
  OK(side_make(&g, &t, gpu, &oc));
  OK(side_make(&goff, &t, gpu, &off));
  OK(amp_scaler_create(&cs, amp_cpu(), &sc));
  OK(amp_scaler_create(&gs, gpu, &sc));
  OK(amp_scaler_create(&goffs, gpu, &sc));
  for (int step = 0; step < steps && !t__cur; step++) {
    int where = step % 3 == 1 ? step % 5 : -1;
    long oc_cpu, oc_gpu;
    blob a, b;
    tens_grads(&t, amp_scaler_get_scale(cs) * 0.01f, -1, 0.0f);
    plant_stats(&t, where, step % 3);
    side_push(&c, &t); side_push(&g, &t); side_push(&goff, &t);
    ov_n = 0;
    amp_set_log(ov_catch, NULL);
    OK(amp_scaler_step(cs, c.o)); OK(amp_scaler_step(gs, g.o)); OK(amp_scaler_step(goffs, goff.o));
    for (size_t i = 0; i < t.k; i++) {
      amp_tensor_stats x, y;
      OK(amp_optimizer_stats(c.o, i, &x));
      OK(amp_optimizer_stats(g.o, i, &y));
      EXPECT(memcmp(&x.amax, &y.amax, 4) == 0 && x.n_nonfinite == y.n_nonfinite && x.n_zero == y.n_zero &&
             x.n_subnormal == y.n_subnormal && (t.n[i] < 5 || (x.n_zero >= 2 && x.n_subnormal >= 2)),
             "step %d tensor %zu (%s grads, n %zu): cpu amax %a inf/NaN %zu zero %zu subnormal %zu, gpu %a %zu %zu %zu", step, i,
             amp__dtype_name(t.gt[i]), t.n[i], (double)x.amax, x.n_nonfinite, x.n_zero, x.n_subnormal, (double)y.amax,
             y.n_nonfinite, y.n_zero, y.n_subnormal);
    }
    amp_set_log(NULL, NULL);
    EXPECT(where >= 0 ? ov_n == 2 && strcmp(ov_log[0], ov_log[1]) == 0 && strstr(ov_log[0], "overflow in tensor ") : ov_n == 0,
           "step %d (inf/NaN in tensor %d): %d lines: cpu '%s' gpu '%s'", step, where, ov_n, ov_n > 0 ? ov_log[0] : "",
           ov_n > 1 ? ov_log[1] : "");
    oc_cpu = amp_optimizer_overflow_tensor(c.o); oc_gpu = amp_optimizer_overflow_tensor(g.o);
    EXPECT(oc_cpu == where && oc_gpu == where, "step %d: inf/NaN planted in tensor %d: cpu names %ld, gpu %ld", step, where, oc_cpu, oc_gpu);
    OK(amp_scaler_update(cs)); OK(amp_scaler_update(gs)); OK(amp_scaler_update(goffs));
    a = snapshot(&g, &t); b = snapshot(&goff, &t);
    EXPECT(blob_same(&a, &b) && amp_scaler_get_scale(gs) == amp_scaler_get_scale(goffs),
           "step %d: the GPU step with stats on differs from the one with stats off", step);
    free(a.p); free(b.p);
  }
  amp_scaler_destroy(cs); amp_scaler_destroy(gs); amp_scaler_destroy(goffs);
  side_free(&c, &t); side_free(&g, &t); side_free(&goff, &t);
  /* amp_optimizer_step: inverse scale 1 */
  OK(side_make(&c, &t, amp_cpu(), &oc));
  OK(side_make(&g, &t, gpu, &oc));
  for (int step = 0; step < 3 && !t__cur; step++) {
    tens_grads(&t, 0.5f, -1, 0.0f);
    plant_stats(&t, step == 1 ? 4 : -1, 1);
    side_push(&c, &t); side_push(&g, &t);
    OK(amp_optimizer_step(c.o)); OK(amp_optimizer_step(g.o));
    for (size_t i = 0; i < t.k; i++) {
      amp_tensor_stats x, y;
      OK(amp_optimizer_stats(c.o, i, &x));
      OK(amp_optimizer_stats(g.o, i, &y));
      EXPECT(memcmp(&x.amax, &y.amax, 4) == 0 && x.n_nonfinite == y.n_nonfinite && x.n_zero == y.n_zero &&
             x.n_subnormal == y.n_subnormal, "amp_optimizer_step %d tensor %zu: cpu %a %zu %zu %zu, gpu %a %zu %zu %zu", step, i,
             (double)x.amax, x.n_nonfinite, x.n_zero, x.n_subnormal, (double)y.amax, y.n_nonfinite, y.n_zero, y.n_subnormal);
    }
    EXPECT(amp_optimizer_overflow_tensor(g.o) == (step == 1 ? 4 : -1), "amp_optimizer_step %d: gpu names %ld", step,
           amp_optimizer_overflow_tensor(g.o));
  }
  side_free(&c, &t); side_free(&g, &t);
  tens_free(&t);
}

/* spike_norm on the GPU: a spike step (the grads 1000 times larger, finite) leaves the device state
   bit for bit as it was and the scale as the rule of a clean iteration sets it (the CPU's scaler
   beside it), counted in amp_optimizer_spike_skips as on the CPU; through a scaler and through
   amp_optimizer_step (the decision stays on the device: no read between the launches). */
static void spike_skips_on_gpu_change_nothing_and_keep_the_scale(void) {
  tens t;
  side c, g;
  amp_optim_config oc = amp_optimizer_defaults(AMP_ADAMW);
  amp_scaler_config sc = scfg(1024.0f, 2);
  oc.lr = 1e-2f; oc.spike_norm = 50.0f;
  standard_tens(&t);
  for (int via = 0; via < 2 && !t__cur; via++) {
    amp_scaler *cs = NULL, *gs = NULL;
    int spikes = 0;
    OK(side_make(&c, &t, amp_cpu(), &oc));
    OK(side_make(&g, &t, gpu, &oc));
    if (via == 0) { OK(amp_scaler_create(&cs, amp_cpu(), &sc)); OK(amp_scaler_create(&gs, gpu, &sc)); }
    for (int step = 0; step < 8 && !t__cur; step++) {
      int spike = step % 3 == 1;
      float s = via == 0 ? amp_scaler_get_scale(cs) : 1.0f;
      blob before, after;
      tens_grads(&t, s * 0.01f * (spike ? 1000.0f : 1.0f), -1, 0.0f);
      if (spike && via == 0) for (size_t i = 0; i < t.k; i++) if (t.gt[i] == AMP_F16) memset(t.g[i], 0, t.n[i] * 2);   /* f16: no overflow */
      side_push(&c, &t); side_push(&g, &t);
      before = snapshot(&g, &t);
      if (via == 0) { OK(amp_scaler_step(cs, c.o)); OK(amp_scaler_step(gs, g.o)); OK(amp_scaler_update(cs)); OK(amp_scaler_update(gs)); }
      else { OK(amp_optimizer_step(c.o)); OK(amp_optimizer_step(g.o)); }
      after = snapshot(&g, &t);
      spikes += spike;
      if (spike) EXPECT(blob_same(&before, &after), "via %d step %d: the spike-skipped step changed the device state", via, step);
      EXPECT(amp_optimizer_spike_skips(g.o) == spikes && amp_optimizer_spike_skips(c.o) == spikes &&
             amp_optimizer_step_count(g.o) == step + 1 - spikes,
             "via %d step %d: spike_skips gpu %ld cpu %ld (want %d), steps %ld", via, step, amp_optimizer_spike_skips(g.o),
             amp_optimizer_spike_skips(c.o), spikes, amp_optimizer_step_count(g.o));
      if (via == 0)
        EXPECT(amp_scaler_get_scale(gs) == amp_scaler_get_scale(cs) && amp_scaler_skipped_steps(gs) == 0,
               "step %d: gpu scale %g, cpu %g, overflows %ld", step, (double)amp_scaler_get_scale(gs), (double)amp_scaler_get_scale(cs),
               amp_scaler_skipped_steps(gs));
      free(before.p); free(after.p);
    }
    compare_sides("spike_norm", &c, &g, &t, 8 - spikes);
    amp_scaler_destroy(cs); amp_scaler_destroy(gs);
    side_free(&c, &t); side_free(&g, &t);
  }
  tens_free(&t);
}

/* AMP_MASTER_SPLIT and AMP_MASTER_NONE on the GPU. One optimizer holds the same bf16 weights three
   times: with an fp32 master (A), split (B) and in place (C), each with its own copy of the same
   grads. B's decoded master must equal A's master bit for bit after every step (the kernel runs the
   same element functions on both; skipped steps included), B's model copy the split rule's nearest
   bf16 of it; C must follow A's mean (unbiased stochastic rounding). A checkpoint of the GPU optimizer loads on the CPU into the same layout exactly. */
static void master_modes_on_gpu(void) {
  enum { N = 3000 };
  amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAMW, AMP_LION};
  for (int k = 0; k < 3; k++) {
    amp_optim_config oc = amp_optimizer_defaults(kinds[k]);
    amp_optimizer *o = NULL, *oc_cpu = NULL;
    amp_bf16 *hw = (amp_bf16 *)xmalloc(N * 2), *hb = (amp_bf16 *)xmalloc(N * 2), *hc = (amp_bf16 *)xmalloc(N * 2);
    amp_bf16 *cw[3];
    uint16_t *hr = (uint16_t *)xmalloc(N * 2);
    float *hm = (float *)xmalloc(N * 4), *hg = (float *)xmalloc(N * 4), *seed = (float *)xmalloc(N * 4);
    float *cg = (float *)xmalloc(3 * N * 4), *cm = (float *)xmalloc(N * 4);
    void *dw[3], *dg[3], *dseed = dmalloc(N * 4);
    const char *kn = amp__kind_name(kinds[k]);
    amp_tensor_desc t;
    double mean_a = 0, mean_c = 0;
    int steps = t_quick() ? 30 : 200, bad = 0;
    oc.lr = 1e-4f; oc.seed = 77;
    if (kinds[k] == AMP_SGD) oc.momentum = 0.9f; else oc.weight_decay = 0.1f;
    for (size_t j = 0; j < N; j++) { seed[j] = 0.9f + 0.05f * srand1(); hw[j] = amp_f32_to_bf16(seed[j]); }
    up(dseed, seed, N * 4);
    for (int i = 0; i < 3; i++) { dw[i] = dmalloc(N * 2); dg[i] = dmalloc(N * 4); up(dw[i], hw, N * 2); }
    OK(amp_optimizer_create(&o, gpu, &oc));
    memset(&t, 0, sizeof t);
    t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.n = N;
    t.weights = dw[0]; t.grads = dg[0]; t.master = dseed; OK(amp_optimizer_add_tensor(o, &t));
    t.weights = dw[1]; t.grads = dg[1]; t.master_mode = AMP_MASTER_SPLIT; OK(amp_optimizer_add_tensor(o, &t));
    t.weights = dw[2]; t.grads = dg[2]; t.master = NULL; t.master_mode = AMP_MASTER_NONE; t.stochastic = 1;
    OK(amp_optimizer_add_tensor(o, &t));
    for (int step = 1; step <= steps && !t__cur; step++) {
      for (size_t j = 0; j < N; j++) hg[j] = 0.25f + 0.5f * (float)(rnd() & 0xffff) / 65536.0f;
      if (step % 37 == 5) { hg[step % N] = NAN; bad++; }
      for (int i = 0; i < 3; i++) up(dg[i], hg, N * 4);
      OK(amp_optimizer_step(o));
      down(hm, amp_optimizer_master(o, 0, NULL), N * 4);
      down(hb, dw[1], N * 2);
      down(hr, amp__cu_optim_rem(o->cu, 1), N * 2);
      for (size_t j = 0; j < N; j++) {
        float y = amp__split_decode(hb[j], hr[j]);
        uint32_t u = amp__f32_bits(hm[j]);
        if (amp__f32_bits(y) != u || hb[j] != (amp_bf16)((u + 0x8000u) >> 16)) {
          EXPECT(0, "%s step %d elem %zu: split master %08x copy %04x, fp32 master %08x", kn, step, j,
                 amp__f32_bits(y), hb[j], u);
          break;
        }
      }
    }
    down(hc, dw[2], N * 2);
    for (size_t j = 0; j < N; j++) { mean_a += hm[j]; mean_c += amp_bf16_to_f32(hc[j]); }
    mean_a /= N; mean_c /= N;
    {
      double sigma = sqrt((double)steps * 0x1p-16 / 4.0 / N);
      printf("  %s: fp32-master mean %.6f, in-place mean %.6f (sigma %.2g), %d skipped\n", kn,
             mean_a, mean_c, sigma, bad);
      EXPECT(fabs(mean_c - mean_a) < 5.0 * sigma, "in-place mean %.7f, fp32 mean %.7f", mean_c, mean_a);
    }
    /* the GPU checkpoint on the CPU: the same layout, host buffers */
    for (int i = 0; i < 3; i++) { cw[i] = (amp_bf16 *)xmalloc(N * 2); memcpy(cw[i], hw, N * 2); }
    OK(amp_optimizer_create(&oc_cpu, amp_cpu(), &oc));
    memset(&t, 0, sizeof t);
    t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.n = N;
    t.weights = cw[0]; t.grads = cg; OK(amp_optimizer_add_tensor(oc_cpu, &t));
    t.weights = cw[1]; t.grads = cg + N; t.master_mode = AMP_MASTER_SPLIT; OK(amp_optimizer_add_tensor(oc_cpu, &t));
    t.weights = cw[2]; t.grads = cg + 2 * N; t.master_mode = AMP_MASTER_NONE; t.stochastic = 1; OK(amp_optimizer_add_tensor(oc_cpu, &t));
    const char *mp = t_own_path("cuda_master_modes.ckpt");
    OK(amp_checkpoint_save(mp, o, NULL));
    OK(amp_checkpoint_load(mp, oc_cpu, NULL));
    remove(mp);
    EXPECT(memcmp(cw[1], hb, N * 2) == 0 && memcmp(oc_cpu->t[1].rem, hr, N * 2) == 0 && memcmp(cw[2], hc, N * 2) == 0,
           "%s: the GPU's split / in-place state loaded on the CPU differs", kn);
    {
      char m2[AMP__MSG] = "";
      EXPECT(amp__be(oc_cpu->dev)->optim_tensor_io(oc_cpu, 1, 0, cm, 0, m2, sizeof m2) == AMP_OK && memcmp(cm, hm, N * 4) == 0,
             "%s: the CPU's decoded split master is not the GPU's fp32 master", kn);
    }
    amp_optimizer_destroy(o); amp_optimizer_destroy(oc_cpu);
    for (int i = 0; i < 3; i++) { amp__cu_free(gpu->cuda, dw[i]); amp__cu_free(gpu->cuda, dg[i]); free(cw[i]); }
    amp__cu_free(gpu->cuda, dseed);
    free(hw); free(hb); free(hc); free(hr); free(hm); free(hg); free(seed); free(cg); free(cm);
  }
}

/* spike_zscore on the GPU against the CPU: 40 steps of grads whose size wanders (up to 12%), four
   planted spikes (the grads 2x: steps 8, 26, 27, 35; step 8 comes before 20 clean steps and must
   not skip). At every step the GPU and the CPU skip alike (spike_skips, step counts), their
   windows hold the same count and slot with norms equal within 1e-6 relative (the GPU's sum of
   squares adds in another order), a skipped step leaves the device state bit for bit and the
   scale follows the CPU's. The window is read by the getters' one read (amp_optimizer_spike_skips
   pulls the block): no read happens between the launches of a step. */
/* The element functions round every operation on the device as on the CPU (the _rn intrinsics), so
   without clipping (no grad norm, whose summation order differs) a step is the same bits on both,
   in every loop of the step kernel: L2 decay, momentum, 70001 elements (past 65,536, an odd tail),
   buffers one element off 16-byte alignment (the one-at-a-time loop), every master mode, and the
   exact stochastic bits of AMP_MASTER_NONE. */
static void every_master_mode_on_gpu_is_the_cpus_bits(void) {
  enum { N = 70001, STEPS = 12 };
  struct { amp_optim_kind kind; float wd, momentum; } cases[4] = {
      {AMP_SGD, 1e-2f, 0.9f}, {AMP_ADAM, 1e-2f, 0.0f}, {AMP_ADAMW, 0.1f, 0.0f}, {AMP_LION, 0.1f, 0.0f}};
  amp_bf16 *w0 = (amp_bf16 *)xmalloc(N * 2), *hw = (amp_bf16 *)xmalloc(N * 2), *cw = (amp_bf16 *)xmalloc((N + 1) * 2);
  float *g = (float *)xmalloc(N * 4), *cg = (float *)xmalloc((N + 1) * 4), *hm = (float *)xmalloc(N * 4);
  for (size_t j = 0; j < N; j++) w0[j] = amp_f32_to_bf16(0.5f * srand1());
  for (int k = 0; k < 4 && !t__cur; k++) {
    for (int mode = AMP_MASTER_F32; mode <= AMP_MASTER_NONE && !t__cur; mode++) {
      amp_optim_config oc = amp_optimizer_defaults(cases[k].kind);
      amp_optimizer *og = NULL, *ocpu = NULL;
      amp_tensor_desc t;
      char *dw = (char *)dmalloc((N + 1) * 2), *dg = (char *)dmalloc((N + 1) * 4);
      oc.lr = 1e-3f; oc.weight_decay = cases[k].wd; oc.momentum = cases[k].momentum; oc.seed = 1234;
      memset(&t, 0, sizeof t);
      t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.n = N; t.master_mode = mode; t.stochastic = mode == AMP_MASTER_NONE;
      up(dw + 2, w0, N * 2);   /* one element in: neither buffer is 16-byte aligned */
      memcpy(cw + 1, w0, N * 2);
      OK(amp_optimizer_create(&og, gpu, &oc));
      OK(amp_optimizer_create(&ocpu, amp_cpu(), &oc));
      t.weights = dw + 2; t.grads = dg + 4; OK(amp_optimizer_add_tensor(og, &t));
      t.weights = cw + 1; t.grads = cg + 1; OK(amp_optimizer_add_tensor(ocpu, &t));
      for (int step = 0; step < STEPS; step++) {
        for (size_t j = 0; j < N; j++) g[j] = 1e-2f * srand1();
        up(dg + 4, g, N * 4);
        memcpy(cg + 1, g, N * 4);
        OK(amp_optimizer_step(og));
        OK(amp_optimizer_step(ocpu));
      }
      down(hw, dw + 2, N * 2);
      for (size_t j = 0; j < N; j++)
        if (hw[j] != cw[1 + j]) {
          EXPECT(0, "%s, master mode %d: element %zu of the model copy: GPU %04x, CPU %04x", amp__kind_name(cases[k].kind),
                 mode, j, hw[j], cw[1 + j]);
          break;
        }
      if (mode == AMP_MASTER_F32) {
        const float *cm = amp_optimizer_master(ocpu, 0, NULL);
        down(hm, amp_optimizer_master(og, 0, NULL), N * 4);
        for (size_t j = 0; j < N; j++)
          if (amp__f32_bits(hm[j]) != amp__f32_bits(cm[j])) {
            EXPECT(0, "%s: element %zu of the master: GPU %a, CPU %a", amp__kind_name(cases[k].kind), j, (double)hm[j],
                   (double)cm[j]);
            break;
          }
      }
      amp_optimizer_destroy(og); amp_optimizer_destroy(ocpu);
      amp__cu_free(gpu->cuda, dw); amp__cu_free(gpu->cuda, dg);
    }
  }
  free(w0); free(hw); free(cw); free(g); free(cg); free(hm);
}

/* AMP_MOMENTS_BF16 (and, below, AMP_MOMENTS_8BIT) on the GPU against the CPU, bit for bit: each kind, the master modes (F32 with
   its bf16 copy and moments rounded to nearest even, F32 with both rounded stochastically, SPLIT,
   NONE), the step kernel's vector loop (aligned buffers) and its one-at-a-time loop (one element
   off), 70001 elements. The device's moment words (moved as kept by the checkpoint's tensor io)
   equal the CPU's after every step, a step skipped for a NaN grad leaves them as they were, and
   a checkpoint moves between the GPU and the CPU both ways. Without clipping: the same bits. */
/* 1 when the GPU's state of tensor 0 (model copy at dw, master, remainders, nm moments as kept) is the CPU's */
static int moments_same(const char *what, amp_optimizer *og, amp_optimizer *oc, const void *dw, const amp_bf16 *cw,
                      size_t n, int mode, int nm) {
  amp_bf16 *h = (amp_bf16 *)xmalloc(n * 2 + 4 * (n / AMP__Q8_BLOCK + 1));   /* the largest moment array */
  float *hm = (float *)xmalloc(n * 4);
  char m2[AMP__MSG] = "";
  int same = 1;
  down(h, dw, n * 2);
  for (size_t j = 0; j < n && same; j++)
    if (h[j] != cw[j]) { EXPECT(0, "%s: element %zu of the model copy: GPU %04x, CPU %04x", what, j, h[j], cw[j]); same = 0; }
  if (same && mode == AMP_MASTER_F32) {
    const float *cm = amp_optimizer_master(oc, 0, NULL);
    down(hm, amp_optimizer_master(og, 0, NULL), n * 4);
    for (size_t j = 0; j < n && same; j++)
      if (amp__f32_bits(hm[j]) != amp__f32_bits(cm[j])) {
        EXPECT(0, "%s: element %zu of the master: GPU %a, CPU %a", what, j, (double)hm[j], (double)cm[j]);
        same = 0;
      }
  }
  if (same && mode == AMP_MASTER_SPLIT) {
    down(h, amp__cu_optim_rem(og->cu, 0), n * 2);
    for (size_t j = 0; j < n && same; j++)
      if (h[j] != oc->t[0].rem[j]) {
        EXPECT(0, "%s: element %zu of the remainders: GPU %04x, CPU %04x", what, j, h[j], oc->t[0].rem[j]);
        same = 0;
      }
  }
  for (int k = 1; k <= nm && same; k++) {
    const unsigned char *q = k == 1 ? oc->t[0].mq : oc->t[0].vq, *hb = (const unsigned char *)h;
    amp_status st = amp__be(og->dev)->optim_tensor_io(og, 0, k, (float *)(void *)h, 0, m2, sizeof m2);
    size_t bytes = amp__moment_bytes(oc->t[0].moments, n);
    if (st != AMP_OK) { EXPECT(0, "%s: moment %d read: %s", what, k, m2); same = 0; break; }
    for (size_t j = 0; j < bytes && same; j++)
      if (hb[j] != q[j]) { EXPECT(0, "%s: byte %zu of moment %d: GPU %02x, CPU %02x", what, j, k, hb[j], q[j]); same = 0; }
  }
  free(h); free(hm);
  return same;
}
static void moments_on_gpu_are_the_cpus_bits(int moments) {
  enum { N = 70001, STEPS = 10 };
  struct { amp_optim_kind kind; float wd, momentum; } cases[4] = {
      {AMP_SGD, 1e-2f, 0.9f}, {AMP_ADAM, 1e-2f, 0.0f}, {AMP_ADAMW, 0.1f, 0.0f}, {AMP_LION, 0.1f, 0.0f}};
  struct { int mode, sr; } modes[4] = {{AMP_MASTER_F32, 0}, {AMP_MASTER_F32, 1}, {AMP_MASTER_SPLIT, 0}, {AMP_MASTER_NONE, 1}};
  const char *ck = t_own_path("cuda_moments.ckpt");
  const size_t mbytes = amp__moment_bytes(moments, N);
  amp_bf16 *w0 = (amp_bf16 *)xmalloc(N * 2), *cw = (amp_bf16 *)xmalloc((N + 1) * 2);
  unsigned char *before = (unsigned char *)xmalloc(mbytes + 4), *after = (unsigned char *)xmalloc(mbytes + 4);
  float *g = (float *)xmalloc(N * 4), *cg = (float *)xmalloc((N + 1) * 4);
  for (size_t j = 0; j < N; j++) w0[j] = amp_f32_to_bf16(0.5f * srand1());
  for (int off = 0; off < 2 && !t__cur; off++)
    for (int k = 0; k < 4 && !t__cur; k++)
      for (int md = 0; md < 4 && !t__cur; md++) {
        amp_optim_config oc = amp_optimizer_defaults(cases[k].kind);
        amp_optimizer *og = NULL, *ocpu = NULL;
        amp_tensor_desc t;
        char what[96], m2[AMP__MSG] = "";
        char *dw = (char *)dmalloc((N + 1) * 2), *dg = (char *)dmalloc((N + 1) * 4);
        int nm;
        oc.lr = 1e-3f; oc.weight_decay = cases[k].wd; oc.momentum = cases[k].momentum; oc.seed = 77;
        nm = amp__o_moments(&oc);
        snprintf(what, sizeof what, "%s, moments %d, master mode %d, stochastic %d, %s", amp__kind_name(cases[k].kind),
                 moments, modes[md].mode, modes[md].sr, off ? "one element off" : "aligned");
        memset(&t, 0, sizeof t);
        t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.n = N; t.master_mode = modes[md].mode;
        t.stochastic = modes[md].sr; t.moments = moments;
        up(dw + 2 * off, w0, N * 2);
        memcpy(cw + off, w0, N * 2);
        OK(amp_optimizer_create(&og, gpu, &oc));
        OK(amp_optimizer_create(&ocpu, amp_cpu(), &oc));
        t.weights = dw + 2 * off; t.grads = dg + 4 * off; OK(amp_optimizer_add_tensor(og, &t));
        t.weights = cw + off; t.grads = cg + off; OK(amp_optimizer_add_tensor(ocpu, &t));
        for (int step = 0; step < STEPS && !t__cur; step++) {
          for (size_t j = 0; j < N; j++) g[j] = 1e-2f * srand1();
          if (step == 5) {   /* skipped: the moment words stay as they were */
            g[123] = (float)NAN;
            EXPECT(amp__be(og->dev)->optim_tensor_io(og, 0, nm, (float *)(void *)before, 0, m2, sizeof m2) == AMP_OK,
                   "%s", m2);
          }
          up(dg + 4 * off, g, N * 4);
          memcpy(cg + off, g, N * 4);
          OK(amp_optimizer_step(og));
          OK(amp_optimizer_step(ocpu));
          if (step == 5) {
            EXPECT(amp__be(og->dev)->optim_tensor_io(og, 0, nm, (float *)(void *)after, 0, m2, sizeof m2) == AMP_OK &&
                   memcmp(before, after, mbytes) == 0 && amp_optimizer_step_count(og) == 5,
                   "%s: the skipped step changed moment %d's bytes (steps %ld)", what, nm, amp_optimizer_step_count(og));
          }
          if (!moments_same(what, og, ocpu, dw + 2 * off, cw + off, N, modes[md].mode, nm))
            EXPECT(0, "%s: differs after step %d", what, step);
        }
        if (off == 0 && !t__cur) {   /* the GPU one step ahead, saved, loaded on the CPU; then the other way */
          for (size_t j = 0; j < N; j++) g[j] = 1e-2f * srand1();
          up(dg, g, N * 4);
          OK(amp_optimizer_step(og));
          OK(amp_checkpoint_save(ck, og, NULL));
          OK(amp_checkpoint_load(ck, ocpu, NULL));
          if (!moments_same(what, og, ocpu, dw, cw, N, modes[md].mode, nm)) EXPECT(0, "%s: the GPU's checkpoint on the CPU", what);
          memcpy(cg, g, N * 4);
          OK(amp_optimizer_step(ocpu));
          OK(amp_checkpoint_save(ck, ocpu, NULL));
          OK(amp_checkpoint_load(ck, og, NULL));
          if (!moments_same(what, og, ocpu, dw, cw, N, modes[md].mode, nm)) EXPECT(0, "%s: the CPU's checkpoint on the GPU", what);
          OK(amp_optimizer_step(og));
          OK(amp_optimizer_step(ocpu));
          if (!moments_same(what, og, ocpu, dw, cw, N, modes[md].mode, nm)) EXPECT(0, "%s: the step after the loads", what);
          remove(ck);
        }
        amp_optimizer_destroy(og); amp_optimizer_destroy(ocpu);
        amp__cu_free(gpu->cuda, dw); amp__cu_free(gpu->cuda, dg);
      }
  free(w0); free(cw); free(before); free(after); free(g); free(cg);
}

static void bf16_moments_on_gpu_are_the_cpus_bits(void) { moments_on_gpu_are_the_cpus_bits(AMP_MOMENTS_BF16); }
/* The same for AMP_MOMENTS_8BIT: the step kernel's blocks of 256 (one element a thread, the block's
   absmax reduced across the threads, each code by bisection) against the CPU's vector encode. */
static void eight_bit_moments_on_gpu_are_the_cpus_bits(void) { moments_on_gpu_are_the_cpus_bits(AMP_MOMENTS_8BIT); }
/* And AMP_MOMENTS_FP8: the step's first launch gathers each array's new amax by atomicMax, the step
   encodes with its scale and the last block writes the scale_inv. */
static void fp8_moments_on_gpu_are_the_cpus_bits(void) { moments_on_gpu_are_the_cpus_bits(AMP_MOMENTS_FP8); }

/* The step kernel's three forms in one optimizer: tensors with f32, bf16, 8-bit and fp8 moments, and
   an 8-bit one under AMP__Q8_MIN elements (kept as f32), stepped together by one step (the fp8
   pass, the 8-bit form, the bf16/fp8 form, then the f32 form, whose last block counts the step):
   every tensor's model copy and moment bytes are the CPU's after each step, a step skipped for a
   NaN grad included, and a captured step holds three launches more than the same optimizer with
   f32 moments alone (the fp8 pass and the two further forms). */
static void mixed_moment_forms_on_gpu_are_the_cpus_bits(void) {
  enum { T = 5, STEPS = 6 };
  static const int mom[T] = {AMP_MOMENTS_F32, AMP_MOMENTS_BF16, AMP_MOMENTS_8BIT, AMP_MOMENTS_FP8, AMP_MOMENTS_8BIT};
  static const size_t len[T] = {5000, 9001, 70001, 4099, 1000};
  amp_optim_config oc = amp_optimizer_defaults(AMP_ADAMW);
  amp_optimizer *og = NULL, *ocpu = NULL, *of = NULL;
  void *dw[T], *dg[T], *fw[T], *fg[T], *graph = NULL;
  amp_bf16 *cw[T], *hw = (amp_bf16 *)xmalloc(70001 * 2);
  float *cg[T];
  unsigned char *a = (unsigned char *)xmalloc(70001 * 4), *b = (unsigned char *)xmalloc(70001 * 4);
  size_t kernels[2] = {0, 0};
  char m2[AMP__MSG] = "";
  oc.lr = 1e-3f; oc.weight_decay = 0.1f; oc.seed = 5;
  OK(amp_optimizer_create(&og, gpu, &oc)); OK(amp_optimizer_create(&ocpu, amp_cpu(), &oc));
  OK(amp_optimizer_create(&of, gpu, &oc));
  for (int i = 0; i < T; i++) {
    amp_tensor_desc t;
    cw[i] = (amp_bf16 *)xmalloc(len[i] * 2); cg[i] = (float *)xmalloc(len[i] * 4);
    dw[i] = dmalloc(len[i] * 2); dg[i] = dmalloc(len[i] * 4); fw[i] = dmalloc(len[i] * 2); fg[i] = dmalloc(len[i] * 4);
    for (size_t j = 0; j < len[i]; j++) cw[i][j] = amp_f32_to_bf16(0.5f * srand1());
    up(dw[i], cw[i], len[i] * 2); up(fw[i], cw[i], len[i] * 2);
    memset(&t, 0, sizeof t);
    t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.n = len[i]; t.moments = mom[i];
    t.weights = dw[i]; t.grads = dg[i]; OK(amp_optimizer_add_tensor(og, &t));
    t.weights = cw[i]; t.grads = cg[i]; OK(amp_optimizer_add_tensor(ocpu, &t));
    t.weights = fw[i]; t.grads = fg[i]; t.moments = AMP_MOMENTS_F32; OK(amp_optimizer_add_tensor(of, &t));
  }
  for (int step = 0; step < STEPS && !t__cur; step++) {
    for (int i = 0; i < T; i++) {
      for (size_t j = 0; j < len[i]; j++) cg[i][j] = 1e-2f * srand1();
      if (step == 3 && i == 2) cg[i][77] = (float)NAN;   /* skipped: nothing moves */
      up(dg[i], cg[i], len[i] * 4); up(fg[i], cg[i], len[i] * 4);
    }
    OK(amp_optimizer_step(og)); OK(amp_optimizer_step(ocpu)); OK(amp_optimizer_step(of));
    EXPECT(amp_optimizer_step_count(og) == (step < 3 ? step + 1 : step), "step %d: GPU step count %ld", step,
           amp_optimizer_step_count(og));
    for (int i = 0; i < T && !t__cur; i++) {
      down(hw, dw[i], len[i] * 2);
      EXPECT(memcmp(hw, cw[i], len[i] * 2) == 0, "step %d, tensor %d (moments %d): the model copy differs from the CPU's",
             step, i, mom[i]);
      for (int k = 1; k <= 2; k++) {
        size_t bytes = amp__moment_bytes(ocpu->t[i].moments, len[i]);
        OK(amp__be(og->dev)->optim_tensor_io(og, (size_t)i, k, (float *)(void *)a, 0, m2, sizeof m2));
        OK(amp__be(ocpu->dev)->optim_tensor_io(ocpu, (size_t)i, k, (float *)(void *)b, 0, m2, sizeof m2));
        EXPECT(memcmp(a, b, bytes) == 0, "step %d, tensor %d (moments %d, kept as %d): moment %d's bytes differ", step,
               i, mom[i], ocpu->t[i].moments, k);
      }
    }
  }
  EXPECT(ocpu->t[4].moments == AMP_MOMENTS_F32, "the 8-bit tensor of 1000 elements keeps moments %d", ocpu->t[4].moments);
  for (int w = 0; w < 2 && !t__cur; w++) {   /* the launches of one captured step, then one replay */
    OK(amp__cu_capture_begin(gpu->cuda, msg, sizeof msg));
    {
      amp_status s1 = amp_optimizer_step(w ? og : of);
      amp_status e = amp__cu_capture_end(gpu->cuda, &graph, &kernels[w], msg, sizeof msg);
      EXPECT(s1 == AMP_OK && e == AMP_OK, "capture: step %s end %s (%s)", amp_status_string(s1), amp_status_string(e), msg);
      if (e != AMP_OK) break;
    }
    OK(amp__cu_graph_launch(gpu->cuda, graph, msg, sizeof msg));
    amp__cu_graph_destroy(graph);
  }
  EXPECT(kernels[0] >= 2 && kernels[1] == kernels[0] + 3, "a captured step: %zu kernels with every form, %zu with f32 moments alone",
         kernels[1], kernels[0]);
  EXPECT(amp_optimizer_step_count(og) == STEPS, "a replayed mixed step: step count %ld, want %d", amp_optimizer_step_count(og), STEPS);
  amp_optimizer_destroy(og); amp_optimizer_destroy(ocpu); amp_optimizer_destroy(of);
  for (int i = 0; i < T; i++) {
    free(cw[i]); free(cg[i]);
    amp__cu_free(gpu->cuda, dw[i]); amp__cu_free(gpu->cuda, dg[i]); amp__cu_free(gpu->cuda, fw[i]); amp__cu_free(gpu->cuda, fg[i]);
  }
  free(hw); free(a); free(b);
}

static void zscore_spikes_on_gpu_equal_the_cpus(void) {
  tens t;
  side c, g;
  amp_optim_config oc = amp_optimizer_defaults(AMP_ADAMW);
  amp_scaler_config sc = scfg(1024.0f, 5);
  oc.lr = 1e-3f; oc.spike_zscore = 3.0f;
  standard_tens(&t);
  for (int via = 0; via < 2 && !t__cur; via++) {
    amp_scaler *cs = NULL, *gs = NULL;
    long skips = 0;
    OK(side_make(&c, &t, amp_cpu(), &oc));
    OK(side_make(&g, &t, gpu, &oc));
    if (via == 0) { OK(amp_scaler_create(&cs, amp_cpu(), &sc)); OK(amp_scaler_create(&gs, gpu, &sc)); }
    for (int step = 0; step < 40 && !t__cur; step++) {
      int planted = step == 8 || step == 26 || step == 27 || step == 35;
      float s = via == 0 ? amp_scaler_get_scale(cs) : 1.0f;
      blob before, after;
      tens_grads(&t, s * 0.01f * (1.0f + 0.02f * (float)(step % 7)) * (planted ? 2.0f : 1.0f), -1, 0.0f);
      side_push(&c, &t); side_push(&g, &t);
      before = snapshot(&g, &t);
      if (via == 0) { OK(amp_scaler_step(cs, c.o)); OK(amp_scaler_step(gs, g.o)); OK(amp_scaler_update(cs)); OK(amp_scaler_update(gs)); }
      else { OK(amp_optimizer_step(c.o)); OK(amp_optimizer_step(g.o)); }
      after = snapshot(&g, &t);
      long gk = amp_optimizer_spike_skips(g.o), ck = amp_optimizer_spike_skips(c.o);
      int skipped = gk > skips;
      EXPECT(gk == ck && amp_optimizer_step_count(g.o) == amp_optimizer_step_count(c.o),
             "via %d step %d: spike_skips gpu %ld cpu %ld, steps gpu %ld cpu %ld", via, step, gk, ck,
             amp_optimizer_step_count(g.o), amp_optimizer_step_count(c.o));
      EXPECT(skipped == (planted && step != 8), "via %d step %d (planted %d): skipped %d", via, step, planted, skipped);
      if (skipped) EXPECT(blob_same(&before, &after), "via %d step %d: the z-score-skipped step changed the device state", via, step);
      skips = gk;
      EXPECT(g.o->spike_win.count == c.o->spike_win.count && g.o->spike_win.next == c.o->spike_win.next,
             "via %d step %d: window count/next gpu %d/%d cpu %d/%d", via, step, (int)g.o->spike_win.count,
             (int)g.o->spike_win.next, (int)c.o->spike_win.count, (int)c.o->spike_win.next);
      for (int i = 0; i < AMP__SPIKE_WINDOW; i++) {
        float a = c.o->spike_win.norm[i], b = g.o->spike_win.norm[i];
        if (!(fabsf(a - b) <= 1e-6f * fabsf(a))) {
          EXPECT(0, "via %d step %d: window slot %d gpu %.9g cpu %.9g", via, step, i, (double)b, (double)a);
          break;
        }
      }
      if (via == 0)
        EXPECT(amp_scaler_get_scale(gs) == amp_scaler_get_scale(cs) && amp_scaler_skipped_steps(gs) == 0,
               "step %d: gpu scale %g, cpu %g, overflows %ld", step, (double)amp_scaler_get_scale(gs), (double)amp_scaler_get_scale(cs),
               amp_scaler_skipped_steps(gs));
      free(before.p); free(after.p);
    }
    EXPECT(skips == 3, "via %d: %ld z-score skips, want 3 (steps 26, 27, 35)", via, skips);
    compare_sides("spike_zscore", &c, &g, &t, 40 - 3);
    amp_scaler_destroy(cs); amp_scaler_destroy(gs);
    side_free(&c, &t); side_free(&g, &t);
  }
  tens_free(&t);
}

static void quiet(void *user, const char *m) { (void)user; (void)m; }   /* the floor message, expected here */

int main(void) {
  amp_status st;
  char why[512];
  amp_set_log(quiet, NULL);
  if (amp__cu_stream_create(0, &gpu_stream, msg, sizeof msg) != AMP_OK) gpu_stream = NULL;
  st = amp_cuda_open(&gpu, 0, gpu_stream);
  snprintf(why, sizeof why, "%s", amp_last_error());
  if (st != AMP_OK) gpu = NULL;
  RUN(cuda_open_without_gpu_is_unsupported);
  RUN(scale_ptr_and_scale_buffer_follow_the_scale);
  if (st == AMP_ERR_UNSUPPORTED) {
    t_no_gpu("GPU tests of the public API on CUDA", why);
    TEST_END();
  }
  if (st != AMP_OK) { printf("FAIL amp_cuda_open: %s\n", why); return 1; }
  RUN(scale_trajectories_equal_the_cpu_for_every_preset);
  RUN(optimizers_on_gpu_match_the_cpu);
  RUN(groups_on_gpu_match_the_cpu);
  RUN(seeded_master_on_gpu_is_bit_for_bit);
  RUN(skipped_step_leaves_device_state_bit_identical);
  RUN(optimizers_sharing_a_scaler_skip_together);
  RUN(stepless_step_on_gpu_matches_the_cpu);
  RUN(allreduce_hook_on_gpu_identity_equals_none_and_failure_changes_nothing);
  RUN(checkpoint_moves_cpu_to_gpu_and_back_bit_exact);
  RUN(bad_input_on_gpu_is_refused);
  RUN(huge_finite_grads_give_a_finite_norm_and_the_cpu_step);
  RUN(every_finite_f16_grad_decodes_to_the_cpu_bits);
  RUN(gradient_stats_on_gpu_equal_the_cpus);
  RUN(spike_skips_on_gpu_change_nothing_and_keep_the_scale);
  RUN(master_modes_on_gpu);
  RUN(every_master_mode_on_gpu_is_the_cpus_bits);
  RUN(bf16_moments_on_gpu_are_the_cpus_bits);
  RUN(eight_bit_moments_on_gpu_are_the_cpus_bits);
  RUN(fp8_moments_on_gpu_are_the_cpus_bits);
  RUN(mixed_moment_forms_on_gpu_are_the_cpus_bits);
  RUN(zscore_spikes_on_gpu_equal_the_cpus);
  if (gpu_stream) {
    RUN(captured_public_step_replays_like_eager);
    RUN(captured_step_replays_with_a_changing_lr);
    RUN(captured_stepless_step_replays_like_eager);
    RUN(public_step_over_500_tensors_is_three_launches);
  } else t_no_gpu("graph tests", "no stream of our own");
  amp_device_close(gpu);
  amp__cu_stream_destroy(gpu_stream);
  TEST_END();
}
