# amp.h - `make test` is the one command that proves the project works (it ends "N passed, M failed").
#   make test        header compile matrix, unit tests (plain, ASan+UBSan, valgrind), CUDA build
#                    (and GPU tests where a device is present), fuzzing, examples
#   make bench       CPU benchmarks (not tests; never fail the build)
#   make bench-arm   the CPU benchmarks cross-built for AArch64 and run under qemu-user: every
#                    line, no figures (an emulator's timings are not figures); `make bench` on an
#                    ARM machine (Mac, Grace) gives them, NEON against the portable loops
#   make bench-gpu   CUDA benchmarks against PyTorch (needs a GPU and python3 with torch)
#   make demo        the Fashion-MNIST trainer: fp32 against AMP
#   make demo-gpu    the same trainer with the model on a GPU
#   make gpt         the capstone: a small GPT trained in fp32, bf16, f16 and fp8 (a few minutes)
#   make deps        install the Debian packages make test needs (the list: tests/deps.sh)
CC      ?= cc
NVCC    ?= $(shell command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= /usr/local/cuda
CFLAGS  ?= -O2
WARN     = -std=c99 -Wall -Wextra -Wpedantic -Werror
B        = build
# The one place the nvcc flags are defined (tests/run.sh and tests/examples.sh read them with
# `make -s print-nvcc-flags`): SASS for sm_80 and sm_90, and compute_90 PTX so that newer GPUs
# compile it at load time instead of failing at the first launch (the targets built in parallel,
# --threads 0); every warning an error.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCC_FLAGS = -O3 -std=c++17 $(CUDA_ARCH) --threads 0 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
# NCCL (optional: the data-parallel calls, tests/cuda_nccl.c, examples/dp_nccl.c): the first of the
# CUDA toolkit, /usr and the NCCL that PyTorch's wheels bring (nvidia/nccl beside torch) that holds
# include/nccl.h; set NCCL_HOME to choose another. tests/run.sh reads it with `make -s print-nccl-home`.
NCCL_HOME ?= $(shell for d in $(CUDA_HOME) /usr $$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__ or list(nvidia.nccl.__path__)[0]))' 2>/dev/null); do [ -f $$d/include/nccl.h ] && echo $$d && break; done)
# amp_kernels.cu's flags with NCCL and a program's link flags for it (both empty without it):
# -DAMP_NCCL and NCCL's headers, -lnccl and its library directories (/usr's are the compilers' and
# linker's own paths: -isystem /usr/include breaks C++'s <cmath>). `make -s print-nccl-cflags`,
# `make -s print-nccl-libs`.
NCCL_CFLAGS = $(if $(NCCL_HOME),-DAMP_NCCL$(if $(filter /usr,$(NCCL_HOME)),, -isystem $(NCCL_HOME)/include))
NCCL_LIBS = $(if $(NCCL_HOME),$(if $(filter /usr,$(NCCL_HOME)),,$(foreach d,$(wildcard $(NCCL_HOME)/lib64 $(NCCL_HOME)/lib),-L$(d) -Wl,-rpath,$(d) ))-lnccl)
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lstdc++

.PHONY: test deps bench bench-arm bench-gpu demo demo-gpu gpt gpu-check gpu-prebuild print-nvcc-flags print-nccl-home \
        print-nccl-cflags print-nccl-libs clean

test:
	@sh tests/deps.sh check
	@sh tests/run.sh

deps:
	@sh tests/deps.sh install

print-nvcc-flags:
	@echo '$(NVCC_FLAGS)'

print-nccl-home:
	@echo '$(NCCL_HOME)'

print-nccl-cflags:
	@echo '$(NCCL_CFLAGS)'

print-nccl-libs:
	@echo '$(NCCL_LIBS)'

# On a machine with an NVIDIA GPU: the build, AMP_REQUIRE_GPU=1 make test, compute-sanitizer over
# every tests/cuda_* program, bench-gpu and demo-gpu; logs under $$OUT when set (tests/gpu_check.sh).
gpu-check:
	@sh tests/gpu_check.sh

# gpu-check's two nvcc builds of amp_kernels.cu, made here (no GPU needed) with a key each, to be
# carried to the GPU machine: gpu-check uses an object whose key matches instead of building it.
gpu-prebuild:
	@sh tests/gpu_check.sh prebuild

$(B):
	@mkdir -p $(B)

$(B)/amp_kernels.o: amp_kernels.cu amp_kernels.h amp.h | $(B)
	$(NVCC) $(NVCC_FLAGS) -I. -c amp_kernels.cu -o $@

# The same with NCCL's calls (make gpu-check builds it beside the plain one; make test otherwise).
$(B)/amp_kernels_nccl.o: amp_kernels.cu amp_kernels.h amp.h | $(B)
	$(NVCC) $(NVCC_FLAGS) -I. $(NCCL_CFLAGS) -c amp_kernels.cu -o $@

BENCH_CPU = $(patsubst bench/%.c,$(B)/%,$(wildcard bench/bench_*.c))
$(B)/bench_%: bench/bench_%.c amp.h | $(B)
	$(CC) $(WARN) -O2 -I. $< -o $@ -lm -lpthread

