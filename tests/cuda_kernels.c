/* The CUDA scaler/optimizer kernels (amp_kernels.cu), called through their launchers and compared
   with the CPU's AMP_HD math on host copies. Without a GPU only the argument checks run (they
   happen before any CUDA call) and the rest says "skipped".

   How close GPU and CPU must be, and why:
   - the scale rule, casts, the scale multiply and the skip decision: bit for bit (the same integer
     and double arithmetic on both sides);
   - the grad norm: relative 1e-5 (the device adds fp32 per-block partials in its own fixed order,
     the host adds in double);
   - master weights and moments after k steps: |gpu - cpu| <= 4 k FLT_EPSILON (|cpu| + rms), rms the
     tensor's root mean square of that quantity. nvcc contracts a*b + c into one fused multiply-add
     (one rounding instead of two) in amp__sgd_elem / amp__adam_elem; gcc -std=c99 does not. sqrtf
     and '/' are correctly rounded on both sides (nvcc's default -prec-sqrt/-prec-div), and the step
     coefficients come from the same source, so the FMA roundings are the only difference: at most
     a few ulp per step, and the bound allows 4 per step;
   - the model copy: exactly the device master rounded to the model's dtype. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <math.h>

static amp_device *dev;
static void *ST;          /* dev->cuda, NULL without a GPU */
static char msg[512];

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static float urand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; }        /* [0, 1) */
static float srand1(void) { return 2.0f * urand() - 1.0f; }                          /* [-1, 1) */

#define OK(call) do { amp_status s_ = (call); if (s_ != AMP_OK) { EXPECT(0, "%s -> %s: %s", #call, amp_status_string(s_), msg); return; } } while (0)

static void *dmalloc(size_t bytes) {
  void *p = NULL;
  if (amp__cu_malloc(ST, &p, bytes, msg, sizeof msg) != AMP_OK) { printf("  amp__cu_malloc(%zu): %s\n", bytes, msg); exit(1); }
  return p;
}
static void up(void *d, const void *h, size_t bytes) {
  if (amp__cu_copy(ST, d, h, bytes, 0, msg, sizeof msg) != AMP_OK) { printf("  upload: %s\n", msg); exit(1); }
}
static void down(void *h, const void *d, size_t bytes) {
  if (amp__cu_copy(ST, h, d, bytes, 1, msg, sizeof msg) != AMP_OK) { printf("  download: %s\n", msg); exit(1); }
}
static void *xmalloc(size_t bytes) { void *p = malloc(bytes ? bytes : 1); if (!p) { printf("out of memory\n"); exit(1); } return p; }

static amp_scale_params params(float growth, float backoff, int interval, int hyst, int mode, float floor_, float cap, int fixed) {
  amp_scale_params p;
  memset(&p, 0, sizeof p);   /* late_growth too: copied to the device, it must not be stack garbage */
  p.growth = growth; p.backoff = backoff; p.floor = floor_ < FLT_MIN ? FLT_MIN : floor_; p.cap = cap;
  p.interval = interval; p.hysteresis = hyst; p.mode = mode; p.fixed = fixed;
  return p;
}
static amp_scale_state state0(float scale, const amp_scale_params *p) {
  amp_scale_state s;
  s.scale = scale; s.tracker = 0; s.at_floor = 0;
  s.hyst = p->mode == AMP_HYSTERESIS_CONSECUTIVE ? 0 : p->hysteresis;
  return s;
}

/* ---- argument checks: these run with or without a GPU ---------------------------------------- */

static void expect_arg(amp_status s, const char *needle, const char *what) {
  EXPECT(s == AMP_ERR_ARG && strstr(msg, needle), "%s: want AMP_ERR_ARG naming '%s', got %s: '%s'", what, needle, amp_status_string(s), msg);
  msg[0] = 0;
}

static void launchers_reject_bad_arguments(void) {
  {   /* fp8 block scaling: each argument before the device is asked */
    void *p = (void *)(uintptr_t)4096;
    expect_arg(amp__cu_quantize_blocks(ST, 4, AMP_E4M3, 1, 1, p, AMP_F32, 1, p, 1, p, msg, sizeof msg), "kind 4", "block kind 4");
    expect_arg(amp__cu_quantize_blocks(ST, 0, AMP_F16, 1, 1, p, AMP_F32, 1, p, 1, p, msg, sizeof msg), "fp8 1", "block fp8 f16");
    expect_arg(amp__cu_quantize_blocks(ST, 0, AMP_E4M3, 1, 1, p, 9, 1, p, 1, p, msg, sizeof msg), "x_type 9", "block x_type 9");
    expect_arg(amp__cu_quantize_blocks(ST, 2, AMP_E5M2, 2, 8, p, AMP_F32, 7, p, 8, p, msg, sizeof msg), "ldx 7", "block ldx < cols");
    expect_arg(amp__cu_quantize_blocks(ST, 3, AMP_E5M2, 2, 8, p, AMP_F32, 8, NULL, 8, p, msg, sizeof msg), "q is NULL", "block q NULL");
    EXPECT(amp__cu_quantize_blocks(ST, 3, AMP_E5M2, 0, 8, NULL, AMP_F32, 8, NULL, 8, NULL, msg, sizeof msg) == AMP_OK,
           "block rows 0: %s", msg);
  }
  amp__tensor t[2];
  amp_optim_config h;
  void *o = NULL, *fake = (void *)(uintptr_t)4096;
  amp_scale_params pr = params(2, 0.5f, 2000, 1, 0, 0, 0, 0);
  amp_scale_state s0 = state0(65536, &pr);
  memset(&h, 0, sizeof h); h.kind = AMP_ADAMW; h.lr = 1e-3f; h.beta1 = 0.9f; h.beta2 = 0.999f; h.eps = 1e-8f;
  memset(t, 0, sizeof t);   /* group 0, round_to AMP_F32 */
  t[0].g = fake; t[0].w = fake; t[0].n = 10; t[0].wtype = AMP_F16; t[0].gtype = AMP_F16;
  t[1] = t[0];
  expect_arg(amp__cu_optim_create(ST, NULL, t, 2, NULL, NULL, &h, msg, sizeof msg), "optim is NULL", "optim NULL");
  expect_arg(amp__cu_optim_create(ST, &o, NULL, 2, NULL, NULL, &h, msg, sizeof msg), "tensors is NULL", "tensors NULL");
  expect_arg(amp__cu_optim_create(ST, &o, t, 0, NULL, NULL, &h, msg, sizeof msg), "n_tensors 0", "no tensors");
  {   /* a record's fields are validated once, where it is made (amp_optimizer_add_tensor, any device) */
    amp_optimizer *ho = NULL;
    uint16_t hw[10], hg[10];
    amp_status hs;
    if (amp_optimizer_create(&ho, amp_cpu(), &h) != AMP_OK) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    hs = amp_optimizer_add_mixed(ho, AMP_F16, hw, AMP_F16, hg, 0);
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    expect_arg(hs, "n is 0", "n = 0");
    hs = amp_optimizer_add_mixed(ho, (amp_dtype)7, hw, AMP_F16, hg, 10);
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    expect_arg(hs, "dtype 7", "bad dtype");
    hs = amp_optimizer_add_mixed(ho, AMP_BF16, hw, (amp_dtype)5, hg, 10);
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    expect_arg(hs, "dtype 5", "bad grad dtype");
    hs = amp_optimizer_add_mixed(ho, AMP_BF16, hw, AMP_F32, NULL, 10);
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    expect_arg(hs, "grads is NULL", "grad NULL");
    amp_optimizer_destroy(ho);
  }
  h.kind = AMP_CUSTOM;
  expect_arg(amp__cu_optim_create(ST, &o, t, 2, NULL, NULL, &h, msg, sizeof msg), "kind 3", "custom kind");
  h.kind = (amp_optim_kind)99;
  expect_arg(amp__cu_optim_create(ST, &o, t, 2, NULL, NULL, &h, msg, sizeof msg), "kind 99", "unknown kind");
  h.kind = AMP_ADAMW;
  expect_arg(amp__cu_optim_create(NULL, &o, t, 2, NULL, NULL, &h, msg, sizeof msg), "state is NULL", "state NULL");
  EXPECT(o == NULL, "a failed create wrote the handle %p", o);
  expect_arg(amp__cu_optim_unscale(ST, NULL, NULL, msg, sizeof msg), "amp__cu_optim_unscale", "unscale NULL optim");
  expect_arg(amp__cu_optim_step(ST, NULL, NULL, 0, msg, sizeof msg), "amp__cu_optim_step", "step NULL optim");
  {
    double *buf = NULL;
    expect_arg(amp__cu_optim_unscale_local(ST, NULL, NULL, &buf, msg, sizeof msg), "amp__cu_optim_unscale_local", "local NULL optim");
    expect_arg(amp__cu_optim_unscale_finish(ST, NULL, NULL, msg, sizeof msg), "amp__cu_optim_unscale_finish", "finish NULL optim");
    expect_arg(amp__cu_scaler_load(ST, NULL, &s0, &pr, 1.0f, 0, 0, msg, sizeof msg), "amp__cu_scaler_load", "load NULL scaler");
  }
  expect_arg(amp__cu_scaler_create(ST, NULL, &s0, &pr, msg, sizeof msg), "amp__cu_scaler_create", "scaler out NULL");
  expect_arg(amp__cu_scaler_update(ST, NULL, 0, msg, sizeof msg), "amp__cu_scaler_update", "update NULL scaler");
  expect_arg(amp__cu_cast(ST, fake, 9, fake, AMP_F32, 4, msg, sizeof msg), "amp__cu_cast", "cast bad dtype");
  expect_arg(amp__cu_scale_buffer(ST, NULL, fake, AMP_F16, 4, msg, sizeof msg), "amp__cu_scale_buffer", "scale NULL scaler");
  expect_arg(amp__cu_capture_begin(NULL, msg, sizeof msg), "amp__cu_capture_begin", "capture NULL state");
  EXPECT(amp__cu_scaler_scale_ptr(NULL) == NULL, "scale_ptr(NULL) is not NULL");
  EXPECT(amp__cu_optim_master(NULL, 0, NULL) == NULL, "master(NULL) is not NULL");
  { /* non-finite scales are refused (a test on the bits) before any CUDA call: a stand-in state will do */
    const float bad[3] = {INFINITY, NAN, -INFINITY};
    void *sc = NULL;
    for (int b = 0; b < 3; b++) {
      amp_scale_state sb = s0;
      sb.scale = bad[b];
      expect_arg(amp__cu_scaler_create(fake, &sc, &sb, &pr, msg, sizeof msg), "must be positive and finite", "create: scale inf/NaN");
      expect_arg(amp__cu_scaler_load(fake, fake, &sb, &pr, 1.0f, 0, 0, msg, sizeof msg), "must be positive and finite", "load: scale inf/NaN");
      expect_arg(amp__cu_scaler_load(fake, fake, &s0, &pr, bad[b], 0, 0, msg, sizeof msg), "must be positive and finite", "load: inv_scale inf/NaN");
    }
    EXPECT(sc == NULL, "a refused create wrote the handle %p", sc);
  }
  if (!ST) return;
  /* with a device: the checks that come after the state check */
  {
    void *sc = NULL;
    s0.scale = 0.0f;
    expect_arg(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg), "scale 0", "scale 0");
    s0.scale = 65536.0f;
    OK(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg));
    expect_arg(amp__cu_scaler_update(ST, sc, 2, msg, sizeof msg), "found_inf 2", "found_inf 2");
    expect_arg(amp__cu_scale_buffer(ST, sc, NULL, AMP_F16, 4, msg, sizeof msg), "buf is NULL", "scale NULL buf");
    expect_arg(amp__cu_cast(ST, fake, AMP_F16, fake, 5, 4, msg, sizeof msg), "src_type 5", "cast src 5");
    amp__cu_scaler_destroy(ST, sc);
  }
}

