// bench_cpu.cpp — throughput of the CPU reference kernels on a 2048×4096 FP32 matrix: the FWHT (block 32
// and the full row of 4096, along rows) and the quantizers (MXFP4, NVFP4, INT4 g128, GGUF Q4_0), each as
// GB/s of bytes read + written and as a ratio to std::memcpy of the same 32 MiB in the same run
// (memcpy also counted as read + write). Median of repeated runs after a warm-up.
//   bench_cpu [--json PATH] [--commit HASH] [--reps N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "core/random_fill.h"
#include "core/thread_pool.h"
#include "formats/gguf_types.h"
#include "formats/int_grid.h"
#include "formats/mx_block.h"
#include "formats/nvfp4.h"
#include "hadamard/hadamard.h"

using namespace lowbit;

namespace {

struct Result {
    std::string name;
    double bytes;  // read + written
    double median_ms, min_ms;
};

double median_ms(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

Result time_it(const std::string& name, double bytes, int reps, const std::function<void()>& fn) {
    fn();  // warm-up (page faults, thread start)
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const auto a = std::chrono::steady_clock::now();
        fn();
        const auto b = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
    }
    return {name, bytes, median_ms(t), *std::min_element(t.begin(), t.end())};
}

std::string cpu_model() {
    FILE* f = std::fopen("/proc/cpuinfo", "r");
    if (!f) return "unknown";
    char line[512];
    std::string model = "unknown";
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "model name", 10) == 0) {
            const char* p = std::strchr(line, ':');
            if (p) {
                model = p + 2;
                while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
            }
            break;
        }
    }
    std::fclose(f);
    return model;
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (c == '\n') {
            o += "\\n";
            continue;
        }
        o += c;
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    std::string json_path, commit = "unknown";
    int reps = 10;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
        else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
        else if (a == "--threads" && i + 1 < argc) set_thread_count(std::atoi(argv[++i]));
        else {
            std::fprintf(stderr, "usage: bench_cpu [--json PATH] [--commit HASH] [--reps N] [--threads N]\n");
            return 2;
        }
    }
    const int64_t rows = 2048, cols = 4096, n = rows * cols;
    const double in_bytes = double(n) * 4;
    std::vector<float> x(static_cast<size_t>(n)), work(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
    fill_gaussian(x.data(), n, 1);
    std::printf("bench_cpu: %lld x %lld FP32 (%.1f MiB), %d threads, %s\n", (long long)rows, (long long)cols,
                in_bytes / (1 << 20), thread_count(), cpu_model().c_str());

    std::vector<Result> res;
    // memcpy: reads and writes 32 MiB (single-threaded, as std::memcpy is).
    res.push_back(time_it("memcpy (baseline)", 2 * in_bytes, reps, [&] { std::memcpy(dst.data(), x.data(), size_t(in_bytes)); }));
    // FWHT in place: reads and writes the matrix (the copy that restores the input is outside the timing
    // only in spirit: the transform is orthonormal, so repeated application keeps values bounded).
    std::copy(x.begin(), x.end(), work.begin());
    {
        HadamardOptions o;
        o.block = 32;
        o.axis = 1;
        res.push_back(time_it("fwht block 32, axis 1", 2 * in_bytes, reps, [&] { hadamard_transform(work.data(), rows, cols, o); }));
        o.block = cols;
        res.push_back(time_it("fwht full row 4096, axis 1", 2 * in_bytes, reps, [&] { hadamard_transform(work.data(), rows, cols, o); }));
    }
    QuantizeOptions q;
    // MXFP4: reads x, writes one code byte per element (CPU layout) + one scale byte per 32.
    res.push_back(time_it("mx_quantize mxfp4 rceil", in_bytes + double(n) + double(n) / 32, reps,
                          [&] { volatile auto m = mx_quantize(x.data(), rows, cols, MxElement::e2m1, ScaleRule::rceil, q).scales[0]; (void)m; }));
    // NVFP4: reads x twice (tensor amax, then blocks), writes one code byte per element + one scale per 16.
    res.push_back(time_it("nvfp4_quantize", 2 * in_bytes + double(n) + double(n) / 16, reps,
                          [&] { volatile auto m = nvfp4_quantize(x.data(), rows, cols, q).block_scales[0]; (void)m; }));
    // INT4 g128: reads x (twice per group, the second from cache: counted once), writes a byte per
    // element + 8 bytes of params per group.
    {
        IntGridFormat f;
        f.bits = 4;
        f.group = 128;
        res.push_back(time_it("int_quantize int4 g128", in_bytes + double(n) + double(n) / 128 * 8, reps,
                              [&] { volatile auto m = int_quantize(x.data(), rows, cols, f, q).q[0]; (void)m; }));
    }
    // GGUF Q4_0: reads x, writes 18 bytes per 32 elements.
    res.push_back(time_it("gguf q4_0", in_bytes + double(n) / 32 * 18, reps,
                          [&] { volatile auto m = gguf_quantize_matrix(GgufType::Q4_0, x.data(), rows, cols)[0]; (void)m; }));

    const double base_gbps = res[0].bytes / (res[0].median_ms * 1e6);
    std::printf("\n%-30s %12s %12s %10s %10s\n", "kernel", "median ms", "min ms", "GB/s", "vs memcpy");
    for (const Result& r : res) {
        const double gbps = r.bytes / (r.median_ms * 1e6);
        std::printf("%-30s %12.3f %12.3f %10.2f %10.3f\n", r.name.c_str(), r.median_ms, r.min_ms, gbps, gbps / base_gbps);
    }
    if (!json_path.empty()) {
        const std::string tmp = json_path + ".tmp";
        FILE* f = std::fopen(tmp.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "bench_cpu: cannot write %s\n", tmp.c_str());
            return 1;
        }
        const std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        std::fprintf(f, "{\n  \"bench\": \"bench_cpu\",\n  \"cpu\": \"%s\",\n  \"threads\": %d,\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n",
                     json_escape(cpu_model()).c_str(), thread_count(), date, json_escape(commit).c_str());
        std::fprintf(f, "  \"rows\": %lld,\n  \"cols\": %lld,\n  \"reps\": %d,\n  \"baseline_gbps\": %.4f,\n  \"kernels\": [\n",
                     (long long)rows, (long long)cols, reps, base_gbps);
        for (size_t i = 0; i < res.size(); ++i) {
            const Result& r = res[i];
            const double gbps = r.bytes / (r.median_ms * 1e6);
            std::fprintf(f, "    {\"name\": \"%s\", \"bytes\": %.0f, \"median_ms\": %.5f, \"min_ms\": %.5f, \"gbps\": %.4f, \"ratio_to_memcpy\": %.4f}%s\n",
                         json_escape(r.name).c_str(), r.bytes, r.median_ms, r.min_ms, gbps, gbps / base_gbps,
                         i + 1 < res.size() ? "," : "");
        }
        std::fprintf(f, "  ]\n}\n");
        std::fclose(f);
        if (std::rename(tmp.c_str(), json_path.c_str()) != 0) {
            std::fprintf(stderr, "bench_cpu: cannot rename %s to %s\n", tmp.c_str(), json_path.c_str());
            return 1;
        }
        std::printf("\nwrote %s\n", json_path.c_str());
    }
    return 0;
}
