// test_cuda_mx_gemm_fp8.cu — the MX GEMM on FP8 tensor cores (adahop/cuda/mx_gemm_fp8.cuh) against a CPU
// double-precision product of the dequantized operands (formats/mx_block.h mx_decode) and against the BF16
// emulation (LpMatmulCuda::matmul_prepared, Strategy::plain, on the same prepared operands); the E2M1 → E4M3
// expansion bit for bit; the sm_90a kernel and the CUDA-core one (TMA off) alike. A layout probe (products
// with one non-zero term per output, compared exactly) names the rows and columns a tile-layout error moves.
//
// Tolerances (derived in the header of mx_gemm_fp8.cuh), per element, with S = Σ_k |a_k · b_k|:
//   MXFP4 vs exact:     (K + K/32) · 2^−24 · S   — FP32 summation order only (block sums are exact)
//   MXFP8 vs exact:     + 2^−8 · S               — the tensor core's ~14-bit FP8 accumulator within a block
//   vs the emulation:   + K · 2^−24 · S          — the reference's own FP32 summation error
//   BF16 output:        + 2^−8 · (|C| + the above) — one rounding to 8 significant bits
//   always:             + K · 2^−126              — contributions that flush below the normal range
// The worst error / bound ratio seen is printed, so the bounds can be tightened from H200 runs.
#include "adahop_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "adahop/cuda/lp_matmul_cuda.cuh"
#include "adahop/cuda/mx_gemm_fp8.cuh"
#include "adahop/int8_window.h"
#include "formats/element_codec.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

// Block scales: `narrow` 127 ± 8 (a 128-row tile spans 16 binades: B mostly unfolded); `window` 127 ± 7
// (14 binades: every tile-block of B folded, shifts from −8 to +6); `wide` 127 ± 50 chosen per block
// (neighbouring blocks 100 binades apart), with every 7th block all-zero codes and every 11th block scale
// byte 0 (2^−127). For the INT8 stages: `int8_rows` gives each row a base 127 ± 20 and each block base + 0…3
// (every row-stage inside the window, rows far apart), `int8_flat` 127 + 0…3 everywhere (every tile-stage inside).
enum class Spread { narrow, window, wide, int8_rows, int8_flat, int8_rows_two, int8_flat_two };

struct HostOperand {
    MxElement element = MxElement::e2m1;
    int64_t rows = 0, k = 0;
    std::vector<uint8_t> codes, scales;

    int64_t blocks() const { return k / kMxBlock; }
    uint32_t code(int64_t line, int64_t i) const {
        if (element == MxElement::e2m1) {
            const uint8_t byte = codes[size_t(line * (k / 2) + i / 2)];
            return (i & 1) ? byte >> 4 : byte & 0xFu;
        }
        return codes[size_t(line * k + i)];
    }
    float value(int64_t line, int64_t i) const {
        return mx_decode(code(line, i), scales[size_t(line * blocks() + i / kMxBlock)], mx_spec(element));
    }
    // The same operand with every sign bit cleared: its product gives S = Σ |a_k · b_k|.
    HostOperand magnitudes() const {
        HostOperand m = *this;
        for (uint8_t& c : m.codes) c &= element == MxElement::e2m1 ? 0x77u : 0x7Fu;
        return m;
    }
};

HostOperand random_operand(int64_t rows, int64_t k, MxElement e, Spread spread, uint64_t seed) {
    HostOperand op;
    op.element = e;
    op.rows = rows;
    op.k = k;
    op.codes.resize(size_t(e == MxElement::e2m1 ? rows * k / 2 : rows * k));
    for (size_t i = 0; i < op.codes.size(); ++i) {
        uint8_t byte = uint8_t(counter_random24(seed, i) & 0xFFu);
        if (e == MxElement::e4m3 && (byte & 0x7Fu) == 0x7Fu) byte ^= 0x01u;  // no NaN codes (tested apart)
        op.codes[i] = byte;
    }
    op.scales.resize(size_t(rows * op.blocks()));
    for (int64_t line = 0; line < rows; ++line)
        for (int64_t b = 0; b < op.blocks(); ++b) {
            const uint32_t r = counter_random24(seed ^ 0x5CA1Eu, uint64_t(line * op.blocks() + b));
            const int64_t flat = line * op.blocks() + b;
            const int row_base = int(counter_random24(seed ^ 0xBA5Eu, uint64_t(line)) % 41) - 20;
            int s = spread == Spread::narrow      ? 127 + int(r % 17) - 8
                    : spread == Spread::window    ? 127 + int(r % 15) - 7
                    : spread == Spread::int8_rows ? 127 + row_base + int(r % 4)
                    : spread == Spread::int8_flat ? 127 + int(r % 4)
                    : spread == Spread::int8_rows_two ? 127 + row_base + int(r % 8)
                    : spread == Spread::int8_flat_two ? 127 + int(r % 8)
                                                  : 127 + ((r & 1u) ? 50 : -50) + int((r >> 1) % 3) - 1;
            if (spread == Spread::wide && flat % 11 == 5) s = 0;
            op.scales[size_t(flat)] = uint8_t(s);
            if (spread == Spread::wide && flat % 7 == 3)
                for (int64_t i = 0; i < kMxBlock; ++i) {
                    const int64_t at = b * kMxBlock + i;
                    if (e == MxElement::e2m1) op.codes[size_t(line * (k / 2) + at / 2)] &= (at & 1) ? 0x0Fu : 0xF0u;
                    else op.codes[size_t(line * k + at)] = 0;
                }
        }
    return op;
}

// C = A · Bᵀ in double from the FP32 dequantized values, and S = Σ |a·b| (NaN where the product is NaN).
struct Reference {
    std::vector<double> value, magnitude;
};

