/* train_gpt.c - the course's last lesson: a small GPT trained in fp32, bf16, f16 and fp8 with amp.h.

   A GPT-2-style language model on bytes of text: token and position embeddings, pre-norm blocks
   (layer norm, causal self-attention, residual add, layer norm, MLP with GELU, residual add), a
   final layer norm and an output head that shares the token embedding's weights. Forward and
   backward are written out below in plain C, one op after another, in the order a course would
   teach them (llm.c's train_gpt2.c has the same shape). The same model, from the same initial
   weights, on the same batches, is trained once per precision:

     fp32   every tensor in f32 (the policy in AMP_MODE_FORCE_F32 decides so)
     bf16   AMP: the model copy, matmuls, activations and grads in bf16; layer norms, softmax,
            the loss and the residual stream in f32; fp32 master weights and moments in the
            optimizer. bf16 has f32's range: no loss scale, the optimizer steps on its own
            (amp_optimizer_step), skipping a step whose grads hold inf/NaN.
     f16    the same in f16, with the dynamic loss scale (PyTorch's GradScaler rule), which
            skips the steps whose grads overflowed
     fp8    bf16, except that the block linears' three products (forward, and the weight's and
            the input's grads) multiply fp8 codes: the input and the weight cast to E4M3, the
            output's grad to E5M2 (TransformerEngine's HYBRID), each at its own scale from the
            delayed recipe (amp_fp8_scaler: the amax of every cast, recorded by amp_quantize_ex
            in the same pass, a history, one update per step); amp_gemm_ex reads the codes back
            with their scale_invs and sums in f32. The output head stays bf16, as in TE. On a
            CPU the fp8 product is an emulation: the codes are widened while packing (exactly: to
            f32, or to bf16 where the bf16 products run vdpbf16ps or AMX tiles) and multiplied by
            the kernels of those types. It shows what fp8 does to the numbers, not fp8's speed,
            which needs fp8 Tensor Cores.

   What amp.h does here: the op-list policy decides each op's dtype (amp_policy_decide),
   amp_gemm computes every matrix product (fp32 accumulation, one rounding to the output type),
   amp_scaler scales f16's loss and skips overflowing steps (bf16 and fp32 step without one,
   amp_optimizer_step), amp_optimizer runs AdamW on the fp32
   master with a global gradient-norm clip and writes the rounded model copy back; the trainer
   sets a cosine learning-rate schedule (with warmup) every step.

   Data: the bytes of the fortune files (/usr/share/games/fortunes, Debian package fortunes-min,
   which fortune-mod installs); where they are absent, the licence texts every Debian system has
   in /usr/share/common-licenses; where even those are absent, a short text built in. The last
   10% is the validation split; the validation loss is measured every --eval-every steps.

   Build:  cc -std=c99 -O2 -march=native -I. examples/train_gpt.c -o train_gpt -lm
   Run:    ./train_gpt [--precision fp32|bf16|f16|bf16-split|bf16-none|bf16-8bit|bf16-none-8bit|fp8|all]
                       [--steps N] [--seed N] [--svg FILE]
                       [--layers N] [--dim N] [--heads N] [--ctx N] [--batch N] [--lr X]
                       [--eval-every N] [--data FILE|DIR|builtin] [--init-scale S] [--max-gap PCT]
           ./train_gpt --gradcheck     finite differences against the backward (fp32, tiny model)
           ./train_gpt --bench         ms per step, fp32 against bf16 and f16 (for make bench)
   bf16-split and bf16-none are bf16 with less memory for the master: a 2-byte remainder beside the
   bf16 weights that together hold the fp32 master exactly (AMP_MASTER_SPLIT), or no master at all,
   the bf16 weights updated in place with stochastic rounding (AMP_MASTER_NONE). bf16-8bit and
   bf16-none-8bit keep AdamW's two moments in bitsandbytes' blockwise 8 bits as well
   (AMP_MOMENTS_8BIT: a code per element and an f32 absmax per 256; a tensor under 4096 elements
   keeps f32 moments): the split master and 8-bit moments, or no master and 8-bit moments. The
   table's bytes per parameter are the model copy's and amp_optimizer_state_bytes over the
   parameter count (the master and the moments as the optimizer keeps them).
   --max-gap PCT: exit 2 when a bf16 or f16 validation loss differs from fp32's by more than PCT
   percent (the test suite uses 2). Any NaN or inf loss exits 3. --init-scale S: f16's first loss
   scale (default 65536, PyTorch's); a large one makes the scaler back off at the start.
   Deterministic: seeded. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L  /* clock_gettime, opendir */
#endif
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <dirent.h>

static void die(const char *what) {
  fprintf(stderr, "train_gpt: %s\n", what);
  exit(1);
}
/* Every amp.h call is checked: on failure amp_last_error() says which call and which value. */
#define CHECK(call) do { if ((call) != AMP_OK) { fprintf(stderr, "train_gpt: %s:%d: %s\n", __FILE__, __LINE__, amp_last_error()); exit(1); } } while (0)

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) die("out of memory");
  return p;
}