/* The coefficients the step kernel computes (amp__step_coefs as nvcc compiles it, here its host
   compilation) against the CPU build's (the same function, compiled by the C compiler) for the same
   config and step: every field the kind reads, bit for bit. Runs without a GPU. */
static int coef_bits(float x) { return (int)amp__f32_bits(x); }
static void device_step_coefficients_equal_the_cpu_optimizers(void) {
  static const long ts[] = {1, 2, 3, 10, 1000, 123457};
  amp_optim_config cfg[4];
  memset(cfg, 0, sizeof cfg);
  cfg[0].kind = AMP_SGD; cfg[0].lr = 0.05f; cfg[0].weight_decay = 1e-2f; cfg[0].momentum = 0.9f; cfg[0].dampening = 0.1f;
  cfg[1].kind = AMP_SGD; cfg[1].lr = 0.3f; cfg[1].momentum = 0.8f; cfg[1].nesterov = 1;
  cfg[2].kind = AMP_ADAM; cfg[2].lr = 3e-4f; cfg[2].weight_decay = 1e-2f; cfg[2].beta1 = 0.8f; cfg[2].beta2 = 0.95f;
  cfg[3].kind = AMP_ADAMW; cfg[3].lr = 1e-3f; cfg[3].weight_decay = 0.1f; cfg[3].eps = 1e-6f;
  for (int k = 0; k < 4; k++) {
    amp_optimizer *o = NULL;
    EXPECT(amp_optimizer_create(&o, amp_cpu(), &cfg[k]) == AMP_OK, "config %d: %s", k, amp_last_error());
    if (!o) return;
    /* param groups: 0 (the config's decay), a scaled one, a frozen one without decay */
    static const int grp[3] = {0, 1, 2};
    static const float lr_scale[3] = {1.0f, 0.3f, 0.0f}, wdec[3] = {0.0f, 0.05f, 0.0f};
    for (size_t q = 0; q < 3 * sizeof ts / sizeof ts[0]; q++) {
      size_t i = q / 3, gi = q % 3;
      amp_optim_config h = o->cfg;
      amp_step_coefs c, d;
      o->step = ts[i] - 1;
      c = amp__group_coefs(&o->cfg, (int64_t)o->step + 1, grp[gi], lr_scale[gi], wdec[gi]);
      memset(&d, 0x55, sizeof d);
      amp__cu_step_coefs(&h, ts[i], grp[gi], lr_scale[gi], wdec[gi], &d);
      EXPECT(coef_bits(c.lr) == coef_bits(d.lr) && coef_bits(c.wd) == coef_bits(d.wd) && coef_bits(c.momentum) == coef_bits(d.momentum) &&
             coef_bits(c.dampening) == coef_bits(d.dampening) && c.nesterov == d.nesterov && c.first == d.first &&
             coef_bits(c.decay) == coef_bits(d.decay),
             "config %d t %ld: cpu lr %a wd %a mom %a damp %a nest %d first %d decay %a, device %a %a %a %a %d %d %a", k, ts[i],
             (double)c.lr, (double)c.wd, (double)c.momentum, (double)c.dampening, c.nesterov, c.first, (double)c.decay,
             (double)d.lr, (double)d.wd, (double)d.momentum, (double)d.dampening, d.nesterov, d.first, (double)d.decay);
      if (cfg[k].kind != AMP_SGD)
        EXPECT(coef_bits(c.beta1) == coef_bits(d.beta1) && coef_bits(c.beta2) == coef_bits(d.beta2) && coef_bits(c.eps) == coef_bits(d.eps) &&
               coef_bits(c.step_size) == coef_bits(d.step_size) && coef_bits(c.bc2_sqrt) == coef_bits(d.bc2_sqrt),
               "config %d t %ld: cpu beta1 %a beta2 %a eps %a step_size %a bc2_sqrt %a, device %a %a %a %a %a", k, ts[i],
               (double)c.beta1, (double)c.beta2, (double)c.eps, (double)c.step_size, (double)c.bc2_sqrt,
               (double)d.beta1, (double)d.beta2, (double)d.eps, (double)d.step_size, (double)d.bc2_sqrt);
    }
    amp_optimizer_destroy(o);
  }
}

static void open_without_gpu_says_unsupported(void) {
  amp_device *d = NULL;
  amp_status s = amp_cuda_open(&d, 0, NULL);
  if (s == AMP_OK) { amp_device_close(d); return; }   /* a GPU is present: nothing to check here */
  EXPECT(s == AMP_ERR_UNSUPPORTED, "amp_cuda_open without a GPU: want AMP_ERR_UNSUPPORTED, got %s", amp_status_string(s));
  EXPECT(strstr(amp_last_error(), "no CUDA device") != NULL, "message '%s' does not say why", amp_last_error());
}

/* ---- GPU: scale rule ------------------------------------------------------------------------- */