Reference cpu_reference(const HostOperand& a, const HostOperand& b) {
    Reference r;
    r.value.assign(size_t(a.rows * b.rows), 0.0);
    r.magnitude.assign(r.value.size(), 0.0);
    std::vector<double> av(size_t(a.rows * a.k)), bv(size_t(b.rows * b.k));
    for (int64_t i = 0; i < a.rows; ++i)
        for (int64_t kk = 0; kk < a.k; ++kk) av[size_t(i * a.k + kk)] = a.value(i, kk);
    for (int64_t j = 0; j < b.rows; ++j)
        for (int64_t kk = 0; kk < b.k; ++kk) bv[size_t(j * b.k + kk)] = b.value(j, kk);
    for (int64_t i = 0; i < a.rows; ++i)
        for (int64_t j = 0; j < b.rows; ++j) {
            double s = 0, m = 0;
            for (int64_t kk = 0; kk < a.k; ++kk) {
                const double p = av[size_t(i * a.k + kk)] * bv[size_t(j * b.k + kk)];
                s += p;
                m += std::fabs(p);
            }
            r.value[size_t(i * b.rows + j)] = s;
            r.magnitude[size_t(i * b.rows + j)] = m;
        }
    return r;
}

struct DeviceOperand {
    DeviceBuffer<uint8_t> codes, scales;
    MxElement element;
    explicit DeviceOperand(const HostOperand& h) : codes(to_device(h.codes)), scales(to_device(h.scales)), element(h.element) {}
    MxGemmOperand view() const { return {codes.data(), scales.data(), element}; }
};

// Runs the GEMM with FP32 or BF16 output and returns C as FP32.
std::vector<float> run_gemm(const HostOperand& a, const HostOperand& b, bool bf16_out, MxGemmScratch* scratch = nullptr,
                            MxGemmFold fold = MxGemmFold::b_columns) {
    DeviceOperand da(a), db(b);
    const int64_t m = a.rows, n = b.rows;
    std::vector<float> out(size_t(m * n));
    if (bf16_out) {
        DeviceBuffer<uint16_t> c = poisoned<uint16_t>(size_t(m * n));
        mx_gemm_fp8_cuda(da.view(), db.view(), m, n, a.k, nullptr, bf16_ptr(c), 0, scratch, fold);
        device_sync();
        out = from_bf16(to_host(c));
    } else {
        DeviceBuffer<float> c = poisoned<float>(size_t(m * n));
        mx_gemm_fp8_cuda(da.view(), db.view(), m, n, a.k, c.data(), nullptr, 0, scratch, fold);
        device_sync();
        out = to_host(c);
    }
    return out;
}

struct Bound {
    bool mxfp8 = false;           // either operand E4M3: the tensor core's block partial is inexact
    bool against_emulation = false;
    bool bf16_out = false;
};

// Every element within its bound (NaN exactly where the reference is NaN); prints the worst ratio.
::testing::AssertionResult within_bound(const std::vector<float>& got, const Reference& ref, int64_t k, Bound b, const char* what) {
    const double u = std::ldexp(1.0, -24);
    const double fp32 = (double(k) + double(k) / 32 + (b.against_emulation ? double(k) : 0.0)) * u;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double want = ref.value[i], s = ref.magnitude[i];
        if (std::isnan(want) || std::isnan(got[i])) {
            if (std::isnan(want) != std::isnan(got[i]))
                return ::testing::AssertionFailure() << what << ": element " << i << " is " << got[i] << ", expected " << want;
            continue;
        }
        double tol = fp32 * s + (b.mxfp8 ? std::ldexp(s, -8) : 0.0) + double(k) * std::ldexp(1.0, -126);
        if (b.bf16_out) tol += std::ldexp(std::fabs(want) + tol, -8);
        const double err = std::fabs(double(got[i]) - want);
        if (!(err <= tol))
            return ::testing::AssertionFailure() << what << ": element " << i << " is " << got[i] << ", expected " << want
                                                 << " (error " << err << ", bound " << tol << ", S " << s << ")";
        if (tol > 0) worst = std::max(worst, err / tol);
    }
    std::printf("[ %s: worst error / bound = %.3g ]\n", what, worst);
    return ::testing::AssertionSuccess();
}

struct GemmShape {
    int64_t m, n, k;
};
// 128³ (one tile, one stage), odd M/N with K = 3 blocks (a partial stage), K = 32, one row/column, tiles of
// 128 plus a remainder with K = 5 blocks.
const GemmShape kGemmShapes[] = {{128, 128, 128}, {77, 200, 96}, {64, 64, 32}, {1, 1, 32}, {130, 257, 160}};

std::string shape_name(GemmShape s) { return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k); }

void expect_matches_reference(MxElement ea, MxElement eb, Spread spread, uint64_t seed, MxGemmFold fold = MxGemmFold::b_columns,
                              Spread spread_b = Spread::narrow, bool own_b_spread = false) {
    for (const GemmShape& s : kGemmShapes) {
        const HostOperand a = random_operand(s.m, s.k, ea, spread, seed),
                          b = random_operand(s.n, s.k, eb, own_b_spread ? spread_b : spread, seed + 1);
        const Reference ref = cpu_reference(a, b);
        with_and_without_tma([&] {
            for (bool bf16_out : {false, true}) {
                const std::string what = shape_name(s) + (bf16_out ? " bf16" : " fp32") + (cuda_tma_usable() ? " wgmma" : " simt");
                Bound bound;
                bound.mxfp8 = ea == MxElement::e4m3 || eb == MxElement::e4m3;
                bound.bf16_out = bf16_out;
                EXPECT_TRUE(within_bound(run_gemm(a, b, bf16_out, nullptr, fold), ref, s.k, bound, what.c_str()));
            }
        });
    }
}

