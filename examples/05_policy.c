/* 05_policy.c - the op-list policy decides, op by op, which dtype each op computes in.

   A C trainer has no framework to intercept its ops, so it asks: "this op, with inputs of
   these dtypes: f32 or low?" amp_policy_decide answers from three lists:

     white  always low (matmuls, linear, conv: Tensor Core work, safe in f16)
     black  always f32 (softmax, losses, exp/log, norms: wide range or long sums)
     gray   follows its inputs: f32 if any input is f32, else low (relu, add, dropout, ...)

   and a mode (PyTorch autocast = MIXED, Paddle O2 / apex O2 = PURE, Ascend's force_fp16, ...).
   This program walks an MLP and a pre-norm transformer block op by op, feeding each op's
   decided dtype to the next, in MIXED and in PURE mode, and again after loading an Ascend
   mixlist file that edits the lists (examples/mixlist.json, or the path in argv[1]).
   Exits 1 if a decision stated below does not come out.

   Build:  cc -std=c99 -O2 -I. examples/05_policy.c -o 05_policy -lm */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static void claim(int holds, const char *what) {
  printf("  %s %s\n", holds ? "[ok]" : "[WRONG]", what);
  if (!holds) failures++;
}

/* An op of a network: its name, and which earlier op's output is its second input (the
   residual of an add), -1 for none, -2 for the network's input. */
typedef struct { const char *op, *what; int extra; } node;

static const node mlp[] = {
  { "linear", "x W1 + b1", -1 }, { "relu", "", -1 }, { "linear", "h W2 + b2", -1 }, { "relu", "", -1 },
  { "linear", "h W3 + b3 (logits)", -1 }, { "softmax", "", -1 }, { "cross_entropy", "loss", -1 },
};
static const node block[] = {
  { "layer_norm", "ln1(x)", -1 }, { "linear", "q, k, v projections", -1 }, { "bmm", "q k^T", -1 },
  { "scale", "/ sqrt(d)", -1 }, { "softmax", "attention weights", -1 }, { "dropout", "", -1 },
  { "bmm", "weights v", -1 }, { "linear", "output projection", -1 }, { "elementwise_add", "x + attention (residual)", -2 },
  { "layer_norm", "ln2", -1 }, { "linear", "fc1", -1 }, { "gelu", "", -1 }, { "linear", "fc2", -1 },
  { "elementwise_add", "residual", 8 },
};

static char list_char(amp_list l) { return l == AMP_LIST_WHITE ? 'W' : l == AMP_LIST_BLACK ? 'B' : l == AMP_LIST_GRAY ? 'G' : '-'; }
static const char *dt(amp_dtype t) { return t == AMP_F16 ? "f16" : t == AMP_BF16 ? "bf16" : "f32"; }

/* Decides every op of a network in order; out[i] is op i's dtype. The input arrives in f32. */
static void walk(const amp_policy *p, const node *net, int n, amp_dtype *out) {
  int i;
  for (i = 0; i < n; i++) {
    amp_dtype in[2];
    size_t nin = 1;
    in[0] = i == 0 ? AMP_F32 : out[i - 1];
    if (net[i].extra == -2) in[nin++] = AMP_F32;
    else if (net[i].extra >= 0) in[nin++] = out[net[i].extra];
    out[i] = amp_policy_decide(p, net[i].op, in, nin);
  }
}

static amp_policy *make(amp_mode mode, const char *mixlist) {
  amp_policy *p = NULL;
  if (amp_policy_create(&p, mode, AMP_F16) != AMP_OK || (mixlist && amp_policy_load_mixlist_file(p, mixlist) != AMP_OK)) {
    printf("amp.h: %s\n", amp_last_error());
    exit(1);
  }
  return p;
}

/* Prints the table of one network and returns its three columns in d[0..2]. */
static void table(const char *title, const node *net, int n, amp_policy *const pol[3], amp_dtype d[3][16]) {
  int i, k;
  for (k = 0; k < 3; k++) walk(pol[k], net, n, d[k]);
  printf("%s\n\n  %-3s %-16s %-26s %5s %6s %6s   %5s %8s\n", title, "#", "op", "", "list", "MIXED", "PURE", "list", "+mixlist");
  for (i = 0; i < n; i++)
    printf("  %-3d %-16s %-26s %5c %6s %6s   %5c %8s\n", i, net[i].op, net[i].what, list_char(amp_policy_list(pol[0], net[i].op)),
           dt(d[0][i]), dt(d[1][i]), list_char(amp_policy_list(pol[2], net[i].op)), dt(d[2][i]));
  printf("\n");
}

int main(int argc, char **argv) {
  const char *mixlist = argc > 1 ? argv[1] : "examples/mixlist.json";
  amp_policy *pol[3];
  amp_dtype a[3][16], b[3][16];
  const int nm = (int)(sizeof mlp / sizeof mlp[0]), nb = (int)(sizeof block / sizeof block[0]);
  int k;

  pol[0] = make(AMP_MODE_MIXED, NULL);
  pol[1] = make(AMP_MODE_PURE, NULL);
  pol[2] = make(AMP_MODE_MIXED, mixlist);
  printf("Low type f16. list: W white, B black, G gray, - on no list (behaves as gray).\n"
         "MIXED = PyTorch autocast / Paddle O1; PURE = Paddle O2 / apex O2; +mixlist = MIXED after %s\n\n", mixlist);
  table("An MLP classifier (input in f32)", mlp, nm, pol, a);
  table("A pre-norm transformer block (input x in f32)", block, nb, pol, b);

  claim(a[0][0] == AMP_F16 && a[0][1] == AMP_F16, "MIXED: linear is white, so it runs in f16 though its input is f32; relu follows it");
  claim(a[0][5] == AMP_F32 && a[0][6] == AMP_F32, "MIXED: softmax and the loss are black: f32");
  claim(b[0][0] == AMP_F32 && b[0][1] == AMP_F16, "MIXED: layer_norm is black (f32), the projections after it white (f16)");
  claim(b[0][8] == AMP_F32 && b[0][13] == AMP_F32, "MIXED: a residual add is gray and its f32 input x wins: f32");
  claim(b[1][8] == AMP_F16 && b[1][9] == AMP_F32, "PURE: the residual add runs in f16, but norms stay f32 (Paddle O2 keeps them)");
  claim(b[1][4] == AMP_F32, "PURE: black ops (softmax) still run in f32");
  claim(amp_policy_list(pol[2], "bmm") == AMP_LIST_BLACK && b[2][2] == AMP_F32, "mixlist: bmm added to the black list runs in f32");
  claim(amp_policy_list(pol[2], "softmax") != AMP_LIST_BLACK && a[2][5] == AMP_F16 && b[2][4] == AMP_F32,
        "mixlist: softmax removed from black is gray: f16 after the MLP's f16 logits, f32 after the f32 bmm");
  claim(amp_policy_list(pol[2], "gelu") == AMP_LIST_WHITE && b[2][11] == AMP_F16, "mixlist: gelu added to white runs in f16");
  for (k = 0; k < 3; k++) amp_policy_destroy(pol[k]);
  if (failures) { printf("\n%d claim(s) did not hold\n", failures); return 1; }
  return 0;
}
