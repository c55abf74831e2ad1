// bench_mx_gemm.cu — TFLOP/s of lowbit's exact MX GEMM on FP8 tensor cores (adahop/cuda/mx_gemm_fp8.cuh) against
// cuBLAS in the same run, on the H200: for each shape C (M × N, BF16) = A (M × K) · Bᵀ (B: N × K, K-major)
//   lowbit MXFP4   E2M1 codes + E8M0 scales; includes the E2M1 → E4M3 passes over both operands (scratch
//                  reused): B's column scales folded per tile-block (the default), and unfolded (MxGemmFold::none)
//                  INT8 stages (MxGemmFold::int8_stages) on several kinds of scales: the random 127 ± 4 of the
//                  other rows (most chunks outside the window: the per-block path), 127 + 0…3 (every chunk in one
//                  plane: the chained path), the same with one block in 65,536 six binades up (rare outliers: the
//                  chunks they touch take two planes, or with MxGemmScratch::single_plane the per-block path), 127 +
//                  0…7 on A or B (every chunk two-plane on that side; A also with one plane), and Gaussian data
//                  quantized by mx_quantize_cuda (what the data decide; the counts of chunks outside and with two planes
//                  are printed); and MxGemmFold::int8_stages_columns (one base per column of B) on the in-window
//                  scales: its cost where both rules fit
//   lowbit MXFP8   E4M3 codes + E8M0 scales (the same kernel without the expansion)
//   cuBLAS BF16    cublasGemmEx, BF16 in, FP32 compute, BF16 out — the baseline of every ratio
//   cuBLAS FP8     cublasLtMatmul, E4M3 in with per-tensor FP32 scales, BF16 out — the practical FP8 ceiling
//   cuBLAS FP8 1x128  the same with one FP32 scale per 128 elements along K on both operands
//                  (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, cuBLAS ≥ 12.9, Hopper; DeepSeek-V3's activation
//                  scaling) — the closest cuBLAS has to a block-scaled GEMM on this machine; a row cuBLASLt
//                  refuses at run time is printed as refused, with the reason
// Each cuBLASLt row is the fastest of the heuristic's first 8 candidates that cuBLASLt runs.
// Shapes: 8192³ and the training shapes of issue 21 — Llama-1B (hidden 2048, FFN 8192) and Llama-8B (4096,
// 14336) at 8192 and 16384 tokens T, the up projection in its three orientations: forward Y = X·Wᵀ (M = T,
// N = FFN, K = hidden), dgrad dX = dY·W (M = T, N = hidden, K = FFN), wgrad dW = dYᵀ·X (M = FFN, N = hidden,
// K = T); the down projection's shapes are these with M and N swapped.
// Floors printed next to each figure: the time at the datasheet's dense FP8 peak (1979 TFLOP/s) and at the
// design's bound (per-32 promotion issues 2 FP32 ops per output element and block: ~50 % of FP8 peak).
//   bench_mx_gemm [--reps N] [--flush-l2] [--quick] [--json PATH] [--commit HASH]
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "adahop/cuda/mx_gemm_fp8.cuh"
#include "formats/cuda/mx_quantize.cuh"
#include "core/counter_rng.h"
#include "core/cuda_blas.h"
#include "cuda_event_timing.h"

using namespace lowbit;

