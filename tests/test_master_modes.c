/* tests/test_master_modes.c - amp_tensor_desc.master_mode AMP_MASTER_SPLIT and AMP_MASTER_NONE.
   SPLIT: the encoding (bf16 model copy + 16-bit remainder) round-trips every fp32 bit pattern
   (sampled under sanitizers), the model copy is the nearest bf16 (amp_f32_to_bf16's but at the
   ties the manual names); an optimizer with split masters gives the fp32-master optimizer's masters
   bit for bit over many steps of SGD (plain, momentum), Adam and AdamW with skipped steps between,
   and a checkpoint moves between the two exactly. NONE: stochastic in-place updates follow the
   fp32 trajectory on average, are reproducible from the seed, and a skipped step changes nothing. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <string.h>

#define CKPT "build/test/master_modes.ckpt"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static double rndu(void) { return ((double)rnd() + 0.5) / 2147483648.0; }
static float rndn(void) { return (float)(sqrt(-2.0 * log(rndu())) * cos(6.283185307179586 * rndu())); }
static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static int is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
static const char *kname(amp_optim_kind k) { return k == AMP_SGD ? "SGD" : k == AMP_ADAM ? "Adam" : "AdamW"; }

/* Tensor i's master as the optimizer holds it (decoded for SPLIT, widened for NONE): the same
   device operation a checkpoint save reads it with. */
static int read_master(amp_optimizer *o, size_t i, float *out) {
  char msg[AMP__MSG] = "";
  return amp__be(o->dev)->optim_tensor_io(o, i, 0, out, 0, msg, sizeof msg) == AMP_OK;
}

/* ---- the encoding ---------------------------------------------------------------------------- */

/* One pattern: 0 when it checks out, else prints and returns 1. ties counts the patterns where the
   split copy is the other nearest neighbour (an exact tie with an even kept part). */
static int check_pattern(uint32_t u, unsigned long *ties) {
  float x = from_bits(u), y;
  amp_bf16 hi, rne = amp_f32_to_bf16(x);
  uint16_t lo;
  amp__split_encode(x, &hi, &lo);
  y = amp__split_decode(hi, lo);
  if (is_nan_bits(u)) {
    if (hi != rne || bits(y) != (uint32_t)hi << 16 || !is_nan_bits(bits(y))) {
      EXPECT(0, "NaN %08x: hi %04x lo %04x decodes to %08x; want hi %04x (amp_f32_to_bf16), lo 0, a NaN", u, hi, lo, bits(y), rne);
      return 1;
    }
    return 0;
  }
  if (bits(y) != u) {
    EXPECT(0, "%08x (%a): hi %04x lo %04x decodes to %08x", u, (double)x, hi, lo, bits(y));
    return 1;
  }
  if (hi != rne) {
    /* allowed only at an exact tie whose kept part is even: the other nearest neighbour, away from 0 */
    if ((u & 0xffffu) != 0x8000u || ((u >> 16) & 1u) || hi != (amp_bf16)((u >> 16) + 1u)) {
      EXPECT(0, "%08x (%a): split copy %04x, nearest-even %04x: not the tie rule", u, (double)x, hi, rne);
      return 1;
    }
    ++*ties;
  }
  return 0;
}

