/* tests/test_moments.c - optimizer moments kept in bf16, in bitsandbytes' blockwise 8 bits or in
   E4M3 with a per-tensor scale (amp_tensor_desc.moments = AMP_MOMENTS_BF16 / _8BIT / _FP8).
   Each kind with moments (Adam, AdamW, SGD with momentum, Lion) in each master mode (F32, SPLIT,
   NONE), with three tensors in two param groups, f32 / bf16 / f16 grads, f32 / bf16 / f16 model
   copies, clipping, gradient stats, a bf16 copy rounded to nearest or stochastically, is checked bit
   for bit against a reference written here: the f32 step of the kind from its formulas on the
   decoded moments, then the moments encoded again (bf16 to nearest even, or stochastically with the
   moment streams of the documented key; 8-bit blockwise with the dynamic maps built here from their
   description, a tensor under 4096 elements keeping f32; FP8 as TransformerEngine's FusedAdam with
   uint8 moments: each array's scale 448 / amax of the new moments, E4M3 codes to nearest even,
   saturating, from a table of the format built here). Every SIMD level the CPU has gives those
   bits; a skipped (overflow or spike) step leaves every byte as it was; a run resumed from a checkpoint
   equals the straight one; the file holds the moments as kept, and a file moves between moment
   types by the documented rule (decode, encode as a step does); amp_optimizer_state_bytes counts
   the bytes kept; bad moments values are refused naming the function and the value. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <math.h>
#include <string.h>

#define CKPT "build/test/moments.ckpt"
#define CKPT2 "build/test/moments2.ckpt"

static uint64_t rng_state;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static float rndf(void) { return ((float)rnd() / 2147483648.0f) * 2.0f - 1.0f; }   /* [-1, 1) */
static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float of_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static float widen(uint16_t b) { return of_bits((uint32_t)b << 16); }

/* ---- the reference ------------------------------------------------------------------------------ */

/* bf16 to nearest even (no NaN reaches it here) */
static uint16_t rne16(float x) { uint32_t u = bits(x); return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
/* stochastic: 16 random bits added below the kept half */
static uint16_t sr16(float x, uint32_t r) { return (uint16_t)((bits(x) + (r & 0xffffu)) >> 16); }
/* the documented key: splitmix64's finaliser of (seed, update, tensor); element i's 16 bits are field
   i % 4 of the finaliser of counter i / 4; a moment's stream is the tensor's key hashed with the
   moment's number j (1: m, 2: v) */
static uint64_t mix(uint64_t z) {
  z ^= z >> 30; z *= 0xbf58476d1ce4e5b9ull; z ^= z >> 27; z *= 0x94d049bb133111ebull; z ^= z >> 31;
  return z;
}
static uint64_t key_of(uint64_t seed, int64_t t, uint64_t tensor) {
  return mix(mix(seed ^ mix((uint64_t)t + 0x9e3779b97f4a7c15ull)) ^ (tensor * 0xd1b54a32d192ed03ull));
}
static uint64_t key_moment(uint64_t key, int j) { return mix(key + (uint64_t)j * 0xd1b54a32d192ed03ull); }
static uint32_t rbits(uint64_t key, uint64_t i) {
  return (uint32_t)(mix(key + (i / 4 + 1u) * 0x9e3779b97f4a7c15ull) >> (16 * (i % 4))) & 0xffffu;
}

/* The arithmetic as IEEE single operations that no -Ofast build may fuse or reassociate; the
   coefficients' double arithmetic in AMP__EXACT_FP functions (no reciprocal for a division). */
#define MUL amp__fmul
#define ADD amp__fadd
#define SUB amp__fsub
#define DIV amp__fdiv

#define NT 3
#define NMAX 5000
#define NB (NMAX / 256 + 1)
/* the tensors' sizes: bf16 moments: more than one block of the CPU loops (512) in the middle one;
   8-bit: two tensors of at least 4096 elements (the second with a partial last block of 256), and
   one under 4096, which keeps fp32 moments */
static size_t LEN[NT];
static const size_t LEN_BF16[NT] = {37, 700, 19}, LEN_8BIT[NT] = {4100, 5000, 19};
/* FP8: one amax over three blocks of the CPU loops, over two, and a tensor of one element */
static const size_t LEN_FP8[NT] = {1100, 700, 1};
static void set_len(int moments) {
  memcpy(LEN, moments == AMP_MOMENTS_8BIT ? LEN_8BIT : moments == AMP_MOMENTS_FP8 ? LEN_FP8 : LEN_BF16, sizeof LEN);
}

/* bitsandbytes' dynamic map as bitsandbytes describes it (functional.create_dynamic_map): for i = 0..6
   the midpoints of linspace(0.1, 1, 2^i + 1) (signed) or linspace(0.1, 1, 2^(i+1) + 1) (unsigned)
   times 10^(i-6), with both signs for the signed map, plus 0 and 1, sorted; in double, each
   rounded to f32 once. The code of y: the nearest value, a tie going to the lower code. */
static float map8[2][256];   /* 0: signed (first moments), 1: unsigned (Adam's v) */
static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return x < y ? -1 : x > y; }
static void make_maps(void) {
  int sg, i, k;
  for (sg = 0; sg < 2; sg++) {
    int c = 0;
    for (i = 0; i < 7; i++) {
      int pts = sg == 0 ? (1 << i) + 1 : (1 << (i + 1)) + 1;
      double scale = i == 0 ? 1e-6 : i == 1 ? 1e-5 : i == 2 ? 1e-4 : i == 3 ? 1e-3 : i == 4 ? 1e-2 : i == 5 ? 1e-1 : 1.0;
      for (k = 0; k + 1 < pts; k++) {
        double a = 0.1 + 0.9 * (double)k / (double)(pts - 1), b = 0.1 + 0.9 * (double)(k + 1) / (double)(pts - 1);
        double v = scale * ((a + b) / 2.0);
        map8[sg][c++] = (float)v;
        if (sg == 0) map8[sg][c++] = (float)-v;
      }
    }
    map8[sg][c++] = 0.0f; map8[sg][c++] = 1.0f;
    qsort(map8[sg], 256, sizeof(float), cmpf);
  }
}
static uint8_t code_of(int sg, float y) {
  int lo = 0, hi = 255;   /* the last value <= y (or 0), by bisection; then it or the next, the nearer */
  long double dl, dh;
  /* NaN (0 / 0 where a flush-to-zero build flushes a block's subnormal absmax): code 0, as no
     comparison holds; told by its bits, which -ffinite-math-only cannot fold away */
  if ((bits(y) & 0x7fffffffu) > 0x7f800000u) return 0;
  if (y <= map8[sg][0]) return 0;
  while (lo < hi) { int m = (lo + hi + 1) / 2; if (map8[sg][m] <= y) lo = m; else hi = m - 1; }
  if (lo == 255) return 255;
  dl = (long double)y - (long double)map8[sg][lo]; dh = (long double)map8[sg][lo + 1] - (long double)y;
  return (uint8_t)(dh < dl ? lo + 1 : lo);
}
/* E4M3 as its definition gives it: sign, 4 exponent bits (bias 7), 3 mantissa bits, subnormals at
   exponent 0, no infinities, 0x7f / 0xff NaN, largest 448 (0x7e). e4m3_val[c] for c < 0x7f. */
static float e4m3_val[0x7f];
static void make_e4m3(void) {
  int c;
  for (c = 0; c < 0x7f; c++) {
    int e = c >> 3, f = c & 7;
    e4m3_val[c] = e == 0 ? (float)f / 8.0f / 64.0f : (1.0f + (float)f / 8.0f) * ldexpf(1.0f, e - 7);
  }
}
static float e4m3_dec(uint8_t c) { return c & 0x80u ? -e4m3_val[c & 0x7f] : e4m3_val[c]; }
/* y to the nearest code, a tie to the even code; beyond 448 the largest (saturating); -0 keeps its sign */
static uint8_t e4m3_enc(float y) {
  uint8_t sg = bits(y) >> 31 ? 0x80u : 0u;
  long double a = fabsl((long double)y);
  int lo = 0;
  if (a >= 448.0L) return (uint8_t)(sg | 0x7e);
  while (lo + 1 < 0x7f && (long double)e4m3_val[lo + 1] <= a) lo++;
  if (lo + 1 < 0x7f) {
    long double dl = a - e4m3_val[lo], dh = (long double)e4m3_val[lo + 1] - a;
    if (dh < dl || (dh == dl && (lo & 1))) lo++;
  }
  return (uint8_t)(sg | lo);
}
static const float LRS[NT] = {1.0f, 0.5f, 1.0f}, WDS[NT] = {0.0f, 0.2f, 0.0f};   /* tensor 1 in its own group */
#define SEED 29u
#define STEPS 10
#define MID 5
#define OVERFLOW_STEP 3
#define MAXN 1.5f

typedef struct hp { amp_optim_kind kind; float lr, wd, beta1, beta2, eps, momentum; int nesterov; } hp;
static hp hp_of(amp_optim_kind kind) {
  hp h;
  memset(&h, 0, sizeof h);
  h.kind = kind; h.beta1 = 0.9f; h.beta2 = 0.999f; h.eps = 1e-8f;
  if (kind == AMP_ADAM || kind == AMP_ADAMW) { h.lr = 1e-2f; h.wd = 0.05f; }
  if (kind == AMP_SGD) { h.lr = 0.05f; h.wd = 0.01f; h.momentum = 0.9f; h.nesterov = 1; }
  if (kind == AMP_LION) { h.lr = 1e-3f; h.wd = 0.1f; h.beta2 = 0.99f; }
  return h;
}

/* One element's f32 update (torch.optim's formulas, t counted from 1), p the master, m and v the
   moments widened, g the clipped grad; lr and wd the group's. */
AMP__EXACT_BEGIN
static AMP__EXACT_FP void ref_elem(const hp *h, int64_t t, float lr, float wd, float *p, float *m, float *v, float g) {
  if (h->kind == AMP_ADAM || h->kind == AMP_ADAMW) {
    float decay = h->kind == AMP_ADAMW ? (float)(1.0 - (double)lr * (double)wd) : 1.0f;
    float step_size = (float)((double)lr / (1.0 - pow((double)h->beta1, (double)t)));
    float bc2 = (float)sqrt(1.0 - pow((double)h->beta2, (double)t));
    float w = MUL(*p, decay);
    if (h->kind == AMP_ADAM && wd != 0.0f) g = ADD(g, MUL(wd, w));
    *m = ADD(MUL(h->beta1, *m), MUL(SUB(1.0f, h->beta1), g));
    *v = ADD(MUL(h->beta2, *v), MUL(MUL(SUB(1.0f, h->beta2), g), g));
    *p = SUB(w, DIV(MUL(step_size, *m), ADD(DIV(amp__fsqrt(*v), bc2), h->eps)));   /* addcdiv: product, then quotient */
  } else if (h->kind == AMP_SGD) {
    float b;
    if (wd != 0.0f) g = ADD(g, MUL(wd, *p));
    b = t == 1 ? g : ADD(MUL(h->momentum, *m), MUL(1.0f, g));   /* dampening 0 */
    *m = b;
    g = h->nesterov ? ADD(g, MUL(h->momentum, b)) : b;
    *p = SUB(*p, MUL(lr, g));
  } else {   /* Lion */
    float decay = (float)(1.0 - (double)lr * (double)wd);
    float c = ADD(MUL(h->beta1, *m), MUL(SUB(1.0f, h->beta1), g));
    float s = c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : 0.0f;
    *p = SUB(MUL(*p, decay), MUL(lr, s));
    *m = ADD(MUL(h->beta2, *m), MUL(SUB(1.0f, h->beta2), g));
  }
}
AMP__EXACT_END

