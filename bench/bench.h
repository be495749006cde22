/* bench/bench.h - timing helpers shared by the benchmarks. Benchmarks are not tests: they print
   one line per figure, `name  ours  reference  ratio`, and never fail the build. */
#ifndef AMP_BENCH_H
#define AMP_BENCH_H
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench__cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
/* The median of n timings (sorts t). */
static inline double bench_median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, bench__cmp);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* BENCH_EMULATED=1 (make bench-arm sets it: AArch64 builds run under qemu-user): an emulator's
   timings are not figures, so every line prints its name and no numbers, the benchmarks run small
   sizes and no peers (the paths run, to show that they do and which ones ran). */
static inline int bench_emulated(void) {
  const char *e = getenv("BENCH_EMULATED");
  return e && *e && strcmp(e, "0") != 0;
}

/* One figure: ours and a reference in the same unit; ratio = ours / reference (higher is better
   for rates). A reference of 0 prints "-". */
static inline void bench_line(const char *name, double ours, double ref, const char *unit) {
  if (bench_emulated())
    printf("%-44s %10s %10s %8s  %s: not measured (under an emulator, timings are not figures)\n", name, "-", "-", "-", unit);
  else if (ref > 0) printf("%-44s %10.2f %10.2f %7.3fx  %s\n", name, ours, ref, ours / ref, unit);
  else printf("%-44s %10.2f %10s %8s  %s\n", name, ours, "-", "-", unit);
  fflush(stdout);
}

/* Reference figures measured by bench/torch_ref.py in the same `make bench-gpu` run, read from the
   file it wrote (lines `key value`). Returns 0 when the key or the file is missing. */
static inline double bench_ref(const char *key) {
  const char *path = getenv("AMP_TORCH_REF");
  char k[128];
  double v, found = 0;
  FILE *f = fopen(path ? path : "build/torch_ref.txt", "r");
  if (!f) return 0;
  while (fscanf(f, "%127s %lf", k, &v) == 2) if (!strcmp(k, key)) found = v;
  fclose(f);
  return found;
}
#endif
