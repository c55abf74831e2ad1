// tool_tokenize.cpp — a test tool for the cross-checks: loads a tokenizer (GGUF file, tokenizer.json, or
// GPT-2's encoder.json + vocab.bpe folder), tokenizes each text file and prints one JSON object
// {"<file>": [ids...], ...}; stderr gets bytes, tokens, time and whether decode(encode(x)) == x.
// --pre ID swaps in another pre-tokenizer; --pre-tokens prints the pre-tokens (strings) instead of ids.
//   tool_tokenize (--gguf PATH | --hf-json PATH | --gpt2 DIR) [--pre ID] [--pre-tokens] [--bos] [--special] FILE...
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/corpus.h"
#include "io/gguf_file.h"
#include "model/tokenizer.h"

int main(int argc, char** argv) {
    using namespace lowbit;
    std::string gguf, hf_json, gpt2_dir, pre;
    bool bos = false, special = false, pre_tokens = false;
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "tool_tokenize: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--gguf") {
            gguf = value();
        } else if (a == "--hf-json") {
            hf_json = value();
        } else if (a == "--gpt2") {
            gpt2_dir = value();
        } else if (a == "--pre") {
            pre = value();
        } else if (a == "--pre-tokens") {
            pre_tokens = true;
        } else if (a == "--bos") {
            bos = true;
        } else if (a == "--special") {
            special = true;
        } else {
            files.push_back(a);
        }
    }
    if (int(!gguf.empty()) + int(!hf_json.empty()) + int(!gpt2_dir.empty()) != 1 || files.empty()) {
        std::fprintf(stderr, "usage: tool_tokenize (--gguf PATH | --hf-json PATH | --gpt2 DIR) [--pre ID] [--pre-tokens] "
                             "[--bos] [--special] FILE...\n");
        return 2;
    }
    try {
        Tokenizer tok = !gguf.empty()      ? Tokenizer::from_gguf(GgufFile::open(gguf))
                        : !hf_json.empty() ? Tokenizer::from_hf_json(hf_json)
                                           : Tokenizer::from_gpt2_files(gpt2_dir + "/encoder.json", gpt2_dir + "/vocab.bpe");
        if (!pre.empty()) {
            TokenizerVocab v = tok.vocab();
            v.pre = pre;
            tok = Tokenizer(std::move(v));
        }
        nlohmann::json out = nlohmann::json::object();
        size_t n_bytes = 0, n_tokens = 0;
        bool round_trip = true;
        double seconds = 0;
        for (const std::string& f : files) {
            const std::string text = read_text_file(f);
            if (pre_tokens) {
                out[f] = tok.pre_tokenize(text);
                continue;
            }
            const auto t0 = std::chrono::steady_clock::now();
            const std::vector<int32_t> ids = tok.encode(text, bos, special);
            seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            round_trip = round_trip && tok.decode(ids, true) == (bos ? tok.token_text(tok.bos_id()) : "") + text;
            n_bytes += text.size();
            n_tokens += ids.size();
            out[f] = ids;
        }
        std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        if (pre_tokens) return 0;
        std::fprintf(stderr, "tool_tokenize: %zu bytes -> %zu tokens in %.3f s (%.2f MB/s); round trip %s\n", n_bytes,
                     n_tokens, seconds, seconds > 0 ? n_bytes / seconds / 1e6 : 0.0, round_trip ? "ok" : "FAILED");
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "tool_tokenize: %s\n", e.what());
        return int(e.kind());
    }
}
