/* tests/test_scaler.c - the loss scaler: presets against literal transcriptions of each anchor's
   update rule, hand-written hysteresis cases, floor/cap, call order, several optimizers. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static double rndu(void) { return (double)rnd() / 2147483648.0; }

/* A random overflow pattern: segments of 1..5000 steps, each with its own overflow rate, so that
   growth, long bursts, the floor and hysteresis all happen. */
static void make_pattern(int *pat, int n) {
  static const double rates[] = {0.0, 0.0002, 0.001, 0.01, 0.3, 0.9};
  int i = 0;
  while (i < n) {
    int len = 1 + (int)(rnd() % 5000);
    double p = rates[rnd() % 6];
    for (; len > 0 && i < n; len--, i++) pat[i] = rndu() < p;
  }
}
static int pattern_steps(void) { return t_quick() ? 10000 : 100000; }

/* The references test finiteness with amp__finite (on the bits) where the anchors write
   isfinite(): a build with -Ofast (-ffinite-math-only) folds isfinite() to 1. */
/* ---- the references: literal transcriptions of the anchors' code (amp.h adds one thing to all:
   the scale never goes below FLT_MIN, as the manual says; marked AMP below) ---- */

/* PyTorch aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp _amp_update_scale_cpu_ */
typedef struct { float scale; int tracker; } ref_torch;
static void ref_torch_update(ref_torch *r, int found_inf, double growth_factor, double backoff_factor, int growth_interval) {
  if (found_inf) {
    r->scale = (float)(r->scale * backoff_factor);
    if (r->scale < FLT_MIN) r->scale = FLT_MIN;   /* AMP */
    r->tracker = 0;
  } else {
    int successful = r->tracker + 1;
    if (successful == growth_interval) {
      float new_scale = (float)(r->scale * growth_factor);
      if (amp__finite(new_scale)) r->scale = new_scale;
      r->tracker = 0;
    } else {
      r->tracker = successful;
    }
  }
}

/* Paddle phi update_loss_scaling: Update() */
typedef struct { float scale; int good, bad; } ref_paddle;
static void ref_paddle_update(ref_paddle *r, int found_inf, int incr_every_n_steps, int decr_every_n_nan_or_inf,
                              float incr_ratio, float decr_ratio) {
  if (found_inf) {
    r->good = 0;
    r->bad = r->bad + 1;
    if (r->bad == decr_every_n_nan_or_inf) {
      float new_loss_scaling = r->scale * decr_ratio;
      r->scale = new_loss_scaling < 1.0f ? 1.0f : new_loss_scaling;
      r->bad = 0;
    }
  } else {
    r->bad = 0;
    r->good = r->good + 1;
    if (r->good == incr_every_n_steps) {
      float new_loss_scaling = r->scale * incr_ratio;
      r->scale = amp__finite(new_loss_scaling) ? new_loss_scaling : r->scale;
      r->good = 0;
    }
  }
}

/* DeepSpeed deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale, the scaler ZeRO
   and CreateLossScaler use (Python floats: double). Where DeepSpeed raises at the minimum scale
   amp.h stays there (max() does that). */
typedef struct { double cur_scale; long cur_iter, last_overflow_iter; int cur_hysteresis; } ref_ds;
static void ref_ds_update(ref_ds *r, int overflow, double scale_factor, long scale_window, double min_scale,
                          int delayed_shift, int consecutive_hysteresis) {
  if (overflow) {
    if (delayed_shift == 1 || r->cur_hysteresis == 1) {
      double next_scale = r->cur_scale / scale_factor;
      r->cur_scale = next_scale > min_scale ? next_scale : min_scale;
    } else {
      r->cur_hysteresis -= 1;
    }
    r->last_overflow_iter = r->cur_iter;
  } else {
    if (consecutive_hysteresis) r->cur_hysteresis = delayed_shift;
    if ((r->cur_iter - r->last_overflow_iter) % scale_window == 0) {
      if (!consecutive_hysteresis) r->cur_hysteresis = delayed_shift;
      if (amp__finite((float)(r->cur_scale * scale_factor))) r->cur_scale *= scale_factor;  /* AMP: f32 scale */
    }
  }
  r->cur_iter += 1;
}

