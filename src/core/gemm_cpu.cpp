// gemm_cpu.cpp — gemm_f32 on OpenBLAS (cblas_sgemm, FP32 accumulation). Builds defining LOWBIT_NO_BLAS
// (the GPU host's minimal build, scripts/gpu_check.sh) use a plain multithreaded loop instead: same
// arithmetic up to summation order, much slower, fine for test references.
#include "core/gemm_cpu.h"

#if defined(LOWBIT_NO_BLAS)
#include "core/thread_pool.h"
#else
#include <cblas.h>
#endif

namespace lowbit {

void gemm_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb,
              bool trans_b, float* c, int64_t ldc, float beta) {
    if (m == 0 || n == 0) return;
#if defined(LOWBIT_NO_BLAS)
    parallel_for(m, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            float* ci = c + i * ldc;
            for (int64_t j = 0; j < n; ++j) ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
            for (int64_t p = 0; p < k; ++p) {
                const float aip = trans_a ? a[p * lda + i] : a[i * lda + p];
                if (trans_b)
                    for (int64_t j = 0; j < n; ++j) ci[j] += aip * b[j * ldb + p];
                else
                    for (int64_t j = 0; j < n; ++j) ci[j] += aip * b[p * ldb + j];
            }
        }
    });
#else
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m), int(n),
                int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
#endif
}

}  // namespace lowbit
