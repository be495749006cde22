/* 03_loss_scaling.c - why the loss is scaled before the backward pass in f16.

   A small network is trained in f32 on synthetic data until it fits well; then one batch's
   gradients (every weight gradient and every activation gradient the backward pass makes)
   are collected, still in f32. The question is what f16 would do to them:

     - below 2^-25 (about 3e-8) a value rounds to 0 in f16: that gradient is lost;
     - between 2^-24 and 2^-14 it is subnormal: kept, with fewer significant bits;
     - at 65520 and above it overflows to inf.

   Multiplying the loss by S multiplies every gradient by S (the chain rule is linear), which
   slides the whole histogram S's exponent to the right, out of the underflow zone. The dynamic
   scaler picks S for you: it starts high (65536) and halves whenever something overflows.
   Here the scaler is fed this batch's overflow test until it settles.

   The same question answered by amp.h itself: with amp_optim_config.stats on, the unscale pass
   counts, per tensor, the gradients that are exactly 0 and the subnormal ones in their stored
   type (amp_optimizer_stats), in the pass it makes anyway. Here the f16 gradients go through it
   at scale 1 and at the scaler's scale; its counts must equal the direct count above.

   Writes loss_scaling.svg (a histogram of the gradients' exponents at scale 1 and at the
   scaler's scale) into the directory given as argv[1], or the current directory.
   Exits 1 if scaling does not reduce the share of gradients lost in f16, or if amp.h's counts
   differ from the direct ones.

   Build:  cc -std=c99 -O2 -I. examples/03_loss_scaling.c -o 03_loss_scaling -lm */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>
#include <stdlib.h>

#define NI 32
#define NH 64
#define NO 10
#define BATCH 128
#define EMIN (-50)           /* histogram range of binary exponents */
#define EMAX 20
#define NBIN (EMAX - EMIN + 1)

static uint64_t rng = 12345;
static float uniform(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng >> 40) + 0.5) / 16777216.0f;
}
static float normal(void) { return sqrtf(-2.0f * logf(uniform())) * cosf(6.2831853f * uniform()); }

/* The network: NI -> NH -> NH -> NO, ReLU, softmax cross-entropy, all in f32. */
static float W1[NI * NH], W2[NH * NH], W3[NH * NO], centers[NO][NI];
static float x[BATCH][NI], h1[BATCH][NH], h2[BATCH][NH], p[BATCH][NO];
static float dW1[NI * NH], dW2[NH * NH], dW3[NH * NO], dz3[BATCH][NO], dh2[BATCH][NH], dh1[BATCH][NH];
static int y[BATCH];

static void make_batch(void) {
  int b, i;
  for (b = 0; b < BATCH; b++) {
    y[b] = (int)(uniform() * NO) % NO;
    for (i = 0; i < NI; i++) x[b][i] = centers[y[b]][i] + 0.5f * normal();
  }
}

static float forward_backward(void) {
  int b, i, j;
  float loss = 0.0f;
  memset(dW1, 0, sizeof dW1); memset(dW2, 0, sizeof dW2); memset(dW3, 0, sizeof dW3);
  for (b = 0; b < BATCH; b++) {
    float mx = -1e30f, s = 0.0f;
    for (j = 0; j < NH; j++) { float z = 0; for (i = 0; i < NI; i++) z += x[b][i] * W1[i * NH + j]; h1[b][j] = z > 0 ? z : 0; }
    for (j = 0; j < NH; j++) { float z = 0; for (i = 0; i < NH; i++) z += h1[b][i] * W2[i * NH + j]; h2[b][j] = z > 0 ? z : 0; }
    for (j = 0; j < NO; j++) { float z = 0; for (i = 0; i < NH; i++) z += h2[b][i] * W3[i * NO + j]; p[b][j] = z; if (z > mx) mx = z; }
    for (j = 0; j < NO; j++) { p[b][j] = expf(p[b][j] - mx); s += p[b][j]; }
    for (j = 0; j < NO; j++) p[b][j] /= s;
    loss -= logf(p[b][y[b]] + 1e-30f) / BATCH;
    /* backward of the mean loss */
    for (j = 0; j < NO; j++) dz3[b][j] = (p[b][j] - (j == y[b])) / BATCH;
    for (i = 0; i < NH; i++) {
      float g = 0;
      for (j = 0; j < NO; j++) { dW3[i * NO + j] += h2[b][i] * dz3[b][j]; g += dz3[b][j] * W3[i * NO + j]; }
      dh2[b][i] = h2[b][i] > 0 ? g : 0;
    }
    for (i = 0; i < NH; i++) {
      float g = 0;
      for (j = 0; j < NH; j++) { dW2[i * NH + j] += h1[b][i] * dh2[b][j]; g += dh2[b][j] * W2[i * NH + j]; }
      dh1[b][i] = h1[b][i] > 0 ? g : 0;
    }
    for (i = 0; i < NI; i++)
      for (j = 0; j < NH; j++) dW1[i * NH + j] += x[b][i] * dh1[b][j];
  }
  return loss;
}

