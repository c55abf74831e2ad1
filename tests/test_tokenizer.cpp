// test_tokenizer.cpp — the tokenizer (model/tokenizer.h): llama.cpp's own test vectors (gpt-2, llama-bpe,
// llama-spm; every case id for id, with parse_special = false and no BOS, as llama.cpp's
// test-tokenizer-0 runs them), decode(encode(x)) == x, the pre-tokenizer scanners on hand-made cases, the
// merge and special-token rules on tiny vocabularies, the loaders (GGUF, tokenizer.json with both merge
// layouts, GPT-2's encoder.json + vocab.bpe) and their error messages, and the Unicode class table.
// Tests that need the shared data skip, saying so, when it is not found.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/tokenizer.h"
#include "model/unicode_categories.h"

using namespace lowbit;

namespace {

// The shared data folder: $LOWBIT_SHARED_DATA, then <source>/../shared/data (set by CMake; CI clones the
// repository next to a copy of shared/), then /work/shared/data. Empty when none exists.
std::string shared_data_dir() {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("LOWBIT_SHARED_DATA")) candidates.emplace_back(env);
#ifdef LOWBIT_SHARED_DATA_DIR
    candidates.emplace_back(LOWBIT_SHARED_DATA_DIR);
#endif
    candidates.emplace_back("/work/shared/data");
    for (const std::string& c : candidates) {
        if (std::filesystem::is_directory(c + "/tokenizers")) return c;
    }
    return "";
}

#define REQUIRE_SHARED_DATA(dir)                                                                          \
    const std::string dir = shared_data_dir();                                                            \
    if (dir.empty()) {                                                                                    \
        GTEST_SKIP() << "shared data not found (set LOWBIT_SHARED_DATA to the shared/data folder)";      \
    }                                                                                                     \
    static_assert(true)

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct VectorCase {
    std::string text;
    std::vector<int32_t> ids;
};

// llama.cpp's format: inputs separated by "\n__ggml_vocab_test__\n", one line of ids per input.
std::vector<VectorCase> read_vectors(const std::string& gguf_path) {
    const std::string inp = read_text(gguf_path + ".inp");
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

TokenizerVocab tiny_byte_vocab(std::vector<std::string> extra_tokens, std::vector<std::string> merges) {
    // every byte's mapped character, then the extra tokens
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = "gpt2";
    // bytes_to_unicode, written out independently of the library
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        std::string s;
        utf8_append(s, printable ? b : next++);
        v.tokens.push_back(s);
    }
    for (auto& t : extra_tokens) v.tokens.push_back(t);
    v.merges = std::move(merges);
    return v;
}

Tokenizer tiny_with_pre(const std::string& pre) {
    TokenizerVocab v = tiny_byte_vocab({}, {"a b"});
    v.pre = pre;
    return Tokenizer(std::move(v));
}

std::vector<std::string> words(const Tokenizer& t, const std::string& s) { return t.pre_tokenize(s); }

}  // namespace

// ---------------------------------------------------------------------------------------------------
// llama.cpp's vectors
// ---------------------------------------------------------------------------------------------------

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
    const std::string text = read_text(dir + "/corpora/sotu/2021_joseph_r_biden_d.txt");
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

// ---------------------------------------------------------------------------------------------------
// Pre-tokenizers
// ---------------------------------------------------------------------------------------------------

TEST(TokenizerPre, Gpt2Regex) {
    Tokenizer t(tiny_byte_vocab({}, {"a b"}));
    using V = std::vector<std::string>;
    EXPECT_EQ(words(t, "Hello world"), (V{"Hello", " world"}));
    EXPECT_EQ(words(t, "Hello  world"), (V{"Hello", " ", " world"}));  // \s+(?!\S) gives back one space
    EXPECT_EQ(words(t, "a \n\n b"), (V{"a", " \n\n", " b"}));
    EXPECT_EQ(words(t, "x\n\nA"), (V{"x", "\n", "\n", "A"}));
    EXPECT_EQ(words(t, "end   "), (V{"end", "   "}));
    EXPECT_EQ(words(t, "I'm we'LL they're"), (V{"I", "'m", " we", "'", "LL", " they", "'re"}));  // case-sensitive
    EXPECT_EQ(words(t, "x=12.5%!!"), (V{"x", "=", "12", ".", "5", "%!!"}));
    EXPECT_EQ(words(t, "naïve café 東京"), (V{"naïve", " café", " 東京"}));
    EXPECT_EQ(words(t, "\t\tx"), (V{"\t", "\t", "x"}));
    EXPECT_EQ(words(t, ""), V{});
}

