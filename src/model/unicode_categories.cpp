// unicode_categories.cpp — the code-point class lookup: a flat table for the Basic Multilingual Plane (64 KiB,
// built once from the generated ranges) and a binary search over the ranges above it; UTF-8 helpers.
#include "model/unicode_categories.h"

#include <algorithm>
#include <array>
#include <memory>

namespace lowbit {

namespace {

struct CodepointRange {
    uint32_t first;
    uint8_t cls;
};

#include "model/unicode_categories_table.inc"

const std::array<uint8_t, 0x10000>& bmp_table() {
    static const std::unique_ptr<std::array<uint8_t, 0x10000>> table = [] {
        auto t = std::make_unique<std::array<uint8_t, 0x10000>>();
        const size_t n = std::size(k_codepoint_ranges);
        for (size_t i = 0; i < n && k_codepoint_ranges[i].first < 0x10000; ++i) {
            uint32_t end = i + 1 < n ? std::min<uint32_t>(k_codepoint_ranges[i + 1].first, 0x10000) : 0x10000;
            std::fill(t->begin() + k_codepoint_ranges[i].first, t->begin() + end, k_codepoint_ranges[i].cls);
        }
        return t;
    }();
    return *table;
}

}  // namespace

CodepointClass codepoint_class(uint32_t cp) {
    if (cp < 0x10000) return CodepointClass(bmp_table()[cp]);
    if (cp >= 0x110000) return CodepointClass::other;
    auto it = std::upper_bound(std::begin(k_codepoint_ranges), std::end(k_codepoint_ranges), cp,
                               [](uint32_t v, const CodepointRange& r) { return v < r.first; });
    return CodepointClass((it - 1)->cls);
}

const char* unicode_table_version() { return k_unicode_version; }

uint32_t utf8_decode(std::string_view s, size_t& pos) {
    const auto byte = [&](size_t i) { return uint8_t(s[i]); };
    const uint8_t b0 = byte(pos);
    if (b0 < 0x80) {
        pos += 1;
        return b0;
    }
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if ((b0 & 0xE0) == 0xC0) {
        n = 2, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
        n = 3, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
        n = 4, cp = b0 & 0x07, min = 0x10000;
    }
    if (n == 0 || pos + n > s.size()) {
        pos += 1;
        return invalid_byte_marker + b0;
    }
    for (size_t i = 1; i < n; ++i) {
        const uint8_t b = byte(pos + i);
        if ((b & 0xC0) != 0x80) {
            pos += 1;
            return invalid_byte_marker + b0;
        }
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        pos += 1;
        return invalid_byte_marker + b0;
    }
    pos += n;
    return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

}  // namespace lowbit
