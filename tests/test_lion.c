/* tests/test_lion.c - the Lion optimizer (AMP_LION; Chen et al. 2023, "Symbolic Discovery of
   Optimization Algorithms", Algorithm 2) against a reference written here from the paper, on the
   same grads, bit for bit: param groups, clipping, a bf16 model copy over a seeded fp32 master, f16
   and f32 copies, bf16/f16/f32 grads, with and without a scaler, a skipped overflow step, and a
   checkpoint round trip in the middle of the run; every SIMD level the CPU has gives the same bits;
   the split master equals the fp32 one; the defaults; an unknown kind refused naming itself. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <string.h>

#define CKPT "build/test/lion.ckpt"

static uint64_t rng_state;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static float rndf(void) { return ((float)rnd() / 2147483648.0f) * 2.0f - 1.0f; }   /* [-1, 1) */
static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

/* ---- the reference, from the paper (Algorithm 2, decoupled weight decay) ---------------------- */

AMP__EXACT_BEGIN
/* x rounded to float and stored: a product passed through it is never fused into the add after it. */
static float rd(float x) { volatile float v = x; return v; }
/* One Lion step of n elements: w and m in fp32, g the unscaled, clipped grads. The decay factor as
   AdamW's (torch: param.mul_(1 - lr * weight_decay) with Python floats, rounded once). */
static AMP__EXACT_FP void ref_lion(float *w, float *m, const float *g, size_t n, float lr, float wd, float beta1,
                                   float beta2) {
  float decay = (float)(1.0 - (double)lr * (double)wd);
  size_t i;
  for (i = 0; i < n; i++) {   /* every product through rd: no compiler may fuse it into the add (clang -Ofast would) */
    float c = rd(beta1 * m[i]) + rd((1.0f - beta1) * g[i]);  /* interpolate */
    float s = c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : 0.0f;     /* sign, sign(0) = 0 */
    w[i] = rd(w[i] * decay);                                 /* decoupled weight decay */
    w[i] = w[i] - rd(lr * s);                                /* update */
    m[i] = rd(beta2 * m[i]) + rd((1.0f - beta2) * g[i]);     /* momentum */
  }
}
/* torch.nn.utils.clip_grad_norm_'s coefficient from the total norm: max_norm / (norm + 1e-6), a
   Python float over a tensor, which PyTorch computes as the reciprocal times max_norm. */
static AMP__EXACT_FP float ref_clip(float norm, float max_norm) {
  float c = rd(1.0f / (norm + 1e-6f)) * max_norm;
  return max_norm > 0.0f && c < 1.0f ? c : 1.0f;
}
AMP__EXACT_END

/* ---- one run: three tensors in three groups ------------------------------------------------- */

#define NT 3
static const size_t LEN[NT] = {37, 300, 19};
static const amp_dtype WT[NT] = {AMP_F32, AMP_BF16, AMP_F16}, GT[NT] = {AMP_F32, AMP_BF16, AMP_F16};
static const float LR = 1e-2f, WD0 = 0.1f, LRS[NT] = {1.0f, 0.5f, 2.0f}, WDS[NT] = {0.0f, 0.2f, 0.0f};
#define STEPS 12
#define MID 6
#define OVERFLOW_STEP 4

typedef struct rig {
  unsigned char w[NT][300 * 4], g[NT][300 * 4];
  float seed[300];
  amp_optimizer *o; amp_scaler *s;
  float ref_p[NT][300], ref_m[NT][300];
} rig;

