/* amp.h - v0.1.0 - automatic mixed precision training for C and CUDA - public domain / MIT

   Mixed precision in one header: fp16/bf16 conversion, the op-list policy,
   the dynamic loss scaler (GradScaler) and fp32 master-copy optimizers,
   on the CPU, plus a bundled CUDA file (amp_kernels.cu) for the GPU.

   Do this:
      #define AMP_IMPLEMENTATION
   before you include this file in *one* C or C++ file to create the implementation.

   QUICK START (compiles as it stands; see examples/ for whole trainers)

      #define AMP_IMPLEMENTATION
      #include "amp.h"
      #include <stdio.h>

      int main(void) {
          amp_f16 w[4], g[4];                         // the model copy and its grads, in f16
          for (int i = 0; i < 4; i++) w[i] = amp_f32_to_f16(1.0f);
          amp_scaler *sc; amp_optimizer *opt;
          amp_scaler_config sconf = {0};              // zero means the defaults: PyTorch's GradScaler
          amp_optim_config oconf = {0};               // zero means SGD, lr 1e-3
          oconf.kind = AMP_ADAMW; oconf.weight_decay = 0.01f;
          if (amp_scaler_create(&sc, amp_cpu(), &sconf) != AMP_OK ||
              amp_optimizer_create(&opt, amp_cpu(), &oconf) != AMP_OK ||
              amp_optimizer_add(opt, AMP_F16, w, g, 4) != AMP_OK) {
              fprintf(stderr, "%s\n", amp_last_error()); return 1;
          }
          for (int step = 0; step < 10; step++) {
              float s = amp_scaler_get_scale(sc);     // backward of (loss * s) gives grads * s
              for (int i = 0; i < 4; i++) g[i] = amp_f32_to_f16(0.5f * s);
              amp_scaler_step(sc, opt);               // unscale, skip on inf/NaN, else update
              amp_scaler_update(sc);                  // the scale rule, once per iteration
          }
          printf("w[0] = %g\n", amp_f16_to_f32(w[0]));
          amp_optimizer_destroy(opt); amp_scaler_destroy(sc);
          return 0;
      }

   COMPILE-TIME OPTIONS (define before including)

      AMP_IMPLEMENTATION   emit the implementation (one translation unit only)
      AMP_STATIC           make every function static (private to the translation unit)
      AMPDEF               linkage of the public functions (default: extern)
      AMP_MALLOC(sz) / AMP_FREE(p) / AMP_ASSERT(x)
                           replace malloc/free/assert; define both AMP_MALLOC and AMP_FREE, or neither
      AMP_NO_SIMD          never use the F16C/AVX2 bulk paths (the portable C path only)
      AMP_CUDA             the implementation calls into amp_kernels.cu (see below);
                           without it every CUDA entry point returns AMP_ERR_UNSUPPORTED

   BUILDING THE CUDA PART

      nvcc -O3 -arch=sm_90 -c amp_kernels.cu -o amp_kernels.o     (sm_80 for Ampere)
      cc -O2 -DAMP_CUDA -c my_trainer.c       (my_trainer.c defines AMP_IMPLEMENTATION)
      cc my_trainer.o amp_kernels.o -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -lstdc++ -lm

   CONVENTIONS

      - Every call that can fail returns amp_status. On failure amp_last_error() (thread-local)
        names the function and the bad value, and nothing was changed.
      - A zero-initialised config struct means every default (written beside each field).
      - Element math shared by the CPU loops and the CUDA kernels is written once, as
        static inline AMP_HD functions.

   VERSION HISTORY

      0.1.0  (2026-11-21)  first release: conversions, op-list policy, loss scaler,
                           master-copy optimizers, checkpoints, CPU and CUDA paths.

   LICENSE: see the end of the file.
*/

#ifndef AMP_H
#define AMP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#ifndef AMPDEF
#ifdef AMP_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define AMPDEF static __attribute__((unused))  /* a static library need not use every function */
#else
#define AMPDEF static
#endif
#else
#define AMPDEF extern
#endif
#endif

/* AMP_HD marks element math compiled for the host and, under nvcc, for the device too. */
#if defined(__CUDACC__)
#define AMP_HD __host__ __device__
#else
#define AMP_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
   Errors
   ------------------------------------------------------------------------------------------ */

typedef enum amp_status {
  AMP_OK = 0,
  AMP_ERR_ARG,          /* a bad argument: NULL, out of range, wrong type */
  AMP_ERR_NOMEM,        /* an allocation failed */
  AMP_ERR_PARSE,        /* malformed input text (mixlist JSON) */
  AMP_ERR_STATE,        /* a call out of order (unscale twice, step after step, ...) */
  AMP_ERR_IO,           /* a file could not be read or written */
  AMP_ERR_CORRUPT,      /* a checkpoint that is damaged or does not match */
  AMP_ERR_UNSUPPORTED,  /* not built in (CUDA without AMP_CUDA) or no device present */
  AMP_ERR_DEVICE        /* a CUDA / cuBLAS error */
} amp_status;

AMPDEF const char *amp_status_string(amp_status s);
/* The message of the last failing call on this thread, "" if none. */
AMPDEF const char *amp_last_error(void);

/* ------------------------------------------------------------------------------------------
   Number formats
   ------------------------------------------------------------------------------------------ */

typedef uint16_t amp_f16;   /* IEEE 754 binary16 bits */
typedef uint16_t amp_bf16;  /* bfloat16 bits: the upper half of an IEEE binary32 */
typedef enum amp_dtype { AMP_F32 = 0, AMP_F16, AMP_BF16 } amp_dtype;

/* Bulk host conversion between any two of F32/F16/BF16 (same type: a copy). F16C/AVX2 where the
   running CPU has them (decided once, by CPUID), a portable loop elsewhere; both give the same bits
   as the scalar functions below. dst and src may be the same buffer only when the element sizes
   match; any other overlap of buffers of different element sizes is AMP_ERR_ARG. */
