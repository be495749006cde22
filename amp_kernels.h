/* amp_kernels.h - the CUDA half of amp.h's device line: what amp_kernels.cu defines (private).

   amp.h's implementation includes this file when it is built with AMP_CUDA, and amp_kernels.cu
   includes it after amp.h; a trainer never needs it. The CUDA tests and benchmarks call these
   functions directly (they include amp.h with AMP_IMPLEMENTATION and AMP_CUDA).

   The extern "C" launchers below are the CUDA device's operations. amp.h's public functions check
   arguments, keep the call order and write messages once, above the line, and reach the device
   through the operation table of its implementation section ("The device line"), whose CUDA
   entries are thin calls of these. `state` is the device's amp__cu_state (amp_device.cuda). Each
   returns an amp_status and on failure writes "amp__cu_x: what" (AMP_ERR_ARG, checked before any
   CUDA call) or the CUDA call, the error's name and file:line (AMP_ERR_DEVICE) into msg[cap]; a
   failing call changes nothing. Calls marked [step] only enqueue kernels on the device's stream:
   no allocation, no copy, no host wait, so a step may be captured in a CUDA graph. Calls marked
   [sync] wait for the stream. */
#ifndef AMP_KERNELS_H
#define AMP_KERNELS_H

#include "amp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Devices: open makes the per-device state (cuBLASLt handle, workspace, caches) for ordinal on the
   stream (NULL: the legacy default stream); close waits for the stream and frees it. */
extern amp_status amp__cu_open(int ordinal, void *stream, void **state, char *msg, size_t cap);
extern void       amp__cu_close(void *state);
extern amp_status amp__cu_sync(void *state, char *msg, size_t cap);

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
  int32_t spike;                /* the last unscale saw a spike (amp__spike_skip): the next step skips */
  int64_t spike_skips;          /* steps skipped for a spike */
  amp__spike_window window;     /* the last clean steps' norms (amp__spike_skip's spike_zscore window) */
  float scale;                  /* the loss scale the last unscale divided by (1 without a scaler) */
  int64_t passes;               /* unscale decisions made on the device, a replayed CUDA graph's included */
} amp_cu_optim_info;

/* Device scaler: one small block in device memory (scale state, rule parameters, inverse scale,
   found-inf flag, skip counts). */
extern amp_status amp__cu_scaler_create(void *state, void **scaler, const amp_scale_state *st,
                                        const amp_scale_params *pr, char *msg, size_t cap);
extern void       amp__cu_scaler_destroy(void *state, void *scaler);
/* [step] the whole block (checkpoint load): state, parameters, the inverse scale the unscale uses
   (1/init_scale for fixed scaling), skip counts; the found-inf flag cleared. 1 launch. */
extern amp_status amp__cu_scaler_load(void *state, void *scaler, const amp_scale_state *st,
                                      const amp_scale_params *pr, float inv_scale, int last_skipped,
                                      int64_t skipped, char *msg, size_t cap);
/* [sync] the scale state and the rest of the block; either output may be NULL. */
extern amp_status amp__cu_scaler_read(void *state, const void *scaler, amp_scale_state *st,
                                      amp_cu_scaler_info *info, char *msg, size_t cap);
/* The device address of the current scale (a float), for the trainer's own loss-gradient kernel. */
extern float     *amp__cu_scaler_scale_ptr(void *scaler);
/* [step] the scale rule on the device with found_inf = the device flag (OR-ed by the unscales since
   the last rule) OR (found_inf > 0), as the CPU's update()/update_found_inf(); found_inf is -1, 0
   or 1. Then the flag is cleared. 1 launch. */
extern amp_status amp__cu_scaler_update(void *state, void *scaler, int found_inf, char *msg, size_t cap);
/* [step] buf[i] = buf[i] * scale, rounded to dtype (the loss gradient of the scaled loss). 1 launch. */
extern amp_status amp__cu_scale_buffer(void *state, const void *scaler, void *buf, int32_t dtype, size_t n,
                                       char *msg, size_t cap);