/* Every gradient of the last backward pass, in one list. */
static size_t gather(float *g) {
  size_t n = 0, i;
  for (i = 0; i < NI * NH; i++) g[n++] = dW1[i];
  for (i = 0; i < NH * NH; i++) g[n++] = dW2[i];
  for (i = 0; i < NH * NO; i++) g[n++] = dW3[i];
  for (i = 0; i < BATCH * NO; i++) g[n++] = dz3[i / NO][i % NO];
  for (i = 0; i < BATCH * NH; i++) g[n++] = dh2[i / NH][i % NH];
  for (i = 0; i < BATCH * NH; i++) g[n++] = dh1[i / NH][i % NH];
  return n;
}

typedef struct { size_t nonzero, lost, subnormal, overflow; int hist[NBIN]; } census;

/* What f16 does to the gradients g * scale. */
static census count(const float *g, size_t n, float scale) {
  census c;
  size_t i;
  memset(&c, 0, sizeof c);
  for (i = 0; i < n; i++) {
    float v = g[i] * scale, h;
    int e;
    if (v == 0.0f) continue;
    c.nonzero++;
    h = amp_f16_to_f32(amp_f32_to_f16(v));
    if (h == 0.0f) c.lost++;
    else if (isinf(h)) c.overflow++;
    else if (fabsf(h) < ldexpf(1.0f, -14)) c.subnormal++;
    frexpf(v, &e);
    e -= 1;   /* v = m * 2^e with 1 <= |m| < 2 */
    c.hist[e < EMIN ? 0 : e > EMAX ? NBIN - 1 : e - EMIN]++;
  }
  return c;
}

/* What amp.h's unscale pass says about the gradients stored in f16 at `scale`: one optimizer with
   stats on, one tensor holding them, a scaler fixed at that scale; the unscale fills
   amp_optimizer_stats (no step is taken). *zeros and *subnormal get its counts. */
static int stats_at(const float *g, size_t n, float scale, size_t *zeros, size_t *subnormal) {
  amp_f16 *w = (amp_f16 *)calloc(n, sizeof *w), *gh = (amp_f16 *)malloc(n * sizeof *gh);
  amp_optim_config oc;
  amp_scaler_config scc;
  amp_optimizer *o = NULL;
  amp_scaler *s = NULL;
  amp_tensor_stats st;
  size_t i;
  int ok;
  memset(&oc, 0, sizeof oc); oc.stats = 1;
  memset(&scc, 0, sizeof scc); scc.fixed = 1; scc.init_scale = scale;
  if (!w || !gh) { free(w); free(gh); return 0; }
  for (i = 0; i < n; i++) gh[i] = amp_f32_to_f16(g[i] * scale);   /* the backward pass of the scaled loss, in f16 */
  ok = amp_optimizer_create(&o, amp_cpu(), &oc) == AMP_OK && amp_scaler_create(&s, amp_cpu(), &scc) == AMP_OK &&
       amp_optimizer_add(o, AMP_F16, w, gh, n) == AMP_OK && amp_scaler_unscale(s, o) == AMP_OK &&
       amp_optimizer_stats(o, 0, &st) == AMP_OK;
  if (!ok) printf("amp.h: %s\n", amp_last_error());
  else { *zeros = st.n_zero; *subnormal = st.n_subnormal; }
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
  free(w); free(gh);
  return ok;
}