static void split_encoding_round_trips_every_pattern(void) {
  static const uint32_t named[] = {
    0x00000000u, 0x80000000u,                 /* +-0 */
    0x00000001u, 0x80000001u, 0x00007fffu, 0x00008000u, 0x00018000u, 0x0000ffffu,   /* subnormals, ties */
    0x007f7fffu, 0x007f8000u, 0x007fffffu, 0x00800000u,   /* up to the smallest normal */
    0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f80ffffu, 0xbf808000u, 0xbf818000u,
    0x7f7f7fffu, 0x7f7f8000u, 0x7f7f8001u, 0x7f7fffffu, 0xff7f8000u, 0xff7fffffu,   /* rounding up to inf */
    0x7f800000u, 0xff800000u,                 /* +-inf */
    0x7f800001u, 0x7f80ffffu, 0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u, 0xffffffffu  /* NaN */
  };
  unsigned long ties = 0, bad = 0, checked = 0;
  uint64_t u, stride = t_quick() ? 65521u : 1u;
  size_t k;
  for (k = 0; k < sizeof named / sizeof named[0]; k++) bad += (unsigned long)check_pattern(named[k], &ties);
  {   /* the named finite values decode to themselves and the ones beyond FLT_MAX's last bf16 give inf */
    amp_bf16 hi; uint16_t lo;
    amp__split_encode(from_bits(0x7f7fffffu), &hi, &lo);
    EXPECT(hi == 0x7f80u && lo == 0xffffu, "FLT_MAX: hi %04x lo %04x, want 7f80 (inf, as amp_f32_to_bf16) and ffff", hi, lo);
    amp__split_encode(from_bits(0x7f800001u), &hi, &lo);
    EXPECT(hi == 0x7fc0u && lo == 0, "signalling NaN 7f800001: hi %04x lo %04x, want a quiet NaN 7fc0 (never inf)", hi, lo);
  }
  ties = 0;
  for (u = 0; u <= 0xffffffffull && bad < 12; u += stride, checked++) bad += (unsigned long)check_pattern((uint32_t)u, &ties);
  printf("  %lu patterns checked (%s), %lu ties take the other nearest neighbour\n", checked,
         stride == 1 ? "all of them" : "sampled", ties);
  if (stride == 1)   /* one per even top half (32768), but the 128 even top halves of NaNs */
    EXPECT(ties == 32768ul - 128ul, "%lu ties with an even kept part, want %lu", ties, 32768ul - 128ul);
}

/* ---- the split master against the fp32 master -------------------------------------------------- */

enum { N0 = 37, N1 = 1100, N = N0 + N1 };

typedef struct { amp_optim_kind kind; float momentum; int nesterov; float lr, wd; amp_dtype gt; int seeded; float gscale; } split_case;

/* A: bf16 model copy + fp32 master; B: the same with AMP_MASTER_SPLIT. The same grads every step,
   every 6th step holding a NaN or inf (skipped: B's bytes must not change). After every step B's
   decoded master equals A's bit for bit, B's model copy is A's but at the documented ties, and
   B's moments are A's. Returns the ties seen. */
