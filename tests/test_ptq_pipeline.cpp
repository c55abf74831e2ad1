// test_ptq_pipeline.cpp — the PTQ pipeline around the solvers: calibration statistics against one-shot
// products, RoPE averaging against explicit rotations, the block loop (every method on a tiny GGUF model),
// row act-order (act_order_row) reaching q/k only and recorded, the GGUF export read back bit for bit,
// resuming an interrupted run, true-sequential statistics (by input, after the earlier layers were quantized),
// and W·A quantization (--act-bits):
// the calibration sees the activation-quantized path, the exports record it, eval's reader finds it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "io/gguf_file.h"
#include "model_test_util.h"
#include "ptq/calibration.h"
#include "ptq/export_gguf.h"
#include "ptq/export_safetensors.h"
#include "ptq/quantize.h"
#include "model/hf_export.h"
#include "train/train_export.h"

namespace lowbit {
namespace {

// A tiny model whose widths are multiples of 32 (the GGUF block formats' block).
// hidden = 64 (head_dim 16) for the grids of 64-column blocks (NVFP4).
LlamaModel ptq_model(uint64_t seed = 3, int64_t hidden = 32) {
    LlamaModel m;
    m.config = tiny_llama_config(false, true);
    m.config.ffn_size = 64;
    m.config.hidden_size = hidden;
    m.config.head_dim = hidden / m.config.n_heads;
    m.config.rope_pairing = RopePairing::adjacent;  // what a GGUF of arch llama holds
    m.weights = random_llama_weights(m.config, seed, 0.3f);
    return m;
}

std::string ptq_gguf(const LlamaModel& m, const std::string& name) {
    const std::string path = test::temp_path(name);
    test::write_model_gguf(m, "llama", path);
    return path;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<double>& b) {
    double m = 0, s = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        m = std::max(m, std::fabs(double(a[i]) - b[i]));
        s = std::max(s, std::fabs(b[i]));
    }
    return m / s;
}

// 2/T·XᵀX in double.
std::vector<double> gram(const std::vector<std::vector<float>>& batches, int64_t n) {
    std::vector<double> g(size_t(n * n), 0.0);
    int64_t t = 0;
    for (const auto& x : batches) {
        const int64_t rows = int64_t(x.size()) / n;
        t += rows;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < n; ++j) g[size_t(i * n + j)] += double(x[size_t(r * n + i)]) * double(x[size_t(r * n + j)]);
    }
    for (double& v : g) v *= 2.0 / double(t);
    return g;
}

// block_v's value Hessians and F2's D_v against their definition summed in double, per (window, query head):
// H_v[g] = 2/T·(1/group)·Σ (A_h X)ᵀ(A_h X), D_v[g] = 2/T·(1/group)·Σ (Ã_h X̃ − A_h X)ᵀ(A_h X) — with the sums
// associated per head and per KV group (Xᵀ·(Σ A_hᵀA_h)·X), which must agree to FP32 rounding.
TEST(PtqCalibration, ValueHessiansEqualTheirDefinitionByHeadAndByGroup) {
    const LlamaModel m = ptq_model();
    const LlamaConfig& c = m.config;
    const BatchShape shape{2, 16};
    const int64_t d = c.hidden_size, T = shape.n_tok, group = c.n_heads / c.n_kv_heads;
    ASSERT_GT(group, 1);
    std::vector<BlockScratch> sq(2), sfp(2);
    for (uint64_t b = 0; b < 2; ++b) {
        const std::vector<int32_t> tok = test::random_tokens(shape.rows(), c.vocab_size, 21 + b);
        std::vector<float> x = embed_tokens(c, m.weights.token_embd.data(), tok.data(), shape);
        std::vector<float> xfp = x;
        for (float& v : xfp) v *= 1.02f;
        block_forward(c, m.weights.blocks[0], 0, xfp.data(), shape, sfp[b]);
        block_forward(c, m.weights.blocks[0], 0, x.data(), shape, sq[b]);
    }
    std::vector<double> hv(size_t(c.n_kv_heads * d * d), 0.0), dv(hv.size(), 0.0);
    std::vector<float> p(size_t(T * T)), pf(size_t(T * T));
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t s = 0; s < shape.n_seq; ++s)
            for (int64_t h = 0; h < c.n_heads; ++h) {
                attention_probabilities(sq[b].q.data(), sq[b].k.data(), shape, c.n_heads, c.n_kv_heads, c.head_dim, s, h, p.data());
                attention_probabilities(sfp[b].q.data(), sfp[b].k.data(), shape, c.n_heads, c.n_kv_heads, c.head_dim, s, h,
                                        pf.data());
                std::vector<double> ax(size_t(T * d), 0.0), afx(size_t(T * d), 0.0);
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t u = 0; u < T; ++u)
                        for (int64_t i = 0; i < d; ++i) {
                            ax[size_t(t * d + i)] += double(p[size_t(t * T + u)]) * sq[b].attn_in[size_t((s * T + u) * d + i)];
                            afx[size_t(t * d + i)] += double(pf[size_t(t * T + u)]) * sfp[b].attn_in[size_t((s * T + u) * d + i)];
                        }
                const int64_t g = h / group;
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t i = 0; i < d; ++i)
                        for (int64_t j = 0; j < d; ++j) {
                            const double a = ax[size_t(t * d + j)];
                            hv[size_t((g * d + i) * d + j)] += ax[size_t(t * d + i)] * a;
                            dv[size_t((g * d + i) * d + j)] += (afx[size_t(t * d + i)] - ax[size_t(t * d + i)]) * a;
                        }
            }
    const double f = 2.0 / double(2 * shape.rows()) / double(group);
    for (double& v : hv) v *= f;
    for (double& v : dv) v *= f;
    std::vector<std::vector<float>> got_h, got_d;
    for (ValueProducts vp : {ValueProducts::by_head, ValueProducts::by_group}) {
        BlockStatsOptions o{true, true, true};
        o.inputs = attention_input;
        BlockStatsAccumulator acc(c, o, vp);
        for (int64_t b = 0; b < 2; ++b) acc.add(sq[size_t(b)], &sfp[size_t(b)], shape);
        const BlockStatistics st = acc.finish(T);
        EXPECT_LT(max_rel_diff(st.h_v, hv), 1e-5) << int(vp);
        double err = 0, scale = 0;  // D against the scale of the Hessian it corrects
        for (size_t i = 0; i < dv.size(); ++i) {
            err = std::max(err, std::fabs(double(st.d_v[i]) - dv[i]));
            scale = std::max(scale, std::fabs(hv[i]));
        }
        EXPECT_LT(err / scale, 1e-5) << int(vp);
        got_h.push_back(st.h_v);
        got_d.push_back(st.d_v);
    }
    EXPECT_NE(got_h[0], got_h[1]);  // two associations, not one code path twice
    LlamaConfig wide = c;
    wide.hidden_size = 4096;
    wide.n_heads = 32;
    wide.n_kv_heads = 8;
    EXPECT_TRUE(block_v_by_group_takes_fewer_flops(wide, 2048));   // 8B: T = 2048 < d = 4096
    EXPECT_FALSE(block_v_by_group_takes_fewer_flops(wide, 16384));  // long windows: per head
}

