// flash_attention_cuda.cu — causal GQA attention for training on BF16 tensor cores (see flash_attention_cuda.cuh).
//
// Tiles: 64 queries × 64 keys; 4 warps per CTA, each warp owns 16 rows of the CTA's tile (the m of
// mma.sync m16n8k16, BF16 × BF16 → FP32). Operands sit in shared memory as [64][head_dim + 8] BF16 rows: the
// 16-byte pad puts the 8 row addresses of every ldmatrix in distinct banks for each head_dim. Fragments come
// from ldmatrix (row-major A, B stored [n][k]) or ldmatrix.trans (B stored [k][n]); an FP32 accumulator of
// m16n8 is, packed to BF16 pairs, the A fragment of the next product (FlashAttention's register reuse).
// Scores are kept in log2 units: s·log2(e)/√head_dim, so every exponential is one exp2f.
//
//   forward   CTA = (query tile, head, sequence); key/value tiles 0..diagonal stream through a double buffer
//             (cp.async, the next tile in flight while the current one is used): S = Q·Kᵀ, online softmax
//             (running row max m, row sum l of the FP32 probabilities), O = O·e^(m−m') + P·V with P rounded to
//             BF16; out = O/l, lse = ln Σ e^(score).
//   row_dot   D[row, head] = Σ dO·O over head_dim (FP32, from the BF16 out).
//   dK/dV     CTA = (key tile, key/value head, sequence); its K and V tiles stay in shared memory; it loops
//             over the group's query heads, and for each over the query tiles from the diagonal on (Q, dO, lse,
//             D double-buffered): Sᵀ = K·Qᵀ, Pᵀ = e^(Sᵀ − lse), dV += Pᵀ·dO, dPᵀ = V·dOᵀ,
//             dSᵀ = Pᵀ ⊙ (dPᵀ − D)/√head_dim, dK += dSᵀ·Q. One CTA sums each dK/dV element in a fixed order:
//             no atomics, bit-identical runs.
//   dQ        CTA = (query tile, head, sequence) over key tiles 0..diagonal: S, P, dP = dO·Vᵀ, dS as above,
//             dQ += dS·K.
// Masks: only the diagonal tile pair needs the causal mask (key > query → probability 0); every query row sees
// key 0, so the forward's running max is finite after its first tile. Rows past n_tok are zeros in shared
// memory and are never stored; in the backward their lse is +∞ (probability 0) and their D is 0.
//
// Numerics (the test's tolerances come from here): products of BF16 operands are exact in the FP32
// accumulators, so S and dP differ from the FP32 CPU reference only by summation order. P (forward, dV) and
// dS (dQ, dK) are rounded to BF16 before their products (relative error ≤ 2^-8 per element, independent
// between elements), and D is computed from the BF16-rounded output; outputs are rounded to BF16 (≤ 2^-8).
// Expected: RMS error ≈ 2^-8 of the RMS value, max error a few BF16 ulps of the largest value.
//
// Napkin math (the engine's shape: 16 sequences × 1024 tokens, 12 heads of 64, 4 key/value heads): forward
// 4·16·12·1024²·64/2 = 25.8 GFLOP on tensor cores (causal half; the diagonal tiles are computed whole, +3 %);
// the backward recomputes S and dP in both of its kernels: 7 products against the forward's 2 (3.5×, against
// the 2.5× convention of the FLOP count). Memory: each forward CTA reads its keys/values once from L2
// (≈ 1024/2·64·2·2 B = 128 KB per CTA, 3072 CTAs), HBM traffic is the tensors themselves (≈ 100 MB):
// compute-bound. Ceiling: mma.sync BF16 on the H200 reaches ~60–70 % of the 990 TFLOP/s dense peak.
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "model/cuda/flash_attention_cuda.cuh"

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/cuda/device_loads.cuh"
#include "core/cuda/device_math.cuh"

