// export_safetensors.cpp — GPTQ-packed and fake-quantized HF exports of a QuantizedModel: checks every
// linear against what GPTQ packing holds (and the FP16 rounding of its scales) before anything is written,
// then hands the model to the HF exporter with a hook that packs each projection in HF row order.
#include "ptq/export_safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "core/error.h"
#include "formats/element_codec.h"
#include "model/linear.h"

namespace lowbit {

namespace {

float round_to_fp16(float x) {
    const ElementSpec h = element_spec(ElementType::fp16);
    return decode_element(h, encode_element(h, x, Rounding::nearest_even, Overflow::special));
}

nlohmann::json record_json(const QuantizationRecord& r) {
    return {{"method", r.method},       {"features", r.features}, {"format", r.format},
            {"calibration", r.calibration}, {"rotation", r.rotation}, {"act_order", r.act_order},
            {"act_order_row", r.act_order_row}, {"true_sequential", r.true_sequential},
            {"static_groups", r.static_groups}, {"damping", r.damping}, {"activations", r.activations}};
}

SafetensorsWriteTensor int32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
    SafetensorsWriteTensor t{name, SafetensorsDtype::I32, std::move(shape), std::vector<uint8_t>(v.size() * 4)};
    if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
}

// Every projection of every block, quantized on one GPTQ-packable grid: refused (usage) otherwise. Fills the
// report's grid fields, Marlin flags and FP16 statistics.
void check_gptq_model(const QuantizedModel& qm, const SafetensorsExportOptions& opt, QuantizedExportReport& rep) {
    const LlamaConfig& c = qm.model.config;
    std::set<std::string> expected;
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (Projection p : kProjections) expected.insert(linear_name(l, p));
    for (const std::string& name : qm.linear_names())
        LOWBIT_CHECK(expected.count(name), ErrorKind::usage,
                     "GPTQ export: '{}' is not a projection of this {}-block model (blk.N.attn_q … blk.N.ffn_down)", name,
                     c.n_layers);
    std::optional<GridSpec> first;  // a copy: a spilled linear's spec goes with its block
    bool tiles = true;
    std::string tile_note;
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (Projection p : kProjections) {
            const std::string name = linear_name(l, p);
            LOWBIT_CHECK(qm.has_linear(name), ErrorKind::usage,
                         "GPTQ export: {} is not quantized; quantization_config covers every projection, so quantize all "
                         "of them or export with fake_quant",
                         name);
            const std::shared_ptr<const QuantizedWeight> held = qm.linear(name);  // a spilled block is read here
            const QuantizedWeight& q = *held;
            const GridSpec& g = q.spec;
            LOWBIT_CHECK(g.format == GridFormat::int_grid, ErrorKind::usage,
                         "GPTQ export: {} is quantized to {}, a GGUF grid; GPTQ packing holds int2/3/4/8 grids (export "
                         "{} as GGUF, or this model with fake_quant)",
                         name, g.describe(), g.name());
            LOWBIT_CHECK(gptq_bits_supported(g.bits), ErrorKind::usage,
                         "GPTQ export: {} is quantized to {}; GPTQ packing holds 2, 3, 4 or 8 bits (export with "
                         "fake_quant)",
                         name, g.describe());
            if (!first) first = g;
            LOWBIT_CHECK(g.bits == first->bits && g.group == first->group && g.sym == first->sym, ErrorKind::usage,
                         "GPTQ export: {} is {} but {} is {}; one quantization_config needs one grid for every projection "
                         "(export mixed grids with fake_quant)",
                         name, g.describe(), linear_name(0, Projection::q), first->describe());
            const int64_t N = projection_out_features(c, p), K = projection_in_features(c, p);
            LOWBIT_CHECK(q.rows == N && q.cols == K, ErrorKind::usage,
                         "GPTQ export: {} holds [{}, {}] codes, the model's projection is [{}, {}]", name, q.rows, q.cols,
                         N, K);
            const int64_t G = g.group_size(K);
            LOWBIT_CHECK(K % G == 0, ErrorKind::usage, "GPTQ export: {}: {} inputs are not a multiple of the group of {}",
                         name, K, G);
            LOWBIT_CHECK(K * g.bits % 32 == 0 && N * g.bits % 32 == 0, ErrorKind::usage,
                         "GPTQ export: {} is [{}, {}]; {}-bit GPTQ packs inputs and outputs into 32-bit words, so both "
                         "times {} must be multiples of 32 (export with fake_quant)",
                         name, N, K, g.bits, g.bits);
            LOWBIT_CHECK(q.codes.size() == size_t(N * K) && q.grids.size() == size_t(N * (K / G)), ErrorKind::usage,
                         "GPTQ export: {} has {} codes and {} grids for [{}, {}] in groups of {}", name, q.codes.size(),
                         q.grids.size(), N, K, G);
            const int max_code = g.max_code();
            for (int64_t r = 0; r < N; ++r) {
                bool row_changed = false;
                for (int64_t j = 0; j < K / G; ++j) {
                    const GroupGrid& gg = q.grids[size_t(r * (K / G) + j)];
                    LOWBIT_CHECK(gg.offset == 0.0f && gg.zero == std::floor(gg.zero) && gg.zero >= 0.0f &&
                                     gg.zero <= float(max_code),
                                 ErrorKind::usage,
                                 "GPTQ export: {} row {} group {}: zero point {} offset {} is not a GPTQ grid "
                                 "(integer zero in 0..{}, no offset)",
                                 name, r, j, gg.zero, gg.offset, max_code);
                    LOWBIT_CHECK(gg.zero >= 1.0f || opt.gptq_zeros == GptqZeroConvention::v2, ErrorKind::usage,
                                 "GPTQ export: {} row {} group {} has zero point 0, which checkpoint_format gptq (v1, "
                                 "stores zero − 1) cannot hold; export as gptq_v2 (true zeros) or use a symmetric grid",
                                 name, r, j);
                    const float s16 = round_to_fp16(gg.scale);
                    LOWBIT_CHECK(std::isfinite(s16), ErrorKind::usage,
                                 "GPTQ export: {} row {} group {}: scale {} does not fit FP16 (GPTQ stores FP16 scales)",
                                 name, r, j, gg.scale);
                    rep.groups += 1;
                    if (s16 != gg.scale) {
                        rep.scales_not_fp16 += 1;
                        row_changed = true;
                        rep.max_scale_rel_change =
                            std::max(rep.max_scale_rel_change, std::abs(double(s16) - double(gg.scale)) / std::abs(double(gg.scale)));
                    }
                }
                rep.rows_not_fp16 += row_changed;
            }
            for (uint8_t code : q.codes)
                LOWBIT_CHECK(code <= max_code, ErrorKind::usage, "GPTQ export: {} has code {} above {}'s largest, {}", name,
                             int(code), g.describe(), max_code);
            if (tiles && (N % 64 != 0 || K % 128 != 0)) {
                tiles = false;
                tile_note = fmt::format("{} is [{}, {}]: Marlin's tiles want N % 64 == 0 and K % 128 == 0 (older vLLM "
                                        "falls back to its gptq kernel, newer pads)",
                                        name, N, K);
            }
            // The model must hold what the codes decode to (or nothing, after a streamed quantization): the file
            // is written from the codes.
            const std::vector<float>& dense = projection_weight(qm.model.weights.blocks[size_t(l)], p);
            const std::vector<float> deq = dense.empty() ? dense : q.dequantize();
            int64_t differ = 0;
            for (size_t i = 0; i < deq.size(); ++i) differ += !(deq[i] == dense[i]);
            LOWBIT_CHECK(differ == 0, ErrorKind::runtime,
                         "GPTQ export: {}: {} of {} dense weights differ from the dequantized codes (the QuantizedModel "
                         "is out of sync)",
                         name, differ, deq.size());
            rep.quantized_linears += 1;
        }
    rep.format = first->describe();
    rep.bits = first->bits;
    rep.group_size = first->group == 0 ? -1 : first->group;
    rep.sym = first->sym;
    rep.checkpoint_format = gptq_checkpoint_format(opt.gptq_zeros);
    const bool marlin_bits = rep.bits == 4 || rep.bits == 8;
    const bool marlin_group = rep.group_size == -1 || rep.group_size == 32 || rep.group_size == 64 || rep.group_size == 128;
    rep.marlin_compatible = rep.sym && marlin_bits && marlin_group;
    rep.marlin_tile_shapes = tiles;
    if (!rep.marlin_compatible)
        rep.marlin_note = fmt::format("Marlin takes sym 4/8-bit grids with group −1/32/64/128 (this is {})", rep.format);
    else if (!tiles)
        rep.marlin_note = tile_note;
}

// The GPTQ tensors of one projection, rows in HF order.
std::vector<SafetensorsWriteTensor> pack_gptq(const QuantizedModel& qm, const HfLinearSlot& slot, GptqZeroConvention zc) {
    const std::string gguf_name = slot.spec->gguf_name;  // "attn_q.weight" → linear "blk.N.attn_q"
    const std::string name = fmt::format("blk.{}.{}", slot.layer, gguf_name.substr(0, gguf_name.rfind(".weight")));
    const std::shared_ptr<const QuantizedWeight> held = qm.linear(name);
    const QuantizedWeight& q = *held;
    const int64_t N = q.rows, K = q.cols, G = q.spec.group_size(K), per_row = K / G;
    std::vector<int64_t> source(static_cast<size_t>(N));  // HF row n comes from row source[n]
    if (slot.qk_heads > 0) source = qk_hf_row_sources(slot.qk_heads, qm.model.config.head_dim);
    else
        for (int64_t n = 0; n < N; ++n) source[size_t(n)] = n;
    LOWBIT_CHECK(int64_t(source.size()) == N, ErrorKind::usage, "GPTQ export: {}: {} rows are not {} heads of {}", name,
                 N, slot.qk_heads, qm.model.config.head_dim);
    std::vector<uint8_t> codes(size_t(N * K));
    std::vector<int32_t> zeros(size_t(N * per_row));
    std::vector<float> scales(zeros.size());
    for (int64_t n = 0; n < N; ++n) {
        const int64_t r = source[size_t(n)];
        std::memcpy(codes.data() + n * K, q.codes.data() + r * K, size_t(K));
        for (int64_t j = 0; j < per_row; ++j) {
            const GroupGrid& gg = q.grids[size_t(r * per_row + j)];
            zeros[size_t(n * per_row + j)] = int32_t(gg.zero);
            scales[size_t(n * per_row + j)] = round_to_fp16(gg.scale);
        }
    }
    const GptqLinear t = gptq_pack_linear(q.spec.bits, N, K, G, codes.data(), zeros.data(), scales.data(), zc);
    std::vector<SafetensorsWriteTensor> out;
    out.push_back(int32_tensor(slot.prefix + ".qweight", {t.qweight_rows(), N}, t.qweight));
    out.push_back(int32_tensor(slot.prefix + ".qzeros", {t.n_groups(), t.qzeros_cols()}, t.qzeros));
    out.push_back(safetensors_tensor_from_f32(slot.prefix + ".scales", {t.n_groups(), N}, SafetensorsDtype::F16,
                                              t.scales.data()));
    out.push_back(int32_tensor(slot.prefix + ".g_idx", {K}, t.g_idx));
    return out;
}

}  // namespace

