/* tests/test_moments.c - optimizer moments stored in bf16 (amp_tensor_desc.moments = AMP_MOMENTS_BF16).
   Each kind with moments (Adam, AdamW, SGD with momentum, Lion) in each master mode (F32, SPLIT,
   NONE), with three tensors in two param groups, f32 / bf16 / f16 grads, f32 / bf16 / f16 model
   copies, clipping, gradient stats, a bf16 copy rounded to nearest or stochastically, is checked bit
   for bit against a reference written here: the f32 step of the kind from its formulas on the
   moments widened from bf16, then the moments rounded back to bf16 (to nearest even, or
   stochastically with the moment streams of the documented key, also written here). Every SIMD
   level the CPU has gives those bits; a skipped (overflow) step leaves every byte as it was; a run
   resumed from a checkpoint equals the straight one; a file moves between fp32 and bf16 moments by
   the documented rule (widen exactly / round to nearest even); amp_optimizer_state_bytes counts
   the bytes kept; bad moments values are refused naming the function and the value. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
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
/* the documented key: splitmix64's finaliser of (seed, update, tensor), element i's 16 bits; a moment's
   stream is the tensor's key hashed with the moment's number j (1: m, 2: v) */
static uint64_t mix(uint64_t z) {
  z ^= z >> 30; z *= 0xbf58476d1ce4e5b9ull; z ^= z >> 27; z *= 0x94d049bb133111ebull; z ^= z >> 31;
  return z;
}
static uint64_t key_of(uint64_t seed, int64_t t, uint64_t tensor) {
  return mix(mix(seed ^ mix((uint64_t)t + 0x9e3779b97f4a7c15ull)) ^ (tensor * 0xd1b54a32d192ed03ull));
}
static uint64_t key_moment(uint64_t key, int j) { return mix(key + (uint64_t)j * 0xd1b54a32d192ed03ull); }
static uint32_t rbits(uint64_t key, uint64_t i) { return (uint32_t)(mix(key + (i + 1u) * 0x9e3779b97f4a7c15ull) >> 48); }

/* The arithmetic as IEEE single operations that no -Ofast build may fuse or reassociate; the
   coefficients' double arithmetic in AMP__EXACT_FP functions (no reciprocal for a division). */
#define MUL amp__fmul
#define ADD amp__fadd
#define SUB amp__fsub
#define DIV amp__fdiv

#define NT 3
#define NMAX 700   /* more than one block of the CPU loops (512) */
static const size_t LEN[NT] = {37, NMAX, 19};
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
    *p = SUB(w, MUL(step_size, DIV(*m, ADD(DIV(amp__fsqrt(*v), bc2), h->eps))));
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
  int sr[NT];
  unsigned char w[NT][NMAX * 4], g[NT][NMAX * 4];
  float p[NT][NMAX];                           /* the reference master */
  uint16_t m[NT][NMAX], v[NT][NMAX];           /* the reference moments, bf16 words */
  unsigned char ew[NT][NMAX * 4];              /* the model copy the reference expects */
} rig;

