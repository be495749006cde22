// amp_kernels.cu - the CUDA part of amp.h.
//
// Build: nvcc -O3 -arch=sm_90 -c amp_kernels.cu, define AMP_CUDA in the translation unit that
// defines AMP_IMPLEMENTATION, link -lcudart -lcublasLt -lcublas. See the manual at the top of amp.h.
//
// The extern "C" amp__cu_* functions below (declared in amp_kernels.h) are the CUDA device's side of
// amp.h's device line: amp.h's public functions check arguments and call order once, then call its
// CUDA operation table (amp__cuda_ops), each entry one call of a launcher here. Each returns an
// amp_status and, on failure, writes a message naming the CUDA call, the error's name and
// file:line into the caller's buffer (amp.h puts the public function's name before it). The
// element math of every kernel is the AMP_HD functions of amp.h, the same code the CPU path runs.
#include "amp.h"
#include "amp_kernels.h"
#include <cuda.h>            // CUcontext, CUresult: types only (the two driver calls are looked up at run time)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <new>
#include <type_traits>
#include <mutex>

// ------------------------------------------------------------------------------------------------
// Checked calls

// Formats the failure into msg and returns AMP_ERR_DEVICE.
static amp_status amp__cu_fail(char *msg, size_t cap, const char *call, const char *err, const char *file, int line) {
  if (msg && cap) snprintf(msg, cap, "%s failed: %s (%s:%d)", call, err, file, line);
  return AMP_ERR_DEVICE;
}
// AMP__CU_CHECK(call): on error, fills msg/cap (in scope) and returns AMP_ERR_DEVICE from the function.
#define AMP__CU_CHECK(call) do { cudaError_t e_ = (call); \
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
// AMP__LT_CHECK(call): the same for cuBLAS / cuBLASLt calls.
#define AMP__LT_CHECK(call) \
  do { \
    cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) \
      return amp__cu_fail(msg, cap, #call, amp__cublas_status_name(s_), __FILE__, __LINE__); \
  } while (0)

// ------------------------------------------------------------------------------------------------
// Devices

// Per-device state, owned by an amp_device opened with amp_cuda_open.
struct amp__cu_state {
  int ordinal;
  CUcontext ctx;              // the device's primary context: made current by every call (amp__cu_scope)
  cudaStream_t stream;        // the user's stream (0 = the legacy default stream)
  int sm_major, sm_minor;
  cublasLtHandle_t lt;
  void *workspace;            // cuBLASLt workspace: 32 MiB on Hopper, 4 MiB elsewhere
  size_t workspace_size;
  void *gemm_cache;           // the matrix product's per-shape algorithm cache (amp_gemm)
  std::mutex gemm_lock;       // guards gemm_cache and its descriptors: amp_gemm may be called from several threads
  int sm_count;               // streaming multiprocessors: sizes the grid-stride launches
};

// ---- The device of each call
//
// Every entry point that touches a device runs with that device's primary context current and
// then makes the caller's context current again (none, if the caller had none): a thread may use
// objects of several devices, or of a device it never selected, and its own cudaSetDevice choice
// is what it was after every amp.h call. This is done with the driver's cuCtxGetCurrent /
// cuCtxSetCurrent, looked up through the runtime (no -lcuda): unlike cudaSetDevice they can restore
// "no context" without creating one on device 0.
typedef CUresult (*amp__cu_ctx_get_fn)(CUcontext *);
typedef CUresult (*amp__cu_ctx_set_fn)(CUcontext);
struct amp__cu_driver { amp__cu_ctx_get_fn get; amp__cu_ctx_set_fn set; cudaError_t err; };
static const amp__cu_driver &amp__cu_drv(void) {
  static const amp__cu_driver d = [] {   // once per process (a C++11 static: thread-safe)
    amp__cu_driver r = {NULL, NULL, cudaSuccess};
    void *g = NULL, *s = NULL;
    cudaDriverEntryPointQueryResult qg = cudaDriverEntryPointSymbolNotFound, qs = cudaDriverEntryPointSymbolNotFound;
    r.err = cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &g, 4000, cudaEnableDefault, &qg);
    if (r.err == cudaSuccess)
      r.err = cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &s, 4000, cudaEnableDefault, &qs);
    if (r.err == cudaSuccess && (qg != cudaDriverEntryPointSuccess || qs != cudaDriverEntryPointSuccess || !g || !s))
      r.err = cudaErrorSymbolNotFound;
    if (r.err == cudaSuccess) { r.get = (amp__cu_ctx_get_fn)g; r.set = (amp__cu_ctx_set_fn)s; }
    return r;
  }();
  return d;
}
// The caller's context, saved at construction and made current again at destruction.
struct amp__cu_scope {
  CUcontext prev;
  int saved;
  amp__cu_scope() : prev(NULL), saved(0) {
    const amp__cu_driver &d = amp__cu_drv();
    saved = d.get && d.get(&prev) == CUDA_SUCCESS;
  }
  // Makes ctx current; 0 on success, else the CUresult (or -1: the driver calls were not found).
  int enter(CUcontext ctx) {
    if (!saved) return -1;
    return prev == ctx ? 0 : (int)amp__cu_drv().set(ctx);
  }
  ~amp__cu_scope() {
    CUcontext now = NULL;
    if (saved && amp__cu_drv().get(&now) == CUDA_SUCCESS && now != prev) amp__cu_drv().set(prev);
  }
  amp__cu_scope(const amp__cu_scope &) = delete;
  amp__cu_scope &operator=(const amp__cu_scope &) = delete;
};
static amp_status amp__cu_scope_fail(char *msg, size_t cap, int r, const char *file, int line) {
  char why[128];
  if (r < 0)
    snprintf(why, sizeof why, "cuCtxGetCurrent/cuCtxSetCurrent not found (%s)", cudaGetErrorName(amp__cu_drv().err));
  else snprintf(why, sizeof why, "CUresult %d", r);
  return amp__cu_fail(msg, cap, "cuCtxSetCurrent(the device's context)", why, file, line);
}
// AMP__CU_ON(st): the rest of the calling function runs on st's device (msg/cap in scope).
#define AMP__CU_ON(st) \
  amp__cu_scope on_device_; \
  do { \
    int r_ = on_device_.enter((st)->ctx); \
    if (r_) return amp__cu_scope_fail(msg, cap, r_, __FILE__, __LINE__); \
  } while (0)
// The same for functions that cannot report a failure (destroy, close, free).
#define AMP__CU_ON_VOID(st) amp__cu_scope on_device_; (void)on_device_.enter((st)->ctx)

// What cudaGetDeviceCount's answer means. Only "no device" (no driver installed at all, which the
// runtime reports as cudaErrorInsufficientDriver with driver version 0, or cudaErrorNoDevice, or a
// count of 0) is AMP_ERR_UNSUPPORTED, the "skipped" of the tests; any other error (a driver older
// than the runtime, a broken installation) is AMP_ERR_DEVICE with the error's name, so a test run
// on such a machine fails instead of reporting its GPU tests as skipped. A pure function of its
// inputs (the CUDA error as an int), tested on machines without a GPU by tests/cuda_device.c.
extern "C" amp_status amp__cu_count_status(int err, int count, int driver_version, int runtime_version, int ordinal,
                                           char *msg, size_t cap) {
  const cudaError_t e = (cudaError_t)err;
  if (e == cudaSuccess && count > 0) return AMP_OK;
  if (e == cudaSuccess || e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver && driver_version == 0)) {
    if (msg && cap)
      snprintf(msg, cap, "amp_cuda_open(ordinal %d): no CUDA device is present (cudaGetDeviceCount: %s%s)", ordinal,
               e == cudaSuccess ? "0 devices" : cudaGetErrorName(e),
               e == cudaErrorInsufficientDriver ? ", no CUDA driver installed" : "");
    return AMP_ERR_UNSUPPORTED;
  }
  if (msg && cap) {
    if (e == cudaErrorInsufficientDriver)
      snprintf(msg, cap,
               "amp_cuda_open(ordinal %d): cudaGetDeviceCount failed: %s: the CUDA driver (version %d) is older "
               "than the runtime amp_kernels.cu was built with (version %d); update the driver",
               ordinal, cudaGetErrorName(e), driver_version, runtime_version);
    else
      snprintf(msg, cap, "amp_cuda_open(ordinal %d): cudaGetDeviceCount failed: %s (%s)", ordinal, cudaGetErrorName(e),
               cudaGetErrorString(e));
  }
  return AMP_ERR_DEVICE;
}

extern "C" amp_status amp__cu_open(int ordinal, void *stream, void **state, char *msg, size_t cap) {
  int count = 0, drv = 0, rt = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) { cudaDriverGetVersion(&drv); cudaRuntimeGetVersion(&rt); cudaGetLastError(); }
  amp_status cs = amp__cu_count_status((int)e, count, drv, rt, ordinal, msg, cap);
  if (cs != AMP_OK) return cs;
  if (ordinal >= count) {
    if (msg && cap) snprintf(msg, cap, "amp_cuda_open: ordinal %d but only %d CUDA device(s) present", ordinal, count);
    return AMP_ERR_ARG;
  }
  amp__cu_scope caller;   // the caller's context comes back on return
  if (!caller.saved) return amp__cu_scope_fail(msg, cap, -1, __FILE__, __LINE__);
  AMP__CU_CHECK(cudaSetDevice(ordinal));   // creates the primary context and makes it current
  CUcontext ctx = NULL;
  CUresult cr = amp__cu_drv().get(&ctx);
  if (cr != CUDA_SUCCESS || !ctx)
    return amp__cu_scope_fail(msg, cap, cr != CUDA_SUCCESS ? (int)cr : -1, __FILE__, __LINE__);
  cudaDeviceProp prop;
  AMP__CU_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  amp__cu_state *st = new (std::nothrow) amp__cu_state();
  if (!st) { if (msg && cap) snprintf(msg, cap, "amp_cuda_open: out of memory"); return AMP_ERR_NOMEM; }
  st->ordinal = ordinal;
  st->ctx = ctx;
  st->stream = (cudaStream_t)stream;
  st->sm_major = prop.major; st->sm_minor = prop.minor;
  st->sm_count = prop.multiProcessorCount;
  st->workspace_size = prop.major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
  cublasStatus_t ls = cublasLtCreate(&st->lt);
  if (ls != CUBLAS_STATUS_SUCCESS) {
    delete st;
    return amp__cu_fail(msg, cap, "cublasLtCreate(&lt)", amp__cublas_status_name(ls), __FILE__, __LINE__);
  }
  e = cudaMalloc(&st->workspace, st->workspace_size);
  if (e != cudaSuccess) {
    cublasLtDestroy(st->lt); delete st;
    return amp__cu_fail(msg, cap, "cudaMalloc(workspace)", cudaGetErrorName(e), __FILE__, __LINE__);
  }
  *state = st;
  return AMP_OK;
}

static void amp__cu_gemm_cache_free(amp__cu_state *st);   // Matrix product, below

extern "C" void amp__cu_close(void *state) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) return;
  AMP__CU_ON_VOID(st);
  cudaStreamSynchronize(st->stream);
  amp__cu_gemm_cache_free(st);
  cudaFree(st->workspace);
  cublasLtDestroy(st->lt);
  delete st;
}

extern "C" amp_status amp__cu_sync(void *state, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) { if (msg && cap) snprintf(msg, cap, "amp__cu_sync: state is NULL"); return AMP_ERR_ARG; }
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}

// ------------------------------------------------------------------------------------------------
// ---- Scaler and optimizer kernels
//
// One training step on the device, with no host synchronisation and nothing a CUDA graph cannot
// capture (no allocation, no copy from host memory, no host read):
//
//   amp__cu_optim_unscale   1 launch: every grad read once (16-byte loads where aligned), multiplied
//                           by the device inv_scale, checked for inf/NaN, squared and summed in
//                           double into one partial per block; the last block to finish (threadfence +
//                           counter) adds the partials in a fixed order and decides norm, clip
//                           coefficient, inv_scale*clip and skip, and ORs an overflow into the
//                           scaler's flag. Data-parallel: the last block only writes this rank's
//                           {found_inf, sum of squares} (doubles) for the trainer's all-reduce, and
//                           amp__cu_optim_unscale_finish (1 thread) decides from the reduced pair.
//   amp__cu_optim_step      1 launch: the fused update of the optimizer's kind (one kernel per row
//                           of amp.h's kind list, AMP__OPTIM_KINDS) over the same chunk table;
//                           every block returns at once when this optimizer's unscale or any other
//                           unscale into the same scaler since its last rule found inf/NaN (the
//                           scaler's OR-ed flag: optimizers sharing a scaler skip together). It
//                           re-reads the low-precision grads and multiplies by inv_scale*clip, so
//                           unscaled fp32 grads are never materialised (2 B/param read twice beats
//                           4 B written and read once). Its last block may also run the scale rule.
//   amp__cu_scaler_update   1 launch (1 thread) when the scale rule is not folded into the step.
//
// So a step over any number of tensors is 2 launches (3 with a separate scale rule, which is what
// amp.h's public unscale/step/update do: the rule runs once per iteration, after every optimizer).
// Determinism: every block covers one fixed chunk, sums in a fixed order (warp shuffles, then the
// warps in order) and writes its partial to its own slot; the final sum runs in a fixed order too.
// No float atomics anywhere: the same grads give the same norm bits on every run.

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define AMP__CU_CHUNK 65536     // elements per chunk: one block each (a multiple of 8: chunks stay 16-byte aligned)
#define AMP__CU_THREADS 256

// The scaler's block in device memory.
struct amp__cu_scaler_dev {
  amp_scale_state st;     // scale, growth tracker, hysteresis count, at-floor flag
  amp_scale_params pr;    // the rule's parameters
  float inv_scale;        // amp__inv_scale(st.scale), what the unscale multiplies by
  int32_t found_inf;      // OR-ed by every unscale that saw inf/NaN; cleared by the scale rule
  int32_t last_skipped;
  int32_t pad_;
  long long skipped;
};
static_assert(sizeof(amp__cu_scaler_dev) % 8 == 0, "the block is copied whole");
static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "the stats counters are 64-bit atomics");

// AMP_MOMENTS_8BIT's two maps as the step kernel reads them: [0] the signed map of the first
// moments, [1] the unsigned one of the second; code: amp__q8_map's values, vt: amp__q8_vtable's
// table of its midpoints, for amp__q8_vcode (the midpoints themselves stay on the host).
struct amp__cu_q8map { float code[2][256]; uint32_t vt[2][AMP__Q8_VLUT]; };
#define AMP__CU_Q8_K 4          // AMP_MOMENTS_8BIT: 8-bit blocks a thread steps at once (amp__cu_step_op::q8)

// One tensor as the kernels see it; master/m/v point into the optimizer's slab (128-byte aligned).
struct amp__cu_tdev {
  const void *grad;
  void *model;
  float *master;          // NULL: AMP_MASTER_SPLIT (rem) or AMP_MASTER_NONE, the model copy is bf16
  void *m, *v;            // m: SGD momentum buffer or Adam's first moment; NULL when not kept; as the
                          // moment type keeps them (amp__moment_bytes: f32, bf16 words, 8-bit absmaxes + codes)
  uint16_t *rem;          // AMP_MASTER_SPLIT: the remainders beside the bf16 model copy (else NULL)
  long long n;
  int32_t dtype;          // the model copy's
  int32_t gdtype;         // the grads' (amp_optimizer_add_mixed: e.g. bf16 weights, f32 grads)
  int32_t vec;            // grad and model 16-byte aligned: the step's vector path
  int32_t gvec;           // grad 16-byte aligned: the unscale's vector path (it reads no model copy)
  int32_t group;          // param group: 0 takes lr_scale 1 and the config's weight_decay (amp__group_coefs)
  int32_t round_to;       // a float model copy's rounding (amp__store_model); AMP_F32 otherwise
  int32_t stochastic;     // 1: the bf16 model copy is written with stochastic rounding
  int32_t moments;        // AMP_MOMENTS_F32, _BF16 (stochastic too when stochastic is 1), _8BIT or _FP8
  const amp__cu_q8map *q8;  // AMP_MOMENTS_8BIT: the optimizer's maps (else NULL)
  uint32_t *f8amax;       // AMP_MOMENTS_FP8: the new m's and v's amax bits, gathered by the first launch
                          // and cleared by the step's last block (else NULL)
  float lr_scale, weight_decay;   // the group's (groups 1, 2, ...)
};
// A piece of at most AMP__CU_CHUNK elements of one tensor: one block of every multi-tensor launch.
struct amp__cu_chunk { long long start; int32_t tensor; int32_t len; };

// The optimizer's block in device memory.
struct amp__cu_optim_dev {
  amp_optim_config h;
  long long t;            // updates done
  long long skipped;
  float norm, clip, mul;  // the last unscale's results
  int32_t found_inf;      // OR-ed by this optimizer's unscale blocks; moved to skip by the last block
  int32_t skip;
  int32_t spike;          // the last unscale's spike decision (amp__spike_skip): the step skips, no back-off
  float scale;            // the loss scale the last unscale divided by (1 without a scaler; the overflow log line)
  long long spike_skips;  // steps skipped for a spike
  amp__spike_window win;  // the last clean steps' norms: pushed by the step kernel's last block, read by the decision
  long long passes;       // unscale decisions made (a replayed graph's too): the key of the host's overflow line
  long long n_tensors;    // the table's length (the step's last block walks it for AMP_MOMENTS_FP8)
  int32_t has_f8, pad_f8_; // a tensor keeps AMP_MOMENTS_FP8: the step runs its first launch, and the last block
                           // writes the new scale_invs
  unsigned int done_unscale, done_step;  // "last block" counters; each launch leaves them at 0
};

// The host handle of a device optimizer.
struct amp__cu_optim {
  amp__cu_optim_dev *dev;
  amp__cu_tdev *tensors;  // device copies of the table and the chunk list (uploaded once)
  amp__cu_chunk *chunks;
  double *partials;       // one sum of squares per chunk (double: finite grads near 1.8e19 square past FLT_MAX)
  double *reduce;         // data-parallel: this rank's {found_inf, sumsq}, all-reduced by the trainer
  amp__gstat *stats;      // amp_optim_config.stats: per-tensor gradient stats (NULL when off)
  float *slab;            // masters (`mtotal` floats: AMP_MASTER_F32 tensors only) | m | v (each `total` bytes)
  amp__cu_q8map *q8;      // the 8-bit moments' maps (NULL: no AMP_MOMENTS_8BIT tensor)
  uint32_t *f8amax;       // two amax slots per tensor (NULL: no AMP_MOMENTS_FP8 tensor)
  uint16_t *rem;          // the remainders of the AMP_MASTER_SPLIT tensors, `rtotal` of them
  size_t n_tensors, total, mtotal, rtotal;
  int n_chunks, kind, has_m, has_v, has_f8;
  int forms;              // bit f set where a tensor is stepped by the step kernel's form f (amp__cu_step_form)
  size_t *offset, *n;     // host: each tensor's byte offset in the moment regions and its length
  size_t *moffset, *roffset;  // host: its place among the masters / the remainders (SIZE_MAX: none)
  amp__cu_tdev *host;     // host: the table as uploaded (amp__cu_optim_set_grads rewrites a record)
};

static amp_status amp__cu_arg(char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (msg && cap) vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return AMP_ERR_ARG;
}
// A kernel launch is checked by asking for the launch error right after it.
#define AMP__CU_CHECK_LAUNCH(what) do { cudaError_t e_ = cudaGetLastError(); \
    if (e_ != cudaSuccess) return amp__cu_fail(msg, cap, what, cudaGetErrorName(e_), __FILE__, __LINE__); } while (0)

// A grid-stride launch's grid for n elements: enough blocks to fill the device, no more.
static int amp__cu_grid(const amp__cu_state *st, size_t n) {
  long long need = ((long long)n + AMP__CU_THREADS - 1) / AMP__CU_THREADS;
  long long most = (long long)(st->sm_count > 0 ? st->sm_count : 1) * 16;
  return (int)(need < most ? need : most);
}

// ---- the number formats: amp.h's AMP__DTYPES list, read here as templates and switches

// Bytes per element of format t (0: not a format), a compile-time constant for a constant t.
__host__ __device__ constexpr int amp__cu_dtype_bytes(int t) {
  switch (t) {
#define AMP__CU_BYTES_(A, E, N, CT, S, ...) case E: return S;
    AMP__DTYPES(AMP__CU_BYTES_, ~)
#undef AMP__CU_BYTES_
    default: return 0;
  }
}
static int amp__cu_dtype_ok(int32_t t) { return amp__cu_dtype_bytes(t) != 0; }
// The compute column (1: a type to compute in; 0: a storage format, fp8) and the fp8 column (-1: not
// fp8; else the fp8 encoders' e5m2 flag) of format t; -1 / 0 for a value that is no format.
__host__ __device__ constexpr int amp__cu_dtype_compute(int t) {
  switch (t) {
#define AMP__CU_CMP_(A, E, N, CT, S, MX, MN, CV, GV, CR, NT, CMP, F8, TOP) case E: return CMP;
    AMP__DTYPES(AMP__CU_CMP_, ~)
#undef AMP__CU_CMP_
    default: return 0;
  }
}
__host__ __device__ constexpr int amp__cu_dtype_fp8(int t) {
  switch (t) {
#define AMP__CU_F8_(A, E, N, CT, S, MX, MN, CV, GV, CR, NT, CMP, F8, TOP) case E: return F8;
    AMP__DTYPES(AMP__CU_F8_, ~)
#undef AMP__CU_F8_
    default: return -1;
  }
}
// Whether the kernels take the format's vector path (AMP__DTYPES's GPU column).
static int amp__cu_dtype_vec(int32_t t) {
  switch (t) {
#define AMP__CU_VEC_(A, E, N, CT, S, MX, MN, CV, GV, ...) case E: return GV;
    AMP__DTYPES(AMP__CU_VEC_, ~)
#undef AMP__CU_VEC_
    default: return 0;
  }
}
// f(std::integral_constant<int, E>()) for the format E of t: every dtype fan of the kernels and the
// launchers, the type a template argument in each case. An unknown t (refused before) calls nothing.
#pragma nv_exec_check_disable
template <class F> __host__ __device__ __forceinline__ void amp__cu_dtype_visit(int t, F &&f) {
  switch (t) {
#define AMP__CU_VISIT_(A, E, ...) case E: f(std::integral_constant<int, E>()); break;
    AMP__DTYPES(AMP__CU_VISIT_, ~)
#undef AMP__CU_VISIT_
    default: break;
  }
}

// ---- element access: N elements of dtype DT through 4-, 8- or 16-byte accesses