PreparedOperandCuda prepared_operand(const HostOperand& h, Side side) {
    PreparedOperandCuda p;
    p.side = side;
    p.strategy = Strategy::plain;
    p.quantized = true;
    p.element = h.element;
    p.rows = side == Side::left ? h.rows : h.k;
    p.cols = side == Side::left ? h.k : h.rows;
    p.codes = to_device(h.codes);
    p.scales = to_device(h.scales);
    return p;
}

// The emulated product (dequantize to BF16, cuBLAS) of the same operands: value and S (from the operands'
// magnitudes), as a Reference.
Reference emulated_reference(LpMatmulCuda& emulation, const HostOperand& a, const HostOperand& b) {
    const int64_t m = a.rows, n = b.rows;
    DeviceBuffer<float> c(size_t(m * n));
    Reference r;
    for (bool magnitude : {false, true}) {
        const PreparedOperandCuda pa = prepared_operand(magnitude ? a.magnitudes() : a, Side::left);
        const PreparedOperandCuda pb = prepared_operand(magnitude ? b.magnitudes() : b, Side::right);
        emulation.matmul_prepared(pa, pb, LpMatmulOptions{}, c.data());
        device_sync();
        const std::vector<float> v = to_host(c);
        (magnitude ? r.magnitude : r.value).assign(v.begin(), v.end());
    }
    return r;
}

// Structured operands whose product has a single non-zero term per output element, so C is exact on every
// path (no summation, no accumulator rounding) and a wrong tile layout shows as a permutation: row i of A holds
// one value at k = i % K, row j of B a value that depends on (j, k), both with varying block scales. A mix-up
// of rows, columns, K slices, K blocks, fragment registers or scale factors moves values to wrong places.
HostOperand single_term_operand(int64_t rows, int64_t k, MxElement e, bool left) {
    HostOperand op;
    op.element = e;
    op.rows = rows;
    op.k = k;
    op.codes.assign(size_t(e == MxElement::e2m1 ? rows * k / 2 : rows * k), 0);
    op.scales.resize(size_t(rows * op.blocks()));
    for (int64_t line = 0; line < rows; ++line) {
        for (int64_t b = 0; b < op.blocks(); ++b)
            op.scales[size_t(line * op.blocks() + b)] = uint8_t(left ? 125 + line % 5 : 126 + (line + b) % 4);
        for (int64_t i = 0; i < k; ++i) {
            if (left && i != line % k) continue;
            const int64_t key = left ? line : line + 3 * i;
            const uint32_t sign = ((line + i) & 1) ? 1u : 0u;
            // E2M1 codes 1–7 (0.5 … 6); E4M3 bytes 0x30–0x57 (0.5 … 15): never zero, never NaN.
            const uint32_t code = e == MxElement::e2m1 ? uint32_t(1 + key % 7) | (sign << 3) : uint32_t(0x30 + key % 40) | (sign << 7);
            if (e == MxElement::e2m1) op.codes[size_t(line * (k / 2) + i / 2)] |= uint8_t((i & 1) ? code << 4 : code);
            else op.codes[size_t(line * k + i)] = uint8_t(code);
        }
    }
    return op;
}

// Exact equality with the reference, naming the first few wrong elements by row and column.
::testing::AssertionResult exactly_equal(const std::vector<float>& got, const Reference& ref, int64_t n, const std::string& what) {
    int64_t wrong = 0;
    std::string first;
    for (size_t i = 0; i < got.size(); ++i) {
        if (double(got[i]) == ref.value[i]) continue;
        if (++wrong <= 6)
            first += " (row " + std::to_string(int64_t(i) / n) + ", col " + std::to_string(int64_t(i) % n) + "): " +
                     std::to_string(got[i]) + " vs " + std::to_string(ref.value[i]) + ";";
    }
    if (wrong == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << wrong << " of " << got.size() << " elements differ, e.g." << first;
}

}  // namespace

TEST(MxGemmFp8, ExpandE2m1IsExactInE4m3) {
    REQUIRE_GPU();
    const int64_t rows = 3, k = 512;  // 768 packed bytes: every byte value three times
    std::vector<uint8_t> packed(size_t(rows * k / 2));
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t(i);
    auto d_packed = to_device(packed);
    DeviceBuffer<uint8_t> d_out = poisoned<uint8_t>(size_t(rows * k));
    mx_expand_e2m1_to_e4m3_cuda(d_packed.data(), rows, k, d_out.data(), 0);
    const std::vector<uint8_t> out = to_host(d_out);
    const ElementSpec e2m1 = element_spec(ElementType::e2m1), e4m3 = element_spec(ElementType::e4m3);
    for (size_t i = 0; i < out.size(); ++i) {
        const uint32_t code = (i & 1) ? packed[i / 2] >> 4 : packed[i / 2] & 0xFu;
        ASSERT_EQ(float_bits(decode_element(e4m3, out[i])), float_bits(decode_element(e2m1, code)))
            << "element " << i << ": E2M1 code " << code << " became E4M3 byte " << int(out[i]);
    }
}

// The layout probe: exact results for single-term products (see single_term_operand), MXFP4 and MXFP8, one
// warpgroup's 64 rows (64 × 64 × 32), one full tile and stage (A a scaled identity), partial tiles over two
// stages.
TEST(MxGemmFp8, SingleTermProductsAreExactAndInPlace) {
    REQUIRE_GPU();
    for (MxElement e : {MxElement::e2m1, MxElement::e4m3})
        for (const GemmShape& s : {GemmShape{64, 64, 32}, GemmShape{128, 128, 128}, GemmShape{200, 136, 256}}) {
            const HostOperand a = single_term_operand(s.m, s.k, e, true), b = single_term_operand(s.n, s.k, e, false);
            const Reference ref = cpu_reference(a, b);
            with_and_without_tma([&] {
                const std::string what = shape_name(s) + (e == MxElement::e2m1 ? " mxfp4" : " mxfp8") +
                                         (cuda_tma_usable() ? " wgmma" : " simt");
                EXPECT_TRUE(exactly_equal(run_gemm(a, b, false), ref, s.n, what));
            });
        }
}

