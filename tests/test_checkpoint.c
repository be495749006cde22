/* tests/test_checkpoint.c - resume bit for bit; damaged, truncated and mismatched checkpoints are
   refused and change nothing; I/O errors name the path and the system's reason; the version-1
   and version-2 layouts of the manual (version 2: the spike state); fields a create would refuse; 64-bit counts; concurrent forked writers,
   planted symlinks, sparse 4 GB files, FIFOs. */
#define _POSIX_C_SOURCE 200809L   /* fork, symlink, mkfifo, ftruncate, clock_gettime (the tests only) */
#define _FILE_OFFSET_BITS 64      /* 32-bit targets (armhf under qemu-user): readdir of a directory with 64-bit offsets */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <errno.h>
#include <limits.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/resource.h>

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
    size_t bytes = r->o->t[i].n * 4 * (size_t)(1 + amp__o_moments(&r->o->cfg));
    memcpy(buf + k, r->o->t[i].master, bytes); k += bytes;
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
#define SNAP(buf) do { k = 0; memcpy(buf + k, o->t[0].master, 3 * 12); k += 36; memcpy(buf + k, o->t[1].master, 4 * 12); k += 48; \
    memcpy(buf + k, w1, sizeof w1); k += sizeof w1; memcpy(buf + k, w2, sizeof w2); k += sizeof w2; \
    memcpy(buf + k, &s->st, sizeof s->st); k += sizeof s->st; memcpy(buf + k, &s->pr, sizeof s->pr); k += sizeof s->pr; \
    memcpy(buf + k, &s->skipped, sizeof s->skipped); k += sizeof s->skipped; memcpy(buf + k, &o->step, sizeof o->step); k += sizeof o->step; \
    memcpy(buf + k, &o->cfg.lr, 4); k += 4; } while (0)
  SNAP(before);
  file = t_read_file(path, &n);
  if (!file) { EXPECT(0, "cannot read %s", path); return; }
  EXPECT(n < 800, "the small checkpoint is %zu bytes", n);
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
  file = t_read_file(path, &n);
  if (file) {   /* another version, with a valid CRC: the version check must say so */
    amp__crc crc; uint32_t v = 4, cv;
    memcpy(file + 8, &v, 4);
    amp__crc_init(&crc); amp__crc_add(&crc, file, n - 4); cv = amp__crc_value(&crc); memcpy(file + n - 4, &cv, 4);
    write_all(path, file, n);
    st = amp_checkpoint_load(path, x->o, x->s);
    EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "version 4"), "version 4: %s '%s'", amp_status_string(st), amp_last_error());
    free(file);
  }
  st = amp_checkpoint_load("build/test/no/such/file.bin", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "build/test/no/such/file.bin"), "missing file: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_checkpoint_save("build/test/no/such/dir/ck.bin", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "build/test/no/such/dir/ck.bin"), "unwritable: %s '%s'", amp_status_string(st), amp_last_error());
  run_free(x); free(x);
  remove(path);
}

/* ---- the format, written here field by field from the manual's layout (versions 1 and 2) ---- */

typedef struct { unsigned char *p; size_t n, cap; } bytes_t;
static void bput(bytes_t *b, const void *p, size_t n) {
  if (b->n + n > b->cap) { b->cap = (b->n + n) * 2 + 64; b->p = (unsigned char *)realloc(b->p, b->cap); }
  memcpy(b->p + b->n, p, n); b->n += n;
}
static void bu32(bytes_t *b, uint32_t x) { bput(b, &x, 4); }
static void bi32(bytes_t *b, int32_t x) { bput(b, &x, 4); }
static void bu64(bytes_t *b, uint64_t x) { bput(b, &x, 8); }
static void bf32(bytes_t *b, float x) { bput(b, &x, 4); }
static void bcrc(bytes_t *b) {   /* zlib's crc32 of everything so far, bit by bit (independent of amp__crc) */
  uint32_t c = 0xFFFFFFFFu; size_t i; int k;
  for (i = 0; i < b->n; i++) { c ^= b->p[i]; for (k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u))); }
  bu32(b, c ^ 0xFFFFFFFFu);
}
static void recrc(unsigned char *file, size_t n) {   /* the CRC of an edited file recomputed */
  bytes_t b = {NULL, 0, 0};
  bput(&b, file, n - 4); bcrc(&b);
  memcpy(file + n - 4, b.p + n - 4, 4); free(b.p);
}

/* A checkpoint of the live objects written from the manual's layout: the header, the scaler's
   17 fields, the optimizer's 12, (version 2:) the spike state (u64 count, i32 window count, i32
   next slot, f32 window[100]), then per tensor n, dtypes, master, moments. Version 1 is the file
   the first amp.h wrote (no spike state). */
static bytes_t file_of(const amp_optimizer *o, const amp_scaler *s, uint32_t version) {
  bytes_t b = {NULL, 0, 0};
  size_t i, payload = 0, nm = o ? (size_t)amp__o_moments(&o->cfg) : 0;
  if (s) payload += 72;
  if (o) { payload += 56 + (version >= 2 ? 416 : 0); for (i = 0; i < o->count; i++) payload += 16 + 4 * o->t[i].n * (1 + nm); }
  bput(&b, "AMPCKPT1", 8); bu32(&b, version); bu32(&b, 0x01020304u); bu32(&b, 32); bu32(&b, (s ? 1u : 0u) | (o ? 2u : 0u)); bu64(&b, payload);
  if (s) {
    bf32(&b, s->pr.growth); bf32(&b, s->pr.backoff); bf32(&b, s->pr.floor); bf32(&b, s->pr.cap);
    bi32(&b, s->pr.interval); bi32(&b, s->pr.hysteresis); bi32(&b, s->pr.mode); bi32(&b, s->pr.fixed); bi32(&b, s->pr.late_growth);
    bf32(&b, s->init_scale); bf32(&b, s->st.scale); bi32(&b, s->st.tracker); bi32(&b, s->st.hyst); bi32(&b, s->st.at_floor);
    bi32(&b, s->last_skipped); bi32(&b, s->floor_logged); bu64(&b, (uint64_t)s->skipped);
  }
  if (o) {
    const amp_optim_config *c = &o->cfg;
    bu32(&b, (uint32_t)c->kind); bf32(&b, c->lr); bf32(&b, c->weight_decay); bf32(&b, c->momentum); bf32(&b, c->dampening);
    bi32(&b, c->nesterov); bf32(&b, c->beta1); bf32(&b, c->beta2); bf32(&b, c->eps); bf32(&b, c->max_grad_norm);
    bu64(&b, (uint64_t)o->step); bu64(&b, (uint64_t)o->count);
    if (version >= 2) {
      bu64(&b, (uint64_t)o->spike_skips); bi32(&b, o->spike_win.count); bi32(&b, o->spike_win.next);
      for (i = 0; i < 100; i++) bf32(&b, o->spike_win.norm[i]);
    }
    for (i = 0; i < o->count; i++) {
      bu64(&b, o->t[i].n); bu32(&b, (uint32_t)o->t[i].wtype); bu32(&b, (uint32_t)o->t[i].gtype);
      bput(&b, o->t[i].master, 4 * o->t[i].n);
      if (nm >= 1) bput(&b, o->t[i].m, 4 * o->t[i].n);
      if (nm >= 2) bput(&b, o->t[i].v, 4 * o->t[i].n);
    }
  }
  bcrc(&b);
  return b;
}

