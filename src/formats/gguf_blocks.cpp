// gguf_blocks.cpp — reference quantizers/dequantizers of the GGUF blocks, mirroring ggml's `*_ref` code
// step by step in FP32 (interop.md §3.4–3.7).
#include "formats/gguf_blocks.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/element_codec.h"
#include "formats/mx_block.h"

namespace lowbit {

namespace {

uint16_t to_fp16(float x) {
    return uint16_t(encode_element(element_spec(ElementType::fp16), x, Rounding::nearest_even, Overflow::special));
}
float from_fp16(uint16_t h) { return decode_element(element_spec(ElementType::fp16), h); }

// ggml's kvalues_mxfp4: E2M1 values doubled.
constexpr int8_t kMxfp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ggml_e8m0_to_fp32_half: 2^(e−128) (e = 0 and 1 are subnormal/min-normal halves).
float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
    return bits_float(bits);
}

void quantize_q4_0(const float* x, BlockQ4_0* y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kGgufBlock; ++j)
        if (amax < std::fabs(x[j])) {  // first element of largest |x| wins (signed value kept)
            amax = std::fabs(x[j]);
            max = x[j];
        }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    for (int j = 0; j < 16; ++j) {
        const float x0 = x[j] * id, x1 = x[16 + j] * id;
        const uint8_t q0 = uint8_t(std::min(15, int(x0 + 8.5f)));
        const uint8_t q1 = uint8_t(std::min(15, int(x1 + 8.5f)));
        y->qs[j] = uint8_t(q0 | q1 << 4);
    }
}

void quantize_q4_1(const float* x, BlockQ4_1* y) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kGgufBlock; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    y->m = to_fp16(min);
    for (int j = 0; j < 16; ++j) {
        const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
        const uint8_t q0 = uint8_t(std::min(15, int(x0 + 0.5f)));
        const uint8_t q1 = uint8_t(std::min(15, int(x1 + 0.5f)));
        y->qs[j] = uint8_t(q0 | q1 << 4);
    }
}

void quantize_q8_0(const float* x, BlockQ8_0* y) {
    float amax = 0.0f;
    for (int j = 0; j < kGgufBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    for (int j = 0; j < kGgufBlock; ++j) y->qs[j] = int8_t(std::round(x[j] * id));  // half away from zero
}

void quantize_mxfp4(const float* x, BlockMxfp4* y) {
    float amax = 0.0f;
    for (int j = 0; j < kGgufBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    // ggml: floorf(log2f(amax)) − 2 + 127 (note: log2f can round up just below a power of two; that is
    // ggml's definition and we keep it).
    // Below 2^-125 ggml's cast to uint8 is undefined; we clamp the byte to 0 there.
    const int e_int = amax > 0.0f ? int(std::floor(std::log2(amax))) - 2 + 127 : 0;
    const uint8_t e = uint8_t(e_int < 0 ? 0 : e_int);
    const float d = e8m0_half(e);
    y->e = e;
    uint8_t q[kGgufBlock];
    for (int j = 0; j < kGgufBlock; ++j) {
        int best = 0;
        float best_err = std::fabs(d * float(kMxfp4Doubled[0]) - x[j]);
        for (int k = 1; k < 16; ++k) {  // nearest table entry; ties keep the first
            const float err = std::fabs(d * float(kMxfp4Doubled[k]) - x[j]);
            if (err < best_err) {
                best_err = err;
                best = k;
            }
        }
        q[j] = uint8_t(best);
    }
    for (int j = 0; j < 16; ++j) y->qs[j] = uint8_t(q[j] | q[16 + j] << 4);
}

}  // namespace

int gguf_block_bytes(GgufBlockType t) {
    switch (t) {
        case GgufBlockType::q4_0: return sizeof(BlockQ4_0);
        case GgufBlockType::q4_1: return sizeof(BlockQ4_1);
        case GgufBlockType::q8_0: return sizeof(BlockQ8_0);
        case GgufBlockType::mxfp4: return sizeof(BlockMxfp4);
    }
    return 0;
}

const char* gguf_block_name(GgufBlockType t) {
    switch (t) {
        case GgufBlockType::q4_0: return "q4_0";
        case GgufBlockType::q4_1: return "q4_1";
        case GgufBlockType::q8_0: return "q8_0";
        case GgufBlockType::mxfp4: return "gguf_mxfp4";
    }
    return "?";
}

std::vector<uint8_t> gguf_quantize_row(GgufBlockType t, const float* x, int64_t n) {
    check_block_divisible(n, kGgufBlock, "row length", gguf_block_name(t));
    const int64_t nb = n / kGgufBlock, bb = gguf_block_bytes(t);
    std::vector<uint8_t> out(size_t(nb * bb));
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = out.data() + b * bb;
        const float* src = x + b * kGgufBlock;
        switch (t) {
            case GgufBlockType::q4_0: quantize_q4_0(src, reinterpret_cast<BlockQ4_0*>(dst)); break;
            case GgufBlockType::q4_1: quantize_q4_1(src, reinterpret_cast<BlockQ4_1*>(dst)); break;
            case GgufBlockType::q8_0: quantize_q8_0(src, reinterpret_cast<BlockQ8_0*>(dst)); break;
            case GgufBlockType::mxfp4: quantize_mxfp4(src, reinterpret_cast<BlockMxfp4*>(dst)); break;
        }
    }
    return out;
}