TEST(MxGemmFp8, Mxfp4MatchesExactProduct) {
    REQUIRE_GPU();
    expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::narrow, 11);
}

TEST(MxGemmFp8, Mxfp4AdversarialScaleSpreadAndZeroBlocks) {
    REQUIRE_GPU();
    expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::wide, 21);
}

TEST(MxGemmFp8, Mxfp4FoldedScalesMatchExactProduct) {
    REQUIRE_GPU();
    expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::window, 15);
}

// Folding B's column scales (the header's "Scale folding") changes only where the column factor is applied:
// with scales inside the 14-binade window every tile-block folds and C is bit for bit the unfolded
// product's; one tile-block spanning 15 binades is counted and computed by the per-column path, the result
// still bit-identical. Shapes: partial tiles and stages, and 2300 × 2048 × 2048 (persistent tiles).
TEST(MxGemmFp8, FoldedScalesAreBitIdenticalAndCountedOutsideTheWindow) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "folding is the sm_90a kernel's";
    MxGemmScratch scratch;
    for (const GemmShape& s : {GemmShape{130, 257, 160}, GemmShape{256, 384, 512}, GemmShape{2300, 2048, 2048}}) {
        const HostOperand a = random_operand(s.m, s.k, MxElement::e2m1, Spread::narrow, 17);
        HostOperand b = random_operand(s.n, s.k, MxElement::e2m1, Spread::window, 18);
        const std::vector<float> unfolded = run_gemm(a, b, false, &scratch, MxGemmFold::none);
        EXPECT_TRUE(exactly_equal(run_gemm(a, b, false, &scratch), Reference{{unfolded.begin(), unfolded.end()}, {}}, s.n,
                                  shape_name(s) + " folded vs unfolded"));
        EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 0u) << shape_name(s);
        // Tile 0, block 1: every row at 120 but row 5 at 135 (15 binades): that tile-block stays unfolded.
        for (int64_t row = 0; row < std::min<int64_t>(128, s.n); ++row) b.scales[size_t(row * b.blocks() + 1)] = row == 5 ? 135 : 120;
        const std::vector<float> unfolded_edge = run_gemm(a, b, false, &scratch, MxGemmFold::none);
        EXPECT_TRUE(exactly_equal(run_gemm(a, b, false, &scratch), Reference{{unfolded_edge.begin(), unfolded_edge.end()}, {}}, s.n,
                                  shape_name(s) + " one tile-block outside the window"));
        EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 1u) << shape_name(s);
    }
}

// INT8 stages (the header's "INT8 stages"): every stage inside the window (rows with bases 40 binades apart,
// B flat) takes the chained path; narrow and wide spreads (outside the window, zero blocks, scale byte 0) the
// per-block path; A inside but B outside mixes them per output tile and chunk. All against the exact product.
TEST(MxGemmFp8, Int8StagesMatchExactProduct) {
    REQUIRE_GPU();
    for (const MxGemmFold fold : {MxGemmFold::int8_stages, MxGemmFold::int8_stages_columns}) {
        SCOPED_TRACE(fold == MxGemmFold::int8_stages ? "tile bases for B" : "column bases for B");
        expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::int8_rows, 91, fold, Spread::int8_flat, true);
        expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::narrow, 93, fold);
        expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::wide, 95, fold);
        expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::int8_rows, 97, fold, Spread::narrow, true);
        // B's rows 40 binades apart: outside for tile bases, inside for column bases
        expect_matches_reference(MxElement::e2m1, MxElement::e2m1, Spread::int8_rows, 96, fold, Spread::int8_rows, true);
    }
    // Chunk counts whose chained loop ends in a 2- and a 1-chunk step (7 = 4 + 2 + 1, 3 = 2 + 1; 2 stages per chunk,
    // the last one partial at K = 1760).
    if (!cuda_tma_usable()) return;
    for (const GemmShape& s : {GemmShape{200, 130, 1792}, GemmShape{129, 260, 768}, GemmShape{70, 140, 1760}}) {
        const HostOperand a = random_operand(s.m, s.k, MxElement::e2m1, Spread::int8_rows, 98),
                          b = random_operand(s.n, s.k, MxElement::e2m1, Spread::int8_flat, 99);
        MxGemmScratch scratch;
        EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch, MxGemmFold::int8_stages), cpu_reference(a, b), s.k, Bound{},
                                 (shape_name(s) + " int8 chained").c_str()));
        EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 0u) << shape_name(s);
    }
}

// Block `block` (of 8) of `chunk` in `line` set `binades` above every other block of the chunk in that line: with
// 4 … 7 the chunk takes two planes (under either fold of B, for the spreads int8_rows and int8_flat, whose chunks span
// ≤ 3), with 8 or more it is outside.
void push_block(HostOperand& op, int64_t line, int64_t chunk, int binades, int64_t block = 1) {
    const int64_t kb0 = chunk * 8;
    int highest = 0;
    for (int64_t kb = kb0; kb < kb0 + 8 && kb < op.blocks(); ++kb)
        if (kb != kb0 + block) highest = std::max<int>(highest, op.scales[size_t(line * op.blocks() + kb)]);
    op.scales[size_t(line * op.blocks() + kb0 + block)] = uint8_t(highest + binades);
}