namespace lowbit {

namespace {

using namespace cuda_detail;
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;  // queries per query tile, keys per key tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpRows = 16;  // the tile rows of one warp: the m of m16n8k16
static_assert(kWarps * kWarpRows == kTile, "the warps cover the tile's rows");
static_assert(kThreads == 2 * kTile, "dK/dV: one thread per lse and one per D value of a query tile");
constexpr int kTileSteps = kTile / 16;  // k-steps of 16 along a tile's 64 columns
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HD>
constexpr int kStride = HD + 8;  // shared row in elements: 16 bytes of pad (bank-conflict-free ldmatrix)
template <int HD>
constexpr int kTileElems = kTile * kStride<HD>;

// --- PTX wrappers (sm_80+) ---

__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// Four 8×8 BF16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it
// (lane l: row l/4, elements 2(l%4), 2(l%4)+1; with .trans the matrix is transposed on the way).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// c (16×8, FP32) += a (16×16, BF16, row-major) · b (16×8, BF16, column-major).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// --- fragments of padded shared tiles ---
// Accumulator element e of n-tile nt of a warp: row (lane/4) + 8·(e/2), column 8·nt + 2·(lane%4) + e%2.

__device__ __forceinline__ int lane_id() { return int(threadIdx.x % 32); }

// The A fragments (16 rows × HD, row-major, HD/16 k-steps) of rows r0..r0+15 of a tile.
template <int HD>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[HD / 16][4], const bf16* tile, int r0) {
    const int lane = lane_id();
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) ldmatrix_x4(a[ks], tile + (r0 + (lane & 15)) * kStride<HD> + 16 * ks + (lane >> 4) * 8);
}

// acc (16 × 64) += A · Bᵀ over HD: A in registers, B = the 64 rows of a tile stored [n][k] (the product's
// columns are the tile's rows). ldmatrix x4 gives the B fragments of n-tiles n0 (regs 0, 1) and n0 + 8 (2, 3).
template <int HD>
__device__ __forceinline__ void warp_product_nt(float (&acc)[kTile / 8][4], const uint32_t (&a)[HD / 16][4], const bf16* b_tile) {
    const int lane = lane_id();
    const bf16* b_row = b_tile + ((lane & 7) + ((lane >> 4) << 3)) * kStride<HD> + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks)
#pragma unroll
        for (int np = 0; np < kTile / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, b_row + 16 * np * kStride<HD> + 16 * ks);
            mma_bf16(acc[2 * np], a[ks], b[0], b[1]);
            mma_bf16(acc[2 * np + 1], a[ks], b[2], b[3]);
        }
}

// acc (16 × HD) += P · B over the tile's 64 rows: P as A fragments (4 k-steps), B = a tile stored [k][n]
// (rows k, HD columns n), transposed by ldmatrix.trans.
template <int HD>
__device__ __forceinline__ void warp_product_nn(float (&acc)[HD / 8][4], const uint32_t (&p)[kTileSteps][4], const bf16* b_tile) {
    const int lane = lane_id();
    const bf16* b_row = b_tile + (lane & 15) * kStride<HD> + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < kTileSteps; ++kk)
#pragma unroll
        for (int np = 0; np < HD / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, b_row + 16 * kk * kStride<HD> + 16 * np);
            mma_bf16(acc[2 * np], p[kk], b[0], b[1]);
            mma_bf16(acc[2 * np + 1], p[kk], b[2], b[3]);
        }
}

