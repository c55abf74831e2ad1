// recipe.cpp — the precision recipes: names, the strategy of every slot at a step, AdaHOP's calibration
// phase and fixed plan, and their JSON (see recipe.h).
#include "train/recipe.h"

#include <sstream>

#include <fmt/format.h>

#include "core/error.h"

namespace lowbit {

namespace {

struct PrecisionName {
    Precision p;
    const char* name;
};
constexpr PrecisionName kPrecisionNames[] = {
    {Precision::bf16, "bf16"},           {Precision::mxfp4, "mxfp4"},           {Precision::mxfp4_iht, "mxfp4-iht"},
    {Precision::mxfp4_rht_sr, "mxfp4-rht-sr"}, {Precision::adahop_lv1, "adahop-lv1"}, {Precision::adahop_lv2, "adahop-lv2"},
};
constexpr Slot kSlots[] = {Slot::fwd, Slot::dgrad, Slot::wgrad};

StrategyTable calibration_table(Precision p) {
    return p == Precision::adahop_lv2 ? strategy_table_lv2() : strategy_table_lv1();
}

// "attn_q" → "q", "ffn_gate" → "gate", "attn_output" → "o": the short names of the plan map and the masks.
constexpr const char* kProjectionShortNames[kProjectionCount] = {"q", "k", "v", "o", "gate", "up", "down"};
const char* projection_short_name(Projection p) { return kProjectionShortNames[size_t(p)]; }

constexpr const char* kSlotShortNames[] = {"fwd", "dgrad", "wgrad"};

// The bits of a comma-separated list of names[i] (bit i), plus the groups' bits; Error(usage) otherwise.
template <size_t N>
uint8_t parse_mask(const std::string& list, const char* const (&names)[N],
                   std::initializer_list<std::pair<const char*, uint8_t>> groups, const char* what) {
    uint8_t mask = 0;
    std::stringstream ss(list);
    std::string item;
    std::string known;
    for (const char* n : names) known += fmt::format("{}{}", known.empty() ? "" : ", ", n);
    for (const auto& [g, bits] : groups) known += fmt::format(", {}", g);
    while (std::getline(ss, item, ',')) {
        uint8_t bits = 0;
        for (size_t i = 0; i < N; ++i)
            if (item == names[i]) bits = uint8_t(1u << i);
        for (const auto& [g, gb] : groups)
            if (item == g) bits = gb;
        LOWBIT_CHECK(bits != 0, ErrorKind::usage, "{} '{}' in '{}': one of {}", what, item, list, known);
        mask |= bits;
    }
    LOWBIT_CHECK(mask != 0, ErrorKind::usage, "an empty list of {}s ('{}'): name at least one of {}", what, list, known);
    return mask;
}

template <size_t N>
std::string mask_name(uint8_t mask, const char* const (&names)[N]) {
    std::string out;
    for (size_t i = 0; i < N; ++i)
        if (mask >> i & 1) out += fmt::format("{}{}", out.empty() ? "" : ",", names[i]);
    return out;
}

}  // namespace

uint8_t parse_slot_mask(const std::string& list) { return parse_mask(list, kSlotShortNames, {}, "slot"); }

uint8_t parse_projection_mask(const std::string& list) {
    return parse_mask(list, kProjectionShortNames, {{"attn", 0x0f}, {"ffn", 0x70}}, "projection");
}

std::string slot_mask_name(uint8_t mask) { return mask_name(mask, kSlotShortNames); }
std::string projection_mask_name(uint8_t mask) { return mask_name(mask, kProjectionShortNames); }

uint64_t parse_layer_mask(const std::string& list) {
    const auto bad = [&](const std::string& item, const char* why) {
        fail(ErrorKind::usage, "layer '{}' in '{}': {} (block indices 0-{} and ranges such as 1-4, comma-separated)",
             item, list, why, Recipe::kMaxMaskedLayers - 1);
    };
    const auto index = [&](const std::string& item, const std::string& digits) -> int {
        if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos)
            bad(item, "not a block index");
        const int v = std::stoi(digits);
        if (v >= Recipe::kMaxMaskedLayers) bad(item, "beyond the blocks a mask can name");
        return v;
    };
    uint64_t mask = 0;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const size_t dash = item.find('-');
        const int lo = index(item, item.substr(0, dash));
        const int hi = dash == std::string::npos ? lo : index(item, item.substr(dash + 1));
        if (hi < lo) bad(item, "a range runs upwards");
        for (int l = lo; l <= hi; ++l) mask |= uint64_t{1} << l;
    }
    LOWBIT_CHECK(mask != 0, ErrorKind::usage, "an empty list of layers ('{}'): name block indices such as 0,2-4", list);
    return mask;
}

