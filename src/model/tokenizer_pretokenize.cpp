// tokenizer_pretokenize.cpp — the pre-tokenizers of the byte-level BPE (tokenizer_pretokenize.h), written
// to reproduce llama.cpp's src/unicode.cpp behaviour, which its test vectors pin down.
//
// Regex engine decision: no regex library. The pre-tokenizer regexes are fixed, so each is a hand-written
// scanner over code points that follows the regex's alternation order and greedy matching exactly (the way
// llama.cpp's unicode_regex_split_custom_gpt2/_llama3 do), with classes from a table generated from the
// Unicode Character Database (model/unicode_categories.h; Unicode 15.1, the version of llama.cpp's table).
// This keeps the dependency list short (no PCRE2), makes `\s+(?!\S)` and the case-insensitive
// contractions explicit, and costs nothing per match. The scanners:
//   gpt2:      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   llama-bpe: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//              \s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:     the llama-bpe regex with \p{N} instead of \p{N}{1,3}
//   smollm:    \p{N} (every digit its own piece), then the gpt2 regex inside each piece
//   default:   [\p{P}\$\+<=>\^~\|]+, then gpt2, then \p{N}+, then [0-9][0-9][0-9] (llama.cpp's fallback)
// As in llama.cpp, each regex of a sequence splits the pieces of the previous one (matches and the gaps
// between them both become pieces), and a regex never looks past the end of its piece. Case-insensitive
// contractions fold ASCII only (as llama.cpp's unicode_tolower does for these letters).
#include "model/tokenizer_pretokenize.h"

#include "model/unicode_categories.h"