static int rig_make(rig *r, int with_scaler, int master_mode) {
  amp_optim_config c;
  int groups[NT] = {0, 0, 0}, i;
  size_t j;
  memset(&c, 0, sizeof c);
  c.kind = AMP_LION; c.lr = LR; c.weight_decay = WD0; c.max_grad_norm = 2.0f; c.seed = 17;
  rng_state = 42;
  for (i = 0; i < NT; i++) for (j = 0; j < LEN[i]; j++) amp__store(r->w[i], WT[i], j, rndf());
  for (j = 0; j < 300; j++) r->seed[j] = rndf() * 3.0f;   /* pretrained fp32 values, finer than bf16 */
  if (amp_optimizer_create(&r->o, amp_cpu(), &c) != AMP_OK) return 0;
  r->s = NULL;
  if (with_scaler) {
    amp_scaler_config sc;
    memset(&sc, 0, sizeof sc); sc.init_scale = 1024.0f;
    if (amp_scaler_create(&r->s, amp_cpu(), &sc) != AMP_OK) return 0;
  }
  for (i = 1; i < NT; i++) if (amp_optimizer_add_group(r->o, LRS[i], WDS[i], &groups[i]) != AMP_OK) return 0;
  for (i = 0; i < NT; i++) {
    amp_tensor_desc t;
    memset(&t, 0, sizeof t);
    t.weights = r->w[i]; t.dtype = WT[i]; t.grads = r->g[i]; t.grad_dtype = GT[i] == AMP_F32 ? AMP_GRAD_F32 : GT[i]; t.n = LEN[i]; t.group = groups[i];
    if (i == 1) { t.master = r->seed; t.master_mode = master_mode; }
    if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  }
  for (i = 0; i < NT; i++) {   /* the reference starts from the masters the manual promises */
    for (j = 0; j < LEN[i]; j++) r->ref_p[i][j] = i == 1 ? r->seed[j] : amp__load(r->w[i], WT[i], j);
    memset(r->ref_m[i], 0, sizeof r->ref_m[i]);
  }
  return 1;
}
static void rig_free(rig *r) { amp_optimizer_destroy(r->o); amp_scaler_destroy(r->s); r->o = NULL; r->s = NULL; }

/* The grads of step k (the same for every run), times scale, stored in their types; an inf at the
   overflow step. */
static void rig_grads(rig *r, int k, float scale) {
  int i;
  size_t j;
  rng_state = 1000u + (uint64_t)k;
  for (i = 0; i < NT; i++)
    for (j = 0; j < LEN[i]; j++) {
      float x = rndf() * (k % 3 == 0 ? 1.5f : 0.05f);
      if (j % 7 == 3) x = 0.0f;   /* zero grads: sign(0) = 0 where m is 0 too */
      amp__store(r->g[i], GT[i], j, x * scale);
    }
  if (k == OVERFLOW_STEP) amp__store(r->g[1], GT[1], 5, INFINITY);
}

/* One iteration: the library's step, then the reference's on the same stored grads (unless the
   library skipped it: inf/NaN), with the library's norm. */
static int rig_step(rig *r, int k) {
  float scale = r->s ? amp_scaler_get_scale(r->s) : 1.0f, inv = r->s ? amp__inv_scale(scale) : 1.0f, gmul;
  int i, skipped;
  size_t j;
  rig_grads(r, k, scale);
  if (r->s) {
    if (amp_scaler_step(r->s, r->o) != AMP_OK || amp_scaler_update(r->s) != AMP_OK) return 0;
    skipped = amp_scaler_last_skipped(r->s);
  } else {
    if (amp_optimizer_step(r->o) != AMP_OK) return 0;
    skipped = amp_optimizer_last_skipped(r->o);
  }
  EXPECT(skipped == (k == OVERFLOW_STEP), "step %d: skipped %d", k, skipped);
  if (skipped) return 1;
  gmul = inv * ref_clip(amp_optimizer_grad_norm(r->o), 2.0f);
  for (i = 0; i < NT; i++) {
    float g[300];
    float lr = i == 0 ? LR : LR * LRS[i], wd = i == 0 ? WD0 : WDS[i];
    for (j = 0; j < LEN[i]; j++) g[j] = amp__load(r->g[i], GT[i], j) * gmul;
    ref_lion(r->ref_p[i], r->ref_m[i], g, LEN[i], lr, wd, 0.9f, 0.99f);
  }
  return 1;
}

/* The library's state against the reference: masters (tensor 1's decoded when split), the moment
   m, the model copies (the master rounded to their type). */
