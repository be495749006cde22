/* tests/test_fp8_scaling.c - the fp8 scaling recipes, the fp8 scaler and amp_quantize.

   Each recipe's rule (amp_fp8_scale_from_amax) against the anchor's formula written again here
   in double arithmetic (a quotient of two floats computed in double and rounded once to float is
   the f32 quotient), on amax 0, -0, subnormal, tiny, normal, huge, inf, NaN and negative, with
   margins, eps and pow2, and on random amaxes; the scaler's DELAYED history against
   TransformerEngine's roll written as its kernel does it, over random sequences of amaxes (max and
   most_recent, several history lengths, mixed formats, several records per step, amaxes from
   casts); amp_quantize against the scalar cast at every SIMD level, every input type, odd lengths
   and addresses; and every refusal, which must change nothing. Tests by bits: the -Ofast build of
   this file folds isnan() away. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <math.h>

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float f32_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static int nan_bits(float x) { return (bits_of(x) & 0x7fffffffu) > 0x7f800000u; }
static int inf_bits(float x) { return (bits_of(x) & 0x7fffffffu) == 0x7f800000u; }
static int zero_bits(float x) { return (bits_of(x) << 1) == 0u; }
static int pos_finite(float x) { return bits_of(x) >= 1u && bits_of(x) < 0x7f800000u; }
static int same(float a, float b) { return bits_of(a) == bits_of(b) || (nan_bits(a) && nan_bits(b)); }

static uint32_t rng = 2463534242u;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }

static double fmax_of(amp_dtype f) { return f == AMP_E4M3 ? 448.0 : 57344.0; }
/* 2^k as a float, k in -149..128 (128: inf) */
static float pow2f(int k) {
  if (k > 127) return f32_of(0x7f800000u);
  if (k >= -126) return (float)ldexp(1.0, k);
  return f32_of(1u << (k + 149));
}
static float flt_max(void) { return f32_of(0x7f7fffffu); }
/* a / b, one IEEE division: the operands through volatiles, so that no build (-Ofast included) can
   hoist a reciprocal of b out of the loops that call this and multiply by it instead */
static double quot(double a, double b) { volatile double x = a, y = b; return x / y; }

/* ---- the anchors' formulas -------------------------------------------------------------------- */

/* TransformerEngine DelayedScaling: (fmax * 2^-margin in f32) / amax for a finite amax > 0, else the
   previous scale; an infinite quotient is FLT_MAX */
static float ref_delayed(amp_dtype f, float amax, float prev, float margin) {
  double m = (float)(int)margin == margin ? ldexp(1.0, -(int)margin) : (double)powf(2.0f, -margin);
  float scaled = (float)(fmax_of(f) * m);
  float s;
  if (!pos_finite(amax)) return prev;
  s = (float)quot((double)scaled, (double)amax);
  return inf_bits(s) ? flt_max() : s;
}
/* TransformerEngine compute_scale_from_amax (Float8CurrentScaling) */
static float ref_current(amp_dtype f, float amax, float eps, int pow2) {
  float s;
  if (nan_bits(amax)) return 1.0f;
  if ((bits_of(amax) >> 31) || (!zero_bits(eps) && (double)amax < (double)eps)) amax = eps;
  if (inf_bits(amax) || zero_bits(amax)) return 1.0f;
  s = (float)quot(fmax_of(f), (double)amax);
  if (inf_bits(s)) s = flt_max();
  return pow2 ? f32_of(bits_of(s) & 0xff800000u) : s;
}
/* torchao amax_to_scale: in double, clamped at 1e-12, then f32; pow2: 2^floor(log2 s) */
static float ref_torchao(amp_dtype f, float amax, int pow2) {
  double d = (double)amax;
  float s;
  if (nan_bits(amax)) return f32_of(0x7fc00000u);
  if (!(d >= 1e-12)) d = 1e-12;
  s = (float)quot(fmax_of(f), d);
  if (!pow2 || zero_bits(s)) return s;
  return pow2f((int)floor(log2((double)s)));
}
/* MS-AMP: 2^(floor(log2(fmax / amax)) - margin), q in f32 (inf: exponent 127); 1 / 2^-k is 0 for k < -127 */
static float ref_msamp(amp_dtype f, float amax, float prev, int margin) {
  float q;
  int k;
  if (!pos_finite(amax)) return prev;
  q = (float)quot(fmax_of(f), (double)amax);
  k = (inf_bits(q) ? 127 : (int)floor(log2((double)q))) - margin;
  return k < -127 ? 0.0f : pow2f(k);
}

static const uint32_t amax_edges[] = {
  0x00000000u, 0x80000000u, 0x00000001u, 0x00000123u, 0x007fffffu, 0x00800000u, 0x0da24260u /* 1e-30 */,
  0x2b8cbccc /* 1e-12 */, 0x2aa8e7c0u /* 3e-13 */, 0x3dcccccdu, 0x3f800000u, 0x3f7fffffu, 0x43e00000u, 0x40533333u,
  0x501502f9u /* 1e10 */, 0x7e61d8b3u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
  0xbf800000u, 0x3c800000u, 0x37800000u, 0x1f800000u, 0x01000000u };
#define N_EDGES (sizeof amax_edges / sizeof amax_edges[0])

static float amax_case(int i) {   /* the edges, then random bit patterns over every exponent */
  if (i < (int)N_EDGES) return f32_of(amax_edges[i]);
  return f32_of(next_u32() & 0x7fffffffu);
}

