// fuzz_configs.cpp — libFuzzer target of the JSON configurations lowbit reads from users' files: a Hugging Face
// config.json (model/config.h config_from_hf_json), a training config (train/train_model.h
// train_config_from_json), a token-shard set's manifest.json (io/token_shards.h parse_token_shard_manifest), and
// AdaHOP's strategy tables and plans (adahop/strategy_plan.h: `analyze model --table FILE`) and a checkpoint's
// recipe state with its calibration observations and plan (train/recipe.h RecipeState::from_json).
// Any byte string that is JSON must give a config or raise lowbit::Error with a message;
// any other exception (a JSON type error escaping, std::out_of_range, …) aborts, and so does a crash, a hang or a
// sanitizer report (ASan/UBSan under scripts/fuzz.sh).
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "adahop/strategy_plan.h"
#include "core/error.h"
#include "io/token_shards.h"
#include "model/config.h"
#include "train/recipe.h"
#include "train/train_model.h"

namespace {

template <typename F>
void expect_config_or_error(F&& f) {
    try {
        f();
    } catch (const lowbit::Error& e) {
        if (std::string(e.what()).empty()) std::abort();  // an error must say what is wrong
    } catch (...) {
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    expect_config_or_error([&] {
        const lowbit::TokenShardManifest m =
            lowbit::parse_token_shard_manifest(std::string(reinterpret_cast<const char*>(data), size), "fuzz/manifest.json");
        (void)lowbit::token_shard_manifest_json(m);
    });
    const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
    if (j.is_discarded()) return 0;
    expect_config_or_error([&] {
        const lowbit::LlamaConfig c = lowbit::config_from_hf_json(j, "fuzz/config.json");
        (void)lowbit::config_to_hf_json(c);
    });
    expect_config_or_error([&] {
        const lowbit::TrainConfig t = lowbit::train_config_from_json(j, "fuzz/train.json");
        (void)lowbit::train_config_to_json(t);
    });
    expect_config_or_error([&] {
        const lowbit::StrategyTable t = lowbit::strategy_table_from_json(j, "fuzz/table.json");
        (void)lowbit::strategy_table_to_json(t);
    });
    expect_config_or_error([&] {
        const lowbit::Plan plan = lowbit::plan_from_json(j, "fuzz/plan.json");
        (void)lowbit::plan_to_json(plan);
    });
    expect_config_or_error([&] {
        const lowbit::RecipeState s = lowbit::RecipeState::from_json(j, lowbit::tiny_llama_config(false, true), "fuzz/state.json");
        (void)s.to_json();
    });
    return 0;
}
