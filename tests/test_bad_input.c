/* tests/test_bad_input.c - bad input to the CPU library: every refused call returns the right status, names the
   function and the bad value, and changes nothing (the whole optimizer and scaler compared byte
   for byte before and after); checkpoints on paths that are directories or cannot be written;
   cblas leading-dimension rules for every layout and transposition. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#define DIR_ "build/test/bad_input"

/* ---- the whole state of an optimizer and a scaler, as bytes -------------------------------- */
typedef struct { unsigned char *p; size_t n, cap; } snap;
static void snap_put(snap *s, const void *p, size_t n) {
  if (s->n + n > s->cap) {
    size_t cap = (s->n + n) * 2;
    unsigned char *q = (unsigned char *)realloc(s->p, cap);
    if (!q) return;
    s->p = q; s->cap = cap;
  }
  memcpy(s->p + s->n, p, n); s->n += n;
}
/* Every field of both objects (the optimizer's config field by field: no padding compared), the
   masters, the moments and the model copies the optimizer writes. */
static snap take_(const amp_optimizer *o, const amp_scaler *s, int calls) {
  snap z = {NULL, 0, 0};
  size_t i;
  if (s) {
    snap_put(&z, &s->pr, sizeof s->pr); snap_put(&z, &s->st, sizeof s->st); snap_put(&z, &s->init_scale, sizeof s->init_scale);
    if (calls) {
      snap_put(&z, &s->iter, sizeof s->iter); snap_put(&z, &s->found_inf, sizeof s->found_inf);
      snap_put(&z, &s->recorded, sizeof s->recorded);
    }
    snap_put(&z, &s->last_skipped, sizeof s->last_skipped);
    snap_put(&z, &s->skipped, sizeof s->skipped); snap_put(&z, &s->floor_logged, sizeof s->floor_logged);
  }
  if (o) {
    const amp_optim_config *c = &o->cfg;
    int nm = amp__o_moments(c);
    snap_put(&z, &c->kind, sizeof c->kind); snap_put(&z, &c->lr, 4); snap_put(&z, &c->weight_decay, 4);
    snap_put(&z, &c->momentum, 4); snap_put(&z, &c->dampening, 4); snap_put(&z, &c->nesterov, sizeof c->nesterov);
    snap_put(&z, &c->beta1, 4); snap_put(&z, &c->beta2, 4); snap_put(&z, &c->eps, 4); snap_put(&z, &c->max_grad_norm, 4);
    snap_put(&z, &o->count, sizeof o->count); snap_put(&z, &o->step, sizeof o->step);
    if (calls) {
      snap_put(&z, &o->sc_id, sizeof o->sc_id); snap_put(&z, &o->sc_iter, sizeof o->sc_iter); snap_put(&z, &o->stage, sizeof o->stage);
      snap_put(&z, &o->unscaled_count, sizeof o->unscaled_count); snap_put(&z, &o->found_inf, sizeof o->found_inf);
      snap_put(&z, &o->inv, sizeof o->inv); snap_put(&z, &o->grad_norm, sizeof o->grad_norm);
    }
    for (i = 0; i < o->count; i++) {
      snap_put(&z, &o->t[i].n, sizeof o->t[i].n); snap_put(&z, &o->t[i].wtype, sizeof o->t[i].wtype); snap_put(&z, &o->t[i].gtype, sizeof o->t[i].gtype);
      snap_put(&z, o->t[i].master, o->t[i].n * 4);
      if (nm >= 1) snap_put(&z, o->t[i].m, o->t[i].n * 4);
      if (nm >= 2) snap_put(&z, o->t[i].v, o->t[i].n * 4);
      snap_put(&z, o->t[i].w, o->t[i].n * amp_dtype_size(o->t[i].wtype));
    }
  }
  return z;
}
/* Everything, the call-order bookkeeping included. */
static snap take(const amp_optimizer *o, const amp_scaler *s) { return take_(o, s, 1); }
/* What a checkpoint holds: everything but the call-order bookkeeping of the current iteration. */
static snap take_saved(const amp_optimizer *o, const amp_scaler *s) { return take_(o, s, 0); }
static int same(snap a, snap b) { int r = a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); free(a.p); free(b.p); return r; }

/* An Adam optimizer over two tensors (f16 and bf16 with f32 grads) and a dynamic scaler, after a few
   real steps so that masters, moments and the scaler's state are all non-trivial. */
#define N1 37
#define N2 19
typedef struct { amp_f16 w1[N1], g1[N1]; amp_bf16 w2[N2]; float g2[N2]; amp_optimizer *o; amp_scaler *s; } rig;
static int rig_init(rig *r, amp_optim_kind kind, float momentum) {
  amp_optim_config c; amp_scaler_config sc; size_t i; int k;
  memset(&c, 0, sizeof c); c.kind = kind; c.lr = 0.01f; c.weight_decay = 0.01f; c.momentum = momentum; c.max_grad_norm = 3.0f;
  memset(&sc, 0, sizeof sc); sc.init_scale = 1024; sc.growth_interval = 2;
  r->o = NULL; r->s = NULL;
  for (i = 0; i < N1; i++) r->w1[i] = amp_f32_to_f16((float)i / 10.0f - 1.0f);
  for (i = 0; i < N2; i++) r->w2[i] = amp_f32_to_bf16(1.0f - (float)i / 7.0f);
  if (amp_optimizer_create(&r->o, amp_cpu(), &c) || amp_scaler_create(&r->s, amp_cpu(), &sc) ||
      amp_optimizer_add(r->o, AMP_F16, r->w1, r->g1, N1) || amp_optimizer_add_mixed(r->o, AMP_BF16, r->w2, AMP_F32, r->g2, N2)) {
    EXPECT(0, "rig setup: %s", amp_last_error());
    return 0;
  }
  for (k = 0; k < 5; k++) {
    float s = amp_scaler_get_scale(r->s);
    for (i = 0; i < N1; i++) r->g1[i] = amp_f32_to_f16(((float)(i % 5) - 2.0f) * 0.1f * s);
    for (i = 0; i < N2; i++) r->g2[i] = ((float)(i % 3) - 1.0f) * s;
    if (k == 3) r->g2[4] = NAN;   /* one skipped step: the scaler's counts move too */
    if (amp_scaler_step(r->s, r->o) || amp_scaler_update(r->s)) { EXPECT(0, "rig step %d: %s", k, amp_last_error()); return 0; }
  }
  return 1;
}
static void rig_free(rig *r) { amp_optimizer_destroy(r->o); amp_scaler_destroy(r->s); }