static void recipes_equal_their_anchors(void) {
  static const float margins_d[] = { 0.0f, 1.0f, 3.0f, -2.0f, 0.5f, 64.0f, -64.0f };
  static const int margins_m[] = { 0, 1, 8, 64, -5, -64 };
  static const float eps[] = { 0.0f, 1e-6f, 1.0f, 1e-30f, -0.0f };   /* -0: as 0 */
  static const float prevs[] = { 1.0f, 0.75f, 1048576.0f };
  amp_dtype f;
  int i, j, p, pw;
  for (f = AMP_E4M3; f <= AMP_E5M2; f = (amp_dtype)(f + 1))
    for (i = 0; i < (int)N_EDGES + 3000; i++) {
      float a = amax_case(i);
      amp_fp8_config c;
      memset(&c, 0, sizeof c);
      for (j = 0; j < (int)(sizeof margins_d / sizeof margins_d[0]); j++)
        for (p = 0; p < 3; p++) {
          float want = ref_delayed(f, a, prevs[p], margins_d[j]), got;
          c.recipe = AMP_FP8_DELAYED; c.margin = margins_d[j];
          got = amp_fp8_scale_from_amax(&c, f, a, prevs[p]);
          EXPECT(same(got, want), "delayed fmt %d amax %a margin %g prev %g: %a, want %a", (int)f, (double)a,
                 (double)margins_d[j], (double)prevs[p], (double)got, (double)want);
        }
      c.margin = 0.0f;
      for (j = 0; j < (int)(sizeof eps / sizeof eps[0]); j++)
        for (pw = 0; pw < 2; pw++) {
          float want = ref_current(f, a, eps[j], pw), got;
          c.recipe = AMP_FP8_CURRENT; c.amax_epsilon = eps[j]; c.pow2 = pw;
          got = amp_fp8_scale_from_amax(&c, f, a, 5.0f);
          EXPECT(same(got, want), "current fmt %d amax %a eps %g pow2 %d: %a, want %a", (int)f, (double)a,
                 (double)eps[j], pw, (double)got, (double)want);
        }
      c.amax_epsilon = 0.0f;
      for (pw = 0; pw < 2; pw++) {
        float want = ref_torchao(f, a, pw), got;
        c.recipe = AMP_FP8_TORCHAO; c.pow2 = pw;
        got = amp_fp8_scale_from_amax(&c, f, a, 5.0f);
        EXPECT(same(got, want), "torchao fmt %d amax %a pow2 %d: %a, want %a", (int)f, (double)a, pw, (double)got,
               (double)want);
      }
      c.pow2 = 0;
      for (j = 0; j < (int)(sizeof margins_m / sizeof margins_m[0]); j++)
        for (p = 0; p < 3; p++) {
          float want = ref_msamp(f, a, prevs[p], margins_m[j]), got;
          c.recipe = AMP_FP8_MSAMP; c.margin = (float)margins_m[j];
          got = amp_fp8_scale_from_amax(&c, f, a, prevs[p]);
          EXPECT(same(got, want), "msamp fmt %d amax %a margin %d prev %g: %a, want %a", (int)f, (double)a,
                 margins_m[j], (double)prevs[p], (double)got, (double)want);
        }
    }
}

/* The anchors' documented edge values, by name (they disagree at amax 0, which is the point). */
static void recipes_edge_values_by_name(void) {
  amp_fp8_config c;
  memset(&c, 0, sizeof c);
  c.recipe = AMP_FP8_CURRENT;
  EXPECT(amp_fp8_scale_from_amax(&c, AMP_E4M3, 0.0f, 7.0f) == 1.0f, "TE current: amax 0 gives scale 1");
  c.recipe = AMP_FP8_TORCHAO;
  EXPECT(amp_fp8_scale_from_amax(&c, AMP_E4M3, 0.0f, 7.0f) == (float)(448.0 / 1e-12), "torchao: amax 0 gives 4.48e14");
  c.recipe = AMP_FP8_DELAYED;
  EXPECT(amp_fp8_scale_from_amax(&c, AMP_E4M3, 0.0f, 7.0f) == 7.0f, "delayed: amax 0 keeps the old scale");
  c.recipe = AMP_FP8_MSAMP;
  EXPECT(amp_fp8_scale_from_amax(&c, AMP_E4M3, 0.0f, 7.0f) == 7.0f, "msamp: amax 0 keeps the old scale");
  EXPECT(amp_fp8_scale_from_amax(&c, AMP_E4M3, 1.0f, 7.0f) == 256.0f, "msamp: 448 / 1 -> 2^8");
  EXPECT(amp_fp8_scale_from_amax(&c, AMP_E5M2, 1.0f, 7.0f) == 32768.0f, "msamp: 57344 / 1 -> 2^15");
  c.recipe = AMP_FP8_DELAYED; c.margin = 1.0f;
  EXPECT(amp_fp8_scale_from_amax(&c, AMP_E4M3, 2.0f, 7.0f) == 112.0f, "delayed margin 1: 448 / 2 / 2");
  EXPECT(amp_fp8_scale_from_amax(NULL, AMP_E4M3, 4.0f, 7.0f) == 112.0f, "NULL config: delayed, margin 0");
  EXPECT(nan_bits(amp_fp8_scale_from_amax(NULL, AMP_BF16, 4.0f, 7.0f)), "a non-fp8 format gives NaN");
  c.recipe = (amp_fp8_recipe)9;
  EXPECT(nan_bits(amp_fp8_scale_from_amax(&c, AMP_E4M3, 4.0f, 7.0f)), "an unknown recipe gives NaN");
}