static unsigned long split_run(const split_case *sc, int steps) {
  static amp_bf16 wa[N], wb[N];
  static float g[N], seed[N], ma[N], mb[N], before_m[2 * N];
  static uint16_t before_r[N];
  static amp_bf16 before_w[N];
  amp_optimizer *oa = NULL, *ob = NULL;
  amp_optim_config c = amp_optimizer_defaults(sc->kind);
  amp_tensor_desc d;
  unsigned long ties = 0;
  size_t gs = amp_dtype_size(sc->gt), i, t;
  int s, grp = 0, nm;
  c.lr = sc->lr; c.weight_decay = sc->wd; c.momentum = sc->momentum; c.nesterov = sc->nesterov; c.max_grad_norm = 50.0f;
  for (i = 0; i < N; i++) { seed[i] = rndn(); wa[i] = wb[i] = amp_f32_to_bf16(seed[i]); }
  EXPECT(amp_optimizer_create(&oa, amp_cpu(), &c) == AMP_OK && amp_optimizer_create(&ob, amp_cpu(), &c) == AMP_OK,
         "%s", amp_last_error());
  if (!oa || !ob) { amp_optimizer_destroy(oa); amp_optimizer_destroy(ob); return 0; }
  EXPECT(amp_optimizer_add_group(oa, 0.5f, 0.0f, &grp) == AMP_OK && amp_optimizer_add_group(ob, 0.5f, 0.0f, &grp) == AMP_OK,
         "%s", amp_last_error());
  for (t = 0; t < 2; t++) {   /* tensor 0 in group 1 (no decay, half the lr), tensor 1 in group 0 */
    size_t off = t ? N0 : 0, n = t ? N1 : N0;
    memset(&d, 0, sizeof d);
    d.dtype = AMP_BF16; d.grad_dtype = sc->gt == AMP_F32 ? AMP_GRAD_F32 : sc->gt; d.grads = (char *)g + off * gs; d.n = n; d.group = t ? 0 : grp;
    d.master = sc->seeded ? seed + off : NULL;
    d.weights = wa + off;
    EXPECT(amp_optimizer_add_tensor(oa, &d) == AMP_OK, "%s", amp_last_error());
    d.weights = wb + off; d.master_mode = AMP_MASTER_SPLIT;
    EXPECT(amp_optimizer_add_tensor(ob, &d) == AMP_OK, "%s", amp_last_error());
  }
  nm = sc->kind == AMP_SGD ? (sc->momentum != 0.0f) : 2;
  for (s = 0; s < steps; s++) {
    int bad = s % 6 == 4;
    for (i = 0; i < N; i++) amp__store(g, sc->gt, i, rndn() * sc->gscale);
    if (bad) {   /* only B steps it: a skip must leave every byte of B as it was */
      size_t where = rnd() % N;
      amp__store(g, sc->gt, where, s % 12 == 4 ? NAN : -INFINITY);
      memcpy(before_w, wb, sizeof wb);
      for (t = 0; t < 2; t++) {
        memcpy(before_r + (t ? N0 : 0), ob->t[t].rem, ob->t[t].n * 2);
        if (nm) memcpy(before_m + (t ? 2 * N0 : 0), ob->t[t].m, ob->t[t].n * 4 * (size_t)nm);
      }
      EXPECT(amp_optimizer_step(ob) == AMP_OK && amp_optimizer_last_skipped(ob) == 1, "%s", amp_last_error());
      EXPECT(memcmp(before_w, wb, sizeof wb) == 0, "%s step %d: a skipped step changed the split model copy", kname(sc->kind), s);
      for (t = 0; t < 2; t++) {
        EXPECT(memcmp(before_r + (t ? N0 : 0), ob->t[t].rem, ob->t[t].n * 2) == 0, "step %d: a skipped step changed remainders", s);
        if (nm) EXPECT(memcmp(before_m + (t ? 2 * N0 : 0), ob->t[t].m, ob->t[t].n * 4 * (size_t)nm) == 0,
                       "step %d: a skipped step changed moments", s);
      }
      continue;
    }
    EXPECT(amp_optimizer_step(oa) == AMP_OK && amp_optimizer_step(ob) == AMP_OK, "%s", amp_last_error());
    for (t = 0; t < 2; t++) {
      size_t off = t ? N0 : 0, n = ob->t[t].n;
      int fails = 0;
      memcpy(ma, oa->t[t].master, n * 4);
      EXPECT(read_master(ob, t, mb), "%s", amp_last_error());
      for (i = 0; i < n && fails < 3; i++) {
        uint32_t ua = bits(ma[i]);
        amp_bf16 want = amp_f32_to_bf16(ma[i]);
        if (ua != bits(mb[i])) {
          fails++;
          EXPECT(0, "%s step %d tensor %zu elem %zu: split master %08x, fp32 master %08x", kname(sc->kind), s, t, i, bits(mb[i]), ua);
        }
        if (wa[off + i] != want) { fails++; EXPECT(0, "fp32-master copy %04x, want %04x", wa[off + i], want); }
        if (wb[off + i] != want) {
          if ((ua & 0xffffu) == 0x8000u && !((ua >> 16) & 1u) && wb[off + i] == (amp_bf16)((ua >> 16) + 1u)) ties++;
          else { fails++; EXPECT(0, "%s step %d elem %zu: split copy %04x, nearest %04x (master %08x)", kname(sc->kind), s, i,
                                 wb[off + i], want, ua); }
        }
      }
      if (nm && memcmp(oa->t[t].m, ob->t[t].m, n * 4 * (size_t)nm) != 0)
        EXPECT(0, "%s step %d tensor %zu: the moments differ", kname(sc->kind), s, t);
    }
  }
  EXPECT(amp_optimizer_step_count(oa) == amp_optimizer_step_count(ob), "step counts %ld, %ld",
         amp_optimizer_step_count(oa), amp_optimizer_step_count(ob));
  amp_optimizer_destroy(oa); amp_optimizer_destroy(ob);
  return ties;
}