static void scale_rule_on_device_follows_host_exactly(void) {
  amp_scale_params ps[7];
  int np = 0, iters = t_quick() ? 60 : 400;
  ps[np++] = params(2.0f, 0.5f, 3, 1, AMP_HYSTERESIS_CONSECUTIVE, 0, 0, 0);        /* PyTorch, short interval */
  ps[np++] = params(2.0f, 0.5f, 4, 3, AMP_HYSTERESIS_CONSECUTIVE, 1.0f, 0, 0);     /* Paddle-like with a floor */
  ps[np++] = params(2.0f, 0.5f, 3, 2, AMP_HYSTERESIS_CLEAN_REFILL, 0, 1048576.0f, 0); /* apex with a cap */
  ps[np++] = params(2.0f, 0.5f, 2, 2, AMP_HYSTERESIS_GROWTH_REFILL, 1.0f, 0, 0);   /* DeepSpeed */
  ps[np++] = params(3.0f, 0.8f, 2, 1, AMP_HYSTERESIS_CONSECUTIVE, 0, 0, 0);        /* factors that round */
  ps[np++] = params(2.0f, 0.5f, 1, 1, AMP_HYSTERESIS_CONSECUTIVE, 0, 0, 1);        /* fixed */
  ps[np++] = params(2.0f, 0.25f, 50, 1, AMP_HYSTERESIS_CONSECUTIVE, 0, 0, 0);      /* runs down to FLT_MIN */
  for (int c = 0; c < np; c++) {
    void *sc = NULL;
    amp_scale_state host = state0(c == 6 ? 1e-30f : 65536.0f, &ps[c]), got;
    amp_cu_scaler_info info;
    long long skipped = 0;
    OK(amp__cu_scaler_create(ST, &sc, &host, &ps[c], msg, sizeof msg));
    for (int i = 0; i < iters; i++) {
      /* bursts of overflows and of clean steps, so hysteresis, growth and the floor all happen */
      int f = c == 6 ? (i < 40) : (rnd() % 100) < (i % 40 < 10 ? 70u : 15u);
      amp__scale_rule(&host, &ps[c], f);
      skipped += f;
      OK(amp__cu_scaler_update(ST, sc, f, msg, sizeof msg));
      OK(amp__cu_scaler_read(ST, sc, &got, &info, msg, sizeof msg));
      EXPECT(memcmp(&got, &host, sizeof host) == 0,
             "params %d iter %d found_inf %d: want scale %a tracker %d hyst %d floor %d, got %a %d %d %d",
             c, i, f, (double)host.scale, host.tracker, host.hyst, host.at_floor, (double)got.scale, got.tracker, got.hyst, got.at_floor);
      EXPECT(amp__f32_bits(info.inv_scale) == amp__f32_bits(amp__inv_scale(host.scale)),
             "params %d iter %d: inv_scale %a, want %a", c, i, (double)info.inv_scale, (double)amp__inv_scale(host.scale));
      EXPECT(info.last_skipped == f && info.skipped == skipped && info.found_inf == 0,
             "params %d iter %d: last_skipped %d skipped %lld found_inf %d, want %d %lld 0", c, i, info.last_skipped,
             (long long)info.skipped, info.found_inf, f, skipped);
      if (c == 6 && i == 39)   /* 40 back-offs by 4 from 1e-30: held at FLT_MIN, never 0 or subnormal */
        EXPECT(got.scale == FLT_MIN && got.at_floor, "after 40 overflows: scale %g at_floor %d, want FLT_MIN and 1", (double)got.scale, got.at_floor);
      if (t__cur) break;
    }
    amp__cu_scaler_destroy(ST, sc);
  }
}

/* ---- GPU: tensors ---------------------------------------------------------------------------- */

/* A set of tensors on the device with host copies: grads (random, times gscale) and model copies. */
typedef struct tset {
  size_t k;
  amp__tensor t[8];
  void *gbase[8], *mbase[8];   /* allocations (t[i].g/w may sit one element in) */
  void *hg[8], *hm[8];         /* host copies */
} tset;

static void tset_make(tset *s, size_t k, const size_t *n, const int32_t *dt, const int *misalign, float gscale) {
  memset(s, 0, sizeof *s);
  s->k = k;
  for (size_t i = 0; i < k; i++) {
    size_t es = amp_dtype_size((amp_dtype)dt[i]), off = misalign[i] ? es : 0;
    s->gbase[i] = dmalloc(n[i] * es + 16); s->mbase[i] = dmalloc(n[i] * es + 16);
    s->hg[i] = xmalloc(n[i] * es); s->hm[i] = xmalloc(n[i] * es);
    for (size_t j = 0; j < n[i]; j++) {
      amp__store(s->hg[i], (amp_dtype)dt[i], j, srand1() * gscale);
      amp__store(s->hm[i], (amp_dtype)dt[i], j, srand1());
    }
    s->t[i].g = (char *)s->gbase[i] + off; s->t[i].w = (char *)s->mbase[i] + off;
    s->t[i].n = n[i]; s->t[i].wtype = dt[i]; s->t[i].gtype = dt[i];
    up((void *)s->t[i].g, s->hg[i], n[i] * es);
    up(s->t[i].w, s->hm[i], n[i] * es);
  }
}
static void tset_new_grads(tset *s, float gscale) {
  for (size_t i = 0; i < s->k; i++) {
    for (size_t j = 0; j < s->t[i].n; j++) amp__store(s->hg[i], (amp_dtype)s->t[i].wtype, j, srand1() * gscale);
    up((void *)s->t[i].g, s->hg[i], s->t[i].n * amp_dtype_size((amp_dtype)s->t[i].wtype));
  }
}
/* Writes one grad element on the device (and in the host copy). */
static void tset_poke(tset *s, size_t i, size_t j, float x) {
  size_t es = amp_dtype_size((amp_dtype)s->t[i].wtype);
  amp__store(s->hg[i], (amp_dtype)s->t[i].wtype, j, x);
  up((char *)s->t[i].g + j * es, (char *)s->hg[i] + j * es, es);
}
static void tset_free(tset *s) {
  for (size_t i = 0; i < s->k; i++) { amp__cu_free(ST, s->gbase[i]); amp__cu_free(ST, s->mbase[i]); free(s->hg[i]); free(s->hm[i]); }
}

static amp_optim_config hp(int kind, float lr, float wd, float mom, float damp, int nest, float maxnorm) {
  amp_optim_config h;
  memset(&h, 0, sizeof h);
  h.kind = kind; h.lr = lr; h.weight_decay = wd; h.momentum = mom; h.dampening = damp; h.nesterov = nest;
  h.beta1 = 0.9f; h.beta2 = 0.999f; h.eps = 1e-8f; h.max_grad_norm = maxnorm;
  return h;
}

static void unscale_finds_norm_and_overflow_of_mixed_tensors(void) {
  size_t n[7] = {1, 7, 8, 1000, 65536, 65537, 200003};
  int32_t dt[7] = {AMP_F16, AMP_BF16, AMP_F32, AMP_F16, AMP_BF16, AMP_F16, AMP_F32};
  int mis[7] = {0, 1, 0, 1, 0, 0, 1};
  tset s;
  void *o = NULL, *sc = NULL;
  amp_scale_params pr = params(2, 0.5f, 2000, 1, 0, 0, 0, 0);
  amp_scale_state s0 = state0(1024.0f, &pr);
  amp_optim_config h = hp(AMP_SGD, 0.1f, 0, 0, 0, 0, 0);
  amp_cu_optim_info a, b;
  amp_cu_scaler_info si;
  double ref = 0;
  float inv = amp__inv_scale(1024.0f);
  if (t_quick()) n[6] = 3001;
  tset_make(&s, 7, n, dt, mis, 1024.0f);
  OK(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg));
  OK(amp__cu_optim_create(ST, &o, s.t, s.k, NULL, NULL, &h, msg, sizeof msg));
  for (size_t i = 0; i < s.k; i++)
    for (size_t j = 0; j < n[i]; j++) { double y = (double)(amp__load(s.hg[i], (amp_dtype)dt[i], j) * inv); ref += y * y; }
  ref = sqrt(ref);
  OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg));
  OK(amp__cu_optim_read(ST, o, &a, msg, sizeof msg));
  EXPECT(fabs(a.norm - ref) <= 1e-5 * ref, "norm of %zu tensors: want %.9g, got %.9g", s.k, ref, (double)a.norm);
  EXPECT(a.skip == 0 && a.clip == 1.0f && a.mul == inv, "clean grads: skip %d clip %g mul %a, want 0 1 %a", a.skip, (double)a.clip, (double)a.mul, (double)inv);
  OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg));
  OK(amp__cu_optim_read(ST, o, &b, msg, sizeof msg));
  EXPECT(amp__f32_bits(a.norm) == amp__f32_bits(b.norm), "the same grads twice: norm %a then %a (not deterministic)", (double)a.norm, (double)b.norm);
  /* one non-finite element anywhere (vector body, scalar tail, misaligned tensor) sets the flags */
  {
    size_t where[5][2] = {{0, 0}, {3, 999}, {5, 65536}, {6, 12345 % n[6]}, {4, 40000}};
    float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int w = 0; w < 5; w++) {
      size_t i = where[w][0], j = where[w][1];
      float keep = amp__load(s.hg[i], (amp_dtype)dt[i], j);
      tset_poke(&s, i, j, bad[w % 3]);
      OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg));
      OK(amp__cu_optim_read(ST, o, &a, msg, sizeof msg));
      OK(amp__cu_scaler_read(ST, sc, NULL, &si, msg, sizeof msg));
      EXPECT(a.skip == 1 && si.found_inf == 1, "%g at tensor %zu element %zu: skip %d found_inf %d, want 1 1", (double)bad[w % 3], i, j, a.skip, si.found_inf);
      tset_poke(&s, i, j, keep);
      OK(amp__cu_scaler_update(ST, sc, 0, msg, sizeof msg));   /* the rule (a back-off here) clears the device flag */
      OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg));
      OK(amp__cu_optim_read(ST, o, &a, msg, sizeof msg));
      EXPECT(a.skip == 0, "after restoring tensor %zu element %zu: skip %d, want 0", i, j, a.skip);
    }
  }
  /* a finite grad whose unscaled value overflows fp32 counts as an overflow too (as in PyTorch) */
  {
    amp_scale_state tiny = state0(1e-30f, &pr);
    float keep = amp__load(s.hg[6], AMP_F32, 3);
    OK(amp__cu_scaler_load(ST, sc, &tiny, &pr, amp__inv_scale(tiny.scale), 0, 0, msg, sizeof msg));
    tset_poke(&s, 6, 3, 1e20f);
    OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg));
    OK(amp__cu_optim_read(ST, o, &a, msg, sizeof msg));
    EXPECT(a.skip == 1, "1e20 unscaled by 1e30: skip %d, want 1", a.skip);
    tset_poke(&s, 6, 3, keep);
  }
  amp__cu_optim_destroy(ST, o);
  amp__cu_scaler_destroy(ST, sc);
  tset_free(&s);
}