/* DeepSpeed's older FP16_Optimizer._update_scale (deepspeed/runtime/fp16/fused_optimizer.py): no
   hysteresis, and its window `stable_interval = (cur_iter - last_overflow_iter) - 1` grows one
   clean step later than update_scale; amp.h's late_growth option. */
typedef struct { double cur_scale; long cur_iter, last_overflow_iter; } ref_ds_fused;
static void ref_ds_fused_update(ref_ds_fused *r, int skip, double scale_factor, long scale_window, double min_loss_scale) {
  if (skip) {
    double next_scale = r->cur_scale / scale_factor;
    r->cur_scale = next_scale > min_loss_scale ? next_scale : min_loss_scale;
    r->last_overflow_iter = r->cur_iter;
  } else {
    long stable_interval = (r->cur_iter - r->last_overflow_iter) - 1;
    if (stable_interval > 0 && stable_interval % scale_window == 0)
      if (amp__finite((float)(r->cur_scale * scale_factor))) r->cur_scale *= scale_factor;  /* AMP: f32 scale */
  }
  r->cur_iter += 1;
}

/* apex apex/amp/scaler.py LossScaler.update_scale (dynamic, Python floats) */
typedef struct { double loss_scale; int unskipped; } ref_apex;
static void ref_apex_update(ref_apex *r, int has_overflow, double min_loss_scale, double max_loss_scale, int scale_seq_len) {
  if (has_overflow) {
    if (min_loss_scale) r->loss_scale = fmax(min_loss_scale, r->loss_scale / 2.);
    else r->loss_scale = r->loss_scale / 2.;
    if (r->loss_scale < FLT_MIN) r->loss_scale = FLT_MIN;   /* AMP */
    r->unskipped = 0;
  } else {
    r->unskipped += 1;
  }
  if (r->unskipped == scale_seq_len) {
    r->loss_scale = fmin(max_loss_scale, r->loss_scale * 2.);
    r->unskipped = 0;
  }
}

/* apex csrc/update_scale_hysteresis.cu update_scale_hysteresis_cuda_kernel */
typedef struct { float current_scale; int growth_tracker, hysteresis_tracker; } ref_apexh;
static void ref_apexh_update(ref_apexh *r, float found_inf, double growth_factor, double backoff_factor,
                             int growth_interval, int hysteresis) {
  if (found_inf > 0) {
    r->hysteresis_tracker -= 1;
    if (r->hysteresis_tracker > 0) { r->growth_tracker = 0; return; }
  }
  if (found_inf) {
    r->current_scale = (float)(r->current_scale * backoff_factor);
    if (r->current_scale < FLT_MIN) r->current_scale = FLT_MIN;   /* AMP */
    r->growth_tracker = 0;
  } else {
    int successful = r->growth_tracker + 1;
    if (successful == growth_interval) {
      float new_scale = (float)(r->current_scale * growth_factor);
      if (amp__finite(new_scale)) r->current_scale = new_scale;
      r->growth_tracker = 0;
    } else {
      r->growth_tracker = successful;
    }
  }
  if (found_inf <= 0) r->hysteresis_tracker = hysteresis;
}

/* Keras / TF DynamicLossScale.update */
typedef struct { float scale; int counter; } ref_keras;
static void ref_keras_update(ref_keras *r, int finite, int growth_steps, float multiplier) {
  if (finite) {
    if (r->counter + 1 >= growth_steps) {
      float new_loss_scale = r->scale * multiplier;
      if (amp__finite(new_loss_scale)) r->scale = new_loss_scale;
      r->counter = 0;
    } else {
      r->counter += 1;
    }
  } else {
    float new_loss_scale = r->scale / multiplier;
    r->scale = new_loss_scale > 1.0f ? new_loss_scale : 1.0f;
    r->counter = 0;
  }
}