/* ---- the scaler's history, as TransformerEngine's kernel rolls it ------------------------------ */

typedef struct ref_tensor { float hist[1024]; float scale, scale_inv; } ref_tensor;

/* amax_and_scale_update for one tensor, written as TE's kernel: a = slot i+1 (the last slot takes
   slot 0), amax = fmaxf(amax, a) from 0, slot i = a except slot 0 = 0. */
static void ref_update(const amp_fp8_config *c, amp_dtype f, ref_tensor *t, int len) {
  float rolled[1024], last = t->hist[0], amax = 0.0f;
  int i;
  for (i = 0; i < len; i++) {
    float a = i < len - 1 ? t->hist[i + 1] : last;
    if (!nan_bits(a) && !(bits_of(a) >> 31) && bits_of(a) > bits_of(amax)) amax = a;   /* fmaxf, from 0 */
    rolled[i] = i > 0 ? a : 0.0f;
  }
  memcpy(t->hist, rolled, (size_t)len * sizeof(float));
  if (c->recipe != AMP_FP8_DELAYED || c->most_recent) amax = last;
  switch (c->recipe) {
    case AMP_FP8_DELAYED: t->scale = ref_delayed(f, amax, t->scale, c->margin); break;
    case AMP_FP8_CURRENT: t->scale = ref_current(f, amax, c->amax_epsilon, c->pow2); break;
    case AMP_FP8_TORCHAO: t->scale = ref_torchao(f, amax, c->pow2); break;
    default: t->scale = ref_msamp(f, amax, t->scale, (int)c->margin); break;
  }
  t->scale_inv = (float)quot(1.0, (double)t->scale);
}
static float join(float a, float b) {   /* NaN wins, else the larger magnitude */
  uint32_t x = bits_of(a) & 0x7fffffffu, y = bits_of(b) & 0x7fffffffu;
  return f32_of(x > y ? x : y);
}
static float random_amax(void) {
  uint32_t r = next_u32() % 100;
  if (r < 5) return 0.0f;
  if (r < 7) return f32_of(0x7fc00000u);
  if (r < 9) return f32_of(0x7f800000u);
  if (r < 12) return (float)(next_u32() % 1000) * 1e30f;   /* a spike */
  return (float)(next_u32() % 100000) * 1e-3f * (float)ldexp(1.0, (int)(next_u32() % 40) - 20);
}

static void history_follows_transformer_engine(void) {
  static const int lens[] = { 1, 2, 3, 7, 1024 };
  enum { NT = 5 };
  static ref_tensor ref[NT];
  int round;
  for (round = 0; round < 12; round++) {
    amp_fp8_config c;
    amp_dtype fmt[NT];
    amp_fp8_scaler *f = NULL;
    int i, step, len;
    memset(&c, 0, sizeof c);
    c.recipe = (amp_fp8_recipe)(round % 4);
    if (c.recipe == AMP_FP8_DELAYED) {
      c.history_len = lens[round / 4 % 5 + (round == 8)];
      c.most_recent = round % 8 == 4;
      c.margin = round == 4 ? 1.0f : 0.0f;
    }
    if (c.recipe == AMP_FP8_CURRENT) { c.pow2 = round == 5; c.amax_epsilon = round == 9 ? 1e-3f : 0.0f; }
    if (c.recipe == AMP_FP8_TORCHAO) c.pow2 = round == 6;
    if (c.recipe == AMP_FP8_MSAMP) c.margin = (float)(round % 3);
    len = c.history_len ? c.history_len : 1;
    for (i = 0; i < NT; i++) {
      fmt[i] = i % 2 ? AMP_E5M2 : AMP_E4M3;
      memset(&ref[i], 0, sizeof ref[i]);
      ref[i].scale = 1.0f; ref[i].scale_inv = 1.0f;
    }
    EXPECT(amp_fp8_scaler_create(&f, amp_cpu(), &c, NT, fmt) == AMP_OK, "create: %s", amp_last_error());
    if (!f) return;
    EXPECT(amp_fp8_scaler_config(f).history_len == (c.recipe == AMP_FP8_DELAYED ? len : 0), "resolved history %d",
           amp_fp8_scaler_config(f).history_len);
    for (step = 0; step < 60; step++) {
      for (i = 0; i < NT; i++) {
        int k, records = (int)(next_u32() % 4);
        for (k = 0; k < records; k++) {
          float a = random_amax();
          if (k == 1) {   /* the amax from a cast of values whose largest magnitude is a */
            float x[3];
            x[0] = 0.5f * a; x[1] = -a; x[2] = 0.25f;
            if (nan_bits(a)) x[0] = a;
            EXPECT(amp_quantize(amp_cpu(), NULL, fmt[i], x, AMP_F32, 3, NULL, amp_fp8_scaler_amax_ptr(f, i)) == AMP_OK,
                   "%s", amp_last_error());
            ref[i].hist[0] = join(ref[i].hist[0], join(a, 0.25f));
          } else {
            EXPECT(amp_fp8_scaler_record(f, (size_t)i, a) == AMP_OK, "%s", amp_last_error());
            ref[i].hist[0] = join(ref[i].hist[0], a);
          }
        }
      }
      EXPECT(amp_fp8_scaler_update(f) == AMP_OK, "%s", amp_last_error());
      for (i = 0; i < NT; i++) {
        float h[1024];
        ref_update(&c, fmt[i], &ref[i], len);
        EXPECT(same(amp_fp8_scaler_get_scale(f, (size_t)i), ref[i].scale), "round %d step %d tensor %d: scale %a, want %a",
               round, step, i, (double)amp_fp8_scaler_get_scale(f, (size_t)i), (double)ref[i].scale);
        EXPECT(same(amp_fp8_scaler_get_scale_inv(f, (size_t)i), ref[i].scale_inv), "round %d step %d: scale_inv %a, want %a",
               round, step, (double)amp_fp8_scaler_get_scale_inv(f, (size_t)i), (double)ref[i].scale_inv);
        EXPECT(amp_fp8_scaler_history(f, (size_t)i, h, len) == AMP_OK, "%s", amp_last_error());
        EXPECT(memcmp(h, ref[i].hist, (size_t)len * sizeof(float)) == 0, "round %d step %d tensor %d: history differs",
               round, step, i);
        EXPECT(*amp_fp8_scaler_scale_ptr(f, (size_t)i) == ref[i].scale || nan_bits(ref[i].scale), "scale_ptr");
      }
    }
    amp_fp8_scaler_destroy(f);
  }
}

