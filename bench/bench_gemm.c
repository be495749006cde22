/* bench/bench_gemm.c - amp_gemm on one CPU thread against its peers, measured in the same run:
     the core's f32 FMA peak first: 12 independent vfmadd231ps accumulators (zmm on AVX-512, ymm on
           AVX2), the fastest of 7 runs, and on an AVX512_BF16 CPU the same for vdpbf16ps; every
           product of ours is printed as a fraction of that peak (`_of_peak` lines);
     f32:  OpenBLAS cblas_sgemm and BLIS (each loaded at run time with its own core detection,
           OPENBLAS_CORETYPE unset, one thread; skipped with a message where absent), and PyTorch's
           CPU torch.matmul in f32 (whatever BLAS it links);
     bf16: PyTorch's CPU torch.matmul in bf16 (oneDNN: vdpbf16ps on an AVX512_BF16 CPU), our f32
           product of the same values, and our other bf16 kernels forced (vdpbf16ps, BFDOT, BFMMLA or
           bf16 widened while packing: those the calibration did not choose);
     f16:  the f32 peers (no CPU peer multiplies f16 faster than it converts it to f32).
   Each peer's kernel is named (openblas_get_corename(), BLIS's sub-configuration, the BLAS library
   PyTorch loaded, oneDNN's implementation). A peer on a generic kernel (OpenBLAS's SSE-era cores,
   BLIS's "generic", the netlib reference BLAS) gets no ratio: its line says so and gives both
   figures as fractions of the peak instead, so that a win over a crippled peer never reads as one.
   PyTorch runs as a python3 subprocess (torch.set_num_threads(1), glibc told to keep its memory,
   OPENBLAS_CORETYPE unset for that command only), skipped with a message where torch is absent.
   Shapes: the demo's MLP (examples/train_mlp.c: 784-256-128-10, batch 64: the forward products
   and the two of the backward pass) and squares 512-2048. Each figure is the median of 7 timed
   rounds of thread CPU time (ours and OpenBLAS alternate round by round); ours is built the way a
   user builds it (`cc -O2`, no -march: CPUID and the calibration pick the kernel).
   Line: name  ours  reference  ratio  (GFLOP/s, ratio = ours / peer; _of_peak: ours / FMA peak). */
#include "bench.h"
#include <dlfcn.h>
#include <strings.h>
#define AMP_IMPLEMENTATION
#include "amp.h"

typedef struct { const char *name; amp_trans ta, tb; int m, n, k; } shape;
static const shape shapes[] = {
  {"mlp_fwd1", AMP_NO_TRANS, AMP_NO_TRANS, 64, 256, 784},   /* x W1: batch x 784 times 784 x 256 */
  {"mlp_fwd2", AMP_NO_TRANS, AMP_NO_TRANS, 64, 128, 256},
  {"mlp_dW1", AMP_TRANS, AMP_NO_TRANS, 784, 256, 64},       /* x^T dz1 */
  {"mlp_dh1", AMP_NO_TRANS, AMP_TRANS, 64, 256, 128},       /* dz2 W2^T */
  {"mlp_fwd1_b256", AMP_NO_TRANS, AMP_NO_TRANS, 256, 256, 784},
  {"square", AMP_NO_TRANS, AMP_NO_TRANS, 512, 512, 512},
  {"square", AMP_NO_TRANS, AMP_NO_TRANS, 1024, 1024, 1024},
  {"square", AMP_NO_TRANS, AMP_NO_TRANS, 2048, 2048, 2048},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static double gflops(const shape *s, double sec) { return 2.0 * s->m * s->n * s->k / sec * 1e-9; }

/* Every product here runs on the calling thread, so its time is the thread's CPU time: on a
   machine shared with other jobs that leaves out the time they took (on an idle one it is the
   wall time). PyTorch is timed the same way (time.thread_time, one thread). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median seconds of one call over 7 rounds, each round long enough (~0.1 s) to time. With a
   second function g, its rounds alternate with f's (on a shared machine both see the same load)
   and *tg gets its median. */
typedef void (*call_fn)(const shape *s, void *a, void *b, float *c, amp_dtype t);
static double time_pair(call_fn f, call_fn g, double *tg, const shape *s, void *a, void *b, float *c, amp_dtype t) {
  double flop = 2.0 * s->m * s->n * s->k, ts[7], us[7];
  int reps = flop < 2e8 && !bench_emulated() ? (int)(2e8 / flop) + 1 : 1, r, i;
  f(s, a, b, c, t);
  if (g) g(s, a, b, c, t);
  for (r = 0; r < 7; r++) {
    double t0 = cpu_now();
    for (i = 0; i < reps; i++) f(s, a, b, c, t);
    ts[r] = (cpu_now() - t0) / reps;
    if (g) {
      t0 = cpu_now();
      for (i = 0; i < reps; i++) g(s, a, b, c, t);
      us[r] = (cpu_now() - t0) / reps;
    }
  }
  if (g) *tg = bench_median(us, 7);
  return bench_median(ts, 7);
}
static double time_call(call_fn f, const shape *s, void *a, void *b, float *c, amp_dtype t) {
  return time_pair(f, NULL, NULL, s, a, b, c, t);
}

static void ours(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, t, s->ta ? s->m : s->k, b, t,
           s->tb ? s->k : s->n, 0.0f, c, AMP_F32, s->n);
}
#ifdef AMP__GEMM_NEON
/* AArch64: the portable reference product, against which the NEON kernels are shown */
static void ours_reference(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.algo = AMP_GEMM_REFERENCE;
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, t, s->ta ? s->m : s->k, b, t,
              s->tb ? s->k : s->n, 0.0f, c, AMP_F32, s->n, &o);
}
#endif

