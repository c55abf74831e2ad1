// test_train_run.cpp — training run control on the CPU: the precision recipes (strategies per slot, JSON),
// AdaHOP's calibration fixing a plan inside a run, run directories with checkpoints and a bit-exact resume,
// refusals (corrupt/truncated checkpoints, another run's directory, NaN loss and gradients naming the step),
// metrics lines, the slot-error probe lines and their resume, the plot of two runs, and the HF and GGUF
// exports read back by the runtime.
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "error_test_util.h"
#include "io/corpus.h"
#include "io/gguf_file.h"
#include "io/npy.h"
#include "io/plot.h"
#include "io/token_shards.h"
#include "model/hf_export.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "train/mx_census_report.h"
#include "train/recipe.h"
#include "train/run_metrics.h"
#include "train/train_export.h"
#include "train/trainer_cpu.h"
#include "train/training_run.h"
#include "train_test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
    const fs::path p = fs::temp_directory_path() / fmt::format("lowbit_test_train_run_{}_{}", getpid(), name);
    fs::remove_all(p);
    return p;
}

// The tiny preset with 2 sequences per step and `steps` steps (a ~0.16 M-parameter model: ms per step).
TrainConfig tiny_run(int64_t steps) {
    TrainConfig t = train_preset("tiny");
    t.batch_size = 2;
    t.schedule.total_steps = steps;
    t.schedule.warmup_steps = 2;
    t.optimizer.lr = 3e-3;
    return t;
}

// A shard set of the tiny vocabulary (512): train documents with a learnable pattern, and a val split of
// 4 windows of 65 tokens.
const fs::path& tiny_shards() {
    static const fs::path dir = [] {
        const fs::path d = fresh_dir("shards");
        TokenShardInfo info;
        info.token_bytes = 2;
        info.vocab_size = 512;
        info.separator_id = 0;
        info.tokenizer = "test/none/512/0000000000000000";
        TokenShardSetWriter w(d.string(), info, 1 << 20, 0, 0.0);
        for (int doc = 0; doc < 40; ++doc) {
            std::vector<int32_t> ids(200);
            for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(1 + (i * 7 + size_t(doc) * (i % 5)) % 511);
            w.add_document(doc % 10 == 9 ? "val" : "train", ids);
        }
        w.finish({{"note", "test_train_run"}});
        return d;
    }();
    return dir;
}

std::vector<int32_t> pattern_tokens(int64_t n, int seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t(1 + (i * 13 + seed * (i % 3)) % 511);
    return t;
}

Batch pattern_batch(const TrainConfig& c, int seed) {
    return batch_from_stream(pattern_tokens(c.batch_size * (c.seq_len + 1), seed), {c.batch_size, c.seq_len});
}

Recipe recipe_of(Precision p, int calibration_steps = 30) {
    Recipe r;
    r.precision = p;
    r.calibration_steps = calibration_steps;
    return r;
}

RunOptions quiet_run(const fs::path& dir) {
    RunOptions o;
    o.run_dir = dir.string();
    o.data_dir = tiny_shards().string();
    o.log_every = 1;
    o.val_every = 4;
    o.val_windows = 4;
    o.progress = false;
    o.log = false;
    return o;
}

// Metrics lines without their timing keys.
std::vector<nlohmann::json> untimed_metrics(const fs::path& dir) {
    std::vector<nlohmann::json> lines = read_metrics((dir / "metrics.jsonl").string());
    for (nlohmann::json& l : lines)
        for (const std::string& k : metrics_timing_keys()) l.erase(k);
    return lines;
}

// ---------------------------------------------------------------------------------------------------
// recipes

TEST(TrainRecipe, StrategiesPerSlot) {
    const LlamaConfig c = train_preset("tiny").model;
    const auto all = [&](const RecipeState& r, Slot s) {
        std::set<Strategy> seen;
        for (int64_t l = 0; l < c.n_layers; ++l)
            for (Projection p : kProjections) seen.insert(r.strategy(l, p, s));
        return seen;
    };
    const std::vector<std::pair<Precision, std::array<Strategy, 3>>> uniform = {
        {Precision::bf16, {Strategy::full, Strategy::full, Strategy::full}},
        {Precision::mxfp4, {Strategy::plain, Strategy::plain, Strategy::plain}},
        {Precision::mxfp4_iht, {Strategy::iht, Strategy::iht, Strategy::iht}},
        {Precision::mxfp4_rht_sr, {Strategy::plain, Strategy::iht, Strategy::iht}},
        {Precision::adahop_lv1, {Strategy::full, Strategy::full, Strategy::full}},  // calibrating
    };
    for (const auto& [p, want] : uniform) {
        SCOPED_TRACE(precision_name(p));
        const RecipeState r(recipe_of(p), c);
        EXPECT_EQ(parse_precision(precision_name(p)), p);
        EXPECT_EQ(all(r, Slot::fwd), std::set<Strategy>{want[0]});
        EXPECT_EQ(all(r, Slot::dgrad), std::set<Strategy>{want[1]});
        EXPECT_EQ(all(r, Slot::wgrad), std::set<Strategy>{want[2]});
        EXPECT_EQ(r.randomized(Slot::dgrad), p == Precision::mxfp4_rht_sr);
        EXPECT_FALSE(r.randomized(Slot::fwd));
        EXPECT_EQ(r.calibrating(), p == Precision::adahop_lv1);
        int64_t total = 0;
        for (const auto& [name, n] : r.strategy_counts()) total += n;
        EXPECT_EQ(total, c.n_layers * kProjectionCount * 3);
    }
    expect_error_with([] { parse_precision("fp8"); }, ErrorKind::usage, {"fp8", "adahop-lv2"});
    expect_error_with([&] { (void)RecipeState(recipe_of(Precision::adahop_lv2, 0), c); }, ErrorKind::usage, {"calibration"});
}

