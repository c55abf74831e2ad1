// unicode_categories.h — what the BPE pre-tokenizers need to know about a code point: its class (letter
// \p{L}, number \p{N}, space \s, punctuation \p{P}, other) and UTF-8 decoding/encoding. The class table is
// generated from the Unicode Character Database by scripts/gen_unicode_categories.py, at Unicode 15.1 —
// the version of llama.cpp's own table (src/unicode-data.cpp), so both split text alike.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lowbit {

enum class CodepointClass : uint8_t {
    other = 0,        // marks, symbols, controls, unassigned code points, invalid UTF-8 bytes
    letter = 1,       // general category L* (Lu, Ll, Lt, Lm, Lo)
    number = 2,       // general category N* (Nd, Nl, No)
    space = 3,        // the White_Space property (what \s matches in Oniguruma, PCRE2-UCP and llama.cpp)
    punctuation = 4,  // general category P*
};

CodepointClass codepoint_class(uint32_t cp);
// The Unicode version the class table was generated from ("15.1.0").
const char* unicode_table_version();

// Decodes the code point starting at s[pos] and advances pos. A byte that does not start a valid,
// shortest-form sequence (or a surrogate, or a value past U+10FFFF) decodes to `invalid_byte_marker + byte`
// and advances by one, so callers can keep raw bytes (byte-level BPE is defined on bytes, not text).
inline constexpr uint32_t invalid_byte_marker = 0x110000;
uint32_t utf8_decode(std::string_view s, size_t& pos);
// The byte length a UTF-8 lead byte announces (1 for a continuation or invalid byte), the way
// SentencePiece and llama.cpp cut text into characters.
inline size_t utf8_sequence_length(uint8_t lead) {
    static constexpr uint8_t lengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lengths[lead >> 4];
}
void utf8_append(std::string& out, uint32_t cp);

}  // namespace lowbit
