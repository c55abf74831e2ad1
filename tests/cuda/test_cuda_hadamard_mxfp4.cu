// test_cuda_hadamard_mxfp4.cu — the fused block-32 Hadamard + MXFP4 pass (hadamard/cuda/hadamard_mxfp4.cuh)
// against its definition (hadamard_transform then mx_quantize), bit for bit: rows, columns and both
// orientations, every rule and rounding, adversarial data and inputs that hit E2M1 rounding ties.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <string>
#include <vector>

#include "formats/mx_block.h"
#include "hadamard/cuda/hadamard_mxfp4.cuh"
#include "hadamard/hadamard.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

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
    Mxfp4DeviceCodes rows_out, cols_out;
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
    device_sync();
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

}  // namespace