// A 16 × 64 FP32 accumulator as the BF16 A fragments of the next product (its 64 columns become k).
__device__ __forceinline__ void to_a_fragments(uint32_t (&p)[kTileSteps][4], const float (&s)[kTile / 8][4]) {
#pragma unroll
    for (int kk = 0; kk < kTileSteps; ++kk) {
        p[kk][0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
        p[kk][1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
        p[kk][2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[kk][3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

// 64 rows × HD of a [rows, width] BF16 matrix (src = its first row, at the head's column) into a padded tile
// by cp.async; rows at or past n_valid become zeros (plain stores: both are visible after the caller's
// wait and __syncthreads).
template <int HD>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, int64_t width, int64_t n_valid) {
    constexpr int kPieces = HD / 8;  // 16-byte pieces per row
    static_assert(kTile * kPieces % kThreads == 0, "every thread copies the same number of pieces");
#pragma unroll
    for (int i = 0; i < kTile * kPieces / kThreads; ++i) {
        const int c = int(threadIdx.x) + i * kThreads, r = c / kPieces, piece = c % kPieces;
        bf16* dst = tile + r * kStride<HD> + piece * 8;
        if (r < n_valid) cp_async16(dst, src + r * width + piece * 8);
        else *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    }
}

// Writes a warp's 16 × HD FP32 accumulator as BF16 rows (row0 = the warp's first row in the matrix), scaled by
// row_scale[0] (rows lane/4) and row_scale[1] (rows lane/4 + 8); rows at or past n_valid are skipped.
template <int HD>
__device__ __forceinline__ void store_rows(bf16* dst, int64_t width, int64_t n_valid, const float (&acc)[HD / 8][4],
                                           const float (&row_scale)[2]) {
    const int lane = lane_id();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = lane / 4 + 8 * half;
        if (r >= n_valid) continue;
        bf16* row = dst + r * width + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < HD / 8; ++nt)
            *reinterpret_cast<uint32_t*>(row + 8 * nt) =
                pack_bf16x2(acc[nt][2 * half] * row_scale[half], acc[nt][2 * half + 1] * row_scale[half]);
    }
}

// Shapes every kernel receives.
struct Dims {
    int64_t n_tok;
    int n_heads, n_kv_heads, group;  // group = n_heads / n_kv_heads
    float score_log2;                // log2(e)/√head_dim: score in log2 units
    float score_scale;               // 1/√head_dim
};

// ---------------------------------------------------------------------------------------------------
// forward

template <int HD>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                                                 const bf16* __restrict__ v, Dims dims, bf16* __restrict__ out,
                                                                 float* __restrict__ lse) {
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* q_s = reinterpret_cast<bf16*>(smem);
    bf16* k_s = q_s + kTileElems<HD>;      // [2] tiles
    bf16* v_s = k_s + 2 * kTileElems<HD>;  // [2] tiles

    const int h = int(blockIdx.x), seq = int(blockIdx.y);
    const int qt = int(gridDim.z - 1 - blockIdx.z);  // the longest rows (most key tiles) first
    const int64_t n_tok = dims.n_tok, q0 = int64_t(qt) * kTile;
    const int64_t q_width = int64_t(dims.n_heads) * HD, kv_width = int64_t(dims.n_kv_heads) * HD;
    const bf16* q_seq = q + int64_t(seq) * n_tok * q_width + int64_t(h) * HD;
    const int64_t kv_offset = int64_t(seq) * n_tok * kv_width + int64_t(h / dims.group) * HD;
    const bf16* k_seq = k + kv_offset;
    const bf16* v_seq = v + kv_offset;

    load_tile<HD>(q_s, q_seq + q0 * q_width, q_width, n_tok - q0);
    load_tile<HD>(k_s, k_seq, kv_width, n_tok);
    load_tile<HD>(v_s, v_seq, kv_width, n_tok);
    cp_async_commit();

    const int warp = int(threadIdx.x / 32), lane = lane_id();
    const int row_in_tile = warp * kWarpRows + lane / 4;  // + 8 for accumulator elements 2, 3
    uint32_t qa[HD / 16][4];
    float o[HD / 8][4];
    zero(o);
    float m[2] = {-INFINITY, -INFINITY};  // running row max, log2 units
    float l[2] = {0.0f, 0.0f};            // this lane's part of the row sum (the quad's sum at the end)

    for (int kt = 0; kt <= qt; ++kt) {
        if (kt < qt) {
            const int64_t k0 = int64_t(kt + 1) * kTile;
            const int buf = (kt + 1) & 1;
            load_tile<HD>(k_s + buf * kTileElems<HD>, k_seq + k0 * kv_width, kv_width, n_tok - k0);
            load_tile<HD>(v_s + buf * kTileElems<HD>, v_seq + k0 * kv_width, kv_width, n_tok - k0);
        }
        cp_async_commit();  // possibly empty: keeps "tile kt is the older group" true
        cp_async_wait<1>();
        __syncthreads();
        if (kt == 0) load_a_fragments<HD>(qa, q_s, warp * kWarpRows);
        const bf16* ks = k_s + (kt & 1) * kTileElems<HD>;
        const bf16* vs = v_s + (kt & 1) * kTileElems<HD>;

        float s[kTile / 8][4];
        zero(s);
        warp_product_nt<HD>(s, qa, ks);
        if (kt == qt) {  // the diagonal tile: keys after the query are masked
#pragma unroll
            for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (8 * nt + 2 * (lane % 4) + (e & 1) > row_in_tile + 8 * (e >> 1)) s[nt][e] = -INFINITY;
        }

        float corr[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < kTile / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * half], s[nt][2 * half + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));  // the quad holds the row
            mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
            const float m_new = fmaxf(m[half], mx * dims.score_log2);  // finite: key 0 of the tile is visible
            corr[half] = exp2f(m[half] - m_new);                        // 0 on the first tile
            m[half] = m_new;
            l[half] *= corr[half];
        }
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float p = exp2f(fmaf(s[nt][e], dims.score_log2, -m[e >> 1]));  // masked: e^−∞ = 0
                s[nt][e] = p;
                l[e >> 1] += p;
            }
#pragma unroll
        for (int nt = 0; nt < HD / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[nt][e] *= corr[e >> 1];
        uint32_t pa[kTileSteps][4];
        to_a_fragments(pa, s);
        warp_product_nn<HD>(o, pa, vs);
        __syncthreads();  // every warp is done with buffer kt & 1 before it is refilled
    }

    float inv_l[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float sum = l[half];
        sum += __shfl_xor_sync(kFullMask, sum, 1);
        sum += __shfl_xor_sync(kFullMask, sum, 2);
        inv_l[half] = 1.0f / sum;
        const int64_t t = q0 + row_in_tile + 8 * half;
        if (lane % 4 == 0 && t < n_tok)
            lse[(int64_t(seq) * dims.n_heads + h) * n_tok + t] = (m[half] + log2f(sum)) * kLn2;
    }
    const int64_t r0 = q0 + warp * kWarpRows;
    store_rows<HD>(out + (int64_t(seq) * n_tok + r0) * q_width + int64_t(h) * HD, q_width, n_tok - r0, o, inv_l);
}