/* ---- checkpoints on bad paths -------------------------------------------------------------- */

/* A directory opens for reading on POSIX and reports a size of LLONG_MAX on some file systems:
   the load must say it cannot read the path (AMP_ERR_IO), not try to allocate that much. */
static void checkpoint_load_of_a_directory_is_an_io_error_naming_the_path(void) {
  rig r;
  amp_status st;
  snap before;
  mkdir("build", 0755); mkdir("build/test", 0755); mkdir(DIR_, 0755); mkdir(DIR_ "/a_dir", 0755);
  if (!rig_init(&r, AMP_ADAM, 0)) return;
  before = take(r.o, r.s);
  st = amp_checkpoint_load(DIR_ "/a_dir", r.o, r.s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "amp_checkpoint_load") && strstr(amp_last_error(), DIR_ "/a_dir"),
         "load of a directory: expected AMP_ERR_IO naming the path, got %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(same(before, take(r.o, r.s)), "a refused load changed the optimizer or the scaler");
  rig_free(&r);
}

/* Files in DIR_ whose names start with prefix (temporaries left behind). */
static int files_starting_with(const char *prefix) { return t_count_files(DIR_, prefix); }

/* The previous checkpoint survives a save that cannot write: here a file-size limit below the
   checkpoint's size makes write() fail with EFBIG, as a full disk would (this works as root too,
   where permissions do not stop a write). The message names the path and the system's reason,
   and no temporary is left behind. The target being a directory is an I/O error too. */
static void checkpoint_save_that_cannot_write_keeps_the_previous_file(void) {
  rig r, q;
  amp_status st;
  snap saved;
  struct rlimit old, lim;
  void (*prev)(int);
  mkdir("build", 0755); mkdir("build/test", 0755); mkdir(DIR_, 0755);
  remove(DIR_ "/keep.ckpt");
  if (!rig_init(&r, AMP_SGD, 0.9f)) return;
  EXPECT(amp_checkpoint_save(DIR_ "/keep.ckpt", r.o, r.s) == AMP_OK, "first save: %s", amp_last_error());
  saved = take_saved(r.o, r.s);
  r.g1[0] = amp_f32_to_f16(1.0f);
  amp_scaler_step(r.s, r.o); amp_scaler_update(r.s);   /* the live state moves on */
  prev = signal(SIGXFSZ, SIG_IGN);
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old; lim.rlim_cur = 100;
  EXPECT(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit(RLIMIT_FSIZE, 100) failed");
  st = amp_checkpoint_save(DIR_ "/keep.ckpt", r.o, r.s);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "amp_checkpoint_save") && strstr(amp_last_error(), DIR_ "/keep.ckpt") &&
         strstr(amp_last_error(), strerror(EFBIG)),
         "save that cannot write: expected AMP_ERR_IO naming the path and '%s', got %s '%s'", strerror(EFBIG),
         amp_status_string(st), amp_last_error());
  EXPECT(files_starting_with("keep.ckpt.") == 0, "the failed save left %d temporary files", files_starting_with("keep.ckpt."));
  /* the old file is intact: a fresh rig loads it and holds exactly what was saved */
  if (rig_init(&q, AMP_SGD, 0.9f)) {
    st = amp_checkpoint_load(DIR_ "/keep.ckpt", q.o, q.s);
    EXPECT(st == AMP_OK, "the previous checkpoint loads: %s '%s'", amp_status_string(st), amp_last_error());
    EXPECT(same(saved, take_saved(q.o, q.s)), "the loaded state is the one saved before the failed save");
    rig_free(&q);
  } else free(saved.p);
  /* the target is a directory: refused, no temporary left behind */
  mkdir(DIR_ "/is_dir", 0755);
  st = amp_checkpoint_save(DIR_ "/is_dir", r.o, r.s);
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), DIR_ "/is_dir"), "save onto a directory: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(files_starting_with("is_dir.") == 0, "a failed save left %d temporary files", files_starting_with("is_dir."));
  rig_free(&r);
}

/* ---- configs: NaN, inf, negative, out of range in every field; zero means the default ------- */

static void every_bad_scaler_field_is_refused_naming_it(void) {
  struct { const char *field; float init, growth, backoff, min, max; int interval, hyst, mode; } cases[] = {
    {"growth_factor", 0, INFINITY, 0, 0, 0, 0, 0, 0}, {"growth_factor", 0, -2, 0, 0, 0, 0, 0, 0},
    {"growth_factor", 0, 0.5f, 0, 0, 0, 0, 0, 0},
    {"backoff_factor", 0, 0, NAN, 0, 0, 0, 0, 0}, {"backoff_factor", 0, 0, 1.0f, 0, 0, 0, 0, 0},
    {"backoff_factor", 0, 0, INFINITY, 0, 0, 0, 0, 0}, {"backoff_factor", 0, 0, -INFINITY, 0, 0, 0, 0, 0},
    {"growth_interval", 0, 0, 0, 0, 0, INT_MIN, 0, 0}, {"hysteresis", 0, 0, 0, 0, 0, 0, INT_MIN, 0},
    {"hysteresis_mode", 0, 0, 0, 0, 0, 0, 0, -1}, {"hysteresis_mode", 0, 0, 0, 0, 0, 0, 0, INT_MAX},
    {"min_scale", 0, 0, 0, NAN, 0, 0, 0, 0}, {"min_scale", 0, 0, 0, -FLT_MIN, 0, 0, 0, 0},
    {"max_scale", 0, 0, 0, 0, NAN, 0, 0, 0}, {"max_scale", 0, 0, 0, 0, INFINITY, 0, 0, 0},
    {"max_scale", 0, 0, 0, 0, -1, 0, 0, 0}, {"max_scale", 0, 0, 0, 0, 1e-40f, 0, 0, 0},
    {"init_scale", NAN, 0, 0, 0, 0, 0, 0, 0}, {"init_scale", -INFINITY, 0, 0, 0, 0, 0, 0, 0},
    {"init_scale", FLT_MIN / 2, 0, 0, 0, 0, 0, 0, 0}, {"init_scale", 4, 0, 0, 0, 2, 0, 0, 0},
    /* subnormal values: an -O2 build and an -Ofast one (denormals read as 0) must agree */
    {"backoff_factor", 0, 0, 1e-45f, 0, 0, 0, 0, 0}, {"min_scale", 0, 0, 0, 1e-40f, 0, 0, 0, 0},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    amp_scaler_config c;
    amp_scaler *s = (amp_scaler *)&c;
    amp_status st;
    memset(&c, 0, sizeof c);
    c.init_scale = cases[i].init; c.growth_factor = cases[i].growth; c.backoff_factor = cases[i].backoff;
    c.min_scale = cases[i].min; c.max_scale = cases[i].max; c.growth_interval = cases[i].interval;
    c.hysteresis = cases[i].hyst; c.hysteresis_mode = cases[i].mode;
    st = amp_scaler_create(&s, amp_cpu(), &c);
    EXPECT(st == AMP_ERR_ARG && s == NULL && strstr(amp_last_error(), "amp_scaler_create") && strstr(amp_last_error(), cases[i].field),
           "case %zu (%s): expected AMP_ERR_ARG naming the field, got %s '%s'", i, cases[i].field, amp_status_string(st), amp_last_error());
    if (st == AMP_OK) amp_scaler_destroy(s);
  }
}

