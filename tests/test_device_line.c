/* tests/test_device_line.c - the CUDA side of amp.h's device line, run on the CPU.

   amp.h is built here with AMP_CUDA, and this file defines the launchers of amp_kernels.h as a
   host emulation: "device memory" is host memory, and each launcher does what its kernel does,
   with amp.h's own element functions (the scale rule, amp__step_coefs, the CPU's scan and step
   loops). So the CUDA operation table (amp__cuda_ops) and every public function above the line
   run for real without a GPU: a training run on this "CUDA" device must give the CPU's bits, a
   checkpoint must move between them, the master must be taken at add, and a failed device read
   in a getter must come back from the next update. What the emulation cannot prove is the
   kernels themselves: tests/cuda_*.c do that on a GPU. */
#define AMP_CUDA
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CKPT "build/test/device_line.ckpt"

/* ---- the emulated launchers ------------------------------------------------------------------ */

static int fake_fail_reads = 0;   /* > 0: that many scaler/optimizer reads fail with AMP_ERR_DEVICE */
static int fake_gemm_fails = 0;   /* 1: the emulated cublasLtMatmul fails; else it runs the CPU reference */
static int fake_state_tag;        /* the per-device state: only its address is used */

static amp_status fake_fail(char *msg, size_t cap, const char *call) {
  snprintf(msg, cap, "%s failed: cudaErrorIllegalAddress (emulated)", call);
  return AMP_ERR_DEVICE;
}

amp_status amp__cu_open(int ordinal, void *stream, void **state, char *msg, size_t cap) {
  (void)ordinal; (void)stream; (void)msg; (void)cap;
  *state = &fake_state_tag;
  return AMP_OK;
}
void amp__cu_close(void *state) { (void)state; }
amp_status amp__cu_sync(void *state, char *msg, size_t cap) { (void)state; (void)msg; (void)cap; return AMP_OK; }

typedef struct fake_scaler {
  amp_scale_state st; amp_scale_params pr; float inv; int32_t found; int32_t last_skipped; int64_t skipped;
} fake_scaler;

amp_status amp__cu_scaler_create(void *state, void **scaler, const amp_scale_state *st, const amp_scale_params *pr,
                                 char *msg, size_t cap) {
  fake_scaler *f = (fake_scaler *)calloc(1, sizeof *f);
  (void)state;
  if (!f) { snprintf(msg, cap, "out of memory"); return AMP_ERR_NOMEM; }
  f->st = *st; f->pr = *pr; f->inv = amp__inv_scale(st->scale);
  *scaler = f;
  return AMP_OK;
}
void amp__cu_scaler_destroy(void *state, void *scaler) { (void)state; free(scaler); }
amp_status amp__cu_scaler_load(void *state, void *scaler, const amp_scale_state *st, const amp_scale_params *pr,
                               float inv_scale, int last_skipped, int64_t skipped, char *msg, size_t cap) {
  fake_scaler *f = (fake_scaler *)scaler;
  (void)state; (void)msg; (void)cap;
  f->st = *st; f->pr = *pr; f->inv = inv_scale; f->last_skipped = last_skipped; f->skipped = skipped; f->found = 0;
  return AMP_OK;
}
amp_status amp__cu_scaler_read(void *state, const void *scaler, amp_scale_state *st, amp_cu_scaler_info *info,
                               char *msg, size_t cap) {
  const fake_scaler *f = (const fake_scaler *)scaler;
  (void)state;
  if (fake_fail_reads > 0) { fake_fail_reads--; return fake_fail(msg, cap, "cudaMemcpyAsync(scaler block)"); }
  if (st) *st = f->st;
  if (info) { info->inv_scale = f->inv; info->found_inf = f->found; info->last_skipped = f->last_skipped; info->skipped = f->skipped; }
  return AMP_OK;
}
float *amp__cu_scaler_scale_ptr(void *scaler) { return &((fake_scaler *)scaler)->st.scale; }
amp_status amp__cu_scaler_update(void *state, void *scaler, int found_inf, char *msg, size_t cap) {
  fake_scaler *f = (fake_scaler *)scaler;
  int found = f->found != 0;
  (void)state; (void)msg; (void)cap;
  f->found = 0;
  if (found_inf > 0) found = 1;
  amp__scale_rule(&f->st, &f->pr, found);
  if (!f->pr.fixed) f->inv = amp__inv_scale(f->st.scale);
  f->last_skipped = found; f->skipped += found;
  return AMP_OK;
}
amp_status amp__cu_scale_buffer(void *state, const void *scaler, void *buf, int32_t dtype, size_t n, char *msg, size_t cap) {
  float k = ((const fake_scaler *)scaler)->st.scale;
  size_t i;
  (void)state; (void)msg; (void)cap;
  for (i = 0; i < n; i++) amp__store(buf, (amp_dtype)dtype, i, amp__load(buf, (amp_dtype)dtype, i) * k);
  return AMP_OK;
}

/* The fp8 scaler's block: the arrays as the device keeps them, updated by amp.h's own element
   function, as the kernel is; with stats the counters (this step's, the last step's) and the
   update's amax/scale pairs, moved by the update as the kernel moves them. */
typedef struct fake_fp8 {
  float *hist, *scale, *scale_inv; double *red; amp_dtype *format; size_t n; int len;
  uint64_t *counts, *last; float *used;   /* stats; NULL without */
} fake_fp8;
static void fake_fp8_free(fake_fp8 *f) {
  free(f->hist); free(f->scale); free(f->scale_inv); free(f->red); free(f->format); free(f->counts); free(f->last);
  free(f->used); free(f);
}
amp_status amp__cu_fp8_create(void *state, void **fp8, size_t n, int len, const amp_dtype *format, const float *hist,
                              const float *scale, const float *scale_inv, int stats, float **d_hist, float **d_scale,
                              float **d_scale_inv, double **d_red, uint64_t **d_counts, char *msg, size_t cap) {
  fake_fp8 *f = (fake_fp8 *)calloc(1, sizeof *f);
  (void)state;
  if (f) {
    f->hist = (float *)malloc(n * (size_t)len * sizeof(float)); f->scale = (float *)malloc(n * sizeof(float));
    f->scale_inv = (float *)malloc(n * sizeof(float)); f->format = (amp_dtype *)malloc(n * sizeof(amp_dtype));
    f->red = (double *)malloc(n * sizeof(double));
    if (stats) {
      f->counts = (uint64_t *)calloc(4 * n, sizeof(uint64_t)); f->last = (uint64_t *)calloc(4 * n, sizeof(uint64_t));
      f->used = (float *)calloc(2 * n, sizeof(float));
    }
  }
  if (!f || !f->hist || !f->scale || !f->scale_inv || !f->format || !f->red ||
      (stats && (!f->counts || !f->last || !f->used))) {
    if (f) fake_fp8_free(f);
    snprintf(msg, cap, "out of memory");
    return AMP_ERR_NOMEM;
  }
  memcpy(f->hist, hist, n * (size_t)len * sizeof(float)); memcpy(f->scale, scale, n * sizeof(float));
  memcpy(f->scale_inv, scale_inv, n * sizeof(float)); memcpy(f->format, format, n * sizeof(amp_dtype));
  f->n = n; f->len = len;
  *d_hist = f->hist; *d_scale = f->scale; *d_scale_inv = f->scale_inv; *d_red = f->red; *d_counts = f->counts;
  *fp8 = f;
  return AMP_OK;
}
void amp__cu_fp8_destroy(void *state, void *fp8) {
  (void)state;
  fake_fp8_free((fake_fp8 *)fp8);
}
amp_status amp__cu_fp8_amax_io(void *state, void *fp8, int to_slots, char *msg, size_t cap) {
  fake_fp8 *f = (fake_fp8 *)fp8;
  size_t i;
  (void)state; (void)msg; (void)cap;
  for (i = 0; i < f->n; i++) {
    double w = f->red[i] < 0.0 ? 0.0 : f->red[i] > AMP__FP8_WIRE_MAX ? AMP__FP8_WIRE_MAX : f->red[i];   /* the kernel's clamp */
    if (!to_slots) f->red[i] = amp__fp8_amax_to_wire(f->hist[i * (size_t)f->len]);
    else f->hist[i * (size_t)f->len] = amp__fp8_amax_from_wire(w);
  }
  return AMP_OK;
}
amp_status amp__cu_fp8_record(void *state, void *fp8, size_t i, float amax, char *msg, size_t cap) {
  fake_fp8 *f = (fake_fp8 *)fp8;
  (void)state; (void)msg; (void)cap;
  f->hist[i * (size_t)f->len] = amp__amax_join(f->hist[i * (size_t)f->len], amax);
  return AMP_OK;
}
amp_status amp__cu_fp8_update(void *state, void *fp8, const amp_fp8_config *c, char *msg, size_t cap) {
  fake_fp8 *f = (fake_fp8 *)fp8;
  size_t i, j;
  (void)state; (void)msg; (void)cap;
  for (i = 0; i < f->n; i++) {   /* one kernel thread per tensor */
    amp__fp8_update_one(c, f->format[i], f->hist + i * (size_t)f->len, f->len, f->scale + i, f->scale_inv + i,
                        f->used ? f->used + 2 * i : NULL);
    for (j = 0; f->counts && j < 4; j++) { f->last[4 * i + j] = f->counts[4 * i + j]; f->counts[4 * i + j] = 0; }
  }
  return AMP_OK;
}
amp_status amp__cu_fp8_io(void *state, void *fp8, float *hist, float *scale, float *scale_inv, int to_device, char *msg,
                          size_t cap) {
  fake_fp8 *f = (fake_fp8 *)fp8;
  size_t slots = f->n * (size_t)f->len;
  (void)state;
  if (!to_device && fake_fail_reads > 0) { fake_fail_reads--; return fake_fail(msg, cap, "cudaMemcpyAsync(fp8 block)"); }
  if (to_device) {
    memcpy(f->hist, hist, slots * sizeof(float)); memcpy(f->scale, scale, f->n * sizeof(float));
    memcpy(f->scale_inv, scale_inv, f->n * sizeof(float));
  } else {
    memcpy(hist, f->hist, slots * sizeof(float)); memcpy(scale, f->scale, f->n * sizeof(float));
    memcpy(scale_inv, f->scale_inv, f->n * sizeof(float));
  }
  return AMP_OK;
}
amp_status amp__cu_fp8_stats(void *state, void *fp8, uint64_t *last, float *used, char *msg, size_t cap) {
  fake_fp8 *f = (fake_fp8 *)fp8;
  (void)state;
  if (!f->counts) { snprintf(msg, cap, "amp__cu_fp8_stats: the scaler was made without stats"); return AMP_ERR_ARG; }
  if (fake_fail_reads > 0) { fake_fail_reads--; return fake_fail(msg, cap, "cudaMemcpyAsync(fp8 stats)"); }
  memcpy(last, f->last, 4 * f->n * sizeof(uint64_t)); memcpy(used, f->used, 2 * f->n * sizeof(float));
  return AMP_OK;
}
/* the kernel's steps, one element at a time (the CPU's portable loop is the same steps); with
   counts, each element's class (amp__fp8_cast_class, as the kernel) added up, and the sums added
   to the counters (the kernel's atomicAdds; block 0 adds n) */
amp_status amp__cu_quantize(void *state, void *q, int32_t fp8, const void *x, int32_t x_type, size_t n,
                            const float *scale, float *amax, uint64_t *counts, char *msg, size_t cap) {
  float k = scale ? *scale : 1.0f;
  uint32_t top = 0;
  uint64_t c[3] = { 0, 0, 0 };
  size_t i;
  (void)state; (void)msg; (void)cap;
  for (i = 0; i < n; i++) {
    float v = amp__load(x, (amp_dtype)x_type, i), y = amp__fmul(v, k);
    uint32_t b = amp__f32_bits(v) & 0x7fffffffu;
    unsigned cls = amp__fp8_cast_class(v, y, fp8 == AMP_E5M2);
    top = b > top ? b : top;
    c[0] += cls & 1u; c[1] += (cls >> 1) & 1u; c[2] += cls >> 2;
    if (q) amp__store(q, (amp_dtype)fp8, i, y);
  }
  if (amax && amp__f32_bits(*amax) < top) *amax = amp__bits_f32(top);   /* atomicMax on the bits */
  if (counts) { counts[0] += n; counts[1] += c[0]; counts[2] += c[1]; counts[3] += c[2]; }
  return AMP_OK;
}

typedef struct fake_optim {
  amp_optim_config h; size_t k; amp__tensor *t; float **p, **m, **v;
  float *ls, *wd;      /* each tensor's group values, as the kernel's table holds them */
  uint16_t **rem;      /* AMP_MASTER_SPLIT tensors' remainders (p NULL for SPLIT and NONE, as the slab has none) */
  amp_bf16 **mh, **vh; /* AMP_MOMENTS_BF16 tensors' moments, 2 bytes each as the slab keeps them (m, v NULL) */
  unsigned char **m8, **v8;   /* AMP_MOMENTS_8BIT and _FP8 tensors' arrays as the slab keeps them (amp__moment_bytes) */
  float code[2][256]; double mid[2][256];   /* the step kernel's maps (amp__q8_map): signed m, unsigned v */
  uint32_t vt[2][AMP__Q8_VLUT];             /* ... and its code tables (amp__q8_vtable) */
  int64_t t_done, skipped; float norm, clip, mul; int32_t skip; double red[2];
  amp__gstat *stats;   /* h.stats: the per-tensor counters the unscale kernel adds into */
  int32_t spike; int64_t spike_skips, passes;
  amp__spike_window win;   /* the step kernel's last block pushes a clean step's norm */
  float scale;             /* the scale the last unscale divided by */
} fake_optim;