/* moments: the type the library keeps (the reference always rounds to bf16, so AMP_MOMENTS_F32 rigs are
   only stepped for checkpoint sources). */
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
static size_t snapshot(const rig *r, unsigned char *buf) {
  const amp_optimizer *o = r->o;
  size_t k = 0, i;
  for (i = 0; i < o->count; i++) {
    size_t n = o->t[i].n;
    memcpy(buf + k, o->t[i].w, n * amp_dtype_size(o->t[i].wtype)); k += n * amp_dtype_size(o->t[i].wtype);
    if (o->t[i].master) { memcpy(buf + k, o->t[i].master, n * 4); k += n * 4; }
    if (o->t[i].rem) { memcpy(buf + k, o->t[i].rem, n * 2); k += n * 2; }
    if (o->t[i].m) { memcpy(buf + k, o->t[i].m, n * 4); k += n * 4; }
    if (o->t[i].v) { memcpy(buf + k, o->t[i].v, n * 4); k += n * 4; }
    if (o->t[i].m16) { memcpy(buf + k, o->t[i].m16, n * 2); k += n * 2; }
    if (o->t[i].v16) { memcpy(buf + k, o->t[i].v16, n * 2); k += n * 2; }
  }
  memcpy(buf + k, &o->step, sizeof o->step); k += sizeof o->step;
  return k;
}
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
  float norm = amp_optimizer_grad_norm(r->o), clip = 1.0f;
  int i;
  size_t j;
  {
    float cc = DIV(MAXN, ADD(norm, 1e-6f));
    if (cc < 1.0f) clip = cc;
  }
  r->t++;
  for (i = 0; i < NT; i++) {
    uint64_t key = key_of(SEED, r->t, (uint64_t)i);
    float lr = MUL(r->h.lr, LRS[i]), wd = i == 1 ? WDS[1] : r->h.wd;
    for (j = 0; j < LEN[i]; j++) {
      float m = widen(r->m[i][j]), v = widen(r->v[i][j]);
      float g = MUL(amp__load(r->g[i], r->gt[i], j), clip);
      ref_elem(&r->h, r->t, lr, wd, &r->p[i][j], &m, &v, g);
      if (r->sr[i]) {
        r->m[i][j] = sr16(m, rbits(key_moment(key, 1), j));
        r->v[i][j] = r->nm == 2 ? sr16(v, rbits(key_moment(key, 2), j)) : 0;
      } else {
        r->m[i][j] = rne16(m);
        r->v[i][j] = r->nm == 2 ? rne16(v) : 0;
      }
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
  }
}
AMP__EXACT_END

