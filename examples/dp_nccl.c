/* examples/dp_nccl.c - data-parallel mixed precision with NCCL: one process per GPU.

   The GPU twin of examples/dp_threads.c (read that one first): the same regression model, each rank
   training on its shard of the data, gradients averaged with amp_nccl_allreduce_grads, a ZeRO-1
   optimizer (each rank owns a slice of the fp32 masters, then ncclAllGather swaps the slices), and
   the scaler's NCCL hook, so an overflow on one rank skips the step on every rank. No kernels of its
   own: the forward and backward are three amp_gemm calls.

   Build (amp_kernels.cu with NCCL, then this file with AMP_CUDA and AMP_NCCL; -isystem keeps the
   CUDA headers out of -Wpedantic):
     nvcc -O3 -arch=sm_90 -DAMP_NCCL -c amp_kernels.cu -o amp_kernels_nccl.o
     cc -std=c99 -O2 -DAMP_CUDA -DAMP_NCCL -I. -isystem /usr/local/cuda/include examples/dp_nccl.c amp_kernels_nccl.o \
        -L/usr/local/cuda/lib64 -lnccl -lcudart -lcublasLt -lcublas -lstdc++ -lm -o dp_nccl
   Run, one process per GPU, bootstrapped through environment variables and a file:
     AMP_WORLD=2 AMP_RANK=0 ./dp_nccl & AMP_WORLD=2 AMP_RANK=1 ./dp_nccl; wait
   AMP_RANK / AMP_WORLD (or RANK / WORLD_SIZE as torchrun sets them, OMPI_COMM_WORLD_RANK / _SIZE
   under mpirun, SLURM_PROCID / SLURM_NTASKS under srun; none: a single rank). Rank 0 writes the
   ncclUniqueId to AMP_NCCL_ID_FILE (default /tmp/amp_nccl_id; on a shared file system for several
   machines; delete it before a new run); the others wait for it. GPU = AMP_LOCAL_RANK (or
   LOCAL_RANK, else rank modulo the GPUs present). Exits 1 if the ranks end up different. */
#define _POSIX_C_SOURCE 200112L   /* nanosleep */
#define AMP_IMPLEMENTATION
#include "amp.h"
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FEAT 16
#define P (FEAT + 1)            /* 16 weights and a bias (a column of ones in X) */
#define SAMPLES 4096            /* split evenly over the ranks */
#define STEPS 300
#define PLANT_STEP 40
#define PLANT_PARAM 5

