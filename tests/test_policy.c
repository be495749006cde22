/* tests/test_policy.c - the op-list policy: modes against their anchors, the built-in lists,
   Paddle's custom lists, Ascend's modify_mixlist files (the vendor's examples and every kind of
   bad input, the policy compared before and after), names, the dump, and concurrent readers. */
// LDLIBS: -lpthread
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every allocation the library makes is counted, and the n-th one can be made to fail. */
static long t_allocs, t_fail_at = -1;
static void *t_malloc(size_t n) { return t_allocs++ == t_fail_at ? NULL : malloc(n); }
#define AMP_MALLOC(sz) t_malloc(sz)
#define AMP_FREE(p) free(p)
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static amp_policy *new_policy(amp_mode mode, amp_dtype low) {
  amp_policy *p = NULL;
  amp_status st = amp_policy_create(&p, mode, low);
  if (st != AMP_OK) { printf("amp_policy_create(%d, %d) failed: %s\n", (int)mode, (int)low, amp_last_error()); exit(1); }
  return p;
}

static char *dump(const amp_policy *p) {
  size_t need = 0;
  char *s;
  if (amp_policy_dump(p, NULL, 0, &need) != AMP_OK) { printf("dump size: %s\n", amp_last_error()); exit(1); }
  s = (char *)malloc(need);
  if (!s || amp_policy_dump(p, s, need, NULL) != AMP_OK) { printf("dump: %s\n", amp_last_error()); exit(1); }
  return s;
}

static const char *dt(amp_dtype t) { return t == AMP_F32 ? "f32" : t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : "?"; }

static amp_status load(amp_policy *p, const char *json) { return amp_policy_load_mixlist(p, json, strlen(json)); }

static const char *const modes[] = { "MIXED", "PURE", "WHITE_ONLY", "FORCE_LOW", "FORCE_F32", "KEEP" };

/* ---- creation ----------------------------------------------------------------------------- */

static void create_rejects_unknown_mode_and_low_type(void) {
  amp_policy *p = (amp_policy *)&p;   /* a value that must not be touched on failure */
  amp_policy *keep = p;
  struct { int mode, low; const char *needle; } bad[] = {
    { 6, AMP_F16, "mode 6" }, { -1, AMP_F16, "mode -1" }, { 0, AMP_F32, "low 0" }, { 0, 3, "low 3" }, { 2, -2, "low -2" },
  };
  size_t i;
  for (i = 0; i < sizeof bad / sizeof *bad; i++) {
    amp_status st = amp_policy_create(&p, (amp_mode)bad[i].mode, (amp_dtype)bad[i].low);
    EXPECT(st == AMP_ERR_ARG, "mode %d low %d: expected AMP_ERR_ARG got %s", bad[i].mode, bad[i].low, amp_status_string(st));
    EXPECT(strstr(amp_last_error(), "amp_policy_create") && strstr(amp_last_error(), bad[i].needle),
           "mode %d low %d: message should name the function and \"%s\", got \"%s\"", bad[i].mode, bad[i].low, bad[i].needle, amp_last_error());
    EXPECT(p == keep, "mode %d low %d: *out was changed on failure", bad[i].mode, bad[i].low);
  }
  EXPECT(amp_policy_create(NULL, AMP_MODE_MIXED, AMP_F16) == AMP_ERR_ARG, "out NULL: expected AMP_ERR_ARG");
  amp_policy_destroy(NULL);   /* a no-op, like free(NULL) */
}

/* ---- built-in lists ----------------------------------------------------------------------- */

static void builtin_lists_hold_pytorch_and_paddle_names(void) {
  static const struct { const char *op; amp_list list; } want[] = {
    /* PyTorch lower_precision_fp -> white */
    { "matmul", AMP_LIST_WHITE }, { "linear", AMP_LIST_WHITE }, { "conv2d", AMP_LIST_WHITE }, { "bmm", AMP_LIST_WHITE },
    { "addmm", AMP_LIST_WHITE }, { "baddbmm", AMP_LIST_WHITE }, { "prelu", AMP_LIST_WHITE }, { "conv_transpose2d", AMP_LIST_WHITE },
    { "lstm_cell", AMP_LIST_WHITE }, { "scaled_dot_product_attention", AMP_LIST_WHITE }, { "einsum", AMP_LIST_WHITE },
    /* Paddle white */
    { "matmul_v2", AMP_LIST_WHITE }, { "mul", AMP_LIST_WHITE }, { "fused_attention", AMP_LIST_WHITE },
    /* PyTorch fp32 -> black */
    { "exp", AMP_LIST_BLACK }, { "log_softmax", AMP_LIST_BLACK }, { "softmax", AMP_LIST_BLACK }, { "sum", AMP_LIST_BLACK },
    { "cumsum", AMP_LIST_BLACK }, { "pow", AMP_LIST_BLACK }, { "mse_loss", AMP_LIST_BLACK }, { "nll_loss", AMP_LIST_BLACK },
    { "binary_cross_entropy_with_logits", AMP_LIST_BLACK }, { "upsample_bilinear2d", AMP_LIST_BLACK }, { "norm", AMP_LIST_BLACK },
    { "layer_norm", AMP_LIST_BLACK }, { "group_norm", AMP_LIST_BLACK }, { "logsumexp", AMP_LIST_BLACK },
    /* Paddle black */
    { "softmax_with_cross_entropy", AMP_LIST_BLACK }, { "sigmoid_cross_entropy_with_logits", AMP_LIST_BLACK },
    { "reduce_sum", AMP_LIST_BLACK }, { "mean", AMP_LIST_BLACK }, { "square", AMP_LIST_BLACK }, { "lookup_table", AMP_LIST_BLACK },
    { "cos_sim", AMP_LIST_BLACK }, { "cross_entropy", AMP_LIST_BLACK },
    /* PyTorch promote -> gray */
    { "addcmul", AMP_LIST_GRAY }, { "atan2", AMP_LIST_GRAY }, { "dot", AMP_LIST_GRAY }, { "index_put", AMP_LIST_GRAY },
    { "scatter_add", AMP_LIST_GRAY }, { "tensordot", AMP_LIST_GRAY }, { "cat", AMP_LIST_GRAY },
    /* Paddle gray */
    { "elementwise_add", AMP_LIST_GRAY }, { "elementwise_mul", AMP_LIST_GRAY }, { "batch_norm", AMP_LIST_GRAY },
    { "tanh", AMP_LIST_GRAY }, { "relu", AMP_LIST_GRAY }, { "dropout", AMP_LIST_GRAY }, { "reshape2", AMP_LIST_GRAY },
    { "transpose", AMP_LIST_GRAY }, { "concat", AMP_LIST_GRAY }, { "cast", AMP_LIST_GRAY }, { "pool2d", AMP_LIST_GRAY },
    /* on no anchor's list */
    { "embedding", AMP_LIST_NONE }, { "instance_norm", AMP_LIST_NONE }, { "my_op", AMP_LIST_NONE },
  };
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  size_t i;
  for (i = 0; i < sizeof want / sizeof *want; i++) {
    amp_list got = amp_policy_list(p, want[i].op);
    EXPECT(got == want[i].list, "op %s: expected %s got %s", want[i].op, amp_list_name(want[i].list), amp_list_name(got));
  }
  amp_policy_destroy(p);
}

/* ---- modes against their anchors ---------------------------------------------------------- */

/* inputs: 'h' the policy's low type, 'o' the other low type, 'f' f32.
   expected per mode: 'L' low, 'F' f32. */