// ---------------------------------------------------------------------------------------------------
// backward

// row_dot[seq, h, t] = Σ_e dO·O of (row, head): HD/8 lanes per (row, head), 8 elements each, then a butterfly.
template <int HD>
__global__ void row_dot_kernel(const bf16* __restrict__ out, const bf16* __restrict__ d_out, int64_t n_items, int64_t n_tok,
                               int n_heads, float* __restrict__ row_dot) {
    constexpr int kLanes = HD / 8;
    const int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;  // row·n_heads + head
    const int part = int(threadIdx.x % kLanes);
    const bool active = item < n_items;
    float sum = 0.0f;
    if (active) {
        float a[8], b[8];
        load8(out + item * HD + part * 8, a);
        load8(d_out + item * HD + part * 8, b);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = fmaf(a[i], b[i], sum);
    }
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(kFullMask, sum, o);
    if (active && part == 0) {
        const int64_t row = item / n_heads, h = item % n_heads, seq = row / n_tok, t = row % n_tok;
        row_dot[(seq * n_heads + h) * n_tok + t] = sum;
    }
}

template <int HD>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                                                       const bf16* __restrict__ v, const float* __restrict__ lse,
                                                                       const bf16* __restrict__ d_out,
                                                                       const float* __restrict__ row_dot, Dims dims,
                                                                       bf16* __restrict__ dk, bf16* __restrict__ dv) {
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* k_s = reinterpret_cast<bf16*>(smem);
    bf16* v_s = k_s + kTileElems<HD>;
    bf16* q_s = v_s + kTileElems<HD>;       // [2] tiles
    bf16* do_s = q_s + 2 * kTileElems<HD>;  // [2] tiles
    float* lse_s = reinterpret_cast<float*>(do_s + 2 * kTileElems<HD>);  // [2][kTile], log2 units
    float* dot_s = lse_s + 2 * kTile;                                      // [2][kTile]

    const int kv_head = int(blockIdx.x), seq = int(blockIdx.y), kt = int(blockIdx.z);  // key tile 0 (most work) first
    const int64_t n_tok = dims.n_tok, k0 = int64_t(kt) * kTile;
    const int n_qt = int((n_tok + kTile - 1) / kTile), q_tiles = n_qt - kt, steps = dims.group * q_tiles;
    const int64_t q_width = int64_t(dims.n_heads) * HD, kv_width = int64_t(dims.n_kv_heads) * HD;
    const int64_t kv_offset = (int64_t(seq) * n_tok + k0) * kv_width + int64_t(kv_head) * HD;

    // Step i: query head kv_head·group + i / q_tiles, query tile kt + i % q_tiles — the fixed summation order.
    auto load_step = [&](int step, int buf) {
        const int h = kv_head * dims.group + step / q_tiles;
        const int64_t q0 = int64_t(kt + step % q_tiles) * kTile;
        const int64_t q_offset = (int64_t(seq) * n_tok + q0) * q_width + int64_t(h) * HD;
        load_tile<HD>(q_s + buf * kTileElems<HD>, q + q_offset, q_width, n_tok - q0);
        load_tile<HD>(do_s + buf * kTileElems<HD>, d_out + q_offset, q_width, n_tok - q0);
        const int i = int(threadIdx.x) % kTile;
        const int64_t t = q0 + i, stat = (int64_t(seq) * dims.n_heads + h) * n_tok + t;
        if (threadIdx.x < kTile) lse_s[buf * kTile + i] = t < n_tok ? lse[stat] * kLog2e : INFINITY;
        else if (threadIdx.x < 2 * kTile) dot_s[buf * kTile + i] = t < n_tok ? row_dot[stat] : 0.0f;
    };
    load_tile<HD>(k_s, k + kv_offset, kv_width, n_tok - k0);
    load_tile<HD>(v_s, v + kv_offset, kv_width, n_tok - k0);
    load_step(0, 0);
    cp_async_commit();

    const int warp = int(threadIdx.x / 32), lane = lane_id();
    const int key_in_tile = warp * kWarpRows + lane / 4;  // + 8 for accumulator elements 2, 3
    float dk_acc[HD / 8][4], dv_acc[HD / 8][4];
    zero(dk_acc);
    zero(dv_acc);

    for (int step = 0; step < steps; ++step) {
        if (step + 1 < steps) load_step(step + 1, (step + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int buf = step & 1;
        const bool diagonal = step % q_tiles == 0;
        const bf16* qs = q_s + buf * kTileElems<HD>;
        const bf16* dos = do_s + buf * kTileElems<HD>;
        const float* lse_t = lse_s + buf * kTile;
        const float* dot_t = dot_s + buf * kTile;

        float p[kTile / 8][4];  // Pᵀ: rows = this warp's keys, columns = the tile's queries
        zero(p);
        {
            uint32_t ka[HD / 16][4];
            load_a_fragments<HD>(ka, k_s, warp * kWarpRows);
            warp_product_nt<HD>(p, ka, qs);
        }
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 8 * nt + 2 * (lane % 4) + (e & 1);
                const float pe = exp2f(fmaf(p[nt][e], dims.score_log2, -lse_t[i]));
                p[nt][e] = diagonal && i < key_in_tile + 8 * (e >> 1) ? 0.0f : pe;
            }
        float dp[kTile / 8][4];  // dPᵀ = V·dOᵀ
        zero(dp);
        {
            uint32_t va[HD / 16][4];
            load_a_fragments<HD>(va, v_s, warp * kWarpRows);
            warp_product_nt<HD>(dp, va, dos);
        }
        uint32_t pa[kTileSteps][4];
        to_a_fragments(pa, p);
        warp_product_nn<HD>(dv_acc, pa, dos);  // dV += Pᵀ·dO
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 8 * nt + 2 * (lane % 4) + (e & 1);
                p[nt][e] = p[nt][e] * (dp[nt][e] - dot_t[i]) * dims.score_scale;  // dSᵀ
            }
        to_a_fragments(pa, p);
        warp_product_nn<HD>(dk_acc, pa, qs);  // dK += dSᵀ·Q
        __syncthreads();
    }

    const float one[2] = {1.0f, 1.0f};
    const int64_t r0 = k0 + warp * kWarpRows;
    const int64_t offset = (int64_t(seq) * n_tok + r0) * kv_width + int64_t(kv_head) * HD;
    store_rows<HD>(dk + offset, kv_width, n_tok - r0, dk_acc, one);
    store_rows<HD>(dv + offset, kv_width, n_tok - r0, dv_acc, one);
}