namespace lowbit::tokenizer_detail {

// ---------------------------------------------------------------------------------------------------
// Pre-tokenizer ids
// ---------------------------------------------------------------------------------------------------

bool parse_pre_tokenizer(const std::string& id, PreTokenizer& out, std::string& normalized) {
    struct Alias {
        const char* id;
        PreTokenizer pre;
        const char* name;
    };
    static const Alias aliases[] = {
        {"", PreTokenizer::gpt2, "gpt2"},           {"gpt2", PreTokenizer::gpt2, "gpt2"},
        {"gpt-2", PreTokenizer::gpt2, "gpt2"},      {"llama-bpe", PreTokenizer::llama3, "llama-bpe"},
        {"llama3", PreTokenizer::llama3, "llama-bpe"}, {"llama-v3", PreTokenizer::llama3, "llama-bpe"},
        {"qwen2", PreTokenizer::qwen2, "qwen2"},    {"smollm", PreTokenizer::smollm, "smollm"},
        {"default", PreTokenizer::default_, "default"},
    };
    for (const Alias& a : aliases) {
        if (id == a.id) {
            out = a.pre;
            normalized = a.name;
            return true;
        }
    }
    return false;
}

const char* supported_pre_tokenizer_list() {
    return "gpt2 (gpt-2), llama-bpe (llama3, llama-v3), qwen2, smollm, default";
}

// ---------------------------------------------------------------------------------------------------
// Text as code points with their classes, and the scanners
// ---------------------------------------------------------------------------------------------------

void CodepointText::assign(std::string_view s) {
    cp.clear(), cls.clear(), byte_offset.clear();
    cp.reserve(s.size()), cls.reserve(s.size()), byte_offset.reserve(s.size() + 1);
    size_t pos = 0;
    while (pos < s.size()) {
        byte_offset.push_back(uint32_t(pos));
        const uint32_t c = utf8_decode(s, pos);
        cp.push_back(c);
        cls.push_back(uint8_t(codepoint_class(c)));
    }
    byte_offset.push_back(uint32_t(s.size()));
}

namespace {

constexpr uint8_t k_letter = uint8_t(CodepointClass::letter);
constexpr uint8_t k_number = uint8_t(CodepointClass::number);
constexpr uint8_t k_space = uint8_t(CodepointClass::space);
constexpr uint8_t k_punct = uint8_t(CodepointClass::punctuation);
constexpr uint8_t k_none = 0xFF;  // past the end of the piece: matches no class
constexpr uint32_t k_no_cp = 0xFFFFFFFF;

}  // namespace

// One piece [b, e) of a CodepointText as the regexes see it: nothing exists outside it.
struct Piece {
    const CodepointText& t;
    size_t b, e;
    uint8_t cls(size_t i) const { return i < e ? t.cls[i] : k_none; }
    uint32_t cp(size_t i) const { return i < e ? t.cp[i] : k_no_cp; }
    // [^\s\p{L}\p{N}]
    bool other(size_t i) const {
        const uint8_t c = cls(i);
        return c != k_none && c != k_letter && c != k_number && c != k_space;
    }
};

namespace {

uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d at pos (optionally ASCII case-insensitive): the match length, 0 for none.
size_t contraction_length(const Piece& p, size_t pos, bool ignore_case) {
    if (p.cp(pos) != '\'' || pos + 1 >= p.e) return 0;
    const auto fold = [&](uint32_t c) { return ignore_case ? ascii_lower(c) : c; };
    const uint32_t c1 = fold(p.cp(pos + 1));
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= p.e) return 0;
    const uint32_t c2 = fold(p.cp(pos + 2));
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S); the piece ends go to `ends`.
void split_gpt2(const Piece& p, std::vector<size_t>& ends) {
    size_t pos = p.b;
    while (pos < p.e) {
        if (size_t n = contraction_length(p, pos, false)) {
            ends.push_back(pos += n);
            continue;
        }
        size_t q = pos + (p.cp(pos) == ' ' ? 1 : 0);
        const uint8_t c = p.cls(q);
        if (c == k_letter || c == k_number) {  // ' ?\p{L}+' and ' ?\p{N}+'
            while (p.cls(q) == c) ++q;
            ends.push_back(pos = q);
            continue;
        }
        if (p.other(q)) {  // ' ?[^\s\p{L}\p{N}]+'
            while (p.other(q)) ++q;
            ends.push_back(pos = q);
            continue;
        }
        size_t n = 0;  // '\s+(?!\S)': a run of spaces followed by a non-space gives back its last space
        while (p.cls(pos + n) == k_space) ++n;
        if (n > 1 && pos + n < p.e) {
            ends.push_back(pos += n - 1);
        } else if (n > 0) {
            ends.push_back(pos += n);
        } else {
            ends.push_back(pos += 1);  // unreachable: every code point is a letter, number, space or other
        }
    }
}

// The llama-bpe regex (max_digits = 3) and qwen2's (max_digits = 1); see the file header.
void split_llama3(const Piece& p, size_t max_digits, std::vector<size_t>& ends) {
    size_t pos = p.b;
    while (pos < p.e) {
        const uint32_t c = p.cp(pos);
        const uint8_t k = p.cls(pos);
        if (size_t n = contraction_length(p, pos, true)) {
            ends.push_back(pos += n);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (c != '\r' && c != '\n' && k != k_number && (k == k_letter || p.cls(pos + 1) == k_letter)) {
            size_t q = pos + 1;
            while (p.cls(q) == k_letter) ++q;
            ends.push_back(pos = q);
            continue;
        }
        if (k == k_number) {  // \p{N}{1,max_digits}
            size_t q = pos + 1;
            while (q < pos + max_digits && p.cls(q) == k_number) ++q;
            ends.push_back(pos = q);
            continue;
        }
        size_t q = pos + (c == ' ' ? 1 : 0);  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        if (p.other(q)) {
            while (p.other(q)) ++q;
            while (p.cp(q) == '\r' || p.cp(q) == '\n') ++q;
            ends.push_back(pos = q);
            continue;
        }
        // \s*[\r\n]+ (ends after the run's last \r or \n), else \s+(?!\S), else \s+
        size_t n = 0, last_newline_end = 0;
        while (p.cls(pos + n) == k_space) {
            if (p.cp(pos + n) == '\r' || p.cp(pos + n) == '\n') last_newline_end = pos + n + 1;
            ++n;
        }
        if (last_newline_end > 0) {
            ends.push_back(pos = last_newline_end);
        } else if (n > 1 && pos + n < p.e) {
            ends.push_back(pos += n - 1);
        } else if (n > 0) {
            ends.push_back(pos += n);
        } else {
            ends.push_back(pos += 1);
        }
    }
}

// A regex that matches single code points or runs of them: each match and each gap is a piece.
template <typename Match>
void split_isolated(const Piece& p, bool runs, Match match, std::vector<size_t>& ends) {
    size_t pos = p.b;
    while (pos < p.e) {
        size_t q = pos;
        if (match(q)) {
            ++q;
            while (runs && q < p.e && match(q)) ++q;
        } else {
            while (q < p.e && !match(q)) ++q;
        }
        ends.push_back(pos = q);
    }
}

// [0-9][0-9][0-9], leftmost non-overlapping matches, gaps as pieces.
void split_three_digits(const Piece& p, std::vector<size_t>& ends) {
    const auto digit = [&](size_t i) { return i < p.e && p.t.cp[i] >= '0' && p.t.cp[i] <= '9'; };
    size_t pos = p.b, gap = p.b;
    while (pos < p.e) {
        if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
            if (pos > gap) ends.push_back(pos);
            ends.push_back(pos += 3);
            gap = pos;
        } else {
            ++pos;
        }
    }
    if (p.e > gap) ends.push_back(p.e);
}

}  // namespace