/* ---- one run: NT tensors, the library beside the reference -------------------------------------- */

typedef struct rig {
  amp_optimizer *o;
  hp h;
  int mode, stoch, nm, moments;
  int64_t t;                                   /* the reference's update count */
  amp_dtype wt[NT], gt[NT];
  int sr[NT], mt[NT];                          /* mt: the type tensor i's moments are kept in */
  unsigned char w[NT][NMAX * 4], g[NT][NMAX * 4];
  float p[NT][NMAX];                           /* the reference master */
  float mf[NT][NMAX], vf[NT][NMAX];            /* the reference moments as a step reads them (decoded) */
  uint16_t m16[NT][NMAX], v16[NT][NMAX];       /* BF16: their words */
  uint8_t mc[NT][NMAX], vc[NT][NMAX];          /* 8BIT, FP8: their codes */
  float ma[NT][NB], va[NT][NB];                /* 8BIT: their blocks' absmaxes; FP8: [0] the scale_inv */
  unsigned char ew[NT][NMAX * 4];              /* the model copy the reference expects */
} rig;

/* 8BIT, written here from the description: per block of 256 the absmax (at least 1e-38, at most
   FLT_MAX), each value over it clamped to [-1, 1], its nearest code; decoded as code value times
   absmax. */
AMP__EXACT_BEGIN
static AMP__EXACT_FP void enc8(int sg, const float *x, size_t n, uint8_t *codes, float *absmax, float *dec) {
  size_t b, j;
  for (b = 0; b < n; b += 256) {
    size_t e = n - b < 256 ? n - b : 256;
    float am = 0.0f;
    /* on the bits, which a flush-to-zero build (-Ofast) reads as written: subnormals included */
    for (j = 0; j < e; j++) if (bits(fabsf(x[b + j])) > bits(am)) am = fabsf(x[b + j]);
    if (bits(am) < bits(1e-38f)) am = 1e-38f;
    if (bits(am) == bits(INFINITY)) am = FLT_MAX;
    absmax[b / 256] = am;
    for (j = 0; j < e; j++) {
      /* a zero stays a zero over an absmax below the least normal float (the division's answer,
         kept where a flush-to-zero build would divide 0 by a flushed 0) */
      float y = (bits(x[b + j]) << 1) == 0u && bits(am) < 0x00800000u ? x[b + j] : DIV(x[b + j], am);
      codes[b + j] = code_of(sg, y > 1.0f ? 1.0f : y < -1.0f ? -1.0f : y);
      dec[b + j] = MUL(map8[sg][codes[b + j]], am);
    }
  }
}
/* FP8, written here from the description: the scale 448 / amax of all n values (1 when amax is 0,
   FLT_MAX where the quotient overflows), each value times the scale to its E4M3 code, decoded as the
   code's value times scale_inv = 1 / scale. */
static AMP__EXACT_FP void encf8(const float *x, size_t n, uint8_t *codes, float *scale_inv, float *dec) {
  float am = 0.0f, sc;
  size_t j;
  for (j = 0; j < n; j++) if (fabsf(x[j]) > am) am = fabsf(x[j]);
  sc = am == 0.0f ? 1.0f : DIV(448.0f, am);
  if (isinf(sc)) sc = FLT_MAX;
  *scale_inv = DIV(1.0f, sc);
  for (j = 0; j < n; j++) {
    codes[j] = e4m3_enc(MUL(x[j], sc));
    dec[j] = MUL(e4m3_dec(codes[j]), *scale_inv);
  }
}
AMP__EXACT_END

/* moments: the type asked for (8BIT: tensors under 4096 elements keep f32). */
static int rig_make(rig *r, amp_optim_kind kind, int mode, int stoch, int moments) {
  amp_optim_config c;
  int groups[NT] = {0, 0, 0}, i;
  size_t j;
  memset(r, 0, sizeof *r);
  r->h = hp_of(kind); r->mode = mode; r->stoch = stoch; r->moments = moments;
  memset(&c, 0, sizeof c);
  c.kind = kind; c.zero_is_zero = 1; c.lr = r->h.lr; c.weight_decay = r->h.wd; c.beta1 = r->h.beta1;
  c.beta2 = r->h.beta2; c.eps = r->h.eps; c.momentum = r->h.momentum; c.nesterov = r->h.nesterov;
  c.max_grad_norm = MAXN; c.seed = SEED; c.stats = 1;
  r->nm = kind == AMP_ADAM || kind == AMP_ADAMW ? 2 : 1;
  if (amp_optimizer_create(&r->o, amp_cpu(), &c) != AMP_OK) return 0;
  if (amp_optimizer_add_group(r->o, LRS[1], WDS[1], &groups[1]) != AMP_OK) return 0;
  rng_state = 42;
  for (i = 0; i < NT; i++) {
    amp_tensor_desc d;
    r->wt[i] = mode == AMP_MASTER_F32 ? (i == 0 ? AMP_F32 : i == 1 ? AMP_BF16 : AMP_F16) : AMP_BF16;
    r->gt[i] = i == 0 ? AMP_BF16 : i == 1 ? AMP_F32 : AMP_F16;
    r->sr[i] = r->wt[i] == AMP_BF16 && (mode == AMP_MASTER_NONE || (mode == AMP_MASTER_F32 && stoch));
    r->mt[i] = moments == AMP_MOMENTS_8BIT && LEN[i] < 4096 ? AMP_MOMENTS_F32 : moments;
    for (j = 0; j < LEN[i]; j++) amp__store(r->w[i], r->wt[i], j, rndf());
    for (j = 0; j < LEN[i]; j++) r->p[i][j] = amp__load(r->w[i], r->wt[i], j);
    memcpy(r->ew[i], r->w[i], sizeof r->ew[i]);
    memset(&d, 0, sizeof d);
    d.weights = r->w[i]; d.dtype = r->wt[i]; d.grads = r->g[i];
    d.grad_dtype = r->gt[i] == AMP_F32 ? AMP_GRAD_F32 : r->gt[i];
    d.n = LEN[i]; d.group = groups[i]; d.stochastic = r->sr[i]; d.master_mode = mode; d.moments = moments;
    if (amp_optimizer_add_tensor(r->o, &d) != AMP_OK) return 0;
  }
  return 1;
}
static void rig_free(rig *r) { amp_optimizer_destroy(r->o); r->o = NULL; }

/* Every byte of the library's state: model copies, masters or remainders, moments, the step count. */
static size_t state_of(const amp_optimizer *o, unsigned char *buf) {
  size_t k = 0, i;
  for (i = 0; i < o->count; i++) {
    size_t n = o->t[i].n, mb = amp__moment_bytes(o->t[i].moments, n);
    memcpy(buf + k, o->t[i].w, n * amp_dtype_size(o->t[i].wtype)); k += n * amp_dtype_size(o->t[i].wtype);
    if (o->t[i].master) { memcpy(buf + k, o->t[i].master, n * 4); k += n * 4; }
    if (o->t[i].rem) { memcpy(buf + k, o->t[i].rem, n * 2); k += n * 2; }
    if (o->t[i].m) { memcpy(buf + k, o->t[i].m, n * 4); k += n * 4; }
    if (o->t[i].v) { memcpy(buf + k, o->t[i].v, n * 4); k += n * 4; }
    if (o->t[i].mq) { memcpy(buf + k, o->t[i].mq, mb); k += mb; }
    if (o->t[i].vq) { memcpy(buf + k, o->t[i].vq, mb); k += mb; }
  }
  memcpy(buf + k, &o->step, sizeof o->step); k += sizeof o->step;
  return k;
}
static size_t snapshot(const rig *r, unsigned char *buf) { return state_of(r->o, buf); }
#define SNAP (NT * NMAX * 24 + 64)

/* Step k's grads (the same for every rig and at every level); at OVERFLOW_STEP an inf. */
static void make_grads(rig *r, int k) {
  int i;
  size_t j;
  rng_state = 1000u + (uint64_t)k * 7919u;
  for (i = 0; i < NT; i++)
    for (j = 0; j < LEN[i]; j++) amp__store(r->g[i], r->gt[i], j, rndf() * (float)(i + 1) * 0.4f);
  if (k == OVERFLOW_STEP) amp__store(r->g[1], r->gt[1], 5, INFINITY);
}

/* The reference's update of every tensor, the clip from the library's norm. */
AMP__EXACT_BEGIN
static AMP__EXACT_FP void ref_step(rig *r) {
  static float nm_[NMAX], nv_[NMAX];
  float norm = amp_optimizer_grad_norm(r->o), clip = 1.0f;
  int i;
  size_t j;
  {
    float cc = MUL(DIV(1.0f, ADD(norm, 1e-6f)), MAXN);   /* clip_grad_norm_: reciprocal, then times max_norm */
    if (cc < 1.0f) clip = cc;
  }
  r->t++;
  for (i = 0; i < NT; i++) {
    uint64_t key = key_of(SEED, r->t, (uint64_t)i);
    float lr = MUL(r->h.lr, LRS[i]), wd = i == 1 ? WDS[1] : r->h.wd;
    for (j = 0; j < LEN[i]; j++) {
      float g = MUL(amp__load(r->g[i], r->gt[i], j), clip);
      nm_[j] = r->mf[i][j]; nv_[j] = r->vf[i][j];
      ref_elem(&r->h, r->t, lr, wd, &r->p[i][j], &nm_[j], &nv_[j], g);
      /* the model copy: NONE rounds the master itself stochastically (and reads it back next step);
         SPLIT's copy is the top half rounded to nearest, ties away; else the copy rounded */
      if (r->mode == AMP_MASTER_NONE) {
        uint16_t wb = sr16(r->p[i][j], rbits(key, j));
        r->p[i][j] = widen(wb);
        memcpy(r->ew[i] + 2 * j, &wb, 2);
      } else if (r->mode == AMP_MASTER_SPLIT) {
        uint16_t wb = (uint16_t)((bits(r->p[i][j]) + 0x8000u) >> 16);
        memcpy(r->ew[i] + 2 * j, &wb, 2);
      } else if (r->sr[i]) {
        uint16_t wb = sr16(r->p[i][j], rbits(key, j));
        memcpy(r->ew[i] + 2 * j, &wb, 2);
      } else if (r->wt[i] == AMP_BF16) {
        uint16_t wb = rne16(r->p[i][j]);
        memcpy(r->ew[i] + 2 * j, &wb, 2);
      } else {
        amp__store(r->ew[i], r->wt[i], j, r->p[i][j]);   /* f32 itself; f16 to nearest even */
      }
    }
    /* the new moments, stored in their type */
    if (r->mt[i] == AMP_MOMENTS_8BIT) {
      enc8(0, nm_, LEN[i], r->mc[i], r->ma[i], r->mf[i]);
      if (r->nm == 2) enc8(1, nv_, LEN[i], r->vc[i], r->va[i], r->vf[i]);
    } else if (r->mt[i] == AMP_MOMENTS_FP8) {
      encf8(nm_, LEN[i], r->mc[i], &r->ma[i][0], r->mf[i]);
      if (r->nm == 2) encf8(nv_, LEN[i], r->vc[i], &r->va[i][0], r->vf[i]);
    } else if (r->mt[i] == AMP_MOMENTS_BF16) {
      for (j = 0; j < LEN[i]; j++) {
        r->m16[i][j] = r->sr[i] ? sr16(nm_[j], rbits(key_moment(key, 1), j)) : rne16(nm_[j]);
        r->v16[i][j] = r->nm < 2 ? 0 : r->sr[i] ? sr16(nv_[j], rbits(key_moment(key, 2), j)) : rne16(nv_[j]);
        r->mf[i][j] = widen(r->m16[i][j]); r->vf[i][j] = widen(r->v16[i][j]);
      }
    } else {
      memcpy(r->mf[i], nm_, LEN[i] * 4); memcpy(r->vf[i], nv_, LEN[i] * 4);
    }
  }
}
AMP__EXACT_END