static void svg_panel(FILE *f, double top, const census *c, const char *title, const char *color) {
  const double x0 = 60, pw = 700, ph = 150, bw = pw / NBIN;
  int i, mx = 1;
  for (i = 0; i < NBIN; i++) if (c->hist[i] > mx) mx = c->hist[i];
  /* f16's zones: lost (< 2^-24), subnormal (2^-24 .. 2^-14), overflow (>= 2^16) */
  fprintf(f, "<rect x=\"%.1f\" y=\"%g\" width=\"%.1f\" height=\"%g\" fill=\"#fbdada\"/>\n", x0, top, bw * (-25 - EMIN), ph);
  fprintf(f, "<rect x=\"%.1f\" y=\"%g\" width=\"%.1f\" height=\"%g\" fill=\"#fdf0c8\"/>\n", x0 + bw * (-24 - EMIN), top, bw * 10, ph);
  fprintf(f, "<rect x=\"%.1f\" y=\"%g\" width=\"%.1f\" height=\"%g\" fill=\"#fbdada\"/>\n", x0 + bw * (16 - EMIN), top, bw * (EMAX - 15), ph);
  fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"13\">%s</text>\n", x0, top - 6, title);
  for (i = 0; i < NBIN; i++) {
    double h = ph * c->hist[i] / mx;
    if (c->hist[i]) fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x0 + bw * i + 1, top + ph - h, bw - 2, h, color);
  }
  for (i = EMIN; i <= EMAX; i += 5)
    fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n", x0 + bw * (i - EMIN + 0.5), top + ph + 14, i);
  fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n", x0, top, pw, ph);
}