typedef struct mode_row { const char *op, *inputs; char mixed, pure, white_only; } mode_row;
static const mode_row mode_table[] = {
  /* white: low whatever the inputs (autocast casts f32 inputs down; Paddle white) */
  { "matmul", "ff", 'L', 'L', 'L' }, { "matmul", "hh", 'L', 'L', 'L' }, { "linear", "fh", 'L', 'L', 'L' },
  { "matmul_v2", "ff", 'L', 'L', 'L' }, { "conv2d", "", 'L', 'L', 'L' }, { "MatMul", "f", 'L', 'L', 'L' },
  { "mul", "ff", 'L', 'L', 'L' },
  /* black: f32 whatever the inputs; PURE keeps black in f32 too */
  { "softmax", "hh", 'F', 'F', 'F' }, { "sum", "h", 'F', 'F', 'F' }, { "exp", "h", 'F', 'F', 'F' },
  { "softmax_with_cross_entropy", "hh", 'F', 'F', 'F' }, { "mean", "h", 'F', 'F', 'F' }, { "layer_norm", "h", 'F', 'F', 'F' },
  { "group_norm", "h", 'F', 'F', 'F' }, { "mse_loss", "", 'F', 'F', 'F' },
  /* gray: f32 if any input is f32, else low; no inputs: low (MIXED, PURE), f32 (WHITE_ONLY) */
  { "relu", "h", 'L', 'L', 'F' }, { "relu", "f", 'F', 'L', 'F' }, { "relu", "", 'L', 'L', 'F' },
  { "elementwise_add", "hf", 'F', 'L', 'F' }, { "elementwise_add", "hh", 'L', 'L', 'F' },
  { "addcmul", "hhf", 'F', 'L', 'F' }, { "addcmul", "hhh", 'L', 'L', 'F' }, { "tanh", "f", 'F', 'L', 'F' },
  { "relu", "oh", 'L', 'L', 'F' },
  /* the norms: PURE keeps them f32 whatever their list (Paddle O2, apex keep_batchnorm_fp32) */
  { "batch_norm", "h", 'L', 'F', 'F' }, { "batch_norm", "f", 'F', 'F', 'F' }, { "instance_norm", "h", 'L', 'F', 'F' },
  { "Batch_Norm", "h", 'L', 'F', 'F' },
  /* unlisted: like gray */
  { "my_custom_op", "h", 'L', 'L', 'F' }, { "my_custom_op", "hf", 'F', 'L', 'F' }, { "my_custom_op", "", 'L', 'L', 'F' },
};

static size_t make_inputs(const char *code, amp_dtype low, amp_dtype *in) {
  size_t n = 0;
  for (; *code; code++) in[n++] = *code == 'f' ? AMP_F32 : *code == 'h' ? low : (low == AMP_F16 ? AMP_BF16 : AMP_F16);
  return n;
}

static void every_mode_matches_its_anchor_on_the_op_table(void) {
  static const amp_dtype lows[2] = { AMP_F16, AMP_BF16 };
  size_t li, m, r;
  for (li = 0; li < 2; li++) {
    for (m = 0; m <= AMP_MODE_FORCE_F32; m++) {
      amp_policy *p = new_policy((amp_mode)m, lows[li]);
      for (r = 0; r < sizeof mode_table / sizeof *mode_table; r++) {
        const mode_row *row = &mode_table[r];
        amp_dtype in[8], got, want;
        size_t n = make_inputs(row->inputs, lows[li], in);
        char c = m == AMP_MODE_MIXED ? row->mixed : m == AMP_MODE_PURE ? row->pure : m == AMP_MODE_WHITE_ONLY ? row->white_only
               : m == AMP_MODE_FORCE_LOW ? 'L' : 'F';
        want = c == 'L' ? lows[li] : AMP_F32;
        got = amp_policy_decide(p, row->op, in, n);
        EXPECT(got == want, "mode %s low %s op %s inputs \"%s\": expected %s got %s", modes[m], dt(lows[li]), row->op,
               row->inputs, dt(want), dt(got));
      }
      amp_policy_destroy(p);
    }
  }
}

static void keep_mode_answers_the_inputs_own_type(void) {
  static const struct { const char *op; amp_dtype in[3]; size_t n; amp_dtype want; } rows[] = {
    { "matmul", { AMP_F16, AMP_F16 }, 2, AMP_F16 },        /* white, but KEEP ignores lists */
    { "softmax", { AMP_BF16 }, 1, AMP_BF16 },              /* black too */
    { "relu", { AMP_F32 }, 1, AMP_F32 },
    { "relu", { AMP_F16, AMP_F32 }, 2, AMP_F32 },          /* any f32 input: f32 */
    { "relu", { AMP_F16, AMP_BF16 }, 2, AMP_F32 },         /* neither low type holds the other */
    { "relu", { AMP_BF16, AMP_BF16, AMP_BF16 }, 3, AMP_BF16 },
    { "fill_constant", { AMP_F16 }, 0, AMP_F32 },          /* no inputs: the origin type, f32 */
  };
  static const amp_dtype lows[2] = { AMP_F16, AMP_BF16 };
  size_t li, r;
  for (li = 0; li < 2; li++) {
    amp_policy *p = new_policy(AMP_MODE_KEEP, lows[li]);
    for (r = 0; r < sizeof rows / sizeof *rows; r++) {
      amp_dtype got = amp_policy_decide(p, rows[r].op, rows[r].in, rows[r].n);
      EXPECT(got == rows[r].want, "KEEP low %s op %s row %zu: expected %s got %s", dt(lows[li]), rows[r].op, r, dt(rows[r].want), dt(got));
    }
    amp_policy_destroy(p);
  }
}

static void decide_answers_f32_for_bad_arguments(void) {
  amp_policy *p = new_policy(AMP_MODE_FORCE_LOW, AMP_F16);
  amp_dtype bad_in[2] = { AMP_F16, (amp_dtype)7 };
  amp_dtype got;
  got = amp_policy_decide(NULL, "matmul", NULL, 0);
  EXPECT(got == AMP_F32 && strstr(amp_last_error(), "p is NULL"), "NULL policy: expected f32 + message, got %s \"%s\"", dt(got), amp_last_error());
  got = amp_policy_decide(p, NULL, NULL, 0);
  EXPECT(got == AMP_F32 && strstr(amp_last_error(), "op is NULL"), "NULL op: got %s \"%s\"", dt(got), amp_last_error());
  got = amp_policy_decide(p, "", NULL, 0);
  EXPECT(got == AMP_F32 && strstr(amp_last_error(), "empty"), "empty op: got %s \"%s\"", dt(got), amp_last_error());
  got = amp_policy_decide(p, "matmul", NULL, 2);
  EXPECT(got == AMP_F32 && strstr(amp_last_error(), "inputs is NULL"), "NULL inputs: got %s \"%s\"", dt(got), amp_last_error());
  got = amp_policy_decide(p, "matmul", bad_in, 2);
  EXPECT(got == AMP_F32 && strstr(amp_last_error(), "inputs[1] = 7"), "input 7: got %s \"%s\"", dt(got), amp_last_error());
  got = amp_policy_decide(p, "matmul", bad_in, 1);   /* the same call with good inputs answers low */
  EXPECT(got == AMP_F16, "FORCE_LOW matmul f16: expected f16 got %s", dt(got));
  EXPECT(amp_policy_list(NULL, "x") == AMP_LIST_NONE && amp_policy_list(p, NULL) == AMP_LIST_NONE, "list with NULLs must say NONE");
  amp_policy_destroy(p);
}

/* ---- names -------------------------------------------------------------------------------- */

