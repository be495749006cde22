/* tests/test_optim.c - master-copy optimizers: numerics against a double-precision transcription
   of the PyTorch formulas, model copy = master rounded, fault injection, clipping, gradient
   accumulation, AMP_CUSTOM, bad input, the SIMD and plain loops giving the same bits. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static double rndu(void) { return ((double)rnd() + 0.5) / 2147483648.0; }
static double rndn(void) { return sqrt(-2.0 * log(rndu())) * cos(6.283185307179586 * rndu()); }

static size_t dsize(amp_dtype t) { return amp_dtype_size(t); }
static const char *tname(amp_dtype t) { return t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : "f32"; }

/* The PyTorch formulas in double (torch.optim.SGD / Adam / AdamW docs; t from 1). */
typedef struct { double *p, *m, *v; long t; } ref_state;
static void ref_step(const amp_optim_config *c, ref_state *r, const double *g0, size_t n) {
  size_t i;
  r->t++;
  for (i = 0; i < n; i++) {
    double g = g0[i], p = r->p[i];
    if (c->kind == AMP_SGD) {
      if (c->weight_decay) g += c->weight_decay * p;
      if (c->momentum) {
        double b = r->t == 1 ? g : c->momentum * r->m[i] + (1.0 - c->dampening) * g;
        r->m[i] = b;
        g = c->nesterov ? g + c->momentum * b : b;
      }
      r->p[i] = p - c->lr * g;
    } else {
      double b1 = c->beta1 ? c->beta1 : 0.9, b2 = c->beta2 ? c->beta2 : 0.999, eps = c->eps ? c->eps : 1e-8, denom;
      if (c->kind == AMP_ADAMW) p *= 1.0 - (double)c->lr * c->weight_decay;
      else if (c->weight_decay) g += c->weight_decay * p;
      r->m[i] = b1 * r->m[i] + (1 - b1) * g;
      r->v[i] = b2 * r->v[i] + (1 - b2) * g * g;
      denom = sqrt(r->v[i]) / sqrt(1 - pow(b2, (double)r->t)) + eps;
      r->p[i] = p - c->lr / (1 - pow(b1, (double)r->t)) * r->m[i] / denom;
    }
  }
}

/* Checks the model copy equals the master rounded, bit for bit. */
static int model_is_master_rounded(const amp_optimizer *o, size_t idx, const void *w, amp_dtype t) {
  size_t n, i;
  const float *m = amp_optimizer_master(o, idx, &n);
  for (i = 0; i < n; i++) {
    if (t == AMP_F16 && ((const amp_f16 *)w)[i] != amp_f32_to_f16(m[i])) return 0;
    if (t == AMP_BF16 && ((const amp_bf16 *)w)[i] != amp_f32_to_bf16(m[i])) return 0;
    if (t == AMP_F32 && memcmp(&((const float *)w)[i], &m[i], 4)) return 0;
  }
  return 1;
}

/* 1000 steps (200 quick) of one config with a dynamic scaler, against the double reference. */
static void run_numerics(const char *name, amp_optim_config c, amp_dtype wt, amp_dtype gt) {
  enum { N = 257 };
  int steps = t_quick() ? 200 : 1000, s_i, bad_copy = 0;
  unsigned char w[N * 4], g[N * 4];
  double gd[N], worst = 0;
  ref_state r;
  amp_optimizer *o; amp_scaler *s;
  amp_scaler_config sc;
  size_t i;
  memset(&sc, 0, sizeof sc); sc.init_scale = 256; sc.growth_interval = 100;   /* the scale moves during the run */
  r.p = (double *)calloc(N, sizeof(double)); r.m = (double *)calloc(N, sizeof(double)); r.v = (double *)calloc(N, sizeof(double)); r.t = 0;
  for (i = 0; i < N; i++) { amp__store(w, wt, i, (float)rndn()); r.p[i] = amp__load(w, wt, i); }
  if (amp_optimizer_create(&o, amp_cpu(), &c) || amp_scaler_create(&s, amp_cpu(), &sc) || amp_optimizer_add_mixed(o, wt, w, gt, g, N)) {
    EXPECT(0, "%s: setup: %s", name, amp_last_error()); return;
  }
  for (s_i = 0; s_i < steps; s_i++) {
    float scale = amp_scaler_get_scale(s);
    for (i = 0; i < N; i++) {
      float x = (float)(rndn() * 0.1);
      amp__store(g, gt, i, x * scale);
      gd[i] = (double)amp__load(g, gt, i) * (double)amp__inv_scale(scale);  /* what the trainer's grad is */
    }
    amp_scaler_step(s, o); amp_scaler_update(s);
    ref_step(&c, &r, gd, N);
    if (!model_is_master_rounded(o, 0, w, wt)) bad_copy++;
  }
  {
    const float *m = amp_optimizer_master(o, 0, NULL);
    for (i = 0; i < N; i++) {
      double e = fabs(m[i] - r.p[i]) / (1.0 + fabs(r.p[i]));
      if (e > worst) worst = e;
    }
  }
  EXPECT(worst < 2e-5, "%s: after %d steps the fp32 master differs from the double reference by %g (relative)", name, steps, worst);
  EXPECT(bad_copy == 0, "%s: the model copy differed from the rounded master on %d steps", name, bad_copy);
  EXPECT(amp_optimizer_step_count(o) == steps, "%s: step count %ld, expected %d", name, amp_optimizer_step_count(o), steps);
  EXPECT(amp_scaler_get_scale(s) != 256, "%s: the scale should have grown during the run", name);
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
  free(r.p); free(r.m); free(r.v);
}

static void sgd_variants_match_the_pytorch_formulas(void) {
  amp_optim_config c;
  memset(&c, 0, sizeof c); c.kind = AMP_SGD; c.lr = 0.01f;
  run_numerics("sgd plain f16", c, AMP_F16, AMP_F16);
  c.momentum = 0.9f; run_numerics("sgd momentum bf16", c, AMP_BF16, AMP_BF16);
  c.nesterov = 1; run_numerics("sgd nesterov f16", c, AMP_F16, AMP_F16);
  c.nesterov = 0; c.dampening = 0.3f; run_numerics("sgd dampening f32 weights, f16 grads", c, AMP_F32, AMP_F16);
  c.weight_decay = 0.05f; run_numerics("sgd momentum+dampening+wd f16", c, AMP_F16, AMP_F16);
}
static void adam_and_adamw_match_the_pytorch_formulas(void) {
  amp_optim_config c;
  memset(&c, 0, sizeof c); c.kind = AMP_ADAM; c.lr = 1e-3f;
  run_numerics("adam f16", c, AMP_F16, AMP_F16);
  c.weight_decay = 0.01f; run_numerics("adam wd bf16", c, AMP_BF16, AMP_BF16);
  c.kind = AMP_ADAMW; c.weight_decay = 0.1f; run_numerics("adamw f16", c, AMP_F16, AMP_F16);
  c.beta1 = 0.8f; c.beta2 = 0.99f; c.eps = 1e-6f; run_numerics("adamw betas bf16 weights, f32 grads", c, AMP_BF16, AMP_F32);
}

/* Every f16 input, and floats across the whole range, through the plain loops' conversions
   (amp__o_load, amp__o_store) against the scalar functions. */