template <int DT> struct amp__cu_elem;   // T: the storage type of format DT
#define AMP__CU_ELEM_(A, E, N, CT, ...) template <> struct amp__cu_elem<E> { typedef CT T; };
AMP__DTYPES(AMP__CU_ELEM_, ~)
#undef AMP__CU_ELEM_
// B bytes from src to dst in the widest accesses (16, 8 or 4 bytes) that divide B; both aligned to it.
template <int B> __device__ __forceinline__ void amp__cu_copy_bytes(void *dst, const void *src) {
  static_assert(B % 4 == 0 && B <= 64, "a multiple of 4 bytes, at most 64");
  if constexpr (B % 16 == 0) {
#pragma unroll
    for (int k = 0; k < B / 16; k++) ((uint4 *)dst)[k] = ((const uint4 *)src)[k];
  } else if constexpr (B % 8 == 0) {
#pragma unroll
    for (int k = 0; k < B / 8; k++) ((uint2 *)dst)[k] = ((const uint2 *)src)[k];
  } else {
#pragma unroll
    for (int k = 0; k < B / 4; k++) ((uint32_t *)dst)[k] = ((const uint32_t *)src)[k];
  }
}

// One element of the grads as the unscale and the step read them: f16 through the hardware
// conversion (cvt.f32.f16: exact, so the same bits as amp.h's software decode for every finite
// value and for inf; only a NaN's payload may differ, and a NaN grad skips the step whatever its
// payload), bf16 and f32 as amp__load. The casts keep amp__load, which keeps NaN payloads.
template <int DT> __device__ __forceinline__ float amp__cu_ld_grad(const void *base, long long i) {
  if constexpr (DT == AMP_F16) return __half2float(__ushort_as_half(((const unsigned short *)base)[i]));
  else return amp__load(base, (amp_dtype)DT, (size_t)i);
}

// GRAD: decode as amp__cu_ld_grad (the grads of the unscale and the step); else as amp__load.
// N 1: one element, a plain access.
template <int DT, int N, bool GRAD = false>
__device__ __forceinline__ void amp__cu_ldv(const void *base, long long i, float *x) {
  typedef typename amp__cu_elem<DT>::T T;
  if constexpr (N == 1) {
    x[0] = GRAD ? amp__cu_ld_grad<DT>(base, i) : amp__load(base, (amp_dtype)DT, (size_t)i);
    return;
  } else {
  __align__(16) T e[N];
  amp__cu_copy_bytes<N * (int)sizeof(T)>(e, (const T *)base + i);
  if constexpr (GRAD && DT == AMP_F16) {
#pragma unroll
    for (int k = 0; k < N; k += 2) {   // two halves per conversion
      float2 f = __half22float2(__halves2half2(__ushort_as_half(e[k]), __ushort_as_half(e[k + 1])));
      x[k] = f.x; x[k + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; k++) x[k] = amp__load(e, (amp_dtype)DT, (size_t)k);
  }
  }
}
template <int DT, int N> __device__ __forceinline__ void amp__cu_stv(void *base, long long i, const float *x) {
  typedef typename amp__cu_elem<DT>::T T;
  if constexpr (N == 1) {
    amp__store(base, (amp_dtype)DT, (size_t)i, x[0]);
  } else {
  __align__(16) T e[N];
#pragma unroll
  for (int k = 0; k < N; k++) amp__store(e, (amp_dtype)DT, (size_t)k, x[k]);
  amp__cu_copy_bytes<N * (int)sizeof(T)>((T *)base + i, e);
  }
}

// ---- the multi-tensor walk (apex's multi_tensor_apply)
//
// Every multi-tensor launch has one block per chunk (amp__cu_chunk: at most AMP__CU_CHUNK elements of
// one tensor). Within its chunk a block calls op.elems<V>(i) for elements i .. i+V-1: V at a time
// (16-byte accesses) where the tensor's buffers are 16-byte aligned (vec), then one at a time for the
// rest. op is the per-element operation (the unscale's, the step's), written apart from the walk.
template <int V, typename Op> __device__ __forceinline__ void amp__cu_walk(Op &op, int len, int vec) {
  int i0 = 0;
  if (vec) {
    const int nv = len / V;
    for (int j = threadIdx.x; j < nv; j += blockDim.x) op.template elems<V>(j * V);
    i0 = nv * V;
  }
  for (int i = i0 + (int)threadIdx.x; i < len; i += blockDim.x) op.template elems<1>(i);
}

// The last-block protocol, written once. Every thread of every block calls it once its block's
// writes (a partial, a flag) are done; it returns 1 in the block that arrives last, to which every
// other block's writes are then visible, and 0 in the others. The counter *done is left at 0 for the
// next launch (and a graph replay).
__device__ __forceinline__ int amp__cu_last_block(unsigned int *done) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();                               // this block's writes visible before it counts itself
    last = atomicAdd(done, 1u) == gridDim.x - 1;
    if (last) *done = 0;                           // every other block has counted itself already
  }
  __syncthreads();
  if (last) __threadfence();                       // then read what the others wrote (past L1: __ldcg)
  return last;
}


// Sum over the block in a fixed order (shuffles within warps, then warps in index order). The
// result is valid in thread 0. Safe to call twice in a row (the first barrier guards the buffer).
template <typename F> __device__ F amp__cu_block_sum(F x) {
  __shared__ F warp_sums[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = x;
  __syncthreads();
  F t = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += warp_sums[w];
  return t;
}

// ---- per-step coefficients: amp__step_coefs (amp.h), the CPU's own function. Its host compilation
// by nvcc, for the test that compares it with the CPU build's bit for bit.
extern "C" void amp__cu_step_coefs(const amp_optim_config *h, int64_t t, int group, float lr_scale, float weight_decay,
                                   amp_step_coefs *c) {
  *c = amp__group_coefs(h, t, group, lr_scale, weight_decay);
}

// ---- the scale rule on the device (one thread)

// found > 0: an overflow whatever the flag says (amp_scaler_update_found_inf(s, 1)); otherwise the
// flag the unscales OR-ed, as the CPU's update() (found_inf = flag OR the caller's).
__device__ void amp__cu_scale_rule_dev(amp__cu_scaler_dev *sc, int found) {
  int f = atomicExch(&sc->found_inf, 0) != 0;    // read and clear for the next iteration
  if (found > 0) f = 1;
  amp__scale_rule(&sc->st, &sc->pr, f);
  if (!sc->pr.fixed) sc->inv_scale = amp__inv_scale(sc->st.scale);   // fixed: 1/init_scale, as set
  sc->last_skipped = f;
  sc->skipped += f;
}

__global__ void amp__cu_scale_rule_kernel(amp__cu_scaler_dev *sc, int found) { amp__cu_scale_rule_dev(sc, found); }

// The whole block (checkpoint load): by value, so nothing is read from host memory (capturable).
__global__ void amp__cu_scaler_load_kernel(amp__cu_scaler_dev *sc, amp__cu_scaler_dev v) { *sc = v; }

// ---- unscale + inf/NaN check + sum of squares, one block per chunk

// The unscale's per-element operation: each grad y = g * inv checked for inf/NaN and its square
// added, in double, to this thread's sum ss (|y| above 1.8e19 squares past FLT_MAX). STATS: each grad
// also into this thread's gradient stats a (amp__gstat_add, amp.h's own function).
template <int DT, bool STATS> struct amp__cu_unscale_op {
  const void *grad;   // the chunk's first grad
  float inv;
  double ss;
  int bad;
  amp__gstat a;
  template <int V> __device__ __forceinline__ void elems(int i) {
    float x[V];
    amp__cu_ldv<DT, V, true>(grad, i, x);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float y = x[k] * inv;
      bad |= !amp__finite(y); ss += (double)y * (double)y;
      if constexpr (STATS) amp__gstat_add(&a, x[k], y, (amp_dtype)DT);
    }
  }
};
// One chunk of grads of type DT: 8 halves or 4 floats (16 bytes) per access where aligned.
template <int DT, bool STATS>
__device__ __forceinline__ void amp__cu_unscale_chunk(const void *grad, int len, int vec, float inv, double &ss,
                                                      int &bad, amp__gstat &a) {
  amp__cu_unscale_op<DT, STATS> op = {grad, inv, ss, bad, a};
  amp__cu_walk<16 / (int)sizeof(typename amp__cu_elem<DT>::T)>(op, len, vec);
  ss = op.ss; bad = op.bad; a = op.a;
}

// The decision from {found_inf, sum of squares}: shared by the one-rank path (the last unscale block)
// and the data-parallel finish kernel, so one rank with an identity all-reduce gives the same bits.
__device__ __forceinline__ void amp__cu_unscale_decide(amp__cu_optim_dev *o, amp__cu_scaler_dev *sc, int found,
                                                       double s) {
  const float inv = sc ? sc->inv_scale : 1.0f;
  float norm = amp__norm_of(s);
  float clip = amp__clip_coef(norm, o->h.max_grad_norm);
  o->norm = norm; o->clip = clip; o->mul = inv * clip;
  o->scale = sc ? sc->st.scale : 1.0f;
  o->skip = found;
  o->spike = amp__spike_skip(norm, o->h.spike_norm, o->h.spike_zscore, &o->win, found);
  o->passes += 1;
  if (found && sc) atomicOr(&sc->found_inf, 1);
}

// red == NULL: decide in the last block. red != NULL (data-parallel): the last block writes
// red[0] = found_inf (0/1) and red[1] = the sum of squares, and neither the optimizer's decision
// nor the scaler's flag is touched, so a failing all-reduce hook leaves the state as it was.
__global__ void __launch_bounds__(AMP__CU_THREADS)
amp__cu_unscale_kernel(amp__cu_optim_dev *o, amp__cu_scaler_dev *sc, const amp__cu_tdev *tensors,
                       const amp__cu_chunk *chunks, double *partials, double *red, amp__gstat *stats) {
  const amp__cu_chunk ch = chunks[blockIdx.x];
  const amp__cu_tdev t = tensors[ch.tensor];
  const float inv = sc ? sc->inv_scale : 1.0f;   // a multiply by 1 changes no finite value
  double ss = 0.0;
  int bad = 0;
  amp__gstat a = {0u, 0u, 0ull, 0ull, 0ull};
  if (!stats) {   // stats off: the loop as it always was
    amp__cu_dtype_visit(t.gdtype, [&](auto gd) {
      const void *g = (const typename amp__cu_elem<gd.value>::T *)t.grad + ch.start;
      amp__cu_unscale_chunk<gd.value, false>(g, ch.len, t.gvec, inv, ss, bad, a);
    });
  } else {
    amp__cu_dtype_visit(t.gdtype, [&](auto gd) {
      const void *g = (const typename amp__cu_elem<gd.value>::T *)t.grad + ch.start;
      amp__cu_unscale_chunk<gd.value, true>(g, ch.len, t.gvec, inv, ss, bad, a);
    });
    // the block's stats in shared memory, then one set of integer atomics per block into the
    // tensor's counters (cleared on the stream before the launch); integer: the same on every run
    __shared__ unsigned long long cnt[3];
    __shared__ unsigned int amax;
    if (threadIdx.x == 0) { cnt[0] = cnt[1] = cnt[2] = 0ull; amax = 0u; }
    __syncthreads();
    if (a.nonfinite) atomicAdd(&cnt[0], (unsigned long long)a.nonfinite);
    if (a.zero) atomicAdd(&cnt[1], (unsigned long long)a.zero);
    if (a.subnormal) atomicAdd(&cnt[2], (unsigned long long)a.subnormal);
    if (a.amax_bits) atomicMax(&amax, (unsigned int)a.amax_bits);
    __syncthreads();
    if (threadIdx.x == 0) {
      amp__gstat *d = stats + ch.tensor;
      if (cnt[0]) atomicAdd((unsigned long long *)&d->nonfinite, cnt[0]);
      if (cnt[1]) atomicAdd((unsigned long long *)&d->zero, cnt[1]);
      if (cnt[2]) atomicAdd((unsigned long long *)&d->subnormal, cnt[2]);
      if (amax) atomicMax((unsigned int *)&d->amax_bits, amax);
    }
  }
  bad = __syncthreads_or(bad);
  double bsum = amp__cu_block_sum(ss);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = bsum;
    if (bad) atomicOr(&o->found_inf, 1);
  }
  if (!amp__cu_last_block(&o->done_unscale)) return;
  // The last block: every other block's partial is written. Read them past L1 (__ldcg), in order.
  double s = 0.0;
  for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x) s += __ldcg(&partials[i]);
  s = amp__cu_block_sum(s);
  if (threadIdx.x == 0) {
    int found = atomicExch(&o->found_inf, 0) != 0;
    if (red) { red[0] = found ? 1.0 : 0.0; red[1] = s; }
    else amp__cu_unscale_decide(o, sc, found, s);
  }
}

// Data-parallel second half: red holds the SUM over ranks of {found_inf, sumsq}. NaN in red[0]
// counts as an overflow, as on the CPU (!(x == 0)).
__global__ void amp__cu_unscale_finish_kernel(amp__cu_optim_dev *o, amp__cu_scaler_dev *sc, const double *red) {
  amp__cu_unscale_decide(o, sc, !(red[0] == 0.0), red[1]);
}

// ---- the fused update

// The update of one element, per kind: the row's AMP_HD element function in amp.h's kind list
// (AMP__OPTIM_KINDS), the code the CPU's plain loop runs. One specialisation per row.
template <int KIND> struct amp__cu_kind;
#define AMP__CU_KIND_UPDATE(k, name, nm, lr, b1, b2, coefs, elem, dev, vec) \
  template <> struct amp__cu_kind<k> { \
    static __device__ __forceinline__ void update(float &p, float &m, float &v, float g, const amp_step_coefs &c) { \
      elem(&p, &m, &v, g, &c); \
    } \
  };
AMP__OPTIM_KINDS(AMP__CU_KIND_UPDATE)
#undef AMP__CU_KIND_UPDATE

// The largest of each x[j] over the block (unsigned), valid in every thread: shuffles within warps,
// then the warps' results through shared memory. Every thread of the block calls it; safe to call
// again at once (the last barrier guards the buffer). amp__cu_block_max2: of a and of b.
template <int N> __device__ __forceinline__ void amp__cu_block_maxn(uint32_t (&x)[N]) {
  __shared__ uint32_t s_max[N][AMP__CU_THREADS / 32];
#pragma unroll
  for (int j = 0; j < N; j++) x[j] = __reduce_max_sync(0xffffffffu, x[j]);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int j = 0; j < N; j++) s_max[j][threadIdx.x >> 5] = x[j];
  }
  __syncthreads();
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
#pragma unroll
    for (int j = 0; j < N; j++) x[j] = s_max[j][w] > x[j] ? s_max[j][w] : x[j];
  }
  __syncthreads();
}
__device__ __forceinline__ void amp__cu_block_max2(uint32_t &a, uint32_t &b) {
  uint32_t x[2] = {a, b};
  amp__cu_block_maxn<2>(x);
  a = x[0]; b = x[1];
}

// The step's per-element operation on V elements at i .. i+V-1 of a chunk, top to bottom: read the
// grads (times inv_scale * clip), the master (or decode it from the bf16 copy: AMP_MASTER_SPLIT /
// _NONE) and the moments the kind keeps; update; write them back and the model copy (rounded to
// nearest, to round_to, stochastically, or split again), as amp__o_step / amp__o_step_lowmem do.
template <int KIND, int FORM, int GD, int WD> struct amp__cu_step_op {
  amp__cu_tdev t;
  long long start;    // the chunk's first element in its tensor
  float mul;
  amp_step_coefs c;
  uint64_t key;       // stochastic rounding's key (amp__sr_key) of this tensor and update
  uint64_t km, kv;    // bf16 moments rounded stochastically: the moment streams of key (amp__sr_key_moment)
  int msr;            // 1: bf16 moments rounded stochastically (the tensor's stochastic), 0: to nearest even
  float sm, sv;       // AMP_MOMENTS_FP8: the new m's and v's scales (amp__f8m_scale of the first launch's amaxes)
  // a bf16 moment array's new words: amp__moment_bf16 per element, the CPU's rule and element index
  template <int V> __device__ __forceinline__ void st_bf16(void *a, long long e, const float *x, uint64_t k) const {
    __align__(16) amp_bf16 w[V];
#pragma unroll
    for (int j = 0; j < V; j++) w[j] = amp__moment_bf16(x[j], msr, k, (uint64_t)(e + j));
    if constexpr (V == 1) ((amp_bf16 *)a)[e] = w[0];
    else amp__cu_copy_bytes<V * 2>((amp_bf16 *)a + e, w);
  }
  // the grads times mul's operand and the master (or decoded from the bf16 copy: SPLIT / NONE)
  template <int V> __device__ __forceinline__ void ld_gp(long long e, float *g, float *p) const {
    amp__cu_ldv<GD, V, true>(t.grad, e, g);
    if (t.master) amp__cu_ldv<AMP_F32, V>(t.master, e, p);
    else if constexpr (WD == AMP_BF16) {
#pragma unroll
      for (int k = 0; k < V; k++) p[k] = t.rem ? amp__split_decode(((amp_bf16 *)t.model)[e + k], t.rem[e + k])
                                               : amp_bf16_to_f32(((amp_bf16 *)t.model)[e + k]);
    }
  }
  // AMP_MOMENTS_FP8's moments: each code times its array's scale_inv (the old one, in front of the codes)
  template <int V> __device__ __forceinline__ void ld_f8(long long e, float *m, float *v) const {
    const float sim = t.m ? *(const float *)t.m : 0.0f, siv = t.v ? *(const float *)t.v : 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
      if (t.m) m[k] = amp__fmul(amp_e4m3_to_f32(((const uint8_t *)t.m)[4 + e + k]), sim);
      if (t.v) v[k] = amp__fmul(amp_e4m3_to_f32(((const uint8_t *)t.v)[4 + e + k]), siv);
    }
  }
  // the new master and model copy (rounded to nearest, to round_to, stochastically, or split again)
  template <int V> __device__ __forceinline__ void st_p(long long e, const float *p) const {
    typedef typename amp__cu_elem<WD>::T W;
    if (t.master) {
      amp__cu_stv<AMP_F32, V>(t.master, e, p);
      if (amp__model_rounds((amp_dtype)WD, (amp_dtype)t.round_to, t.stochastic)) {
#pragma unroll   // a float copy holding bf16/f16 values, or a bf16 copy rounded stochastically
        for (int k = 0; k < V; k++)
          amp__store_model((W *)t.model, (amp_dtype)WD, (amp_dtype)t.round_to, t.stochastic, key, (size_t)(e + k),
                           p[k]);
      } else {
        amp__cu_stv<WD, V>(t.model, e, p);
      }
    } else if constexpr (WD == AMP_BF16) {
#pragma unroll   // split again (exact), or rounded stochastically into the copy (NONE)
      for (int k = 0; k < V; k++) {
        if (t.rem) amp__split_encode(p[k], &((amp_bf16 *)t.model)[e + k], &t.rem[e + k]);
        else amp__store_model(t.model, AMP_BF16, AMP_F32, 1, key, (size_t)(e + k), p[k]);
      }
    }
  }
  template <int V> __device__ __forceinline__ void elems(int i) {
    const long long e = start + i;
    float g[V], p[V] = {}, m[V] = {}, v[V] = {};
    ld_gp<V>(e, g, p);
    if constexpr (FORM == 1) {   // f32 moments
      if (t.m) amp__cu_ldv<AMP_F32, V>(t.m, e, m);
      if (t.v) amp__cu_ldv<AMP_F32, V>(t.v, e, v);
    } else if (t.moments == AMP_MOMENTS_BF16) {   // widened exactly
      if (t.m) amp__cu_ldv<AMP_BF16, V>(t.m, e, m);
      if (t.v) amp__cu_ldv<AMP_BF16, V>(t.v, e, v);
    } else {
      ld_f8<V>(e, m, v);
    }
#pragma unroll
    for (int k = 0; k < V; k++) amp__cu_kind<KIND>::update(p[k], m[k], v[k], g[k] * mul, c);
    if constexpr (FORM == 1) {
      if (t.m) amp__cu_stv<AMP_F32, V>(t.m, e, m);
      if (t.v) amp__cu_stv<AMP_F32, V>(t.v, e, v);
    } else if (t.moments == AMP_MOMENTS_BF16) {
      if (t.m) st_bf16<V>(t.m, e, m, km);
      if (t.v) st_bf16<V>(t.v, e, v, kv);
    } else {   // AMP_MOMENTS_FP8, amp_quantize's cast: x * scale, saturating
#pragma unroll
      for (int k = 0; k < V; k++) {
        if (t.m) ((uint8_t *)t.m)[4 + e + k] = amp_f32_to_e4m3(amp__fmul(m[k], sm), 1);
        if (t.v) ((uint8_t *)t.v)[4 + e + k] = amp_f32_to_e4m3(amp__fmul(v[k], sv), 1);
      }
    }
    st_p<V>(e, p);
  }
  // AMP_MOMENTS_8BIT: the chunk AMP__CU_Q8_K blocks of AMP__Q8_BLOCK elements at a time, thread i
  // taking element i of each (a chunk starts on a block: AMP__CU_CHUNK is a multiple of them), as
  // the CPU's amp__o_step_q with amp__q_load / amp__q_store: each moment read as code[c] * its
  // block's absmax, the update, the master and model copy written as elems writes them; then each
  // block's new absmax, from the unsigned maximum of the new moments' |bits| over its threads
  // (amp__q8_absmax: a NaN above inf), and each new code (amp__q8_vcode of amp__q8_unit: the
  // bisection's count from one table read). Every thread runs every block; the K blocks' maxima
  // cross the block through shared memory together, and each block's old absmax is read before
  // it is written (the first barrier). K blocks at once: K independent loads and updates in flight
  // in each thread where one block's would wait on memory alone.
  __device__ __forceinline__ void q8(int len) {
    constexpr int K = AMP__CU_Q8_K;
    static_assert(AMP__CU_THREADS == AMP__Q8_BLOCK, "one thread per element of an 8-bit block");
    static_assert(AMP__CU_CHUNK % (K * AMP__Q8_BLOCK) == 0, "every chunk starts on an 8-bit block");
    const long long nb = (t.n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK;
    float *am_m = (float *)t.m, *am_v = (float *)t.v;
    uint8_t *cm = t.m ? (uint8_t *)t.m + 4 * nb : NULL, *cv = t.v ? (uint8_t *)t.v + 4 * nb : NULL;
    for (int b = 0; b < len; b += K * AMP__Q8_BLOCK) {
      float m[K], v[K];
      uint32_t um[2 * K];   // |m| bits of the K blocks, then |v| bits
#pragma unroll
      for (int j = 0; j < K; j++) {
        const int i = b + j * AMP__Q8_BLOCK + (int)threadIdx.x;
        const long long e = start + i, blk = (start + b) / AMP__Q8_BLOCK + j;
        float g = 0.0f, p = 0.0f;
        m[j] = 0.0f; v[j] = 0.0f;
        if (i < len) {
          ld_gp<1>(e, &g, &p);
          if (t.m) m[j] = amp__fmul(t.q8->code[0][cm[e]], am_m[blk]);
          if (t.v) v[j] = amp__fmul(t.q8->code[1][cv[e]], am_v[blk]);
          amp__cu_kind<KIND>::update(p, m[j], v[j], g * mul, c);
          st_p<1>(e, &p);
        }
        um[j] = i < len ? amp__f32_bits(m[j]) & 0x7fffffffu : 0u;
        um[K + j] = i < len ? amp__f32_bits(v[j]) & 0x7fffffffu : 0u;
      }
      amp__cu_block_maxn<2 * K>(um);   // its barrier: every thread has read the blocks' old absmaxes
#pragma unroll
      for (int j = 0; j < K; j++) {
        const int i = b + j * AMP__Q8_BLOCK + (int)threadIdx.x;   // thread 0: i < len where block j exists
        const long long e = start + i, blk = (start + b) / AMP__Q8_BLOCK + j;
        const float amm = amp__q8_absmax(amp__bits_f32(um[j])), amv = amp__q8_absmax(amp__bits_f32(um[K + j]));
        if (i < len && t.m) cm[e] = amp__q8_vcode(t.q8->vt[0], amp__q8_unit(m[j], amm));
        if (i < len && t.v) cv[e] = amp__q8_vcode(t.q8->vt[1], amp__q8_unit(v[j], amv));
        if (threadIdx.x == 0 && i < len) {
          if (t.m) am_m[blk] = amm;
          if (t.v) am_v[blk] = amv;
        }
      }
    }
  }
  // AMP_MOMENTS_FP8's first launch (amp.h's amp__o_step_q: its first pass): the chunk's new moments,
  // computed as elems computes them and stored nowhere, only for their amax: the unsigned maximum
  // of their |bits| (a NaN above inf) joined into the tensor's two slots by atomicMax.
  __device__ __forceinline__ void f8_amax(int len) {
    uint32_t um = 0u, uv = 0u;
    for (int i = (int)threadIdx.x; i < len; i += blockDim.x) {
      const long long e = start + i;
      float g, p = 0.0f, m = 0.0f, v = 0.0f;
      ld_gp<1>(e, &g, &p);
      ld_f8<1>(e, &m, &v);
      amp__cu_kind<KIND>::update(p, m, v, g * mul, c);
      const uint32_t bm = amp__f32_bits(m) & 0x7fffffffu, bv = amp__f32_bits(v) & 0x7fffffffu;
      um = bm > um ? bm : um;
      uv = bv > uv ? bv : uv;
    }
    amp__cu_block_max2(um, uv);
    if (threadIdx.x == 0) {
      if (t.m) atomicMax(&t.f8amax[0], um);
      if (t.v) atomicMax(&t.f8amax[1], uv);
    }
  }
};
// One chunk of a tensor stepped by form FORM (amp__cu_step_form): forms 1 and 2 4 elements per
// access where grad and model copy are 16-byte aligned (16 bytes of master and fp32 moments, 8 of
// bf16 moments, 8 or 16 of grad and model copy), one at a time otherwise; form 3 by 8-bit blocks.
// amax_pass: AMP_MOMENTS_FP8's first launch (f8_amax, form 2), else the step.
template <int KIND, int FORM, int GD, int WD>
__device__ __forceinline__ void amp__cu_step_chunk(const amp__cu_tdev &t, long long start, int len, float mul,
                                                   const amp_step_coefs &c, uint64_t key, int amax_pass) {
  // the CPU's amp__o_step_q: only bf16 is stochastic
  const int msr = FORM == 2 && t.moments == AMP_MOMENTS_BF16 && t.stochastic;
  // (the first launch reads no scale: its blocks are still raising the slots the scales come from)
  const int f8 = FORM == 2 && t.moments == AMP_MOMENTS_FP8 && !amax_pass;
  amp__cu_step_op<KIND, FORM, GD, WD> op = {t, start, mul, c, key, msr ? amp__sr_key_moment(key, 1) : 0u,
                                            msr ? amp__sr_key_moment(key, 2) : 0u, msr,
                                            f8 ? amp__f8m_scale(amp__bits_f32(t.f8amax[0])) : 1.0f,
                                            f8 ? amp__f8m_scale(amp__bits_f32(t.f8amax[1])) : 1.0f};
  if constexpr (FORM == 3) op.q8(len);   // per block of codes, with its absmax
  else if (FORM == 2 && amax_pass) op.f8_amax(len);
  else amp__cu_walk<4>(op, len, t.vec);
}
template <int KIND, int FORM, int GD>
__device__ __forceinline__ void amp__cu_step_chunk_w(const amp__cu_tdev &t, long long start, int len, float mul,
                                                     const amp_step_coefs &c, uint64_t key, int amax_pass) {
  amp__cu_dtype_visit(t.dtype, [&](auto wd) {
    amp__cu_step_chunk<KIND, FORM, GD, wd.value>(t, start, len, mul, c, key, amax_pass);
  });
}
// The form of the step kernel that steps tensor t (the moment list's CUDA column; no moments kept:
// form 1, which then reads and writes none).
__host__ __device__ inline int amp__cu_step_form(const amp__cu_tdev &t) {
  return t.m || t.v ? amp__moments_on_cuda(t.moments) : 1;
}
// AMP_MOMENTS_FP8, in the step's last block (every block has read the old scale_invs and the slots):
// each array's new scale_inv, 1 / its scale (amp.h's amp__f8m_set), where the step ran, and every
// slot cleared for the next step's first launch.
__device__ void amp__cu_f8_finish(const amp__cu_optim_dev *o, const amp__cu_tdev *tensors, int stepped) {
  for (long long i = threadIdx.x; i < o->n_tensors; i += blockDim.x) {   // the block's threads share the table
    const amp__cu_tdev &t = tensors[i];
    if (t.moments != AMP_MOMENTS_FP8) continue;
    for (int j = 0; j < 2; j++) {
      void *a = j ? t.v : t.m;
      if (!a) continue;
      if (stepped) *(float *)a = amp__fdiv(1.0f, amp__f8m_scale(amp__bits_f32(__ldcg(&t.f8amax[j]))));
      t.f8amax[j] = 0u;
    }
  }
}