static void names_compare_case_insensitively(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  static const char *const spellings[] = { "matmul", "MatMul", "MATMUL", "mAtMuL" };
  amp_dtype f32 = AMP_F32;
  size_t i;
  for (i = 0; i < 4; i++) {
    EXPECT(amp_policy_list(p, spellings[i]) == AMP_LIST_WHITE, "%s: expected white got %s", spellings[i], amp_list_name(amp_policy_list(p, spellings[i])));
    EXPECT(amp_policy_decide(p, spellings[i], &f32, 1) == AMP_F16, "%s with an f32 input: expected f16", spellings[i]);
  }
  EXPECT(amp_policy_set(p, "MyOp", AMP_LIST_BLACK) == AMP_OK, "set MyOp: %s", amp_last_error());
  EXPECT(amp_policy_list(p, "myop") == AMP_LIST_BLACK && amp_policy_list(p, "MYOP") == AMP_LIST_BLACK, "MyOp set black, looked up as myop/MYOP");
  EXPECT(amp_policy_set(p, "MYOP", AMP_LIST_WHITE) == AMP_OK, "set MYOP");
  {
    char *d = dump(p);   /* one entry, in the first spelling */
    EXPECT(strstr(d, "white MyOp\n") && !strstr(d, "MYOP"), "dump should show one white MyOp:\n%.300s", strstr(d, "MyOp") ? strstr(d, "MyOp") : d);
    free(d);
  }
  /* only ASCII letters fold: other bytes compare exactly */
  EXPECT(amp_policy_set(p, "\xc3\x84op", AMP_LIST_BLACK) == AMP_OK, "set Ä-op");
  EXPECT(amp_policy_list(p, "\xc3\xa4op") == AMP_LIST_NONE, "ä-op must not match Ä-op (non-ASCII compares exactly)");
  amp_policy_destroy(p);
}

static void long_names_are_copied_and_compared_in_full(void) {
  size_t n = t_quick() ? 5000 : 100000, i;
  char *name = (char *)malloc(n + 1), *other = (char *)malloc(n + 1);
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_BF16);
  amp_dtype f32 = AMP_F32;
  for (i = 0; i < n; i++) name[i] = (char)('a' + i % 26);
  name[n] = '\0';
  memcpy(other, name, n + 1);
  EXPECT(amp_policy_set(p, name, AMP_LIST_WHITE) == AMP_OK, "set a %zu-char name: %s", n, amp_last_error());
  name[0] = 'Z';                                   /* the caller's buffer changes: the policy kept a copy */
  EXPECT(amp_policy_list(p, other) == AMP_LIST_WHITE, "the %zu-char name should still be white", n);
  other[0] = 'A';                                  /* case-folds to the stored 'a' */
  EXPECT(amp_policy_decide(p, other, &f32, 1) == AMP_BF16, "the long name in another case should decide bf16");
  other[n - 1] = '#';                              /* differs only in the last character */
  EXPECT(amp_policy_list(p, other) == AMP_LIST_NONE, "a name differing in its last char must not match");
  other[n - 1] = name[n - 1];
  other[n - 2] = '\0';                             /* a prefix must not match either */
  EXPECT(amp_policy_list(p, other) == AMP_LIST_NONE, "a prefix of the long name must not match");
  { /* the same through a mixlist */
    size_t k = 4000;
    char *json = (char *)malloc(k + 64);
    memcpy(json, "{\"black-list\": {\"to-add\": [\"", 28);
    for (i = 0; i < k; i++) json[28 + i] = (char)('A' + i % 26);
    strcpy(json + 28 + k, "\"]}}");
    EXPECT(load(p, json) == AMP_OK, "mixlist with a %zu-char name: %s", k, amp_last_error());
    json[28 + k] = '\0';
    EXPECT(amp_policy_list(p, json + 28) == AMP_LIST_BLACK, "the %zu-char mixlist name should be black", k);
    free(json);
  }
  amp_policy_destroy(p);
  free(name); free(other);
}

/* ---- set and Paddle's custom lists -------------------------------------------------------- */

static void set_moves_an_op_and_none_unlists_it(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  amp_dtype h = AMP_F16, f = AMP_F32;
  EXPECT(amp_policy_set(p, "relu", AMP_LIST_BLACK) == AMP_OK, "set relu black");
  EXPECT(amp_policy_decide(p, "relu", &h, 1) == AMP_F32, "relu black with f16 input: expected f32");
  EXPECT(amp_policy_set(p, "softmax", AMP_LIST_WHITE) == AMP_OK, "set softmax white");
  EXPECT(amp_policy_decide(p, "softmax", &f, 1) == AMP_F16, "softmax white with f32 input: expected f16");
  EXPECT(amp_policy_set(p, "softmax", AMP_LIST_NONE) == AMP_OK, "unlist softmax");
  EXPECT(amp_policy_list(p, "softmax") == AMP_LIST_NONE, "softmax unlisted: expected none got %s", amp_list_name(amp_policy_list(p, "softmax")));
  EXPECT(amp_policy_decide(p, "softmax", &f, 1) == AMP_F32 && amp_policy_decide(p, "softmax", &h, 1) == AMP_F16,
         "unlisted softmax should follow its inputs");
  EXPECT(amp_policy_set(p, "never_listed", AMP_LIST_NONE) == AMP_OK, "unlisting an unlisted op is fine");
  amp_policy_destroy(p);
}

static void set_rejects_bad_arguments_and_changes_nothing(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  char *before = dump(p), *after;
  amp_status st;
  st = amp_policy_set(NULL, "relu", AMP_LIST_BLACK);
  EXPECT(st == AMP_ERR_ARG, "NULL policy: expected AMP_ERR_ARG got %s", amp_status_string(st));
  st = amp_policy_set(p, NULL, AMP_LIST_BLACK);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_policy_set"), "NULL op: got %s \"%s\"", amp_status_string(st), amp_last_error());
  st = amp_policy_set(p, "", AMP_LIST_BLACK);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "empty"), "empty op: got %s \"%s\"", amp_status_string(st), amp_last_error());
  st = amp_policy_set(p, "relu", (amp_list)4);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "list 4"), "list 4: got %s \"%s\"", amp_status_string(st), amp_last_error());
  st = amp_policy_set(p, "relu", (amp_list)-1);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "list -1"), "list -1: got %s \"%s\"", amp_status_string(st), amp_last_error());
  after = dump(p);
  EXPECT(strcmp(before, after) == 0, "the policy changed after failing set calls");
  free(before); free(after);
  amp_policy_destroy(p);
}

static void paddle_custom_lists_move_ops_out_of_every_other_list(void) {
  /* Paddle AutoMixedPrecisionLists(custom_white_list={'softmax','Relu'}, custom_black_list={'MatMul','tanh'}) */
  static const char *const white[] = { "softmax", "Relu" }, *const black[] = { "MatMul", "tanh" };
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  amp_dtype f = AMP_F32, h = AMP_F16;
  EXPECT(amp_policy_customize(p, white, 2, black, 2) == AMP_OK, "customize: %s", amp_last_error());
  EXPECT(amp_policy_list(p, "softmax") == AMP_LIST_WHITE, "softmax (black) -> custom white: got %s", amp_list_name(amp_policy_list(p, "softmax")));
  EXPECT(amp_policy_list(p, "relu") == AMP_LIST_WHITE, "relu (gray) -> custom white: got %s", amp_list_name(amp_policy_list(p, "relu")));
  EXPECT(amp_policy_list(p, "matmul") == AMP_LIST_BLACK, "matmul (white) -> custom black: got %s", amp_list_name(amp_policy_list(p, "matmul")));
  EXPECT(amp_policy_list(p, "tanh") == AMP_LIST_BLACK, "tanh (gray) -> custom black: got %s", amp_list_name(amp_policy_list(p, "tanh")));
  EXPECT(amp_policy_decide(p, "softmax", &f, 1) == AMP_F16, "custom-white softmax with f32 input: expected f16");
  EXPECT(amp_policy_decide(p, "matmul", &h, 1) == AMP_F32, "custom-black matmul with f16 input: expected f32");
  EXPECT(amp_policy_customize(p, NULL, 0, NULL, 0) == AMP_OK, "empty custom lists are fine");
  { /* a new op goes onto the custom list too */
    static const char *const w2[] = { "fused_rope" };
    EXPECT(amp_policy_customize(p, w2, 1, NULL, 0) == AMP_OK && amp_policy_list(p, "FUSED_ROPE") == AMP_LIST_WHITE, "new custom white op");
  }
  amp_policy_destroy(p);
}

