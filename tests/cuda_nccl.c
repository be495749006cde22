/* NCCL adapters: the scaler hook and the gradient all-reduce, on the real NCCL path.
   Built only where nccl.h exists, with -DAMP_NCCL on both this file and amp_kernels.cu (link
   -lnccl). One GPU: a single-rank communicator (ncclCommInitAll on device 0), where every
   all-reduce must give back its input bit for bit. Two or more GPUs: one thread per GPU, the
   lockstep test (an inf on one rank only: every rank skips, the replicas stay identical).
   Without a GPU: the argument checks, then "skipped". Built without AMP_NCCL (no nccl.h): the
   entry points must say AMP_ERR_UNSUPPORTED and how to enable them, then "skipped". */
#define _POSIX_C_SOURCE 200112L   /* setenv */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <string.h>
#include <math.h>

#ifndef AMP_NCCL
static void nccl_entry_points_say_how_to_enable_them(void) {
  double buf[2] = {0, 0};
  amp_f16 g[4] = {0, 0, 0, 0};
  EXPECT(amp_nccl_allreduce_hook((void *)1, buf, 2, NULL) == AMP_ERR_UNSUPPORTED && strstr(amp_last_error(), "AMP_NCCL"),
         "hook without AMP_NCCL: \"%s\"", amp_last_error());
  EXPECT(amp_nccl_allreduce_grads(amp_cpu(), (void *)1, g, AMP_F16, 4, 1, 1) == AMP_ERR_UNSUPPORTED &&
         strstr(amp_last_error(), "-lnccl"), "grads without AMP_NCCL: \"%s\"", amp_last_error());
}
int main(void) {
  RUN(nccl_entry_points_say_how_to_enable_them);
  printf("skipped: NCCL tests (built without AMP_NCCL: nccl.h was not found)\n");
  TEST_END();
}
#else
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

static amp_device *dev;
static ncclComm_t comm1;
static cudaStream_t stream;

static void nccl_calls_reject_bad_arguments(void) {
  double buf[2] = {0, 0};
  amp_f16 g[4] = {0, 0, 0, 0};
  EXPECT(amp_nccl_allreduce_hook(NULL, buf, 2, NULL) == AMP_ERR_ARG, "hook with comm NULL: %s", amp_last_error());
  EXPECT(amp_nccl_allreduce_hook((void *)1, NULL, 2, NULL) == AMP_ERR_ARG, "hook with buf NULL: %s", amp_last_error());
  EXPECT(amp_nccl_allreduce_hook((void *)1, buf, 0, NULL) == AMP_ERR_ARG, "hook with n 0: %s", amp_last_error());
  EXPECT(amp_nccl_allreduce_grads(NULL, (void *)1, g, AMP_F16, 4, 1, 1) == AMP_ERR_ARG, "grads on NULL: %s", amp_last_error());
  EXPECT(amp_nccl_allreduce_grads(amp_cpu(), (void *)1, g, AMP_F16, 4, 1, 1) == AMP_ERR_ARG, "grads on the CPU: %s", amp_last_error());
  EXPECT(strstr(amp_last_error(), "amp_nccl_allreduce_grads") != NULL, "message \"%s\" does not name the function", amp_last_error());
}

/* Copies on the stream the work runs on, then waits. (A plain cudaMemcpy runs on the legacy stream,
   which is not ordered with a non-blocking stream: an upload could land after the work that reads
   it had started, a download before the work that writes it had finished.) */