// sc: the scaler whose OR-ed flag also skips the step (NULL: only this optimizer's own unscale
// decides). rule != 0: the last block runs the scale rule after every block has read the flag.
// Each form FORM steps the chunks of its own tensors (amp__cu_step_form); the launch of every form
// the tensors need but the last has last 0: its blocks only step (the flags they read are changed
// by no one before the last launch). The last launch's blocks (every chunk's) count themselves
// done, and its last block moves the counts, runs the rule and writes the fp8 scale_invs.
// amax_pass 1: AMP_MOMENTS_FP8's first launch (form 2, last 0): the fp8 tensors' chunks gather
// their new moments' amaxes (the other blocks return at once), nothing is written.
template <int KIND, int FORM> __global__ void __launch_bounds__(AMP__CU_THREADS)
amp__cu_step_kernel(amp__cu_optim_dev *o, amp__cu_scaler_dev *sc, int rule, const amp__cu_tdev *tensors,
                    const amp__cu_chunk *chunks, int amax_pass, int last) {
  const int mine = amp__cu_step_form(tensors[chunks[blockIdx.x].tensor]) == FORM &&
                   (!amax_pass || tensors[chunks[blockIdx.x].tensor].moments == AMP_MOMENTS_FP8);
  if (!mine && !last) return;
  __shared__ amp_step_coefs s_c;
  __shared__ uint64_t s_key;
  __shared__ float s_mul;
  __shared__ int s_skip, s_spike;
  if (threadIdx.x == 0) {
    // Every block reads t and the flags before it counts itself done (amp__cu_last_block), and only
    // the last block writes t + 1 or clears the scaler's flag, so no block can see either change.
    // Each block computes the coefficients itself (a few hundred cycles) rather than waiting for
    // one block to publish them: those of its tensor's param group, the lr from the device config
    // (so a graph replay follows set_lr), the group's lr_scale and weight decay from the table.
    s_skip = o->skip || (sc && *(volatile int32_t *)&sc->found_inf);
    s_spike = !s_skip && o->spike;   // a spike: skipped too, counted apart, the scale rule not told
    if (!s_skip && !s_spike) {
      const int ti = chunks[blockIdx.x].tensor;
      const amp__cu_tdev *td = &tensors[ti];
      s_c = amp__group_coefs(&o->h, o->t + 1, td->group, td->lr_scale, td->weight_decay);
      s_key = td->stochastic ? amp__sr_key(o->h.seed, o->t + 1, (uint64_t)ti) : 0u;   // the CPU's key, amp__o_sr_key
      s_mul = o->mul;
    }
  }
  __syncthreads();
  const int skip = s_skip, spike = s_spike;
  if (mine && !skip && !spike) {   // overflow or spike: weights, master, moments and t stay bit-identical
    const amp__cu_chunk ch = chunks[blockIdx.x];
    const amp__cu_tdev t = tensors[ch.tensor];
    const amp_step_coefs c = s_c;
    const uint64_t key = s_key;
    const float mul = s_mul;
    amp__cu_dtype_visit(t.gdtype, [&](auto gd) {
      amp__cu_step_chunk_w<KIND, FORM, gd.value>(t, ch.start, ch.len, mul, c, key, amax_pass);
    });
  }
  if (!last) return;
  if (!amp__cu_last_block(&o->done_step)) return;
  if (o->has_f8) amp__cu_f8_finish(o, tensors, !skip && !spike);   // every thread of the last block
  if (threadIdx.x == 0) {
    if (skip) o->skipped += 1;
    else if (spike) o->spike_skips += 1;
    else { o->t += 1; amp__spike_window_push(&o->win, o->norm); }   // a clean step: its norm into the window
    if (rule && sc) amp__cu_scale_rule_dev(sc, -1);
  }
}

// The launches of kind KIND's step kernel; DEVICE 0 (a row whose update is a host function,
// AMP_CUSTOM): no kernel, refused. forms: bit f set where a tensor is stepped by form f; f8: a
// tensor keeps AMP_MOMENTS_FP8, so the first launch runs before the step's. One launch per form
// present, 3 then 2 then 1, the last with last 1 (no forms: form 1's, which still counts the step).
template <int KIND, int DEVICE> struct amp__cu_step_launch {
  static int go(int grid, cudaStream_t s, amp__cu_optim_dev *o, amp__cu_scaler_dev *sc, int rule, const amp__cu_tdev *t,
                const amp__cu_chunk *ch, int forms, int f8) {
    const int low = forms & 2 ? 1 : forms & 4 ? 2 : forms & 8 ? 3 : 1;   // the last launch's form
    if (f8) amp__cu_step_kernel<KIND, 2><<<grid, AMP__CU_THREADS, 0, s>>>(o, sc, rule, t, ch, 1, 0);
    if (forms & 8) amp__cu_step_kernel<KIND, 3><<<grid, AMP__CU_THREADS, 0, s>>>(o, sc, rule, t, ch, 0, low == 3);
    if (forms & 4) amp__cu_step_kernel<KIND, 2><<<grid, AMP__CU_THREADS, 0, s>>>(o, sc, rule, t, ch, 0, low == 2);
    if (low == 1) amp__cu_step_kernel<KIND, 1><<<grid, AMP__CU_THREADS, 0, s>>>(o, sc, rule, t, ch, 0, 1);
    return 1;
  }
};
template <int KIND> struct amp__cu_step_launch<KIND, 0> {
  static int go(int, cudaStream_t, amp__cu_optim_dev *, amp__cu_scaler_dev *, int, const amp__cu_tdev *,
                const amp__cu_chunk *, int, int) {
    return 0;
  }
};

__global__ void amp__cu_set_hparams_kernel(amp__cu_optim_dev *o, amp_optim_config h) { o->h = h; }
// A checkpoint load: the step count, and no decision from before the load (the last unscale's
// overflow and spike flags cleared, as the host's load clears its mirror: a later read must not
// report or log an overflow the loaded run never had).
__global__ void amp__cu_set_step_kernel(amp__cu_optim_dev *o, long long t) {
  o->t = t; o->found_inf = 0; o->skip = 0; o->spike = 0;
}
__global__ void amp__cu_set_spike_kernel(amp__cu_optim_dev *o, long long skips, amp__spike_window w) {
  o->spike_skips = skips; o->win = w;
}

// ---- casts (and the in-place multiply by the scale): grid-stride, V elements per access
//
// V is 8, or 4 when the cast widens (16-bit to f32): then each thread loads 8 bytes and stores 16, so
// a warp's store covers 512 contiguous bytes. With 8 (16 bytes in, two 16-byte stores out) each
// store instruction writes every other half of the warp's 32-byte sectors.

__host__ __device__ constexpr int amp__cu_cast_width(int sd, int dd) {
  return amp__cu_dtype_bytes(dd) > amp__cu_dtype_bytes(sd) ? 4 : 8;   // widening: 4
}

template <int SD, int DD> __global__ void __launch_bounds__(AMP__CU_THREADS)
amp__cu_cast_kernel(void *dst, const void *src, long long n, const float *mul, int vec) {
  constexpr int V = amp__cu_cast_width(SD, DD);
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const float k = mul ? *mul : 1.0f;
  long long i0 = 0;
  if (vec) {
    long long nv = n / V;
    for (long long j = tid; j < nv; j += stride) {
      float x[V];
      amp__cu_ldv<SD, V>(src, j * V, x);
      if (mul) {   // a multiply would quieten NaN payloads, so only when asked
#pragma unroll
        for (int e = 0; e < V; e++) x[e] *= k;
      }
      amp__cu_stv<DD, V>(dst, j * V, x);
    }
    i0 = nv * V;
  }
  for (long long i = i0 + tid; i < n; i += stride) {
    float x = amp__load(src, (amp_dtype)SD, (size_t)i);
    amp__store(dst, (amp_dtype)DD, (size_t)i, mul ? x * k : x);
  }
}

static void amp__cu_cast_launch(amp__cu_state *st, void *dst, int dd, const void *src, int sd, size_t n,
                                const float *mul) {
  const long long v = amp__cu_cast_width(sd, dd);
  long long need = ((long long)n + v * AMP__CU_THREADS - 1) / (v * AMP__CU_THREADS);
  long long most = (long long)(st->sm_count > 0 ? st->sm_count : 1) * 16;   // enough in flight to fill HBM
  int grid = (int)(need < most ? (need > 0 ? need : 1) : most);
  int vec = ((uintptr_t)dst % 16 == 0) && ((uintptr_t)src % 16 == 0) && amp__cu_dtype_vec(sd) && amp__cu_dtype_vec(dd);
  amp__cu_dtype_visit(sd, [&](auto s) {
    amp__cu_dtype_visit(dd, [&](auto d) {
      amp__cu_cast_kernel<s.value, d.value><<<grid, AMP__CU_THREADS, 0, st->stream>>>(dst, src, (long long)n, mul, vec);
    });
  });
}

extern "C" amp_status amp__cu_cast(void *state, void *dst, int32_t dst_type, const void *src, int32_t src_type,
                                   size_t n, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_cast: state is NULL");
  if (!amp__cu_dtype_ok(dst_type))
    return amp__cu_arg(msg, cap, "amp__cu_cast: dst_type %d is not a dtype", (int)dst_type);
  if (!amp__cu_dtype_ok(src_type))
    return amp__cu_arg(msg, cap, "amp__cu_cast: src_type %d is not a dtype", (int)src_type);
  if (n == 0) return AMP_OK;
  if (!dst || !src) return amp__cu_arg(msg, cap, "amp__cu_cast: %s is NULL with n = %zu", dst ? "src" : "dst", n);
  AMP__CU_ON(st);
  if (dst_type == src_type) {
    const size_t bytes = n * (size_t)amp__cu_dtype_bytes(dst_type);
    AMP__CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream));
    return AMP_OK;
  }
  amp__cu_cast_launch(st, dst, dst_type, src, src_type, n, NULL);
  AMP__CU_CHECK_LAUNCH("amp__cu_cast_kernel<<<>>>");
  return AMP_OK;
}

// ---- fp8 block scaling (amp_quantize_blocks): one thread block per scale block
//
// Grid-stride over the scale blocks (any number fits one launch). The threads find the block's amax
// (each the largest |x| bits of its elements, then an atomicMax in shared memory), thread 0 turns it
// into the scale with amp.h's amp__block_scale and stores it, and every thread writes its elements'
// codes with amp__block_q: the CPU's element functions, so the CPU's bits.
template <int XT> __global__ void __launch_bounds__(128)
amp__cu_qblocks_kernel(int kind, int fp8, int rows, int cols, const void *x, int ldx, uint8_t *q, int ldq, void *scales) {
  __shared__ unsigned amax;
  __shared__ amp__bscale b;
  const int bh = kind == AMP_BLOCK_128x128 ? 128 : 1, bw = kind == AMP_BLOCK_MX_RCEIL || kind == AMP_BLOCK_MX_FLOOR ? 32 : 128;
  const long long nbc = amp__nblocks(cols, bw), nb = (long long)amp__nblocks(rows, bh) * nbc;
  for (long long blk = blockIdx.x; blk < nb; blk += gridDim.x) {
    const int r0 = (int)(blk / nbc) * bh, c0 = (int)(blk % nbc) * bw;
    const int h = rows - r0 < bh ? rows - r0 : bh, w = cols - c0 < bw ? cols - c0 : bw;
    unsigned a = 0;
    if (threadIdx.x == 0) amax = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < h * w; i += blockDim.x) {
      unsigned u = amp__f32_bits(amp__load(x, (amp_dtype)XT, (size_t)(r0 + i / w) * ldx + c0 + i % w)) & 0x7fffffffu;
      a = u > a ? u : a;
    }
    atomicMax(&amax, a);
    __syncthreads();
    if (threadIdx.x == 0) {
      b = amp__block_scale(kind, (amp_dtype)fp8, amax);
      if (bw == 32) ((uint8_t *)scales)[blk] = (uint8_t)b.stored;
      else ((uint32_t *)scales)[blk] = b.stored;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < h * w; i += blockDim.x) {
      const size_t r = (size_t)(r0 + i / w), c = (size_t)(c0 + i % w);
      q[r * ldq + c] = amp__block_q(amp__load(x, (amp_dtype)XT, r * ldx + c), &b, amp__cu_dtype_fp8(fp8));
    }
    __syncthreads();   // amax and b are the next block's
  }
}

extern "C" amp_status amp__cu_quantize_blocks(void *state, int32_t kind, int32_t fp8, int rows, int cols, const void *x,
                                              int32_t x_type, int ldx, void *q, int ldq, void *scales, char *msg,
                                              size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (kind < AMP_BLOCK_MX_RCEIL || kind > AMP_BLOCK_128x128)
    return amp__cu_arg(msg, cap, "amp__cu_quantize_blocks: kind %d is not an amp_block_scaling", (int)kind);
  if (amp__cu_dtype_fp8(fp8) < 0)
    return amp__cu_arg(msg, cap, "amp__cu_quantize_blocks: fp8 %d is not an fp8 format", (int)fp8);
  if (!amp__cu_dtype_ok(x_type)) return amp__cu_arg(msg, cap, "amp__cu_quantize_blocks: x_type %d is not a dtype", (int)x_type);
  if (rows < 0 || cols < 0 || ldx < cols || ldq < cols)
    return amp__cu_arg(msg, cap, "amp__cu_quantize_blocks: rows %d, cols %d, ldx %d, ldq %d", rows, cols, ldx, ldq);
  if (rows == 0 || cols == 0) return AMP_OK;
  if (!x || !q || !scales) return amp__cu_arg(msg, cap, "amp__cu_quantize_blocks: %s is NULL", !x ? "x" : !q ? "q" : "scales");
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_quantize_blocks: state is NULL");
  AMP__CU_ON(st);
  const int bh = kind == AMP_BLOCK_128x128 ? 128 : 1, bw = kind <= AMP_BLOCK_MX_FLOOR ? 32 : 128;
  const long long nb = (long long)amp__nblocks(rows, bh) * amp__nblocks(cols, bw);
  const long long most = (long long)(st->sm_count > 0 ? st->sm_count : 1) * 16;
  const int grid = (int)(nb < most ? nb : most);
  amp__cu_dtype_visit(x_type, [&](auto t) {
    amp__cu_qblocks_kernel<t.value><<<grid, bw, 0, st->stream>>>(kind, fp8, rows, cols, x, ldx, (uint8_t *)q, ldq, scales);
  });
  AMP__CU_CHECK_LAUNCH("amp__cu_qblocks_kernel<<<>>>");
  return AMP_OK;
}

// ---- the model copy from a master (add with a seed or round_to, checkpoint load): amp__store_model

__global__ void __launch_bounds__(AMP__CU_THREADS)
amp__cu_write_model_kernel(void *dst, int32_t dtype, int32_t round_to, int32_t sr, uint64_t key, const float *master,
                           long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    amp__store_model(dst, (amp_dtype)dtype, (amp_dtype)round_to, sr, key, (size_t)i, master[i]);
}

extern "C" amp_status amp__cu_write_model(void *state, void *dst, int32_t dtype, int32_t round_to, int32_t stochastic,
                                          uint64_t key, const float *master, size_t n, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_write_model: state is NULL");
  if (!amp__cu_dtype_ok(dtype))
    return amp__cu_arg(msg, cap, "amp__cu_write_model: dtype %d is not a dtype", (int)dtype);
  if (!amp__cu_dtype_ok(round_to))
    return amp__cu_arg(msg, cap, "amp__cu_write_model: round_to %d is not a dtype", (int)round_to);
  if (n == 0) return AMP_OK;
  if (!dst || !master)
    return amp__cu_arg(msg, cap, "amp__cu_write_model: %s is NULL with n = %zu", dst ? "master" : "dst", n);
  if (stochastic && !amp__dtype_f32_top((amp_dtype)dtype))
    return amp__cu_arg(msg, cap, "amp__cu_write_model: stochastic with dtype %d (bf16 only)", (int)dtype);
  if (!amp__round_to_set((amp_dtype)round_to) && !stochastic)   // the vector cast
    return amp__cu_cast(state, dst, dtype, master, AMP_F32, n, msg, cap);
  AMP__CU_ON(st);
  amp__cu_write_model_kernel<<<amp__cu_grid(st, n), AMP__CU_THREADS, 0, st->stream>>>(
      dst, dtype, round_to, stochastic != 0, key, master, (long long)n);
  AMP__CU_CHECK_LAUNCH("amp__cu_write_model_kernel<<<>>>");
  return AMP_OK;
}

// ---- device scaler

