// gguf_blocks.h — the byte layouts of the ggml block formats lowbit reads or writes (interop.md §3, ggml's
// ggml-common.h) and their block codecs. The rest of lowbit reaches these codecs through the type table
// in formats/gguf_types.h, which also holds each type's block size and byte count.
//
// Encoders follow the quantizers llama-quantize runs without an importance matrix — ggml's reference
// quantizers `quantize_row_*_ref` (which gguf-py's NumPy code reproduces for the 32-element types), and
// quantize_iq4_nl for IQ4_NL — operation for operation in FP32, so files we write are what llama.cpp would
// write; decoders compute exactly what ggml's dequantize_row_* computes. Blocks run along rows (GGUF rows are contiguous).
// Nibble order (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): byte qs[j] holds element j (low nibble) and j+16 (high).
#pragma once

#include <cstddef>
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
struct BlockIq4Nl {
    uint16_t d;       // fp16 scale
    uint8_t qs[16];   // 4-bit indices into kIq4nlValues (formats/iq4nl.h), value d·kIq4nlValues[q]
};
// K-quants: super-blocks of 256 elements (formats/kquants.h has the field meanings and the codec). The
// element order inside qs/ql/qh/hmask is in kquants.cpp (bit planes).
struct BlockQ2_K {
    uint8_t scales[16];  // sub-block j (16 elements): low nibble scale code, high nibble min code
    uint8_t qs[64];      // 2-bit codes
    uint16_t d;          // fp16 super-block scale of the scale codes
    uint16_t dmin;       // fp16 super-block scale of the min codes
};
struct BlockQ3_K {
    uint8_t hmask[32];   // high bit of the 3-bit codes
    uint8_t qs[64];      // low 2 bits
    uint8_t scales[12];  // sixteen 6-bit scale codes (value code − 32)
    uint16_t d;          // fp16 super-block scale
};
struct BlockQ4_K {
    uint16_t d;          // fp16 super-block scale of the scale codes
    uint16_t dmin;       // fp16 super-block scale of the min codes
    uint8_t scales[12];  // eight 6-bit scale codes and eight 6-bit min codes (ggml's get_scale_min_k4)
    uint8_t qs[128];     // 4-bit codes
};
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];  // as Q4_K
    uint8_t qh[32];      // 5th bit of the codes
    uint8_t qs[128];     // low 4 bits
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
struct BlockNvfp4 {   // 64 elements: four sub-blocks of 16
    uint8_t d[4];     // UE4M3 sub-block scales; value kvalues[q]·gguf_ue4m3_half(d[s])
    uint8_t qs[32];   // sub-block s: byte 8s + j holds element 16s + j (low nibble) and 16s + 8 + j (high)
};
#pragma pack(pop)

static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockNvfp4) == 36 && offsetof(BlockNvfp4, qs) == 4);
static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, qs) == 16 && offsetof(BlockQ2_K, d) == 80 &&
              offsetof(BlockQ2_K, dmin) == 82);
static_assert(sizeof(BlockQ3_K) == 110 && offsetof(BlockQ3_K, qs) == 32 && offsetof(BlockQ3_K, scales) == 96 &&
              offsetof(BlockQ3_K, d) == 108);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, dmin) == 2 && offsetof(BlockQ4_K, scales) == 4 &&
              offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ5_K) == 176 && offsetof(BlockQ5_K, scales) == 4 && offsetof(BlockQ5_K, qh) == 16 &&
              offsetof(BlockQ5_K, qs) == 48);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 &&
              offsetof(BlockQ6_K, d) == 208);

// ggml's kvalues_mxfp4: the E2M1 values doubled (MXFP4 blocks halve their scale to match; ggml's NVFP4
// blocks use the same table).
inline constexpr int8_t kMxfp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ggml's code packing of a 32-element block (the nibble order above), from codes q[0..31]:
//   gguf_pack_nibbles32  qs[16] = the low 4 bits of the codes (Q4_0, Q4_1, IQ4_NL, MXFP4)
//   gguf_pack_q5_codes   the same low nibbles in qs[16] and the 5th bits in qh[4] (Q5_0, Q5_1)
void gguf_pack_nibbles32(const uint8_t* q, uint8_t* qs);
void gguf_pack_q5_codes(const uint8_t* q, uint8_t* qh, uint8_t* qs);

// ggml's GGML_FP32_TO_FP16 (round to nearest even, overflow to Inf, NaN kept as a quiet NaN with its sign)
// and GGML_FP16_TO_FP32, on the bits.
uint16_t gguf_fp16_from_float(float x);
float gguf_fp16_to_float(uint16_t h);

// ggml's UE4M3 scale byte of NVFP4 (ggml_ue4m3_to_fp32 / ggml_fp32_to_ue4m3): decoding ignores bit 7, reads
// exponent (bias 7, 0 = subnormal m·2^-9) and 3 mantissa bits and halves the value (the doubled E2M1 table);
// 0x00 and 0x7F decode to 0. Encoding: ≤ 0 or NaN → 0, clamp to 448, round half up on the 4th mantissa bit
// (subnormals: ⌊x·512 + 0.5⌋), exponents ≥ 15 saturate to 0x7E.
float gguf_ue4m3_half(uint8_t code);
uint8_t gguf_ue4m3_from_float(float x);

// Block codecs: `n_blocks` consecutive blocks ↔ n_blocks·(block elements) floats. Encoders exist for the
// types lowbit writes; a type it only reads has a decoder alone.
void gguf_encode_q4_0(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q4_1(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q8_0(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q5_0(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q5_1(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_mxfp4(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_nvfp4(const float* x, int64_t n_blocks, uint8_t* out);  // ggml's quantize_row_nvfp4_ref
void gguf_encode_iq4_nl(const float* x, int64_t n_blocks, uint8_t* out);  // llama-quantize's search (iq4nl.h)
void gguf_decode_q4_0(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q4_1(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q5_0(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q5_1(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q8_0(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_mxfp4(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_nvfp4(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_iq4_nl(const uint8_t* blocks, int64_t n_blocks, float* out);
// K-quants (defined in kquants.cpp): encoders = kquant_fit without weights (ggml's quantize_row_q*_K_ref).
void gguf_encode_q2_k(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q3_k(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q4_k(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q5_k(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_encode_q6_k(const float* x, int64_t n_blocks, uint8_t* out);
void gguf_decode_q2_k(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q3_k(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q4_k(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q5_k(const uint8_t* blocks, int64_t n_blocks, float* out);
void gguf_decode_q6_k(const uint8_t* blocks, int64_t n_blocks, float* out);

// The scalar types, one element per "block": F32 (bits copied), F16 and BF16 (round to nearest even on
// encode; every bit kept on decode, NaN payloads included).
void gguf_encode_f32(const float* x, int64_t n, uint8_t* out);
void gguf_encode_f16(const float* x, int64_t n, uint8_t* out);
void gguf_encode_bf16(const float* x, int64_t n, uint8_t* out);
void gguf_decode_f32(const uint8_t* bytes, int64_t n, float* out);
void gguf_decode_f16(const uint8_t* bytes, int64_t n, float* out);
void gguf_decode_bf16(const uint8_t* bytes, int64_t n, float* out);

}  // namespace lowbit
