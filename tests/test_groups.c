/* tests/test_groups.c - param groups (amp_optimizer_add_group) and amp_optimizer_add_tensor:
   two and three param groups against torch.optim (SGD with momentum, AdamW) on the same grads with
   one global clip, run by Debian's python3-torch; the master seeded bit for bit; round_to giving
   exactly the master rounded; every bad input refused with nothing changed; a skipped step
   leaving every group's weights and moments as they were; groups across a checkpoint. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIR "build/test"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static float rnds(void) { return (float)(((double)rnd() + 0.5) / 1073741824.0 - 1.0); }   /* (-1, 1) */
static uint32_t bits(float x) { return amp__f32_bits(x); }

static amp_scaler *fixed_scaler(float scale) {
  amp_scaler *s = NULL;
  amp_scaler_config c;
  memset(&c, 0, sizeof c);
  c.init_scale = scale; c.fixed = 1;
  if (amp_scaler_create(&s, amp_cpu(), &c) != AMP_OK) printf("  scaler: %s\n", amp_last_error());
  return s;
}

/* ---- against torch.optim -------------------------------------------------------------------- */

/* Three tensors in three groups: group 0 (the config's weight decay), group 1 (lr x 0.5, no decay),
   group 2 (lr x 2, decay 0.3). STEPS steps; set_lr halves the lr before step 4; clip at a norm the
   grads exceed. Grads arrive scaled by 1024 (exact) through a fixed scaler. torch gets the same
   unscaled grads, one param_group per amp.h group with lr = amp.h's lr * lr_scale (the f32
   product amp.h uses) and clip_grad_norm_ over all parameters. */
enum { NT = 3, STEPS = 6 };
static const size_t TN[NT] = {37, 20, 15};

static const char *TORCH_PY =
  "import sys, numpy as np, torch\n"
  "torch.set_num_threads(1)\n"
  "d = np.fromfile(sys.argv[1], dtype=np.float32)\n"
  "kind = int(d[0]); nt = int(d[1]); steps = int(d[2]); at = 3\n"
  "ns = [int(x) for x in d[at:at + nt]]; at += nt\n"
  "mom, maxn = float(d[at]), float(d[at + 1]); at += 2\n"
  "wd = [float(x) for x in d[at:at + nt]]; at += nt\n"
  "ps = []\n"
  "for n in ns:\n"
  "    ps.append(torch.nn.Parameter(torch.from_numpy(d[at:at + n].copy()))); at += n\n"
  "lrs = d[at:at + steps * nt].reshape(steps, nt); at += steps * nt\n"
  "groups = [{'params': [ps[k]], 'lr': float(lrs[0][k]), 'weight_decay': wd[k]} for k in range(nt)]\n"
  "if kind == 0: opt = torch.optim.SGD(groups, lr=1.0, momentum=mom)\n"
  "else: opt = torch.optim.AdamW(groups, lr=1.0)\n"
  "for s in range(steps):\n"
  "    for k in range(nt):\n"
  "        ps[k].grad = torch.from_numpy(d[at:at + ns[k]].copy()); at += ns[k]\n"
  "        opt.param_groups[k]['lr'] = float(lrs[s][k])\n"
  "    torch.nn.utils.clip_grad_norm_(ps, maxn)\n"
  "    opt.step()\n"
  "np.concatenate([p.detach().numpy() for p in ps]).astype(np.float32).tofile(sys.argv[2])\n";

