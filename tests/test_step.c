/* tests/test_step.c - amp_optimizer_step (the step without a scaler) and the zero rule of the
   configs (zero_is_zero, amp_optimizer_defaults; fixed scaling needs its init_scale).
   The scaler-less step is checked against a scaler fixed at 1 (the same bits), against
   torch.optim (Debian's python3-torch, run as /usr/bin/python3, or $AMP_PYTHON), and for skipped
   steps bit for bit. Zeros: Adam with beta1 = 0 and an optimizer created with lr = 0 against
   torch.optim; illegal values refused with a message naming the function and the value. */
#define _POSIX_C_SOURCE 200809L   /* popen */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <float.h>
#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(rng_state >> 33); }
static double rndu(void) { return ((double)rnd() + 0.5) / 2147483648.0; }
static float rndn(void) { return (float)(sqrt(-2.0 * log(rndu())) * cos(6.283185307179586 * rndu())); }

static void store(void *p, amp_dtype t, size_t i, float x) {
  if (t == AMP_F16) ((amp_f16 *)p)[i] = amp_f32_to_f16(x);
  else if (t == AMP_BF16) ((amp_bf16 *)p)[i] = amp_f32_to_bf16(x);
  else ((float *)p)[i] = x;
}
/* inf or NaN, on the bits (the -Ofast build folds isfinite) */
static int nonfinite(float x) { uint32_t u; memcpy(&u, &x, 4); return (u & 0x7f800000u) == 0x7f800000u; }
static const char *tname(amp_dtype t) { return t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : "f32"; }
static const char *kname(amp_optim_kind k) { return k == AMP_SGD ? "SGD" : k == AMP_ADAM ? "Adam" : k == AMP_LION ? "Lion" : "AdamW"; }

/* ---- the same bits as a scaler fixed at 1 ------------------------------------------------------- */

/* Two optimizers on copies of the same weights and grads: one stepped by amp_optimizer_step, one
   by a scaler with fixed = 1, init_scale = 1 (the bf16 recipe before amp_optimizer_step). Every
   byte must agree after every step, and so must the grad norm. The first runs the CPU's vector
   loops (AVX2/AVX-512, NEON on AArch64), the second the plain loops (amp__opt_simd = 0): the
   same bits too. */
static void step_equals_a_scaler_fixed_at_1(void) {
  enum { N0 = 37, N1 = 300, N = N0 + N1 };
  amp_optim_kind kinds[4] = {AMP_SGD, AMP_ADAM, AMP_ADAMW, AMP_LION};
  amp_dtype wts[3] = {AMP_BF16, AMP_F32, AMP_F16};
  static unsigned char a[N * 20 + 64], b[N * 20 + 64];
  int k, d, s, steps = t_quick() ? 5 : 25;
  for (k = 0; k < 4; k++)
    for (d = 0; d < 3; d++) {
      amp_dtype wt = wts[d], gt = wts[(d + k) % 3];   /* mixed grad types too */
      static float wa[N], wb[N], g[N];                /* sized for f32; f16/bf16 use the front half */
      amp_optimizer *oa, *ob; amp_scaler *sc;
      amp_scaler_config scfg; amp_optim_config c = amp_optimizer_defaults(kinds[k]);
      size_t i, na, nb;
      float na_norm, nb_norm;
      c.lr = 0.01f; c.weight_decay = 0.02f; c.max_grad_norm = 3.0f;
      if (kinds[k] == AMP_SGD) c.momentum = 0.9f;
      memset(&scfg, 0, sizeof scfg); scfg.fixed = 1; scfg.init_scale = 1.0f;
      rng_state = 77 + (uint64_t)(k * 3 + d);
      for (i = 0; i < N; i++) store(wa, wt, i, rndn());
      memcpy(wb, wa, sizeof wa);
      amp_optimizer_create(&oa, amp_cpu(), &c); amp_optimizer_create(&ob, amp_cpu(), &c);
      amp_scaler_create(&sc, amp_cpu(), &scfg);
      amp_optimizer_add_mixed(oa, wt, wa, gt, g, N0);
      amp_optimizer_add_mixed(oa, wt, (char *)wa + N0 * amp_dtype_size(wt), gt, (char *)g + N0 * amp_dtype_size(gt), N1);
      amp_optimizer_add_mixed(ob, wt, wb, gt, g, N0);
      amp_optimizer_add_mixed(ob, wt, (char *)wb + N0 * amp_dtype_size(wt), gt, (char *)g + N0 * amp_dtype_size(gt), N1);
      for (s = 0; s < steps; s++) {
        amp_status sa, sb;
        for (i = 0; i < N; i++) store(g, gt, i, rndn() * (s % 4 == 1 ? 1.0f : 0.1f));   /* some steps clip */
        sa = amp_optimizer_step(oa);
        amp__opt_simd = 0;   /* the plain loops */
        sb = amp_scaler_step(sc, ob); amp_scaler_update(sc);
        amp__opt_simd = -1;
        EXPECT(sa == AMP_OK && sb == AMP_OK, "%s %s/%s step %d: %s", kname(kinds[k]), tname(wt), tname(gt), s, amp_last_error());
        na_norm = amp_optimizer_grad_norm(oa); nb_norm = amp_optimizer_grad_norm(ob);
        na = t_optim_snapshot(oa, a); nb = t_optim_snapshot(ob, b);
        EXPECT(na == nb && memcmp(a, b, na) == 0, "%s w %s g %s step %d: amp_optimizer_step differs from a scaler fixed at 1",
               kname(kinds[k]), tname(wt), tname(gt), s);
        EXPECT(memcmp(&na_norm, &nb_norm, 4) == 0, "step %d: grad norm %.9g, with the scaler %.9g", s, (double)na_norm, (double)nb_norm);
        EXPECT(amp_optimizer_last_skipped(oa) == 0, "step %d: a clean step reported skipped", s);
        if (t__cur) break;
      }
      EXPECT(amp_optimizer_step_count(oa) == steps, "step count %ld, expected %d", amp_optimizer_step_count(oa), steps);
      amp_optimizer_destroy(oa); amp_optimizer_destroy(ob); amp_scaler_destroy(sc);
    }
}

