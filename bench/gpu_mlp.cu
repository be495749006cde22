/* bench/gpu_mlp.cu - one MLP training step on the GPU: f16 AMP, bf16 and fp8 against amp.h's own
   f32 path, and fp8 against f16 AMP and bf16.

   The model: 4 linear layers 8192 wide (no bias), ReLU after the first three, trained on a batch of
   2048 rows to match a fixed random teacher (T = X Wt) under the loss sum((Y - T)^2) / (2 batch),
   with AdamW (lr 1e-4, weight decay 0.01). Both paths start from the same fp32 weights and see the
   same batch every step:
     f16 AMP  X, weights, activations and grads in f16; every product through amp_gemm (cuBLASLt,
              fp32 accumulation, the forward's ReLU fused into the epilogue); fp32 masters and
              moments; the PyTorch-preset dynamic scaler (amp_scaler_step + amp_scaler_update: the
              unscale, the inf/NaN check and the update on the device);
     bf16     the same in bf16, no loss scaler (bf16 has f32's range): amp_optimizer_step;
     fp8      the bf16 model (weights, activations and grads stored in bf16, fp32 masters, no loss
              scaler) with every product in fp8, TransformerEngine's HYBRID delayed recipe: before
              each product its operands are cast by amp_quantize with their tensor's scale from an
              amp_fp8_scaler (one tensor per layer input, weight and output grad: E4M3 for the
              inputs and weights, E5M2 for the grads), the casts writing the amaxes into the
              scaler's slots; the products are amp_gemm_ex with the scale_invs (cuBLASLt's fp8
              kernels, split accumulation; the forward's ReLU in the finishing kernel), and
              amp_fp8_scaler_update once per step after the optimizer. The forward's W, the weight
              gradient's x and dY are not k-contiguous here (row-major x W, x^T dY): amp_gemm_ex
              packs them (a transposing copy) for cuBLASLt's TN form, as TransformerEngine's casts
              write a transposed copy;
     f32      everything in f32; amp_gemm with allow_tf32 = 0 (full fp32 products, no TF32); the
              scaler-less amp_optimizer_step.
   One step = forward, loss and its gradient (a kernel here: the scale read on the device from
   amp_scaler_scale_ptr), backward (ReLU backward a kernel here), the optimizer. The host never
   waits inside a step. STEPS steps per path; the time of the last TIMED ones by cudaEvent; the loss
   of each step kept on the device and read at the end.
   Lines: steps per second (f16 AMP against f32: the target is >= 2.0x; fp8 against f16 AMP and
   bf16) and the mean loss of the last 5 steps (f16 against f32: the target is within 1%; fp8
   against bf16), and the fp8 casts of the last step that saturated or flushed to zero. */
#include "bench.h"
#ifndef AMP_CUDA
#define AMP_CUDA
#endif
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <cuda_runtime.h>

#define D 8192
#define LAYERS 4
#define BATCH 2048
#define STEPS 30
#define TIMED 20

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("gpu_mlp: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(0); } } while (0)
#define AK(call) do { if ((call) != AMP_OK) { printf("gpu_mlp: %s:%d: %s\n", __FILE__, __LINE__, amp_last_error()); exit(0); } } while (0)

static amp_device *dev;

static void *dalloc(size_t bytes) { void *p = NULL; CK(cudaMalloc(&p, bytes)); return p; }

/* A uniform value in [-a, a) from a hash of (seed, i): the same numbers for both paths. */
static __device__ float hash_uniform(uint32_t seed, size_t i, float a) {
  uint32_t s = (uint32_t)i * 2654435761u ^ (seed * 0x9E3779B9u);
  s ^= s >> 15; s *= 0x2c1b3c6du; s ^= s >> 12; s *= 0x297a2d39u; s ^= s >> 15;
  return ((float)(s >> 8) / 8388608.0f - 1.0f) * a;
}
__global__ void fill_kernel(float *p, size_t n, uint32_t seed, float a) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = hash_uniform(seed, i, a);
}
/* dst = src (f32) in type DT, rounded to nearest even. */
template <int DT> __global__ void cast_kernel(void *dst, const float *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    amp__store(dst, (amp_dtype)DT, i, src[i]);
}
/* dY = scale (Y - T) / batch in Y's type, and the batch's loss sum((Y - T)^2) / (2 batch) added
   into *loss (T in f32; the scale from the device: NULL means 1). */
