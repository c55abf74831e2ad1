// bench_adahop.cu — overheads of AdaHOP's extra work on the H200, each against one cuBLAS BF16 GEMM of the
// same shape measured in the same run (Llama-1B-like shapes, M tokens × K in → N out):
//   detector   two launches over X (M×K), W (N×K) or dY (M×N) in BF16: row/column sums and the moments; and
//              from the quantization passes: the per-block Σx, Σx² that the fused Hadamard+MXFP4 passes of the
//              operand in both orientations write (what they add to those passes) + the finalising launch
//   OE-left    top-64 rows of X (score pass + select/gather/zero in place: 2 launches) + sliver GEMM 64×K×N
//              + scatter
//   OE-right   top-64 rows of W (= columns of Wᵀ) + sliver GEMM M×K×64 + scatter
//   batched    rows: 20 back-to-back calls per event pair (steady state in a stream, launch latency hidden)
//   OE fused   the extraction fused into the IHT+MXFP4 quantization of the operand (which training runs
//              anyway): the quantize pass with the per-block Σx² minus the pass without, plus the score
//              and select/gather/zero launches (extract_outliers_quantized_cuda)
//   overlapped the GEMM on one stream and a side task on a second stream (fork/join by events, 20 pairs
//              per event pair), minus the GEMM alone timed the same way: what the side task adds to a
//              training step when it runs beside the GEMM instead of before it. Side tasks: the detector
//              (its labels are only needed after the calibration window) and the OE sliver GEMM (it reads
//              the BF16 slice, not the main GEMM's result; the scatter follows the join), and the extraction
//              with it (without zeroing the selected vectors in the quantized operand: the scatter overwrites
//              their output rows/columns, so the main GEMM does not depend on it)
// "floor" rows: the bytes each step must move at the device-copy bandwidth measured in the same run
// (detector: the matrix; extract: the matrix + the slice and the zeroed rows; sliver: the other operand read
// in full + the sliver written and scattered) — the DRAM bound, ignoring launch latency.
// Napkin math (4096×2048×8192): GEMM 137 GFLOP → 176 µs at ~780 TFLOP/s; detector on X reads 16.8 MB →
// 3.9 µs at 4.3 TB/s (2.2 %); the OE-left sliver reads all of W (33.5 MB → 7.8 µs, 3.9 %) although it is
// only 64/4096 = 1.6 % of the FLOPs: cuBLAS at N = 64 is bandwidth-bound on the other operand.
// The matrices stay in the 60 MB L2 between repetitions unless --flush-l2 (then each timed run starts cold).
//   bench_adahop [--json PATH] [--commit HASH] [--reps N] [--flush-l2]
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "adahop/cuda/outlier_extraction.cuh"
#include "hadamard/cuda/hadamard_mxfp4.cuh"
#include "adahop/cuda/outlier_stats.cuh"
#include "adahop/pair_analysis.h"
#include "core/cuda_blas.h"
#include "cuda_event_timing.h"

using namespace lowbit;

namespace {

void cublas_ok(cublasStatus_t s) { cublas_check(s, "bench_adahop"); }

// Written between timed runs with --flush-l2 (larger than the H200's 60 MB L2).
DeviceBuffer<uint8_t>* g_flush = nullptr;

// Median of `reps` timed runs (CUDA events around each) after 3 warm-ups, in microseconds; with --flush-l2
// the L2 is flushed before each.
double median_us(const std::function<void()>& f, int reps) {
    if (!g_flush) return median_event_us(f, reps);
    return median_event_us(f, reps, [](int i) { CUDA_CHECK(cudaMemsetAsync(g_flush->data(), i & 0xFF, g_flush->bytes())); });
}

// Row-major C (m × n, FP32) = A (m × k, BF16, row-major) · Bᵀ with B (n × k, BF16, row-major) — the layout of
// every sliver here — through cuBLASLt: each of up to 16 heuristic algorithms (workspace: all of `workspace`) timed;
// returns the best median and writes the heuristic's first choice to *first_us and the count to *algos.
double best_lt_nt_us(cublasLtHandle_t lt, DeviceBuffer<uint8_t>& workspace, const __nv_bfloat16* a, const __nv_bfloat16* b, float* c,
                     int64_t m, int64_t n, int64_t k, int reps, double* first_us, int* algos) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    // column-major view: Cᵀ (n × m) = op(B) · Aᵀ, op = T on B's k × n column-major storage
    cublas_ok(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    cublas_ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    cublas_ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
    cublas_ok(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, uint64_t(k), uint64_t(n), k));
    cublas_ok(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, uint64_t(k), uint64_t(m), k));
    cublas_ok(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, uint64_t(n), uint64_t(m), n));
    cublasLtMatmulPreference_t pref;
    cublas_ok(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws_bytes = workspace.bytes();
    cublas_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res[16];
    int found = 0;
    cublas_ok(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, res, &found));
    const float one = 1.0f, zero = 0.0f;
    double best = 1e30;
    for (int i = 0; i < found; ++i) {
        const double us = median_us(
            [&] {
                cublas_ok(cublasLtMatmul(lt, op, &one, b, la, a, lb, &zero, c, lc, c, lc, &res[i].algo, workspace.data(), ws_bytes, 0));
            },
            reps);
        if (i == 0) *first_us = us;
        best = std::min(best, us);
    }
    *algos = found;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    return best;
}