static void every_bad_optimizer_field_is_refused_naming_it(void) {
  struct { const char *field; float lr, wd, mom, damp, b1, b2, eps, mgn; int kind; } cases[] = {
    {"lr", INFINITY, 0, 0, 0, 0, 0, 0, 0, 0}, {"lr", -FLT_MIN, 0, 0, 0, 0, 0, 0, 0, 1},
    {"weight_decay", 0, NAN, 0, 0, 0, 0, 0, 0, 2}, {"weight_decay", 0, -INFINITY, 0, 0, 0, 0, 0, 0, 0},
    {"momentum", 0, 0, NAN, 0, 0, 0, 0, 0, 0}, {"momentum", 0, 0, INFINITY, 0, 0, 0, 0, 0, 0},
    {"dampening", 0, 0, 0.9f, NAN, 0, 0, 0, 0, 0}, {"dampening", 0, 0, 0.9f, -0.25f, 0, 0, 0, 0, 0},
    {"beta1", 0, 0, 0, 0, NAN, 0, 0, 0, 1}, {"beta1", 0, 0, 0, 0, -0.1f, 0, 0, 0, 2}, {"beta1", 0, 0, 0, 0, INFINITY, 0, 0, 0, 1},
    {"beta2", 0, 0, 0, 0, 0, 1.0f, 0, 0, 1}, {"beta2", 0, 0, 0, 0, 0, NAN, 0, 0, 2},
    {"eps", 0, 0, 0, 0, 0, 0, NAN, 0, 1}, {"eps", 0, 0, 0, 0, 0, 0, INFINITY, 0, 2},
    {"max_grad_norm", 0, 0, 0, 0, 0, 0, 0, NAN, 0}, {"max_grad_norm", 0, 0, 0, 0, 0, 0, 0, INFINITY, 1},
    {"kind", 0, 0, 0, 0, 0, 0, 0, 0, -1}, {"kind", 0, 0, 0, 0, 0, 0, 0, 0, 5},
    {"lr", 1e-40f, 0, 0, 0, 0, 0, 0, 0, 2}, {"weight_decay", 0, 1e-42f, 0, 0, 0, 0, 0, 0, 0},
    {"max_grad_norm", 0, 0, 0, 0, 0, 0, 0, 1e-45f, 1}, {"eps", 0, 0, 0, 0, 0, 0, 1e-39f, 0, 1},
  };
  size_t i;
  amp_optimizer *o;
  amp_optim_config c;
  float w[3] = {1, 2, 3}, g[3] = {0, 0, 0};
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    amp_status st;
    memset(&c, 0, sizeof c);
    c.lr = cases[i].lr; c.weight_decay = cases[i].wd; c.momentum = cases[i].mom; c.dampening = cases[i].damp;
    c.beta1 = cases[i].b1; c.beta2 = cases[i].b2; c.eps = cases[i].eps; c.max_grad_norm = cases[i].mgn;
    c.kind = (amp_optim_kind)cases[i].kind;
    o = (amp_optimizer *)&c;
    st = amp_optimizer_create(&o, amp_cpu(), &c);
    EXPECT(st == AMP_ERR_ARG && o == NULL && strstr(amp_last_error(), "amp_optimizer_create") && strstr(amp_last_error(), cases[i].field),
           "case %zu (%s): expected AMP_ERR_ARG naming the field, got %s '%s'", i, cases[i].field, amp_status_string(st), amp_last_error());
    if (st == AMP_OK) amp_optimizer_destroy(o);
  }
  /* set_lr: NaN and inf are refused and the rate stays */
  memset(&c, 0, sizeof c); c.lr = 0.5f;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_optimizer_add(o, AMP_F32, w, g, 3) != AMP_OK) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  EXPECT(amp_optimizer_set_lr(o, NAN) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_set_lr") && strstr(amp_last_error(), "nan"),
         "set_lr(NaN): '%s'", amp_last_error());
  EXPECT(amp_optimizer_set_lr(o, INFINITY) == AMP_ERR_ARG && strstr(amp_last_error(), "inf"), "set_lr(inf): '%s'", amp_last_error());
  EXPECT(amp_optimizer_set_lr(NULL, 0.1f) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_set_lr"), "set_lr(NULL): '%s'", amp_last_error());
  EXPECT(amp_optimizer_set_lr(o, 1e-40f) == AMP_ERR_ARG && strstr(amp_last_error(), "subnormal"), "set_lr(1e-40): '%s'",
         amp_last_error());
  EXPECT(o->cfg.lr == 0.5f, "lr after refused set_lr calls: expected 0.5, got %g", (double)o->cfg.lr);
  amp_optimizer_destroy(o);
}

/* A tensor's name goes into one log line: a line break, an escape or any other control byte in it
   could forge lines, so it is refused at add, nothing added. */
static void tensor_names_with_control_bytes_are_refused(void) {
  const char *bad[] = {"w\nWARNING: checkpoint corrupt, delete it", "w\r", "\x1b[31mred", "tab\there", "del\x7f"};
  const char *good = "layer.0/weight (bf16) #1";
  float w[4] = {1, 2, 3, 4}, g[4] = {0};
  amp_optimizer *o = NULL;
  amp_tensor_desc t;
  size_t i;
  amp_status st;
  if (amp_optimizer_create(&o, amp_cpu(), NULL) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  memset(&t, 0, sizeof t);
  t.weights = w; t.grads = g; t.n = 4;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    t.name = bad[i];
    st = amp_optimizer_add_tensor(o, &t);
    EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add_tensor") && strstr(amp_last_error(), "control byte"),
           "name %zu: expected AMP_ERR_ARG naming the control byte, got %s '%s'", i, amp_status_string(st), amp_last_error());
    EXPECT(amp_optimizer_count(o) == 0, "name %zu: a tensor was added", i);
  }
  t.name = good;
  st = amp_optimizer_add_tensor(o, &t);
  EXPECT(st == AMP_OK && amp_optimizer_count(o) == 1, "a printable name: %s '%s'", amp_status_string(st), amp_last_error());
  amp_optimizer_destroy(o);
}