static int rig_matches(rig *r, const char *what) {
  int i, bad = 0;
  size_t j;
  for (i = 0; i < NT; i++) {
    float mast[300];
    char msg[AMP__MSG] = "";
    if (amp__be(r->o->dev)->optim_tensor_io(r->o, (size_t)i, 0, mast, 0, msg, sizeof msg) != AMP_OK) { EXPECT(0, "%s: read: %s", what, msg); return 0; }
    EXPECT(r->o->t[i].m && !r->o->t[i].v, "%s: tensor %d keeps m %p and v %p (Lion: m only)", what, i, (void *)r->o->t[i].m, (void *)r->o->t[i].v);
    for (j = 0; j < LEN[i] && !bad; j++) {
      float model = amp__load(r->w[i], WT[i], j), want = amp__load(r->w[i], WT[i], j);
      amp__store(&want, WT[i], 0, r->ref_p[i][j]); want = amp__load(&want, WT[i], 0);
      if (bits(mast[j]) != bits(r->ref_p[i][j]) || bits(r->o->t[i].m[j]) != bits(r->ref_m[i][j]) || bits(model) != bits(want)) {
        EXPECT(0, "%s: tensor %d elem %zu: master %a (reference %a), m %a (%a), model copy %a (%a)", what, i, j,
               (double)mast[j], (double)r->ref_p[i][j], (double)r->o->t[i].m[j], (double)r->ref_m[i][j], (double)model, (double)want);
        bad = 1;
      }
    }
  }
  return !bad;
}

/* The whole run at one SIMD level: STEPS iterations checked against the reference; a checkpoint
   saved after MID of them, then loaded into a fresh optimizer that runs the rest: the same bits. */
static void run_at(int level, int with_scaler, int master_mode) {
  static rig a, b;
  char what[96];
  int k;
  snprintf(what, sizeof what, "level %d, scaler %d, master_mode %d", level, with_scaler, master_mode);
  amp__opt_simd = level;
  if (!rig_make(&a, with_scaler, master_mode)) { EXPECT(0, "%s: setup: %s", what, amp_last_error()); amp__opt_simd = -1; return; }
  for (k = 0; k < STEPS; k++) {
    if (!rig_step(&a, k)) { EXPECT(0, "%s: step %d: %s", what, k, amp_last_error()); break; }
    if (k == MID - 1) {
      EXPECT(amp_checkpoint_save(CKPT, a.o, a.s) == AMP_OK, "%s: save: %s", what, amp_last_error());
      b = a;   /* the reference state at the save: the resumed run checks against its own copy */
      b.o = NULL; b.s = NULL;
    }
  }
  EXPECT(rig_matches(&a, what), "%s: the straight run differs from the reference", what);
  EXPECT(amp_optimizer_step_count(a.o) == STEPS - 1, "%s: %ld updates, want %d", what, amp_optimizer_step_count(a.o), STEPS - 1);
  {
    float ref_p[NT][300], ref_m[NT][300];
    memcpy(ref_p, b.ref_p, sizeof ref_p); memcpy(ref_m, b.ref_m, sizeof ref_m);
    if (!rig_make(&b, with_scaler, master_mode)) { EXPECT(0, "%s: setup 2: %s", what, amp_last_error()); rig_free(&a); amp__opt_simd = -1; return; }
    memcpy(b.ref_p, ref_p, sizeof ref_p); memcpy(b.ref_m, ref_m, sizeof ref_m);
  }
  EXPECT(amp_checkpoint_load(CKPT, b.o, b.s) == AMP_OK, "%s: load: %s", what, amp_last_error());
  EXPECT(rig_matches(&b, what), "%s: the loaded state differs from the reference at the save", what);
  for (k = MID; k < STEPS; k++) if (!rig_step(&b, k)) { EXPECT(0, "%s: resumed step %d: %s", what, k, amp_last_error()); break; }
  EXPECT(rig_matches(&b, what), "%s: the resumed run differs from the reference", what);
  for (k = 0; k < NT; k++)
    EXPECT(memcmp(a.w[k], b.w[k], LEN[k] * amp_dtype_size(WT[k])) == 0, "%s: tensor %d: straight and resumed model copies differ", what, k);
  EXPECT(amp_optimizer_step_count(b.o) == STEPS - 1, "%s: resumed: %ld updates", what, amp_optimizer_step_count(b.o));
  rig_free(&a); rig_free(&b);
  amp__opt_simd = -1;
}

static int levels(void) {
#ifdef AMP__X86_SIMD
  return amp__cpu_level();
#elif defined(AMP__NEON_SIMD)
  return 1;   /* the NEON loops */
#else
  return 0;
#endif
}

static void lion_matches_the_papers_reference_with_groups_clipping_and_a_checkpoint(void) {
  int level;
  for (level = 0; level <= levels(); level++) run_at(level, 0, AMP_MASTER_F32);
}
static void lion_matches_the_reference_under_a_scaler_at_every_simd_level(void) {
  int level;
  for (level = 0; level <= levels(); level++) run_at(level, 1, AMP_MASTER_F32);
}
/* The split master holds the fp32 master exactly: the same reference, the same bits. */
static void lion_with_a_split_master_matches_the_reference(void) {
  run_at(-1, 0, AMP_MASTER_SPLIT);
  run_at(-1, 1, AMP_MASTER_SPLIT);
}

