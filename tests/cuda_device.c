/* The CUDA device: opens where a GPU is present; elsewhere amp_cuda_open says so and nothing crashes.
   What cudaGetDeviceCount's answer means is checked everywhere (a pure function); the device rule
   (every call runs on its object's device and gives the caller its own device back) where a GPU is. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <cuda_runtime_api.h>
#include <pthread.h>

static amp_device *dev;
static char msg[512];

/* amp_kernels.cu: the status amp_cuda_open gives for cudaGetDeviceCount's error, count and the
   driver/runtime versions (writes the message it would give into msg). */
extern amp_status amp__cu_count_status(int err, int count, int driver_version, int runtime_version, int ordinal,
                                       char *msg, size_t cap);

static void cuda_open_rejects_bad_arguments(void) {
  amp_device *d = (amp_device *)1;
  EXPECT(amp_cuda_open(NULL, 0, NULL) == AMP_ERR_ARG, "out NULL: got %s", amp_last_error());
  EXPECT(amp_cuda_open(&d, -1, NULL) == AMP_ERR_ARG, "ordinal -1: got %s", amp_last_error());
  EXPECT(amp_cuda_open(&d, 1 << 20, NULL) != AMP_OK, "ordinal 2^20 accepted");
}

/* Only "no device" is unsupported (the tests' "skipped"); a driver older than the runtime or any
   other error is AMP_ERR_DEVICE with the error's name, so a broken GPU machine fails its tests. */
static void device_count_errors_other_than_no_device_are_device_errors(void) {
  static const struct { int err, count, drv; amp_status want; const char *in_msg; } cases[] = {
    {cudaSuccess, 1, 13000, AMP_OK, ""},
    {cudaSuccess, 0, 13000, AMP_ERR_UNSUPPORTED, "0 devices"},
    {cudaErrorNoDevice, 0, 13000, AMP_ERR_UNSUPPORTED, "cudaErrorNoDevice"},
    {cudaErrorInsufficientDriver, 0, 0, AMP_ERR_UNSUPPORTED, "no CUDA driver installed"},
    {cudaErrorInsufficientDriver, 0, 12020, AMP_ERR_DEVICE, "12020"},
    {cudaErrorSystemDriverMismatch, 0, 13000, AMP_ERR_DEVICE, "cudaErrorSystemDriverMismatch"},
    {cudaErrorInitializationError, 0, 13000, AMP_ERR_DEVICE, "cudaErrorInitializationError"},
    {cudaErrorDevicesUnavailable, 0, 13000, AMP_ERR_DEVICE, "cudaErrorDevicesUnavailable"},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    amp_status s;
    msg[0] = 0;
    s = amp__cu_count_status(cases[i].err, cases[i].count, cases[i].drv, 13000, 3, msg, sizeof msg);
    EXPECT(s == cases[i].want && strstr(msg, cases[i].in_msg) != NULL && (s == AMP_OK || strstr(msg, "ordinal 3") != NULL),
           "error %d count %d driver %d: expected %s with \"%s\" in the message, got %s: \"%s\"", cases[i].err, cases[i].count,
           cases[i].drv, amp_status_string(cases[i].want), cases[i].in_msg, amp_status_string(s), msg);
  }
  /* this machine: amp_cuda_open says what the mapping says of this machine's answer */
  {
    int count = 0, drv = 0, rt = 0;
    amp_device *d = NULL;
    cudaError_t e = cudaGetDeviceCount(&count);
    amp_status want, got;
    cudaDriverGetVersion(&drv); cudaRuntimeGetVersion(&rt);
    want = amp__cu_count_status((int)e, count, drv, rt, 0, msg, sizeof msg);
    got = amp_cuda_open(&d, 0, NULL);
    EXPECT(got == want, "this machine: cudaGetDeviceCount %s (count %d, driver %d, runtime %d): amp_cuda_open gave %s (%s), "
           "the mapping %s", cudaGetErrorName(e), count, drv, rt, amp_status_string(got), amp_last_error(), amp_status_string(want));
    if (got == AMP_OK) amp_device_close(d);
  }
}