TEST(PtqCalibration, HessiansEqualOneShotProducts) {
    const LlamaModel m = ptq_model();
    const LlamaConfig& c = m.config;
    const BatchShape shape{2, 16};
    BlockStatsAccumulator acc(c, BlockStatsOptions{true, true, true});
    std::vector<std::vector<float>> attn_in, ffn_act, diff_attn;
    for (uint64_t b = 0; b < 2; ++b) {
        const std::vector<int32_t> tok = test::random_tokens(shape.rows(), c.vocab_size, 11 + b);
        std::vector<float> x = embed_tokens(c, m.weights.token_embd.data(), tok.data(), shape);
        std::vector<float> xfp = x;
        for (float& v : xfp) v *= 1.01f;  // a "full-precision path" that differs
        BlockScratch sq, sfp;
        block_forward(c, m.weights.blocks[0], 0, xfp.data(), shape, sfp);
        block_forward(c, m.weights.blocks[0], 0, x.data(), shape, sq);
        acc.add(sq, &sfp, shape);
        attn_in.push_back(sq.attn_in);
        ffn_act.push_back(sq.ffn_act);
    }
    const BlockStatistics st = acc.finish(shape.n_tok);
    EXPECT_EQ(st.tokens, 2 * shape.rows());
    EXPECT_LT(max_rel_diff(st.h_attn, gram(attn_in, c.hidden_size)), 1e-5);
    EXPECT_LT(max_rel_diff(st.h_down, gram(ffn_act, c.ffn_size)), 1e-5);
    // Value Hessians and D exist with their shapes; H_out per head is symmetric positive semi-definite.
    EXPECT_EQ(st.h_v.size(), size_t(c.n_kv_heads * c.hidden_size * c.hidden_size));
    EXPECT_EQ(st.d_v.size(), st.h_v.size());
    const int64_t hd = c.head_dim;
    for (int64_t h = 0; h < c.n_heads; ++h)
        for (int64_t i = 0; i < hd; ++i) {
            EXPECT_GT(st.h_out_q[size_t(h * hd * hd + i * hd + i)], 0.0f);
            for (int64_t j = 0; j < hd; ++j)
                EXPECT_NEAR(st.h_out_q[size_t(h * hd * hd + i * hd + j)], st.h_out_q[size_t(h * hd * hd + j * hd + i)], 1e-4);
        }
    // GQA folding: query heads of one KV group share the key covariance.
    const int64_t group = c.n_heads / c.n_kv_heads;
    for (int64_t i = 0; i < hd * hd; ++i) EXPECT_EQ(st.h_out_q[size_t(i)], st.h_out_q[size_t((group - 1) * hd * hd + i)]);
}

TEST(PtqCalibration, RopeAverageEqualsExplicitRotations) {
    for (RopePairing pairing : {RopePairing::adjacent, RopePairing::halves}) {
        LlamaConfig c = tiny_llama_config(false, true);
        c.rope_pairing = pairing;
        const int64_t hd = c.head_dim, L = 7;
        std::vector<float> cov(size_t(hd * hd));
        for (int64_t i = 0; i < hd; ++i)
            for (int64_t j = 0; j < hd; ++j) cov[size_t(i * hd + j)] = float(std::sin(double(i * 3 + j)) + (i == j ? 2.0 : 0.0));
        // R_l from apply_rope on the identity: row e_i → R_l e_i (apply_rope rotates each row vector).
        std::vector<float> cos_t, sin_t;
        rope_tables(c, L, cos_t, sin_t);
        std::vector<double> expect(size_t(hd * hd), 0.0);
        for (int64_t l = 0; l < L; ++l) {
            std::vector<float> eye(size_t(L * hd * hd), 0.0f);  // L·hd rows; rows l·hd..: positions l
            for (int64_t i = 0; i < hd; ++i) eye[size_t((l * hd + i) * hd + i)] = 1.0f;
            // Row r of this batch is at position r mod L, so put e_i at rows whose position is l.
            std::vector<float> rows(size_t(hd * L * hd), 0.0f);
            for (int64_t i = 0; i < hd; ++i) rows[size_t((i * L + l) * hd + i)] = 1.0f;
            apply_rope(rows.data(), BatchShape{hd, L}, 1, hd, pairing, cos_t.data(), sin_t.data());
            // rows[(i·L + l)] = (R_l e_i)ᵀ = column i of R_l.
            std::vector<double> r(size_t(hd * hd));
            for (int64_t i = 0; i < hd; ++i)
                for (int64_t k = 0; k < hd; ++k) r[size_t(k * hd + i)] = rows[size_t((i * L + l) * hd + k)];
            for (int64_t i = 0; i < hd; ++i)
                for (int64_t j = 0; j < hd; ++j) {
                    double s = 0;
                    for (int64_t p = 0; p < hd; ++p)
                        for (int64_t q = 0; q < hd; ++q) s += r[size_t(p * hd + i)] * double(cov[size_t(p * hd + q)]) * r[size_t(q * hd + j)];
                    expect[size_t(i * hd + j)] += s / double(L);
                }
        }
        EXPECT_LT(max_rel_diff(rope_averaged(c, cov.data(), L), expect), 1e-5) << rope_pairing_name(pairing);
    }
}

PtqOptions tiny_options(PtqMethod method, const std::string& format) {
    PtqOptions o;
    o.method = method;
    o.grid = parse_grid(format);
    o.calibration.samples = 6;
    o.calibration.length = 24;
    o.batch = 4;
    o.row_block = 4;
    return o;
}

std::vector<int32_t> tiny_windows(const LlamaConfig& c, const PtqOptions& o) {
    std::vector<int32_t> w = test::random_tokens(o.calibration.samples * o.calibration.length, c.vocab_size, 5);
    for (int64_t s = 0; s < o.calibration.samples; ++s) w[size_t(s * o.calibration.length)] = int32_t(c.bos_token_id);
    return w;
}

double total_loss(const PtqReport& r) {
    double s = 0;
    for (const LayerReport& l : r.layers) s += l.loss;
    return s;
}

TEST(PtqPipeline, EveryMethodQuantizesEveryLinear) {
    const LlamaModel m = ptq_model();
    const std::string path = ptq_gguf(m, "ptq_methods.gguf");
    const auto reader = ModelReader::open(path);
    for (const std::string format : {"q4_0", "mxfp4"}) {
        for (PtqMethod method : {PtqMethod::rtn, PtqMethod::gptq, PtqMethod::boa, PtqMethod::turboboa}) {
            PtqOptions o = tiny_options(method, format);
            PtqReport rep;
            const QuantizedModel q = quantize_model(*reader, tiny_windows(m.config, o), o, &rep);
            ASSERT_EQ(q.linears.size(), size_t(7 * m.config.n_layers));
            ASSERT_EQ(rep.layers.size(), q.linears.size());
            // The model holds the dequantized weights of each linear.
            EXPECT_EQ(q.model.weights.blocks[1].w_down, q.linears.at("blk.1.ffn_down").dequantize());
            if (method == PtqMethod::rtn) continue;  // no Hessians: no proxy loss
            EXPECT_GT(total_loss(rep), 0.0) << ptq_method_name(method) << " " << format;
            EXPECT_EQ(rep.calibration_tokens, o.calibration.samples * o.calibration.length);
        }
    }
}

