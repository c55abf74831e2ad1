// test_strategy_plan.cpp — pattern pairs, the Lv1/Lv2 tables, calibration by majority vote and JSON
// round trips (adahop/strategy_plan.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "adahop/strategy_plan.h"
#include "core/error.h"

using namespace lowbit;

TEST(StrategyPlan, SlotPairsFromTheSpec) {
    // x = w = g = row → fwd row–col, dgrad row–row, wgrad col–row (adahop.md §5.1)
    const LayerPatterns p{Pattern::row, Pattern::row, Pattern::row};
    EXPECT_EQ(slot_pair(Slot::fwd, p), std::make_pair(Pattern::row, Pattern::col));
    EXPECT_EQ(slot_pair(Slot::dgrad, p), std::make_pair(Pattern::row, Pattern::row));
    EXPECT_EQ(slot_pair(Slot::wgrad, p), std::make_pair(Pattern::col, Pattern::row));
}

TEST(StrategyPlan, TablesLv1Lv2) {
    const StrategyTable l1 = strategy_table_lv1(), l2 = strategy_table_lv2();
    EXPECT_EQ(l2.lookup(Pattern::row, Pattern::row), Strategy::iht);
    EXPECT_EQ(l2.lookup(Pattern::row, Pattern::none), Strategy::iht_oe_left);
    EXPECT_EQ(l2.lookup(Pattern::row, Pattern::col), Strategy::iht_oe_right);
    EXPECT_EQ(l2.lookup(Pattern::col, Pattern::row), Strategy::iht);
    EXPECT_EQ(l2.lookup(Pattern::col, Pattern::none), Strategy::iht);
    EXPECT_EQ(l2.lookup(Pattern::col, Pattern::col), Strategy::full);
    EXPECT_EQ(l1.lookup(Pattern::col, Pattern::col), Strategy::iht_oe_right);
    EXPECT_EQ(l2.lookup(Pattern::none, Pattern::row), Strategy::iht);
    EXPECT_EQ(l2.lookup(Pattern::none, Pattern::none), Strategy::iht);
    EXPECT_EQ(l2.lookup(Pattern::none, Pattern::col), Strategy::iht_oe_right);
    for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b)
            if (!(a == 1 && b == 1)) {
                EXPECT_EQ(l1.pair[size_t(a)][size_t(b)], l2.pair[size_t(a)][size_t(b)]);
            }
}

TEST(StrategyPlan, WorkedExamplesLv2) {
    // x = col, w = none, g = row → fwd IHT, dgrad IHT+OE-left, wgrad BF16 (Lv1: IHT+OE-right)
    LayerPlan p = plan_layer({Pattern::col, Pattern::none, Pattern::row}, strategy_table_lv2());
    EXPECT_EQ(p.fwd, Strategy::iht);
    EXPECT_EQ(p.dgrad, Strategy::iht_oe_left);
    EXPECT_EQ(p.wgrad, Strategy::full);
    EXPECT_EQ(plan_layer({Pattern::col, Pattern::none, Pattern::row}, strategy_table_lv1()).wgrad, Strategy::iht_oe_right);
    // x = col, w = none, g = none → fwd IHT, dgrad IHT, wgrad IHT+OE-right
    p = plan_layer({Pattern::col, Pattern::none, Pattern::none}, strategy_table_lv2());
    EXPECT_EQ(p.fwd, Strategy::iht);
    EXPECT_EQ(p.dgrad, Strategy::iht);
    EXPECT_EQ(p.wgrad, Strategy::iht_oe_right);
}

TEST(StrategyPlan, MajorityVoteTiesGoToTheFirstSeen) {
    Calibration c(4);
    for (Pattern p : {Pattern::none, Pattern::row, Pattern::row, Pattern::none}) c.record("l0", Operand::x, p);
    for (Pattern p : {Pattern::col, Pattern::col, Pattern::row, Pattern::none}) c.record("l0", Operand::g, p);
    for (int i = 0; i < 4; ++i) c.end_step();
    EXPECT_TRUE(c.complete());
    const LayerPatterns m = c.majority("l0");
    EXPECT_EQ(m.x, Pattern::none);  // 2–2 tie, none seen first
    EXPECT_EQ(m.g, Pattern::col);
    EXPECT_EQ(m.w, Pattern::none);  // never seen
    const Plan plan = c.finalize(strategy_table_lv2());
    ASSERT_EQ(plan.layers.count("l0"), 1u);
    EXPECT_EQ(plan.layers.at("l0").dgrad, strategy_table_lv2().lookup(Pattern::col, Pattern::none));
    // checkpointed observations give the same plan
    Calibration back = Calibration::from_json(c.to_json());
    EXPECT_EQ(plan_to_json(back.finalize(strategy_table_lv2())), plan_to_json(plan));
}

TEST(StrategyPlan, PlanJsonRoundTripAndFiles) {
    Plan plan;
    plan.table_name = "lv2";
    plan.layers["blk.0.attn_k"] = plan_layer({Pattern::col, Pattern::col, Pattern::row}, strategy_table_lv2());
    plan.layers["blk.1.ffn_down"] = plan_layer({Pattern::none, Pattern::row, Pattern::none}, strategy_table_lv2());
    const nlohmann::json j = plan_to_json(plan);
    EXPECT_EQ(j["per_layer_modes"]["blk.0.attn_k"]["forward_y"], "hadamard");
    EXPECT_EQ(plan_to_json(plan_from_json(j, "mem")), j);
    const std::string path = testing::TempDir() + "/lowbit_plan.json";
    plan_save(plan, path);
    EXPECT_EQ(plan_to_json(plan_load(path)), j);
    std::remove(path.c_str());
    // Values of another type deep inside are input errors naming the origin, not JSON type errors.
    nlohmann::json bad = j;
    bad["table"] = 3;
    bad["aggregated_patterns"]["blk.0.attn_k"] = 7;
    try {
        plan_from_json(bad, "edited.json");
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input);
        EXPECT_NE(std::string(e.what()).find("edited.json"), std::string::npos) << e.what();
    }
}

TEST(StrategyPlan, UserTablesFromJson) {
    nlohmann::json t = strategy_table_to_json(strategy_table_lv1());
    t["name"] = "mine";
    t["pairs"]["none-none"] = "full_precision";
    const StrategyTable u = strategy_table_from_json(t, "mem");
    EXPECT_EQ(u.name, "mine");
    EXPECT_EQ(u.lookup(Pattern::none, Pattern::none), Strategy::full);
    t["pairs"].erase("row-col");
    EXPECT_THROW(strategy_table_from_json(t, "mem"), Error);
    t["pairs"]["row-col"] = "bogus";
    EXPECT_THROW(strategy_table_from_json(t, "mem"), Error);
    EXPECT_THROW(strategy_table_named("/nonexistent/table.json"), Error);
}