extern "C" amp_status amp__cu_scaler_create(void *state, void **scaler, const amp_scale_state *s0,
                                            const amp_scale_params *pr, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_scaler_dev h, *d = NULL;
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_scaler_create: state is NULL");
  if (!scaler || !s0 || !pr)
    return amp__cu_arg(msg, cap, "amp__cu_scaler_create: %s is NULL", !scaler ? "scaler" : !s0 ? "st" : "pr");
  if (!(s0->scale > 0.0f) || !amp__finite(s0->scale))
    return amp__cu_arg(msg, cap, "amp__cu_scaler_create: scale %g must be positive and finite", (double)s0->scale);
  memset(&h, 0, sizeof h);
  h.st = *s0; h.pr = *pr; h.inv_scale = amp__inv_scale(s0->scale);
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMalloc(&d, sizeof *d));
  cudaError_t e = cudaMemcpyAsync(d, &h, sizeof h, cudaMemcpyHostToDevice, st->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);   // h lives on this stack
  if (e != cudaSuccess) {
    cudaFree(d);
    return amp__cu_fail(msg, cap, "cudaMemcpyAsync(scaler block)", cudaGetErrorName(e), __FILE__, __LINE__);
  }
  *scaler = d;
  return AMP_OK;
}

extern "C" void amp__cu_scaler_destroy(void *state, void *scaler) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!scaler || !st) return;
  AMP__CU_ON_VOID(st);
  cudaStreamSynchronize(st->stream);   // a kernel may still be using it
  cudaFree(scaler);
}

extern "C" amp_status amp__cu_scaler_load(void *state, void *scaler, const amp_scale_state *s,
                                          const amp_scale_params *pr, float inv_scale, int last_skipped,
                                          int64_t skipped, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_scaler_dev v;
  if (!st || !scaler || !s || !pr)
    return amp__cu_arg(msg, cap, "amp__cu_scaler_load: %s is NULL",
                       !st       ? "state"
                       : !scaler ? "scaler"
                       : !s      ? "st"
                                 : "pr");
  if (!(s->scale > 0.0f) || !amp__finite(s->scale) || !(inv_scale > 0.0f) || !amp__finite(inv_scale))
    return amp__cu_arg(msg, cap, "amp__cu_scaler_load: scale %g / inv_scale %g must be positive and finite",
                       (double)s->scale, (double)inv_scale);
  AMP__CU_ON(st);
  memset(&v, 0, sizeof v);
  v.st = *s; v.pr = *pr; v.inv_scale = inv_scale; v.found_inf = 0;
  v.last_skipped = last_skipped != 0; v.skipped = (long long)skipped;
  amp__cu_scaler_load_kernel<<<1, 1, 0, st->stream>>>((amp__cu_scaler_dev *)scaler, v);
  AMP__CU_CHECK_LAUNCH("amp__cu_scaler_load_kernel<<<1, 1>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_scaler_read(void *state, const void *scaler, amp_scale_state *s, amp_cu_scaler_info *info,
                                          char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_scaler_dev h;
  if (!st || !scaler) return amp__cu_arg(msg, cap, "amp__cu_scaler_read: %s is NULL", !st ? "state" : "scaler");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMemcpyAsync(&h, scaler, sizeof h, cudaMemcpyDeviceToHost, st->stream));
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  if (s) *s = h.st;
  if (info) {
    info->inv_scale = h.inv_scale;
    info->found_inf = h.found_inf;
    info->last_skipped = h.last_skipped;
    info->skipped = h.skipped;
  }
  return AMP_OK;
}

extern "C" float *amp__cu_scaler_scale_ptr(void *scaler) {
  return scaler ? &((amp__cu_scaler_dev *)scaler)->st.scale : NULL;
}

extern "C" amp_status amp__cu_scaler_update(void *state, void *scaler, int found_inf, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st || !scaler) return amp__cu_arg(msg, cap, "amp__cu_scaler_update: %s is NULL", !st ? "state" : "scaler");
  if (found_inf < -1 || found_inf > 1)
    return amp__cu_arg(msg, cap, "amp__cu_scaler_update: found_inf %d must be -1, 0 or 1", found_inf);
  AMP__CU_ON(st);
  amp__cu_scale_rule_kernel<<<1, 1, 0, st->stream>>>((amp__cu_scaler_dev *)scaler, found_inf);
  AMP__CU_CHECK_LAUNCH("amp__cu_scale_rule_kernel<<<1, 1>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_scale_buffer(void *state, const void *scaler, void *buf, int32_t dtype, size_t n,
                                           char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st || !scaler) return amp__cu_arg(msg, cap, "amp__cu_scale_buffer: %s is NULL", !st ? "state" : "scaler");
  if (!amp__cu_dtype_ok(dtype))
    return amp__cu_arg(msg, cap, "amp__cu_scale_buffer: dtype %d is not a dtype", (int)dtype);
  if (n == 0) return AMP_OK;
  if (!buf) return amp__cu_arg(msg, cap, "amp__cu_scale_buffer: buf is NULL with n = %zu", n);
  AMP__CU_ON(st);
  amp__cu_cast_launch(st, buf, dtype, buf, dtype, n, &((const amp__cu_scaler_dev *)scaler)->st.scale);
  AMP__CU_CHECK_LAUNCH("amp__cu_cast_kernel<<<>>> (scale)");
  return AMP_OK;
}

// AMP_ERR_STATE when the device's stream is capturing a CUDA graph, for the calls whose write a
// replay would repeat with stale values (why: the rest of the message).
static amp_status amp__cu_refuse_capture(amp__cu_state *st, const char *why, char *msg, size_t cap) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (!st->stream) return AMP_OK;   // the legacy default stream cannot be capturing
  AMP__CU_CHECK(cudaStreamIsCapturing(st->stream, &cs));
  if (cs == cudaStreamCaptureStatusNone) return AMP_OK;
  if (msg && cap) snprintf(msg, cap, "the device's stream is capturing a CUDA graph; %s", why);
  return AMP_ERR_STATE;
}

// ---- fp8 scaling: the fp8 scaler's block, its update, and the cast that measures its amax

// The fp8 scaler's state in device memory: one allocation, the arrays one after the other (the
// 64-bit counters first, so they are aligned; none without stats).
struct amp__cu_fp8 {
  double *red;                         // n: the amaxes on the data-parallel hook's wire
  unsigned long long *counts, *last;   // stats: n * 4 each (this step's, the last step's); else NULL
  float *hist, *scale, *scale_inv;     // n * len, n, n
  float *used;                         // stats: n * 2 (the amax the update read, the scale it replaced); else NULL
  int32_t *format;                     // n
  size_t n;
  int len;
  void *block;                         // the allocation
};

// Every tensor's update, one thread each: amp.h's amp__fp8_update_one, the CPU's own function;
// with stats the thread also moves its tensor's counters into the last step's and clears them.
__global__ void amp__cu_fp8_update_kernel(amp__cu_fp8 f, amp_fp8_config c) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= f.n) return;
  amp__fp8_update_one(&c, (amp_dtype)f.format[i], f.hist + i * (size_t)f.len, f.len, f.scale + i, f.scale_inv + i,
                      f.used ? f.used + 2 * i : NULL);
  if (f.counts)
    for (int j = 0; j < 4; j++) { f.last[4 * i + j] = f.counts[4 * i + j]; f.counts[4 * i + j] = 0ull; }
}
__global__ void amp__cu_fp8_record_kernel(float *slot, float amax) { *slot = amp__amax_join(*slot, amax); }
// Data parallel: slot 0 of every tensor to the hook's buffer, or back from it (a value that is no
// amax's bits, which only a broken hook gives, is clamped into range).
__global__ void amp__cu_fp8_amax_io_kernel(amp__cu_fp8 f, int to_slots) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= f.n) return;
  if (!to_slots) f.red[i] = amp__fp8_amax_to_wire(f.hist[i * (size_t)f.len]);
  else f.hist[i * (size_t)f.len] = amp__fp8_amax_from_wire(fmin(fmax(f.red[i], 0.0), AMP__FP8_WIRE_MAX));
}

// The cast with its amax: each thread casts its elements (amp__load, one multiply, the saturating
// store of amp.h) and keeps the largest |x| as bits; the warp's, then the block's largest is joined
// into *amax with one integer atomicMax (the bits of non-negative floats order as the floats do,
// and a NaN's are above inf's, so it wins as on the CPU). COUNT (the instantiation for a non-NULL
// counts): each thread also counts its elements' classes (amp__fp8_cast_class, amp.h's), the sums
// go through the warp (64-bit shuffles) and the block (shared memory), and one thread per block
// adds each nonzero sum to counts with one 64-bit integer atomicAdd (block 0 adds n): integers, so
// the same counts in any order.
template <int XT, int F8, bool COUNT> __global__ void __launch_bounds__(AMP__CU_THREADS)
amp__cu_quantize_kernel(amp_fp8 *q, const void *x, long long n, const float *scale, float *amax,
                        unsigned long long *counts) {
  __shared__ unsigned int warp_top[AMP__CU_THREADS / 32];
  __shared__ unsigned long long warp_cnt[COUNT ? 3 : 1][AMP__CU_THREADS / 32];
  const long long stride = (long long)gridDim.x * blockDim.x;
  const float k = scale ? *scale : 1.0f;
  unsigned int top = 0;
  unsigned long long c[3] = {0ull, 0ull, 0ull};
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = amp__load(x, (amp_dtype)XT, (size_t)i);
    unsigned int b = amp__f32_bits(v) & 0x7fffffffu;
    top = b > top ? b : top;
    if constexpr (COUNT) {
      float y = amp__fmul(v, k);
      unsigned int cls = amp__fp8_cast_class(v, y, amp__cu_dtype_fp8(F8));
      c[0] += cls & 1u; c[1] += (cls >> 1) & 1u; c[2] += cls >> 2;
      if (q) amp__store(q, (amp_dtype)F8, (size_t)i, y);
    } else if (q) {
      amp__store(q, (amp_dtype)F8, (size_t)i, amp__fmul(v, k));
    }
  }
  if (!COUNT && !amax) return;
  top = __reduce_max_sync(0xffffffffu, top);
  if constexpr (COUNT)
    for (int j = 0; j < 3; j++)
      for (int off = 16; off > 0; off /= 2) c[j] += __shfl_down_sync(0xffffffffu, c[j], off);
  if (threadIdx.x % 32 == 0) {
    warp_top[threadIdx.x / 32] = top;
    if constexpr (COUNT)
      for (int j = 0; j < 3; j++) warp_cnt[j][threadIdx.x / 32] = c[j];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < AMP__CU_THREADS / 32; w++) top = warp_top[w] > top ? warp_top[w] : top;
    if (amax) {   // amp__amax_join: the slot's own sign cleared first (a -0 or negative NaN there), then the max
      atomicAnd((unsigned int *)amax, 0x7fffffffu);
      atomicMax((unsigned int *)amax, top);
    }
    if constexpr (COUNT) {
      for (int j = 0; j < 3; j++) {
        for (int w = 1; w < AMP__CU_THREADS / 32; w++) c[j] += warp_cnt[j][w];
        if (c[j]) atomicAdd(counts + 1 + j, c[j]);
      }
      if (blockIdx.x == 0) atomicAdd(counts, (unsigned long long)n);
    }
  }
}