// act_order_row through the block loop (boa, turboboa): block 0's q and k change, while its one-sided layers
// (statistics from the full-precision block, no H_out) stay bit for bit; the record and the GGUF metadata say so.
TEST(PtqPipeline, ActOrderRowReordersOnlyTwoSidedLayersAndIsRecorded) {
    const LlamaModel m = ptq_model();
    const std::string src = ptq_gguf(m, "ptq_act_order_row_src.gguf");
    const auto reader = ModelReader::open(src);
    for (PtqMethod method : {PtqMethod::boa, PtqMethod::turboboa}) {
        PtqOptions o = tiny_options(method, "q4_0");
        const QuantizedModel plain = quantize_model(*reader, tiny_windows(m.config, o), o, nullptr);
        o.act_order_row = true;
        const QuantizedModel q = quantize_model(*reader, tiny_windows(m.config, o), o, nullptr);
        const std::string what = ptq_method_name(method);
        EXPECT_FALSE(plain.record.act_order_row);
        EXPECT_TRUE(q.record.act_order_row);
        for (const char* name : {"blk.0.attn_q", "blk.0.attn_k"})
            EXPECT_NE(q.linears.at(name).codes, plain.linears.at(name).codes) << what << " " << name;
        for (const char* name : {"blk.0.attn_v", "blk.0.attn_output", "blk.0.ffn_gate", "blk.0.ffn_up", "blk.0.ffn_down"})
            EXPECT_EQ(q.linears.at(name).codes, plain.linears.at(name).codes) << what << " " << name;
        const std::string out = test::temp_path("ptq_act_order_row_" + what + ".gguf");
        export_quantized_gguf(q, src, out, "q4_0");
        EXPECT_TRUE(GgufFile::open(out).get_bool("lowbit.quantization.act_order_row")) << what;
        export_quantized_gguf(plain, src, out, "q4_0");
        EXPECT_FALSE(GgufFile::open(out).get_bool("lowbit.quantization.act_order_row")) << what;
    }
}

TEST(PtqPipeline, SolversLowerTheProxyLossBelowRtnOnTheSameStatistics) {
    // RTN vs GPTQ vs TurboBoA on one real block's statistics: the solvers' own objective.
    const LlamaModel m = ptq_model();
    const LlamaConfig& c = m.config;
    PtqOptions o = tiny_options(PtqMethod::gptq, "q4_0");
    const std::vector<int32_t> win = tiny_windows(c, o);
    const BatchShape shape{o.calibration.samples, o.calibration.length};
    std::vector<float> x = embed_tokens(c, m.weights.token_embd.data(), win.data(), shape);
    BlockScratch s;
    block_forward(c, m.weights.blocks[0], 0, x.data(), shape, s);
    BlockStatsAccumulator acc(c, BlockStatsOptions{true, false, false});
    acc.add(s, nullptr, shape);
    const BlockStatistics st = acc.finish(shape.n_tok);
    const BlockWeights& b = m.weights.blocks[0];
    LayerProblem p{b.w_up.data(), c.ffn_size, c.hidden_size, st.h_ffn.data()};
    p.name = "up";
    SolverOptions so;
    so.grid = parse_grid("q4_0");
    const double rtn = layer_objective(p, solve_rtn(p, so.grid).dequantize());
    const double gptq = layer_objective(p, solve_gptq(p, so).dequantize());
    EXPECT_LT(gptq, rtn);
    LayerProblem pq{b.wq.data(), c.q_dim(), c.hidden_size, st.h_attn.data()};
    pq.h_out = st.h_out_q.data();
    pq.head_rows = c.head_dim;
    pq.name = "q";
    so.row_block = 4;
    const double rtn_q = layer_objective(pq, solve_rtn(pq, so.grid).dequantize());
    const double tb_q = layer_objective(pq, solve_turboboa(pq, so).dequantize());
    EXPECT_LT(tb_q, rtn_q);
}

TEST(PtqExport, GgufReadsBackBitForBitWithMetadata) {
    for (const std::string format : {"q4_0", "q4_1", "q5_0", "q8_0", "mxfp4", "nvfp4"}) {
        const LlamaModel m = ptq_model(3, format == "nvfp4" ? 64 : 32);
        const std::string src = ptq_gguf(m, "ptq_export_src_" + format + ".gguf");
        const auto reader = ModelReader::open(src);
        PtqOptions o = tiny_options(PtqMethod::gptq, format);
        const QuantizedModel q = quantize_model(*reader, tiny_windows(m.config, o), o, nullptr);
        const std::string out = test::temp_path("ptq_export_" + format + ".gguf");
        const GgufExportReport rep = export_quantized_gguf(q, src, out, format);
        EXPECT_EQ(rep.quantized, 7 * m.config.n_layers);
        const auto back = ModelReader::open(out);
        for (int64_t l = 0; l < m.config.n_layers; ++l) {
            const BlockWeights bw = back->block(l);
            for (Projection p : kProjections)
                EXPECT_EQ(projection_weight(bw, p), q.linears.at(linear_name(l, p)).dequantize()) << format << " " << l;
            EXPECT_EQ(bw.attn_norm, m.weights.blocks[size_t(l)].attn_norm);
        }
        EXPECT_EQ(back->token_embedding(), m.weights.token_embd);
        const GgufFile f = GgufFile::open(out);
        EXPECT_EQ(f.get_string("lowbit.quantization.method"), "gptq");
        EXPECT_EQ(f.get_string("lowbit.quantization.format"), format);
        EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, parse_grid(format).gguf_type());
        EXPECT_EQ(f.get_string("general.architecture"), "llama");
    }
}

TEST(PtqExport, RotatedModelExportsUntiedAndExact) {
    const LlamaModel m = ptq_model();
    const std::string src = ptq_gguf(m, "ptq_rot_src.gguf");
    const auto reader = ModelReader::open(src);
    PtqOptions o = tiny_options(PtqMethod::rtn, "q8_0");
    o.rotate = true;
    const QuantizedModel q = quantize_model(*reader, {}, o, nullptr);
    EXPECT_FALSE(q.model.weights.output.empty());
    const std::string out = test::temp_path("ptq_rot.gguf");
    export_quantized_gguf(q, src, out, "q8_0");
    const GgufFile f = GgufFile::open(out);
    ASSERT_NE(f.find_tensor("output.weight"), nullptr);
    EXPECT_EQ(f.get_string("lowbit.quantization.rotation"), q.record.rotation);
    // The file holds exactly the rotated, quantized model (the source's F32 tensors stay F32): same logits.
    const LlamaModel back = load_llama_model(out);
    EXPECT_TRUE(back.config.tied_embeddings == false);
    const std::vector<int32_t> tok = test::random_tokens(12, m.config.vocab_size, 9);
    EXPECT_EQ(forward_logits(q.model, tok.data(), BatchShape{1, 12}), forward_logits(back, tok.data(), BatchShape{1, 12}));
}

// quantize_model interrupted after block 1 (checkpoints in `dir`), then resumed with the same options.
QuantizedModel interrupted_then_resumed(const ModelReader& reader, const std::vector<int32_t>& win, PtqOptions o,
                                        const std::string& dir, PtqReport* rep) {
    o.checkpoint_dir = test::temp_path(dir);
    std::filesystem::remove_all(o.checkpoint_dir);
    o.on_block_done = [](int64_t block) {
        if (block == 1) throw std::runtime_error("interrupted");
    };
    EXPECT_THROW(quantize_model(reader, win, o, nullptr), std::runtime_error);
    o.on_block_done = nullptr;
    o.resume = true;
    return quantize_model(reader, win, o, rep);
}