$(B)/bench_gpt: examples/train_gpt.c

# bench_optim built with -fopenmp too: the optimizer step's moment types on every core against one
$(B)/bench_optim_openmp: bench/bench_optim.c bench/bench.h bench/peers.h amp.h | $(B)
	$(CC) $(WARN) -O2 -fopenmp -I. $< -o $@ -lm -lpthread

bench: $(BENCH_CPU) $(B)/bench_optim_openmp
	@for b in $(BENCH_CPU); do echo "== $$b"; $$b || true; done
	@echo "== $(B)/bench_optim_openmp (BENCH_OPTIM_MODES=moments)"; BENCH_OPTIM_MODES=moments $(B)/bench_optim_openmp || true

# AArch64 builds of bench_convert, bench_optim and bench_gemm (Debian's cross gcc, make deps) run
# under qemu-user with BENCH_EMULATED=1: small sizes, no peers, each line without figures.
BENCH_ARM = $(B)/aarch64/bench_convert $(B)/aarch64/bench_optim $(B)/aarch64/bench_gemm
$(B)/aarch64/bench_%: bench/bench_%.c bench/bench.h bench/peers.h amp.h
	@mkdir -p $(B)/aarch64
	aarch64-linux-gnu-gcc $(WARN) -O2 -I. $< -o $@ -lm -lpthread
bench-arm: $(BENCH_ARM)
	@for b in $(BENCH_ARM); do echo "== $$b (AArch64 under qemu-user)"; \
	  BENCH_EMULATED=1 QEMU_LD_PREFIX=/usr/aarch64-linux-gnu qemu-aarch64 $$b || true; done

# GPU benchmarks: bench/torch_ref.py measures PyTorch first (build/torch_ref.txt), then every
# bench/gpu_*.c runs and prints its figures against those and against a device copy.
# A bench/gpu_*.cu holds kernels of its own (nvcc; amp.h's implementation compiled there as C++).
BENCH_GPU = $(patsubst bench/%.c,$(B)/%,$(wildcard bench/gpu_*.c)) $(patsubst bench/%.cu,$(B)/%,$(wildcard bench/gpu_*.cu))
$(B)/gpu_%: bench/gpu_%.c amp.h $(B)/amp_kernels.o | $(B)
	$(CC) $(WARN) -O2 -DAMP_CUDA -I. $< $(B)/amp_kernels.o -o $@ $(CUDA_LIBS) -lm -lpthread
$(B)/gpu_%: bench/gpu_%.cu amp.h $(B)/amp_kernels.o | $(B)
	$(NVCC) $(NVCC_FLAGS) -I. $< $(B)/amp_kernels.o -o $@ -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 -lcublasLt -lcublas

bench-gpu: $(BENCH_GPU)
	@if [ -f bench/torch_ref.py ]; then python3 bench/torch_ref.py > $(B)/torch_ref.txt || echo "PyTorch reference failed"; fi
	@for b in $(BENCH_GPU); do echo "== $$b"; $$b || true; done

# The demo: the Fashion-MNIST MLP in fp32 and with AMP (a built-in synthetic set where the data is absent).
# Where zlib's header is missing it builds without zlib and reads the data through gzip -dc.
HAVE_ZLIB := $(shell $(CC) -E -include zlib.h -x c /dev/null >/dev/null 2>&1 && echo 1)
MLP_ZLIB   = $(if $(HAVE_ZLIB),-lz,-DTRAIN_MLP_NO_ZLIB)
# The host CPU's own instructions where the compiler takes a flag for them: -march=native (gcc, and
# clang on x86), -mcpu=native (clang on AArch64 and Apple's, which refuse -march=native), else none.
NATIVE := $(shell for f in -march=native -mcpu=native; do $(CC) $$f -x c -c /dev/null -o /dev/null 2>/dev/null && echo $$f && break; done)
$(B)/train_mlp: examples/train_mlp.c amp.h | $(B)
	$(CC) $(WARN) -O2 $(NATIVE) -I. $< -o $@ $(MLP_ZLIB) -lm

demo: $(B)/train_mlp
	$(B)/train_mlp

# The same trainer with the model on the GPU (examples/train_mlp_cuda.cu includes train_mlp.c).
$(B)/train_mlp_cuda: examples/train_mlp_cuda.cu examples/train_mlp.c amp.h $(B)/amp_kernels.o | $(B)
	$(NVCC) $(NVCC_FLAGS) -I. examples/train_mlp_cuda.cu $(B)/amp_kernels.o -o $@ -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 -lcublasLt -lcublas $(MLP_ZLIB)

demo-gpu: $(B)/train_mlp_cuda
	$(B)/train_mlp_cuda

# The capstone: a byte-level GPT on the fortunes (or the licence texts, or a built-in text).
$(B)/train_gpt: examples/train_gpt.c amp.h | $(B)
	$(CC) $(WARN) -O2 $(NATIVE) -I. $< -o $@ -lm

gpt: $(B)/train_gpt
	$(B)/train_gpt

clean:
	rm -rf $(B)