int main(int argc, char **argv) {
  static float g[NI * NH + NH * NH + NH * NO + BATCH * (NO + 2 * NH)];
  const char *dir = argc > 1 ? argv[1] : ".";
  char path[1024];
  amp_scaler *sc;
  size_t n;
  int step, i, backoffs = 0;
  float loss = 0, scale;
  census c1, cs;
  FILE *f;

  for (i = 0; i < NO * NI; i++) centers[i / NI][i % NI] = 2.0f * normal();
  for (i = 0; i < NI * NH; i++) W1[i] = normal() * sqrtf(2.0f / NI);
  for (i = 0; i < NH * NH; i++) W2[i] = normal() * sqrtf(2.0f / NH);
  for (i = 0; i < NH * NO; i++) W3[i] = normal() * sqrtf(2.0f / NH);
  /* Train in f32 with plain SGD until the network fits: a well-fitted network has small gradients. */
  for (step = 0; step < 300; step++) {
    make_batch();
    loss = forward_backward();
    for (i = 0; i < NI * NH; i++) W1[i] -= 0.05f * dW1[i];
    for (i = 0; i < NH * NH; i++) W2[i] -= 0.05f * dW2[i];
    for (i = 0; i < NH * NO; i++) W3[i] -= 0.05f * dW3[i];
  }
  make_batch();
  loss = forward_backward();
  n = gather(g);
  printf("A %d-%d-%d-%d MLP trained 300 steps in f32 on synthetic data: loss %.4g\n", NI, NH, NH, NO, loss);
  printf("One batch's backward pass made %zu gradient values (weights and activations).\n\n", n);

  /* The dynamic scaler settles: start at 65536, halve while this batch's gradients overflow. */
  if (amp_scaler_create(&sc, amp_cpu(), NULL) != AMP_OK) { printf("amp.h: %s\n", amp_last_error()); return 1; }
  for (;;) {
    census c = count(g, n, amp_scaler_get_scale(sc));
    if (!c.overflow) break;
    if (amp_scaler_update_found_inf(sc, 1) != AMP_OK) { printf("amp.h: %s\n", amp_last_error()); return 1; }
    backoffs++;
  }
  scale = amp_scaler_get_scale(sc);
  amp_scaler_destroy(sc);

  c1 = count(g, n, 1.0f);
  cs = count(g, n, scale);
  printf("The scaler started at 65536 and backed off %d time(s): scale %g\n\n", backoffs, scale);
  printf("  %-24s %14s %14s\n", "stored in f16", "scale 1", "scale S");
  printf("  %-24s %13.2f%% %13.2f%%\n", "lost (rounded to 0)", 100.0 * c1.lost / c1.nonzero, 100.0 * cs.lost / cs.nonzero);
  printf("  %-24s %13.2f%% %13.2f%%\n", "subnormal (few bits)", 100.0 * c1.subnormal / c1.nonzero, 100.0 * cs.subnormal / cs.nonzero);
  printf("  %-24s %13.2f%% %13.2f%%\n\n", "overflow (inf)", 100.0 * c1.overflow / c1.nonzero, 100.0 * cs.overflow / cs.nonzero);

  snprintf(path, sizeof path, "%s/loss_scaling.svg", dir);
  f = fopen(path, "w");
  if (!f) { printf("cannot write %s\n", path); return 1; }
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"460\" font-family=\"sans-serif\" font-size=\"11\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
             "<text x=\"60\" y=\"20\" font-size=\"14\">Gradient exponents (log2 |g|) against f16's range: red = lost or inf, yellow = subnormal</text>\n");
  {
    char t1[160], t2[160];
    snprintf(t1, sizeof t1, "scale 1: %.1f%% of the gradients round to 0 in f16", 100.0 * c1.lost / c1.nonzero);
    snprintf(t2, sizeof t2, "scale %g (the dynamic scaler's): %.1f%% round to 0, none overflow", scale, 100.0 * cs.lost / cs.nonzero);
    svg_panel(f, 50, &c1, t1, "#888888");
    svg_panel(f, 270, &cs, t2, "#1f77b4");
  }
  fprintf(f, "<text x=\"410\" y=\"452\" text-anchor=\"middle\">binary exponent of the gradient</text>\n</svg>\n");
  fclose(f);
  printf("histogram: %s\n\n", path);

  {
    int ok = c1.lost > 0 && cs.lost < c1.lost && cs.overflow == 0, agree;
    size_t z1 = 0, s1 = 0, zs = 0, ss = 0, exact_zeros = n - c1.nonzero;
    printf("  %s at scale 1, f16 loses %.2f%% of this network's gradients; at scale %g it loses %.2f%%\n",
           ok ? "[ok]" : "[WRONG]", 100.0 * c1.lost / c1.nonzero, scale, 100.0 * cs.lost / cs.nonzero);
    /* amp.h's unscale pass counts the same thing (zeros include the gradients that were 0 in f32:
       ReLU's dead units) */
    if (!stats_at(g, n, 1.0f, &z1, &s1) || !stats_at(g, n, scale, &zs, &ss)) return 1;
    printf("\namp_optimizer_stats of the %zu f16 gradients (amp_optim_config.stats = 1; shares of all of them,\n"
           "the table above counts shares of the nonzero ones):\n", n);
    printf("  %-24s %14s %14s\n", "share of the gradients", "scale 1", "scale S");
    printf("  %-24s %13.2f%% %13.2f%%\n", "zero in f16", 100.0 * z1 / n, 100.0 * zs / n);
    printf("  %-24s %13.2f%% %13.2f%%\n", "subnormal in f16", 100.0 * s1 / n, 100.0 * ss / n);
    printf("  %-24s %13.2f%% %13.2f%%\n\n", "zero or subnormal", 100.0 * (z1 + s1) / n, 100.0 * (zs + ss) / n);
    agree = z1 == exact_zeros + c1.lost && zs == exact_zeros + cs.lost && s1 == c1.subnormal && ss == cs.subnormal;
    printf("  %s amp_optimizer_stats counts what the direct count counts: zeros %zu / %zu (%zu exact zeros + the lost), "
           "subnormals %zu / %zu\n", agree ? "[ok]" : "[WRONG]", z1, zs, exact_zeros, s1, ss);
    printf("  %s the share of zero or subnormal f16 gradients falls from %.2f%% at scale 1 to %.2f%% at scale %g\n",
           z1 + s1 > zs + ss ? "[ok]" : "[WRONG]", 100.0 * (z1 + s1) / n, 100.0 * (zs + ss) / n, scale);
    return ok && agree && z1 + s1 > zs + ss ? 0 : 1;
  }
}
