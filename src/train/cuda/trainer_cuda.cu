// trainer_cuda.cu — the CUDA training engine (make_cuda_trainer, train/trainer.h), llm.c style: explicit
// forward and backward kernels (train/cuda/train_ops_cuda.cuh, flash_attention_cuda.cuh) and the GEMM seam
// (train_linear_cuda.cuh), the same math as the CPU reference (train/backward_cpu.h) with
//   FP32     master weights, gradients, AdamW moments (flat buffers in ParamLayout's order), the residual
//            stream x / h of every block, the input gradients that are sums (norm inputs, residual), logits
//   BF16     the GEMMs' weight copies (written by the AdamW kernel), norm outputs, q/k/v (after RoPE), the
//            attention output, gate/up/SwiGLU, the gradients that are GEMM operands (dY of every projection)
// The precision recipe (train/recipe.h) picks each projection slot's strategy per step: BF16 (cuBLAS) or
// AdaHOP's lp_matmul (emulated MXFP4 on the GPU); while AdaHOP calibrates, the GPU detector labels every
// projection's X, W and dY. The LM head, attention, norms, SwiGLU, loss and optimizer never leave BF16/FP32.
//
// Saved operands (adahop.md §6): where a slot's strategy quantizes (plain, IHT, IHT+OE-right) the forward
// prepares the backward's operand right away — X of q/k/v, gate/up and down quantized along the tokens for
// wgrad, W along its output rows for dgrad — and the block keeps those codes, scales and BF16 slices instead
// of the BF16 input, which then lives in a scratch buffer shared by all blocks. (The attention output, Wo's
// input, stays BF16: the attention backward needs it anyway. OE-left and BF16 slots keep BF16, as §6 says.)
// saved_operand_bytes() counts the bytes kept from forward to backward as linear-layer inputs (prepared X
// and the BF16 inputs kept), saved_operand_bytes_bf16() the same inputs kept in BF16; the prepared W
// copies are weights, not activations, and are not in either figure.
// Gradient accumulation (grad_accum G > 1): a step runs G forwards and backwards of batch_size / G sequences; the
// loss gradient of each is scaled by 1/(the step's rows), the first backward zeroes the gradient buffer and the
// later ones add to it (the weight-gradient GEMMs with beta 1; norm, embedding and LM-head gradients add anyway),
// so the buffer ends as the gradient of the step's mean loss without a second buffer or pass.
// q, k and v share their input: where all three run in BF16 (and no detector or probe watches them one by one) they
// are one GEMM each way — forward N = q_dim + 2·kv_dim, dgrad K = q_dim + 2·kv_dim (no FP32 accumulation of three
// input gradients), wgrad into their adjacent gradients — and RoPE (or its inverse) moves q and k between those
// rows and attention's tensors (fused_qkv). Their k/v GEMMs alone have N = kv_dim (256 in `base`), too narrow for
// the tensor cores' tiles. The residual stream's copies ride on the norms' forward (rms_norm_forward_cuda x_copy).
// Determinism: every kernel reduces in a fixed order and cuBLAS is reproducible, so a step is a function of
// the state and the batch — the basis of bit-exact resume.
// probe_slot_errors (`--probe-every`) runs one more forward and backward with probe_ set: every projection slot
// is also computed in BF16 and under each MXFP4 strategy (slot_relative_errors), with all inputs kept in BF16
// and no detector labels recorded; the state, the saved-operand figures and the peak stay as they were.
// set_mx_census (bench_train --mx-census): every projection slot is one site of LpMatmulCuda's census of the
// tensor-core products' window, set before each of its GEMMs; a probe's products count nowhere.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "adahop/cuda/outlier_stats.cuh"
#include "core/cuda_device.h"
#include "core/cuda_phase_clock.h"
#include "model/cuda/model_ops_cuda.cuh"
#include "model/cuda/flash_attention_cuda.cuh"
#include "train/cuda/train_linear_cuda.cuh"
#include "train/cuda/train_ops_cuda.cuh"
#include "train/optimizer.h"
#include "train/train_linear.h"
#include "train/trainer.h"

namespace lowbit {

namespace {

using bf16 = __nv_bfloat16;

// Saved activations of one block ([rows, width] row-major).
struct BlockState {
    DeviceBuffer<float> x, h;                  // FP32 residual stream: block input, after attention
    DeviceBuffer<float> attn_rms, ffn_rms;     // per-row 1/rms of the two norms
    DeviceBuffer<bf16> q, k, v, ctx;           // q/k after RoPE, v, attention output (Wo's input)
    DeviceBuffer<float> lse;                   // [n_seq, n_heads, n_tok]
    DeviceBuffer<bf16> gate, up;               // the FFN projections (SwiGLU's backward reads them)
    // The three inputs that may be kept quantized: norm outputs (q/k/v's and gate/up's input) and
    // silu(gate)·up (down's input). Kept here in BF16 only while a consumer's wgrad needs BF16; else the
    // forward writes them into the trainer's shared scratch and `saved_x` holds the prepared copies.
    DeviceBuffer<bf16> attn_in_kept, ffn_in_kept, act_kept;
    const bf16 *attn_in = nullptr, *ffn_in = nullptr, *act = nullptr;  // where they are this step (null: not kept)
    std::array<PreparedOperandCuda, kProjectionCount> saved_x, saved_w;  // wgrad's X, dgrad's W (when prepared)
    std::array<int, kProjectionCount> saved_x_from{};  // the projection whose saved_x this one shares, or itself
    std::array<bool, kProjectionCount> has_saved_x{}, has_saved_w{};
};

// Whether a strategy's backward operand is kept quantized from the forward (adahop.md §6).
bool keeps_prepared(Strategy s) { return s == Strategy::plain || s == Strategy::iht || s == Strategy::iht_oe_right; }

// The MX census's sites: one per block projection and slot, layer-major, then projection, then fwd/dgrad/wgrad.
constexpr int kSlotsPerProjection = 3;
int census_site(int64_t layer, Projection p, Slot s) {
    return int((layer * kProjectionCount + int64_t(p)) * kSlotsPerProjection + int64_t(s));
}

std::string step_prefix(int64_t step) { return "step " + std::to_string(step) + ": "; }

class CudaTrainer final : public Trainer {
public:
    CudaTrainer(const TrainConfig& config, const Recipe& recipe);
    ~CudaTrainer() override { cudaStreamDestroy(stream_); }

