// trainer.h — what a training run drives, on either device: one optimizer step on a batch, the loss of a
// batch without an update, and the state a checkpoint holds (the flat FP32 parameters and AdamW's two
// moments in ParamLayout's order, the number of updates taken, the AdaHOP calibration or plan). CpuTrainer
// (train/trainer_cpu.h) and the CUDA engine (train/cuda/trainer_cuda.cu, make_cuda_trainer) implement it;
// cmd_train, the checkpoints (train/checkpoint.h) and the tests use only this interface.
//
// Errors: a batch of the wrong shape is Error(usage); a non-finite loss or gradient is Error(runtime)
// naming the step and the first tensor with a NaN/Inf gradient, thrown before the update, so the
// parameters (and the last checkpoint written) stay those of the last good step.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adahop/lp_matmul.h"
#include "core/error.h"
#include "train/backward_cpu.h"
#include "train/operand_analysis.h"
#include "train/recipe.h"
#include "train/train_model.h"

namespace lowbit {

struct StepStats {
    int64_t step = 0;        // index of the step just taken (from 0)
    double loss = 0;         // mean cross entropy of the batch before the update
    double grad_norm = 0;    // before clipping
    float clip_scale = 1;
    double lr = 0;
};

// Everything a bit-exact resume needs besides the config and the data (which the checkpoint stores too).
struct TrainerState {
    std::vector<float> params, m, v;  // ParamLayout's order, layout.total() floats each
    int64_t steps_done = 0;           // AdamW updates taken (the next step's index)
    nlohmann::json recipe_state;      // the recipe's calibration observations or its fixed plan (RecipeState)
};

// What `lowbit train --probe-every` measures for one slot of one block projection on one batch: the relative
// Frobenius error of the slot's product against the BF16 product of the same operands (the CPU engine: FP32) —
// the operands the run itself produced — under the run's own mode and under each MXFP4 strategy of kProbeStrategies
// (default options: round to nearest, no random signs, OE k = 64).
inline constexpr std::array<Strategy, 4> kProbeStrategies = {Strategy::plain, Strategy::iht, Strategy::iht_oe_left,
                                                             Strategy::iht_oe_right};
struct SlotError {
    int64_t layer = 0;
    Projection projection = Projection::q;
    Slot slot = Slot::fwd;
    Strategy active = Strategy::full;  // the run's strategy for this slot (its seeds too, for mxfp4-rht-sr)
    double active_error = 0;           // 0 for BF16 slots
    std::array<double, kProbeStrategies.size()> error{};
};

// What the census of the MX tensor-core products (Recipe::mx_tensor_cores; LpMatmulCuda::set_mx_census) holds for
// one slot of one block projection, over its products on the tensor cores since the census was switched on: their
// INT8 window units ((operand, 128-line tile, 256-deep chunk) triples) and (output tile, chunk) pairs, and of those
// the units outside the window and the pairs these sent to the GEMM's slow per-block path.
struct MxCensusEntry {
    int64_t layer = 0;
    Projection projection = Projection::q;
    Slot slot = Slot::fwd;
    MxCensusTally tally;
};

// Sequences [first, first + count) of `batch`.
inline TokenBatch batch_rows(const TokenBatch& batch, int64_t first, int64_t count) {
    const int64_t offset = first * batch.shape.n_tok;
    return {batch.inputs + offset, batch.targets ? batch.targets + offset : nullptr, {count, batch.shape.n_tok}};
}

// The mean loss of `batch` from part_loss(part), the mean loss of each run of at most `part_seqs` of its sequences
// (a batch that fits in one part: its loss as is, bit for bit).
template <typename PartLoss>
double mean_loss_by_parts(const TokenBatch& batch, int64_t part_seqs, PartLoss&& part_loss) {
    const int64_t n = batch.shape.n_seq;
    if (n <= part_seqs) return part_loss(batch);
    double sum = 0;
    for (int64_t first = 0; first < n; first += part_seqs) {
        const int64_t count = std::min(part_seqs, n - first);
        sum += double(count) * part_loss(batch_rows(batch, first, count));
    }
    return sum / double(n);
}

class Trainer {
public:
    virtual ~Trainer() = default;
    // One optimizer step on a batch of the config's batch_size × seq_len tokens, as grad_accum micro-batches
    // (train_model.h) whose gradients are summed, each scaled so the sum is the gradient of the batch's mean loss.
    // mxfp4-rht-sr draws fresh stochastic-rounding bits for every micro-batch (its counter: step · grad_accum +
    // micro-batch), so with grad_accum 1 a step draws what it always did.
    virtual StepStats step(const TokenBatch& batch) = 0;
    // The mean loss of any number of sequences of seq_len tokens, a micro-batch at a time.
    virtual double loss(const TokenBatch& batch) = 0;
    virtual const TrainConfig& config() const = 0;
    virtual const ParamLayout& layout() const = 0;
    virtual int64_t steps_done() const = 0;
    // Host copies of the state, and the state put back (Error(input) when a buffer's size does not fit the
    // layout); after set_state the next step is bit-identical to the one a run that never stopped takes.
    virtual TrainerState state() const = 0;
    virtual void set_state(const TrainerState& s) = 0;
    // Host copy of the last step's gradients (before clipping), ParamLayout's order: diagnostics and tests.
    virtual std::vector<float> gradients() const = 0;
    // The recipe's per-layer strategy map so far (empty plan while calibrating or without AdaHOP).
    virtual const RecipeState& recipe() const = 0;
    // Bytes of the linear-layer operands the last step saved for its backward, and what BF16 copies of the
    // same operands would take (their ratio is the saved-activation memory gain of the recipe).
    virtual int64_t saved_operand_bytes() const = 0;
    virtual int64_t saved_operand_bytes_bf16() const = 0;
    // Per-phase device time of the steps since profiling was switched on (seconds by phase name, e.g.
    // "attention backward"; CUDA events at phase boundaries, so the phases add up to the steps' device time).
    // The CPU trainer does not profile (empty map).
    virtual void set_profiling(bool on) { (void)on; }
    virtual std::map<std::string, double> phase_seconds() const { return {}; }
    // The slot errors of every block projection (layer-major, then projection, then fwd/dgrad/wgrad) on one
    // forward and backward of the first micro-batch of `batch` (a step's shape), without an update: the state, the next step, the AdaHOP calibration and
    // the reported saved-operand bytes and peak memory stay as they were. CUDA engine only (Error(usage) here).
    // On the CPU the reference is the FP32 product (the CPU engine's BF16 is FP32), and the run's own error is that of
    // its linear's product; on the CUDA engine the BF16-operand product.
    virtual std::vector<SlotError> probe_slot_errors(const TokenBatch& batch) = 0;
    // While set, each probe also hands every block projection's weight-gradient error under each kProbeStrategies
    // strategy, with the reference product, to `observe` (host arrays; ProductObservation::strategy indexes
    // kProbeStrategies): ErrorConsistency (operand_analysis.h) tells from them whether the error is the same from
    // probe to probe. Empty: off.
    virtual void set_probe_observer(ProductObserver observe) = 0;
    // The MX tensor-core census: on (tallies zeroed) or off; CUDA engine with Recipe::mx_tensor_cores only
    // (Error(usage) otherwise). mx_census() returns one entry per block projection and slot (layer-major, then
    // projection, then fwd/dgrad/wgrad), empty while off; it waits for the device. The products of step() and
    // loss() count, a probe's do not.
    virtual void set_mx_census(bool on) {
        if (on) throw Error(ErrorKind::usage, "the MX tensor-core census runs on the CUDA training engine only (--device cuda)");
    }
    virtual std::vector<MxCensusEntry> mx_census() const { return {}; }
    // Peak device memory of the run so far (0 on the CPU).
    virtual int64_t peak_device_bytes() const = 0;
    // One line: device and linears, e.g. "cuda (NVIDIA H200 …), bf16 activations, recipe adahop-lv1".
    virtual std::string describe() const = 0;
};

#if defined(LOWBIT_HAVE_CUDA)
// The CUDA engine (train/cuda/trainer_cuda.cu): FP32 master weights and AdamW state, BF16 activations.
std::unique_ptr<Trainer> make_cuda_trainer(const TrainConfig& config, const Recipe& recipe);
#endif

}  // namespace lowbit
