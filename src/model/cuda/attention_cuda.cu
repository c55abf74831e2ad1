// attention_cuda.cu — causal GQA attention with an online softmax (see attention_cuda.cuh).
//
// Organisation: one CTA of 256 threads per (query tile of 32 positions, query head, sequence). Each query
// is owned by a group of 8 lanes; lane g of the group holds dimensions g, g+8, g+16, … of the query and of
// the output accumulator in registers (DPL = ⌈head_dim/8⌉ rounded up to a power of two of them). Keys and
// values stream through shared memory in tiles of 32 positions ([32][8·DPL] floats each, zero-padded
// beyond head_dim). Per tile:
//   load     K/V tile (coalesced along head_dim), __syncthreads
//   scores   s_j = (q·k_j)/√head_dim: each lane a partial dot over its dimensions, a 3-step xor butterfly
//            gives the whole group the sum; lane j mod 8 keeps s_j (keys after the query are −∞)
//   softmax  tile max over the group, m' = max(m, tile max), p_j = exp(s_j − m'), l = l·e^(m−m') + Σp
//   values   acc = acc·e^(m−m') + Σ_j p_j·v_j, p_j broadcast from its owner lane by a shuffle
// and at the end out = acc / l. Memory per CTA: the two tiles (≤ 64 KB at head_dim 256) — nothing grows
// with n_tok. Every tile a CTA visits holds at least one key ≤ each of its queries (tiles and query tiles
// are both 32 wide and aligned), so m' is finite after the first tile and e^(−∞ − m') = 0 needs no special
// case; the queries past n_tok of the last tile shadow position n_tok−1 and write nothing.
//
// Napkin math (SmolLM2-135M, 512 tokens, 9 heads of 64, 30 layers): 30·9·(512²/2)·64·2·2 FLOP ≈ 9 GFLOP
// per window in FP32 CUDA cores (~60 TFLOP/s without tensor cores → ~0.15 ms at full rate; the shuffles
// and the --fmad=false rounding of the non-fused parts make it a few times that). K/V traffic: each CTA
// reads the keys before its tile once, 512²/2/32 · 64·4·2 B ≈ 1 MB per head and layer, from L2.
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "model/cuda/attention_cuda.cuh"

#include <cmath>
#include <string>

namespace lowbit {

namespace {

constexpr int kGroup = 8;                     // lanes per query
constexpr int kThreads = 256;
constexpr int kQueries = kThreads / kGroup;   // 32 queries per CTA
constexpr int kKeys = 32;                     // keys per shared-memory tile
static_assert(kKeys % kGroup == 0, "each lane owns kKeys / kGroup scores of a tile");
static_assert(kKeys == kQueries, "aligned equal tiles: every visited key tile holds a key ≤ each query");

template <int DPL>
__global__ void __launch_bounds__(kThreads, 2)  // 2 CTAs per SM: ≤ 128 registers, no spills at any DPL
attention_causal_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                        int64_t n_tok, int n_heads, int n_kv_heads, int head_dim, float scale, float* out,
                        __nv_bfloat16* out_bf16) {
    constexpr int W = kGroup * DPL;  // shared-memory row width (head_dim rounded up)
    constexpr int kOwn = kKeys / kGroup;
    extern __shared__ float smem[];
    float* ks = smem;              // [kKeys][W]
    float* vs = smem + kKeys * W;  // [kKeys][W]

    const int h = blockIdx.y, seq = blockIdx.z;
    const int kv_head = h / (n_heads / n_kv_heads);
    const int64_t q_width = int64_t(n_heads) * head_dim, kv_width = int64_t(n_kv_heads) * head_dim;
    const int lane = threadIdx.x % kGroup;
    // Heaviest query tiles (the last positions) first: better tail balance across SMs.
    const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kQueries;
    const int64_t t_own = q0 + threadIdx.x / kGroup;
    const bool active = t_own < n_tok;
    const int64_t t = active ? t_own : n_tok - 1;
    const int64_t last_key = (q0 + kQueries < n_tok ? q0 + kQueries : n_tok) - 1;

    const int64_t seq_row0 = int64_t(seq) * n_tok;
    const float* qrow = q + (seq_row0 + t) * q_width + int64_t(h) * head_dim;
    const float* kbase = k + seq_row0 * kv_width + int64_t(kv_head) * head_dim;
    const float* vbase = v + seq_row0 * kv_width + int64_t(kv_head) * head_dim;

    float qv[DPL], acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
        const int e = lane + kGroup * i;
        qv[i] = e < head_dim ? qrow[e] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;

    for (int64_t k0 = 0; k0 <= last_key; k0 += kKeys) {
        __syncthreads();  // the previous tile has been consumed
        for (int idx = threadIdx.x; idx < kKeys * W; idx += kThreads) {
            const int jj = idx / W, e = idx % W;
            const int64_t j = k0 + jj;
            const bool ok = e < head_dim && j <= last_key;
            ks[idx] = ok ? kbase[j * kv_width + e] : 0.0f;
            vs[idx] = ok ? vbase[j * kv_width + e] : 0.0f;
        }
        __syncthreads();

        // Key jj = c·kGroup + g of the tile is scored by the whole group and kept by lane g in s_own[c]. (The
        // arrays are indexed only by the unrolled c loop, so they stay in registers whether or not the
        // compiler unrolls the g loop.)
        float s_own[kOwn];
#pragma unroll
        for (int c = 0; c < kOwn; ++c) {
            float mine = -INFINITY;
#pragma unroll
            for (int g = 0; g < kGroup; ++g) {
                const int jj = c * kGroup + g;
                float part = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; ++i) part = fmaf(qv[i], ks[jj * W + lane + kGroup * i], part);
#pragma unroll
                for (int o = kGroup / 2; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
                if (g == lane && k0 + jj <= t) mine = part * scale;  // (q·k)·scale, as the CPU
            }
            s_own[c] = mine;
        }

        float tile_max = s_own[0];
#pragma unroll
        for (int c = 1; c < kOwn; ++c) tile_max = fmaxf(tile_max, s_own[c]);
#pragma unroll
        for (int o = kGroup / 2; o > 0; o >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
        const float m_new = fmaxf(m, tile_max);  // finite (see the top of the file)

        float p_own[kOwn], p_sum = 0.0f;
#pragma unroll
        for (int c = 0; c < kOwn; ++c) {
            p_own[c] = expf(s_own[c] - m_new);  // 0 for masked keys
            p_sum += p_own[c];
        }
#pragma unroll
        for (int o = kGroup / 2; o > 0; o >>= 1) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, o);
        const float corr = expf(m - m_new);  // 0 on the first tile (m = −∞)
        l = l * corr + p_sum;
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[i] *= corr;
#pragma unroll
        for (int c = 0; c < kOwn; ++c) {
#pragma unroll
            for (int g = 0; g < kGroup; ++g) {
                const int jj = c * kGroup + g;
                const float p = __shfl_sync(0xffffffffu, p_own[c], g, kGroup);
#pragma unroll
                for (int i = 0; i < DPL; ++i) acc[i] = fmaf(p, vs[jj * W + lane + kGroup * i], acc[i]);
            }
        }
        m = m_new;
    }

    if (!active) return;
    const float inv = 1.0f / l;
    const int64_t o_off = (seq_row0 + t) * q_width + int64_t(h) * head_dim;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
        const int e = lane + kGroup * i;
        if (e >= head_dim) continue;
        const float o = acc[i] * inv;
        if (out) out[o_off + e] = o;
        if (out_bf16) out_bf16[o_off + e] = __float2bfloat16_rn(o);
    }
}

