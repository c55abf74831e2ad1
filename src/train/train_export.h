// train_export.h — a model written for other runtimes: a llama-architecture GGUF (llama.cpp and lowbit's
// runtime) from the flat FP32 weights of a trained model or from a reader (a Hugging Face checkpoint), with
// the tokenizer of the token shards when it can be had, and the tokenizer itself recovered from a shard
// set's manifest. (The HF checkpoint is model/hf_export.h.)
//
// GGUF (one writer in the house: io/gguf_file.h GgufWriter, as ptq/export_gguf.cpp uses it):
//   general.architecture "llama", general.name, general.file_type (llama_ftype: 0 F32, 1 F16, 32 BF16),
//   llama.{context_length, embedding_length, block_count, feed_forward_length, attention.head_count,
//   attention.head_count_kv, attention.key_length, attention.value_length, attention.layer_norm_rms_epsilon,
//   rope.freq_base, rope.dimension_count, vocab_size};
//   tensors token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
//   ffn_down}, output_norm and (untied only) output — matrices in the requested type, norms always F32.
//   GGUF's llama rotates adjacent pairs: q/k rows of a model trained with halves pairing (HF's, the
//   default) are permuted as convert_hf_to_gguf.py does (model/weights.h permute_qk_rows_to_gguf), so the
//   file computes the same function.
//   Tokenizer: tokenizer.ggml.{model, pre, tokens, token_type, scores (when the vocabulary has them),
//   merges (BPE), bos/eos/unknown ids, add_bos_token, add_space_prefix}. Without a tokenizer the file says
//   tokenizer.ggml.model = "none": llama.cpp then loads the weights (LLAMA_VOCAB_TYPE_NONE: ids in, logits
//   out, no text), and lowbit's runtime reads it as any model (its `tokenize`/`eval` of text need a
//   tokenizer given with --tokenizer).
#pragma once

#include <optional>
#include <string>

#include "formats/gguf_types.h"
#include "io/token_shards.h"
#include "model/tokenizer.h"
#include "model/weights.h"

namespace lowbit {

// "f32" | "f16" | "bf16" → the GGUF type of the matrices; Error(usage) otherwise.
GgufType parse_export_dtype(const std::string& name);

// Writes `m` (Llama, no biases) to `path` atomically; returns the file size.
uint64_t export_llama_gguf(const LlamaModel& m, const std::string& path, GgufType matrix_type,
                           const Tokenizer* tokenizer);
// The same from a reader, one block in memory at a time (each read when the writer reaches it): how `lowbit
// quantize` turns a Hugging Face source into the GGUF its GGUF export is made from.
uint64_t export_llama_gguf(const ModelReader& r, const std::string& path, GgufType matrix_type,
                           const Tokenizer* tokenizer);

// The tokenizer a shard set was made with: `override_path` when given (a .gguf, a tokenizer.json, a known
// model, or "gpt2" for GPT-2's files in the shared data folder), else the manifest's
// info.tokenizer_source (written by `lowbit tokenize-corpus`). Nothing when it cannot be loaded here (e.g.
// the source path exists only on the machine that tokenized); `why` then says what is missing. A loaded
// tokenizer whose model, pre-tokenizer or vocabulary size differs from the manifest's tokenizer id is
// Error(input).
std::optional<Tokenizer> shard_set_tokenizer(const TokenShardManifest& m, const std::string& override_path,
                                             std::string& why);

}  // namespace lowbit