static void torch_compare(amp_optim_kind kind) {
  const char *kname = kind == AMP_SGD ? "SGD" : "AdamW";
  const float lr = kind == AMP_SGD ? 0.05f : 0.01f, wd0 = kind == AMP_SGD ? 0.01f : 0.1f, max_norm = 1.5f;
  const float ls[NT] = {1.0f, 0.5f, 2.0f}, wd[NT] = {wd0, 0.0f, 0.3f};
  float *w[NT], *g[NT], *w0[NT], lrs[STEPS][NT], cur = lr;
  amp_optim_config c;
  amp_optimizer *o = NULL;
  amp_scaler *s = fixed_scaler(1024.0f);
  char in[256], out[256], py[256], cmd[1024];
  FILE *f;
  int k, step, grp[NT] = {0, 0, 0};
  size_t i, total = 0, bad = 0;
  float worst = 0.0f;
  memset(&c, 0, sizeof c);
  c.kind = kind; c.lr = lr; c.weight_decay = wd0; c.momentum = kind == AMP_SGD ? 0.9f : 0.0f; c.max_grad_norm = max_norm;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "%s", amp_last_error());
  if (!o || !s) return;
  for (k = 1; k < NT; k++)
    EXPECT(amp_optimizer_add_group(o, ls[k], wd[k], &grp[k]) == AMP_OK && grp[k] == k, "group %d: got %d, %s", k, grp[k], amp_last_error());
  for (k = 0; k < NT; k++) {
    amp_tensor_desc t;
    w[k] = (float *)malloc(TN[k] * 4); g[k] = (float *)malloc(TN[k] * 4); w0[k] = (float *)malloc(TN[k] * 4);
    for (i = 0; i < TN[k]; i++) w0[k][i] = w[k][i] = rnds();
    memset(&t, 0, sizeof t);
    t.weights = w[k]; t.dtype = AMP_F32; t.grads = g[k]; t.grad_dtype = AMP_F32; t.n = TN[k]; t.group = grp[k];
    EXPECT(amp_optimizer_add_tensor(o, &t) == AMP_OK, "add %d: %s", k, amp_last_error());
    total += TN[k];
  }
  snprintf(in, sizeof in, DIR "/groups_torch_%s_%d.in", kname, (int)getpid());
  snprintf(out, sizeof out, DIR "/groups_torch_%s_%d.out", kname, (int)getpid());
  snprintf(py, sizeof py, DIR "/groups_torch_%d.py", (int)getpid());
  f = fopen(py, "wb");
  EXPECT(f != NULL, "cannot write %s", py);
  if (!f) return;
  fputs(TORCH_PY, f); fclose(f);
  f = fopen(in, "wb");
  EXPECT(f != NULL, "cannot write %s", in);
  if (!f) return;
  {
    float hdr[3 + NT + 2 + NT];
    hdr[0] = kind == AMP_SGD ? 0.0f : 1.0f; hdr[1] = NT; hdr[2] = STEPS;
    for (k = 0; k < NT; k++) hdr[3 + k] = (float)TN[k];
    hdr[3 + NT] = c.momentum; hdr[4 + NT] = max_norm;
    for (k = 0; k < NT; k++) hdr[5 + NT + k] = wd[k];
    fwrite(hdr, sizeof hdr, 1, f);
    for (k = 0; k < NT; k++) fwrite(w0[k], 4, TN[k], f);
  }
  for (step = 0; step < STEPS; step++) {
    if (step == 3) { cur = lr * 0.5f; EXPECT(amp_optimizer_set_lr(o, cur) == AMP_OK, "%s", amp_last_error()); }
    for (k = 0; k < NT; k++) lrs[step][k] = cur * ls[k];   /* the f32 product amp.h forms */
  }
  fwrite(lrs, sizeof lrs, 1, f);
  cur = lr;
  amp_optimizer_set_lr(o, lr);
  for (step = 0; step < STEPS; step++) {
    if (step == 3) amp_optimizer_set_lr(o, lr * 0.5f);
    for (k = 0; k < NT; k++) {
      float gu[64];
      for (i = 0; i < TN[k]; i++) { gu[i] = rnds() * 2.0f; g[k][i] = gu[i] * 1024.0f; }
      fwrite(gu, 4, TN[k], f);
    }
    EXPECT(amp_scaler_step(s, o) == AMP_OK, "step %d: %s", step, amp_last_error());
    EXPECT(amp_scaler_update(s) == AMP_OK, "update: %s", amp_last_error());
    EXPECT(amp_optimizer_grad_norm(o) > max_norm, "step %d: norm %g does not exceed the clip %g: the clip is not tested",
           step, (double)amp_optimizer_grad_norm(o), (double)max_norm);
  }
  fclose(f);
  {
    char args[800];
    snprintf(args, sizeof args, "%s %s %s", py, in, out);
    t_torch_cmd(cmd, sizeof cmd, args);
  }
  EXPECT(system(cmd) == 0, "%s failed (python3 with torch not found, or the script failed)", cmd);
  f = fopen(out, "rb");
  EXPECT(f != NULL, "no torch output %s", out);
  if (f) {
    float *ref = (float *)malloc(total * 4);
    size_t got = fread(ref, 4, total, f), at = 0;
    fclose(f);
    EXPECT(got == total, "torch wrote %zu of %zu floats", got, total);
    for (k = 0; k < NT && got == total; k++)
      for (i = 0; i < TN[k]; i++, at++) {
        float d = fabsf(w[k][i] - ref[at]), tol = 2e-6f * (1.0f + fabsf(ref[at]));
        if (d > worst) worst = d;
        if (!(d <= tol) && bad++ < 5)
          EXPECT(0, "%s group %d elem %zu: start %.9g, torch %.9g, amp.h %.9g (|diff| %g > %g)", kname, k, i,
                 (double)w0[k][i], (double)ref[at], (double)w[k][i], (double)d, (double)tol);
        /* the step moved it: a test of a no-op would pass too easily */
        if (k == 1 && i == 0) EXPECT(w[k][i] != w0[k][i], "%s: group 1 did not move", kname);
      }
    free(ref);
  }
  printf("  %s, 3 groups, %d steps, clip %g: largest |amp.h - torch| %g\n", kname, STEPS, (double)max_norm, (double)worst);
  remove(in); remove(out); remove(py);
  for (k = 0; k < NT; k++) { free(w[k]); free(g[k]); free(w0[k]); }
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

static void three_groups_match_torch_sgd_momentum(void) { torch_compare(AMP_SGD); }
static void three_groups_match_torch_adamw(void) { torch_compare(AMP_ADAMW); }

/* ---- the master seeded bit for bit, round_to --------------------------------------------------- */

/* fp32 values that bf16 and f16 cannot hold: 1 + k 2^-20 and friends. */
static void fill_unrepresentable(float *m, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) m[i] = (1.0f + (float)(i + 1) * 0x1p-20f) * (i % 2 ? -0.75f : 1.25f);
}

