// test_cuda_train_ops.cu — the CUDA training engine's element-wise and row-wise ops (train/cuda/train_ops_cuda.cuh)
// against their CPU references (train/backward_cpu.h, model/forward_cpu.h, train/optimizer.h) on random data:
// RMSNorm forward and backward (the backward fed the forward's saved r; odd d, rows = 1, partial row chunks, each
// variant of the tiled backward, unaligned x, a row long enough for the fallback with opted-in shared memory),
// RoPE both pairings and directions (bit-exact, aligned and unaligned, the 8-pair path with partial CTAs and
// many heads), SwiGLU forward and backward (in place too), cross entropy up to a 65536 vocabulary (float4 and
// scalar rows) with confident and masked rows, and its mean through
// sum_to_double_cuda, the FP64 sums, the embedding backward (bit-exact) and its plan, and AdamW over three steps
// against AdamW::step (bit-exact, vector and element paths). Ops with a
// reduction run twice and must give the same bytes. Every tolerance is the bound of train_ops_cuda.cu's
// rounding contract (with a factor 2 of margin where stated), printed next to the observed worst case. The
// argument checks run without a GPU; everything else skips without one.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "core/counter_rng.h"
#include "core/random_fill.h"
#include "model/forward_cpu.h"
#include "train/backward_cpu.h"
#include "../train_test_util.h"
#include "train/cuda/train_ops_cuda.cuh"
#include "train/optimizer.h"
#include "train/param_layout.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

constexpr double kU = 0x1p-24;  // FP32 unit roundoff

// The values a BF16 tensor holds (x rounded to nearest even).
std::vector<float> bf16_values(const std::vector<float>& x) { return from_bf16(to_bf16(x)); }

const __nv_bfloat16* cbf16(const DeviceBuffer<uint16_t>& d) { return reinterpret_cast<const __nv_bfloat16*>(d.data()); }

// |got − want| ≤ bound[i] for every element: prints the worst ratio error/bound and how many are bit-equal.
void expect_within(const std::string& what, const std::vector<double>& want, const std::vector<double>& got,
                   const std::vector<double>& bound) {
    ASSERT_EQ(want.size(), got.size()) << what;
    ASSERT_EQ(want.size(), bound.size()) << what;
    double worst = 0;
    int64_t worst_i = 0, equal = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (want[i] == got[i] || (std::isnan(want[i]) && std::isnan(got[i]))) {
            ++equal;
            continue;
        }
        const double ratio = std::fabs(got[i] - want[i]) / bound[i];
        if (!(ratio <= worst)) {  // NaN counts as the worst
            worst = std::isnan(ratio) ? INFINITY : ratio;
            worst_i = int64_t(i);
        }
    }
    std::printf("    %-52s worst |err|/bound %.3f, %lld of %zu equal\n", what.c_str(), worst, (long long)equal, want.size());
    EXPECT_LE(worst, 1.0) << what << ": element " << worst_i << " CPU " << want[size_t(worst_i)] << " GPU "
                          << got[size_t(worst_i)] << " bound " << bound[size_t(worst_i)];
}

template <typename T>
std::vector<double> as_double(const std::vector<T>& v) {
    return std::vector<double>(v.begin(), v.end());
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}

// ---------------------------------------------------------------------------------------------------
// RMSNorm

struct NormCase {
    int64_t rows, d;
};
// odd d, rows = 1, d = 1; rows that end in a partial 32-row chunk (100, 200). The backward's tiled kernel: 4-column
// units (d % 4 == 0: 64, 100 — a partial warp —, 768, 3000 with 2 units a thread, 8192 with 4 and no prefetch) and
// 1-column ones (1, 33, 50, 1001 with 2 units a thread, 1999 with 4); d = 20001 takes the fallback kernel with
// 160 KB of opted-in shared memory.
const NormCase kNormCases[] = {{1, 64},    {3, 1},    {7, 33},   {64, 768}, {100, 768}, {37, 100},
                               {9, 50},    {200, 1001}, {4, 1999}, {6, 3000}, {5, 8192},  {3, 20001}};
constexpr float kEps = 1e-5f;

// x with row magnitudes 2^-3 … 2^3, and a gain around 1.
std::vector<float> norm_input(NormCase c, uint64_t seed) {
    std::vector<float> x = gaussian_vector(c.rows * c.d, seed);
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t i = 0; i < c.d; ++i) x[size_t(r * c.d + i)] = std::ldexp(x[size_t(r * c.d + i)], int(r % 7) - 3);
    return x;
}
std::vector<float> norm_gain(int64_t d, uint64_t seed) {
    std::vector<float> w = gaussian_vector(d, seed, 0.5f);
    for (float& v : w) v += 1.0f;
    return w;
}

std::string norm_name(const char* what, NormCase c) {
    return std::string(what) + " " + std::to_string(c.rows) + "x" + std::to_string(c.d);
}

