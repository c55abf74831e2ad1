// gemm_cpu.cpp — gemm_f32 on OpenBLAS (cblas_sgemm, FP32 accumulation).
#include "core/gemm_cpu.h"

#include <cblas.h>

namespace lowbit {

void gemm_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb,
              bool trans_b, float* c, int64_t ldc, float beta) {
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m), int(n),
                int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

}  // namespace lowbit
