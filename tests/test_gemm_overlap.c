/* tests/test_gemm_overlap.c - amp_gemm / amp_gemm_ex refuse an output C that overlaps A, B or the
   bias (AMP_ERR_ARG naming the function and the argument, C unchanged), in every layout and
   transposition, and accept buffers that only touch. */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <string.h>

#define M 5
#define N 4
#define K 3

static void an_output_overlapping_an_input_is_refused_and_unchanged(void) {
  static float buf[4096];
  int L, ta, tb, which, shift;
  int refused = 0, tried = 0;
  for (L = 0; L < 2; L++)
    for (ta = 0; ta < 2; ta++)
      for (tb = 0; tb < 2; tb++)
        for (which = 0; which < 3; which++)      /* C overlaps A, B or the bias */
          for (shift = -3; shift <= 3; shift++) { /* C starts a few elements before/after the input's start */
            amp_layout lay = L ? AMP_COL_MAJOR : AMP_ROW_MAJOR;
            int lda = (lay == AMP_ROW_MAJOR) == (ta == 0) ? K : M;   /* the stored line length of A */
            int ldb = (lay == AMP_ROW_MAJOR) == (tb == 0) ? N : K;
            int ldc = lay == AMP_ROW_MAJOR ? N : M;
            float *A = buf + 100, *B = buf + 300, *bias = buf + 500, *C;
            float *in = which == 0 ? A : which == 1 ? B : bias;
            float before[M * N];
            amp_gemm_opts opts;
            amp_status st;
            const char *want = which == 0 ? "overlaps A" : which == 1 ? "overlaps B" : "overlaps opts->bias";
            size_t i;
            for (i = 0; i < 4096; i++) buf[i] = (float)(i % 7) - 3.0f;
            C = in + shift;
            memcpy(before, C, sizeof before);
            memset(&opts, 0, sizeof opts);
            if (which == 2) opts.bias = bias;
            st = amp_gemm_ex(amp_cpu(), lay, (amp_trans)ta, (amp_trans)tb, M, N, K, 1.0f, A, AMP_F32, lda, B, AMP_F32, ldb,
                             0.0f, C, AMP_F32, ldc, &opts);
            tried++;
            if (st == AMP_ERR_ARG && strstr(amp_last_error(), want) && strstr(amp_last_error(), which == 2 ? "amp_gemm_ex" : "amp_gemm")) refused++;
            else EXPECT(0, "layout %d ta %d tb %d, C = %s%+d: expected AMP_ERR_ARG '... %s', got %s '%s'", L, ta, tb,
                        which == 0 ? "A" : which == 1 ? "B" : "bias", shift, want, amp_status_string(st), amp_last_error());
            EXPECT(memcmp(before, C, sizeof before) == 0, "layout %d ta %d tb %d which %d shift %d: a refused call wrote C", L, ta, tb, which, shift);
          }
  EXPECT(refused == tried, "%d of %d overlapping calls refused", refused, tried);
  {   /* plain amp_gemm with C == A names amp_gemm and A */
    float A[M * K], B[K * N];
    amp_status st;
    memset(A, 0, sizeof A); memset(B, 0, sizeof B);
    st = amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 3, 3, 3, 1.0f, A, AMP_F32, 3, B, AMP_F32, 3, 0.0f, A, AMP_F32, 3);
    EXPECT(st == AMP_ERR_ARG && strstr(amp_last_error(), "amp_gemm: C") && strstr(amp_last_error(), "overlaps A"),
           "C == A: %s '%s'", amp_status_string(st), amp_last_error());
  }
}

/* Buffers that end exactly where C begins (or begin where it ends) are fine, and so is k = 0 with C
   over A (A is not read then). */
static void touching_buffers_and_k_zero_are_accepted(void) {
  static float buf[1024];
  float *A = buf, *C = buf + M * K, *B = C + M * N, *bias = B + K * N;
  amp_gemm_opts opts;
  amp_status st;
  size_t i;
  for (i = 0; i < 1024; i++) buf[i] = 1.0f;
  memset(&opts, 0, sizeof opts); opts.bias = bias;
  st = amp_gemm_ex(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, M, N, K, 1.0f, A, AMP_F32, K, B, AMP_F32, N, 0.0f, C, AMP_F32, N, &opts);
  EXPECT(st == AMP_OK, "touching buffers: %s '%s'", amp_status_string(st), amp_last_error());
  EXPECT(C[0] == (float)K + 1.0f, "C[0] = %g, expected %g", (double)C[0], (double)K + 1.0);
  st = amp_gemm(amp_cpu(), AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, M, N, 0, 1.0f, C, AMP_F32, 1, C, AMP_F32, N, 2.0f, C, AMP_F32, N);
  EXPECT(st == AMP_OK, "k 0 with A and B over C: %s '%s'", amp_status_string(st), amp_last_error());
}

int main(void) {
  RUN(an_output_overlapping_an_input_is_refused_and_unchanged);
  RUN(touching_buffers_and_k_zero_are_accepted);
  TEST_END();
}
