// bench_linear_layer.cu — one linear layer's training work end to end on the H200 (issue 21's per-layer goal):
// forward Y = X·Wᵀ + dgrad dX = dY·W + wgrad dW = dYᵀ·X through the engine's seam (train/cuda/
// train_linear_cuda.cuh CudaTrainGemm), BF16 tensors in and out, every pass included — the FP32 working
// copies, random signs / Hadamard, MX quantization, outlier extraction, the main GEMM, the OE sliver GEMM and
// its scatter — under each strategy, against the same three GEMMs in BF16 (cuBLAS) measured in the same run.
// Each MX strategy runs three times: main GEMM on the tensor cores (adahop/cuda/mx_gemm_fp8.cuh: FP8 with B folded,
// and the INT8 stages) and by its BF16 emulation (dequantize + cuBLAS BF16), so the table shows what the kernel
// buys and what the other passes cost.
// Floor next to each row: 3 GEMMs' FLOPs at the FP8 datasheet peak (1979 TFLOP/s); the BF16 row's at 989.
//   bench_linear_layer [--reps N] [--quick | --shapes large|base] [--json PATH] [--commit HASH]
// --shapes base: the six linears of the training engine's `base` model at its 16 × 1024-token step (d 768,
// 4 KV heads of 64, FFN 3072), where the engine's MX recipes run slower on the tensor cores than emulated
// (bench/results/train_cuda_h200.md): isolates the GEMM shapes from the training data's scale spread.
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cuda_bf16.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "cuda_event_timing.h"
#include "train/cuda/train_linear_cuda.cuh"

using namespace lowbit;

namespace {

constexpr double kFp8PeakTflops = 1979.0, kBf16PeakTflops = 989.0;  // H100/H200 SXM dense, datasheet

__global__ void fill_bf16(__nv_bfloat16* out, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float u = float(int(counter_random24(seed, uint64_t(i))) - (1 << 23)) / float(1 << 23);
        out[i] = __float2bfloat16_rn(u * scale);
    }
}

DeviceBuffer<__nv_bfloat16> random_bf16(int64_t n, uint64_t seed, float scale) {
    DeviceBuffer<__nv_bfloat16> d{size_t(n)};
    fill_bf16<<<1024, 256>>>(d.data(), n, seed, scale);
    CUDA_CHECK(cudaGetLastError());
    return d;
}

struct Shape {
    const char* name;
    int64_t m, k, n;  // tokens, in features, out features
};

struct Row {
    std::string shape, what;
    double us, bf16_us, flop;
};

}  // namespace

