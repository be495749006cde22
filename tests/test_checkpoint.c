/* tests/test_checkpoint.c - resume bit for bit; damaged, truncated and mismatched checkpoints are
   refused and change nothing; I/O errors name the path. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <string.h>
#include <stdio.h>

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static float rndf(void) { return (float)((double)rnd() / 2147483648.0 - 0.5); }

#define NA 70
#define NB 33
typedef struct { amp_f16 wa[NA], ga[NA]; amp_bf16 wb[NB]; float gb[NB]; amp_optimizer *o; amp_scaler *s; } run_t;

static void run_init(run_t *r, amp_optim_kind kind) {
  amp_optim_config c; amp_scaler_config sc; size_t i;
  memset(&c, 0, sizeof c); c.kind = kind; c.lr = 0.01f; c.momentum = kind == AMP_SGD ? 0.9f : 0.0f; c.weight_decay = 0.01f; c.max_grad_norm = 5.0f;
  sc = amp_scaler_preset(AMP_PRESET_DEEPSPEED); sc.growth_interval = 7;
  rng_state = 77;
  for (i = 0; i < NA; i++) r->wa[i] = amp_f32_to_f16(rndf());
  for (i = 0; i < NB; i++) r->wb[i] = amp_f32_to_bf16(rndf());
  if (amp_optimizer_create(&r->o, amp_cpu(), &c) || amp_scaler_create(&r->s, amp_cpu(), &sc) ||
      amp_optimizer_add(r->o, AMP_F16, r->wa, r->ga, NA) || amp_optimizer_add_mixed(r->o, AMP_BF16, r->wb, AMP_F32, r->gb, NB))
    EXPECT(0, "setup: %s", amp_last_error());
}
/* Step k's grads depend only on k, so a resumed run sees the same ones. */
static void run_steps(run_t *r, int from, int to) {
  int k; size_t i;
  for (k = from; k < to; k++) {
    float s = amp_scaler_get_scale(r->s);
    uint64_t save = rng_state;
    rng_state = 1000 + (uint64_t)k;
    for (i = 0; i < NA; i++) r->ga[i] = amp_f32_to_f16(rndf() * s * 0.01f);
    for (i = 0; i < NB; i++) r->gb[i] = rndf() * s;
    if (k % 9 == 4) r->ga[k % NA] = 0x7C00;   /* some overflows, so the scaler's state moves */
    rng_state = save;
    amp_scaler_step(r->s, r->o); amp_scaler_update(r->s);
  }
}
static void run_free(run_t *r) { amp_optimizer_destroy(r->o); amp_scaler_destroy(r->s); }

/* Everything a resume must restore, as bytes. */
static size_t state_bytes(const run_t *r, unsigned char *buf) {
  size_t k = 0, i;
  amp_scale_state st = {0, 0, 0, 0}; amp_scale_params pr = {0, 0, 0, 0, 0, 0, 0, 0, 0}; long sk = amp_scaler_skipped_steps(r->s), steps = amp_optimizer_step_count(r->o);
  amp_scaler_get_state(r->s, &st, &pr);
  memcpy(buf + k, &st, sizeof st); k += sizeof st;
  memcpy(buf + k, &pr, sizeof pr); k += sizeof pr;
  memcpy(buf + k, &sk, sizeof sk); k += sizeof sk;
  memcpy(buf + k, &steps, sizeof steps); k += sizeof steps;
  for (i = 0; i < r->o->count; i++) {
    size_t bytes = r->o->n[i] * 4 * (size_t)(1 + amp__o_moments(&r->o->cfg));
    memcpy(buf + k, r->o->master[i], bytes); k += bytes;
  }
  memcpy(buf + k, r->wa, sizeof r->wa); k += sizeof r->wa;
  memcpy(buf + k, r->wb, sizeof r->wb); k += sizeof r->wb;
  return k;
}

static const char *path = "build/test/ckpt_test.bin";

static void resume_after_save_and_load_is_bit_identical(void) {
  amp_optim_kind kinds[4] = {AMP_SGD, AMP_ADAM, AMP_ADAMW, AMP_SGD};
  int k;
  for (k = 0; k < 4; k++) {
    static unsigned char a[20000], b[20000];
    size_t na, nb;
    run_t *x = (run_t *)calloc(1, sizeof *x), *y = (run_t *)calloc(1, sizeof *y);
    run_init(x, kinds[k]); run_steps(x, 0, 100);
    na = state_bytes(x, a);
    run_free(x);
    run_init(x, kinds[k]); run_steps(x, 0, 50);
    EXPECT(amp_checkpoint_save(path, x->o, x->s) == AMP_OK, "save: %s", amp_last_error());
    run_free(x);
    run_init(y, kinds[k]);
    if (k == 3) { size_t i; for (i = 0; i < NA; i++) y->wa[i] = 0; }   /* the model copy is rewritten from the master */
    EXPECT(amp_checkpoint_load(path, y->o, y->s) == AMP_OK, "load: %s", amp_last_error());
    run_steps(y, 50, 100);
    nb = state_bytes(y, b);
    EXPECT(na == nb && memcmp(a, b, na) == 0, "kind %d: 100 steps straight differ from 50 + save + load + 50", (int)kinds[k]);
    EXPECT(amp_scaler_skipped_steps(y->s) > 5, "the run skipped steps: %ld", amp_scaler_skipped_steps(y->s));
    run_free(y);
    free(x); free(y);
  }
  remove(path);
}