// One INT8-stage product a · bᵀ with a fresh scratch (two planes unless single_plane), its window counts checked
// against the CPU census (adahop/int8_window.h: A per line, B per line or per tile by the fold); returns the product.
std::vector<float> int8_product_checking_counts(const HostOperand& a, const HostOperand& b, MxGemmFold fold, bool single_plane,
                                                const std::string& what) {
    const bool per_line = fold == MxGemmFold::int8_stages_columns;
    const Int8WindowCensus ca = int8_window_census(a.codes.data(), a.scales.data(), a.rows, a.k, true, kInt8WindowBinades, !single_plane);
    const Int8WindowCensus cb = int8_window_census(b.codes.data(), b.scales.data(), b.rows, b.k, per_line, kInt8WindowBinades, !single_plane);
    MxGemmScratch scratch;
    scratch.single_plane = single_plane;
    std::vector<float> c = run_gemm(a, b, false, &scratch, fold);
    EXPECT_EQ(int64_t(mx_gemm_fp8_unfolded_blocks(scratch)), ca.outside() + cb.outside()) << what;
    EXPECT_EQ(int64_t(mx_gemm_fp8_two_plane_units(scratch)), ca.with_two_planes() + cb.with_two_planes()) << what;
    return c;
}

// The path is decided per (output tile, chunk): chunks outside the window at the start and the end of K, next to each
// other, between chained runs of every step length (1, 2, 4 + 1, …), and past the first 64-chunk word of bits
// (K = 17408: 68 chunks, two words per tile), in A's tile 0 (7 chunks) and tile 1 (1) and in B's tile 1 (2), so
// every output tile mixes the two paths differently. Against the exact product; all 10 triples counted.
TEST(MxGemmFp8, Int8StagesDecidePerChunk) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "the INT8 stages are the sm_90a kernel's";
    const int64_t m = 200, n = 260, k = 17408;
    HostOperand a = random_operand(m, k, MxElement::e2m1, Spread::int8_rows, 111);
    HostOperand b = random_operand(n, k, MxElement::e2m1, Spread::int8_flat, 112);
    // Block 1 of `chunk` in `line` 8 binades above every other block of the chunk in that line: outside.
    for (const int64_t c : {0, 3, 4, 9, 63, 64, 67}) push_block(a, 5, c, 8);
    push_block(a, 150, 10, 8);
    for (const int64_t c : {5, 66}) push_block(b, 131, c, 8);
    const Reference exact = cpu_reference(a, b);
    for (const MxGemmFold fold : {MxGemmFold::int8_stages, MxGemmFold::int8_stages_columns}) {
        MxGemmScratch scratch;
        EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch, fold), exact, k, Bound{},
                                 fold == MxGemmFold::int8_stages ? "int8 stages, chunks outside here and there"
                                                                 : "int8 stages with column bases, chunks outside here and there"));
        EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 10u);  // B's pushed block is outside by either rule
    }
    const MxGemmWindowGeometry g = mx_gemm_fp8_window_geometry(m, n, k, MxElement::e2m1, MxElement::e2m1, MxGemmFold::int8_stages);
    EXPECT_EQ(g.chunks, 68);
    EXPECT_EQ(g.chunk_words, 2);
}

// Two planes (the header's "Two planes"): a chunk spanning 4 … 7 binades chains with a high plane on the side that
// needs it, and goes block by block where both sides do. Uniform cases (K = 2048): A's rows spread over 8 binades
// each (every A tile-chunk two-plane) against one-plane B, the mirror, and both two-plane. Then a mix over K = 17408
// (68 chunks, two words of bits): runs of two-plane chunks in A's tile 0 (up to and across the word boundary), a
// chunk outside and a two-plane one in its tile 1, two-plane chunks of B's tile 1 that meet A's (block by block
// there) or not, B's tile 2 with a chunk outside and a two-plane one, and high planes of 1, 2, 3 and 8 blocks, so
// the producer's extra stages, the compacted high planes and the consumers' steps must agree in every output tile. Each against the exact product, under both folds of B, with
// the counts of the CPU census (adahop/int8_window.h); single_plane computes the same products within the same bound.
TEST(MxGemmFp8, Int8StagesTwoPlanes) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "the INT8 stages are the sm_90a kernel's";
    const int64_t m = 200, n = 260;
    const auto check = [&](const HostOperand& a, const HostOperand& b, const std::string& what) {
        const Reference exact = cpu_reference(a, b);
        for (const MxGemmFold fold : {MxGemmFold::int8_stages, MxGemmFold::int8_stages_columns})
            for (const bool single_plane : {false, true}) {
                const std::string name = what + (fold == MxGemmFold::int8_stages_columns ? ", column bases" : ", tile bases") +
                                         (single_plane ? ", one plane" : "");
                EXPECT_TRUE(within_bound(int8_product_checking_counts(a, b, fold, single_plane, name), exact, a.k, Bound{}, name.c_str()));
            }
    };
    const HostOperand a_two = random_operand(m, 2048, MxElement::e2m1, Spread::int8_rows_two, 151);
    EXPECT_EQ(int8_window_census(a_two.codes.data(), a_two.scales.data(), m, 2048, true).with_two_planes(), 2 * 8);  // every A unit
    check(a_two, random_operand(n, 2048, MxElement::e2m1, Spread::int8_flat, 152), "A two-plane");
    check(random_operand(m, 2048, MxElement::e2m1, Spread::int8_flat, 153), random_operand(n, 2048, MxElement::e2m1, Spread::int8_flat_two, 154),
          "B two-plane");
    check(random_operand(m, 2048, MxElement::e2m1, Spread::int8_flat_two, 155),
          random_operand(n, 2048, MxElement::e2m1, Spread::int8_flat_two, 156), "both two-plane");

    const int64_t k = 17408;
    HostOperand a = random_operand(m, k, MxElement::e2m1, Spread::int8_rows, 157);
    HostOperand b = random_operand(n, k, MxElement::e2m1, Spread::int8_flat, 158);
    // 4 binades over a line's highest keep its chunk within 7 over its smallest (two planes); 8 or more: outside
    for (const int64_t c : {0, 1, 2, 3, 8, 9, 10, 11, 12, 40, 63, 64, 67}) push_block(a, 5, c, 4);
    push_block(a, 150, 9, 8);
    push_block(a, 150, 20, 4);
    for (const int64_t c : {2, 9, 30, 64}) push_block(b, 131, c, 4);
    push_block(b, 259, 3, 9);
    push_block(b, 259, 66, 4);
    // high planes of several blocks, compacted: A's tile 0 chunk 8 holds blocks 1, 3 and 6 up, B's tile 1 chunk 30
    // blocks 1 and 7, B's tile 0 chunk 50 all eight
    push_block(a, 60, 8, 4, 6);
    push_block(a, 100, 8, 4, 3);
    push_block(b, 200, 30, 4, 7);
    for (int64_t blk = 0; blk < 8; ++blk) push_block(b, 10 + blk, 50, 4, blk);
    check(a, b, "mixed");
    MxGemmScratch scratch;
    run_gemm(a, b, false, &scratch, MxGemmFold::int8_stages_columns);
    const std::vector<uint8_t> a_blocks = to_host(scratch.a_high_blocks), b_blocks = to_host(scratch.b_high_blocks);
    const int64_t chunks = k / 256;
    EXPECT_EQ(int(a_blocks[size_t(0 * chunks + 8)]), (1 << 1) | (1 << 3) | (1 << 6));
    EXPECT_EQ(int(a_blocks[size_t(0 * chunks + 40)]), 1 << 1);
    EXPECT_EQ(int(b_blocks[size_t(1 * chunks + 30)]), (1 << 1) | (1 << 7));
    EXPECT_EQ(int(b_blocks[size_t(0 * chunks + 50)]), 0xFF);
}