/* Runs `steps` steps of h on the device and the same on the host, and compares. */
static void run_optimizer_against_host(const char *name, amp_optim_config h, int steps, float gscale) {
  size_t n[5] = {5, 64, 1003, 70001, 4096};
  int32_t dt[5] = {AMP_F16, AMP_BF16, AMP_F32, AMP_F16, AMP_BF16};
  int mis[5] = {0, 1, 0, 0, 1};
  tset s;
  void *o = NULL, *sc = NULL;
  float *pm[5], *mm[5], *vm[5], *dev_p = NULL, *dev_m = NULL, *dev_v = NULL;
  amp_scale_params pr = params(2, 0.5f, 2000, 1, 0, 0, 0, 0);
  amp_scale_state s0 = state0(256.0f, &pr);
  int has_m = amp__o_moments(&h) >= 1, has_v = amp__o_moments(&h) >= 2;   /* Lion keeps m alone */
  amp_cu_optim_info info;
  if (t_quick()) n[3] = 3001;
  tset_make(&s, 5, n, dt, mis, 256.0f * gscale);
  OK(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg));
  OK(amp__cu_optim_create(ST, &o, s.t, s.k, NULL, NULL, &h, msg, sizeof msg));
  for (size_t i = 0; i < s.k; i++) {
    pm[i] = (float *)xmalloc(n[i] * 4); mm[i] = (float *)calloc(n[i], 4); vm[i] = (float *)calloc(n[i], 4);
    for (size_t j = 0; j < n[i]; j++) pm[i][j] = amp__load(s.hm[i], (amp_dtype)dt[i], j);
  }
  for (int step = 1; step <= steps; step++) {
    amp_step_coefs c;
    if (step == 4) { h.lr *= 0.5f; OK(amp__cu_optim_set_hparams(ST, o, &h, msg, sizeof msg)); }   /* a schedule */
    if (step > 1) tset_new_grads(&s, 256.0f * gscale);
    OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg));
    OK(amp__cu_optim_step(ST, o, sc, 1, msg, sizeof msg));
    OK(amp__cu_optim_read(ST, o, &info, msg, sizeof msg));
    EXPECT(info.t == step && info.skip == 0, "%s step %d: t %lld skip %d", name, step, (long long)info.t, info.skip);
    amp__cu_step_coefs(&h, step, 0, 1.0f, 0.0f, &c);
    for (size_t i = 0; i < s.k; i++)   /* the host takes the device's factor: the norm's own check is above */
      for (size_t j = 0; j < n[i]; j++) {
        float g = amp__load(s.hg[i], (amp_dtype)dt[i], j) * info.mul;
        if (h.kind == AMP_SGD) amp__sgd_elem(&pm[i][j], &mm[i][j], &vm[i][j], g, &c);
        else if (h.kind == AMP_LION) amp__lion_elem(&pm[i][j], &mm[i][j], &vm[i][j], g, &c);
        else amp__adam_elem(&pm[i][j], &mm[i][j], &vm[i][j], g, &c);
      }
  }
  if (h.max_grad_norm > 0) EXPECT(info.clip < 1.0f, "%s: clip %g, the test wants clipping to act", name, (double)info.clip);
  for (size_t i = 0; i < s.k && !t__cur; i++) {
    size_t es = amp_dtype_size((amp_dtype)dt[i]);
    void *model = xmalloc(n[i] * es);
    float *q[3] = {pm[i], mm[i], vm[i]};
    const char *what[3] = {"master", "m", "v"};
    dev_p = (float *)xmalloc(n[i] * 4); dev_m = (float *)xmalloc(n[i] * 4); dev_v = (float *)xmalloc(n[i] * 4);
    float *d[3] = {dev_p, dev_m, dev_v};
    OK(amp__cu_optim_state_io(ST, o, i, 0, dev_p, 0, msg, sizeof msg));
    if (has_m) OK(amp__cu_optim_state_io(ST, o, i, 1, dev_m, 0, msg, sizeof msg));
    if (has_v) OK(amp__cu_optim_state_io(ST, o, i, 2, dev_v, 0, msg, sizeof msg));
    down(model, s.t[i].w, n[i] * es);
    for (int w = 0; w < 1 + has_m + has_v; w++) {
      int k = w == 0 ? 0 : (w == 1 && has_m) ? 1 : 2;
      double rms = 0;
      for (size_t j = 0; j < n[i]; j++) rms += (double)q[k][j] * q[k][j];
      rms = sqrt(rms / (double)n[i]);
      for (size_t j = 0; j < n[i]; j++) {
        double tol = 4.0 * steps * FLT_EPSILON * (fabs(q[k][j]) + rms);
        EXPECT(fabs((double)d[k][j] - q[k][j]) <= tol, "%s tensor %zu (%s, n %zu) %s[%zu] after %d steps: cpu %.9g gpu %.9g (tol %.3g)",
               name, i, amp__dtype_name((amp_dtype)dt[i]), n[i], what[k], j, steps, (double)q[k][j], (double)d[k][j], tol);
      }
    }
    for (size_t j = 0; j < n[i]; j++) {
      float want = amp__round_to(dev_p[j], (amp_dtype)dt[i]), got = amp__load(model, (amp_dtype)dt[i], j);
      EXPECT(amp__f32_bits(want) == amp__f32_bits(got), "%s tensor %zu model[%zu]: %a, want the master %a rounded: %a",
             name, i, j, (double)got, (double)dev_p[j], (double)want);
    }
    free(model); free(dev_p); free(dev_m); free(dev_v);
  }
  for (size_t i = 0; i < s.k; i++) { free(pm[i]); free(mm[i]); free(vm[i]); }
  amp__cu_optim_destroy(ST, o);
  amp__cu_scaler_destroy(ST, sc);
  tset_free(&s);
}

static void optimizers_match_host_reference(void) {
  int steps = t_quick() ? 4 : 8;
  run_optimizer_against_host("sgd", hp(AMP_SGD, 0.1f, 0, 0, 0, 0, 0), steps, 1.0f);
  run_optimizer_against_host("sgd momentum+wd+dampening", hp(AMP_SGD, 0.05f, 1e-2f, 0.9f, 0.1f, 0, 0), steps, 1.0f);
  run_optimizer_against_host("sgd nesterov", hp(AMP_SGD, 0.05f, 0, 0.9f, 0, 1, 0), steps, 1.0f);
  run_optimizer_against_host("adam l2", hp(AMP_ADAM, 1e-2f, 1e-2f, 0, 0, 0, 0), steps, 1.0f);
  run_optimizer_against_host("adamw clipped", hp(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 1.0f), steps, 4.0f);
  {
    amp_optim_config lion = hp(AMP_LION, 1e-3f, 0.1f, 0, 0, 0, 1.0f);
    lion.beta2 = 0.99f;
    run_optimizer_against_host("lion clipped", lion, steps, 4.0f);
  }
}

/* ---- GPU: skipped steps ---------------------------------------------------------------------- */

typedef struct snap { float *p[3]; void *model; amp_cu_optim_info info; } snap;
static void take(snap *z, void *o, const tset *s, size_t i) {
  size_t n = s->t[i].n, es = amp_dtype_size((amp_dtype)s->t[i].wtype);
  for (int w = 0; w < 3; w++) { z->p[w] = (float *)xmalloc(n * 4); amp__cu_optim_state_io(ST, o, i, w, z->p[w], 0, msg, sizeof msg); }
  z->model = xmalloc(n * es);
  down(z->model, s->t[i].w, n * es);
  amp__cu_optim_read(ST, o, &z->info, msg, sizeof msg);
}
static int same(const snap *a, const snap *b, const tset *s, size_t i) {
  size_t n = s->t[i].n, es = amp_dtype_size((amp_dtype)s->t[i].wtype);
  for (int w = 0; w < 3; w++) if (memcmp(a->p[w], b->p[w], n * 4)) return 0;
  return !memcmp(a->model, b->model, n * es) && a->info.t == b->info.t;
}
static void drop(snap *z) { for (int w = 0; w < 3; w++) free(z->p[w]); free(z->model); }