TEST(TokenizerPre, Llama3AndQwen2Regex) {
    const Tokenizer l3 = tiny_with_pre("llama-bpe"), q2 = tiny_with_pre("qwen2");
    using V = std::vector<std::string>;
    EXPECT_EQ(words(l3, "1234567"), (V{"123", "456", "7"}));
    EXPECT_EQ(words(q2, "1234567"), (V{"1", "2", "3", "4", "5", "6", "7"}));
    EXPECT_EQ(words(l3, "I'M we'Ll"), (V{"I", "'M", " we", "'Ll"}));  // case-insensitive contractions
    EXPECT_EQ(words(l3, "(hello) \"x\""), (V{"(hello", ")", " \"", "x", "\""}));  // one prefix char at most
    EXPECT_EQ(words(l3, "a  \n  b"), (V{"a", "  \n", " ", " b"}));
    EXPECT_EQ(words(l3, "x\n\ny"), (V{"x", "\n\n", "y"}));
    EXPECT_EQ(words(l3, "hi!!\n\nok"), (V{"hi", "!!\n\n", "ok"}));
    EXPECT_EQ(words(l3, "\tword   "), (V{"\tword", "   "}));
    EXPECT_EQ(words(l3, "abc123def"), (V{"abc", "123", "def"}));
}

TEST(TokenizerPre, SmollmAndDefault) {
    const Tokenizer sm = tiny_with_pre("smollm"), df = tiny_with_pre("default");
    using V = std::vector<std::string>;
    EXPECT_EQ(words(sm, "in 2021 we"), (V{"in", " ", "2", "0", "2", "1", " we"}));
    EXPECT_EQ(words(sm, "x²"), (V{"x", "²"}));  // \p{N} includes No
    EXPECT_EQ(words(df, "a,b 12345"), (V{"a", ",", "b", " ", "123", "45"}));
}

TEST(TokenizerPre, UnknownIdIsRefusedWithTheList) {
    auto v = tiny_byte_vocab({}, {"a b"});
    v.pre = "tekken";
    try {
        Tokenizer t(v);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("'tekken'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("llama-bpe"), std::string::npos) << msg;
        EXPECT_NE(msg.find("smollm"), std::string::npos) << msg;
    }
}

// ---------------------------------------------------------------------------------------------------
// Merge rules on tiny vocabularies
// ---------------------------------------------------------------------------------------------------

TEST(TokenizerBpe, MergesByRankLeftmostFirst) {
    // tokens 256.. : "ab", "bc", "abc", "aa", "aaa"
    Tokenizer t(tiny_byte_vocab({"ab", "bc", "abc", "aa", "aaa"}, {"b c", "a b", "ab c", "a a", "aa a"}));
    // "abc": "b c" has the best rank → "a" + "bc" ("a bc" is no merge), so not "abc"
    EXPECT_EQ(t.encode("abc", false), (std::vector<int32_t>{'a', 257}));
    // "aaaa": "a a" merges leftmost first → "aa" "aa"; "aa a" never applies to "aa"+"aa"
    EXPECT_EQ(t.encode("aaaa", false), (std::vector<int32_t>{259, 259}));
    EXPECT_EQ(t.encode("aaa", false), (std::vector<int32_t>{260}));
    EXPECT_EQ(t.decode(t.encode("aaa abc", false)), "aaa abc");
    EXPECT_EQ(t.token_text(' '), "\xC4\xA0");  // the byte 0x20 is "Ġ" (U+0120)
    EXPECT_EQ(t.token_piece(' '), " ");
}

TEST(TokenizerBpe, InvalidUtf8RoundTrips) {
    Tokenizer t(tiny_byte_vocab({}, {"a b"}));
    const std::string s = std::string("ok \xFF\xC3 x\xE2\x82") + "\xF0\x9F\xA6\x99" + std::string(1, '\0') + "z";
    const auto ids = t.encode(s, false);
    EXPECT_EQ(ids.size(), s.size());  // no merges apply: one token per byte
    EXPECT_EQ(t.decode(ids), s);
}

TEST(TokenizerBpe, SpecialTokensSplitOnlyWhenAsked) {
    auto v = tiny_byte_vocab({"<|eot|>", "<tool>", "<|eot|>x"}, {"a b"});
    v.token_types.assign(v.tokens.size(), token_type_normal);
    v.token_types[256] = token_type_control;
    v.token_types[257] = token_type_user_defined;
    v.token_types[258] = token_type_control;
    v.bos_id = 256;
    Tokenizer t(v);
    // user-defined tokens are always split out; control tokens only with parse_special
    const auto plain = t.encode("a<tool>b<|eot|>x", false, false);
    EXPECT_EQ(plain[1], 257);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 256), 0);
    // longest special token first: "<|eot|>x" wins over "<|eot|>"
    EXPECT_EQ(t.encode("a<tool>b<|eot|>x", false, true), (std::vector<int32_t>{'a', 257, 'b', 258}));
    EXPECT_EQ(t.encode("<|eot|><|eot|>", true, true), (std::vector<int32_t>{256, 256, 256}));
    EXPECT_EQ(t.decode({'a', 256, 257}, false), "a<tool>");
}