// ----------------------------------------------------------------------------------------------
// random numbers: splitmix64, so every run with the same --seed is the same

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float rng_uniform(uint64_t *s) { return (float)((rng_next(s) >> 40) + 0.5) / 16777216.0f; } /* (0, 1) */
static float rng_normal(uint64_t *s) {
  float u = rng_uniform(s), v = rng_uniform(s);
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

// ----------------------------------------------------------------------------------------------
// data: the bytes of a text are the tokens (vocabulary 256)

typedef struct { unsigned char *bytes; size_t n, n_train; char name[160]; } text;

#define MAX_TEXT (4u << 20)   /* read at most 4 MiB */

static void text_append_file(text *t, const char *path) {
  FILE *f = fopen(path, "rb");
  size_t got;
  if (!f) return;
  got = fread(t->bytes + t->n, 1, MAX_TEXT - t->n, f);
  t->n += got;
  fclose(f);
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file of a directory in name order (the fortune directory also holds .dat index
   files and .u8 links; only the texts are read). Returns the number of files read. */
static int text_append_dir(text *t, const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char *names[256];
  int n = 0, i, used = 0;
  if (!d) return 0;
  while ((e = readdir(d)) && n < 256) {
    const char *s = e->d_name;
    size_t len = strlen(s);
    if (s[0] == '.' || (len > 4 && !strcmp(s + len - 4, ".dat")) || (len > 3 && !strcmp(s + len - 3, ".u8"))) continue;
    names[n] = (char *)xcalloc(len + 1, 1);
    memcpy(names[n], s, len + 1);
    n++;
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_names);
  for (i = 0; i < n; i++) {
    char path[1024];
    size_t before = t->n;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    text_append_file(t, path);
    used += t->n > before;
    free(names[i]);
  }
  return used;
}

static const char builtin_text[] =
  "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.\n"
  "All that glitters is not gold. Actions speak louder than words. Better late than never.\n"
  "Mixed precision keeps the master weights in fp32 and computes the matrix products in sixteen bits.\n"
  "The loss scale moves small gradients into the range of f16; an overflow skips the step and halves it.\n";

/* The training text: --data FILE or DIR, else the fortunes, else the licences, else the built-in
   text (--data builtin asks for that directly). */
static void text_load(text *t, const char *data) {
  static const char *fortunes = "/usr/share/games/fortunes", *licences = "/usr/share/common-licenses";
  int builtin = data && !strcmp(data, "builtin");
  t->bytes = (unsigned char *)xcalloc(MAX_TEXT, 1);
  t->n = 0;
  if (data && !builtin) {
    if (!text_append_dir(t, data)) text_append_file(t, data);
    snprintf(t->name, sizeof t->name, "%s", data);
    if (t->n < 4096) printf("%s: no text there (or under 4 KiB)\n", data);
  }
  if (t->n < 4096 && !builtin) {
    t->n = 0;
    text_append_dir(t, fortunes);
    snprintf(t->name, sizeof t->name, "the fortunes in %s", fortunes);
    if (t->n < 4096) printf("no fortunes in %s (Debian package fortunes-min): trying the licence texts\n", fortunes);
  }
  if (t->n < 4096 && !builtin) {
    t->n = 0;
    text_append_dir(t, licences);
    snprintf(t->name, sizeof t->name, "the licence texts in %s", licences);
    if (t->n < 4096) printf("no licence texts in %s either: training on a short built-in text\n", licences);
  }
  if (t->n < 4096) {
    size_t len = sizeof builtin_text - 1;
    t->n = 0;
    while (t->n + len <= 8192) { memcpy(t->bytes + t->n, builtin_text, len); t->n += len; }
    snprintf(t->name, sizeof t->name, "the built-in text");
  }
  t->n_train = t->n - t->n / 10;   /* the last 10%: validation */
}

// ----------------------------------------------------------------------------------------------
// tensors of any of the three types: every op reads its inputs as float, computes in float and
// rounds its result once to the type the policy gave the tensor. The element-wise steps widen a
// whole 16-bit tensor at once (amp_convert, vectorised) into f32 scratch (m->wide, m->wide2),
// compute there and round the result back in one amp_convert: the same bits as converting element
// by element (amp_f16_to_f32 and friends), without a conversion and a branch on the type inside
// every loop (done per element, they took about a third of an f16 step here).

/* The address of element i of a buffer of type t (for sub-matrices handed to amp_gemm). */
static inline void *at(const void *p, amp_dtype t, size_t i) { return (char *)p + i * amp_dtype_size(t); }
static const char *dtype_name(amp_dtype t) { return t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : "f32"; }

// ----------------------------------------------------------------------------------------------
// the model's shape and its parameters

typedef struct { int V, T, C, L, H; } gpt_config;  /* vocabulary, context, width, layers, heads */

/* The 16 parameter tensors, llm.c's order; the per-layer ones hold all L layers one after another. */
enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB,
       LNFW, LNFB, NPARAM };
static const char *const param_name[NPARAM] = { "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
  "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb" };
/* The matrices (2-D tensors); the rest are the norms' gains and biases and the linears' biases. */
static const int param_is_matrix[NPARAM] = { 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0 };

static void param_sizes(const gpt_config *c, size_t n[NPARAM]) {
  size_t V = (size_t)c->V, T = (size_t)c->T, C = (size_t)c->C, L = (size_t)c->L;
  n[WTE] = V * C; n[WPE] = T * C;
  n[LN1W] = n[LN1B] = L * C;
  n[QKVW] = L * 3 * C * C; n[QKVB] = L * 3 * C;
  n[ATTPROJW] = L * C * C; n[ATTPROJB] = L * C;
  n[LN2W] = n[LN2B] = L * C;
  n[FCW] = L * 4 * C * C; n[FCB] = L * 4 * C;
  n[FCPROJW] = L * 4 * C * C; n[FCPROJB] = L * C;
  n[LNFW] = n[LNFB] = C;
}

/* GPT-2's initialisation, in f32 (every precision starts from these values, rounded to its type):
   weights N(0, 0.02), the two projections into the residual stream N(0, 0.02 / sqrt(2 L)),
   positions N(0, 0.01), norm gains 1, biases 0. */
static float *init_weights(const gpt_config *c, uint64_t seed, size_t *total) {
  size_t n[NPARAM], off = 0, i;
  int p;
  float *w;
  param_sizes(c, n);
  for (p = 0; p < NPARAM; p++) off += n[p];
  w = (float *)xcalloc(off, sizeof(float));
  *total = off;
  off = 0;
  for (p = 0; p < NPARAM; p++) {
    float sd = p == WPE ? 0.01f : (p == ATTPROJW || p == FCPROJW) ? 0.02f / sqrtf(2.0f * (float)c->L) : 0.02f;
    for (i = 0; i < n[p]; i++)
      w[off + i] = param_is_matrix[p] ? sd * rng_normal(&seed) : (p == LN1W || p == LN2W || p == LNFW) ? 1.0f : 0.0f;
    off += n[p];
  }
  return w;
}

// ----------------------------------------------------------------------------------------------
// what the policy decides: the dtype of every tensor of the forward pass (and of its gradient)

typedef struct {
  amp_dtype low;    /* the model copy and its grads: f32 in the fp32 run */
  amp_dtype res;    /* the residual stream (f32) */
  amp_dtype lin;    /* the inputs and outputs of the linears: ln outputs, q k v, attention output */
  amp_dtype att;    /* the attention scores q k^T, and the attention weights that multiply v */
  amp_dtype act;    /* the MLP's hidden activations (after GELU) */
  amp_dtype logits; /* the output head's logits */
} gpt_types;

static gpt_types gpt_decide(amp_dtype low) {
  amp_policy *pol;
  gpt_types t;
  amp_dtype in[2], ln, sm, loss, av, add, fc;
  /* fp32: the policy forces every op to f32; AMP: PyTorch autocast's rules in the low type */
  CHECK(amp_policy_create(&pol, low == AMP_F32 ? AMP_MODE_FORCE_F32 : AMP_MODE_MIXED, low == AMP_F32 ? AMP_F16 : low));
  t.low = low;
  /* The embeddings are looked up and summed in f32: the residual stream starts in f32, as in
     PyTorch autocast, where the embedding tables are f32 parameters. */
  t.res = AMP_F32;
  in[0] = t.res;
  ln = amp_policy_decide(pol, "layer_norm", in, 1);                 /* black: f32 */
  in[0] = ln; in[1] = low;
  t.lin = amp_policy_decide(pol, "linear", in, 2);                  /* white: low */
  in[0] = t.lin; in[1] = t.lin;
  t.att = amp_policy_decide(pol, "bmm", in, 2);                     /* q k^T, white: low */
  in[0] = t.att;
  sm = amp_policy_decide(pol, "softmax", in, 1);                    /* black: f32 */
  in[0] = sm; in[1] = t.lin;
  av = amp_policy_decide(pol, "bmm", in, 2);                        /* weights v, white: low */
  in[0] = t.res; in[1] = t.lin;
  add = amp_policy_decide(pol, "elementwise_add", in, 2);           /* gray: the widest input, f32 */
  in[0] = ln; in[1] = low;
  fc = amp_policy_decide(pol, "linear", in, 2);
  in[0] = fc;
  t.act = amp_policy_decide(pol, "gelu", in, 1);                    /* gray: follows its input */
  in[0] = ln; in[1] = low;
  t.logits = amp_policy_decide(pol, "linear", in, 2);
  in[0] = t.logits;
  loss = amp_policy_decide(pol, "cross_entropy", in, 1);            /* black: f32 */
  amp_policy_destroy(pol);
  /* This trainer stores each tensor once, in the type of the op that reads it (the cast autocast
     makes at the reader is made once, at the writer). So it needs these to agree: */
  if (ln != AMP_F32 || sm != AMP_F32 || loss != AMP_F32 || add != AMP_F32)
    die("the policy must keep layer_norm, softmax, cross_entropy and the residual add in f32");
  if (t.lin != low || t.att != low || av != low || fc != low || t.act != low || t.logits != low)
    die("the policy must run the linears, the attention products and gelu in the model's type");
  return t;
}

// ----------------------------------------------------------------------------------------------
// the model: parameters, grads, activations

typedef struct {
  gpt_config c;
  gpt_types t;
  int B;                                   /* sequences per batch; N = B * T rows */
  size_t n[NPARAM], off[NPARAM], n_params;
  void *params, *grads;                    /* the model copy and its grads, type t.low */
  float *demb_f32;                         /* the embeddings' grads summed in f32 ((V + T) x C) */
  float *wgrad_f32;                        /* a layer norm's gain and bias grads summed in f32 (2C) */
  /* activations kept for the backward pass (per layer: L of each) */
  int *tokens, *targets;                   /* N each */
  float *x0;                               /* embeddings, the residual stream's start (N x C, f32) */
  void *ln1, *qkv, *att, *atty;            /* L x N x C, L x N x 3C, L x B x H x T x T, L x N x C */
  float *res2, *res3;                      /* residual after attention, after the MLP (L x N x C, f32) */
  void *ln2, *fch, *fchg;                  /* L x N x C, L x N x 4C (before and after GELU) */
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd; /* L x N, N */
  void *lnf, *logits;                      /* N x C, N x V */
  float *probs;                            /* N x V, f32 */
  /* scratch of the forward and backward passes */
  void *tmp, *scores;                      /* N x C (a projection's output), T x T */
  float *wide, *wide2;                     /* f32 copies of tensors for elementwise steps (the largest: gpt_init) */
  float *dres;                             /* the residual stream's grad (N x C, f32) */
  void *dln, *dout, *dqkv, *datty, *dfch, *dfchg, *dP, *dS, *dlogits;
  /* --precision fp8 (else NULL): the block linears' products in fp8, TransformerEngine's HYBRID
     delayed recipe. Three scaled tensors per linear (4 per layer): its input x and its weight W in
     E4M3, its output grad dy in E5M2; each cast writes its amax into the scaler, whose update after
     the optimizer step turns the amax history into next step's scales. */
  amp_fp8_scaler *fp8;
  unsigned char *xq;                       /* each linear's E4M3 input, kept for its backward (4L of N x 4C) */
  unsigned char *wq, *dyq;                 /* a weight's E4M3 codes (4C x C), an output grad's E5M2 codes (N x 4C) */
  int fp8_record;                          /* 1 in training steps: casts record their amax (validation does not) */
} gpt;
enum { FP8_X, FP8_W, FP8_DY, FP8_PER_LINEAR };   /* the scaler's tensors of linear k: 3k + these */

static void *P(const gpt *m, int p) { return at(m->params, m->t.low, m->off[p]); }
static void *G(const gpt *m, int p) { return at(m->grads, m->t.low, m->off[p]); }

static void gpt_init(gpt *m, const gpt_config *c, const gpt_types *t, int B, const float *w0, int fp8) {
  size_t N = (size_t)B * c->T, C = (size_t)c->C, L = (size_t)c->L, T = (size_t)c->T, V = (size_t)c->V;
  int p;
  memset(m, 0, sizeof *m);
  m->c = *c; m->t = *t; m->B = B;
  param_sizes(c, m->n);
  for (p = 0; p < NPARAM; p++) { m->off[p] = m->n_params; m->n_params += m->n[p]; }
  m->params = xcalloc(m->n_params, amp_dtype_size(t->low));
  m->grads = xcalloc(m->n_params, amp_dtype_size(t->low));
  CHECK(amp_convert(m->params, t->low, w0, AMP_F32, m->n_params));
  m->demb_f32 = (float *)xcalloc((V + T) * C, sizeof(float));
  m->wgrad_f32 = (float *)xcalloc(2 * C, sizeof(float));
  m->tokens = (int *)xcalloc(N, sizeof(int)); m->targets = (int *)xcalloc(N, sizeof(int));
  m->x0 = (float *)xcalloc(N * C, sizeof(float));
  m->ln1 = xcalloc(L * N * C, amp_dtype_size(t->lin));
  m->qkv = xcalloc(L * N * 3 * C, amp_dtype_size(t->lin));
  m->att = xcalloc(L * (size_t)B * c->H * T * T, amp_dtype_size(t->att));
  m->atty = xcalloc(L * N * C, amp_dtype_size(t->lin));
  m->res2 = (float *)xcalloc(L * N * C, sizeof(float));
  m->res3 = (float *)xcalloc(L * N * C, sizeof(float));
  m->ln2 = xcalloc(L * N * C, amp_dtype_size(t->lin));
  m->fch = xcalloc(L * N * 4 * C, amp_dtype_size(t->lin));
  m->fchg = xcalloc(L * N * 4 * C, amp_dtype_size(t->act));
  m->ln1_mean = (float *)xcalloc(L * N, sizeof(float)); m->ln1_rstd = (float *)xcalloc(L * N, sizeof(float));
  m->ln2_mean = (float *)xcalloc(L * N, sizeof(float)); m->ln2_rstd = (float *)xcalloc(L * N, sizeof(float));
  m->lnf_mean = (float *)xcalloc(N, sizeof(float)); m->lnf_rstd = (float *)xcalloc(N, sizeof(float));
  m->lnf = xcalloc(N * C, amp_dtype_size(t->lin));
  m->logits = xcalloc(N * V, amp_dtype_size(t->logits));
  m->probs = (float *)xcalloc(N * V, sizeof(float));
  m->tmp = xcalloc(N * C, amp_dtype_size(t->lin));
  {   /* the largest tensor an element-wise step widens: the MLP's (N x 4C), the logits' (N x V), an
         attention matrix (T x T), the token embedding (V x C) */
    size_t nw = N * 4 * C;
    if (N * V > nw) nw = N * V;
    if (T * T > nw) nw = T * T;
    if (V * C > nw) nw = V * C;
    m->wide = (float *)xcalloc(nw, sizeof(float)); m->wide2 = (float *)xcalloc(nw, sizeof(float));
  }
  m->scores = xcalloc(T * T, amp_dtype_size(t->att));
  m->dres = (float *)xcalloc(N * C, sizeof(float));
  m->dln = xcalloc(N * C, amp_dtype_size(t->lin));
  m->dout = xcalloc(N * C, amp_dtype_size(t->lin));
  m->dqkv = xcalloc(N * 3 * C, amp_dtype_size(t->lin));
  m->datty = xcalloc(N * C, amp_dtype_size(t->lin));
  m->dfch = xcalloc(N * 4 * C, amp_dtype_size(t->lin));
  m->dfchg = xcalloc(N * 4 * C, amp_dtype_size(t->act));
  m->dP = xcalloc(T * T, amp_dtype_size(t->att));
  m->dS = xcalloc(T * T, amp_dtype_size(t->att));
  m->dlogits = xcalloc(N * V, amp_dtype_size(t->logits));
  if (fp8) {   /* HYBRID: E4M3 inputs and weights, E5M2 output grads; the delayed recipe's defaults */
    size_t n_fp8 = 4 * L * FP8_PER_LINEAR, k;
    amp_dtype *fmt = (amp_dtype *)xcalloc(n_fp8, sizeof(amp_dtype));
    amp_fp8_config fc;
    memset(&fc, 0, sizeof fc);   /* AMP_FP8_DELAYED, TE's history and margin */
    fc.stats = 1;                /* saturated and flushed casts, counted per step */
    for (k = 0; k < n_fp8; k++) fmt[k] = k % FP8_PER_LINEAR == FP8_DY ? AMP_E5M2 : AMP_E4M3;
    CHECK(amp_fp8_scaler_create(&m->fp8, amp_cpu(), &fc, n_fp8, fmt));
    free(fmt);
    m->xq = (unsigned char *)xcalloc(4 * L * N * 4 * C, 1);
    m->wq = (unsigned char *)xcalloc(4 * C * C, 1);
    m->dyq = (unsigned char *)xcalloc(N * 4 * C, 1);
  }
}

static void gpt_free(gpt *m) {
  void *all[] = { m->params, m->grads, m->demb_f32, m->wgrad_f32, m->tokens, m->targets, m->x0, m->ln1, m->qkv,
    m->att, m->atty, m->res2, m->res3, m->ln2, m->fch, m->fchg, m->ln1_mean, m->ln1_rstd, m->ln2_mean, m->ln2_rstd,
    m->lnf_mean, m->lnf_rstd, m->lnf, m->logits, m->probs, m->tmp, m->wide, m->wide2, m->scores, m->dres, m->dln, m->dout, m->dqkv,
    m->datty, m->dfch, m->dfchg, m->dP, m->dS, m->dlogits, m->xq, m->wq, m->dyq };
  size_t i;
  for (i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  amp_fp8_scaler_destroy(m->fp8);
}

// ----------------------------------------------------------------------------------------------
// the forward pass, op by op

/* fp8: src (n elements of type t) cast into dst at scaled tensor i's scale; in training steps the
   cast records its amax and its counts (saturated, flushed) in the scaler's slots for this step,
   which the update reads. */
static void fp8_cast(const gpt *m, void *dst, size_t i, const void *src, amp_dtype t, size_t n, int record) {
  amp_dtype fmt = i % FP8_PER_LINEAR == FP8_DY ? AMP_E5M2 : AMP_E4M3;
  CHECK(amp_quantize_ex(amp_cpu(), dst, fmt, src, t, n, amp_fp8_scaler_scale_ptr(m->fp8, i),
                        record ? amp_fp8_scaler_amax_ptr(m->fp8, i) : NULL,
                        record ? amp_fp8_scaler_counts_ptr(m->fp8, i) : NULL));
}
/* The E4M3 input of linear k, kept from its forward for its backward. */
static unsigned char *fp8_x(const gpt *m, int k) { return m->xq + (size_t)k * m->B * m->c.T * 4 * m->c.C; }

/* y = x W^T + b for N rows: x is N x in, W is out x in (PyTorch's layout), y is N x out.
   amp_gemm_ex adds the bias before its one rounding to y's type. With fp8 (k: the linear's number,
   4 per layer), x and W are cast to E4M3 at their scales and the product reads them back with
   their scale_invs: y = (x_q W_q^T) * x_scale_inv * w_scale_inv + b, summed in f32. */
static void linear_forward(const gpt *m, void *y, const void *x, const void *W, const void *b, int N, int in, int out,
                           int k) {
  amp_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.bias = b; o.bias_type = m->t.low;
  if (m->fp8) {
    size_t ix = (size_t)k * FP8_PER_LINEAR + FP8_X, iw = (size_t)k * FP8_PER_LINEAR + FP8_W;
    fp8_cast(m, fp8_x(m, k), ix, x, m->t.lin, (size_t)N * in, m->fp8_record);
    fp8_cast(m, m->wq, iw, W, m->t.low, (size_t)out * in, m->fp8_record);
    o.a_scale_inv = amp_fp8_scaler_scale_inv_ptr(m->fp8, ix);
    o.b_scale_inv = amp_fp8_scaler_scale_inv_ptr(m->fp8, iw);
    CHECK(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, N, out, in, 1.0f,
                      fp8_x(m, k), AMP_E4M3, in, m->wq, AMP_E4M3, in, 0.0f, y, m->t.lin, out, &o));
    return;
  }
  CHECK(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, N, out, in, 1.0f,
                    x, m->t.lin, in, W, m->t.low, in, 0.0f, y, m->t.lin, out, &o));
}

