#!/usr/bin/env python3
"""train_torch.py — the PyTorch baseline of lowbit's BF16 training step (issue 20's speed goal).

A Llama model written out in plain PyTorch (RMSNorm, RoPE with halves pairing, GQA through SDPA with
is_causal, SwiGLU, tied embeddings; lowbit's initialization: N(0, 0.02²), the two output projections of each
block 0.02/√(2·layers), norm gains 1), trained on uniformly random tokens with BF16 autocast, fused AdamW
(lr 4e-4, β 0.9/0.95, ε 1e-8, weight decay 0.1 on the rank-2 tensors only, as lowbit's optimizer.h), gradient
clipping at 1.0 and lowbit's schedule (linear warm-up, cosine to 10 %). Only PyTorch 2.x is needed.

    python3 bench/train_torch.py --shape base [--compile] [--steps 30] [--warmup 10]
        → one JSON line: shape, compile, tokens/s, ms/step, peak memory, torch version, GPU name (+ MFU)
    python3 bench/train_torch.py --shape base --check-loss
        → one JSON line with the first 5 losses from a fixed seed: on uniformly random tokens they start
          just above ln(vocab) = 10.80 and cannot fall below it

The warm-up steps (compilation, cuBLAS/SDPA autotuning, allocator growth) are excluded from the timing; the
timed steps run without a host synchronisation until the last one. Run it in the same device call as
lowbit's own benchmark so that both see the same GPU. `--shape tiny --device cpu` is a smoke run.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

# layers, d_model, heads, kv_heads, ffn, vocab — lowbit's presets (train/train_model.h) and SmolLM2-135M
SHAPES = {
    "base": dict(layers=12, dim=768, heads=12, kv_heads=4, ffn=3072, vocab=49152),
    "smollm2": dict(layers=30, dim=576, heads=9, kv_heads=3, ffn=1536, vocab=49152),
    "tiny": dict(layers=2, dim=64, heads=4, kv_heads=2, ffn=256, vocab=512),
}
ROPE_THETA = 10000.0
RMS_EPS = 1e-5
INIT_STD = 0.02
H200_BF16_DENSE_TFLOPS = 989.0  # the MFU denominator (H100/H200 SXM dense BF16 peak)


def native_gqa_available():
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 5)  # SDPA's enable_gqa


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)) * self.weight


def rope_tables(seq_len, head_dim, device):
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()  # [T, head_dim/2]


def apply_rope(x, cos, sin):
    """Halves pairing (HF Llama): element i rotates with element i + head_dim/2. x: [B, heads, T, head_dim]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, c, native_gqa):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c["heads"], c["kv_heads"], c["dim"] // c["heads"]
        self.native_gqa = native_gqa
        self.wq = nn.Linear(c["dim"], self.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(c["dim"], self.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(c["dim"], self.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.heads * self.head_dim, c["dim"], bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.native_gqa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # query head h reads KV head h // (heads / kv_heads), as enable_gqa does
            group = self.heads // self.kv_heads
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate = nn.Linear(c["dim"], c["ffn"], bias=False)
        self.up = nn.Linear(c["dim"], c["ffn"], bias=False)
        self.down = nn.Linear(c["ffn"], c["dim"], bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, c, native_gqa):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(c["dim"]), Attention(c, native_gqa)
        self.ffn_norm, self.ffn = RMSNorm(c["dim"]), SwiGLU(c)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, c, seq_len, native_gqa, device):
        super().__init__()
        self.embed = nn.Embedding(c["vocab"], c["dim"])
        self.blocks = nn.ModuleList(Block(c, native_gqa) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["dim"])
        cos, sin = rope_tables(seq_len, c["dim"] // c["heads"], device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                out_proj = name.endswith("attn.wo.weight") or name.endswith("ffn.down.weight")
                nn.init.normal_(p, 0.0, INIT_STD / math.sqrt(2 * c["layers"]) if out_proj else INIT_STD)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        logits = F.linear(self.norm(x), self.embed.weight)  # tied LM head
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def lowbit_schedule(warmup, total, min_fraction=0.1):
    """lowbit's optimizer.h: η·(s+1)/W during warm-up, then cosine from η to min_fraction·η."""
    def factor(s):
        if s < warmup:
            return (s + 1) / warmup
        if s >= total:
            return min_fraction
        return min_fraction + (1 - min_fraction) * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup)))
    return factor


def flops_per_token(c, seq_len, matmul_params):
    """nanoGPT/llm.c's estimate: 6·N (N = the matrices, the tied LM head counted once) + 12·L·d·T attention."""
    return 6 * matmul_params + 12 * c["layers"] * c["dim"] * seq_len


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="base")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False, help="torch.compile the model")
    ap.add_argument("--steps", type=int, default=30, help="timed steps (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, autotuning)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--gqa", choices=["native", "repeat"], default="native" if native_gqa_available() else "repeat",
                    help="SDPA enable_gqa (torch >= 2.5, flash backend) or repeat_interleave of K and V")
    ap.add_argument("--check-loss", action="store_true", help="print the first 5 losses from a fixed seed instead of timing")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.seq_len < 1:
        ap.error("--steps, --batch and --seq-len must be positive and --warmup not negative")
    c = SHAPES[args.shape]
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    torch.manual_seed(args.seed)
    model = Llama(c, args.seq_len, args.gqa == "native", device).to(device)
    matrices = [p for p in model.parameters() if p.dim() == 2]
    gains = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": gains, "weight_decay": 0.0}],
                            lr=4e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
    total_steps = 5 if args.check_loss else args.warmup + args.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lowbit_schedule(min(200, total_steps), total_steps))
    step_model = torch.compile(model) if args.compile else model
    data = torch.Generator(device=device)
    data.manual_seed(args.seed + 1000)

    def train_step():
        tokens = torch.randint(0, c["vocab"], (args.batch, args.seq_len + 1), device=device, generator=data)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = step_model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        return loss.detach()

    if args.check_loss:
        losses = [train_step().item() for _ in range(5)]
        print(json.dumps({"mode": "check-loss", "shape": args.shape, "compile": args.compile, "seed": args.seed,
                          "losses": [round(v, 5) for v in losses], "ln_vocab": round(math.log(c["vocab"]), 5)}))
        return

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(args.warmup):
        train_step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step()
    sync()
    seconds = time.perf_counter() - start
    ms_per_step = 1e3 * seconds / args.steps
    tokens_per_s = args.batch * args.seq_len * args.steps / seconds
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    tflops = tokens_per_s * flops_per_token(c, args.seq_len, sum(p.numel() for p in matrices)) / 1e12
    print(json.dumps({
        "shape": args.shape, "compile": args.compile, "tokens_per_s": round(tokens_per_s),
        "ms_per_step": round(ms_per_step, 3), "peak_memory_bytes": peak,
        "peak_memory_gib": round(peak / 2**30, 2) if cuda else None,
        "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device) if cuda else "cpu",
        "batch": args.batch, "seq_len": args.seq_len, "steps": args.steps, "warmup_steps": args.warmup, "gqa": args.gqa,
        "params": sum(p.numel() for p in model.parameters()), "model_tflops": round(tflops, 1),
        "mfu": round(tflops / H200_BF16_DENSE_TFLOPS, 4), "last_loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
