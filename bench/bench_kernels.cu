// bench_kernels.cu — GPU throughput of the lowbit CUDA kernels on an N×N BF16 matrix of Gaussian values
// (N = 8192 by default: 134 MB, more than twice the H200's 60 MB L2, and two input buffers in rotation).
// For each kernel: median and minimum time over --reps timed runs (CUDA events around each launch, after
// warm-up runs), GB/s of the bytes it must read + write (counted next to each entry below), and the ratio
// to a cudaMemcpyDeviceToDevice of the same N×N×2 bytes measured in the same run (read + write counted).
//   bench_kernels [--json PATH] [--commit HASH] [--reps N] [--size N]
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "adahop/cuda/hadamard_mxfp4_stats.cuh"
#include "core/random_fill.h"
#include "core/thread_pool.h"
#include "formats/cuda/int_quantize.cuh"
#include "formats/cuda/mx_quantize.cuh"
#include "formats/cuda/nvfp4_quantize.cuh"
#include "hadamard/cuda/block_hadamard.cuh"
#include "hadamard/cuda/hadamard_mxfp4.cuh"

using namespace lowbit;

namespace {

struct Entry {
    std::string name;
    double bytes;  // read + written, the minimum the operation must move
    std::function<void(int which_input)> run;
};

struct Timing {
    std::string name;
    double bytes, median_us, min_us;
};

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    std::string json_path, commit = "unknown";
    int reps = 30;
    int64_t N = 8192;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
        else if (a == "--reps" && i + 1 < argc) reps = std::max(3, std::atoi(argv[++i]));
        else if (a == "--size" && i + 1 < argc) N = std::max<int64_t>(256, std::atoll(argv[++i]) / 256 * 256);
        else {
            std::fprintf(stderr, "usage: bench_kernels [--json PATH] [--commit HASH] [--reps N] [--size N]\n");
            return 2;
        }
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_kernels: no CUDA device\n");
        return 1;
    }
    try {
        const std::string device = cuda_device_description();
        const int64_t n = N * N;
        const double E = double(n);  // elements
        std::printf("bench_kernels: %s\n%lld x %lld BF16 (%.1f MB), %d timed runs per kernel\n", device.c_str(), (long long)N,
                    (long long)N, 2 * E / 1e6, reps);

        // Two Gaussian inputs (different seeds), BF16.
        std::vector<DeviceBuffer<uint16_t>> inputs;
        {
            std::vector<float> xf(static_cast<size_t>(n));
            std::vector<uint16_t> xh(static_cast<size_t>(n));
            for (uint64_t seed : {1ull, 2ull}) {
                fill_gaussian(xf.data(), n, seed);
                parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
                    for (int64_t i = b; i < e; ++i) xh[size_t(i)] = f32_to_bf16(xf[size_t(i)]);
                });
                DeviceBuffer<uint16_t> d{size_t(n)};
                d.upload(xh.data(), size_t(n));
                inputs.push_back(std::move(d));
            }
        }
        auto in = [&](int w) { return reinterpret_cast<const __nv_bfloat16*>(inputs[size_t(w)].data()); };
        DeviceBuffer<uint16_t> out16{size_t(n)};                 // Hadamard output / copy destination
        DeviceBuffer<uint8_t> codes{size_t(n)}, codes2{size_t(n)};  // up to 1 byte per element
        DeviceBuffer<uint8_t> scales{size_t(n / 16)}, scales2{size_t(n / 16)};
        DeviceBuffer<float> tscale{1};
        DeviceBuffer<uint32_t> amax{1};
        DeviceBuffer<IntGridParams> params{size_t(n / 128)};

        std::vector<Entry> entries;
        // Baseline: device-to-device copy of N·N·2 bytes, read + write.
        entries.push_back({"memcpy D2D (baseline)", 4 * E, [&](int w) {
                               CUDA_CHECK(cudaMemcpyAsync(out16.data(), inputs[size_t(w)].data(), size_t(2 * n), cudaMemcpyDeviceToDevice));
                           }});
        // Block Hadamard, BF16 out of place: reads 2 B, writes 2 B per element.
        for (int64_t B : {32, 128})
            for (int axis : {1, 0})
                entries.push_back({"hadamard bf16 B=" + std::to_string(B) + " axis " + std::to_string(axis), 4 * E, [&, B, axis](int w) {
                                       block_hadamard_cuda(in(w), reinterpret_cast<__nv_bfloat16*>(out16.data()), N, N, B, axis);
                                   }});
        // MX quantize from BF16: reads 2 B; writes 0.5 B (FP4) or 1 B (FP8) of codes + 1/32 B of scales.
        for (int axis : {1, 0})
            entries.push_back({"mx_quantize mxfp4 rceil axis " + std::to_string(axis), E * (2 + 0.5 + 1.0 / 32), [&, axis](int w) {
                                   QuantizeOptions o;
                                   o.axis = axis;
                                   mx_quantize_cuda(in(w), N, N, MxElement::e2m1, ScaleRule::rceil, o, codes.data(), scales.data());
                               }});
        entries.push_back({"mx_quantize mxfp8_e4m3 axis 1", E * (2 + 1 + 1.0 / 32), [&](int w) {
                               QuantizeOptions o;
                               mx_quantize_cuda(in(w), N, N, MxElement::e4m3, ScaleRule::rceil, o, codes.data(), scales.data());
                           }});
        // NVFP4 from BF16: amax pass reads 2 B; quantize pass reads 2 B, writes 0.5 B codes + 1/16 B scales.
        entries.push_back({"nvfp4_quantize axis 1 (2 passes)", E * (2 + 2 + 0.5 + 1.0 / 16), [&](int w) {
                               QuantizeOptions o;
                               nvfp4_quantize_cuda(in(w), N, N, o, Nvfp4DeviceOutput{codes.data(), scales.data(), tscale.data(), amax.data()});
                           }});
        // INT4 g128 from BF16: reads 2 B, writes 1 B code + 8 B params per 128 elements.
        entries.push_back({"int_quantize int4 g128 axis 1", E * (2 + 1 + 8.0 / 128), [&](int w) {
                               IntGridFormat f;
                               f.bits = 4;
                               f.group = 128;
                               QuantizeOptions o;
                               int_quantize_cuda(in(w), N, N, f, o, codes.data(), params.data());
                           }});
        // Fused Hadamard-32 + MXFP4 from BF16: reads 2 B; writes 0.5 + 1/32 B per orientation.
        for (Rounding r : {Rounding::nearest_even, Rounding::stochastic}) {
            const std::string rn = r == Rounding::stochastic ? " SR" : "";
            entries.push_back({"hadamard+mxfp4 axis 1" + rn, E * (2 + 0.5 + 1.0 / 32), [&, r](int w) {
                                   HadamardMxfp4Options o;
                                   o.rounding = r;
                                   o.seed = 7;
                                   hadamard_mxfp4_cuda(in(w), N, N, o, Mxfp4DeviceCodes{codes.data(), scales.data()}, Mxfp4DeviceCodes{});
                               }});
            entries.push_back({"hadamard+mxfp4 axis 0" + rn, E * (2 + 0.5 + 1.0 / 32), [&, r](int w) {
                                   HadamardMxfp4Options o;
                                   o.rounding = r;
                                   o.seed = 7;
                                   hadamard_mxfp4_cuda(in(w), N, N, o, Mxfp4DeviceCodes{}, Mxfp4DeviceCodes{codes2.data(), scales2.data()});
                               }});
            entries.push_back({"hadamard+mxfp4 both" + rn, E * (2 + 2 * (0.5 + 1.0 / 32)), [&, r](int w) {
                                   HadamardMxfp4Options o;
                                   o.rounding = r;
                                   o.seed = 7;
                                   hadamard_mxfp4_cuda(in(w), N, N, o, Mxfp4DeviceCodes{codes.data(), scales.data()},
                                                       Mxfp4DeviceCodes{codes2.data(), scales2.data()});
                               }});
        }
        // The same passes with the statistics AdaHOP fuses into them (RNE): Σx² (outlier-extraction scores, 4 B)
        // or the detector's (Σx, Σx²) pair (8 B) per group of blocks (adahop/cuda/hadamard_mxfp4_stats.cuh).
        DeviceBuffer<float> block_sumsq{size_t(n / 32)};
        DeviceBuffer<float2> partials{size_t(n / 32)};
        for (int axis : {1, 0}) {
            const std::string ax = " axis " + std::to_string(axis);
            const double code_bytes = E * (2 + 0.5 + 1.0 / 32);
            const double groups = double(block_stats_count(N, N, axis));
            auto out = [&](float* sumsq, float2* parts) { return Mxfp4DeviceOutput{codes.data(), scales.data(), sumsq, parts}; };
            auto run = [&, axis](int w, const Mxfp4DeviceOutput& o) {
                hadamard_mxfp4_cuda(in(w), N, N, {}, axis == 1 ? o : Mxfp4DeviceOutput{}, axis == 0 ? o : Mxfp4DeviceOutput{});
            };
            entries.push_back({"hadamard+mxfp4" + ax + " + block Σx²", code_bytes + groups * 4.0,
                               [&, run, out](int w) { run(w, out(block_sumsq.data(), nullptr)); }});
            entries.push_back({"hadamard+mxfp4" + ax + " + detector", code_bytes + groups * 8.0,
                               [&, run, out](int w) { run(w, out(nullptr, partials.data())); }});
        }

        cudaEvent_t ev0, ev1;
        CUDA_CHECK(cudaEventCreate(&ev0));
        CUDA_CHECK(cudaEventCreate(&ev1));
        std::vector<Timing> timings;
        for (const Entry& e : entries) {
            for (int i = 0; i < 3; ++i) e.run(i & 1);  // warm-up: module load, first-touch
            CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<double> t;
            for (int i = 0; i < reps; ++i) {
                CUDA_CHECK(cudaEventRecord(ev0));
                e.run(i & 1);
                CUDA_CHECK(cudaEventRecord(ev1));
                CUDA_CHECK(cudaEventSynchronize(ev1));
                float ms = 0;
                CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
                t.push_back(double(ms) * 1000.0);
            }
            std::sort(t.begin(), t.end());
            timings.push_back({e.name, e.bytes, t[t.size() / 2], t.front()});
        }
        CUDA_CHECK(cudaEventDestroy(ev0));
        CUDA_CHECK(cudaEventDestroy(ev1));

        const double base_gbps = timings[0].bytes / (timings[0].median_us * 1e3);
        std::printf("\n%-38s %10s %10s %10s %9s\n", "kernel", "median us", "min us", "GB/s", "vs copy");
        for (const Timing& t : timings) {
            const double gbps = t.bytes / (t.median_us * 1e3);
            std::printf("%-38s %10.1f %10.1f %10.1f %9.3f\n", t.name.c_str(), t.median_us, t.min_us, gbps, gbps / base_gbps);
        }
        if (!json_path.empty()) {
            const std::string tmp = json_path + ".tmp";
            FILE* f = std::fopen(tmp.c_str(), "w");
            if (!f) {
                std::fprintf(stderr, "bench_kernels: cannot write %s\n", tmp.c_str());
                return 1;
            }
            int runtime = 0, driver = 0;
            CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
            CUDA_CHECK(cudaDriverGetVersion(&driver));
            cudaDeviceProp p{};
            CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
            const std::time_t now = std::time(nullptr);
            char date[32];
            std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
            std::fprintf(f,
                         "{\n  \"bench\": \"bench_kernels\",\n  \"gpu\": \"%s\",\n  \"device\": \"%s\",\n  \"cuda_runtime\": \"%d.%d\",\n"
                         "  \"cuda_driver\": \"%d.%d\",\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"rows\": %lld,\n  \"cols\": %lld,\n"
                         "  \"dtype\": \"bf16\",\n  \"reps\": %d,\n  \"copy_gbps\": %.2f,\n  \"kernels\": [\n",
                         json_escape(p.name).c_str(), json_escape(device).c_str(), runtime / 1000, (runtime % 1000) / 10, driver / 1000,
                         (driver % 1000) / 10, date, json_escape(commit).c_str(), (long long)N, (long long)N, reps, base_gbps);
            for (size_t i = 0; i < timings.size(); ++i) {
                const Timing& t = timings[i];
                const double gbps = t.bytes / (t.median_us * 1e3);
                std::fprintf(f,
                             "    {\"name\": \"%s\", \"bytes\": %.0f, \"median_us\": %.2f, \"min_us\": %.2f, \"gbps\": %.2f, "
                             "\"ratio_to_copy\": %.4f}%s\n",
                             json_escape(t.name).c_str(), t.bytes, t.median_us, t.min_us, gbps, gbps / base_gbps,
                             i + 1 < timings.size() ? "," : "");
            }
            std::fprintf(f, "  ]\n}\n");
            std::fclose(f);
            if (std::rename(tmp.c_str(), json_path.c_str()) != 0) {
                std::fprintf(stderr, "bench_kernels: cannot rename %s\n", tmp.c_str());
                return 1;
            }
            std::printf("\nwrote %s\n", json_path.c_str());
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_kernels: %s\n", e.what());
        return 1;
    }
    return 0;
}