// B whose lines sit 40 binades apart (int8_rows) but span ≤ 3 each: with one base per 128-line tile every B unit is
// outside (the real-model case of bench/results/int8_window_smollm2_cpu_devbox.md); with one base per column none is.
TEST(MxGemmFp8, Int8StagesColumnBasesFitLinesFarApart) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "the INT8 stages are the sm_90a kernel's";
    const int64_t m = 256, n = 384, k = 1024;  // 2 + 3 tiles, 4 chunks: 20 units, 12 of them B's
    const HostOperand a = random_operand(m, k, MxElement::e2m1, Spread::int8_flat, 121);
    const HostOperand b = random_operand(n, k, MxElement::e2m1, Spread::int8_rows, 122);
    const Reference exact = cpu_reference(a, b);
    MxGemmScratch scratch;
    EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch, MxGemmFold::int8_stages), exact, k, Bound{}, "tile bases"));
    EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 12u);
    EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch, MxGemmFold::int8_stages_columns), exact, k, Bound{}, "column bases"));
    EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 0u);
}

// The pack pass's window decisions against their CPU reference (adahop/int8_window.h): the count of units outside
// equals the CPU census of A (per line) plus B's (per tile, or per line for column bases), on spreads that put some,
// all or none outside, with zero blocks and scale byte 0 (wide), a partial tile and a partial chunk.
TEST(MxGemmFp8, Int8WindowCountsMatchTheCpuReference) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "the INT8 stages are the sm_90a kernel's";
    const int64_t m = 300, n = 200, k = 1312;  // 3 + 2 tiles, 6 chunks (the last 32 deep)
    for (const Spread spread : {Spread::narrow, Spread::wide, Spread::int8_rows, Spread::int8_flat, Spread::window,
                                Spread::int8_rows_two, Spread::int8_flat_two}) {
        const HostOperand a = random_operand(m, k, MxElement::e2m1, spread, 131), b = random_operand(n, k, MxElement::e2m1, spread, 132);
        for (const MxGemmFold fold : {MxGemmFold::int8_stages, MxGemmFold::int8_stages_columns})
            for (const bool single_plane : {false, true})
                int8_product_checking_counts(a, b, fold, single_plane,
                                             "spread " + std::to_string(int(spread)) +
                                                 (fold == MxGemmFold::int8_stages_columns ? ", column bases" : ", tile bases") +
                                                 (single_plane ? ", one plane" : ", two planes"));
    }
}

// Which tiles take which path is counted: none outside the window for int8_rows × int8_flat (2300 × 2048 ×
// 2048: persistent tiles, 16 stages), then one row of A pushed 4 binades up in one block: exactly that
// (operand, tile, chunk) is counted, and the result stays within bound of the emulation.
TEST(MxGemmFp8, Int8StagesCountTheStagesOutsideTheWindow) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "the INT8 stages are the sm_90a kernel's";
    const int64_t m = 2300, n = 2048, k = 2048;
    LpMatmulCuda emulation;
    MxGemmScratch scratch;
    HostOperand a = random_operand(m, k, MxElement::e2m1, Spread::int8_rows, 101);
    const HostOperand b = random_operand(n, k, MxElement::e2m1, Spread::int8_flat, 102);
    Bound bound;
    bound.against_emulation = true;
    EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch, MxGemmFold::int8_stages), emulated_reference(emulation, a, b), k, bound,
                             "int8 stages, all chained"));
    EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 0u);
    const int64_t row = 1000, block = 9;  // tile 7, the third stage
    int highest = 0;
    for (int64_t kb = 0; kb < 16; ++kb)  // 8 binades above every neighbour: outside, whatever the chunk length
        if (kb != block) highest = std::max<int>(highest, a.scales[size_t(row * a.blocks() + kb)]);
    a.scales[size_t(row * a.blocks() + block)] = uint8_t(highest + 8);
    EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch, MxGemmFold::int8_stages), emulated_reference(emulation, a, b), k, bound,
                             "int8 stages, one row-stage outside"));
    EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 1u);
    EXPECT_EQ(mx_gemm_fp8_two_plane_units(scratch), 0u);
    a.scales[size_t(row * a.blocks() + block)] = uint8_t(highest + 4);  // 4 binades: two planes instead
    EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch, MxGemmFold::int8_stages), emulated_reference(emulation, a, b), k, bound,
                             "int8 stages, one row-stage with two planes"));
    EXPECT_EQ(mx_gemm_fp8_unfolded_blocks(scratch), 0u);
    EXPECT_EQ(mx_gemm_fp8_two_plane_units(scratch), 1u);
}

