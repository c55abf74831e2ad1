"""check_gptq_safetensors.py — lowbit's GPTQ-packed safetensors export against an independent NumPy reader.
For several grids (int4 g32 sym, int4 g32 asym, int3 g64, int8 per channel, int2 g32, and int4 asym with
checkpoint_format gptq_v2) tests/tool_gptq_export writes the export of a hand-made quantized model and the
float32 weights every projection must decode to (.npy). This script parses the safetensors file itself
(8-byte header length, JSON header, little-endian data), reads config.json's quantization_config, unpacks
qweight / qzeros (GPTQModel's layout: codes along K in int32 words LSB first — 3 bits as 32 codes in 3
words —, zeros along N, v1 storing zero − 1) and scales / g_idx, dequantizes w[n, k] = scale[g, n] ·
(q[k, n] − z[g, n]) in float32, and requires bit-for-bit equality with the .npy; then `lowbit eval` reads the
same checkpoint (a short run; the tiny random model's perplexity only has to be finite)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

# --tool TOOL is ours; crosscheck_common's parser knows only --lowbit and --tmp.
tool = None
if "--tool" in sys.argv:
    i = sys.argv.index("--tool")
    tool = sys.argv[i + 1]
    del sys.argv[i:i + 2]

from crosscheck_common import Checker, same_bits  # noqa: E402

c = Checker(__doc__)
if tool is None:
    print("FAIL: --tool tool_gptq_export is required")
    sys.exit(1)

DTYPES = {"F16": np.float16, "F32": np.float32, "BF16": None, "I32": np.int32}


def read_safetensors(path):
    """{name: array} from one .safetensors file, parsed from its bytes."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        out[name] = np.frombuffer(data[begin:end], dtype=np.dtype(dt).newbyteorder("<")).reshape(info["shape"])
    return out


def unpack_stream(words, n, bits):
    """Rows of int32 words (axis 0 = the stream) → n values of `bits` along axis 0, LSB first."""
    w = words.astype(np.uint32).astype(np.uint64)
    stream = np.zeros((n,) + w.shape[1:], np.uint64)
    for i in range(n):
        bit = i * bits
        word, shift = divmod(bit, 32)
        v = w[word] >> np.uint64(shift)
        if shift + bits > 32:
            v |= w[word + 1] << np.uint64(32 - shift)
        stream[i] = v & np.uint64((1 << bits) - 1)
    return stream


def dequantize(t, prefix, q, n_out, k_in):
    bits, group = q["bits"], q["group_size"]
    group = k_in if group == -1 else group
    zero_add = 1 if q.get("checkpoint_format", "gptq") == "gptq" else 0
    qweight, qzeros = t[prefix + ".qweight"], t[prefix + ".qzeros"]
    scales, g_idx = t[prefix + ".scales"].astype(np.float32), t[prefix + ".g_idx"]
    n_groups = (k_in + group - 1) // group
    assert qweight.shape == ((k_in * bits + 31) // 32, n_out), qweight.shape
    assert qzeros.shape == (n_groups, (n_out * bits + 31) // 32), qzeros.shape
    assert scales.shape == (n_groups, n_out) and g_idx.shape == (k_in,)
    codes = unpack_stream(qweight, k_in, bits).astype(np.float32)              # [K, N]
    zeros = unpack_stream(qzeros.T, n_out, bits).T.astype(np.float32) + zero_add  # [G, N]
    g = g_idx.astype(np.int64)
    w = scales[g] * (codes - zeros[g])                                          # [K, N], float32 arithmetic
    return w.T.astype(np.float32), g


cases = [("4", "32", "1", "v1"), ("4", "32", "0", "v1"), ("3", "64", "0", "v1"), ("8", "0", "1", "v1"),
         ("2", "32", "0", "v1"), ("4", "32", "0", "v2")]
for bits, group, sym, zeros in cases:
    label = f"int{bits} {'per channel' if group == '0' else 'g' + group} {'sym' if sym == '1' else 'asym'} {zeros}"
    out = c.path(f"gptq_{bits}_{group}_{sym}_{zeros}")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([tool, out, bits, group, sym, zeros], capture_output=True, text=True)
    c.check(f"{label}: tool_gptq_export exits 0", r.returncode == 0, r.stderr)
    if r.returncode != 0:
        continue
    ckpt = os.path.join(out, "checkpoint")
    config = json.load(open(os.path.join(ckpt, "config.json")))
    q = config.get("quantization_config", {})
    c.check(f"{label}: quantization_config", q.get("quant_method") == "gptq" and q.get("bits") == int(bits) and
            q.get("group_size") == (-1 if group == "0" else int(group)) and q.get("sym") == (sym == "1") and
            q.get("desc_act") is False and q.get("checkpoint_format") == ("gptq" if zeros == "v1" else "gptq_v2"), q)
    tensors = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    expected_dir = os.path.join(out, "expected")
    n_linears = 0
    for f in sorted(os.listdir(expected_dir)):
        prefix = f[:-len(".npy")]
        want = np.load(os.path.join(expected_dir, f))
        c.check(f"{label}: {prefix} has no dense weight", prefix + ".weight" not in tensors)
        got, g = dequantize(tensors, prefix, q, want.shape[0], want.shape[1])
        group_k = want.shape[1] if group == "0" else int(group)
        c.check(f"{label}: {prefix} g_idx = k // group", np.array_equal(g, np.arange(want.shape[1]) // group_k))
        ok, detail = same_bits(got, want)
        c.check(f"{label}: {prefix} dequantizes bit for bit", ok, detail)
        n_linears += 1
    c.check(f"{label}: 14 projections checked", n_linears == 14, n_linears)
    report = json.load(open(os.path.join(out, "report.json")))
    c.check(f"{label}: FP16-exact scales reported as such", report.get("scales_not_fp16") == 0, report)
    c.check(f"{label}: marlin_compatible", report.get("marlin_compatible") ==
            (sym == "1" and bits in ("4", "8")), report)

    # lowbit eval reads the checkpoint (the tool writes no tokenizer: a tokenizer.json whose tokens are the
    # characters of the text is given).
    if zeros == "v2":
        tok = c.path("gptq_tokenizer.json")
        vocab = {chr(0x21 + i): i for i in range(60)}  # 60 single characters and one merge: 61 tokens,
        vocab['!"'] = 60                                   # the tiny model's vocabulary
        json.dump({"model": {"type": "BPE", "vocab": vocab, "merges": ['! "']},
                   "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}},
                  open(tok, "w"))
        text = c.path("gptq_text.txt")
        open(text, "w").write("".join(chr(0x21 + (i * 7) % 60) for i in range(200)))
        r = c.lowbit("eval", "--model", ckpt, "--tokenizer", tok, "--text", text, "--ctx", "32", "--chunks", "2",
                     "--protocol", "hf", "--no-progress", "--json", expect_rc=None)
        rep = json.loads(r.stdout) if r.returncode == 0 else {}
        c.check(f"{label}: lowbit eval reads the GPTQ checkpoint", r.returncode == 0 and np.isfinite(rep.get("ppl", np.nan))
                and rep.get("n_scored") == 2 * 31, (r.returncode, r.stderr[-400:]))

c.finish()
