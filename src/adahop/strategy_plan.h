// strategy_plan.h — AdaHOP's strategy planner (adahop.md §5): the three GEMMs of a linear layer
//   fwd   Y  = X·Wᵀ   A = X,   B = Wᵀ   pair (x, opp(w))
//   dgrad dX = dY·W   A = dY,  B = W    pair (g, w)
//   wgrad dW = dYᵀ·X  A = dYᵀ, B = X    pair (opp(g), x)
// each get a strategy from a pattern-pair table (built-in Lv1 / Lv2, or a user table in JSON), and a
// calibration object that records the patterns of every layer's X, W, dY for N steps (default 30) and
// fixes the strategies by majority vote (ties → the label seen first; never seen → none).
// Plans serialize to JSON with the official port's keys (aggregated_patterns, per_layer_modes with
// forward_y / backward_gx / backward_gw) so a run can resume or reuse them.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adahop/outlier_detector.h"

namespace lowbit {

// How one GEMM C = A·B is computed (names in JSON: the port's mode names).
enum class Strategy : uint8_t {
    plain,         // "none": both operands MX-quantized along K, no rotation
    iht,           // "hadamard": block-32 Hadamard along K on both operands, then MX
    iht_oe_left,   // "inner_outlier_extract_left": IHT + top-k rows of A computed in high precision
    iht_oe_right,  // "inner_outlier_extract_right": IHT + top-k columns of B in high precision
    full,          // "full_precision": BF16 operands, FP32 accumulation
    oht,           // "outer_hadamard": rotate M and N instead of K (analysis only; not in the tables)
};

const char* strategy_name(Strategy s);             // port name, e.g. "hadamard"
const char* strategy_short_name(Strategy s);       // "plain", "IHT", "IHT+OE-left", ...
Strategy parse_strategy(const std::string& name);  // accepts both; Error(usage) otherwise

enum class Slot : uint8_t { fwd, dgrad, wgrad };
const char* slot_name(Slot s);  // "forward_y", "backward_gx", "backward_gw"

// table[pattern of A][pattern of B], patterns indexed row = 0, col = 1, none = 2.
struct StrategyTable {
    std::string name;
    std::array<std::array<Strategy, 3>, 3> pair{};
    Strategy lookup(Pattern a, Pattern b) const { return pair[size_t(a)][size_t(b)]; }
};

StrategyTable strategy_table_lv1();
StrategyTable strategy_table_lv2();
// "lv1", "lv2", or a JSON file {"name": ..., "pairs": {"row-col": "inner_outlier_extract_right", ...}}
// that must give all 9 pairs. Errors name the file and the missing/unknown entry.
StrategyTable strategy_table_named(const std::string& name_or_path);
StrategyTable strategy_table_from_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json strategy_table_to_json(const StrategyTable& t);

struct LayerPatterns {
    Pattern x = Pattern::none, w = Pattern::none, g = Pattern::none;
};

struct LayerPlan {
    LayerPatterns patterns;
    Strategy fwd = Strategy::iht, dgrad = Strategy::iht, wgrad = Strategy::iht;
    Strategy at(Slot s) const { return s == Slot::fwd ? fwd : s == Slot::dgrad ? dgrad : wgrad; }
};

// The pattern pair (A, B) of a slot and the plan of one layer.
std::pair<Pattern, Pattern> slot_pair(Slot s, const LayerPatterns& p);
LayerPlan plan_layer(const LayerPatterns& p, const StrategyTable& t);

struct Plan {
    std::string table_name;
    std::map<std::string, LayerPlan> layers;
};
nlohmann::json plan_to_json(const Plan& plan);
Plan plan_from_json(const nlohmann::json& j, const std::string& origin);
void plan_save(const Plan& plan, const std::string& path);  // atomic write
Plan plan_load(const std::string& path);

enum class Operand : uint8_t { x, w, g };

// Records detector labels per (layer, operand) for `steps` steps, then fixes a plan by majority vote.
class Calibration {
public:
    explicit Calibration(int steps = 30) : steps_(steps) {}
    void record(const std::string& layer, Operand which, Pattern label);
    void end_step() { ++done_; }
    bool complete() const { return done_ >= steps_; }
    int steps() const { return steps_; }
    int steps_done() const { return done_; }
    LayerPatterns majority(const std::string& layer) const;
    Plan finalize(const StrategyTable& table) const;
    nlohmann::json to_json() const;  // observations so far (for checkpoints)
    static Calibration from_json(const nlohmann::json& j);

private:
    int steps_;
    int done_ = 0;
    // per layer and operand: labels in the order seen
    std::map<std::string, std::array<std::vector<Pattern>, 3>> seen_;
};

}  // namespace lowbit
