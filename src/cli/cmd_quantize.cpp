// cmd_quantize.cpp — `lowbit quantize`: post-training quantization of a model (RTN, GPTQ, BoA, TurboBoA;
// src/ptq/quantize.h) and its export as GGUF or Hugging Face safetensors (GPTQ-packed or fake-quantized),
// with a per-layer table and an optional JSON report.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "io/model_registry.h"
#include "io/npy.h"
#include "model/tokenizer.h"
#include "formats/gguf_mixes.h"
#include "io/gguf_file.h"
#include "ptq/export_gguf.h"
#include "ptq/export_safetensors.h"
#include "ptq/quantize.h"
#include "train/train_export.h"

#if defined(LOWBIT_HAVE_CUDA)
#include "core/cuda_device.h"
#include "ptq/cuda/calibration_cuda.cuh"
#include "ptq/cuda/solver_cuda.cuh"
#endif

namespace lowbit {

namespace {

struct QuantizeArgs {
    std::string model, method = "turboboa", features = "f1,f2,f3", format, out, report, rotate = "none", tokenizer;
    std::string packing = "auto", mix;
    std::string calib_corpus = "sotu-train", calib_text, grid_search = "hessian", device = "cpu";
    std::string calib_precision = "fp32", act_bits, static_groups;
    int64_t group = 0, calib_samples = 16, calib_len = 512, row_block = 16, batch = 4;
    uint64_t seed = 0;
    double alpha = 0.25, damping = 0.01, checkpoint_every = 60;
    bool sym = false, act_order = false, act_order_row = false, true_sequential = false, no_block_v = false, resume = false;
    bool quiet = false;
};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void run_quantize(const QuantizeArgs& a) {
    LOWBIT_CHECK(a.device == "cpu" || a.device == "cuda", ErrorKind::usage, "--device {}: cpu | cuda", a.device);
    LOWBIT_CHECK(a.device == "cuda" || a.calib_precision == "fp32", ErrorKind::usage,
                 "--calib-precision {} needs --device cuda (the CPU forward is FP32)", a.calib_precision);
    const QuantSpec activations = parse_activation_spec(a.act_bits);
#if defined(LOWBIT_HAVE_CUDA)
    std::unique_ptr<CudaSolverDevice> solver_device;
    if (a.device == "cuda") {
        LOWBIT_CHECK(cuda_device_available(), ErrorKind::runtime,
                     "--device cuda: no CUDA device is available (no driver or no GPU); use --device cpu");
        solver_device = std::make_unique<CudaSolverDevice>();
    }
#else
    LOWBIT_CHECK(a.device != "cuda", ErrorKind::usage,
                 "--device cuda: this lowbit was built without CUDA (no nvcc at build time); use --device cpu");
#endif
    const bool to_gguf = ends_with(a.out, ".gguf");
    LOWBIT_CHECK(a.packing == "auto" || a.packing == "gptq" || a.packing == "gptq-v2" || a.packing == "fake-quant",
                 ErrorKind::usage, "--packing {}: auto | gptq | gptq-v2 | fake-quant", a.packing);
    PtqOptions o;
    o.method = parse_ptq_method(a.method);
    LOWBIT_CHECK(!a.act_order_row || o.method == PtqMethod::boa || o.method == PtqMethod::turboboa, ErrorKind::usage,
                 "--act-order-row orders the rows of two-sided layers (q and k of --method boa | turboboa); --method {} "
                 "has none", a.method);
    if (o.method == PtqMethod::turboboa) {
        o.f1 = o.f2 = o.f3 = false;
        std::stringstream ss(a.features);
        std::string f;
        while (std::getline(ss, f, ','))
            if (f == "f1") o.f1 = true;
            else if (f == "f2") o.f2 = true;
            else if (f == "f3") o.f3 = true;
            else if (f != "none" && !f.empty())
                fail(ErrorKind::usage, "--features: unknown feature '{}' (f1, f2, f3, comma-separated, or none)", f);
    }
    // Checked here, not after block 0's calibration: F2's row-block term D·H⁻¹ is formed in original column order.
    LOWBIT_CHECK(!(a.act_order && o.method == PtqMethod::turboboa && o.f2), ErrorKind::usage,
                 "--act-order (column order) does not combine with TurboBoA's F2 on q/k; drop one (e.g. --features "
                 "f1,f3)");
    GridSearch search;
    LOWBIT_CHECK(parse_grid_search(a.grid_search, &search), ErrorKind::usage,
                 "--grid-search {}: minmax | mse | hessian", a.grid_search);
    LOWBIT_CHECK(a.format.empty() != a.mix.empty(), ErrorKind::usage,
                 "give one of --format F (every projection on one grid) or --mix M (llama.cpp's per-tensor types)");
    const GgufMix* mix = a.mix.empty() ? nullptr : &gguf_mix_by_name(a.mix);
    o.grid = mix ? grid_of_gguf_type(mix->base, search) : parse_grid(a.format, a.group, a.sym, search);
    LOWBIT_CHECK(!mix || to_gguf, ErrorKind::usage, "--mix {} writes a .gguf (--out FILE.gguf)", a.mix);
    LOWBIT_CHECK(!to_gguf || o.grid.is_gguf(), ErrorKind::usage,
                 "--format {} has no GGUF block type: write a Hugging Face directory instead (--out DIR: GPTQ-packed "
                 "safetensors), or pick a GGUF format (q4_0, q4_1, q5_0, q8_0, q2_k..q6_k, mxfp4, …)", a.format);
    LOWBIT_CHECK(!to_gguf || !o.grid.is_gguf() || gguf_type_can_dequantize(o.grid.gguf_type()), ErrorKind::usage,
                 "--format {}: lowbit cannot read {} GGUF tensors back yet, so it does not write them; write a Hugging "
                 "Face directory (--out DIR, fake-quantized) instead", a.format, gguf_type_name(o.grid.gguf_type()));
    const SafetensorsPacking packing =
        a.packing == "fake-quant" || (a.packing == "auto" && o.grid.is_gguf()) ? SafetensorsPacking::fake_quant
                                                                              : SafetensorsPacking::gptq;
    o.calibration.corpus = a.calib_corpus;
    o.calibration.text_file = a.calib_text;
    o.calibration.samples = a.calib_samples;
    o.calibration.length = a.calib_len;
    o.calibration.seed = a.seed;
    o.alpha = a.alpha;
    o.damping = a.damping;
    o.row_block = a.row_block;
    o.block_v = !a.no_block_v;
    o.act_order = a.act_order;
    o.act_order_row = a.act_order_row;
    LOWBIT_CHECK(!a.true_sequential || o.method != PtqMethod::rtn, ErrorKind::usage,
                 "--true-sequential orders the calibration statistics; --method rtn takes none");
    o.true_sequential = a.true_sequential;
    LOWBIT_CHECK(a.static_groups.empty() || a.static_groups == "on" || a.static_groups == "off", ErrorKind::usage,
                 "--static-groups {}: on | off", a.static_groups);
    if (!a.static_groups.empty()) o.static_groups = a.static_groups == "on";
    o.check_static_groups();  // before any work: an HF source is converted first
    o.batch = a.batch;
    LOWBIT_CHECK(a.rotate == "none" || a.rotate == "hadamard", ErrorKind::usage, "--rotate {}: none | hadamard", a.rotate);
    o.rotate = a.rotate == "hadamard";
    o.rotation.seed = a.seed;
    o.activations = activations;
#if defined(LOWBIT_HAVE_CUDA)
    if (solver_device) {
        o.solver_device = solver_device.get();
        const CudaPrecision precision = parse_cuda_precision(a.calib_precision);
        o.calibration_paths = [precision, activations](const LlamaConfig& c, int64_t batch) {
            return cuda_calibration_paths(c, batch, precision, activations);
        };
    }
#endif
    o.stream_blocks = true;  // one FP32 block in host memory at a time,
    o.spill_blocks = true;   // and the finished blocks' codes in the checkpoint folder, not in memory
    o.checkpoint_dir = a.out + ".partial";
    o.resume = a.resume;
    LOWBIT_CHECK(a.checkpoint_every >= 0, ErrorKind::usage, "--checkpoint-every {}: seconds, 0 or more", a.checkpoint_every);
    o.checkpoint_seconds = a.checkpoint_every;

    std::string path = resolve_model_path(a.model);
    std::unique_ptr<ModelReader> reader = ModelReader::open(path);
    const Tokenizer tok = load_tokenizer(path, a.tokenizer);
    if (to_gguf && reader->format() != "gguf") {
        // A GGUF export copies its source's metadata and other tensors: a Hugging Face source is first written as
        // a llama GGUF (with its tokenizer; matrices in the source's 16-bit type, else F32) in OUT.partial/, one
        // block at a time, which then is the source.
        const std::string converted = o.checkpoint_dir + "/source.gguf";
        if (!(a.resume && std::filesystem::exists(converted))) {
            std::filesystem::create_directories(o.checkpoint_dir);
            GgufType type = GgufType::F32;
            for (const ModelTensorSummary& t : reader->tensor_summaries())
                if (t.name.find("mlp.down_proj.weight") != std::string::npos)
                    type = t.type == "BF16" ? GgufType::BF16 : t.type == "F16" ? GgufType::F16 : GgufType::F32;
            std::fprintf(stderr, "quantize: writing %s as a %s GGUF source (%s)\n", path.c_str(), gguf_type_name(type),
                         converted.c_str());
            export_llama_gguf(*reader, converted, type, &tok);
        }
        path = converted;
        reader = ModelReader::open(path);
    }
    const LlamaConfig& c = reader->config();
    // A mix: llama.cpp's type for every tensor of the source file, the projections solved on theirs.
    std::map<std::string, GgufType> mix_types;
    if (mix) {
        const GgufFile src = GgufFile::open(path);
        std::vector<MixTensor> tensors;
        for (const GgufTensorInfo& t : src.tensors()) tensors.push_back({t.name, t.ne, t.type});
        const MixModel mm{int(c.n_layers), int(c.n_heads), int(c.n_kv_heads), 0, o.method != PtqMethod::rtn};
        const std::vector<GgufType> types = gguf_mix_types(*mix, mm, tensors);
        for (size_t i = 0; i < tensors.size(); ++i) mix_types[tensors[i].name] = types[i];
        o.mix = mix->name;
        o.per_tensor_grid = [&mix_types, search](const std::string& linear, int64_t, int64_t) {
            return grid_of_gguf_type(mix_types.at(linear + ".weight"), search);
        };
    } else {
        for (Projection p : kProjections) o.grid.check_cols(projection_in_features(c, p), projection_name(p));
    }
    if (o.rotate) check_rotation_supported(c, o.rotation);

    PtqReport rep;
    const std::vector<int32_t> windows =
        o.method == PtqMethod::rtn ? std::vector<int32_t>() : calibration_windows(tok, o.calibration);
    const QuantizedModel q = quantize_model(*reader, windows, o, &rep);
    uint64_t file_bytes = 0;
    nlohmann::json export_json;
    if (to_gguf) {
        const OtherTensorType other = [&mix_types](const std::string& name) -> std::optional<GgufType> {
            const auto it = mix_types.find(name);
            if (it == mix_types.end()) return std::nullopt;
            return it->second;
        };
        const GgufExportReport ex =
            export_quantized_gguf(q, path, a.out, mix ? std::string(mix->name) : o.grid.name(), mix ? other : OtherTensorType{});
        file_bytes = ex.bytes;
        std::printf("quantize: wrote %s (%.2f MB, %lld tensors, %lld from solver codes)\n", a.out.c_str(),
                    double(ex.bytes) / 1e6, (long long)ex.tensors, (long long)ex.quantized);
    } else {
        // GPTQ v1 stores zero − 1, so an asymmetric grid with a zero point of 0 needs v2 (true zeros): `auto`
        // picks it then and says so; `gptq` keeps v1 and refuses such a grid.
        SafetensorsExportOptions eo;
        bool zero_point_0 = false;
        for (const std::string& name : q.linear_names()) {
            const LinearInfo info = q.linear_info(name);
            if (info.spec.is_gguf() || info.spec.sym) continue;
            for (const GroupGrid& gg : q.linear(name)->grids) zero_point_0 |= gg.zero < 1.0f;  // reads a spilled block
        }
        if (a.packing == "gptq-v2" || (a.packing == "auto" && zero_point_0)) eo.gptq_zeros = GptqZeroConvention::v2;
        if (a.packing == "auto" && zero_point_0 && packing == SafetensorsPacking::gptq)
            std::printf("quantize: some groups have a zero point of 0, which GPTQ v1 checkpoints cannot hold: writing "
                        "checkpoint_format gptq_v2 (true zeros; --packing gptq refuses instead, --sym avoids it)\n");
        const QuantizedExportReport ex = export_quantized_safetensors(q, a.out, packing, eo);
        file_bytes = ex.hf.bytes;
        export_json = ex.to_json();
        std::printf("quantize: wrote %s (%s safetensors, %.2f MB of tensors%s)\n", a.out.c_str(),
                    safetensors_packing_name(packing), double(ex.hf.bytes) / 1e6,
                    packing == SafetensorsPacking::gptq ? (ex.marlin_compatible ? ", Marlin-compatible" : ", not Marlin-compatible")
                                                        : "");
    }
    std::filesystem::remove_all(o.checkpoint_dir);

    if (!a.quiet) {
        std::printf("%-22s %-16s %12s %10s %8s %8s\n", "layer", "grid", "loss", "rel. loss", "seconds", "damping");
        for (const LayerReport& l : rep.layers)
            std::printf("%-22s %-16s %12.4g %10.3g %8.2f %7.2f%%%s\n", l.name.c_str(), l.grid.c_str(), l.loss, l.rel_loss,
                        l.seconds, l.damping * 100.0, l.flagged ? "  <- flagged" : "");
    }
    int64_t flagged = 0;
    for (const LayerReport& l : rep.layers)
        if (l.flagged) {
            ++flagged;
            std::fprintf(stderr, "quantize: %s: %s\n", l.name.c_str(),
                         l.retries > 0 ? "the Hessian needed extra damping"
                                       : "relative loss ≥ 10x the median of its projection");
        }
    uint64_t peak_device_bytes = 0;
#if defined(LOWBIT_HAVE_CUDA)
    if (solver_device) peak_device_bytes = ptq_peak_device_bytes();
#endif
    if (activations.format)
        std::printf("quantize: activations %s, per token at every projection's input (%s; `lowbit eval` applies "
                    "them)\n", activations.describe().c_str(),
                    o.method == PtqMethod::rtn ? "recorded; rtn has no calibration" : "calibrated and recorded");
    std::printf("quantize: %s %s%s%s on %s, %lld calibration tokens, %.1f s (calibration %.1f s), peak memory %.0f MiB%s\n",
                a.method.c_str(), (o.mix.empty() ? o.grid.describe() : o.mix).c_str(), o.method == PtqMethod::turboboa ? " " : "",
                o.describe_features().c_str(), rep.device.c_str(), (long long)rep.calibration_tokens, rep.seconds,
                rep.calibration_seconds, double(rep.peak_rss_bytes) / 1048576.0,
                peak_device_bytes ? fmt::format(", GPU {:.0f} MiB", double(peak_device_bytes) / 1048576.0).c_str() : "");
    if (!a.report.empty()) {
        nlohmann::json j;
        j["model"] = path;
        j["out"] = a.out;
        j["method"] = a.method;
        j["features"] = o.describe_features();
        j["format"] = o.mix.empty() ? o.grid.describe() : o.mix;
        j["calibration"] = o.method == PtqMethod::rtn ? "" : o.calibration.describe();
        j["rotation"] = q.record.rotation;
        j["activations"] = q.record.activations;
        j["true_sequential"] = q.record.true_sequential;
        j["static_groups"] = q.record.static_groups;
        j["seconds"] = rep.seconds;
        j["calibration_seconds"] = rep.calibration_seconds;
        if (rep.calibration_phases.forwards > 0)
            j["calibration_parts_seconds"] = {{"forwards", rep.calibration_phases.forwards},
                                              {"products", rep.calibration_phases.products},
                                              {"transfers", rep.calibration_phases.transfers},
                                              {"transfers_finishing", rep.calibration_phases.finishing}};
        j["calibration_tokens"] = rep.calibration_tokens;
        j["peak_rss_bytes"] = rep.peak_rss_bytes;
        j["device"] = rep.device;
        if (peak_device_bytes) j["peak_device_bytes"] = peak_device_bytes;
        j["file_bytes"] = file_bytes;
        if (!export_json.is_null()) j["export"] = export_json;
        j["resumed_from_block"] = rep.resumed_from_block;
        j["flagged_layers"] = flagged;
        for (const LayerReport& l : rep.layers)
            j["layers"].push_back({{"name", l.name}, {"grid", l.grid}, {"loss", l.loss}, {"rel_loss", l.rel_loss}, {"seconds", l.seconds}, {"factor_seconds", l.factor_seconds},
                                   {"sweep_seconds", l.sweep_seconds}, {"refine_seconds", l.refine_seconds},
                                   {"objective_seconds", l.objective_seconds},
                                   {"damping", l.damping}, {"retries", l.retries}, {"dead_inputs", l.dead},
                                   {"flagged", l.flagged}});
        const std::string text = j.dump(1);
        write_file_atomic(a.report, text.data(), text.size());
    }
}

}  // namespace

void register_quantize_command(CLI::App& app) {
    auto a = std::make_shared<QuantizeArgs>();
    auto* cq = app.add_subcommand("quantize", "post-training quantization (RTN, GPTQ, BoA, TurboBoA) and GGUF export");
    cq->add_option("--model", a->model, "source model: a .gguf file, an HF checkpoint directory, or a known name (smollm2-135m)")->required();
    cq->add_option("--method", a->method, "rtn | gptq | boa | turboboa (default)");
    cq->add_option("--features", a->features, "turboboa: f1,f2,f3 (default all; 'none' = BoA-like with fixed grids)");
    cq->add_option("--format", a->format, "int2..int8 | q4_0 | q4_1 | q5_0 | q5_1 | q8_0 | iq4_nl | q2_k..q6_k | mxfp4 | nvfp4");
    cq->add_option("--mix", a->mix, "llama.cpp's file-type mix instead of --format: q4_k_m, q3_k_m, q2_k, q5_k_m, q6_k, …");
    cq->add_option("--group", a->group, "int grids: group size (0 = per channel)");
    cq->add_flag("--sym", a->sym, "int grids: symmetric");
    cq->add_option("--grid-search", a->grid_search, "grid fitting: minmax | mse | hessian (default)");
    cq->add_option("--rotate", a->rotate, "none (default) | hadamard (QuaRot rotations fused into the weights)");
    cq->add_option("--act-bits", a->act_bits,
                   "W·A quantization: 4 | 8 (int4 / int8) or an --acts format of `lowbit eval` (mxfp4, …): the "
                   "quantized path's projection inputs quantized per token during calibration, recorded in the output "
                   "(`lowbit eval` applies it by default); on the GPU an INT, MX or NVFP4 format");
    cq->add_option("--calib-corpus", a->calib_corpus, "calibration corpus (default sotu-train)");
    cq->add_option("--calib-text", a->calib_text, "calibration text file (instead of a corpus)");
    cq->add_option("--calib-samples", a->calib_samples, "calibration windows (default 16 on the CPU)");
    cq->add_option("--calib-len", a->calib_len, "tokens per window (default 512 on the CPU)");
    cq->add_option("--seed", a->seed, "seed of the window sampling and the rotations (default 0)");
    cq->add_option("--alpha", a->alpha, "F2's α (default 0.25)");
    cq->add_option("--row-block", a->row_block, "F1's N rows per block (default 16; 1 = BoA)");
    cq->add_option("--damping", a->damping, "relative Hessian damping (default 0.01)");
    cq->add_flag("--act-order", a->act_order, "quantize columns by descending Hessian diagonal");
    cq->add_flag("--act-order-row", a->act_order_row,
                 "boa | turboboa: quantize the rows of each q/k head by descending diagonal of its output-side Hessian "
                 "H_out (other layers have none and are unaffected; refused with rtn and gptq)");
    cq->add_flag("--true-sequential", a->true_sequential,
                 "calibrated methods: each input's statistics (q/k/v, o, gate/up, down) taken after the block's earlier "
                 "layers were quantized (GPTQ's --true-sequential): four calibration passes per block instead of one");
    cq->add_option("--static-groups", a->static_groups,
                   "on: every group's grid fitted from the weights before the compensation sweep; off: each group's grid "
                   "fitted when the sweep reaches it, from the compensated weights (default: off for gptq and for "
                   "turboboa with f3, on for boa and turboboa without f3; per-channel grids are the same either way)");
    cq->add_flag("--no-block-v", a->no_block_v, "BoA/TurboBoA: v with the plain input Hessian");
    cq->add_option("--batch", a->batch, "calibration windows per forward pass (default 4)");
    cq->add_option("--device", a->device, "cpu (default) | cuda: calibration forwards, statistics, factorizations and "
                   "sweeps on the GPU");
    cq->add_option("--calib-precision", a->calib_precision,
                   "with --device cuda: fp32 (default, the CPU's arithmetic) | bf16 (BF16 weights and GEMM inputs in the "
                   "calibration forwards)");
    cq->add_option("--out", a->out, "output: FILE.gguf, or a directory for a Hugging Face safetensors checkpoint")->required();
    cq->add_option("--packing", a->packing,
                   "safetensors: gptq (qweight/qzeros/scales/g_idx, checkpoint_format gptq: v1 zeros − 1; int grids) | "
                   "gptq-v2 (true zeros) | fake-quant (dequantized weights) | auto (int grids: gptq, or gptq-v2 when a "
                   "zero point is 0; others: fake-quant)");
    cq->add_option("--tokenizer", a->tokenizer,
                   "a .gguf or tokenizer.json for calibration and for a GGUF written from a Hugging Face source "
                   "(default: the model's own)");
    cq->add_option("--report", a->report, "write a JSON report (per-layer loss, time, memory)");
    cq->add_flag("--resume", a->resume, "continue an interrupted run from OUT.partial/");
    cq->add_option("--checkpoint-every", a->checkpoint_every,
                   "write the resume state (the calibration activations, GBs for large models) only when this many "
                   "seconds passed since the last one (default 60; 0: after every block); a resume redoes the blocks since");
    cq->add_flag("--quiet", a->quiet, "no per-layer table");
    cq->callback([a] { run_quantize(*a); });
}

}  // namespace lowbit