const char* safetensors_packing_name(SafetensorsPacking p) { return p == SafetensorsPacking::gptq ? "gptq" : "fake_quant"; }

nlohmann::json QuantizedExportReport::to_json() const {
    nlohmann::json j = {{"packing", safetensors_packing_name(packing)},
                        {"format", format},
                        {"quantized_linears", quantized_linears},
                        {"tensors", hf.n_tensors},
                        {"bytes", hf.bytes},
                        {"unpermuted_qk", hf.unpermuted_qk},
                        {"files", hf.files}};
    if (packing == SafetensorsPacking::gptq) {
        j["bits"] = bits;
        j["group_size"] = group_size;
        j["sym"] = sym;
        j["checkpoint_format"] = checkpoint_format;
        j["marlin_compatible"] = marlin_compatible;
        j["marlin_tile_shapes"] = marlin_tile_shapes;
        if (!marlin_note.empty()) j["marlin_note"] = marlin_note;
        j["groups"] = groups;
        j["scales_not_fp16"] = scales_not_fp16;
        j["rows_not_fp16"] = rows_not_fp16;
        j["max_scale_rel_change"] = max_scale_rel_change;
    }
    return j;
}

std::string safetensors_recorded_activations(const std::string& checkpoint) {
    namespace fs = std::filesystem;
    const fs::path config = fs::path(checkpoint).filename() == "config.json" ? fs::path(checkpoint)
                                                                             : fs::path(checkpoint) / "config.json";
    std::ifstream in(config);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open", config.string());
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: not valid JSON ({})", config.string(), e.what());
    }
    // The record: "lowbit_quantization" (fake-quant) or quantization_config's "lowbit" (GPTQ-packed).
    const nlohmann::json* record = nullptr;
    if (j.is_object() && j.contains("lowbit_quantization")) record = &j["lowbit_quantization"];
    else if (j.is_object() && j.contains("quantization_config") && j["quantization_config"].is_object() &&
             j["quantization_config"].contains("lowbit"))
        record = &j["quantization_config"]["lowbit"];
    if (!record || !record->is_object() || !record->contains("activations")) return "";
    LOWBIT_CHECK((*record)["activations"].is_string(), ErrorKind::input, "{}: the lowbit record's 'activations' must be a string",
                 config.string());
    return (*record)["activations"].get<std::string>();
}