static void save_and_load_of_one_half(void) {
  run_t *x = (run_t *)calloc(1, sizeof *x);
  amp_scaler *s2; amp_scaler_config sc;
  amp_status st;
  run_init(x, AMP_ADAM); run_steps(x, 0, 20);
  EXPECT(amp_checkpoint_save(path, NULL, x->s) == AMP_OK, "save scaler only: %s", amp_last_error());
  memset(&sc, 0, sizeof sc);
  amp_scaler_create(&s2, amp_cpu(), &sc);
  EXPECT(amp_checkpoint_load(path, NULL, s2) == AMP_OK, "load scaler only: %s", amp_last_error());
  EXPECT(amp_scaler_get_scale(s2) == amp_scaler_get_scale(x->s) && amp_scaler_skipped_steps(s2) == amp_scaler_skipped_steps(x->s),
         "scaler restored: scale %g vs %g", (double)amp_scaler_get_scale(s2), (double)amp_scaler_get_scale(x->s));
  st = amp_checkpoint_load(path, x->o, x->s);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "no optimizer"), "optimizer from a scaler-only file: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_checkpoint_save(path, x->o, NULL) == AMP_OK, "save optimizer only: %s", amp_last_error());
  EXPECT(amp_checkpoint_load(path, x->o, NULL) == AMP_OK, "load optimizer only: %s", amp_last_error());
  EXPECT(amp_checkpoint_save(path, NULL, NULL) == AMP_ERR_ARG, "both NULL refused");
  amp_scaler_destroy(s2); run_free(x); free(x);
  remove(path);
}

static unsigned char *read_all(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb"); unsigned char *b; long len;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END); len = ftell(f); fseek(f, 0, SEEK_SET);
  b = (unsigned char *)malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f); fclose(f);
  return b;
}
static void write_all(const char *p, const unsigned char *b, size_t n) { FILE *f = fopen(p, "wb"); if (f) { fwrite(b, 1, n, f); fclose(f); } }

/* A small file (two tiny tensors, AdamW, and the scaler: about 280 bytes), damaged every way. */
static void every_byte_flip_and_truncation_is_refused_and_changes_nothing(void) {
  amp_f16 w1[3], g1[3]; amp_bf16 w2[4], g2[4];
  amp_optim_config c; amp_optimizer *o; amp_scaler *s;
  unsigned char before[512], after[512];
  unsigned char *file, *bad;
  size_t n = 0, i, refused = 0, tried = 0, k;
  const char *bpath = "build/test/ckpt_bad.bin";
  static const unsigned char masks[] = {0xFF, 0x01};
  int it;
  memset(&c, 0, sizeof c); c.kind = AMP_ADAMW; c.weight_decay = 0.1f;
  for (i = 0; i < 3; i++) { w1[i] = amp_f32_to_f16(rndf()); }
  for (i = 0; i < 4; i++) { w2[i] = amp_f32_to_bf16(rndf()); }
  amp_optimizer_create(&o, amp_cpu(), &c); amp_scaler_create(&s, amp_cpu(), NULL);
  amp_optimizer_add(o, AMP_F16, w1, g1, 3); amp_optimizer_add(o, AMP_BF16, w2, g2, 4);
  for (it = 0; it < 6; it++) {
    for (i = 0; i < 3; i++) g1[i] = amp_f32_to_f16(rndf() * 65536.0f);
    for (i = 0; i < 4; i++) g2[i] = amp_f32_to_bf16(rndf() * 65536.0f);
    if (it == 2) g1[1] = 0x7C00;
    amp_scaler_step(s, o); amp_scaler_update(s);
    if (it == 3) amp_checkpoint_save(path, o, s);   /* the live objects then move on */
  }
#define SNAP(buf) do { k = 0; memcpy(buf + k, o->master[0], 3 * 12); k += 36; memcpy(buf + k, o->master[1], 4 * 12); k += 48; \
    memcpy(buf + k, w1, sizeof w1); k += sizeof w1; memcpy(buf + k, w2, sizeof w2); k += sizeof w2; \
    memcpy(buf + k, &s->st, sizeof s->st); k += sizeof s->st; memcpy(buf + k, &s->pr, sizeof s->pr); k += sizeof s->pr; \
    memcpy(buf + k, &s->skipped, sizeof s->skipped); k += sizeof s->skipped; memcpy(buf + k, &o->step, sizeof o->step); k += sizeof o->step; \
    memcpy(buf + k, &o->cfg.lr, 4); k += 4; } while (0)
  SNAP(before);
  file = read_all(path, &n);
  if (!file) { EXPECT(0, "cannot read %s", path); return; }
  EXPECT(n < 400, "the small checkpoint is %zu bytes", n);
  bad = (unsigned char *)malloc(n);
  for (i = 0; i < n; i++) {
    size_t m;
    for (m = 0; m < (t_quick() ? 1u : 2u); m++) {
      amp_status st;
      memcpy(bad, file, n); bad[i] ^= masks[m];
      write_all(bpath, bad, n);
      st = amp_checkpoint_load(bpath, o, s);
      tried++;
      if (st == AMP_ERR_CORRUPT) refused++;
      else EXPECT(0, "byte %zu ^ 0x%02x: expected AMP_ERR_CORRUPT, got %s", i, masks[m], amp_status_string(st));
    }
  }
  for (i = 0; i < n; i++) {
    amp_status st;
    write_all(bpath, file, i);
    st = amp_checkpoint_load(bpath, o, s);
    tried++;
    if (st == AMP_ERR_CORRUPT) refused++;
    else EXPECT(0, "truncated to %zu of %zu bytes: expected AMP_ERR_CORRUPT, got %s", i, n, amp_status_string(st));
  }
  SNAP(after);
  EXPECT(refused == tried, "%zu of %zu damaged files refused", refused, tried);
  EXPECT(memcmp(before, after, k) == 0, "a refused load changed the live optimizer or scaler");
  EXPECT(amp_checkpoint_load(path, o, s) == AMP_OK, "the intact file still loads: %s", amp_last_error());
  SNAP(after);
  EXPECT(memcmp(before, after, k) != 0, "the intact load restored the older state");
