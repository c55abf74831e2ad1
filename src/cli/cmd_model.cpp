// cmd_model.cpp — `lowbit info`, `lowbit tokenize`, `lowbit eval` and `lowbit export-hf`: a Llama-family
// model (GGUF file, HF checkpoint directory, or a known short name such as smollm2-135m) from the
// command line. eval follows llama.cpp's perplexity protocol and reads/writes its KLD base files.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/corpus.h"
#include "io/gguf_file.h"
#include "io/model_registry.h"
#include "io/npy.h"
#include "model/config.h"
#include "model/eval.h"
#include "model/forward_cpu.h"
#include "model/hf_export.h"
#include "model/linear.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "ptq/export_gguf.h"
#include "ptq/export_safetensors.h"
#if defined(LOWBIT_HAVE_CUDA)
#include "model/cuda/forward_cuda.cuh"
#endif

namespace lowbit {

namespace {

// --- info ---

struct InfoArgs {
    std::string model;
    bool json = false, tensors = false;
};

void run_info(const InfoArgs& a) {
    const std::string path = resolve_model_path(a.model);
    const auto reader = ModelReader::open(path);
    const LlamaConfig& c = reader->config();
    const auto tensors = reader->tensor_summaries();
    std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // type → (count, bytes)
    uint64_t total_bytes = 0;
    for (const auto& t : tensors) {
        auto& e = by_type[t.type];
        e.first += 1;
        e.second += t.n_bytes;
        total_bytes += t.n_bytes;
    }
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = std::make_unique<Tokenizer>(load_tokenizer(path, ""));
    } catch (const Error&) {
        // A checkpoint without a tokenizer is still described.
    }
    const double bpw = double(total_bytes) * 8.0 / double(c.total_params());
    if (a.json) {
        nlohmann::json j = {{"model", path},
                            {"format", reader->format()},
                            {"architecture", c.architecture},
                            {"name", c.name},
                            {"vocab_size", c.vocab_size},
                            {"hidden_size", c.hidden_size},
                            {"n_layers", c.n_layers},
                            {"n_heads", c.n_heads},
                            {"n_kv_heads", c.n_kv_heads},
                            {"head_dim", c.head_dim},
                            {"ffn_size", c.ffn_size},
                            {"context_length", c.context_length},
                            {"rms_eps", c.rms_eps},
                            {"rope_theta", c.rope_theta},
                            {"rope_pairing", rope_pairing_name(c.rope_pairing)},
                            {"rope_scaling", rope_scaling_name(c.rope_scaling)},
                            {"rope_freqs_tensor", !c.rope_freq_divisors.empty()},
                            {"qkv_bias", c.qkv_bias},
                            {"tied_embeddings", c.tied_embeddings},
                            {"parameters", c.total_params()},
                            {"tensor_bytes", total_bytes},
                            {"bits_per_weight", bpw}};
        nlohmann::json types = nlohmann::json::object();
        for (const auto& [t, e] : by_type) types[t] = {{"tensors", e.first}, {"bytes", e.second}};
        j["tensor_types"] = types;
        if (tok)
            j["tokenizer"] = {{"model", tok->model()},     {"pre", tok->pre()},         {"vocab_size", tok->vocab_size()},
                              {"bos_id", tok->bos_id()},   {"eos_id", tok->eos_id()},   {"add_bos", tok->add_bos()}};
        if (a.tensors) {
            nlohmann::json tl = nlohmann::json::array();
            for (const auto& t : tensors) tl.push_back({{"name", t.name}, {"shape", t.shape}, {"type", t.type}, {"bytes", t.n_bytes}});
            j["tensors"] = tl;
        }
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model        %s (%s)\n", path.c_str(), reader->format().c_str());
    std::printf("architecture %s%s%s\n", c.architecture.c_str(), c.name.empty() ? "" : "  ", c.name.c_str());
    std::printf("sizes        vocab %lld, d %lld, layers %lld, heads %lld (kv %lld, head_dim %lld), ffn %lld, context %lld\n",
                (long long)c.vocab_size, (long long)c.hidden_size, (long long)c.n_layers, (long long)c.n_heads,
                (long long)c.n_kv_heads, (long long)c.head_dim, (long long)c.ffn_size, (long long)c.context_length);
    std::printf("rope         theta %g, pairing %s, scaling %s%s\n", c.rope_theta, rope_pairing_name(c.rope_pairing),
                rope_scaling_name(c.rope_scaling), c.rope_freq_divisors.empty() ? "" : " (rope_freqs tensor)");
    std::printf("norm         RMSNorm eps %g; q/k/v bias %s; embeddings %s\n", double(c.rms_eps), c.qkv_bias ? "yes" : "no",
                c.tied_embeddings ? "tied" : "untied");
    std::printf("parameters   %.2f M; tensors %zu, %.2f MiB, %.2f bits/weight\n", double(c.total_params()) / 1e6,
                tensors.size(), double(total_bytes) / (1024.0 * 1024.0), bpw);
    for (const auto& [t, e] : by_type)
        std::printf("  %-6s %4lld tensors  %10.2f MiB\n", t.c_str(), (long long)e.first, double(e.second) / (1024.0 * 1024.0));
    if (tok)
        std::printf("tokenizer    %s (pre %s), %zu tokens, BOS %d%s, EOS %d\n", tok->model().c_str(), tok->pre().c_str(),
                    tok->vocab_size(), tok->bos_id(), tok->add_bos() ? " (added)" : " (not added)", tok->eos_id());
    if (a.tensors)
        for (const auto& t : tensors)
            std::printf("  %-32s %-6s [%s]\n", t.name.c_str(), t.type.c_str(), fmt::format("{}", fmt::join(t.shape, ", ")).c_str());
}

// --- tokenize ---

struct TokenizeArgs {
    std::string model, tokenizer, text_file, text, bos = "auto";
    bool json = false, parse_special = false;
};

// string_given: STRING was on the command line (it may be empty: "" tokenizes to no tokens, or just BOS).
void run_tokenize(const TokenizeArgs& a, bool string_given) {
    LOWBIT_CHECK(a.text_file.empty() == string_given, ErrorKind::usage, "give either --text FILE or a STRING");
    const std::string path = resolve_model_path(a.model);
    const Tokenizer tok = load_tokenizer(path, a.tokenizer);
    const std::string text = string_given ? a.text : read_text_file(a.text_file);
    const std::vector<int32_t> ids = tok.encode(text, should_add_bos(a.bos, tok), a.parse_special);
    if (a.json) {
        nlohmann::json pieces = nlohmann::json::array();
        for (int32_t id : ids) pieces.push_back(tok.token_text(id));
        std::printf("%s\n", nlohmann::json({{"model", path}, {"n_tokens", ids.size()}, {"ids", ids}, {"tokens", pieces}})
                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                .c_str());
        return;
    }
    std::printf("%s\n", fmt::format("{}", fmt::join(ids, " ")).c_str());
    std::fprintf(stderr, "%zu tokens\n", ids.size());
}

// --- eval ---

struct EvalArgs {
    std::string model, tokenizer, text_file, corpus, bos = "auto", save_logits, kld_base, dump_logits;
    std::string device = "cpu", precision = "fp32", protocol = "llama";
    std::string weights, acts, adahop;  // the linear layers: fake-quant weights / activations, or AdaHOP
    std::string kv;                     // KV-cache quantization (BlockLinears::kv_cache)
    int64_t group = 0;
    bool sym = false;
    int64_t ctx = 512, chunks = -1, batch = 1;
    int threads = 0;
    bool json = false, no_progress = false;
};

// What the projections of every block run as (model/linear.h), from --weights/--acts/--adahop, and the
// storage of their weights in bits (the embedding, norms and head are not counted: they stay as loaded).
struct LinearChoice {
    LinearFactory cpu;  // empty: dense
    QuantSpec weights, acts, kv;
    bool adahop = false;
    LayerPlan plan;
    std::string description = "dense";
    double weight_bits = 32;  // per weight of the seven projections, as stored by the chosen format
};

// `weights`: one entry of --weights (empty or "none": the weights as loaded, dense unless --acts).
LinearChoice choose_projections(const EvalArgs& a, const std::string& weights, const LlamaConfig& c) {
    LinearChoice ch;
    LOWBIT_CHECK(a.adahop.empty() || (a.weights.empty() && a.acts.empty()), ErrorKind::usage,
                 "--adahop quantizes both operands itself: give it without --weights/--acts");
    if (!a.adahop.empty()) {
        ch.adahop = true;
        ch.plan.fwd = parse_strategy(a.adahop);
        ch.cpu = adahop_linears(Plan{}, LpMatmulOptions{}, ch.plan);
        ch.description = fmt::format("adahop {} (MXFP4 operands, forward strategy for every projection)",
                                     strategy_short_name(ch.plan.fwd));
        return ch;
    }
    ch.acts = parse_activation_spec(a.acts);
    if (weights.empty() || weights == "none") {
        if (!ch.acts.format) return ch;
        // W4A4 of a quantized file: its weights as loaded, the activations per token.
        ch.cpu = fake_quant_linears(QuantSpec{}, ch.acts);
        ch.description = "weights as loaded, activations " + ch.acts.describe() + " per token";
        return ch;
    }
    ch.weights.format = &find_format(weights);
    ch.weights.options.group = a.group;
    ch.weights.options.sym = a.sym;
    ch.cpu = fake_quant_linears(ch.weights, ch.acts);
    double bits = 0, n = 0;
    for (Projection p : kProjections) {
        const double in = double(projection_in_features(c, p)), out = double(projection_out_features(c, p));
        bits += bits_per_element(*ch.weights.format, ch.weights.options, int64_t(in)) * in * out;
        n += in * out;
    }
    ch.weight_bits = bits / n;
    ch.description = "fake-quant weights " + ch.weights.describe() + " (round to nearest)" +
                     (ch.acts.format ? ", activations " + ch.acts.describe() + " per token" : std::string());
    return ch;
}

// The projections as choose_projections says, and the KV cache as --kv says.
LinearChoice choose_linears(const EvalArgs& a, const std::string& weights, const LlamaConfig& c) {
    LinearChoice ch = choose_projections(a, weights, c);
    const QuantSpec kv = parse_activation_spec(a.kv);
    if (!kv.format) return ch;
    LOWBIT_CHECK(!ch.adahop, ErrorKind::usage, "--kv: not with --adahop (its attention stays BF16, as in the paper)");
    ch.cpu = with_kv_cache(ch.cpu, kv);
    ch.kv = kv;
    ch.description += ", KV cache " + kv.describe() + " per token and head";
    return ch;
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size() && !s.empty()) {
        const size_t comma = s.find(',', start);
        out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

#if defined(LOWBIT_HAVE_CUDA)
CudaLlamaOptions cuda_options(const EvalArgs& a, const LinearChoice& linears) {
    CudaLinearFactory f;
    if (linears.adahop) f = cuda_adahop_linears(Plan{}, LpMatmulOptions{}, linears.plan);
    else if (linears.weights.format || linears.acts.format) f = cuda_fake_quant_linears(linears.weights, linears.acts);
    if (linears.kv.format) f = cuda_with_kv_cache(f, linears.kv);
    return CudaLlamaOptions{parse_cuda_precision(a.precision), CudaResidency::automatic, f};
}
#endif

// --weights A,B,C: the perplexity of each weight format on the same windows, as one table (the headline
// of scripts/run.sh: what each format costs in bits and in perplexity).
void compare_weight_formats(const EvalArgs& a, const std::vector<std::string>& formats, const LlamaModel& model,
                            const std::vector<int32_t>& tokens, const PerplexityOptions& opt, const std::string& path,
                            const std::string& source, const std::string& device_desc) {
    struct Row {
        LinearChoice linears;
        PerplexityResult r;
    };
    std::vector<Row> rows;
    int64_t projection_params = 0;
    for (Projection p : kProjections)
        projection_params += projection_in_features(model.config, p) * projection_out_features(model.config, p);
    projection_params *= model.config.n_layers;
    // Every format is checked on block 0 first, so a shape it cannot take fails before the long runs.
    std::vector<LinearChoice> choices;
    for (const std::string& f : formats) {
        choices.push_back(choose_linears(a, f, model.config));
        if (choices.back().cpu) choices.back().cpu(model.config, model.weights.blocks[0], 0);
    }
    for (const LinearChoice& choice : choices) {
        Row row{choice, {}};
        WindowLogitsFn logits_fn;
        WindowNllFn nll_fn;
        ModelLinears cpu_linears;
#if defined(LOWBIT_HAVE_CUDA)
        std::unique_ptr<CudaLlama> gpu;
        if (a.device == "cuda") {
            gpu = std::make_unique<CudaLlama>(model, cuda_options(a, row.linears));
            logits_fn = cuda_window_logits(*gpu);
            nll_fn = cuda_window_nll(*gpu);
        }
#endif
        if (!logits_fn) {
            if (row.linears.cpu) cpu_linears = make_model_linears(model, row.linears.cpu);
            logits_fn = cpu_window_logits(model, row.linears.cpu ? &cpu_linears : nullptr);
        }
        if (!a.json) std::fprintf(stderr, "eval: %s\n", row.linears.description.c_str());
        row.r = evaluate_perplexity(tokens, model.config.vocab_size, opt, logits_fn, nll_fn);
        rows.push_back(std::move(row));
    }
    const double mib = 1024.0 * 1024.0;
    if (a.json) {
        nlohmann::json runs = nlohmann::json::array();
        for (const Row& row : rows)
            runs.push_back({{"weights", row.linears.weights.format ? row.linears.weights.describe() : "none"},
                            {"linears", row.linears.description},
                            {"linear_weight_bits", row.linears.weight_bits},
                            {"linear_weight_mib", double(projection_params) * row.linears.weight_bits / 8.0 / mib},
                            {"ppl", row.r.ppl},
                            {"ppl_err", row.r.ppl_err},
                            {"mean_nll", row.r.mean_nll},
                            {"tokens_per_second", row.r.tokens_per_second}});
        const nlohmann::json j = {{"command", "eval"},         {"model", path},
                                  {"text", source},            {"protocol", perplexity_protocol_name(opt.protocol)},
                                  {"device", a.device},
                                  {"precision", a.precision},  {"device_description", device_desc},
                                  {"n_ctx", rows[0].r.n_ctx},  {"n_chunks", rows[0].r.n_chunks},
                                  {"n_scored", rows[0].r.n_scored}, {"projection_params", projection_params},
                                  {"runs", runs}};
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model   %s (%s), %lld projection weights in %lld blocks\n", path.c_str(), model.config.architecture.c_str(),
                (long long)projection_params, (long long)model.config.n_layers);
    std::printf("text    %s: %lld windows of %lld, %lld scored tokens (%s protocol); %s\n", source.c_str(),
                (long long)rows[0].r.n_chunks, (long long)rows[0].r.n_ctx, (long long)rows[0].r.n_scored,
                perplexity_protocol_name(opt.protocol), device_desc.c_str());
    std::printf("\n%-22s %10s %12s %20s %10s\n", "weights (RTN)", "bits/w", "proj. MiB", "PPL", "vs first");
    for (const Row& row : rows) {
        const std::string name = row.linears.weights.format ? row.linears.weights.describe() : "none (f32)";
        std::printf("%-22s %10.3f %12.1f %12.4f ± %-6.4f %+9.2f%%\n", name.c_str(), row.linears.weight_bits,
                    double(projection_params) * row.linears.weight_bits / 8.0 / mib, row.r.ppl, row.r.ppl_err,
                    100.0 * (row.r.ppl / rows[0].r.ppl - 1.0));
    }
}

// The activation format a lowbit export records (`quantize --act-bits`; "none" or "" when it records none):
// eval's --acts unless one is given.
std::string recorded_activations(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) return "";  // the model loader names what is missing
    if (fs::is_directory(path, ec) || fs::path(path).filename() == "config.json") return safetensors_recorded_activations(path);
    return gguf_recorded_activations(path);
}

void run_eval(EvalArgs a, bool ctx_given) {
    LOWBIT_CHECK(a.text_file.empty() || a.corpus.empty(), ErrorKind::usage, "give --text or --corpus, not both");
    LOWBIT_CHECK(!a.text_file.empty() || !a.corpus.empty() || !a.kld_base.empty(), ErrorKind::usage,
                 "give --text FILE or --corpus NAME ({}), or --kld-base FILE (its tokens are used)",
                 fmt::join(corpus_names(), ", "));
    if (a.threads > 0) set_thread_count(a.threads);
    // The device is checked before anything is loaded.
    LOWBIT_CHECK(a.device == "cuda" || a.precision == "fp32", ErrorKind::usage,
                 "--precision {} needs --device cuda (the CPU forward is FP32)", a.precision);
    std::string device_desc = "CPU";
#if defined(LOWBIT_HAVE_CUDA)
    if (a.device == "cuda") {
        LOWBIT_CHECK(cuda_device_available(), ErrorKind::runtime,
                     "--device cuda: no CUDA device is available (no driver or no GPU); use --device cpu");
        device_desc = fmt::format("CUDA {}, {}", a.precision, cuda_device_description());
    }
#else
    LOWBIT_CHECK(a.device != "cuda", ErrorKind::usage,
                 "--device cuda: this lowbit was built without CUDA (no nvcc at build time); use --device cpu");
#endif
    const std::string path = resolve_model_path(a.model);
    // A W·A-quantized export is evaluated with its activation quantization unless --acts (or --adahop) says otherwise.
    const std::string recorded_acts = recorded_activations(path);
    if (a.acts.empty() && a.adahop.empty() && !recorded_acts.empty() && recorded_acts != "none") {
        a.acts = recorded_acts;
        std::fprintf(stderr, "eval: activations %s per token, as recorded in %s (--acts none evaluates without)\n",
                     parse_activation_spec(a.acts).describe().c_str(), path.c_str());
    }
    const Tokenizer tok = load_tokenizer(path, a.tokenizer);
    const bool add_bos = should_add_bos(a.bos, tok);

    std::vector<int32_t> tokens;
    std::string source = a.kld_base;
    if (!a.text_file.empty() || !a.corpus.empty()) {
        source = a.corpus.empty() ? a.text_file : a.corpus;
        const std::string text = a.corpus.empty() ? read_text_file(a.text_file) : read_corpus_text(a.corpus);
        tokens = tok.encode(text, add_bos);  // llama.cpp tokenizes the whole text with BOS when it adds one
    }
    const LlamaModel model = load_llama_model(path);
    LOWBIT_CHECK(int64_t(tok.vocab_size()) <= model.config.vocab_size, ErrorKind::input,
                 "the tokenizer has {} tokens but the model's vocabulary is {}; pass the model's own tokenizer",
                 tok.vocab_size(), model.config.vocab_size);

    const std::vector<std::string> weight_list = split_list(a.weights);
    if (weight_list.size() > 1) {
        LOWBIT_CHECK(a.save_logits.empty() && a.kld_base.empty() && a.dump_logits.empty(), ErrorKind::usage,
                     "--save-logits, --kld-base and --dump-logits take one --weights format, not a list");
        LOWBIT_CHECK(a.adahop.empty(), ErrorKind::usage, "--weights LIST compares weight formats; give --adahop alone");
    }
    PerplexityOptions opt;
    opt.protocol = parse_perplexity_protocol(a.protocol);
    opt.n_ctx = ctx_given ? a.ctx : default_perplexity_ctx(opt.protocol);
    if (!a.kld_base.empty() && !ctx_given) opt.n_ctx = read_kld_base_header(a.kld_base).n_ctx;
    opt.max_chunks = a.chunks;
    opt.seqs_per_batch = a.batch;
    opt.add_bos = add_bos;
    opt.bos_id = tok.bos_id();
    opt.save_logits = a.save_logits;
    opt.kld_base = a.kld_base;
    opt.progress = !a.no_progress;
    if (weight_list.size() > 1) {
        compare_weight_formats(a, weight_list, model, tokens, opt, path, source, device_desc);
        return;
    }
    const LinearChoice linears = choose_linears(a, weight_list.empty() ? std::string() : weight_list[0], model.config);
    const ModelLinears cpu_linears = linears.cpu && a.device == "cpu" ? make_model_linears(model, linears.cpu) : ModelLinears{};
    WindowLogitsFn logits_fn = cpu_window_logits(model, linears.cpu ? &cpu_linears : nullptr);
    WindowNllFn nll_fn;  // scoring where the logits are made (GPU); the evaluator still uses the logits for KLD/save
#if defined(LOWBIT_HAVE_CUDA)
    std::unique_ptr<CudaLlama> gpu;  // the whole model on the GPU (blocks streamed from host memory if too big)
    if (a.device == "cuda") {
        gpu = std::make_unique<CudaLlama>(model, cuda_options(a, linears));
        logits_fn = cuda_window_logits(*gpu);
        nll_fn = cuda_window_nll(*gpu);
    }
#endif
    std::vector<float> dumped;  // --dump-logits: the raw logits of every scored window, in order
    if (!a.dump_logits.empty()) {
        const int64_t vocab = model.config.vocab_size;
        logits_fn = [inner = logits_fn, &dumped, vocab](const int32_t* t, BatchShape shape, int64_t first, float* out) {
            inner(t, shape, first, out);
            dumped.insert(dumped.end(), out, out + shape.n_seq * (shape.n_tok - first) * vocab);
        };
        nll_fn = nullptr;  // the logits must come to the host
    }
    const PerplexityResult r = evaluate_perplexity(tokens, model.config.vocab_size, opt, logits_fn, nll_fn);
    const char* scoring = r.scored_by_provider ? "device" : "host";  // where the log-softmax ran
    if (!a.dump_logits.empty())
        npy_write_f32(a.dump_logits, {r.n_chunks, r.n_ctx - r.first_pos, model.config.vocab_size}, dumped.data());

    if (a.json) {
        nlohmann::json j = {{"command", "eval"},
                            {"model", path},
                            {"architecture", model.config.architecture},
                            {"text", source},
                            {"protocol", perplexity_protocol_name(r.protocol)},
                            {"device", a.device},
                            {"precision", a.precision},
                            {"linears", linears.description},
                            {"linear_weight_bits", linears.weight_bits},
                            {"device_description", device_desc},
                            {"threads", thread_count()},
                            {"add_bos", add_bos},
                            {"n_ctx", r.n_ctx},
                            {"n_chunks", r.n_chunks},
                            {"n_text_tokens", r.n_text_tokens},
                            {"n_scored", r.n_scored},
                            {"mean_nll", r.mean_nll},
                            {"ppl", r.ppl},
                            {"ppl_err", r.ppl_err},
                            {"seconds", r.seconds},
                            {"tokens_per_second", r.tokens_per_second},
                            {"scoring", scoring},
                            {"chunk_ppl", r.chunk_ppl}};
        if (!recorded_acts.empty()) j["recorded_activations"] = recorded_acts;
        if (!a.save_logits.empty()) j["saved_logits"] = a.save_logits;
        if (!a.dump_logits.empty()) j["dumped_logits"] = a.dump_logits;
        j["bos_id"] = tok.bos_id();
        if (r.has_kld)
            j["kld"] = {{"base", a.kld_base},
                        {"kld_mean", r.kld_mean},
                        {"kld_err", r.kld_err},
                        {"kld_median", r.kld_median},
                        {"kld_p99", r.kld_p99},
                        {"kld_max", r.kld_max},
                        {"top1_agreement", r.top1_agreement},
                        {"top1_err", r.top1_err},
                        {"ppl_base", r.ppl_base},
                        {"ppl_ratio", r.ppl_ratio},
                        {"ln_ppl_ratio", r.ln_ppl_ratio},
                        {"ln_ppl_ratio_err", r.ln_ppl_ratio_err}};
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model   %s (%s)\n", path.c_str(), model.config.architecture.c_str());
    std::printf("linears %s%s\n", linears.description.c_str(),
                linears.weights.format ? fmt::format(": {:.3f} bits per weight", linears.weight_bits).c_str() : "");
    std::printf("text    %s: %lld tokens%s; %lld windows of %lld, %lld scored tokens\n", source.c_str(),
                (long long)r.n_text_tokens, add_bos ? " (BOS first)" : "", (long long)r.n_chunks, (long long)r.n_ctx,
                (long long)r.n_scored);
    std::printf("protocol %s: %s\n", perplexity_protocol_name(r.protocol),
                r.protocol == PerplexityProtocol::hf
                    ? "the GPTQ papers' (every token of each window after its first scored, no BOS per window)"
                    : "llama.cpp's (second half of each window scored, BOS first in each window when the vocabulary adds it)");
    std::printf("PPL     %.4f +/- %.5f\n", r.ppl, r.ppl_err);
    if (r.has_kld) {
        std::printf("KLD     %.6f +/- %.6f (median %.6f, 99%% %.6f, max %.6f)\n", r.kld_mean, r.kld_err, r.kld_median,
                    r.kld_p99, r.kld_max);
        std::printf("top-1   %.3f%% +/- %.3f%% agreement\n", 100.0 * r.top1_agreement, 100.0 * r.top1_err);
        std::printf("PPL(model)/PPL(base) %.6f  (ln ratio %.6f +/- %.6f; PPL(base) from the file %.4f)\n", r.ppl_ratio,
                    r.ln_ppl_ratio, r.ln_ppl_ratio_err, r.ppl_base);
    }
    if (!a.save_logits.empty()) std::printf("logits  saved to %s\n", a.save_logits.c_str());
    std::printf("speed   %.1f tokens/s (%.1f s, %d threads, %s, scored on the %s)\n", r.tokens_per_second, r.seconds,
                thread_count(), device_desc.c_str(), scoring);
}

// --- export-hf ---

struct ExportArgs {
    std::string model, out;
    bool json = false;
};

void run_export_hf(const ExportArgs& a) {
    const std::string path = resolve_model_path(a.model);
    const HfExportReport rep = export_hf_checkpoint(*ModelReader::open(path), a.out);
    if (a.json) {
        std::printf("%s\n", nlohmann::json({{"model", path},
                                            {"out", a.out},
                                            {"tensors", rep.n_tensors},
                                            {"bytes", rep.bytes},
                                            {"unpermuted_qk", rep.unpermuted_qk},
                                            {"files", rep.files}})
                                .dump(2)
                                .c_str());
        return;
    }
    std::printf("%s -> %s: %lld tensors, %.1f MiB (float32)%s\n", path.c_str(), a.out.c_str(), (long long)rep.n_tensors,
                double(rep.bytes) / (1024.0 * 1024.0), rep.unpermuted_qk ? "; q/k rows un-permuted to HF order" : "");
}

}  // namespace

void register_model_commands(CLI::App& app) {
    const char* model_help = "a .gguf file, an HF checkpoint directory, or a known name (smollm2-135m)";

    auto info = std::make_shared<InfoArgs>();
    auto* ci = app.add_subcommand("info", "architecture, sizes and tensor types of a model");
    ci->add_option("--model", info->model, model_help)->required();
    ci->add_flag("--tensors", info->tensors, "list every tensor");
    ci->add_flag("--json", info->json, "machine-readable output");
    ci->callback([info] { run_info(*info); });

    auto tk = std::make_shared<TokenizeArgs>();
    auto* ct = app.add_subcommand("tokenize", "token ids of a text with a model's tokenizer");
    ct->add_option("--model", tk->model, model_help)->required();
    ct->add_option("--tokenizer", tk->tokenizer, "use this .gguf or tokenizer.json instead of the model's");
    ct->add_option("--text", tk->text_file, "read the text from FILE");
    auto* string_opt = ct->add_option("STRING", tk->text, "the text itself (may be empty)");
    ct->add_option("--bos", tk->bos, "prepend BOS: auto (the vocabulary's add_bos, default) | on | off")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    ct->add_flag("--parse-special", tk->parse_special, "recognise control tokens written in the text");
    ct->add_flag("--json", tk->json, "machine-readable output (ids and token strings)");
    ct->callback([tk, string_opt] { run_tokenize(*tk, string_opt->count() > 0); });

    auto ev = std::make_shared<EvalArgs>();
    auto* ce = app.add_subcommand(
        "eval", "perplexity with llama.cpp's protocol (second half of each n_ctx window) or the HF/GPTQ-paper one, KLD "
                "against saved logits");
    ce->add_option("--model", ev->model, model_help)->required();
    ce->add_option("--tokenizer", ev->tokenizer, "use this .gguf or tokenizer.json instead of the model's");
    ce->add_option("--text", ev->text_file, "evaluate this text file");
    ce->add_option("--corpus", ev->corpus, "a named corpus: sotu-test | sotu-validation | sotu-train");
    auto* ctx_opt = ce->add_option("--ctx", ev->ctx, "window length n_ctx (default 512 for --protocol llama, 2048 for hf)");
    ce->add_option("--protocol", ev->protocol,
                   "llama (default: llama.cpp's llama-perplexity, second half of each window scored, BOS first in each) | "
                   "hf (the GPTQ papers' Hugging Face evaluation: every token of each window after its first scored)")
        ->check(CLI::IsMember({"llama", "hf"}));
    ce->add_option("--chunks", ev->chunks, "evaluate at most N windows (default: all)");
    ce->add_option("--batch", ev->batch, "windows per forward pass (default 1)");
    ce->add_option("--bos", ev->bos, "BOS as each window's first token: auto (the vocabulary's add_bos) | on | off")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    ce->add_option("--save-logits", ev->save_logits, "write the logits as a llama.cpp KLD base file");
    ce->add_option("--kld-base", ev->kld_base, "compare with a KLD base file (lowbit's or llama-perplexity's)");
    ce->add_option("--dump-logits", ev->dump_logits,
                   "write the raw float32 logits of positions n_ctx/2..n_ctx-1 of every window as .npy "
                   "[chunks, n_ctx - n_ctx/2, vocab] (peer checks; 100 MB per 512-window of a 49k vocabulary)");
    ce->add_option("--weights", ev->weights,
                   "fake-quantize the projection weights (q/k/v/o/gate/up/down) to FORMAT by round-to-nearest, e.g. "
                   "int4, q4_0, mxfp4 (`lowbit formats list`); a comma list (none,q8_0,q4_0) evaluates each and prints "
                   "one table");
    ce->add_option("--group", ev->group, "with --weights int2..int8: group size along in_features (default: per row)");
    ce->add_flag("--sym", ev->sym, "with --weights int2..int8: symmetric grid");
    ce->add_option("--acts", ev->acts,
                   "quantize the activations at every projection's input per token (e.g. int8, int4, mxfp4); with "
                   "--weights after the weights' fake-quant, without it (or with none) over the weights as loaded "
                   "(W4A4 of a GPTQ/TurboBoA file); 4 and 8 mean int4 and int8. Default: what the file records "
                   "(`quantize --act-bits`), else none; --acts none overrides the record");
    ce->add_option("--kv", ev->kv,
                   "quantize the KV cache: the keys after RoPE and the values attention reads, per token and KV head "
                   "(e.g. int4, int8, mxfp4; 4 and 8 mean int4 and int8): with --acts 4 and a W4 file, W4A4KV4");
    ce->add_option("--adahop", ev->adahop,
                   "run every projection through AdaHOP's MXFP4 lp_matmul with this forward strategy: "
                   "none | hadamard | inner_outlier_extract_left | inner_outlier_extract_right | full_precision");
    ce->add_option("--device", ev->device, "cpu (default) | cuda (a CUDA build and a GPU)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    ce->add_option("--precision", ev->precision,
                   "fp32 (default) | bf16 (cuda only: BF16 weights and GEMM inputs, FP32 accumulation and activations)")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    ce->add_option("--threads", ev->threads,
                   "lowbit worker threads (default: all cores; LOWBIT_THREADS); OpenBLAS follows OPENBLAS_NUM_THREADS");
    ce->add_flag("--no-progress", ev->no_progress, "no progress line on stderr");
    ce->add_flag("--json", ev->json, "machine-readable report");
    ce->callback([ev, ctx_opt] { run_eval(*ev, ctx_opt->count() > 0); });

    auto ex = std::make_shared<ExportArgs>();
    auto* cx = app.add_subcommand("export-hf",
                                  "write the (dequantized) weights as an HF checkpoint: model.safetensors (float32) + config.json");
    cx->add_option("--model", ex->model, model_help)->required();
    cx->add_option("--out", ex->out, "output directory (created; existing files are replaced)")->required();
    cx->add_flag("--json", ex->json, "machine-readable output");
    cx->callback([ex] { run_export_hf(*ex); });
}

}  // namespace lowbit
