// test_tokenizer_engines.cpp — the two BPE engines on tiny vocabularies: byte-level BPE merges by rank,
// leftmost first (model/tokenizer_bpe.cpp), invalid UTF-8 kept as bytes, the cut at special tokens
// (model/tokenizer.cpp), and SentencePiece merges by score with byte fallback and the unknown token
// (model/tokenizer_spm.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "tokenizer_test_vocab.h"

using namespace lowbit;
using lowbit::test::tiny_byte_vocab;

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