/* ---- a skipped step changes nothing ------------------------------------------------------------- */

/* inf, -inf or NaN in one grad (each grad type, first and second tensor, with clipping and
   decay on): every byte of masters, moments, model copies and the step count stays; last_skipped
   says 1, grad_norm is not finite; the next clean step is applied, and the whole run equals a run
   that never saw the bad steps. */
static void skipped_step_changes_nothing(void) {
  enum { N0 = 100, N1 = 157, N = N0 + N1 };
  amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
  amp_dtype gts[3] = {AMP_BF16, AMP_F32, AMP_F16};
  static unsigned char before[N * 20 + 64], after[N * 20 + 64];
  int k, d, steps = t_quick() ? 12 : 40;
  for (k = 0; k < 3; k++)
    for (d = 0; d < 3; d++) {
      amp_dtype gt = gts[d];
      amp_bf16 wa[N], wb[N];
      static float g[N];
      amp_optimizer *oa, *ob;
      amp_optim_config c = amp_optimizer_defaults(kinds[k]);
      int s, nskip = 0;
      size_t i;
      c.lr = 0.01f; c.weight_decay = 0.1f; c.max_grad_norm = 1.0f;
      if (kinds[k] == AMP_SGD) { c.momentum = 0.9f; c.nesterov = 1; }
      rng_state = 1000 + (uint64_t)(k * 3 + d);
      for (i = 0; i < N; i++) wa[i] = amp_f32_to_bf16(rndn());
      memcpy(wb, wa, sizeof wa);
      amp_optimizer_create(&oa, amp_cpu(), &c); amp_optimizer_create(&ob, amp_cpu(), &c);
      amp_optimizer_add_mixed(oa, AMP_BF16, wa, gt, g, N0);
      amp_optimizer_add_mixed(oa, AMP_BF16, wa + N0, gt, (char *)g + N0 * amp_dtype_size(gt), N1);
      amp_optimizer_add_mixed(ob, AMP_BF16, wb, gt, g, N0);
      amp_optimizer_add_mixed(ob, AMP_BF16, wb + N0, gt, (char *)g + N0 * amp_dtype_size(gt), N1);
      for (s = 0; s < steps; s++) {
        int bad = s % 5 == 3;
        for (i = 0; i < N; i++) store(g, gt, i, rndn() * 0.3f);
        if (bad) {
          size_t where = rnd() % N;
          uint32_t kind = rnd() % 3;
          float x = kind == 0 ? INFINITY : kind == 1 ? -INFINITY : NAN;
          long count = amp_optimizer_step_count(oa);
          size_t nb, na;
          store(g, gt, where, x);
          nb = t_optim_snapshot(oa, before);
          EXPECT(amp_optimizer_step(oa) == AMP_OK, "%s", amp_last_error());
          na = t_optim_snapshot(oa, after);
          EXPECT(na == nb && memcmp(before, after, na) == 0, "%s, %s grads, %s at %zu: the skipped step changed the state",
                 kname(kinds[k]), tname(gt), kind == 0 ? "+inf" : kind == 1 ? "-inf" : "NaN", where);
          EXPECT(amp_optimizer_last_skipped(oa) == 1, "%s at %zu: last_skipped %d", tname(gt), where, amp_optimizer_last_skipped(oa));
          EXPECT(amp_optimizer_step_count(oa) == count, "step count %ld, was %ld", amp_optimizer_step_count(oa), count);
          EXPECT(nonfinite(amp_optimizer_grad_norm(oa)), "grad norm %g with inf/NaN grads", (double)amp_optimizer_grad_norm(oa));
          nskip++;
          continue;   /* the other run never sees this step */
        }
        EXPECT(amp_optimizer_step(oa) == AMP_OK && amp_optimizer_step(ob) == AMP_OK, "%s", amp_last_error());
        EXPECT(amp_optimizer_last_skipped(oa) == 0, "step %d: a clean step after a skip reported skipped", s);
      }
      EXPECT(nskip == steps / 5, "%d bad steps", nskip);
      EXPECT(memcmp(wa, wb, sizeof wa) == 0 && memcmp(oa->t[1].master, ob->t[1].master, N1 * 4) == 0,
             "%s, %s grads: the run with %d skipped steps differs from the run without them", kname(kinds[k]), tname(gt), nskip);
      EXPECT(amp_optimizer_step_count(oa) == amp_optimizer_step_count(ob), "step counts %ld and %ld",
             amp_optimizer_step_count(oa), amp_optimizer_step_count(ob));
      amp_optimizer_destroy(oa); amp_optimizer_destroy(ob);
    }
}

/* ---- torch.optim ------------------------------------------------------------------------------ */

/* The torch comparisons are batched: each case runs amp.h at once and appends its torch program
   (a function of its own) to one script; the last test runs python3 once (Debian's
   python3-torch: /usr/bin/python3, or $AMP_PYTHON) and compares every case. */
