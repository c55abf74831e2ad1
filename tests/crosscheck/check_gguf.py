"""check_gguf.py — lowbit's GGUF blocks against the PyPI package `gguf` (llama.cpp's own NumPy code),
bit for bit: packed bytes and dequantized values of the types gguf-py can quantize (Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0, MXFP4); for the types it can only dequantize (Q2_K … Q6_K, IQ4_NL, NVFP4) our decoder against gguf-py's, on
the bytes our encoder writes and on random blocks (through a GGUF file and tool_gguf_dump). NVFP4's encoder
against ggml's reference rule rebuilt here on gguf-py's UE4M3 codec. Our K-quant and IQ4_NL encoders against
ggml itself: tests/peer/check_kquants_ggml.py."""
import os
import subprocess

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

from crosscheck_common import Checker, same_bits

np.seterr(all="ignore")  # the edge rows overflow fp16 on both sides, by design
c = Checker(__doc__)
rng = np.random.default_rng(7)
TOOL = os.path.join(os.path.dirname(os.path.abspath(c.args.lowbit)), "tool_gguf_dump")

FORMATS = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1, "q8_0": T.Q8_0, "gguf_mxfp4": T.MXFP4}
DECODE_ONLY = {"q2_k": T.Q2_K, "q3_k": T.Q3_K, "q4_k": T.Q4_K, "q5_k": T.Q5_K, "q6_k": T.Q6_K, "iq4_nl": T.IQ4_NL,
               "gguf_nvfp4": T.NVFP4}
# Byte offsets of the fp16 scales in each block (ggml-common.h), set to sane values in the random blocks.
FP16_FIELDS = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,), T.IQ4_NL: (0,),
               T.NVFP4: ()}


def inputs():
    out = {}
    out["gaussian"] = rng.standard_normal((64, 512)).astype(np.float32)
    out["scaled"] = (rng.standard_t(3, (64, 256)) * np.exp2(rng.integers(-60, 60, (64, 1)))).astype(np.float32)
    z = rng.standard_normal((16, 256)).astype(np.float32)
    z[0, :32] = 0                     # zero block
    z[1, :32] = 3.0                   # constant block
    z[2, :] = -np.abs(z[2, :])        # negative extreme
    z[3, :32] = np.arange(32) - 16    # exact ties for Q4_0 (x·id + 8.5 on .5 boundaries)
    z[4, :32] = (np.arange(32) - 15.5) * 0.5
    z[5, :32] = np.float32(3.9999998)  # amax just below a power of two (ggml's log2f)
    z[5, 32:64] = np.float32(4.0000005)
    z[6, :] *= np.float32(1e30)
    z[7, :] *= np.float32(1e-30)
    z[8, :32] = np.float32([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5] * 4)  # MXFP4 grid ties
    out["edge"] = z
    return out


def compare_bytes(name, label, ours, theirs):
    same = ours.size == theirs.size and np.array_equal(ours, theirs)
    detail = f"sizes {ours.size} vs {theirs.size}"
    if not same and ours.size == theirs.size:
        i = np.flatnonzero(ours != theirs)[0]
        detail = f"{(ours != theirs).sum()} bytes differ; first at byte {i}: {ours[i]:#x} vs {theirs[i]:#x}"
    c.check(f"{name} bytes on {label}", same, detail)


def random_blocks(qt, n_blocks, sane):
    """Random bytes; with `sane` the fp16 fields hold small values of either sign, else any bits (Inf, NaN)."""
    size = quants.GGML_QUANT_SIZES[qt][1]
    b = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for off in FP16_FIELDS[qt] if sane else ():
        d = rng.uniform(1e-4, 1e-1, n_blocks) * rng.choice([-1, 1], n_blocks)
        b[:, off:off + 2] = np.float16(d).view(np.uint8).reshape(n_blocks, 2)
    return b.reshape(-1)