std::string file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// x and y export to the same GGUF file (of `type`).
void expect_same_gguf(const QuantizedModel& x, const QuantizedModel& y, const std::string& src, const std::string& type,
                      const std::string& tag) {
    const std::string gx = test::temp_path(tag + "_x.gguf"), gy = test::temp_path(tag + "_y.gguf");
    export_quantized_gguf(x, src, gx, type);
    export_quantized_gguf(y, src, gy, type);
    EXPECT_EQ(file_bytes(gx), file_bytes(gy)) << tag;
}

// x and y export to the same safetensors directory with `packing`.
void expect_same_safetensors(const QuantizedModel& x, const QuantizedModel& y, SafetensorsPacking packing,
                             const std::string& tag, const SafetensorsExportOptions& eo = {}) {
    const std::string dx = test::temp_path(tag + "_x_st"), dy = test::temp_path(tag + "_y_st");
    std::filesystem::remove_all(dx);
    std::filesystem::remove_all(dy);
    export_quantized_safetensors(x, dx, packing, eo);
    export_quantized_safetensors(y, dy, packing, eo);
    for (const auto& e : std::filesystem::directory_iterator(dx))
        EXPECT_EQ(file_bytes(e.path().string()), file_bytes((std::filesystem::path(dy) / e.path().filename()).string()))
            << tag << " " << safetensors_packing_name(packing) << " " << e.path().filename();
}

// Streaming the blocks (read and rotated one at a time, FP32 projections dropped once quantized) changes
// nothing but the memory: the same codes, the same GGUF and safetensors files; the streamed model keeps only
// its blocks' norms (and biases); a resumed streamed run equals the uninterrupted one.
TEST(PtqPipeline, StreamedBlocksGiveTheSameModelAndFiles) {
    const LlamaModel m = ptq_model();
    const std::string src = ptq_gguf(m, "ptq_stream_src.gguf");
    const auto reader = ModelReader::open(src);
    PtqOptions o = tiny_options(PtqMethod::turboboa, "q4_0");
    o.rotate = true;
    const std::vector<int32_t> win = tiny_windows(m.config, o);
    const QuantizedModel whole = quantize_model(*reader, win, o, nullptr);
    o.stream_blocks = true;
    const QuantizedModel streamed = quantize_model(*reader, win, o, nullptr);
    ASSERT_EQ(streamed.linears.size(), whole.linears.size());
    for (const auto& [name, qw] : whole.linears) EXPECT_EQ(streamed.linears.at(name).codes, qw.codes) << name;
    for (int64_t l = 0; l < m.config.n_layers; ++l) {
        const BlockWeights& b = streamed.model.weights.blocks[size_t(l)];
        for (Projection p : kProjections) EXPECT_TRUE(projection_weight(b, p).empty()) << l;
        EXPECT_EQ(b.attn_norm, whole.model.weights.blocks[size_t(l)].attn_norm);
    }
    EXPECT_EQ(streamed.model.weights.output, whole.model.weights.output);  // the rotated, untied head
    expect_same_gguf(whole, streamed, src, "q4_0", "ptq_stream");
    expect_same_safetensors(whole, streamed, SafetensorsPacking::fake_quant, "ptq_stream");
    {  // GPTQ packing wants an int grid
        PtqOptions oi = tiny_options(PtqMethod::gptq, "int4");
        oi.grid = parse_grid("int4", 32, true);
        const QuantizedModel w = quantize_model(*reader, win, oi, nullptr);
        oi.stream_blocks = true;
        expect_same_safetensors(w, quantize_model(*reader, win, oi, nullptr), SafetensorsPacking::gptq, "ptq_stream");
    }
    // Interrupted after block 1 and resumed, still streaming: the same codes.
    const QuantizedModel resumed = interrupted_then_resumed(*reader, win, o, "ptq_stream_resume.partial", nullptr);
    for (const auto& [name, qw] : whole.linears) EXPECT_EQ(resumed.linears.at(name).codes, qw.codes) << name;
    EXPECT_TRUE(resumed.model.weights.blocks[0].wq.empty());
    EXPECT_EQ(resumed.model.weights.blocks[0].attn_norm, whole.model.weights.blocks[0].attn_norm);
}

// Spilling the finished blocks' codes to their checkpoint files (what `lowbit quantize` does) keeps no linear in
// memory and changes no byte of any export, for a calibrated method and for RTN (which writes block files only
// then); a resumed spilled run equals the uninterrupted one; a spilled file that went bad is an input error at
// export, naming the file.
TEST(PtqPipeline, SpilledBlocksGiveTheSameFiles) {
    const LlamaModel m = ptq_model();
    const std::string src = ptq_gguf(m, "ptq_spill_src.gguf");
    const auto reader = ModelReader::open(src);
    const auto spilled_run = [&](PtqOptions o, const std::vector<int32_t>& win, const std::string& dir) {
        o.stream_blocks = o.spill_blocks = true;
        o.checkpoint_dir = test::temp_path(dir);
        std::filesystem::remove_all(o.checkpoint_dir);
        return quantize_model(*reader, win, o, nullptr);
    };
    for (PtqMethod method : {PtqMethod::turboboa, PtqMethod::rtn}) {
        const std::string tag = std::string("ptq_spill_") + ptq_method_name(method);
        PtqOptions o = tiny_options(method, "q4_0");
        const std::vector<int32_t> win = tiny_windows(m.config, o);
        const QuantizedModel whole = quantize_model(*reader, win, o, nullptr);
        const QuantizedModel spilled = spilled_run(o, win, tag + ".partial");
        EXPECT_TRUE(spilled.linears.empty()) << tag;
        ASSERT_EQ(spilled.spilled.size(), size_t(m.config.n_layers)) << tag;
        std::vector<std::string> names;
        for (const auto& [name, qw] : whole.linears) {
            names.push_back(name);
            ASSERT_TRUE(spilled.has_linear(name)) << name;
            EXPECT_EQ(spilled.linear(name)->codes, qw.codes) << tag << " " << name;
            EXPECT_EQ(spilled.linear_info(name).rows, qw.rows) << name;
        }
        EXPECT_EQ(spilled.linear_names(), names) << tag;
        expect_same_gguf(whole, spilled, src, "q4_0", tag);
        expect_same_safetensors(whole, spilled, SafetensorsPacking::fake_quant, tag);
        if (method == PtqMethod::turboboa) {  // resumed after block 1, spilling: the same codes
            o.stream_blocks = o.spill_blocks = true;
            const QuantizedModel resumed = interrupted_then_resumed(*reader, win, o, tag + "_resume.partial", nullptr);
            EXPECT_TRUE(resumed.linears.empty());
            for (const auto& [name, qw] : whole.linears) EXPECT_EQ(resumed.linear(name)->codes, qw.codes) << name;
        }
    }
    PtqOptions oi = tiny_options(PtqMethod::gptq, "int4");
    oi.grid = parse_grid("int4", 32, false);  // asymmetric: the GPTQ check reads every group's zero point back
    const std::vector<int32_t> win = tiny_windows(m.config, oi);
    const QuantizedModel whole = quantize_model(*reader, win, oi, nullptr);
    QuantizedModel spilled = spilled_run(oi, win, "ptq_spill_gptq.partial");
    SafetensorsExportOptions v2;
    v2.gptq_zeros = GptqZeroConvention::v2;
    expect_same_safetensors(whole, spilled, SafetensorsPacking::gptq, "ptq_spill_gptq", v2);
    // A truncated block file: the export stops with an input error that names it.
    const std::string bad = spilled.spilled.at(1).path;
    std::filesystem::resize_file(bad, std::filesystem::file_size(bad) / 2);
    const std::string dy = test::temp_path("ptq_spill_bad_st");
    std::filesystem::remove_all(dy);
    test::expect_error_mentions([&] { export_quantized_safetensors(spilled, dy, SafetensorsPacking::fake_quant); },
                                "block_1.bin");
    EXPECT_THROW(spilled.linear("blk.9.attn_q"), Error);
}

