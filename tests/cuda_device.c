/* The CUDA device: opens where a GPU is present; elsewhere amp_cuda_open says so and nothing crashes. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"

static amp_device *dev;

static void cuda_open_rejects_bad_arguments(void) {
  amp_device *d = (amp_device *)1;
  EXPECT(amp_cuda_open(NULL, 0, NULL) == AMP_ERR_ARG, "out NULL: got %s", amp_last_error());
  EXPECT(amp_cuda_open(&d, -1, NULL) == AMP_ERR_ARG, "ordinal -1: got %s", amp_last_error());
  EXPECT(amp_cuda_open(&d, 1 << 20, NULL) != AMP_OK, "ordinal 2^20 accepted");
}

static void cuda_device_syncs(void) {
  EXPECT(amp_device_is_cuda(dev), "amp_device_is_cuda of an opened device is 0");
  EXPECT(amp_device_sync(dev) == AMP_OK, "sync: %s", amp_last_error());
  EXPECT(amp_device_sync(amp_cpu()) == AMP_OK, "cpu sync: %s", amp_last_error());
}

int main(void) {
  amp_status st = amp_cuda_open(&dev, 0, NULL);
  char why[512];
  snprintf(why, sizeof why, "%s", amp_last_error());
  RUN(cuda_open_rejects_bad_arguments);
  if (st == AMP_ERR_UNSUPPORTED) {
    t_no_gpu("GPU tests of cuda_device", why);
    TEST_END();
  }
  if (st != AMP_OK) { printf("FAIL amp_cuda_open: %s\n", amp_last_error()); return 1; }
  RUN(cuda_device_syncs);
  amp_device_close(dev);
  TEST_END();
}
