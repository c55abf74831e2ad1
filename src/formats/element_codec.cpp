// element_codec.cpp — names of element types and rounding modes (the arithmetic is in element_codec.h).
#include "formats/element_codec.h"

#include <cstring>

namespace lowbit {

namespace {
struct ElementName {
    ElementType type;
    const char* name;
};
constexpr ElementName kElementNames[] = {
    {ElementType::e2m1, "e2m1"}, {ElementType::e2m3, "e2m3"}, {ElementType::e3m2, "e3m2"}, {ElementType::e4m3, "e4m3"},
    {ElementType::e5m2, "e5m2"}, {ElementType::bf16, "bf16"}, {ElementType::fp16, "fp16"},
};
}  // namespace

const char* element_name(ElementType t) {
    for (const auto& e : kElementNames)
        if (e.type == t) return e.name;
    return "?";
}

bool parse_element(const char* name, ElementType* out) {
    for (const auto& e : kElementNames)
        if (std::strcmp(e.name, name) == 0) {
            *out = e.type;
            return true;
        }
    return false;
}

const char* rounding_name(Rounding r) {
    switch (r) {
        case Rounding::nearest_even: return "rne";
        case Rounding::half_away: return "away";
        case Rounding::stochastic: return "stochastic";
    }
    return "?";
}

bool parse_rounding(const char* name, Rounding* out) {
    if (std::strcmp(name, "rne") == 0) *out = Rounding::nearest_even;
    else if (std::strcmp(name, "away") == 0) *out = Rounding::half_away;
    else if (std::strcmp(name, "stochastic") == 0) *out = Rounding::stochastic;
    else return false;
    return true;
}

}  // namespace lowbit