QuantizedExportReport export_quantized_safetensors(const QuantizedModel& qm, const std::string& out_dir,
                                                   SafetensorsPacking packing, const SafetensorsExportOptions& opt) {
    QuantizedExportReport rep;
    rep.packing = packing;
    HfExportOptions hf;
    hf.max_shard_bytes = opt.max_shard_bytes;
    hf.block = [&qm](int64_t l) {  // a streamed quantization's blocks get their projections from the codes
        BlockWeights b = qm.model.weights.blocks[size_t(l)];
        for (Projection p : kProjections)
            if (projection_weight(b, p).empty()) projection_weight(b, p) = qm.linear(linear_name(l, p))->dequantize();
        return b;
    };
    if (packing == SafetensorsPacking::fake_quant) {
        const std::vector<std::string> names = qm.linear_names();
        rep.quantized_linears = int64_t(names.size());
        rep.format = qm.record.format.empty() && !names.empty() ? qm.linear_info(names.front()).spec.describe()
                                                                 : qm.record.format;
        nlohmann::json record = record_json(qm.record);
        record["quantized_linears"] = rep.quantized_linears;
        hf.config_extra["lowbit_quantization"] = record;
        rep.hf = export_hf_checkpoint(qm.model, out_dir, hf);
        return rep;
    }
    check_gptq_model(qm, opt, rep);
    hf.dense_dtype = opt.gptq_dense_dtype;
    hf.config_extra["quantization_config"] = {{"quant_method", "gptq"},
                                              {"bits", rep.bits},
                                              {"group_size", rep.group_size},
                                              {"desc_act", false},
                                              {"true_sequential", qm.record.true_sequential},
                                              {"static_groups", qm.record.static_groups},
                                              {"sym", rep.sym},
                                              {"checkpoint_format", rep.checkpoint_format},
                                              {"pack_dtype", "int32"},
                                              {"lm_head", false},
                                              {"damp_percent", qm.record.damping},
                                              {"lowbit", record_json(qm.record)}};
    hf.pack_linear = [&qm, &opt](const HfLinearSlot& slot) { return pack_gptq(qm, slot, opt.gptq_zeros); };
    rep.hf = export_hf_checkpoint(qm.model, out_dir, hf);
    return rep;
}

}  // namespace lowbit
