# tests/examples.sh - sourced by tests/run.sh: build every example with -Werror, run it, check
# the facts it claims. Each numbered example checks its own claims and exits nonzero when one
# does not hold; the checks here add what must be visible from outside (files, sizes, gaps).
# Uses check/pass/fail, $B and $WARN from tests/run.sh.

ex_build() { # ex_build NAME SRC [LIBS...]: compile one example into $B/NAME
  n=$1; src=$2; shift 2
  check "example $n: builds with -Werror" gcc -std=c99 -O2 $WARN -I. "$src" -o "$B/$n" "$@" -lm
}
mkdir -p "$B/examples"
rm -f "$B"/examples/*.svg

ex_build ex01 examples/01_number_lines.c
check "example 01: f16/bf16 ranges, gaps and roundings hold as printed" "$B/ex01"

ex_build ex02 examples/02_master_weights.c
check "example 02: 1e-4 update lost in f16 and bf16, kept by the fp32 master" "$B/ex02"

ex_build ex03 examples/03_loss_scaling.c
check "example 03: loss scaling reduces the gradients f16 loses, writes its SVG" \
  sh -c "'$B/ex03' '$B/examples' && grep -q '</svg>' '$B/examples/loss_scaling.svg'"

ex_build ex04 examples/04_dynamic_scaler.c
check "example 04: PyTorch and DeepSpeed scale histories as stated, writes its SVG" \
  sh -c "'$B/ex04' '$B/examples' && grep -q '</svg>' '$B/examples/dynamic_scaler.svg'"

ex_build ex05 examples/05_policy.c
check "example 05: policy decisions for MLP and transformer block, MIXED/PURE/mixlist" "$B/ex05" examples/mixlist.json

ex_build ex06_fp32 examples/06_drop_in_fp32.c
ex_build ex06_amp examples/06_drop_in_amp.c
check "example 06: the fp32 loop converges" "$B/ex06_fp32"
check "example 06: the same loop with amp.h (f16) converges" "$B/ex06_amp"
# The drop-in promise: few lines change, and every changed code line is marked AMP.
check "example 06: the drop-in diff is at most 20 added lines, each code line marked AMP" sh -c "
  added=\$(diff examples/06_drop_in_fp32.c examples/06_drop_in_amp.c | grep -c '^>')
  unmarked=\$(diff examples/06_drop_in_fp32.c examples/06_drop_in_amp.c | grep '^> ' | grep -v '^> *$' | grep -v '^>    ' | grep -v '^> /\*' | grep -vc 'AMP\|amp_')
  echo \"added \$added, unmarked \$unmarked\"; [ \"\$added\" -le 20 ] && [ \"\$unmarked\" -eq 0 ]"

# The trainer: a short run in fp32, f16 and bf16 on the real data (dataset-fashion-mnist) or,
# where it is absent, the synthetic set. 1 epoch on 20000 images, test on 5000: fp32 reaches
# about 84% there; an AMP run may differ from it by noise alone, so the gap allowed is 1.0 point
# (the full-length acceptance figure, 0.3 points after 8 epochs, is in examples/README_part.md).
check "train_mlp: builds with -Werror (-lz)" gcc -std=c99 -O2 -march=native $WARN -I. examples/train_mlp.c -o "$B/train_mlp" -lz -lm
check "train_mlp: 1 short epoch, f16 and bf16 within 1.0 point of fp32's test accuracy" sh -c "
  '$B/train_mlp' --epochs 1 --train-limit 20000 --test-limit 5000 --max-gap 1.0 --svg '$B/examples/train_mlp.svg' > '$B/train_mlp.log' 2>&1; rc=\$?
  cat '$B/train_mlp.log'; [ \$rc -eq 0 ] && grep -q '^bf16 ' '$B/train_mlp.log' && grep -q '</svg>' '$B/examples/train_mlp.svg'"
check "train_mlp: without the dataset it says so and trains on synthetic data" sh -c "
  '$B/train_mlp' --data /nonexistent --epochs 1 --train-limit 2000 --precision f16 --svg '$B/examples/synthetic.svg' > '$B/train_mlp_syn.log' 2>&1; rc=\$?
  cat '$B/train_mlp_syn.log'; [ \$rc -eq 0 ] && grep -q 'synthetic' '$B/train_mlp_syn.log'"

# Data parallel: threads as ranks on the CPU; the NCCL trainer where NCCL is installed.
check "example dp_threads (4 and 3 ranks skip together; exits 1 if they diverge)" sh -c "gcc -std=c99 -O2 $WARN -pthread -I. examples/dp_threads.c -o $B/dp_threads -lm && $B/dp_threads 4 && $B/dp_threads 3"
if [ -f "$CUDA_HOME/include/nccl.h" ] && [ -f "$B/amp_kernels_nccl.o" ]; then
  check "example dp_nccl (builds; runs one rank where a GPU is present)" sh -c "gcc -std=c99 -O2 $WARN -DAMP_CUDA -DAMP_NCCL -I. -isystem $CUDA_HOME/include examples/dp_nccl.c $B/amp_kernels_nccl.o -o $B/dp_nccl -L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lnccl -lcudart -lcublasLt -lcublas -lstdc++ -lm && $B/dp_nccl"
fi

# The CUDA build of the same trainer (examples/train_mlp_cuda.cu includes train_mlp.c and puts
# the model on the GPU). Linked against the amp_kernels.o that step 4 built, when there is one.
# Without a GPU it must say the CUDA run was skipped and exit 0; with one it must train all three
# precisions and keep f16 and bf16 within 1.0 point of fp32, as the CPU check above does.
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
ex_kernels=amp_kernels.cu
[ -f "$B/amp_kernels.o" ] && ex_kernels="$B/amp_kernels.o"
rm -f "$B/train_mlp_cuda"
check "train_mlp_cuda: builds with nvcc (-Werror)" "$NVCC" $NVCC_FLAGS -I. examples/train_mlp_cuda.cu "$ex_kernels" -o "$B/train_mlp_cuda" \
     -L"$CUDA_HOME/lib64" -Xlinker -rpath="$CUDA_HOME/lib64" -lcublasLt -lcublas -lz
if [ -x "$B/train_mlp_cuda" ]; then
  check "train_mlp_cuda: runs (skipped without a GPU)" sh -c "
    '$B/train_mlp_cuda' --epochs 1 --train-limit 20000 --test-limit 5000 --max-gap 1.0 --svg '$B/examples/train_mlp_cuda.svg' > '$B/train_mlp_cuda.log' 2>&1; rc=\$?
    cat '$B/train_mlp_cuda.log'; [ \$rc -eq 0 ] || exit 1
    if grep -q '^skipped: ' '$B/train_mlp_cuda.log'; then exit 0; fi
    grep -q '^CUDA device' '$B/train_mlp_cuda.log' && grep -q '^fp32 ' '$B/train_mlp_cuda.log' && grep -q '^bf16 ' '$B/train_mlp_cuda.log' && grep -q '</svg>' '$B/examples/train_mlp_cuda.svg'"
  # --device cpu in the CUDA build runs train_mlp.c's own code: the same table (times aside).
  check "train_mlp_cuda: --device cpu gives train_mlp's table" sh -c "
    '$B/train_mlp' --epochs 1 --train-limit 2000 --test-limit 1000 --svg '$B/examples/cmp_c.svg' > '$B/cmp_c.log' 2>&1 &&
    '$B/train_mlp_cuda' --device cpu --epochs 1 --train-limit 2000 --test-limit 1000 --svg '$B/examples/cmp_cu.svg' > '$B/cmp_cu.log' 2>&1 || exit 1
    sed -n '/^precision/,/^\$/p' '$B/cmp_c.log' | awk 'NF { NF--; print }' > '$B/cmp_c.tab'
    sed -n '/^precision/,/^\$/p' '$B/cmp_cu.log' | awk 'NF { NF--; print }' > '$B/cmp_cu.tab'
    cat '$B/cmp_cu.tab'; [ \$(wc -l < '$B/cmp_c.tab') -ge 4 ] && diff '$B/cmp_c.tab' '$B/cmp_cu.tab'"
fi