static void cuda_device_syncs(void) {
  EXPECT(amp_device_is_cuda(dev), "amp_device_is_cuda of an opened device is 0");
  EXPECT(amp_device_sync(dev) == AMP_OK, "sync: %s", amp_last_error());
  EXPECT(amp_device_sync(amp_cpu()) == AMP_OK, "cpu sync: %s", amp_last_error());
}

/* ---- the device rule: two devices on one ordinal, used from two threads ---------------------- */

enum { WN = 4096 };
typedef struct worker {
  amp_device *d;
  int set_device;         /* 1: the thread calls cudaSetDevice(0) first; 0: it never chooses a device */
  int before, after;      /* cudaGetDevice before the first and after the last amp.h call (-1: not asked) */
  int ok;
  char err[1024];
} worker;

/* On w->d: 3 SGD steps through a device scaler and optimizer, then a product, each result checked
   exactly (all values are small integers or halves, exact in f16 and f32). */
static void *worker_main(void *arg) {
  worker *w = (worker *)arg;
  amp_scaler *sc = NULL;
  amp_optimizer *op = NULL;
  amp_optim_config oc;
  amp_scaler_config scc;
  void *dw = NULL, *dg = NULL, *da = NULL, *dc = NULL;
  static const float host_a[4] = {1, 2, 3, 4};
  float hw[WN], hg[WN], c[4];
  int i, step;
  char m[400];
  w->ok = 0; w->before = w->after = -1;
  if (w->set_device) { cudaSetDevice(0); cudaGetDevice(&w->before); }
  memset(&oc, 0, sizeof oc); oc.kind = AMP_SGD; oc.lr = 0.5f;
  scc = amp_scaler_preset(AMP_PRESET_PYTORCH); scc.init_scale = 1.0f;
  for (i = 0; i < WN; i++) { hw[i] = (float)(i % 8); hg[i] = 1.0f; }
  if (amp__cu_malloc(w->d->cuda, &dw, sizeof hw, m, sizeof m) != AMP_OK || amp__cu_malloc(w->d->cuda, &dg, sizeof hg, m, sizeof m) != AMP_OK ||
      amp__cu_malloc(w->d->cuda, &da, sizeof host_a, m, sizeof m) != AMP_OK || amp__cu_malloc(w->d->cuda, &dc, sizeof c, m, sizeof m) != AMP_OK ||
      amp__cu_copy(w->d->cuda, dw, hw, sizeof hw, 0, m, sizeof m) != AMP_OK || amp__cu_copy(w->d->cuda, dg, hg, sizeof hg, 0, m, sizeof m) != AMP_OK ||
      amp__cu_copy(w->d->cuda, da, host_a, sizeof host_a, 0, m, sizeof m) != AMP_OK) {
    snprintf(w->err, sizeof w->err, "buffers: %s", m); goto out;
  }
  if (amp_scaler_create(&sc, w->d, &scc) != AMP_OK || amp_optimizer_create(&op, w->d, &oc) != AMP_OK ||
      amp_optimizer_add(op, AMP_F32, dw, dg, WN) != AMP_OK) { snprintf(w->err, sizeof w->err, "setup: %s", amp_last_error()); goto out; }
  for (step = 0; step < 3; step++)
    if (amp_scaler_step(sc, op) != AMP_OK || amp_scaler_update(sc) != AMP_OK) {
      snprintf(w->err, sizeof w->err, "step %d: %s", step, amp_last_error()); goto out;
    }
  /* C (2x2) = A A^T, row-major: {{5, 11}, {11, 25}} */
  if (amp_gemm(w->d, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 2, 2, 2, 1.0f, da, AMP_F32, 2, da, AMP_F32, 2, 0.0f, dc, AMP_F32, 2) != AMP_OK ||
      amp_device_sync(w->d) != AMP_OK) { snprintf(w->err, sizeof w->err, "gemm: %s", amp_last_error()); goto out; }
  if (amp__cu_copy(w->d->cuda, hw, dw, sizeof hw, 1, m, sizeof m) != AMP_OK || amp__cu_copy(w->d->cuda, c, dc, sizeof c, 1, m, sizeof m) != AMP_OK) {
    snprintf(w->err, sizeof w->err, "download: %s", m); goto out;
  }
  for (i = 0; i < WN; i++)
    if (hw[i] != (float)(i % 8) - 1.5f) { snprintf(w->err, sizeof w->err, "w[%d] = %g after 3 steps, want %g", i, (double)hw[i], (i % 8) - 1.5); goto out; }
  if (c[0] != 5 || c[1] != 11 || c[2] != 11 || c[3] != 25) {
    snprintf(w->err, sizeof w->err, "A A^T = {%g %g %g %g}, want {5 11 11 25}", (double)c[0], (double)c[1], (double)c[2], (double)c[3]); goto out;
  }
  w->ok = 1;
out:
  amp_optimizer_destroy(op); amp_scaler_destroy(sc);
  amp__cu_free(w->d->cuda, dw); amp__cu_free(w->d->cuda, dg); amp__cu_free(w->d->cuda, da); amp__cu_free(w->d->cuda, dc);
  cudaGetDevice(&w->after);
  return NULL;
}

