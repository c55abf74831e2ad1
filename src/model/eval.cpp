// eval.cpp — perplexity windows (llama.cpp's and the HF/GPTQ-paper protocol) and the KLD base file (write and compare). The
// log-softmax arithmetic follows llama.cpp's (float max, double Σexpf, float log) so that the 16-bit
// records written here match llama.cpp's for the same logits. The windows are scored on the host
// from a WindowLogitsFn, or where their logits are made by a WindowNllFn (the GPU), with the same targets.
#include "model/eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <unistd.h>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "core/wall_clock.h"

namespace lowbit {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------
// scoring primitives

namespace {

struct Softmax {
    float max_logit;
    int64_t argmax;
    float log_sum_exp;  // log Σ exp(l − max)
};

Softmax softmax_stats(const float* logits, int64_t n) {
    Softmax s{logits[0], 0, 0.0f};
    for (int64_t i = 1; i < n; ++i)
        if (logits[i] > s.max_logit) s.max_logit = logits[i], s.argmax = i;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - s.max_logit);
    s.log_sum_exp = float(std::log(sum));
    return s;
}

}  // namespace

TokenScore token_score(const float* logits, int64_t n_vocab, int32_t tok) {
    const Softmax s = softmax_stats(logits, n_vocab);
    return {double(s.max_logit + s.log_sum_exp - logits[tok]), int32_t(s.argmax)};
}

double token_nll(const float* logits, int64_t n_vocab, int32_t tok) { return token_score(logits, n_vocab, tok).nll; }

double kld_encode_record(const float* logits, int64_t n_vocab, int32_t tok, uint16_t* record) {
    const Softmax s = softmax_stats(logits, n_vocab);
    float min_logit = logits[0];
    for (int64_t i = 1; i < n_vocab; ++i) min_logit = std::min(min_logit, logits[i]);
    min_logit = std::max(min_logit, s.max_logit - 16.0f);  // keep 16 nats below the top: finer steps
    const float min_log_prob = min_logit - s.max_logit - s.log_sum_exp;
    const float scale = (s.max_logit - min_logit) / 65535.0f;
    const float header[2] = {scale, min_log_prob};
    std::memcpy(record, header, sizeof(header));
    uint16_t* q = record + 4;
    const int64_t slots = kld_record_slots(n_vocab) - 4;
    std::fill(q, q + slots, uint16_t(0));
    if (scale != 0.0f) {
        const float inv_scale = 1.0f / scale;
        for (int64_t i = 0; i < n_vocab; ++i) {
            if (!(logits[i] > min_logit)) continue;
            const float code = std::nearbyint(inv_scale * (logits[i] - min_logit));  // ties to even
            q[i] = uint16_t(std::min(code, 65535.0f));
        }
    }
    return double(s.max_logit + s.log_sum_exp - logits[tok]);
}

KldStep kld_compare_record(const float* logits, int64_t n_vocab, const uint16_t* record, int32_t tok) {
    const Softmax s = softmax_stats(logits, n_vocab);
    float header[2];
    std::memcpy(header, record, sizeof(header));
    const float scale = header[0], min_log_prob = header[1];
    const uint16_t* q = record + 4;
    KldStep r;
    r.nll = double(s.max_logit + s.log_sum_exp - logits[tok]);
    r.nll_base = -double(scale * float(q[tok]) + min_log_prob);
    const float log_norm = s.max_logit + s.log_sum_exp;  // log p_model(i) = logits[i] − log_norm
    double sum = 0.0;
    int64_t base_top = 0;
    float base_top_lp = 0.0f;
    for (int64_t i = 0; i < n_vocab; ++i) {
        const float lp_base = scale * float(q[i]) + min_log_prob;
        if (i == 0 || lp_base > base_top_lp) base_top_lp = lp_base, base_top = i;
        if (lp_base > -16.0f) sum += double(std::exp(lp_base) * (lp_base - logits[i] + log_norm));
    }
    r.kld = sum;
    r.same_top = base_top == s.argmax;
    return r;
}

// ---------------------------------------------------------------------------------------------------
// KLD base file