static void paddle_overlapping_custom_lists_are_an_error_and_change_nothing(void) {
  static const char *const white[] = { "softmax", "Conv2D" }, *const black[] = { "exp", "conv2d" };
  static const char *const with_null[] = { "relu", NULL }, *const with_empty[] = { "" };
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  char *before = dump(p), *after;
  amp_status st = amp_policy_customize(p, white, 2, black, 2);
  EXPECT(st == AMP_ERR_ARG, "overlap Conv2D/conv2d: expected AMP_ERR_ARG got %s", amp_status_string(st));
  EXPECT(strstr(amp_last_error(), "Conv2D") && strstr(amp_last_error(), "both"), "message should name Conv2D: \"%s\"", amp_last_error());
  st = amp_policy_customize(p, with_null, 2, NULL, 0);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "white[1]"), "NULL entry: got %s \"%s\"", amp_status_string(st), amp_last_error());
  st = amp_policy_customize(p, NULL, 0, with_empty, 1);
  EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "black[0]"), "empty entry: got %s \"%s\"", amp_status_string(st), amp_last_error());
  st = amp_policy_customize(p, NULL, 3, NULL, 0);
  EXPECT(st == AMP_ERR_ARG, "white NULL with n 3: got %s", amp_status_string(st));
  st = amp_policy_customize(NULL, white, 1, NULL, 0);
  EXPECT(st == AMP_ERR_ARG, "NULL policy: got %s", amp_status_string(st));
  after = dump(p);
  EXPECT(strcmp(before, after) == 0, "the policy changed after failing customize calls");
  EXPECT(amp_policy_list(p, "softmax") == AMP_LIST_BLACK, "softmax must still be black (no half-applied customize)");
  free(before); free(after);
  amp_policy_destroy(p);
}

/* ---- Ascend modify_mixlist: the vendor's examples ----------------------------------------- */

/* The shape of the vendor's template (ops_info.json): every key, with // comments after the
   opening brackets, as the CANN ATC/AOE --modify_mixlist pages print it. */
static const char ascend_template[] =
  "{\n"
  "\"black-list\": {                  // the blocklist\n"
  "     \"to-remove\": [                // blocklist -> graylist; the op must be on the blocklist\n"
  "     \"Yolo\"\n"
  "     ],\n"
  "     \"to-add\": [                   // trustlist or graylist -> blocklist\n"
  "     \"Matmul\"\n"
  "     ]\n"
  "  },\n"
  "  \"white-list\": {                  // the trustlist\n"
  "     \"to-remove\": [                // trustlist -> graylist; the op must be on the trustlist\n"
  "     \"Conv2D\"\n"
  "     ],\n"
  "     \"to-add\": [                   // blocklist or graylist -> trustlist\n"
  "     \"Bias\"\n"
  "     ]\n"
  "  }\n"
  "}\n";

/* The Chinese pages carry the same template with Chinese comments (UTF-8 inside // comments). */
static const char ascend_template_zh[] =
  "{\n"
  "  \"black-list\": {       // \xe9\xbb\x91\xe5\x90\x8d\xe5\x8d\x95\n"          /* 黑名单 */
  "     \"to-remove\": [\"Yolo\"],   // \xe7\x81\xb0\xe5\x90\x8d\xe5\x8d\x95\n"  /* 灰名单 */
  "     \"to-add\": [\"Matmul\"]\n"
  "  },\n"
  "  \"white-list\": {       // \xe7\x99\xbd\xe5\x90\x8d\xe5\x8d\x95\n"          /* 白名单 */
  "     \"to-remove\": [\"Conv2D\"],\n"
  "     \"to-add\": [\"Bias\"]\n"
  "  }\n"
  "}\n";

static void ascend_template_example_moves_each_op_as_documented(void) {
  const char *texts[2] = { ascend_template, ascend_template_zh };
  size_t t;
  for (t = 0; t < 2; t++) {
    amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
    amp_dtype f = AMP_F32, h = AMP_F16;
    amp_status st;
    amp_policy_set(p, "Yolo", AMP_LIST_BLACK);   /* Ascend's built-in list has it black; ours does not */
    st = load(p, texts[t]);
    EXPECT(st == AMP_OK, "template %zu: expected AMP_OK got %s: %s", t, amp_status_string(st), amp_last_error());
    EXPECT(amp_policy_list(p, "Yolo") == AMP_LIST_GRAY, "template %zu: Yolo black -> to-remove -> gray, got %s", t, amp_list_name(amp_policy_list(p, "Yolo")));
    EXPECT(amp_policy_list(p, "matmul") == AMP_LIST_BLACK, "template %zu: Matmul white -> to-add black, got %s", t, amp_list_name(amp_policy_list(p, "matmul")));
    EXPECT(amp_policy_list(p, "conv2d") == AMP_LIST_GRAY, "template %zu: Conv2D white -> to-remove -> gray, got %s", t, amp_list_name(amp_policy_list(p, "conv2d")));
    EXPECT(amp_policy_list(p, "bias") == AMP_LIST_WHITE, "template %zu: Bias unlisted -> to-add white, got %s", t, amp_list_name(amp_policy_list(p, "bias")));
    EXPECT(amp_policy_decide(p, "Conv2D", &f, 1) == AMP_F32 && amp_policy_decide(p, "Conv2D", &h, 1) == AMP_F16,
           "template %zu: Conv2D is gray now and follows its inputs", t);
    amp_policy_destroy(p);
  }
}

/* The three cases the vendor's page walks through for an op A that is on the trustlist. */
static void ascend_op_removed_from_white_without_black_ends_gray(void) {
  static const struct { const char *json; amp_list want; const char *why; } cases[] = {
    { "{\"black-list\": {\"to-add\": [\"MatMul\"]}}", AMP_LIST_BLACK, "added to black: moved out of white" },
    { "{\"black-list\": {\"to-add\": [\"MatMul\"]}, \"white-list\": {\"to-remove\": [\"MatMul\"]}}", AMP_LIST_BLACK,
      "removed from white and added to black: black" },
    { "{\"white-list\": {\"to-remove\": [\"MatMul\"]}, \"black-list\": {\"to-add\": [\"MatMul\"]}}", AMP_LIST_BLACK,
      "the same with the keys the other way round: black" },
    { "{\"white-list\": {\"to-remove\": [\"MatMul\"]}}", AMP_LIST_GRAY, "only removed from white: gray, not black" },
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof *cases; i++) {
    amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
    amp_status st = load(p, cases[i].json);
    amp_list got = amp_policy_list(p, "matmul");
    EXPECT(st == AMP_OK, "case %zu: %s", i, amp_last_error());
    EXPECT(got == cases[i].want, "case %zu (%s): expected %s got %s", i, cases[i].why, amp_list_name(cases[i].want), amp_list_name(got));
    amp_policy_destroy(p);
  }
  { /* gray, so it follows its inputs rather than staying f32 */
    amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_BF16);
    amp_dtype in[2] = { AMP_BF16, AMP_BF16 };
    load(p, "{\"white-list\": {\"to-remove\": [\"MatMul\"]}}");
    EXPECT(amp_policy_decide(p, "matmul", in, 2) == AMP_BF16, "matmul removed from white, bf16 inputs: expected bf16");
    amp_policy_destroy(p);
  }
}

