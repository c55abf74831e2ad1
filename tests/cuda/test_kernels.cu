// test_kernels.cu — every CUDA kernel of lowbit_cuda against its CPU reference, bit for bit: block Hadamard
// (FP32/BF16), MX quantize/dequantize (every element, scale rule, rounding, both axes, FP32/BF16 input),
// NVFP4, INT grids, and the fused Hadamard+MXFP4 kernel (rows, columns, both), on Gaussian data and on
// adversarial blocks (NaN, ±Inf, zeros, huge, subnormal, blocks scaled by 2^±60, exact rounding ties),
// over odd shapes. Outputs are poisoned with 0xAB before each launch, so unwritten bytes fail.
// Tests that need a GPU skip without one; the CPU-side checks (fast E2M1 encoders on a sample, launcher
// argument errors) run everywhere.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/bits.h"
#include "core/counter_rng.h"
#include "core/random_fill.h"
#include "formats/cuda/e2m1_fast.h"
#include "formats/cuda/int_quantize.cuh"
#include "formats/cuda/mx_quantize.cuh"
#include "formats/cuda/nvfp4_quantize.cuh"
#include "formats/int_grid.h"
#include "formats/mx_block.h"
#include "formats/nvfp4.h"
#include "hadamard/cuda/block_hadamard.cuh"
#include "hadamard/cuda/hadamard_mxfp4.cuh"
#include "hadamard/hadamard.h"

using namespace lowbit;

using namespace lowbit::testing_util;

namespace {

struct Shape {
    int64_t rows, cols;
};
// {288, 40}: down columns a partial stripe of row blocks (288 = 256 + 32) and a partial tile of columns
// (40 = 32 + 8) on the TMA path (cols % 8 == 0); {64, 33} takes the fallback column kernel.
const Shape kShapes[] = {{1, 32}, {3, 96}, {96, 160}, {33, 64}, {257, 512}, {64, 33}, {128, 96}, {288, 40}};

std::string shape_name(Shape s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

// ---------------------------------------------------------------------------------------------------
// BF16 on the host (bit patterns): f32 → bf16 rounds to nearest even (the GPU's __float2bfloat16_rn).

uint16_t f32_to_bf16(float f) {
    const uint32_t u = float_bits(f);
    if (is_nan(f)) return uint16_t((u >> 16) | 0x40u);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
    return h;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& h) {
    std::vector<float> x(h.size());
    for (size_t i = 0; i < h.size(); ++i) x[i] = bf16_to_f32(h[i]);
    return x;
}

// ---------------------------------------------------------------------------------------------------
// Device transfer helpers.

template <typename T>
DeviceBuffer<T> poisoned(size_t count) {
    DeviceBuffer<T> d(count);
    d.fill_bytes(0xAB);
    return d;
}
__nv_bfloat16* bf16_ptr(DeviceBuffer<uint16_t>& d) { return reinterpret_cast<__nv_bfloat16*>(d.data()); }

void sync() { CUDA_CHECK(cudaDeviceSynchronize()); }

// ---------------------------------------------------------------------------------------------------
// Comparisons.

::testing::AssertionResult bytes_equal(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, const std::string& what) {
    if (want.size() != got.size())
        return ::testing::AssertionFailure() << what << ": size " << got.size() << ", expected " << want.size();
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < want.size(); ++i)
        if (want[i] != got[i]) {
            if (first < 0) first = int64_t(i);
            ++bad;
        }
    if (bad == 0) return ::testing::AssertionSuccess();
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: %lld of %zu bytes differ, first at %lld (CPU 0x%02X, GPU 0x%02X)", what.c_str(),
                  (long long)bad, want.size(), (long long)first, want[size_t(first)], got[size_t(first)]);
    return ::testing::AssertionFailure() << buf;
}

bool same_float(float a, float b) { return float_bits(a) == float_bits(b) || (is_nan(a) && is_nan(b)); }

::testing::AssertionResult floats_equal(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
    if (want.size() != got.size())
        return ::testing::AssertionFailure() << what << ": size " << got.size() << ", expected " << want.size();
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < want.size(); ++i)
        if (!same_float(want[i], got[i])) {
            if (first < 0) first = int64_t(i);
            ++bad;
        }
    if (bad == 0) return ::testing::AssertionSuccess();
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s: %lld of %zu values differ, first at %lld (CPU %.9g = 0x%08X, GPU %.9g = 0x%08X)",
                  what.c_str(), (long long)bad, want.size(), (long long)first, double(want[size_t(first)]),
                  float_bits(want[size_t(first)]), double(got[size_t(first)]), float_bits(got[size_t(first)]));
    return ::testing::AssertionFailure() << buf;
}

::testing::AssertionResult bf16_equal(const std::vector<uint16_t>& want, const std::vector<uint16_t>& got, const std::string& what) {
    return floats_equal(from_bf16(want), from_bf16(got), what);
}

// ---------------------------------------------------------------------------------------------------
// Test data.

std::vector<float> gaussian(int64_t rows, int64_t cols, uint64_t seed) {
    std::vector<float> x(size_t(rows * cols));
    fill_gaussian(x.data(), int64_t(x.size()), seed);
    return x;
}

