// eval.h — perplexity with llama.cpp's protocol (interop.md §7.2) or the Hugging Face / GPTQ-paper one, and
// KL divergence against reference logits stored in llama.cpp's KLD base-file format (§7.3). The text comes
// from io/corpus.h.
//
// Both protocols tokenize the whole text once (with BOS first when the vocabulary adds one) and cut the
// tokens into n_chunk = n_tokens / n_ctx non-overlapping windows (remainder dropped). They differ in what a
// window scores:
//   llama (tools/perplexity/perplexity.cpp, `perplexity()`): at least 2·n_ctx tokens required; the first
//     token of every window is replaced by BOS when the vocabulary adds BOS; the logits of positions
//     first = n_ctx/2 … n_ctx−2 score tokens first+1 … n_ctx−1 (n_ctx − 1 − n_ctx/2 tokens per window).
//   hf (the GPTQ repository's llama_eval / datautils, what GPTQ/AWQ/QuIP papers report; n_ctx 2048 there):
//     windows of the text as tokenized (no BOS per window: only the text's first token is BOS); inside each
//     window the labels are shifted, so positions 0 … n_ctx−2 score tokens 1 … n_ctx−1 (n_ctx − 1 per
//     window); nsamples = n_tokens / n_ctx ≥ 1. Its PPL = exp(Σ_windows mean_loss·n_ctx / (nsamples·n_ctx))
//     is exp(mean NLL over all scored tokens), since every window scores as many tokens.
// PPL = exp(mean NLL), and the ± is PPL·sqrt(var(NLL)/(count − 1)) for both.
//
// KLD base file (llama protocol only: its records are the second halves of the windows): "_logits_", i32 n_ctx, i32 n_vocab, i32 n_chunk, the n_ctx·n_chunk original tokens
// (i32), then per window and scored position nv = 2·⌈n_vocab/2⌉ + 4 u16 slots: f32 scale and f32
// min_log_prob in the first four, then each logit quantized between max − 16 and max (log-probabilities
// below max-logit − 16 are stored as 0 and skipped by the reader). lowbit writes it byte-compatibly
// (`--save-logits`) and reads llama.cpp's or its own (`--kld-base`): KLD(base‖model) mean ± error,
// top-1 agreement, and PPL(model)/PPL(base) = exp(mean(NLL − NLL_base)). NLL_base is read from the
// 16-bit record, so it is floored at ~16 nats + log-sum-exp, exactly as in llama.cpp.
//
// Two providers: a WindowLogitsFn returns the scored logits to the host, where the evaluator scores them
// (always used for --save-logits and --kld-base, which need every logit); an optional WindowNllFn scores
// where the logits are made (the CUDA forward: cuda_window_nll) and returns one NLL per position. The
// evaluator alone decides which positions are scored and which tokens they predict, for both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/forward_cpu.h"