static void ascend_to_remove_leaves_an_op_that_is_not_on_that_list(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  EXPECT(load(p, "{\"black-list\": {\"to-remove\": [\"relu\", \"matmul\"]}, \"white-list\": {\"to-remove\": [\"softmax\"]}}") == AMP_OK,
         "load: %s", amp_last_error());
  EXPECT(amp_policy_list(p, "relu") == AMP_LIST_GRAY, "relu (gray) removed from black: stays gray");
  EXPECT(amp_policy_list(p, "matmul") == AMP_LIST_WHITE, "matmul (white) removed from black: stays white");
  EXPECT(amp_policy_list(p, "softmax") == AMP_LIST_BLACK, "softmax (black) removed from white: stays black");
  EXPECT(load(p, "{\"white-list\": {\"to-add\": [\"softmax\"]}, \"black-list\": {\"to-remove\": [\"softmax\"]}}") == AMP_OK,
         "white to-add + black to-remove: %s", amp_last_error());
  EXPECT(amp_policy_list(p, "softmax") == AMP_LIST_WHITE, "softmax white to-add + black to-remove: white");
  amp_policy_destroy(p);
}

/* The page sketches the cases as {"black-list": {"to-add": [A]} "white-list": {...}}: a bare A and
   no comma between the lists. That is not JSON; the reader says where, and changes nothing. */
static void ascend_sketch_with_bare_names_is_rejected_with_its_position(void) {
  static const struct { const char *json; const char *where, *what; } bad[] = {
    { "{\n  \"black-list\": {\n     \"to-add\": [A]\n  }\n  \"white-list\": {\n     \"to-remove\": [A]\n  }\n}\n",
      "line 3, column 17", "an op name" },
    { "{\n  \"black-list\": {\n     \"to-add\": [\"A\"]\n  }\n  \"white-list\": {\n     \"to-remove\": [\"A\"]\n  }\n}\n",
      "line 5, column 3", "',' or '}'" },
  };
  size_t i;
  for (i = 0; i < 2; i++) {
    amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
    char *before = dump(p), *after;
    amp_status st = load(p, bad[i].json);
    after = dump(p);
    EXPECT(st == AMP_ERR_PARSE, "sketch %zu: expected AMP_ERR_PARSE got %s", i, amp_status_string(st));
    EXPECT(strstr(amp_last_error(), bad[i].where) && strstr(amp_last_error(), bad[i].what),
           "sketch %zu: expected \"%s\" and \"%s\" in \"%s\"", i, bad[i].where, bad[i].what, amp_last_error());
    EXPECT(strcmp(before, after) == 0, "sketch %zu: the policy changed", i);
    free(before); free(after);
    amp_policy_destroy(p);
  }
}

/* ---- mixlist JSON: what is accepted ------------------------------------------------------- */

static void mixlist_accepts_strict_json_escapes_bom_and_comments(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  amp_status st;
  char *before = dump(p), *after;
  st = load(p, "{}");
  after = dump(p);
  EXPECT(st == AMP_OK && strcmp(before, after) == 0, "{} is a valid, empty change: %s", amp_last_error());
  free(after);
  st = load(p, "\xef\xbb\xbf  {\"black-list\": {}, \"white-list\": {\"to-add\": [], \"to-remove\": []}}  // end\n");
  after = dump(p);
  EXPECT(st == AMP_OK && strcmp(before, after) == 0, "BOM, empty lists, trailing comment: %s", amp_last_error());
  free(after);
  st = load(p, "{\r\n\t\"white-list\"\t:\r\n{ \"to-add\" : [ \"my\\u005Fop\" , \"sl\\/ash\", \"q\\\"uote\", \"back\\\\slash\","
               " \"\\ud83d\\ude00op\", \"\\u00e9t\\u00C9\", \"tab\\tnl\\nbfr\\b\\f\\r\", \"dup\", \"DUP\" ] } }");
  EXPECT(st == AMP_OK, "escapes: %s", amp_last_error());
  EXPECT(amp_policy_list(p, "my_op") == AMP_LIST_WHITE, "\\u005F decodes to '_'");
  EXPECT(amp_policy_list(p, "sl/ash") == AMP_LIST_WHITE, "\\/ decodes to '/'");
  EXPECT(amp_policy_list(p, "q\"uote") == AMP_LIST_WHITE, "\\\" decodes to '\"'");
  EXPECT(amp_policy_list(p, "back\\slash") == AMP_LIST_WHITE, "\\\\ decodes to '\\'");
  EXPECT(amp_policy_list(p, "\xf0\x9f\x98\x80op") == AMP_LIST_WHITE, "a surrogate pair decodes to U+1F600 in UTF-8");
  EXPECT(amp_policy_list(p, "\xc3\xa9t\xc3\x89") == AMP_LIST_WHITE, "\\u00e9 and \\u00C9 decode to UTF-8");
  EXPECT(amp_policy_list(p, "tab\tnl\nbfr\b\f\r") == AMP_LIST_WHITE, "\\t \\n \\b \\f \\r decode");
  EXPECT(amp_policy_list(p, "dup") == AMP_LIST_WHITE, "a name listed twice in one array is fine");
  st = load(p, "{\"black-list\": {\"to-add\": [\"\xe9\xbb\x91op\"]}}");
  EXPECT(st == AMP_OK && amp_policy_list(p, "\xe9\xbb\x91op") == AMP_LIST_BLACK, "raw UTF-8 in a name: %s", amp_last_error());
  free(before);
  amp_policy_destroy(p);
}

/* ---- mixlist JSON: every kind of bad input ------------------------------------------------ */

typedef struct bad_json { const char *text; size_t len; const char *where, *what; } bad_json;

static void check_bad(amp_policy *p, const bad_json *b, size_t idx) {
  char *before = dump(p), *after;
  size_t len = b->len ? b->len : strlen(b->text);
  amp_status st = amp_policy_load_mixlist(p, b->text, len);
  after = dump(p);
  EXPECT(st == AMP_ERR_PARSE, "bad[%zu] %.60s: expected AMP_ERR_PARSE got %s (%s)", idx, b->text, amp_status_string(st), amp_last_error());
  EXPECT(strstr(amp_last_error(), "amp_policy_load_mixlist") && strstr(amp_last_error(), b->where) && strstr(amp_last_error(), b->what),
         "bad[%zu] %.60s: expected \"%s\" and \"%s\" in \"%s\"", idx, b->text, b->where, b->what, amp_last_error());
  EXPECT(strcmp(before, after) == 0, "bad[%zu] %.60s: the policy changed", idx, b->text);
  free(before); free(after);
}

