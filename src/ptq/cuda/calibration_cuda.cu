// calibration_cuda.cu — CudaCalibrationPaths: device-resident calibration activations and statistics.
#include "ptq/cuda/calibration_cuda.cuh"

#include "core/cuda_host_copy.h"
#include "core/cuda_phase_clock.h"
#include "formats/cuda/format_roundtrip_cuda.cuh"
#include "model/cuda/forward_cuda.cuh"
#include "ptq/cuda/solver_cuda.cuh"

#include <chrono>
#include <cmath>
#include <utility>

namespace lowbit {

namespace {

// Row-major n × n: the lower triangle from the upper one (SSYRK filled column-major lower = row-major upper).
__global__ void symmetrize_kernel(float* a, int64_t n) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n * n) return;
    const int64_t i = idx / n, j = idx % n;
    if (i > j) a[idx] = a[j * n + i];
}

// block_v per KV group: h += g; d += r − g (the difference first: r and g are close, so it loses little).
__global__ void add_and_cross_kernel(const float* g, const float* r, float* h, float* d, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    h[i] += g[i];
    if (d) d[i] += r[i] - g[i];
}

__global__ void difference_kernel(const float* a, const float* b, float* out, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] - b[i];
}

// causal_softmax_row (model/forward_cpu.cpp) for every row t of s [T, T]: one block per row.
__global__ void causal_softmax_kernel(float* s, int64_t T, float scale) {
    const int64_t t = blockIdx.x;
    float* row = s + t * T;
    __shared__ float red_f[32];
    __shared__ double red_d[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float m = row[0] * scale;
    for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, row[j] * scale);
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red_f[warp] = m;
    __syncthreads();
    m = red_f[0];
    for (int w = 1; w < warps; ++w) m = fmaxf(m, red_f[w]);
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
        const float e = expf(row[j] * scale - m);
        row[j] = e;
        sum += e;
    }
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) red_d[warp] = sum;
    __syncthreads();
    sum = 0.0;
    for (int w = 0; w < warps; ++w) sum += red_d[w];
    const float inv = float(1.0 / sum);
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? row[j] * inv : 0.0f;
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

class CudaCalibrationPaths final : public CalibrationPaths {
public:
    CudaCalibrationPaths(const LlamaConfig& c, int64_t batch, CudaPrecision p, const QuantSpec& activations,
                         ValueProducts value_products)
        : c_(c), batch_(std::max<int64_t>(1, batch)), precision_(p), acts_(activations), acts_rows_(activations),
          value_products_(value_products) {
        acts_rows_.options.axis = 1;  // per token, as quantize_activations
        if (acts_.format && !format_roundtrip_cuda_supported(*acts_.format))
            cuda_usage_error(std::string("--act-bits: activation format ") + acts_.format->name +
                             " has no CUDA quantizer; use an INT, MX or NVFP4 format on the GPU");
        clock_.enable(true);
        sq_.tensor_core_attention = sfp_.tensor_core_attention = p == CudaPrecision::bf16;
    }

    void embed(const LlamaModel& m, const std::vector<int32_t>& windows, int64_t samples, int64_t length,
               bool cross) override {
        const std::vector<float> x = embed_tokens(c_, m.weights.token_embd.data(), windows.data(), BatchShape{samples, length});
        load(x, cross ? x : std::vector<float>(), samples, length);
    }

