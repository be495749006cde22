/* bench/gpu_mlp.cu - one MLP training step on the GPU: f16 AMP against amp.h's own f32 path.

   The model: 4 linear layers 8192 wide (no bias), ReLU after the first three, trained on a batch of
   2048 rows to match a fixed random teacher (T = X Wt) under the loss sum((Y - T)^2) / (2 batch),
   with AdamW (lr 1e-4, weight decay 0.01). Both paths start from the same fp32 weights and see the
   same batch every step:
     f16 AMP  X, weights, activations and grads in f16; every product through amp_gemm (cuBLASLt,
              fp32 accumulation, the forward's ReLU fused into the epilogue); fp32 masters and
              moments; the PyTorch-preset dynamic scaler (amp_scaler_step + amp_scaler_update: the
              unscale, the inf/NaN check and the update on the device);
     f32      everything in f32; amp_gemm with allow_tf32 = 0 (full fp32 products, no TF32); the
              scaler-less amp_optimizer_step.
   One step = forward, loss and its gradient (a kernel here: the scale read on the device from
   amp_scaler_scale_ptr), backward (ReLU backward a kernel here), the optimizer. The host never
   waits inside a step. STEPS steps per path; the time of the last TIMED ones by cudaEvent; the loss
   of each step kept on the device and read at the end.
   Lines: steps per second (f16 AMP against f32: the target is >= 2.0x) and the mean loss of the
   last 5 steps (f16 against f32: the target is within 1%). */
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

/* One path: t is AMP_F16 (AMP) or AMP_F32. */
static int run_path(amp_dtype t, const float *w0[LAYERS], const float *x32, const float *t32, result *res) {
  const size_t es = amp_dtype_size(t), nw = (size_t)D * D, na = (size_t)BATCH * D;
  void *w[LAYERS], *g[LAYERS], *h[LAYERS + 1], *dh[2];
  float *loss = (float *)dalloc(STEPS * sizeof(float));
  amp_optim_config oc;
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
  if (t != AMP_F32) AK(amp_scaler_create(&sc, dev, NULL));
  for (l = 0; l <= LAYERS; l++) h[l] = dalloc(na * es);
  dh[0] = dalloc(na * es); dh[1] = dalloc(na * es);
  if (t == AMP_F16) cast_kernel<AMP_F16><<<1024, 256>>>(h[0], x32, na);
  else cast_kernel<AMP_F32><<<1024, 256>>>(h[0], x32, na);
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
    for (l = 0; l < LAYERS; l++)
      AK(amp_gemm_ex(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, BATCH, D, D, 1.0f, h[l], t, D, w[l], t, D, 0.0f,
                     h[l + 1], t, D, l < LAYERS - 1 ? &relu : &plain));
    if (t == AMP_F16) loss_kernel<AMP_F16><<<264, 256>>>(dy, h[LAYERS], t32, na, sp, loss + step);
    else loss_kernel<AMP_F32><<<264, 256>>>(dy, h[LAYERS], t32, na, sp, loss + step);
    CK(cudaGetLastError());
    /* backward: dW_l = h[l]^T dy; dy for the layer below = (dy W_l^T) * relu'(h[l]) */
    for (l = LAYERS - 1; l >= 0; l--) {
      void *dnext = dh[(LAYERS - l) & 1];
      AK(amp_gemm(dev, AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, D, D, BATCH, 1.0f, h[l], t, D, dy, t, D, 0.0f, g[l], t, D));
      if (l == 0) break;
      AK(amp_gemm(dev, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, BATCH, D, D, 1.0f, dy, t, D, w[l], t, D, 0.0f, dnext, t, D));
      if (t == AMP_F16) relu_back_kernel<AMP_F16><<<264, 256>>>(dnext, h[l], na);
      else relu_back_kernel<AMP_F32><<<264, 256>>>(dnext, h[l], na);
      CK(cudaGetLastError());
      dy = dnext;
    }
    if (sc) { AK(amp_scaler_step(sc, o)); AK(amp_scaler_update(sc)); }
    else AK(amp_optimizer_step(o));
  }
  CK(cudaEventRecord(e1, NULL));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&ms, e0, e1));
  res->steps_per_s = TIMED / (ms * 1e-3);
  CK(cudaMemcpy(res->loss, loss, sizeof res->loss, cudaMemcpyDeviceToHost));
  if (sc) printf("f16 AMP: %ld of %d steps skipped, final scale %g\n", amp_scaler_skipped_steps(sc), STEPS,
                 (double)amp_scaler_get_scale(sc));
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
  result amp, f32;
  double la = 0.0, lf = 0.0;
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
  run_path(AMP_F16, (const float **)w0, x32, t32, &amp);
  run_path(AMP_F32, (const float **)w0, x32, t32, &f32);
  printf("loss by step (f16 AMP / f32):");
  for (i = 0; i < STEPS; i += 5) printf(" %d: %.5g / %.5g;", i, (double)amp.loss[i], (double)f32.loss[i]);
  printf("\n");
  last = amp.loss + STEPS - 5;
  for (i = 0; i < 5; i++) { la += last[i]; lf += f32.loss[STEPS - 5 + i]; }
  bench_line("mlp 4x8192 train step, f16 AMP vs f32 (no TF32)", amp.steps_per_s, f32.steps_per_s, "steps/s (target >= 2.0x)");
  bench_line("mlp 4x8192 mean loss of the last 5 steps, f16 AMP vs f32", la / 5, lf / 5, "(target within 1%)");
  for (l = 0; l < LAYERS; l++) CK(cudaFree(w0[l]));
  CK(cudaFree(x32)); CK(cudaFree(t32));
  amp_device_close(dev);
  return 0;
}