static void loop_conversions_equal_the_scalar_ones(void) {
  static uint16_t hs[65536], out[4096];
  static float fs[65536], in[4096];
  uint32_t h, u, bad = 0, badb = 0;
  for (h = 0; h < 65536; h++) hs[h] = (uint16_t)h;
  amp__o_load(fs, hs, AMP_F16, 0, 65536, 1.0f);
  for (h = 0; h < 65536; h++) {
    float a = amp_f16_to_f32((amp_f16)h), b = fs[h];
    if (memcmp(&a, &b, 4) && ++bad < 4) EXPECT(0, "load f16 0x%04x: expected %a, got %a", (unsigned)h, (double)a, (double)b);
  }
  for (u = 0; u < 0xFFFFF000u;) {
    size_t n = 0, i;
    for (; n < 4096 - 2 && u < 0xFFFFF000u; u += t_quick() ? 40961u : 4099u) {   /* plus exact ties */
      in[n++] = amp__bits_f32(u); in[n++] = amp__bits_f32((u & ~0x1FFFu) | 0x1000u); in[n++] = amp__bits_f32((u & ~0xFFFFu) | 0x8000u);
    }
    amp__o_store(out, AMP_F16, AMP_F32, 0, 0, 0, in, n);
    for (i = 0; i < n; i++)
      if (out[i] != amp_f32_to_f16(in[i]) && ++bad < 8) EXPECT(0, "store f16 %08x: expected 0x%04x got 0x%04x", (unsigned)amp__f32_bits(in[i]), amp_f32_to_f16(in[i]), out[i]);
    amp__o_store(out, AMP_BF16, AMP_F32, 0, 0, 0, in, n);
    for (i = 0; i < n; i++)
      if (out[i] != amp_f32_to_bf16(in[i]) && ++badb < 8) EXPECT(0, "store bf16 %08x: expected 0x%04x got 0x%04x", (unsigned)amp__f32_bits(in[i]), amp_f32_to_bf16(in[i]), out[i]);
  }
  EXPECT(bad == 0 && badb == 0, "%u f16 and %u bf16 mismatches", bad, badb);
}

/* Fault injection: inf/NaN in random grads on ~10% of the steps. */
static void snapshot(const amp_optimizer *o, unsigned char *buf, const void *w, size_t wbytes) {
  size_t i, k = 0;
  for (i = 0; i < o->count; i++) {
    int nm = amp__o_moments(&o->cfg);
    memcpy(buf + k, o->t[i].master, o->t[i].n * 4 * (size_t)(1 + nm)); k += o->t[i].n * 4 * (size_t)(1 + nm);
  }
  memcpy(buf + k, w, wbytes); k += wbytes;
  memcpy(buf + k, &o->step, sizeof o->step);
}
static void fault_run(amp_optim_config c, int inject, int steps, amp_f16 *w, int *skipped_ok, int *nskip) {
  enum { N = 300 };
  amp_f16 g[N];
  amp_optimizer *o; amp_scaler *s; amp_scaler_config sc;
  static unsigned char before[N * 16 + 64], after[N * 16 + 64];
  int st; size_t i;
  memset(&sc, 0, sizeof sc); sc.init_scale = 1024; sc.fixed = 1;
  rng_state = 12345;
  for (i = 0; i < N; i++) w[i] = amp_f32_to_f16((float)rndn());
  amp_optimizer_create(&o, amp_cpu(), &c); amp_scaler_create(&s, amp_cpu(), &sc);
  amp_optimizer_add(o, AMP_F16, w, g, 100); amp_optimizer_add(o, AMP_F16, w + 100, g + 100, N - 100);
  *skipped_ok = 1; *nskip = 0;
  for (st = 0; st < steps; st++) {
    int fault = rnd() % 10 == 0;
    uint32_t where = rnd() % N, kind = rnd() % 3;
    for (i = 0; i < N; i++) g[i] = amp_f32_to_f16((float)(rndn() * 0.05 * 1024));
    if (fault) {
      if (!inject) continue;    /* the clean run never sees this step */
      g[where] = kind == 0 ? 0x7C00 : kind == 1 ? 0xFC00 : 0x7E01;   /* +inf, -inf, NaN */
      snapshot(o, before, w, sizeof(amp_f16) * N);
    }
    amp_scaler_step(s, o); amp_scaler_update(s);
    if (fault) {
      snapshot(o, after, w, sizeof(amp_f16) * N);
      if (memcmp(before, after, sizeof before) || !amp_scaler_last_skipped(s)) *skipped_ok = 0;
      (*nskip)++;
    }
  }
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}
static void skipped_steps_change_nothing_and_equal_a_run_without_them(void) {
  amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
  int k, steps = t_quick() ? 60 : 400;
  for (k = 0; k < 3; k++) {
    amp_f16 wa[300], wb[300];
    int ok, nskip, ok2, nskip2;
    amp_optim_config c; memset(&c, 0, sizeof c);
    c.kind = kinds[k]; c.lr = 0.01f; c.momentum = kinds[k] == AMP_SGD ? 0.9f : 0.0f; c.weight_decay = 0.01f; c.max_grad_norm = 1.0f;
    fault_run(c, 1, steps, wa, &ok, &nskip);
    fault_run(c, 0, steps, wb, &ok2, &nskip2);
    EXPECT(ok, "kind %d: a skipped step changed master, moments, model copy or step count", (int)kinds[k]);
    EXPECT(nskip > steps / 20, "kind %d: only %d faults were injected", (int)kinds[k], nskip);
    EXPECT(memcmp(wa, wb, sizeof wa) == 0, "kind %d: the run with %d faults differs from the run that never saw them", (int)kinds[k], nskip);
  }
}

