/* scratch: one amp_gemm per dtype/shape, for ncu to name the kernels */
#define AMP_IMPLEMENTATION
#include "amp.h"
extern int cudaMalloc(void **p, size_t bytes);
extern int cudaMemset(void *p, int v, size_t bytes);
extern int cudaDeviceSynchronize(void);
int main(void) {
  amp_device *dev; int s, t; static const int sz[] = {4096, 8192};
  if (amp_cuda_open(&dev, 0, NULL) != AMP_OK) { printf("%s\n", amp_last_error()); return 1; }
  for (t = 0; t < 2; t++) for (s = 0; s < 2; s++) {
    int n = sz[s]; amp_dtype ty = t ? AMP_BF16 : AMP_F16; void *A, *B, *C;
    cudaMalloc(&A, (size_t)n * n * 2); cudaMalloc(&B, (size_t)n * n * 2); cudaMalloc(&C, (size_t)n * n * 2);
    cudaMemset(A, 0, (size_t)n * n * 2); cudaMemset(B, 0, (size_t)n * n * 2);
    if (amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, n, n, n, 1.0f, A, ty, n, B, ty, n, 0.0f, C, ty, n, NULL) != AMP_OK) printf("%s\n", amp_last_error());
    cudaDeviceSynchronize();
    printf("done %s %d\n", t ? "bf16" : "f16", n);
  }
  return 0;
}