std::string layer_mask_name(uint64_t mask) {
    std::string out;
    for (int l = 0; l < Recipe::kMaxMaskedLayers; ++l) {
        if (!(mask >> l & 1)) continue;
        int end = l;
        while (end + 1 < Recipe::kMaxMaskedLayers && (mask >> (end + 1) & 1)) ++end;
        const std::string sep = out.empty() ? "" : ",";
        if (end - l >= 2) out += fmt::format("{}{}-{}", sep, l, end);
        else for (int k = l; k <= end; ++k) out += fmt::format("{}{}", k == l ? sep : ",", k);
        l = end;
    }
    return out;
}

ScaleRule parse_mx_scale_rule(const std::string& name) {
    ScaleRule rule{};
    LOWBIT_CHECK(parse_scale_rule(name.c_str(), &rule), ErrorKind::usage,
                 "MX scale rule '{}': floor (OCP), midmax (AdaHOP's kernels, the default) or rceil (never clips)", name);
    return rule;
}

std::string recipe_description(const Recipe& r) {
    std::string masks;
    if (r.mx_slots != Recipe::kAllSlots) masks += "slots " + slot_mask_name(r.mx_slots);
    if (r.mx_projections != Recipe::kAllProjections)
        masks += (masks.empty() ? "" : ", ") + std::string("projections ") + projection_mask_name(r.mx_projections);
    if (r.mx_layers != Recipe::kAllLayers)
        masks += (masks.empty() ? "" : ", ") + std::string("layers ") + layer_mask_name(r.mx_layers);
    const std::string rule =
        r.mx_scale_rule != kDefaultScaleRule ? fmt::format(", scale rule {}", scale_rule_name(r.mx_scale_rule)) : "";
    if (masks.empty()) return precision_name(r.precision) + rule;
    return fmt::format("{} (MXFP4 only in {}){}", precision_name(r.precision), masks, rule);
}

const char* precision_name(Precision p) {
    for (const PrecisionName& n : kPrecisionNames)
        if (n.p == p) return n.name;
    return "?";
}

Precision parse_precision(const std::string& name) {
    for (const PrecisionName& n : kPrecisionNames)
        if (name == n.name) return n.p;
    fail(ErrorKind::usage, "unknown precision '{}' (bf16, mxfp4, mxfp4-iht, mxfp4-rht-sr, adahop-lv1, adahop-lv2)", name);
}

bool precision_calibrates(Precision p) { return p == Precision::adahop_lv1 || p == Precision::adahop_lv2; }

