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

/* One dumped name (the text after the 6-character list column, up to '\n') with the dump's escapes
   (\\ \n \t \u00XX) undone, into out (NUL-terminated); returns its length. */
static size_t unescape_name(const char *s, char *out) {
  size_t k = 0;
  while (*s && *s != '\n') {
    if (*s == '\\') {
      s++;
      if (*s == 'n') { out[k++] = '\n'; s++; }
      else if (*s == 't') { out[k++] = '\t'; s++; }
      else if (*s == 'u') { out[k++] = (char)strtol((char[]){s[1], s[2], s[3], s[4], 0}, NULL, 16); s += 5; }
      else out[k++] = *s++;
    } else out[k++] = *s++;
  }
  out[k] = 0;
  return k;
}

/* The policy's order: case-insensitive (ASCII), byte by byte. */
static int ci_cmp(const char *a, const char *b) {
  for (;; a++, b++) {
    int x = (*a >= 'A' && *a <= 'Z') ? *a + 32 : (unsigned char)*a;
    int y = (*b >= 'A' && *b <= 'Z') ? *b + 32 : (unsigned char)*b;
    if (x != y || !x) return x - y;
  }
}

/* Every line after the header is one op: a name never splits its line (the dump escapes control
   bytes), and the names, read back, are sorted case-insensitively with no duplicates. */
static void check_sorted(const char *d) {
  const char *line = strchr(d, '\n') + 1;
  char *prev = (char *)malloc(strlen(d) + 1), *cur = (char *)malloc(strlen(d) + 1);
  int have_prev = 0;
  while (*line) {
    const char *next = strchr(line, '\n');
    if (!next || next - line < 7 ||
        (strncmp(line, "white ", 6) && strncmp(line, "black ", 6) && strncmp(line, "gray  ", 6))) {
      fprintf(stderr, "dump line is not `list name`: %.80s\n", line);
      abort();
    }
    unescape_name(line + 6, cur);
    if (have_prev && ci_cmp(prev, cur) >= 0) {
      fprintf(stderr, "dump not sorted at: %.80s\n", line);
      abort();
    }
    { char *t = prev; prev = cur; cur = t; }
    have_prev = 1;
    line = next + 1;
  }
  free(prev); free(cur);
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