    BlockStatistics statistics(const BlockWeights& fp, int64_t layer, const BlockStatsOptions& o,
                               const BlockWeights* quantized_path) override {
        const cudaStream_t st = blas_.stream();
        const int64_t d = c_.hidden_size, qd = c_.q_dim(), kvd = c_.kv_dim(), f = c_.ffn_size, hd = c_.head_dim;
        const int64_t L = length_, nkv = c_.n_kv_heads;
        LOWBIT_CHECK(!o.cross || !xfp_empty_, ErrorKind::usage, "calibration: F2 statistics need the full-precision path");
        // The full-precision path runs the block as loaded; the quantized path `quantized_path` (or the block as
        // loaded), with activation-quantized linears when --act-bits asks (the CPU's quantized_path_linears).
        const CudaBlockWeights& wq =
            upload_quantized_path(quantized_path ? *quantized_path : fp, layer, quantized_path != nullptr);
        if (o.cross && &wq != &weights_) weights_.upload(c_, fp, layer, precision_, st);
        const auto zeroed = [&](DeviceBuffer<float>& b, int64_t n, bool wanted) -> float* {
            if (!wanted) return nullptr;
            b.grow(size_t(n));
            CUDA_CHECK(cudaMemsetAsync(b.data(), 0, size_t(n) * sizeof(float), st));
            return b.data();
        };
        const bool a_in = o.measures(attention_input), a_out = o.measures(attention_output);
        const bool m_in = o.measures(mlp_input), m_hid = o.measures(mlp_hidden);
        float* h_attn = zeroed(h_attn_, d * d, a_in);
        float* h_o = zeroed(h_o_, qd * qd, a_out);
        float* h_ffn = zeroed(h_ffn_, d * d, m_in);
        float* h_down = zeroed(h_down_, f * f, m_hid);
        float* c_k = zeroed(c_k_, nkv * hd * hd, o.measures_h_out());
        float* c_q = zeroed(c_q_, c_.n_heads * hd * hd, o.measures_h_out());
        float* h_v = zeroed(h_v_, nkv * d * d, o.measures_block_v());
        float* d_attn = zeroed(d_attn_, d * d, o.cross && a_in);
        float* d_o = zeroed(d_o_, qd * qd, o.cross && a_out);
        float* d_ffn = zeroed(d_ffn_, d * d, o.cross && m_in);
        float* d_down = zeroed(d_down_, f * f, o.cross && m_hid);
        float* d_v = zeroed(d_v_, nkv * d * d, o.cross && o.measures_block_v());
        int64_t tokens = 0;
        clock_.mark(st, "upload");
        for (int64_t s0 = 0; s0 < samples_; s0 += batch_) {
            const BatchShape shape{std::min(batch_, samples_ - s0), L};
            const int64_t rows = shape.rows();
            tokens += rows;
            if (o.cross) {
                float* x_fp = xfp_.data() + s0 * L * d;  // Xfp advances here, or a copy of it runs the block
                if (!o.advance_full_precision) {
                    float* copy = tmp_fp_.grow(size_t(rows * d));
                    CUDA_CHECK(cudaMemcpyAsync(copy, x_fp, size_t(rows * d) * 4, cudaMemcpyDeviceToDevice, st));
                    x_fp = copy;
                }
                cuda_block_forward(c_, weights_, layer, x_fp, shape, sfp_, blas_,
                                   o.advance_full_precision ? BlockStop::end : o.forward_stop());
            }
            float* tmp = tmp_.grow(size_t(rows * d));
            CUDA_CHECK(cudaMemcpyAsync(tmp, xq_.data() + s0 * L * d, size_t(rows * d) * 4, cudaMemcpyDeviceToDevice, st));
            cuda_block_forward(c_, wq, layer, tmp, shape, sq_, blas_, o.forward_stop());  // Xq does not advance
            if (acts_.format) quantize_linear_inputs(rows);
            clock_.mark(st, "forwards");
            if (h_attn) input_hessian(wq, h_attn, sq_.attn_in.data(), sq_.attn_in_bf16.data(), Projection::q, rows, d);
            if (h_o) input_hessian(wq, h_o, sq_.attn_ctx.data(), sq_.attn_ctx_bf16.data(), Projection::o, rows, qd);
            if (h_ffn) input_hessian(wq, h_ffn, sq_.ffn_in.data(), sq_.ffn_in_bf16.data(), Projection::gate, rows, d);
            if (h_down) input_hessian(wq, h_down, sq_.ffn_act.data(), sq_.ffn_act_bf16.data(), Projection::down, rows, f);
            if (d_attn) cross(d_attn, sfp_.attn_in.data(), sq_.attn_in.data(), rows, d);
            if (d_o) cross(d_o, sfp_.attn_ctx.data(), sq_.attn_ctx.data(), rows, qd);
            if (d_ffn) cross(d_ffn, sfp_.ffn_in.data(), sq_.ffn_in.data(), rows, d);
            if (d_down) cross(d_down, sfp_.ffn_act.data(), sq_.ffn_act.data(), rows, f);
            if (c_k) {
                for (int64_t g = 0; g < nkv; ++g) syrk(c_k + g * hd * hd, sq_.k.data() + g * hd, rows, hd, kvd);
                for (int64_t h = 0; h < c_.n_heads; ++h) syrk(c_q + h * hd * hd, sq_.q.data() + h * hd, rows, hd, qd);
            }
            if (h_v) value_hessians(h_v, d_v, shape);
            clock_.mark(st, "products");
            ptq_sample_device_memory();
        }
        CUDA_CHECK(cudaStreamSynchronize(st));
        clock_.collect();
        const auto t_fetch = std::chrono::steady_clock::now();
        // Finish: symmetrise the sums, copy them to the host.
        BlockStatistics raw;
        raw.tokens = tokens;
        const auto fetch = [&](float* dptr, int64_t count, int64_t n, bool symmetric, std::vector<float>& dst) {
            if (!dptr) return;
            if (symmetric)
                for (int64_t i = 0; i < count / (n * n); ++i)
                    symmetrize_kernel<<<blocks_for(n * n, 256), 256, 0, st>>>(dptr + i * n * n, n);
            CUDA_CHECK(cudaGetLastError());
            dst.resize(size_t(count));
            copy_device_to_host(dst.data(), dptr, size_t(count) * 4, st);
        };
        std::vector<float> ck, cq;
        fetch(h_attn, d * d, d, true, raw.h_attn);
        fetch(h_o, qd * qd, qd, true, raw.h_o);
        fetch(h_ffn, d * d, d, true, raw.h_ffn);
        fetch(h_down, f * f, f, true, raw.h_down);
        fetch(c_k, nkv * hd * hd, hd, true, ck);
        fetch(c_q, c_.n_heads * hd * hd, hd, true, cq);
        fetch(h_v, nkv * d * d, d, true, raw.h_v);
        fetch(d_attn, d * d, d, false, raw.d_attn);
        fetch(d_o, qd * qd, qd, false, raw.d_o);
        fetch(d_ffn, d * d, d, false, raw.d_ffn);
        fetch(d_down, f * f, f, false, raw.d_down);
        fetch(d_v, nkv * d * d, d, false, raw.d_v);
        CUDA_CHECK(cudaStreamSynchronize(st));
        const auto t_finish = std::chrono::steady_clock::now();
        BlockStatistics done = finish_block_statistics(c_, o, std::move(raw), std::move(ck), std::move(cq), L);
        const auto t_done = std::chrono::steady_clock::now();
        transfer_seconds_ += std::chrono::duration<double>(t_done - t_fetch).count();
        finish_seconds_ += std::chrono::duration<double>(t_done - t_finish).count();
        return done;
    }