/* Device optimizer: uploads the tensor table and its chunk list once, allocates the fp32 masters
   (each taken once: from the record's master, the buffer amp.h filled at add, else from its model
   copy; a SPLIT record's master is split into the model copy and its remainders), the moments
   and the per-step block. tensors: the optimizer's records (amp__tensor, amp.h), as
   amp_optimizer_add_tensor validated them; read: w, g (device
   pointers), n, wtype, gtype, group, round_to, stochastic, master_mode, master, moments (every type
   amp.h's AMP__MOMENTS_TYPES marks as kept on CUDA; another is AMP_ERR_UNSUPPORTED). lr_scale and
   weight_decay: the groups' values, indexed by group (entry 0 unused: group 0 takes lr_scale 1 and
   the config's weight_decay); NULL when every tensor is in group 0. h->kind must be a kind of
   amp.h's list whose update runs on the device (its element function: not AMP_CUSTOM); anything
   else is AMP_ERR_ARG naming the kind. The moments are zeroed in their kept form (f32, bf16 words,
   8-bit codes with their absmaxes, fp8 codes with their scale_inv). */
extern amp_status amp__cu_optim_create(void *state, void **optim, const amp__tensor *tensors, size_t n_tensors,
                                       const float *lr_scale, const float *weight_decay, const amp_optim_config *h,
                                       char *msg, size_t cap);
extern void       amp__cu_optim_destroy(void *state, void *optim);
/* [step] new hyperparameters (the kind must stay the same). */
extern amp_status amp__cu_optim_set_hparams(void *state, void *optim, const amp_optim_config *h, char *msg, size_t cap);
/* [step] tensor index's grads moved to grads (device pointer; amp_optimizer_set_grads checked it):
   its record in the device table rewritten on the stream. AMP_ERR_STATE while the stream is being
   captured. */
extern amp_status amp__cu_optim_set_grads(void *state, void *optim, size_t index, const void *grads, char *msg,
                                          size_t cap);
/* The fp32 master of tensor index (device pointer) and its length; NULL when index is out of range
   or the tensor keeps no fp32 master (AMP_MASTER_SPLIT / _NONE). */
extern float     *amp__cu_optim_master(void *optim, size_t index, size_t *n);
/* The remainders of an AMP_MASTER_SPLIT tensor (device pointer, n uint16); NULL for any other. */
extern uint16_t  *amp__cu_optim_rem(void *optim, size_t index);
/* [step] unscale + inf/NaN check + sum of squares over every grad in one launch; its last block
   takes the norm, the clip coefficient and the skip decision, and ORs an overflow into the scaler's
   flag (scaler NULL: inverse scale 1, no flag). Grads are read, never written. */
extern amp_status amp__cu_optim_unscale(void *state, void *optim, void *scaler, char *msg, size_t cap);
/* [step] data-parallel unscale in two halves around the trainer's all-reduce. _local: the same pass,
   but the last block only writes this rank's {found_inf 0/1, sum of squares} as 2 doubles to the
   optimizer's device buffer *buf and decides nothing (optimizer and scaler unchanged). _finish
   (1 launch, 1 thread): norm, clip, skip from the buffer as reduced (the SUM over ranks); an
   overflow is ORed into the scaler's flag. With an identity reduce the result equals
   amp__cu_optim_unscale's bit for bit. */
extern amp_status amp__cu_optim_unscale_local(void *state, void *optim, void *scaler, double **buf, char *msg,
                                              size_t cap);
extern amp_status amp__cu_optim_unscale_finish(void *state, void *optim, void *scaler, char *msg, size_t cap);
/* [step] the fused update in one launch per form of the step kernel the tensors need (f32 moments
   or none; bf16 / fp8 moments; 8-bit blocks), and one more where a tensor keeps AMP_MOMENTS_FP8 (a
   first launch takes the new moments' amaxes); it changes nothing but the skipped count when this
   optimizer's last unscale or, scaler given, any unscale into that scaler since its last rule found
   inf/NaN. With update_scaler != 0 its last block also runs the scale rule (amp__cu_scaler_update(-1))
   once every block has read the flag: no launch of its own. */
extern amp_status amp__cu_optim_step(void *state, void *optim, void *scaler, int update_scaler, char *msg, size_t cap);
/* [sync] the step count, norm, clip and skip state. */
extern amp_status amp__cu_optim_read(void *state, const void *optim, amp_cu_optim_info *info, char *msg, size_t cap);
/* [sync] the gradient stats of the last unscale (amp_optim_config.stats on at create) into the
   records' gstat, n_tensors of them (host memory); stats off: AMP_ERR_ARG. Each unscale clears
   them on the stream first (cudaMemsetAsync) and its kernel adds into them: no pass of its own. */
