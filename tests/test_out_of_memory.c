/* tests/test_out_of_memory.c - allocation failure: AMP_MALLOC replaced by one that fails its Nth
   call, for every N a whole scenario makes (policy, mixlist, scaler, optimizer, step, checkpoint,
   product). Every call either succeeds or returns AMP_ERR_NOMEM naming itself, and a failed call
   changes nothing (policy text, optimizer state and the file on disk compared before and after);
   leaks on those paths show under ASan and valgrind, which tests/run.sh runs this under. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
static long nm_fail_at = -1, nm_calls = 0;
static void *nm_malloc(size_t n) { if (++nm_calls == nm_fail_at) return NULL; return malloc(n); }
#define AMP_MALLOC(n) nm_malloc(n)
#define AMP_FREE(p) free(p)
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <sys/stat.h>

#define CKPT "build/test/out_of_memory.ckpt"
#define MIXFILE "build/test/out_of_memory.json"

static int bad_status(amp_status st, const char *fn) {
  if (st == AMP_OK) return 0;
  return st != AMP_ERR_NOMEM || strstr(amp_last_error(), fn) == NULL;
}

/* The product's kept workspace freed (where the library keeps one), as if no product had run. */
static void drop_gemm_workspace(void) {
#if defined(__GNUC__) || defined(__clang__)
  free(amp__gemm_ws);
  amp__gemm_ws = NULL; amp__gemm_ws_size = 0;
#endif
}

static char *policy_text(const amp_policy *p) {
  size_t need = 0;
  char *t;
  amp_policy_dump(p, NULL, 0, &need);
  t = (char *)malloc(need);
  if (t) amp_policy_dump(p, t, need, NULL);
  return t;
}
/* After call status st: 1 when st failed and the policy differs from the text taken before the
   call. Frees that text. */
static int policy_changed(amp_status st, const amp_policy *p, char *before) {
  char *now = st != AMP_OK ? policy_text(p) : NULL;
  int r = st != AMP_OK && !(before && now && strcmp(before, now) == 0);
  free(before); free(now);
  return r;
}

/* The optimizer's state as bytes: count, step, masters, moments, model copies. */
static unsigned char *optim_bytes(const amp_optimizer *o, size_t *len) {
  size_t i, k = 0, total = sizeof o->count + sizeof o->step;
  int nm = amp__o_moments(&o->cfg);
  unsigned char *b;
  for (i = 0; i < o->count; i++) total += o->t[i].n * (4u * (size_t)(1 + nm) + amp_dtype_size(o->t[i].wtype));
  b = (unsigned char *)malloc(total);
  if (!b) { *len = 0; return NULL; }
  memcpy(b + k, &o->count, sizeof o->count); k += sizeof o->count;
  memcpy(b + k, &o->step, sizeof o->step); k += sizeof o->step;
  for (i = 0; i < o->count; i++) {
    memcpy(b + k, o->t[i].master, o->t[i].n * 4); k += o->t[i].n * 4;
    if (nm >= 1) { memcpy(b + k, o->t[i].m, o->t[i].n * 4); k += o->t[i].n * 4; }
    if (nm >= 2) { memcpy(b + k, o->t[i].v, o->t[i].n * 4); k += o->t[i].n * 4; }
    memcpy(b + k, o->t[i].w, o->t[i].n * amp_dtype_size(o->t[i].wtype)); k += o->t[i].n * amp_dtype_size(o->t[i].wtype);
  }
  *len = k;
  return b;
}
/* The same for the optimizer's bytes. */
static int optim_changed(amp_status st, const amp_optimizer *o, unsigned char *before, size_t blen) {
  size_t len = 0;
  unsigned char *now = st != AMP_OK ? optim_bytes(o, &len) : NULL;
  int r = st != AMP_OK && !(before && now && len == blen && memcmp(before, now, len) == 0);
  free(before); free(now);
  return r;
}
static long file_size(const char *path) {
  FILE *f = fopen(path, "rb");
  long n = -1;
  if (f) { fseek(f, 0, SEEK_END); n = ftell(f); fclose(f); }
  return n;
}