// A Hugging Face source for a GGUF export (`lowbit quantize --model HF_DIR --out F.gguf`): the checkpoint is
// written as a llama GGUF one block at a time (q/k rows back in GGUF's pairing), which holds the source's
// weights exactly, and quantizing that gives every projection the codes and GGUF bytes of quantizing the
// original GGUF.
TEST(PtqPipeline, HuggingFaceSourceGivesTheSameGgufProjections) {
    const LlamaModel m = ptq_model();
    const std::string src = ptq_gguf(m, "ptq_hf_src.gguf");
    const std::string hf = test::temp_path("ptq_hf_src_dir");
    std::filesystem::remove_all(hf);
    export_hf_checkpoint(m, hf);
    const auto hf_reader = ModelReader::open(hf);
    ASSERT_EQ(hf_reader->config().rope_pairing, RopePairing::halves);
    const std::string conv = test::temp_path("ptq_hf_converted.gguf");
    export_llama_gguf(*hf_reader, conv, GgufType::F32, nullptr);
    const auto src_reader = ModelReader::open(src), conv_reader = ModelReader::open(conv);
    EXPECT_EQ(conv_reader->token_embedding(), src_reader->token_embedding());
    for (int64_t l = 0; l < m.config.n_layers; ++l) {
        const BlockWeights a = src_reader->block(l), b = conv_reader->block(l);
        for (Projection p : kProjections) EXPECT_EQ(projection_weight(a, p), projection_weight(b, p)) << l;
        EXPECT_EQ(a.ffn_norm, b.ffn_norm) << l;
    }
    PtqOptions o = tiny_options(PtqMethod::gptq, "q4_0");
    const std::vector<int32_t> win = tiny_windows(m.config, o);
    const QuantizedModel qa = quantize_model(*src_reader, win, o, nullptr), qb = quantize_model(*conv_reader, win, o, nullptr);
    const std::string ga = test::temp_path("ptq_hf_a.gguf"), gb = test::temp_path("ptq_hf_b.gguf");
    export_quantized_gguf(qa, src, ga, "q4_0");
    export_quantized_gguf(qb, conv, gb, "q4_0");
    const GgufFile fa = GgufFile::open(ga), fb = GgufFile::open(gb);
    int64_t compared = 0;
    for (const GgufTensorInfo& t : fa.tensors()) {
        const GgufTensorInfo* u = fb.find_tensor(t.name);
        ASSERT_TRUE(u) << t.name;
        if (t.type != GgufType::Q4_0) continue;
        const auto x = fa.tensor_bytes(t), y = fb.tensor_bytes(*u);
        EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << t.name;
        ++compared;
    }
    EXPECT_EQ(compared, 7 * m.config.n_layers);
}

TEST(PtqPipeline, ResumedRunEqualsAnUninterruptedOne) {
    const LlamaModel m = ptq_model();
    const std::string src = ptq_gguf(m, "ptq_resume_src.gguf");
    const auto reader = ModelReader::open(src);
    PtqOptions o = tiny_options(PtqMethod::turboboa, "q4_0");
    const std::vector<int32_t> win = tiny_windows(m.config, o);
    const QuantizedModel full = quantize_model(*reader, win, o, nullptr);
    PtqReport rep;
    const QuantizedModel resumed = interrupted_then_resumed(*reader, win, o, "ptq_resume.partial", &rep);
    EXPECT_EQ(rep.resumed_from_block, 2);
    for (const auto& [name, qw] : full.linears) {
        EXPECT_EQ(resumed.linears.at(name).codes, qw.codes) << name;
        EXPECT_EQ(resumed.linears.at(name).dequantize(), qw.dequantize()) << name;
    }
    // With the state written at most every 10^9 s, only after the last block: an interruption after block 1
    // resumes from the start, and still gives the same codes.
    PtqOptions sparse = o;
    sparse.checkpoint_seconds = 1e9;
    PtqReport rep_sparse;
    const QuantizedModel again = interrupted_then_resumed(*reader, win, sparse, "ptq_resume_sparse.partial", &rep_sparse);
    EXPECT_EQ(rep_sparse.resumed_from_block, 0);
    for (const auto& [name, qw] : full.linears) EXPECT_EQ(again.linears.at(name).codes, qw.codes) << name;
    // A checkpoint of other options is refused, not silently reused.
    o.checkpoint_dir = test::temp_path("ptq_resume.partial");
    o.resume = true;
    o.grid = parse_grid("q8_0");
    test::expect_error_mentions([&] { quantize_model(*reader, win, o, nullptr); }, "different run");
}

// --- true-sequential statistics ---

// The statistics of the four inputs taken in four passes (the last one advancing Xfp) equal the one pass over
// the whole block bit for bit, with the unmeasured fields left empty; a pass that does not advance Xfp leaves it
// as it was, and after the four passes Xfp is where one whole pass leaves it.
TEST(PtqCalibration, StatisticsByInputEqualTheWholeBlockAndXfpAdvancesOnce) {
    const LlamaModel m = ptq_model();
    const LlamaConfig& c = m.config;
    const PtqOptions o = tiny_options(PtqMethod::turboboa, "q4_0");
    const std::vector<int32_t> win = tiny_windows(c, o);
    const int64_t S = o.calibration.samples, L = o.calibration.length;
    const BlockWeights& b = m.weights.blocks[0];
    const auto whole = cpu_calibration_paths(c, o.batch), by_input = cpu_calibration_paths(c, o.batch);
    whole->embed(m, win, S, L, true);
    by_input->embed(m, win, S, L, true);
    std::vector<float> xq0, xfp0, xq, xfp;
    by_input->save(xq0, xfp0);
    const BlockStatistics all = whole->statistics(b, 0, BlockStatsOptions{true, true, true});
    using Field = std::vector<float> BlockStatistics::*;
    const std::vector<std::pair<BlockInput, std::vector<Field>>> fields = {
        {attention_input,
         {&BlockStatistics::h_attn, &BlockStatistics::h_out_q, &BlockStatistics::h_out_k, &BlockStatistics::h_v,
          &BlockStatistics::d_attn, &BlockStatistics::d_v}},
        {attention_output, {&BlockStatistics::h_o, &BlockStatistics::d_o}},
        {mlp_input, {&BlockStatistics::h_ffn, &BlockStatistics::d_ffn}},
        {mlp_hidden, {&BlockStatistics::h_down, &BlockStatistics::d_down}}};
    for (size_t i = 0; i < fields.size(); ++i) {
        BlockStatsOptions so{true, true, true};
        so.inputs = fields[i].first;
        so.advance_full_precision = i + 1 == fields.size();
        const BlockStatistics part = by_input->statistics(b, 0, so, &b);
        EXPECT_EQ(part.tokens, all.tokens);
        for (const auto& [input, fs] : fields)
            for (Field f : fs) {
                if (input == fields[i].first) {
                    ASSERT_FALSE((all.*f).empty());
                    EXPECT_EQ(part.*f, all.*f) << "input " << int(input);
                } else {
                    EXPECT_TRUE((part.*f).empty()) << "pass " << i << " measured input " << int(input);
                }
            }
        by_input->save(xq, xfp);
        EXPECT_EQ(xq, xq0);  // statistics never advance Xq
        if (!so.advance_full_precision) EXPECT_EQ(xfp, xfp0) << "pass " << i;
    }
    std::vector<float> xq_whole, xfp_whole;
    whole->save(xq_whole, xfp_whole);
    EXPECT_NE(xfp_whole, xfp0);
    EXPECT_EQ(xfp, xfp_whole);
}

