// test_tokenizer_vectors.cpp — the whole tokenizer (model/tokenizer.h) against llama.cpp's own test vectors
// (gpt-2, llama-bpe, llama-spm; every case id for id, with parse_special = false and no BOS, as llama.cpp's
// test-tokenizer-0 runs them), decode(encode(x)) == x on them and on random text, BOS and special tokens of
// the real vocabularies, and GPT-2's GGUF against its encoder.json + vocab.bpe. The vectors are in the
// shared data (io/corpus.h finds it); the tests skip, saying so, when it is not found.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/corpus.h"
#include "io/gguf_file.h"
#include "model/tokenizer.h"

using namespace lowbit;

namespace {

// The shared data folder when it holds tokenizers/, else empty.
std::string tokenizer_data_dir() {
    try {
        const std::string dir = shared_data_dir();
        return std::filesystem::is_directory(dir + "/tokenizers") ? dir : "";
    } catch (const Error&) {
        return "";
    }
}

#define REQUIRE_SHARED_DATA(dir)                                                                          \
    const std::string dir = tokenizer_data_dir();                                                         \
    if (dir.empty()) {                                                                                    \
        GTEST_SKIP() << "shared data not found (set LOWBIT_SHARED_DATA to the shared/data folder)";      \
    }                                                                                                     \
    static_assert(true)

struct VectorCase {
    std::string text;
    std::vector<int32_t> ids;
};

// llama.cpp's format: inputs separated by "\n__ggml_vocab_test__\n", one line of ids per input.
std::vector<VectorCase> read_vectors(const std::string& gguf_path) {
    const std::string inp = read_text_file(gguf_path + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t pos = 0; pos < inp.size();) {
        size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::ifstream out(gguf_path + ".out");
    std::vector<VectorCase> cases;
    std::string line;
    size_t i = 0;
    while (std::getline(out, line)) {
        VectorCase c;
        c.text = i < texts.size() ? texts[i] : std::string();
        std::istringstream ss(line);
        int32_t id;
        while (ss >> id) c.ids.push_back(id);
        cases.push_back(std::move(c));
        ++i;
    }
    EXPECT_EQ(texts.size(), cases.size()) << gguf_path;
    return cases;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += std::to_string(id) + " ";
    return s;
}

void check_vectors(const std::string& name, bool byte_level) {
    REQUIRE_SHARED_DATA(dir);
    const std::string path = dir + "/tokenizers/llama-cpp-vectors/ggml-vocab-" + name + ".gguf";
    Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
    const auto cases = read_vectors(path);
    ASSERT_GE(cases.size(), 40u);
    size_t matched = 0;
    for (const VectorCase& c : cases) {
        const auto ids = tok.encode(c.text, false, false);
        EXPECT_EQ(ids, c.ids) << name << " on '" << c.text << "': got " << show(ids) << " expected " << show(c.ids);
        matched += ids == c.ids;
        if (byte_level) {
            EXPECT_EQ(tok.decode(ids), c.text) << name << " round trip of '" << c.text << "'";
        }
    }
    std::cout << "[ vectors  ] " << name << ": " << matched << " of " << cases.size() << " cases match llama.cpp\n";
}

}  // namespace

TEST(TokenizerVectors, Gpt2) { check_vectors("gpt-2", true); }
TEST(TokenizerVectors, LlamaBpe) { check_vectors("llama-bpe", true); }
TEST(TokenizerVectors, LlamaSpm) { check_vectors("llama-spm", false); }

TEST(TokenizerVectors, SpmRoundTripAndBos) {
    REQUIRE_SHARED_DATA(dir);
    Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(dir + "/tokenizers/llama-cpp-vectors/ggml-vocab-llama-spm.gguf"));
    EXPECT_EQ(tok.model(), "llama");
    EXPECT_TRUE(tok.add_bos());
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_EQ(tok.unk_id(), 0);
    for (const std::string s : {"Hello world", " Hello", "  two spaces", "🦙 llama\nnew line", "", "\xF0\x9F\xA6\x99"}) {
        const auto ids = tok.encode(s, true);
        ASSERT_FALSE(ids.empty());
        EXPECT_EQ(ids[0], 1);
        EXPECT_EQ(tok.decode(ids, false), s) << s;
    }
    // parse_special: "</s>" is the EOS control token, and the text after it gets the space prefix again
    const auto ids = tok.encode("Hi</s>there", false, true);
    const auto plain = tok.encode("Hi</s>there", false, false);
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids[1], 2);
    EXPECT_NE(plain, ids);
    EXPECT_EQ(tok.decode(ids), "Hi</s>there");
    EXPECT_EQ(tok.decode(ids, false), "Hithere");
    EXPECT_EQ(tok.token_piece(tok.token_id("<0x0A>")), "\n");
}