/* The library's state against the reference's, element by element. */
static int rig_matches(const rig *r, const char *what) {
  int i, bad = 0;
  size_t j;
  for (i = 0; i < NT && !bad; i++) {
    const amp__tensor *t = &r->o->t[i];
    size_t nb = (LEN[i] + 255) / 256;
    if (t->moments != r->mt[i]) { EXPECT(0, "%s: tensor %d keeps moments %d, want %d", what, i, t->moments, r->mt[i]); return 0; }
    for (j = 0; j < LEN[i] && !bad; j++) {
      float mast = t->master ? t->master[j]
                   : t->rem  ? amp__split_decode(((const amp_bf16 *)t->w)[j], t->rem[j])
                             : amp_bf16_to_f32(((const amp_bf16 *)t->w)[j]);
      int ok = bits(mast) == bits(r->p[i][j]) &&
               memcmp((const char *)t->w + j * amp_dtype_size(t->wtype), r->ew[i] + j * amp_dtype_size(t->wtype),
                      amp_dtype_size(t->wtype)) == 0;
      if (r->mt[i] == AMP_MOMENTS_BF16)
        ok = ok && ((const amp_bf16 *)t->mq)[j] == r->m16[i][j] &&
             (r->nm < 2 || ((const amp_bf16 *)t->vq)[j] == r->v16[i][j]);
      else if (r->mt[i] == AMP_MOMENTS_FP8)
        ok = ok && t->mq[4 + j] == r->mc[i][j] && bits(((const float *)t->mq)[0]) == bits(r->ma[i][0]) &&
             (r->nm < 2 || (t->vq[4 + j] == r->vc[i][j] && bits(((const float *)t->vq)[0]) == bits(r->va[i][0])));
      else if (r->mt[i] == AMP_MOMENTS_8BIT)
        ok = ok && t->mq[4 * nb + j] == r->mc[i][j] && bits(((const float *)t->mq)[j / 256]) == bits(r->ma[i][j / 256]) &&
             (r->nm < 2 || (t->vq[4 * nb + j] == r->vc[i][j] && bits(((const float *)t->vq)[j / 256]) == bits(r->va[i][j / 256])));
      else
        ok = ok && bits(t->m[j]) == bits(r->mf[i][j]) && (r->nm < 2 || bits(t->v[j]) == bits(r->vf[i][j]));
      if (!ok) {
        EXPECT(0, "%s: tensor %d elem %zu (update %ld): master %a (reference %a), m %a (reference %a)", what, i, j, (long)r->t,
               (double)mast, (double)r->p[i][j],
               (double)amp__moment_at(r->o, t->moments, 1, t->moments == AMP_MOMENTS_F32 ? (const unsigned char *)t->m : t->mq, LEN[i], j),
               (double)r->mf[i][j]);
        bad = 1;
      }
    }
  }
  return !bad;
}

/* Update k of the run: the library's step, or, at OVERFLOW_STEP, a skip that changes no byte. */
static int rig_step(rig *r, int k, const char *what) {
  static unsigned char before[SNAP], after[SNAP];
  size_t nb = 0, na;
  amp_status st;
  make_grads(r, k);
  if (k == OVERFLOW_STEP) nb = snapshot(r, before);
  st = amp_optimizer_step(r->o);
  if (st != AMP_OK) { EXPECT(0, "%s: step %d: %s", what, k, amp_last_error()); return 0; }
  if (k == OVERFLOW_STEP) {
    na = snapshot(r, after);
    EXPECT(na == nb && memcmp(before, after, na) == 0, "%s: the skipped step %d changed the state", what, k);
    return na == nb && memcmp(before, after, na) == 0;
  }
  ref_step(r);
  return 1;
}

static const char *kind_name(amp_optim_kind k) {
  return k == AMP_SGD ? "SGD" : k == AMP_ADAM ? "Adam" : k == AMP_ADAMW ? "AdamW" : "Lion";
}

/* Every kind x master mode x rounding at one SIMD level: STEPS updates against the reference, a
   checkpoint saved after MID of them and loaded into a fresh rig that runs the rest: the same bits as
   the straight run. Returns the straight runs' final states for the comparison across levels. */
#define NCASE 16
static unsigned char final_state[NCASE][SNAP];
static size_t final_len[NCASE];
static void run_level(int level, int record, int moments) {
  static const amp_optim_kind kinds[4] = {AMP_ADAMW, AMP_ADAM, AMP_SGD, AMP_LION};
  static rig a, b;
  static unsigned char sa[SNAP], sb[SNAP];
  int ki, cs, k, ncase = 0;
  set_len(moments);
  t_simd_level(level);
  amp__opt_simd = level;
  for (ki = 0; ki < 4; ki++)
    for (cs = 0; cs < 4; cs++) {   /* F32 nearest, F32 stochastic, SPLIT, NONE */
      int mode = cs <= 1 ? AMP_MASTER_F32 : cs == 2 ? AMP_MASTER_SPLIT : AMP_MASTER_NONE;
      char what[128];
      size_t la, lb;
      snprintf(what, sizeof what, "moments %d, level %d, %s, master_mode %d, stochastic %d", moments, level,
               kind_name(kinds[ki]), mode, cs == 1);
      if (!rig_make(&a, kinds[ki], mode, cs == 1, moments)) { EXPECT(0, "%s: setup: %s", what, amp_last_error()); continue; }
      for (k = 0; k < STEPS; k++) {
        if (!rig_step(&a, k, what)) break;
        if (!rig_matches(&a, what)) break;
        if (k == MID - 1) EXPECT(amp_checkpoint_save(CKPT, a.o, NULL) == AMP_OK, "%s: save: %s", what, amp_last_error());
      }
      la = snapshot(&a, sa);
      if (record) { memcpy(final_state[ncase], sa, la); final_len[ncase] = la; }
      else EXPECT(la == final_len[ncase] && memcmp(sa, final_state[ncase], la) == 0,
                  "%s: the state differs from level 0's", what);
      ncase++;
      /* resumed: the same setup, the file loaded, the remaining updates */
      if (!rig_make(&b, kinds[ki], mode, cs == 1, moments)) { EXPECT(0, "%s: setup 2", what); rig_free(&a); continue; }
      EXPECT(amp_checkpoint_load(CKPT, b.o, NULL) == AMP_OK, "%s: load: %s", what, amp_last_error());
      for (k = MID; k < STEPS; k++) {
        make_grads(&b, k);
        EXPECT(amp_optimizer_step(b.o) == AMP_OK, "%s: resumed step %d: %s", what, k, amp_last_error());
      }
      lb = snapshot(&b, sb);
      EXPECT(la == lb && memcmp(sa, sb, la) == 0, "%s: the resumed run differs from the straight one", what);
      rig_free(&a); rig_free(&b);
    }
  amp__opt_simd = -1;
  t_simd_level(2);
}

static void bf16_moments_match_the_reference_at_every_simd_level(void) {
  int l;
  for (l = 0; l < t_simd_levels(); l++) run_level(l, l == 0, AMP_MOMENTS_BF16);
}
static void eight_bit_moments_match_the_reference_at_every_simd_level(void) {
  int l;
  for (l = 0; l < t_simd_levels(); l++) run_level(l, l == 0, AMP_MOMENTS_8BIT);
}
static void fp8_moments_match_the_reference_at_every_simd_level(void) {
  int l;
  for (l = 0; l < t_simd_levels(); l++) run_level(l, l == 0, AMP_MOMENTS_FP8);
}

/* The table written here is E4M3 as the library decodes it, and its encoder gives the library's
   codes on values around every code (ties, the saturation bound, subnormals, both signs). */
static void fp8_table_and_encoder_agree_with_the_library(void) {
  int c, bad = 0;
  for (c = 0; c < 0x7f && !bad; c++) {
    float v = e4m3_val[c], nx = c + 1 < 0x7f ? e4m3_val[c + 1] : 480.0f, ys[4];
    int k;
    if (bits(v) != bits(amp_e4m3_to_f32((amp_fp8)c))) { EXPECT(0, "code 0x%02x: %g, the library %g", c, (double)v, (double)amp_e4m3_to_f32((amp_fp8)c)); bad = 1; }
    ys[0] = v; ys[1] = (v + nx) / 2.0f; ys[2] = nextafterf(ys[1], 0.0f); ys[3] = nextafterf(ys[1], 1000.0f);
    for (k = 0; k < 8 && !bad; k++) {
      float y = k < 4 ? ys[k] : -ys[k - 4];
      if (e4m3_enc(y) != amp_f32_to_e4m3(y, 1)) {
        EXPECT(0, "%a: the code here 0x%02x, the library 0x%02x", (double)y, e4m3_enc(y), amp_f32_to_e4m3(y, 1));
        bad = 1;
      }
    }
  }
  EXPECT(e4m3_enc(1e9f) == 0x7e && e4m3_enc(-460.0f) == 0xfe && e4m3_enc(0.0f) == 0, "the encoder's ends");
}

