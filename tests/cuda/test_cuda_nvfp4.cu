// test_cuda_nvfp4.cu — nvfp4_quantize_cuda / nvfp4_dequantize_cuda (formats/cuda/nvfp4_quantize.cuh) against
// the CPU's NVFP4 reference, bit for bit: rows and columns, every rounding, FP32 and BF16 input.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <string>
#include <vector>

#include "formats/cuda/nvfp4_quantize.cuh"
#include "formats/nvfp4.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

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
    device_sync();
    EXPECT_TRUE(bytes_equal(pack_e2m1(q.codes), to_host(codes), "codes"));
    EXPECT_TRUE(bytes_equal(q.block_scales, to_host(bscales), "block scales"));
    EXPECT_TRUE(floats_equal({q.tensor_scale}, to_host(ts), "tensor scale"));
    EXPECT_EQ(to_host(amax)[0], want_amax);
    DeviceBuffer<float> deq = poisoned<float>(x.size());
    nvfp4_dequantize_cuda(codes.data(), bscales.data(), ts.data(), s.rows, s.cols, opt.axis, deq.data());
    device_sync();
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
    device_sync();
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

}  // namespace
