/* bench/bench_gpt.c - the capstone's speed: ms per training step of examples/train_gpt.c's
   default model, fp32 against bf16 and f16 (10 steps each, the validation passes not counted).
   On the CPU the low types save memory; a CPU with AVX512_BF16 (or a GPU) is where bf16 is
   expected to be faster. */
#define TRAIN_GPT_NO_MAIN
#include "examples/train_gpt.c"

int main(void) {
  char name[] = "bench_gpt", flag[] = "--bench";
  char *argv[] = { name, flag, NULL };
  return train_gpt_main(2, argv);
}
