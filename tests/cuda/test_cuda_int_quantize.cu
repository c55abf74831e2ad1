// test_cuda_int_quantize.cu — int_quantize_cuda / int_dequantize_cuda (formats/cuda/int_quantize.cuh) against
// the CPU's INT-grid reference, bit for bit: bits, groups, symmetric and asymmetric grids, both axes.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <string>
#include <vector>

#include "formats/cuda/int_quantize.cuh"
#include "formats/int_grid.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

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
    device_sync();
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
    device_sync();
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

}  // namespace