extern "C" amp_status amp__cu_fp8_create(void *state, void **fp8, size_t n, int len, const amp_dtype *format,
                                         const float *hist, const float *scale, const float *scale_inv, int stats,
                                         float **d_hist, float **d_scale, float **d_scale_inv, double **d_red,
                                         uint64_t **d_counts, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st || !fp8 || !format || !hist || !scale || !scale_inv || !d_hist || !d_scale || !d_scale_inv || !d_red ||
      !d_counts)
    return amp__cu_arg(msg, cap, "amp__cu_fp8_create: a pointer argument is NULL");
  if (n == 0 || len < 1) return amp__cu_arg(msg, cap, "amp__cu_fp8_create: n %zu, len %d", n, len);
  AMP__CU_ON(st);   // before the host allocations: a failure here returns with nothing to free
  amp__cu_fp8 *f = new (std::nothrow) amp__cu_fp8();
  if (!f) { snprintf(msg, cap, "amp__cu_fp8_create: out of memory"); return AMP_ERR_NOMEM; }
  const size_t slots = n * (size_t)len, cnt = stats ? 8 * n : 0, used = stats ? 2 * n : 0;
  const size_t bytes = cnt * sizeof(unsigned long long) + n * sizeof(double) + (slots + 2 * n + used) * sizeof(float) +
                       n * sizeof(int32_t);
  int32_t *fmt = (int32_t *)malloc(n * sizeof(int32_t));
  if (!fmt) { delete f; snprintf(msg, cap, "amp__cu_fp8_create: out of memory"); return AMP_ERR_NOMEM; }
  for (size_t i = 0; i < n; i++) fmt[i] = (int32_t)format[i];
  cudaError_t e = cudaMalloc(&f->block, bytes);
  if (e == cudaSuccess) {
    unsigned long long *c = (unsigned long long *)f->block;
    f->counts = stats ? c : NULL; f->last = stats ? c + 4 * n : NULL; f->red = (double *)(c + cnt);
    f->hist = (float *)(f->red + n); f->scale = f->hist + slots; f->scale_inv = f->scale + n;
    f->used = stats ? f->scale_inv + n : NULL;
    f->format = (int32_t *)(f->scale_inv + n + used); f->n = n; f->len = len;
    if (stats) e = cudaMemsetAsync(f->block, 0, cnt * sizeof(unsigned long long), st->stream);
    if (e == cudaSuccess && stats) e = cudaMemsetAsync(f->used, 0, used * sizeof(float), st->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(f->hist, hist, slots * sizeof(float), cudaMemcpyHostToDevice, st->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(f->scale, scale, n * sizeof(float), cudaMemcpyHostToDevice, st->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(f->scale_inv, scale_inv, n * sizeof(float), cudaMemcpyHostToDevice, st->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(f->format, fmt, n * sizeof(int32_t), cudaMemcpyHostToDevice, st->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);   // fmt lives on this heap, the arrays on the caller's
  }
  free(fmt);
  if (e != cudaSuccess) {
    if (f->block) cudaFree(f->block);
    delete f;
    return amp__cu_fail(msg, cap, "cudaMalloc / cudaMemcpyAsync (fp8 scaler block)", cudaGetErrorName(e), __FILE__,
                        __LINE__);
  }
  *d_hist = f->hist; *d_scale = f->scale; *d_scale_inv = f->scale_inv; *d_red = f->red;
  *d_counts = (uint64_t *)f->counts;
  *fp8 = f;
  return AMP_OK;
}

extern "C" void amp__cu_fp8_destroy(void *state, void *fp8) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_fp8 *f = (amp__cu_fp8 *)fp8;
  if (!f || !st) return;
  AMP__CU_ON_VOID(st);
  cudaStreamSynchronize(st->stream);   // a kernel may still be using it
  cudaFree(f->block);
  delete f;
}

extern "C" amp_status amp__cu_fp8_record(void *state, void *fp8, size_t i, float amax, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_fp8 *f = (amp__cu_fp8 *)fp8;
  if (!st || !f) return amp__cu_arg(msg, cap, "amp__cu_fp8_record: %s is NULL", !st ? "state" : "fp8");
  if (i >= f->n) return amp__cu_arg(msg, cap, "amp__cu_fp8_record: tensor %zu of %zu", i, f->n);
  AMP__CU_ON(st);
  amp_status c = amp__cu_refuse_capture(st, "a captured record would add this amax again at every launch: let the "
                                        "casts write it (amp_quantize into amp_fp8_scaler_amax_ptr)", msg, cap);
  if (c != AMP_OK) return c;
  amp__cu_fp8_record_kernel<<<1, 1, 0, st->stream>>>(f->hist + i * (size_t)f->len, amax);
  AMP__CU_CHECK_LAUNCH("amp__cu_fp8_record_kernel<<<1, 1>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_fp8_amax_io(void *state, void *fp8, int to_slots, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_fp8 *f = (amp__cu_fp8 *)fp8;
  if (!st || !f) return amp__cu_arg(msg, cap, "amp__cu_fp8_amax_io: %s is NULL", !st ? "state" : "fp8");
  AMP__CU_ON(st);
  amp__cu_fp8_amax_io_kernel<<<(unsigned)((f->n + AMP__CU_THREADS - 1) / AMP__CU_THREADS), AMP__CU_THREADS, 0,
                               st->stream>>>(*f, to_slots);
  AMP__CU_CHECK_LAUNCH("amp__cu_fp8_amax_io_kernel<<<>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_fp8_update(void *state, void *fp8, const amp_fp8_config *c, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_fp8 *f = (amp__cu_fp8 *)fp8;
  if (!st || !f || !c) return amp__cu_arg(msg, cap, "amp__cu_fp8_update: %s is NULL", !st ? "state" : !f ? "fp8" : "c");
  AMP__CU_ON(st);
  amp__cu_fp8_update_kernel<<<(unsigned)((f->n + AMP__CU_THREADS - 1) / AMP__CU_THREADS), AMP__CU_THREADS, 0,
                              st->stream>>>(*f, *c);
  AMP__CU_CHECK_LAUNCH("amp__cu_fp8_update_kernel<<<>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_fp8_io(void *state, void *fp8, float *hist, float *scale, float *scale_inv, int to_device,
                                     char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_fp8 *f = (amp__cu_fp8 *)fp8;
  if (!st || !f || !hist || !scale || !scale_inv) return amp__cu_arg(msg, cap, "amp__cu_fp8_io: a pointer is NULL");
  const cudaMemcpyKind dir = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  const size_t slots = f->n * (size_t)f->len;
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMemcpyAsync(to_device ? (void *)f->hist : (void *)hist, to_device ? (const void *)hist : f->hist,
                                slots * sizeof(float), dir, st->stream));
  AMP__CU_CHECK(cudaMemcpyAsync(to_device ? (void *)f->scale : (void *)scale, to_device ? (const void *)scale : f->scale,
                                f->n * sizeof(float), dir, st->stream));
  AMP__CU_CHECK(cudaMemcpyAsync(to_device ? (void *)f->scale_inv : (void *)scale_inv,
                                to_device ? (const void *)scale_inv : f->scale_inv, f->n * sizeof(float), dir,
                                st->stream));
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}

extern "C" amp_status amp__cu_fp8_stats(void *state, void *fp8, uint64_t *last, float *used, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_fp8 *f = (amp__cu_fp8 *)fp8;
  if (!st || !f || !last || !used) return amp__cu_arg(msg, cap, "amp__cu_fp8_stats: a pointer is NULL");
  if (!f->counts) return amp__cu_arg(msg, cap, "amp__cu_fp8_stats: the scaler was made without stats");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMemcpyAsync(last, f->last, 4 * f->n * sizeof(uint64_t), cudaMemcpyDeviceToHost, st->stream));
  AMP__CU_CHECK(cudaMemcpyAsync(used, f->used, 2 * f->n * sizeof(float), cudaMemcpyDeviceToHost, st->stream));
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}

extern "C" amp_status amp__cu_quantize(void *state, void *q, int32_t fp8, const void *x, int32_t x_type, size_t n,
                                       const float *scale, float *amax, uint64_t *counts, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_quantize: state is NULL");
  if (amp__cu_dtype_fp8(fp8) < 0) return amp__cu_arg(msg, cap, "amp__cu_quantize: fp8 %d is not an fp8 format", (int)fp8);
  if (!amp__cu_dtype_compute(x_type))
    return amp__cu_arg(msg, cap, "amp__cu_quantize: x_type %d is not a format to compute in", (int)x_type);
  if (n == 0) return AMP_OK;
  if (!x || (!q && !amax)) return amp__cu_arg(msg, cap, "amp__cu_quantize: x, or both q and amax, NULL");
  AMP__CU_ON(st);
  const int grid = amp__cu_grid(st, n);
  unsigned long long *c = (unsigned long long *)counts;
  amp__cu_dtype_visit(x_type, [&](auto xt) {
    amp__cu_dtype_visit(fp8, [&](auto f8) {   // a compute type into an fp8 one: the rows the table says
      if constexpr (amp__cu_dtype_compute(xt.value) && amp__cu_dtype_fp8(f8.value) >= 0) {
        amp_fp8 *qq = (amp_fp8 *)q;
        const long long nn = (long long)n;
        cudaStream_t s = st->stream;
        if (!c) amp__cu_quantize_kernel<xt.value, f8.value, false><<<grid, AMP__CU_THREADS, 0, s>>>(qq, x, nn, scale, amax, c);
        else amp__cu_quantize_kernel<xt.value, f8.value, true><<<grid, AMP__CU_THREADS, 0, s>>>(qq, x, nn, scale, amax, c);
      }
    });
  });
  AMP__CU_CHECK_LAUNCH("amp__cu_quantize_kernel<<<>>>");
  return AMP_OK;
}

// ---- device optimizer

// An AMP_MASTER_SPLIT tensor's seed split into its bf16 model copy and remainders (amp__split_encode).
__global__ void __launch_bounds__(AMP__CU_THREADS)
amp__cu_split_kernel(amp_bf16 *model, uint16_t *rem, const float *master, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    amp__split_encode(master[i], &model[i], &rem[i]);
}

// A moment array of n elements, zeroed, as a step leaves moments that are all 0 (amp.h's
// amp__cpu_moments_place): AMP_MOMENTS_8BIT every block's absmax 1e-38 (amp__q8_absmax of 0) and
// every code c0, the map's code of 0; AMP_MOMENTS_FP8 the scale_inv of amax 0 (its codes are 0).
__global__ void __launch_bounds__(AMP__CU_THREADS)
amp__cu_moments_zero_kernel(unsigned char *a, int type, long long n, uint8_t c0) {
  const long long nb = (n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    if (type == AMP_MOMENTS_FP8) {
      if (i == 0) *(float *)a = amp__fdiv(1.0f, amp__f8m_scale(0.0f));
    } else {
      if (i < nb) ((float *)a)[i] = amp__q8_absmax(0.0f);
      a[4 * nb + i] = c0;
    }
  }
}

static void amp__cu_optim_release(amp__cu_optim *o) {
  if (!o) return;
  cudaFree(o->dev);
  cudaFree(o->tensors);
  cudaFree(o->chunks);
  cudaFree(o->partials);
  cudaFree(o->reduce);
  cudaFree(o->slab); cudaFree(o->q8); cudaFree(o->f8amax);
  cudaFree(o->stats); cudaFree(o->rem);
  free(o->offset); free(o->n); free(o->moffset); free(o->roffset); free(o->host); free(o);
}

// A record's grads and the vector-path flags that follow from their alignment (model and types set).
static void amp__cu_tdev_grads(amp__cu_tdev *r, const void *grads) {
  r->grad = grads;
  r->gvec = (uintptr_t)grads % 16 == 0 && amp__cu_dtype_vec(r->gdtype);
  r->vec = r->gvec && ((uintptr_t)r->model % 16 == 0) && amp__cu_dtype_vec(r->dtype);
}

// Allocates and fills everything; on failure the caller releases what was made.
static amp_status amp__cu_optim_build(amp__cu_state *st, amp__cu_optim *o, const amp__tensor *ts, const float *lr_scale,
                                      const float *weight_decay, const amp_optim_config *h, amp__cu_tdev *ht,
                                      amp__cu_chunk *hc, char *msg, size_t cap) {
  int slots = 1 + o->has_m + o->has_v, c = 0;
  amp__cu_optim_dev hb;
  AMP__CU_CHECK(cudaMalloc(&o->dev, sizeof *o->dev));
  AMP__CU_CHECK(cudaMalloc(&o->tensors, o->n_tensors * sizeof *o->tensors));
  AMP__CU_CHECK(cudaMalloc(&o->chunks, (size_t)o->n_chunks * sizeof *o->chunks));
  AMP__CU_CHECK(cudaMalloc(&o->partials, (size_t)o->n_chunks * sizeof *o->partials));   // (double)
  AMP__CU_CHECK(cudaMalloc(&o->reduce, 2 * sizeof(double)));
  if (h->stats) {
    AMP__CU_CHECK(cudaMalloc(&o->stats, o->n_tensors * sizeof *o->stats));
    AMP__CU_CHECK(cudaMemsetAsync(o->stats, 0, o->n_tensors * sizeof *o->stats, st->stream));
  }
  const size_t slab_bytes = o->mtotal * sizeof(float) + (size_t)(slots - 1) * o->total;
  if (slab_bytes) AMP__CU_CHECK(cudaMalloc(&o->slab, slab_bytes));   // none: AMP_MASTER_NONE + plain SGD
  if (o->rtotal) {
    AMP__CU_CHECK(cudaMalloc(&o->rem, o->rtotal * sizeof *o->rem));
    AMP__CU_CHECK(cudaMemsetAsync(o->rem, 0, o->rtotal * sizeof *o->rem, st->stream));   // the bf16 copy is exact
  }
  char *mbase = o->has_m ? (char *)(o->slab + o->mtotal) : NULL;
  char *vbase = o->has_v ? (char *)(o->slab + o->mtotal) + (size_t)o->has_m * o->total : NULL;
  for (size_t i = 0; i < o->n_tensors && slots > 1; i++) o->has_f8 |= ts[i].moments == AMP_MOMENTS_FP8;
  if (o->has_f8) {   // two amax slots per tensor, cleared: the first step's first launch fills them
    AMP__CU_CHECK(cudaMalloc(&o->f8amax, 2 * o->n_tensors * sizeof *o->f8amax));
    AMP__CU_CHECK(cudaMemsetAsync(o->f8amax, 0, 2 * o->n_tensors * sizeof *o->f8amax, st->stream));
  }
  amp__cu_q8map hq = {};   // the 8-bit maps, uploaded where a tensor keeps 8-bit moments (read before the sync below)
  double mid[2][256] = {};   // their midpoints (mid[j][255] unused), for the table and the zero codes
  for (size_t i = 0; i < o->n_tensors && !o->q8; i++) {
    if (ts[i].moments != AMP_MOMENTS_8BIT || slots == 1) continue;
    amp__q8_map(1, hq.code[0], mid[0]);
    amp__q8_map(0, hq.code[1], mid[1]);
    amp__q8_vtable(mid[0], hq.vt[0]);
    amp__q8_vtable(mid[1], hq.vt[1]);
    AMP__CU_CHECK(cudaMalloc(&o->q8, sizeof *o->q8));
    AMP__CU_CHECK(cudaMemcpyAsync(o->q8, &hq, sizeof hq, cudaMemcpyHostToDevice, st->stream));
  }
  for (size_t i = 0; i < o->n_tensors; i++) {   // the device copy of each record, made here only
    ht[i].model = ts[i].w;
    ht[i].master = ts[i].master_mode == AMP_MASTER_F32 ? o->slab + o->moffset[i] : NULL;
    ht[i].rem = ts[i].master_mode == AMP_MASTER_SPLIT ? o->rem + o->roffset[i] : NULL;
    ht[i].m = mbase ? mbase + o->offset[i] : NULL;
    ht[i].v = vbase ? vbase + o->offset[i] : NULL;
    ht[i].n = (long long)ts[i].n; ht[i].dtype = (int32_t)ts[i].wtype; ht[i].gdtype = (int32_t)ts[i].gtype;
    ht[i].group = ts[i].group; ht[i].round_to = (int32_t)ts[i].round_to; ht[i].stochastic = ts[i].stochastic != 0;
    ht[i].moments = ts[i].moments;
    ht[i].q8 = ts[i].moments == AMP_MOMENTS_8BIT ? o->q8 : NULL;
    ht[i].f8amax = ts[i].moments == AMP_MOMENTS_FP8 && o->f8amax ? o->f8amax + 2 * i : NULL;
    ht[i].lr_scale = ts[i].group ? lr_scale[ts[i].group] : 1.0f;
    ht[i].weight_decay = ts[i].group ? weight_decay[ts[i].group] : 0.0f;   // group 0: the config's, read on the device
    amp__cu_tdev_grads(&ht[i], ts[i].g);
    o->forms |= 1 << amp__cu_step_form(ht[i]);
    for (size_t s = 0; s < ts[i].n; s += AMP__CU_CHUNK, c++) {
      hc[c].start = (long long)s; hc[c].tensor = (int32_t)i;
      hc[c].len = (int32_t)(ts[i].n - s < AMP__CU_CHUNK ? ts[i].n - s : AMP__CU_CHUNK);
    }
  }
  memset(&hb, 0, sizeof hb);
  hb.h = *h;
  hb.n_tensors = (long long)o->n_tensors; hb.has_f8 = o->has_f8;
  hb.norm = 0.0f; hb.clip = 1.0f; hb.mul = 1.0f; hb.scale = 1.0f;
  AMP__CU_CHECK(cudaMemcpyAsync(o->dev, &hb, sizeof hb, cudaMemcpyHostToDevice, st->stream));
  AMP__CU_CHECK(cudaMemsetAsync(o->reduce, 0, 2 * sizeof(double), st->stream));
  AMP__CU_CHECK(cudaMemcpyAsync(o->tensors, ht, o->n_tensors * sizeof *ht, cudaMemcpyHostToDevice, st->stream));
  AMP__CU_CHECK(cudaMemcpyAsync(o->chunks, hc, (size_t)o->n_chunks * sizeof *hc, cudaMemcpyHostToDevice, st->stream));
  if (slots > 1)
    AMP__CU_CHECK(cudaMemsetAsync(o->slab + o->mtotal, 0, (size_t)(slots - 1) * o->total, st->stream));   // +0: bf16 too
  for (size_t i = 0; i < o->n_tensors; i++) {   // 8-bit and fp8 moments: zeros are codes, absmaxes, scale_invs
    if (ts[i].moments != AMP_MOMENTS_8BIT && ts[i].moments != AMP_MOMENTS_FP8) continue;
    for (int j = 0; j < 2; j++) {
      unsigned char *a = (unsigned char *)(j ? ht[i].v : ht[i].m);
      if (!a) continue;
      amp__cu_moments_zero_kernel<<<amp__cu_grid(st, ts[i].n), AMP__CU_THREADS, 0, st->stream>>>(
          a, ts[i].moments, (long long)ts[i].n, ts[i].moments == AMP_MOMENTS_8BIT ? amp__q8_bisect(mid[j], 0.0f) : 0);
      AMP__CU_CHECK_LAUNCH("amp__cu_moments_zero_kernel<<<>>>");
    }
  }
  for (size_t i = 0; i < o->n_tensors; i++) {   // each master taken once: as given, else the model copy (exact)
    if (ht[i].master && ts[i].master) {
      AMP__CU_CHECK(cudaMemcpyAsync(ht[i].master, ts[i].master, ts[i].n * sizeof(float), cudaMemcpyDeviceToDevice,
                                    st->stream));
    } else if (ht[i].master) {
      amp__cu_cast_launch(st, ht[i].master, AMP_F32, ts[i].w, (int32_t)ts[i].wtype, ts[i].n, NULL);
      AMP__CU_CHECK_LAUNCH("amp__cu_cast_kernel<<<>>> (master from model)");
    } else if (ht[i].rem && ts[i].master) {   // a split master's seed: the model copy and the remainders
      amp__cu_split_kernel<<<amp__cu_grid(st, ts[i].n), AMP__CU_THREADS, 0, st->stream>>>(
          (amp_bf16 *)ts[i].w, ht[i].rem, ts[i].master, (long long)ts[i].n);
      AMP__CU_CHECK_LAUNCH("amp__cu_split_kernel<<<>>>");
    }
  }
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));  // the host tables are freed on return
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_create(void *state, void **optim, const amp__tensor *ts, size_t n_tensors,
                                           const float *lr_scale, const float *weight_decay, const amp_optim_config *h,
                                           char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  size_t chunks = 0;
  if (!optim || !ts || !h)
    return amp__cu_arg(msg, cap, "amp__cu_optim_create: %s is NULL", !optim ? "optim" : !ts ? "tensors" : "h");
  if (n_tensors == 0 || n_tensors > 0x7fffffff)
    return amp__cu_arg(msg, cap, "amp__cu_optim_create: n_tensors %zu must be in 1..2^31-1", n_tensors);
  if (!amp__kind_on_device(h->kind))   // not in amp.h's kind list, or its update is a host function (AMP_CUSTOM)
    return amp__cu_arg(msg, cap, "amp__cu_optim_create: kind %d (%s) has no device update", (int)h->kind,
                       amp__kind_name(h->kind) ? amp__kind_name(h->kind) : "not an optimizer kind");
  // the records were validated once, by amp_optimizer_add_tensor; only the group table is read here
  for (size_t i = 0; i < n_tensors; i++) {
    if (ts[i].group && (!lr_scale || !weight_decay))
      return amp__cu_arg(msg, cap, "amp__cu_optim_create: tensor %zu: group %d without the groups' values", i,
                         ts[i].group);
    if (!amp__moments_on_cuda(ts[i].moments)) {   // refused, never run on them (the list's CUDA column)
      if (msg && cap)
        snprintf(msg, cap, "amp__cu_optim_create: tensor %zu: moments %d on CUDA: the step kernel keeps only the "
                 "moment types amp.h's list marks for CUDA", i, ts[i].moments);
      return AMP_ERR_UNSUPPORTED;
    }
    chunks += (ts[i].n + AMP__CU_CHUNK - 1) / AMP__CU_CHUNK;
  }
  if (chunks > 0x7fffffff) return amp__cu_arg(msg, cap, "amp__cu_optim_create: %zu chunks exceed a grid", chunks);
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_optim_create: state is NULL");
  AMP__CU_ON(st);
  amp__cu_optim *o = (amp__cu_optim *)calloc(1, sizeof *o);
  amp__cu_tdev *ht = (amp__cu_tdev *)calloc(n_tensors, sizeof *ht);
  amp__cu_chunk *hc = (amp__cu_chunk *)calloc(chunks, sizeof *hc);
  if (o) {
    o->offset = (size_t *)calloc(n_tensors, sizeof(size_t)); o->n = (size_t *)calloc(n_tensors, sizeof(size_t));
    o->moffset = (size_t *)calloc(n_tensors, sizeof(size_t)); o->roffset = (size_t *)calloc(n_tensors, sizeof(size_t));
  }
  if (!o || !ht || !hc || !o->offset || !o->n || !o->moffset || !o->roffset) {
    amp__cu_optim_release(o); free(ht); free(hc);
    if (msg && cap) snprintf(msg, cap, "amp__cu_optim_create: out of host memory for %zu tensors", n_tensors);
    return AMP_ERR_NOMEM;
  }
  o->n_tensors = n_tensors; o->n_chunks = (int)chunks; o->kind = h->kind;
  o->has_m = amp__o_moments(h) >= 1;   // the moments of the kind's row in amp.h's list
  o->has_v = amp__o_moments(h) >= 2;
  // each tensor's arrays 128-byte aligned in the slab (float4 access; 64 elements each, as amp.h's
  // state_pad and state_align count them in amp_optimizer_state_bytes): a moment array as its type
  // keeps it (amp__moment_bytes)
  for (size_t i = 0; i < n_tensors; i++) {
    const size_t padded = (ts[i].n + 63) / 64 * 64;
    o->offset[i] = o->total; o->n[i] = ts[i].n;
    o->total += amp__moment_stride(ts[i].moments, padded, 128);
    o->moffset[i] = o->roffset[i] = SIZE_MAX;
    if (ts[i].master_mode == AMP_MASTER_F32) { o->moffset[i] = o->mtotal; o->mtotal += padded; }
    else if (ts[i].master_mode == AMP_MASTER_SPLIT) { o->roffset[i] = o->rtotal; o->rtotal += padded; }
  }
  amp_status s = amp__cu_optim_build(st, o, ts, lr_scale, weight_decay, h, ht, hc, msg, cap);
  o->host = ht;   // kept (released with o)
  free(hc);
  if (s != AMP_OK) { cudaStreamSynchronize(st->stream); amp__cu_optim_release(o); return s; }
  *optim = o;
  return AMP_OK;
}

extern "C" void amp__cu_optim_destroy(void *state, void *optim) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!optim || !st) return;
  AMP__CU_ON_VOID(st);
  cudaStreamSynchronize(st->stream);
  amp__cu_optim_release((amp__cu_optim *)optim);
}

extern "C" amp_status amp__cu_optim_set_hparams(void *state, void *optim, const amp_optim_config *h, char *msg,
                                                size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o || !h)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_hparams: %s is NULL", !st ? "state" : !o ? "optim" : "h");
  if (h->kind != o->kind)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_hparams: kind %d differs from the optimizer's %d", (int)h->kind,
                       o->kind);
  if (amp__o_moments(h) > o->has_m + o->has_v)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_hparams: %d moment buffers needed (momentum %g) but the optimizer "
                       "was made with %d", amp__o_moments(h), (double)h->momentum, o->has_m + o->has_v);
  AMP__CU_ON(st);
  // The step reads the hyperparameters from device memory when it runs, so a graph replays with
  // whatever the last set before the replay wrote. Captured, this write would itself be replayed,
  // with this call's values, before every step of every replay: refused, so that no schedule is
  // silently frozen (set the lr before each launch of the graph instead).
  amp_status c = amp__cu_refuse_capture(st, "a captured lr would be replayed unchanged by every launch: set it before "
                                        "each launch of the graph instead (the step reads it when it runs)", msg, cap);
  if (c != AMP_OK) return c;
  amp__cu_set_hparams_kernel<<<1, 1, 0, st->stream>>>(o->dev, *h);
  AMP__CU_CHECK_LAUNCH("amp__cu_set_hparams_kernel<<<1, 1>>>");
  return AMP_OK;
}

// A tensor's grads moved (amp_optimizer_set_grads): its record, with the grads' alignment flags
// recomputed as the build computes them, uploaded again in stream order.
extern "C" amp_status amp__cu_optim_set_grads(void *state, void *optim, size_t index, const void *grads, char *msg,
                                              size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o || !grads)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_grads: %s is NULL", !st ? "state" : !o ? "optim" : "grads");
  if (index >= o->n_tensors)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_grads: index %zu of %zu tensors", index, o->n_tensors);
  AMP__CU_ON(st);
  // a captured upload would replay this pointer at every launch, whatever came after
  amp_status c = amp__cu_refuse_capture(st, "set the grads before capture", msg, cap);
  if (c != AMP_OK) return c;
  amp__cu_tdev *r = &o->host[index];
  amp__cu_tdev_grads(r, grads);
  AMP__CU_CHECK(cudaMemcpyAsync(o->tensors + index, r, sizeof *r, cudaMemcpyHostToDevice, st->stream));
  return AMP_OK;
}

extern "C" float *amp__cu_optim_master(void *optim, size_t index, size_t *n) {
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!o || index >= o->n_tensors || o->moffset[index] == SIZE_MAX) { if (n) *n = 0; return NULL; }
  if (n) *n = o->n[index];
  return o->slab + o->moffset[index];
}
extern "C" uint16_t *amp__cu_optim_rem(void *optim, size_t index) {
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!o || index >= o->n_tensors || o->roffset[index] == SIZE_MAX) return NULL;
  return o->rem + o->roffset[index];
}

extern "C" amp_status amp__cu_optim_unscale(void *state, void *optim, void *scaler, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o) return amp__cu_arg(msg, cap, "amp__cu_optim_unscale: %s is NULL", !st ? "state" : "optim");
  AMP__CU_ON(st);
  if (o->stats) AMP__CU_CHECK(cudaMemsetAsync(o->stats, 0, o->n_tensors * sizeof *o->stats, st->stream));
  amp__cu_unscale_kernel<<<o->n_chunks, AMP__CU_THREADS, 0, st->stream>>>(
      o->dev, (amp__cu_scaler_dev *)scaler, o->tensors, o->chunks, o->partials, NULL, o->stats);
  AMP__CU_CHECK_LAUNCH("amp__cu_unscale_kernel<<<>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_unscale_local(void *state, void *optim, void *scaler, double **buf, char *msg,
                                                  size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o || !buf)
    return amp__cu_arg(msg, cap, "amp__cu_optim_unscale_local: %s is NULL", !st ? "state" : !o ? "optim" : "buf");
  AMP__CU_ON(st);
  if (o->stats) AMP__CU_CHECK(cudaMemsetAsync(o->stats, 0, o->n_tensors * sizeof *o->stats, st->stream));
  amp__cu_unscale_kernel<<<o->n_chunks, AMP__CU_THREADS, 0, st->stream>>>(o->dev, (amp__cu_scaler_dev *)scaler,
                                                                          o->tensors, o->chunks, o->partials, o->reduce,
                                                                          o->stats);
  AMP__CU_CHECK_LAUNCH("amp__cu_unscale_kernel<<<>>> (data-parallel)");
  *buf = o->reduce;
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_unscale_finish(void *state, void *optim, void *scaler, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o) return amp__cu_arg(msg, cap, "amp__cu_optim_unscale_finish: %s is NULL", !st ? "state" : "optim");
  AMP__CU_ON(st);
  amp__cu_unscale_finish_kernel<<<1, 1, 0, st->stream>>>(o->dev, (amp__cu_scaler_dev *)scaler, o->reduce);
  AMP__CU_CHECK_LAUNCH("amp__cu_unscale_finish_kernel<<<1, 1>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_step(void *state, void *optim, void *scaler, int update_scaler, char *msg,
                                         size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o) return amp__cu_arg(msg, cap, "amp__cu_optim_step: %s is NULL", !st ? "state" : "optim");
  if (update_scaler && !scaler)
    return amp__cu_arg(msg, cap, "amp__cu_optim_step: update_scaler %d with scaler NULL", update_scaler);
  AMP__CU_ON(st);
  amp__cu_scaler_dev *sc = (amp__cu_scaler_dev *)scaler;
  int rule = update_scaler != 0, launched = 0;
#define AMP__CU_STEP_CASE(K, NAME, NM, LR, B1, B2, COEFS, ELEM, DEV, VEC) \
  case K: \
    launched = amp__cu_step_launch<K, DEV>::go(o->n_chunks, st->stream, o->dev, sc, rule, o->tensors, o->chunks, \
                                               o->forms, o->has_f8); \
    break;
  switch ((amp_optim_kind)o->kind) { AMP__OPTIM_KINDS(AMP__CU_STEP_CASE) default: break; }
#undef AMP__CU_STEP_CASE
  if (!launched) return amp__cu_arg(msg, cap, "amp__cu_optim_step: kind %d has no step kernel", o->kind);
  AMP__CU_CHECK_LAUNCH("amp__cu_step_kernel<<<>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_read(void *state, const void *optim, amp_cu_optim_info *info, char *msg,
                                         size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  const amp__cu_optim *o = (const amp__cu_optim *)optim;
  amp__cu_optim_dev hb;
  if (!st || !o || !info)
    return amp__cu_arg(msg, cap, "amp__cu_optim_read: %s is NULL", !st ? "state" : !o ? "optim" : "info");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMemcpyAsync(&hb, o->dev, sizeof hb, cudaMemcpyDeviceToHost, st->stream));
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  info->t = hb.t; info->skipped = hb.skipped; info->norm = hb.norm; info->clip = hb.clip;
  info->mul = hb.mul; info->skip = hb.skip; info->spike = hb.spike; info->spike_skips = hb.spike_skips;
  info->window = hb.win; info->scale = hb.scale; info->passes = hb.passes;
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_stats_read(void *state, const void *optim, amp__tensor *ts, size_t n_tensors,
                                               char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  const amp__cu_optim *o = (const amp__cu_optim *)optim;
  if (!st || !o || !ts)
    return amp__cu_arg(msg, cap, "amp__cu_optim_stats_read: %s is NULL", !st ? "state" : !o ? "optim" : "tensors");
  if (!o->stats) return amp__cu_arg(msg, cap, "amp__cu_optim_stats_read: the optimizer was made with stats off");
  if (n_tensors != o->n_tensors)
    return amp__cu_arg(msg, cap, "amp__cu_optim_stats_read: n_tensors %zu but the optimizer has %zu", n_tensors,
                       o->n_tensors);
  AMP__CU_ON(st);
  // one row per tensor: each device entry into its record's gstat
  AMP__CU_CHECK(cudaMemcpy2DAsync(&ts[0].gstat, sizeof *ts, o->stats, sizeof *o->stats, sizeof *o->stats, n_tensors,
                                  cudaMemcpyDeviceToHost, st->stream));
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_state_io(void *state, void *optim, size_t index, int which, float *host,
                                             int to_device, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o || !host)
    return amp__cu_arg(msg, cap, "amp__cu_optim_state_io: %s is NULL", !st ? "state" : !o ? "optim" : "host");
  if (index >= o->n_tensors)
    return amp__cu_arg(msg, cap, "amp__cu_optim_state_io: index %zu but %zu tensors", index, o->n_tensors);
  if (which < 0 || which > 2 || (which == 1 && !o->has_m) || (which == 2 && !o->has_v) ||
      (which == 0 && o->moffset[index] == SIZE_MAX))
    return amp__cu_arg(msg, cap, "amp__cu_optim_state_io: which %d is not kept by this optimizer for tensor %zu", which,
                       index);
  AMP__CU_ON(st);
  // the master as f32; a moment as kept (amp__moment_bytes: the checkpoint's bytes, not widened)
  void *d = which == 0 ? (void *)(o->slab + o->moffset[index])
                       : (void *)((char *)(o->slab + o->mtotal) + (size_t)(which == 1 ? 0 : o->has_m) * o->total +
                                  o->offset[index]);
  size_t bytes = which > 0 ? amp__moment_bytes(o->host[index].moments, o->n[index]) : o->n[index] * sizeof(float);
  if (to_device) AMP__CU_CHECK(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, st->stream));
  else AMP__CU_CHECK(cudaMemcpyAsync(host, d, bytes, cudaMemcpyDeviceToHost, st->stream));
  AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_set_step(void *state, void *optim, int64_t t, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o) return amp__cu_arg(msg, cap, "amp__cu_optim_set_step: %s is NULL", !st ? "state" : "optim");
  if (t < 0) return amp__cu_arg(msg, cap, "amp__cu_optim_set_step: t %lld must be >= 0", (long long)t);
  AMP__CU_ON(st);
  amp__cu_set_step_kernel<<<1, 1, 0, st->stream>>>(o->dev, (long long)t);
  AMP__CU_CHECK_LAUNCH("amp__cu_set_step_kernel<<<1, 1>>>");
  return AMP_OK;
}

