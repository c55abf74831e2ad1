// export_safetensors.h — a QuantizedModel as a Hugging Face safetensors checkpoint, two ways:
//
//   gptq        GPTQ-packed (interop.md §6, GPTQModel's layout: model/gptq_tensors.h): every quantized
//               projection as qweight / qzeros / scales (FP16) / g_idx, `quantization_config` in config.json
//               (quant_method gptq, bits, group_size (−1 per channel), desc_act false, sym, checkpoint_format
//               gptq or gptq_v2, pack_dtype int32, lm_head false, damp_percent, and lowbit's record under
//               "lowbit"), the other tensors dense (FP16 by default, torch_dtype to match: what GPTQ
//               checkpoints hold and what vLLM's GPTQ kernels run). transformers (through GPTQModel), vLLM and
//               lowbit's own reader (ModelReader, `lowbit eval`) load it.
//   fake_quant  the dequantized FP32 model as an ordinary checkpoint (model/hf_export.h), the record in
//               config.json under "lowbit_quantization": any grid, read by anything that reads HF Llamas.
// The record (both packings) holds QuantizationRecord's fields, the activation format of W·A quantization
// ("activations": "int4" or "none") among them: safetensors_recorded_activations reads it back.
//
// What GPTQ packing holds: int grids of 2, 3, 4 or 8 bits (value = scale·(q − zero), offset 0, zero an
// integer in 0..2^b − 1 (≥ 1 for checkpoint_format gptq, which stores zero − 1)), one grid for every
// projection of every block (quantization_config is global), K·bits and N·bits multiples of 32, the group
// dividing K. Anything else is refused with Error(usage) naming the linear: GGUF grids go to GGUF, other
// bit widths to fake_quant. Groups are contiguous in the original column order (lowbit's grids), so
// desc_act is false and g_idx[k] = k / G even for act-order solves.
//
// Exactness. The file's dequantization equals QuantizedWeight::dequantize() bit for bit when the scales
// are FP16-representable; scales are written as FP16, so where the solver's are not, the report counts the
// groups and output rows affected and the largest relative change of a scale (it does not differ silently).
// q/k rows (adjacent RoPE order in memory for GGUF-arch llama models) are un-permuted to HF order together
// with their codes, scales and zeros.
//
// vLLM's Marlin kernels take sym 4/8-bit, group −1/32/64/128, desc_act false: `marlin_compatible`. Marlin's
// tiles also want N % 64 == 0 and K % 128 == 0 per linear (older vLLM refuses other shapes, newer pads):
// `marlin_tile_shapes`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gptq_tensors.h"
#include "model/hf_export.h"
#include "ptq/quantized_model.h"

namespace lowbit {

enum class SafetensorsPacking : uint8_t { gptq, fake_quant };
const char* safetensors_packing_name(SafetensorsPacking p);  // "gptq" | "fake_quant"

struct SafetensorsExportOptions {
    GptqZeroConvention gptq_zeros = GptqZeroConvention::v1;    // gptq: checkpoint_format gptq (v1) or gptq_v2
    SafetensorsDtype gptq_dense_dtype = SafetensorsDtype::F16;  // gptq: the unquantized tensors (F32, F16, BF16)
    uint64_t max_shard_bytes = kHfShardBytes;
};

struct QuantizedExportReport {
    HfExportReport hf;  // files, tensor count, bytes, q/k un-permuted
    SafetensorsPacking packing = SafetensorsPacking::gptq;
    int64_t quantized_linears = 0;
    std::string format;  // the projections' grid (GridSpec::describe)
    // gptq only:
    int bits = 0;
    int64_t group_size = 0;  // as written: −1 per channel
    bool sym = false;
    std::string checkpoint_format;
    bool marlin_compatible = false;
    bool marlin_tile_shapes = false;
    std::string marlin_note;             // why not, when not
    int64_t scales_not_fp16 = 0;         // groups whose scale changed when written as FP16
    int64_t rows_not_fp16 = 0;           // output rows (over all linears) with at least one such group
    int64_t groups = 0;                  // groups written
    double max_scale_rel_change = 0;     // max |fp16(s) − s| / |s|

    nlohmann::json to_json() const;
};

// Writes `qm` into out_dir (created; files replaced atomically one by one). Error(usage) for what the
// packing cannot hold (nothing is written then: every linear is checked and packed first), Error(runtime)
// when a quantized linear's dense weights in qm.model differ from its codes' dequantization.
// The activation format recorded in the lowbit record of a checkpoint directory's config.json (or of that
// config.json itself): "" when it records none (not a lowbit export, or an older one). Error(input) on a
// config.json that cannot be read or parsed.
std::string safetensors_recorded_activations(const std::string& checkpoint);

QuantizedExportReport export_quantized_safetensors(const QuantizedModel& qm, const std::string& out_dir,
                                                   SafetensorsPacking packing,
                                                   const SafetensorsExportOptions& opt = {});

}  // namespace lowbit