namespace {

constexpr double kFp8PeakTflops = 1979.0;  // H100/H200 SXM dense FP8, datasheet
constexpr double kDesignBoundFraction = 0.5;

void cublas_ok(cublasStatus_t s, const char* what) { cublas_check(s, what); }

DeviceBuffer<uint8_t>* g_flush = nullptr;  // written before each timed run with --flush-l2 (larger than the 60 MB L2)

double median_us(const std::function<void()>& f, int reps) {
    if (!g_flush) return median_event_us(f, reps);
    return median_event_us(f, reps, [](int i) { CUDA_CHECK(cudaMemsetAsync(g_flush->data(), i & 0xFF, g_flush->bytes())); });
}

// Test data on the device: random E2M1 bytes, E4M3 bytes without NaN codes, scales 127 ± 4, BF16 in [−1, 1).
// scale_rare: 127 + 0…3 with one block in 65,536 six binades higher (a rare outlier: its (row or tile, chunk) takes
// two INT8 planes, or the per-block path with one plane). scale_two: 127 + 0…7 (every chunk two-plane).
enum class Fill { e2m1, e4m3, scale, scale_window, scale_rare, scale_two, bf16, gauss_bf16 };

__global__ void fill_kernel(uint8_t* out, int64_t n, Fill what, uint64_t seed) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const uint32_t r = counter_random24(seed, uint64_t(i));
        if (what == Fill::e2m1) out[i] = uint8_t(r);
        else if (what == Fill::e4m3) out[i] = uint8_t((r & 0x7Fu) == 0x7Fu ? r ^ 1u : r);
        else if (what == Fill::scale) out[i] = uint8_t(123 + r % 9);
        else if (what == Fill::scale_window) out[i] = uint8_t(127 + r % 4);
        else if (what == Fill::scale_rare) out[i] = uint8_t(127 + r % 4 + (((r >> 2) & 0xFFFFu) == 0 ? 6 : 0));
        else if (what == Fill::scale_two) out[i] = uint8_t(127 + r % 8);
        else if (what == Fill::bf16) reinterpret_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(float(int(r & 0xFFFF) - 32768) / 32768.0f);
        else {  // Box–Muller from two 24-bit uniforms
            const float u1 = (float(r) + 1.0f) / 16777216.0f, u2 = float(counter_random24(seed ^ 0x6A55u, uint64_t(i))) / 16777216.0f;
            reinterpret_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
        }
    }
}

DeviceBuffer<uint8_t> filled(int64_t count, Fill what, uint64_t seed) {
    const int64_t bytes = what == Fill::bf16 || what == Fill::gauss_bf16 ? 2 * count : count;
    DeviceBuffer<uint8_t> d{size_t(bytes)};
    fill_kernel<<<1024, 256>>>(d.data(), count, what, seed);
    CUDA_CHECK(cudaGetLastError());
    return d;
}

// `count` FP32 ones, in an allocation of its own (cudaMalloc: 256-byte aligned). The first H200 run passed the
// two per-tensor scales as one buffer (the second 4 bytes in) and cuBLASLt refused the call with status 15
// although its heuristic had offered an algorithm: pointers are what only the call itself sees.
DeviceBuffer<float> unit_floats(int64_t count) {
    const std::vector<float> ones(size_t(count), 1.0f);
    DeviceBuffer<float> d{size_t(count)};
    d.upload(ones.data(), ones.size());
    return d;
}

struct Shape {
    std::string name;  // model, tokens, orientation
    int64_t m, n, k;
};

std::vector<Shape> shapes(bool quick) {
    std::vector<Shape> s{{"square", 8192, 8192, 8192}};
    if (quick) return s;
    struct Model {
        const char* name;
        int64_t hidden, ffn;
    };
    for (const Model& md : {Model{"1B", 2048, 8192}, Model{"8B", 4096, 14336}})
        for (int64_t t : {int64_t(8192), int64_t(16384)}) {
            const std::string p = std::string(md.name) + " T=" + std::to_string(t) + " up ";
            s.push_back({p + "fwd", t, md.ffn, md.hidden});
            s.push_back({p + "dgrad", t, md.hidden, md.ffn});
            s.push_back({p + "wgrad", md.ffn, md.hidden, t});
        }
    return s;
}

struct Row {
    std::string shape, what;
    int64_t m, n, k;
    double us, bf16_us;   // us: NaN when refused
    std::string refused;  // why cuBLASLt refused the row (empty: it ran)
};

enum class LtScale { per_tensor, block_1x128 };

// Row-major C (m × n) = A (m × k) · Bᵀ (B: n × k), both K-major: column-major Cᵀ = op_T(B) · A — the TN layout
// Hopper's FP8 GEMMs require (cuBLAS's A is our B, its B our A), E4M3 in, FP32 compute and scale type, BF16
// C = D (in place, beta 0). Scales: one FP32 per tensor, or (block_1x128) one per 128 elements along K per row
// of each operand. Nothing here throws: the first call cuBLASLt refuses is kept in `refused`.
struct LtFp8Gemm {
    cublasLtMatmulDesc_t op{};
    cublasLtMatrixLayout_t la{}, lb{}, lc{};
    // nvcc 13's front end fails on std::vector of this type (internal error), hence the array.
    cublasLtMatmulHeuristicResult_t candidates[8]{};
    int found = 0;  // valid entries of candidates
    std::string refused;