// Row-major index of element i of segment s of line o, segments of `seg` elements along `axis`.
int64_t seg_index(int64_t rows, int64_t cols, int axis, int64_t line, int64_t pos) {
    return axis == 1 ? line * cols + pos : pos * cols + line;
}

// Gaussian data where each aligned segment of `seg` elements along `axis` gets one of these treatments:
// untouched, one NaN, +Inf, −Inf, all ±0, huge (×1e38, partly overflowing to ±Inf), subnormal (×1e-40),
// ×2^60, ×2^-60, exact E2M1/MX ties (values τ·2^k with the block maximum 6·2^k), a dyadic grid with
// pinned extremes (exact INT-grid ties), a single non-zero value, all equal values, ×2^-124..-121 (the
// block maximum so small that elements are subnormal while their scaled codes are not: the range where
// the kernels' scale folding would be inexact) and ×2^123..125 (the largest finite scales). `nonfinite` = false
// leaves out NaN/Inf/huge (NVFP4: one bad value poisons the whole tensor).
std::vector<float> adversarial(int64_t rows, int64_t cols, int axis, int64_t seg, uint64_t seed, bool nonfinite = true) {
    std::vector<float> x = gaussian(rows, cols, seed);
    const int64_t lines = axis == 1 ? rows : cols, len = axis == 1 ? cols : rows;
    const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 3.0f, 6.0f};
    for (int64_t o = 0; o < lines; ++o)
        for (int64_t s0 = 0; s0 + seg <= len; s0 += seg) {
            const uint32_t h = counter_random24(seed ^ 0xADu, uint64_t(o * len + s0));
            int mode = int(h % 16);
            if (!nonfinite && (mode == 1 || mode == 2 || mode == 3 || mode == 5)) mode = 0;
            const int k = int((h >> 8) % 21) - 10;
            auto at = [&](int64_t i) -> float& { return x[size_t(seg_index(rows, cols, axis, o, s0 + i))]; };
            for (int64_t i = 0; i < seg; ++i) {
                const uint32_t r = counter_random24(seed ^ 0x5EEDu, uint64_t(o * len + s0 + i));
                const float sign = (r & 1u) ? -1.0f : 1.0f;
                switch (mode) {
                    case 4: at(i) = (r & 2u) ? -0.0f : 0.0f; break;
                    case 5: at(i) *= 1e38f; break;
                    case 6: at(i) *= 1e-40f; break;
                    case 7: at(i) = std::ldexp(at(i), 60); break;
                    case 8: at(i) = std::ldexp(at(i), -60); break;
                    case 9: at(i) = sign * std::ldexp(ties[(r >> 2) % 11], k); break;
                    case 10: at(i) = sign * 0.5f * float(int((r >> 2) % 16)); break;
                    case 11: at(i) = i == int64_t(h % uint32_t(seg)) ? std::ldexp(1.5f, k) : 0.0f; break;
                    case 12: at(i) = std::ldexp(-1.25f, k); break;
                    case 13: at(i) = std::ldexp(at(i), -124 + int(h >> 16) % 4); break;  // block max near 2^-122: scaled
                                                                                          // elements subnormal, codes not
                    case 14: at(i) = std::ldexp(at(i), 123 + int(h >> 16) % 3); break;   // block max near 2^126: scale 250-252
                    default: break;
                }
            }
            if (mode == 1) at(int64_t(h % uint32_t(seg))) = NAN;
            if (mode == 2) at(int64_t(h % uint32_t(seg))) = INFINITY;
            if (mode == 3) at(int64_t(h % uint32_t(seg))) = -INFINITY;
            if (mode == 9) at(int64_t((h >> 12) % uint32_t(seg))) = std::ldexp(6.0f, k);
            if (mode == 10) {
                at(0) = -7.5f;
                at(seg - 1) = 7.5f;
            }
        }
    return x;
}