extern amp_status amp__cu_optim_stats_read(void *state, const void *optim, amp__tensor *tensors, size_t n_tensors,
                                           char *msg, size_t cap);
/* [sync] copy tensor index's master (which 0), first moment (1) or second moment (2) to host
   (to_device 0) or from host (to_device 1): n floats, or a moment of a tensor with moments other than
   AMP_MOMENTS_F32 as kept, the checkpoint's bytes (amp__moment_bytes: n bf16 words; 8-bit: the
   blocks' f32 absmaxes, then the n codes; fp8: the f32 scale_inv, then the n codes); a moment the
   kind does not keep, or the master of a tensor that keeps none (AMP_MASTER_SPLIT / _NONE: amp.h
   decodes those itself), is AMP_ERR_ARG. */
extern amp_status amp__cu_optim_state_io(void *state, void *optim, size_t index, int which, float *host,
                                         int to_device, char *msg, size_t cap);
/* [step] set the step count (checkpoint load), and clear the last unscale's decision (overflow,
   spike): nothing from before the load is reported after it. */
extern amp_status amp__cu_optim_set_step(void *state, void *optim, int64_t t, char *msg, size_t cap);
/* [step] set the spike skip count and the spike window (checkpoint load). 1 launch, the window
   passed by value (nothing read from host memory). */
extern amp_status amp__cu_optim_set_spike(void *state, void *optim, int64_t spike_skips, const amp__spike_window *w,
                                          char *msg, size_t cap);
/* The per-step coefficients the device computes for update number t (t >= 1), on the host: the
   same source compiled for both sides. */
extern void amp__cu_step_coefs(const amp_optim_config *h, int64_t t, int group, float lr_scale, float weight_decay,
                               amp_step_coefs *c);

/* [step] the model copy written from a master: amp__store_model(dst, dtype, round_to, stochastic, key, i,
   master[i]). 1 launch. */
extern amp_status amp__cu_write_model(void *state, void *dst, int32_t dtype, int32_t round_to, int32_t stochastic,
                                      uint64_t key, const float *master, size_t n, char *msg, size_t cap);
/* [step] dst = src converted (any pair of F32/F16/BF16; same type: a copy). 1 launch. */
extern amp_status amp__cu_cast(void *state, void *dst, int32_t dst_type, const void *src, int32_t src_type,
                               size_t n, char *msg, size_t cap);

/* The fp8 scaler: one device block holding n tensors' amax histories (len slots each), scales,
   scale_invs and formats, uploaded from the host arrays given ([sync]); *d_hist, *d_scale and
   *d_scale_inv get where they live (*d_red: n doubles for the data-parallel hook). stats nonzero:
   also per tensor this step's 4 counters and the last step's (uint64, 0 at create) and the last
   update's amax read and scale replaced (2 floats, 0), *d_counts pointing at this step's counters
   (NULL without stats). record: slot 0 of tensor i joined with amax (amp__amax_join), 1 launch,
   refused (AMP_ERR_STATE) while the stream captures a graph (a replay would add the same amax
   again). update: [step] amp__fp8_update_one on every tensor, with stats its counters moved into
   the last step's (this step's cleared), 1 launch. io: the host arrays from the block (to_device
   0) or the block from them (1), [sync]; the counters are not among them. stats: the last step's
   counters (n x 4) and the amax/scale pairs (n x 2) into host arrays, [sync]. */
extern amp_status amp__cu_fp8_create(void *state, void **fp8, size_t n, int len, const amp_dtype *format,
                                     const float *hist, const float *scale, const float *scale_inv, int stats,
                                     float **d_hist, float **d_scale, float **d_scale_inv, double **d_red,
                                     uint64_t **d_counts, char *msg, size_t cap);
/* [step] data parallel: every slot 0 into the block's n doubles as amp__fp8_amax_to_wire (to_slots
   0), or back from them (1) after the hook's MAX; 1 launch. */