/* fp8 (E4M3) inputs with per-tensor scale_invs (widened while packing, the same kernels), and
   block-scaled: the DeepSeek-V3 forward y = x W^T, x in 1x128 tiles and W (n x k) in 128 x 128
   blocks, tb AMP_TRANS whatever the shape's transposes (the product runs once per 128 of k). */
static float fp8_si = 0.25f;
static const void *fp8_xs, *fp8_ws;
static void ours_fp8(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.a_scale_inv = &fp8_si; o.b_scale_inv = &fp8_si;
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, t, s->ta ? s->m : s->k, b, t,
              s->tb ? s->k : s->n, 0.0f, c, AMP_F32, s->n, &o);
}
/* An E4M3 A (scale_inv 1/4) beside a bf16 B: fp8 activations times bf16 weights, or the reverse. */
static void ours_fp8_bf16(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  (void)t;
  memset(&o, 0, sizeof o);
  o.a_scale_inv = &fp8_si;
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, AMP_E4M3, s->ta ? s->m : s->k, b,
              AMP_BF16, s->tb ? s->k : s->n, 0.0f, c, AMP_F32, s->n, &o);
}
/* The per-tensor fp8 product with an epilogue (fp8_epi): 1 f32 C and its amax (c_amax, the next
   step's scale); 2 an E4M3 C (c_scale 1) and its amax, TransformerEngine's fp8 output; 3 a bf16 C
   with a bias and GELU, the layer forward y = gelu(x W + b). c holds m x n floats: room for each. */
static int fp8_epi;
static float fp8_bias[4096], fp8_amax;
static void ours_fp8_epi(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  float one = 1.0f;
  amp_dtype ct = fp8_epi == 2 ? AMP_E4M3 : fp8_epi == 3 ? AMP_BF16 : AMP_F32;
  memset(&o, 0, sizeof o);
  o.a_scale_inv = &fp8_si; o.b_scale_inv = &fp8_si;
  if (fp8_epi <= 2) o.c_amax = &fp8_amax;
  if (fp8_epi == 2) o.c_scale = &one;
  if (fp8_epi == 3) { o.bias = fp8_bias; o.act = AMP_ACT_GELU; }
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, t, s->ta ? s->m : s->k, b, t,
              s->tb ? s->k : s->n, 0.0f, c, ct, s->n, &o);
}
/* The bf16 product into a bf16 C with a bias and GELU: a layer's forward y = gelu(x W + b) in bf16. */
static float bf16_bias[4096];
static void ours_bf16_gelu(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.bias = bf16_bias; o.act = AMP_ACT_GELU;
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, t, s->ta ? s->m : s->k, b, t,
              s->tb ? s->k : s->n, 0.0f, c, AMP_BF16, s->n, &o);
}
static void ours_fp8_blocks(const shape *s, void *a, void *b, float *c, amp_dtype t) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.a_blocks = AMP_BLOCK_1x128; o.a_scales = fp8_xs;
  o.b_blocks = AMP_BLOCK_128x128; o.b_scales = fp8_ws;
  amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, s->m, s->n, s->k, 1.0f, a, t, s->k, b, t, s->k, 0.0f,
              c, AMP_F32, s->n, &o);
}