std::vector<SplitPass> passes_for(PreTokenizer pre) {
    const SplitPass gpt2 = [](const Piece& p, std::vector<size_t>& e) { split_gpt2(p, e); };
    const SplitPass digits = [](const Piece& p, std::vector<size_t>& e) {
        split_isolated(p, false, [&](size_t i) { return p.t.cls[i] == k_number; }, e);
    };
    switch (pre) {
        case PreTokenizer::gpt2: return {gpt2};
        case PreTokenizer::llama3: return {[](const Piece& p, std::vector<size_t>& e) { split_llama3(p, 3, e); }};
        case PreTokenizer::qwen2: return {[](const Piece& p, std::vector<size_t>& e) { split_llama3(p, 1, e); }};
        case PreTokenizer::smollm: return {digits, gpt2};
        case PreTokenizer::default_:
            return {
                [](const Piece& p, std::vector<size_t>& e) {  // [\p{P}\$\+<=>\^~\|]+
                    const auto punct = [&](size_t i) {
                        const uint32_t c = p.t.cp[i];
                        return p.t.cls[i] == k_punct || c == '$' || c == '+' || c == '<' || c == '=' ||
                               c == '>' || c == '^' || c == '~' || c == '|';
                    };
                    split_isolated(p, true, punct, e);
                },
                gpt2,
                [](const Piece& p, std::vector<size_t>& e) {  // \p{N}+
                    split_isolated(p, true, [&](size_t i) { return p.t.cls[i] == k_number; }, e);
                },
                [](const Piece& p, std::vector<size_t>& e) { split_three_digits(p, e); },
            };
    }
    return {gpt2};
}

// Pre-token boundaries of the whole text: code-point indices where pieces end.
void pre_tokenize_text(const CodepointText& t, const std::vector<SplitPass>& passes, std::vector<size_t>& ends,
                       std::vector<size_t>& scratch) {
    ends.assign(1, t.size());
    if (t.size() == 0) {
        ends.clear();
        return;
    }
    for (const SplitPass& pass : passes) {
        scratch.clear();
        size_t begin = 0;
        for (size_t end : ends) {
            pass(Piece{t, begin, end}, scratch);
            begin = end;
        }
        std::swap(ends, scratch);
    }
}

}  // namespace lowbit::tokenizer_detail