template <int DT> __global__ void loss_kernel(void *dy, const void *y, const float *t, size_t n, const float *scale,
                                              float *loss) {
  __shared__ float part[256];
  const float k = (scale ? *scale : 1.0f) / (float)BATCH;
  float acc = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float r = amp__load(y, (amp_dtype)DT, i) - t[i];
    acc += r * r;
    amp__store(dy, (amp_dtype)DT, i, r * k);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(loss, part[0] / (2.0f * (float)BATCH));
}
/* dH *= (H > 0): the ReLU's backward, H being the ReLU's output. */
template <int DT> __global__ void relu_back_kernel(void *dh, const void *h, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (!(amp__load(h, (amp_dtype)DT, i) > 0.0f)) amp__store(dh, (amp_dtype)DT, i, 0.0f);
}

typedef struct { double steps_per_s; float loss[STEPS]; } result;

static void cast_from_f32(amp_dtype t, void *dst, const float *src, size_t n) {
  if (t == AMP_F16) cast_kernel<AMP_F16><<<1024, 256>>>(dst, src, n);
  else if (t == AMP_BF16) cast_kernel<AMP_BF16><<<1024, 256>>>(dst, src, n);
  else cast_kernel<AMP_F32><<<1024, 256>>>(dst, src, n);
}
static void loss_of(amp_dtype t, void *dy, const void *y, const float *t32, size_t n, const float *scale, float *loss) {
  if (t == AMP_F16) loss_kernel<AMP_F16><<<264, 256>>>(dy, y, t32, n, scale, loss);
  else if (t == AMP_BF16) loss_kernel<AMP_BF16><<<264, 256>>>(dy, y, t32, n, scale, loss);
  else loss_kernel<AMP_F32><<<264, 256>>>(dy, y, t32, n, scale, loss);
}
static void relu_back(amp_dtype t, void *dh, const void *h, size_t n) {
  if (t == AMP_F16) relu_back_kernel<AMP_F16><<<264, 256>>>(dh, h, n);
  else if (t == AMP_BF16) relu_back_kernel<AMP_BF16><<<264, 256>>>(dh, h, n);
  else relu_back_kernel<AMP_F32><<<264, 256>>>(dh, h, n);
}

/* The fp8 scaler's tensors: layer l's input x (E4M3), weight W (E4M3) and output grad dY (E5M2). */
#define F8_X(l) ((size_t)(l) * 3)
#define F8_W(l) ((size_t)(l) * 3 + 1)
#define F8_DY(l) ((size_t)(l) * 3 + 2)

/* One product of the fp8 path: C (bf16) = act(op(QA) op(QB)) with QA, QB the codes of the scaler's
   tensors ia, ib. */
static void gemm8(amp_fp8_scaler *f8, amp_trans ta, amp_trans tb, int m, int n, int k, const void *qa, size_t ia,
                  const void *qb, size_t ib, void *c, amp_act act) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.act = act;
  o.a_scale_inv = amp_fp8_scaler_scale_inv_ptr(f8, ia); o.b_scale_inv = amp_fp8_scaler_scale_inv_ptr(f8, ib);
  AK(amp_gemm_ex(dev, AMP_ROW_MAJOR, ta, tb, m, n, k, 1.0f, qa, ia % 3 == 2 ? AMP_E5M2 : AMP_E4M3, ta ? m : k, qb,
                 ib % 3 == 2 ? AMP_E5M2 : AMP_E4M3, tb ? k : n, 0.0f, c, AMP_BF16, n, &o));
}
/* x (bf16, n elements) into the codes q of the scaler's tensor i, its amax into the tensor's slot
   and the cast's counts into its stats. */