static void master_is_seeded_bit_for_bit(void) {
  enum { N = 41 };
  static const amp_dtype types[3] = {AMP_BF16, AMP_F16, AMP_F32};
  float seed[N];
  int ti;
  fill_unrepresentable(seed, N);
  for (ti = 0; ti < 3; ti++) {
    amp_dtype t = types[ti];
    unsigned char w[N * 4], g[N * 4];
    amp_optimizer *o = NULL;
    amp_tensor_desc d;
    const float *m;
    size_t n = 0, i, differs = 0;
    memset(w, 0x7f, sizeof w); memset(g, 0, sizeof g);
    EXPECT(amp_optimizer_create(&o, amp_cpu(), NULL) == AMP_OK, "%s", amp_last_error());
    if (!o) return;
    memset(&d, 0, sizeof d);
    d.weights = w; d.dtype = t; d.grads = g; d.grad_dtype = t; d.n = N; d.master = seed;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());
    m = amp_optimizer_master(o, 0, &n);
    EXPECT(m && n == N, "master %p n %zu", (const void *)m, n);
    for (i = 0; m && i < N; i++) {
      float back = amp__load(w, t, i);
      EXPECT(bits(m[i]) == bits(seed[i]), "dtype %d elem %zu: seed %a, master %a", (int)t, i, (double)seed[i], (double)m[i]);
      EXPECT(bits(back) == bits(amp__round_to(seed[i], t)), "dtype %d elem %zu: model copy %a, want the seed rounded %a",
             (int)t, i, (double)back, (double)amp__round_to(seed[i], t));
      differs += bits(back) != bits(seed[i]);
    }
    if (t != AMP_F32) EXPECT(differs == N, "dtype %d: %zu of %d seeds were representable: the test proves nothing", (int)t, differs, N);
    amp_optimizer_destroy(o);
  }
}

/* round_to: a float model copy holding the master rounded to bf16 / f16, at add and after every
   step, for SGD and AdamW; its master steps exactly as a bf16/f16 model copy's would (same grads). */
static void round_to_holds_the_master_rounded(void) {
  enum { N = 333, STEPS_R = 5 };
  static const amp_dtype rts[2] = {AMP_BF16, AMP_F16};
  static const amp_optim_kind kinds[2] = {AMP_SGD, AMP_ADAMW};
  int ri, ki, step;
  for (ri = 0; ri < 2; ri++)
    for (ki = 0; ki < 2; ki++) {
      amp_dtype rt = rts[ri];
      float seed[N], wf[N], gf[N];
      uint16_t wl[N];
      amp_optimizer *o = NULL;
      amp_scaler *s = fixed_scaler(1.0f);
      amp_optim_config c;
      amp_tensor_desc d;
      size_t i, n, kept = 0;
      memset(&c, 0, sizeof c);
      c.kind = kinds[ki]; c.lr = 0.01f; c.momentum = 0.9f; c.weight_decay = 0.01f;
      fill_unrepresentable(seed, N);
      EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "%s", amp_last_error());
      if (!o || !s) return;
      memset(&d, 0, sizeof d);
      d.weights = wf; d.dtype = AMP_F32; d.grads = gf; d.grad_dtype = AMP_F32; d.n = N; d.master = seed; d.round_to = rt;
      EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());
      memset(&d, 0, sizeof d);   /* the twin: a 16-bit model copy of the same master */
      d.weights = wl; d.dtype = rt; d.grads = gf; d.grad_dtype = AMP_GRAD_F32; d.n = N; d.master = seed;
      /* the same grads buffer twice would overlap: a copy */
      {
        static float gf2[N];
        d.grads = gf2;
        EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());
        for (step = 0; step <= STEPS_R; step++) {
          const float *m = amp_optimizer_master(o, 0, &n), *m2 = amp_optimizer_master(o, 1, &n);
          for (i = 0; i < N; i++) {
            float want = rt == AMP_BF16 ? amp_bf16_to_f32(amp_f32_to_bf16(m[i])) : amp_f16_to_f32(amp_f32_to_f16(m[i]));
            EXPECT(bits(wf[i]) == bits(want), "round_to %d kind %d step %d elem %zu: master %a, model %a, want %a", (int)rt,
                   (int)c.kind, step, i, (double)m[i], (double)wf[i], (double)want);
            EXPECT(bits(m[i]) == bits(m2[i]), "round_to %d kind %d step %d elem %zu: master %a, the 16-bit twin's %a", (int)rt,
                   (int)c.kind, step, i, (double)m[i], (double)m2[i]);
            EXPECT(bits(wf[i]) == bits(amp__load(wl, rt, i)), "step %d elem %zu: float copy %a, 16-bit copy %a", step, i,
                   (double)wf[i], (double)amp__load(wl, rt, i));
            kept += bits(m[i]) != bits(wf[i]);
          }
          if (step == STEPS_R) break;
          for (i = 0; i < N; i++) gf[i] = gf2[i] = rnds();
          EXPECT(amp_scaler_step(s, o) == AMP_OK && amp_scaler_update(s) == AMP_OK, "%s", amp_last_error());
        }
      }
      EXPECT(kept > (size_t)N, "the master kept only %zu values beyond the rounding: it was rounded too", kept);
      amp_optimizer_destroy(o); amp_scaler_destroy(s);
    }
}

/* ---- bad input: refused, named, nothing changed ----------------------------------------------- */

static int says(const char *fn, const char *what) {
  const char *e = amp_last_error();
  return strncmp(e, fn, strlen(fn)) == 0 && e[strlen(fn)] == ':' && strstr(e, what) != NULL;
}
#define REFUSED(call, want, fn, what) do { amp_status st_ = (call); \
    EXPECT(st_ == (want) && says(fn, what), "%s: got %s '%s', want %s naming %s and '%s'", #call, amp_status_string(st_), \
           amp_last_error(), amp_status_string(want), fn, what); } while (0)

static void custom_nothing(void *user, float *master, const float *grad, size_t n, size_t index, long step) {
  (void)user; (void)master; (void)grad; (void)n; (void)index; (void)step;
}

