#!/usr/bin/env python3
"""make_tiny_hf.py — saves a small random Llama (or Qwen2) checkpoint with transformers' own
save_pretrained, so lowbit's config.json reader (the form this transformers version writes: rope_parameters
in v5, rope_theta + rope_scaling before) and its safetensors reader are checked against the real writer.
The default is a Llama-3.1-style model with llama3 RoPE scaling whose original context (64) is short
enough that the scaled frequencies matter inside a 256-token window. Vocabulary 49152 (SmolLM2's), so
`lowbit eval --tokenizer smollm2-135m` can drive it:

    /tmp/peer-venv/bin/python tests/peer/make_tiny_hf.py --out /tmp/tiny-llama3-hf
    /tmp/peer-venv/bin/python tests/peer/check_transformers.py --lowbit build/lowbit \
        --model /tmp/tiny-llama3-hf --tokenizer smollm2-135m --ctx 256 --chunks 3
"""
import argparse

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", choices=["llama3", "qwen2"], default="llama3")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    common = dict(vocab_size=49152, hidden_size=128, intermediate_size=320, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5,
                  bos_token_id=1, eos_token_id=2)
    if args.arch == "llama3":
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}
        try:  # transformers >= 5: rope_parameters carries theta and the scaling
            cfg = transformers.LlamaConfig(**common, rope_parameters={"rope_theta": 500000.0, **rope},
                                           tie_word_embeddings=False)
        except TypeError:
            cfg = transformers.LlamaConfig(**common, rope_theta=500000.0, rope_scaling=rope, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.Qwen2Config(**common, tie_word_embeddings=True)
        model = transformers.Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the init's, so attention and the blocks matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_((0.5 if "embed" in name else 0.08) * torch.randn_like(p))
    model.save_pretrained(args.out)
    print(f"{args.out}: tiny {args.arch} saved by transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