amp_status amp__cu_optim_create(void *state, void **optim, const amp__tensor *ts, size_t n, const float *lr_scale,
                                const float *weight_decay, const amp_optim_config *h, char *msg, size_t cap) {
  fake_optim *o = (fake_optim *)calloc(1, sizeof *o);
  int nm = amp__o_moments(h);
  size_t i, j;
  (void)state;
  if (!amp__kind_on_device(h->kind)) { free(o); snprintf(msg, cap, "amp__cu_optim_create: kind %d has no device update", (int)h->kind); return AMP_ERR_ARG; }
  if (!o) { snprintf(msg, cap, "out of memory"); return AMP_ERR_NOMEM; }
  for (i = 0; i < n; i++)   /* the kernel keeps the types amp.h's list marks for CUDA */
    if (!amp__moments_on_cuda(ts[i].moments)) {
      free(o); snprintf(msg, cap, "amp__cu_optim_create: tensor %zu: moments %d", i, ts[i].moments); return AMP_ERR_UNSUPPORTED;
    }
  o->h = *h; o->k = n;
  o->t = (amp__tensor *)calloc(n, sizeof *o->t); o->p = (float **)calloc(n, sizeof *o->p);
  o->ls = (float *)calloc(n, sizeof *o->ls); o->wd = (float *)calloc(n, sizeof *o->wd);
  o->m = (float **)calloc(n, sizeof *o->m); o->v = (float **)calloc(n, sizeof *o->v);
  o->rem = (uint16_t **)calloc(n, sizeof *o->rem);
  o->mh = (amp_bf16 **)calloc(n, sizeof *o->mh); o->vh = (amp_bf16 **)calloc(n, sizeof *o->vh);
  o->m8 = (unsigned char **)calloc(n, sizeof *o->m8); o->v8 = (unsigned char **)calloc(n, sizeof *o->v8);
  amp__q8_map(1, o->code[0], o->mid[0]); amp__q8_map(0, o->code[1], o->mid[1]);
  amp__q8_vtable(o->mid[0], o->vt[0]); amp__q8_vtable(o->mid[1], o->vt[1]);
  if (h->stats) o->stats = (amp__gstat *)calloc(n, sizeof *o->stats);
  for (i = 0; i < n; i++) {
    o->t[i] = ts[i];
    o->t[i].master = NULL;   /* read once, here: not kept */
    o->ls[i] = ts[i].group ? lr_scale[ts[i].group] : 1.0f; o->wd[i] = ts[i].group ? weight_decay[ts[i].group] : 0.0f;
    if (ts[i].master_mode == AMP_MASTER_NONE && ts[i].master) { snprintf(msg, cap, "tensor %zu: NONE with a master", i); return AMP_ERR_ARG; }
    if (ts[i].master_mode == AMP_MASTER_SPLIT) {
      o->rem[i] = (uint16_t *)calloc(ts[i].n, 2);   /* zeroed, as the kernel's memset */
      if (ts[i].master)   /* a seed: split into the model copy and the remainders (amp__cu_split_kernel) */
        for (j = 0; j < ts[i].n; j++) amp__split_encode(ts[i].master[j], &((amp_bf16 *)ts[i].w)[j], &o->rem[i][j]);
    }
    if (ts[i].master_mode == AMP_MASTER_F32) {   /* the master given (bit for bit), else the model copy */
      o->p[i] = (float *)malloc(ts[i].n * 4);
      for (j = 0; j < ts[i].n; j++) o->p[i][j] = ts[i].master ? ts[i].master[j] : amp__load(ts[i].w, (amp_dtype)ts[i].wtype, j);
    }
    if (ts[i].moments == AMP_MOMENTS_8BIT || ts[i].moments == AMP_MOMENTS_FP8) {   /* amp__cu_moments_zero_kernel */
      size_t nb = (ts[i].n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK, b;
      for (j = 0; j < (size_t)nm && j < 2; j++) {
        unsigned char *a = (unsigned char *)calloc(1, amp__moment_bytes(ts[i].moments, ts[i].n));
        if (ts[i].moments == AMP_MOMENTS_FP8) {   /* codes 0, the scale_inv of amax 0 */
          float si = amp__fdiv(1.0f, amp__f8m_scale(0.0f));
          memcpy(a, &si, 4);
        } else {                                  /* absmaxes 1e-38, codes of 0 */
          for (b = 0; b < nb; b++) { float z = amp__q8_absmax(0.0f); memcpy(a + 4 * b, &z, 4); }
          memset(a + 4 * nb, amp__q8_bisect(o->mid[j], 0.0f), ts[i].n);
        }
        if (j) o->v8[i] = a; else o->m8[i] = a;
      }
      continue;
    }
    if (ts[i].moments == AMP_MOMENTS_BF16) {   /* zeroed words: +0 */
      if (nm >= 1) o->mh[i] = (amp_bf16 *)calloc(ts[i].n, 2);
      if (nm >= 2) o->vh[i] = (amp_bf16 *)calloc(ts[i].n, 2);
      continue;
    }
    if (nm >= 1) o->m[i] = (float *)calloc(ts[i].n, 4);
    if (nm >= 2) o->v[i] = (float *)calloc(ts[i].n, 4);
  }
  *optim = o;
  return AMP_OK;
}
void amp__cu_optim_destroy(void *state, void *optim) {
  fake_optim *o = (fake_optim *)optim;
  size_t i;
  (void)state;
  for (i = 0; i < o->k; i++) {
    free(o->p[i]); free(o->m[i]); free(o->v[i]); free(o->rem[i]); free(o->mh[i]); free(o->vh[i]); free(o->m8[i]); free(o->v8[i]);
  }
  free(o->t); free(o->ls); free(o->wd); free(o->p); free(o->m); free(o->v); free(o->rem); free(o->mh); free(o->vh);
  free(o->m8); free(o->v8);
  free(o->stats); free(o);
}
amp_status amp__cu_optim_set_hparams(void *state, void *optim, const amp_optim_config *h, char *msg, size_t cap) {
  fake_optim *o = (fake_optim *)optim;
  (void)state;
  if (h->kind != o->h.kind) { snprintf(msg, cap, "amp__cu_optim_set_hparams: kind %d differs", (int)h->kind); return AMP_ERR_ARG; }
  o->h = *h;
  return AMP_OK;
}
amp_status amp__cu_optim_set_grads(void *state, void *optim, size_t index, const void *grads, char *msg, size_t cap) {
  fake_optim *o = (fake_optim *)optim;
  (void)state;
  if (index >= o->k || !grads) { snprintf(msg, cap, "amp__cu_optim_set_grads: index %zu", index); return AMP_ERR_ARG; }
  o->t[index].g = grads;   /* the record of the device table */
  return AMP_OK;
}
float *amp__cu_optim_master(void *optim, size_t index, size_t *n) {
  fake_optim *o = (fake_optim *)optim;
  if (index >= o->k || !o->p[index]) { if (n) *n = 0; return NULL; }
  if (n) *n = o->t[index].n;
  return o->p[index];
}
uint16_t *amp__cu_optim_rem(void *optim, size_t index) {
  fake_optim *o = (fake_optim *)optim;
  return index < o->k ? o->rem[index] : NULL;
}
/* The unscale kernel: with stats, the counters cleared first (the launcher's memset), then every
   grad through amp__gstat_add, as the kernel's stats loop does. */
static void fake_scan(fake_optim *o, const fake_scaler *sc, int *bad, double *ss) {
  size_t i;
  if (o->stats) memset(o->stats, 0, o->k * sizeof *o->stats);
  for (i = 0; i < o->k; i++) {
    if (o->stats) amp__o_scan_stats(o->t[i].g, (amp_dtype)o->t[i].gtype, o->t[i].n, sc ? sc->inv : 1.0f, ss, bad, &o->stats[i]);
    else amp__o_scan(o->t[i].g, (amp_dtype)o->t[i].gtype, o->t[i].n, sc ? sc->inv : 1.0f, ss, bad);
  }
}
static void fake_decide(fake_optim *o, fake_scaler *sc, int found, double ss) {
  float inv = sc ? sc->inv : 1.0f;
  o->norm = (float)sqrt(ss); o->clip = amp__clip_coef(o->norm, o->h.max_grad_norm); o->mul = inv * o->clip;
  o->scale = sc ? sc->st.scale : 1.0f;
  o->skip = found;
  o->spike = amp__spike_skip(o->norm, o->h.spike_norm, o->h.spike_zscore, &o->win, found);
  o->passes++;
  if (found && sc) sc->found = 1;
}
amp_status amp__cu_optim_unscale(void *state, void *optim, void *scaler, char *msg, size_t cap) {
  int bad = 0; double ss = 0.0;
  (void)state; (void)msg; (void)cap;
  fake_scan((fake_optim *)optim, (fake_scaler *)scaler, &bad, &ss);
  fake_decide((fake_optim *)optim, (fake_scaler *)scaler, bad, ss);
  return AMP_OK;
}
amp_status amp__cu_optim_unscale_local(void *state, void *optim, void *scaler, double **buf, char *msg, size_t cap) {
  fake_optim *o = (fake_optim *)optim;
  int bad = 0; double ss = 0.0;
  (void)state; (void)msg; (void)cap;
  fake_scan(o, (fake_scaler *)scaler, &bad, &ss);
  o->red[0] = bad; o->red[1] = ss;
  *buf = o->red;
  return AMP_OK;
}
amp_status amp__cu_optim_unscale_finish(void *state, void *optim, void *scaler, char *msg, size_t cap) {
  fake_optim *o = (fake_optim *)optim;
  (void)state; (void)msg; (void)cap;
  fake_decide(o, (fake_scaler *)scaler, !(o->red[0] == 0.0), o->red[1]);
  return AMP_OK;
}
/* An 8-bit array's n values as the step kernel reads them, and its new values stored as the kernel
   stores them: per block of AMP__Q8_BLOCK, the absmax from the unsigned maximum of the |bits|
   (amp__q8_absmax), then each code by amp__q8_vcode of amp__q8_unit. */
static float *fake_q8_load(const unsigned char *a, const float *code, size_t n) {
  size_t nb = (n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK, j;
  float *d = (float *)malloc(n * 4), am;
  for (j = 0; j < n; j++) { memcpy(&am, a + 4 * (j / AMP__Q8_BLOCK), 4); d[j] = amp__fmul(code[a[4 * nb + j]], am); }
  return d;
}
static void fake_q8_store(unsigned char *a, const uint32_t *vt, const float *x, size_t n) {
  size_t nb = (n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK, b, j;
  for (b = 0; b < nb; b++) {
    size_t e0 = b * AMP__Q8_BLOCK, e1 = e0 + AMP__Q8_BLOCK < n ? e0 + AMP__Q8_BLOCK : n;
    uint32_t top = 0;
    float am;
    for (j = e0; j < e1; j++) { uint32_t u = amp__f32_bits(x[j]) & 0x7fffffffu; top = u > top ? u : top; }
    am = amp__q8_absmax(amp__bits_f32(top));
    memcpy(a + 4 * b, &am, 4);
    for (j = e0; j < e1; j++) a[4 * nb + j] = amp__q8_vcode(vt, amp__q8_unit(x[j], am));
  }
}
/* An fp8 array's n values as the step kernel reads them (code times the array's scale_inv), and the
   first launch: the new moments computed on copies (the master, model copy and remainders as
   they are), their amaxes' scales into sc[0] (m) and sc[1] (v). */
static float *fake_f8_load(const unsigned char *a, size_t n) {
  float *d = (float *)malloc(n * 4), si;
  size_t j;
  memcpy(&si, a, 4);
  for (j = 0; j < n; j++) d[j] = amp__fmul(amp_e4m3_to_f32(a[4 + j]), si);
  return d;
}
static void fake_f8_amax(fake_optim *o, size_t i, const amp_step_coefs *c, uint64_t key, const float *m, const float *v,
                         float *sc) {
  size_t n = o->t[i].n, j, ws = amp_dtype_size((amp_dtype)o->t[i].wtype);
  float *pm = m ? (float *)malloc(n * 4) : NULL, *pv = v ? (float *)malloc(n * 4) : NULL, *p = (float *)malloc(n * 4);
  void *w = malloc(n * ws);
  uint16_t *rem = o->rem[i] ? (uint16_t *)malloc(n * 2) : NULL;
  uint32_t top[2] = {0u, 0u};
  if (pm) memcpy(pm, m, n * 4);
  if (pv) memcpy(pv, v, n * 4);
  memcpy(w, o->t[i].w, n * ws);
  if (rem) memcpy(rem, o->rem[i], n * 2);
  if (!o->p[i]) amp__o_step_lowmem(o->h.kind, (amp_bf16 *)w, rem, pm, pv, o->t[i].g, (amp_dtype)o->t[i].gtype, key, n, o->mul, c);
  else {
    memcpy(p, o->p[i], n * 4);
    amp__o_step(o->h.kind, p, pm, pv, o->t[i].g, (amp_dtype)o->t[i].gtype, w, (amp_dtype)o->t[i].wtype,
                (amp_dtype)o->t[i].round_to, o->t[i].stochastic, key, n, o->mul, c);
  }
  for (j = 0; j < n; j++) {
    uint32_t a = pm ? amp__f32_bits(pm[j]) & 0x7fffffffu : 0u, b = pv ? amp__f32_bits(pv[j]) & 0x7fffffffu : 0u;
    top[0] = a > top[0] ? a : top[0];
    top[1] = b > top[1] ? b : top[1];
  }
  sc[0] = amp__f8m_scale(amp__bits_f32(top[0])); sc[1] = amp__f8m_scale(amp__bits_f32(top[1]));
  free(pm); free(pv); free(p); free(w); free(rem);
}
amp_status amp__cu_optim_step(void *state, void *optim, void *scaler, int update_scaler, char *msg, size_t cap) {
  fake_optim *o = (fake_optim *)optim;
  fake_scaler *sc = (fake_scaler *)scaler;
  size_t i;
  (void)state; (void)update_scaler; (void)msg; (void)cap;
  if (o->skip || (sc && sc->found)) { o->skipped++; return AMP_OK; }
  if (o->spike) { o->spike_skips++; return AMP_OK; }
  {
    for (i = 0; i < o->k; i++) {   /* each tensor's group, as the step kernel reads it from the table */
      amp_step_coefs c = amp__group_coefs(&o->h, o->t_done + 1, o->t[i].group, o->ls[i], o->wd[i]);
      uint64_t key = o->t[i].stochastic ? amp__sr_key(o->h.seed, o->t_done + 1, (uint64_t)i) : 0u;
      size_t n = o->t[i].n, j;
      float sm_sv[2] = {1.0f, 1.0f};   /* FP8: the new m's and v's scales */
      int msr = o->t[i].stochastic && o->t[i].moments == AMP_MOMENTS_BF16;
      uint64_t km = msr ? amp__sr_key_moment(key, 1) : 0u, kv = msr ? amp__sr_key_moment(key, 2) : 0u;
      float *m = o->m[i], *v = o->v[i];
      if (o->mh[i] || o->vh[i]) {   /* bf16 moments: the kernel's loads, widened exactly */
        m = o->mh[i] ? (float *)malloc(n * 4) : NULL; v = o->vh[i] ? (float *)malloc(n * 4) : NULL;
        for (j = 0; j < n; j++) {
          if (m) m[j] = amp_bf16_to_f32(o->mh[i][j]);
          if (v) v[j] = amp_bf16_to_f32(o->vh[i][j]);
        }
      }
      if ((o->m8[i] || o->v8[i]) && o->t[i].moments == AMP_MOMENTS_8BIT) {   /* code[c] * the block's absmax */
        m = o->m8[i] ? fake_q8_load(o->m8[i], o->code[0], n) : NULL;
        v = o->v8[i] ? fake_q8_load(o->v8[i], o->code[1], n) : NULL;
      }
      if ((o->m8[i] || o->v8[i]) && o->t[i].moments == AMP_MOMENTS_FP8) {   /* code times the old scale_inv */
        m = o->m8[i] ? fake_f8_load(o->m8[i], n) : NULL;
        v = o->v8[i] ? fake_f8_load(o->v8[i], n) : NULL;
        fake_f8_amax(o, i, &c, key, m, v, sm_sv);   /* the first launch: the new moments' amaxes */
      }
      if (!o->p[i])   /* the kernel's AMP_MASTER_SPLIT / _NONE branch */
        amp__o_step_lowmem(o->h.kind, (amp_bf16 *)o->t[i].w, o->rem[i], m, v, o->t[i].g, (amp_dtype)o->t[i].gtype, key, n,
                           o->mul, &c);
      else
        amp__o_step(o->h.kind, o->p[i], m, v, o->t[i].g, (amp_dtype)o->t[i].gtype, o->t[i].w, (amp_dtype)o->t[i].wtype,
                    (amp_dtype)o->t[i].round_to, o->t[i].stochastic, key, n, o->mul, &c);
      if (o->mh[i] || o->vh[i]) {   /* the kernel's stores: amp__moment_bf16 at each element's index */
        for (j = 0; j < n; j++) {
          if (m) o->mh[i][j] = amp__moment_bf16(m[j], msr, km, j);
          if (v) o->vh[i][j] = amp__moment_bf16(v[j], msr, kv, j);
        }
        free(m); free(v);
      }
      if ((o->m8[i] || o->v8[i]) && o->t[i].moments == AMP_MOMENTS_8BIT) {   /* per block its absmax, then each code */
        if (m) fake_q8_store(o->m8[i], o->vt[0], m, n);
        if (v) fake_q8_store(o->v8[i], o->vt[1], v, n);
        free(m); free(v);
      }
      if ((o->m8[i] || o->v8[i]) && o->t[i].moments == AMP_MOMENTS_FP8) {   /* codes with the new scales, then the headers */
        for (j = 0; j < n; j++) {
          if (m) o->m8[i][4 + j] = amp_f32_to_e4m3(amp__fmul(m[j], sm_sv[0]), 1);
          if (v) o->v8[i][4 + j] = amp_f32_to_e4m3(amp__fmul(v[j], sm_sv[1]), 1);
        }
        for (j = 0; j < 2; j++) {
          unsigned char *a = j ? o->v8[i] : o->m8[i];
          float si = amp__fdiv(1.0f, sm_sv[j]);
          if (a) memcpy(a, &si, 4);
        }
        free(m); free(v);
      }
    }
  }
  amp__spike_window_push(&o->win, o->norm);
  o->t_done++;
  return AMP_OK;
}
amp_status amp__cu_optim_read(void *state, const void *optim, amp_cu_optim_info *info, char *msg, size_t cap) {
  const fake_optim *o = (const fake_optim *)optim;
  (void)state;
  if (fake_fail_reads > 0) { fake_fail_reads--; return fake_fail(msg, cap, "cudaMemcpyAsync(optimizer block)"); }
  info->t = o->t_done; info->skipped = o->skipped; info->norm = o->norm; info->clip = o->clip; info->mul = o->mul;
  info->skip = o->skip; info->spike = o->spike; info->spike_skips = o->spike_skips; info->window = o->win; info->scale = o->scale;
  info->passes = o->passes;
  return AMP_OK;
}
amp_status amp__cu_optim_stats_read(void *state, const void *optim, amp__tensor *ts, size_t n, char *msg, size_t cap) {
  const fake_optim *o = (const fake_optim *)optim;
  size_t i;
  (void)state;
  if (fake_fail_reads > 0) { fake_fail_reads--; return fake_fail(msg, cap, "cudaMemcpyAsync(gradient stats)"); }
  if (!o->stats || n != o->k) { snprintf(msg, cap, "amp__cu_optim_stats_read: stats off or n %zu", n); return AMP_ERR_ARG; }
  for (i = 0; i < n; i++) ts[i].gstat = o->stats[i];
  return AMP_OK;
}
amp_status amp__cu_optim_state_io(void *state, void *optim, size_t index, int which, float *host, int to_device,
                                  char *msg, size_t cap) {
  fake_optim *o = (fake_optim *)optim;
  void *d = which == 0 ? (void *)o->p[index]
           : which == 1 ? (o->mh[index] ? (void *)o->mh[index] : o->m8[index] ? (void *)o->m8[index] : (void *)o->m[index])
                        : (o->vh[index] ? (void *)o->vh[index] : o->v8[index] ? (void *)o->v8[index] : (void *)o->v[index]);
  size_t bytes = which > 0 ? amp__moment_bytes(o->t[index].moments, o->t[index].n) : o->t[index].n * 4;   /* as kept */
  (void)state;
  if (!d) { snprintf(msg, cap, "amp__cu_optim_state_io: which %d is not kept", which); return AMP_ERR_ARG; }
  if (to_device) memcpy(d, host, bytes); else memcpy(host, d, bytes);
  return AMP_OK;
}
amp_status amp__cu_optim_set_step(void *state, void *optim, int64_t t, char *msg, size_t cap) {
  (void)state; (void)msg; (void)cap;
  ((fake_optim *)optim)->t_done = t;
  ((fake_optim *)optim)->skip = 0; ((fake_optim *)optim)->spike = 0;   /* the kernel's: no decision from before */
  return AMP_OK;
}
amp_status amp__cu_optim_set_spike(void *state, void *optim, int64_t spike_skips, const amp__spike_window *w,
                                   char *msg, size_t cap) {
  (void)state; (void)msg; (void)cap;
  ((fake_optim *)optim)->spike_skips = spike_skips; ((fake_optim *)optim)->win = *w;
  return AMP_OK;
}
amp_status amp__cu_cast(void *state, void *dst, int32_t dst_type, const void *src, int32_t src_type, size_t n,
                        char *msg, size_t cap) {
  (void)state; (void)msg; (void)cap;
  return amp_convert(dst, (amp_dtype)dst_type, src, (amp_dtype)src_type, n);
}
amp_status amp__cu_write_model(void *state, void *dst, int32_t dtype, int32_t round_to, int32_t stochastic, uint64_t key,
                               const float *master, size_t n, char *msg, size_t cap) {
  size_t i;
  (void)state; (void)msg; (void)cap;
  for (i = 0; i < n; i++) amp__store_model(dst, (amp_dtype)dtype, (amp_dtype)round_to, stochastic, key, i, master[i]);
  return AMP_OK;
}
/* The block-scaling kernel: one scale block at a time, its amax, amp__block_scale, amp__block_q
   per element, as the kernel's threads run them. */
static int fake_qblocks_fails = 0;   /* 1: the emulated launch fails */
amp_status amp__cu_quantize_blocks(void *state, int32_t kind, int32_t fp8, int rows, int cols, const void *x,
                                   int32_t x_type, int ldx, void *q, int ldq, void *scales, char *msg, size_t cap) {
  const int bh = kind == AMP_BLOCK_128x128 ? 128 : 1, bw = kind <= AMP_BLOCK_MX_FLOOR ? 32 : 128;
  const size_t nbc = (size_t)amp__nblocks(cols, bw);
  int r0, c0, r, c;
  (void)state;
  if (fake_qblocks_fails) return fake_fail(msg, cap, "amp__cu_qblocks_kernel<<<>>>");
  for (r0 = 0; r0 < rows; r0 += bh)
    for (c0 = 0; c0 < cols; c0 += bw) {
      const size_t blk = (size_t)(r0 / bh) * nbc + (size_t)(c0 / bw);
      uint32_t amax = 0;
      amp__bscale b;
      for (r = r0; r < r0 + bh && r < rows; r++)
        for (c = c0; c < c0 + bw && c < cols; c++) {
          uint32_t u = amp__f32_bits(amp__load(x, (amp_dtype)x_type, (size_t)r * (size_t)ldx + (size_t)c)) & 0x7fffffffu;
          amax = u > amax ? u : amax;
        }
      b = amp__block_scale(kind, (amp_dtype)fp8, amax);
      if (bw == 32) ((uint8_t *)scales)[blk] = (uint8_t)b.stored; else memcpy((char *)scales + 4 * blk, &b.stored, 4);
      for (r = r0; r < r0 + bh && r < rows; r++)
        for (c = c0; c < c0 + bw && c < cols; c++)
          ((uint8_t *)q)[(size_t)r * (size_t)ldq + (size_t)c] =
              amp__block_q(amp__load(x, (amp_dtype)x_type, (size_t)r * (size_t)ldx + (size_t)c), &b, amp__dtype_fp8((amp_dtype)fp8));
    }
  return AMP_OK;
}
amp_status amp__cu_malloc(void *state, void **p, size_t bytes, char *msg, size_t cap) {
  (void)state;
  if (!(*p = malloc(bytes))) { snprintf(msg, cap, "out of memory"); return AMP_ERR_NOMEM; }
  return AMP_OK;
}
void amp__cu_free(void *state, void *p) { (void)state; free(p); }
amp_status amp__cu_scratch_alloc(void *state, void **p, size_t bytes, char *msg, size_t cap) {
  return amp__cu_malloc(state, p, bytes, msg, cap);
}
void amp__cu_scratch_free(void *state, void *p) { amp__cu_free(state, p); }
amp_status amp__cu_copy(void *state, void *dst, const void *src, size_t bytes, int dir, char *msg, size_t cap) {
  (void)state; (void)dir; (void)msg; (void)cap;
  memcpy(dst, src, bytes);
  return AMP_OK;
}
/* The plain fp8 kernel (amp__k_gemm_fp8 with T NULL), element by element as its threads run it:
   amp__gemm_fp8_factor, the k products summed in order with fmaf (per block of k, each block's sum
   times amp__gemm_block_scale_at's two scales added in k order, with block scales: the kernel's
   amp__gemm_fp8_sum), amp__gemm_fp8_epi, the amax of the |t| bits (zeroed first, as the
   launcher's cudaMemsetAsync does). m or n 0: the amax alone. AMP__EXACT_FP: GCC's -Ofast would
   otherwise fuse or re-associate the block scales' products (the device's __fmul_rn never is). */
static int fake_fp8_calls = 0;   /* how many products took this path */
static AMP__EXACT_FP void fake_gemm_fp8(amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k, float alpha,
                          const void *A, amp_dtype at, int lda, const void *B, amp_dtype bt, int ldb, float beta,
                          void *C, amp_dtype ct, int ldc, const amp_gemm_opts *o) {
  int row = layout == AMP_ROW_MAJOR, i, j, q;
  /* op(A)(i, q) at i ars + q acs, op(B)(q, j) at q brs + j bcs, C(i, j) at i crs + j ccs */
  size_t ars = row == (ta == AMP_NO_TRANS) ? (size_t)lda : 1, acs = ars == 1 ? (size_t)lda : 1;
  size_t brs = row == (tb == AMP_NO_TRANS) ? (size_t)ldb : 1, bcs = brs == 1 ? (size_t)ldb : 1;
  size_t crs = row ? (size_t)ldc : 1, ccs = row ? 1 : (size_t)ldc;
  int a_kcol = row == (ta == AMP_NO_TRANS), b_kcol = row == (tb == AMP_TRANS), p0;
  int bw = o->a_scales ? amp__gemm_block_width(o->a_blocks) : o->b_scales ? amp__gemm_block_width(o->b_blocks) : 0;
  int w = bw > 0 ? bw : k;
  uint32_t amax = 0u;
  fake_fp8_calls++;
  for (i = 0; i < m; i++)
    for (j = 0; j < n; j++) {
      float s = amp__gemm_fp8_factor(alpha, o->a_scale_inv, o->b_scale_inv), cs = o->c_scale ? *o->c_scale : 1.0f;
      float sacc = 0.0f, out, c, bias, t;
      size_t at2 = (size_t)i * crs + (size_t)j * ccs;
      if (s != 0.0f && k > 0) {
        float acc = 0.0f;
        for (p0 = 0; p0 < k; p0 += w) {
          float part = 0.0f, sa, sb;
          for (q = p0; q < p0 + w && q < k; q++)
            part = fmaf(amp__load(A, at, (size_t)i * ars + (size_t)q * acs), amp__load(B, bt, (size_t)q * brs + (size_t)j * bcs), part);
          if (!bw) { acc = part; break; }
          sa = o->a_scales ? amp__gemm_block_scale_at(o->a_scales, o->a_blocks, a_kcol, i, p0, k, m) : 1.0f;
          sb = o->b_scales ? amp__gemm_block_scale_at(o->b_scales, o->b_blocks, b_kcol, j, p0, k, n) : 1.0f;
          acc = amp__fadd(acc, amp__fmul(amp__fmul(sa, sb), part));
        }
        sacc = amp__fmul(s, acc);
      }
      c = beta != 0.0f ? amp__load(C, ct, at2) : 0.0f;
      bias = o->bias ? amp__load(o->bias, o->bias_type, (size_t)j) : 0.0f;
      t = amp__gemm_fp8_epi(sacc, beta, c, o->bias != NULL, bias, (int)o->act, o->c_scale != NULL, cs, &out);
      if ((amp__f32_bits(t) & 0x7fffffffu) > amax) amax = amp__f32_bits(t) & 0x7fffffffu;
      amp__store(C, ct, at2, out);
    }
  if (o->c_amax) *o->c_amax = amp__bits_f32(amax);
}
amp_status amp__cu_gemm(void *state, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k, float alpha,
                        const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type, int ldb,
                        float beta, void *C, amp_dtype c_type, int ldc, const amp_gemm_opts *opts, char *msg, size_t cap) {
  amp_gemm_opts ref;
  amp_status st;
  (void)state;
  if (!fake_gemm_fails && amp__gemm_fp8_mode(a_type, b_type, c_type, opts)) {   /* each operand in its own type */
    fake_gemm_fp8(layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type, ldc, opts);
    return AMP_OK;
  }
  if (fake_gemm_fails || a_type != b_type) {   /* cuBLASLt takes no mixed pair: amp.h must widen first */
    snprintf(msg, cap, "cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED (emulated%s)", fake_gemm_fails ? "" : ", mixed types");
    return AMP_ERR_DEVICE;
  }
  memset(&ref, 0, sizeof ref);
  if (opts) ref = *opts;
  ref.algo = AMP_GEMM_REFERENCE;
  st = amp_gemm_ex(amp_cpu(), layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type, ldc, &ref);
  if (st != AMP_OK) snprintf(msg, cap, "%s", amp_last_error());
  return st;
}

/* ---- the tests ----------------------------------------------------------------------------- */

static int t_nan_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return (u & 0x7fffffffu) > 0x7f800000u; }

#define N0 37
#define N1 300
typedef struct rig { amp_f16 w0[N0], g0[N0]; amp_bf16 w1[N1]; float g1[N1]; amp_optimizer *o; amp_scaler *s; } rig;

static amp_device *gpu(void) {
  static amp_device *d = NULL;
  if (!d && amp_cuda_open(&d, 0, NULL) != AMP_OK) { printf("amp_cuda_open: %s\n", amp_last_error()); exit(1); }
  return d;
}
static int rig_make(rig *r, amp_device *d, const amp_optim_config *c) {
  int i;
  memset(r, 0, sizeof *r);
  for (i = 0; i < N0; i++) r->w0[i] = amp_f32_to_f16(0.01f * (float)(i - 18));
  for (i = 0; i < N1; i++) r->w1[i] = amp_f32_to_bf16(0.5f - 0.003f * (float)i);
  if (amp_scaler_create(&r->s, d, NULL) != AMP_OK || amp_optimizer_create(&r->o, d, c) != AMP_OK ||
      amp_optimizer_add(r->o, AMP_F16, r->w0, r->g0, N0) != AMP_OK ||
      amp_optimizer_add_mixed(r->o, AMP_BF16, r->w1, AMP_F32, r->g1, N1) != AMP_OK) return 0;
  return 1;
}
static void rig_free(rig *r) { amp_optimizer_destroy(r->o); amp_scaler_destroy(r->s); }
static void rig_grads(rig *r, int step) {
  float s = amp_scaler_get_scale(r->s);
  int i;
  for (i = 0; i < N0; i++) r->g0[i] = amp_f32_to_f16(s * 0.001f * (float)((i * 7 + step * 3) % 11 - 5));
  for (i = 0; i < N1; i++) r->g1[i] = s * 0.0007f * (float)((i * 5 + step) % 13 - 6);
  if (step % 5 == 3) r->g0[4] = 0x7c00;   /* an overflow: the step is skipped */
}
static amp_status identity(void *user, double *buf, int n, void *stream) { (void)user; (void)buf; (void)n; (void)stream; return AMP_OK; }

/* Every step of a run, on amp_cpu() and on the emulated CUDA device: the same weights (bits), step
   counts, scales, skip counts and grad norms, for each kind, with and without the all-reduce hook. */
static void a_run_on_the_cuda_line_gives_the_cpus_bits(void) {
  amp_optim_config c[4];
  int k, hook;
  memset(c, 0, sizeof c);
  c[0].kind = AMP_OPTIM_SGD; c[0].lr = 0.1f; c[0].momentum = 0.9f; c[0].weight_decay = 1e-3f;
  c[1].kind = AMP_OPTIM_ADAM; c[1].lr = 1e-2f; c[1].max_grad_norm = 0.05f;
  c[2].kind = AMP_OPTIM_ADAMW; c[2].lr = 1e-2f; c[2].weight_decay = 0.1f;
  c[3].kind = AMP_OPTIM_LION; c[3].lr = 1e-3f; c[3].weight_decay = 0.1f; c[3].max_grad_norm = 0.05f;
  for (k = 0; k < 4; k++)
    for (hook = 0; hook < 2; hook++) {
      rig a, b;
      int step;
      if (!rig_make(&a, amp_cpu(), &c[k]) || !rig_make(&b, gpu(), &c[k])) {
        EXPECT(0, "kind %d: setup: %s", k, amp_last_error()); return;
      }
      if (hook) { amp_scaler_set_allreduce(a.s, identity, NULL); amp_scaler_set_allreduce(b.s, identity, NULL); }
      for (step = 0; step < 12; step++) {
        rig_grads(&a, step); rig_grads(&b, step);
        EXPECT(amp_scaler_unscale(a.s, a.o) == AMP_OK && amp_scaler_unscale(b.s, b.o) == AMP_OK, "unscale: %s", amp_last_error());
        EXPECT(amp_optimizer_grad_norm(a.o) == amp_optimizer_grad_norm(b.o), "kind %d hook %d step %d: norm cpu %a cuda line %a",
               k, hook, step, (double)amp_optimizer_grad_norm(a.o), (double)amp_optimizer_grad_norm(b.o));
        EXPECT(amp_scaler_step(a.s, a.o) == AMP_OK && amp_scaler_step(b.s, b.o) == AMP_OK, "step: %s", amp_last_error());
        if (step == 7)   /* the trainer's own overflow check: the scale backs off though the grads were clean */
          EXPECT(amp_scaler_update_found_inf(a.s, 1) == AMP_OK && amp_scaler_update_found_inf(b.s, 1) == AMP_OK, "update_found_inf: %s", amp_last_error());
        else
          EXPECT(amp_scaler_update(a.s) == AMP_OK && amp_scaler_update(b.s) == AMP_OK, "update: %s", amp_last_error());
        EXPECT(memcmp(a.w0, b.w0, sizeof a.w0) == 0 && memcmp(a.w1, b.w1, sizeof a.w1) == 0,
               "kind %d hook %d step %d: model copies differ (w0[0] cpu %g, cuda line %g)", k, hook, step,
               (double)amp_f16_to_f32(a.w0[0]), (double)amp_f16_to_f32(b.w0[0]));
        EXPECT(amp_optimizer_step_count(a.o) == amp_optimizer_step_count(b.o) &&
               amp_scaler_get_scale(a.s) == amp_scaler_get_scale(b.s) &&
               amp_scaler_skipped_steps(a.s) == amp_scaler_skipped_steps(b.s) &&
               amp_scaler_last_skipped(a.s) == amp_scaler_last_skipped(b.s),
               "kind %d hook %d step %d: steps %ld/%ld scale %g/%g skipped %ld/%ld", k, hook, step,
               amp_optimizer_step_count(a.o), amp_optimizer_step_count(b.o), (double)amp_scaler_get_scale(a.s),
               (double)amp_scaler_get_scale(b.s), amp_scaler_skipped_steps(a.s), amp_scaler_skipped_steps(b.s));
      }
      EXPECT(amp_optimizer_step_count(b.o) == 10 && amp_scaler_skipped_steps(b.s) == 3,
             "kind %d: 12 iterations, 2 overflows in the grads and 1 reported: %ld steps, %ld skipped", k, amp_optimizer_step_count(b.o),
             amp_scaler_skipped_steps(b.s));
      rig_free(&a); rig_free(&b);
    }
}

/* A checkpoint saved on the CUDA line restores a CPU optimizer to the same masters, moments, step
   count, spike state (skip count and window: a spike planted at step 1) and scaler, and the other
   way round; the model copies are written from the masters. */
static void a_checkpoint_moves_between_the_cpu_and_the_cuda_line(void) {
  amp_optim_config c;
  rig a, b;
  size_t i, n0 = 0, n1 = 0;
  int step, dir;
  memset(&c, 0, sizeof c); c.kind = AMP_OPTIM_ADAMW; c.lr = 1e-2f; c.weight_decay = 0.01f; c.spike_norm = 0.5f;
  for (dir = 0; dir < 2; dir++) {
    amp_device *from = dir ? amp_cpu() : gpu(), *to = dir ? gpu() : amp_cpu();
    if (!rig_make(&a, from, &c) || !rig_make(&b, to, &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    for (step = 0; step < 4; step++) {
      rig_grads(&a, step);
      if (step == 1) for (i = 0; i < N1; i++) a.g1[i] *= 100.0f;   /* a spike */
      EXPECT(amp_scaler_step(a.s, a.o) == AMP_OK && amp_scaler_update(a.s) == AMP_OK, "step: %s", amp_last_error());
    }
    EXPECT(amp_checkpoint_save(CKPT, a.o, a.s) == AMP_OK, "save: %s", amp_last_error());
    EXPECT(amp_checkpoint_load(CKPT, b.o, b.s) == AMP_OK, "load: %s", amp_last_error());
    EXPECT(amp_optimizer_spike_skips(a.o) == 1 && amp_optimizer_spike_skips(b.o) == 1 && a.o->spike_win.count == 2 &&
           memcmp(&a.o->spike_win, &b.o->spike_win, sizeof a.o->spike_win) == 0,
           "dir %d: spike_skips %ld -> %ld (want 1), window count %d -> %d (want 2), the windows %s", dir, amp_optimizer_spike_skips(a.o),
           amp_optimizer_spike_skips(b.o), (int)a.o->spike_win.count, (int)b.o->spike_win.count,
           memcmp(&a.o->spike_win, &b.o->spike_win, sizeof a.o->spike_win) == 0 ? "equal" : "differ");
    EXPECT(amp_optimizer_step_count(b.o) == 2 && amp_scaler_get_scale(b.s) == amp_scaler_get_scale(a.s) &&
           amp_scaler_skipped_steps(b.s) == 1, "dir %d: steps %ld scale %g/%g skipped %ld", dir,
           amp_optimizer_step_count(b.o), (double)amp_scaler_get_scale(b.s), (double)amp_scaler_get_scale(a.s),
           amp_scaler_skipped_steps(b.s));
    for (i = 0; i < 2; i++) {
      size_t na = 0, nb = 0;
      const float *ma = amp_optimizer_master(a.o, i, &na), *mb = amp_optimizer_master(b.o, i, &nb);
      EXPECT(ma && mb && na == nb && memcmp(ma, mb, na * 4) == 0, "dir %d: master %zu differs", dir, i);
      if (i == 0) n0 = na; else n1 = na;
    }
    EXPECT(n0 == N0 && n1 == N1 && memcmp(a.w0, b.w0, sizeof a.w0) == 0 && memcmp(a.w1, b.w1, sizeof a.w1) == 0,
           "dir %d: model copies written from the restored masters", dir);
    rig_free(&a); rig_free(&b);
  }
  remove(CKPT);
}

/* The manual's rule on the CUDA line too: the master is taken at add; an add after the device
   built its table is refused and changes nothing. */
static void the_cuda_line_takes_the_master_at_add(void) {
  amp_optim_config c;
  amp_f16 w[4], g[4], w2[4], g2[4];
  amp_optimizer *o = NULL;
  const float *m;
  amp_status st;
  int i;
  memset(&c, 0, sizeof c);
  for (i = 0; i < 4; i++) { w[i] = amp_f32_to_f16((float)i); g[i] = w2[i] = g2[i] = 0; }
  if (amp_optimizer_create(&o, gpu(), &c) != AMP_OK || amp_optimizer_add(o, AMP_F16, w, g, 4) != AMP_OK) {
    EXPECT(0, "setup: %s", amp_last_error()); return;
  }
  w[1] = amp_f32_to_f16(9.0f);
  m = amp_optimizer_master(o, 0, NULL);
  EXPECT(m && m[0] == 0.0f && m[1] == 1.0f && m[3] == 3.0f, "master after add: want 0 1 2 3, got %g %g",
         m ? (double)m[0] : -1.0, m ? (double)m[1] : -1.0);
  st = amp_optimizer_add(o, AMP_F16, w2, g2, 4);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "before the first step") && amp_optimizer_count(o) == 1,
         "add after the table was built: %s '%s', %zu tensors", amp_status_string(st), amp_last_error(), amp_optimizer_count(o));
  amp_optimizer_destroy(o);
}

/* Param groups, a seeded master, a float model copy rounded to bf16 and a bf16 copy written with
   stochastic rounding on the CUDA line: the
   device table carries each tensor's group and round_to, and every step gives the CPU's bits;
   add_group after the device optimizer was built is AMP_ERR_STATE, nothing changed. */
typedef struct grig { float wa[64], ga[64], wc[40], gc[40]; amp_bf16 wb[50]; float gb[50]; amp_optimizer *o; amp_scaler *s; } grig;
static int grig_make(grig *r, amp_device *d, amp_optim_kind kind) {
  amp_optim_config c;
  amp_tensor_desc t;
  float seed[40];
  int g1 = 0, g2 = 0, i;
  memset(r, 0, sizeof *r);
  memset(&c, 0, sizeof c);
  c.kind = kind; c.lr = 0.02f; c.weight_decay = 0.05f; c.momentum = 0.9f; c.max_grad_norm = 0.5f; c.seed = 99;
  for (i = 0; i < 64; i++) r->wa[i] = 0.01f * (float)(i - 30);
  for (i = 0; i < 50; i++) r->wb[i] = amp_f32_to_bf16(0.3f - 0.01f * (float)i);
  for (i = 0; i < 40; i++) seed[i] = (1.0f + (float)(i + 1) * 0x1p-20f) * (i % 2 ? -0.5f : 0.25f);
  if (amp_scaler_create(&r->s, d, NULL) != AMP_OK || amp_optimizer_create(&r->o, d, &c) != AMP_OK ||
      amp_optimizer_add_group(r->o, 0.5f, 0.0f, &g1) != AMP_OK || amp_optimizer_add_group(r->o, 2.0f, 0.3f, &g2) != AMP_OK ||
      amp_optimizer_add(r->o, AMP_F32, r->wa, r->ga, 64) != AMP_OK) return 0;
  memset(&t, 0, sizeof t);
  t.weights = r->wb; t.dtype = AMP_BF16; t.grads = r->gb; t.grad_dtype = AMP_GRAD_F32; t.n = 50; t.group = g1;
  t.stochastic = 1;   /* the device draws the CPU's bits: the same key (seed, update, tensor, element) */
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  memset(&t, 0, sizeof t);
  t.weights = r->wc; t.grads = r->gc; t.n = 40; t.group = g2; t.master = seed; t.round_to = AMP_BF16;
  return amp_optimizer_add_tensor(r->o, &t) == AMP_OK;
}
static void groups_on_the_cuda_line_give_the_cpus_bits(void) {
  static const amp_optim_kind kinds[3] = {AMP_OPTIM_SGD, AMP_OPTIM_ADAMW, AMP_OPTIM_LION};
  int k, step, i, grp = -1;
  for (k = 0; k < 3; k++) {
    static grig a, b;
    if (!grig_make(&a, amp_cpu(), kinds[k]) || !grig_make(&b, gpu(), kinds[k])) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    EXPECT(memcmp(a.wc, b.wc, sizeof a.wc) == 0, "kind %d: the model copies written from the seed differ", k);
    for (step = 0; step < 8; step++) {
      float sa = amp_scaler_get_scale(a.s);
      for (i = 0; i < 64; i++) a.ga[i] = b.ga[i] = sa * 0.01f * (float)((i * 7 + step) % 9 - 4);
      for (i = 0; i < 50; i++) a.gb[i] = b.gb[i] = sa * 0.02f * (float)((i * 3 + step) % 7 - 3);
      for (i = 0; i < 40; i++) a.gc[i] = b.gc[i] = sa * 0.015f * (float)((i * 5 + step) % 11 - 5);
      if (step == 5) a.gc[3] = b.gc[3] = (float)INFINITY;
      if (step == 6) EXPECT(amp_optimizer_set_lr(a.o, 0.01f) == AMP_OK && amp_optimizer_set_lr(b.o, 0.01f) == AMP_OK, "%s", amp_last_error());
      EXPECT(amp_scaler_step(a.s, a.o) == AMP_OK && amp_scaler_step(b.s, b.o) == AMP_OK, "step: %s", amp_last_error());
      EXPECT(amp_scaler_update(a.s) == AMP_OK && amp_scaler_update(b.s) == AMP_OK, "update: %s", amp_last_error());
      EXPECT(memcmp(a.wa, b.wa, sizeof a.wa) == 0 && memcmp(a.wb, b.wb, sizeof a.wb) == 0 && memcmp(a.wc, b.wc, sizeof a.wc) == 0,
             "kind %d step %d: model copies differ (group 2 elem 0: cpu %a, cuda line %a)", k, step, (double)a.wc[0], (double)b.wc[0]);
      for (i = 0; i < 40; i++)
        if (amp__f32_bits(b.wc[i]) != amp__f32_bits(amp_bf16_to_f32(amp_f32_to_bf16(amp_optimizer_master(b.o, 2, NULL)[i])))) {
          EXPECT(0, "kind %d step %d elem %d: round_to copy %a is not the master rounded", k, step, i, (double)b.wc[i]);
          break;
        }
    }
    EXPECT(amp_optimizer_step_count(b.o) == 7, "kind %d: %ld steps (one skipped of 8)", k, amp_optimizer_step_count(b.o));
    EXPECT(amp_optimizer_add_group(b.o, 1.0f, 0.0f, &grp) == AMP_ERR_STATE && grp == -1 && b.o->n_groups == 3 &&
           strstr(amp_last_error(), "amp_optimizer_add_group: ") == amp_last_error(),
           "add_group after the build: '%s', group %d, %d groups", amp_last_error(), grp, b.o->n_groups);
    amp_optimizer_destroy(a.o); amp_scaler_destroy(a.s); amp_optimizer_destroy(b.o); amp_scaler_destroy(b.s);
  }
}

/* A getter cannot return a status: its failed read gives the documented value (NaN tested on the
   bits, which -Ofast cannot fold), amp_last_error names it, and the next update (or
   amp_device_sync) returns the error before doing anything. */
static void a_failed_read_in_a_getter_comes_back_from_the_next_update(void) {
  amp_optim_config c;
  rig r;
  amp_status st;
  float sc;
  memset(&c, 0, sizeof c);
  if (!rig_make(&r, gpu(), &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  rig_grads(&r, 0);
  EXPECT(amp_scaler_step(r.s, r.o) == AMP_OK, "step: %s", amp_last_error());
  fake_fail_reads = 1;
  sc = amp_scaler_get_scale(r.s);
  EXPECT(sc == 0.0f && strstr(amp_last_error(), "amp_scaler_get_scale") && strstr(amp_last_error(), "cudaErrorIllegalAddress"),
         "get_scale on a failed read: %g '%s'", (double)sc, amp_last_error());
  st = amp_scaler_update(r.s);
  EXPECT(st == AMP_ERR_DEVICE && strstr(amp_last_error(), "amp_scaler_update") && strstr(amp_last_error(), "amp_scaler_get_scale"),
         "the next update: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_update(r.s) == AMP_OK && amp_optimizer_step_count(r.o) == 1, "then update works: %s", amp_last_error());
  fake_fail_reads = 1;
  EXPECT(!amp__finite(amp_optimizer_grad_norm(r.o)) && strstr(amp_last_error(), "amp_optimizer_grad_norm"), "grad_norm: '%s'", amp_last_error());
  st = amp_device_sync(gpu());
  EXPECT(st == AMP_ERR_DEVICE && strstr(amp_last_error(), "amp_device_sync"), "sync: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_device_sync(gpu()) == AMP_OK, "a second sync: %s", amp_last_error());
  rig_free(&r);
}

/* amp_optimizer_step (no scaler) on amp_cpu() and on the emulated CUDA device: the same model
   copies (bits), step counts, grad norms and skip decisions, for each kind; a skipped step changes
   nothing on the CUDA line either. */
static void rig_grads_unscaled(rig *r, int step) {
  int i;
  for (i = 0; i < N0; i++) r->g0[i] = amp_f32_to_f16(0.01f * (float)((i * 7 + step * 3) % 11 - 5));
  for (i = 0; i < N1; i++) r->g1[i] = 0.007f * (float)((i * 5 + step) % 13 - 6);
  if (step % 5 == 3) r->g0[4] = 0x7e00;          /* NaN: the step is skipped */
  if (step % 7 == 6) r->g1[N1 - 1] = -INFINITY;  /* and an inf in the f32 grads */
}
static void amp_optimizer_step_on_the_cuda_line_gives_the_cpus_bits(void) {
  amp_optim_config c[4];
  int k;
  c[0] = amp_optimizer_defaults(AMP_OPTIM_SGD); c[0].lr = 0.1f; c[0].momentum = 0.9f; c[0].weight_decay = 1e-3f;
  c[1] = amp_optimizer_defaults(AMP_OPTIM_ADAM); c[1].lr = 1e-2f; c[1].max_grad_norm = 0.05f; c[1].beta1 = 0.0f;
  c[2] = amp_optimizer_defaults(AMP_OPTIM_ADAMW); c[2].lr = 1e-2f; c[2].weight_decay = 0.1f;
  c[3] = amp_optimizer_defaults(AMP_OPTIM_LION); c[3].weight_decay = 0.1f;
  for (k = 0; k < 4; k++) {
    rig a, b;
    int step, skipped = 0;
    if (!rig_make(&a, amp_cpu(), &c[k]) || !rig_make(&b, gpu(), &c[k])) { EXPECT(0, "kind %d: setup: %s", k, amp_last_error()); return; }
    for (step = 0; step < 14; step++) {
      amp_bf16 w1[N1];
      amp_f16 w0[N0];
      long before = amp_optimizer_step_count(b.o);
      int bad = step % 5 == 3 || step % 7 == 6;
      rig_grads_unscaled(&a, step); rig_grads_unscaled(&b, step);
      memcpy(w0, b.w0, sizeof w0); memcpy(w1, b.w1, sizeof w1);
      EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "step: %s", amp_last_error());
      EXPECT(amp_optimizer_last_skipped(a.o) == bad && amp_optimizer_last_skipped(b.o) == bad,
             "kind %d step %d: last_skipped cpu %d cuda line %d, want %d", k, step, amp_optimizer_last_skipped(a.o),
             amp_optimizer_last_skipped(b.o), bad);
      if (bad)
        EXPECT(memcmp(w0, b.w0, sizeof w0) == 0 && memcmp(w1, b.w1, sizeof w1) == 0 && amp_optimizer_step_count(b.o) == before,
               "kind %d step %d: the skipped step changed the model copies or the step count", k, step);
      else
        EXPECT(amp__f32_bits(amp_optimizer_grad_norm(a.o)) == amp__f32_bits(amp_optimizer_grad_norm(b.o)),
               "kind %d step %d: norm cpu %a cuda line %a", k, step, (double)amp_optimizer_grad_norm(a.o),
               (double)amp_optimizer_grad_norm(b.o));
      EXPECT(memcmp(a.w0, b.w0, sizeof a.w0) == 0 && memcmp(a.w1, b.w1, sizeof a.w1) == 0 &&
             amp_optimizer_step_count(a.o) == amp_optimizer_step_count(b.o),
             "kind %d step %d: model copies or step counts differ (steps %ld / %ld)", k, step, amp_optimizer_step_count(a.o),
             amp_optimizer_step_count(b.o));
      skipped += bad;
    }
    EXPECT(amp_optimizer_step_count(b.o) == 14 - skipped && skipped == 4, "kind %d: %ld steps, %d skipped", k,
           amp_optimizer_step_count(b.o), skipped);
    {   /* the scaler is refused on it, on the CUDA line too */
      amp_status st = amp_scaler_step(b.s, b.o);
      EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_scaler_step"), "a scaler step: %s '%s'", amp_status_string(st),
             amp_last_error());
    }
    rig_free(&a); rig_free(&b);
  }
}

/* The getter rule for amp_optimizer_last_skipped: a failed read returns 0 and names it; the next
   amp_optimizer_step returns the kept error before doing anything, then steps again. */
static void a_failed_last_skipped_read_comes_back_from_the_next_step(void) {
  amp_optim_config c = amp_optimizer_defaults(AMP_OPTIM_ADAM);
  rig r;
  amp_status st;
  int ls;
  if (!rig_make(&r, gpu(), &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  rig_grads_unscaled(&r, 3);   /* a NaN: skipped */
  EXPECT(amp_optimizer_step(r.o) == AMP_OK && amp_optimizer_last_skipped(r.o) == 1, "step: %s", amp_last_error());
  fake_fail_reads = 1;
  ls = amp_optimizer_last_skipped(r.o);
  EXPECT(ls == 0 && strstr(amp_last_error(), "amp_optimizer_last_skipped") && strstr(amp_last_error(), "cudaErrorIllegalAddress"),
         "last_skipped on a failed read: %d '%s'", ls, amp_last_error());
  rig_grads_unscaled(&r, 0);
  st = amp_optimizer_step(r.o);
  EXPECT(st == AMP_ERR_DEVICE && strstr(amp_last_error(), "amp_optimizer_step") && strstr(amp_last_error(), "amp_optimizer_last_skipped"),
         "the next step: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_optimizer_step_count(r.o) == 0, "the refused step stepped: %ld", amp_optimizer_step_count(r.o));
  EXPECT(amp_optimizer_step(r.o) == AMP_OK && amp_optimizer_step_count(r.o) == 1 && amp_optimizer_last_skipped(r.o) == 0,
         "then it steps: %s", amp_last_error());
  rig_free(&r);
}

/* Gradient stats (amp_optim_config.stats) on the CUDA line: the same stats as the CPU's after every
   unscale, with and without the all-reduce hook and through amp_optimizer_step; the overflowed
   tensor named; a failed read of the stats comes back from the next update. */
static int stats_equal(const amp_optimizer *a, const amp_optimizer *b, size_t i, amp_tensor_stats *sa, amp_tensor_stats *sb) {
  if (amp_optimizer_stats(a, i, sa) != AMP_OK || amp_optimizer_stats(b, i, sb) != AMP_OK) return 0;
  return sa->amax == sb->amax && sa->n_nonfinite == sb->n_nonfinite && sa->n_zero == sb->n_zero && sa->n_subnormal == sb->n_subnormal;
}
static char line_log[4][256];
static int line_n;
static void line_catch(void *user, const char *msg) {
  (void)user;
  if (line_n < 4) snprintf(line_log[line_n], sizeof line_log[0], "%s", msg);
  line_n++;
}
/* (and the overflow log line: the CPU's at its unscale, the CUDA line's at the first read after
   it, the same text, once each) */
static void gradient_stats_on_the_cuda_line_equal_the_cpus(void) {
  amp_optim_config c;
  int hook, step;
  size_t i;
  memset(&c, 0, sizeof c);
  c.kind = AMP_OPTIM_ADAM; c.lr = 1e-2f; c.stats = 1;
  for (hook = 0; hook < 2; hook++) {
    rig a, b;
    if (!rig_make(&a, amp_cpu(), &c) || !rig_make(&b, gpu(), &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    if (hook) { amp_scaler_set_allreduce(a.s, identity, NULL); amp_scaler_set_allreduce(b.s, identity, NULL); }
    for (step = 0; step < 8; step++) {
      long ov;
      rig_grads(&a, step); rig_grads(&b, step);
      a.g0[9] = b.g0[9] = 0x0003;   /* an f16 subnormal */
      line_n = 0;
      amp_set_log(line_catch, NULL);
      EXPECT(amp_scaler_step(a.s, a.o) == AMP_OK && amp_scaler_step(b.s, b.o) == AMP_OK, "step: %s", amp_last_error());
      EXPECT(line_n == (step % 5 == 3), "hook %d step %d: %d lines logged before the host read the CUDA line", hook, step, line_n);
      for (i = 0; i < 2; i++) {
        amp_tensor_stats sa, sb;
        EXPECT(stats_equal(a.o, b.o, i, &sa, &sb), "hook %d step %d tensor %zu: cpu amax %a inf %zu zero %zu sub %zu, "
               "cuda line amax %a inf %zu zero %zu sub %zu (%s)", hook, step, i, (double)sa.amax, sa.n_nonfinite, sa.n_zero,
               sa.n_subnormal, (double)sb.amax, sb.n_nonfinite, sb.n_zero, sb.n_subnormal, amp_last_error());
        if (i == 0) EXPECT(sb.n_subnormal >= 1 && sb.n_zero >= 1, "step %d: the planted subnormal and the zeros: %zu, %zu", step,
                           sb.n_subnormal, sb.n_zero);
      }
      amp_set_log(NULL, NULL);
      EXPECT(step % 5 == 3 ? line_n == 2 && strcmp(line_log[0], line_log[1]) == 0 && strstr(line_log[0], "overflow in tensor 0: 1 inf/NaN of 37")
                           : line_n == 0, "hook %d step %d: %d lines: '%s' / '%s'", hook, step, line_n, line_n > 0 ? line_log[0] : "",
             line_n > 1 ? line_log[1] : "");
      ov = amp_optimizer_overflow_tensor(b.o);
      EXPECT(ov == (step % 5 == 3 ? 0 : -1) && ov == amp_optimizer_overflow_tensor(a.o), "hook %d step %d: overflow tensor %ld (cpu %ld)",
             hook, step, ov, amp_optimizer_overflow_tensor(a.o));
      EXPECT(amp_scaler_update(a.s) == AMP_OK && amp_scaler_update(b.s) == AMP_OK, "update: %s", amp_last_error());
    }
    if (hook) {   /* a failed read: -1, the getter named, the error back from the next update */
      amp_status st;
      fake_fail_reads = 1;
      EXPECT(amp_optimizer_overflow_tensor(b.o) == -1 && strstr(amp_last_error(), "amp_optimizer_overflow_tensor") &&
             strstr(amp_last_error(), "cudaErrorIllegalAddress"), "overflow_tensor on a failed read: '%s'", amp_last_error());
      rig_grads(&b, 0);
      EXPECT(amp_scaler_step(b.s, b.o) == AMP_OK, "step: %s", amp_last_error());
      st = amp_scaler_update(b.s);
      EXPECT(st == AMP_ERR_DEVICE && strstr(amp_last_error(), "amp_optimizer_overflow_tensor"), "the next update: %s '%s'",
             amp_status_string(st), amp_last_error());
    }
    rig_free(&a); rig_free(&b);
  }
  {   /* amp_optimizer_step: inverse scale 1 */
    rig a, b;
    if (!rig_make(&a, amp_cpu(), &c) || !rig_make(&b, gpu(), &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    for (step = 0; step < 4; step++) {
      rig_grads_unscaled(&a, step); rig_grads_unscaled(&b, step);
      a.g1[200] = b.g1[200] = (float)NAN;
      EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "amp_optimizer_step: %s", amp_last_error());
      for (i = 0; i < 2; i++) {
        amp_tensor_stats sa, sb;
        EXPECT(stats_equal(a.o, b.o, i, &sa, &sb), "amp_optimizer_step %d tensor %zu: cpu amax %a inf %zu, cuda line amax %a inf %zu",
               step, i, (double)sa.amax, sa.n_nonfinite, (double)sb.amax, sb.n_nonfinite);
      }
      EXPECT(amp_optimizer_overflow_tensor(b.o) == (step % 5 == 3 ? 0 : 1), "amp_optimizer_step %d: NaN planted in tensor 1 "
             "(and in tensor 0 at step 3), named %ld", step, amp_optimizer_overflow_tensor(b.o));
    }
    rig_free(&a); rig_free(&b);
  }
}

/* spike_norm and spike_zscore on the CUDA line: the same skips, counts, scales, spike windows and
   bits as the CPU, through a scaler and through amp_optimizer_step. spike_norm: 10 steps, a spike
   (the f32 grads 100 times larger) at steps 1, 4, 7. spike_zscore 3: 40 steps, spikes planted at
   steps 9 (before 20 clean steps: not skipped), 30, 31 and 36 (after 20 clean steps also where
   steps 3, 8, ... overflow), each skipped. */
static void spikes_on_the_cuda_line_equal_the_cpus(void) {
  amp_optim_config c;
  int via, step, i, rule;
  for (rule = 0; rule < 2; rule++)
    for (via = 0; via < 2; via++) {
      rig a, b;
      int steps = rule == 0 ? 10 : 40, planted_skipped = 0;
      long before = 0;
      memset(&c, 0, sizeof c);
      c.kind = AMP_OPTIM_ADAM; c.lr = 1e-2f;
      if (rule == 0) c.spike_norm = 0.5f; else c.spike_zscore = 3.0f;
      if (!rig_make(&a, amp_cpu(), &c) || !rig_make(&b, gpu(), &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
      for (step = 0; step < steps; step++) {
        int planted = rule == 0 ? step % 3 == 1 : step == 9 || step == 30 || step == 31 || step == 36;
        if (via == 0) { rig_grads(&a, step); rig_grads(&b, step); } else { rig_grads_unscaled(&a, step); rig_grads_unscaled(&b, step); }
        if (planted)   /* a spike: the f32 grads 100 times larger */
          for (i = 0; i < N1; i++) { a.g1[i] *= 100.0f; b.g1[i] *= 100.0f; }
        if (via == 0) {
          EXPECT(amp_scaler_step(a.s, a.o) == AMP_OK && amp_scaler_step(b.s, b.o) == AMP_OK, "step: %s", amp_last_error());
          EXPECT(amp_scaler_update(a.s) == AMP_OK && amp_scaler_update(b.s) == AMP_OK, "update: %s", amp_last_error());
        } else {
          EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "step: %s", amp_last_error());
        }
        EXPECT(memcmp(a.w0, b.w0, sizeof a.w0) == 0 && memcmp(a.w1, b.w1, sizeof a.w1) == 0 &&
               amp_optimizer_step_count(a.o) == amp_optimizer_step_count(b.o) &&
               amp_optimizer_spike_skips(a.o) == amp_optimizer_spike_skips(b.o) && amp_scaler_get_scale(a.s) == amp_scaler_get_scale(b.s),
               "rule %d via %d step %d: cpu steps %ld spikes %ld scale %g, cuda line %ld %ld %g (or the weights differ)", rule, via,
               step, amp_optimizer_step_count(a.o), amp_optimizer_spike_skips(a.o), (double)amp_scaler_get_scale(a.s),
               amp_optimizer_step_count(b.o), amp_optimizer_spike_skips(b.o), (double)amp_scaler_get_scale(b.s));
        EXPECT(memcmp(&a.o->spike_win, &b.o->spike_win, sizeof a.o->spike_win) == 0, "rule %d via %d step %d: the spike windows differ "
               "(count %d / %d)", rule, via, step, (int)a.o->spike_win.count, (int)b.o->spike_win.count);
        if (planted && amp_optimizer_spike_skips(b.o) > before) planted_skipped++;
        if (rule == 1 && step == 9) EXPECT(amp_optimizer_spike_skips(b.o) == before, "via %d: step 9 skipped with %d clean norms", via,
                                           (int)b.o->spike_win.count);
        before = amp_optimizer_spike_skips(b.o);
      }
      EXPECT(amp_optimizer_spike_skips(b.o) == 3 && planted_skipped == 3, "rule %d via %d: %ld spike skips, %d of them planted; want "
             "the 3 planted (%s)", rule, via, amp_optimizer_spike_skips(b.o), planted_skipped, rule == 0 ? "steps 1, 4, 7" : "30, 31, 36");
      rig_free(&a); rig_free(&b);
    }
}

static void never_called(void *user, float *master, const float *grad, size_t n, size_t index, long step) {
  (void)user; (void)master; (void)grad; (void)n; (void)index; (void)step;
}
/* AMP_CUSTOM needs a host update: refused on the CUDA line; a device error names the public call. */
static void the_cuda_line_refuses_what_it_cannot_run(void) {
  amp_optim_config c;
  amp_optimizer *o = NULL;
  float a[4] = {0}, cbuf[4] = {0};
  amp_status st;
  memset(&c, 0, sizeof c);
  c.kind = AMP_OPTIM_CUSTOM; c.custom_step = never_called;
  st = amp_optimizer_create(&o, gpu(), &c);
  EXPECT(st == AMP_ERR_UNSUPPORTED && o == NULL && strstr(amp_last_error(), "CUDA device"), "AMP_CUSTOM: %s '%s'",
         amp_status_string(st), amp_last_error());
  fake_gemm_fails = 1;
  st = amp_gemm(gpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 2, 2, 2, 1.0f, a, AMP_F32, 2, a, AMP_F32, 2, 0.0f, cbuf, AMP_F32, 2);
  fake_gemm_fails = 0;
  EXPECT(st == AMP_ERR_DEVICE && strncmp(amp_last_error(), "amp_gemm: cublasLtMatmul", 24) == 0, "gemm: %s '%s'",
         amp_status_string(st), amp_last_error());
}

/* Mixed input types on the CUDA line: amp.h widens each 16-bit operand into a scratch buffer before
   the (emulated) cuBLASLt call, which refuses a mixed pair; the result equals the same product of
   the widened matrices, for every pair, both transposes and both layouts, with a leading dimension
   above the minimum. */
static void mixed_types_on_the_cuda_line_are_widened_first(void) {
  static const amp_dtype types[3] = {AMP_F32, AMP_F16, AMP_BF16};
  enum { M = 5, N = 7, K = 9, LD = 12, SA = M * LD + K * LD, SB = K * LD + N * LD, SC = M * LD + N * LD };
  static float af[SA], bf[SB], wa[SA], wb[SB], c1[SC], c2[SC];
  static unsigned char a[4 * SA], b[4 * SB];
  amp_gemm_opts ref;
  int ia, ib, tr, lay, i;
  memset(&ref, 0, sizeof ref);
  ref.algo = AMP_GEMM_REFERENCE;
  for (i = 0; i < SA; i++) af[i] = 0.37f * (float)((i * 7) % 19) - 3.1f;
  for (i = 0; i < SB; i++) bf[i] = 0.23f * (float)((i * 5) % 23) - 2.4f;
  for (ia = 0; ia < 3; ia++) for (ib = 0; ib < 3; ib++) for (tr = 0; tr < 4; tr++) for (lay = 0; lay < 2; lay++) {
    amp_trans ta = tr & 1 ? AMP_TRANS : AMP_NO_TRANS, tb = tr & 2 ? AMP_TRANS : AMP_NO_TRANS;
    amp_layout L = lay ? AMP_COL_MAJOR : AMP_ROW_MAJOR;
    amp_status s1, s2;
    if (ia == ib) continue;
    amp_convert(a, types[ia], af, AMP_F32, SA); amp_convert(wa, AMP_F32, a, types[ia], SA);
    amp_convert(b, types[ib], bf, AMP_F32, SB); amp_convert(wb, AMP_F32, b, types[ib], SB);
    for (i = 0; i < SC; i++) c1[i] = c2[i] = 0.5f;
    s1 = amp_gemm(gpu(), L, ta, tb, M, N, K, 1.5f, a, types[ia], LD, b, types[ib], LD, 0.25f, c1, AMP_F32, LD);
    s2 = amp_gemm_ex(amp_cpu(), L, ta, tb, M, N, K, 1.5f, wa, AMP_F32, LD, wb, AMP_F32, LD, 0.25f, c2, AMP_F32, LD, &ref);
    EXPECT(s1 == AMP_OK && s2 == AMP_OK, "A %d B %d trans %d layout %d: %s", ia, ib, tr, lay, amp_last_error());
    EXPECT(memcmp(c1, c2, sizeof c1) == 0, "A %d B %d trans %d layout %d: the CUDA line's mixed product differs from the "
           "widened one", ia, ib, tr, lay);
  }
}

/* The fp8 product on the CUDA line: amp.h hands both types to the device as they are (no widening:
   E4M3 x E5M2, fp8 x 16-bit), with the scales, c_scale and c_amax (device pointers there), and
   m 0 with c_amax still reaches the device, which writes the amax. The plain fp8 kernel's element
   functions (emulated above: amp__gemm_fp8_factor, fmaf in k order, amp__gemm_fp8_epi) must give
   the CPU reference's bits, C and amax: an fp8 x fp8 or fp8 x 16-bit product is exact in f32, so
   the fma rounds only the add the reference rounds. Every supported pair, output type, layout and
   transpose, odd sizes, with alpha, scale_invs, bias, ReLU, beta (a 16-bit or f32 C) or c_scale. */
static void fp8_products_on_the_cuda_line_give_the_cpus_bits(void) {
  static const amp_dtype pairs[5][2] = {{AMP_E4M3, AMP_E4M3}, {AMP_E4M3, AMP_E5M2}, {AMP_E5M2, AMP_E4M3},
                                        {AMP_E4M3, AMP_F16}, {AMP_BF16, AMP_E5M2}};
  static const amp_dtype outs[5] = {AMP_F32, AMP_F16, AMP_BF16, AMP_E4M3, AMP_E5M2};
  enum { M = 5, N = 7, K = 19, LD = 21, S = LD * LD };
  static unsigned char a[2 * S], b[2 * S], c1[4 * S], c2[4 * S];
  static float v[S];
  amp_f16 bias[N];
  float sa = 0.5f, sb = 0.375f, cs = 4.0f, am1, am2;
  int ip, io, tr, lay, ep, i, calls;
  for (i = 0; i < N; i++) bias[i] = amp_f32_to_f16(0.25f * (float)(i - 3));
  for (ip = 0; ip < 5; ip++) for (io = 0; io < 5; io++) for (tr = 0; tr < 4; tr++) for (lay = 0; lay < 2; lay++)
    for (ep = 0; ep < 2; ep++) {
      amp_trans ta = tr & 1 ? AMP_TRANS : AMP_NO_TRANS, tb = tr & 2 ? AMP_TRANS : AMP_NO_TRANS;
      amp_layout L = lay ? AMP_COL_MAJOR : AMP_ROW_MAJOR;
      amp_dtype ct = outs[io];
      int c8 = ct == AMP_E4M3 || ct == AMP_E5M2;
      float beta = c8 ? 0.0f : 0.25f;
      amp_gemm_opts o;
      amp_status s1, s2;
      for (i = 0; i < S; i++) v[i] = 0.3f * (float)((i * 7 + ip) % 23) - 3.2f;
      amp_convert(a, pairs[ip][0], v, AMP_F32, S);
      for (i = 0; i < S; i++) v[i] = 0.2f * (float)((i * 5 + tr) % 29) - 2.7f;
      amp_convert(b, pairs[ip][1], v, AMP_F32, S);
      for (i = 0; i < S; i++) v[i] = 0.1f * (float)(i % 13) - 0.6f;
      if (!c8) amp_convert(c1, ct, v, AMP_F32, S); else memset(c1, 0x3c, S);
      memcpy(c2, c1, sizeof c1);
      memset(&o, 0, sizeof o);
      o.a_scale_inv = &sa; o.b_scale_inv = ep ? &sb : NULL; o.c_scale = c8 ? &cs : NULL;
      o.bias = ep ? bias : NULL; o.bias_type = AMP_F16; o.act = ep ? AMP_ACT_RELU : AMP_ACT_NONE;
      am1 = am2 = -1.0f;
      o.c_amax = &am1;
      calls = fake_fp8_calls;
      s1 = amp_gemm_ex(gpu(), L, ta, tb, M, N, K, 1.5f, a, pairs[ip][0], LD, b, pairs[ip][1], LD, beta, c1, ct, LD, &o);
      o.c_amax = &am2; o.algo = AMP_GEMM_REFERENCE;
      s2 = amp_gemm_ex(amp_cpu(), L, ta, tb, M, N, K, 1.5f, a, pairs[ip][0], LD, b, pairs[ip][1], LD, beta, c2, ct, LD, &o);
      EXPECT(s1 == AMP_OK && s2 == AMP_OK && fake_fp8_calls == calls + 1, "pair %d out %d trans %d layout %d ep %d: %s",
             ip, io, tr, lay, ep, amp_last_error());
      EXPECT(memcmp(c1, c2, sizeof c1) == 0 && amp__f32_bits(am1) == amp__f32_bits(am2) && am2 > 0.0f,
             "pair %d out %d trans %d layout %d ep %d: the CUDA line's fp8 product differs from the CPU's (amax %g, %g)",
             ip, io, tr, lay, ep, (double)am1, (double)am2);
    }
  am1 = 7.0f;
  calls = fake_fp8_calls;
  {
    amp_gemm_opts o;
    memset(&o, 0, sizeof o);
    o.c_amax = &am1;
    EXPECT(amp_gemm_ex(gpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 0, N, K, 1.0f, a, AMP_E4M3, K, b, AMP_E4M3, N,
                       0.0f, c1, AMP_F32, N, &o) == AMP_OK && am1 == 0.0f && fake_fp8_calls == calls + 1,
           "m 0: c_amax %g (want 0, written by the device), %d device calls: %s", (double)am1, fake_fp8_calls - calls,
           amp_last_error());
  }
}

/* Block-scaled fp8 products on the CUDA line (the plain fp8 kernel's path): for each kind on A and
   on B, alone and together, each layout and transpose the blocks allow (1 x 32 and 1 x 128 need k
   along the stored rows; 128 x 128 takes any), k 300 (a partial last block), the CPU reference's
   bits, C and c_amax. The scales are any positive values (E8M0 bytes 120 to 134), as stored. */
static void block_scaled_fp8_products_on_the_cuda_line_give_the_cpus_bits(void) {
  static const amp_block_scaling kinds[3] = {AMP_BLOCK_MX_RCEIL, AMP_BLOCK_1x128, AMP_BLOCK_128x128};
  enum { M = 5, N = 6, K = 300, LD = 301, S = LD * LD };
  static unsigned char a[S], b[S], c1[4 * M * N], c2[4 * M * N];
  static float v[S], sc[2][S / 32 + 64];
  int ka, kb, tr, lay, i, w;
  for (i = 0; i < S; i++) v[i] = 0.3f * (float)((i * 7) % 23) - 3.2f;
  amp_convert(a, AMP_E4M3, v, AMP_F32, S);
  for (i = 0; i < S; i++) v[i] = 0.2f * (float)((i * 5) % 29) - 2.7f;
  amp_convert(b, AMP_E5M2, v, AMP_F32, S);
  for (w = 0; w < 2; w++)
    for (i = 0; i < S / 32 + 64; i++) sc[w][i] = 0.17f * (float)((i * 3 + w) % 9) + 0.3f;   /* not dyadic: the products round */
  for (ka = -1; ka < 3; ka++) for (kb = -1; kb < 3; kb++) for (tr = 0; tr < 4; tr++) for (lay = 0; lay < 2; lay++) {
    amp_trans ta = tr & 1 ? AMP_TRANS : AMP_NO_TRANS, tb = tr & 2 ? AMP_TRANS : AMP_NO_TRANS;
    amp_layout L = lay ? AMP_COL_MAJOR : AMP_ROW_MAJOR;
    int a_kcol = (L == AMP_ROW_MAJOR) == (ta == AMP_NO_TRANS), b_kcol = (L == AMP_ROW_MAJOR) == (tb == AMP_TRANS);
    unsigned char mx[2][S / 32 + 64];
    float am1 = -1.0f, am2 = -2.0f, sa = 0.5f;
    amp_gemm_opts o;
    amp_status s1, s2;
    if (ka < 0 && kb < 0) continue;
    if ((ka >= 0 && kinds[ka] != AMP_BLOCK_128x128 && !a_kcol) || (kb >= 0 && kinds[kb] != AMP_BLOCK_128x128 && !b_kcol))
      continue;   /* refused on both sides (test_gemm_fp8) */
    if (ka >= 0 && kb >= 0 && (kinds[ka] == AMP_BLOCK_MX_RCEIL) != (kinds[kb] == AMP_BLOCK_MX_RCEIL)) continue;
    for (i = 0; i < (int)sizeof mx[0]; i++) { mx[0][i] = (unsigned char)(120 + i % 15); mx[1][i] = (unsigned char)(134 - i % 13); }
    memset(&o, 0, sizeof o);
    if (ka >= 0) { o.a_blocks = kinds[ka]; o.a_scales = ka == 0 ? (const void *)mx[0] : (const void *)sc[0]; }
    if (kb >= 0) { o.b_blocks = kinds[kb]; o.b_scales = kb == 0 ? (const void *)mx[1] : (const void *)sc[1]; }
    o.a_scale_inv = &sa; o.c_amax = &am1;
    memset(c1, 0, sizeof c1); memset(c2, 0, sizeof c2);
    s1 = amp_gemm_ex(gpu(), L, ta, tb, M, N, K, 1.25f, a, AMP_E4M3, LD, b, AMP_E5M2, LD, 0.0f, c1, AMP_BF16,
                     L == AMP_ROW_MAJOR ? N : M, &o);
    o.c_amax = &am2; o.algo = AMP_GEMM_REFERENCE;
    s2 = amp_gemm_ex(amp_cpu(), L, ta, tb, M, N, K, 1.25f, a, AMP_E4M3, LD, b, AMP_E5M2, LD, 0.0f, c2, AMP_BF16,
                     L == AMP_ROW_MAJOR ? N : M, &o);
    EXPECT(s1 == AMP_OK && s2 == AMP_OK, "kinds %d %d trans %d layout %d: %s", ka, kb, tr, lay, amp_last_error());
    EXPECT(memcmp(c1, c2, sizeof c1) == 0 && amp__f32_bits(am1) == amp__f32_bits(am2) && am2 > 0.0f,
           "kinds %d %d trans %d layout %d: the CUDA line's block-scaled product differs from the CPU's (amax %g, %g)",
           ka, kb, tr, lay, (double)am1, (double)am2);
  }
}

/* The block scales cuBLASLt's block-scaled fp8 kernels read (amp__gemm_lt_scale128, what
   amp_kernels.cu's amp__k_gemm_scales128 writes), against that layout read straight from
   amp_quantize_blocks' (the scales numbered 1, 2, ... so that any index slip shows): 1 x 128,
   dst[i + kb r] = sc[i nkb + kb]; 128 x 128 with k along the stored rows, dst[ib ld + kb] =
   sc[ib nkb + kb], and with k down the stored columns (the stored matrix k x r), sc[kb nrb + ib];
   the padding up to ld = 4 ceil(nkb / 4) is 0. Rows and k on and off the multiples of 128. */
static void the_scales_cublaslt_reads_are_amp_quantize_blocks_relaid(void) {
  static const int rs[4] = {1, 37, 128, 300}, ks[5] = {1, 128, 129, 300, 1100};
  static float sc[300 * 9], dst[300 * 9];
  int ir, ik, kind, kcol, j;
  for (j = 0; j < 300 * 9; j++) sc[j] = (float)(j + 1);
  for (ir = 0; ir < 4; ir++) for (ik = 0; ik < 5; ik++) for (kind = 0; kind < 2; kind++) for (kcol = 0; kcol < 2; kcol++) {
    const int r = rs[ir], k = ks[ik], nkb = (k + 127) / 128, nrb = (r + 127) / 128, ld = (nkb + 3) / 4 * 4;
    const amp_block_scaling bk = kind ? AMP_BLOCK_128x128 : AMP_BLOCK_1x128;
    size_t n = amp__gemm_lt_scales128_count(bk, r, k), e;
    int i, kb, bad = 0;
    if (!kind && !kcol) continue;   /* 1 x 128 across k: refused by amp_gemm_ex */
    EXPECT(n == (kind ? (size_t)nrb * (size_t)ld : (size_t)r * (size_t)nkb), "r %d k %d kind %d: %zu scales", r, k, kind, n);
    for (e = 0; e < n; e++) dst[e] = amp__gemm_lt_scale128(sc, bk, kcol, r, k, e);
    if (!kind) {
      for (i = 0; i < r; i++) for (kb = 0; kb < nkb; kb++) bad += dst[i + kb * r] != sc[i * nkb + kb];
    } else {
      for (i = 0; i < nrb; i++) for (kb = 0; kb < ld; kb++)
        bad += dst[i * ld + kb] != (kb >= nkb ? 0.0f : kcol ? sc[i * nkb + kb] : sc[kb * nrb + i]);
    }
    EXPECT(bad == 0, "r %d k %d kind %s kcol %d: %d scales misplaced", r, k, kind ? "128x128" : "1x128", kcol, bad);
  }
}

/* AMP_MASTER_SPLIT and AMP_MASTER_NONE on the CUDA line: the device table carries each tensor's
   mode (no fp32 master in the slab for them, the remainders beside it), the step kernel's branch
   for them gives the CPU's bits (model copies, remainders, moments), a seed reaches the model copy
   at add, a skipped step changes nothing, and a checkpoint moves between the CPU and the CUDA line. */
typedef struct mrig { amp_bf16 wa[70], wb[45], wc[33]; float wd[20], ga[70], gb[45], gc[33], gd[20]; amp_optimizer *o; } mrig;
static int mrig_make(mrig *r, amp_device *d, amp_optim_kind kind) {
  amp_optim_config c = amp_optimizer_defaults(kind);
  amp_tensor_desc t;
  float seed[45];
  int i;
  memset(r, 0, sizeof *r);
  c.lr = 0.01f; c.weight_decay = 0.05f; c.momentum = kind == AMP_SGD ? 0.9f : 0.0f; c.seed = 5;
  for (i = 0; i < 70; i++) r->wa[i] = amp_f32_to_bf16(0.02f * (float)(i - 35));
  for (i = 0; i < 45; i++) seed[i] = (1.0f + (float)(i + 3) * 0x1p-19f) * (i % 3 ? 0.7f : -0.3f);
  for (i = 0; i < 33; i++) r->wc[i] = amp_f32_to_bf16(0.5f - 0.01f * (float)i);
  for (i = 0; i < 20; i++) r->wd[i] = 0.1f * (float)i;
  if (amp_optimizer_create(&r->o, d, &c) != AMP_OK) return 0;
  memset(&t, 0, sizeof t);
  t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32;
  t.weights = r->wa; t.grads = r->ga; t.n = 70; t.master_mode = AMP_MASTER_SPLIT;
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  t.weights = r->wb; t.grads = r->gb; t.n = 45; t.master = seed;   /* a seeded split master */
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  t.weights = r->wc; t.grads = r->gc; t.n = 33; t.master = NULL; t.master_mode = AMP_MASTER_NONE; t.stochastic = 1;
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  return amp_optimizer_add(r->o, AMP_F32, r->wd, r->gd, 20) == AMP_OK;
}
static int mrig_same(const mrig *a, const mrig *b) {
  uint16_t *rb0 = amp__cu_optim_rem(b->o->cu, 0), *rb1 = amp__cu_optim_rem(b->o->cu, 1);
  return memcmp(a->wa, b->wa, sizeof a->wa) == 0 && memcmp(a->wb, b->wb, sizeof a->wb) == 0 &&
         memcmp(a->wc, b->wc, sizeof a->wc) == 0 && memcmp(a->wd, b->wd, sizeof a->wd) == 0 &&
         rb0 && rb1 && memcmp(a->o->t[0].rem, rb0, 70 * 2) == 0 && memcmp(a->o->t[1].rem, rb1, 45 * 2) == 0 &&
         (!a->o->t[0].m || memcmp(a->o->t[0].m, ((fake_optim *)b->o->cu)->m[0], 70 * 4) == 0);
}
static void master_modes_on_the_cuda_line_give_the_cpus_bits(void) {
  static const amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAMW, AMP_LION};
  int k, step, i;
  for (k = 0; k < 3; k++) {
    static mrig a, b;
    static mrig before;
    if (!mrig_make(&a, amp_cpu(), kinds[k]) || !mrig_make(&b, gpu(), kinds[k])) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    EXPECT(memcmp(a.wb, b.wb, sizeof a.wb) == 0, "kind %d: the model copies written from the seed at add differ", k);
    EXPECT(amp_optimizer_master(b.o, 0, NULL) == NULL && amp_optimizer_master(b.o, 3, NULL) != NULL,
           "kind %d: a split tensor has an fp32 master on the device, or the fp32 one has none", k);
    for (step = 0; step < 9; step++) {
      for (i = 0; i < 70; i++) a.ga[i] = b.ga[i] = 0.03f * (float)((i * 7 + step) % 9 - 4);
      for (i = 0; i < 45; i++) a.gb[i] = b.gb[i] = 0.02f * (float)((i * 3 + step) % 7 - 3);
      for (i = 0; i < 33; i++) a.gc[i] = b.gc[i] = 0.01f * (float)((i * 5 + step) % 11 - 5);
      for (i = 0; i < 20; i++) a.gd[i] = b.gd[i] = 0.05f * (float)((i + step) % 5 - 2);
      if (step == 4) a.gc[7] = b.gc[7] = (float)NAN;
      before = b;
      EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "step: %s", amp_last_error());
      if (step == 4)
        EXPECT(memcmp(before.wa, b.wa, sizeof b.wa) == 0 && memcmp(before.wc, b.wc, sizeof b.wc) == 0,
               "kind %d: a skipped step changed a split or in-place model copy", k);
      EXPECT(mrig_same(&a, &b), "kind %d step %d: model copies, remainders or moments differ (split elem 0: cpu %04x/%04x, "
             "cuda line %04x/%04x)", k, step, a.wa[0], a.o->t[0].rem[0], b.wa[0], amp__cu_optim_rem(b.o->cu, 0)[0]);
    }
    /* a checkpoint saved on the CUDA line and loaded on the CPU, and back */
    EXPECT(amp_checkpoint_save(CKPT, b.o, NULL) == AMP_OK && amp_checkpoint_load(CKPT, a.o, NULL) == AMP_OK, "%s", amp_last_error());
    EXPECT(mrig_same(&a, &b), "kind %d: the CUDA line's checkpoint loaded on the CPU differs", k);
    for (i = 0; i < 70; i++) a.ga[i] = b.ga[i] = 0.01f * (float)(i % 5);
    EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "step: %s", amp_last_error());
    EXPECT(amp_checkpoint_save(CKPT, a.o, NULL) == AMP_OK && amp_checkpoint_load(CKPT, b.o, NULL) == AMP_OK, "%s", amp_last_error());
    EXPECT(mrig_same(&a, &b), "kind %d: after a step and the CPU's checkpoint loaded on the CUDA line, they differ", k);
    amp_optimizer_destroy(a.o); amp_optimizer_destroy(b.o);
  }
}

/* The moment tests' checkpoint round trip on two rigs (a on the CPU, b on the CUDA line): b's file
   loaded on the CPU, a step on both, a's file loaded on the CUDA line after it moved on, and the
   step after; same() must hold after each load and after the last step. */
typedef struct rig_ops { amp_optimizer *(*opt)(void *); void (*grads)(void *, void *, int); int (*same)(const void *, const void *, int); } rig_ops;
static void moments_checkpoint_both_ways(const rig_ops *r, void *a, void *b, int nm, int k) {
  amp_optimizer *oa = r->opt(a), *ob = r->opt(b);
  EXPECT(amp_checkpoint_save(CKPT, ob, NULL) == AMP_OK && amp_checkpoint_load(CKPT, oa, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(r->same(a, b, nm), "kind %d: the CUDA line's checkpoint loaded on the CPU differs", k);
  r->grads(a, b, 20);
  EXPECT(amp_optimizer_step(oa) == AMP_OK && amp_optimizer_step(ob) == AMP_OK, "step: %s", amp_last_error());
  EXPECT(amp_checkpoint_save(CKPT, oa, NULL) == AMP_OK, "%s", amp_last_error());
  r->grads(a, b, 21);
  EXPECT(amp_optimizer_step(ob) == AMP_OK, "step: %s", amp_last_error());   /* moved on, then restored */
  EXPECT(amp_checkpoint_load(CKPT, ob, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(r->same(a, b, nm), "kind %d: the CPU's checkpoint loaded on the CUDA line differs", k);
  r->grads(a, b, 22);
  EXPECT(amp_optimizer_step(oa) == AMP_OK && amp_optimizer_step(ob) == AMP_OK && r->same(a, b, nm),
         "kind %d: the step after the load differs: %s", k, amp_last_error());
}

/* AMP_MOMENTS_BF16 on the CUDA line: the device keeps the moments as bf16 words (2 bytes each), the
   step kernel's loads widen them and its stores round them with amp__moment_bf16 (to nearest even,
   or stochastically with the moment streams of the tensor's key at each element's index), so every
   master mode (F32 with a bf16 copy rounded to nearest and one rounded stochastically, SPLIT, NONE)
   beside an f32-moment tensor gives the CPU's model copies, remainders, masters and moment words,
   across the CPU's blocks of AMP__CHUNK elements; a skipped step leaves the words as they were; the
   state bytes are the CPU's; a checkpoint moves between the CPU and the CUDA line both ways, the
   moments as kept. */
#define BN 1300   /* more than two of the CPU's blocks */
typedef struct brig {
  amp_bf16 wa[BN], wb[77], wc[BN], wd[41]; float we[29], ga[BN], gb[77], gc[BN], gd[41], ge[29]; amp_optimizer *o;
} brig;
static const size_t brig_n[5] = {BN, 77, BN, 41, 29};
static int brig_make(brig *r, amp_device *d, amp_optim_kind kind) {
  amp_optim_config c = amp_optimizer_defaults(kind);
  amp_tensor_desc t;
  int i;
  memset(r, 0, sizeof *r);
  c.lr = 0.01f; c.weight_decay = 0.05f; c.momentum = kind == AMP_SGD ? 0.9f : 0.0f; c.seed = 11;
  for (i = 0; i < BN; i++) r->wa[i] = amp_f32_to_bf16(0.002f * (float)(i % 97 - 48));
  for (i = 0; i < 77; i++) r->wb[i] = amp_f32_to_bf16(0.3f - 0.007f * (float)i);
  for (i = 0; i < BN; i++) r->wc[i] = amp_f32_to_bf16(0.001f * (float)(i % 53) - 0.02f);
  for (i = 0; i < 41; i++) r->wd[i] = amp_f32_to_bf16(0.5f - 0.01f * (float)i);
  for (i = 0; i < 29; i++) r->we[i] = 0.1f * (float)i - 1.0f;
  if (amp_optimizer_create(&r->o, d, &c) != AMP_OK) return 0;
  memset(&t, 0, sizeof t);
  t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.moments = AMP_MOMENTS_BF16;
  t.weights = r->wa; t.grads = r->ga; t.n = BN;   /* F32 master, nearest copy and moments */
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  t.weights = r->wb; t.grads = r->gb; t.n = 77; t.stochastic = 1;   /* F32 master, stochastic copy and moments */
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  t.weights = r->wc; t.grads = r->gc; t.n = BN; t.stochastic = 0; t.master_mode = AMP_MASTER_SPLIT;
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  t.weights = r->wd; t.grads = r->gd; t.n = 41; t.stochastic = 1; t.master_mode = AMP_MASTER_NONE;
  if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  return amp_optimizer_add(r->o, AMP_F32, r->we, r->ge, 29) == AMP_OK;   /* f32 moments beside them */
}
static void brig_grads(brig *a, brig *b, int step) {
  int i;
  for (i = 0; i < BN; i++) a->ga[i] = b->ga[i] = 0.013f * (float)((i * 7 + step) % 19 - 9) + 1e-4f * (float)(i % 3);
  for (i = 0; i < 77; i++) a->gb[i] = b->gb[i] = 0.02f * (float)((i * 3 + step) % 7 - 3) + 3e-5f * (float)i;
  for (i = 0; i < BN; i++) a->gc[i] = b->gc[i] = 0.007f * (float)((i * 5 + step) % 23 - 11);
  for (i = 0; i < 41; i++) a->gd[i] = b->gd[i] = 0.011f * (float)((i * 5 + step) % 11 - 5);
  for (i = 0; i < 29; i++) a->ge[i] = b->ge[i] = 0.05f * (float)((i + step) % 5 - 2);
}
/* Moment j (1, 2) of tensor i as kept: the CPU's words or f32s, the CUDA line's */
static const void *brig_moment(const brig *r, size_t i, int j) {
  if (r->o->dev == amp_cpu()) {
    const amp__tensor *t = &r->o->t[i];
    return t->moments == AMP_MOMENTS_BF16 ? (const void *)(j == 1 ? t->mq : t->vq) : (const void *)(j == 1 ? t->m : t->v);
  } else {
    const fake_optim *f = (const fake_optim *)r->o->cu;
    return f->mh[i] || f->vh[i] ? (const void *)(j == 1 ? f->mh[i] : f->vh[i]) : (const void *)(j == 1 ? f->m[i] : f->v[i]);
  }
}
static int brig_same(const brig *a, const brig *b, int nm) {
  size_t i;
  int j;
  uint16_t *rb = amp__cu_optim_rem(b->o->cu, 2);
  if (memcmp(a->wa, b->wa, sizeof a->wa) || memcmp(a->wb, b->wb, sizeof a->wb) || memcmp(a->wc, b->wc, sizeof a->wc) ||
      memcmp(a->wd, b->wd, sizeof a->wd) || memcmp(a->we, b->we, sizeof a->we) || !rb ||
      memcmp(a->o->t[2].rem, rb, BN * 2))
    return 0;
  for (i = 0; i < 5; i++) {
    size_t na = 0, nb = 0;
    const float *ma = amp_optimizer_master(a->o, i, &na), *mb = amp_optimizer_master(b->o, i, &nb);
    if ((ma != NULL) != (mb != NULL) || na != nb || (ma && memcmp(ma, mb, na * 4))) return 0;
    for (j = 1; j <= nm; j++) {
      const void *qa = brig_moment(a, i, j), *qb = brig_moment(b, i, j);
      if (!qa || !qb || memcmp(qa, qb, brig_n[i] * (i < 4 ? 2 : 4))) return 0;
    }
  }
  return 1;
}
static amp_optimizer *brig_opt(void *r) { return ((brig *)r)->o; }
static void brig_grads_v(void *a, void *b, int step) { brig_grads((brig *)a, (brig *)b, step); }
static int brig_same_v(const void *a, const void *b, int nm) { return brig_same((const brig *)a, (const brig *)b, nm); }
static const rig_ops brig_ops = {brig_opt, brig_grads_v, brig_same_v};
static void bf16_moments_on_the_cuda_line_give_the_cpus_bits(void) {
  static const amp_optim_kind kinds[4] = {AMP_SGD, AMP_ADAM, AMP_ADAMW, AMP_LION};
  static const int nms[4] = {1, 2, 2, 1};
  int k, step, nonzero;
  size_t i;
  for (k = 0; k < 4; k++) {
    static brig a, b, before;
    if (!brig_make(&a, amp_cpu(), kinds[k]) || !brig_make(&b, gpu(), kinds[k])) { EXPECT(0, "setup: %s", amp_last_error()); return; }
    {   /* the device's arrays: 64 elements each; masters F32 4, SPLIT 2, NONE 0; each moment 2 bytes, 4 for f32 */
      size_t want = 1344 * (4 + 2 * nms[k]) + 128 * (4 + 2 * nms[k]) + 1344 * (2 + 2 * nms[k]) + 64 * 2 * nms[k] +
                    64 * (4 + 4 * nms[k]);
      EXPECT(amp_optimizer_state_bytes(b.o) == want, "kind %d: state bytes on the CUDA line %zu, want %zu", k,
             amp_optimizer_state_bytes(b.o), want);
    }
    for (step = 0; step < 9; step++) {
      brig_grads(&a, &b, step);
      if (step == 4) a.gb[7] = b.gb[7] = (float)NAN;   /* skipped: nothing moves */
      before = b;
      EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "step: %s", amp_last_error());
      if (step == 4)
        EXPECT(memcmp(before.wa, b.wa, sizeof b.wa) == 0 && memcmp(before.wd, b.wd, sizeof b.wd) == 0,
               "kind %d: a skipped step changed a model copy", k);
      EXPECT(brig_same(&a, &b, nms[k]), "kind %d step %d: model copies, remainders, masters or bf16 moments differ "
             "(tensor 1 m[0]: cpu %04x, cuda line %04x)", k, step, ((const amp_bf16 *)brig_moment(&a, 1, 1))[0],
             ((const amp_bf16 *)brig_moment(&b, 1, 1))[0]);
    }
    for (i = 0, nonzero = 0; i < 77; i++) nonzero += ((const amp_bf16 *)brig_moment(&b, 1, nms[k]))[i] != 0;
    EXPECT(nonzero > 40, "kind %d: only %d of tensor 1's moment words are nonzero", k, nonzero);
    moments_checkpoint_both_ways(&brig_ops, &a, &b, nms[k], k);
    amp_optimizer_destroy(a.o); amp_optimizer_destroy(b.o);
  }
  remove(CKPT);
}

/* AMP_MOMENTS_8BIT and _FP8 on the CUDA line: the device keeps each moment as the CPU does (8BIT:
   the absmax of each block of 256, then the codes; FP8: the scale_inv, then the codes). For 8BIT
   the step kernel reads code[c] * absmax, steps, takes each block's new absmax and encodes by
   bisection (amp__q8_bisect); for FP8 a first launch gathers the new moments' amaxes, the step
   encodes with their scales and its last block writes the new scale_invs. So every master mode
   (F32 with a bf16 copy rounded to nearest and one rounded stochastically, SPLIT, NONE), tensors
   ending in a partial block, one under 4096 elements (8BIT: f32 moments there, as on the CPU) and
   an f32 tensor beside them give the CPU's model copies, remainders, masters and moment bytes,
   whose loops differ; a skipped step leaves them as they were; the state bytes count the absmaxes
   and scale_invs; a checkpoint moves between the CPU and the CUDA line both ways. */
#define QK 5
static const size_t qrig_n[QK] = {4396, 5000, 4396, 4097, 300};
typedef struct qrig { amp_bf16 *w[QK]; float *g[QK], we[29], ge[29]; amp_optimizer *o; } qrig;
static void qrig_free(qrig *r) {
  int i;
  for (i = 0; i < QK; i++) { free(r->w[i]); free(r->g[i]); }
  amp_optimizer_destroy(r->o);
  memset(r, 0, sizeof *r);
}
static int qrig_make(qrig *r, amp_device *d, amp_optim_kind kind, int moments) {
  static const int modes[QK] = {AMP_MASTER_F32, AMP_MASTER_F32, AMP_MASTER_SPLIT, AMP_MASTER_NONE, AMP_MASTER_F32};
  static const int sr[QK] = {0, 1, 0, 1, 0};
  amp_optim_config c = amp_optimizer_defaults(kind);
  amp_tensor_desc t;
  size_t i, j;
  memset(r, 0, sizeof *r);
  c.lr = 0.01f; c.weight_decay = 0.05f; c.momentum = kind == AMP_SGD ? 0.9f : 0.0f; c.seed = 5;
  if (amp_optimizer_create(&r->o, d, &c) != AMP_OK) return 0;
  for (i = 0; i < QK; i++) {
    r->w[i] = (amp_bf16 *)malloc(qrig_n[i] * 2); r->g[i] = (float *)calloc(qrig_n[i], 4);
    if (!r->w[i] || !r->g[i]) return 0;
    for (j = 0; j < qrig_n[i]; j++) r->w[i][j] = amp_f32_to_bf16(0.001f * (float)((j * (i + 3)) % 101) - 0.05f);
    memset(&t, 0, sizeof t);
    t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.moments = moments;
    t.weights = r->w[i]; t.grads = r->g[i]; t.n = qrig_n[i]; t.master_mode = modes[i]; t.stochastic = sr[i];
    if (amp_optimizer_add_tensor(r->o, &t) != AMP_OK) return 0;
  }
  for (j = 0; j < 29; j++) r->we[j] = 0.1f * (float)j - 1.0f;
  return amp_optimizer_add(r->o, AMP_F32, r->we, r->ge, 29) == AMP_OK;
}
static void qrig_grads(qrig *a, qrig *b, int step) {
  size_t i, j;
  for (i = 0; i < QK; i++)
    for (j = 0; j < qrig_n[i]; j++)   /* blocks of very different sizes: absmaxes far apart */
      a->g[i][j] = b->g[i][j] = 0.013f * (float)((j * 7 + (size_t)step + i) % 19 - 9) * (j / 256 % 3 == 1 ? 1e-3f : 1.0f);
  for (j = 0; j < 29; j++) a->ge[j] = b->ge[j] = 0.05f * (float)((j + (size_t)step) % 5 - 2);
}
static const void *qrig_moment(const qrig *r, size_t i, int j) {
  if (r->o->dev == amp_cpu()) {
    const amp__tensor *t = &r->o->t[i];
    return t->moments != AMP_MOMENTS_F32 ? (const void *)(j == 1 ? t->mq : t->vq) : (const void *)(j == 1 ? t->m : t->v);
  } else {
    const fake_optim *f = (const fake_optim *)r->o->cu;
    return f->m8[i] || f->v8[i] ? (const void *)(j == 1 ? f->m8[i] : f->v8[i]) : (const void *)(j == 1 ? f->m[i] : f->v[i]);
  }
}
static int qrig_same(const qrig *a, const qrig *b, int nm) {
  size_t i;
  int j;
  uint16_t *rb;
  (void)amp_optimizer_master(b->o, 0, NULL);   /* builds the device's optimizer before the first step */
  rb = amp__cu_optim_rem(b->o->cu, 2);
  if (memcmp(a->we, b->we, sizeof a->we) || !rb || memcmp(a->o->t[2].rem, rb, qrig_n[2] * 2)) return 0;
  for (i = 0; i <= QK; i++) {
    size_t na = 0, nb = 0, n = i < QK ? qrig_n[i] : 29;
    const float *ma = amp_optimizer_master(a->o, i, &na), *mb = amp_optimizer_master(b->o, i, &nb);
    if (i < QK && memcmp(a->w[i], b->w[i], n * 2)) return 0;
    if ((ma != NULL) != (mb != NULL) || na != nb || (ma && memcmp(ma, mb, na * 4))) return 0;
    if (a->o->t[i].moments != b->o->t[i].moments) return 0;
    for (j = 1; j <= nm; j++) {
      const void *qa = qrig_moment(a, i, j), *qb = qrig_moment(b, i, j);
      if (!qa || !qb || memcmp(qa, qb, amp__moment_bytes(a->o->t[i].moments, n))) return 0;
    }
  }
  return 1;
}
static amp_optimizer *qrig_opt(void *r) { return ((qrig *)r)->o; }
static void qrig_grads_v(void *a, void *b, int step) { qrig_grads((qrig *)a, (qrig *)b, step); }
static int qrig_same_v(const void *a, const void *b, int nm) { return qrig_same((const qrig *)a, (const qrig *)b, nm); }
static const rig_ops qrig_ops = {qrig_opt, qrig_grads_v, qrig_same_v};
static void coded_moments_on_the_cuda_line_give_the_cpus_bits(int moments) {
  static const amp_optim_kind kinds[4] = {AMP_SGD, AMP_ADAM, AMP_ADAMW, AMP_LION};
  static const int nms[4] = {1, 2, 2, 1};
  static const size_t master[QK] = {4, 4, 2, 0, 4};
  int k, step, codes;
  size_t i, j;
  for (k = 0; k < 4; k++) {
    qrig a, b;
    size_t want = 0;
    if (!qrig_make(&a, amp_cpu(), kinds[k], moments) || !qrig_make(&b, gpu(), kinds[k], moments)) {
      EXPECT(0, "setup: %s", amp_last_error());
      return;
    }
    EXPECT(a.o->t[0].moments == moments && a.o->t[4].moments == (moments == AMP_MOMENTS_8BIT ? AMP_MOMENTS_F32 : moments),
           "the rule for small tensors");
    for (i = 0; i <= QK; i++) {   /* the device's arrays: 64 elements each, every moment array 128-byte aligned */
      size_t n = i < QK ? qrig_n[i] : 29, p = (n + 63) / 64 * 64;
      size_t mom = amp__moment_bytes(b.o->t[i].moments, p);
      want += p * (i < QK ? master[i] : 4) + (size_t)nms[k] * ((mom + 127) / 128 * 128);
    }
    EXPECT(amp_optimizer_state_bytes(b.o) == want, "kind %d: state bytes on the CUDA line %zu, want %zu", k,
           amp_optimizer_state_bytes(b.o), want);
    EXPECT(qrig_same(&a, &b, nms[k]), "kind %d: the states differ before a step", k);
    for (step = 0; step < 9; step++) {
      qrig_grads(&a, &b, step);
      if (step == 4) a.g[1][7] = b.g[1][7] = (float)NAN;   /* skipped: nothing moves */
      EXPECT(amp_optimizer_step(a.o) == AMP_OK && amp_optimizer_step(b.o) == AMP_OK, "step: %s", amp_last_error());
      EXPECT(qrig_same(&a, &b, nms[k]), "kind %d step %d: model copies, remainders, masters or 8-bit moments differ", k,
             step);
    }
    {   /* the codes moved: many distinct codes in tensor 1's last moment */
      const unsigned char *q = (const unsigned char *)qrig_moment(&b, 1, nms[k]);
      int seen[256] = {0};
      size_t at = moments == AMP_MOMENTS_8BIT ? 4 * ((qrig_n[1] + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK) : 4;
      for (j = 0, codes = 0; j < qrig_n[1]; j++) if (!seen[q[at + j]]++) codes++;
      EXPECT(codes > 8, "kind %d: only %d distinct codes in tensor 1's moment", k, codes);
    }
    moments_checkpoint_both_ways(&qrig_ops, &a, &b, nms[k], k);
    qrig_free(&a); qrig_free(&b);
  }
  remove(CKPT);
}
/* The step kernel's 8-bit code, amp__q8_vcode (one read of amp__q8_vtable's table), is the
   bisection's count (amp__q8_bisect, the rule) for every y amp__q8_unit gives ([-1, 1] and NaN):
   on both maps, at each midpoint and the 8 floats either side of it, at both edges of every
   bucket and the 2 floats either side, at 0, -0, the least subnormals, +-1 and NaN, and on 2^20
   random floats of random exponents (2^14 under AMP_TEST_QUICK). */
static uint32_t vc_state = 12345u;
static uint32_t vc_rand(void) { vc_state ^= vc_state << 13; vc_state ^= vc_state >> 17; vc_state ^= vc_state << 5; return vc_state; }
static int vc_check(const double *mid, const uint32_t *vt, float y, int map) {
  uint8_t want = amp__q8_bisect(mid, y), got = amp__q8_vcode(vt, y);
  if (want == got) return 1;
  EXPECT(0, "map %d, y %.9g (bits 0x%08x): vcode %d, bisection %d", map, (double)y, (unsigned)amp__f32_bits(y), got, want);
  return 0;
}
static void eight_bit_code_lookup_is_the_bisection(void) {
  static const uint32_t specials[] = {0u, 0x80000000u, 1u, 0x80000001u, 0x3f800000u, 0xbf800000u, 0x7fc00000u,
                                      0xffc00000u, 0x7f800001u};
  double mid[256];
  float code[256];
  uint32_t vt[AMP__Q8_VLUT];
  int map, k, d, ok = 1;
  long r, nr = t_quick() ? 1L << 14 : 1L << 20;
  for (map = 0; map < 2 && ok; map++) {
    amp__q8_map(map == 0, code, mid);
    amp__q8_vtable(mid, vt);
    for (k = 0; k < (int)(sizeof specials / sizeof specials[0]) && ok; k++) ok = vc_check(mid, vt, amp__bits_f32(specials[k]), map);
    for (k = 0; k < 255 && ok; k++) {   /* around each midpoint */
      uint32_t u = amp__f32_bits((float)mid[k]);
      for (d = -8; d <= 8 && ok; d++) {
        uint32_t w = u + (uint32_t)d;   /* (a float's neighbours by its bits, of the same sign) */
        if ((w & 0x7fffffffu) <= 0x3f800000u && (w >> 31) == (u >> 31)) ok = vc_check(mid, vt, amp__bits_f32(w), map);
      }
    }
    for (k = 0; k < AMP__Q8_VLUT && ok; k++) {   /* both edges of every bucket */
      uint32_t sg = (uint32_t)(k / (AMP__Q8_VROWS << AMP__Q8_VMB)), e = (uint32_t)((k >> AMP__Q8_VMB) % AMP__Q8_VROWS) + AMP__Q8_VEMIN;
      uint32_t f = (uint32_t)k & ((1u << AMP__Q8_VMB) - 1u), lb = (1u << (23 - AMP__Q8_VMB)) - 1u;
      uint32_t lo = sg << 31 | e << 23 | f << (23 - AMP__Q8_VMB), hi = lo | lb;
      for (d = -2; d <= 2 && ok; d++) {
        uint32_t w1 = lo + (uint32_t)d, w2 = hi + (uint32_t)d;
        if ((w1 & 0x7fffffffu) <= 0x3f800000u && (w1 >> 31) == sg) ok = vc_check(mid, vt, amp__bits_f32(w1), map);
        if (ok && (w2 & 0x7fffffffu) <= 0x3f800000u && (w2 >> 31) == sg) ok = vc_check(mid, vt, amp__bits_f32(w2), map);
      }
    }
    for (r = 0; r < nr && ok; r++) {   /* random bits: sign, exponent 0..127 (|y| <= 1 kept), mantissa */
      uint32_t u = vc_rand(), w = (u & 0x80000000u) | (vc_rand() % 128u) << 23 | (u & 0x7fffffu);
      if ((w & 0x7fffffffu) <= 0x3f800000u) ok = vc_check(mid, vt, amp__bits_f32(w), map);
    }
  }
}

static void eight_bit_moments_on_the_cuda_line_give_the_cpus_bits(void) { coded_moments_on_the_cuda_line_give_the_cpus_bits(AMP_MOMENTS_8BIT); }
static void fp8_moments_on_the_cuda_line_give_the_cpus_bits(void) { coded_moments_on_the_cuda_line_give_the_cpus_bits(AMP_MOMENTS_FP8); }

/* Both operation tables are filled from one list (AMP__BACKEND_OPS) by name: every member of
   amp__backend after its name and flag is an operation of the list, and neither the CPU, which
   runs everything, nor the CUDA line leaves one NULL. */
/* Grads given after the device optimizer was built (amp_optimizer_master builds it): the device's
   table is rewritten (optim_set_grads) and the run gives the CPU's bits; a step before is refused. */
static void grads_set_after_the_device_optimizer_is_built_give_the_cpus_bits(void) {
  static amp_bf16 wa[64], wb[64];
  static float ga[64], gb[64];
  amp_optimizer *oa = NULL, *ob = NULL;
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAMW);
  amp_tensor_desc t;
  amp_status st;
  int i, step;
  for (i = 0; i < 64; i++) wa[i] = wb[i] = amp_f32_to_bf16(0.25f - 0.01f * (float)i);
  c.lr = 0.01f;
  if (amp_optimizer_create(&oa, amp_cpu(), &c) != AMP_OK || amp_optimizer_create(&ob, gpu(), &c) != AMP_OK) {
    EXPECT(0, "setup: %s", amp_last_error()); return;
  }
  memset(&t, 0, sizeof t);
  t.dtype = AMP_BF16; t.grad_dtype = AMP_GRAD_F32; t.n = 64;
  t.weights = wa; t.grads = ga;
  EXPECT(amp_optimizer_add_tensor(oa, &t) == AMP_OK, "cpu add: %s", amp_last_error());
  t.weights = wb; t.grads = NULL;
  EXPECT(amp_optimizer_add_tensor(ob, &t) == AMP_OK, "cuda add, grads NULL: %s", amp_last_error());
  EXPECT(amp_optimizer_master(ob, 0, NULL) != NULL && ob->frozen, "the device optimizer was not built: %s", amp_last_error());
  st = amp_optimizer_step(ob);
  EXPECT(st == AMP_ERR_STATE && strstr(amp_last_error(), "amp_optimizer_set_grads"), "a step before the grads: %s '%s'",
         amp_status_string(st), amp_last_error());
  EXPECT(amp_optimizer_set_grads(ob, 0, gb) == AMP_OK, "set_grads on the built device optimizer: %s", amp_last_error());
  for (step = 0; step < 5; step++) {
    for (i = 0; i < 64; i++) ga[i] = gb[i] = 0.03f * (float)((i * 3 + step) % 9) - 0.12f;
    EXPECT(amp_optimizer_step(oa) == AMP_OK && amp_optimizer_step(ob) == AMP_OK, "step %d: %s", step, amp_last_error());
  }
  EXPECT(memcmp(wa, wb, sizeof wa) == 0 && wa[3] != amp_f32_to_bf16(0.25f - 0.03f), "the late grads' run differs from the CPU's");
  amp_optimizer_destroy(oa); amp_optimizer_destroy(ob);
}

/* The fp8 scaler and amp_quantize on the CUDA line: the same scales, histories and bytes as the
   CPU's over a run (every recipe, mixed formats; stats on for two of them: the same counts and
   stats, through amp_quantize_ex and the counters in the device block), the pointers into the
   device block, and a failed getter read kept until the next update. */
static void the_fp8_scaler_on_the_cuda_line_equals_the_cpus(void) {
  amp_dtype fmt[3] = { AMP_E4M3, AMP_E5M2, AMP_E4M3 };
  int r;
  for (r = 0; r < 4; r++) {
    amp_fp8_config c;
    amp_fp8_scaler *a = NULL, *b = NULL;
    int step, i;
    memset(&c, 0, sizeof c);
    c.recipe = (amp_fp8_recipe)r;
    if (r == 0) c.history_len = 5;
    c.stats = r % 2 == 0;
    EXPECT(amp_fp8_scaler_create(&a, amp_cpu(), &c, 3, fmt) == AMP_OK, "%s", amp_last_error());
    EXPECT(amp_fp8_scaler_create(&b, gpu(), &c, 3, fmt) == AMP_OK, "%s", amp_last_error());
    if (!a || !b) return;
    for (step = 0; step < 20; step++) {
      for (i = 0; i < 3; i++) {
        float x[64], amax = (float)((step * 7 + i * 3) % 11) * (step == 9 ? 1e6f : 0.5f);
        unsigned char qa[64], qb[64];
        int j;
        for (j = 0; j < 64; j++) x[j] = (float)(j - 32) * 0.37f * (float)(step + 1) * (j % 9 == 4 ? 1e-6f : 1.0f);
        if (step == 4) x[7] = 1e30f;
        if (step == 6 && r == 0) x[9] = amp__bits_f32(0x7fc00000u);   /* DELAYED "max" passes over it */
        EXPECT(amp_fp8_scaler_record(a, (size_t)i, amax) == AMP_OK && amp_fp8_scaler_record(b, (size_t)i, amax) == AMP_OK,
               "%s", amp_last_error());
        if (c.stats) {   /* the counted cast, into the device block's counters */
          EXPECT(amp_quantize_ex(amp_cpu(), qa, fmt[i], x, AMP_F32, 64, amp_fp8_scaler_scale_ptr(a, (size_t)i),
                                 amp_fp8_scaler_amax_ptr(a, (size_t)i), amp_fp8_scaler_counts_ptr(a, (size_t)i)) == AMP_OK,
                 "%s", amp_last_error());
          EXPECT(amp_quantize_ex(gpu(), qb, fmt[i], x, AMP_F32, 64, amp_fp8_scaler_scale_ptr(b, (size_t)i),
                                 amp_fp8_scaler_amax_ptr(b, (size_t)i), amp_fp8_scaler_counts_ptr(b, (size_t)i)) == AMP_OK,
                 "%s", amp_last_error());
        } else {
          EXPECT(amp_quantize(amp_cpu(), qa, fmt[i], x, AMP_F32, 64, amp_fp8_scaler_scale_ptr(a, (size_t)i),
                              amp_fp8_scaler_amax_ptr(a, (size_t)i)) == AMP_OK, "%s", amp_last_error());
          EXPECT(amp_quantize(gpu(), qb, fmt[i], x, AMP_F32, 64, amp_fp8_scaler_scale_ptr(b, (size_t)i),
                              amp_fp8_scaler_amax_ptr(b, (size_t)i)) == AMP_OK, "%s", amp_last_error());
          EXPECT(amp_fp8_scaler_counts_ptr(b, (size_t)i) == NULL && amp_fp8_scaler_stats(b, 0, NULL) == AMP_ERR_ARG,
                 "stats off on the cuda line");
        }
        EXPECT(memcmp(qa, qb, 64) == 0, "recipe %d step %d tensor %d: the casts differ", r, step, i);
      }
      EXPECT(amp_fp8_scaler_update(a) == AMP_OK && amp_fp8_scaler_update(b) == AMP_OK, "%s", amp_last_error());
      for (i = 0; i < 3; i++) {
        float ha[5], hb[5];
        int len = r == 0 ? 5 : 1;
        if (c.stats) {
          amp_fp8_stats sa, sb;
          EXPECT(amp_fp8_scaler_stats(a, (size_t)i, &sa) == AMP_OK && amp_fp8_scaler_stats(b, (size_t)i, &sb) == AMP_OK,
                 "%s", amp_last_error());
          EXPECT(sa.n == 64 && sa.n == sb.n && sa.saturated == sb.saturated && sa.flushed == sb.flushed && sa.nan == sb.nan &&
                     memcmp(&sa.amax_used, &sb.amax_used, 4) == 0 && memcmp(&sa.scale_used, &sb.scale_used, 4) == 0,
                 "recipe %d step %d tensor %d: stats %llu %llu %llu %llu / %llu %llu %llu %llu", r, step, i,
                 (unsigned long long)sa.n, (unsigned long long)sa.saturated, (unsigned long long)sa.flushed,
                 (unsigned long long)sa.nan, (unsigned long long)sb.n, (unsigned long long)sb.saturated,
                 (unsigned long long)sb.flushed, (unsigned long long)sb.nan);
          if (step == 4) EXPECT(sb.saturated >= 1, "step 4: 1e30 saturated nothing");
          if (step == 6 && r == 0) EXPECT(sb.nan == 1, "step 6: %llu NaN", (unsigned long long)sb.nan);
          if (step == 2 && fmt[i] == AMP_E4M3) EXPECT(sb.flushed > 0, "step 2: nothing flushed");
        }
        EXPECT(amp_fp8_scaler_get_scale(a, (size_t)i) == amp_fp8_scaler_get_scale(b, (size_t)i) &&
                   amp_fp8_scaler_get_scale_inv(a, (size_t)i) == amp_fp8_scaler_get_scale_inv(b, (size_t)i),
               "recipe %d step %d tensor %d: scale %g / %g", r, step, i, (double)amp_fp8_scaler_get_scale(a, (size_t)i),
               (double)amp_fp8_scaler_get_scale(b, (size_t)i));
        EXPECT(amp_fp8_scaler_history(a, (size_t)i, ha, len) == AMP_OK && amp_fp8_scaler_history(b, (size_t)i, hb, len) == AMP_OK &&
                   memcmp(ha, hb, (size_t)len * sizeof(float)) == 0, "recipe %d step %d: histories differ", r, step);
      }
    }
    {   /* a checkpoint moves between the two: CUDA's file into a CPU scaler and back */
      amp_fp8_scaler *c2 = NULL, *g2 = NULL;
      EXPECT(amp_fp8_scaler_save(b, "build/test/device_line_fp8.ckpt") == AMP_OK, "%s", amp_last_error());
      amp_fp8_scaler_create(&c2, amp_cpu(), &c, 3, fmt);
      EXPECT(c2 && amp_fp8_scaler_load(c2, "build/test/device_line_fp8.ckpt") == AMP_OK, "%s", amp_last_error());
      EXPECT(amp_fp8_scaler_save(c2, "build/test/device_line_fp8.ckpt") == AMP_OK, "%s", amp_last_error());
      amp_fp8_scaler_create(&g2, gpu(), &c, 3, fmt);
      EXPECT(g2 && amp_fp8_scaler_load(g2, "build/test/device_line_fp8.ckpt") == AMP_OK, "%s", amp_last_error());
      for (i = 0; i < 3 && c2 && g2; i++) {
        amp_fp8_scaler_record(b, (size_t)i, 2.5f); amp_fp8_scaler_record(g2, (size_t)i, 2.5f);
      }
      amp_fp8_scaler_update(b); amp_fp8_scaler_update(g2);
      for (i = 0; i < 3 && c2 && g2; i++)
        EXPECT(amp_fp8_scaler_get_scale(g2, (size_t)i) == amp_fp8_scaler_get_scale(b, (size_t)i) &&
                   amp_fp8_scaler_get_scale(c2, (size_t)i) == amp_fp8_scaler_get_scale(a, (size_t)i),
               "recipe %d tensor %d: the reloaded scalers differ", r, i);
      amp_fp8_scaler_destroy(c2); amp_fp8_scaler_destroy(g2);
    }
    if (c.stats) {
      amp_fp8_stats st;
      fake_fail_reads = 1;
      EXPECT(amp_fp8_scaler_stats(b, 0, &st) == AMP_ERR_DEVICE && strstr(amp_last_error(), "amp_fp8_scaler_stats"),
             "a failed stats read: %s", amp_last_error());
    }
    fake_fail_reads = 1;
    EXPECT(t_nan_bits(amp_fp8_scaler_get_scale(b, 0)), "a failed read gives NaN");
    EXPECT(amp_fp8_scaler_update(b) == AMP_ERR_DEVICE && strstr(amp_last_error(), "amp_fp8_scaler_update"),
           "the failed read comes back from the next update: %s", amp_last_error());
    fake_fail_reads = 0;
    amp_fp8_scaler_destroy(a);
    amp_fp8_scaler_destroy(b);
  }
}

/* amp_quantize_blocks on the CUDA line: the public checks, then the launcher (here the kernel's
   element functions run on the host), give the CPU's bits for every kind, format and input type;
   a refused call names amp_quantize_blocks and never reaches the launcher; a failed launch comes
   back as AMP_ERR_DEVICE under the public function's name. */
static void block_scaling_on_the_cuda_line_gives_the_cpus_bits(void) {
  enum { R = 131, C = 300, LDX = 303, LDQ = 301 };
  static float xf[R * LDX];
  static float xw[R * LDX], s1[R * 10], s2[R * 10];   /* float-aligned: x of any type, float scales */
  static uint8_t q1[R * LDQ], q2[R * LDQ];
  uint8_t *x = (uint8_t *)xw;
  static const amp_dtype types[3] = {AMP_F32, AMP_F16, AMP_BF16};
  uint32_t r = 1;
  int kind, f, t, i;
  for (i = 0; i < R * LDX; i++) {   /* magnitudes over many binades, a NaN in one block */
    r = r * 1664525u + 1013904223u;
    xf[i] = (float)((int)(r >> 8) % 2001 - 1000) * (float)(1u << (r % 20)) * 1e-6f;
  }
  { uint32_t nan = 0x7fc00001u; memcpy(&xf[LDX + 40], &nan, 4); }
  for (kind = 0; kind < 4; kind++)
    for (f = 0; f < 2; f++)
      for (t = 0; t < 3; t++) {
        amp_dtype fp8 = f ? AMP_E5M2 : AMP_E4M3;
        amp_status a, b;
        amp_convert(x, types[t], xf, AMP_F32, R * LDX);
        memset(q1, 0x5a, sizeof q1); memset(q2, 0x5a, sizeof q2); memset(s1, 0x5a, sizeof s1); memset(s2, 0x5a, sizeof s2);
        a = amp_quantize_blocks(gpu(), (amp_block_scaling)kind, fp8, R, C, x, types[t], LDX, q1, LDQ, s1);
        b = amp_quantize_blocks(amp_cpu(), (amp_block_scaling)kind, fp8, R, C, x, types[t], LDX, q2, LDQ, s2);
        EXPECT(a == AMP_OK && b == AMP_OK, "kind %d %d type %d: %s", kind, f, t, amp_last_error());
        EXPECT(memcmp(q1, q2, sizeof q1) == 0 && memcmp(s1, s2, sizeof s1) == 0, "kind %d fp8 %d type %d: the CUDA line's codes "
               "or scales differ from the CPU's", kind, f, t);
      }
  fake_qblocks_fails = 1;   /* a refused call does not reach the launcher, which would fail */
  EXPECT(amp_quantize_blocks(gpu(), AMP_BLOCK_1x128, AMP_E4M3, R, C, x, AMP_F32, C - 1, q1, LDQ, s1) == AMP_ERR_ARG &&
         strstr(amp_last_error(), "amp_quantize_blocks: ldx 299"), "ldx below cols on the CUDA line: %s", amp_last_error());
  EXPECT(amp_quantize_blocks(gpu(), AMP_BLOCK_1x128, AMP_E4M3, R, C, x, AMP_F32, LDX, q1, LDQ, s1) == AMP_ERR_DEVICE &&
         strstr(amp_last_error(), "amp_quantize_blocks: amp__cu_qblocks_kernel<<<>>> failed"), "a failed launch: %s",
         amp_last_error());
  fake_qblocks_fails = 0;
}

static void every_operation_is_in_both_tables(void) {
  size_t ops = 0;
#define T_CHECK_OP(ret, name, args) ops++; \
  EXPECT(amp__cpu_ops.name != NULL, "the CPU table's %s is NULL", #name); \
  EXPECT(amp__cuda_ops.name != NULL, "the CUDA table's %s is NULL", #name);
  AMP__BACKEND_OPS(T_CHECK_OP)
#undef T_CHECK_OP
  EXPECT(ops >= 23 && (sizeof(amp__backend) - offsetof(amp__backend, sync)) == ops * sizeof(void (*)(void)),
         "amp__backend holds %zu bytes of operations, the list %zu of them", sizeof(amp__backend) - offsetof(amp__backend, sync), ops);
  EXPECT(strcmp(amp__cpu_ops.name, "CPU") == 0 && amp__cpu_ops.host_update == 1 && strcmp(amp__cuda_ops.name, "CUDA") == 0 &&
         amp__cuda_ops.host_update == 0, "names %s/%s, host_update %d/%d", amp__cpu_ops.name, amp__cuda_ops.name,
         amp__cpu_ops.host_update, amp__cuda_ops.host_update);
  EXPECT(amp__cpu_ops.optim_step == amp__cpu_optim_step && amp__cuda_ops.optim_step == amp__cuda_optim_step &&
         amp__cpu_ops.gemm == amp__cpu_gemm && amp__cuda_ops.gemm == amp__cuda_gemm, "a slot holds another operation");
}

/* A checkpoint load takes the step count and the spike state from the file and forgets the device's
   last decision: an overflow the CUDA line found before the load is not reported after it (stats
   on: no overflow line at the first read, as on the CPU, whose load clears its found_inf too). */
static void a_checkpoint_load_forgets_the_last_overflow_on_the_cuda_line(void) {
  amp_optim_config c;
  rig a, b;
  int step;
  memset(&c, 0, sizeof c); c.kind = AMP_OPTIM_ADAM; c.lr = 1e-2f; c.stats = 1;
  if (!rig_make(&a, amp_cpu(), &c) || !rig_make(&b, gpu(), &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  for (step = 0; step < 3; step++) {   /* a: clean steps, saved */
    rig_grads(&a, step);
    EXPECT(amp_scaler_step(a.s, a.o) == AMP_OK && amp_scaler_update(a.s) == AMP_OK, "step: %s", amp_last_error());
  }
  EXPECT(amp_checkpoint_save(CKPT, a.o, a.s) == AMP_OK, "save: %s", amp_last_error());
  for (step = 0; step < 4; step++) {   /* b: its last step (3) overflows, and nothing reads b.o after it */
    rig_grads(&b, step);
    EXPECT(amp_scaler_step(b.s, b.o) == AMP_OK && amp_scaler_update(b.s) == AMP_OK, "step: %s", amp_last_error());
  }
  line_n = 0;
  amp_set_log(line_catch, NULL);
  EXPECT(amp_checkpoint_load(CKPT, b.o, b.s) == AMP_OK, "load: %s", amp_last_error());
  line_n = 0;   /* what the load itself logged belongs to before it */
  EXPECT(amp_optimizer_step_count(b.o) == 3 && amp_optimizer_last_skipped(b.o) == 0,
         "after the load: steps %ld (want 3), last skipped %d (want 0)", amp_optimizer_step_count(b.o),
         amp_optimizer_last_skipped(b.o));
  amp_set_log(NULL, NULL);
  EXPECT(line_n == 0, "after the load: %d lines logged, the first '%s' (an overflow from before the load)", line_n,
         line_n > 0 ? line_log[0] : "");
  rig_free(&a); rig_free(&b);
  remove(CKPT);
}

/* A replayed CUDA graph runs the unscale again without the host's bookkeeping: the overflow line is
   keyed to the device's own count of unscale passes, so a replay's overflow is logged at the next
   read, once. (Simulated: the emulated unscale called as a replay would run it.) */
static void a_replayed_overflow_is_logged_on_the_cuda_line(void) {
  amp_optim_config c;
  rig b;
  char m[256] = "";
  int step;
  memset(&c, 0, sizeof c); c.kind = AMP_OPTIM_ADAM; c.lr = 1e-2f; c.stats = 1;
  if (!rig_make(&b, gpu(), &c)) { EXPECT(0, "setup: %s", amp_last_error()); return; }
  line_n = 0;
  amp_set_log(line_catch, NULL);
  for (step = 0; step < 4; step++) {   /* step 3 overflows */
    rig_grads(&b, step);
    EXPECT(amp_scaler_step(b.s, b.o) == AMP_OK && amp_scaler_update(b.s) == AMP_OK, "step: %s", amp_last_error());
  }
  (void)amp_optimizer_grad_norm(b.o);
  EXPECT(line_n == 1, "step 3's overflow: %d lines (want 1)", line_n);
  line_n = 0;
  EXPECT(amp__cu_optim_unscale(b.o->dev->cuda, b.o->cu, b.s->cu, m, sizeof m) == AMP_OK, "replay: %s", m);
  (void)amp_optimizer_grad_norm(b.o);
  (void)amp_optimizer_grad_norm(b.o);
  amp_set_log(NULL, NULL);
  EXPECT(line_n == 1 && strstr(line_log[0], "overflow in tensor 0"), "the replay's overflow: %d lines (want 1), '%s'", line_n,
         line_n > 0 ? line_log[0] : "");
  rig_free(&b);
}

int main(void) {
  RUN(every_operation_is_in_both_tables);
  RUN(the_scales_cublaslt_reads_are_amp_quantize_blocks_relaid);
  RUN(a_run_on_the_cuda_line_gives_the_cpus_bits);
  RUN(a_checkpoint_moves_between_the_cpu_and_the_cuda_line);
  RUN(a_checkpoint_load_forgets_the_last_overflow_on_the_cuda_line);
  RUN(a_replayed_overflow_is_logged_on_the_cuda_line);
  RUN(the_cuda_line_takes_the_master_at_add);
  RUN(groups_on_the_cuda_line_give_the_cpus_bits);
  RUN(a_failed_read_in_a_getter_comes_back_from_the_next_update);
  RUN(the_cuda_line_refuses_what_it_cannot_run);
  RUN(amp_optimizer_step_on_the_cuda_line_gives_the_cpus_bits);
  RUN(a_failed_last_skipped_read_comes_back_from_the_next_step);
  RUN(gradient_stats_on_the_cuda_line_equal_the_cpus);
  RUN(spikes_on_the_cuda_line_equal_the_cpus);
  RUN(master_modes_on_the_cuda_line_give_the_cpus_bits);
  RUN(bf16_moments_on_the_cuda_line_give_the_cpus_bits);
  RUN(eight_bit_code_lookup_is_the_bisection);
  RUN(eight_bit_moments_on_the_cuda_line_give_the_cpus_bits);
  RUN(fp8_moments_on_the_cuda_line_give_the_cpus_bits);
  RUN(grads_set_after_the_device_optimizer_is_built_give_the_cpus_bits);
  RUN(mixed_types_on_the_cuda_line_are_widened_first);
  RUN(the_fp8_scaler_on_the_cuda_line_equals_the_cpus);
  RUN(block_scaling_on_the_cuda_line_gives_the_cpus_bits);
  RUN(fp8_products_on_the_cuda_line_give_the_cpus_bits);
  RUN(block_scaled_fp8_products_on_the_cuda_line_give_the_cpus_bits);
  amp_device_close(gpu());
  TEST_END();
}
