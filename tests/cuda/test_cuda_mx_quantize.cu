// test_cuda_mx_quantize.cu — mx_quantize_cuda / mx_dequantize_cuda (formats/cuda/mx_quantize.cuh) against
// the CPU's mx_quantize / mx_dequantize, bit for bit: every element, scale rule, rounding and axis, FP32
// and BF16 input, Gaussian and adversarial blocks (NaN, ±Inf, zeros, huge, subnormal, exact ties), odd
// shapes, with and without the TMA kernels; dequantization also into BF16 in the blocked order. Outputs are
// poisoned with 0xAB before each launch.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "formats/cuda/mx_quantize.cuh"
#include "formats/mx_block.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

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
    device_sync();
    EXPECT_TRUE(bytes_equal(want.codes, to_host(codes), "codes"));
    EXPECT_TRUE(bytes_equal(want.scales, to_host(scales), "scales"));
    if (with_dequant) {
        DeviceBuffer<float> out = poisoned<float>(x.size());
        mx_dequantize_cuda(codes.data(), scales.data(), s.rows, s.cols, e, opt.axis, out.data());
        device_sync();
        EXPECT_TRUE(floats_equal(want.dequant, to_host(out), "dequantized"));
        // the blocked order ([outer][inner], inner = the blocks' axis) in BF16: round(value) of the same element
        const int64_t outer = opt.axis == 1 ? s.rows : s.cols, inner = opt.axis == 1 ? s.cols : s.rows;
        DeviceBuffer<__nv_bfloat16> blocked(x.size());
        CUDA_CHECK(cudaMemset(blocked.data(), 0xAB, blocked.bytes()));
        mx_dequantize_blocked_bf16_cuda(codes.data(), scales.data(), outer, inner, e, blocked.data());
        device_sync();
        std::vector<__nv_bfloat16> got(x.size());
        blocked.download(got.data(), got.size());
        int64_t mismatches = 0;
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
                const float w = want.dequant[size_t(opt.axis == 1 ? o * s.cols + i : i * s.cols + o)];
                const float g = __bfloat162float(got[size_t(o * inner + i)]);
                const float r = __bfloat162float(__float2bfloat16_rn(w));
                if (std::isnan(w) ? !std::isnan(g) : std::memcmp(&g, &r, 4) != 0) ++mismatches;
            }
        EXPECT_EQ(mismatches, 0) << "blocked BF16 dequantization";
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

}  // namespace
