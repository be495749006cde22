/* tests/test_spike.c - spike_zscore: a clean step whose unscaled global grad norm is more than
   spike_zscore standard deviations above the mean of the last 100 clean steps' norms is skipped
   like an overflow (masters, moments, model copies, step count bit for bit unchanged) but the loss
   scale is never backed off, counted in amp_optimizer_spike_skips with spike_norm's skips.
   The expected decisions come from a direct computation here: the list of every clean step's norm
   (amp_optimizer_grad_norm of the steps that updated), its last min(100, n) entries, their mean
   and population standard deviation in long double, no skip while fewer than 20 are held. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static double uni(void) { return (double)rnd() / 2147483648.0; }   /* [0, 1) */

/* The direct rule over the last min(100, n) of the n clean norms in list. *margin: how far the
   norm is from the threshold, relative (a decision closer than 1e-9 is not compared). */
static int direct_zscore(const double *list, int n, double norm, double z, double *margin) {
  int k = n < 100 ? n : 100, i;
  long double mean = 0.0L, ss = 0.0L, sd;
  *margin = 1.0;
  if (k < 20) return 0;
  for (i = n - k; i < n; i++) mean += list[i];
  mean /= k;
  for (i = n - k; i < n; i++) ss += (list[i] - mean) * (list[i] - mean);
  sd = sqrtl(ss / k);
  *margin = fabs((double)((norm - mean) - z * sd)) / (fabs(norm) + 1e-30);
  return norm - mean > z * sd;
}

/* The window functions themselves against the direct computation: 250 norms pushed (the ring
   wraps twice), after each push the held norms are the last min(100, k) pushed (as a multiset),
   and the decision for candidates around the threshold equals the direct rule. A non-finite norm
   is not pushed. */
static void the_window_rule_equals_a_direct_computation(void) {
  static double list[400];
  amp__spike_window w;
  int k, n = 0, i, c;
  memset(&w, 0, sizeof w);
  for (k = 0; k < 250; k++) {
    float x = (float)(1.0 + 0.3 * uni());
    if (k == 50) { amp__spike_window_push(&w, (float)INFINITY); amp__spike_window_push(&w, (float)NAN); }
    amp__spike_window_push(&w, x);
    list[n++] = x;
    {   /* the held norms: the last min(100, n), each once */
      int want = n < 100 ? n : 100, used[100], found = 1;
      memset(used, 0, sizeof used);
      for (i = n - want; i < n && found; i++) {
        int j;
        found = 0;
        for (j = 0; j < w.count; j++)
          if (!used[j] && w.norm[j] == (float)list[i]) { used[j] = 1; found = 1; break; }
      }
      EXPECT(w.count == want && found, "after %d pushes: count %d (want %d), the held norms %s the last ones pushed", n,
             (int)w.count, want, found ? "are" : "are NOT");
    }
    for (c = 0; c < 8; c++) {   /* candidates from below the mean to far above */
      double z = c < 4 ? 2.0 : 3.5, margin;
      float cand = (float)(1.0 + 0.6 * uni() + (c & 1 ? 0.3 : 0.0));
      int want = direct_zscore(list, n, cand, z, &margin);
      int got = amp__spike_skip(cand, 0.0f, (float)z, &w, 0);
      if (margin > 1e-9)
        EXPECT(got == want, "window of %d norms, candidate %.9g, z %g: amp__spike_skip %d, the direct rule %d", n, (double)cand, z,
               got, want);
      EXPECT(amp__spike_skip(cand, 0.0f, (float)z, &w, 1) == 0, "an overflow is never a spike (n %d)", n);
      EXPECT(amp__spike_skip(cand, 0.0f, 0.0f, &w, 0) == 0, "spike_zscore 0 is off (n %d)", n);
    }
    EXPECT(amp__spike_skip((float)INFINITY, 0.0f, 3.0f, &w, 0) == (n >= 20), "an infinite norm of finite grads, %d held: %d", n,
           amp__spike_skip((float)INFINITY, 0.0f, 3.0f, &w, 0));
  }
  {   /* the minimum: 19 equal-ish norms never skip, the 20th makes the window decide */
    memset(&w, 0, sizeof w);
    for (k = 0; k < 19; k++) amp__spike_window_push(&w, 1.0f + 0.001f * (float)k);
    EXPECT(amp__spike_skip(100.0f, 0.0f, 3.0f, &w, 0) == 0, "19 norms held: a norm of 100 must not skip (too few clean steps)");
    amp__spike_window_push(&w, 1.0f);
    EXPECT(amp__spike_skip(100.0f, 0.0f, 3.0f, &w, 0) == 1, "20 norms held: a norm of 100 must skip");
  }
}