/* Layer norm of each row of x (f32): the mean and 1/std are kept for the backward pass. */
static void layernorm_forward(const gpt *m, void *out, float *mean, float *rstd, const float *x,
                              const void *w, const void *b, int N) {
  int C = m->c.C, i, j;
  float *o = m->wide, *wf = m->wide2, *bf = m->wide2 + C;   /* the rows out, the gain and bias in f32 */
  CHECK(amp_convert(wf, AMP_F32, w, m->t.low, (size_t)C));
  CHECK(amp_convert(bf, AMP_F32, b, m->t.low, (size_t)C));
  for (i = 0; i < N; i++) {
    const float *xi = x + (size_t)i * C;
    float mu = 0.0f, var = 0.0f, r;
    for (j = 0; j < C; j++) mu += xi[j];
    mu /= (float)C;
    for (j = 0; j < C; j++) var += (xi[j] - mu) * (xi[j] - mu);
    r = 1.0f / sqrtf(var / (float)C + 1e-5f);
    for (j = 0; j < C; j++) o[(size_t)i * C + j] = (xi[j] - mu) * r * wf[j] + bf[j];
    mean[i] = mu; rstd[i] = r;
  }
  CHECK(amp_convert(out, m->t.lin, o, AMP_F32, (size_t)N * C));
}

/* Causal self-attention of one layer: for each sequence and head, scores = q k^T / sqrt(hs),
   softmax over the positions up to the current one, then the weights times v. */
static void attention_forward(gpt *m, void *y, void *att, const void *qkv) {
  int B = m->B, T = m->c.T, C = m->c.C, H = m->c.H, hs = C / H, b, h, i, j;
  amp_dtype tl = m->t.lin, ta = m->t.att;
  float alpha = 1.0f / sqrtf((float)hs), *sf = m->wide;   /* the scores, then the weights, in f32 */
  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++) {
      size_t row0 = (size_t)b * T;
      const void *q = at(qkv, tl, row0 * 3 * C + (size_t)h * hs), *k = at(qkv, tl, row0 * 3 * C + C + (size_t)h * hs),
                 *v = at(qkv, tl, row0 * 3 * C + 2 * (size_t)C + (size_t)h * hs);
      void *w = at(att, ta, ((size_t)b * H + h) * T * T);
      CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, T, T, hs, alpha,
                     q, tl, 3 * C, k, tl, 3 * C, 0.0f, m->scores, ta, T));
      CHECK(amp_convert(sf, AMP_F32, m->scores, ta, (size_t)T * T));
      for (i = 0; i < T; i++) {   /* softmax (black list: f32) of row i over positions 0..i, in place */
        float *r = sf + (size_t)i * T, mx = -INFINITY, sum = 0.0f;
        for (j = 0; j <= i; j++) if (r[j] > mx) mx = r[j];
        for (j = 0; j <= i; j++) { r[j] = expf(r[j] - mx); sum += r[j]; }
        for (j = 0; j < T; j++) r[j] = j <= i ? r[j] / sum : 0.0f;
      }
      CHECK(amp_convert(w, ta, sf, AMP_F32, (size_t)T * T));
      CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, T, hs, T, 1.0f,
                     w, ta, T, v, tl, 3 * C, 0.0f, at(y, tl, row0 * C + (size_t)h * hs), tl, C));
    }
}