// GPTQ with true_sequential: q/k/v are solved from the same statistics as without it (nothing of the block is
// quantized before them), while o and down get the Hessians of the inputs the partly quantized block gives them.
// Checked by hand on block 0: the block forward with the run's own dequantized q/k/v (for o) or q/k/v/o/gate/up
// (for down), the statistics over the same batches of windows, and solve_gptq on them give the run's codes.
TEST(PtqPipeline, TrueSequentialStatisticsSeeTheLayersQuantizedBeforeThem) {
    const LlamaModel m0 = ptq_model();
    const std::string src = ptq_gguf(m0, "ptq_true_sequential_src.gguf");
    const auto reader = ModelReader::open(src);
    const LlamaModel fp = load_llama_model(*reader);
    const LlamaConfig& c = fp.config;
    PtqOptions o = tiny_options(PtqMethod::gptq, "q4_0");
    const std::vector<int32_t> win = tiny_windows(c, o);
    const QuantizedModel plain = quantize_model(*reader, win, o, nullptr);
    o.true_sequential = true;
    PtqReport rep;
    const QuantizedModel seq = quantize_model(*reader, win, o, &rep);
    EXPECT_TRUE(seq.record.true_sequential);
    EXPECT_FALSE(plain.record.true_sequential);
    ASSERT_EQ(rep.layers.size(), size_t(7 * c.n_layers));
    for (const char* name : {"blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v"})
        EXPECT_EQ(seq.linears.at(name).codes, plain.linears.at(name).codes) << name;
    bool differs = false;
    for (const char* name : {"blk.0.attn_output", "blk.0.ffn_gate", "blk.0.ffn_up", "blk.0.ffn_down"})
        differs |= seq.linears.at(name).codes != plain.linears.at(name).codes;
    EXPECT_TRUE(differs);

    const int64_t S = o.calibration.samples, L = o.calibration.length, d = c.hidden_size;
    const std::vector<float> x0 = embed_tokens(c, fp.weights.token_embd.data(), win.data(), BatchShape{S, L});
    const BlockWeights& f0 = fp.weights.blocks[0];
    const auto by_hand = [&](std::initializer_list<Projection> quantized, BlockInput input, Projection p) {
        BlockWeights w = f0;
        for (Projection q : quantized) projection_weight(w, q) = seq.linears.at(linear_name(0, q)).dequantize();
        BlockStatsOptions so;
        so.inputs = input;
        BlockStatsAccumulator acc(c, so);
        for (int64_t s0 = 0; s0 < S; s0 += o.batch) {
            const BatchShape shape{std::min(o.batch, S - s0), L};
            std::vector<float> x(x0.begin() + s0 * L * d, x0.begin() + (s0 + shape.n_seq) * L * d);
            BlockScratch scratch;
            block_forward(c, w, 0, x.data(), shape, scratch);
            acc.add(scratch, nullptr, shape);
        }
        const BlockStatistics st = acc.finish(L);
        LayerProblem pb;
        pb.w = projection_weight(f0, p).data();
        pb.rows = projection_out_features(c, p);
        pb.cols = projection_in_features(c, p);
        pb.h_in = p == Projection::o ? st.h_o.data() : st.h_down.data();
        SolverOptions so2;
        so2.grid = o.grid;
        so2.damping = o.damping;
        so2.dead_value = 1.0f / float(L);
        return solve_gptq(pb, so2).codes;
    };
    using P = Projection;
    EXPECT_EQ(by_hand({P::q, P::k, P::v}, attention_output, P::o), seq.linears.at("blk.0.attn_output").codes);
    EXPECT_EQ(by_hand({P::q, P::k, P::v, P::o, P::gate, P::up}, mlp_hidden, P::down), seq.linears.at("blk.0.ffn_down").codes);
    EXPECT_NE(by_hand({}, mlp_hidden, P::down), seq.linears.at("blk.0.ffn_down").codes);  // the full-precision block's

    // Recorded in the GGUF metadata and the safetensors record.
    const std::string out = test::temp_path("ptq_true_sequential.gguf");
    export_quantized_gguf(seq, src, out, "q4_0");
    EXPECT_TRUE(GgufFile::open(out).get_bool("lowbit.quantization.true_sequential"));
    export_quantized_gguf(plain, src, out, "q4_0");
    EXPECT_FALSE(GgufFile::open(out).get_bool("lowbit.quantization.true_sequential"));
}

// TurboBoA (F2: the full-precision path advances once per block, in the last pass) with true_sequential:
// interrupted and resumed equals the uninterrupted run, and a checkpoint of the run without it is refused.
TEST(PtqPipeline, TrueSequentialTurboBoaResumesAndIsNotMixedWithOtherCheckpoints) {
    const LlamaModel m = ptq_model();
    const std::string src = ptq_gguf(m, "ptq_true_sequential_resume_src.gguf");
    const auto reader = ModelReader::open(src);
    PtqOptions o = tiny_options(PtqMethod::turboboa, "q4_0");
    const std::vector<int32_t> win = tiny_windows(m.config, o);
    const QuantizedModel plain = quantize_model(*reader, win, o, nullptr);
    o.true_sequential = true;
    const QuantizedModel full = quantize_model(*reader, win, o, nullptr);
    bool differs = false;
    for (const auto& [name, qw] : full.linears) differs |= plain.linears.at(name).codes != qw.codes;
    EXPECT_TRUE(differs);
    PtqReport rep;
    const QuantizedModel resumed = interrupted_then_resumed(*reader, win, o, "ptq_true_sequential.partial", &rep);
    EXPECT_EQ(rep.resumed_from_block, 2);
    for (const auto& [name, qw] : full.linears) EXPECT_EQ(resumed.linears.at(name).codes, qw.codes) << name;
    PtqOptions other = o;
    other.true_sequential = false;
    other.checkpoint_dir = test::temp_path("ptq_true_sequential.partial");
    other.resume = true;
    test::expect_error_mentions([&] { quantize_model(*reader, win, other, nullptr); }, "different run");
}

