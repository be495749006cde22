/* 04_dynamic_scaler.c - the dynamic loss scaler at work, PyTorch's rule next to DeepSpeed's.

   The scaler's rule, once per iteration:
     - the gradients overflowed (inf/NaN): skip the step, and back off (scale x 0.5);
     - otherwise count a clean step; after `growth_interval` clean steps in a row, grow (x 2).
   So the scale hovers just under the largest value the gradients tolerate, probing upwards
   now and then. The presets differ in the details:

     PyTorch GradScaler    65536, x2 every 2000 clean steps, x0.5 on every overflow
     DeepSpeed             65536, x2 every 1000 clean steps, hysteresis 2: an overflow first
                           uses up one of 2 "lives" and only skips; the lives refill only when
                           the scale grows, so a second overflow later backs off; floor 1

   Here both scalers see the same planted overflows (no network: amp_scaler_update_found_inf
   is the entry point for trainers that test their gradients themselves).

   A loss spike is another matter: the gradients are finite but far larger than usual (a bad
   batch), and applying them can throw training off. Backing off the scale would not help (the
   next step is fine); amp.h can skip such a step without touching the scale: with
   amp_optim_config.spike_zscore = z a step whose gradient norm is more than z standard
   deviations above the mean of the last 100 clean steps' norms is skipped (spike_norm: above
   a fixed bound). The last part plants one such spike among 60 ordinary steps. Writes
   dynamic_scaler.svg (log2 of the scale over the steps) into argv[1] or the current
   directory. Exits 1 if a rule stated below does not hold.

   Build:  cc -std=c99 -O2 -I. examples/04_dynamic_scaler.c -o 04_dynamic_scaler -lm */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>

#define STEPS 6000

#define SPIKE_STEP 45

static int failures = 0;
static void claim(int holds, const char *what) {
  printf("  %s %s\n", holds ? "[ok]" : "[WRONG]", what);
  if (!holds) failures++;
}

/* The planted overflows: a lone one, a second lone one, a burst of five, and a late pair. */
static int overflows_at(int step) {
  return step == 300 || step == 700 || (step >= 2500 && step < 2505) || step == 4600 || step == 4601;
}