extern "C" amp_status amp__cu_optim_set_spike(void *state, void *optim, int64_t spike_skips, const amp__spike_window *w,
                                              char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__cu_optim *o = (amp__cu_optim *)optim;
  if (!st || !o || !w)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_spike: %s is NULL", !st ? "state" : !o ? "optim" : "w");
  if (spike_skips < 0)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_spike: spike_skips %lld must be >= 0", (long long)spike_skips);
  if (w->count < 0 || w->count > AMP__SPIKE_WINDOW || w->next < 0 || w->next >= AMP__SPIKE_WINDOW)
    return amp__cu_arg(msg, cap, "amp__cu_optim_set_spike: window count %d / next %d out of range", (int)w->count,
                       (int)w->next);
  AMP__CU_ON(st);
  amp__cu_set_spike_kernel<<<1, 1, 0, st->stream>>>(o->dev, (long long)spike_skips, *w);
  AMP__CU_CHECK_LAUNCH("amp__cu_set_spike_kernel<<<1, 1>>>");
  return AMP_OK;
}

// ---- plumbing: memory, copies, streams, graphs

extern "C" amp_status amp__cu_malloc(void *state, void **p, size_t bytes, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st || !p) return amp__cu_arg(msg, cap, "amp__cu_malloc: %s is NULL", !st ? "state" : "p");
  if (bytes == 0) return amp__cu_arg(msg, cap, "amp__cu_malloc: bytes is 0");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMalloc(p, bytes));
  return AMP_OK;
}
extern "C" amp_status amp__cu_scratch_alloc(void *state, void **p, size_t bytes, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st || !p) return amp__cu_arg(msg, cap, "amp__cu_scratch_alloc: %s is NULL", !st ? "state" : "p");
  if (bytes == 0) return amp__cu_arg(msg, cap, "amp__cu_scratch_alloc: bytes is 0");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMallocAsync(p, bytes, st->stream));
  return AMP_OK;
}
extern "C" void amp__cu_scratch_free(void *state, void *p) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st || !p) return;
  AMP__CU_ON_VOID(st);
  cudaFreeAsync(p, st->stream);
}
extern "C" void amp__cu_free(void *state, void *p) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!p || !st) return;
  AMP__CU_ON_VOID(st);
  cudaStreamSynchronize(st->stream);
  cudaFree(p);
}
extern "C" amp_status amp__cu_copy(void *state, void *dst, const void *src, size_t bytes, int dir, char *msg,
                                   size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  static const cudaMemcpyKind kinds[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_copy: state is NULL");
  if (dir < 0 || dir > 2) return amp__cu_arg(msg, cap, "amp__cu_copy: dir %d must be 0, 1 or 2", dir);
  if (bytes == 0) return AMP_OK;
  if (!dst || !src) return amp__cu_arg(msg, cap, "amp__cu_copy: %s is NULL", dst ? "src" : "dst");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaMemcpyAsync(dst, src, bytes, kinds[dir], st->stream));
  if (dir != 2) AMP__CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}
extern "C" amp_status amp__cu_stream_create(int ordinal, void **stream, char *msg, size_t cap) {
  cudaStream_t s;
  if (!stream) return amp__cu_arg(msg, cap, "amp__cu_stream_create: stream is NULL");
  amp__cu_scope caller;   // the caller's context comes back on return
  if (!caller.saved) return amp__cu_scope_fail(msg, cap, -1, __FILE__, __LINE__);
  AMP__CU_CHECK(cudaSetDevice(ordinal));
  AMP__CU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = (void *)s;
  return AMP_OK;
}
extern "C" void amp__cu_stream_destroy(void *stream) {
  if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

struct amp__cu_graph { cudaGraph_t g; cudaGraphExec_t e; };

extern "C" amp_status amp__cu_capture_begin(void *state, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_capture_begin: state is NULL");
  if (!st->stream)
    return amp__cu_arg(msg, cap,
                       "amp__cu_capture_begin: the device uses the legacy default stream, which cannot be captured; "
                       "open it with a stream of its own");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal));
  return AMP_OK;
}
extern "C" amp_status amp__cu_capture_end(void *state, void **graph, size_t *kernel_nodes, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  cudaGraph_t g = NULL;
  if (!st || !graph) return amp__cu_arg(msg, cap, "amp__cu_capture_end: %s is NULL", !st ? "state" : "graph");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaStreamEndCapture(st->stream, &g));
  size_t count = 0, kernels = 0;
  cudaError_t e = cudaGraphGetNodes(g, NULL, &count);
  cudaGraphNode_t *nodes = count ? (cudaGraphNode_t *)calloc(count, sizeof *nodes) : NULL;
  if (e == cudaSuccess && count) e = nodes ? cudaGraphGetNodes(g, nodes, &count) : cudaErrorMemoryAllocation;
  for (size_t i = 0; e == cudaSuccess && i < count; i++) {
    cudaGraphNodeType t;
    e = cudaGraphNodeGetType(nodes[i], &t);
    kernels += t == cudaGraphNodeTypeKernel;
  }
  free(nodes);
  amp__cu_graph *h = (amp__cu_graph *)calloc(1, sizeof *h);
  if (e == cudaSuccess && !h) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&h->e, g, 0);
  if (e != cudaSuccess) {
    cudaGraphDestroy(g); free(h);
    return amp__cu_fail(msg, cap, "cudaGraphInstantiate / cudaGraphGetNodes", cudaGetErrorName(e), __FILE__, __LINE__);
  }
  h->g = g;
  if (kernel_nodes) *kernel_nodes = kernels;
  *graph = h;
  return AMP_OK;
}
extern "C" amp_status amp__cu_graph_launch(void *state, void *graph, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st || !graph) return amp__cu_arg(msg, cap, "amp__cu_graph_launch: %s is NULL", !st ? "state" : "graph");
  AMP__CU_ON(st);
  AMP__CU_CHECK(cudaGraphLaunch(((amp__cu_graph *)graph)->e, st->stream));
  return AMP_OK;
}
extern "C" void amp__cu_graph_destroy(void *graph) {
  amp__cu_graph *h = (amp__cu_graph *)graph;
  if (!h) return;
  cudaGraphExecDestroy(h->e);
  cudaGraphDestroy(h->g);
  free(h);
}

// ------------------------------------------------------------------------------------------------
// Matrix product
//
// amp_gemm on a CUDA device. amp.h has checked every argument; here the product is put in
// cuBLASLt's column-major terms and handed to one of three paths:
//   1. cuBLASLt (AMP_GEMM_AUTO): the heuristic's algorithm, the bias and ReLU fused as an
//      epilogue where cuBLASLt offers them, else (and GELU always) our epilogue kernel after it;
//      the descriptors and the algorithm are cached per problem (one cache per device, under a
//      lock), so a repeated call is one cublasLtMatmul;
//   2. the plain kernel (AMP_GEMM_SIMPLE, and AUTO when cuBLASLt has no algorithm for the types or
//      alignment): one thread per element of C, correct for every shape;
//   3. the WMMA teaching kernel (AMP_GEMM_WMMA), further down.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

// The product in column-major terms: D (m x n, column j at c + j*ldc) = alpha op(A) op(B) + beta D,
// op(A) m x k, op(B) k x n. A row-major C = op(A) op(B) is, on the same memory, the column-major
// C^T = op(B)^T op(A)^T: so a row-major call swaps A with B, ta with tb and m with n, and its bias
// (one value per column of C) becomes one value per row of D.
struct amp__gemm_prob {
  int m, n, k;
  int ta, tb;                 // 1: op(X) = X^T
  const void *a, *b;
  void *c;
  int lda, ldb, ldc;
  amp_dtype in, out;
  float alpha, beta;
  const void *bias;           // NULL: none
  amp_dtype bias_type;
  int bias_on_rows;           // 1: D(i,j) += bias[i]; 0: += bias[j]
  int act;
  // the fp8 product (amp__gemm_fp8_mode): b's own type, and device pointers, NULL when not given
  amp_dtype in_b;             // == in outside the fp8 product
  const float *sa, *sb;       // the scale_invs of a and b (NULL: 1)
  const float *cs;            // an fp8 D's c_scale
  float *amax;                // c_amax
  // block scales of a and b (NULL: none), their kinds, 1 where k runs along the stored rows
  // (amp__gemm_block_scale_at's kcol), and the blocks' width along k (0: no block scales)
  const void *bsa, *bsb;
  amp_block_scaling bka, bkb;
  int kca, kcb, bw;
  int fast;                   // opts->fp8_fast_accum (cuBLASLt's FAST_ACCUM; per-tensor scales only)
  // what cuBLASLt reads as its A and B scales (amp__gemm_fp8): 0 per-tensor (sa, sb are scalars), or
  // AMP__LT_VEC128 / AMP__LT_BLK128 (sa, sb point at block scales in cuBLASLt's layout)
  int lt_ma, lt_mb;
};

static amp__gemm_prob amp__gemm_canon(amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k, float alpha,
                                      const void *A, amp_dtype at, int lda, const void *B, amp_dtype bt, int ldb,
                                      float beta, void *C, amp_dtype ct, int ldc, const amp_gemm_opts *o) {
  amp__gemm_prob p;
  memset(&p, 0, sizeof p);
  int row = layout == AMP_ROW_MAJOR;
  p.m = row ? n : m; p.n = row ? m : n; p.k = k;
  p.a = row ? B : A; p.lda = row ? ldb : lda; p.ta = (row ? tb : ta) == AMP_TRANS;
  p.b = row ? A : B; p.ldb = row ? lda : ldb; p.tb = (row ? ta : tb) == AMP_TRANS;
  p.c = C; p.ldc = ldc; p.in = row ? bt : at; p.in_b = row ? at : bt; p.out = ct; p.alpha = alpha; p.beta = beta;
  p.bias = o->bias; p.bias_type = o->bias_type; p.bias_on_rows = row; p.act = (int)o->act;
  p.sa = row ? o->b_scale_inv : o->a_scale_inv; p.sb = row ? o->a_scale_inv : o->b_scale_inv;
  p.cs = o->c_scale; p.amax = o->c_amax;
  // block scales (the CPU's a_kcol / b_kcol, per operand of the user's call, then swapped as above)
  int a_kcol = row == (ta == AMP_NO_TRANS), b_kcol = row == (tb == AMP_TRANS);
  p.bsa = row ? o->b_scales : o->a_scales; p.bka = row ? o->b_blocks : o->a_blocks; p.kca = row ? b_kcol : a_kcol;
  p.bsb = row ? o->a_scales : o->b_scales; p.bkb = row ? o->a_blocks : o->b_blocks; p.kcb = row ? a_kcol : b_kcol;
  p.bw = o->a_scales ? amp__gemm_block_width(o->a_blocks) : o->b_scales ? amp__gemm_block_width(o->b_blocks) : 0;
  p.fast = o->fp8_fast_accum;
  return p;
}

// Element (i, p) of op(A), (p, j) of op(B), (i, j) of D: the offsets in elements.
static __device__ __forceinline__ size_t amp__ga(const amp__gemm_prob &p, int i, int q) {
  return p.ta ? (size_t)i * p.lda + q : (size_t)q * p.lda + i;
}
static __device__ __forceinline__ size_t amp__gb(const amp__gemm_prob &p, int q, int j) {
  return p.tb ? (size_t)q * p.ldb + j : (size_t)j * p.ldb + q;
}

// The epilogue of one element, t the f32 value before bias and activation.
static __device__ __forceinline__ void amp__gemm_put(const amp__gemm_prob &p, int i, int j, float t) {
  float bias = p.bias ? amp__load(p.bias, p.bias_type, (size_t)(p.bias_on_rows ? i : j)) : 0.0f;
  amp__store(p.c, p.out, (size_t)j * p.ldc + i, amp__gemm_epi(t, p.bias != NULL, bias, p.act));
}

// mode 0: D = epi(beta D) (k 0 or alpha 0: A and B are not read). mode 1: D = epi(D) (cuBLASLt
// has computed alpha op(A) op(B) + beta D and could not fuse the bias or activation).
__global__ void amp__k_gemm_epilogue(amp__gemm_prob p, int mode) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.m) return;
  for (int j = blockIdx.y; j < p.n; j += gridDim.y) {
    size_t at = (size_t)j * p.ldc + i;
    float c = (mode == 1 || p.beta != 0.0f) ? amp__load(p.c, p.out, at) : 0.0f;
    amp__gemm_put(p, i, j, mode == 1 ? c : amp__gemm_scale(p.beta, c));
  }
}

// The plain kernel: one thread per element of D, the k products summed in order in f32.
__global__ void amp__k_gemm_simple(amp__gemm_prob p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.m) return;
  for (int j = blockIdx.y; j < p.n; j += gridDim.y) {
    float acc = 0.0f;
    for (int q = 0; q < p.k; q++)
      acc += amp__load(p.a, p.in, amp__ga(p, i, q)) * amp__load(p.b, p.in, amp__gb(p, q, j));
    size_t at = (size_t)j * p.ldc + i;
    float c = p.beta != 0.0f ? amp__load(p.c, p.out, at) : 0.0f;
    amp__gemm_put(p, i, j, amp__gemm_blend(acc, p.alpha, p.beta, c));
  }
}

static amp_status amp__gemm_launch_elementwise(amp__cu_state *st, const amp__gemm_prob &p, int simple, int mode,
                                               char *msg, size_t cap) {
  dim3 block(128), grid((unsigned)((p.m + 127) / 128), (unsigned)(p.n < 65535 ? p.n : 65535));
  if (simple) amp__k_gemm_simple<<<grid, block, 0, st->stream>>>(p);
  else amp__k_gemm_epilogue<<<grid, block, 0, st->stream>>>(p, mode);
  AMP__CU_CHECK(cudaGetLastError());
  return AMP_OK;
}

// ---- The fp8 product (the manual's "fp8 inputs and outputs") ----------------------------------
//
// The sum of one element as the CPU reference forms it: the k products in order, each product
// rounded to f32 and then added (amp__fmul, amp__fadd: never fused). For fp8 x fp8 and fp8 x 16-bit
// the products are exact, so this is an fmaf chain's bits too; an f32 operand (beside fp8, or f32
// x f32 with c_amax or a scale) has inexact products, which an fmaf would round once with the add.
// With block scales, each block of p.bw along k is summed on its own and added in k order times
// its two scales (the CPU's fl32(acc + fl32(fl32(sa sb) part))).
static __device__ float amp__gemm_fp8_sum(const amp__gemm_prob &p, int i, int j) {
  const int w = p.bw > 0 ? p.bw : p.k;
  float acc = 0.0f;
  for (int p0 = 0; p0 < p.k; p0 += w) {
    float part = 0.0f;
    for (int q = p0; q < p0 + w && q < p.k; q++)
      part = amp__fadd(part, amp__fmul(amp__load(p.a, p.in, amp__ga(p, i, q)), amp__load(p.b, p.in_b, amp__gb(p, q, j))));
    if (p.bw == 0) return part;
    float sa = p.bsa ? amp__gemm_block_scale_at(p.bsa, p.bka, p.kca, i, p0, p.k, p.m) : 1.0f;
    float sb = p.bsb ? amp__gemm_block_scale_at(p.bsb, p.bkb, p.kcb, j, p0, p.k, p.n) : 1.0f;
    acc = amp__fadd(acc, amp__fmul(amp__fmul(sa, sb), part));
  }
  return acc;
}
//
// amp__k_gemm_fp8 is both the plain fp8 kernel (T NULL: one thread per element of D, for every
// type pair, layout, shape and block scaling) and the epilogue after cuBLASLt (T: cuBLASLt's fl32(s acc), ldt
// apart): the CPU's element functions (amp__gemm_fp8_factor, amp__gemm_fp8_epi) on each result,
// the amax as a max of |t|'s bits (a NaN wins), reduced per warp, then one atomicMax per warp
// into *p.amax, which the caller has zeroed in stream order.
__global__ void amp__k_gemm_fp8(amp__gemm_prob p, const float *T, int ldt) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t amax = 0u;
  if (i < p.m) {
    float s = amp__gemm_fp8_factor(p.alpha, p.sa, p.sb), cs = p.cs ? *p.cs : 1.0f;
    for (int j = blockIdx.y; j < p.n; j += gridDim.y) {
      float sacc = 0.0f, out;
      if (T) sacc = T[(size_t)j * ldt + i];
      else if (s != 0.0f && p.k > 0) sacc = amp__fmul(s, amp__gemm_fp8_sum(p, i, j));   // s 0: A, B not read
      size_t at = (size_t)j * p.ldc + i;
      float c = p.beta != 0.0f ? amp__load(p.c, p.out, at) : 0.0f;
      float bias = p.bias ? amp__load(p.bias, p.bias_type, (size_t)(p.bias_on_rows ? i : j)) : 0.0f;
      float t = amp__gemm_fp8_epi(sacc, p.beta, c, p.bias != NULL, bias, p.act, p.cs != NULL, cs, &out);
      uint32_t a = amp__f32_bits(t) & 0x7fffffffu;
      amax = a > amax ? a : amax;
      amp__store(p.c, p.out, at, out);
    }
  }
  if (!p.amax) return;
  for (int o = 16; o > 0; o >>= 1) {   // every lane takes part (blockDim is a multiple of 32)
    uint32_t b = __shfl_xor_sync(0xffffffffu, amax, o);
    amax = b > amax ? b : amax;
  }
  if ((threadIdx.x & 31) == 0 && amax) atomicMax((unsigned int *)p.amax, (unsigned int)amax);
}

// Copies op(X)'s r x k codes (element (i, q) at x[i * rs + q * ks]) to dst, row i at dst + i * kp,
// zeros from k to kp: the k-contiguous operand, 16-byte rows, that cuBLASLt's fp8 kernels take
// ("TN"). A zero code is +0 in both formats, so the padding adds nothing to the sums.
__global__ void amp__k_gemm_pack8(uint8_t *dst, const uint8_t *x, int r, int k, int kp, size_t rs, size_t ks) {
  size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (size_t)r * (size_t)kp) return;
  int i = (int)(e / (size_t)kp), q = (int)(e % (size_t)kp);
  dst[e] = q < k ? x[(size_t)i * rs + (size_t)q * ks] : (uint8_t)0;
}

// One operand's 1 x 128 or 128 x 128 scales into the layout cuBLASLt's block-scaled fp8 kernels read
// (amp.h's amp__gemm_lt_scale128 says which; amp_quantize_blocks stores 1 x 128 scales row by row and
// 128 x 128 ones unpadded, along the stored rows, which may be k): one thread per element.
__global__ void amp__k_gemm_scales128(float *dst, const void *sc, amp_block_scaling kind, int kcol, int r, int k) {
  size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < amp__gemm_lt_scales128_count(kind, r, k)) dst[e] = amp__gemm_lt_scale128(sc, kind, kcol, r, k, e);
}

static amp_status amp__gemm_launch_fp8(amp__cu_state *st, const amp__gemm_prob &p, const float *T, int ldt,
                                       char *msg, size_t cap) {
  dim3 block(128), grid((unsigned)((p.m + 127) / 128), (unsigned)(p.n < 65535 ? p.n : 65535));
  if (p.amax) AMP__CU_CHECK(cudaMemsetAsync(p.amax, 0, sizeof(float), st->stream));
  amp__k_gemm_fp8<<<grid, block, 0, st->stream>>>(p, T, ldt);
  AMP__CU_CHECK(cudaGetLastError());
  return AMP_OK;
}

// ---- The WMMA teaching kernel -------------------------------------------------------------------
//
// Tensor Cores multiply small matrices in one instruction. CUDA's WMMA API (nvcuda::wmma) exposes
// them per warp: a *fragment* is a 16 x 16 tile of a matrix spread across the 32 threads of a warp
// (each thread holds 8 of the 256 elements, in an order the hardware chooses and we never need to
// know). Three calls do all the work:
//     wmma::load_matrix_sync(frag, pointer, ld)   the warp loads a 16 x 16 tile into a fragment
//     wmma::mma_sync(acc, a, b, acc)              acc += a * b for 16 x 16 x 16, on Tensor Cores
//     wmma::store_matrix_sync(pointer, acc, ld)   the warp writes the accumulator tile out
// The inputs are f16 or bf16, but the accumulator fragment is f32: a sum of thousands of products
// in f16 would lose its low bits (f16 has 11 significant bits, and 2048 + 1 = 2048 in f16), while
// each product of two f16 numbers is exact in f32. This is what "mixed precision" means on a GPU.
//
// Tiling. Each block of 256 threads (8 warps) computes a 128 x 128 tile of C. It walks along k in
// steps of 32: the block copies a 128 x 32 slab of op(A) and a 32 x 128 slab of op(B) from global
// memory into shared memory (every element is read from global memory once per block, then reused
// by many warps), waits for all threads (__syncthreads), and each warp multiplies its part. The 8
// warps sit in a 2 x 4 grid; each owns a 64 x 32 piece of the tile: 4 x 2 fragments of 16 x 16, so
// per 16-deep step it loads 4 A fragments and 2 B fragments and issues 8 mma_sync calls.
//
// Bounds. A tile that hangs over the edge of the matrix (m, n or k not a multiple of the tile) is
// filled with zeros while it is copied into shared memory: zeros add nothing to the products, so
// the fragments never need a bounds check. Only the final write checks i < m and j < n.
//
// The epilogue. The order of elements inside an accumulator fragment is opaque, so each warp
// stores its fragment to a 16 x 16 scratch in shared memory, and then its 32 threads walk that
// scratch with known coordinates: alpha * acc + beta * C, bias, activation, rounding to C's type,
// the same AMP_HD functions as the CPU reference.
//
// What it leaves out (and cuBLASLt does): double-buffered asynchronous copies (cp.async / TMA) to
// overlap loading with math, Hopper's warp-group wgmma instructions, swizzled shared memory, split-k.
namespace wmma = nvcuda::wmma;

#define AMP__WM_BM 128                 // rows of C per block
#define AMP__WM_BN 128                 // columns of C per block
#define AMP__WM_BK 32                  // depth of one shared-memory slab
#define AMP__WM_PAD 8                  // extra halves per shared row: spreads rows over memory banks,
                                       // keeps rows 16-byte aligned (WMMA needs ld % 8 == 0)