// Blocks whose Hadamard output 0 lands exactly on an E2M1 rounding tie τ·2^k after MX scaling (for every
// scale rule): inputs at positions {0, 1, 2, 8, 16} of a 32-block along `axis`: x0 = D, x1 = −D, and
// x2, x8, x16 = the three BF16 pieces of an FP32 t with round(t·hs) = τ·2^k. The butterflies then sum
// output 0 exactly to t, while outputs with odd index carry ≈ 2D + t, which sets the block maximum to
// ≈ 5.5·2^k (scale 2^k under floor, rceil and midmax). Other blocks are Gaussian.
std::vector<float> hadamard_ties(int64_t rows, int64_t cols, int axis, uint64_t seed) {
    std::vector<float> x = gaussian(rows, cols, seed);
    const float hs = hadamard_inv_sqrt(32);
    const float taus[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const int64_t lines = axis == 1 ? rows : cols, len = axis == 1 ? cols : rows;
    auto trunc_bf16 = [](float f) { return bits_float(float_bits(f) & 0xFFFF0000u); };
    for (int64_t o = 0; o < lines; ++o)
        for (int64_t s0 = 0; s0 + 32 <= len; s0 += 32) {
            const uint32_t h = counter_random24(seed ^ 0x7135u, uint64_t(o * len + s0));
            if (h & 1u) continue;
            const float tau = taus[(h >> 1) % 7];
            const int k = int((h >> 4) % 17) - 8;
            const float sign = (h & 0x800000u) ? -1.0f : 1.0f;
            const float y0 = std::ldexp(tau, k);
            const float t0 = float(double(y0) / double(hs));
            float t = t0, up = t0, down = t0;
            bool found = false;
            for (int step = 0; step < 32 && !found; ++step) {  // nearest float t with round(t·hs) == y0
                if (up * hs == y0) {
                    t = up;
                    found = true;
                } else if (down * hs == y0) {
                    t = down;
                    found = true;
                }
                up = std::nextafter(up, INFINITY);
                down = std::nextafter(down, 0.0f);
            }
            if (!found) continue;
            const float p0 = trunc_bf16(t);
            const float r1 = t - p0;
            const float p1 = trunc_bf16(r1);
            const float p2 = r1 - p1;
            if (trunc_bf16(p2) != p2) continue;  // cannot happen for normal t; keep the block Gaussian
            const float d = bf16_to_f32(f32_to_bf16((std::ldexp(5.5f, k) / hs - t) * 0.5f));
            for (int64_t i = 0; i < 32; ++i) x[size_t(seg_index(rows, cols, axis, o, s0 + i))] = 0.0f;
            auto at = [&](int64_t i) -> float& { return x[size_t(seg_index(rows, cols, axis, o, s0 + i))]; };
            at(0) = sign * d;
            at(1) = -sign * d;
            at(2) = sign * p0;
            at(8) = sign * p1;
            at(16) = sign * p2;
        }
    return x;
}

const Rounding kRoundings[] = {Rounding::nearest_even, Rounding::half_away, Rounding::stochastic};
const ScaleRule kRules[] = {ScaleRule::floor, ScaleRule::rceil, ScaleRule::midmax};
const MxElement kElements[] = {MxElement::e2m1, MxElement::e2m3, MxElement::e3m2,
                               MxElement::e4m3, MxElement::e5m2, MxElement::int8};

std::string case_name(const char* what, Shape s, int axis) {
    return std::string(what) + " " + shape_name(s) + " axis " + std::to_string(axis);
}

// ===================================================================================================
// Fast E2M1 encoders (e2m1_fast.h) against encode_element.

TEST(E2m1FastEncoders, MatchReferenceOnHostSample) {
    const ElementSpec s = element_spec(ElementType::e2m1);
    int64_t bad = 0;
    for (uint64_t i = 0; i < (1u << 22); ++i) {
        const uint32_t u = i < 65536 ? uint32_t(i) * 65537u : uint32_t(mix64(i) >> 32);  // structured + random patterns
        const float x = bits_float(u);
        if (is_nan(x)) continue;
        const uint32_t r = (i & 7) == 0 ? 0u : ((i & 7) == 1 ? 0xFFFFFFu : counter_random24(3, i));
        bad += e2m1_encode_rne(x) != encode_element(s, x, Rounding::nearest_even, Overflow::saturate);
        bad += e2m1_encode_away(x) != encode_element(s, x, Rounding::half_away, Overflow::saturate);
        bad += e2m1_encode_stochastic(x, r) != encode_element(s, x, Rounding::stochastic, Overflow::saturate, r);
    }
    EXPECT_EQ(bad, 0);
}

__global__ void e2m1_exhaustive_kernel(uint64_t seed, unsigned long long* mismatches, unsigned int* first_bad) {
    const ElementSpec s = element_spec(ElementType::e2m1);
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
        const float x = bits_float(uint32_t(i));
        if (is_nan(x)) continue;
        const uint32_t r = (i & 7) == 0 ? 0u : ((i & 7) == 1 ? 0xFFFFFFu : counter_random24(seed, i));
        const bool bad = e2m1_encode_rne(x) != encode_element(s, x, Rounding::nearest_even, Overflow::saturate) ||
                         e2m1_encode_away(x) != encode_element(s, x, Rounding::half_away, Overflow::saturate) ||
                         e2m1_encode_stochastic(x, r) != encode_element(s, x, Rounding::stochastic, Overflow::saturate, r);
        if (bad) {
            atomicAdd(mismatches, 1ull);
            atomicMin(first_bad, unsigned(i));
        }
    }
}

TEST(E2m1FastEncoders, ExhaustiveOnDevice) {
    REQUIRE_GPU();
    DeviceBuffer<unsigned long long> count(1);
    DeviceBuffer<unsigned int> first(1);
    count.fill_bytes(0);
    first.fill_bytes(0xFF);
    e2m1_exhaustive_kernel<<<cuda_multiprocessor_count() * 8, 256>>>(12345, count.data(), first.data());
    CUDA_CHECK(cudaGetLastError());
    sync();
    unsigned long long n = 0;
    unsigned int f = 0;
    count.download(&n, 1);
    first.download(&f, 1);
    EXPECT_EQ(n, 0ull) << "first mismatching float bits 0x" << std::hex << f;
}

// ===================================================================================================
// Block Hadamard.

std::vector<float> cpu_hadamard(std::vector<float> x, Shape s, int64_t block, int axis) {
    HadamardOptions o;
    o.block = block;
    o.axis = axis;
    hadamard_transform(x.data(), s.rows, s.cols, o);
    return x;
}

