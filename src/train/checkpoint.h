// checkpoint.h — a training run's directory: what the run is (config.json) and the checkpoints a resume
// continues from. Every file is written atomically (temporary name, then rename: io/npy.h write_file_atomic),
// so a run killed at any moment leaves whole files.
//
//   DIR/config.json   {"format": "lowbit-train-run", "version": 1,
//                      "train_config": train_config_to_json(…), "recipe": {"precision", "calibration_steps",
//                      "detector": {tau, kappa}}, "data": {"path": shard directory, "checksum": 16 hex digits}}
//                     (the data checksum: FNV-1a 64 of the manifest's tokenizer, vocabulary, token width and
//                     every shard's file name, token count and checksum — not of its path, so a copy of the
//                     shards on another host is the same data)
//   DIR/checkpoints/step_NNNNNNNN.bin   the flat FP32 buffers after NNNNNNNN optimizer steps:
//        offset  size  field (little-endian)
//             0     8  magic "LBCKPT01"
//             8     4  version (1)
//            12     4  buffers (3: params, AdamW m, AdamW v, in this order)
//            16     8  floats per buffer (ParamLayout::total())
//            24     8  steps done
//            32     8  payload checksum: FNV-1a 64 of the payload bytes
//            40     8  header checksum: FNV-1a 64 of bytes 0..39
//            48        payload: buffers × floats float32 values; the file ends right after it
//   DIR/checkpoints/step_NNNNNNNN.json  {"format": "lowbit-train-checkpoint", "version": 1, "steps_done": N,
//        "file": "step_NNNNNNNN.bin", "floats": F, "payload_checksum": hex, "metrics_lines": L,
//        "recipe_state": RecipeState::to_json()}
// The .bin is written first, its sidecar last: a checkpoint is complete when its .json exists. The newest
// complete checkpoint is the one a resume loads; a truncated or corrupt one is Error(input) naming the
// file (never silently skipped). save_checkpoint keeps the newest `keep` checkpoints and removes older ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/token_shards.h"
#include "train/recipe.h"
#include "train/train_model.h"
#include "train/trainer.h"

namespace lowbit {

struct CheckpointFileHeader {
    char magic[8];
    uint32_t version;
    uint32_t buffers;
    uint64_t floats;
    int64_t steps_done;
    uint64_t payload_checksum;
    uint64_t header_checksum;
};
static_assert(sizeof(CheckpointFileHeader) == 48, "the checkpoint header is 48 bytes");

// FNV-1a 64 of what identifies a shard set's data (above).
uint64_t shard_set_checksum(const TokenShardManifest& m);

nlohmann::json run_config_json(const TrainConfig& config, const Recipe& recipe, const std::string& data_dir,
                               uint64_t data_checksum);
// Error(usage) naming the first key that differs between the run in `path` (its config.json) and this one,
// e.g. "/train_config/optimizer/lr: 0.001 in the run, 0.002 now" (the data path and grad_accum may differ).
void check_same_run(const nlohmann::json& saved, const nlohmann::json& now, const std::string& path);
// The recipe recorded in a config.json (Error(input) naming `path` when malformed).
Recipe run_recipe(const nlohmann::json& run_config, const LlamaConfig& model, const std::string& path);

struct Checkpoint {
    TrainerState state;
    int64_t metrics_lines = 0;  // lines of DIR/metrics.jsonl up to this checkpoint
};

// Writes DIR/checkpoints/step_N.{bin,json} (N = state.steps_done) and removes all but the newest `keep`.
// Returns the path of the sidecar.
std::string save_checkpoint(const std::string& run_dir, const Checkpoint& c, int keep = 2);
// The checkpoint whose sidecar is `json_path`, checked against `floats` per buffer (Error(input) otherwise).
Checkpoint load_checkpoint(const std::string& json_path, int64_t floats);
// The sidecar of the newest complete checkpoint of the run, if any.
std::optional<std::string> newest_checkpoint(const std::string& run_dir);

}  // namespace lowbit