TEST(CudaTrainOps, RmsNormForwardMatchesTheCpu) {
    REQUIRE_GPU();
    for (const NormCase c : kNormCases) {
        const std::vector<float> x = norm_input(c, 11), w = norm_gain(c.d, 12);
        std::vector<float> y_cpu(x.size());
        rms_norm_rows(x.data(), w.data(), c.rows, c.d, kEps, y_cpu.data());
        std::vector<float> inv_cpu(size_t(c.rows));
        for (int64_t r = 0; r < c.rows; ++r) {  // rms_norm_rows' r
            double ss = 0;
            for (int64_t i = 0; i < c.d; ++i) ss += double(x[size_t(r * c.d + i)]) * double(x[size_t(r * c.d + i)]);
            inv_cpu[size_t(r)] = float(1.0 / std::sqrt(ss / double(c.d) + double(kEps)));
        }
        DeviceBuffer<float> dx = to_device(x), dw = to_device(w), inv = poisoned<float>(size_t(c.rows));
        DeviceBuffer<uint16_t> y = poisoned<uint16_t>(x.size());
        rms_norm_forward_cuda(dx.data(), dw.data(), c.rows, c.d, kEps, bf16_ptr(y), inv.data());
        device_sync();
        const std::vector<float> inv_gpu = to_host(inv);
        const std::vector<uint16_t> y_gpu = to_host(y), y_want = to_bf16(y_cpu);
        // r: the FP64 sums differ in order only: within 1 ulp. y: where r is bit-equal, y is bf16 of the CPU's y
        // exactly; elsewhere within one BF16 rounding plus 2 FP32 ulps.
        std::vector<double> bound_inv(inv_cpu.size()), bound_y(y_cpu.size());
        for (size_t r = 0; r < inv_cpu.size(); ++r) bound_inv[r] = 2 * kU * inv_cpu[r];
        for (size_t i = 0; i < y_cpu.size(); ++i) bound_y[i] = (0x1p-8 + 0x1p-21) * std::fabs(y_cpu[i]) + 1e-38;
        expect_within(norm_name("rms forward r", c), as_double(inv_cpu), as_double(inv_gpu), bound_inv);
        expect_within(norm_name("rms forward y", c), as_double(y_cpu), as_double(from_bf16(y_gpu)), bound_y);
        for (int64_t r = 0; r < c.rows; ++r)
            if (float_bits(inv_gpu[size_t(r)]) == float_bits(inv_cpu[size_t(r)]))
                for (int64_t i = 0; i < c.d; ++i)
                    ASSERT_EQ(y_gpu[size_t(r * c.d + i)], y_want[size_t(r * c.d + i)]) << norm_name("y", c) << " row " << r;
        // With the residual stream's copy: the same y and r, and the copy is x bit for bit.
        DeviceBuffer<float> copy = poisoned<float>(x.size()), inv2 = poisoned<float>(size_t(c.rows));
        DeviceBuffer<uint16_t> y2 = poisoned<uint16_t>(x.size());
        rms_norm_forward_cuda(dx.data(), dw.data(), c.rows, c.d, kEps, bf16_ptr(y2), inv2.data(), 0, copy.data());
        device_sync();
        EXPECT_EQ(to_host(y2), y_gpu) << norm_name("y with copy", c);
        const std::vector<float> copied = to_host(copy), inv2_gpu = to_host(inv2);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(float_bits(copied[i]), float_bits(x[i])) << norm_name("copy", c) << " at " << i;
        for (size_t r = 0; r < inv_gpu.size(); ++r) ASSERT_EQ(float_bits(inv2_gpu[r]), float_bits(inv_gpu[r]));
    }
}

