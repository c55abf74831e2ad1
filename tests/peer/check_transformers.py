#!/usr/bin/env python3
"""check_transformers.py — peer check of lowbit's Llama-family forward pass against Hugging Face transformers.

lowbit exports the model it runs (dequantized weights, q/k rows un-permuted to HF order) with `lowbit
export-hf`, evaluates a text with `lowbit eval --save-logits --dump-logits`, and this script runs the same
windows (the tokens are read back from lowbit's KLD base file, BOS first when the vocabulary adds one)
through transformers' LlamaForCausalLM / Qwen2ForCausalLM in float32. It prints the largest absolute logit
difference, both perplexities (llama.cpp's protocol: positions n_ctx/2 .. n_ctx-2 predict the next token),
the top-1 agreement and KLD(transformers || lowbit), and fails when they disagree beyond float32 noise.

Not part of CTest: it needs torch + transformers (a GPU host, or a CPU venv outside the repository):

    python3 -m venv /tmp/peer-venv && /tmp/peer-venv/bin/pip install torch transformers safetensors numpy
    /tmp/peer-venv/bin/python tests/peer/check_transformers.py --lowbit build/lowbit --model smollm2-135m \
        --corpus sotu-test --ctx 512 --chunks 2 [--device cuda] [--tmp /tmp/peer]
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return out


def read_kld_header(path):
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic != b"_logits_":
            raise SystemExit(f"{path}: not a KLD base file")
        n_ctx, n_vocab, n_chunk = struct.unpack("<iii", f.read(12))
        tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype="<i4").reshape(n_chunk, n_ctx)
    return n_ctx, n_vocab, n_chunk, tokens


def is_hf_dir(model):
    return os.path.isfile(os.path.join(model, "config.json"))


def add_common_args(ap):
    """The options of the comparison (shared with check_fakequant_transformers.py)."""
    ap.add_argument("--lowbit", required=True, help="the lowbit binary")
    ap.add_argument("--tokenizer", default=None, help="passed to lowbit eval (a model without its own vocabulary)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--corpus", default=None, help="lowbit corpus name (default sotu-test)")
    src.add_argument("--text", default=None, help="a text file")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    ap.add_argument("--tmp", default="/tmp/lowbit-peer", help="work directory (export, logits)")
    ap.add_argument("--tol-ppl", type=float, default=1e-4, help="max relative PPL difference allowed")


def check_args(ap, args):
    """Argument errors before anything runs (exit 2 through argparse)."""
    if not (os.path.isfile(args.lowbit) and os.access(args.lowbit, os.X_OK)):
        ap.error(f"--lowbit {args.lowbit}: not an executable file")
    if args.ctx < 4 or args.chunks < 1:
        ap.error(f"--ctx must be at least 4 and --chunks at least 1 (got {args.ctx}, {args.chunks})")
    if args.text and not os.path.isfile(args.text):
        ap.error(f"--text {args.text}: no such file")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--model", default="smollm2-135m", help="model lowbit runs (.gguf, HF dir or known name)")
    ap.add_argument("--tol-logit", type=float, default=2e-3, help="max |logit difference| allowed")
    args = ap.parse_args()
    check_args(ap, args)
    r = compare_with_transformers(args, args.model)
    ok = r["max_abs"] <= args.tol_logit and r["ppl_rel"] <= args.tol_ppl
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def compare_with_transformers(args, model_arg):
    """Runs `lowbit eval` on model_arg (dumping its logits) and transformers on the same windows; prints and
    returns the comparison: max_abs, max_logit, ppl_hf, ppl_ours, ppl_lowbit, ppl_rel, kld, top1, count."""
    import torch
    from transformers import AutoModelForCausalLM

    os.makedirs(args.tmp, exist_ok=True)
    hf_dir = os.path.join(args.tmp, "hf")
    base = os.path.join(args.tmp, "base.kld")
    dump = os.path.join(args.tmp, "logits.npy")
    # An HF checkpoint given as the model is loaded as it is (this checks lowbit's readers against the files
    # transformers or lowbit's exporter wrote); a GGUF is checked through lowbit's export.
    hf_source = model_arg if is_hf_dir(model_arg) else hf_dir
    if hf_source == hf_dir:
        run([args.lowbit, "export-hf", "--model", model_arg, "--out", hf_dir])
    source = ["--text", args.text] if args.text else ["--corpus", args.corpus or "sotu-test"]
    tok = ["--tokenizer", args.tokenizer] if args.tokenizer else []
    report = json.loads(run([args.lowbit, "eval", "--model", model_arg, *tok, *source, "--ctx", str(args.ctx), "--chunks",
                             str(args.chunks), "--save-logits", base, "--dump-logits", dump, "--no-progress",
                             "--json"]))
    n_ctx, n_vocab, n_chunk, tokens = read_kld_header(base)
    ours = np.load(dump, mmap_mode="r")  # [n_chunk, n_ctx - n_ctx/2, vocab]
    first = n_ctx // 2
    assert ours.shape == (n_chunk, n_ctx - first, n_vocab), ours.shape

    import transformers
    dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    print(f"transformers loads {hf_source}", file=sys.stderr)
    model = AutoModelForCausalLM.from_pretrained(hf_source, attn_implementation="eager", **{dtype_kw: torch.float32})
    model.to(args.device).eval()
    max_abs = 0.0
    max_logit = 0.0
    nll_hf, nll_ours, kld, same_top, count = 0.0, 0.0, 0.0, 0, 0
    with torch.no_grad():
        for c in range(n_chunk):
            window = tokens[c].copy()
            if report["add_bos"]:
                window[0] = report["bos_id"]
            ids = torch.tensor(window[None, :], dtype=torch.long, device=args.device)
            logits = model(input_ids=ids).logits[0, first:].double().cpu()  # [n_ctx - first, vocab]
            mine = torch.from_numpy(np.array(ours[c], dtype=np.float64))
            max_abs = max(max_abs, (logits - mine).abs().max().item())
            max_logit = max(max_logit, logits.abs().max().item())
            target = torch.from_numpy(tokens[c, first + 1:].astype(np.int64))  # original tokens
            lp_hf = torch.log_softmax(logits[:-1], dim=-1)
            lp_ours = torch.log_softmax(mine[:-1], dim=-1)
            nll_hf -= lp_hf.gather(1, target[:, None]).sum().item()
            nll_ours -= lp_ours.gather(1, target[:, None]).sum().item()
            kld += (lp_hf.exp() * (lp_hf - lp_ours)).sum().item()
            same_top += (lp_hf.argmax(-1) == lp_ours.argmax(-1)).sum().item()
            count += target.numel()
    ppl_hf, ppl_ours = math.exp(nll_hf / count), math.exp(nll_ours / count)
    print(f"windows {n_chunk} x {n_ctx}, {count} scored tokens, vocab {n_vocab}")
    print(f"max |logit(transformers) - logit(lowbit)| = {max_abs:.3e}  (largest |logit| {max_logit:.2f})")
    print(f"PPL transformers {ppl_hf:.6f}   PPL lowbit (from its logits) {ppl_ours:.6f}   lowbit eval {report['ppl']:.6f}")
    print(f"KLD(transformers || lowbit) {kld / count:.3e}   top-1 agreement {100.0 * same_top / count:.3f}%")
    return {"max_abs": max_abs, "max_logit": max_logit, "ppl_hf": ppl_hf, "ppl_ours": ppl_ours,
            "ppl_lowbit": report["ppl"], "ppl_rel": abs(ppl_hf / report["ppl"] - 1), "kld": kld / count,
            "top1": same_top / count, "count": count}


if __name__ == "__main__":
    sys.exit(main())