static void overflowing_step_leaves_state_bit_identical(void) {
  size_t n[3] = {1000, 65537, 33};
  int32_t dt[3] = {AMP_F16, AMP_BF16, AMP_F32};
  int mis[3] = {0, 0, 1};
  tset s;
  void *o = NULL, *sc = NULL;
  amp_scale_params pr = params(2, 0.5f, 2000, 1, 0, 0, 0, 0);
  amp_scale_state s0 = state0(4096.0f, &pr), got;
  amp_optim_config h = hp(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 1.0f);
  amp_cu_scaler_info si;
  tset_make(&s, 3, n, dt, mis, 4096.0f);
  OK(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg));
  OK(amp__cu_optim_create(ST, &o, s.t, s.k, NULL, NULL, &h, msg, sizeof msg));
  for (int k = 0; k < 2; k++) { OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg)); OK(amp__cu_optim_step(ST, o, sc, 1, msg, sizeof msg)); }
  for (int f = 0; f < 3; f++) {   /* +inf in f16, NaN in bf16, -inf in f32 */
    snap before[3], after[3];
    float bad = f == 0 ? INFINITY : f == 1 ? NAN : -INFINITY;
    size_t at = (size_t)f == 1 ? 65536 : 7;
    float keep = amp__load(s.hg[f], (amp_dtype)dt[f], at);
    for (size_t i = 0; i < 3; i++) take(&before[i], o, &s, i);
    tset_poke(&s, (size_t)f, at, bad);
    OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg));
    OK(amp__cu_optim_step(ST, o, sc, 1, msg, sizeof msg));
    for (size_t i = 0; i < 3; i++) {
      take(&after[i], o, &s, i);
      EXPECT(same(&before[i], &after[i], &s, i), "%g in tensor %d: tensor %zu changed by a skipped step (t %lld -> %lld)",
             (double)bad, f, i, (long long)before[i].info.t, (long long)after[i].info.t);
    }
    EXPECT(after[0].info.skipped == f + 1, "skipped count %lld, want %d", (long long)after[0].info.skipped, f + 1);
    OK(amp__cu_scaler_read(ST, sc, &got, &si, msg, sizeof msg));
    EXPECT(got.scale == 4096.0f / (float)(2 << f) && si.last_skipped == 1 && si.skipped == f + 1,
           "after overflow %d: scale %g last_skipped %d skipped %lld, want %g 1 %d", f, (double)got.scale, si.last_skipped,
           (long long)si.skipped, 4096.0 / (2 << f), f + 1);
    tset_poke(&s, (size_t)f, at, keep);
    for (size_t i = 0; i < 3; i++) { drop(&before[i]); drop(&after[i]); }
  }
  /* and the next clean step updates again */
  {
    amp_cu_optim_info a;
    OK(amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg)); OK(amp__cu_optim_step(ST, o, sc, 1, msg, sizeof msg));
    OK(amp__cu_optim_read(ST, o, &a, msg, sizeof msg));
    EXPECT(a.t == 3 && a.skip == 0, "clean step after overflows: t %lld skip %d, want 3 0", (long long)a.t, a.skip);
  }
  amp__cu_optim_destroy(ST, o);
  amp__cu_scaler_destroy(ST, sc);
  tset_free(&s);
}

/* ---- GPU: graphs and launch counts ----------------------------------------------------------- */

static void captured_step_replays_like_eager(void) {
  size_t n[3] = {3000, 70000, 17};
  int32_t dt[3] = {AMP_F16, AMP_BF16, AMP_F32};
  int mis[3] = {0, 1, 0};
  tset s;
  void *oa = NULL, *ob = NULL, *sa = NULL, *sb = NULL, *g = NULL, *modelb[3];
  amp__tensor tb[3];
  amp_scale_params pr = params(2, 0.5f, 2, 1, 0, 0, 0, 0);   /* interval 2: the scale grows inside the replays */
  amp_scale_state s0 = state0(1024.0f, &pr), ga, gb;
  amp_optim_config h = hp(AMP_ADAMW, 1e-2f, 1e-2f, 0, 0, 0, 2.0f);
  size_t kernels = 0;
  tset_make(&s, 3, n, dt, mis, 1024.0f);
  for (int i = 0; i < 3; i++) {   /* B: its own model copies, equal to A's, the same grads */
    size_t es = amp_dtype_size((amp_dtype)dt[i]);
    modelb[i] = dmalloc(n[i] * es);
    up(modelb[i], s.hm[i], n[i] * es);
    tb[i] = s.t[i]; tb[i].w = modelb[i];
  }
  OK(amp__cu_scaler_create(ST, &sa, &s0, &pr, msg, sizeof msg));
  OK(amp__cu_scaler_create(ST, &sb, &s0, &pr, msg, sizeof msg));
  OK(amp__cu_optim_create(ST, &oa, s.t, 3, NULL, NULL, &h, msg, sizeof msg));
  OK(amp__cu_optim_create(ST, &ob, tb, 3, NULL, NULL, &h, msg, sizeof msg));
  OK(amp__cu_capture_begin(ST, msg, sizeof msg));
  amp__cu_optim_unscale(ST, ob, sb, msg, sizeof msg);
  amp__cu_optim_step(ST, ob, sb, 1, msg, sizeof msg);
  OK(amp__cu_capture_end(ST, &g, &kernels, msg, sizeof msg));
  EXPECT(kernels == 2, "a captured step has %zu kernel nodes, want 2", kernels);
  for (int r = 0; r < 6; r++) {
    float keep = 0;
    if (r == 3) { keep = amp__load(s.hg[1], AMP_BF16, 5); tset_poke(&s, 1, 5, NAN); }   /* one overflow among the replays */
    OK(amp__cu_optim_unscale(ST, oa, sa, msg, sizeof msg));
    OK(amp__cu_optim_step(ST, oa, sa, 1, msg, sizeof msg));
    OK(amp__cu_graph_launch(ST, g, msg, sizeof msg));
    if (r == 3) tset_poke(&s, 1, 5, keep);
  }
  for (size_t i = 0; i < 3; i++) {
    snap a, b;
    tset sbv = s;
    sbv.t[i].w = modelb[i];
    take(&a, oa, &s, i); take(&b, ob, &sbv, i);
    EXPECT(same(&a, &b, &s, i), "tensor %zu: graph replay differs from eager (t %lld vs %lld)", i, (long long)b.info.t, (long long)a.info.t);
    EXPECT(a.info.t == 5 && a.info.skipped == 1, "eager: t %lld skipped %lld, want 5 1", (long long)a.info.t, (long long)a.info.skipped);
    drop(&a); drop(&b);
  }
  OK(amp__cu_scaler_read(ST, sa, &ga, NULL, msg, sizeof msg));
  OK(amp__cu_scaler_read(ST, sb, &gb, NULL, msg, sizeof msg));
  EXPECT(memcmp(&ga, &gb, sizeof ga) == 0, "scaler: eager scale %g tracker %d, replayed %g %d", (double)ga.scale, ga.tracker, (double)gb.scale, gb.tracker);
  amp__cu_graph_destroy(g);
  for (int i = 0; i < 3; i++) amp__cu_free(ST, modelb[i]);
  amp__cu_optim_destroy(ST, oa); amp__cu_optim_destroy(ST, ob);
  amp__cu_scaler_destroy(ST, sa); amp__cu_scaler_destroy(ST, sb);
  tset_free(&s);
}

static void step_over_500_small_tensors_is_two_or_three_launches(void) {
  enum { K = 500 };
  amp__tensor *t = (amp__tensor *)calloc(K, sizeof *t);   /* zero: group 0, round_to AMP_F32 */
  void *mem[2 * K], *o = NULL, *sc = NULL, *g = NULL;
  amp_scale_params pr = params(2, 0.5f, 2000, 1, 0, 0, 0, 0);
  amp_scale_state s0 = state0(65536.0f, &pr);
  amp_optim_config h = hp(AMP_ADAMW, 1e-3f, 1e-2f, 0, 0, 0, 1.0f);
  amp_cu_optim_info info;
  size_t kernels = 0;
  for (int i = 0; i < K; i++) {
    size_t n = 100 + rnd() % 3000;
    uint16_t *z = (uint16_t *)calloc(n, 2);
    mem[2 * i] = dmalloc(n * 2); mem[2 * i + 1] = dmalloc(n * 2);
    up(mem[2 * i], z, n * 2); up(mem[2 * i + 1], z, n * 2);
    free(z);
    t[i].g = mem[2 * i]; t[i].w = mem[2 * i + 1]; t[i].n = n; t[i].wtype = i % 2 ? AMP_BF16 : AMP_F16; t[i].gtype = t[i].wtype;
  }
  OK(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg));
  OK(amp__cu_optim_create(ST, &o, t, K, NULL, NULL, &h, msg, sizeof msg));
  OK(amp__cu_capture_begin(ST, msg, sizeof msg));
  amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg);
  amp__cu_optim_step(ST, o, sc, 1, msg, sizeof msg);
  OK(amp__cu_capture_end(ST, &g, &kernels, msg, sizeof msg));
  EXPECT(kernels == 2, "unscale + step with the scale rule folded in: %zu kernels, want 2", kernels);
  OK(amp__cu_graph_launch(ST, g, msg, sizeof msg));
  amp__cu_graph_destroy(g);
  OK(amp__cu_capture_begin(ST, msg, sizeof msg));
  amp__cu_optim_unscale(ST, o, sc, msg, sizeof msg);
  amp__cu_optim_step(ST, o, sc, 0, msg, sizeof msg);
  amp__cu_scaler_update(ST, sc, -1, msg, sizeof msg);
  OK(amp__cu_capture_end(ST, &g, &kernels, msg, sizeof msg));
  EXPECT(kernels == 3, "unscale + step + scale rule: %zu kernels, want 3", kernels);
  OK(amp__cu_graph_launch(ST, g, msg, sizeof msg));
  OK(amp__cu_optim_read(ST, o, &info, msg, sizeof msg));
  EXPECT(info.t == 2, "two replayed steps over %d tensors: t %lld", K, (long long)info.t);
  amp__cu_graph_destroy(g);
  amp__cu_optim_destroy(ST, o);
  amp__cu_scaler_destroy(ST, sc);
  for (int i = 0; i < 2 * K; i++) amp__cu_free(ST, mem[i]);
  free(t);
}