// Steady-state cost in a stream: 20 back-to-back calls between one pair of events, divided by 20 (median of
// `reps` / 4 such batches). Launch latency overlaps the previous call's work here, as it does between the
// kernels of a training step; the isolated medians above include it once per launch.
double batched_us(const std::function<void()>& f, int reps) {
    constexpr int kBatch = 20;
    return median_us(
               [&] {
                   for (int i = 0; i < kBatch; ++i) f();
               },
               std::max(3, reps / 4)) /
           kBatch;
}

// What `test` adds to `base` in a stream (both as in batched_us): the median over `reps` rounds of the
// difference of one batch of each, timed back to back in alternating order (ABBA), so clock and thermal drift
// between two separate medians does not enter the difference (that drift moved the detector's sums' share
// by 1–4 µs between runs, session 14).
double batched_difference_us(const std::function<void()>& base, const std::function<void()>& test, int reps) {
    constexpr int kBatch = 20;
    auto batch_us = [&](const std::function<void()>& f) {
        return median_us(
                   [&] {
                       for (int i = 0; i < kBatch; ++i) f();
                   },
                   1) /
               kBatch;
    };
    for (int i = 0; i < 3; ++i) {
        base();
        test();
    }
    std::vector<double> d;
    for (int i = 0; i < std::max(5, reps); ++i) {
        const bool base_first = i % 2 == 0;
        const double a = base_first ? batch_us(base) : batch_us(test);
        const double b = base_first ? batch_us(test) : batch_us(base);
        d.push_back(base_first ? b - a : a - b);
    }
    std::sort(d.begin(), d.end());
    return d[d.size() / 2];
}

// Two non-blocking streams, each with its CudaBlas (the device's shared handle with a workspace per stream:
// a workspace must not be shared by kernels running at the same time). The main stream has the highest priority and the side stream the
// lowest: the block scheduler then prefers the GEMM's CTAs, and the side task fills the SMs the GEMM leaves
// idle (its last wave, its prologue and epilogue).
struct StreamPair {
    cudaStream_t gemm_stream = nullptr, side_stream = nullptr;
    std::unique_ptr<CudaBlas> gemm_blas, side_blas;
    StreamPair() {
        int least = 0, greatest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&gemm_stream, cudaStreamNonBlocking, greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&side_stream, cudaStreamNonBlocking, least));
        gemm_blas = std::make_unique<CudaBlas>(gemm_stream);
        side_blas = std::make_unique<CudaBlas>(side_stream);
    }
    ~StreamPair() {
        cudaStreamDestroy(gemm_stream);
        cudaStreamDestroy(side_stream);
    }
    StreamPair(const StreamPair&) = delete;
    StreamPair& operator=(const StreamPair&) = delete;
};