static void mixlist_bad_input_is_a_parse_error_with_position_and_changes_nothing(void) {
  static const bad_json bad[] = {
    /* truncated */
    { "{\"black-list\": {\"to-add\": [\"A\"", 0, "line 1, column 31", "end of input" },
    { "{\"black-list\": {\"to-add\": [\"A", 0, "line 1, column 28", "not terminated" },
    { "{\"black-list\": {\"to-add\": [\"a\\", 0, "line 1, column 28", "not terminated" },
    { "{\"black-list\": {\"to-add\": [\"a\\u12", 0, "line 1, column 30", "four hex digits" },
    { "", 0, "line 1, column 1", "end of input" },
    { "  // only a comment\n", 0, "line 2, column 1", "end of input" },
    /* wrong types */
    { "{\"black-list\": [\"A\"]}", 0, "line 1, column 16", "expected '{'" },
    { "{\"black-list\": null}", 0, "line 1, column 16", "expected '{'" },
    { "{\"black-list\": {\"to-add\": \"A\"}}", 0, "line 1, column 27", "expected '['" },
    { "{\"black-list\": {\"to-add\": [1]}}", 0, "line 1, column 28", "an op name" },
    { "{\"black-list\": {\"to-add\": [{\"a\": 1}]}}", 0, "line 1, column 28", "an op name" },
    { "[]", 0, "line 1, column 1", "expected '{'" },
    { "\"black-list\"", 0, "line 1, column 1", "expected '{'" },
    /* keys */
    { "{\"gray-list\": {}}", 0, "line 1, column 2", "unknown key \"gray-list\"" },
    { "{\"Black-List\": {}}", 0, "line 1, column 2", "unknown key" },
    { "{\"black-list\": {\"to-del\": []}}", 0, "line 1, column 17", "unknown key \"to-del\"" },
    { "{black-list: {}}", 0, "line 1, column 2", "a key" },
    { "{\"black-list\" {}}", 0, "line 1, column 15", "':'" },
    { "{\"black-list\": {}, \"black-list\": {}}", 0, "line 1, column 20", "duplicate key \"black-list\"" },
    { "{\"white-list\": {\"to-add\": [], \"to-add\": []}}", 0, "line 1, column 31", "duplicate key \"to-add\"" },
    /* separators, trailing commas, trailing garbage */
    { "{\"black-list\": {\"to-add\": [\"A\",]}}", 0, "line 1, column 32", "an op name" },
    { "{\"black-list\": {},}", 0, "line 1, column 19", "a key" },
    { "{\"black-list\": {\"to-add\": [\"A\" \"B\"]}}", 0, "line 1, column 32", "',' or ']'" },
    { "{} x", 0, "line 1, column 4", "after the closing" },
    { "{}{}", 0, "line 1, column 3", "after the closing" },
    { "{}\0", 3, "line 1, column 3", "after the closing" },
    { "\xef\xbb\xbf\xef\xbb\xbf{}", 0, "line 1, column 2", "expected '{'" },
    /* comments: only // */
    { "/* c */ {}", 0, "line 1, column 1", "'/'" },
    { "{} /", 0, "line 1, column 4", "'/'" },
    { "{} // \xff\n", 0, "line 1, column 7", "UTF-8" },
    /* strings: invalid UTF-8, control characters, escapes, surrogates */
    { "{\"black-list\": {\"to-add\": [\"\xff\"]}}", 0, "line 1, column 29", "UTF-8" },
    { "{\"black-list\": {\"to-add\": [\"\xc0\xaf\"]}}", 0, "line 1, column 29", "UTF-8" },          /* overlong '/' */
    { "{\"black-list\": {\"to-add\": [\"\xed\xa0\x80\"]}}", 0, "line 1, column 29", "UTF-8" },      /* an encoded surrogate */
    { "{\"black-list\": {\"to-add\": [\"\xf4\x90\x80\x80\"]}}", 0, "line 1, column 29", "UTF-8" },  /* above U+10FFFF */
    { "{\"black-list\": {\"to-add\": [\"\xe2\x82\"]}}", 0, "line 1, column 29", "UTF-8" },          /* cut short */
    { "{\"black-list\": {\"to-add\": [\"a\tb\"]}}", 0, "line 1, column 30", "control character 0x09" },
    { "{\"black-list\": {\"to-add\": [\"a\0b\"]}}", 36, "line 1, column 30", "control character 0x00" },
    { "{\"black-list\": {\"to-add\": [\"a\\x\"]}}", 0, "line 1, column 30", "invalid escape '\\x'" },
    { "{\"black-list\": {\"to-add\": [\"a\\u12G4\"]}}", 0, "line 1, column 30", "four hex digits" },
    { "{\"black-list\": {\"to-add\": [\"a\\ud800\"]}}", 0, "line 1, column 30", "high surrogate" },
    { "{\"black-list\": {\"to-add\": [\"a\\ud800\\u0041\"]}}", 0, "line 1, column 30", "high surrogate" },
    { "{\"black-list\": {\"to-add\": [\"a\\udc00\"]}}", 0, "line 1, column 30", "low surrogate" },
    { "{\"black-list\": {\"to-add\": [\"a\\u0000\"]}}", 0, "line 1, column 30", "\\u0000" },
    { "{\"black-list\": {\"to-add\": [\"\"]}}", 0, "line 1, column 28", "empty op name" },
    /* columns count characters, not bytes; lines count from 1 */
    { "{\"black-list\": {\"to-add\": [\"\xe9\xbb\x91\", x]}}", 0, "line 1, column 33", "an op name" },
    { "{ // \xe9\xbb\x91\xe5\x90\x8d\xe5\x8d\x95\n  \"black-list\": {\"to-add\": [Matmul]}\n}", 0, "line 2, column 29", "found 'M'" },
    /* one op both ways */
    { "{\"black-list\": {\"to-add\": [\"MatMul\"]},\n \"white-list\": {\"to-add\": [\"matmul\"]}}", 0, "line 2, column 28",
      "both black-list to-add and white-list to-add" },
    { "{\"black-list\": {\"to-add\": [\"Exp\"], \"to-remove\": [\"EXP\"]}}", 0, "line 1, column 50",
      "both black-list to-add and black-list to-remove" },
    { "{\"white-list\": {\"to-remove\": [\"relu\"], \"to-add\": [\"Relu\"]}}", 0, "line 1, column 51",
      "both white-list to-remove and white-list to-add" },
  };
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  size_t i;
  amp_policy_set(p, "Yolo", AMP_LIST_BLACK);   /* a non-default state, so "unchanged" means something */
  for (i = 0; i < sizeof bad / sizeof *bad; i++) check_bad(p, &bad[i], i);
  { /* a good part before the bad one must not be applied */
    amp_status st = load(p, "{\"white-list\": {\"to-add\": [\"softmax\"]}, \"black-list\": 7}");
    EXPECT(st == AMP_ERR_PARSE && amp_policy_list(p, "softmax") == AMP_LIST_BLACK, "half-good file: softmax must stay black");
  }
  amp_policy_destroy(p);
}

static void mixlist_deep_nesting_is_rejected_where_it_starts(void) {
  size_t depth = t_quick() ? 10000 : 200000, i;
  char *s = (char *)malloc(depth * 2 + 64);
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  bad_json b;
  strcpy(s, "{\"black-list\": {\"to-add\": [");
  for (i = 0; i < depth; i++) s[27 + i] = '[';
  for (i = 0; i < depth; i++) s[27 + depth + i] = ']';
  strcpy(s + 27 + 2 * depth, "]}}");
  b.text = s; b.len = 0; b.where = "line 1, column 28"; b.what = "an op name";
  check_bad(p, &b, 100);
  for (i = 0; i < depth; i++) s[i] = '[';
  s[depth] = '\0';
  b.where = "line 1, column 1"; b.what = "expected '{'";
  check_bad(p, &b, 101);
  for (i = 0; i < depth; i++) s[i] = '{';
  b.where = "line 1, column 2"; b.what = "a key";
  check_bad(p, &b, 102);
  free(s);
  amp_policy_destroy(p);
}

static void mixlist_null_arguments_are_arg_errors(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  EXPECT(amp_policy_load_mixlist(NULL, "{}", 2) == AMP_ERR_ARG, "NULL policy: expected AMP_ERR_ARG");
  EXPECT(amp_policy_load_mixlist(p, NULL, 0) == AMP_ERR_ARG && strstr(amp_last_error(), "json is NULL"), "NULL json: \"%s\"", amp_last_error());
  EXPECT(amp_policy_load_mixlist_file(p, NULL) == AMP_ERR_ARG, "NULL path: expected AMP_ERR_ARG");
  EXPECT(amp_policy_load_mixlist_file(NULL, "x.json") == AMP_ERR_ARG, "NULL policy (file): expected AMP_ERR_ARG");
  EXPECT(amp_policy_load_mixlist(p, "{}xyz", 2) == AMP_OK, "len bounds the text: \"{}\" is all that is read");
  amp_policy_destroy(p);
}