/* The library's maps are the ones written here from the description, value for value. */
static void eight_bit_maps_are_the_described_dynamic_maps(void) {
  static amp_optimizer *o;
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  int sg, k, same = 1;
  amp_optimizer_create(&o, amp_cpu(), &c);
  for (sg = 0; sg < 2; sg++)
    for (k = 0; k < 256; k++) same &= bits(o->qmap[sg].code[k]) == bits(map8[sg][k]);
  EXPECT(same, "the library's 8-bit maps differ from the ones written here");
  EXPECT(map8[0][0] < -0.99f && map8[0][127] == 0.0f && map8[0][255] == 1.0f && map8[1][0] == 0.0f &&
         map8[1][255] == 1.0f && map8[1][254] > 0.99f, "the maps' ends: %g %g %g, %g %g", (double)map8[0][0],
         (double)map8[0][127], (double)map8[0][255], (double)map8[1][0], (double)map8[1][254]);
  {   /* the library's code of y (a table lookup, then a short search) against the nearest code found
         here, around every midpoint of both maps and at every power of two and its neighbours */
    int bad = 0, e, d;
    for (sg = 0; sg < 2 && !bad; sg++)
      for (k = 0; k + 1 < 256 && !bad; k++) {
        float mid = (float)(((double)map8[sg][k] + (double)map8[sg][k + 1]) / 2.0), ys[3];
        ys[0] = mid; ys[1] = nextafterf(mid, -2.0f); ys[2] = nextafterf(mid, 2.0f);
        for (d = 0; d < 3 && !bad; d++)
          if (ys[d] >= -1.0f && ys[d] <= 1.0f && amp__q8_code(&o->qmap[sg], ys[d]) != code_of(sg, ys[d])) {
            EXPECT(0, "map %d, %a: code %d, want %d", sg, (double)ys[d], amp__q8_code(&o->qmap[sg], ys[d]), code_of(sg, ys[d]));
            bad = 1;
          }
      }
    for (sg = 0; sg < 2 && !bad; sg++)
      for (e = -40; e <= 0 && !bad; e++)
        for (d = 0; d < 6 && !bad; d++) {
          float y = ldexpf(1.0f, e);
          y = d % 3 == 0 ? y : d % 3 == 1 ? nextafterf(y, 0.0f) : nextafterf(y, 2.0f);
          if (d >= 3) y = -y;
          if (y < -1.0f || y > 1.0f) continue;
          if (amp__q8_code(&o->qmap[sg], y) != code_of(sg, y)) {
            EXPECT(0, "map %d, %a: code %d, want %d", sg, (double)y, amp__q8_code(&o->qmap[sg], y), code_of(sg, y));
            bad = 1;
          }
        }
  }
  amp_optimizer_destroy(o);
}

/* The 8-bit store and load at every SIMD level against the plain loop (level 0), and the plain loop
   against the reference here, on the values the steps rarely reach: a block of absmax 1 holding every
   midpoint of the map, its neighbours and both signs (ties: the lower code), every power of two from
   2^-40 and its neighbours, 0 and -0, +-1; blocks of other absmaxes; subnormals only (absmax clamped
   at 1e-38); a short last block. Then blocks with inf and NaN, against level 0 alone. Stored and
   loaded per AMP__CHUNK as a step does. */
#define QN (256 * 16 + 37)
static void q8_levels(int sg, amp__qmap *q, const float *x, size_t n, int finite, const char *what) {
  static float buf[2][(QN + 3) / 4 + QN / 256 + 2], dec[2][QN], rdec[QN], rabs[QN / 256 + 1];
  static uint8_t rcodes[QN];
  size_t nb = amp__moment_bytes(AMP_MOMENTS_8BIT, n), i0, i;
  int l;
  for (l = 0; l < t_simd_levels(); l++) {
    unsigned char *a = (unsigned char *)buf[l > 0];
    memset(a, 0xa5, nb);
    for (i0 = 0; i0 < n; i0 += AMP__CHUNK) {
      size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
      amp__q_store(l, AMP_MOMENTS_8BIT, a, q, n, i0, k, x + i0, 0, 0u, 1.0f);
    }
    for (i0 = 0; i0 < n; i0 += AMP__CHUNK) {
      size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
      amp__q_load(l, AMP_MOMENTS_8BIT, a, q, n, i0, k, dec[l > 0] + i0);
    }
    if (l == 0) {
      if (!finite) continue;
      enc8(sg, x, n, rcodes, rabs, rdec);
      EXPECT(memcmp(a, rabs, 4 * ((n + 255) / 256)) == 0 && memcmp(a + 4 * ((n + 255) / 256), rcodes, n) == 0,
             "map %d, %s: the plain loop's absmaxes or codes differ from the reference's", sg, what);
      EXPECT(memcmp(dec[0], rdec, n * 4) == 0, "map %d, %s: the plain loop decodes other values", sg, what);
      continue;
    }
    for (i = 0; i < n && a[4 * ((n + 255) / 256) + i] == ((unsigned char *)buf[0])[4 * ((n + 255) / 256) + i]; i++) {}
    EXPECT(memcmp(buf[0], buf[1], nb) == 0, "map %d, %s, level %d: the bytes differ from level 0's (first code at %d: "
           "x %a)", sg, what, l, (int)i, i < n ? (double)x[i] : 0.0);
    EXPECT(memcmp(dec[0], dec[1], n * 4) == 0, "map %d, %s, level %d: decodes other values than level 0", sg, what, l);
  }
}
static void eight_bit_vector_loops_match_the_plain_loop_on_edge_values(void) {
  static float x[QN];
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  amp_optimizer *o;
  int sg;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "create: %s", amp_last_error());
  for (sg = 0; sg < 2; sg++) {
    size_t n = 0, i;
    int k, d, e;
    /* absmax 1: each block of 256 starts with +-1, then the values themselves */
#define PUT(v) do { if (n % 256 == 0) { x[n] = (n / 256) % 2 ? -1.0f : 1.0f; n++; } x[n++] = (v); } while (0)
    for (k = 0; k + 1 < 256; k++) {
      float mid = (float)(((double)map8[sg][k] + (double)map8[sg][k + 1]) / 2.0);
      float ys[3];
      ys[0] = mid; ys[1] = nextafterf(mid, -2.0f); ys[2] = nextafterf(mid, 2.0f);
      for (d = 0; d < 3; d++) { PUT(ys[d]); PUT(-ys[d]); }
    }
    for (e = -40; e <= 0; e++)
      for (d = 0; d < 3; d++) {
        float y = ldexpf(1.0f, e);
        y = d == 0 ? y : d == 1 ? nextafterf(y, 0.0f) : nextafterf(y, 2.0f);
        if (y > 1.0f) continue;
        PUT(y); PUT(-y);
      }
    PUT(0.0f); PUT(-0.0f); PUT(1.0f); PUT(-1.0f); PUT(FLT_MIN); PUT(-FLT_MIN);
#undef PUT
    while (n % 256) x[n++] = rndf();
    for (i = 0; i < 256; i++) x[n++] = 3.0f * rndf();   /* absmax below 3: quotients that round */
    for (i = 0; i < 256; i++) x[n++] = ldexpf(rndf(), -(int)(rnd() % 30));   /* many exponents */
    for (i = 0; i < 256; i++) x[n++] = i % 7 == 0 ? 0.0f : i % 7 == 1 ? -0.0f : ldexpf(rndf(), -128 - (int)(rnd() % 20));
    for (i = 0; i < 37; i++) x[n++] = 1e-3f * rndf();   /* a short last block, not a whole vector */
    EXPECT(n <= QN, "the edge values overflow the buffer: %d", (int)n);
    q8_levels(sg, &o->qmap[sg], x, n, 1, "edge values");
    /* blocks of absmaxes that are not powers of two, holding each midpoint times the absmax and
       its neighbours: the quotients x / absmax nearest a change of code, where x times the
       reciprocal of the absmax may round to the other side; then absmaxes from 2^-118 to 2^100,
       2^-64 and 2^64 and their neighbours among them, two absmaxes a run */
    for (e = 0; e < 10; e++) {
      float am = e == 0 ? 0.7f + 0.29f * (rndf() + 1.0f) / 2.0f : e == 1 ? 3.0f * (1.0f + (rndf() + 1.0f) / 3.0f)
               : e == 2 ? ldexpf(1.0f, -64) : e == 3 ? nextafterf(ldexpf(1.0f, -64), 0.0f)
               : e == 4 ? ldexpf(1.0f, 64) : e == 5 ? nextafterf(ldexpf(1.0f, 64), 1e30f)
               : e == 6 ? ldexpf(1.0f + (rndf() + 1.0f) / 2.0f, -64) : e == 7 ? ldexpf(1.0f + (rndf() + 1.0f) / 2.0f, 63)
               : e == 8 ? ldexpf(1.3f, -118) : ldexpf(1.7f, 100);
      if (e % 2 == 0) n = 0;
#define PUT(v) do { if (n % 256 == 0) { x[n] = (n / 256) % 2 ? -am : am; n++; } x[n++] = (v); } while (0)
      for (k = 0; k + 1 < 256; k++) {
        float y = (float)(((double)map8[sg][k] + (double)map8[sg][k + 1]) / 2.0 * (double)am);
        if (y >= am || y <= -am) continue;
        PUT(y); PUT(nextafterf(y, -2.0f * am)); PUT(nextafterf(y, 2.0f * am));
        PUT(nextafterf(nextafterf(y, 2.0f * am), 2.0f * am));
      }
#undef PUT
      while (n % 256) x[n++] = am * rndf();
      if (e % 2 == 0) continue;
      EXPECT(n <= QN, "the midpoint values overflow the buffer: %d", (int)n);
      q8_levels(sg, &o->qmap[sg], x, n, 1, "midpoints times other absmaxes");
    }
    /* inf: blocks with +-inf (absmax FLT_MAX: inf / FLT_MAX clamped to +-1, the rest over FLT_MAX)
       against the reference; then NaN (the largest bits: absmax NaN) against level 0 alone */
    n = 0;
    for (i = 0; i < 256; i++) x[n++] = i == 5 ? INFINITY : i == 9 ? -INFINITY : rndf();
    for (i = 0; i < 256; i++) x[n++] = i == 200 ? -INFINITY : i == 7 ? FLT_MAX : 1e30f * rndf();
    for (i = 0; i < 100; i++) x[n++] = i == 99 ? INFINITY : rndf();
    q8_levels(sg, &o->qmap[sg], x, n, 1, "inf");
    n = 0;
    for (i = 0; i < 256; i++) x[n++] = i == 17 ? NAN : i == 40 ? -NAN : rndf();
    for (i = 0; i < 256; i++) x[n++] = i == 3 ? NAN : 0.0f;
    q8_levels(sg, &o->qmap[sg], x, n, 0, "inf and NaN");
  }
  amp_optimizer_destroy(o);
}