    void require(cublasStatus_t s, const char* call) {
        if (s != CUBLAS_STATUS_SUCCESS && refused.empty()) refused = std::string(call) + ": status " + std::to_string(int(s));
    }

    LtFp8Gemm(cublasLtHandle_t lt, int64_t m, int64_t n, int64_t k, LtScale scale, const float* scale_a, const float* scale_b,
              size_t workspace) {
        require(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
        const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
        require(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "TRANSA");
        require(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt), "TRANSB");
        if (scale == LtScale::block_1x128) {
            const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
            require(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode), "A_SCALE_MODE VEC128_32F");
            require(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode), "B_SCALE_MODE VEC128_32F");
        }
        require(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_b, sizeof scale_b), "A_SCALE_POINTER");
        require(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_a, sizeof scale_a), "B_SCALE_POINTER");
        require(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k), "layout B");
        require(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k), "layout A");
        require(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, uint64_t(n), uint64_t(m), n), "layout C");
        cublasLtMatmulPreference_t pref{};
        require(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
        require(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace),
                "workspace");
        if (refused.empty()) {
            require(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, candidates, &found), "cublasLtMatmulAlgoGetHeuristic");
            if (!refused.empty()) found = 0;
            if (refused.empty() && found == 0) refused = "cublasLtMatmulAlgoGetHeuristic: no algorithm";
        }
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
    }
    ~LtFp8Gemm() {
        if (la) cublasLtMatrixLayoutDestroy(la);
        if (lb) cublasLtMatrixLayoutDestroy(lb);
        if (lc) cublasLtMatrixLayoutDestroy(lc);
        if (op) cublasLtMatmulDescDestroy(op);
    }
    LtFp8Gemm(const LtFp8Gemm&) = delete;
    LtFp8Gemm& operator=(const LtFp8Gemm&) = delete;

    // The median time of the fastest candidate that runs (each is first tried once, untimed); NaN, with the
    // reason in `refused`, when cuBLASLt runs none.
    double best_us(cublasLtHandle_t lt, const uint8_t* a8, const uint8_t* b8, __nv_bfloat16* c, DeviceBuffer<uint8_t>& workspace,
                   int reps) {
        const float one = 1.0f, zero = 0.0f;
        auto run = [&](const cublasLtMatmulAlgo_t& algo) {
            return cublasLtMatmul(lt, op, &one, b8, la, a8, lb, &zero, c, lc, c, lc, &algo, workspace.data(), workspace.bytes(), 0);
        };
        double best = std::nan("");
        for (int i = 0; i < found; ++i) {
            const cublasLtMatmulHeuristicResult_t& cand = candidates[i];
            if (cand.state != CUBLAS_STATUS_SUCCESS || cand.workspaceSize > workspace.bytes()) continue;
            const cublasStatus_t trial = run(cand.algo);
            if (trial != CUBLAS_STATUS_SUCCESS) {
                require(trial, "cublasLtMatmul");
                continue;
            }
            const double us = median_us([&] { cublas_ok(run(cand.algo), "cublasLtMatmul(fp8)"); }, reps);
            if (std::isnan(best) || us < best) best = us;
        }
        if (std::isnan(best) && refused.empty()) refused = "no candidate with a good state that fits the workspace";
        if (!std::isnan(best)) refused.clear();
        return best;
    }
};

}  // namespace