static void log_quiet(void *user, const char *msg) { (void)user; (void)msg; }
static amp_scaler *make(const amp_scaler_config *c) {
  amp_scaler *s = NULL;
  amp_status st = amp_scaler_create(&s, amp_cpu(), c);
  EXPECT(st == AMP_OK, "amp_scaler_create: %s", amp_last_error());
  return s;
}

/* Runs the pattern through s and through ref (a closure by switch), comparing every step. */
enum { R_TORCH, R_PADDLE, R_PADDLE_LEGACY, R_DS, R_DS_CONSEC, R_DS_FUSED, R_APEX, R_APEXH, R_KERAS };
static void run_against_reference(int which, const amp_scaler_config *c, const char *name) {
  int n = pattern_steps(), i, bad = 0, skipped = 0;
  int *pat = (int *)malloc(sizeof(int) * (size_t)n);
  amp_scaler *s = make(c);
  ref_torch rt = {65536.0f, 0};
  ref_paddle rp = {65536.0f, 0, 0}, rpl = {32768.0f, 0, 0};
  ref_ds rd = {65536.0, 0, -1, 2}, rdc = {65536.0, 0, -1, 2};
  ref_ds_fused rdf = {65536.0, 0, -1};
  ref_apex ra = {65536.0, 0};
  ref_apexh rh = {65536.0f, 0, 3};
  ref_keras rk = {32768.0f, 0};
  float lo = INFINITY, hi = 0;
  make_pattern(pat, n);
  amp_set_log(log_quiet, NULL);
  if (!s) { free(pat); return; }
  for (i = 0; i < n && bad < 5; i++) {
    float want = 0;
    amp_scaler_update_found_inf(s, pat[i]);
    skipped += pat[i];
    switch (which) {
      case R_TORCH: ref_torch_update(&rt, pat[i], 2.0, 0.5, 2000); want = rt.scale; break;
      case R_PADDLE: ref_paddle_update(&rp, pat[i], 2000, 1, 2.0f, 0.5f); want = rp.scale; break;
      case R_PADDLE_LEGACY: ref_paddle_update(&rpl, pat[i], 1000, 2, 2.0f, 0.8f); want = rpl.scale; break;
      case R_DS: ref_ds_update(&rd, pat[i], 2.0, 1000, 1.0, 2, 0); want = (float)rd.cur_scale; break;
      case R_DS_CONSEC: ref_ds_update(&rdc, pat[i], 2.0, 1000, 1.0, 2, 1); want = (float)rdc.cur_scale; break;
      case R_DS_FUSED: ref_ds_fused_update(&rdf, pat[i], 2.0, 1000, 1.0); want = (float)rdf.cur_scale; break;
      case R_APEX: ref_apex_update(&ra, pat[i], 0.0, 16777216.0, 2000); want = (float)ra.loss_scale; break;
      case R_APEXH: ref_apexh_update(&rh, (float)pat[i], 2.0, 0.5, 50, 3); want = rh.current_scale; break;
      case R_KERAS: ref_keras_update(&rk, !pat[i], 2000, 2.0f); want = rk.scale; break;
    }
    if (amp_scaler_get_scale(s) != want) {
      bad++;
      EXPECT(0, "%s: step %d (found_inf %d): scale expected %a, got %a", name, i, pat[i], (double)want, (double)amp_scaler_get_scale(s));
    }
    if (want < lo) lo = want;
    if (want > hi) hi = want;
  }
  EXPECT(amp_scaler_skipped_steps(s) == skipped, "%s: skipped steps expected %d, got %ld", name, skipped, amp_scaler_skipped_steps(s));
  /* the pattern must have exercised both directions, else the test proves little */
  EXPECT(hi > lo * 4, "%s: the pattern moved the scale only within [%g, %g]", name, (double)lo, (double)hi);
  amp_scaler_destroy(s);
  amp_set_log(NULL, NULL);
  free(pat);
}