static int h2d_on(cudaStream_t s, void *dst_dev, const void *src_host, size_t bytes) {
  return cudaMemcpyAsync(dst_dev, src_host, bytes, cudaMemcpyHostToDevice, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
}
static int d2h_on(cudaStream_t s, void *dst_host, const void *src_dev, size_t bytes) {
  return cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
}
static int d_roundtrip(void *dst_host, const void *src_dev, size_t bytes) { return d2h_on(stream, dst_host, src_dev, bytes); }

/* One rank: the hook's sum is the identity, on a device buffer (enqueued) and a host buffer. */
static void hook_sums_over_one_rank_on_device_and_host(void) {
  double in[2] = {1.0, 2.5}, out[2] = {0, 0}, host[2] = {0.0, 1e300};
  double *d = NULL;
  amp_status st;
  EXPECT(cudaMalloc((void **)&d, sizeof in) == cudaSuccess, "cudaMalloc");
  EXPECT(h2d_on(stream, d, in, sizeof in), "upload");
  st = amp_nccl_allreduce_hook(comm1, d, 2, stream);
  EXPECT(st == AMP_OK, "hook on a device buffer: %s", amp_last_error());
  EXPECT(d_roundtrip(out, d, sizeof out) && out[0] == 1.0 && out[1] == 2.5, "device: expected {1, 2.5}, got {%g, %g}", out[0], out[1]);
  st = amp_nccl_allreduce_hook(comm1, host, 2, NULL);
  EXPECT(st == AMP_OK && host[0] == 0.0 && host[1] == 1e300, "host buffer: status %d (%s), got {%g, %g}", (int)st,
         amp_last_error(), host[0], host[1]);
  cudaFree(d);
}

/* One rank: a device fp8 scaler reduced over a device scaler with the NCCL hook (n < 0: MAX) gives
   the scales of one that is not reduced (over one rank the MAX is the identity), NaN included. */
static void fp8_scaler_reduced_through_the_hook_matches_one_rank(void) {
  amp_scaler *sc = NULL;
  amp_fp8_scaler *a = NULL, *b = NULL;
  amp_fp8_config c;
  memset(&c, 0, sizeof c); c.history_len = 8;
  EXPECT(amp_scaler_create(&sc, dev, NULL) == AMP_OK && amp_fp8_scaler_create(&a, dev, &c, 3, NULL) == AMP_OK &&
             amp_fp8_scaler_create(&b, dev, &c, 3, NULL) == AMP_OK, "%s", amp_last_error());
  if (!sc || !a || !b) return;
  amp_scaler_set_allreduce(sc, amp_nccl_allreduce_hook, comm1);
  EXPECT(amp_fp8_scaler_reduce_over(a, sc) == AMP_OK, "%s", amp_last_error());
  for (int step = 0; step < 12; step++) {
    for (int i = 0; i < 3; i++) {
      float am = step == 5 && i == 1 ? NAN : (float)(step * 3 + i + 1);
      amp_fp8_scaler_record(a, (size_t)i, am); amp_fp8_scaler_record(b, (size_t)i, am);
    }
    EXPECT(amp_fp8_scaler_update(a) == AMP_OK && amp_fp8_scaler_update(b) == AMP_OK, "%s", amp_last_error());
    for (int i = 0; i < 3; i++) {
      float x = amp_fp8_scaler_get_scale(a, (size_t)i), y = amp_fp8_scaler_get_scale(b, (size_t)i);
      EXPECT(memcmp(&x, &y, 4) == 0, "step %d tensor %d: %g reduced, %g not", step, i, (double)x, (double)y);
    }
  }
  amp_fp8_scaler_destroy(a); amp_fp8_scaler_destroy(b); amp_scaler_destroy(sc);
}

/* One rank: sum and mean, in the grads' dtype and through fp32, give back every bit (NaN and inf
   included, NaN as some NaN); n crosses the fp32 path's 2^24-element chunk. */
static void grads_over_one_rank_come_back_unchanged(void) {
  static const amp_dtype types[3] = {AMP_F16, AMP_BF16, AMP_F32};
  size_t n = ((size_t)1 << 24) + 37, i;
  int ti, avg, f32;
  for (ti = 0; ti < 3; ti++) {
    size_t es = amp_dtype_size(types[ti]);
    unsigned char *h = (unsigned char *)malloc(n * es), *back = (unsigned char *)malloc(n * es);
    void *g = NULL;
    if (!h || !back || cudaMalloc(&g, n * es) != cudaSuccess) { EXPECT(0, "out of memory"); free(h); free(back); return; }
    for (i = 0; i < n * es; i++) h[i] = (unsigned char)(i * 2654435761u >> 13);
    if (es == 2) for (i = 0; i < n; i += 4099) ((uint16_t *)h)[i] = types[ti] == AMP_F16 ? 0x7c00 : 0x7f80;   /* some infs */
    for (avg = 0; avg < 2; avg++)
      for (f32 = 0; f32 < 2; f32++) {
        size_t bad = n, diffs = 0;
        amp_status st;
        if (!h2d_on(stream, g, h, n * es)) { EXPECT(0, "upload failed"); continue; }
        st = amp_nccl_allreduce_grads(dev, comm1, g, types[ti], n, avg, f32);
        EXPECT(st == AMP_OK, "%s avg %d f32 %d: %s", amp__dtype_name(types[ti]), avg, f32, amp_last_error());
        if (!d_roundtrip(back, g, n * es)) { EXPECT(0, "copy back failed"); continue; }
        for (i = 0; i < n; i++) {
          float a = es == 2 ? amp__load(h, types[ti], i) : ((float *)h)[i], b = es == 2 ? amp__load(back, types[ti], i) : ((float *)back)[i];
          if (memcmp(h + i * es, back + i * es, es) != 0 && !(a != a && b != b)) { if (bad == n) bad = i; diffs++; }
        }
        EXPECT(diffs == 0, "%s avg %d f32 %d: %zu of %zu elements changed over one rank, first at %zu",
               amp__dtype_name(types[ti]), avg, f32, diffs, n, bad);
      }
    cudaFree(g); free(h); free(back);
  }
}

/* One rank, a device scaler with the NCCL hook: a planted inf skips, a clean step updates, and the
   results equal a scaler without the hook. */
static void device_scaler_with_the_hook_matches_one_without(void) {
  enum { N = 1000 };
  amp_f16 hw[N], hg[N], w_a[N], w_b[N];
  void *w[2], *g[2];
  amp_scaler *sc[2] = {NULL, NULL};
  amp_optimizer *op[2] = {NULL, NULL};
  int k, s, i, skipped[2][4];
  for (i = 0; i < N; i++) { hw[i] = amp_f32_to_f16(0.001f * (float)(i % 17)); hg[i] = amp_f32_to_f16(0.25f * (float)(i % 5) - 0.5f); }
  for (k = 0; k < 2; k++) {
    amp_optim_config oc;
    memset(&oc, 0, sizeof oc);
    oc.kind = AMP_ADAMW; oc.max_grad_norm = 1.0f;
    cudaMalloc(&w[k], sizeof hw); cudaMalloc(&g[k], sizeof hg);
    EXPECT(h2d_on(stream, w[k], hw, sizeof hw), "upload");
    if (amp_scaler_create(&sc[k], dev, NULL) != AMP_OK || amp_optimizer_create(&op[k], dev, &oc) != AMP_OK ||
        amp_optimizer_add(op[k], AMP_F16, w[k], g[k], N) != AMP_OK) { EXPECT(0, "setup: %s", amp_last_error()); goto out; }
    if (k == 0) amp_scaler_set_allreduce(sc[k], amp_nccl_allreduce_hook, comm1);
    for (s = 0; s < 4; s++) {
      amp_f16 planted[N];
      memcpy(planted, hg, sizeof hg);
      if (s == 1) planted[N / 2] = 0x7c00;
      EXPECT(h2d_on(stream, g[k], planted, sizeof planted), "upload");
      EXPECT(amp_scaler_step(sc[k], op[k]) == AMP_OK && amp_scaler_update(sc[k]) == AMP_OK, "step %d: %s", s, amp_last_error());
      skipped[k][s] = amp_scaler_last_skipped(sc[k]);
    }
  }
  EXPECT(d2h_on(stream, w_a, w[0], sizeof w_a) && d2h_on(stream, w_b, w[1], sizeof w_b), "download");
  for (s = 0; s < 4; s++) EXPECT(skipped[0][s] == (s == 1) && skipped[1][s] == (s == 1), "step %d: skipped %d / %d, expected %d",
                                 s, skipped[0][s], skipped[1][s], s == 1);
  EXPECT(memcmp(w_a, w_b, sizeof w_a) == 0, "weights with the hook differ from weights without it over one rank");
  EXPECT(amp_scaler_get_scale(sc[0]) == amp_scaler_get_scale(sc[1]), "scale %g with the hook, %g without",
         (double)amp_scaler_get_scale(sc[0]), (double)amp_scaler_get_scale(sc[1]));
out:
  for (k = 0; k < 2; k++) { amp_optimizer_destroy(op[k]); amp_scaler_destroy(sc[k]); cudaFree(w[k]); cudaFree(g[k]); }
}

/* ---- two or more GPUs: one thread per GPU, lockstep ---- */
#define MAXG 8
#define LN 4096
#define LSTEPS 8
typedef struct lrank { int r; ncclComm_t comm; amp_f16 w_end[LN]; float scale; long skipped; int skip[LSTEPS]; int ok; char err[600]; } lrank;
static void *lock_main(void *arg) {
  lrank *L = (lrank *)arg;
  amp_device *d = NULL;
  amp_scaler *sc = NULL;
  amp_optimizer *op = NULL;
  cudaStream_t s = NULL;
  void *w = NULL, *g = NULL;
  amp_f16 h[LN];
  int i, step;
  L->ok = 0;
  cudaSetDevice(L->r);
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (amp_cuda_open(&d, L->r, s) != AMP_OK || amp_scaler_create(&sc, d, NULL) != AMP_OK ||
      amp_optimizer_create(&op, d, NULL) != AMP_OK || cudaMalloc(&w, sizeof h) != cudaSuccess || cudaMalloc(&g, sizeof h) != cudaSuccess) {
    snprintf(L->err, sizeof L->err, "setup: %s", amp_last_error()); goto out;
  }
  for (i = 0; i < LN; i++) h[i] = amp_f32_to_f16(0.01f * (float)(i % 31));
  if (!h2d_on(s, w, h, sizeof h)) { snprintf(L->err, sizeof L->err, "upload failed"); goto out; }
  if (amp_optimizer_add(op, AMP_F16, w, g, LN) != AMP_OK) { snprintf(L->err, sizeof L->err, "add: %s", amp_last_error()); goto out; }
  amp_scaler_set_allreduce(sc, amp_nccl_allreduce_hook, L->comm);
  for (step = 0; step < LSTEPS; step++) {
    float scale = amp_scaler_get_scale(sc);
    for (i = 0; i < LN; i++) h[i] = amp_f32_to_f16((0.001f * (float)((i * (L->r + 3) + step) % 97) - 0.05f) * scale);
    if (!h2d_on(s, g, h, sizeof h)) { snprintf(L->err, sizeof L->err, "upload failed"); goto out; }
    if (amp_nccl_allreduce_grads(d, L->comm, g, AMP_F16, LN, 1, 1) != AMP_OK) { snprintf(L->err, sizeof L->err, "grads: %s", amp_last_error()); goto out; }
    if (step == 3 && L->r == 1) { amp_f16 inf = 0x7c00; h2d_on(s, (amp_f16 *)g + 7, &inf, 2); }
    if (amp_scaler_step(sc, op) != AMP_OK || amp_scaler_update(sc) != AMP_OK) { snprintf(L->err, sizeof L->err, "step: %s", amp_last_error()); goto out; }
    L->skip[step] = amp_scaler_last_skipped(sc);
  }
  if (!d2h_on(s, L->w_end, w, sizeof L->w_end)) { snprintf(L->err, sizeof L->err, "download failed"); goto out; }
  L->scale = amp_scaler_get_scale(sc);
  L->skipped = amp_scaler_skipped_steps(sc);
  L->ok = 1;
out:
  amp_optimizer_destroy(op); amp_scaler_destroy(sc); cudaFree(w); cudaFree(g); amp_device_close(d); cudaStreamDestroy(s);
  return NULL;
}
static void ranks_on_several_gpus_skip_together(int ngpu) {
  ncclComm_t comms[MAXG];
  static lrank L[MAXG];
  pthread_t th[MAXG];
  int r, s;
  if (ngpu > MAXG) ngpu = MAXG;
  if (ncclCommInitAll(comms, ngpu, NULL) != ncclSuccess) { EXPECT(0, "ncclCommInitAll on %d GPUs failed", ngpu); return; }
  for (r = 0; r < ngpu; r++) { memset(&L[r], 0, sizeof L[r]); L[r].r = r; L[r].comm = comms[r]; pthread_create(&th[r], NULL, lock_main, &L[r]); }
  for (r = 0; r < ngpu; r++) pthread_join(th[r], NULL);
  for (r = 0; r < ngpu; r++) {
    EXPECT(L[r].ok, "rank %d: %s", r, L[r].err);
    if (!L[r].ok || !L[0].ok) continue;
    EXPECT(L[r].skip[3] == 1, "rank %d did not skip step 3 (inf planted on rank 1 only)", r);
    for (s = 0; s < LSTEPS; s++) EXPECT(L[r].skip[s] == L[0].skip[s], "step %d: rank %d skipped %d, rank 0 %d", s, r, L[r].skip[s], L[0].skip[s]);
    EXPECT(L[r].scale == L[0].scale && L[r].skipped == L[0].skipped, "rank %d: scale %g skipped %ld, rank 0: %g %ld", r,
           (double)L[r].scale, L[r].skipped, (double)L[0].scale, L[0].skipped);
    EXPECT(memcmp(L[r].w_end, L[0].w_end, sizeof L[0].w_end) == 0, "rank %d's weights differ from rank 0's", r);
  }
  for (r = 0; r < ngpu; r++) ncclCommDestroy(comms[r]);
}
static int n_gpus;
static void lockstep_across_gpus(void) { ranks_on_several_gpus_skip_together(n_gpus); }

/* An NCCL failure carries ncclGetErrorString: a host pointer as the grads, with NCCL_CHECK_POINTERS
   set before the communicator was made, is refused by NCCL as an invalid argument. Last, so a
   surprise here cannot spoil the tests above. */
static void nccl_errors_carry_ncclGetErrorString(void) {
  amp_f16 host[16];
  amp_status st;
  memset(host, 0, sizeof host);
  st = amp_nccl_allreduce_grads(dev, comm1, host, AMP_F16, 16, 0, 0);
  EXPECT(st == AMP_ERR_DEVICE && strstr(amp_last_error(), ncclGetErrorString(ncclInvalidArgument)) != NULL &&
         strstr(amp_last_error(), "ncclAllReduce") != NULL,
         "host pointer as grads: expected AMP_ERR_DEVICE naming ncclAllReduce and \"%s\", got %d: \"%s\"",
         ncclGetErrorString(ncclInvalidArgument), (int)st, amp_last_error());
}

int main(void) {
  amp_status st;
  char why[512];
  int dev0 = 0;
  setenv("NCCL_CHECK_POINTERS", "1", 1);
  RUN(nccl_calls_reject_bad_arguments);
  st = amp_cuda_open(&dev, 0, NULL);
  snprintf(why, sizeof why, "%s", amp_last_error());
  if (st == AMP_ERR_UNSUPPORTED) { t_no_gpu("GPU tests of cuda_nccl", why); TEST_END(); }
  if (st != AMP_OK) { printf("FAIL amp_cuda_open: %s\n", amp_last_error()); return 1; }
  amp_device_close(dev);
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess || amp_cuda_open(&dev, 0, stream) != AMP_OK ||
      ncclCommInitAll(&comm1, 1, &dev0) != ncclSuccess) {
    printf("FAIL setup: a single-rank NCCL communicator on GPU 0 (%s)\n", amp_last_error()); return 1;
  }
  RUN(hook_sums_over_one_rank_on_device_and_host);
  RUN(grads_over_one_rank_come_back_unchanged);
  RUN(device_scaler_with_the_hook_matches_one_without);
  RUN(fp8_scaler_reduced_through_the_hook_matches_one_rank);
  cudaGetDeviceCount(&n_gpus);
  if (n_gpus >= 2) RUN(lockstep_across_gpus);
  else printf("skipped: the lockstep test across GPUs needs 2 or more (%d here)\n", n_gpus);
  RUN(nccl_errors_carry_ncclGetErrorString);
  ncclCommDestroy(comm1);
  amp_device_close(dev);
  cudaStreamDestroy(stream);
  TEST_END();
}
#endif  /* AMP_NCCL */