// Steady-state time of `gemm_task` on sp.gemm_stream with `side_task` (if given) beside it on sp.side_stream:
// each of 20 rounds forks (the side stream waits for an event of the GEMM stream), runs both and joins (the
// GEMM stream waits for the side's event); median of `reps` / 4 event-timed batches, per round, in µs.
double overlapped_us(StreamPair& sp, const std::function<void(cudaStream_t)>& gemm_task,
                     const std::function<void(cudaStream_t)>& side_task, int reps) {
    constexpr int kRounds = 20;
    cudaEvent_t a, b, fork, join;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    auto round = [&] {
        if (side_task) {
            CUDA_CHECK(cudaEventRecord(fork, sp.gemm_stream));
            CUDA_CHECK(cudaStreamWaitEvent(sp.side_stream, fork));
        }
        gemm_task(sp.gemm_stream);
        if (side_task) {
            side_task(sp.side_stream);
            CUDA_CHECK(cudaEventRecord(join, sp.side_stream));
            CUDA_CHECK(cudaStreamWaitEvent(sp.gemm_stream, join));
        }
    };
    for (int i = 0; i < 3; ++i) round();
    std::vector<double> t;
    for (int rep = 0; rep < std::max(3, reps / 4); ++rep) {
        CUDA_CHECK(cudaEventRecord(a, sp.gemm_stream));
        for (int i = 0; i < kRounds; ++i) round();
        CUDA_CHECK(cudaEventRecord(b, sp.gemm_stream));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0 / kRounds);
    }
    for (cudaEvent_t e : {a, b, fork, join}) CUDA_CHECK(cudaEventDestroy(e));
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
    bool flush_l2 = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
        else if (a == "--reps" && i + 1 < argc) reps = std::max(3, std::atoi(argv[++i]));
        else if (a == "--flush-l2") flush_l2 = true;
        else {
            std::fprintf(stderr, "usage: bench_adahop [--json PATH] [--commit HASH] [--reps N] [--flush-l2]\n");
            return 2;
        }
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_adahop: no CUDA device\n");
        return 1;
    }
    try {
        const CudaBlas blas;  // the default stream
        const cublasLtHandle_t lt = blas.lt_handle();
        DeviceBuffer<uint8_t> lt_workspace(size_t(64) << 20);
        StreamPair sp;
        DeviceBuffer<uint8_t> flush;
        if (flush_l2) {
            flush.resize(size_t(256) << 20);
            g_flush = &flush;
        }
        // the bandwidth the floors are computed with: a 512 MiB device-to-device copy (reads + writes)
        double copy_bytes_per_us = 0;
        {
            const size_t bytes = size_t(512) << 20;
            DeviceBuffer<uint8_t> src(bytes), dst(bytes);
            const double us = median_us([&] { CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice)); },
                                        std::min(reps, 10));
            copy_bytes_per_us = 2.0 * double(bytes) / us;
        }
        auto floor_us = [&](double bytes) { return bytes / copy_bytes_per_us; };
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
            auto gemm_on = [&](cublasHandle_t hh) {
                cublas_ok(cublasGemmEx(hh, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, W.data(), CUDA_R_16BF, int(K),
                                       X.data(), CUDA_R_16BF, int(K), &zero, C.data(), CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
            };
            auto gemm = [&] { gemm_on(blas.handle()); };
            const double g = median_us(gemm, reps);
            rows.push_back({shape, "cuBLAS BF16 GEMM", g, g});
            const double gb = batched_us(gemm, reps);  // the reference of the batched rows
            rows.push_back({shape, "cuBLAS BF16 GEMM, batched", gb, gb});
            auto det = [&](const __nv_bfloat16* t, int64_t r, int64_t c) {
                return [&, t, r, c] { detector_stats_cuda(t, r, c, stats); };
            };
            rows.push_back({shape, "detector on X (MxK)", median_us(det(X.data(), M, K), reps), g});
            rows.push_back({shape, "detector on W (NxK)", median_us(det(W.data(), N, K), reps), g});
            rows.push_back({shape, "detector on dY (MxN)", median_us(det(G.data(), M, N), reps), g});
            rows.push_back({shape, "detector on X, batched", batched_us(det(X.data(), M, K), reps), gb});
            rows.push_back({shape, "detector on W, batched", batched_us(det(W.data(), N, K), reps), gb});
            rows.push_back({shape, "detector on dY, batched", batched_us(det(G.data(), M, N), reps), gb});
            // the GEMM on the high-priority stream of a stream pair: the reference of the "beside" rows
            auto main_gemm = [&](cudaStream_t) { gemm_on(sp.gemm_blas->handle()); };
            const double go = overlapped_us(sp, main_gemm, nullptr, reps);
            rows.push_back({shape, "GEMM alone, two-stream timing", go, go});
            // the detector from the partials of the quantization passes training runs anyway (each operand in both
            // orientations, one pass each): what the partials add to those passes, plus the finalising launch —
            // per operand, and once for X, W and dY together (one launch; a step batches every operand it has)
            struct OperandPasses {
                DeviceBuffer<uint8_t> codes_r, scales_r, codes_c, scales_c;
                DeviceBuffer<float2> part_r, part_c;
                OperandPasses(int64_t r, int64_t c)
                    : codes_r(size_t(r * c / 2)), scales_r(size_t(r * c / 32)), codes_c(size_t(r * c / 2)), scales_c(size_t(r * c / 32)),
                      part_r(size_t(block_stats_count(r, c, 1))), part_c(size_t(block_stats_count(r, c, 0))) {}
            };
            std::vector<OperandPasses> passes_of;
            std::vector<DetectorPartialsOf> step_operands;
            passes_of.reserve(3);
            std::vector<double> sums_share;
            auto det_from_blocks = [&](const char* op, const DeviceBuffer<__nv_bfloat16>& t, int64_t r, int64_t c) {
                OperandPasses& b = passes_of.emplace_back(r, c);
                step_operands.push_back({b.part_r.data(), b.part_c.data(), r, c});
                const Mxfp4DeviceOutput plain_r{b.codes_r.data(), b.scales_r.data()}, plain_c{b.codes_c.data(), b.scales_c.data()};
                const Mxfp4DeviceOutput stats_r{b.codes_r.data(), b.scales_r.data(), nullptr, b.part_r.data()},
                    stats_c{b.codes_c.data(), b.scales_c.data(), nullptr, b.part_c.data()};
                const HadamardMxfp4Options o;
                auto passes = [&](const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols) {
                    return [&, along_rows, along_cols] {
                        hadamard_mxfp4_cuda(t.data(), r, c, o, along_rows, Mxfp4DeviceOutput{});
                        hadamard_mxfp4_cuda(t.data(), r, c, o, Mxfp4DeviceOutput{}, along_cols);
                    };
                };
                const double q_plain = batched_us(passes(plain_r, plain_c), reps);
                const double share = std::max(0.0, batched_difference_us(passes(plain_r, plain_c), passes(stats_r, stats_c), reps));
                const double fin = batched_us([&] { detector_stats_from_blocks_cuda(stats_r, stats_c, r, c, stats); }, reps);
                const std::string pre = std::string("detector on ") + op + " from the quantization passes, batched: ";
                sums_share.push_back(share);
                rows.push_back({shape, pre + "both passes without sums", q_plain, gb});
                rows.push_back({shape, pre + "the sums' share", share, gb});
                rows.push_back({shape, pre + "finalising launch", fin, gb});
                rows.push_back({shape, pre + "added", share + fin, gb});
                // nothing in the step waits for the statistics (the labels are voted on after the calibration
                // window), so the finalising launch can run on the side stream beside the GEMM
                const double fin_beside = std::max(
                    0.0, overlapped_us(sp, main_gemm, [&](cudaStream_t st) { detector_stats_from_blocks_cuda(stats_r, stats_c, r, c, stats, st); },
                                       reps) - go);
                rows.push_back({shape, pre + "finalising launch beside the main GEMM: added", fin_beside, go});
                rows.push_back({shape, pre + "added, finalising beside the GEMM", share + fin_beside, go});
            };
            det_from_blocks("X", X, M, K);
            det_from_blocks("W", W, N, K);
            det_from_blocks("dY", G, M, N);
            {
                DeviceBuffer<double> step_moments(6 * step_operands.size());
                auto step_finalise = [&](cudaStream_t st) {
                    detector_moments_from_partials_cuda(step_operands.data(), int(step_operands.size()), step_moments.data(), stats, st);
                };
                const double fin3 = batched_us([&] { step_finalise(0); }, reps);
                const double fin3_beside = std::max(0.0, overlapped_us(sp, main_gemm, step_finalise, reps) - go);
                const std::string pre = "detector on X, W and dY from the quantization passes, one finalising launch for the three";
                rows.push_back({shape, pre + ", batched", fin3, gb});
                rows.push_back({shape, pre + " beside the main GEMM: added", fin3_beside, go});
                // a training step finalises every operand it has at once: 16 layers of this shape → 48 operands (two
                // launches of at most 32), run before the next GEMM (no overlap assumed), per operand
                std::vector<DetectorPartialsOf> layers;
                for (int l = 0; l < 16; ++l) layers.insert(layers.end(), step_operands.begin(), step_operands.end());
                DeviceBuffer<double> layer_moments(6 * layers.size());
                const double fin48 = batched_us(
                    [&] { detector_moments_from_partials_cuda(layers.data(), int(layers.size()), layer_moments.data(), stats); }, reps);
                rows.push_back({shape, "detector: one step's finalising launches for 16 layers' X, W and dY (48 operands), batched", fin48, gb});
                const char* names[] = {"X", "W", "dY"};
                for (int i = 0; i < 3; ++i)
                    rows.push_back({shape, std::string("detector on ") + names[i] + ": the sums' share + a 48th of the step's finalising launches",
                                    sums_share[size_t(i)] + fin48 / 48, gb});
            }
            rows.push_back({shape, "floor: detector on X (read MxK)", floor_us(2.0 * double(M * K)), g});
            rows.push_back({shape, "floor: detector on W (read NxK)", floor_us(2.0 * double(N * K)), g});
            rows.push_back({shape, "floor: detector on dY (read MxN)", floor_us(2.0 * double(M * N)), g});
            // beside the GEMM on a second stream: what the detector adds to a calibration step
            auto det_beside = [&](const __nv_bfloat16* t, int64_t r, int64_t c) {
                return std::max(0.0, overlapped_us(sp, main_gemm, [&, t, r, c](cudaStream_t st) { detector_stats_cuda(t, r, c, stats, st); }, reps) - go);
            };
            rows.push_back({shape, "detector on X beside the GEMM: added", det_beside(X.data(), M, K), go});
            rows.push_back({shape, "detector on W beside the GEMM: added", det_beside(W.data(), N, K), go});
            rows.push_back({shape, "detector on dY beside the GEMM: added", det_beside(G.data(), M, N), go});
            // OE-left in the forward: top-64 token rows of X, sliver Y[idx,:] = X[idx,:]·Wᵀ (64×N)
            auto oe_left_split = [&] {
                split_outliers_cuda(X.data(), M, K, true, k_oe, OutlierMetric::l2, X.data(), slice.data(), idx.data(), oe);
            };
            auto oe_left_gemm_on = [&](cublasHandle_t hh) {
                cublas_ok(cublasGemmEx(hh, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(k_oe), int(K), &one, W.data(), CUDA_R_16BF, int(K),
                                       slice.data(), CUDA_R_16BF, int(K), &zero, sliver.data(), CUDA_R_32F, int(N),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            };
            auto oe_left_gemm = [&] { oe_left_gemm_on(blas.handle()); };
            auto oe_left_scatter = [&] { scatter_outliers_cuda(sliver.data(), k_oe, idx.data(), true, C.data(), M, N); };
            // the same product with the roles swapped (sliverᵀ, N×64 row-major): does cuBLAS pick a better kernel?
            auto oe_left_gemm_alt = [&] {
                cublas_ok(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(k_oe), int(N), int(K), &one, slice.data(), CUDA_R_16BF,
                                       int(K), W.data(), CUDA_R_16BF, int(K), &zero, sliver.data(), CUDA_R_32F, int(k_oe),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            };
            auto oe_left_sliver = [&] {
                oe_left_gemm();
                oe_left_scatter();
            };
            const double ls = median_us(oe_left_split, reps), lg = median_us(oe_left_sliver, reps);
            rows.push_back({shape, "OE-left extract (X rows)", ls, g});
            rows.push_back({shape, "OE-left sliver GEMM+scatter", lg, g});
            rows.push_back({shape, "OE-left total", ls + lg, g});
            rows.push_back({shape, "OE-left sliver GEMM only", median_us(oe_left_gemm, reps), g});
            rows.push_back({shape, "OE-left sliver GEMM, swapped roles", median_us(oe_left_gemm_alt, reps), g});
            {
                double first = 0;
                int algos = 0;
                const double best = best_lt_nt_us(lt, lt_workspace, slice.data(), W.data(), sliver.data(), k_oe, N, K, reps, &first, &algos);
                rows.push_back({shape, "OE-left sliver GEMM, cublasLt heuristic #1", first, g});
                rows.push_back({shape, "OE-left sliver GEMM, cublasLt best of " + std::to_string(algos), best, g});
            }
            rows.push_back({shape, "OE-left scatter only", median_us(oe_left_scatter, reps), g});
            rows.push_back({shape, "floor: OE-left extract", floor_us(2.0 * double(M * K) + 3.0 * 2.0 * double(k_oe * K)), g});
            rows.push_back({shape, "floor: OE-left sliver (read W)", floor_us(2.0 * double(N * K) + 3.0 * 4.0 * double(k_oe * N)), g});
            // OE-right in the forward: top-64 output channels = rows of W, sliver Y[:, idx] = X·W[idx,:]ᵀ (M×64)
            auto oe_right_split = [&] {
                split_outliers_cuda(W.data(), N, K, true, k_oe, OutlierMetric::l2, W.data(), slice.data(), idx.data(), oe);
            };
            auto oe_right_gemm_on = [&](cublasHandle_t hh) {
                cublas_ok(cublasGemmEx(hh, CUBLAS_OP_T, CUBLAS_OP_N, int(k_oe), int(M), int(K), &one, slice.data(), CUDA_R_16BF,
                                       int(K), X.data(), CUDA_R_16BF, int(K), &zero, sliver.data(), CUDA_R_32F, int(k_oe),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            };
            auto oe_right_gemm = [&] { oe_right_gemm_on(blas.handle()); };
            auto oe_right_scatter = [&] { scatter_outliers_cuda(sliver.data(), k_oe, idx.data(), false, C.data(), M, N); };
            auto oe_right_gemm_alt = [&] {  // sliverᵀ (64×M row-major)
                cublas_ok(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(M), int(k_oe), int(K), &one, X.data(), CUDA_R_16BF, int(K),
                                       slice.data(), CUDA_R_16BF, int(K), &zero, sliver.data(), CUDA_R_32F, int(M),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            };
            auto oe_right_sliver = [&] {
                oe_right_gemm();
                oe_right_scatter();
            };
            const double rs = median_us(oe_right_split, reps), rg = median_us(oe_right_sliver, reps);
            rows.push_back({shape, "OE-right extract (W rows)", rs, g});
            rows.push_back({shape, "OE-right sliver GEMM+scatter", rg, g});
            rows.push_back({shape, "OE-right total", rs + rg, g});
            // OE fused into the quantization pass of the operand (blocks along K, extracted rows)
            // sliver_gemm_on + scatter: the sliver GEMM beside the main GEMM on a second stream (its added time) and
            // the scatter after the join, timed after the select has written this side's indices
            auto fused_oe = [&](const char* side, const char* op, const DeviceBuffer<__nv_bfloat16>& T, int64_t r, double sliver_us,
                                const std::function<void()>& sliver, const std::function<void(cublasHandle_t)>& sliver_gemm_on,
                                const std::function<void()>& scatter) {
                DeviceBuffer<uint8_t> codes(size_t(r * K / 2)), scales(size_t(r * K / 32));
                DeviceBuffer<float> sumsq(size_t(r * K / 32));
                const HadamardMxfp4Options o;
                const Mxfp4DeviceOutput plain{codes.data(), scales.data()}, with_sums{codes.data(), scales.data(), sumsq.data()};
                const double q = median_us([&] { hadamard_mxfp4_cuda(T.data(), r, K, o, plain, Mxfp4DeviceOutput{}); }, reps);
                const double qs = median_us([&] { hadamard_mxfp4_cuda(T.data(), r, K, o, with_sums, Mxfp4DeviceOutput{}); }, reps);
                auto select = [&] { extract_outliers_quantized_cuda(T.data(), r, K, 1, k_oe, o.rule, with_sums, slice.data(), idx.data(), oe); };
                const double sel = median_us(select, reps);
                const std::string pre = std::string(side) + " fused: ";
                rows.push_back({shape, pre + "IHT+MXFP4 quantize " + op, q, g});
                rows.push_back({shape, pre + "the same + block sums", qs, g});
                rows.push_back({shape, pre + "scores+select+gather+zero", sel, g});
                rows.push_back({shape, pre + "extract (sums share + select)", std::max(0.0, qs - q) + sel, g});
                rows.push_back({shape, pre + "total (+ sliver GEMM+scatter)", std::max(0.0, qs - q) + sel + sliver_us, g});
                // in a stream: the quantize pass with and without the sums, and extraction + sliver GEMM + scatter
                const double bshare = std::max(0.0, batched_difference_us([&] { hadamard_mxfp4_cuda(T.data(), r, K, o, plain, Mxfp4DeviceOutput{}); },
                                                                          [&] { hadamard_mxfp4_cuda(T.data(), r, K, o, with_sums, Mxfp4DeviceOutput{}); },
                                                                          reps));
                const double bsel = batched_us(select, reps), bsl = batched_us(sliver, reps);
                rows.push_back({shape, pre + "batched: extract (sums share + select)", bshare + bsel, gb});
                rows.push_back({shape, pre + "batched: total (+ sliver GEMM+scatter)", bshare + bsel + bsl, gb});
                const double with = overlapped_us(sp, main_gemm, [&](cudaStream_t) { sliver_gemm_on(sp.side_blas->handle()); }, reps);
                const double added = std::max(0.0, with - go), bsc = batched_us(scatter, reps);
                rows.push_back({shape, pre + "batched: scatter", bsc, gb});
                rows.push_back({shape, pre + "sliver GEMM beside the main GEMM: added", added, go});
                rows.push_back({shape, pre + "batched: total, sliver GEMM beside the main GEMM", bshare + bsel + added + bsc, go});
                // the extraction too (zero_selected = false: the scatter overwrites the rows/columns the zeroing
                // would have cleared, so the main GEMM need not wait for it)
                auto extract_and_sliver = [&](cudaStream_t st) {
                    extract_outliers_quantized_cuda(T.data(), r, K, 1, k_oe, o.rule, with_sums, slice.data(), idx.data(), oe, st, false);
                    sliver_gemm_on(sp.side_blas->handle());
                };
                const double both = std::max(0.0, overlapped_us(sp, main_gemm, extract_and_sliver, reps) - go);
                rows.push_back({shape, pre + "extraction + sliver GEMM beside the main GEMM: added", both, go});
                rows.push_back({shape, pre + "batched: total, extraction + sliver GEMM beside the main GEMM", bshare + both + bsc, go});
            };
            fused_oe("OE-left", "X", X, M, lg, oe_left_sliver, oe_left_gemm_on, oe_left_scatter);
            fused_oe("OE-right", "W", W, N, rg, oe_right_sliver, oe_right_gemm_on, oe_right_scatter);
            rows.push_back({shape, "OE-right sliver GEMM only", median_us(oe_right_gemm, reps), g});
            rows.push_back({shape, "OE-right sliver GEMM, swapped roles", median_us(oe_right_gemm_alt, reps), g});
            {
                double first = 0;
                int algos = 0;
                const double best = best_lt_nt_us(lt, lt_workspace, X.data(), slice.data(), sliver.data(), M, k_oe, K, reps, &first, &algos);
                rows.push_back({shape, "OE-right sliver GEMM, cublasLt heuristic #1", first, g});
                rows.push_back({shape, "OE-right sliver GEMM, cublasLt best of " + std::to_string(algos), best, g});
            }
            rows.push_back({shape, "OE-right scatter only", median_us(oe_right_scatter, reps), g});
            rows.push_back({shape, "floor: OE-right extract", floor_us(2.0 * double(N * K) + 3.0 * 2.0 * double(k_oe * K)), g});
            rows.push_back({shape, "floor: OE-right sliver (read X)", floor_us(2.0 * double(M * K) + 3.0 * 4.0 * double(M * k_oe)), g});
        }
        g_flush = nullptr;
        const std::string device = cuda_device_description();
        std::printf("bench_adahop on %s, commit %s, median of %d runs%s; device copy %.0f GB/s (floors)\n", device.c_str(),
                    commit.c_str(), reps, flush_l2 ? ", L2 flushed before each run" : "", copy_bytes_per_us / 1e3);
        std::printf("%-18s %-36s %12s %10s\n", "M x K x N", "what", "time (us)", "vs GEMM");
        for (const auto& r : rows)
            std::printf("%-18s %-36s %12.1f %9.2f%%\n", r.shape.c_str(), r.what.c_str(), r.us, 100.0 * r.us / r.gemm_us);
        if (!json_path.empty()) {
            FILE* f = std::fopen(json_path.c_str(), "w");
            if (!f) throw Error(ErrorKind::input, json_path + ": cannot open for writing");
            const std::time_t now = std::time(nullptr);
            char date[32];
            std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
            std::fprintf(f, "{\n  \"benchmark\": \"bench_adahop\",\n  \"device\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n  \"reps\": %d,\n  \"flush_l2\": %s,\n  \"device_copy_gb_per_s\": %.1f,\n  \"rows\": [\n",
                         device.c_str(), commit.c_str(), date, reps, flush_l2 ? "true" : "false", copy_bytes_per_us / 1e3);
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