#define AMP__WM_THREADS 256            // 8 warps
#define AMP__WM_SLAB (AMP__WM_BM * (AMP__WM_BK + AMP__WM_PAD))   // halves, enough for either shape

// Copies an R x W tile whose W index is contiguous in global memory (element (r, c) at
// g[r * ld + c], tile origin (r0, c0)) into shared memory s[r * sld + c], writing zeros outside
// r < r_end, c < c_end. vec: g and ld allow 16-byte loads (8 halves at once), the fast path.
static __device__ __forceinline__ void amp__wmma_copy_tile(uint16_t *s, int sld, int R, int W, const uint16_t *g,
                                                           int ld, int r0, int c0, int r_end, int c_end, int vec) {
  const int per_row = W / 8;
  for (int v = threadIdx.x; v < R * per_row; v += blockDim.x) {
    int r = v / per_row, c = (v % per_row) * 8;     // consecutive threads read consecutive 16 bytes
    int gr = r0 + r, gc = c0 + c;
    uint16_t *dst = s + r * sld + c;
    if (vec && gr < r_end && gc + 8 <= c_end) {
      *(uint4 *)dst = *(const uint4 *)(g + (size_t)gr * ld + gc);
    } else {
      for (int e = 0; e < 8; e++) dst[e] = (gr < r_end && gc + e < c_end) ? g[(size_t)gr * ld + gc + e] : (uint16_t)0;
    }
  }
}

// A_ROW: op(A) is stored with k contiguous (shared slab [128][32], a row_major fragment);
// otherwise with m contiguous (slab [32][128], col_major). B_ROW likewise for op(B) along n.
template <typename T, bool A_ROW, bool B_ROW>
static __device__ __forceinline__ void amp__gemm_wmma_body(const amp__gemm_prob &p, int vec_a, int vec_b) {
  typedef typename std::conditional<A_ROW, wmma::row_major, wmma::col_major>::type a_layout;
  typedef typename std::conditional<B_ROW, wmma::row_major, wmma::col_major>::type b_layout;
  const int lda_s = A_ROW ? AMP__WM_BK + AMP__WM_PAD : AMP__WM_BM + AMP__WM_PAD;   // shared leading dims
  const int ldb_s = B_ROW ? AMP__WM_BN + AMP__WM_PAD : AMP__WM_BK + AMP__WM_PAD;
  __shared__ __align__(32) uint16_t sA[AMP__WM_SLAB];
  __shared__ __align__(32) uint16_t sB[AMP__WM_SLAB];
  __shared__ __align__(32) float sC[AMP__WM_THREADS / 32][16 * 16];
  const uint16_t *A = (const uint16_t *)p.a, *B = (const uint16_t *)p.b;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wi = (warp % 2) * 64, wj = (warp / 2) * 32;   // this warp's 64 x 32 piece of the tile
  const int i0 = blockIdx.x * AMP__WM_BM;
  const int tiles_n = (p.n + AMP__WM_BN - 1) / AMP__WM_BN;

  for (int tj = blockIdx.y; tj < tiles_n; tj += gridDim.y) {   // (a loop only past 65535 tiles)
    const int j0 = tj * AMP__WM_BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
    #pragma unroll
    for (int fi = 0; fi < 4; fi++)
      #pragma unroll
      for (int fj = 0; fj < 2; fj++) wmma::fill_fragment(acc[fi][fj], 0.0f);

    for (int k0 = 0; k0 < p.k; k0 += AMP__WM_BK) {
      // 1. the block copies the two slabs into shared memory, zeros past the edges
      if (A_ROW) amp__wmma_copy_tile(sA, lda_s, AMP__WM_BM, AMP__WM_BK, A, p.lda, i0, k0, p.m, p.k, vec_a);
      else       amp__wmma_copy_tile(sA, lda_s, AMP__WM_BK, AMP__WM_BM, A, p.lda, k0, i0, p.k, p.m, vec_a);
      if (B_ROW) amp__wmma_copy_tile(sB, ldb_s, AMP__WM_BK, AMP__WM_BN, B, p.ldb, k0, j0, p.k, p.n, vec_b);
      else       amp__wmma_copy_tile(sB, ldb_s, AMP__WM_BN, AMP__WM_BK, B, p.ldb, j0, k0, p.n, p.k, vec_b);
      __syncthreads();                                  // the slabs are complete
      // 2. each warp: two 16-deep steps of 4 x 2 fragment products
      #pragma unroll
      for (int kk = 0; kk < AMP__WM_BK; kk += 16) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, b_layout> bf[2];
        #pragma unroll
        for (int fj = 0; fj < 2; fj++) {
          const uint16_t *src = B_ROW ? sB + kk * ldb_s + wj + fj * 16 : sB + (wj + fj * 16) * ldb_s + kk;
          wmma::load_matrix_sync(bf[fj], (const T *)src, ldb_s);
        }
        #pragma unroll
        for (int fi = 0; fi < 4; fi++) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, a_layout> af;
          const uint16_t *src = A_ROW ? sA + (wi + fi * 16) * lda_s + kk : sA + kk * lda_s + wi + fi * 16;
          wmma::load_matrix_sync(af, (const T *)src, lda_s);
          #pragma unroll
          for (int fj = 0; fj < 2; fj++) wmma::mma_sync(acc[fi][fj], af, bf[fj], acc[fi][fj]);
        }
      }
      __syncthreads();                                  // everyone is done before the slabs are overwritten
    }

    // 3. the epilogue, one fragment at a time through this warp's scratch
    #pragma unroll
    for (int fi = 0; fi < 4; fi++)
      #pragma unroll
      for (int fj = 0; fj < 2; fj++) {
        wmma::store_matrix_sync(sC[warp], acc[fi][fj], 16, wmma::mem_col_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
          int i = i0 + wi + fi * 16 + e % 16, j = j0 + wj + fj * 16 + e / 16;   // column-major scratch
          if (i < p.m && j < p.n) {
            float c = p.beta != 0.0f ? amp__load(p.c, p.out, (size_t)j * p.ldc + i) : 0.0f;
            amp__gemm_put(p, i, j, amp__gemm_blend(sC[warp][e], p.alpha, p.beta, c));
          }
        }
        __syncwarp();                                   // the scratch is read before the next store
      }
  }
}

// bf16 fragments exist from sm_80 on: an older target compiles the bf16 kernels empty (the host
// refuses bf16 there, amp__gemm_launch_wmma), so the file still builds for sm_70/75.
template <typename T, bool A_ROW, bool B_ROW>
__global__ void __launch_bounds__(AMP__WM_THREADS) amp__k_gemm_wmma(amp__gemm_prob p, int vec_a, int vec_b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  if constexpr (std::is_same<T, __nv_bfloat16>::value) __trap();
  else
#endif
  amp__gemm_wmma_body<T, A_ROW, B_ROW>(p, vec_a, vec_b);
}

template <typename T>
static void amp__gemm_launch_wmma_t(const amp__gemm_prob &p, dim3 grid, cudaStream_t s, int va, int vb) {
  dim3 block(AMP__WM_THREADS);
  if (p.ta && p.tb)   amp__k_gemm_wmma<T, true, true><<<grid, block, 0, s>>>(p, va, vb);
  else if (p.ta)      amp__k_gemm_wmma<T, true, false><<<grid, block, 0, s>>>(p, va, vb);
  else if (p.tb)      amp__k_gemm_wmma<T, false, true><<<grid, block, 0, s>>>(p, va, vb);
  else                amp__k_gemm_wmma<T, false, false><<<grid, block, 0, s>>>(p, va, vb);
}

static amp_status amp__gemm_launch_wmma(amp__cu_state *st, const amp__gemm_prob &p, char *msg, size_t cap) {
  // op(A) is A^T stored (ta): k contiguous -> A_ROW; op(B) = B^T stored (tb): n contiguous -> B_ROW.
  int va = ((uintptr_t)p.a % 16 == 0) && (p.lda % 8 == 0), vb = ((uintptr_t)p.b % 16 == 0) && (p.ldb % 8 == 0);
  int tiles_n = (p.n + AMP__WM_BN - 1) / AMP__WM_BN;
  dim3 grid((unsigned)((p.m + AMP__WM_BM - 1) / AMP__WM_BM), (unsigned)(tiles_n < 65535 ? tiles_n : 65535));
  if (p.in == AMP_BF16 && st->sm_major < 8) {
    if (msg && cap) snprintf(msg, cap, "AMP_GEMM_WMMA with bf16 inputs needs sm_80 or newer (this device is sm_%d%d)",
                             st->sm_major, st->sm_minor);
    return AMP_ERR_UNSUPPORTED;
  }
  if (p.in == AMP_F16) amp__gemm_launch_wmma_t<__half>(p, grid, st->stream, va, vb);
  else amp__gemm_launch_wmma_t<__nv_bfloat16>(p, grid, st->stream, va, vb);
  AMP__CU_CHECK(cudaGetLastError());
  return AMP_OK;
}

// ---- cuBLASLt with a plan cache ----------------------------------------------------------------

#define AMP__GEMM_CACHE 32
#define AMP__GEMM_ALGOS 4   // the heuristic's choices a plan keeps (amp__gemm_ask)

enum { AMP__PLAN_FUSED = 0,   // cublasLtMatmul does it all
       AMP__PLAN_SPLIT,       // cublasLtMatmul, then amp__k_gemm_epilogue for the bias/activation
       AMP__PLAN_SIMPLE };    // cuBLASLt has no algorithm: the plain kernel

// Everything the heuristic's choice depends on. Only ints: compared with memcmp.
struct amp__gemm_key {
  int m, n, k, ta, tb, lda, ldb, ldc, in, in_b, out, tf32;
  int act, has_bias, bias_type, bias_on_rows;
  int fp8;                                     // fp8 A and B: 1 | 2 sa | 4 sb | 8 cs | 16 amax given; else 0
  int fp8_fast, lt_ma, lt_mb;                  // FAST_ACCUM, and A's and B's scale modes (amp__gemm_prob)
  int align_a, align_b, align_c, align_bias;   // the largest power of two (<= 256) dividing each address
};

struct amp__gemm_plan {
  amp__gemm_key key;
  int used;
  unsigned long long last;     // for least-recently-used eviction
  int kind;
  cublasLtEpilogue_t epi;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayout_t ld;   // D's layout where its type is not C's (an fp8 D), else NULL: lc
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulAlgo_t more[AMP__GEMM_ALGOS - 1];   // the heuristic's next choices, best first: what an
  int n_more, next_more;                            // fp8 call tries where cublasLtMatmul refuses algo (the
                                                    // next one's index)
};

struct amp__gemm_cache {
  amp__gemm_plan plan[AMP__GEMM_CACHE];
  unsigned long long clock;
};

static void amp__gemm_plan_destroy(amp__gemm_plan *pl) {
  if (pl->desc) cublasLtMatmulDescDestroy(pl->desc);
  if (pl->la) cublasLtMatrixLayoutDestroy(pl->la);
  if (pl->lb) cublasLtMatrixLayoutDestroy(pl->lb);
  if (pl->lc) cublasLtMatrixLayoutDestroy(pl->lc);
  if (pl->ld) cublasLtMatrixLayoutDestroy(pl->ld);
  memset(pl, 0, sizeof *pl);
}

static void amp__cu_gemm_cache_free(amp__cu_state *st) {
  amp__gemm_cache *c = (amp__gemm_cache *)st->gemm_cache;
  if (!c) return;
  for (int i = 0; i < AMP__GEMM_CACHE; i++) if (c->plan[i].used) amp__gemm_plan_destroy(&c->plan[i]);
  free(c);
  st->gemm_cache = NULL;
}

static int amp__align_of(const void *ptr) {
  uintptr_t u = (uintptr_t)ptr;
  int a = 1;
  while (a < 256 && !(u & (uintptr_t)a)) a <<= 1;
  return a;
}

static cudaDataType_t amp__cuda_type(amp_dtype t) {
  switch (t) {
#define AMP__CU_R_(A, E, N, CT, S, MX, MN, CV, GV, CR, ...) case E: return CR;
    AMP__DTYPES(AMP__CU_R_, ~)
#undef AMP__CU_R_
    default: return CUDA_R_32F;
  }
}

// Whether cuBLASLt can add our bias: its bias runs along D's rows (ours does for row-major calls),
// and cuBLASLt documents the bias's type as D's own for our types (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE
// in cublasLt.h: other types only for IMMA and fp8 kernels). A bias of another type could be taken
// as D's type without an error, so it goes to our epilogue kernel, which reads it in its own type.
static int amp__gemm_lt_bias_ok(const amp__gemm_key &k) { return k.bias_on_rows && k.bias_type == k.out; }

// The epilogue cuBLASLt is asked for: the activation, with the bias where cuBLASLt can add it.
// GELU is never cuBLASLt's: its GELU epilogue computes tanh in a way whose accuracy cuBLASLt does
// not document, so GELU always runs in our epilogue kernel (amp__gelu_tanh, whose tanh is amp.h's
// own, amp__tanh, in double: the CPU's bits for the same input), after cuBLASLt's product and its
// fused bias where it can add the bias.
static int amp__gemm_lt_act_ok(const amp__gemm_key &k) { return k.act != AMP_ACT_GELU; }
static cublasLtEpilogue_t amp__gemm_lt_epilogue(const amp__gemm_key &k) {
  int bias = k.has_bias && amp__gemm_lt_bias_ok(k);
  if (k.act == AMP_ACT_RELU) return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// cuBLASLt's block-scaled fp8 (1 x 128 and 128 x 128 float scales, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
// and _BLK128x128_32F: Hopper, cuBLAS 12.9 and newer). Built where the headers have them; used where the
// library loaded at run time is as new (amp__gemm_fp8).
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
#define AMP__LT_BLOCK128 1
#else
#define AMP__LT_BLOCK128 0
#endif
enum { AMP__LT_SCALAR = 0, AMP__LT_VEC128, AMP__LT_BLK128 };
#if AMP__LT_BLOCK128
static int32_t amp__gemm_lt_mode(int m) {
  return m == AMP__LT_VEC128 ? (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
       : m == AMP__LT_BLK128 ? (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                             : (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}
#endif

// This call's scale and amax pointers into an fp8 plan's descriptor (set at build for the heuristic,
// and again before each call, as the bias pointer is). Only those the key says are given: a NULL
// attribute is cuBLASLt's default (scale 1, no amax), and D's scale and amax exist for an fp8 D only.
static amp_status amp__gemm_fp8_pointers(amp__gemm_plan *pl, const amp__gemm_prob &p, char *msg, size_t cap) {
  const void *sa = p.sa, *sb = p.sb, *cs = p.cs;
  void *amax = p.amax;
  if (sa) AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
  if (sb) AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
  if (cs) AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &cs, sizeof cs));
  if (amax)
    AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax, sizeof amax));
  return AMP_OK;
}

// Asks the heuristic for the best algorithm with epilogue epi; *found 0 when it has none.
static amp_status amp__gemm_ask(amp__cu_state *st, amp__gemm_plan *pl, const amp__gemm_prob &p, cublasLtEpilogue_t epi,
                                cublasLtMatmulPreference_t pref, int *found, char *msg, size_t cap) {
  uint32_t e = (uint32_t)epi;
  *found = 0;
  AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
  if (epi & CUBLASLT_EPILOGUE_BIAS) {
    // the heuristic reads the bias pointer's value for its alignment (the pointer is set again
    // before every call; the cache key holds its alignment)
    // (its type is D's, amp__gemm_lt_bias_ok: CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE stays at its default)
    AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
  }
  cublasLtMatmulHeuristicResult_t res[AMP__GEMM_ALGOS];
  int count = 0;
  memset(res, 0, sizeof res);
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, pl->desc, pl->la, pl->lb, pl->lc, pl->ld ? pl->ld : pl->lc,
                                                    pref, AMP__GEMM_ALGOS, res, &count);
  // amp.h has checked the arguments, so a refusal here means cuBLASLt has no kernel for this
  // combination of types, epilogue and alignment (e.g. f32 inputs with an f16 output)
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) return AMP_OK;
  AMP__LT_CHECK(s);
  pl->n_more = 0; pl->next_more = 0;
  for (int i = 0; i < count && i < AMP__GEMM_ALGOS; i++) {   // the best first, then the others
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (!*found) { pl->algo = res[i].algo; pl->epi = epi; *found = 1; }
    else pl->more[pl->n_more++] = res[i].algo;
  }
  return AMP_OK;
}

// Builds the descriptors and picks the algorithm. On failure pl may hold some handles: the caller
// destroys it.
static amp_status amp__gemm_plan_build(amp__cu_state *st, amp__gemm_plan *pl, const amp__gemm_prob &p, char *msg,
                                       size_t cap) {
  const amp__gemm_key &k = pl->key;
  cublasComputeType_t ct = (p.in == AMP_F32 && k.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType_t it = amp__cuda_type(p.in), itb = amp__cuda_type(p.in_b), ot = amp__cuda_type(p.out);
  int32_t opa = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int d8 = k.fp8 && amp__dtype_is_fp8(p.out);
  AMP__LT_CHECK(cublasLtMatmulDescCreate(&pl->desc, ct, CUDA_R_32F));
  AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  // layouts as stored (column-major): A is m x k, or k x m when transposed; B k x n or n x k
  AMP__LT_CHECK(cublasLtMatrixLayoutCreate(&pl->la, it, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.lda));
  AMP__LT_CHECK(cublasLtMatrixLayoutCreate(&pl->lb, itb, p.tb ? p.n : p.k, p.tb ? p.k : p.n, p.ldb));
  // an fp8 D takes a 16-bit C type (cuBLASLt's fp8 table; C is never read there: beta is 0)
  AMP__LT_CHECK(cublasLtMatrixLayoutCreate(&pl->lc, d8 ? CUDA_R_16BF : ot, p.m, p.n, p.ldc));
  if (d8) AMP__LT_CHECK(cublasLtMatrixLayoutCreate(&pl->ld, ot, p.m, p.n, p.ldc));
  if (k.fp8) {   // split accumulation (fp32 promotion of the Tensor Cores' partial sums) unless the caller
                 // opted in to FAST_ACCUM (never with block scales: those promote every 128 of k), and the scales
    int8_t fast = (int8_t)(k.fp8_fast && !k.lt_ma && !k.lt_mb);
    AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
#if AMP__LT_BLOCK128
    if (k.lt_ma || k.lt_mb) {   // 1 x 128 / 128 x 128 float scales (amp__gemm_lt_mode)
      int32_t ma = amp__gemm_lt_mode(k.lt_ma), mb = amp__gemm_lt_mode(k.lt_mb);
      AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
      AMP__LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
    }
#endif
    amp_status r = amp__gemm_fp8_pointers(pl, p, msg, cap);
    if (r != AMP_OK) return r;
  }

  cublasLtMatmulPreference_t pref = NULL;
  AMP__LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = st->workspace_size;
  uint32_t al[4] = {(uint32_t)k.align_a, (uint32_t)k.align_b, (uint32_t)k.align_c, (uint32_t)k.align_c};
  cublasStatus_t s =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4);
  // split-k may add its partial sums in the output type: for an f16/bf16 output that would be a
  // second, low-precision accumulation. Only f32 partials (COMPUTE_TYPE) keep fp32 accumulation.
  // fp8: f32 partials only, whatever the output. (The other types allow in-place split-k for an
  // f32 D; the fp8 algorithms an H200 refused at cublasLtMatmul were all of an f32 D, so fp8 plans
  // leave it out. Whether it was the cause, no GPU has shown yet.)
  uint32_t schemes = p.out == AMP_F32 && !k.fp8 ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK
                                                : (uint32_t)CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, 4);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreferenceDestroy(pref);
    return amp__cu_fail(msg, cap, "cublasLtMatmulPreferenceSetAttribute", amp__cublas_status_name(s), __FILE__,
                        __LINE__);
  }
  // the fused epilogue first (not for a bias cuBLASLt cannot add: one per column of D, or of
  // another type than D); then the bare product followed by our epilogue kernel; then, with no
  // algorithm at all, the plain kernel
  cublasLtEpilogue_t want = amp__gemm_lt_epilogue(k);
  int can_fuse = !(k.has_bias && !amp__gemm_lt_bias_ok(k)), has_epilogue = k.act != AMP_ACT_NONE || k.has_bias;
  int found = 0;
  amp_status r = AMP_OK;
  // SPLIT with a fused bias (pl->epi has BIAS): our kernel then applies only the activation
  pl->kind = amp__gemm_lt_act_ok(k) ? AMP__PLAN_FUSED : AMP__PLAN_SPLIT;
  if (can_fuse) r = amp__gemm_ask(st, pl, p, want, pref, &found, msg, cap);
  if (r == AMP_OK && !found && has_epilogue) {
    r = amp__gemm_ask(st, pl, p, CUBLASLT_EPILOGUE_DEFAULT, pref, &found, msg, cap);
    pl->kind = AMP__PLAN_SPLIT;
  }
  if (r == AMP_OK && !found) pl->kind = AMP__PLAN_SIMPLE;
  cublasLtMatmulPreferenceDestroy(pref);
  return r;
}

// The cached plan for this problem, built on a miss (evicting the least recently used).
static amp_status amp__gemm_plan_get(amp__cu_state *st, const amp__gemm_prob &p, int tf32, amp__gemm_plan **out,
                                     char *msg, size_t cap) {
  amp__gemm_cache *c = (amp__gemm_cache *)st->gemm_cache;
  if (!c) {
    c = (amp__gemm_cache *)calloc(1, sizeof *c);
    if (!c) { if (msg && cap) snprintf(msg, cap, "out of host memory for the plan cache"); return AMP_ERR_NOMEM; }
    st->gemm_cache = c;
  }
  amp__gemm_key key;
  memset(&key, 0, sizeof key);
  key.m = p.m; key.n = p.n; key.k = p.k; key.ta = p.ta; key.tb = p.tb;
  key.lda = p.lda; key.ldb = p.ldb; key.ldc = p.ldc; key.in = (int)p.in; key.in_b = (int)p.in_b; key.out = (int)p.out;
  key.fp8 = amp__dtype_is_fp8(p.in) ? 1 | (p.sa ? 2 : 0) | (p.sb ? 4 : 0) | (p.cs ? 8 : 0) | (p.amax ? 16 : 0) : 0;
  key.fp8_fast = key.fp8 ? p.fast : 0; key.lt_ma = key.fp8 ? p.lt_ma : 0; key.lt_mb = key.fp8 ? p.lt_mb : 0;
  key.tf32 = p.in == AMP_F32 && tf32; key.act = p.act; key.has_bias = p.bias != NULL;
  key.bias_type = p.bias ? (int)p.bias_type : 0; key.bias_on_rows = p.bias ? p.bias_on_rows : 0;
  key.align_a = amp__align_of(p.a); key.align_b = amp__align_of(p.b); key.align_c = amp__align_of(p.c);
  key.align_bias = p.bias ? amp__align_of(p.bias) : 0;
  c->clock++;
  int victim = 0;
  for (int i = 0; i < AMP__GEMM_CACHE; i++) {
    amp__gemm_plan *pl = &c->plan[i];
    if (pl->used && !memcmp(&pl->key, &key, sizeof key)) { pl->last = c->clock; *out = pl; return AMP_OK; }
    if (!pl->used) { if (c->plan[victim].used) victim = i; }
    else if (c->plan[victim].used && pl->last < c->plan[victim].last) victim = i;
  }
  amp__gemm_plan *pl = &c->plan[victim];
  if (pl->used) amp__gemm_plan_destroy(pl);
  pl->key = key;
  amp_status r = amp__gemm_plan_build(st, pl, p, msg, cap);
  if (r != AMP_OK) { amp__gemm_plan_destroy(pl); return r; }
  pl->used = 1; pl->last = c->clock;
  *out = pl;
  return AMP_OK;
}

