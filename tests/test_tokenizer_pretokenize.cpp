// test_tokenizer_pretokenize.cpp — the pre-tokenizer scanners of the byte-level BPE
// (model/tokenizer_pretokenize.cpp) on hand-made cases, through Tokenizer::pre_tokenize: gpt2, llama-bpe,
// qwen2, smollm and default, and the refusal of an unknown id.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/tokenizer.h"
#include "tokenizer_test_vocab.h"

using namespace lowbit;
using lowbit::test::tiny_byte_vocab;

namespace {

Tokenizer tiny_with_pre(const std::string& pre) {
    TokenizerVocab v = tiny_byte_vocab({}, {"a b"});
    v.pre = pre;
    return Tokenizer(std::move(v));
}

std::vector<std::string> words(const Tokenizer& t, const std::string& s) { return t.pre_tokenize(s); }

}  // namespace

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
