/* train_mlp_cuda.cu - the Fashion-MNIST trainer of train_mlp.c with the model on a CUDA GPU.

   The same program as examples/train_mlp.c: this file includes it (data, synthetic set, batch
   order, initial weights, options, table, SVG, and the CPU model for --device cpu) and adds the
   model's arithmetic on the device. Per training step, everything is queued on the device's
   stream and the host never waits:

     forward    x = the batch's images / 255 in the first matmul's type (a gather kernel);
                three amp_gemm_ex calls, bias and ReLU fused into the product's epilogue
                (fp32 accumulation, one rounding to the output type)
     loss       softmax cross-entropy in f32 (a black-list op: the logits are read as f32), one
                block; it writes the batch's mean loss into a device array (read once per epoch)
                and the gradient of the scaled loss, (softmax - onehot) * scale / B, with the scale
                read from the scaler's device copy (amp_scaler_scale_ptr), never from the host
     backward   dW = a^T dz and dh = dz W^T with amp_gemm (transposes), db = column sums of dz,
                ReLU backward, all in the types the policy chose for the forward tensors
     update     amp_scaler_step / amp_scaler_update on the device: unscale into the fp32 master,
                skip on inf/NaN, SGD momentum, the scale rule - three launches, no copy, no wait

   The host waits only at the end of an epoch: for the epoch's losses, the test accuracy (the
   evaluation counts correct predictions on the device) and the scale and skip count it prints.

   Without a GPU (amp_cuda_open returns AMP_ERR_UNSUPPORTED) it says the CUDA run was skipped
   and exits 0; --device cpu runs train_mlp.c's CPU model instead.

   Build (amp.h's implementation is compiled here, by nvcc as C++, with AMP_CUDA):
     nvcc -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
          -Xcompiler -Wall,-Wextra -I. examples/train_mlp_cuda.cu amp_kernels.cu \
          -o build/train_mlp_cuda -L/usr/local/cuda/lib64 -lcublasLt -lcublas -lz
   Run:    build/train_mlp_cuda [the options of train_mlp.c] [--device cuda|cpu]   (cuda by default) */
#ifndef AMP_CUDA
#define AMP_CUDA           /* amp.h's implementation calls into amp_kernels.cu */
#endif
#define TRAIN_MLP_NO_MAIN  /* train_mlp.c gives us train_mlp_main() instead of main() */
#include "train_mlp.c"
#include <cuda_runtime.h>

/* A CUDA runtime call of ours (amp.h's calls are checked by CHECK, from train_mlp.c). */
#define CUDA_CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "train_mlp_cuda: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(1); } } while (0)
/* After a kernel launch: a bad configuration shows here; an error while it runs shows at the next wait. */
#define LAUNCHED() CUDA_CHECK(cudaGetLastError())

/* The device, opened once. Every launch below, every amp.h call and every copy goes to the legacy
   default stream (amp_cuda_open's stream NULL), so they run in the order the host issues them. */
static amp_device *gpu;

static int blocks(size_t n, int threads) { return (int)((n + (size_t)threads - 1) / (size_t)threads); }

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

// ----------------------------------------------------------------------------------------------
// kernels (ld and st, train_mlp.c's element access for the three types, are AMP_HD: the same code
// runs here)

/* x[i][j] = pixel j of image idx[i] (of image start + i when idx is NULL) / 255, in the first
   matmul's type: the cast the policy puts in front of a white op. */
__global__ void gather_input(void *x, amp_dtype tx, const unsigned char *images, const int *idx, int start, int B) {
  size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= (size_t)B * NIN) return;
  int i = (int)(k / NIN), j = (int)(k % NIN);
  int row = idx ? idx[i] : start + i;
  st(x, tx, k, images[(size_t)row * NIN + j] * (1.0f / 255.0f));
}

#define LOSS_THREADS 256   /* one block; a power of two for the tree sum */