enum { TN0 = 19, TN1 = 45, TN = TN0 + TN1, MAX_CASES = 16 };
typedef struct {
  char what[96];
  int nm;                  /* moments compared: 0, 1 (exp_avg or momentum_buffer), 2 */
  float mine[3 * TN];      /* amp.h: masters, then m, then v */
  double tol;              /* |amp.h - torch| <= tol * max |torch| over that buffer */
} torch_case_t;
static torch_case_t cases[MAX_CASES];
static int n_cases;
static const char *script_path = "build/test/step_torch.py";
static FILE *script;

static void py_floats(FILE *f, const char *name, const float *x, size_t n) {
  size_t i;
  fprintf(f, "    %s = [", name);
  for (i = 0; i < n; i++) fprintf(f, "float.fromhex('%a'),", (double)x[i]);
  fprintf(f, "]\n");
}

/* The torch program of one case: f32 weights w0 (two tensors, TN0 and TN1 elements), the grads of
   `steps` steps (a step whose grads hold inf/NaN is left out, as amp_optimizer_step skips it),
   torch.optim with the same config and clip_grad_norm_ over both tensors when max_grad_norm > 0;
   prints "case k", then the weights, exp_avg / momentum_buffer and exp_avg_sq as float.hex. */
static void torch_script(int k, const amp_optim_config *c, const float *w0, const float *g, int steps) {
  FILE *f = script;
  fprintf(f, "def case%d():\n", k);
  py_floats(f, "w0", w0, TN);
  py_floats(f, "gs", g, (size_t)TN * (size_t)steps);
  fprintf(f, "    n, n0 = %d, %d\n", TN, TN0);
  fprintf(f, "    ps = [torch.tensor(w0[:n0], dtype=torch.float32, requires_grad=True), "
             "torch.tensor(w0[n0:], dtype=torch.float32, requires_grad=True)]\n");
  fprintf(f, "    lr, wd = float.fromhex('%a'), float.fromhex('%a')\n", (double)c->lr, (double)c->weight_decay);
  if (c->kind == AMP_SGD)
    fprintf(f, "    opt = torch.optim.SGD(ps, lr=lr, momentum=float.fromhex('%a'), dampening=float.fromhex('%a'), "
               "nesterov=%s, weight_decay=wd, foreach=False)\n", (double)c->momentum, (double)c->dampening,
            c->nesterov ? "True" : "False");
  else
    fprintf(f, "    opt = torch.optim.%s(ps, lr=lr, betas=(float.fromhex('%a'), float.fromhex('%a')), eps=float.fromhex('%a'), "
               "weight_decay=wd, foreach=False)\n", c->kind == AMP_ADAM ? "Adam" : "AdamW",
            (double)c->beta1, (double)c->beta2, (double)c->eps);
  fprintf(f, "    for s in range(%d):\n"
             "        g = gs[s * n:(s + 1) * n]\n"
             "        if not all(math.isfinite(x) for x in g): continue\n"
             "        ps[0].grad = torch.tensor(g[:n0], dtype=torch.float32)\n"
             "        ps[1].grad = torch.tensor(g[n0:], dtype=torch.float32)\n", steps);
  if (c->max_grad_norm > 0.0f) fprintf(f, "        torch.nn.utils.clip_grad_norm_(ps, float.fromhex('%a'))\n", (double)c->max_grad_norm);
  fprintf(f, "        opt.step()\n"
             "    out = [x for p in ps for x in p.detach().tolist()]\n"
             "    for key in ('exp_avg', 'exp_avg_sq', 'momentum_buffer'):\n"
             "        if key in opt.state[ps[0]]:\n"
             "            out += [x for p in ps for x in opt.state[p][key].tolist()]\n"
             "    print('case %d'); print('\\n'.join(float(x).hex() for x in out))\n"
             "case%d()\n", k, k);
}

/* One case: amp_optimizer_step over `steps` steps of f32 weights (two tensors), config c; the
   same steps go into the torch script. with_bad puts a NaN and an inf into two steps' grads
   (both skipped). tol: see torch_case_t. p_out (TN floats) gets amp.h's masters. */