int main(int argc, char** argv) {
    int reps = 10;
    bool quick = false;
    std::string json_path, commit = "unknown", shape_set = "large";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
        else if (a == "--quick") quick = true;
        else if (a == "--shapes" && i + 1 < argc) shape_set = argv[++i];
        else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_linear_layer [--reps N] [--quick | --shapes large|base] [--json PATH] "
                                 "[--commit HASH]\n");
            return 2;
        }
    }
    try {
        std::vector<Shape> shapes = {{"8B up, T=8192", 8192, 4096, 14336}, {"8B down, T=8192", 8192, 14336, 4096},
                                     {"1B up, T=16384", 16384, 2048, 8192}};
        if (shape_set == "base")
            shapes = {{"base q/o, T=16384", 16384, 768, 768}, {"base k/v, T=16384", 16384, 768, 256},
                      {"base gate/up", 16384, 768, 3072}, {"base down", 16384, 3072, 768}};
        else if (shape_set != "large")
            throw Error(ErrorKind::usage, "--shapes " + shape_set + ": large or base");
        if (quick) shapes = {{"quick 2048x1024x2048", 2048, 1024, 2048}};
        cudaStream_t stream = 0;
        CudaTrainGemm gemm(stream);
        std::printf("bench_linear_layer on %s, commit %s, median of %d runs; forward + dgrad + wgrad, BF16 in/out\n",
                    cuda_device_description().c_str(), commit.c_str(), reps);
        std::printf("%-18s %-34s %10s %8s %9s %11s\n", "shape", "strategy", "time (us)", "x BF16", "TFLOP/s", "floor (us)");
        std::vector<Row> rows;
        for (const Shape& s : shapes) {
            const auto x = random_bf16(s.m * s.k, 1, 1.0f), w = random_bf16(s.n * s.k, 2, 0.02f), dy = random_bf16(s.m * s.n, 3, 1e-3f);
            DeviceBuffer<__nv_bfloat16> y{size_t(s.m * s.n)}, dx{size_t(s.m * s.k)};
            DeviceBuffer<float> dw{size_t(s.n * s.k)};
            const double flop = 3 * 2.0 * double(s.m) * double(s.k) * double(s.n);
            auto layer = [&](const TrainGemmMode& mode) {
                gemm.forward(mode, x.data(), w.data(), s.m, s.k, s.n, TrainGemmOut{nullptr, y.data(), 0.0f});
                gemm.backward_data(mode, dy.data(), w.data(), s.m, s.k, s.n, TrainGemmOut{nullptr, dx.data(), 0.0f});
                gemm.backward_weight(mode, dy.data(), x.data(), s.m, s.k, s.n, dw.data(), 0.0f);
            };
            TrainGemmMode bf16;
            const double bf16_us = median_event_us([&] { layer(bf16); }, reps);
            auto add = [&](const std::string& what, double us, double peak) {
                std::printf("%-18s %-34s %10.1f %8.2f %9.1f %11.1f\n", s.name, what.c_str(), us, bf16_us / us, flop / (us * 1e6),
                            flop / (peak * 1e6));
                std::fflush(stdout);
                rows.push_back({s.name, what, us, bf16_us, flop});
            };
            add("bf16 (cuBLAS)", bf16_us, kBf16PeakTflops);
            for (Strategy st : {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right})
                for (int engine = 0; engine < 4; ++engine) {
                    TrainGemmMode mode;
                    mode.strategy = st;
                    const MxGemmFold folds[] = {MxGemmFold::b_columns, MxGemmFold::int8_stages, MxGemmFold::int8_stages_columns,
                                                MxGemmFold::b_columns};
                    gemm.set_tensor_core_mx(engine < 3, folds[engine]);
                    const double us = median_event_us([&] { layer(mode); }, reps);
                    const char* how[] = {" (FP8 tensor cores)", " (INT8 tensor cores)", " (INT8, column bases)", " (BF16 emulation)"};
                    add(std::string("mxfp4 ") + strategy_name(st) + how[engine], us, kFp8PeakTflops);
                }
            gemm.set_tensor_core_mx(true);
        }
        if (!json_path.empty()) {
            FILE* f = std::fopen(json_path.c_str(), "w");
            if (!f) throw Error(ErrorKind::input, json_path + ": cannot open for writing");
            const std::time_t now = std::time(nullptr);
            char date[32];
            std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
            std::fprintf(f, "{\n  \"benchmark\": \"bench_linear_layer\",\n  \"device\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n"
                            "  \"reps\": %d,\n  \"rows\": [\n",
                         cuda_device_description().c_str(), commit.c_str(), date, reps);
            for (size_t i = 0; i < rows.size(); ++i)
                std::fprintf(f, "    {\"shape\": \"%s\", \"what\": \"%s\", \"us\": %.2f, \"vs_bf16\": %.4f, \"tflops\": %.2f}%s\n",
                             rows[i].shape.c_str(), rows[i].what.c_str(), rows[i].us, rows[i].bf16_us / rows[i].us,
                             rows[i].flop / (rows[i].us * 1e6), i + 1 < rows.size() ? "," : "");
            std::fprintf(f, "  ]\n}\n");
            std::fclose(f);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_linear_layer: %s\n", e.what());
        return 1;
    }
    return 0;
}