/* Softmax cross-entropy of B rows of NOUT logits, in f32. Thread r takes rows r, r + 256, ...;
   the block then sums the per-thread losses in a fixed tree, so a run repeats to the bit.
   Training (dz not NULL): dz = (softmax - onehot) * scale / B, the gradient of the scaled mean
   loss, rounded once to dz's type, with the scale read from the scaler's device float (it changes
   at amp_scaler_update, in stream order, so each step sees its own); *loss_out = the mean loss.
   Evaluation (dz NULL): eval[0] += the summed loss, eval[1] += the correct predictions. */
__global__ void softmax_xent(const void *logits, amp_dtype tl, const unsigned char *labels, const int *idx, int start,
                             int B, void *dz, amp_dtype tdz, const float *scale, double *loss_out, double *eval) {
  __shared__ double s_loss[LOSS_THREADS];
  __shared__ double s_correct[LOSS_THREADS];
  double loss = 0.0, correct = 0.0;
  float g = dz ? *scale / (float)B : 0.0f;
  for (int i = threadIdx.x; i < B; i += blockDim.x) {
    float p[NOUT], mx, sum = 0.0f;
    int y = labels[idx ? idx[i] : start + i], best = 0, j;
    for (j = 0; j < NOUT; j++) p[j] = ld(logits, tl, (size_t)i * NOUT + j);
    mx = p[0];
    for (j = 1; j < NOUT; j++) if (p[j] > mx) mx = p[j];
    for (j = 0; j < NOUT; j++) { p[j] = expf(p[j] - mx); sum += p[j]; }
    for (j = 0; j < NOUT; j++) p[j] /= sum;
    loss += -log((double)p[y] + 1e-30);
    for (j = 1; j < NOUT; j++) if (p[j] > p[best]) best = j;
    correct += best == y;
    if (dz)
      for (j = 0; j < NOUT; j++) st(dz, tdz, (size_t)i * NOUT + j, (p[j] - (j == y ? 1.0f : 0.0f)) * g);
  }
  s_loss[threadIdx.x] = loss;
  s_correct[threadIdx.x] = correct;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) {
      s_loss[threadIdx.x] += s_loss[threadIdx.x + half];
      s_correct[threadIdx.x] += s_correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (dz) *loss_out = s_loss[0] / B;
    else { eval[0] += s_loss[0]; eval[1] += s_correct[0]; }   /* launches of one stream run one after another */
  }
}

/* db[j] = sum over the batch of dz[i][j]: one thread per column, summed in f32 in row order (the
   CPU's order), written in the model copy's type. */
__global__ void column_sums(void *db, amp_dtype tdb, const void *dz, amp_dtype tdz, int B, int n) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float s = 0.0f;
  for (int i = 0; i < B; i++) s += ld(dz, tdz, (size_t)i * n + j);
  st(db, tdb, (size_t)j, s);
}

/* dz = dh where the ReLU let its input through (h > 0), else 0. */
__global__ void relu_backward(void *dz, amp_dtype tdz, const void *dh, amp_dtype tdh, const void *h, amp_dtype th, size_t n) {
  size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  st(dz, tdz, k, ld(h, th, k) > 0.0f ? ld(dh, tdh, k) : 0.0f);
}

// ----------------------------------------------------------------------------------------------
// the model on the device

typedef struct {
  mlp_types t;                        /* what the policy decided (train_mlp.c's mlp_decide) */
  void *W[3], *b[3], *dW[3], *db[3];  /* model copy (type low) and its grads (type low) */
  void *x, *h[2], *logits;            /* activations: h = relu(a W + b) straight from the epilogue */
  void *dz[3], *dh[2];                /* their grads */
} gpu_mlp;

/* A data set on the device: the images as bytes (cast per batch) and the labels. */
typedef struct { unsigned char *x, *y; int n; } gpu_set;

