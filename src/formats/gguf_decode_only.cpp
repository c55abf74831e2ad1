// gguf_decode_only.cpp — Q5_0, Q5_1 and Q6_K dequantizers (see the header for the layouts).
#include "formats/gguf_decode_only.h"

#include "core/error.h"
#include "formats/element_codec.h"

namespace lowbit {

namespace {

float fp16_value(uint16_t h) { return decode_element(element_spec(ElementType::fp16), h); }

uint32_t load_u32_le(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The 5-bit codes of a Q5 block: low nibbles from qs, the 5th bit from the qh mask.
void q5_codes(const uint8_t* qh_bytes, const uint8_t* qs, int q[32]) {
    const uint32_t qh = load_u32_le(qh_bytes);
    for (int j = 0; j < 16; ++j) {
        q[j] = int(qs[j] & 0xF) | int((qh >> j) & 1u) << 4;
        q[j + 16] = int(qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
    }
}

void dequantize_q6_k(const BlockQ6_K* b, float* y) {
    const float d = fp16_value(b->d);
    // Two halves of 128 elements; in half h, element i takes its low nibble from ql[64h + i%64]
    // (shifted by 4 for i ≥ 64) and its top 2 bits from qh[32h + i%32] (shifted by 2·(i/32)).
    for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b->ql + 64 * h;
        const uint8_t* qh = b->qh + 32 * h;
        for (int i = 0; i < 128; ++i) {
            const int lo = (ql[i % 64] >> (4 * (i / 64))) & 0xF;
            const int hi = (qh[i % 32] >> (2 * (i / 32))) & 0x3;
            const int e = 128 * h + i;
            const float group_scale = d * float(b->scales[e / 16]);  // ggml: (d·sc)·q, in that order
            y[e] = group_scale * float((lo | hi << 4) - 32);
        }
    }
}

}  // namespace

int gguf_decode_only_block_elements(GgufDecodeOnlyType t) { return t == GgufDecodeOnlyType::q6_k ? 256 : 32; }

int gguf_decode_only_block_bytes(GgufDecodeOnlyType t) {
    switch (t) {
        case GgufDecodeOnlyType::q5_0: return sizeof(BlockQ5_0);
        case GgufDecodeOnlyType::q5_1: return sizeof(BlockQ5_1);
        case GgufDecodeOnlyType::q6_k: return sizeof(BlockQ6_K);
    }
    return 0;
}

void gguf_dequantize_decode_only(GgufDecodeOnlyType t, const uint8_t* blocks, int64_t n, float* out) {
    const int be = gguf_decode_only_block_elements(t), bb = gguf_decode_only_block_bytes(t);
    LOWBIT_CHECK(n % be == 0, ErrorKind::input, "dequantize: {} values are not a multiple of the block size {}", n, be);
    for (int64_t b = 0; b < n / be; ++b) {
        const uint8_t* src = blocks + b * bb;
        float* y = out + b * be;
        int q[32];
        switch (t) {
            case GgufDecodeOnlyType::q5_0: {
                const auto* blk = reinterpret_cast<const BlockQ5_0*>(src);
                const float d = fp16_value(blk->d);
                q5_codes(blk->qh, blk->qs, q);
                for (int j = 0; j < 32; ++j) y[j] = d * float(q[j] - 16);
                break;
            }
            case GgufDecodeOnlyType::q5_1: {
                const auto* blk = reinterpret_cast<const BlockQ5_1*>(src);
                const float d = fp16_value(blk->d), m = fp16_value(blk->m);
                q5_codes(blk->qh, blk->qs, q);
                for (int j = 0; j < 32; ++j) y[j] = d * float(q[j]) + m;
                break;
            }
            case GgufDecodeOnlyType::q6_k: dequantize_q6_k(reinterpret_cast<const BlockQ6_K*>(src), y); break;
        }
    }
}

}  // namespace lowbit