/* One pass; returns a bit mask of what went wrong (0: all good). */
static int scenario(amp_optim_kind kind) {
  static const char *json = "{\"black-list\": {\"to-add\": [\"x1\", \"x2\", \"x3\", \"x4\", \"x5\", \"x6\", \"x7\", \"x8\", "
                            "\"x9\", \"x10\", \"x11\", \"x12\", \"x13\", \"x14\", \"x15\", \"x16\", \"x17\"], \"to-remove\": [\"exp\"]}, "
                            "\"white-list\": {\"to-add\": [\"Bias\"]}}";
  const char *wl[3] = {"cw1", "cw2", "MatMul"}, *bl[2] = {"cb1", "relu"};
  float w[40], g[40], A[24], B[24], C[16], Cb[16];
  amp_f16 h[64], hg[64];
  amp_policy *p = NULL;
  amp_scaler *s = NULL;
  amp_optimizer *o = NULL;
  amp_optim_config c;
  amp_status st;
  unsigned char *ob;
  size_t olen;
  int bad = 0, i;
  for (i = 0; i < 40; i++) { w[i] = (float)i * 0.01f; g[i] = 1.0f; }
  for (i = 0; i < 64; i++) { h[i] = amp_f32_to_f16((float)i * 0.02f); hg[i] = amp_f32_to_f16(512.0f); }
  for (i = 0; i < 24; i++) { A[i] = (float)i; B[i] = 1.0f - (float)i * 0.1f; }

  /* policy */
  st = amp_policy_create(&p, AMP_MODE_MIXED, AMP_F16);
  if (bad_status(st, "amp_policy_create")) bad |= 1;
  if (st != AMP_OK) p = NULL;
  if (p) {
    char *before = policy_text(p);
    st = amp_policy_set(p, "MyOp", AMP_LIST_WHITE);
    if (policy_changed(st, p, before) | bad_status(st, "amp_policy_set")) bad |= 2;
    before = policy_text(p);
    st = amp_policy_customize(p, wl, 3, bl, 2);
    if (policy_changed(st, p, before) | bad_status(st, "amp_policy_customize")) bad |= 4;
    before = policy_text(p);
    st = amp_policy_load_mixlist(p, json, strlen(json));
    if (policy_changed(st, p, before) | bad_status(st, "amp_policy_load_mixlist")) bad |= 8;
    before = policy_text(p);
    st = amp_policy_load_mixlist_file(p, MIXFILE);
    if (policy_changed(st, p, before) | bad_status(st, "amp_policy_load_mixlist_file")) bad |= 16;
    {
      FILE *f = fopen("/dev/null", "w");
      st = amp_policy_print(p, f);
      if (f) fclose(f);
      if (bad_status(st, "amp_policy_print")) bad |= 32;
    }
    amp_policy_destroy(p);
  }

  /* scaler and optimizer */
  st = amp_scaler_create(&s, amp_cpu(), NULL);
  if (bad_status(st, "amp_scaler_create") || (st != AMP_OK && s != NULL)) bad |= 64;
  memset(&c, 0, sizeof c); c.kind = kind; c.momentum = kind == AMP_SGD ? 0.9f : 0.0f; c.max_grad_norm = 1.0f;
  st = amp_optimizer_create(&o, amp_cpu(), &c);
  if (bad_status(st, "amp_optimizer_create") || (st != AMP_OK && o != NULL)) bad |= 128;
  if (o) {
    for (i = 0; i < 6; i++) {   /* enough param groups to grow their table past its first size */
      int ng = o->n_groups, gi = -1;
      st = amp_optimizer_add_group(o, 0.5f, 0.0f, &gi);
      if ((st != AMP_OK && (o->n_groups != ng || gi != -1)) | bad_status(st, "amp_optimizer_add_group")) bad |= 8192;
    }
    for (i = 0; i < 12; i++) {   /* enough tensors to grow the table past its first size */
      ob = optim_bytes(o, &olen);
      if (i % 4 == 2) {   /* a seeded master in the last group */
        static const float seed[3] = {1.0f + 0x1p-20f, -2.0f, 0.5f};
        amp_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.weights = w + 3 * i; d.grads = g + 3 * i; d.n = 3; d.group = o->n_groups - 1; d.master = seed;
        d.name = "seeded";   /* its copy is one more allocation */
        st = amp_optimizer_add_tensor(o, &d);
      } else {
        st = i % 2 ? amp_optimizer_add(o, AMP_F16, h + 5 * i, hg + 5 * i, 5) : amp_optimizer_add_mixed(o, AMP_F32, w + 3 * i, AMP_F32, g + 3 * i, 3);
      }
      if (optim_changed(st, o, ob, olen) | bad_status(st, "amp_optimizer_add")) bad |= 256;
    }
  }
  if (s && o) {
    long before_size = file_size(CKPT);
    if (amp_scaler_step(s, o) != AMP_OK || amp_scaler_update(s) != AMP_OK) bad |= 512;   /* no allocation */
    st = amp_checkpoint_save(CKPT, o, s);
    if (bad_status(st, "amp_checkpoint_save") || (st != AMP_OK && file_size(CKPT) != before_size)) bad |= 1024;
    if (st == AMP_OK) {
      ob = optim_bytes(o, &olen);
      st = amp_checkpoint_load(CKPT, o, s);
      if (optim_changed(st, o, ob, olen) | bad_status(st, "amp_checkpoint_load")) bad |= 2048;
    }
  }
  amp_optimizer_destroy(o);
  amp_scaler_destroy(s);

  /* the product allocates its packed panels (the workspace it keeps between calls dropped first,
     so that each call allocates) */
  for (i = 0; i < 16; i++) C[i] = Cb[i] = -1.0f;
  drop_gemm_workspace();
  st = amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 4, 4, 6, 1.0f, A, AMP_F32, 6, B, AMP_F32, 6, 0.0f, C, AMP_F32, 4);
  if (bad_status(st, "amp_gemm: out of memory") || (st != AMP_OK && memcmp(C, Cb, sizeof C) != 0)) bad |= 4096;
  /* amp_gemm_ex's message names amp_gemm_ex */
  memcpy(Cb, C, sizeof C);
  drop_gemm_workspace();
  st = amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, 4, 4, 6, 1.0f, A, AMP_F32, 6, B, AMP_F32, 6, 0.0f, C,
                   AMP_F32, 4, NULL);
  if (bad_status(st, "amp_gemm_ex: out of memory") || (st != AMP_OK && memcmp(C, Cb, sizeof C) != 0)) bad |= 4096;
  return bad;
}