template <int HD>
__global__ void __launch_bounds__(kThreads) flash_backward_dq_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                                                     const bf16* __restrict__ v, const float* __restrict__ lse,
                                                                     const bf16* __restrict__ d_out,
                                                                     const float* __restrict__ row_dot, Dims dims,
                                                                     bf16* __restrict__ dq) {
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* q_s = reinterpret_cast<bf16*>(smem);
    bf16* do_s = q_s + kTileElems<HD>;
    bf16* k_s = do_s + kTileElems<HD>;     // [2] tiles
    bf16* v_s = k_s + 2 * kTileElems<HD>;  // [2] tiles

    const int h = int(blockIdx.x), seq = int(blockIdx.y);
    const int qt = int(gridDim.z - 1 - blockIdx.z);  // the longest rows first
    const int64_t n_tok = dims.n_tok, q0 = int64_t(qt) * kTile;
    const int64_t q_width = int64_t(dims.n_heads) * HD, kv_width = int64_t(dims.n_kv_heads) * HD;
    const int64_t q_offset = (int64_t(seq) * n_tok + q0) * q_width + int64_t(h) * HD;
    const int64_t kv_offset = int64_t(seq) * n_tok * kv_width + int64_t(h / dims.group) * HD;

    load_tile<HD>(q_s, q + q_offset, q_width, n_tok - q0);
    load_tile<HD>(do_s, d_out + q_offset, q_width, n_tok - q0);
    load_tile<HD>(k_s, k + kv_offset, kv_width, n_tok);
    load_tile<HD>(v_s, v + kv_offset, kv_width, n_tok);
    cp_async_commit();

    const int warp = int(threadIdx.x / 32), lane = lane_id();
    const int row_in_tile = warp * kWarpRows + lane / 4;  // + 8 for accumulator elements 2, 3
    float lse_row[2], dot_row[2];                         // log2 units; +∞ / 0 for rows past n_tok
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int64_t t = q0 + row_in_tile + 8 * half, stat = (int64_t(seq) * dims.n_heads + h) * n_tok + t;
        lse_row[half] = t < n_tok ? lse[stat] * kLog2e : INFINITY;
        dot_row[half] = t < n_tok ? row_dot[stat] : 0.0f;
    }
    float dq_acc[HD / 8][4];
    zero(dq_acc);

    for (int kt = 0; kt <= qt; ++kt) {
        if (kt < qt) {
            const int64_t k0 = int64_t(kt + 1) * kTile;
            const int buf = (kt + 1) & 1;
            load_tile<HD>(k_s + buf * kTileElems<HD>, k + kv_offset + k0 * kv_width, kv_width, n_tok - k0);
            load_tile<HD>(v_s + buf * kTileElems<HD>, v + kv_offset + k0 * kv_width, kv_width, n_tok - k0);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* ks = k_s + (kt & 1) * kTileElems<HD>;
        const bf16* vs = v_s + (kt & 1) * kTileElems<HD>;

        float p[kTile / 8][4];
        zero(p);
        {
            uint32_t qa[HD / 16][4];
            load_a_fragments<HD>(qa, q_s, warp * kWarpRows);
            warp_product_nt<HD>(p, qa, ks);
        }
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float pe = exp2f(fmaf(p[nt][e], dims.score_log2, -lse_row[e >> 1]));
                p[nt][e] = kt == qt && 8 * nt + 2 * (lane % 4) + (e & 1) > row_in_tile + 8 * (e >> 1) ? 0.0f : pe;
            }
        float dp[kTile / 8][4];  // dP = dO·Vᵀ
        zero(dp);
        {
            uint32_t da[HD / 16][4];
            load_a_fragments<HD>(da, do_s, warp * kWarpRows);
            warp_product_nt<HD>(dp, da, vs);
        }
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) p[nt][e] = p[nt][e] * (dp[nt][e] - dot_row[e >> 1]) * dims.score_scale;  // dS
        uint32_t pa[kTileSteps][4];
        to_a_fragments(pa, p);
        warp_product_nn<HD>(dq_acc, pa, ks);  // dQ += dS·K
        __syncthreads();
    }

    const float one[2] = {1.0f, 1.0f};
    const int64_t r0 = q0 + warp * kWarpRows;
    store_rows<HD>(dq + (int64_t(seq) * n_tok + r0) * q_width + int64_t(h) * HD, q_width, n_tok - r0, dq_acc, one);
}