TEST(CudaTrainOps, RmsNormBackwardMatchesTheCpuAndIsDeterministic) {
    REQUIRE_GPU();
    for (const NormCase c : kNormCases) {
        const std::vector<float> x = norm_input(c, 21), w = norm_gain(c.d, 22), dy = gaussian_vector(c.rows * c.d, 23);
        const std::vector<float> dx0 = gaussian_vector(c.rows * c.d, 24, 0.1f), dw0 = gaussian_vector(c.d, 25);
        std::vector<float> dx_cpu = dx0, dw_cpu = dw0;
        rms_norm_backward_rows(x.data(), w.data(), dy.data(), c.rows, c.d, kEps, dx_cpu.data(), dw_cpu.data());

        // Bounds of the rounding contract, doubled: |Δdx| ≤ 16u·(|a| + |b|) + 4u·|dx|, |Δdw| ≤ 6u·Σ|dy·x·r| + 4u·|dw|.
        std::vector<double> bound_dx(dx_cpu.size()), gain_terms(size_t(c.d), 0.0), bound_dw(size_t(c.d));
        for (int64_t r = 0; r < c.rows; ++r) {
            double ss = 0, dot = 0;
            for (int64_t i = 0; i < c.d; ++i) {
                const size_t k = size_t(r * c.d + i);
                ss += double(x[k]) * double(x[k]);
                dot += double(dy[k]) * double(w[size_t(i)]) * double(x[k]);
            }
            const double ri = 1.0 / std::sqrt(ss / double(c.d) + double(kEps)), coef = ri * ri * ri * dot / double(c.d);
            for (int64_t i = 0; i < c.d; ++i) {
                const size_t k = size_t(r * c.d + i);
                bound_dx[k] = 16 * kU * (std::fabs(ri * dy[k] * w[size_t(i)]) + std::fabs(coef * x[k])) +
                              4 * kU * std::fabs(dx_cpu[k]) + 1e-38;
                gain_terms[size_t(i)] += std::fabs(double(dy[k]) * double(x[k]) * ri);
            }
        }
        for (int64_t i = 0; i < c.d; ++i)
            bound_dw[size_t(i)] = 6 * kU * gain_terms[size_t(i)] + 4 * kU * std::fabs(dw_cpu[size_t(i)]) + 1e-38;

        // The pair: the forward saves r, the backward uses it. x_offset 1 (d % 4 == 0 only): x is not 16-byte
        // aligned, so the backward takes its 1-column units; w_offset 1: the gain (a slice of the flat parameters
        // in the trainer) is not, which the 4-column units allow.
        const auto check = [&](int64_t x_offset, int64_t w_offset) {
            std::vector<float> x_padded(size_t(x_offset), 0.0f), w_padded(size_t(w_offset), 0.0f);
            x_padded.insert(x_padded.end(), x.begin(), x.end());
            w_padded.insert(w_padded.end(), w.begin(), w.end());
            DeviceBuffer<float> d_x_padded = to_device(x_padded), d_w_padded = to_device(w_padded), d_dy = to_device(dy),
                                inv(size_t(c.rows));
            const float* d_x = d_x_padded.data() + x_offset;
            const float* d_w = d_w_padded.data() + w_offset;
            DeviceBuffer<uint16_t> y(x.size());
            rms_norm_forward_cuda(d_x, d_w, c.rows, c.d, kEps, bf16_ptr(y), inv.data());
            RmsNormBackwardWorkspace ws;
            const auto run = [&](bool with_bf16, std::vector<float>& dx_out, std::vector<float>& dw_out,
                                 std::vector<uint16_t>& dx_bf16_out) {
                DeviceBuffer<float> d_dx = to_device(dx0), d_dw = to_device(dw0);
                DeviceBuffer<uint16_t> d_bf16 = poisoned<uint16_t>(x.size());
                rms_norm_backward_cuda(d_x, d_w, inv.data(), d_dy.data(), c.rows, c.d, d_dx.data(),
                                       with_bf16 ? bf16_ptr(d_bf16) : nullptr, d_dw.data(), ws);
                device_sync();
                dx_out = to_host(d_dx);
                dw_out = to_host(d_dw);
                dx_bf16_out = to_host(d_bf16);
            };
            std::vector<float> dx_gpu, dw_gpu, dx_again, dw_again;
            std::vector<uint16_t> dx_bf16, unused;
            run(true, dx_gpu, dw_gpu, dx_bf16);
            run(false, dx_again, dw_again, unused);
            const std::string where = std::string(x_offset ? " (x unaligned)" : "") + (w_offset ? " (w unaligned)" : "");
            expect_within(norm_name("rms backward dx", c) + where, as_double(dx_cpu), as_double(dx_gpu), bound_dx);
            expect_within(norm_name("rms backward dw", c) + where, as_double(dw_cpu), as_double(dw_gpu), bound_dw);
            EXPECT_TRUE(bf16_equal(to_bf16(dx_gpu), dx_bf16, norm_name("dx_bf16 = bf16(dx)", c) + where));
            EXPECT_TRUE(floats_equal(dx_gpu, dx_again, norm_name("dx run twice", c) + where));
            EXPECT_TRUE(floats_equal(dw_gpu, dw_again, norm_name("dw run twice", c) + where));
        };
        check(0, 0);
        if (c.d % 4 == 0) {
            check(1, 0);
            check(0, 1);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// RoPE

// head_dim % 16 == 0 (64, 128, 16) and aligned: 8 pairs a thread; 37 positions: a partial CTA of positions; 70 heads
// of 64: more units in a position than threads in a CTA.
TEST(CudaTrainOps, RopeIsBitExactBothPairingsAndDirections) {
    REQUIRE_GPU();
    const BatchShape shape{3, 37};
    for (const int64_t n_heads : {3, 70})
        for (const RopePairing pairing : {RopePairing::adjacent, RopePairing::halves})
            for (const int64_t head_dim : {64, 128, 16, 8, 6, 2})
                for (const bool inverse : {false, true})
                    for (const int64_t offset : {0, 1}) {  // offset 1: unaligned, the one-pair path
                        LlamaConfig c;
                        c.head_dim = head_dim;
                        std::vector<float> cos_t, sin_t;
                        rope_tables(c, shape.n_tok, cos_t, sin_t);
                        const int64_t n = shape.rows() * n_heads * head_dim;
                        const std::vector<uint16_t> x = to_bf16(gaussian_vector(n, 31 + uint64_t(head_dim)));
                        std::vector<float> want = from_bf16(x);
                        if (inverse)
                            apply_rope_backward(want.data(), shape, n_heads, head_dim, pairing, cos_t.data(), sin_t.data());
                        else
                            apply_rope(want.data(), shape, n_heads, head_dim, pairing, cos_t.data(), sin_t.data());
                        std::vector<uint16_t> padded(size_t(n + offset), 0);
                        std::copy(x.begin(), x.end(), padded.begin() + offset);
                        DeviceBuffer<uint16_t> d = to_device(padded);
                        DeviceBuffer<float> dc = to_device(cos_t), ds = to_device(sin_t);
                        rope_bf16_cuda(bf16_ptr(d) + offset, shape, n_heads, head_dim, pairing, dc.data(), ds.data(), inverse);
                        device_sync();
                        const std::vector<uint16_t> got_padded = to_host(d);
                        const std::vector<uint16_t> got(got_padded.begin() + offset, got_padded.end());
                        EXPECT_TRUE(bf16_equal(to_bf16(want), got,
                                               std::string("rope ") + rope_pairing_name(pairing) + " heads " +
                                                   std::to_string(n_heads) + " hd " + std::to_string(head_dim) +
                                                   (inverse ? " inverse" : " forward") + " offset " + std::to_string(offset)));
                    }
}

// Out of place with row strides (the fused q/k/v rows of the trainer): the rotated heads land in y's rows, bit-equal
// to the CPU's rotation, and nothing of x or of y's other columns moves; a stride narrower than a row is refused.
TEST(CudaTrainOps, RopeStridedMovesRowsBetweenLayouts) {
    REQUIRE_GPU();
    const BatchShape shape{2, 29};
    const int64_t rows = shape.rows();
    for (const int64_t n_heads : {3, 4})
        for (const RopePairing pairing : {RopePairing::adjacent, RopePairing::halves})
            for (const int64_t head_dim : {64, 6})  // the 16-byte kernel and the one-pair kernel
                for (const bool inverse : {false, true})
                    for (const int64_t pad : {0, 8, 3}) {  // extra columns of x's rows (3: strides not a multiple of 8)
                        const int64_t width = n_heads * head_dim, x_ld = width + pad, y_ld = width + 2 * pad;
                        LlamaConfig c;
                        c.head_dim = head_dim;
                        std::vector<float> cos_t, sin_t;
                        rope_tables(c, shape.n_tok, cos_t, sin_t);
                        const std::vector<uint16_t> x = to_bf16(gaussian_vector(rows * x_ld, 71 + uint64_t(head_dim + pad)));
                        const std::vector<float> xf = from_bf16(x);
                        std::vector<float> want(size_t(rows * width));
                        for (int64_t r = 0; r < rows; ++r)
                            for (int64_t j = 0; j < width; ++j) want[size_t(r * width + j)] = xf[size_t(r * x_ld + j)];
                        if (inverse) apply_rope_backward(want.data(), shape, n_heads, head_dim, pairing, cos_t.data(), sin_t.data());
                        else apply_rope(want.data(), shape, n_heads, head_dim, pairing, cos_t.data(), sin_t.data());
                        const std::vector<uint16_t> fill(size_t(rows * y_ld), 0x7FC1);  // a NaN the kernel never writes
                        DeviceBuffer<uint16_t> dx = to_device(x), dy = to_device(fill);
                        DeviceBuffer<float> dc = to_device(cos_t), ds = to_device(sin_t);
                        rope_bf16_strided_cuda(bf16_ptr(dx), x_ld, bf16_ptr(dy), y_ld, shape, n_heads, head_dim, pairing, dc.data(),
                                               ds.data(), inverse);
                        device_sync();
                        const std::vector<uint16_t> got = to_host(dy), want16 = to_bf16(want);
                        const std::string what = std::string("strided rope ") + rope_pairing_name(pairing) + " heads " +
                                                 std::to_string(n_heads) + " hd " + std::to_string(head_dim) + " pad " +
                                                 std::to_string(pad) + (inverse ? " inverse" : " forward");
                        for (int64_t r = 0; r < rows; ++r)
                            for (int64_t j = 0; j < y_ld; ++j)
                                ASSERT_EQ(got[size_t(r * y_ld + j)], j < width ? want16[size_t(r * width + j)] : uint16_t(0x7FC1))
                                    << what << " row " << r << " column " << j;
                        EXPECT_EQ(to_host(dx), x) << what << ": x changed";
                    }
    DeviceBuffer<uint16_t> d = to_device(std::vector<uint16_t>(64, 0));
    DeviceBuffer<float> t = to_device(std::vector<float>(64, 0.0f));
    expect_error(ErrorKind::usage, [&] {
        rope_bf16_strided_cuda(bf16_ptr(d), 4, bf16_ptr(d) + 32, 8, BatchShape{1, 2}, 1, 8, RopePairing::halves, t.data(), t.data(),
                               false);
    });
}

// ---------------------------------------------------------------------------------------------------
// SwiGLU

TEST(CudaTrainOps, SwigluForwardAndBackwardMatchTheCpu) {
    REQUIRE_GPU();
    for (const int64_t n : {int64_t(1), int64_t(7), int64_t(8003), int64_t(1) << 20}) {
        const std::vector<float> g = bf16_values(gaussian_vector(n, 41, 3.0f)), u = bf16_values(gaussian_vector(n, 42));
        const std::vector<float> ds = bf16_values(gaussian_vector(n, 43, 0.1f));
        std::vector<float> s_cpu(static_cast<size_t>(n)), dg_cpu(static_cast<size_t>(n)), du_cpu(static_cast<size_t>(n));
        swiglu(g.data(), u.data(), n, s_cpu.data());
        swiglu_backward(g.data(), u.data(), ds.data(), n, dg_cpu.data(), du_cpu.data());
        // A few FP32 ulps (CUDA's expf ≤ 2 ulp) before one BF16 rounding: 2^-8·|v| + 2^-19·|v|; dg's factor
        // 1 + g·(1 − σ) cancels near g ≈ −1.28, so its FP32 error is bounded by the magnitude of its parts.
        std::vector<double> bound_s(static_cast<size_t>(n)), bound_dg(static_cast<size_t>(n)), bound_du(static_cast<size_t>(n));
        for (size_t i = 0; i < size_t(n); ++i) {
            bound_s[i] = (0x1p-8 + 0x1p-19) * std::fabs(s_cpu[i]) + 1e-38;
            bound_du[i] = (0x1p-8 + 0x1p-19) * std::fabs(du_cpu[i]) + 1e-38;
            bound_dg[i] = 0x1p-8 * std::fabs(dg_cpu[i]) + 0x1p-19 * std::fabs(ds[i] * u[i]) * (1 + std::fabs(g[i])) + 1e-38;
        }
        std::vector<std::vector<uint16_t>> results;  // s, dg, du of each run
        for (const int64_t offset : {0, 1}) {  // offset 1: unaligned, the element-by-element path
            const auto padded = [&](const std::vector<float>& v) {
                std::vector<uint16_t> p(size_t(n + offset), 0);
                const std::vector<uint16_t> b = to_bf16(v);
                std::copy(b.begin(), b.end(), p.begin() + offset);
                return to_device(p);
            };
            const auto tail = [&](const DeviceBuffer<uint16_t>& d) {
                const std::vector<uint16_t> h = to_host(d);
                return std::vector<uint16_t>(h.begin() + offset, h.end());
            };
            DeviceBuffer<uint16_t> dg_in = padded(g), du_in = padded(u), d_ds = padded(ds);
            DeviceBuffer<uint16_t> s = poisoned<uint16_t>(size_t(n + offset)), dg = poisoned<uint16_t>(size_t(n + offset)),
                                   du = poisoned<uint16_t>(size_t(n + offset));
            swiglu_forward_cuda(cbf16(dg_in) + offset, cbf16(du_in) + offset, n, bf16_ptr(s) + offset);
            swiglu_backward_cuda(cbf16(dg_in) + offset, cbf16(du_in) + offset, cbf16(d_ds) + offset, n,
                                 bf16_ptr(dg) + offset, bf16_ptr(du) + offset);
            // In place: the gradients overwrite gate and up.
            swiglu_backward_cuda(cbf16(dg_in) + offset, cbf16(du_in) + offset, cbf16(d_ds) + offset, n,
                                 bf16_ptr(dg_in) + offset, bf16_ptr(du_in) + offset);
            device_sync();
            results.push_back(tail(s));
            results.push_back(tail(dg));
            results.push_back(tail(du));
            const std::string name = "n " + std::to_string(n) + " offset " + std::to_string(offset);
            EXPECT_TRUE(bf16_equal(results[results.size() - 2], tail(dg_in), "swiglu dg in place " + name));
            EXPECT_TRUE(bf16_equal(results.back(), tail(du_in), "swiglu du in place " + name));
        }
        const std::string name = " n " + std::to_string(n);
        expect_within("swiglu forward" + name, as_double(s_cpu), as_double(from_bf16(results[0])), bound_s);
        expect_within("swiglu backward dg" + name, as_double(dg_cpu), as_double(from_bf16(results[1])), bound_dg);
        expect_within("swiglu backward du" + name, as_double(du_cpu), as_double(from_bf16(results[2])), bound_du);
        for (int k = 0; k < 3; ++k)  // the vector and element-by-element paths compute the same expression
            EXPECT_TRUE(bf16_equal(results[size_t(k)], results[size_t(k + 3)], "swiglu aligned vs unaligned" + name));
    }
}

// ---------------------------------------------------------------------------------------------------
// cross entropy

struct CeCase {
    int64_t rows, vocab;
};
// Odd vocabularies take the scalar rows, multiples of 4 the float4 ones, up to 65536 (8196 and 32000: partial
// strides of the CTA's 256 threads).
const CeCase kCeCases[] = {{1, 1}, {1, 7}, {4, 1001}, {33, 512}, {2, 8196}, {5, 32000}, {3, 49152}, {2, 65536}};

TEST(CudaTrainOps, CrossEntropyMatchesTheCpuAndItsMeanSums) {
    REQUIRE_GPU();
    for (const CeCase c : kCeCases) {
        const int64_t V = c.vocab;
        std::vector<float> logits = gaussian_vector(c.rows * V, 51 + uint64_t(V), 2.0f);
        const std::vector<int32_t> targets = random_token_ids(c.rows, V, 52);
        for (int64_t r = 0; r < c.rows; ++r) {
            float* row = logits.data() + r * V;
            if (r % 3 == 1) row[targets[size_t(r)]] += 25.0f;  // confident: p − 1 of the target is tiny
            if (r % 3 == 2 && V > 4)                            // masked entries (never the target)
                for (int64_t i = 0; i < V; i += 3)
                    if (i != targets[size_t(r)]) row[i] = -INFINITY;
        }
        std::vector<double> loss_cpu(size_t(c.rows));
        for (int64_t r = 0; r < c.rows; ++r)
            loss_cpu[size_t(r)] = cross_entropy_mean(logits.data() + r * V, targets.data() + r, 1, V);
        std::vector<float> dl_cpu(logits.size());
        cross_entropy_backward(logits.data(), targets.data(), c.rows, V, dl_cpu.data());

        DeviceBuffer<float> d_logits = to_device(logits);
        DeviceBuffer<int32_t> d_targets = to_device(targets);
        const float grad_scale = float(1.0 / double(c.rows));
        const auto run = [&](bool with_grad, std::vector<float>& loss, std::vector<uint16_t>& dl) {
            DeviceBuffer<float> d_loss = poisoned<float>(size_t(c.rows));
            DeviceBuffer<uint16_t> d_dl = poisoned<uint16_t>(logits.size());
            cross_entropy_cuda(d_logits.data(), d_targets.data(), c.rows, V, grad_scale, d_loss.data(),
                               with_grad ? bf16_ptr(d_dl) : nullptr);
            device_sync();
            loss = to_host(d_loss);
            dl = to_host(d_dl);
        };
        std::vector<float> loss_gpu, loss_again, loss_only;
        std::vector<uint16_t> dl_gpu, dl_again, unused;
        run(true, loss_gpu, dl_gpu);
        run(true, loss_again, dl_again);
        run(false, loss_only, unused);

        // Loss: (4 + ln V)·u from the FP32 exponentials and u·|loss| from the FP32 result; +2u·(1 + |loss|) margin.
        // dlogits: one BF16 rounding (2^-8 relative) of a value within ~(8 + |lse| + |l − lse|)·u ≤ 2^-16 of the CPU's.
        std::vector<double> bound_loss(size_t(c.rows)), bound_dl(dl_cpu.size());
        for (size_t r = 0; r < bound_loss.size(); ++r)
            bound_loss[r] = (6 + std::log(double(V))) * kU + 3 * kU * std::fabs(loss_cpu[r]);
        for (size_t i = 0; i < dl_cpu.size(); ++i)
            bound_dl[i] = (0x1p-8 + 0x1p-16) * std::fabs(dl_cpu[i]) + kU * grad_scale + 1e-38;
        const std::string name = " " + std::to_string(c.rows) + "x" + std::to_string(V);
        expect_within("cross entropy loss" + name, loss_cpu, as_double(loss_gpu), bound_loss);
        expect_within("cross entropy dlogits" + name, as_double(dl_cpu), as_double(from_bf16(dl_gpu)), bound_dl);
        EXPECT_TRUE(floats_equal(loss_gpu, loss_again, "loss run twice" + name));
        EXPECT_TRUE(bf16_equal(dl_gpu, dl_again, "dlogits run twice" + name));
        EXPECT_TRUE(floats_equal(loss_gpu, loss_only, "loss without the gradient" + name));

        // The mean: Σ loss_rows on the device (FP64) against cross_entropy_mean over all rows.
        DeviceBuffer<float> d_loss = to_device(loss_gpu);
        DeviceBuffer<double> d_sum(1);
        SumWorkspace ws;
        sum_to_double_cuda(d_loss.data(), c.rows, d_sum.data(), ws);
        device_sync();
        const double mean_gpu = to_host(d_sum)[0] / double(c.rows);
        const double mean_cpu = cross_entropy_mean(logits.data(), targets.data(), c.rows, V);
        double bound = 0;
        for (size_t r = 0; r < bound_loss.size(); ++r) bound += bound_loss[r] / double(c.rows);
        expect_within("mean loss" + name, {mean_cpu}, {mean_gpu}, {bound});
    }
}

// ---------------------------------------------------------------------------------------------------
// sums

TEST(CudaTrainOps, SumsAreDeterministicAndWithin1e12OfExactSums) {
    REQUIRE_GPU();
    SumWorkspace ws;
    for (const int64_t n : {int64_t(1), int64_t(5), int64_t(4099), (int64_t(1) << 20) + 3, int64_t(10000019)})
        for (const int64_t offset : {0, 1}) {  // offset 1: not 16-byte aligned, the scalar path
            std::vector<float> x = gaussian_vector(n + offset, 61 + uint64_t(n));
            for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * float(1 + i % 5) + 0.25f;  // a positive mean
            long double sum = 0, squares = 0, abs_sum = 0;
            for (size_t i = size_t(offset); i < x.size(); ++i) {
                sum += x[i];
                squares += (long double)x[i] * x[i];
                abs_sum += std::fabs(x[i]);
            }
            DeviceBuffer<float> d = to_device(x);
            DeviceBuffer<double> out(4);
            sum_to_double_cuda(d.data() + offset, n, out.data(), ws);
            sum_squares_cuda(d.data() + offset, n, out.data() + 1, ws);
            sum_to_double_cuda(d.data() + offset, n, out.data() + 2, ws);
            sum_squares_cuda(d.data() + offset, n, out.data() + 3, ws);
            device_sync();
            const std::vector<double> got = to_host(out);
            const std::string name = " n " + std::to_string(n) + " offset " + std::to_string(offset);
            expect_within("sum_to_double" + name, {double(sum)}, {got[0]}, {1e-12 * double(abs_sum) + 1e-300});
            expect_within("sum_squares" + name, {double(squares)}, {got[1]}, {1e-12 * double(squares) + 1e-300});
            EXPECT_TRUE(bytes_equal(bytes_of(std::vector<double>{got[0], got[1]}),
                                    bytes_of(std::vector<double>{got[2], got[3]}), "sums run twice" + name));
        }
}

// ---------------------------------------------------------------------------------------------------
// embedding backward

void expect_valid_plan(const EmbeddingBackwardPlan& p, const std::vector<int32_t>& tokens) {
    ASSERT_EQ(p.offsets.size(), p.ids.size() + 1);
    ASSERT_EQ(p.rows.size(), tokens.size());
    EXPECT_EQ(p.offsets.front(), 0);
    EXPECT_EQ(p.offsets.back(), int32_t(tokens.size()));
    for (size_t i = 0; i < p.ids.size(); ++i) {
        if (i > 0) EXPECT_LT(p.ids[i - 1], p.ids[i]);
        EXPECT_LT(p.offsets[i], p.offsets[i + 1]);
        for (int32_t k = p.offsets[i]; k < p.offsets[i + 1]; ++k) {
            EXPECT_EQ(tokens[size_t(p.rows[size_t(k)])], p.ids[i]);
            if (k > p.offsets[i]) EXPECT_LT(p.rows[size_t(k - 1)], p.rows[size_t(k)]);
        }
    }
}

TEST(CudaTrainOps, EmbeddingBackwardPlanGroupsRowsByTokenInOrder) {
    const std::vector<int32_t> tokens = {5, 2, 5, 0, 2, 5, 9};
    const EmbeddingBackwardPlan p = embedding_backward_plan(tokens.data(), int64_t(tokens.size()));
    EXPECT_EQ(p.ids, (std::vector<int32_t>{0, 2, 5, 9}));
    EXPECT_EQ(p.offsets, (std::vector<int32_t>{0, 1, 3, 6, 7}));
    EXPECT_EQ(p.rows, (std::vector<int32_t>{3, 1, 4, 0, 2, 5, 6}));
    const std::vector<int32_t> many = random_token_ids(1000, 37, 71);
    expect_valid_plan(embedding_backward_plan(many.data(), int64_t(many.size())), many);
}

TEST(CudaTrainOps, EmbeddingBackwardIsBitExact) {
    REQUIRE_GPU();
    const int64_t rows = 300, vocab = 50;
    const std::vector<int32_t> tokens = random_token_ids(rows, vocab, 72);
    const EmbeddingBackwardPlan plan = embedding_backward_plan(tokens.data(), rows);
    DeviceBuffer<int32_t> ids = to_device(plan.ids), offsets = to_device(plan.offsets), row_ids = to_device(plan.rows);
    for (const int64_t d : {64, 33, 768}) {
        const std::vector<float> d_hidden = gaussian_vector(rows * d, 73), table0 = gaussian_vector(vocab * d, 74);  // table0: a tied head's dW
        std::vector<float> want = table0;
        embedding_backward(tokens.data(), d_hidden.data(), rows, d, want.data());
        DeviceBuffer<float> dh = to_device(d_hidden), table = to_device(table0);
        embedding_backward_cuda(ids.data(), offsets.data(), row_ids.data(), int64_t(plan.ids.size()), dh.data(), d,
                                table.data());
        device_sync();
        EXPECT_TRUE(floats_equal(want, to_host(table), "embedding backward d " + std::to_string(d)));
    }
}

// ---------------------------------------------------------------------------------------------------
// AdamW

// adamw_step_args + adamw_step_cuda against AdamW::step: bit for bit over several steps, one of them clipped, on
// the 4-element path with a tail and on the one-by-one path.
TEST(CudaTrainOps, AdamwIsBitIdenticalToTheCpuOverSeveralSteps) {
    REQUIRE_GPU();
    LlamaConfig c;
    c.architecture = "llama";
    c.vocab_size = 101;
    c.hidden_size = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.ffn_size = 96;
    c.context_length = 64;
    const ParamLayout layout(c);
    const int64_t n = layout.total();
    AdamWConfig cfg;
    AdamW cpu(layout, cfg);
    std::vector<float> params = gaussian_vector(n, 81, 0.05f);
    std::vector<uint8_t> mask(size_t(n), 0);
    for (const ParamTensor& t : layout.tensors())
        std::fill(mask.begin() + t.offset, mask.begin() + t.offset + t.size(), uint8_t(t.weight_decay() ? 1 : 0));
    // Two device copies: [0] aligned, each step in two calls split at n − 1 (the first ends in (n − 1) % 4 elements
    // taken one by one, the second is a single element); [1] shifted by one element, so nothing is 16-byte aligned
    // and every element takes the one-by-one path.
    const auto shifted = [](const auto& host, int64_t offset) {
        std::decay_t<decltype(host)> out(host.size() + static_cast<size_t>(offset));
        std::copy(host.begin(), host.end(), out.begin() + offset);
        return out;
    };
    const auto unshifted = [](const auto& host, int64_t offset) {
        return std::decay_t<decltype(host)>(host.begin() + offset, host.end());
    };
    const std::vector<float> zeros(size_t(n), 0.0f);
    DeviceBuffer<float> p[2] = {to_device(shifted(params, 0)), to_device(shifted(params, 1))};
    DeviceBuffer<float> m[2] = {to_device(shifted(zeros, 0)), to_device(shifted(zeros, 1))};
    DeviceBuffer<float> v[2] = {to_device(shifted(zeros, 0)), to_device(shifted(zeros, 1))};
    DeviceBuffer<float> g[2] = {DeviceBuffer<float>(size_t(n)), DeviceBuffer<float>(size_t(n + 1))};
    DeviceBuffer<uint8_t> d_mask[2] = {to_device(shifted(mask, 0)), to_device(shifted(mask, 1))};
    DeviceBuffer<uint16_t> p_bf16[2] = {poisoned<uint16_t>(size_t(n)), poisoned<uint16_t>(size_t(n + 1))};
    for (int64_t t = 1; t <= 3; ++t) {
        std::vector<float> grads = gaussian_vector(n, 90 + uint64_t(t), 0.01f);
        for (size_t i = 0; i < grads.size(); i += 7) grads[i] *= 1000.0f;  // spread the magnitudes
        const double lr = 1e-3 * double(t);
        const float scale = t == 2 ? 0.37f : 1.0f;  // a clipped step
        cpu.step(params.data(), grads.data(), lr, scale);
        const AdamwStepArgs a = adamw_step_args(cfg, t, lr, scale);
        for (const int64_t o : {0, 1}) {
            const std::vector<float> g_host = shifted(grads, o);
            g[o].upload(g_host.data(), g_host.size());
        }
        const int64_t k = n - 1;
        adamw_step_cuda(p[0].data(), g[0].data(), m[0].data(), v[0].data(), d_mask[0].data(), k, a, bf16_ptr(p_bf16[0]));
        adamw_step_cuda(p[0].data() + k, g[0].data() + k, m[0].data() + k, v[0].data() + k, d_mask[0].data() + k, 1, a,
                        bf16_ptr(p_bf16[0]) + k);
        adamw_step_cuda(p[1].data() + 1, g[1].data() + 1, m[1].data() + 1, v[1].data() + 1, d_mask[1].data() + 1, n, a,
                        bf16_ptr(p_bf16[1]) + 1);
        device_sync();
        for (const int64_t o : {0, 1}) {
            const std::string step = " step " + std::to_string(t) + (o ? " (unaligned)" : " (aligned)");
            EXPECT_TRUE(floats_equal(params, unshifted(to_host(p[o]), o), "AdamW params" + step));
            EXPECT_TRUE(floats_equal(cpu.first_moment(), unshifted(to_host(m[o]), o), "AdamW m" + step));
            EXPECT_TRUE(floats_equal(cpu.second_moment(), unshifted(to_host(v[o]), o), "AdamW v" + step));
            EXPECT_TRUE(bf16_equal(to_bf16(params), unshifted(to_host(p_bf16[o]), o), "AdamW bf16 params" + step));
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// argument checks (before any launch: no GPU needed)

TEST(CudaTrainOps, BadArgumentsAreRefusedWithAMessage) {
    float* f = reinterpret_cast<float*>(256);
    float* f2 = reinterpret_cast<float*>(512);
    __nv_bfloat16* b = reinterpret_cast<__nv_bfloat16*>(256);
    __nv_bfloat16* b2 = reinterpret_cast<__nv_bfloat16*>(512);
    int32_t* ids = reinterpret_cast<int32_t*>(256);
    const ErrorKind usage = ErrorKind::usage;
    expect_error(usage, [&] { rms_norm_forward_cuda(nullptr, f, 4, 8, kEps, b, f2); });
    expect_error(usage, [&] { rms_norm_forward_cuda(f, f, 4, 8, kEps, nullptr, f2); });
    expect_error(usage, [&] { rms_norm_forward_cuda(f, f, 4, 8, kEps, b, nullptr); });
    expect_error(usage, [&] { rms_norm_forward_cuda(f, f, 0, 8, kEps, b, f2); });
    expect_error(usage, [&] { rms_norm_forward_cuda(f, f, 4, -1, kEps, b, f2); });
    RmsNormBackwardWorkspace nws;
    expect_error(usage, [&] { rms_norm_backward_cuda(f, f, f, f2, 4, 8, f2, nullptr, f, nws); });  // dx aliases dy
    expect_error(usage, [&] { rms_norm_backward_cuda(f2, f, f, f, 4, 8, f2, nullptr, f, nws); });  // dx aliases x
    expect_error(usage, [&] { rms_norm_backward_cuda(f, f, f, f2, 4, 8, f, nullptr, nullptr, nws); });
    expect_error(usage, [&] { rms_norm_backward_cuda(f, f, nullptr, f2, 4, 8, f, nullptr, f, nws); });
    expect_error(usage, [&] { rms_norm_backward_cuda(f, f, f, f2, 4, 0, f, nullptr, f, nws); });
    expect_error(usage, [&] { rope_bf16_cuda(b, {1, 4}, 2, 7, RopePairing::halves, f, f, false); });
    expect_error(usage, [&] { rope_bf16_cuda(b, {1, 4}, 0, 8, RopePairing::halves, f, f, false); });
    expect_error(usage, [&] { rope_bf16_cuda(b, {1, 0}, 2, 8, RopePairing::adjacent, f, f, true); });
    expect_error(usage, [&] { rope_bf16_cuda(b, {1, 4}, 2, 8, RopePairing::adjacent, nullptr, f, true); });
    expect_error(usage, [&] { swiglu_forward_cuda(b, b, 0, b2); });
    expect_error(usage, [&] { swiglu_forward_cuda(b, b, 16, nullptr); });
    expect_error(usage, [&] { swiglu_backward_cuda(b, b, b, 16, b2, b2); });  // the two gradients in one buffer
    expect_error(usage, [&] { swiglu_backward_cuda(b, b, nullptr, 16, b, b2); });
    expect_error(usage, [&] { cross_entropy_cuda(f, ids, 4, 0, 0.25f, f2, b); });
    expect_error(usage, [&] { cross_entropy_cuda(f, ids, -1, 16, 0.25f, f2, b); });
    expect_error(usage, [&] { cross_entropy_cuda(f, ids, 4, 16, 0.25f, nullptr, b); });
    expect_error(usage, [&] { cross_entropy_cuda(f, nullptr, 4, 16, 0.25f, f2, b); });
    SumWorkspace sws;
    double* out = reinterpret_cast<double*>(256);
    expect_error(usage, [&] { sum_to_double_cuda(f, 0, out, sws); });
    expect_error(usage, [&] { sum_to_double_cuda(f, 16, nullptr, sws); });
    expect_error(usage, [&] { sum_squares_cuda(nullptr, 16, out, sws); });
    const int32_t bad_tokens[] = {3, -1, 2};
    expect_error(ErrorKind::input, [&] { embedding_backward_plan(bad_tokens, 3); });
    expect_error(usage, [&] { embedding_backward_plan(bad_tokens, 0); });
    expect_error(usage, [&] { embedding_backward_cuda(ids, ids, ids, 3, f, 0, f2); });
    expect_error(usage, [&] { embedding_backward_cuda(ids, ids, ids, 0, f, 8, f2); });
    expect_error(usage, [&] { embedding_backward_cuda(ids, ids, ids, 3, f, 8, nullptr); });
    AdamwStepArgs a{};
    a.bias_correction1 = a.bias_correction2 = 0.1f;
    uint8_t* mask = reinterpret_cast<uint8_t*>(256);
    expect_error(usage, [&] { adamw_step_cuda(f, f, f, f, nullptr, 16, a, nullptr); });
    expect_error(usage, [&] { adamw_step_cuda(f, f, f, f, mask, 0, a, nullptr); });
    a.bias_correction2 = 0.0f;  // t = 0: no update has a bias correction of 0
    expect_error(usage, [&] { adamw_step_cuda(f, f, f, f, mask, 16, a, nullptr); });
}

}  // namespace
