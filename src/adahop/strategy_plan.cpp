// strategy_plan.cpp — strategy tables, per-layer plans, calibration by majority vote, JSON persistence.
#include "adahop/strategy_plan.h"

#include <fstream>

#include "core/error.h"
#include "io/npy.h"

namespace lowbit {

namespace {
struct StrategyNames {
    Strategy s;
    const char* port;
    const char* short_name;
};
constexpr StrategyNames kStrategyNames[] = {
    {Strategy::plain, "none", "plain"},
    {Strategy::iht, "hadamard", "IHT"},
    {Strategy::iht_oe_left, "inner_outlier_extract_left", "IHT+OE-left"},
    {Strategy::iht_oe_right, "inner_outlier_extract_right", "IHT+OE-right"},
    {Strategy::full, "full_precision", "BF16"},
    {Strategy::oht, "outer_hadamard", "OHT"},
};
const Pattern kPatterns[3] = {Pattern::row, Pattern::col, Pattern::none};
}  // namespace

const char* strategy_name(Strategy s) {
    for (const auto& n : kStrategyNames)
        if (n.s == s) return n.port;
    return "?";
}

const char* strategy_short_name(Strategy s) {
    for (const auto& n : kStrategyNames)
        if (n.s == s) return n.short_name;
    return "?";
}

Strategy parse_strategy(const std::string& name) {
    for (const auto& n : kStrategyNames)
        if (name == n.port || name == n.short_name) return n.s;
    fail(ErrorKind::usage, "unknown strategy '{}' (none, hadamard, inner_outlier_extract_left, "
                           "inner_outlier_extract_right, full_precision, outer_hadamard)", name);
}

const char* slot_name(Slot s) {
    switch (s) {
        case Slot::fwd: return "forward_y";
        case Slot::dgrad: return "backward_gx";
        case Slot::wgrad: return "backward_gw";
    }
    return "?";
}

namespace {
StrategyTable table_from_rows(const std::string& name, Strategy cc) {
    // rows: A = row, col, none; columns: B = row, col, none (adahop.md §5.4)
    StrategyTable t;
    t.name = name;
    t.pair = {{{Strategy::iht, Strategy::iht_oe_right, Strategy::iht_oe_left},
               {Strategy::iht, cc, Strategy::iht},
               {Strategy::iht, Strategy::iht_oe_right, Strategy::iht}}};
    return t;
}
}  // namespace

StrategyTable strategy_table_lv1() { return table_from_rows("lv1", Strategy::iht_oe_right); }
StrategyTable strategy_table_lv2() { return table_from_rows("lv2", Strategy::full); }

StrategyTable strategy_table_from_json(const nlohmann::json& j, const std::string& origin) {
    if (!j.is_object() || !j.contains("pairs") || !j["pairs"].is_object())
        fail(ErrorKind::input, "{}: a strategy table is an object with a \"pairs\" object", origin);
    StrategyTable t;
    t.name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : origin;
    for (Pattern a : kPatterns)
        for (Pattern b : kPatterns) {
            const std::string key = std::string(pattern_name(a)) + "-" + pattern_name(b);
            if (!j["pairs"].contains(key) || !j["pairs"][key].is_string())
                fail(ErrorKind::input, "{}: strategy table has no entry for pair \"{}\" (all 9 pairs are needed)", origin, key);
            t.pair[size_t(a)][size_t(b)] = parse_strategy(j["pairs"][key].get<std::string>());
        }
    return t;
}

nlohmann::json strategy_table_to_json(const StrategyTable& t) {
    nlohmann::json pairs;
    for (Pattern a : kPatterns)
        for (Pattern b : kPatterns) pairs[std::string(pattern_name(a)) + "-" + pattern_name(b)] = strategy_name(t.lookup(a, b));
    return {{"name", t.name}, {"pairs", pairs}};
}

StrategyTable strategy_table_named(const std::string& name_or_path) {
    if (name_or_path == "lv1") return strategy_table_lv1();
    if (name_or_path == "lv2") return strategy_table_lv2();
    const auto bytes = read_file(name_or_path);
    nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    if (j.is_discarded()) fail(ErrorKind::input, "{}: not valid JSON", name_or_path);
    return strategy_table_from_json(j, name_or_path);
}

std::pair<Pattern, Pattern> slot_pair(Slot s, const LayerPatterns& p) {
    switch (s) {
        case Slot::fwd: return {p.x, opposite(p.w)};
        case Slot::dgrad: return {p.g, p.w};
        case Slot::wgrad: return {opposite(p.g), p.x};
    }
    return {Pattern::none, Pattern::none};
}

LayerPlan plan_layer(const LayerPatterns& p, const StrategyTable& t) {
    LayerPlan plan;
    plan.patterns = p;
    auto pick = [&](Slot s) {
        auto [a, b] = slot_pair(s, p);
        return t.lookup(a, b);
    };
    plan.fwd = pick(Slot::fwd);
    plan.dgrad = pick(Slot::dgrad);
    plan.wgrad = pick(Slot::wgrad);
    return plan;
}

nlohmann::json plan_to_json(const Plan& plan) {
    nlohmann::json pats = nlohmann::json::object(), modes = nlohmann::json::object();
    for (const auto& [name, lp] : plan.layers) {
        pats[name] = {{"x", pattern_name(lp.patterns.x)}, {"w", pattern_name(lp.patterns.w)}, {"g", pattern_name(lp.patterns.g)}};
        modes[name] = {{slot_name(Slot::fwd), strategy_name(lp.fwd)},
                       {slot_name(Slot::dgrad), strategy_name(lp.dgrad)},
                       {slot_name(Slot::wgrad), strategy_name(lp.wgrad)}};
    }
    return {{"table", plan.table_name}, {"aggregated_patterns", pats}, {"per_layer_modes", modes}};
}

namespace {
Plan parse_plan(const nlohmann::json& j, const std::string& origin) {
    if (!j.is_object() || !j.contains("per_layer_modes") || !j["per_layer_modes"].is_object())
        fail(ErrorKind::input, "{}: a plan is an object with \"per_layer_modes\"", origin);
    Plan plan;
    plan.table_name = j.value("table", std::string("custom"));
    for (const auto& [name, m] : j["per_layer_modes"].items()) {
        LayerPlan lp;
        for (Slot s : {Slot::fwd, Slot::dgrad, Slot::wgrad}) {
            if (!m.contains(slot_name(s)) || !m[slot_name(s)].is_string())
                fail(ErrorKind::input, "{}: layer \"{}\" has no \"{}\" mode", origin, name, slot_name(s));
            const Strategy st = parse_strategy(m[slot_name(s)].get<std::string>());
            (s == Slot::fwd ? lp.fwd : s == Slot::dgrad ? lp.dgrad : lp.wgrad) = st;
        }
        if (j.contains("aggregated_patterns") && j["aggregated_patterns"].contains(name)) {
            const auto& p = j["aggregated_patterns"][name];
            lp.patterns = {parse_pattern(p.value("x", "none")), parse_pattern(p.value("w", "none")), parse_pattern(p.value("g", "none"))};
        }
        plan.layers[name] = lp;
    }
    return plan;
}
}  // namespace

Plan plan_from_json(const nlohmann::json& j, const std::string& origin) {
    try {
        return parse_plan(j, origin);
    } catch (const nlohmann::json::exception& e) {  // a value of another type deep inside
        fail(ErrorKind::input, "{}: malformed plan ({})", origin, e.what());
    }
}

void plan_save(const Plan& plan, const std::string& path) {
    const std::string s = plan_to_json(plan).dump(2) + "\n";
    write_file_atomic(path, s.data(), s.size());
}

Plan plan_load(const std::string& path) {
    const auto bytes = read_file(path);
    nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    if (j.is_discarded()) fail(ErrorKind::input, "{}: not valid JSON", path);
    return plan_from_json(j, path);
}

void Calibration::record(const std::string& layer, Operand which, Pattern label) {
    seen_[layer][size_t(which)].push_back(label);
}

namespace {
Pattern majority_of(const std::vector<Pattern>& v) {
    if (v.empty()) return Pattern::none;
    // count, remembering first appearance; the highest count wins, ties go to the earliest first appearance
    int count[3] = {0, 0, 0};
    int first[3] = {-1, -1, -1};
    for (size_t i = 0; i < v.size(); ++i) {
        const int k = int(v[i]);
        if (first[k] < 0) first[k] = int(i);
        ++count[k];
    }
    int best = -1;
    for (int k = 0; k < 3; ++k) {
        if (count[k] == 0) continue;
        if (best < 0 || count[k] > count[best] || (count[k] == count[best] && first[k] < first[best])) best = k;
    }
    return Pattern(best);
}
}  // namespace

LayerPatterns Calibration::majority(const std::string& layer) const {
    auto it = seen_.find(layer);
    if (it == seen_.end()) return {};
    return {majority_of(it->second[0]), majority_of(it->second[1]), majority_of(it->second[2])};
}

Plan Calibration::finalize(const StrategyTable& table) const {
    Plan plan;
    plan.table_name = table.name;
    for (const auto& [name, obs] : seen_) plan.layers[name] = plan_layer(majority(name), table);
    return plan;
}

nlohmann::json Calibration::to_json() const {
    nlohmann::json layers = nlohmann::json::object();
    for (const auto& [name, obs] : seen_) {
        nlohmann::json l;
        const char* keys[3] = {"x", "w", "g"};
        for (int k = 0; k < 3; ++k) {
            nlohmann::json arr = nlohmann::json::array();
            for (Pattern p : obs[size_t(k)]) arr.push_back(pattern_name(p));
            l[keys[k]] = arr;
        }
        layers[name] = l;
    }
    return {{"steps", steps_}, {"steps_done", done_}, {"observations", layers}};
}

Calibration Calibration::from_json(const nlohmann::json& j) {
    Calibration c(j.value("steps", 30));
    c.done_ = j.value("steps_done", 0);
    if (j.contains("observations"))
        for (const auto& [name, l] : j["observations"].items()) {
            const char* keys[3] = {"x", "w", "g"};
            for (int k = 0; k < 3; ++k)
                if (l.contains(keys[k]))
                    for (const auto& p : l[keys[k]]) c.seen_[name][size_t(k)].push_back(parse_pattern(p.get<std::string>()));
        }
    return c;
}

}  // namespace lowbit