extern amp_status amp__cu_fp8_amax_io(void *state, void *fp8, int to_slots, char *msg, size_t cap);
extern void       amp__cu_fp8_destroy(void *state, void *fp8);
extern amp_status amp__cu_fp8_record(void *state, void *fp8, size_t i, float amax, char *msg, size_t cap);
extern amp_status amp__cu_fp8_update(void *state, void *fp8, const amp_fp8_config *c, char *msg, size_t cap);
extern amp_status amp__cu_fp8_io(void *state, void *fp8, float *hist, float *scale, float *scale_inv, int to_device,
                                 char *msg, size_t cap);
extern amp_status amp__cu_fp8_stats(void *state, void *fp8, uint64_t *last, float *used, char *msg, size_t cap);
/* [step] amp_quantize_ex: q = fp8 cast of x * *scale (scale NULL: 1; q NULL: none), *amax joined with
   max |x| (amax NULL: none), counts[0..3] += n and the elements saturated, flushed and NaN
   (amp__fp8_cast_class; counts NULL: none, a kernel without the counting); device pointers. 1
   launch (none for n 0). */
extern amp_status amp__cu_quantize(void *state, void *q, int32_t fp8, const void *x, int32_t x_type, size_t n,
                                   const float *scale, float *amax, uint64_t *counts, char *msg, size_t cap);
/* [step] fp8 block scaling (amp_quantize_blocks, whose arguments amp.h has checked: kind one of
   amp_block_scaling, fp8 AMP_E4M3 / AMP_E5M2, x_type a compute format, ldx, ldq >= cols, no
   overlap): every block's scale into scales and its codes into q, by amp.h's element functions
   (amp__block_scale, amp__block_q). x, q, scales are device pointers. 1 launch. */
extern amp_status amp__cu_quantize_blocks(void *state, int32_t kind, int32_t fp8, int rows, int cols, const void *x,
                                          int32_t x_type, int ldx, void *q, int ldq, void *scales, char *msg,
                                          size_t cap);

/* Plumbing for tests, benchmarks and checkpoints. amp__cu_copy: dir 0 host->device, 1 device->host
   ([sync]), 2 device->device ([step], async on the stream). Capture: begin/end on the device's
   stream (it must not be the legacy default stream); end instantiates the graph and counts its
   kernel nodes. */
extern amp_status amp__cu_malloc(void *state, void **p, size_t bytes, char *msg, size_t cap);
/* [step] stream-ordered scratch (cudaMallocAsync / cudaFreeAsync on the device's stream). */
extern amp_status amp__cu_scratch_alloc(void *state, void **p, size_t bytes, char *msg, size_t cap);
extern void       amp__cu_scratch_free(void *state, void *p);
extern void       amp__cu_free(void *state, void *p);
extern amp_status amp__cu_copy(void *state, void *dst, const void *src, size_t bytes, int dir, char *msg, size_t cap);
extern amp_status amp__cu_stream_create(int ordinal, void **stream, char *msg, size_t cap);
extern void       amp__cu_stream_destroy(void *stream);
extern amp_status amp__cu_capture_begin(void *state, char *msg, size_t cap);
extern amp_status amp__cu_capture_end(void *state, void **graph, size_t *kernel_nodes, char *msg, size_t cap);
extern amp_status amp__cu_graph_launch(void *state, void *graph, char *msg, size_t cap);
extern void       amp__cu_graph_destroy(void *graph);

/* The matrix product: cuBLASLt, the WMMA teaching kernel and the plain fallback kernel. amp_gemm_ex
   has checked every argument; A, B, C and opts->bias are device pointers. */
extern amp_status amp__cu_gemm(void *state, amp_layout layout, amp_trans ta, amp_trans tb,
                               int m, int n, int k, float alpha,
                               const void *A, amp_dtype a_type, int lda,
                               const void *B, amp_dtype b_type, int ldb,
                               float beta, void *C, amp_dtype c_type, int ldc,
                               const amp_gemm_opts *opts, char *msg, size_t cap);

/* NCCL (amp_kernels.cu built with -DAMP_NCCL): the all-reduce of amp_nccl_allreduce_hook and of
   amp_nccl_allreduce_grads, whose arguments amp.h has checked. */
extern amp_status amp__cu_nccl_allreduce(void *comm, double *buf, int n, void *stream, char *msg, size_t cap);
extern amp_status amp__cu_nccl_grads(void *state, void *comm, void *grads, int32_t dtype, size_t n, int average,
                                     int in_f32, char *msg, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* AMP_KERNELS_H */