namespace lowbit {

// --- scoring primitives (llama.cpp's arithmetic: float max, double sum of expf) ---

// The score of one position: nll = −log softmax(logits)[tok] and argmax = the first index of the largest
// logit. Arithmetic (what a device scorer must reproduce): m = max in FP32; lse = float(log(Σ double(
// expf(l − m)))), l − m in FP32, the sum in FP64; nll = double(m + lse − logits[tok]) in FP32.
struct TokenScore {
    double nll = 0;
    int32_t argmax = 0;
};
TokenScore token_score(const float* logits, int64_t n_vocab, int32_t tok);
// token_score(…).nll.
double token_nll(const float* logits, int64_t n_vocab, int32_t tok);

// u16 slots per scored position in a KLD base file.
inline int64_t kld_record_slots(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }
// Writes one record (kld_record_slots(n_vocab) slots) for `logits`; returns −log softmax[tok].
double kld_encode_record(const float* logits, int64_t n_vocab, int32_t tok, uint16_t* record);

struct KldStep {
    double kld = 0;       // Σ p_base (log p_base − log p_model) over stored entries above −16
    double nll = 0;       // model
    double nll_base = 0;  // from the record
    bool same_top = false;
};
KldStep kld_compare_record(const float* logits, int64_t n_vocab, const uint16_t* record, int32_t tok);

// --- KLD base file ---

struct KldBaseHeader {
    int32_t n_ctx = 0;
    int32_t n_vocab = 0;
    int32_t n_chunk = 0;
    std::vector<int32_t> tokens;  // n_ctx · n_chunk
    uint64_t data_offset = 0;     // where chunk 0's records start
};
KldBaseHeader read_kld_base_header(const std::string& path);

// --- evaluation ---

// Produces the logits of positions first_pos..n_tok−1 of n_seq windows: [n_seq, n_tok − first_pos, vocab].
// The CPU forward is one implementation; a CUDA forward plugs in the same way.
using WindowLogitsFn = std::function<void(const int32_t* tokens, BatchShape shape, int64_t first_pos, float* logits)>;

// Scores positions first_pos … first_pos + n_score − 1 of n_seq windows where their logits are made, so
// that only the scores reach the host: nll[s·n_score + r] and, when argmax is not null, argmax[s·n_score + r]
// are token_score(logits of position first_pos + r of window s, targets[s·n_score + r]) — within the
// implementation's stated rounding (the CUDA one: model/cuda/token_nll_cuda.cuh). targets are host token ids.
using WindowNllFn = std::function<void(const int32_t* tokens, BatchShape shape, int64_t first_pos, int64_t n_score,
                                       const int32_t* targets, double* nll, int32_t* argmax)>;

enum class PerplexityProtocol : uint8_t { llama, hf };
const char* perplexity_protocol_name(PerplexityProtocol p);  // "llama", "hf"
// "llama" | "hf"; Error(usage) naming both otherwise.
PerplexityProtocol parse_perplexity_protocol(const std::string& name);
// The window length a protocol uses unless told: 512 (llama.cpp's default) or 2048 (the GPTQ papers').
int64_t default_perplexity_ctx(PerplexityProtocol p);

struct PerplexityOptions {
    PerplexityProtocol protocol = PerplexityProtocol::llama;
    int64_t n_ctx = 512;
    int64_t max_chunks = -1;     // −1: all
    int64_t seqs_per_batch = 1;  // windows per forward call
    bool add_bos = false;        // llama protocol: replace each window's first token by bos_id
    int32_t bos_id = -1;
    std::string save_logits;     // write a KLD base file here (llama protocol only)
    std::string kld_base;        // compare against this KLD base file (its tokens are used; llama protocol only)
    bool progress = true;        // progress line on stderr
};

// How a protocol cuts `n_tokens` tokens into windows and which positions it scores: the logits of positions
// first_pos … first_pos + n_score − 1 of window c (tokens c·n_ctx … c·n_ctx + n_ctx − 1) score the tokens one
// position later. Error(usage/input) for a context or text the protocol cannot use.
struct PerplexityWindows {
    int64_t n_ctx = 0, n_chunks = 0;
    int64_t first_pos = 0;     // llama: n_ctx/2; hf: 0
    int64_t n_score = 0;       // scored tokens per window: n_ctx − 1 − first_pos
    bool bos_first = false;    // the first token of every window is replaced by BOS (llama with add_bos)
};
PerplexityWindows plan_perplexity_windows(int64_t n_tokens, const PerplexityOptions& opt);

struct PerplexityResult {
    PerplexityProtocol protocol = PerplexityProtocol::llama;
    int64_t n_ctx = 0, n_chunks = 0, n_scored = 0, n_vocab = 0;
    int64_t first_pos = 0;      // the first scored position of each window (logits rows start here)
    int64_t n_text_tokens = 0;  // tokens of the text (or of the KLD base file when one is given)
    double mean_nll = 0, ppl = 0, ppl_err = 0;
    std::vector<double> chunk_ppl;  // perplexity of each window's scored tokens
    double seconds = 0, tokens_per_second = 0;  // all n_chunks·n_ctx tokens through the model
    bool scored_by_provider = false;  // the NLLs came from the WindowNllFn (no logits crossed to the host)
    // With a KLD base:
    bool has_kld = false;
    double kld_mean = 0, kld_err = 0, kld_median = 0, kld_p99 = 0, kld_max = 0;
    double top1_agreement = 0, top1_err = 0;  // fraction of positions where the argmax agrees
    double ppl_base = 0, ln_ppl_ratio = 0, ln_ppl_ratio_err = 0, ppl_ratio = 0;
};

// `tokens` is the tokenized text (ignored for the windows when opt.kld_base is set, except that it
// must then agree with the base file's tokens if non-empty). n_vocab is the model's vocabulary.
// When nll_fn is given and the run needs no logits on the host (neither opt.save_logits nor opt.kld_base),
// the windows are scored by nll_fn and logits_fn is not called (it may then be empty); otherwise by the
// host from logits_fn. The windows, their BOS, the scored positions and their targets are the same.
PerplexityResult evaluate_perplexity(const std::vector<int32_t>& tokens, int64_t n_vocab, const PerplexityOptions& opt,
                                     const WindowLogitsFn& logits_fn, const WindowNllFn& nll_fn = {});

// The CPU forward of an in-memory model as a WindowLogitsFn, through `linears` (null: dense); both must
// outlive the function.
WindowLogitsFn cpu_window_logits(const LlamaModel& m, const ModelLinears* linears = nullptr);

}  // namespace lowbit
