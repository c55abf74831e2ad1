// gguf_blocks.cpp — the GGUF block codecs, mirroring ggml's `*_ref` quantizers and dequantize_row_* step by
// step in FP32 (interop.md §3.4–3.7), and the F32/F16/BF16 element codecs of GGUF tensors.
#include "formats/gguf_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bits.h"
#include "formats/element_codec.h"

namespace lowbit {

namespace {

constexpr int kQk = 32;  // elements of the 32-element blocks (ggml's QK4_0, QK8_0, QK_MXFP4, ...)

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

uint32_t load_u32_le(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Runs `codec(src_block, dst_block)` over n consecutive blocks of the packed type Block.
template <typename Block, typename Codec>
void each_encoded_block(const float* x, int64_t n_blocks, uint8_t* out, Codec codec) {
    for (int64_t b = 0; b < n_blocks; ++b)
        codec(x + b * kQk, reinterpret_cast<Block*>(out + b * int64_t(sizeof(Block))));
}
template <typename Block, int kElements = kQk, typename Codec>
void each_decoded_block(const uint8_t* blocks, int64_t n_blocks, float* out, Codec codec) {
    for (int64_t b = 0; b < n_blocks; ++b)
        codec(*reinterpret_cast<const Block*>(blocks + b * int64_t(sizeof(Block))), out + b * kElements);
}

void quantize_q4_0(const float* x, BlockQ4_0* y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQk; ++j)
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
    for (int j = 1; j < kQk; ++j) {
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
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    for (int j = 0; j < kQk; ++j) y->qs[j] = int8_t(std::round(x[j] * id));  // half away from zero
}

void quantize_mxfp4(const float* x, BlockMxfp4* y) {
    float amax = 0.0f;
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    // ggml: floorf(log2f(amax)) − 2 + 127 (note: log2f can round up just below a power of two; that is
    // ggml's definition and we keep it).
    // Below 2^-125 ggml's cast to uint8 is undefined; we clamp the byte to 0 there.
    const int e_int = amax > 0.0f ? int(std::floor(std::log2(amax))) - 2 + 127 : 0;
    const uint8_t e = uint8_t(e_int < 0 ? 0 : e_int);
    const float d = e8m0_half(e);
    y->e = e;
    uint8_t q[kQk];
    for (int j = 0; j < kQk; ++j) {
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

// The 5-bit codes of a Q5 block: low nibbles from qs, the 5th bit from the qh mask.
void q5_codes(const uint8_t* qh_bytes, const uint8_t* qs, int q[kQk]) {
    const uint32_t qh = load_u32_le(qh_bytes);
    for (int j = 0; j < 16; ++j) {
        q[j] = int(qs[j] & 0xF) | int((qh >> j) & 1u) << 4;
        q[j + 16] = int(qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
    }
}

void dequantize_q6_k(const BlockQ6_K& b, float* y) {
    const float d = from_fp16(b.d);
    // Two halves of 128 elements; in half h, element i takes its low nibble from ql[64h + i%64]
    // (shifted by 4 for i ≥ 64) and its top 2 bits from qh[32h + i%32] (shifted by 2·(i/32)).
    for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        for (int i = 0; i < 128; ++i) {
            const int lo = (ql[i % 64] >> (4 * (i / 64))) & 0xF;
            const int hi = (qh[i % 32] >> (2 * (i / 32))) & 0x3;
            const int e = 128 * h + i;
            const float group_scale = d * float(b.scales[e / 16]);  // ggml: (d·sc)·q, in that order
            y[e] = group_scale * float((lo | hi << 4) - 32);
        }
    }
}

// F16/BF16 by the element codec: round to nearest even, Inf/NaN kept (Overflow::special).
void encode_16bit(ElementType t, const float* x, int64_t n, uint8_t* out) {
    const ElementSpec spec = element_spec(t);
    for (int64_t k = 0; k < n; ++k) {
        const uint16_t h = uint16_t(encode_element(spec, x[k], Rounding::nearest_even, Overflow::special));
        std::memcpy(out + 2 * k, &h, 2);
    }
}

}  // namespace

void gguf_encode_q4_0(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ4_0>(x, n_blocks, out, quantize_q4_0);
}
void gguf_encode_q4_1(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ4_1>(x, n_blocks, out, quantize_q4_1);
}
void gguf_encode_q8_0(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ8_0>(x, n_blocks, out, quantize_q8_0);
}
void gguf_encode_mxfp4(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockMxfp4>(x, n_blocks, out, quantize_mxfp4);
}

void gguf_decode_q4_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ4_0>(blocks, n_blocks, out, [](const BlockQ4_0& b, float* y) {
        const float d = from_fp16(b.d);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(int(b.qs[j] & 0xF) - 8) * d;
            y[j + 16] = float(int(b.qs[j] >> 4) - 8) * d;
        }
    });
}

void gguf_decode_q4_1(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ4_1>(blocks, n_blocks, out, [](const BlockQ4_1& b, float* y) {
        const float d = from_fp16(b.d), m = from_fp16(b.m);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(b.qs[j] & 0xF) * d + m;
            y[j + 16] = float(b.qs[j] >> 4) * d + m;
        }
    });
}

void gguf_decode_q5_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ5_0>(blocks, n_blocks, out, [](const BlockQ5_0& b, float* y) {
        const float d = from_fp16(b.d);
        int q[kQk];
        q5_codes(b.qh, b.qs, q);
        for (int j = 0; j < kQk; ++j) y[j] = d * float(q[j] - 16);
    });
}

