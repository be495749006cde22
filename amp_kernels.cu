// amp_kernels.cu - the CUDA part of amp.h.
//
// Build: nvcc -O3 -arch=sm_90 -c amp_kernels.cu, define AMP_CUDA in the translation unit that
// defines AMP_IMPLEMENTATION, link -lcudart -lcublasLt -lcublas. See the manual at the top of amp.h.
//
// amp.h's implementation calls the extern "C" amp__cu_* functions below. Each returns an amp_status
// and, on failure, writes a message naming the CUDA call, the error's name and file:line into the
// caller's buffer (amp.h's thread-local amp_last_error). The element math of every kernel is the
// AMP_HD functions of amp.h, the same code the CPU path runs.
#include "amp.h"
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>

// ------------------------------------------------------------------------------------------------
// Checked calls

// Formats the failure into msg and returns AMP_ERR_DEVICE.
static amp_status amp__cu_fail(char *msg, size_t cap, const char *call, const char *err, const char *file, int line) {
  if (msg && cap) snprintf(msg, cap, "%s failed: %s (%s:%d)", call, err, file, line);
  return AMP_ERR_DEVICE;
}
// CU_CHECK(call): on error, fills msg/cap (in scope) and returns AMP_ERR_DEVICE from the function.
#define CU_CHECK(call) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return amp__cu_fail(msg, cap, #call, cudaGetErrorName(e_), __FILE__, __LINE__); } while (0)
static const char *amp__cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
// LT_CHECK(call): the same for cuBLAS / cuBLASLt calls.
#define LT_CHECK(call) do { cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) return amp__cu_fail(msg, cap, #call, amp__cublas_status_name(s_), __FILE__, __LINE__); } while (0)

// ------------------------------------------------------------------------------------------------
// Devices

// Per-device state, owned by an amp_device opened with amp_cuda_open.
struct amp__cu_state {
  int ordinal;
  cudaStream_t stream;        // the user's stream (0 = the legacy default stream)
  int sm_major, sm_minor;
  cublasLtHandle_t lt;
  void *workspace;            // cuBLASLt workspace: 32 MiB on Hopper, 4 MiB elsewhere
  size_t workspace_size;
  void *gemm_cache;           // the matrix product's per-shape algorithm cache (amp_gemm)
};

extern "C" amp_status amp__cu_open(int ordinal, void *stream, void **state, char *msg, size_t cap) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (msg && cap)
      snprintf(msg, cap, "amp_cuda_open(ordinal %d): no CUDA device is present (cudaGetDeviceCount: %s)",
               ordinal, e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return AMP_ERR_UNSUPPORTED;
  }
  if (ordinal >= count) {
    if (msg && cap) snprintf(msg, cap, "amp_cuda_open: ordinal %d but only %d CUDA device(s) present", ordinal, count);
    return AMP_ERR_ARG;
  }
  CU_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp prop;
  CU_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  amp__cu_state *st = (amp__cu_state *)calloc(1, sizeof *st);
  if (!st) { if (msg && cap) snprintf(msg, cap, "amp_cuda_open: out of memory"); return AMP_ERR_NOMEM; }
  st->ordinal = ordinal;
  st->stream = (cudaStream_t)stream;
  st->sm_major = prop.major; st->sm_minor = prop.minor;
  st->workspace_size = prop.major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
  cublasStatus_t ls = cublasLtCreate(&st->lt);
  if (ls != CUBLAS_STATUS_SUCCESS) {
    free(st);
    return amp__cu_fail(msg, cap, "cublasLtCreate(&lt)", amp__cublas_status_name(ls), __FILE__, __LINE__);
  }
  e = cudaMalloc(&st->workspace, st->workspace_size);
  if (e != cudaSuccess) {
    cublasLtDestroy(st->lt); free(st);
    return amp__cu_fail(msg, cap, "cudaMalloc(workspace)", cudaGetErrorName(e), __FILE__, __LINE__);
  }
  *state = st;
  return AMP_OK;
}

extern "C" void amp__cu_close(void *state) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) return;
  cudaSetDevice(st->ordinal);
  cudaStreamSynchronize(st->stream);
  cudaFree(st->workspace);
  cublasLtDestroy(st->lt);
  free(st);
}

extern "C" amp_status amp__cu_sync(void *state, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}
