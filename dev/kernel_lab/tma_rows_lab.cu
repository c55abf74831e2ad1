// tma_rows_lab.cu — kernel lab: the fused Hadamard+MXFP4 axis-1 kernel fed by TMA bulk copies (cp.async.bulk
// into a shared-memory ring, one producer thread, mbarriers) instead of per-thread global loads. Checks every
// variant byte for byte against hadamard_mxfp4_cuda (itself tested against the CPU reference) and times it
// next to cudaMemcpy D2D and the production kernel. CMake target tma_rows_lab (dev/CMakeLists.txt); run the
// binary on the GPU machine.
//
// Shared-memory reads: thread t owns block t of a stage (64 bytes). Reading chunk m of every block at once
// would be a 4-way bank conflict (8 lanes of a phase hit 2 distinct 16-byte slots), so thread t reads chunk
// m ^ s_t into register slot m, s_t = (t >> 1) & 3 (8 distinct slots per phase). The Hadamard stages over
// chunk bits (h = 8, 16) then pair the right values but with the halves swapped when s_t has the bit:
// lower = P + Q stays fl(lo + hi), upper = fma(P, −1, Q) = fl(lo − hi) — the reference's operations exactly.
// The code words come out in slot order and are permuted back (8 selects) before the 16-byte store.
//
// Measured (H200, bench/results/history.jsonl): every variant bit-exact on all six cases;
// 0.66–0.76 of copy bandwidth (tile 256, 2 stages, 4 CTAs per SM best) against 0.84 for the production
// kernel in the same run. Deeper rings did not help: the production kernel is limited by issue and latency
// of its arithmetic, not by load latency, and the producer warp and the 56-register consumers leave 32
// warps per SM instead of 40.
#include "core/cuda_device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/random_fill.h"
#include "formats/cuda/mx_kernels.cuh"
#include "hadamard/cuda/hadamard_mxfp4.cuh"
#include "hadamard/hadamard.h"

using namespace lowbit;
using namespace lowbit::cuda_detail;

namespace {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
    asm volatile(
        "{\n\t.reg .pred p;\n"
        "LAB_WAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
        "@!p bra LAB_WAIT_%=;\n}" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

template <int kTile, int kStages, int kMinCtas, Rounding R>
__global__ void __launch_bounds__(kTile + 32, kMinCtas)
    tma_rows_kernel(const __nv_bfloat16* __restrict__ x, int64_t nblocks, ScaleRule rule, MxScaleRuleBits rb, float hs,
                    uint8_t* __restrict__ codes, uint8_t* __restrict__ scales) {
    extern __shared__ __align__(128) uint8_t ring[];  // kStages × kTile × 64 bytes
    __shared__ uint64_t full[kStages], empty[kStages];
    const int tid = threadIdx.x;
    const int64_t ntiles = (nblocks + kTile - 1) / kTile;
    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kTile);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (tid >= kTile) {  // producer warp: one thread keeps kStages tiles in flight
        if (tid == kTile) {
            int s = 0;
            unsigned phase = 0;
            int64_t i = 0;
            for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x, ++i) {
                if (i >= kStages) mbar_wait(&empty[s], phase ^ 1u);
                const int64_t b0 = tile * kTile;
                const unsigned nb = unsigned(nblocks - b0 < kTile ? nblocks - b0 : kTile);
                mbar_arrive_expect_tx(&full[s], nb * 64u);
                bulk_copy_g2s(ring + size_t(s) * kTile * 64, x + b0 * 32, nb * 64u, &full[s]);
                if (++s == kStages) {
                    s = 0;
                    phase ^= 1u;
                }
            }
        }
        return;
    }
    const unsigned sw = (unsigned(tid) >> 1) & 3u;  // slot m holds chunk m ^ sw
    const float sig1 = (sw & 1u) ? -1.0f : 1.0f, sig2 = (sw & 2u) ? -1.0f : 1.0f;
    const RandomStream rs(0);
    int s = 0;
    unsigned phase = 0;
    for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        mbar_wait(&full[s], phase);
        const uint8_t* st = ring + size_t(s) * kTile * 64 + tid * 64;
        float v[32];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const uint4 u = *reinterpret_cast<const uint4*>(st + 16 * (m ^ int(sw)));
            bf16x2_to_float(u.x, v[8 * m + 0], v[8 * m + 1]);
            bf16x2_to_float(u.y, v[8 * m + 2], v[8 * m + 3]);
            bf16x2_to_float(u.z, v[8 * m + 4], v[8 * m + 5]);
            bf16x2_to_float(u.w, v[8 * m + 6], v[8 * m + 7]);
        }
        mbar_arrive(&empty[s]);
        if (++s == kStages) {
            s = 0;
            phase ^= 1u;
        }
        const int64_t blk = tile * kTile + tid;
        if (blk >= nblocks) continue;
        // stages h = 1, 2, 4 inside each chunk: as the reference