static void version_1_and_2_files_are_written_and_read_as_the_manual_lays_them_out(void) {
  amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
  int k;
  for (k = 0; k < 3; k++) {
    run_t *x = (run_t *)calloc(1, sizeof *x), *y = (run_t *)calloc(1, sizeof *y);
    static unsigned char a[20000], b2[20000];
    bytes_t v1, v2;
    unsigned char *file;
    size_t n = 0, na, nb;
    run_init(x, kinds[k]); run_steps(x, 0, 30);
    x->o->spike_skips = 3;   /* a count to be written (the window holds the clean steps' norms) */
    EXPECT(amp_checkpoint_save(path, x->o, x->s) == AMP_OK, "save: %s", amp_last_error());
    file = t_read_file(path, &n);
    v1 = file_of(x->o, x->s, 1); v2 = file_of(x->o, x->s, 2);
    EXPECT(x->o->spike_win.count > 20, "kind %d: the window holds %d norms after 30 steps", (int)kinds[k], (int)x->o->spike_win.count);
    EXPECT(file && n == v2.n && memcmp(file, v2.p, n) == 0, "kind %d: the saved file (%zu bytes) is not the version-2 layout (%zu bytes)",
           (int)kinds[k], n, v2.n);
    /* a version-1 file made by the old writer's sequence loads and restores everything; the spike
       state, which it does not hold, is zero (y's own, from its steps, is gone) */
    write_all(path, v1.p, v1.n);
    run_init(y, kinds[k]); run_steps(y, 0, 10);
    y->o->spike_skips = 9;
    EXPECT(amp_checkpoint_load(path, y->o, y->s) == AMP_OK, "load of the version-1 file: %s", amp_last_error());
    na = state_bytes(x, a); nb = state_bytes(y, b2);
    EXPECT(na == nb && memcmp(a, b2, na) == 0, "kind %d: the version-1 file restored another state", (int)kinds[k]);
    EXPECT(amp_optimizer_spike_skips(y->o) == 0 && y->o->spike_win.count == 0 && y->o->spike_win.next == 0,
           "kind %d: after a version-1 load spike_skips %ld, window count %d next %d (want 0, 0, 0)", (int)kinds[k],
           amp_optimizer_spike_skips(y->o), (int)y->o->spike_win.count, (int)y->o->spike_win.next);
    free(file); free(v1.p); free(v2.p);
    run_free(x); run_free(y); free(x); free(y);
  }
  remove(path);
}

/* The spike state round trip: an optimizer with spike_zscore, 130 steps (the window has wrapped)
   with planted spikes, saved; loaded into a fresh one the count and the window are the same bytes,
   and 40 more steps (planted spikes among them, and a norm near the threshold) take the same
   decisions and give the same bits as the run that never stopped. */
#define SPN 48
static void spike_state_round_trips_and_decides_the_same_next(void) {
  static float wx[SPN], wy[SPN], g[SPN];
  amp_optimizer *ox, *oy;
  amp_optim_config c;
  static unsigned char a[SPN * 16 + 64], b[SPN * 16 + 64];
  int i, step, near = 0;
  memset(&c, 0, sizeof c);
  c.kind = AMP_ADAMW; c.lr = 1e-3f; c.spike_zscore = 3.0f;
  for (i = 0; i < SPN; i++) wx[i] = wy[i] = 0.01f * (float)i;
  if (amp_optimizer_create(&ox, amp_cpu(), &c) || amp_optimizer_create(&oy, amp_cpu(), &c) ||
      amp_optimizer_add(ox, AMP_F32, wx, g, SPN) || amp_optimizer_add(oy, AMP_F32, wy, g, SPN)) {
    EXPECT(0, "setup: %s", amp_last_error()); return;
  }
  rng_state = 5;
  for (step = 0; step < 170; step++) {
    float f = 1.0f + 0.1f * rndf();
    if (step == 60 || step == 125 || step == 140 || step == 141) f *= 3.0f;
    if (step == 150) {   /* a norm just above the threshold the window gives now */
      double mean = 0, ss = 0, sd; int n = ox->spike_win.count;
      for (i = 0; i < n; i++) mean += ox->spike_win.norm[i];
      mean /= n;
      for (i = 0; i < n; i++) ss += (ox->spike_win.norm[i] - mean) * (ox->spike_win.norm[i] - mean);
      sd = sqrt(ss / n);
      f = (float)((mean + 3.0 * sd) * 1.0001);
      near = 1;
    }
    for (i = 0; i < SPN; i++) g[i] = f * (float)(1 - 2 * (i & 1)) / sqrtf((float)SPN);   /* norm f */
    if (step < 130) { EXPECT(amp_optimizer_step(ox) == AMP_OK, "step: %s", amp_last_error()); continue; }
    if (step == 130) {
      EXPECT(amp_optimizer_spike_skips(ox) == 2 && ox->spike_win.count == 100, "before the save: spike_skips %ld (want 2), window %d",
             amp_optimizer_spike_skips(ox), (int)ox->spike_win.count);
      EXPECT(amp_checkpoint_save(path, ox, NULL) == AMP_OK, "save: %s", amp_last_error());
      EXPECT(amp_checkpoint_load(path, oy, NULL) == AMP_OK, "load: %s", amp_last_error());
      EXPECT(amp_optimizer_spike_skips(oy) == 2 && memcmp(&ox->spike_win, &oy->spike_win, sizeof ox->spike_win) == 0,
             "after the load: spike_skips %ld (want 2), the windows %s", amp_optimizer_spike_skips(oy),
             memcmp(&ox->spike_win, &oy->spike_win, sizeof ox->spike_win) == 0 ? "equal" : "differ");
    }
    EXPECT(amp_optimizer_step(ox) == AMP_OK && amp_optimizer_step(oy) == AMP_OK, "step: %s", amp_last_error());
    EXPECT(amp_optimizer_spike_skips(ox) == amp_optimizer_spike_skips(oy) && t_optim_snapshot(ox, a) == t_optim_snapshot(oy, b) &&
           memcmp(a, b, t_optim_snapshot(ox, a)) == 0 && memcmp(&ox->spike_win, &oy->spike_win, sizeof ox->spike_win) == 0,
           "step %d: the resumed run differs (spike_skips %ld / %ld)", step, amp_optimizer_spike_skips(ox), amp_optimizer_spike_skips(oy));
    if (step == 150) EXPECT(amp_optimizer_spike_skips(oy) == 5, "step 150, just above the threshold: spike_skips %ld, want 5",
                            amp_optimizer_spike_skips(oy));
  }
  EXPECT(near && amp_optimizer_spike_skips(oy) == 5, "spike_skips %ld, want 5 (steps 60, 125, 140, 141, 150)", amp_optimizer_spike_skips(oy));
  amp_optimizer_destroy(ox); amp_optimizer_destroy(oy);
  remove(path);
}