inputs_by_label = inputs()
for label, x in inputs_by_label.items():
    for name, qt in DECODE_ONLY.items():
        if x.shape[1] % quants.GGML_QUANT_SIZES[qt][0]:
            continue
        inp, packed, deq = c.path("g_in.npy"), c.path("g_out.bin"), c.path("g_deq.npy")
        np.save(inp, x)
        c.lowbit("formats", "pack", "--format", name, inp, packed)
        ours = np.fromfile(packed, dtype=np.uint8)
        c.check(f"{name} size on {label}", ours.size == x.size // quants.GGML_QUANT_SIZES[qt][0] *
                quants.GGML_QUANT_SIZES[qt][1], f"{ours.size} bytes")
        c.lowbit("formats", "roundtrip", "--format", name, inp, deq)
        ref = quants.dequantize(ours.reshape(x.shape[0], -1), qt).astype(np.float32)
        ok, why = same_bits(np.load(deq), ref)
        c.check(f"{name} decoder vs gguf-py on our bytes of {label}", ok, why)

# Random blocks, decoded by us through a GGUF file (tool_gguf_dump) and by gguf-py.
if not os.path.exists(TOOL):
    c.check("tool_gguf_dump built next to lowbit", False, f"{TOOL} missing (cmake --build ... --target tool_gguf_dump)")
else:
    path, out = c.path("random_blocks.gguf"), c.path("random_deq")
    os.makedirs(out, exist_ok=True)
    w = gguf.GGUFWriter(path, "llama")
    tensors = []
    for qt in DECODE_ONLY.values():
        for sane in (True, False):
            name = f"{qt.name}_{'sane' if sane else 'any'}"
            blocks = random_blocks(qt, 64, sane)
            w.add_tensor(name, blocks.reshape(4, -1), raw_dtype=qt)
            tensors.append((name, qt, blocks))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = subprocess.run([TOOL, path, "--npy-dir", out, *[t[0] for t in tensors]], capture_output=True, text=True)
    c.check("tool_gguf_dump --npy-dir", r.returncode == 0, r.stderr.strip())
    if r.returncode == 0:
        for k, (name, qt, blocks) in enumerate(tensors):
            ref = quants.dequantize(blocks.reshape(4, -1), qt).astype(np.float32)
            ok, why = same_bits(np.load(os.path.join(out, f"{k}.npy")).reshape(ref.shape), ref)
            c.check(f"{name} random blocks decoded", ok, why)

for label, x in inputs_by_label.items():
    for name, qt in FORMATS.items():
        inp, packed, deq = c.path("g_in.npy"), c.path("g_out.bin"), c.path("g_deq.npy")
        np.save(inp, x)
        c.lowbit("formats", "pack", "--format", name, inp, packed)
        ours = np.fromfile(packed, dtype=np.uint8)
        compare_bytes(name, label, ours, quants.quantize(x, qt).reshape(-1))
        c.lowbit("formats", "roundtrip", "--format", name, inp, deq)
        ref = quants.dequantize(ours.reshape(x.shape[0], -1), qt).astype(np.float32)
        ok, why = same_bits(np.load(deq), ref)
        c.check(f"{name} dequantized on {label}", ok, why)


def nvfp4_reference(x):
    """ggml's quantize_row_nvfp4_ref: per 16 elements the UE4M3 code of amax/6, then the nearest entry of the
    doubled E2M1 table (first on ties); sub-block s byte j holds elements j (low) and j + 8 (high)."""
    sub = x.reshape(-1, 16).astype(np.float32)
    ue = quants.NVFP4.fp32_to_ue4m3((np.abs(sub).max(axis=1) / np.float32(6)).astype(np.float32))
    d = quants.NVFP4.ue4m3_to_fp32(ue).astype(np.float32)
    kv = np.array(quants.NVFP4.kvalues, dtype=np.float32)
    err = np.abs(kv[None, None, :] * d[:, None, None] - sub[:, :, None])
    q = np.argmin(err, axis=2).astype(np.uint8)  # first minimum, as ggml's strict <
    qs = (q[:, :8] | (q[:, 8:] << 4)).reshape(-1, 4, 8)
    return np.concatenate([ue.reshape(-1, 4), qs.reshape(-1, 32)], axis=1).reshape(-1)


for label, x in inputs_by_label.items():
    if not np.isfinite(x).all():
        continue
    inp, packed = c.path("g_in.npy"), c.path("g_out.bin")
    np.save(inp, x)
    c.lowbit("formats", "pack", "--format", "gguf_nvfp4", inp, packed)
    compare_bytes("gguf_nvfp4 (ggml's reference rule)", label, np.fromfile(packed, dtype=np.uint8), nvfp4_reference(x))

c.finish()
