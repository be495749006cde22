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

static void amp__cu_gemm_cache_free(amp__cu_state *st);   // Matrix product, below

extern "C" void amp__cu_close(void *state) {
  amp__cu_state *st = (amp__cu_state *)state;
  if (!st) return;
  cudaSetDevice(st->ordinal);
  cudaStreamSynchronize(st->stream);
  amp__cu_gemm_cache_free(st);
  cudaFree(st->workspace);
  cublasLtDestroy(st->lt);
  free(st);
}

extern "C" amp_status amp__cu_sync(void *state, char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  CU_CHECK(cudaStreamSynchronize(st->stream));
  return AMP_OK;
}

// ------------------------------------------------------------------------------------------------
// Matrix product
//
// amp_gemm on a CUDA device. amp.h has checked every argument; here the product is put in
// cuBLASLt's column-major terms and handed to one of three paths:
//   1. cuBLASLt (AMP_GEMM_AUTO): the heuristic's algorithm, the bias/activation fused as an
//      epilogue where cuBLASLt offers it, else our epilogue kernel after it; the descriptors and
//      the algorithm are cached per problem, so a repeated call is one cublasLtMatmul;
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
};

static amp__gemm_prob amp__gemm_canon(amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k, float alpha,
                                      const void *A, amp_dtype at, int lda, const void *B, int ldb, float beta,
                                      void *C, amp_dtype ct, int ldc, const amp_gemm_opts *o) {
  amp__gemm_prob p;
  memset(&p, 0, sizeof p);
  int row = layout == AMP_ROW_MAJOR;
  p.m = row ? n : m; p.n = row ? m : n; p.k = k;
  p.a = row ? B : A; p.lda = row ? ldb : lda; p.ta = (row ? tb : ta) == AMP_TRANS;
  p.b = row ? A : B; p.ldb = row ? lda : ldb; p.tb = (row ? ta : tb) == AMP_TRANS;
  p.c = C; p.ldc = ldc; p.in = at; p.out = ct; p.alpha = alpha; p.beta = beta;
  p.bias = o->bias; p.bias_type = o->bias_type; p.bias_on_rows = row; p.act = (int)o->act;
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
    for (int q = 0; q < p.k; q++) acc += amp__load(p.a, p.in, amp__ga(p, i, q)) * amp__load(p.b, p.in, amp__gb(p, q, j));
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
  CU_CHECK(cudaGetLastError());
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
static __device__ __forceinline__ void amp__wmma_copy_tile(uint16_t *s, int sld, int R, int W, const uint16_t *g, int ld,
                                                           int r0, int c0, int r_end, int c_end, int vec) {
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
__global__ void __launch_bounds__(AMP__WM_THREADS) amp__k_gemm_wmma(amp__gemm_prob p, int vec_a, int vec_b) {
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
  if (p.in == AMP_F16) amp__gemm_launch_wmma_t<__half>(p, grid, st->stream, va, vb);
  else amp__gemm_launch_wmma_t<__nv_bfloat16>(p, grid, st->stream, va, vb);
  CU_CHECK(cudaGetLastError());
  return AMP_OK;
}

// ---- cuBLASLt with a plan cache ----------------------------------------------------------------

#define AMP__GEMM_CACHE 32

enum { AMP__PLAN_FUSED = 0,   // cublasLtMatmul does it all
       AMP__PLAN_SPLIT,       // cublasLtMatmul, then amp__k_gemm_epilogue for the bias/activation
       AMP__PLAN_SIMPLE };    // cuBLASLt has no algorithm: the plain kernel

// Everything the heuristic's choice depends on. Only ints: compared with memcmp.
struct amp__gemm_key {
  int m, n, k, ta, tb, lda, ldb, ldc, in, out, tf32;
  int act, has_bias, bias_type, bias_on_rows;
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
  cublasLtMatmulAlgo_t algo;
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
  return t == AMP_F16 ? CUDA_R_16F : t == AMP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The epilogue cuBLASLt is asked for: the activation, with the bias only where cuBLASLt's bias
// (one value per row of D) is ours, i.e. for row-major calls.
static cublasLtEpilogue_t amp__gemm_lt_epilogue(const amp__gemm_key &k) {
  int bias = k.has_bias && k.bias_on_rows;
  if (k.act == AMP_ACT_RELU) return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  if (k.act == AMP_ACT_GELU) return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// Asks the heuristic for the best algorithm with epilogue epi; *found 0 when it has none.
static amp_status amp__gemm_ask(amp__cu_state *st, amp__gemm_plan *pl, const amp__gemm_prob &p, cublasLtEpilogue_t epi,
                                cublasLtMatmulPreference_t pref, int *found, char *msg, size_t cap) {
  uint32_t e = (uint32_t)epi;
  *found = 0;
  LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
  if (epi & CUBLASLT_EPILOGUE_BIAS) {
    // the heuristic reads the bias pointer's value for its alignment (the pointer is set again
    // before every call; the cache key holds its alignment)
    int32_t bt = (int32_t)amp__cuda_type(p.bias_type);
    LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
    if (p.bias_type != p.out)   // the default bias type is the output's
      LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  cublasLtMatmulHeuristicResult_t res;
  int count = 0;
  memset(&res, 0, sizeof res);
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, pl->desc, pl->la, pl->lb, pl->lc, pl->lc, pref, 1, &res, &count);
  // amp.h has checked the arguments, so a refusal here means cuBLASLt has no kernel for this
  // combination of types, epilogue and alignment (e.g. f32 inputs with an f16 output)
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) return AMP_OK;
  LT_CHECK(s);
  if (count > 0 && res.state == CUBLAS_STATUS_SUCCESS) { pl->algo = res.algo; pl->epi = epi; *found = 1; }
  return AMP_OK;
}

// Builds the descriptors and picks the algorithm. On failure pl may hold some handles: the caller
// destroys it.
static amp_status amp__gemm_plan_build(amp__cu_state *st, amp__gemm_plan *pl, const amp__gemm_prob &p, char *msg, size_t cap) {
  const amp__gemm_key &k = pl->key;
  cublasComputeType_t ct = (p.in == AMP_F32 && k.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType_t it = amp__cuda_type(p.in), ot = amp__cuda_type(p.out);
  int32_t opa = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescCreate(&pl->desc, ct, CUDA_R_32F));
  LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  // layouts as stored (column-major): A is m x k, or k x m when transposed; B k x n or n x k
  LT_CHECK(cublasLtMatrixLayoutCreate(&pl->la, it, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.lda));
  LT_CHECK(cublasLtMatrixLayoutCreate(&pl->lb, it, p.tb ? p.n : p.k, p.tb ? p.k : p.n, p.ldb));
  LT_CHECK(cublasLtMatrixLayoutCreate(&pl->lc, ot, p.m, p.n, p.ldc));

  cublasLtMatmulPreference_t pref = NULL;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = st->workspace_size;
  uint32_t al[4] = {(uint32_t)k.align_a, (uint32_t)k.align_b, (uint32_t)k.align_c, (uint32_t)k.align_c};
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4);
  // split-k may add its partial sums in the output type: for an f16/bf16 output that would be a
  // second, low-precision accumulation. Only f32 partials (COMPUTE_TYPE) keep fp32 accumulation.
  uint32_t schemes = p.out == AMP_F32 ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK : (uint32_t)CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, 4);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreferenceDestroy(pref);
    return amp__cu_fail(msg, cap, "cublasLtMatmulPreferenceSetAttribute", amp__cublas_status_name(s), __FILE__, __LINE__);
  }
  // the fused epilogue first (not for a bias per column of D: cuBLASLt's is per row); then the
  // bare product followed by our epilogue kernel; then, with no algorithm at all, the plain kernel
  cublasLtEpilogue_t want = amp__gemm_lt_epilogue(k);
  int can_fuse = !(k.has_bias && !k.bias_on_rows), has_epilogue = k.act != AMP_ACT_NONE || k.has_bias;
  int found = 0;
  amp_status r = AMP_OK;
  pl->kind = AMP__PLAN_FUSED;
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
    if (!c) { if (msg && cap) snprintf(msg, cap, "amp_gemm: out of memory for the plan cache"); return AMP_ERR_NOMEM; }
    st->gemm_cache = c;
  }
  amp__gemm_key key;
  memset(&key, 0, sizeof key);
  key.m = p.m; key.n = p.n; key.k = p.k; key.ta = p.ta; key.tb = p.tb;
  key.lda = p.lda; key.ldb = p.ldb; key.ldc = p.ldc; key.in = (int)p.in; key.out = (int)p.out;
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

