// gguf_blocks.h — the ggml/GGUF block formats Q4_0, Q4_1, Q8_0 and MXFP4 with their exact byte layouts
// (interop.md §3). Quantizers follow ggml's reference quantizers (`quantize_row_*_ref`, which
// gguf-py's NumPy code reproduces) operation for operation in FP32, so files we write are what
// llama.cpp would write. Blocks run along rows (GGUF rows are contiguous); 32 elements per block.
// Nibble order (Q4_0, Q4_1, MXFP4): byte qs[j] holds element j (low nibble) and element j+16 (high).
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit {

constexpr int kGgufBlock = 32;

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
struct BlockQ8_0 {
    uint16_t d;       // fp16 scale
    int8_t qs[32];    // value q·d
};
struct BlockMxfp4 {
    uint8_t e;        // E8M0 scale
    uint8_t qs[16];   // E2M1 codes, value kvalues[q]·2^(e−128) (doubled table, halved scale)
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must be 20 bytes");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");
static_assert(sizeof(BlockMxfp4) == 17, "MXFP4 block must be 17 bytes");

enum class GgufBlockType : uint8_t { q4_0, q4_1, q8_0, mxfp4 };

int gguf_block_bytes(GgufBlockType t);
const char* gguf_block_name(GgufBlockType t);

// Quantizes n values (n a multiple of 32) to packed blocks; dequantizes them back.
std::vector<uint8_t> gguf_quantize_row(GgufBlockType t, const float* x, int64_t n);
void gguf_dequantize_row(GgufBlockType t, const uint8_t* blocks, int64_t n, float* out);

// Whole matrices (blocks along rows), rows quantized in parallel; the bytes of row r start at
// r·(cols/32)·block_bytes.
std::vector<uint8_t> gguf_quantize_matrix(GgufBlockType t, const float* x, int64_t rows, int64_t cols);
void gguf_dequantize_matrix(GgufBlockType t, const uint8_t* blocks, int64_t rows, int64_t cols, float* out);

}  // namespace lowbit
