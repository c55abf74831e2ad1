// gguf_blocks.h — the byte layouts of the ggml block formats lowbit reads or writes (interop.md §3, ggml's
// ggml-common.h) and their block codecs. The rest of lowbit reaches these codecs through the type table
// in formats/gguf_types.h, which also holds each type's block size and byte count.
//
// Encoders follow ggml's reference quantizers (`quantize_row_*_ref`, which gguf-py's NumPy code
// reproduces) operation for operation in FP32, so files we write are what llama.cpp would write; decoders
// compute exactly what ggml's dequantize_row_* computes. Blocks run along rows (GGUF rows are contiguous).
// Nibble order (Q4_0, Q4_1, Q5_0, Q5_1, MXFP4): byte qs[j] holds element j (low nibble) and j+16 (high).
#pragma once

#include <cstdint>

namespace lowbit {

#pragma pack(push, 1)
struct BlockQ4_0 {
    uint16_t d;       // fp16 scale
    uint8_t qs[16];   // codes q in 0..15, value (q − 8)·d
};
struct BlockQ4_1 {
    uint16_t d;       // fp16 scale
    uint16_t m;       // fp16 minimum
    uint8_t qs[16];   // value q·d + m
};
struct BlockQ5_0 {
    uint16_t d;       // fp16 scale
    uint8_t qh[4];    // bit j (little-endian u32) = 5th bit of element j
    uint8_t qs[16];   // low 4 bits; value (q − 16)·d
};
struct BlockQ5_1 {
    uint16_t d;       // fp16 scale
    uint16_t m;       // fp16 minimum
    uint8_t qh[4];
    uint8_t qs[16];   // value q·d + m
};
struct BlockQ8_0 {
    uint16_t d;       // fp16 scale
    int8_t qs[32];    // value q·d
};
struct BlockQ6_K {    // a 256-element super-block of sixteen 16-element groups
    uint8_t ql[128];  // low 4 bits of the 6-bit codes
    uint8_t qh[64];   // high 2 bits
    int8_t scales[16];
    uint16_t d;       // fp16 super-block scale; value d·scales[g]·(q − 32)
};
struct BlockMxfp4 {
    uint8_t e;        // E8M0 scale
    uint8_t qs[16];   // E2M1 codes, value kvalues[q]·2^(e−128) (doubled table, halved scale)
};
#pragma pack(pop)

// Block codecs: `n_blocks` consecutive blocks ↔ n_blocks·(block elements) floats. Encoders exist for the
// types lowbit writes; a type it only reads has a decoder alone.
void gguf_encode_q4_0(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q4_1(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q8_0(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_mxfp4(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_decode_q4_0(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q4_1(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q5_0(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q5_1(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q8_0(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q6_k(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_mxfp4(const uint8_t* blocks, int64_t n_blocks, float* out);

// The scalar types, one element per "block": F32 (bits copied), F16 and BF16 (round to nearest even on
// encode; every bit kept on decode, NaN payloads included).
void gguf_encode_f32(const float* x, int64_t n, uint8_t* out);
void gguf_encode_f16(const float* x, int64_t n, uint8_t* out);
void gguf_encode_bf16(const float* x, int64_t n, uint8_t* out);
void gguf_decode_f32(const uint8_t* bytes, int64_t n, float* out);
void gguf_decode_f16(const uint8_t* bytes, int64_t n, float* out);
void gguf_decode_bf16(const uint8_t* bytes, int64_t n, float* out);

}  // namespace lowbit
