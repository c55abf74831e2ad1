// test_cuda_block_hadamard.cu — block_hadamard_cuda (hadamard/cuda/block_hadamard.cuh) against the CPU's
// hadamard_transform, bit for bit: FP32 and BF16, every block size, both axes, odd shapes.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <vector>

#include "hadamard/cuda/block_hadamard.cuh"
#include "hadamard/hadamard.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

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
                    device_sync();
                    EXPECT_TRUE(floats_equal(want, to_host(out), "fp32"));
                    block_hadamard_cuda(in.data(), s.rows, s.cols, block, axis);  // in-place overload
                    device_sync();
                    EXPECT_TRUE(floats_equal(want, to_host(in), "fp32 in place"));
                    // BF16: bf16 → f32, transform, f32 → bf16 (RNE)
                    const std::vector<uint16_t> xh = to_bf16(x);
                    const std::vector<uint16_t> wanth = to_bf16(cpu_hadamard(from_bf16(xh), s, block, axis));
                    DeviceBuffer<uint16_t> inh = to_device(xh);
                    DeviceBuffer<uint16_t> outh = poisoned<uint16_t>(xh.size());
                    block_hadamard_cuda(bf16_ptr(inh), bf16_ptr(outh), s.rows, s.cols, block, axis);
                    device_sync();
                    EXPECT_TRUE(bf16_equal(wanth, to_host(outh), "bf16"));
                    block_hadamard_cuda(bf16_ptr(inh), bf16_ptr(inh), s.rows, s.cols, block, axis);  // in == out
                    device_sync();
                    EXPECT_TRUE(bf16_equal(wanth, to_host(inh), "bf16 in place"));
                    ++cases;
                }
            }
    EXPECT_GT(cases, 40);
}

}  // namespace
