/* amp.h - v0.2.0 - automatic mixed precision training for C and CUDA - public domain / MIT

   Mixed precision in one header: fp16/bf16 conversion, the op-list policy,
   the dynamic loss scaler (GradScaler) and fp32 master-copy optimizers,
   on the CPU, plus a bundled CUDA file (amp_kernels.cu) for the GPU.

   Do this:
      #define AMP_IMPLEMENTATION
   before you include this file in *one* C or C++ file to create the implementation.

   CONTENTS (search for the words in capitals or for the section title)

      QUICK START                  a whole program, as it compiles
      COMPILE-TIME OPTIONS         what to #define
      BUILDING THE CUDA PART       nvcc and the link line
      CONVENTIONS                  statuses, defaults, where element math lives
      DEVICE ERRORS AND GETTERS    how a CUDA failure reaches a getter's caller
      PARAM GROUPS                 per-group lr scale and weight decay, one global clip
      TENSOR OPTIONS               amp_tensor_desc: grads in their own type, a seeded fp32 master,
                                   a float model copy rounded to bf16/f16, stochastic rounding,
                                   split and absent masters (AMP_MASTER_SPLIT / _NONE), bf16,
                                   8-bit and fp8 moments (AMP_MOMENTS_BF16 / _8BIT / _FP8), memory per parameter of each master
                                   mode and moment type (amp_optimizer_state_bytes)
      GRADIENT STATS               amp_optim_config.stats: per tensor, what the unscale saw (amax,
                                   inf/NaN, zero and subnormal counts), the tensor that overflowed,
                                   the overflow log line naming it (amp_tensor_desc.name)
      SPIKES                       amp_optim_config.spike_norm / spike_zscore: skip a loss-spike
                                   step without backing off the scale; amp_optimizer_spike_skips
      FP8 FORMATS                  E4M3 and E5M2 (amp_fp8), their rounding and saturation, the
                                   E8M0 block scale; amp_f32_to_e4m3 / _e5m2 / _e8m0 and back
      FP8 SCALING                  the per-tensor recipes (TE delayed and current, torchao,
                                   MS-AMP), amp_fp8_scaler, amp_quantize (the cast and its amax),
                                   what the casts lost (saturated, flushed), data parallel,
                                   checkpoints
      BLOCK SCALING                fp8 with a scale per block: MX (1 x 32, E8M0) and DeepSeek-V3
                                   (1 x 128, 128 x 128, float); amp_quantize_blocks
      VERSION HISTORY
      Sections of the API, each under a divider: Errors, Number formats, Op-list policy, Devices,
      Gradient scaler, Master-copy optimizers (and checkpoints), Tensor Core matrix product.
      IMPLEMENTATION: the same sections in the same order; "The device line" in it is the set of
      per-device operations the public functions call (the CPU's here, CUDA's in amp_kernels.cu).
      LICENSE at the end.

   QUICK START (compiles as it stands; see examples/ for whole trainers)

      #define AMP_IMPLEMENTATION
      #include "amp.h"
      #include <stdio.h>

      int main(void) {
          amp_f16 w[4], g[4];                         // the model copy and its grads, in f16
          for (int i = 0; i < 4; i++) w[i] = amp_f32_to_f16(1.0f);
          amp_scaler *sc; amp_optimizer *opt;
          amp_scaler_config sconf = {0};              // zero means the defaults: PyTorch's GradScaler
          amp_optim_config oconf = amp_optimizer_defaults(AMP_ADAMW);   // then as written
          oconf.weight_decay = 0.01f;
          if (amp_scaler_create(&sc, amp_cpu(), &sconf) != AMP_OK ||
              amp_optimizer_create(&opt, amp_cpu(), &oconf) != AMP_OK ||
              amp_optimizer_add(opt, AMP_F16, w, g, 4) != AMP_OK) {
              fprintf(stderr, "%s\n", amp_last_error()); return 1;
          }
          for (int step = 0; step < 10; step++) {
              float s = amp_scaler_get_scale(sc);     // backward of (loss * s) gives grads * s
              for (int i = 0; i < 4; i++) g[i] = amp_f32_to_f16(0.5f * s);
              amp_scaler_step(sc, opt);               // unscale, skip on inf/NaN, else update
              amp_scaler_update(sc);                  // the scale rule, once per iteration
          }
          printf("w[0] = %g\n", amp_f16_to_f32(w[0]));
          amp_optimizer_destroy(opt); amp_scaler_destroy(sc);
          return 0;
      }

   COMPILE-TIME OPTIONS (define before including)

      AMP_IMPLEMENTATION   emit the implementation (one translation unit only)
      AMP_STATIC           make every function static (private to the translation unit)
      AMPDEF               linkage of the public functions (default: extern)
      AMP_MALLOC(sz) / AMP_FREE(p)
                           replace malloc/free; define both, or neither
      AMP_THREAD_LOCAL     the compiler's thread-local storage keyword for amp_last_error()'s
                           buffer (default: C11 _Thread_local, C++11 thread_local, __thread, MSVC's
                           __declspec(thread); empty under tcc, which has none: one buffer then)
      AMP_NO_SIMD          never use the x86 vector loops (AVX2+F16C, AVX-512) of amp_convert and
                           the CPU optimizer, nor the AArch64 NEON ones (the portable C loops
                           only), nor amp_gemm's fast kernels (the reference product only)
      AMP_CUDA             the implementation calls into amp_kernels.cu (see below);
                           without it every CUDA entry point returns AMP_ERR_UNSUPPORTED
      AMP_NCCL             with AMP_CUDA: amp_nccl_allreduce_hook / amp_nccl_allreduce_grads call
                           NCCL (compile amp_kernels.cu with -DAMP_NCCL too, link -lnccl);
                           without it both return AMP_ERR_UNSUPPORTED

   The implementation unit may be built with -Ofast/-ffast-math; the inf/NaN checks work on the bits.

   CPU VECTOR PATHS

      Chosen at run time (AMP_NO_SIMD compiles none; amp_simd_active says whether amp_convert
      uses one, amp_simd_enable(0) turns its off). Each gives the portable C loops' bits.
      x86-64 (GCC, Clang): CPUID and XGETBV pick AVX-512 F/BW/VL/DQ, else AVX2 + F16C: amp_convert,
        the optimizer's step, scan and master stores, fp8 casts, amp_quantize, amp_gemm's kernels.
        The step's moment loops: bf16, 8-bit and fp8 moments (AMP_MOMENTS_BF16 / _8BIT / _FP8)
        decoded into the lanes, stepped, and written back (bf16 to nearest even; 8-bit blocks
        encoded by a bucket table and a key compare, the nearest-midpoint search's codes). The
        8-bit codes take one of two AVX-512 paths with the same bits, chosen once per process by
        a calibration of about 10-40 us: gathers (the map's values, the bucket table), or on a
        CPU with AVX512_VBMI byte permutes over the map's values for the decode (64 codes at a
        time) and, for the encode, tables small enough for registers: per decade of the map
        (whose values are evenly spaced) t = |y| * a + b and floor(t) the code, exact wherever
        t is 2^-12 or more from an integer, which the tables were checked for midpoint by
        midpoint; a lane nearer takes the bucket table. AMD's Zen 4 and 5 run gathers slowly
        and take the permutes (bench_optim prints the two paths' times and the choice). The
        AVX2 loops read the same two tables by gathers or by eight plain loads put together,
        chosen the same way (AMD's cores microcode their gathers).
      AArch64 (GCC, Clang; Linux, macOS): NEON, which every AArch64 CPU has (no run-time test):
        amp_convert between f32, f16 and bf16 (FCVTL / FCVTN for f16; amp_f32_to_bf16's integer
        rounding on 4 lanes for bf16), the optimizer step's update (SGD, Adam/AdamW, Lion on
        4 lanes: FDIV, FSQRT, no FMLA) with the grads and model copies converted in registers,
        the moment loops as on x86 (bf16, 8-bit and fp8 moments decoded and encoded on 4 lanes;
        the 8-bit map values and bucket words read lane by lane: NEON has no gather),
        split-master and stochastic-rounding stores, and the step's scan (the grads' sum of
        squares in the portable loop's 32 double lanes and order, inf/NaN, gradient stats),
        fp8 casts (f32/f16/bf16 <-> E4M3/E5M2: into fp8 the scalar functions' integer steps on
        4 lanes, back through FCVTL: an E4M3 code shifted into the f16 of its value / 256, then
        * 256, as on x86) and amp_quantize's loop with its amax and counts.
        BFCVTN for f32 -> bf16 where the build targets +bf16 (-march=armv8.6-a, -mcpu=neoverse-v2
        ...: __ARM_FEATURE_BF16_VECTOR_ARITHMETIC) and the CPU reports BF16 (Linux:
        getauxval(AT_HWCAP2) & HWCAP2_BF16; macOS: sysctlbyname("hw.optional.arm.FEAT_BF16")).
        The conversion instructions read the FPCR and the scalar functions do not, so each call
        reads it: a rounding mode other than nearest, default-NaN or alternate handling (DN, AH)
        sends it to the portable loops; flush-to-zero (FZ, FIZ; gcc's -Ofast sets FZ) leaves
        BFCVTN out. amp_gemm's AUTO product: an FMLA micro-kernel (6 x 16 tiles), acc =
        fma(a, b, acc) in k order, the bits of x86's FMA kernels (a plain fmaf() loop), in every
        FPCR state (FMLA and fmaf read it alike); for bf16 x bf16 on a CPU with FEAT_BF16, BFDOT
        or BFMMLA where it pays (amp_gemm below: their rounding, the same bits, and the bound).
      Elsewhere (32-bit ARM, other CPUs, other compilers): the portable loops, with their bits.

   BUILDING THE CUDA PART

      nvcc -O3 -arch=sm_90 -c amp_kernels.cu -o amp_kernels.o     (sm_80 for Ampere;
                                         amp_kernels.h, its private header, sits beside amp.h)
      cc -O2 -DAMP_CUDA -c my_trainer.c       (my_trainer.c defines AMP_IMPLEMENTATION)
      cc my_trainer.o amp_kernels.o -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
         -lcudart -lcublasLt -lcublas -lstdc++ -lm

   CONVENTIONS

      - Every call that can fail returns amp_status. On failure amp_last_error() (thread-local)
        names the function and the bad value, and nothing was changed.
      - A zero-initialised config struct means every default (written beside each field). For
        an exact 0 where 0 means a default (Adam's beta1 = 0, lr = 0 at create), start from
        amp_optimizer_defaults(kind): see ZEROS at amp_optim_config.
      - Element math shared by the CPU loops and the CUDA kernels is written once, as
        static inline AMP_HD functions.

   DEVICE ERRORS AND GETTERS

      On a CUDA device the getters that return a value rather than a status (amp_scaler_get_scale,
      _last_skipped, _skipped_steps, _at_floor, amp_optimizer_grad_norm, _step_count,
      _last_skipped, _spike_skips, _overflow_tensor) read the device (they wait for the stream)
      into the object's host copy and return from it. When that read fails they return 0
      (get_scale, the two last_skipped, skipped_steps, at_floor), NaN (grad_norm) or -1
      (step_count, spike_skips, overflow_tensor), amp_last_error() names the
      getter and the CUDA call, and the error is kept on the device: the next amp_scaler_update /
      amp_scaler_update_found_inf on a scaler of that device, amp_optimizer_step on an optimizer of
      that device, or amp_device_sync, returns it (AMP_ERR_DEVICE) before doing anything else.
      On the CPU these getters cannot fail.

   FP8 FORMATS

      An fp8 number is one byte: a sign, an exponent field and a mantissa. The OCP standard (and
      the GPUs from Hopper on) has two of them, which spend the seven other bits differently:

        E4M3 ("fn")  4 exponent bits (bias 7), 3 mantissa bits. Largest 448 (0x7e), smallest normal
                     2^-6, smallest subnormal 2^-9. No infinities: the top exponent holds numbers
                     too, and only S.1111.111 (0x7f, 0xff) is NaN. About 2 significant digits.
        E5M2         5 exponent bits (bias 15), 2 mantissa bits: IEEE-like, the upper byte of an
                     f16. Largest 57344 (0x7b), smallest normal 2^-14, smallest subnormal 2^-16,
                     inf 0x7c / 0xfc, NaN 0x7d-0x7f (and signed).

      Forward tensors (weights, activations) need precision more than range, so they take E4M3;
      gradients spread over many more binades and need the range, so they take E5M2
      (TransformerEngine's HYBRID recipe). Either way a tensor is multiplied by a scale before the
      cast, so that its largest value lands near the format's largest (the scaling recipes); the
      cast itself is what this section describes.

      f32 -> fp8 (amp_f32_to_e4m3 / amp_f32_to_e5m2 (x, saturate)) rounds to nearest, ties to even,
      subnormal results included: for E4M3, exactly 2^-10 (half the smallest subnormal) gives 0
      and anything above it 2^-9. Past the largest value the saturate flag decides. saturate 1
      ("satfinite", what TransformerEngine and torchao cast with, and what the bulk casts do): a
      finite or infinite |x| past it gives +-max (+-448, +-57344). saturate 0: E4M3 gives NaN (it
      has no inf), E5M2 +-inf. "Past" means beyond max plus half an ulp: E4M3's 464 still rounds
      to 448 (the tie goes to the even code), anything above does not; E5M2's tie, 61440, rounds
      to the even code, which is inf. A NaN gives NaN in either mode, as 0x7f (its sign dropped):
      these are the bits of the CUDA toolkit's cuda_fp8.h for all 2^32 inputs, and of the GPU's
      cvt.rn.satfinite. -0 stays -0. fp8 -> f32 (amp_e4m3_to_f32, amp_e5m2_to_f32) is exact: every
      fp8 number is an f32 (and an f16, and a bf16) number. All of them are integer arithmetic on
      the bits, so -ffast-math, flush-to-zero and the FPU's rounding mode change nothing; they
      are AMP_HD, so the CUDA kernels run the same functions.

      E8M0 is the MX formats' block scale: no sign, no mantissa; the byte e stands for 2^(e-127),
      e in 0..254, and 0xff is NaN. There is no zero. amp_f32_to_e8m0(x, round_up) gives a scale
      for |x|. round_up 1 (NVIDIA's rule, cuda_fp8.h's cudaRoundPosInf): the smallest power of two
      >= |x|. round_up 0 (OCP's): the largest power of two <= |x|, i.e. the exponent field. Both
      stop at 2^127 (254, inf included) and at 2^-127 (0: zero and the f32 subnormals land there;
      rounding up, every |x| <= 2^-127 gives 0, as in cuda_fp8.h).

      As dtypes, AMP_E4M3 and AMP_E5M2 (one byte each, amp_fp8) are storage formats: amp_convert
      casts between them and f32/f16/bf16 in every direction (into fp8 saturating, as above; fp8 to
      any other format exactly; E4M3 <-> E5M2 through f32), with AVX-512/AVX2 loops for f32 <-> fp8
      on x86-64, and the CUDA cast kernels take them (the same functions). Every entry point that
      computes or steps in a type (model copies, grads, round_to, amp_gemm's bias, the scaler's
      buffers, the policy's low type) refuses them with AMP_ERR_ARG naming the argument: what a
      tensor in fp8 needs is a scale, which the scaling recipes give (FP8 SCALING). amp_gemm_ex
      takes fp8 A, B and C with their scales (Tensor Core matrix product, on the CPU).

   FP8 SCALING

      An fp8 cast keeps about two significant digits over a short range (E4M3: 2^-9 to 448), so a
      tensor is multiplied by a scale first, chosen so that its largest magnitude (its amax) lands
      near the format's largest value: q = fp8(x * scale), and x ~ q * scale_inv with
      scale_inv = 1 / scale (what the matrix product multiplies back). Choosing the scale is the
      recipe. amp.h has the four the anchors use, each with the anchor's exact bits:

        AMP_FP8_DELAYED  TransformerEngine's DelayedScaling (the default). Each tensor keeps a
                         history of its last amaxes (history_len, 1024 by default). The scale for
                         the next step is (fmax * 2^-margin) / amax, where amax is the largest in
                         the history ("max") or this step's (most_recent = 1). Cheap: the amax of
                         a cast is measured in the cast itself and used one step later, so no
                         extra pass over the data; the price is that a sudden spike is cast with
                         the old, too large scale once (those values saturate), and that after it
                         the scale stays low for the whole history. An amax that is 0, inf or NaN
                         keeps the old scale; a quotient that overflows becomes FLT_MAX.
        AMP_FP8_CURRENT  TransformerEngine's Float8CurrentScaling: fmax / amax of the tensor being
                         cast (so the amax is measured first: amp_quantize with q NULL, then the
                         scale, then the cast). amax below amax_epsilon counts as amax_epsilon;
                         0, inf or NaN gives scale 1; an overflow FLT_MAX; pow2 keeps only the
                         sign and exponent bits (a power of two: scaling then loses no bits).
        AMP_FP8_TORCHAO  torchao's tensorwise scaling: fmax / max(amax, 1e-12) in double, rounded
                         to f32. At amax 0 that is 4.48e14 for E4M3, where TE says 1: the anchors
                         disagree, and each preset keeps its own anchor's answer. inf gives 0, NaN
                         NaN. pow2: 2^floor(log2 scale), with the exact binary exponent (torch
                         takes log2 in f32, which rounds up to the next power when the scale is
                         within an f32 rounding of it; amp.h does not copy that).
        AMP_FP8_MSAMP    MS-AMP's scaling factor: the power of two 2^(floor(log2(fmax / amax)) -
                         margin), margin an integer; amax 0, inf or NaN keeps the old scale.

      fmax is 448 for E4M3 and 57344 for E5M2. TransformerEngine's HYBRID format is E4M3 for the
      forward tensors (weights, activations) and E5M2 for the gradients; give the scaler each
      tensor's format. The rule alone is amp_fp8_scale_from_amax(config, format, amax, prev_scale):
      integer tests on the bits, IEEE divisions and powers of two built from their bits, so it
      gives the same scale in every build (-Ofast included), on the CPU and in the CUDA kernel,
      which runs the same function. A non-integer DELAYED margin takes powf (TE's std::pow): the
      one place where the GPU may differ from the host, by an ulp of 2^-margin.

      amp_fp8_scaler keeps n tensors' scales, scale_invs and histories (TE's "fp8 meta"), on the
      CPU or on a CUDA device. One step:
          for each tensor i:  amp_quantize(d, q_i, fmt_i, x_i, AMP_BF16, n_i,
                                           amp_fp8_scaler_scale_ptr(f, i), amp_fp8_scaler_amax_ptr(f, i));
          ... the products, the backward ...
          amp_fp8_scaler_update(f);            // every tensor's next scale, histories rolled
      amp_quantize casts x * scale into fp8 (saturating, as TE and torchao cast) and writes the
      amax of x into slot 0 of the tensor's history in the same pass (several casts of one tensor
      in a step: their max). update applies the recipe to every tensor, TransformerEngine's
      amax_and_scale_update bit for bit: the amax the recipe reads (the history's max, passing over
      NaN slots, or slot 0), then the roll (slot j takes slot j + 1, the last slot takes slot 0,
      slot 0 is cleared for the next step), then scale and scale_inv = 1 / scale. A fresh scaler
      has every scale 1 and every history 0, as TE's. On CUDA update is one launch that never
      waits for the host, and the pointers are device pointers: a CUDA graph can capture a step.
      Recipes other than DELAYED keep one slot: the amax recorded in the step gives the scale the
      next casts use (for the anchors' current scaling, measure first as said above).
      amp_fp8_scaler_record adds an amax measured elsewhere; get_scale, get_scale_inv and history
      read the state (on CUDA they wait for the stream).

      What the casts lost: config.stats = 1 has the scaler count, per tensor and step, what its
      casts did, in the casts' own pass (no second read of x):
          amp_quantize_ex(d, q_i, fmt_i, x_i, AMP_BF16, n_i, amp_fp8_scaler_scale_ptr(f, i),
                          amp_fp8_scaler_amax_ptr(f, i), amp_fp8_scaler_counts_ptr(f, i));
          ...
          amp_fp8_scaler_update(f);                // this step's counts become the last step's
          amp_fp8_scaler_stats(f, i, &st);         // amp_fp8_stats: n, saturated, flushed, nan, ...
      saturated counts the elements whose x * scale lay beyond the format (E4M3 above 464, E5M2
      from 61440: what the saturating cast clipped to +-fmax, where a plain cast gives NaN or inf;
      a value just above fmax that rounds to it is a rounding, not counted); flushed the nonzero
      elements whose code is +-0 (x * scale at most half the smallest subnormal: 2^-10 for E4M3,
      2^-17 for E5M2); nan the NaN inputs. amax_used and scale_used are what the update saw: the
      amax its recipe read and the scale it replaced, the one the counted casts used. Read the
      shares, each count over n:
        - saturated above 0: the scale was made for a smaller amax than the tensor had. Under
          DELAYED that is a spike, or a range that climbs faster than the history follows (early
          activations, a growing loss): the largest elements, the ones that matter most, came out
          as fmax. A shorter history_len or most_recent reacts a step later instead of a history
          later; current scaling (CURRENT or TORCHAO, the amax measured first as said above)
          scales each cast by its own amax and never saturates, for an extra read of x.
        - a large flushed share: the scale is too small for the tensor's small values. At a scale
          that puts the amax at fmax, E4M3 flushes what lies about 2^19 below the amax, E5M2 what
          lies about 2^33 below. If amax_used is far above the step's own amax (the newest slot
          of amp_fp8_scaler_history after the update), a long "max" history still holds an old
          spike and keeps the scale low: shorten it, or use most_recent. If the scale is
          right and the share is still large, the tensor is wider than E4M3: E5M2 (HYBRID gives
          it the grads), or keep the tensor in bf16, whose range is f32's. This is where fp8
          loses to bf16.
        - nan: the input held NaN already (the cast passes it on); look upstream.
      Counting is an instantiation of its own: amp_quantize and counts NULL run loops compiled
      without it, at the speed they had. With counts the CPU's AVX-512 and AVX2 loops count by lane
      masks and popcounts (the portable loop's counts exactly), the CUDA kernel per thread, then
      warp and block, with one 64-bit integer atomicAdd per counter and block (the same counts in
      any order). Stats off: amp_fp8_scaler_counts_ptr gives NULL, amp_fp8_scaler_stats refuses
      with AMP_ERR_STATE. The counts are telemetry, not state the run needs: checkpoints do not
      hold them (a file is the same with stats on or off; a load leaves the counts as they are),
      and stats, being config, stays as the live scaler has it.

      Data parallel: every rank must cast with the same scales, so the amaxes are reduced (MAX)
      across the ranks before the recipe reads them. amp_fp8_scaler_reduce_over(f, scaler) sends
      them through the loss scaler's own all-reduce hook (amp_scaler_set_allreduce), in the same
      group as its found-inf and norm: there is no second communicator to get wrong. The amaxes go
      as their bits (so a NaN on one rank is NaN on all), in one call per update (the hook sees
      n < 0: a MAX, where the loss scaler's calls are sums). examples/dp_threads.c shows it.

      Checkpoints: amp_fp8_scaler_save / _load keep the whole state (scales, scale_invs,
      histories, formats, the recipe) in a file of its own, CRC-checked and written atomically as
      amp_checkpoint_save writes; a resumed run casts with the scales of the run that never
      stopped. A history of another length is resized (the newest amaxes kept); a file of another
      recipe, tensor count or format is refused.

   BLOCK SCALING

      A scale for a whole tensor has to bring the tensor's largest magnitude (its amax) near the
      fp8 format's largest value, and every other value of the tensor then lives in the few
      binades below that. One outlier, an activation a thousand times larger than the rest, pushes
      everything else down into fp8's subnormals or to zero. A block scale gives each small block
      of the tensor a scale of its own, chosen from the block's own amax: an outlier then costs
      precision only in its block. The price is the scales themselves and a matrix product that
      applies them block by block (Blackwell's Tensor Cores read MX scales themselves; DeepSeek-V3's
      kernels multiply them in when they add each 128-long partial product into fp32).

      amp_quantize_blocks(d, kind, fp8, rows, cols, x, x_type, ldx, q, ldq, scales) cuts the
      row-major rows x cols matrix x (f32, f16 or bf16; ldx elements from a row to the next) into
      blocks, writes every element as an fp8 code (fp8 is AMP_E4M3 or AMP_E5M2) into q (ldq bytes
      from a row to the next) and every block's scale into scales. A scale is the dequantisation
      factor: x ~ value(q) * scale. The four kinds:

        AMP_BLOCK_MX_RCEIL   1 x 32 along a row, a power-of-two scale stored as one E8M0 byte: MXFP8
                             of the OCP Microscaling formats, with the scale rule of NVIDIA's cuBLAS
                             and TransformerEngine.
        AMP_BLOCK_MX_FLOOR   1 x 32, E8M0: the OCP MX v1.0 rule, torchao's default.
        AMP_BLOCK_1x128      1 x 128 along a row, a float scale: DeepSeek-V3's activations and
                             gradients (one token's 128 channels; arXiv 2412.19437, sec. 3.3).
        AMP_BLOCK_128x128    128 x 128, a float scale: DeepSeek-V3's weights.

      Why these shapes. MX blocks are short so that even a wide spread of magnitudes has few
      binades inside one block, and a byte per 32 elements is a quarter of a bit each; the scale
      is a power of two, so applying it is exact (an exponent shift, no rounding), but it can only
      bring amax within a factor 2 of the format's largest. DeepSeek-V3 scales along the
      reduction dimension in 128s because its GEMM adds partial products into fp32 every 128 of
      k, where the two scales are multiplied in; its float scales use all of fp8's range. Weights
      take square 128 x 128 blocks because the backward pass uses W transposed: a square block is
      still one block after the transpose, and so is its scale.

      The rules, with fmax the format's largest value (448 for E4M3, 57344 for E5M2), emax its
      exponent (8, 15), amax the largest |x| of the block, fl32() one rounding to f32 (to nearest,
      ties to even, subnormals included) and sat() the saturating cast into fp8 (amp_f32_to_e4m3 /
      amp_f32_to_e5m2 (y, 1): every |y| past fmax gives +-fmax):

        MX_RCEIL   e = amp_f32_to_e8m0(fl32(amax * fl32(1 / fmax)), 1), the E8M0 byte of the
                   smallest power of two at or above amax / fmax; scale 2^(e - 127);
                   q = sat(x * 2^(127 - e)). Nothing clips: amax / scale exceeds fmax by at most
                   the two f32 roundings, far less than half of fmax's ulp.
        MX_FLOOR   e = 127 + clamp(floor(log2 amax) - emax, -127, 127), so that amax / scale
                   has fmax's exponent, emax; q = sat(x / 2^(e - 127)).
                   amax / scale < 2^(emax + 1), which is above fmax, so a block may clip: an E4M3
                   block with amax 500 gets scale 1 and stores 448 (the OCP rule accepts it).
        1x128,     a = max(amax, fl32(1e-4)); q = sat(fl32(x * fl32(fmax / a)));
        128x128    scale = fl32(a / fmax), stored as a float (the floor 1e-4 is DeepSeek's: a
                   block of zeros gets a finite scale).

      A block of zeros (amax 0): MX scale 1 (the byte 0x7F), 1x128 / 128x128 what the formula
      gives; its codes are zeros, -0 kept as 0x80. A block that holds an inf or a NaN: the NaN
      scale (E8M0's 0xFF; the float 0x7FC00000) and every code of the block the NaN code 0x7F. That
      is torchao's MX rule; DeepGEMM's formula gives scale inf (or NaN) and codes NaN or 0, which
      dequantise to the same all-NaN block. The blocks beside it are untouched. The last block of
      a row (cols not a multiple of the width) and, for 128 x 128, of a column (rows not a multiple
      of 128) covers only the elements that exist, which is what padding with zeros gives.

      Exactness. The powers of two are applied on the exponent bits (q = x * 2^k exactly), amax is
      a maximum of the bits, and the one f32 rounding of each product happens where the rule says,
      so the results are the same bits on every CPU loop (AVX-512, AVX2, plain), under -Ofast's
      flush-to-zero and denormals-are-zero modes, and on the GPU: a product that lands below
      2^-126, where a flushing FPU would differ, is +-0 in fp8 either way.

      Storage of the scales, packed row-major without a leading dimension:
        MX           uint8 E8M0, rows x ceil(cols / 32): block (i, j) at scales[i * ceil(cols/32) + j]
        1x128        float, rows x ceil(cols / 128)
        128x128      float, ceil(rows / 128) x ceil(cols / 128)
      (cuBLAS's block-scaled products read MX scales in a tiled layout of their own: rearranging
      them is the caller's.) x must be aligned to its element size and float scales to 4 bytes;
      q and scales may not overlap x or each other. On a CUDA device x, q and scales are device
      pointers and the call is queued on the device's stream.

   VERSION HISTORY

      (next)               param groups (amp_optimizer_add_group); amp_tensor_desc and
                           amp_optimizer_add_tensor (a seeded fp32 master, round_to, stochastic
                           rounding of a bf16 copy; amp_optim_config.seed; master_mode
                           AMP_MASTER_SPLIT and AMP_MASTER_NONE);
                           amp_optimizer_add / _add_mixed are its wrappers and their errors
                           name themselves; gradient stats (amp_optim_config.stats,
                           amp_optimizer_stats, amp_optimizer_overflow_tensor) recorded by the
                           unscale pass; tensor names (amp_tensor_desc.name) in the overflow
                           log line; spike skipping (amp_optim_config.spike_norm and
                           spike_zscore, amp_optimizer_spike_skips), saved in checkpoints
                           (format version 2; version 1 still loads); optimizer moments in
                           bf16, 8-bit blockwise and E4M3 with a per-tensor scale, on the
                           CPU and on CUDA (amp_tensor_desc.moments = AMP_MOMENTS_BF16 / _8BIT
                           / _FP8, format version 3 when a tensor has them),
                           amp_optimizer_state_bytes; the Lion optimizer
                           (AMP_LION / AMP_OPTIM_LION = 4); the optimizer kinds are one list,
                           and an unknown kind is refused everywhere (AMP_ERR_ARG at create);
                           the number formats are one list (a dtype outside it is refused by
                           every call); the fp8 conversions (amp_f32_to_e4m3 / _e5m2 / _e8m0 and
                           back); the element math rounds each operation itself, so clang at
                           -Ofast on any target, and nvcc, give the promised bits; a checkpoint
                           loads only states the objects can reach; AMP_THREAD_LOCAL (tcc);
                           NEON loops on AArch64 for amp_convert (FCVTL/FCVTN; BFCVTN where
                           built for +bf16 and the CPU has BF16) and the optimizer step, the
                           same bits (CPU VECTOR PATHS); amp_gemm's bf16 x bf16 by BFDOT or
                           BFMMLA on AArch64 with FEAT_BF16 where it pays (round to odd, exact
                           bits, the same for both);
                           the dtypes AMP_E4M3 / AMP_E5M2 (amp_convert, CUDA casts); vector
                           loops for every master mode, model copy and kind; grads given after
                           add (amp_optimizer_set_grads); a zero grad_dtype beside a 16-bit copy
                           refused (AMP_GRAD_F32); amp_gemm takes A and B of different types;
                           fp8 scaling: the four recipes (amp_fp8_scale_from_amax),
                           amp_fp8_scaler (checkpoints, amaxes reduced over the loss scaler's
                           group, cast telemetry: amp_fp8_scaler_stats), amp_quantize and
                           amp_quantize_ex (counts); amp_gemm_ex with fp8 inputs and outputs
                           on the CPU (per-tensor and block scales, c_scale, c_amax) and on
                           CUDA (per-tensor scales: cuBLASLt's fp8 kernels on sm_89+, any
                           layout through packed TN copies; 1x128 / 128x128 block scales on
                           both operands: cuBLASLt's block-scaled modes on sm_90 with cuBLAS
                           12.9+; other block scales and the rest: the plain fp8 kernel, the
                           CPU reference's bits); opts->fp8_fast_accum (cuBLASLt's FAST_ACCUM,
                           opt-in; the CPU unaffected).
                           fp8 block scaling, amp_quantize_blocks (MX RCEIL / FLOOR, DeepSeek-V3's
                           1x128 and 128x128; CPU vector loops and a CUDA kernel).
                           amp_gemm's bf16 kernel chosen by what the core delivers: vdpbf16ps
                           where it runs at least at the FMA's flop rate (a calibration once
                           per process), else bf16 widened while packing (Intel without AMX);
                           AMX tiles for bf16 x bf16 on Intel Xeons that have them (Linux).
                           The AVX2 product 3-26% faster (packing, plain f32 tiles stored from
                           the registers), with the same bits; the AVX-512 kernels store plain
                           f32 tiles from the registers too (on a Zen 5 core the demo's
                           backward products 4-20% faster, the others within 4% of before).
                           Built with -fopenmp, the CPU optimizer step shares a large tensor's
                           update among the threads, with one thread's bits. The CPU's
                           block-scaled fp8 product scales each block's sums in the tiles
                           (one pass over C, not one a block), with the same bits. An f32 C
                           with alpha != 1 (per-tensor fp8: alpha times the scale_invs), beta
                           0 and no epilogue is scaled and stored from the registers too;
                           fp8 codes go to the vdpbf16ps kernel's packing in one pass (a
                           table of the 128 magnitudes' bf16 words, the pairs moved as 16-bit
                           units before widening): on a Zen 5 core fp8 products at 0.92-1.04x
                           the bf16 product's rate (0.65-0.96x before), the same bits; a
                           block-scaled product into an f32 C with nothing to add goes
                           straight into C (no buffer): 784x256x64 2.1x as fast; the fp8
                           product's epilogue line by line with the vector loops (c_amax, an
                           fp8 C, beta, bias: on an Intel Xeon core 784x256x64 with c_amax
                           3.4-3.5x and into E4M3 4.4-5.2x as fast), the same bits; on a CPU with AMX
                           fp8 x fp8 on the tile unit, widened to bf16 while packing (on that
                           core 3.1-6.2x as fast per-tensor, 3.2-5.0x block-scaled; 0.77-1.18x
                           the bf16 product's rate); on x86-64 an fp8 operand beside a bf16
                           one on the bf16 kernels, its codes widened to bf16 (there 2.9-5.8x
                           as fast). GELU's tanh is amp.h's own (in double, rounded once: the
                           C library's double tanh rounded, for every f32), not the platform's
                           tanhf: the GELU epilogue has the same bits on every CPU, flag set
                           and GPU, and runs line by line in vector loops (on that Xeon core
                           products with a bias and GELU 2.6-5.4x as fast). Under GCC -Ofast
                           the element math is inlined into its exact callers again (it was a
                           call per operation; the plain GELU 4x as fast), the same bits.
      0.2.0  (2026-11-23)  one host path over a table of per-device operations (CPU, CUDA);
                           AVX2/AVX-512 optimizer, scan and conversion loops; a fast CPU
                           amp_gemm (AVX-512 FMA, AVX512_BF16) with AMP_GEMM_REFERENCE for the
                           exact in-order product; checkpoints saved atomically and every field
                           validated on load; the DEEPSPEED preset grows on DynamicLossScaler's
                           window; amp_optimizer_config, AMP_OPTIM_* and amp_cuda_close added
                           (the old names still work); AMP_ASSERT removed (unused).
      0.1.0  (2026-11-21)  first release: conversions, op-list policy, loss scaler,
                           master-copy optimizers, checkpoints, CPU and CUDA paths.

   LICENSE: see the end of the file.
*/

#ifndef AMP_H
#define AMP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#ifndef AMPDEF
#ifdef AMP_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define AMPDEF static __attribute__((unused))  /* a static library need not use every function */
#else
#define AMPDEF static
#endif
#else
#define AMPDEF extern
#endif
#endif

/* AMP_HD marks element math compiled for the host and, under nvcc, for the device too. */
#if defined(__CUDACC__)
#define AMP_HD __host__ __device__
#else
#define AMP_HD
#endif
/* The optimizer's element functions and the CPU loops run exactly the IEEE single operations they
   are written with, also in a -ffast-math / -Ofast build: GCC would otherwise re-associate them,
   contract a * b + c into an FMA where the target has one, and rewrite divisions, so that the
   plain loops, the vector loops and the CUDA kernels would disagree. Clang ignores this attribute
   and, under -ffp-contract=fast (which -Ofast sets), its pragmas too: for it and for nvcc the
   element functions round each operation explicitly (amp__fmul and its kin, in the private part). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define AMP__EXACT_FP __attribute__((optimize("no-fast-math", "fp-contract=off")))
#else
#define AMP__EXACT_FP
#endif
/* Clang takes pragmas instead, around the code they cover (its intrinsics follow the state in
   which <immintrin.h> was first read). Clang supports float_control only on x86 (elsewhere it
   warns and ignores it), and its backend may still fuse under -ffp-contract=fast: the element
   functions therefore round each operation through AMP__KEEP (below), on every target; the pragmas
   only keep the x86 intrinsic loops exact. */
#if defined(__clang__) && !defined(__CUDACC__) && (defined(__x86_64__) || defined(__i386__))
#define AMP__EXACT_BEGIN _Pragma("float_control(precise, on, push)") _Pragma("clang fp contract(off)")
#define AMP__EXACT_END _Pragma("float_control(pop)")
#else
#define AMP__EXACT_BEGIN
#define AMP__EXACT_END
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
   Errors
   ------------------------------------------------------------------------------------------ */

/* Enums written as one list each, X(name, value): the list makes the enum and its names
   (amp_status_string and the private amp__*_name), so a new value is one line. */
#define AMP__ENUM_ITEM(name, value) name = value,
#define AMP__ENUM_CASE(name, value) case name: return #name;
#define AMP__STATUS_LIST(X) \
  X(AMP_OK, 0) \
  X(AMP_ERR_ARG, 1)          /* a bad argument: NULL, out of range, wrong type */ \
  X(AMP_ERR_NOMEM, 2)        /* an allocation failed */ \
  X(AMP_ERR_PARSE, 3)        /* malformed input text (mixlist JSON) */ \
  X(AMP_ERR_STATE, 4)        /* a call out of order (unscale twice, step after step, ...) */ \
  X(AMP_ERR_IO, 5)           /* a file could not be read or written */ \
  X(AMP_ERR_CORRUPT, 6)      /* a checkpoint that is damaged or does not match */ \
  X(AMP_ERR_UNSUPPORTED, 7)  /* not built in (CUDA without AMP_CUDA) or no device present (a driver that is \
                                present but too old, or any other CUDA failure, is AMP_ERR_DEVICE) */ \
  X(AMP_ERR_DEVICE, 8)       /* a CUDA / cuBLAS error */
typedef enum amp_status { AMP__STATUS_LIST(AMP__ENUM_ITEM) } amp_status;

AMPDEF const char *amp_status_string(amp_status s);
/* The message of the last failing call on this thread, "" if none. */
AMPDEF const char *amp_last_error(void);

/* ------------------------------------------------------------------------------------------
   Number formats
   ------------------------------------------------------------------------------------------ */

typedef uint16_t amp_f16;   /* IEEE 754 binary16 bits */
typedef uint16_t amp_bf16;  /* bfloat16 bits: the upper half of an IEEE binary32 */
/* The number formats, one row each (ggml's type_traits[]): every dtype dispatch, size, name, range,
   validation message and vector-path choice in amp.h and amp_kernels.cu is generated from this list
   or reads the table made from it (amp__dtype_table). Columns:
     enum name, suffix N (of the element functions amp__ld_N / amp__st_N, AMP_HD, and the bulk loops
     amp__N_to_f32 / amp__N_from_f32), C storage type, size in bytes, largest finite value and
     smallest normal (as f32 bits), CPU vector path (1: amp__ld8/st8/ld16/st16 and the F16C/AVX-512
     kernels take it on x86-64, amp__ld4/st4 and the NEON kernels on AArch64; 0: the portable
     loops), GPU vector path (1: the kernels' 4-wide accesses),
     cuBLAS type, NCCL type, compute (1: a type the trainer computes and steps in: model copies,
     grads, round_to, products, the scaler's buffers, the policy's low type; 0: a storage format
     that amp_convert casts to and from, refused everywhere else by name: fp8 for now), fp8
     encoding (-1: not an fp8 format; else the e5m2 argument of the fp8 encoders and decoders:
     0 E4M3, 1 E5M2), f32's top half (1: the format is the upper 16 bits of an f32, bf16: the one
     a model copy rounds to stochastically, by adding 16 random bits below it, and the one the
     split and absent masters keep, the split's remainder being the lower 16 bits).
   To add a format: append a row (the enum value is its position: never reorder, checkpoints hold
   it) and write its element functions amp__ld_N / amp__st_N and bulk loops (AMP__DT_BULK_LOOPS(N)
   writes those from the element functions). With CPU column 1, also its vector loads/stores
   amp__ld8_N, amp__st8_N, amp__ld16_N, amp__st16_N, amp__gemm_ld16_N and the NEON
   amp__ld4_N, amp__st4_N (with 0 the portable loops run it). The kernels take any row as it is
   (amp__cu_elem from the C type column).
   Nothing else names a format's size or values. */
#define AMP__DTYPES(X, A) \
  X(A, AMP_F32,  f32,  float,    4, 0x7f7fffffu, 0x00800000u, 1, 1, CUDA_R_32F,     ncclFloat,    1, -1, 0) /* 2^-126 */ \
  X(A, AMP_F16,  f16,  amp_f16,  2, 0x477fe000u, 0x38800000u, 1, 1, CUDA_R_16F,     ncclHalf,     1, -1, 0) /* 65504, 2^-14 */ \
  X(A, AMP_BF16, bf16, amp_bf16, 2, 0x7f7f0000u, 0x00800000u, 1, 1, CUDA_R_16BF,    ncclBfloat16, 1, -1, 1) /* 2^-126 */ \
  X(A, AMP_E4M3, e4m3, amp_fp8,  1, 0x43e00000u, 0x3c800000u, 0, 0, CUDA_R_8F_E4M3, ncclUint8,    0,  0, 0) /* 448, 2^-6 */ \
  X(A, AMP_E5M2, e5m2, amp_fp8,  1, 0x47600000u, 0x38800000u, 0, 0, CUDA_R_8F_E5M2, ncclUint8,    0,  1, 0) /* 57344, 2^-14 */
#define AMP__DT_ENUM_(A, E, ...) E,
#define AMP__DT_COUNT_(A, E, ...) + 1
/* AMP_F32 = 0, AMP_F16, AMP_BF16, AMP_E4M3, AMP_E5M2 (fp8: see FP8 FORMATS). AMP_GRAD_F32 is no
   format: amp_tensor_desc.grad_dtype's way to say f32 grads beside a 16-bit model copy (where 0
   would be ambiguous), AMP_F32 anywhere else */
typedef enum amp_dtype { AMP__DTYPES(AMP__DT_ENUM_, ~) AMP_GRAD_F32 = 0x100 } amp_dtype;
enum { AMP__DTYPE_COUNT = 0 AMP__DTYPES(AMP__DT_COUNT_, ~) };
/* switch (t) with one `case E: B(E, N, T, S)` per row (E the enum constant, N the suffix, T the C
   type, S the size): a body with the type a compile-time constant, so the loops it calls
   vectorise. B ends with break or return; an unknown t falls to the default (callers have refused
   it before). VSWITCH: only the rows with a CPU vector path. */
#define AMP__DT_CASE_(B, E, N, T, S, ...) case E: B(E, N, T, S)
#define AMP__DT_IF_0(x)
#define AMP__DT_IF_1(x) x
#define AMP__DT_VCASE_(B, E, N, T, S, MX, MN, CV, ...) AMP__DT_IF_##CV(case E: B(E, N, T, S))
#define AMP__DTYPE_SWITCH(t, B) switch (t) { AMP__DTYPES(AMP__DT_CASE_, B) default: break; }
#define AMP__DTYPE_VSWITCH(t, B) switch (t) { AMP__DTYPES(AMP__DT_VCASE_, B) default: break; }

/* Bulk host conversion between any two of F32/F16/BF16 (same type: a copy). AVX-512 or AVX2+F16C
   vector loops where the running CPU has them (decided once, by CPUID); on AArch64 NEON loops
   (FCVTL/FCVTN; BFCVTN for f32 -> bf16 where the build targets +bf16 and the CPU has BF16, asked
   once of getauxval / sysctlbyname; each call checks that the FPCR is in its default state, else
   it takes the portable loop); a portable loop elsewhere; all give exactly the bits of the scalar
   functions below, NaN payloads included, subnormals kept, whatever the FPU's modes. Any addresses
   work, odd ones included. Buffers of the same element size may overlap in any way (in place, or
   shifted: the result is that of converting a copy of src); buffers of different element sizes
   must not share a byte (AMP_ERR_ARG, nothing written). n = 0 accepts NULL pointers. Large outputs
   (>= 8 MiB, element-aligned) are written with streaming stores (x86-64). */
AMPDEF amp_status amp_convert(void *dst, amp_dtype dst_type, const void *src, amp_dtype src_type, size_t n);
/* 1 when amp_convert uses a vector path (AVX2+F16C or AVX-512; NEON on AArch64, always there).
   amp_simd_enable(0) forces the portable path (for tests and benchmarks); amp_simd_enable(1)
   returns to the CPU's best. Not thread-safe against amp_convert. */
AMPDEF int  amp_simd_active(void);
AMPDEF void amp_simd_enable(int on);
AMPDEF size_t amp_dtype_size(amp_dtype t);   /* 4, 2, 2; 0 for an unknown type */

/* Bit casts that work in C, C++ and CUDA device code. */
static inline AMP_HD uint32_t amp__f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u; memcpy(&u, &x, sizeof u); return u;
#endif
}
static inline AMP_HD float amp__bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x; memcpy(&x, &u, sizeof x); return x;
#endif
}

/* f32 -> f16, round to nearest even, integer arithmetic only (no dependence on the FPU's mode).
   NaN keeps its sign and the top 10 bits of its payload with the quiet bit set, exactly as the
   F16C instruction vcvtps2ph does (NumPy keeps the same payload bits; its software path leaves a
   signalling NaN signalling); a NaN never becomes inf. */
/* The normal-half case on its own: a = |x| bits in [2^-14, 65520). Rebias the exponent by
   127-15 = 112 and add 0xfff plus the lowest kept bit: a carry out of the 13 cut bits is
   round-to-nearest-even, and it may carry into the exponent. (The portable bulk loop runs this on
   every element and redoes the rest with amp_f32_to_f16.) */
static inline AMP_HD uint32_t amp__f16_normal(uint32_t a) {
  return (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
}
static inline AMP_HD amp_f16 amp_f32_to_f16(float x) {
  uint32_t f = amp__f32_bits(x);
  uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t a = f & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf stays inf; NaN: quiet bit 0x200 set, payload truncated */
    return (amp_f16)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
  if (a >= 0x477ff000u) /* >= 65520 = 65504 + half an ulp: rounds (ties-to-even) to inf */
    return (amp_f16)(sign | 0x7c00u);
  if (a >= 0x38800000u) return (amp_f16)(sign | amp__f16_normal(a)); /* >= 2^-14: a normal half */
  if (a < 0x33000000u) /* < 2^-25: below half the smallest subnormal, rounds to (signed) zero */
    return (amp_f16)sign;
  { /* a subnormal half: the value in units of 2^-24 is m * 2^(e - 126); shift by 14..24 and
       round to nearest even by comparing the cut bits with half. Exactly 2^-25 ties to 0;
       a result of 0x400 is the smallest normal, which is the right bit pattern too. */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e, r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (amp_f16)(sign | r);
  }
}

/* f16 -> f32: exact for all 65536 patterns, branch-free (Maratyszcza/FP16's trick) so that loops
   over it vectorise. Normals by rebiasing with one multiply by 2^-112, subnormals as
   (0.5 + m * 2^-24) - 0.5, exact both; each is one operation on a bit-built normal operand, so
   -ffast-math has nothing to fold or reassociate, and flush-to-zero and rounding modes do not
   touch it (the sign comes from the bits, so a zero is +-0 in every rounding mode). Inf and
   NaN are built on the bits, not through the multiply (a GPU's multiply returns the canonical
   NaN): a NaN keeps its sign and payload (shifted up) and comes out quiet (0x400000 set), exactly
   as the F16C instruction vcvtph2ps does, on the CPU and in the kernels alike. */
static inline AMP_HD float amp_f16_to_f32(amp_f16 h) {
  uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
  float normal = amp__bits_f32((two_w >> 4) + (0xE0u << 23)) * amp__bits_f32(0x07800000u);  /* 2^-112 */
  float denormal = amp__bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
  uint32_t sub = 0u - (uint32_t)(two_w < (1u << 27));   /* all ones for zero/subnormal inputs */
  uint32_t special = 0u - (uint32_t)((w & 0x7c000000u) == 0x7c000000u);   /* all ones for inf/NaN */
  uint32_t infnan = 0x7f800000u | ((w >> 3) & 0x007fe000u) | ((0u - (uint32_t)((w & 0x03ff0000u) != 0u)) & 0x00400000u);
  /* selects written as masks: GCC does not if-convert a ?: here and would not vectorise */
  /* (the sign bit of denormal cleared: 0.5 - 0.5 is -0 when the FPU rounds towards -inf) */
  uint32_t finite = (amp__f32_bits(denormal) & sub & 0x7fffffffu) | (amp__f32_bits(normal) & ~sub);
  return amp__bits_f32(sign | (infnan & special) | (finite & ~special));
}

/* f32 -> bf16: round to nearest even on the upper 16 bits (adding 0x7fff plus the lowest kept bit
   carries exactly when the cut half is above, or at a tie with an odd kept part). Subnormals are
   kept, not flushed. NaN -> quiet NaN with its sign and top payload bits, as ggml does. Written
   as one select (no early return) so that loops over it vectorise. */
static inline AMP_HD amp_bf16 amp_f32_to_bf16(float x) {
  uint32_t u = amp__f32_bits(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t isnan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
  return (amp_bf16)((((u >> 16) | 0x40u) & isnan) | (r & ~isnan));
}

/* bf16 -> f32: exact, the bits shifted up. */
static inline AMP_HD float amp_bf16_to_f32(amp_bf16 h) { return amp__bits_f32((uint32_t)h << 16); }

/* ---- fp8 (OCP 8-bit floating point): E4M3 "fn" and E5M2, and the E8M0 block scale ----
   The manual's FP8 FORMATS says what the formats hold. The conversions below are the CUDA
   toolkit's (cuda_fp8.h's __nv_cvt_float_to_fp8 and the GPU's cvt.rn.satfinite) bit for bit, on
   every f32 input (tests/test_fp8_exhaustive.c checks all 2^32): integer arithmetic only, so the
   FPU's rounding mode, flush-to-zero and -ffast-math change nothing; written as selects (no early
   return) so that loops over them vectorise. As dtypes they are the rows AMP_E4M3 and AMP_E5M2 of
   the format table (amp_convert casts every pair; stores into fp8 saturate). */
typedef uint8_t amp_fp8;

/* The rounding both formats share. a: |x| bits, finite; M mantissa bits, B the exponent bias.
   Returns the magnitude code rounded to nearest, ties to even (meaningless where a is beyond the
   format's overflow bound: the callers replace those lanes). */
static inline AMP_HD uint32_t amp__fp8_round(uint32_t a, uint32_t M, uint32_t B) {
  uint32_t cut = 23u - M;
  /* a normal result: rebias the exponent (127 - B) and add half an ulp less one plus the lowest
     kept bit, so that the cut bits carry exactly when they are above half, or at half with an odd
     kept part (the carry may run into the exponent: the next binade, right as bits) */
  uint32_t normal = (a - ((127u - B) << 23) + (1u << (cut - 1u)) - 1u + ((a >> cut) & 1u)) >> cut;
  /* a subnormal result: a = m * 2^(e - 150) with m the significand and its implicit bit, in units
     of the smallest subnormal 2^(1 - B - M) that is m >> (151 - B - M - e), rounded by the same
     carry; shifts outside 1..30 become 31: above 30 that takes every m < 2^24 to 0, as it should
     (f32 subnormals included: they are far below), and 0 or a wrapped difference only happen for
     large e, whose lanes take `normal` (31 keeps every shift defined) */
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  uint32_t sh = 151u - B - M - e;
  sh = sh - 1u < 30u ? sh : 31u;
  {
    uint32_t sub = (m + (1u << (sh - 1u)) - 1u + ((m >> sh) & 1u)) >> sh;  /* 2^M: the smallest normal, right too */
    uint32_t is_sub = 0u - (uint32_t)(a < ((128u - B) << 23));   /* all ones below the smallest normal 2^(1-B) */
    return (sub & is_sub) | (normal & ~is_sub);
  }
}

/* f32 -> E4M3, round to nearest even (subnormal results too). |x| above 464 (448 plus half an ulp;
   464 itself ties to 448) and +-inf: +-448 when saturate, else NaN (E4M3 has no inf). NaN -> 0x7f,
   the NaN the toolkit and the GPU write (its sign dropped; an overflow's NaN keeps the sign: 0xff). */
static inline AMP_HD amp_fp8 amp_f32_to_e4m3(float x, int saturate) {
  uint32_t u = amp__f32_bits(x), a = u & 0x7fffffffu;
  uint32_t r = amp__fp8_round(a, 3u, 7u);
  uint32_t over = 0u - (uint32_t)(a > 0x43e80000u);   /* > 464, inf and NaN included */
  uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u);
  r = ((saturate ? 0x7eu : 0x7fu) & over) | (r & ~over);
  r |= (u >> 24) & 0x80u;   /* the sign */
  return (amp_fp8)((0x7fu & nan) | (r & ~nan));
}

/* f32 -> E5M2, round to nearest even. |x| >= 61440 (57344 plus half an ulp: the tie rounds to the
   even code, inf) and +-inf: +-57344 when saturate, else +-inf. NaN -> 0x7f, as the toolkit. */
static inline AMP_HD amp_fp8 amp_f32_to_e5m2(float x, int saturate) {
  uint32_t u = amp__f32_bits(x), a = u & 0x7fffffffu;
  uint32_t r = amp__fp8_round(a, 2u, 15u);
  uint32_t over = 0u - (uint32_t)(a >= 0x47700000u);   /* >= 61440, inf and NaN included */
  uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u);
  r = ((saturate ? 0x7bu : 0x7cu) & over) | (r & ~over);
  r |= (u >> 24) & 0x80u;
  return (amp_fp8)((0x7fu & nan) | (r & ~nan));
}

/* E4M3 -> f32: exact for all 256 codes. Normals by rebiasing (the exponent field lands in the f32
   exponent's low bits: add 127 - 7); subnormals as m * 2^-9, an exact int-to-float conversion and
   an exact multiply on normal floats (nothing for flush-to-zero or -ffast-math to change). The
   NaN codes 0x7f / 0xff give a quiet NaN of that sign (0x7fc00000 | sign). */
static inline AMP_HD float amp_e4m3_to_f32(amp_fp8 c) {
  uint32_t a = (uint32_t)c & 0x7fu, sign = ((uint32_t)c & 0x80u) << 24;
  uint32_t normal = (a << 20) + (120u << 23);
  uint32_t sub = amp__f32_bits((float)(int)(a & 7u) * 0.001953125f);   /* m * 2^-9; 0 for code 0 */
  uint32_t is_sub = 0u - (uint32_t)(a < 8u), nan = 0u - (uint32_t)(a == 0x7fu);
  uint32_t r = (sub & is_sub) | (normal & ~is_sub);
  return amp__bits_f32(sign | (0x7fc00000u & nan) | (r & ~nan));
}

/* E5M2 -> f32: exact. E5M2 is the upper byte of an f16 (same exponent, two of its mantissa bits),
   so this is amp_f16_to_f32 of the code shifted up: inf is inf; a NaN keeps its sign and payload
   and comes out quiet, as there. */
static inline AMP_HD float amp_e5m2_to_f32(amp_fp8 c) { return amp_f16_to_f32((amp_f16)((uint32_t)c << 8)); }

/* f32 -> E8M0, the MX block scale 2^(e - 127) of |x| (e in 0..254; 0xff is NaN; no sign, no zero).
   round_up nonzero: the smallest such power >= |x|, as cuda_fp8.h's
   __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf): e is the exponent field, plus one
   when a mantissa bit is set, except at |x| <= 2^-127 (the f32 subnormals up to half the smallest
   normal), which 2^-127 (e = 0) already covers. round_up 0: the exponent field (OCP's floor;
   cudaRoundZero). Both saturate as __NV_SATFINITE: inf and anything above 2^127 give 254;
   0 and subnormals give 0 (2^-127); NaN gives 0xff. */
static inline AMP_HD uint8_t amp_f32_to_e8m0(float x, int round_up) {
  uint32_t a = amp__f32_bits(x) & 0x7fffffffu;
  uint32_t e = a >> 23;
  e += (uint32_t)(round_up != 0) & (uint32_t)((a & 0x7fffffu) != 0u) & (uint32_t)(a > 0x00400000u) &
       (uint32_t)(a < 0x7f800000u);
  e -= (uint32_t)(e == 255u) & (uint32_t)(a <= 0x7f800000u);   /* inf, or a round up past 254: 254 */
  return (uint8_t)e;
}

/* ------------------------------------------------------------------------------------------
   Op-list policy
   The question a trainer asks before each op: "with inputs of these dtypes, do I compute this op
   in f32 or in the low type?" Every op name is on at most one list:
     white  always low                                  (PyTorch lower_precision_fp, Paddle white)
     black  always f32                                  (PyTorch fp32, Paddle black)
     gray   f32 if any input is f32, else low           (PyTorch promote, Paddle gray)
   An op on no list behaves like a gray op: PyTorch runs unlisted ops in their inputs' type and
   Ascend treats an op without a precision_reduce flag as gray. amp_policy_list() says
   AMP_LIST_NONE for it. Names compare case-insensitively (ASCII letters; other bytes exactly),
   may be of any length, and are copied; each prints in the spelling it was first given.

   BUILT-IN LISTS (amp_policy_create): the union of PyTorch's CUDA autocast lists and Paddle's
   lists, under each framework's own op names (aten: matmul, linear, conv2d, layer_norm, bmm, ...;
   Paddle: matmul_v2, mul, softmax_with_cross_entropy, elementwise_add, reduce_sum, ...).
   Where the anchors disagree:
     - an op that one anchor lists and the other does not takes the list that names it
       (mean, square, lookup_table: Paddle black; linear, bmm, prelu: PyTorch low -> white);
     - f32 in PyTorch and black in Paddle are the same thing (sum, softmax, log_softmax, exp,
       log, pow, cumsum, ...) -> black;
     - layer_norm, group_norm: f32 in PyTorch and black in paddle.amp (2.5+), but layer_norm is
       gray in Paddle's static lists -> black. A row's mean and variance in f16 lose what the
       next ops cannot get back, and the newer Paddle list agrees with PyTorch;
     - fused_attention, fused_feedforward: gray in Paddle's static lists, white in paddle.amp
       -> white (they are matrix products);
     - mul: Paddle's `mul` is its fully-connected matrix product (white); PyTorch's elementwise
       mul is on no list -> white. Use elementwise_mul (gray) for an elementwise product.
   amp_policy_print() shows every op with its list.

   DECIDE: white -> low; black -> f32; gray or unlisted -> f32 if any input is f32, else low
   (no inputs: low). Then the mode's rule:
     MIXED       as above.
     PURE        black ops and the norms (batch_norm, layer_norm, group_norm, instance_norm,
                 whatever their list) in f32; every other op low, whatever its inputs. (Paddle O2
                 itself keeps a shorter black list; move ops to gray to match it exactly.)
     WHITE_ONLY  white ops low; every other op f32 (gray ones too, with or without inputs).
     FORCE_LOW   every op low.          FORCE_F32   every op f32.
     KEEP        the inputs' own type: all AMP_F16 -> AMP_F16, all AMP_BF16 -> AMP_BF16. Any f32
                 input, or f16 mixed with bf16 (neither holds the other; PyTorch promotes that pair
                 to f32), -> f32. No inputs -> f32 (a source op makes its tensor in the model's
                 origin type). KEEP is the only mode that may answer the low type it was not given.
   A NULL policy or op, an empty name, inputs == NULL with n_inputs > 0, or an input that is not
   an amp_dtype answers AMP_F32 and sets amp_last_error(). decide() never allocates.

   CHANGING THE LISTS (Paddle's AutoMixedPrecisionLists semantics):
     amp_policy_set(p, op, list)  puts op on that list and off every other; AMP_LIST_NONE
                                  unlists it (it then behaves as gray).
     amp_policy_customize(p, white, n_white, black, n_black)  Paddle's custom_white_list /
                                  custom_black_list: each entry moves its op onto that list, out
                                  of every other. An op in both (case-insensitively) is AMP_ERR_ARG.
     amp_policy_load_mixlist(p, json, len) / amp_policy_load_mixlist_file(p, path): Ascend's
     --modify_mixlist file, e.g.
        {"black-list": {"to-remove": ["Yolo"],   "to-add": ["Matmul"]},   // comments allowed
         "white-list": {"to-remove": ["Conv2D"], "to-add": ["Bias"]}}
       to-add     moves the op onto that list, out of the others;
       to-remove  moves an op that is on that list to gray; an op not on it stays where it is.
                  So an op removed from white without being added to black ends gray, not black;
                  removed from white and added to black, it ends black.
       All four keys are optional. The same op in both to-add lists, or in to-add and to-remove
       of one list, is an error. The text is strict JSON (RFC 8259 strings with every escape,
       \uXXXX with surrogate pairs, checked UTF-8, an optional UTF-8 BOM) plus // line comments,
       which the vendor's own examples carry. No other keys, no duplicate keys, nothing after the
       object. The format is three levels deep and the parser never goes deeper, so deeper
       nesting is rejected where it starts. json need not be NUL-terminated: len is its size.
       Errors: AMP_ERR_PARSE, and amp_last_error() gives "line L, column C" (1-based, columns in
       characters); a file that cannot be read is AMP_ERR_IO naming the path.
   Every changing call is all or nothing: on any error the policy is exactly as before.

   THREAD SAFETY: decide, list, dump and print only read the policy, so any number of threads
   may call them at once on one policy. set, customize, load_mixlist and destroy change it: the
   caller keeps readers out while they run.
   ------------------------------------------------------------------------------------------ */

/* X(name, value, label): amp_list_name gives the label */
#define AMP__LIST_LIST(X) \
  X(AMP_LIST_NONE, 0, none) X(AMP_LIST_WHITE, 1, white) X(AMP_LIST_BLACK, 2, black) X(AMP_LIST_GRAY, 3, gray)
#define AMP__LABEL_ITEM(name, value, label) name = value,
#define AMP__LABEL_CASE(name, value, label) case name: return #label;
typedef enum amp_list { AMP__LIST_LIST(AMP__LABEL_ITEM) } amp_list;
#define AMP__MODE_LIST(X) \
  X(AMP_MODE_MIXED, 0)       /* white->low, black->f32, gray->follow inputs  (PyTorch autocast, Paddle O1, \
                                Ascend allow_mix_precision) */ \
  X(AMP_MODE_PURE, 1)        /* everything low except black and norms        (Paddle O2, apex O2 \
                                keep_batchnorm_fp32) */ \
  X(AMP_MODE_WHITE_ONLY, 2)  /* only white low, all else f32                 (Paddle OD, Ascend allow_fp32_to_fp16) */ \
  X(AMP_MODE_FORCE_LOW, 3)   /* every op low                                 (Ascend force_fp16) */ \
  X(AMP_MODE_FORCE_F32, 4)   /* every op f32                                 (Ascend force_fp32) */ \
  X(AMP_MODE_KEEP, 5)        /* every op keeps its inputs' dtype             (Ascend must_keep_origin_dtype) */
typedef enum amp_mode { AMP__MODE_LIST(AMP__ENUM_ITEM) } amp_mode;
typedef struct amp_policy amp_policy;

AMPDEF amp_status amp_policy_create(amp_policy **out, amp_mode mode, amp_dtype low);
AMPDEF void       amp_policy_destroy(amp_policy *p);
AMPDEF amp_list   amp_policy_list(const amp_policy *p, const char *op);
AMPDEF amp_status amp_policy_set(amp_policy *p, const char *op, amp_list list);
AMPDEF amp_status amp_policy_customize(amp_policy *p, const char *const *white, size_t n_white,
                                       const char *const *black, size_t n_black);
AMPDEF amp_status amp_policy_load_mixlist(amp_policy *p, const char *json, size_t len);
AMPDEF amp_status amp_policy_load_mixlist_file(amp_policy *p, const char *path);
AMPDEF amp_dtype  amp_policy_decide(const amp_policy *p, const char *op, const amp_dtype *inputs, size_t n_inputs);
/* The policy as text: a first line "# amp_policy: mode AMP_MODE_MIXED, low AMP_F16, N ops
   (unlisted ops behave as gray)", then one line per op, "white conv2d", "black exp",
   "gray  relu", sorted by name case-insensitively. *needed (when not NULL) gets the size in
   bytes including the final NUL. buf == NULL with cap == 0 only asks for the size; a cap
   smaller than needed is AMP_ERR_ARG and buf is left untouched. */
AMPDEF amp_status amp_policy_dump(const amp_policy *p, char *buf, size_t cap, size_t *needed);
/* The same text written to a FILE * (void * keeps <stdio.h> out of this header); NULL = stdout. */
AMPDEF amp_status amp_policy_print(const amp_policy *p, void *file);
/* "white", "black", "gray", "none"; NULL for a value that is not an amp_list. */
AMPDEF const char *amp_list_name(amp_list l);

/* ------------------------------------------------------------------------------------------
   Devices
   ------------------------------------------------------------------------------------------ */

/* CUDA devices and threads. Every amp.h call on a CUDA object (device, scaler, optimizer, product)
   runs with the object's device current and then makes the calling thread's own context current
   again (none if it had none): one thread may use objects on several devices, a thread that never
   called cudaSetDevice may use any, and neither amp_cuda_open nor any later call changes which
   device the caller's own CUDA code runs on. Thread rules: an amp_device may be used from several
   threads at once by amp_gemm/amp_gemm_ex and amp_device_sync (the product's plan cache is under a
   lock; all work goes to the device's one stream, in the order the calls were made); a scaler or
   an optimizer, like its CPU twin, must be used by one thread at a time, and amp_device_close must
   come after every other call on the device has returned. */
typedef struct amp_device amp_device;
AMPDEF amp_device *amp_cpu(void);                                   /* always there, never freed */
AMPDEF amp_status  amp_cuda_open(amp_device **out, int ordinal, void *cuda_stream /* NULL = default */);
AMPDEF void        amp_device_close(amp_device *d);
AMPDEF void        amp_cuda_close(amp_device *d);                  /* amp_device_close, named as its pair */
AMPDEF amp_status  amp_device_sync(amp_device *d);
AMPDEF int         amp_device_is_cuda(const amp_device *d);

/* ---- Data-parallel with NCCL (one process or thread per GPU) -----------------------------------
   Built when the implementation unit defines AMP_CUDA and AMP_NCCL and amp_kernels.cu is compiled
   with -DAMP_NCCL (link -lnccl); otherwise both return AMP_ERR_UNSUPPORTED and say how to enable
   them. nccl_comm is the trainer's ncclComm_t (amp.h does not include nccl.h). NCCL failures are
   AMP_ERR_DEVICE with ncclGetErrorString (and NCCL's last error) in amp_last_error().

   amp_nccl_allreduce_hook is the scaler's all-reduce hook as it stands, the one line:
       amp_scaler_set_allreduce(sc, amp_nccl_allreduce_hook, comm);
   It enqueues ncclAllReduce(buf, buf, n, ncclDouble, ncclSum, comm, stream) and returns: a device
   scaler's step stays free of host waits. For a CPU scaler (buf in host memory) it goes through a
   small device buffer on the default stream and waits.
   When to set it: whenever the ranks' optimizers step different gradients: a sharded optimizer
   (ZeRO: each rank owns a slice of the fp32 masters, as examples/dp_threads.c and dp_nccl.c do),
   FSDP, tensor or pipeline parallelism. Then found_inf and the clipping norm become global. In
   plain DDP, where every rank steps the whole model with the same all-reduced grads, an inf on one
   rank is already inf on all of them after amp_nccl_allreduce_grads (NCCL gives every rank the same
   bits), so they skip together without the hook; with it the squared norm would be counted once
   per rank (it is summed), so leave it off there.

   amp_nccl_allreduce_grads all-reduces n gradients of type t in place (a device pointer on d), on
   d's stream, enqueued only: the sum over the ranks, or with average != 0 the mean (the sum times
   1/ranks rounded to f32). in_f32 != 0, what the examples pass and the recommended setting, widens
   to an fp32 copy (at most 64 MiB, in chunks, stream-ordered cudaMallocAsync), reduces that and
   rounds once back to t; in_f32 0 reduces in t itself (half the bytes on the wire: PyTorch DDP's
   default, DeepSpeed's fp16 communication_data_type). Why fp32 by default: NCCL rounds to the wire
   type after every hop, so a bf16 sum over R ranks carries about log2(R) fewer of its 8 bits
   (Megatron-LM forces fp32 all-reduce with --bf16 for that reason), and an f16 sum of scaled grads
   can reach inf where every rank's grads fit (a spurious skip, and the scale settles log2(R) lower).
   F32 grads are reduced directly (ncclAvg for the mean); in_f32 changes nothing for them. */
AMPDEF amp_status amp_nccl_allreduce_hook(void *nccl_comm, double *buf, int n, void *stream);
AMPDEF amp_status amp_nccl_allreduce_grads(amp_device *d, void *nccl_comm, void *grads, amp_dtype t, size_t n,
                                           int average, int in_f32);

/* ------------------------------------------------------------------------------------------
   Gradient scaler (mirrors PyTorch: scaler.unscale_(opt) / scaler.step(opt) / scaler.update())
   ------------------------------------------------------------------------------------------ */

enum { AMP_HYSTERESIS_CONSECUTIVE = 0, AMP_HYSTERESIS_CLEAN_REFILL = 1, AMP_HYSTERESIS_GROWTH_REFILL = 2 };

/* ZEROS: every field's 0 means the default written beside it; no field has a legal 0 of its own
   that this hides (a scale, factor, interval or count of 0 is never valid; min_scale 0 and
   max_scale 0 are themselves "no floor" and "no cap"), so every legal config can be written.
   -0.0f is read as 0. One exception: with fixed set, init_scale must be written (0 is AMP_ERR_ARG):
   fixed scaling keeps the scale given, and a silent 65536 is never what a bf16 or f32 trainer
   wants (for no scaling at all, step without a scaler: amp_optimizer_step). */
typedef struct amp_scaler_config {
  float init_scale;      /* 0 -> 65536 (with fixed: required) */
  float growth_factor;   /* 0 -> 2.0, must be > 1 */
  float backoff_factor;  /* 0 -> 0.5, must be in (0, 1) */
  int   growth_interval; /* 0 -> 2000 */
  int   hysteresis;      /* 0 -> 1: overflowing steps counted before one back-off */
  int   hysteresis_mode; /* how the count refills: AMP_HYSTERESIS_CONSECUTIVE (0, Paddle),
                            AMP_HYSTERESIS_CLEAN_REFILL (apex, DeepSpeed consecutive_hysteresis),
                            AMP_HYSTERESIS_GROWTH_REFILL (DeepSpeed default) */
  float min_scale;       /* 0 -> no floor; the scale never goes below FLT_MIN all the same (a
                            subnormal or zero scale would make the inverse scale inf) */
  float max_scale;       /* 0 -> no cap */
  int   fixed;           /* nonzero: static loss scaling at init_scale (unscale by 1/init_scale,
                            still skip on inf/NaN, the scale never changes) */
  int   late_growth;     /* nonzero: the window of DeepSpeed's older FP16_Optimizer._update_scale
                            (stable_interval = iter - last_overflow_iter - 1): the first clean step
                            after an overflow (and after the start) is not counted, so the first
                            growth comes after growth_interval + 1 clean steps, later ones every
                            growth_interval. Not part of any preset: DeepSpeed's DynamicLossScaler
                            (the DEEPSPEED preset) counts like PyTorch. */
} amp_scaler_config;
typedef enum amp_preset { AMP_PRESET_PYTORCH = 0, AMP_PRESET_PADDLE, AMP_PRESET_DEEPSPEED,
                          AMP_PRESET_APEX, AMP_PRESET_KERAS } amp_preset;

typedef struct amp_optimizer amp_optimizer;
typedef struct amp_scaler amp_scaler;

/* The presets, each matching its anchor's update rule step for step:
     PYTORCH   65536 / 2 / 0.5 / 2000 / hysteresis 1 / no floor / no cap     (torch.amp.GradScaler)
     PADDLE    65536 / 2 / 0.5 / 2000 / 1 CONSECUTIVE / floor 1             (paddle.amp.GradScaler)
     DEEPSPEED 65536 / 2 / 0.5 / 1000 / 2 GROWTH_REFILL / floor 1 (DynamicLossScaler.update_scale:
               a clean step grows when (iter - last_overflow_iter) % 1000 == 0, i.e. after 1000
               clean steps from the start or from the last overflow, absorbed or not; where
               DeepSpeed raises at the minimum scale, amp.h stays at the floor and logs once)
     APEX      65536 / 2 / 0.5 / 2000 / 1 CLEAN_REFILL / cap 2^24          (apex.amp LossScaler)
     KERAS     32768 / 2 / 0.5 / 2000 / 1 / floor 1                         (LossScaleOptimizer)
   An unknown preset gives the PyTorch one. */
AMPDEF amp_scaler_config amp_scaler_preset(amp_preset p);
/* Validates cfg (NULL: the defaults) and resolves it. Errors name the field: growth_factor must be
   > 1, backoff_factor in (0, 1), growth_interval >= 1, hysteresis >= 1, hysteresis_mode 0..2,
   min_scale >= 0 and finite, max_scale 0 or >= min_scale, init_scale finite, >= FLT_MIN and within
   [min_scale, max_scale], and given (not 0) when fixed is set. */
AMPDEF amp_status amp_scaler_create(amp_scaler **out, amp_device *d, const amp_scaler_config *cfg /* NULL: defaults */);
AMPDEF void       amp_scaler_destroy(amp_scaler *s);
AMPDEF float      amp_scaler_get_scale(amp_scaler *s);               /* on CUDA this waits for the stream */
/* Call order (PyTorch's GradScaler, per optimizer; update() starts a new iteration for all):
     unscale(o)  optional, at most once per iteration: one pass over o's grads (read in their own
                 dtype, worked in fp32, never written back) gives inf/NaN and the global L2 norm of
                 the unscaled grads. A second call -> AMP_ERR_STATE ("unscale() has already been
                 called on this optimizer since the last update()"); after step -> AMP_ERR_STATE.
     step(o)     at most once per iteration (a second -> AMP_ERR_STATE "step() has already been
                 called since the last update()"); unscales first if unscale(o) was not called.
                 Skipped when o's grads or those of any optimizer unscaled earlier in this
                 iteration held inf/NaN: to skip all optimizers together when any sees inf, call
                 unscale() on every one of them before the first step(). A skipped step changes
                 nothing (model copy, master, moments, step count stay bit for bit).
     update()    once per iteration: the scale rule with found_inf = any inf/NaN seen by any
                 optimizer this iteration. With no unscale/step recorded since the last update it
                 fails with AMP_ERR_STATE ("No inf checks were recorded prior to update()"),
                 PyTorch's assertion; use update_found_inf() to drive the rule by hand.
   Gradient accumulation: run every micro-batch's backward at the same get_scale(), accumulate
   into the grads, then unscale/step/update once. The scaler and the optimizer must live on the
   same device (AMP_ERR_ARG otherwise). */
AMPDEF amp_status amp_scaler_unscale(amp_scaler *s, amp_optimizer *o); /* optional, at most once per step */
/* unscale if needed, skip on inf/NaN, else update */
AMPDEF amp_status amp_scaler_step(amp_scaler *s, amp_optimizer *o);
AMPDEF amp_status amp_scaler_update(amp_scaler *s);                    /* the scale rule; call once per iteration */
/* The rule with found_inf = (found_inf != 0) OR whatever unscale/step recorded in this iteration;
   needs no prior unscale/step. Closes the iteration like update(). */
/* for trainers that check grads themselves */
AMPDEF amp_status amp_scaler_update_found_inf(amp_scaler *s, int found_inf);
/* 1 when the iteration closed by the last update saw inf/NaN (its steps were skipped), else 0. */
AMPDEF int        amp_scaler_last_skipped(const amp_scaler *s);
/* Iterations with inf/NaN since create (restored by amp_checkpoint_load): for LR schedules. */
AMPDEF long       amp_scaler_skipped_steps(const amp_scaler *s);
/* 1 while the scale sits at its floor (min_scale, or FLT_MIN without one) because the last
   overflow wanted to go below it; the first time in a row this happens the log hook says so. */
AMPDEF int        amp_scaler_at_floor(const amp_scaler *s);

/* The current scale where the trainer's own loss-gradient code can read it: on a CUDA device the
   device address of a float (read it in a kernel on the device's stream: it changes at update(),
   in stream order, so a captured graph reads the scale of its replay); on the CPU the address of
   the host float. Valid until the scaler is destroyed. NULL (and amp_last_error) for s NULL. */
AMPDEF float     *amp_scaler_scale_ptr(amp_scaler *s);
/* buf[i] = buf[i] * scale, rounded to t once (the gradient of the scaled loss, for a trainer whose
   backward starts from an unscaled loss gradient). On CUDA buf is device memory and this is one
   launch on the device's stream reading the device scale (no wait, capturable); the same bits as
   on the CPU (NaN payloads aside: a GPU multiply returns the canonical NaN). n 0 does nothing;
   buf NULL with n > 0 or an unknown t is AMP_ERR_ARG. */
AMPDEF amp_status amp_scaler_scale_buffer(amp_scaler *s, void *buf, amp_dtype t, size_t n);

/* ON A CUDA DEVICE (amp_cuda_open; the implementation built with AMP_CUDA and linked with
   amp_kernels.o) the same calls keep the scale state, the found-inf flag and the skip counts in
   device memory, and unscale/step/update only enqueue kernels on the device's stream: one step of
   any number of tensors is 3 launches (unscale, fused update, scale rule; the update one more for
   each further form of moment storage: AMP_MOMENTS_*), no allocation, no copy, no wait, so it
   may be captured in a CUDA graph (make one eager step first: the device optimizer
   is built, with a wait, at the first call that needs it). Reads wait for the stream:
   get_scale (the one read a normal step makes), get_state, last_skipped, skipped_steps, at_floor,
   amp_optimizer_grad_norm and amp_optimizer_step_count. A step is skipped on the device exactly
   when the CPU would skip it: when this optimizer's grads or those of any optimizer unscaled into
   the same scaler earlier in the iteration held inf/NaN. Differences from the CPU: the scale rule
   is bit for bit the CPU's; the element updates round every operation as the CPU's do (no FMA
   contraction: the step kernels' PTX is checked for it), so the same grads and coefficients give
   the CPU's masters, moments and model copies, stochastic bits included; Adam's bias corrections
   come from the device's pow (within 2 ulp in double, where the host's is correctly rounded), which
   can move a step size's last bit; the grad norm differs by float summation order (about 1e-7
   relative), so a clipped update can differ by as much. The floor message is given by the first
   read (get_scale, the one a normal step makes) that sees the scale at its floor.
   A device failure is AMP_ERR_DEVICE with the public function's name, the CUDA call and its error.
   Data-parallel on CUDA: unscale is 3 launches around the hook (this rank's pass, the hook's own
   work on the stream, a 1-thread decision). Destroy scalers and optimizers before their device. */

/* Data-parallel training (one process or thread per GPU). If any rank saw inf/NaN, every rank must
   skip the step and back off together, and clipping must use the global norm; otherwise the
   replicas drift apart silently.
   When is the hook needed? In plain DDP every rank steps the same all-reduced gradients: an inf on
   one rank is inf on all after the gradient all-reduce, so the ranks already agree, and the hook
   would count the norm world times: do not set it. Set it when each rank's optimizer steps a
   DIFFERENT part of the gradients: a sharded optimizer (ZeRO, each rank owning a slice of the
   fp32 masters), FSDP, tensor parallelism; examples/dp_threads.c shows that case. Give the scaler a hook that
   all-reduces a small buffer across ranks and amp.h calls it once per unscale (one call per
   optimizer per step, never per tensor), between finding inf/NaN and deciding:
     buf[0]  1 if this rank's grads held inf/NaN, else 0
     buf[1]  this rank's sum of squares of the unscaled grads
   The hook must replace both with their SUM over all ranks, in place (one all-reduce of 2 doubles
   with a sum, e.g. ncclAllReduce(buf, buf, 2, ncclDouble, ncclSum, comm, stream)). On the CPU buf
   is host memory and stream is NULL; on a CUDA device buf is device memory and the hook must only
   enqueue work on `stream` (the device's stream, NULL for the legacy default stream), so the step
   still never waits for the GPU. The buffer belongs to the optimizer; a hook must not keep it.
   A hook that returns anything but AMP_OK fails the unscale/step with that status (AMP_ERR_DEVICE
   for a status that is not an amp_status), before any weight is touched. fn NULL removes the hook.
   The same hook serves an fp8 scaler reduced over this scaler's group (amp_fp8_scaler_reduce_over):
   each amp_fp8_scaler_update calls it once with n < 0, and then buf holds -n amaxes, each the bits
   of a float amax, sign cleared, as an integer-valued double (0 .. 2^31 - 1), which the hook must
   replace with their MAX over all ranks (ncclAllReduce(buf, buf, -n, ncclDouble, ncclMax, comm,
   stream)). On the CPU a value outside that range or not an integer fails the update with
   AMP_ERR_ARG, nothing changed; a CUDA scaler clamps it into the range, where a value past it
   becomes 0x7fffffff, a NaN amax, which each recipe takes as a NaN amax.
   amp_nccl_allreduce_hook does both; a hook of your own must too, once fp8 scalers use it. */
typedef amp_status (*amp_allreduce_fn)(void *user, double *buf, int n, void *stream);
AMPDEF amp_status amp_scaler_set_allreduce(amp_scaler *s, amp_allreduce_fn fn, void *user);

/* The log hook: amp.h's few warnings (the scale stuck at its floor; with gradient stats on, each
   overflow's line, see THE OVERFLOW LINE) go to fn(user, msg); the
   default writes "amp.h: msg" to stderr; fn NULL restores the default. Process-wide. Safe to call
   while other threads log (with gcc, clang and compilers that have their atomics; elsewhere set it
   before any other thread uses amp.h): each message goes to one hook with that hook's own user
   pointer, and a message already being delivered when the hook changes may still reach the old
   hook, so keep what the old hook uses alive until such calls are done. The hook may be called
   from several threads at once. */
AMPDEF void       amp_set_log(void (*fn)(void *user, const char *msg), void *user);

/* The scale rule's state, shared by the CPU scaler and the device-resident one. */
typedef struct amp_scale_state {
  float   scale;        /* the current loss scale */
  int32_t tracker;      /* clean steps since the last growth or overflow (late_growth: minus 1) */
  int32_t hyst;         /* CONSECUTIVE: overflows in a row so far; *_REFILL: overflows left before a back-off */
  int32_t at_floor;     /* 1 when the last overflow wanted to go below the floor */
} amp_scale_state;

/* The resolved rule parameters (defaults filled in, floor at least FLT_MIN). */
typedef struct amp_scale_params {
  float growth, backoff, floor, cap;   /* cap 0: none */
  int32_t interval, hysteresis, mode, fixed;
  int32_t late_growth;                 /* DeepSpeed's window, see amp_scaler_config */
} amp_scale_params;

/* The rule's state and resolved parameters (a copy; on CUDA this waits for the stream). */
AMPDEF amp_status amp_scaler_get_state(const amp_scaler *s, amp_scale_state *state, amp_scale_params *params);

/* ------------------------------------------------------------------------------------------
   fp8 scaling: the per-tensor recipes, the fp8 scaler, the cast that measures its amax
   (the manual's FP8 SCALING says what each recipe does and why)
   ------------------------------------------------------------------------------------------ */

/* X(name, value, label): the recipes, each an anchor's rule for a tensor's scale. */
#define AMP__FP8_RECIPES(X) \
  X(AMP_FP8_DELAYED, 0, delayed)   /* TransformerEngine DelayedScaling: the max (or the latest) of an amax history */ \
  X(AMP_FP8_CURRENT, 1, current)   /* TransformerEngine Float8CurrentScaling: fmax / amax in f32 */ \
  X(AMP_FP8_TORCHAO, 2, torchao)   /* torchao tensorwise: fmax / max(amax, 1e-12) in double */ \
  X(AMP_FP8_MSAMP, 3, msamp)       /* MS-AMP: the power of two at or below fmax / amax, shifted by the margin */
typedef enum amp_fp8_recipe { AMP__FP8_RECIPES(AMP__LABEL_ITEM) } amp_fp8_recipe;
#define AMP_FP8_HISTORY_MAX 65536   /* the longest amax history an fp8 scaler keeps */

/* Zero means the defaults: DELAYED, a history of 1024, "max", margin 0. */
typedef struct amp_fp8_config {
  amp_fp8_recipe recipe;
  int   history_len;   /* DELAYED: 1..AMP_FP8_HISTORY_MAX amaxes kept per tensor; 0 -> 1024. Others: 0 */
  int   most_recent;   /* DELAYED: 1 = amax_compute_algo "most_recent" (slot 0), 0 = "max" (every slot) */
  float margin;        /* DELAYED, MSAMP (an integer there): the scale divided by 2^margin; |margin| <= 64 */
  int   pow2;          /* CURRENT, TORCHAO: round the scale down to a power of two */
  float amax_epsilon;  /* CURRENT: an amax below it counts as it (TE's amax_epsilon, default 0) */
  int   stats;         /* 1: count each tensor's casts (amp_fp8_scaler_stats); 0: off (the casts are the same code) */
} amp_fp8_config;

/* The rule alone: the next scale of a tensor cast to `format` (AMP_E4M3: fmax 448, AMP_E5M2:
   57344), given the amax the recipe reads (DELAYED: the history's, computed by the caller) and the
   previous scale (1 at start). The same function runs in the CPU scaler and the CUDA kernel.
   c NULL is the defaults; a format that is not fp8 or a recipe that is not one of the list
   gives NaN (it cannot report more: it runs on the device too; amp_fp8_scaler_create checks).
   The other fields are taken as amp_fp8_scaler_create accepts them (a NaN margin or a negative
   amax_epsilon gives a scale with no meaning); a zero-initialised config is the defaults. */
static inline AMP_HD float amp_fp8_scale_from_amax(const amp_fp8_config *c, amp_dtype format, float amax,
                                                   float prev_scale);

/* n tensors' formats, scales, scale_invs (1 / scale) and amax histories on a device (TE's "fp8
   meta"): each step the casts write each tensor's amax into its slot 0 (amp_quantize with
   amp_fp8_scaler_amax_ptr, or amp_fp8_scaler_record), and amp_fp8_scaler_update, once per step,
   turns them into every tensor's next scale by the recipe and rolls the histories. A fresh scaler
   has every scale 1 and every history 0 (as TE). On CUDA the state lives in device memory, update
   is one launch with no host wait (a CUDA graph may capture it), and the pointers are device
   pointers. formats: n entries, each AMP_E4M3 or AMP_E5M2 (HYBRID: E4M3 for the forward tensors,
   E5M2 for the grads); NULL: all AMP_E4M3. Refused with AMP_ERR_ARG, nothing made: n 0, a format
   that is not fp8, a history_len out of range or given to a recipe without history, a margin
   that is NaN, infinite, above 64 in size, nonzero for CURRENT/TORCHAO or not an integer for
   MSAMP, pow2 with DELAYED/MSAMP, an amax_epsilon that is negative, NaN, infinite or subnormal
   (a -Ofast build would read a subnormal as 0; -0 is taken as 0), an unknown recipe. */
typedef struct amp_fp8_scaler amp_fp8_scaler;
AMPDEF amp_status amp_fp8_scaler_create(amp_fp8_scaler **out, amp_device *d, const amp_fp8_config *c, size_t n,
                                        const amp_dtype *formats);
AMPDEF void       amp_fp8_scaler_destroy(amp_fp8_scaler *f);
/* Tensor i's amax this step, from the host: slot 0 becomes max(slot 0, amax) (several calls give
   their max; a NaN is kept). amax must be >= 0 or NaN. On CUDA one launch, stream-ordered, and
   refused (AMP_ERR_STATE) while the device's stream captures a CUDA graph, whose every launch would
   add this same amax again: in a graph the casts write the amaxes (amp_fp8_scaler_amax_ptr). */
AMPDEF amp_status amp_fp8_scaler_record(amp_fp8_scaler *f, size_t i, float amax);
/* Once per step, after every cast of the step: each tensor's next scale and scale_inv, histories
   rolled (slot 0 cleared for the next step). */
AMPDEF amp_status amp_fp8_scaler_update(amp_fp8_scaler *f);
/* Tensor i's scale / scale_inv now (on CUDA these wait for the stream; a failed read gives NaN, see
   DEVICE ERRORS AND GETTERS); NaN for a bad f or i, with amp_last_error() saying why. */
AMPDEF float      amp_fp8_scaler_get_scale(amp_fp8_scaler *f, size_t i);
AMPDEF float      amp_fp8_scaler_get_scale_inv(amp_fp8_scaler *f, size_t i);
/* Tensor i's amax history, oldest-first as the rule sees it: out[j] = slot j, j < len (len at most
   the history length; a copy, waiting for the stream on CUDA). */
AMPDEF amp_status amp_fp8_scaler_history(amp_fp8_scaler *f, size_t i, float *out, int len);
/* Where a cast writes tensor i's amax this step (slot 0; pass it as amp_quantize's amax_out), and
   where its scale and scale_inv live; device pointers on CUDA, valid until destroy. NULL for a
   bad f or i. */
AMPDEF float       *amp_fp8_scaler_amax_ptr(amp_fp8_scaler *f, size_t i);
AMPDEF const float *amp_fp8_scaler_scale_ptr(amp_fp8_scaler *f, size_t i);
AMPDEF const float *amp_fp8_scaler_scale_inv_ptr(amp_fp8_scaler *f, size_t i);
AMPDEF amp_fp8_config amp_fp8_scaler_config(const amp_fp8_scaler *f);   /* as resolved (defaults filled) */
/* Data parallel: from now on each update first reduces every tensor's slot 0 (this step's amax)
   to its MAX over the ranks, through s's all-reduce hook (amp_scaler_set_allreduce, called with
   n < 0): the same call and the same group as the loss scaler's found-inf and norm, so the amaxes
   cannot be reduced over another group (a 40B Megatron-LM run diverged when they were), and every
   rank gets the same scales. Amaxes are reduced as their bits, so a NaN on any rank is NaN on all.
   Without a hook on s the update reduces nothing (one rank). s on f's device (AMP_ERR_ARG
   otherwise), alive while f updates; s NULL: no reduction. */
AMPDEF amp_status amp_fp8_scaler_reduce_over(amp_fp8_scaler *f, amp_scaler *s);
/* Cast telemetry (config.stats 1; the manual's FP8 SCALING says how to read it). Per tensor the
   scaler keeps the counts of this step's casts, which the casts add into (amp_quantize_ex with
   amp_fp8_scaler_counts_ptr), and update moves them into the last step's counts (this step's
   start again at 0). amp_fp8_scaler_stats: tensor i's last step, as the last update left it.
   Before the first update every field is 0. On CUDA it waits for the stream (a failed read:
   AMP_ERR_DEVICE). Refused, nothing written: f or out NULL, i out of range (AMP_ERR_ARG), stats
   off (AMP_ERR_STATE). Checkpoints do not hold the counts (a load leaves them as they are). */
typedef struct amp_fp8_stats {
  uint64_t n;           /* elements cast (amp_quantize_ex's n, every cast of the tensor added) */
  uint64_t saturated;   /* clipped to +-fmax: |fl32(x * scale)| beyond fmax's rounding (E4M3: > 464, E5M2:
                           >= 61440), inf included; the codes a cast without saturation makes NaN or inf */
  uint64_t flushed;     /* x nonzero and not NaN, its code +-0: underflowed at this scale */
  uint64_t nan;         /* NaN inputs (x NaN; their code is NaN) */
  float amax_used;      /* the amax the last update's recipe read (DELAYED "max": its history's largest,
                           this step's included; otherwise this step's) */
  float scale_used;     /* the scale the last update replaced: the one the counted casts were given
                           (amp_fp8_scaler_scale_ptr during that step) */
} amp_fp8_stats;
AMPDEF amp_status amp_fp8_scaler_stats(amp_fp8_scaler *f, size_t i, amp_fp8_stats *out);
/* Where a cast adds tensor i's counts this step (4 counters: n, saturated, flushed, nan; pass it as
   amp_quantize_ex's counts); a device pointer on CUDA, valid until destroy. NULL for a bad f or i,
   or with stats off, amp_last_error() saying why. */
AMPDEF uint64_t   *amp_fp8_scaler_counts_ptr(amp_fp8_scaler *f, size_t i);
/* Checkpoints: the whole state (scales, scale_invs, histories, formats, the recipe's fields) in
   its own file, written atomically and read back checked as amp_checkpoint_save/_load do (CRC,
   sizes; AMP_ERR_CORRUPT names what is wrong; a failed load changes nothing). Load into a scaler
   made with the same recipe, n and formats (refused otherwise); its own config stays (margin,
   pow2, ... may change on purpose). A different history length is resized: slot 0 as it is, and
   the newest amaxes the shorter history holds (the top slots, the newest last) moved to the top
   slots; the older slots of a longer history start at 0, as a fresh scaler's. A resumed run then
   casts with the scales of the run that never stopped. */
AMPDEF amp_status amp_fp8_scaler_save(amp_fp8_scaler *f, const char *path);
AMPDEF amp_status amp_fp8_scaler_load(amp_fp8_scaler *f, const char *path);
AMPDEF const char *amp_fp8_recipe_name(amp_fp8_recipe r);               /* "delayed", ...; NULL: not a recipe */

/* The cast with its scale and its amax in one pass over x: q[j] = sat(fl32(x[j] * *scale)) in the
   format fp8 (AMP_E4M3 or AMP_E5M2, saturating as amp_convert), and *amax_out = max(*amax_out,
   max_j |x[j]|) (the amax of x, before the scale; NaN in x, or a NaN already there, leaves NaN).
   scale NULL: 1; amax_out NULL: not computed; q NULL: only the amax (n elements read, nothing
   written). x in F32, F16 or BF16. Device pointers on CUDA (enqueued on the stream, no host wait),
   host pointers on the CPU. Refused (AMP_ERR_ARG, nothing written): d NULL, fp8 not an fp8 format,
   x_type not F32/F16/BF16, x NULL with n > 0, q and amax_out both NULL, x not aligned to its
   element size, scale or amax_out not aligned to 4 bytes, q overlapping x, amax_out on x, q or
   scale (amp_quantize_ex: or counts). The
   scale is used as it is (a recipe may give 0 or FLT_MAX; a NaN scale gives NaN codes); *amax_out
   must hold an amax (>= 0: 0 before the step's first cast, as the scaler's slot 0 does). The
   multiply is the FPU's: in a build or thread with denormals-are-zero (gcc's -Ofast) a subnormal
   x counts as 0 in it (a code only a scale above 2^100 or so could lift off 0); the amax, taken on
   the bits, still sees it. */
AMPDEF amp_status amp_quantize(amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype x_type, size_t n,
                               const float *scale, float *amax_out);
/* amp_quantize and, in the same pass, the cast's counts added to counts[0..3]: counts[0] += n,
   counts[1] += the elements saturated, counts[2] += those flushed to zero, counts[3] += the NaN
   inputs (each as amp_fp8_stats says; q NULL: the counts of the cast that q would have held).
   counts NULL: none, exactly amp_quantize (the same code, no cost). counts is where
   amp_fp8_scaler_counts_ptr points, or any 4 uint64_t (a device pointer on CUDA; 8-byte aligned
   and apart from q, else refused with AMP_ERR_ARG); on CUDA the counters are added with integer
   atomics (exact, in any order). amp_quantize(...) is amp_quantize_ex(..., NULL); the other
   refusals are amp_quantize's. */
AMPDEF amp_status amp_quantize_ex(amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype x_type, size_t n,
                                  const float *scale, float *amax_out, uint64_t *counts);

/* ------------------------------------------------------------------------------------------
   Master-copy optimizers
   ------------------------------------------------------------------------------------------ */

/* The optimizer kinds. (AMP_OPTIM_SGD, _ADAM, _ADAMW, _CUSTOM and _LION are the same values under
   the names amp.h 0.2 added; the manual and the examples use the short ones.)
     AMP_SGD           torch.optim.SGD: momentum, dampening, nesterov, L2 weight decay
     AMP_ADAM          torch.optim.Adam: L2 weight decay on the grad
     AMP_ADAMW         torch.optim.AdamW: decoupled decay, w = w * (1 - lr*wd) first
     AMP_CUSTOM        the trainer's own fp32 update (custom_step), CPU only
     AMP_LION          Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
                       Algorithm 2): one moment m (zero at the start); per step, g the unscaled,
                       clipped grad:  w = w * (1 - lr*wd)  (decoupled, the factor computed as
                       AdamW's), u = beta1*m + (1-beta1)*g,  w = w - lr * sign(u),
                       m = beta2*m + (1-beta2)*g.  sign(0) = 0 (the weight is left as it is) and
                       sign(NaN) = NaN (as torch.sign: a NaN moment shows in the weight). eps,
                       momentum, dampening and nesterov are not read. Defaults lr 1e-4,
                       beta1 0.9, beta2 0.99 (optax, lion-pytorch); use an lr 3-10x smaller and a
                       weight_decay 3-10x larger than AdamW's (the paper's advice).
   An unknown value is refused by amp_optimizer_create (AMP_ERR_ARG naming it).
   SGD, Adam and AdamW are torch.optim's operations in its order (the single-tensor path,
   foreach=False: Adam's last line is param.addcdiv_(exp_avg, denom, value=-step_size), the
   product before the quotient), each rounded on its own: the bits of PyTorch's CPU kernels where
   those do not fuse (ATen's scalar kernels, ATEN_CPU_CAPABILITY=default; its AVX2 and AVX-512
   kernels fuse add(x, alpha=a) into an FMA), which tests/test_step.c checks without clipping. With
   max_grad_norm, the coefficient is clip_grad_norm_'s (1 / (norm + 1e-6), times max_norm) of a
   norm summed in double (PyTorch sums in float: an ulp apart at times), and the grads are
   multiplied once by fl(inv_scale * coefficient), where PyTorch multiplies by each in turn: the
   same bits whenever inv_scale is a power of two (every preset's scale) and the product normal. */
typedef enum amp_optim_kind {
  AMP_SGD = 0, AMP_ADAM, AMP_ADAMW, AMP_CUSTOM, AMP_LION,
  AMP_OPTIM_SGD = AMP_SGD, AMP_OPTIM_ADAM = AMP_ADAM, AMP_OPTIM_ADAMW = AMP_ADAMW, AMP_OPTIM_CUSTOM = AMP_CUSTOM,
  AMP_OPTIM_LION = AMP_LION
} amp_optim_kind;
/* amp_optim_config: the config of amp_optimizer_create (amp_optimizer_config, added in 0.2, is the
   same type).
   ZEROS. A zero-initialised config means every default, so in it 0 means the default written
   beside each field ("0 -> 1e-3"). To write an exact 0 where 0 means a default (Adam with
   beta1 = 0, an optimizer created with lr = 0), start from amp_optimizer_defaults(kind), which
   fills in every default and sets zero_is_zero: then every field is taken as written, 0 included
       amp_optim_config c = amp_optimizer_defaults(AMP_ADAM);
       c.beta1 = 0.0f;                        // torch.optim.Adam(betas=(0, 0.999))
   (or set zero_is_zero = 1 yourself and write every field). How each zero is written:
     lr            0 is the default 1e-3 (Lion: 1e-4); with zero_is_zero 0 is lr 0 (the masters stay as they are,
                   the moments and the step count advance, as torch.optim with lr=0).
                   amp_optimizer_set_lr(o, 0) is lr 0 always.
     beta1, beta2  0 is the default 0.9 / 0.999 (Lion: 0.9 / 0.99); with zero_is_zero 0 is 0
                   (legal: [0, 1)).
     eps           0 is the default 1e-8; with zero_is_zero, eps 0 for Adam/AdamW is an error
                   (AMP_ERR_ARG naming eps): 0/0 is NaN where a grad and its moments are 0.
     weight_decay, momentum, dampening
                   0 is 0 (none, plain SGD, no dampening) either way.
     max_grad_norm 0 is no clipping either way (a clip to norm 0 would zero every grad: to freeze
                   the weights use lr 0).
   -0.0f is read as 0 (an optimizing compiler with -ffast-math may store a -0.0f as +0, so no
   meaning hangs on the sign). Negative, NaN or infinite values are errors naming the field. */
typedef struct amp_optim_config {
  amp_optim_kind kind;                   /* 0 -> AMP_SGD */
  float lr;                              /* 0 -> 1e-3, Lion 1e-4 (see ZEROS above) */
  float weight_decay;                    /* 0 -> none. L2 for SGD/Adam, decoupled for AdamW and Lion */
  float momentum, dampening; int nesterov;  /* SGD; 0 -> plain SGD. nesterov needs momentum > 0, dampening 0 */
  float beta1, beta2, eps;               /* 0 -> 0.9, 0.999, 1e-8; Lion 0.9, 0.99 (see ZEROS above) */
  float max_grad_norm;                   /* 0 -> no clipping; global L2 norm of the unscaled grads */
  /* AMP_CUSTOM: the trainer's own fp32 update, run on each master tensor with unscaled fp32 grads */
  void (*custom_step)(void *user, float *master, const float *grad, size_t n, size_t index, long step);
  void *custom_user;
  int zero_is_zero;                      /* 0: a 0 above means its default; nonzero: every field is
                                            taken as written (amp_optimizer_defaults sets it) */
  uint64_t seed;                         /* stochastic rounding (amp_tensor_desc.stochastic); 0 is a seed */
  int stats;                             /* 0 -> off; nonzero: the unscale records per-tensor stats
                                            (amp_optimizer_stats, amp_optimizer_overflow_tensor) */
  float spike_norm;                      /* 0 -> off; > 0: a step whose unscaled global grad norm is
                                            above it is skipped, the loss scale left alone (SPIKES) */
  float spike_zscore;                    /* 0 -> off; > 0: a step whose norm is that many standard
                                            deviations above the mean of the last 100 clean steps'
                                            norms is skipped likewise (SPIKES) */
} amp_optim_config;
typedef amp_optim_config amp_optimizer_config;

/* Every default of kind filled in (lr 1e-3, betas 0.9 / 0.999, eps 1e-8, no decay, no momentum, no
   clipping; Lion: lr 1e-4, betas 0.9 / 0.99) with zero_is_zero set, so that any field changed
   after it is taken as written, 0 included. An unknown kind is kept (with the defaults of SGD), and
   amp_optimizer_create refuses it. */
AMPDEF amp_optim_config amp_optimizer_defaults(amp_optim_kind kind);

AMPDEF amp_status amp_optimizer_create(amp_optimizer **out, amp_device *d, const amp_optim_config *cfg);
AMPDEF amp_status amp_optimizer_add(amp_optimizer *o, amp_dtype dtype, void *weights, const void *grads, size_t n);
AMPDEF amp_status amp_optimizer_set_lr(amp_optimizer *o, float lr);
AMPDEF float      amp_optimizer_grad_norm(const amp_optimizer *o);   /* unscaled L2 norm seen at the last unscale
                                                                          (inf/NaN grads: inf, or the NaN 0x7fc00000) */
/* The fp32 master of tensor index (a device pointer on CUDA); NULL for an AMP_MASTER_SPLIT / _NONE
   tensor, which keeps no fp32 array. */
AMPDEF const float *amp_optimizer_master(const amp_optimizer *o, size_t index, size_t *n);
/* Every byte the optimizer keeps for its tensors' state: per tensor its fp32 master (AMP_MASTER_F32),
   or remainders (SPLIT), and its moments in their stored type (amp_tensor_desc.moments), each array
   as allocated (on CUDA each is padded to a multiple of 64 elements); not the trainer's model copies
   and grads, nor the fixed bookkeeping (the tensor table, groups, the spike window). TENSOR OPTIONS
   has the bytes per parameter. o NULL: 0. */
AMPDEF size_t     amp_optimizer_state_bytes(const amp_optimizer *o);
AMPDEF void       amp_optimizer_destroy(amp_optimizer *o);
AMPDEF amp_status amp_checkpoint_save(const char *path, const amp_optimizer *o, const amp_scaler *s);
AMPDEF amp_status amp_checkpoint_load(const char *path, amp_optimizer *o, amp_scaler *s);
/* amp_optimizer_add with the grads in their own dtype (e.g. bf16 weights, f32 accumulated grads).
   amp_optimizer_add(o, t, w, g, n) is amp_optimizer_add_mixed(o, t, w, t, g, n); both are
   amp_optimizer_add_tensor with those fields set and the others zero (group 0), and their errors
   name themselves. Refused
   (AMP_ERR_ARG, nothing added): NULL, n = 0, an unknown dtype, grads overlapping their weights,
   a buffer overlapping one already added. After the first update (a step that was not skipped,
   or a checkpoint with steps loaded) an add is AMP_ERR_STATE: the step count is per optimizer,
   where PyTorch's is per parameter. An add between unscale() and step() is accepted (the
   optimizer alone cannot tell whether its scaler's iteration is still open), but that step() then
   fails with AMP_ERR_STATE and changes nothing, since the unscale did not see the new grads:
   update() closes the iteration and the next one steps every tensor. */
AMPDEF amp_status amp_optimizer_add_mixed(amp_optimizer *o, amp_dtype w_dtype, void *weights,
                                          amp_dtype g_dtype, const void *grads, size_t n);

/* PARAM GROUPS, as torch.optim's param_groups. Group 0 exists from create: lr_scale 1 and the
   config's weight_decay (a checkpoint load that restores weight_decay restores group 0's). A new
   group's values are used exactly as given: weight_decay 0 is no decay, lr_scale 0 freezes its
   tensors' masters (moments still follow the grads, as torch with lr 0). The group's lr is the
   optimizer's lr (set_lr included) times lr_scale, one f32 multiply; its AdamW decay is
   1 - lr_group * weight_decay. Clipping (max_grad_norm) takes ONE norm over all of the
   optimizer's tensors, whatever their groups (torch.nn.utils.clip_grad_norm_ over all params).
   *group gets the new group's number, 1, 2, ...; pass it in amp_tensor_desc.group. Refused,
   nothing changed: o or group NULL, lr_scale or weight_decay negative or not finite (AMP_ERR_ARG);
   kind AMP_CUSTOM (AMP_ERR_UNSUPPORTED: its update is the trainer's own); after the first update
   or, on CUDA, after the device optimizer was built (AMP_ERR_STATE: add groups and tensors first). */
AMPDEF amp_status amp_optimizer_add_group(amp_optimizer *o, float lr_scale, float weight_decay, int *group);

/* The master kinds of amp_tensor_desc.master_mode. */
#define AMP__MASTER_LIST(X) X(AMP_MASTER_F32, 0) X(AMP_MASTER_SPLIT, 1) X(AMP_MASTER_NONE, 2)
enum { AMP__MASTER_LIST(AMP__ENUM_ITEM) };
/* The moment types of amp_tensor_desc.moments, one row each: X(name, value, bytes per stored
   moment element (8BIT: and an f32 absmax per block of AMP__Q8_BLOCK; FP8: and one f32 scale_inv
   per array), 1 where the optimizers keep it, else 0: refused at add, the form of the CUDA step
   kernel that steps it: 0 none (refused on a CUDA device), 1 f32 moments element by element, 2
   moments decoded element by element (bf16, fp8), 3 a block of 8-bit codes at a time (each form
   its own kernel, launched only where a tensor needs it: the smaller forms keep the registers of
   their own code only), the elements that share one scale: 0 none (each its own value), 1 a block
   (AMP__Q8_BLOCK), 2 the whole array). */
#define AMP__MOMENTS_TYPES(X) \
  X(AMP_MOMENTS_F32, 0, 4, 1, 1, 0) X(AMP_MOMENTS_BF16, 1, 2, 1, 2, 0) X(AMP_MOMENTS_8BIT, 2, 1, 1, 3, 1) \
  X(AMP_MOMENTS_FP8, 3, 1, 1, 2, 2)
#define AMP__MOMENTS_ITEM(name, value, bytes, kept, cuda, shared) name = value,
enum { AMP__MOMENTS_TYPES(AMP__MOMENTS_ITEM) };
#undef AMP__MOMENTS_ITEM
#define AMP__Q8_BLOCK 256   /* AMP_MOMENTS_8BIT: elements per block, each with its absmax */
#define AMP__Q8_MIN 4096    /* AMP_MOMENTS_8BIT: a tensor with fewer elements keeps f32 moments (min_8bit_size) */

/* TENSOR OPTIONS. One tensor, every option in one zero-initialisable description; zero is the
   default of each field:
     weights, dtype      the model copy the trainer computes with (required); dtype 0 is AMP_F32
     grads, grad_dtype   its grads in their own type. grad_dtype 0 (AMP_F32) is taken only beside a
                         float model copy (dtype AMP_F32); beside a 16-bit one it is refused as
                         ambiguous (AMP_ERR_ARG), so a description left zero never reads bf16 grads
                         as floats: write AMP_BF16 / AMP_F16 for 16-bit grads, AMP_GRAD_F32 for f32
                         grads (fp32 accumulation). grads NULL: the grads come later (a trainer
                         that makes them in its first backward, as llm.c does): the master is taken
                         and the model copy rounded (round_to) at add as usual, and the grads are
                         given with amp_optimizer_set_grads before the first step; a step or
                         unscale while a tensor has none is AMP_ERR_STATE and changes nothing.
     n                   elements (required, > 0)
     group               0 (the default group) or a number from amp_optimizer_add_group
     master              NULL: the fp32 master starts from weights (exact: every dtype fits f32).
                         Else n fp32 values copied bit for bit (a device pointer on CUDA, like
                         weights), and the model copy is written from them at once (rounded to
                         dtype): pretrained fp32 weights keep every bit while the model copy is bf16.
     round_to            for dtype AMP_F32 only. 0 (AMP_F32): the float model copy holds the
                         master's value. AMP_BF16 / AMP_F16: it holds the master rounded to that
                         type (exactly amp_bf16_to_f32(amp_f32_to_bf16(master)), resp. f16), written
                         at add and after every update and load: a trainer whose kernels read float
                         (llm.c's CPU path) computes with bf16/f16 values and keeps no 16-bit shadow.
                         With another dtype it must be 0.
     stochastic          0: the model copy is the master rounded to nearest even. Nonzero (dtype
                         AMP_BF16 only): written with stochastic rounding, unbiased (a master value
                         between two bf16 neighbours becomes the upper one with the probability of
                         its distance from the lower one). The random bits are a counter-based hash
                         of (amp_optim_config.seed, update number, tensor index, element index;
                         one 64-bit hash gives four neighbouring elements 16 bits each):
                         the same seed gives the same bits on the CPU and on CUDA, a skipped step
                         draws nothing, and a run resumed from a checkpoint (which holds the update
                         count; the seed is the live config's, like custom_step) draws the same
                         bits as the run that saved it. The master itself stays fp32, exact.
     master_mode         AMP_MASTER_F32 (0): an fp32 master array beside the model copy.
                         AMP_MASTER_SPLIT (dtype AMP_BF16, stochastic 0): no fp32 array; the
                         bf16 model copy plus a 16-bit remainder per element hold the fp32
                         master exactly (the encoding is below). Each update decodes the master,
                         runs the element functions of AMP_MASTER_F32 and splits the result again,
                         so the masters equal an AMP_MASTER_F32 run's bit for bit (moments too),
                         and the model copy is the master's nearest bf16.
                         AMP_MASTER_NONE (dtype AMP_BF16, stochastic 1 required): no master at
                         all; each update reads the bf16 weights as f32, runs the same element
                         functions and writes the result back with stochastic rounding (the key
                         above), so small updates move the weights on average as they would move
                         an fp32 master (round to nearest would drop every update below half a
                         bf16 step, hence the requirement). A seed (master) is rounded into the
                         weights that way at add (the key of update 0) and not kept.
                         Both on every device (on CUDA the step kernel decodes, updates and
                         splits in registers: no fp32 array in device memory either); not with
                         kind AMP_CUSTOM (its custom_step needs an fp32 master array:
                         AMP_ERR_UNSUPPORTED); amp_optimizer_master returns NULL for such a
                         tensor (AMP_ERR_UNSUPPORTED in amp_last_error). Checkpoints hold the fp32
                         master whatever the mode: SPLIT saves the decoded master and a load splits
                         the file's master again (exact, whichever mode saved it); NONE saves the
                         bf16 weights widened, and a load rounds the file's master into the weights
                         stochastically with the key of the loaded update count (exact when the
                         file came from a NONE run; from an F32 run with a stochastic copy, the
                         weights are that run's model copy bit for bit).
   The split encoding. With u the master's 32 bits, the model copy is hi = (u + 0x8000) >> 16,
   the top half rounded to nearest with ties AWAY from zero, and the remainder is lo = u & 0xffff,
   the low half as it is; decoding adds lo read as a signed 16-bit number to hi << 16 (lo's top
   bit set means hi was rounded up). Exact for every non-NaN pattern: +-0, subnormals, +-inf and
   the finite values that round up to inf (hi inf, lo negative). Why ties away and not ties to
   even: 65537 fp32 values have an even bf16 as their nearest-even rounding (both ties), one more
   than a 16-bit remainder can tell apart, so no exact split can keep ties to even. The copy is
   therefore amp_f32_to_bf16(master) everywhere but at an exact tie (low 16 bits 0x8000) whose
   kept half is even: there it is the other neighbour, exactly as near (about one update in 2^17
   where the master's low bits are random; more often where they are few). A NaN master splits into amp_f32_to_bf16's
   quiet
   NaN and lo 0 (the low 16 payload bits are not kept; the default NaN of arithmetic has none).
   Memory per parameter the optimizer keeps (the model copy, 2 or 4 bytes, and the grads, 2 or 4,
   are the trainer's), moments included, fp32 moments being 0 (SGD), 4 (SGD with momentum, Lion)
   or 8 (Adam/AdamW) bytes:
                           SGD   SGD + momentum   Adam / AdamW   Lion
     AMP_MASTER_F32         4          8              12          8     (fp32 master, 4 bytes)
     AMP_MASTER_SPLIT       2          6              10          6     (the remainder, 2 bytes)
     AMP_MASTER_NONE        0          4               8          4     (no master)
   So bf16 weights + fp32 grads + AdamW is 2 + 4 + 12 = 18 bytes with an fp32 master, 16 split,
   14 with none; a float model copy with round_to (no 16-bit shadow) 4 + 4 + 12 = 20.
     moments             the type the moments are kept in (Adam/AdamW's exp_avg and exp_avg_sq,
                         SGD's momentum buffer, Lion's m). AMP_MOMENTS_F32 (0): fp32, as above.
                         AMP_MOMENTS_BF16: bf16 (PyTorch's fused AdamW with bf16 state, TE's
                         FusedAdam with exp_avg_dtype bf16, llm.c). Each update widens the moments
                         to f32 (exact), computes the new moments and the new weight in f32 with the
                         element functions of AMP_MOMENTS_F32 (the weight stepped with the f32
                         moments), and stores the moments rounded to bf16 in the same pass: to
                         nearest even, or, with stochastic = 1, stochastically with the bits of the
                         tensor's seeded stream: the key the model copy draws from (seed, update
                         number, tensor index) hashed with the moment's number (1: m, 2: v,
                         amp__sr_key_moment), element index as the model copy's. Every master mode,
                         grad type, group, clipping and the stats as with fp32 moments; a skipped
                         step leaves the bf16 words as they were. A kind without moments (SGD
                         without momentum, AMP_CUSTOM) takes only AMP_MOMENTS_F32 (AMP_ERR_ARG).
                         AMP_MOMENTS_8BIT: bitsandbytes' blockwise 8-bit state (8-bit Adam): each
                         moment in blocks of 256 elements, one f32 absmax per block and one 8-bit
                         code per element; the first moment (Adam's exp_avg, SGD's buffer, Lion's
                         m) with the signed dynamic map, Adam's exp_avg_sq with the unsigned one
                         (functional.create_dynamic_map: for i = 0..6, 10^(i-6) times the
                         midpoints of linspace(0.1, 1, 2^i + 1), with both signs (signed), or of
                         linspace(0.1, 1, 2^(i+1) + 1) (unsigned), plus 0 and 1, sorted; each value
                         computed in double and rounded to f32 once, the same on every machine:
                         bitsandbytes computes them in f32 with torch.linspace, and its map differs
                         from these in the last 1-2 bits of some codes (90 signed, 99 unsigned of
                         256, measured with torch 1.13 on x86-64)). A value decodes as its code's
                         value times its block's absmax (an f32 multiply); each update decodes,
                         steps in f32 as above, and encodes every block again: absmax = max |x| of
                         the block's new values (at least 1e-38; at most FLT_MAX: a moment
                         that overflowed to +inf is kept as FLT_MAX, -inf as the signed map's
                         least code, -0.993 times FLT_MAX, and the block's other values as
                         themselves over FLT_MAX, most of them 0, where bitsandbytes' rule
                         would turn the whole block into NaN), each x / absmax (clamped to
                         [-1, 1]) to the nearest code, a tie to the lower code; always to nearest
                         (stochastic does not apply to codes). The floor 1e-38 is below the
                         least normal float: it is compared on the bits, and a zero over it
                         stays a zero, so a build that flushes subnormals (-Ofast) keeps the
                         code of 0 for a block of zeros, as every other build and the GPU do
                         (a block of subnormals flushes there, as any arithmetic does). A
                         tensor under 4096 elements keeps f32 moments (bitsandbytes'
                         min_8bit_size). 2 + 8/256 bytes per parameter for Adam's two moments.
                         AMP_MOMENTS_FP8: E4M3 codes with one f32 scale per moment array
                         (TransformerEngine's FusedAdam with exp_avg_dtype / exp_avg_sq_dtype
                         torch.uint8, MS-AMP): each update decodes the moments (code value times
                         the array's scale_inv, an f32 multiply), steps in f32 as above (the
                         weight stepped with the f32 moments), then takes amax = max |x| of the
                         array's new moments, scale = 448 / amax (TE's current scaling,
                         amp_fp8_scale_from_amax with AMP_FP8_CURRENT and epsilon 0: 1 when amax
                         is 0, as for a fresh tensor, or not finite; FLT_MAX where 448 / amax
                         overflows), stores each x as amp_f32_to_e4m3(x * scale, 1) (nearest,
                         ties to even, saturating at 448; stochastic does not apply to codes) and
                         keeps scale_inv = 1 / scale (f32) in front of the codes. The amax of the
                         new moments is needed before the first code is stored, so the step runs
                         twice over the tensor: a first pass decodes the moments and computes the
                         new moments only to take the amaxes (the same operations on the same
                         values as the update pass: the same f32 moments, bit for bit; Adam/AdamW
                         without the root and divisions of the weight update, SGD and Lion their
                         whole update on a scratch copy), reading the masters only where the
                         moments depend on them (L2 weight decay on the grad: Adam's and SGD's
                         weight_decay), then the update pass, which stores. So it reads the grads
                         and moments twice (the masters twice only with that decay) and computes
                         the moments twice (the weight and moment bytes are written once). Every
                         tensor size keeps fp8 (no minimum). The codes are decoded by
                         the fp8 bulk conversions and encoded by amp_quantize's CPU loops, vector
                         loops at each SIMD level with the scalar functions' bits. 2 + 8/n
                         bytes per parameter for Adam's two moments (each array 4 + n bytes, 4-byte
                         aligned in memory).
                         On a CUDA device AMP_MOMENTS_F32 and AMP_MOMENTS_BF16 are kept: the
                         step kernel widens bf16 moments, updates them with the kind's element
                         function and stores them rounded to nearest even or stochastically with
                         the CPU's key and element index (amp__moment_bf16), so the masters,
                         moments and model copies are the CPU's bits; they live on the device 2
                         bytes each and travel to and from a checkpoint as kept, so a file moves
                         between a CPU and a CUDA optimizer. AMP_MOMENTS_8BIT is kept there too,
                         laid out as on the CPU (the absmaxes, then the codes): the step kernel
                         takes one block of 256 elements per 256 threads, reads each moment as
                         code times absmax, updates it, reduces the block's new absmax across
                         its threads and finds each code from one read of a table
                         (amp__q8_vcode), the count the bisection over the map's midpoints and
                         the CPU's vector loops give: the CPU's bits. AMP_MOMENTS_FP8 too: as on
                         the CPU, a first launch of the step kernel computes the new moments only
                         for each array's amax (an atomic maximum on the bits), the step launch
                         encodes with the scales from them and its last block writes each
                         array's new scale_inv once every block has read the old one: the CPU's
                         bits, with no host wait. The step kernel comes in three forms, each
                         launched only where a tensor needs it: f32 moments (and none), moments
                         decoded element by element (bf16, fp8) and 8-bit blocks; the f32 form
                         holds none of the others' code, so a step with f32 moments keeps the
                         registers (and the occupancy) of its own loop.
   Bytes per parameter with bf16 moments (AMP_MOMENTS_BF16; amp_optimizer_state_bytes counts them):
                           SGD + momentum   Adam / AdamW   Lion
     AMP_MASTER_F32              6               8           6
     AMP_MASTER_SPLIT            4               6           4
     AMP_MASTER_NONE             2               4           2
   so a bf16 model copy, no master and AdamW with bf16 moments keeps 4 bytes per parameter. With
   8-bit moments (tensors of 4096 elements and more) each moment is 1 + 4/256 bytes: Adam/AdamW
   4 + 2.03 (F32), 2 + 2.03 (SPLIT), 2.03 (NONE); SGD + momentum and Lion 5.02, 3.02, 1.02. With
   fp8 moments each moment is 1 byte (and 4 per tensor for its scale_inv): Adam/AdamW 6, 4, 2; SGD
   + momentum and Lion 5, 3, 1 (F32, SPLIT, NONE).
   amp_optimizer_add_tensor refuses what amp_optimizer_add_mixed refuses (below), and a group that
   does not exist, round_to that is not a dtype or is set with a 16-bit dtype, stochastic with a
   dtype other than AMP_BF16, a master_mode that is not one of the three, SPLIT or NONE with a
   dtype other than AMP_BF16, SPLIT with stochastic, NONE without (AMP_ERR_ARG), and SPLIT or NONE
   with kind AMP_CUSTOM (AMP_ERR_UNSUPPORTED), moments that is not an AMP_MOMENTS_* value or is not
   AMP_MOMENTS_F32 for a kind without moments (AMP_ERR_ARG); nothing is added, nothing written. */
typedef struct amp_tensor_desc {
  void       *weights;     amp_dtype dtype;       /* required; 0 -> AMP_F32 */
  const void *grads;       amp_dtype grad_dtype;  /* NULL: set later; 0: AMP_F32 beside an f32 copy only
                                                     (else AMP_GRAD_F32, AMP_BF16, AMP_F16) */
  size_t      n;                                  /* required, > 0 */
  int         group;                              /* 0 -> the default group */
  const char *name;                               /* NULL -> unnamed; copied at add, at most 63 bytes,
                                                     no control bytes (< 0x20, 0x7f: a name cannot
                                                     break the log line; else AMP_ERR_ARG, nothing
                                                     added); the
                                                     overflow log line names the tensor by it */
  const float *master;                            /* NULL -> the master starts from weights */
  amp_dtype   round_to;                           /* 0 -> AMP_F32: a float copy holds the master's value */
  int         stochastic;                         /* 0 -> round to nearest even; 1: stochastic (bf16 only) */
  int         master_mode;                        /* 0 -> AMP_MASTER_F32; SPLIT, NONE: bf16 model copies only */
  int         moments;                            /* 0 -> AMP_MOMENTS_F32; AMP_MOMENTS_BF16; _8BIT, _FP8 (CPU) */
} amp_tensor_desc;
AMPDEF amp_status amp_optimizer_add_tensor(amp_optimizer *o, const amp_tensor_desc *t);
/* The grads of tensor index (0 = the first added), for a tensor added with grads NULL, or to move
   a tensor's grads to another buffer: n elements of the grad_dtype given at add, checked as add
   checks them (not NULL, not overlapping the weights or any other tensor's buffers). On CUDA a
   device pointer; once the device optimizer is built the device table is rewritten on the
   stream (AMP_ERR_STATE while the stream is being captured: a graph keeps the pointers it saw).
   Refused, nothing changed: o NULL, index out of range, grads NULL or overlapping (AMP_ERR_ARG). */
AMPDEF amp_status amp_optimizer_set_grads(amp_optimizer *o, size_t index, const void *grads);

/* When the fp32 master is taken, on every device: at amp_optimizer_add, from the model copy as it
   is then (exactly: every dtype fits f32). Weights written after add (initialised, loaded from a
   file) are not seen by the optimizer, and its first update overwrites them from the master: write
   the weights first, then add (or restore a checkpoint, which writes the model copies).
   On a CUDA device weights and grads are device pointers, and the master (returned by
   amp_optimizer_master as a device pointer) and moments live on the device. The add takes the
   master into a device buffer on the device's stream; the device optimizer is built from the
   whole tensor table at the first call that needs it (unscale, step, amp_optimizer_master, a
   checkpoint); an add() after that is AMP_ERR_STATE, and that first call with no tensor added is
   AMP_ERR_STATE too. AMP_CUSTOM is AMP_ERR_UNSUPPORTED at create (its update is a host function).
   set_lr only enqueues a write of the rate to device memory, and the step reads it there when it
   runs: in a CUDA graph that holds the step, call set_lr before each launch of the graph and the
   replay uses that rate. set_lr while the device's stream is being captured is AMP_ERR_STATE and
   changes nothing (a captured write would set the capture-time rate again at every replay). */
AMPDEF size_t     amp_optimizer_count(const amp_optimizer *o);      /* tensors added */
/* Updates applied so far (skipped steps not counted): Adam's t, SGD's "first step" test. */
AMPDEF long       amp_optimizer_step_count(const amp_optimizer *o);

/* A step without a scaler, for bf16 or f32 training (no loss scaling: bf16 has f32's range).
   The grads are taken as they are (unscaled, inverse scale 1): the same single pass as the
   scaler's unscale finds inf/NaN and the global L2 norm (amp_optimizer_grad_norm, the clip of
   max_grad_norm), then the update. A step whose grads hold inf/NaN is skipped and changes
   nothing: model copies, masters, moments and the step count stay bit for bit as they were.
   Per iteration: backward into the grads, amp_optimizer_step(o), nothing else (no update call).
   On a CUDA device the step is 2 launches on the device's stream (one more for each further form
   of moment storage the tensors use, and for fp8 moments' first pass: AMP_MOMENTS_*), the skip
   decided there: no allocation after the first step (which builds the device optimizer, with a
   wait), no copy, no wait, so it may be captured in a CUDA graph. A kept device error (see DEVICE
   ERRORS AND GETTERS) is returned first (AMP_ERR_DEVICE), before anything is done.
   Threads (the CPU; this call and amp_scaler_step alike): built with -fopenmp (llm.c's
   convention), the update of a tensor of at least 2 x 65536 elements is shared among the OpenMP
   threads in contiguous slices of whole blocks, 65536 elements or more each (one thread inside a
   parallel region, and without OpenMP). Each element's update depends only on its own values and
   index (stochastic rounding included), fp8 moments' amaxes are joined as a maximum and 8-bit
   blocks are never split: the bits are one thread's, whatever the count. The scan (inf/NaN and
   the norm's sum) stays on one thread.
   An optimizer is stepped either by a scaler (amp_scaler_unscale / amp_scaler_step) or by
   amp_optimizer_step, for its whole life: the first successful call of either decides, and a call
   of the other kind is then AMP_ERR_STATE and changes nothing ("this optimizer is stepped by a
   scaler ..."). To change over (an f16 phase, then bf16), save a checkpoint and load it into a new
   optimizer. There is no all-reduce hook here: data-parallel trainers whose ranks step different
   grads (ZeRO, FSDP) use a scaler with fixed = 1 and init_scale = 1 and its hook instead.
   Errors (nothing changed): o NULL is AMP_ERR_ARG, no tensor added is AMP_ERR_STATE. */
AMPDEF amp_status amp_optimizer_step(amp_optimizer *o);
/* 1 when the last amp_optimizer_step (since create, or since the last amp_checkpoint_load) found
   inf/NaN and was skipped, else 0 (0 too for an optimizer stepped by a scaler: ask the scaler,
   amp_scaler_last_skipped). On a CUDA device it reads the device's decision: it waits for the
   stream; a failed read returns 0 (see DEVICE ERRORS AND GETTERS). */
AMPDEF int        amp_optimizer_last_skipped(const amp_optimizer *o);

/* GRADIENT STATS. With amp_optim_config.stats nonzero, the unscale pass (amp_scaler_unscale /
   amp_scaler_step, and amp_optimizer_step's pass at inverse scale 1) records per tensor, in the
   same read of the grads (no extra pass):
     amax         max |g * inv_scale| over the grads whose unscaled value is finite (0 if none)
     n_nonfinite  grads whose unscaled value is inf or NaN (what makes the step skip)
     n_zero       grads that are exactly +-0 in their stored type
     n_subnormal  grads that are subnormal in their stored type (f16: below 2^-14; bf16 and f32:
                  below 2^-126): precision already lost at this scale
   Each unscale replaces the previous one's stats; before the first they are all 0. On a CUDA
   device the unscale kernel writes them into device counters (integer atomics: the same counts
   on every run), and the read waits for the device's stream (see DEVICE ERRORS AND GETTERS).
   With the data-parallel hook (amp_scaler_set_allreduce) the stats are this rank's own grads,
   recorded before the hook runs: a hook that fails leaves the weights, moments, scale and norm
   as they were, and the stats (and amp_optimizer_overflow_tensor) those of the pass that reached
   it, which the next unscale replaces. With stats 0 (the default) nothing is recorded and the step is the same code as without stats.
   Cost on the CPU: the scan with stats has an AVX-512 loop (the same bits as the portable one);
   on a CPU with only AVX2, or with AMP_NO_SIMD, it runs the portable loop, several times slower
   than the vector scan a step without stats uses.
   amp_optimizer_stats: tensor index's stats into *out. Errors, nothing written: o or out NULL,
   index >= amp_optimizer_count(o) (AMP_ERR_ARG), stats off (AMP_ERR_STATE); a failed device
   read is AMP_ERR_DEVICE.
   amp_optimizer_overflow_tensor: the index of the first tensor (in add order) with n_nonfinite > 0
   at the last unscale, -1 when none; also -1 when o is NULL or stats are off (amp_last_error says
   which), or when the device read fails (the error kept, as for the other getters).
   THE OVERFLOW LINE. With stats on, an unscale pass that finds inf/NaN in this optimizer's grads
   writes one line through the log hook (amp_set_log), naming the first such tensor by its
   amp_tensor_desc.name (unnamed: by index), e.g.
     overflow in 'wte' (tensor 0): 3 inf/NaN of 4096, amax 1.1e+05 at scale 65536; 1 more tensor overflowed
   (its n_nonfinite, its size, its amax, the loss scale the pass divided by, 1 without a scaler;
   the last part only when other tensors overflowed too). inf and NaN are counted together, as in
   n_nonfinite. On the CPU the line is written by the unscale itself; on a CUDA device, which the
   step never waits for, by the host's first read of the optimizer after the overflow (any getter
   such as amp_optimizer_last_skipped, amp_optimizer_stats, amp_optimizer_overflow_tensor, a
   checkpoint save), once per pass (the device counts its passes, so a pass replayed from a CUDA
   graph is logged too), and only for the last pass (an earlier overflow that no read saw is not
   logged; nor is one from before a checkpoint load). An overflow found only on another rank (data-parallel) names no tensor
   here and writes nothing. Stats off: no line. */
typedef struct amp_tensor_stats {
  float  amax;          /* max |g| after unscaling, over the finite values */
  size_t n_nonfinite;   /* inf or NaN grads */
  size_t n_zero;        /* grads that are exactly 0 in their stored type */
  size_t n_subnormal;   /* grads that are subnormal in their stored type (precision already lost) */
} amp_tensor_stats;
AMPDEF amp_status amp_optimizer_stats(const amp_optimizer *o, size_t index, amp_tensor_stats *out);
AMPDEF long       amp_optimizer_overflow_tensor(const amp_optimizer *o);

/* SPIKES. amp_optim_config.spike_norm > 0: when the unscaled global L2 grad norm of a step
   (amp_optimizer_grad_norm: the norm over this optimizer's tensors, summed over ranks with the
   all-reduce hook) is above spike_norm and the grads hold no inf/NaN, the step is skipped: model
   copies, masters, moments and the step count stay bit for bit as they were, and the loss scale
   is NOT backed off (a scaler's update sees no overflow; an overflow is counted as an overflow,
   never as a spike). The decision is this optimizer's own: other optimizers of the same scaler
   step as usual. On CUDA it is taken on the device by the unscale kernel's last block and read by
   the update kernel: no host synchronisation. Clipping (max_grad_norm) applies to the steps that
   are not skipped. 0 (the default) is off; negative, NaN or infinite values are AMP_ERR_ARG at
   create. amp_optimizer_last_skipped and amp_scaler_last_skipped keep reporting overflows only.
   amp_optim_config.spike_zscore > 0 skips the same way (and counts in the same counter) a step
   with clean grads whose norm is more than spike_zscore standard deviations above the mean of
   the norms of the last 100 clean steps: the optimizer keeps a window of the norms of the steps
   that updated (neither an overflow nor a spike, nor skipped for another optimizer's overflow;
   a norm that overflows f32 is not kept), the newest 100 of them. The step is a spike when
     the window holds n >= 20 norms and  norm - mean > spike_zscore * sd,
   mean and sd the window's mean and population standard deviation (divided by n), computed in
   double, the same bits on the CPU and on CUDA. Before 20 clean steps no step is a z-score spike
   (the first steps' norms fall fast and 20 values are the fewest whose deviation means much);
   an infinite norm of finite grads is one once the window decides. A window of equal norms has
   sd 0: any larger norm is then a spike. The window is kept whether spike_zscore is on or not.
   On CUDA it lives in the optimizer's device memory: the unscale kernel decides, the step kernel
   pushes, no host synchronisation. Both rules may be on together; spike_norm is checked first.
   amp_optimizer_spike_skips: the number of steps skipped for a spike (either rule) since create;
   0 for o NULL; -1 when a device read fails (see DEVICE ERRORS AND GETTERS). The count and the
   window are saved in checkpoints (format version 2) and restored by a load, so a resumed run
   takes the same next decision; a version-1 file loads them as zero (an empty window). */
AMPDEF long       amp_optimizer_spike_skips(const amp_optimizer *o);

/* Checkpoint file (amp_checkpoint_save/load), format version 3 (or 2, below), all integers and floats
   in the writer's byte order (f32 is a float, i32/u32/u64 fixed-width integers, bf16 16-bit words):
     header (32 bytes): "AMPCKPT1" magic (8 bytes), u32 format version (3 or 2), u32 endianness mark
       0x01020304, u32 header size (32), u32 flags (1: scaler present, 2: optimizer present),
       u64 payload bytes; then the payload, then u32 CRC-32 (IEEE, as zlib's crc32) of everything
       before it.
     scaler (72 bytes): f32 growth, backoff, floor, cap; i32 interval, hysteresis, mode, fixed,
       late_growth; f32 init_scale, scale; i32 tracker, hyst, at_floor, last_skipped,
       floor_logged; u64 skipped count (the resolved amp_scale_params, amp_scale_state and counts);
     optimizer (56 bytes, then the spike state, then the tensors): u32 kind; f32 lr, weight_decay,
       momentum, dampening; i32 nesterov; f32 beta1, beta2, eps, max_grad_norm; u64 step count,
       tensor count;
     spike state (416 bytes, versions 2 and 3): u64 spike skip count (amp_optimizer_spike_skips);
       i32 window count (0 .. 100), i32 next slot (== count until the window is full); f32
       window[100] (the norms of the last clean steps, spike_zscore's window; slots from count on
       are 0);
     then per
       tensor u64 n, u32 weight dtype, u32 grad dtype, u32 moments (version 3 only: the tensor's
       AMP_MOMENTS_* type), f32 master[n], then the moments it has (SGD with momentum: buf[n];
       Adam/AdamW: m[n], v[n]; Lion: m[n]), each n elements of that moments type as the optimizer
       keeps them (AMP_MOMENTS_F32: f32; AMP_MOMENTS_BF16: bf16 words, not widened;
       AMP_MOMENTS_8BIT: f32 absmax[ceil(n / 256)], then u8 code[n]; AMP_MOMENTS_FP8: f32
       scale_inv, then u8 E4M3 code[n]).
   save writes version 2 (the same bytes as amp.h 0.2's, no moments field) when every tensor keeps
   fp32 moments, else version 3. load reads versions 1 to 3; a record without the moments field holds
   fp32 moments. A file's moments type need not be the live tensor's (amp_tensor_desc.moments, the
   program's setup like master_mode; an 8BIT tensor under 4096 elements keeps fp32): the same type
   loads byte for byte; another is decoded to f32 (exact for bf16; 8-bit: code value times absmax;
   fp8: code value times scale_inv), then encoded in the live type as an update encodes (bf16 to
   nearest even, 8-bit blockwise, fp8 with the scale of the whole array's amax). So a bf16, 8-bit
   or fp8 file loads into fp32 moments exactly, and an fp32 file into bf16, 8-bit or fp8 moments
   as a run would store them. The
   moments checks below apply to the widened values; a moments field that is not a type this amp.h
   keeps (or not AMP_MOMENTS_F32 for a kind without moments) is AMP_ERR_CORRUPT.
   save writes a new file beside path under a name unique to the process and call
   (path.tmp.<pid>.<n>), created exclusively (never through an existing file or symlink), flushes
   it to disk (fsync), renames it over path and flushes the directory: a crash or a failed save
   never destroys the old checkpoint, and saves to one path from several threads or processes at
   once leave one of them whole. An empty path, or one ending in '/', is AMP_ERR_ARG and nothing is
   created; an I/O failure is AMP_ERR_IO naming the path and the system's reason (strerror), with
   the temporary removed. (Where path's file name is too long for the suffix, the temporary keeps
   its first bytes; only a path within 40 bytes of the system's PATH_MAX with a shorter file name
   cannot be saved.) Counts are 64-bit in the file; a count above LONG_MAX / 2 (step, skipped
   steps, spike skips) is refused at load, so that a loaded count never overflows in the steps
   that follow and every save loads again. o or s may be NULL to save/load only the other.
   load reads only a regular file (a FIFO, device or directory is AMP_ERR_IO at once, never a
   wait). It checks the header against the file's size, then every record, read one by one,
   before it reads the payload: the file must be exactly the size the live optimizer needs before
   it is read whole (the scaler alone: the file is streamed through the CRC, never held), so any
   other file is refused without a large read or allocation. Every field passes the checks of
   amp_scaler_create and amp_optimizer_create and must be a value they keep (Adam's eps 0, a -0, a
   flag other than 0 or 1, a 0 the scaler replaces by a default are refused; the optimizer's fields
   are read as with zero_is_zero, so lr 0 or beta1 0 load as 0), the scaler's state must fit its
   parameters and be one the scale rule can leave (scale within [floor, cap]; the growth tracker
   below growth_interval; CONSECUTIVE's overflow count below hysteresis; at_floor only with the
   scale at the floor; a fixed scaler at its init_scale with a fresh state), then the CRC, kind,
   tensor count, sizes and dtypes, and the moments (Adam's exp_avg_sq >= 0; each
   AMP_MOMENTS_8BIT block's absmax within [1e-38, FLT_MAX]; NaN in neither but where a master is
   inf or NaN: the master of its element, of its 8-bit block or of its fp8 tensor, for NaN
   moments come only from the L2 decay of a master that overflowed, a NaN grad skipping its step):
   AMP_ERR_CORRUPT with what did not match, before anything changes (the spike state too: a count
   out of range, a window count or slot out of range, a held norm NaN or negative). It restores
   the optimizer's config (lr included; custom_step stays the live one), step count, spike skip
   count and window, masters and moments, writes every model copy from its restored master
   (rounded to its round_to, or
   stochastically with the restored update count's bits), and restores the scaler's parameters
   and state; both start a new iteration (no unscale/step recorded). On a CUDA device save reads
   the device state back and load writes it (the model copies cast from the restored masters on the
   device); the file is the same, so a checkpoint moves between CPU and GPU either way. A device
   error during load (after the file was checked) may leave the device state partly written:
   AMP_ERR_DEVICE.
   Not in the file: the param groups (amp_optimizer_add_group), each tensor's group, round_to,
   stochastic and master_mode (the file holds the fp32 master of every mode: see TENSOR OPTIONS),
   and the config's seed. Like the tensor list and custom_step they are the program's
   setup, done again before a load: load into an optimizer made with the same groups, tensors and
   seed, and stochastic rounding draws the same bits as the run that saved (its key holds the
   update count, which the file has). Group 0's weight_decay is the config's, which the file
   holds; every other group keeps the live lr_scale and weight_decay (so a resumed run may change
   them on purpose). Nor are the config's stats, spike_norm and spike_zscore (the live ones stay).
   Versions: 1 (amp.h 0.2 and before) had no spike state, 2 no moments field; load reads versions 1
   to 3 (a version-1 file leaves the spike skip count 0 and the window empty), save writes 2 or 3
   (above).
   The exclusive creation, fsync, regular-file check and unique names are POSIX; elsewhere (e.g.
   Windows) amp.h uses C stdio: the temporary's name holds the process id on Windows (the time
   elsewhere), a name found taken is skipped but not created exclusively, nothing is flushed to
   disk, the old file is removed just before the rename, and load reads whatever fopen opens. */

/* ------------------------------------------------------------------------------------------
   Tensor Core matrix product (cblas conventions)
   C = alpha * op(A) * op(B) + beta * C, fp32 accumulation.

   op(A) is m x k, op(B) is k x n, C is m x n, each stored in `layout` with its leading dimension
   (row-major: the distance between rows, at least the row length; col-major: between columns).
   A and B: any of f16, bf16, f32, each its own type; C any of the three (fp8: see "fp8 inputs and
   outputs" below). Mixed types (f32
   activations times bf16 weights, say) are never narrowed: each operand is widened exactly to
   their common type (the same type; on x86-64 bf16 for fp8 beside bf16, as every fp8 value is a
   bf16 value; else f32) while it is packed, so the result is that of the product of the widened
   matrices by the same kernel, bit for bit, and its bound is theirs (on the CPU the f32 kernel, or
   for fp8 beside bf16 on x86-64 the bf16 kernels; on CUDA, where cuBLASLt takes no mixed pair, each 16-bit operand is
   widened into a stream-ordered f32 scratch buffer first: one conversion pass and 4 bytes per
   element of device memory for the call, freed in stream order). beta 0: C is not read (a NaN
   there does not propagate), as in BLAS. m or n 0: nothing happens. k 0 or alpha 0: C = beta * C
   (A and B are not read). C must not overlap A, B or the bias: AMP_ERR_ARG when the span of C
   (its first to its last element) meets the span of one of them.

   Rounding of the CPU reference (opts->algo = AMP_GEMM_REFERENCE; what the GPU is tested
   against): inputs converted exactly to f32; for each C element one f32 accumulator, acc = 0,
   then acc = acc + a(i,p) * b(p,j) for p = 0, 1, ..., k-1 in that order, the product rounded to
   f32 and then added (no FMA); then t = alpha * acc, t = t + beta * c (when beta != 0; each
   product rounded before the add), t = t + bias[j] (when there is a bias), t = act(t), and one
   rounding of t to C's type. These are the bits of a plain triple loop, on every CPU, under every
   flag set of GCC and Clang (-O0 to -Ofast, -march=native, -ffp-contract=fast: an empty asm
   statement keeps each product rounded, which the contraction pragmas alone do not under Clang's
   -ffp-contract=fast). Other compilers: flags that allow contraction (MSVC /fp:fast or
   /fp:contract) may fuse a product into its add. The GELU epilogue's tanh is amp.h's own, not the
   C library's tanhf (whose last bit differs between C libraries): computed in double, each
   operation rounded on its own, and rounded once to f32, it equals glibc's double tanh rounded to
   f32 for every f32 input (checked over all of them; tests/test_gemm.c checks every third in the
   range where it computes), so GELU too has the same bits on every CPU, under every flag set, in
   the vector loops and in the CUDA kernels.
   x87 (32-bit x86 without -msse2 -mfpmath=sse) keeps excess precision: build such targets with
   those flags for the promised bits.

   The CPU default (AMP_GEMM_AUTO, zero options) is the fast kernel for the CPU, chosen by CPUID
   at run time (build with plain `cc -O2`: each kernel carries its own target attribute):
   - x86-64 with FMA (AVX-512 F/BW/VL/DQ: 8 x 32 register tiles; AVX2: 6 x 16): acc = fma(a(i,p), b(p,j),
     acc) for p = 0, 1, ..., k-1 in that order, one rounding per step; f16 and bf16 inputs are
     converted exactly to f32 once, while packing. Every such kernel, on one thread or many, gives
     the bits of a plain fmaf() loop. (A NaN result is NaN on every kernel; which NaN, where more
     than one input of a sum is NaN, is not promised: an FMA passes one of its NaN operands on, and
     the compiler may swap the two it multiplies, as Clang does.)
   - bf16 inputs on an AVX512_BF16 CPU whose vdpbf16ps delivers at least the f32 FMA's flop rate
     (AMD Zen 4 and 5: twice it): vdpbf16ps on pairs p = 2q, 2q+1: the two products (exact in f32)
     are summed and rounded to f32, then added to acc and rounded (round to nearest even);
     subnormal bf16 inputs, and pair sums or results below 2^-126 in magnitude, count as 0. Where
     it delivers less (Intel Xeons without AMX: about half the FMA's rate), bf16 is widened while
     packing as f16 is, and the product is the fmaf() loop above, about twice as fast there. Which
     of the two is decided once per process, the first time a bf16 x bf16 product runs, by a short
     calibration (about 0.1 ms: a few thousand of each instruction with 12 independent accumulators,
     alternating, the fastest of 7 runs each), not by a CPU model table: the rate is what the core
     delivers (a VM may hide the model, and a table would have to know every future core). The
     cores measured lie at 0.5x and 2x of the FMA's rate, far from the line, so one machine gets the
     same kernel, and so the same bits, in every run; a core near the line would get either, each
     within its bound below.
   - bf16 x bf16, and fp8 x fp8 (each widened to bf16 while packed, exact), on a CPU with AMX
     (Intel Xeon from Sapphire Rapids on; x86-64 Linux, which grants
     a process the tile state when amp.h first asks; GCC or Clang), before either kernel above: the
     tile unit, 32 x 32 tiles of C, each tdpbf16ps adding 32 products to each accumulator (3.4-5.9x
     the f32 kernel on one core where measured; the unit's own peak there was 13x the FMA's). Its
     rounding is the unit's own and not documented: measured, one instruction's result lies within
     8 x 2^-24 (sum of |products| + |acc|) of the exact sum (closer than an FMA chain on the tests'
     data); these are not the bits of vdpbf16ps or of the fmaf() loop. It stays within the
     vdpbf16ps kernel's bound (subnormal inputs and results below 2^-126 count as 0 there too),
     and one machine gives the same bits in every run (threads split rows only). Other input
     types take the kernels above.
   - AArch64 (GCC, Clang): NEON FMLA, 6 x 16 tiles, the same fma chain in k order (the bits of
     the fmaf() loop, as on x86); f16 and bf16 are widened while packing.
   - bf16 inputs on AArch64 with FEAT_BF16 (Linux: HWCAP2_BF16; macOS: hw.optional.arm.FEAT_BF16;
     Neoverse V1/V2, Grace, Apple M2 and later), where BFDOT issues at least half as fast as FMLA
     (it does 2 products a lane; decided once per process by a calibration like x86's, timed by
     the generic timer): BFDOT on pairs p = 2q, 2q+1, as the Arm ARM's BFDotAdd states it without
     FEAT_EBF16: each product rounded to f32, the two summed and rounded, then added to acc and
     rounded, every rounding to odd (non-IEEE: an inexact result is truncated toward zero and its
     last bit set to 1; an overflow gives infinity), subnormal bf16 inputs and every intermediate
     or result below 2^-126 in magnitude flushed to 0 (with its sign), NaN results the default
     NaN, the FPCR ignored. These are exact bits: the same on every such CPU and under qemu, which
     tests/test_gemm.c checks against an integer model of that chain. A CPU with FEAT_EBF16 whose
     FPCR.EBF is 1 computes BFDOT otherwise (fused, the FPCR's rounding), and FPCR.AH 1 changes its
     default NaN: each call reads the FPCR and such a call runs the FMLA kernel instead. (Built
     with a target attribute: GCC 10+, Clang 11+; a plain -O2 build has it.)
   - BFMMLA (FEAT_BF16 too; 8 x 8 tiles of 2 x 2 blocks, A and B packed two rows by 4 k an
     operand) instead, where the same calibration measures its flop rate (4 products a lane, BFDOT
     2, FMLA 1) at least FMLA's and above BFDOT's. Its rounding is BFDOT's, bit for bit: the Arm
     ARM's pseudocode for BFMMLA (BFMatMulAdd) computes each element of its 2 x 2 block as two
     BFDotAdd in turn, on the pair 2q, 2q+1 and then on 2q+2, 2q+3, each the BFDotAdd above when
     FPCR.EBF is 0 or FEAT_EBF16 absent: the chain BFDOT computes, in k order. A slice with an odd
     number of pairs adds its last pair with BFDOT (one BFDotAdd; a BFMMLA with a zero pair would
     add a step, which turns a sum flushed to -0 into +0). The FPCR condition is BFDOT's (EBF and
     AH, read at each call). tests/test_gemm.c checks its bits against the same integer model,
     forced, on odd shapes in both layouts and every transpose. Between BFDOT and BFMMLA the
     choice is one of speed only.
   - any other CPU (no FMA, neither x86-64 nor AArch64, AMP_NO_SIMD, another compiler, and the
     implementation compiled by nvcc, whose host code keeps the portable loops): the reference.
   Bound of the fast kernels, before the epilogue: |acc - exact sum| <= (k + 2) 2^-24
   sum_p |a(i,p) b(p,j)|, plus, for the vdpbf16ps and AMX kernels, the sum of |a(i,p) b(p,j)| over
   the p where a or b is subnormal and k 2^-126, and for BFDOT and BFMMLA that sum and 2k 2^-126 (each
   rounding to odd errs by less than 2^-23 relative, twice the nearest's, but a product goes
   through at most ceil(k/2) of them: ceil(k/2) 2^-23 <= (k + 2) 2^-24). The epilogue is the
   reference's on every kernel, bit for bit (alpha * acc and beta * c each rounded, no FMA, under
   every flag set of GCC and Clang). tests/test_gemm.c checks the fmaf bits, the epilogue's and
   the bound for every kernel the CPU runs, each bf16 kernel forced in turn on an AVX512_BF16 (and
   AMX) or FEAT_BF16 CPU whatever the calibration chose.
   Threads: built with -fopenmp (llm.c's convention), a large product shares C's row blocks among
   the OpenMP threads (one thread inside a parallel region); without it, one thread. k is never
   split, so the result does not depend on the number of threads.

   fp8 inputs and outputs (the CPU and CUDA: "The fp8 product on CUDA" below). A and B may be AMP_E4M3 or AMP_E5M2, each alone or beside
   an f32, f16 or bf16 other (widened exactly, as any mixed pair), but not both E5M2: the GPUs' fp8
   Tensor Cores (cuBLASLt on Ada and Hopper) have no E5M2 x E5M2 product, and the recipes never
   need one (TransformerEngine's HYBRID: E4M3 forward, E5M2 gradients times E4M3 weights or
   activations), so amp.h refuses it too (AMP_ERR_UNSUPPORTED). Every fp8 value is an f32 number,
   and so is the product of two of them (at most 4 x 4 significant bits, never below 2^-25): in the
   reference's sum acc only the additions round. The codes are multiplied, not their dequantised
   values; the scales come after the sum:
   - per-tensor (opts->a_scale_inv, b_scale_inv: amp_fp8_scaler's scale_inv of each tensor, NULL
     for 1): one factor s = fl32(fl32(alpha * a_scale_inv) * b_scale_inv) takes alpha's place,
     C = act(fl32(s * acc) + fl32(beta * c) + bias), rounded as the reference says (cuBLASLt too
     applies alpha * scaleA * scaleB to the accumulator). s 0 (alpha 0, or a scale_inv 0) or k 0:
     A and B are not read and fl32(s * acc) counts as +0 (so a -0 beta * c stores +0 here, where
     the 16-bit product's BLAS rule keeps it).
   - block-scaled (opts->a_scales / b_scales: the scales amp_quantize_blocks wrote, as stored, with
     opts->a_blocks / b_blocks their kind): k is cut into blocks of w = 128 (1x128, 128x128) or 32
     (MX), the last one only as long as k leaves. For each block, in k order, part = the block's
     sum as above (its own acc, from 0), then acc = fl32(acc + fl32(fl32(sa * sb) * part)), with sa
     the scale of A's block holding (i, the block's first p) and sb that of B's holding (its first
     p, j): DeepSeek-V3's promotion into fp32 every 128 of k. Then s as above (per-tensor
     scale_invs multiply as well). 1x128 and MX blocks lie along a stored row, so they need k along
     the stored rows: A row-major with ta AMP_NO_TRANS (col-major: AMP_TRANS), B row-major with tb
     AMP_TRANS (col-major: AMP_NO_TRANS), the layer forward y = x W^T; 128 x 128 blocks are square
     and serve either way (W in the backward's dX = dY W). Other layouts are refused
     (AMP_ERR_UNSUPPORTED); blocks of different widths (MX beside 1x128) with AMP_ERR_ARG. One
     operand may be block-scaled and the other per-tensor. An E8M0 byte e is 2^(e - 127) (e = 0
     is 2^-127, an f32 subnormal, which -Ofast's denormals-are-zero mode reads as 0, as it flushes
     a product sa * sb below 2^-126; 0xff is NaN).
   - an fp8 C needs opts->c_scale (TransformerEngine's output scale; AMP_ERR_ARG without it):
     C = sat(fl32(t * c_scale)), t the f32 result after bias and activation, then the saturating
     cast (amp_f32_to_e4m3 / _e5m2(y, 1)): two roundings. beta must be 0 there (AMP_ERR_ARG): C's
     codes hold result * c_scale, and there is no scale to read them back with (cuBLASLt, too, reads
     beta's C from a separate 16-bit matrix). c_scale with another C is refused.
   - opts->c_amax (any C): written with max |t| over the m x n results, t before the multiply by
     c_scale or the rounding to C's type, as a max of the |t| bits (a NaN wins, as amp_quantize's
     amax); 0 when m or n is 0. Give it to amp_fp8_scaler_record for the next step's c_scale.
   With an fp8 C, c_amax, or block scales and something to add or apply to the sums (beta, bias,
   activation) or a C other than f32 with contiguous rows, the f32 results go through an m x n
   buffer allocated for the call (else into C itself); with block scales the product's k slices
   are the blocks: each tile of C takes its
   sums over a block and adds them, scaled, to its running sums while it is in cache (the bits of
   a product per block added into the buffer, m + n more floats). AMP_GEMM_AUTO widens fp8 while packing (AVX-512: vector loads
   that build the f32 bits from the codes' fields; AVX2: amp_convert's fp8 loops) and runs the
   fast kernels above; on a CPU with AMX fp8 x fp8 (and fp8 beside bf16) runs on the tile unit as
   bf16 does, and where the calibration gave bf16 inputs the vdpbf16ps kernel (AMD Zen 4 and 5:
   about twice the FMA kernel's rate), they go there too, in both cases widened to bf16 while packing
   (exact: every E4M3 and E5M2 value is a bf16 value, and no product of two of them, nor any sum
   of such products, lies below 2^-126 without being 0, so nothing is flushed; beside bf16 the
   bf16 operand's subnormals and the products below 2^-126 count as 0, as in a bf16 product, the
   bf16 kernels' bound). Per-tensor, the fast kernels' bound (s for alpha); block-scaled, |acc - sum_b sa sb sum_(p in b)
   a(i,p) b(p,j)| <= (k + nb + 4) 2^-24 sum_b |sa sb| sum_(p in b) |a(i,p) b(p,j)|, nb the number of
   blocks (each part within the fast kernels' bound, three roundings a block, the blocks' sum).
   tests/test_gemm_fp8.c checks the reference against a plain loop over the codes, bit for bit,
   and the fast kernels against that bound, in every layout the scales allow.

   The fp8 product on CUDA (the same arguments; a_scale_inv, b_scale_inv, c_scale and c_amax are
   device pointers, read and written in stream order: the call never waits for the device):
   - cuBLASLt's fp8 kernels (AMP_GEMM_AUTO, A and B both fp8: E4M3 x E4M3, E4M3 x E5M2, E5M2 x
     E4M3, on an sm_89 or newer GPU: Ada, Hopper, Blackwell): compute type f32, scale type f32, the
     scale_invs as its A_SCALE_POINTER / B_SCALE_POINTER (alpha stays alpha), FAST_ACCUM off (the
     Tensor Cores' partial sums promoted to f32, TransformerEngine's split accumulator) unless
     opts->fp8_fast_accum is 1 (below). Those
     kernels take only the "TN" form, k contiguous in both operands (the layer forward y = x W^T:
     AMP_ROW_MAJOR, ta AMP_NO_TRANS, tb AMP_TRANS; col-major: ta AMP_TRANS, tb AMP_NO_TRANS), 16-byte
     aligned pointers, and lda, ldb and k multiples of 16. An operand that is not so is first copied
     by a small kernel into a packed one (k contiguous, k padded with zero codes to a multiple of
     16) in a scratch taken in stream order, so every layout, transpose and shape goes to cuBLASLt,
     at the cost of the copy (m k or n k bytes; the TN form aligned costs none). C in f32, f16 or
     bf16 (beta C read in C's type), or fp8 with c_scale as D_SCALE_POINTER and c_amax as
     AMAX_D_POINTER, cuBLASLt writing C itself. With a bias, an activation, or c_amax beside a
     non-fp8 C (or where cuBLASLt has no algorithm for C as given: its ldc or alignment), cuBLASLt
     writes fl32(s acc) into an f32 scratch and a kernel finishes each result as the CPU does
     (beta C, bias, activation, amax, c_scale and the saturating cast).
   - cuBLASLt's block-scaled fp8 (Hopper, sm_90, with cuBLAS 12.9 or newer both at build time,
     CUBLAS_VERSION, and in the library loaded: DeepSeek-V3's GEMM): AMP_GEMM_AUTO, A and B both
     fp8, both block-scaled with AMP_BLOCK_1x128 or AMP_BLOCK_128x128 (either on either operand: the
     forward's 1x128 activations times 128 x 128 weights, the backward's 1x128 gradients times the
     same weights transposed; which pairs it has kernels for is cuBLASLt's to say), and no
     a_scale_inv / b_scale_inv beside the blocks. cuBLASLt reads the scales as
     CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (1 x 128) and _BLK128x128_32F in layouts of its own
     (1 x 128: the rows' scales contiguous, one column per block of k; 128 x 128: the blocks along k
     contiguous, each block row padded to a multiple of 4 floats), so a small kernel first copies
     amp_quantize_blocks' scales into a stream-ordered scratch in that layout (at most one float per
     128 codes); k is padded with zero codes to a multiple of 128 (a copy of the operand where k is
     not one already), so a partial last block is scaled as the CPU scales it. Each block's sum is
     formed in f32 and multiplied by its two scales in f32, FAST_ACCUM always off (the promotion
     every 128 of k is what these modes are for). C as on the per-tensor path (its own epilogue, or
     the f32 scratch and the finishing kernel). On any other GPU (Ada, Blackwell: their cuBLASLt has
     MX block scales instead), with an older cuBLAS, MX blocks, one operand block-scaled and the
     other not, a scale_inv beside the blocks, a 1 x 128 operand whose rows (m for A, n for B) are
     not a multiple of 4 (where cuBLASLt's reading of their scales' leading dimension is not
     settled), or where cuBLASLt has no algorithm: the plain fp8 kernel, the CPU's bits.
   - opts->fp8_fast_accum 1 sets cuBLASLt's FAST_ACCUM on the per-tensor path: the Tensor Cores then
     accumulate the whole k-long sum themselves, without the periodic promotion to f32. Faster
     (TransformerEngine and torchao use it for the forward pass), and less exact: the accumulator
     inside the Tensor Cores is narrower than f32 (DeepSeek-V3, sec. 3.3, measured about 14 retained
     bits on H800, a Hopper GPU, and relative errors near 2% at k = 4096 without the promotion), so
     amp.h states no bound for it; use it where that error is acceptable (forward products) and keep
     gradients on the default. It changes nothing on block-scaled products, on the plain kernel, or
     on the CPU: the CPU's fp8 product has one path, exact in its products, and the flag is accepted
     there so that one amp_gemm_opts serves both devices (as allow_tf32 is). Values other than 0
     and 1: AMP_ERR_ARG.
   - the plain fp8 kernel, one thread per element of C: everything else (AMP_GEMM_SIMPLE; block
     scales of every kind and layout the CPU takes that cuBLASLt's block-scaled modes do not
     (above); an fp8 operand beside an f32, f16 or bf16 one; f32/16-bit inputs with an fp8
     option; a GPU before sm_89; alpha 0 or k 0; a product for which cuBLASLt has no algorithm it
     will run: none offered by its heuristic, or each of the heuristic's first four refused by
     cublasLtMatmul, which an H200 with cuBLAS 13.1 did for per-tensor fp8 with an f32 C; the
     plan cache remembers the outcome, so the refusals cost the first call of a shape only). It
     sums the codes' products in k order with fmaf (per block of k with block scales,
     each block's sum scaled and added in k order as the reference does): an fp8 x fp8 or fp8 x
     16-bit product is exact in f32, so the fma rounds only the add the reference rounds, and with
     the CPU's element functions for the rest it gives the reference's bits, C and c_amax (GELU
     included: its tanh is amp.h's own, in double on the device too). Like the CPU, it does not read A and B when s is 0 (alpha,
     or a scale_inv, 0); cuBLASLt does, so there a NaN or inf code gives NaN where the CPU gives 0.
     It is slow (no tiling, no Tensor Cores): a path for correctness, not for training speed.
   Refused on a CUDA device as on the CPU (E5M2 x E5M2, 1 x 32 / 1 x 128 blocks across k, an fp8 C
   without c_scale or with beta), and AMP_GEMM_WMMA with fp8 inputs (AMP_ERR_ARG).
   cuBLASLt's amax over a result holding a NaN is not documented (the plain kernel's NaN wins).
   Bound of cuBLASLt's fp8 results against the reference: the GPU bound below with alpha read as s,
   plus the Tensor Cores' own term (next). Block-scaled, with nb blocks along k and sa, sb each
   block's two scales: |alpha| (2k + 2 nb + 4) 2^-24 sum_b |sa sb| sum_(p in b) |a(i,p) b(p,j)|
   before the output rounding (each side: a block's sum within (w - 1) 2^-24 of its |products|,
   w <= 128 its length, two roundings to scale it, at most nb - 1 for the sum of the blocks and one
   for alpha; the reference's own error is as large again), plus the Tensor Cores' term, plus the
   output roundings as below. The Tensor Cores' term: between two promotions to f32, Hopper's fp8
   Tensor Cores add in an accumulator narrower than f32 (DeepSeek-V3 measured about 14 retained
   bits), so the library adds |s| 2^-11 sum_p |a(i,p) b(p,j)| (block-scaled: with each block's
   scales inside the sum): four k-32 Tensor Core steps of 2^-13 each between promotions, taken to
   be at most 128 of k apart (the block-scaled modes promote every 128; cuBLASLt does not document
   the per-tensor split accumulator's interval). That term is a model, not a figure NVIDIA
   documents: an H200 run (cuBLAS 13.1) gave block-scaled results up to about 2^-14 of that sum
   from the reference, past the f32-only bound the library stated before.
   tests/cuda_gemm.c checks C and c_amax within it for every pair, output type and layout, and
   prints the largest error seen. FAST_ACCUM, which never promotes, is outside it.

   The GPU sums in another order (Tensor Core fragments, split-k with f32 partial sums, FMA), so
   its result differs from the CPU's by a bounded amount: about |alpha| (2k + 4) 2^-24 sum_p
   |a(i,p) b(p,j)| before the output rounding, plus up to 3 roundings of the output type
   (tests/cuda_gemm.c states and checks the exact bound).

   On CUDA, A, B, C (and the bias) are device pointers and the call is asynchronous on the device's
   stream. The algorithm chosen by cuBLASLt's heuristic is cached per shape, types, layout,
   leading dimensions, alignment and epilogue, so repeated calls do no descriptor or heuristic work.
   Any alignment and leading dimension works: cuBLASLt is asked for algorithms that accept the
   actual alignment, and where it has none (or none for the type combination: cuBLASLt lacks
   f16 x f16 -> bf16, bf16 x bf16 -> f16 and f32 x f32 -> f16/bf16) a plain CUDA kernel computes
   the product. The bias is fused into cuBLASLt's epilogue for row-major calls with a bias of C's
   type (its bias runs along D's rows and has D's type); otherwise a small kernel applies bias and
   activation after the product, which cuBLASLt has then rounded to C's type once already (so the
   bound gains one rounding of |alpha acc + beta c|, not of the final value).
   ------------------------------------------------------------------------------------------ */

typedef enum amp_layout { AMP_ROW_MAJOR = 0, AMP_COL_MAJOR } amp_layout;
typedef enum amp_trans  { AMP_NO_TRANS = 0, AMP_TRANS } amp_trans;
AMPDEF amp_status amp_gemm(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb,
                           int m, int n, int k, float alpha,
                           const void *A, amp_dtype a_type, int lda,
                           const void *B, amp_dtype b_type, int ldb,
                           float beta, void *C, amp_dtype c_type, int ldc);

/* The activation of the epilogue, applied after the bias. */
typedef enum amp_act {
  AMP_ACT_NONE = 0,
  AMP_ACT_RELU,   /* x > 0 ? x : 0 (cuBLASLt's max(x, 0): a NaN becomes 0) */
  AMP_ACT_GELU    /* the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the one
                     cuBLASLt's GELU epilogue computes (PyTorch's fallback for it is gelu(approximate="tanh")) */
} amp_act;

/* Which implementation computes the product. */
typedef enum amp_gemm_algo {
  AMP_GEMM_AUTO = 0,  /* CUDA: cuBLASLt (a plain CUDA kernel when its heuristic offers no algorithm);
                         CPU: the fast kernel for the CPU (FMA, AVX-512, AVX512_BF16; see the manual) */
  AMP_GEMM_WMMA,      /* CUDA only: the readable WMMA teaching kernel (f16/bf16 inputs), amp_kernels.cu */
  AMP_GEMM_SIMPLE,    /* CUDA only: the plain fallback kernel, one thread per element of C */
  AMP_GEMM_REFERENCE  /* CPU only: the exact in-order reference, no FMA (the same bits as a plain
                         triple loop; for tests and teaching) */
} amp_gemm_algo;

/* The kinds of fp8 block scaling (the manual's BLOCK SCALING; amp_quantize_blocks writes them,
   amp_gemm_ex reads them). */
typedef enum amp_block_scaling {
  AMP_BLOCK_MX_RCEIL = 0,  /* 1 x 32, E8M0 scale rounded up (cuBLAS, TransformerEngine) */
  AMP_BLOCK_MX_FLOOR,      /* 1 x 32, E8M0 scale from amax's exponent (OCP MX v1.0, torchao) */
  AMP_BLOCK_1x128,         /* 1 x 128, float scale (DeepSeek-V3 activations and gradients) */
  AMP_BLOCK_128x128        /* 128 x 128, float scale (DeepSeek-V3 weights) */
} amp_block_scaling;

/* Options of amp_gemm_ex; a zero-initialised struct (or NULL) is plain amp_gemm. */
typedef struct amp_gemm_opts {
  const void *bias;       /* NULL -> no bias. n values: C(i,j) gets + bias[j] before the activation */
  amp_dtype   bias_type;  /* 0 -> AMP_F32; any of the three */
  amp_act     act;        /* 0 -> AMP_ACT_NONE */
  amp_gemm_algo algo;     /* 0 -> AMP_GEMM_AUTO */
  int allow_tf32;         /* f32 inputs on CUDA: 0 -> full f32 products (CUBLAS_COMPUTE_32F);
                             1 -> TF32 Tensor Cores (CUBLAS_COMPUTE_32F_FAST_TF32, 10-bit mantissas).
                             The CPU always computes in f32. */
  /* fp8 (the manual's "fp8 inputs and outputs" under the matrix product). On CUDA the pointers
     below are device pointers. */
  const float *a_scale_inv;  /* NULL -> 1: A's per-tensor dequantisation factor (amp_fp8_scaler's */
  const float *b_scale_inv;  /*   scale_inv); the sum is multiplied by fl32(fl32(alpha * a) * b) */
  amp_block_scaling a_blocks, b_blocks;   /* the kinds of a_scales / b_scales (read only when given) */
  const void *a_scales;      /* NULL -> per-tensor; else amp_quantize_blocks' scales of A as stored */
  const void *b_scales;      /*   (and of B): the sum is scaled per 32 or 128 of k */
  const float *c_scale;      /* C of an fp8 type: stored as sat(result * *c_scale); required there */
  float *c_amax;             /* NULL, or written: max |result| before the cast to C's type (NaN wins) */
  int fp8_fast_accum;        /* fp8 A and B on CUDA: 0 -> split accumulation (the Tensor Cores' partial
                                sums promoted to f32); 1 -> cuBLASLt's FAST_ACCUM (faster, less exact:
                                the manual's "The fp8 product on CUDA"). The CPU's fp8 product is exact
                                in either case. Other values: AMP_ERR_ARG */
} amp_gemm_opts;

/* amp_gemm with a fused epilogue: C = act(alpha * op(A) op(B) + beta * C + bias). The layer
   forward y = act(x W^T + b) is amp_gemm_ex(d, AMP_ROW_MAJOR, AMP_NO_TRANS, AMP_TRANS, batch, out,
   in, 1, x, t, in, W, t, in, 0, y, t, out, &opts) with opts.bias = b. */
AMPDEF amp_status amp_gemm_ex(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb,
                              int m, int n, int k, float alpha,
                              const void *A, amp_dtype a_type, int lda,
                              const void *B, amp_dtype b_type, int ldb,
                              float beta, void *C, amp_dtype c_type, int ldc,
                              const amp_gemm_opts *opts /* NULL = none */);

/* ------------------------------------------------------------------------------------------
   fp8 block scaling (the manual's BLOCK SCALING)
   ------------------------------------------------------------------------------------------ */

/* x: rows x cols, row-major, ldx elements per row (f32, f16 or bf16, aligned to its size) -> q: fp8
   codes (AMP_E4M3 or AMP_E5M2), ldq bytes per row, and scales, packed row-major: MX: uint8 E8M0,
   rows x ceil(cols/32); 1x128: float, rows x ceil(cols/128); 128x128: float, ceil(rows/128) x
   ceil(cols/128). Each scale is the dequantisation factor: x ~ value(q) * scale. rows or cols 0:
   nothing written. AMP_ERR_ARG (nothing written) for a NULL pointer, a negative size, ldx or ldq
   below cols, a wrong type or kind, a misaligned x or float scales, or buffers that overlap. */
AMPDEF amp_status amp_quantize_blocks(amp_device *d, amp_block_scaling kind, amp_dtype fp8, int rows, int cols,
                                      const void *x, amp_dtype x_type, int ldx, void *q, int ldq, void *scales);

/* ------------------------------------------------------------------------------------------
   Private (not the API): the element math and the records that the implementation below and
   amp_kernels.cu share, each written once as AMP_HD code. Names start with amp__ (amp_step_coefs
   too is private); none of it is promised to stay.
   ------------------------------------------------------------------------------------------ */

/* 1 for a finite x, 0 for +-inf and NaN: an integer test of the exponent field, which
   -ffinite-math-only / -ffast-math cannot fold away (they may fold x - x == 0 and x == x to 1). */
static inline AMP_HD int amp__finite(float x) { return (amp__f32_bits(x) & 0x7f800000u) != 0x7f800000u; }
/* 1 for +0 and -0 only (a config field's "default"): under -ffinite-math-only x == 0 may hold for
   a NaN, and with the denormals-are-zero mode -Ofast sets, for a subnormal. */
static inline AMP_HD int amp__is_zero(float x) { return (amp__f32_bits(x) << 1) == 0u; }
/* 1 for a subnormal x (not 0): a -Ofast build's denormals-are-zero mode reads one as 0, so a config
   value is refused on these bits, the same in every build. */
static inline AMP_HD int amp__subnormal(float x) {
  uint32_t a = amp__f32_bits(x) & 0x7fffffffu;
  return a != 0u && a < 0x00800000u;
}

/* The element functions of each format (the AMP__DTYPES columns' N): element i at p as f32, and x
   rounded to the format into element i. */
static inline AMP_HD float amp__ld_f32(const void *p, size_t i) { return ((const float *)p)[i]; }
static inline AMP_HD void amp__st_f32(void *p, size_t i, float x) { ((float *)p)[i] = x; }
static inline AMP_HD float amp__ld_f16(const void *p, size_t i) { return amp_f16_to_f32(((const amp_f16 *)p)[i]); }
static inline AMP_HD void amp__st_f16(void *p, size_t i, float x) { ((amp_f16 *)p)[i] = amp_f32_to_f16(x); }
static inline AMP_HD float amp__ld_bf16(const void *p, size_t i) { return amp_bf16_to_f32(((const amp_bf16 *)p)[i]); }
static inline AMP_HD void amp__st_bf16(void *p, size_t i, float x) { ((amp_bf16 *)p)[i] = amp_f32_to_bf16(x); }
/* fp8: stores saturate (+-448, +-57344), as TransformerEngine and torchao cast into fp8 */
static inline AMP_HD float amp__ld_e4m3(const void *p, size_t i) { return amp_e4m3_to_f32(((const amp_fp8 *)p)[i]); }
static inline AMP_HD void amp__st_e4m3(void *p, size_t i, float x) { ((amp_fp8 *)p)[i] = amp_f32_to_e4m3(x, 1); }
static inline AMP_HD float amp__ld_e5m2(const void *p, size_t i) { return amp_e5m2_to_f32(((const amp_fp8 *)p)[i]); }
static inline AMP_HD void amp__st_e5m2(void *p, size_t i, float x) { ((amp_fp8 *)p)[i] = amp_f32_to_e5m2(x, 1); }

/* One element of any format, as f32 / from f32 (the kernels' and loops' loads/stores). */
#define AMP__LD_(E, N, T, S) return amp__ld_##N(p, i);
#define AMP__ST_(E, N, T, S) amp__st_##N(p, i, x); break;
static inline AMP_HD float amp__load(const void *p, amp_dtype t, size_t i) {
  AMP__DTYPE_SWITCH(t, AMP__LD_)
  return 0.0f;
}
static inline AMP_HD void amp__store(void *p, amp_dtype t, size_t i, float x) {
  AMP__DTYPE_SWITCH(t, AMP__ST_)
}
#undef AMP__LD_
#undef AMP__ST_
/* x rounded to the type t and back: what a model copy of type t holds for master value x. */
static inline AMP_HD float amp__round_to(float x, amp_dtype t) {
#define AMP__RT_(E, N, T, S) { T r_; amp__st_##N(&r_, 0, x); return amp__ld_##N(&r_, 0); }   /* f32: x itself */
  AMP__DTYPE_SWITCH(t, AMP__RT_)
#undef AMP__RT_
  return x;
}
/* The smallest normal of format t as f32 bits (the gradient stats' subnormal class); 0 unknown. */
static inline AMP_HD uint32_t amp__dtype_min_normal_bits(amp_dtype t) {
#define AMP__MN_(A, E, N, T, S, MX, MN, ...) case E: return MN;
  switch (t) { AMP__DTYPES(AMP__MN_, ~) default: break; }
#undef AMP__MN_
  return 0u;
}
/* 1 where format t is an f32's top half (the AMP__DTYPES column: bf16), 0 for any other value: the
   rule for a stochastic model copy and for the split and absent masters, which the CPU's checks,
   the CUDA checks and the step kernel read. */
static inline AMP_HD int amp__dtype_f32_top(amp_dtype t) {
#define AMP__TOP_(A, E, N, T, S, MX, MN, CV, GV, CR, NT, CMP, F8, TOP) case E: return TOP;
  switch (t) { AMP__DTYPES(AMP__TOP_, ~) default: break; }
#undef AMP__TOP_
  return 0;
}

/* The state a fresh scaler starts from: hysteresis counts full (N for the refill flavours, 0
   overflows seen for CONSECUTIVE), tracker 0 (-1 with late_growth, DeepSpeed's
   last_overflow_iter = -1). */
static inline AMP_HD amp_scale_state amp__scale_init(float init_scale, const amp_scale_params *pr) {
  amp_scale_state st;
  st.scale = init_scale;
  st.tracker = pr->late_growth ? -1 : 0;
  st.hyst = pr->mode == AMP_HYSTERESIS_CONSECUTIVE ? 0 : pr->hysteresis;
  st.at_floor = 0;
  return st;
}

/* The scale rule, once per iteration. Multiplications are done in double and
   rounded once to float, as PyTorch's and apex's kernels do (their factors are doubles); for
   Paddle's float*float the result is the same (the exact product fits a double). Checked against
   the anchors' code:
   - CONSECUTIVE is Paddle's update_loss_scaling: bad += 1, back off when bad == N, then bad = 0;
     a clean step sets bad = 0.
   - CLEAN_REFILL is apex's update_scale_hysteresis: the count is decremented (apex lets it go
     negative; stopping at 0 gives the same decisions), back-off once it is <= 0, refilled to N
     after every clean step; DeepSpeed with consecutive_hysteresis is the same.
   - GROWTH_REFILL is DeepSpeed's default: refilled only when the scale grows.
   - Every overflow, absorbed by hysteresis or not, restarts the growth window (DeepSpeed's
     last_overflow_iter). late_growth is DeepSpeed's older FP16_Optimizer window,
     stable_interval = (iter - last_overflow_iter) - 1: the first clean step after it is not counted.
   - Floor: max(scale * backoff, floor) (Paddle, DeepSpeed, Keras); cap: min(scale * growth, cap)
     (apex amp); a growth to inf leaves the scale as it was (PyTorch, apex, Paddle). */
static inline AMP_HD void amp__scale_rule(amp_scale_state *st, const amp_scale_params *pr, int found_inf) {
  if (pr->fixed) return;
  if (found_inf) {
    int back_off;
    st->tracker = pr->late_growth ? -1 : 0;
    if (pr->mode == AMP_HYSTERESIS_CONSECUTIVE) {
      st->hyst += 1;
      back_off = st->hyst >= pr->hysteresis;
      if (back_off) st->hyst = 0;
    } else {
      if (st->hyst > 0) st->hyst -= 1;     /* once run out it stays out: each overflow backs off */
      back_off = st->hyst <= 0;
    }
    if (back_off) {
      float s = (float)((double)st->scale * (double)pr->backoff);
      st->at_floor = !(s >= pr->floor) || !amp__finite(s);   /* NaN too, on the bits */
      st->scale = st->at_floor ? pr->floor : s;
    }
  } else {
    if (pr->mode == AMP_HYSTERESIS_CONSECUTIVE) st->hyst = 0;
    else if (pr->mode == AMP_HYSTERESIS_CLEAN_REFILL) st->hyst = pr->hysteresis;
    st->at_floor = 0;
    st->tracker += 1;
    if (st->tracker >= pr->interval) {
      float s = (float)((double)st->scale * (double)pr->growth);
      if (pr->cap > 0.0f && s > pr->cap) s = pr->cap;
      if (amp__finite(s)) st->scale = s;   /* a growth to inf leaves the scale as it was */
      st->tracker = 0;
      if (pr->mode == AMP_HYSTERESIS_GROWTH_REFILL) st->hyst = pr->hysteresis;
    }
  }
}

/* The inverse scale used for unscaling: a multiply, never a divide (PyTorch). */
static inline AMP_HD float amp__inv_scale(float scale) { return (float)(1.0 / (double)scale); }

/* Per-step coefficients of an update, computed once per step (on the host, or by one device
   thread) and read by every element. */
typedef struct amp_step_coefs {
  float lr, wd;              /* learning rate, weight decay on the grad (L2; 0 where the decay is decoupled) */
  float momentum, dampening; /* SGD */
  int32_t nesterov, first;   /* SGD: nesterov flag; first step of the momentum buffer */
  float beta1, beta2, eps;   /* Adam/AdamW, Lion (beta1, beta2) */
  float step_size;           /* Adam: lr / (1 - beta1^t) */
  float bc2_sqrt;            /* Adam: sqrt(1 - beta2^t) */
  float decay;               /* AdamW, Lion: 1 - lr * wd, applied to the weight first; else 1 */
  int32_t moments_only;      /* Adam/AdamW on the CPU: 1 computes the new moments alone, leaving the
                                weight decayed only (AMP_MOMENTS_FP8's first pass); 0 everywhere else */
} amp_step_coefs;

/* Each kind's part of the coefficients (its row's `coefs`), on c as amp__step_coefs starts it:
   every field from the config, wd the group's weight decay on the grad, decay 1, step_size lr,
   bc2_sqrt 1 (what SGD reads). Bias corrections in double, rounded once to float, as PyTorch
   computes them; a decoupled decay's factor likewise, (float)(1 - (double)lr * (double)wd). */
static inline AMP_HD void amp__no_coefs(amp_step_coefs *c, const amp_optim_config *h, int64_t t) {
  (void)c; (void)h; (void)t;
}
static inline AMP_HD void amp__decoupled_decay(amp_step_coefs *c) {
  c->decay = (float)(1.0 - (double)c->lr * (double)c->wd);
  c->wd = 0.0f;   /* the weight decays, not the grad */
}
static inline AMP_HD void amp__adam_coefs(amp_step_coefs *c, const amp_optim_config *h, int64_t t) {
  c->step_size = (float)((double)c->lr / (1.0 - pow((double)h->beta1, (double)t)));
  c->bc2_sqrt = (float)sqrt(1.0 - pow((double)h->beta2, (double)t));
}
static inline AMP_HD void amp__adamw_coefs(amp_step_coefs *c, const amp_optim_config *h, int64_t t) {
  amp__decoupled_decay(c);
  amp__adam_coefs(c, h, t);
}
static inline AMP_HD void amp__lion_coefs(amp_step_coefs *c, const amp_optim_config *h, int64_t t) {
  (void)h; (void)t;
  amp__decoupled_decay(c);
}

/* THE OPTIMIZER KINDS, one row each; every dispatch on a kind (defaults, moment buffers, names in
   messages, coefficients, the CPU loops, the step kernel) is a switch generated from this list,
   whose default refuses a kind the list lacks. Columns:
     kind     its amp_optim_kind value
     name     for messages
     moments  fp32 moment buffers per element, an expression of the config c (SGD: 1 with momentum)
     lr, beta1, beta2   what a 0 in the config (and amp_optimizer_defaults) means
     coefs    its part of amp_step_coefs (above)
     elem     the AMP_HD element update (p, m, v, g, c): the master *p, moments *m, *v (a scratch
              where the kind keeps none), g the unscaled clipped grad; the CPU's plain loop and the
              step kernel call it (AMP__EXACT_FP: the same bits on both)
     device   1: elem is the update (any device); 0: the update is a host function (AMP_CUSTOM)
     vec      the CPU vector loops' body (AVX2, AVX-512, NEON): AMP__V_<vec>, elem written on vectors
              operation for operation (amp__o_step16/8/4); NONE: no vector body, so the kind runs
              elem's plain loop at every SIMD level (the same bits, slower)
   To add a kind: its AMP_* value, a row here, its element function beside amp__lion_elem
   (and, if it needs more than amp_step_coefs holds, a field there and a coefs function above);
   optionally a vector body (vec NONE until then). */
#define AMP__OPTIM_KINDS(X) \
  /* kind            name          moments              lr     beta1 beta2   coefs             elem      device vec */ \
  X(AMP_SGD,    "AMP_SGD",    c->momentum != 0.0f, 1e-3f, 0.9f, 0.999f, amp__no_coefs,    amp__sgd_elem,    1, SGD) \
  X(AMP_ADAM,   "AMP_ADAM",   2,                   1e-3f, 0.9f, 0.999f, amp__adam_coefs,  amp__adam_elem,   1, ADAM) \
  X(AMP_ADAMW,  "AMP_ADAMW",  2,                   1e-3f, 0.9f, 0.999f, amp__adamw_coefs, amp__adam_elem,   1, ADAM) \
  X(AMP_CUSTOM, "AMP_CUSTOM", 0,                   1e-3f, 0.9f, 0.999f, amp__no_coefs,    amp__custom_elem, 0, NONE) \
  X(AMP_LION,   "AMP_LION",   1,                   1e-4f, 0.9f, 0.99f,  amp__lion_coefs,  amp__lion_elem,   1, LION)

/* The list's columns as functions (the switch defaults: an unknown kind). */
#define AMP__KIND_NAME(k, name, nm, lr, b1, b2, coefs, elem, dev, vec) case k: return name;
static inline const char *amp__kind_name(amp_optim_kind kind) {
  switch (kind) { AMP__OPTIM_KINDS(AMP__KIND_NAME) default: return NULL; }
}
#undef AMP__KIND_NAME
/* The fp32 moment buffers per element of c's kind (the row's `moments`); -1: not a kind. */
#define AMP__KIND_MOMENTS(k, name, nm, lr, b1, b2, coefs, elem, dev, vec) case k: return (nm);
static inline int amp__o_moments(const amp_optim_config *c) {
  switch (c->kind) { AMP__OPTIM_KINDS(AMP__KIND_MOMENTS) default: return -1; }
}
#undef AMP__KIND_MOMENTS
/* 1 for a kind of the list whose update is its element function (every device), else 0. */
#define AMP__KIND_DEVICE(k, name, nm, lr, b1, b2, coefs, elem, dev, vec) case k: return dev;
static inline AMP_HD int amp__kind_on_device(amp_optim_kind kind) {
  switch (kind) { AMP__OPTIM_KINDS(AMP__KIND_DEVICE) default: return 0; }
}
#undef AMP__KIND_DEVICE

/* The coefficients of update number t (t >= 1) for the tensors of one param group, from the
   resolved config and the group's lr_scale and weight_decay (group 0: 1 and h->weight_decay, see
   amp__group_coefs): the one function the CPU step and the CUDA step kernel (one thread per
   block) both call. The group's lr is h->lr * lr_scale, one f32 multiply (exact for 1); the
   kind's row adds its part. An unknown kind gets the common part only (create refuses it). */
#define AMP__KIND_COEFS(k, name, nm, lr, b1, b2, coefs, elem, dev, vec) case k: coefs(&c, h, t); break;
static inline AMP_HD amp_step_coefs amp__step_coefs(const amp_optim_config *h, int64_t t, float lr_scale,
                                                    float weight_decay) {
  amp_step_coefs c;
  float lr = h->lr * lr_scale;
  c.lr = lr; c.wd = weight_decay;
  c.momentum = h->momentum; c.dampening = h->dampening;
  c.nesterov = h->nesterov != 0; c.first = t == 1;   /* torch.optim.SGD: the buffer starts as the grad */
  c.beta1 = h->beta1; c.beta2 = h->beta2; c.eps = h->eps;
  c.decay = 1.0f; c.step_size = lr; c.bc2_sqrt = 1.0f; c.moments_only = 0;
  switch (h->kind) { AMP__OPTIM_KINDS(AMP__KIND_COEFS) default: break; }
  return c;
}
#undef AMP__KIND_COEFS

/* The coefficients of a tensor in param group `group`: group 0 takes lr_scale 1 and the config's
   weight_decay (so set_lr and a checkpoint's config reach it), any other group its own values. */
static inline AMP_HD amp_step_coefs amp__group_coefs(const amp_optim_config *h, int64_t t, int group, float lr_scale,
                                                     float weight_decay) {
  return group == 0 ? amp__step_coefs(h, t, 1.0f, h->weight_decay) : amp__step_coefs(h, t, lr_scale, weight_decay);
}

/* 1 when round_to rt is set: a float model copy holding values rounded to a narrower format (the
   default, AMP_F32, holds the master's value). */
static inline AMP_HD int amp__round_to_set(amp_dtype rt) { return rt != AMP_F32; }
/* The model copy's value of master value x, rounded to nearest: rounded to round_to (AMP_F32: x
   itself; a float model copy may hold bf16/f16 values, amp_tensor_desc.round_to), then stored as
   the copy's dtype. */
static inline AMP_HD void amp__store_model_rne(void *w, amp_dtype t, amp_dtype round_to, size_t i, float x) {
  amp__store(w, t, i, amp__round_to(x, round_to));
}

/* Stochastic rounding. The random bits come from a counter-based generator: a 64-bit mix
   (splitmix64's finaliser) of the key (seed, update number, tensor index) and the element index,
   so the same seed gives the same bits on the CPU and in the kernels, whatever the order in which
   elements are written, and a run resumed from a checkpoint (which holds the update count) draws
   the same bits again. */
#define AMP__MIX_M1 0xbf58476d1ce4e5b9ull    /* splitmix64's finaliser multipliers */
#define AMP__MIX_M2 0x94d049bb133111ebull
#define AMP__MIX_STEP 0x9e3779b97f4a7c15ull  /* the golden-ratio increment between counters */
/* The finaliser's steps on any width: XOR, SHR (logical, 64-bit lanes) and MUL64 (the low 64 bits)
   of the width, SET1 making a constant (the vector loops use it too). */
#define AMP__MIX64_STEPS(z, XOR, SHR, MUL64, SET1) \
  z = XOR(z, SHR(z, 30)); z = MUL64(z, SET1(AMP__MIX_M1)); \
  z = XOR(z, SHR(z, 27)); z = MUL64(z, SET1(AMP__MIX_M2)); \
  z = XOR(z, SHR(z, 31))
#define AMP__MIX_XOR(a, b) ((a) ^ (b))
#define AMP__MIX_SHR(a, k) ((a) >> (k))
#define AMP__MIX_MUL(a, b) ((a) * (b))
#define AMP__MIX_SET1(c) (c)
static inline AMP_HD uint64_t amp__mix64(uint64_t z) {
  AMP__MIX64_STEPS(z, AMP__MIX_XOR, AMP__MIX_SHR, AMP__MIX_MUL, AMP__MIX_SET1);
  return z;
}
static inline AMP_HD uint64_t amp__sr_key(uint64_t seed, int64_t step, uint64_t tensor) {
  return amp__mix64(amp__mix64(seed ^ amp__mix64((uint64_t)step + AMP__MIX_STEP)) ^
                    (tensor * 0xd1b54a32d192ed03ull));
}
/* The key of a tensor's stochastically rounded moment j (1: m, 2: v; AMP_MOMENTS_BF16 with stochastic)
   at an update: the key of the tensor's model copy at that update (amp__sr_key) hashed with j, so
   the model copy's and the two moments' bits are independent streams of the same seed. */
static inline AMP_HD uint64_t amp__sr_key_moment(uint64_t key, int j) {
  return amp__mix64(key + (uint64_t)j * 0xd1b54a32d192ed03ull);
}
/* A moment type's stored bytes per element, and the form of the CUDA step kernel that steps it
   (nonzero: a CUDA device's optimizer keeps it) (the columns of AMP__MOMENTS_TYPES; 0 for a value
   that is not a type). */
#define AMP__MOMENTS_BYTES_(name, value, bytes, kept, cuda, shared) case value: return bytes;
static inline AMP_HD size_t amp__moments_bytes(int m) {
  switch (m) { AMP__MOMENTS_TYPES(AMP__MOMENTS_BYTES_) default: return 0; }
}
#undef AMP__MOMENTS_BYTES_
#define AMP__MOMENTS_CUDA_(name, value, bytes, kept, cuda, shared) case value: return cuda;
static inline AMP_HD int amp__moments_on_cuda(int m) {
  switch (m) { AMP__MOMENTS_TYPES(AMP__MOMENTS_CUDA_) default: return 0; }
}
#undef AMP__MOMENTS_CUDA_
/* The elements whose moments share one scale with element e of n (the last column of
   AMP__MOMENTS_TYPES): [*from, *to) is e alone, its block of AMP__Q8_BLOCK, or all n. */
#define AMP__MOMENTS_SHARED_(name, value, bytes, kept, cuda, shared) case value: return shared;
static inline int amp__moments_shared(int m) {
  switch (m) { AMP__MOMENTS_TYPES(AMP__MOMENTS_SHARED_) default: return 0; }
}
static inline void amp__moments_span(int m, size_t n, size_t e, size_t *from, size_t *to) {
  const int s = amp__moments_shared(m);
  *from = s == 2 ? 0 : s == 1 ? e / AMP__Q8_BLOCK * AMP__Q8_BLOCK : e;
  *to = s == 2 ? n : s == 1 ? (n - *from < AMP__Q8_BLOCK ? n : *from + AMP__Q8_BLOCK) : e + 1;
}
#undef AMP__MOMENTS_SHARED_
/* Element i's 16 random bits: field i % 4 (bits 16 (i % 4) .. 16 (i % 4) + 15) of the mix of counter
   i / 4, so one 64-bit hash serves four neighbouring elements (as Philox's four words serve four
   elements in the GPU frameworks): the vector loops mix a quarter as many counters as elements. */
static inline AMP_HD uint32_t amp__sr_bits16(uint64_t key, uint64_t i) {
  return (uint32_t)(amp__mix64(key + ((i >> 2) + 1u) * AMP__MIX_STEP) >> (16u * (unsigned)(i & 3u))) & 0xffffu;
}
/* f32 -> bf16 rounded stochastically: r (16 uniform bits) added below the kept bits carries into
   them with probability (cut bits) / 2^16, so the expected value is x (the magnitude rounds up
   with the probability of its distance from the lower neighbour). A value within one bf16 step of
   FLT_MAX may round to inf, as a round up would. NaN: as amp_f32_to_bf16. */
static inline AMP_HD amp_bf16 amp__f32_to_bf16_sr(float x, uint32_t r) {
  uint32_t u = amp__f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return amp_f32_to_bf16(x);
  return (amp_bf16)((u + (r & 0xffffu)) >> 16);
}
/* The model copy's element i from master value x: stochastic (sr, a bf16 copy) with the bits of
   key, else amp__store_model_rne. The one write-back of the CPU loops, the step kernel and the
   model-copy writes at add and load. */
static inline AMP_HD void amp__store_model(void *w, amp_dtype t, amp_dtype round_to, int sr, uint64_t key, size_t i,
                                           float x) {
  if (sr) ((amp_bf16 *)w)[i] = amp__f32_to_bf16_sr(x, amp__sr_bits16(key, (uint64_t)i));
  else amp__store_model_rne(w, t, round_to, i, x);
}
/* Whether a model copy of type t (round_to rt, stochastic sr) is written element by element through
   amp__store_model rather than by the plain cast from f32: a float copy holding rt's values, or a
   bf16 copy rounded stochastically. The CPU's amp__o_store and the step kernel's store read it. */
static inline AMP_HD int amp__model_rounds(amp_dtype t, amp_dtype rt, int sr) {
  return (t == AMP_F32 && amp__round_to_set(rt)) || (sr && amp__dtype_f32_top(t));
}
/* A bf16 moment's stored word from its new f32 value x at element i (AMP_MOMENTS_BF16): rounded to
   nearest even (amp_f32_to_bf16, the bits of amp_convert's loops), or with sr stochastically with
   the bits of key (the moment's stream, amp__sr_key_moment) at i, the model copy's rule. The store
   of the step kernel and of tests/test_device_line.c's emulation of it; the CPU's moment loops
   give the same bits by the same functions. */
static inline AMP_HD amp_bf16 amp__moment_bf16(float x, int sr, uint64_t key, uint64_t i) {
  return sr ? amp__f32_to_bf16_sr(x, amp__sr_bits16(key, i)) : amp_f32_to_bf16(x);
}
/* One moment array as kept (amp__tensor.mq / vq on the CPU, the CUDA optimizer's slab): its bytes,
   laid out as the checkpoint holds them: F32 n floats; BF16 n words; 8BIT the f32 absmax of each
   block of AMP__Q8_BLOCK elements, then the n codes; FP8 the f32 scale_inv (1 / scale, what a code
   is multiplied by), then the n E4M3 codes. In memory each array starts on an align-byte boundary
   (amp__moment_stride: 4 on the CPU, 128 in the CUDA slab). */
static inline AMP_HD size_t amp__moment_bytes(int type, size_t n) {
  size_t codes = amp__moments_bytes(type) * n;   /* the list's bytes per element */
  if (type == AMP_MOMENTS_8BIT) return 4 * ((n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK) + codes;
  if (type == AMP_MOMENTS_FP8) return 4 + codes;
  return codes;
}
static inline AMP_HD size_t amp__moment_stride(int type, size_t n, size_t align) {
  return (amp__moment_bytes(type, n) + align - 1u) / align * align;
}

/* The split master (AMP_MASTER_SPLIT): an fp32 master x held as its bf16 model copy hi plus a
   16-bit remainder lo, exactly. hi = the top 16 bits of x rounded to nearest with ties AWAY from
   zero, (u + 0x8000) >> 16 on the bits u; lo = the low 16 bits of u as they are. Decoding,
   u = (hi << 16) + lo read as a signed 16-bit number (lo - 0x10000 when its top bit is set, the
   case where hi was rounded up), gives x back bit for bit: subnormals, +-0 (hi +-0, lo 0), +-inf
   (lo 0) and the finite values that round up to inf (hi inf, lo negative) included.
   Why not ties to even: the fp32 values whose nearest-even bf16 is an even hi are 65537 (both
   ties), one more than 16 bits can tell apart, so no 16-bit remainder beside a ties-to-even copy
   is exact. With ties away every bf16 has 65536 values, and hi is amp_f32_to_bf16(x) everywhere
   but at an exact tie (low 16 bits 0x8000) whose kept part is even: there hi is the other,
   equally near neighbour. NaN: hi is amp_f32_to_bf16's quiet NaN (sign and top payload kept) and
   lo 0, so the low 16 payload bits are not kept (an arithmetic NaN, whose low bits are 0, is). */
static inline AMP_HD void amp__split_encode(float x, amp_bf16 *hi, uint16_t *lo) {
  uint32_t u = amp__f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { *hi = amp_f32_to_bf16(x); *lo = 0u; return; }
  *hi = (amp_bf16)((u + 0x8000u) >> 16);
  *lo = (uint16_t)(u & 0xffffu);
}
static inline AMP_HD float amp__split_decode(amp_bf16 hi, uint16_t lo) {
  return amp__bits_f32(((uint32_t)hi << 16) + (uint32_t)lo - (((uint32_t)lo & 0x8000u) << 1));
}

/* Unscaled, clipped gradient of one element: g * (inv_scale * clip) folded into one multiply. */

/* The element functions below are written in these: one IEEE single operation each, rounded on
   its own, never fused with a neighbour nor regrouped, so that every loop that runs them computes
   the same bits: the CPU's plain loops under any flags and any compiler named here, and the CUDA
   kernels. On the device the _rn intrinsics, which nvcc never contracts (it fuses a * b + c into an
   FMA by default). Under clang an empty asm takes each operand (clang's -ffp-contract=fast, which
   -Ofast sets, fuses across statements whatever the pragmas say, and outside x86 it ignores
   float_control altogether); on x86 without SSE2 and on other targets the operand goes through
   memory, which also drops x87's excess precision. GCC honours AMP__EXACT_FP's optimize
   attribute, so under GCC the operations are plain and its loops still vectorise. */
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__))
#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
#define AMP__BARRIER(x) __asm__("" : "+x"(x))   /* the value in an SSE register, as rounded */
#define AMP__BARRIER_IN_REG 1
#elif defined(__aarch64__)
#define AMP__BARRIER(x) __asm__("" : "+w"(x))
#define AMP__BARRIER_IN_REG 1
#else
#define AMP__BARRIER(x) __asm__("" : "+m"(x))   /* through memory: also drops x87's excess precision */
#endif
#endif
#if defined(AMP__BARRIER) && (defined(__clang__) || (defined(__i386__) && !defined(__SSE2__)))
#define AMP__KEEP(x) AMP__BARRIER(x)
#else
#define AMP__KEEP(x) ((void)0)
#endif
/* On the CPU a value passed through AMP__ROUNDED is a rounded f32 (or f64) that no compiler,
   GCC included, can fuse into a following add (an empty asm takes it as an operand;
   -ffp-contract=fast ignores pragmas). The GPU's bound allows FMA, so device code has no barrier. */
#if defined(AMP__BARRIER_IN_REG)
#define AMP__ROUNDED(x) AMP__BARRIER(x)
#else
#define AMP__ROUNDED(x) ((void)0)
#endif
/* GCC does not inline a function into one whose optimize options differ (AMP__EXACT_FP's callers
   under -Ofast: each operation was a call) unless it is always_inline; one operation is the same
   operation inlined anywhere. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define AMP__OP_INLINE __attribute__((always_inline))
#else
#define AMP__OP_INLINE
#endif
#if defined(__CUDA_ARCH__)
#define AMP__FOP(T, name, op, rn) static inline AMP_HD T name(T a, T b) { return rn(a, b); }
#else
#define AMP__FOP(T, name, op, rn) \
  static inline AMP_HD AMP__OP_INLINE T name(T a, T b) { AMP__KEEP(a); AMP__KEEP(b); return a op b; }
#endif
AMP__FOP(float, amp__fmul, *, __fmul_rn)
AMP__FOP(float, amp__fadd, +, __fadd_rn)
AMP__FOP(float, amp__fsub, -, __fsub_rn)
AMP__FOP(float, amp__fdiv, /, __fdiv_rn)
AMP__FOP(double, amp__dmul, *, __dmul_rn)   /* (the doubles: amp__tanh, the fp8 recipes' divisions) */
AMP__FOP(double, amp__dadd, +, __dadd_rn)
AMP__FOP(double, amp__dsub, -, __dsub_rn)
AMP__FOP(double, amp__ddiv, /, __ddiv_rn)
#undef AMP__FOP
/* The IEEE square root (clang under -ffast-math may otherwise take a reciprocal-root estimate). */
static inline AMP_HD AMP__OP_INLINE float amp__fsqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#elif defined(__clang__) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
  float r;
  __asm__("sqrtss %1, %0" : "=x"(r) : "x"(a));
  return r;
#elif defined(__clang__) && defined(__aarch64__)
  float r;
  __asm__("fsqrt %s0, %s1" : "=w"(r) : "w"(a));
  return r;
#else
  return sqrtf(a);
#endif
}

/* ---- fp8 scaling: the recipes' rule, written once for the CPU scaler and the CUDA kernel ----
   Every test on a value is on its bits (-ffinite-math-only may fold isnan and isinf away), every
   division is an IEEE one (amp__fdiv / amp__ddiv: -Ofast may otherwise multiply by a reciprocal),
   and powers of two are built from their bits, so the rule gives the same scale in every build. */

/* The largest finite value of an fp8 format (the table's column), 0 for any other format. */
static inline AMP_HD float amp__fp8_fmax(amp_dtype t) {
#define AMP__FM_(A, E, N, T, S, MX, MN, CV, GV, CU, NC, COMPUTE, ...) case E: return COMPUTE ? 0.0f : amp__bits_f32(MX);
  switch (t) { AMP__DTYPES(AMP__FM_, ~) default: break; }
#undef AMP__FM_
  return 0.0f;
}
/* 2^k exactly: a normal for -126 <= k <= 127, a subnormal down to 2^-149, 0 below, inf above. */
static inline AMP_HD float amp__exp2i(int k) {
  if (k > 127) return amp__bits_f32(0x7f800000u);
  if (k >= -126) return amp__bits_f32((uint32_t)(k + 127) << 23);
  return k >= -149 ? amp__bits_f32(1u << (k + 149)) : 0.0f;
}
/* floor(log2 x) of a positive normal x: its exponent field, unbiased. */
static inline AMP_HD int amp__ilog2(float x) { return (int)((amp__f32_bits(x) >> 23) & 0xffu) - 127; }
/* 1 for a finite x > 0, on the bits (subnormals included; -0 and negatives not). */
static inline AMP_HD int amp__pos_finite(float x) { return amp__f32_bits(x) - 1u < 0x7f7fffffu; }
/* 2^-margin in f32: exact for an integer margin; powf otherwise (TransformerEngine's own
   std::pow(2.f, -margin); the GPU's powf may differ from the host's by an ulp there). */
static inline AMP_HD float amp__fp8_margin_factor(float margin) {
  int k = (int)margin;
  if ((float)k == margin) return amp__exp2i(-k);
  return powf(2.0f, -margin);
}

/* The scale each recipe gives (the manual's FP8 SCALING). fmax is the format's largest value. */
static inline AMP_HD AMP__EXACT_FP float amp_fp8_scale_from_amax(const amp_fp8_config *c, amp_dtype format, float amax,
                                                                 float prev_scale) {
  const float flt_max = amp__bits_f32(0x7f7fffffu), nan = amp__bits_f32(0x7fc00000u);
  float fmax = amp__fp8_fmax(format), s;
  amp_fp8_recipe r = c ? c->recipe : AMP_FP8_DELAYED;
  if (fmax == 0.0f) return nan;
  switch (r) {
  case AMP_FP8_DELAYED:   /* TE: (fmax * 2^-margin) / amax for a finite amax > 0, else the old scale */
    if (!amp__pos_finite(amax)) return prev_scale;
    s = amp__fdiv(amp__fmul(fmax, amp__fp8_margin_factor(c ? c->margin : 0.0f)), amax);
    return amp__finite(s) ? s : flt_max;
  case AMP_FP8_CURRENT: {  /* TE: amax below eps is eps; inf, 0 or NaN gives 1; fmax / amax; inf -> FLT_MAX */
    /* eps's bits (-0: 0) */
    uint32_t a = amp__f32_bits(amax), e = amp__is_zero(c->amax_epsilon) ? 0u : amp__f32_bits(c->amax_epsilon);
    if ((a & 0x7fffffffu) > 0x7f800000u) return 1.0f;                /* NaN (never below eps) */
    if ((a >> 31) || a < e) { a = e; amax = c->amax_epsilon; }        /* below eps (-inf too): on the bits, eps >= 0 */
    if ((a << 1) == 0u || a == 0x7f800000u) return 1.0f;             /* 0 or inf */
    s = amp__fdiv(fmax, amax);
    if (!amp__finite(s)) s = flt_max;
    return c->pow2 ? amp__bits_f32(amp__f32_bits(s) & 0xff800000u) : s;
  }
  case AMP_FP8_TORCHAO: {  /* torchao: (float)(fmax / max((double)amax, 1e-12)); NaN stays NaN, inf gives 0 */
    uint32_t a = amp__f32_bits(amax) & 0x7fffffffu;
    double d = (double)amax;
    if (a > 0x7f800000u) return nan;
    if (!(d >= 1e-12)) d = 1e-12;   /* no NaN here: a negative amax clamps too, as torch.clamp */
    s = (float)amp__ddiv((double)fmax, d);
    if (!c->pow2 || amp__is_zero(s)) return s;
    return amp__exp2i(amp__ilog2(s));   /* s is a normal here: 448 / 3.4e38 is far above FLT_MIN */
  }
  case AMP_FP8_MSAMP: {    /* MS-AMP: 2^(floor(log2(fmax / amax)) - margin) for a finite amax > 0 */
    int k = (int)c->margin;
    if (!amp__pos_finite(amax)) return prev_scale;
    s = amp__fdiv(fmax, amax);
    k = (amp__finite(s) ? amp__ilog2(s) : 127) - k;
    return k < -127 ? 0.0f : amp__exp2i(k);   /* as MS-AMP's 1 / 2^-k, whose 2^-k is inf from 128 on */
  }
  default: return nan;
  }
}

/* Joining amaxes: the larger magnitude, on the bits, so a NaN (above inf there) wins and stays
   (the casts' amax and amp_fp8_scaler_record). */
static inline AMP_HD float amp__amax_join(float acc, float a) {
  uint32_t x = amp__f32_bits(acc) & 0x7fffffffu, y = amp__f32_bits(a) & 0x7fffffffu;
  return amp__bits_f32(x > y ? x : y);
}
/* An amax on the data-parallel hook's wire: its bits (sign cleared) as an integer-valued double,
   so the ranks' MAX is the join above, NaN included; and back. Every wire value lies in
   0 .. AMP__FP8_WIRE_MAX (a larger one would come back as a negative amax). */
#define AMP__FP8_WIRE_MAX 2147483647.0   /* 0x7fffffff: the largest amax bits with the sign cleared */
static inline AMP_HD double amp__fp8_amax_to_wire(float a) { return (double)(amp__f32_bits(a) & 0x7fffffffu); }
static inline AMP_HD float amp__fp8_amax_from_wire(double w) { return amp__bits_f32((uint32_t)w); }
/* The cast telemetry of one element (amp_fp8_stats), on the bits: v is x widened to f32, y =
   fl32(v * scale). Bit 0, saturated: |y| beyond the overflow bound of amp_f32_to_e4m3 / _e5m2 (the
   lanes their saturate flag clips: E4M3 above 464, E5M2 from 61440), inf included, NaN not. Bit
   1, flushed: v nonzero and not NaN, and |y| at most half the smallest subnormal (E4M3 2^-10,
   E5M2 2^-17; that tie rounds to the even code, 0): exactly the y whose code is +-0. Bit 2: v is
   NaN. (A NaN y from a non-NaN v, inf * 0 or a NaN scale, is in none.) */
#define AMP__FP8_OVER(e5m2) ((e5m2) ? 0x476fffffu : 0x43e80000u)   /* |y| bits above it: saturated */
#define AMP__FP8_TINY(e5m2) ((e5m2) ? 0x37000000u : 0x3a800000u)   /* |y| bits at most it: code +-0 */
static inline AMP_HD unsigned amp__fp8_cast_class(float v, float y, int e5m2) {
  uint32_t a = amp__f32_bits(v) & 0x7fffffffu, b = amp__f32_bits(y) & 0x7fffffffu;
  return (unsigned)(b > AMP__FP8_OVER(e5m2) && b <= 0x7f800000u) |
         (unsigned)(a - 1u < 0x7f800000u && b <= AMP__FP8_TINY(e5m2)) << 1 | (unsigned)(a > 0x7f800000u) << 2;
}
/* TransformerEngine's fmaxf(acc, a) over a history, from acc = 0: a NaN or a negative slot is
   passed over. */
static inline AMP_HD float amp__amax_pass_nan(float acc, float a) {
  uint32_t x = amp__f32_bits(acc), y = amp__f32_bits(a);
  return y <= 0x7f800000u && y > x ? a : acc;
}
/* One tensor's update (amp_fp8_scaler_update), TransformerEngine's amax_and_scale_update: the
   amax the recipe reads (DELAYED "max": every slot; else slot 0, this step's), the history rolled
   (slot j takes slot j + 1, the last slot takes slot 0, slot 0 is cleared for the next step), then
   the scale and scale_inv = 1 / scale. Recipes other than DELAYED keep one slot. used (stats; NULL:
   none) gets the amax read and the scale replaced (amp_fp8_stats' amax_used, scale_used). */
static inline AMP_HD void amp__fp8_update_one(const amp_fp8_config *c, amp_dtype format, float *h, int len,
                                              float *scale, float *scale_inv, float *used) {
  float last = h[0], amax = 0.0f;
  int j;
  for (j = 0; j < len; j++) amax = amp__amax_pass_nan(amax, h[j]);
  if (c->recipe != AMP_FP8_DELAYED || c->most_recent) amax = last;
  for (j = 1; j + 1 < len; j++) h[j] = h[j + 1];
  if (len > 1) h[len - 1] = last;
  h[0] = 0.0f;
  if (used) { used[0] = amax; used[1] = *scale; }
  *scale = amp_fp8_scale_from_amax(c, format, amax, *scale);
  *scale_inv = amp__fdiv(1.0f, *scale);
}

AMP__EXACT_BEGIN
/* The element updates: (p, m, v, g, c) as the kind list's `elem` column says. */
/* SGD with momentum, dampening, nesterov, L2 weight decay (torch.optim.SGD); m is the momentum
   buffer (read only with momentum), v unused. */
static inline AMP_HD AMP__EXACT_FP void amp__sgd_elem(float *p, float *m, float *v, float g, const amp_step_coefs *c) {
  float w = *p;
  (void)v;
  if (c->wd != 0.0f) g = amp__fadd(g, amp__fmul(c->wd, w));
  if (c->momentum != 0.0f) {
    float b = c->first ? g : amp__fadd(amp__fmul(c->momentum, *m), amp__fmul(amp__fsub(1.0f, c->dampening), g));
    *m = b;
    g = c->nesterov ? amp__fadd(g, amp__fmul(c->momentum, b)) : b;
  }
  *p = amp__fsub(w, amp__fmul(c->lr, g));
}

/* Adam (wd = L2 on the grad) and AdamW (decay = 1 - lr*wd on the weight, wd 0 on the grad),
   torch.optim.Adam/AdamW's formulas with t counted from 1. Written as two halves around the
   square root, so a CPU loop can take the roots of a whole block at once (sqrtf, which may set
   errno, keeps compilers from vectorising a loop that calls it): amp__adam_elem is exactly the
   two halves in a row. The first leaves the decayed weight in *p and the new moments in *m, *v. */
static inline AMP_HD AMP__EXACT_FP void amp__adam_moments(float *p, float *m, float *v, float g,
                                                          const amp_step_coefs *c) {
  float w = amp__fmul(*p, c->decay);
  if (c->wd != 0.0f) g = amp__fadd(g, amp__fmul(c->wd, w));
  *m = amp__fadd(amp__fmul(c->beta1, *m), amp__fmul(amp__fsub(1.0f, c->beta1), g));
  *v = amp__fadd(amp__fmul(c->beta2, *v), amp__fmul(amp__fmul(amp__fsub(1.0f, c->beta2), g), g));
  *p = w;
}
/* The second half: sqrt_v = sqrtf(*v) as the first half left it. PyTorch's order: denom =
   (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps), then param.addcdiv_(exp_avg, denom,
   value=-step_size), ATen's self + value * t1 / t2: the product first, then the quotient. */
static inline AMP_HD AMP__EXACT_FP void amp__adam_apply(float *p, float m, float sqrt_v, const amp_step_coefs *c) {
  float denom = amp__fadd(amp__fdiv(sqrt_v, c->bc2_sqrt), c->eps);
  *p = amp__fsub(*p, amp__fdiv(amp__fmul(c->step_size, m), denom));
}
static inline AMP_HD AMP__EXACT_FP void amp__adam_elem(float *p, float *m, float *v, float g, const amp_step_coefs *c) {
  amp__adam_moments(p, m, v, g, c);
  amp__adam_apply(p, *m, amp__fsqrt(*v), c);
}

/* sign(u) for Lion, on the bits (so -ffast-math cannot fold it): +1 or -1, 0 for +-0, and u itself
   for NaN (as torch.sign). */
static inline AMP_HD float amp__sign(float u) {
  uint32_t a = amp__f32_bits(u) & 0x7fffffffu;
  if (a == 0u) return 0.0f;
  if (a > 0x7f800000u) return u;
  return (amp__f32_bits(u) >> 31) ? -1.0f : 1.0f;
}
/* Lion (Chen et al. 2023, Algorithm 2): the decoupled decay first (c->decay = 1 - lr*wd, as
   AdamW's), then w - lr * sign(beta1*m + (1-beta1)*g), then m = beta2*m + (1-beta2)*g; v unused. */
static inline AMP_HD AMP__EXACT_FP void amp__lion_elem(float *p, float *m, float *v, float g, const amp_step_coefs *c) {
  float w = amp__fmul(*p, c->decay);
  float u = amp__fadd(amp__fmul(c->beta1, *m), amp__fmul(amp__fsub(1.0f, c->beta1), g));
  (void)v;
  *p = amp__fsub(w, amp__fmul(c->lr, amp__sign(u)));
  *m = amp__fadd(amp__fmul(c->beta2, *m), amp__fmul(amp__fsub(1.0f, c->beta2), g));
}

/* AMP_CUSTOM's row: its update is custom_step, a host function the CPU step calls itself
   (amp__o_apply); this is never called, and the step kernel refuses the kind at create. */
static inline AMP_HD void amp__custom_elem(float *p, float *m, float *v, float g, const amp_step_coefs *c) {
  (void)p; (void)m; (void)v; (void)g; (void)c;
}

AMP__EXACT_END
/* The global L2 norm (amp_optimizer_grad_norm) from the sum of squares: its square root in f32.
   A NaN sum (a NaN grad, whose step is skipped) gives the one NaN 0x7fc00000: which NaN a sum of
   several carries (its sign, its payload) depends on the order of the adds and on which operand
   the compiler puts first (the portable scan, the vector scans, gcc -Ofast), so that the norm's
   bits are the same on every path and device. */
static inline AMP_HD float amp__norm_of(double sumsq) {
  float r = (float)sqrt(sumsq);
  return (amp__f32_bits(r) & 0x7fffffffu) > 0x7f800000u ? amp__bits_f32(0x7fc00000u) : r;
}
/* The clip coefficient of torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)), in
   PyTorch's operations: max_norm / (total_norm + 1e-6) is a Python float over a tensor,
   Tensor.__rtruediv__, which is (total_norm + 1e-6).reciprocal() * max_norm. */
static inline AMP_HD AMP__EXACT_FP float amp__clip_coef(float norm, float max_norm) {
  float c;
  if (max_norm <= 0.0f) return 1.0f;
  c = amp__fmul(amp__fdiv(1.0f, amp__fadd(norm, 1e-6f)), max_norm);
  return c < 1.0f ? c : 1.0f;
}

/* Gradient stats of one tensor (amp_optim_config.stats): the accumulator kept per tensor, on the
   host (CPU) and in device memory (CUDA, updated with integer atomics). amax_bits: the bits of
   the largest finite |y| (non-negative floats order as their bits). */
typedef struct amp__gstat {
  uint32_t amax_bits, pad_;
  uint64_t nonfinite, zero, subnormal;
} amp__gstat;
enum { AMP__G_NORMAL = 0, AMP__G_ZERO, AMP__G_SUBNORMAL, AMP__G_NONFINITE };
/* The class of one grad: g as decoded (exactly) from its stored type t, y = g * inv its unscaled
   value. On the bits, so -ffast-math and flush-to-zero cannot change it. */
static inline AMP_HD int amp__grad_class(float g, float y, amp_dtype t) {
  uint32_t a = amp__f32_bits(g) & 0x7fffffffu;
  if (!amp__finite(y)) return AMP__G_NONFINITE;
  if (a == 0u) return AMP__G_ZERO;
  return a < amp__dtype_min_normal_bits(t) ? AMP__G_SUBNORMAL : AMP__G_NORMAL;  /* f16 2^-14, f32/bf16 2^-126 */
}
/* One grad into a (thread's or tensor's) accumulator. */
static inline AMP_HD void amp__gstat_add(amp__gstat *a, float g, float y, amp_dtype t) {
  int c = amp__grad_class(g, y, t);
  uint32_t ay = amp__f32_bits(y) & 0x7fffffffu;
  if (c == AMP__G_NONFINITE) { a->nonfinite++; return; }
  if (ay > a->amax_bits) a->amax_bits = ay;
  if (c == AMP__G_ZERO) a->zero++;
  else if (c == AMP__G_SUBNORMAL) a->subnormal++;
}

/* One tensor of an optimizer: the record amp_optimizer_add_tensor fills and validates, once, on
   the host. The optimizer keeps them as one table, o->t[i] for the i-th add; the CUDA side reads
   the same records (amp__cu_optim_create builds its device copy, amp__cu_tdev, from them).
   A new per-tensor option: its field here, its line of checks in amp__o_add, and its reader. */
typedef struct amp__tensor {
  void *w;               /* the model copy (the trainer's weights), n elements of wtype */
  const void *g;         /* its grads, n elements of gtype */
  size_t n;              /* elements */
  amp_dtype wtype, gtype;
  amp_dtype round_to;    /* a float model copy's rounding (amp_tensor_desc.round_to); else AMP_F32 */
  int group;             /* its param group (amp_optimizer_add_group; 0 the default) */
  int stochastic;        /* 1: the bf16 model copy is written with stochastic rounding */
  int master_mode;       /* AMP_MASTER_F32, or SPLIT / NONE: then master is NULL (no fp32 array; the CPU
                            steps it with amp__o_step_lowmem, CUDA in the step kernel's branch) */
  float *master;         /* the fp32 master, n floats (CPU: one allocation with the moments after it;
                            CUDA: device memory) */
  float *m, *v;          /* SGD: m the momentum buffer (NULL without momentum); Adam/AdamW: exp_avg, exp_avg_sq
                            (CPU; on CUDA the moments live in the device slab); NULL when moments is not F32 */
  int moments;           /* the type the moments are kept in (amp_tensor_desc.moments; AMP_MOMENTS_F32 for an
                            8BIT tensor under AMP__Q8_MIN elements); not F32: mq / vq hold them (CPU; CUDA keeps
                            every type in its slab, amp__cu_optim_state_io moves them as kept) */
  unsigned char *mq, *vq;  /* moments not in f32, as m and v above, each amp__moment_bytes(moments, n) bytes
                              laid out as the checkpoint holds them (BF16: n words; 8BIT: the blocks' f32
                              absmaxes, then n codes; FP8: the f32 scale_inv, then n codes); else NULL */
  uint16_t *rem;         /* AMP_MASTER_SPLIT: the n 16-bit remainders beside the bf16 model copy on the CPU
                            (amp__split_encode; CUDA: amp__cu_optim_rem); else NULL */
  amp__gstat gstat;      /* the gradient stats of its last unscale (amp_optim_config.stats) */
  char *name;            /* amp_tensor_desc.name, copied (NULL: unnamed) */
} amp__tensor;

/* tanh of an f32, amp.h's own, so that the GELU epilogue has the same bits on every CPU, under every
   flag set, in the vector loops (amp__gelu_line) and in the CUDA kernels (a C library's tanhf
   differs between libraries in the last bit). NaN: itself, quieted; |x| >= 10: +-1; |x| < 2^-12:
   x (tanh x rounds to x there); else in double, each operation rounded on its own (no FMA):
   y = 2|x|, k = (int)(y * (1/ln 2) + 0.5), r = (y - k ln2_hi) - k ln2_lo (Cody and Waite's split
   of ln 2: k ln2_hi exact), p = e^r - 1 by Horner's rule on its Taylor series to r^12 / 12!
   (p = r (1 + r (1/2! + r (1/3! + ... + r / 12!)))), e^y - 1 = em = p for k = 0, else
   2^k (1 + p) - 1; tanh |x| = em / (em + 2), rounded once to f32 and given x's sign. The double
   result is within about 1e-15 of tanh |x| (relative), so the f32 is tanh(x) correctly rounded
   but for inputs within that of a midpoint between two floats (tests/test_gemm.c counts them
   against the C library's double tanh rounded: with glibc's, none among all the positive f32
   inputs, and both functions are odd). */
#define AMP__GELU_C1(k) (k)   /* a constant as itself (the scalar functions' C) */
/* p = e^r - 1 by Horner's rule from 1/12! down to 1/1! (each the double nearest), spelled out for
   every lane width: MUL, ADD the lanes' operations, C(k) a constant in lanes. */
#define AMP__TANH_POLY(p, r, MUL, ADD, C) do { \
    p = ADD(MUL(C(2.08767569878681e-9), r), C(2.505210838544172e-8)); \
    p = ADD(MUL(p, r), C(2.755731922398589e-7)); p = ADD(MUL(p, r), C(2.7557319223985893e-6)); \
    p = ADD(MUL(p, r), C(2.48015873015873e-5)); p = ADD(MUL(p, r), C(1.984126984126984e-4)); \
    p = ADD(MUL(p, r), C(0.001388888888888889)); p = ADD(MUL(p, r), C(0.008333333333333333)); \
    p = ADD(MUL(p, r), C(0.041666666666666664)); p = ADD(MUL(p, r), C(0.16666666666666666)); \
    p = ADD(MUL(p, r), C(0.5)); p = ADD(MUL(p, r), C(1.0)); p = MUL(p, r); \
  } while (0)
#define AMP__TANH_INV_LN2 1.4426950408889634
#define AMP__TANH_LN2_HI 0.6931471803691238   /* ln 2 to 32 significant bits: k ln2_hi is exact */
#define AMP__TANH_LN2_LO 1.9082149292705877e-10   /* ln 2 - ln2_hi */
#define AMP__TANH_TINY 0x39800000u   /* |x| below 2^-12 (as bits): tanh x is x */
#define AMP__TANH_ONE 0x41200000u    /* |x| from 10 (as bits): +-1 */
/* The double steps, written once for every lane width: k's argument y / ln 2 + 1/2 (k its
   truncation, kd k as a double), r = (y - kd ln2_hi) - kd ln2_lo, em = 2^k (1 + p) - 1 (k2 = 2^k;
   for k = 0, em = p), and tanh = em / (em + 2). */
#define AMP__TANH_KARG(y, MUL, ADD, C) ADD(MUL(y, C(AMP__TANH_INV_LN2)), C(0.5))
#define AMP__TANH_R(y, kd, MUL, SUB, C) SUB(SUB(y, MUL(kd, C(AMP__TANH_LN2_HI))), MUL(kd, C(AMP__TANH_LN2_LO)))
#define AMP__TANH_EM(p, k2, MUL, ADD, SUB, C) SUB(MUL(k2, ADD(C(1.0), p)), C(1.0))
#define AMP__TANH_Q(em, ADD, DIV, C) DIV(em, ADD(em, C(2.0)))
static inline AMP_HD AMP__EXACT_FP float amp__tanh(float x) {
  const uint32_t u = amp__f32_bits(x), a = u & 0x7fffffffu;
  double y, r, p, em, k2;
  int k;
  uint64_t kb;
  if (a > 0x7f800000u) return amp__bits_f32(u | 0x00400000u);                 /* NaN */
  if (a >= AMP__TANH_ONE) return amp__bits_f32((u & 0x80000000u) | 0x3f800000u);
  if (a < AMP__TANH_TINY) return amp__bits_f32(u);   /* from the bits: -0 stays -0 under -Ofast */
  y = amp__dadd((double)amp__bits_f32(a), (double)amp__bits_f32(a));
  k = (int)AMP__TANH_KARG(y, amp__dmul, amp__dadd, AMP__GELU_C1);
  r = AMP__TANH_R(y, (double)k, amp__dmul, amp__dsub, AMP__GELU_C1);
  AMP__TANH_POLY(p, r, amp__dmul, amp__dadd, AMP__GELU_C1);
  kb = (uint64_t)(1023 + k) << 52;
  memcpy(&k2, &kb, sizeof k2);   /* 2^k */
  em = k ? AMP__TANH_EM(p, k2, amp__dmul, amp__dadd, amp__dsub, AMP__GELU_C1) : p;
#if defined(__CUDA_ARCH__)
  return amp__bits_f32(amp__f32_bits(__double2float_rn(AMP__TANH_Q(em, amp__dadd, amp__ddiv, AMP__GELU_C1))) | (u & 0x80000000u));
#else
  return amp__bits_f32(amp__f32_bits((float)AMP__TANH_Q(em, amp__dadd, amp__ddiv, AMP__GELU_C1)) | (u & 0x80000000u));
#endif
}
/* The element math of the product's epilogue, shared by the CPU reference and every CUDA path. */
#define AMP__GELU_K0 0.7978845608028654f   /* sqrt(2/pi) */
#define AMP__GELU_K1 0.044715f
/* The formula, written once for the scalar function and the vector lines (amp__gelu_line): MUL, ADD,
   TANH the lanes' operations, C(k) a constant in lanes. */
#define AMP__GELU_OF(x, MUL, ADD, TANH, C) \
  MUL(MUL(C(0.5f), x), ADD(C(1.0f), TANH(MUL(C(AMP__GELU_K0), ADD(x, MUL(MUL(MUL(C(AMP__GELU_K1), x), x), x))))))
static inline AMP_HD AMP__EXACT_FP float amp__gelu_tanh(float x) {
  return AMP__GELU_OF(x, amp__fmul, amp__fadd, amp__tanh, AMP__GELU_C1);
}
static inline AMP_HD float amp__act(float x, int act) {
  if (act == AMP_ACT_RELU) return x > 0.0f ? x : 0.0f;
  if (act == AMP_ACT_GELU) return amp__gelu_tanh(x);
  return x;
}
/* The spike window (amp_optim_config.spike_zscore): the unscaled global norms of the last
   AMP__SPIKE_WINDOW clean steps (steps that updated: neither an overflow nor a spike), a ring.
   On the CPU a field of the optimizer; on CUDA in the optimizer's device block, pushed by the
   step kernel and read by the unscale kernel, so no host ever waits for it. Saved in checkpoints
   (format version 2). */
#define AMP__SPIKE_WINDOW 100
#define AMP__SPIKE_MIN 20        /* z-score skips start once the window holds this many norms */
typedef struct amp__spike_window {
  float norm[AMP__SPIKE_WINDOW]; /* slots 0 .. count-1 hold norms (0 beyond) */
  int32_t count;                 /* norms held, 0 .. AMP__SPIKE_WINDOW */
  int32_t next;                  /* the slot the next norm goes to (== count until the ring is full) */
} amp__spike_window;

/* A product of doubles rounded on its own, never fused into the add that follows (the GPU would
   contract it by default, the CPU under -ffp-contract=fast): the decision below must be the same
   bits on both sides. */
static inline AMP_HD double amp__dmul_rounded(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  double p = a * b;
  AMP__ROUNDED(p);
  return p;
#endif
}
AMP__EXACT_BEGIN   /* (the 8-bit rule below and the spike decision after it) */
/* AMP_MOMENTS_8BIT's rule, the one the CPU loops and the step kernel share: bitsandbytes' dynamic
   map (functional.create_dynamic_map with 7 exponent bits, 8 bits): for i = 0..6, 10^(i-6) times
   the midpoints of linspace(0.1, 1, 2^i + 1) with both signs (signed, the first moments) or of
   linspace(0.1, 1, 2^(i+1) + 1) (unsigned, Adam's second moment), plus 0 and 1: 256 values, each
   computed in double and rounded to f32 once, into code[] ascending; mid[k] the exact midpoint of
   code[k] and code[k + 1] (in double: exact for these values). Each operation rounded on its own
   (amp__ddiv, amp__dmul_rounded: no fused or reciprocal forms under -Ofast), on every host. */
static inline AMP__EXACT_FP void amp__q8_map(int is_signed, float *code, double *mid) {
  static const double pow10[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  int i, k, c = 0;
  for (i = 0; i < 7; i++) {
    int pts = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
    for (k = 0; k + 1 < pts; k++) {
      double lo = 0.1 + amp__dmul_rounded(0.9, amp__ddiv((double)k, (double)(pts - 1)));
      double hi = 0.1 + amp__dmul_rounded(0.9, amp__ddiv((double)(k + 1), (double)(pts - 1)));
      double v = pow10[i] * ((lo + hi) / 2.0);
      code[c++] = (float)v;
      if (is_signed) code[c++] = (float)-v;
    }
  }
  code[c++] = 0.0f; code[c++] = 1.0f;   /* c == 256 */
  for (i = 1; i < 256; i++) {   /* insertion sort, ascending (the values are distinct) */
    float x = code[i];
    for (k = i; k > 0 && code[k - 1] > x; k--) code[k] = code[k - 1];
    code[k] = x;
  }
  for (k = 0; k < 255; k++) mid[k] = ((double)code[k] + (double)code[k + 1]) * 0.5;
}
/* The code nearest y (ties: the lower code): how many of the 255 midpoints lie below y, by
   bisection (NaN: 0, no comparison holds; tested on the bits, as -Ofast builds may assume no NaN
   in a comparison: aarch64 clang -Ofast gave 255). */
static inline AMP_HD uint8_t amp__q8_bisect(const double *mid, float y) {
  int lo = 0, hi = 255;
  if ((amp__f32_bits(y) & 0x7fffffffu) > 0x7f800000u) return 0;
  while (lo < hi) {
    int m = (lo + hi) >> 1;
    if ((double)y > mid[m]) lo = m + 1; else hi = m;
  }
  return (uint8_t)lo;
}
/* The same count from one table read (the vector loops' amp__q8_code16 and the step kernel's
   amp__q8_vcode): y by sign, exponent and the top 7 mantissa bits into buckets, each holding at
   most one midpoint of either map; exponents 104 .. 126 one row each, every smaller one (|y| <
   2^-23, 0 and subnormals: 0's code, as the least nonzero magnitude of either map is above 2^-22)
   the row of 103, and 127 (+-1) one more. vt[k], per bucket: the code of its least value << 16 |
   the key of the one midpoint inside, less one (0xffff: none); a key is a float's low 16 bits,
   counted up the bucket (flipped for negative y, whose magnitude falls as y grows). */
#define AMP__Q8_VEMIN 103
#define AMP__Q8_VMB 7
#define AMP__Q8_VROWS 25
#define AMP__Q8_VLUT (2 * AMP__Q8_VROWS << AMP__Q8_VMB)
static inline void amp__q8_vtable(const double *mid, uint32_t *vt) {
  const uint8_t c0 = amp__q8_bisect(mid, 0.0f), cp1 = amp__q8_bisect(mid, 1.0f), cm1 = amp__q8_bisect(mid, -1.0f);
  int k;
  for (k = 0; k < AMP__Q8_VLUT; k++) {
    uint32_t sg = (uint32_t)(k / (AMP__Q8_VROWS << AMP__Q8_VMB)), e = (uint32_t)((k >> AMP__Q8_VMB) % AMP__Q8_VROWS) + AMP__Q8_VEMIN;
    uint32_t f = (uint32_t)k & ((1u << AMP__Q8_VMB) - 1u), lb = (1u << (23 - AMP__Q8_VMB)) - 1u;
    uint32_t base = sg << 31 | e << 23 | f << (23 - AMP__Q8_VMB), key = lb + 1u;   /* a key no y reaches */
    int lo, hi;
    if (e == AMP__Q8_VEMIN) { vt[k] = (uint32_t)c0 << 16 | (key - 1u); continue; }   /* |y| < 2^-23 */
    if (e == 127u) { vt[k] = (uint32_t)(f ? 0 : sg ? cm1 : cp1) << 16 | (key - 1u); continue; }   /* +-1 */
    lo = amp__q8_bisect(mid, amp__bits_f32(base | (sg ? lb : 0u)));
    hi = amp__q8_bisect(mid, amp__bits_f32(base | (sg ? 0u : lb)));
    if (hi > lo) {   /* the least float above mid[lo] (inside the bucket), as a key: above the
                        bucket's least value, so at least 1 */
      float m = (float)mid[lo];
      uint32_t u = amp__f32_bits(m);
      if ((double)m <= mid[lo]) u = u >> 31 ? u - 1u : u + 1u;
      key = (u & lb) ^ (sg ? lb : 0u);
    }
    vt[k] = (uint32_t)lo << 16 | (key - 1u);
  }
}
/* amp__q8_bisect's count for y in [-1, 1] or NaN (amp__q8_unit's values) from vt: the bucket's
   least value's code, plus one where y's key is above the bucket's midpoint's. NaN: 0, as there. */
static inline AMP_HD uint8_t amp__q8_vcode(const uint32_t *vt, float y) {
  const uint32_t u = amp__f32_bits(y), a = u & 0x7fffffffu, neg = u >> 31, row0 = (uint32_t)AMP__Q8_VEMIN << AMP__Q8_VMB;
  uint32_t idx = a >> 16, t;
  if (a > 0x3f800000u) return 0;   /* NaN */
  idx = (idx > row0 ? idx - row0 : 0u) + (neg ? (uint32_t)AMP__Q8_VROWS << AMP__Q8_VMB : 0u);
  t = vt[idx];
  return (uint8_t)((t >> 16) + (((u ^ (neg ? 0xffffu : 0u)) & 0xffffu) > (t & 0xffffu)));
}
/* A block's absmax from the largest |x| of its new values (their bits' unsigned maximum: a NaN
   above inf): at least 1e-38, so that a block of zeros divides by it, and at most FLT_MAX: a
   moment that overflowed to inf (a finite grad past 1.8e19 squared) gives +-inf / FLT_MAX, which
   clamps to +-1 (its code: +1's, or the signed map's least, -0.993), and the block's other
   values are kept as themselves over FLT_MAX (most of them 0); an absmax of inf would make them
   inf / inf and 0 * inf, NaN. Compared on the bits (amax is a magnitude or
   NaN), so that a flush-to-zero FPU (-Ofast, DAZ), which reads the subnormal 1e-38 as 0, keeps
   the same rule. */
#define AMP__Q8_FLOOR 1e-38f
static inline AMP_HD float amp__q8_absmax(float amax) {
  const uint32_t u = amp__f32_bits(amax);
  return u < amp__f32_bits(AMP__Q8_FLOOR) ? AMP__Q8_FLOOR : u == 0x7f800000u ? amp__bits_f32(0x7f7fffffu) : amax;
}
/* 1 for the bits of an absmax an update leaves from moments that are not NaN (a checkpoint's are
   checked so): the floor .. FLT_MAX, amp__q8_absmax's range. (A NaN moment, which only a master
   that is inf or NaN makes, leaves NaN: amp__ckpt_moments_check.) */
static inline AMP_HD int amp__q8_absmax_kept(uint32_t b) {
  return b >= amp__f32_bits(AMP__Q8_FLOOR) && b <= 0x7f7fffffu;
}
/* What an element's code is taken of: x / absmax (an IEEE f32 division) clamped to [-1, 1] (a NaN
   stays NaN). Its code: amp__q8_bisect (the CPU's faster search gives the same count). Read back
   as code[c] * absmax (one f32 multiply). */
static inline AMP_HD float amp__q8_unit(float x, float am) {
  float y;
  /* a zero over an absmax below the least normal float (a block of zeros and subnormals): the zero
     itself, what the division gives, also where a flush-to-zero FPU (-Ofast, DAZ) would divide
     0 by a flushed 0 */
  if ((amp__f32_bits(x) << 1) == 0u && amp__f32_bits(am) < 0x00800000u) return x;
  y = amp__fdiv(x, am);
  return y > 1.0f ? 1.0f : y < -1.0f ? -1.0f : y;
}
/* AMP_MOMENTS_FP8 (TransformerEngine's FusedAdam with uint8 moments), the CPU's and the step
   kernel's rule: one scale per moment array, from the largest magnitude of the values it encodes
   (amax) by TE's current scaling for E4M3 (amp_fp8_scale_from_amax, AMP_FP8_CURRENT, epsilon 0):
   448 / amax; 1 where amax is 0 (every moment 0; TE's own start) or not finite; FLT_MAX where
   448 / amax overflows. A value x is kept as the code amp_f32_to_e4m3(x * scale, saturating:
   nearest, ties to even) and read back as amp_e4m3_to_f32(code) * scale_inv, scale_inv =
   1 / scale (f32 operations each), kept in front of the codes. */
static inline AMP_HD float amp__f8m_scale(float amax) {
  amp_fp8_config c;
  memset(&c, 0, sizeof c);
  c.recipe = AMP_FP8_CURRENT;
  return amp_fp8_scale_from_amax(&c, AMP_E4M3, amax, 1.0f);
}
/* The spike decision, one function for the CPU and the CUDA kernels: a step with clean grads
   (found_inf 0) is a spike when
     spike_norm > 0 and norm > spike_norm, or
     spike_zscore > 0, the window holds count >= AMP__SPIKE_MIN norms, and
       norm - mean > spike_zscore * sd,
   mean and sd the population mean and standard deviation (divided by count) of the held norms,
   computed in double in slot order (two passes), every product rounded on its own. An overflow is
   never a spike (it skips as an overflow). */
static inline AMP_HD AMP__EXACT_FP int amp__spike_skip(float norm, float spike_norm, float spike_zscore,
                                                      const amp__spike_window *w, int found_inf) {
  double mean = 0.0, ss = 0.0, sd;
  int32_t i, n = w->count;
  if (found_inf) return 0;
  if (spike_norm > 0.0f && norm > spike_norm) return 1;
  if (!(spike_zscore > 0.0f) || n < AMP__SPIKE_MIN) return 0;
  if (!amp__finite(norm)) return 1;   /* finite grads whose norm overflowed f32: above any mean */
  for (i = 0; i < n; i++) mean += (double)w->norm[i];
  mean /= (double)n;
  for (i = 0; i < n; i++) { double d = (double)w->norm[i] - mean; ss += amp__dmul_rounded(d, d); }
  sd = sqrt(ss / (double)n);
  return (double)norm - mean > amp__dmul_rounded((double)spike_zscore, sd);
}
/* A clean step's norm into the window (the oldest one out once it is full); a norm that is not
   finite (the sum of squares overflowed f32) is not kept. */
static inline AMP_HD void amp__spike_window_push(amp__spike_window *w, float norm) {
  if (!amp__finite(norm)) return;
  w->norm[w->next] = norm;
  w->next = w->next + 1 == AMP__SPIKE_WINDOW ? 0 : w->next + 1;
  if (w->count < AMP__SPIKE_WINDOW) w->count++;
}
AMP__EXACT_END
/* alpha * acc + beta * c, each product rounded before the add; beta 0 does not read c (BLAS: C
   may hold NaN or garbage). */
static inline AMP_HD float amp__gemm_blend(float acc, float alpha, float beta, float c) {
  float t = alpha * acc;
  AMP__ROUNDED(t);   /* also with beta 0: the bias added after (amp__gemm_epi) must not fuse with it */
  if (beta != 0.0f) {
    float bc = beta * c;
    AMP__ROUNDED(bc);
    t = t + bc;
  }
  return t;
}
/* C = beta * C, for k 0 or alpha 0 (A and B are not read; 0 * inf in them never appears); the
   product rounded before a bias is added. */
static inline AMP_HD float amp__gemm_scale(float beta, float c) {
  float t = beta != 0.0f ? beta * c : 0.0f;
  AMP__ROUNDED(t);
  return t;
}
/* The bias and the activation, on the f32 value before the one rounding to C's type. */
static inline AMP_HD float amp__gemm_epi(float t, int has_bias, float bias, int act) {
  if (has_bias) t = t + bias;
  return amp__act(t, act);
}

/* ---- the fp8 matrix product (the manual's "fp8 inputs and outputs"): the element math the CPU's
   loop and the CUDA kernels share ---- */

/* 1 for an fp8 format (the AMP__DTYPES fp8 column is 0 or 1), 0 for any other value. */
#define AMP__DT_IS8_(A, E, N, T, S, MX, MN, CV, GV, CR, NT, CMP, F8, TOP) case E: return F8 >= 0;
static inline AMP_HD int amp__dtype_is_fp8(amp_dtype t) {
  switch (t) { AMP__DTYPES(AMP__DT_IS8_, ~) default: break; }
  return 0;
}
#undef AMP__DT_IS8_
/* Whether amp_gemm_ex runs the fp8 product: an fp8 type, or one of the fp8 options. */
static inline AMP_HD int amp__gemm_fp8_mode(amp_dtype a, amp_dtype b, amp_dtype c, const amp_gemm_opts *o) {
  return amp__dtype_is_fp8(a) || amp__dtype_is_fp8(b) || amp__dtype_is_fp8(c) || o->a_scale_inv || o->b_scale_inv ||
         o->a_scales || o->b_scales || o->c_scale || o->c_amax;
}
/* The per-tensor factor s = fl32(fl32(alpha * *a_si) * *b_si) that takes alpha's place (a NULL scale
   is 1; on CUDA a and b are device pointers, read by the kernel). */
static inline AMP_HD AMP__EXACT_FP float amp__gemm_fp8_factor(float alpha, const float *a_si, const float *b_si) {
  float s = alpha;
  if (a_si) s = amp__fmul(s, *a_si);
  if (b_si) s = amp__fmul(s, *b_si);
  return s;
}
/* The width along k of a block-scaling kind's blocks. */
static inline AMP_HD int amp__gemm_block_width(amp_block_scaling kind) {
  return kind == AMP_BLOCK_MX_RCEIL || kind == AMP_BLOCK_MX_FLOOR ? 32 : 128;
}
/* The scale of the block holding element (r, c) of a row-major rows x cols matrix (cols: the
   stored matrix's width), as amp_quantize_blocks stored it. E8M0 e is 2^(e - 127), 0xff NaN. */
static inline AMP_HD float amp__gemm_block_scale(const void *sc, amp_block_scaling kind, int r, int c, int cols) {
  if (kind == AMP_BLOCK_MX_RCEIL || kind == AMP_BLOCK_MX_FLOOR) {
    uint32_t e = ((const uint8_t *)sc)[(size_t)r * (size_t)((cols + 31) / 32) + (size_t)(c / 32)];
    return amp__bits_f32(e == 255u ? 0x7fc00000u : e == 0u ? 0x00400000u : e << 23);
  }
  if (kind == AMP_BLOCK_128x128) r /= 128;
  return ((const float *)sc)[(size_t)r * (size_t)((cols + 127) / 128) + (size_t)(c / 128)];
}
/* The scale of one operand's block that starts at p0 along k, for its row (A) or column (B) x of
   op(): kcol, k runs along the stored rows (x is a stored row, the stored width k); else x is a
   stored column (the stored width ext, op()'s extent along x: m for A, n for B). */
static inline AMP_HD float amp__gemm_block_scale_at(const void *sc, amp_block_scaling kind, int kcol, int x, int p0,
                                                    int k, int ext) {
  return kcol ? amp__gemm_block_scale(sc, kind, x, p0, k) : amp__gemm_block_scale(sc, kind, p0, x, ext);
}
/* Element e of one operand's 1 x 128 or 128 x 128 scales (as amp_quantize_blocks stored them, read
   with amp__gemm_block_scale_at) in the layout cuBLASLt's block-scaled fp8 kernels read, for op(X)
   as cuBLASLt sees it: r rows (m for A, n for B), k contiguous, nkb = ceil(k / 128) blocks along k.
   1 x 128 (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F): one float per row and block, the rows
   contiguous: element i + kb r. 128 x 128 (_BLK128x128_32F): one float per 128 rows and block, the
   blocks along k contiguous, each block row padded to ld = 4 ceil(nkb / 4) floats: element
   ib ld + kb, the padding 0. amp__gemm_lt_scales128_count(kind, r, k) elements (amp_kernels.cu's
   amp__k_gemm_scales128 writes them, one thread each). */
static inline AMP_HD size_t amp__gemm_lt_scales128_count(amp_block_scaling kind, int r, int k) {
  const size_t nkb = (size_t)(k + 127) / 128;
  return kind == AMP_BLOCK_128x128 ? (size_t)((r + 127) / 128) * ((nkb + 3) / 4 * 4) : (size_t)r * nkb;
}
static inline AMP_HD float amp__gemm_lt_scale128(const void *sc, amp_block_scaling kind, int kcol, int r, int k,
                                                size_t e) {
  const int nkb = (k + 127) / 128, ld = (nkb + 3) / 4 * 4, blk = kind == AMP_BLOCK_128x128;
  const int i = blk ? (int)(e / (size_t)ld) * 128 : (int)(e % (size_t)r);
  const int kb = blk ? (int)(e % (size_t)ld) : (int)(e / (size_t)r);
  return kb < nkb ? amp__gemm_block_scale_at(sc, kind, kcol, i, kb * 128, k, r) : 0.0f;
}
/* One result: sacc = fl32(s acc), c C's old value (read only for beta != 0). Returns
   t = act(sacc + fl32(beta c) + bias), what c_amax sees; *out gets what C stores, before the
   rounding to C's type: fl32(t * cs) for an fp8 C (c8; the saturating cast is amp__store's), else t.
   Every operation is rounded on its own (amp__fmul, amp__fadd), so a kernel gives the CPU's bits. */
static inline AMP_HD AMP__EXACT_FP float amp__gemm_fp8_epi(float sacc, float beta, float c, int has_bias, float bias,
                                                          int act, int c8, float cs, float *out) {
  float t = beta != 0.0f ? amp__fadd(sacc, amp__fmul(beta, c)) : sacc;
  t = amp__act(has_bias ? amp__fadd(t, bias) : t, act);
  *out = c8 ? amp__fmul(t, cs) : t;
  return t;
}

/* ---- fp8 block scaling: the element math of amp_quantize_blocks (the manual's BLOCK SCALING),
   run by the CPU's loops and by the CUDA kernel ---- */

/* The largest finite value of format t as f32 bits (the AMP__DTYPES max column); 0 unknown. */
static inline AMP_HD uint32_t amp__dtype_max_bits(amp_dtype t) {
#define AMP__MXB_(A, E, N, T, S, MX, ...) case E: return MX;
  switch (t) { AMP__DTYPES(AMP__MXB_, ~) default: break; }
#undef AMP__MXB_
  return 0u;
}
/* x * 2^k on the bits: exact wherever the result is a normal f32; a result below 2^-126, which
   every fp8 format rounds to +-0, comes out as +-0 (x's sign); 0, inf and NaN as they are. A
   subnormal x is m 2^-149 with m exactly a float (an integer below 2^23), so no float operation
   ever sees a subnormal: flush-to-zero and denormals-are-zero (-Ofast) change nothing. */
static inline AMP_HD float amp__pow2_mul(float x, int32_t k) {
  uint32_t u = amp__f32_bits(x), a = u & 0x7fffffffu, s = u ^ a;
  int32_t e;
  if (a == 0u || a >= 0x7f800000u) return x;
  if (a < 0x00800000u) { a = amp__f32_bits((float)(int32_t)a); k -= 149; }
  e = (int32_t)(a >> 23) + k;
  if (e <= 0) return amp__bits_f32(s);
  if (e >= 255) return amp__bits_f32(s | 0x7f800000u);
  return amp__bits_f32(s | (a + ((uint32_t)k << 23)));
}
/* How many blocks of size b cover n >= 0 elements (no overflow near INT_MAX). */
static inline AMP_HD int amp__nblocks(int n, int b) { return n / b + (n % b != 0); }
/* What the elements of one block are multiplied by before the cast, and the scale stored. */
enum { AMP__BS_MUL = 0, AMP__BS_POW2 = 1, AMP__BS_NAN = 2 };
typedef struct amp__bscale {
  int32_t how;      /* AMP__BS_MUL: y = fl32(x * mul); _POW2: y = x * 2^k (amp__pow2_mul); _NAN: every code NaN */
  int32_t k;
  float mul;
  uint32_t stored;  /* the scale as stored: MX the E8M0 byte, else the float's bits */
} amp__bscale;
AMP__EXACT_BEGIN
/* MX_RCEIL's byte: amp_f32_to_e8m0(v, 1) of v = fl32(amax * fl32(1/fmax)), amax > 0 finite. The
   product is exact in double; v is rounded there as IEEE rounds it (gradual underflow), because
   a flushing FPU would turn a v in (2^-127, 2^-126) (byte 1) into 0 (byte 0). t = p * 2^127. */
static inline AMP_HD AMP__EXACT_FP uint32_t amp__e8m0_rceil(uint32_t amax, float fmax) {
  double p, t;
  if (amax < 0x00800000u) return 0u;   /* a subnormal amax: v < 2^-134 */
  p = (double)amp__bits_f32(amax) * (double)amp__fdiv(1.0f, fmax);
  t = p * (double)amp__bits_f32(0x7f000000u);
  if (t <= (double)amp__bits_f32(0x3f800001u)) return 0u;   /* v <= 2^-127: a tie at 2^-127 (1 + 2^-23) goes to even */
  if (t < 2.0) return 1u;                                    /* v in (2^-127, 2^-126] */
  return amp_f32_to_e8m0((float)p, 1);
}
/* The scale of a block of kind `kind` whose largest |x| has the bits amax (an integer max of the
   bits: NaN above inf above every finite value), for format fp8. */
static inline AMP_HD AMP__EXACT_FP amp__bscale amp__block_scale(int kind, amp_dtype fp8, uint32_t amax) {
  const uint32_t mb = amp__dtype_max_bits(fp8);
  const float fmax = amp__bits_f32(mb);
  const int mx = kind == AMP_BLOCK_MX_RCEIL || kind == AMP_BLOCK_MX_FLOOR;
  amp__bscale b;
  b.how = AMP__BS_POW2; b.k = 0; b.mul = 1.0f; b.stored = 127u;
  if (amax >= 0x7f800000u) {   /* an inf or a NaN in the block */
    b.how = AMP__BS_NAN; b.stored = mx ? 0xffu : 0x7fc00000u;
  } else if (!mx) {            /* DeepSeek-V3: a = max(amax, fl32(1e-4)) */
    float a = amp__bits_f32(amax > 0x38d1b717u ? amax : 0x38d1b717u);
    b.how = AMP__BS_MUL; b.mul = amp__fdiv(fmax, a); b.stored = amp__f32_bits(amp__fdiv(a, fmax));
  } else {                     /* MX; a block of zeros keeps scale 1 */
    if (amax != 0u && kind == AMP_BLOCK_MX_RCEIL) b.stored = amp__e8m0_rceil(amax, fmax);
    if (amax != 0u && kind == AMP_BLOCK_MX_FLOOR) {   /* floor(log2 amax) - emax + 127: the exponent field less emax */
      int32_t f = (int32_t)(amax >> 23) - (int32_t)((mb >> 23) - 127u);
      b.stored = f > 0 ? (uint32_t)f : 0u;
    }
    b.k = 127 - (int32_t)b.stored;
  }
  return b;
}
/* One element of a block: x scaled as b says, cast to fp8 saturating (e5m2: the format table's fp8
   column, 0 E4M3, 1 E5M2). */
static inline AMP_HD AMP__EXACT_FP amp_fp8 amp__block_q(float x, const amp__bscale *b, int e5m2) {
  float y;
  if (b->how == AMP__BS_NAN) return (amp_fp8)0x7fu;
  y = b->how == AMP__BS_POW2 ? amp__pow2_mul(x, b->k) : amp__fmul(x, b->mul);
  return e5m2 ? amp_f32_to_e5m2(y, 1) : amp_f32_to_e4m3(y, 1);
}
AMP__EXACT_END

#ifdef __cplusplus
}
#endif

#endif /* AMP_H */

/* ==========================================================================================
   IMPLEMENTATION
   ========================================================================================== */

#ifdef AMP_IMPLEMENTATION
#ifndef AMP__IMPLEMENTATION_DONE
#define AMP__IMPLEMENTATION_DONE

/* -ffast-math / -Ofast (llm.c builds everything with it) let the compiler assume no float is inf
   or NaN and reassociate: x - x == 0, x == x and !(x >= floor) fold to constants, and -Ofast's
   startup code sets denormals-are-zero. So every inf/NaN and "is it the default 0" test here is an
   integer test on the bits (amp__finite, amp__is_zero), and the bit tricks in the loops are single
   rounding operations with nothing to reassociate (the tests also run built with -Ofast). */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <float.h>
#include <errno.h>
#include <limits.h>
#ifdef _OPENMP   /* built with -fopenmp: the CPU product and the optimizer step share their work among the threads */
#include <omp.h>
#endif

#if defined(AMP_MALLOC) && defined(AMP_FREE)
#elif !defined(AMP_MALLOC) && !defined(AMP_FREE)
#define AMP_MALLOC(sz) malloc(sz)
#define AMP_FREE(p) free(p)
#else
#error "amp.h: define both AMP_MALLOC and AMP_FREE, or neither"
#endif

/* Checkpoint files: POSIX I/O where the system has it (exclusive creation of the temporary, fsync,
   a check that what is read is a regular file); elsewhere (e.g. _WIN32) plain C stdio, which has
   none of these guarantees (see amp_checkpoint_save in the manual). AMP__STDIO_FILES forces the
   stdio path (the test suite compiles it so). */
#if !defined(AMP__STDIO_FILES) && (defined(__unix__) || defined(__unix) || defined(__APPLE__))
#define AMP__POSIX_FILES 1
#include <sys/types.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#else
#define AMP__POSIX_FILES 0
#endif

#if defined(AMP_THREAD_LOCAL)
#define AMP__TLS AMP_THREAD_LOCAL
#elif defined(__cplusplus) && __cplusplus >= 201103L
#define AMP__TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define AMP__TLS _Thread_local
#elif defined(_MSC_VER)
#define AMP__TLS __declspec(thread)
#elif defined(__TINYC__)
#define AMP__TLS   /* tcc has no thread-local storage: amp_last_error() is then one buffer for all threads */
#else
#define AMP__TLS __thread
#endif

/* Process-wide lazily set flags and counters (the CPU's features, scaler ids) may be touched by
   several threads at once (a data-parallel trainer with a thread per rank): relaxed atomics make
   that defined behaviour. Elsewhere plain access (every writer stores the same value). */
#if defined(__GNUC__) || defined(__clang__)
#define AMP__ALOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define AMP__ASTORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define AMP__AINC(p) __atomic_add_fetch((p), 1, __ATOMIC_RELAXED)
#else
#define AMP__ALOAD(p) (*(p))
#define AMP__ASTORE(p, v) (*(p) = (v))
#define AMP__AINC(p) (++*(p))
#endif

/* A tiny lock for a few loads or stores that must be seen together (the log hook's function and
   user pointer). Compilers without the GNU atomics get plain access: there, set the hook before
   any thread may log (see amp_set_log). */
#if defined(__GNUC__) || defined(__clang__)
#define AMP__LOCK(p) do { while (__atomic_test_and_set((p), __ATOMIC_ACQUIRE)) { } } while (0)
#define AMP__UNLOCK(p) __atomic_clear((p), __ATOMIC_RELEASE)
#else
#define AMP__LOCK(p) ((void)(p))
#define AMP__UNLOCK(p) ((void)(p))
#endif

#if defined(__GNUC__) || defined(__clang__)
#define AMP__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AMP__PRINTF(a, b)
#endif

#ifdef AMP_CUDA
#include "amp_kernels.h"   /* the CUDA device's operations, defined in amp_kernels.cu */
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
   Implementation: errors
   ------------------------------------------------------------------------------------------ */

static AMP__TLS char amp__err_buf[512];

/* Records the message for amp_last_error() and returns s, so a check reads
   `return amp__fail(AMP_ERR_ARG, "amp_x: n %zu must be > 0", n);` */
static amp_status amp__fail(amp_status s, const char *fmt, ...) AMP__PRINTF(2, 3);
static amp_status amp__fail(amp_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(amp__err_buf, sizeof amp__err_buf, fmt, ap);
  va_end(ap);
  return s;
}

AMPDEF const char *amp_status_string(amp_status s) {
  switch (s) { AMP__STATUS_LIST(AMP__ENUM_CASE) }
  return "AMP_ERR_UNKNOWN";
}
/* A master mode's name (amp_tensor_desc.master_mode), "unknown" for any other value. */
static const char *amp__master_mode_name(int m) {
  switch (m) { AMP__MASTER_LIST(AMP__ENUM_CASE) }
  return "unknown";
}

AMPDEF const char *amp_last_error(void) { return amp__err_buf; }

/* The traits table: one row per AMP__DTYPES row, in enum order (row t is dtype t). */
typedef struct amp__dtype_traits {
  const char *name;                   /* "AMP_F32" */
  size_t size;                        /* bytes per element */
  uint32_t max_bits, min_normal_bits; /* largest finite value, smallest normal, as f32 bits */
  int cpu_vec, gpu_vec;               /* a CPU (AVX2+F16C / AVX-512 / NEON) and a GPU vector path */
  int compute;                        /* a type to compute and step in (else a storage format) */
  int fp8;                            /* -1 not fp8; else the fp8 encoders' e5m2 argument */
} amp__dtype_traits;
#define AMP__DT_ROW_(A, E, N, T, S, MX, MN, CV, GV, CR, NT, CMP, F8, TOP) {#E, S, MX, MN, CV, GV, CMP, F8},
static const amp__dtype_traits amp__dtype_table[] = { AMP__DTYPES(AMP__DT_ROW_, ~) };
#undef AMP__DT_ROW_
/* Row t, or NULL for a value that is not a format. */
static inline const amp__dtype_traits *amp__dtype_row(amp_dtype t) {
  return (unsigned)t < (unsigned)AMP__DTYPE_COUNT ? &amp__dtype_table[(unsigned)t] : NULL;
}
static const char *amp__dtype_name(amp_dtype t) { return amp__dtype_row(t) ? amp__dtype_row(t)->name : "unknown"; }
static inline int amp__dtype_cpu_vec(amp_dtype t) { return amp__dtype_row(t) && amp__dtype_row(t)->cpu_vec; }
/* The fp8 column: -1 for a format that is not fp8 (or no format), else the encoders' e5m2 flag. */
static inline int amp__dtype_fp8(amp_dtype t) { return amp__dtype_row(t) ? amp__dtype_row(t)->fp8 : -1; }
/* AMP_OK for a format; else AMP_ERR_ARG with "fn: what N is not a number format (AMP_F32, ...)". */
/* The names of the formats, ", "-separated, into list (cap bytes): every row, or compute ones only. */
static void amp__dtype_names(char *list, size_t cap, int which) {   /* which 0: all, 1: compute, -1: storage */
  size_t i, at = 0;
  list[0] = '\0';
  for (i = 0; i < (size_t)AMP__DTYPE_COUNT && at < cap; i++)
    if (!which || (which > 0) == (amp__dtype_table[i].compute != 0))
      at += (size_t)snprintf(list + at, cap - at, "%s%s", at ? ", " : "", amp__dtype_table[i].name);
}
static amp_status amp__dtype_check(const char *fn, const char *what, amp_dtype t) {
  char list[256];
  if (amp__dtype_row(t)) return AMP_OK;
  amp__dtype_names(list, sizeof list, 0);
  return amp__fail(AMP_ERR_ARG, "%s: %s %d is not a number format (%s)", fn, what, (int)t, list);
}
/* AMP_OK when t is a format to compute and step in (the compute column), else AMP_ERR_ARG naming
   fn, what and t: not a format at all (amp__dtype_check), or a storage format (fp8). */
static amp_status amp__dtype_compute_check(const char *fn, const char *what, amp_dtype t) {
  const amp__dtype_traits *r = amp__dtype_row(t);
  char list[256];
  if (!r) return amp__dtype_check(fn, what, t);
  if (r->compute) return AMP_OK;
  amp__dtype_names(list, sizeof list, 1);
  return amp__fail(AMP_ERR_ARG, "%s: %s %d (%s) is a storage format, which amp_convert casts to and from; %s is "
                   "one of %s", fn, what, (int)t, r->name, what, list);
}

/* AMP_OK when t is an fp8 format (a storage row), else AMP_ERR_ARG naming fn, what and t. */
static amp_status amp__dtype_fp8_check(const char *fn, const char *what, amp_dtype t) {
  const amp__dtype_traits *r = amp__dtype_row(t);
  char list[256];
  if (r && !r->compute) return AMP_OK;
  amp__dtype_names(list, sizeof list, -1);
  return amp__fail(AMP_ERR_ARG, "%s: %s %d%s%s%s is not an fp8 format (%s)", fn, what, (int)t, r ? " (" : "",
                   r ? r->name : "", r ? ")" : "", list);
}

/* ------------------------------------------------------------------------------------------
   Implementation: number formats
   ------------------------------------------------------------------------------------------ */

AMPDEF size_t amp_dtype_size(amp_dtype t) { return amp__dtype_row(t) ? amp__dtype_row(t)->size : 0u; }

/* C99's restrict, spelled so C++ compilers take it too. */
#if defined(__cplusplus) || defined(_MSC_VER)
#define AMP__RESTRICT __restrict
#else
#define AMP__RESTRICT restrict
#endif
/* Element functions and loop bodies forced inline, so that a loop that calls them is one
   function (and vectorises where the compiler does that). */
#if defined(__GNUC__) || defined(__clang__)
#define AMP__INLINE static inline __attribute__((always_inline))
#else
#define AMP__INLINE static inline
#endif
/* The portable loops. f32 -> f16 runs 64 elements at a time through the scalar function's
   normal-case formula, branch-free so that compilers vectorise it with plain SSE2/NEON, then
   redoes with the scalar function the few elements outside that case (subnormal halves, inf, NaN,
   overflow). f16 -> f32 is amp_f16_to_f32 per element, which vectorises whole. Both give the
   scalar functions' bits (they are the scalar functions). */
/* 1 for |x| bits a that amp__f16_normal does not round: a subnormal half [2^-25, 2^-14), or
   overflow, inf and NaN (>= 65520). Below 2^-25 the result is +-0. */
AMP__INLINE uint32_t amp__f16_special(uint32_t a) {
  return (uint32_t)(a - 0x33000000u < 0x38800000u - 0x33000000u) | (uint32_t)(a >= 0x477ff000u);
}
static void amp__f32_to_f16_portable(amp_f16 *d, const float *s, size_t n) {
  size_t i = 0;
  int k;
  for (; i + 64 <= n; i += 64) {
    uint32_t odd = 0;
    for (k = 0; k < 64; k++) {
      uint32_t u = amp__f32_bits(s[i + k]), a = u & 0x7fffffffu;
      uint32_t h = amp__f16_normal(a);
      odd |= amp__f16_special(a);
      d[i + k] = (amp_f16)(((u >> 16) & 0x8000u) | (a >= 0x38800000u ? h : 0u));  /* below 2^-25: +-0 */
    }
    if (odd)
      for (k = 0; k < 64; k++) {
        if (amp__f16_special(amp__f32_bits(s[i + k]) & 0x7fffffffu)) d[i + k] = amp_f32_to_f16(s[i + k]);
      }
  }
  for (; i < n; i++) d[i] = amp_f32_to_f16(s[i]);
}
static void amp__f16_to_f32_portable(float *AMP__RESTRICT d, const amp_f16 *AMP__RESTRICT s, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) d[i] = amp_f16_to_f32(s[i]);
}
/* The bulk loops of each format (the AMP__DTYPES columns' N): n elements to f32 / from f32, the
   element functions' bits. AMP__DT_BULK_LOOPS(N) writes them from amp__ld_N / amp__st_N; f16 has
   its own (above). */
#define AMP__DT_BULK_LOOPS(N) \
  static void amp__##N##_to_f32(float *AMP__RESTRICT d, const void *AMP__RESTRICT s, size_t n) { \
    size_t i; for (i = 0; i < n; i++) d[i] = amp__ld_##N(s, i); } \
  static void amp__##N##_from_f32(void *AMP__RESTRICT d, const float *AMP__RESTRICT s, size_t n) { \
    size_t i; for (i = 0; i < n; i++) amp__st_##N(d, i, s[i]); }
AMP__DT_BULK_LOOPS(bf16)
/* fp8: the vector kernels where the CPU has them (below, amp__fp8_bulk), else the portable loops */
static void amp__fp8_bulk(void *d, const void *s, size_t n, int e5m2, int decode);
static void amp__e4m3_to_f32(float *d, const void *s, size_t n) { amp__fp8_bulk(d, s, n, 0, 1); }
static void amp__e4m3_from_f32(void *d, const float *s, size_t n) { amp__fp8_bulk(d, s, n, 0, 0); }
static void amp__e5m2_to_f32(float *d, const void *s, size_t n) { amp__fp8_bulk(d, s, n, 1, 1); }
static void amp__e5m2_from_f32(void *d, const float *s, size_t n) { amp__fp8_bulk(d, s, n, 1, 0); }
static void amp__f32_to_f32(float *d, const void *s, size_t n) { memmove(d, s, n * sizeof(float)); }   /* the bits */
static void amp__f32_from_f32(void *d, const float *s, size_t n) { memmove(d, s, n * sizeof(float)); }
static void amp__f16_to_f32(float *d, const void *s, size_t n) { amp__f16_to_f32_portable(d, (const amp_f16 *)s, n); }
static void amp__f16_from_f32(void *d, const float *s, size_t n) { amp__f32_to_f16_portable((amp_f16 *)d, s, n); }
/* n elements of type t to f32 / from f32 (t a format: callers have checked it). */
static void amp__to_f32(float *d, const void *s, amp_dtype t, size_t n) {
#define AMP__TO_(E, N, T, S) amp__##N##_to_f32(d, s, n); break;
  AMP__DTYPE_SWITCH(t, AMP__TO_)
#undef AMP__TO_
}
static void amp__from_f32(void *d, amp_dtype t, const float *s, size_t n) {
#define AMP__FROM_(E, N, T, S) amp__##N##_from_f32(d, s, n); break;
  AMP__DTYPE_SWITCH(t, AMP__FROM_)
#undef AMP__FROM_
}
static void amp__convert_any(void *dst, amp_dtype dt, const void *src, amp_dtype st, size_t n);
static void amp__convert_portable(void *dst, amp_dtype dt, const void *src, amp_dtype st, size_t n) {
  size_t i;   /* (dt == st never comes here: amp__convert_any copies it) */
  if (st == AMP_F32) amp__from_f32(dst, dt, (const float *)src, n);   /* f32 the pivot: one loop */
  else if (dt == AMP_F32) amp__to_f32((float *)dst, src, st, n);
  else { /* through f32, a chunk at a time, each leg by amp__convert_any (so a leg whose format has
            vector loops runs in them: f16/bf16 <-> fp8); each chunk is read before it is written,
            so dst == src is safe */
    float tmp[256];
    size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st);
    for (i = 0; i < n; i += 256) {
      size_t k = n - i < 256 ? n - i : 256;
      amp__convert_any(tmp, AMP_F32, (const char *)src + i * ss, st, k);
      amp__convert_any((char *)dst + i * ds, dt, tmp, AMP_F32, k);
    }
  }
}

/* What the x86 CPU and its OS support, asked once (CPUID and XGETBV): the one place every SIMD
   path (conversions, optimizer loops, the matrix product's kernels) learns it. */
#if !defined(AMP_NO_SIMD) && (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define AMP__X86_CPUID 1
#define AMP__CPU_AVX2 1u        /* AVX2, the OS saving YMM state */
#define AMP__CPU_F16C 2u
#define AMP__CPU_FMA 4u
#define AMP__CPU_AVX512 8u      /* AVX-512 F/BW/VL/DQ with AVX2, the OS saving opmask and ZMM state */
#define AMP__CPU_AVX512BF16 16u /* AVX512_BF16 with AVX512 */
#define AMP__CPU_VBMI 32u       /* AVX512_VBMI with AVX512 (byte permutes: the 8-bit moments' decode) */
#define AMP__CPU_INTEL 64u      /* the vendor string GenuineIntel (the fp8 loops' L1 prefetches) */
#define AMP__CPU_AMX 128u       /* AMX-TILE and AMX-BF16 with AVX512_BF16, the OS saving tile state (XCR0 17-18);
                                   Linux must still grant the process its use (amp__gemm_amx) */
static void amp__cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
  __asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}
static unsigned amp__cpu_features(void) {
  static int cache = -1;   /* a relaxed atomic: threads may ask at once (same answer) */
  int v = AMP__ALOAD(&cache);
  if (v < 0) {
    unsigned r[4], lo, hi, xcr0, f = 0;
    amp__cpuid(0, 0, r);
    if (r[1] == 0x756e6547u && r[3] == 0x49656e69u && r[2] == 0x6c65746eu) f |= AMP__CPU_INTEL;   /* "Genu" "ineI" "ntel" */
    if (r[0] >= 7) {
      amp__cpuid(1, 0, r);
      if (r[2] & (1u << 29)) f |= AMP__CPU_F16C;   /* leaf 1 ECX bit 29 F16C, 12 FMA */
      if (r[2] & (1u << 12)) f |= AMP__CPU_FMA;
      /* ECX bit 27 OSXSAVE (xgetbv usable), 28 AVX */
      if ((r[2] & (3u << 27)) == (3u << 27)) {
        __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0u));
        xcr0 = lo | (hi & 0u);   /* the low 32 bits are the ones asked about */
        amp__cpuid(7, 0, r);
        /* XCR0 bits 1-2: XMM and YMM state; leaf 7 EBX bit 5: AVX2 */
        if ((xcr0 & 6u) == 6u && (r[1] & (1u << 5))) f |= AMP__CPU_AVX2;
        /* XCR0 bits 5-7: opmask and ZMM state; EBX bits 16 F, 17 DQ, 30 BW, 31 VL */
        if ((f & AMP__CPU_AVX2) && (xcr0 & 0xe0u) == 0xe0u && (r[1] & 0xc0030000u) == 0xc0030000u) {
          f |= AMP__CPU_AVX512;
          /* EDX bits 22 AMX-BF16 and 24 AMX-TILE; XCR0 bits 17-18: tile configuration and data */
          unsigned amx = (r[3] & (5u << 22)) == (5u << 22) && (xcr0 & 0x60000u) == 0x60000u;
          if (r[2] & (1u << 1)) f |= AMP__CPU_VBMI;   /* leaf 7 ECX bit 1 */
          amp__cpuid(7, 1, r);
          if (r[0] & (1u << 5)) f |= AMP__CPU_AVX512BF16 | (amx ? AMP__CPU_AMX : 0u);   /* leaf 7 subleaf 1 EAX bit 5 */
        }
      }
    }
    v = (int)f;
    AMP__ASTORE(&cache, v);
  }
  return (unsigned)v;
}
/* The time-stamp counter, for the calibrations that choose between two exact paths by their speed. */
static inline unsigned long long amp__rdtsc(void) {
  unsigned lo, hi;
  __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
  return (unsigned long long)hi << 32 | lo;
}
#endif

/* The x86 SIMD paths: x86-64 with GCC or Clang. Each kernel carries a target attribute, so the
   rest of the file needs no -m flags, and runs only after CPUID said the CPU and the OS (XSAVE of
   the YMM/ZMM registers) support it. Levels: 1 = AVX2 + F16C, 2 = AVX-512 F/BW/VL/DQ. Every
   kernel gives the bits of the scalar functions above: vcvtps2ph/vcvtph2ps are what those are
   written to match, and the bf16 rounding is amp_f32_to_bf16's integer trick on 8 or 16 lanes
   (AVX512-BF16's vcvtneps2bf16 flushes subnormal inputs to zero, so it is not used). Tails and
   heads go through the same vector code: AVX-512 with masked loads and stores, AVX2 through a
   small buffer; no scalar element access, so any address works, odd ones included. */
#if !defined(AMP_NO_SIMD) && (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__CUDACC__)
#define AMP__X86_SIMD 1
AMP__EXACT_BEGIN
#ifdef __cplusplus
}
#endif
/* GCC's _mm*_undefined_* helpers initialise a register from itself; g++ -fopenmp then reports
   every intrinsic built on them as maybe-uninitialized. The warning is about the header's idiom,
   so it is silenced for the header's own lines only. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#ifdef __cplusplus
extern "C" {
#endif
#define AMP__AVX2 __attribute__((target("avx2,f16c"))) AMP__EXACT_FP
#define AMP__AVX2_INLINE static inline __attribute__((target("avx2,f16c"), always_inline)) AMP__EXACT_FP
#define AMP__AVX512 __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl,avx512dq"))) AMP__EXACT_FP
#define AMP__AVX512_INLINE \
  static inline __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl,avx512dq"), always_inline)) AMP__EXACT_FP

/* The CPU's best level: 0 none, 1 AVX2 + F16C, 2 that and AVX-512 F/BW/VL/DQ. */
static int amp__cpu_level(void) {
  unsigned f = amp__cpu_features();
  if ((f & (AMP__CPU_AVX2 | AMP__CPU_F16C)) != (AMP__CPU_AVX2 | AMP__CPU_F16C)) return 0;
  return (f & AMP__CPU_AVX512) ? 2 : 1;
}
static int amp__cpu_simd(void) { return amp__cpu_level() >= 1; }
/* The highest level the SIMD paths may use (tests lower it to run the AVX2 kernels on an AVX-512
   CPU). */
static int amp__isa_cap = 2;
static int amp__isa(void) { int l = amp__cpu_level(); return l < amp__isa_cap ? l : amp__isa_cap; }

/* A vector kept in a register: compilers would otherwise fold a conversion into its store
   (vcvtps2ph / vpmovdw to memory), which Zen 4 runs several times slower. */
#define AMP__IN_REG(x) __asm__("" : "+v"(x))

/* ---- 8 lanes (AVX2 + F16C) ----
   amp__ld8: 8 elements of type t as f32 (exact widening); amp__st8: 8 f32 rounded to type t by the
   scalar functions' rules, streamed (non-temporal) when nt (then p is 16/32-byte aligned). */
AMP__AVX2_INLINE __m256 amp__ld8_f32(const void *p) { return _mm256_loadu_ps((const float *)p); }
AMP__AVX2_INLINE __m256 amp__ld8_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
AMP__AVX2_INLINE __m256 amp__ld8_bf16(const void *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
AMP__AVX2_INLINE __m256 amp__ld8(amp_dtype t, const void *p) {
#define AMP__V_(E, N, T, S) return amp__ld8_##N(p);
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
  return _mm256_setzero_ps();
}
/* 8 f32 bit patterns -> 8 bf16 in the low halves of the lanes: amp_f32_to_bf16 on each lane. */
/* All ones in the lanes of 8 f32 bit patterns that are NaN: |u| > inf's bits (a signed compare is
   right since both sides are below 2^31). */
AMP__AVX2_INLINE __m256i amp__nan8(__m256i u) {
  return _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
}
AMP__AVX2_INLINE __m256i amp__bf16_round8(__m256i u) {
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                                                 _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
  return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), amp__nan8(u));
}
AMP__AVX2_INLINE void amp__st8_f32(void *p, __m256 x, int nt) {
  if (nt) _mm256_stream_ps((float *)p, x); else _mm256_storeu_ps((float *)p, x);
}
AMP__AVX2_INLINE void amp__st8h(void *p, __m128i h, int nt) {   /* 8 16-bit elements */
  AMP__IN_REG(h);
  if (nt) _mm_stream_si128((__m128i *)p, h); else _mm_storeu_si128((__m128i *)p, h);
}
AMP__AVX2_INLINE void amp__st8_f16(void *p, __m256 x, int nt) {
  amp__st8h(p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT), nt);
}
AMP__AVX2_INLINE void amp__st8_bf16(void *p, __m256 x, int nt) {
  __m256i r = amp__bf16_round8(_mm256_castps_si256(x));   /* values <= 0xffff: packus keeps them */
  amp__st8h(p, _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)), nt);
}
AMP__AVX2_INLINE void amp__st8(amp_dtype t, void *p, __m256 x, int nt) {
#define AMP__V_(E, N, T, S) amp__st8_##N(p, x, nt); break;
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
}

/* ---- 16 lanes (AVX-512) ----
   The same with a lane mask: lanes outside k are not read (they load as 0) and not written. */
AMP__AVX512_INLINE __m256i amp__ld16h(const void *p, __mmask16 k) {
  return k == 0xffff ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
}
AMP__AVX512_INLINE __m512 amp__ld16_f32(const void *p, __mmask16 k) {
  return k == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}
AMP__AVX512_INLINE __m512 amp__ld16_f16(const void *p, __mmask16 k) { return _mm512_cvtph_ps(amp__ld16h(p, k)); }
AMP__AVX512_INLINE __m512 amp__ld16_bf16(const void *p, __mmask16 k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(amp__ld16h(p, k)), 16));
}
AMP__AVX512_INLINE __m512 amp__ld16(amp_dtype t, const void *p, __mmask16 k) {
#define AMP__V_(E, N, T, S) return amp__ld16_##N(p, k);
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
  return _mm512_setzero_ps();
}
AMP__AVX512_INLINE __m512 amp__ld16f(const float *p, __mmask16 k) {
  return k == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}
AMP__AVX512_INLINE void amp__st16f(float *p, __m512 x, __mmask16 k) {
  if (k == 0xffff) _mm512_storeu_ps(p, x);
  else _mm512_mask_storeu_ps(p, k, x);
}
/* The NaN lanes of 16 f32 bit patterns, as a mask. */
AMP__AVX512_INLINE __mmask16 amp__nan16(__m512i u) {
  return _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
}
AMP__AVX512_INLINE __m256i amp__bf16_round16(__m512i u) {
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                                 _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
  return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(r, amp__nan16(u), hi, _mm512_set1_epi32(0x40)));
}
AMP__AVX512_INLINE void amp__st16_f32(void *p, __m512 x, __mmask16 k, int nt) {
  if (nt) _mm512_stream_ps((float *)p, x); else amp__st16f((float *)p, x, k);
}
AMP__AVX512_INLINE void amp__st16h(void *p, __m256i h, __mmask16 k, int nt) {   /* 16 16-bit elements */
  if (nt) _mm256_stream_si256((__m256i *)p, h);
  else if (k == 0xffff) _mm256_storeu_si256((__m256i *)p, h);
  else _mm256_mask_storeu_epi16(p, k, h);
}
AMP__AVX512_INLINE void amp__st16_f16(void *p, __m512 x, __mmask16 k, int nt) {
  __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  AMP__IN_REG(h);
  amp__st16h(p, h, k, nt);
}
AMP__AVX512_INLINE void amp__st16_bf16(void *p, __m512 x, __mmask16 k, int nt) {
  amp__st16h(p, amp__bf16_round16(_mm512_castps_si512(x)), k, nt);
}
AMP__AVX512_INLINE void amp__st16(amp_dtype t, void *p, __m512 x, __mmask16 k, int nt) {
#define AMP__V_(E, N, T, S) amp__st16_##N(p, x, k, nt); break;
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
}
AMP__AVX512_INLINE __mmask16 amp__mask16(size_t k) { return (__mmask16)(k >= 16 ? 0xffffu : (1u << k) - 1u); }
AMP__AVX512_INLINE __mmask32 amp__mask32(size_t k) {
  return k >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << k) - 1u);
}

/* Stores: large outputs go around the cache with non-temporal stores (no read-for-ownership of
   the destination: a third less memory traffic for f32 -> f16). Those need aligned addresses, so
   a kernel first converts a head up to a 64-byte boundary; a destination that is not aligned to
   its element size never reaches one and is written with ordinary stores. Each block reads all
   its elements before it writes any, so dst == src is safe for the 2-byte pairs. */
static size_t amp__nt_bytes = (size_t)8 << 20; /* destination size from which stores stream */
static size_t amp__nt_head(const void *dst, size_t ds, size_t n, int *nt) {
  size_t h;
  *nt = n * ds >= amp__nt_bytes && ((uintptr_t)dst % ds) == 0;
  if (!*nt) return 0;
  h = ((64u - ((uintptr_t)dst & 63u)) & 63u) / ds;
  return h < n ? h : n;
}

/* 32 elements, 4 x 8 lanes; every load before the stores. */
AMP__AVX2_INLINE void amp__cvt_block8(amp_dtype dt, char *d, amp_dtype st, const char *s, int nt) {
  size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st);
  __m256 a = amp__ld8(st, s), b = amp__ld8(st, s + 8 * ss), c = amp__ld8(st, s + 16 * ss),
         e = amp__ld8(st, s + 24 * ss);
  amp__st8(dt, d, a, nt);
  amp__st8(dt, d + 8 * ds, b, nt);
  amp__st8(dt, d + 16 * ds, c, nt);
  amp__st8(dt, d + 24 * ds, e, nt);
}
/* k < 32 elements through a buffer. */
AMP__AVX2_INLINE void amp__cvt_part8(amp_dtype dt, char *d, amp_dtype st, const char *s, size_t k) {
  char bs[128], bd[128];
  size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st);
  memset(bs, 0, sizeof bs);
  memcpy(bs, s, k * ss);
  amp__cvt_block8(dt, bd, st, bs, 0);
  memcpy(d, bd, k * ds);
}
AMP__AVX2_INLINE void amp__cvt_loop8(amp_dtype dt, void *dst, amp_dtype st, const void *src, size_t n) {
  size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st), i;
  char *d = (char *)dst;
  const char *s = (const char *)src;
  int nt;
  size_t h = amp__nt_head(dst, ds, n, &nt);
  if (h) amp__cvt_part8(dt, d, st, s, h);
  for (i = h; i + 32 <= n; i += 32) amp__cvt_block8(dt, d + i * ds, st, s + i * ss, nt);
  if (nt) _mm_sfence(); /* streamed stores become visible in order with later ones */
  if (i < n) amp__cvt_part8(dt, d + i * ds, st, s + i * ss, n - i);
}
/* 32 elements, 2 x 16 lanes, under a mask of the first k. */
AMP__AVX512_INLINE void amp__cvt_block16(amp_dtype dt, char *d, amp_dtype st, const char *s, size_t k, int nt) {
  size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st);
  __mmask16 k0 = amp__mask16(k), k1 = amp__mask16(k > 16 ? k - 16 : 0);
  __m512 a = amp__ld16(st, s, k0), b = amp__ld16(st, s + 16 * ss, k1);
  amp__st16(dt, d, a, k0, nt); amp__st16(dt, d + 16 * ds, b, k1, nt);
}
AMP__AVX512_INLINE void amp__cvt_loop16(amp_dtype dt, void *dst, amp_dtype st, const void *src, size_t n) {
  size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st), i;
  char *d = (char *)dst;
  const char *s = (const char *)src;
  int nt;
  size_t h = amp__nt_head(dst, ds, n, &nt);
  if (h) amp__cvt_block16(dt, d, st, s, h, 0);
  for (i = h; i + 64 <= n; i += 64) {
    amp__cvt_block16(dt, d + i * ds, st, s + i * ss, 32, nt);
    amp__cvt_block16(dt, d + (i + 32) * ds, st, s + (i + 32) * ss, 32, nt);
  }
  if (nt) _mm_sfence();
  for (; i < n; i += 32) amp__cvt_block16(dt, d + i * ds, st, s + i * ss, n - i < 32 ? n - i : 32, 0);
}

/* One kernel per level, a case per (dst, src) pair of formats with a vector path: the pair is a
   constant in each, so the dtype tests of the inline loops fold away. */
#define AMP__CVT_D8_(E, N, T, S) amp__cvt_loop8(E, d, st, s, n); break;
#define AMP__CVT_S8_(E, N, T, S) amp__cvt_to8(dt, d, E, s, n); break;
#define AMP__CVT_D16_(E, N, T, S) amp__cvt_loop16(E, d, st, s, n); break;
#define AMP__CVT_S16_(E, N, T, S) amp__cvt_to16(dt, d, E, s, n); break;
#define AMP__CVT_LEVEL(W, INLINE, TARGET, NAME) \
  INLINE void amp__cvt_to##W(amp_dtype dt, void *d, amp_dtype st, const void *s, size_t n) { \
    AMP__DTYPE_VSWITCH(dt, AMP__CVT_D##W##_) \
  } \
  static TARGET void NAME(void *d, amp_dtype dt, const void *s, amp_dtype st, size_t n) { \
    AMP__DTYPE_VSWITCH(st, AMP__CVT_S##W##_) \
  }
AMP__CVT_LEVEL(8, AMP__AVX2_INLINE, AMP__AVX2, amp__cvt_avx2)
AMP__CVT_LEVEL(16, AMP__AVX512_INLINE, AMP__AVX512, amp__cvt_avx512)
#undef AMP__CVT_LEVEL
#undef AMP__CVT_D8_
#undef AMP__CVT_S8_
#undef AMP__CVT_D16_
#undef AMP__CVT_S16_

/* Both formats with a CPU vector path (amp__dtype_cpu_vec). 1: done (always, on x86). */
static int amp__convert_simd(void *dst, amp_dtype dt, const void *src, amp_dtype st, size_t n) {
  if (dt == st) memmove(dst, src, n * amp_dtype_size(dt));
  else if (amp__isa() >= 2) amp__cvt_avx512(dst, dt, src, st, n);
  else amp__cvt_avx2(dst, dt, src, st, n);
  return 1;
}
AMP__EXACT_END
#endif

/* The AArch64 SIMD paths: AArch64 with GCC or Clang. NEON (Advanced SIMD) is part of every
   AArch64 CPU, so level 1 needs no run-time test; level 2 adds BFCVTN (FEAT_BF16) for f32 -> bf16,
   compiled where the compiler targets it (__ARM_FEATURE_BF16_VECTOR_ARITHMETIC: -march=armv8.6-a,
   -mcpu=apple-m2, neoverse-v2 ...) and used where the CPU has it (getauxval(AT_HWCAP2) on Linux,
   sysctlbyname("hw.optional.arm.FEAT_BF16") on macOS; elsewhere level 1). Levels: 1 = FCVTL /
   FCVTN (f16 <-> f32) and amp_f32_to_bf16's integer trick on 4 lanes; 2 = BFCVTN for f32 -> bf16.
   FCVTN, FCVTL and BFCVTN read the FPCR: they give the scalar functions' bits (NaN quieted with
   its sign and top payload, subnormals kept, round to nearest even) in its default state, which
   each call checks (one read of the FPCR): a rounding mode other than nearest, default-NaN mode
   (DN) or alternate handling (AH) sends the call to the portable loops, and flush-to-zero (FZ,
   FIZ: gcc's -Ofast sets FZ at start-up), under which BFCVTN would flush subnormal bf16, to level
   1. (FCVTN's subnormal f32 inputs round to +-0 either way; f16 operands of conversions are never
   flushed.) Loads and stores are byte-wise (ld1/st1 of bytes), so any address works; tails go
   through a small buffer; every block reads all its elements before it writes any (dst == src is
   safe). No streaming stores. */
#if !defined(AMP_NO_SIMD) && (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__) && \
    !defined(__ARM_BIG_ENDIAN) && !defined(__CUDACC__)   /* (the lanes' byte order: little-endian only) */
#define AMP__NEON_SIMD 1
#ifdef __cplusplus
}
#endif
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#ifdef __cplusplus
extern "C" {
#endif
#define AMP__NEON_INLINE static inline __attribute__((always_inline))
#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#define AMP__NEON_BFCVT 1
#endif
/* 1 where the CPU has FEAT_BF16 (BFCVT, BFDOT, BFMMLA), whatever the build targets; asked once. */
static int amp__cpu_bf16(void) {
  static int cache = -1;   /* a relaxed atomic, as amp__cpu_features' */
  int v = AMP__ALOAD(&cache);
  if (v < 0) {
#if defined(__linux__) && defined(AT_HWCAP2)
    v = (getauxval(AT_HWCAP2) & (1ul << 14)) != 0;   /* HWCAP2_BF16 */
#elif defined(__APPLE__)
    int f = 0;
    size_t len = sizeof f;
    v = sysctlbyname("hw.optional.arm.FEAT_BF16", &f, &len, NULL, 0) == 0 && f != 0;
#else
    v = 0;
#endif
    AMP__ASTORE(&cache, v);
  }
  return v;
}
/* The CPU's best level: 1 NEON, 2 that and BFCVTN (compiled in, and the CPU has FEAT_BF16). */
static int amp__cpu_level(void) {
#ifdef AMP__NEON_BFCVT
  return 1 + amp__cpu_bf16();
#else
  return 1;
#endif
}
static int amp__cpu_simd(void) { return 1; }
/* The highest level the NEON paths may use (tests lower it to run level 1 on a BF16 CPU). */
static int amp__isa_cap = 2;
static int amp__isa(void) { int l = amp__cpu_level(); return l < amp__isa_cap ? l : amp__isa_cap; }
/* The level a conversion may use under the FPCR as it is now (see above): 0 the portable loops. */
static int amp__neon_level(void) {
  uint64_t f;
  int l = amp__isa();
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(f));
  if (f & ((3u << 22) | (1u << 25) | 2u)) return 0;   /* RMode, DN, AH */
  if ((f & ((1u << 24) | 1u)) && l > 1) l = 1;        /* FZ, FIZ */
  return l;
}

/* ---- 4 lanes ----
   amp__ld4: 4 elements of type t as f32 (exact widening); amp__st4: 4 f32 rounded to type t by
   the scalar functions' rules (bfc: with BFCVTN, level 2). */
AMP__NEON_INLINE float32x4_t amp__ld4_f32(const void *p) { return vreinterpretq_f32_u8(vld1q_u8((const uint8_t *)p)); }
AMP__NEON_INLINE float32x4_t amp__ld4_f16(const void *p) {
  return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8((const uint8_t *)p)));
}
AMP__NEON_INLINE float32x4_t amp__ld4_bf16(const void *p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vreinterpret_u16_u8(vld1_u8((const uint8_t *)p)), 16));
}
AMP__NEON_INLINE float32x4_t amp__ld4(amp_dtype t, const void *p) {
#define AMP__V_(E, N, T, S) return amp__ld4_##N(p);
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
  return vdupq_n_f32(0.0f);
}
/* 4 f32 bit patterns -> 4 bf16: amp_f32_to_bf16 on each lane (NaN: the top half with the quiet
   bit 0x40 set; else add 0x7fff plus the lowest kept bit and keep the top half). */
AMP__NEON_INLINE uint16x4_t amp__bf16_round4(uint32x4_t u) {
  uint32x4_t hi = vshrq_n_u32(u, 16);
  uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fffu)), vandq_u32(hi, vdupq_n_u32(1u))), 16);
  uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
  return vmovn_u32(vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40u)), r));
}
AMP__NEON_INLINE void amp__st4h(void *p, uint16x4_t h) { vst1_u8((uint8_t *)p, vreinterpret_u8_u16(h)); }
AMP__NEON_INLINE void amp__st4_f32(void *p, float32x4_t x, int bfc) {
  (void)bfc;
  vst1q_u8((uint8_t *)p, vreinterpretq_u8_f32(x));
}
AMP__NEON_INLINE void amp__st4_f16(void *p, float32x4_t x, int bfc) {
  (void)bfc;
  amp__st4h(p, vreinterpret_u16_f16(vcvt_f16_f32(x)));
}
AMP__NEON_INLINE void amp__st4_bf16(void *p, float32x4_t x, int bfc) {
#ifdef AMP__NEON_BFCVT
  if (bfc) { amp__st4h(p, vreinterpret_u16_bf16(vcvt_bf16_f32(x))); return; }
#endif
  (void)bfc;
  amp__st4h(p, amp__bf16_round4(vreinterpretq_u32_f32(x)));
}
AMP__NEON_INLINE void amp__st4(amp_dtype t, void *p, float32x4_t x, int bfc) {
#define AMP__V_(E, N, T, S) amp__st4_##N(p, x, bfc); break;
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
}
/* 16 elements, 4 x 4 lanes; every load before the stores. */
AMP__NEON_INLINE void amp__cvt_block4(amp_dtype dt, char *d, amp_dtype st, const char *s, int bfc) {
  size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st);
  float32x4_t a = amp__ld4(st, s), b = amp__ld4(st, s + 4 * ss), c = amp__ld4(st, s + 8 * ss),
              e = amp__ld4(st, s + 12 * ss);
  amp__st4(dt, d, a, bfc);
  amp__st4(dt, d + 4 * ds, b, bfc);
  amp__st4(dt, d + 8 * ds, c, bfc);
  amp__st4(dt, d + 12 * ds, e, bfc);
}
AMP__NEON_INLINE void amp__cvt_loop4(amp_dtype dt, void *dst, amp_dtype st, const void *src, size_t n, int bfc) {
  size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st), i;
  char *d = (char *)dst;
  const char *s = (const char *)src;
  for (i = 0; i + 16 <= n; i += 16) amp__cvt_block4(dt, d + i * ds, st, s + i * ss, bfc);
  if (i < n) {   /* k < 16 elements through a buffer */
    char bs[64], bd[64];
    memset(bs, 0, sizeof bs);
    memcpy(bs, s + i * ss, (n - i) * ss);
    amp__cvt_block4(dt, bd, st, bs, bfc);
    memcpy(d + i * ds, bd, (n - i) * ds);
  }
}
/* A case per (dst, src) pair of formats with a vector path, the pair a constant in each. */
#define AMP__CVT_D4_(E, N, T, S) amp__cvt_loop4(E, d, st, s, n, bfc); break;
#define AMP__CVT_S4_(E, N, T, S) amp__cvt_to4(dt, d, E, s, n, bfc); break;
AMP__NEON_INLINE void amp__cvt_to4(amp_dtype dt, void *d, amp_dtype st, const void *s, size_t n, int bfc) {
  AMP__DTYPE_VSWITCH(dt, AMP__CVT_D4_)
}
static void amp__cvt_neon(void *d, amp_dtype dt, const void *s, amp_dtype st, size_t n) {
  const int bfc = 0;
  AMP__DTYPE_VSWITCH(st, AMP__CVT_S4_)
}
#ifdef AMP__NEON_BFCVT
static void amp__cvt_neon_bf16(void *d, amp_dtype dt, const void *s, amp_dtype st, size_t n) {
  const int bfc = 1;
  AMP__DTYPE_VSWITCH(st, AMP__CVT_S4_)
}
#endif
#undef AMP__CVT_D4_
#undef AMP__CVT_S4_
/* Both formats with a CPU vector path; 0: not done (the FPCR is not in its default state). */
static int amp__convert_simd(void *dst, amp_dtype dt, const void *src, amp_dtype st, size_t n) {
  int l = amp__neon_level();
  if (!l) return 0;
  if (dt == st) memmove(dst, src, n * amp_dtype_size(dt));
#ifdef AMP__NEON_BFCVT
  else if (l >= 2) amp__cvt_neon_bf16(dst, dt, src, st, n);
#endif
  else amp__cvt_neon(dst, dt, src, st, n);
  return 1;
}
#endif

/* Either ISA's vector paths (x86 or NEON). */
#if defined(AMP__X86_SIMD) || defined(AMP__NEON_SIMD)
#define AMP__CPU_SIMD 1
#else
static int amp__cpu_simd(void) { return 0; }
#endif

static int amp__simd_on = -1; /* -1: not decided yet */

AMPDEF int amp_simd_active(void) {
  int on = AMP__ALOAD(&amp__simd_on);
  if (on < 0) { on = amp__cpu_simd(); AMP__ASTORE(&amp__simd_on, on); }
  return on;
}
AMPDEF void amp_simd_enable(int on) { AMP__ASTORE(&amp__simd_on, on ? amp__cpu_simd() : 0); }

static void amp__convert_any(void *dst, amp_dtype dt, const void *src, amp_dtype st, size_t n) {
#ifdef AMP__CPU_SIMD
  if (amp_simd_active() && amp__dtype_cpu_vec(dt) && amp__dtype_cpu_vec(st) && amp__convert_simd(dst, dt, src, st, n))
    return;
#endif
  if (dt == st) { memmove(dst, src, n * amp_dtype_size(dt)); return; }   /* any addresses, any overlap */
  if ((uintptr_t)dst % amp_dtype_size(dt) || (uintptr_t)src % amp_dtype_size(st)) {
    /* an address the C loops may not use as an element pointer (an odd one, say): through
       aligned buffers, a chunk at a time (each chunk read before it is written: dst == src works;
       two types of one size shifted over each other come here a chunk at a time from amp_convert) */
    float bs[256], bd[256];
    size_t ds = amp_dtype_size(dt), ss = amp_dtype_size(st), done, k;
    for (done = 0; done < n; done += k) {
      k = n - done < 256 ? n - done : 256;
      memcpy(bs, (const char *)src + done * ss, k * ss);
      amp__convert_portable(bd, dt, bs, st, k);
      memcpy((char *)dst + done * ds, bd, k * ds);
    }
    return;
  }
  amp__convert_portable(dst, dt, src, st, n);
}

AMPDEF amp_status amp_convert(void *dst, amp_dtype dst_type, const void *src, amp_dtype src_type, size_t n) {
  size_t ds = amp_dtype_size(dst_type), ss = amp_dtype_size(src_type);
  uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
  if (!ds) return amp__dtype_check("amp_convert", "dst_type", dst_type);
  if (!ss) return amp__dtype_check("amp_convert", "src_type", src_type);
  if (n == 0) return AMP_OK;
  if (!dst) return amp__fail(AMP_ERR_ARG, "amp_convert: dst is NULL with n = %zu", n);
  if (!src) return amp__fail(AMP_ERR_ARG, "amp_convert: src is NULL with n = %zu", n);
  if (n > SIZE_MAX / 4) return amp__fail(AMP_ERR_ARG, "amp_convert: n = %zu is too large", n);
  if (ds != ss && d0 < s0 + n * ss && s0 < d0 + n * ds)
    return amp__fail(AMP_ERR_ARG, "amp_convert: dst %p (%s) and src %p (%s) overlap and their element sizes differ",
                     dst, amp__dtype_name(dst_type), src, amp__dtype_name(src_type));
  if (dst_type != src_type && d0 != s0 && d0 < s0 + n * ss && s0 < d0 + n * ds) {
    /* two formats of one size (f16 <-> bf16, E4M3 <-> E5M2) between shifted, overlapping buffers:
       convert from a copy, one chunk at a time, walking away from the side the writes move towards
       (as memmove does), so no element is overwritten before it has been read. */
    float tmp[512];   /* 2048 bytes, aligned for any element */
    size_t done = 0, room = sizeof tmp / ss;
    while (done < n) {
      size_t k = n - done < room ? n - done : room;
      size_t at = d0 < s0 ? done : n - done - k;
      memcpy(tmp, (const char *)src + at * ss, k * ss);
      amp__convert_any((char *)dst + at * ds, dst_type, tmp, src_type, k);
      done += k;
    }
    return AMP_OK;
  }
  amp__convert_any(dst, dst_type, src, src_type, n);
  return AMP_OK;
}

/* ---- fp8 bulk loops (host): f32 -> E4M3/E5M2 saturating, as amp_convert casts into fp8
   (TransformerEngine and torchao cast so), and back; amp_convert takes f16/bf16 <-> fp8 through f32
   blocks (f16 and bf16 widen exactly, so that is the f32 conversion of the same value; fp8 ->
   f16/bf16 is exact).
   AVX-512 and AVX2 kernels chosen as amp_convert chooses (amp_simd_active, amp__isa), the portable
   loops elsewhere; all give the scalar functions' bits (tests/test_fp8_exhaustive.c checks every
   f32 input at every level). Any addresses work; dst and src must not overlap. amp_convert reaches
   them through the rows' bulk loops (amp__e4m3_to_f32 ...). */
/* The portable loops: the scalar functions per element (branch-free: they vectorise where the
   target has variable shifts); elements read and written through memcpy, so any address works. */
static void amp__f32_to_fp8_portable(amp_fp8 *d, const void *s, size_t n, int e5m2) {
  size_t i;
  const char *p = (const char *)s;
  if (e5m2) for (i = 0; i < n; i++) { float x; memcpy(&x, p + 4 * i, 4); d[i] = amp_f32_to_e5m2(x, 1); }
  else for (i = 0; i < n; i++) { float x; memcpy(&x, p + 4 * i, 4); d[i] = amp_f32_to_e4m3(x, 1); }
}
static void amp__fp8_to_f32_portable(void *d, const amp_fp8 *s, size_t n, int e5m2) {
  size_t i;
  char *p = (char *)d;
  if (e5m2) for (i = 0; i < n; i++) { float x = amp_e5m2_to_f32(s[i]); memcpy(p + 4 * i, &x, 4); }
  else for (i = 0; i < n; i++) { float x = amp_e4m3_to_f32(s[i]); memcpy(p + 4 * i, &x, 4); }
}

/* The vector loops' fp8 codes -> f32 (x86 and NEON), amp_e4m3_to_f32 / amp_e5m2_to_f32 lane by
   lane. E5M2: the f16 conversion of the code shifted up 8, which amp_f16_to_f32 matches. E4M3
   goes through f16 too: its code sign-extended to 16 bits and shifted up 7, bit 14 cleared, is the
   f16 of its value / 256 (the exponent's bias moves from 7 to 15; a subnormal code lands on the f16
   subnormal with the same mantissa), so the f16 conversion (exact: vcvtph2ps ignores DAZ, FCVTL
   never flushes) and * 256 (exact) give its value; the NaN codes (0x7f, 0xff) come out as +-480 and
   take the scalar's NaN bits by an xor. */
#define AMP__E4M3_NANFIX 0x3c300000   /* 480's bits ^ 0x7fc00000 */
#ifdef AMP__X86_SIMD
AMP__EXACT_BEGIN
/* 8 lanes of f32 bits -> the 8 fp8 codes without their signs, in the lanes (0 .. the largest
   code; NaN lanes hold a number above 127): amp_f32_to_e4m3 (M 3, B 7, largest code 0x7e) or
   amp_f32_to_e5m2 (M 2, B 15, largest 0x7b) with saturate 1, once amp__fp8_codes32 has put the signs
   in and made bytes of them by signed saturation (NaN's large numbers become 0x7f).
   - Normal results: amp__fp8_round's integer steps, t = |x| + c + the lowest kept bit, then the
     code t >> cut; on max(|x|, the smallest normal 2^(1-B)), so that a lane below it gives the
     smallest normal's code 2^M. t grows with |x| (inf included), so min(t, the largest t of the
     largest code) saturates. Adding a constant w in place of c takes every NaN lane past 2^32:
     they wrap around to small numbers, the min (its bound moved by w - c too) leaves them
     alone, and adding c - w after it makes them large again.
   - Subnormal results: |x| in units of the smallest subnormal 2^(1-B-M), rounded to an integer:
     a multiply by 2^(B+M-1) (exact: a power of two on a normal float), vroundps to nearest even
     (the rounding is in the instruction, so MXCSR's mode does not matter) and an exact convert.
     Below 2^(1-B) that is at most 2^M, the right code; above, the value in those small units is
     never below the code (codes grow by 2^M a binade, the value doubles), and past 2^31 the
     convert gives 0x80000000, above every code: so the smaller of the two results is the code.
     f32 subnormal inputs give 0 either way (flush-to-zero / denormals-are-zero change nothing). */
AMP__AVX2_INLINE __m256i amp__fp8_enc8(__m256i u, int e5m2) {
  const int M = e5m2 ? 2 : 3, B = e5m2 ? 15 : 7, cut = 23 - M, top = e5m2 ? 0x7b : 0x7e;
  const int c = (1 << (cut - 1)) - 1 - ((127 - B) << 23), w = -0x7f800001;   /* w: 2^32 - (inf + 1) */
  __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i an = _mm256_max_epu32(a, _mm256_set1_epi32((128 - B) << 23));
  __m256i t = _mm256_add_epi32(_mm256_add_epi32(an, _mm256_set1_epi32(w)), _mm256_and_si256(_mm256_srli_epi32(an, cut), _mm256_set1_epi32(1)));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_min_epu32(t, _mm256_set1_epi32((top << cut) + (1 << cut) - 1 - c + w)),
                                                 _mm256_set1_epi32(c - w)), cut);
  __m256 units = _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(_mm256_set1_epi32((126 + B + M) << 23)));
  return _mm256_min_epu32(r, _mm256_cvttps_epi32(_mm256_round_ps(units, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
}
/* The signs, on 16-bit lanes (half the work of doing it on 32): the codes of two encodes packed
   by signed saturation (they all fit: NaN's numbers are below 0x800), and the f32 bits they came
   from packed the same way, which keeps each one's sign; 128 off where that is negative, so that
   the byte pack below gives code - 128 = code | 0x80. A NaN stays above 127 whatever its sign
   (the toolkit drops a NaN's sign). */
AMP__AVX2_INLINE __m256i amp__fp8_sign16(__m256i r0, __m256i r1, __m256i u0, __m256i u1) {
  __m256i neg = _mm256_srai_epi16(_mm256_packs_epi32(u0, u1), 15);   /* all ones where negative */
  return _mm256_sub_epi16(_mm256_packs_epi32(r0, r1), _mm256_and_si256(neg, _mm256_set1_epi16(128)));
}
/* 32 f32 (the bits of four 8-lane vectors) -> their 32 fp8 codes in order: four encodes, signed
   on 16-bit lanes and packed to bytes; the packs interleave 128-bit halves, the permute restores
   order. */
AMP__AVX2_INLINE __m256i amp__fp8_codes32(__m256i u0, __m256i u1, __m256i u2, __m256i u3, int e5m2) {
  __m256i b = _mm256_packs_epi16(amp__fp8_sign16(amp__fp8_enc8(u0, e5m2), amp__fp8_enc8(u1, e5m2), u0, u1),
                                 amp__fp8_sign16(amp__fp8_enc8(u2, e5m2), amp__fp8_enc8(u3, e5m2), u2, u3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
/* 8 f32 (bits) -> their 8 codes in the low 8 bytes (amp__fp8_codes32 for one vector: the other
   three lanes-of-codes are zeros, which stay 0). */
AMP__AVX2_INLINE __m128i amp__fp8_codes8(__m256i u, int e5m2) {
  const __m256i z = _mm256_setzero_si256();
  __m256i b = _mm256_packs_epi16(amp__fp8_sign16(amp__fp8_enc8(u, e5m2), z, u, z), z);
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}
AMP__AVX2_INLINE __m256i amp__ld8i(const char *p) { return _mm256_loadu_si256((const __m256i *)p); }
AMP__AVX2_INLINE void amp__fp8_enc32(amp_fp8 *d, const char *s, int e5m2) {
  _mm256_storeu_si256((__m256i *)d, amp__fp8_codes32(amp__ld8i(s), amp__ld8i(s + 32), amp__ld8i(s + 64), amp__ld8i(s + 96), e5m2));
}
/* k < 64 elements (a head or a tail) through a buffer, 32 at a time. */
AMP__AVX2_INLINE void amp__fp8_enc_part8(amp_fp8 *d, const char *s, size_t k, int e5m2) {
  char bs[128];
  amp_fp8 bd[32];
  size_t j, m;
  for (j = 0; j < k; j += m) {
    m = k - j < 32 ? k - j : 32;
    memset(bs, 0, sizeof bs);
    memcpy(bs, s + 4 * j, m * 4);
    amp__fp8_enc32(bd, bs, e5m2);
    memcpy(d + j, bd, m);
  }
}
/* Large outputs stream (amp__nt_head: a head up to a 64-byte boundary first), as amp_convert's
   loops do: the stores then skip reading the destination lines in, a sixth of the traffic. Those
   loops are also arranged for memory: at a few dozen instructions a line, the encode left the
   source loads waiting on memory (AVX-512: about two thirds of the f32 -> f16 loop's rate in
   bytes, measured on a 2-core Xeon VM), so each step loads the next block before it encodes this
   one, and asks for the source 8 KiB ahead into L2 and, on Intel cores, 2 KiB ahead into L1
   (prefetcht1, prefetcht0): about nine tenths there (bench_convert's fp8 lines). On a 2-core
   AMD Zen 5 VM the L1 requests cost more than they brought (amp_quantize: 0.84 of the f16 loop's
   bytes with them, 0.92 without; medians of 8 alternating runs), so other CPUs make only the L2
   ones. */
AMP__AVX2_INLINE void amp__fp8_prefetch(const char *p, size_t bytes, int l1) {
  size_t b;
  for (b = 0; b < bytes; b += 64) {
    _mm_prefetch(p + 8192 + b, _MM_HINT_T1);
    if (l1) _mm_prefetch(p + 2048 + b, _MM_HINT_T0);
  }
}
#define AMP__FP8_PF_L1 ((amp__cpu_features() & AMP__CPU_INTEL) != 0)
AMP__AVX2_INLINE void amp__f32_to_fp8_loop8(amp_fp8 *d, const void *src, size_t n, int e5m2) {
  const char *s = (const char *)src;
  int nt;
  size_t i = amp__nt_head(d, 1, n, &nt);
  if (i) amp__fp8_enc_part8(d, s, i, e5m2);
  if (nt && i + 32 + 2048 <= n) {
    const int l1 = AMP__FP8_PF_L1;
    __m256i u0 = amp__ld8i(s + 4 * i), u1 = amp__ld8i(s + 4 * i + 32), u2 = amp__ld8i(s + 4 * i + 64), u3 = amp__ld8i(s + 4 * i + 96);
    for (; i + 64 + 2048 <= n; i += 32) {
      const char *p = s + 4 * i;
      __m256i v0 = amp__ld8i(p + 128), v1 = amp__ld8i(p + 160), v2 = amp__ld8i(p + 192), v3 = amp__ld8i(p + 224);
      amp__fp8_prefetch(p, 128, l1);
      _mm256_stream_si256((__m256i *)(d + i), amp__fp8_codes32(u0, u1, u2, u3, e5m2));
      u0 = v0; u1 = v1; u2 = v2; u3 = v3;
    }
  }
  if (nt) {
    for (; i + 32 <= n; i += 32)
      _mm256_stream_si256((__m256i *)(d + i), amp__fp8_codes32(amp__ld8i(s + 4 * i), amp__ld8i(s + 4 * i + 32), amp__ld8i(s + 4 * i + 64),
                                                               amp__ld8i(s + 4 * i + 96), e5m2));
    _mm_sfence();
  } else
    for (; i + 32 <= n; i += 32) amp__fp8_enc32(d + i, s + 4 * i, e5m2);
  if (i < n) amp__fp8_enc_part8(d + i, s + 4 * i, n - i, e5m2);
}
/* 8 fp8 codes -> 8 f32 (the vector decode above). */
AMP__AVX2_INLINE __m256 amp__fp8_dec8(const amp_fp8 *s, int e5m2) {
  __m128i b = _mm_loadl_epi64((const __m128i *)s), w, nan;
  if (e5m2) return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(b), 8));
  w = _mm_cvtepi8_epi16(b);
  nan = _mm_cmpeq_epi16(_mm_slli_epi16(w, 9), _mm_set1_epi16((short)0xfe00));   /* the low 7 bits all ones */
  return _mm256_castsi256_ps(_mm256_xor_si256(
      _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16((short)0xbfff))),
                                        _mm256_set1_ps(256.0f))),
      _mm256_and_si256(_mm256_cvtepi16_epi32(nan), _mm256_set1_epi32(AMP__E4M3_NANFIX))));
}
AMP__AVX2_INLINE void amp__fp8_dec32(char *d, const amp_fp8 *s, int e5m2, int nt) {
  __m256 a = amp__fp8_dec8(s, e5m2), b = amp__fp8_dec8(s + 8, e5m2), c = amp__fp8_dec8(s + 16, e5m2),
         e = amp__fp8_dec8(s + 24, e5m2);
  amp__st8_f32(d, a, nt); amp__st8_f32(d + 32, b, nt); amp__st8_f32(d + 64, c, nt); amp__st8_f32(d + 96, e, nt);
}
/* k < 32 codes through a buffer. */
AMP__AVX2_INLINE void amp__fp8_dec_part8(char *d, const amp_fp8 *s, size_t k, int e5m2) {
  amp_fp8 bs[32];
  char bd[128];
  memset(bs, 0, sizeof bs);
  memcpy(bs, s, k);
  amp__fp8_dec32(bd, bs, e5m2, 0);
  memcpy(d, bd, k * 4);
}
/* Large outputs stream (amp__nt_head), as amp_convert's other loops do. */
AMP__AVX2_INLINE void amp__fp8_to_f32_loop8(void *dst, const amp_fp8 *s, size_t n, int e5m2) {
  char *d = (char *)dst;
  int nt;
  size_t i = amp__nt_head(dst, 4, n, &nt);
  if (i) amp__fp8_dec_part8(d, s, i, e5m2);
  for (; i + 32 <= n; i += 32) amp__fp8_dec32(d + 4 * i, s + i, e5m2, nt);
  if (nt) _mm_sfence();
  if (i < n) amp__fp8_dec_part8(d + 4 * i, s + i, n - i, e5m2);
}

/* 16 lanes (AVX-512): the same codes from the same steps, with lane masks where AVX2 takes the
   max and the min for the subnormal results. Those are a float add here: |x| + 2^(24-B-M), a
   number whose last bit is worth the smallest subnormal, leaves |x| rounded in units of it as the
   low bits of the sum (the sum stays in that number's binade below 2^(1-B)); the add rounds to
   nearest even by its embedded rounding, whatever MXCSR says, and f32 subnormal inputs give 0
   with or without denormals-are-zero. Only the lanes below 2^(1-B) take it. (NaN is found by the
   integer wrap, not by a float compare: under -ffast-math clang turns an unordered compare into
   an ordered one.) The sign goes in here, on the 32-bit lanes (a compare and a masked subtract
   measured faster than amp__fp8_sign16's way at this width): 128 off in the lanes whose bits are
   at most -inf's as a signed number, the negative numbers but not the NaNs. */
AMP__AVX512_INLINE __m512i amp__fp8_enc16(__m512i u, int e5m2) {
  const int M = e5m2 ? 2 : 3, B = e5m2 ? 15 : 7, cut = 23 - M, top = e5m2 ? 0x7b : 0x7e;
  const int c = (1 << (cut - 1)) - 1 - ((127 - B) << 23), w = -0x7f800001;
  const __m512i magic = _mm512_set1_epi32((151 - B - M) << 23);   /* 2^(24-B-M) */
  __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 odd = _mm512_test_epi32_mask(a, _mm512_set1_epi32(1 << cut));   /* the lowest kept bit */
  __m512i t = _mm512_mask_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(w)), odd, a, _mm512_set1_epi32(w + 1));
  __m512 sum = _mm512_add_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(magic), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_min_epu32(t, _mm512_set1_epi32((top << cut) + (1 << cut) - 1 - c + w)),
                                                 _mm512_set1_epi32(c - w)), cut);
  r = _mm512_mask_sub_epi32(r, _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32((128 - B) << 23)), _mm512_castps_si512(sum), magic);
  return _mm512_mask_sub_epi32(r, _mm512_cmple_epi32_mask(u, _mm512_set1_epi32(-0x800000)), r, _mm512_set1_epi32(128));
}
/* 64 f32 (the bits of four 16-lane vectors) -> their 64 fp8 codes in order: four encodes packed to
   bytes by signed saturation as in amp__fp8_codes32 (the packs interleave the four 128-bit
   quarters; the permute restores order). */
AMP__AVX512_INLINE __m512i amp__fp8_codes64(__m512i u0, __m512i u1, __m512i u2, __m512i u3, int e5m2) {
  __m512i b = _mm512_packs_epi16(_mm512_packs_epi32(amp__fp8_enc16(u0, e5m2), amp__fp8_enc16(u1, e5m2)),
                                 _mm512_packs_epi32(amp__fp8_enc16(u2, e5m2), amp__fp8_enc16(u3, e5m2)));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), b);
}
/* 16 f32 -> their 16 codes as bytes (signed saturation makes NaN's large numbers 0x7f, as the packs do). */
AMP__AVX512_INLINE __m128i amp__fp8_codes16(__m512 y, int e5m2) {
  return _mm512_cvtsepi32_epi8(amp__fp8_enc16(_mm512_castps_si512(y), e5m2));
}
AMP__AVX512_INLINE __m512i amp__ld16i(const float *p, size_t k) { return _mm512_castps_si512(amp__ld16f(p, amp__mask16(k))); }
/* The first k (<= 64) of 64 f32 -> fp8, ordinary stores: lanes beyond k are not read (they load
   as 0) and not written. */
AMP__AVX512_INLINE void amp__fp8_enc64(amp_fp8 *d, const float *s, size_t k, int e5m2) {
  __m512i b = amp__fp8_codes64(amp__ld16i(s, k), amp__ld16i(s + 16, k > 16 ? k - 16 : 0), amp__ld16i(s + 32, k > 32 ? k - 32 : 0),
                               amp__ld16i(s + 48, k > 48 ? k - 48 : 0), e5m2);
  if (k >= 64) _mm512_storeu_si512(d, b);
  else _mm512_mask_storeu_epi8(d, (__mmask64)((1ull << k) - 1u), b);
}
AMP__AVX512_INLINE void amp__f32_to_fp8_loop16(amp_fp8 *d, const void *src, size_t n, int e5m2) {
  const float *s = (const float *)src;   /* only loaded through loadu intrinsics: any address */
  int nt;
  size_t i = amp__nt_head(d, 1, n, &nt);
  if (i) amp__fp8_enc64(d, s, i, e5m2);
  if (nt && i + 64 + 2048 <= n) {   /* arranged for memory as amp__f32_to_fp8_loop8 */
    const int l1 = AMP__FP8_PF_L1;
    __m512i u0 = amp__ld16i(s + i, 16), u1 = amp__ld16i(s + i + 16, 16), u2 = amp__ld16i(s + i + 32, 16), u3 = amp__ld16i(s + i + 48, 16);
    for (; i + 128 + 2048 <= n; i += 64) {
      const char *p = (const char *)(s + i);
      __m512i v0 = amp__ld16i(s + i + 64, 16), v1 = amp__ld16i(s + i + 80, 16), v2 = amp__ld16i(s + i + 96, 16), v3 = amp__ld16i(s + i + 112, 16);
      amp__fp8_prefetch(p, 256, l1);
      _mm512_stream_si512((__m512i *)(d + i), amp__fp8_codes64(u0, u1, u2, u3, e5m2));
      u0 = v0; u1 = v1; u2 = v2; u3 = v3;
    }
  }
  if (nt) {
    for (; i + 64 <= n; i += 64)
      _mm512_stream_si512((__m512i *)(d + i), amp__fp8_codes64(amp__ld16i(s + i, 16), amp__ld16i(s + i + 16, 16), amp__ld16i(s + i + 32, 16),
                                                               amp__ld16i(s + i + 48, 16), e5m2));
    _mm_sfence();
  } else
    for (; i + 64 <= n; i += 64) amp__fp8_enc64(d + i, s + i, 64, e5m2);
  if (i < n) amp__fp8_enc64(d + i, s + i, n - i, e5m2);
}
/* The same on 16 lanes (amp__fp8_dec8). */
AMP__AVX512_INLINE __m512 amp__fp8_dec16(__m128i b, int e5m2) {
  __m256i w;
  __m512i x;
  __mmask16 nan;
  if (e5m2) return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
  w = _mm256_cvtepi8_epi16(b);
  nan = _mm256_cmpeq_epi16_mask(_mm256_slli_epi16(w, 9), _mm256_set1_epi16((short)0xfe00));   /* the low 7 bits all ones */
  x = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16((short)0xbfff))),
                                        _mm512_set1_ps(256.0f)));
  return _mm512_castsi512_ps(_mm512_mask_xor_epi32(x, nan, x, _mm512_set1_epi32(AMP__E4M3_NANFIX)));
}
AMP__AVX512_INLINE void amp__fp8_to_f32_loop16(void *dst, const amp_fp8 *s, size_t n, int e5m2) {
  float *d = (float *)dst;   /* only stored through storeu / stream intrinsics */
  int nt;
  size_t i = amp__nt_head(dst, 4, n, &nt);   /* large outputs stream, as amp_convert's other loops */
  if (i) amp__st16f(d, amp__fp8_dec16(_mm_maskz_loadu_epi8(amp__mask16(i), s), e5m2), amp__mask16(i));
  for (; i + 16 <= n; i += 16) amp__st16_f32(d + i, amp__fp8_dec16(_mm_loadu_si128((const __m128i *)(s + i)), e5m2), 0xffff, nt);
  if (nt) _mm_sfence();
  if (i < n) {
    __mmask16 k = amp__mask16(n - i);
    amp__st16f(d + i, amp__fp8_dec16(_mm_maskz_loadu_epi8(k, s + i), e5m2), k);
  }
}

/* One kernel per direction, format and level (the format a constant in each). */
#define AMP__FP8_KERNELS(NAME, E5M2) \
  static AMP__AVX2 void amp__cvt_f32_to_##NAME##_avx2(void *d, const void *s, size_t n) { \
    amp__f32_to_fp8_loop8((amp_fp8 *)d, s, n, E5M2); \
  } \
  static AMP__AVX512 void amp__cvt_f32_to_##NAME##_avx512(void *d, const void *s, size_t n) { \
    amp__f32_to_fp8_loop16((amp_fp8 *)d, s, n, E5M2); \
  } \
  static AMP__AVX2 void amp__cvt_##NAME##_to_f32_avx2(void *d, const void *s, size_t n) { \
    amp__fp8_to_f32_loop8(d, (const amp_fp8 *)s, n, E5M2); \
  } \
  static AMP__AVX512 void amp__cvt_##NAME##_to_f32_avx512(void *d, const void *s, size_t n) { \
    amp__fp8_to_f32_loop16(d, (const amp_fp8 *)s, n, E5M2); \
  }
AMP__FP8_KERNELS(e4m3, 0)
AMP__FP8_KERNELS(e5m2, 1)
#undef AMP__FP8_KERNELS
AMP__EXACT_END
#endif

#ifdef AMP__NEON_SIMD
/* NEON (AArch64): the fp8 casts on 4 lanes. Into fp8: amp__fp8_round and amp_f32_to_e4m3 /
   amp_f32_to_e5m2 (saturate 1) step for step on the lanes (integer adds, variable shifts, compares
   and selects: no float arithmetic, so neither the FPCR nor a compiler's flags can move a bit).
   Out of fp8: amp_e4m3_to_f32's steps (its m * 2^-9 an exact multiply of normal floats) and E5M2
   as FCVTL of the code shifted up (amp_e5m2_to_f32 is amp_f16_to_f32 of it, which amp__ld4_f16
   gives while the FPCR is in the state amp__neon_level accepts). Whole blocks of 16 elements; a
   tail through the portable loops. */
#define AMP__U4(c) vdupq_n_u32((uint32_t)(c))
AMP__NEON_INLINE uint32x4_t amp__fp8_enc4(uint32x4_t u, int e5m2) {
  const uint32_t M = e5m2 ? 2u : 3u, B = e5m2 ? 15u : 7u, cut = 23u - M;
  const int32x4_t ncut = vdupq_n_s32(-(int)cut);
  uint32x4_t a = vandq_u32(u, AMP__U4(0x7fffffffu));
  /* amp__fp8_round's normal result: (a - ((127 - B) << 23) + 2^(cut-1) - 1 + the lowest kept bit) >> cut */
  uint32x4_t normal = vshlq_u32(vaddq_u32(vaddq_u32(a, AMP__U4((1u << (cut - 1u)) - 1u - ((127u - B) << 23))),
                                          vandq_u32(vshlq_u32(a, ncut), AMP__U4(1u))), ncut);
  /* its subnormal result: m >> sh rounded by the same carry, sh outside 1..30 made 31 */
  uint32x4_t m = vorrq_u32(vandq_u32(a, AMP__U4(0x7fffffu)), AMP__U4(0x800000u));
  uint32x4_t sh = vsubq_u32(AMP__U4(151u - B - M), vshrq_n_u32(a, 23)), sub, r;
  int32x4_t nsh;
  sh = vbslq_u32(vcltq_u32(vsubq_u32(sh, AMP__U4(1u)), AMP__U4(30u)), sh, AMP__U4(31u));
  nsh = vnegq_s32(vreinterpretq_s32_u32(sh));
  sub = vaddq_u32(vaddq_u32(m, vsubq_u32(vshlq_u32(AMP__U4(1u), vreinterpretq_s32_u32(vsubq_u32(sh, AMP__U4(1u)))), AMP__U4(1u))),
                  vandq_u32(vshlq_u32(m, nsh), AMP__U4(1u)));
  sub = vshlq_u32(sub, nsh);
  r = vbslq_u32(vcltq_u32(a, AMP__U4((128u - B) << 23)), sub, normal);
  r = vbslq_u32(vcgtq_u32(a, AMP__U4(AMP__FP8_OVER(e5m2))), AMP__U4(e5m2 ? 0x7bu : 0x7eu), r);   /* saturate */
  r = vorrq_u32(r, vandq_u32(vshrq_n_u32(u, 24), AMP__U4(0x80u)));   /* the sign */
  return vbslq_u32(vcgtq_u32(a, AMP__U4(0x7f800000u)), AMP__U4(0x7fu), r);   /* NaN: 0x7f */
}
/* 16 f32 (the bits of four vectors) -> their 16 codes in order */
AMP__NEON_INLINE uint8x16_t amp__fp8_codes16n(uint32x4_t u0, uint32x4_t u1, uint32x4_t u2, uint32x4_t u3, int e5m2) {
  uint16x8_t lo = vcombine_u16(vmovn_u32(amp__fp8_enc4(u0, e5m2)), vmovn_u32(amp__fp8_enc4(u1, e5m2)));
  uint16x8_t hi = vcombine_u16(vmovn_u32(amp__fp8_enc4(u2, e5m2)), vmovn_u32(amp__fp8_enc4(u3, e5m2)));
  return vcombine_u8(vmovn_u16(lo), vmovn_u16(hi));
}
AMP__NEON_INLINE uint32x4_t amp__ld4u(const char *p) { return vreinterpretq_u32_u8(vld1q_u8((const uint8_t *)p)); }
AMP__NEON_INLINE void amp__f32_to_fp8_loop4(amp_fp8 *d, const void *src, size_t n, int e5m2) {
  const char *s = (const char *)src;
  size_t i;
  for (i = 0; i + 16 <= n; i += 16)
    vst1q_u8(d + i, amp__fp8_codes16n(amp__ld4u(s + 4 * i), amp__ld4u(s + 4 * i + 16), amp__ld4u(s + 4 * i + 32),
                                      amp__ld4u(s + 4 * i + 48), e5m2));
  if (i < n) amp__f32_to_fp8_portable(d + i, s + 4 * i, n - i, e5m2);
}
/* 4 codes (in the low bytes of u16 lanes) -> 4 f32, as amp__fp8_dec8 (FCVTL from f16 is exact and
   never flushes) */
AMP__NEON_INLINE float32x4_t amp__fp8_dec4(uint16x4_t c16, int e5m2) {
  int16x4_t w;
  uint32x4_t nan;
  float32x4_t x;
  if (e5m2) return vcvt_f32_f16(vreinterpret_f16_u16(vshl_n_u16(c16, 8)));
  w = vshr_n_s16(vreinterpret_s16_u16(vshl_n_u16(c16, 8)), 8);   /* the code sign-extended */
  nan = vreinterpretq_u32_s32(vmovl_s16(vreinterpret_s16_u16(vceq_u16(vshl_n_u16(vreinterpret_u16_s16(w), 9), vdup_n_u16(0xfe00u)))));
  x = vmulq_f32(vcvt_f32_f16(vreinterpret_f16_u16(vand_u16(vshl_n_u16(vreinterpret_u16_s16(w), 7), vdup_n_u16(0xbfffu)))),
                vdupq_n_f32(256.0f));
  return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(x), vandq_u32(nan, AMP__U4(AMP__E4M3_NANFIX))));
}
AMP__NEON_INLINE void amp__fp8_to_f32_loop4(void *dst, const amp_fp8 *s, size_t n, int e5m2) {
  char *d = (char *)dst;
  size_t i;
  for (i = 0; i + 16 <= n; i += 16) {
    uint8x16_t b = vld1q_u8(s + i);
    uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_u8(vget_high_u8(b));
    vst1q_u8((uint8_t *)(d + 4 * i), vreinterpretq_u8_f32(amp__fp8_dec4(vget_low_u16(lo), e5m2)));
    vst1q_u8((uint8_t *)(d + 4 * i + 16), vreinterpretq_u8_f32(amp__fp8_dec4(vget_high_u16(lo), e5m2)));
    vst1q_u8((uint8_t *)(d + 4 * i + 32), vreinterpretq_u8_f32(amp__fp8_dec4(vget_low_u16(hi), e5m2)));
    vst1q_u8((uint8_t *)(d + 4 * i + 48), vreinterpretq_u8_f32(amp__fp8_dec4(vget_high_u16(hi), e5m2)));
  }
  if (i < n) amp__fp8_to_f32_portable(d + 4 * i, s + i, n - i, e5m2);
}
static AMP__EXACT_FP void amp__fp8_bulk_neon(void *d, const void *s, size_t n, int e5m2, int decode) {
  if (decode) {
    if (e5m2) amp__fp8_to_f32_loop4(d, (const amp_fp8 *)s, n, 1);
    else amp__fp8_to_f32_loop4(d, (const amp_fp8 *)s, n, 0);
  } else {
    if (e5m2) amp__f32_to_fp8_loop4((amp_fp8 *)d, s, n, 1);
    else amp__f32_to_fp8_loop4((amp_fp8 *)d, s, n, 0);
  }
}
#endif

/* decode 0: f32 -> fp8, saturating; decode 1: fp8 -> f32, exact. e5m2 0: E4M3, 1: E5M2. Any
   addresses. */
static void amp__fp8_bulk(void *d, const void *s, size_t n, int e5m2, int decode) {
#ifdef AMP__X86_SIMD
  typedef void (*kernel)(void *, const void *, size_t);
  static const kernel k[2][2][2] = { /* [decode][e5m2][AVX-512] */
                                     { { amp__cvt_f32_to_e4m3_avx2, amp__cvt_f32_to_e4m3_avx512 },
                                       { amp__cvt_f32_to_e5m2_avx2, amp__cvt_f32_to_e5m2_avx512 } },
                                     { { amp__cvt_e4m3_to_f32_avx2, amp__cvt_e4m3_to_f32_avx512 },
                                       { amp__cvt_e5m2_to_f32_avx2, amp__cvt_e5m2_to_f32_avx512 } }
  };
  if (amp_simd_active()) { k[decode != 0][e5m2 != 0][amp__isa() >= 2](d, s, n); return; }
#elif defined(AMP__NEON_SIMD)
  if (amp_simd_active() && amp__neon_level()) { amp__fp8_bulk_neon(d, s, n, e5m2, decode); return; }
#endif
  if (decode) amp__fp8_to_f32_portable(d, (const amp_fp8 *)s, n, e5m2);
  else amp__f32_to_fp8_portable((amp_fp8 *)d, s, n, e5m2);
}

/* amp_quantize's portable loop: x * scale cast to fp8 and the amax of x (a maximum of |x|'s bits
   as unsigned integers: a NaN is above inf there, so it wins and stays). */
static void amp__quantize_portable(amp_fp8 *q, int e5m2, const void *x, amp_dtype xt, size_t n, float scale,
                                   float *amax) {
  uint32_t a = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    float v = amp__load(x, xt, i);
    uint32_t b = amp__f32_bits(v) & 0x7fffffffu;
    a = b > a ? b : a;
    if (q) q[i] = e5m2 ? amp_f32_to_e5m2(amp__fmul(v, scale), 1) : amp_f32_to_e4m3(amp__fmul(v, scale), 1);
  }
  if (amax) *amax = amp__amax_join(*amax, amp__bits_f32(a));
}
/* amp_quantize_ex's portable loop (counts non-NULL): the same steps, and each element's class
   (amp__fp8_cast_class) added up: counts[0] += n, then saturated, flushed, NaN inputs. A loop of
   its own, so the one above stays the code it was. */
static void amp__quantize_counted(amp_fp8 *q, int e5m2, const void *x, amp_dtype xt, size_t n, float scale,
                                  float *amax, uint64_t *counts) {
  uint64_t c[3] = { 0, 0, 0 };
  uint32_t a = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    float v = amp__load(x, xt, i), y = amp__fmul(v, scale);
    uint32_t b = amp__f32_bits(v) & 0x7fffffffu;
    unsigned k = amp__fp8_cast_class(v, y, e5m2);
    a = b > a ? b : a;
    c[0] += k & 1u; c[1] += (k >> 1) & 1u; c[2] += k >> 2;
    if (q) q[i] = e5m2 ? amp_f32_to_e5m2(y, 1) : amp_f32_to_e4m3(y, 1);
  }
  if (amax) *amax = amp__amax_join(*amax, amp__bits_f32(a));
  counts[0] += n; counts[1] += c[0]; counts[2] += c[1]; counts[3] += c[2];
}

/* One kernel per level, without and with counts: AMP__DTYPE_VSWITCH's branches with AMP__QK_, which
   calls the kernel's loop as AMP__QK_CALL(type, e5m2) (each kernel defines it) with the input type
   and the format as constants in each branch, so the loads inline and the encode's constants (its
   shifts, bounds and bias) are built once, outside the loop, not on every vector as with a format
   read at run time. (x86 and NEON alike.) */
#define AMP__QK_(E, N, T, S) \
  if (e5m2) AMP__QK_CALL(E, 1); \
  else AMP__QK_CALL(E, 0); \
  break;

/* ---- amp_quantize's vector loops (host): the cast of x * scale into fp8 and the amax of x in one
   pass. The same steps as amp__quantize_portable (above): one IEEE multiply, the
   encode above (amp__fp8_enc8 / enc16), and |x|'s bits maximised as unsigned integers (a NaN is
   above inf there, so it wins, as in the scalar loop). The loops with counts (amp_quantize_ex)
   are functions of their own below, so these stay the code they were. ---- */
#ifdef AMP__X86_SIMD
AMP__EXACT_BEGIN
/* The body of both loops below on four vectors v0 .. v3 of x at element i, W-bit wide (512: 64
   elements, 256: 32): |x|'s bits into the running unsigned maximum a, then x * k encoded by CODES
   (amp__fp8_codes64 / _codes32) and written by store, where there is a q. */
#define AMP__QUANT4_(W, CODES, v0, v1, v2, v3, store) \
  a = _mm##W##_max_epu32(a, _mm##W##_and_si##W(_mm##W##_castps_si##W(v0), abs)); \
  a = _mm##W##_max_epu32(a, _mm##W##_and_si##W(_mm##W##_castps_si##W(v1), abs)); \
  a = _mm##W##_max_epu32(a, _mm##W##_and_si##W(_mm##W##_castps_si##W(v2), abs)); \
  a = _mm##W##_max_epu32(a, _mm##W##_and_si##W(_mm##W##_castps_si##W(v3), abs)); \
  if (q) store((__m##W##i *)(q + i), CODES(_mm##W##_castps_si##W(_mm##W##_mul_ps(v0, k)), \
                _mm##W##_castps_si##W(_mm##W##_mul_ps(v1, k)), _mm##W##_castps_si##W(_mm##W##_mul_ps(v2, k)), \
                _mm##W##_castps_si##W(_mm##W##_mul_ps(v3, k)), e5m2));
/* k (<= 16) elements under a lane mask: the lanes outside it load as 0 and are not stored */
AMP__AVX512_INLINE __m512i amp__quantize_part16(amp_fp8 *q, int e5m2, const char *x, amp_dtype xt, size_t k, __m512 scale,
                                                __m512i a) {
  __mmask16 m = amp__mask16(k);
  __m512 v = amp__ld16(xt, x, m);
  if (q) _mm_mask_storeu_epi8(q, m, amp__fp8_codes16(_mm512_mul_ps(v, scale), e5m2));
  return _mm512_max_epu32(a, _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}
/* 64 at a time (four encodes, one store; a large output streamed past the cache from a 64-byte
   aligned start, as amp_convert's loops), the head before that start and the tail 16 at a time. */
AMP__AVX512_INLINE void amp__quantize_loop16(amp_fp8 *q, int e5m2, const char *x, amp_dtype xt, size_t n, float scale,
                                             float *amax) {
  const size_t sz = amp_dtype_size(xt);
  const __m512 k = _mm512_set1_ps(scale);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff);
  __m512i a = _mm512_setzero_si512();
  int nt = 0;
  size_t i = 0, head = q ? amp__nt_head(q, 1, n, &nt) : 0;
  for (; i < head; i += 16)
    a = amp__quantize_part16(q + i, e5m2, x + i * sz, xt, head - i < 16 ? head - i : 16, k, a);
  i = head;
  if (nt && i + 64 + 2048 <= n) {   /* a stream, arranged for memory as the casts' loops: each step
                                       loads the next 64 before it encodes these, the source asked
                                       for 8 KiB ahead into L2 and (Intel) 2 KiB ahead into L1 */
    const int l1 = AMP__FP8_PF_L1;
    __m512 v0 = amp__ld16(xt, x + i * sz, 0xffff), v1 = amp__ld16(xt, x + (i + 16) * sz, 0xffff),
           v2 = amp__ld16(xt, x + (i + 32) * sz, 0xffff), v3 = amp__ld16(xt, x + (i + 48) * sz, 0xffff);
    for (; i + 128 + 2048 <= n; i += 64) {
      const char *p = x + i * sz;
      __m512 w0 = amp__ld16(xt, x + (i + 64) * sz, 0xffff), w1 = amp__ld16(xt, x + (i + 80) * sz, 0xffff),
             w2 = amp__ld16(xt, x + (i + 96) * sz, 0xffff), w3 = amp__ld16(xt, x + (i + 112) * sz, 0xffff);
      amp__fp8_prefetch(p, 64 * sz, l1);
      AMP__QUANT4_(512, amp__fp8_codes64, v0, v1, v2, v3, _mm512_stream_si512)
      v0 = w0; v1 = w1; v2 = w2; v3 = w3;
    }
  }
  for (; i + 64 <= n; i += 64) {
    __m512 v0 = amp__ld16(xt, x + i * sz, 0xffff), v1 = amp__ld16(xt, x + (i + 16) * sz, 0xffff),
           v2 = amp__ld16(xt, x + (i + 32) * sz, 0xffff), v3 = amp__ld16(xt, x + (i + 48) * sz, 0xffff);
    if (nt) { AMP__QUANT4_(512, amp__fp8_codes64, v0, v1, v2, v3, _mm512_stream_si512) }
    else { AMP__QUANT4_(512, amp__fp8_codes64, v0, v1, v2, v3, _mm512_storeu_si512) }
  }
  if (nt) _mm_sfence();
  for (; i < n; i += 16) a = amp__quantize_part16(q ? q + i : NULL, e5m2, x + i * sz, xt, n - i < 16 ? n - i : 16, k, a);
  if (amax) *amax = amp__amax_join(*amax, amp__bits_f32(_mm512_reduce_max_epu32(a)));
}
AMP__AVX2_INLINE void amp__quantize_loop8(amp_fp8 *q, int e5m2, const char *x, amp_dtype xt, size_t n, float scale,
                                          float *amax) {
  const size_t sz = amp_dtype_size(xt);
  const __m256 k = _mm256_set1_ps(scale);
  const __m256i abs = _mm256_set1_epi32(0x7fffffff);
  __m256i a = _mm256_setzero_si256();
  uint32_t lanes[8], top = 0;
  int nt = 0;
  size_t i = q ? amp__nt_head(q, 1, n, &nt) : 0, j;
  if (i) amp__quantize_portable(q, e5m2, x, xt, i, scale, amax);   /* the head before a streamed start */
  if (nt && i + 32 + 2048 <= n) {   /* a stream, arranged as amp__f32_to_fp8_loop8: each step loads
                                       the next 32 before it encodes these, the source asked for
                                       8 KiB ahead into L2 and (Intel) 2 KiB ahead into L1 */
    const int l1 = AMP__FP8_PF_L1;
    __m256 v0 = amp__ld8(xt, x + i * sz), v1 = amp__ld8(xt, x + (i + 8) * sz), v2 = amp__ld8(xt, x + (i + 16) * sz),
           v3 = amp__ld8(xt, x + (i + 24) * sz);
    for (; i + 64 + 2048 <= n; i += 32) {
      const char *p = x + i * sz;
      __m256 w0 = amp__ld8(xt, x + (i + 32) * sz), w1 = amp__ld8(xt, x + (i + 40) * sz),
             w2 = amp__ld8(xt, x + (i + 48) * sz), w3 = amp__ld8(xt, x + (i + 56) * sz);
      amp__fp8_prefetch(p, 32 * sz, l1);
      AMP__QUANT4_(256, amp__fp8_codes32, v0, v1, v2, v3, _mm256_stream_si256)
      v0 = w0; v1 = w1; v2 = w2; v3 = w3;
    }
  }
  for (; i + 32 <= n; i += 32) {
    __m256 v0 = amp__ld8(xt, x + i * sz), v1 = amp__ld8(xt, x + (i + 8) * sz), v2 = amp__ld8(xt, x + (i + 16) * sz),
           v3 = amp__ld8(xt, x + (i + 24) * sz);
    if (nt) { AMP__QUANT4_(256, amp__fp8_codes32, v0, v1, v2, v3, _mm256_stream_si256) }
    else { AMP__QUANT4_(256, amp__fp8_codes32, v0, v1, v2, v3, _mm256_storeu_si256) }
  }
#undef AMP__QUANT4_
  if (nt) _mm_sfence();
  _mm256_storeu_si256((__m256i *)lanes, a);
  for (j = 0; j < 8; j++) top = lanes[j] > top ? lanes[j] : top;
  if (amax) *amax = amp__amax_join(*amax, amp__bits_f32(top));
  if (i < n) amp__quantize_portable(q ? q + i : NULL, e5m2, x + i * sz, xt, n - i, scale, amax);   /* the tail */
}
/* amp_quantize_ex's vector loops: the same cast and amax, and amp__fp8_cast_class on the lanes:
   unsigned compares of |x| and |y| bits into lane masks, each mask's popcount added (the portable
   loop's counts exactly; the AVX2 tail through amp__quantize_counted, as the tail above). */
AMP__AVX512_INLINE void amp__quantize_count16(amp_fp8 *q, int e5m2, const char *x, amp_dtype xt, size_t n, float scale,
                                              float *amax, uint64_t *counts) {
  const size_t sz = amp_dtype_size(xt);
  const __m512 k = _mm512_set1_ps(scale);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000), one = _mm512_set1_epi32(1);
  const __m512i over1 = _mm512_set1_epi32((int)(AMP__FP8_OVER(e5m2) + 1u)),
                span = _mm512_set1_epi32((int)(0x7f800000u - AMP__FP8_OVER(e5m2))),
                tiny = _mm512_set1_epi32((int)AMP__FP8_TINY(e5m2));
  __m512i a = _mm512_setzero_si512();
  uint64_t ns = 0, nf = 0, nn = 0;
  size_t i;
  for (i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : amp__mask16(n - i);
    __m512 v = amp__ld16(xt, x + i * sz, m), y = _mm512_mul_ps(v, k);   /* lanes outside m load as 0 */
    __m512i ax = _mm512_and_si512(_mm512_castps_si512(v), abs), ay = _mm512_and_si512(_mm512_castps_si512(y), abs);
    __mmask16 sat = _mm512_mask_cmplt_epu32_mask(m, _mm512_sub_epi32(ay, over1), span);   /* over < |y| <= inf */
    __mmask16 live = _mm512_mask_cmplt_epu32_mask(m, _mm512_sub_epi32(ax, one), inf);     /* x nonzero, not NaN */
    __mmask16 fl = _mm512_mask_cmple_epu32_mask(live, ay, tiny);
    __mmask16 nan = _mm512_mask_cmpgt_epu32_mask(m, ax, inf);
    a = _mm512_max_epu32(a, ax);
    ns += (uint64_t)__builtin_popcount((unsigned)sat);
    nf += (uint64_t)__builtin_popcount((unsigned)fl);
    nn += (uint64_t)__builtin_popcount((unsigned)nan);
    if (q) _mm_mask_storeu_epi8(q + i, m, amp__fp8_codes16(y, e5m2));
  }
  if (amax) *amax = amp__amax_join(*amax, amp__bits_f32(_mm512_reduce_max_epu32(a)));
  counts[0] += n; counts[1] += ns; counts[2] += nf; counts[3] += nn;
}
AMP__AVX2_INLINE void amp__quantize_count8(amp_fp8 *q, int e5m2, const char *x, amp_dtype xt, size_t n, float scale,
                                           float *amax, uint64_t *counts) {
  const size_t sz = amp_dtype_size(xt);
  const __m256 k = _mm256_set1_ps(scale);
  const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i over = _mm256_set1_epi32((int)AMP__FP8_OVER(e5m2)), tiny = _mm256_set1_epi32((int)AMP__FP8_TINY(e5m2));
  __m256i a = _mm256_setzero_si256();
  uint32_t lanes[8], top = 0;
  uint64_t ns = 0, nf = 0, nn = 0;
  size_t i, j;
  for (i = 0; i + 32 <= n; i += 32) {
    __m256i r[4];
    unsigned sat = 0, fl = 0, nan = 0;   /* the 32 lanes' masks, 8 bits per vector */
    for (j = 0; j < 4; j++) {   /* signed compares: both sides are below 2^31 */
      __m256 v = amp__ld8(xt, x + (i + 8 * j) * sz), y = _mm256_mul_ps(v, k);
      __m256i ax = _mm256_and_si256(_mm256_castps_si256(v), abs), ay = _mm256_and_si256(_mm256_castps_si256(y), abs);
      __m256i s = _mm256_andnot_si256(_mm256_cmpgt_epi32(ay, inf), _mm256_cmpgt_epi32(ay, over));
      __m256i nm = _mm256_cmpgt_epi32(ax, inf);
      __m256i f = _mm256_andnot_si256(_mm256_or_si256(nm, _mm256_cmpgt_epi32(ay, tiny)),
                                      _mm256_cmpgt_epi32(ax, _mm256_setzero_si256()));
      a = _mm256_max_epu32(a, ax);
      r[j] = _mm256_castps_si256(y);
      sat |= (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(s)) << (8 * j);
      fl |= (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(f)) << (8 * j);
      nan |= (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nm)) << (8 * j);
    }
    ns += (uint64_t)__builtin_popcount(sat);
    nf += (uint64_t)__builtin_popcount(fl);
    nn += (uint64_t)__builtin_popcount(nan);
    if (q) _mm256_storeu_si256((__m256i *)(q + i), amp__fp8_codes32(r[0], r[1], r[2], r[3], e5m2));
  }
  _mm256_storeu_si256((__m256i *)lanes, a);
  for (j = 0; j < 8; j++) top = lanes[j] > top ? lanes[j] : top;
  if (amax) *amax = amp__amax_join(*amax, amp__bits_f32(top));
  counts[0] += i; counts[1] += ns; counts[2] += nf; counts[3] += nn;
  if (i < n) amp__quantize_counted(q ? q + i : NULL, e5m2, x + i * sz, xt, n - i, scale, amax, counts);   /* the tail */
}
/* One kernel per level, without and with counts (AMP__QK_, above). */
#define AMP__QK_CALL(E, F) amp__quantize_loop16(q, F, (const char *)x, E, n, scale, amax)
static AMP__AVX512 void amp__quantize_avx512(amp_fp8 *q, int e5m2, const void *x, amp_dtype xt, size_t n, float scale,
                                             float *amax) {
  AMP__DTYPE_VSWITCH(xt, AMP__QK_)
}
#undef AMP__QK_CALL
#define AMP__QK_CALL(E, F) amp__quantize_loop8(q, F, (const char *)x, E, n, scale, amax)
static AMP__AVX2 void amp__quantize_avx2(amp_fp8 *q, int e5m2, const void *x, amp_dtype xt, size_t n, float scale,
                                         float *amax) {
  AMP__DTYPE_VSWITCH(xt, AMP__QK_)
}
#undef AMP__QK_CALL
#define AMP__QK_CALL(E, F) amp__quantize_count16(q, F, (const char *)x, E, n, scale, amax, counts)
static AMP__AVX512 void amp__quantize_counted_avx512(amp_fp8 *q, int e5m2, const void *x, amp_dtype xt, size_t n,
                                                     float scale, float *amax, uint64_t *counts) {
  AMP__DTYPE_VSWITCH(xt, AMP__QK_)
}
#undef AMP__QK_CALL
#define AMP__QK_CALL(E, F) amp__quantize_count8(q, F, (const char *)x, E, n, scale, amax, counts)
static AMP__AVX2 void amp__quantize_counted_avx2(amp_fp8 *q, int e5m2, const void *x, amp_dtype xt, size_t n,
                                                 float scale, float *amax, uint64_t *counts) {
  AMP__DTYPE_VSWITCH(xt, AMP__QK_)
}
#undef AMP__QK_CALL
AMP__EXACT_END
#endif

#ifdef AMP__NEON_SIMD
/* amp_quantize's loops on NEON: 16 elements a round, x * scale one FMUL a lane (the scalar loop's
   amp__fmul: a product nothing follows but the integer encode, so nothing to contract), the codes
   from amp__fp8_codes16n, |x|'s bits maximised as unsigned integers; with counts,
   amp__fp8_cast_class on the lanes (unsigned compares into masks, each mask lane -1, added up in
   u64 lanes). The tail through the portable loops, as the AVX2 ones. */
AMP__NEON_INLINE void amp__quantize_loop4(amp_fp8 *q, int e5m2, const char *x, amp_dtype xt, size_t n, float scale,
                                          float *amax, uint64_t *counts) {
  const size_t sz = amp_dtype_size(xt);
  const float32x4_t k = vdupq_n_f32(scale);
  const uint32x4_t abs = AMP__U4(0x7fffffffu), inf = AMP__U4(0x7f800000u);
  const uint32x4_t over = AMP__U4(AMP__FP8_OVER(e5m2)), tiny = AMP__U4(AMP__FP8_TINY(e5m2));
  uint32x4_t a = AMP__U4(0u);
  uint64x2_t ns = vdupq_n_u64(0u), nf = ns, nn = ns;
  size_t i;
  int j;
  for (i = 0; i + 16 <= n; i += 16) {
    uint32x4_t r[4], cs = AMP__U4(0u), cf = cs, cn = cs;
    for (j = 0; j < 4; j++) {
      float32x4_t v = amp__ld4(xt, x + (i + 4 * (size_t)j) * sz), y = vmulq_f32(v, k);
      uint32x4_t ax = vandq_u32(vreinterpretq_u32_f32(v), abs);
      a = vmaxq_u32(a, ax);
      r[j] = vreinterpretq_u32_f32(y);
      if (counts) {
        uint32x4_t ay = vandq_u32(r[j], abs);
        cs = vsubq_u32(cs, vandq_u32(vcgtq_u32(ay, over), vcleq_u32(ay, inf)));
        cf = vsubq_u32(cf, vandq_u32(vcltq_u32(vsubq_u32(ax, AMP__U4(1u)), inf), vcleq_u32(ay, tiny)));
        cn = vsubq_u32(cn, vcgtq_u32(ax, inf));
      }
    }
    if (counts) { ns = vpadalq_u32(ns, cs); nf = vpadalq_u32(nf, cf); nn = vpadalq_u32(nn, cn); }
    if (q) vst1q_u8(q + i, amp__fp8_codes16n(r[0], r[1], r[2], r[3], e5m2));
  }
  if (amax) *amax = amp__amax_join(*amax, amp__bits_f32(vmaxvq_u32(a)));
  if (counts) {
    counts[0] += i; counts[1] += vaddvq_u64(ns); counts[2] += vaddvq_u64(nf); counts[3] += vaddvq_u64(nn);
    if (i < n) amp__quantize_counted(q ? q + i : NULL, e5m2, x + i * sz, xt, n - i, scale, amax, counts);   /* the tail */
  } else if (i < n) {
    amp__quantize_portable(q ? q + i : NULL, e5m2, x + i * sz, xt, n - i, scale, amax);
  }
}
#define AMP__QK_CALL(E, F) amp__quantize_loop4(q, F, (const char *)x, E, n, scale, amax, counts)
static AMP__EXACT_FP void amp__quantize_neon(amp_fp8 *q, int e5m2, const void *x, amp_dtype xt, size_t n, float scale,
                                             float *amax, uint64_t *counts) {
  AMP__DTYPE_VSWITCH(xt, AMP__QK_)
}
#undef AMP__QK_CALL
#undef AMP__U4
#endif
#undef AMP__QK_

/* ------------------------------------------------------------------------------------------
   Implementation: op-list policy
   ------------------------------------------------------------------------------------------ */

/* The built-in lists, each name once (see the manual above for where the two anchors disagree). */
static const char *const amp__builtin_white[] = {
  /* PyTorch CUDA autocast, lower_precision_fp */
  "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
  "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
  "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "multi_dot",
  "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
  "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
  /* Paddle white (static fp16_lists and paddle.amp amp_lists) */
  "matmul_v2", "mul", "max_pool2d_with_index", "fused_gemm_epilogue", "fused_attention",
  "fused_feedforward", "fake_quantize_dequantize_abs_max",
  "fake_quantize_dequantize_moving_average_abs_max"
};
static const char *const amp__builtin_black[] = {
  /* PyTorch CUDA autocast, fp32 and fp32_set_opt_dtype (norm: fp32_append_dtype) */
  "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
  "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm",
  "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
  "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
  "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
  "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist",
  "cdist", "renorm", "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d",
  "upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
  "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
  "upsample_bicubic2d", "_upsample_bicubic2d_aa", "prod", "softmax", "log_softmax", "cumprod",
  "cumsum", "linalg_vector_norm", "linalg_matrix_norm", "sum", "norm",
  /* PyTorch: cross_entropy_loss decomposes into log_softmax + nll_loss (both fp32);
     binary_cross_entropy is refused under autocast, f32 is the nearest safe answer */
  "cross_entropy_loss", "binary_cross_entropy",
  /* Paddle black (static fp16_lists, paddle.amp FP16_BLACK_LIST and EXTRA_BLACK_LIST) */
  "square", "mean", "cos_sim", "softmax_with_cross_entropy", "sigmoid_cross_entropy_with_logits",
  "c_softmax_with_cross_entropy", "cross_entropy", "cross_entropy2", "reduce_sum", "atanh",
  "tanh_shrink", "reduce_mean", "reduce_prod", "pnorm", "softmin", "log_loss", "hsigmoid_loss",
  "margin_cross_entropy", "lookup_table", "lookup_table_v2", "scatter", "linear_interp_v2",
  "nearest_interp_v2", "bilinear_interp_v2", "bicubic_interp_v2", "trilinear_interp_v2"
};
static const char *const amp__builtin_gray[] = {
  /* PyTorch CUDA autocast, promote (cat and stack promote too, outside the list macro) */
  "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
  "tensordot", "scatter_add", "cat", "stack",
  /* Paddle gray (static fp16_lists), plus the unsuffixed names reshape and transpose */
  "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div", "elementwise_max",
  "elementwise_min", "elementwise_pow", "elementwise_mod", "elementwise_floordiv", "batch_norm",
  "tanh", "sigmoid", "top_k", "pool2d", "pool3d", "dropout", "relu", "relu6", "leaky_relu",
  "soft_relu", "flatten2", "unstack", "uniform_random", "uniform_random_batch_size_like",
  "gaussian_random", "gaussian_random_batch_size_like", "slice", "rank", "scale", "transpose2",
  "reshape2", "transpose", "reshape", "gather", "fill_constant", "get_tensor_from_selected_rows",
  "sign", "cast", "fused_bn_add_activation", "c_identity", "c_concat", "c_allreduce_sum", "concat",
  "split", "fused_multi_transformer"
};

/* PURE keeps these in f32 whatever their list (Paddle O2, apex O2 keep_batchnorm_fp32). */
static const char *const amp__norm_ops[] = { "batch_norm", "layer_norm", "group_norm", "instance_norm" };

typedef struct amp__op { char *name; amp_list list; } amp__op;

struct amp_policy {
  amp_mode mode;
  amp_dtype low;
  amp__op *ops;      /* sorted by amp__name_cmp, so decide() is a binary search with no allocation */
  size_t n, cap;
};

static int amp__lower(int c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

/* Case-insensitive order on ASCII letters; every other byte compares as itself (unsigned). */
static int amp__name_cmp(const char *a, const char *b) {
  for (;; a++, b++) {
    int x = amp__lower((unsigned char)*a), y = amp__lower((unsigned char)*b);
    if (x != y || x == 0) return x - y;
  }
}

/* The index of op in p->ops, or where it would go (*found = 0). */
static size_t amp__policy_find(const amp_policy *p, const char *op, int *found) {
  size_t lo = 0, hi = p->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = amp__name_cmp(p->ops[mid].name, op);
    if (c == 0) { *found = 1; return mid; }
    if (c < 0) lo = mid + 1; else hi = mid;
  }
  *found = 0;
  return lo;
}

static char *amp__strdup(const char *s) {
  size_t k = strlen(s) + 1;
  char *d = (char *)AMP_MALLOC(k);
  if (d) memcpy(d, s, k);
  return d;
}

static const char *amp__mode_name(amp_mode m) {
  switch (m) { AMP__MODE_LIST(AMP__ENUM_CASE) }
  return "unknown";
}

AMPDEF const char *amp_list_name(amp_list l) {
  switch (l) { AMP__LIST_LIST(AMP__LABEL_CASE) }
  return NULL;
}

/* One pending change: op goes onto list (AMP_LIST_NONE: off every list). */
typedef struct amp__change { const char *name; amp_list list; } amp__change;

/* Applies the changes in order, all or nothing: every allocation (name copies, a bigger array)
   happens before the first change, so a failure leaves p as it was. */
static amp_status amp__policy_apply(amp_policy *p, const amp__change *ch, size_t n, const char *fn) {
  char **copy;
  size_t i, need = 0;
  int found;
  if (n == 0) return AMP_OK;
  copy = (char **)AMP_MALLOC(n * sizeof *copy);
  if (!copy) return amp__fail(AMP_ERR_NOMEM, "%s: out of memory for %zu changes", fn, n);
  for (i = 0; i < n; i++) copy[i] = NULL;
  for (i = 0; i < n; i++) {
    if (ch[i].list == AMP_LIST_NONE) continue;
    amp__policy_find(p, ch[i].name, &found);
    if (found) continue;
    if (!(copy[i] = amp__strdup(ch[i].name))) goto nomem;
    need++;
  }
  if (p->n + need > p->cap) {
    size_t cap = p->cap * 2 > p->n + need ? p->cap * 2 : p->n + need;
    amp__op *ops = (amp__op *)AMP_MALLOC(cap * sizeof *ops);
    if (!ops) goto nomem;
    if (p->n) memcpy(ops, p->ops, p->n * sizeof *ops);
    if (p->ops) AMP_FREE(p->ops);
    p->ops = ops; p->cap = cap;
  }
  for (i = 0; i < n; i++) {
    size_t k = amp__policy_find(p, ch[i].name, &found);
    if (found && ch[i].list == AMP_LIST_NONE) {
      AMP_FREE(p->ops[k].name);
      memmove(p->ops + k, p->ops + k + 1, (p->n - k - 1) * sizeof *p->ops);
      p->n--;
    } else if (found) {
      p->ops[k].list = ch[i].list;
    } else if (ch[i].list != AMP_LIST_NONE) {
      memmove(p->ops + k + 1, p->ops + k, (p->n - k) * sizeof *p->ops);
      p->ops[k].name = copy[i]; p->ops[k].list = ch[i].list;
      copy[i] = NULL;
      p->n++;
    }
  }
  for (i = 0; i < n; i++) if (copy[i]) AMP_FREE(copy[i]);   /* an op named twice in one batch */
  AMP_FREE(copy);
  return AMP_OK;
nomem:
  for (i = 0; i < n; i++) if (copy[i]) AMP_FREE(copy[i]);
  AMP_FREE(copy);
  return amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
}

AMPDEF void amp_policy_destroy(amp_policy *p) {
  size_t i;
  if (!p) return;
  for (i = 0; i < p->n; i++) AMP_FREE(p->ops[i].name);
  if (p->ops) AMP_FREE(p->ops);
  AMP_FREE(p);
}

AMPDEF amp_status amp_policy_create(amp_policy **out, amp_mode mode, amp_dtype low) {
  const size_t nw = sizeof amp__builtin_white / sizeof *amp__builtin_white;
  const size_t nb = sizeof amp__builtin_black / sizeof *amp__builtin_black;
  const size_t ng = sizeof amp__builtin_gray / sizeof *amp__builtin_gray;
  amp__change *ch;
  amp_policy *p;
  amp_status st;
  size_t i, n = 0;
  if (!out) return amp__fail(AMP_ERR_ARG, "amp_policy_create: out is NULL");
  if ((int)mode < (int)AMP_MODE_MIXED || (int)mode > (int)AMP_MODE_KEEP)
    return amp__fail(AMP_ERR_ARG, "amp_policy_create: mode %d is not an amp_mode (AMP_MODE_MIXED .. AMP_MODE_KEEP)",
                     (int)mode);
  if (!amp__dtype_row(low) || !amp__dtype_row(low)->compute || amp__dtype_row(low)->size >= 4)   /* a 16-bit compute row */
    return amp__fail(AMP_ERR_ARG, "amp_policy_create: low %d (%s) must be a compute format narrower than f32 "
                     "(AMP_F16 or AMP_BF16)", (int)low, amp__dtype_name(low));
  p = (amp_policy *)AMP_MALLOC(sizeof *p);
  ch = (amp__change *)AMP_MALLOC((nw + nb + ng) * sizeof *ch);
  if (!p || !ch) {
    if (p) AMP_FREE(p);
    if (ch) AMP_FREE(ch);
    return amp__fail(AMP_ERR_NOMEM, "amp_policy_create: out of memory");
  }
  p->mode = mode; p->low = low; p->ops = NULL; p->n = p->cap = 0;
  for (i = 0; i < nw; i++) { ch[n].name = amp__builtin_white[i]; ch[n++].list = AMP_LIST_WHITE; }
  for (i = 0; i < nb; i++) { ch[n].name = amp__builtin_black[i]; ch[n++].list = AMP_LIST_BLACK; }
  for (i = 0; i < ng; i++) { ch[n].name = amp__builtin_gray[i]; ch[n++].list = AMP_LIST_GRAY; }
  st = amp__policy_apply(p, ch, n, "amp_policy_create");
  AMP_FREE(ch);
  if (st != AMP_OK) { amp_policy_destroy(p); return st; }
  *out = p;
  return AMP_OK;
}

AMPDEF amp_list amp_policy_list(const amp_policy *p, const char *op) {
  size_t k;
  int found;
  if (!p) { amp__fail(AMP_ERR_ARG, "amp_policy_list: p is NULL"); return AMP_LIST_NONE; }
  if (!op || !*op) { amp__fail(AMP_ERR_ARG, "amp_policy_list: op is %s", op ? "empty" : "NULL"); return AMP_LIST_NONE; }
  k = amp__policy_find(p, op, &found);
  return found ? p->ops[k].list : AMP_LIST_NONE;
}

AMPDEF amp_status amp_policy_set(amp_policy *p, const char *op, amp_list list) {
  amp__change ch;
  if (!p) return amp__fail(AMP_ERR_ARG, "amp_policy_set: p is NULL");
  if (!op || !*op) return amp__fail(AMP_ERR_ARG, "amp_policy_set: op is %s", op ? "empty" : "NULL");
  if (!amp_list_name(list))
    return amp__fail(AMP_ERR_ARG,
                     "amp_policy_set: list %d for \"%.64s\" is not an amp_list (AMP_LIST_NONE .. AMP_LIST_GRAY)",
                     (int)list, op);
  ch.name = op; ch.list = list;
  return amp__policy_apply(p, &ch, 1, "amp_policy_set");
}

AMPDEF amp_status amp_policy_customize(amp_policy *p, const char *const *white, size_t n_white,
                                       const char *const *black, size_t n_black) {
  amp__change *ch;
  amp_status st;
  size_t i, j;
  if (!p) return amp__fail(AMP_ERR_ARG, "amp_policy_customize: p is NULL");
  if (!white && n_white)
    return amp__fail(AMP_ERR_ARG, "amp_policy_customize: white is NULL with n_white = %zu", n_white);
  if (!black && n_black)
    return amp__fail(AMP_ERR_ARG, "amp_policy_customize: black is NULL with n_black = %zu", n_black);
  for (i = 0; i < n_white; i++)
    if (!white[i] || !*white[i])
      return amp__fail(AMP_ERR_ARG, "amp_policy_customize: white[%zu] is %s", i, white[i] ? "empty" : "NULL");
  for (i = 0; i < n_black; i++)
    if (!black[i] || !*black[i])
      return amp__fail(AMP_ERR_ARG, "amp_policy_customize: black[%zu] is %s", i, black[i] ? "empty" : "NULL");
  /* Paddle: "The given custom_white_list overlaps custom_black_list with < op >!" */
  for (i = 0; i < n_white; i++)
    for (j = 0; j < n_black; j++)
      if (amp__name_cmp(white[i], black[j]) == 0)
        return amp__fail(AMP_ERR_ARG,
                         "amp_policy_customize: \"%.64s\" is in both custom lists (white[%zu] and black[%zu])",
                         white[i], i, j);
  if (n_white + n_black == 0) return AMP_OK;
  ch = (amp__change *)AMP_MALLOC((n_white + n_black) * sizeof *ch);
  if (!ch) return amp__fail(AMP_ERR_NOMEM, "amp_policy_customize: out of memory");
  for (i = 0; i < n_white; i++) { ch[i].name = white[i]; ch[i].list = AMP_LIST_WHITE; }
  for (i = 0; i < n_black; i++) { ch[n_white + i].name = black[i]; ch[n_white + i].list = AMP_LIST_BLACK; }
  st = amp__policy_apply(p, ch, n_white + n_black, "amp_policy_customize");
  AMP_FREE(ch);
  return st;
}

AMPDEF amp_dtype amp_policy_decide(const amp_policy *p, const char *op, const amp_dtype *inputs, size_t n_inputs) {
  size_t i, k, n_f32 = 0;
  amp_list list = AMP_LIST_NONE;
  int found, mixed = 0;
  if (!p) { amp__fail(AMP_ERR_ARG, "amp_policy_decide: p is NULL (answering AMP_F32)"); return AMP_F32; }
  if (!op || !*op) {
    amp__fail(AMP_ERR_ARG, "amp_policy_decide: op is %s (answering AMP_F32)", op ? "empty" : "NULL");
    return AMP_F32;
  }
  if (!inputs && n_inputs) {
    amp__fail(AMP_ERR_ARG, "amp_policy_decide(\"%.64s\"): inputs is NULL with n_inputs = %zu (answering AMP_F32)", op,
              n_inputs);
    return AMP_F32;
  }
  for (i = 0; i < n_inputs; i++) {
    if (!amp__dtype_row(inputs[i])) {
      amp__fail(AMP_ERR_ARG, "amp_policy_decide(\"%.64s\"): inputs[%zu] = %d is not an amp_dtype (answering AMP_F32)",
                op, i, (int)inputs[i]);
      return AMP_F32;
    }
    n_f32 += inputs[i] == AMP_F32;
    mixed |= inputs[i] != inputs[0];
  }
  switch (p->mode) {
    case AMP_MODE_FORCE_LOW: return p->low;
    case AMP_MODE_FORCE_F32: return AMP_F32;
    case AMP_MODE_KEEP:
      return n_inputs == 0 || mixed ? AMP_F32 : inputs[0];   /* all one type: that type; mixed: f32 */
    default: break;
  }
  k = amp__policy_find(p, op, &found);
  if (found) list = p->ops[k].list;
  if (p->mode == AMP_MODE_PURE) {
    if (list == AMP_LIST_BLACK) return AMP_F32;
    for (i = 0; i < sizeof amp__norm_ops / sizeof *amp__norm_ops; i++)
      if (amp__name_cmp(op, amp__norm_ops[i]) == 0) return AMP_F32;
    return p->low;
  }
  if (list == AMP_LIST_WHITE) return p->low;
  if (list == AMP_LIST_BLACK || p->mode == AMP_MODE_WHITE_ONLY) return AMP_F32;
  return n_f32 ? AMP_F32 : p->low;   /* gray or unlisted follows its inputs; none: low */
}

/* Appends k bytes when they fit; *len counts them either way, so one pass also measures. */
static void amp__text_put(char *buf, size_t cap, size_t *len, const char *s, size_t k) {
  if (buf && *len + k <= cap) memcpy(buf + *len, s, k);
  *len += k;
}

/* Writes the dump text (no NUL) into buf when it fits; returns its length. */
static size_t amp__policy_text(const amp_policy *p, char *buf, size_t cap) {
  char head[160];
  size_t i, len = 0;
  int k = snprintf(head, sizeof head, "# amp_policy: mode %s, low %s, %zu ops (unlisted ops behave as gray)\n",
                   amp__mode_name(p->mode), amp__dtype_name(p->low), p->n);
  amp__text_put(buf, cap, &len, head, (size_t)k);
  for (i = 0; i < p->n; i++) {
    const char *ln = p->ops[i].list == AMP_LIST_WHITE   ? "white "
                     : p->ops[i].list == AMP_LIST_BLACK ? "black "
                                                        : "gray  ";
    const char *c;
    amp__text_put(buf, cap, &len, ln, 6);
    /* One op a line: a control byte or backslash in a name (a JSON escape can put one there) is
       written as its escape, so a name never splits its line and the text reads back unambiguously. */
    for (c = p->ops[i].name; *c; c++) {
      unsigned char u = (unsigned char)*c;
      char esc[8];
      if (u == '\\') amp__text_put(buf, cap, &len, "\\\\", 2);
      else if (u == '\n') amp__text_put(buf, cap, &len, "\\n", 2);
      else if (u == '\t') amp__text_put(buf, cap, &len, "\\t", 2);
      else if (u < 0x20 || u == 0x7f) {
        snprintf(esc, sizeof esc, "\\u%04x", u);
        amp__text_put(buf, cap, &len, esc, 6);
      } else amp__text_put(buf, cap, &len, c, 1);
    }
    amp__text_put(buf, cap, &len, "\n", 1);
  }
  return len;
}

AMPDEF amp_status amp_policy_dump(const amp_policy *p, char *buf, size_t cap, size_t *needed) {
  size_t len;
  if (!p) return amp__fail(AMP_ERR_ARG, "amp_policy_dump: p is NULL");
  if (!buf && cap) return amp__fail(AMP_ERR_ARG, "amp_policy_dump: buf is NULL with cap = %zu", cap);
  len = amp__policy_text(p, NULL, 0);
  if (needed) *needed = len + 1;
  if (!buf) return AMP_OK;
  if (cap < len + 1)
    return amp__fail(AMP_ERR_ARG, "amp_policy_dump: cap %zu is smaller than the %zu bytes needed", cap, len + 1);
  amp__policy_text(p, buf, cap);
  buf[len] = '\0';
  return AMP_OK;
}

AMPDEF amp_status amp_policy_print(const amp_policy *p, void *file) {
  FILE *f = file ? (FILE *)file : stdout;
  size_t len;
  char *buf;
  if (!p) return amp__fail(AMP_ERR_ARG, "amp_policy_print: p is NULL");
  len = amp__policy_text(p, NULL, 0);
  if (!(buf = (char *)AMP_MALLOC(len + 1)))
    return amp__fail(AMP_ERR_NOMEM, "amp_policy_print: out of memory for %zu bytes", len + 1);
  amp__policy_text(p, buf, len + 1);
  if (fwrite(buf, 1, len, f) != len || fflush(f) != 0) {
    AMP_FREE(buf);
    return amp__fail(AMP_ERR_IO, "amp_policy_print: writing %zu bytes failed", len);
  }
  AMP_FREE(buf);
  return AMP_OK;
}


/* ---- The Ascend modify_mixlist reader ----------------------------------------------------
   A parser shaped like the format: an object of at most two lists, each an object of at most
   two arrays of op-name strings. It never recurses, so no input can exhaust the stack. Names are
   decoded into one buffer of len + 1 bytes (decoding never lengthens a JSON string: the quotes
   alone pay for the NUL), so pointers into it stay valid while the document is read. */

enum { AMP__MX_BLACK_ADD = 0, AMP__MX_BLACK_REMOVE, AMP__MX_WHITE_ADD, AMP__MX_WHITE_REMOVE };
static const char *const amp__mx_what[] = { "black-list to-add", "black-list to-remove",
                                            "white-list to-add", "white-list to-remove" };

typedef struct amp__mxname { const char *name; size_t pos; int kind; } amp__mxname;

typedef struct amp__jp {
  const unsigned char *s; size_t n, i;
  char *buf; size_t blen;                 /* decoded strings, NUL-terminated */
  amp__mxname *names; size_t nn, ncap;
  const char *fn, *path;                  /* for messages */
  amp_status st;
} amp__jp;

/* The length of the valid UTF-8 sequence at s (1-4), or 0: no overlongs, no surrogates,
   nothing above U+10FFFF (RFC 3629). */
static size_t amp__utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0], lo = 0x80, hi = 0xbf;
  size_t k, i;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) k = 2;
  else if (c >= 0xe0 && c <= 0xef) { k = 3; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
  else if (c >= 0xf0 && c <= 0xf4) { k = 4; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
  else return 0;
  if (n < k || s[1] < lo || s[1] > hi) return 0;
  for (i = 2; i < k; i++) if ((s[i] & 0xc0) != 0x80) return 0;
  return k;
}

static int amp__jp_fail(amp__jp *jp, size_t pos, const char *fmt, ...) AMP__PRINTF(3, 4);
static int amp__jp_fail(amp__jp *jp, size_t pos, const char *fmt, ...) {
  char what[256];
  size_t i, line = 1, col = 1;
  va_list ap;
  for (i = 0; i < pos && i < jp->n; i++) {     /* columns count characters: skip continuation bytes */
    if (jp->s[i] == '\n') { line++; col = 1; }
    else if ((jp->s[i] & 0xc0) != 0x80) col++;
  }
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  jp->st = AMP_ERR_PARSE;
  amp__fail(AMP_ERR_PARSE, "%s: %s%sline %zu, column %zu: %s", jp->fn, jp->path ? jp->path : "",
            jp->path ? ": " : "", line, col, what);
  return -1;
}

/* "expected X" at the current position, saying what was found instead. */
static int amp__jp_expected(amp__jp *jp, const char *what) {
  unsigned c;
  if (jp->i >= jp->n) return amp__jp_fail(jp, jp->i, "unexpected end of input, expected %s", what);
  c = jp->s[jp->i];
  if (c > 0x20 && c < 0x7f) return amp__jp_fail(jp, jp->i, "expected %s, found '%c'", what, (char)c);
  return amp__jp_fail(jp, jp->i, "expected %s, found byte 0x%02x", what, c);
}

/* Skips whitespace and // comments (to the end of the line; their text must be valid UTF-8). */
static int amp__jp_ws(amp__jp *jp) {
  while (jp->i < jp->n) {
    unsigned char c = jp->s[jp->i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') { jp->i++; continue; }
    if (c != '/') break;
    if (jp->i + 1 >= jp->n || jp->s[jp->i + 1] != '/')
      return amp__jp_fail(jp, jp->i, "'/' that does not start a // comment (only // line comments are allowed)");
    jp->i += 2;
    while (jp->i < jp->n && jp->s[jp->i] != '\n') {
      size_t k = amp__utf8_len(jp->s + jp->i, jp->n - jp->i);
      if (!k) return amp__jp_fail(jp, jp->i, "invalid UTF-8 byte 0x%02x in a comment", jp->s[jp->i]);
      jp->i += k;
    }
  }
  return 0;
}

static int amp__jp_peek(amp__jp *jp, char c) { return jp->i < jp->n && jp->s[jp->i] == (unsigned char)c; }

static int amp__jp_hex4(const unsigned char *s, unsigned *out) {
  unsigned v = 0, d;
  int i;
  for (i = 0; i < 4; i++) {
    unsigned c = s[i];
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

/* Decodes the string at jp->i into jp->buf; *out points at it (NUL-terminated). */
static int amp__jp_string(amp__jp *jp, const char **out, const char *what) {
  size_t start = jp->i;
  char *d;
  if (!amp__jp_peek(jp, '"')) return amp__jp_expected(jp, what);
  jp->i++;
  d = jp->buf + jp->blen;
  *out = d;
  for (;;) {
    unsigned c;
    if (jp->i >= jp->n) return amp__jp_fail(jp, start, "string is not terminated");
    c = jp->s[jp->i];
    if (c == '"') { jp->i++; break; }
    if (c < 0x20) return amp__jp_fail(jp, jp->i, "control character 0x%02x in a string (escape it)", c);
    if (c >= 0x80) {
      size_t k = amp__utf8_len(jp->s + jp->i, jp->n - jp->i);
      if (!k) return amp__jp_fail(jp, jp->i, "invalid UTF-8 byte 0x%02x in a string", c);
      memcpy(d, jp->s + jp->i, k); d += k; jp->i += k;
      continue;
    }
    if (c != '\\') { *d++ = (char)c; jp->i++; continue; }
    if (jp->i + 1 >= jp->n) return amp__jp_fail(jp, start, "string is not terminated");
    c = jp->s[jp->i + 1];
    switch (c) {
      case '"': case '\\': case '/': *d++ = (char)c; jp->i += 2; continue;
      case 'b': *d++ = '\b'; jp->i += 2; continue;
      case 'f': *d++ = '\f'; jp->i += 2; continue;
      case 'n': *d++ = '\n'; jp->i += 2; continue;
      case 'r': *d++ = '\r'; jp->i += 2; continue;
      case 't': *d++ = '\t'; jp->i += 2; continue;
      case 'u': break;
      default:
        if (c > 0x20 && c < 0x7f) return amp__jp_fail(jp, jp->i, "invalid escape '\\%c' in a string", (char)c);
        return amp__jp_fail(jp, jp->i, "invalid escape (backslash, byte 0x%02x) in a string", c);
    }
    { /* \uXXXX, a UTF-16 unit: a high surrogate must be followed by \u and a low one */
      unsigned cp, lo;
      size_t at = jp->i;
      if (jp->n - jp->i < 6 || !amp__jp_hex4(jp->s + jp->i + 2, &cp))
        return amp__jp_fail(jp, at, "\\u must be followed by four hex digits");
      jp->i += 6;
      if (cp >= 0xdc00 && cp <= 0xdfff)
        return amp__jp_fail(jp, at, "\\u%04X is a low surrogate without a high one before it", cp);
      if (cp >= 0xd800 && cp <= 0xdbff) {
        if (jp->n - jp->i < 6 || jp->s[jp->i] != '\\' || jp->s[jp->i + 1] != 'u' ||
            !amp__jp_hex4(jp->s + jp->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
          return amp__jp_fail(jp, at, "\\u%04X is a high surrogate not followed by a \\u low surrogate", cp);
        jp->i += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      if (cp == 0) return amp__jp_fail(jp, at, "\\u0000 cannot be part of an op name");
      if (cp < 0x80) *d++ = (char)cp;
      else if (cp < 0x800) { *d++ = (char)(0xc0 | (cp >> 6)); *d++ = (char)(0x80 | (cp & 0x3f));
      } else if (cp < 0x10000) {
        *d++ = (char)(0xe0 | (cp >> 12));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *d++ = (char)(0x80 | (cp & 0x3f));
      } else {
        *d++ = (char)(0xf0 | (cp >> 18));
        *d++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *d++ = (char)(0x80 | (cp & 0x3f));
      }
    }
  }
  *d++ = '\0';
  jp->blen = (size_t)(d - jp->buf);
  return 0;
}

/* ["name", ...]: every element a non-empty string, kept with its position and kind. */
static int amp__jp_names(amp__jp *jp, int kind) {
  if (!amp__jp_peek(jp, '[')) return amp__jp_expected(jp, "'[' (an array of op names)");
  jp->i++;
  if (amp__jp_ws(jp)) return -1;
  if (amp__jp_peek(jp, ']')) { jp->i++; return 0; }
  for (;;) {
    const char *name;
    size_t pos;
    if (amp__jp_ws(jp)) return -1;
    pos = jp->i;
    if (amp__jp_string(jp, &name, "an op name (a string)")) return -1;
    if (!*name) return amp__jp_fail(jp, pos, "empty op name in %s", amp__mx_what[kind]);
    if (jp->nn == jp->ncap) {
      size_t cap = jp->ncap ? jp->ncap * 2 : 16;
      amp__mxname *nm = (amp__mxname *)AMP_MALLOC(cap * sizeof *nm);
      if (!nm) { jp->st = AMP_ERR_NOMEM; amp__fail(AMP_ERR_NOMEM, "%s: out of memory", jp->fn); return -1; }
      if (jp->nn) memcpy(nm, jp->names, jp->nn * sizeof *nm);
      if (jp->names) AMP_FREE(jp->names);
      jp->names = nm; jp->ncap = cap;
    }
    jp->names[jp->nn].name = name; jp->names[jp->nn].pos = pos; jp->names[jp->nn].kind = kind;
    jp->nn++;
    if (amp__jp_ws(jp)) return -1;
    if (amp__jp_peek(jp, ']')) { jp->i++; return 0; }
    if (!amp__jp_peek(jp, ',')) return amp__jp_expected(jp, "',' or ']'");
    jp->i++;
  }
}

/* An object whose keys are drawn from keys[0..1]; each value read by amp__jp_names (level 2) or
   by this function again (level 1). seen catches duplicate keys. */
static int amp__jp_object(amp__jp *jp, int level, int list) {
  static const char *const top[2] = { "black-list", "white-list" };
  static const char *const sub[2] = { "to-add", "to-remove" };
  const char *const *keys = level == 1 ? top : sub;
  int seen = 0;
  if (!amp__jp_peek(jp, '{'))
    return amp__jp_expected(
        jp, level == 1 ? "'{' (the mixlist object)" : "'{' (an object with \"to-add\" / \"to-remove\")");
  jp->i++;
  if (amp__jp_ws(jp)) return -1;
  if (amp__jp_peek(jp, '}')) { jp->i++; return 0; }
  for (;;) {
    const char *key;
    size_t kpos, mark = jp->blen;
    int which;
    if (amp__jp_ws(jp)) return -1;
    kpos = jp->i;
    if (amp__jp_string(jp, &key, "a key (a string)")) return -1;
    which = strcmp(key, keys[0]) == 0 ? 0 : strcmp(key, keys[1]) == 0 ? 1 : -1;
    if (which < 0)
      return amp__jp_fail(jp, kpos, "unknown key \"%.64s\" (expected \"%s\" or \"%s\")", key, keys[0], keys[1]);
    if (seen & (1 << which)) return amp__jp_fail(jp, kpos, "duplicate key \"%s\"", keys[which]);
    seen |= 1 << which;
    jp->blen = mark;                       /* the key's decoded text is no longer needed */
    if (amp__jp_ws(jp)) return -1;
    if (!amp__jp_peek(jp, ':')) return amp__jp_expected(jp, "':'");
    jp->i++;
    if (amp__jp_ws(jp)) return -1;
    if (level == 1 ? amp__jp_object(jp, 2, which) : amp__jp_names(jp, list * 2 + which)) return -1;
    if (amp__jp_ws(jp)) return -1;
    if (amp__jp_peek(jp, '}')) { jp->i++; return 0; }
    if (!amp__jp_peek(jp, ',')) return amp__jp_expected(jp, "',' or '}'");
    jp->i++;
  }
}

static int amp__mxname_cmp(const void *a, const void *b) {
  const amp__mxname *x = (const amp__mxname *)a, *y = (const amp__mxname *)b;
  int c = amp__name_cmp(x->name, y->name);
  if (c) return c;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Reads the whole document, then turns each op's entries into one change, judged against the
   policy as it was before the load (so the order of the keys never matters), then applies. */
static amp_status amp__load_mixlist(amp_policy *p, const char *json, size_t len, const char *fn, const char *path) {
  amp__jp jp;
  amp__change *ch = NULL;
  size_t i, j, nch = 0;
  amp_status st = AMP_OK;
  memset(&jp, 0, sizeof jp);
  jp.s = (const unsigned char *)json; jp.n = len; jp.fn = fn; jp.path = path;
  if (!(jp.buf = (char *)AMP_MALLOC(len + 1)))
    return amp__fail(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, len + 1);
  if (len >= 3 && jp.s[0] == 0xef && jp.s[1] == 0xbb && jp.s[2] == 0xbf) jp.i = 3;   /* UTF-8 BOM */
  if (amp__jp_ws(&jp) || amp__jp_object(&jp, 1, 0) || amp__jp_ws(&jp)) goto done;
  if (jp.i < jp.n) { amp__jp_fail(&jp, jp.i, "unexpected text after the closing '}'"); goto done; }
  if (jp.nn) qsort(jp.names, jp.nn, sizeof *jp.names, amp__mxname_cmp);
  if (jp.nn && !(ch = (amp__change *)AMP_MALLOC(jp.nn * sizeof *ch))) {
    jp.st = amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn); goto done;
  }
  for (i = 0; i < jp.nn; i = j) {   /* one group: every entry for one op, in file order */
    int has[4] = {0, 0, 0, 0}, found;
    amp_list cur = AMP_LIST_NONE, to = AMP_LIST_NONE;
    size_t k;
    for (j = i; j < jp.nn && amp__name_cmp(jp.names[j].name, jp.names[i].name) == 0; j++) {
      const amp__mxname *e = &jp.names[j];
      int other = e->kind == AMP__MX_BLACK_ADD   ? AMP__MX_WHITE_ADD
                  : e->kind == AMP__MX_WHITE_ADD ? AMP__MX_BLACK_ADD
                                                 : -1;
      int pair = e->kind ^ 1;   /* add <-> remove of the same list */
      has[e->kind] = 1;
      if (other >= 0 && has[other]) {
        amp__jp_fail(&jp, e->pos, "\"%.64s\" is in both black-list to-add and white-list to-add", e->name); goto done;
      }
      if (has[pair]) {
        amp__jp_fail(&jp, e->pos, "\"%.64s\" is in both %s and %s", e->name, amp__mx_what[pair], amp__mx_what[e->kind]);
        goto done;
      }
    }
    k = amp__policy_find(p, jp.names[i].name, &found);
    if (found) cur = p->ops[k].list;
    if (has[AMP__MX_BLACK_ADD]) to = AMP_LIST_BLACK;
    else if (has[AMP__MX_WHITE_ADD]) to = AMP_LIST_WHITE;
    else if ((has[AMP__MX_BLACK_REMOVE] && cur == AMP_LIST_BLACK) ||
             (has[AMP__MX_WHITE_REMOVE] && cur == AMP_LIST_WHITE))
      to = AMP_LIST_GRAY;
    if (to != AMP_LIST_NONE && to != cur) { ch[nch].name = jp.names[i].name; ch[nch++].list = to; }
  }
  jp.st = amp__policy_apply(p, ch, nch, fn);
done:
  st = jp.st;
  if (ch) AMP_FREE(ch);
  if (jp.names) AMP_FREE(jp.names);
  AMP_FREE(jp.buf);
  return st;
}

AMPDEF amp_status amp_policy_load_mixlist(amp_policy *p, const char *json, size_t len) {
  if (!p) return amp__fail(AMP_ERR_ARG, "amp_policy_load_mixlist: p is NULL");
  if (!json) return amp__fail(AMP_ERR_ARG, "amp_policy_load_mixlist: json is NULL (len %zu)", len);
  return amp__load_mixlist(p, json, len, "amp_policy_load_mixlist", NULL);
}

/* A whole regular file of at most cap bytes, read into a new buffer (checkpoint section, below). */
static amp_status amp__read_small_file(const char *fn, const char *path, uint64_t cap, const char *what, char **text,
                                       size_t *len);
#define AMP__MIXLIST_MAX ((uint64_t)16 << 20)   /* 16 MiB: Ascend's own lists are a few KiB */

AMPDEF amp_status amp_policy_load_mixlist_file(amp_policy *p, const char *path) {
  char *text = NULL;
  size_t len = 0;
  amp_status st;
  if (!p) return amp__fail(AMP_ERR_ARG, "amp_policy_load_mixlist_file: p is NULL");
  if (!path || !*path)
    return amp__fail(AMP_ERR_ARG, "amp_policy_load_mixlist_file: path is %s", path ? "empty" : "NULL");
  st = amp__read_small_file("amp_policy_load_mixlist_file", path, AMP__MIXLIST_MAX, "a mixlist", &text, &len);
  if (st != AMP_OK) return st;
  st = amp__load_mixlist(p, text, len, "amp_policy_load_mixlist_file", path);
  AMP_FREE(text);
  return st;
}

/* ------------------------------------------------------------------------------------------
   Implementation: devices, and the device line

   Every public function below checks its arguments, keeps the call order and writes its messages
   once, for every device, then reaches the device through one table of operations, amp__backend:
   one table for the CPU (amp__cpu_ops; its functions amp__cpu_* sit beside the code they share)
   and one for CUDA (amp__cuda_ops, each entry one call of a launcher of amp_kernels.cu, declared
   in amp_kernels.h); both tables are at the end of the implementation. Nothing above the line asks
   which device it runs on; what truly differs sits below it.
   To add an optimizer kind: its AMP_* value and a row in THE OPTIMIZER KINDS
   (AMP__OPTIM_KINDS: name, moments, defaults, coefficients, element function); the CPU loops,
   the step kernel, create, checkpoints and messages all read that list. To add a device
   operation: see the tables.

   An operation fills msg[cap] on failure (the public caller prefixes its own name) and returns
   the status; a failing operation changes nothing the caller can see. Objects hold their state in
   host fields (the mirror); a device that keeps the truth in its own memory refreshes the mirror
   in its *_pull operation, which the public getters call in one place (amp__s_pull, amp__o_pull).
   ------------------------------------------------------------------------------------------ */

/* The device operations, one list: X(return type, name, (parameters)) with each one's contract.
   It makes the members of amp__backend and fills each backend's table by name (amp__cpu_<name>,
   amp__cuda_<name>), so no slot is counted. */
#define AMP__BACKEND_OPS(X) \
  X(amp_status, sync, (amp_device *d, char *msg, size_t cap)) \
  X(void, close, (amp_device *d)) \
  /* scaler: s->pr, s->st, s->init_scale are resolved before create */ \
  X(amp_status, scaler_create, (amp_scaler *s, char *msg, size_t cap)) \
  X(void, scaler_destroy, (amp_scaler *s)) \
  /* the mirror: s->st, s->last_skipped, s->skipped from the device (pull), or from's parameters, \
     state and counts to it, the found-inf flag cleared (push: a checkpoint load, before the host \
     fields are written) */ \
  X(amp_status, scaler_pull, (amp_scaler *s, char *msg, size_t cap)) \
  X(amp_status, scaler_push, (amp_scaler *s, const amp_scaler *from, char *msg, size_t cap)) \
  /* the scale rule, closing an iteration: found_inf 1 an overflow whatever was recorded, 0 what \
     the unscales of this iteration recorded */ \
  X(amp_status, scaler_rule, (amp_scaler *s, int found_inf, char *msg, size_t cap)) \
  X(float *, scale_ptr, (amp_scaler *s)) \
  X(amp_status, scale_buffer, (amp_scaler *s, void *buf, amp_dtype t, size_t n, char *msg, size_t cap)) \
  /* optimizer: tensor i was recorded in the table (o->t[i]: w, g, n, wtype, gtype, ...): take its \
     fp32 master now, from seed (n floats on the device, bit for bit) or, seed NULL, from the model \
     copy, and zeroed moments; with a seed or a round_to, write the model copy from the master */ \
  X(amp_status, optim_add, (amp_optimizer *o, size_t i, const float *seed, char *msg, size_t cap)) \
  /* the table is complete (first unscale, amp_optimizer_master, a checkpoint): a device that \
     takes it whole builds its optimizer now and sets o->frozen */ \
  X(amp_status, optim_ready, (amp_optimizer *o, char *msg, size_t cap)) \
  X(void, optim_destroy, (amp_optimizer *o)) \
  X(amp_status, optim_set_config, (amp_optimizer *o, const amp_optim_config *c, char *msg, size_t cap)) \
  /* tensor i's grads pointer o->t[i].g was set (amp_optimizer_set_grads): a device that took the \
     table whole (o->frozen) rewrites its record */ \
  X(amp_status, optim_set_grads, (amp_optimizer *o, size_t i, char *msg, size_t cap)) \
  /* unscale + inf/NaN check + sum of squares of every grad, and the decision (norm, clip, skip; \
     an overflow ORed into the scaler). s NULL (amp_optimizer_step): the inverse scale is 1 and \
     the decision is the optimizer's alone (o->found_inf); dp is then NULL. \
     dp non-NULL (data-parallel): only this rank's {found_inf, sumsq} into a buffer of 2 \
     doubles, *dp, for the all-reduce hook, deciding nothing; then optim_unscale_finish decides \
     from the buffer as reduced. */ \
  X(amp_status, optim_unscale, (amp_optimizer *o, amp_scaler *s, double **dp, char *msg, size_t cap)) \
  X(amp_status, optim_unscale_finish, (amp_optimizer *o, amp_scaler *s, char *msg, size_t cap)) \
  /* the update, or nothing but the skipped count when an unscale of this iteration found inf/NaN \
     (s NULL: when this optimizer's last unscale did) */ \
  X(amp_status, optim_step, (amp_optimizer *o, amp_scaler *s, char *msg, size_t cap)) \
  /* o->step, grad_norm, found_inf, spike state */ \
  X(amp_status, optim_pull, (amp_optimizer *o, char *msg, size_t cap)) \
  X(amp_status, optim_stats, (amp_optimizer *o, char *msg, size_t cap))   /* o->t[i].gstat (cfg.stats on) */ \
  X(amp_status, optim_set_step, (amp_optimizer *o, long step, char *msg, size_t cap)) \
  /* checkpoint load: the spike skip count and window (CPU: nothing, the host fields are the state) */ \
  X(amp_status, optim_set_spike, (amp_optimizer *o, long spike_skips, const amp__spike_window *w, char *msg, \
                                  size_t cap)) \
  /* tensor i's master (which 0), first (1) or second (2) moment to host (to_device 0) or from it \
     (1), as kept: n floats, or a moment in another type its amp__moment_bytes bytes (host then \
     points at that many); then, for a load, the model copy written from the master (optim_write_model) */ \
  X(amp_status, optim_tensor_io, (amp_optimizer *o, size_t i, int which, float *host, int to_device, char *msg, \
                                  size_t cap)) \
  /* step: the update count the copy is written after (stochastic rounding's key) */ \
  X(amp_status, optim_write_model, (amp_optimizer *o, size_t i, long step, char *msg, size_t cap)) \
  /* fp8 scaler: f->n, len, format, cfg and the host arrays (hist 0, scales 1; cfg.stats: counts, \
     last, used 0) are set: make the state and point f->d_hist / d_scale / d_scale_inv (cfg.stats: \
     d_counts, this step's counters) at where it lives (the CPU: the host arrays) */ \
  X(amp_status, fp8_create, (amp_fp8_scaler *f, char *msg, size_t cap)) \
  X(void, fp8_destroy, (amp_fp8_scaler *f)) \
  X(amp_status, fp8_record, (amp_fp8_scaler *f, size_t i, float amax, char *msg, size_t cap)) \
  /* every tensor's update; cfg.stats: also its amax read and scale replaced into used, and this \
     step's counters moved into the last step's (this step's cleared) */ \
  X(amp_status, fp8_update, (amp_fp8_scaler *f, char *msg, size_t cap)) \
  /* data parallel: every slot 0 into f->d_red as amp__fp8_amax_to_wire (to_slots 0), or back after \
     the hook's MAX (1; the CPU refuses a value that is no amax's bits) */ \
  X(amp_status, fp8_amax_io, (amp_fp8_scaler *f, int to_slots, char *msg, size_t cap)) \
  /* the host arrays from the state (to_device 0: the getters, a save) or the state from them (1: a \
     load); the telemetry is not among them */ \
  X(amp_status, fp8_io, (amp_fp8_scaler *f, int to_device, char *msg, size_t cap)) \
  /* cfg.stats: f->last and f->used from the state (amp_fp8_scaler_stats; the CPU: they are it) */ \
  X(amp_status, fp8_stats, (amp_fp8_scaler *f, char *msg, size_t cap)) \
  /* amp_quantize_ex, its arguments checked (counts NULL: none, the cast without counting) */ \
  X(amp_status, quantize, (amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype x_type, size_t n, \
                           const float *scale, float *amax_out, uint64_t *counts, char *msg, size_t cap)) \
  /* the matrix product, its arguments checked */ \
  X(amp_status, gemm, (amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k, float alpha, \
                       const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type, int ldb, float beta, \
                       void *C, amp_dtype c_type, int ldc, const amp_gemm_opts *opts, char *msg, size_t cap)) \
  /* fp8 block scaling (amp_quantize_blocks), its arguments checked: codes and scales of every block */ \
  X(amp_status, quantize_blocks, (amp_device *d, amp_block_scaling kind, amp_dtype fp8, int rows, int cols, \
                                  const void *x, amp_dtype x_type, int ldx, void *q, int ldq, void *scales, char *msg, \
                                  size_t cap))

#define AMP__BACKEND_MEMBER(ret, name, args) ret (*name) args;
typedef struct amp__backend {
  const char *name;        /* "CPU" or "CUDA", for messages */
  int host_update;         /* the update runs on the host: AMP_CUSTOM's custom_step can be called */
  size_t state_pad;        /* each tensor's state arrays hold a multiple of this many elements,
                              and start on a multiple of state_align bytes (amp_optimizer_state_bytes) */
  size_t state_align;
  AMP__BACKEND_OPS(AMP__BACKEND_MEMBER)
} amp__backend;

struct amp_device {
  int is_cuda;
  int ordinal;
  void *stream;            /* cudaStream_t */
  void *cuda;              /* amp_kernels.cu's per-device state (cuBLASLt handle, workspace, caches) */
  const amp__backend *be;  /* its operations; NULL: the CPU's */
  amp_status error;        /* a getter's failed read, kept for the next call that returns a status */
  char error_msg[256];
  char lock;               /* error and error_msg are read and written together (AMP__LOCK) */
};

static amp_device amp__cpu_device = {0, -1, NULL, NULL, NULL, AMP_OK, "", 0};
static const amp__backend *amp__be(const amp_device *d);   /* at the end: after both tables */

/* The message buffer of an operation, and the public caller's name put before it on failure. */
#define AMP__MSG 400
#define AMP__NAME_MAX 63   /* bytes of a tensor's name (amp_tensor_desc.name) */
/* An operation leaves msg empty when it has set amp_last_error itself (the CPU's, which share
   amp.h's own helpers). */
static amp_status amp__op_fail(const char *fn, amp_status st, const char *msg) {
  return st == AMP_OK || !msg[0] ? st : amp__fail(st, "%s: %s", fn, msg);
}

/* A getter's failed read, kept on the device until a call that returns a status can report it
   (amp_scaler_update, amp_device_sync); the first one wins. Getters and amp_device_sync may
   run on different threads, so the status and its message move together under the device's lock. */
static void amp__dev_keep_error(amp_device *d, amp_status st) {
  AMP__LOCK(&d->lock);
  if (d->error == AMP_OK) {
    d->error = st;
    memcpy(d->error_msg, amp__err_buf, sizeof d->error_msg - 1);
    d->error_msg[sizeof d->error_msg - 1] = '\0';
  }
  AMP__UNLOCK(&d->lock);
}
static amp_status amp__dev_take_error(const char *fn, amp_device *d) {
  char msg[sizeof d->error_msg];
  amp_status st;
  AMP__LOCK(&d->lock);
  st = d->error;
  d->error = AMP_OK;
  memcpy(msg, d->error_msg, sizeof msg);
  AMP__UNLOCK(&d->lock);
  if (st == AMP_OK) return AMP_OK;
  return amp__fail(st, "%s: a read before it failed (%s)", fn, msg);
}

AMPDEF amp_device *amp_cpu(void) { return &amp__cpu_device; }
AMPDEF int amp_device_is_cuda(const amp_device *d) { return d && d->is_cuda; }
AMPDEF void amp_device_close(amp_device *d) {
  if (!d || !d->is_cuda) return;     /* amp_cpu() is never freed */
  amp__be(d)->close(d);
  AMP_FREE(d);
}
AMPDEF void amp_cuda_close(amp_device *d) { amp_device_close(d); }
AMPDEF amp_status amp_device_sync(amp_device *d) {
  char m[AMP__MSG] = "";
  amp_status st;
  if (!d) return amp__fail(AMP_ERR_ARG, "amp_device_sync: d is NULL");
  if ((st = amp__dev_take_error("amp_device_sync", d)) != AMP_OK) return st;
  return amp__op_fail("amp_device_sync", amp__be(d)->sync(d, m, sizeof m), m);
}

/* ---- NCCL: amp_kernels.cu's section "NCCL" does the work ---- */
#if defined(AMP_CUDA) && defined(AMP_NCCL)

AMPDEF amp_status amp_nccl_allreduce_hook(void *nccl_comm, double *buf, int n, void *stream) {
  if (!nccl_comm)
    return amp__fail(AMP_ERR_ARG,
                     "amp_nccl_allreduce_hook: nccl_comm is NULL (pass the ncclComm_t as the hook's user)");
  if (!buf) return amp__fail(AMP_ERR_ARG, "amp_nccl_allreduce_hook: buf is NULL");
  if (n == 0) return amp__fail(AMP_ERR_ARG, "amp_nccl_allreduce_hook: n is 0 (>= 1: a sum; <= -1: a max)");
  return amp__cu_nccl_allreduce(nccl_comm, buf, n, stream, amp__err_buf, sizeof amp__err_buf);
}
AMPDEF amp_status amp_nccl_allreduce_grads(amp_device *d, void *nccl_comm, void *grads, amp_dtype t, size_t n,
                                           int average, int in_f32) {
  amp_status st0;
  if (!d || !d->is_cuda)
    return amp__fail(AMP_ERR_ARG, "amp_nccl_allreduce_grads: d is %s (a CUDA device is needed)",
                     d ? "the CPU" : "NULL");
  if (!nccl_comm) return amp__fail(AMP_ERR_ARG, "amp_nccl_allreduce_grads: nccl_comm is NULL");
  if ((st0 = amp__dtype_compute_check("amp_nccl_allreduce_grads", "dtype", t)) != AMP_OK) return st0;
  if (n == 0) return AMP_OK;
  if (!grads) return amp__fail(AMP_ERR_ARG, "amp_nccl_allreduce_grads: grads is NULL with n = %zu", n);
  return amp__cu_nccl_grads(d->cuda, nccl_comm, grads, (int32_t)t, n, average != 0, in_f32 != 0,
                            amp__err_buf, sizeof amp__err_buf);
}
#else
AMPDEF amp_status amp_nccl_allreduce_hook(void *nccl_comm, double *buf, int n, void *stream) {
  (void)nccl_comm; (void)buf; (void)stream;
  return amp__fail(
      AMP_ERR_UNSUPPORTED,
      "amp_nccl_allreduce_hook(n %d): amp.h was built without NCCL; define AMP_CUDA "
      "and AMP_NCCL in the implementation unit, compile amp_kernels.cu with nvcc -DAMP_NCCL and link -lnccl",
      n);
}
AMPDEF amp_status amp_nccl_allreduce_grads(amp_device *d, void *nccl_comm, void *grads, amp_dtype t, size_t n,
                                           int average, int in_f32) {
  (void)d; (void)nccl_comm; (void)grads; (void)t; (void)average; (void)in_f32;
  return amp__fail(
      AMP_ERR_UNSUPPORTED,
      "amp_nccl_allreduce_grads(n %zu): amp.h was built without NCCL; define AMP_CUDA "
      "and AMP_NCCL in the implementation unit, compile amp_kernels.cu with nvcc -DAMP_NCCL and link -lnccl",
      n);
}
#endif

/* ------------------------------------------------------------------------------------------
   Implementation: scaler
   ------------------------------------------------------------------------------------------ */

/* The log hook (amp_set_log): the function and its user pointer change together under a tiny lock,
   and a log call copies both under it, then calls the hook outside it (a hook may log or set the
   hook itself without deadlock). */
static void amp__log_default(void *user, const char *msg) { (void)user; fprintf(stderr, "amp.h: %s\n", msg); }
static void (*amp__log_fn)(void *user, const char *msg) = amp__log_default;
static void *amp__log_user = NULL;
static char amp__log_lock = 0;

AMPDEF void amp_set_log(void (*fn)(void *user, const char *msg), void *user) {
  AMP__LOCK(&amp__log_lock);
  amp__log_fn = fn ? fn : amp__log_default;
  amp__log_user = fn ? user : NULL;
  AMP__UNLOCK(&amp__log_lock);
}
static void amp__log(const char *fmt, ...) AMP__PRINTF(1, 2);
static void amp__log(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  void (*fn)(void *user, const char *msg);
  void *user;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  AMP__LOCK(&amp__log_lock);
  fn = amp__log_fn; user = amp__log_user;
  AMP__UNLOCK(&amp__log_lock);
  fn(user, msg);
}

/* The scaler. An iteration runs from one update to the next; `iter` numbers them, and an
   optimizer's call-order stage (amp_optimizer.stage) counts only while its (sc_id, sc_iter) equal
   this scaler's (id, iter), so update() resets every optimizer's stage without knowing them.
   st, last_skipped and skipped are the host mirror: a device that keeps them in its own memory
   refreshes them in scaler_pull, which amp__s_pull calls for every getter. */
struct amp_scaler {
  amp_device *dev;
  amp_scale_params pr;     /* the resolved rule */
  amp_scale_state st;      /* the rule's state */
  float init_scale;        /* fixed scaling unscales by 1/init_scale */
  unsigned long id;        /* unique per scaler created in this process */
  unsigned long iter;      /* iterations closed by update */
  int found_inf;           /* any inf/NaN recorded in this iteration (a device keeps its own flag too) */
  int recorded;            /* inf checks (unscales) recorded in this iteration */
  int last_skipped;        /* the last closed iteration saw inf/NaN */
  long skipped;            /* iterations with inf/NaN in all */
  int floor_logged;        /* the floor message was given; re-armed when the scale grows */
  amp_allreduce_fn allreduce;  /* data-parallel: sums {found_inf, sumsq} over ranks (NULL: one rank) */
  void *allreduce_user;
  void *cu;                /* the device's own block (CUDA: amp__cu_scaler_create); NULL on the CPU */
};

static unsigned long amp__scaler_ids = 0;

AMPDEF amp_scaler_config amp_scaler_preset(amp_preset p) {
  amp_scaler_config c;
  memset(&c, 0, sizeof c);
  c.init_scale = 65536.0f; c.growth_factor = 2.0f; c.backoff_factor = 0.5f;
  c.growth_interval = 2000; c.hysteresis = 1; c.hysteresis_mode = AMP_HYSTERESIS_CONSECUTIVE;
  switch (p) {
    case AMP_PRESET_PADDLE: c.min_scale = 1.0f; break;
    case AMP_PRESET_DEEPSPEED:
      c.growth_interval = 1000; c.hysteresis = 2; c.hysteresis_mode = AMP_HYSTERESIS_GROWTH_REFILL;
      c.min_scale = 1.0f; break;
    case AMP_PRESET_APEX: c.hysteresis_mode = AMP_HYSTERESIS_CLEAN_REFILL; c.max_scale = 16777216.0f; break;
    case AMP_PRESET_KERAS: c.init_scale = 32768.0f; c.min_scale = 1.0f; break;
    case AMP_PRESET_PYTORCH: default: break;
  }
  return c;
}

/* Defaults filled in and every field checked; *init gets the initial scale; fn names the calling
   function in messages (create, and checkpoint load, which checks a file's parameters with it). */
/* AMP_ERR_ARG naming fn, the field and its value for a subnormal x (amp__subnormal), else AMP_OK. */
static amp_status amp__refuse_subnormal(const char *fn, const char *field, float x) {
  if (!amp__subnormal(x)) return AMP_OK;
  return amp__fail(AMP_ERR_ARG, "%s: %s %g is subnormal (a build with denormals flushed would read it as 0)", fn, field,
                   (double)x);
}
static amp_status amp__scaler_resolve(const char *fn, const amp_scaler_config *cfg, amp_scale_params *pr, float *init) {
  amp_scaler_config c;
  if (cfg) c = *cfg; else memset(&c, 0, sizeof c);
  {
    const char *name[5] = {"init_scale", "growth_factor", "backoff_factor", "min_scale", "max_scale"};
    float v[5];
    int k;
    v[0] = c.init_scale; v[1] = c.growth_factor; v[2] = c.backoff_factor; v[3] = c.min_scale; v[4] = c.max_scale;
    for (k = 0; k < 5; k++)
      if (amp__refuse_subnormal(fn, name[k], v[k]) != AMP_OK) return AMP_ERR_ARG;
  }
  if (c.fixed && amp__is_zero(c.init_scale))
    return amp__fail(
        AMP_ERR_ARG,
        "%s: fixed = %d with init_scale 0: fixed scaling keeps the scale given, so write it "
        "(init_scale = 1 for none; or step without a scaler: amp_optimizer_step); 0 would be the default 65536",
        fn, c.fixed);
  if (amp__is_zero(c.init_scale)) c.init_scale = 65536.0f;
  if (amp__is_zero(c.growth_factor)) c.growth_factor = 2.0f;
  if (amp__is_zero(c.backoff_factor)) c.backoff_factor = 0.5f;
  if (c.growth_interval == 0) c.growth_interval = 2000;
  if (c.hysteresis == 0) c.hysteresis = 1;
  if (!(c.growth_factor > 1.0f) || !amp__finite(c.growth_factor))
    return amp__fail(AMP_ERR_ARG, "%s: growth_factor %g must be > 1 and finite", fn, (double)c.growth_factor);
  if (!(c.backoff_factor > 0.0f && c.backoff_factor < 1.0f) || !amp__finite(c.backoff_factor))
    return amp__fail(AMP_ERR_ARG, "%s: backoff_factor %g must be in (0, 1)", fn, (double)c.backoff_factor);
  if (c.growth_interval < 1)
    return amp__fail(AMP_ERR_ARG, "%s: growth_interval %d must be >= 1", fn, c.growth_interval);
  if (c.hysteresis < 1)
    return amp__fail(AMP_ERR_ARG, "%s: hysteresis %d must be >= 1", fn, c.hysteresis);
  if (c.hysteresis_mode < 0 || c.hysteresis_mode > 2)
    return amp__fail(AMP_ERR_ARG, "%s: hysteresis_mode %d must be 0..2 "
                     "(AMP_HYSTERESIS_CONSECUTIVE, _CLEAN_REFILL, _GROWTH_REFILL)", fn, c.hysteresis_mode);
  if (!(c.min_scale >= 0.0f) || !amp__finite(c.min_scale))
    return amp__fail(AMP_ERR_ARG, "%s: min_scale %g must be >= 0 and finite", fn, (double)c.min_scale);
  if (!(amp__is_zero(c.max_scale) || (c.max_scale >= c.min_scale && c.max_scale >= FLT_MIN)) ||
      !amp__finite(c.max_scale))
    return amp__fail(AMP_ERR_ARG, "%s: max_scale %g must be 0 (no cap) or finite and >= min_scale %g", fn,
                     (double)c.max_scale, (double)c.min_scale);
  if (!(c.init_scale >= FLT_MIN) || !amp__finite(c.init_scale))
    return amp__fail(AMP_ERR_ARG, "%s: init_scale %g must be finite and >= FLT_MIN", fn, (double)c.init_scale);
  if (c.init_scale < c.min_scale)
    return amp__fail(AMP_ERR_ARG, "%s: init_scale %g is below min_scale %g", fn, (double)c.init_scale,
                     (double)c.min_scale);
  if (c.max_scale > 0.0f && c.init_scale > c.max_scale)
    return amp__fail(AMP_ERR_ARG, "%s: init_scale %g is above max_scale %g", fn, (double)c.init_scale,
                     (double)c.max_scale);
  pr->growth = c.growth_factor; pr->backoff = c.backoff_factor;
  pr->floor = c.min_scale > FLT_MIN ? c.min_scale : FLT_MIN;  /* never 0 or subnormal: 1/scale stays finite */
  pr->cap = c.max_scale;
  pr->interval = c.growth_interval; pr->hysteresis = c.hysteresis; pr->mode = c.hysteresis_mode;
  pr->fixed = c.fixed != 0; pr->late_growth = c.late_growth != 0;
  *init = c.init_scale;
  return AMP_OK;
}

AMPDEF amp_status amp_scaler_create(amp_scaler **out, amp_device *d, const amp_scaler_config *cfg) {
  amp_scale_params pr;
  float init = 0.0f;
  amp_scaler *s;
  amp_status st;
  char m[AMP__MSG] = "";
  if (!out) return amp__fail(AMP_ERR_ARG, "amp_scaler_create: out is NULL");
  *out = NULL;
  if (!d) return amp__fail(AMP_ERR_ARG, "amp_scaler_create: device is NULL (use amp_cpu())");
  if ((st = amp__scaler_resolve("amp_scaler_create", cfg, &pr, &init)) != AMP_OK) return st;
  s = (amp_scaler *)AMP_MALLOC(sizeof *s);
  if (!s) return amp__fail(AMP_ERR_NOMEM, "amp_scaler_create: out of memory");
  memset(s, 0, sizeof *s);
  s->dev = d; s->pr = pr; s->init_scale = init;
  s->st = amp__scale_init(init, &pr);
  if ((st = amp__be(d)->scaler_create(s, m, sizeof m)) != AMP_OK) {
    AMP_FREE(s);
    return amp__op_fail("amp_scaler_create", st, m);
  }
  s->id = AMP__AINC(&amp__scaler_ids);
  *out = s;
  return AMP_OK;
}

AMPDEF void amp_scaler_destroy(amp_scaler *s) {
  if (!s) return;
  amp__be(s->dev)->scaler_destroy(s);
  AMP_FREE(s);
}

/* The floor message, once per stay at the floor (re-armed when the scale grows). */
static void amp__s_floor_note(amp_scaler *s, float before) {
  if (s->st.scale > before) s->floor_logged = 0;
  if (s->st.at_floor && !s->floor_logged) {
    s->floor_logged = 1;
    amp__log("the loss scale is at its floor %g and overflows continue: every step is being skipped "
             "(inf/NaN gradients at every scale?)", (double)s->st.scale);
  }
}

/* The one refresh of the scaler's mirror, for every getter and the checkpoint; the object is
   never const where it was made (a cache fill). The floor message of a rule run on a device is
   given here. fn names the public caller. */
static amp_status amp__s_pull(const char *fn, const amp_scaler *cs, int getter) {
  amp_scaler *s = (amp_scaler *)(uintptr_t)cs;
  char m[AMP__MSG] = "";
  amp_scale_state before = s->st;
  amp_status st = amp__be(s->dev)->scaler_pull(s, m, sizeof m);
  if (st != AMP_OK) {
    amp__op_fail(fn, st, m);
    if (getter) amp__dev_keep_error(s->dev, st);   /* a getter cannot return the status */
    return st;
  }
  /* the state moved on the device since the host last saw it: the rule ran there */
  if (memcmp(&before, &s->st, sizeof before) != 0) amp__s_floor_note(s, before.scale);
  return AMP_OK;
}

AMPDEF float amp_scaler_get_scale(amp_scaler *s) {
  return s && amp__s_pull("amp_scaler_get_scale", s, 1) == AMP_OK ? s->st.scale : 0.0f;
}
AMPDEF int amp_scaler_last_skipped(const amp_scaler *s) {
  return s && amp__s_pull("amp_scaler_last_skipped", s, 1) == AMP_OK ? s->last_skipped : 0;
}
AMPDEF long amp_scaler_skipped_steps(const amp_scaler *s) {
  return s && amp__s_pull("amp_scaler_skipped_steps", s, 1) == AMP_OK ? s->skipped : 0;
}
AMPDEF int amp_scaler_at_floor(const amp_scaler *s) {
  return s && amp__s_pull("amp_scaler_at_floor", s, 1) == AMP_OK ? (int)s->st.at_floor : 0;
}
AMPDEF amp_status amp_scaler_get_state(const amp_scaler *s, amp_scale_state *state, amp_scale_params *params) {
  amp_status st;
  if (!s) return amp__fail(AMP_ERR_ARG, "amp_scaler_get_state: s is NULL");
  if ((st = amp__s_pull("amp_scaler_get_state", s, 0)) != AMP_OK) return st;
  if (state) *state = s->st;
  if (params) *params = s->pr;
  return AMP_OK;
}

AMPDEF float *amp_scaler_scale_ptr(amp_scaler *s) {
  if (!s) { amp__fail(AMP_ERR_ARG, "amp_scaler_scale_ptr: s is NULL"); return NULL; }
  return amp__be(s->dev)->scale_ptr(s);
}

AMPDEF amp_status amp_scaler_scale_buffer(amp_scaler *s, void *buf, amp_dtype t, size_t n) {
  char m[AMP__MSG] = "";
  amp_status st0;
  if (!s) return amp__fail(AMP_ERR_ARG, "amp_scaler_scale_buffer: s is NULL");
  if ((st0 = amp__dtype_compute_check("amp_scaler_scale_buffer", "dtype", t)) != AMP_OK) return st0;
  if (n == 0) return AMP_OK;
  if (!buf) return amp__fail(AMP_ERR_ARG, "amp_scaler_scale_buffer: buf is NULL with n %zu", n);
  return amp__op_fail("amp_scaler_scale_buffer", amp__be(s->dev)->scale_buffer(s, buf, t, n, m, sizeof m), m);
}

AMPDEF amp_status amp_scaler_set_allreduce(amp_scaler *s, amp_allreduce_fn fn, void *user) {
  if (!s) return amp__fail(AMP_ERR_ARG, "amp_scaler_set_allreduce: s is NULL");
  s->allreduce = fn; s->allreduce_user = fn ? user : NULL;
  return AMP_OK;
}

/* The inverse scale the unscale pass multiplies by: fixed scaling keeps init_scale. */
static float amp__scaler_inv(const amp_scaler *s) {
  return amp__inv_scale(s->pr.fixed ? s->init_scale : s->st.scale);
}

/* Closes an iteration: the rule on the device (found_inf 1: an overflow whatever the unscales
   recorded), the skip bookkeeping, the floor message. */
static amp_status amp__s_close(const char *fn, amp_scaler *s, int found_inf) {
  char m[AMP__MSG] = "";
  float before = s->st.scale;
  amp_status st = amp__be(s->dev)->scaler_rule(s, found_inf, m, sizeof m);
  if (st != AMP_OK) return amp__op_fail(fn, st, m);
  amp__s_floor_note(s, before);
  s->found_inf = 0; s->recorded = 0;
  s->iter++;
  return AMP_OK;
}

AMPDEF amp_status amp_scaler_update(amp_scaler *s) {
  amp_status st;
  if (!s) return amp__fail(AMP_ERR_ARG, "amp_scaler_update: s is NULL");
  if (!s->recorded)
    return amp__fail(AMP_ERR_STATE, "amp_scaler_update: No inf checks were recorded prior to update() "
                     "(call amp_scaler_step or amp_scaler_unscale first, or amp_scaler_update_found_inf)");
  if ((st = amp__dev_take_error("amp_scaler_update", s->dev)) != AMP_OK) return st;
  return amp__s_close("amp_scaler_update", s, 0);
}

AMPDEF amp_status amp_scaler_update_found_inf(amp_scaler *s, int found_inf) {
  amp_status st;
  if (!s) return amp__fail(AMP_ERR_ARG, "amp_scaler_update_found_inf: s is NULL");
  if ((st = amp__dev_take_error("amp_scaler_update_found_inf", s->dev)) != AMP_OK) return st;
  return amp__s_close("amp_scaler_update_found_inf", s, found_inf != 0);
}

/* ------------------------------------------------------------------------------------------
   Implementation: optimizers and checkpoints
   ------------------------------------------------------------------------------------------ */

AMP__EXACT_BEGIN
/* The CPU step's loops. The plain loops (any compiler, any CPU) run the AMP_HD element functions
   on blocks of AMP__CHUNK elements. On x86-64 with GCC or Clang, explicit-intrinsic loops for
   AVX2 + F16C (8 lanes) and AVX-512 (16 lanes), picked at run time by CPUID, run the same IEEE
   single operations in the same order (no FMA, see AMP__EXACT_FP), so all give the same bits;
   they read and write every array once per step (the grads converted in registers, the model
   copy rounded in registers). On AArch64 the same bodies run on NEON's 4 lanes (one level, while
   the FPCR is in its default state: amp__neon_level). AMP_NO_SIMD keeps only the plain ones. */
#if defined(__SSE__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 1)
#include <xmmintrin.h>
#define AMP__OPT_SSE 1
#endif

/* -1: the CPU's best; 0: the plain loops; 1, 2: that level at most. Tests set it to compare. */
static int amp__opt_simd = -1;
static int amp__opt_level(void) {
#ifdef AMP__X86_SIMD
  int want = AMP__ALOAD(&amp__opt_simd), l = amp__cpu_level();
  return want < 0 || want > l ? l : want;
#elif defined(AMP__NEON_SIMD)
  /* one NEON level, while the FPCR leaves FCVTN the scalar functions' bits (amp__neon_level) */
  int want = AMP__ALOAD(&amp__opt_simd), l = amp__neon_level() ? 1 : 0;
  return want < 0 || want > l ? l : want;
#else
  (void)amp__opt_simd;   /* no SIMD loops to pick; tests may still set it */
  return 0;
#endif
}

/* d[i] = src[i0 + i] * mul, src of type t; one plain loop per type. */
AMP__INLINE void amp__o_load(float *AMP__RESTRICT d, const void *src, amp_dtype t, size_t i0, size_t k, float mul) {
  size_t i;
#define AMP__OL_(E, N, T, S) { \
    const T *AMP__RESTRICT s = (const T *)src + i0; \
    for (i = 0; i < k; i++) d[i] = amp__ld_##N(s, i) * mul; \
  } break;
  AMP__DTYPE_SWITCH(t, AMP__OL_)
#undef AMP__OL_
}
/* dst[i0 + i] = p[i] rounded to the type t; a float model copy with round_to rt != AMP_F32, or a
   bf16 copy rounded stochastically (sr, with the bits of key), through amp__store_model. */
AMP__INLINE void amp__o_store(void *dst, amp_dtype t, amp_dtype rt, int sr, uint64_t key, size_t i0,
                              const float *AMP__RESTRICT p, size_t k) {
  size_t i;
  if (amp__model_rounds(t, rt, sr)) {
    for (i = 0; i < k; i++) amp__store_model(dst, t, rt, sr, key, i0 + i, p[i]);
  } else {
    amp__from_f32((char *)dst + i0 * amp_dtype_size(t), t, p, k);
  }
}
AMP__INLINE void amp__o_sqrt(float *AMP__RESTRICT d, const float *AMP__RESTRICT s, size_t k) {
  size_t i = 0;
#if defined(AMP__OPT_SSE) && defined(__clang__)
  /* Clang under -ffast-math turns _mm_sqrt_ps and sqrtf into a reciprocal-root estimate (not
     IEEE), whatever the pragmas say: the instructions themselves, in asm */
  for (; i + 4 <= k; i += 4) {
    __m128 x = _mm_loadu_ps(s + i);
    __asm__("sqrtps %1, %0" : "=x"(x) : "x"(x));
    _mm_storeu_ps(d + i, x);
  }
  for (; i < k; i++) { float x = s[i]; __asm__("sqrtss %1, %0" : "=x"(x) : "x"(x)); d[i] = x; }
#else
#ifdef AMP__OPT_SSE
  for (; i + 4 <= k; i += 4) _mm_storeu_ps(d + i, _mm_sqrt_ps(_mm_loadu_ps(s + i)));  /* IEEE sqrt, = sqrtf */
#endif
  for (; i < k; i++) d[i] = sqrtf(s[i]);
#endif
}

#define AMP__CHUNK 512   /* elements per block: the fp32 grads and roots of a block stay in L1 */

/* Built with -fopenmp: how many threads step a tensor of n elements (each an update of its own,
   whose bits do not depend on which thread makes it or in what order): at most the OpenMP
   threads, at least AMP__O_PAR_MIN elements each (fewer do not pay for waking the threads), one
   inside a parallel region (a trainer's own threads) and without OpenMP. */
#define AMP__O_PAR_MIN 65536
#ifdef _OPENMP
#define AMP__OMP(x) _Pragma(#x)
#else
#define AMP__OMP(x)
#endif
static int amp__o_threads(size_t n) {
#ifdef _OPENMP
  int nth = omp_in_parallel() ? 1 : omp_get_max_threads();
  if ((size_t)nth > n / AMP__O_PAR_MIN) nth = (int)(n / AMP__O_PAR_MIN);
  return nth < 1 ? 1 : nth;
#else
  (void)n;
  return 1;
#endif
}
/* Where thread t of nth starts on n elements: contiguous slices, each a whole number of
   AMP__CHUNK blocks (so whole 8-bit blocks) but the last. */
static size_t amp__o_slice(size_t n, int nth, int t) {
  size_t chunks = (n + AMP__CHUNK - 1) / AMP__CHUNK, at = chunks * (size_t)t / (size_t)nth * AMP__CHUNK;
  return at < n ? at : n;
}
#define AMP__LANES 32    /* the scan's sum of squares: element i adds to lane i % 32 */

/* Pass 1 (unscale): the sum of squares of the unscaled grads x = g * inv, in one read. Each x is
   squared exactly in double (24-bit x 24-bit fits 53 bits) and added to lane i % 32 of a tensor's
   32 double lanes, which are then added up in order 0..31: the same order on every path, so the
   plain and vector loops give the same bits. inf/NaN needs no test of its own: a finite x squares
   to at most 2^256, so the sum of a tensor's squares is finite exactly when every x is; the test
   is on the sum's bits (which -ffast-math cannot fold). */
static AMP__EXACT_FP void amp__o_scan_finish(const double *lanes, double *sumsq, int *bad) {
  double total = 0.0;
  uint64_t b;
  int j;
  for (j = 0; j < AMP__LANES; j++) {
    total += lanes[j];
    AMP__ROUNDED(total);   /* in order: clang's -Ofast may not regroup the adds (it ignores the pragmas off x86) */
  }
  memcpy(&b, &total, sizeof b);
  if (((b >> 52) & 0x7ffu) == 0x7ffu) *bad = 1;
  *sumsq += total;
}
AMP__INLINE void amp__o_scan_body(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad) {
  float x[AMP__CHUNK];
  double lanes[AMP__LANES];
  size_t i0, i;
  int j;
  for (j = 0; j < AMP__LANES; j++) lanes[j] = 0.0;
  for (i0 = 0; i0 < n; i0 += AMP__CHUNK) {   /* AMP__CHUNK is a multiple of AMP__LANES */
    size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
    amp__o_load(x, g, t, i0, k, inv);
    for (i = 0; i < k; i++) lanes[i % AMP__LANES] += (double)x[i] * (double)x[i];
  }
  amp__o_scan_finish(lanes, sumsq, bad);
}

/* The element function of kind over one block: pp, mm, vv, gb of k elements (the kind list's
   `elem`; an unknown kind, which create refuses, changes nothing). */
#define AMP__KIND_ELEMS(kd, name, nm, lr, b1, b2, coefs, elem, dev, vec) \
  case kd: for (i = 0; i < k; i++) elem(&pp[i], &mm[i], &vv[i], gb[i], c); return;
AMP__INLINE void amp__o_elems(amp_optim_kind kind, float *AMP__RESTRICT pp, float *AMP__RESTRICT mm,
                              float *AMP__RESTRICT vv, const float *AMP__RESTRICT gb, size_t k,
                              const amp_step_coefs *c) {
  size_t i;
  switch (kind) { AMP__OPTIM_KINDS(AMP__KIND_ELEMS) default: return; }
}
#undef AMP__KIND_ELEMS

/* Pass 2 (step): one fused pass over a tensor: the grads read again as g * (inv_scale * clip),
   the update on the fp32 master and moments (a zeroed scratch block for a moment the kind does
   not keep), the model copy written. */
AMP__INLINE void amp__o_step_body(amp_optim_kind kind, float *AMP__RESTRICT p, float *AMP__RESTRICT m,
                                  float *AMP__RESTRICT v, const void *g, amp_dtype gt, void *w, amp_dtype wt,
                                  amp_dtype rt, int sr, uint64_t key, size_t n, float gmul,
                                  const amp_step_coefs *coefs) {
  float gb[AMP__CHUNK], sq[AMP__CHUNK], zm[AMP__CHUNK], zv[AMP__CHUNK];
  amp_step_coefs c = *coefs;   /* a local copy: the stores below cannot alias it */
  size_t i0, i;
  if (!m) memset(zm, 0, sizeof zm);
  if (!v) memset(zv, 0, sizeof zv);
  for (i0 = 0; i0 < n; i0 += AMP__CHUNK) {
    size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
    float *AMP__RESTRICT pp = p + i0, *AMP__RESTRICT mm = m ? m + i0 : zm, *AMP__RESTRICT vv = v ? v + i0 : zv;
    amp__o_load(gb, g, gt, i0, k, gmul);
    switch (kind) {
      case AMP_ADAM: case AMP_ADAMW:   /* amp__adam_elem in its halves, the block's roots at once */
        for (i = 0; i < k; i++) amp__adam_moments(&pp[i], &mm[i], &vv[i], gb[i], &c);
        if (c.moments_only) break;
        amp__o_sqrt(sq, vv, k);
        for (i = 0; i < k; i++) amp__adam_apply(&pp[i], mm[i], sq[i], &c);
        break;
      default: amp__o_elems(kind, pp, mm, vv, gb, k, &c); break;   /* every other kind: its element function */
    }
    amp__o_store(w, wt, rt, sr, key, i0, pp, k);
  }
}

/* A tensor without an fp32 master array: the masters of elements i0 .. i0 + k - 1 decoded from
   the bf16 model copy w and the remainder rem (AMP_MASTER_SPLIT), or the bf16 values themselves
   (AMP_MASTER_NONE, rem NULL); and written back: split again (exact), or rounded stochastically
   into w with the bits of key (NONE). */
AMP__INLINE void amp__o_master_load(float *AMP__RESTRICT d, const amp_bf16 *w, const uint16_t *rem, size_t i0,
                                    size_t k) {
  size_t i;
  if (rem) for (i = 0; i < k; i++) d[i] = amp__split_decode(w[i0 + i], rem[i0 + i]);
  else for (i = 0; i < k; i++) d[i] = amp_bf16_to_f32(w[i0 + i]);
}
AMP__INLINE void amp__o_master_store(amp_bf16 *w, uint16_t *rem, uint64_t key, size_t i0, const float *AMP__RESTRICT p,
                                     size_t k) {
  size_t i;
  if (rem) for (i = 0; i < k; i++) amp__split_encode(p[i], &w[i0 + i], &rem[i0 + i]);
  else for (i = 0; i < k; i++) amp__store_model(w, AMP_BF16, AMP_F32, 1, key, i0 + i, p[i]);
}
static AMP__EXACT_FP void amp__o_scan_plain(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad) {
  amp__o_scan_body(g, t, n, inv, sumsq, bad);
}
/* The scan with gradient stats (amp_optim_config.stats): the same sum of squares, the same lanes
   in the same order (so the same bits as every other scan), and each grad classified by
   amp__gstat_add on its decoded value g (before any arithmetic: a flush-to-zero mode cannot hide
   a subnormal) and its unscaled value y = g * inv, the product amp__o_load computes. */
AMP__INLINE void amp__o_scan_stats_body(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad,
                                        amp__gstat *st) {
  double lanes[AMP__LANES];
  amp__gstat a = *st;
  size_t i;
  int j;
  for (j = 0; j < AMP__LANES; j++) lanes[j] = 0.0;
  for (i = 0; i < n; i++) {
    float r = amp__load(g, t, i), y = r * inv;
    lanes[i % AMP__LANES] += (double)y * (double)y;
    amp__gstat_add(&a, r, y, t);
  }
  *st = a;
  amp__o_scan_finish(lanes, sumsq, bad);
}
static AMP__EXACT_FP void amp__o_scan_stats(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad,
                                            amp__gstat *st) {
#define AMP__B_(E, N, T, S) amp__o_scan_stats_body(g, E, n, inv, sumsq, bad, st); break;   /* the type a constant */
  AMP__DTYPE_SWITCH(t, AMP__B_)
#undef AMP__B_
}
static AMP__EXACT_FP void amp__o_step_plain(amp_optim_kind kind, float *p, float *m, float *v, const void *g,
                                            amp_dtype gt, void *w, amp_dtype wt, amp_dtype rt, int sr, uint64_t key,
                                            size_t n, float gmul, const amp_step_coefs *c) {
  amp__o_step_body(kind, p, m, v, g, gt, w, wt, rt, sr, key, n, gmul, c);
}

#ifdef AMP__CPU_SIMD
/* The vector loops: the element functions above written on vectors, operation for operation
   (amp__sgd_elem, amp__adam_moments + amp__adam_apply, amp__o_load's g * gmul, amp__o_store's
   rounding). The coefficients broadcast once; the flag tests are uniform branches. */
#define AMP__VCOEFS(V, SET1) \
  V lr = SET1(c->lr), wd = SET1(c->wd), mom = SET1(c->momentum), omd = SET1(1.0f - c->dampening); \
  V b1 = SET1(c->beta1), omb1 = SET1(1.0f - c->beta1), b2 = SET1(c->beta2), omb2 = SET1(1.0f - c->beta2); \
  V bc2 = SET1(c->bc2_sqrt), eps = SET1(c->eps), ss = SET1(c->step_size), decay = SET1(c->decay), gm = SET1(gmul); \
  int has_wd = c->wd != 0.0f, has_mom = c->momentum != 0.0f, first = c->first != 0, nest = c->nesterov != 0; \
  int mo = c->moments_only != 0
#endif

#ifdef AMP__X86_SIMD
/* Products as rounded floats: clang's -ffp-contract=fast (part of -ffast-math) fuses any multiply
   with a following add in the back end, whatever the pragmas say; an empty asm on the product
   hides it. (GCC: AMP__EXACT_FP.) */
#if defined(__clang__)
#define AMP__FP_BARRIER(x) __asm__("" : "+v"(x))
#else
#define AMP__FP_BARRIER(x) (void)0
#endif
/* AVX-512 under clang: the explicit-rounding forms (round to nearest, the default mode) are target
   intrinsics that no fast-math rewrite touches (a / b into a * (1 / b), fusing). */
#if defined(__clang__)
#define AMP__RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define AMP__V512_OP(T, name, op, sfx) AMP__AVX512_INLINE T name(T a, T b) { return _mm512_##op##_round_##sfx(a, b, AMP__RN); }
AMP__AVX512_INLINE __m512 amp__sqrt16(__m512 a) { return _mm512_sqrt_round_ps(a, AMP__RN); }
AMP__AVX512_INLINE __m256 amp__cvtpd8(__m512d a) { return _mm512_cvt_roundpd_ps(a, AMP__RN); }
#else
#define AMP__V512_OP(T, name, op, sfx) AMP__AVX512_INLINE T name(T a, T b) { return _mm512_##op##_##sfx(a, b); }
AMP__AVX512_INLINE __m512 amp__sqrt16(__m512 a) { return _mm512_sqrt_ps(a); }
AMP__AVX512_INLINE __m256 amp__cvtpd8(__m512d a) { return _mm512_cvtpd_ps(a); }
#endif
/* 16 floats (amp__mul16 ...) and 8 doubles (amp__mulpd8 ..., amp__gelu_line's tanh) */
AMP__V512_OP(__m512, amp__mul16, mul, ps) AMP__V512_OP(__m512, amp__add16, add, ps)
AMP__V512_OP(__m512, amp__sub16, sub, ps) AMP__V512_OP(__m512, amp__div16, div, ps)
AMP__V512_OP(__m512d, amp__mulpd8, mul, pd) AMP__V512_OP(__m512d, amp__addpd8, add, pd)
AMP__V512_OP(__m512d, amp__subpd8, sub, pd) AMP__V512_OP(__m512d, amp__divpd8, div, pd)
#undef AMP__V512_OP
AMP__AVX2_INLINE __m256 amp__mul8(__m256 a, __m256 b) { __m256 p = _mm256_mul_ps(a, b); AMP__FP_BARRIER(p); return p; }
/* The IEEE root: clang under -ffast-math turns _mm256_sqrt_ps into an estimate (as amp__o_sqrt says). */
#if defined(__clang__)
AMP__AVX2_INLINE __m256 amp__sqrt8(__m256 a) { __asm__("vsqrtps %1, %0" : "=x"(a) : "x"(a)); return a; }
#else
AMP__AVX2_INLINE __m256 amp__sqrt8(__m256 a) { return _mm256_sqrt_ps(a); }
#endif
/* The IEEE division: clang's fast-math may otherwise multiply by a reciprocal of a loop-constant
   divisor (Adam's bc2, a block's absmax). */
#if defined(__clang__)
AMP__AVX2_INLINE __m256 amp__div8(__m256 a, __m256 b) { __asm__("vdivps %2, %1, %0" : "=x"(a) : "x"(a), "x"(b)); return a; }
#else
AMP__AVX2_INLINE __m256 amp__div8(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
#endif

#endif

#ifdef AMP__CPU_SIMD
/* The update of one vector, per kind, written once for both widths: VT the vector type and the
   width's operations (AMP__V16_OPS, AMP__V8_OPS) as arguments; x holds the grads (g * gmul), w0
   the masters, m and v the moments at this vector. A kind without a body here runs its element
   function's plain loop at every SIMD level (amp__o_step16 / amp__o_step8 return 0). */
#define AMP__V_SGD(VT, ADD, SUB, MUL, DIV, SQRT, SIGN, LDF, STF, ZERO) { \
    if (has_wd) x = ADD(x, MUL(wd, w0)); \
    if (has_mom) { \
      VT b = first ? x : ADD(MUL(mom, m ? LDF(m) : ZERO), MUL(omd, x)); \
      if (m) STF(m, b); \
      x = nest ? ADD(x, MUL(mom, b)) : b; \
    } \
    w0 = SUB(w0, MUL(lr, x)); }
#define AMP__V_ADAM(VT, ADD, SUB, MUL, DIV, SQRT, SIGN, LDF, STF, ZERO) { \
    VT mv = LDF(m), vv = LDF(v); \
    w0 = MUL(w0, decay); \
    if (has_wd) x = ADD(x, MUL(wd, w0)); \
    mv = ADD(MUL(b1, mv), MUL(omb1, x)); \
    vv = ADD(MUL(b2, vv), MUL(MUL(omb2, x), x)); \
    if (!mo) w0 = SUB(w0, DIV(MUL(ss, mv), ADD(DIV(SQRT(vv), bc2), eps))); \
    STF(m, mv); STF(v, vv); }
#define AMP__V_LION(VT, ADD, SUB, MUL, DIV, SQRT, SIGN, LDF, STF, ZERO) { \
    VT mv = LDF(m); \
    VT u = ADD(MUL(b1, mv), MUL(omb1, x)); \
    w0 = SUB(MUL(w0, decay), MUL(lr, SIGN(u))); \
    STF(m, ADD(MUL(b2, mv), MUL(omb2, x))); }
#define AMP__V_NONE(VT, ADD, SUB, MUL, DIV, SQRT, SIGN, LDF, STF, ZERO) { (void)x; }
#define AMP__VHAS_SGD 1
#define AMP__VHAS_ADAM 1
#define AMP__VHAS_LION 1
#define AMP__VHAS_NONE 0
/* 1 when kind has a vector body (the kind list's vec column). */
#define AMP__KIND_VEC(k, name, nm, lr, b1, b2, coefs, elem, dev, vec) case k: return AMP__VHAS_##vec;
static int amp__kind_vec(amp_optim_kind kind) {
  switch (kind) { AMP__OPTIM_KINDS(AMP__KIND_VEC) default: return 0; }
}
#undef AMP__KIND_VEC
#endif

#ifdef AMP__X86_SIMD
/* amp__sign on lanes, on the bits: +-1 with u's sign, +0 for +-0, u itself for NaN. */
AMP__AVX512_INLINE __m512 amp__sign16(__m512 u) {
  const __m512i abs = _mm512_set1_epi32(0x7fffffff);
  __m512i b = _mm512_castps_si512(u), a = _mm512_and_si512(b, abs);
  __m512i r = _mm512_or_si512(_mm512_andnot_si512(abs, b), _mm512_set1_epi32(0x3f800000));
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(a, _mm512_setzero_si512()), _mm512_setzero_si512());
  r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)), b);
  return _mm512_castsi512_ps(r);
}
AMP__AVX2_INLINE __m256 amp__sign8(__m256 u) {
  const __m256i abs = _mm256_set1_epi32(0x7fffffff);
  __m256i b = _mm256_castps_si256(u), a = _mm256_and_si256(b, abs);
  __m256i r = _mm256_or_si256(_mm256_andnot_si256(abs, b), _mm256_set1_epi32(0x3f800000));
  r = _mm256_andnot_si256(_mm256_cmpeq_epi32(a, _mm256_setzero_si256()), r);
  r = _mm256_blendv_epi8(r, b, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000)));
  return _mm256_castsi256_ps(r);
}
/* amp__round_to on lanes: x rounded to format t (a row with a vector path) and widened back, by
   the same stores and loads as a model copy of type t (AMP_F32: x itself). */
AMP__AVX512_INLINE __m512 amp__rt16(amp_dtype t, __m512 x) {
  uint32_t buf[16];
  amp__st16(t, buf, x, 0xffff, 0);
  return amp__ld16(t, buf, 0xffff);
}
AMP__AVX2_INLINE __m256 amp__rt8(amp_dtype t, __m256 x) {
  uint32_t buf[8];
  amp__st8(t, buf, x, 0);
  return amp__ld8(t, buf);
}
#endif
#ifdef AMP__CPU_SIMD
#define AMP__VAPPLY(body, ops) body ops
/* The step loop of a W-lane level without lane masks (AVX2: 8, NEON: 4): STEP(BODY) on each whole
   vector, then the tail (k < W elements) through W-element buffers, so every element takes the
   same vector operations. */
#define AMP__STEPW_LOOP(W, STEP, BODY, OPS) \
  for (i = 0; i + W <= n; i += W, p += W, m = m ? m + W : m, v = v ? v + W : v, gc += W * gs, wc += W * ws) { \
    g = gc; w = wc; \
    STEP(BODY, OPS) \
  } \
  if (i < n) { \
    size_t k = n - i; \
    float bp[W] = {0}, bm[W] = {0}, bv[W] = {0}, bg[W] = {0}, bw[W]; \
    float *tp = p, *tm = m, *tv = v; \
    memcpy(bp, tp, k * 4); if (tm) memcpy(bm, tm, k * 4); if (tv) memcpy(bv, tv, k * 4); \
    memcpy(bg, gc, k * gs); \
    p = bp; m = tm ? bm : NULL; v = tv ? bv : NULL; g = bg; w = bw; \
    STEP(BODY, OPS) \
    memcpy(tp, bp, k * 4); if (tm) memcpy(tm, bm, k * 4); if (tv) memcpy(tv, bv, k * 4); \
    memcpy(wc, bw, k * ws); \
  }
/* The step function of one level (ATTR its target attribute, VT its vector type, SET1 its
   broadcast, KIND_CASE its AMP__KIND_STEP* case): the coefficients broadcast once, then the
   kind's vector body (the kind list's vec column), or 0 for a kind without one (the plain loop). XP:
   more parameters (x86: the moment block amp__qblk), or nothing. */
#define AMP__COMMA ,
#define AMP__O_STEP_FN(ATTR, NAME, VT, SET1, KIND_CASE, XP) \
  ATTR int NAME(amp_optim_kind kind, float *p, float *m, float *v, const void *g, amp_dtype gt, void *w, amp_dtype wt, \
                amp_dtype rt, size_t n, float gmul, const amp_step_coefs *c XP) { \
    size_t gs = amp_dtype_size(gt), ws = amp_dtype_size(wt), i; \
    const char *gc = (const char *)g; \
    char *wc = (char *)w; \
    int rts = amp__round_to_set(rt); \
    AMP__VCOEFS(VT, SET1); \
    switch (kind) { \
      AMP__OPTIM_KINDS(KIND_CASE) \
      default: return 0; \
    } \
  }
/* The same for amp__o_low_vec's loops (a bf16 copy written by the master encode: split, absent or
   stochastic; the comment at amp__o_low16 says what they compute), and the loop of a W-lane level
   without lane masks (AVX2: 8, NEON: 4), whole vectors only: VT, MUL, LDG (the grads' load), LDF /
   STF (floats), MLD / MST (the masters' decode and encode) and OPS those of the level. */
#define AMP__O_LOW_FN(ATTR, NAME, VT, SET1, KIND_CASE) \
  ATTR int NAME(amp_optim_kind kind, float *p, amp_bf16 *w, uint16_t *rem, uint64_t key, float *m, float *v, \
                const void *g, amp_dtype gt, size_t n, float gmul, const amp_step_coefs *c) { \
    size_t gs = amp_dtype_size(gt), i; \
    AMP__VCOEFS(VT, SET1); \
    switch (kind) { \
      AMP__OPTIM_KINDS(KIND_CASE) \
      default: return 0; \
    } \
  }
#define AMP__LOWW_LOOP(W, VT, MUL, LDG, LDF, STF, MLD, MST, OPS, BODY) \
  for (i = 0; i + W <= n; i += W, m = m ? m + W : m, v = v ? v + W : v, g = (const char *)g + W * gs) { \
    VT x = MUL(LDG(gt, g), gm), w0 = p ? LDF(p + i) : MLD(w + i, rem ? rem + i : NULL); \
    AMP__VAPPLY(BODY, OPS); \
    if (p) STF(p + i, w0); \
    MST(w + i, rem ? rem + i : NULL, key, (uint64_t)i, w0); \
  }
#endif

#ifdef AMP__CPU_SIMD
/* A block of moments kept as AMP_MOMENTS_BF16, _8BIT or _FP8 stepped in the vector loops (the
   moment loops, amp__o_step16 / amp__o_step8 / amp__o_step4 given a block): each moment read from
   its stored form straight into lanes (bf16 widened; a code's map value times the block's absmax,
   amp__q8_ld16 / amp__q8_ld8 / amp__q8_ld4; an E4M3 code widened times the array's scale_inv:
   amp__q_load's bits), the new moments written back as bf16 rounded to nearest even where w is set
   (amp__q_store's bits: the same stores as amp_convert's loops), else as f32 to the float block m /
   v (where the encode reads them) with the bits of their largest magnitude taken on the way, as
   unsigned integers (amp__f8m_amax's rule: a NaN above inf). Whole vectors only; the caller steps
   the rest. */
typedef struct amp__qmom {
  const unsigned char *a;   /* the block's first bf16 word (BF16) or code (8BIT, FP8) */
  unsigned char *w;         /* BF16 to nearest: a, written */
  const float *code;        /* 8BIT: the map's values */
  int loads;                /* 8BIT at the AVX2 level: 1 the values read by plain loads, 0 by gathers */
  float am;                 /* 8BIT: the block's absmax; FP8: the array's scale_inv */
  uint32_t amax;            /* out: the bits of the largest |x| written to the float block */
} amp__qmom;
typedef struct amp__qblk { int type; amp__qmom s[2]; } amp__qblk;   /* s[0]: the first moment, s[1]: the second */
#define AMP__QI_m 0   /* LDF(m) / LDF(v) in a body: the moment's index in amp__qblk.s */
#define AMP__QI_v 1
/* The loop over whole vectors of a moment block (W lanes, IT the integer vector with zero IZERO,
   STEP the level's step on OPS, HMAX the lanes' unsigned maximum): BF16's loop with the type a
   constant qt, so that it holds no code of the coded types (the loads and stores test qt), and
   one loop for the 8BIT and FP8 codes (a loop of its own each measured no faster, and took 15%
   more time to compile amp.h). Each reads the block from a local copy qv (no store of the loop
   can change it), keeps the amaxes in amx_m and amx_v and joins the lanes once at the end. A type
   without a loop here: 0, nothing done. */
#define AMP__QSTEP_LOOP(W, IT, IZERO, HMAX, STEP, BODY, OPS) \
  switch (qb->type) { \
    case AMP_MOMENTS_BF16: AMP__QSTEP_LOOP_T(AMP_MOMENTS_BF16, W, IT, IZERO, HMAX, STEP, BODY, OPS) break; \
    case AMP_MOMENTS_8BIT: case AMP_MOMENTS_FP8: AMP__QSTEP_LOOP_T(qb->type, W, IT, IZERO, HMAX, STEP, BODY, OPS) break; \
    default: return 0; \
  }
#define AMP__QSTEP_LOOP_T(QT, W, IT, IZERO, HMAX, STEP, BODY, OPS) { \
    const amp__qblk qv = *qb; \
    const int qt = QT; \
    (void)qv; (void)qt; \
    IT amx_m = IZERO, amx_v = IZERO; \
    for (i = 0; i + W <= n; i += W, p += W, m = m ? m + W : m, v = v ? v + W : v, gc += W * gs, wc += W * ws) { \
      g = gc; w = wc; \
      STEP(BODY, OPS) \
    } \
    qb->s[0].amax = HMAX(amx_m); qb->s[1].amax = HMAX(amx_v); \
  }

#endif

#ifdef AMP__X86_SIMD

/* One case per row of the kind list: its vector body's loop (the moment loop where qb is given), or
   0 (NONE: the plain loop). */
#define AMP__KIND_STEP16(kd, name, nm, lr_, b1_, b2_, coefs, elem, dev, vec) \
  case kd: if (!AMP__VHAS_##vec) return 0; \
    if (qb) AMP__QSTEP_LOOP(16, __m512i, _mm512_setzero_si512(), amp__hmax16u, AMP__STEP16F, AMP__V_##vec, AMP__Q16_OPS) \
    else { AMP__STEP16_LOOP(AMP__V_##vec) } \
    return 1;
#define AMP__KIND_STEP8(kd, name, nm, lr_, b1_, b2_, coefs, elem, dev, vec) \
  case kd: if (!AMP__VHAS_##vec) return 0; \
    if (qb) AMP__QSTEP_LOOP(8, __m256i, _mm256_setzero_si256(), amp__hmax8u, AMP__STEP8, AMP__V_##vec, AMP__Q8_OPS) \
    else { AMP__STEP8_LOOP(AMP__V_##vec) } \
    return 1;
/* AVX-512: 16 elements at p[0..16) etc. under the lane mask k; the model copy rounded to rt. */
#define AMP__LD16F(q) amp__ld16f(q, k)
#define AMP__ST16F(q, x) amp__st16f(q, x, k)
#define AMP__V16_OPS (__m512, amp__add16, amp__sub16, amp__mul16, amp__div16, amp__sqrt16, amp__sign16, AMP__LD16F, \
                      AMP__ST16F, _mm512_setzero_ps())
#define AMP__STEP16(BODY, OPS) { \
    __m512 x = amp__mul16(amp__ld16(gt, g, k), gm), w0 = amp__ld16f(p, k); \
    AMP__VAPPLY(BODY, OPS); \
    amp__st16f(p, w0, k); \
    amp__st16(wt, w, rts ? amp__rt16(rt, w0) : w0, k, 0); }
#define AMP__STEP16F(BODY, OPS) { \
    const __mmask16 k = 0xffff;   /* a constant: plain loads and stores */ \
    AMP__STEP16(BODY, OPS) }
#define AMP__STEP16_LOOP(BODY) \
  for (i = 0; i + 16 <= n; i += 16, p += 16, m = m ? m + 16 : m, v = v ? v + 16 : v, gc += 16 * gs, wc += 16 * ws) { \
    g = gc; w = wc; \
    AMP__STEP16F(BODY, AMP__V16_OPS) \
  } \
  if (i < n) { \
    __mmask16 k = amp__mask16(n - i); \
    g = gc; w = wc; \
    AMP__STEP16(BODY, AMP__V16_OPS) \
  }
/* The moment loops' loads and stores (amp__qblk): the moment at element i of the block, and the new
   moment written with its magnitude's bits joined into amx. */
AMP__AVX512_INLINE __m512 amp__q8_ld16(const float *code, const uint8_t *c, float am) {
  __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c));
  /* A gather merges into its destination register, so it waits on whatever last wrote it; given a
     constant full mask, compilers take any register (in the step loop: one holding the last
     iteration's quotients, which made each gather wait on them). A mask they cannot see keeps
     the zero source, and so a fresh destination. */
  __mmask16 all = 0xffff;
  __asm__("" : "+Yk"(all));
  return amp__mul16(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), all, x, code, 4), _mm512_set1_ps(am));
}
AMP__AVX512_INLINE __m512 amp__qld16(int type, const amp__qmom *s, size_t i) {
  if (type == AMP_MOMENTS_BF16) return amp__ld16_bf16(s->a + 2 * i, 0xffff);
  if (type == AMP_MOMENTS_FP8)
    return amp__mul16(amp__fp8_dec16(_mm_loadu_si128((const __m128i *)(const void *)(s->a + i)), 0), _mm512_set1_ps(s->am));
  return amp__q8_ld16(s->code, s->a + i, s->am);
}
AMP__AVX512_INLINE void amp__qst16(int type, const amp__qmom *s, size_t i, float *d, __m512 x, __m512i *amx) {
  if (type == AMP_MOMENTS_BF16 && s->w) { amp__st16_bf16(s->w + 2 * i, x, 0xffff, 0); return; }
  _mm512_storeu_ps(d, x);
  *amx = _mm512_max_epu32(*amx, _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}
/* The largest of the lanes as unsigned integers: 8 lanes, then 16 as the larger halves' 8. */
AMP__AVX2_INLINE uint32_t amp__hmax8u(__m256i a) {
  __m128i x = _mm_max_epu32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0x4e));
  x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0xb1));
  return (uint32_t)_mm_cvtsi128_si32(x);
}
AMP__AVX512_INLINE uint32_t amp__hmax16u(__m512i a) {
  return amp__hmax8u(_mm256_max_epu32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1)));
}
#define AMP__QLD16(q) amp__qld16(qt, &qv.s[AMP__QI_##q], i)
#define AMP__QST16(q, x) amp__qst16(qt, &qv.s[AMP__QI_##q], i, q, x, &amx_##q)
#define AMP__Q16_OPS (__m512, amp__add16, amp__sub16, amp__mul16, amp__div16, amp__sqrt16, amp__sign16, AMP__QLD16, \
                      AMP__QST16, _mm512_setzero_ps())
AMP__O_STEP_FN(AMP__AVX512_INLINE, amp__o_step16, __m512, _mm512_set1_ps, AMP__KIND_STEP16, AMP__COMMA amp__qblk *qb)
/* AVX2: 8 elements; a tail through buffers of 8. */
#define AMP__LD8F(q) _mm256_loadu_ps(q)
#define AMP__ST8F(q, x) _mm256_storeu_ps(q, x)
#define AMP__V8_OPS (__m256, _mm256_add_ps, _mm256_sub_ps, amp__mul8, amp__div8, amp__sqrt8, amp__sign8, AMP__LD8F, \
                     AMP__ST8F, _mm256_setzero_ps())
#define AMP__STEP8(BODY, OPS) { \
    __m256 x = amp__mul8(amp__ld8(gt, g), gm), w0 = _mm256_loadu_ps(p); \
    AMP__VAPPLY(BODY, OPS); \
    _mm256_storeu_ps(p, w0); \
    amp__st8(wt, w, rts ? amp__rt8(rt, w0) : w0, 0); }
#define AMP__STEP8_LOOP(BODY) AMP__STEPW_LOOP(8, AMP__STEP8, BODY, AMP__V8_OPS)
/* code[c[j]] * am for 8 codes: by a gather, or (loads 1) by eight plain loads put together, the
   same values (AMD's cores run a gather as a microcoded sequence slower than the loads). */
AMP__AVX2_INLINE __m256 amp__q8_ld8(const float *code, const uint8_t *c, float am, int loads) {
  __m256i x;
  __m256 all;
  if (loads) {
    uint64_t w;
    __m128 lo, hi;
    memcpy(&w, c, 8);
    lo = _mm_setr_ps(code[w & 255u], code[(w >> 8) & 255u], code[(w >> 16) & 255u], code[(w >> 24) & 255u]);
    hi = _mm_setr_ps(code[(w >> 32) & 255u], code[(w >> 40) & 255u], code[(w >> 48) & 255u], code[w >> 56]);
    return amp__mul8(_mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1), _mm256_set1_ps(am));
  }
  x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)c));
  all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  __asm__("" : "+x"(all));   /* a zero source kept: amp__q8_ld16 */
  return amp__mul8(_mm256_mask_i32gather_ps(_mm256_setzero_ps(), code, x, all, 4), _mm256_set1_ps(am));
}
AMP__AVX2_INLINE __m256 amp__qld8(int type, const amp__qmom *s, size_t i) {
  if (type == AMP_MOMENTS_BF16) return amp__ld8_bf16(s->a + 2 * i);
  if (type == AMP_MOMENTS_FP8) return amp__mul8(amp__fp8_dec8(s->a + i, 0), _mm256_set1_ps(s->am));
  return amp__q8_ld8(s->code, s->a + i, s->am, s->loads);
}
AMP__AVX2_INLINE void amp__qst8(int type, const amp__qmom *s, size_t i, float *d, __m256 x, __m256i *amx) {
  if (type == AMP_MOMENTS_BF16 && s->w) { amp__st8_bf16(s->w + 2 * i, x, 0); return; }
  _mm256_storeu_ps(d, x);
  *amx = _mm256_max_epu32(*amx, _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
}
#define AMP__QLD8(q) amp__qld8(qt, &qv.s[AMP__QI_##q], i)
#define AMP__QST8(q, x) amp__qst8(qt, &qv.s[AMP__QI_##q], i, q, x, &amx_##q)
#define AMP__Q8_OPS (__m256, _mm256_add_ps, _mm256_sub_ps, amp__mul8, amp__div8, amp__sqrt8, amp__sign8, AMP__QLD8, \
                     AMP__QST8, _mm256_setzero_ps())
AMP__O_STEP_FN(AMP__AVX2_INLINE, amp__o_step8, __m256, _mm256_set1_ps, AMP__KIND_STEP8, AMP__COMMA amp__qblk *qb)
#undef AMP__Q8_OPS
#undef AMP__QST8
#undef AMP__QLD8
#undef AMP__STEP8_LOOP
#undef AMP__STEP8
#undef AMP__Q16_OPS
#undef AMP__QST16
#undef AMP__QLD16
#undef AMP__STEP16_LOOP
#undef AMP__STEP16F
#undef AMP__STEP16
#undef AMP__KIND_STEP8
#undef AMP__KIND_STEP16
#endif

#ifdef AMP__NEON_SIMD
/* NEON (AArch64): the same bodies on 4 lanes of f32. Every product passes through AMP__ROUNDED (an
   empty asm: neither GCC's -ffp-contract=fast nor clang's fuses it into an FMLA), and the division
   and square root are the FDIV and FSQRT instructions in asm (clang's -ffast-math would otherwise
   multiply by a reciprocal or take a root estimate), so a step gives the plain loop's bits under
   every flag set. The grads and the model copy go through amp__ld4 / amp__st4 (level 1: no BFCVTN),
   so the step takes these loops only while the FPCR is in the state amp__neon_level accepts. The
   moment loops (amp__qblk) run here too, on amp__qld4 / amp__qst4. */
#define AMP__NEON_STEP_INLINE static inline __attribute__((always_inline)) AMP__EXACT_FP
AMP__NEON_STEP_INLINE float32x4_t amp__add4(float32x4_t a, float32x4_t b) { return vaddq_f32(a, b); }
AMP__NEON_STEP_INLINE float32x4_t amp__sub4(float32x4_t a, float32x4_t b) { return vsubq_f32(a, b); }
AMP__NEON_STEP_INLINE float32x4_t amp__mul4(float32x4_t a, float32x4_t b) {
  float32x4_t r = vmulq_f32(a, b);
  AMP__ROUNDED(r);
  return r;
}
AMP__NEON_STEP_INLINE float32x4_t amp__div4(float32x4_t a, float32x4_t b) {
  float32x4_t r;
  __asm__("fdiv %0.4s, %1.4s, %2.4s" : "=w"(r) : "w"(a), "w"(b));
  return r;
}
AMP__NEON_STEP_INLINE float32x4_t amp__sqrt4(float32x4_t a) {
  float32x4_t r;
  __asm__("fsqrt %0.4s, %1.4s" : "=w"(r) : "w"(a));
  return r;
}
/* amp__sign on lanes, on the bits: +-1 with u's sign, +0 for +-0, u itself for NaN. */
AMP__NEON_STEP_INLINE float32x4_t amp__sign4(float32x4_t u) {
  uint32x4_t b = vreinterpretq_u32_f32(u), a = vandq_u32(b, vdupq_n_u32(0x7fffffffu));
  uint32x4_t r = vorrq_u32(vandq_u32(b, vdupq_n_u32(0x80000000u)), vdupq_n_u32(0x3f800000u));
  r = vbicq_u32(r, vceqq_u32(a, vdupq_n_u32(0u)));
  r = vbslq_u32(vcgtq_u32(a, vdupq_n_u32(0x7f800000u)), b, r);
  return vreinterpretq_f32_u32(r);
}
/* amp__round_to on lanes (as amp__rt8). */
AMP__NEON_STEP_INLINE float32x4_t amp__rt4(amp_dtype t, float32x4_t x) {
  uint32_t buf[4];
  amp__st4(t, buf, x, 0);
  return amp__ld4(t, buf);
}
#define AMP__KIND_STEP4(kd, name, nm, lr_, b1_, b2_, coefs, elem, dev, vec) \
  case kd: if (!AMP__VHAS_##vec) return 0; \
    if (qb) AMP__QSTEP_LOOP(4, uint32x4_t, vdupq_n_u32(0u), vmaxvq_u32, AMP__STEP4, AMP__V_##vec, AMP__Q4_OPS) \
    else { AMP__STEP4_LOOP(AMP__V_##vec) } \
    return 1;
#define AMP__LD4F(q) vld1q_f32(q)
#define AMP__ST4F(q, x) vst1q_f32(q, x)
#define AMP__V4_OPS (float32x4_t, amp__add4, amp__sub4, amp__mul4, amp__div4, amp__sqrt4, amp__sign4, AMP__LD4F, \
                     AMP__ST4F, vdupq_n_f32(0.0f))
#define AMP__STEP4(BODY, OPS) { \
    float32x4_t x = amp__mul4(amp__ld4(gt, g), gm), w0 = vld1q_f32(p); \
    AMP__VAPPLY(BODY, OPS); \
    vst1q_f32(p, w0); \
    amp__st4(wt, w, rts ? amp__rt4(rt, w0) : w0, 0); }
#define AMP__STEP4_LOOP(BODY) AMP__STEPW_LOOP(4, AMP__STEP4, BODY, AMP__V4_OPS)
/* The moment loops' loads and stores on 4 lanes (as amp__qld8 / amp__qst8). NEON has no gather: an
   8-bit block's four map values are read lane by lane. */
AMP__NEON_STEP_INLINE float32x4_t amp__q8_ld4(const float *code, const uint8_t *c, float am) {
  float32x4_t x = vdupq_n_f32(0.0f);
  x = vld1q_lane_f32(code + c[0], x, 0);
  x = vld1q_lane_f32(code + c[1], x, 1);
  x = vld1q_lane_f32(code + c[2], x, 2);
  x = vld1q_lane_f32(code + c[3], x, 3);
  return amp__mul4(x, vdupq_n_f32(am));
}
AMP__NEON_STEP_INLINE float32x4_t amp__qld4(int type, const amp__qmom *s, size_t i) {
  if (type == AMP_MOMENTS_BF16) return amp__ld4_bf16(s->a + 2 * i);
  if (type == AMP_MOMENTS_FP8) {   /* 4 codes (4 bytes read, no more) widened, times scale_inv */
    uint32_t c;
    memcpy(&c, s->a + i, 4);
    return amp__mul4(amp__fp8_dec4(vget_low_u16(vmovl_u8(vcreate_u8((uint64_t)c))), 0), vdupq_n_f32(s->am));
  }
  return amp__q8_ld4(s->code, s->a + i, s->am);
}
AMP__NEON_STEP_INLINE void amp__qst4(int type, const amp__qmom *s, size_t i, float *d, float32x4_t x, uint32x4_t *amx) {
  if (type == AMP_MOMENTS_BF16 && s->w) { amp__st4_bf16(s->w + 2 * i, x, 0); return; }   /* amp_f32_to_bf16's bits (no BFCVTN) */
  vst1q_f32(d, x);
  *amx = vmaxq_u32(*amx, vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x7fffffffu)));
}
#define AMP__QLD4(q) amp__qld4(qt, &qv.s[AMP__QI_##q], i)
#define AMP__QST4(q, x) amp__qst4(qt, &qv.s[AMP__QI_##q], i, q, x, &amx_##q)
#define AMP__Q4_OPS (float32x4_t, amp__add4, amp__sub4, amp__mul4, amp__div4, amp__sqrt4, amp__sign4, AMP__QLD4, \
                     AMP__QST4, vdupq_n_f32(0.0f))
AMP__O_STEP_FN(AMP__NEON_STEP_INLINE, amp__o_step4, float32x4_t, vdupq_n_f32, AMP__KIND_STEP4, AMP__COMMA amp__qblk *qb)
#undef AMP__Q4_OPS
#undef AMP__QST4
#undef AMP__QLD4
/* amp__o_low_vec's loop on 4 lanes (the x86 loops' comment below says what it computes): the
   masters decoded (amp__split_decode, or the bf16 values), stepped, encoded (amp__split_encode, or
   rounded stochastically with element i's bits: for i a multiple of 4 the four 16-bit fields of one
   scalar amp__mix64, as amp__sr_bits16 defines them); whole vectors only. */
AMP__NEON_STEP_INLINE float32x4_t amp__master_ld4(const amp_bf16 *w, const uint16_t *rem) {
  uint32x4_t u = vshll_n_u16(vld1_u16(w), 16);
  if (rem) {
    uint32x4_t lo = vmovl_u16(vld1_u16(rem));
    u = vsubq_u32(vaddq_u32(u, lo), vshlq_n_u32(vandq_u32(lo, vdupq_n_u32(0x8000u)), 1));
  }
  return vreinterpretq_f32_u32(u);
}
AMP__NEON_STEP_INLINE void amp__master_st4(amp_bf16 *w, uint16_t *rem, uint64_t key, uint64_t i, float32x4_t x) {
  uint32x4_t u = vreinterpretq_u32_f32(x), hi;
  uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
  if (rem) {
    hi = vshrq_n_u32(vaddq_u32(u, vdupq_n_u32(0x8000u)), 16);
    vst1_u16(rem, vmovn_u32(vbicq_u32(vandq_u32(u, vdupq_n_u32(0xffffu)), nan)));
  } else {
    uint32x4_t r;
    if (i & 3u) {
      uint32_t b[4];
      int j;
      for (j = 0; j < 4; j++) b[j] = amp__sr_bits16(key, i + (uint64_t)j);
      r = vld1q_u32(b);
    } else {
      r = vmovl_u16(vcreate_u16(amp__mix64(key + ((i >> 2) + 1u) * AMP__MIX_STEP)));
    }
    hi = vshrq_n_u32(vaddq_u32(u, r), 16);
  }
  /* a NaN lane: amp_f32_to_bf16's quiet NaN, (u >> 16) | 0x40 */
  hi = vbslq_u32(nan, vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40u)), hi);
  vst1_u16(w, vmovn_u32(hi));
}
#define AMP__KIND_LOW4(kd, name, nm, lr_, b1_, b2_, coefs, elem, dev, vec) \
  case kd: \
    if (!AMP__VHAS_##vec) return 0; \
    AMP__LOWW_LOOP(4, float32x4_t, amp__mul4, amp__ld4, AMP__LD4F, AMP__ST4F, amp__master_ld4, amp__master_st4, \
                   AMP__V4_OPS, AMP__V_##vec) \
    return 1;
AMP__O_LOW_FN(AMP__NEON_STEP_INLINE, amp__o_low4, float32x4_t, vdupq_n_f32, AMP__KIND_LOW4)
#undef AMP__KIND_LOW4
#define AMP__LOW_G4_(E, N, T, S) return amp__o_low4(kind, p, w, rem, key, m, v, g, E, n, gmul, c);
static AMP__EXACT_FP int amp__o_low_neon(amp_optim_kind kind, float *p, amp_bf16 *w, uint16_t *rem, uint64_t key,
                                         float *m, float *v, const void *g, amp_dtype gt, size_t n, float gmul,
                                         const amp_step_coefs *c) {
  AMP__DTYPE_VSWITCH(gt, AMP__LOW_G4_)
  return 0;
}
#undef AMP__LOW_G4_
#undef AMP__STEP4_LOOP
#undef AMP__STEP4
#undef AMP__V4_OPS
#undef AMP__ST4F
#undef AMP__LD4F
#undef AMP__KIND_STEP4
/* The step on NEON (l: 1, the only level) with grads and model copy of one type t, as on x86.
   1: done; 0: no vector body for kind, nothing written. */
#define AMP__O_SAME4_(E, N, T, S) return amp__o_step4(kind, p, m, v, g, E, w, E, rt, n, gmul, c, qb);
static AMP__EXACT_FP int amp__o_step_same(int l, amp_optim_kind kind, float *p, float *m, float *v, const void *g,
                                          void *w, amp_dtype t, amp_dtype rt, size_t n, float gmul,
                                          const amp_step_coefs *c, amp__qblk *qb) {
  (void)l;
  AMP__DTYPE_VSWITCH(t, AMP__O_SAME4_)
  return 0;
}
#undef AMP__O_SAME4_
/* The scan (amp__o_scan_body; with stats amp__o_scan_stats_body) on NEON: element i's square in
   double lane i % 32 (16 float64x2 accumulators, 32 elements a round), the lanes then added in
   order by amp__o_scan_finish: the plain loop's sums, the same bits. x = g * inv through amp__mul4;
   an f32 squares exactly in double, so a fused square-and-add (FMLA) would change no bit either, and
   each accumulator passes through AMP__ROUNDED after its add (clang's -Ofast may not regroup the
   sums). A tail runs zero-padded (a 0 grad adds +0). With stats: amp__gstat_add on 4 lanes, as the
   AVX-512 loop does it (inf/NaN on y's bits, zero and subnormal on the decoded g's bits: FCVTL from
   f16 never flushes, the bf16 shift and an f32 load do no arithmetic), the counts in u32 lanes
   added into st every 4096 elements; the tail's elements through amp__gstat_add itself. */
typedef struct amp__gstat4 { uint32x4_t amax, nf, nz, ns; } amp__gstat4;
AMP__NEON_STEP_INLINE void amp__o_stat4(float32x4_t gv, float32x4_t y, uint32x4_t thr, amp__gstat4 *s) {
  const uint32x4_t ab = vdupq_n_u32(0x7fffffffu), ex = vdupq_n_u32(0x7f800000u);
  uint32x4_t yb = vreinterpretq_u32_f32(y), ga = vandq_u32(vreinterpretq_u32_f32(gv), ab);
  uint32x4_t fm = vmvnq_u32(vceqq_u32(vandq_u32(yb, ex), ex));   /* lanes with a finite y */
  uint32x4_t zm = vandq_u32(fm, vceqq_u32(ga, vdupq_n_u32(0u)));
  uint32x4_t sm = vbicq_u32(vandq_u32(fm, vcltq_u32(ga, thr)), zm);
  s->nf = vsubq_u32(s->nf, vmvnq_u32(fm));   /* a mask lane is -1: subtracting it counts one */
  s->nz = vsubq_u32(s->nz, zm);
  s->ns = vsubq_u32(s->ns, sm);
  s->amax = vmaxq_u32(s->amax, vandq_u32(vandq_u32(yb, ab), fm));
}
AMP__NEON_STEP_INLINE void amp__o_scan32x4(const char *s, amp_dtype t, size_t es, float32x4_t vi, float64x2_t *a,
                                           uint32x4_t thr, amp__gstat4 *s4) {
  int q;
  for (q = 0; q < 8; q++) {
    float32x4_t gv = amp__ld4(t, s + 4 * (size_t)q * es), x = amp__mul4(gv, vi);
    float64x2_t lo = vcvt_f64_f32(vget_low_f32(x)), hi = vcvt_high_f64_f32(x);
    a[2 * q] = vaddq_f64(a[2 * q], vmulq_f64(lo, lo));
    a[2 * q + 1] = vaddq_f64(a[2 * q + 1], vmulq_f64(hi, hi));
    AMP__ROUNDED(a[2 * q]);
    AMP__ROUNDED(a[2 * q + 1]);
    if (s4) amp__o_stat4(gv, x, thr, s4);
  }
}
AMP__NEON_STEP_INLINE void amp__o_scan4(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad,
                                        amp__gstat *st) {
  double lanes[AMP__LANES];
  float64x2_t a[16];
  float32x4_t vi = vdupq_n_f32(inv);
  const uint32x4_t z = vdupq_n_u32(0u), thr = vdupq_n_u32(amp__dtype_min_normal_bits(t));
  amp__gstat4 s4;
  size_t es = amp_dtype_size(t), i = 0, n32 = n & ~(size_t)31;
  const char *s = (const char *)g;
  int q;
  for (q = 0; q < 16; q++) a[q] = vdupq_n_f64(0.0);
  s4.amax = s4.nf = s4.nz = s4.ns = z;
  while (i < n32) {
    size_t e = n32 - i > 4096 ? i + 4096 : n32;   /* at most 1024 counted in a lane between flushes */
    for (; i < e; i += 32) amp__o_scan32x4(s + i * es, t, es, vi, a, thr, st ? &s4 : NULL);
    if (st) {
      st->nonfinite += vaddvq_u32(s4.nf); st->zero += vaddvq_u32(s4.nz); st->subnormal += vaddvq_u32(s4.ns);
      s4.nf = s4.nz = s4.ns = z;
    }
  }
  if (i < n) {
    float buf[32];
    memset(buf, 0, sizeof buf);
    memcpy(buf, s + i * es, (n - i) * es);
    amp__o_scan32x4((const char *)buf, t, es, vi, a, thr, NULL);
    if (st) for (; i < n; i++) { float r = amp__load(g, t, i); amp__gstat_add(st, r, r * inv, t); }
  }
  if (st) { uint32_t m = vmaxvq_u32(s4.amax); if (m > st->amax_bits) st->amax_bits = m; }
  for (q = 0; q < 16; q++) vst1q_f64(lanes + 2 * q, a[q]);
  amp__o_scan_finish(lanes, sumsq, bad);
}
static AMP__EXACT_FP void amp__o_scan_neon(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad,
                                           amp__gstat *st) {
#define AMP__B_(E, N, T, S) if (st) amp__o_scan4(g, E, n, inv, sumsq, bad, st); else amp__o_scan4(g, E, n, inv, sumsq, bad, NULL); break;
  AMP__DTYPE_VSWITCH(t, AMP__B_)
#undef AMP__B_
}
#endif
#ifdef AMP__CPU_SIMD
#undef AMP__QSTEP_LOOP
#endif


#ifdef AMP__X86_SIMD

/* The step of level l (1 AVX2, 2 AVX-512) with grads and model copy of one type t, a constant in
   each instance (amp__o_step_vec converts other pairs around the f32 one). 1: done; 0: the kind
   has no vector body (the plain loop runs it), nothing written. */
#define AMP__O_SAME16_(E, N, T, S) return amp__o_step16(kind, p, m, v, g, E, w, E, rt, n, gmul, c, qb);
#define AMP__O_SAME8_(E, N, T, S) return amp__o_step8(kind, p, m, v, g, E, w, E, rt, n, gmul, c, qb);
static AMP__AVX512 int amp__o_same_avx512(amp_optim_kind kind, float *p, float *m, float *v, const void *g, void *w,
                                          amp_dtype t, amp_dtype rt, size_t n, float gmul, const amp_step_coefs *c,
                                          amp__qblk *qb) {
  AMP__DTYPE_VSWITCH(t, AMP__O_SAME16_)
  return 0;
}
static AMP__AVX2 int amp__o_same_avx2(amp_optim_kind kind, float *p, float *m, float *v, const void *g, void *w,
                                      amp_dtype t, amp_dtype rt, size_t n, float gmul, const amp_step_coefs *c,
                                      amp__qblk *qb) {
  AMP__DTYPE_VSWITCH(t, AMP__O_SAME8_)
  return 0;
}
#undef AMP__O_SAME16_
#undef AMP__O_SAME8_
static int amp__o_step_same(int l, amp_optim_kind kind, float *p, float *m, float *v, const void *g, void *w,
                            amp_dtype t, amp_dtype rt, size_t n, float gmul, const amp_step_coefs *c, amp__qblk *qb) {
  return l >= 2 ? amp__o_same_avx512(kind, p, m, v, g, w, t, rt, n, gmul, c, qb)
                : amp__o_same_avx2(kind, p, m, v, g, w, t, rt, n, gmul, c, qb);
}

/* The 16-bit stores the step writes outside the update, on 8 lanes (AVX2; the AVX-512 level runs
   them too): amp__o_master_load / amp__o_master_store and the stochastic rounding of a bf16 copy,
   the same bits. The counter hash amp__sr_bits16 on 4 64-bit lanes: AVX2 has no 64-bit multiply,
   so the low 64 bits of each product are put together from three 32 x 32 -> 64 ones. */
AMP__AVX2_INLINE __m128i amp__mul64x2(__m128i a, __m128i b) {
  __m128i lo = _mm_mul_epu32(a, b);
  __m128i cross = _mm_add_epi64(_mm_mul_epu32(_mm_srli_epi64(a, 32), b), _mm_mul_epu32(a, _mm_srli_epi64(b, 32)));
  return _mm_add_epi64(lo, _mm_slli_epi64(cross, 32));
}
#define AMP__SET1X2(c) _mm_set1_epi64x((long long)(c))
AMP__AVX2_INLINE __m128i amp__mix64x2(__m128i z) {   /* amp__mix64 on 2 lanes */
  AMP__MIX64_STEPS(z, _mm_xor_si128, _mm_srli_epi64, amp__mul64x2, AMP__SET1X2);
  return z;
}
#undef AMP__SET1X2
/* amp__sr_bits16(key, i + j) in lane j = 0..7: for i a multiple of 4 the 16-bit fields of the
   mixes of counters i / 4 and i / 4 + 1, widened; else element by element (no loop here asks). */
AMP__AVX2_INLINE __m256i amp__sr_bits8(uint64_t key, uint64_t i) {
  const uint64_t step = AMP__MIX_STEP, b = key + ((i >> 2) + 1u) * step;
  if (i & 3u) {
    uint32_t r[8];
    int j;
    for (j = 0; j < 8; j++) r[j] = amp__sr_bits16(key, i + (uint64_t)j);
    return _mm256_loadu_si256((const __m256i *)r);
  }
  return _mm256_cvtepu16_epi32(amp__mix64x2(_mm_set_epi64x((long long)(b + step), (long long)b)));
}
AMP__AVX2_INLINE __m128i amp__pack8(__m256i r) {   /* 8 lanes <= 0xffff to 8 16-bit elements */
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
AMP__AVX2_INLINE __m256i amp__widen8(const uint16_t *p) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
}
/* 8 masters: amp__split_decode(w, rem), or the bf16 values themselves (rem NULL) */
AMP__AVX2_INLINE __m256 amp__master_ld8(const amp_bf16 *w, const uint16_t *rem) {
  __m256i u = _mm256_slli_epi32(amp__widen8(w), 16);
  if (rem) {
    __m256i lo = amp__widen8(rem);
    u = _mm256_sub_epi32(_mm256_add_epi32(u, lo), _mm256_slli_epi32(_mm256_and_si256(lo, _mm256_set1_epi32(0x8000)), 1));
  }
  return _mm256_castsi256_ps(u);
}
/* 8 masters x written back: amp__split_encode into w, rem; or (rem NULL) rounded stochastically
   into w with the bits of key at elements i .. i + 7 (amp__f32_to_bf16_sr) */
AMP__AVX2_INLINE void amp__master_st8(amp_bf16 *w, uint16_t *rem, uint64_t key, uint64_t i, __m256 x) {
  __m256i u = _mm256_castps_si256(x), nan = amp__nan8(u), hi;
  if (rem) {
    hi = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x8000)), 16);
    _mm_storeu_si128((__m128i *)rem, amp__pack8(_mm256_andnot_si256(nan, _mm256_and_si256(u, _mm256_set1_epi32(0xffff)))));
  } else {
    hi = _mm256_srli_epi32(_mm256_add_epi32(u, amp__sr_bits8(key, i)), 16);
  }
  /* a NaN lane: amp_f32_to_bf16's quiet NaN, (u >> 16) | 0x40 */
  hi = _mm256_blendv_epi8(hi, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
  _mm_storeu_si128((__m128i *)w, amp__pack8(hi));
}
static AMP__AVX2 void amp__o_master_load_avx2(float *d, const amp_bf16 *w, const uint16_t *rem, size_t i0, size_t k) {
  size_t i;
  for (i = 0; i + 8 <= k; i += 8) _mm256_storeu_ps(d + i, amp__master_ld8(w + i0 + i, rem ? rem + i0 + i : NULL));
  if (i < k) {   /* the tail through buffers of 8 */
    amp_bf16 bw[8] = {0};
    uint16_t br[8] = {0};
    float bd[8];
    memcpy(bw, w + i0 + i, (k - i) * 2);
    if (rem) memcpy(br, rem + i0 + i, (k - i) * 2);
    _mm256_storeu_ps(bd, amp__master_ld8(bw, rem ? br : NULL));
    memcpy(d + i, bd, (k - i) * 4);
  }
}
static AMP__AVX2 void amp__o_master_store_avx2(amp_bf16 *w, uint16_t *rem, uint64_t key, size_t i0, const float *p,
                                               size_t k) {
  size_t i;
  for (i = 0; i + 8 <= k; i += 8)
    amp__master_st8(w + i0 + i, rem ? rem + i0 + i : NULL, key, (uint64_t)(i0 + i), _mm256_loadu_ps(p + i));
  if (i < k) {
    float bp[8] = {0};
    amp_bf16 bw[8];
    uint16_t br[8];
    memcpy(bp, p + i, (k - i) * 4);
    amp__master_st8(bw, rem ? br : NULL, key, (uint64_t)(i0 + i), _mm256_loadu_ps(bp));
    memcpy(w + i0 + i, bw, (k - i) * 2);
    if (rem) memcpy(rem + i0 + i, br, (k - i) * 2);
  }
}
#undef AMP__STEP_CASES

/* The scan on vectors: lanes 0..31 as four (AVX-512) or eight (AVX2) double accumulators. */
/* a + x[0..8)^2 and a + x[8..16)^2 lane-wise in double. A fused multiply-add gives the same bits
   as the separate ones here: the square of a float is exact in double. */
AMP__AVX512_INLINE __m512d amp__sq_lo(__m512d a, __m512 x) {
  __m512d d = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  return _mm512_fmadd_pd(d, d, a);
}
AMP__AVX512_INLINE __m512d amp__sq_hi(__m512d a, __m512 x) {
  __m512d d = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm512_fmadd_pd(d, d, a);
}
AMP__AVX512_INLINE void amp__o_scan16(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad) {
  double lanes[AMP__LANES];
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  __m512 vi = _mm512_set1_ps(inv);
  size_t es = amp_dtype_size(t), i;
  const char *s = (const char *)g;
  for (i = 0; i + 32 <= n; i += 32) {
    __m512 x0 = _mm512_mul_ps(amp__ld16(t, s + i * es, 0xffff), vi),
           x1 = _mm512_mul_ps(amp__ld16(t, s + (i + 16) * es, 0xffff), vi);
    a0 = amp__sq_lo(a0, x0); a1 = amp__sq_hi(a1, x0); a2 = amp__sq_lo(a2, x1); a3 = amp__sq_hi(a3, x1);
  }
  if (i < n) {   /* masked-off lanes load 0 and add +0, which leaves a lane (never -0) as it was */
    size_t k = n - i;
    __m512 x0 = _mm512_mul_ps(amp__ld16(t, s + i * es, amp__mask16(k)), vi);
    __m512 x1 = _mm512_mul_ps(amp__ld16(t, s + (i + 16) * es, amp__mask16(k > 16 ? k - 16 : 0)), vi);
    a0 = amp__sq_lo(a0, x0); a1 = amp__sq_hi(a1, x0); a2 = amp__sq_lo(a2, x1); a3 = amp__sq_hi(a3, x1);
  }
  _mm512_storeu_pd(lanes, a0);
  _mm512_storeu_pd(lanes + 8, a1);
  _mm512_storeu_pd(lanes + 16, a2);
  _mm512_storeu_pd(lanes + 24, a3);
  amp__o_scan_finish(lanes, sumsq, bad);
}
AMP__AVX2_INLINE void amp__o_scan32x8(const char *s, amp_dtype t, size_t es, __m256 vi, __m256d *a) {
  int q;
  for (q = 0; q < 4; q++) {
    __m256 x = _mm256_mul_ps(amp__ld8(t, s + 8 * (size_t)q * es), vi);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    a[2 * q] = _mm256_add_pd(a[2 * q], _mm256_mul_pd(lo, lo));
    a[2 * q + 1] = _mm256_add_pd(a[2 * q + 1], _mm256_mul_pd(hi, hi));
  }
}
AMP__AVX2_INLINE void amp__o_scan8(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad) {
  double lanes[AMP__LANES];
  __m256d a[8];
  __m256 vi = _mm256_set1_ps(inv);
  size_t es = amp_dtype_size(t), i;
  const char *s = (const char *)g;
  int q;
  for (q = 0; q < 8; q++) a[q] = _mm256_setzero_pd();
  for (i = 0; i + 32 <= n; i += 32) amp__o_scan32x8(s + i * es, t, es, vi, a);
  if (i < n) {   /* zero-padded: a 0 grad adds +0 */
    float buf[32];
    memset(buf, 0, sizeof buf);
    memcpy(buf, s + i * es, (n - i) * es);
    amp__o_scan32x8((const char *)buf, t, es, vi, a);
  }
  for (q = 0; q < 8; q++) _mm256_storeu_pd(lanes + 4 * q, a[q]);
  amp__o_scan_finish(lanes, sumsq, bad);
}
/* The scan with gradient stats on vectors: the sums of amp__o_scan16 (the same lanes, the same
   bits), and amp__grad_class / amp__gstat_add written on 16 lanes: inf/NaN on y's bits, zero and
   subnormal on the decoded g's bits (F16C, the bf16 shift and an f32 load do no arithmetic, so a
   flush-to-zero mode cannot hide a subnormal), amax over the finite |y| as unsigned bits. */
AMP__AVX512_INLINE void amp__o_stat16(__m512 gv, __m512 y, __mmask16 m, amp_dtype t, __m512i *amax, uint64_t *nf,
                                       uint64_t *nz, uint64_t *ns) {
  const __m512i ab = _mm512_set1_epi32(0x7fffffff), ex = _mm512_set1_epi32(0x7f800000);
  const __m512i thr = _mm512_set1_epi32((int)amp__dtype_min_normal_bits(t));   /* f16 2^-14, f32/bf16 2^-126 */
  __m512i yb = _mm512_castps_si512(y), ga = _mm512_and_si512(_mm512_castps_si512(gv), ab);
  __mmask16 fm = _mm512_mask_cmpneq_epi32_mask(m, _mm512_and_si512(yb, ex), ex);   /* live lanes with a finite y */
  __mmask16 zm = _mm512_mask_cmpeq_epi32_mask(fm, ga, _mm512_setzero_si512());
  __mmask16 sm = _mm512_mask_cmplt_epu32_mask((__mmask16)(fm & ~zm), ga, thr);
  *nf += (uint64_t)__builtin_popcount((unsigned)(m & ~fm));
  *nz += (uint64_t)__builtin_popcount((unsigned)zm);
  *ns += (uint64_t)__builtin_popcount((unsigned)sm);
  *amax = _mm512_mask_max_epu32(*amax, fm, *amax, _mm512_and_si512(yb, ab));
}
AMP__AVX512_INLINE void amp__o_scan16s(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad,
                                       amp__gstat *st) {
  double lanes[AMP__LANES];
  uint32_t am[16];
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  __m512 vi = _mm512_set1_ps(inv);
  __m512i amax = _mm512_setzero_si512();
  uint64_t nf = 0, nz = 0, ns = 0;
  size_t es = amp_dtype_size(t), i;
  const char *s = (const char *)g;
  int j;
  for (i = 0; i < n; i += 32) {   /* the tail masked: masked-off lanes load 0, add +0 and are not counted */
    size_t k = n - i;
    __mmask16 m0 = amp__mask16(k), m1 = amp__mask16(k > 16 ? k - 16 : 0);
    __m512 g0 = amp__ld16(t, s + i * es, m0), g1 = amp__ld16(t, s + (i + 16) * es, m1);
    __m512 x0 = _mm512_mul_ps(g0, vi), x1 = _mm512_mul_ps(g1, vi);
    a0 = amp__sq_lo(a0, x0); a1 = amp__sq_hi(a1, x0); a2 = amp__sq_lo(a2, x1); a3 = amp__sq_hi(a3, x1);
    amp__o_stat16(g0, x0, m0, t, &amax, &nf, &nz, &ns);
    amp__o_stat16(g1, x1, m1, t, &amax, &nf, &nz, &ns);
  }
  _mm512_storeu_pd(lanes, a0);
  _mm512_storeu_pd(lanes + 8, a1);
  _mm512_storeu_pd(lanes + 16, a2);
  _mm512_storeu_pd(lanes + 24, a3);
  _mm512_storeu_si512((void *)am, amax);
  for (j = 0; j < 16; j++) if (am[j] > st->amax_bits) st->amax_bits = am[j];
  st->nonfinite += nf; st->zero += nz; st->subnormal += ns;
  amp__o_scan_finish(lanes, sumsq, bad);
}
static AMP__AVX512 void amp__o_scan_stats_avx512(const void *g, amp_dtype t, size_t n, float inv, double *sumsq,
                                                 int *bad, amp__gstat *st) {
#define AMP__B_(E, N, T, S) amp__o_scan16s(g, E, n, inv, sumsq, bad, st); break;
  AMP__DTYPE_VSWITCH(t, AMP__B_)
#undef AMP__B_
}
static AMP__AVX512 void amp__o_scan_avx512(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad) {
#define AMP__B_(E, N, T, S) amp__o_scan16(g, E, n, inv, sumsq, bad); break;
  AMP__DTYPE_VSWITCH(t, AMP__B_)
#undef AMP__B_
}
static AMP__AVX2 void amp__o_scan_avx2(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad) {
#define AMP__B_(E, N, T, S) amp__o_scan8(g, E, n, inv, sumsq, bad); break;
  AMP__DTYPE_VSWITCH(t, AMP__B_)
#undef AMP__B_
}
/* The same on 16 lanes (AVX-512: F, BW, DQ for the 64-bit multiply), tails under a lane mask. */
#define AMP__SET1X4(c) _mm256_set1_epi64x((long long)(c))
AMP__AVX512_INLINE __m256i amp__mix64x4q(__m256i z) {   /* amp__mix64 on 4 lanes (AVX-512 DQ/VL multiply) */
  AMP__MIX64_STEPS(z, _mm256_xor_si256, _mm256_srli_epi64, _mm256_mullo_epi64, AMP__SET1X4);
  return z;
}
#undef AMP__SET1X4
/* amp__sr_bits16(key, i + j) in lane j = 0..15: for i a multiple of 4 the 16-bit fields of the
   mixes of counters i / 4 .. i / 4 + 3, widened; else element by element (no loop here asks). */
AMP__AVX512_INLINE __m512i amp__sr_bits16x(uint64_t key, uint64_t i) {
  const uint64_t step = AMP__MIX_STEP, b = key + ((i >> 2) + 1u) * step;
  if (i & 3u) {
    uint32_t r[16];
    int j;
    for (j = 0; j < 16; j++) r[j] = amp__sr_bits16(key, i + (uint64_t)j);
    return _mm512_loadu_si512(r);
  }
  return _mm512_cvtepu16_epi32(amp__mix64x4q(_mm256_add_epi64(
      _mm256_set1_epi64x((long long)b), _mm256_setr_epi64x(0, (long long)step, (long long)(2u * step), (long long)(3u * step)))));
}
AMP__AVX512_INLINE __m512 amp__master_ld16(const amp_bf16 *w, const uint16_t *rem, __mmask16 k) {
  __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(amp__ld16h(w, k)), 16);
  if (rem) {
    __m512i lo = _mm512_cvtepu16_epi32(amp__ld16h(rem, k));
    u = _mm512_sub_epi32(_mm512_add_epi32(u, lo), _mm512_slli_epi32(_mm512_and_si512(lo, _mm512_set1_epi32(0x8000)), 1));
  }
  return _mm512_castsi512_ps(u);
}
AMP__AVX512_INLINE void amp__master_st16(amp_bf16 *w, uint16_t *rem, uint64_t key, uint64_t i, __m512 x,
                                         __mmask16 k) {
  __m512i u = _mm512_castps_si512(x), hi;
  __mmask16 nan = amp__nan16(u);
  if (rem) {
    hi = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x8000)), 16);
    amp__st16h(rem, _mm512_cvtepi32_epi16(_mm512_maskz_and_epi32((__mmask16)~nan, u, _mm512_set1_epi32(0xffff))), k, 0);
  } else {
    hi = _mm512_srli_epi32(_mm512_add_epi32(u, amp__sr_bits16x(key, i)), 16);
  }
  /* a NaN lane: amp_f32_to_bf16's quiet NaN, (u >> 16) | 0x40 */
  hi = _mm512_mask_or_epi32(hi, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  amp__st16h(w, _mm512_cvtepi32_epi16(hi), k, 0);
}
static AMP__AVX512 void amp__o_master_load_avx512(float *d, const amp_bf16 *w, const uint16_t *rem, size_t i0,
                                                  size_t k) {
  size_t i;
  for (i = 0; i < k; i += 16) {
    __mmask16 m = amp__mask16(k - i);
    amp__st16f(d + i, amp__master_ld16(w + i0 + i, rem ? rem + i0 + i : NULL, m), m);
  }
}
static AMP__AVX512 void amp__o_master_store_avx512(amp_bf16 *w, uint16_t *rem, uint64_t key, size_t i0, const float *p,
                                                   size_t k) {
  size_t i;
  for (i = 0; i < k; i += 16) {
    __mmask16 m = amp__mask16(k - i);
    amp__master_st16(w + i0 + i, rem ? rem + i0 + i : NULL, key, (uint64_t)(i0 + i), amp__ld16f(p + i, m), m);
  }
}

/* The step of a tensor whose bf16 model copy is written by amp__master_st16 / _st8, with the
   masters in registers from load to store: AMP_MASTER_SPLIT (p NULL; decoded from w and rem,
   encoded back), AMP_MASTER_NONE (p and rem NULL; w's values, written back stochastically with
   key's bits) and an fp32 master with a stochastic bf16 copy (p; rem NULL). The bits of
   amp__o_master_load, amp__o_step and amp__o_master_store in turn (the kind's vector body on the
   decoded masters), without their float blocks: one read and one write of each array. AVX2 takes
   whole vectors only (n a multiple of 8: the tail takes the block path). 1: done; 0: the kind has
   no vector body. */
#define AMP__LOW16(BODY) { \
    __m512 x = amp__mul16(amp__ld16(gt, g, k), gm); \
    __m512 w0 = p ? amp__ld16f(p + i, k) : amp__master_ld16(w + i, rem ? rem + i : NULL, k); \
    AMP__VAPPLY(BODY, AMP__V16_OPS); \
    if (p) amp__st16f(p + i, w0, k); \
    amp__master_st16(w + i, rem ? rem + i : NULL, key, (uint64_t)i, w0, k); }
#define AMP__KIND_LOW16(kd, name, nm, lr_, b1_, b2_, coefs, elem, dev, vec) \
  case kd: \
    if (!AMP__VHAS_##vec) return 0; \
    for (i = 0; i + 16 <= n; i += 16, m = m ? m + 16 : m, v = v ? v + 16 : v, g = (const char *)g + 16 * gs) { \
      const __mmask16 k = 0xffff; \
      AMP__LOW16(AMP__V_##vec) \
    } \
    if (i < n) { \
      const __mmask16 k = amp__mask16(n - i); \
      AMP__LOW16(AMP__V_##vec) \
    } \
    return 1;
AMP__O_LOW_FN(AMP__AVX512_INLINE, amp__o_low16, __m512, _mm512_set1_ps, AMP__KIND_LOW16)
#define AMP__KIND_LOW8(kd, name, nm, lr_, b1_, b2_, coefs, elem, dev, vec) \
  case kd: \
    if (!AMP__VHAS_##vec) return 0; \
    AMP__LOWW_LOOP(8, __m256, amp__mul8, amp__ld8, AMP__LD8F, AMP__ST8F, amp__master_ld8, amp__master_st8, AMP__V8_OPS, \
                   AMP__V_##vec) \
    return 1;
AMP__O_LOW_FN(AMP__AVX2_INLINE, amp__o_low8, __m256, _mm256_set1_ps, AMP__KIND_LOW8)
#undef AMP__KIND_LOW8
#undef AMP__KIND_LOW16
#undef AMP__LOW16
/* One instance per (kind, grad type), the grad type a constant in each. */
#define AMP__LOW_G16_(E, N, T, S) return amp__o_low16(kind, p, w, rem, key, m, v, g, E, n, gmul, c);
#define AMP__LOW_G8_(E, N, T, S) return amp__o_low8(kind, p, w, rem, key, m, v, g, E, n, gmul, c);
static AMP__AVX512 int amp__o_low_avx512(amp_optim_kind kind, float *p, amp_bf16 *w, uint16_t *rem, uint64_t key,
                                         float *m, float *v, const void *g, amp_dtype gt, size_t n, float gmul,
                                         const amp_step_coefs *c) {
  AMP__DTYPE_VSWITCH(gt, AMP__LOW_G16_)
  return 0;
}
static AMP__AVX2 int amp__o_low_avx2(amp_optim_kind kind, float *p, amp_bf16 *w, uint16_t *rem, uint64_t key, float *m,
                                     float *v, const void *g, amp_dtype gt, size_t n, float gmul,
                                     const amp_step_coefs *c) {
  AMP__DTYPE_VSWITCH(gt, AMP__LOW_G8_)
  return 0;
}
#undef AMP__LOW_G16_
#undef AMP__LOW_G8_
#endif
#ifdef AMP__X86_SIMD
#undef AMP__V8_OPS
#undef AMP__ST8F
#undef AMP__LD8F
#undef AMP__V16_OPS
#undef AMP__ST16F
#undef AMP__LD16F
#endif
#ifdef AMP__CPU_SIMD
#undef AMP__VAPPLY
#undef AMP__V_NONE
#undef AMP__V_LION
#undef AMP__V_ADAM
#undef AMP__V_SGD
#undef AMP__VCOEFS
#endif

/* The fused step above at loop level l over elements 0 .. n - 1 (AVX2 and NEON: the whole vectors
   of them): how many it stepped (0: none; the kind or the grad type has no vector path, or no SIMD). */
static size_t amp__o_low_vec(int l, amp_optim_kind kind, float *p, amp_bf16 *w, uint16_t *rem, uint64_t key, float *m,
                             float *v, const void *g, amp_dtype gt, size_t n, float gmul, const amp_step_coefs *c) {
#ifdef AMP__X86_SIMD
  if (l >= 2 && amp__o_low_avx512(kind, p, w, rem, key, m, v, g, gt, n, gmul, c)) return n;
  if (l == 1 && amp__o_low_avx2(kind, p, w, rem, key, m, v, g, gt, n & ~(size_t)7, gmul, c)) return n & ~(size_t)7;
#elif defined(AMP__NEON_SIMD)
  if (l && amp__o_low_neon(kind, p, w, rem, key, m, v, g, gt, n & ~(size_t)3, gmul, c)) return n & ~(size_t)3;
#else
  (void)l; (void)kind; (void)p; (void)w; (void)rem; (void)key; (void)m; (void)v; (void)g; (void)gt; (void)n;
  (void)gmul; (void)c;
#endif
  return 0;
}

/* The masters' block load and store at loop level l (0 the plain loops, 1 AVX2, 2 AVX-512). */
static void amp__o_master_load_at(int l, float *d, const amp_bf16 *w, const uint16_t *rem, size_t i0, size_t k) {
#ifdef AMP__X86_SIMD
  if (l >= 2) { amp__o_master_load_avx512(d, w, rem, i0, k); return; }
  if (l == 1) { amp__o_master_load_avx2(d, w, rem, i0, k); return; }
#endif
  (void)l;
  amp__o_master_load(d, w, rem, i0, k);
}
static void amp__o_master_store_at(int l, amp_bf16 *w, uint16_t *rem, uint64_t key, size_t i0, const float *p,
                                   size_t k) {
#ifdef AMP__X86_SIMD
  if (l >= 2) { amp__o_master_store_avx512(w, rem, key, i0, p, k); return; }
  if (l == 1) { amp__o_master_store_avx2(w, rem, key, i0, p, k); return; }
#endif
  (void)l;
  amp__o_master_store(w, rem, key, i0, p, k);
}

/* With gradient stats: the AVX-512 loop where the CPU has it, else the portable one (the same bits). */
static void amp__o_scan_with_stats(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad,
                                   amp__gstat *st) {
#ifdef AMP__X86_SIMD
  if (amp__opt_level() >= 2 && amp__dtype_cpu_vec(t)) {
    amp__o_scan_stats_avx512(g, t, n, inv, sumsq, bad, st);
    return;
  }
#endif
#ifdef AMP__NEON_SIMD
  if (amp__opt_level() >= 1 && amp__dtype_cpu_vec(t)) {
    amp__o_scan_neon(g, t, n, inv, sumsq, bad, st);
    return;
  }
#endif
  amp__o_scan_stats(g, t, n, inv, sumsq, bad, st);
}
static void amp__o_scan(const void *g, amp_dtype t, size_t n, float inv, double *sumsq, int *bad) {
#ifdef AMP__X86_SIMD
  int l = amp__dtype_cpu_vec(t) ? amp__opt_level() : 0;
  if (l >= 2) { amp__o_scan_avx512(g, t, n, inv, sumsq, bad); return; }
  if (l == 1) { amp__o_scan_avx2(g, t, n, inv, sumsq, bad); return; }
#elif defined(AMP__NEON_SIMD)
  if (amp__opt_level() >= 1 && amp__dtype_cpu_vec(t)) { amp__o_scan_neon(g, t, n, inv, sumsq, bad, NULL); return; }
#else
  (void)amp__opt_level;
#endif
  amp__o_scan_plain(g, t, n, inv, sumsq, bad);
}

#ifdef AMP__CPU_SIMD
/* The step on the vector loops of level l for grad and model types with a vector path. Grads and
   a copy of one type run whole on loops compiled for it (amp__o_step_same: the usual pairs, f32
   with f32 and a 16-bit copy with its own grads); any other pair a block of AMP__CHUNK elements at
   a time on the f32 ones: the grads widened to f32 (amp__convert_any: exact), the copy converted
   from their f32 result (the loops write it, rounded to rt, into a block buffer; amp__convert_any
   moves it into the copy, a plain copy for an f32 one): the bits of loops compiled for the pair,
   as both conversions are the scalar ones. So each kind's loops
   exist three times a level, not nine (every pair: about 60% of the time GCC took to compile amp.h).
   qb (the moment loops): n at most AMP__CHUNK for a mixed pair, one moment block (0 above that).
   1: done; 0: no vector body for kind, nothing written. */
static int amp__o_qstep_vec(int l, amp_optim_kind kind, float *p, float *m, float *v, const void *g, amp_dtype gt,
                            void *w, amp_dtype wt, amp_dtype rt, size_t n, float gmul, const amp_step_coefs *c,
                            amp__qblk *qb) {
  float gb[AMP__CHUNK], wb[AMP__CHUNK];
  size_t gs = amp_dtype_size(gt), ws = amp_dtype_size(wt), i, k;
  if (gt == wt) return amp__o_step_same(l, kind, p, m, v, g, w, gt, rt, n, gmul, c, qb);
  if (qb && n > AMP__CHUNK) return 0;
  for (i = 0; i < n; i += k) {
    const void *gx = (const char *)g + i * gs;
    k = n - i < AMP__CHUNK ? n - i : AMP__CHUNK;
    if (gt != AMP_F32) { amp__convert_any(gb, AMP_F32, gx, gt, k); gx = gb; }
    if (!amp__o_step_same(l, kind, p + i, m ? m + i : NULL, v ? v + i : NULL, gx, wb, AMP_F32, rt, k, gmul, c, qb))
      return 0;
    amp__convert_any((char *)w + i * ws, wt, wb, AMP_F32, k);
  }
  return 1;
}
static int amp__o_step_vec(int l, amp_optim_kind kind, float *p, float *m, float *v, const void *g, amp_dtype gt,
                           void *w, amp_dtype wt, amp_dtype rt, size_t n, float gmul, const amp_step_coefs *c) {
  return amp__o_qstep_vec(l, kind, p, m, v, g, gt, w, wt, rt, n, gmul, c, NULL);
}
#endif

/* The step of one tensor with an fp32 master p. rt: the model copy's round_to (AMP_F32 but for a
   float copy holding bf16/f16 values); sr: a bf16 copy written with stochastic rounding, the bits
   from key. The vector loops run every kind with a vector body (the kind list's vec column) on
   grad, model and round_to types with a vector path (the format table's cpu_vec); a bf16 copy
   rounded stochastically takes amp__o_low_vec (AVX2's last partial vector: stepped into a float
   block, then rounded from it). Anything else runs the plain loop: the same bits. */
static void amp__o_step(amp_optim_kind kind, float *p, float *m, float *v, const void *g, amp_dtype gt,
                        void *w, amp_dtype wt, amp_dtype rt, int sr, uint64_t key, size_t n, float gmul,
                        const amp_step_coefs *c) {
  int nth = amp__o_threads(n);
  size_t gs = amp_dtype_size(gt);
#ifdef AMP__CPU_SIMD
  int l = amp__kind_vec(kind) && amp__dtype_cpu_vec(gt) && amp__dtype_cpu_vec(wt) && amp__dtype_cpu_vec(rt)
              ? amp__opt_level() : 0;
  if (l && sr) {   /* threads: every block through the second loop (amp__o_low_vec's bits), shared out */
    size_t i0, start = nth > 1 ? 0 : amp__o_low_vec(l, kind, p, (amp_bf16 *)w, NULL, key, m, v, g, gt, n, gmul, c);
    AMP__OMP(omp parallel for num_threads(nth) schedule(static) if (nth > 1))
    for (i0 = start; i0 < n; i0 += AMP__CHUNK) {
      float out[AMP__CHUNK];
      size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
      amp__o_step_vec(l, kind, p + i0, m ? m + i0 : NULL, v ? v + i0 : NULL, (const char *)g + i0 * gs, gt, out, AMP_F32,
                      AMP_F32, k, gmul, c);
      amp__o_master_store_at(l, (amp_bf16 *)w, NULL, key, i0, out, k);
    }
    return;
  }
#endif
  if (nth > 1 && !sr) {   /* threads: each steps its slice as a tensor of its own */
    size_t ws = amp_dtype_size(wt);
    int t;
    AMP__OMP(omp parallel for num_threads(nth) schedule(static, 1))
    for (t = 0; t < nth; t++) {
      size_t lo = amp__o_slice(n, nth, t), hi = amp__o_slice(n, nth, t + 1);
      amp__o_step(kind, p + lo, m ? m + lo : NULL, v ? v + lo : NULL, (const char *)g + lo * gs, gt, (char *)w + lo * ws,
                  wt, rt, 0, 0u, hi - lo, gmul, c);
    }
    return;
  }
#ifdef AMP__CPU_SIMD
  if (l && amp__o_step_vec(l, kind, p, m, v, g, gt, w, wt, rt, n, gmul, c)) return;
#endif
  amp__o_step_plain(kind, p, m, v, g, gt, w, wt, rt, sr, key, n, gmul, c);
}

/* The step of a tensor without an fp32 master array (AMP_MASTER_SPLIT, _NONE): on x86 the fused
   loop amp__o_low_vec; the rest (no vector path, AVX2's last partial vector, NEON and the portable
   build) per block of AMP__CHUNK elements: the masters rebuilt into pb, updated by amp__o_step
   itself (the loops an fp32 master steps in, writing the block's result to a float scratch instead
   of a model copy), written back. So a split master stays equal to an fp32 master bit for bit. */
static void amp__o_step_lowmem(amp_optim_kind kind, amp_bf16 *w, uint16_t *rem, float *m, float *v, const void *g,
                               amp_dtype gt, uint64_t key, size_t n, float gmul, const amp_step_coefs *c) {
  size_t i0, start, gs = amp_dtype_size(gt);
  int l = amp__opt_level(), nth = amp__o_threads(n);
  start = nth > 1 ? 0 : amp__o_low_vec(l, kind, NULL, w, rem, key, m, v, g, gt, n, gmul, c);   /* threads: every block below */
  AMP__OMP(omp parallel for num_threads(nth) schedule(static) if (nth > 1))
  for (i0 = start; i0 < n; i0 += AMP__CHUNK) {
    float pb[AMP__CHUNK], out[AMP__CHUNK];
    size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
    amp__o_master_load_at(l, pb, w, rem, i0, k);
    amp__o_step(kind, pb, m ? m + i0 : NULL, v ? v + i0 : NULL, (const char *)g + i0 * gs, gt, out, AMP_F32, AMP_F32, 0,
                0u, k, gmul, c);
    amp__o_master_store_at(l, w, rem, key, i0, out, k);
  }
}


/* The CPU's form of the 8-bit map: amp__q8_map's values and midpoints, and lookups for a faster
   search than the bisection. */
#define AMP__Q8_EMIN 97     /* the lookup below covers |y| in [2^(97-127), 1): 31 exponents */
#define AMP__Q8_MB 6         /* ... by sign, exponent and the top 6 mantissa bits */
#define AMP__Q8_LUT (2 * 31 << AMP__Q8_MB)
typedef struct amp__qmap {
  float code[256]; double mid[255];
  uint8_t start[AMP__Q8_LUT];   /* the code of each bucket's least value (amp__q8_code) */
  uint8_t c0, cp1, cm1;         /* the codes of 0, 1 and -1 */
  uint32_t vt[AMP__Q8_VLUT];    /* the vector loops' table (amp__q8_vtable) */
  /* the permute path's tables (amp__qmap_perm_make) */
  uint8_t plane[4][256];        /* byte b of code[k]'s bits at plane[b][k] */
  float pe[32];                 /* per row: the least float above its segment edge's midpoint, or 2 */
  uint32_t pq[32];              /* per row: that midpoint's bits where it is a float, else ~0 */
  int32_t prow[32];             /* per row: the segment at its least value */
  float pa[32], pb[32];         /* per segment (y >= 0 at s, y < 0 at 16 + s): t = |y| * pa + pb */
  int32_t pbase[32], pmax[32];  /* ... and the code base +- min(max(floor(t), 0), pmax) */
  int pfast;                    /* 1: every midpoint checked, the segment tables give the codes */
} amp__qmap;
static AMP__EXACT_FP uint8_t amp__q8_search(const amp__qmap *q, float y);
static AMP__EXACT_FP void amp__qmap_perm_make(amp__qmap *q, int is_signed);
static AMP__EXACT_FP void amp__qmap_make(amp__qmap *q, int is_signed) {
  int k;
  amp__q8_map(is_signed, q->code, q->mid);
  for (k = 0; k < AMP__Q8_LUT; k++) {   /* each bucket's least value's code: where amp__q8_code starts */
    uint32_t sg = (uint32_t)(k / (31 << AMP__Q8_MB)), e = (uint32_t)((k >> AMP__Q8_MB) % 31) + AMP__Q8_EMIN;
    uint32_t f = (uint32_t)k & ((1u << AMP__Q8_MB) - 1u), low = (1u << (23 - AMP__Q8_MB)) - 1u;
    q->start[k] = amp__q8_search(q, amp__bits_f32(sg << 31 | e << 23 | f << (23 - AMP__Q8_MB) | (sg ? low : 0u)));
  }
  q->c0 = amp__q8_search(q, 0.0f); q->cp1 = amp__q8_search(q, 1.0f); q->cm1 = amp__q8_search(q, -1.0f);
  amp__q8_vtable(q->mid, q->vt);
  amp__qmap_perm_make(q, is_signed);
}
/* The permute path (AVX-512; amp__q8_pdecode16, amp__q8_pcode16): no table read from memory.
   Decode: the 256 values as four byte planes, looked up 64 codes at a time by byte permutes.
   Encode: the map cut along |y| into segments: 0 below the first midpoint (0's code), 1 + i for
   decade i's values (10^(i-6) times evenly spaced points: t = |y| * pa + pb puts the decade's
   k-th inner midpoint at about k + 1, so that floor(t) counts the midpoints below |y|, clamped to
   the decade's count less one), 8 above the last midpoint (1's code), 9 NaN (code 0). Negative y
   (the signed map) count down from the mirrored segment's base (16 + s; the unsigned map has no
   negative value: code 0). Rows by |y|'s exponent less 103, the row index's low 5 bits (row 0:
   every smaller exponent, which the first midpoint is above; row 24: 1.0, and NaN's exponent 255
   too, which pe = 1.0's successor sends to segment 9) each hold at most one segment edge: a
   lane's segment is prow + (|y| >= pe). Checked here, midpoint by midpoint: where t (one fused
   multiply-add, as the vector lanes compute it) lies 2^-12 or more from every integer, floor(t)
   is the count the bisection gives on either side of every midpoint (a lane within 2^-12,
   flagged by the vector code, takes the bucket table instead), and t is not below 0 at a
   decade's lower edge. Where an edge's midpoint is itself a float (pq), y on it and -y fall on
   different sides (ties go to the lower code): the vector code flags that |y| too. pfast stays 0
   where a check fails. */
#define AMP__Q8_PNEAR (1.0f / 4096.0f)
static AMP__EXACT_FP float amp__q8_pt(float y, float a, float b) {   /* within an ulp of fma(y, a, b) */
  return (float)((double)y * (double)a + (double)b);
}
static AMP__EXACT_FP void amp__qmap_perm_make(amp__qmap *q, int is_signed) {
  static const double pow10[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  const int pos0 = is_signed ? 128 : 1;   /* the code of the least positive value */
  const float h = AMP__Q8_PNEAR / 2;       /* the checks' margin: half the lanes' (an ulp of t to spare) */
  float ep[8];      /* the edges' thresholds: the least float above each edge's midpoint em */
  double em[8];
  int i, k, r, off = 0, ok = 1;
  for (k = 0; k < 256; k++)
    for (i = 0; i < 4; i++) q->plane[i][k] = (uint8_t)(amp__f32_bits(q->code[k]) >> (8 * i));
  for (k = 0; k < 32; k++) { q->pa[k] = 0.0f; q->pb[k] = 0.5f; q->pbase[k] = 0; q->pmax[k] = 0; }   /* t = 0.5: k = 0 */
  q->pbase[0] = pos0 - 1; q->pbase[8] = 255;           /* 0's code, 1's code */
  if (is_signed) { q->pbase[16] = 127; q->pbase[24] = 0; }   /* -0 and the least code (below -1's midpoint) */
  for (i = 0; i < 7; i++) {
    int cnt = is_signed ? 1 << i : 2 << i, first = pos0 + off;
    float a = (float)((double)cnt / (0.9 * pow10[i])), b = (float)(-0.1 * (double)cnt / 0.9);
    em[i] = q->mid[first - 1];   /* the edge below the decade */
    ep[i] = (float)em[i];
    if ((double)ep[i] <= em[i]) ep[i] = amp__bits_f32(amp__f32_bits(ep[i]) + 1u);
    if (!(amp__q8_pt(ep[i], a, b) >= 0.0f)) ok = 0;
    q->pa[1 + i] = a; q->pb[1 + i] = b; q->pbase[1 + i] = first; q->pmax[1 + i] = cnt - 1;
    if (is_signed) { q->pa[17 + i] = a; q->pb[17 + i] = b; q->pbase[17 + i] = 126 - off; q->pmax[17 + i] = cnt - 1; }
    for (k = 0; k + 1 < cnt; k++) {   /* the inner midpoints: the floats either side, and one on it */
      double m = q->mid[first + k];
      float f = (float)m, lo = f, hi = f;
      uint32_t u = amp__f32_bits(f);
      if ((double)f >= m) lo = amp__bits_f32(u - 1u);
      if ((double)f <= m) hi = amp__bits_f32(u + 1u);
      if (!(amp__q8_pt(lo, a, b) < (float)(k + 1) + h) || !(amp__q8_pt(hi, a, b) > (float)(k + 1) - h)) ok = 0;
      if ((double)f == m && !(fabsf(amp__q8_pt(f, a, b) - (float)(k + 1)) < h)) ok = 0;
    }
    off += cnt;
  }
  em[7] = q->mid[254];   /* the edge below 1.0 */
  ep[7] = (float)em[7];
  if ((double)ep[7] <= em[7]) ep[7] = amp__bits_f32(amp__f32_bits(ep[7]) + 1u);
  for (r = 0; r < 32; r++) {   /* rows 25 .. 31: no |y| <= 1 or NaN reaches them */
    uint32_t e = (uint32_t)(r < 25 ? r : 24) + 103u;
    float lo = r ? amp__bits_f32(e << 23) : 0.0f, hi = amp__bits_f32((e + 1u) << 23);
    int seg = 0, inside = 0;
    q->pe[r] = 2.0f; q->pq[r] = 0xffffffffu;
    for (k = 0; k < 8; k++) {
      if (ep[k] <= lo) seg++;
      else if (ep[k] < hi) {
        float below = amp__bits_f32(amp__f32_bits(ep[k]) - 1u);
        inside++; q->pe[r] = ep[k];
        if ((double)below == em[k]) q->pq[r] = amp__f32_bits(below);
      }
    }
    if (inside > 1) ok = 0;
    q->prow[r] = seg;
  }
  q->pe[24] = amp__bits_f32(0x3f800001u);   /* above 1.0: NaN's segment */
  q->pfast = ok;
}
/* The code nearest y (ties: the lower code), by bisection (amp__q8_bisect). */
static AMP__EXACT_FP uint8_t amp__q8_search(const amp__qmap *q, float y) { return amp__q8_bisect(q->mid, y); }
/* The same count, faster: 0 and +-1 from the table; for 2^-30 <= |y| < 1, from the count at the
   least value of y's bucket (its sign, exponent and top 6 mantissa bits; start[]) on, past the few
   midpoints inside the bucket; the count only grows with y, so this is the bisection's answer.
   Else (tiny, NaN) by bisection. */
static AMP__EXACT_FP uint8_t amp__q8_code(const amp__qmap *q, float y) {
  uint32_t u = amp__f32_bits(y), e = (u >> 23) & 0xffu;
  int c;
  if ((u << 1) == 0u) return q->c0;
  if ((u & 0x7fffffffu) == 0x3f800000u) return u >> 31 ? q->cm1 : q->cp1;
  if (e < AMP__Q8_EMIN || e >= 127u) return amp__q8_search(q, y);
  c = q->start[(u >> 31) * (31u << AMP__Q8_MB) + ((e - AMP__Q8_EMIN) << AMP__Q8_MB) +
               ((u >> (23 - AMP__Q8_MB)) & ((1u << AMP__Q8_MB) - 1u))];
  while (c < 255 && (double)y > q->mid[c]) c++;
  return (uint8_t)c;
}
#ifdef AMP__X86_SIMD
/* AMP_MOMENTS_8BIT's vector loops (AVX-512: 16 lanes, AVX2: 8; NEON: 4, below), amp__q8_code's and
   amp__q_load's answers bit for bit. A lane's code: from vt[] at y's bucket (sign, then exponent
   and top 7 mantissa bits: y's high 16 bits less row 103's first, 0 for smaller exponents (row 103:
   every bucket 0's code), the negative rows after the positive ones), the code of the bucket's
   least value, plus one where y's key (its low 16 bits, flipped for negative y) is above the
   bucket's key less one; the scalar search's count. NaN: no table read, code 0 (the bisection's
   answer: no comparison holds). The clamp of y to [-1, 1] is left out: |x| <= absmax, so
   |x / absmax| <= 1 already (a NaN stays NaN either way). The code is left in bits 16 .. 23 of its
   lane. */
AMP__AVX512_INLINE __m512i amp__q8_code16(const amp__qmap *q, __m512 y) {
  __m512i u = _mm512_castps_si512(y), a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), idx, t;
  __mmask16 neg = _mm512_movepi32_mask(u), fin = _mm512_cmple_epu32_mask(a, _mm512_set1_epi32(0x3f800000));
  __mmask32 up;
  idx = _mm512_subs_epu16(_mm512_srli_epi32(a, 16), _mm512_set1_epi32(AMP__Q8_VEMIN << AMP__Q8_VMB));
  idx = _mm512_mask_add_epi32(idx, neg, idx, _mm512_set1_epi32(AMP__Q8_VROWS << AMP__Q8_VMB));
  t = _mm512_mask_i32gather_epi32(_mm512_set1_epi32(0xffff), fin, idx, q->vt, 4);
  /* the key against the bucket's in the low words; the + 1 into the code's word above */
  up = _mm512_mask_cmpgt_epu16_mask(0x55555555u, _mm512_mask_xor_epi32(u, neg, u, _mm512_set1_epi32(0xffff)), t);
  return _mm512_mask_add_epi16(t, (__mmask32)(up << 1), t, _mm512_set1_epi16(1));
}
/* codes[j] = the code of s[j] / am (amp__q_store's rule; its clamp changes nothing: amp__q8_code16), whole vectors of e:
   64 at a time packed to bytes (the packs interleave 128-bit lanes; the last permute puts them back
   in order), then 16 at a time. */
static AMP__AVX512 size_t amp__q8_encode16(const amp__qmap *q, uint8_t *codes, const float *s, size_t e, float am) {
  const __m512i ord = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 d = _mm512_set1_ps(am);
  size_t j;
  for (j = 0; j + 64 <= e; j += 64) {
    __m512i c0 = _mm512_srli_epi32(amp__q8_code16(q, amp__div16(_mm512_loadu_ps(s + j), d)), 16);
    __m512i c1 = _mm512_srli_epi32(amp__q8_code16(q, amp__div16(_mm512_loadu_ps(s + j + 16), d)), 16);
    __m512i c2 = _mm512_srli_epi32(amp__q8_code16(q, amp__div16(_mm512_loadu_ps(s + j + 32), d)), 16);
    __m512i c3 = _mm512_srli_epi32(amp__q8_code16(q, amp__div16(_mm512_loadu_ps(s + j + 48), d)), 16);
    __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c0, c1), _mm512_packus_epi32(c2, c3));
    _mm512_storeu_si512((void *)(codes + j), _mm512_permutexvar_epi32(ord, b));
  }
  for (; j + 16 <= e; j += 16) {
    __m512i c = _mm512_srli_epi32(amp__q8_code16(q, amp__div16(_mm512_loadu_ps(s + j), d)), 16);
    _mm_storeu_si128((__m128i *)(void *)(codes + j), _mm512_cvtepi32_epi8(c));
  }
  return j;
}
/* d[j] = code[codes[j]] * am, whole vectors of e. */
static AMP__AVX512 size_t amp__q8_decode16(const amp__qmap *q, float *d, const uint8_t *codes, size_t e, float am) {
  size_t j;
  for (j = 0; j + 16 <= e; j += 16) _mm512_storeu_ps(d + j, amp__q8_ld16(q->code, codes + j, am));
  return j;
}
/* The permute path (amp__qmap_perm_make; taken where amp__q8_perm says so): the same codes and
   values as the two functions above, with no gather. A lane's code from the segment tables (each
   32 entries: two registers, one permute), in bits 0 .. 7; *flagged: the lanes whose t lies within
   AMP__Q8_PNEAR of an integer, or whose |y| is its row's pq, for which the caller takes
   amp__q8_code16. NaN: code 0, as there (segment 9). */
AMP__AVX512_INLINE __m512i amp__q8_pcode16(const amp__qmap *q, __m512 y, __mmask16 *flagged) {
  const __m512i u = _mm512_castps_si512(y), a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512 ay = _mm512_castsi512_ps(a);
  const __mmask16 neg = _mm512_movepi32_mask(u);
  const __m512i r = _mm512_subs_epu16(_mm512_srli_epi32(a, 23), _mm512_set1_epi32(103));   /* the row (low 5 bits) */
  __m512i sg = _mm512_permutex2var_epi32(_mm512_loadu_si512(q->prow), r, _mm512_loadu_si512(q->prow + 16)), k, base;
  __m512 t;
  /* the segment: the row's, one up at or above its edge (magnitudes compare as their bits), 16 on for y < 0 */
  sg = _mm512_mask_add_epi32(sg, _mm512_cmpge_epu32_mask(a, _mm512_permutex2var_epi32(_mm512_loadu_si512(q->pe), r,
                                                                                      _mm512_loadu_si512(q->pe + 16))),
                             sg, _mm512_set1_epi32(1));
  sg = _mm512_mask_add_epi32(sg, neg, sg, _mm512_set1_epi32(16));
  t = _mm512_fmadd_round_ps(ay, _mm512_permutex2var_ps(_mm512_loadu_ps(q->pa), sg, _mm512_loadu_ps(q->pa + 16)),
                            _mm512_permutex2var_ps(_mm512_loadu_ps(q->pb), sg, _mm512_loadu_ps(q->pb + 16)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  /* floor(t) (NaN's t: the integer indefinite, which the max makes 0), at most the segment's pmax */
  k = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  k = _mm512_min_epi32(_mm512_max_epi32(k, _mm512_setzero_si512()),
                       _mm512_permutex2var_epi32(_mm512_loadu_si512(q->pmax), sg, _mm512_loadu_si512(q->pmax + 16)));
  base = _mm512_permutex2var_epi32(_mm512_loadu_si512(q->pbase), sg, _mm512_loadu_si512(q->pbase + 16));
  *flagged = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                             _mm512_set1_ps(AMP__Q8_PNEAR), _CMP_LT_OQ) |
          _mm512_cmpeq_epi32_mask(a, _mm512_permutex2var_epi32(_mm512_loadu_si512(q->pq), r, _mm512_loadu_si512(q->pq + 16)));
  return _mm512_mask_sub_epi32(_mm512_add_epi32(base, k), neg, base, k);
}
/* amp__q8_encode16 by amp__q8_pcode16: a vector with a lane near a midpoint (rare) takes
   amp__q8_code16 whole. */
AMP__AVX512_INLINE __m512i amp__q8_pcode16_exact(const amp__qmap *q, __m512 y) {
  __mmask16 flagged;
  __m512i c = amp__q8_pcode16(q, y, &flagged);
  return flagged ? _mm512_srli_epi32(amp__q8_code16(q, y), 16) : c;
}
static AMP__AVX512 size_t amp__q8_pencode16(const amp__qmap *q, uint8_t *codes, const float *s, size_t e, float am) {
  const __m512i ord = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 d = _mm512_set1_ps(am);
  size_t j;
  for (j = 0; j + 64 <= e; j += 64) {
    __m512 y0 = amp__div16(_mm512_loadu_ps(s + j), d), y1 = amp__div16(_mm512_loadu_ps(s + j + 16), d);
    __m512 y2 = amp__div16(_mm512_loadu_ps(s + j + 32), d), y3 = amp__div16(_mm512_loadu_ps(s + j + 48), d);
    __mmask16 n0, n1, n2, n3;
    __m512i c0 = amp__q8_pcode16(q, y0, &n0), c1 = amp__q8_pcode16(q, y1, &n1), c2 = amp__q8_pcode16(q, y2, &n2),
            c3 = amp__q8_pcode16(q, y3, &n3), b;
    if (n0 | n1 | n2 | n3) {   /* rare: a lane near a midpoint; its vector takes amp__q8_code16 */
      if (n0) c0 = _mm512_srli_epi32(amp__q8_code16(q, y0), 16);
      if (n1) c1 = _mm512_srli_epi32(amp__q8_code16(q, y1), 16);
      if (n2) c2 = _mm512_srli_epi32(amp__q8_code16(q, y2), 16);
      if (n3) c3 = _mm512_srli_epi32(amp__q8_code16(q, y3), 16);
    }
    b = _mm512_packus_epi16(_mm512_packus_epi32(c0, c1), _mm512_packus_epi32(c2, c3));
    _mm512_storeu_si512((void *)(codes + j), _mm512_permutexvar_epi32(ord, b));
  }
  for (; j + 16 <= e; j += 16)
    _mm_storeu_si128((__m128i *)(void *)(codes + j), _mm512_cvtepi32_epi8(amp__q8_pcode16_exact(q, amp__div16(_mm512_loadu_ps(s + j), d))));
  return j;
}
/* d[j] = code[codes[j]] * am for j < e (whole vectors: e a multiple of 16), 64 codes at a time:
   each byte of their values by two byte permutes over the plane's 256 bytes (128 each, by the
   code's low 7 bits) and the code's top bit choosing, the four planes interleaved into f32 (the
   interleave works in 128-bit lanes: the codes are first put in the order that brings the values
   out in theirs), times am as amp__q8_ld16. AVX512_VBMI. */
#define AMP__AVX512VBMI \
  __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi"))) AMP__EXACT_FP
static AMP__AVX512VBMI void amp__q8_pdecode16(const amp__qmap *q, float *d, const uint8_t *codes, size_t e, float am) {
  const __m512i ord = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 m = _mm512_set1_ps(am);
  __m512i pl[4][4];
  size_t j;
  int b, h;
  for (b = 0; b < 4; b++)
    for (h = 0; h < 4; h++) pl[b][h] = _mm512_loadu_si512((const void *)(q->plane[b] + 64 * h));
  for (j = 0; j < e; j += 64) {
    size_t k = e - j < 64 ? e - j : 64;
    __m512i x = _mm512_permutexvar_epi32(ord, _mm512_maskz_loadu_epi8(k == 64 ? ~0ull : (1ull << k) - 1u, codes + j));
    __mmask64 top = _mm512_movepi8_mask(x);
    __m512i v[4], w0, w1, w2, w3;
    for (b = 0; b < 4; b++)
      v[b] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(pl[b][0], x, pl[b][1]),
                                    _mm512_permutex2var_epi8(pl[b][2], x, pl[b][3]));
    w0 = _mm512_unpacklo_epi8(v[0], v[1]); w1 = _mm512_unpackhi_epi8(v[0], v[1]);
    w2 = _mm512_unpacklo_epi8(v[2], v[3]); w3 = _mm512_unpackhi_epi8(v[2], v[3]);
    _mm512_storeu_ps(d + j, amp__mul16(_mm512_castsi512_ps(_mm512_unpacklo_epi16(w0, w2)), m));
    if (k > 16) _mm512_storeu_ps(d + j + 16, amp__mul16(_mm512_castsi512_ps(_mm512_unpackhi_epi16(w0, w2)), m));
    if (k > 32) _mm512_storeu_ps(d + j + 32, amp__mul16(_mm512_castsi512_ps(_mm512_unpacklo_epi16(w1, w3)), m));
    if (k > 48) _mm512_storeu_ps(d + j + 48, amp__mul16(_mm512_castsi512_ps(_mm512_unpackhi_epi16(w1, w3)), m));
  }
}
/* The bits of the largest |x| of s[0 .. n) (whole vectors), as unsigned integers (a NaN above inf):
   what the moment loops keep in amx. */
static AMP__AVX512 uint32_t amp__amax16_bits(const float *s, size_t n) {
  __m512i a = _mm512_setzero_si512();
  size_t j;
  for (j = 0; j + 16 <= n; j += 16)
    a = _mm512_max_epu32(a, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(s + j)), _mm512_set1_epi32(0x7fffffff)));
  return amp__hmax16u(a);
}
/* The same on 8 lanes (the code in bits 0 .. 7); the table read by a masked gather, or (loads 1)
   by eight plain loads (a NaN lane reads word 0 and takes 0xffff, as the gather leaves it). */
AMP__AVX2_INLINE __m256i amp__q8_code8(const amp__qmap *q, __m256 y, int loads) {
  __m256i u = _mm256_castps_si256(y), a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i neg = _mm256_srai_epi32(u, 31), fin = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3f800001), a), idx, t, key;
  idx = _mm256_subs_epu16(_mm256_srli_epi32(a, 16), _mm256_set1_epi32(AMP__Q8_VEMIN << AMP__Q8_VMB));
  idx = _mm256_add_epi32(idx, _mm256_and_si256(neg, _mm256_set1_epi32(AMP__Q8_VROWS << AMP__Q8_VMB)));
  if (loads) {
    uint32_t ix[8];
    const uint32_t *vt = q->vt;
    __m128i lo, hi;
    _mm256_storeu_si256((__m256i *)(void *)ix, _mm256_and_si256(idx, fin));
    lo = _mm_setr_epi32((int)vt[ix[0]], (int)vt[ix[1]], (int)vt[ix[2]], (int)vt[ix[3]]);
    hi = _mm_setr_epi32((int)vt[ix[4]], (int)vt[ix[5]], (int)vt[ix[6]], (int)vt[ix[7]]);
    t = _mm256_blendv_epi8(_mm256_set1_epi32(0xffff), _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1), fin);
  } else
    t = _mm256_mask_i32gather_epi32(_mm256_set1_epi32(0xffff), (const int *)(const void *)q->vt, idx, fin, 4);
  key = _mm256_and_si256(_mm256_xor_si256(u, neg), _mm256_set1_epi32(0xffff));
  /* + 1 where the key is above the bucket's less one: less the all-ones of the comparison */
  return _mm256_sub_epi32(_mm256_srli_epi32(t, 16),
                          _mm256_cmpgt_epi32(key, _mm256_and_si256(t, _mm256_set1_epi32(0xffff))));
}
static AMP__AVX2 size_t amp__q8_encode8(const amp__qmap *q, uint8_t *codes, const float *s, size_t e, float am,
                                        int loads) {
  __m256 d = _mm256_set1_ps(am);
  size_t j;
  for (j = 0; j + 8 <= e; j += 8) {
    __m256 y = amp__div8(_mm256_loadu_ps(s + j), d);
    __m256i c;
    __m128i w;
    c = amp__q8_code8(q, y, loads);
    w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64((__m128i *)(void *)(codes + j), _mm_packus_epi16(w, w));
  }
  return j;
}
static AMP__AVX2 size_t amp__q8_decode8(const amp__qmap *q, float *d, const uint8_t *codes, size_t e, float am,
                                        int loads) {
  size_t j;
  for (j = 0; j + 8 <= e; j += 8) _mm256_storeu_ps(d + j, amp__q8_ld8(q->code, codes + j, am, loads));
  return j;
}
/* The 8-bit codes' gather-free paths, each decided once per process (every path gives the same
   bits): at the AVX-512 level the permutes where the CPU has AVX512_VBMI, at the AVX2 level the
   plain loads, each where a short calibration (amp__q8_measure) finds it faster than the gathers:
   AMD's cores run gathers as microcoded sequences (on Zen 4 and 5 a gather of 16 lanes costs
   several times the permutes); Intel's gathers are cheaper, unless a microcode mitigation slowed
   them. */
static int amp__q8_perm_forced = -1;    /* tests: 0 gathers, 1 permutes (where the CPU can); -1 measured */
static int amp__q8_perm_choice = -1;
static int amp__q8_loads_forced = -1;   /* tests: 0 gathers, 1 plain loads; -1 measured */
static int amp__q8_loads_choice = -1;
/* 1 where level l's gather-free path (2: permutes, 1: plain loads) encodes and decodes faster. */
static int amp__q8_measure(const amp__qmap *q, int l) {
  float x[1024], y[1024];   /* on the stack: threads may measure at once */
  uint8_t c[1024];
  unsigned long long best[2] = {~0ull, ~0ull};
  uint32_t r = 1u;
  int i, k;
  for (i = 0; i < 1024; i++) { r = r * 1664525u + 1013904223u; x[i] = ((float)(r >> 8) - 8388608.0f) / 8388608.0f; }
  for (i = 0; i < 14; i++) {   /* alternating, the first round of each a warm-up; best of six */
    unsigned long long t0 = amp__rdtsc(), t;
    k = i & 1;
    if (l >= 2 && k) { amp__q8_pencode16(q, c, x, 1024, 1.0f); amp__q8_pdecode16(q, y, c, 1024, 1.0f); }
    else if (l >= 2) { amp__q8_encode16(q, c, x, 1024, 1.0f); amp__q8_decode16(q, y, c, 1024, 1.0f); }
    else { amp__q8_encode8(q, c, x, 1024, 1.0f, k); amp__q8_decode8(q, y, c, 1024, 1.0f, k); }
    t = amp__rdtsc() - t0;
    if (i >= 2 && t < best[k]) best[k] = t;
  }
  return best[1] < best[0];
}
/* The choice of one level: forced (tests), else measured on first use (threads that measure at
   once keep the first answer stored). */
static int amp__q8_choose(int *forced, int *choice, const amp__qmap *q, int l) {
  int v = AMP__ALOAD(forced);
  if (v >= 0) return v;
  v = AMP__ALOAD(choice);
  if (v < 0) {
    int expect = -1, got = amp__q8_measure(q, l);
    v = __atomic_compare_exchange_n(choice, &expect, got, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ? got : expect;
  }
  return v;
}
/* 1: the 8-bit moments of map q go through the permute path at the AVX-512 level. */
static int amp__q8_perm(const amp__qmap *q) {
  if (!q->pfast || !(amp__cpu_features() & AMP__CPU_VBMI)) return 0;
  return amp__q8_choose(&amp__q8_perm_forced, &amp__q8_perm_choice, q, 2);
}
/* 1: the 8-bit moments of map q read their tables by plain loads at the AVX2 level. */
static int amp__q8_loads(const amp__qmap *q) { return amp__q8_choose(&amp__q8_loads_forced, &amp__q8_loads_choice, q, 1); }
#endif
#ifdef AMP__NEON_SIMD
/* The same on NEON's 4 lanes (the code in bits 0 .. 7). No gather: each lane's table word read by
   itself; a NaN lane (the one kind with |y| > 1) reads word 0 and takes 0xffff instead, as the
   masked gathers give it. */
AMP__NEON_STEP_INLINE uint32x4_t amp__q8_code4(const amp__qmap *q, float32x4_t y) {
  uint32x4_t u = vreinterpretq_u32_f32(y), a = vandq_u32(u, vdupq_n_u32(0x7fffffffu));
  uint32x4_t neg = vreinterpretq_u32_s32(vshrq_n_s32(vreinterpretq_s32_u32(u), 31));
  uint32x4_t fin = vcleq_u32(a, vdupq_n_u32(0x3f800000u)), idx, t = vdupq_n_u32(0u), key;
  idx = vqsubq_u32(vshrq_n_u32(a, 16), vdupq_n_u32(AMP__Q8_VEMIN << AMP__Q8_VMB));
  idx = vandq_u32(vaddq_u32(idx, vandq_u32(neg, vdupq_n_u32(AMP__Q8_VROWS << AMP__Q8_VMB))), fin);
  t = vld1q_lane_u32(q->vt + vgetq_lane_u32(idx, 0), t, 0);
  t = vld1q_lane_u32(q->vt + vgetq_lane_u32(idx, 1), t, 1);
  t = vld1q_lane_u32(q->vt + vgetq_lane_u32(idx, 2), t, 2);
  t = vld1q_lane_u32(q->vt + vgetq_lane_u32(idx, 3), t, 3);
  t = vbslq_u32(fin, t, vdupq_n_u32(0xffffu));
  key = vandq_u32(veorq_u32(u, neg), vdupq_n_u32(0xffffu));
  /* + 1 where the key is above the bucket's less one: less the all-ones of the comparison */
  return vsubq_u32(vshrq_n_u32(t, 16), vcgtq_u32(key, vandq_u32(t, vdupq_n_u32(0xffffu))));
}
/* codes[j] = the code of s[j] / am (as amp__q8_encode16), whole vectors of e: 16 at a time narrowed
   to bytes, then 4 at a time. The division is FDIV (amp__div4). */
AMP__NEON_STEP_INLINE uint16x4_t amp__q8_enc4(const amp__qmap *q, const float *s, float32x4_t d) {
  return vmovn_u32(amp__q8_code4(q, amp__div4(vld1q_f32(s), d)));
}
static AMP__EXACT_FP size_t amp__q8_encode4(const amp__qmap *q, uint8_t *codes, const float *s, size_t e, float am) {
  float32x4_t d = vdupq_n_f32(am);
  size_t j;
  for (j = 0; j + 16 <= e; j += 16) {
    uint16x8_t lo = vcombine_u16(amp__q8_enc4(q, s + j, d), amp__q8_enc4(q, s + j + 4, d));
    uint16x8_t hi = vcombine_u16(amp__q8_enc4(q, s + j + 8, d), amp__q8_enc4(q, s + j + 12, d));
    vst1q_u8(codes + j, vcombine_u8(vmovn_u16(lo), vmovn_u16(hi)));
  }
  for (; j + 4 <= e; j += 4) {
    uint8x8_t b = vmovn_u16(vcombine_u16(amp__q8_enc4(q, s + j, d), vdup_n_u16(0)));
    uint32_t c = vget_lane_u32(vreinterpret_u32_u8(b), 0);
    memcpy(codes + j, &c, 4);
  }
  return j;
}
/* d[j] = code[codes[j]] * am, whole vectors of e. */
static AMP__EXACT_FP size_t amp__q8_decode4(const amp__qmap *q, float *d, const uint8_t *codes, size_t e, float am) {
  size_t j;
  for (j = 0; j + 4 <= e; j += 4) vst1q_f32(d + j, amp__q8_ld4(q->code, codes + j, am));
  return j;
}
#endif
/* AMP_MOMENTS_FP8: amp__f8m_scale (the shared part) gives each array's scale. */
static amp_status amp__cpu_quantize(amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype xt, size_t n,
                                    const float *scale, float *amax, uint64_t *counts, char *m, size_t cap);
/* *amax joined with the largest |x| of k values, on the bits (a NaN above inf): amp_quantize's CPU
   loops without codes. The one amax of every moment type: FP8's per array, 8BIT's per block
   (amp__q_store). */
static void amp__f8m_amax(float *amax, const float *s, size_t k) {
  float one = 1.0f;
  amp__cpu_quantize(NULL, NULL, AMP_E4M3, s, AMP_F32, k, &one, amax, NULL, NULL, 0);
}
static AMP__EXACT_FP void amp__f8m_set(unsigned char *a, float scale) {
  float si = amp__fdiv(1.0f, scale);
  memcpy(a, &si, 4);
}
/* Element e of an FP8 array a as f32: its code times the array's scale_inv. */
static AMP__EXACT_FP float amp__f8m_at(const unsigned char *a, size_t e) {
  float si;
  memcpy(&si, a, 4);
  return amp__fmul(amp_e4m3_to_f32(a[4 + e]), si);
}
/* Elements i0 .. i0 + k - 1 of a moment array a of n elements kept as type (BF16, 8BIT, FP8) into d
   as f32 (8BIT: i0 a block's start, or the k elements inside one block): bf16 widened (exact), a code times its block's absmax or its array's scale_inv (one f32
   multiply). */
static AMP__EXACT_FP void amp__q_load(int l, int type, const unsigned char *a, const amp__qmap *q, size_t n, size_t i0,
                                      size_t k, float *d) {
  size_t j;
  if (type == AMP_MOMENTS_BF16) { amp__o_master_load_at(l, d, (const amp_bf16 *)a, NULL, i0, k); return; }
  if (type == AMP_MOMENTS_FP8) {   /* the codes widened by the bulk loops (exact), times scale_inv */
    float si;
    memcpy(&si, a, 4);
    amp__e4m3_to_f32(d, a + 4 + i0, k);
    /* one IEEE multiply per element and nothing to fuse it with: a plain * (which the compiler
       may vectorise) gives amp__fmul's bits under any flags */
    for (j = 0; j < k; j++) d[j] = d[j] * si;
    return;
  }
  {
    const float *absmax = (const float *)a;
    const uint8_t *codes = a + 4 * ((n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK);
    size_t b;
    for (b = 0; b < k; b += AMP__Q8_BLOCK) {   /* i0 a multiple of AMP__Q8_BLOCK, or one block's part */
      size_t e = k - b < AMP__Q8_BLOCK ? k - b : AMP__Q8_BLOCK;
      float am = absmax[(i0 + b) / AMP__Q8_BLOCK];
      j = 0;
#ifdef AMP__X86_SIMD
      if (l >= 2 && amp__q8_perm(q)) {
        j = e & ~(size_t)15;
        amp__q8_pdecode16(q, d + b, codes + i0 + b, j, am);
      } else if (l >= 2) j = amp__q8_decode16(q, d + b, codes + i0 + b, e, am);
      else if (l == 1) j = amp__q8_decode8(q, d + b, codes + i0 + b, e, am, amp__q8_loads(q));
#elif defined(AMP__NEON_SIMD)
      if (l >= 1) j = amp__q8_decode4(q, d + b, codes + i0 + b, e, am);
#endif
      for (; j < e; j++) d[b + j] = amp__fmul(q->code[codes[i0 + b + j]], am);
    }
  }
}
/* The e values s of the 8BIT block at element i0 (a multiple of AMP__Q8_BLOCK) of the array a of n
   elements, am the bits of their largest |x|: absmax = am (at least 1e-38), each x / absmax clamped
   to [-1, 1] and its nearest code. */
static AMP__EXACT_FP void amp__q8_put(int l, const amp__qmap *q, unsigned char *a, size_t n, size_t i0, const float *s,
                                      size_t e, float am) {
  float *absmax = (float *)(void *)a + i0 / AMP__Q8_BLOCK;
  uint8_t *codes = a + 4 * ((n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK) + i0;
  size_t j = 0;
  am = amp__q8_absmax(am);
  *absmax = am;
#ifdef AMP__CPU_SIMD
  /* a block whose absmax is below the least normal float (the floor 1e-38, or a subnormal) holds
     only zeros and subnormals: the plain loop, whose rule keeps a zero's code where the FPU
     flushes subnormals (amp__q8_unit); so does a block whose absmax is FLT_MAX (an inf in it,
     which only the plain loop's clamp takes to +-1: the vector loops leave the clamp out) */
  if (amp__f32_bits(am) >= 0x00800000u && amp__f32_bits(am) != 0x7f7fffffu) {
#ifdef AMP__X86_SIMD
    if (l >= 2) j = amp__q8_perm(q) ? amp__q8_pencode16(q, codes, s, e, am) : amp__q8_encode16(q, codes, s, e, am);
    else if (l == 1) j = amp__q8_encode8(q, codes, s, e, am, amp__q8_loads(q));
#else
    if (l >= 1) j = amp__q8_encode4(q, codes, s, e, am);
#endif
  }
#else
  (void)l;
#endif
  for (; j < e; j++) codes[j] = amp__q8_code(q, amp__q8_unit(s[j], am));
}
/* s's k values into elements i0 .. i0 + k - 1 (8BIT: i0 a multiple of AMP__Q8_BLOCK, the blocks whole
   but the tensor's last): bf16 to nearest even or, key nonzero, stochastically with key's bits; 8BIT per
   block: absmax = max |x| (at least 1e-38), each x / absmax clamped to [-1, 1] and its nearest code;
   FP8 with the array's scale (amp__f8m_scale of the amax of all its new values; the header is not
   touched: amp__f8m_set writes it once every code is written) by amp_quantize's CPU loops:
   amp_f32_to_e4m3(x * scale, 1) at every SIMD level. */
static AMP__EXACT_FP void amp__q_store(int l, int type, unsigned char *a, const amp__qmap *q, size_t n, size_t i0,
                                       size_t k, const float *s, int sr, uint64_t key, float scale) {
  size_t b;
  if (type == AMP_MOMENTS_BF16) {
    if (sr) amp__o_master_store_at(l, (amp_bf16 *)a, NULL, key, i0, s, k);
    else amp__convert_any((amp_bf16 *)a + i0, AMP_BF16, s, AMP_F32, k);   /* amp_convert's loops: nearest even */
    return;
  }
  if (type == AMP_MOMENTS_FP8) {
    amp__cpu_quantize(NULL, (amp_fp8 *)(a + 4) + i0, AMP_E4M3, s, AMP_F32, k, &scale, NULL, NULL, NULL, 0);
    return;
  }
  for (b = 0; b < k; b += AMP__Q8_BLOCK) {
    size_t e = k - b < AMP__Q8_BLOCK ? k - b : AMP__Q8_BLOCK;
    float am = 0.0f;
    amp__f8m_amax(&am, s + b, e);   /* the bits of the largest |x| (NaN's the largest) */
    amp__q8_put(l, q, a, n, i0 + b, s + b, e, am);
  }
}
/* n values s as an FP8 array a: the scale from their amax, every code, then the header. */
static void amp__f8m_encode(unsigned char *a, const float *s, size_t n) {
  float amax = 0.0f, scale;
  amp__f8m_amax(&amax, s, n);
  scale = amp__f8m_scale(amax);
  amp__q_store(amp__opt_level(), AMP_MOMENTS_FP8, a, NULL, n, 0, n, s, 0, 0u, scale);
  amp__f8m_set(a, scale);
}

/* The k elements i0 .. i0 + k - 1 of a tensor with BF16, 8BIT or FP8 moments mq / vq (maps: their
   8BIT maps) stepped as amp__o_step steps them (p, g, w, wt, rt at element i0; sr 0): per block
   (8BIT: AMP__Q8_BLOCK elements, with its new codes and absmax written once stepped; else all k)
   the whole vectors in the moment loops (amp__o_qstep_vec: the moments decoded into lanes,
   amp__q_load's bits; BF16 without msr written back there to nearest even, else left in mb / vb,
   NULL where there is no such moment, their amaxes taken on the way), the rest decoded by
   amp__q_load and stepped by amp__o_step, its amax joined (amp__f8m_amax), BF16 without msr written
   back by amp__q_store. FP8: the amaxes of the new m and v joined into amax[0] and amax[1] where
   amax is given. The same bits as amp__q_load, amp__o_step, amp__f8m_amax and amp__q_store in turn.
   2: the moments written; 1: the new moments left in mb / vb (BF16 with msr, stochastic rounding,
   and FP8: for amp__q_store); 0: no moment loop for these (no vector level or body, or a build
   without the x86 or NEON loops): nothing done. */
static int amp__o_step_qv(amp_optim_kind kind, float *p, int type, unsigned char *mq, unsigned char *vq,
                          const amp__qmap *maps, const char *g, amp_dtype gt, char *w, amp_dtype wt, amp_dtype rt,
                          size_t n, size_t i0, size_t k, float gmul, const amp_step_coefs *c, float *mb, float *vb,
                          int msr, float *amax) {
#ifdef AMP__CPU_SIMD
  int l = amp__kind_vec(kind) && amp__dtype_cpu_vec(gt) && amp__dtype_cpu_vec(wt) && amp__dtype_cpu_vec(rt)
              ? amp__opt_level() : 0;
  size_t b, bl = type == AMP_MOMENTS_8BIT ? AMP__Q8_BLOCK : k, nb = (n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK;
  size_t gs = amp_dtype_size(gt), ws = amp_dtype_size(wt), vw;
#ifdef AMP__X86_SIMD
  int perm;   /* 8BIT through the permute path (asked once, not per block) */
#endif
  if (!l || (type != AMP_MOMENTS_BF16 && type != AMP_MOMENTS_8BIT && type != AMP_MOMENTS_FP8)) return 0;
#ifdef AMP__X86_SIMD
  perm = type == AMP_MOMENTS_8BIT && l >= 2 && amp__q8_perm(&maps[0]) && (!vq || amp__q8_perm(&maps[1]));
  vw = l >= 2 ? 16 : 8;
#else
  vw = 4;   /* NEON */
#endif
  for (b = 0; b < k; b += bl) {
    size_t e = k - b < bl ? k - b : bl, j = e & ~(vw - 1), t;
    float *mm = mb ? mb + b : NULL, *vv = vb ? vb + b : NULL;
    amp__qblk qb;
    memset(&qb, 0, sizeof qb);
    qb.type = type;
    for (t = 0; t < 2; t++) {
      unsigned char *a = t ? vq : mq;
      if (!a) continue;
      if (type == AMP_MOMENTS_BF16) { qb.s[t].a = a + 2 * (i0 + b); qb.s[t].w = msr ? NULL : a + 2 * (i0 + b); continue; }
      if (type == AMP_MOMENTS_FP8) { qb.s[t].a = a + 4 + i0 + b; memcpy(&qb.s[t].am, a, 4); continue; }
      qb.s[t].a = a + 4 * nb + i0 + b;
      qb.s[t].code = maps[t].code;
#ifdef AMP__X86_SIMD
      qb.s[t].loads = l == 1 && amp__q8_loads(&maps[t]);
#endif
      memcpy(&qb.s[t].am, a + 4 * ((i0 + b) / AMP__Q8_BLOCK), 4);
    }
    /* 0 (no vector body: the kind list's vec column, as checked above) only on the first block,
       before anything is written (the permute path's decode writes only the float blocks) */
#ifdef AMP__X86_SIMD
    if (perm && j) {
      /* the permute path: the whole vectors' codes decoded into the float blocks (64 at a time),
         stepped there as f32 moments (the same lanes and bits as the moment loop), their amaxes
         taken after */
      for (t = 0; t < 2; t++)
        if (qb.s[t].a) amp__q8_pdecode16(&maps[t], t ? vv : mm, qb.s[t].a, j, qb.s[t].am);
      if (!amp__o_step_vec(l, kind, p + b, mm, vv, g + b * gs, gt, w + b * ws, wt, rt, j, gmul, c)) return 0;
      for (t = 0; t < 2; t++)
        if (qb.s[t].a) qb.s[t].amax = amp__amax16_bits(t ? vv : mm, j);
    } else
#endif
    if (j && !amp__o_qstep_vec(l, kind, p + b, mm, vv, g + b * gs, gt, w + b * ws, wt, rt, j, gmul, c, &qb)) return 0;
    if (j < e) {   /* the block's last elements (the tensor's last block): the plain path */
      if (mq) amp__q_load(l, type, mq, &maps[0], n, i0 + b + j, e - j, mm + j);
      if (vq) amp__q_load(l, type, vq, &maps[1], n, i0 + b + j, e - j, vv + j);
      amp__o_step(kind, p + b + j, mm ? mm + j : NULL, vv ? vv + j : NULL, g + (b + j) * gs, gt, w + (b + j) * ws, wt,
                  rt, 0, 0u, e - j, gmul, c);
    }
    if (type == AMP_MOMENTS_BF16) {   /* to nearest: the rest written back */
      if (!msr && j < e && mq) amp__q_store(l, type, mq, NULL, n, i0 + b + j, e - j, mm + j, 0, 0u, 1.0f);
      if (!msr && j < e && vq) amp__q_store(l, type, vq, NULL, n, i0 + b + j, e - j, vv + j, 0, 0u, 1.0f);
      continue;
    }
    if (type == AMP_MOMENTS_FP8) {   /* the amaxes joined */
      for (t = 0; t < 2 && amax; t++) {
        float *d = t ? vv : mm, am = amp__bits_f32(qb.s[t].amax);
        if (!d) continue;
        if (j < e) amp__f8m_amax(&am, d + j, e - j);
        amax[t] = amp__amax_join(amax[t], am);
      }
      continue;
    }
    for (t = 0; t < 2; t++) {
      unsigned char *a = t ? vq : mq;
      float *d = t ? vv : mm, am = amp__bits_f32(qb.s[t].amax);
      if (!a) continue;
      if (j < e) amp__f8m_amax(&am, d + j, e - j);
      amp__q8_put(l, &maps[t], a, n, i0 + b, d, e, am);
    }
  }
  return (type == AMP_MOMENTS_BF16 && msr) || type == AMP_MOMENTS_FP8 ? 1 : 2;
#else
  (void)kind; (void)p; (void)type; (void)mq; (void)vq; (void)maps; (void)g; (void)gt; (void)w; (void)wt; (void)rt;
  (void)n; (void)i0; (void)k; (void)gmul; (void)c; (void)mb; (void)vb; (void)msr; (void)amax;
  return 0;
#endif
}

/* The step of a tensor whose moments are not f32 (AMP_MOMENTS_BF16, _8BIT, _FP8), in every master mode:
   per block of AMP__CHUNK elements (a multiple of AMP__Q8_BLOCK), the moments decoded to f32 into
   mb and vb (amp__q_load), the block stepped on them by amp__o_step exactly as on fp32 moments (the
   vector loops where the kind has a vector body, else the kind's plain loop: the same bits either
   way, never another mode's path), the weights stepped with the f32 moments, then the new moments
   encoded again in the same pass (amp__q_store: bf16 to nearest even, or with sr stochastically with
   the moment streams of key, amp__sr_key_moment; 8BIT blockwise with the signed map for the first
   moment and the unsigned one for the second; FP8 with each array's new scale, amp__f8m_scale).
   FP8 needs the amax of the whole array's new moments before its first code is written, so it runs
   the blocks twice: a first pass decodes the moments and steps scratch masters with the
   coefficients' moments_only set (Adam/AdamW: the moment lines alone, the same operations as the
   second pass: the same f32 moments bit for bit; the other kinds' bodies ignore it) only to take
   the amaxes, storing nothing. The masters are copied into the scratch only where the moments
   depend on them (wd, the L2 decay on the grad, nonzero); else the scratch holds zeros. The second
   pass is the pass above, encoding with those scales, and the scale_invs are written last (the
   second pass decodes with the old ones). p: the fp32
   master; NULL for SPLIT / NONE, whose masters are decoded from w and rem per block and written
   back as amp__o_step_lowmem does. */
static void amp__o_step_q(amp_optim_kind kind, float *p, int type, unsigned char *mq, unsigned char *vq,
                          const amp__qmap *maps, const void *g, amp_dtype gt, void *w, amp_dtype wt, amp_dtype rt,
                          uint16_t *rem, int sr, uint64_t key, size_t n, float gmul, const amp_step_coefs *c) {
  size_t i0, gs = amp_dtype_size(gt), ws = amp_dtype_size(wt);
  uint64_t km = sr ? amp__sr_key_moment(key, 1) : 0u, kv = sr ? amp__sr_key_moment(key, 2) : 0u;
  int l = amp__opt_level(), msr = sr && type == AMP_MOMENTS_BF16;   /* 8BIT, FP8: nearest codes always */
  int nth = amp__o_threads(n);   /* threads: the blocks shared out (each pass's, in turn) */
  float sm = 1.0f, sv = 1.0f;   /* FP8: the scales of the new m and v */
  (void)nth;   /* without OpenMP: read by no pragma */
  if (type == AMP_MOMENTS_FP8) {   /* the first pass: the new moments' amaxes, nothing stored */
    float am = 0.0f, av = 0.0f;   /* joined over the threads (a maximum: in any order the same) */
    amp_step_coefs c1 = *c;
    int wdep = c->wd != 0.0f;   /* the moments depend on the weight only through L2 decay on the grad */
    c1.moments_only = 1;        /* Adam/AdamW: the moments alone, no root or division */
    AMP__OMP(omp parallel num_threads(nth) if (nth > 1))
    {
      float pb[AMP__CHUNK], out[AMP__CHUNK], mb[AMP__CHUNK], vb[AMP__CHUNK];
      float tm = 0.0f, tv = 0.0f, ax[2] = {0.0f, 0.0f};
      size_t j0;
      if (!wdep) memset(pb, 0, sizeof pb);   /* any weight gives the same moments: zeros, never reloaded */
      AMP__OMP(omp for schedule(static))
      for (j0 = 0; j0 < n; j0 += AMP__CHUNK) {
        size_t k = n - j0 < AMP__CHUNK ? n - j0 : AMP__CHUNK;
        float *mm = mq ? mb : NULL, *vv = vq ? vb : NULL;
        if (wdep && p) memcpy(pb, p + j0, k * sizeof(float));
        else if (wdep) amp__o_master_load_at(l, pb, (const amp_bf16 *)w, rem, j0, k);
        if (amp__o_step_qv(kind, pb, type, mq, vq, maps, (const char *)g + j0 * gs, gt, (char *)out, AMP_F32, AMP_F32,
                           n, j0, k, gmul, &c1, mm, vv, 0, ax))
          continue;   /* the moment loops, the amaxes joined into ax */
        if (mq) amp__q_load(l, type, mq, &maps[0], n, j0, k, mb);
        if (vq) amp__q_load(l, type, vq, &maps[1], n, j0, k, vb);
        amp__o_step(kind, pb, mm, vv, (const char *)g + j0 * gs, gt, out, AMP_F32, AMP_F32, 0, 0u, k, gmul, &c1);
        if (mq) amp__f8m_amax(&tm, mb, k);
        if (vq) amp__f8m_amax(&tv, vb, k);
      }
      AMP__OMP(omp critical(amp__o_fp8_amax))
      {
        am = amp__amax_join(am, amp__amax_join(tm, ax[0]));
        av = amp__amax_join(av, amp__amax_join(tv, ax[1]));
      }
    }
    sm = amp__f8m_scale(am); sv = amp__f8m_scale(av);
  }
  AMP__OMP(omp parallel for num_threads(nth) schedule(static) if (nth > 1))
  for (i0 = 0; i0 < n; i0 += AMP__CHUNK) {
    float pb[AMP__CHUNK], out[AMP__CHUNK], mb[AMP__CHUNK], vb[AMP__CHUNK];
    size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
    const char *gb = (const char *)g + i0 * gs;
    float *mm = mq ? mb : NULL, *vv = vq ? vb : NULL, *sp = p ? p + i0 : pb;
    char *sw = p && !sr ? (char *)w + i0 * ws : (char *)out;   /* where the step writes its weights */
    amp_dtype swt = p && !sr ? wt : AMP_F32, srt = p && !sr ? rt : AMP_F32;
    int fused;
    if (!p) amp__o_master_load_at(l, pb, (const amp_bf16 *)w, rem, i0, k);   /* SPLIT / NONE: the masters decoded */
    /* the moment loops where they run (8BIT: its blocks encoded there; BF16 to nearest written
       there); else the moments decoded, stepped, encoded */
    fused = amp__o_step_qv(kind, sp, type, mq, vq, maps, gb, gt, sw, swt, srt, n, i0, k, gmul, c, mm, vv, msr, NULL);
    if (!fused) {
      if (mq) amp__q_load(l, type, mq, &maps[0], n, i0, k, mb);
      if (vq) amp__q_load(l, type, vq, &maps[1], n, i0, k, vb);
      amp__o_step(kind, sp, mm, vv, gb, gt, sw, swt, srt, 0, 0u, k, gmul, c);
    }
    /* SPLIT / NONE: out written back; a stochastic bf16 copy: rounded from out with its elements'
       own indices i0 + i */
    if (!p) amp__o_master_store_at(l, (amp_bf16 *)w, rem, key, i0, out, k);
    else if (sr) amp__o_master_store_at(l, (amp_bf16 *)w, NULL, key, i0, out, k);
    if (fused == 2) continue;
    if (mq) amp__q_store(l, type, mq, &maps[0], n, i0, k, mb, msr, km, sm);
    if (vq) amp__q_store(l, type, vq, &maps[1], n, i0, k, vb, msr, kv, sv);
  }
  if (type == AMP_MOMENTS_FP8) {
    if (mq) amp__f8m_set(mq, sm);
    if (vq) amp__f8m_set(vq, sv);
  }
}

AMP__EXACT_END

enum { AMP__READY = 0, AMP__UNSCALED = 1, AMP__STEPPED = 2 };
/* What steps an optimizer, decided by its first unscale or step and kept for its life. */
enum { AMP__BY_NONE = 0, AMP__BY_SCALER = 1, AMP__BY_STEP = 2 };

/* The optimizer. Its tensors are one table of records (amp__tensor), t[i] for the i-th add.
   The groups: lr_scale[k], weight_decay[k] for k = 1 .. n_groups - 1 (group 0 reads the config).
   stage/sc_id/sc_iter are the call-order state of the current scaler iteration (amp_scaler).
   step, found_inf and grad_norm are the host mirror: a device that keeps them in its own memory
   refreshes them in optim_pull, which amp__o_pull calls for every getter. */
struct amp_optimizer {
  amp_device *dev;
  amp_optim_config cfg;          /* resolved: defaults filled in */
  size_t count, cap;
  amp__tensor *t;                /* the tensors, count of them (room for cap) */
  long io_step;                  /* a checkpoint load's update count, set (optim_set_step) before its
                                    masters are written: the key of an AMP_MASTER_NONE tensor's rounding */
  unsigned long unscales;        /* unscale passes run (amp__o_unscale; a device's own count, from its pull) */
  unsigned long overflow_noted;  /* the pass whose overflow line was logged (amp__o_overflow_note) */
  float unscale_scale;           /* the loss scale the last unscale divided by (1 without a scaler) */
  float *lr_scale, *weight_decay;  /* per group; entry 0 unused (group 0: 1 and cfg.weight_decay) */
  int n_groups, groups_cap;
  float *scratch;                /* AMP_CUSTOM: the unscaled, clipped fp32 grads of one tensor */
  size_t scratch_n;
  long step;                     /* updates applied */
  unsigned long sc_id, sc_iter;  /* the scaler iteration the stage below belongs to */
  int stage;                     /* AMP__READY / AMP__UNSCALED / AMP__STEPPED */
  size_t unscaled_count;         /* tensors the last unscale saw */
  int found_inf;                 /* this optimizer's grads held inf/NaN at the last unscale */
  float inv;                     /* the inverse scale of the last unscale */
  float grad_norm;               /* the unscaled global L2 norm of the last unscale */
  int spike;                     /* the last unscale's spike decision (amp__spike_skip): the step skips */
  long spike_skips;              /* steps skipped for a spike (amp_optimizer_spike_skips) */
  amp__spike_window spike_win;   /* the last clean steps' norms (spike_zscore); the host mirror on CUDA */
  double dp[2];                  /* data-parallel: this rank's {found_inf, sumsq}, then their sums */
  int frozen;                    /* the device took the whole table (optim_ready): no add after */
  int driver;                    /* AMP__BY_*: a scaler (amp_scaler_unscale/step) or amp_optimizer_step */
  int stepped;                   /* amp_optimizer_step ran since create or the last checkpoint load:
                                    found_inf is its decision (amp_optimizer_last_skipped) */
  void *cu;                      /* the device's own optimizer (CUDA: amp__cu_optim_create, made at
                                    optim_ready); NULL on the CPU */
  amp__qmap qmap[2];             /* AMP_MOMENTS_8BIT's maps: signed (first moments), unsigned (Adam's v) */
};

/* The defaults of kind (the kind list's lr, beta1, beta2; eps 1e-8 for all) into the fields of c
   that are 0, or into every one of them (all); 0 when kind is not in the list. */
#define AMP__KIND_DEFAULTS(kd, name, nm, dlr, db1, db2, coefs, elem, dev, vec) \
  case kd: lr = dlr; b1 = db1; b2 = db2; break;
static int amp__kind_defaults(amp_optim_config *c, int all) {
  float lr, b1, b2;
  switch (c->kind) { AMP__OPTIM_KINDS(AMP__KIND_DEFAULTS) default: return 0; }
  if (all || amp__is_zero(c->lr)) c->lr = lr;
  if (all || amp__is_zero(c->beta1)) c->beta1 = b1;
  if (all || amp__is_zero(c->beta2)) c->beta2 = b2;
  if (all || amp__is_zero(c->eps)) c->eps = 1e-8f;
  return 1;
}
#undef AMP__KIND_DEFAULTS

/* Defaults filled in and every field checked; fn names the calling function in messages. */
static amp_status amp__optim_resolve(const char *fn, const amp_optim_config *in, amp_optim_config *c) {
  *c = *in;
  if (!amp__kind_name(c->kind))
    return amp__fail(AMP_ERR_ARG, "%s: kind %d is not an optimizer kind (AMP_SGD, AMP_ADAM, AMP_ADAMW, AMP_CUSTOM or "
                     "AMP_LION)", fn, (int)c->kind);
  if (!c->zero_is_zero) amp__kind_defaults(c, 0);   /* a zero-initialised config: 0 means the default */
  {
    const char *name[10] = {"lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps", "max_grad_norm",
                            "spike_norm", "spike_zscore"};
    float v[10];
    int k;
    v[0] = c->lr; v[1] = c->weight_decay; v[2] = c->momentum; v[3] = c->dampening; v[4] = c->beta1; v[5] = c->beta2;
    v[6] = c->eps; v[7] = c->max_grad_norm; v[8] = c->spike_norm; v[9] = c->spike_zscore;
    for (k = 0; k < 10; k++)
      if (amp__refuse_subnormal(fn, name[k], v[k]) != AMP_OK) return AMP_ERR_ARG;
  }
  c->zero_is_zero = 1;   /* resolved: every field holds its value (resolving again changes nothing) */
  /* -0 is 0 (the update's arithmetic then gives torch's bits, whose zeros are +0) */
  if (amp__is_zero(c->lr)) c->lr = 0.0f;
  if (amp__is_zero(c->weight_decay)) c->weight_decay = 0.0f;
  if (amp__is_zero(c->momentum)) c->momentum = 0.0f;
  if (amp__is_zero(c->dampening)) c->dampening = 0.0f;
  if (amp__is_zero(c->beta1)) c->beta1 = 0.0f;
  if (amp__is_zero(c->beta2)) c->beta2 = 0.0f;
  if (amp__is_zero(c->eps)) c->eps = 0.0f;
  if (amp__is_zero(c->max_grad_norm)) c->max_grad_norm = 0.0f;
  if (amp__is_zero(c->spike_norm)) c->spike_norm = 0.0f;
  if (amp__is_zero(c->spike_zscore)) c->spike_zscore = 0.0f;
  if (!(c->lr >= 0.0f) || !amp__finite(c->lr))
    return amp__fail(AMP_ERR_ARG, "%s: lr %g must be >= 0 and finite", fn, (double)c->lr);
  if (!(c->weight_decay >= 0.0f) || !amp__finite(c->weight_decay))
    return amp__fail(AMP_ERR_ARG, "%s: weight_decay %g must be >= 0 and finite", fn, (double)c->weight_decay);
  if (!(c->momentum >= 0.0f) || !amp__finite(c->momentum))
    return amp__fail(AMP_ERR_ARG, "%s: momentum %g must be >= 0 and finite", fn, (double)c->momentum);
  if (!(c->dampening >= 0.0f && c->dampening <= 1.0f) || !amp__finite(c->dampening))
    return amp__fail(AMP_ERR_ARG, "%s: dampening %g must be in [0, 1]", fn, (double)c->dampening);
  if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
    return amp__fail(AMP_ERR_ARG, "%s: nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)",
                     fn, (double)c->momentum, (double)c->dampening);
  if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !amp__finite(c->beta1))
    return amp__fail(AMP_ERR_ARG, "%s: beta1 %g must be in [0, 1)", fn, (double)c->beta1);
  if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f) || !amp__finite(c->beta2))
    return amp__fail(AMP_ERR_ARG, "%s: beta2 %g must be in [0, 1)", fn, (double)c->beta2);
  if (!(c->eps >= 0.0f) || !amp__finite(c->eps))
    return amp__fail(AMP_ERR_ARG, "%s: eps %g must be > 0 and finite", fn, (double)c->eps);
  if ((c->kind == AMP_ADAM || c->kind == AMP_ADAMW) && amp__is_zero(c->eps))   /* only zero_is_zero gets here */
    return amp__fail(AMP_ERR_ARG, "%s: eps 0 (zero_is_zero set) is not allowed for Adam/AdamW: it must be > 0 "
                     "(0 divides 0 by 0 where a grad and its moments are 0, and the weight becomes NaN)", fn);
  if (!(c->max_grad_norm >= 0.0f) || !amp__finite(c->max_grad_norm))
    return amp__fail(AMP_ERR_ARG, "%s: max_grad_norm %g must be >= 0 and finite (0: no clipping)", fn,
                     (double)c->max_grad_norm);
  if (!(c->spike_norm >= 0.0f) || !amp__finite(c->spike_norm))
    return amp__fail(AMP_ERR_ARG, "%s: spike_norm %g must be >= 0 and finite (0: off)", fn, (double)c->spike_norm);
  if (!(c->spike_zscore >= 0.0f) || !amp__finite(c->spike_zscore))
    return amp__fail(AMP_ERR_ARG, "%s: spike_zscore %g must be >= 0 and finite (0: off)", fn, (double)c->spike_zscore);
  if (c->kind == AMP_CUSTOM && !c->custom_step)
    return amp__fail(AMP_ERR_ARG, "%s: kind AMP_CUSTOM needs custom_step", fn);
  c->nesterov = c->nesterov != 0;
  return AMP_OK;
}

AMPDEF amp_optim_config amp_optimizer_defaults(amp_optim_kind kind) {
  amp_optim_config c;
  memset(&c, 0, sizeof c);
  c.kind = AMP_SGD;
  amp__kind_defaults(&c, 1);   /* an unknown kind keeps SGD's (and create refuses it) */
  c.kind = kind;
  amp__kind_defaults(&c, 1);
  c.zero_is_zero = 1;
  return c;
}

AMPDEF amp_status amp_optimizer_create(amp_optimizer **out, amp_device *d, const amp_optim_config *cfg) {
  amp_optim_config c, zero;
  amp_optimizer *o;
  amp_status st;
  if (!out) return amp__fail(AMP_ERR_ARG, "amp_optimizer_create: out is NULL");
  *out = NULL;
  if (!d) return amp__fail(AMP_ERR_ARG, "amp_optimizer_create: device is NULL (use amp_cpu())");
  memset(&zero, 0, sizeof zero);
  if ((st = amp__optim_resolve("amp_optimizer_create", cfg ? cfg : &zero, &c)) != AMP_OK) return st;
  if (!amp__kind_on_device(c.kind) && !amp__be(d)->host_update)
    return amp__fail(AMP_ERR_UNSUPPORTED, "amp_optimizer_create: kind %s calls a host function on every master "
                     "tensor, which a %s device cannot run; use AMP_SGD, AMP_ADAM, AMP_ADAMW or AMP_LION there, or "
                     "keep the optimizer on amp_cpu()", amp__kind_name(c.kind), amp__be(d)->name);
  o = (amp_optimizer *)AMP_MALLOC(sizeof *o);
  if (!o) return amp__fail(AMP_ERR_NOMEM, "amp_optimizer_create: out of memory");
  memset(o, 0, sizeof *o);
  o->dev = d; o->cfg = c; o->n_groups = 1;
  amp__qmap_make(&o->qmap[0], 1); amp__qmap_make(&o->qmap[1], 0);
  *out = o;
  return AMP_OK;
}

AMPDEF void amp_optimizer_destroy(amp_optimizer *o) {
  size_t i;
  if (!o) return;
  amp__be(o->dev)->optim_destroy(o);   /* the masters and moments, wherever they live */
  for (i = 0; i < o->count; i++) AMP_FREE(o->t[i].name);
  AMP_FREE(o->t);
  AMP_FREE(o->lr_scale); AMP_FREE(o->weight_decay);
  AMP_FREE(o->scratch);
  AMP_FREE(o);
}

/* Grows the table to hold cap entries; all-or-nothing. */
static int amp__o_grow(amp_optimizer *o, size_t cap) {
  amp__tensor *t = (amp__tensor *)AMP_MALLOC(cap * sizeof *t);
  if (!t) return 0;
  if (o->count) memcpy(t, o->t, o->count * sizeof *t);
  AMP_FREE(o->t);
  o->t = t; o->cap = cap;
  return 1;
}

static int amp__overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/* The fp32 master is taken at add, on every device (the rule of the manual): from t->master when
   given, else from the model copy as it is then; weights changed after add (loaded from a file,
   say) are not seen by the optimizer; add after. fn names the function the user called. */
/* Checks grads (n elements of type gt) against the buffers of every tensor but `self` and its own
   weights w (ws bytes each); fn names the function the user called. */
static amp_status amp__o_grads_check(const char *fn, const amp_optimizer *o, size_t self, const void *w, size_t ws,
                                     const void *grads, size_t gs, size_t n) {
  size_t i;
  if (grads == (const void *)w) return amp__fail(AMP_ERR_ARG, "%s: grads %p is the weights buffer", fn, grads);
  if (amp__overlap(w, n * ws, grads, n * gs))
    return amp__fail(AMP_ERR_ARG, "%s: grads %p overlap weights %p (n %zu)", fn, grads, w, n);
  for (i = 0; i < o->count; i++) {
    size_t ows = amp_dtype_size(o->t[i].wtype) * o->t[i].n, ogs = amp_dtype_size(o->t[i].gtype) * o->t[i].n;
    if (i == self) continue;
    if (amp__overlap(grads, n * gs, o->t[i].w, ows) || (o->t[i].g && amp__overlap(grads, n * gs, o->t[i].g, ogs)))
      return amp__fail(AMP_ERR_ARG, "%s: grads %p overlap a buffer of tensor %zu already added", fn, grads, i);
  }
  return AMP_OK;
}

/* grads_late: the grads may be NULL (amp_optimizer_add_tensor: given later by amp_optimizer_set_grads). */
/* A moment type's name and stored bytes per element (AMP__MOMENTS_TYPES); NULL / 0: not a type. */
#define AMP__MOMENTS_NAME(name, value, bytes, kept, cuda, shared) case value: return #name;
static const char *amp__moments_name(int m) {
  switch (m) { AMP__MOMENTS_TYPES(AMP__MOMENTS_NAME) default: return NULL; }
}
#undef AMP__MOMENTS_NAME
#define AMP__MOMENTS_KEPT(name, value, bytes, kept, cuda, shared) case value: return kept;
static int amp__moments_kept(int m) {
  switch (m) { AMP__MOMENTS_TYPES(AMP__MOMENTS_KEPT) default: return 0; }
}
#undef AMP__MOMENTS_KEPT
/* amp_tensor_desc.moments for o's kind: a type of the list, kept, and F32 for a kind without moments. */
static amp_status amp__moments_check(const char *fn, const amp_optimizer *o, int moments) {
  const char *name = amp__moments_name(moments);
  if (!name)
    return amp__fail(AMP_ERR_ARG, "%s: moments %d is not AMP_MOMENTS_F32, AMP_MOMENTS_BF16, AMP_MOMENTS_8BIT or "
                     "AMP_MOMENTS_FP8", fn, moments);
  if (moments != AMP_MOMENTS_F32 && amp__o_moments(&o->cfg) == 0)
    return amp__fail(AMP_ERR_ARG, "%s: moments %s with kind %s%s: the kind keeps no moments (leave moments 0)", fn, name,
                     amp__kind_name(o->cfg.kind), o->cfg.kind == AMP_SGD ? " without momentum" : "");
  if (!amp__moments_kept(moments))
    return amp__fail(AMP_ERR_UNSUPPORTED, "%s: moments %s is not kept by this version", fn, name);
  return AMP_OK;
}

static amp_status amp__o_add(const char *fn, amp_optimizer *o, const amp_tensor_desc *t, int grads_late) {
  size_t ws, gs, n, i, k, name_len = 0;
  char *name = NULL;
  void *weights;
  const void *grads;
  amp_dtype gtype;
  char m[AMP__MSG] = "";
  amp_status st;
  if (!o) return amp__fail(AMP_ERR_ARG, "%s: o is NULL", fn);
  if (!t) return amp__fail(AMP_ERR_ARG, "%s: the tensor description is NULL", fn);
  if (o->frozen)
    return amp__fail(AMP_ERR_STATE, "%s: add every tensor before the first step on a %s device "
                     "(the device optimizer was built with %zu tensors)", fn, amp__be(o->dev)->name, o->count);
  /* One step count serves every tensor (Adam's t, SGD's first step), where PyTorch keeps one per
     parameter: a tensor added after an update would start at t = step + 1, not PyTorch's t = 1. */
  if (o->step > 0)
    return amp__fail(AMP_ERR_STATE, "%s: add every tensor before the first update (%ld applied): "
                     "the optimizer's step count, Adam's t, is shared by all its tensors", fn, o->step);
  gtype = t->grad_dtype == AMP_GRAD_F32 ? AMP_F32 : t->grad_dtype;
  ws = amp_dtype_size(t->dtype); gs = amp_dtype_size(gtype); n = t->n;
  weights = t->weights; grads = t->grads;
  if ((st = amp__dtype_compute_check(fn, "weights dtype", t->dtype)) != AMP_OK) return st;
  if ((st = amp__dtype_compute_check(fn, "grads dtype", gtype)) != AMP_OK) return st;
  if (!weights) return amp__fail(AMP_ERR_ARG, "%s: weights is NULL", fn);
  if (!grads && !grads_late)
    return amp__fail(AMP_ERR_ARG, "%s: grads is NULL (grads made later: amp_optimizer_add_tensor with grads NULL, then "
                     "amp_optimizer_set_grads)", fn);
  if (n == 0) return amp__fail(AMP_ERR_ARG, "%s: n is 0", fn);
  if (n > ((size_t)-1) / 16) return amp__fail(AMP_ERR_ARG, "%s: n %zu is too large", fn, n);
  if (grads && (st = amp__o_grads_check(fn, o, o->count, weights, ws, grads, gs, n)) != AMP_OK) return st;
  if (t->group < 0 || t->group >= o->n_groups)
    return amp__fail(AMP_ERR_ARG,
                     "%s: group %d is not a group of this optimizer (0..%d; amp_optimizer_add_group makes more)", fn,
                     t->group, o->n_groups - 1);
  if ((st = amp__dtype_compute_check(fn, "round_to", t->round_to)) != AMP_OK) return st;
  if (amp__round_to_set(t->round_to) && t->dtype != AMP_F32)
    return amp__fail(AMP_ERR_ARG, "%s: round_to %d (%s) is for a float model copy (dtype AMP_F32) only; dtype is %s, "
                     "which rounds by itself (leave round_to 0)", fn, (int)t->round_to, amp__dtype_name(t->round_to),
                     amp__dtype_name(t->dtype));
  if (t->master_mode != AMP_MASTER_F32 && t->master_mode != AMP_MASTER_SPLIT && t->master_mode != AMP_MASTER_NONE)
    return amp__fail(AMP_ERR_ARG, "%s: master_mode %d is not AMP_MASTER_F32, AMP_MASTER_SPLIT or AMP_MASTER_NONE", fn,
                     t->master_mode);
  if (t->stochastic && !amp__dtype_f32_top(t->dtype))
    return amp__fail(AMP_ERR_ARG, "%s: stochastic %d needs a bf16 model copy (dtype AMP_BF16); dtype is %s", fn,
                     t->stochastic, amp__dtype_name(t->dtype));
  if (t->master_mode != AMP_MASTER_F32) {
    const char *mode = amp__master_mode_name(t->master_mode);
    if (!amp__dtype_f32_top(t->dtype))
      return amp__fail(AMP_ERR_ARG, "%s: master_mode %s needs a bf16 model copy (dtype AMP_BF16); dtype is %s "
                       "(use AMP_MASTER_F32)", fn, mode, amp__dtype_name(t->dtype));
    if (t->master_mode == AMP_MASTER_SPLIT && t->stochastic)
      return amp__fail(AMP_ERR_ARG, "%s: master_mode AMP_MASTER_SPLIT with stochastic %d: the split model copy is the "
                       "master's nearest bf16 (its remainder is the rest), it cannot be rounded stochastically", fn,
                       t->stochastic);
    if (t->master_mode == AMP_MASTER_NONE && !t->stochastic)
      return amp__fail(AMP_ERR_ARG, "%s: master_mode AMP_MASTER_NONE needs stochastic = 1 (without a master, rounding "
                       "to nearest would drop every update smaller than half a bf16 step)", fn);
    if (o->cfg.kind == AMP_CUSTOM)
      return amp__fail(AMP_ERR_UNSUPPORTED, "%s: master_mode %s with kind AMP_CUSTOM: custom_step updates an fp32 "
                       "master array, which this mode does not keep (use AMP_MASTER_F32)", fn, mode);
  }
  if ((st = amp__moments_check(fn, o, t->moments)) != AMP_OK) return st;
  if (t->name && (name_len = strlen(t->name)) > AMP__NAME_MAX)
    return amp__fail(AMP_ERR_ARG, "%s: name '%.32s...' is %zu bytes long, at most %d", fn, t->name, name_len,
                     AMP__NAME_MAX);
  for (k = 0; k < name_len; k++)   /* a name goes into one log line: no line breaks, escapes or other controls */
    if ((unsigned char)t->name[k] < 0x20u || t->name[k] == 0x7f)
      return amp__fail(AMP_ERR_ARG, "%s: name holds the control byte 0x%02x at %zu (names are printable: they go into "
                       "one log line)", fn, (unsigned)(unsigned char)t->name[k], k);
  for (i = 0; i < o->count; i++) {
    size_t ows = amp_dtype_size(o->t[i].wtype) * o->t[i].n, ogs = amp_dtype_size(o->t[i].gtype) * o->t[i].n;
    if (amp__overlap(weights, n * ws, o->t[i].w, ows) || (o->t[i].g && amp__overlap(weights, n * ws, o->t[i].g, ogs)))
      return amp__fail(AMP_ERR_ARG, "%s: weights %p overlap a buffer of tensor %zu already added", fn, weights, i);
  }
  if (o->count == o->cap && !amp__o_grow(o, o->cap ? 2 * o->cap : 8))
    return amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
  if (t->name && (name = (char *)AMP_MALLOC(name_len + 1)) == NULL)
    return amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
  if (name) memcpy(name, t->name, name_len + 1);
  i = o->count;   /* recorded past the end; counted once the device has taken it */
  memset(&o->t[i], 0, sizeof o->t[i]);   /* no master, moments, remainders or stats yet */
  o->t[i].w = weights; o->t[i].g = grads; o->t[i].n = n; o->t[i].wtype = t->dtype; o->t[i].gtype = gtype;
  o->t[i].round_to = t->round_to; o->t[i].group = t->group; o->t[i].stochastic = t->stochastic != 0;
  o->t[i].master_mode = t->master_mode; o->t[i].name = name;
  o->t[i].moments = t->moments == AMP_MOMENTS_8BIT && n < AMP__Q8_MIN ? AMP_MOMENTS_F32 : t->moments;
  if ((st = amp__be(o->dev)->optim_add(o, i, t->master, m, sizeof m)) != AMP_OK) {
    AMP_FREE(name);
    return amp__op_fail(fn, st, m);
  }
  o->count++;
  return AMP_OK;
}

AMPDEF amp_status amp_optimizer_add_tensor(amp_optimizer *o, const amp_tensor_desc *t) {
  const char *fn = "amp_optimizer_add_tensor";
  if (t && t->grad_dtype == AMP_F32 && amp_dtype_size(t->dtype) && t->dtype != AMP_F32)
    return amp__fail(AMP_ERR_ARG, "%s: grad_dtype is 0 (AMP_F32) while dtype is %s: say which type the grads are, "
                     "%s, or AMP_GRAD_F32 for f32 grads (a description left zero must not read one type as another)",
                     fn, amp__dtype_name(t->dtype), amp__dtype_name(t->dtype));
  return amp__o_add(fn, o, t, 1);
}

AMPDEF amp_status amp_optimizer_set_grads(amp_optimizer *o, size_t index, const void *grads) {
  const char *fn = "amp_optimizer_set_grads";
  char m[AMP__MSG] = "";
  const void *was;
  amp_status st;
  if (!o) return amp__fail(AMP_ERR_ARG, "%s: o is NULL", fn);
  if (index >= o->count)
    return amp__fail(AMP_ERR_ARG, "%s: index %zu is not a tensor of this optimizer (%zu added)", fn, index, o->count);
  if (!grads) return amp__fail(AMP_ERR_ARG, "%s: grads is NULL (tensor %zu)", fn, index);
  if ((st = amp__o_grads_check(fn, o, index, o->t[index].w, amp_dtype_size(o->t[index].wtype), grads,
                               amp_dtype_size(o->t[index].gtype), o->t[index].n)) != AMP_OK)
    return st;
  was = o->t[index].g;
  o->t[index].g = grads;
  if ((st = amp__be(o->dev)->optim_set_grads(o, index, m, sizeof m)) != AMP_OK) {
    o->t[index].g = was;
    return amp__op_fail(fn, st, m);
  }
  return AMP_OK;
}
AMPDEF amp_status amp_optimizer_add_mixed(amp_optimizer *o, amp_dtype w_dtype, void *weights,
                                          amp_dtype g_dtype, const void *grads, size_t n) {
  amp_tensor_desc t;
  memset(&t, 0, sizeof t);
  t.weights = weights; t.dtype = w_dtype; t.grads = grads; t.grad_dtype = g_dtype; t.n = n;
  return amp__o_add("amp_optimizer_add_mixed", o, &t, 0);
}
AMPDEF amp_status amp_optimizer_add(amp_optimizer *o, amp_dtype dtype, void *weights, const void *grads, size_t n) {
  amp_tensor_desc t;
  memset(&t, 0, sizeof t);
  t.weights = weights; t.dtype = dtype; t.grads = grads; t.grad_dtype = dtype; t.n = n;
  return amp__o_add("amp_optimizer_add", o, &t, 0);
}

AMPDEF amp_status amp_optimizer_add_group(amp_optimizer *o, float lr_scale, float weight_decay, int *group) {
  amp_status st;
  if (!o) return amp__fail(AMP_ERR_ARG, "amp_optimizer_add_group: o is NULL");
  if (!group) return amp__fail(AMP_ERR_ARG, "amp_optimizer_add_group: group is NULL");
  if (!(lr_scale >= 0.0f) || !amp__finite(lr_scale))
    return amp__fail(AMP_ERR_ARG, "amp_optimizer_add_group: lr_scale %g must be >= 0 and finite", (double)lr_scale);
  if (!(weight_decay >= 0.0f) || !amp__finite(weight_decay))
    return amp__fail(AMP_ERR_ARG, "amp_optimizer_add_group: weight_decay %g must be >= 0 and finite",
                     (double)weight_decay);
  if ((st = amp__refuse_subnormal("amp_optimizer_add_group", "lr_scale", lr_scale)) != AMP_OK ||
      (st = amp__refuse_subnormal("amp_optimizer_add_group", "weight_decay", weight_decay)) != AMP_OK)
    return st;
  if (o->cfg.kind == AMP_CUSTOM)
    return amp__fail(AMP_ERR_UNSUPPORTED, "amp_optimizer_add_group: kind AMP_CUSTOM runs the trainer's own update, "
                     "which no group's lr_scale or weight_decay reaches");
  if (o->frozen)
    return amp__fail(AMP_ERR_STATE, "amp_optimizer_add_group: add groups before the first step on a %s device "
                     "(the device optimizer was built with %d groups)", amp__be(o->dev)->name, o->n_groups);
  if (o->step > 0)
    return amp__fail(AMP_ERR_STATE, "amp_optimizer_add_group: add groups before the first update (%ld applied)",
                     o->step);
  if (o->n_groups == 0x7fffffff)
    return amp__fail(AMP_ERR_ARG, "amp_optimizer_add_group: %d groups already", o->n_groups);
  if (o->n_groups >= o->groups_cap) {   /* group 0 needs no entry: the first add allocates */
    int cap = o->groups_cap ? (o->groups_cap < 0x3fffffff ? 2 * o->groups_cap : 0x7fffffff) : 4, k;
    float *ls = (float *)AMP_MALLOC((size_t)cap * sizeof *ls), *wd = (float *)AMP_MALLOC((size_t)cap * sizeof *wd);
    if (!ls || !wd) {
      AMP_FREE(ls);
      AMP_FREE(wd);
      return amp__fail(AMP_ERR_NOMEM, "amp_optimizer_add_group: out of memory");
    }
    ls[0] = 1.0f; wd[0] = 0.0f;   /* unused: group 0 reads the config */
    for (k = 1; k < o->n_groups; k++) { ls[k] = o->lr_scale[k]; wd[k] = o->weight_decay[k]; }
    AMP_FREE(o->lr_scale); AMP_FREE(o->weight_decay);
    o->lr_scale = ls; o->weight_decay = wd; o->groups_cap = cap;
  }
  o->lr_scale[o->n_groups] = lr_scale; o->weight_decay[o->n_groups] = weight_decay;
  *group = o->n_groups++;
  return AMP_OK;
}

/* The stochastic-rounding key of tensor i's model-copy write after update number step (0: at add). */
static uint64_t amp__o_sr_key(const amp_optimizer *o, size_t i, long step) {
  return o->t[i].stochastic ? amp__sr_key(o->cfg.seed, (int64_t)step, (uint64_t)i) : 0u;
}

/* Tensor i's group values: lr_scale and weight_decay as amp__group_coefs reads them. */
static float amp__o_lr_scale(const amp_optimizer *o, size_t i) {
  return o->t[i].group ? o->lr_scale[o->t[i].group] : 1.0f;
}
static float amp__o_weight_decay(const amp_optimizer *o, size_t i) {
  return o->t[i].group ? o->weight_decay[o->t[i].group] : o->cfg.weight_decay;
}

/* The table is complete: a device that builds its optimizer from the whole table (CUDA: one
   upload, kernels over a chunk list) does it now; nothing on the CPU. fn names the public caller. */
static amp_status amp__o_ready(const char *fn, const amp_optimizer *co) {
  amp_optimizer *o = (amp_optimizer *)(uintptr_t)co;   /* never const where it was made: a cache fill */
  char m[AMP__MSG] = "";
  if (o->count == 0)
    return amp__fail(AMP_ERR_STATE, "%s: the optimizer has no tensors (amp_optimizer_add them before the first step)",
                     fn);
  return amp__op_fail(fn, amp__be(o->dev)->optim_ready(o, m, sizeof m), m);
}

/* The overflow line (amp_optim_config.stats on): once per unscale pass that found inf/NaN, the
   first tensor with inf/NaN by name, its count, its largest finite |g| after unscaling, the scale,
   and how many other tensors overflowed. An overflow seen only on another rank (data-parallel)
   names no tensor here and is not logged. */
static void amp__o_overflow_note(amp_optimizer *o) {
  size_t i, first = o->count, more = 0;
  char who[AMP__NAME_MAX + 32], also[64] = "";
  if (!o->cfg.stats || !o->found_inf || o->overflow_noted == o->unscales) return;
  o->overflow_noted = o->unscales;
  for (i = 0; i < o->count; i++)
    if (o->t[i].gstat.nonfinite) { if (first == o->count) first = i; else more++; }
  if (first == o->count) return;
  if (o->t[first].name) snprintf(who, sizeof who, "'%s' (tensor %zu)", o->t[first].name, first);
  else snprintf(who, sizeof who, "tensor %zu", first);
  if (more) snprintf(also, sizeof also, "; %zu more tensor%s overflowed", more, more == 1 ? "" : "s");
  amp__log("overflow in %s: %llu inf/NaN of %zu, amax %.3g at scale %g%s", who,
           (unsigned long long)o->t[first].gstat.nonfinite,
           o->t[first].n, (double)amp__bits_f32(o->t[first].gstat.amax_bits), (double)o->unscale_scale, also);
}

/* The one refresh of the optimizer's mirror (step, grad_norm, found_inf), for every getter and
   the checkpoint. */
static amp_status amp__o_pull_with(const char *fn, const amp_optimizer *co, int getter, int stats) {
  amp_optimizer *o = (amp_optimizer *)(uintptr_t)co;
  char m[AMP__MSG] = "";
  amp_status st = amp__be(o->dev)->optim_pull(o, m, sizeof m);
  /* a device's stats: read when asked for (amp__o_stats_pull) or for the overflow line, once the
     host reads after an overflow */
  if (st == AMP_OK && !amp__be(o->dev)->host_update && o->cfg.stats &&
      (stats || (o->found_inf && o->overflow_noted != o->unscales)))
    st = amp__be(o->dev)->optim_stats(o, m, sizeof m);
  if (st != AMP_OK) {
    amp__op_fail(fn, st, m);
    if (getter) amp__dev_keep_error(o->dev, st);   /* a getter cannot return the status */
    return st;
  }
  amp__o_overflow_note(o);
  return st;
}
static amp_status amp__o_pull(const char *fn, const amp_optimizer *co, int getter) {
  return amp__o_pull_with(fn, co, getter, 0);
}

AMPDEF amp_status amp_optimizer_set_lr(amp_optimizer *o, float lr) {
  amp_optim_config c;
  char m[AMP__MSG] = "";
  amp_status st;
  if (!o) return amp__fail(AMP_ERR_ARG, "amp_optimizer_set_lr: o is NULL");
  if (!(lr >= 0.0f) || !amp__finite(lr))
    return amp__fail(AMP_ERR_ARG, "amp_optimizer_set_lr: lr %g must be >= 0 and finite", (double)lr);
  if ((st = amp__refuse_subnormal("amp_optimizer_set_lr", "lr", lr)) != AMP_OK) return st;
  c = o->cfg;
  c.lr = lr;
  if ((st = amp__be(o->dev)->optim_set_config(o, &c, m, sizeof m)) != AMP_OK)
    return amp__op_fail("amp_optimizer_set_lr", st, m);
  o->cfg.lr = lr;
  return AMP_OK;
}
AMPDEF float amp_optimizer_grad_norm(const amp_optimizer *o) {
  if (!o) return 0.0f;
  return amp__o_pull("amp_optimizer_grad_norm", o, 1) == AMP_OK ? o->grad_norm : (float)NAN;
}
AMPDEF size_t amp_optimizer_count(const amp_optimizer *o) { return o ? o->count : 0; }
AMPDEF long amp_optimizer_step_count(const amp_optimizer *o) {
  if (!o) return 0;
  return amp__o_pull("amp_optimizer_step_count", o, 1) == AMP_OK ? o->step : -1;
}
AMPDEF size_t amp_optimizer_state_bytes(const amp_optimizer *o) {
  size_t total = 0, i, pad;
  int nm;
  if (!o) return 0;
  pad = amp__be(o->dev)->state_pad;
  nm = amp__o_moments(&o->cfg);
  for (i = 0; i < o->count; i++) {
    size_t n = (o->t[i].n + pad - 1) / pad * pad;
    size_t master = o->t[i].master_mode == AMP_MASTER_F32 ? 4 : o->t[i].master_mode == AMP_MASTER_SPLIT ? 2 : 0;
    total += n * master + (size_t)(nm > 0 ? nm : 0) * amp__moment_stride(o->t[i].moments, n, amp__be(o->dev)->state_align);
  }
  return total;
}

AMPDEF const float *amp_optimizer_master(const amp_optimizer *o, size_t index, size_t *n) {
  if (!o || index >= o->count || amp__o_ready("amp_optimizer_master", o) != AMP_OK) { if (n) *n = 0; return NULL; }
  if (o->t[index].master_mode != AMP_MASTER_F32) {
    if (n) *n = 0;
    amp__fail(AMP_ERR_UNSUPPORTED, "amp_optimizer_master: tensor %zu has master_mode %s: no fp32 master array (its "
              "master is %s)", index, amp__master_mode_name(o->t[index].master_mode),
              o->t[index].master_mode == AMP_MASTER_SPLIT ? "the bf16 model copy plus its 16-bit remainders"
                                                           : "the bf16 weights");
    return NULL;
  }
  if (n) *n = o->t[index].n;
  return o->t[index].master;
}

/* The call-order stage of o in s's current iteration. */
static int amp__o_stage(const amp_optimizer *o, const amp_scaler *s) {
  return o->sc_id == s->id && o->sc_iter == s->iter ? o->stage : AMP__READY;
}

/* A failing allreduce hook: its status (AMP_ERR_DEVICE when it is not an amp_status) and a
   message that keeps whatever the hook itself said through amp_last_error(). */
static amp_status amp__hook_fail(const char *fn, int raw) {
  char why[300];
  amp_status st = raw <= (int)AMP_OK || raw > (int)AMP_ERR_DEVICE ? AMP_ERR_DEVICE : (amp_status)raw;
  memcpy(why, amp__err_buf, sizeof why - 1);   /* the hook's message, cut to fit beside ours */
  why[sizeof why - 1] = '\0';
  return amp__fail(st, "%s: the allreduce hook returned %d (%s)%s%s; no update was applied", fn, raw,
                   amp_status_string(st), why[0] ? ": " : "", why);
}

/* After an unscale pass: counted, its scale kept (a device's is refreshed by its pull), and on a
   host device the overflow line now (a device's comes when the host next reads it). */
static void amp__o_unscaled(amp_optimizer *o, const amp_scaler *s) {
  o->unscales++;
  o->unscale_scale = s ? s->st.scale : 1.0f;
  if (amp__be(o->dev)->host_update) amp__o_overflow_note(o);
}

/* Pass 1 over every tensor of o and the decision (norm, clip, skip), on o's device; with the
   data-parallel hook, this rank's {found_inf, sumsq} first, the hook's sum over ranks, then the
   decision from the sums. Records the call order in o and s. A failure (the hook's included)
   records no call order and no decision (the gradient stats, taken in the pass, are that pass's:
   GRADIENT STATS). s NULL (amp_optimizer_step): the grads as they are (inverse scale 1), no hook,
   no call order to record. */
static amp_status amp__o_unscale(const char *fn, amp_scaler *s, amp_optimizer *o) {
  const amp__backend *be = amp__be(o->dev);
  char m[AMP__MSG] = "";
  double *buf = NULL;
  amp_status st;
  size_t i;
  for (i = 0; i < o->count; i++)
    if (!o->t[i].g)
      return amp__fail(AMP_ERR_STATE, "%s: tensor %zu%s%s%s has no grads yet (added with grads NULL): give them with "
                       "amp_optimizer_set_grads before the first step; nothing was changed", fn, i,
                       o->t[i].name ? " ('" : "", o->t[i].name ? o->t[i].name : "", o->t[i].name ? "')" : "");
  if ((st = amp__o_ready(fn, o)) != AMP_OK) return st;
  if (!s) {
    if ((st = be->optim_unscale(o, NULL, NULL, m, sizeof m)) != AMP_OK) return amp__op_fail(fn, st, m);
    amp__o_unscaled(o, NULL);
    return AMP_OK;
  }
  if (!s->allreduce) {
    if ((st = be->optim_unscale(o, s, NULL, m, sizeof m)) != AMP_OK) return amp__op_fail(fn, st, m);
  } else {
    if ((st = be->optim_unscale(o, s, &buf, m, sizeof m)) != AMP_OK) return amp__op_fail(fn, st, m);
    amp__err_buf[0] = '\0';     /* so the hook's own message (amp_nccl_allreduce_hook sets one) can be kept */
    st = s->allreduce(s->allreduce_user, buf, 2, o->dev->stream);
    if (st != AMP_OK) return amp__hook_fail(fn, (int)st);
    if ((st = be->optim_unscale_finish(o, s, m, sizeof m)) != AMP_OK) return amp__op_fail(fn, st, m);
  }
  o->sc_id = s->id; o->sc_iter = s->iter; o->stage = AMP__UNSCALED; o->unscaled_count = o->count;
  o->driver = AMP__BY_SCALER;
  s->recorded++;
  amp__o_unscaled(o, s);
  return AMP_OK;
}

/* ---- The device line: the CPU's operations (the table amp__cpu_ops is at the end) ---- */

/* Pass 2: the update of every tensor. */
static void amp__o_apply(amp_optimizer *o) {
  float gmul = o->inv * amp__clip_coef(o->grad_norm, o->cfg.max_grad_norm);
  size_t i;
  for (i = 0; i < o->count; i++) {
    if (!amp__kind_on_device(o->cfg.kind)) {   /* AMP_CUSTOM: the trainer's host function */
      amp__o_load(o->scratch, o->t[i].g, o->t[i].gtype, 0, o->t[i].n, gmul);
      o->cfg.custom_step(o->cfg.custom_user, o->t[i].master, o->scratch, o->t[i].n, i, o->step + 1);
      amp__o_store(o->t[i].w, o->t[i].wtype, o->t[i].round_to, o->t[i].stochastic, amp__o_sr_key(o, i, o->step + 1), 0,
                   o->t[i].master, o->t[i].n);
    } else if (o->t[i].moments != AMP_MOMENTS_F32) {   /* bf16, 8-bit or fp8 moments, every master mode */
      amp_step_coefs c = amp__group_coefs(&o->cfg, (int64_t)o->step + 1, o->t[i].group, amp__o_lr_scale(o, i),
                                          amp__o_weight_decay(o, i));
      amp__o_step_q(o->cfg.kind, o->t[i].master, o->t[i].moments, o->t[i].mq, o->t[i].vq, o->qmap, o->t[i].g,
                    o->t[i].gtype, o->t[i].w, o->t[i].wtype, o->t[i].round_to, o->t[i].rem, o->t[i].stochastic,
                    amp__o_sr_key(o, i, o->step + 1), o->t[i].n, gmul, &c);
    } else if (o->t[i].master_mode != AMP_MASTER_F32) {   /* SPLIT / NONE: a bf16 model copy, no fp32 array */
      amp_step_coefs c = amp__group_coefs(&o->cfg, (int64_t)o->step + 1, o->t[i].group, amp__o_lr_scale(o, i),
                                          amp__o_weight_decay(o, i));
      amp__o_step_lowmem(o->cfg.kind, (amp_bf16 *)o->t[i].w, o->t[i].rem, o->t[i].m, o->t[i].v, o->t[i].g,
                         o->t[i].gtype, amp__o_sr_key(o, i, o->step + 1), o->t[i].n, gmul, &c);
    } else {
      amp_step_coefs c = amp__group_coefs(&o->cfg, (int64_t)o->step + 1, o->t[i].group, amp__o_lr_scale(o, i),
                                          amp__o_weight_decay(o, i));
      amp__o_step(o->cfg.kind, o->t[i].master, o->t[i].m, o->t[i].v, o->t[i].g, o->t[i].gtype, o->t[i].w, o->t[i].wtype,
                  o->t[i].round_to, o->t[i].stochastic, amp__o_sr_key(o, i, o->step + 1), o->t[i].n, gmul, &c);
    }
  }
  o->step++;
}

/* The CPU keeps every state in the host fields themselves: its pulls and pushes have nothing to
   move, and nothing here can fail but an allocation. */
static amp_status amp__cpu_nothing_s(amp_scaler *s, char *msg, size_t cap) {
  (void)s;
  (void)msg;
  (void)cap;
  return AMP_OK;
}
static amp_status amp__cpu_nothing_o(amp_optimizer *o, char *msg, size_t cap) {
  (void)o;
  (void)msg;
  (void)cap;
  return AMP_OK;
}
static amp_status amp__cpu_sync(amp_device *d, char *msg, size_t cap) { (void)d; (void)msg; (void)cap; return AMP_OK; }
static void amp__cpu_close(amp_device *d) { (void)d; }
static void amp__cpu_scaler_destroy(amp_scaler *s) { (void)s; }
static amp_status amp__cpu_scaler_push(amp_scaler *s, const amp_scaler *from, char *msg, size_t cap) {
  (void)s; (void)from; (void)msg; (void)cap;
  return AMP_OK;
}
static amp_status amp__cpu_scaler_rule(amp_scaler *s, int found_inf, char *msg, size_t cap) {
  int f = found_inf || s->found_inf;
  (void)msg; (void)cap;
  amp__scale_rule(&s->st, &s->pr, f);
  s->last_skipped = f;
  s->skipped += f;
  return AMP_OK;
}
static float *amp__cpu_scale_ptr(amp_scaler *s) { return &s->st.scale; }
static amp_status amp__cpu_scale_buffer(amp_scaler *s, void *buf, amp_dtype t, size_t n, char *msg, size_t cap) {
  float k = s->st.scale;   /* one multiply and one rounding per element, as the device kernel */
  size_t i;
  (void)msg; (void)cap;
  for (i = 0; i < n; i++) amp__store(buf, t, i, amp__load(buf, t, i) * k);
  return AMP_OK;
}

#define AMP__CPU_STATE_ALIGN 4   /* the CPU's moment arrays start on 4-byte boundaries (amp__cpu_ops) */
/* The bytes of tensor t's nm moment arrays in their stored type (t->moments), m then v. */
static size_t amp__cpu_moments_size(const amp__tensor *t, int nm) {
  return (size_t)nm * amp__moment_stride(t->moments, t->n, AMP__CPU_STATE_ALIGN);
}
/* Tensor i's nm moment arrays, m then v, in the zeroed block at mom, each holding zeros (8BIT: every
   block's code of 0, absmax 1e-38, as amp__q_store leaves a block of zeros; FP8: codes 0, scale_inv
   1, as a step leaves moments that are all 0). */
static void amp__cpu_moments_place(amp_optimizer *o, size_t i, char *mom, int nm) {
  amp__tensor *t = &o->t[i];
  size_t n = t->n, st = amp__moment_stride(t->moments, n, AMP__CPU_STATE_ALIGN), i0;
  int j;
  if (t->moments == AMP_MOMENTS_F32) {
    t->m = nm >= 1 ? (float *)mom : NULL; t->v = nm >= 2 ? (float *)mom + n : NULL;
    return;
  }
  t->mq = nm >= 1 ? (unsigned char *)mom : NULL; t->vq = nm >= 2 ? (unsigned char *)mom + st : NULL;
  if (t->moments == AMP_MOMENTS_8BIT) {
    float zero[AMP__CHUNK];
    int l = amp__opt_level();   /* the step's vector encode: the plain loop's bits */
    memset(zero, 0, sizeof zero);
    for (j = 0; j < nm; j++)
      for (i0 = 0; i0 < n; i0 += AMP__CHUNK)
        amp__q_store(l, t->moments, j ? t->vq : t->mq, &o->qmap[j], n, i0, n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK,
                     zero, 0, 0u, 1.0f);
  }
  if (t->moments == AMP_MOMENTS_FP8)
    for (j = 0; j < nm; j++) amp__f8m_set(j ? t->vq : t->mq, amp__f8m_scale(0.0f));
}
/* AMP_MASTER_SPLIT / AMP_MASTER_NONE: the moments (one block, m then v; none for plain SGD) and,
   SPLIT, the remainders; no fp32 array. The master is the bf16 model copy as it is (its remainders
   0: exact), or seed: split into the model copy and the remainders (exact), or, NONE, rounded
   into the model copy stochastically with the key of update 0 (the seed itself is not kept). */
static amp_status amp__cpu_optim_add_lowmem(amp_optimizer *o, size_t i, const float *seed, int nm, char *msg,
                                            size_t cap) {
  size_t n = o->t[i].n, mbytes = amp__cpu_moments_size(&o->t[i], nm);
  char *mom = NULL;
  uint16_t *rem = NULL;
  if (nm) {
    mom = (char *)AMP_MALLOC(mbytes);
    if (!mom) { snprintf(msg, cap, "out of memory for %zu moments", n * (size_t)nm); return AMP_ERR_NOMEM; }
    memset(mom, 0, mbytes);
  }
  if (o->t[i].master_mode == AMP_MASTER_SPLIT) {
    rem = (uint16_t *)AMP_MALLOC(n * sizeof *rem);
    if (!rem) { AMP_FREE(mom); snprintf(msg, cap, "out of memory for %zu remainders", n); return AMP_ERR_NOMEM; }
    memset(rem, 0, n * sizeof *rem);
  }
  if (seed) {
    size_t i0;
    for (i0 = 0; i0 < n; i0 += AMP__CHUNK)
      amp__o_master_store((amp_bf16 *)o->t[i].w, rem, amp__o_sr_key(o, i, 0), i0, seed + i0,
                          n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK);
  }
  o->t[i].rem = rem;
  amp__cpu_moments_place(o, i, mom, nm);
  return AMP_OK;
}
static amp_status amp__cpu_optim_add(amp_optimizer *o, size_t i, const float *seed, char *msg, size_t cap) {
  size_t n = o->t[i].n, k;
  int nm = amp__o_moments(&o->cfg);
  float *block;
  if (!amp__kind_on_device(o->cfg.kind) && n > o->scratch_n) {
    float *s = (float *)AMP_MALLOC(n * sizeof(float));
    if (!s) { snprintf(msg, cap, "out of memory for %zu floats", n); return AMP_ERR_NOMEM; }
    AMP_FREE(o->scratch); o->scratch = s; o->scratch_n = n;
  }
  if (o->t[i].master_mode != AMP_MASTER_F32) return amp__cpu_optim_add_lowmem(o, i, seed, nm, msg, cap);
  block = (float *)AMP_MALLOC(n * sizeof(float) + amp__cpu_moments_size(&o->t[i], nm));
  if (!block) { snprintf(msg, cap, "out of memory for %zu floats and %d moments each", n, nm); return AMP_ERR_NOMEM; }
  if (seed) memcpy(block, seed, n * sizeof(float));   /* bit for bit */
  else for (k = 0; k < n; k++) block[k] = amp__load(o->t[i].w, o->t[i].wtype, k);   /* exact: every dtype fits f32 */
  if (seed || amp__round_to_set(o->t[i].round_to) || o->t[i].stochastic)
    amp__o_store(o->t[i].w, o->t[i].wtype, o->t[i].round_to, o->t[i].stochastic, amp__o_sr_key(o, i, 0), 0, block, n);
  if (nm) memset(block + n, 0, amp__cpu_moments_size(&o->t[i], nm));
  o->t[i].master = block;
  amp__cpu_moments_place(o, i, (char *)(block + n), nm);
  return AMP_OK;
}
static void amp__cpu_optim_destroy(amp_optimizer *o) {
  size_t i;
  for (i = 0; i < o->count; i++) {
    if (o->t[i].master_mode == AMP_MASTER_F32) AMP_FREE(o->t[i].master);   /* the master with its moments */
    else { AMP_FREE(o->t[i].m ? (void *)o->t[i].m : (void *)o->t[i].mq); AMP_FREE(o->t[i].rem); }
  }
}
static amp_status amp__cpu_optim_set_config(amp_optimizer *o, const amp_optim_config *c, char *msg, size_t cap) {
  (void)o; (void)c; (void)msg; (void)cap;
  return AMP_OK;
}
static amp_status amp__cpu_optim_set_grads(amp_optimizer *o, size_t i, char *msg, size_t cap) {
  (void)o; (void)i; (void)msg; (void)cap;   /* the loops read o->t[i].g itself */
  return AMP_OK;
}
/* The decision from {found_inf, sumsq} (this rank's, or the sums over the ranks). */
static void amp__cpu_decide(amp_optimizer *o, amp_scaler *s, int bad, double sumsq) {
  o->found_inf = bad; o->inv = s ? amp__scaler_inv(s) : 1.0f;
  o->grad_norm = amp__norm_of(sumsq);
  o->spike = amp__spike_skip(o->grad_norm, o->cfg.spike_norm, o->cfg.spike_zscore, &o->spike_win, bad);
  if (s) s->found_inf |= bad;
}
static amp_status amp__cpu_optim_unscale(amp_optimizer *o, amp_scaler *s, double **dp, char *msg, size_t cap) {
  float inv = s ? amp__scaler_inv(s) : 1.0f;   /* no scaler: the grads are unscaled (x * 1 is x) */
  double sumsq = 0.0;
  int bad = 0;
  size_t i;
  (void)msg; (void)cap;
  if (o->cfg.stats) {
    for (i = 0; i < o->count; i++) {
      memset(&o->t[i].gstat, 0, sizeof o->t[i].gstat);
      amp__o_scan_with_stats(o->t[i].g, o->t[i].gtype, o->t[i].n, inv, &sumsq, &bad, &o->t[i].gstat);
    }
  } else {
    for (i = 0; i < o->count; i++) amp__o_scan(o->t[i].g, o->t[i].gtype, o->t[i].n, inv, &sumsq, &bad);
  }
  if (!dp) { amp__cpu_decide(o, s, bad, sumsq); return AMP_OK; }
  o->dp[0] = bad ? 1.0 : 0.0; o->dp[1] = sumsq;
  *dp = o->dp;
  return AMP_OK;
}
static amp_status amp__cpu_optim_unscale_finish(amp_optimizer *o, amp_scaler *s, char *msg, size_t cap) {
  uint64_t b;   /* anything but +-0 is an overflow, NaN too: on the bits, which fast-math cannot fold */
  (void)msg; (void)cap;
  memcpy(&b, &o->dp[0], sizeof b);
  amp__cpu_decide(o, s, (b << 1) != 0, o->dp[1]);
  return AMP_OK;
}
static amp_status amp__cpu_optim_step(amp_optimizer *o, amp_scaler *s, char *msg, size_t cap) {
  (void)msg; (void)cap;
  /* any inf/NaN seen so far in this iteration skips; no scaler: this optimizer's own unscale */
  if (s ? !s->found_inf : !o->found_inf) {
    if (o->spike) o->spike_skips++;   /* a spike: nothing changes, the scale is left alone */
    else { amp__spike_window_push(&o->spike_win, o->grad_norm); amp__o_apply(o); }
  }
  return AMP_OK;
}
static amp_status amp__cpu_optim_set_step(amp_optimizer *o, long step, char *msg, size_t cap) {
  (void)msg; (void)cap;
  o->io_step = step;   /* o->step itself is the caller's to write, once nothing can fail */
  return AMP_OK;
}
static amp_status amp__cpu_optim_set_spike(amp_optimizer *o, long spike_skips, const amp__spike_window *w, char *msg,
                                           size_t cap) {
  (void)o; (void)spike_skips; (void)w; (void)msg; (void)cap;
  return AMP_OK;
}
static amp_status amp__cpu_optim_tensor_io(amp_optimizer *o, size_t i, int which, float *host, int to_device,
                                           char *msg, size_t cap) {
  float *p = which == 0 ? o->t[i].master : which == 1 ? o->t[i].m : o->t[i].v;
  if (which == 0 && o->t[i].master_mode != AMP_MASTER_F32) {
    /* no fp32 array: the master decoded from (written into) the model copy and remainders; NONE
       rounds a master into the model copy stochastically with the key of the update count
       being loaded (io_step), as a stochastic F32 tensor's model copy is written at a load */
    size_t i0, n = o->t[i].n;
    for (i0 = 0; i0 < n; i0 += AMP__CHUNK) {
      size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
      if (to_device)
        amp__o_master_store((amp_bf16 *)o->t[i].w, o->t[i].rem, amp__o_sr_key(o, i, o->io_step), i0, host + i0, k);
      else amp__o_master_load(host + i0, (const amp_bf16 *)o->t[i].w, o->t[i].rem, i0, k);
    }
    return AMP_OK;
  }
  if (which > 0 && o->t[i].moments != AMP_MOMENTS_F32) {   /* as kept (amp__moment_bytes), byte for byte */
    unsigned char *q = which == 1 ? o->t[i].mq : o->t[i].vq;
    size_t bytes = amp__moment_bytes(o->t[i].moments, o->t[i].n);
    if (!q) { snprintf(msg, cap, "tensor %zu keeps no buffer %d", i, which); return AMP_ERR_ARG; }
    if (to_device) memcpy(q, host, bytes);
    else memcpy(host, q, bytes);
    return AMP_OK;
  }
  if (!p) { snprintf(msg, cap, "tensor %zu keeps no buffer %d", i, which); return AMP_ERR_ARG; }
  if (to_device) memcpy(p, host, o->t[i].n * sizeof(float));
  else memcpy(host, p, o->t[i].n * sizeof(float));
  return AMP_OK;
}
static amp_status amp__cpu_optim_write_model(amp_optimizer *o, size_t i, long step, char *msg, size_t cap) {
  (void)msg; (void)cap;
  if (o->t[i].master_mode != AMP_MASTER_F32) return AMP_OK;   /* written with the master (optim_tensor_io) */
  amp__o_store(o->t[i].w, o->t[i].wtype, o->t[i].round_to, o->t[i].stochastic, amp__o_sr_key(o, i, step), 0,
               o->t[i].master, o->t[i].n);
  return AMP_OK;
}

static amp_status amp__check_pair(const char *fn, amp_scaler *s, amp_optimizer *o) {
  if (!s) return amp__fail(AMP_ERR_ARG, "%s: scaler is NULL", fn);
  if (!o) return amp__fail(AMP_ERR_ARG, "%s: optimizer is NULL", fn);
  if (s->dev != o->dev)
    return amp__fail(AMP_ERR_ARG, "%s: the scaler (%s) and the optimizer (%s) are on different devices", fn,
                     amp__be(s->dev)->name, amp__be(o->dev)->name);
  if (o->count == 0)   /* as torch.optim refuses an empty parameter list; the same on CPU and CUDA */
    return amp__fail(AMP_ERR_STATE, "%s: the optimizer has no tensors (amp_optimizer_add them before the first step)",
                     fn);
  if (o->driver == AMP__BY_STEP)
    return amp__fail(AMP_ERR_STATE,
                     "%s: this optimizer is stepped without a scaler (amp_optimizer_step was called on it); "
                     "an optimizer is stepped by a scaler or by amp_optimizer_step for its whole life",
                     fn);
  return AMP_OK;
}

AMPDEF amp_status amp_optimizer_step(amp_optimizer *o) {
  const char *fn = "amp_optimizer_step";
  char m[AMP__MSG] = "";
  amp_status st;
  if (!o) return amp__fail(AMP_ERR_ARG, "%s: o is NULL", fn);
  if (o->count == 0)
    return amp__fail(AMP_ERR_STATE, "%s: the optimizer has no tensors (amp_optimizer_add them before the first step)",
                     fn);
  if (o->driver == AMP__BY_SCALER)
    return amp__fail(
        AMP_ERR_STATE,
        "%s: this optimizer is stepped by a scaler (amp_scaler_unscale or amp_scaler_step "
        "was called on it); an optimizer is stepped by a scaler or by amp_optimizer_step for its whole life",
        fn);
  if ((st = amp__dev_take_error(fn, o->dev)) != AMP_OK) return st;   /* a getter's failed read, kept */
  /* pass 1 with inverse scale 1: inf/NaN and the norm (clip); pass 2 skips itself on inf/NaN */
  if ((st = amp__o_unscale(fn, NULL, o)) != AMP_OK) return st;
  if ((st = amp__be(o->dev)->optim_step(o, NULL, m, sizeof m)) != AMP_OK) return amp__op_fail(fn, st, m);
  o->driver = AMP__BY_STEP; o->stepped = 1;
  return AMP_OK;
}

AMPDEF int amp_optimizer_last_skipped(const amp_optimizer *o) {
  if (!o || !o->stepped) return 0;
  return amp__o_pull("amp_optimizer_last_skipped", o, 1) == AMP_OK ? o->found_inf != 0 : 0;
}
AMPDEF long amp_optimizer_spike_skips(const amp_optimizer *o) {
  if (!o) return 0;
  return amp__o_pull("amp_optimizer_spike_skips", o, 1) == AMP_OK ? o->spike_skips : -1;
}

/* The host copy of the stats refreshed from o's device (nothing to move on the CPU). */
static amp_status amp__o_stats_pull(const char *fn, const amp_optimizer *co) {
  amp_optimizer *o = (amp_optimizer *)(uintptr_t)co;   /* a cache fill */
  char m[AMP__MSG] = "";
  if (!o->cfg.stats)
    return amp__fail(AMP_ERR_STATE, "%s: gradient stats are off for this optimizer (set amp_optim_config.stats = 1 "
                     "at amp_optimizer_create)", fn);
  /* a device: its stats with the rest (and the overflow line) */
  if (!amp__be(o->dev)->host_update) return amp__o_pull_with(fn, o, 0, 1);
  return amp__op_fail(fn, amp__be(o->dev)->optim_stats(o, m, sizeof m), m);
}
AMPDEF amp_status amp_optimizer_stats(const amp_optimizer *o, size_t index, amp_tensor_stats *out) {
  const char *fn = "amp_optimizer_stats";
  const amp__gstat *g;
  amp_status st;
  if (!o) return amp__fail(AMP_ERR_ARG, "%s: o is NULL", fn);
  if (!out) return amp__fail(AMP_ERR_ARG, "%s: out is NULL", fn);
  if (index >= o->count)
    return amp__fail(AMP_ERR_ARG, "%s: index %zu is out of range (the optimizer has %zu tensors)", fn, index, o->count);
  if ((st = amp__o_stats_pull(fn, o)) != AMP_OK) return st;
  g = &o->t[index].gstat;
  out->amax = amp__bits_f32(g->amax_bits);
  out->n_nonfinite = (size_t)g->nonfinite; out->n_zero = (size_t)g->zero; out->n_subnormal = (size_t)g->subnormal;
  return AMP_OK;
}
AMPDEF long amp_optimizer_overflow_tensor(const amp_optimizer *o) {
  const char *fn = "amp_optimizer_overflow_tensor";
  amp_status st;
  size_t i;
  if (!o) { amp__fail(AMP_ERR_ARG, "%s: o is NULL", fn); return -1; }
  if ((st = amp__o_stats_pull(fn, o)) != AMP_OK) {
    if (st != AMP_ERR_STATE) amp__dev_keep_error(o->dev, st);   /* a getter cannot return the status */
    return -1;
  }
  for (i = 0; i < o->count; i++)
    if (o->t[i].gstat.nonfinite) return (long)i;
  return -1;
}

AMPDEF amp_status amp_scaler_unscale(amp_scaler *s, amp_optimizer *o) {
  amp_status st = amp__check_pair("amp_scaler_unscale", s, o);
  int stage;
  if (st != AMP_OK) return st;
  stage = amp__o_stage(o, s);
  if (stage == AMP__UNSCALED)
    return amp__fail(AMP_ERR_STATE,
                     "amp_scaler_unscale: unscale() has already been called on this optimizer since the last update()");
  if (stage == AMP__STEPPED)
    return amp__fail(AMP_ERR_STATE, "amp_scaler_unscale: unscale() is being called after step()");
  return amp__o_unscale("amp_scaler_unscale", s, o);
}

AMPDEF amp_status amp_scaler_step(amp_scaler *s, amp_optimizer *o) {
  amp_status st = amp__check_pair("amp_scaler_step", s, o);
  char m[AMP__MSG] = "";
  int stage;
  if (st != AMP_OK) return st;
  stage = amp__o_stage(o, s);
  if (stage == AMP__STEPPED)
    return amp__fail(AMP_ERR_STATE, "amp_scaler_step: step() has already been called since the last update()");
  if (stage == AMP__UNSCALED && o->unscaled_count != o->count)
    return amp__fail(AMP_ERR_STATE, "amp_scaler_step: %zu tensors were added after unscale() saw %zu",
                     o->count - o->unscaled_count, o->unscaled_count);
  if (stage == AMP__READY && (st = amp__o_unscale("amp_scaler_step", s, o)) != AMP_OK) return st;
  /* skipped when any unscale of this iteration found inf/NaN */
  if ((st = amp__be(o->dev)->optim_step(o, s, m, sizeof m)) != AMP_OK) return amp__op_fail("amp_scaler_step", st, m);
  o->stage = AMP__STEPPED;
  return AMP_OK;
}

/* ---- checkpoints ---- */

/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320, as zlib's crc32), table-driven. */
typedef struct amp__crc { uint32_t table[256]; uint32_t crc; } amp__crc;
static void amp__crc_init(amp__crc *c) {
  uint32_t i, j, r;
  for (i = 0; i < 256; i++) {
    for (r = i, j = 0; j < 8; j++) r = (r >> 1) ^ (0xEDB88320u & (0u - (r & 1u)));
    c->table[i] = r;
  }
  c->crc = 0xFFFFFFFFu;
}
static void amp__crc_add(amp__crc *c, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  uint32_t r = c->crc;
  size_t i;
  for (i = 0; i < n; i++) r = c->table[(r ^ p[i]) & 0xFFu] ^ (r >> 8);
  c->crc = r;
}
static uint32_t amp__crc_value(const amp__crc *c) { return c->crc ^ 0xFFFFFFFFu; }

/* -- files: a new file put over a path atomically, and a checked read of a regular file -------- */

#if AMP__POSIX_FILES
#ifdef O_NOFOLLOW
#define AMP__O_NOFOLLOW O_NOFOLLOW
#else
#define AMP__O_NOFOLLOW 0   /* O_CREAT | O_EXCL alone never follows a symlink (POSIX): EEXIST */
#endif
#ifdef O_CLOEXEC
#define AMP__O_CLOEXEC O_CLOEXEC
#else
#define AMP__O_CLOEXEC 0
#endif
#elif defined(_WIN32)
#include <process.h>   /* _getpid */
#else
#include <time.h>
#endif

/* A new file written under a temporary name unique to this process and call, in path's directory,
   created exclusively (never through an existing file or symlink), flushed to disk, renamed over
   path, and the directory flushed after the rename. */
typedef struct amp__wfile {
  const char *fn, *path;   /* the public caller (for messages) and the target */
  char *tmp;               /* the temporary's name */
  size_t cap;              /* tmp's bytes */
#if AMP__POSIX_FILES
  int fd;
#else
  FILE *f;
#endif
} amp__wfile;

static unsigned long amp__tmp_seq = 0;   /* temporaries named by this process (a relaxed atomic) */

/* The temporary's name for sequence number seq: "<path>.tmp.<process id>.<seq>", in path's
   directory. A file name may have at most 255 bytes (NAME_MAX on every common file system): where
   path's own file name leaves no room for the suffix, its first bytes are kept, so that every path
   that can be created can be saved (the temporary's whole path is at most as long as path plus
   the suffix's 40 bytes: only a path within 40 bytes of the system's PATH_MAX, 4096 on Linux, with
   a file name shorter than 215 bytes, cannot be). */
#define AMP__NAME_BYTES 255
static void amp__tmp_name(char *buf, size_t cap, const char *path, unsigned long seq) {
  char suffix[64];
  const char *base = strrchr(path, '/');
  size_t dir = base ? (size_t)(base + 1 - path) : 0, keep = strlen(path) - dir;
#if AMP__POSIX_FILES
  snprintf(suffix, sizeof suffix, ".tmp.%ld.%lu", (long)getpid(), seq);
#elif defined(_WIN32)
  snprintf(suffix, sizeof suffix, ".tmp.%d.%lu", _getpid(), seq);
#else   /* no process id in C: the time and the processor time, which two processes rarely share */
  snprintf(suffix, sizeof suffix, ".tmp.%lx.%lu", (unsigned long)time(NULL) ^ ((unsigned long)clock() << 12), seq);
#endif
  if (keep + strlen(suffix) > AMP__NAME_BYTES) keep = AMP__NAME_BYTES - strlen(suffix);
  snprintf(buf, cap, "%.*s%s", (int)(dir + keep), path, suffix);
}

static amp_status amp__wfile_open(amp__wfile *w, const char *fn, const char *path) {
  amp_status st;
  int tries, e = 0;
  w->fn = fn; w->path = path;
  w->cap = strlen(path) + 64;
  w->tmp = (char *)AMP_MALLOC(w->cap);
  if (!w->tmp) return amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
  for (tries = 0; tries < 64; tries++) {   /* a name taken (by anything, a symlink too): the next one */
    amp__tmp_name(w->tmp, w->cap, path, AMP__AINC(&amp__tmp_seq));
#if AMP__POSIX_FILES
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | AMP__O_NOFOLLOW | AMP__O_CLOEXEC, 0666);
    if (w->fd >= 0) return AMP_OK;
    e = errno;
    if (e != EEXIST) break;
#else
    {   /* C stdio cannot create exclusively: skip names that exist, then create */
      FILE *probe = fopen(w->tmp, "rb");
      if (probe) { fclose(probe); e = EEXIST; continue; }
    }
    w->f = fopen(w->tmp, "wb");
    if (w->f) return AMP_OK;
    e = errno;
    break;
#endif
  }
  st =
      amp__fail(AMP_ERR_IO, "%s: cannot create the temporary file '%s' beside '%s': %s", fn, w->tmp, path, strerror(e));
  AMP_FREE(w->tmp); w->tmp = NULL;
  return st;
}

static amp_status amp__wfile_write(amp__wfile *w, const void *data, size_t n) {
#if AMP__POSIX_FILES
  const char *p = (const char *)data;
  while (n > 0) {
    ssize_t k = write(w->fd, p, n < ((size_t)1 << 30) ? n : ((size_t)1 << 30));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return amp__fail(AMP_ERR_IO, "%s: writing '%s' failed: %s", w->fn, w->tmp,
                       k < 0 ? strerror(errno) : "no byte written");
    p += k; n -= (size_t)k;
  }
#else
  if (n > 0 && fwrite(data, 1, n, w->f) != n)
    return amp__fail(AMP_ERR_IO, "%s: writing '%s' failed: %s", w->fn, w->tmp, strerror(errno));
#endif
  return AMP_OK;
}

/* Gives up: the temporary is closed and removed, path untouched (amp_last_error is kept). */
static void amp__wfile_abort(amp__wfile *w) {
#if AMP__POSIX_FILES
  if (w->fd >= 0) close(w->fd);
  unlink(w->tmp);
#else
  if (w->f) fclose(w->f);
  remove(w->tmp);
#endif
  AMP_FREE(w->tmp); w->tmp = NULL;
}

static amp_status amp__wfile_commit(amp__wfile *w) {
  amp_status st = AMP_OK;
#if AMP__POSIX_FILES
  int e, dfd;
  char *slash;
  if (fsync(w->fd) != 0) {
    e = errno; st = amp__fail(AMP_ERR_IO, "%s: flushing '%s' to disk failed: %s", w->fn, w->tmp, strerror(e));
    amp__wfile_abort(w); return st;
  }
  e = close(w->fd) != 0 ? errno : 0;
  w->fd = -1;
  if (e) {
    st = amp__fail(AMP_ERR_IO, "%s: closing '%s' failed: %s", w->fn, w->tmp, strerror(e));
    amp__wfile_abort(w);
    return st;
  }
  if (rename(w->tmp, w->path) != 0) {
    e = errno; st = amp__fail(AMP_ERR_IO, "%s: cannot rename '%s' to '%s': %s", w->fn, w->tmp, w->path, strerror(e));
    amp__wfile_abort(w); return st;
  }
  /* the rename itself reaches the disk when the directory is flushed */
  memcpy(w->tmp, w->path, strlen(w->path) + 1);
  slash = strrchr(w->tmp, '/');
  if (!slash) memcpy(w->tmp, ".", 2);
  else slash[slash == w->tmp] = '\0';   /* "/x" -> "/", "a/b" -> "a" */
  dfd = open(w->tmp, O_RDONLY | AMP__O_CLOEXEC);
  if (dfd >= 0) {   /* a directory that cannot be opened (search permission only) cannot be flushed */
    if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS)   /* EINVAL: a file system without it */
      st = amp__fail(AMP_ERR_IO, "%s: '%s' was written, but flushing its directory '%s' to disk failed: %s",
                     w->fn, w->path, w->tmp, strerror(errno));
    close(dfd);
  }
#else
  int e = 0;
  if (fflush(w->f) != 0) e = errno;
  if (fclose(w->f) != 0 && !e) e = errno ? errno : EIO;
  w->f = NULL;
  if (e) {
    st = amp__fail(AMP_ERR_IO, "%s: writing '%s' failed: %s", w->fn, w->tmp, strerror(e));
    amp__wfile_abort(w);
    return st;
  }
  if (rename(w->tmp, w->path) != 0) {   /* Windows' rename does not replace: remove, then rename */
    remove(w->path);
    if (rename(w->tmp, w->path) != 0) {
      e = errno; st = amp__fail(AMP_ERR_IO, "%s: cannot rename '%s' to '%s': %s", w->fn, w->tmp, w->path, strerror(e));
      amp__wfile_abort(w); return st;
    }
  }
#endif
  AMP_FREE(w->tmp); w->tmp = NULL;
  return st;
}

/* A file opened for reading only if it is a regular file: a FIFO, a device or a directory is
   AMP_ERR_IO at once (the open does not wait for a FIFO's writer; the type is checked on the
   opened file, so nothing can be swapped in between). */
typedef struct amp__rfile {
  const char *fn, *path;
#if AMP__POSIX_FILES
  int fd;
#else
  FILE *f;
#endif
} amp__rfile;

static amp_status amp__rfile_open(amp__rfile *r, const char *fn, const char *path, uint64_t *size) {
#if AMP__POSIX_FILES
  struct stat sb;
  int fl, e;
  r->fn = fn; r->path = path;
  r->fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | AMP__O_CLOEXEC);
  if (r->fd < 0) { e = errno; return amp__fail(AMP_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(e)); }
  if (fstat(r->fd, &sb) != 0) {
    e = errno;
    close(r->fd);
    return amp__fail(AMP_ERR_IO, "%s: cannot stat '%s': %s", fn, path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(r->fd);
    return amp__fail(AMP_ERR_IO, "%s: '%s' is not a regular file (it is a %s)", fn, path,
                     S_ISDIR(sb.st_mode) ? "directory" : S_ISFIFO(sb.st_mode) ? "FIFO" : "device or socket");
  }
  if ((fl = fcntl(r->fd, F_GETFL)) == -1 || fcntl(r->fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
    e = errno; close(r->fd); return amp__fail(AMP_ERR_IO, "%s: cannot read '%s': %s", fn, path, strerror(e));
  }
  *size = (uint64_t)sb.st_size;
#else
  long len;
  int e;
  r->fn = fn; r->path = path;
  r->f = fopen(path, "rb");
  if (!r->f) { e = errno; return amp__fail(AMP_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(e)); }
  if ((getc(r->f) == EOF && ferror(r->f)) || fseek(r->f, 0, SEEK_END) != 0 || (len = ftell(r->f)) < 0 ||
      fseek(r->f, 0, SEEK_SET) != 0) {
    e = errno; fclose(r->f); return amp__fail(AMP_ERR_IO, "%s: cannot read '%s': %s", fn, path, strerror(e));
  }
  *size = (uint64_t)len;
#endif
  return AMP_OK;
}

/* Exactly n bytes, or AMP_ERR_IO (a file that ends early changed while it was read). */
static amp_status amp__rfile_read(amp__rfile *r, void *dst, size_t n) {
#if AMP__POSIX_FILES
  char *p = (char *)dst;
  while (n > 0) {
    ssize_t k = read(r->fd, p, n < ((size_t)1 << 30) ? n : ((size_t)1 << 30));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return amp__fail(AMP_ERR_IO, "%s: cannot read '%s': %s", r->fn, r->path, strerror(errno));
    if (k == 0) return amp__fail(AMP_ERR_IO, "%s: '%s' ended early (did it change while it was read?)", r->fn, r->path);
    p += k; n -= (size_t)k;
  }
#else
  if (n > 0 && fread(dst, 1, n, r->f) != n)
    return amp__fail(AMP_ERR_IO, "%s: cannot read '%s': %s", r->fn, r->path,
                     ferror(r->f) ? strerror(errno) : "it ended early");
#endif
  return AMP_OK;
}

static amp_status amp__rfile_seek(amp__rfile *r, uint64_t offset) {
#if AMP__POSIX_FILES
  if (lseek(r->fd, (off_t)offset, SEEK_SET) != (off_t)offset)
#else
  if (offset > (uint64_t)LONG_MAX || fseek(r->f, (long)offset, SEEK_SET) != 0)
#endif
    return amp__fail(AMP_ERR_IO, "%s: cannot seek in '%s': %s", r->fn, r->path, strerror(errno));
  return AMP_OK;
}

static void amp__rfile_close(amp__rfile *r) {
#if AMP__POSIX_FILES
  close(r->fd);
#else
  fclose(r->f);
#endif
}

static amp_status amp__read_small_file(const char *fn, const char *path, uint64_t cap, const char *what, char **text,
                                       size_t *len) {
  amp__rfile f;
  uint64_t size;
  amp_status st;
  *text = NULL; *len = 0;
  if ((st = amp__rfile_open(&f, fn, path, &size)) != AMP_OK) return st;
  if (size > cap) {
    amp__rfile_close(&f);
    return amp__fail(AMP_ERR_IO, "%s: '%s' is %llu bytes, more than %s may be (%llu)", fn, path,
                     (unsigned long long)size, what, (unsigned long long)cap);
  }
  if (!(*text = (char *)AMP_MALLOC((size_t)size + 1))) {
    amp__rfile_close(&f);
    return amp__fail(AMP_ERR_NOMEM, "%s: out of memory reading '%s'", fn, path);
  }
  st = amp__rfile_read(&f, *text, (size_t)size);
  amp__rfile_close(&f);
  if (st != AMP_OK) { AMP_FREE(*text); *text = NULL; return st; }
  (*text)[size] = '\0';
  *len = (size_t)size;
  return AMP_OK;
}

/* -- the checkpoint format: each record one list of fields, read and written by one function ---- */

#define AMP__CKPT_MAGIC "AMPCKPT1"
#define AMP__CKPT_VERSION 3u      /* the newest: written when a tensor keeps moments other than fp32; else
                                     version 2 (the same bytes as before moments had types); version 1 (no
                                     spike record) is read too */
#define AMP__CKPT_ENDIAN 0x01020304u

/* X(type, name, live) for each field, in file order: its type in the file (stored in the writer's
   byte order), its name, and the member of the live object it is saved from and loaded into (the
   header has none: live is its own name). A scalar field is one line here: its record, size, reader,
   writer and live copy all follow (a new field in the file is a new format version). */
#define AMP__CKPT_HEAD_FIELDS(X) \
  X(uint64_t, magic, magic) X(uint32_t, version, version) X(uint32_t, endian, endian) \
  X(uint32_t, header_bytes, header_bytes) X(uint32_t, flags, flags) X(uint64_t, payload_bytes, payload_bytes)
/* live: amp_scaler (its parameters pr are checked as amp_scaler_create checks a config) */
#define AMP__CKPT_SCALER_FIELDS(X) \
  X(float, growth, pr.growth) X(float, backoff, pr.backoff) X(float, floor, pr.floor) X(float, cap, pr.cap) \
  X(int32_t, interval, pr.interval) X(int32_t, hysteresis, pr.hysteresis) X(int32_t, mode, pr.mode) \
  X(int32_t, fixed, pr.fixed) X(int32_t, late_growth, pr.late_growth) X(float, init_scale, init_scale) \
  X(float, scale, st.scale) X(int32_t, tracker, st.tracker) X(int32_t, hyst, st.hyst) \
  X(int32_t, at_floor, st.at_floor) \
  X(int32_t, last_skipped, last_skipped) X(int32_t, floor_logged, floor_logged) X(uint64_t, skipped, skipped)
/* live: amp_optimizer; the hyperparameters, cfg.*, are checked as amp_optimizer_create checks a config */
#define AMP__CKPT_OPTIM_FIELDS(X) \
  X(uint32_t, kind, cfg.kind) AMP__CKPT_HPARAM_FIELDS(X) X(uint64_t, step, step) X(uint64_t, count, count)
#define AMP__CKPT_HPARAM_FIELDS(X) \
  X(float, lr, cfg.lr) X(float, weight_decay, cfg.weight_decay) X(float, momentum, cfg.momentum) \
  X(float, dampening, cfg.dampening) X(int32_t, nesterov, cfg.nesterov) X(float, beta1, cfg.beta1) \
  X(float, beta2, cfg.beta2) X(float, eps, cfg.eps) X(float, max_grad_norm, cfg.max_grad_norm)
/* live: amp__tensor (the optimizer's record of the tensor); version 3 adds the moments' stored type
   (AMP_MOMENTS_*); a record of an older version has the fields before it (moments AMP_MOMENTS_F32). */
#define AMP__CKPT_TENSOR_FIELDS(X) AMP__CKPT_TENSOR_V2_FIELDS(X) X(uint32_t, moments, moments)
#define AMP__CKPT_TENSOR_V2_FIELDS(X) X(uint64_t, n, n) X(uint32_t, wtype, wtype) X(uint32_t, gtype, gtype)
/* version 2: after the optimizer record, the spike state (live: amp_optimizer): these fields, then
   f32 window[100] */
#define AMP__CKPT_SPIKE_FIELDS(X) \
  X(uint64_t, spike_skips, spike_skips) X(int32_t, window_count, spike_win.count) \
  X(int32_t, window_next, spike_win.next)
/* flags: which sections the payload holds, in this order; each tensor record is followed by its
   state: the f32 master, then the moments the kind has (amp__o_moments), each n elements of the
   record's moments type (f32, or bf16 words: as kept, not widened). */
#define AMP__CKPT_HAS_SCALER 1u
#define AMP__CKPT_HAS_OPTIM 2u

#define AMP__CKPT_DECLARE(type, name, live) type name;
#define AMP__CKPT_SIZEOF(type, name, live) + sizeof(type)
typedef struct amp__ckpt_head { AMP__CKPT_HEAD_FIELDS(AMP__CKPT_DECLARE) } amp__ckpt_head;
typedef struct amp__ckpt_scaler { AMP__CKPT_SCALER_FIELDS(AMP__CKPT_DECLARE) } amp__ckpt_scaler;
typedef struct amp__ckpt_optim { AMP__CKPT_OPTIM_FIELDS(AMP__CKPT_DECLARE) } amp__ckpt_optim;
typedef struct amp__ckpt_tensor { AMP__CKPT_TENSOR_FIELDS(AMP__CKPT_DECLARE) } amp__ckpt_tensor;
typedef struct amp__ckpt_spike {
  AMP__CKPT_SPIKE_FIELDS(AMP__CKPT_DECLARE) float window[AMP__SPIKE_WINDOW];
} amp__ckpt_spike;
/* each record's bytes in the file (32, 72, 56, 20 (16 before version 3), 416) */
#define AMP__CKPT_HEAD_BYTES (0 AMP__CKPT_HEAD_FIELDS(AMP__CKPT_SIZEOF))
#define AMP__CKPT_SCALER_BYTES (0 AMP__CKPT_SCALER_FIELDS(AMP__CKPT_SIZEOF))
#define AMP__CKPT_OPTIM_BYTES (0 AMP__CKPT_OPTIM_FIELDS(AMP__CKPT_SIZEOF))
#define AMP__CKPT_TENSOR_BYTES (0 AMP__CKPT_TENSOR_FIELDS(AMP__CKPT_SIZEOF))
#define AMP__CKPT_SPIKE_BYTES (0 AMP__CKPT_SPIKE_FIELDS(AMP__CKPT_SIZEOF) + 4 * AMP__SPIKE_WINDOW)
/* A tensor record's bytes in a file of version v. */
static size_t amp__ckpt_tensor_bytes(uint32_t v) {
  return v >= 3u ? AMP__CKPT_TENSOR_BYTES : (0 AMP__CKPT_TENSOR_V2_FIELDS(AMP__CKPT_SIZEOF));
}

/* Where records go to or come from. Writing: through a buffer into the temporary file, with the
   running CRC and the first failure. Reading: a file image in memory. */
#define AMP__CKPT_BUF 65536
typedef struct amp__ckpt_io {
  int writing;
  amp__wfile *file;                   /* writing */
  unsigned char *buf; size_t used;
  amp__crc crc;
  amp_status st;
  const unsigned char *p; size_t left; /* reading */
} amp__ckpt_io;

static void amp__ckpt_flush(amp__ckpt_io *io) {
  if (io->st == AMP_OK && io->used) io->st = amp__wfile_write(io->file, io->buf, io->used);
  io->used = 0;
}
/* n bytes at p written, or read into p; 0 when a read runs past the end (nothing read) or a
   write has failed. */
static int amp__ckpt_bytes(amp__ckpt_io *io, void *p, size_t n) {
  if (!io->writing) {
    if (io->left < n) { io->left = 0; return 0; }
    memcpy(p, io->p, n); io->p += n; io->left -= n;
    return 1;
  }
  if (io->st != AMP_OK) return 0;
  amp__crc_add(&io->crc, p, n);
  if (io->used + n > AMP__CKPT_BUF) amp__ckpt_flush(io);
  if (n >= AMP__CKPT_BUF) { if (io->st == AMP_OK) io->st = amp__wfile_write(io->file, p, n); }
  else { memcpy(io->buf + io->used, p, n); io->used += n; }
  return io->st == AMP_OK;
}
/* The one place each record is read and written. */
#define AMP__CKPT_TRANSFER(type, name, live) ok = amp__ckpt_bytes(io, &r->name, sizeof r->name) && ok;
#define AMP__CKPT_IO_FN(rec, FIELDS) \
  static int amp__ckpt_##rec##_io(amp__ckpt_io *io, amp__ckpt_##rec *r) { \
    int ok = 1; \
    FIELDS(AMP__CKPT_TRANSFER) return ok; \
  }
AMP__CKPT_IO_FN(head, AMP__CKPT_HEAD_FIELDS)
AMP__CKPT_IO_FN(scaler, AMP__CKPT_SCALER_FIELDS)
AMP__CKPT_IO_FN(optim, AMP__CKPT_OPTIM_FIELDS)
AMP__CKPT_IO_FN(tensor, AMP__CKPT_TENSOR_FIELDS)
#undef AMP__CKPT_IO_FN
/* A tensor record as a file of version v holds it (before version 3 the fields of AMP__CKPT_TENSOR_V2_FIELDS;
   the others are left as they are: 0 in a record cleared before a read, moments AMP_MOMENTS_F32). */
static int amp__ckpt_tensor_io_v(amp__ckpt_io *io, amp__ckpt_tensor *r, uint32_t v) {
  int ok = 1;
  if (v >= 3u) return amp__ckpt_tensor_io(io, r);
  AMP__CKPT_TENSOR_V2_FIELDS(AMP__CKPT_TRANSFER)
  return ok;
}
static int amp__ckpt_spike_io(amp__ckpt_io *io, amp__ckpt_spike *r) {
  int ok = 1;
  AMP__CKPT_SPIKE_FIELDS(AMP__CKPT_TRANSFER)
  return amp__ckpt_bytes(io, r->window, sizeof r->window) && ok;
}
/* The name of the first field whose bytes differ between two records (NULL: none). */
#define AMP__CKPT_DIFFER(type, name, live) if (memcmp(&a->name, &b->name, sizeof a->name) != 0) return #name;
static const char *amp__ckpt_scaler_differ(const amp__ckpt_scaler *a, const amp__ckpt_scaler *b) {
  AMP__CKPT_SCALER_FIELDS(AMP__CKPT_DIFFER) return NULL;
}
static const char *amp__ckpt_optim_differ(const amp__ckpt_optim *a, const amp__ckpt_optim *b) {
  AMP__CKPT_OPTIM_FIELDS(AMP__CKPT_DIFFER) return NULL;
}

/* A checkpoint read and checked, nothing live touched yet. */
typedef struct amp__ckpt_image {
  unsigned char *buf;              /* the whole file (with an optimizer to restore; else a chunk) */
  int has_scaler, has_optim;       /* the sections to restore */
  amp_scaler sc;                   /* the scaler's checked fields (pr, init_scale, st, last_skipped, floor_logged,
                                      skipped) */
  amp_optim_config cfg;            /* the optimizer's checked config */
  long step;
  uint32_t version;                /* the file's format version */
  long spike_skips;                /* the spike state (version 2; zero from a version-1 file) */
  amp__spike_window spike_win;
  const unsigned char *tensors;    /* the first tensor record */
} amp__ckpt_image;

/* The records of the live objects (a scaler's host fields, refreshed from the device first by
   amp__s_pull on CUDA), and a record's fields copied into a live object: x is the live object. */
#define AMP__CKPT_SAVE(type, name, live) r.name = (type)x->live;
#define AMP__CKPT_LOAD(type, name, live) x->live = r->name;
static amp__ckpt_scaler amp__ckpt_scaler_of(const amp_scaler *x) {
  amp__ckpt_scaler r;
  AMP__CKPT_SCALER_FIELDS(AMP__CKPT_SAVE)
  return r;
}
static amp__ckpt_optim amp__ckpt_optim_of(const amp_optimizer *x) {
  amp__ckpt_optim r;
  AMP__CKPT_OPTIM_FIELDS(AMP__CKPT_SAVE)
  return r;
}
static amp__ckpt_tensor amp__ckpt_tensor_of(const amp__tensor *x) {
  amp__ckpt_tensor r;
  AMP__CKPT_TENSOR_FIELDS(AMP__CKPT_SAVE)
  return r;
}
static amp__ckpt_spike amp__ckpt_spike_of(const amp_optimizer *x) {
  amp__ckpt_spike r;
  AMP__CKPT_SPIKE_FIELDS(AMP__CKPT_SAVE)
  memcpy(r.window, x->spike_win.norm, sizeof r.window);
  return r;
}
/* The casts back (the checks below then compare the live value with the file's). */
static void amp__ckpt_scaler_load(const amp__ckpt_scaler *r, amp_scaler *x) {
  AMP__CKPT_SCALER_FIELDS(AMP__CKPT_LOAD)
}
static void amp__ckpt_hparams_load(const amp__ckpt_optim *r, amp_optimizer *x) {
  AMP__CKPT_HPARAM_FIELDS(AMP__CKPT_LOAD)
}
static void amp__ckpt_spike_load(const amp__ckpt_spike *r, amp__ckpt_image *x) {
  AMP__CKPT_SPIKE_FIELDS(AMP__CKPT_LOAD)
  memcpy(x->spike_win.norm, r->window, sizeof x->spike_win.norm);
}
/* The largest count (update steps, skipped steps, spike skips) a checkpoint may hold: half of
   LONG_MAX, so that a loaded count can grow for another LONG_MAX / 2 steps (2^62 on LP64) without
   overflowing, and an object's own next save always loads. */
#define AMP__COUNT_MAX (LONG_MAX / 2)

/* The file's spike record: a count within range and a window as amp__spike_window_push leaves it
   (count 0 .. 100, next == count until it is full, held norms finite and >= 0, the rest +0). */
static amp_status amp__ckpt_spike_check(const amp__ckpt_spike *r, amp__ckpt_image *x) {
  const char *fn = "amp_checkpoint_load";
  int32_t i;
  if (r->spike_skips > (uint64_t)AMP__COUNT_MAX)
    return amp__fail(AMP_ERR_CORRUPT, "%s: the spike skip count %llu in the file is out of range (at most %ld here)",
                     fn, (unsigned long long)r->spike_skips, (long)AMP__COUNT_MAX);
  if (r->window_count < 0 || r->window_count > AMP__SPIKE_WINDOW || r->window_next < 0 ||
      r->window_next >= AMP__SPIKE_WINDOW || (r->window_count < AMP__SPIKE_WINDOW && r->window_next != r->window_count))
    return amp__fail(AMP_ERR_CORRUPT,
                     "%s: the spike window's count %d and next slot %d in the file are not a window's (count 0 .. %d, "
                     "next == count until it is full)",
                     fn, (int)r->window_count, (int)r->window_next, AMP__SPIKE_WINDOW);
  for (i = 0; i < AMP__SPIKE_WINDOW; i++)
    if (i < r->window_count ? !(amp__finite(r->window[i]) && r->window[i] >= 0.0f) : amp__f32_bits(r->window[i]) != 0u)
      return amp__fail(AMP_ERR_CORRUPT,
                       "%s: the spike window's slot %d in the file holds %g (held norms are finite and >= 0, "
                       "unused slots 0)",
                       fn, (int)i, (double)r->window[i]);
  amp__ckpt_spike_load(r, x);
  return AMP_OK;
}

/* A message of a validator (create's own) given again as the file's fault. */
static amp_status amp__ckpt_refuse_as_corrupt(void) {
  char why[sizeof amp__err_buf];
  memcpy(why, amp__err_buf, sizeof why);
  return amp__fail(AMP_ERR_CORRUPT, "%.440s (in the file)", why);
}

/* The file's scaler record, checked as amp_scaler_create checks a config (the parameters must
   resolve to themselves: a 0 create would replace by a default, or a flag other than 0 or 1, is
   refused) and its state against those parameters; *out gets it. */
static amp_status amp__ckpt_scaler_check(const amp__ckpt_scaler *r, amp_scaler *out) {
  amp_scaler_config c;
  amp__ckpt_scaler again;
  const char *bad;
  const char *fn = "amp_checkpoint_load";
  memset(out, 0, sizeof *out);
  amp__ckpt_scaler_load(r, out);   /* every field as the file holds it; the parameters resolved again below */
  memset(&c, 0, sizeof c);
  c.init_scale = out->init_scale; c.growth_factor = out->pr.growth; c.backoff_factor = out->pr.backoff;
  c.growth_interval = out->pr.interval; c.hysteresis = out->pr.hysteresis; c.hysteresis_mode = out->pr.mode;
  c.min_scale = out->pr.floor; c.max_scale = out->pr.cap; c.fixed = out->pr.fixed; c.late_growth = out->pr.late_growth;
  if (amp__scaler_resolve(fn, &c, &out->pr, &out->init_scale) != AMP_OK) return amp__ckpt_refuse_as_corrupt();
  again = amp__ckpt_scaler_of(out);
  again.skipped = r->skipped;
  if ((bad = amp__ckpt_scaler_differ(r, &again)) != NULL)
    return amp__fail(AMP_ERR_CORRUPT, "%s: the scaler's %s in the file is a value amp_scaler_create does not keep "
                     "(a 0 it replaces by a default, or a flag other than 0 or 1)", fn, bad);
  if (!amp__finite(r->scale) || !(r->scale >= out->pr.floor) || (out->pr.cap > 0.0f && r->scale > out->pr.cap))
    return amp__fail(AMP_ERR_CORRUPT,
                     "%s: the scaler's scale %g in the file is outside [floor %g, cap %g] (cap 0: none)", fn,
                     (double)r->scale, (double)out->pr.floor, (double)out->pr.cap);
  /* the states the rule can leave: a clean step that reaches the interval grows and restarts the
     tracker, so it rests below the interval; CONSECUTIVE's count of overflows in a row backs off
     and restarts at the hysteresis, so it rests below it (the refill counts lie in [0, N]) */
  if (r->tracker < (out->pr.late_growth ? -1 : 0) || r->tracker >= out->pr.interval)
    return amp__fail(AMP_ERR_CORRUPT,
                     "%s: the scaler's growth tracker %d in the file is outside [%d, growth_interval %d - 1]", fn,
                     (int)r->tracker, out->pr.late_growth ? -1 : 0, (int)out->pr.interval);
  if (r->hyst < 0 || r->hyst > out->pr.hysteresis - (out->pr.mode == AMP_HYSTERESIS_CONSECUTIVE))
    return amp__fail(AMP_ERR_CORRUPT,
                     "%s: the scaler's hysteresis count %d in the file is outside [0, %d] (hysteresis %d, mode %d)", fn,
                     (int)r->hyst, (int)(out->pr.hysteresis - (out->pr.mode == AMP_HYSTERESIS_CONSECUTIVE)),
                     (int)out->pr.hysteresis, (int)out->pr.mode);
  if ((r->at_floor | r->last_skipped | r->floor_logged) & ~1)
    return amp__fail(
        AMP_ERR_CORRUPT,
        "%s: the scaler's flags in the file (at_floor %d, last_skipped %d, floor_logged %d) must be 0 or 1", fn,
        (int)r->at_floor, (int)r->last_skipped, (int)r->floor_logged);
  if (r->at_floor && amp__f32_bits(r->scale) != amp__f32_bits(out->pr.floor))
    return amp__fail(AMP_ERR_CORRUPT,
                     "%s: the scaler in the file is at its floor (at_floor 1) with the scale %g, not the floor %g", fn,
                     (double)r->scale, (double)out->pr.floor);
  if (out->pr.fixed) {   /* the rule never runs: the state is a fresh scaler's */
    amp_scale_state st0 = amp__scale_init(out->init_scale, &out->pr);
    if (amp__f32_bits(r->scale) != amp__f32_bits(st0.scale) || r->tracker != st0.tracker || r->hyst != st0.hyst ||
        r->at_floor)
      return amp__fail(AMP_ERR_CORRUPT, "%s: the fixed scaler in the file has the scale %g (tracker %d, hysteresis "
                       "count %d, at_floor %d); a fixed scaler keeps its init_scale %g and a fresh state", fn,
                       (double)r->scale, (int)r->tracker, (int)r->hyst, (int)r->at_floor, (double)out->init_scale);
  }
  if (r->skipped > (uint64_t)AMP__COUNT_MAX)
    return amp__fail(AMP_ERR_CORRUPT,
                     "%s: the scaler's skipped count %llu in the file is out of range (at most %ld here)", fn,
                     (unsigned long long)r->skipped, (long)AMP__COUNT_MAX);
  return AMP_OK;
}

/* The file's optimizer record, checked as amp_optimizer_create checks a config with zero_is_zero
   set (the same rule: it must resolve to itself; a 0 is a 0) and against the live
   optimizer o; *out gets the config to install (o's custom_step and custom_user). */
static amp_status amp__ckpt_optim_check(const amp__ckpt_optim *r, const amp_optimizer *o, amp_optim_config *out) {
  amp_optimizer x;   /* the file's hyperparameters over the live config */
  amp__ckpt_optim again;
  const char *bad;
  const char *fn = "amp_checkpoint_load";
  if (r->kind != (uint32_t)o->cfg.kind)
    return amp__fail(AMP_ERR_CORRUPT, "%s: optimizer kind %u in the file, the live one is %d", fn, (unsigned)r->kind,
                     (int)o->cfg.kind);
  memset(&x, 0, sizeof x);
  x.cfg = o->cfg;   /* resolved: zero_is_zero is set, so a 0 in the file is a 0 (lr 0, beta1 0 ...) */
  amp__ckpt_hparams_load(r, &x);
  if (amp__optim_resolve(fn, &x.cfg, out) != AMP_OK) return amp__ckpt_refuse_as_corrupt();
  x.cfg = *out;
  again = amp__ckpt_optim_of(&x);
  again.step = r->step; again.count = r->count;
  if ((bad = amp__ckpt_optim_differ(r, &again)) != NULL)
    return amp__fail(AMP_ERR_CORRUPT,
                     "%s: the optimizer's %s in the file is a value amp_optimizer_create does not keep "
                     "(a -0, or a flag other than 0 or 1)",
                     fn, bad);
  if (amp__o_moments(out) != amp__o_moments(&o->cfg))
    return amp__fail(AMP_ERR_CORRUPT, "%s: the file's optimizer has %d moment buffers per tensor, the live one %d", fn,
                     amp__o_moments(out), amp__o_moments(&o->cfg));
  if (r->count != (uint64_t)o->count)
    return amp__fail(AMP_ERR_CORRUPT, "%s: %llu tensors in the file, %zu in the optimizer", fn,
                     (unsigned long long)r->count, o->count);
  if (r->step > (uint64_t)AMP__COUNT_MAX)
    return amp__fail(AMP_ERR_CORRUPT, "%s: step count %llu in the file is out of range (at most %ld here)", fn,
                     (unsigned long long)r->step, (long)AMP__COUNT_MAX);
  return AMP_OK;
}

/* One checkpoint being read: the file, where the next record starts and where the CRC starts. */
typedef struct amp__ckpt_reader {
  amp__rfile f;
  uint64_t at, end;
  amp__ckpt_io io;                 /* the record just read, for its *_io function */
  unsigned char rec[AMP__CKPT_SCALER_BYTES + AMP__CKPT_OPTIM_BYTES + AMP__CKPT_SPIKE_BYTES];   /* room for any one */
} amp__ckpt_reader;

/* The one read of a record: the next `bytes` of the file into rd->io, or the refusal naming the
   record ("<what> truncated") when the payload ends first. what is a format: index fills a %zu. */
static amp_status amp__ckpt_next(amp__ckpt_reader *rd, size_t bytes, const char *what, size_t index) {
  char name[64];
  amp_status st;
  if (rd->end - rd->at < bytes) {
    snprintf(name, sizeof name, what, index);
    return amp__fail(AMP_ERR_CORRUPT, "amp_checkpoint_load: %s truncated", name);
  }
  if ((st = amp__rfile_seek(&rd->f, rd->at)) != AMP_OK) return st;
  if ((st = amp__rfile_read(&rd->f, rd->rec, bytes)) != AMP_OK) return st;
  memset(&rd->io, 0, sizeof rd->io);
  rd->io.p = rd->rec; rd->io.left = bytes;
  rd->at += bytes;
  return AMP_OK;
}

/* The header, against the file's size and the objects asked for. */
static amp_status amp__ckpt_head_check(const amp__ckpt_head *h, const char *path, const amp__ckpt_reader *rd,
                                       const amp_optimizer *o, const amp_scaler *s) {
  const char *fn = "amp_checkpoint_load";
  const amp_status bad = AMP_ERR_CORRUPT;
  if (memcmp(&h->magic, AMP__CKPT_MAGIC, 8) != 0)
    return amp__fail(bad, "%s: '%s' is not an amp.h checkpoint (bad magic)", fn, path);
  if (h->endian == 0x04030201u) return amp__fail(bad, "%s: written on a machine of the other byte order", fn);
  if (h->endian != AMP__CKPT_ENDIAN) return amp__fail(bad, "%s: bad endianness mark 0x%08x", fn, (unsigned)h->endian);
  if (h->version < 1u || h->version > AMP__CKPT_VERSION)
    return amp__fail(bad, "%s: format version %u, this amp.h reads 1 to %u", fn, (unsigned)h->version,
                     AMP__CKPT_VERSION);
  if (h->header_bytes != AMP__CKPT_HEAD_BYTES)
    return amp__fail(bad, "%s: header size %u, expected %u", fn, (unsigned)h->header_bytes,
                     (unsigned)AMP__CKPT_HEAD_BYTES);
  if (h->payload_bytes != rd->end - AMP__CKPT_HEAD_BYTES)
    return amp__fail(bad, "%s: truncated or padded: payload %llu bytes, the file holds %llu", fn,
                     (unsigned long long)h->payload_bytes, (unsigned long long)(rd->end - AMP__CKPT_HEAD_BYTES));
  if (h->flags & ~(AMP__CKPT_HAS_SCALER | AMP__CKPT_HAS_OPTIM))
    return amp__fail(bad, "%s: unknown flags 0x%x", fn, (unsigned)h->flags);
  if (s && !(h->flags & AMP__CKPT_HAS_SCALER)) return amp__fail(bad, "%s: the file holds no scaler state", fn);
  if (o && !(h->flags & AMP__CKPT_HAS_OPTIM)) return amp__fail(bad, "%s: the file holds no optimizer state", fn);
  return AMP_OK;
}

/* A tensor record against the live tensor i. */
static amp_status amp__ckpt_tensor_check(const amp__ckpt_tensor *t, const amp__tensor *live, size_t i, int nm) {
  const char *fn = "amp_checkpoint_load";
  if (t->n != (uint64_t)live->n)
    return amp__fail(AMP_ERR_CORRUPT, "%s: tensor %zu has %llu elements in the file, %zu live", fn, i,
                     (unsigned long long)t->n, live->n);
  if (t->wtype != (uint32_t)live->wtype || t->gtype != (uint32_t)live->gtype)
    return amp__fail(AMP_ERR_CORRUPT, "%s: tensor %zu dtypes (weights %u, grads %u) differ from the live ones (%s, %s)",
                     fn, i, (unsigned)t->wtype, (unsigned)t->gtype, amp__dtype_name(live->wtype),
                     amp__dtype_name(live->gtype));
  if (t->moments > 0x7fffffffu || !amp__moments_kept((int)t->moments) || (t->moments != AMP_MOMENTS_F32 && nm == 0))
    return amp__fail(AMP_ERR_CORRUPT, "%s: tensor %zu has moments %u in the file, not a moment type %s", fn, i,
                     (unsigned)t->moments, nm ? "this amp.h keeps" : "of a kind without moments (0)");
  return AMP_OK;
}

/* Every record after the header, each read by amp__ckpt_next and checked by its own check. */
static amp_status amp__ckpt_records(amp__ckpt_reader *rd, uint32_t version, uint32_t flags, const amp_optimizer *o,
                                    const amp_scaler *s, amp__ckpt_image *im, uint64_t *first_tensor) {
  const char *fn = "amp_checkpoint_load";
  amp_status st;
  size_t i;
  if (flags & AMP__CKPT_HAS_SCALER) {
    amp__ckpt_scaler r;
    if ((st = amp__ckpt_next(rd, AMP__CKPT_SCALER_BYTES, "scaler section", 0)) != AMP_OK) return st;
    amp__ckpt_scaler_io(&rd->io, &r);
    if ((st = amp__ckpt_scaler_check(&r, &im->sc)) != AMP_OK) return st;
    im->has_scaler = s != NULL;
  }
  if (!(flags & AMP__CKPT_HAS_OPTIM) || !o) {
    if (!(flags & AMP__CKPT_HAS_OPTIM) && rd->at != rd->end)
      return amp__fail(AMP_ERR_CORRUPT, "%s: %llu bytes left over after the scaler section", fn,
                       (unsigned long long)(rd->end - rd->at));
    return AMP_OK;
  }
  {
    amp__ckpt_optim r;
    int nm = amp__o_moments(&o->cfg);
    im->version = version;
    if ((st = amp__ckpt_next(rd, AMP__CKPT_OPTIM_BYTES, "optimizer section", 0)) != AMP_OK) return st;
    amp__ckpt_optim_io(&rd->io, &r);
    if ((st = amp__ckpt_optim_check(&r, o, &im->cfg)) != AMP_OK) return st;
    im->step = (long)r.step;
    if (version >= 2u) {   /* the spike state; a version-1 file has none (zero) */
      amp__ckpt_spike sp;
      if ((st = amp__ckpt_next(rd, AMP__CKPT_SPIKE_BYTES, "spike section", 0)) != AMP_OK) return st;
      amp__ckpt_spike_io(&rd->io, &sp);
      if ((st = amp__ckpt_spike_check(&sp, im)) != AMP_OK) return st;
    }
    *first_tensor = rd->at;
    for (i = 0; i < o->count; i++) {   /* each tensor record, its state skipped */
      amp__ckpt_tensor t;
      uint64_t per;   /* its state's bytes: the master and the moments in the record's type */
      /* the fields an older record lacks stay 0 (this also keeps gcc 13's -Wmaybe-uninitialized quiet) */
      memset(&t, 0, sizeof t);
      if ((st = amp__ckpt_next(rd, amp__ckpt_tensor_bytes(version), "tensor %zu", i)) != AMP_OK) return st;
      amp__ckpt_tensor_io_v(&rd->io, &t, version);
      if ((st = amp__ckpt_tensor_check(&t, &o->t[i], i, nm)) != AMP_OK) return st;
      per = 4u * t.n + (uint64_t)nm * amp__moment_bytes((int)t.moments, (size_t)t.n);   /* t.n is the live n */
      if (rd->end - rd->at < per) return amp__fail(AMP_ERR_CORRUPT, "%s: tensor %zu data truncated", fn, i);
      rd->at += per;
    }
    if (rd->at != rd->end)
      return amp__fail(AMP_ERR_CORRUPT, "%s: %llu bytes left over after the optimizer section", fn,
                       (unsigned long long)(rd->end - rd->at));
  }
  return AMP_OK;
}

/* The CRC over every byte before it. With an optimizer to restore, the file is now known to be
   exactly the size that optimizer needs, and is held whole in im->buf; without, it is streamed. */
static amp_status amp__ckpt_crc_check(amp__ckpt_reader *rd, const char *path, const amp_optimizer *o, uint64_t size,
                                      amp__ckpt_image *im) {
  const char *fn = "amp_checkpoint_load";
  amp__crc crc;
  uint32_t crc_file;
  uint64_t at;
  amp_status st;
  if ((st = amp__rfile_seek(&rd->f, 0)) != AMP_OK) return st;
  amp__crc_init(&crc);
  if (o && size > (uint64_t)(size_t)-1)
    return amp__fail(AMP_ERR_NOMEM, "%s: '%s' is larger than this machine's memory", fn, path);
  im->buf = (unsigned char *)AMP_MALLOC(o ? (size_t)size : AMP__CKPT_BUF);
  if (!im->buf) return amp__fail(AMP_ERR_NOMEM, "%s: out of memory for '%s'", fn, path);
  for (at = 0; at < rd->end; ) {
    size_t chunk = o ? (size_t)rd->end : (rd->end - at < AMP__CKPT_BUF ? (size_t)(rd->end - at) : AMP__CKPT_BUF);
    unsigned char *dst = im->buf + (o ? at : 0);
    if ((st = amp__rfile_read(&rd->f, dst, chunk)) != AMP_OK) return st;
    amp__crc_add(&crc, dst, chunk);
    at += chunk;
  }
  if ((st = amp__rfile_read(&rd->f, &crc_file, 4)) != AMP_OK) return st;
  if (crc_file != amp__crc_value(&crc))
    return amp__fail(AMP_ERR_CORRUPT, "%s: CRC-32 mismatch (file 0x%08x, computed 0x%08x)", fn, (unsigned)crc_file,
                     (unsigned)amp__crc_value(&crc));
  return AMP_OK;
}

/* Reads path and checks everything against the live objects before any payload is held: the
   header against the file's size, then each record (read one by one; the tensor floats are
   skipped), so the file must be exactly the size the live optimizer needs before it is read
   whole; then the CRC over every byte. */
static amp_status amp__ckpt_read(const char *path, const amp_optimizer *o, const amp_scaler *s, amp__ckpt_image *im) {
  const char *fn = "amp_checkpoint_load";
  amp__ckpt_reader rd;
  amp__ckpt_head h;
  uint64_t size = 0, first_tensor = 0;
  amp_status st;
  memset(im, 0, sizeof *im);
  memset(&rd, 0, sizeof rd);
  if ((st = amp__rfile_open(&rd.f, fn, path, &size)) != AMP_OK) return st;
  if (size < AMP__CKPT_HEAD_BYTES + 4) {
    st = amp__fail(AMP_ERR_CORRUPT, "%s: '%s' holds %llu bytes, too few for a checkpoint (header and CRC: %u)", fn,
                   path, (unsigned long long)size, (unsigned)(AMP__CKPT_HEAD_BYTES + 4));
  } else {
    rd.end = size - 4;   /* where the CRC starts */
    if ((st = amp__ckpt_next(&rd, AMP__CKPT_HEAD_BYTES, "header", 0)) == AMP_OK) {
      amp__ckpt_head_io(&rd.io, &h);
      if ((st = amp__ckpt_head_check(&h, path, &rd, o, s)) == AMP_OK &&
          (st = amp__ckpt_records(&rd, h.version, h.flags, o, s, im, &first_tensor)) == AMP_OK)
        st = amp__ckpt_crc_check(&rd, path, o, size, im);
    }
  }
  amp__rfile_close(&rd.f);
  if (st != AMP_OK) {
    AMP_FREE(im->buf); im->buf = NULL;
    im->has_scaler = im->has_optim = 0;
    return st;
  }
  if (o) { im->tensors = im->buf + first_tensor; im->has_optim = 1; }
  return AMP_OK;
}

/* Before a save: the mirrors refreshed from the device (scale state, skip counts, step count),
   the optimizer's table taken by its device, and *floats a host buffer for one tensor's floats,
   which the device's optim_tensor_io fills. */
static amp_status amp__ckpt_pull(const amp_optimizer *o, const amp_scaler *s, float **floats) {
  amp_status st;
  size_t i, most = 0;
  *floats = NULL;
  if (s && (st = amp__s_pull("amp_checkpoint_save", s, 0)) != AMP_OK) return st;
  if (o && o->count > 0) {
    if ((st = amp__o_ready("amp_checkpoint_save", o)) != AMP_OK) return st;
    if ((st = amp__o_pull("amp_checkpoint_save", o, 0)) != AMP_OK) return st;
    for (i = 0; i < o->count; i++) if (o->t[i].n > most) most = o->t[i].n;
    *floats = (float *)AMP_MALLOC(most * sizeof(float) + 4);   /* a moment in another type: at most 4 + n bytes */
    if (!*floats) return amp__fail(AMP_ERR_NOMEM, "amp_checkpoint_save: out of memory for %zu floats", most);
  }
  return AMP_OK;
}

/* save: nothing at path changes unless the whole new file is written and flushed; path empty or
   ending in '/' is AMP_ERR_ARG before anything is created. */
AMPDEF amp_status amp_checkpoint_save(const char *path, const amp_optimizer *o, const amp_scaler *s) {
  const char *fn = "amp_checkpoint_save";
  amp__wfile file;
  amp__ckpt_io io;
  amp__ckpt_head h;
  uint32_t crc;
  size_t i, plen;
  int k, nm = 0;
  float *floats = NULL;          /* one tensor's floats, read from its device */
  amp_status dev_st = AMP_OK;
  char dev_msg[AMP__MSG] = "";
  if (!path) return amp__fail(AMP_ERR_ARG, "%s: path is NULL", fn);
  if (!*path) return amp__fail(AMP_ERR_ARG, "%s: path is empty", fn);
  plen = strlen(path);
  if (path[plen - 1] == '/')
    return amp__fail(AMP_ERR_ARG, "%s: path '%s' ends in '/' (it names a directory, not a file)", fn, path);
  if (!o && !s) return amp__fail(AMP_ERR_ARG, "%s: both the optimizer and the scaler are NULL", fn);
  if ((dev_st = amp__ckpt_pull(o, s, &floats)) != AMP_OK) { AMP_FREE(floats); return dev_st; }
  memset(&io, 0, sizeof io);
  io.writing = 1; io.file = &file;
  io.buf = (unsigned char *)AMP_MALLOC(AMP__CKPT_BUF);
  io.st = io.buf ? amp__wfile_open(&file, fn, path) : amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
  if (io.st != AMP_OK) {
    AMP_FREE(io.buf);
    AMP_FREE(floats);
    return io.st;
  }
  amp__crc_init(&io.crc);
  memcpy(&h.magic, AMP__CKPT_MAGIC, 8);
  h.version = 2u;   /* the oldest version that holds the state: 3 once a tensor keeps moments other than f32 */
  for (i = 0; o && i < o->count; i++)
    if (o->t[i].moments != AMP_MOMENTS_F32) h.version = AMP__CKPT_VERSION;
  h.endian = AMP__CKPT_ENDIAN; h.header_bytes = AMP__CKPT_HEAD_BYTES;
  h.flags = (s ? AMP__CKPT_HAS_SCALER : 0u) | (o ? AMP__CKPT_HAS_OPTIM : 0u);
  h.payload_bytes = s ? AMP__CKPT_SCALER_BYTES : 0;
  if (o) {
    nm = amp__o_moments(&o->cfg);
    h.payload_bytes += AMP__CKPT_OPTIM_BYTES + AMP__CKPT_SPIKE_BYTES;
    for (i = 0; i < o->count; i++)
      h.payload_bytes += amp__ckpt_tensor_bytes(h.version) +
                         4u * (uint64_t)o->t[i].n + (uint64_t)nm * amp__moment_bytes(o->t[i].moments, o->t[i].n);
  }
  amp__ckpt_head_io(&io, &h);
  if (s) { amp__ckpt_scaler r = amp__ckpt_scaler_of(s); amp__ckpt_scaler_io(&io, &r); }
  if (o) {
    amp__ckpt_optim r = amp__ckpt_optim_of(o);
    amp__ckpt_spike sp = amp__ckpt_spike_of(o);
    amp__ckpt_optim_io(&io, &r);
    amp__ckpt_spike_io(&io, &sp);
    for (i = 0; i < o->count && io.st == AMP_OK && dev_st == AMP_OK; i++) {
      amp__ckpt_tensor t = amp__ckpt_tensor_of(&o->t[i]);
      amp__ckpt_tensor_io_v(&io, &t, h.version);
      for (k = 0; k <= nm; k++) {   /* the master, then the moments, read from the device */
        dev_st =
            amp__be(o->dev)->optim_tensor_io((amp_optimizer *)(uintptr_t)o, i, k, floats, 0, dev_msg, sizeof dev_msg);
        if (dev_st != AMP_OK) break;
        amp__ckpt_bytes(&io, floats, k ? amp__moment_bytes(o->t[i].moments, o->t[i].n) : o->t[i].n * sizeof(float));
      }
    }
  }
  crc = amp__crc_value(&io.crc);
  amp__ckpt_bytes(&io, &crc, 4);
  amp__ckpt_flush(&io);
  AMP_FREE(io.buf);
  AMP_FREE(floats);
  if (dev_st != AMP_OK) { amp__wfile_abort(&file); return amp__op_fail(fn, dev_st, dev_msg); }
  if (io.st != AMP_OK) { amp__wfile_abort(&file); return io.st; }
  return amp__wfile_commit(&file);
}

/* load, after the whole file was checked: the optimizer's hyperparameters, step count, masters and
   moments pushed to its device and every model copy written from its restored master there; the
   scaler's whole state. Before any host field is written, so a device error leaves those as
   they were (the device state may then be partly written: AMP_ERR_DEVICE). */
/* Tensor i's record in a checked image, read from p into *t; returns where its state starts: the f32
   master, then the moments (n elements of the record's moments type each). */
static const unsigned char *amp__ckpt_tensor_state(const amp__ckpt_image *im, const unsigned char *p,
                                                   amp__ckpt_tensor *t) {
  amp__ckpt_io io;
  memset(&io, 0, sizeof io);
  memset(t, 0, sizeof *t);
  io.p = p; io.left = amp__ckpt_tensor_bytes(im->version);
  amp__ckpt_tensor_io_v(&io, t, im->version);
  return p + amp__ckpt_tensor_bytes(im->version);
}
/* Element e of moment j (1, 2) of n elements kept as type in a file's bytes at q (any alignment), as
   f32: bf16 widened exactly, an 8-bit code times its block's absmax, an fp8 code times the array's
   scale_inv (as a step decodes them). The one rule for a moments type that differs from the live
   tensor's: decoded so, then encoded in the live type as a step encodes (amp__moment_encode: bf16
   to nearest even, 8BIT blockwise, FP8 with the whole array's scale), so a bf16, 8-bit or fp8 file
   into fp32 moments is exact and an fp32 file into the others is rounded. */
static AMP__EXACT_FP float amp__moment_at(const amp_optimizer *o, int type, int j, const unsigned char *q, size_t n,
                                          size_t e) {
  float x;
  if (type == AMP_MOMENTS_BF16) { amp_bf16 b; memcpy(&b, q + 2 * e, 2); return amp_bf16_to_f32(b); }
  if (type == AMP_MOMENTS_8BIT) {
    memcpy(&x, q + 4 * (e / AMP__Q8_BLOCK), 4);
    return amp__fmul(o->qmap[j - 1].code[q[4 * ((n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK) + e]], x);
  }
  if (type == AMP_MOMENTS_FP8) return amp__f8m_at(q, e);
  memcpy(&x, q + 4 * e, 4);
  return x;
}
/* n f32 values d as moment j kept as type, into a (4-byte aligned, amp__moment_bytes of them). */
static void amp__moment_encode(const amp_optimizer *o, int type, int j, const float *d, size_t n, unsigned char *a) {
  size_t i0;
  int l = amp__opt_level();   /* the step's vector encode: the plain loop's bits */
  if (type == AMP_MOMENTS_F32) { memcpy(a, d, n * sizeof(float)); return; }
  if (type == AMP_MOMENTS_FP8) { amp__f8m_encode(a, d, n); return; }
  for (i0 = 0; i0 < n; i0 += AMP__CHUNK)
    amp__q_store(l, type, a, &o->qmap[j - 1], n, i0, n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK, d + i0, 0, 0u, 1.0f);
}
static amp_status amp__ckpt_push(amp_optimizer *o, amp_scaler *s, const amp__ckpt_image *im) {
  char m[AMP__MSG] = "";
  amp_status st = AMP_OK;
  size_t i, most = 0;
  float *buf = NULL;   /* one array of the file as f32, then (raw) as the live tensor keeps it: aligned (a
                          bf16 or 8-bit array may leave the next one unaligned in the file) */
  unsigned char *raw;
  if (o && im->has_optim && o->count > 0) {
    const amp__backend *be = amp__be(o->dev);
    const unsigned char *p = im->tensors;
    int nm = amp__o_moments(&o->cfg), k;
    for (i = 0; i < o->count; i++) if (o->t[i].n > most) most = o->t[i].n;
    if ((buf = (float *)AMP_MALLOC(2 * most * sizeof(float) + 4 * (most / AMP__Q8_BLOCK + 1))) == NULL)
      return amp__fail(AMP_ERR_NOMEM, "amp_checkpoint_load: out of memory for %zu floats", 2 * most);
    raw = (unsigned char *)(buf + most);
    if ((st = amp__o_ready("amp_checkpoint_load", o)) != AMP_OK) { AMP_FREE(buf); return st; }
    if ((st = be->optim_set_config(o, &im->cfg, m, sizeof m)) != AMP_OK) goto fail;
    if ((st = be->optim_set_step(o, im->step, m, sizeof m)) != AMP_OK) goto fail;
    if ((st = be->optim_set_spike(o, im->spike_skips, &im->spike_win, m, sizeof m)) != AMP_OK) goto fail;
    for (i = 0; i < o->count; i++) {
      amp__ckpt_tensor t;
      size_t n = o->t[i].n;
      p = amp__ckpt_tensor_state(im, p, &t);
      for (k = 0; k <= nm; k++) {
        int type = k ? (int)t.moments : AMP_MOMENTS_F32, live = k ? o->t[i].moments : AMP_MOMENTS_F32;
        size_t j;
        if (type == live) memcpy(raw, p, amp__moment_bytes(type, n));   /* as kept, byte for byte */
        else {
          for (j = 0; j < n; j++) buf[j] = amp__moment_at(o, type, k, p, n, j);
          amp__moment_encode(o, live, k, buf, n, raw);
        }
        p += amp__moment_bytes(type, n);
        if ((st = be->optim_tensor_io(o, i, k, (float *)(void *)raw, 1, m, sizeof m)) != AMP_OK) goto fail;
      }
      if ((st = be->optim_write_model(o, i, im->step, m, sizeof m)) != AMP_OK) goto fail;
    }
    AMP_FREE(buf); buf = NULL;
  }
  if (s && im->has_scaler && (st = amp__be(s->dev)->scaler_push(s, &im->sc, m, sizeof m)) != AMP_OK) goto fail;
  return AMP_OK;
fail:
  AMP_FREE(buf);
  return amp__op_fail("amp_checkpoint_load", st, m);
}

/* 1 where one of the masters from .. to - 1 (n f32 as the file holds them at w) is inf or NaN. */
static int amp__ckpt_wild(const unsigned char *w, size_t from, size_t to) {
  for (; from < to; from++) {
    float x;
    memcpy(&x, w + 4 * from, 4);
    if (!amp__finite(x)) return 1;
  }
  return 0;
}
/* Moments no update can produce. A NaN moment: a NaN or inf grad skips its step, so only a master
   that is itself inf or NaN (weights that overflowed, finite grads throughout) makes one, through
   the L2 decay the step adds to the grad (SGD, Adam): NaN only where the master of the element is
   inf or NaN (AMP_MOMENTS_8BIT: one of its block's; _FP8: one of its tensor's, whose scale all its
   codes share). A negative second moment (Adam/AdamW's exp_avg_sq is a sum of squares; NaN
   aside). An 8-bit block's absmax outside [1e-38, FLT_MAX] (amp__q8_absmax's range: 0, negative,
   inf), or NaN in a block whose masters are all finite. The masters may hold anything an update
   can leave (inf, NaN after an overflow of the weights themselves). */
static amp_status amp__ckpt_moments_check(const amp_optimizer *o, const amp__ckpt_image *im) {
  const unsigned char *p = im->tensors;
  int nm = amp__o_moments(&o->cfg), k;
  size_t i, j;
  for (i = 0; i < o->count; i++) {
    amp__ckpt_tensor t;
    size_t n = o->t[i].n, c0 = 1, c1 = 0;   /* wild: whether a master in [c0, c1) is inf or NaN */
    const unsigned char *w = amp__ckpt_tensor_state(im, p, &t);   /* the masters */
    int wild = 0;
    p = w + n * sizeof(float);
    for (k = 1; k <= nm; k++, p += amp__moment_bytes((int)t.moments, n)) {
      int sq = k == 2 && (o->cfg.kind == AMP_ADAM || o->cfg.kind == AMP_ADAMW);
      const char *what = sq ? "exp_avg_sq" : k == 1 ? "first moment" : "moment";
      for (j = 0; t.moments == AMP_MOMENTS_8BIT && j < (n + AMP__Q8_BLOCK - 1) / AMP__Q8_BLOCK; j++) {
        uint32_t b;   /* each block's absmax as amp__q8_absmax leaves it: 1e-38 .. FLT_MAX, or NaN */
        size_t e0, e1;
        amp__moments_span(AMP_MOMENTS_8BIT, n, j * AMP__Q8_BLOCK, &e0, &e1);
        memcpy(&b, p + 4 * j, 4);
        if (!amp__q8_absmax_kept(b) && !(b > 0x7f800000u && b <= 0x7fffffffu && amp__ckpt_wild(w, e0, e1)))
          return amp__fail(AMP_ERR_CORRUPT,
                           "amp_checkpoint_load: tensor %zu's %s holds the absmax %g in block %zu, a value no "
                           "update leaves (every block's absmax lies in [1e-38, FLT_MAX], or is NaN where a "
                           "master of the block is inf or NaN)",
                           i, what, (double)amp__bits_f32(b), j);
      }
      for (j = 0; j < o->t[i].n; j++) {
        float x = amp__moment_at(o, (int)t.moments, k, p, n, j);   /* the value as loaded (decoded) */
        uint32_t b = amp__f32_bits(x);
        if ((b & 0x7fffffffu) > 0x7f800000u) {   /* NaN: where a master it shares a scale with is inf or NaN */
          size_t from, to;
          amp__moments_span((int)t.moments, n, j, &from, &to);
          if (from != c0 || to != c1) { c0 = from; c1 = to; wild = amp__ckpt_wild(w, from, to); }
          if (!wild)
            return amp__fail(AMP_ERR_CORRUPT,
                             "amp_checkpoint_load: tensor %zu's %s holds %g at element %zu, a value no update "
                             "leaves (a NaN grad skips its step; a NaN moment comes only from a master that is "
                             "inf or NaN, and elements %zu .. %zu's are finite)",
                             i, what, (double)x, j, from, to - 1);
        } else if (sq && (b >> 31) && (b << 1))
          return amp__fail(AMP_ERR_CORRUPT,
                           "amp_checkpoint_load: tensor %zu's %s holds %g at element %zu, a value no update "
                           "leaves (a sum of squares is >= 0)",
                           i, what, (double)x, j);
      }
    }
  }
  return AMP_OK;
}

AMPDEF amp_status amp_checkpoint_load(const char *path, amp_optimizer *o, amp_scaler *s) {
  amp__ckpt_image im;
  amp_status st;
  if (!path) return amp__fail(AMP_ERR_ARG, "amp_checkpoint_load: path is NULL");
  if (!*path) return amp__fail(AMP_ERR_ARG, "amp_checkpoint_load: path is empty");
  if (!o && !s) return amp__fail(AMP_ERR_ARG, "amp_checkpoint_load: both the optimizer and the scaler are NULL");
  if ((st = amp__ckpt_read(path, o, s, &im)) != AMP_OK) return st;
  if (o && im.has_optim && (st = amp__ckpt_moments_check(o, &im)) != AMP_OK) { AMP_FREE(im.buf); return st; }
  /* The device state first: a device error then leaves every host field as it was. */
  if ((st = amp__ckpt_push(o, s, &im)) != AMP_OK) { AMP_FREE(im.buf); return st; }
  /* Everything checked and pushed: the host fields. */
  if (s && im.has_scaler) {
    s->pr = im.sc.pr; s->st = im.sc.st; s->init_scale = im.sc.init_scale;
    s->last_skipped = im.sc.last_skipped; s->floor_logged = im.sc.floor_logged; s->skipped = im.sc.skipped;
    s->found_inf = 0; s->recorded = 0; s->iter++;
  }
  if (o && im.has_optim) {
    o->cfg = im.cfg; o->step = im.step;   /* masters, moments and model copies: pushed above */
    o->spike_skips = im.spike_skips; o->spike_win = im.spike_win; o->spike = 0;
    o->stage = AMP__READY; o->sc_id = 0; o->found_inf = 0; o->stepped = 0;
  }
  AMP_FREE(im.buf);
  return AMP_OK;
}

/* ------------------------------------------------------------------------------------------
   Implementation: fp8 scaling
   ------------------------------------------------------------------------------------------ */

/* The fp8 scaler. hist, scale and scale_inv are the host arrays: the CPU's state itself, and a
   device's mirror, refreshed by fp8_io for the getters and checkpoints. d_hist, d_scale and
   d_scale_inv are where the state lives (the host arrays on the CPU). */
struct amp_fp8_scaler {
  amp_device *dev;
  amp_fp8_config cfg;      /* resolved: the defaults filled in */
  size_t n;                /* tensors */
  int len;                 /* amax history slots per tensor (1 but for DELAYED) */
  amp_dtype *format;       /* each tensor's: AMP_E4M3 or AMP_E5M2 */
  float *hist;             /* n x len, tensor i's slots at i * len; slot 0 is this step's amax */
  float *scale, *scale_inv;
  float *d_hist, *d_scale, *d_scale_inv;
  double *red, *d_red;     /* n amaxes as bits, for the data-parallel hook (host; where the device has it) */
  amp_scaler *group;       /* amp_fp8_scaler_reduce_over: its hook reduces the amaxes (NULL: none) */
  /* cfg.stats (else NULL): per tensor this step's counters (n x 4: n, saturated, flushed, nan; the
     CPU's state, unused on a device), the last step's (n x 4) and the last update's amax read and
     scale replaced (n x 2): the CPU's state, a device's mirror refreshed by fp8_stats */
  uint64_t *counts, *last;
  float *used;
  uint64_t *d_counts;      /* where this step's counters live (counts on the CPU) */
  void *cu;                /* the device's own block (CUDA: amp__cu_fp8_create); NULL on the CPU */
};

AMPDEF const char *amp_fp8_recipe_name(amp_fp8_recipe r) {
  switch (r) { AMP__FP8_RECIPES(AMP__LABEL_CASE) default: return NULL; }
}

/* The config with its defaults filled in, every field checked (fn names the public caller). */
static amp_status amp__fp8_resolve(const char *fn, const amp_fp8_config *in, amp_fp8_config *out) {
  amp_fp8_config c;
  const char *name;
  int delayed, msamp;
  if (in) c = *in; else memset(&c, 0, sizeof c);
  name = amp_fp8_recipe_name(c.recipe);
  if (!name) return amp__fail(AMP_ERR_ARG, "%s: recipe %d is not an amp_fp8_recipe", fn, (int)c.recipe);
  delayed = c.recipe == AMP_FP8_DELAYED; msamp = c.recipe == AMP_FP8_MSAMP;
  if (delayed && c.history_len == 0) c.history_len = 1024;
  if (delayed && (c.history_len < 1 || c.history_len > AMP_FP8_HISTORY_MAX))
    return amp__fail(AMP_ERR_ARG, "%s: history_len %d must be in 1..%d (0: 1024)", fn, c.history_len,
                     AMP_FP8_HISTORY_MAX);
  if (!delayed && c.history_len != 0)
    return amp__fail(AMP_ERR_ARG, "%s: history_len %d given to the %s recipe, which keeps no history (only "
                     "delayed does)", fn, c.history_len, name);
  if (!delayed && c.most_recent != 0)
    return amp__fail(AMP_ERR_ARG, "%s: most_recent %d given to the %s recipe (only delayed reads a history)", fn,
                     c.most_recent, name);
  if (!amp__finite(c.margin) || c.margin > 64.0f || c.margin < -64.0f || amp__subnormal(c.margin))
    return amp__fail(AMP_ERR_ARG, "%s: margin %g must be a number in -64..64 (not subnormal)", fn, (double)c.margin);
  if (!delayed && !msamp && !amp__is_zero(c.margin))
    return amp__fail(AMP_ERR_ARG, "%s: margin %g given to the %s recipe (only delayed and msamp take one)", fn,
                     (double)c.margin, name);
  if (msamp && (float)(int)c.margin != c.margin)
    return amp__fail(AMP_ERR_ARG, "%s: margin %g must be an integer for the msamp recipe (a power-of-two shift)",
                     fn, (double)c.margin);
  if ((delayed || msamp) && c.pow2 != 0)
    return amp__fail(AMP_ERR_ARG, "%s: pow2 %d given to the %s recipe (only current and torchao take it; msamp's "
                     "scales are powers of two already)", fn, c.pow2, name);
  if (c.recipe != AMP_FP8_CURRENT && !amp__is_zero(c.amax_epsilon))
    return amp__fail(AMP_ERR_ARG, "%s: amax_epsilon %g given to the %s recipe (only current takes it)", fn,
                     (double)c.amax_epsilon, name);
  if (amp__is_zero(c.amax_epsilon)) c.amax_epsilon = 0.0f;   /* -0 is 0 (the rule compares the bits) */
  if (!amp__finite(c.amax_epsilon) || (amp__f32_bits(c.amax_epsilon) >> 31) || amp__subnormal(c.amax_epsilon))
    return amp__fail(AMP_ERR_ARG, "%s: amax_epsilon %g must be finite, >= 0 and not subnormal", fn,
                     (double)c.amax_epsilon);
  c.pow2 = c.pow2 != 0; c.most_recent = c.most_recent != 0; c.stats = c.stats != 0;
  *out = c;
  return AMP_OK;
}

static void amp__fp8_free(amp_fp8_scaler *f) {
  AMP_FREE(f->format); AMP_FREE(f->hist); AMP_FREE(f->scale); AMP_FREE(f->scale_inv); AMP_FREE(f->red);
  AMP_FREE(f->counts); AMP_FREE(f->last); AMP_FREE(f->used);
  AMP_FREE(f);
}

AMPDEF amp_status amp_fp8_scaler_create(amp_fp8_scaler **out, amp_device *d, const amp_fp8_config *c, size_t n,
                                        const amp_dtype *formats) {
  const char *fn = "amp_fp8_scaler_create";
  char m[AMP__MSG] = "", what[40];
  amp_fp8_config cfg;
  amp_fp8_scaler *f;
  amp_status st;
  size_t i;
  if (!out) return amp__fail(AMP_ERR_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!d) return amp__fail(AMP_ERR_ARG, "%s: d is NULL (amp_cpu() for the CPU)", fn);
  if (n == 0) return amp__fail(AMP_ERR_ARG, "%s: n is 0 (the number of tensors the scaler keeps)", fn);
  if ((st = amp__fp8_resolve(fn, c, &cfg)) != AMP_OK) return st;
  for (i = 0; formats && i < n; i++) {
    snprintf(what, sizeof what, "formats[%zu]", i);
    if ((st = amp__dtype_fp8_check(fn, what, formats[i])) != AMP_OK) return st;
  }
  if (n > (size_t)-1 / sizeof(float) / (size_t)(cfg.history_len ? cfg.history_len : 1))
    return amp__fail(AMP_ERR_ARG, "%s: n %zu with history_len %d is too many slots", fn, n, cfg.history_len);
  f = (amp_fp8_scaler *)AMP_MALLOC(sizeof *f);
  if (!f) return amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
  memset(f, 0, sizeof *f);
  f->dev = d; f->cfg = cfg; f->n = n; f->len = cfg.history_len ? cfg.history_len : 1;
  f->format = (amp_dtype *)AMP_MALLOC(n * sizeof *f->format);
  f->hist = (float *)AMP_MALLOC(n * (size_t)f->len * sizeof *f->hist);
  f->scale = (float *)AMP_MALLOC(n * sizeof *f->scale);
  f->scale_inv = (float *)AMP_MALLOC(n * sizeof *f->scale_inv);
  f->red = (double *)AMP_MALLOC(n * sizeof *f->red);
  if (cfg.stats) {
    f->counts = (uint64_t *)AMP_MALLOC(4 * n * sizeof *f->counts);
    f->last = (uint64_t *)AMP_MALLOC(4 * n * sizeof *f->last);
    f->used = (float *)AMP_MALLOC(2 * n * sizeof *f->used);
  }
  if (!f->format || !f->hist || !f->scale || !f->scale_inv || !f->red ||
      (cfg.stats && (!f->counts || !f->last || !f->used))) {
    amp__fp8_free(f);
    return amp__fail(AMP_ERR_NOMEM, "%s: out of memory (%zu tensors, %d slots each)", fn, n, cfg.history_len);
  }
  memset(f->hist, 0, n * (size_t)f->len * sizeof *f->hist);
  if (cfg.stats) {
    memset(f->counts, 0, 4 * n * sizeof *f->counts); memset(f->last, 0, 4 * n * sizeof *f->last);
    memset(f->used, 0, 2 * n * sizeof *f->used);
  }
  for (i = 0; i < n; i++) {
    f->format[i] = formats ? formats[i] : AMP_E4M3;
    f->scale[i] = 1.0f; f->scale_inv[i] = 1.0f;
  }
  if ((st = amp__be(d)->fp8_create(f, m, sizeof m)) != AMP_OK) {
    amp__fp8_free(f);
    return amp__op_fail(fn, st, m);
  }
  *out = f;
  return AMP_OK;
}

AMPDEF void amp_fp8_scaler_destroy(amp_fp8_scaler *f) {
  if (!f) return;
  amp__be(f->dev)->fp8_destroy(f);
  amp__fp8_free(f);
}

/* f and i checked for the public caller fn (which returns what it returns on failure). */
static int amp__fp8_index_ok(const char *fn, const amp_fp8_scaler *f, size_t i) {
  if (!f) { amp__fail(AMP_ERR_ARG, "%s: f is NULL", fn); return 0; }
  if (i >= f->n) { amp__fail(AMP_ERR_ARG, "%s: tensor %zu is out of range (the scaler keeps %zu)", fn, i, f->n); return 0; }
  return 1;
}

AMPDEF amp_status amp_fp8_scaler_record(amp_fp8_scaler *f, size_t i, float amax) {
  const char *fn = "amp_fp8_scaler_record";
  char m[AMP__MSG] = "";
  uint32_t a = amp__f32_bits(amax);
  if (!amp__fp8_index_ok(fn, f, i)) return AMP_ERR_ARG;
  if (a > 0x80000000u && a <= 0xff800000u)   /* negative (-0 is 0; a NaN of either sign is kept) */
    return amp__fail(AMP_ERR_ARG, "%s: amax %g of tensor %zu is negative (an amax is a largest magnitude)", fn,
                     (double)amax, i);
  return amp__op_fail(fn, amp__be(f->dev)->fp8_record(f, i, amax, m, sizeof m), m);
}

AMPDEF amp_status amp_fp8_scaler_update(amp_fp8_scaler *f) {
  const char *fn = "amp_fp8_scaler_update";
  char m[AMP__MSG] = "";
  const amp__backend *be;
  amp_status st;
  if (!f) return amp__fail(AMP_ERR_ARG, "%s: f is NULL", fn);
  if ((st = amp__dev_take_error(fn, f->dev)) != AMP_OK) return st;
  be = amp__be(f->dev);
  if (f->group && f->group->allreduce) {   /* the amaxes' MAX over the ranks, into slot 0 */
    int raw;
    if ((st = be->fp8_amax_io(f, 0, m, sizeof m)) != AMP_OK) return amp__op_fail(fn, st, m);
    amp__err_buf[0] = '\0';
    raw = (int)f->group->allreduce(f->group->allreduce_user, f->d_red, -(int)f->n, f->dev->stream);
    if (raw != (int)AMP_OK) return amp__hook_fail(fn, raw);
    if ((st = be->fp8_amax_io(f, 1, m, sizeof m)) != AMP_OK) return amp__op_fail(fn, st, m);
  }
  return amp__op_fail(fn, be->fp8_update(f, m, sizeof m), m);
}

AMPDEF amp_status amp_fp8_scaler_reduce_over(amp_fp8_scaler *f, amp_scaler *s) {
  const char *fn = "amp_fp8_scaler_reduce_over";
  if (!f) return amp__fail(AMP_ERR_ARG, "%s: f is NULL", fn);
  if (s && s->dev != f->dev)
    return amp__fail(AMP_ERR_ARG, "%s: the scaler is on %s, the fp8 scaler on %s (one device, one group)", fn,
                     amp__be(s->dev)->name, amp__be(f->dev)->name);
  if (f->n > (size_t)INT_MAX) return amp__fail(AMP_ERR_ARG, "%s: %zu tensors are more than a hook's n can say", fn, f->n);
  f->group = s;
  return AMP_OK;
}

/* The host arrays refreshed for a getter (a failed read is kept on the device, as the scaler's). */
static amp_status amp__fp8_pull(const char *fn, amp_fp8_scaler *f, int getter) {
  char m[AMP__MSG] = "";
  amp_status st = amp__be(f->dev)->fp8_io(f, 0, m, sizeof m);
  if (st != AMP_OK) {
    amp__op_fail(fn, st, m);
    if (getter) amp__dev_keep_error(f->dev, st);
  }
  return st;
}

AMPDEF float amp_fp8_scaler_get_scale(amp_fp8_scaler *f, size_t i) {
  const char *fn = "amp_fp8_scaler_get_scale";
  if (!amp__fp8_index_ok(fn, f, i) || amp__fp8_pull(fn, f, 1) != AMP_OK) return amp__bits_f32(0x7fc00000u);
  return f->scale[i];
}
AMPDEF float amp_fp8_scaler_get_scale_inv(amp_fp8_scaler *f, size_t i) {
  const char *fn = "amp_fp8_scaler_get_scale_inv";
  if (!amp__fp8_index_ok(fn, f, i) || amp__fp8_pull(fn, f, 1) != AMP_OK) return amp__bits_f32(0x7fc00000u);
  return f->scale_inv[i];
}
AMPDEF amp_status amp_fp8_scaler_history(amp_fp8_scaler *f, size_t i, float *out, int len) {
  const char *fn = "amp_fp8_scaler_history";
  amp_status st;
  if (!amp__fp8_index_ok(fn, f, i)) return AMP_ERR_ARG;
  if (len < 0 || len > f->len)
    return amp__fail(AMP_ERR_ARG, "%s: len %d must be in 0..%d (the history's length)", fn, len, f->len);
  if (len > 0 && !out) return amp__fail(AMP_ERR_ARG, "%s: out is NULL with len %d", fn, len);
  if ((st = amp__fp8_pull(fn, f, 0)) != AMP_OK) return st;
  if (len > 0) memcpy(out, f->hist + i * (size_t)f->len, (size_t)len * sizeof *out);
  return AMP_OK;
}
AMPDEF float *amp_fp8_scaler_amax_ptr(amp_fp8_scaler *f, size_t i) {
  return amp__fp8_index_ok("amp_fp8_scaler_amax_ptr", f, i) ? f->d_hist + i * (size_t)f->len : NULL;
}
AMPDEF const float *amp_fp8_scaler_scale_ptr(amp_fp8_scaler *f, size_t i) {
  return amp__fp8_index_ok("amp_fp8_scaler_scale_ptr", f, i) ? f->d_scale + i : NULL;
}
AMPDEF const float *amp_fp8_scaler_scale_inv_ptr(amp_fp8_scaler *f, size_t i) {
  return amp__fp8_index_ok("amp_fp8_scaler_scale_inv_ptr", f, i) ? f->d_scale_inv + i : NULL;
}
AMPDEF uint64_t *amp_fp8_scaler_counts_ptr(amp_fp8_scaler *f, size_t i) {
  const char *fn = "amp_fp8_scaler_counts_ptr";
  if (!amp__fp8_index_ok(fn, f, i)) return NULL;
  if (!f->cfg.stats) {
    amp__fail(AMP_ERR_STATE, "%s: stats are off (amp_fp8_config.stats 0 at create)", fn);
    return NULL;
  }
  return f->d_counts + 4 * i;
}
AMPDEF amp_status amp_fp8_scaler_stats(amp_fp8_scaler *f, size_t i, amp_fp8_stats *out) {
  const char *fn = "amp_fp8_scaler_stats";
  char m[AMP__MSG] = "";
  amp_status st;
  if (!amp__fp8_index_ok(fn, f, i)) return AMP_ERR_ARG;
  if (!out) return amp__fail(AMP_ERR_ARG, "%s: out is NULL", fn);
  if (!f->cfg.stats) return amp__fail(AMP_ERR_STATE, "%s: stats are off (amp_fp8_config.stats 0 at create)", fn);
  if ((st = amp__op_fail(fn, amp__be(f->dev)->fp8_stats(f, m, sizeof m), m)) != AMP_OK) return st;
  out->n = f->last[4 * i]; out->saturated = f->last[4 * i + 1];
  out->flushed = f->last[4 * i + 2]; out->nan = f->last[4 * i + 3];
  out->amax_used = f->used[2 * i]; out->scale_used = f->used[2 * i + 1];
  return AMP_OK;
}
AMPDEF amp_fp8_config amp_fp8_scaler_config(const amp_fp8_scaler *f) {
  amp_fp8_config c;
  if (f) return f->cfg;
  amp__fail(AMP_ERR_ARG, "amp_fp8_scaler_config: f is NULL");
  memset(&c, 0, sizeof c);
  return c;
}

/* The CPU's operations: the host arrays are the state. */
static amp_status amp__cpu_fp8_create(amp_fp8_scaler *f, char *m, size_t cap) {
  (void)m; (void)cap;
  f->d_hist = f->hist; f->d_scale = f->scale; f->d_scale_inv = f->scale_inv; f->d_red = f->red;
  f->d_counts = f->counts;
  return AMP_OK;
}
static amp_status amp__cpu_fp8_amax_io(amp_fp8_scaler *f, int to_slots, char *m, size_t cap) {
  size_t i;
  for (i = 0; i < f->n && !to_slots; i++) f->red[i] = amp__fp8_amax_to_wire(f->hist[i * (size_t)f->len]);
  for (i = 0; i < f->n && to_slots; i++)   /* all checked before any slot is written */
    if (!(f->red[i] >= 0.0 && f->red[i] <= AMP__FP8_WIRE_MAX) || f->red[i] != (double)(uint32_t)f->red[i]) {
      snprintf(m, cap, "the allreduce hook gave %.17g for tensor %zu's amax, which is no amax's bits (an integer in "
               "0..2^31-1: the MAX over the ranks of what each rank gave)", f->red[i], i);
      return AMP_ERR_ARG;
    }
  for (i = 0; i < f->n && to_slots; i++) f->hist[i * (size_t)f->len] = amp__fp8_amax_from_wire(f->red[i]);
  return AMP_OK;
}
static void amp__cpu_fp8_destroy(amp_fp8_scaler *f) { (void)f; }
static amp_status amp__cpu_fp8_record(amp_fp8_scaler *f, size_t i, float amax, char *m, size_t cap) {
  float *slot = f->hist + i * (size_t)f->len;
  (void)m; (void)cap;
  *slot = amp__amax_join(*slot, amax);
  return AMP_OK;
}
static amp_status amp__cpu_fp8_update(amp_fp8_scaler *f, char *m, size_t cap) {
  size_t i;
  (void)m; (void)cap;
  for (i = 0; i < f->n; i++)
    amp__fp8_update_one(&f->cfg, f->format[i], f->hist + i * (size_t)f->len, f->len, f->scale + i, f->scale_inv + i,
                        f->used ? f->used + 2 * i : NULL);
  if (f->counts) {
    memcpy(f->last, f->counts, 4 * f->n * sizeof *f->last);
    memset(f->counts, 0, 4 * f->n * sizeof *f->counts);
  }
  return AMP_OK;
}
static amp_status amp__cpu_fp8_io(amp_fp8_scaler *f, int to_device, char *m, size_t cap) {
  (void)f; (void)to_device; (void)m; (void)cap;
  return AMP_OK;
}
static amp_status amp__cpu_fp8_stats(amp_fp8_scaler *f, char *m, size_t cap) {
  (void)f; (void)m; (void)cap;
  return AMP_OK;
}

/* ---- the fp8 scaler's checkpoint: its own small file, written and read as the optimizer's ----
   A header (the checkpoint header's fields, magic "AMPFP8S1"), the record below, then per tensor
   its format (u32), scale, scale_inv and its len history slots (f32), then the CRC-32 of all that. */
#define AMP__FP8_MAGIC "AMPFP8S1"
#define AMP__FP8_VERSION 1u
/* live: amp_fp8_scaler */
#define AMP__CKPT_FP8_FIELDS(X) \
  X(uint32_t, recipe, cfg.recipe) X(int32_t, history_len, cfg.history_len) X(int32_t, most_recent, cfg.most_recent) \
  X(float, margin, cfg.margin) X(int32_t, pow2, cfg.pow2) X(float, amax_epsilon, cfg.amax_epsilon) \
  X(uint64_t, n, n) X(int32_t, len, len)
typedef struct amp__ckpt_fp8 { AMP__CKPT_FP8_FIELDS(AMP__CKPT_DECLARE) } amp__ckpt_fp8;
#define AMP__CKPT_FP8_BYTES (0 AMP__CKPT_FP8_FIELDS(AMP__CKPT_SIZEOF))
static int amp__ckpt_fp8_io(amp__ckpt_io *io, amp__ckpt_fp8 *r) {
  int ok = 1;
  AMP__CKPT_FP8_FIELDS(AMP__CKPT_TRANSFER)
  return ok;
}

AMPDEF amp_status amp_fp8_scaler_save(amp_fp8_scaler *f, const char *path) {
  const char *fn = "amp_fp8_scaler_save";
  amp__wfile file;
  amp__ckpt_io io;
  amp__ckpt_head h;
  amp__ckpt_fp8 r;
  amp_fp8_scaler *x = f;
  uint32_t crc;
  size_t i;
  amp_status st;
  if (!f) return amp__fail(AMP_ERR_ARG, "%s: f is NULL", fn);
  if (!path || !*path || path[strlen(path) - 1] == '/')
    return amp__fail(AMP_ERR_ARG, "%s: path '%s' is not a file name", fn, path ? path : "(NULL)");
  if ((st = amp__fp8_pull(fn, f, 0)) != AMP_OK) return st;
  memset(&io, 0, sizeof io);
  io.writing = 1; io.file = &file;
  io.buf = (unsigned char *)AMP_MALLOC(AMP__CKPT_BUF);
  io.st = io.buf ? amp__wfile_open(&file, fn, path) : amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
  if (io.st != AMP_OK) { AMP_FREE(io.buf); return io.st; }
  amp__crc_init(&io.crc);
  memcpy(&h.magic, AMP__FP8_MAGIC, 8);
  h.version = AMP__FP8_VERSION; h.endian = AMP__CKPT_ENDIAN; h.header_bytes = AMP__CKPT_HEAD_BYTES; h.flags = 0;
  h.payload_bytes = AMP__CKPT_FP8_BYTES + (uint64_t)f->n * (12u + 4u * (uint64_t)f->len);
  AMP__CKPT_FP8_FIELDS(AMP__CKPT_SAVE)
  amp__ckpt_head_io(&io, &h);
  amp__ckpt_fp8_io(&io, &r);
  for (i = 0; i < f->n && io.st == AMP_OK; i++) {
    uint32_t t = (uint32_t)f->format[i];
    amp__ckpt_bytes(&io, &t, 4);
    amp__ckpt_bytes(&io, f->scale + i, 4);
    amp__ckpt_bytes(&io, f->scale_inv + i, 4);
    amp__ckpt_bytes(&io, f->hist + i * (size_t)f->len, 4 * (size_t)f->len);
  }
  crc = amp__crc_value(&io.crc);
  amp__ckpt_bytes(&io, &crc, 4);
  amp__ckpt_flush(&io);
  AMP_FREE(io.buf);
  if (io.st != AMP_OK) { amp__wfile_abort(&file); return io.st; }
  return amp__wfile_commit(&file);
}

/* The file's record and tensors against the live scaler; on AMP_OK hist/scale/scale_inv hold the
   state to load, the history resized to the live length (see amp_fp8_scaler_load). */
static amp_status amp__fp8_ckpt_parse(const char *fn, const amp_fp8_scaler *f, const unsigned char *p, size_t size,
                                      float *hist, float *scale, float *scale_inv) {
  const amp_status bad = AMP_ERR_CORRUPT;
  amp__ckpt_io io;
  amp__ckpt_head h;
  amp__ckpt_fp8 r;
  amp__crc crc;
  uint32_t want;
  size_t i, j;
  int keep;
  memset(&io, 0, sizeof io);
  io.p = p; io.left = size;
  if (size < AMP__CKPT_HEAD_BYTES + AMP__CKPT_FP8_BYTES + 4)
    return amp__fail(bad, "%s: the file holds %zu bytes, too few for an fp8 scaler", fn, size);
  amp__crc_init(&crc);
  amp__crc_add(&crc, p, size - 4);
  memcpy(&want, p + size - 4, 4);
  amp__ckpt_head_io(&io, &h);
  if (memcmp(&h.magic, AMP__FP8_MAGIC, 8) != 0) return amp__fail(bad, "%s: not an fp8 scaler file (bad magic)", fn);
  if (h.endian != AMP__CKPT_ENDIAN) return amp__fail(bad, "%s: bad byte-order mark 0x%08x", fn, (unsigned)h.endian);
  if (h.version != AMP__FP8_VERSION || h.header_bytes != AMP__CKPT_HEAD_BYTES || h.flags != 0)
    return amp__fail(bad, "%s: format version %u (this amp.h reads %u), header %u bytes, flags %u", fn,
                     (unsigned)h.version, AMP__FP8_VERSION, (unsigned)h.header_bytes, (unsigned)h.flags);
  if (h.payload_bytes != size - 4 - AMP__CKPT_HEAD_BYTES)
    return amp__fail(bad, "%s: truncated or padded: a payload of %llu bytes in a file of %zu", fn,
                     (unsigned long long)h.payload_bytes, size);
  if (amp__crc_value(&crc) != want) return amp__fail(bad, "%s: CRC mismatch (the file is damaged)", fn);
  amp__ckpt_fp8_io(&io, &r);
  if (r.recipe != (uint32_t)f->cfg.recipe)
    return amp__fail(bad, "%s: the file's recipe is %u (%s), the scaler's %s", fn, (unsigned)r.recipe,
                     amp_fp8_recipe_name((amp_fp8_recipe)r.recipe) ? amp_fp8_recipe_name((amp_fp8_recipe)r.recipe) : "?",
                     amp_fp8_recipe_name(f->cfg.recipe));
  if (r.n != (uint64_t)f->n)
    return amp__fail(bad, "%s: the file holds %llu tensors, the scaler %zu", fn, (unsigned long long)r.n, f->n);
  if (r.len < 1 || r.len > AMP_FP8_HISTORY_MAX || (r.recipe != AMP_FP8_DELAYED && r.len != 1) ||
      (r.recipe == AMP_FP8_DELAYED && r.len != r.history_len))
    return amp__fail(bad, "%s: history length %d (history_len %d) cannot be", fn, r.len, r.history_len);
  if (h.payload_bytes != AMP__CKPT_FP8_BYTES + r.n * (12u + 4u * (uint64_t)(uint32_t)r.len))
    return amp__fail(bad, "%s: truncated or padded: %zu bytes for %llu tensors of %d slots", fn, size,
                     (unsigned long long)r.n, r.len);
  keep = r.len < f->len ? r.len : f->len;
  for (i = 0; i < f->n; i++) {
    const unsigned char *t = io.p + i * (12u + 4u * (size_t)r.len);
    uint32_t fmt;
    float hs[1];
    memcpy(&fmt, t, 4); memcpy(scale + i, t + 4, 4); memcpy(scale_inv + i, t + 8, 4);
    if (fmt != (uint32_t)f->format[i])
      return amp__fail(bad, "%s: tensor %zu is format %u in the file, %s in the scaler", fn, i, (unsigned)fmt,
                       amp__dtype_name(f->format[i]));
    if ((amp__f32_bits(scale[i]) >> 31) || amp__f32_bits(scale_inv[i]) != amp__f32_bits(amp__fdiv(1.0f, scale[i])))
      return amp__fail(bad, "%s: tensor %zu's scale %g and scale_inv %g are not a scale and its inverse", fn, i,
                       (double)scale[i], (double)scale_inv[i]);
    for (j = 0; j < (size_t)r.len; j++) {
      memcpy(hs, t + 12 + 4 * j, 4);
      if (amp__f32_bits(hs[0]) > 0x80000000u && amp__f32_bits(hs[0]) <= 0xff800000u)
        return amp__fail(bad, "%s: tensor %zu's history slot %zu holds %g (an amax is >= 0)", fn, i, j, (double)hs[0]);
    }
    /* slot 0 as it is; the newest keep - 1 past amaxes (the top slots) to the live top slots */
    memset(hist + i * (size_t)f->len, 0, (size_t)f->len * sizeof *hist);
    memcpy(hist + i * (size_t)f->len, t + 12, 4);
    for (j = 1; j < (size_t)keep; j++)
      memcpy(hist + i * (size_t)f->len + (size_t)f->len - j, t + 12 + 4 * ((size_t)r.len - j), 4);
  }
  return AMP_OK;
}

AMPDEF amp_status amp_fp8_scaler_load(amp_fp8_scaler *f, const char *path) {
  const char *fn = "amp_fp8_scaler_load";
  char m[AMP__MSG] = "";
  amp__rfile rf;
  uint64_t size = 0;
  unsigned char *buf = NULL;
  float *nh = NULL, *old = NULL;
  size_t slots, total;
  amp_status st;
  if (!f) return amp__fail(AMP_ERR_ARG, "%s: f is NULL", fn);
  if (!path || !*path) return amp__fail(AMP_ERR_ARG, "%s: path is %s", fn, path ? "empty" : "NULL");
  slots = f->n * (size_t)f->len;
  total = slots + 2 * f->n;
  if ((st = amp__rfile_open(&rf, fn, path, &size)) != AMP_OK) return st;
  if (size > (uint64_t)AMP__CKPT_HEAD_BYTES + AMP__CKPT_FP8_BYTES + 4 + (uint64_t)f->n * (12u + 4u * AMP_FP8_HISTORY_MAX))
    st = amp__fail(AMP_ERR_CORRUPT, "%s: '%s' holds %llu bytes, more than an fp8 scaler of %zu tensors can", fn, path,
                   (unsigned long long)size, f->n);
  if (st == AMP_OK) {
    buf = (unsigned char *)AMP_MALLOC(size ? (size_t)size : 1);
    nh = (float *)AMP_MALLOC(total * sizeof *nh);
    old = (float *)AMP_MALLOC(total * sizeof *old);
    st = buf && nh && old ? amp__rfile_read(&rf, buf, (size_t)size) : amp__fail(AMP_ERR_NOMEM, "%s: out of memory", fn);
  }
  amp__rfile_close(&rf);
  if (st == AMP_OK) st = amp__fp8_ckpt_parse(fn, f, buf, (size_t)size, nh, nh + slots, nh + slots + f->n);
  if (st == AMP_OK) {   /* the host arrays, then the device's state from them; a failure puts both back */
    memcpy(old, f->hist, slots * sizeof *old); memcpy(old + slots, f->scale, f->n * sizeof *old);
    memcpy(old + slots + f->n, f->scale_inv, f->n * sizeof *old);
    memcpy(f->hist, nh, slots * sizeof *nh); memcpy(f->scale, nh + slots, f->n * sizeof *nh);
    memcpy(f->scale_inv, nh + slots + f->n, f->n * sizeof *nh);
    if ((st = amp__be(f->dev)->fp8_io(f, 1, m, sizeof m)) != AMP_OK) {
      memcpy(f->hist, old, slots * sizeof *old); memcpy(f->scale, old + slots, f->n * sizeof *old);
      memcpy(f->scale_inv, old + slots + f->n, f->n * sizeof *old);
      st = amp__op_fail(fn, st, m);
    }
  }
  AMP_FREE(buf); AMP_FREE(nh); AMP_FREE(old);
  return st;
}

/* ---- amp_quantize on the CPU: the portable loop (amp__quantize_portable) or the AVX2 / AVX-512
   ones, which give its bits and its counts (with the fp8 bulk loops, in the number formats' part) ---- */
static amp_status amp__cpu_quantize(amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype xt, size_t n,
                                    const float *scale, float *amax, uint64_t *counts, char *m, size_t cap) {
  float k = scale ? *scale : 1.0f;
  int e5m2 = amp__dtype_fp8(fp8);
  (void)d; (void)m; (void)cap;
#ifdef AMP__X86_SIMD
  if (amp_simd_active() && counts) {
    if (amp__isa() >= 2) amp__quantize_counted_avx512((amp_fp8 *)q, e5m2, x, xt, n, k, amax, counts);
    else amp__quantize_counted_avx2((amp_fp8 *)q, e5m2, x, xt, n, k, amax, counts);
    return AMP_OK;
  }
  if (amp_simd_active() && amp__isa() >= 2) { amp__quantize_avx512((amp_fp8 *)q, e5m2, x, xt, n, k, amax); return AMP_OK; }
  if (amp_simd_active()) { amp__quantize_avx2((amp_fp8 *)q, e5m2, x, xt, n, k, amax); return AMP_OK; }
#elif defined(AMP__NEON_SIMD)
  if (amp_simd_active() && amp__neon_level() && amp__dtype_cpu_vec(xt)) {
    amp__quantize_neon((amp_fp8 *)q, e5m2, x, xt, n, k, amax, counts);
    return AMP_OK;
  }
#endif
  if (counts) amp__quantize_counted((amp_fp8 *)q, e5m2, x, xt, n, k, amax, counts);
  else amp__quantize_portable((amp_fp8 *)q, e5m2, x, xt, n, k, amax);
  return AMP_OK;
}

/* amp_quantize and amp_quantize_ex, their arguments checked for the public caller fn. */
static amp_status amp__quantize(const char *fn, amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype x_type,
                                size_t n, const float *scale, float *amax_out, uint64_t *counts) {
  char m[AMP__MSG] = "";
  amp_status st;
  if (!d) return amp__fail(AMP_ERR_ARG, "%s: d is NULL (amp_cpu() for the CPU)", fn);
  if ((st = amp__dtype_fp8_check(fn, "fp8", fp8)) != AMP_OK) return st;
  if ((st = amp__dtype_compute_check(fn, "x_type", x_type)) != AMP_OK) return st;
  if (!q && !amax_out) return amp__fail(AMP_ERR_ARG, "%s: q and amax_out are both NULL (nothing to write)", fn);
  if ((uintptr_t)counts % 8u)
    return amp__fail(AMP_ERR_ARG, "%s: counts %p is not 8-byte aligned (4 uint64_t counters)", fn, (void *)counts);
  if (n == 0) return AMP_OK;
  if (!x) return amp__fail(AMP_ERR_ARG, "%s: x is NULL with n = %zu", fn, n);
  if ((uintptr_t)x % amp_dtype_size(x_type))
    return amp__fail(AMP_ERR_ARG, "%s: x %p is not aligned to its element size (%zu bytes, %s)", fn, x,
                     amp_dtype_size(x_type), amp__dtype_name(x_type));
  if ((uintptr_t)scale % 4u || (uintptr_t)amax_out % 4u)
    return amp__fail(AMP_ERR_ARG, "%s: %s %p is not aligned to 4 bytes (a float)", fn,
                     (uintptr_t)scale % 4u ? "scale" : "amax_out",
                     (uintptr_t)scale % 4u ? (const void *)scale : (const void *)amax_out);
  if (q && amp__overlap(q, n, x, n * amp_dtype_size(x_type)))
    return amp__fail(AMP_ERR_ARG, "%s: q overlaps x (the cast is not done in place)", fn);
  if (amax_out) {   /* amax_out apart from what the pass reads or writes (the amax is written after it;
                       on CUDA, as each block ends, while other blocks still read *scale) */
    const char *in = amp__overlap(amax_out, 4, x, n * amp_dtype_size(x_type)) ? "x"
                     : q && amp__overlap(amax_out, 4, q, n)                  ? "q"
                     : scale && amp__overlap(amax_out, 4, scale, 4)          ? "scale"
                     : counts && amp__overlap(amax_out, 4, counts, 4 * sizeof *counts) ? "counts"
                                                                                       : NULL;
    if (in) return amp__fail(AMP_ERR_ARG, "%s: amax_out %p lies on %s", fn, (void *)amax_out, in);
  }
  if (counts && q && amp__overlap(q, n, counts, 4 * sizeof *counts))
    return amp__fail(AMP_ERR_ARG, "%s: counts overlaps q", fn);
  return amp__op_fail(fn, amp__be(d)->quantize(d, q, fp8, x, x_type, n, scale, amax_out, counts, m, sizeof m), m);
}
AMPDEF amp_status amp_quantize(amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype x_type, size_t n,
                               const float *scale, float *amax_out) {
  return amp__quantize("amp_quantize", d, q, fp8, x, x_type, n, scale, amax_out, NULL);
}
AMPDEF amp_status amp_quantize_ex(amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype x_type, size_t n,
                                  const float *scale, float *amax_out, uint64_t *counts) {
  return amp__quantize("amp_quantize_ex", d, q, fp8, x, x_type, n, scale, amax_out, counts);
}

/* ------------------------------------------------------------------------------------------
   Implementation: matrix product
   ------------------------------------------------------------------------------------------ */


/* The CPU product, in the style of GotoBLAS / BLIS: C is cut into NC-wide column panels; each
   panel's op(B) (k x NC) is packed once into "slivers" NR columns wide; C's rows are cut into
   MC-high blocks, and for each KC-deep slice of k the block's op(A) is packed into MR-high
   slivers. A micro-kernel multiplies one MR x KC sliver of A by one KC x NR sliver of B into an
   MR x NR tile of f32 accumulators held in registers, and the tiles live in a small MC x NC buffer
   between k slices. Every accumulator thus sees its products in the order p = 0, 1, ..., k-1,
   whatever the blocking and the number of threads (threads split C's rows, never k).

   Two families of micro-kernels share this driver (amp__gemm_kernel describes one):
   - the reference (AMP_GEMM_REFERENCE): f32 slivers, acc = acc + (a * b rounded), no FMA: the
     result is the same as a plain triple loop's, bit for bit, on every CPU;
   - the fast default (AMP_GEMM_AUTO), picked by CPUID: acc = fma(a, b, acc) in that same order
     (AVX-512F 8 x 32 tiles, or AVX2 + FMA 6 x 16, or NEON FMLA 6 x 16 on AArch64: the same
     bits), inputs converted to f32 while
     packing; bf16 inputs on an AVX512_BF16 CPU whose vdpbf16ps pays (amp__gemm_dpbf16, a
     calibration) are packed in pairs along k and multiplied with vdpbf16ps (2 products per lane
     and instruction, see the manual for its rounding); elsewhere they are widened as f16 is; on
     an AMX CPU bf16 x bf16 runs on the tile unit (amp__gemm_micro_amx, 32 x 32 tiles, A packed
     by rows: the kernel's own pack_a).
     An A whose rows run along k (row-major, or col-major transposed) is not packed for the
     AVX-512 and AVX2 kernels (amp__gemm_micro_512_ra, amp__gemm_micro_fma_ra): f32 is read in
     place, other types are widened row by row (no transpose) and read the same way; the same
     values reach the same FMAs, so the same bits.
   A CPU with neither FMA nor AVX2 runs the reference.
   The AVX-512 and AVX2 kernels write the last k slice's tiles into C themselves (rows of C
   contiguous, act NONE or RELU: alpha, beta, bias, ReLU and the rounding to C's type from the
   registers, the element math of the buffered epilogue). For small products (the demo's k = 64
   weight gradient) the tile buffer's round trip had cost a fifth of the time. The bf16 kernel reads a row-major B
   in place for products of at most 64 rows (pairs made in registers), where packing B cost as
   much. */
#define AMP__GEMM_MR 6     /* reference: 6 x 16 accumulators = 12 AVX registers of 8 floats */
#define AMP__GEMM_NR 16
#define AMP__GEMM_KC 256   /* a KC x NR sliver of B (16 KiB) stays in L1 while the A slivers stream */
#define AMP__GEMM_MC 96    /* an MC x KC block of A (96 KiB) stays in L2 */
#define AMP__GEMM_NC 512   /* the MC x NC accumulator buffer is 192 KiB; the widest panel of any kernel */

/* No FMA contraction in the reference: a * b is rounded to f32 before it is added, under every
   flag set of GCC and Clang (-O0 to -Ofast, -march=native, -ffp-contract=fast). An empty asm
   statement takes the product as an operand, so no compiler can fuse it into the add (Clang's
   -ffp-contract=fast, which -Ofast sets, ignores both #pragma STDC FP_CONTRACT and #pragma clang
   fp contract); GCC's optimize attribute is kept as a second guard. */
#if defined(__GNUC__) && !defined(__clang__)
#define AMP__NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define AMP__NO_CONTRACT
#endif
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define AMP__GEMM_KEEP_AVX(t) __asm__("" : "+x"(t))     /* inside functions compiled for AVX */
#if defined(__AVX__)
#define AMP__GEMM_KEEP(t) __asm__("" : "+x"(t))
#else
#define AMP__GEMM_KEEP(t) ((void)0)                     /* no FMA without AVX: nothing to fuse */
#endif
#elif defined(__clang__)
#define AMP__GEMM_KEEP(t) __asm__("" : "+m"(t))         /* other CPUs: the product goes through memory */
#else
#define AMP__GEMM_KEEP(t) ((void)0)                     /* other compilers: see the manual */
#endif

#if (defined(__GNUC__) || defined(__clang__)) && !defined(AMP_NO_SIMD)
/* GCC/clang vector extensions: 8 floats that the compiler maps to one AVX register, or two SSE
   ones, or NEON pairs. may_alias: the packed buffers are float arrays read through this type. */
typedef float amp__v8 __attribute__((vector_size(32), aligned(32), may_alias));
#define AMP__GEMM_VEC 1
#endif

/* The reference micro-kernel body: tile (MR x NR floats, row by row) = tile or 0, plus sum over p
   of a[p*MR + r] * b[p*NR + c], each product rounded before it is added. a and b are packed
   slivers, 32-byte aligned. KEEP is the no-contraction barrier of the function's target. */
#ifdef AMP__GEMM_VEC
#define AMP__GEMM_MICRO_BODY(KEEP)                                                             \
  {                                                                                            \
    amp__v8 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;                         \
    const amp__v8 *ct = (const amp__v8 *)tile;                                                 \
    int p;                                                                                     \
    if (acc) { c00 = ct[0]; c01 = ct[1]; c10 = ct[2]; c11 = ct[3]; c20 = ct[4]; c21 = ct[5];  \
               c30 = ct[6]; c31 = ct[7]; c40 = ct[8]; c41 = ct[9]; c50 = ct[10]; c51 = ct[11]; } \
    else { memset(&c00, 0, sizeof c00);                                                       \
           c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = c00; }           \
    for (p = 0; p < kc; p++) {                                                                 \
      const amp__v8 *bv = (const amp__v8 *)(b + (size_t)p * AMP__GEMM_NR);                     \
      const float *ap = a + (size_t)p * AMP__GEMM_MR;                                          \
      amp__v8 b0 = bv[0], b1 = bv[1], t;                                                       \
      t = b0 * ap[0]; KEEP(t); c00 = c00 + t; t = b1 * ap[0]; KEEP(t); c01 = c01 + t;          \
      t = b0 * ap[1]; KEEP(t); c10 = c10 + t; t = b1 * ap[1]; KEEP(t); c11 = c11 + t;          \
      t = b0 * ap[2]; KEEP(t); c20 = c20 + t; t = b1 * ap[2]; KEEP(t); c21 = c21 + t;          \
      t = b0 * ap[3]; KEEP(t); c30 = c30 + t; t = b1 * ap[3]; KEEP(t); c31 = c31 + t;          \
      t = b0 * ap[4]; KEEP(t); c40 = c40 + t; t = b1 * ap[4]; KEEP(t); c41 = c41 + t;          \
      t = b0 * ap[5]; KEEP(t); c50 = c50 + t; t = b1 * ap[5]; KEEP(t); c51 = c51 + t;          \
    }                                                                                          \
    {                                                                                          \
      amp__v8 *co = (amp__v8 *)tile;                                                           \
      co[0] = c00; co[1] = c01; co[2] = c10; co[3] = c11; co[4] = c20; co[5] = c21;            \
      co[6] = c30; co[7] = c31; co[8] = c40; co[9] = c41; co[10] = c50; co[11] = c51;          \
    }                                                                                          \
  }
#else
#define AMP__GEMM_MICRO_BODY(KEEP)                                                             \
  {                                                                                            \
    float c[AMP__GEMM_MR][AMP__GEMM_NR];                                                       \
    int p, r, j;                                                                               \
    for (r = 0; r < AMP__GEMM_MR; r++)                                                         \
      for (j = 0; j < AMP__GEMM_NR; j++) c[r][j] = acc ? tile[r * AMP__GEMM_NR + j] : 0.0f;     \
    for (p = 0; p < kc; p++)                                                                   \
      for (r = 0; r < AMP__GEMM_MR; r++) {                                                     \
        float ar = a[(size_t)p * AMP__GEMM_MR + r];                                            \
        for (j = 0; j < AMP__GEMM_NR; j++) {                                                   \
          float t = ar * b[(size_t)p * AMP__GEMM_NR + j];                                      \
          KEEP(t);                                                                             \
          c[r][j] = c[r][j] + t;                                                               \
        }                                                                                      \
      }                                                                                        \
    for (r = 0; r < AMP__GEMM_MR; r++)                                                         \
      for (j = 0; j < AMP__GEMM_NR; j++) tile[r * AMP__GEMM_NR + j] = c[r][j];                  \
  }
#endif

/* Where a micro-kernel with a C epilogue (vec_store) writes its finished tile: C of type ct, rows
   contiguous, rows x cols of it (the tile's top-left part) at c, ldc elements apart, as
   act(alpha acc (+ beta c) (+ bias[j])) rounded once to ct (act NONE or RELU; bias NULL: none). */
typedef struct amp__gemm_out {
  void *c;
  amp_dtype ct;
  size_t ldc;
  int rows, cols;
  float alpha, beta;
  const float *bias;
  int act;
  int bf16_hw;   /* bf16 C rounded by vcvtne2ps2bf16 (AVX512_BF16 CPUs), see amp__gemm_put_bf16 */
  int plain;     /* an f32 C with beta 0, no bias or activation: a whole tile may be stored straight from
                    the kernel's registers, as acc (1: alpha 1) or as fl32(alpha acc) (2: one multiply,
                    the epilogue's) */
} amp__gemm_out;

/* kc: the depth of the slice in packed units (elements, or pairs for the bf16 kernel). out NULL:
   the tile goes to `tile`; else (kernels with vec_store only) to C through out, not to `tile`. */
typedef void (*amp__gemm_micro_fn)(int kc, const float *a, const float *b, float *tile, int acc,
                                   const amp__gemm_out *out);
/* Packs the rows x cols block of X (element (r, c) at x[r*rs + c*cs], type t) into W-row slivers. */
typedef void (*amp__gemm_pack_fn)(float *dst, int W, const void *x, amp_dtype t, size_t rs, size_t cs, int rows,
                                  int cols);

/* One micro-kernel with its packing and block sizes. kpair 2: k is packed in pairs of bf16 (one
   32-bit word holds a(i, 2q) and a(i, 2q+1)); kc is then even, so slices start on a pair. */
/* A micro-kernel that reads op(B) unpacked: bf16 rows p of op(B) contiguous along j, ldb elements
   apart (b: element (2 * first pair, j0)), ncols of the tile's columns present (the rest read as
   0), kc pairs; otherwise as amp__gemm_micro_fn. */
typedef void (*amp__gemm_micro_rb_fn)(int kc, const float *a, const uint16_t *b, size_t ldb, int ncols, float *tile,
                                      int acc, const amp__gemm_out *out);

/* A micro-kernel that reads an f32 op(A) unpacked: row r of the tile's A at a + r*lda, contiguous
   along k (nrows of the 8 present; the others read row 0 again, and their accumulators are never
   written to C); otherwise as amp__gemm_micro_fn. */
typedef void (*amp__gemm_micro_ra_fn)(int kc, const float *a, size_t lda, int nrows, const float *b, float *tile,
                                      int acc, const amp__gemm_out *out);

typedef struct amp__gemm_kernel {
  amp__gemm_micro_fn micro;
  amp__gemm_pack_fn pack;
  int mr, nr, kc, mc, nc, kpair;
  int vec_store;   /* 1: the micro-kernel writes the last k slice's tiles into C itself (out) */
  amp__gemm_micro_rb_fn micro_rb;   /* NULL, or the same kernel reading B unpacked */
  amp__gemm_micro_ra_fn micro_ra;   /* NULL, or the same kernel reading an f32 A unpacked */
  /* with micro_ra: widens rows x cols of a 16-bit or fp8 A (rows rs elements apart, contiguous
     along k) into f32 rows cols apart, for micro_ra to read */
  void (*widen_rows)(float *dst, const void *x, amp_dtype t, size_t rs, int rows, int cols);
  amp__gemm_pack_fn pack_a;   /* NULL, or A's packing where it differs from B's (AMX) */
  void (*tiles)(int on);      /* NULL, or (AMX) the tile state taken (1) and given back (0) about a row block's calls */
  int kmul;                   /* 1, or (AMX) the multiple of packed units a slice's packing pads k to, with zeros */
} amp__gemm_kernel;

static AMP__NO_CONTRACT void amp__gemm_micro(int kc, const float *a, const float *b, float *tile, int acc,
                                              const amp__gemm_out *out) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  AMP__GEMM_MICRO_BODY(AMP__GEMM_KEEP)
  (void)out;
}

/* The same kernel compiled for AVX2, chosen at run time where the CPU has it (same bits: no FMA). */
#if defined(AMP__GEMM_VEC) && (defined(__x86_64__) || defined(__i386__))
#define AMP__GEMM_AVX2 1
static AMP__NO_CONTRACT __attribute__((target("avx2"))) void amp__gemm_micro_avx2(int kc, const float *a,
                                                                                  const float *b, float *tile, int acc,
                                                                                  const amp__gemm_out *out) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  AMP__GEMM_MICRO_BODY(AMP__GEMM_KEEP_AVX)
  (void)out;
}
#endif

/* dst[i * ds] = src[i * ss] as f32, for i < n (ss, ds in elements). */
static void amp__gemm_gather(float *dst, size_t ds, const void *src, amp_dtype t, size_t ss, int n) {
  int i;
  if (ss == 1 && amp_dtype_size(t) < sizeof(float)) {   /* a contiguous narrow run: the bulk (F16C) conversion */
    float tmp[256];
    int j, k;
    if (ds == 1) { amp_convert(dst, AMP_F32, src, t, (size_t)n); return; }
    for (i = 0; i < n; i += k) {
      k = n - i < 256 ? n - i : 256;
      amp_convert(tmp, AMP_F32, (const char *)src + (size_t)i * amp_dtype_size(t), t, (size_t)k);
      for (j = 0; j < k; j++) dst[(size_t)(i + j) * ds] = tmp[j];
    }
    return;
  }
#define AMP__G_(E, N, T, S) for (i = 0; i < n; i++) dst[i * ds] = amp__ld_##N(src, i * ss); break;
  AMP__DTYPE_SWITCH(t, AMP__G_)
#undef AMP__G_
}

/* Packs the rows x cols block of a strided matrix X (element (r, c) at x[r*rs + c*cs], of type t)
   into slivers W wide: sliver s holds rows s*W .. s*W+W-1, stored column by column
   (dst[s*W*cols + c*W + r]), rows past `rows` zero. W = MR packs op(A) (rows = i, cols = p);
   W = NR packs op(B)^T (rows = j, cols = p). The loop runs along whichever index is contiguous. */
static void amp__gemm_pack(float *dst, int W, const void *x, amp_dtype t, size_t rs, size_t cs, int rows, int cols) {
  size_t es = amp_dtype_size(t);
  int s, r, c, ns = (rows + W - 1) / W;
  for (s = 0; s < ns; s++) {
    float *d = dst + (size_t)s * W * cols;
    int h = rows - s * W < W ? rows - s * W : W;
    const char *xs = (const char *)x + (size_t)s * W * rs * es;
    if (cs == 1 || rs != 1) {   /* contiguous along c (or neither): one gather per row */
      for (r = 0; r < h; r++) amp__gemm_gather(d + r, (size_t)W, xs + (size_t)r * rs * es, t, cs, cols);
    } else {                    /* contiguous along r: one gather per column */
      for (c = 0; c < cols; c++) amp__gemm_gather(d + (size_t)c * W, 1, xs + (size_t)c * cs * es, t, rs, h);
    }
    for (r = h; r < W; r++) for (c = 0; c < cols; c++) d[(size_t)c * W + r] = 0.0f;
  }
}

static const amp__gemm_kernel amp__gemm_reference_kernel = {
  amp__gemm_micro, amp__gemm_pack, AMP__GEMM_MR, AMP__GEMM_NR, AMP__GEMM_KC, AMP__GEMM_MC, AMP__GEMM_NC, 1, 0, NULL, NULL, NULL, NULL, NULL, 1};
#ifdef AMP__GEMM_AVX2
static const amp__gemm_kernel amp__gemm_reference_kernel_avx2 = {
  amp__gemm_micro_avx2, amp__gemm_pack, AMP__GEMM_MR, AMP__GEMM_NR, AMP__GEMM_KC, AMP__GEMM_MC, AMP__GEMM_NC, 1, 0, NULL, NULL, NULL, NULL, NULL, 1};
#endif

/* ---- the fast kernels (x86-64, GCC/Clang): FMA in order, AVX2 or AVX-512, AVX512_BF16 ---- */
#ifdef AMP__X86_SIMD
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push   /* g++ 12: a false alarm inside the AVX-512 headers (_mm512_undefined_ps) */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define AMP__GEMM_FAST 1
#define AMP__GEMM_ISA_FMA 1      /* AVX2 + FMA, YMM state saved by the OS */
#define AMP__GEMM_ISA_512 2      /* AVX-512 F/BW/VL/DQ, ZMM and mask state saved by the OS */
#define AMP__GEMM_ISA_BF16 4     /* AVX512_BF16 */
#define AMP__GEMM_ISA_AMX 8      /* AMX-TILE and AMX-BF16 (with AVX512_BF16), the OS saving tile state */
/* Tests lower this (to 7: no AMX; AMP__GEMM_ISA_FMA; or 0) to run the other paths on an AVX-512 CPU. */
static int amp__gemm_isa_allowed = 15;

/* (AVX-512 includes DQ: the epilogue stores through amp_convert's AVX-512 code, built for it.) */
static int amp__gemm_isa(void) {
  unsigned f = amp__cpu_features();
  int v = 0;
  if ((f & (AMP__CPU_FMA | AMP__CPU_AVX2)) == (AMP__CPU_FMA | AMP__CPU_AVX2)) {
    v = AMP__GEMM_ISA_FMA;
    if (f & AMP__CPU_AVX512) v |= AMP__GEMM_ISA_512;
    if (f & AMP__CPU_AVX512BF16) v |= AMP__GEMM_ISA_BF16;   /* set only with AVX512 */
    if (f & AMP__CPU_AMX) v |= AMP__GEMM_ISA_AMX;            /* set only with AVX512_BF16 */
  }
  return v & amp__gemm_isa_allowed;
}

#define AMP__FMA2 __attribute__((target("avx2,fma,f16c")))
#define AMP__T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define AMP__T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))

/* ---- the bf16 kernel by what the core delivers ----
   A core with AVX512_BF16 may run vdpbf16ps (64 flops a zmm instruction) at twice the f32 FMA's
   flop rate (AMD Zen 4: one a cycle, as vfmadd231ps) or at half of it (Intel Sapphire Rapids
   without AMX: measured 0.48x on this project's Xeon), where bf16 widened while packing and run
   through the f32 FMA kernel is about twice as fast. Which one is measured, once per process, the
   first time a bf16 x bf16 product asks: amp__gemm_peak_loop runs a few thousand of each
   instruction, 12 independent accumulators, alternating, 7 times each; the fastest time of each
   counts (so an interruption or the AVX-512 warm-up does not), and vdpbf16ps is chosen when its
   flop rate is at least the FMA's. The known cores lie at 0.5x and 2x, far from that line, so the
   choice (and with it the bits of a bf16 product) does not change between runs on one machine. */

/* n rounds of 12 independent accumulators, acc = fma(x, y, acc) (kind 0: zmm, 32 flops an
   instruction; kind 2: ymm, 16) or acc = vdpbf16ps(acc, x, y) (kind 1: zmm, 64 flops). The
   empty asm keeps x in a register each round, so the compiler can fold or move nothing; the sum
   of the accumulators is returned so that none is left out. Not inlined: a timed loop stays
   between the reads of the clock. */
#define AMP__PEAK_ACC12(T, Z, OP) T c0 = Z(0), c1 = Z(1), c2 = Z(2), c3 = Z(3), c4 = Z(4), c5 = Z(5), c6 = Z(6),  \
  c7 = Z(7), c8 = Z(8), c9 = Z(9), c10 = Z(10), c11 = Z(11);   /* different starts: the compiler merges none */  \
  for (i = 0; i < n; i++) {                                                                                      \
    __asm__ __volatile__("" : "+v"(x));                                                                          \
    c0 = OP(c0); c1 = OP(c1); c2 = OP(c2); c3 = OP(c3); c4 = OP(c4); c5 = OP(c5);                                 \
    c6 = OP(c6); c7 = OP(c7); c8 = OP(c8); c9 = OP(c9); c10 = OP(c10); c11 = OP(c11);                             \
  }
static __attribute__((noinline)) AMP__T512 float amp__gemm_peak_fma512(long n) {
  __m512 x = _mm512_set1_ps(1e-3f), y = _mm512_set1_ps(1e-3f);
  long i;
#define AMP__OP(c) _mm512_fmadd_ps(x, y, c)
#define AMP__Z(i) _mm512_set1_ps((float)(i))
  AMP__PEAK_ACC12(__m512, AMP__Z, AMP__OP)
#undef AMP__OP
#undef AMP__Z
  c0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)), _mm512_add_ps(c4, c5));
  c6 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c6, c7), _mm512_add_ps(c8, c9)), _mm512_add_ps(c10, c11));
  return _mm512_reduce_add_ps(_mm512_add_ps(c0, c6));
}
static __attribute__((noinline)) AMP__T512BF float amp__gemm_peak_dpbf16(long n) {
  __m512 x = _mm512_castsi512_ps(_mm512_set1_epi32(0x3a833a83)), y = x;   /* bf16 pairs of about 1e-3 */
  long i;
#define AMP__OP(c) _mm512_dpbf16_ps(c, (__m512bh)x, (__m512bh)y)
#define AMP__Z(i) _mm512_set1_ps((float)(i))
  AMP__PEAK_ACC12(__m512, AMP__Z, AMP__OP)
#undef AMP__OP
#undef AMP__Z
  c0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)), _mm512_add_ps(c4, c5));
  c6 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c6, c7), _mm512_add_ps(c8, c9)), _mm512_add_ps(c10, c11));
  return _mm512_reduce_add_ps(_mm512_add_ps(c0, c6));
}
static __attribute__((noinline)) AMP__FMA2 float amp__gemm_peak_fma256(long n) {
  __m256 x = _mm256_set1_ps(1e-3f), y = _mm256_set1_ps(1e-3f);
  float r[8];
  long i;
#define AMP__OP(c) _mm256_fmadd_ps(x, y, c)
#define AMP__Z(i) _mm256_set1_ps((float)(i))
  AMP__PEAK_ACC12(__m256, AMP__Z, AMP__OP)
#undef AMP__OP
#undef AMP__Z
  c0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)), _mm256_add_ps(c4, c5));
  c6 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c6, c7), _mm256_add_ps(c8, c9)), _mm256_add_ps(c10, c11));
  _mm256_storeu_ps(r, _mm256_add_ps(c0, c6));
  _mm256_zeroupper();
  return r[0] + r[1] + r[2] + r[3] + r[4] + r[5] + r[6] + r[7];
}
#undef AMP__PEAK_ACC12
/* The peak loops by kind (0 vfmadd231ps zmm, 1 vdpbf16ps zmm, 2 vfmadd231ps ymm) and the flops of
   one round of each; the caller checks that the CPU runs the kind (amp__gemm_isa). */
static void amp__gemm_peak_loop(int kind, long n) {
  /* the result stored to a volatile, so no loop is left out; a local one: threads may measure at once */
  volatile float sink = kind == 0 ? amp__gemm_peak_fma512(n) : kind == 1 ? amp__gemm_peak_dpbf16(n) : amp__gemm_peak_fma256(n);
  (void)sink;
  if (kind != 2) __asm__ __volatile__("vzeroupper");
}
static double amp__gemm_peak_flops(int kind) { return kind == 0 ? 12.0 * 32 : kind == 1 ? 12.0 * 64 : 12.0 * 16; }

/* 1 when vdpbf16ps delivers at least the FMA's flop rate on this core (see above). */
static int amp__gemm_dpbf16_measure(void) {
  unsigned long long best[2] = {~0ull, ~0ull};
  int r, kind;
  amp__gemm_peak_loop(0, 8192);   /* ~100k instructions: Intel cores run AVX-512 slowly for the first ~20 us */
  for (r = 0; r < 7; r++)
    for (kind = 0; kind < 2; kind++) {
      unsigned long long t0 = amp__rdtsc(), t;
      amp__gemm_peak_loop(kind, 512);
      t = amp__rdtsc() - t0;
      if (t < best[kind]) best[kind] = t;
    }
  /* the flop rates, for the same number of rounds */
  return amp__gemm_peak_flops(1) / (double)best[1] >= amp__gemm_peak_flops(0) / (double)best[0];
}

/* ---- 8-lane loads, transposes and packing (AVX2 + F16C: the FMA kernel's, and the AVX-512
   kernels' 8 x 8 transposes) ----
   Up to 8 elements of type t at p (n of them, 1 to 8; the rest read as 0) as 8 f32 lanes,
   exactly: amp_convert's own 8-lane loads (amp__ld8, amp__fp8_dec8), a short run through a zeroed
   buffer so that nothing past the n elements is read. */
AMP__INLINE AMP__FMA2 __m256 amp__gemm_ld8(const void *p, amp_dtype t, int n) {
  unsigned char buf[32];
  if (n < 8) {
    memset(buf, 0, sizeof buf);
    memcpy(buf, p, (size_t)n * amp_dtype_size(t));
    p = buf;
  }
  if (amp__dtype_fp8(t) >= 0) return amp__fp8_dec8((const amp_fp8 *)p, amp__dtype_fp8(t));
  return amp__ld8(t, p);
}
/* The 8 rows of an 8 x 8 block (row l at p + l * rb bytes, type t) as f32 into v[0..7]: the type
   chosen once per block and the eight loads straight-line, so that the block stays in registers
   (a loop of loads, each with the switch on t inside, kept it on the stack). */
#define AMP__LD8X8_(LD) \
  v[0] = LD(p); v[1] = LD(p + rb); v[2] = LD(p + 2 * rb); v[3] = LD(p + 3 * rb); \
  v[4] = LD(p + 4 * rb); v[5] = LD(p + 5 * rb); v[6] = LD(p + 6 * rb); v[7] = LD(p + 7 * rb);
#define AMP__LD8_FP8_(q) amp__fp8_dec8((const amp_fp8 *)(q), e5m2)
AMP__INLINE AMP__FMA2 void amp__gemm_ld8x8(__m256 *v, const char *p, size_t rb, amp_dtype t) {
  int e5m2 = amp__dtype_fp8(t);
  if (e5m2 >= 0) { AMP__LD8X8_(AMP__LD8_FP8_) return; }
#define AMP__V_(E, N, T, S) { AMP__LD8X8_(amp__ld8_##N) } return;
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
  { int l; for (l = 0; l < 8; l++) v[l] = _mm256_setzero_ps(); }
}
#undef AMP__LD8_FP8_
#undef AMP__LD8X8_
/* Transposes the 8 x 8 block r[0..7] (rows) in place into columns: pure data movement, so it
   moves bf16 pairs (32-bit words) as well as floats. */
AMP__INLINE AMP__FMA2 void amp__gemm_tr8(__m256 *r) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20); r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20); r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31); r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31); r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* v[0..7] stored at d, d + ld, ..., d + 7 * ld: straight-line, as amp__gemm_ld8x8 loads. */
AMP__INLINE AMP__FMA2 void amp__gemm_st8x8(float *d, size_t ld, const __m256 *v) {
  _mm256_storeu_ps(d, v[0]); _mm256_storeu_ps(d + ld, v[1]); _mm256_storeu_ps(d + 2 * ld, v[2]);
  _mm256_storeu_ps(d + 3 * ld, v[3]); _mm256_storeu_ps(d + 4 * ld, v[4]); _mm256_storeu_ps(d + 5 * ld, v[5]);
  _mm256_storeu_ps(d + 6 * ld, v[6]); _mm256_storeu_ps(d + 7 * ld, v[7]);
}

/* amp__gemm_pack's layout where a row of X is contiguous (cs 1) and W is a multiple of 8 (B's
   slivers of a transposed B): 8 x 8 blocks transposed in registers, then the rest 8 columns a
   load. The AVX-512 packing takes this path too. */
static AMP__FMA2 void amp__gemm_pack_tr8(float *dst, int W, const void *x, amp_dtype t, size_t rs, int rows, int cols) {
  size_t es = amp_dtype_size(t);
  int s, r, c, l, ns = (rows + W - 1) / W;
  for (s = 0; s < ns; s++) {
    float *d = dst + (size_t)s * W * cols, tmp[8];
    int h = rows - s * W < W ? rows - s * W : W, r8 = h / 8 * 8, c8 = cols / 8 * 8;
    const char *xs = (const char *)x + (size_t)s * W * rs * es;
    for (r = 0; r < r8; r += 8)
      for (c = 0; c < c8; c += 8) {
        __m256 v[8];
        amp__gemm_ld8x8(v, xs + ((size_t)r * rs + (size_t)c) * es, rs * es, t);
        amp__gemm_tr8(v);
        amp__gemm_st8x8(d + (size_t)c * W + r, (size_t)W, v);
      }
    for (r = 0; r < h; r++) {   /* the columns past c8 of the first r8 rows, every column of the others */
      const char *xr = xs + (size_t)r * rs * es;
      for (c = r < r8 ? c8 : 0; c < cols; c += 8) {
        int n = cols - c < 8 ? cols - c : 8;
        _mm256_storeu_ps(tmp, amp__gemm_ld8(xr + (size_t)c * es, t, n));
        for (l = 0; l < n; l++) d[(size_t)(c + l) * W + r] = tmp[l];
      }
    }
    for (r = h; r < W; r++) for (c = 0; c < cols; c++) d[(size_t)c * W + r] = 0.0f;
  }
}

/* Column c + 4 of a column-contiguous X (columns cs elements of es bytes apart, rows long), asked
   for while column c is copied: its lines are on their way when the packing reaches it. */
AMP__INLINE AMP__FMA2 void amp__gemm_prefetch_col(const char *xc, size_t cs, size_t es, int c, int cols, int rows) {
  size_t o;
  if (c + 4 >= cols) return;
  for (o = 0; o < (size_t)rows * es; o += 64) _mm_prefetch(xc + (size_t)4 * cs * es + o, _MM_HINT_T0);
}

/* amp__gemm_pack_fma's rs 1 case: columns front to back, each read once, in order, into every sliver; 8 rows a
   load by LD (the type's own 8-lane load, chosen once per call: with amp__gemm_ld8's test of the
   type at every load, this loop took a quarter of the demo's 64 x 256 x 784 product), a short
   group (X's last rows) through amp__gemm_ld8. */
#define AMP__GEMM_PACK_COLS_(LD) \
  for (c = 0; c < cols; c++) { \
    const char *xc = (const char *)x + (size_t)c * cs * es; \
    amp__gemm_prefetch_col(xc, cs, es, c, cols, rows); \
    for (s = 0; s < whole; s++)   /* slivers of whole 8-row groups: plain loads and stores */ \
      for (rr = 0; rr < W; rr += 8) \
        _mm256_storeu_ps(dst + (size_t)s * W * cols + (size_t)c * W + rr, LD(xc + (size_t)(s * W + rr) * es)); \
    for (; s < ns; s++) { \
      float *d = dst + (size_t)s * W * cols + (size_t)c * W; \
      int h = rows - s * W;   /* the rows from this sliver's first to X's last */ \
      for (rr = 0; rr < W; rr += 8) { \
        int nw = W - rr < 8 ? W - rr : 8, nl = h - rr < 8 ? h - rr : 8; \
        const char *xr = xc + (size_t)(s * W + rr) * es; \
        __m256 v = nl == 8 ? LD(xr) : nl > 0 ? amp__gemm_ld8(xr, t, nl) : _mm256_setzero_ps(); \
        if (nw == 8) { _mm256_storeu_ps(d + rr, v); continue; } \
        _mm256_storeu_ps(tmp, v); \
        memcpy(d + rr, tmp, (size_t)nw * sizeof(float)); \
      } \
    } \
  }
#define AMP__GEMM_LD8_FP8_(q) amp__fp8_dec8((const amp_fp8 *)(const void *)(q), e5m2)
/* amp__gemm_pack's layout for the FMA kernel (W 6 for A's slivers, 16 for B's), with AVX2 loads
   and conversions (the same values: every conversion to f32 is exact). A column of X contiguous
   (rs 1: a row-major B, a transposed A): each sliver's part of each column, 8 rows a load (a
   load may read rows of the next sliver, never past X's last row); a row contiguous: the 8 x 8
   transposes (B's slivers; A's rows are read in place, amp__gemm_micro_fma_ra); other strides:
   amp__gemm_pack. */
static AMP__FMA2 void amp__gemm_pack_fma(float *dst, int W, const void *x, amp_dtype t, size_t rs, size_t cs, int rows,
                                         int cols) {
  size_t es = amp_dtype_size(t);
  int s, c, rr, ns = (rows + W - 1) / W;
  if (rs == 1) {
    float tmp[8];
    int e5m2 = amp__dtype_fp8(t), whole = W % 8 ? 0 : rows / W;
    if (e5m2 >= 0) { AMP__GEMM_PACK_COLS_(AMP__GEMM_LD8_FP8_) return; }
#define AMP__V_(E, N, T, S) { AMP__GEMM_PACK_COLS_(amp__ld8_##N) } return;
    AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
    return;
  }
  if (cs == 1 && W % 8 == 0) { amp__gemm_pack_tr8(dst, W, x, t, rs, rows, cols); return; }
  amp__gemm_pack(dst, W, x, t, rs, cs, rows, cols);
}
#undef AMP__GEMM_LD8_FP8_
#undef AMP__GEMM_PACK_COLS_

/* rows x cols of x (row r at x + r*rs elements, contiguous along the columns) widened exactly to
   f32 rows cols apart, by amp_convert (the FMA kernel's A of another type than f32, which
   amp__gemm_micro_fma_ra then reads in place). */
static void amp__gemm_widen_rows(float *dst, const void *x, amp_dtype t, size_t rs, int rows, int cols) {
  size_t es = amp_dtype_size(t);
  int r;
  for (r = 0; r < rows; r++) amp_convert(dst + (size_t)r * cols, AMP_F32, (const char *)x + (size_t)r * rs * es, t, (size_t)cols);
}

/* The FMA kernel's C epilogue (amp__gemm_put's on 8 lanes, the loads amp__gemm_ld8's):
   w (1 to 8) lanes of C of type ct at c from their accumulators, c = act(alpha acc (+ beta c)
   (+ bias)), each operation rounded (no contraction: these are separate multiplies and adds),
   then rounded once to ct by amp_convert's 8-lane store; lanes past w are neither read nor
   written. GCC fuses the intrinsics' plain vector arithmetic by default in GNU C, clang under
   -ffp-contract=fast whatever the pragmas say: the exact region and attribute keep GCC's apart,
   a register barrier on each product clang's. */
AMP__EXACT_BEGIN
AMP__INLINE AMP__FMA2 AMP__EXACT_FP void amp__gemm_out8(void *c, amp_dtype ct, __m256 acc, int w, __m256 va, float beta,
                                                        __m256 vb, const float *bias, int act) {
  __m256 t = _mm256_mul_ps(va, acc), bc;
  unsigned char buf[32];
  AMP__IN_REG(t);   /* clang fuses the intrinsics' plain arithmetic whatever the pragmas say */
  if (beta != 0.0f) {
    bc = _mm256_mul_ps(vb, amp__gemm_ld8(c, ct, w));
    AMP__IN_REG(bc);
    t = _mm256_add_ps(t, bc);
  }
  if (bias) t = _mm256_add_ps(t, amp__gemm_ld8(bias, AMP_F32, w));
  if (act == AMP_ACT_RELU) t = _mm256_max_ps(t, _mm256_setzero_ps());   /* 0 for NaN and -0, as amp__act */
  if (w == 8) { amp__st8(ct, c, t, 0); return; }
  amp__st8(ct, buf, t, 0);
  memcpy(c, buf, (size_t)w * amp_dtype_size(ct));
}
/* A finished 6 x 16 tile (buf, row by row) into C through out (act NONE or RELU). */
static AMP__FMA2 AMP__EXACT_FP void amp__gemm_put_fma(const amp__gemm_out *out, const float *buf) {
  int w0 = out->cols < 8 ? out->cols : 8, w1 = out->cols - w0, r;
  size_t es = amp_dtype_size(out->ct);
  __m256 va = _mm256_set1_ps(out->alpha), vb = _mm256_set1_ps(out->beta);
  for (r = 0; r < out->rows; r++) {
    char *cr = (char *)out->c + (size_t)r * out->ldc * es;
    amp__gemm_out8(cr, out->ct, _mm256_load_ps(buf + r * 16), w0, va, out->beta, vb, out->bias, out->act);
    if (w1 > 0)
      amp__gemm_out8(cr + 8 * es, out->ct, _mm256_load_ps(buf + r * 16 + 8), w1, va, out->beta, vb,
                     out->bias ? out->bias + 8 : NULL, out->act);
  }
}
AMP__EXACT_END

/* AVX2 + FMA: 6 x 16 tiles (12 YMM accumulators), acc = fma(a, b, acc) for p in order. AT(r):
   the address of row r's element p of A, in the packed sliver or (the _ra kernel) in A's row. */
#define AMP__GEMM_FMA6_BODY(AT)                                                                                      \
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;                                                 \
  int p;                                                                                                             \
  if (acc) {                                                                                                         \
    c00 = _mm256_load_ps(tile + 0); c01 = _mm256_load_ps(tile + 8); c10 = _mm256_load_ps(tile + 16);                 \
    c11 = _mm256_load_ps(tile + 24); c20 = _mm256_load_ps(tile + 32); c21 = _mm256_load_ps(tile + 40);               \
    c30 = _mm256_load_ps(tile + 48); c31 = _mm256_load_ps(tile + 56); c40 = _mm256_load_ps(tile + 64);               \
    c41 = _mm256_load_ps(tile + 72); c50 = _mm256_load_ps(tile + 80); c51 = _mm256_load_ps(tile + 88);               \
  } else {                                                                                                           \
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();                     \
  }                                                                                                                  \
  for (p = 0; p < kc; p++) {                                                                                         \
    __m256 b0 = _mm256_load_ps(b + (size_t)p * 16), b1 = _mm256_load_ps(b + (size_t)p * 16 + 8), x;                  \
    x = _mm256_broadcast_ss(AT(0)); c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);            \
    x = _mm256_broadcast_ss(AT(1)); c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);            \
    x = _mm256_broadcast_ss(AT(2)); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);            \
    x = _mm256_broadcast_ss(AT(3)); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);            \
    x = _mm256_broadcast_ss(AT(4)); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);            \
    x = _mm256_broadcast_ss(AT(5)); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);            \
  }                                                                                                                  \
  if (out && out->plain && out->rows == 6 && out->cols == 16) {   /* C = (alpha) acc: from the registers */      \
    float *c0 = (float *)out->c;                                                                                     \
    size_t l = out->ldc;                                                                                             \
    if (out->plain == 2) {                                                                                           \
      __m256 va = _mm256_set1_ps(out->alpha);                                                                        \
      c00 = _mm256_mul_ps(va, c00); c01 = _mm256_mul_ps(va, c01); c10 = _mm256_mul_ps(va, c10);                      \
      c11 = _mm256_mul_ps(va, c11); c20 = _mm256_mul_ps(va, c20); c21 = _mm256_mul_ps(va, c21);                      \
      c30 = _mm256_mul_ps(va, c30); c31 = _mm256_mul_ps(va, c31); c40 = _mm256_mul_ps(va, c40);                      \
      c41 = _mm256_mul_ps(va, c41); c50 = _mm256_mul_ps(va, c50); c51 = _mm256_mul_ps(va, c51);                      \
    }                                                                                                                \
    _mm256_storeu_ps(c0, c00); _mm256_storeu_ps(c0 + 8, c01); _mm256_storeu_ps(c0 + l, c10);                         \
    _mm256_storeu_ps(c0 + l + 8, c11); _mm256_storeu_ps(c0 + 2 * l, c20); _mm256_storeu_ps(c0 + 2 * l + 8, c21);     \
    _mm256_storeu_ps(c0 + 3 * l, c30); _mm256_storeu_ps(c0 + 3 * l + 8, c31); _mm256_storeu_ps(c0 + 4 * l, c40);     \
    _mm256_storeu_ps(c0 + 4 * l + 8, c41); _mm256_storeu_ps(c0 + 5 * l, c50); _mm256_storeu_ps(c0 + 5 * l + 8, c51); \
  } else {                                                                                                           \
    float buf[96] __attribute__((aligned(32))), *to = out ? buf : tile;                                              \
    _mm256_store_ps(to + 0, c00); _mm256_store_ps(to + 8, c01); _mm256_store_ps(to + 16, c10);                       \
    _mm256_store_ps(to + 24, c11); _mm256_store_ps(to + 32, c20); _mm256_store_ps(to + 40, c21);                     \
    _mm256_store_ps(to + 48, c30); _mm256_store_ps(to + 56, c31); _mm256_store_ps(to + 64, c40);                     \
    _mm256_store_ps(to + 72, c41); _mm256_store_ps(to + 80, c50); _mm256_store_ps(to + 88, c51);                     \
    if (out) amp__gemm_put_fma(out, buf);                                                                            \
  }
#define AMP__GEMM_AT_PACKED(r) (a + (size_t)p * 6 + (r))
static AMP__FMA2 void amp__gemm_micro_fma(int kc, const float *a, const float *b, float *tile, int acc,
                                          const amp__gemm_out *out) {
  AMP__GEMM_FMA6_BODY(AMP__GEMM_AT_PACKED)
}
#undef AMP__GEMM_AT_PACKED
/* The same kernel reading an f32 A in place (amp__gemm_micro_ra_fn, rows past nrows read row 0
   again): each broadcast the same value as from the packed sliver, so the same FMAs in the same
   order, the same bits. Packing A (a transpose) took more time than the FMAs in the demo's
   products on an AVX2 core. */
#define AMP__GEMM_AT_ROWS(r) (a##r + p)
static AMP__FMA2 void amp__gemm_micro_fma_ra(int kc, const float *a, size_t lda, int nrows, const float *b, float *tile,
                                             int acc, const amp__gemm_out *out) {
  const float *a0 = a, *a1 = a + (nrows > 1 ? lda : 0), *a2 = a + (nrows > 2 ? 2 * lda : 0);
  const float *a3 = a + (nrows > 3 ? 3 * lda : 0), *a4 = a + (nrows > 4 ? 4 * lda : 0);
  const float *a5 = a + (nrows > 5 ? 5 * lda : 0);
  AMP__GEMM_FMA6_BODY(AMP__GEMM_AT_ROWS)
}
#undef AMP__GEMM_AT_ROWS
#undef AMP__GEMM_FMA6_BODY

AMP__EXACT_BEGIN
/* 16 lanes of C (type ct) from their accumulators (m: the lanes written): c = act(alpha acc
   (+ beta c) (+ bias)), the element math of amp__gemm_blend and amp__gemm_epi (ReLU: max(x, 0)
   gives 0 for NaN and -0, as x > 0 ? x : 0 does), rounded once to ct by amp_convert's own 16-lane
   load and store (amp__ld16, amp__st16: the same bits). act is NONE or RELU. No contraction, as in
   amp__gemm_out8. */
static inline AMP__T512 AMP__EXACT_FP __m512 amp__gemm_epi16(const void *c, amp_dtype ct, __m512 acc, __mmask16 m, __m512 va,
                                               float beta, __m512 vb, const float *bias, int act) {
  __m512 t = _mm512_mul_ps(va, acc), bc;
  AMP__IN_REG(t);   /* clang fuses the intrinsics' plain arithmetic whatever the pragmas say */
  if (beta != 0.0f) {
    bc = _mm512_mul_ps(vb, amp__ld16(ct, c, m));
    AMP__IN_REG(bc);
    t = _mm512_add_ps(t, bc);
  }
  if (bias) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(m, bias));
  if (act == AMP_ACT_RELU) t = _mm512_max_ps(t, _mm512_setzero_ps());
  return t;
}
static inline AMP__T512 AMP__EXACT_FP void amp__gemm_out16(void *c, amp_dtype ct, __m512 acc, __mmask16 m, __m512 va, float beta,
                                             __m512 vb, const float *bias, int act) {
  amp__st16(ct, c, amp__gemm_epi16(c, ct, acc, m, va, beta, vb, bias, act), m, 0);
}

/* bf16 C on an AVX512_BF16 CPU: vcvtne2ps2bf16 rounds 32 lanes in one instruction, with
   amp_convert's bits (round to nearest even, NaN kept quiet: checked on every class of input)
   except for f32 subnormals, which it flushes to 0: a row with one is rounded by amp_convert's
   own code (amp__st16) instead. */
static AMP__T512BF AMP__EXACT_FP void amp__gemm_put_bf16(const amp__gemm_out *out, const float *buf, __mmask16 m0, __mmask16 m1,
                                           __m512 va, __m512 vb) {
  const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x007fffff);
  const float *bias1 = out->bias ? out->bias + 16 : NULL;
  __mmask32 m = (__mmask32)m0 | (__mmask32)m1 << 16;
  int r;
  for (r = 0; r < out->rows; r++) {
    uint16_t *cr = (uint16_t *)out->c + (size_t)r * out->ldc;
    __m512 t0 = amp__gemm_epi16(cr, AMP_BF16, _mm512_load_ps(buf + r * 32), m0, va, out->beta, vb, out->bias, out->act);
    __m512 t1 =
        amp__gemm_epi16(cr + 16, AMP_BF16, _mm512_load_ps(buf + r * 32 + 16), m1, va, out->beta, vb, bias1, out->act);
    __m512i u0 = _mm512_castps_si512(t0), u1 = _mm512_castps_si512(t1);
    if ((_mm512_testn_epi32_mask(u0, expo) & _mm512_test_epi32_mask(u0, mant)) |
        (_mm512_testn_epi32_mask(u1, expo) & _mm512_test_epi32_mask(u1, mant))) {
      amp__st16(AMP_BF16, cr, t0, m0, 0);
      if (m1) amp__st16(AMP_BF16, cr + 16, t1, m1, 0);
      continue;
    }
    _mm512_mask_storeu_epi16(cr, m, (__m512i)_mm512_cvtne2ps_pbh(t1, t0));
  }
}

/* A finished 8 x 32 tile (buf, row by row) into C through out: one loop per type of C, so that
   each is compiled with its own rounding and nothing else. */
static AMP__T512 AMP__EXACT_FP void amp__gemm_put(const amp__gemm_out *out, const float *buf) {
  int w = out->cols, r;
  __mmask16 m0 = w >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << w) - 1u);
  __mmask16 m1 = w >= 32 ? (__mmask16)0xffff : w > 16 ? (__mmask16)((1u << (w - 16)) - 1u) : (__mmask16)0;
  __m512 va = _mm512_set1_ps(out->alpha), vb = _mm512_set1_ps(out->beta);
  const float *bias1 = out->bias ? out->bias + 16 : NULL;
#define AMP__GEMM_PUT_ROWS(T, es) \
  for (r = 0; r < out->rows; r++) { \
    char *cr = (char *)out->c + (size_t)r * out->ldc * (es); \
    amp__gemm_out16(cr, T, _mm512_load_ps(buf + r * 32), m0, va, out->beta, vb, out->bias, out->act); \
    if (m1) \
      amp__gemm_out16(cr + 16 * (es), T, _mm512_load_ps(buf + r * 32 + 16), m1, va, out->beta, vb, bias1, out->act); \
  }
  if (out->ct == AMP_BF16 && out->bf16_hw) { amp__gemm_put_bf16(out, buf, m0, m1, va, vb); return; }
#define AMP__GEMM_PUT_(E, N, T, S) AMP__GEMM_PUT_ROWS(E, S) break;
  AMP__DTYPE_VSWITCH(out->ct, AMP__GEMM_PUT_)
#undef AMP__GEMM_PUT_
#undef AMP__GEMM_PUT_ROWS
}
AMP__EXACT_END

/* AVX-512: 8 x 32 tiles (16 ZMM accumulators). The row macro: row r of the tile. */
#define AMP__GEMM_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define AMP__GEMM_DECL(r) __m512 c##r##0, c##r##1;
#define AMP__GEMM_LOAD(r) c##r##0 = _mm512_load_ps(tile + (r) * 32); c##r##1 = _mm512_load_ps(tile + (r) * 32 + 16);
#define AMP__GEMM_ZERO(r) c##r##0 = _mm512_setzero_ps(); c##r##1 = c##r##0;
#define AMP__GEMM_STORE(r) _mm512_store_ps(tile + (r) * 32, c##r##0); _mm512_store_ps(tile + (r) * 32 + 16, c##r##1);
/* The end of the kernels: the finished tile to `tile`; a whole tile of a plain f32 C (C = acc)
   straight from the registers; else through a buffer on the stack to C. */
#define AMP__GEMM_STORE_BUF(r) _mm512_store_ps(buf + (r) * 32, c##r##0); _mm512_store_ps(buf + (r) * 32 + 16, c##r##1);
#define AMP__GEMM_STORE_C(r) _mm512_storeu_ps(c0 + (r) * l, c##r##0); _mm512_storeu_ps(c0 + (r) * l + 16, c##r##1);
#define AMP__GEMM_SCALE(r) c##r##0 = _mm512_mul_ps(va, c##r##0); c##r##1 = _mm512_mul_ps(va, c##r##1);
#define AMP__GEMM_FINISH                                                                                       \
  if (!out) { AMP__GEMM_ROWS8(AMP__GEMM_STORE) } else if (out->plain && out->rows == 8 && out->cols == 32) {   \
    float *c0 = (float *)out->c;                                                                               \
    size_t l = out->ldc;                                                                                       \
    if (out->plain == 2) {                                                                                     \
      __m512 va = _mm512_set1_ps(out->alpha);                                                                  \
      AMP__GEMM_ROWS8(AMP__GEMM_SCALE)                                                                         \
    }                                                                                                          \
    AMP__GEMM_ROWS8(AMP__GEMM_STORE_C)                                                                         \
  } else {                                                                                                     \
    float buf[256] __attribute__((aligned(64)));                                                               \
    AMP__GEMM_ROWS8(AMP__GEMM_STORE_BUF)                                                                       \
    amp__gemm_put(out, buf);                                                                                   \
  }
#define AMP__GEMM_FMA(r) { __m512 x = _mm512_set1_ps(ap[r]); c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0); \
                           c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1); }
#define AMP__GEMM_DPBF(r) { __m512i x = _mm512_set1_epi32(ap[r]); \
                            c##r##0 = _mm512_dpbf16_ps(c##r##0, (__m512bh)x, (__m512bh)b0); \
                            c##r##1 = _mm512_dpbf16_ps(c##r##1, (__m512bh)x, (__m512bh)b1); }

static AMP__T512 void amp__gemm_micro_512(int kc, const float *a, const float *b, float *tile, int acc,
                                          const amp__gemm_out *out) {
  AMP__GEMM_ROWS8(AMP__GEMM_DECL)
  int p;
  if (acc) { AMP__GEMM_ROWS8(AMP__GEMM_LOAD) } else { AMP__GEMM_ROWS8(AMP__GEMM_ZERO) }
  for (p = 0; p < kc; p++) {
    __m512 b0 = _mm512_load_ps(b + (size_t)p * 32), b1 = _mm512_load_ps(b + (size_t)p * 32 + 16);
    const float *ap = a + (size_t)p * 8;
    AMP__GEMM_ROWS8(AMP__GEMM_FMA)
  }
  AMP__GEMM_FINISH
}

/* The same kernel reading an f32 A in place (amp__gemm_micro_ra_fn): each broadcast comes from A's
   row instead of the packed sliver, the same value, so the same FMAs in the same order: the same
   bits. Packing A (a transpose of 8-row slivers) cost the demo's small products a sixth of their
   time; its rows stream from cache as well as the sliver did. */
static AMP__T512 void amp__gemm_micro_512_ra(int kc, const float *a, size_t lda, int nrows, const float *b, float *tile,
                                             int acc, const amp__gemm_out *out) {
  const float *a0 = a, *a1 = a + (nrows > 1 ? lda : 0), *a2 = a + (nrows > 2 ? 2 * lda : 0);
  const float *a3 = a + (nrows > 3 ? 3 * lda : 0), *a4 = a + (nrows > 4 ? 4 * lda : 0);
  const float *a5 = a + (nrows > 5 ? 5 * lda : 0), *a6 = a + (nrows > 6 ? 6 * lda : 0);
  const float *a7 = a + (nrows > 7 ? 7 * lda : 0);
  AMP__GEMM_ROWS8(AMP__GEMM_DECL)
  int p;
  if (acc) { AMP__GEMM_ROWS8(AMP__GEMM_LOAD) } else { AMP__GEMM_ROWS8(AMP__GEMM_ZERO) }
  for (p = 0; p < kc; p++) {
    __m512 b0 = _mm512_load_ps(b + (size_t)p * 32), b1 = _mm512_load_ps(b + (size_t)p * 32 + 16);
#define AMP__GEMM_FMA_RA(r) { __m512 x = _mm512_set1_ps(a##r[p]); c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0); \
                              c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1); }
    AMP__GEMM_ROWS8(AMP__GEMM_FMA_RA)
#undef AMP__GEMM_FMA_RA
  }
  AMP__GEMM_FINISH
}

/* AVX512_BF16: 8 x 32 tiles; a and b hold bf16 pairs along k (one 32-bit word per row and pair),
   each vdpbf16ps adds a(i,2q) b(2q,j) + a(i,2q+1) b(2q+1,j) to 16 accumulators. kc: pairs. */
static AMP__T512BF void amp__gemm_micro_bf16(int kc, const float *af, const float *bf, float *tile, int acc,
                                             const amp__gemm_out *out) {
  const int *a = (const int *)(const void *)af;
  AMP__GEMM_ROWS8(AMP__GEMM_DECL)
  int p;
  if (acc) { AMP__GEMM_ROWS8(AMP__GEMM_LOAD) } else { AMP__GEMM_ROWS8(AMP__GEMM_ZERO) }
  for (p = 0; p < kc; p++) {
    __m512i b0 = _mm512_load_si512((const void *)(bf + (size_t)p * 32)),
            b1 = _mm512_load_si512((const void *)(bf + (size_t)p * 32 + 16));
    const int *ap = a + (size_t)p * 8;
    AMP__GEMM_ROWS8(AMP__GEMM_DPBF)
  }
  AMP__GEMM_FINISH
}

/* The same with op(B) read in place (rows 2q and 2q+1 of a row-major bf16 B): the pairs are made
   in registers (unpacklo/hi of the two rows: the words of b0 hold columns 0-3, 8-11, 16-19, 24-27,
   those of b1 the others), so B is not packed: for a product with few rows (the demo's batch of
   64) packing B cost a fifth of the time. Each vdpbf16ps gets the same two pairs of operands as
   the packed kernel's, so the bits are the same. The accumulators hold the columns in that
   order; tiles in memory and C are in column order (RB_IN, RB_OUT). */
#define AMP__GEMM_RB_IN(r) \
  { \
    __m512 n0 = _mm512_load_ps(tile + (r)*32), n1 = _mm512_load_ps(tile + (r)*32 + 16); \
    c##r##0 = _mm512_permutex2var_ps(n0, to_lo, n1); \
    c##r##1 = _mm512_permutex2var_ps(n0, to_hi, n1); \
  }
#define AMP__GEMM_RB_OUT(r) { __m512 l = c##r##0; c##r##0 = _mm512_permutex2var_ps(l, from0, c##r##1); \
                              c##r##1 = _mm512_permutex2var_ps(l, from1, c##r##1); }
static AMP__T512BF void amp__gemm_micro_bf16_rb(int kc, const float *af, const uint16_t *b, size_t ldb, int ncols,
                                                float *tile, int acc, const amp__gemm_out *out) {
  const int *a = (const int *)(const void *)af;
  const __m512i from0 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i from1 = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
  __mmask32 mk = amp__mask32((size_t)ncols);
  AMP__GEMM_ROWS8(AMP__GEMM_DECL)
  int p;
  if (acc) {
    const __m512i to_lo = _mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2, 1, 0);
    const __m512i to_hi = _mm512_set_epi32(31, 30, 29, 28, 23, 22, 21, 20, 15, 14, 13, 12, 7, 6, 5, 4);
    AMP__GEMM_ROWS8(AMP__GEMM_RB_IN)
  } else { AMP__GEMM_ROWS8(AMP__GEMM_ZERO) }
  for (p = 0; p < kc; p++) {
    const uint16_t *b2 = b + (size_t)(2 * p) * ldb;
    __m512i r0 = _mm512_maskz_loadu_epi16(mk, b2), r1 = _mm512_maskz_loadu_epi16(mk, b2 + ldb);
    __m512i b0 = _mm512_unpacklo_epi16(r0, r1), b1 = _mm512_unpackhi_epi16(r0, r1);
    const int *ap = a + (size_t)p * 8;
    AMP__GEMM_ROWS8(AMP__GEMM_DPBF)
  }
  AMP__GEMM_ROWS8(AMP__GEMM_RB_OUT)
  AMP__GEMM_FINISH
}

/* Up to 16 elements of type t at p (n of them; the rest read as 0) as 16 f32 lanes, exactly. */
static inline AMP__T512 __m512 amp__gemm_ld16_f32(const void *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline AMP__T512 __m512 amp__gemm_ld16_f16(const void *p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
static inline AMP__T512 __m512 amp__gemm_ld16_bf16(const void *p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
/* fp8 codes, exactly, as amp_e4m3_to_f32 / amp_e5m2_to_f32 compute them: E5M2 is the upper byte
   of an f16 (vcvtph2ps); E4M3 normal codes are their bits moved into f32's fields, the subnormals
   m * 2^-9 (exact), 0x7f NaN, the sign put back. */
static inline AMP__T512 __m512 amp__gemm_ld16_fp8(const void *p, __mmask16 m, amp_dtype t) {
  __m512i x = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
  __m512i a, r;
  if (amp__dtype_fp8(t) == 1) return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_slli_epi32(x, 8)));   /* E5M2 */
  a = _mm512_and_si512(x, _mm512_set1_epi32(0x7f));
  r = _mm512_add_epi32(_mm512_slli_epi32(a, 20), _mm512_set1_epi32(120 << 23));
  r = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(8)), r,
                              _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_set1_ps(0.001953125f))));
  r = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(0x7f)), r, _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(_mm512_or_si512(r, _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24)));
}
static inline AMP__T512 __m512 amp__gemm_ld16(const void *p, amp_dtype t, int n) {
  __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
  if (amp__dtype_fp8(t) >= 0) return amp__gemm_ld16_fp8(p, m, t);
#define AMP__V_(E, N, T, S) return amp__gemm_ld16_##N(p, m);
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
  return _mm512_setzero_ps();
}

/* amp__gemm_pack's layout (f32 slivers), with AVX-512 loads and conversions. */
static AMP__T512 void amp__gemm_pack_512(float *dst, int W, const void *x, amp_dtype t, size_t rs, size_t cs, int rows,
                                         int cols) {
  size_t es = amp_dtype_size(t);
  int s, r, c, ns = (rows + W - 1) / W;
  if (rs != 1 && cs != 1) { amp__gemm_pack(dst, W, x, t, rs, cs, rows, cols); return; }
  if (rs == 1 && W % 8 == 0 && W < 16) {   /* a column is contiguous, narrow slivers (A's): 16 rows a load, 8 rows
                                              (one sliver's part) a store */
    int tot = ns * W;
    for (c = 0; c < cols; c++) {
      const char *xc = (const char *)x + (size_t)c * cs * es;
      float *d = dst + (size_t)c * W;   /* rows r .. r+7 of column c */
      int off = 0;                      /* r % W */
      amp__gemm_prefetch_col(xc, cs, es, c, cols, rows);
      for (r = 0; r < tot; r += 16) {
        int nh = rows - r;
        __m512 v = amp__gemm_ld16(xc + (size_t)r * es, t, nh < 0 ? 0 : nh < 16 ? nh : 16);
        _mm256_storeu_ps(d, _mm512_castps512_ps256(v));
        d += 8; off += 8;
        if (off == W) { d += (size_t)W * cols - (size_t)W; off = 0; }
        if (r + 8 < tot) {
          _mm256_storeu_ps(d, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
          d += 8; off += 8;
          if (off == W) { d += (size_t)W * cols - (size_t)W; off = 0; }
        }
      }
    }
    return;
  }
  if (rs == 1 && W == 32) {   /* B's slivers: each written front to back, 32 rows of a column a step */
    for (s = 0; s < ns; s++) {
      int nh = rows - s * W, n0 = nh < 16 ? nh : 16, n1 = nh < 32 ? nh - n0 : 16;
      float *d = dst + (size_t)s * W * cols;
      const char *xs = (const char *)x + (size_t)s * W * es;
      for (c = 0; c < cols; c++) {
        const char *xc = xs + (size_t)c * cs * es;
        if (c + 4 < cols) _mm_prefetch(xc + (size_t)4 * cs * es, _MM_HINT_T0);   /* the column 4 ahead */
        if (c + 4 < cols && es == 4) _mm_prefetch(xc + (size_t)4 * cs * es + 64, _MM_HINT_T0);
        _mm512_storeu_ps(d + (size_t)c * 32, amp__gemm_ld16(xc, t, n0));
        _mm512_storeu_ps(d + (size_t)c * 32 + 16, amp__gemm_ld16(xc + 16 * es, t, n1));
      }
    }
    return;
  }
  if (rs == 1) {   /* a column is contiguous: read it once, 16 at a time, into every sliver */
    for (c = 0; c < cols; c++) {
      const char *xc = (const char *)x + (size_t)c * cs * es;
      amp__gemm_prefetch_col(xc, cs, es, c, cols, rows);
      for (s = 0; s < ns; s++) {
        float *d = dst + (size_t)s * W * cols + (size_t)c * W;
        int rr;
        for (rr = 0; rr < W; rr += 16) {
          int nw = W - rr < 16 ? W - rr : 16, nh = rows - s * W - rr;
          __m512 v = amp__gemm_ld16(xc + (size_t)(s * W + rr) * es, t, nh < 0 ? 0 : nh < nw ? nh : nw);
          _mm512_mask_storeu_ps(d + rr, (__mmask16)((1u << nw) - 1u), v);
        }
      }
    }
    return;
  }
  amp__gemm_pack_tr8(dst, W, x, t, rs, rows, cols);   /* a row is contiguous */
}

/* rows x cols of x (row r at x + r*rs elements, contiguous along the columns) widened exactly to
   f32 rows cols apart: a plain stream, no transpose (amp__gemm_micro_512_ra reads them in place).
   The type chosen once, outside the loops (LD: amp__gemm_ld16's load for it). */
#define AMP__WIDEN_ROWS_(LD) \
  for (r = 0; r < rows; r++) { \
    const char *xr = (const char *)x + (size_t)r * rs * es; \
    float *d = dst + (size_t)r * cols; \
    for (c = 0; c + 16 <= cols; c += 16) _mm512_storeu_ps(d + c, LD(xr + (size_t)c * es, (__mmask16)0xffff)); \
    if (c < cols) _mm512_mask_storeu_ps(d + c, tail, LD(xr + (size_t)c * es, tail)); \
  }
#define AMP__LD16_FP8_(q, m) amp__gemm_ld16_fp8(q, m, t)
static AMP__T512 void amp__gemm_widen_rows_512(float *dst, const void *x, amp_dtype t, size_t rs, int rows, int cols) {
  size_t es = amp_dtype_size(t);
  __mmask16 tail = (__mmask16)((1u << (cols % 16)) - 1u);
  int r, c;
  if (amp__dtype_fp8(t) >= 0) { AMP__WIDEN_ROWS_(AMP__LD16_FP8_) return; }
#define AMP__V_(E, N, T, S) { AMP__WIDEN_ROWS_(amp__gemm_ld16_##N) } return;
  AMP__DTYPE_VSWITCH(t, AMP__V_)
#undef AMP__V_
}
#undef AMP__LD16_FP8_
#undef AMP__WIDEN_ROWS_

/* fp8 codes as bf16 words for the vdpbf16ps kernel's packing (exact: an E4M3 or E5M2 value has at
   most 3 significant bits after its leading one, and its exponent lies in bf16's range). The
   words of codes 0 .. 127, tab[4], from 32 codes at a time widened to f32 (amp__fp8_dec16) and
   their high halves; a code's word from the table by its low 7 bits, and its sign bit on top (the
   words of c and c | 0x80 differ in the sign alone, NaNs too: the tests' exhaustive check of the
   packing compares all 256 codes). */
AMP__AVX512_INLINE void amp__gemm_fp8_wtab(__m512i *tab, int e5m2) {
  const __m512i hi = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
                                      31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  __m128i c = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int i;
  for (i = 0; i < 4; i++) {
    __m512 lo = amp__fp8_dec16(_mm_add_epi8(c, _mm_set1_epi8((char)(32 * i))), e5m2);
    __m512 up = amp__fp8_dec16(_mm_add_epi8(c, _mm_set1_epi8((char)(32 * i + 16))), e5m2);
    tab[i] = _mm512_permutex2var_epi16(_mm512_castps_si512(lo), hi, _mm512_castps_si512(up));
  }
}
/* 32 codes as 32 words: two 64-word lookups (the index's bit 5 picks the register of a pair), bit
   6 picks the pair, bit 7 the sign. From n (<= 32) codes at p (the rest 0). */
AMP__AVX512_INLINE __m512i amp__gemm_fp8_w32(__m256i c, const __m512i *tab) {
  const __m512i w = _mm512_cvtepu8_epi16(c);
  const __m512i lo = _mm512_permutex2var_epi16(tab[0], w, tab[1]), up = _mm512_permutex2var_epi16(tab[2], w, tab[3]);
  const __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40)), lo, up);
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(w, 8), _mm512_set1_epi16((short)0x8000), 0xf8);   /* v | (s & m) */
}
AMP__AVX512_INLINE __m512i amp__gemm_fp8_bf16x32(const uint8_t *p, int n, const __m512i *tab) {
  return amp__gemm_fp8_w32(_mm256_maskz_loadu_epi8(amp__mask32((size_t)n), p), tab);
}
/* 8 rows of 16 codes (rb bytes apart: rows contiguous along k) as 8 pairs' words of each row, stored
   pair by pair, 8 rows a pair: d[q * ld + r], q, r < 8. The codes' pairs are moved as 16-bit units
   first (row r's pair q, word 8 r + q of the two registers, to word 8 q + r), then widened. */
AMP__AVX512_INLINE void amp__gemm_fp8_pairs8x8(uint32_t *d, size_t ld, const uint8_t *p, size_t rb, const __m512i *tab) {
  const __m512i t0 = _mm512_set_epi16(59, 51, 43, 35, 27, 19, 11, 3, 58, 50, 42, 34, 26, 18, 10, 2,
                                      57, 49, 41, 33, 25, 17, 9, 1, 56, 48, 40, 32, 24, 16, 8, 0);
  const __m512i t1 = _mm512_add_epi16(t0, _mm512_set1_epi16(4));
  __m512i z0 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)p)), z1, o[2];
  int h;
  z0 = _mm512_inserti32x4(z0, _mm_loadu_si128((const __m128i *)(const void *)(p + rb)), 1);
  z0 = _mm512_inserti32x4(z0, _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * rb)), 2);
  z0 = _mm512_inserti32x4(z0, _mm_loadu_si128((const __m128i *)(const void *)(p + 3 * rb)), 3);
  z1 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(p + 4 * rb)));
  z1 = _mm512_inserti32x4(z1, _mm_loadu_si128((const __m128i *)(const void *)(p + 5 * rb)), 1);
  z1 = _mm512_inserti32x4(z1, _mm_loadu_si128((const __m128i *)(const void *)(p + 6 * rb)), 2);
  z1 = _mm512_inserti32x4(z1, _mm_loadu_si128((const __m128i *)(const void *)(p + 7 * rb)), 3);
  o[0] = _mm512_permutex2var_epi16(z0, t0, z1);   /* pairs 0 .. 3, 8 rows each */
  o[1] = _mm512_permutex2var_epi16(z0, t1, z1);   /* pairs 4 .. 7 */
  for (h = 0; h < 4; h++) {
    __m512i w = amp__gemm_fp8_w32(h & 1 ? _mm512_extracti64x4_epi64(o[h >> 1], 1) : _mm512_castsi512_si256(o[h >> 1]), tab);
    _mm256_storeu_si256((__m256i *)(void *)(d + (size_t)(2 * h) * ld), _mm512_castsi512_si256(w));
    _mm256_storeu_si256((__m256i *)(void *)(d + (size_t)(2 * h + 1) * ld), _mm512_extracti64x4_epi64(w, 1));
  }
}
static uint16_t amp__gemm_fp8_w1(amp_fp8 v, int e5m2) {
  return (uint16_t)(amp__f32_bits(e5m2 ? amp_e5m2_to_f32(v) : amp_e4m3_to_f32(v)) >> 16);
}
/* (amp__gemm_pack_pairs) n (0 .. 32) bf16 words from element e of x on (the rest 0); element e
   as a bf16 word; the prefetch of element e's line. fp8 codes widened. */
#define AMP__PP_LD32(e, n) \
  (f8 ? amp__gemm_fp8_bf16x32((const uint8_t *)x + (e), (n), tab) : _mm512_maskz_loadu_epi16(amp__mask32((size_t)(n)), xh + (e)))
#define AMP__PP_W(e) ((uint32_t)(f8 ? amp__gemm_fp8_w1(((const uint8_t *)x)[e], e5m2) : xh[e]))
#define AMP__PP_PF(e) _mm_prefetch((const char *)x + (e) * (size_t)es, _MM_HINT_T0)
/* bf16 pairs: word q of row r of a sliver is a(r, 2q) | a(r, 2q+1) << 16 (the element past an odd
   `cols` is 0), stored dst32[s*W*kq + q*W + r] with kq = ceil(cols / 2). fp8 operands: widened to
   bf16 (exact) as they are read. */
static AMP__T512 void amp__gemm_pack_pairs(float *dstf, int W, const void *x, amp_dtype t, size_t rs, size_t cs,
                                           int rows, int cols) {
  uint32_t *dst = (uint32_t *)(void *)dstf;
  const uint16_t *xh = (const uint16_t *)x;
  const int f8 = amp__dtype_is_fp8(t), e5m2 = f8 && amp__dtype_fp8(t), es = f8 ? 1 : 2;
  int s, r, q, ns = (rows + W - 1) / W, kq = (cols + 1) / 2;
  __m512i tab[4];
  if (f8) amp__gemm_fp8_wtab(tab, e5m2);
  if (rs == 1) {   /* columns contiguous: interleave columns 2q and 2q+1, read once, 32 rows at a time */
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                        39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    if (W == 32) {   /* B's slivers: each written front to back, 32 rows of 2 columns a step */
      for (s = 0; s < ns; s++) {
        int nh = rows - s * W, n = nh < 32 ? nh : 32;
        uint32_t *d = dst + (size_t)s * W * kq;
        for (q = 0; q < kq; q++) {
          const size_t x0 = (size_t)s * W + (size_t)(2 * q) * cs;
          __m512i v0, v1;
          if (2 * q + 9 < cols) {   /* the pair 4 ahead */
            AMP__PP_PF(x0 + 8 * cs);
            AMP__PP_PF(x0 + 9 * cs);
          }
          v0 = AMP__PP_LD32(x0, n);
          v1 = 2 * q + 1 < cols ? AMP__PP_LD32(x0 + cs, n) : _mm512_setzero_si512();
          _mm512_storeu_si512((void *)(d + (size_t)q * 32), _mm512_permutex2var_epi16(v0, lo, v1));
          _mm512_storeu_si512((void *)(d + (size_t)q * 32 + 16), _mm512_permutex2var_epi16(v0, hi, v1));
        }
      }
      return;
    }
    for (q = 0; q < kq; q++) {
      const size_t x0 = (size_t)(2 * q) * cs, x1 = x0 + cs;
      int two = 2 * q + 1 < cols;
      if (2 * q + 5 < cols) {   /* the pair 2 ahead: its lines are on their way while this one is copied */
        size_t off;
        for (off = 0; off < (size_t)rows; off += (size_t)(64 / es)) {
          AMP__PP_PF(x0 + 4 * cs + off);
          AMP__PP_PF(x0 + 5 * cs + off);
        }
      }
      if (W % 8 == 0 && W < 32) {   /* narrow slivers (A's): 32 rows a load, 8 rows (one sliver's part) a store */
        int tot = ns * W, off = 0, g;
        uint32_t *d = dst + (size_t)q * W;   /* rows r .. r+7 of pair q */
        for (r = 0; r < tot; r += 32) {
          int nh = rows - r, n = nh < 0 ? 0 : nh < 32 ? nh : 32;
          __m512i v0 = AMP__PP_LD32(x0 + (size_t)r, n), v1, w[2];
          v1 = two ? AMP__PP_LD32(x1 + (size_t)r, n) : _mm512_setzero_si512();
          w[0] = _mm512_permutex2var_epi16(v0, lo, v1); w[1] = _mm512_permutex2var_epi16(v0, hi, v1);
          for (g = 0; g < 4 && r + 8 * g < tot; g++) {
            __m256i h8 = g & 1 ? _mm512_extracti64x4_epi64(w[g >> 1], 1) : _mm512_castsi512_si256(w[g >> 1]);
            _mm256_storeu_si256((__m256i *)(void *)d, h8);
            d += 8; off += 8;
            if (off == W) { d += (size_t)W * kq - (size_t)W; off = 0; }
          }
        }
        continue;
      }
      for (s = 0; s < ns; s++) {
        uint32_t *d = dst + (size_t)s * W * kq + (size_t)q * W;
        for (r = 0; r < W; r += 32) {
          int nw = W - r < 32 ? W - r : 32, nh = rows - s * W - r, n;
          __m512i v0, v1, w0, w1;
          int n0, n1;
          n = nh < 0 ? 0 : nh < nw ? nh : nw;
          v0 = AMP__PP_LD32(x0 + (size_t)(s * W + r), n);
          v1 = two ? AMP__PP_LD32(x1 + (size_t)(s * W + r), n) : _mm512_setzero_si512();
          w0 = _mm512_permutex2var_epi16(v0, lo, v1); w1 = _mm512_permutex2var_epi16(v0, hi, v1);
          n0 = nw < 16 ? nw : 16; n1 = nw - n0;
          _mm512_mask_storeu_epi32(d + r, (__mmask16)((1u << n0) - 1u), w0);
          if (n1 > 0) _mm512_mask_storeu_epi32(d + r + 16, (__mmask16)((1u << n1) - 1u), w1);
        }
      }
    }
    return;
  }
  for (s = 0; s < ns; s++) {
    uint32_t *d = dst + (size_t)s * W * kq;
    int h = rows - s * W < W ? rows - s * W : W;
    const size_t xs = (size_t)s * W * rs;
    /* rows contiguous (or neither): the pairs are adjacent (cs == 1) or gathered */
    int r8 = cs == 1 ? h / 8 * 8 : 0, q8 = cols / 16 * 8;
    for (r = 0; r < r8; r += 8)   /* 8 rows x 8 pairs: the float transpose moves the words */
      for (q = 0; q < q8; q += 8) {
        __m256 v[8];
        const size_t e = xs + (size_t)r * rs + 2 * (size_t)q;
        if (f8) {
          amp__gemm_fp8_pairs8x8(d + (size_t)q * W + r, (size_t)W, (const uint8_t *)x + e, rs, tab);
          continue;
        }
        amp__gemm_ld8x8(v, (const char *)(xh + e), 2 * rs, AMP_F32);
        amp__gemm_tr8(v);
        amp__gemm_st8x8((float *)(void *)(d + (size_t)q * W + r), (size_t)W, v);
      }
    for (r = 0; r < h; r++) {
      const size_t xr = xs + (size_t)r * rs;
      for (q = cs == 1 && r < r8 ? q8 : 0; q < cols / 2; q++)
        d[(size_t)q * W + r] = AMP__PP_W(xr + (size_t)(2 * q) * cs) | AMP__PP_W(xr + (size_t)(2 * q + 1) * cs) << 16;
      if (cols & 1) d[(size_t)(kq - 1) * W + r] = AMP__PP_W(xr + (size_t)(cols - 1) * cs);
    }
    for (r = h; r < W; r++) for (q = 0; q < kq; q++) d[(size_t)q * W + r] = 0u;
  }
}
#undef AMP__PP_LD32
#undef AMP__PP_W
#undef AMP__PP_PF

static const amp__gemm_kernel amp__gemm_kernel_fma = {
  amp__gemm_micro_fma, amp__gemm_pack_fma, 6, 16, 256, 96, 512, 1, 1, NULL, amp__gemm_micro_fma_ra, amp__gemm_widen_rows, NULL, NULL, 1};
/* micro-kernel, packing, MR, NR, KC, MC, NC, k per packed unit, vector epilogue, B unpacked, A unpacked */
static const amp__gemm_kernel amp__gemm_kernel_512 = {
  amp__gemm_micro_512, amp__gemm_pack_512, 8, 32, 256, 128, 512, 1, 1, NULL, amp__gemm_micro_512_ra,
  amp__gemm_widen_rows_512, NULL, NULL, 1};
static const amp__gemm_kernel amp__gemm_kernel_bf16 = {
  amp__gemm_micro_bf16, amp__gemm_pack_pairs, 8, 32, 512, 128, 512, 2, 1, amp__gemm_micro_bf16_rb, NULL, NULL, NULL, NULL, 1};

/* ---- AMX (Intel Xeon from Sapphire Rapids on): bf16 x bf16 (and fp8 x fp8, widened) on the tile unit ----
   Eight tile registers of 16 rows x 64 bytes. A 32 x 32 tile of C lives in four of them as 16 x 16
   f32 blocks (tmm0-3); each step along k loads A's two 16-row strips of 32 k (tmm4-5: row r holds
   its 16 pairs) and B's two 16-column strips (tmm6-7: row q holds pair q of its 16 columns), and
   four tdpbf16ps add 32 products to each of the 1024 accumulators. A is packed a row at a time in
   pairs (amp__gemm_pack_rows_amx: rows kc pairs apart, a strip is 16 rows read kc pairs apart), B as
   for vdpbf16ps (amp__gemm_pack_pairs, 32-column slivers: a strip is every other 64 bytes), both
   padded with zero pairs to a multiple of 16 (the kernel's kmul: whole strips only). The tile unit's
   arithmetic is its own (no per-product rounding that the manual could state; measured within the
   fast kernels' bound, which tests/test_gemm.c checks): the results are not those of vdpbf16ps.
   The instructions are written as asm statements that name the memory they read and write (the
   compilers' intrinsics tell the compiler nothing of what a tile load reads); the configuration
   is loaded before a row block's micro-kernel calls and released after them (the kernel's tiles
   hook, amp__gemm_tiles_amx: about 50 ns, which had cost a product with k = 64 a third of its
   time when done at every call), so that no thread holds tile state when amp_gemm returns (a
   caller that keeps a tile configuration of its own across the call loads it again). A whole f32
   tile of C with alpha 1, beta 0 and no epilogue is stored by the tiles straight into C. Linux
   grants a process the tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, asked once:
   amp__gemm_amx); other systems, and a refusal, keep the vdpbf16ps or FMA kernel. */
#if defined(__linux__) && defined(__x86_64__)
#define AMP__GEMM_AMX 1
static int amp__gemm_amx_state = -1;   /* -1: not asked yet; 0: refused; 1: granted */
/* 1: this process may use the tile unit (the CPU and OS have it, Linux granted it). */
static int amp__gemm_amx(void) {
  int v;
  if (!(amp__gemm_isa() & AMP__GEMM_ISA_AMX)) return 0;
  v = AMP__ALOAD(&amp__gemm_amx_state);
  if (v < 0) {   /* arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18): 0 when granted */
    long r;
    __asm__ __volatile__("syscall" : "=a"(r) : "0"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    v = r == 0;
    AMP__ASTORE(&amp__gemm_amx_state, v);
  }
  return v;
}
#define AMP__AMX_CFG(p) __asm__ __volatile__("{ldtilecfg\t(%0)|ldtilecfg\t[%0]}" ::"r"(p) : "memory")
#define AMP__AMX_RELEASE() __asm__ __volatile__("tilerelease" ::: "memory")
#define AMP__AMX_ZERO(t) __asm__ __volatile__("{tilezero\t%%tmm" #t "|tilezero\ttmm" #t "}" ::)
#define AMP__AMX_LOAD(t, p, ld) \
  __asm__ __volatile__("{tileloadd\t(%0,%1,1), %%tmm" #t "|tileloadd\ttmm" #t ", [%0+%1*1]}" ::"r"(p), \
                       "r"((long)(ld)) : "memory")
#define AMP__AMX_STORE(t, p, ld) \
  __asm__ __volatile__("{tilestored\t%%tmm" #t ", (%0,%1,1)|tilestored\t[%0+%1*1], tmm" #t "}" ::"r"(p), \
                       "r"((long)(ld)) : "memory")
#define AMP__AMX_DP(c, a, b) \
  __asm__ __volatile__("{tdpbf16ps\t%%tmm" #b ", %%tmm" #a ", %%tmm" #c "|tdpbf16ps\ttmm" #c ", tmm" #a ", tmm" #b "}" ::)
#define AMP__AMX_STEP4 AMP__AMX_DP(0, 4, 6); AMP__AMX_DP(1, 4, 7); AMP__AMX_DP(2, 5, 6); AMP__AMX_DP(3, 5, 7);
/* The tile configuration (palette 1): bytes per row and rows of each of the 16 tile slots. */
typedef struct amp__amx_cfg {
  unsigned char palette, start_row, reserved[14];
  unsigned short colsb[16];
  unsigned char rows[16];
} amp__amx_cfg;

/* The kernel's tiles hook: every tile slot used 16 rows of 64 bytes (on), or the state released. */
static void amp__gemm_tiles_amx(int on) {
  if (on) {
    amp__amx_cfg cfg;
    int t;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    AMP__AMX_CFG(&cfg);
  } else AMP__AMX_RELEASE();
}
/* 32 x 32 tiles: a holds 32 rows of kc pairs (kc apart), b kc rows of 32 columns' pairs; out: the
   tile's rows and columns of C to write (amp__gemm_put: 32-float rows, out->rows of them). */
static void amp__gemm_micro_amx(int kc, const float *af, const float *bf, float *tile, int acc,
                                const amp__gemm_out *out) {
  const uint32_t *a = (const uint32_t *)(const void *)af, *b = (const uint32_t *)(const void *)bf;
  const size_t lda = (size_t)kc * 4;
  int q;
  if (acc) {
    AMP__AMX_LOAD(0, tile, 128); AMP__AMX_LOAD(1, tile + 16, 128);
    AMP__AMX_LOAD(2, tile + 512, 128); AMP__AMX_LOAD(3, tile + 528, 128);
  } else { AMP__AMX_ZERO(0); AMP__AMX_ZERO(1); AMP__AMX_ZERO(2); AMP__AMX_ZERO(3); }
  for (q = 0; q < kc; q += 16) {   /* kc: a multiple of 16 (the packs pad k with zero pairs) */
    AMP__AMX_LOAD(4, a + q, lda); AMP__AMX_LOAD(5, a + (size_t)16 * kc + q, lda);
    AMP__AMX_LOAD(6, b + (size_t)32 * q, 128); AMP__AMX_LOAD(7, b + (size_t)32 * q + 16, 128);
    AMP__AMX_STEP4
  }
  if (out && out->plain == 1 && out->rows == 32 && out->cols == 32) {
    /* a whole tile of an f32 C = 1 * acc: the epilogue's bits are acc's (1 * x is x; the tile unit
       writes no subnormal, so a denormals-are-zero FPU would change nothing), stored by the tiles */
    float *c = (float *)out->c;
    const size_t ldc = out->ldc * 4;
    AMP__AMX_STORE(0, c, ldc); AMP__AMX_STORE(1, c + 16, ldc);
    AMP__AMX_STORE(2, c + 16 * out->ldc, ldc); AMP__AMX_STORE(3, c + 16 * out->ldc + 16, ldc);
    return;
  }
  if (out) {   /* the last slice: through a buffer into C, by the AVX-512 kernels' epilogue */
    float buf[1024] __attribute__((aligned(64)));
    AMP__AMX_STORE(0, buf, 128); AMP__AMX_STORE(1, buf + 16, 128);
    AMP__AMX_STORE(2, buf + 512, 128); AMP__AMX_STORE(3, buf + 528, 128);
    amp__gemm_put(out, buf);
    return;
  }
  AMP__AMX_STORE(0, tile, 128); AMP__AMX_STORE(1, tile + 16, 128);
  AMP__AMX_STORE(2, tile + 512, 128); AMP__AMX_STORE(3, tile + 528, 128);
}
#undef AMP__AMX_STEP4

/* A's slivers for the AMX kernel (bf16, or fp8 widened to bf16 as it is read, exact): word q of row r
   is a(r, 2q) | a(r, 2q+1) << 16 (the element past an odd `cols` is 0; rows past `rows`, up to the
   sliver's W, are 0), stored dst32[(s*W + r)*kp + q], kp = ceil(cols / 2) rounded up to a multiple
   of 16 (zero pairs past the last). */
static AMP__T512 void amp__gemm_pack_rows_amx(float *dstf, int W, const void *x, amp_dtype t, size_t rs, size_t cs,
                                              int rows, int cols) {
  uint32_t *dst = (uint32_t *)(void *)dstf;
  const uint16_t *xh = (const uint16_t *)x;
  const uint8_t *x8 = (const uint8_t *)x;
  const int f8 = amp__dtype_is_fp8(t);
  int kq = (cols + 1) / 2, kp = (kq + 15) / 16 * 16, tot = (rows + W - 1) / W * W, r, q, c;
  __m512i tab[4];
  if (f8) amp__gemm_fp8_wtab(tab, amp__dtype_fp8(t));
  if (cs == 1) {   /* rows contiguous along k: each row copied (fp8: widened 32 codes a store) */
    for (r = 0; r < tot; r++) {
      uint16_t *d = (uint16_t *)(void *)(dst + (size_t)r * kp);
      if (r >= rows) { memset(d, 0, (size_t)kp * 4); continue; }
      if (!f8) {
        memcpy(d, xh + (size_t)r * rs, (size_t)cols * 2);
        memset(d + cols, 0, (size_t)(2 * kp - cols) * 2);
        continue;
      }
      for (c = 0; c < 2 * kp; c += 32)   /* 2 kp, a multiple of 32, >= cols: the codes past cols are 0 */
        _mm512_storeu_si512((void *)(d + c), c < cols ? amp__gemm_fp8_bf16x32(x8 + (size_t)r * rs + c,
                                                                              cols - c < 32 ? cols - c : 32, tab)
                                                      : _mm512_setzero_si512());
    }
    return;
  }
  {   /* else rs == 1 (an op(A) has one of its strides 1), columns contiguous: 32 rows (W is 32) of two columns a
         step, paired, scattered to their rows */
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                        39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(kp));
    for (r = 0; r < tot; r += 32) {
      int nh = rows - r, n = nh < 0 ? 0 : nh < 32 ? nh : 32;
      __mmask32 m = amp__mask32((size_t)n);
      uint32_t *d = dst + (size_t)r * kp;
      for (q = 0; q < kp; q++) {   /* past kq: zero pairs */
        const size_t e0 = (size_t)(2 * q) * cs + (size_t)r;   /* element (r, 2q) */
        __m512i v0 = _mm512_setzero_si512(), v1 = _mm512_setzero_si512();
        if (q < kq) v0 = f8 ? amp__gemm_fp8_bf16x32(x8 + e0, n, tab) : _mm512_maskz_loadu_epi16(m, xh + e0);
        if (2 * q + 1 < cols) v1 = f8 ? amp__gemm_fp8_bf16x32(x8 + e0 + cs, n, tab) : _mm512_maskz_loadu_epi16(m, xh + e0 + cs);
        _mm512_i32scatter_epi32(d + q, idx, _mm512_permutex2var_epi16(v0, lo, v1), 4);
        _mm512_i32scatter_epi32(d + (size_t)16 * kp + q, idx, _mm512_permutex2var_epi16(v0, hi, v1), 4);
      }
    }
  }
}
/* B's slivers for the AMX kernel (bf16 or fp8): amp__gemm_pack_pairs' layout a sliver at a time, each sliver's
   pairs padded with zero pairs to a multiple of 16 (kp of them: dst32[s*W*kp + q*W + r]). */
static AMP__T512 void amp__gemm_pack_pairs_amx(float *dstf, int W, const void *x, amp_dtype t, size_t rs, size_t cs,
                                               int rows, int cols) {
  int kq = (cols + 1) / 2, kp = (kq + 15) / 16 * 16, s;
  for (s = 0; s * W < rows; s++) {
    uint32_t *d = (uint32_t *)(void *)dstf + (size_t)s * W * kp;
    amp__gemm_pack_pairs((float *)(void *)d, W, (const char *)x + (size_t)s * W * rs * amp_dtype_size(t), t, rs, cs,
                         rows - s * W < W ? rows - s * W : W, cols);
    memset(d + (size_t)kq * W, 0, (size_t)(kp - kq) * W * 4);
  }
}
/* micro-kernel, packing, MR, NR, KC, MC, NC, k per packed unit, vector epilogue, B unpacked, A unpacked, A's packing,
   tile state, k padded to a multiple of (units) */
static const amp__gemm_kernel amp__gemm_kernel_amx = {
  amp__gemm_micro_amx, amp__gemm_pack_pairs_amx, 32, 32, 256, 64, 512, 2, 1, NULL, NULL, NULL, amp__gemm_pack_rows_amx,
  amp__gemm_tiles_amx, 16};
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* AMP__X86_SIMD */

/* ---- the fast kernel on AArch64: FMLA in order ----
   6 x 16 tiles (24 accumulators of 4 lanes), acc = fma(a, b, acc) for p = 0, 1, ..., k-1 in that
   order: FMLA rounds once, as fmaf, so each element gets the bits of a plain fmaf() loop, the bits
   of the x86 kernels. Packing and blocking are the reference's (amp__gemm_pack: inputs converted
   to f32 once). FMLA and fmaf read the FPCR alike (rounding mode, flush-to-zero), so the kernel
   runs in every FPCR state. Tests lower amp__gemm_neon_allowed to 0 to run the reference instead. */
#ifdef AMP__NEON_SIMD
#define AMP__GEMM_NEON 1
static int amp__gemm_neon_allowed = 1;
static void amp__gemm_micro_neon(int kc, const float *a, const float *b, float *tile, int acc,
                                 const amp__gemm_out *out) {
  float32x4_t c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;
  float32x4_t c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53;
  int p;
  (void)out;
#define AMP__GN_LD(r) c##r##0 = vld1q_f32(tile + 16 * r); c##r##1 = vld1q_f32(tile + 16 * r + 4); \
                      c##r##2 = vld1q_f32(tile + 16 * r + 8); c##r##3 = vld1q_f32(tile + 16 * r + 12);
#define AMP__GN_Z(r) c##r##0 = c##r##1 = c##r##2 = c##r##3 = vdupq_n_f32(0.0f);
#define AMP__GN_FMA(r) { float32x4_t x = vdupq_n_f32(ap[r]); \
    c##r##0 = vfmaq_f32(c##r##0, x, b0); c##r##1 = vfmaq_f32(c##r##1, x, b1); \
    c##r##2 = vfmaq_f32(c##r##2, x, b2); c##r##3 = vfmaq_f32(c##r##3, x, b3); }
#define AMP__GN_ST(r) vst1q_f32(tile + 16 * r, c##r##0); vst1q_f32(tile + 16 * r + 4, c##r##1); \
                      vst1q_f32(tile + 16 * r + 8, c##r##2); vst1q_f32(tile + 16 * r + 12, c##r##3);
  if (acc) { AMP__GN_LD(0) AMP__GN_LD(1) AMP__GN_LD(2) AMP__GN_LD(3) AMP__GN_LD(4) AMP__GN_LD(5) }
  else { AMP__GN_Z(0) AMP__GN_Z(1) AMP__GN_Z(2) AMP__GN_Z(3) AMP__GN_Z(4) AMP__GN_Z(5) }
  for (p = 0; p < kc; p++) {
    const float *bp = b + (size_t)p * 16, *ap = a + (size_t)p * 6;
    float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
    AMP__GN_FMA(0) AMP__GN_FMA(1) AMP__GN_FMA(2) AMP__GN_FMA(3) AMP__GN_FMA(4) AMP__GN_FMA(5)
  }
  AMP__GN_ST(0) AMP__GN_ST(1) AMP__GN_ST(2) AMP__GN_ST(3) AMP__GN_ST(4) AMP__GN_ST(5)
#undef AMP__GN_FMA
}
/* micro-kernel, packing, MR, NR, KC, MC, NC, k per packed unit, vector epilogue, B unpacked, A unpacked */
static const amp__gemm_kernel amp__gemm_kernel_neon = {
  amp__gemm_micro_neon, amp__gemm_pack, 6, 16, 256, 96, 512, 1, 0, NULL, NULL, NULL, NULL, NULL, 1};

/* ---- BFDOT for bf16 x bf16 on a CPU with FEAT_BF16 (Neoverse V1/V2 and Grace, Apple M2 and later) ----
   The kernel is compiled with the target attribute of +bf16 (GCC 10+, Clang 11+), so a plain -O2
   build has it and runs it where the CPU reports FEAT_BF16 (amp__cpu_bf16). BFDOT Vd.4S, Vn.8H,
   Vm.2H[i] adds a(r, 2q) b(2q, j) + a(r, 2q+1) b(2q+1, j) to 4 accumulators: A and B are packed in
   pairs along k (amp__gemm_pack_pairs_c), a 6 x 16 tile as the FMLA kernel's. Its arithmetic is
   the Arm ARM's BFDotAdd without FEAT_EBF16 (or with FPCR.EBF 0): each product and the pair's sum
   rounded to f32 and then added to acc, every rounding to odd (an inexact result gets bit 0 set),
   subnormal inputs and results flushed to zero, the default NaN, the FPCR ignored. A CPU with
   FEAT_EBF16 under FPCR.EBF 1 computes it otherwise (fused): then the FMLA kernel runs instead. */
#if (defined(__clang__) && __clang_major__ >= 11) || (!defined(__clang__) && __GNUC__ >= 10)
#define AMP__GEMM_BFDOT 1
#ifdef __clang__
#define AMP__TBF16 __attribute__((target("bf16")))
#else
#define AMP__TBF16 __attribute__((target("+bf16")))
#endif
/* bf16 pairs: word (r, q) of a sliver is x(r, 2q) | x(r, 2q+1) << 16 (0 past an odd `cols`), kq =
   ceil(cols / 2) words a row, W rows a sliver at dst32 + s*W*kq (rows past `rows` 0). quads 0, the
   layout of the x86 kernel's packing (BFDOT): word (r, q) at q*W + r. quads 1 (BFMMLA): pairs 2g and
   2g+1 of rows 2h and 2h+1 as the 4 words of one operand (row 2h's 4 elements, then row 2h+1's) at
   2gW + 4h, that is word (r, q) at (q - q%2)W + 2r + q%2; the last pair of an odd kq as with quads 0. */
static void amp__gemm_pack_pairs_as(float *dstf, int W, const void *x, size_t rs, size_t cs, int rows, int cols,
                                    int quads) {
  uint32_t *dst = (uint32_t *)(void *)dstf;
  const uint16_t *xh = (const uint16_t *)x;
  int s, r, q, ns = (rows + W - 1) / W, kq = (cols + 1) / 2, kq2 = quads ? kq / 2 * 2 : 0;
  for (s = 0; s < ns; s++) {
    uint32_t *d = dst + (size_t)s * W * kq;
    const uint16_t *xs = xh + (size_t)s * W * rs;
    int h = rows - s * W < W ? rows - s * W : W;
    for (q = 0; q < kq; q++) {
      const uint16_t *x0 = xs + (size_t)(2 * q) * cs;
      int two = 2 * q + 1 < cols, step = q < kq2 ? 2 : 1;
      uint32_t *dq = d + (q < kq2 ? (size_t)(q - q % 2) * W + (size_t)(q % 2) : (size_t)q * W);
      for (r = 0; r < h; r++)
        dq[(size_t)r * step] = (uint32_t)x0[(size_t)r * rs] | (two ? (uint32_t)x0[(size_t)r * rs + cs] << 16 : 0u);
      for (; r < W; r++) dq[(size_t)r * step] = 0u;
    }
  }
}
static void amp__gemm_pack_pairs_c(float *dst, int W, const void *x, amp_dtype t, size_t rs, size_t cs, int rows,
                                   int cols) {
  (void)t;
  amp__gemm_pack_pairs_as(dst, W, x, rs, cs, rows, cols, 0);
}
static void amp__gemm_pack_quads_c(float *dst, int W, const void *x, amp_dtype t, size_t rs, size_t cs, int rows,
                                   int cols) {
  (void)t;
  amp__gemm_pack_pairs_as(dst, W, x, rs, cs, rows, cols, 1);
}
/* acc(4 lanes) += the pairs of b (4 columns) times pair l of av (a row of A) */
#define AMP__GN_BFD(c, bv, av, l) __asm__("bfdot %0.4s, %1.8h, %2.2h[" #l "]" : "+w"(c) : "w"(bv), "w"(av));
#define AMP__GN_BFROW(r, av, l) AMP__GN_BFD(c##r##0, b0, av, l) AMP__GN_BFD(c##r##1, b1, av, l) \
                                AMP__GN_BFD(c##r##2, b2, av, l) AMP__GN_BFD(c##r##3, b3, av, l)
static AMP__TBF16 void amp__gemm_micro_bfdot(int kc, const float *af, const float *bf, float *tile, int acc,
                                             const amp__gemm_out *out) {
  const uint32_t *a = (const uint32_t *)(const void *)af, *b = (const uint32_t *)(const void *)bf;
  float32x4_t c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;
  float32x4_t c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53;
  int p;
  (void)out;
  if (acc) { AMP__GN_LD(0) AMP__GN_LD(1) AMP__GN_LD(2) AMP__GN_LD(3) AMP__GN_LD(4) AMP__GN_LD(5) }
  else { AMP__GN_Z(0) AMP__GN_Z(1) AMP__GN_Z(2) AMP__GN_Z(3) AMP__GN_Z(4) AMP__GN_Z(5) }
  for (p = 0; p < kc; p++) {   /* p: pairs */
    const uint32_t *bp = b + (size_t)p * 16, *ap = a + (size_t)p * 6;
    uint32x4_t b0 = vld1q_u32(bp), b1 = vld1q_u32(bp + 4), b2 = vld1q_u32(bp + 8), b3 = vld1q_u32(bp + 12);
    uint32x4_t a03 = vld1q_u32(ap), a45 = vcombine_u32(vld1_u32(ap + 4), vdup_n_u32(0u));
    AMP__GN_BFROW(0, a03, 0) AMP__GN_BFROW(1, a03, 1) AMP__GN_BFROW(2, a03, 2) AMP__GN_BFROW(3, a03, 3)
    AMP__GN_BFROW(4, a45, 0) AMP__GN_BFROW(5, a45, 1)
  }
  AMP__GN_ST(0) AMP__GN_ST(1) AMP__GN_ST(2) AMP__GN_ST(3) AMP__GN_ST(4) AMP__GN_ST(5)
}
#undef AMP__GN_BFROW
#undef AMP__GN_BFD
static const amp__gemm_kernel amp__gemm_kernel_bfdot = {
  amp__gemm_micro_bfdot, amp__gemm_pack_pairs_c, 6, 16, 512, 96, 512, 2, 0, NULL, NULL, NULL, NULL, NULL, 1};

/* ---- BFMMLA for bf16 x bf16: 8 x 8 tiles of 2 x 2 blocks ----
   BFMMLA Vd.4S, Vn.8H, Vm.8H adds the 2 x 4 bf16 matrix in Vn (rows 2i and 2i+1 of A, 4 k each)
   times the 4 x 2 one in Vm (columns 2j and 2j+1 of B, stored as 2 rows of 4) to the 2 x 2 f32
   block Vd = C(2i, 2j), C(2i, 2j+1), C(2i+1, 2j), C(2i+1, 2j+1). The Arm ARM states it per element
   as two BFDotAdd in order, on the pair 2q, 2q+1 and then on 2q+2, 2q+3: BFDOT's arithmetic step
   for step, so this kernel gives the BFDOT kernel's bits. A and B are packed as it reads them
   (amp__gemm_pack_quads_c: two pairs of two rows an operand). A slice's last pair when the pair
   count is odd goes through BFDOT (vector) on operands laid out as the block (row words 2i, 2i,
   2i+1, 2i+1 times column words 2j, 2j+1, 2j, 2j+1): one BFDotAdd, as the BFDOT kernel does,
   where a zero pair added by BFMMLA would turn a flushed -0 into +0. The 16 blocks (4 x 4) of a
   tile are 16 accumulators; the tile in memory is row-major, as the other kernels'. */
#define AMP__GN_MLD(i, j) c##i##j = vcombine_f32(vld1_f32(tile + 16 * i + 2 * j), vld1_f32(tile + 16 * i + 8 + 2 * j));
#define AMP__GN_MST(i, j) vst1_f32(tile + 16 * i + 2 * j, vget_low_f32(c##i##j)); \
                          vst1_f32(tile + 16 * i + 8 + 2 * j, vget_high_f32(c##i##j));
#define AMP__GN_MROWS(M, i) M(i, 0) M(i, 1) M(i, 2) M(i, 3)
#define AMP__GN_MALL(M) AMP__GN_MROWS(M, 0) AMP__GN_MROWS(M, 1) AMP__GN_MROWS(M, 2) AMP__GN_MROWS(M, 3)
#define AMP__GN_MZ(i, j) c##i##j = vdupq_n_f32(0.0f);
#define AMP__GN_MM(i, j) __asm__("bfmmla %0.4s, %1.8h, %2.8h" : "+w"(c##i##j) : "w"(a##i), "w"(b##j));
#define AMP__GN_MD(i, j) __asm__("bfdot %0.4s, %1.8h, %2.8h" : "+w"(c##i##j) : "w"(a##i), "w"(b##j));
static AMP__TBF16 void amp__gemm_micro_bfmmla(int kc, const float *af, const float *bf, float *tile, int acc,
                                              const amp__gemm_out *out) {
  const uint32_t *a = (const uint32_t *)(const void *)af, *b = (const uint32_t *)(const void *)bf;
  float32x4_t c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33;
  uint32x4_t a0, a1, a2, a3, b0, b1, b2, b3;
  int p;
  (void)out;
  if (acc) { AMP__GN_MALL(AMP__GN_MLD) }
  else { AMP__GN_MALL(AMP__GN_MZ) }
  for (p = 0; p + 1 < kc; p += 2) {   /* p: pairs, two a step */
    const uint32_t *ap = a + (size_t)p * 8, *bp = b + (size_t)p * 8;
    a0 = vld1q_u32(ap); a1 = vld1q_u32(ap + 4); a2 = vld1q_u32(ap + 8); a3 = vld1q_u32(ap + 12);
    b0 = vld1q_u32(bp); b1 = vld1q_u32(bp + 4); b2 = vld1q_u32(bp + 8); b3 = vld1q_u32(bp + 12);
    AMP__GN_MALL(AMP__GN_MM)
  }
  if (kc % 2) {   /* the last pair: words r of A (8 rows) and j of B (8 columns) */
    uint32x4_t x0 = vld1q_u32(a + (size_t)p * 8), x1 = vld1q_u32(a + (size_t)p * 8 + 4);
    uint32x4_t y0 = vld1q_u32(b + (size_t)p * 8), y1 = vld1q_u32(b + (size_t)p * 8 + 4);
    a0 = vzip1q_u32(x0, x0); a1 = vzip2q_u32(x0, x0); a2 = vzip1q_u32(x1, x1); a3 = vzip2q_u32(x1, x1);
    b0 = vcombine_u32(vget_low_u32(y0), vget_low_u32(y0)); b1 = vcombine_u32(vget_high_u32(y0), vget_high_u32(y0));
    b2 = vcombine_u32(vget_low_u32(y1), vget_low_u32(y1)); b3 = vcombine_u32(vget_high_u32(y1), vget_high_u32(y1));
    AMP__GN_MALL(AMP__GN_MD)
  }
  AMP__GN_MALL(AMP__GN_MST)
}
#undef AMP__GN_MLD
#undef AMP__GN_MST
#undef AMP__GN_MROWS
#undef AMP__GN_MALL
#undef AMP__GN_MZ
#undef AMP__GN_MM
#undef AMP__GN_MD
static const amp__gemm_kernel amp__gemm_kernel_bfmmla = {
  amp__gemm_micro_bfmmla, amp__gemm_pack_quads_c, 8, 8, 512, 96, 512, 2, 0, NULL, NULL, NULL, NULL, NULL, 1};

/* Which of BFMMLA, BFDOT and the FMLA kernel (bf16 widened while packing) a bf16 product runs:
   an instruction does 32 flops (BFMMLA), 16 (BFDOT) or 8 (FMLA), so BFDOT pays where it issues at
   least half as fast as FMLA, and BFMMLA where at least a quarter as fast as FMLA and faster than
   half BFDOT's rate (the two give the same bits: a close call between them changes no result).
   Measured once per process as on x86 (amp__gemm_dpbf16): 12 independent accumulators of each
   instruction, n rounds, the fastest of 7 runs, timed by the generic timer (CNTVCT_EL0, readable at
   EL0 on Linux and macOS). */
/* One timing loop: 12 independent accumulators, each taking INSN on x per round (x's lanes of type
   XT from XINIT), n rounds; the sum returned so nothing is dropped. */
#define AMP__GEMM_PEAK_FN(name, ATTR, XT, XINIT, INSN) \
  static __attribute__((noinline)) ATTR float name(long n) { \
    XT x = XINIT; \
    float32x4_t c[12]; \
    long i; \
    int j; \
    for (j = 0; j < 12; j++) c[j] = vdupq_n_f32((float)j); \
    for (i = 0; i < n; i++) {   /* written out: the accumulators stay in registers */ \
      __asm__(INSN : "+w"(c[0]) : "w"(x)); __asm__(INSN : "+w"(c[1]) : "w"(x)); __asm__(INSN : "+w"(c[2]) : "w"(x)); \
      __asm__(INSN : "+w"(c[3]) : "w"(x)); __asm__(INSN : "+w"(c[4]) : "w"(x)); __asm__(INSN : "+w"(c[5]) : "w"(x)); \
      __asm__(INSN : "+w"(c[6]) : "w"(x)); __asm__(INSN : "+w"(c[7]) : "w"(x)); __asm__(INSN : "+w"(c[8]) : "w"(x)); \
      __asm__(INSN : "+w"(c[9]) : "w"(x)); __asm__(INSN : "+w"(c[10]) : "w"(x)); __asm__(INSN : "+w"(c[11]) : "w"(x)); \
    } \
    for (j = 1; j < 12; j++) c[0] = vaddq_f32(c[0], c[j]); \
    return vgetq_lane_f32(c[0], 0); \
  }
AMP__GEMM_PEAK_FN(amp__gemm_peak_fmla, , float32x4_t, vdupq_n_f32(1e-3f), "fmla %0.4s, %1.4s, %1.4s")
AMP__GEMM_PEAK_FN(amp__gemm_peak_bfdot, AMP__TBF16, uint32x4_t, vdupq_n_u32(0x3a833a83u) /* bf16 pairs of about 1e-3 */,
                  "bfdot %0.4s, %1.8h, %1.2h[0]")
AMP__GEMM_PEAK_FN(amp__gemm_peak_bfmmla, AMP__TBF16, uint32x4_t, vdupq_n_u32(0x3a833a83u),
                  "bfmmla %0.4s, %1.8h, %1.8h")
#undef AMP__GEMM_PEAK_FN
/* 0: FMLA, 1: BFDOT, 2: BFMMLA */
static int amp__gemm_dpbf16_measure(void) {
  uint64_t best[3] = {~(uint64_t)0, ~(uint64_t)0, ~(uint64_t)0};
  volatile float sink;   /* the loops' results, so no loop is left out; local: threads may measure at once */
  int r, kind;
  for (r = 0; r < 7; r++)
    for (kind = 0; kind < 3; kind++) {
      uint64_t t0, t1;
      __asm__ __volatile__("isb\n\tmrs %0, cntvct_el0" : "=r"(t0) : : "memory");
      sink = kind == 2 ? amp__gemm_peak_bfmmla(4096) : kind ? amp__gemm_peak_bfdot(4096) : amp__gemm_peak_fmla(4096);
      __asm__ __volatile__("isb\n\tmrs %0, cntvct_el0" : "=r"(t1) : : "memory");
      if (t1 - t0 < best[kind]) best[kind] = t1 - t0;
    }
  (void)sink;
  /* 32 flops an instruction against 8 (FMLA) and 16 (BFDOT) */
  if (best[2] <= 4 * best[0] && best[2] < 2 * best[1]) return 2;
  return best[1] <= 2 * best[0];
}
/* BFDOT and BFMMLA as the Arm ARM's BFDotAdd without FEAT_EBF16: FPCR.EBF (bit 13) must be 0, and
   AH (bit 1, which both honour for their default NaN) too. */
static int amp__gemm_bfdot_fpcr_ok(void) {
  uint64_t f;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(f));
  return !(f & ((1u << 13) | 2u));
}
#endif
#undef AMP__GN_LD
#undef AMP__GN_Z
#undef AMP__GN_ST
#endif

/* The bf16 dot-product kernel (x86 vdpbf16ps, AArch64 BFDOT or BFMMLA) or bf16 widened and the FMA
   kernel, decided once per process by amp__gemm_dpbf16_measure (the calibrations above). */
#if defined(AMP__GEMM_FAST) || defined(AMP__GEMM_BFDOT)
/* tests: 1 the dot-product kernel (BFDOT on AArch64), 2 BFMMLA (AArch64), 0 widened; -1: the measured choice */
static int amp__gemm_dpbf16_forced = -1;
static int amp__gemm_dpbf16_choice = -1;   /* -1: not measured yet */
/* 1: bf16 x bf16 products run the dot-product kernel (the CPU has it, and it pays), 2: BFMMLA
   (AArch64); 0: widened. */
static int amp__gemm_dpbf16(void) {
  int v = AMP__ALOAD(&amp__gemm_dpbf16_forced);
  if (v >= 0) return v;
  v = AMP__ALOAD(&amp__gemm_dpbf16_choice);
  if (v < 0) {   /* first use: threads that measure at once keep the first answer stored */
    int expect = -1, got = amp__gemm_dpbf16_measure();
    v = __atomic_compare_exchange_n(&amp__gemm_dpbf16_choice, &expect, got, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
            ? got : expect;
  }
  return v;
}
#endif

/* The kernel for a product: the reference when asked for, else the fastest the CPU runs. */
static const amp__gemm_kernel *amp__gemm_pick(amp_dtype in, int reference) {
#ifdef AMP__GEMM_FAST
  if (!reference) {
    int isa = amp__gemm_isa(), bf16 = in == AMP_BF16;
#ifdef AMP__GEMM_AMX
    if ((bf16 || amp__dtype_is_fp8(in)) && amp__gemm_amx())   /* (amp__gemm_amx asks the ISA) */
      return &amp__gemm_kernel_amx;   /* fp8 widened to bf16 while packed (both packings) */
#endif
    if ((isa & AMP__GEMM_ISA_BF16) && (bf16 || amp__dtype_is_fp8(in)) && amp__gemm_dpbf16())
      return &amp__gemm_kernel_bf16;   /* fp8 widened to bf16 while packed (amp__gemm_pack_pairs) */
    if (isa & AMP__GEMM_ISA_512) return &amp__gemm_kernel_512;
    if (isa & AMP__GEMM_ISA_FMA) return &amp__gemm_kernel_fma;
  }
#endif
#ifdef AMP__GEMM_BFDOT
  if (!reference && in == AMP_BF16 && AMP__ALOAD(&amp__gemm_neon_allowed) && amp__cpu_bf16() &&
      amp__gemm_bfdot_fpcr_ok()) {
    int v = amp__gemm_dpbf16();
    if (v) return v == 2 ? &amp__gemm_kernel_bfmmla : &amp__gemm_kernel_bfdot;
  }
#endif
#ifdef AMP__GEMM_NEON
  if (!reference && AMP__ALOAD(&amp__gemm_neon_allowed)) return &amp__gemm_kernel_neon;
#endif
  (void)in; (void)reference;
#ifdef AMP__GEMM_AVX2
  if (amp__cpu_features() & AMP__CPU_AVX2) return &amp__gemm_reference_kernel_avx2;
#endif
  return &amp__gemm_reference_kernel;
}

static void amp__gelu_line(float *t, size_t n);
/* Writes C(i, j) for the block rows i0.., cols j0.. (mb x nb) from the accumulator tiles (a
   contiguous row's GELU after its sums and bias, by amp__gelu_line: amp__gemm_epi's bits). */
static void amp__gemm_store_block(const amp__gemm_kernel *K, const float *accbuf, int mb, int nb, int i0, int j0,
                                  float alpha, float beta, void *C, amp_dtype ct, size_t crs, size_t ccs,
                                  const amp_gemm_opts *o) {
  int i, j, tc, has_bias = o->bias != NULL, mr = K->mr, nr = K->nr, gelu = o->act == AMP_ACT_GELU;
  int tiles_n = (nb + nr - 1) / nr;
  float acc[AMP__GEMM_NC], cr[AMP__GEMM_NC], br[AMP__GEMM_NC];
  const int c32 = ct == AMP_F32;   /* C of f32: written in place, no conversion */
  /* the bias, converted once (amp_convert gives the bits of amp__load) */
  if (has_bias)
    amp_convert(br, AMP_F32, (const char *)o->bias + (size_t)j0 * amp_dtype_size(o->bias_type), o->bias_type,
                (size_t)nb);
  for (i = 0; i < mb; i++) {
    const float *row = accbuf + ((size_t)(i / mr) * tiles_n * mr + (size_t)(i % mr)) * nr;
    for (tc = 0; tc < tiles_n; tc++)
      memcpy(acc + tc * nr, row + (size_t)tc * mr * nr,
             sizeof(float) * (size_t)(nb - tc * nr < nr ? nb - tc * nr : nr));
    if (ccs == 1) {
      /* a contiguous row: f16/bf16 C is read (beta != 0) and written with the bulk conversion,
         which gives the same bits as amp__load/amp__store, element math unchanged */
      void *crow = (char *)C + ((size_t)(i0 + i) * crs + (size_t)j0) * amp_dtype_size(ct);
      float *cf = c32 ? (float *)crow : cr;
      if (!c32 && beta != 0.0f) amp_convert(cr, AMP_F32, crow, ct, (size_t)nb);
      for (j = 0; j < nb; j++)
        cf[j] = amp__gemm_epi(amp__gemm_blend(acc[j], alpha, beta, beta != 0.0f ? cf[j] : 0.0f), has_bias,
                              has_bias ? br[j] : 0.0f, gelu ? AMP_ACT_NONE : (int)o->act);
      if (gelu) amp__gelu_line(cf, (size_t)nb);
      if (!c32) amp_convert(crow, ct, cr, AMP_F32, (size_t)nb);
      continue;
    }
    for (j = 0; j < nb; j++) {
      size_t at = (size_t)(i0 + i) * crs + (size_t)(j0 + j) * ccs;
      float c = beta != 0.0f ? amp__load(C, ct, at) : 0.0f;
      amp__store(
          C, ct, at,
          amp__gemm_epi(amp__gemm_blend(acc[j], alpha, beta, c), has_bias, has_bias ? br[j] : 0.0f, (int)o->act));
    }
  }
}

static int amp__gemm_rb_ok = 1;   /* tests set 0 to run the packed-B path of the bf16 kernel */
static int amp__gemm_ra_ok = 1;   /* tests set 0 to run the packed-A path of an f32 A */
/* One tile: the kernel on A's packed sliver ap, or (ra) on A's rows r0, r0 + 1, ... in place (the
   f32 A block at ar, rows lda apart, nrows of them from r0). */
static void amp__gemm_tile(const amp__gemm_kernel *K, int ra, int kc, const float *ap, const float *ar, size_t lda,
                           int r0, int nrows, const float *b, float *tile, int acc, const amp__gemm_out *out) {
  if (ra) K->micro_ra(kc, ar + (size_t)r0 * lda, lda, nrows, b, tile, acc, out);
  else K->micro(kc, ap, b, tile, acc, out);
}
static float *amp__align64(void *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* The product's workspace is kept between calls (at most ~5 MiB: B's slice, the A blocks and a
   4 MiB chunk of accumulators): a fresh allocation of that size is mapped and zeroed by the OS on
   every call, which cost a small product (the demo's) a fifth of its time. One workspace; a call
   that finds it in use by another thread allocates its own. It stays reachable until exit. */
#if defined(__GNUC__) || defined(__clang__)
static void *amp__gemm_ws;
static size_t amp__gemm_ws_size;
static int amp__gemm_ws_busy;
static void *amp__gemm_ws_get(size_t bytes, int *kept) {
  *kept = 0;
  if (__atomic_exchange_n(&amp__gemm_ws_busy, 1, __ATOMIC_ACQUIRE) == 0) {
    if (amp__gemm_ws_size < bytes) {
      AMP_FREE(amp__gemm_ws);
      amp__gemm_ws = AMP_MALLOC(bytes);
      amp__gemm_ws_size = amp__gemm_ws ? bytes : 0;
    }
    if (amp__gemm_ws) { *kept = 1; return amp__gemm_ws; }
    __atomic_store_n(&amp__gemm_ws_busy, 0, __ATOMIC_RELEASE);
    return NULL;
  }
  return AMP_MALLOC(bytes);
}
static void amp__gemm_ws_put(void *p, int kept) {
  if (kept) __atomic_store_n(&amp__gemm_ws_busy, 0, __ATOMIC_RELEASE);
  else AMP_FREE(p);
}
#else
static void *amp__gemm_ws_get(size_t bytes, int *kept) { *kept = 0; return AMP_MALLOC(bytes); }
static void amp__gemm_ws_put(void *p, int kept) { (void)kept; AMP_FREE(p); }
#endif

/* The packed units of a slice kcb deep: elements or pairs, padded to the kernel's multiple. */
static int amp__gemm_units(const amp__gemm_kernel *K, int kcb) {
  int u = (kcb + K->kpair - 1) / K->kpair;
  return (u + K->kmul - 1) / K->kmul * K->kmul;
}

/* The whole CPU product on checked arguments, in strides: op(A)(i,p) = A[i*ars + p*acs],
   op(B)(p,j) = B[p*brs + j*bcs], C(i,j) = C[i*crs + j*ccs]. */
/* Block scales for amp__gemm_cpu_blk (an fp8 product's, amp_gemm_opts): each k slice is one block
   of w (32 or 128) along k, whose sums the tiles take as t = t + (sa * sb) * partial, sa the block's
   scale for the row of op(A) (1 without a_scales), sb for the column of op(B). */
#define AMP__GEMM_TILE_MAX (32 * 32)   /* the largest tile of the kernels above (AMX's), in floats */
typedef struct amp__gemm_blk {
  int w, a_kcol, b_kcol;
  const void *a_scales, *b_scales;
  amp_block_scaling a_blocks, b_blocks;
} amp__gemm_blk;
static void amp__gemm_tile_block_add(float *t, size_t ldt, const float *pr, size_t ldp, const float *sb, const float *sa,
                                     int rows, int w, int zero);

/* The CPU product; bk NULL, or block scales (above): then every slice's partial products are
   scaled and added into the tiles as amp__gemm_tile_block_add adds them, the last block's into C
   itself (C then an f32 scratch with contiguous rows, alpha 1, beta 0, no epilogue: the fp8
   wrapper's). */
static amp_status amp__gemm_cpu_blk(int m, int n, int k, float alpha, const void *A, amp_dtype at, size_t ars,
                                    size_t acs, const void *B, amp_dtype bt, size_t brs, size_t bcs, float beta,
                                    void *C, amp_dtype ct, size_t crs, size_t ccs, const amp_gemm_opts *o,
                                    const amp__gemm_blk *bk) {
  /* the kernel of the inputs' common type (two fp8 formats count as one; fp8 beside an f32 top half,
     bf16, is that type, which holds every fp8 value, where the bf16 kernels' packing widens fp8:
     the x86 kernels): other mixed types take the f32 kernel, each input widened while packed */
#ifdef AMP__GEMM_FAST
  const int top_ok = 1;
#else
  const int top_ok = 0;
#endif
  const int f8a = amp__dtype_is_fp8(at), f8b = amp__dtype_is_fp8(bt);
  const amp_dtype common = at == bt || (f8a && f8b) ? at
                           : top_ok && f8a && amp__dtype_f32_top(bt) ? bt
                           : top_ok && f8b && amp__dtype_f32_top(at) ? at : AMP_F32;
  const amp__gemm_kernel *K = amp__gemm_pick(common, o->algo == AMP_GEMM_REFERENCE);
  const int kcs = bk ? bk->w : K->kc;   /* the k slices: one block each with block scales */
  int mr = K->mr, nr = K->nr, nth = 1, mc, nblk, chunk;
  int nc_max = n < K->nc ? n : K->nc, kc_max = k < kcs ? k : kcs;
  float *sav = NULL, *sbv = NULL;   /* block scales: one slice's, per row of op(A) and column of op(B) */
  size_t nc_pad = (size_t)(nc_max + nr - 1) / (size_t)nr * (size_t)nr;
  size_t nb, na, nacc;
  size_t bsz = amp_dtype_size(bt), asz = amp_dtype_size(at);
  void *mem;
  float *bp, *work, *accs;
  float br[AMP__GEMM_NC];   /* the panel's bias in f32, for the kernels that write C themselves */
  int jc, kept;
  /* C with contiguous rows, act NONE or RELU: vec_store kernels write the finished tiles straight
     from their registers (amp__gemm_put, amp__gemm_put_fma: amp__gemm_blend's and amp__gemm_epi's
     element math and amp_convert's rounding, the same bits) */
  int direct = K->vec_store && ccs == 1 && o->act != AMP_ACT_GELU && !bk;
  /* op(B)'s rows contiguous (row-major B), k even (every slice whole pairs) and at most 64 rows
     (8 slivers of A share each sliver of B): the bf16 kernel reads a bf16 B in place, unpacked (an
     fp8 B is widened while packed). Measured
     here: 64 x 256 x 784 and 64 x 128 x 256 5-6% faster than with B packed, even at 128 rows,
     slower from 256 (B's pairs made again for every sliver of A). */
  int rb = K->micro_rb && !amp__dtype_is_fp8(bt) && bcs == 1 && k % 2 == 0 && m <= 64 && amp__gemm_rb_ok && !bk;
  /* an op(A) with rows contiguous along k (row-major A, or col-major transposed): not packed for
     the kernels that can (AVX-512, AVX2): f32 read in place, other types widened row by row first */
  int ra = K->micro_ra && acs == 1 && !rb && amp__gemm_ra_ok;
  /* with ra: an f32 A read in place, another type widened row by row; an f32 A whose rows are a
     multiple of 4 KiB apart copied row by row too (the rows one kernel call reads would share
     their L1 sets, with B's sliver: 1024^3 and 2048^3 3-9% faster copied on a Zen 3 core) */
  const int a32 = at == AMP_F32 && ars % 1024 != 0;
  int bf16_hw = 0;
  /* An f32 C, beta 0, no bias or activation: C = fl32(alpha acc), the epilogue's one multiply, which
     the kernels may do in their registers (2); C = acc (1) where alpha is 1 (1 * acc is acc), except
     on x86 under denormals-are-zero alone (MXCSR DAZ without FTZ, where 1 * acc flushes an acc the
     FMAs left subnormal: there the multiply is done, as the epilogue does it) */
  int plain = ct == AMP_F32 && beta == 0.0f && !o->bias && o->act == AMP_ACT_NONE ? alpha == 1.0f ? 1 : 2 : 0;
#ifdef AMP__GEMM_FAST
  bf16_hw = direct && ct == AMP_BF16 && (amp__gemm_isa() & AMP__GEMM_ISA_BF16);
  if (plain == 1 && (_mm_getcsr() & 0x8040u) == 0x40u) plain = 2;
#endif
  if (k == 0 || alpha == 0.0f) {   /* BLAS: C = beta * C without reading A or B */
    int i, j, has_bias = o->bias != NULL;
    for (i = 0; i < m; i++)
      for (j = 0; j < n; j++) {
        size_t at2 = (size_t)i * crs + (size_t)j * ccs;
        float c = beta != 0.0f ? amp__load(C, ct, at2) : 0.0f;
        float bias = has_bias ? amp__load(o->bias, o->bias_type, (size_t)j) : 0.0f;
        amp__store(C, ct, at2, amp__gemm_epi(amp__gemm_scale(beta, c), has_bias, bias, (int)o->act));
      }
    return AMP_OK;
  }
#ifdef _OPENMP
  /* Built with -fopenmp: C's row blocks are shared among the threads (never k: the bits do not
     depend on the number of threads). Inside a parallel region the product runs on one thread. */
  nth = omp_in_parallel() ? 1 : omp_get_max_threads();
  if ((double)m * n * k < 2e6) nth = 1;   /* too small to pay for waking threads */
  if (nth < 1) nth = 1;
#endif
  /* row blocks: MC high, or fewer rows so that every thread gets one */
  mc = (m + nth - 1) / nth;
  mc = (mc + mr - 1) / mr * mr;
  if (mc > K->mc) mc = K->mc;
  nblk = (m + mc - 1) / mc;
  if (nth > nblk) nth = nblk;
  /* The accumulators of a chunk of row blocks (at most ~4 MiB) stay while the k slices pass: each
     slice of op(B) is packed once per chunk and used at once, while it is still in cache. */
  chunk = (int)(((size_t)1 << 20) / (nc_pad * (size_t)mc));
  if (chunk < nth) chunk = nth;
  if (chunk > nblk) chunk = nblk;
  nb = (size_t)amp__gemm_units(K, kc_max) * nc_pad;
  na = (size_t)mc * (size_t)amp__gemm_units(K, kc_max);
  nacc = (size_t)mc * nc_pad;
  na = (na + 15) / 16 * 16;   /* 64-byte multiples */
  mem = amp__gemm_ws_get((nb + (size_t)nth * na + (size_t)chunk * nacc) * sizeof(float) + 3 * 64, &kept);
  if (!mem) return amp__fail(AMP_ERR_NOMEM, "out of memory for %zu floats of packed panels",
                             nb + (size_t)nth * na + (size_t)chunk * nacc);
  bp = amp__align64(mem);
  work = amp__align64(bp + nb);
  accs = amp__align64(work + (size_t)nth * na);
  if (bk) {   /* rows and columns padded to whole tiles (their sums are never stored) */
    sav = (float *)AMP_MALLOC(((size_t)m + (size_t)mr + nc_pad) * sizeof(float));
    if (!sav) {
      amp__gemm_ws_put(mem, kept);
      return amp__fail(AMP_ERR_NOMEM, "out of memory for %zu floats of block scales", (size_t)m + (size_t)mr + nc_pad);
    }
    sbv = sav + m + mr;
  }
  for (jc = 0; jc < n; jc += K->nc) {
    int ncb = n - jc < K->nc ? n - jc : K->nc;
    int tiles_n = (ncb + nr - 1) / nr, b0, ib, pc;
    if (direct && o->bias)
      amp_convert(br, AMP_F32, (const char *)o->bias + (size_t)jc * amp_dtype_size(o->bias_type), o->bias_type,
                  (size_t)ncb);
    for (b0 = 0; b0 < nblk; b0 += chunk) {
      int nbc = nblk - b0 < chunk ? nblk - b0 : chunk;
      for (pc = 0; pc < k; pc += kcs) {
        int kcb = k - pc < kcs ? k - pc : kcs, kcu = amp__gemm_units(K, kcb);
        /* op(B)^T's rows are op(B)'s columns j: element (j, p) at B[p*brs + j*bcs] */
        if (!rb) K->pack(bp, nr, (const char *)B + ((size_t)jc * bcs + (size_t)pc * brs) * bsz, bt, bcs, brs, ncb, kcb);
        if (bk) {   /* this block's scales: the panel's columns, the chunk's rows (0 past the ends) */
          int x, x0 = b0 * mc, x1 = (b0 + nbc) * mc < m ? (b0 + nbc) * mc : m;
          for (x = 0; x < tiles_n * nr; x++)
            sbv[x] = x >= ncb ? 0.0f : bk->b_scales ? amp__gemm_block_scale_at(bk->b_scales, bk->b_blocks, bk->b_kcol, jc + x, pc, k, n) : 1.0f;
          for (x = x0; x < x1 + mr; x++)
            sav[x] = x >= m ? 0.0f : bk->a_scales ? amp__gemm_block_scale_at(bk->a_scales, bk->a_blocks, bk->a_kcol, x, pc, k, m) : 1.0f;
        }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nth) schedule(static, 1) if (nth > 1)
#endif
        for (ib = b0; ib < b0 + nbc; ib++) {
          int tid = 0, ic = ib * mc, tr, tc;
          int mcb = m - ic < mc ? m - ic : mc, tiles_m = (mcb + mr - 1) / mr;
          float *ap, *acc = accs + (size_t)(ib - b0) * nacc;
          const float *ar;
          size_t ra_ld = a32 ? ars : (size_t)kcb;   /* A's rows in place, or widened kcb apart */
#ifdef _OPENMP
          tid = omp_get_thread_num();
#endif
          ap = work + (size_t)tid * na;
          ar = NULL;
          if (!ra) (K->pack_a ? K->pack_a : K->pack)(ap, mr, (const char *)A + ((size_t)ic * ars + (size_t)pc * acs) * asz, at, ars, acs, mcb, kcb);
          else if (a32) ar = (const float *)A + (size_t)ic * ars + (size_t)pc;
          else {   /* other types: widened row by row (no transpose), then read in place */
            K->widen_rows(ap, (const char *)A + ((size_t)ic * ars + (size_t)pc) * asz, at, ars, mcb, kcb);
            ar = ap;
          }
          if (K->tiles) K->tiles(1);   /* (AMX) the tile state for this row block's tiles */
          if (bk) {   /* block scales: each tile's sums over the block scaled into its running sums */
            float part_[AMP__GEMM_TILE_MAX + 16], *part = amp__align64(part_);   /* kernels store tiles aligned */
            const int last = pc + kcs >= k;
            for (tr = 0; tr < tiles_m; tr++)
              for (tc = 0; tc < tiles_n; tc++) {
                float *tile = acc + ((size_t)tr * tiles_n + tc) * mr * nr;
                int r, rows = mcb - tr * mr < mr ? mcb - tr * mr : mr, w = ncb - tc * nr < nr ? ncb - tc * nr : nr;
                amp__gemm_tile(K, ra, kcu, ap + (size_t)tr * mr * kcu, ar, ra_ld, tr * mr, mcb - tr * mr,
                               bp + (size_t)tc * nr * kcu, part, 0, NULL);
                if (!last) {   /* the sums start at +0 */
                  amp__gemm_tile_block_add(tile, (size_t)nr, part, (size_t)nr, sbv + tc * nr, sav + ic + tr * mr, mr, nr,
                                           pc == 0);
                } else {   /* the last block: added in the f32 C itself (rows contiguous, the caller's) */
                  float *c0 = (float *)C + (size_t)(ic + tr * mr) * crs + (size_t)(jc + tc * nr);
                  for (r = 0; r < rows && pc > 0; r++)
                    memcpy(c0 + (size_t)r * crs, tile + r * nr, sizeof(float) * (size_t)w);
                  amp__gemm_tile_block_add(c0, crs, part, (size_t)nr, sbv + tc * nr, sav + ic + tr * mr, rows, w, pc == 0);
                }
              }
          } else if (rb) {        /* B read in place; each sliver of B stays in L1 across A's */
            const uint16_t *bs = (const uint16_t *)B + (size_t)pc * brs + (size_t)jc;
            for (tc = 0; tc < tiles_n; tc++)
              for (tr = 0; tr < tiles_m; tr++) {
                amp__gemm_out out;
                float *tile = acc + ((size_t)tr * tiles_n + tc) * mr * nr;
                int w = ncb - tc * nr < nr ? ncb - tc * nr : nr;
                if (pc + kcs < k || !direct) {
                  K->micro_rb(kcu, ap + (size_t)tr * mr * kcu, bs + (size_t)tc * nr, brs, w, tile, pc > 0, NULL);
                  continue;
                }
                out.c = (char *)C + ((size_t)(ic + tr * mr) * crs + (size_t)(jc + tc * nr)) * amp_dtype_size(ct);
                out.ct = ct;
                out.ldc = crs;
                out.rows = mcb - tr * mr < mr ? mcb - tr * mr : mr;
                out.cols = w;
                out.alpha = alpha; out.beta = beta;
                out.bias = o->bias ? br + tc * nr : NULL;
                out.act = (int)o->act;
                out.bf16_hw = bf16_hw;
                out.plain = plain;
                K->micro_rb(kcu, ap + (size_t)tr * mr * kcu, bs + (size_t)tc * nr, brs, w, tile, pc > 0, &out);
              }
            if (pc + kcs >= k && !direct)
              for (tr = 0; tr < tiles_m; tr++)
                amp__gemm_store_block(K, acc + (size_t)tr * tiles_n * mr * nr, mcb - tr * mr < mr ? mcb - tr * mr : mr,
                                      ncb, ic + tr * mr, jc, alpha, beta, C, ct, crs, ccs, o);
          } else if (pc + kcs < k) {   /* not the last slice: each sliver of B stays in L1 across A's */
            for (tc = 0; tc < tiles_n; tc++)
              for (tr = 0; tr < tiles_m; tr++)
                amp__gemm_tile(K, ra, kcu, ap + (size_t)tr * mr * kcu, ar, ra_ld, tr * mr, mcb - tr * mr,
                               bp + (size_t)tc * nr * kcu, acc + ((size_t)tr * tiles_n + tc) * mr * nr, pc > 0, NULL);
          } else if (direct) {    /* the last, into C */
            for (tr = 0; tr < tiles_m; tr++)
              for (tc = 0; tc < tiles_n; tc++) {
                amp__gemm_out out;
                out.c = (char *)C + ((size_t)(ic + tr * mr) * crs + (size_t)(jc + tc * nr)) * amp_dtype_size(ct);
                out.ct = ct;
                out.ldc = crs;
                out.rows = mcb - tr * mr < mr ? mcb - tr * mr : mr;
                out.cols = ncb - tc * nr < nr ? ncb - tc * nr : nr;
                out.alpha = alpha; out.beta = beta;
                out.bias = o->bias ? br + tc * nr : NULL;
                out.act = (int)o->act;
                out.bf16_hw = bf16_hw;
                out.plain = plain;
                amp__gemm_tile(K, ra, kcu, ap + (size_t)tr * mr * kcu, ar, ra_ld, tr * mr, mcb - tr * mr,
                               bp + (size_t)tc * nr * kcu, acc + ((size_t)tr * tiles_n + tc) * mr * nr, pc > 0, &out);
              }
          } else {                /* the last: a row of tiles is finished, then written to C while in cache */
            for (tr = 0; tr < tiles_m; tr++) {
              float *row = acc + (size_t)tr * tiles_n * mr * nr;
              for (tc = 0; tc < tiles_n; tc++)
                amp__gemm_tile(K, ra, kcu, ap + (size_t)tr * mr * kcu, ar, ra_ld, tr * mr, mcb - tr * mr,
                               bp + (size_t)tc * nr * kcu, row + (size_t)tc * mr * nr, pc > 0, NULL);
              amp__gemm_store_block(K, row, mcb - tr * mr < mr ? mcb - tr * mr : mr, ncb, ic + tr * mr, jc, alpha, beta,
                                    C, ct, crs, ccs, o);
            }
          }
          if (K->tiles) K->tiles(0);
        }
      }
    }
  }
  AMP_FREE(sav);
  amp__gemm_ws_put(mem, kept);
  return AMP_OK;
}
static amp_status amp__gemm_cpu(int m, int n, int k, float alpha, const void *A, amp_dtype at, size_t ars, size_t acs,
                                const void *B, amp_dtype bt, size_t brs, size_t bcs, float beta,
                                void *C, amp_dtype ct, size_t crs, size_t ccs, const amp_gemm_opts *o) {
  return amp__gemm_cpu_blk(m, n, k, alpha, A, at, ars, acs, B, bt, brs, bcs, beta, C, ct, crs, ccs, o, NULL);
}

/* ---- fp8 products (the manual's "fp8 inputs and outputs"): a wrapper around amp__gemm_cpu ----
   fp8 inputs are widened exactly to f32 while they are packed (amp__gemm_pack_512's fp8 loads,
   amp__gemm_ld16_fp8; amp__gemm_pack's gathers through amp_convert's fp8 loops), or to bf16 for
   the vdpbf16ps kernel (amp__gemm_pack_pairs), so every kernel above computes fp8 products
   unchanged. Block scales: the k slices are the blocks (32 or 128 deep); each tile's sums over a
   block are scaled and added into its running sums in k order (amp__gemm_cpu_blk, into an f32
   buffer), as a product per block added into the buffer would give them. An fp8 C, or c_amax: the
   f32 results go through the buffer, then the epilogue, the amax and the scaled cast. */
static int amp__gemm_is_fp8(amp_dtype t) { return amp__dtype_is_fp8(t); }

/* amp__gelu_tanh over a line of n floats in place: the plain loop, or 16 (AVX-512), 8 (AVX2) or 4
   (NEON, below) lanes at a time with amp__tanh's operations on doubles (8, 4 or 2 to a register),
   the same bits:
   each product, sum, difference and quotient an IEEE one (the explicit-rounding intrinsics under
   clang at 16 lanes; at 8 an empty asm after each product and difference, and vdivpd itself, as
   amp__mul8 and amp__div8 do), the conversions exact but the last (round to nearest), and the
   lanes outside amp__tanh's double range (NaN, |x| >= 10, |x| < 2^-12) given its answers from
   the bits. */
/* A line W lanes at a time (VT: their vector type, LD / ST its loads and stores), the rest by the
   plain function (AVX2, NEON; AVX-512 masks its tail instead). */
#define AMP__GELU_LINE(ATTR, name, VT, W, LD, ST, MUL, ADD, TANH, C) \
  static ATTR void name(float *t, size_t n) { \
    size_t j; \
    for (j = 0; j + W <= n; j += W) { VT x = LD(t + j); ST(t + j, AMP__GELU_OF(x, MUL, ADD, TANH, C)); } \
    for (; j < n; j++) t[j] = amp__gelu_tanh(t[j]); \
  }
#ifdef AMP__X86_SIMD
AMP__EXACT_BEGIN
/* amp__tanh's double part for 8 magnitudes a in [2^-12, 10) */
AMP__AVX512_INLINE __m256 amp__tanh_pd8(__m256 a) {
  __m512d y = amp__addpd8(_mm512_cvtps_pd(a), _mm512_cvtps_pd(a)), r, p, em;
  __m256i k = _mm512_cvttpd_epi32(AMP__TANH_KARG(y, amp__mulpd8, amp__addpd8, _mm512_set1_pd));
  __m512d kd = _mm512_cvtepi32_pd(k);
  __m512d k2 = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(k, _mm256_set1_epi32(1023))), 52));
  r = AMP__TANH_R(y, kd, amp__mulpd8, amp__subpd8, _mm512_set1_pd);
  AMP__TANH_POLY(p, r, amp__mulpd8, amp__addpd8, _mm512_set1_pd);
  em = _mm512_mask_blend_pd(_mm256_cmpeq_epi32_mask(k, _mm256_setzero_si256()),
                            AMP__TANH_EM(p, k2, amp__mulpd8, amp__addpd8, amp__subpd8, _mm512_set1_pd), p);
  return amp__cvtpd8(AMP__TANH_Q(em, amp__addpd8, amp__divpd8, _mm512_set1_pd));
}
AMP__AVX512_INLINE __m512 amp__tanh16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x), a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i sg = _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u));
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32((int)AMP__TANH_TINY));
  const __mmask16 big = _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32((int)AMP__TANH_ONE));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
  __m512 am = _mm512_mask_blend_ps((__mmask16)(tiny | big), _mm512_castsi512_ps(a), _mm512_set1_ps(1.0f));
  __m512 t = _mm512_insertf32x8(_mm512_castps256_ps512(amp__tanh_pd8(_mm512_castps512_ps256(am))),
                                amp__tanh_pd8(_mm512_extractf32x8_ps(am, 1)), 1);
  __m512i b = _mm512_or_si512(_mm512_castps_si512(t), sg);
  b = _mm512_mask_mov_epi32(b, tiny, u);
  b = _mm512_mask_mov_epi32(b, big, _mm512_or_si512(sg, _mm512_set1_epi32(0x3f800000)));
  b = _mm512_mask_mov_epi32(b, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
  return _mm512_castsi512_ps(b);
}
static AMP__AVX512 void amp__gelu_line_avx512(float *t, size_t n) {
  size_t j;
  for (j = 0; j < n; j += 16) {
    const __mmask16 m = amp__mask16(n - j);
    __m512 x = _mm512_maskz_loadu_ps(m, t + j);
    _mm512_mask_storeu_ps(t + j, m, AMP__GELU_OF(x, amp__mul16, amp__add16, amp__tanh16, _mm512_set1_ps));
  }
}
/* 4 doubles a lane; under clang an empty asm after each product and difference (no fusing, no
   regrouping) and vdivpd itself (no reciprocal), as amp__mul8 and amp__div8 */
AMP__AVX2_INLINE __m256d amp__mulpd4(__m256d a, __m256d b) { __m256d p = _mm256_mul_pd(a, b); AMP__FP_BARRIER(p); return p; }
AMP__AVX2_INLINE __m256d amp__subpd4(__m256d a, __m256d b) { __m256d p = _mm256_sub_pd(a, b); AMP__FP_BARRIER(p); return p; }
AMP__AVX2_INLINE __m256d amp__addpd4(__m256d a, __m256d b) { __m256d p = _mm256_add_pd(a, b); AMP__FP_BARRIER(p); return p; }
#if defined(__clang__)
AMP__AVX2_INLINE __m256d amp__divpd4(__m256d a, __m256d b) { __asm__("vdivpd %2, %1, %0" : "=x"(a) : "x"(a), "x"(b)); return a; }
#else
AMP__AVX2_INLINE __m256d amp__divpd4(__m256d a, __m256d b) { return _mm256_div_pd(a, b); }
#endif
AMP__AVX2_INLINE __m128 amp__tanh_pd4(__m128 a) {
  __m256d y = amp__addpd4(_mm256_cvtps_pd(a), _mm256_cvtps_pd(a)), r, p, em, k2;
  __m128i k = _mm256_cvttpd_epi32(AMP__TANH_KARG(y, amp__mulpd4, amp__addpd4, _mm256_set1_pd));
  __m256d kd = _mm256_cvtepi32_pd(k);
  k2 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(k, _mm_set1_epi32(1023))), 52));
  r = AMP__TANH_R(y, kd, amp__mulpd4, amp__subpd4, _mm256_set1_pd);
  AMP__TANH_POLY(p, r, amp__mulpd4, amp__addpd4, _mm256_set1_pd);
  em = _mm256_blendv_pd(AMP__TANH_EM(p, k2, amp__mulpd4, amp__addpd4, amp__subpd4, _mm256_set1_pd), p,
                        _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpeq_epi32(k, _mm_setzero_si128()))));
  return _mm256_cvtpd_ps(AMP__TANH_Q(em, amp__addpd4, amp__divpd4, _mm256_set1_pd));
}
AMP__AVX2_INLINE __m256 amp__tanh8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x), a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i sg = _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u));
  const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)AMP__TANH_TINY), a);   /* a: at most 0x7fffffff */
  const __m256i big = _mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)AMP__TANH_ONE - 1));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  __m256 am = _mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(1.0f), _mm256_castsi256_ps(_mm256_or_si256(tiny, big)));
  __m256 t = _mm256_insertf128_ps(_mm256_castps128_ps256(amp__tanh_pd4(_mm256_castps256_ps128(am))),
                                  amp__tanh_pd4(_mm256_extractf128_ps(am, 1)), 1);
  __m256i b = _mm256_or_si256(_mm256_castps_si256(t), sg);
  b = _mm256_blendv_epi8(b, u, tiny);
  b = _mm256_blendv_epi8(b, _mm256_or_si256(sg, _mm256_set1_epi32(0x3f800000)), big);
  b = _mm256_blendv_epi8(b, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
  return _mm256_castsi256_ps(b);
}
AMP__GELU_LINE(AMP__AVX2, amp__gelu_line_avx2, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, amp__mul8, _mm256_add_ps,
               amp__tanh8, _mm256_set1_ps)
AMP__EXACT_END
#endif
#ifdef AMP__NEON_SIMD
/* NEON (AArch64): 4 lanes, 2 doubles to a register; each product, sum and difference through
   AMP__ROUNDED (no FMLA, no regrouping), the quotient by FDIV in asm, as amp__mul4 and amp__div4. */
AMP__NEON_STEP_INLINE float64x2_t amp__mulpd2(float64x2_t a, float64x2_t b) { float64x2_t r = vmulq_f64(a, b); AMP__ROUNDED(r); return r; }
AMP__NEON_STEP_INLINE float64x2_t amp__addpd2(float64x2_t a, float64x2_t b) { float64x2_t r = vaddq_f64(a, b); AMP__ROUNDED(r); return r; }
AMP__NEON_STEP_INLINE float64x2_t amp__subpd2(float64x2_t a, float64x2_t b) { float64x2_t r = vsubq_f64(a, b); AMP__ROUNDED(r); return r; }
AMP__NEON_STEP_INLINE float64x2_t amp__divpd2(float64x2_t a, float64x2_t b) {
  float64x2_t r;
  __asm__("fdiv %0.2d, %1.2d, %2.2d" : "=w"(r) : "w"(a), "w"(b));
  return r;
}
AMP__NEON_STEP_INLINE float32x2_t amp__tanh_pd2(float64x2_t a) {
  float64x2_t y = amp__addpd2(a, a), r, p, em, kd, k2;
  int64x2_t k = vcvtq_s64_f64(AMP__TANH_KARG(y, amp__mulpd2, amp__addpd2, vdupq_n_f64));
  kd = vcvtq_f64_s64(k);
  k2 = vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(k, vdupq_n_s64(1023)), 52));
  r = AMP__TANH_R(y, kd, amp__mulpd2, amp__subpd2, vdupq_n_f64);
  AMP__TANH_POLY(p, r, amp__mulpd2, amp__addpd2, vdupq_n_f64);
  em = vbslq_f64(vceqq_s64(k, vdupq_n_s64(0)), p,
                 AMP__TANH_EM(p, k2, amp__mulpd2, amp__addpd2, amp__subpd2, vdupq_n_f64));
  return vcvt_f32_f64(AMP__TANH_Q(em, amp__addpd2, amp__divpd2, vdupq_n_f64));
}
AMP__NEON_STEP_INLINE float32x4_t amp__tanh4(float32x4_t x) {
  const uint32x4_t u = vreinterpretq_u32_f32(x), a = vandq_u32(u, vdupq_n_u32(0x7fffffffu));
  const uint32x4_t sg = vandq_u32(u, vdupq_n_u32(0x80000000u));
  const uint32x4_t tiny = vcltq_u32(a, vdupq_n_u32(AMP__TANH_TINY)), big = vcgeq_u32(a, vdupq_n_u32(AMP__TANH_ONE));
  const uint32x4_t nan = vcgtq_u32(a, vdupq_n_u32(0x7f800000u));
  float32x4_t am = vbslq_f32(vorrq_u32(tiny, big), vdupq_n_f32(1.0f), vreinterpretq_f32_u32(a));
  float32x4_t t = vcombine_f32(amp__tanh_pd2(vcvt_f64_f32(vget_low_f32(am))), amp__tanh_pd2(vcvt_high_f64_f32(am)));
  uint32x4_t b = vorrq_u32(vreinterpretq_u32_f32(t), sg);
  b = vbslq_u32(tiny, u, b);
  b = vbslq_u32(big, vorrq_u32(sg, vdupq_n_u32(0x3f800000u)), b);
  b = vbslq_u32(nan, vorrq_u32(u, vdupq_n_u32(0x00400000u)), b);
  return vreinterpretq_f32_u32(b);
}
/* The sums through AMP__ROUNDED too: clang -Ofast on AArch64 (no float_control there) otherwise
   turns (0.5 x) (1 + t) into an FMLA of 0.5 x, t and 0.5 x. */
AMP__NEON_STEP_INLINE float32x4_t amp__addr4(float32x4_t a, float32x4_t b) { float32x4_t r = vaddq_f32(a, b); AMP__ROUNDED(r); return r; }
AMP__GELU_LINE(AMP__EXACT_FP, amp__gelu_line_neon, float32x4_t, 4, vld1q_f32, vst1q_f32, amp__mul4, amp__addr4, amp__tanh4,
               vdupq_n_f32)
#endif
static void amp__gelu_line(float *t, size_t n) {
  size_t j = 0;
#ifdef AMP__X86_SIMD
  if (amp_simd_active() && amp__isa() >= 2) { amp__gelu_line_avx512(t, n); return; }
  if (amp_simd_active()) { amp__gelu_line_avx2(t, n); return; }
#elif defined(AMP__NEON_SIMD)
  if (amp_simd_active()) { amp__gelu_line_neon(t, n); return; }
#endif
  for (; j < n; j++) t[j] = amp__gelu_tanh(t[j]);
}
/* One block's partial products into the running sums: t[j] = t[j] + (sa * sb[j]) * pr[j] for j < n,
   each operation rounded on its own (no fused multiply-add), in the same order on every path: the
   plain loop, or 16 (amp__gemm_tile_block_add's) or 8 lanes at a time on x86 (amp__mul16 / amp__add16 / amp__mul8: the rounded
   products of the step's vector bodies; the AVX2 tail by the plain loop). One pass over a tile's
   rows per block along k. */
static AMP__EXACT_FP void amp__gemm_block_add_plain(float *t, const float *pr, const float *sb, float sa, int n) {
  int j;
  for (j = 0; j < n; j++) t[j] = amp__fadd(t[j], amp__fmul(amp__fmul(sa, sb[j]), pr[j]));
}
#ifdef AMP__X86_SIMD
AMP__EXACT_BEGIN
static AMP__AVX2 void amp__gemm_block_add_avx2(float *t, const float *pr, const float *sb, float sa, int n) {
  const __m256 a = _mm256_set1_ps(sa);
  int j;
  for (j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(t + j, _mm256_add_ps(_mm256_loadu_ps(t + j), amp__mul8(amp__mul8(a, _mm256_loadu_ps(sb + j)),
                                                                           _mm256_loadu_ps(pr + j))));
  amp__gemm_block_add_plain(t + j, pr + j, sb + j, sa, n - j);
}
AMP__EXACT_END
#endif
/* The same for rows of a tile (row r: t + r * ldt, pr + r * ldp, scale sa[r]; w columns), the
   level chosen once a tile; zero: t read as +0 (the first block's sums: 0 + x, as a buffer of
   zeros gives them), not read. */
#ifdef AMP__X86_SIMD
AMP__EXACT_BEGIN
static AMP__AVX512 void amp__gemm_tile_block_add_avx512(float *t, size_t ldt, const float *pr, size_t ldp,
                                                         const float *sb, const float *sa, int rows, int w, int zero) {
  int r, j;
  for (r = 0; r < rows; r++) {
    const __m512 a = _mm512_set1_ps(sa[r]);
    float *tr = t + (size_t)r * ldt;
    const float *p = pr + (size_t)r * ldp;
    for (j = 0; j < w; j += 16) {
      const __mmask16 k = amp__mask16((size_t)(w - j));
      __m512 f = amp__mul16(a, _mm512_maskz_loadu_ps(k, sb + j)), t0 = zero ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k, tr + j);
      _mm512_mask_storeu_ps(tr + j, k, amp__add16(t0, amp__mul16(f, _mm512_maskz_loadu_ps(k, p + j))));
    }
  }
}
AMP__EXACT_END
#endif
static void amp__gemm_tile_block_add(float *t, size_t ldt, const float *pr, size_t ldp, const float *sb, const float *sa,
                                     int rows, int w, int zero) {
  int r;
#ifdef AMP__X86_SIMD
  if (amp_simd_active() && amp__isa() >= 2) { amp__gemm_tile_block_add_avx512(t, ldt, pr, ldp, sb, sa, rows, w, zero); return; }
#endif
  for (r = 0; r < rows; r++) {
    float *tr = t + (size_t)r * ldt;
    if (zero) memset(tr, 0, sizeof(float) * (size_t)w);   /* +0.0f: all bits zero */
#ifdef AMP__X86_SIMD
    if (amp_simd_active()) { amp__gemm_block_add_avx2(tr, pr + (size_t)r * ldp, sb, sa[r], w); continue; }
#endif
    amp__gemm_block_add_plain(tr, pr + (size_t)r * ldp, sb, sa[r], w);
  }
}

/* amp__gemm_cpu with the fp8 options of o. a_kcol (b_kcol): k runs along the rows of A (B) as
   stored (row-major view), i.e. op(A)(i, p) is stored at (i, p) (op(B)(p, j) at (j, p)); else at
   (p, i) ((p, j)). AMP__EXACT_FP: GCC under -Ofast would otherwise re-associate the scale
   products (amp__fmul's barriers are Clang's). */
static AMP__EXACT_FP amp_status amp__gemm_cpu_fp8(int m, int n, int k, float alpha, const void *A, amp_dtype at,
                                                  size_t ars, size_t acs, const void *B, amp_dtype bt, size_t brs,
                                                  size_t bcs, float beta, void *C, amp_dtype ct, size_t crs,
                                                  size_t ccs, const amp_gemm_opts *o, int a_kcol, int b_kcol) {
  amp_gemm_opts po;   /* the bare product: no epilogue, the caller's algo */
  float s = alpha, *T;
  int blocks = o->a_scales || o->b_scales, c8 = amp__gemm_is_fp8(ct), has_bias = o->bias != NULL, i, j;
  size_t mn = (size_t)m * (size_t)n, wmax;
  amp_status st = AMP_OK;
  amp__gemm_blk bk;
  s = amp__gemm_fp8_factor(alpha, o->a_scale_inv, o->b_scale_inv);
  if (!blocks && !c8 && !o->c_amax && k > 0 && s != 0.0f)   /* per-tensor scales alone: one factor on the sum */
    return amp__gemm_cpu(m, n, k, s, A, at, ars, acs, B, bt, brs, bcs, beta, C, ct, crs, ccs, o);
  memset(&po, 0, sizeof po);
  po.algo = o->algo;
  bk.w = amp__gemm_block_width(o->a_scales ? o->a_blocks : o->b_blocks);
  bk.a_scales = o->a_scales; bk.a_blocks = o->a_blocks; bk.a_kcol = a_kcol;
  bk.b_scales = o->b_scales; bk.b_blocks = o->b_blocks; bk.b_kcol = b_kcol;
  if (k > 0 && s != 0.0f && ct == AMP_F32 && ccs == 1 && beta == 0.0f && !has_bias && o->act == AMP_ACT_NONE) {
    /* an f32 C with contiguous rows and nothing to add or apply (block scales, or c_amax): the sums
       straight into C (its elements written only once every buffer is allocated), then the block
       scales' s, as the buffer below takes it, and the amax of what C holds. s is skipped for s = 1
       where the x86 kernels run, as 1 * t is t there (t is never a subnormal that the FPU would
       flush, except under DAZ without FTZ: checked). Elsewhere the FPU's modes are not read here,
       and s is applied whatever its value. */
    int scale = blocks && s != 1.0f;
    float am = 0.0f;
#ifdef AMP__GEMM_FAST
    if (blocks && (_mm_getcsr() & 0x8040u) == 0x40u) scale = 1;
#else
    scale = blocks;
#endif
    if (blocks) st = amp__gemm_cpu_blk(m, n, k, 1.0f, A, at, ars, acs, B, bt, brs, bcs, 0.0f, C, AMP_F32, crs, 1, &po, &bk);
    else st = amp__gemm_cpu(m, n, k, s, A, at, ars, acs, B, bt, brs, bcs, 0.0f, C, AMP_F32, crs, 1, &po);
    for (i = 0; st == AMP_OK && i < m; i++) {
      float *ci = (float *)C + (size_t)i * crs;
      for (j = 0; scale && j < n; j++) ci[j] = s * ci[j];
      if (o->c_amax) amp__f8m_amax(&am, ci, (size_t)n);
    }
    if (st == AMP_OK && o->c_amax) *o->c_amax = am;
    return st;
  }
  /* T: the m x n sums, row-major, then three lines of work: one of T's (a column of it, for a
     column-major C), one of C widened (beta), and the bias widened */
  wmax = (size_t)(m > n ? m : n);
  T = (float *)AMP_MALLOC((mn + 2 * wmax + (size_t)n) * sizeof(float));
  if (!T) return amp__fail(AMP_ERR_NOMEM, "out of memory for %zu floats of fp8 product results", mn + 2 * wmax + n);
  if (k > 0 && s != 0.0f && !blocks) {
    st = amp__gemm_cpu(m, n, k, s, A, at, ars, acs, B, bt, brs, bcs, 0.0f, T, AMP_F32, (size_t)n, 1, &po);
  } else if (k > 0 && s != 0.0f) {   /* each block's sums scaled into the tiles, in k order; s below */
    st = amp__gemm_cpu_blk(m, n, k, 1.0f, A, at, ars, acs, B, bt, brs, bcs, 0.0f, T, AMP_F32, (size_t)n, 1, &po, &bk);
  } else memset(T, 0, mn * sizeof(float));   /* +0.0f: all bits zero (the products write every element) */
  if (st != AMP_OK) { AMP_FREE(T); return st; }
  {   /* line by line along C's contiguous direction (rows, or columns of a column-major C: one of C's
         strides is 1 in every layout amp_gemm_ex gives) */
    const int rows = ccs == 1, lines = rows ? m : n, w = rows ? n : m;
    const int bare = beta == 0.0f && !has_bias && o->act == AMP_ACT_NONE, gelu = o->act == AMP_ACT_GELU;
    const size_t csz = amp_dtype_size(ct), step = rows ? crs : ccs;
    float cs = c8 ? *o->c_scale : 1.0f, am = 0.0f, *lb = T + mn, *cw = lb + wmax, *bw = cw + wmax;
    if (has_bias && rows) amp_convert(bw, AMP_F32, o->bias, o->bias_type, (size_t)n);   /* widened once */
    for (i = 0; i < lines; i++) {
      char *cl = (char *)C + (size_t)i * step * csz;
      float *tl = rows ? T + (size_t)i * n : lb, b1 = 0.0f;
      if (!rows)
        for (j = 0; j < w; j++) tl[j] = T[(size_t)j * n + i];
      if (blocks && k > 0 && s != 0.0f)
        for (j = 0; j < w; j++) tl[j] = s * tl[j];
      if (!bare) {   /* amp__gemm_fp8_epi without C's scale (the cast below applies it) */
        float out;
        if (beta != 0.0f) amp_convert(cw, AMP_F32, cl, ct, (size_t)w);   /* not fp8: refused with beta */
        if (has_bias && !rows) b1 = amp__load(o->bias, o->bias_type, (size_t)i);
        for (j = 0; j < w; j++)
          tl[j] = amp__gemm_fp8_epi(tl[j], beta, beta != 0.0f ? cw[j] : 0.0f, has_bias, rows ? bw[j] : b1,
                                    gelu ? AMP_ACT_NONE : (int)o->act, 0, 1.0f, &out);
        if (gelu) amp__gelu_line(tl, (size_t)w);   /* the activation last, as amp__gemm_fp8_epi applies it */
      }
      /* the amax of t, and the cast: into fp8 amp_quantize's (sat(fl32(t * cs)), amp__store's) */
      if (c8) amp__cpu_quantize(NULL, cl, ct, tl, AMP_F32, (size_t)w, &cs, &am, NULL, NULL, 0);
      else {
        if (o->c_amax) amp__f8m_amax(&am, tl, (size_t)w);
        amp_convert(cl, ct, tl, AMP_F32, (size_t)w);
      }
    }
    if (o->c_amax) *o->c_amax = am;
  }
  AMP_FREE(T);
  return AMP_OK;
}

/* The CPU's operation: the strides of op(A), op(B) and C in elements, then the CPU product (the
   fast kernel or the reference, amp__gemm_pick), which sets amp_last_error itself, so msg stays
   empty. */
#ifdef AMP__X86_SIMD
/* The upper halves of the vector registers cleared (vzeroupper) once a product returns: with them
   in use, the trainer's own SSE code (libm's tanhf in a GELU) ran at half speed after a product on
   this project's AMD CPU. GCC inserts one at the return of each AVX function only when it
   optimizes at -O2 or more, and not in functions with 512-bit arguments (amp__gemm_put_bf16):
   cleared here once, for every kernel, whatever the flags. */
static AMP__AVX2 void amp__zeroupper(void) { _mm256_zeroupper(); }
#endif
static amp_status amp__cpu_gemm(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k,
                                float alpha, const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type,
                                int ldb, float beta, void *C, amp_dtype c_type, int ldc, const amp_gemm_opts *o,
                                char *msg, size_t cap) {
  size_t ars, acs, brs, bcs, crs, ccs;
  amp_status st;
  (void)d;
  if (layout == AMP_ROW_MAJOR) {
    ars = ta == AMP_NO_TRANS ? (size_t)lda : 1; acs = ta == AMP_NO_TRANS ? 1 : (size_t)lda;
    brs = tb == AMP_NO_TRANS ? (size_t)ldb : 1; bcs = tb == AMP_NO_TRANS ? 1 : (size_t)ldb;
    crs = (size_t)ldc; ccs = 1;
  } else {
    ars = ta == AMP_NO_TRANS ? 1 : (size_t)lda; acs = ta == AMP_NO_TRANS ? (size_t)lda : 1;
    brs = tb == AMP_NO_TRANS ? 1 : (size_t)ldb; bcs = tb == AMP_NO_TRANS ? (size_t)ldb : 1;
    crs = 1; ccs = (size_t)ldc;
  }
  if (amp__gemm_fp8_mode(a_type, b_type, c_type, o))
    st = amp__gemm_cpu_fp8(m, n, k, alpha, A, a_type, ars, acs, B, b_type, brs, bcs, beta, C, c_type, crs, ccs, o,
                           (layout == AMP_ROW_MAJOR) == (ta == AMP_NO_TRANS), (layout == AMP_ROW_MAJOR) == (tb == AMP_TRANS));
  else st = amp__gemm_cpu(m, n, k, alpha, A, a_type, ars, acs, B, b_type, brs, bcs, beta, C, c_type, crs, ccs, o);
#ifdef AMP__X86_SIMD
  if (amp__cpu_level() >= 1) amp__zeroupper();
#endif
  /* the loops' only failure, an allocation: its message to the caller, who puts the name of the
     function called in front (amp_gemm or amp_gemm_ex) */
  if (st != AMP_OK) snprintf(msg, cap, "%s", amp_last_error());
  return st;
}

static const char *amp__trans_name(amp_trans t) { return t == AMP_NO_TRANS ? "AMP_NO_TRANS" : "AMP_TRANS"; }
/* The elements from a stored matrix's first to its last: `lines` rows (row-major) or columns
   (col-major) of `len` elements each, `ld` apart. */
static size_t amp__gemm_span(int lines, int len, int ld) { return (size_t)(lines - 1) * (size_t)ld + (size_t)len; }
/* The elements from the first to the last of a stored matrix whose op() is r x c (op: t). */
static size_t amp__gemm_op_span(int row, amp_trans t, int r, int c, int ld) {
  int rows = t == AMP_NO_TRANS ? r : c, cols = t == AMP_NO_TRANS ? c : r;
  return amp__gemm_span(row ? rows : cols, row ? cols : rows, ld);
}

/* The fp8 arguments of amp_gemm_ex (the manual's "fp8 inputs and outputs"); nothing is read but
   the pointers' values and the types. */
static amp_status amp__gemm_fp8_check(const char *op, amp_device *d, amp_dtype a_type, amp_dtype b_type,
                                      amp_dtype c_type, int m, int n, int k, int row, amp_trans ta, amp_trans tb,
                                      float beta, const amp_gemm_opts *o) {
  int c8 = amp__gemm_is_fp8(c_type), x;
  if (amp__dtype_fp8(a_type) == 1 && amp__dtype_fp8(b_type) == 1)   /* the fp8 column: 1 is E5M2 */
    return amp__fail(AMP_ERR_UNSUPPORTED, "%s: a_type and b_type are both AMP_E5M2: the GPUs' fp8 Tensor Cores "
                     "(cuBLASLt) have no E5M2 x E5M2 product, so neither has amp.h; make one of them AMP_E4M3", op);
  if (c8 && !o->c_scale)
    return amp__fail(AMP_ERR_ARG, "%s: c_type %d (%s) is fp8 and opts->c_scale is NULL (plain amp_gemm has "
                     "none): an fp8 C is stored as sat(result * *c_scale), give the scale (amp_fp8_scaler_scale_ptr)",
                     op, (int)c_type, amp__dtype_name(c_type));
  if (!c8 && o->c_scale)
    return amp__fail(AMP_ERR_ARG, "%s: opts->c_scale is given and c_type is %s: c_scale scales an fp8 C "
                     "(AMP_E4M3 or AMP_E5M2) only", op, amp__dtype_name(c_type));
  if (c8 && beta != 0.0f)
    return amp__fail(AMP_ERR_ARG, "%s: beta is %g with an fp8 C (%s): C's codes hold result * c_scale, and "
                     "there is no scale to read them back with; beta must be 0 (cuBLASLt too reads beta's "
                     "C from a separate 16-bit matrix)", op, (double)beta, amp__dtype_name(c_type));
  for (x = 0; x < 2; x++) {
    const char *name = x ? "b" : "a";
    const void *sc = x ? o->b_scales : o->a_scales;
    amp_block_scaling kind = x ? o->b_blocks : o->a_blocks;
    amp_dtype t = x ? b_type : a_type;
    /* k along the stored rows: op(A)(i, p) stored at row i, op(B)(p, j) at row j */
    int kcol = x ? row == (tb == AMP_TRANS) : row == (ta == AMP_NO_TRANS);
    if (!sc) continue;
    if (kind != AMP_BLOCK_MX_RCEIL && kind != AMP_BLOCK_MX_FLOOR && kind != AMP_BLOCK_1x128 &&
        kind != AMP_BLOCK_128x128)
      return amp__fail(AMP_ERR_ARG, "%s: opts->%s_blocks %d is not AMP_BLOCK_MX_RCEIL, AMP_BLOCK_MX_FLOOR, "
                       "AMP_BLOCK_1x128 or AMP_BLOCK_128x128", op, name, (int)kind);
    if (!amp__gemm_is_fp8(t))
      return amp__fail(AMP_ERR_ARG, "%s: opts->%s_scales is given and %s_type is %s: block scales dequantise "
                       "fp8 codes (amp_quantize_blocks' output)", op, name, name, amp__dtype_name(t));
    if (kind != AMP_BLOCK_MX_RCEIL && kind != AMP_BLOCK_MX_FLOOR && ((uintptr_t)sc & 3u))
      return amp__fail(AMP_ERR_ARG, "%s: opts->%s_scales %p is not aligned to 4 bytes (float scales)", op, name, sc);
    if (kind != AMP_BLOCK_128x128 && !kcol)
      return amp__fail(AMP_ERR_UNSUPPORTED, "%s: opts->%s_blocks is 1 x %d along the stored rows, and with "
                       "layout %s, %s = %s the product's k runs down %s's stored columns: the blocks would cut "
                       "across k. Store %s with k along its rows (y = x W^T: row-major, ta AMP_NO_TRANS, "
                       "tb AMP_TRANS), or use AMP_BLOCK_128x128", op, name, amp__gemm_block_width(kind),
                       row ? "AMP_ROW_MAJOR" : "AMP_COL_MAJOR", x ? "tb" : "ta",
                       amp__trans_name(x ? tb : ta), x ? "B" : "A", x ? "B" : "A");
  }
  if (o->a_scales && o->b_scales && amp__gemm_block_width(o->a_blocks) != amp__gemm_block_width(o->b_blocks))
    return amp__fail(AMP_ERR_ARG, "%s: opts->a_blocks and b_blocks cut k in blocks of %d and %d: the two "
                     "operands' blocks must line up along k (MX with MX, 1x128 or 128x128 with either of those)", op,
                     amp__gemm_block_width(o->a_blocks), amp__gemm_block_width(o->b_blocks));
  (void)d; (void)m; (void)n; (void)k;
  return AMP_OK;
}

/* amp_gemm and amp_gemm_ex, their arguments checked for the public caller fn. */
static amp_status amp__gemm(const char *fn, amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n,
                            int k, float alpha, const void *A, amp_dtype a_type, int lda, const void *B,
                            amp_dtype b_type, int ldb, float beta, void *C, amp_dtype c_type, int ldc,
                            const amp_gemm_opts *opts) {
  static const amp_gemm_opts none = {NULL, AMP_F32, AMP_ACT_NONE, AMP_GEMM_AUTO, 0, NULL, NULL,
                                     AMP_BLOCK_MX_RCEIL, AMP_BLOCK_MX_RCEIL, NULL, NULL, NULL, NULL, 0};
  const amp_gemm_opts *o = opts ? opts : &none;
  int row = layout == AMP_ROW_MAJOR;
  /* the minimum leading dimension of each matrix as stored: the length of a stored row (row-major)
     or column (col-major), at least 1 as in cblas */
  int a_rows = ta == AMP_NO_TRANS ? m : k, a_cols = ta == AMP_NO_TRANS ? k : m;
  int b_rows = tb == AMP_NO_TRANS ? k : n, b_cols = tb == AMP_NO_TRANS ? n : k;
  int min_lda = row ? a_cols : a_rows, min_ldb = row ? b_cols : b_rows, min_ldc = row ? n : m;
  char msg[AMP__MSG] = "";
  amp_status st;
  if (!d) return amp__fail(AMP_ERR_ARG, "%s: d is NULL (use amp_cpu())", fn);
  if (layout != AMP_ROW_MAJOR && layout != AMP_COL_MAJOR)
    return amp__fail(AMP_ERR_ARG, "%s: layout %d is not AMP_ROW_MAJOR or AMP_COL_MAJOR", fn, (int)layout);
  if (ta != AMP_NO_TRANS && ta != AMP_TRANS)
    return amp__fail(AMP_ERR_ARG, "%s: ta %d is not AMP_NO_TRANS or AMP_TRANS", fn, (int)ta);
  if (tb != AMP_NO_TRANS && tb != AMP_TRANS)
    return amp__fail(AMP_ERR_ARG, "%s: tb %d is not AMP_NO_TRANS or AMP_TRANS", fn, (int)tb);
  if (m < 0) return amp__fail(AMP_ERR_ARG, "%s: m %d must be >= 0", fn, m);
  if (n < 0) return amp__fail(AMP_ERR_ARG, "%s: n %d must be >= 0", fn, n);
  if (k < 0) return amp__fail(AMP_ERR_ARG, "%s: k %d must be >= 0", fn, k);
  if ((st = amp__dtype_check(fn, "a_type", a_type)) != AMP_OK) return st;
  if ((st = amp__dtype_check(fn, "b_type", b_type)) != AMP_OK) return st;
  if ((st = amp__dtype_check(fn, "c_type", c_type)) != AMP_OK) return st;
  if ((st = amp__gemm_fp8_check(fn, d, a_type, b_type, c_type, m, n, k, row, ta, tb, beta, o)) != AMP_OK) return st;
  if (lda < (min_lda > 1 ? min_lda : 1))
    return amp__fail(AMP_ERR_ARG, "%s: lda %d is less than %d, the length of a %s of A (%s, %s)", fn, lda,
                     min_lda > 1 ? min_lda : 1, row ? "row" : "column", row ? "row-major" : "col-major",
                     amp__trans_name(ta));
  if (ldb < (min_ldb > 1 ? min_ldb : 1))
    return amp__fail(AMP_ERR_ARG, "%s: ldb %d is less than %d, the length of a %s of B (%s, %s)", fn, ldb,
                     min_ldb > 1 ? min_ldb : 1, row ? "row" : "column", row ? "row-major" : "col-major",
                     amp__trans_name(tb));
  if (ldc < (min_ldc > 1 ? min_ldc : 1))
    return amp__fail(AMP_ERR_ARG, "%s: ldc %d is less than %d, the length of a %s of C (%s)", fn, ldc,
                     min_ldc > 1 ? min_ldc : 1, row ? "row" : "column", row ? "row-major" : "col-major");
  if (m > 0 && n > 0 && !C) return amp__fail(AMP_ERR_ARG, "%s: C is NULL with m %d, n %d", fn, m, n);
  if (m > 0 && n > 0 && k > 0 && !A) return amp__fail(AMP_ERR_ARG, "%s: A is NULL with m %d, k %d", fn, m, k);
  if (m > 0 && n > 0 && k > 0 && !B) return amp__fail(AMP_ERR_ARG, "%s: B is NULL with k %d, n %d", fn, k, n);
  if (o->bias && (st = amp__dtype_compute_check(fn, "opts->bias_type", o->bias_type)) != AMP_OK) return st;
  if (o->act != AMP_ACT_NONE && o->act != AMP_ACT_RELU && o->act != AMP_ACT_GELU)
    return amp__fail(AMP_ERR_ARG, "%s: opts->act %d is not AMP_ACT_NONE, AMP_ACT_RELU or AMP_ACT_GELU", fn,
                     (int)o->act);
  if (o->algo != AMP_GEMM_AUTO && o->algo != AMP_GEMM_WMMA && o->algo != AMP_GEMM_SIMPLE &&
      o->algo != AMP_GEMM_REFERENCE)
    return amp__fail(
        AMP_ERR_ARG,
        "%s: opts->algo %d is not AMP_GEMM_AUTO, AMP_GEMM_WMMA, AMP_GEMM_SIMPLE or AMP_GEMM_REFERENCE", fn,
        (int)o->algo);
  if (o->fp8_fast_accum != 0 && o->fp8_fast_accum != 1)
    return amp__fail(AMP_ERR_ARG, "%s: opts->fp8_fast_accum %d is not 0 (split accumulation) or 1 "
                     "(cuBLASLt's fast accumulation)", fn, o->fp8_fast_accum);
  if (o->algo == AMP_GEMM_REFERENCE && amp_device_is_cuda(d))
    return amp__fail(AMP_ERR_ARG, "%s: opts->algo AMP_GEMM_REFERENCE runs on the CPU, and d is a CUDA device", fn);
  if (o->algo != AMP_GEMM_AUTO && o->algo != AMP_GEMM_REFERENCE && !amp_device_is_cuda(d))
    return amp__fail(AMP_ERR_ARG, "%s: opts->algo %s runs on a CUDA device, and d is the CPU", fn,
                     o->algo == AMP_GEMM_WMMA ? "AMP_GEMM_WMMA" : "AMP_GEMM_SIMPLE");
  if (o->algo == AMP_GEMM_WMMA && (a_type == AMP_F32 || amp__gemm_is_fp8(a_type) || a_type != b_type))
    return amp__fail(AMP_ERR_ARG,
                     "%s: opts->algo AMP_GEMM_WMMA takes A and B of one 16-bit type (f16 or bf16), and "
                     "a_type is %s, b_type %s", fn, amp__dtype_name(a_type), amp__dtype_name(b_type));
  if ((m == 0 || n == 0) && (!o->c_amax || !amp_device_is_cuda(d))) {
    if (o->c_amax) *o->c_amax = 0.0f;   /* the max over no results (on CUDA the device writes it) */
    return AMP_OK;
  }
  if (m > 0 && n > 0) {   /* C must not overlap what the product reads (compared as spans from first to last element) */
    size_t cb = amp__gemm_span(row ? m : n, row ? n : m, ldc) * amp_dtype_size(c_type);
    if (k > 0 && amp__overlap(C, cb, A, amp__gemm_op_span(row, ta, m, k, lda) * amp_dtype_size(a_type)))
      return amp__fail(AMP_ERR_ARG, "%s: C %p (%d x %d, ldc %d) overlaps A %p", fn, C, m, n, ldc, A);
    if (k > 0 && amp__overlap(C, cb, B, amp__gemm_op_span(row, tb, k, n, ldb) * amp_dtype_size(b_type)))
      return amp__fail(AMP_ERR_ARG, "%s: C %p (%d x %d, ldc %d) overlaps B %p", fn, C, m, n, ldc, B);
    if (o->bias && amp__overlap(C, cb, o->bias, (size_t)n * amp_dtype_size(o->bias_type)))
      return amp__fail(AMP_ERR_ARG, "%s: C %p (%d x %d, ldc %d) overlaps opts->bias %p", fn, C, m, n, ldc,
                       o->bias);
  }
  /* a device failure names the call, as every other public call's does */
  st = amp__be(d)->gemm(d, layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type, ldc, o,
                        msg, sizeof msg);
  return amp__op_fail(fn, st, msg);
}

AMPDEF amp_status amp_gemm_ex(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k,
                              float alpha, const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type,
                              int ldb, float beta, void *C, amp_dtype c_type, int ldc, const amp_gemm_opts *opts) {
  return amp__gemm("amp_gemm_ex", d, layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type,
                   ldc, opts);
}
AMPDEF amp_status amp_gemm(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k,
                           float alpha, const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type,
                           int ldb, float beta, void *C, amp_dtype c_type, int ldc) {
  return amp__gemm("amp_gemm", d, layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type, ldc,
                   NULL);
}

/* ------------------------------------------------------------------------------------------
   Implementation: fp8 block scaling (amp_quantize_blocks; the manual's BLOCK SCALING)
   The CPU walks the blocks and, for each, runs two passes over its row pieces (n <= 128
   elements each): the amax (an integer max of the |x| bits) and the codes (amp__block_q). Each
   pass has a plain loop and AVX2 / AVX-512 loops chosen as amp_convert chooses (amp_simd_active,
   amp__isa); the vector loops give the plain loop's bits.
   ------------------------------------------------------------------------------------------ */

AMP__EXACT_BEGIN
static AMP__EXACT_FP uint32_t amp__bq_amax_plain(const void *p, amp_dtype t, size_t n) {
  uint32_t a = 0u;
  size_t i;
#define AMP__BQ_(E, N, T, S) \
  for (i = 0; i < n; i++) { uint32_t u = amp__f32_bits(amp__ld_##N(p, i)) & 0x7fffffffu; a = u > a ? u : a; } break;
  AMP__DTYPE_SWITCH(t, AMP__BQ_)
#undef AMP__BQ_
  return a;
}
static AMP__EXACT_FP void amp__bq_codes_plain(amp_fp8 *q, const void *p, amp_dtype t, size_t n, const amp__bscale *b,
                                              amp_dtype fp8) {
  size_t i;
  const int e5m2 = amp__dtype_fp8(fp8);
#define AMP__BQ_(E, N, T, S) for (i = 0; i < n; i++) q[i] = amp__block_q(amp__ld_##N(p, i), b, e5m2); break;
  AMP__DTYPE_SWITCH(t, AMP__BQ_)
#undef AMP__BQ_
}

#ifdef AMP__X86_SIMD
/* amp__pow2_mul on 8 lanes, the same integer steps (signed compares: both sides below 2^31). */
AMP__AVX2_INLINE __m256 amp__pow2_mul8(__m256 x, __m256i k) {
  __m256i u = _mm256_castps_si256(x), a0 = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i s = _mm256_xor_si256(u, a0), e, r;
  __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), a0);   /* subnormal (0 too: kept below) */
  __m256i a = _mm256_blendv_epi8(a0, _mm256_castps_si256(_mm256_cvtepi32_ps(a0)), sub);
  k = _mm256_sub_epi32(k, _mm256_and_si256(sub, _mm256_set1_epi32(149)));
  e = _mm256_add_epi32(_mm256_srli_epi32(a, 23), k);
  r = _mm256_or_si256(s, _mm256_add_epi32(a, _mm256_slli_epi32(k, 23)));
  r = _mm256_blendv_epi8(r, s, _mm256_cmpgt_epi32(_mm256_set1_epi32(1), e));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(s, _mm256_set1_epi32(0x7f800000)), _mm256_cmpgt_epi32(e, _mm256_set1_epi32(254)));
  r = _mm256_blendv_epi8(r, u, _mm256_or_si256(_mm256_cmpeq_epi32(a0, _mm256_setzero_si256()),
                                               _mm256_cmpgt_epi32(a0, _mm256_set1_epi32(0x7f7fffff))));
  return _mm256_castsi256_ps(r);
}
/* 8 elements scaled as b says (not AMP__BS_NAN: the caller fills those) -> 8 codes in the low bytes. */
AMP__AVX2_INLINE __m128i amp__bq_codes8(__m256 x, const amp__bscale *b, int e5m2) {
  __m256 y = b->how == AMP__BS_POW2 ? amp__pow2_mul8(x, _mm256_set1_epi32(b->k)) : _mm256_mul_ps(x, _mm256_set1_ps(b->mul));
  return amp__fp8_codes8(_mm256_castps_si256(y), e5m2);
}
AMP__AVX2_INLINE void amp__bq_codes_loop8(amp_fp8 *q, const char *p, amp_dtype t, size_t n, const amp__bscale *b,
                                          int e5m2) {
  size_t s = amp_dtype_size(t), i;
  char buf[32];
  amp_fp8 out[16];
  for (i = 0; i < n; i += 8) {   /* the last piece through buffers */
    const char *src = p + i * s;
    if (n - i < 8) { memset(buf, 0, sizeof buf); memcpy(buf, src, (n - i) * s); src = buf; }
    _mm_storeu_si128((__m128i *)out, amp__bq_codes8(amp__ld8(t, src), b, e5m2));
    memcpy(q + i, out, n - i < 8 ? n - i : 8);
  }
}
static AMP__AVX2 uint32_t amp__bq_amax_avx2(const void *p, amp_dtype t, size_t n) {
  size_t s = amp_dtype_size(t), i;
  char buf[32];
  __m256i m = _mm256_setzero_si256();
  __m128i h;
  for (i = 0; i < n; i += 8) {
    const char *src = (const char *)p + i * s;
    if (n - i < 8) { memset(buf, 0, sizeof buf); memcpy(buf, src, (n - i) * s); src = buf; }
    m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(amp__ld8(t, src)), _mm256_set1_epi32(0x7fffffff)));
  }
  h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xb1));
  return (uint32_t)_mm_cvtsi128_si32(h);
}
static AMP__AVX2 void amp__bq_codes_avx2(amp_fp8 *q, const void *p, amp_dtype t, size_t n, const amp__bscale *b,
                                         amp_dtype fp8) {
  if (amp__dtype_fp8(fp8) == 1) amp__bq_codes_loop8(q, (const char *)p, t, n, b, 1);   /* a constant flag each */
  else amp__bq_codes_loop8(q, (const char *)p, t, n, b, 0);
}
/* 16 lanes: masked loads and stores; the scaling on the two halves by the 8-lane steps (the same
   code, so the same bits), the multiply and the encode 16 wide. */
AMP__AVX512_INLINE void amp__bq_codes_loop16(amp_fp8 *q, const char *p, amp_dtype t, size_t n, const amp__bscale *b,
                                             int e5m2) {
  size_t s = amp_dtype_size(t), i;
  for (i = 0; i < n; i += 16) {
    __mmask16 k = amp__mask16(n - i);
    __m512 x = amp__ld16(t, p + i * s, k), y;
    if (b->how == AMP__BS_POW2) {
      __m256i k8 = _mm256_set1_epi32(b->k);
      __m256 lo = amp__pow2_mul8(_mm512_castps512_ps256(x), k8), hi = amp__pow2_mul8(_mm512_extractf32x8_ps(x, 1), k8);
      y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    } else y = _mm512_mul_ps(x, _mm512_set1_ps(b->mul));
    _mm_mask_storeu_epi8(q + i, k, amp__fp8_codes16(y, e5m2));
  }
}
static AMP__AVX512 uint32_t amp__bq_amax_avx512(const void *p, amp_dtype t, size_t n) {
  size_t s = amp_dtype_size(t), i;
  __m512i m = _mm512_setzero_si512();
  for (i = 0; i < n; i += 16)
    m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_castps_si512(amp__ld16(t, (const char *)p + i * s, amp__mask16(n - i))),
                                             _mm512_set1_epi32(0x7fffffff)));
  return (uint32_t)_mm512_reduce_max_epu32(m);
}
static AMP__AVX512 void amp__bq_codes_avx512(amp_fp8 *q, const void *p, amp_dtype t, size_t n, const amp__bscale *b,
                                             amp_dtype fp8) {
  if (amp__dtype_fp8(fp8) == 1) amp__bq_codes_loop16(q, (const char *)p, t, n, b, 1);
  else amp__bq_codes_loop16(q, (const char *)p, t, n, b, 0);
}
#endif

/* The loops' level for elements of type t: 0 plain, 1 AVX2, 2 AVX-512. */
static int amp__bq_level(amp_dtype t) {
#ifdef AMP__X86_SIMD
  if (amp_simd_active() && amp__dtype_cpu_vec(t)) return amp__isa();
#endif
  (void)t;
  return 0;
}
static uint32_t amp__bq_amax(int level, const void *p, amp_dtype t, size_t n) {
#ifdef AMP__X86_SIMD
  if (level >= 2) return amp__bq_amax_avx512(p, t, n);
  if (level == 1) return amp__bq_amax_avx2(p, t, n);
#endif
  (void)level;
  return amp__bq_amax_plain(p, t, n);
}
static void amp__bq_codes(int level, amp_fp8 *q, const void *p, amp_dtype t, size_t n, const amp__bscale *b,
                          amp_dtype fp8) {
  if (b->how == AMP__BS_NAN) { memset(q, 0x7f, n); return; }
#ifdef AMP__X86_SIMD
  if (level >= 2) { amp__bq_codes_avx512(q, p, t, n, b, fp8); return; }
  if (level == 1) { amp__bq_codes_avx2(q, p, t, n, b, fp8); return; }
#endif
  (void)level;
  amp__bq_codes_plain(q, p, t, n, b, fp8);
}
AMP__EXACT_END

/* A block's height and width (kind checked). */
static int amp__bq_height(amp_block_scaling kind) { return kind == AMP_BLOCK_128x128 ? 128 : 1; }
static int amp__bq_width(amp_block_scaling kind) { return kind == AMP_BLOCK_MX_RCEIL || kind == AMP_BLOCK_MX_FLOOR ? 32 : 128; }

static amp_status amp__cpu_quantize_blocks(amp_device *d, amp_block_scaling kind, amp_dtype fp8, int rows, int cols,
                                           const void *x, amp_dtype xt, int ldx, void *q, int ldq, void *scales,
                                           char *msg, size_t cap) {
  const int bh = amp__bq_height(kind), bw = amp__bq_width(kind), level = amp__bq_level(xt);
  const int nbr = amp__nblocks(rows, bh), nbc = amp__nblocks(cols, bw);
  const size_t xs = amp_dtype_size(xt);
  int br, bc, r;
  (void)d; (void)msg; (void)cap;
  for (br = 0; br < nbr; br++)
    for (bc = 0; bc < nbc; bc++) {   /* block (br, bc): rows r0 .. r1-1, n columns from c0 */
      const int r0 = br * bh, c0 = bc * bw, r1 = rows - r0 < bh ? rows : r0 + bh;
      const size_t n = (size_t)(cols - c0 < bw ? cols - c0 : bw), at = (size_t)br * (size_t)nbc + (size_t)bc;
      uint32_t amax = 0u;
      amp__bscale b;
      for (r = r0; r < r1; r++) {
        uint32_t a = amp__bq_amax(level, (const char *)x + ((size_t)r * (size_t)ldx + (size_t)c0) * xs, xt, n);
        amax = a > amax ? a : amax;
      }
      b = amp__block_scale(kind, fp8, amax);
      if (bw == 32) ((uint8_t *)scales)[at] = (uint8_t)b.stored;
      else memcpy((char *)scales + at * 4, &b.stored, 4);
      for (r = r0; r < r1; r++)
        amp__bq_codes(level, (amp_fp8 *)q + (size_t)r * (size_t)ldq + c0,
                      (const char *)x + ((size_t)r * (size_t)ldx + (size_t)c0) * xs, xt, n, &b, fp8);
    }
  return AMP_OK;
}

AMPDEF amp_status amp_quantize_blocks(amp_device *d, amp_block_scaling kind, amp_dtype fp8, int rows, int cols,
                                      const void *x, amp_dtype x_type, int ldx, void *q, int ldq, void *scales) {
  static const char fn[] = "amp_quantize_blocks";
  const amp__dtype_traits *f = amp__dtype_row(fp8);
  char msg[AMP__MSG] = "";
  size_t xs, xspan, qspan, sspan, ss;
  amp_status st;
  if (!d) return amp__fail(AMP_ERR_ARG, "%s: d is NULL (use amp_cpu())", fn);
  if (kind != AMP_BLOCK_MX_RCEIL && kind != AMP_BLOCK_MX_FLOOR && kind != AMP_BLOCK_1x128 && kind != AMP_BLOCK_128x128)
    return amp__fail(AMP_ERR_ARG, "%s: kind %d is not AMP_BLOCK_MX_RCEIL, AMP_BLOCK_MX_FLOOR, AMP_BLOCK_1x128 or "
                     "AMP_BLOCK_128x128", fn, (int)kind);
  if (!f || f->compute)
    return amp__fail(AMP_ERR_ARG, "%s: fp8 %d (%s) is not an fp8 format (AMP_E4M3 or AMP_E5M2)", fn, (int)fp8,
                     amp__dtype_name(fp8));
  if ((st = amp__dtype_compute_check(fn, "x_type", x_type)) != AMP_OK) return st;
  if (rows < 0) return amp__fail(AMP_ERR_ARG, "%s: rows %d must be >= 0", fn, rows);
  if (cols < 0) return amp__fail(AMP_ERR_ARG, "%s: cols %d must be >= 0", fn, cols);
  if (ldx < cols)
    return amp__fail(AMP_ERR_ARG, "%s: ldx %d is less than cols %d (a leading dimension smaller than its row)", fn, ldx, cols);
  if (ldq < cols)
    return amp__fail(AMP_ERR_ARG, "%s: ldq %d is less than cols %d (a leading dimension smaller than its row)", fn, ldq, cols);
  if (rows == 0 || cols == 0) return AMP_OK;
  if (!x) return amp__fail(AMP_ERR_ARG, "%s: x is NULL with rows %d, cols %d", fn, rows, cols);
  if (!q) return amp__fail(AMP_ERR_ARG, "%s: q is NULL with rows %d, cols %d", fn, rows, cols);
  if (!scales) return amp__fail(AMP_ERR_ARG, "%s: scales is NULL with rows %d, cols %d", fn, rows, cols);
  xs = amp_dtype_size(x_type);
  ss = amp__bq_width(kind) == 32 ? 1u : 4u;
  if ((uintptr_t)x % xs)
    return amp__fail(AMP_ERR_ARG, "%s: x %p is not aligned to its element size (%zu bytes, %s)", fn, x, xs,
                     amp__dtype_name(x_type));
  if ((uintptr_t)scales % ss) return amp__fail(AMP_ERR_ARG, "%s: scales %p (floats) is not 4-byte aligned", fn, scales);
  xspan = amp__gemm_span(rows, cols, ldx) * xs;
  qspan = amp__gemm_span(rows, cols, ldq);
  sspan = (size_t)amp__nblocks(rows, amp__bq_height(kind)) * (size_t)amp__nblocks(cols, amp__bq_width(kind)) * ss;
  if (amp__overlap(q, qspan, x, xspan)) return amp__fail(AMP_ERR_ARG, "%s: q %p overlaps x %p", fn, q, x);
  if (amp__overlap(scales, sspan, x, xspan)) return amp__fail(AMP_ERR_ARG, "%s: scales %p overlaps x %p", fn, scales, x);
  if (amp__overlap(scales, sspan, q, qspan)) return amp__fail(AMP_ERR_ARG, "%s: scales %p overlaps q %p", fn, scales, q);
  st = amp__be(d)->quantize_blocks(d, kind, fp8, rows, cols, x, x_type, ldx, q, ldq, scales, msg, sizeof msg);
  return amp__op_fail(fn, st, msg);
}

/* ------------------------------------------------------------------------------------------
   Implementation: the device line's two tables
   To add a device operation: its line in AMP__BACKEND_OPS (its contract written beside it), its
   CPU function amp__cpu_<name> (beside the code it shares), its CUDA function amp__cuda_<name>
   below (a call of a launcher declared in amp_kernels.h and defined in amp_kernels.cu), and the
   public function that calls it. Each table is filled from the list by name; a backend without
   an operation defines amp__<backend>_<name> as AMP__OP_NONE (a NULL slot the caller refuses),
   so it is never left out by accident: a missing name does not compile.
   ------------------------------------------------------------------------------------------ */

#define AMP__OP_NONE NULL
/* The CPU keeps its state in the host fields: these have nothing to do. */
#define amp__cpu_scaler_create amp__cpu_nothing_s
#define amp__cpu_scaler_pull amp__cpu_nothing_s
#define amp__cpu_optim_ready amp__cpu_nothing_o
#define amp__cpu_optim_pull amp__cpu_nothing_o
#define amp__cpu_optim_stats amp__cpu_nothing_o
#define AMP__CPU_OP(ret, name, args) amp__cpu_##name,
static const amp__backend amp__cpu_ops = { "CPU", 1, 1, AMP__CPU_STATE_ALIGN, AMP__BACKEND_OPS(AMP__CPU_OP) };

#ifdef AMP_CUDA
/* CUDA: each operation one call of a launcher (amp_kernels.h). The scaler's state, found-inf flag
   and skip counts live in a device block (s->cu); the optimizer's masters and moments in a device
   slab (o->cu) built from the whole table at optim_ready. Until then each tensor's master, taken
   at add (a cast of the model copy on the device's stream), waits in a device buffer of its own
   (o->t[i].master); optim_ready hands the records to amp__cu_optim_create, which takes each master
   once (copies it, or for SPLIT splits it, into the slab in stream order); then they are freed. */
static amp_status amp__cuda_sync(amp_device *d, char *m, size_t cap) { return amp__cu_sync(d->cuda, m, cap); }
static void amp__cuda_close(amp_device *d) { amp__cu_close(d->cuda); }
static amp_status amp__cuda_scaler_create(amp_scaler *s, char *m, size_t cap) {
  return amp__cu_scaler_create(s->dev->cuda, &s->cu, &s->st, &s->pr, m, cap);
}
static void amp__cuda_scaler_destroy(amp_scaler *s) { if (s->cu) amp__cu_scaler_destroy(s->dev->cuda, s->cu); }
static amp_status amp__cuda_scaler_pull(amp_scaler *s, char *m, size_t cap) {
  amp_scale_state st;
  amp_cu_scaler_info info;
  amp_status r = amp__cu_scaler_read(s->dev->cuda, s->cu, &st, &info, m, cap);
  if (r != AMP_OK) return r;
  s->st = st; s->last_skipped = info.last_skipped != 0; s->skipped = (long)info.skipped;
  return AMP_OK;
}
static amp_status amp__cuda_scaler_push(amp_scaler *s, const amp_scaler *from, char *m, size_t cap) {
  return amp__cu_scaler_load(s->dev->cuda, s->cu, &from->st, &from->pr, amp__scaler_inv(from), from->last_skipped,
                             (int64_t)from->skipped, m, cap);
}
static amp_status amp__cuda_scaler_rule(amp_scaler *s, int found_inf, char *m, size_t cap) {
  return amp__cu_scaler_update(s->dev->cuda, s->cu, found_inf ? 1 : -1, m, cap);   /* -1: the device flag */
}
static float *amp__cuda_scale_ptr(amp_scaler *s) { return amp__cu_scaler_scale_ptr(s->cu); }
static amp_status amp__cuda_scale_buffer(amp_scaler *s, void *buf, amp_dtype t, size_t n, char *m, size_t cap) {
  return amp__cu_scale_buffer(s->dev->cuda, s->cu, buf, (int32_t)t, n, m, cap);
}

/* AMP_MASTER_SPLIT / _NONE on CUDA. A tensor's master as host floats from its bf16 model copy (and
   remainders), or host floats written into them (NONE: rounded stochastically with key), through
   host copies and the CPU's own element functions (amp__o_master_load / _store): checkpoints and
   the start of a seeded split master, nothing per step. rem is the device remainders (NULL: NONE). */
static amp_status amp__cuda_lowmem_io(amp_optimizer *o, size_t i, uint16_t *rem, float *host, int to_device,
                                      uint64_t key, char *m, size_t cap) {
  size_t n = o->t[i].n, i0;
  amp_bf16 *hw = (amp_bf16 *)AMP_MALLOC(n * sizeof *hw);
  uint16_t *hr = rem ? (uint16_t *)AMP_MALLOC(n * sizeof *hr) : NULL;
  amp_status st = AMP_OK;
  if (!hw || (rem && !hr)) {
    AMP_FREE(hw);
    AMP_FREE(hr);
    snprintf(m, cap, "out of memory for %zu elements", n);
    return AMP_ERR_NOMEM;
  }
  if (!to_device) {
    st = amp__cu_copy(o->dev->cuda, hw, o->t[i].w, n * sizeof *hw, 1, m, cap);
    if (st == AMP_OK && rem) st = amp__cu_copy(o->dev->cuda, hr, rem, n * sizeof *hr, 1, m, cap);
  }
  for (i0 = 0; st == AMP_OK && i0 < n; i0 += AMP__CHUNK) {
    size_t k = n - i0 < AMP__CHUNK ? n - i0 : AMP__CHUNK;
    if (to_device) amp__o_master_store(hw, hr, key, i0, host + i0, k);
    else amp__o_master_load(host + i0, hw, hr, i0, k);
  }
  if (st == AMP_OK && to_device) {
    st = amp__cu_copy(o->dev->cuda, o->t[i].w, hw, n * sizeof *hw, 0, m, cap);
    if (st == AMP_OK && rem) st = amp__cu_copy(o->dev->cuda, rem, hr, n * sizeof *hr, 0, m, cap);
    if (st == AMP_OK) st = amp__cu_sync(o->dev->cuda, m, cap);   /* the host buffers are freed below */
  }
  AMP_FREE(hw); AMP_FREE(hr);
  return st;
}
static amp_status amp__cuda_optim_add(amp_optimizer *o, size_t i, const float *seed, char *m, size_t cap) {
  void *p = NULL;
  amp_status st;
  if (!amp__moments_on_cuda(o->t[i].moments)) {   /* refused, not run wrong */
    char list[128] = "";
    size_t at = 0;
#define AMP__MOMENTS_LIST_(name, value, bytes, kept, cuda, shared) \
    if (cuda && at < sizeof list) at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", at ? ", " : "", #name);
    AMP__MOMENTS_TYPES(AMP__MOMENTS_LIST_)
#undef AMP__MOMENTS_LIST_
    snprintf(m, cap, "moments %s on a CUDA device: the device optimizer keeps %s moments only",
             amp__moments_name(o->t[i].moments), list);
    return AMP_ERR_UNSUPPORTED;
  }
  /* no master: a seed is rounded into the weights now (key of update 0) */
  if (o->t[i].master_mode == AMP_MASTER_NONE)
    return seed ? amp__cu_write_model(o->dev->cuda, o->t[i].w, (int32_t)AMP_BF16, (int32_t)AMP_F32, 1,
                                      amp__o_sr_key(o, i, 0), seed, o->t[i].n, m, cap) : AMP_OK;
  if (o->t[i].master_mode == AMP_MASTER_SPLIT && !seed) return AMP_OK;   /* the model copy as it is, remainders 0 */
  /* an fp32 master, or a split master's seed: kept in a buffer of its own until optim_ready */
  st = amp__cu_malloc(o->dev->cuda, &p, o->t[i].n * sizeof(float), m, cap);
  if (st != AMP_OK) return st;
  if (seed) st = amp__cu_copy(o->dev->cuda, p, seed, o->t[i].n * sizeof(float), 2, m, cap);   /* bit for bit */
  else st = amp__cu_cast(o->dev->cuda, p, AMP_F32, o->t[i].w, (int32_t)o->t[i].wtype, o->t[i].n, m, cap);
  if (st == AMP_OK && o->t[i].master_mode == AMP_MASTER_SPLIT) {
    /* the model copy written from the seed now, as on the CPU (its hi halves; optim_ready writes the
       remainders, when the device buffer for them exists) */
    size_t n = o->t[i].n, k;
    float *h = (float *)AMP_MALLOC(n * sizeof *h);
    amp_bf16 *hw = (amp_bf16 *)AMP_MALLOC(n * sizeof *hw);
    if (!h || !hw) { snprintf(m, cap, "out of memory for %zu elements", n); st = AMP_ERR_NOMEM; }
    if (st == AMP_OK) st = amp__cu_copy(o->dev->cuda, h, p, n * sizeof *h, 1, m, cap);
    if (st == AMP_OK) {
      for (k = 0; k < n; k++) { uint16_t lo; amp__split_encode(h[k], &hw[k], &lo); }
      st = amp__cu_copy(o->dev->cuda, o->t[i].w, hw, n * sizeof *hw, 0, m, cap);
      if (st == AMP_OK) st = amp__cu_sync(o->dev->cuda, m, cap);
    }
    AMP_FREE(h); AMP_FREE(hw);
  }
  if (st == AMP_OK && o->t[i].master_mode == AMP_MASTER_F32 &&
      (seed || amp__round_to_set(o->t[i].round_to) || o->t[i].stochastic))
    st = amp__cu_write_model(o->dev->cuda, o->t[i].w, (int32_t)o->t[i].wtype, (int32_t)o->t[i].round_to,
                             o->t[i].stochastic, amp__o_sr_key(o, i, 0), (const float *)p, o->t[i].n, m, cap);
  if (st != AMP_OK) {
    amp__cu_free(o->dev->cuda, p);
    return st;
  }
  o->t[i].master = (float *)p;
  return AMP_OK;
}
static amp_status amp__cuda_optim_ready(amp_optimizer *o, char *m, size_t cap) {
  void *state = o->dev->cuda;
  amp_status st;
  size_t i;
  if (o->cu) return AMP_OK;
  /* the records as they are (each master taken at add read once, by create); the groups' values
     beside them (group 0: the config's, on the device) */
  st = amp__cu_optim_create(state, &o->cu, o->t, o->count, o->lr_scale, o->weight_decay, &o->cfg, m, cap);
  if (st != AMP_OK) { o->cu = NULL; return st; }
  for (i = 0; i < o->count; i++) {
    amp__cu_free(state, o->t[i].master);
    o->t[i].master = amp__cu_optim_master(o->cu, i, NULL);
  }
  o->frozen = 1;
  return AMP_OK;
}
static void amp__cuda_optim_destroy(amp_optimizer *o) {
  size_t i;
  if (o->cu) { amp__cu_optim_destroy(o->dev->cuda, o->cu); return; }
  for (i = 0; i < o->count; i++) amp__cu_free(o->dev->cuda, o->t[i].master);   /* not built: the add buffers */
}
static amp_status amp__cuda_optim_set_config(amp_optimizer *o, const amp_optim_config *c, char *m, size_t cap) {
  return o->cu ? amp__cu_optim_set_hparams(o->dev->cuda, o->cu, c, m, cap) : AMP_OK;   /* else: read at optim_ready */
}
static amp_status amp__cuda_optim_set_grads(amp_optimizer *o, size_t i, char *m, size_t cap) {
  return o->cu ? amp__cu_optim_set_grads(o->dev->cuda, o->cu, i, o->t[i].g, m, cap) : AMP_OK;   /* else: at optim_ready */
}
static amp_status amp__cuda_optim_unscale(amp_optimizer *o, amp_scaler *s, double **dp, char *m, size_t cap) {
  void *sc = s ? s->cu : NULL;   /* NULL (amp_optimizer_step): inverse scale 1, no scaler flag */
  if (dp) return amp__cu_optim_unscale_local(o->dev->cuda, o->cu, sc, dp, m, cap);
  return amp__cu_optim_unscale(o->dev->cuda, o->cu, sc, m, cap);
}
static amp_status amp__cuda_optim_unscale_finish(amp_optimizer *o, amp_scaler *s, char *m, size_t cap) {
  return amp__cu_optim_unscale_finish(o->dev->cuda, o->cu, s ? s->cu : NULL, m, cap);
}
static amp_status amp__cuda_optim_step(amp_optimizer *o, amp_scaler *s, char *m, size_t cap) {
  /* the kernel skips itself on the flags: the optimizer's own (its last unscale) and the scaler's */
  return amp__cu_optim_step(o->dev->cuda, o->cu, s ? s->cu : NULL, 0, m, cap);
}
static amp_status amp__cuda_optim_pull(amp_optimizer *o, char *m, size_t cap) {
  amp_cu_optim_info info;
  amp_status st;
  if (!o->cu) return AMP_OK;   /* nothing ran yet: the host fields are the state */
  if ((st = amp__cu_optim_read(o->dev->cuda, o->cu, &info, m, cap)) != AMP_OK) return st;
  o->step = (long)info.t; o->grad_norm = info.norm; o->found_inf = info.skip;
  o->spike = info.spike; o->spike_skips = (long)info.spike_skips; o->spike_win = info.window;
  o->unscale_scale = info.scale;
  o->unscales = (unsigned long)info.passes;   /* the device's count: a replayed graph's passes too */
  return AMP_OK;
}
static amp_status amp__cuda_optim_stats(amp_optimizer *o, char *m, size_t cap) {
  if (!o->cu) return AMP_OK;   /* no unscale ran yet: the host copy (zeros) is the state */
  return amp__cu_optim_stats_read(o->dev->cuda, o->cu, o->t, o->count, m, cap);
}
static amp_status amp__cuda_optim_set_step(amp_optimizer *o, long step, char *m, size_t cap) {
  o->io_step = step;   /* the key of a NONE tensor's rounding at a load (optim_tensor_io) */
  return amp__cu_optim_set_step(o->dev->cuda, o->cu, (int64_t)step, m, cap);
}
static amp_status amp__cuda_optim_set_spike(amp_optimizer *o, long spike_skips, const amp__spike_window *w, char *m,
                                            size_t cap) {
  return amp__cu_optim_set_spike(o->dev->cuda, o->cu, (int64_t)spike_skips, w, m, cap);
}
static amp_status amp__cuda_optim_tensor_io(amp_optimizer *o, size_t i, int which, float *host, int to_device,
                                            char *m, size_t cap) {
  if (which == 0 && o->t[i].master_mode != AMP_MASTER_F32)   /* no fp32 array: decoded / written on the host */
    return amp__cuda_lowmem_io(o, i, amp__cu_optim_rem(o->cu, i), host, to_device, amp__o_sr_key(o, i, o->io_step), m,
                               cap);
  return amp__cu_optim_state_io(o->dev->cuda, o->cu, i, which, host, to_device, m, cap);
}
static amp_status amp__cuda_optim_write_model(amp_optimizer *o, size_t i, long step, char *m, size_t cap) {
  if (o->t[i].master_mode != AMP_MASTER_F32) return AMP_OK;   /* written with the master (optim_tensor_io) */
  return amp__cu_write_model(o->dev->cuda, o->t[i].w, (int32_t)o->t[i].wtype, (int32_t)o->t[i].round_to,
                             o->t[i].stochastic, amp__o_sr_key(o, i, step), o->t[i].master, o->t[i].n, m, cap);
}
/* Mixed input types: cuBLASLt takes no such pair, so each 16-bit operand is widened (exactly) into
   a stream-ordered f32 scratch of its stored span, the product runs on f32 inputs, and the scratch
   is freed in stream order: no host wait. The fp8 product takes its two types as they are (the
   kernels read each operand in its own type). */
static amp_status amp__cuda_gemm(amp_device *d, amp_layout layout, amp_trans ta, amp_trans tb, int m, int n, int k,
                                 float alpha, const void *A, amp_dtype a_type, int lda, const void *B, amp_dtype b_type,
                                 int ldb, float beta, void *C, amp_dtype c_type, int ldc, const amp_gemm_opts *o,
                                 char *msg, size_t cap) {
  void *wide[2] = {NULL, NULL};
  const void **op[2];
  amp_dtype *ty[2];
  size_t span[2];
  amp_status st = AMP_OK;
  int j, mixed = a_type != b_type && k > 0 && !amp__gemm_fp8_mode(a_type, b_type, c_type, o);
  op[0] = &A; op[1] = &B; ty[0] = &a_type; ty[1] = &b_type;
  span[0] = amp__gemm_op_span(layout == AMP_ROW_MAJOR, ta, m, k, lda);
  span[1] = amp__gemm_op_span(layout == AMP_ROW_MAJOR, tb, k, n, ldb);
  for (j = 0; j < 2 && mixed && st == AMP_OK; j++) {
    if (*ty[j] == AMP_F32) continue;
    st = amp__cu_scratch_alloc(d->cuda, &wide[j], span[j] * sizeof(float), msg, cap);
    if (st == AMP_OK) st = amp__cu_cast(d->cuda, wide[j], AMP_F32, *op[j], (int32_t)*ty[j], span[j], msg, cap);
    if (st == AMP_OK) { *op[j] = wide[j]; *ty[j] = AMP_F32; }
  }
  if (st == AMP_OK)
    st = amp__cu_gemm(d->cuda, layout, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type, ldc, o,
                      msg, cap);
  for (j = 0; j < 2; j++) if (wide[j]) amp__cu_scratch_free(d->cuda, wide[j]);
  return st;
}

/* The fp8 scaler: its state in one device block (amp__cu_fp8_create), made from the host arrays. */
static amp_status amp__cuda_fp8_create(amp_fp8_scaler *f, char *m, size_t cap) {
  return amp__cu_fp8_create(f->dev->cuda, &f->cu, f->n, f->len, f->format, f->hist, f->scale, f->scale_inv,
                            f->cfg.stats, &f->d_hist, &f->d_scale, &f->d_scale_inv, &f->d_red, &f->d_counts, m,
                            cap);
}
static void amp__cuda_fp8_destroy(amp_fp8_scaler *f) { if (f->cu) amp__cu_fp8_destroy(f->dev->cuda, f->cu); }
static amp_status amp__cuda_fp8_amax_io(amp_fp8_scaler *f, int to_slots, char *m, size_t cap) {
  return amp__cu_fp8_amax_io(f->dev->cuda, f->cu, to_slots, m, cap);
}
static amp_status amp__cuda_fp8_record(amp_fp8_scaler *f, size_t i, float amax, char *m, size_t cap) {
  return amp__cu_fp8_record(f->dev->cuda, f->cu, i, amax, m, cap);
}
static amp_status amp__cuda_fp8_update(amp_fp8_scaler *f, char *m, size_t cap) {
  return amp__cu_fp8_update(f->dev->cuda, f->cu, &f->cfg, m, cap);
}
static amp_status amp__cuda_fp8_io(amp_fp8_scaler *f, int to_device, char *m, size_t cap) {
  return amp__cu_fp8_io(f->dev->cuda, f->cu, f->hist, f->scale, f->scale_inv, to_device, m, cap);
}
static amp_status amp__cuda_fp8_stats(amp_fp8_scaler *f, char *m, size_t cap) {
  return amp__cu_fp8_stats(f->dev->cuda, f->cu, f->last, f->used, m, cap);
}
static amp_status amp__cuda_quantize(amp_device *d, void *q, amp_dtype fp8, const void *x, amp_dtype xt, size_t n,
                                     const float *scale, float *amax, uint64_t *counts, char *m, size_t cap) {
  return amp__cu_quantize(d->cuda, q, (int32_t)fp8, x, (int32_t)xt, n, scale, amax, counts, m, cap);
}

static amp_status amp__cuda_quantize_blocks(amp_device *d, amp_block_scaling kind, amp_dtype fp8, int rows, int cols,
                                            const void *x, amp_dtype x_type, int ldx, void *q, int ldq, void *scales,
                                            char *m, size_t cap) {
  return amp__cu_quantize_blocks(d->cuda, (int32_t)kind, (int32_t)fp8, rows, cols, x, (int32_t)x_type, ldx, q, ldq,
                                 scales, m, cap);
}

#define AMP__CUDA_OP(ret, name, args) amp__cuda_##name,
static const amp__backend amp__cuda_ops = { "CUDA", 0, 64, 128, AMP__BACKEND_OPS(AMP__CUDA_OP) };   /* amp__cu_optim_create's padding */

AMPDEF amp_status amp_cuda_open(amp_device **out, int ordinal, void *cuda_stream) {
  amp_device *d;
  amp_status st;
  void *state = NULL;
  if (!out) return amp__fail(AMP_ERR_ARG, "amp_cuda_open: out is NULL");
  if (ordinal < 0) return amp__fail(AMP_ERR_ARG, "amp_cuda_open: ordinal %d must be >= 0", ordinal);
  st = amp__cu_open(ordinal, cuda_stream, &state, amp__err_buf, sizeof amp__err_buf);
  if (st != AMP_OK) return st;
  d = (amp_device *)AMP_MALLOC(sizeof *d);
  if (!d) { amp__cu_close(state); return amp__fail(AMP_ERR_NOMEM, "amp_cuda_open: out of memory"); }
  memset(d, 0, sizeof *d);
  d->be = &amp__cuda_ops; d->is_cuda = 1; d->ordinal = ordinal; d->stream = cuda_stream; d->cuda = state;
  *out = d;
  return AMP_OK;
}
#else
AMPDEF amp_status amp_cuda_open(amp_device **out, int ordinal, void *cuda_stream) {
  (void)cuda_stream;
  if (out) *out = NULL;
  return amp__fail(AMP_ERR_UNSUPPORTED, "amp_cuda_open(ordinal %d): amp.h was built without CUDA; "
                   "define AMP_CUDA in the implementation unit, compile amp_kernels.cu with nvcc and link "
                   "-lcudart -lcublasLt -lcublas", ordinal);
}
#endif

static const amp__backend *amp__be(const amp_device *d) { return d->be ? d->be : &amp__cpu_ops; }

#ifdef __cplusplus
}
#endif

#endif /* AMP__IMPLEMENTATION_DONE */
#endif /* AMP_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 the amp.h authors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication in perpetuity for the benefit of the software
and its users and to the detriment of all who believe that copyright
interest in the software to be inconvenient. We make this dedication by
overriding all previous copyright interest through the laws of copyright.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------
*/
