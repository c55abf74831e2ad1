// test_tokenizer_loaders.cpp — the tokenizer loaders (model/tokenizer_loaders.cpp): tokenizer.json with
// both merge layouts, GGUF metadata through lowbit's own writer, their error messages, the refusal of bad
// vocabularies, load_tokenizer's choice of loader for a model path, and the BOS modes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/tokenizer.h"
#include "tokenizer_test_vocab.h"

using namespace lowbit;
using lowbit::test::tiny_byte_vocab;

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

// load_tokenizer picks the loader from the path: a checkpoint folder or its config.json → its tokenizer.json,
// a .json → tokenizer.json, anything else → GGUF; an override path replaces the model's.
TEST(TokenizerLoad, LoadTokenizerPicksTheLoaderForAModelPath) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("lowbit_tok_load_" + std::to_string(::getpid()));
    fs::create_directories(dir / "checkpoint");
    fs::create_directories(dir / "empty");
    auto v = tiny_byte_vocab({"ab", "<s>"}, {"a b"});
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
    const nlohmann::json tj = {
        {"added_tokens", {{{"id", 257}, {"content", "<s>"}, {"special", true}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor",
         {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", v.merges}}}};
    const std::string json_path = (dir / "checkpoint" / "tokenizer.json").string();
    std::ofstream(json_path) << tj.dump();

    v.token_types.assign(v.tokens.size(), token_type_normal);
    v.token_types[257] = token_type_control;
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_string_array("tokenizer.ggml.tokens", v.tokens);
    w.set("tokenizer.ggml.token_type", GgufValue::of_i32_array(v.token_types));
    w.set_string_array("tokenizer.ggml.merges", v.merges);
    const std::string gguf_path = (dir / "tok.gguf").string();
    w.write(gguf_path);

    for (const std::string& p : {(dir / "checkpoint").string(), (dir / "checkpoint" / "config.json").string(), json_path}) {
        const Tokenizer t = load_tokenizer(p);
        EXPECT_EQ(t.pre(), "gpt2") << p;
        EXPECT_EQ(t.bos_id(), 257) << p;  // from the post-processor template
        EXPECT_TRUE(t.add_bos()) << p;
        EXPECT_EQ(t.encode("ab", true), (std::vector<int32_t>{257, 256})) << p;
    }
    EXPECT_EQ(load_tokenizer(gguf_path).pre(), "qwen2");
    EXPECT_EQ(load_tokenizer(json_path, gguf_path).pre(), "qwen2");  // the override wins
    try {
        load_tokenizer((dir / "empty").string());
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::input);
        EXPECT_NE(msg.find("no tokenizer.json"), std::string::npos) << msg;
        EXPECT_NE(msg.find("--tokenizer"), std::string::npos) << msg;
    }
    fs::remove_all(dir);
}

// The BOS modes of `lowbit tokenize` and `lowbit eval`; an empty text is no tokens, or just BOS.
TEST(TokenizerLoad, BosModesAndEmptyText) {
    auto v = tiny_byte_vocab({"<s>"}, {"a b"});
    v.bos_id = 256;
    v.add_bos = true;
    const Tokenizer with_bos(v);
    v.add_bos = false;
    const Tokenizer without_bos(v);
    EXPECT_TRUE(should_add_bos("auto", with_bos));
    EXPECT_FALSE(should_add_bos("auto", without_bos));
    EXPECT_TRUE(should_add_bos("on", without_bos));
    EXPECT_FALSE(should_add_bos("off", with_bos));
    try {
        should_add_bos("yes", with_bos);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::usage);
        EXPECT_NE(std::string(e.what()).find("auto, on or off"), std::string::npos) << e.what();
    }
    EXPECT_EQ(with_bos.encode("", false), std::vector<int32_t>{});
    EXPECT_EQ(with_bos.encode("", true), std::vector<int32_t>{256});
}