/* A spike under DELAYED "max": the scale drops at once and stays down for the history's length,
   then recovers: the behaviour the recipe is chosen for, by name. */
static void delayed_max_remembers_a_spike_for_its_history(void) {
  amp_fp8_config c;
  amp_fp8_scaler *f = NULL;
  int step;
  memset(&c, 0, sizeof c);
  c.history_len = 4;
  EXPECT(amp_fp8_scaler_create(&f, amp_cpu(), &c, 1, NULL) == AMP_OK, "%s", amp_last_error());
  if (!f) return;
  for (step = 0; step < 12; step++) {
    float want;
    amp_fp8_scaler_record(f, 0, step == 3 ? 64.0f : 1.0f);
    amp_fp8_scaler_update(f);
    /* slots hold the last 3 steps' amaxes (slot 0 is cleared); the update reads those and this one */
    want = step >= 3 && step <= 6 ? 7.0f : 448.0f;
    EXPECT(amp_fp8_scaler_get_scale(f, 0) == want, "step %d: scale %g, want %g", step,
           (double)amp_fp8_scaler_get_scale(f, 0), (double)want);
  }
  amp_fp8_scaler_destroy(f);
}

/* ---- checkpoints --------------------------------------------------------------------------- */

#define FP8_CKPT "build/test/fp8_scaler.ckpt"
static void step_scaler(amp_fp8_scaler *f, size_t n, int step) {
  size_t i;
  for (i = 0; i < n; i++) amp_fp8_scaler_record(f, i, (float)((step * 13 + (int)i * 7) % 17) * (step % 9 == 4 ? 100.0f : 1.0f));
  amp_fp8_scaler_update(f);
}
static int states_equal(amp_fp8_scaler *a, amp_fp8_scaler *b, size_t n, int len) {
  size_t i;
  for (i = 0; i < n; i++) {
    float ha[64], hb[64];
    if (bits_of(amp_fp8_scaler_get_scale(a, i)) != bits_of(amp_fp8_scaler_get_scale(b, i))) return 0;
    if (bits_of(amp_fp8_scaler_get_scale_inv(a, i)) != bits_of(amp_fp8_scaler_get_scale_inv(b, i))) return 0;
    amp_fp8_scaler_history(a, i, ha, len); amp_fp8_scaler_history(b, i, hb, len);
    if (memcmp(ha, hb, (size_t)len * sizeof(float)) != 0) return 0;
  }
  return 1;
}

static void a_resumed_scaler_continues_bit_for_bit(void) {
  amp_dtype fmt[3] = { AMP_E4M3, AMP_E5M2, AMP_E4M3 };
  int r;
  for (r = 0; r < 4; r++) {
    amp_fp8_config c;
    amp_fp8_scaler *run = NULL, *resumed = NULL;
    int step, len = r == 0 ? 8 : 1;
    memset(&c, 0, sizeof c);
    c.recipe = (amp_fp8_recipe)r;
    if (r == 0) c.history_len = 8;
    if (r == 3) c.margin = 1.0f;
    amp_fp8_scaler_create(&run, amp_cpu(), &c, 3, fmt);
    amp_fp8_scaler_create(&resumed, amp_cpu(), &c, 3, fmt);
    if (!run || !resumed) { EXPECT(0, "create: %s", amp_last_error()); return; }
    for (step = 0; step < 15; step++) step_scaler(run, 3, step);
    amp_fp8_scaler_record(run, 1, 3.5f);   /* a step half done: slot 0 holds an amax already */
    EXPECT(amp_fp8_scaler_save(run, FP8_CKPT) == AMP_OK, "save: %s", amp_last_error());
    EXPECT(amp_fp8_scaler_load(resumed, FP8_CKPT) == AMP_OK, "load: %s", amp_last_error());
    EXPECT(states_equal(run, resumed, 3, len), "recipe %d: the loaded state differs", r);
    amp_fp8_scaler_update(run); amp_fp8_scaler_update(resumed);
    for (step = 15; step < 40; step++) { step_scaler(run, 3, step); step_scaler(resumed, 3, step); }
    EXPECT(states_equal(run, resumed, 3, len), "recipe %d: the resumed run went its own way", r);
    amp_fp8_scaler_destroy(run); amp_fp8_scaler_destroy(resumed);
  }
}

