#!/usr/bin/env python3
"""make_tiny_gguf.py — writes a small random Llama-family GGUF with the gguf package (llama.cpp's own
gguf-py), for peer checks of the paths the real SmolLM2 model does not exercise: arch qwen2 (q/k/v
biases, neox RoPE, untied output) or arch llama with the converter's q/k row permutation.

The vocabulary size matches SmolLM2's (49152), so `lowbit eval --tokenizer smollm2-135m` can drive it:

    .venv/bin/python tests/peer/make_tiny_gguf.py --arch qwen2 --out /tmp/tiny-qwen2.gguf
    /tmp/peer-venv/bin/python tests/peer/check_transformers.py --lowbit build/lowbit \
        --model /tmp/tiny-qwen2.gguf --tokenizer smollm2-135m --chunks 2
"""
import argparse

import numpy as np
import gguf


def permute_for_gguf(w, n_head):
    # convert_hf_to_gguf.py LlamaModel.permute: per head, rows (2, hd/2) -> (hd/2, 2).
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=["qwen2", "llama"], default="qwen2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    vocab, d, layers, heads, kv_heads, ffn = 49152, 128, 2, 4, 2, 320
    hd = d // heads
    qwen = args.arch == "qwen2"

    def mat(rows, cols, scale=0.08):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(args.out, args.arch)
    w.add_context_length(2048)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(1000000.0 if qwen else 10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(hd)
    w.add_bos_token_id(1)
    w.add_tensor("token_embd.weight", mat(vocab, d, 0.5))
    w.add_tensor("output_norm.weight", norm(d))
    if qwen:
        w.add_tensor("output.weight", mat(vocab, d, 0.3))
    for l in range(layers):
        p = f"blk.{l}."
        wq, wk = mat(heads * hd, d), mat(kv_heads * hd, d)
        bq = (0.1 * rng.standard_normal(heads * hd)).astype(np.float32)
        bk = (0.1 * rng.standard_normal(kv_heads * hd)).astype(np.float32)
        if not qwen:  # what the converter does for arch llama
            wq, wk = permute_for_gguf(wq, heads), permute_for_gguf(wk, kv_heads)
        w.add_tensor(p + "attn_norm.weight", norm(d))
        w.add_tensor(p + "attn_q.weight", wq)
        w.add_tensor(p + "attn_k.weight", wk)
        w.add_tensor(p + "attn_v.weight", mat(kv_heads * hd, d))
        if qwen:
            w.add_tensor(p + "attn_q.bias", bq)
            w.add_tensor(p + "attn_k.bias", bk)
            w.add_tensor(p + "attn_v.bias", (0.1 * rng.standard_normal(kv_heads * hd)).astype(np.float32))
        w.add_tensor(p + "attn_output.weight", mat(d, heads * hd))
        w.add_tensor(p + "ffn_norm.weight", norm(d))
        w.add_tensor(p + "ffn_gate.weight", mat(ffn, d))
        w.add_tensor(p + "ffn_up.weight", mat(ffn, d))
        w.add_tensor(p + "ffn_down.weight", mat(d, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{args.out}: tiny {args.arch}, vocab {vocab}, d {d}, {layers} layers, {heads}/{kv_heads} heads")


if __name__ == "__main__":
    main()
