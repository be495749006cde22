/* train_mlp.c - an MLP classifier on Fashion-MNIST, trained in fp32 and with mixed precision.

   The model is 784-256-128-10 with ReLU and softmax cross-entropy. The same model, the same
   initial weights, the same batches in the same order are trained once per precision:

     fp32   every tensor in f32 (the policy in AMP_MODE_FORCE_F32 decides so)
     f16    AMP: matmuls, activations and gradients in f16, the loss in f32, dynamic loss
            scaling (PyTorch's GradScaler rule), fp32 master weights in the optimizer
     bf16   the same in bf16; bf16 has f32's range, so the loss scale stays fixed at 1

   Every piece of amp.h a real trainer needs is here: the op-list policy decides each op's
   dtype, amp_gemm computes the matmuls (fp32 accumulation, one rounding to the output type),
   amp_scaler scales the loss and skips steps whose gradients overflowed, amp_optimizer keeps
   the fp32 master copy and writes the rounded model copy back.

   Data: /usr/share/datasets/fashion-mnist (Debian package dataset-fashion-mnist), read with
   zlib. Where it is absent the program says so and trains on a built-in synthetic set (at lr 0.03
   unless --lr is given: at 0.1 its bf16 run is unstable). Built
   with -DTRAIN_MLP_NO_ZLIB (where zlib's header is missing) it reads the files through
   `gzip -dc`, which every Debian system has.

   Build:  cc -std=c99 -O2 -march=native -I. examples/train_mlp.c -o train_mlp -lz -lm
           cc -std=c99 -O2 -march=native -DTRAIN_MLP_NO_ZLIB -I. examples/train_mlp.c -o train_mlp -lm
   Run:    ./train_mlp [--epochs N] [--train-limit N] [--test-limit N] [--precision fp32|f16|bf16|all]
                       [--batch N] [--lr X] [--weight-decay X] [--seed N] [--data DIR] [--svg PATH] [--max-gap PP]
                       [--device cpu|cuda] [--clock wall|cpu]
   --max-gap PP: exit 2 when an AMP run's test accuracy is more than PP points below fp32's
   (the test suite uses it). Deterministic: a seeded RNG and a fixed batch order.

   The same trainer on a GPU is examples/train_mlp_cuda.cu: it includes this file (with
   TRAIN_MLP_NO_MAIN) for everything but the model's arithmetic, so data, batches, initial
   weights, options, table and SVG are the same code; --device cpu there runs the code below. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 199309L  /* clock_gettime (nvcc's host compiler has it defined already) */
#endif
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#ifndef TRAIN_MLP_NO_ZLIB
#include <zlib.h>
#endif

#define NIN 784
#define NH1 256
#define NH2 128
#define NOUT 10
#define MAXB 1000   /* largest batch (evaluation runs in batches of this size) */

static void die(const char *what) {
  fprintf(stderr, "train_mlp: %s\n", what);
  exit(1);
}
/* Every amp.h call is checked: on failure amp_last_error() says which call and which value. */
#define CHECK(call) do { if ((call) != AMP_OK) { fprintf(stderr, "train_mlp: %s:%d: %s\n", __FILE__, __LINE__, amp_last_error()); exit(1); } } while (0)

// ----------------------------------------------------------------------------------------------
// random numbers: splitmix64, so every run with the same --seed is the same