#pragma unroll
        for (int m = 0; m < 4; ++m) fwht_unnormalized<8>(&v[8 * m]);
        // h = 8 (chunk bit 0) and h = 16 (chunk bit 1), halves swapped where sw has the bit
#pragma unroll
        for (int b = 1; b <= 2; b <<= 1) {
            const float sig = b == 1 ? sig1 : sig2;
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                if (m & b) continue;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float P = v[8 * m + j], Q = v[8 * (m | b) + j];
                    v[8 * m + j] = __fmaf_rn(P, sig, Q);
                    v[8 * (m | b) + j] = __fmaf_rn(Q, -sig, P);
                }
            }
        }
        const MxBlockScale q = mx_block_scale<true, true>(block_amax32(v), rb, MxElement::e2m1, rule, hs);
        scales[blk] = uint8_t(q.scale);
        uint32_t w[4][2];
        mx_block32_codes<true, true, R>(v, q, hs, MxElement::e2m1, R, rs, 0, 1, w);
        // w[m][0] is the word of output chunk m ^ sw: permute back
        const bool x1 = sw & 1u, x2 = sw & 2u;
        const uint32_t a0 = x1 ? w[1][0] : w[0][0], a1 = x1 ? w[0][0] : w[1][0];
        const uint32_t a2 = x1 ? w[3][0] : w[2][0], a3 = x1 ? w[2][0] : w[3][0];
        const uint4 out = make_uint4(x2 ? a2 : a0, x2 ? a3 : a1, x2 ? a0 : a2, x2 ? a1 : a3);
        reinterpret_cast<uint4*>(codes)[blk] = out;
    }
}

struct Variant {
    const char* name;
    void (*launch)(const __nv_bfloat16*, int64_t, ScaleRule, MxScaleRuleBits, float, uint8_t*, uint8_t*);
};

template <int kTile, int kStages, int kMinCtas, Rounding R>
void launch_tma(const __nv_bfloat16* x, int64_t nblocks, ScaleRule rule, MxScaleRuleBits rb, float hs, uint8_t* codes, uint8_t* scales) {
    auto k = tma_rows_kernel<kTile, kStages, kMinCtas, R>;
    const int smem = kStages * kTile * 64;
    cuda_allow_dynamic_shared_memory(reinterpret_cast<const void*>(k), smem);
    static bool set = false;
    if (!set) {
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kTile + 32, smem));
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, k));
        std::printf("  [tile %d stages %d mincta %d: %d regs, %d CTAs/SM resident]\n", kTile, kStages, kMinCtas, fa.numRegs, per_sm);
        set = true;
    }
    const int64_t ntiles = (nblocks + kTile - 1) / kTile;
    const int64_t cap = int64_t(cuda_multiprocessor_count()) * kMinCtas;
    k<<<unsigned(std::min(ntiles, cap)), kTile + 32, smem>>>(x, nblocks, rule, rb, hs, codes, scales);
    CUDA_CHECK(cudaGetLastError());
}

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace

int main() {
    constexpr Rounding RNE = Rounding::nearest_even;
    const std::vector<Variant> variants = {
        {"tile256 st2 cta4", launch_tma<256, 2, 4, RNE>},  {"tile256 st3 cta4", launch_tma<256, 3, 4, RNE>},
        {"tile256 st4 cta3", launch_tma<256, 4, 3, RNE>},  {"tile128 st4 cta6", launch_tma<128, 4, 6, RNE>},
        {"tile128 st3 cta8", launch_tma<128, 3, 8, RNE>},  {"tile512 st2 cta2", launch_tma<512, 2, 2, RNE>},
        {"tile256 st3 cta3", launch_tma<256, 3, 3, RNE>},
    };
    const ScaleRule rule = kDefaultScaleRule;
    const MxScaleRuleBits rb = mx_scale_rule_bits(mx_spec(MxElement::e2m1), rule);
    const float hs = hadamard_inv_sqrt(32);

    // ---- correctness: several shapes and inputs, byte for byte against hadamard_mxfp4_cuda
    struct Case { int64_t rows, cols; int kind; };
    const Case cases[] = {{8192, 8192, 0}, {1000, 96, 0}, {777, 32, 1}, {4096, 2048, 1}, {3, 4096, 2}, {8191, 160, 1}};
    int failures = 0;
    for (const Case& c : cases) {
        const int64_t n = c.rows * c.cols;
        std::vector<uint16_t> h(static_cast<size_t>(n));
        std::vector<float> f(static_cast<size_t>(n));
        fill_gaussian(f.data(), n, 1234 + uint64_t(c.kind));
        uint64_t st = 99 + uint64_t(n);
        for (int64_t i = 0; i < n; ++i) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const uint16_t r = uint16_t(st >> 48);
            if (c.kind == 0) h[size_t(i)] = f32_to_bf16(f[size_t(i)]);
            else if (c.kind == 1) h[size_t(i)] = r;  // every bit pattern: NaN, Inf, subnormals, huge, tiny
            else h[size_t(i)] = (i / 32) % 3 == 0 ? uint16_t(0) : ((i / 32) % 3 == 1 ? uint16_t(r & 0x807F) : f32_to_bf16(f[size_t(i)] * 1e30f));
        }
        uint16_t* dx;
        uint8_t *c0, *s0, *c1, *s1;
        CUDA_CHECK(cudaMalloc(&dx, size_t(n) * 2));
        CUDA_CHECK(cudaMalloc(&c0, size_t(n / 2)));
        CUDA_CHECK(cudaMalloc(&c1, size_t(n / 2)));
        CUDA_CHECK(cudaMalloc(&s0, size_t(n / 32)));
        CUDA_CHECK(cudaMalloc(&s1, size_t(n / 32)));
        CUDA_CHECK(cudaMemcpy(dx, h.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
        const auto* x = reinterpret_cast<const __nv_bfloat16*>(dx);
        HadamardMxfp4Options opt;
        Mxfp4DeviceCodes o;
        o.codes = c0;
        o.scales = s0;
        hadamard_mxfp4_cuda(x, c.rows, c.cols, opt, o, Mxfp4DeviceCodes{});
        std::vector<uint8_t> rc(size_t(n / 2)), rs(size_t(n / 32)), tc(size_t(n / 2)), ts(size_t(n / 32));
        CUDA_CHECK(cudaMemcpy(rc.data(), c0, rc.size(), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(rs.data(), s0, rs.size(), cudaMemcpyDeviceToHost));
        for (const Variant& v : variants) {
            CUDA_CHECK(cudaMemset(c1, 0xAB, size_t(n / 2)));
            CUDA_CHECK(cudaMemset(s1, 0xAB, size_t(n / 32)));
            v.launch(x, n / 32, rule, rb, hs, c1, s1);
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaMemcpy(tc.data(), c1, tc.size(), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(ts.data(), s1, ts.size(), cudaMemcpyDeviceToHost));
            int64_t bad = 0;
            for (size_t i = 0; i < tc.size(); ++i) bad += tc[i] != rc[i];
            for (size_t i = 0; i < ts.size(); ++i) bad += ts[i] != rs[i];
            if (bad) ++failures;
            std::printf("check %-18s %5lldx%-5lld kind %d: %s (%lld bytes differ)\n", v.name, (long long)c.rows, (long long)c.cols, c.kind,
                        bad ? "MISMATCH" : "exact", (long long)bad);
        }
        cudaFree(dx); cudaFree(c0); cudaFree(c1); cudaFree(s0); cudaFree(s1);
    }

    // ---- timing at 8192², 3 rotating inputs
    const int64_t N = 8192, n = N * N;
    const int kIn = 3;
    std::vector<uint16_t*> in(kIn);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::vector<float> f(static_cast<size_t>(n));
    for (int w = 0; w < kIn; ++w) {
        fill_gaussian(f.data(), n, 7 + uint64_t(w));
        for (int64_t i = 0; i < n; ++i) h[size_t(i)] = f32_to_bf16(f[size_t(i)]);
        CUDA_CHECK(cudaMalloc(&in[size_t(w)], size_t(n) * 2));
        CUDA_CHECK(cudaMemcpy(in[size_t(w)], h.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
    }
    uint16_t* cp;
    uint8_t *codes, *scales;
    CUDA_CHECK(cudaMalloc(&cp, size_t(n) * 2));
    CUDA_CHECK(cudaMalloc(&codes, size_t(n / 2)));
    CUDA_CHECK(cudaMalloc(&scales, size_t(n / 32)));
    auto x_of = [&](int w) { return reinterpret_cast<const __nv_bfloat16*>(in[size_t(w)]); };
    auto time_us = [&](auto&& fn) {
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        std::vector<float> t;
        for (int r = 0; r < 5; ++r) fn(r % kIn);
        for (int r = 0; r < 40; ++r) {
            cudaEventRecord(a);
            fn(r % kIn);
            cudaEventRecord(b);
            cudaEventSynchronize(b);
            float ms;
            cudaEventElapsedTime(&ms, a, b);
            t.push_back(ms * 1000.0f);
        }
        std::sort(t.begin(), t.end());
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        return double(t[t.size() / 2]);
    };
    const double fused_bytes = double(n) * (2 + 0.5 + 1.0 / 32);
    for (int round = 0; round < 2; ++round) {
        const double copy_us = time_us([&](int w) { CUDA_CHECK(cudaMemcpyAsync(cp, in[size_t(w)], size_t(n) * 2, cudaMemcpyDeviceToDevice)); });
        const double copy_gbps = 4.0 * double(n) / copy_us / 1e3;
        std::printf("round %d: memcpy D2D %.1f us = %.0f GB/s\n", round, copy_us, copy_gbps);
        auto report = [&](const char* name, double us) {
            const double gbps = fused_bytes / us / 1e3;
            std::printf("  %-22s %7.1f us %7.0f GB/s  %.3f of copy\n", name, us, gbps, gbps / copy_gbps);
        };
        report("production axis 1", time_us([&](int w) {
                   HadamardMxfp4Options opt;
                   Mxfp4DeviceCodes o;
                   o.codes = codes;
                   o.scales = scales;
                   hadamard_mxfp4_cuda(x_of(w), N, N, opt, o, Mxfp4DeviceCodes{});
               }));
        for (const Variant& v : variants) report(v.name, time_us([&](int w) { v.launch(x_of(w), n / 32, rule, rb, hs, codes, scales); }));
    }
    std::printf("failures: %d\n", failures);
    return failures ? 1 : 0;
}