// The packed copies of the operands q (what cuBLASLt reads) has in place of p's, then cuBLASLt's
// fp8 product with this call's scale and amax pointers. The caller holds the plan cache's lock.
static amp_status amp__gemm_fp8_enqueue(amp__cu_state *st, amp__gemm_plan *pl, const amp__gemm_prob &p,
                                        const amp__gemm_prob &q, char *msg, size_t cap) {
  const size_t na = (size_t)p.m * q.k, nb = (size_t)p.n * q.k;
  if (q.a != p.a)   // op(A)(i, q) at i lda + q (ta) or q lda + i
    amp__k_gemm_pack8<<<(unsigned)((na + 255) / 256), 256, 0, st->stream>>>(
        (uint8_t *)const_cast<void *>(q.a), (const uint8_t *)p.a, p.m, p.k, q.k, p.ta ? (size_t)p.lda : 1,
        p.ta ? 1 : (size_t)p.lda);
  if (q.b != p.b)   // op(B)(q, j) at q ldb + j (tb) or j ldb + q
    amp__k_gemm_pack8<<<(unsigned)((nb + 255) / 256), 256, 0, st->stream>>>(
        (uint8_t *)const_cast<void *>(q.b), (const uint8_t *)p.b, p.n, p.k, q.k, p.tb ? 1 : (size_t)p.ldb,
        p.tb ? (size_t)p.ldb : 1);
  AMP__CU_CHECK(cudaGetLastError());
  amp_status r = amp__gemm_fp8_pointers(pl, q, msg, cap);
  if (r != AMP_OK) return r;
  // an fp8 D has no C (beta is 0): C NULL there, its C layout's type not being D's
  // The heuristic can offer an fp8 algorithm that cublasLtMatmul then refuses, having launched
  // nothing (an H200 with cuBLAS 13.1 did so for per-tensor fp8 with an f32 D): the plan drops it
  // for the heuristic's next choice, and with none left is marked as having no algorithm, so this
  // call and every later one of its key take the next path (amp__gemm_fp8).
  for (;;) {
    cublasStatus_t s = cublasLtMatmul(st->lt, pl->desc, &q.alpha, q.a, pl->la, q.b, pl->lb, &q.beta,
                                      pl->ld ? NULL : q.c, pl->lc, q.c, pl->ld ? pl->ld : pl->lc, &pl->algo,
                                      st->workspace, st->workspace_size, st->stream);
    if (s != CUBLAS_STATUS_NOT_SUPPORTED) { AMP__LT_CHECK(s); return AMP_OK; }
    if (pl->next_more == pl->n_more) { pl->kind = AMP__PLAN_SIMPLE; return AMP_OK; }
    pl->algo = pl->more[pl->next_more++];
  }
}

// One try of cuBLASLt for the fp8 product q (its plan; the enqueue where it has an algorithm):
// *kind AMP__PLAN_SIMPLE when it has none. p: the call as given, for the packed copies.
static amp_status amp__gemm_fp8_try(amp__cu_state *st, const amp__gemm_prob &p, const amp__gemm_prob &q, int *kind,
                                    char *msg, size_t cap) {
  std::lock_guard<std::mutex> lock(st->gemm_lock);   // as in amp__cu_gemm
  amp__gemm_plan *pl = NULL;
  // a plan cuBLASLt refuses to build (an fp8 attribute, a scale mode this library lacks) is one
  // with no algorithm: the plain kernel, as the manual says, not an error
  if (amp__gemm_plan_get(st, q, 0, &pl, msg, cap) != AMP_OK) { *kind = AMP__PLAN_SIMPLE; return AMP_OK; }
  amp_status r = pl->kind != AMP__PLAN_SIMPLE ? amp__gemm_fp8_enqueue(st, pl, p, q, msg, cap) : AMP_OK;
  *kind = pl->kind;   // (after the enqueue: cublasLtMatmul may have refused the algorithm)
  return r;
}

// The fp8 product (amp__gemm_fp8_mode). cuBLASLt (AUTO, fp8 A and B, sm_89 or newer) computes
// alpha sa sb op(A) op(B) (+ beta C) with the scales read from device pointers and FAST_ACCUM off
// (unless opts->fp8_fast_accum), in its fp8 kernels' "TN" form: an operand whose k is not contiguous, or that is not 16-byte
// aligned, or whose ld or k is not a multiple of 16, is first copied into a packed operand
// (amp__k_gemm_pack8, k padded with zeros to kp). cuBLASLt writes C itself when nothing follows
// (no bias or activation, and an amax only for an fp8 D: AMAX_D, with c_scale as D_SCALE) and it
// has an algorithm for C as given; else it writes an f32 scratch T (16-byte columns) that
// amp__k_gemm_fp8 finishes as the CPU does. Block scales of 1 x 128 / 128 x 128 on both operands
// (no per-tensor scale_inv) on sm_90: the same with cuBLASLt's block-scaled modes, the scales copied
// into its layout (amp__k_gemm_scales128) and k padded to a multiple of 128. FAST_ACCUM only where
// the caller asked (opts->fp8_fast_accum) and the scales are per-tensor. Anything else (another
// algo, a 16-bit or f32 operand, other block scales, an older GPU, no algorithm even for T): the
// plain fp8 kernel. The scratch is stream-ordered (cudaMallocAsync / cudaFreeAsync): no host wait.
static amp_status amp__gemm_fp8(amp__cu_state *st, const amp__gemm_prob &p, int algo, char *msg, size_t cap) {
  if (p.m == 0 || p.n == 0) {   // only the amax to write: the max over no results
    if (p.amax) AMP__CU_CHECK(cudaMemsetAsync(p.amax, 0, sizeof(float), st->stream));
    return AMP_OK;
  }
  // block scales go to cuBLASLt where both operands have 128-wide float blocks and no per-tensor
  // scale_inv beside them, on sm_90 (the GPUs whose cuBLASLt has these modes), with headers and
  // library of cuBLAS 12.9 or newer; k is then padded to a multiple of 128 (zero codes add nothing).
  // A 1 x 128 operand's rows must be a multiple of 4: its scales' leading dimension is then the
  // same whether cuBLASLt reads it as the row count or as the row count rounded up to 4 (DeepGEMM's
  // TMA-aligned layout, which callers of these modes use); no GPU has yet shown which it reads.
  const int blk128 = AMP__LT_BLOCK128 && p.bw == 128 && p.bsa && p.bsb && !p.sa && !p.sb && st->sm_major == 9 &&
                     (p.bka == AMP_BLOCK_128x128 || p.m % 4 == 0) && (p.bkb == AMP_BLOCK_128x128 || p.n % 4 == 0) &&
                     cublasLtGetVersion() >= 120900;
  if (!(algo == AMP_GEMM_AUTO && amp__dtype_is_fp8(p.in) && amp__dtype_is_fp8(p.in_b) && p.k > 0 &&
        p.alpha != 0.0f && (p.bw == 0 || blk128) && st->sm_major * 10 + st->sm_minor >= 89))
    return amp__gemm_launch_fp8(st, p, NULL, 0, msg, cap);
  const int kp = blk128 ? (p.k + 127) / 128 * 128 : (p.k + 15) / 16 * 16, ldt = (p.m + 3) / 4 * 4;
  const int pack_a = !(p.ta && kp == p.k && p.lda % 16 == 0 && amp__align_of(p.a) >= 16);   // op(A) = A^T: k along
  const int pack_b = !(!p.tb && kp == p.k && p.ldb % 16 == 0 && amp__align_of(p.b) >= 16);  // A's and B's columns
  const size_t na = pack_a ? (size_t)p.m * kp : 0, nb = pack_b ? (size_t)p.n * kp : 0;   // bytes: codes
  // block scales in cuBLASLt's layout (floats, after the codes: na and nb are multiples of 16; B's
  // after A's, 256-byte aligned as cudaMalloc's pointers are)
  const size_t ns_a = blk128 ? (amp__gemm_lt_scales128_count(p.bka, p.m, p.k) + 63) / 64 * 64 : 0;
  const size_t ns_b = blk128 ? amp__gemm_lt_scales128_count(p.bkb, p.n, p.k) : 0;
  int direct = !p.bias && p.act == AMP_ACT_NONE && (amp__dtype_is_fp8(p.out) || !p.amax), kind = AMP__PLAN_SIMPLE;
  uint8_t *scr = NULL;   // the packed operands (na + nb bytes, each 16-byte aligned: kp is), then the scales
  float *T = NULL;
  const size_t nscr = na + nb + (ns_a + ns_b) * sizeof(float);
  if (nscr) AMP__CU_CHECK(cudaMallocAsync((void **)&scr, nscr, st->stream));
  amp__gemm_prob q = p;   // what cuBLASLt computes
  amp_status r = AMP_OK;
  q.ta = 1; q.tb = 0; q.k = kp; q.bias = NULL; q.act = AMP_ACT_NONE;
  if (pack_a) { q.a = scr; q.lda = kp; }
  if (pack_b) { q.b = scr + na; q.ldb = kp; }
  if (blk128) {   // the scales as cuBLASLt reads them (from the real k: blocks past it are padding)
    float *sa = (float *)(scr + na + nb), *sb = sa + ns_a;
    amp__k_gemm_scales128<<<(unsigned)((ns_a + 255) / 256), 256, 0, st->stream>>>(sa, p.bsa, p.bka, p.kca, p.m, p.k);
    // (ns_a is rounded up: the kernel writes the count amp__gemm_lt_scales128_count gives, no more)
    amp__k_gemm_scales128<<<(unsigned)((ns_b + 255) / 256), 256, 0, st->stream>>>(sb, p.bsb, p.bkb, p.kcb, p.n, p.k);
    cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess)
      r = amp__cu_fail(msg, cap, "amp__k_gemm_scales128<<<>>>", cudaGetErrorName(le), __FILE__, __LINE__);
    q.sa = sa; q.sb = sb;
    q.lt_ma = p.bka == AMP_BLOCK_128x128 ? AMP__LT_BLK128 : AMP__LT_VEC128;
    q.lt_mb = p.bkb == AMP_BLOCK_128x128 ? AMP__LT_BLK128 : AMP__LT_VEC128;
  }
  if (r == AMP_OK && direct) r = amp__gemm_fp8_try(st, p, q, &kind, msg, cap);
  if (r == AMP_OK && kind == AMP__PLAN_SIMPLE) {   // through T
    cudaError_t e = cudaMallocAsync((void **)&T, (size_t)ldt * p.n * sizeof(float), st->stream);
    if (e != cudaSuccess) r = amp__cu_fail(msg, cap, "cudaMallocAsync", cudaGetErrorName(e), __FILE__, __LINE__);
    direct = 0;
    q.c = T; q.ldc = ldt; q.out = AMP_F32; q.beta = 0.0f; q.cs = NULL; q.amax = NULL;
    if (r == AMP_OK) r = amp__gemm_fp8_try(st, p, q, &kind, msg, cap);
  }
  if (r == AMP_OK && kind == AMP__PLAN_SIMPLE) r = amp__gemm_launch_fp8(st, p, NULL, 0, msg, cap);
  else if (r == AMP_OK && !direct) r = amp__gemm_launch_fp8(st, p, T, ldt, msg, cap);
  void *scratch[2] = {scr, T};
  for (int i = 0; i < 2; i++) {
    cudaError_t e = scratch[i] ? cudaFreeAsync(scratch[i], st->stream) : cudaSuccess;
    if (e != cudaSuccess && r == AMP_OK) r = amp__cu_fail(msg, cap, "cudaFreeAsync", cudaGetErrorName(e), __FILE__, __LINE__);
  }
  return r;
}

extern "C" amp_status amp__cu_gemm(void *state, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k,
                                   float alpha, const void *A, amp_dtype a_type, int lda, const void *B,
                                   amp_dtype b_type, int ldb, float beta, void *C, amp_dtype c_type, int ldc,
                                   const amp_gemm_opts *opts, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  amp__gemm_prob p =
      amp__gemm_canon(layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type, ldc, opts);
  if (!st) { if (msg && cap) snprintf(msg, cap, "amp__cu_gemm: state is NULL"); return AMP_ERR_ARG; }
  AMP__CU_ON(st);
  if (amp__gemm_fp8_mode(a_type, b_type, c_type, opts)) return amp__gemm_fp8(st, p, (int)opts->algo, msg, cap);
  if (k == 0 || alpha == 0.0f) return amp__gemm_launch_elementwise(st, p, 0, 0, msg, cap);   // C = beta C
  if (opts->algo == AMP_GEMM_SIMPLE) return amp__gemm_launch_elementwise(st, p, 1, 0, msg, cap);
  if (opts->algo == AMP_GEMM_WMMA) return amp__gemm_launch_wmma(st, p, msg, cap);

  int kind = AMP__PLAN_SIMPLE, lt_bias = 0;
  {
    // The cache and the descriptors in it are shared by every thread using this device: the lock
    // covers the lookup, this call's bias pointer written into the plan's descriptor, and the
    // enqueue that reads it (cublasLtMatmul only enqueues: the lock is held for microseconds).
    std::lock_guard<std::mutex> lock(st->gemm_lock);
    amp__gemm_plan *pl = NULL;
    amp_status r = amp__gemm_plan_get(st, p, opts->allow_tf32, &pl, msg, cap);
    if (r != AMP_OK) return r;
    kind = pl->kind;
    lt_bias = (pl->epi & CUBLASLT_EPILOGUE_BIAS) != 0;
    if (kind != AMP__PLAN_SIMPLE) {
      if (lt_bias)   // this call's bias (same alignment as the plan's)
        AMP__LT_CHECK(
            cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
      AMP__LT_CHECK(cublasLtMatmul(st->lt, pl->desc, &p.alpha, p.a, pl->la, p.b, pl->lb, &p.beta, p.c, pl->lc, p.c,
                                   pl->lc, &pl->algo, st->workspace, st->workspace_size, st->stream));
    }
  }
  if (kind == AMP__PLAN_SIMPLE) return amp__gemm_launch_elementwise(st, p, 1, 0, msg, cap);
  if (kind == AMP__PLAN_SPLIT) {   // our epilogue: the bias cuBLASLt did not add, and the activation
    amp__gemm_prob q = p;
    if (lt_bias) q.bias = NULL;
    return amp__gemm_launch_elementwise(st, q, 0, 1, msg, cap);
  }
  return AMP_OK;
}

// ------------------------------------------------------------------------------------------------
// ---- NCCL (compiled with -DAMP_NCCL; link -lnccl)
//
// The data-parallel adapters behind amp_nccl_allreduce_hook and amp_nccl_allreduce_grads (see the
// comment above them in amp.h). Every collective is only enqueued on the stream, never waited for,
// so a data-parallel step can still be captured in a CUDA graph (NCCL supports capture since 2.9,
// cudaMallocAsync since CUDA 11.4).
#ifdef AMP_NCCL
#include <nccl.h>
#include <stdint.h>

// Formats a failing NCCL call (ncclGetErrorString, plus NCCL's own last message where it has one).
static amp_status amp__nccl_fail(char *msg, size_t cap, const char *call, ncclResult_t r, ncclComm_t comm,
                                 const char *file, int line) {
  const char *last = NULL;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21300
  last = ncclGetLastError(comm);
#else
  (void)comm;
#endif
  if (msg && cap)
    snprintf(msg, cap, "%s failed: %s%s%s (%s:%d)", call, ncclGetErrorString(r), last && *last ? ": " : "",
             last && *last ? last : "", file, line);
  return AMP_ERR_DEVICE;
}
#define AMP__NCCL_CHECK(call, comm) do { ncclResult_t r_ = (call); \
    if (r_ != ncclSuccess) return amp__nccl_fail(msg, cap, #call, r_, (comm), __FILE__, __LINE__); } while (0)

// The scaler's hook: {found_inf, sumsq} summed over the ranks, in place; n < 0: the MAX of -n
// doubles (an fp8 scaler's amaxes as bits).
extern "C" amp_status amp__cu_nccl_allreduce(void *comm, double *buf, int n_in, void *stream, char *msg, size_t cap) {
  const ncclRedOp_t op = n_in < 0 ? ncclMax : ncclSum;
  const int n = n_in < 0 ? -n_in : n_in;
  ncclComm_t c = (ncclComm_t)comm;
  cudaStream_t s = (cudaStream_t)stream;
  cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  if (cudaPointerGetAttributes(&a, buf) != cudaSuccess) { cudaGetLastError(); a.type = cudaMemoryTypeUnregistered; }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {   // a device scaler: enqueue only
    AMP__NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)n, ncclDouble, op, c, s), c);
    return AMP_OK;
  }
  // A CPU scaler: host memory, which NCCL cannot read, goes through the device, and the host waits.
  double *dev = NULL;
  cudaError_t e = cudaMalloc((void **)&dev, (size_t)n * sizeof(double));
  if (e != cudaSuccess)
    return amp__cu_fail(msg, cap, "cudaMalloc(hook buffer)", cudaGetErrorName(e), __FILE__, __LINE__);
  amp_status r = AMP_OK;
  const char *what = NULL;
  if ((e = cudaMemcpyAsync(dev, buf, (size_t)n * sizeof(double), cudaMemcpyHostToDevice, s)) != cudaSuccess)
    what = "cudaMemcpyAsync(to device)";
  else {
    ncclResult_t nr = ncclAllReduce(dev, dev, (size_t)n, ncclDouble, op, c, s);
    if (nr != ncclSuccess)
      r = amp__nccl_fail(msg, cap, "ncclAllReduce(buf, buf, n, ncclDouble, op, comm, stream)", nr, c, __FILE__,
                         __LINE__);
    else if ((e = cudaMemcpyAsync(buf, dev, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, s)) != cudaSuccess)
      what = "cudaMemcpyAsync(to host)";
    else if ((e = cudaStreamSynchronize(s)) != cudaSuccess) what = "cudaStreamSynchronize(stream)";
  }
  if (what) r = amp__cu_fail(msg, cap, what, cudaGetErrorName(e), __FILE__, __LINE__);
  cudaFree(dev);
  return r;
}

// The fp32 detour of amp_nccl_allreduce_grads: widen a chunk, sum it in fp32, round it back once
// (times 1/ranks for the mean). Plain grid-stride loops over the shared element math: the
// collective, not these, sets the pace.
__global__ void amp__nccl_widen(float *dst, const void *src, int t, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dst[i] = amp__load(src, (amp_dtype)t, (size_t)i);
}
__global__ void amp__nccl_narrow(void *dst, int t, const float *src, long long n, float mul) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    amp__store(dst, (amp_dtype)t, (size_t)i, mul == 1.0f ? src[i] : src[i] * mul);
}

#define AMP__NCCL_CHUNK ((size_t)1 << 24)   // elements per fp32 round trip: a 64 MiB temporary at most

extern "C" amp_status amp__cu_nccl_grads(void *state, void *comm, void *grads, int32_t dtype, size_t n, int average,
                                         int in_f32, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  ncclComm_t c = (ncclComm_t)comm;
  if (!st) return amp__cu_arg(msg, cap, "amp__cu_nccl_grads: state is NULL");
  AMP__CU_ON(st);
  if (dtype == AMP_F32 || !in_f32) {   // in the grads' own type: one collective, in place
    ncclDataType_t nt = ncclFloat;
    switch (dtype) {
#define AMP__CU_NCCL_(A, E, N, CT, S, MX, MN, CV, GV, CR, NT, ...) case E: nt = NT; break;
      AMP__DTYPES(AMP__CU_NCCL_, ~)
#undef AMP__CU_NCCL_
      default: break;
    }
    AMP__NCCL_CHECK(ncclAllReduce(grads, grads, n, nt, average ? ncclAvg : ncclSum, c, st->stream), c);
    return AMP_OK;
  }
  int ranks = 1;
  AMP__NCCL_CHECK(ncclCommCount(c, &ranks), c);
  const float mul = average ? (float)(1.0 / (double)ranks) : 1.0f;
  const size_t chunk = n < AMP__NCCL_CHUNK ? n : AMP__NCCL_CHUNK;
  const int threads = 256;
  const long long most = (long long)(st->sm_count > 0 ? st->sm_count : 1) * 8;
  float *tmp = NULL;
  AMP__CU_CHECK(cudaMallocAsync((void **)&tmp, chunk * sizeof(float), st->stream));
  amp_status r = AMP_OK;
  for (size_t off = 0; off < n && r == AMP_OK; off += chunk) {
    const size_t k = n - off < chunk ? n - off : chunk;
    const long long need = ((long long)k + threads - 1) / threads;
    const int grid = (int)(need < most ? need : most);
    char *base = (char *)grads + off * 2;   // f16 / bf16: 2 bytes an element
    amp__nccl_widen<<<grid, threads, 0, st->stream>>>(tmp, base, dtype, (long long)k);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      r = amp__cu_fail(msg, cap, "amp__nccl_widen<<<>>>", cudaGetErrorName(e), __FILE__, __LINE__);
      break;
    }
    ncclResult_t nr = ncclAllReduce(tmp, tmp, k, ncclFloat, ncclSum, c, st->stream);
    if (nr != ncclSuccess) {
      r = amp__nccl_fail(msg, cap, "ncclAllReduce(tmp, tmp, k, ncclFloat, ncclSum, comm, stream)", nr, c, __FILE__,
                         __LINE__);
      break;
    }
    amp__nccl_narrow<<<grid, threads, 0, st->stream>>>(base, dtype, tmp, (long long)k, mul);
    e = cudaGetLastError();
    if (e != cudaSuccess) r = amp__cu_fail(msg, cap, "amp__nccl_narrow<<<>>>", cudaGetErrorName(e), __FILE__, __LINE__);
  }
  cudaFreeAsync(tmp, st->stream);
  return r;
}
#endif  // AMP_NCCL