TEST(TokenizerSpm, ScoresByteFallbackAndUnknown) {
    TokenizerVocab v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab", "<0x41>", "<0xC3>", "<0xA9>"};
    v.scores = {0, 0, 0, -1, -2, -3, -4, -5, -1.5f, 0, 0, 0};
    v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 6};
    v.bos_id = 1, v.eos_id = 2, v.unk_id = 0;
    v.add_space_prefix = true;
    v.add_bos = true;
    Tokenizer t(v);
    // "▁ab": "▁a" (-4) vs "ab" (-5): "▁a" first, then "▁a"+"b" = "▁ab" exists (-1.5)
    EXPECT_EQ(t.encode("ab", false), (std::vector<int32_t>{8}));
    // "A" has a byte token, "é" falls back to its two bytes, "Z" has neither → unknown
    EXPECT_EQ(t.encode("aAéZ", true), (std::vector<int32_t>{1, 6, 9, 10, 11, 0}));
    EXPECT_EQ(t.decode(t.encode("ab aAé", true)), "<s>ab aAé");
    EXPECT_EQ(t.decode(t.encode("ab aAé", false)), "ab aAé");
}

// ---------------------------------------------------------------------------------------------------
// Loaders and errors
// ---------------------------------------------------------------------------------------------------

TEST(TokenizerLoad, HfJsonBothMergeLayouts) {
    const auto dir = std::filesystem::temp_directory_path() / ("lowbit_tok_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto v = tiny_byte_vocab({"ab", "<|endoftext|>"}, {"a b"});
    {
        std::string vocab = "{";
        for (size_t i = 0; i < v.tokens.size() - 1; ++i) {
            std::string escaped;
            for (unsigned char c : v.tokens[i]) {
                if (c == '"' || c == '\\') {
                    escaped += '\\', escaped += char(c);
                } else {
                    escaped += char(c);
                }
            }
            if (i) vocab += ",";
            vocab += "\"" + escaped + "\": " + std::to_string(i);
        }
        vocab += "}";
        const std::string added = "[{\"id\": 257, \"content\": \"<|endoftext|>\", \"special\": true}]";
        const std::string pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
        for (const std::string merges : {"[\"a b\"]", "[[\"a\", \"b\"]]"}) {
            std::ofstream(dir / "tokenizer.json") << "{\"added_tokens\": " << added << ", \"pre_tokenizer\": " << pre
                                                  << ", \"model\": {\"type\": \"BPE\", \"vocab\": " << vocab
                                                  << ", \"merges\": " << merges << "}}";
            Tokenizer t = Tokenizer::from_hf_json((dir / "tokenizer.json").string());
            EXPECT_EQ(t.vocab_size(), 258u);
            EXPECT_EQ(t.pre(), "gpt2");
            EXPECT_EQ(t.encode("ab<|endoftext|>", false, true), (std::vector<int32_t>{256, 257}));
            EXPECT_EQ(t.token_type(257), token_type_control);
        }
        // a pre-tokenizer lowbit does not know is refused by name
        std::ofstream(dir / "tokenizer.json") << "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": "
                                                 "{\"type\": \"BPE\", \"vocab\": " << vocab << ", \"merges\": []}}";
        try {
            Tokenizer::from_hf_json((dir / "tokenizer.json").string());
            ADD_FAILURE() << "expected an error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("Whitespace"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
        }
    }
    std::filesystem::remove_all(dir);
}

TEST(TokenizerLoad, GgufRoundTripThroughTheWriter) {
    auto v = tiny_byte_vocab({"ab", "<|end|>"}, {"a b"});
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_string_array("tokenizer.ggml.tokens", v.tokens);
    std::vector<int32_t> types(v.tokens.size(), token_type_normal);
    types.back() = token_type_control;
    w.set("tokenizer.ggml.token_type", GgufValue::of_i32_array(types));
    w.set_string_array("tokenizer.ggml.merges", v.merges);
    w.set_u32("tokenizer.ggml.eos_token_id", 257);
    Tokenizer t = Tokenizer::from_gguf(GgufFile::parse(w.serialize(), "mem.gguf"));
    EXPECT_EQ(t.pre(), "qwen2");
    EXPECT_EQ(t.eos_id(), 257);
    EXPECT_EQ(t.bos_id(), -1);
    EXPECT_FALSE(t.add_bos());
    EXPECT_EQ(t.encode("ab12", false), (std::vector<int32_t>{256, '1', '2'}));
    EXPECT_THROW(t.encode("x", true), Error);  // no BOS to add

    GgufWriter w2;
    w2.set_string("tokenizer.ggml.model", "gpt2");
    w2.set_string("tokenizer.ggml.pre", "falcon");
    w2.set_string_array("tokenizer.ggml.tokens", v.tokens);
    w2.set_string_array("tokenizer.ggml.merges", v.merges);
    try {
        Tokenizer::from_gguf(GgufFile::parse(w2.serialize(), "falcon.gguf"));
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("falcon.gguf"), std::string::npos) << msg;
        EXPECT_NE(msg.find("'falcon'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("gpt2 (gpt-2), llama-bpe"), std::string::npos) << msg;
    }
    GgufWriter w3;
    w3.set_string("tokenizer.ggml.model", "bert");
    w3.set_string_array("tokenizer.ggml.tokens", v.tokens);
    EXPECT_THROW(Tokenizer::from_gguf(GgufFile::parse(w3.serialize(), "bert.gguf")), Error);
    GgufWriter w4;
    w4.set_string("general.architecture", "llama");
    EXPECT_THROW(Tokenizer::from_gguf(GgufFile::parse(w4.serialize(), "none.gguf")), Error);
}

TEST(TokenizerLoad, BadVocabulariesAreRefused) {
    auto dup = tiny_byte_vocab({"a"}, {"a b"});  // "a" is already a byte token
    EXPECT_THROW(Tokenizer{dup}, Error);
    auto bad_bos = tiny_byte_vocab({}, {"a b"});
    bad_bos.bos_id = 9999;
    EXPECT_THROW(Tokenizer{bad_bos}, Error);
    auto no_merges = tiny_byte_vocab({}, {});
    EXPECT_THROW(Tokenizer{no_merges}, Error);
    auto bad_merge = tiny_byte_vocab({}, {"ab"});
    EXPECT_THROW(Tokenizer{bad_merge}, Error);
    auto model = tiny_byte_vocab({}, {"a b"});
    model.model = "t5";
    EXPECT_THROW(Tokenizer{model}, Error);
    Tokenizer ok(tiny_byte_vocab({}, {"a b"}));
    EXPECT_THROW(ok.decode({-1}), Error);
    EXPECT_THROW(ok.token_text(256), Error);
}

// ---------------------------------------------------------------------------------------------------
// Unicode classes
// ---------------------------------------------------------------------------------------------------

TEST(UnicodeCategories, TableMatchesUnicode151) {
    EXPECT_STREQ(unicode_table_version(), "15.1.0");
    EXPECT_EQ(codepoint_class('a'), CodepointClass::letter);
    EXPECT_EQ(codepoint_class('7'), CodepointClass::number);
    EXPECT_EQ(codepoint_class(0xB2), CodepointClass::number);       // ² (No)
    EXPECT_EQ(codepoint_class(0x2167), CodepointClass::number);     // Ⅷ (Nl)
    EXPECT_EQ(codepoint_class(' '), CodepointClass::space);
    EXPECT_EQ(codepoint_class(0x85), CodepointClass::space);
    EXPECT_EQ(codepoint_class(0x3000), CodepointClass::space);
    EXPECT_EQ(codepoint_class(0x1C), CodepointClass::other);        // Python's isspace says yes; \s says no
    EXPECT_EQ(codepoint_class(0x200B), CodepointClass::other);      // zero-width space is not White_Space
    EXPECT_EQ(codepoint_class(','), CodepointClass::punctuation);
    EXPECT_EQ(codepoint_class('$'), CodepointClass::other);         // Sc
    EXPECT_EQ(codepoint_class(0x301), CodepointClass::other);       // combining mark
    EXPECT_EQ(codepoint_class(0x6771), CodepointClass::letter);     // 東
    EXPECT_EQ(codepoint_class(0x1F999), CodepointClass::other);     // 🦙
    EXPECT_EQ(codepoint_class(0x2EBF0), CodepointClass::letter);    // CJK ext. I, new in 15.1
    EXPECT_EQ(codepoint_class(0x31350), CodepointClass::letter);    // CJK ext. H, new in 15.0
    EXPECT_EQ(codepoint_class(0x1C89), CodepointClass::other);      // assigned only in 16.0
    EXPECT_EQ(codepoint_class(0x10FFFF), CodepointClass::other);
    EXPECT_EQ(codepoint_class(invalid_byte_marker + 0xFF), CodepointClass::other);
    size_t pos = 0;
    EXPECT_EQ(utf8_decode("\xE6\x9D\xB1", pos), 0x6771u);
    EXPECT_EQ(pos, 3u);
    pos = 0;
    EXPECT_EQ(utf8_decode("\xC0\x80", pos), invalid_byte_marker + 0xC0);  // overlong
    EXPECT_EQ(pos, 1u);
    pos = 0;
    EXPECT_EQ(utf8_decode("\xED\xA0\x80", pos), invalid_byte_marker + 0xED);  // surrogate
}
