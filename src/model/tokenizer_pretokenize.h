// tokenizer_pretokenize.h — inside the tokenizer (not part of its public API): the pre-tokenizers of the
// byte-level BPE, i.e. the regexes that cut text into the words merges run inside, as hand-written
// scanners over code points (the regexes and the decision are in tokenizer_pretokenize.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit::tokenizer_detail {

enum class PreTokenizer { gpt2, llama3, qwen2, smollm, default_ };

// A pre-tokenizer id (tokenizer.ggml.pre or an alias) → the scanner and its normalized name; false when
// the id is not supported.
bool parse_pre_tokenizer(const std::string& id, PreTokenizer& out, std::string& normalized);
// "gpt2 (gpt-2), llama-bpe (llama3, llama-v3), qwen2, smollm, default" — for error messages.
const char* supported_pre_tokenizer_list();

// Text as code points with their classes (model/unicode_categories.h).
struct CodepointText {
    std::vector<uint32_t> cp;
    std::vector<uint8_t> cls;
    std::vector<uint32_t> byte_offset;  // n + 1 entries: where each code point starts in the UTF-8 text

    void assign(std::string_view s);
    size_t size() const { return cp.size(); }
};

// One regex of a pre-tokenizer: splits a piece of the text, appending the code-point indices where its
// sub-pieces end.
struct Piece;
using SplitPass = std::function<void(const Piece&, std::vector<size_t>&)>;

// The regexes a pre-tokenizer applies, in order (each splits the pieces of the previous one).
std::vector<SplitPass> passes_for(PreTokenizer pre);

// Pre-token boundaries of the whole text: code-point indices where pieces end (empty for empty text).
void pre_tokenize_text(const CodepointText& t, const std::vector<SplitPass>& passes, std::vector<size_t>& ends,
                       std::vector<size_t>& scratch);

}  // namespace lowbit::tokenizer_detail
