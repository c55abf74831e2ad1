// hadamard.h — orthonormal Walsh–Hadamard transforms on the CPU: fast WHT of any 2^k, orders m·2^k with a
// base matrix (hadamard_orders.h), block-diagonal transforms along either axis of a row-major matrix, and
// the seeded randomized variant y = H·D·P·x with its inverse. This file DEFINES the arithmetic; CUDA kernels
// must reproduce it bit for bit, so the per-vector pieces are LOWBIT_HD scalar helpers used by both.
//
// Exact definition of the transform of one vector x of supported length n = m·2^k (index i = a·2^k + b):
//   1. for each a: unnormalised FWHT of the contiguous chunk x[a·2^k .. a·2^k + 2^k): stages h = 1, 2, 4, …,
//      2^(k−1) in that order; in a stage, for every i with (i & h) == 0: u = x[i], v = x[i+h];
//      x[i] = u + v; x[i+h] = u − v (float32, no FMA).
//   2. if m > 1: y[a·2^k + b] = Σ_{j=0}^{m−1} H_m[a][j]·t[j·2^k + b] summed left to right in float32,
//      starting from ±t[0·2^k + b] (a sign flip, exact) and adding/subtracting t[j·2^k + b] for j = 1…m−1.
//      The inverse uses H_mᵀ (H_m[j][a]) in the same order.
//   3. one multiply per element by the float constant hadamard_inv_sqrt(n) = float(1.0 / sqrt(double(n))).
// Any schedule that gives every element this sequence of operations is bit-identical (stages are
// independent across elements), which is what lets the CPU code below vectorise and thread freely.
// For n = 2^k this equals scipy.linalg.hadamard(n) @ x / sqrt(n) (Sylvester order) up to rounding.
//
// Randomised variant, per block of size B starting at position j0 along the axis (0 ≤ j < dimension):
//   y_block = H_B · D · P · x_block, where
//   (P·x)[i] = x[j0 + p(i)] with p the block's permutation (identity unless permute is on) and
//   D = diag(s_{j0+i}), s_j = hadamard_random_sign(seed, j) = (counter_random24(seed, j) & 1) ? −1 : +1.
//   p is a Fisher–Yates shuffle: p = identity; for i = B−1 down to 1:
//       r = hadamard_permutation_draw(seed, j0 + i, i + 1)  (= (counter_random24(seed ^ 0x5045524D, j0+i)·(i+1)) >> 24)
//       swap(p[i], p[r]).
//   (24-bit multiply-shift draws: the bias is below (i+1)/2^24, irrelevant for a rotation.)
//   Inverse: x = Pᵀ·D·Hᵀ·y, i.e. w = Hᵀ y (steps 1–3 with H_mᵀ), then x[j0 + p(i)] = s_{j0+i}·w[i].
#pragma once

#include <math.h>

#include <cstdint>
#include <vector>

#include "core/counter_rng.h"
#include "core/host_device.h"
#include "hadamard/hadamard_orders.h"

#if defined(__CUDA_ARCH__)  // device pass of nvcc only: the host compiler does not know the pragma
#define LOWBIT_HADAMARD_UNROLL _Pragma("unroll")
#else
#define LOWBIT_HADAMARD_UNROLL
#endif