TEST(TokenizerVectors, Gpt2GgufEqualsEncoderJson) {
    REQUIRE_SHARED_DATA(dir);
    Tokenizer a = Tokenizer::from_gguf(GgufFile::open(dir + "/tokenizers/llama-cpp-vectors/ggml-vocab-gpt-2.gguf"));
    Tokenizer b = Tokenizer::from_gpt2_files(dir + "/tokenizers/gpt2/encoder.json", dir + "/tokenizers/gpt2/vocab.bpe");
    EXPECT_EQ(a.vocab_size(), b.vocab_size());
    EXPECT_EQ(a.pre(), "gpt2");
    EXPECT_EQ(b.eos_id(), 50256);
    const std::string text = read_text_file(dir + "/corpora/sotu/2021_joseph_r_biden_d.txt");
    ASSERT_FALSE(text.empty());
    const auto ids = a.encode(text, false);
    EXPECT_EQ(ids, b.encode(text, false));
    EXPECT_EQ(a.decode(ids), text);
    EXPECT_GT(ids.size(), text.size() / 6);
}

TEST(TokenizerVectors, LlamaBpeDefaultsAndSpecials) {
    REQUIRE_SHARED_DATA(dir);
    Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(dir + "/tokenizers/llama-cpp-vectors/ggml-vocab-llama-bpe.gguf"));
    EXPECT_EQ(tok.pre(), "llama-bpe");
    EXPECT_TRUE(tok.add_bos());  // llama.cpp's default for llama3 when the file does not say
    EXPECT_EQ(tok.bos_id(), 128000);
    const std::string text = "<|begin_of_text|>Hello<|eot_id|>";
    const auto special = tok.encode(text, false, true);
    ASSERT_EQ(special.size(), 3u);
    EXPECT_EQ(special[0], 128000);
    EXPECT_EQ(special[2], tok.token_id("<|eot_id|>"));
    const auto plain = tok.encode(text, false, false);
    EXPECT_GT(plain.size(), 3u);
    EXPECT_EQ(tok.decode(plain), text);
    EXPECT_EQ(tok.decode(special), text);
    EXPECT_EQ(tok.decode(special, false), "Hello");
}

TEST(TokenizerVectors, RandomTextRoundTrips) {
    // Random strings over a mix of ASCII, whitespace runs, digits, multi-byte characters and stray bytes:
    // byte-level decode(encode(x)) == x for any bytes; SentencePiece for valid UTF-8.
    REQUIRE_SHARED_DATA(dir);
    const std::string vec = dir + "/tokenizers/llama-cpp-vectors/ggml-vocab-";
    Tokenizer gpt2 = Tokenizer::from_gguf(GgufFile::open(vec + "gpt-2.gguf"));
    Tokenizer llama3 = Tokenizer::from_gguf(GgufFile::open(vec + "llama-bpe.gguf"));
    Tokenizer spm = Tokenizer::from_gguf(GgufFile::open(vec + "llama-spm.gguf"));
    const std::vector<std::string> atoms = {"a", "Z", "the", " ", "  ", "\n", "\r\n", "\t", "7", "123", "'s", "'LL",
                                            "!", "...", "é", "東京", "🦙", "\xE2\x80\x94", "\xC2\xA0", "\u3000"};
    uint64_t state = 0x9E3779B97F4A7C15ull;
    const auto next = [&] {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        return state;
    };
    for (int trial = 0; trial < 300; ++trial) {
        std::string valid, bytes;
        const int n = int(next() % 24);
        for (int i = 0; i < n; ++i) {
            valid += atoms[next() % atoms.size()];
            bytes += next() % 5 == 0 ? std::string(1, char(next() % 256)) : atoms[next() % atoms.size()];
        }
        EXPECT_EQ(gpt2.decode(gpt2.encode(bytes, false)), bytes);
        EXPECT_EQ(llama3.decode(llama3.encode(bytes, false)), bytes);
        EXPECT_EQ(spm.decode(spm.encode(valid, true), false), valid);
    }
}