/* The BLAS peers through dlopen: no link-time dependency, one thread. kernel: the kernel they run
   on this CPU; native 0 marks a generic one (see the top). */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef struct { const char *name; sgemm_fn sgemm; char kernel[96]; int native; } blas_peer;
static blas_peer openblas_p = {"openblas", NULL, "", 0}, blis_p = {"blis", NULL, "", 0};
static void blas_call(const blas_peer *b, const shape *s, void *a, void *bm, float *c) {
  /* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112 */
  b->sgemm(101, s->ta ? 112 : 111, s->tb ? 112 : 111, s->m, s->n, s->k, 1.0f, (const float *)a, s->ta ? s->m : s->k,
           (const float *)bm, s->tb ? s->k : s->n, 0.0f, c, s->n);
}
static void openblas(const shape *s, void *a, void *b, float *c, amp_dtype t) { (void)t; blas_call(&openblas_p, s, a, b, c); }
static void blis(const shape *s, void *a, void *b, float *c, amp_dtype t) { (void)t; blas_call(&blis_p, s, a, b, c); }

/* 1 when OpenBLAS's core (openblas_get_corename()) has FMA kernels (Haswell and later, Zen,
   Piledriver and later); the others (Prescott, Core2, Nehalem, Katmai, ...) are SSE-era code. */