/* ---- fields edited, the CRC recomputed: create's rules refuse them ----------------------------- */

/* Offsets in the manual's layout: the scaler's fields from byte 32, the optimizer's from 104. */
enum { S_GROWTH = 32, S_FLOOR = 40, S_CAP = 44, S_MODE = 56, S_FIXED = 60, S_LATE = 64, S_INIT = 68, S_SCALE = 72,
       S_TRACKER = 76, S_HYST = 80, S_AT_FLOOR = 84, S_LAST_SKIPPED = 88, S_FLOOR_LOGGED = 92, S_SKIPPED = 96,
       O_KIND = 104, O_LR = 108, O_WD = 112, O_NESTEROV = 124, O_BETA1 = 128, O_EPS = 136, O_STEP = 144,
       P_SKIPS = 160, P_COUNT = 168, P_NEXT = 172, P_WIN = 176, P_WIN_LAST = 176 + 99 * 4,
       T0_MASTER = 576 + 16, T0_M = T0_MASTER + 4 * NA, T0_V = T0_M + 4 * NA };   /* Adam's first tensor */

static void fields_edited_with_a_recomputed_crc_are_refused(void) {
  struct { const char *what; int at; int size; float f; int64_t i; amp_status want; } cases[] = {
    {"eps 0 (one Adam step would write NaN)", O_EPS, 4, 0.0f, 0, AMP_ERR_CORRUPT},
    {"eps -1e-8", O_EPS, 4, -1e-8f, 0, AMP_ERR_CORRUPT},
    {"lr -0.5", O_LR, 4, -0.5f, 0, AMP_ERR_CORRUPT},
    {"weight_decay NaN", O_WD, 4, NAN, 0, AMP_ERR_CORRUPT},
    {"beta1 1", O_BETA1, 4, 1.0f, 0, AMP_ERR_CORRUPT},
    {"beta1 -0 (create keeps +0)", O_BETA1, 4, -0.0f, 0, AMP_ERR_CORRUPT},
    {"beta1 0 (valid: zero_is_zero)", O_BETA1, 4, 0.0f, 0, AMP_OK},
    {"nesterov 5", O_NESTEROV, -4, 0, 5, AMP_ERR_CORRUPT},
    {"kind 7", O_KIND, -4, 0, 7, AMP_ERR_CORRUPT},
    {"step count -1", O_STEP, -8, 0, -1, AMP_ERR_CORRUPT},
    {"scale above the cap", S_SCALE, 4, 33554432.0f, 0, AMP_ERR_CORRUPT},
    {"scale NaN", S_SCALE, 4, NAN, 0, AMP_ERR_CORRUPT},
    {"scale below the floor", S_SCALE, 4, 0.5f, 0, AMP_ERR_CORRUPT},
    {"growth 0 (create's default)", S_GROWTH, 4, 0.0f, 0, AMP_ERR_CORRUPT},
    {"floor 0", S_FLOOR, 4, 0.0f, 0, AMP_ERR_CORRUPT},
    {"cap below init_scale", S_CAP, 4, 2.0f, 0, AMP_ERR_CORRUPT},
    {"init_scale inf", S_INIT, 4, INFINITY, 0, AMP_ERR_CORRUPT},
    {"hysteresis mode 3", S_MODE, -4, 0, 3, AMP_ERR_CORRUPT},
    {"fixed flag 12345", S_FIXED, -4, 0, 12345, AMP_ERR_CORRUPT},
    {"late_growth flag -7", S_LATE, -4, 0, -7, AMP_ERR_CORRUPT},
    {"at_floor flag 2", S_AT_FLOOR, -4, 0, 2, AMP_ERR_CORRUPT},
    {"last_skipped flag 12345", S_LAST_SKIPPED, -4, 0, 12345, AMP_ERR_CORRUPT},
    {"floor_logged flag -7", S_FLOOR_LOGGED, -4, 0, -7, AMP_ERR_CORRUPT},
    {"skipped count -1", S_SKIPPED, -8, 0, -1, AMP_ERR_CORRUPT},
    {"growth tracker beyond the interval", S_TRACKER, -4, 0, 1000, AMP_ERR_CORRUPT},
    {"growth tracker -2", S_TRACKER, -4, 0, -2, AMP_ERR_CORRUPT},
    {"hysteresis count -1", S_HYST, -4, 0, -1, AMP_ERR_CORRUPT},
    {"spike skip count -1", P_SKIPS, -8, 0, -1, AMP_ERR_CORRUPT},
    {"spike window count 101", P_COUNT, -4, 0, 101, AMP_ERR_CORRUPT},
    {"spike window count -1", P_COUNT, -4, 0, -1, AMP_ERR_CORRUPT},
    {"spike window next slot 100", P_NEXT, -4, 0, 100, AMP_ERR_CORRUPT},
    {"spike window next slot 0 with fewer than 100 held", P_NEXT, -4, 0, 0, AMP_ERR_CORRUPT},
    {"spike window norm NaN", P_WIN, 4, NAN, 0, AMP_ERR_CORRUPT},
    {"spike window norm -1", P_WIN, 4, -1.0f, 0, AMP_ERR_CORRUPT},
    {"spike window: an unused slot not 0", P_WIN_LAST, 4, 1.0f, 0, AMP_ERR_CORRUPT},
    {"spike window norm 2.5 (valid)", P_WIN, 4, 2.5f, 0, AMP_OK},
    /* states no run reaches: a count the next steps would overflow, a rule state the rule never leaves */
    {"step count LONG_MAX (the next update would overflow it)", O_STEP, -8, 0, LONG_MAX, AMP_ERR_CORRUPT},
    {"step count above LONG_MAX / 2", O_STEP, -8, 0, LONG_MAX / 2 + 1, AMP_ERR_CORRUPT},
    {"skipped count LONG_MAX", S_SKIPPED, -8, 0, LONG_MAX, AMP_ERR_CORRUPT},
    {"spike skip count LONG_MAX", P_SKIPS, -8, 0, LONG_MAX, AMP_ERR_CORRUPT},
    {"growth tracker at the interval (a growth restarts it there)", S_TRACKER, -4, 0, 7, AMP_ERR_CORRUPT},
    {"at_floor 1 with the scale above the floor", S_AT_FLOOR, -4, 0, 1, AMP_ERR_CORRUPT},
    {"exp_avg_sq -1", T0_V + 8, 4, -1.0f, 0, AMP_ERR_CORRUPT},
    {"exp_avg_sq NaN", T0_V, 4, NAN, 0, AMP_ERR_CORRUPT},
    {"exp_avg NaN", T0_M + 4, 4, NAN, 0, AMP_ERR_CORRUPT},
    {"exp_avg_sq +inf (valid: a grad's square overflows)", T0_V, 4, INFINITY, 0, AMP_OK},
    {"exp_avg -3 (valid)", T0_M, 4, -3.0f, 0, AMP_OK},
    /* controls: other valid values load and are restored */
    {"lr 0.25 (valid)", O_LR, 4, 0.25f, 0, AMP_OK},
    {"lr 0 (valid: set_lr(0))", O_LR, 4, 0.0f, 0, AMP_OK},
    {"scale 1024 (valid)", S_SCALE, 4, 1024.0f, 0, AMP_OK},
  };
  const char *bpath = "build/test/ckpt_edit.bin";
  run_t *x = (run_t *)calloc(1, sizeof *x);
  amp_scaler_config sc = amp_scaler_preset(AMP_PRESET_APEX);   /* a cap: 2^24 */
  static unsigned char before[20000], after[20000];
  unsigned char *file, *bad;
  size_t n = 0, nb, na, c;
  run_init(x, AMP_ADAM); run_steps(x, 0, 12);
  amp_scaler_destroy(x->s);
  sc.growth_interval = 7; sc.min_scale = 1.0f;   /* and a floor */
  amp_scaler_create(&x->s, amp_cpu(), &sc);
  run_steps(x, 12, 20);
  EXPECT(amp_checkpoint_save(path, x->o, x->s) == AMP_OK, "save: %s", amp_last_error());
  file = t_read_file(path, &n);
  if (!file) { EXPECT(0, "cannot read %s", path); return; }
  bad = (unsigned char *)malloc(n);
  for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    amp_status st;
    memcpy(bad, file, n);
    if (cases[c].size == 4) memcpy(bad + cases[c].at, &cases[c].f, 4);
    else if (cases[c].size == -4) { int32_t v = (int32_t)cases[c].i; memcpy(bad + cases[c].at, &v, 4); }
    else { uint64_t v = (uint64_t)cases[c].i; memcpy(bad + cases[c].at, &v, 8); }
    recrc(bad, n);
    write_all(bpath, bad, n);
    nb = state_bytes(x, before);
    st = amp_checkpoint_load(bpath, x->o, x->s);
    na = state_bytes(x, after);
    EXPECT(st == cases[c].want, "%s: expected %s, got %s '%s'", cases[c].what, amp_status_string(cases[c].want), amp_status_string(st), amp_last_error());
    if (cases[c].want != AMP_OK)
      EXPECT(na == nb && memcmp(before, after, na) == 0, "%s: the refused load changed the live state", cases[c].what);
    else if (cases[c].at == O_LR)
      EXPECT(memcmp(&x->o->cfg.lr, &cases[c].f, 4) == 0, "%s: lr restored as %g", cases[c].what, (double)x->o->cfg.lr);
    else if (cases[c].at == O_BETA1)
      EXPECT(memcmp(&x->o->cfg.beta1, &cases[c].f, 4) == 0, "%s: beta1 restored as %g", cases[c].what, (double)x->o->cfg.beta1);
    else if (cases[c].at == T0_V || cases[c].at == T0_M)
      EXPECT(memcmp(cases[c].at == T0_V ? &x->o->t[0].v[0] : &x->o->t[0].m[0], &cases[c].f, 4) == 0, "%s: not restored", cases[c].what);
    else if (cases[c].at == P_WIN)
      EXPECT(x->o->spike_win.norm[0] == cases[c].f, "%s: window slot 0 restored as %g", cases[c].what, (double)x->o->spike_win.norm[0]);
    else
      EXPECT(amp_scaler_get_scale(x->s) == cases[c].f, "%s: scale restored as %g", cases[c].what, (double)amp_scaler_get_scale(x->s));
  }
  free(file); free(bad); run_free(x); free(x);
  remove(path); remove(bpath);
}