static void clipping_uses_the_global_norm_of_the_unscaled_grads(void) {
  enum { N1 = 1000, N2 = 37 };
  static float w1[N1], g1[N1], w2[N2], g2[N2];
  amp_f16 wh[N2], gh[N2];
  double sum = 0, norm, coef;
  amp_optim_config c; amp_optimizer *o; amp_scaler *s; amp_scaler_config sc;
  size_t i; float scale = 4096;
  memset(&c, 0, sizeof c); c.kind = AMP_SGD; c.lr = 1.0f; c.max_grad_norm = 2.0f;
  memset(&sc, 0, sizeof sc); sc.init_scale = scale;
  for (i = 0; i < N1; i++) { w1[i] = 0; g1[i] = (float)rndn() * scale; sum += ((double)g1[i] / scale) * ((double)g1[i] / scale); }
  for (i = 0; i < N2; i++) { wh[i] = 0; gh[i] = amp_f32_to_f16((float)rndn() * scale); sum += pow(amp_f16_to_f32(gh[i]) / scale, 2); }
  (void)w2; (void)g2;
  norm = sqrt(sum); coef = 2.0 / (norm + 1e-6);
  amp_optimizer_create(&o, amp_cpu(), &c); amp_scaler_create(&s, amp_cpu(), &sc);
  amp_optimizer_add(o, AMP_F32, w1, g1, N1); amp_optimizer_add(o, AMP_F16, wh, gh, N2);
  amp_scaler_unscale(s, o);
  EXPECT(fabs(amp_optimizer_grad_norm(o) - norm) <= 1e-6 * norm, "norm expected %.9g, got %.9g", norm, (double)amp_optimizer_grad_norm(o));
  amp_scaler_step(s, o); amp_scaler_update(s);
  for (i = 0; i < N1; i++) {
    double want = -(double)g1[i] / scale * coef;
    if (fabs(w1[i] - want) > 1e-6 * fabs(want) + 1e-12) { EXPECT(0, "w1[%zu]: expected %.9g got %.9g (coef %.9g)", i, want, (double)w1[i], coef); break; }
  }
  { /* the same with the norm under the limit: coefficient 1 */
    float w[2] = {0, 0}, g[2] = {3 * 8, 4 * 8};
    amp_optimizer *o2; amp_scaler *s2; sc.init_scale = 8; c.max_grad_norm = 10;
    amp_optimizer_create(&o2, amp_cpu(), &c); amp_scaler_create(&s2, amp_cpu(), &sc); amp_optimizer_add(o2, AMP_F32, w, g, 2);
    amp_scaler_step(s2, o2);
    EXPECT(amp_optimizer_grad_norm(o2) == 5 && w[0] == -3 && w[1] == -4, "norm 5 < 10: no clipping: norm %g w %g %g", (double)amp_optimizer_grad_norm(o2), (double)w[0], (double)w[1]);
    amp_optimizer_destroy(o2); amp_scaler_destroy(s2);
  }
  EXPECT(fabs(amp__clip_coef(5.0f, 1.0f) - 1.0 / (5.0 + 1e-6)) < 1e-7, "clip coef(5, 1) = %.9g", (double)amp__clip_coef(5.0f, 1.0f));
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

/* Finite grads near 1.8e19 (f32 and bf16) square past FLT_MAX: the norm must stay finite (the sum
   in double), so the clip coefficient is max_norm / norm and the step moves every weight by
   lr * g * coef, not by 0 (a float sum would give norm inf, coefficient 0). */
static void huge_finite_grads_give_a_finite_norm_and_a_clipped_step(void) {
  enum { N = 1003 };
  static float w[N], g[N];
  amp_bf16 wb[N], gb[N];
  amp_optim_config c; amp_optimizer *o = NULL; amp_scaler *s = NULL; amp_scaler_config sc;
  double sum = 0, norm, coef;
  size_t i;
  memset(&c, 0, sizeof c); c.kind = AMP_SGD; c.lr = 0.5f; c.max_grad_norm = 1.0f;
  memset(&sc, 0, sizeof sc); sc.init_scale = 1.0f;
  for (i = 0; i < N; i++) {
    w[i] = 1.0f; g[i] = (i % 3 ? 1.8e19f : -1.7e19f) * (1.0f + (float)(i % 7) / 64.0f);
    wb[i] = amp_f32_to_bf16(1.0f); gb[i] = amp_f32_to_bf16(g[i]);
    sum += (double)g[i] * g[i] + (double)amp_bf16_to_f32(gb[i]) * amp_bf16_to_f32(gb[i]);
  }
  norm = sqrt(sum); coef = 1.0 / (norm + 1e-6);
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_scaler_create(&s, amp_cpu(), &sc) != AMP_OK) {
    EXPECT(0, "create: %s", amp_last_error()); amp_optimizer_destroy(o); return;
  }
  amp_optimizer_add(o, AMP_F32, w, g, N); amp_optimizer_add(o, AMP_BF16, wb, gb, N);
  EXPECT(amp_scaler_unscale(s, o) == AMP_OK, "unscale: %s", amp_last_error());
  EXPECT(fabs(amp_optimizer_grad_norm(o) - norm) <= 1e-6 * norm, "norm: expected %.9g, got %.9g", norm, (double)amp_optimizer_grad_norm(o));
  EXPECT(amp_scaler_step(s, o) == AMP_OK && amp_scaler_last_skipped(s) == 0, "step: %s", amp_last_error());
  for (i = 0; i < N; i++) {
    double want = 1.0 - 0.5 * (double)g[i] * coef;
    if (fabs(w[i] - want) > 1e-6) { EXPECT(0, "w[%zu]: g %g, expected %.9g, got %.9g (coef %.9g)", i, (double)g[i], want, (double)w[i], coef); break; }
  }
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

static void gradient_accumulation_unscales_once_at_a_fixed_scale(void) {
  enum { N = 64, MICRO = 4 };
  float wa[N], wb[N], ga[N], gb[N], parts[MICRO][N];
  amp_optim_config c; amp_optimizer *oa, *ob; amp_scaler *s;
  int k; size_t i; float scale0;
  memset(&c, 0, sizeof c); c.kind = AMP_ADAMW; c.lr = 0.01f;
  for (i = 0; i < N; i++) { wa[i] = wb[i] = (float)rndn(); ga[i] = gb[i] = 0; }
  amp_scaler_create(&s, amp_cpu(), NULL);
  amp_optimizer_create(&oa, amp_cpu(), &c); amp_optimizer_create(&ob, amp_cpu(), &c);
  amp_optimizer_add(oa, AMP_F32, wa, ga, N); amp_optimizer_add(ob, AMP_F32, wb, gb, N);
  scale0 = amp_scaler_get_scale(s);
  for (k = 0; k < MICRO; k++) {   /* micro-batches: backward at the same scale, grads accumulate */
    EXPECT(amp_scaler_get_scale(s) == scale0, "scale moved within the accumulation: %g", (double)amp_scaler_get_scale(s));
    for (i = 0; i < N; i++) { parts[k][i] = (float)rndn() * scale0; ga[i] += parts[k][i]; }
  }
  /* summed in the same order as ga (micro-batch by micro-batch), so that -Ofast, which may
     reassociate a sum written the other way round, still gives the same grads */
  for (i = 0; i < N; i++) gb[i] = 0;
  for (k = 0; k < MICRO; k++) for (i = 0; i < N; i++) gb[i] += parts[k][i];
  EXPECT(amp_scaler_unscale(s, oa) == AMP_OK, "unscale once: %s", amp_last_error());
  EXPECT(amp_scaler_unscale(s, oa) == AMP_ERR_STATE, "a second unscale in the same iteration is refused");
  amp_scaler_step(s, oa); amp_scaler_step(s, ob); amp_scaler_update(s);
  EXPECT(memcmp(wa, wb, sizeof wa) == 0, "accumulated step differs from a step on the summed grads");
  EXPECT(wa[0] != parts[0][0] && amp_optimizer_step_count(oa) == 1, "one update: steps %ld", amp_optimizer_step_count(oa));
  amp_optimizer_destroy(oa); amp_optimizer_destroy(ob); amp_scaler_destroy(s);
}

static int custom_calls; static float custom_seen[8]; static size_t custom_idx; static long custom_step_seen;
static void my_step(void *user, float *master, const float *grad, size_t n, size_t index, long step) {
  size_t i;
  custom_calls++; custom_idx = index; custom_step_seen = step;
  for (i = 0; i < n; i++) { custom_seen[i] = grad[i]; master[i] -= *(float *)user * grad[i]; }
}
static void custom_step_gets_unscaled_fp32_grads_and_writes_the_model(void) {
  amp_f16 w[4], g[4];
  float lr = 0.5f;
  amp_optim_config c; amp_optimizer *o; amp_scaler *s; amp_scaler_config sc;
  int i;
  memset(&c, 0, sizeof c); c.kind = AMP_CUSTOM; c.custom_step = my_step; c.custom_user = &lr;
  memset(&sc, 0, sizeof sc); sc.init_scale = 1024;
  for (i = 0; i < 4; i++) { w[i] = amp_f32_to_f16(1.0f); g[i] = amp_f32_to_f16(1024.0f * (float)(i + 1) * 0.25f); }
  amp_optimizer_create(&o, amp_cpu(), &c); amp_scaler_create(&s, amp_cpu(), &sc);
  amp_optimizer_add(o, AMP_F16, w, g, 4);
  amp_scaler_step(s, o); amp_scaler_update(s);
  EXPECT(custom_calls == 1 && custom_idx == 0 && custom_step_seen == 1, "calls %d index %zu step %ld", custom_calls, custom_idx, custom_step_seen);
  EXPECT(custom_seen[3] == 1.0f && custom_seen[0] == 0.25f, "unscaled grads: %g %g", (double)custom_seen[0], (double)custom_seen[3]);
  EXPECT(amp_f16_to_f32(w[3]) == 0.5f && model_is_master_rounded(o, 0, w, AMP_F16), "model copy written: %g", (double)amp_f16_to_f32(w[3]));
  g[1] = 0x7C00;
  amp_scaler_step(s, o); amp_scaler_update(s);
  EXPECT(custom_calls == 1, "a skipped step does not call custom_step: %d calls", custom_calls);
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

/* One optimizer over tensors of every length 1..40 and one of 1031 (every tail of the 8- and
   16-lane loops, of the scan's 32 lanes and of the 512-element blocks a split or absent master and
   a stochastic copy step in), each starting at a different element offset, run for 12 steps (one
   of them with an inf grad: skipped) with the plain loops and with each SIMD level the CPU has:
   masters (for a split master its remainders), moments, model copies and grad norms must be
   bit-identical. Every kind of the list with every model copy the step writes: f16/bf16/f32
   copies, a float copy rounded to bf16 or f16 (round_to), a bf16 copy rounded stochastically, the
   split master and no master. */
enum { SP_NT = 41, SP_TOT = 40 * 41 / 2 + 1031 + 4 * SP_NT };
typedef struct sp_run {
  float master[SP_TOT], m[SP_TOT], v[SP_TOT], norm[12];
  uint16_t rem[SP_TOT];
  unsigned char w[SP_TOT * 4];
} sp_run;
typedef struct sp_mode { amp_dtype wt, rt; int sr, master_mode; const char *name; } sp_mode;
static void sp_one(sp_run *r, const amp_optim_config *c, const sp_mode *md, amp_dtype gt, int level) {
  static unsigned char w[SP_TOT * 4], g[SP_TOT * 4];
  size_t off[SP_NT], len[SP_NT], i, j, at = 0;
  amp_dtype wt = md->wt;
  amp_optimizer *o; amp_scaler *s; int st;
  rng_state = 1234;
  memset(r, 0, sizeof *r);
  for (j = 0; j < SP_NT; j++) { len[j] = j < 40 ? j + 1 : 1031; at += j % 4; off[j] = at; at += len[j]; }
  for (i = 0; i < SP_TOT; i++) amp__store(w, wt, i, (float)rndn());
  amp__opt_simd = level;
  amp_optimizer_create(&o, amp_cpu(), c); amp_scaler_create(&s, amp_cpu(), NULL);
  for (j = 0; j < SP_NT; j++) {
    amp_tensor_desc t;
    memset(&t, 0, sizeof t);
    t.weights = w + off[j] * dsize(wt); t.dtype = wt; t.grads = g + off[j] * dsize(gt); t.grad_dtype = gt == AMP_F32 ? AMP_GRAD_F32 : gt; t.n = len[j];
    t.round_to = md->rt; t.stochastic = md->sr; t.master_mode = md->master_mode;
    if (amp_optimizer_add_tensor(o, &t) != AMP_OK) { EXPECT(0, "%s: add: %s", md->name, amp_last_error()); break; }
  }
  for (st = 0; st < 12; st++) {
    for (i = 0; i < SP_TOT; i++) amp__store(g, gt, i, (float)(rndn() * 65536.0 * (st % 3 ? 0.01 : 3.0)));
    if (st == 5) amp__store(g, gt, off[17] + 3, INFINITY);
    amp_scaler_step(s, o); amp_scaler_update(s);
    r->norm[st] = amp_optimizer_grad_norm(o);
  }
  for (j = 0, at = 0; j < amp_optimizer_count(o); j++, at += len[j - 1]) {
    if (o->t[j].master) memcpy(r->master + at, o->t[j].master, len[j] * 4);
    if (o->t[j].rem) memcpy(r->rem + at, o->t[j].rem, len[j] * 2);
    if (o->t[j].m) memcpy(r->m + at, o->t[j].m, len[j] * 4);
    if (o->t[j].v) memcpy(r->v + at, o->t[j].v, len[j] * 4);
  }
  memcpy(r->w, w, sizeof r->w);
  amp__opt_simd = -1;
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}
static void simd_and_plain_loops_give_the_same_bits(void) {
  static sp_run plain, simd;
  static const sp_mode modes[] = {
    {AMP_F16, AMP_F32, 0, AMP_MASTER_F32, "f16 copy"}, {AMP_BF16, AMP_F32, 0, AMP_MASTER_F32, "bf16 copy"},
    {AMP_F32, AMP_F32, 0, AMP_MASTER_F32, "f32 copy"}, {AMP_F32, AMP_BF16, 0, AMP_MASTER_F32, "f32 copy round_to bf16"},
    {AMP_F32, AMP_F16, 0, AMP_MASTER_F32, "f32 copy round_to f16"},
    {AMP_BF16, AMP_F32, 1, AMP_MASTER_F32, "bf16 copy stochastic"},
    {AMP_BF16, AMP_F32, 0, AMP_MASTER_SPLIT, "bf16 AMP_MASTER_SPLIT"},
    {AMP_BF16, AMP_F32, 1, AMP_MASTER_NONE, "bf16 AMP_MASTER_NONE"},
  };
  amp_dtype types[3] = {AMP_F16, AMP_BF16, AMP_F32};
  int k, b, level, levels = 0;
  size_t a;
#ifdef AMP__X86_SIMD
  levels = amp__cpu_level();
#elif defined(AMP__NEON_SIMD)
  levels = 1;   /* the NEON loops */
#endif
  if (!levels) { printf("skipped: no SIMD loops here (the plain loops only)\n"); return; }
  for (k = 0; k < 8; k++) for (a = 0; a < sizeof modes / sizeof modes[0]; a++) for (b = 0; b < 3; b++) {
    amp_optim_config c;
    const sp_mode *md = &modes[a];
    memset(&c, 0, sizeof c); c.lr = 0.01f;
    if (k == 0) c.kind = AMP_SGD;
    else if (k == 1) { c.kind = AMP_SGD; c.momentum = 0.9f; c.weight_decay = 0.01f; c.dampening = 0.1f; }
    else if (k == 2) { c.kind = AMP_SGD; c.momentum = 0.9f; c.nesterov = 1; c.max_grad_norm = 50.0f; }
    else if (k == 3) { c.kind = AMP_ADAM; c.weight_decay = 0.01f; }
    else if (k == 4) { c.kind = AMP_ADAMW; c.weight_decay = 0.1f; c.max_grad_norm = 20.0f; }
    else if (k == 5) { c.kind = AMP_ADAM; c.beta1 = 0.8f; c.beta2 = 0.99f; c.eps = 1e-6f; }
    else if (k == 6) { c.kind = AMP_LION; c.lr = 1e-3f; }
    else { c.kind = AMP_LION; c.lr = 3e-3f; c.weight_decay = 0.1f; c.beta1 = 0.95f; c.beta2 = 0.98f; c.max_grad_norm = 30.0f; }
    if (t_quick() && (k + (int)a + b) % 3) continue;   /* AMP_TEST_QUICK: a third of the cases */
    sp_one(&plain, &c, md, types[b], 0);
    for (level = 1; level <= levels; level++) {
      size_t i;
      sp_one(&simd, &c, md, types[b], level);
      for (i = 0; i < SP_TOT; i++)
        if (memcmp(&plain.master[i], &simd.master[i], 4) || memcmp(&plain.m[i], &simd.m[i], 4) || memcmp(&plain.v[i], &simd.v[i], 4) ||
            plain.rem[i] != simd.rem[i]) break;
      EXPECT(i == SP_TOT, "config %d %s grads %s level %d: element %zu: master %a/%a m %a/%a v %a/%a rem %04x/%04x (plain/simd)", k,
             md->name, tname(types[b]), level, i, i < SP_TOT ? (double)plain.master[i] : 0.0, i < SP_TOT ? (double)simd.master[i] : 0.0,
             i < SP_TOT ? (double)plain.m[i] : 0.0, i < SP_TOT ? (double)simd.m[i] : 0.0, i < SP_TOT ? (double)plain.v[i] : 0.0,
             i < SP_TOT ? (double)simd.v[i] : 0.0, i < SP_TOT ? plain.rem[i] : 0u, i < SP_TOT ? simd.rem[i] : 0u);
      for (i = 0; i < SP_TOT * dsize(md->wt) && plain.w[i] == simd.w[i]; i++) continue;
      EXPECT(i == SP_TOT * dsize(md->wt), "config %d %s grads %s level %d: the model copies differ at byte %zu", k, md->name,
             tname(types[b]), level, i);
      EXPECT(memcmp(plain.norm, simd.norm, sizeof plain.norm) == 0, "config %d %s grads %s level %d: grad norms differ: step 0 %a/%a, step 11 %a/%a", k,
             md->name, tname(types[b]), level, (double)plain.norm[0], (double)simd.norm[0], (double)plain.norm[11], (double)simd.norm[11]);
    }
  }
}

/* The scan on its own: amp__o_scan and amp__o_scan_with_stats at each SIMD level against the plain
   loops (amp__opt_simd = 0), the double sum of squares compared bit for bit (the grad norm above is
   a float, which hides a wrong order of the double adds), the inf/NaN flag and the stats' counts
   and amax. Grads spread over many binades (so the order of the adds shows in the last bits), every
   length 1..70 (every tail of the 4-, 8-, 16- and 32-lane rounds) and longer ones past the vector
   loops' 4096-element count flush, at offsets 0..3, inverse scales 1, 2^-16 and 3, with zeros,
   subnormals, inf and NaN planted in some. */
static void scan_sums_equal_the_plain_loop_bit_for_bit(void) {
  enum { MAXN = 9000 + 4 };
  static unsigned char g[MAXN * 4];
  static const size_t longs[] = {1031, 4096, 4096 + 37, 9000};
  amp_dtype types[3] = {AMP_F32, AMP_F16, AMP_BF16};
  float invs[3] = {1.0f, 1.0f / 65536.0f, 3.0f};
  int levels = 0, level, b, vi, plant, stats;
  size_t c;
#ifdef AMP__X86_SIMD
  levels = amp__cpu_level();
#elif defined(AMP__NEON_SIMD)
  levels = 1;
#endif
  if (!levels) { printf("skipped: no SIMD loops here (the plain loops only)\n"); return; }
  rng_state = 4242;
  for (b = 0; b < 3; b++) for (vi = 0; vi < 3; vi++) for (plant = 0; plant < 2; plant++) for (c = 0; c < 70 + 4; c++) {
    amp_dtype t = types[b];
    size_t n = c < 70 ? c + 1 : longs[c - 70], off = c % 4, i;
    int span = 6;   /* 2^-6 .. 2^6: squares of comparable size, so a different order of the adds shows */
    if (t_quick() && c >= 70 && (b + vi + plant) % 2) continue;
    for (i = 0; i < n + off; i++) {
      double x = rndn() * ldexp(1.0, (int)(rnd() % (unsigned)(2 * span + 1)) - span);
      unsigned r = n >= 4 && i == off ? 0u : n >= 4 && i == off + 1 ? 1u : rnd() % 16;
      if (r == 0) x = 0.0;
      amp__store(g, t, i, (float)x);
      if (r == 1) {   /* a subnormal of the type, written as bits (-Ofast's flush-to-zero would make a converted one 0) */
        uint32_t sub = (rnd() % 2 ? 0x80000000u : 0u) | (1u + rnd() % (t == AMP_F32 ? 0x7fffffu : t == AMP_F16 ? 0x3ffu : 0x7fu));
        if (t == AMP_F32) memcpy(g + i * 4, &sub, 4);
        else { uint16_t h = (uint16_t)((sub >> 16) | (sub & 0xffffu)); memcpy(g + i * 2, &h, 2); }
      }
    }
    if (plant) { amp__store(g, t, off + n / 2, plant && c % 2 ? NAN : -INFINITY); }
    for (stats = 0; stats < 2; stats++) {
      double want = 0.25, got;
      int want_bad = 0, got_bad;
      amp__gstat ws, gs;
      memset(&ws, 0, sizeof ws);
      amp__opt_simd = 0;
      if (stats) amp__o_scan_with_stats(g + off * dsize(t), t, n, invs[vi], &want, &want_bad, &ws);
      else amp__o_scan(g + off * dsize(t), t, n, invs[vi], &want, &want_bad);
      for (level = 1; level <= levels; level++) {
        got = 0.25; got_bad = 0;
        memset(&gs, 0, sizeof gs);
        amp__opt_simd = level;
        if (stats) amp__o_scan_with_stats(g + off * dsize(t), t, n, invs[vi], &got, &got_bad, &gs);
        else amp__o_scan(g + off * dsize(t), t, n, invs[vi], &got, &got_bad);
        EXPECT(memcmp(&want, &got, sizeof got) == 0 && want_bad == got_bad, "%s n %zu inv %g%s level %d: sum %a bad %d, plain %a bad %d",
               tname(t), n, (double)invs[vi], stats ? " (stats)" : "", level, got, got_bad, want, want_bad);
        EXPECT(!stats || (gs.amax_bits == ws.amax_bits && gs.nonfinite == ws.nonfinite && gs.zero == ws.zero && gs.subnormal == ws.subnormal),
               "%s n %zu level %d stats: amax %08x inf/NaN %llu zero %llu subnormal %llu, plain %08x %llu %llu %llu", tname(t), n, level,
               gs.amax_bits, (unsigned long long)gs.nonfinite, (unsigned long long)gs.zero, (unsigned long long)gs.subnormal,
               ws.amax_bits, (unsigned long long)ws.nonfinite, (unsigned long long)ws.zero, (unsigned long long)ws.subnormal);
      }
      EXPECT(want_bad == plant, "%s n %zu: bad %d with%s a planted inf/NaN", tname(t), n, want_bad, plant ? "" : "out");
      EXPECT(!stats || n < 4 || (ws.zero > 0 && ws.subnormal > 0), "%s n %zu inv %g: the test plants zeros and subnormals: %llu %llu %llu", tname(t), n, (double)invs[vi], (unsigned long long)ws.zero, (unsigned long long)ws.subnormal, (unsigned long long)ws.nonfinite);
      amp__opt_simd = -1;
    }
  }
}

/* The vector helpers the step's extra stores use, on the values a step cannot reach with a finite
   loss (NaN with payloads, inf, subnormals, the split's ties and round-ups to inf) and random bits:
   the split master's encode/decode, the stochastic rounding and Lion's sign, each against its
   scalar function, at every SIMD level the CPU has. */
#ifdef AMP__X86_SIMD
static AMP__AVX2 void sign8_of(const float *x, float *out) { _mm256_storeu_ps(out, amp__sign8(_mm256_loadu_ps(x))); }
static AMP__AVX512 void sign16_of(const float *x, float *out) { _mm512_storeu_ps(out, amp__sign16(_mm512_loadu_ps(x))); }
#endif
static void vector_helpers_equal_the_scalar_functions_on_special_values(void) {
#ifdef AMP__X86_SIMD
  enum { N = 4096 + 5 };
  static float x[N], back_s[N], back_v[N];
  static amp_bf16 ws[N], wv[N];
  static uint16_t rs[N], rv[N];
  static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                     0x7f800001u, 0x7fffffffu, 0xffffffffu, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
                                     0xff7fffffu, 0x7f7f8000u, 0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00008000u,
                                     0x3f80ffffu, 0x3f807fffu, 0x7f7f7fffu};
  uint64_t key = 0x0123456789abcdefull;
  size_t i, ns = sizeof special / sizeof special[0];
  int level, levels = amp__cpu_level();
  if (!levels) { printf("skipped: no SIMD loops here\n"); return; }
  rng_state = 99;
  for (i = 0; i < N; i++) {
    uint32_t u = i < ns ? special[i] : (rnd() << 16) ^ rnd();
    memcpy(&x[i], &u, 4);
  }
  for (level = 1; level <= levels; level++) {
    size_t k;
    for (k = 1; k <= N; k = k < 40 ? k + 1 : k * 3 + 1) {   /* every tail of the 8-lane loops */
      size_t i0 = k % 7;
      if (i0 + k > N) continue;
      amp__o_master_store(ws, rs, key, i0, x, k);
      amp__o_master_store_at(level, wv, rv, key, i0, x, k);
      EXPECT(memcmp(ws + i0, wv + i0, k * 2) == 0 && memcmp(rs + i0, rv + i0, k * 2) == 0, "split encode, %zu at %zu: differs", k, i0);
      amp__o_master_load(back_s, ws, rs, i0, k);
      amp__o_master_load_at(level, back_v, ws, rs, i0, k);
      EXPECT(memcmp(back_s, back_v, k * 4) == 0, "split decode, %zu at %zu: differs", k, i0);
      for (i = 0; i < k; i++) {   /* the split is exact: every non-NaN value comes back */
        uint32_t a, b;
        memcpy(&a, &x[i], 4); memcpy(&b, &back_v[i], 4);
        if ((a & 0x7fffffffu) <= 0x7f800000u && a != b) break;
      }
      EXPECT(i == k, "split round trip, %zu at %zu: element %zu %08x", k, i0, i, i < k ? (unsigned)amp_f32_to_bf16(x[i]) : 0u);
      amp__o_master_store(ws, NULL, key + k, i0, x, k);
      amp__o_master_store_at(level, wv, NULL, key + k, i0, x, k);
      EXPECT(memcmp(ws + i0, wv + i0, k * 2) == 0, "stochastic rounding, %zu at %zu: differs", k, i0);
      amp__o_master_load(back_s, ws, NULL, i0, k);
      amp__o_master_load_at(level, back_v, ws, NULL, i0, k);
      EXPECT(memcmp(back_s, back_v, k * 4) == 0, "bf16 widening, %zu at %zu: differs", k, i0);
    }
    for (i = 0; i + 16 <= N; i += 16) {
      float s8[8], s16[16];
      size_t j;
      if (level == 1) {
        sign8_of(x + i, s8);
        for (j = 0; j < 8; j++) { float e = amp__sign(x[i + j]); if (memcmp(&e, &s8[j], 4)) break; }
        EXPECT(j == 8, "sign8 at %zu", i + j);
      } else {
        sign16_of(x + i, s16);
        for (j = 0; j < 16; j++) { float e = amp__sign(x[i + j]); if (memcmp(&e, &s16[j], 4)) break; }
        EXPECT(j == 16, "sign16 at %zu", i + j);
      }
    }
  }
#elif defined(AMP__NEON_SIMD)
  /* NEON: Lion's sign on 4 lanes, and amp__rt4 (the model copy's round_to), on the special values
     and random bits (the split and stochastic stores run the portable loops on AArch64) */
  enum { N = 4096 + 4 };
  static float x[N];
  static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                     0x7f800001u, 0x7fffffffu, 0xffffffffu, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
                                     0xff7fffffu, 0x7f7f8000u, 0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00008000u,
                                     0x3f80ffffu, 0x3f807fffu, 0x7f7f7fffu, 0x477ff000u, 0x387fe000u, 0x33000001u};
  size_t i, j, ns = sizeof special / sizeof special[0];
  rng_state = 99;
  for (i = 0; i < N; i++) {
    uint32_t u = i < ns ? special[i] : (rnd() << 16) ^ rnd();
    memcpy(&x[i], &u, 4);
  }
  for (i = 0; i + 4 <= N; i += 4) {
    float s4[4], r16[4], rb16[4];
    vst1q_f32(s4, amp__sign4(vld1q_f32(x + i)));
    vst1q_f32(r16, amp__rt4(AMP_F16, vld1q_f32(x + i)));
    vst1q_f32(rb16, amp__rt4(AMP_BF16, vld1q_f32(x + i)));
    for (j = 0; j < 4; j++) { float e = amp__sign(x[i + j]); if (memcmp(&e, &s4[j], 4)) break; }
    EXPECT(j == 4, "sign4 at %zu", i + j);
    for (j = 0; j < 4; j++) { float e = amp__round_to(x[i + j], AMP_F16); if (memcmp(&e, &r16[j], 4)) break; }
    EXPECT(j == 4, "rt4 f16 at %zu", i + j);
    for (j = 0; j < 4; j++) { float e = amp__round_to(x[i + j], AMP_BF16); if (memcmp(&e, &rb16[j], 4)) break; }
    EXPECT(j == 4, "rt4 bf16 at %zu", i + j);
  }
#else
  printf("skipped: no SIMD loops here\n");
#endif
}