/* A run of 200 steps, grads of norm about 1 with noise, a gradual rise (0.002 per step over steps
   40 .. 159, then flat), and planted spikes (the grads 2x, steps 10, 70, 120, 121, 185; step 10
   comes before 20 clean steps and must NOT skip, and then counts as clean). Every step's decision
   equals the direct rule; the rise is never skipped; a skipped step changes no byte of the
   optimizer; the scale equals that of a scaler told every iteration was clean; the run equals a
   run without spike_zscore that never saw the skipped steps. Through a scaler and through
   amp_optimizer_step, SGD with momentum and AdamW. */
static void planted_spikes_skip_and_a_gradual_rise_does_not(void) {
  enum { N = 256, STEPS = 200 };
  static unsigned char before[N * 16 + 64], after[N * 16 + 64];
  static double clean[STEPS];
  int via, k;
  for (via = 0; via < 2; via++)
    for (k = 0; k < 2; k++) {
      static amp_bf16 wa[N], wb[N]; static float g[N], base[N];
      amp_optimizer *oa, *ob; amp_scaler *sa = NULL, *sb = NULL;
      amp_scaler_config scfg = amp_scaler_preset(AMP_PRESET_PYTORCH);
      amp_optim_config c;
      int i, step, n_clean = 0, skips = 0, rise_skips = 0, planted_skips = 0;
      double bn = 0.0;
      memset(&c, 0, sizeof c);
      c.kind = k == 0 ? AMP_SGD : AMP_ADAMW; c.lr = 1e-3f; c.momentum = k == 0 ? 0.9f : 0.0f;
      scfg.init_scale = 1024.0f; scfg.growth_interval = 25;
      for (i = 0; i < N; i++) { wa[i] = wb[i] = amp_f32_to_bf16(0.002f * (float)(i - 128)); base[i] = (float)(uni() - 0.5); bn += (double)base[i] * base[i]; }
      for (i = 0; i < N; i++) base[i] = (float)(base[i] / sqrt(bn));   /* norm 1 */
      if (amp_optimizer_create(&ob, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
      c.spike_zscore = 4.0f;
      if (amp_optimizer_create(&oa, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s", amp_last_error()); return; }
      if (via == 0 && (amp_scaler_create(&sa, amp_cpu(), &scfg) != AMP_OK || amp_scaler_create(&sb, amp_cpu(), &scfg) != AMP_OK)) {
        EXPECT(0, "%s", amp_last_error()); return;
      }
      EXPECT(amp_optimizer_add_mixed(oa, AMP_BF16, wa, AMP_F32, g, N) == AMP_OK &&
             amp_optimizer_add_mixed(ob, AMP_BF16, wb, AMP_F32, g, N) == AMP_OK, "add: %s", amp_last_error());
      for (step = 0; step < STEPS; step++) {
        int planted = step == 10 || step == 70 || step == 120 || step == 121 || step == 185;
        double f = 1.0 + 0.05 * (2.0 * uni() - 1.0) + 0.002 * (step < 40 ? 0 : step < 160 ? step - 39 : 120), margin;
        float scale = via == 0 ? amp_scaler_get_scale(sa) : 1.0f, norm;
        int want, got;
        size_t len;
        if (planted) f *= 2.0;
        for (i = 0; i < N; i++) g[i] = scale * (float)(f * base[i]);
        len = t_optim_snapshot(oa, before);
        if (via == 0) {
          EXPECT(amp_scaler_unscale(sa, oa) == AMP_OK, "unscale: %s", amp_last_error());
          norm = amp_optimizer_grad_norm(oa);
          EXPECT(amp_scaler_step(sa, oa) == AMP_OK && amp_scaler_update(sa) == AMP_OK, "step: %s", amp_last_error());
        } else {
          EXPECT(amp_optimizer_step(oa) == AMP_OK, "step: %s", amp_last_error());
          norm = amp_optimizer_grad_norm(oa);
        }
        want = direct_zscore(clean, n_clean, norm, 4.0, &margin);
        got = (int)amp_optimizer_spike_skips(oa) - skips;
        EXPECT(margin < 1e-9 || got == want, "via %d kind %d step %d: norm %.9g, %d clean norms: skipped %d, the direct rule %d", via,
               k, step, (double)norm, n_clean, got, want);
        EXPECT(amp_optimizer_last_skipped(oa) == 0 && (via == 1 || amp_scaler_last_skipped(sa) == 0),
               "step %d: a spike is not an overflow", step);
        if (got) {
          skips++;
          if (planted) planted_skips++; else rise_skips++;
          EXPECT(t_optim_snapshot(oa, after) == len && memcmp(before, after, len) == 0, "via %d kind %d step %d: the skipped step "
                 "changed the optimizer", via, k, step);
          if (via == 0) EXPECT(amp_scaler_update_found_inf(sb, 0) == AMP_OK, "update: %s", amp_last_error());
        } else {
          clean[n_clean++] = norm;
          if (via == 0) EXPECT(amp_scaler_step(sb, ob) == AMP_OK && amp_scaler_update(sb) == AMP_OK, "step: %s", amp_last_error());
          else EXPECT(amp_optimizer_step(ob) == AMP_OK, "step: %s", amp_last_error());
        }
        if (via == 0)
          EXPECT(amp_scaler_get_scale(sa) == amp_scaler_get_scale(sb), "step %d: scale %g, the rule with no spike %g", step,
                 (double)amp_scaler_get_scale(sa), (double)amp_scaler_get_scale(sb));
        EXPECT(t_optim_snapshot(oa, before) == t_optim_snapshot(ob, after) && memcmp(before, after, len) == 0,
               "via %d kind %d step %d: the run with spikes skipped differs from the run that never saw them", via, k, step);
        if (step == 10) EXPECT(!got, "step 10: a planted spike with only 10 clean norms must not skip (minimum 20)");
      }
      EXPECT(planted_skips == 4 && rise_skips == 0 && amp_optimizer_spike_skips(oa) == 4 &&
             amp_optimizer_step_count(oa) == STEPS - 4 && amp_optimizer_spike_skips(ob) == 0,
             "via %d kind %d: planted skipped %d (want 4: steps 70, 120, 121, 185), rise skipped %d (want 0), spike_skips %ld, "
             "steps %ld", via, k, planted_skips, rise_skips, amp_optimizer_spike_skips(oa), amp_optimizer_step_count(oa));
      amp_optimizer_destroy(oa); amp_optimizer_destroy(ob); amp_scaler_destroy(sa); amp_scaler_destroy(sb);
    }
}

/* spike_norm and spike_zscore together: both kinds of skip in the one counter. */
static void both_rules_count_in_one_counter(void) {
  enum { N = 64 };
  static float w[N], g[N];
  amp_optimizer *o;
  amp_optim_config c;
  int i, step;
  memset(&c, 0, sizeof c);
  c.kind = AMP_ADAM; c.spike_norm = 50.0f; c.spike_zscore = 3.0f;
  for (i = 0; i < N; i++) w[i] = 0.01f * (float)i;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_optimizer_add(o, AMP_F32, w, g, N) != AMP_OK) {
    EXPECT(0, "%s", amp_last_error()); return;
  }
  for (step = 0; step < 30; step++) {
    float f = step == 5 ? 100.0f : step == 25 ? 10.0f : 1.0f + 0.01f * (float)(step % 5);   /* 5: above spike_norm; 25: z */
    for (i = 0; i < N; i++) g[i] = f / 8.0f;   /* norm f */
    EXPECT(amp_optimizer_step(o) == AMP_OK, "step: %s", amp_last_error());
  }
  EXPECT(amp_optimizer_spike_skips(o) == 2 && amp_optimizer_step_count(o) == 28, "spike_skips %ld (want 2: steps 5 and 25), steps %ld",
         amp_optimizer_spike_skips(o), amp_optimizer_step_count(o));
  amp_optimizer_destroy(o);
}

static void bad_values_are_refused(void) {
  float bad[3] = {-1.0f, (float)NAN, (float)INFINITY};
  const char *shown[3] = {"-1", "nan", "inf"};
  int k;
  for (k = 0; k < 3; k++) {
    amp_optim_config c;
    amp_optimizer *o = NULL;
    amp_status st;
    memset(&c, 0, sizeof c);
    c.spike_zscore = bad[k];
    st = amp_optimizer_create(&o, amp_cpu(), &c);
    EXPECT(st == AMP_ERR_ARG && o == NULL && strstr(amp_last_error(), "amp_optimizer_create") &&
           strstr(amp_last_error(), "spike_zscore") && strstr(amp_last_error(), shown[k]),
           "spike_zscore %g: %s '%s'", (double)bad[k], amp_status_string(st), amp_last_error());
  }
  {   /* -0 is 0: off */
    amp_optim_config c;
    amp_optimizer *o = NULL;
    memset(&c, 0, sizeof c);
    c.spike_zscore = -0.0f;
    EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "spike_zscore -0: %s", amp_last_error());
    amp_optimizer_destroy(o);
  }
}

int main(void) {
  RUN(the_window_rule_equals_a_direct_computation);
  RUN(planted_spikes_skip_and_a_gradual_rise_does_not);
  RUN(both_rules_count_in_one_counter);
  RUN(bad_values_are_refused);
  TEST_END();
}
