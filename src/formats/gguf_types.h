// gguf_types.h — everything lowbit knows about ggml tensor types, in one table (kGgufTypes): the ggml type
// id, its name, the block shape (elements and bytes, as gguf-py's GGML_QUANT_SIZES with QK_K = 256), and
// the block decoder and encoder where lowbit has them (an encoder writes what llama-quantize writes without
// an importance matrix). A type lowbit cannot write has a null encoder, one it cannot read a null decoder;
// there is no other list. The GGUF reader and writer (io/gguf_file.h), the `formats` registry, the CLI's
// messages and the exporters all read this table, so a new encoder (say IQ4_XS) is one function filled
// into its row.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf_blocks.h"

namespace lowbit {

// ggml_type ids (interop.md §2.6). A GGUF file may hold ids not listed here (a newer llama.cpp).
enum class GgufType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

// Block codecs over `n_blocks` consecutive blocks (see gguf_blocks.h).
using GgufDecodeFn = void (*)(const uint8_t* blocks, int64_t n_blocks, float* out);
using GgufEncodeFn = void (*)(const float* x, int64_t n_blocks, uint8_t* out);

struct GgufTypeInfo {
    GgufType type;
    const char* name;         // ggml's name: "Q4_0", "BF16", ...
    int64_t block_elements;   // 1 for the scalar types
    int64_t block_bytes;
    GgufDecodeFn decode;      // nullptr: lowbit cannot dequantize this type
    GgufEncodeFn encode;      // nullptr: lowbit cannot write this type from floats
    const char* format_name;  // weight formats: the name in the `formats` registry once it has an encoder
    const char* description;  // weight formats: one line for `formats list`
};

// Sorted by type id.
inline constexpr GgufTypeInfo kGgufTypes[] = {
    {GgufType::F32, "F32", 1, 4, gguf_decode_f32, gguf_encode_f32, nullptr, nullptr},
    {GgufType::F16, "F16", 1, 2, gguf_decode_f16, gguf_encode_f16, nullptr, nullptr},
    {GgufType::Q4_0, "Q4_0", 32, 18, gguf_decode_q4_0, gguf_encode_q4_0, "q4_0",
     "GGUF Q4_0: 4-bit, fp16 scale per 32 (ggml reference)"},
    {GgufType::Q4_1, "Q4_1", 32, 20, gguf_decode_q4_1, gguf_encode_q4_1, "q4_1",
     "GGUF Q4_1: 4-bit, fp16 scale + min per 32 (ggml reference)"},
    {GgufType::Q5_0, "Q5_0", 32, 22, gguf_decode_q5_0, gguf_encode_q5_0, "q5_0",
     "GGUF Q5_0: 5-bit, fp16 scale per 32 (ggml reference)"},
    {GgufType::Q5_1, "Q5_1", 32, 24, gguf_decode_q5_1, gguf_encode_q5_1, "q5_1",
     "GGUF Q5_1: 5-bit, fp16 scale + min per 32 (ggml reference)"},
    {GgufType::Q8_0, "Q8_0", 32, 34, gguf_decode_q8_0, gguf_encode_q8_0, "q8_0",
     "GGUF Q8_0: 8-bit, fp16 scale per 32 (ggml reference)"},
    {GgufType::Q8_1, "Q8_1", 32, 40, nullptr, nullptr, nullptr, nullptr},  // ggml's activation type
    {GgufType::Q2_K, "Q2_K", 256, 84, gguf_decode_q2_k, gguf_encode_q2_k, "q2_k",
     "GGUF Q2_K: 2-bit, 4-bit scale + min per 16, fp16 super-scales per 256 (ggml reference)"},
    {GgufType::Q3_K, "Q3_K", 256, 110, gguf_decode_q3_k, gguf_encode_q3_k, "q3_k",
     "GGUF Q3_K: 3-bit, 6-bit scale per 16, fp16 super-scale per 256 (ggml reference)"},
    {GgufType::Q4_K, "Q4_K", 256, 144, gguf_decode_q4_k, gguf_encode_q4_k, "q4_k",
     "GGUF Q4_K: 4-bit, 6-bit scale + min per 32, fp16 super-scales per 256 (ggml reference)"},
    {GgufType::Q5_K, "Q5_K", 256, 176, gguf_decode_q5_k, gguf_encode_q5_k, "q5_k",
     "GGUF Q5_K: 5-bit, 6-bit scale + min per 32, fp16 super-scales per 256 (ggml reference)"},
    {GgufType::Q6_K, "Q6_K", 256, 210, gguf_decode_q6_k, gguf_encode_q6_k, "q6_k",
     "GGUF Q6_K: 6-bit, int8 scale per 16, fp16 super-scale per 256 (ggml reference)"},
    {GgufType::Q8_K, "Q8_K", 256, 292, nullptr, nullptr, nullptr, nullptr},  // ggml's activation type
    {GgufType::IQ2_XXS, "IQ2_XXS", 256, 66, nullptr, nullptr, nullptr, nullptr},
    {GgufType::IQ2_XS, "IQ2_XS", 256, 74, nullptr, nullptr, nullptr, nullptr},
    {GgufType::IQ3_XXS, "IQ3_XXS", 256, 98, nullptr, nullptr, nullptr, nullptr},
    {GgufType::IQ1_S, "IQ1_S", 256, 50, nullptr, nullptr, nullptr, nullptr},
    {GgufType::IQ4_NL, "IQ4_NL", 32, 18, gguf_decode_iq4_nl, gguf_encode_iq4_nl, "iq4_nl",
     "GGUF IQ4_NL: 4-bit non-linear levels, fp16 scale per 32 (llama-quantize's search)"},
    {GgufType::IQ3_S, "IQ3_S", 256, 110, nullptr, nullptr, nullptr, nullptr},
    {GgufType::IQ2_S, "IQ2_S", 256, 82, nullptr, nullptr, nullptr, nullptr},
    {GgufType::IQ4_XS, "IQ4_XS", 256, 136, nullptr, nullptr, nullptr, nullptr},
    {GgufType::I8, "I8", 1, 1, nullptr, nullptr, nullptr, nullptr},
    {GgufType::I16, "I16", 1, 2, nullptr, nullptr, nullptr, nullptr},
    {GgufType::I32, "I32", 1, 4, nullptr, nullptr, nullptr, nullptr},
    {GgufType::I64, "I64", 1, 8, nullptr, nullptr, nullptr, nullptr},
    {GgufType::F64, "F64", 1, 8, nullptr, nullptr, nullptr, nullptr},
    {GgufType::IQ1_M, "IQ1_M", 256, 56, nullptr, nullptr, nullptr, nullptr},
    {GgufType::BF16, "BF16", 1, 2, gguf_decode_bf16, gguf_encode_bf16, nullptr, nullptr},
    {GgufType::TQ1_0, "TQ1_0", 256, 54, nullptr, nullptr, nullptr, nullptr},
    {GgufType::TQ2_0, "TQ2_0", 256, 66, nullptr, nullptr, nullptr, nullptr},
    {GgufType::MXFP4, "MXFP4", 32, 17, gguf_decode_mxfp4, gguf_encode_mxfp4, "gguf_mxfp4",
     "GGUF MXFP4 block (ggml reference: floor rule, nearest)"},
    {GgufType::NVFP4, "NVFP4", 64, 36, gguf_decode_nvfp4, gguf_encode_nvfp4, "gguf_nvfp4",
     "GGUF NVFP4 block: four 16-element E2M1 sub-blocks with UE4M3 scales (ggml reference: amax/6, nearest)"},
    {GgufType::Q1_0, "Q1_0", 128, 18, nullptr, nullptr, nullptr, nullptr},
};

// The row of a type id; nullptr for ids lowbit does not know.
constexpr const GgufTypeInfo* gguf_type_info(GgufType t) {
    for (const GgufTypeInfo& info : kGgufTypes)
        if (info.type == t) return &info;
    return nullptr;
}
// By ggml name ("Q4_0"); nullptr when no type has that name.
const GgufTypeInfo* gguf_type_by_name(std::string_view name);

// "Q4_0", "BF16", ...; "unknown" for an id lowbit does not know.
const char* gguf_type_name(GgufType t);
// For messages: the name, or "unknown type id 77".
std::string gguf_type_label(GgufType t);
bool gguf_type_can_dequantize(GgufType t);
// Bytes of a tensor of n elements (n a multiple of the block size); 0 for unknown ids.
uint64_t gguf_type_bytes_for(GgufType t, uint64_t n_elements);
// For messages: "lowbit decodes F32, F16, ...; encodes F32, F16, ...".
std::string gguf_type_support();

// Row-major matrices with blocks along rows (cols a multiple of the block size); rows run in parallel and
// the bytes of row r start at r·(cols/block_elements)·block_bytes. Error(usage) for a type without an
// encoder, Error(input) for one without a decoder, both naming what lowbit supports.
std::vector<uint8_t> gguf_quantize_matrix(GgufType t, const float* x, int64_t rows, int64_t cols);
void gguf_dequantize_matrix(GgufType t, const uint8_t* blocks, int64_t rows, int64_t cols, float* out);
// With an importance matrix (`imatrix`: one non-negative weight per column, what llama-imatrix collects):
// the quantizers llama-quantize --imatrix runs, for the types lowbit has them for — the K-quants
// (kquants.h: kquant_fit with weights) and IQ4_NL (iq4nl.h); Error(usage) for the others.
std::vector<uint8_t> gguf_quantize_matrix_imatrix(GgufType t, const float* x, int64_t rows, int64_t cols,
                                                  const float* imatrix);

}  // namespace lowbit