RecipeState::RecipeState(const Recipe& r, const LlamaConfig& c)
    : recipe_(r), n_layers_(c.n_layers), calibration_(r.calibration_steps) {
    LOWBIT_CHECK(!precision_calibrates(r.precision) || r.calibration_steps >= 1, ErrorKind::usage,
                 "recipe {}: {} calibration steps; AdaHOP needs at least one", precision_name(r.precision),
                 r.calibration_steps);
    LOWBIT_CHECK(r.precision != Precision::bf16 || (!r.masked() && r.mx_scale_rule == kDefaultScaleRule), ErrorKind::usage,
                 "recipe bf16 quantizes no GEMM: slot, projection and layer masks and the MX scale rule apply to the MXFP4 "
                 "recipes");
    if (r.mx_layers != Recipe::kAllLayers) {
        LOWBIT_CHECK(c.n_layers <= Recipe::kMaxMaskedLayers, ErrorKind::usage,
                     "recipe {}: a layer mask names blocks 0-{}; this model has {}", precision_name(r.precision),
                     Recipe::kMaxMaskedLayers - 1, c.n_layers);
        const uint64_t present = c.n_layers >= 64 ? Recipe::kAllLayers : (uint64_t{1} << c.n_layers) - 1;
        LOWBIT_CHECK(r.mx_layers != 0 && (r.mx_layers & ~present) == 0, ErrorKind::usage,
                     "recipe {}: layers {} are not all blocks of this model (0-{})", precision_name(r.precision),
                     layer_mask_name(r.mx_layers), c.n_layers - 1);
    }
    LOWBIT_CHECK((r.mx_slots & Recipe::kAllSlots) != 0 && (r.mx_slots & ~Recipe::kAllSlots) == 0 &&
                     (r.mx_projections & Recipe::kAllProjections) != 0 && (r.mx_projections & ~Recipe::kAllProjections) == 0,
                 ErrorKind::usage, "recipe {}: slot mask {:#x} and projection mask {:#x} must each name some and only known bits",
                 precision_name(r.precision), r.mx_slots, r.mx_projections);
}

Strategy RecipeState::strategy(int64_t layer, Projection p, Slot s) const {
    if (!recipe_.quantizes(layer, p, s)) return Strategy::full;
    switch (recipe_.precision) {
        case Precision::bf16: return Strategy::full;
        case Precision::mxfp4: return Strategy::plain;
        case Precision::mxfp4_iht: return Strategy::iht;
        case Precision::mxfp4_rht_sr: return s == Slot::fwd ? Strategy::plain : Strategy::iht;
        case Precision::adahop_lv1:
        case Precision::adahop_lv2: {
            if (calibrating()) return Strategy::full;
            const auto it = plan_.layers.find(linear_name(layer, p));
            // A projection the calibration never saw (cannot happen in a run): patterns none → the table's none/none.
            return it != plan_.layers.end() ? it->second.at(s) : plan_layer({}, calibration_table(recipe_.precision)).at(s);
        }
    }
    return Strategy::full;
}

void RecipeState::record(int64_t layer, Projection p, Operand which, Pattern label) {
    LOWBIT_CHECK(calibrating(), ErrorKind::usage, "recipe {}: a pattern recorded outside calibration ({})",
                 precision_name(recipe_.precision), linear_name(layer, p));
    calibration_.record(linear_name(layer, p), which, label);
}

void RecipeState::end_step() {
    if (!calibrating()) return;
    calibration_.end_step();
    if (calibration_.complete()) plan_ = calibration_.finalize(calibration_table(recipe_.precision));
}

std::map<std::string, int64_t> RecipeState::strategy_counts() const {
    std::map<std::string, int64_t> counts;
    for (int64_t l = 0; l < n_layers_; ++l)
        for (Projection p : kProjections)
            for (Slot s : kSlots) ++counts[strategy_short_name(strategy(l, p, s))];
    return counts;
}

std::string RecipeState::plan_map() const {
    std::string out;
    for (int64_t l = 0; l < n_layers_; ++l) {
        out += fmt::format("blk.{:<3}", l);
        for (Projection p : kProjections)
            out += fmt::format("  {}: {}/{}/{}", projection_short_name(p), strategy_short_name(strategy(l, p, Slot::fwd)),
                               strategy_short_name(strategy(l, p, Slot::dgrad)),
                               strategy_short_name(strategy(l, p, Slot::wgrad)));
        out += "\n";
    }
    return out;
}

