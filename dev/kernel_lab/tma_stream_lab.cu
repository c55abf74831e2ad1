// tma_stream_lab.cu — kernel lab: the operand data path of the MX GEMM (adahop/cuda/mx_gemm_fp8.cu) alone —
// persistent CTAs, one TMA producer warp, consumer warpgroups that only wait on `full` and release `empty`
// (optionally spinning a fixed time per stage, standing in for the MMA work) — to find what limits it.
// Every variant streams the operand tiles of a 128 × 128-tile GEMM (M × N × K bytes of E4M3 operands) and
// reports the shared-memory fill rate (tiles × K × 256 B / time) next to a device copy of the same run.
// CMake target tma_stream_lab (dev/CMakeLists.txt); run the binary on the GPU machine.
#include "core/cuda_device.h"

#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda/tma.cuh"

using namespace lowbit;
using namespace lowbit::cuda_detail;

namespace {

constexpr int kTile = 128, kStageK = 128;

struct Params {
    int m, n, k;
    int order;          // 0: groups of `group` M-tiles, N inside (the GEMM's); 1: raster along N; 2: raster along M
    int group;          // M-tiles per group (order 0)
    int load_b;         // 0: only A boxes
    int same_tile;      // every CTA streams tile 0 (L2-resident): the SM-side bound
    int waiters;        // 0: every consumer thread waits on `full`; 1: one lane per warp, then __syncwarp
    int spin_cycles;    // consumer time per stage (stand-in for the MMA work: 8 wgmma m64n128k32 of 64 clk = 512)
    int consumers;      // consumer warpgroups (1 or 2)
    int box_rows;       // rows per TMA box: 128 (one box per operand and stage) or 64 (two)
};

__device__ __forceinline__ void tile_origin(const Params& p, int t, int* m0, int* n0) {
    const int tm = (p.m + kTile - 1) / kTile, tn = (p.n + kTile - 1) / kTile;
    if (p.same_tile) t = 0;
    if (p.order == 1) {
        *m0 = (t / tn) * kTile;
        *n0 = (t % tn) * kTile;
    } else if (p.order == 2) {
        *m0 = (t % tm) * kTile;
        *n0 = (t / tm) * kTile;
    } else {
        const int per_group = p.group * tn, g = t / per_group, first = g * p.group;
        const int gm = tm - first < p.group ? tm - first : p.group, in = t - g * per_group;
        *m0 = (first + in % gm) * kTile;
        *n0 = (in / gm) * kTile;
    }
}

template <int kStages>
struct alignas(1024) Ring {
    uint8_t a[kStages][kTile * kStageK];
    uint8_t b[kStages][kTile * kStageK];
    uint64_t full[kStages], empty[kStages];
};

template <int kStages>
__global__ void __launch_bounds__(384, 1) stream_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                                                        Params p, unsigned long long* sink) {
    extern __shared__ uint8_t raw[];
    Ring<kStages>& r = *reinterpret_cast<Ring<kStages>*>(raw + ((1024u - (smem_address(raw) & 1023u)) & 1023u));
    const int tiles = ((p.m + kTile - 1) / kTile) * ((p.n + kTile - 1) / kTile), k_stages = p.k / kStageK;
    const int wg = int(threadIdx.x) / 128, lane = int(threadIdx.x) % 32;
    const unsigned consumer_warps = 4u * unsigned(p.consumers);
    if (threadIdx.x == 0)
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(&r.full[s], 1);
            mbarrier_init(&r.empty[s], consumer_warps);
        }
    __syncthreads();
    const uint32_t bytes = uint32_t(kTile * kStageK) * (p.load_b ? 2u : 1u);
    if (wg == 0) {
        if (threadIdx.x != 0) return;
        uint32_t use = 0;
        for (int t = int(blockIdx.x); t < tiles; t += int(gridDim.x)) {
            int m0, n0;
            tile_origin(p, t, &m0, &n0);
            for (int ks = 0; ks < k_stages; ++ks, ++use) {
                const int slot = int(use % kStages);
                if (use >= kStages) mbarrier_wait(&r.empty[slot], ((use / kStages) - 1) & 1u);
                mbarrier_arrive_expect_tx(&r.full[slot], bytes);
                for (int h = 0; h < kTile / p.box_rows; ++h) {
                    tma_load_2d(r.a[slot] + h * p.box_rows * kStageK, &a_map, ks * kStageK, m0 + h * p.box_rows, &r.full[slot]);
                    if (p.load_b)
                        tma_load_2d(r.b[slot] + h * p.box_rows * kStageK, &b_map, ks * kStageK, n0 + h * p.box_rows, &r.full[slot]);
                }
            }
        }
        return;
    }
    if (wg > p.consumers) return;
    uint32_t use = 0;
    unsigned long long acc = 0;
    for (int t = int(blockIdx.x); t < tiles; t += int(gridDim.x)) {
        for (int ks = 0; ks < k_stages; ++ks, ++use) {
            const int slot = int(use % kStages);
            if (p.waiters == 0 || lane == 0) mbarrier_wait(&r.full[slot], (use / kStages) & 1u);
            __syncwarp();
            acc += r.a[slot][threadIdx.x % 128];  // touch the stage
            if (p.spin_cycles > 0) {
                const long long t0 = clock64();
                while (clock64() - t0 < p.spin_cycles) {
                }
            }
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&r.empty[slot]);
        }
    }
    if (acc == 0xFFFFFFFFFFFFull) *sink = acc;
}