/* A scaler state edited into a scaler-only file (CRC recomputed): want is the load's status. */
static amp_status load_scaler_edited(amp_scaler *s, int at, int32_t v, int is_float, float f) {
  const char *bpath = "build/test/ckpt_scaler_edit.bin";
  unsigned char *file;
  size_t n = 0;
  amp_status st;
  if (amp_checkpoint_save(bpath, NULL, s) != AMP_OK || !(file = t_read_file(bpath, &n))) return AMP_ERR_IO;
  if (is_float) memcpy(file + at, &f, 4); else memcpy(file + at, &v, 4);
  recrc(file, n);
  write_all(bpath, file, n);
  free(file);
  st = amp_checkpoint_load(bpath, NULL, s);
  remove(bpath);
  return st;
}

/* The scale rule's states: a load takes only those the rule can leave, so the next update can
   neither overflow a counter nor act on parameters that say something else than the state. */
static void scaler_states_the_rule_cannot_reach_are_refused(void) {
  amp_scaler_config c;
  amp_scaler *s = NULL;
  amp_status st;
  int i;
  /* CONSECUTIVE, hysteresis 3: the count of overflows in a row rests in 0..2 */
  memset(&c, 0, sizeof c); c.hysteresis = 3; c.hysteresis_mode = AMP_HYSTERESIS_CONSECUTIVE;
  amp_scaler_create(&s, amp_cpu(), &c);
  st = load_scaler_edited(s, S_HYST, 3, 0, 0);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "hysteresis count 3"), "consecutive count 3 of 3: %s '%s'",
         amp_status_string(st), amp_last_error());
  st = load_scaler_edited(s, S_HYST, 2, 0, 0);
  EXPECT(st == AMP_OK, "consecutive count 2 of 3 (valid): %s '%s'", amp_status_string(st), amp_last_error());
  amp_scaler_destroy(s);
  /* the growth tracker and the interval at INT_MAX: tracker + 1 would overflow */
  memset(&c, 0, sizeof c); c.growth_interval = INT_MAX;
  amp_scaler_create(&s, amp_cpu(), &c);
  st = load_scaler_edited(s, S_TRACKER, INT_MAX, 0, 0);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "growth tracker"), "tracker INT_MAX: %s '%s'", amp_status_string(st),
         amp_last_error());
  st = load_scaler_edited(s, S_TRACKER, INT_MAX - 1, 0, 0);
  EXPECT(st == AMP_OK, "tracker INT_MAX - 1 (valid): %s '%s'", amp_status_string(st), amp_last_error());
  amp_scaler_update_found_inf(s, 0);   /* grows: no overflow (UBSan would say) */
  EXPECT(amp_scaler_get_scale(s) == 131072.0f, "the growth at the interval: scale %g", (double)amp_scaler_get_scale(s));
  amp_scaler_destroy(s);
  /* a dynamic scaler backed off to 8192, then `fixed` set in the file: the scale would say 8192
     while a fixed scaler unscales by its init_scale */
  memset(&c, 0, sizeof c);
  amp_scaler_create(&s, amp_cpu(), &c);
  for (i = 0; i < 3; i++) amp_scaler_update_found_inf(s, 1);
  EXPECT(amp_scaler_get_scale(s) == 8192.0f, "setup: scale %g", (double)amp_scaler_get_scale(s));
  st = load_scaler_edited(s, S_FIXED, 1, 0, 0);
  EXPECT(st == AMP_ERR_CORRUPT && strstr(amp_last_error(), "fixed"), "fixed set on a backed-off scaler: %s '%s'",
         amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_get_scale(s) == 8192.0f, "the refused load changed the scale to %g", (double)amp_scaler_get_scale(s));
  amp_scaler_destroy(s);
  /* a fixed scaler: its state is a fresh one's */
  memset(&c, 0, sizeof c); c.fixed = 1; c.init_scale = 1024.0f;
  amp_scaler_create(&s, amp_cpu(), &c);
  st = load_scaler_edited(s, S_SCALE, 0, 1, 2048.0f);
  EXPECT(st == AMP_ERR_CORRUPT, "fixed scaler with scale 2048: %s '%s'", amp_status_string(st), amp_last_error());
  st = load_scaler_edited(s, S_TRACKER, 5, 0, 0);
  EXPECT(st == AMP_ERR_CORRUPT, "fixed scaler with tracker 5: %s '%s'", amp_status_string(st), amp_last_error());
  st = load_scaler_edited(s, S_LAST_SKIPPED, 1, 0, 0);
  EXPECT(st == AMP_OK, "fixed scaler whose last step was skipped (valid): %s '%s'", amp_status_string(st), amp_last_error());
  amp_scaler_destroy(s);
}