    StepStats step(const TokenBatch& batch) override;
    double loss(const TokenBatch& batch) override;
    std::vector<SlotError> probe_slot_errors(const TokenBatch& batch) override;
    void set_probe_observer(ProductObserver observe) override { probe_observer_ = std::move(observe); }
    const TrainConfig& config() const override { return config_; }
    const ParamLayout& layout() const override { return layout_; }
    int64_t steps_done() const override { return t_; }
    TrainerState state() const override;
    void set_state(const TrainerState& s) override;
    std::vector<float> gradients() const override {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        std::vector<float> g(size_t(layout_.total()));
        grads_.download(g.data(), g.size());
        return g;
    }
    const RecipeState& recipe() const override { return recipe_; }
    int64_t saved_operand_bytes() const override { return saved_bytes_; }
    int64_t saved_operand_bytes_bf16() const override { return saved_bytes_bf16_; }
    int64_t peak_device_bytes() const override { return peak_bytes_; }
    void set_profiling(bool on) override { clock_.enable(on); }
    void set_mx_census(bool on) override;
    std::vector<MxCensusEntry> mx_census() const override;
    std::map<std::string, double> phase_seconds() const override { return clock_.totals(); }
    std::string describe() const override;

private:
    const LlamaConfig& mc() const { return config_.model; }
    const bf16* weight_bf16(const float* master) const { return params_bf16_.data() + (master - params_.data()); }
    float* grad_of(const float* master) { return grads_.data() + (master - params_.data()); }

    void upload_batch(const TokenBatch& batch, bool with_targets);
    double forward(const TokenBatch& batch, bool for_backward);
    // accumulate: add to the gradient buffer (a step's later micro-batches) instead of overwriting it.
    void backward(bool accumulate = false);
    TrainGemmMode mode(int64_t layer, Projection p, Slot s) const;
    void detect(int64_t layer, Projection p, Operand which, const bf16* m, int64_t rows, int64_t cols);
    bf16* input_buffer(DeviceBuffer<bf16>& kept, DeviceBuffer<bf16>& scratch, bool keep, size_t n, const bf16*& where);
    bool wgrad_keeps_prepared(int64_t layer, Projection p) const;
    bool fused_qkv(int64_t layer, std::initializer_list<Slot> slots) const;
    void track_memory();
    void probe(int64_t layer, Projection p, Slot s, const bf16* a, const bf16* b, int64_t m, int64_t k, int64_t n);
    // Where the following MX tensor-core products count while the census is on: `site`, or nowhere in a probe's
    // forward and backward (its products are not the run's).
    void count_census_at(int site) {
        if (mx_census_on_) gemm_->set_mx_census_site(probe_ ? -1 : site);
    }

    TrainConfig config_;
    ParamLayout layout_;
    RecipeState recipe_;
    cudaStream_t stream_ = nullptr;
    std::unique_ptr<CudaTrainGemm> gemm_;
    ModelTensors<float> master_;  // views into params_

    DeviceBuffer<float> params_, grads_, m_, v_;
    DeviceBuffer<bf16> params_bf16_;
    DeviceBuffer<uint8_t> decay_mask_;
    int64_t t_ = 0;
    int64_t micro_ = 0;  // the micro-batch of step t_ being run (mxfp4-rht-sr's rounding counter)

    BatchShape shape_;
    DeviceBuffer<int32_t> inputs_, targets_;
    DeviceBuffer<float> rope_cos_, rope_sin_;
    std::vector<BlockState> blocks_;
    DeviceBuffer<float> final_x_, final_rms_, logits_, loss_rows_;
    DeviceBuffer<bf16> final_xn_, dlogits_;
    DeviceBuffer<double> scalar_;
    SumWorkspace sum_ws_;
    DeviceBuffer<bf16> attn_in_scratch_, ffn_in_scratch_, act_scratch_;  // inputs not kept in BF16
    EmbeddingBackwardPlan embed_plan_;
    DeviceBuffer<int32_t> embed_ids_, embed_offsets_, embed_rows_;

    // backward scratch
    DeviceBuffer<float> d_res_, d_norm_in_;
    DeviceBuffer<bf16> d_res_bf16_, d_wide_a_, d_wide_b_, d_wide_c_, dq_, dk_, dv_;
    // q/k/v as one GEMM's rows [R, q_dim + 2·kv_dim] where all three run in BF16 (fused_qkv): the forward's
    // output before RoPE moves q and k into attention's tensors, the backward's dY before dgrad and wgrad
    DeviceBuffer<bf16> qkv_;
    RmsNormBackwardWorkspace norm_ws_;
    FlashAttentionBackwardWorkspace attn_ws_;
    OutlierStatsWorkspace detector_ws_;

