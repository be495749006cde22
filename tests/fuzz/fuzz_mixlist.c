/* tests/fuzz/fuzz_mixlist.c - libFuzzer target for the Ascend modify_mixlist reader.
   Every input is a candidate mixlist file. Besides "no crash, no leak, no UB" it checks:
     - a failing load leaves the policy exactly as it was (compared through the dump), and a
       parse error's message carries "line L, column C";
     - a successful load is idempotent (loading the same text again changes nothing);
     - the dump stays sorted case-insensitively, with no duplicate names.
   Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_mixlist.c */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dump(const amp_policy *p) {
  size_t need = 0;
  char *s;
  if (amp_policy_dump(p, NULL, 0, &need) != AMP_OK) abort();
  if (!(s = (char *)malloc(need)) || amp_policy_dump(p, s, need, NULL) != AMP_OK) abort();
  return s;
}

static int ci_cmp_line(const char *a, const char *b) {   /* names end at '\n' */
  for (;; a++, b++) {
    int x = *a == '\n' ? 0 : (*a >= 'A' && *a <= 'Z') ? *a + 32 : (unsigned char)*a;
    int y = *b == '\n' ? 0 : (*b >= 'A' && *b <= 'Z') ? *b + 32 : (unsigned char)*b;
    if (x != y || !x) return x - y;
  }
}

/* Names are the text after the 6-character list column. A name may itself hold '\n' (from a
   "\n" escape), which splits its line; such dumps are skipped rather than misread. */
static void check_sorted(const char *d) {
  const char *line = strchr(d, '\n') + 1, *prev = NULL;
  while (*line) {
    const char *next = strchr(line, '\n');
    if (!next || next - line < 7) return;
    if (strncmp(line, "white ", 6) && strncmp(line, "black ", 6) && strncmp(line, "gray  ", 6)) return;
    if (prev && ci_cmp_line(prev, line + 6) >= 0) {
      fprintf(stderr, "dump not sorted at: %.80s\n", line);
      abort();
    }
    prev = line + 6;
    line = next + 1;
  }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  static const char *const probes[] = { "matmul", "Yolo", "relu", "softmax", "Bias", "a" };
  amp_policy *p;
  char *before, *after;
  amp_status st;
  size_t i;
  if (amp_policy_create(&p, AMP_MODE_MIXED, AMP_F16) != AMP_OK) abort();
  amp_policy_set(p, "Yolo", AMP_LIST_BLACK);
  before = dump(p);
  st = amp_policy_load_mixlist(p, (const char *)data, size);
  after = dump(p);
  if (st != AMP_OK) {
    if (st != AMP_ERR_PARSE && st != AMP_ERR_NOMEM) { fprintf(stderr, "unexpected status %s\n", amp_status_string(st)); abort(); }
    if (strcmp(before, after) != 0) { fprintf(stderr, "a failing load changed the policy: %s\n", amp_last_error()); abort(); }
    if (st == AMP_ERR_PARSE && (!strstr(amp_last_error(), "line ") || !strstr(amp_last_error(), ", column "))) {
      fprintf(stderr, "parse error without a position: %s\n", amp_last_error());
      abort();
    }
  } else {
    char *again;
    if (amp_policy_load_mixlist(p, (const char *)data, size) != AMP_OK) { fprintf(stderr, "second load failed: %s\n", amp_last_error()); abort(); }
    again = dump(p);
    if (strcmp(after, again) != 0) { fprintf(stderr, "loading the same mixlist twice is not idempotent\n"); abort(); }
    free(again);
    check_sorted(after);
  }
  for (i = 0; i < sizeof probes / sizeof *probes; i++) {
    amp_dtype in[2] = { AMP_F16, AMP_F32 };
    amp_dtype got = amp_policy_decide(p, probes[i], in, 2);
    if (got != AMP_F16 && got != AMP_F32) abort();
  }
  free(before); free(after);
  amp_policy_destroy(p);
  return 0;
}
