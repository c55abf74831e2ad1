// test_unicode_categories.cpp — the code-point class table (model/unicode_categories.h, Unicode 15.1 like
// llama.cpp's) on letters, numbers, White_Space, punctuation and code points new in 15.0/15.1 or only in
// 16.0, and the UTF-8 decoder on valid, overlong and surrogate sequences.
#include <gtest/gtest.h>

#include "model/unicode_categories.h"

using namespace lowbit;

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