/* ---- step counts of 2^31 and more ------------------------------------------------------------ */

/* Each record read by the one reader: a file cut at every record boundary and inside every record,
   its header's payload size and CRC made to agree, is refused naming the record cut short. */
static void a_file_cut_at_any_record_is_refused_naming_it(void) {
  run_t r;
  unsigned char *file, *cut;
  size_t n = 0, k, at;
  struct { size_t bytes; const char *name; } rec[8];
  size_t nrec = 0;
  run_init(&r, AMP_ADAMW);
  run_steps(&r, 0, 3);
  EXPECT(amp_checkpoint_save(path, r.o, r.s) == AMP_OK, "save: %s", amp_last_error());
  file = t_read_file(path, &n);
  if (!file) { EXPECT(0, "cannot read %s back", path); run_free(&r); return; }
  rec[nrec].bytes = 72; rec[nrec++].name = "scaler section truncated";
  rec[nrec].bytes = 56; rec[nrec++].name = "optimizer section truncated";
  rec[nrec].bytes = 416; rec[nrec++].name = "spike section truncated";
  rec[nrec].bytes = 16; rec[nrec++].name = "tensor 0 truncated";
  rec[nrec].bytes = NA * 12; rec[nrec++].name = "tensor 0 data truncated";
  rec[nrec].bytes = 16; rec[nrec++].name = "tensor 1 truncated";
  rec[nrec].bytes = NB * 12; rec[nrec++].name = "tensor 1 data truncated";
  for (at = 32, k = 0; k < nrec; at += rec[k].bytes, k++) {
    size_t cuts[3], c;
    cuts[0] = at; cuts[1] = at + 1; cuts[2] = at + rec[k].bytes - 1;   /* at the boundary, just after, the last byte short */
    for (c = 0; c < 3; c++) {
      uint64_t payload = (uint64_t)cuts[c] - 32;
      cut = (unsigned char *)malloc(cuts[c] + 4);
      memcpy(cut, file, cuts[c]);
      memcpy(cut + 24, &payload, 8);   /* the header agrees with the cut file */
      recrc(cut, cuts[c] + 4);
      write_all(path, cut, cuts[c] + 4);
      free(cut);
      EXPECT(amp_checkpoint_load(path, r.o, r.s) == AMP_ERR_CORRUPT && strstr(amp_last_error(), rec[k].name),
             "cut at byte %zu: want AMP_ERR_CORRUPT naming '%s', got '%s'", cuts[c], rec[k].name, amp_last_error());
    }
  }
  EXPECT(at + 4 == n, "the records add up to %zu bytes, the file holds %zu", at + 4, n);
  write_all(path, file, n);
  EXPECT(amp_checkpoint_load(path, r.o, r.s) == AMP_OK, "the whole file: %s", amp_last_error());
  free(file);
  run_free(&r);
}

static void step_and_skip_counts_beyond_2_31_round_trip(void) {
  run_t *x = (run_t *)calloc(1, sizeof *x), *y = (run_t *)calloc(1, sizeof *y);
  static unsigned char a[20000], b[20000];
  size_t na, nb;
  /* ILP32 (armhf): the largest count a 32-bit long takes in (LONG_MAX / 2, so that it can grow) */
  long big = LONG_MAX > 0x7fffffffL ? (long)(3000000000.0) : LONG_MAX / 2 - 16;
  run_init(x, AMP_ADAM); run_steps(x, 0, 5);
  x->o->step = big; x->s->skipped = big - 7;   /* as after three billion steps */
  EXPECT(amp_checkpoint_save(path, x->o, x->s) == AMP_OK, "save: %s", amp_last_error());
  run_init(y, AMP_ADAM);
  EXPECT(amp_checkpoint_load(path, y->o, y->s) == AMP_OK, "load of step count %ld: %s", big, amp_last_error());
  EXPECT(amp_optimizer_step_count(y->o) == big, "step count: expected %ld, got %ld", big, amp_optimizer_step_count(y->o));
  EXPECT(amp_scaler_skipped_steps(y->s) == big - 7, "skipped: expected %ld, got %ld", big - 7, amp_scaler_skipped_steps(y->s));
  run_steps(x, 5, 10); run_steps(y, 5, 10);   /* Adam's bias correction at t = 3e9 + 1 ... on both */
  na = state_bytes(x, a); nb = state_bytes(y, b);
  EXPECT(na == nb && memcmp(a, b, na) == 0, "steps after the round trip differ");
  run_free(x); run_free(y); free(x); free(y);
  remove(path);
}

/* ---- paths ------------------------------------------------------------------------------------ */