/* ---- mixlist files ------------------------------------------------------------------------ */

static int write_temp(char *path, const char *text) {
  int fd;
  FILE *f;
  strcpy(path, "/tmp/amp_mixlist_XXXXXX");
  if ((fd = mkstemp(path)) < 0 || !(f = fdopen(fd, "wb"))) return 0;
  fputs(text, f);
  fclose(f);
  return 1;
}

static void mixlist_file_loads_and_reports_path_and_position(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  char path[64], *before, *after;
  amp_status st;
  if (!write_temp(path, ascend_template)) { EXPECT(0, "cannot write a temp file"); amp_policy_destroy(p); return; }
  st = amp_policy_load_mixlist_file(p, path);
  EXPECT(st == AMP_OK, "template file %s: %s", path, amp_last_error());
  EXPECT(amp_policy_list(p, "Bias") == AMP_LIST_WHITE && amp_policy_list(p, "Conv2D") == AMP_LIST_GRAY, "template file applied");
  remove(path);
  if (!write_temp(path, "{\n  \"black-list\": {\"to-add\": [\"exp\"]},\n  \"white-list\": 3\n}\n")) { EXPECT(0, "temp"); amp_policy_destroy(p); return; }
  before = dump(p);
  st = amp_policy_load_mixlist_file(p, path);
  after = dump(p);
  EXPECT(st == AMP_ERR_PARSE, "bad file: expected AMP_ERR_PARSE got %s", amp_status_string(st));
  EXPECT(strstr(amp_last_error(), path) && strstr(amp_last_error(), "line 3, column 17"), "message should name %s and line 3, column 17: \"%s\"", path, amp_last_error());
  EXPECT(strcmp(before, after) == 0, "bad file: the policy changed");
  remove(path);
  st = amp_policy_load_mixlist_file(p, "/nonexistent_dir/ops_info.json");
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "/nonexistent_dir/ops_info.json"), "missing file: got %s \"%s\"", amp_status_string(st), amp_last_error());
  st = amp_policy_load_mixlist_file(p, "/tmp");
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "'/tmp'") && strstr(amp_last_error(), "not a regular file"),
         "a directory: got %s \"%s\"", amp_status_string(st), amp_last_error());
  /* a device or a FIFO is refused at once (no read until memory runs out, no wait for a writer) */
  st = amp_policy_load_mixlist_file(p, "/dev/zero");
  EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "not a regular file"), "/dev/zero: got %s \"%s\"", amp_status_string(st),
         amp_last_error());
  {   /* a file above the 16 MiB cap (sparse: nothing is read) */
    FILE *f = fopen("build/test/mixlist_big.json", "wb");
    if (f) { fseek(f, 16L << 20, SEEK_SET); fputc(' ', f); fclose(f); }
    st = amp_policy_load_mixlist_file(p, "build/test/mixlist_big.json");
    EXPECT(st == AMP_ERR_IO && strstr(amp_last_error(), "16777217 bytes"), "a 16 MiB + 1 file: got %s \"%s\"",
           amp_status_string(st), amp_last_error());
    remove("build/test/mixlist_big.json");
  }
  free(after);
  after = dump(p);
  EXPECT(strcmp(before, after) == 0, "IO errors: the policy changed");
  free(before); free(after);
  amp_policy_destroy(p);
}

/* ---- the dump ----------------------------------------------------------------------------- */

static int ci_cmp(const char *a, const char *b) {
  for (;; a++, b++) {
    int x = (*a >= 'A' && *a <= 'Z') ? *a + 32 : (unsigned char)*a, y = (*b >= 'A' && *b <= 'Z') ? *b + 32 : (unsigned char)*b;
    if (x != y || !x) return x - y;
  }
}

static void dump_lists_every_op_once_sorted_with_its_list(void) {
  amp_policy *p = new_policy(AMP_MODE_PURE, AMP_BF16);
  char *d, *line, *next, prev[256] = "";
  size_t n = 0, header_n = 0, need = 0;
  char small[8];
  amp_policy_set(p, "Zeta_Op", AMP_LIST_WHITE);
  amp_policy_set(p, "alpha_op", AMP_LIST_BLACK);
  d = dump(p);
  EXPECT(sscanf(d, "# amp_policy: mode AMP_MODE_PURE, low AMP_BF16, %zu ops", &header_n) == 1, "header: %.100s", d);
  for (line = strchr(d, '\n') + 1; *line; line = next) {
    char list[8], name[256];
    amp_list want;
    next = strchr(line, '\n');
    *next++ = '\0';
    if (sscanf(line, "%5s %255s", list, name) != 2) { EXPECT(0, "bad line \"%s\"", line); break; }
    want = !strcmp(list, "white") ? AMP_LIST_WHITE : !strcmp(list, "black") ? AMP_LIST_BLACK : !strcmp(list, "gray") ? AMP_LIST_GRAY : AMP_LIST_NONE;
    EXPECT(amp_policy_list(p, name) == want, "line \"%s\": list() says %s", line, amp_list_name(amp_policy_list(p, name)));
    EXPECT(ci_cmp(prev, name) < 0, "not sorted (or a duplicate): \"%s\" then \"%s\"", prev, name);
    strcpy(prev, name);
    n++;
  }
  EXPECT(n == header_n && n > 180, "lines %zu, header says %zu (the union should hold over 180 ops)", n, header_n);
  free(d);
  /* size query, too small a buffer */
  EXPECT(amp_policy_dump(p, NULL, 0, &need) == AMP_OK && need > 1000, "size query: need %zu", need);
  memset(small, 'Z', sizeof small);
  EXPECT(amp_policy_dump(p, small, sizeof small, NULL) == AMP_ERR_ARG && small[0] == 'Z' && small[7] == 'Z',
         "too small a buffer: expected AMP_ERR_ARG and the buffer untouched");
  EXPECT(amp_policy_dump(NULL, NULL, 0, &need) == AMP_ERR_ARG, "NULL policy: expected AMP_ERR_ARG");
  { /* print writes exactly the dump */
    FILE *f = tmpfile();
    char *want = dump(p), *got = (char *)calloc(need + 16, 1);
    size_t k = 0;
    if (f) {
      EXPECT(amp_policy_print(p, f) == AMP_OK, "print: %s", amp_last_error());
      rewind(f);
      k = fread(got, 1, need + 8, f);
      fclose(f);
      EXPECT(k == need - 1 && strcmp(got, want) == 0, "print wrote %zu bytes, dump is %zu", k, need - 1);
    }
    free(want); free(got);
  }
  amp_policy_destroy(p);
}

/* ---- memory ------------------------------------------------------------------------------ */

static void decide_and_list_never_allocate(void) {
  amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
  amp_dtype in[3] = { AMP_F16, AMP_F32, AMP_F16 };
  long before = t_allocs;
  size_t r;
  for (r = 0; r < sizeof mode_table / sizeof *mode_table; r++) {
    amp_policy_decide(p, mode_table[r].op, in, 3);
    amp_policy_list(p, mode_table[r].op);
  }
  EXPECT(t_allocs == before, "decide/list allocated %ld times", t_allocs - before);
  amp_policy_destroy(p);
}

/* Each changing call run with its 1st, 2nd, ... allocation failing: it either succeeds or
   answers AMP_ERR_NOMEM with the policy exactly as before (and leaks nothing: ASan, valgrind). */