static void a_history_of_another_length_is_resized_by_the_rule(void) {
  amp_fp8_config c;
  amp_fp8_scaler *a = NULL, *shorter = NULL, *longer = NULL;
  float h[8], hs[3], hl[12];
  int step, j;
  memset(&c, 0, sizeof c);
  c.history_len = 8;
  amp_fp8_scaler_create(&a, amp_cpu(), &c, 1, NULL);
  c.history_len = 3; amp_fp8_scaler_create(&shorter, amp_cpu(), &c, 1, NULL);
  c.history_len = 12; amp_fp8_scaler_create(&longer, amp_cpu(), &c, 1, NULL);
  if (!a || !shorter || !longer) { EXPECT(0, "create: %s", amp_last_error()); return; }
  for (step = 0; step < 10; step++) { amp_fp8_scaler_record(a, 0, (float)(step + 1)); amp_fp8_scaler_update(a); }
  amp_fp8_scaler_record(a, 0, 0.5f);
  amp_fp8_scaler_save(a, FP8_CKPT);
  EXPECT(amp_fp8_scaler_load(shorter, FP8_CKPT) == AMP_OK && amp_fp8_scaler_load(longer, FP8_CKPT) == AMP_OK, "%s",
         amp_last_error());
  amp_fp8_scaler_history(a, 0, h, 8); amp_fp8_scaler_history(shorter, 0, hs, 3); amp_fp8_scaler_history(longer, 0, hl, 12);
  EXPECT(h[0] == 0.5f && hs[0] == 0.5f && hl[0] == 0.5f, "slot 0: %g %g %g", (double)h[0], (double)hs[0], (double)hl[0]);
  EXPECT(h[7] == 10.0f && h[1] == 4.0f, "the saved history's newest %g, oldest %g", (double)h[7], (double)h[1]);
  EXPECT(hs[2] == 10.0f && hs[1] == 9.0f, "shorter: the newest two kept (%g %g)", (double)hs[1], (double)hs[2]);
  for (j = 1; j < 8; j++) EXPECT(hl[12 - 8 + j] == h[j], "longer: slot %d", 12 - 8 + j);
  for (j = 1; j < 5; j++) EXPECT(hl[j] == 0.0f, "longer: older slot %d starts at 0", j);
  EXPECT(amp_fp8_scaler_get_scale(shorter, 0) == amp_fp8_scaler_get_scale(a, 0), "the scale loads as it is");
  amp_fp8_scaler_destroy(a); amp_fp8_scaler_destroy(shorter); amp_fp8_scaler_destroy(longer);
}

/* A file that does not fit the scaler, or was damaged, is refused and changes nothing. */
static void a_bad_fp8_file_is_refused_and_changes_nothing(void) {
  amp_dtype two[2] = { AMP_E4M3, AMP_E5M2 }, swapped[2] = { AMP_E5M2, AMP_E4M3 };
  amp_fp8_config c, cur;
  amp_fp8_scaler *a = NULL, *b = NULL, *wrong_n = NULL, *wrong_fmt = NULL, *wrong_recipe = NULL;
  unsigned char file[4096];
  size_t size;
  FILE *fp;
  int step, k;
  memset(&c, 0, sizeof c); c.history_len = 4;
  memset(&cur, 0, sizeof cur); cur.recipe = AMP_FP8_CURRENT;
  amp_fp8_scaler_create(&a, amp_cpu(), &c, 2, two);
  amp_fp8_scaler_create(&b, amp_cpu(), &c, 2, two);
  amp_fp8_scaler_create(&wrong_n, amp_cpu(), &c, 3, NULL);
  amp_fp8_scaler_create(&wrong_fmt, amp_cpu(), &c, 2, swapped);
  amp_fp8_scaler_create(&wrong_recipe, amp_cpu(), &cur, 2, two);
  if (!a || !b || !wrong_n || !wrong_fmt || !wrong_recipe) { EXPECT(0, "create: %s", amp_last_error()); return; }
  for (step = 0; step < 5; step++) { step_scaler(a, 2, step); step_scaler(b, 2, step + 3); }
  EXPECT(amp_fp8_scaler_save(a, FP8_CKPT) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_load(wrong_n, FP8_CKPT) == AMP_ERR_CORRUPT && strstr(amp_last_error(), "2 tensors"), "%s",
         amp_last_error());
  EXPECT(amp_fp8_scaler_load(wrong_fmt, FP8_CKPT) == AMP_ERR_CORRUPT && strstr(amp_last_error(), "tensor 0 is format"),
         "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_load(wrong_recipe, FP8_CKPT) == AMP_ERR_CORRUPT && strstr(amp_last_error(), "recipe"), "%s",
         amp_last_error());
  fp = fopen(FP8_CKPT, "rb");
  size = fp ? fread(file, 1, sizeof file, fp) : 0;
  if (fp) fclose(fp);
  EXPECT(size > 100 && size < sizeof file, "file of %zu bytes", size);
  for (k = 0; k < 4; k++) {   /* a flipped bit, a cut, a negative amax and a wrong scale_inv (CRCs made good) */
    unsigned char bad[4096];
    size_t bsize = size, at = 32 + 36;   /* the first tensor, after the header (32 bytes) and the record (36) */
    float neg = -2.0f, one = 1.0f;
    amp__crc crc;
    uint32_t v;
    memcpy(bad, file, size);
    if (k == 0) bad[size / 2] ^= 0x10;
    if (k == 1) bsize = size - 9;
    if (k >= 2) {
      if (k == 2) memcpy(bad + at + 12 + 4, &neg, 4);   /* slot 1 of tensor 0 */
      else memcpy(bad + at + 8, &one, 4);               /* scale_inv 1 beside a scale that is not 1 */
      amp__crc_init(&crc); amp__crc_add(&crc, bad, size - 4); v = amp__crc_value(&crc); memcpy(bad + size - 4, &v, 4);
    }
    fp = fopen(FP8_CKPT, "wb");
    if (fp) { fwrite(bad, 1, bsize, fp); fclose(fp); }
    EXPECT(amp_fp8_scaler_load(b, FP8_CKPT) == AMP_ERR_CORRUPT, "damage %d loaded", k);
    EXPECT(strstr(amp_last_error(), k == 0 ? "CRC" : k == 1 ? "truncated" : k == 2 ? "slot 1" : "inverse"), "damage %d: %s",
           k, amp_last_error());
  }
  {   /* b kept its own state through every refusal: it still steps as a twin that was never loaded */
    amp_fp8_scaler *twin = NULL;
    amp_fp8_scaler_create(&twin, amp_cpu(), &c, 2, two);
    for (step = 0; step < 5; step++) step_scaler(twin, 2, step + 3);
    EXPECT(twin && states_equal(b, twin, 2, 4), "a refused load changed the scaler");
    amp_fp8_scaler_destroy(twin);
  }
  EXPECT(amp_fp8_scaler_load(b, "build/test/no/such/file") == AMP_ERR_IO, "a missing file: %s", amp_last_error());
  EXPECT(amp_fp8_scaler_save(a, "build/test/") == AMP_ERR_ARG, "a directory name");
  EXPECT(amp_fp8_scaler_save(NULL, FP8_CKPT) == AMP_ERR_ARG && amp_fp8_scaler_load(NULL, FP8_CKPT) == AMP_ERR_ARG, "NULL");
  amp_fp8_scaler_destroy(a); amp_fp8_scaler_destroy(b); amp_fp8_scaler_destroy(wrong_n);
  amp_fp8_scaler_destroy(wrong_fmt); amp_fp8_scaler_destroy(wrong_recipe);
}