static void preset_pytorch_matches_torch_update_rule(void) {
  amp_scaler_config c = amp_scaler_preset(AMP_PRESET_PYTORCH);
  amp_scaler_config z; memset(&z, 0, sizeof z);
  run_against_reference(R_TORCH, &c, "pytorch preset");
  run_against_reference(R_TORCH, &z, "zero config");
  run_against_reference(R_TORCH, NULL, "NULL config");
}
static void preset_paddle_matches_update_loss_scaling(void) {
  amp_scaler_config c = amp_scaler_preset(AMP_PRESET_PADDLE);
  run_against_reference(R_PADDLE, &c, "paddle preset");
  c.init_scale = 32768; c.backoff_factor = 0.8f; c.growth_interval = 1000; c.hysteresis = 2;
  run_against_reference(R_PADDLE_LEGACY, &c, "paddle legacy decorate()");
}
static void preset_deepspeed_matches_dynamic_loss_scaler(void) {
  amp_scaler_config c = amp_scaler_preset(AMP_PRESET_DEEPSPEED);
  run_against_reference(R_DS, &c, "deepspeed preset");
  c.hysteresis_mode = AMP_HYSTERESIS_CLEAN_REFILL;
  run_against_reference(R_DS_CONSEC, &c, "deepspeed consecutive_hysteresis");
  c.hysteresis = 1; c.hysteresis_mode = AMP_HYSTERESIS_CONSECUTIVE; c.late_growth = 1;
  run_against_reference(R_DS_FUSED, &c, "deepspeed FP16_Optimizer._update_scale (late_growth)");
}
static void preset_apex_matches_amp_loss_scaler_and_hysteresis_kernel(void) {
  amp_scaler_config c = amp_scaler_preset(AMP_PRESET_APEX);
  run_against_reference(R_APEX, &c, "apex preset");
  c.max_scale = 0; c.hysteresis = 3; c.growth_interval = 50;
  run_against_reference(R_APEXH, &c, "apex update_scale_hysteresis, hysteresis 3");
}
static void preset_keras_matches_dynamic_loss_scale(void) {
  amp_scaler_config c = amp_scaler_preset(AMP_PRESET_KERAS);
  run_against_reference(R_KERAS, &c, "keras preset");
}