/* No master (stochastic bf16 copy in place): reproducible from the seed, a skipped step changes
   nothing, and the weights move the way the reference's master does on average. */
static void lion_without_a_master_is_reproducible_and_follows_the_reference(void) {
  enum { N = 2048 };
  static amp_bf16 w1[N], w2[N]; static float g[N], master[N], mm[N];
  amp_optimizer *o1, *o2;
  amp_optim_config c = amp_optimizer_defaults(AMP_LION);
  amp_tensor_desc t;
  int k;
  size_t j;
  double drift = 0.0, want = 0.0;
  c.lr = 1e-3f; c.weight_decay = 0.5f; c.seed = 3;
  for (j = 0; j < N; j++) { master[j] = 1.0f + (float)j / N; w1[j] = w2[j] = amp_f32_to_bf16(master[j]); mm[j] = 0.0f; }
  for (j = 0; j < N; j++) master[j] = amp_bf16_to_f32(w1[j]);
  memset(&t, 0, sizeof t);
  t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.grads = g; t.n = N; t.stochastic = 1; t.master_mode = AMP_MASTER_NONE;
  if (amp_optimizer_create(&o1, amp_cpu(), &c) != AMP_OK || amp_optimizer_create(&o2, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  t.weights = w1; EXPECT(amp_optimizer_add_tensor(o1, &t) == AMP_OK, "add: %s", amp_last_error());
  t.weights = w2; EXPECT(amp_optimizer_add_tensor(o2, &t) == AMP_OK, "add: %s", amp_last_error());
  for (k = 0; k < 10; k++) {
    rng_state = 7u + (uint64_t)k;
    for (j = 0; j < N; j++) g[j] = rndf();
    if (k == 3) g[9] = NAN;
    EXPECT(amp_optimizer_step(o1) == AMP_OK && amp_optimizer_step(o2) == AMP_OK, "step %d: %s", k, amp_last_error());
    if (k != 3) ref_lion(master, mm, g, N, c.lr, c.weight_decay, c.beta1, c.beta2);
  }
  EXPECT(memcmp(w1, w2, sizeof w1) == 0, "two runs from the same seed differ");
  EXPECT(amp_optimizer_step_count(o1) == 9, "%ld updates (one NaN step skipped)", amp_optimizer_step_count(o1));
  for (j = 0; j < N; j++) { drift += (double)amp_bf16_to_f32(w1[j]) - (1.0 + (double)j / N); want += (double)master[j] - (1.0 + (double)j / N); }
  drift /= N; want /= N;
  EXPECT(fabs(drift - want) < 0.1 * fabs(want), "mean move of the weights %g, the reference's %g (within 10%%)", drift, want);
  amp_optimizer_destroy(o1); amp_optimizer_destroy(o2);
}

/* Zero means Lion's own defaults; the other kinds keep theirs; amp_optimizer_defaults agrees. */
static void a_zero_config_means_lions_defaults(void) {
  amp_optim_config c, d;
  amp_optimizer *o;
  float w[2] = {1, 1}, g[2] = {0, 0};
  memset(&c, 0, sizeof c); c.kind = AMP_OPTIM_LION;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  EXPECT(o->cfg.lr == 1e-4f && o->cfg.beta1 == 0.9f && o->cfg.beta2 == 0.99f && o->cfg.weight_decay == 0.0f,
         "Lion resolved lr %g beta1 %g beta2 %g wd %g, want 1e-4, 0.9, 0.99, 0", (double)o->cfg.lr, (double)o->cfg.beta1,
         (double)o->cfg.beta2, (double)o->cfg.weight_decay);
  EXPECT(amp_optimizer_add(o, AMP_F32, w, g, 2) == AMP_OK && amp__o_moments(&o->cfg) == 1, "add: %s", amp_last_error());
  amp_optimizer_destroy(o);
  d = amp_optimizer_defaults(AMP_LION);
  EXPECT(d.kind == AMP_LION && d.lr == 1e-4f && d.beta1 == 0.9f && d.beta2 == 0.99f && d.zero_is_zero, "defaults(AMP_LION): lr %g betas %g %g",
         (double)d.lr, (double)d.beta1, (double)d.beta2);
  memset(&c, 0, sizeof c); c.kind = AMP_ADAMW;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  EXPECT(o->cfg.lr == 1e-3f && o->cfg.beta1 == 0.9f && o->cfg.beta2 == 0.999f && o->cfg.eps == 1e-8f, "AdamW's defaults changed: lr %g beta2 %g",
         (double)o->cfg.lr, (double)o->cfg.beta2);
  amp_optimizer_destroy(o);
  EXPECT(AMP_OPTIM_LION == 4 && AMP_LION == 4 && AMP_CUSTOM == 3 && AMP_ADAMW == 2, "enum values moved");
}

/* sign(0) = 0: a zero grad with a zero moment and no decay leaves the weight; sign(NaN) = NaN. */
static void sign_of_zero_leaves_the_weight_and_sign_of_nan_is_nan(void) {
  amp_optim_config h = amp_optimizer_defaults(AMP_LION);
  amp_step_coefs c = amp__step_coefs(&h, 1, 1.0f, 0.0f);
  volatile uint32_t negzero = 0x80000000u;   /* -0 made at run time: -Ofast may fold a -0.0f literal to +0 */
  float p = amp__bits_f32(negzero), m = 0.0f, v = 0.0f;
  amp__lion_elem(&p, &m, &v, 0.0f, &c);
  EXPECT(bits(p) == 0x80000000u && m == 0.0f, "w -0, m 0, g 0: w %a m %a", (double)p, (double)m);
  p = 0.75f; m = NAN;
  amp__lion_elem(&p, &m, &v, 1.0f, &c);
  EXPECT((bits(p) & 0x7fffffffu) > 0x7f800000u, "m NaN: w %a, want NaN", (double)p);   /* on the bits: -Ofast */
  p = 0.75f; m = 0.0f;
  amp__lion_elem(&p, &m, &v, -1e-30f, &c);
  EXPECT(p == 0.75f + 1e-4f && v == 0.0f, "a tiny negative grad moves w by +lr: %a", (double)p);
}

/* An unknown kind is refused at create, naming the function and the value; a Lion checkpoint does
   not load into another kind. */
static void an_unknown_kind_is_refused_naming_it(void) {
  amp_optim_config c;
  amp_optimizer *o = (amp_optimizer *)&c, *a;
  amp_status st;
  float w[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
  memset(&c, 0, sizeof c); c.kind = (amp_optim_kind)99;
  st = amp_optimizer_create(&o, amp_cpu(), &c);
  EXPECT(st == AMP_ERR_ARG && o == NULL && strstr(amp_last_error(), "amp_optimizer_create") && strstr(amp_last_error(), "99"),
         "kind 99: %s '%s'", amp_status_string(st), amp_last_error());
  c = amp_optimizer_defaults((amp_optim_kind)99);
  st = amp_optimizer_create(&o, amp_cpu(), &c);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "99"), "defaults(99) then create: %s '%s'", amp_status_string(st), amp_last_error());
  memset(&c, 0, sizeof c); c.kind = AMP_LION;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_optimizer_add(o, AMP_F32, w, g, 4) != AMP_OK ||
      amp_optimizer_step(o) != AMP_OK || amp_checkpoint_save(CKPT, o, NULL) != AMP_OK) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  c.kind = AMP_ADAMW;
  if (amp_optimizer_create(&a, amp_cpu(), &c) != AMP_OK || amp_optimizer_add(a, AMP_F32, w, g, 4) != AMP_OK) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  st = amp_checkpoint_load(CKPT, a, NULL);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "kind"), "Lion file into AdamW: %s '%s'", amp_status_string(st), amp_last_error());
  amp_optimizer_destroy(o); amp_optimizer_destroy(a);
}

int main(void) {
  RUN(lion_matches_the_papers_reference_with_groups_clipping_and_a_checkpoint);
  RUN(lion_matches_the_reference_under_a_scaler_at_every_simd_level);
  RUN(lion_with_a_split_master_matches_the_reference);
  RUN(lion_without_a_master_is_reproducible_and_follows_the_reference);
  RUN(a_zero_config_means_lions_defaults);
  RUN(sign_of_zero_leaves_the_weight_and_sign_of_nan_is_nan);
  RUN(an_unknown_kind_is_refused_naming_it);
  TEST_END();
}