/* GELU, the tanh approximation GPT-2 uses. */
#define GELU_K0 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_K1 0.044715f
/* tanh through one expf, tanh(u) = 1 - 2 / (e^2u + 1): within 2e-7 of tanh (libm's tanhf: 1e-7), several
   times faster than libm's tanhf, which the GELU would otherwise spend a third of a step in (it
   runs on every element of the 4C-wide MLP, forward and backward). e^2u overflowing to inf gives 1. */
static float tanh_fast(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }
static float gelu(float x) { return 0.5f * x * (1.0f + tanh_fast(GELU_K0 * (x + GELU_K1 * x * x * x))); }
static float gelu_grad(float x) {
  float th = tanh_fast(GELU_K0 * (x + GELU_K1 * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
}

/* The residual add: res_out = res_in + y (f32 + the projection's output, in f32). */
static void residual_forward(gpt *m, float *out, const float *in, const void *y, size_t n) {
  size_t i;
  CHECK(amp_convert(m->wide, AMP_F32, y, m->t.lin, n));
  for (i = 0; i < n; i++) out[i] = in[i] + m->wide[i];
}

/* The whole forward pass over the batch in m->tokens; returns the mean cross-entropy against
   m->targets (computed in f32, summed in double) and leaves the softmax in m->probs. */
static double gpt_forward(gpt *m) {
  int B = m->B, T = m->c.T, C = m->c.C, L = m->c.L, V = m->c.V, H = m->c.H, N = B * T, i, j, l;
  size_t NC = (size_t)N * C;
  amp_dtype low = m->t.low, tl = m->t.lin;
  double loss = 0.0;
  /* token + position embedding, in f32 */
  CHECK(amp_convert(m->wide, AMP_F32, P(m, WTE), low, (size_t)V * C));
  CHECK(amp_convert(m->wide2, AMP_F32, P(m, WPE), low, (size_t)T * C));
  for (i = 0; i < N; i++)
    for (j = 0; j < C; j++)
      m->x0[(size_t)i * C + j] = m->wide[(size_t)m->tokens[i] * C + j] + m->wide2[(size_t)(i % T) * C + j];
  for (l = 0; l < L; l++) {
    const float *res_in = l == 0 ? m->x0 : m->res3 + (size_t)(l - 1) * NC;
    void *ln1 = at(m->ln1, tl, l * NC), *qkv = at(m->qkv, tl, l * NC * 3), *atty = at(m->atty, tl, l * NC);
    void *att = at(m->att, m->t.att, (size_t)l * B * H * T * T);
    void *ln2 = at(m->ln2, tl, l * NC), *fch = at(m->fch, tl, l * NC * 4), *fchg = at(m->fchg, m->t.act, l * NC * 4);
    float *res2 = m->res2 + l * NC, *res3 = m->res3 + l * NC;
    size_t k;
    layernorm_forward(m, ln1, m->ln1_mean + (size_t)l * N, m->ln1_rstd + (size_t)l * N, res_in,
                      at(P(m, LN1W), low, (size_t)l * C), at(P(m, LN1B), low, (size_t)l * C), N);
    linear_forward(m, qkv, ln1, at(P(m, QKVW), low, (size_t)l * 3 * C * C), at(P(m, QKVB), low, (size_t)l * 3 * C), N, C, 3 * C,
                   4 * l);
    attention_forward(m, atty, att, qkv);
    linear_forward(m, m->tmp, atty, at(P(m, ATTPROJW), low, (size_t)l * C * C), at(P(m, ATTPROJB), low, (size_t)l * C), N, C, C,
                   4 * l + 1);
    residual_forward(m, res2, res_in, m->tmp, NC);
    layernorm_forward(m, ln2, m->ln2_mean + (size_t)l * N, m->ln2_rstd + (size_t)l * N, res2,
                      at(P(m, LN2W), low, (size_t)l * C), at(P(m, LN2B), low, (size_t)l * C), N);
    linear_forward(m, fch, ln2, at(P(m, FCW), low, (size_t)l * 4 * C * C), at(P(m, FCB), low, (size_t)l * 4 * C), N, C, 4 * C,
                   4 * l + 2);
    CHECK(amp_convert(m->wide, AMP_F32, fch, tl, NC * 4));   /* GELU, in f32 */
    for (k = 0; k < NC * 4; k++) m->wide[k] = gelu(m->wide[k]);
    CHECK(amp_convert(fchg, m->t.act, m->wide, AMP_F32, NC * 4));
    linear_forward(m, m->tmp, fchg, at(P(m, FCPROJW), low, (size_t)l * 4 * C * C), at(P(m, FCPROJB), low, (size_t)l * C), N, 4 * C, C,
                   4 * l + 3);
    residual_forward(m, res3, res2, m->tmp, NC);
  }
  layernorm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, m->res3 + (size_t)(L - 1) * NC, P(m, LNFW), P(m, LNFB), N);
  /* the output head: logits = lnf wte^T, the embedding's weights used a second time */
  CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, N, V, C, 1.0f,
                 m->lnf, tl, C, P(m, WTE), low, C, 0.0f, m->logits, m->t.logits, V));
  /* softmax cross-entropy: a black-list op, so the logits are cast to f32 first */
  CHECK(amp_convert(m->probs, AMP_F32, m->logits, m->t.logits, (size_t)N * V));
  for (i = 0; i < N; i++) {
    float *p = m->probs + (size_t)i * V, mx = p[0], sum = 0.0f;
    for (j = 1; j < V; j++) if (p[j] > mx) mx = p[j];
    for (j = 0; j < V; j++) { p[j] = expf(p[j] - mx); sum += p[j]; }
    for (j = 0; j < V; j++) p[j] /= sum;
    loss += -log((double)p[m->targets[i]] + 1e-30);
  }
  return loss / N;
}

// ----------------------------------------------------------------------------------------------
// the backward pass, the same ops in reverse

/* Backward of y = x W^T + b, given dy: dW = dy^T x and db = the column sums of dy (both rounded
   once to the grads' type), and dx = dy W (in x's type). With fp8 (linear k), dy is cast to E5M2
   and both products read fp8: dW from dy's and the forward's kept E4M3 x, dx from dy's and W cast
   again at its scale (the same codes as the forward's: the scale moves only at the update). */
static void linear_backward(const gpt *m, void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                            int N, int in, int out, int k) {
  amp_dtype tl = m->t.lin, low = m->t.low;
  int i, j;
  CHECK(amp_convert(m->wide, AMP_F32, dy, tl, (size_t)N * out));
  for (j = 0; j < out; j++) {   /* each column's sum, over the rows in order */
    float s = 0.0f;
    for (i = 0; i < N; i++) s += m->wide[(size_t)i * out + j];
    m->wide2[j] = s;
  }
  CHECK(amp_convert(db, low, m->wide2, AMP_F32, (size_t)out));
  if (m->fp8) {
    size_t ix = (size_t)k * FP8_PER_LINEAR + FP8_X, iw = (size_t)k * FP8_PER_LINEAR + FP8_W,
           idy = (size_t)k * FP8_PER_LINEAR + FP8_DY;
    amp_gemm_opts o;
    memset(&o, 0, sizeof o);
    fp8_cast(m, m->dyq, idy, dy, tl, (size_t)N * out, 1);
    fp8_cast(m, m->wq, iw, W, low, (size_t)out * in, 0);
    o.a_scale_inv = amp_fp8_scaler_scale_inv_ptr(m->fp8, idy);
    o.b_scale_inv = amp_fp8_scaler_scale_inv_ptr(m->fp8, ix);
    CHECK(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, out, in, N, 1.0f,
                      m->dyq, AMP_E5M2, out, fp8_x(m, k), AMP_E4M3, in, 0.0f, dW, low, in, &o));
    o.b_scale_inv = amp_fp8_scaler_scale_inv_ptr(m->fp8, iw);
    CHECK(amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, N, in, out, 1.0f,
                      m->dyq, AMP_E5M2, out, m->wq, AMP_E4M3, in, 0.0f, dx, tl, in, &o));
    (void)x;
    return;
  }
  CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, out, in, N, 1.0f,
                 dy, tl, out, x, tl, in, 0.0f, dW, low, in));
  CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, N, in, out, 1.0f,
                 dy, tl, out, W, low, in, 0.0f, dx, tl, in));
}

/* Backward of the layer norm: adds its input's grad into dx (the residual stream's grad, f32)
   and writes the gain's and the bias's grads (summed over the rows in f32, rounded once). */