TEST(BlockHadamardCuda, Fp32AndBf16MatchCpu) {
    REQUIRE_GPU();
    const Shape shapes[] = {{1, 256}, {3, 96}, {96, 160}, {33, 64}, {257, 512}, {256, 33}, {512, 257}, {64, 1024}};
    int cases = 0;
    for (Shape s : shapes)
        for (int axis : {1, 0})
            for (int64_t block : {16, 32, 64, 128, 256}) {
                if ((axis == 1 ? s.cols : s.rows) % block != 0) continue;
                for (int data = 0; data < 2; ++data) {
                    const std::string name = case_name("hadamard", s, axis) + " block " + std::to_string(block) + (data ? " adversarial" : " gaussian");
                    SCOPED_TRACE(name);
                    const uint64_t seed = 100 + uint64_t(cases);
                    const std::vector<float> x = data ? adversarial(s.rows, s.cols, axis, 16, seed) : gaussian(s.rows, s.cols, seed);
                    // FP32, out of place and in place
                    const std::vector<float> want = cpu_hadamard(x, s, block, axis);
                    DeviceBuffer<float> in = to_device(x);
                    DeviceBuffer<float> out = poisoned<float>(x.size());
                    block_hadamard_cuda(in.data(), out.data(), s.rows, s.cols, block, axis);
                    sync();
                    EXPECT_TRUE(floats_equal(want, to_host(out), "fp32"));
                    block_hadamard_cuda(in.data(), s.rows, s.cols, block, axis);  // in-place overload
                    sync();
                    EXPECT_TRUE(floats_equal(want, to_host(in), "fp32 in place"));
                    // BF16: bf16 → f32, transform, f32 → bf16 (RNE)
                    const std::vector<uint16_t> xh = to_bf16(x);
                    const std::vector<uint16_t> wanth = to_bf16(cpu_hadamard(from_bf16(xh), s, block, axis));
                    DeviceBuffer<uint16_t> inh = to_device(xh);
                    DeviceBuffer<uint16_t> outh = poisoned<uint16_t>(xh.size());
                    block_hadamard_cuda(bf16_ptr(inh), bf16_ptr(outh), s.rows, s.cols, block, axis);
                    sync();
                    EXPECT_TRUE(bf16_equal(wanth, to_host(outh), "bf16"));
                    block_hadamard_cuda(bf16_ptr(inh), bf16_ptr(inh), s.rows, s.cols, block, axis);  // in == out
                    sync();
                    EXPECT_TRUE(bf16_equal(wanth, to_host(inh), "bf16 in place"));
                    ++cases;
                }
            }
    EXPECT_GT(cases, 40);
}

// ===================================================================================================
// MX quantize / dequantize.

struct MxCpu {
    std::vector<uint8_t> codes, scales;
    std::vector<float> dequant;
};

MxCpu cpu_mx(const std::vector<float>& x, Shape s, MxElement e, ScaleRule rule, const QuantizeOptions& opt) {
    const MxMatrix q = mx_quantize(x.data(), s.rows, s.cols, e, rule, opt);
    MxCpu r;
    r.codes = e == MxElement::e2m1 ? pack_e2m1(q.codes) : q.codes;
    r.scales = q.scales;
    r.dequant.resize(x.size());
    mx_dequantize(q, r.dequant.data());
    return r;
}

void check_mx_case_once(const std::vector<float>& x, Shape s, MxElement e, ScaleRule rule, const QuantizeOptions& opt, bool bf16,
                   bool with_dequant) {
    const std::vector<uint16_t> xh = bf16 ? to_bf16(x) : std::vector<uint16_t>{};
    const std::vector<float> xr = bf16 ? from_bf16(xh) : x;  // what the GPU sees
    const MxCpu want = cpu_mx(xr, s, e, rule, opt);
    DeviceBuffer<uint8_t> codes = poisoned<uint8_t>(size_t(mx_code_bytes(e, s.rows, s.cols)));
    DeviceBuffer<uint8_t> scales = poisoned<uint8_t>(size_t(mx_scale_bytes(s.rows, s.cols)));
    if (bf16) {
        DeviceBuffer<uint16_t> in = to_device(xh);
        mx_quantize_cuda(bf16_ptr(in), s.rows, s.cols, e, rule, opt, codes.data(), scales.data());
    } else {
        DeviceBuffer<float> in = to_device(x);
        mx_quantize_cuda(in.data(), s.rows, s.cols, e, rule, opt, codes.data(), scales.data());
    }
    sync();
    EXPECT_TRUE(bytes_equal(want.codes, to_host(codes), "codes"));
    EXPECT_TRUE(bytes_equal(want.scales, to_host(scales), "scales"));
    if (with_dequant) {
        DeviceBuffer<float> out = poisoned<float>(x.size());
        mx_dequantize_cuda(codes.data(), scales.data(), s.rows, s.cols, e, opt.axis, out.data());
        sync();
        EXPECT_TRUE(floats_equal(want.dequant, to_host(out), "dequantized"));
    }
}

// The case with and without the TMA kernels, so the portable column kernels are checked on the H200 too.
void check_mx_case(const std::vector<float>& x, Shape s, MxElement e, ScaleRule rule, const QuantizeOptions& opt, bool bf16,
                   bool with_dequant) {
    with_and_without_tma([&] { check_mx_case_once(x, s, e, rule, opt, bf16, with_dequant); });
}