TEST(TrainRecipe, CalibrationFixesThePlanByMajorityAndRoundTripsThroughJson) {
    const LlamaConfig c = train_preset("tiny").model;
    for (const Precision p : {Precision::adahop_lv1, Precision::adahop_lv2}) {
        SCOPED_TRACE(precision_name(p));
        RecipeState r(recipe_of(p, 3), c);
        const std::vector<Pattern> x = {Pattern::row, Pattern::col, Pattern::row};  // majority row
        for (int step = 0; step < 3; ++step) {
            for (int64_t l = 0; l < c.n_layers; ++l)
                for (Projection pr : kProjections) {
                    r.record(l, pr, Operand::x, x[size_t(step)]);
                    r.record(l, pr, Operand::w, Pattern::none);
                    r.record(l, pr, Operand::g, Pattern::col);
                }
            EXPECT_TRUE(r.calibrating());
            const RecipeState mid = RecipeState::from_json(r.to_json(), c, "mid");  // a checkpoint mid-calibration
            EXPECT_EQ(mid.to_json(), r.to_json());
            r.end_step();
        }
        EXPECT_FALSE(r.calibrating());
        ASSERT_EQ(int64_t(r.plan().layers.size()), c.n_layers * kProjectionCount);
        // x = row, w = none, g = col: fwd (row, none) → IHT+OE-left; dgrad (col, none) → IHT;
        // wgrad (opp(col) = row, row) → IHT (adahop.md §5.4, both tables).
        const StrategyTable t = p == Precision::adahop_lv1 ? strategy_table_lv1() : strategy_table_lv2();
        EXPECT_EQ(r.strategy(1, Projection::up, Slot::fwd), t.lookup(Pattern::row, Pattern::none));
        EXPECT_EQ(r.strategy(1, Projection::up, Slot::fwd), Strategy::iht_oe_left);
        EXPECT_EQ(r.strategy(0, Projection::q, Slot::dgrad), Strategy::iht);
        EXPECT_EQ(r.strategy(0, Projection::q, Slot::wgrad), Strategy::iht);
        EXPECT_NE(r.plan_map().find("blk.1"), std::string::npos);
        EXPECT_NE(r.plan_map().find("up: IHT+OE-left/IHT/IHT"), std::string::npos) << r.plan_map();
        const RecipeState back = RecipeState::from_json(r.to_json(), c, "round trip");
        EXPECT_EQ(back.to_json(), r.to_json());
        EXPECT_FALSE(back.calibrating());
        EXPECT_EQ(back.strategy_counts(), r.strategy_counts());
        EXPECT_EQ(back.plan_map(), r.plan_map());
    }
    // The engine settings are not part of a state: a restored state keeps those of the recipe it is restored into.
    Recipe engine = recipe_of(Precision::adahop_lv1, 3);
    engine.mx_tensor_cores = true;
    engine.mx_column_bases = true;
    engine.save_quantized_operands = false;
    const RecipeState fresh(recipe_of(Precision::adahop_lv1, 3), c);
    const RecipeState restored = RecipeState::from_json(fresh.to_json(), c, "state.json", engine);
    EXPECT_TRUE(restored.recipe().mx_tensor_cores);
    EXPECT_TRUE(restored.recipe().mx_column_bases);
    EXPECT_FALSE(restored.recipe().save_quantized_operands);
    EXPECT_EQ(restored.to_json(), fresh.to_json());
    EXPECT_FALSE(RecipeState::from_json(fresh.to_json(), c, "state.json").recipe().mx_tensor_cores);
    expect_error_with([&] { RecipeState::from_json({{"recipe", {{"precision", "fp8"}}}}, c, "state.json"); },
                      ErrorKind::input, {"state.json", "fp8"});
    expect_error_with([&] { RecipeState::from_json(nlohmann::json::array(), c, "state.json"); }, ErrorKind::input,
                      {"state.json"});
}

