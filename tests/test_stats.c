/* tests/test_stats.c - gradient stats (amp_optim_config.stats): amp_optimizer_stats and
   amp_optimizer_overflow_tensor after a scaler's unscale and after amp_optimizer_step.
   The expected counts come from a direct count over the grads written here, on their stored bits
   (exponent field all ones: inf/NaN; all zero with a zero mantissa: zero; all zero with a nonzero
   mantissa: subnormal), for f32, f16 and bf16 grads; amax from the grads decoded and multiplied by
   the scaler's inverse scale. Stats off must leave every step bit for bit as with stats on. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }

static const char *tname(amp_dtype t) { return t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : "f32"; }

/* The stored bits of grad i, widened to 32 bits, and the type's exponent / mantissa masks. */
static uint32_t bits_of(const void *g, amp_dtype t, size_t i) {
  uint32_t u;
  if (t == AMP_F32) { memcpy(&u, (const float *)g + i, 4); return u; }
  return ((const uint16_t *)g)[i];
}
static void masks(amp_dtype t, uint32_t *ex, uint32_t *man) {
  if (t == AMP_F16) { *ex = 0x7c00u; *man = 0x03ffu; }
  else if (t == AMP_BF16) { *ex = 0x7f80u; *man = 0x007fu; }
  else { *ex = 0x7f800000u; *man = 0x007fffffu; }
}
static float decode(const void *g, amp_dtype t, size_t i) {
  if (t == AMP_F16) return amp_f16_to_f32(((const amp_f16 *)g)[i]);
  if (t == AMP_BF16) return amp_bf16_to_f32(((const amp_bf16 *)g)[i]);
  return ((const float *)g)[i];
}
static void put_bits(void *g, amp_dtype t, size_t i, uint32_t u) {
  if (t == AMP_F32) memcpy((float *)g + i, &u, 4);
  else ((uint16_t *)g)[i] = (uint16_t)u;
}

/* The direct count: what amp_optimizer_stats must say for n grads of type t at inverse scale inv. */
static amp_tensor_stats direct_count(const void *g, amp_dtype t, size_t n, float inv) {
  amp_tensor_stats s;
  uint32_t ex, man, u, au, ab;
  size_t i;
  memset(&s, 0, sizeof s);
  masks(t, &ex, &man);
  for (i = 0; i < n; i++) {
    float y;
    u = bits_of(g, t, i);
    if ((u & ex) == ex) { s.n_nonfinite++; continue; }
    y = decode(g, t, i) * inv;
    memcpy(&au, &y, 4); au &= 0x7fffffffu;
    memcpy(&ab, &s.amax, 4);
    if (au > ab) memcpy(&s.amax, &au, 4);
    if ((u & ex) == 0) { if (u & man) s.n_subnormal++; else s.n_zero++; }
  }
  return s;
}

/* Random grads of type t: normal values around scale * 1e-3, and about 1 in 8 each an exact zero
   (either sign) or a subnormal of the type (a random nonzero mantissa). */
static void fill(void *g, amp_dtype t, size_t n, float scale) {
  uint32_t ex, man;
  size_t i;
  masks(t, &ex, &man);
  for (i = 0; i < n; i++) {
    uint32_t r = rnd() % 8, sign = t == AMP_F32 ? 0x80000000u : 0x8000u;
    if (r == 0) put_bits(g, t, i, (rnd() & 1) ? sign : 0u);
    else if (r == 1) put_bits(g, t, i, ((rnd() & 1) ? sign : 0u) | (1u + rnd() % man));
    else {
      float x = scale * 1e-3f * ((float)(rnd() % 2001) - 1000.0f) / 1000.0f;
      if (x == 0.0f) x = scale * 1e-3f;
      if (t == AMP_F16) ((amp_f16 *)g)[i] = amp_f32_to_f16(x);
      else if (t == AMP_BF16) ((amp_bf16 *)g)[i] = amp_f32_to_bf16(x);
      else ((float *)g)[i] = x;
    }
  }
  if (n >= 3) { put_bits(g, t, 1, 0u); put_bits(g, t, 2, 1u); }   /* at least one zero and one subnormal */
}