AMPDEF amp_status amp_convert(void *dst, amp_dtype dst_type, const void *src, amp_dtype src_type, size_t n);
/* 1 when amp_convert uses the F16C/AVX2 path. amp_simd_enable(0) forces the portable path (for tests
   and benchmarks); amp_simd_enable(1) returns to the CPU's best. Not thread-safe against amp_convert. */
AMPDEF int  amp_simd_active(void);
AMPDEF void amp_simd_enable(int on);
AMPDEF size_t amp_dtype_size(amp_dtype t);   /* 4, 2, 2; 0 for an unknown type */

/* Bit casts that work in C, C++ and CUDA device code. */
static inline AMP_HD uint32_t amp__f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u; memcpy(&u, &x, sizeof u); return u;
#endif
}
static inline AMP_HD float amp__bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x; memcpy(&x, &u, sizeof x); return x;
#endif
}

/* f32 -> f16, round to nearest even, integer arithmetic only (no dependence on the FPU's mode).
   NaN keeps its sign and the top 10 bits of its payload with the quiet bit set, exactly as the
   F16C instruction vcvtps2ph and NumPy do; a NaN never becomes inf. */
static inline AMP_HD amp_f16 amp_f32_to_f16(float x) {
  uint32_t f = amp__f32_bits(x);
  uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t a = f & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf stays inf; NaN: quiet bit 0x200 set, payload truncated */
    return (amp_f16)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
  if (a >= 0x477ff000u) /* >= 65520 = 65504 + half an ulp: rounds (ties-to-even) to inf */
    return (amp_f16)(sign | 0x7c00u);
  if (a >= 0x38800000u) { /* >= 2^-14: a normal half. Rebias the exponent by 127-15 = 112 and
                             add 0xfff plus the lowest kept bit: a carry out of the 13 cut bits
                             is round-to-nearest-even, and it may carry into the exponent. */
    uint32_t odd = (a >> 13) & 1u;
    return (amp_f16)(sign | ((a - 0x38000000u + 0xfffu + odd) >> 13));
  }
  if (a < 0x33000000u) /* < 2^-25: below half the smallest subnormal, rounds to (signed) zero */
    return (amp_f16)sign;
  { /* a subnormal half: the value in units of 2^-24 is m * 2^(e - 126); shift by 14..24 and
       round to nearest even by comparing the cut bits with half. Exactly 2^-25 ties to 0;
       a result of 0x400 is the smallest normal, which is the right bit pattern too. */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e, r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (amp_f16)(sign | r);
  }
}

/* f16 -> f32: exact for all 65536 patterns. NaN payloads are kept (shifted up), as F16C does. */
static inline AMP_HD float amp_f16_to_f32(amp_f16 h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
  if (e == 0x1fu) return amp__bits_f32(sign | 0x7f800000u | (m << 13));       /* inf, NaN */
  if (e != 0) return amp__bits_f32(sign | ((e + 112u) << 23) | (m << 13));      /* normal */
  if (m == 0) return amp__bits_f32(sign);                                        /* +-0 */
  { /* subnormal: m * 2^-24 is exact in f32; build it by normalising the mantissa. */
    uint32_t ex = 113u;                       /* biased exponent of 2^-14, one above the subnormals */
    while (!(m & 0x400u)) { m <<= 1; ex--; }
    return amp__bits_f32(sign | (ex << 23) | ((m & 0x3ffu) << 13));
  }
}

/* f32 -> bf16: round to nearest even on the upper 16 bits (adding 0x7fff plus the lowest kept bit
   carries exactly when the cut half is above, or at a tie with an odd kept part). Subnormals are
   kept, not flushed. NaN -> quiet NaN with its sign and top payload bits, as ggml does. */