/* ---- amp_quantize --------------------------------------------------------------------------- */


static float random_x(void) {
  uint32_t r = next_u32() % 64;
  if (r == 0) return f32_of(0x7fc00000u | (next_u32() & 0x803fffffu));   /* NaN, either sign, a payload */
  if (r == 1) return f32_of(0x7f800000u | (next_u32() & 0x80000000u));   /* +-inf */
  if (r == 2) return f32_of(next_u32() & 0x807fffffu);                   /* subnormal */
  return f32_of((next_u32() & 0x80000000u) | ((100u + next_u32() % 60u) << 23) | (next_u32() & 0x7fffffu));
}

static void quantize_equals_the_scalar_cast_at_every_level(void) {
  static const size_t lens[] = { 0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 100, 1000, 4099 };
  static const float scales[] = { 1.0f, 0.37f, 1024.0f, 3.4028235e38f, 0.0f };
  enum { MAXN = 4099 + 8 };
  static float xs[MAXN];
  static float xbuf_[MAXN + 8];
  static unsigned char qbuf[MAXN + 80], want[MAXN + 8], *xbuf = (unsigned char *)xbuf_;
  amp_dtype xt;
  int lv, s, f, off, stream;
  size_t li, i;
#ifdef AMP__X86_SIMD
  size_t keep = amp__nt_bytes;
#endif
  for (i = 0; i < MAXN; i++) xs[i] = random_x();
  /* twice: with the library's streaming threshold (8 MiB: these outputs are stored), and with none
     (every output streamed from its first 64-byte boundary, the head and tail stored) */
  for (stream = 0; stream < 2; stream++)
  for (lv = 0; lv < t_simd_levels(); lv++) {
#ifdef AMP__X86_SIMD
    amp__nt_bytes = stream ? 0 : keep;
#else
    if (stream) break;
#endif
    t_simd_level(lv);
    for (xt = AMP_F32; xt <= AMP_BF16; xt = (amp_dtype)(xt + 1))
      for (f = 0; f < 2; f++)
        for (s = 0; s < 6; s++)
          for (li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (off = 0; off < 2; off++) {
              size_t n = lens[li], sz = amp_dtype_size(xt);
              amp_dtype fmt = f ? AMP_E5M2 : AMP_E4M3;
              unsigned char *x = xbuf + off * sz;   /* a start that is not 16-byte aligned */
              unsigned char *q = qbuf + ((64u - ((uintptr_t)qbuf & 63u)) & 63u) + (off ? 7 : 0);   /* 64-aligned, or 7 past */
              const float *sc = s < 5 ? &scales[s] : NULL;
              float k = sc ? *sc : 1.0f, amax = s == 2 ? 1e6f : 0.0f, amax2 = amax, top;
              uint32_t a = bits_of(amax) & 0x7fffffffu;
              for (i = 0; i < n; i++) {   /* x in its own type; the reference reads it back widened */
                float v;
                amp__store(x, xt, i, xs[(i * 7 + li) % MAXN]);
                v = amp__load(x, xt, i);
                if ((bits_of(v) & 0x7fffffffu) > a) a = bits_of(v) & 0x7fffffffu;
                want[i] = f ? amp_f32_to_e5m2(v * k, 1) : amp_f32_to_e4m3(v * k, 1);
              }
              top = f32_of(a);
              memset(q, 0xa5, n + 8);
              EXPECT(amp_quantize(amp_cpu(), q, fmt, x, xt, n, sc, &amax) == AMP_OK, "%s", amp_last_error());
              EXPECT(memcmp(q, want, n) == 0 && q[n] == 0xa5, "level %d x_type %d fmt %d scale %d n %zu stream %d: codes differ",
                     lv, (int)xt, f, s, n, stream);
              EXPECT(bits_of(amax) == bits_of(top), "level %d x_type %d n %zu: amax %a, want %a", lv, (int)xt, n,
                     (double)amax, (double)top);
              EXPECT(amp_quantize(amp_cpu(), NULL, fmt, x, xt, n, sc, &amax2) == AMP_OK, "%s", amp_last_error());
              EXPECT(bits_of(amax2) == bits_of(top), "q NULL: amax %a, want %a", (double)amax2, (double)top);
              memset(q, 0xa5, n + 8);
              EXPECT(amp_quantize(amp_cpu(), q, fmt, x, xt, n, sc, NULL) == AMP_OK, "%s", amp_last_error());
              EXPECT(memcmp(q, want, n) == 0, "amax NULL: codes differ (level %d n %zu)", lv, n);
              (void)sz;
            }
  }
#ifdef AMP__X86_SIMD
  amp__nt_bytes = keep;
#endif
  t_simd_level(2);
  {   /* a NaN already in amax_out stays */
    float x[3] = { 1.0f, 2.0f, 3.0f }, amax = f32_of(0x7fc00000u);
    amp_quantize(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, 3, NULL, &amax);
    EXPECT(nan_bits(amax), "a NaN amax stays NaN");
  }
}

/* ---- bad input: a clear error naming the function, nothing changed ------------------------- */

static void bad_input_is_refused_and_changes_nothing(void) {
  amp_fp8_config c;
  amp_fp8_scaler *f = (amp_fp8_scaler *)&c, *g = NULL;
  amp_dtype bad_fmt[2] = { AMP_E4M3, AMP_BF16 };
  float x[4] = { 1, 2, 3, 4 }, amax = 0.0f, h[4];
  unsigned char q[8];
  struct { amp_fp8_recipe r; int len, recent; float margin; int pow2; float eps; const char *what; } cfgs[] = {
    { (amp_fp8_recipe)7, 0, 0, 0, 0, 0, "recipe 7" },
    { AMP_FP8_DELAYED, -1, 0, 0, 0, 0, "history_len -1" },
    { AMP_FP8_DELAYED, AMP_FP8_HISTORY_MAX + 1, 0, 0, 0, 0, "history_len" },
    { AMP_FP8_CURRENT, 16, 0, 0, 0, 0, "history_len 16 given to the current" },
    { AMP_FP8_CURRENT, 0, 1, 0, 0, 0, "most_recent 1 given to the current" },
    { AMP_FP8_DELAYED, 0, 0, 0, 0, 0, "" },   /* margin NaN, set below */
    { AMP_FP8_DELAYED, 0, 0, 65.0f, 0, 0, "margin 65" },
    { AMP_FP8_CURRENT, 0, 0, 1.0f, 0, 0, "margin 1 given to the current" },
    { AMP_FP8_MSAMP, 0, 0, 1.5f, 0, 0, "margin 1.5 must be an integer" },
    { AMP_FP8_DELAYED, 0, 0, 0, 1, 0, "pow2 1 given to the delayed" },
    { AMP_FP8_CURRENT, 0, 0, 0, 0, -1.0f, "amax_epsilon -1" },
    { AMP_FP8_CURRENT, 0, 0, 0, 0, 1e-40f, "must be finite, >= 0 and not subnormal" },
    { AMP_FP8_TORCHAO, 0, 0, 0, 0, 1e-3f, "amax_epsilon 0.001 given to the torchao" },
  };
  size_t i;
  for (i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
    memset(&c, 0, sizeof c);
    c.recipe = cfgs[i].r; c.history_len = cfgs[i].len; c.most_recent = cfgs[i].recent; c.margin = cfgs[i].margin;
    c.pow2 = cfgs[i].pow2; c.amax_epsilon = cfgs[i].eps;
    if (i == 5) c.margin = f32_of(0x7fc00000u);
    f = (amp_fp8_scaler *)&c;
    EXPECT(amp_fp8_scaler_create(&f, amp_cpu(), &c, 2, NULL) == AMP_ERR_ARG && f == NULL, "%zu accepted", i);
    EXPECT(strstr(amp_last_error(), "amp_fp8_scaler_create") && strstr(amp_last_error(), i == 5 ? "margin" : cfgs[i].what),
           "%zu: message '%s'", i, amp_last_error());
  }
  {   /* amax_epsilon -0 is 0: taken, and the scales are those of 0 */
    amp_fp8_scaler *z = NULL;
    float one = 3.0f;
    memset(&c, 0, sizeof c);
    c.recipe = AMP_FP8_CURRENT; c.amax_epsilon = -0.0f;
    EXPECT(amp_fp8_scaler_create(&z, amp_cpu(), &c, 1, NULL) == AMP_OK, "amax_epsilon -0 refused: %s", amp_last_error());
    if (z) {
      EXPECT(amp_fp8_scaler_record(z, 0, one) == AMP_OK && amp_fp8_scaler_update(z) == AMP_OK &&
                 amp_fp8_scaler_get_scale(z, 0) == 448.0f / 3.0f,
             "amax_epsilon -0: scale %g after amax 3, want 448 / 3", (double)amp_fp8_scaler_get_scale(z, 0));
      amp_fp8_scaler_destroy(z);
    }
  }
  EXPECT(amp_fp8_scaler_create(&g, amp_cpu(), NULL, 0, NULL) == AMP_ERR_ARG && strstr(amp_last_error(), "n is 0"),
         "n 0: %s", amp_last_error());
  EXPECT(amp_fp8_scaler_create(&g, amp_cpu(), NULL, 2, bad_fmt) == AMP_ERR_ARG && strstr(amp_last_error(), "formats[1]") &&
             strstr(amp_last_error(), "AMP_BF16"), "bf16 format: %s", amp_last_error());
  EXPECT(amp_fp8_scaler_create(&g, NULL, NULL, 2, NULL) == AMP_ERR_ARG, "NULL device");
  EXPECT(amp_fp8_scaler_create(NULL, amp_cpu(), NULL, 2, NULL) == AMP_ERR_ARG, "NULL out");
  EXPECT(amp_fp8_scaler_create(&g, amp_cpu(), NULL, 2, NULL) == AMP_OK, "%s", amp_last_error());
  if (!g) return;
  amp_fp8_scaler_record(g, 1, 3.0f);
  EXPECT(amp_fp8_scaler_record(g, 2, 1.0f) == AMP_ERR_ARG && strstr(amp_last_error(), "tensor 2 is out of range"),
         "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_record(g, 1, -1.0f) == AMP_ERR_ARG && strstr(amp_last_error(), "negative"), "%s", amp_last_error());
  EXPECT(amp_fp8_scaler_record(g, 1, f32_of(0xff800000u)) == AMP_ERR_ARG, "-inf amax");
  EXPECT(amp_fp8_scaler_history(g, 1, h, 1) == AMP_OK && h[0] == 3.0f, "the refused records changed slot 0: %g",
         (double)h[0]);
  EXPECT(amp_fp8_scaler_record(g, 1, -0.0f) == AMP_OK, "-0 is an amax");
  EXPECT(amp_fp8_scaler_history(g, 1, h, 1025) == AMP_ERR_ARG, "len past the history");
  EXPECT(amp_fp8_scaler_history(g, 1, NULL, 1) == AMP_ERR_ARG, "NULL out");
  EXPECT(nan_bits(amp_fp8_scaler_get_scale(g, 9)) && strstr(amp_last_error(), "amp_fp8_scaler_get_scale"), "bad index");
  EXPECT(amp_fp8_scaler_amax_ptr(g, 2) == NULL && amp_fp8_scaler_scale_ptr(NULL, 0) == NULL, "bad pointers");
  EXPECT(amp_fp8_scaler_update(NULL) == AMP_ERR_ARG, "update NULL");
  amp_fp8_scaler_destroy(g);
  amp_fp8_scaler_destroy(NULL);

  memset(q, 0x5a, sizeof q);
  EXPECT(amp_quantize(amp_cpu(), q, AMP_F16, x, AMP_F32, 4, NULL, &amax) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "amp_quantize: fp8 1 (AMP_F16) is not an fp8 format"), "%s", amp_last_error());
  EXPECT(amp_quantize(amp_cpu(), q, AMP_E4M3, x, AMP_E5M2, 4, NULL, &amax) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "x_type"), "%s", amp_last_error());
  EXPECT(amp_quantize(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, 4, NULL, NULL) == AMP_ERR_ARG, "nothing to write");
  EXPECT(amp_quantize(amp_cpu(), q, AMP_E4M3, NULL, AMP_F32, 4, NULL, &amax) == AMP_ERR_ARG, "x NULL");
  EXPECT(amp_quantize(NULL, q, AMP_E4M3, x, AMP_F32, 4, NULL, &amax) == AMP_ERR_ARG, "d NULL");
  EXPECT(amp_quantize(amp_cpu(), (unsigned char *)x + 3, AMP_E4M3, x, AMP_F32, 4, NULL, &amax) == AMP_ERR_ARG &&
             strstr(amp_last_error(), "overlaps"), "%s", amp_last_error());
  EXPECT(x[0] == 1.0f && x[3] == 4.0f && amax == 0.0f, "a refused call wrote");
  for (i = 0; i < sizeof q; i++) EXPECT(q[i] == 0x5a, "byte %zu written by a refused call", i);
  EXPECT(amp_quantize(amp_cpu(), NULL, AMP_E4M3, NULL, AMP_F32, 0, NULL, NULL) == AMP_ERR_ARG, "n 0 with nothing to write");
  EXPECT(amp_quantize(amp_cpu(), q, AMP_E4M3, NULL, AMP_F32, 0, NULL, &amax) == AMP_OK, "n 0 is fine");
  EXPECT(strcmp(amp_fp8_recipe_name(AMP_FP8_MSAMP), "msamp") == 0 && amp_fp8_recipe_name((amp_fp8_recipe)4) == NULL,
         "recipe names");
}

int main(void) {
  RUN(recipes_equal_their_anchors);
  RUN(recipes_edge_values_by_name);
  RUN(history_follows_transformer_engine);
  RUN(delayed_max_remembers_a_spike_for_its_history);
  RUN(a_resumed_scaler_continues_bit_for_bit);
  RUN(a_history_of_another_length_is_resized_by_the_rule);
  RUN(a_bad_fp8_file_is_refused_and_changes_nothing);
  RUN(quantize_equals_the_scalar_cast_at_every_level);
  RUN(bad_input_is_refused_and_changes_nothing);
  TEST_END();
}