static void bad_groups_are_refused_and_change_nothing(void) {
  amp_optimizer *o = NULL, *oc = NULL;
  amp_scaler *s = fixed_scaler(1.0f);
  amp_optim_config c;
  float w[4] = {1, 2, 3, 4}, g[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  int grp = -7;
  memset(&c, 0, sizeof c);
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "%s", amp_last_error());
  if (!o || !s) return;
  REFUSED(amp_optimizer_add_group(NULL, 1.0f, 0.0f, &grp), AMP_ERR_ARG, "amp_optimizer_add_group", "o is NULL");
  REFUSED(amp_optimizer_add_group(o, 1.0f, 0.0f, NULL), AMP_ERR_ARG, "amp_optimizer_add_group", "group is NULL");
  REFUSED(amp_optimizer_add_group(o, -0.5f, 0.0f, &grp), AMP_ERR_ARG, "amp_optimizer_add_group", "lr_scale -0.5");
  REFUSED(amp_optimizer_add_group(o, (float)NAN, 0.0f, &grp), AMP_ERR_ARG, "amp_optimizer_add_group", "lr_scale nan");
  REFUSED(amp_optimizer_add_group(o, (float)INFINITY, 0.0f, &grp), AMP_ERR_ARG, "amp_optimizer_add_group", "lr_scale inf");
  REFUSED(amp_optimizer_add_group(o, 1.0f, -0.25f, &grp), AMP_ERR_ARG, "amp_optimizer_add_group", "weight_decay -0.25");
  REFUSED(amp_optimizer_add_group(o, 1.0f, (float)NAN, &grp), AMP_ERR_ARG, "amp_optimizer_add_group", "weight_decay nan");
  REFUSED(amp_optimizer_add_group(o, 1.0f, (float)-INFINITY, &grp), AMP_ERR_ARG, "amp_optimizer_add_group", "weight_decay -inf");
  EXPECT(grp == -7 && o->n_groups == 1, "a refused add_group wrote group %d / made %d groups", grp, o->n_groups);
  /* 0 is legal for both: a frozen group without decay */
  EXPECT(amp_optimizer_add_group(o, 0.0f, 0.0f, &grp) == AMP_OK && grp == 1, "add_group(0, 0): %d %s", grp, amp_last_error());
  /* AMP_CUSTOM: no group reaches the trainer's own update */
  {
    amp_optim_config cc;
    memset(&cc, 0, sizeof cc);
    cc.kind = AMP_CUSTOM; cc.custom_step = custom_nothing;
    EXPECT(amp_optimizer_create(&oc, amp_cpu(), &cc) == AMP_OK, "%s", amp_last_error());
    if (oc) {
      grp = -7;
      REFUSED(amp_optimizer_add_group(oc, 1.0f, 0.0f, &grp), AMP_ERR_UNSUPPORTED, "amp_optimizer_add_group", "AMP_CUSTOM");
      EXPECT(grp == -7 && oc->n_groups == 1, "refused: group %d, %d groups", grp, oc->n_groups);
      amp_optimizer_destroy(oc);
    }
  }
  /* after the first update */
  EXPECT(amp_optimizer_add(o, AMP_F32, w, g, 4) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_scaler_step(s, o) == AMP_OK && amp_scaler_update(s) == AMP_OK, "%s", amp_last_error());
  grp = -7;
  REFUSED(amp_optimizer_add_group(o, 1.0f, 0.0f, &grp), AMP_ERR_STATE, "amp_optimizer_add_group", "first update");
  EXPECT(grp == -7 && o->n_groups == 2, "refused after an update: group %d, %d groups", grp, o->n_groups);
  {
    float w2[4] = {0}, g2[4] = {0};
    amp_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.weights = w2; d.grads = g2; d.n = 4; d.group = 1;
    REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_STATE, "amp_optimizer_add_tensor", "first update (1 applied)");
    EXPECT(amp_optimizer_count(o) == 1, "%zu tensors", amp_optimizer_count(o));
  }
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