static void layernorm_backward(gpt *m, float *dx, void *dw, void *db, const void *dout, const float *x,
                               const void *w, const float *mean, const float *rstd, int N) {
  int C = m->c.C, i, j;
  float *gw = m->wgrad_f32, *gb = m->wgrad_f32 + C, *df = m->wide, *wf = m->wide2;   /* dout and the gain in f32 */
  CHECK(amp_convert(df, AMP_F32, dout, m->t.lin, (size_t)N * C));
  CHECK(amp_convert(wf, AMP_F32, w, m->t.low, (size_t)C));
  for (j = 0; j < 2 * C; j++) m->wgrad_f32[j] = 0.0f;
  for (i = 0; i < N; i++) {
    const float *xi = x + (size_t)i * C, *di = df + (size_t)i * C;
    float dmean = 0.0f, dnormmean = 0.0f;
    for (j = 0; j < C; j++) {
      float norm = (xi[j] - mean[i]) * rstd[i], d = di[j];
      float dnorm = wf[j] * d;
      dmean += dnorm; dnormmean += dnorm * norm;
      gw[j] += d * norm; gb[j] += d;
    }
    dmean /= (float)C; dnormmean /= (float)C;
    for (j = 0; j < C; j++) {
      float norm = (xi[j] - mean[i]) * rstd[i], d = di[j];
      float dnorm = wf[j] * d;
      dx[(size_t)i * C + j] += (dnorm - dmean - norm * dnormmean) * rstd[i];
    }
  }
  CHECK(amp_convert(dw, m->t.low, gw, AMP_F32, (size_t)C));
  CHECK(amp_convert(db, m->t.low, gb, AMP_F32, (size_t)C));
}

/* Backward of the attention: dy (N x C) gives dqkv (N x 3C). Per sequence and head, with W the
   weights: dW = dy v^T, dv = W^T dy, then through the softmax dS = W * (dW - rowsum(W * dW)),
   and dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs). */
static void attention_backward(gpt *m, void *dqkv, const void *dy, const void *att, const void *qkv) {
  int B = m->B, T = m->c.T, C = m->c.C, H = m->c.H, hs = C / H, b, h, i, j;
  amp_dtype tl = m->t.lin, ta = m->t.att;
  float alpha = 1.0f / sqrtf((float)hs), *wf = m->wide, *dPf = m->wide2;   /* the weights and dP in f32 */
  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++) {
      size_t row0 = (size_t)b * T, hoff = (size_t)h * hs;
      const void *q = at(qkv, tl, row0 * 3 * C + hoff), *k = at(qkv, tl, row0 * 3 * C + C + hoff),
                 *v = at(qkv, tl, row0 * 3 * C + 2 * (size_t)C + hoff), *dyh = at(dy, tl, row0 * C + hoff);
      const void *w = at(att, ta, ((size_t)b * H + h) * T * T);
      void *dq = at(dqkv, tl, row0 * 3 * C + hoff), *dk = at(dqkv, tl, row0 * 3 * C + C + hoff),
           *dv = at(dqkv, tl, row0 * 3 * C + 2 * (size_t)C + hoff);
      CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, T, T, hs, 1.0f,
                     dyh, tl, C, v, tl, 3 * C, 0.0f, m->dP, ta, T));
      CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, T, hs, T, 1.0f,
                     w, ta, T, dyh, tl, C, 0.0f, dv, tl, 3 * C));
      CHECK(amp_convert(wf, AMP_F32, w, ta, (size_t)T * T));
      CHECK(amp_convert(dPf, AMP_F32, m->dP, ta, (size_t)T * T));
      for (i = 0; i < T; i++) {   /* the softmax's backward, in f32: row i of dP becomes row i of dS */
        const float *wr = wf + (size_t)i * T;
        float *r = dPf + (size_t)i * T, dot = 0.0f;
        for (j = 0; j <= i; j++) dot += wr[j] * r[j];
        for (j = 0; j < T; j++) r[j] = j <= i ? wr[j] * (r[j] - dot) : 0.0f;
      }
      CHECK(amp_convert(m->dS, ta, dPf, AMP_F32, (size_t)T * T));
      CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, T, hs, T, alpha,
                     m->dS, ta, T, k, tl, 3 * C, 0.0f, dq, tl, 3 * C));
      CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, T, hs, T, alpha,
                     m->dS, ta, T, q, tl, 3 * C, 0.0f, dk, tl, 3 * C));
    }
}

/* The backward pass of the mean loss multiplied by `scale`: every grad comes out scaled, in the
   type the forward pass gave its tensor; the weights' grads land in m->grads (type low). */
static void gpt_backward(gpt *m, float scale) {
  int B = m->B, T = m->c.T, C = m->c.C, L = m->c.L, V = m->c.V, H = m->c.H, N = B * T, i, j, l;
  size_t NC = (size_t)N * C, k;
  amp_dtype low = m->t.low, tl = m->t.lin;
  float g = scale / (float)N;
  /* the loss: d logits = (softmax - onehot) / N, times the loss scale, rounded once */
  for (i = 0; i < N; i++)
    for (j = 0; j < V; j++)
      m->wide[(size_t)i * V + j] = (m->probs[(size_t)i * V + j] - (j == m->targets[i] ? 1.0f : 0.0f)) * g;
  CHECK(amp_convert(m->dlogits, m->t.logits, m->wide, AMP_F32, (size_t)N * V));
  /* the head: d wte = dlogits^T lnf (the embedding adds its part at the end), d lnf = dlogits wte */
  CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, V, C, N, 1.0f,
                 m->dlogits, m->t.logits, V, m->lnf, tl, C, 0.0f, G(m, WTE), low, C));
  CHECK(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, N, C, V, 1.0f,
                 m->dlogits, m->t.logits, V, P(m, WTE), low, C, 0.0f, m->dln, tl, C));
  for (k = 0; k < NC; k++) m->dres[k] = 0.0f;
  layernorm_backward(m, m->dres, G(m, LNFW), G(m, LNFB), m->dln, m->res3 + (size_t)(L - 1) * NC, P(m, LNFW),
                     m->lnf_mean, m->lnf_rstd, N);
  for (l = L - 1; l >= 0; l--) {
    const float *res_in = l == 0 ? m->x0 : m->res3 + (size_t)(l - 1) * NC, *res2 = m->res2 + l * NC;
    void *ln1 = at(m->ln1, tl, l * NC), *qkv = at(m->qkv, tl, l * NC * 3), *atty = at(m->atty, tl, l * NC);
    void *att = at(m->att, m->t.att, (size_t)l * B * H * T * T);
    void *ln2 = at(m->ln2, tl, l * NC), *fch = at(m->fch, tl, l * NC * 4), *fchg = at(m->fchg, m->t.act, l * NC * 4);
    /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))): the residual passes dres on unchanged; the MLP's
       output grad is dres cast to the projection's type */
    CHECK(amp_convert(m->dout, tl, m->dres, AMP_F32, NC));
    linear_backward(m, m->dfchg, at(G(m, FCPROJW), low, (size_t)l * 4 * C * C), at(G(m, FCPROJB), low, (size_t)l * C),
                    m->dout, fchg, at(P(m, FCPROJW), low, (size_t)l * 4 * C * C), N, 4 * C, C, 4 * l + 3);
    CHECK(amp_convert(m->wide, AMP_F32, fch, tl, NC * 4));   /* GELU's backward, in f32 */
    CHECK(amp_convert(m->wide2, AMP_F32, m->dfchg, m->t.act, NC * 4));
    for (k = 0; k < NC * 4; k++) m->wide[k] = m->wide2[k] * gelu_grad(m->wide[k]);
    CHECK(amp_convert(m->dfch, tl, m->wide, AMP_F32, NC * 4));
    linear_backward(m, m->dln, at(G(m, FCW), low, (size_t)l * 4 * C * C), at(G(m, FCB), low, (size_t)l * 4 * C),
                    m->dfch, ln2, at(P(m, FCW), low, (size_t)l * 4 * C * C), N, C, 4 * C, 4 * l + 2);
    layernorm_backward(m, m->dres, at(G(m, LN2W), low, (size_t)l * C), at(G(m, LN2B), low, (size_t)l * C), m->dln, res2,
                       at(P(m, LN2W), low, (size_t)l * C), m->ln2_mean + (size_t)l * N, m->ln2_rstd + (size_t)l * N, N);
    /* res2 = res_in + attproj(attention(qkv(ln1(res_in)))) */
    CHECK(amp_convert(m->dout, tl, m->dres, AMP_F32, NC));
    linear_backward(m, m->datty, at(G(m, ATTPROJW), low, (size_t)l * C * C), at(G(m, ATTPROJB), low, (size_t)l * C),
                    m->dout, atty, at(P(m, ATTPROJW), low, (size_t)l * C * C), N, C, C, 4 * l + 1);
    attention_backward(m, m->dqkv, m->datty, att, qkv);
    linear_backward(m, m->dln, at(G(m, QKVW), low, (size_t)l * 3 * C * C), at(G(m, QKVB), low, (size_t)l * 3 * C),
                    m->dqkv, ln1, at(P(m, QKVW), low, (size_t)l * 3 * C * C), N, C, 3 * C, 4 * l);
    layernorm_backward(m, m->dres, at(G(m, LN1W), low, (size_t)l * C), at(G(m, LN1B), low, (size_t)l * C), m->dln, res_in,
                       at(P(m, LN1W), low, (size_t)l * C), m->ln1_mean + (size_t)l * N, m->ln1_rstd + (size_t)l * N, N);
  }
  /* the embeddings: each row's grad goes to its token's row of wte and its position's row of
     wpe, summed in f32 and rounded once (wte adds this to the head's part) */
  memset(m->demb_f32, 0, sizeof(float) * (size_t)(V + T) * C);
  for (i = 0; i < N; i++)
    for (j = 0; j < C; j++) {
      float d = m->dres[(size_t)i * C + j];
      m->demb_f32[(size_t)m->tokens[i] * C + j] += d;
      m->demb_f32[((size_t)V + (size_t)(i % T)) * C + j] += d;
    }
  CHECK(amp_convert(m->wide, AMP_F32, G(m, WTE), low, (size_t)V * C));
  for (k = 0; k < (size_t)V * C; k++) m->wide[k] += m->demb_f32[k];
  CHECK(amp_convert(G(m, WTE), low, m->wide, AMP_F32, (size_t)V * C));
  CHECK(amp_convert(G(m, WPE), low, m->demb_f32 + (size_t)V * C, AMP_F32, (size_t)T * C));
}