// ---------------------------------------------------------------------------------------------------
// launchers

// Checks shared by both directions; returns the kernels' dims (n_tok ≥ 1, n_seq ≥ 1 assumed by the caller).
Dims checked_dims(const char* op, BatchShape shape, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
    const std::string name = op;
    if (!flash_attention_head_dim_supported(head_dim))
        cuda_usage_error(name + ": head_dim " + std::to_string(head_dim) + " is not supported (16, 32, 64 or 128)");
    if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
        cuda_usage_error(name + ": " + std::to_string(n_heads) + " query heads cannot share " + std::to_string(n_kv_heads) +
                         " key/value heads evenly");
    if (shape.n_seq < 0 || shape.n_tok < 0) cuda_usage_error(name + ": negative batch shape");
    if (n_heads > INT32_MAX || shape.n_seq > 65535 || (shape.n_tok + kTile - 1) / kTile > 65535)
        cuda_usage_error(name + ": at most 65535 sequences of 4194240 tokens per call (" + std::to_string(shape.n_seq) +
                         " × " + std::to_string(shape.n_tok) + " given)");
    const float scale = float(1.0 / std::sqrt(double(head_dim)));  // as the CPU reference
    return Dims{shape.n_tok, int(n_heads), int(n_kv_heads), int(n_heads / n_kv_heads), float(kLog2e * double(scale)),
                scale};
}