int main(int argc, char **argv) {
  static float scale[2][STEPS + 1];
  static const char *names[2] = { "PyTorch", "DeepSpeed" };
  static const char *colors[2] = { "#d62728", "#1f77b4" };
  const char *dir = argc > 1 ? argv[1] : ".";
  char path[1024];
  int k, t, i;
  FILE *f;

  for (k = 0; k < 2; k++) {
    amp_scaler_config c = amp_scaler_preset(k == 0 ? AMP_PRESET_PYTORCH : AMP_PRESET_DEEPSPEED);
    amp_scaler *s;
    if (amp_scaler_create(&s, amp_cpu(), &c) != AMP_OK) { printf("amp.h: %s\n", amp_last_error()); return 1; }
    scale[k][0] = amp_scaler_get_scale(s);
    for (t = 0; t < STEPS; t++) {
      if (amp_scaler_update_found_inf(s, overflows_at(t)) != AMP_OK) { printf("amp.h: %s\n", amp_last_error()); return 1; }
      scale[k][t + 1] = amp_scaler_get_scale(s);   /* the scale the next step uses */
    }
    amp_scaler_destroy(s);
  }

  printf("Overflows planted at steps 300, 700, 2500-2504, 4600-4601. The scale after each:\n\n");
  printf("  %-28s %12s %12s\n", "after step", names[0], names[1]);
  {
    static const int at[] = { 0, 300, 700, 1700, 1701, 2499, 2500, 2504, 3504, 4504, 4600, 4601, 5601, 5999 };
    for (i = 0; i < (int)(sizeof at / sizeof at[0]); i++)
      printf("  %-28d %12g %12g\n", at[i], scale[0][at[i] + 1], scale[1][at[i] + 1]);
  }
  printf("\n");
  claim(scale[0][301] == 32768.0f, "PyTorch: the lone overflow at step 300 halves the scale at once");
  claim(scale[1][301] == 65536.0f, "DeepSpeed: the same overflow only skips the step (hysteresis: one life used)");
  claim(scale[1][701] == 32768.0f, "DeepSpeed: the overflow at 700 backs off: lives refill only on growth, not on clean steps");
  {
    int grow = 701;   /* the first step after the overflow at 700 whose update grew DeepSpeed's scale */
    while (grow < 2500 && !(scale[1][grow + 1] > scale[1][grow])) grow++;
    printf("  (DeepSpeed grew at step %d: it counts its 1000-step window from the step after an overflow)\n", grow);
    claim(grow == 1700 && scale[1][grow + 1] == 65536.0f,
          "DeepSpeed grows after 1000 clean steps, not 2000 like PyTorch, and its lives refill");
  }
  claim(scale[0][2500] == 16384.0f, "PyTorch: 1799 clean steps (701..2499) are not enough to grow (it needs 2000)");
  claim(scale[0][2505] == scale[0][2500] / 32.0f, "PyTorch: a burst of 5 overflows halves 5 times");
  claim(scale[1][2505] == scale[1][2500] / 16.0f, "DeepSpeed: the first of the burst only skips, the other 4 each back off");
  claim(scale[0][4505] == 2.0f * scale[0][4504], "PyTorch grows after the 2000 clean steps 2505..4504");
  claim(scale[0][4602] == scale[0][4600] / 4.0f && scale[1][4602] == scale[1][4600] / 2.0f,
        "the late pair: PyTorch backs off twice, DeepSpeed once (its refilled life absorbs the first)");
  claim(scale[1][STEPS] == 64.0f * scale[0][STEPS], "after 6000 steps DeepSpeed's scale is 64x PyTorch's");

  snprintf(path, sizeof path, "%s/dynamic_scaler.svg", dir);
  f = fopen(path, "w");
  if (!f) { printf("cannot write %s\n", path); return 1; }
  {
    const double x0 = 60, y0 = 40, pw = 700, ph = 300;
    const int lo = 6, hi = 18;   /* log2 range shown */
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"400\" font-family=\"sans-serif\" font-size=\"11\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text x=\"%g\" y=\"22\" font-size=\"14\">Loss scale over %d steps, same planted overflows (grey lines)</text>\n", x0, STEPS);
    for (t = 0; t < STEPS; t++)
      if (overflows_at(t)) fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ccc\"/>\n",
                                   x0 + pw * t / STEPS, y0, x0 + pw * t / STEPS, y0 + ph);
    for (i = lo; i <= hi; i += 2)
      fprintf(f, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">2^%d</text>\n", x0 - 6, y0 + ph - ph * (i - lo) / (hi - lo) + 4, i);
    for (t = 0; t <= STEPS; t += 1000)
      fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n", x0 + pw * t / STEPS, y0 + ph + 16, t);
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">step</text>\n", x0 + pw / 2, y0 + ph + 34);
    for (k = 0; k < 2; k++) {
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colors[k]);
      for (t = 0; t <= STEPS; t++) {
        /* a step plot: only the points where the scale changes, and the ends */
        if (t == 0 || t == STEPS || scale[k][t] != scale[k][t - 1]) {
          double yprev = t ? log2(scale[k][t - 1]) : log2(scale[k][0]), y = log2(scale[k][t]);
          double px = x0 + pw * t / STEPS;
          fprintf(f, "%.1f,%.1f %.1f,%.1f ", px, y0 + ph - ph * (yprev - lo) / (hi - lo) + 2 * k, px, y0 + ph - ph * (y - lo) / (hi - lo) + 2 * k);
        }
      }
      fprintf(f, "\"/>\n<text x=\"%g\" y=\"%g\" fill=\"%s\">%s preset</text>\n", x0 + pw - 120, y0 + ph - 40 + 16 * k, colors[k], names[k]);
    }
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n</svg>\n", x0, y0, pw, ph);
  }
  fclose(f);
  printf("\nplot: %s\n", path);
  {   /* a loss spike, skipped without back-off */
    enum { N = 256 };
    static float w[N], g[N], before[N];
    amp_scaler_config c = amp_scaler_preset(AMP_PRESET_PYTORCH);
    amp_optim_config oc = amp_optimizer_defaults(AMP_ADAMW);
    amp_scaler *s;
    amp_optimizer *o;
    float scale_before = 0.0f, scale_after = 0.0f, norm_spike = 0.0f, norm_sum = 0.0f;
    int spike_skipped = 0, weights_kept = 0;
    oc.spike_zscore = 4.0f;
    for (i = 0; i < N; i++) w[i] = 0.01f * (float)(i % 17);
    if (amp_scaler_create(&s, amp_cpu(), &c) != AMP_OK || amp_optimizer_create(&o, amp_cpu(), &oc) != AMP_OK ||
        amp_optimizer_add(o, AMP_F32, w, g, N) != AMP_OK) { printf("amp.h: %s\n", amp_last_error()); return 1; }
    printf("\nA loss spike: 60 steps of AdamW with spike_zscore = 4, the gradients 10x larger at step %d.\n", SPIKE_STEP);
    for (t = 0; t < 60; t++) {
      float k = amp_scaler_get_scale(s), size = 0.05f * (1.0f + 0.1f * (float)((t * 7) % 5)) * (t == SPIKE_STEP ? 10.0f : 1.0f);
      long skips = amp_optimizer_spike_skips(o);
      for (i = 0; i < N; i++) g[i] = k * size * (float)((i * 13 + t) % 9 - 4) / 4.0f;   /* the scaled loss's gradients */
      if (t == SPIKE_STEP) { memcpy(before, w, sizeof w); scale_before = k; }
      if (amp_scaler_step(s, o) != AMP_OK || amp_scaler_update(s) != AMP_OK) { printf("amp.h: %s\n", amp_last_error()); return 1; }
      if (t == SPIKE_STEP) {
        norm_spike = amp_optimizer_grad_norm(o);
        spike_skipped = amp_optimizer_spike_skips(o) == skips + 1;
        weights_kept = memcmp(before, w, sizeof w) == 0;
        scale_after = amp_scaler_get_scale(s);
      } else if (t >= 20 && t < SPIKE_STEP) norm_sum += amp_optimizer_grad_norm(o);
    }
    printf("  gradient norm at step %d: %.3g (steps 20..%d: %.3g on average)\n", SPIKE_STEP, norm_spike, SPIKE_STEP - 1,
           norm_sum / (SPIKE_STEP - 20));
    claim(spike_skipped && amp_optimizer_spike_skips(o) == 1, "the planted spike is skipped, and only it (amp_optimizer_spike_skips 1)");
    claim(weights_kept, "the skipped step leaves every weight as it was");
    claim(scale_after == scale_before && amp_scaler_skipped_steps(s) == 0,
          "the spike does not back off the scale (an overflow would have halved it)");
    claim(amp_optimizer_step_count(o) == 59, "the other 59 steps update");
    amp_optimizer_destroy(o); amp_scaler_destroy(s);
  }
  if (failures) { printf("\n%d claim(s) did not hold\n", failures); return 1; }
  return 0;
}