static void bad_tensors_are_refused_and_change_nothing(void) {
  amp_optimizer *o = NULL;
  amp_tensor_desc d, good;
  float w[8], g[8], seed[8];
  uint16_t wl[8], gl[8];
  size_t i;
  int grp = 0;
  for (i = 0; i < 8; i++) { w[i] = (float)i + 0.125f; g[i] = 0.0f; seed[i] = 1.0f + 0x1p-20f; wl[i] = 0x3f80; gl[i] = 0; }
  EXPECT(amp_optimizer_create(&o, amp_cpu(), NULL) == AMP_OK, "%s", amp_last_error());
  if (!o) return;
  EXPECT(amp_optimizer_add_group(o, 0.5f, 0.0f, &grp) == AMP_OK, "%s", amp_last_error());
  memset(&good, 0, sizeof good);
  good.weights = w; good.dtype = AMP_F32; good.grads = g; good.grad_dtype = AMP_GRAD_F32; good.n = 8; good.master = seed;
  REFUSED(amp_optimizer_add_tensor(NULL, &good), AMP_ERR_ARG, "amp_optimizer_add_tensor", "o is NULL");
  REFUSED(amp_optimizer_add_tensor(o, NULL), AMP_ERR_ARG, "amp_optimizer_add_tensor", "description is NULL");
  d = good; d.group = 2;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "group 2");
  d = good; d.group = -1;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "group -1");
  d = good; d.round_to = (amp_dtype)7;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "round_to 7");
  d = good; d.weights = wl; d.dtype = AMP_BF16; d.round_to = AMP_F16;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "round_to 1 (AMP_F16)");
  d = good; d.master_mode = 3;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "master_mode 3");
  d = good; d.master_mode = AMP_MASTER_SPLIT;   /* a float model copy */
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "AMP_MASTER_SPLIT needs a bf16 model copy");
  d = good; d.weights = wl; d.dtype = AMP_F16; d.master_mode = AMP_MASTER_SPLIT;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "dtype is AMP_F16");
  d = good; d.master_mode = AMP_MASTER_NONE; d.stochastic = 0;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "AMP_MASTER_NONE needs a bf16 model copy");
  d = good; d.weights = wl; d.dtype = AMP_BF16; d.master_mode = AMP_MASTER_SPLIT; d.stochastic = 1;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "AMP_MASTER_SPLIT with stochastic 1");
  d = good; d.weights = wl; d.dtype = AMP_BF16; d.master_mode = AMP_MASTER_NONE;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "AMP_MASTER_NONE needs stochastic = 1");
  d = good; d.stochastic = 1;   /* a float model copy */
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "stochastic 1 needs a bf16 model copy");
  d = good; d.weights = wl; d.dtype = AMP_F16; d.stochastic = 1;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "dtype is AMP_F16");
  d = good; d.n = 0;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "n is 0");
  d = good; d.grads = w;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "is the weights buffer");
  d = good; d.dtype = (amp_dtype)9;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "weights dtype 9");
  /* the wrappers name themselves */
  REFUSED(amp_optimizer_add_mixed(o, AMP_BF16, wl, (amp_dtype)5, gl, 8), AMP_ERR_ARG, "amp_optimizer_add_mixed", "grads dtype 5");
  REFUSED(amp_optimizer_add_mixed(o, AMP_BF16, wl, AMP_F32, NULL, 8), AMP_ERR_ARG, "amp_optimizer_add_mixed", "grads is NULL");
  REFUSED(amp_optimizer_add(o, AMP_BF16, wl, gl, 0), AMP_ERR_ARG, "amp_optimizer_add", "n is 0");
  EXPECT(strncmp(amp_last_error(), "amp_optimizer_add:", 18) == 0, "'%s' names another function", amp_last_error());
  EXPECT(amp_optimizer_count(o) == 0, "%zu tensors added by refused calls", amp_optimizer_count(o));
  for (i = 0; i < 8; i++)   /* a refused seeded add writes no weights */
    EXPECT(w[i] == (float)i + 0.125f && wl[i] == 0x3f80, "elem %zu written: %g %04x", i, (double)w[i], wl[i]);
  /* and the good one is accepted */
  good.group = grp;
  EXPECT(amp_optimizer_add_tensor(o, &good) == AMP_OK && amp_optimizer_count(o) == 1, "%s", amp_last_error());
  /* overlapping a tensor already added */
  d = good; d.weights = w + 2; d.n = 2; d.grads = gl; d.master = NULL;
  REFUSED(amp_optimizer_add_tensor(o, &d), AMP_ERR_ARG, "amp_optimizer_add_tensor", "overlap a buffer of tensor 0");
  EXPECT(amp_optimizer_count(o) == 1, "%zu tensors", amp_optimizer_count(o));
  amp_optimizer_destroy(o);
}

/* ---- a skipped step, groups across a checkpoint -------------------------------------------- */

typedef struct gsetup {
  amp_optimizer *o;
  float w0[50], w1[30], w2[20];
  uint16_t b1[30];
  float g0[50], g1[30], g2[20];
} gsetup;

/* AdamW (or SGD with momentum): group 0, group 1 (lr x 0.5, no decay, bf16 copy written with
   stochastic rounding), group 2 (lr x 3,
   decay 0.2, a float copy rounded to bf16, seeded from an fp32 master). */
static void gsetup_make(gsetup *s, amp_optim_kind kind, int with_init) {
  amp_optim_config c;
  amp_tensor_desc d;
  float seed[20];
  int g1 = 0, g2 = 0;
  size_t i;
  memset(&c, 0, sizeof c);
  c.kind = kind; c.lr = 0.02f; c.weight_decay = 0.05f; c.momentum = 0.8f; c.max_grad_norm = 2.0f;
  c.seed = 0x5eed5eedull;
  s->o = NULL;
  if (with_init) {
    for (i = 0; i < 50; i++) s->w0[i] = rnds();
    for (i = 0; i < 30; i++) s->b1[i] = amp_f32_to_bf16(rnds());
  }
  fill_unrepresentable(seed, 20);
  if (amp_optimizer_create(&s->o, amp_cpu(), &c) != AMP_OK) { printf("  %s\n", amp_last_error()); return; }
  amp_optimizer_add_group(s->o, 0.5f, 0.0f, &g1);
  amp_optimizer_add_group(s->o, 3.0f, 0.2f, &g2);
  EXPECT(amp_optimizer_add(s->o, AMP_F32, s->w0, s->g0, 50) == AMP_OK, "%s", amp_last_error());
  memset(&d, 0, sizeof d);
  d.weights = s->b1; d.dtype = AMP_BF16; d.grads = s->g1; d.grad_dtype = AMP_GRAD_F32; d.n = 30; d.group = g1;
  d.stochastic = 1;   /* stochastic rounding: a skipped step and a checkpoint must keep its stream too */
  EXPECT(amp_optimizer_add_tensor(s->o, &d) == AMP_OK, "%s", amp_last_error());
  memset(&d, 0, sizeof d);
  d.weights = s->w2; d.dtype = AMP_F32; d.grads = s->g2; d.grad_dtype = AMP_F32; d.n = 20; d.group = g2;
  d.master = seed; d.round_to = AMP_BF16;
  EXPECT(amp_optimizer_add_tensor(s->o, &d) == AMP_OK, "%s", amp_last_error());
}
static void gsetup_grads(gsetup *s, uint64_t seed) {
  uint64_t keep = rng_state;
  size_t i;
  rng_state = seed;
  for (i = 0; i < 50; i++) s->g0[i] = rnds() * 64.0f;
  for (i = 0; i < 30; i++) s->g1[i] = rnds() * 64.0f;
  for (i = 0; i < 20; i++) s->g2[i] = rnds() * 64.0f;
  rng_state = keep;
}
/* Every bit of the state: weights, masters, moments. */
static size_t gsetup_state(const gsetup *s, uint32_t *out) {
  size_t k = 0, i, t;
  for (i = 0; i < 50; i++) out[k++] = bits(s->w0[i]);
  for (i = 0; i < 30; i++) out[k++] = s->b1[i];
  for (i = 0; i < 20; i++) out[k++] = bits(s->w2[i]);
  for (t = 0; t < s->o->count; t++)
    for (i = 0; i < s->o->t[t].n; i++) {
      out[k++] = bits(s->o->t[t].master[i]);
      if (s->o->t[t].m) out[k++] = bits(s->o->t[t].m[i]);
      if (s->o->t[t].v) out[k++] = bits(s->o->t[t].v[i]);
    }
  return k;
}