TEST(MxQuantizeCuda, EveryElementRuleRoundingAxisMatchesCpu) {
    REQUIRE_GPU();
    int cases = 0;
    for (Shape s : kShapes)
        for (int axis : {1, 0}) {
            if ((axis == 1 ? s.cols : s.rows) % 32 != 0) continue;
            for (int data = 0; data < 2; ++data) {
                const uint64_t seed = 1000 + uint64_t(cases);
                const std::vector<float> x = data ? adversarial(s.rows, s.cols, axis, 32, seed) : gaussian(s.rows, s.cols, seed);
                for (MxElement e : kElements)
                    for (ScaleRule rule : kRules)
                        for (Rounding r : kRoundings)
                            for (bool bf16 : {false, true}) {
                                QuantizeOptions opt;
                                opt.axis = axis;
                                opt.rounding = r;
                                opt.seed = r == Rounding::stochastic ? 77 + uint64_t(cases) : 0;
                                SCOPED_TRACE(case_name(mx_element_name(e), s, axis) + " rule " + scale_rule_name(rule) + " " +
                                             rounding_name(r) + (bf16 ? " bf16" : " fp32") + (data ? " adversarial" : " gaussian"));
                                check_mx_case(x, s, e, rule, opt, bf16, !bf16);
                                ++cases;
                            }
            }
        }
    EXPECT_GT(cases, 1000);
}

TEST(MxQuantizeCuda, LargeBf16Mxfp4BothAxes) {
    REQUIRE_GPU();
    const Shape s{1024, 2048};
    const std::vector<float> x = adversarial(s.rows, s.cols, 1, 32, 4242);
    for (int axis : {1, 0})
        for (Rounding r : kRoundings) {
            QuantizeOptions opt;
            opt.axis = axis;
            opt.rounding = r;
            opt.seed = 99;
            SCOPED_TRACE(case_name("mxfp4", s, axis) + " " + rounding_name(r));
            check_mx_case(x, s, MxElement::e2m1, ScaleRule::rceil, opt, true, true);
        }
}

// ===================================================================================================
// NVFP4.

void check_nvfp4_case(const std::vector<float>& x, Shape s, const QuantizeOptions& opt, bool bf16) {
    const std::vector<uint16_t> xh = bf16 ? to_bf16(x) : std::vector<uint16_t>{};
    const std::vector<float> xr = bf16 ? from_bf16(xh) : x;
    const Nvfp4Matrix q = nvfp4_quantize(xr.data(), s.rows, s.cols, opt);
    std::vector<float> want_deq(x.size());
    nvfp4_dequantize(q, want_deq.data());
    uint32_t want_amax = 0;
    for (float v : xr) want_amax = std::max(want_amax, abs_bits(v));

    DeviceBuffer<uint8_t> codes = poisoned<uint8_t>(x.size() / 2);
    DeviceBuffer<uint8_t> bscales = poisoned<uint8_t>(x.size() / 16);
    DeviceBuffer<float> ts = poisoned<float>(1);
    DeviceBuffer<uint32_t> amax = poisoned<uint32_t>(1);
    Nvfp4DeviceOutput out{codes.data(), bscales.data(), ts.data(), amax.data()};
    if (bf16) {
        DeviceBuffer<uint16_t> in = to_device(xh);
        nvfp4_quantize_cuda(bf16_ptr(in), s.rows, s.cols, opt, out);
    } else {
        DeviceBuffer<float> in = to_device(x);
        nvfp4_quantize_cuda(in.data(), s.rows, s.cols, opt, out);
    }
    sync();
    EXPECT_TRUE(bytes_equal(pack_e2m1(q.codes), to_host(codes), "codes"));
    EXPECT_TRUE(bytes_equal(q.block_scales, to_host(bscales), "block scales"));
    EXPECT_TRUE(floats_equal({q.tensor_scale}, to_host(ts), "tensor scale"));
    EXPECT_EQ(to_host(amax)[0], want_amax);
    DeviceBuffer<float> deq = poisoned<float>(x.size());
    nvfp4_dequantize_cuda(codes.data(), bscales.data(), ts.data(), s.rows, s.cols, opt.axis, deq.data());
    sync();
    EXPECT_TRUE(floats_equal(want_deq, to_host(deq), "dequantized"));
    // the three-pointer form (tensor_scale doubles as the amax scratch)
    DeviceBuffer<uint8_t> codes3 = poisoned<uint8_t>(size_t(nvfp4_code_bytes(s.rows, s.cols)));
    DeviceBuffer<uint8_t> bscales3 = poisoned<uint8_t>(size_t(nvfp4_scale_bytes(s.rows, s.cols)));
    DeviceBuffer<float> ts3 = poisoned<float>(1);
    if (bf16) {
        DeviceBuffer<uint16_t> in = to_device(xh);
        nvfp4_quantize_cuda(bf16_ptr(in), s.rows, s.cols, opt, codes3.data(), bscales3.data(), ts3.data());
    } else {
        DeviceBuffer<float> in = to_device(x);
        nvfp4_quantize_cuda(in.data(), s.rows, s.cols, opt, codes3.data(), bscales3.data(), ts3.data());
    }
    sync();
    EXPECT_TRUE(bytes_equal(pack_e2m1(q.codes), to_host(codes3), "codes (3-pointer form)"));
    EXPECT_TRUE(bytes_equal(q.block_scales, to_host(bscales3), "block scales (3-pointer form)"));
    EXPECT_TRUE(floats_equal({q.tensor_scale}, to_host(ts3), "tensor scale (3-pointer form)"));
}