// --static-groups: every group's grid from the input W (on) instead of at each group from the compensated values
// (off, the default of gptq and of turboboa with f3). Block 0's two-sided q/k are untouched (their grids follow
// F3a either way), the one-sided layers change; the records and the GGUF say which. BoA and TurboBoA without f3
// (fixed grids) are static, and refuse off. "At each group" is GPTQ's reference timing, at the start of the lazy
// block of 128 columns that holds the group: only ffn_down's 256 columns span two lazy blocks here.
TEST(PtqPipeline, StaticGroupsSwitchesTheGridTimingAndIsRecorded) {
    LlamaModel m = ptq_model(3, 64);
    m.config.ffn_size = 256;
    m.weights = random_llama_weights(m.config, 3, 0.3f);
    const std::string src = ptq_gguf(m, "ptq_static_groups_src.gguf");
    const auto reader = ModelReader::open(src);
    const std::vector<int32_t> win = tiny_windows(m.config, tiny_options(PtqMethod::gptq, "q4_0"));
    for (PtqMethod method : {PtqMethod::gptq, PtqMethod::turboboa}) {
        PtqOptions o = tiny_options(method, "q4_0");
        const QuantizedModel at_group = quantize_model(*reader, win, o, nullptr);
        o.static_groups = true;
        const QuantizedModel q = quantize_model(*reader, win, o, nullptr);
        const std::string what = ptq_method_name(method);
        EXPECT_FALSE(at_group.record.static_groups) << what;
        EXPECT_TRUE(q.record.static_groups) << what;
        if (method == PtqMethod::turboboa)
            for (const char* name : {"blk.0.attn_q", "blk.0.attn_k"})
                EXPECT_EQ(q.linears.at(name).codes, at_group.linears.at(name).codes) << what << " " << name;
        EXPECT_NE(q.linears.at("blk.0.ffn_down").codes, at_group.linears.at("blk.0.ffn_down").codes) << what;
        const std::string out = test::temp_path("ptq_static_groups_" + what + ".gguf");
        export_quantized_gguf(q, src, out, "q4_0");
        EXPECT_TRUE(GgufFile::open(out).get_bool("lowbit.quantization.static_groups")) << what;
        export_quantized_gguf(at_group, src, out, "q4_0");
        EXPECT_FALSE(GgufFile::open(out).get_bool("lowbit.quantization.static_groups")) << what;
    }
    PtqOptions fixed = tiny_options(PtqMethod::turboboa, "q4_0");
    fixed.f3 = false;
    EXPECT_TRUE(quantize_model(*reader, win, fixed, nullptr).record.static_groups);
    for (PtqOptions o : {tiny_options(PtqMethod::boa, "q4_0"), fixed}) {
        o.static_groups = false;
        test::expect_error_mentions([&] { quantize_model(*reader, win, o, nullptr); }, "adaptive grids");
    }
}

// --- W·A quantization (--act-bits) ---

// The CPU calibration paths, recording what the block loop hands the solvers: per block, the quantized path's
// input Xq and the statistics.
struct CalibrationRecord {
    std::vector<std::vector<float>> xq;
    std::vector<BlockStatistics> stats;
};

class RecordingPaths final : public CalibrationPaths {
public:
    RecordingPaths(std::unique_ptr<CalibrationPaths> inner, CalibrationRecord* rec) : inner_(std::move(inner)), rec_(rec) {}
    void embed(const LlamaModel& m, const std::vector<int32_t>& w, int64_t s, int64_t l, bool cross) override {
        inner_->embed(m, w, s, l, cross);
    }
    BlockStatistics statistics(const BlockWeights& fp, int64_t layer, const BlockStatsOptions& o,
                               const BlockWeights* quantized_path) override {
        std::vector<float> xq, xfp;
        inner_->save(xq, xfp);
        rec_->xq.push_back(std::move(xq));
        rec_->stats.push_back(inner_->statistics(fp, layer, o, quantized_path));
        return rec_->stats.back();
    }
    void propagate(const BlockWeights& q, int64_t layer) override { inner_->propagate(q, layer); }
    void save(std::vector<float>& xq, std::vector<float>& xfp) const override { inner_->save(xq, xfp); }
    void load(std::vector<float> xq, std::vector<float> xfp, int64_t s, int64_t l) override {
        inner_->load(std::move(xq), std::move(xfp), s, l);
    }
    std::string device() const override { return inner_->device(); }
    QuantSpec activations() const override { return inner_->activations(); }

private:
    std::unique_ptr<CalibrationPaths> inner_;
    CalibrationRecord* rec_;
};

// y = A4(x)·Wᵀ with A4 the registry's int4 grid applied to each row of x by hand (per token, the format's
// default options) — independent of FakeQuantLinear and quantize_activations.
std::vector<float> int4_per_token(const std::vector<float>& x, int64_t cols) {
    return quantize_dequantize(find_format("int4"), x.data(), int64_t(x.size()) / cols, cols, FormatOptions{});
}

class HandInt4ActLinear final : public Linear {
public:
    explicit HandInt4ActLinear(ConstMatF w) : w_(w) {}
    void forward(ConstMatF x, MatF y, float beta) const override {
        check_shapes(x, y);
        std::vector<float> dense(size_t(x.size()));
        for (int64_t r = 0; r < x.rows; ++r) std::copy(x.row(r), x.row(r) + x.cols, dense.begin() + r * x.cols);
        const std::vector<float> xq = int4_per_token(dense, x.cols);
        gemm_f32(ConstMatF(xq.data(), x.rows, x.cols), Trans::no, w_, Trans::yes, y, beta);
    }
    int64_t in_features() const override { return w_.cols; }
    int64_t out_features() const override { return w_.rows; }
    std::string describe() const override { return "hand int4 activations"; }

private:
    ConstMatF w_;
};

BlockLinears hand_int4_linears(const LlamaConfig& c, const BlockWeights& b) {
    BlockLinears out;
    for (Projection p : kProjections)
        out.by_projection[size_t(p)] = std::make_unique<HandInt4ActLinear>(
            ConstMatF(projection_weight(b, p).data(), projection_out_features(c, p), projection_in_features(c, p)));
    return out;
}

double max_rel_diff_f(const std::vector<float>& a, const std::vector<float>& b) {
    return max_rel_diff(a, std::vector<double>(b.begin(), b.end()));
}

struct ActBitsRun {
    QuantizedModel q;
    CalibrationRecord rec;
};

ActBitsRun run_recorded(const ModelReader& reader, PtqOptions o, const QuantSpec& acts) {
    ActBitsRun run;
    o.activations = acts;
    CalibrationRecord* rec = &run.rec;
    o.calibration_paths = [rec, acts](const LlamaConfig& c, int64_t batch) {
        return std::make_unique<RecordingPaths>(cpu_calibration_paths(c, batch, acts), rec);
    };
    run.q = quantize_model(reader, tiny_windows(reader.config(), o), o, nullptr);
    return run;
}