/* ---- GPU: casts and the scale multiply ------------------------------------------------------- */

static float host_elem(const void *p, int t, size_t i) { return amp__load(p, (amp_dtype)t, i); }

static void device_casts_match_host_conversions_bit_for_bit(void) {
  size_t n = t_quick() ? 70001 : 1000003;
  for (int sd = 0; sd < AMP__DTYPE_COUNT; sd++)   /* every pair of the format table, fp8 included */
    for (int dd = 0; dd < AMP__DTYPE_COUNT; dd++)
      for (int mis = 0; mis < 2; mis++) {
        size_t ss = amp_dtype_size((amp_dtype)sd), ds = amp_dtype_size((amp_dtype)dd);
        unsigned char *hs = (unsigned char *)xmalloc(n * ss), *hd = (unsigned char *)xmalloc(n * ds);
        unsigned char *ds_ = (unsigned char *)dmalloc(n * ss + 16), *dd_ = (unsigned char *)dmalloc(n * ds + 16);
        void *src = ds_ + (mis ? ss : 0), *dst = dd_ + (mis ? ds : 0);
        for (size_t i = 0; i < n; i++) {   /* every bit pattern class: random bits, all halves */
          if (ss == 4) { uint32_t u = rnd() << 16 ^ rnd(); memcpy(hs + 4 * i, &u, 4); }
          else if (ss == 2) { uint16_t u = (uint16_t)i; memcpy(hs + 2 * i, &u, 2); }
          else hs[i] = (unsigned char)i;   /* every fp8 code */
        }
        unsigned char *ref = (unsigned char *)xmalloc(n * ds);   /* the host's amp_convert: same type is a copy */
        OK(amp_convert(ref, (amp_dtype)dd, hs, (amp_dtype)sd, n));
        up(src, hs, n * ss);
        OK(amp__cu_cast(ST, dst, dd, src, sd, n, msg, sizeof msg));
        down(hd, dst, n * ds);
        for (size_t i = 0; i < n; i++) {
          float x = host_elem(hs, sd, i);
          if (memcmp(ref + i * ds, hd + i * ds, ds)) {
            EXPECT(0, "cast %s -> %s (misaligned %d) element %zu: input %a, got bytes differ", amp__dtype_name((amp_dtype)sd),
                   amp__dtype_name((amp_dtype)dd), mis, i, (double)x);
            break;
          }
        }
        free(hs); free(hd); free(ref); amp__cu_free(ST, ds_); amp__cu_free(ST, dd_);
      }
}

/* amp_quantize on the GPU: the CPU's codes and amax bit for bit (every input type, both formats,
   a device scale, NaN and inf among the inputs, a partial last block), amp_quantize_ex's counts
   (the counting kernel: the CPU's counts exactly, the same codes), and the fp8 scaler's update
   kernel: the CPU scaler's scales and histories over a run of every recipe, and with stats the
   CPU's stats (counts moved by the update, amax_used, scale_used). */