void gguf_dequantize_row(GgufBlockType t, const uint8_t* blocks, int64_t n, float* out) {
    check_block_divisible(n, kGgufBlock, "row length", gguf_block_name(t));
    const int64_t nb = n / kGgufBlock, bb = gguf_block_bytes(t);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* src = blocks + b * bb;
        float* y = out + b * kGgufBlock;
        switch (t) {
            case GgufBlockType::q4_0: {
                const auto* blk = reinterpret_cast<const BlockQ4_0*>(src);
                const float d = from_fp16(blk->d);
                for (int j = 0; j < 16; ++j) {
                    y[j] = float(int(blk->qs[j] & 0xF) - 8) * d;
                    y[j + 16] = float(int(blk->qs[j] >> 4) - 8) * d;
                }
                break;
            }
            case GgufBlockType::q4_1: {
                const auto* blk = reinterpret_cast<const BlockQ4_1*>(src);
                const float d = from_fp16(blk->d), m = from_fp16(blk->m);
                for (int j = 0; j < 16; ++j) {
                    y[j] = float(blk->qs[j] & 0xF) * d + m;
                    y[j + 16] = float(blk->qs[j] >> 4) * d + m;
                }
                break;
            }
            case GgufBlockType::q8_0: {
                const auto* blk = reinterpret_cast<const BlockQ8_0*>(src);
                const float d = from_fp16(blk->d);
                for (int j = 0; j < 32; ++j) y[j] = float(blk->qs[j]) * d;
                break;
            }
            case GgufBlockType::mxfp4: {
                const auto* blk = reinterpret_cast<const BlockMxfp4*>(src);
                const float d = e8m0_half(blk->e);
                for (int j = 0; j < 16; ++j) {
                    y[j] = float(kMxfp4Doubled[blk->qs[j] & 0xF]) * d;
                    y[j + 16] = float(kMxfp4Doubled[blk->qs[j] >> 4]) * d;
                }
                break;
            }
        }
    }
}

std::vector<uint8_t> gguf_quantize_matrix(GgufBlockType t, const float* x, int64_t rows, int64_t cols) {
    check_block_divisible(cols, kGgufBlock, "columns", gguf_block_name(t));
    const int64_t row_bytes = cols / kGgufBlock * gguf_block_bytes(t);
    std::vector<uint8_t> out(size_t(rows * row_bytes));
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            auto row = gguf_quantize_row(t, x + r * cols, cols);
            std::memcpy(out.data() + r * row_bytes, row.data(), row.size());
        }
    });
    return out;
}

void gguf_dequantize_matrix(GgufBlockType t, const uint8_t* blocks, int64_t rows, int64_t cols, float* out) {
    check_block_divisible(cols, kGgufBlock, "columns", gguf_block_name(t));
    const int64_t row_bytes = cols / kGgufBlock * gguf_block_bytes(t);
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) gguf_dequantize_row(t, blocks + r * row_bytes, cols, out + r * cols);
    });
}

}  // namespace lowbit