/* Hand-written short cases: O = overflow, C = clean; expected scale after each step. */
static void check_sequence(const char *name, amp_scaler_config c, const char *seq, const float *want) {
  amp_scaler *s = make(&c);
  int i;
  if (!s) return;
  for (i = 0; seq[i]; i++) {
    amp_scaler_update_found_inf(s, seq[i] == 'O');
    EXPECT(amp_scaler_get_scale(s) == want[i], "%s: after step %d of %s expected %g, got %g", name, i, seq, (double)want[i],
           (double)amp_scaler_get_scale(s));
  }
  amp_scaler_destroy(s);
}
static void hysteresis_consecutive_needs_n_overflows_in_a_row(void) {
  amp_scaler_config c; static const float w[] = {64, 32, 32, 32, 32, 16, 16, 16, 8};
  memset(&c, 0, sizeof c); c.init_scale = 64; c.hysteresis = 2; c.hysteresis_mode = AMP_HYSTERESIS_CONSECUTIVE; c.growth_interval = 100;
  check_sequence("consecutive N=2", c, "OOOCOOCOO", w);
}
static void hysteresis_clean_refill_backs_off_at_once_after_running_out(void) {
  amp_scaler_config c; static const float w[] = {64, 32, 16, 16, 16, 8, 4, 4, 4};
  memset(&c, 0, sizeof c); c.init_scale = 64; c.hysteresis = 2; c.hysteresis_mode = AMP_HYSTERESIS_CLEAN_REFILL; c.growth_interval = 100;
  check_sequence("clean refill N=2", c, "OOOCOOOCO", w);
}
static void hysteresis_growth_refill_refills_only_when_the_scale_grows(void) {
  /* interval 3: O (count 1 left) O (back off: 32) C O (not refilled: 16) C C C (grow: 32, refilled) O (skip) O (16) */
  amp_scaler_config c; static const float w[] = {64, 32, 32, 16, 16, 16, 32, 32, 16};
  memset(&c, 0, sizeof c); c.init_scale = 64; c.hysteresis = 2; c.hysteresis_mode = AMP_HYSTERESIS_GROWTH_REFILL; c.growth_interval = 3;
  check_sequence("growth refill N=2", c, "OOCOCCCOO", w);
}
static void late_growth_counts_the_window_like_deepspeed(void) {
  /* interval 2, late: the first growth after 3 clean steps, then every 2; an overflow restarts */
  amp_scaler_config c; static const float w[] = {8, 8, 16, 16, 32, 16, 16, 16, 32};
  memset(&c, 0, sizeof c); c.init_scale = 8; c.growth_interval = 2; c.late_growth = 1;
  check_sequence("late growth", c, "CCCCCOCCC", w);
}
static void hysteresis_one_is_the_same_in_every_flavour(void) {
  static const float w[] = {32, 16, 16, 32, 16, 16, 32};
  int mode;
  for (mode = 0; mode < 3; mode++) {
    amp_scaler_config c; memset(&c, 0, sizeof c);
    c.init_scale = 64; c.growth_interval = 2; c.hysteresis_mode = mode;
    check_sequence("hysteresis 1", c, "OOCCOCC", w);
  }
}

static int log_count; static char log_last[512];
static void log_capture(void *user, const char *msg) { (void)user; log_count++; snprintf(log_last, sizeof log_last, "%s", msg); }