static void torch_case(const char *what, amp_optim_config c, int steps, int with_bad, double tol, float *p_out) {
  static float w[TN], w0[TN], g[64 * TN], gbuf[TN];
  torch_case_t *tc;
  amp_optimizer *o;
  int s, j;
  size_t i;
  if (n_cases == MAX_CASES || steps > 64) { EXPECT(0, "%s: too many torch cases", what); return; }
  if (!script) {
    script = fopen(script_path, "w");
    if (!script) { EXPECT(0, "cannot write %s", script_path); return; }
    fprintf(script, "import math, torch\ntorch.set_num_threads(1)\n");
  }
  tc = &cases[n_cases];
  rng_state = 4242;
  for (i = 0; i < TN; i++) w0[i] = w[i] = rndn();
  for (s = 0; s < steps; s++)
    for (i = 0; i < TN; i++) g[(size_t)s * TN + i] = rndn() * (s % 3 == 0 ? 2.0f : 0.2f);
  if (with_bad) { g[(size_t)(steps / 2) * TN + 7] = NAN; g[(size_t)(steps / 2 + 2) * TN + TN0 + 3] = INFINITY; }
  if (amp_optimizer_create(&o, amp_cpu(), &c) != AMP_OK) { EXPECT(0, "%s: create: %s", what, amp_last_error()); return; }
  amp_optimizer_add(o, AMP_F32, w, gbuf, TN0); amp_optimizer_add(o, AMP_F32, w + TN0, gbuf + TN0, TN1);
  for (s = 0; s < steps; s++) {
    memcpy(gbuf, g + (size_t)s * TN, sizeof gbuf);
    EXPECT(amp_optimizer_step(o) == AMP_OK, "%s: %s", what, amp_last_error());
    EXPECT(amp_optimizer_last_skipped(o) == (with_bad && (s == steps / 2 || s == steps / 2 + 2)), "%s step %d: last_skipped %d",
           what, s, amp_optimizer_last_skipped(o));
  }
  snprintf(tc->what, sizeof tc->what, "%s", what);
  tc->nm = c.kind == AMP_SGD ? (c.momentum != 0.0f) : 2;
  tc->tol = tol;
  for (j = 0; j <= tc->nm; j++) {
    memcpy(tc->mine + j * TN, j == 0 ? o->t[0].master : j == 1 ? o->t[0].m : o->t[0].v, TN0 * 4);
    memcpy(tc->mine + j * TN + TN0, j == 0 ? o->t[1].master : j == 1 ? o->t[1].m : o->t[1].v, TN1 * 4);
  }
  if (p_out) memcpy(p_out, tc->mine, TN * 4);
  torch_script(n_cases, &c, w0, g, steps);
  n_cases++;
  amp_optimizer_destroy(o);
}

/* The clip coefficient against torch.nn.utils.clip_grad_norm_'s own expression, evaluated by torch
   for 300 (norm, max_norm) pairs over many decades: clamp(max_norm / (total_norm + 1e-6), max=1),
   a Python float over a float32 tensor (Tensor.__rtruediv__: reciprocal, then the product). The
   bits of amp__clip_coef, which the step applies. */
static void clip_coef_is_torchs(void) {
  enum { NC = 300 };
  static float nv[NC], mv[NC];
  const char *path = "build/test/step_clip.py";
  char cmd[600], args[300], line[128];
  FILE *f = fopen(path, "w");
  int i, got = 0, bad = 0;
  if (!f) { EXPECT(0, "cannot write %s", path); return; }
  rng_state = 31337;
  fprintf(f, "import torch\nfor n, m in [");
  for (i = 0; i < NC; i++) {
    nv[i] = (float)ldexp(1.0 + rndu(), (int)(rnd() % 60) - 30);
    mv[i] = (float)ldexp(1.0 + rndu(), (int)(rnd() % 60) - 30);
    if (i % 5 == 0) mv[i] = nv[i] * (float)(0.5 + rndu());   /* near 1: the clamp */
    fprintf(f, "('%a','%a'),", (double)nv[i], (double)mv[i]);
  }
  fprintf(f, "]:\n    t = torch.tensor(float.fromhex(n), dtype=torch.float32)\n"
             "    c = torch.clamp(float.fromhex(m) / (t + 1e-6), max=1.0)\n    print(float(c).hex())\n");
  fclose(f);
  snprintf(args, sizeof args, "'%s' 2>&1", path);
  t_torch_cmd(cmd, sizeof cmd, args);
  f = popen(cmd, "r");
  if (!f) { EXPECT(0, "popen failed"); return; }
  while (fgets(line, sizeof line, f)) {
    float want, have;
    if (!strncmp(line, "missing", 7)) { EXPECT(0, "python3 with torch not found (a test dependency: tests/deps.sh)"); break; }
    if (got >= NC) { EXPECT(0, "unexpected output from torch: %s", line); break; }
    want = (float)strtod(line, NULL);
    have = amp__clip_coef(nv[got], mv[got]);
    if (memcmp(&want, &have, 4) && bad++ < 5)
      EXPECT(0, "norm %a, max_norm %a: amp.h's coefficient %a, torch's %a", (double)nv[got], (double)mv[got], (double)have,
             (double)want);
    got++;
  }
  pclose(f);
  EXPECT(got == NC && bad == 0, "torch gave %d of %d coefficients, %d differ", got, NC, bad);
  remove(path);
}