TEST(MxGemmFp8, Mxfp8MatchesExactProductWithinAccumulatorBound) {
    REQUIRE_GPU();
    expect_matches_reference(MxElement::e4m3, MxElement::e4m3, Spread::narrow, 31);
    expect_matches_reference(MxElement::e4m3, MxElement::e4m3, Spread::wide, 41);
}

TEST(MxGemmFp8, MixedMxfp4TimesMxfp8) {
    REQUIRE_GPU();
    expect_matches_reference(MxElement::e2m1, MxElement::e4m3, Spread::narrow, 51);
}

// A NaN scale (0xFF) in one block of row 5 of A and of column 9 of B: that whole row and column of C are NaN,
// the rest is finite and within bound. E4M3 NaN codes do the same.
TEST(MxGemmFp8, NanScalesAndCodesPropagateToTheirRowsAndColumns) {
    REQUIRE_GPU();
    const int64_t m = 150, n = 140, k = 256;
    for (MxElement e : {MxElement::e2m1, MxElement::e4m3}) {
        HostOperand a = random_operand(m, k, e, Spread::narrow, 61), b = random_operand(n, k, e, Spread::narrow, 62);
        a.scales[size_t(5 * a.blocks() + 3)] = kE8m0Nan;
        b.scales[size_t(9 * b.blocks() + 7)] = kE8m0Nan;
        if (e == MxElement::e4m3) {
            a.codes[size_t(140 * k + 200)] = 0x7F;  // a NaN code in row 140 (the second M-tile)
            b.codes[size_t(131 * k + 17)] = 0xFF;   // and in column 131 (the second N-tile)
        }
        const Reference ref = cpu_reference(a, b);
        for (MxGemmFold fold : {MxGemmFold::b_columns, MxGemmFold::int8_stages}) with_and_without_tma([&] {
            const std::vector<float> got = run_gemm(a, b, false, nullptr, fold);
            for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(got[size_t(5 * n + j)])) << "row 5, column " << j;
            for (int64_t i = 0; i < m; ++i) EXPECT_TRUE(std::isnan(got[size_t(i * n + 9)])) << "row " << i << ", column 9";
            EXPECT_FALSE(std::isnan(got[size_t(6 * n + 10)]));
            Bound bound;
            bound.mxfp8 = e == MxElement::e4m3;
            EXPECT_TRUE(within_bound(got, ref, k, bound, e == MxElement::e2m1 ? "NaN scales mxfp4" : "NaN scales/codes mxfp8"));
        });
    }
}

// The emulation (today's lp_matmul GPU path) as the reference on a large shape: 2300 × 2048 × 2048 is 18 × 16 =
// 288 tiles, more than two per CTA on the H200's 132 SMs, so the persistent loop carries the pipeline's slots
// and phases from tile to tile; 16 stages per tile wrap around the 5 slots; the last tile group has 2 M-tiles
// and the last M-tile 124 rows. Scratch is reused between the calls.
TEST(MxGemmFp8, LargeShapeMatchesEmulation) {
    REQUIRE_GPU();
    const int64_t m = 2300, n = 2048, k = 2048;
    LpMatmulCuda emulation;
    MxGemmScratch scratch;
    for (MxElement e : {MxElement::e2m1, MxElement::e4m3}) {
        const HostOperand a = random_operand(m, k, e, Spread::narrow, 71), b = random_operand(n, k, e, Spread::narrow, 72);
        const Reference ref = emulated_reference(emulation, a, b);
        Bound bound;
        bound.mxfp8 = e == MxElement::e4m3;
        bound.against_emulation = true;
        const char* what = e == MxElement::e2m1 ? "2300x2048x2048 mxfp4" : "2300x2048x2048 mxfp8";
        for (int rep = 0; rep < 2; ++rep) EXPECT_TRUE(within_bound(run_gemm(a, b, false, &scratch), ref, k, bound, what));
    }
}

// Operands from the quantizer itself (LpMatmulCuda::prepare, Strategy::plain, Gaussian data): the GEMM reads
// the prepared codes and scales as they are and agrees with matmul_prepared.
TEST(MxGemmFp8, PreparedOperandsMatchLpMatmulPlain) {
    REQUIRE_GPU();
    const int64_t m = 200, n = 96, k = 320;
    LpMatmulCuda emulation;
    const auto x = gaussian(m, k, 81), w = gaussian(k, n, 82);  // A: M × K, B: K × N (lp_matmul's orientation)
    auto dx = to_device(x), dw = to_device(w);
    LpMatmulOptions o;
    const PreparedOperandCuda pa = emulation.prepare(dx.data(), m, k, Side::left, Strategy::plain, o);
    const PreparedOperandCuda pb = emulation.prepare(dw.data(), k, n, Side::right, Strategy::plain, o);
    DeviceBuffer<float> want(size_t(m * n)), got(size_t(m * n));
    emulation.matmul_prepared(pa, pb, o, want.data());
    mx_gemm_fp8_cuda({pa.codes.data(), pa.scales.data(), MxElement::e2m1}, {pb.codes.data(), pb.scales.data(), MxElement::e2m1}, m, n,
                     k, got.data(), nullptr, 0);
    device_sync();
    // S from the host copies of the same codes: |x|·|w| products summed.
    HostOperand ha{MxElement::e2m1, m, k, download(pa.codes, pa.codes.size()), download(pa.scales, pa.scales.size())};
    HostOperand hb{MxElement::e2m1, n, k, download(pb.codes, pb.codes.size()), download(pb.scales, pb.scales.size())};
    Reference ref = cpu_reference(ha, hb);
    const std::vector<float> emulated = to_host(want);
    Bound bound;
    EXPECT_TRUE(within_bound(to_host(got), ref, k, bound, "prepared operands vs exact"));
    ref.value.assign(emulated.begin(), emulated.end());
    bound.against_emulation = true;
    EXPECT_TRUE(within_bound(to_host(got), ref, k, bound, "prepared operands vs lp_matmul plain"));
}

