/* 07_fp8.c - fp8: two 8-bit formats, a scale per tensor, and a scale per block.

   An fp8 number is one byte. Hopper's and Blackwell's Tensor Cores multiply fp8 at twice the
   bf16 rate, so large trainings now run their matrix products in fp8. The byte has room for
   little: E4M3 keeps 3 mantissa bits (about 2 digits) over 18 binades, E5M2 2 bits over 32. So
   every fp8 tensor comes with a scale: q = fp8(x * scale), x ~ q / scale, the scale chosen so
   that the tensor's largest magnitude (its amax) lands near the format's largest value.

   This program shows, and checks:
     1. the two number lines next to f16 and bf16 (range, gaps, what saturation does);
     2. why TransformerEngine casts forward tensors to E4M3 and gradients to E5M2: activations
        want the mantissa bit, gradients spread over more binades than E4M3 holds;
     3. delayed scaling (the scale from the amaxes of earlier steps: no extra pass) against
        current scaling (the scale from this tensor: one more read) over 120 steps with a spike:
        delayed clips the spike, then casts with a scale 50x too small for its whole history;
     4. block scaling: one outlier sets a per-tensor scale that flushes every small value to 0;
        a scale per 1x128 block (DeepSeek-V3) or per 32 values (MX) keeps them.
   Writes fp8_scaling.svg (the scales of part 3) into argv[1] or the current directory.
   Exits 1 if a claim stated below does not hold.

   Build:  cc -std=c99 -O2 -I. examples/07_fp8.c -o 07_fp8 -lm */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
static void claim(int holds, const char *what) {
  printf("  %s %s\n", holds ? "[ok]" : "[WRONG]", what);
  if (!holds) failures++;
}

static unsigned int seed = 12345u;
static float uniform(void) { seed = seed * 1664525u + 1013904223u; return (float)(seed >> 8) / 16777216.0f; }
static float gauss(void) {   /* Box-Muller */
  float u = uniform() + 1e-7f, v = uniform();
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}
static float decode(amp_dtype f, amp_fp8 c) { return f == AMP_E4M3 ? amp_e4m3_to_f32(c) : amp_e5m2_to_f32(c); }
static amp_fp8 encode(amp_dtype f, float x, int sat) { return f == AMP_E4M3 ? amp_f32_to_e4m3(x, sat) : amp_f32_to_e5m2(x, sat); }

/* ---- 1. the number lines ---------------------------------------------------------------------- */
static void number_lines(void) {
  amp_dtype f;
  printf("1. The number lines (largest, smallest normal, smallest subnormal, gap after 1, binades)\n");
  printf("   f16   %-9g %-10g %-10g %-9g %.0f\n", 65504.0, ldexp(1, -14), ldexp(1, -24), ldexp(1, -10), log2(65504 / ldexp(1, -24)));
  printf("   bf16  %-9.3g %-10g %-10g %-9g %.0f\n", 3.39e38, ldexp(1, -126), ldexp(1, -133), ldexp(1, -7), log2(3.39e38 / ldexp(1, -133)));
  for (f = AMP_E4M3; f <= AMP_E5M2; f = (amp_dtype)(f + 1)) {
    float largest = 0, min_normal = 1e9f, min_sub = 1e9f, gap;
    int c, exact = 1, m = f == AMP_E4M3 ? 3 : 2;
    for (c = 0; c < 256; c++) {
      float x = decode(f, (amp_fp8)c);
      unsigned int bits;
      memcpy(&bits, &x, 4);
      if ((bits & 0x7f800000u) == 0x7f800000u) continue;   /* inf and NaN, on the bits (-Ofast folds x != x) */
      if (x > largest) largest = x;
      if (x > 0 && x < min_sub) min_sub = x;
      if (x > 0 && (c & ((1 << m) - 1)) == 0 && (c >> m) != 0 && x < min_normal) min_normal = x;
      exact &= encode(f, x, 1) == (amp_fp8)c || (x == 0 && c == 0x80);   /* every code comes back */
    }
    gap = decode(f, (amp_fp8)(encode(f, 1.0f, 1) + 1)) - 1.0f;
    printf("   %s  %-9g %-10g %-10g %-9g %.0f\n", f == AMP_E4M3 ? "e4m3" : "e5m2", largest, min_normal, min_sub, gap,
           log2(largest / min_sub));
    claim(largest == (f == AMP_E4M3 ? 448.0f : 57344.0f) && exact, f == AMP_E4M3 ? "E4M3: largest 448, every code round-trips"
                                                                                  : "E5M2: largest 57344, every code round-trips");
  }
  claim(amp_f32_to_e4m3(464.0f, 0) == 0x7e && amp_f32_to_e4m3(465.0f, 0) == 0x7f && amp_f32_to_e4m3(1e6f, 1) == 0x7e,
        "E4M3 has no inf: 464 still rounds to 448, 465 is NaN unless the cast saturates (then 448)");
  claim(amp_f32_to_e5m2(70000.0f, 0) == 0x7c && amp_f32_to_e5m2(70000.0f, 1) == 0x7b,
        "E5M2 overflows to inf like f16, or saturates to 57344");
  claim(amp_e4m3_to_f32(amp_f32_to_e4m3(1.1f, 1)) == 1.125f && amp_e5m2_to_f32(amp_f32_to_e5m2(1.1f, 1)) == 1.0f,
        "1.1 is 1.125 in E4M3 (gap 1/8) and 1.0 in E5M2 (gap 1/4)");
}

