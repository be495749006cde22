/* bench/peers.h - runs bench/cpu_peers.py (PyTorch, NumPy) in a subprocess and reads its
   `key value` lines. The command runs with glibc told to keep freed memory (else PyTorch's
   temporaries page-fault every step) and without OPENBLAS_CORETYPE (it slows current OpenBLAS
   builds); python3 from PATH, else /usr/bin/python3 (or $AMP_PYTHON). */
#ifndef AMP_BENCH_PEERS_H
#define AMP_BENCH_PEERS_H
#include "bench.h"

#define PEERS_MAX 8
typedef struct peers { int n; char key[PEERS_MAX][64]; char val[PEERS_MAX][64]; } peers;

/* what: "adamw" or "astype" (and the module it needs: "torch" or "numpy"). Returns the lines it
   read (0 when Python or the module is missing; then why says so). */
static inline int peers_run(peers *p, const char *what, const char *module, size_t n, int reps, char *why, size_t cap) {
  char cmd[1024], k[64], v[64];
  FILE *f;
  memset(p, 0, sizeof *p);
  if (bench_emulated()) { snprintf(why, cap, "under an emulator: the peer would run on the host"); return 0; }
  snprintf(cmd, sizeof cmd,
           "for py in \"${AMP_PYTHON:-python3}\" /usr/bin/python3; do "
           "if \"$py\" -c 'import %s' >/dev/null 2>&1; then "
           "exec env -u OPENBLAS_CORETYPE MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 OMP_NUM_THREADS=1 "
           "\"$py\" bench/cpu_peers.py %s %zu %d; fi; done; echo 'missing 1'",
           module, what, n, reps);
  f = popen(cmd, "r");
  if (!f) { snprintf(why, cap, "popen failed"); return 0; }
  while (p->n < PEERS_MAX && fscanf(f, "%63s %63s", k, v) == 2) {
    if (!strcmp(k, "missing")) { snprintf(why, cap, "python3 with %s not found", module); break; }
    strcpy(p->key[p->n], k); strcpy(p->val[p->n], v); p->n++;
  }
  pclose(f);
  if (!p->n && !why[0]) snprintf(why, cap, "bench/cpu_peers.py %s printed nothing", what);
  return p->n;
}
static inline const char *peers_get(const peers *p, const char *key) {
  int i;
  for (i = 0; i < p->n; i++) if (!strcmp(p->key[i], key)) return p->val[i];
  return NULL;
}
static inline double peers_num(const peers *p, const char *key) {
  const char *v = peers_get(p, key);
  return v ? atof(v) : 0.0;
}
#endif