/* Grads given after add (llm.c makes its grads in the first backward): a float copy with round_to
   bf16 and a bf16 copy added with grads NULL are rounded and mastered at add; a step before the
   grads exist is AMP_ERR_STATE and changes nothing; once amp_optimizer_set_grads gives them, every
   step equals a run whose grads were given at add, bit for bit. set_grads refuses what add
   refuses. */
enum { LG_A = 37, LG_B = 50 };
typedef struct lg_rig { float wa[LG_A], ga[LG_A], pad[64]; amp_bf16 wb[LG_B]; float gb[LG_B]; amp_optimizer *o; } lg_rig;
static int lg_make(lg_rig *r, int late) {
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  amp_tensor_desc t;
  int i;
  memset(r->wa, 0, sizeof r->wa); memset(r->ga, 0, sizeof r->ga); memset(r->gb, 0, sizeof r->gb);
  for (i = 0; i < LG_A; i++) r->wa[i] = 0.3f + 0.0123f * (float)i;
  for (i = 0; i < LG_B; i++) r->wb[i] = amp_f32_to_bf16(-0.2f + 0.01f * (float)i);
  c.weight_decay = 0.1f;
  if (amp_optimizer_create(&r->o, amp_cpu(), &c) != AMP_OK) return 0;
  memset(&t, 0, sizeof t);
  t.weights = r->wa; t.dtype = AMP_F32; t.grads = late ? NULL : r->ga; t.n = LG_A; t.round_to = AMP_BF16;
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  t.weights = r->wb; t.dtype = AMP_BF16; t.grads = late ? NULL : r->gb; t.grad_dtype = AMP_GRAD_F32; t.n = LG_B;
  t.round_to = AMP_F32;
  return amp_optimizer_add_tensor(r->o, &t) == AMP_OK;
}
static void lg_grads(lg_rig *r, int step) {
  int i;
  for (i = 0; i < LG_A; i++) r->ga[i] = 0.05f * (float)((i * 7 + step * 3) % 11) - 0.25f;
  for (i = 0; i < LG_B; i++) r->gb[i] = 0.04f * (float)((i * 5 + step) % 13) - 0.2f;
}
static void grads_given_after_add_step_as_grads_given_at_add(void) {
  static lg_rig a, b;
  static float wa0[LG_A];
  static amp_bf16 wb0[LG_B];
  float other[LG_A];
  int step, i;
  amp_status st;
  if (!lg_make(&a, 0) || !lg_make(&b, 1)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  for (i = 0; i < LG_A; i++) EXPECT(b.wa[i] == amp_bf16_to_f32(amp_f32_to_bf16(0.3f + 0.0123f * (float)i)), "element %d not rounded at add", i);
  memcpy(wa0, b.wa, sizeof wa0); memcpy(wb0, b.wb, sizeof wb0);
  st = amp_optimizer_step(b.o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_optimizer_step") && strstr(amp_last_error(), "tensor 0") &&
         strstr(amp_last_error(), "amp_optimizer_set_grads"), "a step before the grads: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_optimizer_step_count(b.o) == 0 && memcmp(wa0, b.wa, sizeof wa0) == 0 && memcmp(wb0, b.wb, sizeof wb0) == 0,
         "the refused step changed something");
  EXPECT(amp_optimizer_set_grads(b.o, 0, b.ga) == AMP_OK, "set_grads 0: %s", amp_last_error());
  st = amp_optimizer_step(b.o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "tensor 1"), "one tensor still without grads: %s '%s'", amp_status_string(st), amp_last_error());
  /* refusals: NULL, out of range, the weights, another tensor's buffers */
  EXPECT(amp_optimizer_set_grads(NULL, 0, b.ga) == AMP_ERR_ARG, "o NULL");
  EXPECT(amp_optimizer_set_grads(b.o, 2, other) == AMP_ERR_ARG && strstr(amp_last_error(), "index 2"), "index 2: '%s'", amp_last_error());
  EXPECT(amp_optimizer_set_grads(b.o, 1, NULL) == AMP_ERR_ARG && strstr(amp_last_error(), "NULL"), "NULL: '%s'", amp_last_error());
  EXPECT(amp_optimizer_set_grads(b.o, 1, b.wb) == AMP_ERR_ARG && strstr(amp_last_error(), "weights"), "its weights: '%s'", amp_last_error());
  EXPECT(amp_optimizer_set_grads(b.o, 1, b.ga + 3) == AMP_ERR_ARG && strstr(amp_last_error(), "tensor 0"), "tensor 0's grads: '%s'", amp_last_error());
  EXPECT(amp_optimizer_set_grads(b.o, 1, b.wa) == AMP_ERR_ARG && strstr(amp_last_error(), "tensor 0"), "tensor 0's weights: '%s'", amp_last_error());
  EXPECT(b.o->t[1].g == NULL, "a refused set_grads changed the tensor");
  EXPECT(amp_optimizer_set_grads(b.o, 1, b.gb) == AMP_OK, "set_grads 1: %s", amp_last_error());
  for (step = 0; step < 6; step++) {
    lg_grads(&a, step); lg_grads(&b, step);
    EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "step %d: %s", step, amp_last_error());
  }
  EXPECT(memcmp(a.wa, b.wa, sizeof a.wa) == 0 && memcmp(a.wb, b.wb, sizeof a.wb) == 0 &&
         memcmp(a.o->t[0].master, b.o->t[0].master, LG_A * 4) == 0 && memcmp(a.o->t[1].v, b.o->t[1].v, LG_B * 4) == 0,
         "grads given late step differently from grads given at add");
  /* grads moved to another buffer mid-run: the step reads the new one */
  memcpy(other, b.ga, sizeof other);
  EXPECT(amp_optimizer_set_grads(b.o, 0, other) == AMP_OK, "moving the grads: %s", amp_last_error());
  for (i = 0; i < LG_A; i++) b.ga[i] = NAN;   /* the old buffer: a step reading it would skip */
  EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK && !amp_optimizer_last_skipped(b.o) &&
         memcmp(a.wa, b.wa, sizeof a.wa) == 0, "the moved grads were not the ones read");
  amp_optimizer_destroy(a.o); amp_optimizer_destroy(b.o);
}