static void fp8_quantize_and_scaler_match_the_cpu(void) {
  size_t n = t_quick() ? 70001 : 1000003;
  for (int xt = AMP_F32; xt <= AMP_BF16; xt++)
    for (int f = 0; f < 2; f++) {
      amp_dtype fmt = f ? AMP_E5M2 : AMP_E4M3;
      size_t sz = amp_dtype_size((amp_dtype)xt);
      float *hx = (float *)xmalloc(n * 4), scale = 37.5f, amax_h = 0.0f, amax_d = 0.0f;
      unsigned char *xb = (unsigned char *)xmalloc(n * sz), *qh = (unsigned char *)xmalloc(n), *qd = (unsigned char *)xmalloc(n);
      void *dx = dmalloc(n * sz), *dq = dmalloc(n), *dk = dmalloc(48);   /* scale, amax, then 4 counters at 8 */
      uint64_t ch[4] = {0, 0, 0, 0}, cd[4] = {0, 0, 0, 0};
      for (size_t i = 0; i < n; i++) hx[i] = srand1() * (float)(1u << (rnd() % 12)) * (i % 97 == 3 ? 1e-7f : 1.0f);
      hx[n / 2] = 1e30f; hx[n / 3] = -INFINITY; hx[n / 7] = 0.0f; hx[n / 11] = -0.0f;
      if (xt != AMP_F32) hx[n / 5] = NAN;
      OK(amp_convert(xb, (amp_dtype)xt, hx, AMP_F32, n));
      OK(amp_quantize(amp_cpu(), qh, fmt, xb, (amp_dtype)xt, n, &scale, &amax_h));
      up(dx, xb, n * sz); up(dk, &scale, 4); up((char *)dk + 4, &amax_d, 4);
      OK(amp_quantize(dev, dq, fmt, dx, (amp_dtype)xt, n, (const float *)dk, (float *)((char *)dk + 4)));
      down(qd, dq, n); down(&amax_d, (char *)dk + 4, 4);
      EXPECT(memcmp(qh, qd, n) == 0, "x_type %d fmt %d: the device's codes differ", xt, f);
      EXPECT(memcmp(&amax_h, &amax_d, 4) == 0, "x_type %d fmt %d: amax %a on the device, %a on the CPU", xt, f,
             (double)amax_d, (double)amax_h);
      {   /* an amax that starts as -0 is joined as the CPU joins it (its sign cleared), not kept */
        float z = -0.0f;
        amax_h = z; amax_d = z;
        OK(amp_quantize(amp_cpu(), NULL, fmt, xb, (amp_dtype)xt, n, &scale, &amax_h));
        up((char *)dk + 4, &amax_d, 4);
        OK(amp_quantize(dev, NULL, fmt, dx, (amp_dtype)xt, n, (const float *)dk, (float *)((char *)dk + 4)));
        down(&amax_d, (char *)dk + 4, 4);
        EXPECT(memcmp(&amax_h, &amax_d, 4) == 0 && !signbit(amax_h), "x_type %d fmt %d: from -0, amax %a on the device, %a on the CPU",
               xt, f, (double)amax_d, (double)amax_h);
      }
      /* with counts: the counting kernel, its codes the same and its counts the CPU's */
      OK(amp_quantize_ex(amp_cpu(), qh, fmt, xb, (amp_dtype)xt, n, &scale, NULL, ch));
      up((char *)dk + 8, cd, sizeof cd);
      memset(qd, 0, n);
      OK(amp_quantize_ex(dev, dq, fmt, dx, (amp_dtype)xt, n, (const float *)dk, NULL, (uint64_t *)((char *)dk + 8)));
      OK(amp_quantize_ex(dev, NULL, fmt, dx, (amp_dtype)xt, n, (const float *)dk, (float *)((char *)dk + 4),
                         (uint64_t *)((char *)dk + 8)));   /* q NULL: the same counts again */
      down(qd, dq, n); down(cd, (char *)dk + 8, sizeof cd);
      EXPECT(memcmp(qh, qd, n) == 0, "x_type %d fmt %d: the counting kernel's codes differ", xt, f);
      EXPECT(cd[0] == 2 * ch[0] && cd[1] == 2 * ch[1] && cd[2] == 2 * ch[2] && cd[3] == 2 * ch[3] && ch[0] == n &&
                 ch[1] >= 1 && ch[2] >= 1 && ch[3] == (uint64_t)(xt != AMP_F32),
             "x_type %d fmt %d: counts %llu %llu %llu %llu on the device (two casts), %llu %llu %llu %llu on the CPU",
             xt, f, (unsigned long long)cd[0], (unsigned long long)cd[1], (unsigned long long)cd[2],
             (unsigned long long)cd[3], (unsigned long long)ch[0], (unsigned long long)ch[1], (unsigned long long)ch[2],
             (unsigned long long)ch[3]);
      free(hx); free(xb); free(qh); free(qd); amp__cu_free(ST, dx); amp__cu_free(ST, dq); amp__cu_free(ST, dk);
    }
  /* under the sanitizers (AMP_TEST_QUICK) fewer tensors and steps: each record is a device call */
  const int nt = t_quick() ? 24 : 300, nsteps = t_quick() ? 12 : 40;
  for (int r = 0; r < 4; r++) {
    amp_fp8_config c;
    amp_fp8_scaler *a = NULL, *b = NULL;
    amp_dtype fmts[300];
    memset(&c, 0, sizeof c);
    c.recipe = (amp_fp8_recipe)r;
    if (r == 0) c.history_len = 16;
    for (int i = 0; i < nt; i++) fmts[i] = i % 3 ? AMP_E4M3 : AMP_E5M2;
    OK(amp_fp8_scaler_create(&a, amp_cpu(), &c, (size_t)nt, fmts));
    OK(amp_fp8_scaler_create(&b, dev, &c, (size_t)nt, fmts));
    for (int step = 0; step < nsteps; step++) {
      for (int i = 0; i < nt; i++) {
        float am = (rnd() % 50 == 0) ? 0.0f : urand() * (float)(1u << (rnd() % 20));
        OK(amp_fp8_scaler_record(a, (size_t)i, am));
        OK(amp_fp8_scaler_record(b, (size_t)i, am));
      }
      OK(amp_fp8_scaler_update(a));
      OK(amp_fp8_scaler_update(b));
    }
    for (int i = 0; i < nt; i++) {
      float sa = amp_fp8_scaler_get_scale(a, (size_t)i), sb = amp_fp8_scaler_get_scale(b, (size_t)i), ha[16], hb[16];
      EXPECT(memcmp(&sa, &sb, 4) == 0, "recipe %d tensor %d: scale %a on the device, %a on the CPU", r, i, (double)sb,
             (double)sa);
      OK(amp_fp8_scaler_history(a, (size_t)i, ha, r == 0 ? 16 : 1));
      OK(amp_fp8_scaler_history(b, (size_t)i, hb, r == 0 ? 16 : 1));
      EXPECT(memcmp(ha, hb, (r == 0 ? 16 : 1) * sizeof(float)) == 0, "recipe %d tensor %d: histories differ", r, i);
    }
    amp_fp8_scaler_destroy(a);
    amp_fp8_scaler_destroy(b);
  }
  {   /* stats: casts counted into the device block, moved by the update kernel */
    enum { NT = 5 };
    const size_t NX = t_quick() ? 10007 : 100003;
    amp_fp8_config c;
    amp_fp8_scaler *a = NULL, *b = NULL;
    amp_dtype fmts[NT] = { AMP_E4M3, AMP_E5M2, AMP_E4M3, AMP_E5M2, AMP_E4M3 };
    float *hx = (float *)xmalloc(NX * 4);
    unsigned char *qh = (unsigned char *)xmalloc(NX), *qd = (unsigned char *)xmalloc(NX);
    void *dx = dmalloc(NX * 4), *dq = dmalloc(NX);
    memset(&c, 0, sizeof c);
    c.history_len = 8; c.stats = 1;
    OK(amp_fp8_scaler_create(&a, amp_cpu(), &c, NT, fmts));
    OK(amp_fp8_scaler_create(&b, dev, &c, NT, fmts));
    for (int step = 0; step < 6; step++) {
      for (int i = 0; i < NT; i++) {
        float spread = step == 3 && i == 1 ? 1e5f : 1.0f;
        for (size_t e = 0; e < NX; e++) hx[e] = srand1() * spread * (float)(1u << (rnd() % 20)) * 1e-3f;
        up(dx, hx, NX * 4);
        OK(amp_quantize_ex(amp_cpu(), qh, fmts[i], hx, AMP_F32, NX, amp_fp8_scaler_scale_ptr(a, (size_t)i),
                           amp_fp8_scaler_amax_ptr(a, (size_t)i), amp_fp8_scaler_counts_ptr(a, (size_t)i)));
        OK(amp_quantize_ex(dev, dq, fmts[i], dx, AMP_F32, NX, amp_fp8_scaler_scale_ptr(b, (size_t)i),
                           amp_fp8_scaler_amax_ptr(b, (size_t)i), amp_fp8_scaler_counts_ptr(b, (size_t)i)));
        down(qd, dq, NX);
        EXPECT(memcmp(qh, qd, NX) == 0, "stats step %d tensor %d: codes differ", step, i);
      }
      OK(amp_fp8_scaler_update(a));
      OK(amp_fp8_scaler_update(b));
      for (int i = 0; i < NT; i++) {
        amp_fp8_stats sa, sb;
        uint64_t cur[4] = {1, 1, 1, 1};
        OK(amp_fp8_scaler_stats(a, (size_t)i, &sa));
        OK(amp_fp8_scaler_stats(b, (size_t)i, &sb));
        down(cur, amp_fp8_scaler_counts_ptr(b, (size_t)i), sizeof cur);
        EXPECT(sa.n == NX && sa.n == sb.n && sa.saturated == sb.saturated && sa.flushed == sb.flushed &&
                   sa.nan == sb.nan && memcmp(&sa.amax_used, &sb.amax_used, 4) == 0 &&
                   memcmp(&sa.scale_used, &sb.scale_used, 4) == 0,
               "stats step %d tensor %d: %llu %llu %llu on the device, %llu %llu %llu on the CPU", step, i,
               (unsigned long long)sb.n, (unsigned long long)sb.saturated, (unsigned long long)sb.flushed,
               (unsigned long long)sa.n, (unsigned long long)sa.saturated, (unsigned long long)sa.flushed);
        EXPECT(cur[0] == 0 && cur[1] == 0 && cur[2] == 0 && cur[3] == 0, "the update kernel left this step's counts");
      }
    }
    amp_fp8_scaler_destroy(a); amp_fp8_scaler_destroy(b);
    free(hx); free(qh); free(qd); amp__cu_free(ST, dx); amp__cu_free(ST, dq);
  }
}

static void scale_buffer_multiplies_by_the_device_scale(void) {
  size_t n = 100003;
  void *sc = NULL;
  amp_scale_params pr = params(2, 0.5f, 2000, 1, 0, 0, 0, 0);
  amp_scale_state s0 = state0(1024.0f, &pr);
  float dscale = 0;
  OK(amp__cu_scaler_create(ST, &sc, &s0, &pr, msg, sizeof msg));
  down(&dscale, amp__cu_scaler_scale_ptr(sc), 4);
  EXPECT(dscale == 1024.0f, "the scale at amp__cu_scaler_scale_ptr reads %g, want 1024", (double)dscale);
  for (int round = 0; round < 2; round++) {
    float scale = round ? 512.0f : 1024.0f;
    for (int t = 0; t < 3; t++) {
      size_t es = amp_dtype_size((amp_dtype)t);
      unsigned char *h = (unsigned char *)xmalloc(n * es), *r = (unsigned char *)xmalloc(n * es);
      void *d = dmalloc(n * es);
      for (size_t i = 0; i < n; i++) amp__store(h, (amp_dtype)t, i, srand1() * 100.0f);
      up(d, h, n * es);
      OK(amp__cu_scale_buffer(ST, sc, d, t, n, msg, sizeof msg));
      down(r, d, n * es);
      for (size_t i = 0; i < n; i++) {
        unsigned char want[4];
        amp__store(want, (amp_dtype)t, 0, host_elem(h, t, i) * scale);
        if (memcmp(want, r + i * es, es)) {
          EXPECT(0, "%s * %g element %zu: input %g, got %g", amp__dtype_name((amp_dtype)t), (double)scale, i,
                 (double)host_elem(h, t, i), (double)host_elem(r, t, i));
          break;
        }
      }
      free(h); free(r); amp__cu_free(ST, d);
    }
    OK(amp__cu_scaler_update(ST, sc, 1, msg, sizeof msg));   /* back off: 512 next round */
  }
  amp__cu_scaler_destroy(ST, sc);
}

/* amp_quantize_blocks on the device (the public function, so the CUDA table's entry too) against the
   CPU's: every kind, format and input type, partial blocks on both edges, leading dimensions above
   cols, inputs of every bit class (subnormals, zeros, huge; inf and NaN now and then): the same
   scales and codes, bit for bit, and the padding of q untouched. */