/* Runs the script and compares every case. */
static void torch_agrees_on_every_case(void) {
  char cmd[600], line[128];
  FILE *f;
  int k = -1, idx = 0, j, seen = 0;
  static float theirs[MAX_CASES][3 * TN];
  static int count[MAX_CASES];
  if (!script) { EXPECT(0, "no torch case was recorded"); return; }
  fclose(script); script = NULL;
  char args[300];
  snprintf(args, sizeof args, "'%s' 2>&1", script_path);
  /* ATen's scalar kernels: its AVX2 and AVX-512 ones fuse add(x, alpha=a) into an FMA, which
     amp.h's element functions (every operation rounded on its own) do not */
  {
    static const char env[] = "ATEN_CPU_CAPABILITY=default; export ATEN_CPU_CAPABILITY; ";
    memcpy(cmd, env, sizeof env - 1);
    t_torch_cmd(cmd + sizeof env - 1, sizeof cmd - (sizeof env - 1), args);
  }
  f = popen(cmd, "r");
  EXPECT(f != NULL, "popen failed");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "missing", 7)) { EXPECT(0, "python3 with torch not found (a test dependency: tests/deps.sh)"); break; }
    if (!strncmp(line, "case ", 5)) { k = atoi(line + 5); idx = 0; seen++; continue; }
    if (k < 0 || k >= n_cases || idx >= 3 * TN) { EXPECT(0, "unexpected output from torch: %s", line); continue; }
    theirs[k][idx++] = (float)strtod(line, NULL);
    count[k] = idx;
  }
  pclose(f);
  EXPECT(seen == n_cases, "torch ran %d of %d cases", seen, n_cases);
  for (k = 0; k < n_cases; k++) {
    const torch_case_t *tc = &cases[k];
    double worst = 0.0;
    if (count[k] != (1 + tc->nm) * TN) { EXPECT(0, "%s: torch printed %d numbers, expected %d", tc->what, count[k], (1 + tc->nm) * TN); continue; }
    for (j = 0; j <= tc->nm; j++) {
      double scale = 0.0, d;
      int i;
      for (i = 0; i < TN; i++) if (fabs(theirs[k][j * TN + i]) > scale) scale = fabs(theirs[k][j * TN + i]);
      for (i = 0; i < TN; i++) {
        float a = tc->mine[j * TN + i], b = theirs[k][j * TN + i];
        d = fabs((double)a - (double)b) / (scale > 0.0 ? scale : 1.0);
        if (nonfinite(a) || nonfinite(b) || !(d <= tc->tol)) {
          EXPECT(0, "%s: %s[%d] amp.h %.9g, torch %.9g (difference %.2g of the buffer's largest %.3g, allowed %.2g)", tc->what,
                 j == 0 ? "weight" : j == 1 ? (tc->nm == 1 ? "momentum_buffer" : "exp_avg") : "exp_avg_sq", i,
                 (double)a, (double)b, d, scale, tc->tol);
          d = INFINITY;
        }
        if (d > worst) worst = d;
      }
    }
    printf("  %-48s largest difference from torch.optim: %.2g of the buffer's largest value\n", tc->what, worst);
  }
  remove(script_path);
}

/* amp_optimizer_step with clipping (global norm over both tensors) against torch.optim with
   clip_grad_norm_, with two steps of inf/NaN grads that both skip. A clipped step differs from
   torch by the norm's summation order (amp.h sums in double, torch in float): a few 1e-7 of the
   buffer's scale over 12 steps. Without clipping, the bits. */
static void step_cases_for_torch(void) {
  amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
  int k;
  for (k = 0; k < 3; k++) {
    char what[80];
    amp_optim_config c = amp_optimizer_defaults(kinds[k]);
    c.lr = 0.01f; c.weight_decay = 0.05f; c.max_grad_norm = 2.0f;
    if (kinds[k] == AMP_SGD) { c.momentum = 0.9f; c.dampening = 0.1f; }
    snprintf(what, sizeof what, "%s, clip 2, 2 inf/NaN steps", kname(kinds[k]));
    torch_case(what, c, 12, 1, 2e-6, NULL);
    /* without clipping nothing is summed: bit for bit (PyTorch's order of operations in every
       element function, its ATen kernels without FMA), SGD also with nesterov */
    c.max_grad_norm = 0.0f;
    snprintf(what, sizeof what, "%s, wd 0.05, 2 inf/NaN steps (bits)", kname(kinds[k]));
    torch_case(what, c, 12, 1, 0.0, NULL);
    if (kinds[k] == AMP_SGD) {
      c.dampening = 0.0f; c.nesterov = 1;
      torch_case("SGD nesterov, wd 0.05 (bits)", c, 12, 0, 0.0, NULL);
    }
  }
}

/* Adam with beta1 = 0 (written through amp_optimizer_defaults: 0 is 0) against
   torch.optim.Adam(betas=(0, 0.999)); it differs from the default beta1 0.9. */
static void adam_beta1_zero_cases_for_torch(void) {
  float p0[TN], p9[TN];
  size_t i;
  int differ = 0;
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAM);
  amp_optimizer *o;
  c.lr = 0.01f; c.beta1 = 0.0f;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK && o->cfg.beta1 == 0.0f, "beta1 resolved to %g", (double)o->cfg.beta1);
  amp_optimizer_destroy(o);
  torch_case("Adam betas (0, 0.999)", c, 10, 0, 0.0, p0);
  c.beta1 = 0.9f;
  torch_case("Adam betas (0.9, 0.999)", c, 10, 0, 0.0, p9);
  for (i = 0; i < TN; i++) differ += p0[i] != p9[i];
  EXPECT(differ > TN / 2, "beta1 0 and 0.9 gave the same weights at %d of %d places", TN - differ, TN);
  c.beta1 = 0.0f; c.beta2 = 0.0f;   /* beta2 = 0 too: v = g^2, no bias correction left */
  torch_case("Adam betas (0, 0)", c, 6, 0, 0.0, NULL);
}

/* lr 0 at create (zero_is_zero): the masters stay bit for bit, the moments advance (as torch's
   with lr=0: the torch cases), the step count advances. */