KldBaseHeader read_kld_base_header(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open the KLD base file", path);
    char magic[8];
    in.read(magic, 8);
    LOWBIT_CHECK(in.good() && std::memcmp(magic, "_logits_", 8) == 0, ErrorKind::input,
                 "{}: not a KLD base file (no '_logits_' magic); make one with `lowbit eval --save-logits` or "
                 "llama-perplexity --kl-divergence-base",
                 path);
    KldBaseHeader h;
    in.read(reinterpret_cast<char*>(&h.n_ctx), 4);
    in.read(reinterpret_cast<char*>(&h.n_vocab), 4);
    in.read(reinterpret_cast<char*>(&h.n_chunk), 4);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: truncated header", path);
    LOWBIT_CHECK(h.n_ctx >= 4 && h.n_vocab > 0 && h.n_chunk > 0, ErrorKind::input,
                 "{}: implausible header (n_ctx {}, n_vocab {}, n_chunk {})", path, h.n_ctx, h.n_vocab, h.n_chunk);
    const uint64_t n_tok = uint64_t(h.n_ctx) * uint64_t(h.n_chunk);
    h.data_offset = 20 + 4 * n_tok;
    const uint64_t n_score = uint64_t(h.n_ctx - 1 - h.n_ctx / 2);
    const uint64_t need = h.data_offset + uint64_t(h.n_chunk) * n_score * uint64_t(kld_record_slots(h.n_vocab)) * 2;
    const uint64_t size = fs::file_size(path);
    LOWBIT_CHECK(size >= need, ErrorKind::input,
                 "{}: {} bytes, but n_ctx {}, n_vocab {} and n_chunk {} need {}; the file is truncated", path, size,
                 h.n_ctx, h.n_vocab, h.n_chunk, need);
    h.tokens.resize(size_t(n_tok));
    in.read(reinterpret_cast<char*>(h.tokens.data()), std::streamsize(4 * n_tok));
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: truncated token list", path);
    return h;
}

namespace {

// Streams a KLD base file to `path.tmp-<pid>` and renames it into place on commit().
class KldBaseWriter {
public:
    KldBaseWriter(const std::string& path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t* tokens)
        : path_(path), tmp_(fmt::format("{}.tmp-{}", path, getpid())) {
        out_.open(tmp_, std::ios::binary | std::ios::trunc);
        LOWBIT_CHECK(out_.good(), ErrorKind::input, "{}: cannot create (for --save-logits)", tmp_);
        out_.write("_logits_", 8);
        out_.write(reinterpret_cast<const char*>(&n_ctx), 4);
        out_.write(reinterpret_cast<const char*>(&n_vocab), 4);
        out_.write(reinterpret_cast<const char*>(&n_chunk), 4);
        out_.write(reinterpret_cast<const char*>(tokens), std::streamsize(4 * int64_t(n_ctx) * n_chunk));
    }
    ~KldBaseWriter() {
        if (!committed_) {
            out_.close();
            std::remove(tmp_.c_str());
        }
    }
    void write(const uint16_t* data, int64_t n) {
        out_.write(reinterpret_cast<const char*>(data), std::streamsize(2 * n));
        LOWBIT_CHECK(out_.good(), ErrorKind::runtime, "{}: write failed (disk full?)", tmp_);
    }
    void commit() {
        out_.close();
        LOWBIT_CHECK(!out_.fail(), ErrorKind::runtime, "{}: write failed", tmp_);
        LOWBIT_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, ErrorKind::runtime, "cannot rename {} to {}", tmp_,
                     path_);
        committed_ = true;
    }

private:
    std::string path_, tmp_;
    std::ofstream out_;
    bool committed_ = false;
};

struct MeanErr {
    double mean = 0, err = 0;
};

