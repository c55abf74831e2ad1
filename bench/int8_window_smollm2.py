"""int8_window_smollm2.py — how much of a real model's GEMM operands the INT8 tensor-core MXFP4 GEMM could chain
(adahop/int8_window.h): a NumPy FP32 forward of SmolLM2-135M (from `lowbit export-hf`) over 512 tokens of a SOTU
speech captures, at a few layers, the inputs of q/k/v, o, gate/up and down, and `lowbit analyze detect --json`
counts their (128-line tile, 256-deep chunk) pairs outside the window: as A (forward's X, K = features) and as B
(wgrad's X, K = tokens), plain and IHT; the weights as the forward's B (K = in features). B is counted twice: with
the kernel's rule (one base per 128-line tile) and with A's (one base per line), the alternative design. The forward's NLL is
printed as a sanity check (a wrong forward gives ~10 nats).

    python bench/int8_window_smollm2.py --lowbit build-cpu/lowbit --text ../shared/data/corpora/sotu/2021_joseph_r_biden_d.txt

With --compare R.json (`lowbit analyze model --json` over the same tokens: a text of exactly tokens + 2 tokens, so
that its one window starts at 0) it is also the peer of `analyze model` (train/operand_analysis.h), whose operands
come from the C++ training forward and backward: the loss, and for every census above the count `analyze model`
reports for the same operand (fwd A = X, wgrad B = X, fwd B = Wᵀ), must agree.
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--lowbit", required=True)
ap.add_argument("--text", required=True)
ap.add_argument("--tokens", type=int, default=512)
ap.add_argument("--layers", default="0,7,15,23,29")
ap.add_argument("--compare", help="`lowbit analyze model --json` output over the same tokens")
args = ap.parse_args()
work = tempfile.mkdtemp(prefix="int8win_")


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


hf = os.path.join(work, "hf")
run(args.lowbit, "export-hf", "--model", "smollm2-135m", "--out", hf)
cfg = json.load(open(os.path.join(hf, "config.json")))
raw = open(os.path.join(hf, "model.safetensors"), "rb").read()
n = int.from_bytes(raw[:8], "little")
header = json.loads(raw[8:8 + n])
W = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32).reshape(v["shape"])
     for k, v in header.items() if k != "__metadata__"}
ids = json.loads(run(args.lowbit, "tokenize", "--model", "smollm2-135m", "--text", args.text, "--json"))["ids"][:args.tokens + 1]
T, d, H, KV, hd = len(ids) - 1, cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]


def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


inv = theta ** (-np.arange(0, hd, 2) / hd)
ang = np.arange(T)[:, None] * inv[None, :]
cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))


def rope(x):  # [T, heads, hd], HF's rotate_half
    h = hd // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def census(name, m):
    path = os.path.join(work, name + ".npy")
    np.save(path, np.ascontiguousarray(m, np.float32))
    return json.loads(run(args.lowbit, "analyze", "detect", "--json", path))["int8_window"]


def frac(j, s):
    return f"{j[s]['outside']}/{j[s]['tile_chunks']}" if j else "-"


keep = {int(x) for x in args.layers.split(",")}
x = W["model.embed_tokens.weight"][ids[:-1]].astype(np.float32)
rows = []
mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
for layer in range(cfg["num_hidden_layers"]):
    p = f"model.layers.{layer}."
    a = rms(x, W[p + "input_layernorm.weight"])
    q = rope((a @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd))
    k = rope((a @ W[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hd))
    v = (a @ W[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hd)
    k, v = np.repeat(k, H // KV, 1), np.repeat(v, H // KV, 1)
    s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    o = np.einsum("hts,shd->thd", s, v).reshape(T, H * hd)
    x = x + o @ W[p + "self_attn.o_proj.weight"].T
    m = rms(x, W[p + "post_attention_layernorm.weight"])
    g, u = m @ W[p + "mlp.gate_proj.weight"].T, m @ W[p + "mlp.up_proj.weight"].T
    act = g / (1 + np.exp(-g)) * u
    x = x + act @ W[p + "mlp.down_proj.weight"].T
    if layer in keep:
        for what, t in (("q/k/v input", a), ("o input", o), ("gate/up input", m), ("down input", act)):
            c = census(f"l{layer}_" + what.split()[0].replace("/", ""), t)
            ct = census(f"l{layer}_t" + what.split()[0].replace("/", ""), t.T)  # B's lines with A's per-line rule
            rows.append((layer, what, c["as_a"], c["as_b"], ct["as_a"]))
        for what, w in (("q weight", W[p + "self_attn.q_proj.weight"]), ("down weight", W[p + "mlp.down_proj.weight"])):
            c = census(f"l{layer}_w" + what.split()[0], w.T)  # the forward's B: [out][in], K = in = the rows of Wᵀ
            rows.append((layer, what, None, c["as_b"], census(f"l{layer}_v" + what.split()[0], w)["as_a"]))
logits = rms(x, W["model.norm.weight"]) @ W["model.embed_tokens.weight"].T
logits -= logits.max(-1, keepdims=True)
nll = -(logits[np.arange(T), ids[1:]] - np.log(np.exp(logits).sum(-1))).mean()
print(f"SmolLM2-135M FP32 NumPy forward, {T} tokens of {os.path.basename(args.text)}: NLL {nll:.3f} (PPL {np.exp(nll):.1f})")
print("(128-line tile, 256-deep chunk) pairs outside the INT8 window / all")
print("| layer | operand | as A (forward, K = features) plain | IHT | as B (K = tokens; weights: K = in), one base per "
      "128-line tile (the kernel's rule) plain | IHT | as B, one base per line plain | IHT |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for layer, what, a, b, bl in rows:
    print(f"| {layer} | {what} | {frac(a, 'plain')} | {frac(a, 'iht')} | {frac(b, 'plain')} | {frac(b, 'iht')} | "
          f"{frac(bl, 'plain')} | {frac(bl, 'iht')} |")

if args.compare:
    rep = json.load(open(args.compare))
    by_name = {p["name"]: p["slots"] for p in rep["projections"]}
    linear = {"q/k/v input": "attn_q", "o input": "attn_output", "gate/up input": "ffn_gate", "down input": "ffn_down",
              "q weight": "attn_q", "down weight": "ffn_down"}
    checks = []
    for layer, what, a, b, bl in rows:
        slots = by_name[f"blk.{layer}.{linear[what]}"]
        for rot in ("plain", "iht"):
            if what.endswith("weight"):  # the forward's B = Wᵀ
                fwd = slots["forward_y"]["int8_window"][rot]
                checks += [(layer, what, rot, "fwd B per tile", b[rot]["outside"], fwd["b_tile_outside"]),
                           (layer, what, rot, "fwd B per line", bl[rot]["outside"], fwd["b_line_outside"])]
            else:
                fwd, wg = slots["forward_y"]["int8_window"][rot], slots["backward_gw"]["int8_window"][rot]
                checks += [(layer, what, rot, "fwd A", a[rot]["outside"], fwd["a_outside"]),
                           (layer, what, rot, "wgrad B per tile", b[rot]["outside"], wg["b_tile_outside"]),
                           (layer, what, rot, "wgrad B per line", bl[rot]["outside"], wg["b_line_outside"])]
    bad = [c for c in checks if c[4] != c[5]]
    print(f"peer check of `lowbit analyze model` ({args.compare}): loss {rep['loss']:.4f} vs NumPy {nll:.4f}; "
          f"{len(checks) - len(bad)} of {len(checks)} census counts equal")
    for layer, what, rot, role, mine, theirs in bad:
        print(f"  differs: layer {layer} {what} {rot} {role}: NumPy {mine}, analyze model {theirs}")
