// export_gguf.cpp — QuantizedModel → GGUF (see export_gguf.h).
#include "ptq/export_gguf.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "io/gguf_file.h"

namespace lowbit {

namespace {

struct FileTypeId {
    const char* name;
    uint32_t id;
};
// llama.cpp's llama_ftype ids (interop.md §2.5); single grids map to their "mostly" type.
constexpr FileTypeId kFileTypes[] = {
    {"f32", 0},     {"f16", 1},     {"q4_0", 2},    {"q4_1", 3},    {"q8_0", 7},    {"q5_0", 8},
    {"q5_1", 9},    {"q2_k", 10},   {"q3_k_s", 11}, {"q3_k_m", 12}, {"q3_k_l", 13}, {"q4_k_s", 14},
    {"q4_k_m", 15}, {"q5_k_s", 16}, {"q5_k_m", 17}, {"q6_k", 18},   {"iq4_nl", 25}, {"mxfp4", 38},
    {"q3_k", 11},   {"q4_k", 14},   {"q5_k", 16},
};

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    return s;
}

// The FP32 values of a non-projection tensor of the model, by GGUF name; nullptr when unknown.
const std::vector<float>* model_tensor(const LlamaModel& m, const std::string& name) {
    if (name == "token_embd.weight") return &m.weights.token_embd;
    if (name == "output_norm.weight") return &m.weights.output_norm;
    if (name == "output.weight") return m.weights.output.empty() ? nullptr : &m.weights.output;
    if (name.rfind("blk.", 0) != 0) return nullptr;
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return nullptr;
    const int64_t layer = std::stoll(name.substr(4, dot - 4));
    if (layer < 0 || layer >= int64_t(m.weights.blocks.size())) return nullptr;
    const std::string rest = name.substr(dot + 1);
    for (const BlockTensorSpec& t : block_tensor_specs())
        if (rest == t.gguf_name) return &(m.weights.blocks[size_t(layer)].*t.member);
    return nullptr;
}

}  // namespace

uint32_t gguf_file_type_for(const std::string& format_or_mix) {
    const std::string n = lower(format_or_mix);
    for (const FileTypeId& f : kFileTypes)
        if (n == f.name) return f.id;
    return 1024;  // LLAMA_FTYPE_GUESSED: llama.cpp prints "guessed" and loads it the same
}

std::string gguf_recorded_activations(const std::string& gguf_path) {
    return GgufFile::open(gguf_path).get_string_or(kGgufActivationsKey, "");
}

GgufExportReport export_quantized_gguf(const QuantizedModel& q, const std::string& source_gguf, const std::string& out_path,
                                       const std::string& file_type_name, const OtherTensorType& other_type) {
    const GgufFile src = GgufFile::open(source_gguf);
    GgufWriter w(uint32_t(src.alignment()));
    for (const auto& [key, value] : src.metadata()) {
        if (key == "general.alignment" || key == "general.file_type" || key.rfind("lowbit.", 0) == 0) continue;
        w.set(key, value);
    }
    w.set_u32("general.file_type", gguf_file_type_for(file_type_name));
    const QuantizationRecord& r = q.record;
    w.set_string("lowbit.quantization.method", r.method);
    w.set_string("lowbit.quantization.features", r.features);
    w.set_string("lowbit.quantization.format", r.format);
    w.set_string("lowbit.quantization.calibration", r.calibration);
    w.set_string("lowbit.quantization.rotation", r.rotation);
    w.set_bool("lowbit.quantization.act_order", r.act_order);
    w.set_bool("lowbit.quantization.act_order_row", r.act_order_row);
    w.set_bool("lowbit.quantization.true_sequential", r.true_sequential);
    w.set_bool("lowbit.quantization.static_groups", r.static_groups);
    w.set_f32("lowbit.quantization.damping", float(r.damping));
    w.set_string(kGgufActivationsKey, r.activations);
    const bool rotated = r.rotation != "none";

    GgufExportReport rep;
    const auto add_encoded = [&](const std::string& name, const std::vector<int64_t>& ne, GgufType type,
                                 const std::vector<float>& values) {
        const GgufTypeInfo* info = gguf_type_info(type);
        if (!info || !info->encode || ne[0] % info->block_elements != 0) type = ne.size() == 1 ? GgufType::F32 : GgufType::F16;
        w.add_tensor(name, ne, type, values.data());
        ++rep.reencoded;
    };
    bool have_output = false;
    for (const GgufTensorInfo& t : src.tensors()) {
        const std::string base = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0
                                     ? t.name.substr(0, t.name.size() - 7)
                                     : t.name;
        have_output |= t.name == "output.weight";
        if (q.has_linear(base)) {
            const LinearInfo qw = q.linear_info(base);
            LOWBIT_CHECK(t.ne.size() == 2 && t.ne[0] == qw.cols && t.ne[1] == qw.rows, ErrorKind::input,
                         "{}: tensor {} has a different shape than the quantized layer ({} x {})", source_gguf, t.name,
                         qw.rows, qw.cols);
            // Packed as written, when the writer reaches it (a spilled block is read back then).
            w.add_tensor_lazy(t.name, t.ne, qw.spec.gguf_type(), [&q, base] { return q.linear(base)->gguf_bytes(); });
            ++rep.quantized;
            continue;
        }
        const std::optional<GgufType> wanted = other_type ? other_type(t.name) : std::nullopt;
        const std::vector<float>* values = model_tensor(q.model, t.name);
        if (values && (rotated || (wanted && *wanted != t.type))) {
            const GgufType type = t.ne.size() == 1 ? GgufType::F32 : wanted.value_or(t.type);
            add_encoded(t.name, t.ne, type, *values);
            continue;
        }
        const std::span<const uint8_t> bytes = src.tensor_bytes(t);  // the source's bytes, copied as written
        if (gguf_type_info(t.type))
            w.add_tensor_lazy(t.name, t.ne, t.type, [bytes] { return std::vector<uint8_t>(bytes.begin(), bytes.end()); });
        else
            w.add_tensor_raw(t.name, t.ne, t.type, std::vector<uint8_t>(bytes.begin(), bytes.end()));
    }
    if (!have_output && !q.model.weights.output.empty()) {  // untied by the rotation
        const GgufTensorInfo* emb = src.find_tensor("token_embd.weight");
        const GgufType type = other_type && other_type("output.weight") ? *other_type("output.weight")
                              : emb                                      ? emb->type
                                                                         : GgufType::F16;
        add_encoded("output.weight", {q.model.config.hidden_size, q.model.config.vocab_size}, type, q.model.weights.output);
    }
    w.write(out_path);
    rep.tensors = int64_t(src.tensors().size()) + (!have_output && !q.model.weights.output.empty() ? 1 : 0);
    rep.bytes = std::filesystem::file_size(out_path);
    return rep;
}

}  // namespace lowbit