static gpu_set gpu_upload(const dataset *d, int n) {
  gpu_set g;
  g.n = n;
  g.x = (unsigned char *)dev_alloc((size_t)n * NIN);
  g.y = (unsigned char *)dev_alloc((size_t)n);
  CUDA_CHECK(cudaMemcpy(g.x, d->x, (size_t)n * NIN, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(g.y, d->y, (size_t)n, cudaMemcpyHostToDevice));
  return g;
}
static void gpu_set_free(gpu_set *g) { CUDA_CHECK(cudaFree(g->x)); CUDA_CHECK(cudaFree(g->y)); }

static void gpu_mlp_init(gpu_mlp *m, const mlp_types *t, const float *const W0[3]) {
  amp_dtype low = t->low;
  m->t = *t;
  m->x = dev_alloc((size_t)MAXB * NIN * amp_dtype_size(t->t_lin[0]));
  for (int l = 0; l < 3; l++) {
    size_t nw = (size_t)mlp_sizes[l] * mlp_sizes[l + 1], nout = (size_t)mlp_sizes[l + 1];
    /* the model copy: the initial weights rounded to its type, as on the CPU; the biases 0 */
    void *host = alloc(low, nw);
    CHECK(amp_convert(host, low, W0[l], AMP_F32, nw));
    m->W[l] = dev_alloc(nw * amp_dtype_size(low));
    CUDA_CHECK(cudaMemcpy(m->W[l], host, nw * amp_dtype_size(low), cudaMemcpyHostToDevice));
    free(host);
    m->dW[l] = dev_alloc(nw * amp_dtype_size(low));
    m->b[l] = dev_alloc(nout * amp_dtype_size(low));
    CUDA_CHECK(cudaMemset(m->b[l], 0, nout * amp_dtype_size(low)));
    m->db[l] = dev_alloc(nout * amp_dtype_size(low));
    m->dz[l] = dev_alloc((size_t)MAXB * nout * amp_dtype_size(t->t_lin[l]));
    if (l < 2) {
      m->h[l] = dev_alloc((size_t)MAXB * nout * amp_dtype_size(t->t_relu[l]));
      m->dh[l] = dev_alloc((size_t)MAXB * nout * amp_dtype_size(t->t_relu[l]));
    }
  }
  m->logits = dev_alloc((size_t)MAXB * NOUT * amp_dtype_size(t->t_lin[2]));
}

static void gpu_mlp_free(gpu_mlp *m) {
  CUDA_CHECK(cudaFree(m->x)); CUDA_CHECK(cudaFree(m->logits));
  for (int l = 0; l < 3; l++) {
    CUDA_CHECK(cudaFree(m->W[l])); CUDA_CHECK(cudaFree(m->dW[l])); CUDA_CHECK(cudaFree(m->b[l]));
    CUDA_CHECK(cudaFree(m->db[l])); CUDA_CHECK(cudaFree(m->dz[l]));
    if (l < 2) { CUDA_CHECK(cudaFree(m->h[l])); CUDA_CHECK(cudaFree(m->dh[l])); }
  }
}

/* Forward pass of B samples (rows idx[0..B), or start.. when idx is NULL) up to the logits. */
static void gpu_forward(gpu_mlp *m, const gpu_set *d, const int *idx, int start, int B) {
  const mlp_types *t = &m->t;
  gather_input<<<blocks((size_t)B * NIN, 256), 256>>>(m->x, t->t_lin[0], d->x, idx, start, B);
  LAUNCHED();
  for (int l = 0; l < 3; l++) {
    int nin = mlp_sizes[l], nout = mlp_sizes[l + 1];
    const void *a = l == 0 ? m->x : m->h[l - 1];
    amp_dtype ta = l == 0 ? t->t_lin[0] : t->t_relu[l - 1];
    void *c = l < 2 ? m->h[l] : m->logits;
    amp_dtype tc = l < 2 ? t->t_relu[l] : t->t_lin[2];
    /* c = act(a . W + b): fp32 accumulation, bias and ReLU in the epilogue, one rounding to c's type */
    amp_gemm_opts g;
    memset(&g, 0, sizeof g);
    g.bias = m->b[l]; g.bias_type = t->low; g.act = l < 2 ? AMP_ACT_RELU : AMP_ACT_NONE;
    CHECK(amp_gemm_ex(gpu, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, B, nout, nin, 1.0f,
                      a, ta, nin, m->W[l], t->low, nout, 0.0f, c, tc, nout, &g));
  }
}

/* Backward pass from dz[2] (the loss kernel's scaled gradient): every gradient comes out scaled,
   in the type the forward pass used for its tensor. */
static void gpu_backward(gpu_mlp *m, int B) {
  const mlp_types *t = &m->t;
  for (int l = 2; l >= 0; l--) {
    int nin = mlp_sizes[l], nout = mlp_sizes[l + 1];
    const void *a = l == 0 ? m->x : m->h[l - 1];
    amp_dtype ta = l == 0 ? t->t_lin[0] : t->t_relu[l - 1];
    /* dW = a^T . dz, written in the model copy's type; db = the column sums of dz */
    CHECK(amp_gemm(gpu, AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, nin, nout, B, 1.0f,
                   a, ta, nin, m->dz[l], t->t_lin[l], nout, 0.0f, m->dW[l], t->low, nout));
    column_sums<<<blocks((size_t)nout, 128), 128>>>(m->db[l], t->low, m->dz[l], t->t_lin[l], B, nout);
    LAUNCHED();
    if (l == 0) break;
    /* dh = dz . W^T, then through the ReLU into dz of the layer below */
    CHECK(amp_gemm(gpu, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, B, nin, nout, 1.0f,
                   m->dz[l], t->t_lin[l], nout, m->W[l], t->low, nout, 0.0f, m->dh[l - 1], t->t_relu[l - 1], nin));
    relu_backward<<<blocks((size_t)B * nin, 256), 256>>>(m->dz[l - 1], t->t_lin[l - 1], m->dh[l - 1], t->t_relu[l - 1],
                                                         m->h[l - 1], t->t_relu[l - 1], (size_t)B * nin);
    LAUNCHED();
  }
}

/* Test accuracy (percent) and mean test loss, in the run's own precision; the device counts. */
static double gpu_evaluate(gpu_mlp *m, const gpu_set *test, double *eval_dev, double *mean_loss) {
  double eval[2];
  CUDA_CHECK(cudaMemset(eval_dev, 0, 2 * sizeof(double)));
  for (int start = 0; start < test->n; start += MAXB) {
    int B = test->n - start < MAXB ? test->n - start : MAXB;
    gpu_forward(m, test, NULL, start, B);
    softmax_xent<<<1, LOSS_THREADS>>>(m->logits, m->t.t_lin[2], test->y, NULL, start, B, NULL, AMP_F32, NULL, NULL, eval_dev);
    LAUNCHED();
  }
  CUDA_CHECK(cudaMemcpy(eval, eval_dev, sizeof eval, cudaMemcpyDeviceToHost));   /* waits */
  *mean_loss = eval[0] / test->n;
  return 100.0 * eval[1] / test->n;
}

// ----------------------------------------------------------------------------------------------
// one training run on the device: train_mlp.c's train(), step for step

static void train_cuda(const char *name, amp_dtype low, const dataset *tr, const dataset *te,
                       const float *const W0[3], const options *o, result *r) {
  amp_scaler *sc;
  amp_optimizer *opt;
  amp_scaler_config scfg = scaler_config(low);
  mlp_types types = mlp_decide(low);
  gpu_mlp m;
  int n = tr->n < o->train_limit ? tr->n : o->train_limit;
  int steps_per_epoch = n / o->batch, epoch, i;
  long step = 0, total = (long)steps_per_epoch * o->epochs;
  int *perm = (int *)malloc(sizeof(int) * (size_t)n);
  double *losses = (double *)malloc(sizeof(double) * (size_t)steps_per_epoch);
  double t_train = 0.0, curve_sum = 0.0;
  int curve_count = 0;
  gpu_set gtr, gte;
  int *perm_dev;
  double *losses_dev, *eval_dev;
  const float *scale_dev;
  if (!perm || !losses) die("out of memory");

  gtr = gpu_upload(tr, n);
  gte = gpu_upload(te, te->n);
  perm_dev = (int *)dev_alloc(sizeof(int) * (size_t)n);
  losses_dev = (double *)dev_alloc(sizeof(double) * (size_t)steps_per_epoch);
  eval_dev = (double *)dev_alloc(2 * sizeof(double));
  gpu_mlp_init(&m, &types, W0);

  /* The scaler and the optimizer live on the device: the scale, found-inf flag, fp32 master and
     momentum are device memory; the master is taken from each model copy at its add. */
  CHECK(amp_scaler_create(&sc, gpu, &scfg));
  mlp_optimizer(&opt, gpu, o, low, m.W, m.dW, m.b, m.db, mlp_sizes);   /* biases in a no-decay group */
  scale_dev = amp_scaler_scale_ptr(sc);
  if (!scale_dev) die(amp_last_error());

  run_begin(r, name, &types, o, total);
  for (epoch = 0; epoch < o->epochs; epoch++) {
    double t0 = now(), loss_sum = 0.0;
    shuffle(perm, n);
    CUDA_CHECK(cudaMemcpy(perm_dev, perm, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice));
    for (i = 0; i < steps_per_epoch; i++, step++) {
      const int *idx = perm_dev + (size_t)i * o->batch;
      gpu_forward(&m, &gtr, idx, 0, o->batch);
      softmax_xent<<<1, LOSS_THREADS>>>(m.logits, types.t_lin[2], gtr.y, idx, 0, o->batch,
                                        m.dz[2], types.t_lin[2], scale_dev, losses_dev + i, NULL);
      LAUNCHED();
      CHECK(amp_optimizer_set_lr(opt, lr_at(o, step, total)));   /* enqueued, no wait */
      gpu_backward(&m, o->batch);
      CHECK(amp_scaler_step(sc, opt));     /* unscale into fp32, skip if inf/NaN, else update */
      CHECK(amp_scaler_update(sc));        /* the scale rule, on the device */
    }
    /* the one wait of the epoch: its losses (this also finishes its steps, for the timing) */
    CUDA_CHECK(cudaMemcpy(losses, losses_dev, sizeof(double) * (size_t)steps_per_epoch, cudaMemcpyDeviceToHost));
    t_train += now() - t0;
    for (i = 0; i < steps_per_epoch; i++) {
      loss_sum += losses[i];
      curve_add(r, losses[i], &curve_sum, &curve_count);
    }
    r->acc = gpu_evaluate(&m, &gte, eval_dev, &r->test_loss);
    r->final_loss = loss_sum / steps_per_epoch;
    r->skipped = amp_scaler_skipped_steps(sc);
    print_epoch(r, epoch, o->epochs, now() - t0, amp_scaler_get_scale(sc));
  }
  r->steps = step;
  r->sec_per_epoch = t_train / o->epochs;
  r->final_scale = amp_scaler_get_scale(sc);
  amp_optimizer_destroy(opt);   /* before the buffers it points at, and before the device */
  amp_scaler_destroy(sc);
  gpu_mlp_free(&m);
  gpu_set_free(&gtr); gpu_set_free(&gte);
  CUDA_CHECK(cudaFree(perm_dev)); CUDA_CHECK(cudaFree(losses_dev)); CUDA_CHECK(cudaFree(eval_dev));
  free(perm); free(losses);
}

// ----------------------------------------------------------------------------------------------

static int cuda_open(void) {
  cudaDeviceProp prop;
  amp_status s = amp_cuda_open(&gpu, 0, NULL);
  if (s == AMP_ERR_UNSUPPORTED) {
    const char *req = getenv("AMP_REQUIRE_GPU");   /* make gpu-check: a GPU machine, so no GPU is a failure */
    if (req && *req && *req != '0') { fprintf(stderr, "AMP_REQUIRE_GPU=1 but no GPU: %s\n", amp_last_error()); exit(1); }
    printf("skipped: the CUDA run needs a GPU (%s); --device cpu trains on the CPU\n", amp_last_error());
    return 0;
  }
  CHECK(s);
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("CUDA device 0: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  return 1;
}

static void cuda_close(void) { amp_device_close(gpu); gpu = NULL; }

int main(int argc, char **argv) {
  static const device_trainer cuda = { "cuda", cuda_open, train_cuda, cuda_close };
  return train_mlp_main(argc, argv, &cuda);
}