extern "C" amp_status amp__cu_gemm(void *state, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k,
                                   float alpha, const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type,
                                   int ldb, float beta, void *C, amp_dtype c_type, int ldc, const amp_gemm_opts *opts,
                                   char *msg, size_t cap) {
  amp__cu_state *st = (amp__cu_state *)state;
  (void)b_type;   // == a_type, checked by amp.h
  amp__gemm_prob p = amp__gemm_canon(layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, ldb, beta, C, c_type, ldc, opts);
  if (k == 0 || alpha == 0.0f) return amp__gemm_launch_elementwise(st, p, 0, 0, msg, cap);   // C = beta C
  if (opts->algo == AMP_GEMM_SIMPLE) return amp__gemm_launch_elementwise(st, p, 1, 0, msg, cap);
  if (opts->algo == AMP_GEMM_WMMA) return amp__gemm_launch_wmma(st, p, msg, cap);

  amp__gemm_plan *pl = NULL;
  amp_status r = amp__gemm_plan_get(st, p, opts->allow_tf32, &pl, msg, cap);
  if (r != AMP_OK) return r;
  if (pl->kind == AMP__PLAN_SIMPLE) return amp__gemm_launch_elementwise(st, p, 1, 0, msg, cap);
  if (pl->epi & CUBLASLT_EPILOGUE_BIAS)   // this call's bias (same alignment as the plan's)
    LT_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
  LT_CHECK(cublasLtMatmul(st->lt, pl->desc, &p.alpha, p.a, pl->la, p.b, pl->lb, &p.beta, p.c, pl->lc, p.c, pl->lc,
                          &pl->algo, st->workspace, st->workspace_size, st->stream));
  if (pl->kind == AMP__PLAN_SPLIT) return amp__gemm_launch_elementwise(st, p, 0, 1, msg, cap);
  return AMP_OK;
}
