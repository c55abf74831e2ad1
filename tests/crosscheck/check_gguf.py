"""check_gguf.py — lowbit's GGUF blocks (Q4_0, Q4_1, Q8_0, MXFP4) against the PyPI package `gguf`
(llama.cpp's own NumPy reference quantizers): packed bytes and dequantized values, bit for bit."""
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

from crosscheck_common import Checker, same_bits

np.seterr(all="ignore")  # the edge rows overflow fp16 on both sides, by design
c = Checker(__doc__)
rng = np.random.default_rng(7)

FORMATS = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q8_0": T.Q8_0, "gguf_mxfp4": T.MXFP4}


def inputs():
    out = {}
    out["gaussian"] = rng.standard_normal((64, 512)).astype(np.float32)
    out["scaled"] = (rng.standard_t(3, (64, 256)) * np.exp2(rng.integers(-60, 60, (64, 1)))).astype(np.float32)
    z = rng.standard_normal((16, 128)).astype(np.float32)
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


for label, x in inputs().items():
    for name, qt in FORMATS.items():
        inp, packed, deq = c.path("g_in.npy"), c.path("g_out.bin"), c.path("g_deq.npy")
        np.save(inp, x)
        c.lowbit("formats", "pack", "--format", name, inp, packed)
        ours = np.fromfile(packed, dtype=np.uint8)
        theirs = quants.quantize(x, qt).reshape(-1)
        same = ours.size == theirs.size and np.array_equal(ours, theirs)
        detail = ""
        if not same and ours.size == theirs.size:
            i = np.flatnonzero(ours != theirs)[0]
            detail = f"{(ours != theirs).sum()} bytes differ; first at byte {i}: {ours[i]:#x} vs {theirs[i]:#x}"
        c.check(f"{name} bytes on {label}", same, detail or f"sizes {ours.size} vs {theirs.size}")
        c.lowbit("formats", "roundtrip", "--format", name, inp, deq)
        ref = quants.dequantize(theirs.reshape(x.shape[0], -1), qt).astype(np.float32)
        ok, why = same_bits(np.load(deq), ref)
        c.check(f"{name} dequantized on {label}", ok, why)

c.finish()