static void split_master_equals_the_fp32_master(void) {
  const split_case cases[] = {
    {AMP_SGD, 0.0f, 0, 0.01f, 0.0f, AMP_F32, 1, 1.0f},
    {AMP_SGD, 0.9f, 0, 0.01f, 0.05f, AMP_BF16, 1, 1.0f},
    {AMP_SGD, 0.9f, 1, 0.003f, 0.0f, AMP_F16, 0, 1.0f},
    {AMP_ADAM, 0.0f, 0, 0.001f, 0.01f, AMP_F32, 1, 1.0f},
    {AMP_ADAMW, 0.0f, 0, 0.002f, 0.1f, AMP_BF16, 0, 1.0f},
    {AMP_ADAMW, 0.0f, 0, 1e-5f, 0.01f, AMP_F32, 1, 1.0f},
  };
  int steps = t_quick() ? 14 : 120;
  size_t k;
  rng_state = 4242;
  for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    unsigned long ties = split_run(&cases[k], steps);
    printf("  %s (momentum %g%s, grads %s): %d steps, %lu ties took the other neighbour\n", kname(cases[k].kind),
           (double)cases[k].momentum, cases[k].nesterov ? ", nesterov" : "", cases[k].gt == AMP_F32 ? "f32" :
           cases[k].gt == AMP_BF16 ? "bf16" : "f16", steps, ties);
  }
}

/* Masters with few significant bits (bf16 weights, bf16 grads, lr a power of two, plain SGD) hit
   exact ties often: the split stays exact there, and the model copy takes the tie rule. */
static void split_master_is_exact_at_ties(void) {
  split_case c = {AMP_SGD, 0.0f, 0, 0.0078125f, 0.0f, AMP_BF16, 0, 1.0f};
  unsigned long ties;
  rng_state = 99;
  ties = split_run(&c, t_quick() ? 10 : 40);
  EXPECT(ties > 0, "no tie was reached: the case does not exercise the tie rule (%lu)", ties);
}

/* ---- checkpoints --------------------------------------------------------------------------- */

static amp_optimizer *make_one(amp_optim_config *c, amp_bf16 *w, const float *g, int mode, int stochastic) {
  amp_optimizer *o = NULL;
  amp_tensor_desc d;
  if (amp_optimizer_create(&o, amp_cpu(), c) != AMP_OK) return NULL;
  memset(&d, 0, sizeof d);
  d.weights = w; d.dtype = AMP_BF16; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = N; d.master_mode = mode; d.stochastic = stochastic;
  if (amp_optimizer_add_tensor(o, &d) != AMP_OK) { amp_optimizer_destroy(o); return NULL; }
  return o;
}

