// bench_adahop.cu — overheads of AdaHOP's extra work on the H200, each against one cuBLAS BF16 GEMM of the
// same shape measured in the same run (Llama-1B-like shapes, M tokens × K in → N out):
//   detector   one pass over X (M×K), W (N×K) or dY (M×N) in BF16 + the moments kernel
//   OE-left    top-64 rows of X (scores, sort, gather + zero in place) + sliver GEMM 64×K×N + scatter
//   OE-right   top-64 rows of W (= columns of Wᵀ) + sliver GEMM M×K×64 + scatter
// Napkin math (4096×2048×8192): GEMM 137 GFLOP → 176 µs at ~780 TFLOP/s; detector on X reads 16.8 MB →
// 3.9 µs at 4.3 TB/s (2.2 %); the sliver GEMM is 64/4096 = 1.6 % of the FLOPs but runs at a lower rate.
//   bench_adahop [--json PATH] [--commit HASH] [--reps N]
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "adahop/cuda/outlier_extraction.cuh"
#include "adahop/cuda/outlier_stats.cuh"
#include "adahop/pair_analysis.h"

using namespace lowbit;

namespace {

void cublas_ok(cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS) throw Error(ErrorKind::runtime, "cuBLAS failed with status " + std::to_string(int(s)));
}

// Median of `reps` timed runs (CUDA events around each) after 3 warm-ups, in microseconds.
double median_us(const std::function<void()>& f, int reps) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) f();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        CUDA_CHECK(cudaEventRecord(a));
        f();
        CUDA_CHECK(cudaEventRecord(b));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0);
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

DeviceBuffer<__nv_bfloat16> bf16_matrix(int64_t rows, int64_t cols, Pattern p, uint64_t seed) {
    auto x = synthetic_operand(rows, cols, p, seed);
    std::vector<__nv_bfloat16> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = __float2bfloat16_rn(x[i]);
    DeviceBuffer<__nv_bfloat16> d(h.size());
    d.upload(h.data(), h.size());
    return d;
}

struct Row {
    std::string shape, what;
    double us, gemm_us;
};

}  // namespace

