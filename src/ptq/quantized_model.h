// quantized_model.h — what `lowbit quantize` produces, before export: the model in FP32 with every
// quantized linear replaced by its dequantized weights (so the runtime evaluates it as is), the codes and
// grids of those linears (what the exporters pack), and a record of how it was made (GGUF metadata,
// safetensors quantization_config, the JSON report).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/weights.h"
#include "ptq/grid.h"

namespace lowbit {

struct QuantizationRecord {
    std::string method;          // "rtn" | "gptq" | "boa" | "turboboa"
    std::string features;        // "f1,f2,f3" (turboboa), "" otherwise
    std::string format;          // GridSpec::describe() of the projections, or the mix name ("q4_k_m")
    std::string calibration;     // "sotu-train 32x512 seed 0", "" for rtn
    std::string rotation;        // "none" | rotate.h's describe()
    std::string activations = "none";  // the per-token activation format of W·A quantization ("int4"), or "none"
                                       // (parse_activation_spec reads it back; `lowbit eval` applies it by default)
    bool act_order = false;
    double damping = 0.01;
};

struct QuantizedModel {
    LlamaModel model;                                // FP32; quantized linears hold their dequantized values
    std::map<std::string, QuantizedWeight> linears;  // by linear_name(layer, projection): "blk.3.attn_q"
    QuantizationRecord record;
};

}  // namespace lowbit