// --mx-slots / --mx-projections: the unlisted GEMMs run in BF16, for every MXFP4 recipe; saved with the recipe.
TEST(TrainRecipe, SlotProjectionAndLayerMasksRunTheOthersInBf16) {
    const LlamaConfig c = train_preset("tiny").model;
    EXPECT_EQ(parse_slot_mask("fwd,wgrad"), 0x05);
    EXPECT_EQ(parse_projection_mask("attn"), 0x0f);
    EXPECT_EQ(parse_projection_mask("ffn,q"), 0x71);
    EXPECT_EQ(slot_mask_name(0x06), "dgrad,wgrad");
    EXPECT_EQ(projection_mask_name(0x70), "gate,up,down");
    Recipe named = recipe_of(Precision::mxfp4);
    EXPECT_EQ(recipe_description(named), "mxfp4");
    named.mx_slots = 0x01;
    named.mx_projections = 0x0f;
    EXPECT_EQ(recipe_description(named), "mxfp4 (MXFP4 only in slots fwd, projections q,k,v,o)");
    expect_error_with([] { parse_slot_mask("fwd,bwd"); }, ErrorKind::usage, {"bwd", "wgrad"});
    expect_error_with([] { parse_slot_mask(""); }, ErrorKind::usage, {"empty"});
    expect_error_with([] { parse_projection_mask("q,,k"); }, ErrorKind::usage, {"projection", "gate"});

    Recipe r = recipe_of(Precision::mxfp4_iht);
    r.mx_slots = parse_slot_mask("dgrad");
    r.mx_projections = parse_projection_mask("ffn");
    const RecipeState st(r, c);
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (Projection p : kProjections)
            for (Slot s : {Slot::fwd, Slot::dgrad, Slot::wgrad}) {
                const bool on = s == Slot::dgrad && (p == Projection::gate || p == Projection::up || p == Projection::down);
                EXPECT_EQ(st.strategy(l, p, s), on ? Strategy::iht : Strategy::full);
            }
    EXPECT_EQ(st.strategy_counts().at("IHT"), c.n_layers * 3);
    const RecipeState back = RecipeState::from_json(st.to_json(), c, "state.json");
    EXPECT_EQ(back.recipe().mx_slots, r.mx_slots);
    EXPECT_EQ(back.recipe().mx_projections, r.mx_projections);
    EXPECT_EQ(back.to_json(), st.to_json());
    EXPECT_FALSE(RecipeState(recipe_of(Precision::mxfp4), c).to_json()["recipe"].contains("mx_slots"));
    // AdaHOP: the plan is made for every slot, the masks override it.
    Recipe lv1 = recipe_of(Precision::adahop_lv1, 1);
    lv1.mx_slots = parse_slot_mask("wgrad");
    RecipeState a(lv1, c);
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (Projection p : kProjections)
            for (Operand o : {Operand::x, Operand::w, Operand::g}) a.record(l, p, o, Pattern::none);
    a.end_step();
    EXPECT_EQ(a.strategy(0, Projection::q, Slot::fwd), Strategy::full);
    EXPECT_EQ(a.strategy(0, Projection::q, Slot::wgrad), strategy_table_lv1().lookup(Pattern::none, Pattern::none));
    Recipe bf = recipe_of(Precision::bf16);
    bf.mx_slots = 0x01;
    expect_error_with([&] { (void)RecipeState(bf, c); }, ErrorKind::usage, {"bf16", "mask"});
    expect_error_with([&] { RecipeState::from_json({{"recipe", {{"precision", "mxfp4"}, {"mx_slots", "up"}}}}, c, "state.json"); },
                      ErrorKind::input, {"state.json", "up"});

    // --mx-layers: block indices and ranges; only the listed blocks quantize.
    EXPECT_EQ(parse_layer_mask("0,2-4,11"), 0x81dULL);
    EXPECT_EQ(layer_mask_name(0x81dULL), "0,2-4,11");
    EXPECT_EQ(layer_mask_name(0x3ULL), "0,1");
    EXPECT_EQ(layer_mask_name(uint64_t{1} << 63), "63");
    EXPECT_EQ(parse_layer_mask(layer_mask_name(0xf0f0f0f0f0f0f0f0ULL)), 0xf0f0f0f0f0f0f0f0ULL);
    expect_error_with([] { parse_layer_mask("1,x"); }, ErrorKind::usage, {"'x'", "block index"});
    expect_error_with([] { parse_layer_mask("64"); }, ErrorKind::usage, {"'64'", "0-63"});
    expect_error_with([] { parse_layer_mask("4-2"); }, ErrorKind::usage, {"'4-2'", "upwards"});
    expect_error_with([] { parse_layer_mask("-3"); }, ErrorKind::usage, {"'-3'"});
    expect_error_with([] { parse_layer_mask(""); }, ErrorKind::usage, {"empty"});
    Recipe by_layer = recipe_of(Precision::mxfp4);
    by_layer.mx_layers = parse_layer_mask("1");
    EXPECT_EQ(recipe_description(by_layer), "mxfp4 (MXFP4 only in layers 1)");
    const RecipeState lst(by_layer, c);
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (Projection p : kProjections)
            for (Slot s : {Slot::fwd, Slot::dgrad, Slot::wgrad})
                EXPECT_EQ(lst.strategy(l, p, s), l == 1 ? Strategy::plain : Strategy::full);
    EXPECT_EQ(lst.to_json()["recipe"]["mx_layers"], "1");
    EXPECT_EQ(RecipeState::from_json(lst.to_json(), c, "state.json").recipe().mx_layers, by_layer.mx_layers);
    EXPECT_FALSE(RecipeState(recipe_of(Precision::mxfp4), c).to_json()["recipe"].contains("mx_layers"));
    by_layer.mx_layers = parse_layer_mask("1-2");  // the tiny model has blocks 0 and 1
    expect_error_with([&] { (void)RecipeState(by_layer, c); }, ErrorKind::usage, {"layers 1,2", "0-1"});
    LlamaConfig deep = c;
    deep.n_layers = 80;
    by_layer.mx_layers = parse_layer_mask("0");
    expect_error_with([&] { (void)RecipeState(by_layer, deep); }, ErrorKind::usage, {"0-63", "80"});
    Recipe bf_layers = recipe_of(Precision::bf16);
    bf_layers.mx_layers = 0x1;
    expect_error_with([&] { (void)RecipeState(bf_layers, c); }, ErrorKind::usage, {"bf16", "mask"});

    // A step: the forward's loss depends only on whether fwd is quantized; the gradients on the rest too.
    const TrainConfig cfg = tiny_run(5);
    const Batch batch = pattern_batch(cfg, 3);
    const auto trainer = [&](const char* slots) {
        Recipe m = recipe_of(Precision::mxfp4);
        m.mx_slots = parse_slot_mask(slots);
        return std::make_unique<CpuTrainer>(cfg, m);
    };
    auto wg = trainer("wgrad"), dw = trainer("dgrad,wgrad"), fw = trainer("fwd"), all = trainer("fwd,dgrad,wgrad");
    EXPECT_EQ(wg->loss(batch.view()), dw->loss(batch.view()));
    EXPECT_EQ(fw->loss(batch.view()), all->loss(batch.view()));
    EXPECT_NE(wg->loss(batch.view()), fw->loss(batch.view()));
    for (auto* t : {wg.get(), dw.get(), fw.get(), all.get()}) t->step(batch.view());
    EXPECT_NE(wg->gradients(), dw->gradients());
    EXPECT_NE(fw->gradients(), all->gradients());
    // Layers: naming every block is the unmasked recipe; one block quantizes only that block's GEMMs.
    const auto by_layers = [&](const char* layers) {
        Recipe m = recipe_of(Precision::mxfp4);
        m.mx_layers = parse_layer_mask(layers);
        return std::make_unique<CpuTrainer>(cfg, m);
    };
    CpuTrainer dense(cfg, recipe_of(Precision::bf16));
    const double everywhere = trainer("fwd,dgrad,wgrad")->loss(batch.view()), none = dense.loss(batch.view());
    EXPECT_EQ(by_layers("0-1")->loss(batch.view()), everywhere);  // the tiny model's two blocks
    const double first = by_layers("0")->loss(batch.view()), second = by_layers("1")->loss(batch.view());
    for (double one : {first, second}) {
        EXPECT_NE(one, everywhere);
        EXPECT_NE(one, none);
    }
    EXPECT_NE(first, second);
}

