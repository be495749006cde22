/* 02_master_weights.c - why mixed precision keeps an fp32 master copy of the weights.

   A weight of 1.0 in f16 has neighbours 1 - 2^-11 and 1 + 2^-10. An update smaller than half
   that gap (about 2.4e-4 below 1.0) is rounded away: the weight does not move, however many
   times you apply it. Typical updates (learning rate x gradient) are exactly that small.
   The cure: keep the weights in fp32 (the master copy), apply the update there, and round the
   result to f16 only to compute with it. That is what amp_optimizer does.

   Build:  cc -std=c99 -O2 -I. examples/02_master_weights.c -o 02_master_weights -lm
   Exits 1 if the update is not lost in f16 or not kept by the master copy. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>

static int failures = 0;
static void claim(int holds, const char *what) {
  printf("  %s %s\n", holds ? "[ok]" : "[WRONG]", what);
  if (!holds) failures++;
}

int main(void) {
  const float update = 1e-4f;   /* lr 0.01 x gradient 0.01 */
  const int steps = 1000;
  amp_f16 w16 = amp_f32_to_f16(1.0f);
  amp_bf16 w_bf = amp_f32_to_bf16(1.0f);
  float w32 = 1.0f, master = 1.0f;
  amp_f16 w_model = amp_f32_to_f16(1.0f);
  int i;

  printf("One update: w = 1.0, w - %g\n", update);
  printf("  in f32:  %.8f\n", 1.0f - update);
  printf("  in f16:  %.8f   (the f16 neighbours of 1.0 are %.8f and %.8f)\n",
         amp_f16_to_f32(amp_f32_to_f16(1.0f - update)), amp_f16_to_f32(0x3bff), amp_f16_to_f32(0x3c01));
  printf("  in bf16: %.8f\n\n", amp_bf16_to_f32(amp_f32_to_bf16(1.0f - update)));
  claim(amp_f16_to_f32(amp_f32_to_f16(1.0f - update)) == 1.0f, "1.0 - 1e-4 rounds back to 1.0 in f16: the update vanished");
  claim(1.0f - update != 1.0f, "in f32 the same update survives");

  for (i = 0; i < steps; i++) {
    w16 = amp_f32_to_f16(amp_f16_to_f32(w16) - update);          /* weights kept in f16 */
    w_bf = amp_f32_to_bf16(amp_bf16_to_f32(w_bf) - update);       /* weights kept in bf16 */
    w32 -= update;                                                /* plain fp32 training */
    master -= update;                                             /* mixed: fp32 master ... */
    w_model = amp_f32_to_f16(master);                             /* ... rounded to f16 to compute with */
  }
  printf("\n%d updates of -%g (the total should be -%g):\n", steps, update, steps * update);
  printf("  weights in f16:                  %.6f\n", amp_f16_to_f32(w16));
  printf("  weights in bf16:                 %.6f\n", amp_bf16_to_f32(w_bf));
  printf("  weights in f32:                  %.6f\n", w32);
  printf("  fp32 master, f16 model copy:     master %.6f, copy %.6f\n\n", master, amp_f16_to_f32(w_model));
  claim(amp_f16_to_f32(w16) == 1.0f, "pure f16 weights never moved: all 1000 updates were lost");
  claim(amp_bf16_to_f32(w_bf) == 1.0f, "pure bf16 weights never moved either (its gap is 8x wider)");
  claim(fabsf(master - 0.9f) < 1e-3f, "the fp32 master moved by the full -0.1");
  claim(fabsf(amp_f16_to_f32(w_model) - 0.9f) < 1e-3f, "and the f16 copy computed from it follows, within f16 rounding");

  /* The same with the library: amp_optimizer keeps the fp32 master of an f16 model copy. */
  {
    amp_f16 w = amp_f32_to_f16(1.0f), g = amp_f32_to_f16(0.01f);
    amp_optim_config oc = {0};
    amp_optimizer *opt = NULL;
    size_t n = 0;
    const float *m;
    oc.kind = AMP_SGD; oc.lr = 0.01f;
    if (amp_optimizer_create(&opt, amp_cpu(), &oc) != AMP_OK || amp_optimizer_add(opt, AMP_F16, &w, &g, 1) != AMP_OK) {
      printf("amp.h: %s\n", amp_last_error());
      return 1;
    }
    for (i = 0; i < steps; i++) {
      /* no loss scaling here (the gradient is exact already): the optimizer steps without a scaler */
      if (amp_optimizer_step(opt) != AMP_OK) { printf("amp.h: %s\n", amp_last_error()); return 1; }
    }
    m = amp_optimizer_master(opt, 0, &n);
    printf("\nWith amp.h: amp_optimizer (SGD, lr 0.01) on an f16 weight with f16 gradient 0.01, %d steps:\n", steps);
    printf("  master %.6f, f16 model copy %.6f\n\n", m ? m[0] : -1.0f, amp_f16_to_f32(w));
    claim(m != NULL && n == 1 && fabsf(m[0] - 0.9f) < 1e-3f && amp_f16_to_f32(w) == amp_f16_to_f32(amp_f32_to_f16(m[0])),
          "amp_optimizer's master took every update and the f16 copy is the master rounded");
    amp_optimizer_destroy(opt);
  }
  if (failures) { printf("\n%d claim(s) did not hold\n", failures); return 1; }
  return 0;
}