/* ---- 2. E4M3 forward, E5M2 for gradients ---------------------------------------------------- */
/* x cast with current scaling into format f: the relative RMS error of the nonzero values, and
   the share of nonzero values that became 0 */
static void cast_error(amp_dtype f, const float *x, int n, double *rel_rms, double *flushed) {
  amp_fp8_config cur;
  float amax = 0, scale;
  static amp_fp8 q[8192];
  double se = 0, sx = 0;
  int i, zeros = 0, nz = 0;
  memset(&cur, 0, sizeof cur); cur.recipe = AMP_FP8_CURRENT;
  amp_quantize(amp_cpu(), NULL, f, x, AMP_F32, (size_t)n, NULL, &amax);   /* measure */
  scale = amp_fp8_scale_from_amax(&cur, f, amax, 1.0f);
  amp_quantize(amp_cpu(), q, f, x, AMP_F32, (size_t)n, &scale, NULL);     /* cast */
  for (i = 0; i < n; i++) {
    double back = (double)decode(f, q[i]) / scale, d = back - x[i];
    if (x[i] == 0) continue;
    nz++; se += d * d; sx += (double)x[i] * x[i];
    zeros += q[i] == 0 || q[i] == 0x80;
  }
  *rel_rms = sqrt(se / sx); *flushed = (double)zeros / nz;
}
static void forward_and_backward_formats(void) {
  enum { N = 8192 };
  static float act[N], grad[N];
  double e4, e5, f4, f5, g4, g5, h4, h5;
  int i;
  printf("\n2. Why E4M3 for forward tensors and E5M2 for gradients\n");
  for (i = 0; i < N; i++) {
    act[i] = gauss();                                                     /* activations: a few binades */
    grad[i] = (uniform() < 0.5f ? -1.0f : 1.0f) * exp2f(-32.0f * uniform());   /* gradients: 32 binades */
  }
  cast_error(AMP_E4M3, act, N, &e4, &f4); cast_error(AMP_E5M2, act, N, &e5, &f5);
  cast_error(AMP_E4M3, grad, N, &g4, &h4); cast_error(AMP_E5M2, grad, N, &g5, &h5);
  printf("   activations (normal)     E4M3: rel. RMS error %.4f, %4.1f%% flushed   E5M2: %.4f, %4.1f%%\n", e4, 100 * f4, e5, 100 * f5);
  printf("   gradients (32 binades)   E4M3: rel. RMS error %.4f, %4.1f%% flushed   E5M2: %.4f, %4.1f%%\n", g4, 100 * h4, g5, 100 * h5);
  claim(e4 < 0.6 * e5, "activations: E4M3's extra mantissa bit halves the error");
  claim(h4 > 0.25 && h5 < 0.05, "gradients: E4M3 flushes over a quarter of them to 0, E5M2 keeps nearly all");
}

