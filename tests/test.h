/* tests/test.h - the tiny harness every test program uses.
   A test is a function; RUN(fn) runs it and counts it passed when no EXPECT inside failed.
   A failing EXPECT prints where, and the input, expected and actual value it was given.
   The program ends with one line "RESULT N passed, M failed", which tests/run.sh adds up. */
#ifndef AMP_TEST_H
#define AMP_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

static int t__pass, t__fail, t__cur;

#define EXPECT(cond, ...) do { if (!(cond)) { \
    if (++t__cur <= 12) { printf("  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
                          printf(__VA_ARGS__); printf("\n"); } } } while (0)

#define RUN(fn) do { t__cur = 0; fn(); \
    if (t__cur) { t__fail++; printf("FAIL %s (%d checks failed)\n", #fn, t__cur); } \
    else { t__pass++; printf("ok   %s\n", #fn); } fflush(stdout); } while (0)

#define TEST_END() do { printf("RESULT %d passed, %d failed\n", t__pass, t__fail); \
    return t__fail ? 1 : 0; } while (0)

/* Under sanitizers and valgrind the runner sets AMP_TEST_QUICK=1: heavy tests sample instead. */
static inline int t_quick(void) { const char *e = getenv("AMP_TEST_QUICK"); return e && *e && *e != '0'; }

/* How many entries of directory dir have names starting with prefix (-1: dir cannot be read). */
static inline int t_count_files(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) found += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return found;
}

/* The whole file at path in a malloc'd buffer (one byte more, so an empty file is a buffer too),
   its length in *n; NULL (and *n 0) when it cannot be opened or read whole. */
static inline unsigned char *t_read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *p;
  long len;
  *n = 0;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) { fclose(f); return NULL; }
  p = (unsigned char *)malloc((size_t)len + 1);
  if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) { free(p); fclose(f); return NULL; }
  fclose(f);
  *n = (size_t)len;
  return p;
}

/* "build/test/NAME.PID": a scratch file of this process's own, so that two runs of one program at
   once (make gpu-check runs each CUDA test under four compute-sanitizer tools side by side) never
   read each other's files. Four buffers in turn: up to four such paths live at once. */
static inline const char *t_own_path(const char *name) {
  static char buf[4][256];
  static int next;
  char *b = buf[next++ & 3];
  snprintf(b, sizeof buf[0], "build/test/%s.%ld", name, (long)getpid());
  return b;
}

/* 1 when AMP_REQUIRE_GPU is set (to anything but 0): the run is on a machine that has a GPU. */
static inline int t_require_gpu(void) { const char *e = getenv("AMP_REQUIRE_GPU"); return e && *e && *e != '0'; }
/* GPU tests that cannot run for want of a usable GPU: "skipped: what (why)", or, under
   AMP_REQUIRE_GPU=1, a failure, so that a machine whose GPU cannot be used (an old driver, a broken
   installation) never passes as "skipped". */
static inline void t_no_gpu(const char *what, const char *why) {
  if (t_require_gpu()) { t__fail++; printf("FAIL %s: AMP_REQUIRE_GPU=1 but they did not run (%s)\n", what, why); }
  else printf("skipped: %s (%s)\n", what, why);
}

/* A shell command running "python3 ARGS" with a python3 that imports torch: $AMP_PYTHON, else
   Debian's /usr/bin/python3, else the python3 on PATH (a GPU machine's PyTorch). Without one it
   prints "missing" and exits 3. */
static inline void t_torch_cmd(char *cmd, size_t cap, const char *args) {
  snprintf(cmd, cap, "for py in \"${AMP_PYTHON:-/usr/bin/python3}\" python3; do "
           "if \"$py\" -c 'import torch' 2>/dev/null; then exec \"$py\" %s; fi; done; echo missing; exit 3", args);
}

#ifdef AMP_IMPLEMENTATION
/* The SIMD levels of the conversion and fp8 loops to run: 0 portable, 1 AVX2, 2 AVX-512 (AArch64:
   1 NEON, 2 NEON + BFCVTN), those the CPU has (t_simd_levels() of them); t_simd_level(l) selects
   one (amp_simd_enable and the level cap), t_simd_level(2) the CPU's best again. */
static inline int t_simd_levels(void) {
#if defined(AMP__X86_SIMD) || defined(AMP__NEON_SIMD)
  return amp__cpu_level() + 1;
#else
  return 1;
#endif
}
static inline void t_simd_level(int l) {
  amp_simd_enable(l > 0);
#if defined(AMP__X86_SIMD) || defined(AMP__NEON_SIMD)
  amp__isa_cap = l > 0 ? l : 2;
#endif
}

/* Every byte a CPU optimizer owns that a step may change: masters, moments, model copies, step
   (for tests that check a skipped step changed nothing). buf must hold all of them. */
static inline size_t t_optim_snapshot(const amp_optimizer *o, unsigned char *buf) {
  size_t k = 0, i;
  for (i = 0; i < o->count; i++) {
    size_t n = o->t[i].n;
    memcpy(buf + k, o->t[i].master, n * 4); k += n * 4;
    if (o->t[i].m) { memcpy(buf + k, o->t[i].m, n * 4); k += n * 4; }
    if (o->t[i].v) { memcpy(buf + k, o->t[i].v, n * 4); k += n * 4; }
    memcpy(buf + k, o->t[i].w, n * amp_dtype_size(o->t[i].wtype)); k += n * amp_dtype_size(o->t[i].wtype);
  }
  memcpy(buf + k, &o->step, sizeof o->step); k += sizeof o->step;
  return k;
}
#endif

#endif
