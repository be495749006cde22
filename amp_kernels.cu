// amp_kernels.cu - the CUDA part of amp.h: compile with nvcc, define AMP_CUDA in the unit that
// defines AMP_IMPLEMENTATION, link -lcudart -lcublasLt -lcublas. See the manual at the top of amp.h.
#include "amp.h"
#include <cuda_runtime.h>

// A first kernel so the build is exercised end to end: the same AMP_HD conversion as the CPU.
__global__ void amp__k_f32_to_f16(amp_f16 *dst, const float *src, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = amp_f32_to_f16(src[i]);
}