static void cast8(amp_fp8_scaler *f8, size_t i, void *q, const void *x, size_t n) {
  AK(amp_quantize_ex(dev, q, i % 3 == 2 ? AMP_E5M2 : AMP_E4M3, x, AMP_BF16, n, amp_fp8_scaler_scale_ptr(f8, i),
                     amp_fp8_scaler_amax_ptr(f8, i), amp_fp8_scaler_counts_ptr(f8, i)));
}

/* One path: t is AMP_F16 (AMP), AMP_BF16 or AMP_F32; fp8 (with t AMP_BF16): the products in fp8. */
static int run_path(amp_dtype t, int fp8, const float *w0[LAYERS], const float *x32, const float *t32, result *res) {
  const size_t es = amp_dtype_size(t), nw = (size_t)D * D, na = (size_t)BATCH * D;
  void *w[LAYERS], *g[LAYERS], *h[LAYERS + 1], *dh[2], *qx[LAYERS], *qw[LAYERS], *qdy = NULL;
  float *loss = (float *)dalloc(STEPS * sizeof(float));
  amp_optim_config oc;
  amp_fp8_scaler *f8 = NULL;
  amp_scaler *sc = NULL;
  amp_optimizer *o = NULL;
  amp_gemm_opts relu, plain;
  cudaEvent_t e0, e1;
  float ms = 0.0f;
  int l, step;
  memset(&oc, 0, sizeof oc);
  oc.kind = AMP_ADAMW; oc.lr = 1e-4f; oc.weight_decay = 0.01f;
  AK(amp_optimizer_create(&o, dev, &oc));
  for (l = 0; l < LAYERS; l++) {
    amp_tensor_desc td;
    w[l] = dalloc(nw * es); g[l] = dalloc(nw * es);
    memset(&td, 0, sizeof td);
    td.weights = w[l]; td.dtype = t; td.grads = g[l]; td.grad_dtype = t; td.n = nw;
    td.master = w0[l];   /* the same fp32 start for both paths; the model copy written from it */
    AK(amp_optimizer_add_tensor(o, &td));
  }
  if (t == AMP_F16) AK(amp_scaler_create(&sc, dev, NULL));
  if (fp8) {   /* HYBRID, delayed: TransformerEngine's defaults (a history of 1024, "max", margin 0) */
    amp_dtype fmt[3 * LAYERS];
    amp_fp8_config fc;
    memset(&fc, 0, sizeof fc);
    fc.stats = 1;
    for (l = 0; l < LAYERS; l++) { fmt[F8_X(l)] = AMP_E4M3; fmt[F8_W(l)] = AMP_E4M3; fmt[F8_DY(l)] = AMP_E5M2; }
    AK(amp_fp8_scaler_create(&f8, dev, &fc, 3 * LAYERS, fmt));
    for (l = 0; l < LAYERS; l++) { qx[l] = dalloc(na); qw[l] = dalloc(nw); }
    qdy = dalloc(na);
  }
  for (l = 0; l <= LAYERS; l++) h[l] = dalloc(na * es);
  dh[0] = dalloc(na * es); dh[1] = dalloc(na * es);
  cast_from_f32(t, h[0], x32, na);
  CK(cudaGetLastError());
  CK(cudaMemset(loss, 0, STEPS * sizeof(float)));
  memset(&relu, 0, sizeof relu); relu.act = AMP_ACT_RELU;
  memset(&plain, 0, sizeof plain);
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (step = 0; step < STEPS; step++) {
    const float *sp = sc ? amp_scaler_scale_ptr(sc) : NULL;
    void *dy = dh[0];
    if (step == STEPS - TIMED) CK(cudaEventRecord(e0, NULL));
    /* forward: h[l+1] = relu(h[l] W_l) (row-major, W_l is D x D, in x out); the last without ReLU */
    for (l = 0; l < LAYERS; l++) {
      amp_act act = l < LAYERS - 1 ? AMP_ACT_RELU : AMP_ACT_NONE;
      if (fp8) {
        cast8(f8, F8_X(l), qx[l], h[l], na);
        cast8(f8, F8_W(l), qw[l], w[l], nw);
        gemm8(f8, AMP_NO_TRANS, AMP_NO_TRANS, BATCH, D, D, qx[l], F8_X(l), qw[l], F8_W(l), h[l + 1], act);
      } else {
        AK(amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, BATCH, D, D, 1.0f, h[l], t, D, w[l], t, D, 0.0f,
                       h[l + 1], t, D, act == AMP_ACT_RELU ? &relu : &plain));
      }
    }
    loss_of(t, dy, h[LAYERS], t32, na, sp, loss + step);
    CK(cudaGetLastError());
    /* backward: dW_l = h[l]^T dy; dy for the layer below = (dy W_l^T) * relu'(h[l]) */
    for (l = LAYERS - 1; l >= 0; l--) {
      void *dnext = dh[(LAYERS - l) & 1];
      if (fp8) {   /* dY once in E5M2; x and W as the forward cast them */
        cast8(f8, F8_DY(l), qdy, dy, na);
        gemm8(f8, AMP_TRANS, AMP_NO_TRANS, D, D, BATCH, qx[l], F8_X(l), qdy, F8_DY(l), g[l], AMP_ACT_NONE);
      } else {
        AK(amp_gemm(dev, AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, D, D, BATCH, 1.0f, h[l], t, D, dy, t, D, 0.0f, g[l], t, D));
      }
      if (l == 0) break;
      if (fp8) gemm8(f8, AMP_NO_TRANS, AMP_TRANS, BATCH, D, D, qdy, F8_DY(l), qw[l], F8_W(l), dnext, AMP_ACT_NONE);
      else AK(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, BATCH, D, D, 1.0f, dy, t, D, w[l], t, D, 0.0f, dnext, t, D));
      relu_back(t, dnext, h[l], na);
      CK(cudaGetLastError());
      dy = dnext;
    }
    if (sc) { AK(amp_scaler_step(sc, o)); AK(amp_scaler_update(sc)); }
    else AK(amp_optimizer_step(o));
    if (f8) AK(amp_fp8_scaler_update(f8));
  }
  CK(cudaEventRecord(e1, NULL));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&ms, e0, e1));
  res->steps_per_s = TIMED / (ms * 1e-3);
  CK(cudaMemcpy(res->loss, loss, sizeof res->loss, cudaMemcpyDeviceToHost));
  if (sc) printf("f16 AMP: %ld of %d steps skipped, final scale %g\n", amp_scaler_skipped_steps(sc), STEPS,
                 (double)amp_scaler_get_scale(sc));
  if (f8) {   /* the last step's casts, per kind of tensor */
    static const char *kind[3] = {"x (E4M3)", "W (E4M3)", "dY (E5M2)"};
    int kd;
    printf("fp8 casts of the last step:");
    for (kd = 0; kd < 3; kd++) {
      unsigned long long n = 0, sat = 0, flu = 0;
      float s_lo = 0.0f, s_hi = 0.0f;
      for (l = 0; l < LAYERS; l++) {
        amp_fp8_stats fs;
        AK(amp_fp8_scaler_stats(f8, (size_t)l * 3 + (size_t)kd, &fs));
        n += fs.n; sat += fs.saturated; flu += fs.flushed;
        if (l == 0 || fs.scale_used < s_lo) s_lo = fs.scale_used;
        if (l == 0 || fs.scale_used > s_hi) s_hi = fs.scale_used;
      }
      printf(" %s %llu saturated, %llu flushed of %llu, scales %g..%g;", kind[kd], sat, flu, n, (double)s_lo,
             (double)s_hi);
    }
    printf("\n");
    for (l = 0; l < LAYERS; l++) { CK(cudaFree(qx[l])); CK(cudaFree(qw[l])); }
    CK(cudaFree(qdy));
    amp_fp8_scaler_destroy(f8);
  }
  for (l = 0; l < LAYERS; l++) { CK(cudaFree(w[l])); CK(cudaFree(g[l])); }
  for (l = 0; l <= LAYERS; l++) CK(cudaFree(h[l]));
  CK(cudaFree(dh[0])); CK(cudaFree(dh[1])); CK(cudaFree(loss));
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  amp_optimizer_destroy(o);
  amp_scaler_destroy(sc);
  return 0;
}

