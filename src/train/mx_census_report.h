// mx_census_report.h — the census of the MX tensor-core products of a training run (Trainer::mx_census: per block
// projection and slot, the INT8-stage GEMM's window units outside its window and the (output tile, chunk) pairs
// these sent to the slow per-block path) as JSON and as two printed projection × slot tables. `lowbit train --mx-census` and
// `bench_train --mx-census` report it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/trainer.h"

namespace lowbit {

// The census of `steps` steps: sums per projection and slot over layers (with "all" rows and columns), the
// total, and the per-layer entries. Fractions are null where nothing ran on the tensor cores.
nlohmann::json mx_census_report(const std::vector<MxCensusEntry>& entries, int64_t steps);

// Two tables of a report (projection × slot): units outside the window / all units, and (output tile, chunk)
// pairs on the per-block path / all pairs, "part/all (percent)" per cell, "-" where nothing ran.
void print_mx_census(const nlohmann::json& report, std::FILE* out);

}  // namespace lowbit
