// grid.h — the grids post-training quantization rounds weights onto, and a quantized linear layer.
//
// A grid splits each row of a weight matrix [rows, cols] into groups of `group` consecutive columns; each
// (row, group) has one affine map over integer codes,
//     value(q) = scale · (level(q) − zero) + offset          (FP32, the format's own decoder arithmetic)
// with level(q) = q for the uniform grids and a fixed table for MXFP4/NVFP4 (E2M1, ggml's doubled values)
// and IQ4_NL. The maps are fitted per "fit span" (the group; 256 columns for the K-quants, whose
// sub-block scales are themselves quantized under one FP16 super-scale) by the spec's grid search:
//   int grids (turboboa.md §1): min–max, MMSE (Σ|Δ|^2.4) or Hessian-weighted (Δ·H_g·Δᵀ) over 100 shrink
//     factors × floor/ceil zeros (§1.3); scales rounded to FP16 (GPTQ checkpoints store FP16 scales);
//   GGUF formats: their own scale rule (ggml's reference, or with importance weights = diag H: what
//     llama-quantize --imatrix does), then, for `hessian`, the same shrink search on the FP16/E8M0/UE4M3
//     rounded scale where the format has a single scale per group.
// A solver then picks every code on the fitted grid (nearest level) and the exporter writes those codes:
// no weight is re-rounded at export (QuantizedWeight::gguf_bytes packs codes and scales as they are).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf_types.h"
#include "formats/kquants.h"

namespace lowbit {

enum class GridFormat : uint8_t { int_grid, q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, mxfp4, nvfp4 };
enum class GridSearch : uint8_t { minmax, mse, hessian };

struct GridSpec {
    GridFormat format = GridFormat::int_grid;
    int bits = 4;          // int grids: 2..8 (the others: fixed by the format)
    int64_t group = 0;     // int grids: 0 = one group per row (per channel); the others: fixed
    bool sym = false;      // int grids
    GridSearch search = GridSearch::hessian;