// --mx-scale-rule: the block-scale rule of every quantized operand, a recipe setting like the masks.
TEST(TrainRecipe, ScaleRuleIsSavedWithTheRecipeAndChangesTheProducts) {
    const TrainConfig cfg = tiny_run(5);
    const Batch batch = pattern_batch(cfg, 3);
    EXPECT_EQ(parse_mx_scale_rule("rceil"), ScaleRule::rceil);
    expect_error_with([] { parse_mx_scale_rule("ceil"); }, ErrorKind::usage, {"'ceil'", "floor", "midmax", "rceil"});
    const auto loss = [&](ScaleRule rule) {
        Recipe r = recipe_of(Precision::mxfp4);
        r.mx_scale_rule = rule;
        return CpuTrainer(cfg, r).loss(batch.view());
    };
    const double midmax = loss(ScaleRule::midmax), floor = loss(ScaleRule::floor), rceil = loss(ScaleRule::rceil);
    EXPECT_EQ(midmax, CpuTrainer(cfg, recipe_of(Precision::mxfp4)).loss(batch.view()));  // the default
    EXPECT_NE(floor, midmax);
    EXPECT_NE(rceil, midmax);
    EXPECT_NE(rceil, floor);

    Recipe r = recipe_of(Precision::mxfp4_iht);
    r.mx_scale_rule = ScaleRule::floor;
    EXPECT_EQ(r.lp_options().scale_rule, ScaleRule::floor);
    EXPECT_EQ(recipe_description(r), "mxfp4-iht, scale rule floor");
    r.mx_slots = parse_slot_mask("fwd");
    EXPECT_EQ(recipe_description(r), "mxfp4-iht (MXFP4 only in slots fwd), scale rule floor");
    const RecipeState st(r, cfg.model);
    EXPECT_EQ(st.to_json()["recipe"]["mx_scale_rule"], "floor");
    EXPECT_EQ(RecipeState::from_json(st.to_json(), cfg.model, "state.json").recipe().mx_scale_rule, ScaleRule::floor);
    EXPECT_FALSE(RecipeState(recipe_of(Precision::mxfp4), cfg.model).to_json()["recipe"].contains("mx_scale_rule"));
    expect_error_with([&] { RecipeState::from_json({{"recipe", {{"precision", "mxfp4"}, {"mx_scale_rule", "up"}}}},
                                                   cfg.model, "state.json"); },
                      ErrorKind::input, {"state.json", "'up'"});
    Recipe bf = recipe_of(Precision::bf16);
    bf.mx_scale_rule = ScaleRule::rceil;
    expect_error_with([&] { (void)RecipeState(bf, cfg.model); }, ErrorKind::usage, {"bf16", "scale rule"});
}

TEST(TrainRecipe, AdahopRunCalibratesThenTrainsOnThePlan) {
    const TrainConfig cfg = tiny_run(5);
    CpuTrainer trainer(cfg, recipe_of(Precision::adahop_lv1, 2));
    const Batch batch = pattern_batch(cfg, 1);
    EXPECT_NE(trainer.describe().find("calibrating"), std::string::npos);
    trainer.loss(batch.view());  // not a training step: records nothing
    for (int s = 0; s < 2; ++s) {
        EXPECT_TRUE(trainer.recipe().calibrating());
        trainer.step(batch.view());
    }
    EXPECT_FALSE(trainer.recipe().calibrating());
    // Two steps observed: X and W once per forward, dY once per backward, of every projection.
    const nlohmann::json obs = trainer.state().recipe_state["calibration"]["observations"];
    for (const char* op : {"x", "w", "g"}) EXPECT_EQ(obs["blk.1.ffn_down"][op].size(), 2u) << op;
    EXPECT_EQ(int64_t(trainer.recipe().plan().layers.size()), cfg.model.n_layers * kProjectionCount);
    EXPECT_EQ(trainer.recipe().strategy_counts().count("BF16"), 0u);  // Lv1 has no BF16 entry
    EXPECT_EQ(trainer.describe().find("calibrating"), std::string::npos);
    EXPECT_NE(trainer.describe().find("adahop fwd"), std::string::npos) << trainer.describe();
    for (int s = 2; s < 5; ++s) EXPECT_TRUE(std::isfinite(trainer.step(batch.view()).loss));
}

// ---------------------------------------------------------------------------------------------------
// runs: resume, metrics, refusals

// 12 steps straight, and 6 + resume + 6 (or 5 + 7 with a checkpoint at 3), give the same parameters, AdamW
// moments and metrics lines, bit for bit — for the dense recipe, for AdaHOP with the stop inside its
// calibration, and for mxfp4-rht-sr (stochastic rounding bits from the step).
TEST(TrainRun, ResumeIsBitExact) {
    struct Case {
        Recipe recipe;
        int64_t stop_at;
    };
    for (const Case& k : {Case{recipe_of(Precision::bf16), 6}, Case{recipe_of(Precision::adahop_lv1, 4), 2},
                          Case{recipe_of(Precision::mxfp4_rht_sr), 5}}) {
        SCOPED_TRACE(precision_name(k.recipe.precision));
        const TrainConfig cfg = tiny_run(12);
        const TokenShardSet data = TokenShardSet::open(tiny_shards().string());
        const fs::path straight = fresh_dir("straight"), resumed = fresh_dir("resumed");
        CpuTrainer a(cfg, k.recipe);
        const RunResult ra = run_training(a, data, quiet_run(straight));
        EXPECT_TRUE(ra.complete());
        ASSERT_TRUE(ra.val_loss.has_value());
        {
            CpuTrainer b(cfg, k.recipe);
            RunOptions o = quiet_run(resumed);
            o.stop_at = k.stop_at;
            o.checkpoint_every = 3;
            const RunResult rb = run_training(b, data, o);
            EXPECT_FALSE(rb.complete());
            EXPECT_EQ(rb.steps_done, k.stop_at);
        }
        // A line logged after the newest checkpoint must be dropped on resume: add a stray one.
        std::ofstream((resumed / "metrics.jsonl").string(), std::ios::app) << "{\"step\": 99}\n";
        CpuTrainer c(cfg, k.recipe);
        RunOptions o = quiet_run(resumed);
        o.resume = true;
        const RunResult rc = run_training(c, data, o);
        EXPECT_EQ(rc.first_step, k.stop_at);
        EXPECT_TRUE(rc.complete());
        const TrainerState sa = a.state(), sc = c.state();
        EXPECT_EQ(sa.steps_done, sc.steps_done);
        EXPECT_EQ(std::memcmp(sa.params.data(), sc.params.data(), sa.params.size() * 4), 0);
        EXPECT_EQ(std::memcmp(sa.m.data(), sc.m.data(), sa.m.size() * 4), 0);
        EXPECT_EQ(std::memcmp(sa.v.data(), sc.v.data(), sa.v.size() * 4), 0);
        EXPECT_EQ(sa.recipe_state, sc.recipe_state);
        EXPECT_EQ(untimed_metrics(straight), untimed_metrics(resumed));
        EXPECT_EQ(ra.val_loss, rc.val_loss);
        EXPECT_EQ(fs::exists(resumed / "plan.json"), precision_calibrates(k.recipe.precision));
        // keep = 2: only the two newest checkpoints remain.
        int64_t files = 0;
        for (const auto& e : fs::directory_iterator(resumed / "checkpoints")) files += e.path().extension() == ".json";
        EXPECT_EQ(files, 2);
    }
}