static void block_scaling_on_the_device_equals_the_cpus(void) {
  static const amp_dtype types[3] = {AMP_F32, AMP_F16, AMP_BF16};
  static const int shapes[][4] = { /* rows, cols, ldx, ldq */
    {1, 1, 1, 1}, {3, 33, 40, 35}, {130, 300, 301, 302}, {257, 129, 129, 129}, {1000, 1024, 1024, 1030} };
  for (int s = 0; s < 5; s++)
    for (int kind = 0; kind < 4; kind++)
      for (int f = 0; f < 2; f++)
        for (int t = 0; t < 3; t++) {
          const int rows = shapes[s][0], cols = shapes[s][1], ldx = shapes[s][2], ldq = shapes[s][3];
          const size_t es = amp_dtype_size(types[t]), xn = (size_t)rows * ldx, qn = (size_t)rows * ldq;
          const size_t sn = 4 * (size_t)(rows + 1) * (size_t)(cols / 32 + 1);   /* room for any kind's scales */
          const amp_dtype fp8 = f ? AMP_E5M2 : AMP_E4M3;
          unsigned char *hx = (unsigned char *)xmalloc(xn * es), *hq = (unsigned char *)xmalloc(qn), *hs = (unsigned char *)xmalloc(sn);
          unsigned char *gq = (unsigned char *)xmalloc(qn), *gs = (unsigned char *)xmalloc(sn);
          void *dx = dmalloc(xn * es), *dq = dmalloc(qn), *ds = dmalloc(sn);
          for (size_t i = 0; i < xn; i++) {   /* random f32 bits, half of them in 40 binades near 2^-27..2^12 */
            uint32_t u = rnd() << 16 ^ rnd();
            if (rnd() % 2) u = (u & 0x807fffffu) | ((uint32_t)(100 + rnd() % 40) << 23);
            if (es == 4) memcpy(hx + 4 * i, &u, 4);
            else { uint16_t h = (uint16_t)(u >> 16); memcpy(hx + 2 * i, &h, 2); }
            if ((t == 1 ? (hx[2 * i + 1] & 0x7c) == 0x7c : (amp__f32_bits(amp__load(hx, types[t], i)) & 0x7f800000u) == 0x7f800000u) &&
                rnd() % 256)
              memset(hx + es * i, 0, es);   /* inf and NaN rare: a block holding one is all NaN */
          }
          memset(hq, 0x5a, qn); memset(hs, 0x5a, sn);
          up(dx, hx, xn * es); up(dq, hq, qn); up(ds, hs, sn);
          OK(amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, fp8, rows, cols, hx, types[t], ldx, hq, ldq, hs));
          OK(amp_quantize_blocks(dev, (amp_block_scaling)kind, fp8, rows, cols, dx, types[t], ldx, dq, ldq, ds));
          down(gq, dq, qn); down(gs, ds, sn);
          size_t i = 0;
          while (i < sn && gs[i] == hs[i]) i++;
          EXPECT(i == sn, "kind %d %s %s %dx%d: scale byte %zu is 0x%02x on the device, 0x%02x on the CPU", kind, f ? "e5m2" : "e4m3",
                 amp__dtype_name(types[t]), rows, cols, i, i < sn ? gs[i] : 0, i < sn ? hs[i] : 0);
          i = 0;
          while (i < qn && gq[i] == hq[i]) i++;
          EXPECT(i == qn, "kind %d %s %s %dx%d: q byte %zu (row %zu col %zu) is 0x%02x on the device, 0x%02x on the CPU", kind,
                 f ? "e5m2" : "e4m3", amp__dtype_name(types[t]), rows, cols, i, i / ldq, i % ldq, i < qn ? gq[i] : 0, i < qn ? hq[i] : 0);
          free(hx); free(hq); free(hs); free(gq); free(gs);
          amp__cu_free(ST, dx); amp__cu_free(ST, dq); amp__cu_free(ST, ds);
        }
}

static void optimizer_state_round_trips_through_host(void) {
  size_t n[2] = {100, 5000};
  int32_t dt[2] = {AMP_F16, AMP_F32};
  int mis[2] = {0, 0};
  tset s;
  void *o = NULL;
  amp_optim_config h = hp(AMP_ADAM, 1e-3f, 0, 0, 0, 0, 0);
  amp_cu_optim_info info;
  float *a = (float *)xmalloc(5000 * 4), *b = (float *)xmalloc(5000 * 4);
  size_t len = 0;
  tset_make(&s, 2, n, dt, mis, 1.0f);
  OK(amp__cu_optim_create(ST, &o, s.t, 2, NULL, NULL, &h, msg, sizeof msg));
  EXPECT(amp__cu_optim_master(o, 1, &len) != NULL && len == 5000, "master(1): len %zu", len);
  EXPECT(amp__cu_optim_master(o, 2, &len) == NULL && len == 0, "master(2) of 2 tensors is not NULL");
  OK(amp__cu_optim_state_io(ST, o, 0, 0, a, 0, msg, sizeof msg));
  for (size_t j = 0; j < 100; j++)
    EXPECT(a[j] == amp__load(s.hm[0], AMP_F16, j), "master[%zu] %g is not the model copy %g", j, (double)a[j], (double)amp__load(s.hm[0], AMP_F16, j));
  for (int w = 0; w < 3; w++) {
    for (size_t j = 0; j < 5000; j++) a[j] = srand1();
    OK(amp__cu_optim_state_io(ST, o, 1, w, a, 1, msg, sizeof msg));
    OK(amp__cu_optim_state_io(ST, o, 1, w, b, 0, msg, sizeof msg));
    EXPECT(!memcmp(a, b, 5000 * 4), "slot %d does not read back what was written", w);
  }
  OK(amp__cu_optim_set_step(ST, o, 41, msg, sizeof msg));
  OK(amp__cu_optim_unscale(ST, o, NULL, msg, sizeof msg));   /* no scaler: inv_scale 1 */
  OK(amp__cu_optim_step(ST, o, NULL, 0, msg, sizeof msg));
  OK(amp__cu_optim_read(ST, o, &info, msg, sizeof msg));
  EXPECT(info.t == 42 && info.mul == 1.0f, "after set_step(41) and a step: t %lld mul %g, want 42 1", (long long)info.t, (double)info.mul);
  {   /* set_spike: the count and window as given; the clean step after it pushes its norm into slot next */
    amp__spike_window w;
    float norm0;
    memset(&w, 0, sizeof w);
    for (int j = 0; j < 37; j++) w.norm[j] = 1.0f + 0.01f * (float)j;
    w.count = 37; w.next = 37;
    OK(amp__cu_optim_set_spike(ST, o, 5, &w, msg, sizeof msg));
    OK(amp__cu_optim_read(ST, o, &info, msg, sizeof msg));
    EXPECT(info.spike_skips == 5 && memcmp(&info.window, &w, sizeof w) == 0, "after set_spike(5, 37 norms): spike_skips %lld, the "
           "window %s", (long long)info.spike_skips, memcmp(&info.window, &w, sizeof w) == 0 ? "equal" : "differs");
    norm0 = info.norm;
    OK(amp__cu_optim_unscale(ST, o, NULL, msg, sizeof msg));
    OK(amp__cu_optim_step(ST, o, NULL, 0, msg, sizeof msg));
    OK(amp__cu_optim_read(ST, o, &info, msg, sizeof msg));
    EXPECT(info.window.count == 38 && info.window.next == 38 && info.window.norm[37] == info.norm && info.spike_skips == 5 &&
           info.t == 43, "a clean step after set_spike: count %d next %d slot 37 %g (norm %g, before %g), spike_skips %lld, t %lld",
           (int)info.window.count, (int)info.window.next, (double)info.window.norm[37], (double)info.norm, (double)norm0,
           (long long)info.spike_skips, (long long)info.t);
    w.count = 101;
    expect_arg(amp__cu_optim_set_spike(ST, o, 0, &w, msg, sizeof msg), "count 101", "window count 101");
  }
  expect_arg(amp__cu_optim_state_io(ST, o, 2, 0, a, 0, msg, sizeof msg), "index 2", "index 2");
  {
    amp_optim_config h2 = h;
    h2.kind = AMP_SGD;
    expect_arg(amp__cu_optim_set_hparams(ST, o, &h2, msg, sizeof msg), "kind 0", "kind change");
  }
  free(a); free(b);
  amp__cu_optim_destroy(ST, o);
  tset_free(&s);
}

int main(void) {
  void *stream = NULL;
  amp_status st;
  /* A stream of our own: the legacy default stream cannot be captured into a graph. */
  if (amp__cu_stream_create(0, &stream, msg, sizeof msg) != AMP_OK) stream = NULL;
  st = amp_cuda_open(&dev, 0, stream);
  if (st == AMP_OK) ST = dev->cuda;
  RUN(launchers_reject_bad_arguments);
  RUN(device_step_coefficients_equal_the_cpu_optimizers);
  RUN(open_without_gpu_says_unsupported);
  if (st == AMP_ERR_UNSUPPORTED) {
    t_no_gpu("GPU tests of the scaler/optimizer kernels", amp_last_error());
    TEST_END();
  }
  if (st != AMP_OK) { printf("FAIL amp_cuda_open: %s\n", amp_last_error()); return 1; }
  RUN(scale_rule_on_device_follows_host_exactly);
  RUN(unscale_finds_norm_and_overflow_of_mixed_tensors);
  RUN(optimizers_match_host_reference);
  RUN(overflowing_step_leaves_state_bit_identical);
  if (stream) {
    RUN(captured_step_replays_like_eager);
    RUN(step_over_500_small_tensors_is_two_or_three_launches);
  } else t_no_gpu("graph tests (no stream of our own)", msg);
  RUN(device_casts_match_host_conversions_bit_for_bit);
  RUN(scale_buffer_multiplies_by_the_device_scale);
  RUN(fp8_quantize_and_scaler_match_the_cpu);
  RUN(optimizer_state_round_trips_through_host);
  RUN(block_scaling_on_the_device_equals_the_cpus);
  amp_device_close(dev);
  amp__cu_stream_destroy(stream);
  TEST_END();
}
