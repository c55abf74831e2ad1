// tokenizer_loaders.cpp — a TokenizerVocab from where vocabularies are stored: GGUF metadata
// (tokenizer.ggml.*, interop.md §2.4), a Hugging Face tokenizer.json (+ tokenizer_config.json), GPT-2's
// encoder.json + vocab.bpe; and load_tokenizer, which picks the loader for a model path.
#include "model/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/model_registry.h"
#include "model/tokenizer_pretokenize.h"

namespace lowbit {

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
    const std::string& name = file.name();
    LOWBIT_CHECK(file.has("tokenizer.ggml.model"), ErrorKind::input,
                 "{}: no tokenizer (the key tokenizer.ggml.model is missing)", name);
    TokenizerVocab v;
    v.model = file.get_string("tokenizer.ggml.model");
    LOWBIT_CHECK(v.model == "gpt2" || v.model == "llama", ErrorKind::input,
                 "{}: tokenizer.ggml.model '{}' is not supported; supported: gpt2 (byte-level BPE), llama "
                 "(SentencePiece BPE)", name, v.model);
    const bool spm = v.model == "llama";
    LOWBIT_CHECK(file.has("tokenizer.ggml.tokens"), ErrorKind::input, "{}: tokenizer.ggml.tokens is missing", name);
    v.tokens = file.get_string_array("tokenizer.ggml.tokens");
    v.scores = file.get_float_array_or("tokenizer.ggml.scores", {});
    v.token_types = file.get_int_array_or("tokenizer.ggml.token_type", {});
    if (!spm) {
        LOWBIT_CHECK(file.has("tokenizer.ggml.merges"), ErrorKind::input,
                     "{}: tokenizer.ggml.merges is missing (a byte-level BPE needs its merges)", name);
        v.merges = file.get_string_array("tokenizer.ggml.merges");
        v.pre = file.get_string_or("tokenizer.ggml.pre", "default");
    } else {
        v.pre = "default";
    }
    const int64_t n = int64_t(v.tokens.size());
    // llama.cpp's defaults: SentencePiece BOS 1, EOS 2, unknown 0 (when they exist).
    const auto id_key = [&](const char* key, int64_t def) -> int32_t {
        const int64_t id = file.get_int_or(key, def);
        if (!file.has(key) && id >= n) return -1;
        LOWBIT_CHECK(id >= -1 && id < n, ErrorKind::input, "{}: {} = {} is outside the vocabulary of {} tokens",
                     name, key, id, n);
        return int32_t(id);
    };
    v.bos_id = id_key("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
    v.eos_id = id_key("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
    v.unk_id = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
    std::string pre_id;
    tokenizer_detail::PreTokenizer pre{};
    const bool llama3 = !spm && tokenizer_detail::parse_pre_tokenizer(v.pre, pre, pre_id) &&
                        pre == tokenizer_detail::PreTokenizer::llama3;
    v.add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", spm || llama3);
    v.add_space_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", spm);
    if (v.add_bos && v.bos_id < 0) v.add_bos = false;
    try {
        return Tokenizer(std::move(v));
    } catch (const Error& e) {
        fail(e.kind(), "{}: {}", name, e.what());
    }
}

namespace {

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open the file", path);
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: not valid JSON ({})", path, e.what());
    }
}

// The pre-tokenizer id of a tokenizer.json "pre_tokenizer" object.
std::string hf_pre_tokenizer(const nlohmann::json& pt, const std::string& path) {
    static const std::string llama3_regex =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const std::string qwen2_regex =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    const auto type_of = [](const nlohmann::json& j) { return j.is_object() ? j.value("type", "") : ""; };
    const auto byte_level = [&](const nlohmann::json& j, bool use_regex) {
        return type_of(j) == "ByteLevel" && j.value("use_regex", true) == use_regex &&
               !j.value("add_prefix_space", false);
    };
    if (byte_level(pt, true)) return "gpt2";
    if (type_of(pt) == "Sequence" && pt.contains("pretokenizers") && pt["pretokenizers"].size() == 2) {
        const nlohmann::json& a = pt["pretokenizers"][0];
        const nlohmann::json& b = pt["pretokenizers"][1];
        if (type_of(a) == "Digits" && a.value("individual_digits", false) && byte_level(b, true)) return "smollm";
        if (type_of(a) == "Split" && a.contains("pattern") && a["pattern"].is_object() &&
            a["pattern"].contains("Regex") && a.value("behavior", "") == "Isolated" && byte_level(b, false)) {
            const std::string regex = a["pattern"]["Regex"].get<std::string>();
            if (regex == llama3_regex) return "llama-bpe";
            if (regex == qwen2_regex) return "qwen2";
        }
    }
    fail(ErrorKind::input, "{}: the pre_tokenizer {} is not one lowbit knows; supported: {}", path,
         pt.dump().substr(0, 300), Tokenizer::supported_pre_tokenizers());
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const std::string& path) {
    const nlohmann::json j = read_json(path);
    try {
        const nlohmann::json& model = j.at("model");
        const std::string type = model.value("type", "");
        LOWBIT_CHECK(type == "BPE", ErrorKind::input, "{}: model type '{}' is not supported (only BPE)", path, type);
        LOWBIT_CHECK(!model.value("byte_fallback", false), ErrorKind::input,
                     "{}: a SentencePiece-style BPE (byte_fallback) tokenizer.json is not supported; load the "
                     "model's GGUF instead", path);
        TokenizerVocab v;
        v.model = "gpt2";
        v.pre = hf_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()), path);
        // Ids: the BPE vocabulary plus added tokens; holes become unused "[PAD<i>]" tokens (as convert_hf_to_gguf).
        int64_t n = 0;
        for (const auto& [tok, id] : model.at("vocab").items()) n = std::max<int64_t>(n, id.get<int64_t>() + 1);
        const nlohmann::json added = j.value("added_tokens", nlohmann::json::array());
        for (const auto& t : added) n = std::max<int64_t>(n, t.at("id").get<int64_t>() + 1);
        LOWBIT_CHECK(n > 0 && n < INT32_MAX / 2, ErrorKind::input, "{}: bad vocabulary size {}", path, n);
        v.tokens.assign(size_t(n), std::string());
        v.token_types.assign(size_t(n), token_type_unused);
        for (const auto& [tok, id] : model.at("vocab").items()) {
            const int64_t i = id.get<int64_t>();
            LOWBIT_CHECK(i >= 0, ErrorKind::input, "{}: token '{}' has a negative id", path, tok);
            v.tokens[size_t(i)] = tok;
            v.token_types[size_t(i)] = token_type_normal;
        }
        for (const auto& t : added) {
            const size_t i = t.at("id").get<size_t>();
            v.tokens[i] = t.at("content").get<std::string>();
            v.token_types[i] = t.value("special", false) ? token_type_control : token_type_user_defined;
        }
        for (size_t i = 0; i < v.tokens.size(); ++i) {
            if (v.tokens[i].empty()) v.tokens[i] = "[PAD" + std::to_string(i) + "]";
        }
        for (const auto& m : model.at("merges")) {
            if (m.is_string()) {
                v.merges.push_back(m.get<std::string>());
            } else {  // transformers >= 4.45 writes [a, b] pairs (interop.md §5.2)
                LOWBIT_CHECK(m.is_array() && m.size() == 2, ErrorKind::input, "{}: merge {} is neither \"a b\" "
                             "nor [a, b]", path, m.dump());
                v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            }
        }
        // BOS: a TemplateProcessing post-processor that starts with a special token adds it.
        const auto id_of = [&](const std::string& s) -> int32_t {
            for (size_t i = 0; i < v.tokens.size(); ++i) {
                if (v.tokens[i] == s) return int32_t(i);
            }
            return -1;
        };
        const nlohmann::json post = j.value("post_processor", nlohmann::json());
        if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") &&
            !post["single"].empty() && post["single"][0].contains("SpecialToken")) {
            v.bos_id = id_of(post["single"][0]["SpecialToken"].value("id", ""));
            v.add_bos = v.bos_id >= 0;
        }
        // tokenizer_config.json next to it names BOS/EOS (and may say add_bos_token).
        const size_t slash = path.find_last_of('/');
        const std::string config_path =
            (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "tokenizer_config.json";
        if (std::ifstream(config_path).good()) {
            const nlohmann::json c = read_json(config_path);
            const auto token_name = [](const nlohmann::json& x) -> std::string {
                if (x.is_string()) return x.get<std::string>();
                if (x.is_object()) return x.value("content", "");
                return "";
            };
            if (c.contains("bos_token")) v.bos_id = id_of(token_name(c["bos_token"]));
            if (c.contains("eos_token")) v.eos_id = id_of(token_name(c["eos_token"]));
            if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) v.add_bos = c["add_bos_token"].get<bool>();
        }
        if (v.add_bos && v.bos_id < 0) v.add_bos = false;
        return Tokenizer(std::move(v));
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: unexpected tokenizer.json layout ({})", path, e.what());
    } catch (const Error& e) {
        if (std::string_view(e.what()).find(path) != std::string_view::npos) throw;
        fail(e.kind(), "{}: {}", path, e.what());
    }
}

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
    const nlohmann::json enc = read_json(encoder_json);
    LOWBIT_CHECK(enc.is_object() && !enc.empty(), ErrorKind::input, "{}: expected an object token → id",
                 encoder_json);
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = "gpt2";
    int64_t n = 0;
    for (const auto& [tok, id] : enc.items()) {
        LOWBIT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, ErrorKind::input,
                     "{}: token '{}' has no valid id", encoder_json, tok);
        n = std::max<int64_t>(n, id.get<int64_t>() + 1);
    }
    v.tokens.assign(size_t(n), std::string());
    v.token_types.assign(size_t(n), token_type_normal);
    for (const auto& [tok, id] : enc.items()) v.tokens[id.get<size_t>()] = tok;
    std::ifstream in(vocab_bpe, std::ios::binary);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open the file", vocab_bpe);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        v.merges.push_back(line);
    }
    // <|endoftext|> is GPT-2's only special token (a control token in llama.cpp's gpt-2 vocabulary).
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        if (v.tokens[i] == "<|endoftext|>") {
            v.token_types[i] = token_type_control;
            v.bos_id = v.eos_id = int32_t(i);
        }
    }
    try {
        return Tokenizer(std::move(v));
    } catch (const Error& e) {
        fail(e.kind(), "{} + {}: {}", encoder_json, vocab_bpe, e.what());
    }
}

Tokenizer load_tokenizer(const std::string& model_path, const std::string& override_path) {
    namespace fs = std::filesystem;
    const std::string p = override_path.empty() ? model_path : resolve_model_path(override_path);
    if (fs::is_directory(p)) {
        const fs::path tj = fs::path(p) / "tokenizer.json";
        LOWBIT_CHECK(fs::exists(tj), ErrorKind::input,
                     "{}: no tokenizer.json in the checkpoint; pass --tokenizer with a GGUF or tokenizer.json", p);
        return Tokenizer::from_hf_json(tj.string());
    }
    if (fs::path(p).filename() == "config.json") return load_tokenizer(fs::path(p).parent_path().string(), "");
    if (fs::path(p).extension() == ".json") return Tokenizer::from_hf_json(p);
    return Tokenizer::from_gguf(GgufFile::open(p));
}

}  // namespace lowbit