/* The reference must be able to fail: fp32 moments do not give the bf16 or fp8 reference's bits. */
static void fp32_moments_differ_from_the_reference(int moments) {
  static rig a;
  int k, same = 1, i;
  size_t j;
  set_len(moments);
  if (!rig_make(&a, AMP_ADAMW, AMP_MASTER_F32, 0, AMP_MOMENTS_F32)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  for (i = 0; i < NT; i++) a.mt[i] = moments;   /* the reference rounds, the library keeps f32 */
  for (k = 0; k < 3; k++) {
    make_grads(&a, k);
    amp_optimizer_step(a.o);
    ref_step(&a);
  }
  for (i = 0; i < NT; i++)
    for (j = 0; j < LEN[i]; j++) same &= bits(a.o->t[i].master[j]) == bits(a.p[i][j]);
  EXPECT(!same, "fp32 moments gave the moments %d reference's masters bit for bit", moments);
  EXPECT(a.o->t[0].mq == NULL && a.o->t[0].m != NULL, "fp32 moments kept in another type");
  rig_free(&a);
}
static void fp32_moments_differ_from_the_bf16_and_fp8_references(void) {
  fp32_moments_differ_from_the_reference(AMP_MOMENTS_BF16);
  fp32_moments_differ_from_the_reference(AMP_MOMENTS_FP8);
}

/* FP8: moments that are all 0 (a fresh tensor, or grads of 0 from the start) keep scale 1, so
   scale_inv 1 and codes 0 (amax 0: TransformerEngine's current scaling gives 1); a tensor whose
   grads are not 0 gets scale_inv amax / 448 near its moments' amax. */
static void fp8_moments_of_zero_keep_scale_one(void) {
  static float w[2][300], g[2][300];
  amp_optimizer *o;
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  amp_tensor_desc d;
  int i, k, zero = 1;
  size_t j;
  float si;
  amp_optimizer_create(&o, amp_cpu(), &c);
  for (i = 0; i < 2; i++) {
    memset(&d, 0, sizeof d);
    d.weights = w[i]; d.dtype = AMP_F32; d.grads = g[i]; d.grad_dtype = AMP_GRAD_F32; d.n = 300; d.moments = AMP_MOMENTS_FP8;
    for (j = 0; j < 300; j++) { w[i][j] = 0.5f; g[i][j] = i ? 0.25f * (float)(j % 7) - 0.75f : 0.0f; }
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add: %s", amp_last_error());
  }
  for (i = 0; i < 2; i++) {
    memcpy(&si, o->t[i].mq, 4); zero &= si == 1.0f;
    memcpy(&si, o->t[i].vq, 4); zero &= si == 1.0f;
  }
  EXPECT(zero, "a fresh FP8 tensor's scale_inv is not 1");
  for (k = 0; k < 3; k++) EXPECT(amp_optimizer_step(o) == AMP_OK, "step: %s", amp_last_error());
  memcpy(&si, o->t[0].mq, 4); zero = si == 1.0f;
  memcpy(&si, o->t[0].vq, 4); zero &= si == 1.0f;
  for (j = 0; j < 300; j++) zero &= o->t[0].mq[4 + j] == 0 && o->t[0].vq[4 + j] == 0;
  EXPECT(zero, "moments of 0: scale_inv %g, want 1, and codes 0", (double)si);
  memcpy(&si, o->t[1].mq, 4);
  /* m after 3 steps of g: (1 - 0.9^3) g, amax 0.75 * 0.271 */
  EXPECT(fabsf(si * 448.0f - 0.75f * 0.271f) < 1e-4f && o->t[1].mq[4 + 0] == 0xfe,
         "moments not 0: scale_inv %g, want %g / 448, first code 0x%02x", (double)si, 0.75 * 0.271, o->t[1].mq[4]);
  amp_optimizer_destroy(o);
}

/* A spike (spike_norm) skips the step as an overflow does: with moments in each type and each master
   mode, every byte of the state as it was, the skip counted; the next clean step steps. */
static void spikes_skip_and_leave_every_moment_type_bit_for_bit(void) {
  static const int types[3] = {AMP_MOMENTS_BF16, AMP_MOMENTS_8BIT, AMP_MOMENTS_FP8};
  static rig a;
  static unsigned char s0[SNAP], s1[SNAP];
  int ti, mode, k;
  for (ti = 0; ti < 3; ti++)
    for (mode = 0; mode < 3; mode++) {
      size_t l0, l1;
      int i;
      set_len(types[ti]);
      if (!rig_make(&a, AMP_ADAMW, mode, 0, types[ti])) { EXPECT(0, "setup: %s", amp_last_error()); return; }
      for (k = 0; k < 2; k++) { make_grads(&a, k); amp_optimizer_step(a.o); }
      make_grads(&a, 5);
      for (i = 0; i < NT; i++) {   /* grads 100 times larger: a norm far above spike_norm */
        size_t j;
        for (j = 0; j < LEN[i]; j++) amp__store(a.g[i], a.gt[i], j, amp__load(a.g[i], a.gt[i], j) * 100.0f);
      }
      a.o->cfg.spike_norm = 50.0f;
      l0 = snapshot(&a, s0);
      EXPECT(amp_optimizer_step(a.o) == AMP_OK, "step: %s", amp_last_error());
      l1 = snapshot(&a, s1);
      EXPECT(amp_optimizer_spike_skips(a.o) == 1 && l0 == l1 && memcmp(s0, s1, l0) == 0,
             "moments %d, master_mode %d: the spike step changed the state (skips %ld)", types[ti], mode,
             amp_optimizer_spike_skips(a.o));
      make_grads(&a, 6);
      EXPECT(amp_optimizer_step(a.o) == AMP_OK, "step after: %s", amp_last_error());
      l1 = snapshot(&a, s1);
      EXPECT(amp_optimizer_spike_skips(a.o) == 1 && (l0 != l1 || memcmp(s0, s1, l0) != 0),
             "moments %d, master_mode %d: the clean step after the spike did not step", types[ti], mode);
      rig_free(&a);
    }
}

/* ---- checkpoints: the file holds the bf16 words; a file moves between moment types ------------- */


/* Moment j (1, 2) of tensor i as the reference decodes the library's stored bytes. */
static float decoded(const amp__tensor *t, int j, size_t e) {
  const unsigned char *q = j == 1 ? t->mq : t->vq;
  size_t nb = (t->n + 255) / 256;
  if (t->moments == AMP_MOMENTS_F32) return (j == 1 ? t->m : t->v)[e];
  if (t->moments == AMP_MOMENTS_BF16) return widen(((const uint16_t *)q)[e]);
  if (t->moments == AMP_MOMENTS_FP8) return MUL(e4m3_dec(q[4 + e]), ((const float *)q)[0]);
  return MUL(map8[j - 1][q[4 * nb + e]], ((const float *)q)[e / 256]);
}

/* A run with moments kept as `moments` (BF16, 8BIT): its file holds them as kept (version 3); it
   loads into fp32 moments decoded exactly, and an fp32 file loads into them encoded as a step
   encodes (bf16 to nearest even; 8-bit blockwise). A bad moments field is refused, nothing changed. */
static void checkpoint_moves_between_types(int moments) {
  static rig a, f, h;
  static uint8_t codes[NMAX]; static float absmax[NB], dec[NMAX];
  size_t n = 0, want = 32 + 56 + 416 + 4, j;
  unsigned char *file;
  uint32_t version = 0;
  int i, k, ok, jm;
  set_len(moments);
  if (!rig_make(&a, AMP_ADAMW, AMP_MASTER_F32, 0, moments)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  for (k = 0; k < 5; k++) { make_grads(&a, k); amp_optimizer_step(a.o); }
  EXPECT(amp_checkpoint_save(CKPT, a.o, NULL) == AMP_OK, "save: %s", amp_last_error());
  file = t_read_file(CKPT, &n);
  for (i = 0; i < NT; i++) want += 20 + 4 * LEN[i] + 2 * amp__moment_bytes(a.o->t[i].moments, LEN[i]);
  EXPECT(file && n == want, "moments %d: the file holds %zu bytes, want %zu", moments, n, want);
  if (file && n == want) {
    size_t at = 32 + 56 + 416, mb = amp__moment_bytes(moments, LEN[0]);
    uint32_t mom;
    memcpy(&version, file + 8, 4);
    EXPECT(version == 3, "version %u, want 3", (unsigned)version);
    memcpy(&mom, file + at + 16, 4);
    EXPECT(mom == (uint32_t)moments, "tensor 0's moments field %u", (unsigned)mom);
    at += 20 + 4 * LEN[0];
    EXPECT(memcmp(file + at, a.o->t[0].mq, mb) == 0, "tensor 0's m in the file is not as kept");
    EXPECT(memcmp(file + at + mb, a.o->t[0].vq, mb) == 0, "tensor 0's v in the file is not as kept");
  }
  free(file);
  /* into fp32 moments: decoded exactly; masters and step as saved */
  if (!rig_make(&f, AMP_ADAMW, AMP_MASTER_F32, 0, AMP_MOMENTS_F32)) { EXPECT(0, "setup f: %s", amp_last_error()); rig_free(&a); return; }
  EXPECT(amp_checkpoint_load(CKPT, f.o, NULL) == AMP_OK, "moments %d file into fp32 moments: %s", moments, amp_last_error());
  ok = amp_optimizer_step_count(f.o) == amp_optimizer_step_count(a.o);
  for (i = 0; i < NT; i++)
    for (j = 0; j < LEN[i]; j++)
      ok &= bits(f.o->t[i].m[j]) == bits(decoded(&a.o->t[i], 1, j)) && bits(f.o->t[i].v[j]) == bits(decoded(&a.o->t[i], 2, j)) &&
            bits(f.o->t[i].master[j]) == bits(a.o->t[i].master[j]);
  EXPECT(ok, "moments %d: a file loaded into fp32 moments is not its moments decoded (and masters as saved)", moments);
  /* fp32 moments stepped further, saved (version 2, as before), loaded into `moments`: encoded */
  for (k = 5; k < 7; k++) { make_grads(&f, k); amp_optimizer_step(f.o); }
  EXPECT(amp_checkpoint_save(CKPT2, f.o, NULL) == AMP_OK, "save 2: %s", amp_last_error());
  file = t_read_file(CKPT2, &n);
  if (file) { memcpy(&version, file + 8, 4); EXPECT(version == 2, "an fp32-moment file has version %u, want 2", (unsigned)version); }
  free(file);
  if (!rig_make(&h, AMP_ADAMW, AMP_MASTER_F32, 0, moments)) { EXPECT(0, "setup h"); rig_free(&a); rig_free(&f); return; }
  EXPECT(amp_checkpoint_load(CKPT2, h.o, NULL) == AMP_OK, "fp32 file into moments %d: %s", moments, amp_last_error());
  ok = 1;
  for (i = 0; i < NT; i++) {
    const amp__tensor *t = &h.o->t[i];
    size_t nb = (LEN[i] + 255) / 256;
    for (j = 0; j < LEN[i]; j++) ok &= bits(t->master[j]) == bits(f.o->t[i].master[j]);
    for (jm = 1; jm <= 2; jm++) {
      const float *src = jm == 1 ? f.o->t[i].m : f.o->t[i].v;
      const unsigned char *q = jm == 1 ? t->mq : t->vq;
      if (t->moments == AMP_MOMENTS_F32) {
        ok &= memcmp(jm == 1 ? t->m : t->v, src, 4 * LEN[i]) == 0;
      } else if (t->moments == AMP_MOMENTS_BF16) {
        for (j = 0; j < LEN[i]; j++) ok &= ((const uint16_t *)q)[j] == rne16(src[j]);
      } else if (t->moments == AMP_MOMENTS_FP8) {
        encf8(src, LEN[i], codes, &absmax[0], dec);
        ok &= memcmp(q + 4, codes, LEN[i]) == 0 && memcmp(q, absmax, 4) == 0;
      } else {
        enc8(jm - 1, src, LEN[i], codes, absmax, dec);
        ok &= memcmp(q + 4 * nb, codes, LEN[i]) == 0 && memcmp(q, absmax, 4 * nb) == 0;
      }
    }
  }
  EXPECT(ok, "an fp32 file loaded into moments %d is not its moments encoded as a step encodes", moments);
  /* a moments field that is no kept type: refused, nothing changed */
  file = t_read_file(CKPT, &n);
  if (file) {
    amp__crc crc; uint32_t bad = 9, cv;
    FILE *w;
    memcpy(file + 32 + 56 + 416 + 16, &bad, 4);
    amp__crc_init(&crc); amp__crc_add(&crc, file, n - 4); cv = amp__crc_value(&crc); memcpy(file + n - 4, &cv, 4);
    w = fopen(CKPT2, "wb"); fwrite(file, 1, n, w); fclose(w);
    {
      static unsigned char s0[SNAP], s1[SNAP];
      size_t l0 = snapshot(&h, s0), l1;
      amp_status st = amp_checkpoint_load(CKPT2, h.o, NULL);
      l1 = snapshot(&h, s1);
      EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "moments 9"), "moments 9 in the file: %s '%s'",
             amp_status_string(st), amp_last_error());
      EXPECT(l0 == l1 && memcmp(s0, s1, l0) == 0, "a refused load changed the state");
    }
    free(file);
  }
  rig_free(&a); rig_free(&f); rig_free(&h);
}
/* A finite grad whose moment overflows (Adam's v: g * g past FLT_MAX; SGD's buffer: 0.9 * buf + g
   past it, also -inf): its 8-bit block keeps absmax FLT_MAX, not inf (whose inf / inf and 0 * inf
   would make the whole block NaN), the moment +FLT_MAX, or -inf the signed map's least code times
   FLT_MAX (its sign: inf / inf was NaN, whose code 0 is that least, negative code), the block's
   other moments and every weight stay finite, and a checkpoint of that state loads and continues bit for bit. A
   file whose block absmax is one no update leaves (inf, 0, below 1e-38, negative, NaN) is refused
   naming it, the live state unchanged. */
