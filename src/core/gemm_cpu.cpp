// gemm_cpu.cpp — gemm_f32 on OpenBLAS (cblas_sgemm, FP32 accumulation). The same build runs on the dev
// machine, in CI and on the GPU host (static OpenBLAS there), so every CPU reference is one code path.
#include "core/gemm_cpu.h"

#include <cblas.h>

#include "core/error.h"

namespace lowbit {

void gemm_f32(ConstMatF a, Trans trans_a, ConstMatF b, Trans trans_b, MatF c, float beta) {
    const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
    const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
    const int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
    LOWBIT_CHECK(k == kb && c.rows == m && c.cols == n, ErrorKind::usage,
                 "gemm_f32: shapes do not agree: op(A) {}x{}, op(B) {}x{}, C {}x{}", m, k, kb, n, c.rows, c.cols);
    if (m == 0 || n == 0) return;
    if (k == 0) {  // BLAS wants leading dimensions ≥ 1 even for an empty reduction
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) c.row(i)[j] = beta == 0.0f ? 0.0f : beta * c.row(i)[j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0f,
                a.data, int(a.ld), b.data, int(b.ld), beta, c.data, int(c.ld));
}

void gram_f32(ConstMatF a, MatF c, float beta) {
    const int64_t n = a.cols, k = a.rows;
    LOWBIT_CHECK(c.rows == n && c.cols == n, ErrorKind::usage, "gram_f32: A is {}x{}, C {}x{} (want {}x{})", k, n, c.rows,
                 c.cols, n, n);
    if (n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) c.row(i)[j] = beta == 0.0f ? 0.0f : beta * c.row(i)[j];
        return;
    }
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, int(n), int(k), 1.0f, a.data, int(a.ld), beta, c.data, int(c.ld));
    for (int64_t i = 1; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) c.row(i)[j] = c.row(j)[i];
}

}  // namespace lowbit