    void propagate(const BlockWeights& q, int64_t layer) override {
        const int64_t d = c_.hidden_size, L = length_;
        const CudaBlockWeights& wq = upload_quantized_path(q, layer, false);
        clock_.mark(blas_.stream(), "upload");
        for (int64_t s0 = 0; s0 < samples_; s0 += batch_)
            cuda_block_forward(c_, wq, layer, xq_.data() + s0 * L * d, BatchShape{std::min(batch_, samples_ - s0), L},
                               sq_, blas_);
        clock_.mark(blas_.stream(), "forwards");
        blas_.synchronize();
        clock_.collect();
    }

    void save(std::vector<float>& xq, std::vector<float>& xfp) const override {
        const size_t n = size_t(samples_ * length_ * c_.hidden_size);
        xq.resize(n);
        copy_device_to_host(xq.data(), xq_.data(), n * sizeof(float), blas_.stream());
        xfp.clear();
        if (!xfp_empty_) {
            xfp.resize(n);
            copy_device_to_host(xfp.data(), xfp_.data(), n * sizeof(float), blas_.stream());
        }
    }

    void load(std::vector<float> xq, std::vector<float> xfp, int64_t samples, int64_t length) override {
        samples_ = samples;
        length_ = length;
        const size_t n = size_t(samples * length * c_.hidden_size);
        LOWBIT_CHECK(xq.size() == n && (xfp.empty() || xfp.size() == n), ErrorKind::input,
                     "calibration: activations of {} floats for {} windows of {} (a checkpoint of another model?)",
                     xq.size(), samples, length);
        copy_host_to_device(xq_.fit(n), xq.data(), n * sizeof(float), blas_.stream());
        xfp_empty_ = xfp.empty();
        if (!xfp_empty_) copy_host_to_device(xfp_.fit(n), xfp.data(), n * sizeof(float), blas_.stream());
        ptq_sample_device_memory();
    }

