// cmd_tokenize_corpus.cpp — `lowbit tokenize-corpus`: text files (or JSON-lines files of documents) to a
// token-shard set with a train/validation split by document hash (io/token_shards.h, docs/corpus.md).
// Documents are read in order, tokenized in parallel a batch at a time, and written in input order, so
// the shards are the same whatever the thread count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "core/wall_clock.h"
#include "io/corpus.h"
#include "io/model_registry.h"
#include "io/token_shards.h"
#include "model/tokenizer.h"

namespace lowbit {

namespace {

namespace fs = std::filesystem;

struct TokenizeCorpusArgs {
    std::string model, tokenizer, out, shard_tokens = "100M", separator;
    std::vector<std::string> inputs;
    double val_fraction = 0.005;
    uint64_t seed = 0;
    int threads = 0;
    bool json = false;
};

constexpr size_t batch_text_bytes = 16 << 20;  // text tokenized per parallel step
constexpr size_t batch_documents = 4096;

// "100M", "64K", "2G", "12345" → a token count; Error(usage) otherwise.
int64_t parse_count(const std::string& s) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(s, &used);
    } catch (const std::exception&) {
        fail(ErrorKind::usage, "--shard-tokens '{}' is not a count (e.g. 100M, 500K, 1G)", s);
    }
    const std::string suffix = s.substr(used);
    const double scale = suffix.empty() ? 1 : suffix == "K" ? 1e3 : suffix == "M" ? 1e6 : suffix == "G" ? 1e9 : 0;
    LOWBIT_CHECK(scale > 0 && v * scale >= 1, ErrorKind::usage, "--shard-tokens '{}' is not a positive count (e.g. 100M, 500K, 1G)", s);
    return int64_t(v * scale);
}