// The CPU engine's probe (CpuTrainer::probe_slot_errors) on an mxfp4 run: one line per probe with every slot's errors
// and the wgrad consistency so far; the probes do not touch the run; a resume keeps the lines before its step (and
// starts the consistency afresh: it lives in the call).
TEST(TrainRun, SlotErrorProbesAreLoggedAndResumeKeepsTheEarlierOnes) {
    const TrainConfig cfg = tiny_run(12);
    const TokenShardSet data = TokenShardSet::open(tiny_shards().string());
    const fs::path straight = fresh_dir("probe_straight"), resumed = fresh_dir("probe_resumed");
    Recipe mxfp4;
    mxfp4.precision = Precision::mxfp4;
    CpuTrainer a(cfg, mxfp4);
    RunOptions o = quiet_run(straight);
    o.probe_every = 4;
    o.probe_train_batch = true;
    run_training(a, data, o);
    const std::vector<nlohmann::json> want = read_metrics((straight / "slot_errors.jsonl").string());
    ASSERT_EQ(want.size(), 3u);
    const size_t slots = size_t(cfg.model.n_layers * kProjectionCount * 3);
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(want[i]["step"], int64_t(4 * i + 3));
        EXPECT_EQ(want[i]["batch"], "train");
        ASSERT_EQ(want[i]["slots"].size(), slots);
        for (const nlohmann::json& slot : want[i]["slots"]) {
            for (const char* key : {"layer", "projection", "slot", "active", "active_error", "plain", "IHT", "IHT+OE-left",
                                    "IHT+OE-right"})
                EXPECT_TRUE(slot.contains(key)) << key;
            EXPECT_EQ(slot["active"], "plain");
            EXPECT_EQ(slot["active_error"], slot["plain"]);  // the run's own linear is plain MXFP4
        }
        const nlohmann::json& cons = want[i]["wgrad_consistency"];
        EXPECT_EQ(cons["probes"], int64_t(i + 1));
        ASSERT_EQ(cons["by_projection"].size(), size_t(kProjectionCount));
        for (const auto& [proj, by_strategy] : cons["by_projection"].items()) {
            ASSERT_EQ(by_strategy.size(), kProbeStrategies.size()) << proj;
            for (const auto& [name, v] : by_strategy.items()) {
                EXPECT_GE(v["consistency"].get<double>(), 0.0) << proj << " " << name;
                EXPECT_LE(v["consistency"].get<double>(), std::sqrt(double(i + 1)) + 1e-6) << proj << " " << name;
            }
        }
    }
    EXPECT_NE(want[0]["slots"][0]["plain"], want[2]["slots"][0]["plain"]);  // new batches, a model that trains
    // The probes leave the run as it was.
    CpuTrainer unprobed(cfg, mxfp4);
    run_training(unprobed, data, quiet_run(fresh_dir("probe_none")));
    EXPECT_EQ(unprobed.params(), a.params());
    {
        CpuTrainer b(cfg, mxfp4);
        RunOptions ob = o;
        ob.run_dir = resumed.string();
        ob.stop_at = 6;
        run_training(b, data, ob);
    }
    // A probe line from after the checkpoint (a killed call) must be dropped on resume.
    std::ofstream((resumed / "slot_errors.jsonl").string(), std::ios::app) << "{\"step\": 7, \"slots\": []}\n";
    CpuTrainer c(cfg, mxfp4);
    RunOptions oc = o;
    oc.run_dir = resumed.string();
    oc.resume = true;
    run_training(c, data, oc);
    std::vector<nlohmann::json> got = read_metrics((resumed / "slot_errors.jsonl").string());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got[0], want[0]);                            // written before the checkpoint
    EXPECT_EQ(got[1]["wgrad_consistency"]["probes"], 1);  // the resumed call's first probe
    for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i]["slots"], want[i]["slots"]);
}

TEST(TrainRun, MetricsLinesHoldTheDocumentedKeys) {
    const TrainConfig cfg = tiny_run(12);
    const TokenShardSet data = TokenShardSet::open(tiny_shards().string());
    const fs::path dir = fresh_dir("metrics");
    CpuTrainer t(cfg);
    RunOptions o = quiet_run(dir);
    o.log_every = 5;  // steps 4, 9; validation at 3, 7, 11 (the last)
    o.peak_flops = 1e12;
    run_training(t, data, o);
    const std::vector<nlohmann::json> lines = read_metrics((dir / "metrics.jsonl").string());
    std::vector<int64_t> steps;
    for (const auto& l : lines) steps.push_back(l["step"].get<int64_t>());
    EXPECT_EQ(steps, (std::vector<int64_t>{3, 4, 7, 9, 11}));
    for (const auto& l : lines) {
        const int64_t s = l["step"].get<int64_t>();
        for (const char* key : {"loss", "lr", "grad_norm", "clip_scale", "tokens", "strategies", "tokens_per_s", "mfu"})
            EXPECT_TRUE(l.contains(key)) << key << " in " << l.dump();
        EXPECT_EQ(l.contains("val_loss"), s == 3 || s == 7 || s == 11) << l.dump();
        EXPECT_EQ(l["tokens"].get<int64_t>(), (s + 1) * cfg.batch_size * cfg.seq_len);
        EXPECT_DOUBLE_EQ(l["lr"].get<double>(), cfg.schedule.lr_at(s, cfg.optimizer.lr));
        EXPECT_EQ(l["strategies"], nlohmann::json({{"BF16", cfg.model.n_layers * kProjectionCount * 3}}));
        EXPECT_GT(l["mfu"].get<double>(), 0.0);
    }
    const std::string config_text = read_text_file((dir / "config.json").string());
    const nlohmann::json config = nlohmann::json::parse(config_text);
    EXPECT_EQ(config["recipe"]["precision"], "bf16");
    EXPECT_EQ(config["train_config"], train_config_to_json(cfg));
    // 6·(block projections + LM head) + 12·L·q_dim·T, by hand for the tiny preset.
    const double per_layer = 64.0 * 64 * 4 - 2 * 64.0 * 32 + 3 * 64.0 * 256;  // q, o: 64x64; k, v: 32x64; ffn 3x
    EXPECT_DOUBLE_EQ(model_flops_per_token(cfg.model, 64), 6 * (2 * per_layer + 512.0 * 64) + 12.0 * 2 * 64 * 64);
}