    std::string name() const;                 // "int4", "q4_k", "mxfp4"
    std::string describe() const;             // "int3 g128 asym", "q4_k"
    int64_t group_size(int64_t cols) const;   // columns per affine map
    int64_t fit_span(int64_t cols) const;     // columns fitted together (≥ group_size)
    int max_code() const;                     // largest code
    bool is_gguf() const { return format != GridFormat::int_grid; }
    GgufType gguf_type() const;               // the GGUF type of a GGUF grid
    double bits_per_weight(int64_t cols) const;
    // Error(usage) when a matrix with `cols` columns cannot use this grid (the block does not divide it).
    void check_cols(int64_t cols, const std::string& what) const;
};

// "int2".."int8", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "q2_k".."q6_k", "mxfp4", "nvfp4";
// Error(usage) listing them otherwise. `group` and `sym` apply to int grids (a GGUF name with a group
// other than 0 or its own block is refused).
GridSpec parse_grid(const std::string& name, int64_t group = 0, bool sym = false, GridSearch search = GridSearch::hessian);
GridSpec grid_of_gguf_type(GgufType t, GridSearch search = GridSearch::hessian);  // Error(usage) for non-weight types
const char* grid_search_name(GridSearch s);
bool parse_grid_search(const std::string& name, GridSearch* out);

struct GroupGrid {
    float scale = 0.0f, zero = 0.0f, offset = 0.0f;
};

// The level table of a grid (level(q) for q = 0..max_code): q itself for uniform grids.
const float* grid_levels(const GridSpec& g);  // nullptr for uniform grids
bool grid_has_offset(const GridSpec& g);      // value(q) has the + offset term

float grid_value(const GridSpec& g, const GroupGrid& p, uint32_t q);      // value(q)
uint32_t grid_nearest(const GridSpec& g, const GroupGrid& p, float w);    // the code whose value is nearest w

// The grids of one fit span of `rows` rows: columns [col0, col0 + n) of the row-major matrix w (leading
// dimension ldw). `h` is the n × n block of the input Hessian for those columns (leading dimension ldh;
// may be null for minmax/mse and for GGUF formats without a search). Output: grids[r·(n/group) + j] and,
// for K-quants, kscales[r] (the super-block's scale codes).
struct SpanGrids {
    std::vector<GroupGrid> grids;
    std::vector<KQuantScales> kscales;
};

// Scores the stacked candidate grids of one group of an int grid on an accelerator (ptq/solver.h's
// SolverDevice is one): for `rows` rows of w (n columns, leading dimension ldw) and k candidates per row,
// scores[r·k + c] = Δ·H_g·Δᵀ (summed in double), Δ = value(nearest(w_r)) − w_r on grid cand[r·k + c], H_g the
// n × n block h (leading dimension ldh). h_id ≠ 0 names h's contents for as long as they stay unchanged, so
// an implementation may keep the block it holds instead of copying it again (0: no such promise).
class GridScorer {
public:
    virtual ~GridScorer() = default;
    virtual void score_int_candidates(const GridSpec& g, const float* w, int64_t ldw, int64_t rows, int64_t n,
                                      const float* h, int64_t ldh, uint64_t h_id, const GroupGrid* cand, int64_t k,
                                      double* scores) const = 0;
};

// With a scorer, the Hessian-weighted search of int grids scores its candidates there (every group size);
// without, on the CPU, exactly (each candidate's Δ·H_g·Δᵀ in double, kept up to date from shrink to shrink: grid.cpp).
// The scorer's products round (CudaSolverDevice: three TF32 products of the splits, FP32 accumulation), so a near-tie
// between two candidates may go the other way there.
SpanGrids fit_span_grids(const GridSpec& g, const float* w, int64_t ldw, int64_t rows, int64_t n, const float* h,
                         int64_t ldh, const GridScorer* scorer = nullptr, uint64_t h_id = 0);

// Grids that differ from p only in the scale, as near `target` as the format's scale encoding allows:
// int grids and FP16 scales: the FP16 neighbours of target (int grid scales are FP16, as GPTQ stores them); E8M0 / UE4M3: the neighbouring codes;
// K-quants: sub-block `sub`'s scale codes next to target/d (the chosen code goes back into the
// KQuantScales with set_kquant_scale_code). Used by F3's scale refinement on constrained grids.
struct ScaleCandidate {
    GroupGrid grid;
    bool has_kquant_code = false;  // K-quants: the sub-scale code that gives grid.scale
    int kquant_code = 0;
};
std::vector<ScaleCandidate> scale_candidates(const GridSpec& g, const GroupGrid& p, const KQuantScales* ks, int sub,
                                             float target);
void set_kquant_scale_code(KQuantScales& ks, int sub, int code);

// One quantized linear layer: codes and the maps of every group, in the original column order.
struct QuantizedWeight {
    GridSpec spec;
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> codes;          // [rows, cols]
    std::vector<GroupGrid> grids;        // [rows, cols / group]
    std::vector<KQuantScales> kscales;   // K-quants: [rows, cols / 256]

    int64_t groups_per_row() const { return cols / spec.group_size(cols); }
    const GroupGrid& grid(int64_t r, int64_t c) const { return grids[size_t(r * groups_per_row() + c / spec.group_size(cols))]; }
    std::vector<float> dequantize() const;     // [rows, cols]
    // The ggml blocks of a GGUF grid, row by row: decoding them gives dequantize() bit for bit.
    std::vector<uint8_t> gguf_bytes() const;
};

// Round to nearest on the grid, each span fitted from w itself with the Hessian h (cols × cols, or null).
QuantizedWeight quantize_rtn(const GridSpec& g, const float* w, int64_t rows, int64_t cols, const float* h,
                             const GridScorer* scorer = nullptr);

}  // namespace lowbit