static int openblas_core_native(const char *core) {
  static const char *fma[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator", "steamroller",
                              "piledriver"};
  size_t i;
  for (i = 0; i < sizeof fma / sizeof fma[0]; i++) if (!strcasecmp(core, fma[i])) return 1;
  return 0;
}
static void *dlopen_first(const char *const *names, int n) {
  void *h = NULL;
  int i;
  for (i = 0; i < n && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  return h;
}
static int openblas_open(void) {
  static const char *const names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"};
  void (*set_threads)(int);
  char *(*corename)(void);
  void *h;
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  unsetenv("OPENBLAS_CORETYPE");   /* a forced core type (Haswell here) slows current builds */
  h = dlopen_first(names, 3);
  if (!h) { printf("OpenBLAS: not found (%s): its column is skipped (apt install libopenblas-dev)\n", dlerror()); return 0; }
  *(void **)&openblas_p.sgemm = dlsym(h, "cblas_sgemm");
  *(void **)&set_threads = dlsym(h, "openblas_set_num_threads");
  *(void **)&corename = dlsym(h, "openblas_get_corename");
  if (!openblas_p.sgemm) { printf("OpenBLAS: no cblas_sgemm in the library: its column is skipped\n"); return 0; }
  if (set_threads) set_threads(1);
  snprintf(openblas_p.kernel, sizeof openblas_p.kernel, "core %s", corename ? corename() : "(unknown)");
  openblas_p.native = corename && openblas_core_native(corename());
  printf("OpenBLAS: %s (%s)\n", openblas_p.kernel,
         openblas_p.native ? "an FMA kernel" : "a generic SSE-era kernel on this CPU: no ratio is printed against it");
  return 1;
}
static int blis_open(void) {
  static const char *const names[] = {"libblis.so.4", "libblis.so", "libblis-mt.so.4"};
  int (*arch_id)(void);
  const char *(*arch_str)(int);
  void *h;
  setenv("BLIS_NUM_THREADS", "1", 1);
  h = dlopen_first(names, 3);
  if (!h) { printf("BLIS: not found (%s): its column is skipped (apt install libblis-dev)\n", dlerror()); return 0; }
  *(void **)&blis_p.sgemm = dlsym(h, "cblas_sgemm");
  *(void **)&arch_id = dlsym(h, "bli_arch_query_id");
  *(void **)&arch_str = dlsym(h, "bli_arch_string");
  if (!blis_p.sgemm) { printf("BLIS: no cblas_sgemm in the library: its column is skipped\n"); return 0; }
  snprintf(blis_p.kernel, sizeof blis_p.kernel, "sub-configuration %s", arch_id && arch_str ? arch_str(arch_id()) : "(unknown)");
  blis_p.native = arch_id && arch_str && strcmp(arch_str(arch_id()), "generic") != 0;
  printf("BLIS: %s (%s)\n", blis_p.kernel, blis_p.native ? "a kernel for this CPU" : "generic: no ratio is printed against it");
  return 1;
}

/* PyTorch: one subprocess measures every shape in f32 and bf16 (median of 7 rounds, as ours),
   then names the kernels it ran: the BLAS libraries in its memory map (f32 products go to BLAS;
   OpenBLAS's core by ctypes) and oneDNN's implementation of a bf16 matmul (its verbose line). */
static double torch_gf[NSHAPES][2];
static char torch_kernel[2][160] = {"(kernel not named)", "(kernel not named)"};
static int torch_native[2] = {1, 1};   /* unknown kernels are not called generic */
static void torch_blas(const char *path, const char *core) {
  if (strstr(path, "openblas")) {
    snprintf(torch_kernel[0], sizeof torch_kernel[0], "OpenBLAS, core %s", *core ? core : "(unknown)");
    torch_native[0] = openblas_core_native(core);
  } else if (strstr(path, "blis")) {
    snprintf(torch_kernel[0], sizeof torch_kernel[0], "BLIS (%.100s)", path);
  } else if (strstr(path, "mkl")) {
    snprintf(torch_kernel[0], sizeof torch_kernel[0], "MKL (%.100s)", path);
  } else {   /* Debian's libblas.so.3 alternative without OpenBLAS or BLIS: LAPACK's Fortran loops */
    snprintf(torch_kernel[0], sizeof torch_kernel[0], "the reference BLAS %.100s, generic loops", path);
    torch_native[0] = 0;
  }
}
static int torch_run(void) {
  char cmd[6144], line[1024];
  size_t len;
  int i, got = 0;
  FILE *p;
  len = (size_t)snprintf(cmd, sizeof cmd,
    "PY=; for p in python3 /usr/bin/python3; do if $p -c 'import torch' 2>/dev/null; then PY=$p; break; fi; done; "
    "[ -n \"$PY\" ] || { echo 'notorch'; exit 0; }; "
    "env -u OPENBLAS_CORETYPE MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 $PY -c '\n"
    "import torch, time, statistics\n"
    "torch.set_num_threads(1)\n"
    "shapes = [");
  for (i = 0; i < NSHAPES; i++)
    len += (size_t)snprintf(cmd + len, sizeof cmd - len, "(%d,%d,%d,%d,%d),", shapes[i].m, shapes[i].n, shapes[i].k,
                            (int)shapes[i].ta, (int)shapes[i].tb);
  snprintf(cmd + len, sizeof cmd - len, "]\n"
    "for i, (m, n, k, ta, tb) in enumerate(shapes):\n"
    "  for d, dt in enumerate((torch.float32, torch.bfloat16)):\n"
    "    a = (torch.randn(k, m) if ta else torch.randn(m, k)).to(dt)\n"
    "    b = (torch.randn(n, k) if tb else torch.randn(k, n)).to(dt)\n"
    "    a = a.t() if ta else a\n"
    "    b = b.t() if tb else b\n"
    "    reps = int(2e8 / (2.0 * m * n * k)) + 1\n"
    "    torch.matmul(a, b)\n"
    "    ts = []\n"
    "    for r in range(7):\n"
    "      t0 = time.thread_time()\n"
    "      for _ in range(reps): torch.matmul(a, b)\n"
    "      ts.append((time.thread_time() - t0) / reps)\n"
    "    print(i, d, 2.0 * m * n * k / statistics.median(ts) * 1e-9, flush=True)\n"
    "import os, re, ctypes\n"
    "for p in sorted(set(os.path.realpath(l.split()[-1]) for l in open(\"/proc/self/maps\") if re.search(\"(blas|blis|mkl)[^/]*$\", l.strip()))):\n"
    "  core = \"\"\n"
    "  try:\n"
    "    f = ctypes.CDLL(p).openblas_get_corename; f.restype = ctypes.c_char_p; core = f().decode()\n"
    "  except Exception: pass\n"
    "  print(\"blas\", p, core, flush=True)\n"
    "a = torch.randn(64, 256).bfloat16(); b = torch.randn(256, 128).bfloat16()\n"
    "try:\n"
    "  with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON): torch.matmul(a, b)\n"
    "except Exception: pass\n"
    "' 2>&1");
  p = popen(cmd, "r");
  if (!p) { printf("PyTorch: cannot start python3: its columns are skipped\n"); return 0; }
  while (fgets(line, sizeof line, p)) {
    int si, d;
    double g;
    if (!strncmp(line, "notorch", 7)) { printf("PyTorch: python3 has no torch module: its columns are skipped (apt install python3-torch)\n"); break; }
    char path[512], core[64] = "", *impl;
    if (sscanf(line, "%d %d %lf", &si, &d, &g) == 3 && si >= 0 && si < NSHAPES && (d == 0 || d == 1)) { torch_gf[si][d] = g; got++; }
    if (sscanf(line, "blas %511s %63s", path, core) >= 1) torch_blas(path, core);
    if ((!strncmp(line, "onednn_verbose,exec,cpu,matmul,", 31) || !strncmp(line, "dnnl_verbose,exec,cpu,matmul,", 29)) &&
        (impl = strstr(line, "matmul,")) != NULL) {
      size_t n = strcspn(impl + 7, ",");
      snprintf(torch_kernel[1], sizeof torch_kernel[1], "oneDNN %.*s", (int)n, impl + 7);
      torch_native[1] = strncmp(impl + 7, "ref", 3) != 0;   /* oneDNN's reference loops: ref:any */
    }
  }
  pclose(p);
  if (!got) printf("PyTorch: the subprocess printed no figures: its columns are skipped\n");
  else printf("PyTorch: f32 by %s%s; bf16 by %s%s\n", torch_kernel[0], torch_native[0] ? "" : " (generic: no ratio)",
              torch_kernel[1], torch_native[1] ? "" : " (generic: no ratio)");
  return got > 0;
}

/* The core's peak, GFLOP/s, one thread: the fastest of 7 runs of a loop of 12 independent
   accumulators (amp.h's calibration loop: kind 0 vfmadd231ps zmm, 1 vdpbf16ps zmm, 2 vfmadd231ps
   ymm), each run 8M rounds of thread CPU time. 0 where there is no such loop (not x86 FMA). */
static double peak_gflops(int kind) {
#ifdef AMP__GEMM_FAST
  const long n = 8000000;
  double best = 1e30;
  int r;
  amp__gemm_peak_loop(kind, n / 8);   /* warm-up */
  for (r = 0; r < 7; r++) {
    double t0 = cpu_now(), t;
    amp__gemm_peak_loop(kind, n);
    t = cpu_now() - t0;
    if (t < best) best = t;
  }
  return amp__gemm_peak_flops(kind) * (double)n / best * 1e-9;
#else
  (void)kind;
  return 0;
#endif
}
static double peak;   /* the f32 FMA peak, GFLOP/s */

static void shape_name(char *name, size_t cap, const char *what, const shape *s, const char *tail) {
  snprintf(name, cap, "gemm_%s_%s_%dx%dx%d_%s", what, s->name, s->m, s->n, s->k, tail);
}
/* ours as a fraction of the core's f32 FMA peak */
static void peak_line(const char *what, const shape *s, double ours, const char *unit) {
  char name[160], u[200];
  shape_name(name, sizeof name, what, s, "of_peak");
  snprintf(u, sizeof u, "GFLOP/s against the FMA peak (%s)", unit);
  if (peak > 0) bench_line(name, ours, peak, u);
}
/* ours against a peer: a ratio for a peer on a real kernel; for a generic one both fractions of
   the peak and no ratio. */
static void peer_line(const char *what, const shape *s, const char *peer, double ours, double theirs, int native,
                      const char *kernel, const char *unit) {
  char name[160], tail[64];
  snprintf(tail, sizeof tail, "vs_%s", peer);
  shape_name(name, sizeof name, what, s, tail);
  if (native || theirs <= 0) { bench_line(name, ours, theirs, unit); return; }
  printf("%-44s %10.2f %10.2f %8s  GFLOP/s; %s runs a generic kernel (%s): no ratio; of the FMA peak: ours %.2f, %s %.2f\n",
         name, ours, theirs, "-", peer, kernel, peak > 0 ? ours / peak : 0, peer, peak > 0 ? theirs / peak : 0);
  fflush(stdout);
}

int main(void) {
  int have_blas = openblas_open(), have_blis = blis_open(), have_torch, i, ko, dp = 0, fma512 = 0;
  int isa = 0, amx = 0;   /* amx: bf16 x bf16 on the AMX kernel */
  const char *bf16_kernel = "widened while packing, the f32 kernel", *other[2] = {NULL, NULL};
  int other_v[2] = {0, 0};   /* amp__gemm_dpbf16_forced for each of them */
  const char *kernel = "reference (no FMA)";
#ifdef AMP__GEMM_FAST
  isa = amp__gemm_isa();
  fma512 = (isa & AMP__GEMM_ISA_512) != 0;
  kernel = isa & 2 ? "AVX-512 FMA" : isa & 1 ? "AVX2 FMA" : kernel;
  if (isa & AMP__GEMM_ISA_BF16) {
    dp = amp__gemm_dpbf16();
    if (dp) bf16_kernel = "vdpbf16ps";
    other[0] = dp ? "widened" : "dpbf16";
    other_v[0] = !dp;
#ifdef AMP__GEMM_AMX
    if (amp__gemm_amx()) {   /* the tile unit runs bf16; both other kernels forced (AMX masked out) */
      amx = 1;
      bf16_kernel = "AMX tiles";
      other[0] = "dpbf16"; other_v[0] = 1; other[1] = "widened"; other_v[1] = 0;
    }
#endif
  }
#elif defined(AMP__GEMM_NEON)
  kernel = "NEON FMLA";
#ifdef AMP__GEMM_BFDOT
  if (amp__cpu_bf16()) {
    static const char *const names[3] = {"widened", "bfdot", "bfmmla"};
    int v, no = 0;
    dp = amp__gemm_dpbf16();
    if (dp) bf16_kernel = dp == 2 ? "BFMMLA" : "BFDOT";
    for (v = 0; v < 3; v++)
      if (v != dp) { other[no] = names[v]; other_v[no++] = v; }
  }
#endif
#endif
  (void)other; (void)other_v; (void)ko; (void)amx;
  if (bench_emulated()) have_blas = have_blis = 0;
  printf("amp_gemm, 1 thread: kernel %s; bf16 inputs: %s (GFLOP/s; ratio = ours / peer)\n", kernel, bf16_kernel);
  if (isa & 1) {
    peak = peak_gflops(fma512 ? 0 : 2);
    printf("%-44s %10.2f %10s %8s  GFLOP/s (12 independent vfmadd231ps %s accumulators, fastest of 7)\n", "peak_f32_fma",
           peak, "-", "-", fma512 ? "zmm" : "ymm");
    if (isa & 4)
      bench_line("peak_bf16_vdpbf16ps_vs_f32_fma", peak_gflops(1), peak,
                 "GFLOP/s (12 independent vdpbf16ps zmm accumulators, 64 flops each; ratio: of the f32 FMA peak)");
  } else printf("peak: not measured (no x86 FMA)\n");
  if (bench_emulated()) {
    printf("under an emulator: no peers, and only the shapes up to 64 x 256 x 784\n");
    have_torch = 0;
  } else {
    printf("measuring PyTorch (subprocess, 1 thread)...\n");
    fflush(stdout);
    have_torch = torch_run();
  }
  printf("%-44s %10s %10s %8s\n", "name", "ours", "reference", "ratio");
  for (i = 0; i < NSHAPES; i++) {
    const shape *s = &shapes[i];
    size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, j;
    float *af = (float *)malloc(na * 4), *bf = (float *)malloc(nb * 4), *c = (float *)malloc((size_t)s->m * s->n * 4);
    void *ah = malloc(na * 2), *bh = malloc(nb * 2);
    double o32, o16, obf, g;
    char name[128];
    if (bench_emulated() && (double)s->m * s->n * s->k > 64.0 * 256 * 784) {
      free(af); free(bf); free(c); free(ah); free(bh);
      continue;
    }
    for (j = 0; j < na; j++) af[j] = (float)((int)(j * 37 % 101) - 50) / 64.0f;
    for (j = 0; j < nb; j++) bf[j] = (float)((int)(j * 53 % 97) - 48) / 64.0f;
    g = 0;
    o32 = gflops(s, time_pair(ours, have_blas ? openblas : NULL, &g, s, af, bf, c, AMP_F32));
    peak_line("f32", s, o32, "f32 in");
    if (have_blas) peer_line("f32", s, "openblas", o32, gflops(s, g), openblas_p.native, openblas_p.kernel, "GFLOP/s");
    if (have_blis) {
      g = gflops(s, time_call(blis, s, af, bf, c, AMP_F32));
      peer_line("f32", s, "blis", o32, g, blis_p.native, blis_p.kernel, "GFLOP/s");
    }
    if (have_torch && torch_gf[i][0] > 0)
      peer_line("f32", s, "torch", o32, torch_gf[i][0], torch_native[0], torch_kernel[0], "GFLOP/s");
#ifdef AMP__GEMM_NEON
    snprintf(name, sizeof name, "gemm_f32_%s_%dx%dx%d_NEON_vs_reference", s->name, s->m, s->n, s->k);
    bench_line(name, o32, gflops(s, time_call(ours_reference, s, af, bf, c, AMP_F32)),
               "GFLOP/s (the FMLA kernel against the portable reference product)");
#endif
    amp_convert(ah, AMP_BF16, af, AMP_F32, na); amp_convert(bh, AMP_BF16, bf, AMP_F32, nb);
    obf = gflops(s, time_call(ours, s, ah, bh, c, AMP_BF16));
    peak_line("bf16", s, obf, amx ? "bf16 in, AMX tiles" : dp ? "bf16 in, the dot-product kernel" : "bf16 in, widened");
    snprintf(name, sizeof name, "gemm_bf16_%s_%dx%dx%d_vs_ours_f32", s->name, s->m, s->n, s->k);
    bench_line(name, obf, o32, "GFLOP/s (bf16 in against f32 in, same values)");
    {   /* the epilogue a layer's forward adds: bias and GELU into a bf16 C */
      int j;
      for (j = 0; j < s->n && j < 4096; j++) bf16_bias[j] = 0.01f * (float)(j % 17) - 0.08f;
      snprintf(name, sizeof name, "gemm_bf16_bias_gelu_%s_%dx%dx%d_vs_ours_bf16", s->name, s->m, s->n, s->k);
      bench_line(name, gflops(s, time_call(ours_bf16_gelu, s, ah, bh, c, AMP_BF16)), obf,
                 "GFLOP/s (bf16 in, bf16 out with bias and GELU, against f32 out alone)");
    }
    if (have_torch && torch_gf[i][1] > 0)
      peer_line("bf16", s, "torch", obf, torch_gf[i][1], torch_native[1], torch_kernel[1],
                "GFLOP/s (bf16 in, f32 out; torch: bf16 out)");
#if defined(AMP__GEMM_FAST) || defined(AMP__GEMM_BFDOT)
    for (ko = 0; ko < 2 && other[ko]; ko++) {   /* the bf16 kernels the calibration did not choose, forced */
      double ob;
#ifdef AMP__GEMM_FAST
      int isa_was = amp__gemm_isa_allowed;
      amp__gemm_isa_allowed = isa_was & ~AMP__GEMM_ISA_AMX;   /* no AMX */
#endif
      amp__gemm_dpbf16_forced = other_v[ko];
      ob = gflops(s, time_call(ours, s, ah, bh, c, AMP_BF16));
      amp__gemm_dpbf16_forced = -1;
#ifdef AMP__GEMM_FAST
      amp__gemm_isa_allowed = isa_was;
#endif
      snprintf(name, sizeof name, "gemm_bf16_%s_%s_%dx%dx%d_vs_ours_bf16", other[ko], s->name, s->m, s->n, s->k);
      bench_line(name, ob, obf, other_v[ko] == 2 ? "GFLOP/s (BFMMLA forced; not chosen here)"
                              : other_v[ko] ? "GFLOP/s (the dot-product kernel forced; not chosen here)"
                                           : "GFLOP/s (bf16 widened while packing, forced; not chosen here)");
    }
#endif
    amp_convert(ah, AMP_F16, af, AMP_F32, na); amp_convert(bh, AMP_F16, bf, AMP_F32, nb);
    o16 = gflops(s, time_call(ours, s, ah, bh, c, AMP_F16));
    peak_line("f16", s, o16, "f16 in, widened");
    snprintf(name, sizeof name, "gemm_f16_%s_%dx%dx%d_vs_ours_f32", s->name, s->m, s->n, s->k);
    bench_line(name, o16, o32, "GFLOP/s (f16 in: converted while packing)");
    {   /* fp8: the codes of the same values (all exact in E4M3 after x 4), scale_inv 1/4 */
      float four = 4.0f, *xs = (float *)malloc(sizeof(float) * ((size_t)s->m * ((s->k + 127) / 128) + 1));
      float *ws = (float *)malloc(sizeof(float) * ((size_t)((s->n + 127) / 128) * ((s->k + 127) / 128) + 1));
      void *bt = malloc(nb);
      double o8, o8b;
      amp_quantize(amp_cpu(), ah, AMP_E4M3, af, AMP_F32, na, &four, NULL);
      amp_quantize(amp_cpu(), bh, AMP_E4M3, bf, AMP_F32, nb, &four, NULL);
      o8 = gflops(s, time_call(ours_fp8, s, ah, bh, c, AMP_E4M3));
      snprintf(name, sizeof name, "gemm_e4m3_%s_%dx%dx%d_vs_ours_bf16", s->name, s->m, s->n, s->k);
      bench_line(name, o8, obf, "GFLOP/s (e4m3 in, per-tensor scale_invs, f32 out)");
      snprintf(name, sizeof name, "gemm_e4m3_%s_%dx%dx%d_vs_ours_f32", s->name, s->m, s->n, s->k);
      bench_line(name, o8, o32, "GFLOP/s (e4m3 in, per-tensor scale_invs, f32 out)");
      {   /* e4m3 x bf16: B's values as bf16 (the codes' values times 4, as A's) */
        void *bw = malloc(nb * 2);
        amp_convert(bw, AMP_BF16, bf, AMP_F32, nb);
        snprintf(name, sizeof name, "gemm_e4m3_x_bf16_%s_%dx%dx%d_vs_ours_bf16", s->name, s->m, s->n, s->k);
        bench_line(name, gflops(s, time_call(ours_fp8_bf16, s, ah, bw, c, AMP_E4M3)), obf,
                   "GFLOP/s (e4m3 A, per-tensor scale_inv, times bf16 B, f32 out)");
        free(bw);
      }
      for (fp8_epi = 1; fp8_epi <= 3; fp8_epi++) {   /* the epilogues, against the bare product */
        static const char *const tag[4] = {"", "camax", "to_e4m3", "bf16_bias_gelu"};
        static const char *const what[4] = {"", "GFLOP/s (e4m3 in, f32 out and its amax, against f32 out alone)",
                                            "GFLOP/s (e4m3 in, e4m3 out and its amax, against f32 out alone)",
                                            "GFLOP/s (e4m3 in, bf16 out with bias and GELU, against f32 out alone)"};
        int j;
        for (j = 0; j < s->n && j < 4096; j++) fp8_bias[j] = 0.01f * (float)(j % 17) - 0.08f;
        snprintf(name, sizeof name, "gemm_e4m3_%s_%s_%dx%dx%d_vs_ours_e4m3", tag[fp8_epi], s->name, s->m, s->n, s->k);
        bench_line(name, gflops(s, time_call(ours_fp8_epi, s, ah, bh, c, AMP_E4M3)), o8, what[fp8_epi]);
      }
      /* x (m x k) in 1x128 tiles, W = the n x k matrix bf read as such, in 128 x 128 blocks */
      amp_quantize_blocks(amp_cpu(), AMP_BLOCK_1x128, AMP_E4M3, s->m, s->k, af, AMP_F32, s->k, ah, s->k, xs);
      amp_quantize_blocks(amp_cpu(), AMP_BLOCK_128x128, AMP_E4M3, s->n, s->k, bf, AMP_F32, s->k, bt, s->k, ws);
      fp8_xs = xs; fp8_ws = ws;
      o8b = gflops(s, time_call(ours_fp8_blocks, s, ah, bt, c, AMP_E4M3));
      snprintf(name, sizeof name, "gemm_e4m3_blocks_xWt_%dx%dx%d_vs_ours_e4m3", s->m, s->n, s->k);
      bench_line(name, o8b, o8, "GFLOP/s (1x128 x 128x128 block scales, y = x W^T, against per-tensor)");
      free(xs); free(ws); free(bt);
    }
    free(af); free(bf); free(c); free(ah); free(bh);
  }
  return 0;
}