    int64_t saved_bytes_ = 0, saved_bytes_bf16_ = 0, peak_bytes_ = 0;
    // probe_slot_errors: where this forward/backward records (null outside a probe) and its scratch.
    std::vector<SlotError>* probe_ = nullptr;
    SlotProbeScratch probe_scratch_;
    ProductObserver probe_observer_;
    std::vector<float> probe_host_error_, probe_host_ref_;  // the observer's host copies
    bool mx_census_on_ = false;
    PhaseClock clock_;
    void mark(const char* phase) { clock_.mark(stream_, phase); }
};

CudaTrainer::CudaTrainer(const TrainConfig& config, const Recipe& recipe) : config_(config), layout_(config.model) {
    validate_train_config(config_, "training config");
    recipe_ = RecipeState(recipe, mc());
    if (!flash_attention_head_dim_supported(mc().head_dim))
        cuda_usage_error("the CUDA training engine supports head_dim 16, 32, 64 or 128, not " + std::to_string(mc().head_dim));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<CudaTrainGemm>(stream_);
    gemm_->set_tensor_core_mx(recipe.mx_tensor_cores,
                              recipe.mx_column_bases ? MxGemmFold::int8_stages_columns : MxGemmFold::int8_stages);
    const int64_t n = layout_.total();
    params_.resize(size_t(n));
    grads_.resize(size_t(n));
    m_.resize(size_t(n));
    v_.resize(size_t(n));
    params_bf16_.resize(size_t(n));
    master_ = layout_.views(params_.data());
    std::vector<uint8_t> mask(size_t(n), 0);
    for (const ParamTensor& t : layout_.tensors())
        if (t.weight_decay()) std::memset(mask.data() + t.offset, 1, size_t(t.size()));
    decay_mask_.resize(mask.size());
    decay_mask_.upload(mask.data(), mask.size());
    TrainerState s;
    s.params = init_params(layout_, config_.seed, config_.init_std);
    s.m.assign(size_t(n), 0.0f);
    s.v.assign(size_t(n), 0.0f);
    s.recipe_state = recipe_.to_json();
    set_state(s);
    scalar_.resize(1);
    track_memory();
}

TrainerState CudaTrainer::state() const {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    TrainerState s;
    const size_t n = size_t(layout_.total());
    s.params.resize(n);
    s.m.resize(n);
    s.v.resize(n);
    params_.download(s.params.data(), n);
    m_.download(s.m.data(), n);
    v_.download(s.v.data(), n);
    s.steps_done = t_;
    s.recipe_state = recipe_.to_json();
    return s;
}

void CudaTrainer::set_state(const TrainerState& s) {
    const size_t n = size_t(layout_.total());
    if (s.params.size() != n || s.m.size() != n || s.v.size() != n)
        cuda_input_error("training state: the parameter and moment buffers must hold " + std::to_string(n) +
                         " values each (the layout of this config), got " + std::to_string(s.params.size()) + ", " +
                         std::to_string(s.m.size()) + ", " + std::to_string(s.v.size()));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    params_.upload(s.params.data(), n);
    m_.upload(s.m.data(), n);
    v_.upload(s.v.data(), n);
    cast_to_bf16_cuda(params_.data(), int64_t(n), params_bf16_.data(), stream_);
    t_ = s.steps_done;
    if (!s.recipe_state.is_null()) recipe_ = RecipeState::from_json(s.recipe_state, mc(), "training state", recipe_.recipe());
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaTrainer::set_mx_census(bool on) {
    if (on && !recipe_.recipe().mx_tensor_cores)
        cuda_usage_error("the MX census counts the tensor-core products: it needs a recipe with mx_tensor_cores on "
                         "(bench_train: --precision P:tensor-cores)");
    gemm_->set_mx_census(on ? int(mc().n_layers) * kProjectionCount * kSlotsPerProjection : 0);
    mx_census_on_ = on;
}

std::vector<MxCensusEntry> CudaTrainer::mx_census() const {
    const std::vector<MxCensusTally> tallies = gemm_->mx_census();
    std::vector<MxCensusEntry> entries(tallies.size());
    for (size_t i = 0; i < tallies.size(); ++i) {
        entries[i].layer = int64_t(i) / (kProjectionCount * kSlotsPerProjection);
        entries[i].projection = kProjections[i / kSlotsPerProjection % kProjectionCount];
        entries[i].slot = Slot(i % kSlotsPerProjection);
        entries[i].tally = tallies[i];
    }
    return entries;
}

std::string CudaTrainer::describe() const {
    return "cuda (" + cuda_device_description() + "), BF16 activations, FP32 master weights, recipe " +
           recipe_description(recipe_.recipe()) +
           (recipe_.recipe().mx_tensor_cores ? ", MXFP4 products on the INT8 tensor cores" : "");
}

// Device memory in use (cudaMemGetInfo: this process's allocations, cuBLAS's workspaces and the CUDA context),
// sampled after the forward and after the backward of every step: the peak of those samples.
void CudaTrainer::track_memory() {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    peak_bytes_ = std::max<int64_t>(peak_bytes_, int64_t(total_b - free_b));
}

void CudaTrainer::upload_batch(const TokenBatch& batch, bool with_targets) {
    const int64_t rows = batch.shape.rows();
    const int64_t vocab = mc().vocab_size;
    for (int64_t r = 0; r < rows; ++r) {
        const int32_t a = batch.inputs[r], b = with_targets ? batch.targets[r] : 0;
        if (a < 0 || a >= vocab || b < 0 || b >= vocab)
            cuda_input_error("training batch: row " + std::to_string(r) + " holds token " +
                             std::to_string(a < 0 || a >= vocab ? a : b) + ", outside the vocabulary of " +
                             std::to_string(vocab));
    }
    inputs_.assign_async(batch.inputs, size_t(rows), stream_);
    if (with_targets) targets_.assign_async(batch.targets, size_t(rows), stream_);
    if (batch.shape.n_tok != shape_.n_tok || batch.shape.n_seq != shape_.n_seq) {
        std::vector<float> c, s;
        rope_tables(mc(), batch.shape.n_tok, c, s);
        rope_cos_.assign_async(c.data(), c.size(), stream_);
        rope_sin_.assign_async(s.data(), s.size(), stream_);
        CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host vectors die here
        shape_ = batch.shape;
        const size_t R = size_t(rows), d = size_t(mc().hidden_size), qd = size_t(mc().q_dim()),
                     kvd = size_t(mc().kv_dim()), f = size_t(mc().ffn_size);
        blocks_.resize(size_t(mc().n_layers));
        for (BlockState& b : blocks_) {
            b.x.resize(R * d);
            b.h.resize(R * d);
            b.attn_rms.resize(R);
            b.ffn_rms.resize(R);
            b.q.resize(R * qd);
            b.k.resize(R * kvd);
            b.v.resize(R * kvd);
            b.ctx.resize(R * qd);
            b.lse.resize(R * size_t(mc().n_heads));
            b.gate.resize(R * f);
            b.up.resize(R * f);
            b.attn_in_kept.release();
            b.ffn_in_kept.release();
            b.act_kept.release();
        }
        attn_in_scratch_.release();
        ffn_in_scratch_.release();
        act_scratch_.release();
        final_x_.resize(R * d);
        final_rms_.resize(R);
        final_xn_.resize(R * d);
        logits_.resize(R * size_t(mc().vocab_size));
        loss_rows_.resize(R);
        d_res_.resize(R * d);
        d_norm_in_.resize(R * d);
        d_res_bf16_.resize(R * d);
        const size_t wide = std::max(f, qd);
        d_wide_a_.resize(R * wide);
        d_wide_b_.resize(R * wide);
        d_wide_c_.resize(R * wide);
        dq_.resize(R * qd);
        dk_.resize(R * kvd);
        dv_.resize(R * kvd);
    }
}

TrainGemmMode CudaTrainer::mode(int64_t layer, Projection p, Slot s) const {
    TrainGemmMode m{recipe_.strategy(layer, p, s), recipe_.recipe().lp_options()};
    // mxfp4-rht-sr's gradient slots: the CPU seam's seeds (random signs fixed per run and slot, fresh
    // stochastic-rounding bits every step, layer, projection and slot), so both devices draw the same bits.
    if (recipe_.randomized(s))
        m.lp = rht_sr_slot_options(m.lp, RhtSrSeeds{config_.seed, layer, p}, s, t_ * config_.grad_accum + micro_);
    return m;
}

void CudaTrainer::detect(int64_t layer, Projection p, Operand which, const bf16* m, int64_t rows, int64_t cols) {
    const PatternStats st = detect_outlier_pattern_cuda(m, rows, cols, recipe_.recipe().detector, detector_ws_, stream_);
    recipe_.record(layer, p, which, st.pattern);
}

// Where one of the three quantizable inputs lives this step: the block's own BF16 buffer when a consumer's
// backward needs BF16, else the shared scratch (the block keeps prepared copies instead).
bf16* CudaTrainer::input_buffer(DeviceBuffer<bf16>& kept, DeviceBuffer<bf16>& scratch, bool keep, size_t n, const bf16*& where) {
    if (keep) {
        where = kept.grow(n);
        return kept.data();
    }
    kept.release();
    where = nullptr;
    return scratch.grow(n);
}

// Whether q, k and v run as one GEMM in these slots of `layer`: all three in BF16 there, no detector or probe
// watching them one by one (they read each projection's own operands), and their weights (and gradients, the same
// layout) adjacent rows of one [q_dim + 2·kv_dim, hidden] matrix, which ParamLayout's order gives.
bool CudaTrainer::fused_qkv(int64_t layer, std::initializer_list<Slot> slots) const {
    if (probe_ != nullptr || recipe_.calibrating()) return false;
    for (Slot s : slots)
        for (Projection p : {Projection::q, Projection::k, Projection::v})
            if (recipe_.strategy(layer, p, s) != Strategy::full) return false;
    const BlockTensors<float>& w = master_.blocks[size_t(layer)];
    const int64_t d = mc().hidden_size;
    return w[Projection::k] == w[Projection::q] + mc().q_dim() * d && w[Projection::v] == w[Projection::k] + mc().kv_dim() * d;
}

bool CudaTrainer::wgrad_keeps_prepared(int64_t layer, Projection p) const {
    return recipe_.recipe().save_quantized_operands && probe_ == nullptr &&
           keeps_prepared(recipe_.strategy(layer, p, Slot::wgrad));
}

void CudaTrainer::probe(int64_t layer, Projection p, Slot s, const bf16* a, const bf16* b, int64_t m, int64_t k,
                        int64_t n) {
    SlotError e;
    e.layer = layer;
    e.projection = p;
    e.slot = s;
    const TrainGemmMode active = mode(layer, p, s);
    e.active = active.strategy;
    std::vector<TrainGemmMode> modes = {active};
    for (Strategy c : kProbeStrategies) modes.push_back(TrainGemmMode{c, recipe_.recipe().lp_options()});
    SlotErrorSink sink;
    if (s == Slot::wgrad && probe_observer_)  // dW [N, K]; modes[0] is the run's own, the candidates follow
        sink = [this, layer, p, n, k](size_t mode, const float* error, const float* ref, int64_t size) {
            if (mode == 0) return;
            probe_host_error_.resize(size_t(size));
            probe_host_ref_.resize(size_t(size));
            CUDA_CHECK(cudaMemcpy(probe_host_error_.data(), error, size_t(size) * sizeof(float), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(probe_host_ref_.data(), ref, size_t(size) * sizeof(float), cudaMemcpyDeviceToHost));
            ProductObservation o{layer, p, Slot::wgrad, mode - 1, nullptr, probe_host_ref_.data(), n, k};
            o.error = probe_host_error_.data();
            probe_observer_(o);
        };
    const std::vector<double> err = slot_relative_errors(*gemm_, s, modes, a, b, m, k, n, probe_scratch_, stream_, sink);
    e.active_error = err[0];
    std::copy(err.begin() + 1, err.end(), e.error.begin());
    probe_->push_back(e);
}

double CudaTrainer::forward(const TokenBatch& batch, bool for_backward) {
    const LlamaConfig& c = mc();
    const int64_t R = batch.shape.rows(), d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    // A probe keeps every input in BF16 (its candidate modes need them) and records no detector labels.
    const bool calibrating = for_backward && recipe_.calibrating() && probe_ == nullptr;
    const bool save = recipe_.recipe().save_quantized_operands && probe_ == nullptr;
    if (for_backward) saved_bytes_ = saved_bytes_bf16_ = 0;
    embed_rows_cuda(master_.token_embd, inputs_.data(), R, d, blocks_[0].x.data(), stream_);
    mark("embedding");
    for (int64_t l = 0; l < c.n_layers; ++l) {
        BlockState& b = blocks_[size_t(l)];
        const BlockTensors<float>& w = master_.blocks[size_t(l)];
        float* x_next = l + 1 < c.n_layers ? blocks_[size_t(l + 1)].x.data() : final_x_.data();
        const auto keep_bf16 = [&](std::initializer_list<Projection> readers) {
            if (!for_backward) return false;
            for (Projection p : readers)
                if (!wgrad_keeps_prepared(l, p)) return true;
            return false;
        };
        // The backward's operands of projection p (input x [R, k], output width n), prepared now where its slots
        // quantize them (X shared by the projections of one input whose wgrad modes are equal).
        const auto prepare_backward = [&](Projection p, const bf16* x, int64_t k, int64_t n,
                                          std::initializer_list<Projection> group) {
            const bf16* wp = weight_bf16(w[p]);
            const size_t ip = size_t(p);
            b.has_saved_x[ip] = b.has_saved_w[ip] = false;
            if (!for_backward || !save) return;
            const TrainGemmMode dg = mode(l, p, Slot::dgrad), wg = mode(l, p, Slot::wgrad);
            if (keeps_prepared(dg.strategy)) {
                gemm_->prepare_saved(dg, wp, n, k, b.saved_w[ip]);
                mark("saved-operand quantize");
                b.has_saved_w[ip] = true;
            }
            if (!keeps_prepared(wg.strategy) || group.size() == 0) return;
            for (Projection q : group) {  // an earlier reader of the same input with the same wgrad mode
                if (q == p) break;
                const TrainGemmMode o = mode(l, q, Slot::wgrad);
                if (b.has_saved_x[size_t(q)] && b.saved_x_from[size_t(q)] == int(q) && o.strategy == wg.strategy &&
                    o.lp.seed_b == wg.lp.seed_b && o.lp.rounding_b == wg.lp.rounding_b &&
                    o.lp.random_signs_seed == wg.lp.random_signs_seed) {
                    b.has_saved_x[ip] = true;
                    b.saved_x_from[ip] = int(q);
                    return;
                }
            }
            gemm_->prepare_saved(wg, x, R, k, b.saved_x[ip]);
            mark("saved-operand quantize");
            b.has_saved_x[ip] = true;
            b.saved_x_from[ip] = int(p);
            saved_bytes_ += prepared_device_bytes(b.saved_x[ip]);  // (for_backward only: returned above otherwise)
        };
        // One projection's forward, then its backward's operands.
        const auto linear = [&](Projection p, const bf16* x, int64_t k, int64_t n, TrainGemmOut y,
                                std::initializer_list<Projection> group) {
            const bf16* wp = weight_bf16(w[p]);
            if (calibrating) {
                detect(l, p, Operand::x, x, R, k);
                detect(l, p, Operand::w, wp, n, k);
                mark("adahop detector");
            }
            count_census_at(census_site(l, p, Slot::fwd));
            gemm_->forward(mode(l, p, Slot::fwd), x, wp, R, k, n, y);
            mark("linear forward");
            if (probe_) probe(l, p, Slot::fwd, x, wp, R, k, n);
            prepare_backward(p, x, k, n, group);
        };
        const bool keep_attn_in = keep_bf16({Projection::q, Projection::k, Projection::v});
        bf16* attn_in = input_buffer(b.attn_in_kept, attn_in_scratch_, keep_attn_in, size_t(R * d), b.attn_in);
        rms_norm_forward_cuda(b.x.data(), w.attn_norm, R, d, c.rms_eps, attn_in, b.attn_rms.data(), stream_, b.h.data());
        mark("rmsnorm");
        const std::initializer_list<Projection> qkv = {Projection::q, Projection::k, Projection::v};
        if (fused_qkv(l, {Slot::fwd})) {  // one GEMM (N = q_dim + 2·kv_dim); RoPE moves q and k out of its rows
            const int64_t width = qd + 2 * kvd;
            bf16* y = qkv_.grow(size_t(R * width));
            gemm_->forward(TrainGemmMode{}, attn_in, weight_bf16(w[Projection::q]), R, d, width, {nullptr, y});
            mark("linear forward");
            for (Projection p : qkv) prepare_backward(p, attn_in, d, p == Projection::q ? qd : kvd, qkv);
            rope_bf16_strided_cuda(y, width, b.q.data(), qd, batch.shape, c.n_heads, c.head_dim, c.rope_pairing,
                                   rope_cos_.data(), rope_sin_.data(), false, stream_);
            rope_bf16_strided_cuda(y + qd, width, b.k.data(), kvd, batch.shape, c.n_kv_heads, c.head_dim, c.rope_pairing,
                                   rope_cos_.data(), rope_sin_.data(), false, stream_);
            CUDA_CHECK(cudaMemcpy2DAsync(b.v.data(), size_t(kvd) * sizeof(bf16), y + qd + kvd, size_t(width) * sizeof(bf16),
                                         size_t(kvd) * sizeof(bf16), size_t(R), cudaMemcpyDeviceToDevice, stream_));
            mark("rope");
        } else {
            linear(Projection::q, attn_in, d, qd, {nullptr, b.q.data()}, qkv);
            linear(Projection::k, attn_in, d, kvd, {nullptr, b.k.data()}, qkv);
            linear(Projection::v, attn_in, d, kvd, {nullptr, b.v.data()}, qkv);
            rope_bf16_cuda(b.q.data(), batch.shape, c.n_heads, c.head_dim, c.rope_pairing, rope_cos_.data(),
                           rope_sin_.data(), false, stream_);
            mark("rope");
            rope_bf16_cuda(b.k.data(), batch.shape, c.n_kv_heads, c.head_dim, c.rope_pairing, rope_cos_.data(),
                           rope_sin_.data(), false, stream_);
            mark("rope");
        }
        flash_attention_forward_cuda(b.q.data(), b.k.data(), b.v.data(), batch.shape, c.n_heads, c.n_kv_heads, c.head_dim,
                                     b.ctx.data(), b.lse.data(), stream_);
        mark("attention forward");
        linear(Projection::o, b.ctx.data(), qd, d, {b.h.data(), nullptr, 1.0f}, {});  // ctx stays (attention backward)
        const bool keep_ffn_in = keep_bf16({Projection::gate, Projection::up});
        bf16* ffn_in = input_buffer(b.ffn_in_kept, ffn_in_scratch_, keep_ffn_in, size_t(R * d), b.ffn_in);
        rms_norm_forward_cuda(b.h.data(), w.ffn_norm, R, d, c.rms_eps, ffn_in, b.ffn_rms.data(), stream_, x_next);
        mark("rmsnorm");
        const std::initializer_list<Projection> gu = {Projection::gate, Projection::up};
        linear(Projection::gate, ffn_in, d, f, {nullptr, b.gate.data()}, gu);
        linear(Projection::up, ffn_in, d, f, {nullptr, b.up.data()}, gu);
        const bool keep_act = keep_bf16({Projection::down});
        bf16* act = input_buffer(b.act_kept, act_scratch_, keep_act, size_t(R * f), b.act);
        swiglu_forward_cuda(b.gate.data(), b.up.data(), R * f, act, stream_);
        mark("swiglu");
        linear(Projection::down, act, f, d, {x_next, nullptr, 1.0f}, {Projection::down});
        // Linear-layer inputs kept for the backward: prepared copies (counted above) and BF16 buffers.
        if (for_backward) saved_bytes_ += 2 * R * (qd + (keep_attn_in ? d : 0) + (keep_ffn_in ? d : 0) + (keep_act ? f : 0));
        if (for_backward) saved_bytes_bf16_ += 2 * R * (qd + 2 * d + f);
    }
    rms_norm_forward_cuda(final_x_.data(), master_.output_norm, R, d, c.rms_eps, final_xn_.data(), final_rms_.data(),
                          stream_);
    mark("rmsnorm");
    gemm_->forward(TrainGemmMode{}, final_xn_.data(), weight_bf16(master_.output), R, d, c.vocab_size,
                   {logits_.data(), nullptr});
    mark("lm head");
    if (for_backward) dlogits_.grow(size_t(R * c.vocab_size));
    // dlogits: the derivative of the step's mean loss (grad_accum micro-batches of R rows each).
    cross_entropy_cuda(logits_.data(), targets_.data(), R, c.vocab_size, 1.0f / float(R * config_.grad_accum), loss_rows_.data(),
                       for_backward ? dlogits_.data() : nullptr, stream_);
    mark("cross entropy");
    sum_to_double_cuda(loss_rows_.data(), R, scalar_.data(), sum_ws_, stream_);
    mark("cross entropy");
    // The embedding backward's grouping, on the host while the GPU runs the forward: before the loss's
    // device-to-host copy, which blocks the host until the forward is done (the host buffer is pageable).
    if (for_backward) {
        embed_plan_ = embedding_backward_plan(batch.inputs, R);
        embed_ids_.assign_async(embed_plan_.ids.data(), embed_plan_.ids.size(), stream_);
        embed_offsets_.assign_async(embed_plan_.offsets.data(), embed_plan_.offsets.size(), stream_);
        embed_rows_.assign_async(embed_plan_.rows.data(), embed_plan_.rows.size(), stream_);
    }
    double sum = 0;
    CUDA_CHECK(cudaMemcpyAsync(&sum, scalar_.data(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    track_memory();
    return sum / double(R);
}

void CudaTrainer::backward(bool accumulate) {
    const LlamaConfig& c = mc();
    const BatchShape shape = shape_;
    const int64_t R = shape.rows(), d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    const bool calibrating = recipe_.calibrating() && probe_ == nullptr;
    if (!accumulate) {
        CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_));
        mark("zero gradients");
    }
    const float wgrad_beta = accumulate ? 1.0f : 0.0f;
    // LM head (dense, BF16): d xn = dlogits·Wout; dWout = dlogitsᵀ·xn (into token_embd's gradient when tied).
    const TrainGemmMode dense{};
    gemm_->backward_data(dense, dlogits_.data(), weight_bf16(master_.output), R, d, c.vocab_size,
                         {d_norm_in_.data(), nullptr});
    mark("lm head");
    gemm_->backward_weight(dense, dlogits_.data(), final_xn_.data(), R, d, c.vocab_size, grad_of(master_.output), 1.0f);
    mark("lm head");
    CUDA_CHECK(cudaMemsetAsync(d_res_.data(), 0, d_res_.bytes(), stream_));
    mark("zero gradients");
    rms_norm_backward_cuda(final_x_.data(), master_.output_norm, final_rms_.data(), d_norm_in_.data(), R, d,
                           d_res_.data(), d_res_bf16_.data(), grad_of(master_.output_norm), norm_ws_, stream_);
    mark("rmsnorm backward");
    for (int64_t l = c.n_layers - 1; l >= 0; --l) {
        BlockState& b = blocks_[size_t(l)];
        const BlockTensors<float>& w = master_.blocks[size_t(l)];
        // dY (BF16 [R, n]) of projection p with input x [R, k]: dX into dx, dW into the gradient buffer, from
        // the operands prepared in the forward where there are some.
        const auto linear_back = [&](Projection p, const bf16* dy, const bf16* x, int64_t k, int64_t n, TrainGemmOut dx) {
            if (calibrating) {
                detect(l, p, Operand::g, dy, R, n);
                mark("adahop detector");
            }
            const size_t ip = size_t(p);
            if (probe_) {
                probe(l, p, Slot::dgrad, dy, weight_bf16(w[p]), R, k, n);
                probe(l, p, Slot::wgrad, dy, x, R, k, n);
            }
            const TrainGemmMode dg = mode(l, p, Slot::dgrad), wg = mode(l, p, Slot::wgrad);
            count_census_at(census_site(l, p, Slot::dgrad));
            if (b.has_saved_w[ip]) gemm_->backward_data(dg, dy, b.saved_w[ip], R, k, n, dx);
            else gemm_->backward_data(dg, dy, weight_bf16(w[p]), R, k, n, dx);
            mark("linear dgrad");
            count_census_at(census_site(l, p, Slot::wgrad));
            if (b.has_saved_x[ip]) {
                gemm_->backward_weight(wg, dy, b.saved_x[size_t(b.saved_x_from[ip])], R, k, n, grad_of(w[p]), wgrad_beta);
            } else {
                if (x == nullptr) cuda_usage_error("training engine: the BF16 input of " + linear_name(l, p) + " was not kept");
                gemm_->backward_weight(wg, dy, x, R, k, n, grad_of(w[p]), wgrad_beta);
            }
            mark("linear wgrad");
        };
        // FFN: d_act = dres·Wdown; SwiGLU backward; d ffn_in = dgate·Wgate + dup·Wup; norm backward into dres.
        bf16* d_act = d_wide_a_.data();
        bf16* d_gate = d_wide_b_.data();
        bf16* d_up = d_wide_c_.data();
        linear_back(Projection::down, d_res_bf16_.data(), b.act, f, d, {nullptr, d_act});
        swiglu_backward_cuda(b.gate.data(), b.up.data(), d_act, R * f, d_gate, d_up, stream_);
        mark("swiglu backward");
        linear_back(Projection::gate, d_gate, b.ffn_in, d, f, {d_norm_in_.data(), nullptr, 0.0f});
        linear_back(Projection::up, d_up, b.ffn_in, d, f, {d_norm_in_.data(), nullptr, 1.0f});
        rms_norm_backward_cuda(b.h.data(), w.ffn_norm, b.ffn_rms.data(), d_norm_in_.data(), R, d, d_res_.data(),
                               d_res_bf16_.data(), grad_of(w.ffn_norm), norm_ws_, stream_);
        mark("rmsnorm backward");
        // Attention: d_ctx = dh·Wo; flash backward; RoPE backward; d attn_in = Σ dq/dk/dv·W; norm backward.
        bf16* d_ctx = d_wide_a_.data();
        linear_back(Projection::o, d_res_bf16_.data(), b.ctx.data(), qd, d, {nullptr, d_ctx});
        flash_attention_backward_cuda(b.q.data(), b.k.data(), b.v.data(), b.ctx.data(), b.lse.data(), d_ctx, shape,
                                      c.n_heads, c.n_kv_heads, c.head_dim, dq_.data(), dk_.data(), dv_.data(), attn_ws_,
                                      stream_);
        mark("attention backward");
        if (fused_qkv(l, {Slot::dgrad, Slot::wgrad}) && b.attn_in != nullptr) {
            // dY of the three as one [R, q_dim + 2·kv_dim] (RoPE's inverse moves dq and dk into its rows): one dgrad
            // GEMM (K = q_dim + 2·kv_dim) and one wgrad GEMM into the adjacent gradients of Wq, Wk, Wv
            const int64_t width = qd + 2 * kvd;
            bf16* dy = qkv_.grow(size_t(R * width));
            rope_bf16_strided_cuda(dq_.data(), qd, dy, width, shape, c.n_heads, c.head_dim, c.rope_pairing, rope_cos_.data(),
                                   rope_sin_.data(), true, stream_);
            rope_bf16_strided_cuda(dk_.data(), kvd, dy + qd, width, shape, c.n_kv_heads, c.head_dim, c.rope_pairing,
                                   rope_cos_.data(), rope_sin_.data(), true, stream_);
            CUDA_CHECK(cudaMemcpy2DAsync(dy + qd + kvd, size_t(width) * sizeof(bf16), dv_.data(), size_t(kvd) * sizeof(bf16),
                                         size_t(kvd) * sizeof(bf16), size_t(R), cudaMemcpyDeviceToDevice, stream_));
            mark("rope");
            gemm_->backward_data(dense, dy, weight_bf16(w[Projection::q]), R, d, width, {d_norm_in_.data(), nullptr, 0.0f});
            mark("linear dgrad");
            gemm_->backward_weight(dense, dy, b.attn_in, R, d, width, grad_of(w[Projection::q]), wgrad_beta);
            mark("linear wgrad");
        } else {
            rope_bf16_cuda(dq_.data(), shape, c.n_heads, c.head_dim, c.rope_pairing, rope_cos_.data(), rope_sin_.data(),
                           true, stream_);
            mark("rope");
            rope_bf16_cuda(dk_.data(), shape, c.n_kv_heads, c.head_dim, c.rope_pairing, rope_cos_.data(),
                           rope_sin_.data(), true, stream_);
            mark("rope");
            linear_back(Projection::q, dq_.data(), b.attn_in, d, qd, {d_norm_in_.data(), nullptr, 0.0f});
            linear_back(Projection::k, dk_.data(), b.attn_in, d, kvd, {d_norm_in_.data(), nullptr, 1.0f});
            linear_back(Projection::v, dv_.data(), b.attn_in, d, kvd, {d_norm_in_.data(), nullptr, 1.0f});
        }
        rms_norm_backward_cuda(b.x.data(), w.attn_norm, b.attn_rms.data(), d_norm_in_.data(), R, d, d_res_.data(),
                               d_res_bf16_.data(), grad_of(w.attn_norm), norm_ws_, stream_);
        mark("rmsnorm backward");
        for (size_t p = 0; p < kProjectionCount; ++p)  // the prepared operands are spent (their buffers stay for the next step)
            b.has_saved_x[p] = b.has_saved_w[p] = false;
    }
    // Embedding: d token_embd[token] += dx_0[row], rows grouped by token on the host during the forward.
    embedding_backward_cuda(embed_ids_.data(), embed_offsets_.data(), embed_rows_.data(), int64_t(embed_plan_.ids.size()),
                            d_res_.data(), d, grad_of(master_.token_embd), stream_);
    mark("embedding backward");
    track_memory();  // the backward's scratch (dlogits, prepared operands' A sides) is live here too
}

double CudaTrainer::loss(const TokenBatch& batch) {
    const double l = mean_loss_by_parts(batch, micro_batch_size(config_), [&](const TokenBatch& part) {
        upload_batch(part, true);
        const double pl = forward(part, false);
        if (!std::isfinite(pl)) cuda_input_error("evaluation loss is " + std::to_string(pl) + " (NaN/Inf in the model)");
        return pl;
    });
    clock_.drop();
    return l;
}

std::vector<SlotError> CudaTrainer::probe_slot_errors(const TokenBatch& batch) {
    if (batch.shape.n_seq != config_.batch_size || batch.shape.n_tok != config_.seq_len)
        cuda_usage_error("slot-error probe: the batch must have the training shape");
    const int64_t saved = saved_bytes_, saved_bf16 = saved_bytes_bf16_, peak = peak_bytes_;
    std::vector<SlotError> out;
    probe_ = &out;
    micro_ = 0;
    try {
        const TokenBatch first = batch_rows(batch, 0, micro_batch_size(config_));
        upload_batch(first, true);
        forward(first, true);
        backward();
    } catch (...) {
        probe_ = nullptr;
        throw;
    }
    probe_ = nullptr;
    clock_.drop();
    probe_scratch_.ref.release();
    probe_scratch_.diff.release();
    saved_bytes_ = saved;
    saved_bytes_bf16_ = saved_bf16;
    peak_bytes_ = peak;
    // Layer-major order (the backward visits layers and projections in reverse).
    std::stable_sort(out.begin(), out.end(), [](const SlotError& a, const SlotError& b) {
        return std::tie(a.layer, a.projection, a.slot) < std::tie(b.layer, b.projection, b.slot);
    });
    return out;
}

StepStats CudaTrainer::step(const TokenBatch& batch) {
    if (batch.shape.n_seq != config_.batch_size || batch.shape.n_tok != config_.seq_len)
        cuda_usage_error("training step: a batch of " + std::to_string(batch.shape.n_seq) + " x " +
                         std::to_string(batch.shape.n_tok) + " tokens, but the config trains " +
                         std::to_string(config_.batch_size) + " sequences of " + std::to_string(config_.seq_len));
    StepStats s;
    s.step = t_;
    const int64_t micros = config_.grad_accum, micro_seqs = micro_batch_size(config_);
    double loss_sum = 0;
    for (micro_ = 0; micro_ < micros; ++micro_) {
        const TokenBatch micro = batch_rows(batch, micro_ * micro_seqs, micro_seqs);
        upload_batch(micro, true);
        mark("start");
        const double loss = forward(micro, true);
        if (!std::isfinite(loss))
            throw Error(ErrorKind::runtime,
                        step_prefix(s.step) + "loss is NaN/Inf (" + std::to_string(loss) +
                            (micros > 1 ? ", micro-batch " + std::to_string(micro_ + 1) + " of " + std::to_string(micros) : "") +
                            "); the parameters are those of the last good step");
        backward(micro_ > 0);
        loss_sum += loss;
    }
    micro_ = 0;
    s.loss = micros == 1 ? loss_sum : loss_sum / double(micros);
    sum_squares_cuda(grads_.data(), layout_.total(), scalar_.data(), sum_ws_, stream_);
    mark("gradient norm");
    double sq = 0;
    CUDA_CHECK(cudaMemcpyAsync(&sq, scalar_.data(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    s.grad_norm = std::sqrt(sq);
    if (!std::isfinite(s.grad_norm)) {  // name the tensor: the CPU's check over a host copy
        const std::vector<float> g = gradients();
        try {
            global_grad_norm(layout_, g.data());
        } catch (const Error& e) {
            throw Error(ErrorKind::runtime, step_prefix(s.step) + e.what());
        }
        throw Error(ErrorKind::runtime, step_prefix(s.step) + "the gradient norm is not finite");
    }
    s.clip_scale = grad_clip_scale(s.grad_norm, config_.optimizer.grad_clip);
    s.lr = config_.schedule.lr_at(s.step, config_.optimizer.lr);
    ++t_;
    const AdamwStepArgs a = adamw_step_args(config_.optimizer, t_, s.lr, s.clip_scale);
    adamw_step_cuda(params_.data(), grads_.data(), m_.data(), v_.data(), decay_mask_.data(), layout_.total(), a,
                    params_bf16_.data(), stream_);
    mark("adamw");
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (clock_.enabled()) clock_.collect();
    recipe_.end_step();
    return s;
}

}  // namespace

std::unique_ptr<Trainer> make_cuda_trainer(const TrainConfig& config, const Recipe& recipe) {
    return std::make_unique<CudaTrainer>(config, recipe);
}

}  // namespace lowbit
