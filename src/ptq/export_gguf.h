// export_gguf.h — writes a QuantizedModel as a GGUF file that llama.cpp loads: the source GGUF's metadata
// (tokenizer included) and tensor order, every quantized projection as the ggml blocks of the codes and
// scales the solver chose (QuantizedWeight::gguf_bytes — nothing is re-rounded), the other tensors copied
// byte for byte from the source — or, where the model changed them (rotation: embeddings, head, norms) or a
// mix asks for another type, encoded from FP32 with ggml's reference quantizers (norms F32). A rotated,
// formerly tied model gains `output.weight`. Metadata records lowbit's method, features, format,
// calibration, rotation and activation format (W·A quantization) under `lowbit.quantization.*`, and
// general.file_type. Written atomically.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "formats/gguf_types.h"
#include "ptq/quantized_model.h"

namespace lowbit {

struct GgufExportReport {
    uint64_t bytes = 0;           // file size
    int64_t tensors = 0;
    int64_t quantized = 0;        // projections written from solver codes
    int64_t reencoded = 0;        // other tensors encoded from FP32
};

// `other_type` (may be empty) picks the type of a non-projection tensor by name ("token_embd.weight",
// "output.weight"), e.g. from a llama.cpp mix; std::nullopt keeps the source's bytes.
using OtherTensorType = std::function<std::optional<GgufType>(const std::string& name)>;

// The llama_ftype id recorded as general.file_type for a projection grid or a mix name ("q4_k_m").
uint32_t gguf_file_type_for(const std::string& format_or_mix);

// The metadata key of QuantizationRecord::activations, and what a GGUF file records there: "" when the key
// is absent (not a lowbit export, or an older one), else the format name ("int4") or "none".
constexpr const char* kGgufActivationsKey = "lowbit.quantization.activations";
std::string gguf_recorded_activations(const std::string& gguf_path);

GgufExportReport export_quantized_gguf(const QuantizedModel& q, const std::string& source_gguf, const std::string& out_path,
                                       const std::string& file_type_name, const OtherTensorType& other_type = {});

}  // namespace lowbit
