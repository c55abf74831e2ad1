// gemm_cpu.h — the CPU matrix products of lowbit: C = op(A)·op(B) (+ beta·C) in FP32 (OpenBLAS sgemm,
// FP32 accumulation) on row-major matrix views, and its symmetric case C = AᵀA (+ beta·C) (ssyrk: half the FLOPs).
#pragma once

#include <string>

#include "core/matrix_view.h"

namespace lowbit {

enum class Trans : bool { no = false, yes = true };

// c (m×n) = op(a) (m×k) · op(b) (k×n) + beta·c, op(x) = x or xᵀ as stored. The shapes must agree (else
// Error(usage) naming them).
void gemm_f32(ConstMatF a, Trans trans_a, ConstMatF b, Trans trans_b, MatF c, float beta = 0.0f);

// c (n×n) = aᵀ·a (a: k×n) + beta·c, both triangles written (the upper one by ssyrk, mirrored): exactly symmetric
// where c was. Error(usage) on shapes that do not agree.
void gram_f32(ConstMatF a, MatF c, float beta = 0.0f);

// The BLAS and the kernels it runs on this machine, e.g. "OpenBLAS SkylakeX" (gemm_cpu.cpp: why lowbit may have
// chosen them), for benchmark records.
std::string blas_kernels();

}  // namespace lowbit