static void lr_zero_keeps_the_masters_and_advances_the_moments(void) {
  amp_optim_kind kinds[3] = {AMP_SGD, AMP_ADAM, AMP_ADAMW};
  int k;
  for (k = 0; k < 3; k++) {
    enum { N = 40 };
    float w[N], w0[N], g[N];
    amp_optimizer *o;
    char what[64];
    int s;
    size_t i;
    amp_optim_config c = amp_optimizer_defaults(kinds[k]);
    c.lr = 0.0f; c.weight_decay = 0.1f;
    if (kinds[k] == AMP_SGD) c.momentum = 0.5f;
    EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "%s", amp_last_error());
    EXPECT(o->cfg.lr == 0.0f, "%s: lr resolved to %g", kname(kinds[k]), (double)o->cfg.lr);
    rng_state = 99;
    for (i = 0; i < N; i++) w0[i] = w[i] = rndn();
    amp_optimizer_add(o, AMP_F32, w, g, N);
    for (s = 0; s < 5; s++) {
      for (i = 0; i < N; i++) g[i] = rndn();
      amp_optimizer_step(o);
    }
    EXPECT(memcmp(w, w0, sizeof w) == 0 && memcmp(o->t[0].master, w0, sizeof w0) == 0, "%s lr 0: the weights moved", kname(kinds[k]));
    EXPECT(amp_optimizer_step_count(o) == 5, "%s lr 0: step count %ld", kname(kinds[k]), amp_optimizer_step_count(o));
    EXPECT(o->t[0].m && o->t[0].m[0] != 0.0f, "%s lr 0: the moments did not advance", kname(kinds[k]));
    amp_optimizer_destroy(o);
    snprintf(what, sizeof what, "%s lr 0", kname(kinds[k]));
    torch_case(what, c, 5, 0, 0.0, NULL);   /* weights (unchanged in torch too) and moments */
  }
}

/* ---- the zero rule and illegal values ------------------------------------------------------- */

static int msg_has(const char *a, const char *b) { return strstr(amp_last_error(), a) && (!b || strstr(amp_last_error(), b)); }

static void zeros_mean_defaults_unless_zero_is_zero(void) {
  amp_optimizer *o = NULL;
  amp_optim_config c, d = amp_optimizer_defaults(AMP_ADAMW);
  memset(&c, 0, sizeof c);
  c.kind = AMP_ADAMW;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK, "%s", amp_last_error());
  EXPECT(o->cfg.lr == 1e-3f && o->cfg.beta1 == 0.9f && o->cfg.beta2 == 0.999f && o->cfg.eps == 1e-8f,
         "zero-initialised: lr %g beta1 %g beta2 %g eps %g", (double)o->cfg.lr, (double)o->cfg.beta1, (double)o->cfg.beta2, (double)o->cfg.eps);
  amp_optimizer_destroy(o);
  EXPECT(d.kind == AMP_ADAMW && d.lr == 1e-3f && d.beta1 == 0.9f && d.beta2 == 0.999f && d.eps == 1e-8f && d.zero_is_zero &&
         d.weight_decay == 0.0f && d.momentum == 0.0f && d.max_grad_norm == 0.0f,
         "amp_optimizer_defaults: lr %g beta1 %g beta2 %g eps %g zero_is_zero %d", (double)d.lr, (double)d.beta1,
         (double)d.beta2, (double)d.eps, d.zero_is_zero);
  /* the defaults config and the zero config resolve to the same optimizer */
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &d) == AMP_OK && o->cfg.lr == 1e-3f && o->cfg.beta1 == 0.9f, "%s", amp_last_error());
  amp_optimizer_destroy(o);
  /* -0.0f is 0: a default without zero_is_zero, a +0 with it */
  c.beta1 = -0.0f; c.lr = -0.0f;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK && o->cfg.beta1 == 0.9f && o->cfg.lr == 1e-3f,
         "-0 without zero_is_zero: beta1 %g lr %g", o ? (double)o->cfg.beta1 : -1.0, o ? (double)o->cfg.lr : -1.0);
  amp_optimizer_destroy(o); o = NULL;
  d.beta1 = -0.0f; d.lr = -0.0f;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &d) == AMP_OK, "%s", amp_last_error());
  if (o) {
    uint32_t b1, lr;
    memcpy(&b1, &o->cfg.beta1, 4); memcpy(&lr, &o->cfg.lr, 4);
    EXPECT(b1 == 0u && lr == 0u, "-0 with zero_is_zero: beta1 bits %08x lr bits %08x (expected +0)", (unsigned)b1, (unsigned)lr);
  }
  amp_optimizer_destroy(o);
  /* SGD does not read eps: 0 is kept there */
  d = amp_optimizer_defaults(AMP_SGD); d.eps = 0.0f; d.lr = 0.1f;
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &d) == AMP_OK, "SGD with eps 0: %s", amp_last_error());
  amp_optimizer_destroy(o);
  /* set_lr: 0 and -0 are lr 0 */
  amp_optimizer_create(&o, amp_cpu(), NULL);
  EXPECT(amp_optimizer_set_lr(o, -0.0f) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_optimizer_set_lr(o, 0.0f) == AMP_OK && o->cfg.lr == 0.0f, "set_lr 0: lr %g", (double)o->cfg.lr);
  amp_optimizer_destroy(o);
}

