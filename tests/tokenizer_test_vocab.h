// tokenizer_test_vocab.h — shared by the tokenizer suites: a tiny byte-level BPE vocabulary (every byte's
// mapped character, then extra tokens), with bytes_to_unicode written out independently of the library.
#pragma once

#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "model/unicode_categories.h"

namespace lowbit::test {

inline TokenizerVocab tiny_byte_vocab(std::vector<std::string> extra_tokens, std::vector<std::string> merges) {
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

}  // namespace lowbit::test