static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float rng_uniform(void) { return (float)((rng_next() >> 40) + 0.5) / 16777216.0f; } /* (0, 1) */
static float rng_normal(void) {
  float u = rng_uniform(), v = rng_uniform();
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

// ----------------------------------------------------------------------------------------------
// data: IDX files (gzip), or a synthetic stand-in

typedef struct { int n; unsigned char *x; unsigned char *y; } dataset;

/* A gzip file, read with zlib, or without it through a `gzip -dc` pipe. */
#ifndef TRAIN_MLP_NO_ZLIB
typedef gzFile gz_in;
static gz_in gz_open(const char *path) { return gzopen(path, "rb"); }
static int gz_read(gz_in f, void *buf, int n) { return gzread(f, buf, (unsigned)n) == n; }
static void gz_close(gz_in f) { gzclose(f); }
#else
typedef FILE *gz_in;
static gz_in gz_open(const char *path) {
  char cmd[600];
  FILE *probe = fopen(path, "rb");   /* a missing file: no pipe (and no message from gzip) */
  if (!probe || strchr(path, '\'') || strlen(path) > 500) { if (probe) fclose(probe); return NULL; }
  fclose(probe);
  snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
  return popen(cmd, "r");
}
static int gz_read(gz_in f, void *buf, int n) { return fread(buf, 1, (size_t)n, f) == (size_t)n; }
static void gz_close(gz_in f) { pclose(f); }
#endif

static unsigned char *read_idx(const char *path, uint32_t magic, int *count, int item_size) {
  gz_in f = gz_open(path);
  unsigned char hdr[16], *buf;
  int hdr_len = magic == 0x803 ? 16 : 8, n;
  if (!f) return NULL;
  if (!gz_read(f, hdr, hdr_len)) { gz_close(f); return NULL; }
  if (((uint32_t)hdr[2] << 8 | hdr[3]) != magic) { gz_close(f); return NULL; }
  n = (int)((uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 | (uint32_t)hdr[6] << 8 | hdr[7]);
  buf = (unsigned char *)malloc((size_t)n * (size_t)item_size);
  if (!buf || !gz_read(f, buf, n * item_size)) { free(buf); gz_close(f); return NULL; }
  gz_close(f);
  *count = n;
  return buf;
}

static int load_fashion(const char *dir, const char *prefix, dataset *d) {
  char p1[512], p2[512];
  int ni = 0, nl = 0;
  snprintf(p1, sizeof p1, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  snprintf(p2, sizeof p2, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  d->x = read_idx(p1, 0x803, &ni, NIN);
  d->y = read_idx(p2, 0x801, &nl, 1);
  if (!d->x || !d->y || ni != nl) { free(d->x); free(d->y); return 0; }
  d->n = ni;
  return 1;
}

/* Ten classes, each a random smooth "garment" template; a sample is its class template, shifted
   in brightness and blurred by noise. Hard enough that the net must learn, easy enough to learn
   in an epoch. */
static void make_synthetic(dataset *train, dataset *test, int n_train, int n_test) {
  static float tmpl[NOUT][NIN];
  int c, i, j, s;
  dataset *sets[2];
  int counts[2];
  rng_state = 0x5eedull;
  for (c = 0; c < NOUT; c++)
    for (i = 0; i < 28; i++)
      for (j = 0; j < 28; j++) tmpl[c][i * 28 + j] = 0.0f;
  for (c = 0; c < NOUT; c++)
    for (s = 0; s < 6; s++) { /* six soft blobs per class */
      float cx = 4 + 20 * rng_uniform(), cy = 4 + 20 * rng_uniform(), r = 2 + 5 * rng_uniform();
      for (i = 0; i < 28; i++)
        for (j = 0; j < 28; j++)
          tmpl[c][i * 28 + j] += 200.0f * expf(-((i - cy) * (i - cy) + (j - cx) * (j - cx)) / (2 * r * r));
    }
  sets[0] = train; sets[1] = test; counts[0] = n_train; counts[1] = n_test;
  for (s = 0; s < 2; s++) {
    dataset *d = sets[s];
    d->n = counts[s];
    d->x = (unsigned char *)malloc((size_t)d->n * NIN);
    d->y = (unsigned char *)malloc((size_t)d->n);
    if (!d->x || !d->y) die("out of memory");
    for (i = 0; i < d->n; i++) {
      int y = (int)(rng_next() % NOUT);
      float gain = 0.6f + 0.6f * rng_uniform();
      d->y[i] = (unsigned char)y;
      for (j = 0; j < NIN; j++) {
        float v = gain * tmpl[y][j] + 60.0f * rng_normal();
        d->x[(size_t)i * NIN + j] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  }
}

// ----------------------------------------------------------------------------------------------
// elements of any of the three types (AMP_HD: the CUDA build's kernels use them too)

static inline AMP_HD float ld(const void *p, amp_dtype t, size_t i) {
  return t == AMP_F16 ? amp_f16_to_f32(((const amp_f16 *)p)[i])
       : t == AMP_BF16 ? amp_bf16_to_f32(((const amp_bf16 *)p)[i]) : ((const float *)p)[i];
}
static inline AMP_HD void st(void *p, amp_dtype t, size_t i, float x) {
  if (t == AMP_F16) ((amp_f16 *)p)[i] = amp_f32_to_f16(x);
  else if (t == AMP_BF16) ((amp_bf16 *)p)[i] = amp_f32_to_bf16(x);
  else ((float *)p)[i] = x;
}
static void *alloc(amp_dtype t, size_t n) {
  void *p = calloc(n, amp_dtype_size(t));
  if (!p) die("out of memory");
  return p;
}
static const char *dtype_name(amp_dtype t) { return t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : "f32"; }

// ----------------------------------------------------------------------------------------------
// the model: three linear layers; the policy decides the dtype of every tensor

static const int mlp_sizes[4] = { NIN, NH1, NH2, NOUT };

/* What the policy decided for each op (the CPU and the CUDA model use the same decisions). */
typedef struct {
  amp_dtype low;                 /* the model copy's dtype: F32 for the fp32 run */
  amp_dtype t_in, t_lin[3], t_relu[2], t_loss;
} mlp_types;

static mlp_types mlp_decide(amp_dtype low) {
  amp_policy *pol;
  mlp_types t;
  amp_dtype in[2];
  /* fp32: the policy forces every op to f32; AMP: PyTorch autocast's rules in the low type */
  CHECK(amp_policy_create(&pol, low == AMP_F32 ? AMP_MODE_FORCE_F32 : AMP_MODE_MIXED, low == AMP_F32 ? AMP_F16 : low));
  t.low = low;
  /* The data arrive as f32; the first matmul casts them (white op -> low). */
  t.t_in = AMP_F32;
  in[0] = t.t_in; in[1] = low;
  t.t_lin[0] = amp_policy_decide(pol, "linear", in, 2);
  in[0] = t.t_lin[0];
  t.t_relu[0] = amp_policy_decide(pol, "relu", in, 1);
  in[0] = t.t_relu[0]; in[1] = low;
  t.t_lin[1] = amp_policy_decide(pol, "linear", in, 2);
  in[0] = t.t_lin[1];
  t.t_relu[1] = amp_policy_decide(pol, "relu", in, 1);
  in[0] = t.t_relu[1]; in[1] = low;
  t.t_lin[2] = amp_policy_decide(pol, "linear", in, 2);
  in[0] = t.t_lin[2];
  t.t_loss = amp_policy_decide(pol, "softmax_with_cross_entropy", in, 1);
  amp_policy_destroy(pol);
  if (t.t_loss != AMP_F32) die("the policy must keep the loss in f32");
  return t;
}

typedef struct {
  mlp_types t;                        /* what the policy decided for each op */
  int sizes[4];
  void *W[3], *b[3], *dW[3], *db[3];  /* model copy (type low) and its grads (type low) */
  void *x, *z[3], *dz[3], *h[2], *dh[2]; /* activations and their grads */
  float *logits, *probs;
  float *f1, *f2;                     /* f32 scratch for the bias gradient */
  unsigned char pix[256 * 4];         /* pixel value v -> v / 255 in the first matmul's type */
} mlp;

static void mlp_init(mlp *m, const mlp_types *t, const float *const W0[3]) {
  int l;
  amp_dtype low = t->low;
  m->t = *t;
  m->sizes[0] = NIN; m->sizes[1] = NH1; m->sizes[2] = NH2; m->sizes[3] = NOUT;
  m->x = alloc(m->t.t_lin[0], (size_t)MAXB * NIN);   /* the input, cast to the first matmul's type */
  for (l = 0; l < 3; l++) {
    size_t nw = (size_t)m->sizes[l] * m->sizes[l + 1], j;
    m->W[l] = alloc(low, nw); m->dW[l] = alloc(low, nw);
    m->b[l] = alloc(low, (size_t)m->sizes[l + 1]); m->db[l] = alloc(low, (size_t)m->sizes[l + 1]);
    for (j = 0; j < nw; j++) st(m->W[l], low, j, W0[l][j]);
    m->z[l] = alloc(m->t.t_lin[l], (size_t)MAXB * m->sizes[l + 1]);
    m->dz[l] = alloc(m->t.t_lin[l], (size_t)MAXB * m->sizes[l + 1]);
    if (l < 2) {
      m->h[l] = alloc(m->t.t_relu[l], (size_t)MAXB * m->sizes[l + 1]);
      m->dh[l] = alloc(m->t.t_relu[l], (size_t)MAXB * m->sizes[l + 1]);
    }
  }
  m->logits = (float *)alloc(AMP_F32, (size_t)MAXB * NOUT);
  m->probs = (float *)alloc(AMP_F32, (size_t)MAXB * NOUT);
  m->f1 = (float *)alloc(AMP_F32, (size_t)MAXB * NH1);
  m->f2 = (float *)alloc(AMP_F32, (size_t)MAXB * NH1);
  /* the input cast as a table: v / 255 rounded once to the first matmul's type, for each byte v */
  for (l = 0; l < 256; l++) st(m->pix, m->t.t_lin[0], (size_t)l, (float)l * (1.0f / 255.0f));
}

static void mlp_free(mlp *m) {
  int l;
  free(m->x); free(m->logits); free(m->probs); free(m->f1); free(m->f2);
  for (l = 0; l < 3; l++) {
    free(m->W[l]); free(m->dW[l]); free(m->b[l]); free(m->db[l]); free(m->z[l]); free(m->dz[l]);
    if (l < 2) { free(m->h[l]); free(m->dh[l]); }
  }
}

/* Forward pass of B samples; leaves the softmax in m->probs and returns the summed loss (f32). */
static double mlp_forward(mlp *m, const dataset *d, const int *idx, int B) {
  int l, i, j;
  double loss = 0.0;
  /* the batch, cast to the first matmul's type: pixel v is v / 255 rounded once (a table) */
  {
    size_t es = amp_dtype_size(m->t.t_lin[0]);
    for (i = 0; i < B; i++) {
      const unsigned char *px = d->x + (size_t)idx[i] * NIN;
      char *row = (char *)m->x + (size_t)i * NIN * es;
#if defined(__GNUC__)
      if (i + 4 < B) {   /* shuffled images come from all over the set: ask for one 4 ahead */
        const unsigned char *next = d->x + (size_t)idx[i + 4] * NIN;
        for (j = 0; j < NIN; j += 64) __builtin_prefetch(next + j);
      }
#endif
      if (es == 2) for (j = 0; j < NIN; j++) memcpy(row + 2 * (size_t)j, m->pix + 2 * px[j], 2);
      else for (j = 0; j < NIN; j++) memcpy(row + 4 * (size_t)j, m->pix + 4 * px[j], 4);
    }
  }
  for (l = 0; l < 3; l++) {
    int nin = m->sizes[l], nout = m->sizes[l + 1];
    const void *a = l == 0 ? m->x : m->h[l - 1];
    amp_dtype ta = l == 0 ? m->t.t_lin[0] : m->t.t_relu[l - 1];
    amp_gemm_opts go;
    memset(&go, 0, sizeof go);
    go.bias = m->b[l]; go.bias_type = m->t.low;
    /* h = relu(a . W + b) (the last layer: z = a . W + b), all in one call: fp32 accumulation
       inside amp_gemm_ex, bias and ReLU on the f32 sum, one rounding to the output's type */
    go.act = l < 2 ? AMP_ACT_RELU : AMP_ACT_NONE;
    CHECK(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, B, nout, nin, 1.0f,
                      a, ta, nin, m->W[l], m->t.low, nout, 0.0f, l < 2 ? m->h[l] : m->z[l],
                      l < 2 ? m->t.t_relu[l] : m->t.t_lin[l], nout, &go));
  }
  /* softmax cross-entropy: a black-list op, so the logits are cast to f32 first */
  CHECK(amp_convert(m->logits, AMP_F32, m->z[2], m->t.t_lin[2], (size_t)B * NOUT));
  for (i = 0; i < B; i++) {
    float *lg = m->logits + (size_t)i * NOUT, *p = m->probs + (size_t)i * NOUT, mx = lg[0], sum = 0.0f;
    for (j = 1; j < NOUT; j++) if (lg[j] > mx) mx = lg[j];
    for (j = 0; j < NOUT; j++) { p[j] = expf(lg[j] - mx); sum += p[j]; }
    for (j = 0; j < NOUT; j++) p[j] /= sum;
    loss += -log((double)p[d->y[idx[i]]] + 1e-30);
  }
  return loss;
}

/* dz = h > 0 ? dh : 0. With dz and dh of one type the select moves bits (h > 0: sign clear and
   not zero; h comes out of the ReLU, so it is never NaN); otherwise through f32. */
static void relu_backward(void *dz, amp_dtype tz, const void *h, const void *dh, amp_dtype th, size_t n) {
  size_t i;
  if (tz == th && th != AMP_F32) {
    const uint16_t *hb = (const uint16_t *)h, *gb = (const uint16_t *)dh;
    uint16_t *zb = (uint16_t *)dz;
    for (i = 0; i < n; i++) {   /* branch-free: the sign of h is random, a branch mispredicts half the time */
      uint16_t keep = (uint16_t)(0u - (uint16_t)((hb[i] & 0x8000u) == 0 && hb[i] != 0));
      zb[i] = (uint16_t)(gb[i] & keep);
    }
  } else if (tz == AMP_F32 && th == AMP_F32) {
    const float *hf = (const float *)h, *gf = (const float *)dh;
    float *zf = (float *)dz;
    for (i = 0; i < n; i++) { float g = gf[i]; zf[i] = hf[i] > 0.0f ? g : 0.0f; }   /* both loaded: a select, no branch */
  } else {
    for (i = 0; i < n; i++) st(dz, tz, i, ld(h, th, i) > 0.0f ? ld(dh, th, i) : 0.0f);
  }
}

/* Backward pass of the mean loss multiplied by `scale`: every gradient comes out scaled, in the
   type the forward pass used for its tensor (low precision in AMP). */
static void mlp_backward(mlp *m, const dataset *d, const int *idx, int B, float scale) {
  int l, i, j;
  float g = scale / (float)B;
  for (i = 0; i < B; i++)
    for (j = 0; j < NOUT; j++) {
      float p = m->probs[(size_t)i * NOUT + j] - (j == d->y[idx[i]] ? 1.0f : 0.0f);
      st(m->dz[2], m->t.t_lin[2], (size_t)i * NOUT + j, p * g);   /* the scaled gradient, rounded once */
    }
  for (l = 2; l >= 0; l--) {
    int nin = m->sizes[l], nout = m->sizes[l + 1];
    const void *a = l == 0 ? m->x : m->h[l - 1];
    amp_dtype ta = l == 0 ? m->t.t_lin[0] : m->t.t_relu[l - 1];
    /* dW = a^T . dz and db = sum of dz over the batch, written in the model copy's type */
    CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, nin, nout, B, 1.0f,
                   a, ta, nin, m->dz[l], m->t.t_lin[l], nout, 0.0f, m->dW[l], m->t.low, nout));
    /* db: the column sums of dz, in f32 (dz converted once; each sum runs over i in order) */
    CHECK(amp_convert(m->f1, AMP_F32, m->dz[l], m->t.t_lin[l], (size_t)B * nout));
    for (j = 0; j < nout; j++) m->f2[j] = 0.0f;
    for (i = 0; i < B; i++)
      for (j = 0; j < nout; j++) m->f2[j] += m->f1[(size_t)i * nout + j];
    CHECK(amp_convert(m->db[l], m->t.low, m->f2, AMP_F32, (size_t)nout));
    if (l == 0) break;
    /* dh = dz . W^T, then through the ReLU into dz of the layer below */
    CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, B, nin, nout, 1.0f,
                   m->dz[l], m->t.t_lin[l], nout, m->W[l], m->t.low, nout, 0.0f, m->dh[l - 1], m->t.t_relu[l - 1], nin));
    relu_backward(m->dz[l - 1], m->t.t_lin[l - 1], m->h[l - 1], m->dh[l - 1], m->t.t_relu[l - 1], (size_t)B * nin);
  }
}

/* Test accuracy (percent) and mean test loss, computed in the run's own precision. */
static double evaluate(mlp *m, const dataset *test, double *mean_loss) {
  static int idx[MAXB];
  int start, i, correct = 0;
  double loss = 0.0;
  for (start = 0; start < test->n; start += MAXB) {
    int B = test->n - start < MAXB ? test->n - start : MAXB;
    for (i = 0; i < B; i++) idx[i] = start + i;
    loss += mlp_forward(m, test, idx, B);
    for (i = 0; i < B; i++) {
      const float *p = m->probs + (size_t)i * NOUT;
      int j, best = 0;
      for (j = 1; j < NOUT; j++) if (p[j] > p[best]) best = j;
      correct += best == test->y[idx[i]];
    }
  }
  *mean_loss = loss / test->n;
  return 100.0 * correct / test->n;
}

// ----------------------------------------------------------------------------------------------
// one training run

typedef struct {
  int epochs, batch, seed, train_limit;
  float lr;
  float weight_decay;   /* --weight-decay: on the weight matrices only (0: none, the demo's table) */
} options;

/* The optimizer over the MLP's tensors (on the CPU or the GPU, d): SGD with momentum 0.9. The
   weight matrices are in group 0 with the config's weight decay; the biases in a param group of
   their own without decay (as torch trainers put biases in a no-decay param group). */
static void mlp_optimizer(amp_optimizer **opt, amp_device *d, const options *o, amp_dtype low, void *const W[3],
                          void *const dW[3], void *const b[3], void *const db[3], const int sizes[4]) {
  amp_optim_config oc;
  amp_tensor_desc t;
  int l, no_decay;
  memset(&oc, 0, sizeof oc);   /* zero: the defaults ({0} would do in C, not in C++) */
  oc.kind = AMP_SGD; oc.lr = o->lr; oc.momentum = 0.9f; oc.weight_decay = o->weight_decay;
  CHECK(amp_optimizer_create(opt, d, &oc));
  CHECK(amp_optimizer_add_group(*opt, 1.0f, 0.0f, &no_decay));
  for (l = 0; l < 3; l++) {
    memset(&t, 0, sizeof t);
    t.weights = W[l]; t.dtype = low; t.grads = dW[l]; t.grad_dtype = low; t.n = (size_t)sizes[l] * sizes[l + 1];
    CHECK(amp_optimizer_add_tensor(*opt, &t));
    t.weights = b[l]; t.grads = db[l]; t.n = (size_t)sizes[l + 1]; t.group = no_decay;
    CHECK(amp_optimizer_add_tensor(*opt, &t));
  }
}

typedef struct {
  const char *name;
  double acc, test_loss, final_loss, sec_per_epoch;
  long skipped, steps;
  float final_scale;
  float *curve; int n_curve;   /* mean training loss every `curve_every` steps */
} result;

#define CURVE_EVERY 50

/* --clock cpu: the process's CPU time instead of the wall clock (on a machine shared with other
   jobs, the wall clock also counts the time they took; one thread, so on an idle machine both agree) */
static int use_cpu_clock;
static double now(void) {
  struct timespec ts;
  clock_gettime(use_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* The pieces of a run that do not depend on where the model computes (the CUDA build shares them). */

/* f16 needs dynamic loss scaling; bf16 and f32 have f32's range, a fixed scale of 1 does */
static amp_scaler_config scaler_config(amp_dtype low) {
  amp_scaler_config scfg = amp_scaler_preset(AMP_PRESET_PYTORCH);
  if (low != AMP_F16) { memset(&scfg, 0, sizeof scfg); scfg.fixed = 1; scfg.init_scale = 1.0f; }
  return scfg;
}

/* cosine decay of the learning rate to 0: the last epochs settle, so runs compare cleanly */
static float lr_at(const options *o, long step, long total) {
  return o->lr * 0.5f * (1.0f + cosf(3.14159265f * (float)step / (float)total));
}

/* Starts a run's result, prints what the policy decided and seeds the batch order: the same
   batches in the same order for every precision (and on every device). */
static void run_begin(result *r, const char *name, const mlp_types *t, const options *o, long total) {
  memset(r, 0, sizeof *r);
  r->name = name;
  r->curve = (float *)malloc(sizeof(float) * (size_t)(total / CURVE_EVERY + 1));
  if (!r->curve) die("out of memory");
  printf("%-5s matmul %s, relu %s, loss %s; %s\n", name, dtype_name(t->t_lin[0]), dtype_name(t->t_relu[0]),
         dtype_name(t->t_loss), t->low == AMP_F16 ? "dynamic loss scale (PyTorch preset)" : "loss scale fixed at 1");
  rng_state = (uint64_t)o->seed * 0x100000001b3ull + 7;
}

/* This epoch's batch order: a Fisher-Yates shuffle of 0..n-1. */
static void shuffle(int *perm, int n) {
  int i;
  for (i = 0; i < n; i++) perm[i] = i;
  for (i = n - 1; i > 0; i--) { int j = (int)(rng_next() % (uint64_t)(i + 1)), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
}

/* One step's mean training loss into the curve (a point every CURVE_EVERY steps). */
static void curve_add(result *r, double loss, double *curve_sum, int *curve_count) {
  *curve_sum += loss; (*curve_count)++;
  if (*curve_count == CURVE_EVERY) { r->curve[r->n_curve++] = (float)(*curve_sum / *curve_count); *curve_sum = 0.0; *curve_count = 0; }
}

static void print_epoch(const result *r, int epoch, int epochs, double secs, float scale) {
  printf("%-5s epoch %2d/%d  train loss %.4f  test loss %.4f  test acc %6.2f%%  scale %-8g skipped %ld  %.1fs\n",
         r->name, epoch + 1, epochs, r->final_loss, r->test_loss, r->acc, scale, r->skipped, secs);
  fflush(stdout);
}

/* One run on the CPU. */
static void train(const char *name, amp_dtype low, const dataset *tr, const dataset *te,
                  const float *const W0[3], const options *o, result *r) {
  amp_scaler *sc;
  amp_optimizer *opt;
  amp_scaler_config scfg = scaler_config(low);
  mlp_types types = mlp_decide(low);
  mlp m;
  int n = tr->n < o->train_limit ? tr->n : o->train_limit;
  int steps_per_epoch = n / o->batch, epoch, i;
  long step = 0, total = (long)steps_per_epoch * o->epochs;
  int *perm = (int *)malloc(sizeof(int) * (size_t)n);
  double t_train = 0.0, curve_sum = 0.0;
  int curve_count = 0;
  if (!perm) die("out of memory");

  mlp_init(&m, &types, W0);
  CHECK(amp_scaler_create(&sc, amp_cpu(), &scfg));
  mlp_optimizer(&opt, amp_cpu(), o, low, m.W, m.dW, m.b, m.db, m.sizes);

  run_begin(r, name, &types, o, total);
  for (epoch = 0; epoch < o->epochs; epoch++) {
    double t0 = now(), loss_sum = 0.0;
    shuffle(perm, n);
    for (i = 0; i < steps_per_epoch; i++, step++) {
      const int *idx = perm + (size_t)i * o->batch;
      float scale = amp_scaler_get_scale(sc);
      double loss = mlp_forward(&m, tr, idx, o->batch) / o->batch;
      CHECK(amp_optimizer_set_lr(opt, lr_at(o, step, total)));
      mlp_backward(&m, tr, idx, o->batch, scale);
      CHECK(amp_scaler_step(sc, opt));     /* unscale into fp32, skip if inf/NaN, else update */
      CHECK(amp_scaler_update(sc));        /* the scale rule */
      loss_sum += loss;
      curve_add(r, loss, &curve_sum, &curve_count);
    }
    t_train += now() - t0;
    r->acc = evaluate(&m, te, &r->test_loss);
    r->final_loss = loss_sum / steps_per_epoch;
    r->skipped = amp_scaler_skipped_steps(sc);
    print_epoch(r, epoch, o->epochs, now() - t0, amp_scaler_get_scale(sc));
  }
  r->steps = step;
  r->sec_per_epoch = t_train / o->epochs;
  r->final_scale = amp_scaler_get_scale(sc);
  amp_optimizer_destroy(opt);
  amp_scaler_destroy(sc);
  mlp_free(&m);
  free(perm);
}

// ----------------------------------------------------------------------------------------------
// the loss curves as an SVG (hand-written, no dependencies)

static void write_svg(const char *path, const result *rs, int nr, int epochs, const char *data_name) {
  static const char *colors[] = { "#222222", "#d62728", "#1f77b4" };
  FILE *f = fopen(path, "w");
  const double W = 720, H = 420, x0 = 60, y0 = 30, pw = 620, ph = 320;
  double lo = 1e30, hi = -1e30;
  int i, k;
  if (!f) { fprintf(stderr, "train_mlp: cannot write %s\n", path); return; }
  for (k = 0; k < nr; k++)
    for (i = 0; i < rs[k].n_curve; i++) {
      double v = log10(rs[k].curve[i]);
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  if (hi <= lo) hi = lo + 1;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%g\" y=\"18\" font-size=\"14\">Training loss (log scale), %s: fp32 vs AMP</text>\n", x0, data_name);
  fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n", x0, y0, pw, ph);
  for (i = 0; i <= epochs; i++) {
    double x = x0 + pw * i / epochs;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#eee\"/>"
               "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n", x, y0, x, y0 + ph, x, y0 + ph + 16, i);
  }
  fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">epoch</text>\n", x0 + pw / 2, y0 + ph + 34);
  for (i = 0; i <= 4; i++) {
    double v = lo + (hi - lo) * i / 4, y = y0 + ph - ph * i / 4;
    fprintf(f, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", x0 - 6, y + 4, pow(10, v));
  }
  for (k = 0; k < nr; k++) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", colors[k % 3]);
    for (i = 0; i < rs[k].n_curve; i++) {
      double x = x0 + pw * (i + 1) / (double)rs[k].n_curve;
      double y = y0 + ph - ph * (log10(rs[k].curve[i]) - lo) / (hi - lo);
      fprintf(f, "%.1f,%.1f ", x, y);
    }
    fprintf(f, "\"/>\n<text x=\"%g\" y=\"%g\" fill=\"%s\">%s: test acc %.2f%%</text>\n",
            x0 + pw - 170, y0 + 20 + 16 * k, colors[k % 3], rs[k].name, rs[k].acc);
  }
  fprintf(f, "</svg>\n");
  fclose(f);
}

// ----------------------------------------------------------------------------------------------
// the program: options, data, initial weights, one run per precision, the table

/* Another device's trainer (examples/train_mlp_cuda.cu passes one; this file alone has none).
   open() returns 1 when the device is there (and says which), 0 when it is not (and says so). */
typedef void (*train_fn)(const char *name, amp_dtype low, const dataset *tr, const dataset *te,
                         const float *const W0[3], const options *o, result *r);
typedef struct {
  const char *name;
  int (*open)(void);
  train_fn train;
  void (*close)(void);
} device_trainer;

static int train_mlp_main(int argc, char **argv, const device_trainer *dev) {
  options o;
  const char *precision = "all", *svg = "train_mlp.svg", *dir = "/usr/share/datasets/fashion-mnist";
  const char *data_name = "Fashion-MNIST";
  int test_limit = 10000, i, l, nr = 0;
  double max_gap = -1.0;
  dataset tr, te;
  float *W0[3];
  result rs[3];
  static const struct { const char *name; amp_dtype t; } runs[3] = { { "fp32", AMP_F32 }, { "f16", AMP_F16 }, { "bf16", AMP_BF16 } };
  int status = 0;
  const char *device = dev ? dev->name : "cpu";
  train_fn run = train;
  int on_dev = 0, lr_given = 0;

  o.epochs = 8; o.batch = 256; o.seed = 1; o.train_limit = 60000; o.lr = 0.1f; o.weight_decay = 0.0f;
  for (i = 1; i < argc; i += 2) {   /* options come in pairs: --name value */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) { fprintf(stderr, "train_mlp: %s needs a value (see the top of examples/train_mlp.c)\n", a); return 1; }
    if (!strcmp(a, "--epochs")) o.epochs = atoi(v);
    else if (!strcmp(a, "--train-limit")) o.train_limit = atoi(v);
    else if (!strcmp(a, "--test-limit")) test_limit = atoi(v);
    else if (!strcmp(a, "--precision")) precision = v;
    else if (!strcmp(a, "--batch")) o.batch = atoi(v);
    else if (!strcmp(a, "--lr")) { o.lr = (float)atof(v); lr_given = 1; }
    else if (!strcmp(a, "--seed")) o.seed = atoi(v);
    else if (!strcmp(a, "--weight-decay")) o.weight_decay = (float)atof(v);
    else if (!strcmp(a, "--data")) dir = v;
    else if (!strcmp(a, "--svg")) svg = v;
    else if (!strcmp(a, "--max-gap")) max_gap = atof(v);
    else if (!strcmp(a, "--device")) device = v;
    else if (!strcmp(a, "--clock")) {
      if (strcmp(v, "cpu") && strcmp(v, "wall")) { fprintf(stderr, "train_mlp: --clock must be wall or cpu, not %s\n", v); return 1; }
      use_cpu_clock = !strcmp(v, "cpu");
    } else { fprintf(stderr, "train_mlp: unknown option %s\n", a); return 1; }
  }
  if (o.epochs < 1 || o.batch < 1 || o.batch > MAXB || o.train_limit < o.batch || test_limit < 1 || !(o.lr > 0))
    die("need --epochs >= 1, 1 <= --batch <= 1000, --train-limit >= batch, --test-limit >= 1, --lr > 0");
  if (strcmp(precision, "all") && strcmp(precision, "fp32") && strcmp(precision, "f16") && strcmp(precision, "bf16"))
    die("--precision must be fp32, f16, bf16 or all");
  if (strcmp(device, "cpu") && !(dev && !strcmp(device, dev->name))) {
    if (dev) fprintf(stderr, "train_mlp: --device %s: this build has cpu and %s\n", device, dev->name);
    else fprintf(stderr, "train_mlp: --device %s: this build has cpu only (the CUDA build is examples/train_mlp_cuda.cu)\n", device);
    return 1;
  }
  if (strcmp(device, "cpu")) {
    if (!dev->open()) return 0;   /* no such device here: it said so, and that is not a failure */
    run = dev->train;
    on_dev = 1;
  }

  if (load_fashion(dir, "train", &tr) && load_fashion(dir, "t10k", &te)) {
    printf("Fashion-MNIST from %s: %d training, %d test images\n", dir, tr.n, te.n);
  } else {
    printf("Fashion-MNIST not found in %s (install the Debian package dataset-fashion-mnist,\n"
           "or give --data DIR): training on the built-in synthetic set instead\n", dir);
    make_synthetic(&tr, &te, o.train_limit < 12000 ? o.train_limit : 12000, 2000);
    data_name = "synthetic data";
    /* Its images are brighter than Fashion-MNIST's, so the first layer's pre-activations are
       larger: at lr 0.1, bf16's coarser weights make the run unstable (fp32 and f16 survive). */
    if (!lr_given) o.lr = 0.03f;
  }
  if (te.n > test_limit) te.n = test_limit;
  if (tr.n > o.train_limit) tr.n = o.train_limit;
  printf("MLP 784-256-128-10, SGD momentum 0.9, lr %g (cosine), batch %d, %d epochs, seed %d, %d train / %d test\n\n",
         o.lr, o.batch, o.epochs, o.seed, tr.n, te.n);

  /* One set of initial weights (He init, seeded) that every precision starts from. */
  rng_state = (uint64_t)o.seed;
  {
    const int *sz = mlp_sizes;
    for (l = 0; l < 3; l++) {
      size_t nw = (size_t)sz[l] * sz[l + 1], j;
      float sd = sqrtf(2.0f / sz[l]);
      W0[l] = (float *)malloc(sizeof(float) * nw);
      if (!W0[l]) die("out of memory");
      for (j = 0; j < nw; j++) W0[l][j] = sd * rng_normal();
    }
  }

  for (i = 0; i < 3; i++) {
    if (strcmp(precision, "all") && strcmp(precision, runs[i].name)) continue;
    run(runs[i].name, runs[i].t, &tr, &te, (const float *const *)W0, &o, &rs[nr]);
    nr++;
    printf("\n");
  }

  printf("%-9s %10s %11s %10s %8s %12s %12s\n", "precision", "test acc", "final loss", "test loss", "skipped", "final scale", "s / epoch");
  for (i = 0; i < nr; i++)
    printf("%-9s %9.2f%% %11.4f %10.4f %8ld %12g %12.2f\n", rs[i].name, rs[i].acc, rs[i].final_loss, rs[i].test_loss,
           rs[i].skipped, rs[i].final_scale, rs[i].sec_per_epoch);
  if (nr > 1 && !strcmp(rs[0].name, "fp32")) {
    printf("\n");
    for (i = 1; i < nr; i++) {
      double gap = rs[0].acc - rs[i].acc;
      printf("%s vs fp32: %+.2f points of test accuracy%s\n", rs[i].name, -gap,
             max_gap >= 0 && gap > max_gap ? "  -- more than --max-gap allows" : "");
      if (max_gap >= 0 && gap > max_gap) status = 2;
    }
  }
  write_svg(svg, rs, nr, o.epochs, data_name);
  printf("loss curves: %s\n", svg);
  for (i = 0; i < nr; i++) free(rs[i].curve);
  for (l = 0; l < 3; l++) free(W0[l]);
  free(tr.x); free(tr.y); free(te.x); free(te.y);
  if (on_dev) dev->close();
  return status;
}

#ifndef TRAIN_MLP_NO_MAIN
int main(int argc, char **argv) { return train_mlp_main(argc, argv, NULL); }
#endif
