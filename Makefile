# amp.h - `make test` is the one command that proves the project works (it ends "N passed, M failed").
#   make test        header compile matrix, unit tests (plain, ASan+UBSan, valgrind), CUDA build
#                    (and GPU tests where a device is present), fuzzing, examples
#   make bench       CPU benchmarks (not tests; never fail the build)
#   make bench-gpu   CUDA benchmarks against PyTorch (needs a GPU and python3 with torch)
#   make demo        the Fashion-MNIST trainer: fp32 against AMP
CC      ?= cc
NVCC    ?= $(shell command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= /usr/local/cuda
CFLAGS  ?= -O2
WARN     = -std=c99 -Wall -Wextra -Wpedantic -Werror
B        = build
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lstdc++

.PHONY: test bench bench-gpu demo clean

test:
	@sh tests/run.sh

$(B):
	@mkdir -p $(B)

$(B)/amp_kernels.o: amp_kernels.cu amp.h | $(B)
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) -I. -c amp_kernels.cu -o $@

BENCH_CPU = $(patsubst bench/%.c,$(B)/%,$(wildcard bench/bench_*.c))
$(B)/bench_%: bench/bench_%.c amp.h | $(B)
	$(CC) $(WARN) -O3 -I. $< -o $@ -lm -lpthread

bench: $(BENCH_CPU)
	@for b in $(BENCH_CPU); do echo "== $$b"; $$b || true; done

clean:
	rm -rf $(B)