// Mean and the standard error of the mean, sqrt(var/(n − 1)) as llama.cpp prints it.
MeanErr mean_err(double sum, double sum2, int64_t n) {
    MeanErr r;
    if (n <= 0) return r;
    r.mean = sum / double(n);
    const double var = sum2 / double(n) - r.mean * r.mean;
    r.err = n > 1 && var > 0 ? std::sqrt(var / double(n - 1)) : 0.0;
    return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// evaluation

const char* perplexity_protocol_name(PerplexityProtocol p) { return p == PerplexityProtocol::hf ? "hf" : "llama"; }

PerplexityProtocol parse_perplexity_protocol(const std::string& name) {
    if (name == "llama") return PerplexityProtocol::llama;
    if (name == "hf") return PerplexityProtocol::hf;
    fail(ErrorKind::usage,
         "unknown perplexity protocol '{}': llama (llama.cpp's: second half of each window scored, BOS first in each) "
         "or hf (the GPTQ papers': every token of each window after its first scored)",
         name);
}

int64_t default_perplexity_ctx(PerplexityProtocol p) { return p == PerplexityProtocol::hf ? 2048 : 512; }

PerplexityWindows plan_perplexity_windows(int64_t n_tokens, const PerplexityOptions& opt) {
    const bool hf = opt.protocol == PerplexityProtocol::hf;
    PerplexityWindows w;
    w.n_ctx = opt.n_ctx;
    LOWBIT_CHECK(w.n_ctx >= 4, ErrorKind::usage, "--ctx {} is too small (at least 4)", w.n_ctx);
    // llama.cpp refuses texts shorter than two windows, the GPTQ scripts need one; a KLD base file holds
    // whole windows that passed the rule when it was written.
    const int64_t min_tokens = hf || !opt.kld_base.empty() ? w.n_ctx : 2 * w.n_ctx;
    LOWBIT_CHECK(n_tokens >= min_tokens, ErrorKind::input,
                 "the text tokenizes to {} tokens; perplexity with a context of {} needs at least {} ({}'s rule) — use a "
                 "longer text or a smaller --ctx",
                 n_tokens, w.n_ctx, min_tokens, hf ? "the hf protocol" : "llama.cpp");
    const int64_t n_chunk_max = n_tokens / w.n_ctx;
    w.n_chunks = opt.max_chunks < 0 ? n_chunk_max : std::min(opt.max_chunks, n_chunk_max);
    LOWBIT_CHECK(w.n_chunks > 0, ErrorKind::usage, "--chunks {} leaves nothing to evaluate", opt.max_chunks);
    w.first_pos = hf ? 0 : w.n_ctx / 2;
    w.n_score = w.n_ctx - 1 - w.first_pos;
    w.bos_first = !hf && opt.add_bos;
    LOWBIT_CHECK(!w.bos_first || opt.bos_id >= 0, ErrorKind::input,
                 "the vocabulary adds BOS but has no BOS id (tokenizer.ggml.bos_token_id)");
    return w;
}

PerplexityResult evaluate_perplexity(const std::vector<int32_t>& text_tokens, int64_t n_vocab,
                                     const PerplexityOptions& opt, const WindowLogitsFn& logits_fn,
                                     const WindowNllFn& nll_fn) {
    LOWBIT_CHECK(opt.save_logits.empty() || opt.kld_base.empty(), ErrorKind::usage,
                 "--save-logits and --kld-base cannot be used together");
    // Where the logits are scored: by the provider unless every logit is wanted on the host.
    const bool provider_scoring = nll_fn && opt.save_logits.empty() && opt.kld_base.empty();
    LOWBIT_CHECK(provider_scoring || logits_fn, ErrorKind::usage,
                 "evaluate_perplexity: no logits provider given; a scoring provider alone serves plain perplexity "
                 "only (--save-logits and --kld-base need the logits on the host)");
    LOWBIT_CHECK(opt.protocol == PerplexityProtocol::llama || (opt.save_logits.empty() && opt.kld_base.empty()),
                 ErrorKind::usage,
                 "--save-logits and --kld-base use llama.cpp's KLD base file, whose records are the second halves of "
                 "llama-protocol windows: use --protocol llama with them");
    PerplexityResult res;
    res.n_vocab = n_vocab;
    res.scored_by_provider = provider_scoring;
    const int64_t n_ctx = opt.n_ctx;
    KldBaseHeader base;
    std::ifstream base_in;
    if (!opt.kld_base.empty()) {
        base = read_kld_base_header(opt.kld_base);
        LOWBIT_CHECK(base.n_vocab == n_vocab, ErrorKind::input,
                     "{}: the base logits have a vocabulary of {}, the model {}; compare models that share a tokenizer",
                     opt.kld_base, base.n_vocab, n_vocab);
        LOWBIT_CHECK(n_ctx == base.n_ctx, ErrorKind::usage,
                     "{}: the base file was made with n_ctx {}, this run asks for {}; pass --ctx {}", opt.kld_base,
                     base.n_ctx, n_ctx, base.n_ctx);
        if (!text_tokens.empty()) {
            const size_t n = std::min(text_tokens.size(), base.tokens.size());
            LOWBIT_CHECK(std::equal(base.tokens.begin(), base.tokens.begin() + n, text_tokens.begin()), ErrorKind::input,
                         "{}: its tokens differ from this text's; the base logits were made from another text or "
                         "tokenizer",
                         opt.kld_base);
        }
        base_in.open(opt.kld_base, std::ios::binary);
    }
    const std::vector<int32_t>& tokens = opt.kld_base.empty() ? text_tokens : base.tokens;
    res.n_text_tokens = int64_t(tokens.size());
    const PerplexityWindows plan = plan_perplexity_windows(int64_t(tokens.size()), opt);
    const int64_t n_chunk = plan.n_chunks, first = plan.first_pos, n_score = plan.n_score;
    const int64_t slots = kld_record_slots(n_vocab);
    res.protocol = opt.protocol;
    res.n_ctx = n_ctx;
    res.n_chunks = n_chunk;
    res.first_pos = first;

    std::unique_ptr<KldBaseWriter> writer;
    if (!opt.save_logits.empty())
        writer = std::make_unique<KldBaseWriter>(opt.save_logits, int32_t(n_ctx), int32_t(n_vocab), int32_t(n_chunk),
                                                 tokens.data());

    const int64_t batch = std::max<int64_t>(1, opt.seqs_per_batch);
    const int64_t keep = n_ctx - first;  // logit rows per window from the forward
    std::vector<int32_t> window, targets;
    std::vector<float> logits;
    std::vector<uint16_t> records(writer || !opt.kld_base.empty() ? size_t(n_score * slots) : 0);
    std::vector<double> nll(static_cast<size_t>(batch * n_score));  // [nb, n_score] of the current batch
    std::vector<double> nll_base(static_cast<size_t>(n_score)), kld(nll_base.size());
    std::vector<char> same_top(static_cast<size_t>(n_score));
    std::vector<double> all_kld;
    double sum_nll = 0, sum_nll2 = 0, sum_kld = 0, sum_kld2 = 0, sum_dnll = 0, sum_dnll2 = 0, sum_nll_base = 0;
    int64_t count = 0, n_same = 0;

    std::unique_ptr<ProgressLine> progress;
    if (opt.progress) progress = std::make_unique<ProgressLine>("eval", n_chunk * n_ctx, "tok");
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t c0 = 0; c0 < n_chunk; c0 += batch) {
        const int64_t nb = std::min(batch, n_chunk - c0);
        window.assign(tokens.begin() + c0 * n_ctx, tokens.begin() + (c0 + nb) * n_ctx);
        if (plan.bos_first)
            for (int64_t s = 0; s < nb; ++s) window[s * n_ctx] = opt.bos_id;
        // Positions first … n_ctx − 2 of each window predict the original tokens first + 1 … n_ctx − 1.
        targets.resize(size_t(nb * n_score));
        for (int64_t s = 0; s < nb; ++s)
            std::copy_n(tokens.begin() + (c0 + s) * n_ctx + first + 1, n_score, targets.begin() + s * n_score);
        if (provider_scoring) {
            nll_fn(window.data(), BatchShape{nb, n_ctx}, first, n_score, targets.data(), nll.data(), nullptr);
        } else {
            logits.resize(size_t(nb * keep * n_vocab));
            logits_fn(window.data(), BatchShape{nb, n_ctx}, first, logits.data());
        }

        for (int64_t s = 0; s < nb; ++s) {
            const int64_t chunk = c0 + s;
            const int32_t* target = targets.data() + s * n_score;
            double* nll_w = nll.data() + s * n_score;  // this window's NLLs
            if (!opt.kld_base.empty()) {
                base_in.seekg(std::streamoff(base.data_offset + uint64_t(chunk) * n_score * slots * 2));
                base_in.read(reinterpret_cast<char*>(records.data()), std::streamsize(records.size() * 2));
                LOWBIT_CHECK(base_in.good(), ErrorKind::input, "{}: read failed at chunk {}", opt.kld_base, chunk);
            }
            if (!provider_scoring) {
                const float* lg = logits.data() + s * keep * n_vocab;
                parallel_for(n_score, 8, [&](int64_t r0, int64_t r1) {
                    for (int64_t r = r0; r < r1; ++r) {
                        const float* row = lg + r * n_vocab;
                        if (writer) {
                            nll_w[r] = kld_encode_record(row, n_vocab, target[r], records.data() + r * slots);
                        } else if (!opt.kld_base.empty()) {
                            const KldStep k = kld_compare_record(row, n_vocab, records.data() + r * slots, target[r]);
                            nll_w[r] = k.nll, nll_base[r] = k.nll_base, kld[r] = k.kld, same_top[r] = k.same_top;
                        } else {
                            nll_w[r] = token_nll(row, n_vocab, target[r]);
                        }
                    }
                });
            }
            double chunk_sum = 0;
            for (int64_t r = 0; r < n_score; ++r) {  // fixed order: results do not depend on threads
                LOWBIT_CHECK(std::isfinite(nll_w[r]), ErrorKind::runtime,
                             "non-finite log-likelihood at window {}, position {}: the model produced NaN/Inf logits",
                             chunk, first + r);
                chunk_sum += nll_w[r];
                sum_nll += nll_w[r];
                sum_nll2 += nll_w[r] * nll_w[r];
                if (!opt.kld_base.empty()) {
                    sum_kld += kld[r];
                    sum_kld2 += kld[r] * kld[r];
                    const double dn = nll_w[r] - nll_base[r];
                    sum_dnll += dn;
                    sum_dnll2 += dn * dn;
                    sum_nll_base += nll_base[r];
                    n_same += same_top[r];
                    all_kld.push_back(kld[r]);
                }
            }
            count += n_score;
            res.chunk_ppl.push_back(std::exp(chunk_sum / double(n_score)));
            if (writer) writer->write(records.data(), n_score * slots);
        }
        if (progress) progress->update((c0 + nb) * n_ctx);
    }
    if (progress) progress->finish();
    res.seconds = seconds_since(t0);
    res.tokens_per_second = res.seconds > 0 ? double(n_chunk * n_ctx) / res.seconds : 0;
    if (writer) writer->commit();

    res.n_scored = count;
    const MeanErr m = mean_err(sum_nll, sum_nll2, count);
    res.mean_nll = m.mean;
    res.ppl = std::exp(m.mean);
    res.ppl_err = res.ppl * m.err;
    if (!opt.kld_base.empty()) {
        res.has_kld = true;
        const MeanErr k = mean_err(sum_kld, sum_kld2, count);
        res.kld_mean = k.mean;
        res.kld_err = k.err;
        std::sort(all_kld.begin(), all_kld.end());
        res.kld_median = all_kld[all_kld.size() / 2];
        res.kld_p99 = all_kld[std::min(all_kld.size() - 1, size_t(0.99 * double(all_kld.size())))];
        res.kld_max = all_kld.back();
        const double p = double(n_same) / double(count);
        res.top1_agreement = p;
        res.top1_err = count > 1 ? std::sqrt(p * (1 - p) / double(count - 1)) : 0.0;
        const MeanErr d = mean_err(sum_dnll, sum_dnll2, count);
        res.ln_ppl_ratio = d.mean;
        res.ln_ppl_ratio_err = d.err;
        res.ppl_ratio = std::exp(d.mean);
        res.ppl_base = std::exp(sum_nll_base / double(count));
    }
    return res;
}

WindowLogitsFn cpu_window_logits(const LlamaModel& m, const ModelLinears* linears) {
    return [&m, linears](const int32_t* tokens, BatchShape shape, int64_t first_pos, float* out) {
        forward_logits(m, tokens, shape, first_pos, out, linears);
    };
}

}  // namespace lowbit