static void a_skipped_step_leaves_every_group_as_it_was(void) {
  static const amp_optim_kind kinds[2] = {AMP_ADAMW, AMP_SGD};
  int ki, step;
  for (ki = 0; ki < 2; ki++) {
    static gsetup s;
    static uint32_t before[400], after[400];
    amp_scaler *sc = NULL;
    amp_scaler_config scc;
    size_t nb, na, i;
    memset(&scc, 0, sizeof scc);
    scc.init_scale = 64.0f;
    EXPECT(amp_scaler_create(&sc, amp_cpu(), &scc) == AMP_OK, "%s", amp_last_error());
    gsetup_make(&s, kinds[ki], 1);
    if (!s.o || !sc) return;
    for (step = 0; step < 3; step++) {
      gsetup_grads(&s, 100 + (uint64_t)step);
      EXPECT(amp_scaler_step(sc, s.o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "%s", amp_last_error());
    }
    nb = gsetup_state(&s, before);
    gsetup_grads(&s, 200);
    s.g2[7] = (float)INFINITY;   /* one overflow, in the last group */
    EXPECT(amp_scaler_step(sc, s.o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp_scaler_last_skipped(sc) == 1, "the step with inf was not skipped");
    na = gsetup_state(&s, after);
    EXPECT(na == nb && memcmp(before, after, nb * 4) == 0, "kind %d: a skipped step changed the state", (int)kinds[ki]);
    for (i = 0; i < nb && i < na; i++)
      if (before[i] != after[i]) { EXPECT(0, "word %zu: %08x -> %08x", i, before[i], after[i]); break; }
    EXPECT(amp_optimizer_step_count(s.o) == 3, "step count %ld", amp_optimizer_step_count(s.o));
    amp_optimizer_destroy(s.o); amp_scaler_destroy(sc);
  }
}

/* Groups and round_to are the program's setup, like its tensor list, not saved: a run resumed
   from a checkpoint into an optimizer set up the same way continues bit for bit (the round_to
   model copy rewritten rounded at load). */
static void groups_continue_bit_for_bit_across_a_checkpoint(void) {
  static gsetup a, b;
  static uint32_t sa[400], sb[400];
  amp_scaler *sca = fixed_scaler(16.0f), *scb = fixed_scaler(16.0f);
  const char *path = DIR "/groups.ckpt";
  size_t na, nb, i;
  int step;
  gsetup_make(&a, AMP_ADAMW, 1);
  if (!a.o || !sca || !scb) return;
  for (step = 0; step < 6; step++) {
    gsetup_grads(&a, 300 + (uint64_t)step);
    EXPECT(amp_scaler_step(sca, a.o) == AMP_OK && amp_scaler_update(sca) == AMP_OK, "%s", amp_last_error());
    if (step == 2) EXPECT(amp_checkpoint_save(path, a.o, sca) == AMP_OK, "%s", amp_last_error());
  }
  memcpy(b.w0, a.w0, sizeof b.w0); memcpy(b.b1, a.b1, sizeof b.b1);   /* anything: load rewrites them */
  for (i = 0; i < 20; i++) b.w2[i] = 123.0f;
  gsetup_make(&b, AMP_ADAMW, 0);
  if (!b.o) return;
  EXPECT(amp_checkpoint_load(path, b.o, scb) == AMP_OK, "%s", amp_last_error());
  for (i = 0; i < 20; i++)
    EXPECT(bits(b.w2[i]) == bits(amp_bf16_to_f32(amp_f32_to_bf16(b.o->t[2].master[i]))), "after load elem %zu: %a, master %a",
           i, (double)b.w2[i], (double)b.o->t[2].master[i]);
  for (step = 3; step < 6; step++) {
    gsetup_grads(&b, 300 + (uint64_t)step);
    EXPECT(amp_scaler_step(scb, b.o) == AMP_OK && amp_scaler_update(scb) == AMP_OK, "%s", amp_last_error());
  }
  na = gsetup_state(&a, sa); nb = gsetup_state(&b, sb);
  EXPECT(na == nb && memcmp(sa, sb, na * 4) == 0, "the resumed run differs from the straight one");
  for (i = 0; i < na && i < nb; i++)
    if (sa[i] != sb[i]) { EXPECT(0, "word %zu: straight %08x, resumed %08x", i, sa[i], sb[i]); break; }
  remove(path);
  amp_optimizer_destroy(a.o); amp_optimizer_destroy(b.o); amp_scaler_destroy(sca); amp_scaler_destroy(scb);
}

/* Group 0 is the config's: lr_scale 1 and weight_decay, bit for bit what an optimizer without
   groups does; a group with the same values steps the same bits. */
static void a_group_with_group0s_values_steps_the_same_bits(void) {
  float wa[64], wb[64], ga[64], gb[64];
  amp_optimizer *o = NULL;
  amp_scaler *sc = fixed_scaler(1.0f);
  amp_optim_config c;
  amp_tensor_desc d;
  int grp = 0, step;
  size_t i;
  memset(&c, 0, sizeof c);
  c.kind = AMP_ADAMW; c.lr = 3e-3f; c.weight_decay = 0.1f;
  for (i = 0; i < 64; i++) wa[i] = wb[i] = rnds();
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "%s", amp_last_error());
  if (!o || !sc) return;
  EXPECT(amp_optimizer_add_group(o, 1.0f, 0.1f, &grp) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, wa, ga, 64) == AMP_OK, "%s", amp_last_error());
  memset(&d, 0, sizeof d);
  d.weights = wb; d.grads = gb; d.n = 64; d.group = grp;   /* zero dtypes: AMP_F32 */
  EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());
  for (step = 0; step < 5; step++) {
    for (i = 0; i < 64; i++) ga[i] = gb[i] = rnds();
    if (step == 2) amp_optimizer_set_lr(o, 1e-3f);
    EXPECT(amp_scaler_step(sc, o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "%s", amp_last_error());
  }
  for (i = 0; i < 64; i++) EXPECT(bits(wa[i]) == bits(wb[i]), "elem %zu: group 0 %a, group 1 %a", i, (double)wa[i], (double)wb[i]);
  amp_optimizer_destroy(o); amp_scaler_destroy(sc);
}