// ----------------------------------------------------------------------------------------------
// batches: B windows of T + 1 bytes (inputs and the next byte as targets)

static void load_batch(gpt *m, const text *tx, const size_t *starts) {
  int b, t, T = m->c.T;
  for (b = 0; b < m->B; b++)
    for (t = 0; t < T; t++) {
      m->tokens[b * T + t] = tx->bytes[starts[b] + (size_t)t];
      m->targets[b * T + t] = tx->bytes[starts[b] + (size_t)t + 1];
    }
}

/* A training batch: random windows of the training split, from the data's own RNG stream (the
   same batches in the same order for every precision). */
static void train_batch(gpt *m, const text *tx, uint64_t *rng) {
  size_t starts[512], span = tx->n_train - (size_t)m->c.T - 1;
  int b;
  for (b = 0; b < m->B; b++) starts[b] = (size_t)(rng_next(rng) % span);
  load_batch(m, tx, starts);
}

/* The validation loss: `batches` batches of windows spread evenly over the validation split. */
static double validation_loss(gpt *m, const text *tx, int batches) {
  size_t starts[512], first = tx->n_train, span = tx->n - tx->n_train - (size_t)m->c.T - 1;
  int i, b, nw = batches * m->B;
  double sum = 0.0;
  for (i = 0; i < batches; i++) {
    for (b = 0; b < m->B; b++) starts[b] = first + span * (size_t)(i * m->B + b) / (size_t)nw;
    load_batch(m, tx, starts);
    sum += gpt_forward(m);
  }
  return sum / batches;
}

// ----------------------------------------------------------------------------------------------
// one training run

typedef struct {
  gpt_config c;
  int B, steps, warmup, eval_every, val_batches;
  float lr, min_lr, weight_decay, clip;
  float f16_init_scale;              /* 0: PyTorch's 65536 */
  uint64_t seed;
  int quiet;                         /* --bench: no progress lines */
} options;

typedef struct {
  const char *name;
  amp_dtype low;
  double val_loss, ms_per_step;
  long skipped, updates;
  float final_scale;
  int nonfinite;                     /* a loss (training or validation) was inf or NaN */
  size_t b_copy, b_master;           /* bytes per parameter: the model copy, the master */
  double b_moments;                  /* the moments' bytes per parameter (amp_optimizer_state_bytes) */
  float *train;                      /* the training loss of every step */
  float *val; int *val_step; int n_val;
  /* fp8: the scales' behaviour, from the scaler's telemetry (amp_fp8_scaler_stats after each update) */
  int fp8;
  long fp8_sat_steps;                /* steps in which some cast saturated (a value beyond fmax at its scale) */
  double fp8_flushed[FP8_PER_LINEAR], fp8_cast[FP8_PER_LINEAR];   /* elements flushed to 0 and cast, x / W / dy */
} result;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Linear warmup, then a cosine from lr down to min_lr at the last step. */
static float lr_at(const options *o, int step) {
  float progress;
  if (step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
  progress = (float)(step - o->warmup) / (float)(o->steps - o->warmup > 1 ? o->steps - o->warmup - 1 : 1);
  return o->min_lr + 0.5f * (o->lr - o->min_lr) * (1.0f + cosf(3.14159265f * progress));
}

/* f16 needs the dynamic loss scale (PyTorch's GradScaler rule); bf16 and f32 have f32's range and
   take no scaler at all: amp_optimizer_step. */
static amp_scaler_config f16_scaler_config(float f16_init_scale) {
  amp_scaler_config s = amp_scaler_preset(AMP_PRESET_PYTORCH);
  if (f16_init_scale > 0) s.init_scale = f16_init_scale;
  return s;
}

/* AdamW over every tensor of the model copy, with one global clip over all of their grads. GPT-2
   decays only the matrices (param_is_matrix): the 1-D tensors (norm gains and biases) go into a
   second param group with no weight decay and the same lr, so one optimizer, and one clip norm,
   still sees every grad. */
static void optimizer_create(amp_optimizer **opt, gpt *m, const options *o, int master_mode, int moments) {
  amp_optim_config oc = amp_optimizer_defaults(AMP_ADAMW);   /* every default; a 0 written below is 0 */
  int p, no_decay;
  oc.lr = o->lr; oc.beta1 = 0.9f; oc.beta2 = 0.95f; oc.eps = 1e-8f;
  oc.seed = o->seed;                                          /* AMP_MASTER_NONE's stochastic rounding */
  oc.weight_decay = o->weight_decay; oc.max_grad_norm = o->clip;   /* group 0: the matrices */
  CHECK(amp_optimizer_create(opt, amp_cpu(), &oc));
  CHECK(amp_optimizer_add_group(*opt, 1.0f, 0.0f, &no_decay));
  for (p = 0; p < NPARAM; p++) {
    amp_tensor_desc t;
    memset(&t, 0, sizeof t);
    t.weights = P(m, p); t.dtype = m->t.low;
    t.grads = G(m, p); t.grad_dtype = m->t.low;
    t.n = m->n[p];
    t.group = param_is_matrix[p] ? 0 : no_decay;
    t.master_mode = master_mode;   /* AMP_MASTER_F32, or (bf16 only) SPLIT or NONE */
    t.stochastic = master_mode == AMP_MASTER_NONE;   /* NONE rounds every update stochastically */
    t.moments = moments;           /* AMP_MOMENTS_F32, or AMP_MOMENTS_8BIT */
    CHECK(amp_optimizer_add_tensor(*opt, &t));
  }
}

static void train(const char *name, amp_dtype low, int master_mode, int moments, int fp8, const text *tx,
                  const float *w0, const options *o, result *r) {
  gpt_types types = gpt_decide(low);
  amp_scaler_config scfg = f16_scaler_config(o->f16_init_scale);
  amp_scaler *sc = NULL;   /* f16 only */
  amp_optimizer *opt;
  long skipped = 0;        /* bf16 and fp32: the steps amp_optimizer_step skipped */
  gpt m;
  uint64_t data_rng = o->seed * 0x100000001b3ull + 11;
  double t_train = 0.0;
  int step;
  memset(r, 0, sizeof *r);
  r->name = name; r->low = low;
  r->train = (float *)xcalloc((size_t)o->steps, sizeof(float));
  r->val = (float *)xcalloc((size_t)o->steps / (size_t)o->eval_every + 2, sizeof(float));
  r->val_step = (int *)xcalloc((size_t)o->steps / (size_t)o->eval_every + 2, sizeof(int));
  gpt_init(&m, &o->c, &types, o->B, w0, fp8);
  r->fp8 = fp8;
  if (low == AMP_F16) CHECK(amp_scaler_create(&sc, amp_cpu(), &scfg));
  optimizer_create(&opt, &m, o, master_mode, moments);
  if (!o->quiet)
    printf("%-5s matmuls %s, layer norms/softmax/loss/residual f32; %s%s%s\n", name,
           fp8 ? "fp8 in the block linears (E4M3 x and W, E5M2 grads, delayed scaling), bf16 in the rest" : dtype_name(types.lin),
           sc ? "dynamic loss scale (PyTorch preset)" : "no loss scale (amp_optimizer_step)",
           master_mode == AMP_MASTER_SPLIT ? "; split master (bf16 weights + 2-byte remainder)"
           : master_mode == AMP_MASTER_NONE ? "; no master (bf16 updated in place, stochastic rounding)" : "",
           moments == AMP_MOMENTS_8BIT ? "; 8-bit moments (blockwise, 256 per absmax)" : "");
  for (step = 0; step <= o->steps; step++) {
    double t0, loss;
    float scale;
    if (step % o->eval_every == 0 || step == o->steps) {
      double v = validation_loss(&m, tx, o->val_batches);
      r->val[r->n_val] = (float)v; r->val_step[r->n_val++] = step;
      if (!isfinite(v)) r->nonfinite = 1;
      char train_loss[32] = "     -";   /* the mean training loss since the last validation */
      if (step > 0) {
        double sum = 0.0;
        int from = r->val_step[r->n_val - 2], k;
        for (k = from; k < step; k++) sum += r->train[k];
        snprintf(train_loss, sizeof train_loss, "%.4f", sum / (step - from));
      }
      {
        char scale_now[32] = "none";
        if (sc) snprintf(scale_now, sizeof scale_now, "%g", (double)amp_scaler_get_scale(sc));
        if (!o->quiet)
          printf("%-5s step %5d/%d  val loss %.4f  train loss %s  lr %.2e  scale %-8s skipped %ld\n", name, step, o->steps, v,
                 train_loss, (double)lr_at(o, step < o->steps ? step : o->steps - 1), scale_now,
                 sc ? amp_scaler_skipped_steps(sc) : skipped);
      }
      fflush(stdout);
      r->val_loss = v;
    }
    if (step == o->steps) break;
    t0 = now();
    train_batch(&m, tx, &data_rng);
    scale = sc ? amp_scaler_get_scale(sc) : 1.0f;
    m.fp8_record = 1;   /* fp8: this step's casts record their amax */
    loss = gpt_forward(&m);
    gpt_backward(&m, scale);
    m.fp8_record = 0;
    CHECK(amp_optimizer_set_lr(opt, lr_at(o, step)));
    if (sc) {
      /* f16: unscale, skip the step if a grad overflowed, else clip and update the fp32 master
         and write the rounded model copy; then the scale rule. */
      CHECK(amp_scaler_step(sc, opt));
      CHECK(amp_scaler_update(sc));
    } else {
      /* bf16, fp32: the grads are unscaled; the same pass finds inf/NaN (the step is then skipped)
         and the norm for the clip, then the update. */
      CHECK(amp_optimizer_step(opt));
      skipped += amp_optimizer_last_skipped(opt);
    }
    if (m.fp8) {   /* the delayed recipe: this step's amaxes into the histories, next step's scales */
      size_t i, n_fp8 = 4 * (size_t)o->c.L * FP8_PER_LINEAR;
      long sat = 0;
      CHECK(amp_fp8_scaler_update(m.fp8));
      for (i = 0; i < n_fp8; i++) {
        amp_fp8_stats st8;
        CHECK(amp_fp8_scaler_stats(m.fp8, i, &st8));
        sat += (long)st8.saturated;
        r->fp8_flushed[i % FP8_PER_LINEAR] += (double)st8.flushed;
        r->fp8_cast[i % FP8_PER_LINEAR] += (double)st8.n;
      }
      r->fp8_sat_steps += sat > 0;
    }
    t_train += now() - t0;
    r->train[step] = (float)loss;
    if (!isfinite(loss)) r->nonfinite = 1;
  }
  r->ms_per_step = 1e3 * t_train / o->steps;
  r->skipped = sc ? amp_scaler_skipped_steps(sc) : skipped;
  r->updates = amp_optimizer_step_count(opt);
  r->final_scale = sc ? amp_scaler_get_scale(sc) : 0.0f;   /* 0: no scaler */
  r->b_copy = amp_dtype_size(low);
  /* the fp32 master: 4 bytes; split: the 2-byte remainder beside the bf16 weights; none: 0 */
  r->b_master = master_mode == AMP_MASTER_SPLIT ? 2 : master_mode == AMP_MASTER_NONE ? 0 : sizeof(float);
  /* AdamW's two moments as kept: what the optimizer keeps beyond the master, per parameter */
  r->b_moments = (double)amp_optimizer_state_bytes(opt) / (double)m.n_params - (double)r->b_master;
  amp_optimizer_destroy(opt);
  amp_scaler_destroy(sc);
  gpt_free(&m);
  if (!o->quiet) printf("\n");
}

// ----------------------------------------------------------------------------------------------
// the loss curves as an SVG (hand-written, no dependencies)

/* The training loss of steps [i, i + win), averaged. */
static double train_mean(const result *r, int i, int win) {
  double s = 0.0;
  int j;
  for (j = 0; j < win; j++) s += r->train[i + j];
  return s / win;
}

/* The y axis spans the losses from the second validation on (the first minutes of training fall
   from 5.5 so fast that a full axis would hide the gaps between the precisions): what is above
   runs off the top of the plot. */
static void write_svg(const char *path, const result *rs, int nr, int steps, const char *data_name) {
  static const char *colors[] = { "#222222", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#ff7f0e" };
  FILE *f = fopen(path, "w");
  const double W = 720, H = 420, x0 = 60, y0 = 30, pw = 620, ph = 320;
  double lo = 1e30, hi = -1e30;
  int i, k, win = steps / 100 > 1 ? steps / 100 : 1;
  if (!f) { fprintf(stderr, "train_gpt: cannot write %s\n", path); return; }
  for (k = 0; k < nr; k++) {
    for (i = 0; i < rs[k].n_val; i++) {
      double v = rs[k].val[i];
      if (!isfinite(v) || (i == 0 && rs[k].n_val > 2)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    for (i = 0; i + win <= steps; i += win) {
      double v = train_mean(&rs[k], i, win);
      if (isfinite(v) && rs[k].n_val > 2 && i >= rs[k].val_step[1] && v < lo) lo = v;
    }
  }
  if (!(hi > lo)) { lo = 0; hi = 6; }
  lo = floor(lo * 10) / 10; hi = ceil(hi * 10) / 10;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
  fprintf(f, "<defs><clipPath id=\"plot\"><rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\"/></clipPath></defs>\n", x0, y0, pw, ph);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%g\" y=\"18\" font-size=\"14\">GPT on %s: validation loss (thick), training loss (thin)</text>\n", x0, data_name);
  fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n", x0, y0, pw, ph);
  for (i = 0; i <= 4; i++) {
    double x = x0 + pw * i / 4, v = lo + (hi - lo) * i / 4, y = y0 + ph - ph * i / 4;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#eee\"/>"
               "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n", x, y0, x, y0 + ph, x, y0 + ph + 16, steps * i / 4);
    fprintf(f, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n", x0 - 6, y + 4, v);
  }
  fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">step</text>\n", x0 + pw / 2, y0 + ph + 34);
  fprintf(f, "<g clip-path=\"url(#plot)\">\n");
  for (k = 0; k < nr; k++) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-opacity=\"0.4\" stroke-width=\"1\" points=\"", colors[k % (int)(sizeof colors / sizeof colors[0])]);
    for (i = 0; i + win <= steps; i += win) {
      double v = train_mean(&rs[k], i, win);
      if (isfinite(v)) fprintf(f, "%.1f,%.1f ", x0 + pw * (i + win) / steps, y0 + ph - ph * (v - lo) / (hi - lo));
    }
    fprintf(f, "\"/>\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" points=\"", colors[k % (int)(sizeof colors / sizeof colors[0])]);
    for (i = 0; i < rs[k].n_val; i++)
      if (isfinite(rs[k].val[i]))
        fprintf(f, "%.1f,%.1f ", x0 + pw * rs[k].val_step[i] / steps, y0 + ph - ph * (rs[k].val[i] - lo) / (hi - lo));
    fprintf(f, "\"/>\n");
  }
  fprintf(f, "</g>\n");
  for (k = 0; k < nr; k++)
    fprintf(f, "<text x=\"%g\" y=\"%g\" fill=\"%s\">%s: validation loss %.4f</text>\n",
            x0 + pw - 200, y0 + 20 + 16 * k, colors[k % (int)(sizeof colors / sizeof colors[0])], rs[k].name, rs[k].val_loss);
  fprintf(f, "</svg>\n");
  fclose(f);
}