/* A zero field (and -0.0, which compares equal) means the documented default. */
static void zero_config_means_the_documented_defaults(void) {
  amp_scaler_config c;
  amp_optim_config oc;
  amp_scaler *s;
  amp_optimizer *o;
  amp_scale_params pr;
  amp_scale_state st;
  memset(&c, 0, sizeof c);
  c.growth_factor = -0.0f; c.backoff_factor = -0.0f; c.init_scale = -0.0f;
  if (amp_scaler_create(&s, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  memset(&pr, 0xff, sizeof pr); memset(&st, 0xff, sizeof st);   /* never read unset, even if the call fails */
  EXPECT(amp_scaler_get_state(s, &st, &pr) == AMP_OK, "get_state: %s", amp_last_error());
  EXPECT(st.scale == 65536.0f && pr.growth == 2.0f && pr.backoff == 0.5f && pr.interval == 2000 && pr.hysteresis == 1 &&
         pr.mode == AMP_HYSTERESIS_CONSECUTIVE && pr.floor == FLT_MIN && pr.cap == 0.0f && !pr.fixed && !pr.late_growth,
         "defaults: scale %g growth %g backoff %g interval %d hysteresis %d mode %d floor %a cap %g",
         (double)st.scale, (double)pr.growth, (double)pr.backoff, (int)pr.interval, (int)pr.hysteresis, (int)pr.mode, (double)pr.floor, (double)pr.cap);
  amp_scaler_destroy(s);
  memset(&oc, 0, sizeof oc); oc.kind = AMP_ADAM;
  if (amp_optimizer_create(&o, amp_cpu(), &oc) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  EXPECT(o->cfg.lr == 1e-3f && o->cfg.beta1 == 0.9f && o->cfg.beta2 == 0.999f && o->cfg.eps == 1e-8f && o->cfg.weight_decay == 0.0f &&
         o->cfg.max_grad_norm == 0.0f, "Adam defaults: lr %g beta1 %g beta2 %g eps %g", (double)o->cfg.lr, (double)o->cfg.beta1,
         (double)o->cfg.beta2, (double)o->cfg.eps);
  amp_optimizer_destroy(o);
  EXPECT(amp_optimizer_create(&o, amp_cpu(), NULL) == AMP_OK && o->cfg.kind == AMP_SGD && o->cfg.lr == 1e-3f,
         "NULL config: SGD lr 1e-3: %s", amp_last_error());
  amp_optimizer_destroy(o);
}

/* ---- amp_optimizer_add: overlaps of every kind, sizes that overflow -------------------------- */

static void optimizer_add_refuses_every_overlap_and_changes_nothing(void) {
  static float pool[256];
  float *wa = pool + 32, *ga = pool + 64, *b = pool + 128;   /* wa: 16 weights, ga: 16 grads */
  amp_optim_config c;
  amp_optimizer *o;
  snap before;
  size_t i;
  struct { const char *what; amp_dtype wt; void *w; amp_dtype gt; const void *g; size_t n; const char *msg; } bad[] = {
    {"the same weights again", AMP_F32, wa, AMP_F32, b, 4, "weights"},
    {"the same grads again", AMP_F32, b, AMP_F32, ga, 4, "grads"},
    {"weights starting inside earlier weights", AMP_F32, wa + 15, AMP_F32, b, 4, "weights"},
    {"weights ending inside earlier weights", AMP_F32, pool + 29, AMP_F32, b, 4, "weights"},
    {"grads overlapping another tensor's weights", AMP_F32, b, AMP_F32, wa + 3, 2, "grads"},
    {"weights overlapping another tensor's grads", AMP_F32, ga + 8, AMP_F32, b, 2, "weights"},
    {"f16 weights sharing two bytes with earlier f32 weights", AMP_F16, (char *)wa + 62, AMP_F16, b, 3, "weights"},
    {"grads overlapping their own weights, other dtypes", AMP_F32, b, AMP_BF16, (char *)b + 14, 4, "overlap"},
    {"grads == weights", AMP_F16, b, AMP_F16, b, 4, "weights buffer"},
  };
  memset(&c, 0, sizeof c); c.kind = AMP_ADAM;
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK || amp_optimizer_add(o, AMP_F32, wa, ga, 16) != AMP_OK) {
    EXPECT(0, "setup: %s", amp_last_error()); return;
  }
  before = take(o, NULL);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    amp_status st = amp_optimizer_add_mixed(o, bad[i].wt, bad[i].w, bad[i].gt, bad[i].g, bad[i].n);
    EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_optimizer_add") && strstr(amp_last_error(), bad[i].msg),
           "%s: expected AMP_ERR_ARG naming %s, got %s '%s'", bad[i].what, bad[i].msg, amp_status_string(st), amp_last_error());
  }
  /* sizes whose byte counts overflow size_t are refused before any arithmetic on them */
  EXPECT(amp_optimizer_add(o, AMP_F32, b, b + 32, (SIZE_MAX / 16) + 1) == AMP_ERR_ARG && strstr(amp_last_error(), "too large"),
         "n = SIZE_MAX/16 + 1: '%s'", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F32, b, b + 32, SIZE_MAX) == AMP_ERR_ARG && strstr(amp_last_error(), "too large"),
         "n = SIZE_MAX: '%s'", amp_last_error());
  EXPECT(same(before, take(o, NULL)), "refused adds changed the optimizer");
  /* buffers that only touch are fine */
  EXPECT(amp_optimizer_add(o, AMP_F32, b, b + 4, 4) == AMP_OK, "adjacent grads: %s", amp_last_error());
  EXPECT(amp_optimizer_add(o, AMP_F16, b + 8, (char *)(b + 8) + 8, 4) == AMP_OK, "adjacent f16 buffers: %s", amp_last_error());
  EXPECT(amp_optimizer_count(o) == 3, "three tensors: %zu", amp_optimizer_count(o));
  amp_optimizer_destroy(o);
}

/* ---- call order: every refused call changes nothing ------------------------------------------ */

