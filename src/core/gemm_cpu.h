// gemm_cpu.h — the one CPU matrix product of lowbit: C = A·B in FP32 (OpenBLAS sgemm), row-major.
#pragma once

#include <cstdint>

namespace lowbit {

// C (m×n) = A (m×k) · B (k×n); lda/ldb/ldc are row strides. trans_a/trans_b use Aᵀ/Bᵀ as stored.
void gemm_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb,
              bool trans_b, float* c, int64_t ldc, float beta = 0.0f);

}  // namespace lowbit