static void illegal_values_are_refused_by_name(void) {
  struct { const char *field; float value; const char *want; } cases[] = {
    {"eps", 0.0f, "eps 0"}, {"eps", -1e-8f, "eps -1e-08"}, {"lr", -0.5f, "lr -0.5"}, {"beta1", 1.0f, "beta1 1"},
    {"beta2", -0.25f, "beta2 -0.25"}, {"momentum", -1.0f, "momentum -1"}, {"dampening", 2.0f, "dampening 2"},
    {"weight_decay", NAN, "weight_decay nan"}, {"max_grad_norm", -1.0f, "max_grad_norm -1"}, {"lr", INFINITY, "lr inf"},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    amp_optimizer *o = (amp_optimizer *)&cases;   /* create must set it to NULL */
    amp_optim_config c = amp_optimizer_defaults(AMP_ADAM);
    float *f = !strcmp(cases[i].field, "eps") ? &c.eps : !strcmp(cases[i].field, "lr") ? &c.lr
             : !strcmp(cases[i].field, "beta1") ? &c.beta1 : !strcmp(cases[i].field, "beta2") ? &c.beta2
             : !strcmp(cases[i].field, "momentum") ? &c.momentum : !strcmp(cases[i].field, "dampening") ? &c.dampening
             : !strcmp(cases[i].field, "weight_decay") ? &c.weight_decay : &c.max_grad_norm;
    amp_status st;
    *f = cases[i].value;
    st = amp_optimizer_create(&o, amp_cpu(), &c);
    EXPECT(st == AMP_ERR_ARG && o == NULL && msg_has("amp_optimizer_create", cases[i].want),
           "%s = %g with zero_is_zero: status %s, message '%s' (expected AMP_ERR_ARG naming '%s')", cases[i].field,
           (double)cases[i].value, amp_status_string(st), amp_last_error(), cases[i].want);
    if (st == AMP_OK) amp_optimizer_destroy(o);
  }
  {   /* fixed scaling with no init_scale: refused, naming both fields */
    amp_scaler *s = NULL;
    amp_scaler_config sc;
    amp_status st;
    memset(&sc, 0, sizeof sc); sc.fixed = 1;
    st = amp_scaler_create(&s, amp_cpu(), &sc);
    EXPECT(st == AMP_ERR_ARG && s == NULL && msg_has("amp_scaler_create", "fixed = 1 with init_scale 0"),
           "fixed = 1, init_scale 0: %s '%s'", amp_status_string(st), amp_last_error());
    sc.init_scale = -0.0f;
    st = amp_scaler_create(&s, amp_cpu(), &sc);
    EXPECT(st == AMP_ERR_ARG && s == NULL, "fixed = 1, init_scale -0: %s", amp_status_string(st));
    sc.init_scale = 1.0f;
    EXPECT(amp_scaler_create(&s, amp_cpu(), &sc) == AMP_OK && amp_scaler_get_scale(s) == 1.0f, "%s", amp_last_error());
    amp_scaler_destroy(s);
    memset(&sc, 0, sizeof sc);   /* without fixed, 0 is still the default 65536 */
    EXPECT(amp_scaler_create(&s, amp_cpu(), &sc) == AMP_OK && amp_scaler_get_scale(s) == 65536.0f, "%s", amp_last_error());
    amp_scaler_destroy(s);
  }
}

/* ---- call rules ------------------------------------------------------------------------------ */

/* A scaler-stepped optimizer refuses amp_optimizer_step and the other way round; each refusal
   changes nothing. Bad arguments name amp_optimizer_step. */