TEST(MxGemmFp8, EmptyReductionWritesZeros) {
    REQUIRE_GPU();
    DeviceBuffer<float> c = poisoned<float>(12);
    const uint8_t* none = nullptr;
    mx_gemm_fp8_cuda({none, none, MxElement::e2m1}, {none, none, MxElement::e2m1}, 3, 4, 0, c.data(), nullptr, 0);
    device_sync();
    for (float v : to_host(c)) EXPECT_EQ(float_bits(v), 0u);
}

// With beta the epilogue adds the old C: bit for bit the product written alone plus beta · old (beta 0.5 and 1 make
// beta · old exact, so the one rounding is the sum's, as in lp_matmul's store), for every schedule, both kernels, and
// an empty reduction (beta · old).
TEST(MxGemmFp8, AccumulatesIntoTheOutputWithBeta) {
    REQUIRE_GPU();
    for (const GemmShape& s : kGemmShapes) {
        const HostOperand a = random_operand(s.m, s.k, MxElement::e2m1, Spread::narrow, 71),
                          b = random_operand(s.n, s.k, MxElement::e2m1, Spread::narrow, 72);
        const DeviceOperand da(a), db(b);
        std::vector<float> old(size_t(s.m * s.n));
        for (size_t i = 0; i < old.size(); ++i) old[i] = float(int(i % 11) - 5) * 0.375f;
        with_and_without_tma([&] {
            for (MxGemmFold fold : {MxGemmFold::none, MxGemmFold::b_columns, MxGemmFold::int8_stages, MxGemmFold::int8_stages_columns})
                for (float beta : {0.5f, 1.0f}) {
                    SCOPED_TRACE(shape_name(s) + " fold " + std::to_string(int(fold)) + " beta " + std::to_string(beta) +
                                 (cuda_tma_usable() ? " wgmma" : " simt"));
                    MxGemmScratch scratch;
                    const std::vector<float> alone = run_gemm(a, b, false, &scratch, fold);
                    DeviceBuffer<float> c = to_device(old);
                    mx_gemm_fp8_cuda(da.view(), db.view(), s.m, s.n, s.k, c.data(), nullptr, 0, &scratch, fold, beta);
                    device_sync();
                    const std::vector<float> got = to_host(c);
                    for (size_t i = 0; i < got.size(); ++i)
                        ASSERT_EQ(float_bits(got[i]), float_bits(alone[i] + beta * old[i])) << "element " << i;
                }
        });
    }
    std::vector<float> old = {1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 7.0f};
    DeviceBuffer<float> c = to_device(old);
    const uint8_t* none = nullptr;
    mx_gemm_fp8_cuda({none, none, MxElement::e2m1}, {none, none, MxElement::e2m1}, 2, 3, 0, c.data(), nullptr, 0, nullptr,
                     MxGemmFold::b_columns, 0.5f);
    device_sync();
    const std::vector<float> got = to_host(c);
    for (size_t i = 0; i < old.size(); ++i) EXPECT_EQ(float_bits(got[i]), float_bits(0.0f + 0.5f * old[i]));
}

// Argument errors are raised before anything touches the device (no GPU needed).
TEST(MxGemmFp8, RefusesBadArguments) {
    alignas(16) static const uint8_t bytes[64] = {};
    const MxGemmOperand ok{bytes, bytes, MxElement::e2m1};
    float* c = reinterpret_cast<float*>(16);  // never written: every call below throws first
    expect_error(ErrorKind::input, [&] { mx_gemm_fp8_cuda(ok, ok, 4, 4, 48, c, nullptr, 0); });
    expect_error(ErrorKind::input, [&] { mx_gemm_fp8_cuda(ok, ok, -1, 4, 32, c, nullptr, 0); });
    expect_error(ErrorKind::usage, [&] { mx_gemm_fp8_cuda(ok, ok, 4, 4, 32, nullptr, nullptr, 0); });
    __nv_bfloat16* c16 = reinterpret_cast<__nv_bfloat16*>(16);
    expect_error(ErrorKind::usage, [&] { mx_gemm_fp8_cuda(ok, ok, 4, 4, 32, nullptr, c16, 0, nullptr, MxGemmFold::b_columns, 1.0f); });
    expect_error(ErrorKind::usage, [&] { mx_gemm_fp8_cuda(ok, {bytes, bytes, MxElement::e2m3}, 4, 4, 32, c, nullptr, 0); });
    expect_error(ErrorKind::usage, [&] { mx_gemm_fp8_cuda(ok, {bytes, nullptr, MxElement::e2m1}, 4, 4, 32, c, nullptr, 0); });
    expect_error(ErrorKind::input, [&] { mx_expand_e2m1_to_e4m3_cuda(bytes, 2, 48, nullptr, 0); });
}
