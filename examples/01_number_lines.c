/* 01_number_lines.c - the f16 and bf16 number lines: range, precision, subnormals, rounding.

   Mixed precision trains with 16-bit numbers where it can. Two 16-bit formats are in use:

     f16  (IEEE binary16):  1 sign, 5 exponent, 10 mantissa bits  - fine steps, small range
     bf16 (bfloat16):       1 sign, 8 exponent,  7 mantissa bits  - f32's range, coarse steps

   This program prints where each number line starts and ends, how far apart its neighbours
   are, and what some familiar numbers round to. Every sentence it prints is checked: the
   program exits 1 if a claim does not hold for the conversions in amp.h.

   Build:  cc -std=c99 -O2 -I. examples/01_number_lines.c -o 01_number_lines -lm */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>
#include <float.h>

static int failures = 0;

/* Prints a claim and checks it. */
static void claim(int holds, const char *what) {
  printf("  %s %s\n", holds ? "[ok]" : "[WRONG]", what);
  if (!holds) failures++;
}

static float f16(float x) { return amp_f16_to_f32(amp_f32_to_f16(x)); }   /* x stored in f16 */
static float bf16(float x) { return amp_bf16_to_f32(amp_f32_to_bf16(x)); } /* x stored in bf16 */

/* The gap between x and the next larger number of the format (x > 0, x finite in the format). */
static float f16_gap(float x) { amp_f16 h = amp_f32_to_f16(x); return amp_f16_to_f32((amp_f16)(h + 1)) - amp_f16_to_f32(h); }
static float bf16_gap(float x) { amp_bf16 h = amp_f32_to_bf16(x); return amp_bf16_to_f32((amp_bf16)(h + 1)) - amp_bf16_to_f32(h); }

int main(void) {
  static const float probes[] = { 1e-7f, 1e-5f, 1e-3f, 1.0f, 1000.0f, 60000.0f };
  float bf_max = amp_bf16_to_f32(0x7f7f), bf_min_normal = amp_bf16_to_f32(0x0080), bf_min_sub = amp_bf16_to_f32(0x0001);
  size_t i;

  printf("1. Where the number lines start and end\n\n");
  printf("  %-26s %14s %14s %14s\n", "", "f32", "f16", "bf16");
  printf("  %-26s %14g %14g %14g\n", "largest finite", FLT_MAX, amp_f16_to_f32(0x7bff), bf_max);
  printf("  %-26s %14g %14g %14g\n", "smallest normal", FLT_MIN, amp_f16_to_f32(0x0400), bf_min_normal);
  printf("  %-26s %14g %14g %14g\n", "smallest subnormal", 1.40129846e-45, amp_f16_to_f32(0x0001), bf_min_sub);
  printf("  %-26s %14g %14g %14g\n", "gap above 1 (epsilon)", FLT_EPSILON, f16_gap(1.0f), bf16_gap(1.0f));
  printf("  %-26s %14s %14s %14s\n\n", "decimal digits", "~7.2", "~3.3", "~2.4");
  claim(amp_f16_to_f32(0x7bff) == 65504.0f, "f16 ends at 65504: a gradient of 70000 cannot be stored");
  claim(amp_f16_to_f32(0x0400) == ldexpf(1.0f, -14), "f16's normal numbers end at 2^-14 = 6.1e-5");
  claim(amp_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "below that, subnormals reach down to 2^-24 = 6e-8 with fewer digits");
  claim(bf_max > 3.38e38f && bf_min_normal == FLT_MIN, "bf16 spans f32's whole range (1.2e-38 .. 3.4e38)");
  claim(f16_gap(1.0f) == ldexpf(1.0f, -10) && bf16_gap(1.0f) == ldexpf(1.0f, -7),
        "next to 1.0, f16 steps by 2^-10 (0.001), bf16 by 2^-7 (0.008): bf16 is 8x coarser");

  printf("\n2. The gap between neighbours grows with the number (relative precision is what is fixed)\n\n");
  printf("  %-12s %14s %14s\n", "near", "f16 gap", "bf16 gap");
  for (i = 0; i < sizeof probes / sizeof probes[0]; i++)
    printf("  %-12g %14g %14g\n", probes[i], f16_gap(probes[i]), bf16_gap(probes[i]));
  printf("\n");
  claim(f16_gap(1e-7f) == ldexpf(1.0f, -24), "near 1e-7 f16 is subnormal: steps of 6e-8, barely one digit left");
  claim(f16_gap(60000.0f) == 32.0f, "near 60000 f16 steps by 32");
  claim(bf16_gap(1000.0f) == 4.0f && f16_gap(1000.0f) == 0.5f, "near 1000 f16 steps by 0.5, bf16 by 4");

  printf("\n3. What rounds to what (round to nearest, ties to even)\n\n");
  printf("  %-14s %18s %18s\n", "f32 value", "stored in f16", "stored in bf16");
  {
    static const float xs[] = { 0.1f, 1.0f / 3.0f, 2049.0f, 257.0f, 65519.0f, 65520.0f, 1e5f, 1e-5f, 3e-8f, 2.98e-8f, 1e-8f, 1e-30f };
    for (i = 0; i < sizeof xs / sizeof xs[0]; i++) printf("  %-14.9g %18.10g %18.10g\n", xs[i], f16(xs[i]), bf16(xs[i]));
  }
  printf("\n");
  claim(f16(2049.0f) == 2048.0f, "f16 holds every integer only up to 2048: 2049 becomes 2048 (a tie, to even)");
  claim(bf16(257.0f) == 256.0f, "bf16 holds every integer only up to 256: 257 becomes 256");
  /* inf told by its bits (f16's +inf is 0x7c00), not by isinf(): -Ofast (-ffinite-math-only) lets
     the compiler assume no value is inf and fold isinf() to 0 in your own code */
  claim(f16(65519.0f) == 65504.0f && amp_f32_to_f16(65520.0f) == 0x7c00, "65519 rounds down to 65504 in f16; 65520 already overflows to inf");
  claim(amp_f32_to_f16(1e5f) == 0x7c00 && bf16(1e5f) == 99840.0f, "1e5 is inf in f16 but about 99840 in bf16");
  claim(f16(3e-8f) == ldexpf(1.0f, -24), "3e-8 is just above half of 2^-24, so f16 rounds it up to the smallest subnormal");
  claim(f16(2.98e-8f) == 0.0f, "2.98e-8 is just below half of 2^-24: it flushes to 0 in f16 (underflow)");
  claim(f16(1e-8f) == 0.0f && bf16(1e-8f) != 0.0f, "1e-8 is lost in f16 and kept (to 3 digits) in bf16");
  claim(f16(1e-30f) == 0.0f && fabsf(bf16(1e-30f) - 1e-30f) < 1e-32f, "1e-30 survives only in bf16");

  printf("\nWhat this means for training:\n"
         "  - f16 has 3 more bits of precision but small gradients flush to 0 below 3e-8 (half its\n"
         "    smallest subnormal, 6e-8) and big values overflow above 65504: it needs loss scaling\n"
         "    (example 3) and fp32 master weights (example 2).\n"
         "  - bf16 has f32's normal range (down to 1.2e-38), so gradients do not underflow in\n"
         "    practice and it needs no loss scaling, but its 8-bit mantissa loses small updates even\n"
         "    faster: it needs fp32 master weights all the more.\n");
  if (failures) { printf("\n%d claim(s) did not hold\n", failures); return 1; }
  return 0;
}