static void checkpoints_move_between_fp32_split_and_none(void) {
  static amp_bf16 wa[N], wb[N], wc[N], wd[N];
  static float g[N], ma[N], mb[N];
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  amp_optimizer *oa, *ob, *oc, *od;
  size_t i;
  int s;
  c.lr = 0.003f; c.weight_decay = 0.1f; c.seed = 7;
  rng_state = 5;
  for (i = 0; i < N; i++) wa[i] = amp_f32_to_bf16(rndn());
  memcpy(wb, wa, sizeof wa); memcpy(wc, wa, sizeof wa); memcpy(wd, wa, sizeof wa);
  oa = make_one(&c, wa, g, AMP_MASTER_F32, 0);
  ob = make_one(&c, wb, g, AMP_MASTER_SPLIT, 0);
  oc = make_one(&c, wc, g, AMP_MASTER_F32, 1);    /* fp32 master, stochastic copy */
  od = make_one(&c, wd, g, AMP_MASTER_NONE, 1);
  EXPECT(oa && ob && oc && od, "%s", amp_last_error());
  if (!oa || !ob || !oc || !od) goto done;
  for (s = 0; s < 9; s++) {
    for (i = 0; i < N; i++) g[i] = rndn();
    EXPECT(amp_optimizer_step(oa) == AMP_OK && amp_optimizer_step(oc) == AMP_OK, "%s", amp_last_error());
  }
  /* fp32 -> split: the master rebuilt exactly, the copy its nearest bf16 (the split rule) */
  EXPECT(amp_checkpoint_save(CKPT, oa, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_checkpoint_load(CKPT, ob, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_optimizer_step_count(ob) == 9, "split: step count %ld after the load, want 9", amp_optimizer_step_count(ob));
  EXPECT(read_master(ob, 0, mb), "%s", amp_last_error());
  for (i = 0; i < N; i++) {
    uint32_t u = bits(oa->t[0].master[i]);
    if (bits(mb[i]) != u || wb[i] != (amp_bf16)((u + 0x8000u) >> 16)) {
      EXPECT(0, "elem %zu: loaded split master %08x copy %04x, saved master %08x", i, bits(mb[i]), wb[i], u);
      break;
    }
  }
  EXPECT(memcmp(oa->t[0].m, ob->t[0].m, 2 * N * 4) == 0, "the loaded moments differ");
  for (s = 0; s < 5; s++) {   /* and they go on together */
    for (i = 0; i < N; i++) g[i] = rndn();
    EXPECT(amp_optimizer_step(oa) == AMP_OK && amp_optimizer_step(ob) == AMP_OK, "%s", amp_last_error());
  }
  EXPECT(read_master(ob, 0, mb) && memcmp(mb, oa->t[0].master, N * 4) == 0, "5 steps after the load: the masters differ");
  /* split -> fp32: the file holds the decoded master */
  EXPECT(amp_checkpoint_save(CKPT, ob, NULL) == AMP_OK, "%s", amp_last_error());
  memcpy(ma, oa->t[0].master, sizeof ma);
  for (i = 0; i < N; i++) oa->t[0].master[i] = 0.0f;
  EXPECT(amp_checkpoint_load(CKPT, oa, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(memcmp(ma, oa->t[0].master, N * 4) == 0, "split -> fp32: the master changed on the way");
  /* fp32 with a stochastic copy -> none: the weights are that run's stochastic copy, bit for bit
     (the same key: seed, update count 9, tensor 0) */
  EXPECT(amp_checkpoint_save(CKPT, oc, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_checkpoint_load(CKPT, od, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(memcmp(wc, wd, sizeof wc) == 0, "none: the loaded weights are not the stochastic copy of the saved master");
  EXPECT(read_master(od, 0, mb), "%s", amp_last_error());
  for (i = 0; i < N; i++) if (bits(mb[i]) != (uint32_t)wd[i] << 16) { EXPECT(0, "none: master %zu is not its weight", i); break; }
done:
  amp_optimizer_destroy(oa); amp_optimizer_destroy(ob); amp_optimizer_destroy(oc); amp_optimizer_destroy(od);
}

/* ---- no master ------------------------------------------------------------------------------- */

/* lr * g is about a 40th of a bf16 step: round to nearest would never move the weights; stochastic
   rounding must follow the fp32 run on average. Two runs with one seed give the same bits, another
   seed other bits; a skipped step changes nothing. */
static void none_follows_the_fp32_trajectory_on_average(void) {
  enum { M = 4096 };
  static amp_bf16 w0[M], wf[M], wn[M], wr[M], wo[M], before[M];
  static float g[M], before_m[2 * M];
  amp_optim_kind kinds[2] = {AMP_SGD, AMP_ADAM};
  int k;
  for (k = 0; k < 2; k++) {
    amp_optim_config c = amp_optimizer_defaults(kinds[k]);
    amp_optim_config c2;
    amp_optimizer *of = NULL, *on = NULL, *orr = NULL, *oo = NULL;
    amp_tensor_desc d;
    int s, steps = t_quick() ? 120 : 600, nm = kinds[k] == AMP_SGD ? 1 : 2;
    double mean0 = 0, meanf = 0, meann = 0, sigma, ulp = 0x1p-8;   /* the weights stay in [0.5, 1) */
    size_t i;
    c.lr = kinds[k] == AMP_SGD ? 1e-4f : 1e-4f; c.seed = 1234;
    if (kinds[k] == AMP_SGD) c.momentum = 0.5f;
    rng_state = 31 + (uint64_t)k;
    for (i = 0; i < M; i++) { w0[i] = amp_f32_to_bf16(0.9f + 0.05f * (float)rndu()); g[i] = 0.25f + 0.5f * (float)rndu(); }
    memcpy(wf, w0, sizeof w0); memcpy(wn, w0, sizeof w0); memcpy(wr, w0, sizeof w0); memcpy(wo, w0, sizeof w0);
    c2 = c; c2.seed = 1235;
    amp_optimizer_create(&of, amp_cpu(), &c); amp_optimizer_create(&on, amp_cpu(), &c);
    amp_optimizer_create(&orr, amp_cpu(), &c); amp_optimizer_create(&oo, amp_cpu(), &c2);
    EXPECT(of && on && orr && oo, "%s", amp_last_error());
    if (!of || !on || !orr || !oo) goto next;
    memset(&d, 0, sizeof d);
    d.dtype = AMP_BF16; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = M;
    d.weights = wf; EXPECT(amp_optimizer_add_tensor(of, &d) == AMP_OK, "%s", amp_last_error());
    d.master_mode = AMP_MASTER_NONE; d.stochastic = 1;
    d.weights = wn; EXPECT(amp_optimizer_add_tensor(on, &d) == AMP_OK, "%s", amp_last_error());
    d.weights = wr; EXPECT(amp_optimizer_add_tensor(orr, &d) == AMP_OK, "%s", amp_last_error());
    d.weights = wo; EXPECT(amp_optimizer_add_tensor(oo, &d) == AMP_OK, "%s", amp_last_error());
    for (s = 0; s < steps; s++) {
      if (s % 50 == 17) {   /* a NaN grad: NONE skips, nothing changes */
        float keep = g[s % M];
        g[s % M] = NAN;
        memcpy(before, wn, sizeof wn); memcpy(before_m, on->t[0].m, (size_t)nm * M * 4);
        EXPECT(amp_optimizer_step(on) == AMP_OK && amp_optimizer_last_skipped(on) == 1, "%s", amp_last_error());
        EXPECT(memcmp(before, wn, sizeof wn) == 0 && memcmp(before_m, on->t[0].m, (size_t)nm * M * 4) == 0,
               "%s step %d: a skipped step changed the weights or moments", kname(kinds[k]), s);
        g[s % M] = keep;
      }
      EXPECT(amp_optimizer_step(of) == AMP_OK && amp_optimizer_step(on) == AMP_OK && amp_optimizer_step(orr) == AMP_OK &&
             amp_optimizer_step(oo) == AMP_OK, "%s", amp_last_error());
    }
    for (i = 0; i < M; i++) {
      mean0 += amp_bf16_to_f32(w0[i]); meanf += of->t[0].master[i]; meann += amp_bf16_to_f32(wn[i]);
    }
    mean0 /= M; meanf /= M; meann /= M;
    /* each rounding adds an error of mean 0 and variance <= ulp^2 / 4; the mean of M elements */
    sigma = sqrt((double)steps * ulp * ulp / 4.0 / M);
    printf("  %s: start %.6f, fp32 master %.6f, in place (stochastic) %.6f after %d steps (sigma %.2g)\n", kname(kinds[k]),
           mean0, meanf, meann, steps, sigma);
    EXPECT(fabs(meanf - mean0) > 20.0 * sigma, "%s: the fp32 run moved %g only: the case cannot tell rounding modes apart",
           kname(kinds[k]), meanf - mean0);
    EXPECT(fabs(meann - meanf) < 5.0 * sigma, "%s: in-place mean %.7f, fp32 mean %.7f: off by %.3g (5 sigma %.3g)",
           kname(kinds[k]), meann, meanf, meann - meanf, 5.0 * sigma);
    EXPECT(memcmp(wn, wr, sizeof wn) == 0, "%s: two runs with seed %llu differ", kname(kinds[k]), (unsigned long long)c.seed);
    EXPECT(memcmp(wn, wo, sizeof wn) != 0, "%s: seeds %llu and %llu gave the same bits", kname(kinds[k]),
           (unsigned long long)c.seed, (unsigned long long)c2.seed);
    EXPECT(amp_optimizer_step_count(on) == steps, "step count %ld, want %d (the skips not counted)", amp_optimizer_step_count(on), steps);
  next:
    amp_optimizer_destroy(of); amp_optimizer_destroy(on); amp_optimizer_destroy(orr); amp_optimizer_destroy(oo);
  }
}

/* A seeded NONE tensor starts as the seed rounded stochastically with the key of update 0: the
   model copy an fp32-master tensor with a stochastic copy gets from the same seed. */
static void none_takes_a_seed_as_a_stochastic_copy(void) {
  static amp_bf16 wa[N], wb[N];
  static float g[N], seed[N];
  amp_optim_config c = amp_optimizer_defaults(AMP_SGD);
  amp_optimizer *oa = NULL, *ob = NULL;
  amp_tensor_desc d;
  size_t i;
  c.seed = 3;
  for (i = 0; i < N; i++) { seed[i] = rndn(); g[i] = 0.0f; }
  amp_optimizer_create(&oa, amp_cpu(), &c); amp_optimizer_create(&ob, amp_cpu(), &c);
  memset(&d, 0, sizeof d);
  d.dtype = AMP_BF16; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = N; d.master = seed; d.stochastic = 1;
  d.weights = wa; EXPECT(amp_optimizer_add_tensor(oa, &d) == AMP_OK, "%s", amp_last_error());
  d.weights = wb; d.master_mode = AMP_MASTER_NONE;
  EXPECT(amp_optimizer_add_tensor(ob, &d) == AMP_OK, "%s", amp_last_error());
  EXPECT(memcmp(wa, wb, sizeof wa) == 0, "the seeded in-place weights are not the stochastic copy of the seed");
  for (i = 0; i < N && wa[i] == amp_f32_to_bf16(seed[i]); i++) {}
  EXPECT(i < N, "every element rounded to nearest: the copy is not stochastic");
  amp_optimizer_destroy(oa); amp_optimizer_destroy(ob);
}

static int says(const char *a, const char *b) { return strstr(amp_last_error(), a) && strstr(amp_last_error(), b); }

static void custom_nothing(void *user, float *master, const float *grad, size_t n, size_t index, long step) {
  (void)user; (void)master; (void)grad; (void)n; (void)index; (void)step;
}

static void what_the_modes_refuse(void) {
  static amp_bf16 w[8];
  static float g[8];
  amp_optimizer *o = NULL, *oc = NULL;
  amp_optim_config c;
  amp_tensor_desc d;
  size_t n = 99;
  memset(&d, 0, sizeof d);
  d.weights = w; d.dtype = AMP_BF16; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = 8; d.master_mode = AMP_MASTER_SPLIT;
  amp_optimizer_create(&o, amp_cpu(), NULL);
  EXPECT(o && amp_optimizer_add_tensor(o, &d) == AMP_OK, "%s", amp_last_error());
  if (o) {
    EXPECT(amp_optimizer_master(o, 0, &n) == NULL && n == 0 &&
           says("amp_optimizer_master", "AMP_MASTER_SPLIT"), "amp_optimizer_master on a split tensor: '%s', n %zu",
           amp_last_error(), n);
  }
  c = amp_optimizer_defaults(AMP_SGD);
  c.kind = AMP_CUSTOM; c.custom_step = custom_nothing;
  amp_optimizer_create(&oc, amp_cpu(), &c);
  EXPECT(oc != NULL, "%s", amp_last_error());
  if (oc) {
    amp_status st = amp_optimizer_add_tensor(oc, &d);
    EXPECT(st == AMP_ERR_UNSUPPORTED && says("amp_optimizer_add_tensor", "AMP_CUSTOM") && amp_optimizer_count(oc) == 0,
           "split with AMP_CUSTOM: %s '%s'", amp_status_string(st), amp_last_error());
  }
  amp_optimizer_destroy(o); amp_optimizer_destroy(oc);
}

int main(void) {
  RUN(split_encoding_round_trips_every_pattern);
  RUN(split_master_equals_the_fp32_master);
  RUN(split_master_is_exact_at_ties);
  RUN(checkpoints_move_between_fp32_split_and_none);
  RUN(none_follows_the_fp32_trajectory_on_average);
  RUN(none_takes_a_seed_as_a_stochastic_copy);
  RUN(what_the_modes_refuse);
  TEST_END();
}