/* Two amp_devices on the last GPU (ordinal 0 on a one-GPU machine), one with the legacy stream and
   one with a stream of its own, each used by a thread of its own: one thread has chosen device 0,
   the other never chose a device. Each thread's work is right, and each thread's current device
   (and the main thread's) is after the amp.h calls what it was before. With two or more GPUs this
   also shows the switch and the restore (the objects live on another device than the callers'). */
static void two_devices_on_one_ordinal_from_two_threads(void) {
  int count = 0, here = -1, after = -1, r;
  void *stream = NULL;
  amp_device *d[2] = {NULL, NULL};
  worker w[2];
  pthread_t th[2];
  cudaGetDeviceCount(&count);
  cudaSetDevice(0);
  cudaGetDevice(&here);
  if (amp__cu_stream_create(count - 1, &stream, msg, sizeof msg) != AMP_OK) { EXPECT(0, "stream: %s", msg); return; }
  if (amp_cuda_open(&d[0], count - 1, NULL) != AMP_OK || amp_cuda_open(&d[1], count - 1, stream) != AMP_OK) {
    EXPECT(0, "open on ordinal %d: %s", count - 1, amp_last_error()); amp_device_close(d[0]); amp__cu_stream_destroy(stream); return;
  }
  cudaGetDevice(&after);
  EXPECT(after == here, "the main thread's device was %d before amp_cuda_open(ordinal %d), %d after", here, count - 1, after);
  memset(w, 0, sizeof w);
  for (r = 0; r < 2; r++) { w[r].d = d[r]; w[r].set_device = r == 0; pthread_create(&th[r], NULL, worker_main, &w[r]); }
  for (r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (r = 0; r < 2; r++) EXPECT(w[r].ok, "thread %d (%s a device, device %s stream): %s", r, w[r].set_device ? "chose" : "never chose",
                                 r ? "its own" : "the legacy", w[r].err);
  EXPECT(w[0].after == w[0].before && w[0].before == 0, "the thread that chose device 0: device %d before, %d after", w[0].before, w[0].after);
  EXPECT(w[1].after == 0, "the thread that never chose a device: cudaGetDevice gives %d after the amp.h calls, want 0 (the default)", w[1].after);
  amp_device_close(d[0]); amp_device_close(d[1]);
  amp__cu_stream_destroy(stream);
  cudaGetDevice(&after);
  EXPECT(after == here, "the main thread's device was %d, %d after closing", here, after);
}

int main(void) {
  amp_status st = amp_cuda_open(&dev, 0, NULL);
  char why[512];
  snprintf(why, sizeof why, "%s", amp_last_error());
  RUN(cuda_open_rejects_bad_arguments);
  RUN(device_count_errors_other_than_no_device_are_device_errors);
  if (st == AMP_ERR_UNSUPPORTED) {
    t_no_gpu("GPU tests of cuda_device", why);
    TEST_END();
  }
  if (st != AMP_OK) { printf("FAIL amp_cuda_open: %s\n", amp_last_error()); return 1; }
  RUN(cuda_device_syncs);
  RUN(two_devices_on_one_ordinal_from_two_threads);
  amp_device_close(dev);
  TEST_END();
}