TEST(Nvfp4QuantizeCuda, MatchesCpu) {
    REQUIRE_GPU();
    const Shape shapes[] = {{1, 16}, {3, 48}, {96, 160}, {33, 64}, {257, 512}, {48, 33}, {16, 16}};
    int cases = 0;
    for (Shape s : shapes)
        for (int axis : {1, 0}) {
            if ((axis == 1 ? s.cols : s.rows) % 16 != 0) continue;
            for (int data = 0; data < 7; ++data) {
                const uint64_t seed = 5000 + uint64_t(cases);
                std::vector<float> x;
                switch (data) {
                    case 0: x = gaussian(s.rows, s.cols, seed); break;
                    case 1: x = adversarial(s.rows, s.cols, axis, 16, seed, false); break;  // finite: zeros, 2^±60, subnormal, ties
                    case 2: x = gaussian(s.rows, s.cols, seed); x[x.size() / 3] = NAN; break;
                    case 3: x = gaussian(s.rows, s.cols, seed); x[x.size() / 2] = -INFINITY; break;
                    case 4: x.assign(size_t(s.rows * s.cols), 0.0f); x[0] = -0.0f; break;
                    case 5: x = gaussian(s.rows, s.cols, seed); for (float& v : x) v *= 1e-40f; break;
                    default: x = gaussian(s.rows, s.cols, seed); for (float& v : x) v *= 1e37f; break;
                }
                for (Rounding r : kRoundings)
                    for (bool bf16 : {false, true}) {
                        QuantizeOptions opt;
                        opt.axis = axis;
                        opt.rounding = r;
                        opt.seed = 31 + uint64_t(cases);
                        SCOPED_TRACE(case_name("nvfp4", s, axis) + " data " + std::to_string(data) + " " + rounding_name(r) +
                                     (bf16 ? " bf16" : " fp32"));
                        check_nvfp4_case(x, s, opt, bf16);
                        ++cases;
                    }
            }
        }
    EXPECT_GT(cases, 100);
}

// ===================================================================================================
// INT grids.

void check_int_case(const std::vector<float>& x, Shape s, const IntGridFormat& f, const QuantizeOptions& opt, bool bf16) {
    const std::vector<uint16_t> xh = bf16 ? to_bf16(x) : std::vector<uint16_t>{};
    const std::vector<float> xr = bf16 ? from_bf16(xh) : x;
    const IntMatrix m = int_quantize(xr.data(), s.rows, s.cols, f, opt);
    std::vector<float> want_deq(x.size());
    int_dequantize(m, want_deq.data());
    DeviceBuffer<uint8_t> q = poisoned<uint8_t>(x.size());
    DeviceBuffer<IntGridParams> params = poisoned<IntGridParams>(m.params.size());
    if (bf16) {
        DeviceBuffer<uint16_t> in = to_device(xh);
        int_quantize_cuda(bf16_ptr(in), s.rows, s.cols, f, opt, q.data(), params.data());
    } else {
        DeviceBuffer<float> in = to_device(x);
        int_quantize_cuda(in.data(), s.rows, s.cols, f, opt, q.data(), params.data());
    }
    sync();
    EXPECT_TRUE(bytes_equal(m.q, to_host(q), "codes"));
    const std::vector<IntGridParams> got = to_host(params);
    std::vector<float> want_p, got_p;
    for (size_t i = 0; i < got.size(); ++i) {
        want_p.push_back(m.params[i].scale);
        want_p.push_back(m.params[i].zero);
        got_p.push_back(got[i].scale);
        got_p.push_back(got[i].zero);
    }
    EXPECT_TRUE(floats_equal(want_p, got_p, "params (scale, zero)"));
    DeviceBuffer<float> deq = poisoned<float>(x.size());
    int_dequantize_cuda(q.data(), params.data(), s.rows, s.cols, f, opt.axis, deq.data());
    sync();
    EXPECT_TRUE(floats_equal(want_deq, to_host(deq), "dequantized"));
}

TEST(IntQuantizeCuda, MatchesCpu) {
    REQUIRE_GPU();
    int cases = 0;
    for (Shape s : kShapes)
        for (int axis : {1, 0}) {
            const int64_t inner = axis == 1 ? s.cols : s.rows;
            for (int64_t group : {int64_t(0), int64_t(32), int64_t(16), int64_t(3)}) {
                if (group != 0 && inner % group != 0) continue;
                for (int data = 0; data < 2; ++data) {
                    const uint64_t seed = 9000 + uint64_t(cases);
                    const std::vector<float> x = data ? adversarial(s.rows, s.cols, axis, 16, seed) : gaussian(s.rows, s.cols, seed);
                    for (int bits : {2, 3, 4, 8})
                        for (bool sym : {false, true})
                            for (Rounding r : kRoundings) {
                                IntGridFormat f;
                                f.bits = bits;
                                f.group = group;
                                f.sym = sym;
                                QuantizeOptions opt;
                                opt.axis = axis;
                                opt.rounding = r;
                                opt.seed = 5 + uint64_t(cases);
                                const bool bf16 = (cases & 1) != 0;
                                SCOPED_TRACE(case_name("int", s, axis) + " bits " + std::to_string(bits) + " group " +
                                             std::to_string(group) + (sym ? " sym " : " asym ") + rounding_name(r) +
                                             (bf16 ? " bf16" : " fp32") + (data ? " adversarial" : " gaussian"));
                                check_int_case(x, s, f, opt, bf16);
                                ++cases;
                            }
                }
            }
        }
    EXPECT_GT(cases, 500);
}