TEST(TrainRun, RefusesAnotherRunsDirectory) {
    const TokenShardSet data = TokenShardSet::open(tiny_shards().string());
    const fs::path dir = fresh_dir("another");
    {
        CpuTrainer t(tiny_run(4));
        RunOptions o = quiet_run(dir);
        o.stop_at = 2;
        run_training(t, data, o);
    }
    CpuTrainer same(tiny_run(4));
    expect_error_with([&] { run_training(same, data, quiet_run(dir)); }, ErrorKind::usage, {dir.string(), "--resume"});
    TrainConfig other_lr = tiny_run(4);
    other_lr.optimizer.lr = 1e-3;
    CpuTrainer other(other_lr);
    RunOptions o = quiet_run(dir);
    o.resume = true;
    expect_error_with([&] { run_training(other, data, o); }, ErrorKind::usage,
                      {"config.json", "/train_config/optimizer/lr", "0.003", "0.001"});
    CpuTrainer other_recipe(tiny_run(4), recipe_of(Precision::mxfp4));
    expect_error_with([&] { run_training(other_recipe, data, o); }, ErrorKind::usage, {"/recipe/precision", "mxfp4"});
}

// grad_accum is a memory setting: a run stopped with one micro-batch per step resumes with two (validation then
// runs a micro-batch at a time too) and ends where the straight run does, within FP32 summation order.
TEST(TrainRun, ResumeMayChangeGradAccumulation) {
    const TokenShardSet data = TokenShardSet::open(tiny_shards().string());
    const fs::path straight = fresh_dir("accum_straight"), resumed = fresh_dir("accum_resumed");
    const TrainConfig cfg = tiny_run(6);
    CpuTrainer a(cfg);
    const RunResult ra = run_training(a, data, quiet_run(straight));
    {
        CpuTrainer b(cfg);
        RunOptions o = quiet_run(resumed);
        o.stop_at = 3;
        run_training(b, data, o);
    }
    TrainConfig accumulated = cfg;
    accumulated.grad_accum = 2;
    CpuTrainer c(accumulated);
    RunOptions o = quiet_run(resumed);
    o.resume = true;
    const RunResult rc = run_training(c, data, o);
    EXPECT_EQ(rc.first_step, 3);
    ASSERT_TRUE(rc.complete());
    ASSERT_TRUE(ra.val_loss && rc.val_loss);
    EXPECT_NEAR(*rc.val_loss, *ra.val_loss, 1e-5 * *ra.val_loss);
    const std::vector<float> pa = a.state().params, pc = c.state().params;
    double num = 0, den = 0;
    for (size_t i = 0; i < pa.size(); ++i) {
        num += (double(pc[i]) - pa[i]) * (double(pc[i]) - pa[i]);
        den += double(pa[i]) * pa[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-5);
    EXPECT_NE(std::memcmp(pa.data(), pc.data(), pa.size() * 4), 0);  // summed in another order: not bit-identical
}

TEST(TrainCheckpoint, TruncatedOrCorruptFilesAreNamed) {
    const fs::path dir = fresh_dir("corrupt");
    CpuTrainer t(tiny_run(4));
    const Batch batch = pattern_batch(t.config(), 2);
    t.step(batch.view());
    const std::string json = save_checkpoint(dir.string(), {t.state(), 1});
    const std::string bin = (dir / "checkpoints" / "step_00000001.bin").string();
    EXPECT_EQ(newest_checkpoint(dir.string()), json);
    const Checkpoint back = load_checkpoint(json, t.layout().total());
    EXPECT_EQ(back.state.params, t.params());
    EXPECT_EQ(back.metrics_lines, 1);
    EXPECT_EQ(back.state.steps_done, 1);
    expect_error_with([&] { load_checkpoint(json, t.layout().total() + 1); }, ErrorKind::input, {bin, "parameters"});

    const std::vector<uint8_t> good = read_file(bin);
    std::vector<uint8_t> bytes = good;
    bytes[bytes.size() / 2] ^= 0x40;
    write_file_atomic(bin, bytes.data(), bytes.size());
    expect_error_with([&] { load_checkpoint(json, t.layout().total()); }, ErrorKind::input, {bin, "corrupt"});
    bytes = good;
    bytes[20] ^= 1;  // in the header
    write_file_atomic(bin, bytes.data(), bytes.size());
    expect_error_with([&] { load_checkpoint(json, t.layout().total()); }, ErrorKind::input, {bin, "header"});
    for (const size_t size : {size_t(20), good.size() - 4}) {
        write_file_atomic(bin, good.data(), size);
        expect_error_with([&] { load_checkpoint(json, t.layout().total()); }, ErrorKind::input, {bin, "truncated"});
    }
    write_file_atomic(bin, good.data(), good.size());
    // A sidecar edited by hand: wrong types, a data file outside the directory, not an object — an input error
    // naming it, not a JSON type error.
    const std::vector<uint8_t> sidecar = read_file(json);
    const nlohmann::json original = nlohmann::json::parse(sidecar.begin(), sidecar.end());
    struct Edit {
        const char* key;
        nlohmann::json value;
        std::string names;
    };
    for (const Edit& e : {Edit{"format", 7, json}, Edit{"version", "1", json}, Edit{"file", "../step_00000001.bin", json},
                          Edit{"payload_checksum", 12, "sidecar none"}}) {
        nlohmann::json edited = original;
        edited[e.key] = e.value;
        const std::string text = edited.dump();
        write_file_atomic(json, text.data(), text.size());
        expect_error_with([&] { load_checkpoint(json, t.layout().total()); }, ErrorKind::input, {e.names});
    }
    for (const std::string& text : {std::string("[1, 2]"), std::string("{\"format\": \"lowbit-train-chec")}) {
        write_file_atomic(json, text.data(), text.size());
        expect_error_with([&] { load_checkpoint(json, t.layout().total()); }, ErrorKind::input, {json});
    }
}

TEST(TrainSteps, NonFiniteLossOrGradientNamesTheStep) {
    const TrainConfig cfg = tiny_run(6);
    CpuTrainer t(cfg);
    const Batch batch = pattern_batch(cfg, 3);
    t.step(batch.view());
    t.step(batch.view());
    t.params()[size_t(t.layout().find("output_norm.weight").offset)] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> before = t.params();
    expect_error_with([&] { t.step(batch.view()); }, ErrorKind::runtime, {"step 2", "loss is NaN/Inf"});
    EXPECT_EQ(t.steps_done(), 2);  // no update
    EXPECT_EQ(std::memcmp(before.data(), t.params().data(), before.size() * 4), 0);

    // A linear whose weight gradient is NaN: the gradient check names the step and the tensor.
    struct NanWeightGradient final : TrainLinear {
        DenseTrainLinear dense;
        void forward(ConstMatF x, ConstMatF w, MatF y, float beta) override { dense.forward(x, w, y, beta); }
        void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta) override { dense.backward_data(dy, w, dx, beta); }
        void backward_weight(ConstMatF, ConstMatF, MatF dw, float) override {
            dw.row(0)[0] = std::numeric_limits<float>::infinity();
        }
        std::string describe() const override { return "nan wgrad"; }
    };
    TrainLinears linears = dense_train_linears(cfg.model);
    linears.blocks[1][size_t(Projection::v)] = std::make_unique<NanWeightGradient>();
    CpuTrainer bad(cfg, std::move(linears));
    expect_error_with([&] { bad.step(batch.view()); }, ErrorKind::runtime,
                      {"step 0: ", "blk.1.attn_v.weight", "not finite"});
    EXPECT_EQ(bad.steps_done(), 0);
}