// ----------------------------------------------------------------------------------------------
// the gradient check: the backward pass against finite differences of the forward (fp32)

/* A tiny model with random weights (larger than GPT-2's init, so every path carries a grad worth
   measuring): for a sample of elements of every tensor, the central difference
   (loss(w + h) - loss(w - h)) / 2h against the backward's grad. Returns the number of tensors whose
   largest error exceeds 0.2% of their largest grad. */
static int gradcheck(const text *tx, uint64_t seed) {
  gpt_config c = { 256, 8, 16, 2, 2 };
  gpt_types t = gpt_decide(AMP_F32);
  gpt m;
  size_t total, i, starts[2];
  float *w0 = init_weights(&c, seed, &total), *grad, *w;
  uint64_t rng = seed ^ 0xabcdefull;
  int p, bad = 0, s;
  const float h = 1e-2f;
  gpt_init(&m, &c, &t, 2, w0, 0);
  for (p = 0; p < NPARAM; p++) {   /* norm gains 1 + N(0, 0.1), everything else N(0, 0.1) */
    int gain = p == LN1W || p == LN2W || p == LNFW;
    for (i = 0; i < m.n[p]; i++) ((float *)m.params)[m.off[p] + i] = (gain ? 1.0f : 0.0f) + 0.1f * rng_normal(&rng);
  }
  starts[0] = 0; starts[1] = tx->n_train / 2;
  load_batch(&m, tx, starts);
  gpt_forward(&m);
  gpt_backward(&m, 1.0f);
  grad = (float *)xcalloc(m.n_params, sizeof(float));
  memcpy(grad, m.grads, m.n_params * sizeof(float));
  w = (float *)m.params;
  printf("gradient check: GPT V %d T %d C %d L %d H %d, batch 2, fp32; central differences, h = %g\n", c.V, c.T, c.C, c.L, c.H, (double)h);
  printf("%-9s %12s %12s %10s\n", "tensor", "max |grad|", "max |error|", "error/max");
  for (p = 0; p < NPARAM; p++) {
    double gmax = 0.0, emax = 0.0;
    for (s = 0; s < 12; s++) {
      size_t k = m.off[p] + (size_t)(rng_next(&rng) % m.n[p]);
      float keep = w[k];
      double lp, lm, num;
      w[k] = keep + h; lp = gpt_forward(&m);
      w[k] = keep - h; lm = gpt_forward(&m);
      w[k] = keep;
      num = (lp - lm) / (2.0 * h);
      if (fabs(grad[k]) > gmax) gmax = fabs(grad[k]);
      if (fabs(num) > gmax) gmax = fabs(num);
      if (fabs(num - grad[k]) > emax) emax = fabs(num - grad[k]);
    }
    printf("%-9s %12.3e %12.3e %10.4f%s\n", param_name[p], gmax, emax, gmax > 0 ? emax / gmax : 0.0,
           !(emax <= 0.002 * gmax) ? "  -- WRONG" : "");
    bad += !(emax <= 0.002 * gmax) || !(gmax > 0);
  }
  free(grad); free(w0);
  gpt_free(&m);
  return bad;
}

// ----------------------------------------------------------------------------------------------
// the program: options, data, initial weights, one run per precision, the table

/* Bytes per parameter as the table prints them: a whole number as it is, else two decimals. */
static void bytes_str(char *s, size_t cap, double b) {
  double r = floor(b * 100.0 + 0.5) / 100.0;
  if (r == floor(r)) snprintf(s, cap, "%.0f", r);
  else snprintf(s, cap, "%.2f", r);
}