void gguf_decode_q5_1(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ5_1>(blocks, n_blocks, out, [](const BlockQ5_1& b, float* y) {
        const float d = from_fp16(b.d), m = from_fp16(b.m);
        int q[kQk];
        q5_codes(b.qh, b.qs, q);
        for (int j = 0; j < kQk; ++j) y[j] = d * float(q[j]) + m;
    });
}

void gguf_decode_q8_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ8_0>(blocks, n_blocks, out, [](const BlockQ8_0& b, float* y) {
        const float d = from_fp16(b.d);
        for (int j = 0; j < kQk; ++j) y[j] = float(b.qs[j]) * d;
    });
}

void gguf_decode_q6_k(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ6_K, 256>(blocks, n_blocks, out, dequantize_q6_k);
}

void gguf_decode_mxfp4(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockMxfp4>(blocks, n_blocks, out, [](const BlockMxfp4& b, float* y) {
        const float d = e8m0_half(b.e);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(kMxfp4Doubled[b.qs[j] & 0xF]) * d;
            y[j + 16] = float(kMxfp4Doubled[b.qs[j] >> 4]) * d;
        }
    });
}

void gguf_encode_f32(const float* x, int64_t n, uint8_t* out) { std::memcpy(out, x, size_t(n) * 4); }
void gguf_decode_f32(const uint8_t* bytes, int64_t n, float* out) { std::memcpy(out, bytes, size_t(n) * 4); }

void gguf_encode_f16(const float* x, int64_t n, uint8_t* out) { encode_16bit(ElementType::fp16, x, n, out); }
void gguf_encode_bf16(const float* x, int64_t n, uint8_t* out) { encode_16bit(ElementType::bf16, x, n, out); }

void gguf_decode_f16(const uint8_t* bytes, int64_t n, float* out) {
    const ElementSpec fp16 = element_spec(ElementType::fp16);
    for (int64_t k = 0; k < n; ++k) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * k, 2);
        out[k] = decode_element(fp16, h);
    }
}

void gguf_decode_bf16(const uint8_t* bytes, int64_t n, float* out) {
    for (int64_t k = 0; k < n; ++k) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * k, 2);
        out[k] = bits_float(uint32_t(h) << 16);  // BF16 is the top half of an FP32: every bit kept
    }
}

}  // namespace lowbit
