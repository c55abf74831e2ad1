// cmd_formats.cpp — `lowbit formats {list, gguf-types, mix, roundtrip, pack, cast, codes}`: the number
// formats from the command line, on .npy files. `pack`, `cast` and `codes` expose raw codes and bytes for
// cross-checks; `gguf-types` prints the GGUF type table (what lowbit reads and writes in GGUF files), `mix`
// the type llama-quantize would give each tensor of a GGUF model under a file-type mix.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/counter_rng.h"
#include "core/error.h"
#include "core/wall_clock.h"
#include "formats/format_registry.h"
#include "formats/gguf_mixes.h"
#include "formats/gguf_types.h"
#include "io/gguf_file.h"
#include "io/npy.h"

namespace lowbit {

namespace {

struct FormatArgs {
    std::string format;
    int64_t group = 0;
    bool sym = false;
    std::string scale_rule = scale_rule_name(kDefaultScaleRule);
    std::string rounding = "rne";
    uint64_t seed = 0;
    int axis = 1;
    bool json = false;
    std::string imatrix;  // pack: importance matrix (.npy, one weight per column)
    std::string in, out;
};

void add_format_options(CLI::App* cmd, FormatArgs& a) {
    cmd->add_option("--format", a.format, "format name (see `lowbit formats list`)")->required();
    cmd->add_option("--group", a.group, "int grids: group size G along the axis (default: whole row)");
    cmd->add_flag("--sym", a.sym, "int grids: symmetric grid (default asymmetric with integer zero point)");
    cmd->add_option("--scale-rule", a.scale_rule, "MX formats: shared-scale rule floor|rceil|midmax")
        ->check(CLI::IsMember({"floor", "rceil", "midmax"}));
    cmd->add_option("--rounding", a.rounding, "element rounding rne|away|stochastic")
        ->check(CLI::IsMember({"rne", "away", "stochastic"}));
    cmd->add_option("--seed", a.seed, "seed of the counter-based stochastic rounding");
    cmd->add_option("--axis", a.axis, "blocks along axis 1 (rows, default) or axis 0 (columns)")->check(CLI::IsMember({0, 1}));
    cmd->add_option("IN", a.in, "input 2-D .npy (float32/float64/float16/int)")->required();
    cmd->add_option("OUT", a.out, "output file")->required();
}

FormatOptions to_options(const FormatArgs& a) {
    FormatOptions o;
    o.axis = a.axis;
    o.group = a.group;
    o.sym = a.sym;
    parse_scale_rule(a.scale_rule.c_str(), &o.scale_rule);
    parse_rounding(a.rounding.c_str(), &o.rounding);
    o.seed = a.seed;
    return o;
}

void run_list(bool json) {
    FormatOptions opt;
    if (json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& f : all_formats())
            j.push_back({{"name", f.name}, {"bits_per_element", bits_per_element(f, opt, 128)}, {"description", f.description}});
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("%-12s %9s  %s\n", "format", "bits/elem", "description");
    for (const auto& f : all_formats())
        std::printf("%-12s %9.3f  %s\n", f.name, bits_per_element(f, opt, 128), f.description);
    std::printf("(int grids: bits/elem shown per row of 128 with an fp16 scale and packed zero point)\n");
}

void run_gguf_types(bool json) {
    if (json) {
        nlohmann::json j = nlohmann::json::array();
        for (const GgufTypeInfo& t : kGgufTypes)
            j.push_back({{"id", uint32_t(t.type)},
                         {"name", t.name},
                         {"block_elements", t.block_elements},
                         {"block_bytes", t.block_bytes},
                         {"decode", t.decode != nullptr},
                         {"encode", t.encode != nullptr},
                         {"format", t.format_name && t.encode ? nlohmann::json(t.format_name) : nlohmann::json(nullptr)}});
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("%3s %-8s %6s %6s %9s  %-6s %-6s %s\n", "id", "type", "block", "bytes", "bits/elem", "decode", "encode",
                "format");
    for (const GgufTypeInfo& t : kGgufTypes) {
        const std::string row = fmt::format("{:>3} {:<8} {:>6} {:>6} {:>9.3f}  {:<6} {:<6} {}", uint32_t(t.type), t.name,
                                            t.block_elements, t.block_bytes,
                                            8.0 * double(t.block_bytes) / double(t.block_elements),
                                            t.decode ? "yes" : "no", t.encode ? "yes" : "no",
                                            t.format_name && t.encode ? t.format_name : "");
        std::printf("%s\n", row.substr(0, row.find_last_not_of(' ') + 1).c_str());
    }
    std::printf("(%s)\n", gguf_type_support().c_str());
}

void run_roundtrip(const FormatArgs& a) {
    const FormatInfo& f = find_format(a.format);
    const FormatOptions opt = to_options(a);
    NpyArray x = npy_read_matrix(a.in);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> y = quantize_dequantize(f, x.data.data(), x.rows(), x.cols(), opt);
    const double secs = seconds_since(t0);
    npy_write_f32(a.out, {x.rows(), x.cols()}, y.data());
    const ErrorStats s = error_stats(x.data.data(), y.data(), int64_t(y.size()));
    const double bpe = bits_per_element(f, opt, opt.axis == 1 ? x.cols() : x.rows());
    if (a.json) {
        nlohmann::json j = {{"format", f.name},
                            {"shape", {x.rows(), x.cols()}},
                            {"axis", opt.axis},
                            {"scale_rule", a.scale_rule},
                            {"rounding", a.rounding},
                            {"seed", a.seed},
                            {"group", a.group},
                            {"sym", a.sym},
                            {"bits_per_element", bpe},
                            {"mse", s.mse},
                            {"rmse", s.rmse},
                            {"max_abs_error", s.max_abs},
                            {"relative_frobenius_error", s.rel_fro},
                            {"sqnr_db", std::isfinite(s.sqnr_db) ? nlohmann::json(s.sqnr_db) : nlohmann::json(nullptr)},
                            {"nonfinite_outputs", s.nonfinite},
                            {"seconds", secs},
                            {"output", a.out}};
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf("%s %lldx%lld axis %d: %.3f bits/elem  mse %.4g  rmse %.4g  max|err| %.4g  rel.err %.4g  SQNR %.2f dB%s  (%.3f s) -> %s\n",
                    f.name, (long long)x.rows(), (long long)x.cols(), opt.axis, bpe, s.mse, s.rmse, s.max_abs, s.rel_fro,
                    s.sqnr_db, s.nonfinite ? fmt::format("  {} non-finite outputs", s.nonfinite).c_str() : "", secs,
                    a.out.c_str());
    }
}

void run_pack(const FormatArgs& a) {
    const FormatInfo& f = find_format(a.format);
    NpyArray x = npy_read_matrix(a.in);
    std::vector<uint8_t> bytes;
    if (a.imatrix.empty()) {
        bytes = quantize_to_bytes(f, x.data.data(), x.rows(), x.cols(), to_options(a));
    } else {
        LOWBIT_CHECK(f.kind == FormatKind::gguf && a.axis == 1, ErrorKind::usage,
                     "--imatrix applies to the GGUF formats (blocks along rows), not to {}", f.name);
        const NpyArray w = npy_read(a.imatrix);
        LOWBIT_CHECK(int64_t(w.data.size()) == x.cols(), ErrorKind::input,
                     "{}: {} importance weights for {} columns", a.imatrix, w.data.size(), x.cols());
        bytes = gguf_quantize_matrix_imatrix(f.gguf, x.data.data(), x.rows(), x.cols(), w.data.data());
    }
    write_file_atomic(a.out, bytes.data(), bytes.size());
    if (a.json)
        std::printf("%s\n", nlohmann::json({{"format", f.name}, {"bytes", bytes.size()}, {"output", a.out}}).dump().c_str());
    else
        std::printf("%s: %zu bytes -> %s\n", f.name, bytes.size(), a.out.c_str());
}

struct MixArgs {
    std::string mix, model;
    bool has_imatrix = false, json = false;
};

void run_mix(const MixArgs& a) {
    const GgufMix& mix = gguf_mix_by_name(a.mix);
    const GgufFile g = GgufFile::open(a.model);
    const std::string arch = g.get_string("general.architecture");
    MixModel m;
    m.n_layers = int(g.get_int(arch + ".block_count"));
    m.n_heads = int(g.get_int(arch + ".attention.head_count"));
    m.n_kv_heads = int(g.get_int_or(arch + ".attention.head_count_kv", m.n_heads));
    m.n_experts = int(g.get_int_or(arch + ".expert_count", 0));
    m.has_imatrix = a.has_imatrix;
    std::vector<MixTensor> tensors;
    for (const GgufTensorInfo& t : g.tensors()) tensors.push_back({t.name, t.ne, t.type});
    const std::vector<GgufType> types = gguf_mix_types(mix, m, tensors);
    if (a.json) {
        nlohmann::json j = nlohmann::json::array();
        for (size_t i = 0; i < tensors.size(); ++i)
            j.push_back({{"name", tensors[i].name}, {"ne", tensors[i].ne}, {"source", gguf_type_label(tensors[i].type)},
                         {"type", gguf_type_label(types[i])}});
        std::printf("%s\n", nlohmann::json({{"mix", mix.name}, {"ftype", uint32_t(mix.ftype)}, {"tensors", j}}).dump(2).c_str());
        return;
    }
    std::printf("%s (llama_ftype %u), arch %s: %d layers, %d heads, %d kv heads%s\n", mix.name, uint32_t(mix.ftype),
                arch.c_str(), m.n_layers, m.n_heads, m.n_kv_heads, m.has_imatrix ? ", with an imatrix" : "");
    for (size_t i = 0; i < tensors.size(); ++i)
        std::printf("%-40s %-6s -> %s\n", tensors[i].name.c_str(), gguf_type_name(tensors[i].type), gguf_type_name(types[i]));
}

struct CastArgs {
    std::string element, rounding = "rne", overflow = "saturate";
    uint64_t seed = 0;
    std::string in, out;
};

ElementType element_or_fail(const std::string& name) {
    ElementType t;
    if (!parse_element(name.c_str(), &t))
        fail(ErrorKind::usage, "unknown element type '{}' (e2m1, e2m3, e3m2, e4m3, e5m2, bf16, fp16)", name);
    return t;
}

void run_cast(const CastArgs& a) {
    const ElementSpec s = element_spec(element_or_fail(a.element));
    Rounding r;
    parse_rounding(a.rounding.c_str(), &r);
    const Overflow o = a.overflow == "special" ? Overflow::special : Overflow::saturate;
    NpyArray x = npy_read(a.in);
    std::vector<float> y(x.data.size());
    for (size_t i = 0; i < y.size(); ++i) {
        const uint32_t rnd = r == Rounding::stochastic ? counter_random24(a.seed, i) : 0;
        y[i] = decode_element(s, encode_element(s, x.data[i], r, o, rnd));
    }
    npy_write_f32(a.out, x.shape, y.data());
}

void run_codes(const std::string& element, const std::string& out) {
    const ElementSpec s = element_spec(element_or_fail(element));
    const uint32_t n = 1u << s.total_bits();
    std::vector<float> v(n);
    for (uint32_t c = 0; c < n; ++c) v[c] = decode_element(s, c);
    npy_write_f32(out, {int64_t(n)}, v.data());
}

}  // namespace

void register_formats_command(CLI::App& app) {
    auto* formats = app.add_subcommand("formats", "number formats: list them, quantize .npy matrices, inspect codes");
    formats->require_subcommand(1);

    auto list_json = std::make_shared<bool>(false);
    auto* list = formats->add_subcommand("list", "list every block format with its storage cost");
    list->add_flag("--json", *list_json, "machine-readable output");
    list->callback([list_json] { run_list(*list_json); });

    auto types_json = std::make_shared<bool>(false);
    auto* types = formats->add_subcommand("gguf-types", "list the GGUF tensor types: block shapes, which lowbit reads and writes");
    types->add_flag("--json", *types_json, "machine-readable output");
    types->callback([types_json] { run_gguf_types(*types_json); });

    auto mx = std::make_shared<MixArgs>();
    auto* mixc = formats->add_subcommand("mix", "the GGUF type of each tensor of a model under a llama.cpp file-type mix");
    mixc->add_option("--mix", mx->mix, "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K")->required();
    mixc->add_flag("--imatrix-used", mx->has_imatrix, "as llama-quantize --imatrix (changes Q4_0/Q5_0's first ffn_down layers)");
    mixc->add_flag("--json", mx->json, "machine-readable output");
    mixc->add_option("MODEL", mx->model, "a .gguf model")->required();
    mixc->callback([mx] { run_mix(*mx); });

    auto rt = std::make_shared<FormatArgs>();
    auto* roundtrip = formats->add_subcommand("roundtrip", "quantize a 2-D .npy, write the dequantized float32 .npy, print errors");
    add_format_options(roundtrip, *rt);
    roundtrip->add_flag("--json", rt->json, "machine-readable output");
    roundtrip->callback([rt] { run_roundtrip(*rt); });

    auto pk = std::make_shared<FormatArgs>();
    auto* pack = formats->add_subcommand("pack", "quantize a 2-D .npy and write the packed bytes (see format_registry.h)");
    add_format_options(pack, *pk);
    pack->add_flag("--json", pk->json, "machine-readable output");
    pack->add_option("--imatrix", pk->imatrix,
                     "GGUF K-quants, IQ4_NL: quantize as llama-quantize --imatrix with these per-column weights (.npy)");
    pack->callback([pk] { run_pack(*pk); });

    auto ca = std::make_shared<CastArgs>();
    auto* cast = formats->add_subcommand("cast", "round every value of a .npy to an element type and back to float32");
    cast->add_option("--element", ca->element, "e2m1|e2m3|e3m2|e4m3|e5m2|bf16|fp16")->required();
    cast->add_option("--rounding", ca->rounding, "rne|away|stochastic")->check(CLI::IsMember({"rne", "away", "stochastic"}));
    cast->add_option("--overflow", ca->overflow, "saturate (MX rule) or special (Inf/NaN like the IEEE/OCP casts)")
        ->check(CLI::IsMember({"saturate", "special"}));
    cast->add_option("--seed", ca->seed, "stochastic rounding seed");
    cast->add_option("IN", ca->in)->required();
    cast->add_option("OUT", ca->out)->required();
    cast->callback([ca] { run_cast(*ca); });

    auto co = std::make_shared<std::pair<std::string, std::string>>();
    auto* codes = formats->add_subcommand("codes", "write the decoded value of every code of an element type to a .npy");
    codes->add_option("--element", co->first, "e2m1|e2m3|e3m2|e4m3|e5m2|bf16|fp16")->required();
    codes->add_option("OUT", co->second)->required();
    codes->callback([co] { run_codes(co->first, co->second); });
}

}  // namespace lowbit