template <int DPL>
void launch(const float* q, const float* k, const float* v, BatchShape shape, int n_heads, int n_kv_heads, int head_dim,
            float scale, float* out, __nv_bfloat16* out_bf16, cudaStream_t stream) {
    const size_t smem = size_t(2) * kKeys * kGroup * DPL * sizeof(float);
    if (smem > 48 * 1024) cuda_allow_dynamic_shared_memory(reinterpret_cast<const void*>(attention_causal_kernel<DPL>), int(smem));
    const dim3 grid{unsigned((shape.n_tok + kQueries - 1) / kQueries), unsigned(n_heads), unsigned(shape.n_seq)};
    attention_causal_kernel<DPL><<<grid, kThreads, smem, stream>>>(q, k, v, shape.n_tok, n_heads, n_kv_heads, head_dim,
                                                                  scale, out, out_bf16);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void attention_causal_cuda(const float* q, const float* k, const float* v, BatchShape shape, int64_t n_heads,
                           int64_t n_kv_heads, int64_t head_dim, float* out, __nv_bfloat16* out_bf16, cudaStream_t stream) {
    if (!out && !out_bf16) cuda_usage_error("attention_causal_cuda: no output given");
    if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
        cuda_usage_error("attention_causal_cuda: " + std::to_string(n_heads) + " query heads cannot share " +
                         std::to_string(n_kv_heads) + " key/value heads evenly");
    if (head_dim <= 0 || head_dim > kAttentionMaxHeadDim)
        cuda_usage_error("attention_causal_cuda: head_dim " + std::to_string(head_dim) + " is not supported (1.." +
                         std::to_string(kAttentionMaxHeadDim) + ")");
    if (n_heads > 65535 || shape.n_seq > 65535)
        cuda_usage_error("attention_causal_cuda: at most 65535 heads and 65535 sequences per call");
    if (shape.n_seq <= 0 || shape.n_tok <= 0) return;
    if ((shape.n_tok + kQueries - 1) / kQueries > INT32_MAX) cuda_usage_error("attention_causal_cuda: sequence too long");
    const float scale = float(1.0 / std::sqrt(double(head_dim)));  // as the CPU reference
    const int nh = int(n_heads), nkv = int(n_kv_heads), hd = int(head_dim);
    if (hd <= 8) launch<1>(q, k, v, shape, nh, nkv, hd, scale, out, out_bf16, stream);
    else if (hd <= 16) launch<2>(q, k, v, shape, nh, nkv, hd, scale, out, out_bf16, stream);
    else if (hd <= 32) launch<4>(q, k, v, shape, nh, nkv, hd, scale, out, out_bf16, stream);
    else if (hd <= 64) launch<8>(q, k, v, shape, nh, nkv, hd, scale, out, out_bf16, stream);
    else if (hd <= 128) launch<16>(q, k, v, shape, nh, nkv, hd, scale, out, out_bf16, stream);
    else launch<32>(q, k, v, shape, nh, nkv, hd, scale, out, out_bf16, stream);
}

}  // namespace lowbit