static void call_order_errors_change_nothing(void) {
  rig r;
  amp_status st;
  snap before;
  size_t i;
  if (!rig_init(&r, AMP_ADAMW, 0)) return;
  for (i = 0; i < N1; i++) r.g1[i] = amp_f32_to_f16(0.25f * amp_scaler_get_scale(r.s));
  before = take(r.o, r.s);
  st = amp_scaler_update(r.s);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_scaler_update") && strstr(amp_last_error(), "No inf checks were recorded"),
         "update with nothing recorded: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(same(before, take(r.o, r.s)), "a refused update changed something");
  EXPECT(amp_scaler_unscale(r.s, r.o) == AMP_OK, "unscale: %s", amp_last_error());
  before = take(r.o, r.s);
  st = amp_scaler_unscale(r.s, r.o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "already been called"), "unscale twice: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(same(before, take(r.o, r.s)), "a refused second unscale changed something");
  EXPECT(amp_scaler_step(r.s, r.o) == AMP_OK, "step: %s", amp_last_error());
  before = take(r.o, r.s);
  st = amp_scaler_step(r.s, r.o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_scaler_step"), "step twice: %s '%s'", amp_status_string(st), amp_last_error());
  st = amp_scaler_unscale(r.s, r.o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "after step()"), "unscale after step: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_step(NULL, r.o) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_scaler_step: scaler is NULL"), "step(NULL, o): '%s'", amp_last_error());
  EXPECT(amp_scaler_unscale(r.s, NULL) == AMP_ERR_ARG && strstr(amp_last_error(), "amp_scaler_unscale: optimizer is NULL"), "unscale(s, NULL): '%s'", amp_last_error());
  EXPECT(amp_scaler_update(NULL) == AMP_ERR_ARG && amp_scaler_update_found_inf(NULL, 1) == AMP_ERR_ARG, "update(NULL)");
  EXPECT(same(before, take(r.o, r.s)), "refused calls after step changed something");
  EXPECT(amp_scaler_update(r.s) == AMP_OK, "update: %s", amp_last_error());
  rig_free(&r);
}

/* A tensor added between unscale() and step(): the step refuses (the unscale did not see its grads)
   and changes nothing; after update() the next iteration steps every tensor. */
static void a_tensor_added_between_unscale_and_step_makes_that_step_fail(void) {
  float w1[4] = {1, 2, 3, 4}, g1[4], w2[4] = {5, 6, 7, 8}, g2[4];
  amp_optimizer *o; amp_scaler *s;
  amp_optim_config c;
  amp_status st;
  snap before;
  int i;
  memset(&c, 0, sizeof c); c.lr = 1.0f;
  if (amp_optimizer_create(&o, amp_cpu(), &c) || amp_scaler_create(&s, amp_cpu(), NULL) || amp_optimizer_add(o, AMP_F32, w1, g1, 4)) {
    EXPECT(0, "setup: %s", amp_last_error()); return;
  }
  for (i = 0; i < 4; i++) { g1[i] = 65536.0f; g2[i] = 65536.0f; }
  EXPECT(amp_scaler_unscale(s, o) == AMP_OK, "unscale: %s", amp_last_error());
  st = amp_optimizer_add(o, AMP_F32, w2, g2, 4);
  if (st == AMP_OK) {   /* accepted: then the step must refuse, changing nothing */
    before = take(o, s);
    st = amp_scaler_step(s, o);
    EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_scaler_step") && strstr(amp_last_error(), "added after unscale"),
           "step after an add that followed unscale: %s '%s'", amp_status_string(st), amp_last_error());
    EXPECT(same(before, take(o, s)) && w1[0] == 1 && w2[0] == 5, "the refused step changed something: w1 %g w2 %g", (double)w1[0], (double)w2[0]);
  } else {
    EXPECT(st == AMP_ERR_STATE || st == AMP_ERR_ARG, "add between unscale and step: %s '%s'", amp_status_string(st), amp_last_error());
    EXPECT(amp_optimizer_add(o, AMP_F32, w2, g2, 4) != AMP_OK && amp_optimizer_count(o) == 1, "refused add: nothing added");
  }
  EXPECT(amp_scaler_update(s) == AMP_OK, "update closes the iteration: %s", amp_last_error());
  if (amp_optimizer_count(o) == 1) amp_optimizer_add(o, AMP_F32, w2, g2, 4);
  EXPECT(amp_scaler_step(s, o) == AMP_OK && amp_scaler_update(s) == AMP_OK, "the next iteration: %s", amp_last_error());
  EXPECT(w1[0] == 0.0f && w2[0] == 4.0f, "both tensors stepped by lr * 1: w1 %g (expected 0), w2 %g (expected 4)", (double)w1[0], (double)w2[0]);
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

/* PyTorch keeps a step count per parameter: a parameter added after N updates (add_param_group)
   gets Adam's bias correction of t = 1 and SGD's "first step" momentum buffer (buf = g) at its
   own first update. amp.h keeps one step count per optimizer, so a tensor added after an update
   would get t = N + 1: the add is refused instead (AMP_ERR_STATE, nothing added), as on CUDA. A
   tensor added when every earlier step was skipped (no update yet) is fine. */