TEST(IntQuantizeCuda, Int4Group128Large) {
    REQUIRE_GPU();
    const Shape s{512, 1024};
    const std::vector<float> x = adversarial(s.rows, s.cols, 1, 16, 777);
    for (int axis : {1, 0})
        for (Rounding r : kRoundings) {
            IntGridFormat f;
            f.bits = 4;
            f.group = 128;
            QuantizeOptions opt;
            opt.axis = axis;
            opt.rounding = r;
            opt.seed = 3;
            SCOPED_TRACE(case_name("int4 g128", s, axis) + " " + rounding_name(r));
            check_int_case(x, s, f, opt, true);
        }
}

// ===================================================================================================
// Fused Hadamard + MXFP4.

struct FusedCpu {
    std::vector<uint8_t> codes, scales;
};
FusedCpu cpu_hadamard_mxfp4(const std::vector<float>& xr, Shape s, int axis, const HadamardMxfp4Options& o) {
    const std::vector<float> y = cpu_hadamard(xr, s, 32, axis);
    QuantizeOptions q;
    q.axis = axis;
    q.rounding = o.rounding;
    q.seed = o.seed;
    const MxMatrix m = mx_quantize(y.data(), s.rows, s.cols, MxElement::e2m1, o.rule, q);
    return {pack_e2m1(m.codes), m.scales};
}

// which: 1 = along rows only, 0 = along columns only, 2 = both in one pass.
void check_fused_case_once(const std::vector<float>& x, Shape s, int which, const HadamardMxfp4Options& o) {
    const std::vector<uint16_t> xh = to_bf16(x);
    const std::vector<float> xr = from_bf16(xh);
    DeviceBuffer<uint16_t> in = to_device(xh);
    const size_t nc = size_t(s.rows * s.cols / 2), ns = size_t(s.rows * s.cols / 32);
    DeviceBuffer<uint8_t> rc, rs, cc, cs;
    Mxfp4DeviceOutput rows_out, cols_out;
    if (which == 1 || which == 2) {
        rc = poisoned<uint8_t>(nc);
        rs = poisoned<uint8_t>(ns);
        rows_out = {rc.data(), rs.data()};
    }
    if (which == 0 || which == 2) {
        cc = poisoned<uint8_t>(nc);
        cs = poisoned<uint8_t>(ns);
        cols_out = {cc.data(), cs.data()};
    }
    hadamard_mxfp4_cuda(bf16_ptr(in), s.rows, s.cols, o, rows_out, cols_out);
    sync();
    if (rows_out.requested()) {
        const FusedCpu want = cpu_hadamard_mxfp4(xr, s, 1, o);
        EXPECT_TRUE(bytes_equal(want.codes, to_host(rc), "along rows: codes"));
        EXPECT_TRUE(bytes_equal(want.scales, to_host(rs), "along rows: scales"));
    }
    if (cols_out.requested()) {
        const FusedCpu want = cpu_hadamard_mxfp4(xr, s, 0, o);
        EXPECT_TRUE(bytes_equal(want.codes, to_host(cc), "along columns: codes"));
        EXPECT_TRUE(bytes_equal(want.scales, to_host(cs), "along columns: scales"));
    }
}

// The case with and without the TMA kernels.
void check_fused_case(const std::vector<float>& x, Shape s, int which, const HadamardMxfp4Options& o) {
    with_and_without_tma([&] { check_fused_case_once(x, s, which, o); });
}

TEST(HadamardMxfp4Cuda, RowsColumnsBothMatchCpu) {
    REQUIRE_GPU();
    const Shape shapes[] = {{1, 32}, {3, 96}, {96, 160}, {33, 64}, {257, 512}, {32, 32}, {64, 96}, {96, 33}, {160, 64}, {288, 40}, {544, 72}, {288, 96}};
    int cases = 0;
    for (Shape s : shapes)
        for (int which : {1, 0, 2}) {
            const bool rows_ok = s.cols % 32 == 0, cols_ok = s.rows % 32 == 0;
            if ((which == 1 && !rows_ok) || (which == 0 && !cols_ok) || (which == 2 && !(rows_ok && cols_ok))) continue;
            for (int data = 0; data < 3; ++data) {
                const uint64_t seed = 20000 + uint64_t(cases);
                const int axis = which == 0 ? 0 : 1;
                const std::vector<float> x = data == 0   ? gaussian(s.rows, s.cols, seed)
                                             : data == 1 ? adversarial(s.rows, s.cols, axis, 32, seed)
                                                         : hadamard_ties(s.rows, s.cols, axis, seed);
                for (ScaleRule rule : kRules)
                    for (Rounding r : kRoundings) {
                        HadamardMxfp4Options o;
                        o.rule = rule;
                        o.rounding = r;
                        o.seed = 11 + uint64_t(cases);
                        SCOPED_TRACE(std::string("hadamard+mxfp4 ") + shape_name(s) +
                                     (which == 2 ? " both" : which == 1 ? " along rows" : " along columns") + " rule " +
                                     scale_rule_name(rule) + " " + rounding_name(r) + " data " + std::to_string(data));
                        check_fused_case(x, s, which, o);
                        ++cases;
                    }
            }
        }
    EXPECT_GT(cases, 150);
}