/* Groups, round_to, a seeded master and stochastic rounding step the same bits without a scaler
   (amp_optimizer_step) as with a scaler at scale 1, and an overflow skips both alike. */
static void groups_step_alike_with_and_without_a_scaler(void) {
  static gsetup a, b;
  static uint32_t sa[400], sb[400];
  amp_scaler *sc = fixed_scaler(1.0f);
  size_t na, nb, i;
  int step;
  gsetup_make(&a, AMP_ADAMW, 1);
  memcpy(b.w0, a.w0, sizeof b.w0); memcpy(b.b1, a.b1, sizeof b.b1);
  gsetup_make(&b, AMP_ADAMW, 0);
  if (!a.o || !b.o || !sc) return;
  for (step = 0; step < 5; step++) {
    gsetup_grads(&a, 500 + (uint64_t)step); gsetup_grads(&b, 500 + (uint64_t)step);
    if (step == 3) { a.g0[1] = (float)NAN; b.g0[1] = (float)NAN; }
    EXPECT(amp_scaler_step(sc, a.o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp_optimizer_step(b.o) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp_optimizer_last_skipped(b.o) == (step == 3), "step %d: last_skipped %d", step, amp_optimizer_last_skipped(b.o));
  }
  na = gsetup_state(&a, sa); nb = gsetup_state(&b, sb);
  EXPECT(na == nb && memcmp(sa, sb, na * 4) == 0, "amp_optimizer_step and amp_scaler_step at scale 1 differ");
  for (i = 0; i < na && i < nb; i++)
    if (sa[i] != sb[i]) { EXPECT(0, "word %zu: scaler %08x, no scaler %08x", i, sa[i], sb[i]); break; }
  EXPECT(amp_optimizer_step_count(b.o) == 4, "%ld updates, want 4 of 5", amp_optimizer_step_count(b.o));
  amp_optimizer_destroy(a.o); amp_optimizer_destroy(b.o); amp_scaler_destroy(sc);
}

/* ---- stochastic rounding ------------------------------------------------------------------- */

/* A frozen master (lr 0, zero grads) whose every element is x = 1 + 0.3 ulp(bf16): each update
   rewrites the bf16 copy with new bits. Every value is one of x's two bf16 neighbours, and the mean
   over elements and updates converges to x (round to nearest would sit 0.3 ulp below it). Four
   neighbouring elements take their bits from one 64-bit hash, each its own 16-bit field: two
   neighbours both round up in 0.3^2 of the pairs when the fields are independent. */
static void stochastic_rounding_is_unbiased(void) {
  enum { N = 4096, STEPS_SR = 16 };
  static float seed[N], g[N];
  static amp_bf16 w[N];
  const float lo = 1.0f, hi = 1.0f + 0x1p-7f, x = 1.0f + 0.3f * 0x1p-7f;
  amp_optimizer *o = NULL;
  amp_scaler *sc = fixed_scaler(1.0f);
  amp_optim_config c;
  amp_tensor_desc d;
  double sum = 0.0, count = 0.0, mean, sigma, pairs = 0.0, both = 0.0, pair_sigma;
  size_t i, others = 0;
  int step;
  memset(&c, 0, sizeof c);
  c.kind = AMP_SGD; c.seed = 12345;
  for (i = 0; i < N; i++) { seed[i] = x; g[i] = 0.0f; }
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK && amp_optimizer_set_lr(o, 0.0f) == AMP_OK, "%s", amp_last_error());
  if (!o || !sc) return;
  memset(&d, 0, sizeof d);
  d.weights = w; d.dtype = AMP_BF16; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = N; d.master = seed; d.stochastic = 1;
  EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());
  for (step = 0; step < STEPS_SR; step++) {
    EXPECT(amp_scaler_step(sc, o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "%s", amp_last_error());
    for (i = 0; i < N; i++) {
      float v = amp_bf16_to_f32(w[i]);
      others += v != lo && v != hi;
      sum += v; count += 1.0;
      if (i + 1 < N) { pairs += 1.0; both += v == hi && amp_bf16_to_f32(w[i + 1]) == hi; }
    }
  }
  mean = sum / count;
  sigma = sqrt(0.3 * 0.7 / count) * (double)(hi - lo);
  printf("  stochastic rounding of %.9g to bf16, %.0f times: mean %.9g (%.2f sigma off; round to nearest: %.9g)\n",
         (double)x, count, mean, fabs(mean - (double)x) / sigma, (double)lo);
  /* overlapping pairs share an element: variance p^2 (1 - p^2) + 2 (p^3 - p^4) per pair, p = 0.3 */
  pair_sigma = sqrt((0.09 * 0.91 + 2.0 * (0.027 - 0.0081)) / pairs);
  printf("  neighbours both rounded up: %.4f of %.0f pairs (independent bits: 0.09, %.2f sigma off)\n", both / pairs,
         pairs, fabs(both / pairs - 0.09) / pair_sigma);
  EXPECT(fabs(both / pairs - 0.09) < 5.0 * pair_sigma, "neighbours both rounded up in %.4f of %.0f pairs, "
         "independent bits give 0.09 (5 sigma %.4f)", both / pairs, pairs, 5.0 * pair_sigma);
  EXPECT(others == 0, "%zu values are neither neighbour of x", others);
  EXPECT(fabs(mean - (double)x) < 5.0 * sigma, "mean of %g stochastic roundings of %.9g: %.9g (|diff| %g, 5 sigma %g; "
         "round to nearest gives %.9g)", count, (double)x, mean, fabs(mean - (double)x), 5.0 * sigma, (double)lo);
  EXPECT(amp_optimizer_master(o, 0, NULL) && amp__f32_bits(amp_optimizer_master(o, 0, NULL)[0]) == amp__f32_bits(x), "the master moved");
  amp_optimizer_destroy(o); amp_scaler_destroy(sc);
}