static void a_tensor_added_after_an_update_is_refused_or_gets_its_own_first_step(void) {
  static const amp_optim_kind kinds[2] = {AMP_ADAM, AMP_SGD};
  int k;
  for (k = 0; k < 2; k++) {
    float w1[3] = {1, 2, 3}, g1[3] = {0.5f, -1, 2}, w2[3] = {1, -1, 0.5f}, g2[3] = {0.25f, 3, -2}, w3[3] = {1, -1, 0.5f};
    amp_optimizer *o, *fresh; amp_scaler *s;
    amp_optim_config c;
    amp_scaler_config sc;
    amp_status st;
    snap before;
    memset(&c, 0, sizeof c); c.kind = kinds[k]; c.lr = 0.1f; c.momentum = kinds[k] == AMP_SGD ? 0.9f : 0.0f; c.dampening = kinds[k] == AMP_SGD ? 0.5f : 0.0f;
    memset(&sc, 0, sizeof sc); sc.init_scale = 1; sc.fixed = 1;
    if (amp_optimizer_create(&o, amp_cpu(), &c) || amp_optimizer_create(&fresh, amp_cpu(), &c) || amp_scaler_create(&s, amp_cpu(), &sc) ||
        amp_optimizer_add(o, AMP_F32, w1, g1, 3) || amp_optimizer_add(fresh, AMP_F32, w3, g2, 3)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    g1[1] = INFINITY;   /* a skipped step first: still no update, so an add is fine */
    amp_scaler_step(s, o); amp_scaler_update(s);
    g1[1] = -1;
    EXPECT(amp_optimizer_step_count(o) == 0, "kind %d: the skipped step is not counted", (int)kinds[k]);
    amp_scaler_step(s, o); amp_scaler_update(s);
    amp_scaler_step(s, o); amp_scaler_update(s);
    before = take(o, NULL);
    st = amp_optimizer_add(o, AMP_F32, w2, g2, 3);
    if (st != AMP_OK) {
      EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_optimizer_add") && amp_optimizer_count(o) == 1,
             "kind %d: add after 2 updates: %s '%s'", (int)kinds[k], amp_status_string(st), amp_last_error());
      EXPECT(same(before, take(o, NULL)), "kind %d: the refused add changed the optimizer", (int)kinds[k]);
    } else {
      free(before.p);
      amp_scaler_step(s, o); amp_scaler_update(s);
      amp_scaler_step(s, fresh); amp_scaler_update(s);
      EXPECT(memcmp(w2, w3, sizeof w2) == 0, "kind %d: a tensor added after 2 updates: first update %.9g %.9g %.9g, a fresh optimizer's %.9g %.9g %.9g",
             (int)kinds[k], (double)w2[0], (double)w2[1], (double)w2[2], (double)w3[0], (double)w3[1], (double)w3[2]);
    }
    amp_optimizer_destroy(o); amp_optimizer_destroy(fresh); amp_scaler_destroy(s);
  }
}

/* ---- amp_gemm: the cblas leading-dimension rules --------------------------------------------- */

/* For each layout and transposition, the smallest leading dimension cblas accepts is accepted (and
   gives the right product), one less is refused naming lda/ldb/ldc, and C is left as it was. */
static void gemm_leading_dimension_minimums_follow_cblas(void) {
  enum { M = 3, N = 5, K = 7 };
  float A[64], B[64], C[64], Cb[64], R[M * N];
  int li, ta, tb, i, j, p;
  for (i = 0; i < 64; i++) { A[i] = (float)(i % 7) - 3.0f; B[i] = (float)(i % 5) * 0.5f - 1.0f; }
  for (li = 0; li < 2; li++)
    for (ta = 0; ta < 2; ta++)
      for (tb = 0; tb < 2; tb++) {
        int row = li == 0;
        /* stored shapes: A is M x K (ta 0) or K x M; B is K x N (tb 0) or N x K; C is M x N */
        int a_r = ta ? K : M, a_c = ta ? M : K, b_r = tb ? N : K, b_c = tb ? K : N;
        int lda = row ? a_c : a_r, ldb = row ? b_c : b_r, ldc = row ? N : M;
        amp_status st;
        /* the reference with these exact strides */
        for (i = 0; i < M; i++)
          for (j = 0; j < N; j++) {
            float acc = 0.0f;
            for (p = 0; p < K; p++) {
              int ai = ta ? p : i, ak = ta ? i : p, bk = tb ? j : p, bj = tb ? p : j;
              float a = row ? A[ai * lda + ak] : A[ak * lda + ai];
              float b = row ? B[bk * ldb + bj] : B[bj * ldb + bk];
              float t = a * b;
              acc = acc + t;
            }
            R[i * N + j] = acc;
          }
        for (i = 0; i < 64; i++) C[i] = -7.0f;
        st = amp_gemm(amp_cpu(), (amp_layout)li, (amp_trans)ta, (amp_trans)tb, M, N, K, 1.0f, A, AMP_F32, lda, B, AMP_F32, ldb, 0.0f, C, AMP_F32, ldc);
        EXPECT(st == AMP_OK, "layout %d ta %d tb %d: minimal lda %d ldb %d ldc %d refused: '%s'", li, ta, tb, lda, ldb, ldc, amp_last_error());
        for (i = 0; i < M; i++)
          for (j = 0; j < N; j++) {
            float got = row ? C[i * ldc + j] : C[j * ldc + i];
            EXPECT(got == R[i * N + j], "layout %d ta %d tb %d C(%d,%d): expected %g, got %g", li, ta, tb, i, j, (double)R[i * N + j], (double)got);
          }
        memcpy(Cb, C, sizeof C);
        st = amp_gemm(amp_cpu(), (amp_layout)li, (amp_trans)ta, (amp_trans)tb, M, N, K, 1.0f, A, AMP_F32, lda - 1, B, AMP_F32, ldb, 0.0f, C, AMP_F32, ldc);
        EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_gemm: lda"), "layout %d ta %d tb %d lda %d: %s '%s'", li, ta, tb, lda - 1, amp_status_string(st), amp_last_error());
        st = amp_gemm(amp_cpu(), (amp_layout)li, (amp_trans)ta, (amp_trans)tb, M, N, K, 1.0f, A, AMP_F32, lda, B, AMP_F32, ldb - 1, 0.0f, C, AMP_F32, ldc);
        EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_gemm: ldb"), "layout %d ta %d tb %d ldb %d: %s '%s'", li, ta, tb, ldb - 1, amp_status_string(st), amp_last_error());
        st = amp_gemm(amp_cpu(), (amp_layout)li, (amp_trans)ta, (amp_trans)tb, M, N, K, 1.0f, A, AMP_F32, lda, B, AMP_F32, ldb, 0.0f, C, AMP_F32, ldc - 1);
        EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_gemm: ldc"), "layout %d ta %d tb %d ldc %d: %s '%s'", li, ta, tb, ldc - 1, amp_status_string(st), amp_last_error());
        EXPECT(memcmp(Cb, C, sizeof C) == 0, "layout %d ta %d tb %d: refused calls wrote C", li, ta, tb);
      }
  /* negative sizes name themselves; zero-sized products accept NULL and an ld of 1 */
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, -1, 2, 2, 1, A, AMP_F32, 2, B, AMP_F32, 2, 0, C, AMP_F32, 2) == AMP_ERR_ARG &&
         strstr(amp_last_error(), "m -1"), "m -1: '%s'", amp_last_error());
  EXPECT(amp_gemm(amp_cpu(), AMP_COL_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, INT_MIN, 2, 1, A, AMP_F32, 2, B, AMP_F32, 2, 0, C, AMP_F32, 2) == AMP_ERR_ARG &&
         strstr(amp_last_error(), "n -2147483648"), "n INT_MIN: '%s'", amp_last_error());
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_TRANS, AMP_TRANS, 2, 2, -3, 1, A, AMP_F32, 2, B, AMP_F32, 2, 0, C, AMP_F32, 2) == AMP_ERR_ARG &&
         strstr(amp_last_error(), "k -3"), "k -3: '%s'", amp_last_error());
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 0, 0, 0, 1, NULL, AMP_F16, 1, NULL, AMP_F16, 1, 0, NULL, AMP_F16, 1) == AMP_OK,
         "0 x 0 x 0 with NULL: '%s'", amp_last_error());
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1, A, AMP_F32, 0, B, AMP_F32, 2, 0, C, AMP_F32, 2) == AMP_ERR_ARG,
         "lda 0 is refused: '%s'", amp_last_error());
  EXPECT(amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1, A, AMP_F32, 2, B, AMP_F32, 2, 0, NULL, AMP_F32, 2) == AMP_ERR_ARG &&
         strstr(amp_last_error(), "C is NULL"), "C NULL: '%s'", amp_last_error());
}