/* ---- 3. delayed against current scaling ----------------------------------------------------- */
#define STEPS 120
#define SPIKE 60
#define HIST 16
static float scale_d[STEPS], scale_c[STEPS];
static void delayed_and_current(const char *dir) {
  enum { N = 4096 };
  static float x[N];
  static amp_fp8 q[N];
  amp_fp8_config del, cur;
  amp_fp8_scaler *f = NULL;
  int t, i, sat_d[STEPS], sat_c[STEPS], only_spike = 1, never = 1;
  double err_d = 0, err_c = 0;
  char path[512];
  FILE *svg;
  printf("\n3. Delayed scaling (history %d, 'max') against current scaling, a 50x spike at step %d\n", HIST, SPIKE);
  memset(&del, 0, sizeof del); del.history_len = HIST;
  memset(&cur, 0, sizeof cur); cur.recipe = AMP_FP8_CURRENT;
  if (amp_fp8_scaler_create(&f, amp_cpu(), &del, 1, NULL) != AMP_OK) { printf("%s\n", amp_last_error()); failures++; return; }
  for (t = 0; t < STEPS; t++) {
    float amp_t = (1.0f + 0.3f * sinf((float)t / 9.0f)) * (t == SPIKE ? 50.0f : 1.0f), amax = 0;
    for (i = 0; i < N; i++) x[i] = amp_t * (uniform() < 0.5f ? -1.0f : 1.0f) * exp2f(-12.0f * uniform());   /* 12 binades */
    for (int k = 0; k < 2; k++) {   /* k 0: delayed, with the scaler's scale; 1: current */
      float s;
      int sat = 0;
      double rel = 0;   /* the mean relative error of the values: each value counts, small ones too */
      if (k == 0) s = amp_fp8_scaler_get_scale(f, 0);
      else {
        amax = 0;
        amp_quantize(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, N, NULL, &amax);
        s = amp_fp8_scale_from_amax(&cur, AMP_E4M3, amax, 1.0f);
      }
      /* the delayed cast writes this step's amax into the scaler as it goes */
      amp_quantize(amp_cpu(), q, AMP_E4M3, x, AMP_F32, N, &s, k == 0 ? amp_fp8_scaler_amax_ptr(f, 0) : NULL);
      for (i = 0; i < N; i++) {
        double back = amp_e4m3_to_f32(q[i]) / s;
        sat += fabsf(x[i] * s) > 464.0f;   /* past E4M3's rounding range: the saturating cast clipped it */
        rel += fabs(back - x[i]) / fabs(x[i]) / N;
      }
      if (k == 0) { scale_d[t] = s; sat_d[t] = sat; if (t > SPIKE && t <= SPIKE + HIST) err_d += rel / HIST; }
      else { scale_c[t] = s; sat_c[t] = sat; if (t > SPIKE && t <= SPIKE + HIST) err_c += rel / HIST; }
    }
    amp_fp8_scaler_update(f);
    if (t != SPIKE && sat_d[t] > N / 100) only_spike = 0;
    if (sat_c[t]) never = 0;
  }
  printf("   step %d: delayed clipped %d of %d values to 448, current %d\n", SPIKE, sat_d[SPIKE], N, sat_c[SPIKE]);
  printf("   scale at steps 59 / 61 / %d / %d: delayed %.1f / %.2f / %.2f / %.1f, current %.1f / %.1f / %.1f / %.1f\n",
         SPIKE + HIST, SPIKE + HIST + 1, scale_d[59], scale_d[61], scale_d[SPIKE + HIST], scale_d[SPIKE + HIST + 1], scale_c[59],
         scale_c[61], scale_c[SPIKE + HIST], scale_c[SPIKE + HIST + 1]);
  printf("   after the spike (steps %d..%d) the mean relative error of a value: delayed %.4f, current %.4f\n", SPIKE + 1,
         SPIKE + HIST, err_d, err_c);
  claim(sat_d[SPIKE] > N / 4 && only_spike,
        "delayed: the spike is cast with the old scale and much of it clips (other steps clip at most a few values, "
        "when the amax rises past its history)");
  claim(never, "current: no step clips (the scale is this tensor's own)");
  claim(scale_d[SPIKE + HIST] < scale_d[59] / 20 && scale_d[SPIKE + HIST + 1] > scale_d[59] / 3,
        "delayed: the scale stays ~50x low while the spike is in the history, and recovers once it leaves");
  claim(err_d > 1.5 * err_c, "delayed: while it is low the small scale costs precision (the small values fall into "
                            "E4M3's subnormals, which keep fewer bits)");
  amp_fp8_scaler_destroy(f);

  snprintf(path, sizeof path, "%s/fp8_scaling.svg", dir);
  svg = fopen(path, "w");
  if (!svg) { printf("cannot write %s\n", path); failures++; return; }
  {
    const double x0 = 60, y0 = 40, pw = 700, ph = 300, lo = -4, hi = 10;   /* log2 of the scale */
    const char *names[2] = { "delayed (history 16)", "current" }, *colors[2] = { "#c0392b", "#2471a3" };
    fprintf(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"400\" font-family=\"sans-serif\" font-size=\"11\">\n"
                 "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                 "<text x=\"%g\" y=\"22\" font-size=\"14\">E4M3 scale per step, a 50x spike at step %d (grey)</text>\n"
                 "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ccc\" stroke-width=\"3\"/>\n",
            x0, SPIKE, x0 + pw * SPIKE / STEPS, y0, x0 + pw * SPIKE / STEPS, y0 + ph);
    for (int k = (int)lo; k <= (int)hi; k += 2)
      fprintf(svg, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">2^%d</text>\n", x0 - 6, y0 + ph - ph * (k - lo) / (hi - lo) + 4, k);
    for (int k = 0; k < 2; k++) {
      const float *s = k ? scale_c : scale_d;
      fprintf(svg, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colors[k]);
      for (t = 0; t < STEPS; t++)
        fprintf(svg, "%.1f,%.1f ", x0 + pw * t / STEPS, y0 + ph - ph * (log2(s[t]) - lo) / (hi - lo));
      fprintf(svg, "\"/>\n<text x=\"%g\" y=\"%g\" fill=\"%s\">%s</text>\n", x0 + pw - 150, y0 + ph - 40 + 16 * k, colors[k], names[k]);
    }
    fprintf(svg, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n</svg>\n", x0, y0, pw, ph);
  }
  fclose(svg);
  printf("   plot: %s\n", path);
}

/* ---- 4. block scaling against one outlier --------------------------------------------------- */
static void blocks(void) {
  enum { R = 8, C = 512 };
  static float x[R * C], sblk[R * (C / 128)];
  static amp_fp8 q[R * C], qb[R * C], qmx[R * C];
  static unsigned char smx[R * (C / 32)];
  amp_fp8_config cur;
  float amax = 0, s;
  int i, flushed_t = 0, flushed_b = 0, flushed_mx = 0, small = 0;
  printf("\n4. One outlier: a scale per tensor, per 1x128 block (DeepSeek-V3) and per 32 values (MX)\n");
  for (i = 0; i < R * C; i++) x[i] = 1e-3f * (2.0f * uniform() - 1.0f);
  x[5] = 1000.0f;   /* one value a million times the others */
  memset(&cur, 0, sizeof cur); cur.recipe = AMP_FP8_CURRENT;
  amp_quantize(amp_cpu(), NULL, AMP_E4M3, x, AMP_F32, R * C, NULL, &amax);
  s = amp_fp8_scale_from_amax(&cur, AMP_E4M3, amax, 1.0f);
  amp_quantize(amp_cpu(), q, AMP_E4M3, x, AMP_F32, R * C, &s, NULL);
  if (amp_quantize_blocks(amp_cpu(), AMP_BLOCK_1x128, AMP_E4M3, R, C, x, AMP_F32, C, qb, C, sblk) != AMP_OK ||
      amp_quantize_blocks(amp_cpu(), AMP_BLOCK_MX_RCEIL, AMP_E4M3, R, C, x, AMP_F32, C, qmx, C, smx) != AMP_OK) {
    printf("   %s\n", amp_last_error()); failures++; return;
  }
  for (i = 0; i < R * C; i++) {   /* the small values that became 0 under each */
    if (i == 5 || x[i] == 0) continue;
    small++;
    flushed_t += (q[i] & 0x7f) == 0;
    flushed_b += (qb[i] & 0x7f) == 0;
    flushed_mx += (qmx[i] & 0x7f) == 0;
  }
  printf("   per-tensor scale %.3g: %5.1f%% of the small values flushed to 0\n", s, 100.0 * flushed_t / small);
  printf("   1x128 blocks:          %5.1f%% flushed (only the outlier's block: %d of %d values)\n", 100.0 * flushed_b / small,
         flushed_b, small);
  printf("   MX blocks of 32:       %5.1f%% flushed; the outlier's E8M0 scale 2^%d, a quiet block's 2^%d\n",
         100.0 * flushed_mx / small, (int)smx[0] - 127, (int)smx[1] - 127);
  claim(flushed_t > small * 9 / 10, "one outlier sets a per-tensor scale that flushes over 90% of the tensor to 0");
  claim(flushed_b <= 128 && flushed_mx <= 32, "block scales lose at most the outlier's own block");
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  number_lines();
  forward_and_backward_formats();
  delayed_and_current(dir);
  blocks();
  printf("\n%s\n", failures ? "SOME CLAIMS DID NOT HOLD" : "every claim holds");
  return failures ? 1 : 0;
}
