// token_nll_cuda.cuh — the evaluator's per-position scoring on the GPU: for every scored row of logits, the
// log-sum-exp over the vocabulary, the NLL of the target token and the argmax, so that a perplexity run
// copies 12 bytes per position to the host instead of the row (4·vocab bytes: 196 KB for SmolLM2's 49152).
// CPU reference: token_score in model/eval.h. Test: tests/cuda/test_model_cuda.cu (ModelCudaOps.TokenNll*,
// ModelCuda.ForwardNll*, ModelCuda.EvaluatorScoresOnTheDevice*); benchmark: bench/bench_model.cu
// ("eval (device scoring)").
//
// Rounding contract: token_score's arithmetic step by step — the FP32 max (exact, so order-free), the
// terms expf(l − max) with l − max in FP32, summed in FP64, lse = float(log(sum)), nll = double(max + lse −
// logit[target]) in FP32. The one difference is the exponential: the device evaluates exp in FP64 and
// rounds it to FP32, i.e. correctly rounded (FP64 exp is within 1 ulp of 2^-53), where the host's glibc expf
// is within 0.502 FP32 ulp; the two agree except where the exact value lies within ~0.002 ulp of a rounding
// midpoint, and a term that differs moves the FP64 sum by at most 2^-23 of itself. The FP64 sums differ
// only in summation order (≤ vocab·2^-53 relative). So an NLL equals token_score's unless float(log(sum))
// or a later FP32 rounding falls the other way: then by 1 ulp of |max| + |lse| (+ 1 of the result). The
// test bounds |Δnll| by 2^-20·(1 + |max| + |logit[target]| + |nll|) (≥ 8 ulps of the largest operand) and
// prints how many rows are bit-equal.
//
// Argmax: the first index of the largest logit (NaNs never win; a row of NaNs gives 0), as token_score.
// NaN or +Inf anywhere in a row makes its NLL NaN, as on the host; −Inf logits are fine.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit {

// Scores n_seq·n_score rows of logits [n_seq, rows_per_seq, vocab] (device, FP32): the scored rows are rows
// 0 … n_score − 1 of each sequence (n_score ≤ rows_per_seq; the evaluator's logits carry one unscored row
// per window). For scored row g = s·n_score + r: nll[g] = −log softmax(row)[targets[g]], and argmax[g] (when
// argmax is not null) the row's first largest index. targets, nll and argmax are device arrays of n_seq·
// n_score; targets must lie in 0 … vocab − 1 (checked by the caller on the host: out of range gives NaN).
// One CTA per row; float4 loads when vocab % 4 == 0 and logits is 16-byte aligned. Runs on `stream`,
// returns without synchronizing.
void token_nll_rows_cuda(const float* logits, int64_t vocab, int64_t n_seq, int64_t rows_per_seq, int64_t n_score,
                         const int32_t* targets, double* nll, int32_t* argmax, cudaStream_t stream = 0);

}  // namespace lowbit
