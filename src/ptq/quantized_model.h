// quantized_model.h — what `lowbit quantize` produces, before export: the model in FP32 with every
// quantized linear replaced by its dequantized weights (so the runtime evaluates it as is), the codes and
// grids of those linears (what the exporters pack), and a record of how it was made (GGUF metadata,
// safetensors quantization_config, the JSON report). A streamed quantization can spill finished blocks'
// linears to their checkpoint files (PtqOptions::spill_blocks): exporters then read them back one block at
// a time through linear().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

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
    bool act_order_row = false;  // rows of two-sided layers by descending diag(H_out) per head
    bool true_sequential = false;  // statistics per input, after the block's earlier layers were quantized
    bool static_groups = false;    // grouped grids fitted from the input weights before the sweep
    double damping = 0.01;
};

// A quantized linear's grid and shape, without its codes.
struct LinearInfo {
    GridSpec spec;
    int64_t rows = 0, cols = 0;
};

struct QuantizedModel {
    LlamaModel model;                                // FP32; quantized linears hold their dequantized values
    std::map<std::string, QuantizedWeight> linears;  // in memory, by linear_name(layer, projection): "blk.3.attn_q"
    // Spilled blocks, by block: the file that holds its seven linears (quantize's block checkpoint) and what
    // they are; they are not in `linears`. Exporters reach every linear through the accessors below.
    struct SpilledBlockFile {
        std::string path;
        std::vector<LinearInfo> linears;  // kProjections order
    };
    std::map<int64_t, SpilledBlockFile> spilled;
    QuantizationRecord record;

    // Every quantized linear's name, in memory or spilled, sorted (block by block: "blk.0.*", "blk.1.*", …).
    std::vector<std::string> linear_names() const;
    bool has_linear(const std::string& name) const;
    LinearInfo linear_info(const std::string& name) const;  // without reading a spilled file; Error(usage) if none
    // The linear `name` (Error(usage) when there is none): the entry of `linears`, or its spilled block read
    // back. The last block read stays cached, so a pass in name order reads each file once. Not thread-safe.
    std::shared_ptr<const QuantizedWeight> linear(const std::string& name) const;

   private:
    struct SpilledBlock {
        int64_t layer = -1;
        std::vector<QuantizedWeight> weights;  // kProjections order
    };
    mutable std::shared_ptr<const SpilledBlock> cached_;
};

// The seven linears of a block checkpoint file, in kProjections order (Error(input) when it is missing,
// truncated or corrupt). quantize.cpp writes and reads these files.
std::vector<QuantizedWeight> read_block_checkpoint(const std::string& path);

}  // namespace lowbit