static inline AMP_HD amp_bf16 amp_f32_to_bf16(float x) {
  uint32_t u = amp__f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (amp_bf16)((u >> 16) | 0x40u);
  return (amp_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* bf16 -> f32: exact, the bits shifted up. */
static inline AMP_HD float amp_bf16_to_f32(amp_bf16 h) { return amp__bits_f32((uint32_t)h << 16); }

/* One element of any of the three types, as f32 / from f32 (the kernels' and loops' loads/stores). */
static inline AMP_HD float amp__load(const void *p, amp_dtype t, size_t i) {
  return t == AMP_F16 ? amp_f16_to_f32(((const amp_f16 *)p)[i])
       : t == AMP_BF16 ? amp_bf16_to_f32(((const amp_bf16 *)p)[i]) : ((const float *)p)[i];
}
static inline AMP_HD void amp__store(void *p, amp_dtype t, size_t i, float x) {
  if (t == AMP_F16) ((amp_f16 *)p)[i] = amp_f32_to_f16(x);
  else if (t == AMP_BF16) ((amp_bf16 *)p)[i] = amp_f32_to_bf16(x);
  else ((float *)p)[i] = x;
}
/* x rounded to the type t and back: what a model copy of type t holds for master value x. */
static inline AMP_HD float amp__round_to(float x, amp_dtype t) {
  return t == AMP_F16 ? amp_f16_to_f32(amp_f32_to_f16(x))
       : t == AMP_BF16 ? amp_bf16_to_f32(amp_f32_to_bf16(x)) : x;
}

/* ------------------------------------------------------------------------------------------
   Op-list policy
   Which ops compute in the low type and which in f32. Lists: white (always low), black
   (always f32), gray (follows its inputs: f32 if any input is f32, else low). An op on no list
   behaves like a gray op, as in PyTorch autocast and Ascend. Names compare case-insensitively.
   ------------------------------------------------------------------------------------------ */

typedef enum amp_list { AMP_LIST_NONE = 0, AMP_LIST_WHITE, AMP_LIST_BLACK, AMP_LIST_GRAY } amp_list;
typedef enum amp_mode {
  AMP_MODE_MIXED = 0,   /* white->low, black->f32, gray->follow inputs  (PyTorch autocast, Paddle O1, Ascend allow_mix_precision) */
  AMP_MODE_PURE,        /* everything low except black and norms        (Paddle O2, apex O2 keep_batchnorm_fp32) */
  AMP_MODE_WHITE_ONLY,  /* only white low, all else f32                 (Paddle OD, Ascend allow_fp32_to_fp16) */
  AMP_MODE_FORCE_LOW,   /* every op low                                 (Ascend force_fp16) */
  AMP_MODE_FORCE_F32,   /* every op f32                                 (Ascend force_fp32) */
  AMP_MODE_KEEP         /* every op keeps its inputs' dtype             (Ascend must_keep_origin_dtype) */
} amp_mode;
typedef struct amp_policy amp_policy;

AMPDEF amp_status amp_policy_create(amp_policy **out, amp_mode mode, amp_dtype low);
AMPDEF void       amp_policy_destroy(amp_policy *p);
AMPDEF amp_list   amp_policy_list(const amp_policy *p, const char *op);
AMPDEF amp_status amp_policy_set(amp_policy *p, const char *op, amp_list list);
AMPDEF amp_status amp_policy_customize(amp_policy *p, const char *const *white, size_t n_white,
                                       const char *const *black, size_t n_black);
AMPDEF amp_status amp_policy_load_mixlist(amp_policy *p, const char *json, size_t len);
AMPDEF amp_status amp_policy_load_mixlist_file(amp_policy *p, const char *path);
AMPDEF amp_dtype  amp_policy_decide(const amp_policy *p, const char *op, const amp_dtype *inputs, size_t n_inputs);

/* ------------------------------------------------------------------------------------------
   Devices
   ------------------------------------------------------------------------------------------ */

typedef struct amp_device amp_device;
AMPDEF amp_device *amp_cpu(void);                                   /* always there, never freed */
AMPDEF amp_status  amp_cuda_open(amp_device **out, int ordinal, void *cuda_stream /* NULL = default */);
AMPDEF void        amp_device_close(amp_device *d);
AMPDEF amp_status  amp_device_sync(amp_device *d);
AMPDEF int         amp_device_is_cuda(const amp_device *d);

/* ---- CUDA launcher interface (private; defined in amp_kernels.cu, issue 5) ----------------
   The extern "C" functions amp.h's implementation calls under AMP_CUDA for a scaler or an
   optimizer that lives on a CUDA device (the CUDA tests and benchmarks call them directly).
   `state` is the device's amp__cu_state (amp_device.cuda). Each returns an amp_status and on
   failure writes "amp__cu_x: what" (AMP_ERR_ARG, checked before any CUDA call) or the CUDA call,
   the error's name and file:line (AMP_ERR_DEVICE) into msg[cap]; a failing call changes nothing.
   Calls marked [step] only enqueue kernels on the device's stream: no allocation, no copy, no
   host wait, so a step may be captured in a CUDA graph. Calls marked [sync] wait for the stream.
   The scale-rule and optimizer types they take are declared in the sections below. */
struct amp_scale_state;
struct amp_scale_params;
struct amp_step_coefs;

/* One tensor of an optimizer: grads and model copy share one dtype (AMP_F32/F16/BF16). */
typedef struct amp_cu_tensor {
  const void *grad;   /* device pointer, n elements */
  void *model;        /* device pointer, n elements: the model copy, rewritten rounded after each update */
  size_t n;
  int32_t dtype;
} amp_cu_tensor;

/* An optimizer's hyperparameters, resolved (defaults filled in), as the device reads them. */
typedef struct amp_cu_hparams {
  int32_t kind;                 /* AMP_SGD, AMP_ADAM, AMP_ADAMW */
  float lr, weight_decay;
  float momentum, dampening;
  int32_t nesterov;
  float beta1, beta2, eps;
  float max_grad_norm;          /* 0: no clipping */
} amp_cu_hparams;

/* What a device scaler / optimizer holds besides the scale state, read back by a [sync] call. */
typedef struct amp_cu_scaler_info {
  float inv_scale;              /* amp__inv_scale(scale): what the next unscale multiplies by */
  int32_t found_inf;            /* OR of the unscales since the last scale rule */
  int32_t last_skipped;         /* the last scale rule saw an overflow */
  int64_t skipped;              /* iterations with an overflow, in all */
} amp_cu_scaler_info;
typedef struct amp_cu_optim_info {
  int64_t t;                    /* updates done (skipped steps not counted) */
  int64_t skipped;              /* steps skipped for an overflow */
  float norm, clip;             /* last unscale: L2 norm of the unscaled grads, clip coefficient */
  float mul;                    /* inv_scale * clip: the factor the update applies to each grad */
  int32_t skip;                 /* the last unscale found inf/NaN: the next step skips */
} amp_cu_optim_info;

/* Device scaler: one small block in device memory (scale state, rule parameters, inverse scale,
   found-inf flag, skip counts). */
extern amp_status amp__cu_scaler_create(void *state, void **scaler, const struct amp_scale_state *st,
                                        const struct amp_scale_params *pr, char *msg, size_t cap);
extern void       amp__cu_scaler_destroy(void *state, void *scaler);
/* [step] replaces the scale state (checkpoint load) and refreshes the inverse scale. */
extern amp_status amp__cu_scaler_set(void *state, void *scaler, const struct amp_scale_state *st, char *msg, size_t cap);
/* [sync] the scale state and the rest of the block; either output may be NULL. */
extern amp_status amp__cu_scaler_read(void *state, const void *scaler, struct amp_scale_state *st,
                                      amp_cu_scaler_info *info, char *msg, size_t cap);
/* The device address of the current scale (a float), for the trainer's own loss-gradient kernel. */
extern float     *amp__cu_scaler_scale_ptr(void *scaler);
/* [step] the scale rule on the device: found_inf < 0 uses the device flag, 0/1 the caller's; then
   the flag is cleared. 1 launch. */
extern amp_status amp__cu_scaler_update(void *state, void *scaler, int found_inf, char *msg, size_t cap);
/* [step] buf[i] = buf[i] * scale, rounded to dtype (the loss gradient of the scaled loss). 1 launch. */
extern amp_status amp__cu_scale_buffer(void *state, const void *scaler, void *buf, int32_t dtype, size_t n,
                                       char *msg, size_t cap);

/* Device optimizer: uploads the tensor table and its chunk list once, allocates the fp32 master
   (initialised from the model copies), the moments (zeroed) and the per-step block. */
extern amp_status amp__cu_optim_create(void *state, void **optim, const amp_cu_tensor *tensors, size_t n_tensors,
                                       const amp_cu_hparams *h, char *msg, size_t cap);
extern void       amp__cu_optim_destroy(void *state, void *optim);
/* [step] new hyperparameters (the kind must stay the same). */
extern amp_status amp__cu_optim_set_hparams(void *state, void *optim, const amp_cu_hparams *h, char *msg, size_t cap);
/* The device address of the learning rate (a float), for a schedule kept on the device. */
extern float     *amp__cu_optim_lr_ptr(void *optim);
/* The fp32 master of tensor index (device pointer) and its length; NULL when index is out of range. */
extern float     *amp__cu_optim_master(void *optim, size_t index, size_t *n);
/* [step] unscale + inf/NaN check + sum of squares over every grad in one launch; its last block
   takes the norm, the clip coefficient and the skip decision. Grads are read, never written. */
extern amp_status amp__cu_optim_unscale(void *state, void *optim, void *scaler, char *msg, size_t cap);
/* [step] the fused update (returns at once when the last unscale found inf/NaN) in one launch; with
   update_scaler != 0 its first thread also runs the scale rule (amp__cu_scaler_update(-1)), so a
   whole step is 2 launches. */
extern amp_status amp__cu_optim_step(void *state, void *optim, void *scaler, int update_scaler, char *msg, size_t cap);
/* [sync] the step count, norm, clip and skip state. */
extern amp_status amp__cu_optim_read(void *state, const void *optim, amp_cu_optim_info *info, char *msg, size_t cap);
/* [sync] copy tensor index's master (which 0), first moment (1) or second moment (2) to host
   (to_device 0) or from host (to_device 1); a moment the kind does not keep is AMP_ERR_ARG. */
extern amp_status amp__cu_optim_state_io(void *state, void *optim, size_t index, int which, float *host,
                                         int to_device, char *msg, size_t cap);
/* [step] set the step count (checkpoint load). */
extern amp_status amp__cu_optim_set_step(void *state, void *optim, int64_t t, char *msg, size_t cap);
/* The per-step coefficients the device computes for update number t (t >= 1), on the host: the
   same source compiled for both sides. */
extern void       amp__cu_step_coefs(const amp_cu_hparams *h, int64_t t, struct amp_step_coefs *c);

/* [step] dst = src converted (any pair of F32/F16/BF16; same type: a copy). 1 launch. */
extern amp_status amp__cu_cast(void *state, void *dst, int32_t dst_type, const void *src, int32_t src_type,
                               size_t n, char *msg, size_t cap);

/* Plumbing for tests, benchmarks and checkpoints. amp__cu_copy: dir 0 host->device, 1 device->host
   ([sync]), 2 device->device ([step], async on the stream). Capture: begin/end on the device's
   stream (it must not be the legacy default stream); end instantiates the graph and counts its
   kernel nodes. */
extern amp_status amp__cu_malloc(void *state, void **p, size_t bytes, char *msg, size_t cap);
extern void       amp__cu_free(void *state, void *p);
extern amp_status amp__cu_copy(void *state, void *dst, const void *src, size_t bytes, int dir, char *msg, size_t cap);
extern amp_status amp__cu_stream_create(int ordinal, void **stream, char *msg, size_t cap);
extern void       amp__cu_stream_destroy(void *stream);
extern amp_status amp__cu_capture_begin(void *state, char *msg, size_t cap);
extern amp_status amp__cu_capture_end(void *state, void **graph, size_t *kernel_nodes, char *msg, size_t cap);
extern amp_status amp__cu_graph_launch(void *state, void *graph, char *msg, size_t cap);
extern void       amp__cu_graph_destroy(void *graph);

/* ------------------------------------------------------------------------------------------
   Gradient scaler (mirrors PyTorch: scaler.unscale_(opt) / scaler.step(opt) / scaler.update())
   ------------------------------------------------------------------------------------------ */

enum { AMP_HYSTERESIS_CONSECUTIVE = 0, AMP_HYSTERESIS_CLEAN_REFILL = 1, AMP_HYSTERESIS_GROWTH_REFILL = 2 };

typedef struct amp_scaler_config {
  float init_scale;      /* 0 -> 65536 */
  float growth_factor;   /* 0 -> 2.0, must be > 1 */
  float backoff_factor;  /* 0 -> 0.5, must be in (0, 1) */
  int   growth_interval; /* 0 -> 2000 */
  int   hysteresis;      /* 0 -> 1: overflowing steps counted before one back-off */
  int   hysteresis_mode; /* how the count refills: AMP_HYSTERESIS_CONSECUTIVE (0, Paddle),
                            AMP_HYSTERESIS_CLEAN_REFILL (apex, DeepSpeed consecutive_hysteresis),
                            AMP_HYSTERESIS_GROWTH_REFILL (DeepSpeed default) */
  float min_scale;       /* 0 -> no floor (but never below FLT_MIN, see the manual) */
  float max_scale;       /* 0 -> no cap */
  int   fixed;           /* nonzero: static loss scaling at init_scale */
} amp_scaler_config;
typedef enum amp_preset { AMP_PRESET_PYTORCH = 0, AMP_PRESET_PADDLE, AMP_PRESET_DEEPSPEED,
                          AMP_PRESET_APEX, AMP_PRESET_KERAS } amp_preset;

typedef struct amp_optimizer amp_optimizer;
typedef struct amp_scaler amp_scaler;

AMPDEF amp_scaler_config amp_scaler_preset(amp_preset p);
AMPDEF amp_status amp_scaler_create(amp_scaler **out, amp_device *d, const amp_scaler_config *cfg /* NULL = defaults */);
AMPDEF void       amp_scaler_destroy(amp_scaler *s);
AMPDEF float      amp_scaler_get_scale(amp_scaler *s);               /* on CUDA this waits for the stream */
AMPDEF amp_status amp_scaler_unscale(amp_scaler *s, amp_optimizer *o); /* optional, at most once per step */
AMPDEF amp_status amp_scaler_step(amp_scaler *s, amp_optimizer *o);    /* unscale if needed, skip on inf/NaN, else update */
AMPDEF amp_status amp_scaler_update(amp_scaler *s);                    /* the scale rule; call once per iteration */
AMPDEF amp_status amp_scaler_update_found_inf(amp_scaler *s, int found_inf); /* for trainers that check grads themselves */

/* The scale rule's state, shared by the CPU scaler and the device-resident one. */
typedef struct amp_scale_state {
  float   scale;        /* the current loss scale */
  int32_t tracker;      /* clean steps since the last growth or overflow */
  int32_t hyst;         /* CONSECUTIVE: overflows in a row so far; *_REFILL: overflows left before a back-off */
  int32_t at_floor;     /* 1 when the last overflow wanted to go below the floor */
} amp_scale_state;

/* The resolved rule parameters (defaults filled in, floor at least FLT_MIN). */
typedef struct amp_scale_params {
  float growth, backoff, floor, cap;   /* cap 0: none */
  int32_t interval, hysteresis, mode, fixed;
} amp_scale_params;

/* The scale rule, once per iteration (SEMANTICS.md). Multiplications are done in double and
   rounded once to float, as PyTorch's and apex's kernels do (their factors are doubles). */
static inline AMP_HD void amp__scale_rule(amp_scale_state *st, const amp_scale_params *pr, int found_inf) {
  if (pr->fixed) return;
  if (found_inf) {
    int back_off;
    st->tracker = 0;
    if (pr->mode == AMP_HYSTERESIS_CONSECUTIVE) {
      st->hyst += 1;
      back_off = st->hyst >= pr->hysteresis;
      if (back_off) st->hyst = 0;
    } else {
      if (st->hyst > 0) st->hyst -= 1;     /* once run out it stays out: each overflow backs off */
      back_off = st->hyst <= 0;
    }
    if (back_off) {
      float s = (float)((double)st->scale * (double)pr->backoff);
      st->at_floor = !(s >= pr->floor);   /* also catches NaN */
      st->scale = st->at_floor ? pr->floor : s;
    }
  } else {
    if (pr->mode == AMP_HYSTERESIS_CONSECUTIVE) st->hyst = 0;
    else if (pr->mode == AMP_HYSTERESIS_CLEAN_REFILL) st->hyst = pr->hysteresis;
    st->at_floor = 0;
    st->tracker += 1;
    if (st->tracker >= pr->interval) {
      float s = (float)((double)st->scale * (double)pr->growth);
      if (pr->cap > 0.0f && s > pr->cap) s = pr->cap;
      if (s - s == 0.0f) st->scale = s;   /* finite: a growth to inf leaves the scale as it was */
      st->tracker = 0;
      if (pr->mode == AMP_HYSTERESIS_GROWTH_REFILL) st->hyst = pr->hysteresis;
    }
  }
}

/* The inverse scale used for unscaling: a multiply, never a divide (PyTorch). */
static inline AMP_HD float amp__inv_scale(float scale) { return (float)(1.0 / (double)scale); }

/* ------------------------------------------------------------------------------------------
   Master-copy optimizers
   ------------------------------------------------------------------------------------------ */

typedef enum amp_optim_kind { AMP_SGD = 0, AMP_ADAM, AMP_ADAMW, AMP_CUSTOM } amp_optim_kind;
typedef struct amp_optim_config {
  amp_optim_kind kind;                   /* 0 -> AMP_SGD */
  float lr;                              /* 0 -> 1e-3 */
  float weight_decay;                    /* 0 -> none. L2 for SGD/Adam, decoupled for AdamW */
  float momentum, dampening; int nesterov;  /* SGD; 0 -> plain SGD. nesterov needs momentum > 0, dampening 0 */
  float beta1, beta2, eps;               /* 0 -> 0.9, 0.999, 1e-8 */
  float max_grad_norm;                   /* 0 -> no clipping; global L2 norm of the unscaled grads */
  /* AMP_CUSTOM: the trainer's own fp32 update, run on each master tensor with unscaled fp32 grads */
  void (*custom_step)(void *user, float *master, const float *grad, size_t n, size_t index, long step);
  void *custom_user;
} amp_optim_config;

AMPDEF amp_status amp_optimizer_create(amp_optimizer **out, amp_device *d, const amp_optim_config *cfg);
AMPDEF amp_status amp_optimizer_add(amp_optimizer *o, amp_dtype dtype, void *weights, const void *grads, size_t n);
AMPDEF amp_status amp_optimizer_set_lr(amp_optimizer *o, float lr);
AMPDEF float      amp_optimizer_grad_norm(const amp_optimizer *o);   /* unscaled L2 norm seen at the last unscale */
AMPDEF const float *amp_optimizer_master(const amp_optimizer *o, size_t index, size_t *n); /* fp32 master (device pointer on CUDA) */
AMPDEF void       amp_optimizer_destroy(amp_optimizer *o);
AMPDEF amp_status amp_checkpoint_save(const char *path, const amp_optimizer *o, const amp_scaler *s);
AMPDEF amp_status amp_checkpoint_load(const char *path, amp_optimizer *o, amp_scaler *s);

/* Per-step coefficients of an update, computed once per step (on the host, or by one device
   thread) and read by every element. */
typedef struct amp_step_coefs {
  float lr, wd;              /* learning rate, weight decay */
  float momentum, dampening; /* SGD */
  int32_t nesterov, first;   /* SGD: nesterov flag; first step of the momentum buffer */
  float beta1, beta2, eps;   /* Adam/AdamW */
  float step_size;           /* Adam: lr / (1 - beta1^t) */
  float bc2_sqrt;            /* Adam: sqrt(1 - beta2^t) */
  float decay;               /* AdamW: 1 - lr * wd, applied to the weight first */
} amp_step_coefs;

/* Unscaled, clipped gradient of one element: g * (inv_scale * clip) folded into one multiply. */

/* SGD with momentum, dampening, nesterov, L2 weight decay (torch.optim.SGD). */
static inline AMP_HD void amp__sgd_elem(float *p, float *buf, float g, const amp_step_coefs *c) {
  float w = *p;
  if (c->wd != 0.0f) g = g + c->wd * w;
  if (c->momentum != 0.0f) {
    float b = c->first ? g : c->momentum * *buf + (1.0f - c->dampening) * g;
    *buf = b;
    g = c->nesterov ? g + c->momentum * b : b;
  }
  *p = w - c->lr * g;
}

/* Adam (wd = L2 on the grad) and AdamW (decay = 1 - lr*wd on the weight, wd 0 on the grad),
   torch.optim.Adam/AdamW's formulas with t counted from 1. */
static inline AMP_HD void amp__adam_elem(float *p, float *m, float *v, float g, const amp_step_coefs *c) {
  float w = *p * c->decay;
  float mm, vv, denom;
  if (c->wd != 0.0f) g = g + c->wd * w;
  mm = c->beta1 * *m + (1.0f - c->beta1) * g;
  vv = c->beta2 * *v + (1.0f - c->beta2) * g * g;
  denom = sqrtf(vv) / c->bc2_sqrt + c->eps;
  *m = mm; *v = vv;
  *p = w - c->step_size * (mm / denom);
}

/* The clip coefficient of torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)). */
static inline AMP_HD float amp__clip_coef(float norm, float max_norm) {
  float c;
  if (max_norm <= 0.0f) return 1.0f;
  c = max_norm / (norm + 1e-6f);
  return c < 1.0f ? c : 1.0f;
}

/* ------------------------------------------------------------------------------------------
   Tensor Core matrix product (cblas conventions)
   C = alpha * op(A) * op(B) + beta * C, fp32 accumulation.
   ------------------------------------------------------------------------------------------ */

typedef enum amp_layout { AMP_ROW_MAJOR = 0, AMP_COL_MAJOR } amp_layout;
typedef enum amp_trans  { AMP_NO_TRANS = 0, AMP_TRANS } amp_trans;
AMPDEF amp_status amp_gemm(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb,
                           int m, int n, int k, float alpha,
                           const void *A, amp_dtype a_type, int lda,
                           const void *B, amp_dtype b_type, int ldb,
                           float beta, void *C, amp_dtype c_type, int ldc);

#ifdef __cplusplus
}
#endif

#endif /* AMP_H */

/* ==========================================================================================
   IMPLEMENTATION
   ========================================================================================== */

#ifdef AMP_IMPLEMENTATION
#ifndef AMP__IMPLEMENTATION_DONE
#define AMP__IMPLEMENTATION_DONE

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <float.h>

#if defined(AMP_MALLOC) && defined(AMP_FREE)
#elif !defined(AMP_MALLOC) && !defined(AMP_FREE)
#define AMP_MALLOC(sz) malloc(sz)
#define AMP_FREE(p) free(p)
#else
#error "amp.h: define both AMP_MALLOC and AMP_FREE, or neither"
#endif
#ifndef AMP_ASSERT
#include <assert.h>
#define AMP_ASSERT(x) assert(x)
#endif

#if defined(__cplusplus) && __cplusplus >= 201103L
#define AMP__TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define AMP__TLS _Thread_local
#elif defined(_MSC_VER)
#define AMP__TLS __declspec(thread)
#else
#define AMP__TLS __thread
#endif

#if defined(__GNUC__) || defined(__clang__)
#define AMP__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AMP__PRINTF(a, b)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
   Implementation: errors
   ------------------------------------------------------------------------------------------ */

static AMP__TLS char amp__err_buf[512];

/* Records the message for amp_last_error() and returns s, so a check reads
   `return amp__fail(AMP_ERR_ARG, "amp_x: n %zu must be > 0", n);` */
static amp_status amp__fail(amp_status s, const char *fmt, ...) AMP__PRINTF(2, 3);
static amp_status amp__fail(amp_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(amp__err_buf, sizeof amp__err_buf, fmt, ap);
  va_end(ap);
  return s;
}

AMPDEF const char *amp_status_string(amp_status s) {
  switch (s) {
    case AMP_OK: return "AMP_OK";
    case AMP_ERR_ARG: return "AMP_ERR_ARG";
    case AMP_ERR_NOMEM: return "AMP_ERR_NOMEM";
    case AMP_ERR_PARSE: return "AMP_ERR_PARSE";
    case AMP_ERR_STATE: return "AMP_ERR_STATE";
    case AMP_ERR_IO: return "AMP_ERR_IO";
    case AMP_ERR_CORRUPT: return "AMP_ERR_CORRUPT";
    case AMP_ERR_UNSUPPORTED: return "AMP_ERR_UNSUPPORTED";
    case AMP_ERR_DEVICE: return "AMP_ERR_DEVICE";
  }
  return "AMP_ERR_UNKNOWN";
}

AMPDEF const char *amp_last_error(void) { return amp__err_buf; }

static const char *amp__dtype_name(amp_dtype t) {
  return t == AMP_F32 ? "AMP_F32" : t == AMP_F16 ? "AMP_F16" : t == AMP_BF16 ? "AMP_BF16" : "unknown";
}

/* ------------------------------------------------------------------------------------------
   Implementation: number formats
   ------------------------------------------------------------------------------------------ */

AMPDEF size_t amp_dtype_size(amp_dtype t) {
  return t == AMP_F32 ? 4u : (t == AMP_F16 || t == AMP_BF16) ? 2u : 0u;
}

/* The portable loops: one per pair, plain enough for the compiler to vectorise. */
static void amp__convert_portable(void *dst, amp_dtype dt, const void *src, amp_dtype st, size_t n) {
  size_t i;
  if (dt == st) { memmove(dst, src, n * amp_dtype_size(dt)); return; }
  if (st == AMP_F32) {
    const float *s = (const float *)src;
    if (dt == AMP_F16) { amp_f16 *d = (amp_f16 *)dst; for (i = 0; i < n; i++) d[i] = amp_f32_to_f16(s[i]); }
    else { amp_bf16 *d = (amp_bf16 *)dst; for (i = 0; i < n; i++) d[i] = amp_f32_to_bf16(s[i]); }
  } else if (dt == AMP_F32) {
    float *d = (float *)dst;
    if (st == AMP_F16) { const amp_f16 *s = (const amp_f16 *)src; for (i = 0; i < n; i++) d[i] = amp_f16_to_f32(s[i]); }
    else { const amp_bf16 *s = (const amp_bf16 *)src; for (i = 0; i < n; i++) d[i] = amp_bf16_to_f32(s[i]); }
  } else { /* f16 <-> bf16 through f32; in place (dst == src) is safe element by element */
    const uint16_t *s = (const uint16_t *)src; uint16_t *d = (uint16_t *)dst;
    if (st == AMP_F16) for (i = 0; i < n; i++) d[i] = amp_f32_to_bf16(amp_f16_to_f32(s[i]));
    else for (i = 0; i < n; i++) d[i] = amp_f32_to_f16(amp_bf16_to_f32(s[i]));
  }
}

static int amp__simd_on = -1; /* -1: not decided yet */

static int amp__cpu_has_f16c(void) { return 0; } /* replaced by the CPUID check in the SIMD part */

AMPDEF int amp_simd_active(void) {
  if (amp__simd_on < 0) amp__simd_on = amp__cpu_has_f16c();
  return amp__simd_on;
}
AMPDEF void amp_simd_enable(int on) { amp__simd_on = on ? amp__cpu_has_f16c() : 0; }

AMPDEF amp_status amp_convert(void *dst, amp_dtype dst_type, const void *src, amp_dtype src_type, size_t n) {
  size_t ds = amp_dtype_size(dst_type), ss = amp_dtype_size(src_type);
  if (!ds) return amp__fail(AMP_ERR_ARG, "amp_convert: dst_type %d is not a dtype (AMP_F32, AMP_F16, AMP_BF16)", (int)dst_type);
  if (!ss) return amp__fail(AMP_ERR_ARG, "amp_convert: src_type %d is not a dtype (AMP_F32, AMP_F16, AMP_BF16)", (int)src_type);
  if (n == 0) return AMP_OK;
  if (!dst) return amp__fail(AMP_ERR_ARG, "amp_convert: dst is NULL with n = %zu", n);
  if (!src) return amp__fail(AMP_ERR_ARG, "amp_convert: src is NULL with n = %zu", n);
  if (ds != ss) {
    uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
    if (d0 < s0 + n * ss && s0 < d0 + n * ds)
      return amp__fail(AMP_ERR_ARG, "amp_convert: dst %p (%s) and src %p (%s) overlap and their element sizes differ",
                       dst, amp__dtype_name(dst_type), src, amp__dtype_name(src_type));
  }
  amp__convert_portable(dst, dst_type, src, src_type, n);
  return AMP_OK;
}

/* ------------------------------------------------------------------------------------------
   Implementation: op-list policy
   ------------------------------------------------------------------------------------------ */

/* PLACEHOLDER(issue 3): replaced by the policy implementation. */
struct amp_policy { int placeholder; };
AMPDEF amp_status amp_policy_create(amp_policy **out, amp_mode mode, amp_dtype low) { (void)out; (void)mode; (void)low; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_policy_create: not implemented yet"); }
AMPDEF void amp_policy_destroy(amp_policy *p) { (void)p; }
AMPDEF amp_list amp_policy_list(const amp_policy *p, const char *op) { (void)p; (void)op; return AMP_LIST_NONE; }
AMPDEF amp_status amp_policy_set(amp_policy *p, const char *op, amp_list list) { (void)p; (void)op; (void)list; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_policy_set: not implemented yet"); }
AMPDEF amp_status amp_policy_customize(amp_policy *p, const char *const *white, size_t n_white, const char *const *black, size_t n_black) { (void)p; (void)white; (void)n_white; (void)black; (void)n_black; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_policy_customize: not implemented yet"); }
AMPDEF amp_status amp_policy_load_mixlist(amp_policy *p, const char *json, size_t len) { (void)p; (void)json; (void)len; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_policy_load_mixlist: not implemented yet"); }
AMPDEF amp_status amp_policy_load_mixlist_file(amp_policy *p, const char *path) { (void)p; (void)path; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_policy_load_mixlist_file: not implemented yet"); }
AMPDEF amp_dtype amp_policy_decide(const amp_policy *p, const char *op, const amp_dtype *inputs, size_t n_inputs) { (void)p; (void)op; (void)inputs; (void)n_inputs; return AMP_F32; }
/* END PLACEHOLDER(issue 3) */

/* ------------------------------------------------------------------------------------------
   Implementation: devices
   ------------------------------------------------------------------------------------------ */

struct amp_device {
  int is_cuda;
  int ordinal;
  void *stream;    /* cudaStream_t */
  void *cuda;      /* amp_kernels.cu's per-device state (cuBLASLt handle, workspace, caches) */
};

static amp_device amp__cpu_device = {0, -1, NULL, NULL};

AMPDEF amp_device *amp_cpu(void) { return &amp__cpu_device; }
AMPDEF int amp_device_is_cuda(const amp_device *d) { return d && d->is_cuda; }

#ifdef AMP_CUDA
/* The interface to amp_kernels.cu. Each function there returns an amp_status and, on failure,
   writes its message (the CUDA call, the error's name, file:line) into msg. */
extern amp_status amp__cu_open(int ordinal, void *stream, void **state, char *msg, size_t cap);
extern void       amp__cu_close(void *state);
extern amp_status amp__cu_sync(void *state, char *msg, size_t cap);

AMPDEF amp_status amp_cuda_open(amp_device **out, int ordinal, void *cuda_stream) {
  amp_device *d;
  amp_status st;
  void *state = NULL;
  if (!out) return amp__fail(AMP_ERR_ARG, "amp_cuda_open: out is NULL");
  if (ordinal < 0) return amp__fail(AMP_ERR_ARG, "amp_cuda_open: ordinal %d must be >= 0", ordinal);
  st = amp__cu_open(ordinal, cuda_stream, &state, amp__err_buf, sizeof amp__err_buf);
  if (st != AMP_OK) return st;
  d = (amp_device *)AMP_MALLOC(sizeof *d);
  if (!d) { amp__cu_close(state); return amp__fail(AMP_ERR_NOMEM, "amp_cuda_open: out of memory"); }
  d->is_cuda = 1; d->ordinal = ordinal; d->stream = cuda_stream; d->cuda = state;
  *out = d;
  return AMP_OK;
}
AMPDEF void amp_device_close(amp_device *d) {
  if (!d || !d->is_cuda) return;     /* amp_cpu() is never freed */
  amp__cu_close(d->cuda);
  AMP_FREE(d);
}
AMPDEF amp_status amp_device_sync(amp_device *d) {
  if (!d) return amp__fail(AMP_ERR_ARG, "amp_device_sync: d is NULL");
  if (!d->is_cuda) return AMP_OK;
  return amp__cu_sync(d->cuda, amp__err_buf, sizeof amp__err_buf);
}
#else
AMPDEF amp_status amp_cuda_open(amp_device **out, int ordinal, void *cuda_stream) {
  (void)cuda_stream;
  if (out) *out = NULL;
  return amp__fail(AMP_ERR_UNSUPPORTED, "amp_cuda_open(ordinal %d): amp.h was built without CUDA; "
                   "define AMP_CUDA in the implementation unit, compile amp_kernels.cu with nvcc and link "
                   "-lcudart -lcublasLt -lcublas", ordinal);
}
AMPDEF void amp_device_close(amp_device *d) { (void)d; }
AMPDEF amp_status amp_device_sync(amp_device *d) {
  if (!d) return amp__fail(AMP_ERR_ARG, "amp_device_sync: d is NULL");
  return AMP_OK;
}
#endif

/* ------------------------------------------------------------------------------------------
   Implementation: scaler
   ------------------------------------------------------------------------------------------ */

/* PLACEHOLDER(issue 4): replaced by the scaler implementation. */
struct amp_scaler { int placeholder; };
AMPDEF amp_scaler_config amp_scaler_preset(amp_preset p) { amp_scaler_config c; (void)p; memset(&c, 0, sizeof c); return c; }
AMPDEF amp_status amp_scaler_create(amp_scaler **out, amp_device *d, const amp_scaler_config *cfg) { (void)out; (void)d; (void)cfg; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_scaler_create: not implemented yet"); }
AMPDEF void amp_scaler_destroy(amp_scaler *s) { (void)s; }
AMPDEF float amp_scaler_get_scale(amp_scaler *s) { (void)s; return 0.0f; }
AMPDEF amp_status amp_scaler_unscale(amp_scaler *s, amp_optimizer *o) { (void)s; (void)o; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_scaler_unscale: not implemented yet"); }
AMPDEF amp_status amp_scaler_step(amp_scaler *s, amp_optimizer *o) { (void)s; (void)o; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_scaler_step: not implemented yet"); }
AMPDEF amp_status amp_scaler_update(amp_scaler *s) { (void)s; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_scaler_update: not implemented yet"); }
AMPDEF amp_status amp_scaler_update_found_inf(amp_scaler *s, int found_inf) { (void)s; (void)found_inf; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_scaler_update_found_inf: not implemented yet"); }
/* END PLACEHOLDER(issue 4) */

/* ------------------------------------------------------------------------------------------
   Implementation: optimizers and checkpoints
   ------------------------------------------------------------------------------------------ */

/* PLACEHOLDER(issue 4): replaced by the optimizer implementation. */
struct amp_optimizer { int placeholder; };
AMPDEF amp_status amp_optimizer_create(amp_optimizer **out, amp_device *d, const amp_optim_config *cfg) { (void)out; (void)d; (void)cfg; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_optimizer_create: not implemented yet"); }
AMPDEF amp_status amp_optimizer_add(amp_optimizer *o, amp_dtype dtype, void *weights, const void *grads, size_t n) { (void)o; (void)dtype; (void)weights; (void)grads; (void)n; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_optimizer_add: not implemented yet"); }
AMPDEF amp_status amp_optimizer_set_lr(amp_optimizer *o, float lr) { (void)o; (void)lr; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_optimizer_set_lr: not implemented yet"); }
AMPDEF float amp_optimizer_grad_norm(const amp_optimizer *o) { (void)o; return 0.0f; }
AMPDEF const float *amp_optimizer_master(const amp_optimizer *o, size_t index, size_t *n) { (void)o; (void)index; (void)n; return NULL; }
AMPDEF void amp_optimizer_destroy(amp_optimizer *o) { (void)o; }
AMPDEF amp_status amp_checkpoint_save(const char *path, const amp_optimizer *o, const amp_scaler *s) { (void)path; (void)o; (void)s; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_checkpoint_save: not implemented yet"); }
AMPDEF amp_status amp_checkpoint_load(const char *path, amp_optimizer *o, amp_scaler *s) { (void)path; (void)o; (void)s; return amp__fail(AMP_ERR_UNSUPPORTED, "amp_checkpoint_load: not implemented yet"); }
/* END PLACEHOLDER(issue 4) */

/* ------------------------------------------------------------------------------------------
   Implementation: matrix product
   ------------------------------------------------------------------------------------------ */

/* PLACEHOLDER(issue 6): replaced by the matrix product. */
AMPDEF amp_status amp_gemm(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k, float alpha,
                           const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type, int ldb,
                           float beta, void *C, amp_dtype c_type, int ldc) {
  (void)d; (void)layout; (void)ta; (void)tb; (void)m; (void)n; (void)k; (void)alpha; (void)A; (void)a_type; (void)lda;
  (void)B; (void)b_type; (void)ldb; (void)beta; (void)C; (void)c_type; (void)ldc;
  return amp__fail(AMP_ERR_UNSUPPORTED, "amp_gemm: not implemented yet");
}
/* END PLACEHOLDER(issue 6) */

#ifdef __cplusplus
}
#endif

#endif /* AMP__IMPLEMENTATION_DONE */
#endif /* AMP_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 the amp.h authors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication in perpetuity for the benefit of the software
and its users and to the detriment of all who believe that copyright
interest in the software to be inconvenient. We make this dedication by
overriding all previous copyright interest through the laws of copyright.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------
*/