/* The same seed gives the same bits (a run repeated), another seed other bits; the bits of element
   i depend on (seed, update, tensor, i) only, so a tensor added second in another optimizer draws
   differently from the same tensor added first. */
static void stochastic_rounding_is_reproducible(void) {
  enum { N = 1000 };
  static amp_bf16 w[4][N];
  static float g[4][N];
  uint64_t seeds[4] = {7, 7, 8, 7};
  int r, step;
  size_t i, same01 = 0, same02 = 0;
  for (r = 0; r < 4; r++) {
    amp_optimizer *o = NULL;
    amp_scaler *sc = fixed_scaler(1.0f);
    amp_optim_config c;
    amp_tensor_desc d;
    static amp_bf16 other[N];
    static float og[N];
    uint64_t keep = rng_state;
    memset(&c, 0, sizeof c);
    c.kind = AMP_ADAMW; c.lr = 1e-3f; c.seed = seeds[r];
    if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || !sc) { EXPECT(0, "%s", amp_last_error()); return; }
    rng_state = 42;
    for (i = 0; i < N; i++) w[r][i] = amp_f32_to_bf16(rnds());
    memset(&d, 0, sizeof d);
    d.weights = other; d.dtype = AMP_BF16; d.grads = og; d.grad_dtype = AMP_GRAD_F32; d.n = N;
    if (r == 3) EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());   /* run 3: ours is tensor 1 */
    d.weights = w[r]; d.grads = g[r]; d.stochastic = 1;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());
    for (step = 0; step < 5; step++) {
      for (i = 0; i < N; i++) g[r][i] = og[i] = rnds();
      EXPECT(amp_scaler_step(sc, o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "%s", amp_last_error());
    }
    rng_state = keep;
    amp_optimizer_destroy(o); amp_scaler_destroy(sc);
  }
  for (i = 0; i < N; i++) { same01 += w[0][i] == w[1][i]; same02 += w[0][i] == w[2][i]; }
  EXPECT(same01 == N, "the same seed: %zu of %d model values equal", same01, N);
  EXPECT(same02 < N, "seeds 7 and 8 gave the same %d values", N);
  EXPECT(memcmp(w[0], w[3], sizeof w[0]) != 0, "tensor 0 and tensor 1 drew the same bits");
}

int main(void) {
  RUN(three_groups_match_torch_sgd_momentum);
  RUN(three_groups_match_torch_adamw);
  RUN(master_is_seeded_bit_for_bit);
  RUN(round_to_holds_the_master_rounded);
  RUN(bad_groups_are_refused_and_change_nothing);
  RUN(bad_tensors_are_refused_and_change_nothing);
  RUN(a_skipped_step_leaves_every_group_as_it_was);
  RUN(groups_continue_bit_for_bit_across_a_checkpoint);
  RUN(a_group_with_group0s_values_steps_the_same_bits);
  RUN(groups_step_alike_with_and_without_a_scaler);
  RUN(stochastic_rounding_is_unbiased);
  RUN(stochastic_rounding_is_reproducible);
  TEST_END();
}