static void floor_holds_and_is_reported_once(void) {
  amp_scaler_config c; amp_scaler *s; int i;
  memset(&c, 0, sizeof c); c.init_scale = 8; c.min_scale = 4; c.growth_interval = 3;
  amp_set_log(log_capture, NULL); log_count = 0;
  s = make(&c); if (!s) return;
  amp_scaler_update_found_inf(s, 1);
  EXPECT(amp_scaler_get_scale(s) == 4 && !amp_scaler_at_floor(s), "8 -> 4 reaches the floor without going below: scale %g at_floor %d", (double)amp_scaler_get_scale(s), amp_scaler_at_floor(s));
  for (i = 0; i < 5; i++) amp_scaler_update_found_inf(s, 1);
  EXPECT(amp_scaler_get_scale(s) == 4, "floor 4: expected 4, got %g", (double)amp_scaler_get_scale(s));
  EXPECT(amp_scaler_at_floor(s) == 1, "at_floor expected 1, got %d", amp_scaler_at_floor(s));
  EXPECT(log_count == 1, "the floor message expected once, got %d times", log_count);
  EXPECT(strstr(log_last, "floor") != NULL, "the message names the floor: '%s'", log_last);
  amp_scaler_update_found_inf(s, 0);
  EXPECT(amp_scaler_at_floor(s) == 0, "a clean step clears at_floor, got %d", amp_scaler_at_floor(s));
  for (i = 0; i < 3; i++) amp_scaler_update_found_inf(s, 0);
  EXPECT(amp_scaler_get_scale(s) == 8, "grows off the floor: expected 8, got %g", (double)amp_scaler_get_scale(s));
  for (i = 0; i < 3; i++) amp_scaler_update_found_inf(s, 1);
  EXPECT(log_count == 2, "after growing off the floor the message is re-armed: count %d", log_count);
  amp_scaler_destroy(s);
  amp_set_log(NULL, NULL);
}
static void scale_never_becomes_zero_or_subnormal(void) {
  amp_scaler *s = make(NULL); int i;
  amp_set_log(log_capture, NULL); log_count = 0;
  if (!s) return;
  for (i = 0; i < 400; i++) amp_scaler_update_found_inf(s, 1);
  EXPECT(amp_scaler_get_scale(s) == FLT_MIN, "400 overflows: expected FLT_MIN %a, got %a", (double)FLT_MIN, (double)amp_scaler_get_scale(s));
  EXPECT(amp_scaler_at_floor(s) && log_count == 1, "at_floor %d, log count %d", amp_scaler_at_floor(s), log_count);
  for (i = 0; i < 2000; i++) amp_scaler_update_found_inf(s, 0);
  EXPECT(amp_scaler_get_scale(s) == 2 * FLT_MIN, "grows again from FLT_MIN: got %a", (double)amp_scaler_get_scale(s));
  amp_scaler_destroy(s);
  amp_set_log(NULL, NULL);
}
static void cap_and_growth_to_inf_leave_the_scale_finite(void) {
  amp_scaler_config c; amp_scaler *s;
  memset(&c, 0, sizeof c); c.init_scale = 8; c.max_scale = 12; c.growth_interval = 1;
  s = make(&c); if (!s) return;
  amp_scaler_update_found_inf(s, 0);
  EXPECT(amp_scaler_get_scale(s) == 12, "cap 12: 8*2 expected 12, got %g", (double)amp_scaler_get_scale(s));
  amp_scaler_update_found_inf(s, 0);
  EXPECT(amp_scaler_get_scale(s) == 12, "cap 12 holds, got %g", (double)amp_scaler_get_scale(s));
  amp_scaler_destroy(s);
  memset(&c, 0, sizeof c); c.init_scale = 0x1p127f; c.growth_interval = 1;
  s = make(&c); if (!s) return;
  amp_scaler_update_found_inf(s, 0);
  EXPECT(amp_scaler_get_scale(s) == 0x1p127f, "2^127 * 2 is inf: the scale stays, got %g", (double)amp_scaler_get_scale(s));
  amp_scaler_destroy(s);
}
static void fixed_scaling_never_changes_the_scale(void) {
  amp_scaler_config c; amp_scaler *s; int i;
  memset(&c, 0, sizeof c); c.init_scale = 128; c.fixed = 1; c.growth_interval = 1;
  s = make(&c); if (!s) return;
  for (i = 0; i < 100; i++) amp_scaler_update_found_inf(s, i % 3 == 0);
  EXPECT(amp_scaler_get_scale(s) == 128, "fixed 128: got %g", (double)amp_scaler_get_scale(s));
  EXPECT(amp_scaler_skipped_steps(s) == 34, "fixed still counts skips: expected 34, got %ld", amp_scaler_skipped_steps(s));
  amp_scaler_destroy(s);
}

