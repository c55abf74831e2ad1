// gguf_mixes.h — llama.cpp's file-type mixes (`llama-quantize MODEL OUT Q4_K_M`): the table of the mixes
// lowbit can write (their llama_ftype id, written as general.file_type, and base type), and the GGUF type
// llama-quantize gives each tensor of a model under a mix — llama_tensor_get_type of src/llama-quant.cpp
// (llama.cpp as vendored by llama-cpp-python 0.3.36, the build of tests/peer/build_llama_cpp.sh),
// reproduced for Llama-family models: which tensors are quantized at all, the per-category rules with
// their counters over attn_v and ffn_down layers, the output / token_embd rule (tied embeddings follow the
// output), and the fallback for rows that are not a multiple of the type's block (Q2_K/Q3_K → Q4_0,
// Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, then F16 when even 32 does not divide; older llama.cpp used
// IQ4_NL for Q2_K/Q3_K). Not reproduced: the rules of other architectures (Falcon, GLM5, BailingMoE3), the
// IQ* / TQ* / MXFP4_MOE mixes, and llama-quantize's overrides (--pure, --output-tensor-type,
// --token-embedding-type, --tensor-type).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf_types.h"

namespace lowbit {

// llama_ftype ids (include/llama.h) of the mixes below.
enum class LlamaFtype : uint32_t {
    Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9, Q2_K = 10, Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13,
    Q4_K_S = 14, Q4_K_M = 15, Q5_K_S = 16, Q5_K_M = 17, Q6_K = 18,
};

struct GgufMix {
    LlamaFtype ftype;
    const char* name;  // llama-quantize's name: "Q4_K_M"
    GgufType base;     // llama_ftype_get_default_type
};

inline constexpr GgufMix kGgufMixes[] = {
    {LlamaFtype::Q4_0, "Q4_0", GgufType::Q4_0},       {LlamaFtype::Q4_1, "Q4_1", GgufType::Q4_1},
    {LlamaFtype::Q5_0, "Q5_0", GgufType::Q5_0},       {LlamaFtype::Q5_1, "Q5_1", GgufType::Q5_1},
    {LlamaFtype::Q8_0, "Q8_0", GgufType::Q8_0},       {LlamaFtype::Q2_K, "Q2_K", GgufType::Q2_K},
    {LlamaFtype::Q3_K_S, "Q3_K_S", GgufType::Q3_K},   {LlamaFtype::Q3_K_M, "Q3_K_M", GgufType::Q3_K},
    {LlamaFtype::Q3_K_L, "Q3_K_L", GgufType::Q3_K},   {LlamaFtype::Q4_K_S, "Q4_K_S", GgufType::Q4_K},
    {LlamaFtype::Q4_K_M, "Q4_K_M", GgufType::Q4_K},   {LlamaFtype::Q5_K_S, "Q5_K_S", GgufType::Q5_K},
    {LlamaFtype::Q5_K_M, "Q5_K_M", GgufType::Q5_K},   {LlamaFtype::Q6_K, "Q6_K", GgufType::Q6_K},
};

// By name, case-insensitive ("q4_k_m"); Error(usage) listing the mixes when unknown.
const GgufMix& gguf_mix_by_name(std::string_view name);

// What llama.cpp's type choice reads of the model (llama_hparams).
struct MixModel {
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int n_experts = 0;
    bool has_imatrix = false;  // llama-quantize ran with --imatrix (Q4_0/Q5_0 then lift the first ffn_down layers)
};

struct MixTensor {
    std::string name;                  // GGUF name: "blk.3.attn_v.weight"
    std::vector<int64_t> ne;           // ggml order, ne[0] = row length
    GgufType type = GgufType::F32;     // its type in the source file, kept by tensors that are not quantized
};

// The type of each tensor (in the order given) in llama-quantize's output. llama-quantize visits the
// tensors by layer number, then by name (llama_model_loader's weights_map), and its counters follow that
// order; this function does the same whatever the input order. Error(input) for an expert model whose
// FFN tensor name carries no valid layer number (llama.cpp throws there too).
std::vector<GgufType> gguf_mix_types(const GgufMix& mix, const MixModel& model, const std::vector<MixTensor>& tensors);

}  // namespace lowbit