    std::string device() const override { return std::string("cuda ") + cuda_precision_name(precision_); }
    QuantSpec activations() const override { return acts_; }

    CalibrationPhases phases() const override {
        const auto total = [&](const char* phase) {
            const auto it = clock_.totals().find(phase);
            return it == clock_.totals().end() ? 0.0 : it->second;
        };
        return CalibrationPhases{total("forwards"), total("products"), transfer_seconds_, finish_seconds_};
    }

private:
    // An input Hessian's sum: dst (n × n) += xᵀx of the input of projection `reader` (and of the projections
    // sharing its input). In BF16 precision the layer multiplies the BF16 copy xb of its input, so the sum is
    // taken of that copy on the BF16 tensor cores (exact products, FP32 accumulation; a full GEMM, both
    // triangles); in FP32, SSYRK of x (the upper triangle, row-major).
    void input_hessian(const CudaBlockWeights& w, float* dst, const float* x, const __nv_bfloat16* xb, Projection reader,
                       int64_t rows, int64_t n) {
        if (!w.linears[reader].wants_bf16_input()) {
            syrk(dst, x, rows, n, n);
            return;
        }
        const float one = 1.0f;
        // Column-major C (n × n) += Xᵀᵀ·Xᵀ over row-major X (rows × n): C = X_cm · X_cmᵀ with X_cm = the n × rows view.
        cublas_check(cublasGemmEx(blas_.handle(), CUBLAS_OP_N, CUBLAS_OP_T, int(n), int(n), int(rows), &one, xb, CUDA_R_16BF,
                                  int(n), xb, CUDA_R_16BF, int(n), &one, dst, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx (BF16 Hessian)");
    }
    // The quantized path's block: `b` with the activation-quantized linears of --act-bits, else dense; in
    // weights_ (shared with the full-precision path) unless either those linears or `separate` (b is not the
    // full-precision block) ask for weights_q_.
    const CudaBlockWeights& upload_quantized_path(const BlockWeights& b, int64_t layer, bool separate) {
        if (!acts_.format && !separate) {
            weights_.upload(c_, b, layer, precision_, blas_.stream());
            return weights_;
        }
        weights_q_.upload(c_, b, layer, precision_, blas_.stream(),
                          acts_.format ? cuda_fake_quant_linears(QuantSpec{}, acts_) : cuda_dense_linears());
        return weights_q_;
    }
    // The quantized path's linear inputs in the scratch replaced by what its linears multiplied, Qa(x) (the
    // CPU's quantize_linear_inputs): the statistics are then taken of the quantized activations.
    void quantize_linear_inputs(int64_t rows) {
        const int64_t d = c_.hidden_size;
        for (const auto& [x, cols] : {std::pair{&sq_.attn_in, d}, std::pair{&sq_.attn_ctx, c_.q_dim()},
                                      std::pair{&sq_.ffn_in, d}, std::pair{&sq_.ffn_act, c_.ffn_size}}) {
            float* q = act_tmp_.grow(size_t(rows * cols));
            format_roundtrip_cuda(*acts_rows_.format, acts_rows_.options, x->data(), rows, cols, q, act_scratch_,
                                  blas_.stream());
            CUDA_CHECK(cudaMemcpyAsync(x->data(), q, size_t(rows * cols) * sizeof(float), cudaMemcpyDeviceToDevice,
                                       blas_.stream()));
        }
    }
    // The attention-weighted and cross products (block_v, F2) in BF16 precision: FP32 data on the TF32 tensor
    // cores (inputs rounded to 11 significant bits, FP32 accumulation), 8× the FP32 rate; the BF16 forward that
    // made these activations is coarser (8 bits). In FP32 precision they stay FP32 (SGEMM, SSYRK).
    bool tf32_products() const { return precision_ == CudaPrecision::bf16; }
    // Column-major C (m × n, ldc) = op(A)·op(B) + beta·C over FP32 data, on the TF32 tensor cores when
    // tf32_products(), else SGEMM.
    void product(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const char* what) {
        const float one = 1.0f;
        if (tf32_products())
            cublas_check(cublasGemmEx(blas_.handle(), ta, tb, int(m), int(n), int(k), &one, a, CUDA_R_32F, int(lda), b,
                                      CUDA_R_32F, int(ldb), &beta, c, CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F_FAST_TF32,
                                      CUBLAS_GEMM_DEFAULT),
                         what);
        else
            cublas_check(cublasSgemm(blas_.handle(), ta, tb, int(m), int(n), int(k), &one, a, int(lda), b, int(ldb), &beta, c,
                                     int(ldc)),
                         what);
    }
    // dst (n × n) += xᵀx of an attention-weighted input: SSYRK in FP32 precision; on the TF32 tensor cores
    // the full product (both triangles, twice the FLOPs at 8× the rate).
    void gram(float* dst, const float* x, int64_t rows, int64_t n) {
        if (!tf32_products()) return syrk(dst, x, rows, n, n);
        product(CUBLAS_OP_N, CUBLAS_OP_T, n, n, rows, x, n, x, n, 1.0f, dst, n, "cublasGemmEx (TF32 value Hessian)");
    }
    // dst (n × n, column-major lower = row-major upper) += xᵀx, x row-major rows × n with leading dimension ld.
    void syrk(float* dst, const float* x, int64_t rows, int64_t n, int64_t ld) {
        const float one = 1.0f;
        cublas_check(cublasSsyrk(blas_.handle(), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, int(n), int(rows), &one, x, int(ld), &one,
                                 dst, int(n)),
                     "cublasSsyrk");
    }
    // dst (n × n row-major) += (a − b)ᵀ b for row-major rows × n matrices.
    void cross(float* dst, const float* a, const float* b, int64_t rows, int64_t n) {
        float* diff = diff_.grow(size_t(rows * n));
        difference_kernel<<<blocks_for(rows * n, 256), 256, 0, blas_.stream()>>>(a, b, diff, rows * n);
        CUDA_CHECK(cudaGetLastError());
        // Column-major C = bᵀ·diff over the row-major storage of b and diff.
        product(CUBLAS_OP_N, CUBLAS_OP_T, n, n, rows, b, n, diff, n, 1.0f, dst, n, "cross product (F2)");
    }
    // probs [T, T] = attention_probabilities of (seq, head) from the scratch's q, k.
    void probabilities(const CudaBlockScratch& s, int64_t seq, int64_t head, float* probs) {
        const int64_t T = length_, hd = c_.head_dim, qd = c_.q_dim(), kvd = c_.kv_dim();
        const int64_t g = head / (c_.n_heads / c_.n_kv_heads);
        const float one = 1.0f, zero = 0.0f;
        const float* q = s.q.data() + seq * T * qd + head * hd;
        const float* k = s.k.data() + seq * T * kvd + g * hd;
        // Row-major S = Q·Kᵀ is column-major Sᵀ = K·Qᵀ.
        cublas_check(cublasSgemm(blas_.handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(T), int(T), int(hd), &one, k, int(kvd), q,
                                 int(qd), &zero, probs, int(T)),
                     "cublasSgemm (scores)");
        causal_softmax_kernel<<<unsigned(T), 256, 0, blas_.stream()>>>(probs, T, float(1.0 / std::sqrt(double(hd))));
        CUDA_CHECK(cudaGetLastError());
    }
    // ax [T, d] = probs [T, T] · x [T, d] (row-major).
    void mix(const float* probs, const float* x, float* ax) {
        const int64_t T = length_, d = c_.hidden_size;
        product(CUBLAS_OP_N, CUBLAS_OP_N, d, T, T, x, d, probs, T, 0.0f, ax, d, "A·X (block_v)");
    }
    // block_v: H_v[g] += Σ_h∈g (A_h X)ᵀ(A_h X); F2: D_v[g] += (Ã_h X̃ − A_h X)ᵀ(A_h X).
    void value_hessians(float* h_v, float* d_v, BatchShape shape) {
        if (value_products_by_group()) return value_hessians_by_group(h_v, d_v, shape);
        const int64_t T = length_, d = c_.hidden_size, group = c_.n_heads / c_.n_kv_heads;
        float* probs = probs_.grow(size_t(T * T));
        float* ax = ax_.grow(size_t(T * d));
        float* ax_fp = d_v ? ax_fp_.grow(size_t(T * d)) : nullptr;
        for (int64_t sq = 0; sq < shape.n_seq; ++sq)
            for (int64_t h = 0; h < c_.n_heads; ++h) {
                const int64_t g = h / group;
                probabilities(sq_, sq, h, probs);
                mix(probs, sq_.attn_in.data() + sq * T * d, ax);
                gram(h_v + g * d * d, ax, T, d);
                if (d_v) {
                    probabilities(sfp_, sq, h, probs);
                    mix(probs, sfp_.attn_in.data() + sq * T * d, ax_fp);
                    cross(d_v + g * d * d, ax_fp, ax, T, d);
                }
            }
    }

    // Whether block_v's products go by KV group (value_hessians_by_group). Per window and group of g query heads,
    // T tokens, width d:
    //   by head   g·(2T²d + 2Td²)           [A_h·X, its Gram], again with F2: Ã_h·X̃ and the cross product
    //   by group  g·2T³ + 2T²d + 2Td²       [M = Σ A_hᵀA_h, M·X, Xᵀ(M·X)], again with F2: N = Σ Ã_hᵀA_h, N·X, X̃ᵀ(N·X)
    // (8B, T = 2048, d = 4096, g = 4: 344 against 825 GFLOP with F2; 1.4 against 1.9 GFLOP without F2 at SmolLM2's
    // T = 512, d = 576, g = 3). `automatic` takes the smaller count (block_v_by_group_takes_fewer_flops), as the CPU
    // does: on the 8B block the statistics products went from 5.7 to 3.7 s on an H100
    // (bench/results/ptq_cuda_h200.md).
    bool value_products_by_group() const {
        return value_products_ == ValueProducts::automatic ? block_v_by_group_takes_fewer_flops(c_, length_)
                                                           : value_products_ == ValueProducts::by_group;
    }
    // block_v by KV group: H_v[g] += Xᵀ·(M·X) with M = Σ_h∈g A_hᵀA_h, and with F2 D_v[g] += X̃ᵀ·(N·X) − Xᵀ·(M·X)
    // with N = Σ_h∈g Ã_hᵀA_h — the same sums as value_hessians' Σ_h (A_hX)ᵀ(A_hX) and Σ_h (Ã_hX̃ − A_hX)ᵀ(A_hX),
    // associated differently (T × T products first). Column-major views of the row-major buffers: probs holds A_hᵀ,
    // x holds Xᵀ.
    void value_hessians_by_group(float* h_v, float* d_v, BatchShape shape) {
        const int64_t T = length_, d = c_.hidden_size, group = c_.n_heads / c_.n_kv_heads;
        float* probs = probs_.grow(size_t(T * T));
        float* probs_fp = d_v ? probs_fp_.grow(size_t(T * T)) : nullptr;
        float* m = m_.grow(size_t(T * T));
        float* n = d_v ? n_.grow(size_t(T * T)) : nullptr;
        float* mx = ax_.grow(size_t(T * d));
        float* nx = d_v ? ax_fp_.grow(size_t(T * d)) : nullptr;
        float* g_sum = d_v ? g_sum_.grow(size_t(d * d)) : nullptr;
        float* r_sum = d_v ? r_sum_.grow(size_t(d * d)) : nullptr;
        for (int64_t sq = 0; sq < shape.n_seq; ++sq) {
            const float* x = sq_.attn_in.data() + sq * T * d;
            const float* x_fp = d_v ? sfp_.attn_in.data() + sq * T * d : nullptr;
            for (int64_t kv = 0; kv < c_.n_kv_heads; ++kv) {
                for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
                    const float beta = h == kv * group ? 0.0f : 1.0f;
                    probabilities(sq_, sq, h, probs);
                    // M += A_hᵀA_h: column-major (A_hᵀ)(A_hᵀ)ᵀ.
                    product(CUBLAS_OP_N, CUBLAS_OP_T, T, T, T, probs, T, probs, T, beta, m, T, "M = Σ AᵀA (block_v)");
                    if (d_v) {
                        probabilities(sfp_, sq, h, probs_fp);
                        // Column-major Nᵀ += A_hᵀ·Ã_h = (A_hᵀ)(Ã_hᵀ)ᵀ.
                        product(CUBLAS_OP_N, CUBLAS_OP_T, T, T, T, probs, T, probs_fp, T, beta, n, T, "N = Σ ÃᵀA (F2)");
                    }
                }
                // Column-major (M·X)ᵀ = Xᵀ·M (M symmetric); then Xᵀ·(M·X) as column-major (M·X)ᵀ·X.
                product(CUBLAS_OP_N, CUBLAS_OP_N, d, T, T, x, d, m, T, 0.0f, mx, d, "M·X (block_v)");
                float* h_g = h_v + kv * d * d;
                if (!d_v) {
                    product(CUBLAS_OP_N, CUBLAS_OP_T, d, d, T, mx, d, x, d, 1.0f, h_g, d, "Xᵀ·M·X (block_v)");
                    continue;
                }
                product(CUBLAS_OP_N, CUBLAS_OP_T, d, d, T, mx, d, x, d, 0.0f, g_sum, d, "Xᵀ·M·X (block_v)");
                // Column-major (N·X)ᵀ = Xᵀ·Nᵀ; then X̃ᵀ·(N·X) as column-major (N·X)ᵀ·X̃.
                product(CUBLAS_OP_N, CUBLAS_OP_N, d, T, T, x, d, n, T, 0.0f, nx, d, "N·X (F2)");
                product(CUBLAS_OP_N, CUBLAS_OP_T, d, d, T, nx, d, x_fp, d, 0.0f, r_sum, d, "X̃ᵀ·N·X (F2)");
                add_and_cross_kernel<<<blocks_for(d * d, 256), 256, 0, blas_.stream()>>>(g_sum, r_sum, h_g, d_v + kv * d * d,
                                                                                          d * d);
                CUDA_CHECK(cudaGetLastError());
            }
        }
    }

    LlamaConfig c_;
    int64_t batch_ = 1, samples_ = 0, length_ = 0;
    CudaPrecision precision_;
    QuantSpec acts_, acts_rows_;  // --act-bits as given / along each token's row
    CudaBlas blas_;
    CudaBlockWeights weights_, weights_q_;  // the block as loaded; with activation-quantized linears
    DeviceBuffer<float> act_tmp_;
    FormatRoundtripScratch act_scratch_;
    CudaBlockScratch sq_, sfp_;
    DeviceBuffer<float> xq_, xfp_, tmp_, tmp_fp_;
    bool xfp_empty_ = true;
    DeviceBuffer<float> h_attn_, h_o_, h_ffn_, h_down_, c_k_, c_q_, h_v_, d_attn_, d_o_, d_ffn_, d_down_, d_v_;
    DeviceBuffer<float> diff_, probs_, ax_, ax_fp_, probs_fp_, m_, n_, g_sum_, r_sum_;
    ValueProducts value_products_ = ValueProducts::automatic;
    PhaseClock clock_;
    double transfer_seconds_ = 0, finish_seconds_ = 0;
};

}  // namespace

std::unique_ptr<CalibrationPaths> cuda_calibration_paths(const LlamaConfig& c, int64_t batch, CudaPrecision precision,
                                                         const QuantSpec& activations, ValueProducts value_products) {
    return std::make_unique<CudaCalibrationPaths>(c, batch, precision, activations, value_products);
}

}  // namespace lowbit