int main(int argc, char** argv) {
    std::string json_path, commit = "unknown";
    int reps = 20;
    bool flush_l2 = false, quick = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
        else if (a == "--reps" && i + 1 < argc) reps = std::max(3, std::atoi(argv[++i]));
        else if (a == "--flush-l2") flush_l2 = true;
        else if (a == "--quick") quick = true;
        else {
            std::fprintf(stderr, "usage: bench_mx_gemm [--reps N] [--flush-l2] [--quick] [--json PATH] [--commit HASH]\n");
            return 2;
        }
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_mx_gemm: no CUDA device\n");
        return 1;
    }
    try {
        const CudaBlas blas;
        DeviceBuffer<uint8_t> lt_workspace(size_t(64) << 20);
        DeviceBuffer<uint8_t> flush;
        if (flush_l2) {
            flush.resize(size_t(256) << 20);
            g_flush = &flush;
        }
        const std::string device = cuda_device_description();
        const size_t lt_version = cublasLtGetVersion();
        std::printf("bench_mx_gemm on %s, cuBLASLt %zu.%zu.%zu, commit %s, median of %d runs%s\n", device.c_str(), lt_version / 10000,
                    lt_version / 100 % 100, lt_version % 100, commit.c_str(), reps, flush_l2 ? ", L2 flushed before each run" : "");
        std::printf("floors: FP8 peak %.0f TFLOP/s (datasheet, dense); design bound %.0f %% of it (per-32 promotion)\n", kFp8PeakTflops,
                    100 * kDesignBoundFraction);
        std::printf("%-22s %-32s %20s %10s %9s %8s %11s %11s\n", "shape", "what", "M x N x K", "time (us)", "TFLOP/s", "x BF16",
                    "floor (us)", "bound (us)");
        // Each row is printed as soon as it is measured, so a later failure keeps the rows before it.
        std::vector<Row> rows;
        auto add = [&](const Row& r) {
            const double flop = 2.0 * double(r.m) * double(r.n) * double(r.k), floor_us = flop / (kFp8PeakTflops * 1e6);
            const std::string dims = std::to_string(r.m) + "x" + std::to_string(r.n) + "x" + std::to_string(r.k);
            if (r.refused.empty())
                std::printf("%-22s %-32s %20s %10.1f %9.1f %8.2f %11.1f %11.1f\n", r.shape.c_str(), r.what.c_str(), dims.c_str(), r.us,
                            flop / (r.us * 1e6), r.bf16_us / r.us, floor_us, floor_us / kDesignBoundFraction);
            else
                std::printf("%-22s %-32s %20s   refused by cuBLASLt (%s)\n", r.shape.c_str(), r.what.c_str(), dims.c_str(),
                            r.refused.c_str());
            std::fflush(stdout);
            rows.push_back(r);
        };
        MxGemmScratch scratch;
        const DeviceBuffer<float> tensor_scale_a = unit_floats(1), tensor_scale_b = unit_floats(1);
        for (const Shape& s : shapes(quick)) {
            const int64_t m = s.m, n = s.n, k = s.k;
            DeviceBuffer<uint8_t> a4 = filled(m * k / 2, Fill::e2m1, 1), b4 = filled(n * k / 2, Fill::e2m1, 2);
            DeviceBuffer<uint8_t> a8 = filled(m * k, Fill::e4m3, 3), b8 = filled(n * k, Fill::e4m3, 4);
            DeviceBuffer<uint8_t> sa = filled(m * k / 32, Fill::scale, 5), sb = filled(n * k / 32, Fill::scale, 6);
            DeviceBuffer<uint8_t> abf = filled(m * k, Fill::bf16, 7), bbf = filled(n * k, Fill::bf16, 8);
            // 1x128 scales: rows × K/128 FP32 values per operand (whatever order cuBLASLt reads them in, they are all
            // ones), rows and K-blocks rounded up to 128 and 4 so that any padding it assumes lies inside.
            const int64_t k_blocks = ((k + 127) / 128 + 3) / 4 * 4;
            const DeviceBuffer<float> block_scale_a = unit_floats((m + 127) / 128 * 128 * k_blocks);
            const DeviceBuffer<float> block_scale_b = unit_floats((n + 127) / 128 * 128 * k_blocks);
            DeviceBuffer<__nv_bfloat16> c(size_t(m * n));
            auto bf16 = [](DeviceBuffer<uint8_t>& d) { return reinterpret_cast<const __nv_bfloat16*>(d.data()); };
            const float one = 1.0f, zero = 0.0f;
            const double bf16_us = median_us(
                [&] {
                    cublas_ok(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, bf16(bbf), CUDA_R_16BF,
                                           int(k), bf16(abf), CUDA_R_16BF, int(k), &zero, c.data(), CUDA_R_16BF, int(n),
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                              "cublasGemmEx(bf16)");
                },
                reps);
            add({s.name, "cuBLAS BF16", m, n, k, bf16_us, bf16_us, ""});
            for (LtScale scale : {LtScale::per_tensor, LtScale::block_1x128}) {
                const bool block = scale == LtScale::block_1x128;
                LtFp8Gemm g(blas.lt_handle(), m, n, k, scale, block ? block_scale_a.data() : tensor_scale_a.data(),
                            block ? block_scale_b.data() : tensor_scale_b.data(), lt_workspace.bytes());
                const double us = g.best_us(blas.lt_handle(), a8.data(), b8.data(), c.data(), lt_workspace, reps);
                add({s.name, block ? "cuBLAS FP8 (1x128 block scales)" : "cuBLAS FP8 (per-tensor scale)", m, n, k, us, bf16_us, g.refused});
            }
            const MxGemmOperand mx4a{a4.data(), sa.data(), MxElement::e2m1}, mx4b{b4.data(), sb.data(), MxElement::e2m1};
            const MxGemmOperand mx8a{a8.data(), sa.data(), MxElement::e4m3}, mx8b{b8.data(), sb.data(), MxElement::e4m3};
            add({s.name, "lowbit MXFP4 (B folded, + passes)", m, n, k,
                 median_us([&] { mx_gemm_fp8_cuda(mx4a, mx4b, m, n, k, nullptr, c.data(), 0, &scratch); }, reps), bf16_us, ""});
            add({s.name, "lowbit MXFP4 (unfolded, + passes)", m, n, k,
                 median_us([&] { mx_gemm_fp8_cuda(mx4a, mx4b, m, n, k, nullptr, c.data(), 0, &scratch, MxGemmFold::none); }, reps),
                 bf16_us, ""});
            const auto int8_us = [&](const MxGemmOperand& x, const MxGemmOperand& y, const char* what,
                                     MxGemmFold fold = MxGemmFold::int8_stages, bool single_plane = false) {
                scratch.single_plane = single_plane;
                const double us = median_us([&] { mx_gemm_fp8_cuda(x, y, m, n, k, nullptr, c.data(), 0, &scratch, fold); }, reps);
                scratch.single_plane = false;
                std::printf("    (%s: of %lld operand tile-chunks (K = 256), %u outside the INT8 window, %u with two planes)\n",
                            what, (long long)(((m + 127) / 128 + (n + 127) / 128) * ((k + 1023) / 1024 * 4)),
                            mx_gemm_fp8_unfolded_blocks(scratch), mx_gemm_fp8_two_plane_units(scratch));
                return us;
            };
            add({s.name, "lowbit MXFP4 INT8 (scales 127±4)", m, n, k, int8_us(mx4a, mx4b, "127±4"), bf16_us, ""});
            {
                DeviceBuffer<uint8_t> wa = filled(m * k / 32, Fill::scale_window, 9), wb = filled(n * k / 32, Fill::scale_window, 10);
                add({s.name, "lowbit MXFP4 INT8 (scales 127+0..3)", m, n, k,
                     int8_us({a4.data(), wa.data(), MxElement::e2m1}, {b4.data(), wb.data(), MxElement::e2m1}, "127+0..3"), bf16_us, ""});
                DeviceBuffer<uint8_t> ra = filled(m * k / 32, Fill::scale_rare, 13), rb = filled(n * k / 32, Fill::scale_rare, 14);
                add({s.name, "lowbit MXFP4 INT8 (127+0..3, 1 block in 65536 +6)", m, n, k,
                     int8_us({a4.data(), ra.data(), MxElement::e2m1}, {b4.data(), rb.data(), MxElement::e2m1}, "rare +6"), bf16_us, ""});
                add({s.name, "lowbit MXFP4 INT8 one plane (rare +6)", m, n, k,
                     int8_us({a4.data(), ra.data(), MxElement::e2m1}, {b4.data(), rb.data(), MxElement::e2m1}, "rare +6, one plane",
                             MxGemmFold::int8_stages, true), bf16_us, ""});
                // two planes: A's every chunk spans 0…7 binades, B's stays in one plane; then both (block by block)
                DeviceBuffer<uint8_t> ta = filled(m * k / 32, Fill::scale_two, 15), tb = filled(n * k / 32, Fill::scale_two, 16);
                add({s.name, "lowbit MXFP4 INT8 (A 127+0..7, B 0..3)", m, n, k,
                     int8_us({a4.data(), ta.data(), MxElement::e2m1}, {b4.data(), wb.data(), MxElement::e2m1}, "A two planes"), bf16_us, ""});
                add({s.name, "lowbit MXFP4 INT8 one plane (A 0..7)", m, n, k,
                     int8_us({a4.data(), ta.data(), MxElement::e2m1}, {b4.data(), wb.data(), MxElement::e2m1}, "A 0..7, one plane",
                             MxGemmFold::int8_stages, true), bf16_us, ""});
                add({s.name, "lowbit MXFP4 INT8 (B 127+0..7, A 0..3)", m, n, k,
                     int8_us({a4.data(), wa.data(), MxElement::e2m1}, {b4.data(), tb.data(), MxElement::e2m1}, "B two planes"), bf16_us, ""});
                add({s.name, "lowbit MXFP4 INT8 column bases (127+0..3)", m, n, k,
                     int8_us({a4.data(), wa.data(), MxElement::e2m1}, {b4.data(), wb.data(), MxElement::e2m1}, "columns, 127+0..3",
                             MxGemmFold::int8_stages_columns), bf16_us, ""});
            }
            {
                DeviceBuffer<uint8_t> ga = filled(m * k, Fill::gauss_bf16, 11), gb = filled(n * k, Fill::gauss_bf16, 12);
                DeviceBuffer<uint8_t> qa(size_t(m * k / 2)), qb(size_t(n * k / 2)), qsa(size_t(m * k / 32)), qsb(size_t(n * k / 32));
                mx_quantize_cuda(bf16(ga), m, k, MxElement::e2m1, ScaleRule::floor, QuantizeOptions{}, qa.data(), qsa.data());
                mx_quantize_cuda(bf16(gb), n, k, MxElement::e2m1, ScaleRule::floor, QuantizeOptions{}, qb.data(), qsb.data());
                const MxGemmOperand gx{qa.data(), qsa.data(), MxElement::e2m1}, gy{qb.data(), qsb.data(), MxElement::e2m1};
                add({s.name, "lowbit MXFP4 INT8 (Gaussian data)", m, n, k, int8_us(gx, gy, "Gaussian"), bf16_us, ""});
                add({s.name, "lowbit MXFP4 folded (Gaussian data)", m, n, k,
                     median_us([&] { mx_gemm_fp8_cuda(gx, gy, m, n, k, nullptr, c.data(), 0, &scratch); }, reps), bf16_us, ""});
            }
            add({s.name, "lowbit MXFP8", m, n, k,
                 median_us([&] { mx_gemm_fp8_cuda(mx8a, mx8b, m, n, k, nullptr, c.data(), 0, &scratch); }, reps), bf16_us, ""});
        }
        if (!json_path.empty()) {
            FILE* f = std::fopen(json_path.c_str(), "w");
            if (!f) throw Error(ErrorKind::input, json_path + ": cannot open for writing");
            const std::time_t now = std::time(nullptr);
            char date[32];
            std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
            std::fprintf(f,
                         "{\n  \"benchmark\": \"bench_mx_gemm\",\n  \"device\": \"%s\",\n  \"cublaslt_version\": %zu,\n  \"commit\": \"%s\",\n  "
                         "\"date\": \"%s\",\n  \"reps\": %d,\n  \"flush_l2\": %s,\n  \"fp8_peak_tflops\": %.0f,\n  \"rows\": [\n",
                         device.c_str(), lt_version, commit.c_str(), date, reps, flush_l2 ? "true" : "false", kFp8PeakTflops);
            for (size_t i = 0; i < rows.size(); ++i) {
                const Row& r = rows[i];
                const double flop = 2.0 * double(r.m) * double(r.n) * double(r.k);
                std::fprintf(f, "    {\"shape\": \"%s\", \"what\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, ", r.shape.c_str(),
                             r.what.c_str(), (long long)r.m, (long long)r.n, (long long)r.k);
                if (r.refused.empty())
                    std::fprintf(f, "\"us\": %.3f, \"tflops\": %.2f, \"vs_bf16\": %.4f}", r.us, flop / (r.us * 1e6), r.bf16_us / r.us);
                else
                    std::fprintf(f, "\"us\": null, \"tflops\": null, \"vs_bf16\": null, \"refused\": \"%s\"}", r.refused.c_str());
                std::fprintf(f, "%s\n", i + 1 < rows.size() ? "," : "");
            }
            std::fprintf(f, "  ]\n}\n");
            std::fclose(f);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_mx_gemm: %s\n", e.what());
        return 1;
    }
    return 0;
}
