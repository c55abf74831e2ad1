// test_cuda_hadamard_mxfp4_stats.cu — the statistics of the fused Hadamard+MXFP4 pass
// (adahop/cuda/hadamard_mxfp4_stats.cuh): the detector's (Σx, Σx²) partials hold the sums of their groups of
// blocks, and the both-orientations pass writes the same codes, scales and sums as the single passes.
#include "adahop_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <vector>

using namespace lowbit;
using namespace lowbit::testing_util;

TEST(AdahopCuda, BlockSumsOfBothOrientationsEqualTheSingleOrientationOnes) {
    REQUIRE_GPU();
    with_and_without_tma([&] {  // the TMA column kernels and the portable ones
        const int64_t r = 96, c = 128;
        const auto xb = to_device_bf16(synthetic_operand(r, c, Pattern::col, 77, 0.05));
        DeviceBuffer<__nv_bfloat16> dx(xb.size());
        dx.upload(xb.data(), xb.size());
        QuantizedDevice rows1(r, c, 1, true), cols1(r, c, 0, true), rows2(r, c, 1, true), cols2(r, c, 0, true);
        HadamardMxfp4Options o;
        quantize_axis(dx.data(), r, c, 1, o, rows1);
        quantize_axis(dx.data(), r, c, 0, o, cols1);
        hadamard_mxfp4_cuda(dx.data(), r, c, o, rows2.out(), cols2.out());
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(float_bits(download_at(rows2.sumsq.data(), rows2.sumsq.size())), float_bits(download_at(rows1.sumsq.data(), rows1.sumsq.size())));
        EXPECT_EQ(float_bits(download_at(cols2.sumsq.data(), cols2.sumsq.size())), float_bits(download_at(cols1.sumsq.data(), cols1.sumsq.size())));
        EXPECT_EQ(download_at(rows2.codes.data(), rows2.codes.size()), download_at(rows1.codes.data(), rows1.codes.size()));
        EXPECT_EQ(download_at(cols2.codes.data(), cols2.codes.size()), download_at(cols1.codes.data(), cols1.codes.size()));
    });
}

// The detector partials themselves: every group's (Σx, Σx²) pair against FP64 sums of its BF16 values, in
// both orientations, from single-orientation passes (full and partial last stripes); the
// both-orientations pass bit for bit equal to them; Σx² equal to the outlier-extraction pass's block_sumsq.
TEST(AdahopCuda, DetectorPartialsHoldTheSumsOfTheirGroups) {
    REQUIRE_GPU();
    with_and_without_tma([&] {  // the TMA column kernels and the portable ones
        const int64_t shapes[][2] = {{96, 96}, {288, 64}, {512, 2048}, {32, 32}, {64, 160}, {800, 128}};
        for (auto sh : shapes) {
            const int64_t r = sh[0], c = sh[1];
            auto x = synthetic_operand(r, c, Pattern::row, 5 + uint64_t(r + c));
            for (float& v : x) v -= 0.2f;
            const auto xv = bf16_values(x);
            auto dx = to_device(to_device_bf16(x));
            QuantizedDevice rows(r, c, 1, false, true), cols(r, c, 0, false, true), rows2(r, c, 1, false, true), cols2(r, c, 0, false, true),
                sq_rows(r, c, 1, true), sq_cols(r, c, 0, true);
            quantize_axis(dx.data(), r, c, 1, {}, rows);
            quantize_axis(dx.data(), r, c, 0, {}, cols);
            quantize_axis(dx.data(), r, c, 1, {}, sq_rows);
            quantize_axis(dx.data(), r, c, 0, {}, sq_cols);
            hadamard_mxfp4_cuda(dx.data(), r, c, {}, rows2.out(), cols2.out());
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::string w = shape_name(r, c);
            ASSERT_EQ(block_stats_count(r, c, 1), r * (c / 32)) << w;
            ASSERT_EQ(block_stats_count(r, c, 0), c * ((r / 32 + kBlockStatsStripe - 1) / kBlockStatsStripe)) << w;
            const auto pr = download_at(rows.partials.data(), rows.partials.size()), pc = download_at(cols.partials.data(), cols.partials.size());
            for (int axis : {1, 0}) {
                const std::vector<float2>& got = axis == 1 ? pr : pc;
                for (int64_t o = 0; o < (axis == 1 ? r : c); ++o)
                    for (int64_t g = 0; g < block_stats_groups(r, c, axis); ++g) {
                        const GroupSums want = group_sums(xv, r, c, axis, o, g);
                        const float2 p = got[size_t(want.at)];
                        ASSERT_NEAR(p.x, want.s, 1e-6 * want.a + 1e-30) << w << " axis " << axis << " vector " << o << " group " << g;
                        ASSERT_NEAR(p.y, want.q, 1e-6 * want.q + 1e-30) << w << " axis " << axis << " vector " << o << " group " << g;
                    }
            }
            const auto sumsq_of = [](const std::vector<float2>& v) {
                std::vector<float> q;
                for (const float2& p : v) q.push_back(p.y);
                return float_bits(q);
            };
            EXPECT_EQ(sumsq_of(pr), float_bits(download_at(sq_rows.sumsq.data(), sq_rows.sumsq.size()))) << w << " Σx² along rows";
            EXPECT_EQ(sumsq_of(pc), float_bits(download_at(sq_cols.sumsq.data(), sq_cols.sumsq.size()))) << w << " Σx² down columns";
            const auto bits = [](const std::vector<float2>& v) {
                std::vector<uint32_t> u(2 * v.size());
                std::memcpy(u.data(), v.data(), v.size() * sizeof(float2));
                return u;
            };
            EXPECT_EQ(bits(download_at(rows2.partials.data(), rows2.partials.size())), bits(pr)) << w << " both, along rows";
            EXPECT_EQ(bits(download_at(cols2.partials.data(), cols2.partials.size())), bits(pc)) << w << " both, along columns";
        }
    });
}