static void mixing_with_a_scaler_is_refused(void) {
  enum { N = 16 };
  float w[N], g[N];
  static unsigned char before[N * 20 + 64], after[N * 20 + 64];
  amp_optimizer *o, *e;
  amp_scaler *s;
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAM);
  size_t i, nb, na;
  amp_status st;
  for (i = 0; i < N; i++) { w[i] = (float)i; g[i] = 0.5f; }
  amp_scaler_create(&s, amp_cpu(), NULL);
  amp_optimizer_create(&o, amp_cpu(), &c);
  amp_optimizer_add(o, AMP_F32, w, g, N);
  EXPECT(amp_optimizer_last_skipped(o) == 0, "before any step: last_skipped %d", amp_optimizer_last_skipped(o));
  EXPECT(amp_optimizer_step(o) == AMP_OK, "%s", amp_last_error());
  nb = t_optim_snapshot(o, before);
  st = amp_scaler_step(s, o);
  na = t_optim_snapshot(o, after);
  EXPECT(st == AMP_ERR_STATE && msg_has("amp_scaler_step", "without a scaler"), "scaler step after amp_optimizer_step: %s '%s'",
         amp_status_string(st), amp_last_error());
  EXPECT(na == nb && memcmp(before, after, na) == 0, "the refused scaler step changed the optimizer");
  st = amp_scaler_unscale(s, o);
  EXPECT(st == AMP_ERR_STATE && msg_has("amp_scaler_unscale", "without a scaler"), "unscale: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_scaler_update(s) == AMP_ERR_STATE, "update recorded an inf check from a refused call");
  amp_optimizer_destroy(o);

  amp_optimizer_create(&o, amp_cpu(), &c);
  amp_optimizer_add(o, AMP_F32, w, g, N);
  EXPECT(amp_scaler_unscale(s, o) == AMP_OK, "%s", amp_last_error());   /* the first call decides: a scaler */
  nb = t_optim_snapshot(o, before);
  st = amp_optimizer_step(o);
  na = t_optim_snapshot(o, after);
  EXPECT(st == AMP_ERR_STATE && msg_has("amp_optimizer_step", "stepped by a scaler"), "amp_optimizer_step after unscale: %s '%s'",
         amp_status_string(st), amp_last_error());
  EXPECT(na == nb && memcmp(before, after, na) == 0, "the refused amp_optimizer_step changed the optimizer");
  EXPECT(amp_scaler_step(s, o) == AMP_OK && amp_scaler_update(s) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_optimizer_last_skipped(o) == 0, "a scaler-stepped optimizer: last_skipped %d", amp_optimizer_last_skipped(o));
  EXPECT(amp_optimizer_step(o) == AMP_ERR_STATE, "a later iteration: still refused");

  st = amp_optimizer_step(NULL);
  EXPECT(st == AMP_ERR_ARG && msg_has("amp_optimizer_step", "NULL"), "NULL: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(amp_optimizer_last_skipped(NULL) == 0, "last_skipped(NULL)");
  amp_optimizer_create(&e, amp_cpu(), &c);
  st = amp_optimizer_step(e);
  EXPECT(st == AMP_ERR_STATE && msg_has("amp_optimizer_step", "no tensors"), "empty: %s '%s'", amp_status_string(st), amp_last_error());
  amp_optimizer_destroy(e);
  amp_optimizer_destroy(o); amp_scaler_destroy(s);
}

/* AMP_CUSTOM under amp_optimizer_step: the update function receives the grads as they are
   (times the clip coefficient), and is not called for a skipped step. */
static int custom_calls;
static float custom_seen[8];
static void custom_sgd(void *user, float *master, const float *grad, size_t n, size_t index, long step) {
  size_t i;
  (void)user; (void)index; (void)step;
  custom_calls++;
  for (i = 0; i < n && i < 8; i++) { custom_seen[i] = grad[i]; master[i] -= 0.5f * grad[i]; }
}
static void custom_kind_gets_the_grads_as_they_are(void) {
  float w[8], g[8];
  amp_optimizer *o;
  amp_optim_config c = amp_optimizer_defaults(AMP_CUSTOM);
  size_t i;
  c.custom_step = custom_sgd;
  for (i = 0; i < 8; i++) { w[i] = 1.0f; g[i] = (float)i * 0.25f - 1.0f; }
  EXPECT(amp_optimizer_create(&o, amp_cpu(), &c) == AMP_OK && amp_optimizer_add(o, AMP_F32, w, g, 8) == AMP_OK, "%s", amp_last_error());
  custom_calls = 0;
  EXPECT(amp_optimizer_step(o) == AMP_OK && custom_calls == 1, "custom step: %d calls, %s", custom_calls, amp_last_error());
  for (i = 0; i < 8; i++)
    EXPECT(custom_seen[i] == g[i] && w[i] == 1.0f - 0.5f * g[i], "element %zu: grad seen %g (given %g), weight %g", i,
           (double)custom_seen[i], (double)g[i], (double)w[i]);
  g[5] = NAN;
  EXPECT(amp_optimizer_step(o) == AMP_OK && custom_calls == 1 && amp_optimizer_last_skipped(o) == 1,
         "a NaN step called the custom update (%d calls) or was not skipped", custom_calls);
  amp_optimizer_destroy(o);
}

/* A checkpoint of a scaler-less Adam with beta1 = 0 and lr = 0 set later: saved without a scaler,
   loaded into a fresh optimizer made from the same config, the runs continue bit for bit; after
   the load last_skipped is 0 until the next step. */
static void checkpoint_keeps_zero_values_and_the_step(void) {
  enum { N = 50 };
  const char *path = "build/test/step_ckpt.bin";
  float wa[N], wb[N], g[N];
  static unsigned char a[N * 20 + 64], b[N * 20 + 64];
  amp_optimizer *oa, *ob;
  amp_optim_config c = amp_optimizer_defaults(AMP_ADAM);
  size_t i, na, nb;
  int s;
  c.beta1 = 0.0f; c.lr = 0.02f;
  rng_state = 5;
  for (i = 0; i < N; i++) wa[i] = wb[i] = rndn();
  amp_optimizer_create(&oa, amp_cpu(), &c); amp_optimizer_create(&ob, amp_cpu(), &c);
  amp_optimizer_add(oa, AMP_F32, wa, g, N); amp_optimizer_add(ob, AMP_F32, wb, g, N);
  for (s = 0; s < 4; s++) { for (i = 0; i < N; i++) g[i] = rndn(); amp_optimizer_step(oa); }
  g[3] = NAN; amp_optimizer_step(oa);
  EXPECT(amp_optimizer_last_skipped(oa) == 1, "the NaN step was not skipped");
  EXPECT(amp_checkpoint_save(path, oa, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_checkpoint_load(path, ob, NULL) == AMP_OK, "%s", amp_last_error());
  EXPECT(amp_optimizer_last_skipped(ob) == 0, "after a load: last_skipped %d", amp_optimizer_last_skipped(ob));
  EXPECT(ob->cfg.beta1 == 0.0f && amp_optimizer_step_count(ob) == 4, "loaded: beta1 %g, steps %ld", (double)ob->cfg.beta1,
         amp_optimizer_step_count(ob));
  for (s = 0; s < 4; s++) {
    for (i = 0; i < N; i++) g[i] = rndn();
    amp_optimizer_step(oa); amp_optimizer_step(ob);
  }
  na = t_optim_snapshot(oa, a); nb = t_optim_snapshot(ob, b);
  EXPECT(na == nb && memcmp(a, b, na) == 0, "the loaded optimizer continues differently");
  amp_optimizer_destroy(oa); amp_optimizer_destroy(ob);
  remove(path);
}

int main(void) {
  RUN(step_equals_a_scaler_fixed_at_1);
  RUN(skipped_step_changes_nothing);
  RUN(step_cases_for_torch);
  RUN(adam_beta1_zero_cases_for_torch);
  RUN(clip_coef_is_torchs);
  RUN(lr_zero_keeps_the_masters_and_advances_the_moments);
  RUN(zeros_mean_defaults_unless_zero_is_zero);
  RUN(illegal_values_are_refused_by_name);
  RUN(mixing_with_a_scaler_is_refused);
  RUN(custom_kind_gets_the_grads_as_they_are);
  RUN(checkpoint_keeps_zero_values_and_the_step);
  RUN(torch_agrees_on_every_case);
  TEST_END();
}