static void eight_bit_overflowed_moment_keeps_its_block(void) {
  enum { N = 4096 + 300 };
  static float w[3][N], g[N];
  static unsigned char s0[SNAP], s1[SNAP];
  static const uint32_t badam[5] = {0x7f800000u, 0u, 0x006ce3edu, 0xbf800000u, 0x7fc00000u};
  int kind, r, k, b;
  for (kind = 0; kind < 3; kind++) {   /* Adam's v to +inf, SGD's buffer to +inf, then to -inf */
    const int sgd = kind >= 1, j = sgd ? 1 : 2;   /* the moment that overflows: SGD's buffer, Adam's v */
    const float want = kind == 2 ? MUL(map8[0][0], FLT_MAX) : FLT_MAX;
    amp_optim_config c = amp_optimizer_defaults(sgd ? AMP_SGD : AMP_ADAM);
    amp_optimizer *o[3];
    amp_tensor_desc d;
    size_t e, nfile = 0, at = 0, mb = amp__moment_bytes(AMP_MOMENTS_8BIT, N);
    unsigned char *file;
    const unsigned char *q;
    int finite = 1;
    if (sgd) c.momentum = 0.9f;
    for (r = 0; r < 3; r++) {
      for (e = 0; e < N; e++) w[r][e] = 0.5f - (float)(e % 7) * 0.01f;
      memset(&d, 0, sizeof d);
      d.weights = w[r]; d.dtype = AMP_F32; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = N;
      d.moments = AMP_MOMENTS_8BIT;
      if (amp_optimizer_create(&o[r], amp_cpu(), &c) != AMP_OK || amp_optimizer_add_tensor(o[r], &d) != AMP_OK) {
        EXPECT(0, "setup: %s", amp_last_error());
        return;
      }
    }
    for (e = 0; e < N; e++) g[e] = 0.01f * (float)(e % 5 + 1);
    g[3] = kind == 2 ? -3e38f : sgd ? 3e38f : 1e21f;   /* finite; v = g * g, or the buffer at the second step, overflows */
    for (k = 0; k < 3; k++) EXPECT(amp_optimizer_step(o[0]) == AMP_OK && !amp_optimizer_last_skipped(o[0]), "step %d", k);
    q = j == 1 ? o[0]->t[0].mq : o[0]->t[0].vq;
    EXPECT(bits(((const float *)q)[0]) == 0x7f7fffffu, "%s: block 0's absmax %a, want FLT_MAX", sgd ? "SGD" : "Adam",
           (double)((const float *)q)[0]);
    EXPECT(bits(decoded(&o[0]->t[0], j, 3)) == bits(want), "%s, kind %d: the overflowed moment decodes as %a, want %a",
           sgd ? "SGD" : "Adam", kind, (double)decoded(&o[0]->t[0], j, 3), (double)want);
    for (e = 0; e < N; e++) {
      float m = decoded(&o[0]->t[0], 1, e), v = sgd ? 0.0f : decoded(&o[0]->t[0], 2, e);
      /* SGD's weight 3 goes to -+inf with the buffer (as with f32 moments: the step uses the new
         moment before it is encoded); nothing else may */
      finite &= (sgd && e == 3 ? !isnan(w[0][e]) : isfinite(w[0][e])) && bits(w[0][e]) == bits(o[0]->t[0].master[e]) &&
                !isnan(m) && !isnan(v);
    }
    EXPECT(finite, "%s: a weight is NaN or inf, or a moment NaN, after a moment overflowed", sgd ? "SGD" : "Adam");
    /* saved and loaded into a fresh optimizer: both continue with the same bits */
    EXPECT(amp_checkpoint_save(CKPT, o[0], NULL) == AMP_OK, "save: %s", amp_last_error());
    EXPECT(amp_checkpoint_load(CKPT, o[1], NULL) == AMP_OK, "%s: the saved overflow does not load: %s",
           sgd ? "SGD" : "Adam", amp_last_error());
    for (k = 0; k < 2; k++) { amp_optimizer_step(o[0]); amp_optimizer_step(o[1]); }
    EXPECT(state_of(o[0], s0) == state_of(o[1], s1) && memcmp(s0, s1, state_of(o[0], s0)) == 0,
           "%s: the resumed run differs from the one that went on", sgd ? "SGD" : "Adam");
    /* files with an absmax no update leaves: block 1's of the overflowed moment (found in the file
       by its bytes), CRC made good */
    EXPECT(amp_checkpoint_save(CKPT, o[0], NULL) == AMP_OK, "save 2: %s", amp_last_error());
    file = t_read_file(CKPT, &nfile);
    q = j == 1 ? o[0]->t[0].mq : o[0]->t[0].vq;
    while (file && at + mb <= nfile && memcmp(file + at, q, mb)) at++;
    EXPECT(file && at + mb <= nfile, "the moment's bytes are not in the file");
    for (b = 0; file && at + mb <= nfile && b < 5; b++) {
      amp__crc crc;
      uint32_t cv;
      FILE *f;
      size_t l0, l1;
      amp_status st;
      unsigned char *bad = (unsigned char *)malloc(nfile);
      memcpy(bad, file, nfile);
      memcpy(bad + at + 4, &badam[b], 4);
      amp__crc_init(&crc); amp__crc_add(&crc, bad, nfile - 4); cv = amp__crc_value(&crc); memcpy(bad + nfile - 4, &cv, 4);
      f = fopen(CKPT2, "wb"); fwrite(bad, 1, nfile, f); fclose(f);
      free(bad);
      l0 = state_of(o[2], s0);
      st = amp_checkpoint_load(CKPT2, o[2], NULL);
      l1 = state_of(o[2], s1);
      EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "amp_checkpoint_load") &&
             strstr(amp_last_error(), "absmax") && strstr(amp_last_error(), "block 1"),
             "%s, absmax bits 0x%08x: %s '%s'", sgd ? "SGD" : "Adam", (unsigned)badam[b], amp_status_string(st),
             amp_last_error());
      EXPECT(l0 == l1 && memcmp(s0, s1, l0) == 0, "a refused load changed the state");
    }
    free(file);
    for (r = 0; r < 3; r++) amp_optimizer_destroy(o[r]);
  }
}
static void checkpoints_keep_moments_as_kept_and_move_between_types(void) {
  checkpoint_moves_between_types(AMP_MOMENTS_BF16);
  checkpoint_moves_between_types(AMP_MOMENTS_8BIT);
  checkpoint_moves_between_types(AMP_MOMENTS_FP8);
}

/* ---- amp_optimizer_state_bytes --------------------------------------------------------------------- */