static int same_stats(const amp_tensor_stats *a, const amp_tensor_stats *b) {
  return memcmp(&a->amax, &b->amax, 4) == 0 && a->n_nonfinite == b->n_nonfinite && a->n_zero == b->n_zero &&
         a->n_subnormal == b->n_subnormal;
}
#define SHOW(s) (double)(s).amax, (s).n_nonfinite, (s).n_zero, (s).n_subnormal

enum { NT = 4 };
static const size_t lens[NT] = {37, 1000, 3, 513};

/* Counts equal the direct count for every grad type, after a scaler's unscale (scale 2^16) and
   after amp_optimizer_step (inverse scale 1), with inf and NaN planted in one chosen tensor;
   overflow_tensor names it, and -1 once the grads are clean again. */
static void counts_equal_a_direct_count(void) {
  amp_dtype ts[3] = {AMP_F32, AMP_F16, AMP_BF16};
  int d, via, bad_t, round, lvl;
  for (lvl = 0; lvl <= 2; lvl++)   /* the portable stats loop, and the vector one where the CPU has it */
  for (d = 0; d < 3; d++)
    for (via = 0; via < 2; via++)
      for (bad_t = 0; bad_t < NT; bad_t++)
        for (round = 0; round < 2; round++) {
          amp_dtype gt = ts[d];
          static float w[NT][1000], g[NT][1000];   /* f16/bf16 grads use the front half */
          amp_optimizer *o = NULL; amp_scaler *sc = NULL;
          amp_optim_config c;
          float scale = via == 0 ? 65536.0f : 1.0f, inv;
          size_t i, k;
          long ov;
          memset(&c, 0, sizeof c);
          c.kind = AMP_ADAM; c.stats = 1;
          amp__opt_simd = lvl;
          if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
          for (i = 0; i < NT; i++) {
            for (k = 0; k < lens[i]; k++) w[i][k] = 0.01f * (float)k;
            fill(g[i], gt, lens[i], gt == AMP_F16 ? (via == 0 ? 64.0f : 1.0f) : scale);
            EXPECT(amp_optimizer_add_mixed(o, AMP_F32, w[i], gt, g[i], lens[i]) == AMP_OK, "add: %s", amp_last_error());
          }
          if (round == 0) {   /* plant: +inf, NaN and -inf in the chosen tensor */
            uint32_t ex, man;
            masks(gt, &ex, &man);
            put_bits(g[bad_t], gt, 0, ex);
            put_bits(g[bad_t], gt, lens[bad_t] - 1, ex | 1u);
            if (lens[bad_t] > 3) put_bits(g[bad_t], gt, lens[bad_t] / 2, ex | (gt == AMP_F32 ? 0x80000000u : 0x8000u));
          }
          if (via == 0) {
            amp_scaler_config scfg;
            memset(&scfg, 0, sizeof scfg);
            scfg.init_scale = scale;
            EXPECT(amp_scaler_create(&sc, amp_cpu(), &scfg) == AMP_OK, "scaler: %s", amp_last_error());
            EXPECT(amp_scaler_unscale(sc, o) == AMP_OK, "unscale: %s", amp_last_error());
            inv = amp__inv_scale(amp_scaler_get_scale(sc));
          } else {
            EXPECT(amp_optimizer_step(o) == AMP_OK, "step: %s", amp_last_error());
            inv = 1.0f;
          }
          for (i = 0; i < NT; i++) {
            amp_tensor_stats want = direct_count(g[i], gt, lens[i], inv), got;
            memset(&got, 0xff, sizeof got);
            EXPECT(amp_optimizer_stats(o, i, &got) == AMP_OK, "stats: %s", amp_last_error());
            EXPECT(same_stats(&got, &want), "level %d, %s grads, %s, tensor %zu of %zu: want amax %g inf/NaN %zu zero %zu subnormal %zu, "
                   "got %g %zu %zu %zu", lvl, tname(gt), via == 0 ? "scaler unscale" : "amp_optimizer_step", i, lens[i], SHOW(want), SHOW(got));
            EXPECT(lens[i] < 10 || (want.n_zero > 0 && want.n_subnormal > 0), "the test plants zeros and subnormals: %zu %zu",
                   want.n_zero, want.n_subnormal);
          }
          ov = amp_optimizer_overflow_tensor(o);
          EXPECT(ov == (round == 0 ? (long)bad_t : -1L), "%s grads, %s: inf/NaN %s tensor %d, overflow_tensor says %ld", tname(gt),
                 via == 0 ? "scaler" : "amp_optimizer_step", round == 0 ? "planted in" : "not planted (would have been)", bad_t, ov);
          if (via == 0) {
            EXPECT(amp_scaler_step(sc, o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "step/update: %s", amp_last_error());
            EXPECT(amp_scaler_last_skipped(sc) == (round == 0), "skipped %d for round %d", amp_scaler_last_skipped(sc), round);
          } else {
            EXPECT(amp_optimizer_last_skipped(o) == (round == 0), "skipped %d for round %d", amp_optimizer_last_skipped(o), round);
          }
          amp_scaler_destroy(sc); amp_optimizer_destroy(o);
        }
  amp__opt_simd = -1;
}

/* The norm of grads that hold NaN (the step skipped) is the one NaN 0x7fc00000 at every scan level,
   grad type and stats setting: which NaN a sum of several carries depends on the order of the adds
   and the compiler's operands (gcc -Ofast gave 0xffc00000 on one path, 0x7fff0000 on another).
   Grads with +-inf and no NaN give +inf. Each trial: NaNs of random signs and payloads (and infs)
   at random places in tensors of random lengths. */
static void a_nan_norm_is_one_nan_on_every_path(void) {
  amp_dtype ts[3] = {AMP_F32, AMP_F16, AMP_BF16};
  int lvl, d, st, trial;
  for (lvl = 0; lvl <= 2; lvl++)
    for (d = 0; d < 3; d++)
      for (st = 0; st < 2; st++)
        for (trial = 0; trial < 40; trial++) {
          static float w[2][700], g[2][700];
          amp_dtype gt = ts[d];
          amp_optimizer *o = NULL;
          amp_optim_config c;
          uint32_t ex, man, nb;
          size_t n[2], i, k;
          int nans = 0, j;
          float norm;
          masks(gt, &ex, &man);
          memset(&c, 0, sizeof c);
          c.kind = AMP_ADAM; c.stats = st;
          amp__opt_simd = lvl;
          if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
          for (i = 0; i < 2; i++) {
            n[i] = 1 + rnd() % 600;
            for (k = 0; k < n[i]; k++) w[i][k] = 0.5f;
            fill(g[i], gt, n[i], 1.0f);
            EXPECT(amp_optimizer_add_mixed(o, AMP_F32, w[i], gt, g[i], n[i]) == AMP_OK, "add: %s", amp_last_error());
          }
          for (j = 0; j < 1 + (int)(rnd() % 12); j++) {   /* NaNs (random payload and sign) or infs */
            uint32_t sign = rnd() & 1u ? (gt == AMP_F32 ? 0x80000000u : 0x8000u) : 0u, pay = rnd() & man;
            i = rnd() & 1u;
            if (trial % 4 == 3) pay = 0;   /* every fourth trial: infs alone */
            nans += pay != 0;
            put_bits(g[i], gt, rnd() % n[i], ex | sign | pay);
          }
          EXPECT(amp_optimizer_step(o) == AMP_OK && amp_optimizer_last_skipped(o) == 1, "step: %s", amp_last_error());
          norm = amp_optimizer_grad_norm(o);
          memcpy(&nb, &norm, 4);
          EXPECT(nb == (nans ? 0x7fc00000u : 0x7f800000u), "level %d, %s grads, stats %d, trial %d (%d NaN): norm bits 0x%08x",
                 lvl, tname(gt), st, trial, nans, (unsigned)nb);
          amp_optimizer_destroy(o);
        }
  amp__opt_simd = -1;
}

/* The first tensor with inf/NaN is named when several have some; each unscale replaces the last
   one's stats (a clean unscale after an overflow says -1 and 0 inf/NaN everywhere). */
static void overflow_tensor_names_the_first_and_forgets_the_last_unscale(void) {
  static amp_f16 w[3][64], g[3][64];
  amp_optimizer *o; amp_scaler *sc;
  amp_optim_config c;
  amp_tensor_stats s;
  int i, k;
  memset(&c, 0, sizeof c);
  c.stats = 1;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_scaler_create(&sc, amp_cpu(), NULL) != AMP_OK) {
    EXPECT(0, "create: %s", amp_last_error()); return;
  }
  for (i = 0; i < 3; i++) {
    for (k = 0; k < 64; k++) { w[i][k] = amp_f32_to_f16(0.5f); g[i][k] = amp_f32_to_f16(1.0f); }
    EXPECT(amp_optimizer_add(o, AMP_F16, w[i], g[i], 64) == AMP_OK, "add: %s", amp_last_error());
  }
  EXPECT(amp_optimizer_overflow_tensor(o) == -1, "before any unscale: %ld", amp_optimizer_overflow_tensor(o));
  g[2][5] = 0x7c00; g[1][63] = 0x7e00;   /* inf in tensor 2, NaN in tensor 1 */
  EXPECT(amp_scaler_step(sc, o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "step: %s", amp_last_error());
  EXPECT(amp_optimizer_overflow_tensor(o) == 1, "NaN in tensor 1, inf in tensor 2: named %ld", amp_optimizer_overflow_tensor(o));
  EXPECT(amp_optimizer_stats(o, 2, &s) == AMP_OK && s.n_nonfinite == 1 && s.amax == 1.0f / 65536.0f,
         "tensor 2: inf/NaN %zu amax %g (want 1, 2^-16)", s.n_nonfinite, (double)s.amax);
  g[2][5] = g[1][63] = amp_f32_to_f16(1.0f);
  EXPECT(amp_scaler_step(sc, o) == AMP_OK && amp_scaler_update(sc) == AMP_OK, "step: %s", amp_last_error());
  EXPECT(amp_optimizer_overflow_tensor(o) == -1, "clean grads: %ld", amp_optimizer_overflow_tensor(o));
  for (i = 0; i < 3; i++)
    EXPECT(amp_optimizer_stats(o, (size_t)i, &s) == AMP_OK && s.n_nonfinite == 0 && s.n_zero == 0 && s.n_subnormal == 0,
           "tensor %d after a clean unscale: %zu %zu %zu", i, s.n_nonfinite, s.n_zero, s.n_subnormal);
  amp_scaler_destroy(sc); amp_optimizer_destroy(o);
}

/* Stats on and off: the same bits after every step (model copies, masters, moments, step count,
   grad norm, scale), for each kind, with clipping, an overflow every few steps, at every SIMD
   level this CPU has (the stats scan is one loop; the plain scan may be a vector one). */
static void stats_off_and_on_step_alike(void) {
  enum { N = 777 };
  amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
  static unsigned char a[N * 16 + 64], b[N * 16 + 64];
  int k, lvl, step;
  for (k = 0; k < 3; k++)
    for (lvl = 0; lvl <= 2; lvl++) {
      static amp_bf16 wa[N], wb[N]; static amp_f16 g[N];
      amp_optimizer *oa, *ob; amp_scaler *sa, *sb;
      amp_optim_config c;
      int i;
      memset(&c, 0, sizeof c);
      c.kind = kinds[k]; c.lr = 1e-2f; c.momentum = k == 0 ? 0.9f : 0.0f; c.max_grad_norm = 0.5f;
      amp__opt_simd = lvl;
      for (i = 0; i < N; i++) wa[i] = wb[i] = amp_f32_to_bf16(0.001f * (float)(i - 300));
      if (amp_optimizer_create(&oa, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
      c.stats = 1;
      if (amp_optimizer_create(&ob, amp_cpu(), &c) != AMP_OK || amp_scaler_create(&sa, amp_cpu(), NULL) != AMP_OK ||
          amp_scaler_create(&sb, amp_cpu(), NULL) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
      EXPECT(amp_optimizer_add_mixed(oa, AMP_BF16, wa, AMP_F16, g, N) == AMP_OK &&
             amp_optimizer_add_mixed(ob, AMP_BF16, wb, AMP_F16, g, N) == AMP_OK, "add: %s", amp_last_error());
      for (step = 0; step < 10; step++) {
        float s = amp_scaler_get_scale(sa);
        for (i = 0; i < N; i++) g[i] = amp_f32_to_f16(s * 1e-4f * (float)((int)(rnd() % 201) - 100));
        if (step % 4 == 2) g[step] = 0x7c00;
        EXPECT(amp_scaler_step(sa, oa) == AMP_OK && amp_scaler_step(sb, ob) == AMP_OK, "step: %s", amp_last_error());
        EXPECT(amp_scaler_update(sa) == AMP_OK && amp_scaler_update(sb) == AMP_OK, "update: %s", amp_last_error());
        EXPECT(amp_optimizer_grad_norm(oa) == amp_optimizer_grad_norm(ob) || step % 4 == 2,
               "%d level %d step %d: grad norm off %a on %a", k, lvl, step, (double)amp_optimizer_grad_norm(oa),
               (double)amp_optimizer_grad_norm(ob));
        EXPECT(t_optim_snapshot(oa, a) == t_optim_snapshot(ob, b) && memcmp(a, b, t_optim_snapshot(oa, a)) == 0 &&
               amp_scaler_get_scale(sa) == amp_scaler_get_scale(sb),
               "kind %d level %d step %d: stats on changed the step (w[0] off %g on %g, scale %g %g)", k, lvl, step,
               (double)amp_bf16_to_f32(wa[0]), (double)amp_bf16_to_f32(wb[0]), (double)amp_scaler_get_scale(sa),
               (double)amp_scaler_get_scale(sb));
      }
      EXPECT(amp_optimizer_step_count(oa) == 8, "kind %d: 10 steps, 2 overflows: %ld updates", k, amp_optimizer_step_count(oa));
      amp_optimizer_destroy(oa); amp_optimizer_destroy(ob); amp_scaler_destroy(sa); amp_scaler_destroy(sb);
    }
  amp__opt_simd = -1;
}

/* Bad calls: a clear error naming the function, nothing written. */
static void bad_calls_are_refused(void) {
  float w[4] = {0}, g[4] = {1, 2, 3, 4};
  amp_optimizer *on, *off;
  amp_optim_config c;
  amp_tensor_stats s, keep;
  amp_status st;
  memset(&c, 0, sizeof c);
  if (amp_optimizer_create(&off, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
  c.stats = 1;
  if (amp_optimizer_create(&on, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
  amp_optimizer_add(on, AMP_F32, w, g, 4); amp_optimizer_add(off, AMP_F32, w, g, 4);
  EXPECT(amp_optimizer_step(on) == AMP_OK && amp_optimizer_step(off) == AMP_OK, "step: %s", amp_last_error());
  memset(&s, 0x5a, sizeof s); keep = s;
  st = amp_optimizer_stats(NULL, 0, &s);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_stats") && memcmp(&s, &keep, sizeof s) == 0,
         "o NULL: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_optimizer_stats(on, 0, NULL);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_stats") && strstr(amp_last_error(), "out"),
         "out NULL: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_optimizer_stats(on, 1, &s);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_stats") && strstr(amp_last_error(), "index 1") &&
         memcmp(&s, &keep, sizeof s) == 0, "index 1 of 1 tensor: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_optimizer_stats(off, 0, &s);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_optimizer_stats") && strstr(amp_last_error(), "stats") &&
         memcmp(&s, &keep, sizeof s) == 0, "stats off: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_optimizer_overflow_tensor(off) == -1 && strstr(amp_last_error(), "amp_optimizer_overflow_tensor") &&
         strstr(amp_last_error(), "off"), "overflow_tensor, stats off: '%s'", amp_last_error());
  EXPECT(amp_optimizer_overflow_tensor(NULL) == -1 && strstr(amp_last_error(), "amp_optimizer_overflow_tensor"),
         "overflow_tensor(NULL): '%s'", amp_last_error());
  EXPECT(amp_optimizer_stats(on, 0, &s) == AMP_OK && s.amax == 4.0f && s.n_zero == 0 && s.n_nonfinite == 0,
         "the good call: amax %g zero %zu", (double)s.amax, s.n_zero);
  amp_optimizer_destroy(on); amp_optimizer_destroy(off);
}

/* spike_norm: a step whose unscaled grad norm is above it is skipped (masters, moments, model
   copies, step count bit for bit unchanged), the loss scale follows exactly the rule of a run
   without the spike (no back-off), the count is kept apart from overflows; an overflow with a
   huge norm is an overflow. Through a scaler (dynamic scale, short growth interval) and through
   amp_optimizer_step. */
static void spikes_skip_without_touching_the_scale(void) {
  enum { N = 300 };
  static unsigned char before[N * 16 + 64], after[N * 16 + 64];
  int via, k;
  for (via = 0; via < 2; via++)
    for (k = 0; k < 3; k++) {
      amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
      static amp_bf16 wa[N], wb[N]; static float g[N];
      amp_optimizer *oa, *ob; amp_scaler *sa = NULL, *sb = NULL;
      amp_scaler_config scfg = amp_scaler_preset(AMP_PRESET_PYTORCH);
      amp_optim_config c;
      int i, step, spikes = 0, overflows = 0;
      memset(&c, 0, sizeof c);
      c.kind = kinds[k]; c.lr = 1e-2f; c.momentum = k == 0 ? 0.9f : 0.0f;
      scfg.init_scale = 256.0f; scfg.growth_interval = 2;
      for (i = 0; i < N; i++) wa[i] = wb[i] = amp_f32_to_bf16(0.002f * (float)(i - 150));
      if (amp_optimizer_create(&ob, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
      c.spike_norm = 10.0f;
      if (amp_optimizer_create(&oa, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
      if (via == 0 && (amp_scaler_create(&sa, amp_cpu(), &scfg) != AMP_OK || amp_scaler_create(&sb, amp_cpu(), &scfg) != AMP_OK)) {
        EXPECT(0, "%s", amp_last_error()); return;
      }
      EXPECT(amp_optimizer_add_mixed(oa, AMP_BF16, wa, AMP_F32, g, N) == AMP_OK &&
             amp_optimizer_add_mixed(ob, AMP_BF16, wb, AMP_F32, g, N) == AMP_OK, "add: %s", amp_last_error());
      for (step = 0; step < 12; step++) {
        int spike = step % 4 == 1, overflow = step == 6 || step == 10;   /* 10: huge and inf */
        float scale = via == 0 ? amp_scaler_get_scale(sa) : 1.0f;
        size_t len;
        for (i = 0; i < N; i++) g[i] = scale * 0.01f * (float)((int)(rnd() % 201) - 100) / 100.0f;
        if (spike) for (i = 0; i < N; i++) g[i] *= 3000.0f;   /* norm about 0.01 * sqrt(N / 3) * 3000 = 300 */
        if (overflow) g[7] = INFINITY;
        len = t_optim_snapshot(oa, before);
        if (via == 0) {
          EXPECT(amp_scaler_step(sa, oa) == AMP_OK && amp_scaler_update(sa) == AMP_OK, "step: %s", amp_last_error());
          if (!spike) EXPECT(amp_scaler_step(sb, ob) == AMP_OK && amp_scaler_update(sb) == AMP_OK, "step: %s", amp_last_error());
          else EXPECT(amp_scaler_update_found_inf(sb, 0) == AMP_OK, "update: %s", amp_last_error());   /* the reference: a clean iteration */
          EXPECT(amp_scaler_get_scale(sa) == amp_scaler_get_scale(sb), "via scaler, kind %d, step %d (spike %d, overflow %d): "
                 "scale %g, the rule without the spike gives %g", k, step, spike, overflow, (double)amp_scaler_get_scale(sa),
                 (double)amp_scaler_get_scale(sb));
          EXPECT(amp_scaler_last_skipped(sa) == overflow, "step %d: scaler last_skipped %d (overflow %d)", step,
                 amp_scaler_last_skipped(sa), overflow);
        } else {
          EXPECT(amp_optimizer_step(oa) == AMP_OK, "step: %s", amp_last_error());
          if (!spike) EXPECT(amp_optimizer_step(ob) == AMP_OK, "step: %s", amp_last_error());
        }
        spikes += spike && !overflow; overflows += overflow;
        EXPECT(spike && !overflow ? amp_optimizer_grad_norm(oa) > 10.0f : 1, "step %d: the planted spike's norm %g", step,
               (double)amp_optimizer_grad_norm(oa));
        if (spike || overflow)
          EXPECT(t_optim_snapshot(oa, after) == len && memcmp(before, after, len) == 0, "%s kind %d step %d: a skipped step (spike %d, "
                 "overflow %d) changed the optimizer", via == 0 ? "scaler" : "amp_optimizer_step", k, step, spike, overflow);
        EXPECT(amp_optimizer_spike_skips(oa) == spikes, "step %d: spike_skips %ld, want %d", step, amp_optimizer_spike_skips(oa), spikes);
        EXPECT(t_optim_snapshot(oa, before) == t_optim_snapshot(ob, after) && memcmp(before, after, len) == 0,
               "%s kind %d step %d: the run with spikes skipped differs from the run that never saw them", via == 0 ? "scaler" : "step",
               k, step);
      }
      EXPECT(spikes == 3 && overflows == 2 && amp_optimizer_step_count(oa) == 12 - 3 - 2 && amp_optimizer_spike_skips(ob) == 0,
             "spikes %d overflows %d steps %ld spike_skips(off) %ld", spikes, overflows, amp_optimizer_step_count(oa),
             amp_optimizer_spike_skips(ob));
      amp_optimizer_destroy(oa); amp_optimizer_destroy(ob); amp_scaler_destroy(sa); amp_scaler_destroy(sb);
    }
  {   /* bad values: refused at create, naming the field */
    float bad[3] = {-1.0f, (float)NAN, (float)INFINITY};
    for (k = 0; k < 3; k++) {
      amp_optim_config c;
      amp_optimizer *o = NULL;
      amp_status st;
      memset(&c, 0, sizeof c);
      c.spike_norm = bad[k];
      st = amp_optimizer_create(&o, amp_cpu(), &c);
      EXPECT(st == AMP_ERR_ARG && o == NULL && strstr(amp_last_error(), "amp_optimizer_create") && strstr(amp_last_error(), "spike_norm"),
             "spike_norm %g: %s '%s'", (double)bad[k], amp_status_string(st), amp_last_error());
    }
  }
}

/* The overflow log line (stats on): one line per unscale that found inf/NaN, naming the first such
   tensor by its amp_tensor_desc.name (copied at add), its inf/NaN count and size, its largest
   finite |g| after unscaling and the scale; nothing on clean steps or with stats off. Names longer
   than 63 bytes are refused. */
static char logged[8][256];
static int n_logged;
static void catch_log(void *user, const char *msg) {
  (void)user;
  if (n_logged < 8) snprintf(logged[n_logged], sizeof logged[0], "%s", msg);
  n_logged++;
}
static void the_overflow_line_names_the_tensor(void) {
  enum { NW = 64, NU = 32, NH = 16 };
  static float ww[NW], gw[NW], wu[NU], gu[NU];
  static amp_f16 wh[NH], gh[NH];
  char name[80];
  amp_optimizer *o, *off;
  amp_scaler *s;
  amp_scaler_config sc = amp_scaler_preset(AMP_PRESET_PYTORCH);
  amp_optim_config c;
  amp_tensor_desc d;
  int i, step, stats;
  const char *want[3] = {
    "overflow in 'wte' (tensor 0): 3 inf/NaN of 64, amax 1.1e+05 at scale 65536",
    "overflow in tensor 1: 1 inf/NaN of 32, amax 0.25 at scale 32768; 1 more tensor overflowed",
    "overflow in 'lm_head' (tensor 2): 2 inf/NaN of 16, amax 0.5 at scale 1"};
  sc.init_scale = 65536.0f;
  for (stats = 1; stats >= 0; stats--) {
    memset(&c, 0, sizeof c);
    c.kind = AMP_ADAM; c.stats = stats;
    if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_scaler_create(&s, amp_cpu(), &sc) != AMP_OK) {
      EXPECT(0, "%s", amp_last_error()); return;
    }
    memset(&d, 0, sizeof d);
    strcpy(name, "wte");
    d.weights = ww; d.dtype = AMP_F32; d.grads = gw; d.grad_dtype = AMP_F32; d.n = NW; d.name = name;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add wte: %s", amp_last_error());
    strcpy(name, "XXXXXXXX");   /* the name was copied */
    d.weights = wu; d.grads = gu; d.n = NU; d.name = NULL;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add unnamed: %s", amp_last_error());
    d.weights = wh; d.dtype = AMP_F16; d.grads = gh; d.grad_dtype = AMP_F16; d.n = NH; d.name = "lm_head";
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add lm_head: %s", amp_last_error());
    n_logged = 0;
    amp_set_log(catch_log, NULL);
    for (step = 0; step < 4; step++) {   /* 0: wte overflows; 1: clean; 2: tensors 1 and 2; 3: clean */
      float k = amp_scaler_get_scale(s);
      for (i = 0; i < NW; i++) gw[i] = k * 0.001f * (float)(i % 7);
      for (i = 0; i < NU; i++) gu[i] = k * 0.25f * (float)(i % 2);
      for (i = 0; i < NH; i++) gh[i] = amp_f32_to_f16(0.001f * (float)(i % 3));
      if (step == 0) { gw[5] = INFINITY; gw[9] = -INFINITY; gw[10] = NAN; gw[11] = k * 110000.0f; }
      if (step == 2) { gu[3] = NAN; gh[1] = 0x7c00; }
      EXPECT(amp_scaler_step(s, o) == AMP_OK && amp_scaler_update(s) == AMP_OK, "step %d: %s", step, amp_last_error());
      EXPECT(n_logged == (stats ? (step >= 2 ? 2 : 1) : 0), "stats %d step %d: %d lines logged", stats, step, n_logged);
    }
    /* without a scaler (scale 1), on a fresh optimizer: lm_head's 2 infs */
    amp_optimizer_destroy(o); amp_scaler_destroy(s);
    if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
    d.weights = ww; d.dtype = AMP_F32; d.grads = gw; d.grad_dtype = AMP_F32; d.n = NW; d.name = NULL;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add: %s", amp_last_error());
    d.weights = wu; d.grads = gu; d.n = NU;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add: %s", amp_last_error());
    d.weights = wh; d.dtype = AMP_F16; d.grads = gh; d.grad_dtype = AMP_F16; d.n = NH; d.name = "lm_head";
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add: %s", amp_last_error());
    for (i = 0; i < NW; i++) gw[i] = 0.01f;
    for (i = 0; i < NU; i++) gu[i] = 0.01f;
    for (i = 0; i < NH; i++) gh[i] = amp_f32_to_f16(i == 4 ? 0.5f : 0.125f);
    gh[2] = 0xfc00; gh[7] = 0x7e00;
    EXPECT(amp_optimizer_step(o) == AMP_OK && amp_optimizer_last_skipped(o) == 1, "amp_optimizer_step: %s", amp_last_error());
    EXPECT(amp_optimizer_overflow_tensor(o) == (stats ? 2 : -1), "overflow tensor %ld", amp_optimizer_overflow_tensor(o));
    amp_set_log(NULL, NULL);
    EXPECT(n_logged == (stats ? 3 : 0), "stats %d: %d lines in all (want %d)", stats, n_logged, stats ? 3 : 0);
    for (i = 0; stats && i < 3 && i < n_logged; i++)
      EXPECT(strcmp(logged[i], want[i]) == 0, "line %d:\n    got  '%s'\n    want '%s'", i, logged[i], want[i]);
    amp_optimizer_destroy(o);
  }
  {   /* names: 63 bytes are kept, 64 refused naming the function and the length; nothing added */
    memset(&c, 0, sizeof c);
    if (amp_optimizer_create(&off, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
    memset(name, 'a', 64); name[64] = 0;
    memset(&d, 0, sizeof d);
    d.weights = ww; d.dtype = AMP_F32; d.grads = gw; d.grad_dtype = AMP_F32; d.n = NW; d.name = name;
    EXPECT(amp_optimizer_add_tensor(off, &d) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add_tensor") &&
           strstr(amp_last_error(), "64 bytes") && amp_optimizer_count(off) == 0, "a 64-byte name: '%s', count %zu", amp_last_error(),
           amp_optimizer_count(off));
    name[63] = 0;
    EXPECT(amp_optimizer_add_tensor(off, &d) == AMP_OK && amp_optimizer_count(off) == 1, "a 63-byte name: %s", amp_last_error());
    amp_optimizer_destroy(off);
  }
}

int main(void) {
  RUN(counts_equal_a_direct_count);
  RUN(a_nan_norm_is_one_nan_on_every_path);
  RUN(overflow_tensor_names_the_first_and_forgets_the_last_unscale);
  RUN(stats_off_and_on_step_alike);
  RUN(bad_calls_are_refused);
  RUN(spikes_skip_without_touching_the_scale);
  RUN(the_overflow_line_names_the_tensor);
  TEST_END();
}