template <typename Kernel>
void prepare(Kernel kernel, size_t smem_bytes) {
    cuda_allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), int(smem_bytes));
}

template <int HD>
void forward_launch(const bf16* q, const bf16* k, const bf16* v, BatchShape shape, const Dims& dims, bf16* out, float* lse,
                    cudaStream_t stream) {
    const size_t smem = size_t(5) * kTileElems<HD> * sizeof(bf16);
    prepare(flash_forward_kernel<HD>, smem);
    const dim3 grid{unsigned(dims.n_heads), unsigned(shape.n_seq), unsigned((shape.n_tok + kTile - 1) / kTile)};
    flash_forward_kernel<HD><<<grid, kThreads, smem, stream>>>(q, k, v, dims, out, lse);
    CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void backward_launch(const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse, const bf16* d_out,
                     BatchShape shape, const Dims& dims, bf16* dq, bf16* dk, bf16* dv, float* row_dot, cudaStream_t stream) {
    const int64_t n_items = shape.rows() * dims.n_heads;
    constexpr int kDotThreads = 256;
    const int64_t dot_blocks = (n_items * (HD / 8) + kDotThreads - 1) / kDotThreads;
    row_dot_kernel<HD><<<unsigned(dot_blocks), kDotThreads, 0, stream>>>(out, d_out, n_items, shape.n_tok, dims.n_heads, row_dot);
    CUDA_CHECK(cudaGetLastError());

    const unsigned n_tiles = unsigned((shape.n_tok + kTile - 1) / kTile);
    const size_t dkdv_smem = size_t(6) * kTileElems<HD> * sizeof(bf16) + size_t(4) * kTile * sizeof(float);
    prepare(flash_backward_dkdv_kernel<HD>, dkdv_smem);
    flash_backward_dkdv_kernel<HD><<<dim3{unsigned(dims.n_kv_heads), unsigned(shape.n_seq), n_tiles}, kThreads, dkdv_smem, stream>>>(
        q, k, v, lse, d_out, row_dot, dims, dk, dv);
    CUDA_CHECK(cudaGetLastError());

    const size_t dq_smem = size_t(6) * kTileElems<HD> * sizeof(bf16);
    prepare(flash_backward_dq_kernel<HD>, dq_smem);
    flash_backward_dq_kernel<HD><<<dim3{unsigned(dims.n_heads), unsigned(shape.n_seq), n_tiles}, kThreads, dq_smem, stream>>>(
        q, k, v, lse, d_out, row_dot, dims, dq);
    CUDA_CHECK(cudaGetLastError());
}

void check_aligned_16(const char* op, std::initializer_list<std::pair<const void*, const char*>> pointers) {
    for (const auto& [p, what] : pointers) cuda_check_aligned(p, 16, what, op);
}

}  // namespace