static void state_bytes_count_every_byte_kept(void) {
  static const amp_optim_kind kinds[4] = {AMP_ADAMW, AMP_SGD, AMP_LION, AMP_SGD};
  /* bytes per parameter: [kind][master mode][moments f32, bf16]; the last row is SGD without momentum */
  static const size_t want[4][3][2] = {{{12, 8}, {10, 6}, {8, 4}}, {{8, 6}, {6, 4}, {4, 2}},
                                       {{8, 6}, {6, 4}, {4, 2}}, {{4, 4}, {2, 2}, {0, 0}}};
  static amp_bf16 w[1000], g[1000];
  int ki, mode, mo;
  EXPECT(amp_optimizer_state_bytes(NULL) == 0, "NULL: %zu", amp_optimizer_state_bytes(NULL));
  for (ki = 0; ki < 4; ki++)
    for (mode = 0; mode < 3; mode++)
      for (mo = 0; mo < 2; mo++) {
        amp_optimizer *o;
        amp_optim_config c = amp_optimizer_defaults(kinds[ki]);
        amp_tensor_desc d;
        size_t got;
        if (ki == 1) c.momentum = 0.9f;
        if (ki == 3 && mo == 1) continue;   /* no moments to store in bf16 (refused below) */
        amp_optimizer_create(&o, amp_cpu(), &c);
        memset(&d, 0, sizeof d);
        d.weights = w; d.dtype = AMP_BF16; d.grads = g; d.grad_dtype = AMP_BF16; d.n = 600;
        d.master_mode = mode; d.stochastic = mode == AMP_MASTER_NONE; d.moments = mo ? AMP_MOMENTS_BF16 : AMP_MOMENTS_F32;
        EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add: %s", amp_last_error());
        d.weights = w + 600; d.grads = g + 600; d.n = 400;
        EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add 2: %s", amp_last_error());
        got = amp_optimizer_state_bytes(o);
        EXPECT(got == 1000 * want[ki][mode][mo], "%s%s, master_mode %d, moments %d: %zu bytes, want %zu",
               kind_name(kinds[ki]), ki == 3 ? " without momentum" : "", mode, mo, got, 1000 * want[ki][mode][mo]);
        amp_optimizer_destroy(o);
      }
  {   /* 8-bit: a tensor of 5000 elements keeps 5000 codes and 20 absmaxes per moment (5080 bytes each,
         a multiple of 4), one of 4095 keeps f32 moments */
    static amp_bf16 w8[9095], g8[9095];
    amp_optimizer *o;
    amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
    amp_tensor_desc d;
    amp_optimizer_create(&o, amp_cpu(), &c);
    memset(&d, 0, sizeof d);
    d.weights = w8; d.dtype = AMP_BF16; d.grads = g8; d.grad_dtype = AMP_BF16; d.n = 5000; d.moments = AMP_MOMENTS_8BIT;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add 8-bit: %s", amp_last_error());
    EXPECT(amp_optimizer_state_bytes(o) == 4 * 5000 + 2 * 5080, "8-bit: %zu bytes, want %d", amp_optimizer_state_bytes(o),
           4 * 5000 + 2 * 5080);
    d.weights = w8 + 5000; d.grads = g8 + 5000; d.n = 4095;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add 8-bit, small: %s", amp_last_error());
    EXPECT(amp_optimizer_state_bytes(o) == 4 * 5000 + 2 * 5080 + 12 * 4095 && o->t[1].moments == AMP_MOMENTS_F32,
           "8-bit with a small tensor: %zu bytes, want %d", amp_optimizer_state_bytes(o), 4 * 5000 + 2 * 5080 + 12 * 4095);
    amp_optimizer_destroy(o);
  }
  {   /* FP8: n codes and a scale_inv per moment, each array 4-byte aligned in memory (4 + 5001 -> 5008;
         4 + 1 -> 8), every size kept in fp8; with a split master, Lion keeps one array */
    static amp_bf16 w8[5002], g8[5002];
    amp_optimizer *o;
    amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
    amp_tensor_desc d;
    amp_optimizer_create(&o, amp_cpu(), &c);
    memset(&d, 0, sizeof d);
    d.weights = w8; d.dtype = AMP_BF16; d.grads = g8; d.grad_dtype = AMP_BF16; d.n = 5001; d.moments = AMP_MOMENTS_FP8;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add fp8: %s", amp_last_error());
    d.weights = w8 + 5001; d.grads = g8 + 5001; d.n = 1;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add fp8, one element: %s", amp_last_error());
    EXPECT(amp_optimizer_state_bytes(o) == 4 * 5001 + 2 * 5008 + 4 + 2 * 8 && o->t[1].moments == AMP_MOMENTS_FP8,
           "fp8: %zu bytes, want %d", amp_optimizer_state_bytes(o), 4 * 5001 + 2 * 5008 + 4 + 2 * 8);
    amp_optimizer_destroy(o);
    c = amp_optimizer_defaults(AMP_LION);
    amp_optimizer_create(&o, amp_cpu(), &c);
    d.weights = w8; d.grads = g8; d.n = 5001; d.master_mode = AMP_MASTER_SPLIT;
    EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "add fp8 Lion split: %s", amp_last_error());
    EXPECT(amp_optimizer_state_bytes(o) == 2 * 5001 + 5008, "fp8 Lion split: %zu bytes, want %d",
           amp_optimizer_state_bytes(o), 2 * 5001 + 5008);
    amp_optimizer_destroy(o);
  }
}

/* ---- bad input ------------------------------------------------------------------------------------- */

static void bad_moments_are_refused_naming_the_value(void) {
  static amp_bf16 w[64], g[64];
  amp_optimizer *o;
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  amp_tensor_desc d;
  amp_status st;
  const int bad[3] = {4, -1, 1000};
  int i;
  amp_optimizer_create(&o, amp_cpu(), &c);
  memset(&d, 0, sizeof d);
  d.weights = w; d.dtype = AMP_BF16; d.grads = g; d.grad_dtype = AMP_BF16; d.n = 64;
  for (i = 0; i < 3; i++) {
    char want[32];
    d.moments = bad[i];
    st = amp_optimizer_add_tensor(o, &d);
    snprintf(want, sizeof want, "moments %d", bad[i]);
    EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add_tensor") && strstr(amp_last_error(), want),
           "moments %d: %s '%s'", bad[i], amp_status_string(st), amp_last_error());
  }
  EXPECT(o->count == 0 && amp_optimizer_state_bytes(o) == 0, "a refused add added a tensor");
  d.moments = AMP_MOMENTS_BF16;
  EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "a good add after the refusals: %s", amp_last_error());
  amp_optimizer_destroy(o);
  /* a kind without moments takes only AMP_MOMENTS_F32 */
  c = amp_optimizer_defaults(AMP_SGD);
  amp_optimizer_create(&o, amp_cpu(), &c);
  for (i = 0; i < 3; i++) {
    static const int mo[3] = {AMP_MOMENTS_BF16, AMP_MOMENTS_8BIT, AMP_MOMENTS_FP8};
    static const char *const nm[3] = {"AMP_MOMENTS_BF16", "AMP_MOMENTS_8BIT", "AMP_MOMENTS_FP8"};
    d.moments = mo[i];
    st = amp_optimizer_add_tensor(o, &d);
    EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add_tensor") && strstr(amp_last_error(), nm[i]) &&
           strstr(amp_last_error(), "without momentum"),
           "SGD without momentum, %s: %s '%s'", nm[i], amp_status_string(st), amp_last_error());
  }
  EXPECT(o->count == 0 && amp_optimizer_state_bytes(o) == 0, "the refused tensor was added");
  amp_optimizer_destroy(o);
}

/* The moment loops (BF16, 8BIT and FP8 moments decoded into the vector loops' lanes, the 8-bit
   blocks' and FP8 arrays' amaxes taken there, the blocks' last elements stepped by the plain loop)
   at every SIMD level
   against level 0, bit for bit: each kind with moments in each master mode, on sizes around the
   vectors' widths (8, 16), the 8-bit blocks (256), the CPU loops' blocks (512) and the 8-bit
   minimum (4096); grads with a block of zeros (an absmax of 1e-38), tiny ones and, unclipped, one
   whose square overflows (an inf second moment, then a NaN decoded from it). */
#define NLOOP 4648
static void moment_loops_match_level_0_on_every_size(void) {
  static const size_t n8[] = {4096, 4097, 4104, 4112, 4127, 4351, 4648}, n16[] = {5, 8, 16, 23, 512, 531};
  static const amp_optim_kind kinds[4] = {AMP_ADAMW, AMP_ADAM, AMP_SGD, AMP_LION};
  static unsigned char w[NLOOP * 4], g[NLOOP * 4], s0[NLOOP * 24 + 64], s1[NLOOP * 24 + 64];
  int mi, si, ki, cs, l, k, checks = 0;
  for (mi = 0; mi < 3; mi++) {
    int moments = mi == 0 ? AMP_MOMENTS_BF16 : mi == 1 ? AMP_MOMENTS_8BIT : AMP_MOMENTS_FP8, ns = mi == 1 ? 7 : 6;
    for (si = 0; si < ns; si++)
      for (ki = 0; ki < 4; ki++)
        for (cs = 0; cs < 4; cs++) {   /* F32 nearest, F32 stochastic, SPLIT, NONE */
          size_t n = mi == 1 ? n8[si] : n16[si], j, l0 = 0;
          int mode = cs <= 1 ? AMP_MASTER_F32 : cs == 2 ? AMP_MASTER_SPLIT : AMP_MASTER_NONE;
          amp_dtype gt = si % 3 == 0 ? AMP_BF16 : si % 3 == 1 ? AMP_F32 : AMP_F16;
          amp_dtype wt = cs == 0 ? (si % 3 == 0 ? AMP_F32 : si % 3 == 1 ? AMP_BF16 : AMP_F16) : AMP_BF16;
          for (l = 0; l < t_simd_levels(); l++) {
            amp_optim_config c = amp_optimizer_defaults(kinds[ki]);
            amp_tensor_desc d;
            amp_optimizer *o = NULL;
            size_t ln;
            t_simd_level(l);
            amp__opt_simd = l;
            c.lr = kinds[ki] == AMP_LION ? 1e-3f : 1e-2f; c.weight_decay = 0.05f; c.eps = 1e-8f;
            c.momentum = 0.9f; c.nesterov = si & 1; c.max_grad_norm = 0.0f; c.seed = SEED;
            if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); continue; }
            rng_state = 7;
            for (j = 0; j < n; j++) amp__store(w, wt, j, rndf());
            memset(&d, 0, sizeof d);
            d.weights = w; d.dtype = wt; d.grads = g; d.grad_dtype = gt == AMP_F32 ? AMP_GRAD_F32 : gt; d.n = n;
            d.stochastic = cs == 1 || cs == 3; d.master_mode = mode; d.moments = moments;
            if (amp_optimizer_add_tensor(o, &d) != AMP_OK) { EXPECT(0, "add: %s", amp_last_error()); amp_optimizer_destroy(o); continue; }
            for (k = 0; k < 3; k++) {
              for (j = 0; j < n; j++) {
                float x = rndf() * 0.5f;
                if (k == 0 && j < 256) x = 0.0f;                  /* a block of zeros */
                if (j % 97 == 3) x *= 1e-30f;                      /* tiny */
                if (k == 1 && j == n / 2 + 1) x = 1e20f;           /* its square overflows (f16: inf, a skip) */
                amp__store(g, gt, j, x);
              }
              EXPECT(amp_optimizer_step(o) == AMP_OK, "step: %s", amp_last_error());
            }
            ln = state_of(o, l ? s1 : s0);
            if (!l) l0 = ln;
            else {
              EXPECT(ln == l0 && memcmp(s0, s1, ln) == 0, "moments %d, n %zu, %s, master_mode %d, stochastic %d, grads %s: "
                     "level %d differs from level 0", moments, n, kind_name(kinds[ki]), mode, d.stochastic,
                     amp__dtype_name(gt), l);
              checks++;
            }
            amp_optimizer_destroy(o);
          }
        }
  }
  amp__opt_simd = -1;
  t_simd_level(2);
  EXPECT(t_simd_levels() < 2 || checks > 0, "no level was compared");
}

/* The 8-bit moments' two vector paths on x86: gathers, or none (amp__q8_perm at the AVX-512 level:
   byte permutes and the segment tables where the CPU has AVX512_VBMI; amp__q8_loads at the AVX2
   level: plain loads of the same tables): 2 where the CPU has AVX2, else 1. q8_path(p) forces
   path p at both levels (0 gathers, 1 permutes and loads); -1 the library's own choices again. */
static int q8_paths(void) {
#ifdef AMP__X86_SIMD
  return amp__cpu_level() >= 1 ? 2 : 1;
#else
  return 1;
#endif
}
static void q8_path(int p) {
#ifdef AMP__X86_SIMD
  amp__q8_perm_forced = p;
  amp__q8_loads_forced = p;
#else
  (void)p;
#endif
}

