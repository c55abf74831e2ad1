// bench_flash_attention.cu — time of the training attention (flash_attention_forward_cuda, flash_attention_backward_cuda)
// on the engine's shape: 16 sequences × 1024 tokens, 12 query heads / 4 key/value heads of 64 (the base
// config), BF16 Gaussian inputs. Median of CUDA-event timings; TFLOP/s with the usual causal counts:
//   forward  = 4·n_seq·n_heads·n_tok²·head_dim / 2     (Q·Kᵀ and P·V, half the square)
//   backward = 2.5 · forward                          (dV, dP, dQ, dK and the recomputed S; FlashAttention's convention)
// Baseline measured in the same run: a cuBLAS BF16 GEMM 8192³ (FP32 accumulation), the tensor cores' practical
// rate on this device; the ratio column is our TFLOP/s over it. PyTorch is not callable from here: compare with
// torch SDPA (flash backend) on the same shape from a Python script.
//
//   bench_flash_attention [--seq N] [--tok N] [--heads N] [--kv-heads N] [--head-dim N] [--reps N] [--json PATH] [--commit HASH]
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/cuda_blas.h"
#include "core/random_fill.h"
#include "cuda_event_timing.h"
#include "model/cuda/flash_attention_cuda.cuh"

using namespace lowbit;