int main(void) {
  const size_t nw = (size_t)D * D, na = (size_t)BATCH * D;
  float *w0[LAYERS], *x32, *t32, *wt, *last;
  result amp, f32, b16, e8;
  double la = 0.0, lf = 0.0, lb = 0.0, l8 = 0.0;
  int l, i;
  (void)bench_now;
  if (amp_cuda_open(&dev, 0, NULL) != AMP_OK) { printf("gpu_mlp: skipped (%s)\n", amp_last_error()); return 0; }
  /* He-style uniform init (variance 2 / D) keeps the ReLU activations O(1) through the layers */
  for (l = 0; l < LAYERS; l++) {
    w0[l] = (float *)dalloc(nw * 4);
    fill_kernel<<<1024, 256>>>(w0[l], nw, 10u + (uint32_t)l, sqrtf(6.0f / D));
  }
  x32 = (float *)dalloc(na * 4); t32 = (float *)dalloc(na * 4); wt = (float *)dalloc(nw * 4);
  fill_kernel<<<1024, 256>>>(x32, na, 1u, 1.0f);
  fill_kernel<<<1024, 256>>>(wt, nw, 2u, sqrtf(3.0f / D));   /* the teacher: outputs of variance about 1/3 */
  CK(cudaGetLastError());
  AK(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, BATCH, D, D, 1.0f, x32, AMP_F32, D, wt, AMP_F32, D, 0.0f,
              t32, AMP_F32, D));
  CK(cudaFree(wt));
  CK(cudaDeviceSynchronize());
  printf("MLP %d layers %d wide, batch %d, AdamW: %d steps a path, the last %d timed\n", LAYERS, D, BATCH, STEPS, TIMED);
  run_path(AMP_F16, 0, (const float **)w0, x32, t32, &amp);
  run_path(AMP_BF16, 0, (const float **)w0, x32, t32, &b16);
  run_path(AMP_BF16, 1, (const float **)w0, x32, t32, &e8);
  run_path(AMP_F32, 0, (const float **)w0, x32, t32, &f32);
  printf("loss by step (f16 AMP / bf16 / fp8 / f32):");
  for (i = 0; i < STEPS; i += 5)
    printf(" %d: %.5g / %.5g / %.5g / %.5g;", i, (double)amp.loss[i], (double)b16.loss[i], (double)e8.loss[i],
           (double)f32.loss[i]);
  printf("\n");
  last = amp.loss + STEPS - 5;
  for (i = 0; i < 5; i++) {
    la += last[i]; lf += f32.loss[STEPS - 5 + i]; lb += b16.loss[STEPS - 5 + i]; l8 += e8.loss[STEPS - 5 + i];
  }
  bench_line("mlp 4x8192 train step, f16 AMP vs f32 (no TF32)", amp.steps_per_s, f32.steps_per_s, "steps/s (target >= 2.0x)");
  bench_line("mlp 4x8192 train step, bf16 vs f32 (no TF32)", b16.steps_per_s, f32.steps_per_s, "steps/s");
  bench_line("mlp 4x8192 train step, fp8 vs f16 AMP", e8.steps_per_s, amp.steps_per_s, "steps/s");
  bench_line("mlp 4x8192 train step, fp8 vs bf16", e8.steps_per_s, b16.steps_per_s, "steps/s");
  bench_line("mlp 4x8192 mean loss of the last 5 steps, f16 AMP vs f32", la / 5, lf / 5, "(target within 1%)");
  bench_line("mlp 4x8192 mean loss of the last 5 steps, fp8 vs bf16", l8 / 5, lb / 5, "");
  for (l = 0; l < LAYERS; l++) CK(cudaFree(w0[l]));
  CK(cudaFree(x32)); CK(cudaFree(t32));
  amp_device_close(dev);
  return 0;
}