#define CUDA_OK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "rank %d: %s: %s (%s:%d)\n", rank, #x, cudaGetErrorString(e_), __FILE__, __LINE__); exit(1); } } while (0)
#define NCCL_OK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { \
    fprintf(stderr, "rank %d: %s: %s (%s:%d)\n", rank, #x, ncclGetErrorString(r_), __FILE__, __LINE__); exit(1); } } while (0)
#define AMP_OK_OR_DIE(x) do { if ((x) != AMP_OK) { \
    fprintf(stderr, "rank %d: %s: %s\n", rank, #x, amp_last_error()); exit(1); } } while (0)

static int rank;

static int env_int(const char *const *names, int fallback) {
  for (; *names; names++) { const char *v = getenv(*names); if (v && *v) return atoi(v); }
  return fallback;
}

/* ---- 1. bootstrap: rank 0 makes the NCCL id and leaves it in a file; the others read it ---- */
static ncclUniqueId bootstrap_id(int world) {
  ncclUniqueId id;
  const char *path = getenv("AMP_NCCL_ID_FILE") ? getenv("AMP_NCCL_ID_FILE") : "/tmp/amp_nccl_id";
  char tmp[1024];
  FILE *f;
  int waited = 0;
  if (world == 1 || rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    if (world == 1) return id;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);       /* write then rename: readers never see half an id */
    if (!(f = fopen(tmp, "wb")) || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      fprintf(stderr, "rank 0: cannot write the NCCL id to %s\n", path); exit(1);
    }
    return id;
  }
  for (;;) {
    if ((f = fopen(path, "rb"))) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    if (++waited > 600) { fprintf(stderr, "rank %d: no NCCL id in %s after 60 s\n", rank, path); exit(1); }
    { struct timespec ts = {0, 100000000}; nanosleep(&ts, NULL); }
  }
}

int main(void) {
  static const char *rank_vars[] = {"AMP_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", NULL};
  static const char *world_vars[] = {"AMP_WORLD", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", NULL};
  static const char *local_vars[] = {"AMP_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", NULL};
  int world, gpus = 0, gpu, per, slice, padded, lo, step, k, i, skips = 0, status = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;
  amp_device *d;
  amp_scaler *sc;
  amp_optimizer *opt;
  amp_optim_config oc;
  amp_f16 *X16, *w, *g, *hx16;
  float *X32, *err, *neg_y, *loss_d, *hx32, *hy, w_true[P], loss = 0.0f, last_loss = 0.0f;
  double *check;
  unsigned long seed = 12345;

  rank = env_int(rank_vars, 0);
  world = env_int(world_vars, 1);
  if (world < 1 || rank < 0 || rank >= world) { fprintf(stderr, "rank %d of %d: bad AMP_RANK / AMP_WORLD\n", rank, world); return 2; }
  if (SAMPLES % world) { fprintf(stderr, "%d ranks do not divide %d samples\n", world, SAMPLES); return 2; }
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    const char *req = getenv("AMP_REQUIRE_GPU");   /* make gpu-check: a GPU machine, so no GPU is a failure */
    printf("rank %d: no GPU here, nothing to do\n", rank);
    return req && *req && *req != '0' ? 1 : 0;
  }
  gpu = env_int(local_vars, rank % gpus) % gpus;
  CUDA_OK(cudaSetDevice(gpu));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  id = bootstrap_id(world);
  NCCL_OK(ncclCommInitRank(&comm, world, id, rank));

  /* ---- 2. the model, the data shard, the optimizer slice ------------------------------------
     The parameters are padded to a multiple of the ranks, so every rank owns an equal slice (as
     ncclAllGather wants); the padding's gradients are 0, its weights stay 0. */
  per = SAMPLES / world;
  slice = (P + world - 1) / world;
  padded = slice * world;
  lo = rank * slice;
  CUDA_OK(cudaMalloc((void **)&X16, (size_t)per * padded * sizeof(amp_f16)));
  CUDA_OK(cudaMalloc((void **)&X32, (size_t)per * padded * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&neg_y, (size_t)per * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&err, (size_t)per * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&loss_d, sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&w, (size_t)padded * sizeof(amp_f16)));
  CUDA_OK(cudaMalloc((void **)&g, (size_t)padded * sizeof(amp_f16)));
  CUDA_OK(cudaMalloc((void **)&check, 4 * sizeof(double)));
  CUDA_OK(cudaMemset(w, 0, (size_t)padded * sizeof(amp_f16)));   /* every replica starts equal */
  hx16 = (amp_f16 *)calloc((size_t)per * padded, sizeof(amp_f16));
  hx32 = (float *)calloc((size_t)per * padded, sizeof(float));
  hy = (float *)calloc((size_t)per, sizeof(float));
  if (!hx16 || !hx32 || !hy) { fprintf(stderr, "out of memory\n"); return 1; }
  for (k = 0; k < P; k++) { seed = seed * 6364136223846793005ul + 1442695040888963407ul; w_true[k] = (float)((seed >> 33) % 4001) / 1000.0f - 2.0f; }
  for (i = 0; i < SAMPLES; i++) {   /* everyone draws the whole set, keeps its shard */
    float x[P], y = 0.0f;
    for (k = 0; k < P; k++) {
      seed = seed * 6364136223846793005ul + 1442695040888963407ul;
      x[k] = k == FEAT ? 1.0f : amp_f16_to_f32(amp_f32_to_f16((float)((seed >> 33) % 2001) / 1000.0f - 1.0f));
      y += x[k] * w_true[k];
    }
    if (i / per != rank) continue;
    for (k = 0; k < P; k++) { hx16[(size_t)(i % per) * padded + k] = amp_f32_to_f16(x[k]); hx32[(size_t)(i % per) * padded + k] = x[k]; }
    hy[i % per] = -y;
  }
  CUDA_OK(cudaMemcpy(X16, hx16, (size_t)per * padded * sizeof(amp_f16), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(X32, hx32, (size_t)per * padded * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(neg_y, hy, (size_t)per * sizeof(float), cudaMemcpyHostToDevice));

  AMP_OK_OR_DIE(amp_cuda_open(&d, gpu, stream));
  memset(&oc, 0, sizeof oc);
  oc.kind = AMP_ADAMW; oc.lr = 0.02f; oc.max_grad_norm = 0.5f;
  AMP_OK_OR_DIE(amp_scaler_create(&sc, d, NULL));
  AMP_OK_OR_DIE(amp_optimizer_create(&opt, d, &oc));
  AMP_OK_OR_DIE(amp_optimizer_add(opt, AMP_F16, w + lo, g + lo, (size_t)slice));   /* ZeRO-1: my slice only */
  /* ---- 3. the one line: found_inf and the squared norm are summed over all ranks ---- */
  AMP_OK_OR_DIE(amp_scaler_set_allreduce(sc, amp_nccl_allreduce_hook, comm));

  for (step = 0; step < STEPS; step++) {
    float scale = amp_scaler_get_scale(sc);   /* waits for the stream: fine for a teaching example */
    /* forward: err = X w - y; loss = err . err / per */
    CUDA_OK(cudaMemcpyAsync(err, neg_y, (size_t)per * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    AMP_OK_OR_DIE(amp_gemm(d, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, per, 1, padded, 1.0f,
                           X16, AMP_F16, padded, w, AMP_F16, 1, 1.0f, err, AMP_F32, 1));
    AMP_OK_OR_DIE(amp_gemm(d, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_NO_TRANS, 1, 1, per, 1.0f / (float)per,
                           err, AMP_F32, per, err, AMP_F32, 1, 0.0f, loss_d, AMP_F32, 1));
    /* backward of (loss * scale): g = (2 scale / per) X^T err, rounded to f16 (inf if it overflows) */
    AMP_OK_OR_DIE(amp_gemm(d, AMP_ROW_MAJOR, AMP_TRANS, AMP_NO_TRANS, padded, 1, per, 2.0f * scale / (float)per,
                           X32, AMP_F32, padded, err, AMP_F32, 1, 0.0f, g, AMP_F16, 1));
    if (step == PLANT_STEP && rank == world / 2) {   /* an overflow on this rank only */
      amp_f16 inf = 0x7c00;
      CUDA_OK(cudaMemcpyAsync(g + PLANT_PARAM, &inf, sizeof inf, cudaMemcpyHostToDevice, stream));
    }
    /* the mean over ranks, reduced in fp32 (see amp.h for why) */
    AMP_OK_OR_DIE(amp_nccl_allreduce_grads(d, comm, g, AMP_F16, (size_t)padded, 1, 1));
    /* unscale my slice, the hook (every rank agrees on skip and norm), update or skip, the scale rule */
    AMP_OK_OR_DIE(amp_scaler_step(sc, opt));
    AMP_OK_OR_DIE(amp_scaler_update(sc));
    /* all-gather the updated slices: in place, my slice already sits at w + rank * slice */
    NCCL_OK(ncclAllGather(w + lo, w, (size_t)slice, ncclHalf, comm, stream));
    NCCL_OK(ncclAllReduce(loss_d, loss_d, 1, ncclFloat, ncclAvg, comm, stream));
    CUDA_OK(cudaMemcpyAsync(&loss, loss_d, sizeof loss, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    skips += amp_scaler_last_skipped(sc);
    if (rank == 0 && (step < 3 || step == PLANT_STEP || step % 50 == 0 || step == STEPS - 1))
      printf("step %3d  loss %-9.5f scale %-6g global grad norm %-9.3g %s\n", step, (double)loss, (double)scale,
             (double)amp_optimizer_grad_norm(opt), amp_scaler_last_skipped(sc) ? "all ranks skipped" : "all ranks updated");
    last_loss = loss;
  }

  /* ---- 4. did the ranks stay in lockstep? max and min over ranks of a hash of the weights and the scale */
  {
    amp_f16 hw[P];
    double mine[4], all[4];
    unsigned h = 2166136261u;
    CUDA_OK(cudaMemcpy(hw, w, sizeof hw, cudaMemcpyDeviceToHost));
    for (k = 0; k < P; k++) h = (h ^ hw[k]) * 16777619u;
    mine[0] = (double)h; mine[1] = -(double)h;
    mine[2] = (double)amp_scaler_get_scale(sc); mine[3] = -mine[2];
    CUDA_OK(cudaMemcpy(check, mine, sizeof mine, cudaMemcpyHostToDevice));
    NCCL_OK(ncclAllReduce(check, check, 4, ncclDouble, ncclMax, comm, stream));
    CUDA_OK(cudaMemcpyAsync(all, check, sizeof all, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    if (all[0] != -all[1] || all[2] != -all[3]) status = 1;
    if (rank == 0)
      printf("\n%d ranks, %d of %d steps skipped, final loss %.5f: the ranks %s (weights hash %08x, scale %g).\n",
             world, skips, STEPS, (double)last_loss, status ? "DIVERGED" : "hold identical weights and scales",
             h, mine[2]);
  }
  amp_optimizer_destroy(opt);
  amp_scaler_destroy(sc);
  amp_device_close(d);
  ncclCommDestroy(comm);
  cudaFree(X16); cudaFree(X32); cudaFree(neg_y); cudaFree(err); cudaFree(loss_d); cudaFree(w); cudaFree(g); cudaFree(check);
  cudaStreamDestroy(stream);
  free(hx16); free(hx32); free(hy);
  return status;
}