/* amp_tensor_desc.grad_dtype: 0 (AMP_F32) is f32 beside a float copy, refused beside a 16-bit one
   (so a zeroed description never reads bf16 grads as floats); AMP_GRAD_F32 says f32 anywhere. */
static void a_zero_grad_dtype_beside_a_16_bit_copy_is_refused(void) {
  amp_bf16 w[8], w2[8];
  float g[8], g2[8];
  amp_tensor_desc t;
  amp_optimizer *o = NULL;
  amp_status st;
  int i;
  amp_optim_config c = amp_optimizer_defaults(AMP_SGD);
  for (i = 0; i < 8; i++) { w[i] = w2[i] = amp_f32_to_bf16(1.0f); g[i] = g2[i] = 0.5f; }
  c.lr = 0.1f;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
  memset(&t, 0, sizeof t);
  t.weights = w; t.dtype = AMP_BF16; t.grads = g; t.n = 8;
  st = amp_optimizer_add_tensor(o, &t);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add_tensor") && strstr(amp_last_error(), "grad_dtype") &&
         strstr(amp_last_error(), "AMP_GRAD_F32"), "zero grad_dtype beside bf16: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_optimizer_count(o) == 0, "a refused tensor was added");
  t.grad_dtype = AMP_GRAD_F32;
  EXPECT(amp_optimizer_add_tensor(o, &t) == AMP_OK && o->t[0].gtype == AMP_F32, "AMP_GRAD_F32: %s", amp_last_error());
  EXPECT(amp_optimizer_add_mixed(o, AMP_BF16, w2, AMP_GRAD_F32, g2, 8) == AMP_OK && o->t[1].gtype == AMP_F32,
         "AMP_GRAD_F32 in add_mixed: %s", amp_last_error());
  EXPECT(amp_optimizer_step(o) == AMP_OK && memcmp(w, w2, sizeof w) == 0 && w[0] != amp_f32_to_bf16(1.0f),
         "f32 grads said two ways step alike: %s", amp_last_error());
  EXPECT(amp_dtype_size(AMP_GRAD_F32) == 0, "AMP_GRAD_F32 is no format");
  amp_optimizer_destroy(o);
}

