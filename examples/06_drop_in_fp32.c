/* 06_drop_in_fp32.c - a plain fp32 C training loop: the "before" of 06_drop_in_amp.c.

   Linear regression by minibatch SGD on synthetic data: y = x . w_true + noise.
   diff -u examples/06_drop_in_fp32.c examples/06_drop_in_amp.c shows every line that
   changes when the same loop trains in f16 with amp.h.

   Build:  cc -std=c99 -O2 examples/06_drop_in_fp32.c -o 06_drop_in_fp32 -lm */
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
  float w[D] = {0}, g[D] = {0};
  float lr = 0.1f, loss = 0.0f;
  int i, j, e, b;

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
      for (j = 0; j < D; j++) g[j] = 0.0f;
      for (i = b; i < b + BATCH; i++) {
        float pred = 0.0f, err;
        for (j = 0; j < D; j++) pred += X[i][j] * w[j];
        err = pred - Y[i];
        loss += err * err / N;
        for (j = 0; j < D; j++) g[j] += 2.0f * err * X[i][j] / BATCH;
      }
      for (j = 0; j < D; j++) w[j] -= lr * g[j];
    }
    if (e % 10 == 9) printf("epoch %2d  mse %.3g\n", e + 1, loss);
  }
  printf("final mse %.3g\n", loss);
  return loss < 1e-5f ? 0 : 1;
}