/* An optimizer with no tensors cannot step (torch.optim refuses an empty parameter list; the CUDA
   path refuses too): AMP_ERR_STATE naming the call, and neither object changes. */
static void stepping_an_empty_optimizer_is_a_state_error(void) {
  amp_scaler *s = NULL;
  amp_optimizer *o = NULL;
  amp_status st;
  if (amp_scaler_create(&s, amp_cpu(), NULL) != AMP_OK || amp_optimizer_create(&o, amp_cpu(), NULL) != AMP_OK) {
    EXPECT(0, "setup: %s", amp_last_error()); amp_scaler_destroy(s); amp_optimizer_destroy(o); return;
  }
  st = amp_scaler_step(s, o);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_scaler_step") && strstr(amp_last_error(), "no tensors"),
         "step of an empty optimizer: expected AMP_ERR_STATE naming amp_scaler_step, got %s \"%s\"", amp_status_string(st), amp_last_error());
  st = amp_scaler_unscale(s, o);
  EXPECT(st == AMP_ERR_STATE, "unscale of an empty optimizer: expected AMP_ERR_STATE, got %s", amp_status_string(st));
  EXPECT(amp_optimizer_step_count(o) == 0, "step count: expected 0, got %ld", amp_optimizer_step_count(o));
  st = amp_scaler_update(s);
  EXPECT(st == AMP_ERR_STATE, "update with nothing recorded: expected AMP_ERR_STATE, got %s", amp_status_string(st));
  EXPECT(amp_scaler_get_scale(s) == 65536.0f, "scale: expected 65536, got %g", (double)amp_scaler_get_scale(s));
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

/* ---- the implementation under -Ofast ---------------------------------------------------------
   -Ofast (-ffast-math: finite-math-only, reassociation, no signed zeros; denormals-are-zero at
   startup) is how llm.c-style trainers build everything. It used to fold away the inf/NaN checks
   (x - x == 0: the overflowing steps of test_scaler/test_checkpoint were applied); the checks are on
   the bits now. A small trainer built with cc -Ofast must apply a clean step, skip a step with an
   inf and one with a NaN grad, refuse a NaN config field, and keep the scale when growth hits inf. */
static const char fm_prog[] =
  "#define AMP_IMPLEMENTATION\n#include \"amp.h\"\n#include <stdio.h>\n#include <string.h>\n"
  "static float bits(unsigned u) { float x; memcpy(&x, &u, 4); return x; }\n"
  "int main(void) {\n"
  "  amp_scaler *s, *s2; amp_optimizer *o; amp_scaler_config sc; amp_optim_config c;\n"
  "  amp_f16 w[4] = {0x3c00, 0x3c00, 0x3c00, 0x3c00}, g[4], w0; int i, applied, inf_skip, nan_skip, nan_cfg, kept;\n"
  "  memset(&c, 0, sizeof c); c.kind = AMP_SGD; c.lr = 0.25f;\n"
  "  if (amp_scaler_create(&s, amp_cpu(), NULL) || amp_optimizer_create(&o, amp_cpu(), &c) ||\n"
  "      amp_optimizer_add(o, AMP_F16, w, g, 4)) { printf(\"setup %s\\n\", amp_last_error()); return 1; }\n"
  "  for (i = 0; i < 4; i++) g[i] = amp_f32_to_f16(0.5f * amp_scaler_get_scale(s));\n"
  "  amp_scaler_step(s, o); amp_scaler_update(s);\n"
  "  applied = !amp_scaler_last_skipped(s) && w[0] != 0x3c00;\n"
  "  w0 = w[0]; g[2] = 0x7c00;                        /* +inf */\n"
  "  amp_scaler_step(s, o); amp_scaler_update(s);\n"
  "  inf_skip = amp_scaler_last_skipped(s) && w[0] == w0 && amp_scaler_get_scale(s) == 32768.0f;\n"
  "  g[2] = 0x7e00;                                  /* NaN */\n"
  "  amp_scaler_step(s, o); amp_scaler_update(s);\n"
  "  nan_skip = amp_scaler_last_skipped(s) && w[0] == w0 && amp_scaler_skipped_steps(s) == 2;\n"
  "  memset(&sc, 0, sizeof sc); sc.growth_factor = bits(0x7fc00000u);\n"
  "  s2 = NULL; nan_cfg = amp_scaler_create(&s2, amp_cpu(), &sc) == AMP_ERR_ARG && s2 == NULL;\n"
  "  memset(&sc, 0, sizeof sc); sc.init_scale = bits(0x7f000000u); sc.growth_interval = 1;   /* 2^127 */\n"
  "  kept = 0;\n"
  "  if (amp_scaler_create(&s2, amp_cpu(), &sc) == AMP_OK) {\n"
  "    amp_scaler_update_found_inf(s2, 0); kept = amp_scaler_get_scale(s2) == bits(0x7f000000u); amp_scaler_destroy(s2);\n"
  "  }\n"
  "  printf(\"%d %d %d %d %d\\n\", applied, inf_skip, nan_skip, nan_cfg, kept);\n"
  "  amp_optimizer_destroy(o); amp_scaler_destroy(s);\n"
  "  return 0;\n"
  "}\n";