namespace {

DeviceBuffer<__nv_bfloat16> gaussian_bf16(size_t n, uint64_t seed) {
    std::vector<float> x(n);
    fill_gaussian(x.data(), int64_t(n), seed);
    std::vector<__nv_bfloat16> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = __float2bfloat16_rn(x[i]);
    DeviceBuffer<__nv_bfloat16> d(n);
    d.upload(h.data(), n);
    return d;
}

// TFLOP/s of a square BF16 GEMM (FP32 accumulation, BF16 output) through cuBLAS.
double cublas_bf16_tflops(int n, int reps) {
    DeviceBuffer<__nv_bfloat16> a = gaussian_bf16(size_t(n) * n, 1), b = gaussian_bf16(size_t(n) * n, 2), c(size_t(n) * n);
    CudaBlas blas;
    const float one = 1.0f, zero = 0.0f;
    const double us = median_event_us(
        [&] {
            cublas_check(cublasGemmEx(blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), CUDA_R_16BF, n, b.data(),
                                      CUDA_R_16BF, n, &zero, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "cublasGemmEx(bf16)");
        },
        reps);
    return 2.0 * double(n) * n * n / (us * 1e-6) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t n_seq = 16, n_tok = 1024, n_heads = 12, n_kv_heads = 4, head_dim = 64;
    int reps = 20;
    std::string json_path, commit = "unknown";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : "0"; };
        if (a == "--seq") n_seq = std::atoll(next());
        else if (a == "--tok") n_tok = std::atoll(next());
        else if (a == "--heads") n_heads = std::atoll(next());
        else if (a == "--kv-heads") n_kv_heads = std::atoll(next());
        else if (a == "--head-dim") head_dim = std::atoll(next());
        else if (a == "--reps") reps = std::atoi(next());
        else if (a == "--json") json_path = next();
        else if (a == "--commit") commit = next();
        else {
            std::fprintf(stderr, "usage: bench_flash_attention [--seq N] [--tok N] [--heads N] [--kv-heads N] [--head-dim N] "
                                 "[--reps N] [--json PATH] [--commit HASH]\n");
            return 2;
        }
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_flash_attention: no CUDA device\n");
        return 1;
    }
    try {
        const std::string device = cuda_device_description();
        const BatchShape shape{n_seq, n_tok};
        const size_t q_elems = size_t(shape.rows() * n_heads * head_dim), kv_elems = size_t(shape.rows() * n_kv_heads * head_dim);
        DeviceBuffer<__nv_bfloat16> q = gaussian_bf16(q_elems, 11), k = gaussian_bf16(kv_elems, 12), v = gaussian_bf16(kv_elems, 13);
        DeviceBuffer<__nv_bfloat16> d_out = gaussian_bf16(q_elems, 14), out(q_elems), dq(q_elems), dk(kv_elems), dv(kv_elems);
        DeviceBuffer<float> lse(size_t(shape.rows() * n_heads));
        FlashAttentionBackwardWorkspace ws;

        auto forward = [&] {
            flash_attention_forward_cuda(q.data(), k.data(), v.data(), shape, n_heads, n_kv_heads, head_dim, out.data(), lse.data());
        };
        auto backward = [&] {
            flash_attention_backward_cuda(q.data(), k.data(), v.data(), out.data(), lse.data(), d_out.data(), shape, n_heads,
                                          n_kv_heads, head_dim, dq.data(), dk.data(), dv.data(), ws);
        };
        const double fwd_us = median_event_us(forward, reps);
        const double bwd_us = median_event_us(backward, reps);
        const double gemm_tflops = cublas_bf16_tflops(8192, reps);

        const double fwd_flop = 4.0 * double(n_seq) * double(n_heads) * double(n_tok) * double(n_tok) * double(head_dim) / 2.0;
        const double bwd_flop = 2.5 * fwd_flop;
        const double fwd_tflops = fwd_flop / (fwd_us * 1e-6) / 1e12, bwd_tflops = bwd_flop / (bwd_us * 1e-6) / 1e12;

        std::printf("bench_flash_attention on %s, commit %s\n", device.c_str(), commit.c_str());
        std::printf("shape: %lld sequences x %lld tokens, %lld query heads / %lld key/value heads of %lld, causal, BF16\n",
                    (long long)n_seq, (long long)n_tok, (long long)n_heads, (long long)n_kv_heads, (long long)head_dim);
        std::printf("FLOPs: forward = 4*n_seq*n_heads*n_tok^2*head_dim/2 = %.2f GFLOP; backward = 2.5*forward = %.2f GFLOP\n",
                    fwd_flop * 1e-9, bwd_flop * 1e-9);
        std::printf("%-22s %10s %10s %12s\n", "", "ms", "TFLOP/s", "/ cuBLAS");
        std::printf("%-22s %10.3f %10.1f %12.3f\n", "forward", fwd_us * 1e-3, fwd_tflops, fwd_tflops / gemm_tflops);
        std::printf("%-22s %10.3f %10.1f %12.3f\n", "backward", bwd_us * 1e-3, bwd_tflops, bwd_tflops / gemm_tflops);
        std::printf("%-22s %10.3f %10.1f %12.3f\n", "forward + backward", (fwd_us + bwd_us) * 1e-3,
                    (fwd_flop + bwd_flop) / ((fwd_us + bwd_us) * 1e-6) / 1e12,
                    (fwd_flop + bwd_flop) / ((fwd_us + bwd_us) * 1e-6) / 1e12 / gemm_tflops);
        std::printf("%-22s %10s %10.1f %12s\n", "cuBLAS BF16 GEMM 8192^3", "", gemm_tflops, "1");

        if (!json_path.empty()) {
            FILE* f = std::fopen((json_path + ".tmp").c_str(), "w");
            if (!f) {
                std::fprintf(stderr, "bench_flash_attention: cannot write %s.tmp\n", json_path.c_str());
                return 1;
            }
            char date[32];
            const std::time_t now = std::time(nullptr);
            std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
            std::fprintf(f,
                         "{\n  \"bench\": \"bench_flash_attention\",\n  \"device\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n"
                         "  \"n_seq\": %lld,\n  \"n_tok\": %lld,\n  \"n_heads\": %lld,\n  \"n_kv_heads\": %lld,\n  \"head_dim\": %lld,\n"
                         "  \"flop_formula\": \"forward 4*n_seq*n_heads*n_tok^2*head_dim/2, backward 2.5*forward\",\n"
                         "  \"forward_ms\": %.4f,\n  \"forward_tflops\": %.2f,\n  \"backward_ms\": %.4f,\n  \"backward_tflops\": %.2f,\n"
                         "  \"cublas_bf16_gemm_8192_tflops\": %.2f\n}\n",
                         device.c_str(), commit.c_str(), date, (long long)n_seq, (long long)n_tok, (long long)n_heads,
                         (long long)n_kv_heads, (long long)head_dim, fwd_us * 1e-3, fwd_tflops, bwd_us * 1e-3, bwd_tflops,
                         gemm_tflops);
            std::fclose(f);
            if (std::rename((json_path + ".tmp").c_str(), json_path.c_str()) != 0) {
                std::fprintf(stderr, "bench_flash_attention: cannot rename to %s\n", json_path.c_str());
                return 1;
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_flash_attention: %s\n", e.what());
        return 1;
    }
    return 0;
}