static void empty_or_unusable_paths_are_refused_and_touch_nothing(void) {
  run_t *x = (run_t *)calloc(1, sizeof *x);
  amp_status st;
  FILE *f;
  char line[32] = {0};
  run_init(x, AMP_SGD);
  f = fopen(".tmp", "wb");   /* what a save of "" once removed */
  if (f) { fputs("keep me", f); fclose(f); }
  st = amp_checkpoint_save("", x->o, x->s);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_checkpoint_save") && strstr(amp_last_error(), "empty"),
         "save(\"\"): %s '%s'", amp_status_string(st), amp_last_error());
  f = fopen(".tmp", "rb");
  EXPECT(f && fgets(line, sizeof line, f) && strcmp(line, "keep me") == 0, "save(\"\") touched ./.tmp ('%s')", line);
  if (f) fclose(f);
  remove(".tmp");
  st = amp_checkpoint_load("", x->o, x->s);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "empty"), "load(\"\"): %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_checkpoint_save("build/test/", x->o, x->s);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "build/test/"), "save to a directory name: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_checkpoint_save("build/test/no/such/dir/ck.bin", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "build/test/no/such/dir/ck.bin") && strstr(amp_last_error(), strerror(ENOENT)),
         "save into a missing directory: expected AMP_ERR_IO with '%s', got %s '%s'", strerror(ENOENT), amp_status_string(st), amp_last_error());
  st = amp_checkpoint_load("build/test/no/such/file.bin", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), strerror(ENOENT)), "load of a missing file: %s '%s'", amp_status_string(st), amp_last_error());
  run_free(x); free(x);
}

static int count_files(const char *prefix) { return t_count_files("build/test", prefix); }

/* A file name of 250 bytes (255 is the most a name may have): the temporary beside it keeps a
   shorter prefix of it, so the save works and leaves no temporary. */
static void a_file_name_too_long_for_the_suffix_still_saves(void) {
  run_t *x = (run_t *)calloc(1, sizeof *x);
  char p[300];
  amp_status st;
  FILE *f;
  memcpy(p, "build/test/", 11);
  memset(p + 11, 'k', 250);
  p[261] = '\0';
  run_init(x, AMP_SGD);
  st = amp_checkpoint_save(p, x->o, x->s);
  EXPECT(st == AMP_OK, "save to a 250-byte file name: %s '%s'", amp_status_string(st), amp_last_error());
  f = fopen(p, "rb");
  EXPECT(f != NULL, "the file is not there");
  if (f) fclose(f);
  st = amp_checkpoint_load(p, x->o, x->s);
  EXPECT(st == AMP_OK, "load: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(count_files("kkkkkkkkkk") == 1, "%d files named kkk... (a temporary left?)", count_files("kkkkkkkkkk"));
  remove(p);
  run_free(x); free(x);
}

/* A symlink planted at the temporary names a save will use (the old fixed "path.tmp" and the
   next unique names) is never followed: its target is untouched and the save still succeeds. */
static void a_symlink_planted_at_the_temporary_is_not_followed(void) {
  const char *target = "build/test/ckpt_victim.txt", *p = "build/test/ckpt_link.bin";
  char name[4][512];
  run_t *x = (run_t *)calloc(1, sizeof *x);
  unsigned char *v;
  size_t vn = 0;
  int i;
  write_all(target, (const unsigned char *)"victim", 6);
  snprintf(name[0], sizeof name[0], "%s.tmp", p);
  for (i = 1; i < 4; i++) amp__tmp_name(name[i], sizeof name[i], p, amp__tmp_seq + (unsigned long)i);
  for (i = 0; i < 4; i++) { remove(name[i]); EXPECT(symlink("ckpt_victim.txt", name[i]) == 0, "symlink %s", name[i]); }
  run_init(x, AMP_ADAM); run_steps(x, 0, 3);
  EXPECT(amp_checkpoint_save(p, x->o, x->s) == AMP_OK, "save beside planted symlinks: %s", amp_last_error());
  v = t_read_file(target, &vn);
  EXPECT(v && vn == 6 && memcmp(v, "victim", 6) == 0, "the symlink's target was written (%zu bytes)", vn);
  free(v);
  EXPECT(amp_checkpoint_load(p, x->o, x->s) == AMP_OK, "the checkpoint loads: %s", amp_last_error());
  for (i = 0; i < 4; i++) {
    struct stat sb;
    EXPECT(lstat(name[i], &sb) == 0 && S_ISLNK(sb.st_mode), "the planted symlink %s was replaced or removed", name[i]);
    remove(name[i]);
  }
  /* a dangling symlink: its target is not created */
  remove("build/test/ckpt_nowhere.txt");
  amp__tmp_name(name[1], sizeof name[1], p, amp__tmp_seq + 1);
  EXPECT(symlink("ckpt_nowhere.txt", name[1]) == 0, "symlink %s", name[1]);
  EXPECT(amp_checkpoint_save(p, x->o, x->s) == AMP_OK, "save beside a dangling symlink: %s", amp_last_error());
  v = t_read_file("build/test/ckpt_nowhere.txt", &vn);
  EXPECT(v == NULL, "the dangling symlink's target was created");
  free(v);
  remove(name[1]);
  EXPECT(count_files("ckpt_link.bin.") == 0, "temporaries left behind: %d", count_files("ckpt_link.bin."));
  run_free(x); free(x);
  remove(p); remove(target);
}

/* ---- files that are not checkpoints: refused at once ------------------------------------------ */

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec; }
static long max_rss_kb(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_maxrss; }

/* A 4 GB sparse file is refused from its header, in well under a second and without holding it:
   zeros (bad magic), and a valid header claiming the whole size as payload (refused by the
   records, read one by one). */
static void a_sparse_multi_gb_file_is_refused_quickly(void) {
  const char *p = "build/test/ckpt_sparse.bin";
  const uint64_t big = (uint64_t)4 << 30;
  run_t *x = (run_t *)calloc(1, sizeof *x);
  static unsigned char before[20000], after[20000];
  unsigned char *good;
  size_t gn = 0, nb, na;
  int v, fd;
  run_init(x, AMP_ADAM); run_steps(x, 0, 3);
  amp_checkpoint_save(path, x->o, x->s);
  good = t_read_file(path, &gn);
  for (v = 0; v < 3 && good; v++) {
    amp_status st;
    double t0, dt;
    long rss0 = max_rss_kb();
    remove(p);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)big) != 0) { EXPECT(0, "cannot make a %llu-byte sparse file", (unsigned long long)big); if (fd >= 0) close(fd); break; }
    if (v >= 1) {   /* a checkpoint's header with the payload the size claims; v 2: the real scaler and optimizer records too */
      unsigned char h[32 + 72 + 56];
      uint64_t payload = big - 36;
      memcpy(h, good, sizeof h);
      memcpy(h + 24, &payload, 8);
      if (pwrite(fd, h, v == 1 ? 32 : sizeof h, 0) < 0) EXPECT(0, "pwrite");
    }
    close(fd);
    nb = state_bytes(x, before);
    t0 = now_s();
    st = amp_checkpoint_load(p, x->o, x->s);
    dt = now_s() - t0;
    na = state_bytes(x, after);
    EXPECT(st == AMP_ERR_CORRUPT, "variant %d: expected AMP_ERR_CORRUPT, got %s '%s'", v, amp_status_string(st), amp_last_error());
    /* reading the file would take tens of seconds; under valgrind or a sanitizer (t_quick) the
       few calls of a refusal may take longer than plain, so they get more room */
    EXPECT(dt < (t_quick() ? 10.0 : 1.0), "variant %d: refusing the 4 GB file took %.2f s", v, dt);
    EXPECT(max_rss_kb() - rss0 < 256 * 1024, "variant %d: the peak memory grew by %ld MB", v, (max_rss_kb() - rss0) / 1024);
    EXPECT(na == nb && memcmp(before, after, na) == 0, "variant %d: the refused load changed the live state", v);
  }
  free(good); run_free(x); free(x);
  remove(p); remove(path);
}

