// gguf_decode_only.h — ggml block formats lowbit reads (to load models that contain them) but never
// writes: Q5_0 and Q5_1 (32 elements; the 5th bit of every element sits in a 32-bit mask) and Q6_K
// (a 256-element super-block of sixteen 16-element groups with int8 sub-scales). Byte layouts as in
// ggml's ggml-common.h; the dequantizers compute exactly what ggml's dequantize_row_* and gguf-py's
// NumPy code compute, in FP32.
#pragma once

#include <cstdint>

namespace lowbit {

#pragma pack(push, 1)
struct BlockQ5_0 {
    uint16_t d;       // fp16 scale
    uint8_t qh[4];    // bit j (little-endian u32) = 5th bit of element j
    uint8_t qs[16];   // low 4 bits: element j low nibble, element j+16 high nibble; value (q − 16)·d
};
struct BlockQ5_1 {
    uint16_t d;       // fp16 scale
    uint16_t m;       // fp16 minimum
    uint8_t qh[4];
    uint8_t qs[16];   // value q·d + m
};
struct BlockQ6_K {
    uint8_t ql[128];  // low 4 bits of the 6-bit codes
    uint8_t qh[64];   // high 2 bits
    int8_t scales[16];
    uint16_t d;       // fp16 super-block scale; value d·scales[g]·(q − 32)
};
#pragma pack(pop)
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes");
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block must be 24 bytes");
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");

enum class GgufDecodeOnlyType : uint8_t { q5_0, q5_1, q6_k };

int gguf_decode_only_block_elements(GgufDecodeOnlyType t);  // 32, 32, 256
int gguf_decode_only_block_bytes(GgufDecodeOnlyType t);     // 22, 24, 210

// Dequantizes n values (n a multiple of the block size) from packed blocks.
void gguf_dequantize_decode_only(GgufDecodeOnlyType t, const uint8_t* blocks, int64_t n, float* out);

}  // namespace lowbit