#ifdef AMP__X86_SIMD
/* How many of the n (a multiple of 16) values of s the permute path flags near a midpoint. */
static AMP__AVX512 unsigned q8_near(const amp__qmap *q, const float *s, size_t n) {
  unsigned c = 0;
  size_t j;
  for (j = 0; j < n; j += 16) {
    __mmask16 nr;
    (void)amp__q8_pcode16(q, _mm512_loadu_ps(s + j), &nr);
    c += (unsigned)__builtin_popcount(nr);
  }
  return c;
}
#endif
/* The permute path's tables pass their own checks for both maps (everywhere: plain C), and on an
   AVX-512 CPU its encode gives the gathers' codes for every float from -1 to 1 (AMP_TEST_QUICK: every
   4099th, with each NaN and inf kind), its flagged lanes (taken by the gathers) a small share; the
   byte-permute decode (AVX512_VBMI) gives the gathers' values for every code, whole and partial
   64s. Both vector paths are held to the plain loop by the tests above and below, run on each. */
static void eight_bit_permute_path_matches_the_gathers_on_every_float(void) {
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  amp_optimizer *o;
  int sg;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "create: %s", amp_last_error());
  for (sg = 0; sg < 2; sg++) EXPECT(o->qmap[sg].pfast == 1, "map %d: the segment tables failed their checks", sg);
#ifdef AMP__X86_SIMD
  if (amp__cpu_level() >= 2) {
    static float s[4096 + 16];
    static uint8_t c1[4096], c2[4096];
    const uint32_t step = t_quick() ? 4099u : 1u;
    for (sg = 0; sg < 2; sg++) {
      const amp__qmap *q = &o->qmap[sg];
      unsigned long long lanes = 0, flagged = 0;
      uint32_t half, u = 0;
      int bad = 0;
      for (half = 0; half < 2 && !bad; half++) {   /* +0 .. 1, then -0 .. -1; then NaN and inf */
        uint64_t v = 0;
        while (v <= 0x3f800000u && !bad) {
          size_t n = 0, j;
          while (n < 4096 && v <= 0x3f800000u) { u = (uint32_t)v | half << 31; memcpy(&s[n++], &u, 4); v += step; }
          while (n % 16) s[n++] = 0.5f;
          amp__q8_pencode16(q, c1, s, n, 1.0f);
          amp__q8_encode16(q, c2, s, n, 1.0f);
          for (j = 0; j < n && c1[j] == c2[j]; j++) {}
          if (j < n) { EXPECT(0, "map %d, y %a: the permute path's code %d, the gathers' %d", sg, (double)s[j], c1[j], c2[j]); bad = 1; }
          flagged += q8_near(q, s, n); lanes += n;
        }
      }
      {
        static const uint32_t odd[16] = {0x7f800000u, 0xff800000u, 0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffc00000u,
                                         0x7fffffffu, 0xffffffffu, 0x7fa00000u, 0x3f800001u, 0x3f800000u, 0xbf800000u,
                                         0x00000001u, 0x80000001u, 0x00800000u, 0x80800000u};
        size_t j;
        memcpy(s, odd, sizeof odd);
        amp__q8_pencode16(q, c1, s, 16, 1.0f);
        amp__q8_encode16(q, c2, s, 16, 1.0f);
        for (j = 0; j < 16; j++) EXPECT(c1[j] == c2[j], "map %d, bits 0x%08x: the permute path's code %d, the gathers' %d", sg, odd[j], c1[j], c2[j]);
      }
      /* flagged lanes fall back to the gathers: a path that flagged most would pass the comparison above */
      EXPECT(lanes > 1000 && flagged * 100 < lanes, "map %d: %llu of %llu lanes flagged near a midpoint", sg, flagged, lanes);
    }
    if (amp__cpu_features() & AMP__CPU_VBMI) {   /* the decode: every code, at lengths 16 .. 256 */
      static uint8_t codes[256];
      static float d1[256], d2[256];
      int k, len;
      for (k = 0; k < 256; k++) codes[k] = (uint8_t)(k * 167 + 13);
      for (sg = 0; sg < 2; sg++)
        for (len = 16; len <= 256; len += 16) {
          float am = len % 32 ? 0.37f : ldexpf(1.3f, -100 + len);
          memset(d1, 0, sizeof d1); memset(d2, 0xff, sizeof d2);
          amp__q8_pdecode16(&o->qmap[sg], d1, codes, (size_t)len, am);
          amp__q8_decode16(&o->qmap[sg], d2, codes, (size_t)len, am);
          EXPECT(memcmp(d1, d2, (size_t)len * 4) == 0, "map %d, %d codes: the permute decode differs", sg, len);
          EXPECT(len == 256 || bits(d1[len]) == 0, "map %d, %d codes: the permute decode wrote past its end", sg, len);
        }
    }
  }
#endif
  amp_optimizer_destroy(o);
}

#ifdef _OPENMP
/* Built with -fopenmp (make test runs this file so, with OMP_NUM_THREADS=2): the step of a tensor
   large enough to be shared among the threads (amp__o_threads) gives one thread's bits on two
   threads and on three (slices of unequal lengths), for every moment type, kind and master mode,
   with a bf16, f32 or stochastically rounded copy, L2 or decoupled decay and clipping, over three
   steps. n is no multiple of the blocks (a partial 8-bit block at the end, the slices' edges
   inside a tensor's blocks of AMP__CHUNK). */
static void threads_give_one_threads_bits(void) {
  static const amp_optim_kind kinds[4] = {AMP_ADAMW, AMP_ADAM, AMP_SGD, AMP_LION};
  static const int moms[4] = {AMP_MOMENTS_F32, AMP_MOMENTS_BF16, AMP_MOMENTS_8BIT, AMP_MOMENTS_FP8};
  static const int team[3] = {1, 2, 3};
  const size_t n = 3 * AMP__O_PAR_MIN + 777;
  int nth = omp_get_max_threads(), cases = 0, k, mo, mode;
  unsigned char *snap[3];
  EXPECT(nth >= 2, "OMP_NUM_THREADS gives %d thread(s): nothing would be shared", nth);
  omp_set_num_threads(3);
  EXPECT(amp__o_threads(n) == 3 && amp__o_threads(n - 1000) == 2, "amp__o_threads: %d for %zu elements, %d for %zu",
         amp__o_threads(n), n, amp__o_threads(n - 1000), n - 1000);
  snap[0] = (unsigned char *)malloc(n * 32 + 1024); snap[1] = (unsigned char *)malloc(n * 32 + 1024);
  snap[2] = (unsigned char *)malloc(n * 32 + 1024);
  for (k = 0; k < 4; k++)
    for (mo = 0; mo < 4; mo++)
      for (mode = 0; mode < 5; mode++) {   /* F32 + bf16 copy, F32 + stochastic bf16, F32 + f32 copy, SPLIT, NONE */
        size_t len[3] = {0, 0, 0}, j;
        int run, ok = 1;
        for (run = 0; run < 3 && ok; run++) {
          amp_optim_config c = amp_optimizer_defaults(kinds[k]);
          amp_tensor_desc d;
          amp_optimizer *o = NULL;
          amp_dtype wt = mode == 2 ? AMP_F32 : AMP_BF16;
          void *w = malloc(n * 4), *g = malloc(n * 2);
          int st;
          omp_set_num_threads(team[run]);
          c.lr = 1e-2f; c.weight_decay = 0.05f; c.max_grad_norm = 30.0f; c.seed = 7;
          if (kinds[k] == AMP_SGD) c.momentum = 0.9f;
          rng_state = 99;
          for (j = 0; j < n; j++) amp__store(w, wt, j, rndf());
          memset(&d, 0, sizeof d);
          d.weights = w; d.dtype = wt; d.grads = g; d.grad_dtype = AMP_BF16; d.n = n; d.moments = moms[mo];
          d.master_mode = mode == 3 ? AMP_MASTER_SPLIT : mode == 4 ? AMP_MASTER_NONE : AMP_MASTER_F32;
          d.stochastic = mode == 1 || mode == 4;
          if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_optimizer_add_tensor(o, &d) != AMP_OK) {
            EXPECT(0, "%s, moments %d, mode %d: %s", kind_name(kinds[k]), moms[mo], mode, amp_last_error());
            ok = 0;
          }
          for (st = 0; ok && st < 3; st++) {
            for (j = 0; j < n; j++) amp__store(g, AMP_BF16, j, rndf() * (st == 1 ? 0.01f : 0.3f));
            if (amp_optimizer_step(o) != AMP_OK) { EXPECT(0, "step: %s", amp_last_error()); ok = 0; }
          }
          if (ok) len[run] = state_of(o, snap[run]);
          amp_optimizer_destroy(o);
          free(w); free(g);
        }
        omp_set_num_threads(nth);
        if (!ok) continue;
        for (run = 1; run < 3; run++) {
          for (j = 0; j < len[0] && snap[0][j] == snap[run][j]; j++) {}
          EXPECT(len[0] == len[run] && j == len[0], "%s, moments %d, mode %d: %d threads differ from one at byte %zu of %zu",
                 kind_name(kinds[k]), moms[mo], mode, team[run], j, len[0]);
        }
        cases++;
      }
  EXPECT(cases == 80, "%d cases compared", cases);
  free(snap[0]); free(snap[1]); free(snap[2]);
}
#endif

int main(void) {
  int p;
  make_maps();
  make_e4m3();
  RUN(eight_bit_maps_are_the_described_dynamic_maps);
  RUN(eight_bit_permute_path_matches_the_gathers_on_every_float);
  RUN(bf16_moments_match_the_reference_at_every_simd_level);
  for (p = 0; p < q8_paths(); p++) {   /* the 8-bit tests on each vector path */
    if (q8_paths() > 1) { q8_path(p); printf("8-bit vector path: %s\n", p ? "permutes (AVX-512), plain loads (AVX2)" : "gathers"); }
    RUN(eight_bit_moments_match_the_reference_at_every_simd_level);
    RUN(eight_bit_vector_loops_match_the_plain_loop_on_edge_values);
    RUN(moment_loops_match_level_0_on_every_size);
  }
  q8_path(-1);
  RUN(fp8_table_and_encoder_agree_with_the_library);
  RUN(fp8_moments_match_the_reference_at_every_simd_level);
  RUN(fp32_moments_differ_from_the_bf16_and_fp8_references);
  RUN(fp8_moments_of_zero_keep_scale_one);
  RUN(spikes_skip_and_leave_every_moment_type_bit_for_bit);
  RUN(checkpoints_keep_moments_as_kept_and_move_between_types);
  RUN(eight_bit_overflowed_moment_keeps_its_block);
  RUN(state_bytes_count_every_byte_kept);
  RUN(bad_moments_are_refused_naming_the_value);
#ifdef _OPENMP
  RUN(threads_give_one_threads_bits);
#endif
  remove(CKPT); remove(CKPT2);
  TEST_END();
}