// The tokenizer (and a name for it): --tokenizer gpt2 is GPT-2's own files in the shared data folder;
// otherwise load_tokenizer on --model, with --tokenizer (a .gguf, a tokenizer.json or a known model) over it.
Tokenizer pick_tokenizer(const TokenizeCorpusArgs& a, std::string& source) {
    LOWBIT_CHECK(!a.model.empty() || !a.tokenizer.empty(), ErrorKind::usage, "give --model M or --tokenizer T");
    if (a.tokenizer == "gpt2") {
        const fs::path dir = fs::path(shared_data_dir()) / "tokenizers" / "gpt2";
        source = dir.string();
        return Tokenizer::from_gpt2_files((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
    }
    source = resolve_model_path(a.tokenizer.empty() ? a.model : a.tokenizer);
    return load_tokenizer(source, "");
}

// "<model>/<pre>/<vocab size>/<FNV-1a 64 of the tokens and merges>": two vocabularies with one id are
// the same tokenizer for every purpose a shard has.
std::string tokenizer_id(const Tokenizer& tok) {
    uint64_t h = fnv1a64_offset;
    const auto add = [&](const std::string& s) {
        h = fnv1a64({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, h);
        h = fnv1a64({reinterpret_cast<const uint8_t*>("\n"), 1}, h);
    };
    for (const auto& t : tok.vocab().tokens) add(t);
    for (const auto& m : tok.vocab().merges) add(m);
    return fmt::format("{}/{}/{}/{:016x}", tok.model(), tok.pre(), tok.vocab_size(), h);
}

// --separator TOKEN, else <|endoftext|>, else EOS, else BOS; -1 (no separator) only when there is none.
int32_t pick_separator(const Tokenizer& tok, const std::string& requested) {
    if (!requested.empty()) {
        const int32_t id = tok.token_id(requested);
        LOWBIT_CHECK(id >= 0, ErrorKind::usage, "--separator '{}' is not a token of the vocabulary", requested);
        return id;
    }
    if (const int32_t id = tok.token_id("<|endoftext|>"); id >= 0) return id;
    return tok.eos_id() >= 0 ? tok.eos_id() : tok.bos_id();
}

// The input files: a file as given; a directory's *.txt and *.jsonl files, recursively, in path order.
std::vector<std::string> input_files(const std::vector<std::string>& inputs) {
    std::vector<std::string> files;
    for (const auto& in : inputs) {
        LOWBIT_CHECK(fs::exists(in), ErrorKind::input, "{}: no such file or directory", in);
        if (!fs::is_directory(in)) {
            files.push_back(in);
            continue;
        }
        std::vector<std::string> found;
        for (const auto& e : fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink)) {
            const std::string ext = e.path().extension().string();
            if (e.is_regular_file() && (ext == ".txt" || ext == ".jsonl")) found.push_back(e.path().string());
        }
        LOWBIT_CHECK(!found.empty(), ErrorKind::input, "{}: no .txt or .jsonl files in the directory", in);
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
    }
    return files;
}

// Reads documents in order: a .jsonl file gives one per non-empty line (its "text" string), any other file
// is one document.
class DocumentReader {
public:
    explicit DocumentReader(std::vector<std::string> files) : files_(std::move(files)) {}

    // The next document into `doc`; false at the end. bytes_read() counts the input bytes consumed,
    // file_index() is the position in `files` of the document's file.
    bool next(std::string& doc) {
        while (true) {
            if (jsonl_.is_open()) {
                std::string line;
                if (std::getline(jsonl_, line)) {
                    ++line_no_;
                    bytes_read_ += line.size() + 1;
                    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
                    doc = jsonl_text(line);
                    return true;
                }
                LOWBIT_CHECK(jsonl_.eof(), ErrorKind::input, "{}: read error after line {}", files_[index_ - 1], line_no_);
                jsonl_.close();
            }
            if (index_ == files_.size()) return false;
            const std::string& f = files_[index_++];
            if (fs::path(f).extension() == ".jsonl") {
                jsonl_.open(f, std::ios::binary);
                LOWBIT_CHECK(jsonl_.is_open(), ErrorKind::input, "{}: cannot open for reading", f);
                line_no_ = 0;
                continue;
            }
            doc = read_text_file(f);
            bytes_read_ += doc.size();
            return true;
        }
    }
    uint64_t bytes_read() const { return bytes_read_; }
    size_t file_index() const { return index_ - 1; }

private:
    std::string jsonl_text(const std::string& line) const {
        const std::string& f = files_[index_ - 1];
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            fail(ErrorKind::input, "{}:{}: not a JSON object: {}", f, line_no_, e.what());
        }
        LOWBIT_CHECK(j.is_object() && j.contains("text") && j.at("text").is_string(), ErrorKind::input,
                     "{}:{}: a JSON-lines document needs a \"text\" string", f, line_no_);
        return j.at("text").get<std::string>();
    }

    std::vector<std::string> files_;
    size_t index_ = 0;
    std::ifstream jsonl_;
    uint64_t line_no_ = 0, bytes_read_ = 0;
};

void run_tokenize_corpus(const TokenizeCorpusArgs& a) {
    LOWBIT_CHECK(a.val_fraction >= 0 && a.val_fraction < 1, ErrorKind::usage, "--val-fraction must be in [0, 1), not {}",
                 a.val_fraction);
    const int64_t shard_tokens = parse_count(a.shard_tokens);
    if (a.threads > 0) set_thread_count(a.threads);
    std::string tokenizer_source;
    const Tokenizer tok = pick_tokenizer(a, tokenizer_source);
    const std::vector<std::string> files = input_files(a.inputs);
    uint64_t total_bytes = 0;
    for (const auto& f : files) total_bytes += fs::file_size(f);

    TokenShardInfo info;
    info.vocab_size = uint32_t(tok.vocab_size());
    info.token_bytes = token_bytes_for_vocab(tok.vocab_size());
    info.separator_id = pick_separator(tok, a.separator);
    info.tokenizer = tokenizer_id(tok);
    TokenShardSetWriter writer(a.out, info, shard_tokens, a.seed, a.val_fraction);

    const auto t0 = std::chrono::steady_clock::now();
    ProgressLine progress("tokenize-corpus", int64_t(total_bytes), "bytes");
    DocumentReader reader(files);
    std::vector<std::string> docs;
    std::vector<size_t> doc_files;
    std::vector<std::vector<int32_t>> ids;
    std::vector<int64_t> file_docs(files.size(), 0), file_tokens(files.size(), 0);
    int64_t text_bytes = 0, empty_docs = 0;
    bool more = true;
    while (more) {
        docs.clear();
        doc_files.clear();
        size_t bytes = 0;
        std::string doc;
        while (docs.size() < batch_documents && bytes < batch_text_bytes && (more = reader.next(doc))) {
            if (doc.empty()) {
                ++empty_docs;
                continue;
            }
            bytes += doc.size();
            docs.push_back(std::move(doc));
            doc_files.push_back(reader.file_index());
        }
        ids.assign(docs.size(), {});
        parallel_for(int64_t(docs.size()), 1, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) ids[i] = tok.encode(docs[i], false);
        });
        for (size_t i = 0; i < docs.size(); ++i) {
            writer.add_document(document_in_validation(docs[i], a.seed, a.val_fraction) ? "val" : "train", ids[i]);
            file_docs[doc_files[i]] += 1;
            file_tokens[doc_files[i]] += int64_t(ids[i].size()) + (info.separator_id >= 0);
        }
        text_bytes += int64_t(bytes);
        progress.update(int64_t(reader.bytes_read()));
    }
    progress.finish();
    LOWBIT_CHECK(std::accumulate(file_docs.begin(), file_docs.end(), int64_t(0)) > 0, ErrorKind::input,
                 "no documents in {} (every file is empty)", fmt::format("{}", fmt::join(a.inputs, ", ")));
    const double secs = seconds_since(t0);

    nlohmann::json per_file = nlohmann::json::array();  // what the set is made of, file by file
    for (size_t f = 0; f < files.size(); ++f)
        per_file.push_back({{"file", files[f]}, {"bytes", fs::file_size(files[f])}, {"documents", file_docs[f]},
                            {"tokens", file_tokens[f]}});
    nlohmann::json run_info = {{"inputs", a.inputs},
                               {"files", per_file},
                               {"text_bytes", text_bytes},
                               {"empty_documents_skipped", empty_docs},
                               {"tokenizer_source", tokenizer_source},
                               {"separator_token", info.separator_id >= 0 ? tok.token_text(info.separator_id) : ""},
                               {"shard_tokens", shard_tokens}};
    const TokenShardManifest& m = writer.finish(run_info);

    int64_t tokens = 0;
    nlohmann::json splits = nlohmann::json::object();
    for (const auto& [split, entries] : m.splits) {
        int64_t n = 0, d = 0;
        for (const auto& e : entries) n += e.tokens, d += e.documents;
        tokens += n;
        splits[split] = {{"shards", entries.size()}, {"documents", d}, {"tokens", n}};
    }
    if (a.json) {
        std::printf("%s\n", nlohmann::json({{"out", a.out}, {"tokenizer", m.tokenizer}, {"token_bytes", m.token_bytes},
                                             {"splits", splits}, {"tokens", tokens}, {"text_bytes", text_bytes},
                                             {"seconds", secs}, {"tokens_per_second", secs > 0 ? tokens / secs : 0.0}})
                                .dump()
                                .c_str());
        return;
    }
    std::printf("%-6s %7s %10s %14s\n", "split", "shards", "documents", "tokens");
    for (const auto& [split, s] : splits.items())
        std::printf("%-6s %7lld %10lld %14lld\n", split.c_str(), (long long)s["shards"].get<int64_t>(),
                    (long long)s["documents"].get<int64_t>(), (long long)s["tokens"].get<int64_t>());
    std::printf("%s: %lld tokens (%u-byte ids, separator %d) from %.1f MB of text in %zu files, %.2f bytes/token, "
                "%.0f s, %.0f tokens/s\n",
                a.out.c_str(), (long long)tokens, m.token_bytes, m.separator_id, text_bytes / 1e6, files.size(),
                tokens ? double(text_bytes) / double(tokens) : 0.0, secs, secs > 0 ? tokens / secs : 0.0);
}

}  // namespace