bool flash_attention_head_dim_supported(int64_t head_dim) {
    return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

void flash_attention_forward_cuda(const bf16* q, const bf16* k, const bf16* v, BatchShape shape, int64_t n_heads,
                                  int64_t n_kv_heads, int64_t head_dim, bf16* out, float* lse, cudaStream_t stream) {
    constexpr const char* op = "flash_attention_forward_cuda";
    const Dims dims = checked_dims(op, shape, n_heads, n_kv_heads, head_dim);
    if (shape.n_seq == 0 || shape.n_tok == 0) return;
    check_aligned_16(op, {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}});
    switch (head_dim) {
        case 16: forward_launch<16>(q, k, v, shape, dims, out, lse, stream); break;
        case 32: forward_launch<32>(q, k, v, shape, dims, out, lse, stream); break;
        case 64: forward_launch<64>(q, k, v, shape, dims, out, lse, stream); break;
        default: forward_launch<128>(q, k, v, shape, dims, out, lse, stream); break;
    }
}

void flash_attention_backward_cuda(const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                                   const bf16* d_out, BatchShape shape, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                   bf16* dq, bf16* dk, bf16* dv, FlashAttentionBackwardWorkspace& ws, cudaStream_t stream) {
    constexpr const char* op = "flash_attention_backward_cuda";
    const Dims dims = checked_dims(op, shape, n_heads, n_kv_heads, head_dim);
    if (shape.n_seq == 0 || shape.n_tok == 0) return;
    check_aligned_16(op, {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {d_out, "d_out"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
    float* row_dot = ws.row_dot.grow(size_t(shape.rows() * n_heads));
    switch (head_dim) {
        case 16: backward_launch<16>(q, k, v, out, lse, d_out, shape, dims, dq, dk, dv, row_dot, stream); break;
        case 32: backward_launch<32>(q, k, v, out, lse, d_out, shape, dims, dq, dk, dv, row_dot, stream); break;
        case 64: backward_launch<64>(q, k, v, out, lse, d_out, shape, dims, dq, dk, dv, row_dot, stream); break;
        default: backward_launch<128>(q, k, v, out, lse, d_out, shape, dims, dq, dk, dv, row_dot, stream); break;
    }
}

}  // namespace lowbit
