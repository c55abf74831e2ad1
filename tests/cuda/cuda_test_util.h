// cuda_test_util.h — what the GPU test suites share: the skip-without-GPU guard, host↔device copies of
// std::vectors (whole buffers or their first n elements), the check that a call throws a given Error,
// running a check with the TMA kernels allowed and switched off; and for the kernel suites (formats/,
// hadamard/) odd shapes, BF16 bit patterns on the host, poisoned device outputs, bit-exact comparisons with
// a message naming the first difference, and the Gaussian, adversarial and rounding-tie test data.
#pragma once

#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/bits.h"
#include "core/random_fill.h"
#include "formats/mx_block.h"
#include "hadamard/hadamard.h"

namespace lowbit::testing_util {

inline bool have_gpu() {
    static const bool ok = cuda_device_available();
    return ok;
}

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& v) {
    DeviceBuffer<T> d(v.size());
    d.upload(v.data(), v.size());
    return d;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer<T>& d) {
    std::vector<T> v(d.size());
    d.download(v.data(), v.size());
    return v;
}

// The first n elements of a device buffer.
template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d, size_t n) {
    std::vector<T> v(n);
    d.download(v.data(), n);
    return v;
}

// f() must throw Error of this kind with a message that says something.
template <typename F>
void expect_error(ErrorKind kind, F&& f) {
    try {
        f();
        ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
        EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
        EXPECT_GT(std::strlen(e.what()), 20u);
    }
}

// Runs f() with the TMA kernels allowed and then switched off (cuda_set_tma_allowed, process-wide), so a check
// covers both the sm_90 kernels and the portable ones on the same GPU; leaves them allowed.
template <typename F>
void with_and_without_tma(F&& f) {
    for (bool tma : {true, false}) {
        SCOPED_TRACE(tma ? "TMA kernels allowed" : "TMA kernels off");
        cuda_set_tma_allowed(tma);
        f();
    }
    cuda_set_tma_allowed(true);
}

struct Shape {
    int64_t rows, cols;
};
// {288, 40}: down columns a partial stripe of row blocks (288 = 256 + 32) and a partial tile of columns
// (40 = 32 + 8) on the TMA path (cols % 8 == 0); {64, 33} takes the fallback column kernel.
inline const Shape kShapes[] = {{1, 32}, {3, 96}, {96, 160}, {33, 64}, {257, 512}, {64, 33}, {128, 96}, {288, 40}};

inline std::string shape_name(Shape s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

// ---------------------------------------------------------------------------------------------------
// BF16 on the host (bit patterns): f32 → bf16 rounds to nearest even (the GPU's __float2bfloat16_rn).

inline uint16_t f32_to_bf16(float f) {
    const uint32_t u = float_bits(f);
    if (is_nan(f)) return uint16_t((u >> 16) | 0x40u);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
    return h;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& h) {
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

inline void device_sync() { CUDA_CHECK(cudaDeviceSynchronize()); }

// ---------------------------------------------------------------------------------------------------
// Comparisons.

inline ::testing::AssertionResult bytes_equal(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, const std::string& what) {
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

inline bool same_float(float a, float b) { return float_bits(a) == float_bits(b) || (is_nan(a) && is_nan(b)); }

inline ::testing::AssertionResult floats_equal(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
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

inline ::testing::AssertionResult bf16_equal(const std::vector<uint16_t>& want, const std::vector<uint16_t>& got, const std::string& what) {
    return floats_equal(from_bf16(want), from_bf16(got), what);
}

// ---------------------------------------------------------------------------------------------------
// Test data.

// n standard-normal values (core/random_fill.h's stream for `seed`) times `scale`.
inline std::vector<float> gaussian_vector(int64_t n, uint64_t seed, float scale = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    fill_gaussian(v.data(), n, seed);
    for (float& x : v) x *= scale;
    return v;
}

inline std::vector<float> gaussian(int64_t rows, int64_t cols, uint64_t seed) {
    std::vector<float> x(size_t(rows * cols));
    fill_gaussian(x.data(), int64_t(x.size()), seed);
    return x;
}

// Row-major index of element i of segment s of line o, segments of `seg` elements along `axis`.
inline int64_t seg_index(int64_t rows, int64_t cols, int axis, int64_t line, int64_t pos) {
    return axis == 1 ? line * cols + pos : pos * cols + line;
}

// Gaussian data where each aligned segment of `seg` elements along `axis` gets one of these treatments:
// untouched, one NaN, +Inf, −Inf, all ±0, huge (×1e38, partly overflowing to ±Inf), subnormal (×1e-40),
// ×2^60, ×2^-60, exact E2M1/MX ties (values τ·2^k with the block maximum 6·2^k), a dyadic grid with
// pinned extremes (exact INT-grid ties), a single non-zero value, all equal values, ×2^-124..-121 (the
// block maximum so small that elements are subnormal while their scaled codes are not: the range where
// the kernels' scale folding would be inexact) and ×2^123..125 (the largest finite scales). `nonfinite` = false
// leaves out NaN/Inf/huge (NVFP4: one bad value poisons the whole tensor).
inline std::vector<float> adversarial(int64_t rows, int64_t cols, int axis, int64_t seg, uint64_t seed, bool nonfinite = true) {
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
inline std::vector<float> hadamard_ties(int64_t rows, int64_t cols, int axis, uint64_t seed) {
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

inline const Rounding kRoundings[] = {Rounding::nearest_even, Rounding::half_away, Rounding::stochastic};
inline const ScaleRule kRules[] = {ScaleRule::floor, ScaleRule::rceil, ScaleRule::midmax};
inline const MxElement kElements[] = {MxElement::e2m1, MxElement::e2m3, MxElement::e3m2,
                                      MxElement::e4m3, MxElement::e5m2, MxElement::int8};

// The CPU reference of the block Hadamard kernels: hadamard_transform (in place) of a copy of x.
inline std::vector<float> cpu_hadamard(std::vector<float> x, Shape s, int64_t block, int axis) {
    HadamardOptions o;
    o.block = block;
    o.axis = axis;
    hadamard_transform(x.data(), s.rows, s.cols, o);
    return x;
}

inline std::string case_name(const char* what, Shape s, int axis) {
    return std::string(what) + " " + shape_name(s) + " axis " + std::to_string(axis);
}
}  // namespace lowbit::testing_util

#define REQUIRE_GPU() \
    if (!::lowbit::testing_util::have_gpu()) GTEST_SKIP() << "no CUDA device"