#undef SNAP
  free(file); free(bad); amp_optimizer_destroy(o); amp_scaler_destroy(s);
  remove(path); remove(bpath);
}

static void other_kind_shape_dtype_or_version_is_refused(void) {
  run_t *x = (run_t *)calloc(1, sizeof *x);
  amp_optimizer *o; amp_optim_config c;
  float w[NA] = {0}, g[NA] = {0}, w2[NB] = {0}, g2[NB] = {0};
  amp_status st;
  size_t n;
  unsigned char *file;
  run_init(x, AMP_ADAM);
  amp_checkpoint_save(path, x->o, x->s);
  memset(&c, 0, sizeof c); c.kind = AMP_ADAMW;
  amp_optimizer_create(&o, amp_cpu(), &c); amp_optimizer_add(o, AMP_F16, w, g, NA);
  st = amp_checkpoint_load(path, o, NULL);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "kind"), "another kind: %s '%s'", amp_status_string(st), amp_last_error());
  amp_optimizer_destroy(o);
  c.kind = AMP_ADAM;
  amp_optimizer_create(&o, amp_cpu(), &c); amp_optimizer_add(o, AMP_F16, w, g, NA);
  st = amp_checkpoint_load(path, o, NULL);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "tensors"), "another tensor count: %s '%s'", amp_status_string(st), amp_last_error());
  amp_optimizer_add(o, AMP_F32, w2, g2, NB);
  st = amp_checkpoint_load(path, o, NULL);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "dtypes"), "another dtype: %s '%s'", amp_status_string(st), amp_last_error());
  amp_optimizer_destroy(o);
  amp_optimizer_create(&o, amp_cpu(), &c); amp_optimizer_add(o, AMP_F16, w, g, NA - 1); amp_optimizer_add_mixed(o, AMP_BF16, w2, AMP_F32, g2, NB);
  st = amp_checkpoint_load(path, o, NULL);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "elements"), "another size: %s '%s'", amp_status_string(st), amp_last_error());
  amp_optimizer_destroy(o);
  file = read_all(path, &n);
  if (file) {   /* another version, with a valid CRC: the version check must say so */
    amp__crc crc; uint32_t v = 2, cv;
    memcpy(file + 8, &v, 4);
    amp__crc_init(&crc); amp__crc_add(&crc, file, n - 4); cv = amp__crc_value(&crc); memcpy(file + n - 4, &cv, 4);
    write_all(path, file, n);
    st = amp_checkpoint_load(path, x->o, x->s);
    EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "version 2"), "version 2: %s '%s'", amp_status_string(st), amp_last_error());
    free(file);
  }
  st = amp_checkpoint_load("build/test/no/such/file.bin", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "build/test/no/such/file.bin"), "missing file: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_checkpoint_save("build/test/no/such/dir/ck.bin", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "build/test/no/such/dir/ck.bin"), "unwritable: %s '%s'", amp_status_string(st), amp_last_error());
  run_free(x); free(x);
  remove(path);
}

static void crc32_matches_the_standard_check_value(void) {
  amp__crc c;
  amp__crc_init(&c); amp__crc_add(&c, "123456789", 9);
  EXPECT(amp__crc_value(&c) == 0xCBF43926u, "CRC-32 of '123456789': expected 0xCBF43926, got 0x%08x", (unsigned)amp__crc_value(&c));
}

int main(void) {
  RUN(crc32_matches_the_standard_check_value);
  RUN(resume_after_save_and_load_is_bit_identical);
  RUN(save_and_load_of_one_half);
  RUN(every_byte_flip_and_truncation_is_refused_and_changes_nothing);
  RUN(other_kind_shape_dtype_or_version_is_refused);
  TEST_END();
}