static void the_implementation_built_with_ofast_skips_overflowing_steps(void) {
  FILE *f;
  int rc, r[5] = {-1, -1, -1, -1, -1}, i;
  static const char *what[5] = {"a clean step is applied", "a step with an inf grad is skipped (scale halved)",
                                "a step with a NaN grad is skipped", "a NaN growth_factor is refused",
                                "a growth to inf keeps the scale"};
  /* The same compile and run in every build of this file: the plain run does it, the sampled
     re-runs (sanitizers, valgrind, -Ofast, the cross builds) would repeat it byte for byte. */
  if (t_quick()) { printf("  skipped under AMP_TEST_QUICK: the plain run builds and runs it\n"); return; }
  mkdir("build", 0755); mkdir("build/test", 0755); mkdir(DIR_, 0755);
  if (system("cc --version > /dev/null 2>&1") != 0) { printf("  skipped: no cc to compile with\n"); return; }
  f = fopen(DIR_ "/fm_impl.c", "wb");
  if (!f) { EXPECT(0, "cannot write " DIR_ "/fm_impl.c"); return; }
  fputs(fm_prog, f); fclose(f);
  rc = system("cc -std=c99 -Ofast -Wall -Wextra -Wpedantic -Werror -I. " DIR_ "/fm_impl.c -o " DIR_ "/fm_impl -lm > " DIR_ "/fm.log 2>&1");
  EXPECT(rc == 0, "the implementation unit must compile with cc -Ofast -Werror (see " DIR_ "/fm.log)");
  if (rc != 0) return;
  rc = system(DIR_ "/fm_impl > " DIR_ "/fm.out 2>&1");
  EXPECT(rc == 0, "the -Ofast program failed (see " DIR_ "/fm.out)");
  f = fopen(DIR_ "/fm.out", "rb");
  if (!f) { EXPECT(0, "cannot read " DIR_ "/fm.out"); return; }
  EXPECT(fscanf(f, "%d %d %d %d %d", &r[0], &r[1], &r[2], &r[3], &r[4]) == 5, "the -Ofast program printed no result (see " DIR_ "/fm.out)");
  fclose(f);
  for (i = 0; i < 5; i++) EXPECT(r[i] == 1, "built with -Ofast, %s: expected 1, got %d", what[i], r[i]);
}

/* The enums made from one list each keep the values the header has always given them (a checkpoint
   or a trainer built against an earlier amp.h stores them), and each name
   function names every value and nothing else. */
static void enum_values_and_names_come_from_one_list(void) {
  static const char *status[] = {"AMP_OK", "AMP_ERR_ARG", "AMP_ERR_NOMEM", "AMP_ERR_PARSE", "AMP_ERR_STATE", "AMP_ERR_IO",
                                 "AMP_ERR_CORRUPT", "AMP_ERR_UNSUPPORTED", "AMP_ERR_DEVICE"};
  static const char *modes[] = {"AMP_MODE_MIXED", "AMP_MODE_PURE", "AMP_MODE_WHITE_ONLY", "AMP_MODE_FORCE_LOW",
                                "AMP_MODE_FORCE_F32", "AMP_MODE_KEEP"};
  static const char *lists[] = {"none", "white", "black", "gray"};
  static const char *masters[] = {"AMP_MASTER_F32", "AMP_MASTER_SPLIT", "AMP_MASTER_NONE"};
  int i;
  EXPECT(AMP_OK == 0 && AMP_ERR_ARG == 1 && AMP_ERR_NOMEM == 2 && AMP_ERR_PARSE == 3 && AMP_ERR_STATE == 4 && AMP_ERR_IO == 5 &&
         AMP_ERR_CORRUPT == 6 && AMP_ERR_UNSUPPORTED == 7 && AMP_ERR_DEVICE == 8, "amp_status values moved");
  EXPECT(AMP_MODE_MIXED == 0 && AMP_MODE_PURE == 1 && AMP_MODE_WHITE_ONLY == 2 && AMP_MODE_FORCE_LOW == 3 &&
         AMP_MODE_FORCE_F32 == 4 && AMP_MODE_KEEP == 5, "amp_mode values moved");
  EXPECT(AMP_LIST_NONE == 0 && AMP_LIST_WHITE == 1 && AMP_LIST_BLACK == 2 && AMP_LIST_GRAY == 3, "amp_list values moved");
  EXPECT(AMP_MASTER_F32 == 0 && AMP_MASTER_SPLIT == 1 && AMP_MASTER_NONE == 2, "master mode values moved");
  for (i = 0; i < 9; i++)
    EXPECT(strcmp(amp_status_string((amp_status)i), status[i]) == 0, "status %d: %s", i, amp_status_string((amp_status)i));
  EXPECT(strcmp(amp_status_string((amp_status)9), "AMP_ERR_UNKNOWN") == 0 &&
         strcmp(amp_status_string((amp_status)-1), "AMP_ERR_UNKNOWN") == 0, "an unknown status has a name");
  for (i = 0; i < 6; i++) EXPECT(strcmp(amp__mode_name((amp_mode)i), modes[i]) == 0, "mode %d: %s", i, amp__mode_name((amp_mode)i));
  EXPECT(strcmp(amp__mode_name((amp_mode)6), "unknown") == 0, "mode 6 has a name");
  for (i = 0; i < 4; i++)
    EXPECT(amp_list_name((amp_list)i) && strcmp(amp_list_name((amp_list)i), lists[i]) == 0, "list %d: %s", i,
           amp_list_name((amp_list)i) ? amp_list_name((amp_list)i) : "NULL");
  EXPECT(amp_list_name((amp_list)4) == NULL, "list 4 has a name");
  for (i = 0; i < 3; i++) EXPECT(strcmp(amp__master_mode_name(i), masters[i]) == 0, "master mode %d: %s", i, amp__master_mode_name(i));
  EXPECT(strcmp(amp__master_mode_name(3), "unknown") == 0, "master mode 3 has a name");
}

int main(void) {
  RUN(enum_values_and_names_come_from_one_list);
  RUN(checkpoint_load_of_a_directory_is_an_io_error_naming_the_path);
  RUN(checkpoint_save_that_cannot_write_keeps_the_previous_file);
  RUN(every_bad_scaler_field_is_refused_naming_it);
  RUN(every_bad_optimizer_field_is_refused_naming_it);
  RUN(zero_config_means_the_documented_defaults);
  RUN(optimizer_add_refuses_every_overlap_and_changes_nothing);
  RUN(call_order_errors_change_nothing);
  RUN(a_tensor_added_between_unscale_and_step_makes_that_step_fail);
  RUN(a_tensor_added_after_an_update_is_refused_or_gets_its_own_first_step);
  RUN(gemm_leading_dimension_minimums_follow_cblas);
  RUN(stepping_an_empty_optimizer_is_a_state_error);
  RUN(tensor_names_with_control_bytes_are_refused);
  RUN(the_implementation_built_with_ofast_skips_overflowing_steps);
  TEST_END();
}