// ---------------------------------------------------------------------------------------------------
// plot and exports

TEST(TrainRun, PlotOfTwoRunsIsAValidSvg) {
    const TokenShardSet data = TokenShardSet::open(tiny_shards().string());
    const fs::path a = fresh_dir("plot_a"), b = fresh_dir("plot_b");
    CpuTrainer ta(tiny_run(4));
    run_training(ta, data, quiet_run(a));
    CpuTrainer tb(tiny_run(4), recipe_of(Precision::mxfp4_iht));
    run_training(tb, data, quiet_run(b));
    const LinePlot plot = run_curves_plot({a.string(), b.string()}, "loss", "");
    ASSERT_EQ(plot.series.size(), 2u);
    EXPECT_EQ(plot.series[0].label, "bf16");
    EXPECT_EQ(plot.series[1].label, "mxfp4-iht");
    EXPECT_EQ(plot.series[0].x, (std::vector<double>{1, 2, 3, 4}));
    const LinePlot val = run_curves_plot({a.string(), b.string()}, "val_loss", "");
    EXPECT_EQ(val.series[1].x, (std::vector<double>{4}));
    const fs::path svg = a / "loss.svg";
    write_figure(svg.string(), plot);
    const std::string text = read_text_file(svg.string());
    EXPECT_TRUE(text.starts_with("<?xml") || text.starts_with("<svg")) << text.substr(0, 40);
    EXPECT_NE(text.find("</svg>"), std::string::npos);
    EXPECT_NE(text.find("mxfp4-iht"), std::string::npos);
    expect_error_with([&] { run_curves_plot({a.string()}, "grad", ""); }, ErrorKind::usage, {"grad"});
    expect_error_with([&] { run_curves_plot({(a / "none").string()}, "loss", ""); }, ErrorKind::input, {"metrics.jsonl"});
}

// The loss of a model read back from a file, on `batch`, through the same training forward.
double loss_of(const LlamaModel& m, const Batch& batch) {
    const ParamLayout layout(m.config);
    const std::vector<float> params = params_from_model(layout, m);
    TrainLinears linears = dense_train_linears(m.config);
    TrainActivations acts;
    return train_forward(layout, params.data(), linears, batch.view(), acts);
}

TEST(TrainExport, HfAndGgufReadBackGiveTheTrainersLoss) {
    const TrainConfig cfg = tiny_run(3);
    CpuTrainer t(cfg);
    const Batch batch = pattern_batch(cfg, 4);
    for (int s = 0; s < 3; ++s) t.step(batch.view());
    const double loss = t.loss(batch.view());
    const LlamaModel model = to_llama_model(t.layout(), t.params().data());
    const fs::path dir = fresh_dir("export");
    export_hf_checkpoint(model, (dir / "hf").string());
    // FP32 files hold the very weights; the GGUF's q/k rows are permuted to adjacent pairing, which rotates
    // the same pairs: the loss agrees to FP32 rounding of the reordered sums.
    EXPECT_NEAR(loss_of(load_llama_model((dir / "hf").string()), batch), loss, 1e-6 * loss);
    const std::string gguf = (dir / "model.gguf").string();
    export_llama_gguf(model, gguf, GgufType::F32, nullptr);
    const LlamaModel back = load_llama_model(gguf);
    EXPECT_EQ(back.config.rope_pairing, RopePairing::adjacent);
    EXPECT_NEAR(loss_of(back, batch), loss, 1e-6 * loss);
    EXPECT_EQ(GgufFile::open(gguf).get_string("tokenizer.ggml.model"), "none");
    // F16 / BF16 round every matrix to 11 / 8 significant bits (relative 2^-12 / 2^-9 per weight, random in
    // sign): measured loss changes are ~1e-5 / ~1e-4 relative; bounds 1e-3 and 1e-2 catch a wrong layout (≫ 0.1).
    for (const auto& [type, tol] : {std::pair{GgufType::F16, 1e-3}, std::pair{GgufType::BF16, 1e-2}}) {
        export_llama_gguf(model, gguf, type, nullptr);
        const GgufFile f = GgufFile::open(gguf);
        EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, type);
        EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").type, GgufType::F32);
        EXPECT_EQ(f.get_int("general.file_type"), type == GgufType::F16 ? 1 : 32);
        EXPECT_NEAR(loss_of(load_llama_model(gguf), batch), loss, tol * loss);
    }
    expect_error_with([] { parse_export_dtype("q4_0"); }, ErrorKind::usage, {"q4_0", "bf16"});
}