TEST(HadamardMxfp4Cuda, Large2048x4096) {
    REQUIRE_GPU();
    const Shape s{2048, 4096};
    const std::vector<float> g = gaussian(s.rows, s.cols, 31337);
    const std::vector<float> a = adversarial(s.rows, s.cols, 1, 32, 31338);
    const std::vector<float> t = hadamard_ties(s.rows, s.cols, 0, 31339);
    for (int which : {1, 0, 2})
        for (Rounding r : kRoundings)
            for (int data = 0; data < 3; ++data) {
                HadamardMxfp4Options o;
                o.rule = data == 1 ? ScaleRule::floor : ScaleRule::rceil;
                o.rounding = r;
                o.seed = 2024;
                SCOPED_TRACE(std::string("2048x4096 which ") + std::to_string(which) + " " + rounding_name(r) + " data " +
                             std::to_string(data));
                check_fused_case(data == 0 ? g : data == 1 ? a : t, s, which, o);
            }
}

// The tie construction really produces ties (a guard on the test data itself; CPU only).
TEST(HadamardMxfp4Cuda, TieDataHitsE2m1Ties) {
    const Shape s{64, 256};
    const std::vector<float> x = hadamard_ties(s.rows, s.cols, 1, 5);
    const std::vector<float> xr = from_bf16(to_bf16(x));  // what the GPU sees (the tie blocks are exact BF16)
    const std::vector<float> y = cpu_hadamard(xr, s, 32, 1);
    int ties = 0;
    for (ScaleRule rule : kRules) {
        QuantizeOptions q;
        const MxMatrix m = mx_quantize(y.data(), s.rows, s.cols, MxElement::e2m1, rule, q);
        for (int64_t b = 0; b < s.rows * s.cols / 32; ++b) {
            const float xs = scale_pow2(y[size_t(b * 32)], 127 - int(m.scales[size_t(b)]));
            const float a = std::fabs(xs);
            ties += a == 0.25f || a == 0.75f || a == 1.25f || a == 1.75f || a == 2.5f || a == 3.5f || a == 5.0f;
        }
    }
    EXPECT_GT(ties, 3 * 64 * 8 / 4);  // about half of the 512 blocks, under each of the 3 rules
}

// ===================================================================================================
// Launcher argument checks (no GPU needed: they throw before any CUDA call).

TEST(CudaLaunchers, RejectBadShapesBeforeLaunching) {
    QuantizeOptions opt;
    expect_error(ErrorKind::input, [&] { mx_quantize_cuda((const float*)nullptr, 4, 33, MxElement::e2m1, ScaleRule::floor, opt, nullptr, nullptr); });
    opt.axis = 0;
    expect_error(ErrorKind::input, [&] { mx_quantize_cuda((const float*)nullptr, 33, 64, MxElement::e4m3, ScaleRule::floor, opt, nullptr, nullptr); });
    opt.axis = 2;
    expect_error(ErrorKind::usage, [&] { mx_quantize_cuda((const float*)nullptr, 32, 32, MxElement::e4m3, ScaleRule::floor, opt, nullptr, nullptr); });
    opt.axis = 1;
    expect_error(ErrorKind::input, [&] { nvfp4_quantize_cuda((const float*)nullptr, 4, 24, opt, Nvfp4DeviceOutput{}); });
    IntGridFormat f;
    f.group = 128;
    expect_error(ErrorKind::input, [&] { int_quantize_cuda((const float*)nullptr, 4, 96, f, opt, nullptr, nullptr); });
    f.bits = 9;
    expect_error(ErrorKind::usage, [&] { int_quantize_cuda((const float*)nullptr, 4, 128, f, opt, nullptr, nullptr); });
    expect_error(ErrorKind::usage, [&] { block_hadamard_cuda((const float*)nullptr, nullptr, 4, 96, 48, 1); });
    expect_error(ErrorKind::input, [&] { block_hadamard_cuda((const float*)nullptr, nullptr, 4, 96, 64, 1); });
    HadamardMxfp4Options ho;
    uint8_t dummy = 0;
    expect_error(ErrorKind::input, [&] {
        hadamard_mxfp4_cuda(nullptr, 48, 64, ho, Mxfp4DeviceOutput{}, Mxfp4DeviceOutput{&dummy, &dummy});
    });
    expect_error(ErrorKind::usage, [&] { hadamard_mxfp4_cuda(nullptr, 64, 64, ho, Mxfp4DeviceOutput{}, Mxfp4DeviceOutput{}); });
    // misaligned device pointers are refused with a message (checked before any launch)
    expect_error(ErrorKind::input, [&] {
        hadamard_mxfp4_cuda(reinterpret_cast<const __nv_bfloat16*>(reinterpret_cast<uintptr_t>(&dummy) | 1), 64, 64, ho,
                            Mxfp4DeviceOutput{&dummy, &dummy}, Mxfp4DeviceOutput{});
    });
}

}  // namespace