int main(int argc, char** argv) {
    std::string json_path, commit = "unknown";
    int reps = 30;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
        else if (a == "--reps" && i + 1 < argc) reps = std::max(3, std::atoi(argv[++i]));
        else {
            std::fprintf(stderr, "usage: bench_adahop [--json PATH] [--commit HASH] [--reps N]\n");
            return 2;
        }
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_adahop: no CUDA device\n");
        return 1;
    }
    try {
        cublasHandle_t h;
        cublas_ok(cublasCreate(&h));
        const int64_t shapes[][3] = {{4096, 2048, 8192}, {4096, 8192, 2048}, {4096, 2048, 2048}, {8192, 4096, 4096}};
        const int64_t k_oe = 64;
        std::vector<Row> rows;
        OutlierStatsWorkspace stats;
        OutlierExtractionWorkspace oe;
        for (auto sh : shapes) {
            const int64_t M = sh[0], K = sh[1], N = sh[2];
            const std::string shape = std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N);
            auto X = bf16_matrix(M, K, Pattern::col, 1), W = bf16_matrix(N, K, Pattern::row, 2), G = bf16_matrix(M, N, Pattern::row, 3);
            DeviceBuffer<float> C(size_t(M * N));
            DeviceBuffer<__nv_bfloat16> slice(size_t(std::max(k_oe * K, k_oe * K)));
            DeviceBuffer<int32_t> idx(static_cast<size_t>(k_oe));
            DeviceBuffer<float> sliver(size_t(std::max(k_oe * N, M * k_oe)));
            const float one = 1.0f, zero = 0.0f;
            // Y (M×N) = X (M×K) · Wᵀ: column-major Yᵀ = W · Xᵀ → op(W) = T on the N×K row-major W
            auto gemm = [&] {
                cublas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, W.data(), CUDA_R_16BF, int(K),
                                       X.data(), CUDA_R_16BF, int(K), &zero, C.data(), CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
            };
            const double g = median_us(gemm, reps);
            rows.push_back({shape, "cuBLAS BF16 GEMM", g, g});
            auto det = [&](const __nv_bfloat16* t, int64_t r, int64_t c) {
                return [&, t, r, c] {
                    row_col_sums_cuda(t, r, c, stats);
                    variance_moments_cuda(r, c, stats);
                };
            };
            rows.push_back({shape, "detector on X (MxK)", median_us(det(X.data(), M, K), reps), g});
            rows.push_back({shape, "detector on W (NxK)", median_us(det(W.data(), N, K), reps), g});
            rows.push_back({shape, "detector on dY (MxN)", median_us(det(G.data(), M, N), reps), g});
            // OE-left in the forward: top-64 token rows of X, sliver Y[idx,:] = X[idx,:]·Wᵀ (64×N)
            auto oe_left_split = [&] {
                split_outliers_cuda(X.data(), M, K, true, k_oe, OutlierMetric::l2, X.data(), slice.data(), idx.data(), oe);
            };
            auto oe_left_sliver = [&] {
                cublas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(k_oe), int(K), &one, W.data(), CUDA_R_16BF, int(K),
                                       slice.data(), CUDA_R_16BF, int(K), &zero, sliver.data(), CUDA_R_32F, int(N),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                scatter_outliers_cuda(sliver.data(), k_oe, idx.data(), true, C.data(), M, N);
            };
            const double ls = median_us(oe_left_split, reps), lg = median_us(oe_left_sliver, reps);
            rows.push_back({shape, "OE-left extract (X rows)", ls, g});
            rows.push_back({shape, "OE-left sliver GEMM+scatter", lg, g});
            rows.push_back({shape, "OE-left total", ls + lg, g});
            // OE-right in the forward: top-64 output channels = rows of W, sliver Y[:, idx] = X·W[idx,:]ᵀ (M×64)
            auto oe_right_split = [&] {
                split_outliers_cuda(W.data(), N, K, true, k_oe, OutlierMetric::l2, W.data(), slice.data(), idx.data(), oe);
            };
            auto oe_right_sliver = [&] {
                cublas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(k_oe), int(M), int(K), &one, slice.data(), CUDA_R_16BF,
                                       int(K), X.data(), CUDA_R_16BF, int(K), &zero, sliver.data(), CUDA_R_32F, int(k_oe),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                scatter_outliers_cuda(sliver.data(), k_oe, idx.data(), false, C.data(), M, N);
            };
            const double rs = median_us(oe_right_split, reps), rg = median_us(oe_right_sliver, reps);
            rows.push_back({shape, "OE-right extract (W rows)", rs, g});
            rows.push_back({shape, "OE-right sliver GEMM+scatter", rg, g});
            rows.push_back({shape, "OE-right total", rs + rg, g});
        }
        cublasDestroy(h);
        const std::string device = cuda_device_description();
        std::printf("bench_adahop on %s, commit %s, median of %d runs\n", device.c_str(), commit.c_str(), reps);
        std::printf("%-18s %-30s %12s %10s\n", "M x K x N", "what", "time (us)", "vs GEMM");
        for (const auto& r : rows)
            std::printf("%-18s %-30s %12.1f %9.2f%%\n", r.shape.c_str(), r.what.c_str(), r.us, 100.0 * r.us / r.gemm_us);
        if (!json_path.empty()) {
            FILE* f = std::fopen(json_path.c_str(), "w");
            if (!f) throw Error(ErrorKind::input, json_path + ": cannot open for writing");
            const std::time_t now = std::time(nullptr);
            char date[32];
            std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
            std::fprintf(f, "{\n  \"benchmark\": \"bench_adahop\",\n  \"device\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n  \"reps\": %d,\n  \"rows\": [\n",
                         device.c_str(), commit.c_str(), date, reps);
            for (size_t i = 0; i < rows.size(); ++i)
                std::fprintf(f, "    {\"shape\": \"%s\", \"what\": \"%s\", \"us\": %.3f, \"gemm_us\": %.3f, \"fraction_of_gemm\": %.5f}%s\n",
                             rows[i].shape.c_str(), rows[i].what.c_str(), rows[i].us, rows[i].gemm_us, rows[i].us / rows[i].gemm_us,
                             i + 1 < rows.size() ? "," : "");
            std::fprintf(f, "  ]\n}\n");
            std::fclose(f);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_adahop: %s\n", e.what());
        return 1;
    }
    return 0;
}