static void every_allocation_failure_is_nomem_and_changes_nothing(void) {
  static const amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
  int k;
  FILE *f;
  mkdir("build", 0755); mkdir("build/test", 0755);
  f = fopen(MIXFILE, "wb");
  if (f) { fputs("{\"white-list\": {\"to-add\": [\"Conv9\", \"Conv10\"]}} // a comment\n", f); fclose(f); }
  for (k = 0; k < 3; k++) {
    long total, at;
    int bad, failures = 0;
    remove(CKPT);
    nm_fail_at = -1; nm_calls = 0;
    bad = scenario(kinds[k]);
    total = nm_calls;
    EXPECT(bad == 0 && total > 20, "kind %d without failures: bad mask %d, %ld allocations", (int)kinds[k], bad, total);
    for (at = 1; at <= total; at++) {
      nm_fail_at = at; nm_calls = 0;
      bad = scenario(kinds[k]);
      if (bad && ++failures <= 5)
        EXPECT(0, "kind %d, allocation %ld of %ld fails: bad mask %d, last error '%s'", (int)kinds[k], at, total, bad, amp_last_error());
    }
    nm_fail_at = -1;
  }
  remove(CKPT); remove(MIXFILE);
}

int main(void) {
  RUN(every_allocation_failure_is_nomem_and_changes_nothing);
  TEST_END();
}