/* A FIFO (no writer), a character device and a directory are not regular files: AMP_ERR_IO at once,
   where the load once blocked forever waiting for the FIFO's writer. */
static void a_fifo_or_device_is_refused_at_once(void) {
  const char *p = "build/test/ckpt_fifo";
  run_t *x = (run_t *)calloc(1, sizeof *x);
  amp_status st;
  double t0;
  run_init(x, AMP_SGD);
  remove(p);
  EXPECT(mkfifo(p, 0644) == 0, "mkfifo %s", p);
  alarm(20);   /* a load that blocks fails the test (the process ends without its RESULT line) */
  t0 = now_s();
  st = amp_checkpoint_load(p, x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), p) && strstr(amp_last_error(), "FIFO"), "FIFO: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(now_s() - t0 < 1.0, "the FIFO took %.2f s to refuse", now_s() - t0);
  st = amp_checkpoint_load("/dev/zero", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "not a regular file"), "/dev/zero: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_checkpoint_load("build/test", x->o, x->s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "directory"), "a directory: %s '%s'", amp_status_string(st), amp_last_error());
  alarm(0);
  remove(p);
  run_free(x); free(x);
}

/* ---- concurrent saves: one complete checkpoint, never a mix ----------------------------------- */

#define CW_N 4000
/* Writer w's optimizer: every master element is w + 1, lr (w + 1) / 1000. */
static amp_optimizer *writer_optimizer(int w, float *weights, float *grads) {
  amp_optim_config c; amp_optimizer *o; size_t i;
  memset(&c, 0, sizeof c); c.kind = AMP_ADAM; c.lr = (float)(w + 1) / 1000.0f;
  for (i = 0; i < CW_N; i++) weights[i] = (float)(w + 1);
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_optimizer_add(o, AMP_F32, weights, grads, CW_N) != AMP_OK) return NULL;
  return o;
}

