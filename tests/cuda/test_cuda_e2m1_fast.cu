// test_cuda_e2m1_fast.cu — the branch-free E2M1 encoders of the CUDA quantizers (formats/cuda/e2m1_fast.h)
// against encode_element: on a host sample (runs everywhere) and over every non-NaN float on the GPU.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <cstdint>
#include <vector>

#include "core/bits.h"
#include "core/counter_rng.h"
#include "formats/cuda/e2m1_fast.h"
#include "formats/element_codec.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

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
    device_sync();
    unsigned long long n = 0;
    unsigned int f = 0;
    count.download(&n, 1);
    first.download(&f, 1);
    EXPECT_EQ(n, 0ull) << "first mismatching float bits 0x" << std::hex << f;
}

}  // namespace