/* The library's state against the reference's, element by element. */
static int rig_matches(const rig *r, const char *what) {
  int i, bad = 0;
  size_t j;
  for (i = 0; i < NT && !bad; i++) {
    const amp__tensor *t = &r->o->t[i];
    for (j = 0; j < LEN[i] && !bad; j++) {
      float mast = t->master ? t->master[j]
                   : t->rem  ? amp__split_decode(((const amp_bf16 *)t->w)[j], t->rem[j])
                             : amp_bf16_to_f32(((const amp_bf16 *)t->w)[j]);
      int ok = bits(mast) == bits(r->p[i][j]) && t->m16 && t->m16[j] == r->m[i][j] &&
               (r->nm < 2 || (t->v16 && t->v16[j] == r->v[i][j])) &&
               memcmp((const char *)t->w + j * amp_dtype_size(t->wtype), r->ew[i] + j * amp_dtype_size(t->wtype),
                      amp_dtype_size(t->wtype)) == 0;
      if (!ok) {
        EXPECT(0, "%s: tensor %d elem %zu (update %ld): master %a (reference %a), m 0x%04x (0x%04x), v 0x%04x (0x%04x)",
               what, i, j, (long)r->t, (double)mast, (double)r->p[i][j], t->m16 ? t->m16[j] : 0xdead, r->m[i][j],
               t->v16 ? t->v16[j] : 0, r->v[i][j]);
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
static void run_level(int level, int record) {
  static const amp_optim_kind kinds[4] = {AMP_ADAMW, AMP_ADAM, AMP_SGD, AMP_LION};
  static rig a, b;
  static unsigned char sa[SNAP], sb[SNAP];
  int ki, cs, k, ncase = 0;
  t_simd_level(level);
  amp__opt_simd = level;
  for (ki = 0; ki < 4; ki++)
    for (cs = 0; cs < 4; cs++) {   /* F32 nearest, F32 stochastic, SPLIT, NONE */
      int mode = cs <= 1 ? AMP_MASTER_F32 : cs == 2 ? AMP_MASTER_SPLIT : AMP_MASTER_NONE;
      char what[128];
      size_t la, lb;
      snprintf(what, sizeof what, "level %d, %s, master_mode %d, stochastic %d", level, kind_name(kinds[ki]), mode,
               cs == 1);
      if (!rig_make(&a, kinds[ki], mode, cs == 1, AMP_MOMENTS_BF16)) { EXPECT(0, "%s: setup: %s", what, amp_last_error()); continue; }
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
      if (!rig_make(&b, kinds[ki], mode, cs == 1, AMP_MOMENTS_BF16)) { EXPECT(0, "%s: setup 2", what); rig_free(&a); continue; }
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
  for (l = 0; l < t_simd_levels(); l++) run_level(l, l == 0);
}

/* The reference must be able to fail: fp32 moments do not give the bf16 reference's bits. */
static void fp32_moments_differ_from_the_bf16_reference(void) {
  static rig a;
  int k, same = 1, i;
  size_t j;
  if (!rig_make(&a, AMP_ADAMW, AMP_MASTER_F32, 0, AMP_MOMENTS_F32)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  for (k = 0; k < 3; k++) {
    make_grads(&a, k);
    amp_optimizer_step(a.o);
    ref_step(&a);
  }
  for (i = 0; i < NT; i++)
    for (j = 0; j < LEN[i]; j++) same &= bits(a.o->t[i].master[j]) == bits(a.p[i][j]);
  EXPECT(!same, "fp32 moments gave the bf16-moment reference's masters bit for bit");
  EXPECT(a.o->t[0].m16 == NULL && a.o->t[0].m != NULL, "fp32 moments kept as bf16");
  rig_free(&a);
}

/* ---- checkpoints: the file holds the bf16 words; a file moves between moment types ------------- */

static unsigned char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *p;
  long len;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END); len = ftell(f); fseek(f, 0, SEEK_SET);
  p = (unsigned char *)malloc((size_t)len + 1);
  *n = fread(p, 1, (size_t)len, f);
  fclose(f);
  return p;
}

static void checkpoints_keep_bf16_words_and_move_between_types(void) {
  static rig a, f, h;
  size_t n = 0, want = 32 + 56 + 416 + 4, j;
  unsigned char *file;
  uint32_t version = 0;
  int i, k, ok;
  /* a bf16-moment AdamW run: a version-3 file whose moments are the bf16 words themselves */
  if (!rig_make(&a, AMP_ADAMW, AMP_MASTER_F32, 0, AMP_MOMENTS_BF16)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  for (k = 0; k < 4; k++) { make_grads(&a, k); amp_optimizer_step(a.o); }
  EXPECT(amp_checkpoint_save(CKPT, a.o, NULL) == AMP_OK, "save: %s", amp_last_error());
  file = read_all(CKPT, &n);
  for (i = 0; i < NT; i++) want += 20 + LEN[i] * (4 + 2 * 2);
  EXPECT(file && n == want, "the file holds %zu bytes, want %zu (20-byte tensor records, bf16 moments)", n, want);
  if (file && n == want) {
    size_t at = 32 + 56 + 416;
    uint32_t mom;
    memcpy(&version, file + 8, 4);
    EXPECT(version == 3, "version %u, want 3", (unsigned)version);
    memcpy(&mom, file + at + 16, 4);
    EXPECT(mom == AMP_MOMENTS_BF16, "tensor 0's moments field %u", (unsigned)mom);
    at += 20 + 4 * LEN[0];
    EXPECT(memcmp(file + at, a.o->t[0].m16, 2 * LEN[0]) == 0, "tensor 0's m is not its bf16 words");
    EXPECT(memcmp(file + at + 2 * LEN[0], a.o->t[0].v16, 2 * LEN[0]) == 0, "tensor 0's v is not its bf16 words");
  }
  free(file);
  /* into fp32 moments: widened exactly; masters and step as saved */
  if (!rig_make(&f, AMP_ADAMW, AMP_MASTER_F32, 0, AMP_MOMENTS_F32)) { EXPECT(0, "setup f: %s", amp_last_error()); rig_free(&a); return; }
  EXPECT(amp_checkpoint_load(CKPT, f.o, NULL) == AMP_OK, "bf16 file into fp32 moments: %s", amp_last_error());
  ok = amp_optimizer_step_count(f.o) == amp_optimizer_step_count(a.o);
  for (i = 0; i < NT; i++)
    for (j = 0; j < LEN[i]; j++)
      ok &= bits(f.o->t[i].m[j]) == bits(amp_bf16_to_f32(a.o->t[i].m16[j])) &&
            bits(f.o->t[i].v[j]) == bits(amp_bf16_to_f32(a.o->t[i].v16[j])) &&
            bits(f.o->t[i].master[j]) == bits(a.o->t[i].master[j]);
  EXPECT(ok, "a bf16 file loaded into fp32 moments is not its moments widened (and masters as saved)");
  /* fp32 moments stepped further, saved (version 2, as before), loaded into bf16 moments: rounded to nearest even */
  for (k = 4; k < 6; k++) { make_grads(&f, k); amp_optimizer_step(f.o); }
  EXPECT(amp_checkpoint_save(CKPT2, f.o, NULL) == AMP_OK, "save 2: %s", amp_last_error());
  file = read_all(CKPT2, &n);
  if (file) { memcpy(&version, file + 8, 4); EXPECT(version == 2, "an fp32-moment file has version %u, want 2", (unsigned)version); }
  free(file);
  if (!rig_make(&h, AMP_ADAMW, AMP_MASTER_F32, 0, AMP_MOMENTS_BF16)) { EXPECT(0, "setup h"); rig_free(&a); rig_free(&f); return; }
  EXPECT(amp_checkpoint_load(CKPT2, h.o, NULL) == AMP_OK, "fp32 file into bf16 moments: %s", amp_last_error());
  ok = 1;
  for (i = 0; i < NT; i++)
    for (j = 0; j < LEN[i]; j++)
      ok &= h.o->t[i].m16[j] == rne16(f.o->t[i].m[j]) && h.o->t[i].v16[j] == rne16(f.o->t[i].v[j]) &&
            bits(h.o->t[i].master[j]) == bits(f.o->t[i].master[j]);
  EXPECT(ok, "an fp32 file loaded into bf16 moments is not its moments rounded to nearest even");
  /* a file refused by a kind without moments' record check: a corrupt moments field */
  file = read_all(CKPT, &n);
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
  d.moments = AMP_MOMENTS_8BIT;
  st = amp_optimizer_add_tensor(o, &d);
  EXPECT(st == AMP_ERR_UNSUPPORTED && strstr(amp_last_error(), "AMP_MOMENTS_8BIT"), "8BIT: %s '%s'",
         amp_status_string(st), amp_last_error());
  EXPECT(o->count == 0 && amp_optimizer_state_bytes(o) == 0, "a refused add added a tensor");
  d.moments = AMP_MOMENTS_BF16;
  EXPECT(amp_optimizer_add_tensor(o, &d) == AMP_OK, "a good add after the refusals: %s", amp_last_error());
  amp_optimizer_destroy(o);
  /* a kind without moments takes only AMP_MOMENTS_F32 */
  c = amp_optimizer_defaults(AMP_SGD);
  amp_optimizer_create(&o, amp_cpu(), &c);
  st = amp_optimizer_add_tensor(o, &d);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "AMP_MOMENTS_BF16") && strstr(amp_last_error(), "without momentum"),
         "SGD without momentum, bf16 moments: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(o->count == 0, "the refused tensor was added");
  amp_optimizer_destroy(o);
}

int main(void) {
  RUN(bf16_moments_match_the_reference_at_every_simd_level);
  RUN(fp32_moments_differ_from_the_bf16_reference);
  RUN(checkpoints_keep_bf16_words_and_move_between_types);
  RUN(state_bytes_count_every_byte_kept);
  RUN(bad_moments_are_refused_naming_the_value);
  remove(CKPT); remove(CKPT2);
  TEST_END();
}