static void forked_concurrent_writers_leave_one_complete_checkpoint(void) {
  const char *p = "build/test/ckpt_concurrent.bin";
  int writers = t_quick() ? 3 : 4, rounds = t_quick() ? 6 : 40, w, loads = 0, bad_loads = 0, failed_children = 0;
  static float weights[CW_N], grads[CW_N], lw[CW_N], lg[CW_N];
  pid_t pid[8];
  amp_optimizer *reader;
  amp_status st;
  remove(p);
  for (w = 0; w < writers; w++) {
    pid[w] = fork();
    if (pid[w] == 0) {   /* a writer: saves `rounds` times, exits 0 if every save returned AMP_OK */
      amp_optimizer *o = writer_optimizer(w, weights, grads);
      int r, ok = o != NULL;
      for (r = 0; r < rounds && ok; r++) ok = amp_checkpoint_save(p, o, NULL) == AMP_OK;
      if (!ok) printf("  writer %d: %s\n", w, amp_last_error());
      amp_optimizer_destroy(o);   /* (valgrind checks the children for leaks too) */
      fflush(stdout);
      _exit(ok ? 0 : 1);
    }
  }
  reader = writer_optimizer(0, lw, lg);
  for (;;) {   /* read while they write: every load that finds the file gets one writer's whole state */
    int alive = 0, status;
    for (w = 0; w < writers; w++) if (pid[w] > 0) {
      pid_t r = waitpid(pid[w], &status, WNOHANG);
      if (r == 0) alive++;
      else { if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_children++; pid[w] = -1; }
    }
    st = amp_checkpoint_load(p, reader, NULL);
    if (st == AMP_OK) {
      size_t i; float v = lw[0];
      int consistent = v >= 1.0f && v <= (float)writers && reader->cfg.lr == v / 1000.0f;
      for (i = 0; i < CW_N && consistent; i++) consistent = reader->t[0].master[i] == v && lw[i] == v;
      loads++;
      if (!consistent) { bad_loads++; EXPECT(0, "load %d: a mix of writers (first element %g, lr %g)", loads, (double)v, (double)reader->cfg.lr); }
    } else if (!(st == AMP_ERR_IO && strstr(amp_last_error(), strerror(ENOENT)))) {
      bad_loads++; EXPECT(0, "load during the saves: %s '%s'", amp_status_string(st), amp_last_error());
    }
    if (!alive) break;
  }
  EXPECT(failed_children == 0, "%d of %d writers had a save fail", failed_children, writers);
  EXPECT(bad_loads == 0, "%d of the loads during the saves failed", bad_loads);
  st = amp_checkpoint_load(p, reader, NULL);
  EXPECT(st == AMP_OK, "the final file loads: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(count_files("ckpt_concurrent.bin.") == 0, "temporaries left behind: %d", count_files("ckpt_concurrent.bin."));
  printf("  %d writers x %d saves; %d loads during them, all complete\n", writers, rounds, loads);
  amp_optimizer_destroy(reader);
  remove(p);
}

/* A master that is not finite though every grad is: SGD's weight 3.4e38 with a grad of -1e38 at lr
   0.1 overflows to inf, then NaN; Adam's is given as inf (its steps are at most about lr, so they
   do not overflow it; inf / inf makes it NaN). The L2 decay SGD and Adam add to the grad carries
   it into the moments:
   NaN moments that no NaN grad made (a NaN grad skips its step). Every moment type: the run saves,
   a fresh optimizer loads its file and both go on with the same bits. The same file with every
   master made finite (CRC made good) is refused, nothing changed: a NaN moment needs an inf or NaN
   master beside it (its element's; AMP_MOMENTS_8BIT: its block's; _FP8: its tensor's). */
static uint32_t abs_bits(float x) { uint32_t b; memcpy(&b, &x, 4); return b & 0x7fffffffu; }   /* isnan and isfinite fold under -Ofast */
static size_t overflow_snap(const amp_optimizer *o, unsigned char *buf) {   /* the master and moments as kept */
  const amp__tensor *t = &o->t[0];
  size_t k = t->n * 4, mb = amp__moment_bytes(t->moments, t->n);
  memcpy(buf, t->master, k);
  if (t->moments == AMP_MOMENTS_F32) { memcpy(buf + k, t->m, t->n * 4); k += t->n * 4; if (t->v) { memcpy(buf + k, t->v, t->n * 4); k += t->n * 4; } }
  else { memcpy(buf + k, t->mq, mb); k += mb; if (t->vq) { memcpy(buf + k, t->vq, mb); k += mb; } }
  return k;
}
static void a_run_whose_masters_overflowed_loads_its_own_checkpoint(void) {
  enum { N = 4096 + 300 };
  static const int types[4] = {AMP_MOMENTS_F32, AMP_MOMENTS_BF16, AMP_MOMENTS_8BIT, AMP_MOMENTS_FP8};
  static float w[3][N], g[N];
  static unsigned char s0[12 * N + 64], s1[sizeof s0];
  const char *p2 = "build/test/ckpt_overflow.bin";
  int kind, ty, r, k;
  for (kind = 0; kind < 2; kind++)
    for (ty = 0; ty < 4; ty++) {
      amp_optim_config c = amp_optimizer_defaults(kind ? AMP_ADAM : AMP_SGD);
      amp_optimizer *o[3];
      amp_tensor_desc d;
      size_t e, nf = 0, na = 0, nb = 0, at = 0, l0, l1;
      int nan_moments = 0, st_ok = 1;
      unsigned char *file, *fa, *fb;
      c.lr = 0.1f; c.weight_decay = 0.01f;
      if (!kind) c.momentum = 0.9f;
      for (r = 0; r < 3; r++) {
        for (e = 0; e < N; e++) w[r][e] = 0.5f - (float)(e % 7) * 0.01f;
        w[r][0] = kind ? INFINITY : 3.4e38f;
        memset(&d, 0, sizeof d);
        d.weights = w[r]; d.dtype = AMP_F32; d.grads = g; d.grad_dtype = AMP_GRAD_F32; d.n = N; d.moments = types[ty];
        if (amp_optimizer_create(&o[r], amp_cpu(), &c) != AMP_OK || amp_optimizer_add_tensor(o[r], &d) != AMP_OK) {
          EXPECT(0, "setup: %s", amp_last_error());
          return;
        }
      }
      for (k = 0; k < 4; k++) {
        for (e = 0; e < N; e++) g[e] = 0.01f * (float)(e % 5 + 1);
        g[0] = -1e38f;
        st_ok &= amp_optimizer_step(o[0]) == AMP_OK && !amp_optimizer_last_skipped(o[0]);
      }
      EXPECT(st_ok, "kind %d moments %d: a step with finite grads failed or was skipped", kind, types[ty]);
      for (e = 0; e < N; e++) {
        const amp__tensor *t = &o[0]->t[0];
        nan_moments += abs_bits(ty ? amp__moment_at(o[0], t->moments, 1, t->mq, N, e) : t->m[e]) > 0x7f800000u;
      }
      EXPECT(nan_moments > 0, "kind %d moments %d: no NaN first moment (the test needs one)", kind, types[ty]);
      EXPECT(amp_checkpoint_save(path, o[0], NULL) == AMP_OK, "save: %s", amp_last_error());
      EXPECT(amp_checkpoint_load(path, o[1], NULL) == AMP_OK, "kind %d moments %d: its own file is refused: %s", kind,
             types[ty], amp_last_error());
      /* the file with every master made finite */
      file = t_read_file(path, &nf);
      while (file && at + 4 * (size_t)N <= nf && memcmp(file + at, o[0]->t[0].master, 4 * (size_t)N)) at++;
      EXPECT(file && at + 4 * (size_t)N <= nf, "kind %d moments %d: the master's bytes are not in the file", kind,
             types[ty]);
      if (file && at + 4 * (size_t)N <= nf) {
        const float fin = 0.5f;
        for (e = 0; e < N; e++) {
          float x;
          memcpy(&x, file + at + 4 * e, 4);
          if (abs_bits(x) >= 0x7f800000u) memcpy(file + at + 4 * e, &fin, 4);
        }
        recrc(file, nf);
        write_all(p2, file, nf);
        l0 = overflow_snap(o[2], s0);
        EXPECT(amp_checkpoint_load(p2, o[2], NULL) == AMP_ERR_CORRUPT && strstr(amp_last_error(), "amp_checkpoint_load") &&
                   strstr(amp_last_error(), "no update leaves"),
               "kind %d moments %d: NaN moments beside finite masters: %s", kind, types[ty], amp_last_error());
        l1 = overflow_snap(o[2], s1);
        EXPECT(l0 == l1 && memcmp(s0, s1, l0) == 0, "kind %d moments %d: the refused load changed the state", kind,
               types[ty]);
      }
      free(file);
      /* the loaded run and the one that went on: the same bits */
      for (k = 0; k < 2; k++) {
        for (e = 0; e < N; e++) g[e] = 0.02f * (float)(e % 3 + 1);
        amp_optimizer_step(o[0]);
        amp_optimizer_step(o[1]);
      }
      EXPECT(amp_checkpoint_save(path, o[0], NULL) == AMP_OK && amp_checkpoint_save(p2, o[1], NULL) == AMP_OK,
             "save: %s", amp_last_error());
      fa = t_read_file(path, &na); fb = t_read_file(p2, &nb);
      EXPECT(fa && fb && na == nb && memcmp(fa, fb, na) == 0 && memcmp(w[0], w[1], sizeof w[0]) == 0,
             "kind %d moments %d: the resumed run differs from the one that went on", kind, types[ty]);
      free(fa); free(fb);
      for (r = 0; r < 3; r++) amp_optimizer_destroy(o[r]);
    }
}

static void crc32_matches_the_standard_check_value(void) {
  amp__crc c;
  amp__crc_init(&c); amp__crc_add(&c, "123456789", 9);
  EXPECT(amp__crc_value(&c) == 0xCBF43926u, "CRC-32 of '123456789': expected 0xCBF43926, got 0x%08x", (unsigned)amp__crc_value(&c));
}

int main(void) {
  RUN(crc32_matches_the_standard_check_value);
  RUN(resume_after_save_and_load_is_bit_identical);
  RUN(a_run_whose_masters_overflowed_loads_its_own_checkpoint);
  RUN(save_and_load_of_one_half);
  RUN(every_byte_flip_and_truncation_is_refused_and_changes_nothing);
  RUN(other_kind_shape_dtype_or_version_is_refused);
  RUN(version_1_and_2_files_are_written_and_read_as_the_manual_lays_them_out);
  RUN(spike_state_round_trips_and_decides_the_same_next);
  RUN(fields_edited_with_a_recomputed_crc_are_refused);
  RUN(a_file_cut_at_any_record_is_refused_naming_it);
  RUN(scaler_states_the_rule_cannot_reach_are_refused);
  RUN(step_and_skip_counts_beyond_2_31_round_trip);
  RUN(a_file_name_too_long_for_the_suffix_still_saves);
  RUN(empty_or_unusable_paths_are_refused_and_touch_nothing);
  RUN(a_symlink_planted_at_the_temporary_is_not_followed);
  RUN(a_sparse_multi_gb_file_is_refused_quickly);
  RUN(a_fifo_or_device_is_refused_at_once);
  RUN(forked_concurrent_writers_leave_one_complete_checkpoint);
  TEST_END();
}