TEST(TrainExport, GgufCarriesTheShardsTokenizer) {
    std::string gpt2;
    try {  // a checkout without the shared data next to it skips, as the other shared-data tests do
        gpt2 = (fs::path(shared_data_dir()) / "tokenizers" / "gpt2").string();
    } catch (const Error&) {
        GTEST_SKIP() << "shared data not found (set LOWBIT_SHARED_DATA to the shared/data folder)";
    }
    if (!fs::exists(fs::path(gpt2) / "encoder.json")) GTEST_SKIP() << "no GPT-2 tokenizer files in the shared data";
    TokenShardManifest m;
    m.vocab_size = 50257;
    m.tokenizer = "gpt2/gpt2/50257/0123456789abcdef";
    m.info = {{"tokenizer_source", gpt2}};
    std::string why;
    const std::optional<Tokenizer> tok = shard_set_tokenizer(m, "", why);
    ASSERT_TRUE(tok.has_value()) << why;
    LlamaConfig c = train_preset("tiny").model;
    c.vocab_size = int64_t(tok->vocab_size());
    const LlamaModel model{c, random_llama_weights(c, 3)};
    const std::string gguf = (fresh_dir("tokenizer").string() + ".gguf");
    export_llama_gguf(model, gguf, GgufType::F16, &*tok);
    const GgufFile f = GgufFile::open(gguf);
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");  // llama.cpp's name
    const Tokenizer back = Tokenizer::from_gguf(f);
    const std::string text = "The State of the Union is strong.\n";
    EXPECT_EQ(back.encode(text, false), tok->encode(text, false));
    EXPECT_EQ(back.eos_id(), tok->eos_id());
    fs::remove(gguf);

    m.tokenizer = "gpt2/gpt2/49152/0123456789abcdef";  // another vocabulary
    expect_error_with([&] { shard_set_tokenizer(m, "", why); }, ErrorKind::input, {"49152"});
    m.info = nlohmann::json::object();
    EXPECT_FALSE(shard_set_tokenizer(m, "", why).has_value());
    EXPECT_NE(why.find("--tokenizer"), std::string::npos);
}


// The census report sums each projection and slot over layers, and every slot and projection into "all".
TEST(MxCensusReport, SumsOverLayersProjectionsAndSlots) {
    std::vector<MxCensusEntry> entries;
    const auto entry = [&](int64_t layer, Projection p, Slot s, int64_t units, int64_t off, int64_t tiles, int64_t slow,
                           int64_t two) {
        MxCensusEntry e;
        e.layer = layer;
        e.projection = p;
        e.slot = s;
        e.tally = {1, units, off, tiles, slow, two};
        entries.push_back(e);
    };
    entry(0, Projection::q, Slot::fwd, 10, 3, 4, 1, 2);
    entry(1, Projection::q, Slot::fwd, 30, 1, 8, 1, 0);
    entry(0, Projection::down, Slot::wgrad, 60, 6, 20, 5, 3);
    entry(1, Projection::down, Slot::dgrad, 0, 0, 0, 0, 0);  // nothing on the tensor cores: null fractions
    const nlohmann::json r = mx_census_report(entries, 7);
    EXPECT_EQ(r.at("steps"), 7);
    const nlohmann::json& table = r.at("by_projection_and_slot");
    const auto cell = [&](const std::string& p, const std::string& s) {
        for (const nlohmann::json& j : table)
            if (j.at("projection") == p && j.at("slot") == s) return j;
        ADD_FAILURE() << "no cell " << p << "/" << s;
        return nlohmann::json();
    };
    EXPECT_EQ(cell("q", "fwd").at("units"), 40);
    EXPECT_EQ(cell("q", "fwd").at("off_window"), 4);
    EXPECT_DOUBLE_EQ(cell("q", "fwd").at("off_window_fraction").get<double>(), 0.1);
    EXPECT_EQ(cell("q", "all").at("slow_tile_chunks"), 2);
    EXPECT_TRUE(cell("down", "dgrad").at("off_window_fraction").is_null());
    EXPECT_EQ(cell("all", "wgrad").at("tile_chunks"), 20);
    EXPECT_EQ(cell("all", "all").at("calls"), 4);
    EXPECT_EQ(r.at("total").at("units"), 100);
    EXPECT_EQ(r.at("total").at("off_window"), 10);
    EXPECT_EQ(r.at("total").at("slow_tile_chunks"), 7);
    EXPECT_EQ(r.at("total").at("two_plane_tile_chunks"), 5);
    EXPECT_DOUBLE_EQ(cell("q", "fwd").at("two_plane_fraction").get<double>(), 2.0 / 12.0);
    EXPECT_EQ(r.at("by_layer").size(), 4u);
    EXPECT_EQ(table.size(), size_t(kProjectionCount + 1) * 4);

    char* text = nullptr;
    size_t size = 0;
    std::FILE* f = open_memstream(&text, &size);
    ASSERT_NE(f, nullptr);
    print_mx_census(r, f);
    std::fclose(f);
    const std::string printed(text, size);
    std::free(text);
    EXPECT_NE(printed.find("4/40 (10.0%)"), std::string::npos) << printed;  // q fwd units
    EXPECT_NE(printed.find("7/32 (21.9%)"), std::string::npos) << printed;  // all tiles
    EXPECT_NE(printed.find("5/32 (15.6%)"), std::string::npos) << printed;  // all tiles with two planes
    EXPECT_NE(printed.find("over 7 steps"), std::string::npos) << printed;
}

}  // namespace
}  // namespace lowbit