static void bad_config_is_refused_naming_the_field(void) {
  struct { const char *field; amp_scaler_config c; } cases[14];
  int n = 0, i;
  memset(cases, 0, sizeof cases);
  cases[n].field = "growth_factor"; cases[n++].c.growth_factor = 1.0f;
  cases[n].field = "growth_factor"; cases[n++].c.growth_factor = NAN;
  cases[n].field = "backoff_factor"; cases[n++].c.backoff_factor = 1.5f;
  cases[n].field = "backoff_factor"; cases[n++].c.backoff_factor = -0.5f;
  cases[n].field = "growth_interval"; cases[n++].c.growth_interval = -1;
  cases[n].field = "hysteresis"; cases[n++].c.hysteresis = -2;
  cases[n].field = "hysteresis_mode"; cases[n++].c.hysteresis_mode = 3;
  cases[n].field = "min_scale"; cases[n++].c.min_scale = -1.0f;
  cases[n].field = "min_scale"; cases[n++].c.min_scale = INFINITY;
  cases[n].field = "max_scale"; cases[n].c.min_scale = 4; cases[n++].c.max_scale = 2;
  cases[n].field = "init_scale"; cases[n++].c.init_scale = INFINITY;
  cases[n].field = "init_scale"; cases[n++].c.init_scale = -1.0f;
  cases[n].field = "init_scale"; cases[n].c.init_scale = 1.0f; cases[n++].c.min_scale = 2.0f;
  cases[n].field = "init_scale"; cases[n++].c.init_scale = 1e-40f;
  for (i = 0; i < n; i++) {
    amp_scaler *s = (amp_scaler *)&i;
    amp_status st = amp_scaler_create(&s, amp_cpu(), &cases[i].c);
    EXPECT(st == AMP_ERR_ARG && s == NULL, "case %d (%s): expected AMP_ERR_ARG, got %s", i, cases[i].field, amp_status_string(st));
    EXPECT(strstr(amp_last_error(), cases[i].field) && strstr(amp_last_error(), "amp_scaler_create"),
           "case %d: message '%s' should name amp_scaler_create and %s", i, amp_last_error(), cases[i].field);
  }
  EXPECT(amp_scaler_create(NULL, amp_cpu(), NULL) == AMP_ERR_ARG, "out NULL: %s", amp_last_error());
}