namespace lowbit {

// ---------------------------------------------------------------------------------------------------
// Per-vector scalar helpers shared with the CUDA kernels (no host-only calls below this line).

// The normalisation constant of an orthonormal transform of length n: float(1/sqrt(double(n))).
LOWBIT_HD float hadamard_inv_sqrt(int64_t n) { return float(1.0 / ::sqrt(double(n))); }

// Unnormalised FWHT (step 1 above) of N = 2^k floats held in registers/local memory.
template <int N>
LOWBIT_HD void fwht_unnormalized(float* x) {
    static_assert(N >= 1 && (N & (N - 1)) == 0, "fwht_unnormalized: N must be a power of two");
    LOWBIT_HADAMARD_UNROLL
    for (int h = 1; h < N; h <<= 1) {
        LOWBIT_HADAMARD_UNROLL
        for (int i = 0; i < N; ++i) {
            if ((i & h) == 0) {
                const float u = x[i], v = x[i + h];
                x[i] = u + v;
                x[i + h] = u - v;
            }
        }
    }
}

// Same, for a run-time power of two n.
LOWBIT_HD void fwht_unnormalized(float* x, int64_t n) {
    for (int64_t h = 1; h < n; h <<= 1)
        for (int64_t i = 0; i < n; ++i)
            if ((i & h) == 0) {
                const float u = x[i], v = x[i + h];
                x[i] = u + v;
                x[i + h] = u - v;
            }
}

// Step 2 for one output: Σ_{j=0}^{m−1} coef[j·coef_stride]·t[j·t_stride] with coef = ±1, summed in order
// j = 0…m−1 starting from ±t[0]. coef_stride = 1 walks a row of H_m (forward), = m a column (inverse).
LOWBIT_HD float hadamard_base_mix(const int8_t* coef, int64_t coef_stride, int m, const float* t, int64_t t_stride) {
    float acc = coef[0] > 0 ? t[0] : -t[0];
    for (int j = 1; j < m; ++j) {
        const float v = t[j * t_stride];
        acc = coef[j * coef_stride] > 0 ? acc + v : acc - v;
    }
    return acc;
}

// Seeded ±1 sign of position j along the transformed axis.
LOWBIT_HD float hadamard_random_sign(uint64_t seed, int64_t j) {
    return (counter_random24(seed, uint64_t(j)) & 1u) ? -1.0f : 1.0f;
}

inline constexpr uint64_t hadamard_permutation_salt = 0x5045524Dull;  // "PERM"

// Fisher–Yates draw for slot j (global position along the axis): uniform-ish in [0, bound).
LOWBIT_HD uint32_t hadamard_permutation_draw(uint64_t seed, int64_t j, uint32_t bound) {
    const uint64_t r = counter_random24(seed ^ hadamard_permutation_salt, uint64_t(j));
    return uint32_t((r * bound) >> 24);
}

// ---------------------------------------------------------------------------------------------------
// Host API.

struct HadamardOptions {
    int64_t block = 0;        // block size B along the axis; 0 = the whole dimension
    int axis = 1;             // 1: transform each row (contiguous); 0: transform each column
    bool randomized = false;  // y = H·D·P·x with seeded signs D (and permutation P when permute)
    uint64_t seed = 0;
    bool permute = false;     // needs randomized
    bool inverse = false;     // x = Pᵀ·D·Hᵀ·y (plain Hᵀ when not randomized)
};

// Checks the options against a dimension (the length along the axis) and returns the factorised block
// order. Errors: bad axis/block value or permute without randomized → usage; a dimension the block does
// not divide, or an unsupported dimension for the full transform → input (with the advice text).
HadamardOrder hadamard_resolve_block(int64_t dimension, const HadamardOptions& opt);

// In-place orthonormal transform of a row-major rows×cols float32 matrix along opt.axis, block-diagonal
// with blocks of opt.block. Threads with parallel_for; results do not depend on the thread count.
void hadamard_transform(float* x, int64_t rows, int64_t cols, const HadamardOptions& opt);

// One vector of any supported length n, orthonormal, in place (transpose: apply Hᵀ).
void hadamard_transform_vector(float* x, int64_t n, bool transpose = false);

// One vector of length n = 2^k, orthonormal (scipy.linalg.hadamard(n) @ x / sqrt(n)), in place.
void fwht(float* x, int64_t n);

// The permutation of the randomised transform for a whole axis: out[j] = source position of slot j
// (out[j0 + i] = j0 + p(i) for each block). dimension must be a multiple of block.
std::vector<int32_t> hadamard_permutation(uint64_t seed, int64_t dimension, int64_t block);

}  // namespace lowbit