static void every_change_is_all_or_nothing_when_memory_runs_out(void) {
  static const char *const white[] = { "softmax", "new_white_a", "new_white_b" }, *const black[] = { "matmul", "new_black" };
  int call;
  long k;
  for (call = 0; call < 4; call++) {
    for (k = 0; k < 64; k++) {
      amp_policy *p = new_policy(AMP_MODE_MIXED, AMP_F16);
      char *before = dump(p), *after;
      amp_status st;
      t_allocs = 0; t_fail_at = k;
      st = call == 0 ? load(p, ascend_template)
         : call == 1 ? amp_policy_customize(p, white, 3, black, 2)
         : call == 2 ? amp_policy_set(p, "brand_new_op", AMP_LIST_GRAY)
         : load(p, "{\"white-list\": {\"to-add\": [\"x1\", \"x2\", \"x3\", \"x4\", \"x5\"]}}");
      t_fail_at = -1;
      after = dump(p);
      EXPECT(st == AMP_OK || (st == AMP_ERR_NOMEM && strcmp(before, after) == 0 && strstr(amp_last_error(), "out of memory")),
             "call %d, allocation %ld failing: got %s, policy %s", call, k, amp_status_string(st), strcmp(before, after) ? "changed" : "unchanged");
      free(before); free(after);
      amp_policy_destroy(p);
      if (st == AMP_OK) break;   /* k passed the last allocation: every earlier one was tried */
    }
  }
  for (k = 0; k < 400; k++) {   /* create: NOMEM and no policy, or a whole one */
    amp_policy *p = NULL;
    amp_status st;
    t_allocs = 0; t_fail_at = k;
    st = amp_policy_create(&p, AMP_MODE_PURE, AMP_BF16);
    t_fail_at = -1;
    EXPECT(st == AMP_OK || (st == AMP_ERR_NOMEM && p == NULL), "create with allocation %ld failing: %s", k, amp_status_string(st));
    amp_policy_destroy(p);
    if (st == AMP_OK) break;
  }
}

/* ---- concurrent readers ------------------------------------------------------------------- */

typedef struct reader_arg { const amp_policy *mixed, *pure; amp_dtype low; long iters, errors; } reader_arg;

static void *reader(void *arg) {
  reader_arg *a = (reader_arg *)arg;
  long it;
  size_t r;
  for (it = 0; it < a->iters; it++) {
    for (r = 0; r < sizeof mode_table / sizeof *mode_table; r++) {
      const mode_row *row = &mode_table[r];
      amp_dtype in[8];
      size_t n = make_inputs(row->inputs, a->low, in);
      if (amp_policy_decide(a->mixed, row->op, in, n) != (row->mixed == 'L' ? a->low : AMP_F32)) a->errors++;
      if (amp_policy_decide(a->pure, row->op, in, n) != (row->pure == 'L' ? a->low : AMP_F32)) a->errors++;
    }
    if (amp_policy_list(a->mixed, "matmul_v2") != AMP_LIST_WHITE || amp_policy_list(a->mixed, "softmax") != AMP_LIST_BLACK ||
        amp_policy_list(a->pure, "RELU") != AMP_LIST_GRAY || amp_policy_list(a->pure, "nope") != AMP_LIST_NONE)
      a->errors++;
  }
  return NULL;
}

static void concurrent_decide_and_list_from_four_threads_agree(void) {
  amp_policy *mixed = new_policy(AMP_MODE_MIXED, AMP_F16), *pure = new_policy(AMP_MODE_PURE, AMP_F16);
  pthread_t th[4];
  reader_arg args[4];
  int i, started = 0;
  for (i = 0; i < 4; i++) {
    args[i].mixed = mixed; args[i].pure = pure; args[i].low = AMP_F16;
    args[i].iters = t_quick() ? 50 : 2000; args[i].errors = 0;
    if (pthread_create(&th[i], NULL, reader, &args[i]) == 0) started++;
  }
  EXPECT(started == 4, "started %d of 4 threads", started);
  for (i = 0; i < started; i++) pthread_join(th[i], NULL);
  for (i = 0; i < started; i++) EXPECT(args[i].errors == 0, "thread %d: %ld wrong answers", i, args[i].errors);
  amp_policy_destroy(mixed); amp_policy_destroy(pure);
}

/* A JSON escape can put a newline or a control byte into a name: the dump writes it escaped, so
   every op stays on one line of its own (found by the fuzzer). */
static void dump_escapes_control_bytes_in_names(void) {
  static const char js[] = "{\"white-list\": {\"to-add\": [\"my\\nop\", \"tab\\tx\\u0001\", \"back\\\\slash\"]}}";
  amp_policy *p = NULL;
  size_t need = 0;
  char *d;
  amp_status st;
  if (amp_policy_create(&p, AMP_MODE_MIXED, AMP_F16) != AMP_OK) { EXPECT(0, "create: %s", amp_last_error()); return; }
  st = amp_policy_load_mixlist(p, js, sizeof js - 1);
  EXPECT(st == AMP_OK, "load %s: expected AMP_OK, got %s (%s)", js, amp_status_string(st), amp_last_error());
  EXPECT(amp_policy_list(p, "my\nop") == AMP_LIST_WHITE, "my\\nop: expected white, got %d", (int)amp_policy_list(p, "my\nop"));
  amp_policy_dump(p, NULL, 0, &need);
  d = (char *)malloc(need);
  if (d && amp_policy_dump(p, d, need, NULL) == AMP_OK) {
    EXPECT(strstr(d, "\nwhite my\\nop\n") != NULL, "expected the line `white my\\nop` in the dump");
    EXPECT(strstr(d, "\nwhite tab\\tx\\u0001\n") != NULL, "expected the line `white tab\\tx\\u0001` in the dump");
    EXPECT(strstr(d, "\nwhite back\\\\slash\n") != NULL, "expected the line `white back\\\\slash` in the dump");
    EXPECT(strstr(d, "\nop\n") == NULL, "a name split its line: `op` stands alone");
  } else EXPECT(0, "dump failed: %s", amp_last_error());
  free(d);
  amp_policy_destroy(p);
}

int main(void) {
  RUN(create_rejects_unknown_mode_and_low_type);
  RUN(builtin_lists_hold_pytorch_and_paddle_names);
  RUN(every_mode_matches_its_anchor_on_the_op_table);
  RUN(keep_mode_answers_the_inputs_own_type);
  RUN(decide_answers_f32_for_bad_arguments);
  RUN(names_compare_case_insensitively);
  RUN(long_names_are_copied_and_compared_in_full);
  RUN(set_moves_an_op_and_none_unlists_it);
  RUN(set_rejects_bad_arguments_and_changes_nothing);
  RUN(paddle_custom_lists_move_ops_out_of_every_other_list);
  RUN(paddle_overlapping_custom_lists_are_an_error_and_change_nothing);
  RUN(ascend_template_example_moves_each_op_as_documented);
  RUN(ascend_op_removed_from_white_without_black_ends_gray);
  RUN(ascend_to_remove_leaves_an_op_that_is_not_on_that_list);
  RUN(ascend_sketch_with_bare_names_is_rejected_with_its_position);
  RUN(mixlist_accepts_strict_json_escapes_bom_and_comments);
  RUN(mixlist_bad_input_is_a_parse_error_with_position_and_changes_nothing);
  RUN(mixlist_deep_nesting_is_rejected_where_it_starts);
  RUN(mixlist_null_arguments_are_arg_errors);
  RUN(mixlist_file_loads_and_reports_path_and_position);
  RUN(dump_lists_every_op_once_sorted_with_its_list);
  RUN(decide_and_list_never_allocate);
  RUN(every_change_is_all_or_nothing_when_memory_runs_out);
  RUN(concurrent_decide_and_list_from_four_threads_agree);
  RUN(dump_escapes_control_bytes_in_names);
  TEST_END();
}