nlohmann::json RecipeState::to_json() const {
    nlohmann::json j = {{"recipe",
                         {{"precision", precision_name(recipe_.precision)},
                          {"calibration_steps", recipe_.calibration_steps},
                          {"detector", {{"tau", recipe_.detector.tau}, {"kappa", recipe_.detector.kappa}}}}}};
    // Written only when set, so the states and run configs of unmasked runs stay as they were.
    if (recipe_.mx_slots != Recipe::kAllSlots) j["recipe"]["mx_slots"] = slot_mask_name(recipe_.mx_slots);
    if (recipe_.mx_projections != Recipe::kAllProjections)
        j["recipe"]["mx_projections"] = projection_mask_name(recipe_.mx_projections);
    if (recipe_.mx_layers != Recipe::kAllLayers) j["recipe"]["mx_layers"] = layer_mask_name(recipe_.mx_layers);
    if (recipe_.mx_scale_rule != kDefaultScaleRule) j["recipe"]["mx_scale_rule"] = scale_rule_name(recipe_.mx_scale_rule);
    if (precision_calibrates(recipe_.precision)) j["calibration"] = calibration_.to_json();
    if (!plan_.layers.empty()) j["plan"] = plan_to_json(plan_);
    return j;
}

RecipeState RecipeState::from_json(const nlohmann::json& j, const LlamaConfig& c, const std::string& origin,
                                   const Recipe& engine) {
    LOWBIT_CHECK(j.is_object() && j.contains("recipe") && j["recipe"].is_object(), ErrorKind::input,
                 "{}: a recipe state is an object with a \"recipe\" object", origin);
    const nlohmann::json& r = j["recipe"];
    LOWBIT_CHECK(r.contains("precision") && r["precision"].is_string(), ErrorKind::input,
                 "{}: the recipe has no \"precision\" string", origin);
    Recipe recipe;
    recipe.save_quantized_operands = engine.save_quantized_operands;
    recipe.mx_tensor_cores = engine.mx_tensor_cores;
    recipe.mx_column_bases = engine.mx_column_bases;
    try {
        recipe.precision = parse_precision(r["precision"].get<std::string>());
        recipe.calibration_steps = r.value("calibration_steps", recipe.calibration_steps);
        if (r.contains("detector")) {
            recipe.detector.tau = r["detector"].value("tau", recipe.detector.tau);
            recipe.detector.kappa = r["detector"].value("kappa", recipe.detector.kappa);
        }
        if (r.contains("mx_slots")) recipe.mx_slots = parse_slot_mask(r["mx_slots"].get<std::string>());
        if (r.contains("mx_projections"))
            recipe.mx_projections = parse_projection_mask(r["mx_projections"].get<std::string>());
        if (r.contains("mx_layers")) recipe.mx_layers = parse_layer_mask(r["mx_layers"].get<std::string>());
        if (r.contains("mx_scale_rule")) recipe.mx_scale_rule = parse_mx_scale_rule(r["mx_scale_rule"].get<std::string>());
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: the recipe is malformed ({})", origin, e.what());
    } catch (const Error& e) {
        fail(ErrorKind::input, "{}: {}", origin, e.what());
    }
    RecipeState s(recipe, c);
    try {
        if (j.contains("calibration")) s.calibration_ = Calibration::from_json(j["calibration"]);
    } catch (const std::exception& e) {
        fail(ErrorKind::input, "{}: the calibration observations are malformed ({})", origin, e.what());
    }
    if (j.contains("plan")) s.plan_ = plan_from_json(j["plan"], origin);
    LOWBIT_CHECK(!precision_calibrates(recipe.precision) || s.calibrating() || !s.plan_.layers.empty(), ErrorKind::input,
                 "{}: the calibration of {} is complete but the state holds no plan", origin,
                 precision_name(recipe.precision));
    return s;
}

}  // namespace lowbit