static void bad_input_is_refused_and_changes_nothing(void) {
  float w[8] = {0}, g[8] = {0}, w2[8] = {0};
  amp_optimizer *o = NULL;
  amp_optim_config c;
  amp_status st;
  struct { const char *field; float lr, wd, mom, damp, b1, b2, eps, mgn; int nesterov, kind; } cases[] = {
    {"lr", -1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {"lr", NAN, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"weight_decay", 0, -0.1f, 0, 0, 0, 0, 0, 0, 0, 0}, {"weight_decay", 0, INFINITY, 0, 0, 0, 0, 0, 0, 0, 0},
    {"momentum", 0, 0, -0.5f, 0, 0, 0, 0, 0, 0, 0}, {"dampening", 0, 0, 0.9f, 2.0f, 0, 0, 0, 0, 0, 0},
    {"nesterov", 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, {"nesterov", 0, 0, 0.9f, 0.1f, 0, 0, 0, 0, 1, 0},
    {"beta1", 0, 0, 0, 0, 1.0f, 0, 0, 0, 0, 1}, {"beta2", 0, 0, 0, 0, 0, -0.1f, 0, 0, 0, 1},
    {"eps", 0, 0, 0, 0, 0, 0, -1e-8f, 0, 0, 1}, {"max_grad_norm", 0, 0, 0, 0, 0, 0, 0, -1, 0, 1},
    {"kind", 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}, {"custom_step", 0, 0, 0, 0, 0, 0, 0, 0, 0, 3},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    memset(&c, 0, sizeof c);
    c.lr = cases[i].lr; c.weight_decay = cases[i].wd; c.momentum = cases[i].mom; c.dampening = cases[i].damp;
    c.beta1 = cases[i].b1; c.beta2 = cases[i].b2; c.eps = cases[i].eps; c.max_grad_norm = cases[i].mgn;
    c.nesterov = cases[i].nesterov; c.kind = (amp_optim_kind)cases[i].kind;
    o = (amp_optimizer *)&c;
    st = amp_optimizer_create(&o, amp_cpu(), &c);
    EXPECT(st == AMP_ERR_ARG && o == NULL && strstr(amp_last_error(), cases[i].field) && strstr(amp_last_error(), "amp_optimizer_create"),
           "case %zu (%s): %s '%s'", i, cases[i].field, amp_status_string(st), amp_last_error());
  }
  memset(&c, 0, sizeof c); c.momentum = 0.9f;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  EXPECT(amp_optimizer_add(o, AMP_F32, w, w, 8) == AMP_ERR_ARG && strstr(amp_last_error(), "weights"), "grads == weights: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, w, w + 4, 8) == AMP_ERR_ARG && strstr(amp_last_error(), "overlap"), "overlapping: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, w, g, 0) == AMP_ERR_ARG && strstr(amp_last_error(), "n is 0"), "n 0: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, NULL, g, 8) == AMP_ERR_ARG && strstr(amp_last_error(), "weights is NULL"), "NULL: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, w, NULL, 8) == AMP_ERR_ARG && strstr(amp_last_error(), "grads is NULL"), "NULL: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(o, (amp_dtype)9, w, g, 8) == AMP_ERR_ARG && strstr(amp_last_error(), "dtype 9"), "dtype: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(NULL, AMP_F32, w, g, 8) == AMP_ERR_ARG, "o NULL");
  EXPECT(amp_optimizer_count(o) == 0, "nothing was added: %zu", amp_optimizer_count(o));
  EXPECT(amp_optimizer_add(o, AMP_F32, w, g, 8) == AMP_OK, "a good add: %s", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, w, w2, 8) == AMP_ERR_ARG && strstr(amp_last_error(), "already added"), "the same weights twice: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, w2, g + 2, 4) == AMP_ERR_ARG && strstr(amp_last_error(), "already added"), "overlapping grads: '%s'", amp_last_error());
  EXPECT(amp_optimizer_count(o) == 1, "one tensor: %zu", amp_optimizer_count(o));
  EXPECT(amp_optimizer_set_lr(o, -1) == AMP_ERR_ARG && strstr(amp_last_error(), "lr -1"), "set_lr -1: '%s'", amp_last_error());
  EXPECT(amp_optimizer_master(o, 5, NULL) == NULL, "master of a missing index is NULL");
  amp_optimizer_destroy(o);
}