void register_tokenize_corpus_command(CLI::App& app) {
    auto a = std::make_shared<TokenizeCorpusArgs>();
    auto* c = app.add_subcommand("tokenize-corpus", "text files to token shards with a train/validation split (docs/corpus.md)");
    c->add_option("--model", a->model, "the model whose tokenizer to use (a .gguf, an HF checkpoint, or smollm2-135m)");
    c->add_option("--tokenizer", a->tokenizer, "a .gguf, a tokenizer.json, a known model, or gpt2 (GPT-2's own files)");
    c->add_option("--input", a->inputs, "a text file, a .jsonl file (one {\"text\": …} per line) or a directory of them")
        ->required();
    c->add_option("--out", a->out, "the shard directory to create")->required();
    c->add_option("--val-fraction", a->val_fraction, "share of documents in the validation split (default 0.005)");
    c->add_option("--shard-tokens", a->shard_tokens, "tokens per shard before the next is started (default 100M)");
    c->add_option("--seed", a->seed, "seed of the document split (default 0)");
    c->add_option("--separator", a->separator, "the token written after each document (default <|endoftext|>, else EOS, else BOS)");
    c->add_option("--threads", a->threads, "tokenizer threads (default: all; LOWBIT_THREADS)");
    c->add_flag("--json", a->json, "machine-readable summary");
    c->callback([a] { run_tokenize_corpus(*a); });
}

}  // namespace lowbit