static int train_gpt_main(int argc, char **argv) {
  options o;
  const char *precision = "all", *svg = "train_gpt.svg", *data = NULL;
  enum { NRUNS = 8 };
  static const struct { const char *name; amp_dtype t; int master_mode, moments, fp8; } runs[NRUNS] = {
    { "fp32", AMP_F32, AMP_MASTER_F32, AMP_MOMENTS_F32, 0 }, { "bf16", AMP_BF16, AMP_MASTER_F32, AMP_MOMENTS_F32, 0 },
    { "f16", AMP_F16, AMP_MASTER_F32, AMP_MOMENTS_F32, 0 }, { "bf16-split", AMP_BF16, AMP_MASTER_SPLIT, AMP_MOMENTS_F32, 0 },
    { "bf16-none", AMP_BF16, AMP_MASTER_NONE, AMP_MOMENTS_F32, 0 },
    { "bf16-8bit", AMP_BF16, AMP_MASTER_SPLIT, AMP_MOMENTS_8BIT, 0 },
    { "bf16-none-8bit", AMP_BF16, AMP_MASTER_NONE, AMP_MOMENTS_8BIT, 0 },
    { "fp8", AMP_BF16, AMP_MASTER_F32, AMP_MOMENTS_F32, 1 } };
  double max_gap = -1.0;
  int i, nr = 0, status = 0, do_gradcheck = 0, do_bench = 0;
  result rs[NRUNS];
  text tx;
  float *w0;
  size_t total;

  memset(&o, 0, sizeof o);
  o.c.V = 256; o.c.T = 64; o.c.C = 64; o.c.L = 4; o.c.H = 4;
  o.B = 16; o.steps = 600; o.eval_every = 50; o.val_batches = 8;
  o.lr = 3e-3f; o.weight_decay = 0.1f; o.clip = 1.0f; o.seed = 1;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--gradcheck")) { do_gradcheck = 1; continue; }
    if (!strcmp(a, "--bench")) { do_bench = 1; continue; }
    if (!v) { fprintf(stderr, "train_gpt: %s needs a value (see the top of examples/train_gpt.c)\n", a); return 1; }
    if (!strcmp(a, "--precision")) precision = v;
    else if (!strcmp(a, "--steps")) o.steps = atoi(v);
    else if (!strcmp(a, "--seed")) o.seed = (uint64_t)atoi(v);
    else if (!strcmp(a, "--svg")) svg = v;
    else if (!strcmp(a, "--layers")) o.c.L = atoi(v);
    else if (!strcmp(a, "--dim")) o.c.C = atoi(v);
    else if (!strcmp(a, "--heads")) o.c.H = atoi(v);
    else if (!strcmp(a, "--ctx")) o.c.T = atoi(v);
    else if (!strcmp(a, "--batch")) o.B = atoi(v);
    else if (!strcmp(a, "--lr")) o.lr = (float)atof(v);
    else if (!strcmp(a, "--eval-every")) o.eval_every = atoi(v);
    else if (!strcmp(a, "--data")) data = v;
    else if (!strcmp(a, "--max-gap")) max_gap = atof(v);
    else if (!strcmp(a, "--init-scale")) o.f16_init_scale = (float)atof(v);
    else { fprintf(stderr, "train_gpt: unknown option %s\n", a); return 1; }
    i++;
  }
  if (o.steps < 1 || o.c.L < 1 || o.c.H < 1 || o.c.C < o.c.H || o.c.C % o.c.H || o.c.T < 2 || o.c.T > 1024 ||
      o.B < 1 || o.B > 512 || o.eval_every < 1 || !(o.lr > 0))
    die("need --steps >= 1, --layers >= 1, --dim a multiple of --heads, 2 <= --ctx <= 1024, 1 <= --batch <= 512, --eval-every >= 1, --lr > 0");
  for (i = 0; i < NRUNS && strcmp(precision, "all") && strcmp(precision, runs[i].name); i++) {}
  if (i == NRUNS) die("--precision must be fp32, bf16, f16, bf16-split, bf16-none, bf16-8bit, bf16-none-8bit, fp8 or all");
  o.warmup = o.steps / 20 > 0 ? o.steps / 20 : 1;
  o.min_lr = o.lr / 10;

  text_load(&tx, data);
  printf("data: %s, %zu bytes (%zu train, %zu validation)\n", tx.name, tx.n, tx.n_train, tx.n - tx.n_train);
  if (tx.n - tx.n_train < (size_t)o.c.T + 2) die("the validation split is shorter than one context: use a smaller --ctx");

  if (do_gradcheck) {
    int bad = gradcheck(&tx, o.seed);
    printf(bad ? "gradient check: %d tensor(s) WRONG\n" : "gradient check: every tensor's grads match the finite differences to 0.2%%\n", bad);
    free(tx.bytes);
    return bad ? 1 : 0;
  }
  if (do_bench) { o.steps = 10; o.eval_every = 1000; o.val_batches = 1; o.quiet = 1; }

  w0 = init_weights(&o.c, o.seed, &total);
  if (!do_bench) printf("GPT: vocabulary %d (bytes), context %d, width %d, %d layers, %d heads: %zu parameters\n",
         o.c.V, o.c.T, o.c.C, o.c.L, o.c.H, total);
  if (!do_bench)
    printf("AdamW lr %g (warmup %d, cosine to %g), betas 0.9 0.95, weight decay %g (matrices only), clip %g; batch %d x %d tokens, %d steps, seed %d\n\n",
           (double)o.lr, o.warmup, (double)o.min_lr, (double)o.weight_decay, (double)o.clip, o.B, o.c.T, o.steps, (int)o.seed);
  else
    printf("GPT %zu parameters (make gpt's model), batch %d x %d tokens, 10 steps per precision; ms per training step, one thread\n",
           total, o.B, o.c.T);

  for (i = 0; i < NRUNS; i++) {
    if (strcmp(precision, "all") && strcmp(precision, runs[i].name)) continue;
    train(runs[i].name, runs[i].t, runs[i].master_mode, runs[i].moments, runs[i].fp8, &tx, w0, &o, &rs[nr]);
    nr++;
  }

  if (do_bench) {
    for (i = 0; i < nr; i++) {   /* bench.h's line: name, ours, reference, ratio (here fp32 / ours: > 1 is faster) */
      char label[64];
      snprintf(label, sizeof label, i ? "gpt_step_%s vs fp32" : "gpt_step_%s", rs[i].name);
      if (i) printf("%-44s %10.2f %10.2f %7.3fx  %s\n", label, rs[i].ms_per_step, rs[0].ms_per_step,
                    rs[0].ms_per_step / rs[i].ms_per_step, "ms per step (ratio: fp32 / this, > 1 = faster)");
      else printf("%-44s %10.2f %10s %8s  %s\n", label, rs[i].ms_per_step, "-", "-", "ms per step");
    }
  } else {
    printf("%-14s %9s %8s %8s %12s %10s   %s\n", "precision", "val loss", "vs fp32", "skipped", "final scale", "ms / step",
           "bytes / param (copy + master + moments)");
    for (i = 0; i < nr; i++) {
      char gap[32] = "";
      if (i > 0 && !strcmp(rs[0].name, "fp32")) snprintf(gap, sizeof gap, "%+.2f%%", 100.0 * (rs[i].val_loss / rs[0].val_loss - 1.0));
      char scale[32] = "none";
      if (rs[i].final_scale > 0.0f) snprintf(scale, sizeof scale, "%g", (double)rs[i].final_scale);
      char mom[32], sum[32];
      bytes_str(mom, sizeof mom, rs[i].b_moments);
      bytes_str(sum, sizeof sum, (double)(rs[i].b_copy + rs[i].b_master) + rs[i].b_moments);
      printf("%-14s %9.4f %8s %8ld %12s %10.1f   %zu + %zu + %s = %s\n", rs[i].name, rs[i].val_loss, gap, rs[i].skipped,
             scale, rs[i].ms_per_step, rs[i].b_copy, rs[i].b_master, mom, sum);
    }
    printf("\n");
    for (i = 0; i < nr; i++) {
      if (rs[i].nonfinite) { printf("%s: a loss was inf or NaN\n", rs[i].name); status = 3; }
      if (rs[i].skipped + rs[i].updates != o.steps) {
        printf("%s: %ld skipped + %ld updates != %d steps\n", rs[i].name, rs[i].skipped, rs[i].updates, o.steps);
        status = 4;
      }
      if (rs[i].low == AMP_F16)
        printf("f16: %ld of %d steps skipped (grads overflowed at the loss scale), %ld updates applied\n", rs[i].skipped, o.steps, rs[i].updates);
      if (rs[i].fp8) {
        const double *fl = rs[i].fp8_flushed, *nc = rs[i].fp8_cast;
        printf("fp8: %ld of %d steps had a cast that saturated (a value past fmax at its delayed scale); flushed to 0: "
               "%.3f%% of inputs, %.3f%% of weights, %.3f%% of output grads\n", rs[i].fp8_sat_steps, o.steps,
               100.0 * fl[FP8_X] / (nc[FP8_X] > 0 ? nc[FP8_X] : 1), 100.0 * fl[FP8_W] / (nc[FP8_W] > 0 ? nc[FP8_W] : 1),
               100.0 * fl[FP8_DY] / (nc[FP8_DY] > 0 ? nc[FP8_DY] : 1));
      }
      if (i > 0 && !strcmp(rs[0].name, "fp32") && max_gap >= 0) {
        double gap = 100.0 * fabs(rs[i].val_loss / rs[0].val_loss - 1.0);
        if (!(gap <= max_gap)) { printf("%s: validation loss %.2f%% from fp32's, more than --max-gap %g\n", rs[i].name, gap, max_gap); if (!status) status = 2; }
      }
    }
    write_svg(svg, rs, nr, o.steps, tx.name);
    printf("loss curves: %s\n", svg);
  }
  for (i = 0; i < nr; i++) { free(rs[i].train); free(rs[i].val); free(rs[i].val_step); }
  free(w0); free(tx.bytes);
  return status;
}

#ifndef TRAIN_GPT_NO_MAIN
int main(int argc, char **argv) { return train_gpt_main(argc, argv); }
#endif