/* The manual's rule: the fp32 master is taken at add, from the model copy as it is then. Weights
   written after add are not seen: the master keeps the value at add, and the first update writes
   the model copy from it (here SGD with zero grads, so the update changes nothing else). */
static void the_master_is_taken_at_add(void) {
  amp_f16 w[3]; float g[3] = {0, 0, 0};
  amp_optim_config c; amp_optimizer *o = NULL; amp_scaler *s = NULL;
  const float *master;
  size_t n = 0;
  memset(&c, 0, sizeof c); c.kind = AMP_SGD; c.lr = 0.5f;
  w[0] = amp_f32_to_f16(1.0f); w[1] = amp_f32_to_f16(-2.0f); w[2] = amp_f32_to_f16(0.25f);
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_scaler_create(&s, amp_cpu(), NULL) != AMP_OK ||
      amp_optimizer_add_mixed(o, AMP_F16, w, AMP_F32, g, 3) != AMP_OK) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  w[0] = amp_f32_to_f16(7.0f);   /* written after add */
  master = amp_optimizer_master(o, 0, &n);
  EXPECT(master && n == 3 && master[0] == 1.0f && master[1] == -2.0f && master[2] == 0.25f,
         "master after add: n %zu, want 1 -2 0.25, got %g %g %g", n, master ? (double)master[0] : 0.0,
         master ? (double)master[1] : 0.0, master ? (double)master[2] : 0.0);
  EXPECT(amp_scaler_step(s, o) == AMP_OK && amp_scaler_update(s) == AMP_OK, "step: %s", amp_last_error());
  EXPECT(amp_f16_to_f32(w[0]) == 1.0f && amp_optimizer_step_count(o) == 1,
         "the first update writes the model copy from the master taken at add: want w0 1, got %g (steps %ld)",
         (double)amp_f16_to_f32(w[0]), amp_optimizer_step_count(o));
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

int main(void) {
  RUN(loop_conversions_equal_the_scalar_ones);
  RUN(sgd_variants_match_the_pytorch_formulas);
  RUN(adam_and_adamw_match_the_pytorch_formulas);
  RUN(skipped_steps_change_nothing_and_equal_a_run_without_them);
  RUN(clipping_uses_the_global_norm_of_the_unscaled_grads);
  RUN(huge_finite_grads_give_a_finite_norm_and_a_clipped_step);
  RUN(gradient_accumulation_unscales_once_at_a_fixed_scale);
  RUN(custom_step_gets_unscaled_fp32_grads_and_writes_the_model);
  RUN(simd_and_plain_loops_give_the_same_bits);
  RUN(scan_sums_equal_the_plain_loop_bit_for_bit);
  RUN(vector_helpers_equal_the_scalar_functions_on_special_values);
  RUN(grads_given_after_add_step_as_grads_given_at_add);
  RUN(a_zero_grad_dtype_beside_a_16_bit_copy_is_refused);
  RUN(bad_input_is_refused_and_changes_nothing);
  RUN(the_master_is_taken_at_add);
  TEST_END();
}