TEST(PtqActBits, CalibrationSeesTheActivationQuantizedPath) {
    const LlamaModel m0 = ptq_model();
    const std::string src = ptq_gguf(m0, "ptq_act_bits_src.gguf");
    const auto reader = ModelReader::open(src);
    const LlamaModel fp = load_llama_model(*reader);
    const LlamaConfig& c = fp.config;
    const PtqOptions o = tiny_options(PtqMethod::gptq, "q4_0");
    const QuantSpec a4 = parse_activation_spec("4");
    ASSERT_NE(a4.format, nullptr);
    EXPECT_STREQ(a4.format->name, "int4");
    EXPECT_EQ(parse_activation_spec("int4").format, a4.format);
    EXPECT_EQ(parse_activation_spec("none").format, nullptr);

    const ActBitsRun w4 = run_recorded(*reader, o, {});
    const ActBitsRun w4a4 = run_recorded(*reader, o, a4);
    ASSERT_EQ(w4a4.rec.xq.size(), size_t(c.n_layers));
    // Block 0 sees the embeddings either way; block 1 sees the W4A4 block 0's output, not the W4 one's.
    EXPECT_EQ(w4a4.rec.xq[0], w4.rec.xq[0]);
    EXPECT_GT(max_rel_diff_f(w4a4.rec.xq[1], w4.rec.xq[1]), 1e-3);
    EXPECT_GT(max_rel_diff_f(w4a4.rec.stats[1].h_attn, w4.rec.stats[1].h_attn), 1e-3);

    // By hand: block 0 with its quantized weights and int4 activations per token at every projection input,
    // batch by batch as the block loop runs it, then block 1's full-precision block on that output, its H_in
    // taken of the int4 inputs.
    const std::vector<int32_t> win = tiny_windows(c, o);
    const int64_t S = o.calibration.samples, L = o.calibration.length, d = c.hidden_size;
    std::vector<float> x1 = embed_tokens(c, fp.weights.token_embd.data(), win.data(), BatchShape{S, L});
    const BlockLinears q0 = hand_int4_linears(c, w4a4.q.model.weights.blocks[0]);
    const BlockLinears f1 = hand_int4_linears(c, fp.weights.blocks[1]);
    std::vector<std::vector<float>> attn_in, ffn_act, attn_in_unquantized;
    for (int64_t s0 = 0; s0 < S; s0 += o.batch) {
        const BatchShape shape{std::min(o.batch, S - s0), L};
        BlockScratch scratch;
        block_forward(c, w4a4.q.model.weights.blocks[0], q0, 0, x1.data() + s0 * L * d, shape, scratch);
        std::vector<float> x(x1.begin() + s0 * L * d, x1.begin() + (s0 + shape.n_seq) * L * d);
        block_forward(c, fp.weights.blocks[1], f1, 1, x.data(), shape, scratch);
        attn_in.push_back(int4_per_token(scratch.attn_in, d));
        ffn_act.push_back(int4_per_token(scratch.ffn_act, c.ffn_size));
        attn_in_unquantized.push_back(scratch.attn_in);
    }
    EXPECT_LT(max_rel_diff_f(w4a4.rec.xq[1], x1), 1e-5);
    EXPECT_LT(max_rel_diff(w4a4.rec.stats[1].h_attn, gram(attn_in, d)), 1e-5);
    EXPECT_LT(max_rel_diff(w4a4.rec.stats[1].h_down, gram(ffn_act, c.ffn_size)), 1e-5);
    EXPECT_GT(max_rel_diff(w4a4.rec.stats[1].h_attn, gram(attn_in_unquantized, d)), 1e-3);  // Qa(x), not x

    // The block loop's own paths (no factory) take --act-bits the same way: the same codes, and not W4's.
    PtqOptions od = o;
    od.activations = a4;
    const QuantizedModel plain = quantize_model(*reader, win, od, nullptr);
    bool differs = false;
    for (const auto& [name, qw] : w4a4.q.linears) {
        EXPECT_EQ(plain.linears.at(name).codes, qw.codes) << name;
        differs |= w4.q.linears.at(name).codes != qw.codes;
    }
    EXPECT_TRUE(differs);
    EXPECT_EQ(plain.record.activations, "int4");
    EXPECT_EQ(w4.q.record.activations, "none");
}

TEST(PtqActBits, ExportsRecordTheActivationsAndEvalReadsThemBack) {
    const LlamaModel m0 = ptq_model();
    const std::string src = ptq_gguf(m0, "ptq_act_bits_export_src.gguf");
    const auto reader = ModelReader::open(src);
    const LlamaConfig& c = reader->config();
    PtqOptions o = tiny_options(PtqMethod::gptq, "q4_0");
    EXPECT_EQ(gguf_recorded_activations(src), "");  // not a lowbit export
    const QuantizedModel w4 = quantize_model(*reader, tiny_windows(c, o), o, nullptr);
    const std::string out_w4 = test::temp_path("ptq_act_bits_w4.gguf");
    export_quantized_gguf(w4, src, out_w4, "q4_0");
    EXPECT_EQ(gguf_recorded_activations(out_w4), "none");

    o.activations = parse_activation_spec("4");
    const ActBitsRun run = run_recorded(*reader, o, o.activations);
    const std::string out = test::temp_path("ptq_act_bits_w4a4.gguf");
    export_quantized_gguf(run.q, src, out, "q4_0");
    EXPECT_EQ(GgufFile::open(out).get_string(kGgufActivationsKey), "int4");
    const std::string recorded = gguf_recorded_activations(out);
    EXPECT_EQ(recorded, "int4");

    // What eval does with the record (parse_activation_spec of it, the projections as fake_quant_linears over
    // the weights as loaded) reproduces the calibration's quantized path: block 0 of the file on the
    // embeddings gives block 1's recorded input.
    const QuantSpec acts = parse_activation_spec(recorded);
    ASSERT_NE(acts.format, nullptr);
    const LlamaModel back = load_llama_model(out);
    const ModelLinears linears = make_model_linears(back, fake_quant_linears(QuantSpec{}, acts));
    const int64_t S = o.calibration.samples, L = o.calibration.length, d = c.hidden_size;
    const std::vector<int32_t> win = tiny_windows(c, o);
    std::vector<float> x = embed_tokens(c, back.weights.token_embd.data(), win.data(), BatchShape{S, L});
    for (int64_t s0 = 0; s0 < S; s0 += o.batch) {
        BlockScratch scratch;
        block_forward(c, back.weights.blocks[0], linears[0], 0, x.data() + s0 * L * d, BatchShape{std::min(o.batch, S - s0), L},
                      scratch);
    }
    EXPECT_LT(max_rel_diff_f(run.rec.xq[1], x), 1e-6);

    // Safetensors: the lowbit record of both packings holds it.
    const std::string fq = test::temp_path("ptq_act_bits_fq");
    std::filesystem::remove_all(fq);
    export_quantized_safetensors(run.q, fq, SafetensorsPacking::fake_quant);
    EXPECT_EQ(safetensors_recorded_activations(fq), "int4");
    PtqOptions og = tiny_options(PtqMethod::gptq, "int4");
    og.grid = parse_grid("int4", 0, true);
    og.activations = parse_activation_spec("int8");
    const QuantizedModel g = quantize_model(*reader, tiny_windows(c, og), og, nullptr);
    const std::string gq = test::temp_path("ptq_act_bits_gptq");
    std::filesystem::remove_all(gq);
    export_quantized_safetensors(g, gq, SafetensorsPacking::gptq);
    EXPECT_EQ(safetensors_recorded_activations(gq), "int8");
    EXPECT_EQ(safetensors_recorded_activations(gq + "/config.json"), "int8");
}

TEST(PtqActBits, CalibrationPathsWithoutActivationQuantizationAreRefused) {
    // Calibration paths made without the activation format are not silently used for --act-bits.
    const LlamaModel m0 = ptq_model();
    const std::string src = ptq_gguf(m0, "ptq_act_bits_refuse.gguf");
    const auto reader = ModelReader::open(src);
    PtqOptions o = tiny_options(PtqMethod::gptq, "q4_0");
    o.activations = parse_activation_spec("8");
    o.calibration_paths = [](const LlamaConfig& c, int64_t batch) { return cpu_calibration_paths(c, batch); };
    test::expect_error_mentions([&] { quantize_model(*reader, tiny_windows(reader->config(), o), o, nullptr); },
                                "--device cpu");
    test::expect_error_mentions([] { parse_activation_spec("int16"); }, "unknown format");
    test::expect_error_mentions([] { parse_activation_spec("16"); }, "2 to 8");
}

}  // namespace
}  // namespace lowbit