__global__ void copy_kernel(const uint4* in, uint4* out, size_t n) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) out[i] = in[i];
}

CUtensorMap make_map(const void* base, uint64_t inner, uint64_t outer, int box_rows, CUtensorMapL2promotion l2) {
    return cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, base, inner, outer, inner, kStageK, uint32_t(box_rows),
                              CU_TENSOR_MAP_SWIZZLE_128B, l2);
}

template <int kStages>
float run(const uint8_t* a, const uint8_t* b, Params p, CUtensorMapL2promotion l2, unsigned long long* sink, int reps) {
    const CUtensorMap am = make_map(a, p.k, p.m, p.box_rows, l2), bm = make_map(b, p.k, p.n, p.box_rows, l2);
    const int smem = int(sizeof(Ring<kStages>)) + 1024;
    CUDA_CHECK(cudaFuncSetAttribute(stream_kernel<kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int ctas = cuda_multiprocessor_count();
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    stream_kernel<kStages><<<ctas, 384, smem>>>(am, bm, p, sink);
    CUDA_CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) stream_kernel<kStages><<<ctas, 384, smem>>>(am, bm, p, sink);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    CUDA_CHECK(cudaGetLastError());
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1000.0f / float(reps);
}

}  // namespace

int main() {
    const int m = 8192, n = 8192, k = 8192, reps = 5;
    DeviceBuffer<uint8_t> a(size_t(m) * k), b(size_t(n) * k);
    CUDA_CHECK(cudaMemset(a.data(), 1, a.bytes()));
    CUDA_CHECK(cudaMemset(b.data(), 2, b.bytes()));
    DeviceBuffer<unsigned long long> sink(1);
    // the device copy of the same bytes (A → B), for a DRAM reference in this run
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    copy_kernel<<<cuda_multiprocessor_count() * 8, 512>>>(reinterpret_cast<const uint4*>(a.data()), reinterpret_cast<uint4*>(b.data()), a.bytes() / 16);
    CUDA_CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i)
        copy_kernel<<<cuda_multiprocessor_count() * 8, 512>>>(reinterpret_cast<const uint4*>(a.data()), reinterpret_cast<uint4*>(b.data()),
                                                              a.bytes() / 16);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float copy_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&copy_ms, e0, e1));
    const double copy_us = copy_ms * 1000.0 / reps;
    std::printf("device copy of %.0f MB: %.1f us, %.2f TB/s (read + write)\n", a.bytes() / 1e6, copy_us, 2.0 * a.bytes() / copy_us / 1e6);
    std::printf("%-58s %10s %10s %12s\n", "variant (8192^3 tile stream, 128x128 tiles)", "us", "TB/s fill", "vs GEMM full");
    const double tiles = double(m / kTile) * (n / kTile);
    struct Case {
        std::string name;
        Params p;
        int stages;
        CUtensorMapL2promotion l2;
    };
    const Params base{m, n, k, 0, 8, 1, 0, 0, 0, 2, 128};
    std::vector<Case> cases;
    auto add = [&](std::string name, auto edit, int stages = 5, CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B) {
        Params p = base;
        edit(p);
        cases.push_back({std::move(name), p, stages, l2});
    };
    add("GEMM's: 5 stages, group 8, all threads wait", [](Params&) {});
    add("one waiter per warp", [](Params& p) { p.waiters = 1; });
    add("L2 promotion 256B", [](Params&) {}, 5, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    add("6 stages", [](Params&) {}, 6);
    add("3 stages", [](Params&) {}, 3);
    add("group 16", [](Params& p) { p.group = 16; });
    add("group 4", [](Params& p) { p.group = 4; });
    add("raster along N", [](Params& p) { p.order = 1; });
    add("raster along M", [](Params& p) { p.order = 2; });
    add("A only", [](Params& p) { p.load_b = 0; });
    add("same tile everywhere (L2-resident)", [](Params& p) { p.same_tile = 1; });
    add("one consumer warpgroup", [](Params& p) { p.consumers = 1; });
    add("boxes of 64 rows", [](Params& p) { p.box_rows = 64; });
    add("spin 256 cycles per stage", [](Params& p) { p.spin_cycles = 256; });
    add("spin 512 cycles per stage (the MMA's time)", [](Params& p) { p.spin_cycles = 512; });
    add("spin 512, group 16", [](Params& p) { p.spin_cycles = 512; p.group = 16; });
    add("spin 512, one waiter, 256B", [](Params& p) { p.spin_cycles = 512; p.waiters = 1; }, 5, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    add("spin 512, A only", [](Params& p) { p.spin_cycles = 512; p.load_b = 0; });
    const double gemm_full_us = 6013;  // mx_gemm_fp8 v2 at 8192^3 (bench/results/mx_gemm_h200.md ablations)
    for (const Case& c : cases) {
        float us = 0;
        switch (c.stages) {
            case 3: us = run<3>(a.data(), b.data(), c.p, c.l2, sink.data(), reps); break;
            case 6: us = run<6>(a.data(), b.data(), c.p, c.l2, sink.data(), reps); break;
            default: us = run<5>(a.data(), b.data(), c.p, c.l2, sink.data(), reps); break;
        }
        const double bytes = tiles * double(k) * kTile * (c.p.load_b ? 2 : 1);
        std::printf("%-58s %10.1f %10.2f %12.2f\n", c.name.c_str(), us, bytes / us / 1e6, gemm_full_us / us);
        std::fflush(stdout);
    }
    return 0;
}