/* ---- call order with optimizers ---- */
static amp_optimizer *sgd(float *w, float *g, size_t n) {
  amp_optim_config oc; amp_optimizer *o = NULL;
  memset(&oc, 0, sizeof oc); oc.lr = 1.0f;
  if (amp_optimizer_create(&o, amp_cpu(), &oc) != AMP_OK || amp_optimizer_add(o, AMP_F32, w, g, n) != AMP_OK)
    EXPECT(0, "sgd setup: %s", amp_last_error());
  return o;
}
static void call_order_follows_pytorch(void) {
  float w[4] = {1, 2, 3, 4}, g[4] = {0, 0, 0, 0};
  amp_scaler *s = make(NULL); amp_optimizer *o = sgd(w, g, 4);
  amp_status st;
  if (!s || !o) return;
  st = amp_scaler_update(s);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "No inf checks were recorded"), "update first: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_unscale(s, o) == AMP_OK, "unscale: %s", amp_last_error());
  st = amp_scaler_unscale(s, o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_scaler_unscale: unscale() has already been called on this optimizer since the last update()"),
         "second unscale: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_step(s, o) == AMP_OK, "step: %s", amp_last_error());
  st = amp_scaler_step(s, o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "step() has already been called since the last update()"), "second step: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_scaler_unscale(s, o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "after step()"), "unscale after step: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_update(s) == AMP_OK, "update: %s", amp_last_error());
  EXPECT(amp_scaler_step(s, o) == AMP_OK, "after update, step works again: %s", amp_last_error());
  EXPECT(amp_scaler_update(s) == AMP_OK, "update: %s", amp_last_error());
  EXPECT(amp_optimizer_step_count(o) == 2, "two steps: got %ld", amp_optimizer_step_count(o));
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}
static void scaler_and_optimizer_on_different_devices_are_refused(void) {
  amp_device fake;   /* another device than the scaler's: its own object (the CPU's operations) */
  float w[2] = {1, 2}, g[2] = {0, 0};
  amp_optim_config oc; amp_optimizer *o = NULL; amp_scaler *s = make(NULL);
  amp_status st;
  memset(&fake, 0, sizeof fake); fake.is_cuda = 1;
  memset(&oc, 0, sizeof oc);
  if (!s || amp_optimizer_create(&o, &fake, &oc) != AMP_OK || amp_optimizer_add(o, AMP_F32, w, g, 2) != AMP_OK) { EXPECT(0, "setup %s", amp_last_error()); return; }
  st = amp_scaler_step(s, o);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "different devices"), "got %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(w[0] == 1 && amp_optimizer_step_count(o) == 0, "nothing changed: w0 %g steps %ld", (double)w[0], amp_optimizer_step_count(o));
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}
static void an_inf_in_one_optimizer_skips_all_that_were_unscaled_first(void) {
  float w1[3] = {1, 1, 1}, g1[3] = {65536, 65536, 65536}, w2[3] = {1, 1, 1}, g2[3] = {65536, INFINITY, 0};
  amp_scaler *s = make(NULL); amp_optimizer *o1 = sgd(w1, g1, 3), *o2 = sgd(w2, g2, 3);
  if (!s || !o1 || !o2) return;
  /* all unscaled first: o2's inf skips both */
  amp_scaler_unscale(s, o1); amp_scaler_unscale(s, o2);
  amp_scaler_step(s, o1); amp_scaler_step(s, o2); amp_scaler_update(s);
  EXPECT(w1[0] == 1 && w2[0] == 1, "both skipped: w1 %g w2 %g", (double)w1[0], (double)w2[0]);
  EXPECT(amp_scaler_get_scale(s) == 32768 && amp_scaler_last_skipped(s) == 1, "backed off once: scale %g last_skipped %d",
         (double)amp_scaler_get_scale(s), amp_scaler_last_skipped(s));
  /* without unscaling first, o1 (clean, stepped first) updates; o2 skips; the scale backs off */
  g1[0] = g1[1] = g1[2] = 32768;
  amp_scaler_step(s, o1); amp_scaler_step(s, o2); amp_scaler_update(s);
  EXPECT(w1[0] == 0 && w2[0] == 1, "o1 stepped (w1 %g, expected 0), o2 skipped (w2 %g)", (double)w1[0], (double)w2[0]);
  EXPECT(amp_scaler_get_scale(s) == 16384, "backed off: %g", (double)amp_scaler_get_scale(s));
  /* o2 stepped after o1 saw inf in the same iteration skips too */
  g2[1] = 0; g1[0] = INFINITY;
  amp_scaler_step(s, o1); amp_scaler_step(s, o2); amp_scaler_update(s);
  EXPECT(w2[0] == 1 && amp_optimizer_step_count(o2) == 0, "o2 skipped after o1's inf: w2 %g steps %ld", (double)w2[0], amp_optimizer_step_count(o2));
  EXPECT(amp_scaler_skipped_steps(s) == 3, "3 skipped iterations, got %ld", amp_scaler_skipped_steps(s));
  amp_optimizer_destroy(o1); amp_optimizer_destroy(o2); amp_scaler_destroy(s);
}

int main(void) {
  RUN(preset_pytorch_matches_torch_update_rule);
  RUN(preset_paddle_matches_update_loss_scaling);
  RUN(preset_deepspeed_matches_dynamic_loss_scaler);
  RUN(preset_apex_matches_amp_loss_scaler_and_hysteresis_kernel);
  RUN(preset_keras_matches_dynamic_loss_scale);
  RUN(hysteresis_consecutive_needs_n_overflows_in_a_row);
  RUN(hysteresis_clean_refill_backs_off_at_once_after_running_out);
  RUN(hysteresis_growth_refill_refills_only_when_the_scale_grows);
  RUN(late_growth_counts_the_window_like_deepspeed);
  RUN(hysteresis_one_is_the_same_in_every_flavour);
  RUN(floor_holds_and_is_reported_once);
  RUN(scale_never_becomes_zero_or_subnormal);
  RUN(cap_and_growth_to_inf_leave_the_scale_finite);
  RUN(fixed_scaling_never_changes_the_scale);
  RUN(bad_config_is_refused_naming_the_field);
  RUN(call_order_follows_pytorch);
  RUN(scaler_and_optimizer_on_different_devices_are_refused);
  RUN(an_inf_in_one_optimizer_skips_all_that_were_unscaled_first);
  TEST_END();
}
