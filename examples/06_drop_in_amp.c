/* 06_drop_in_amp.c - the loop of 06_drop_in_fp32.c after adding amp.h: weights and gradients
   in f16, the loss scaled by a dynamic scaler, the update on an fp32 master copy.
   Every changed line is marked AMP; diff -u against 06_drop_in_fp32.c shows exactly those.

   Build:  cc -std=c99 -O2 -I. examples/06_drop_in_amp.c -o 06_drop_in_amp -lm */
#define AMP_IMPLEMENTATION                                          /* AMP */
#include "amp.h"                                                    /* AMP */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

#define D 32          /* features */
#define N 4096        /* samples */
#define BATCH 64
#define EPOCHS 30

static float X[N][D], Y[N], w_true[D];

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

int main(void) {
  amp_f16 w[D] = {0}, g[D] = {0};                                     /* AMP: the model copy and its grads in f16 */
  float lr = 0.1f, loss = 0.0f;
  int i, j, e, b;
  amp_optim_config oc = {0}; amp_optimizer *opt; amp_scaler *sc;  /* AMP */
  oc.lr = lr;                                                      /* AMP: SGD, as before */
  if (amp_optimizer_create(&opt, amp_cpu(), &oc) || amp_optimizer_add(opt, AMP_F16, w, g, D) ||
      amp_scaler_create(&sc, amp_cpu(), NULL)) return fprintf(stderr, "%s\n", amp_last_error()), 1; /* AMP */

  srand(42);
  for (j = 0; j < D; j++) w_true[j] = frand();
  for (i = 0; i < N; i++) {
    Y[i] = 0.0f;
    for (j = 0; j < D; j++) { X[i][j] = frand(); Y[i] += X[i][j] * w_true[j]; }
    Y[i] += 0.001f * frand();
  }

  for (e = 0; e < EPOCHS; e++) {
    loss = 0.0f;
    for (b = 0; b < N; b += BATCH) {
      float gs[D], scale = amp_scaler_get_scale(sc);               /* AMP: backward of loss * scale */
      for (j = 0; j < D; j++) gs[j] = 0.0f;                        /* AMP */
      for (i = b; i < b + BATCH; i++) {
        float pred = 0.0f, err;
        for (j = 0; j < D; j++) pred += X[i][j] * amp_f16_to_f32(w[j]);  /* AMP */
        err = pred - Y[i];
        loss += err * err / N;
        for (j = 0; j < D; j++) gs[j] += 2.0f * err * X[i][j] / BATCH * scale; /* AMP */
      }
      for (j = 0; j < D; j++) g[j] = amp_f32_to_f16(gs[j]);        /* AMP: scaled grads to f16 */
      amp_scaler_step(sc, opt); amp_scaler_update(sc);             /* AMP: unscale, skip on inf, update master */
    }
    if (e % 10 == 9) printf("epoch %2d  mse %.3g\n", e + 1, loss);
  }
  printf("final mse %.3g\n", loss);
  amp_optimizer_destroy(opt); amp_scaler_destroy(sc);              /* AMP */
  return loss < 1e-5f ? 0 : 1;
}
