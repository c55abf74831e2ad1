#!/usr/bin/env python3
"""check_kquants_ggml.py — lowbit's GGUF encoders, decoders and llama.cpp file-type mixes against ggml and
llama.cpp themselves (the build of tests/peer/build_llama_cpp.sh: llama.cpp vendored by llama-cpp-python),
byte for byte:

  1. encoders: `lowbit formats pack --format F` against ggml_quantize_chunk (what llama-quantize calls) and,
     for the K-quants, the type traits' quantize_row_*_ref, through tests/peer/ggml_quantize_ref.c (compiled
     here against the build's libggml-base.a); with an importance matrix `formats pack --imatrix W.npy`
     against ggml_quantize_chunk(..., imatrix) — for Q2_K … Q6_K, IQ4_NL (and the 32-element types without
     one: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, NVFP4);
  2. decoders: `lowbit formats roundtrip` against ggml's to_float on the same bytes;
  3. mixes: small random F32 GGUFs with the tensor names and row lengths of SmolLM2-135M, a 16-layer
     Llama and an 80-layer GQA Llama ("70B"), quantized by `llama-quantize` to every mix of
     formats/gguf_mixes.h (with and without --imatrix): the type of every tensor against
     `lowbit formats mix`, and for a few mixes the bytes of every tensor against `lowbit formats pack`;
  4. the real model (--model, default the SmolLM2-135M Q4_1 GGUF of scripts/fetch_model.sh, when present):
     `llama-quantize --allow-requantize` to every mix, types against `lowbit formats mix`; for Q4_K_M also
     the bytes of every tensor against `lowbit formats pack` of the source dequantized by gguf-py.

    bash tests/peer/build_llama_cpp.sh
    .venv/bin/python tests/peer/check_kquants_ggml.py --lowbit build/lowbit [--work /tmp/kq] [--require] [--model M]

Without the llama.cpp build it prints SKIP and exits 0 (1 with --require). Exit status 1 when anything differs.
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys

import gguf
import numpy as np
from gguf import quants

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "crosscheck"))
from crosscheck_common import same_bits  # noqa: E402

ENCODERS = ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "gguf_mxfp4", "gguf_nvfp4"]
WEIGHTED = ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl"]
GGML_NAME = {"gguf_mxfp4": "mxfp4", "gguf_nvfp4": "nvfp4"}
MIXES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M",
         "Q5_K_S", "Q5_K_M", "Q6_K"]
BYTE_CHECKED_MIXES = ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"]

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}", flush=True)


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def first_diff(a, b):
    if a.size != b.size:
        return f"sizes {a.size} vs {b.size}"
    i = np.flatnonzero(a != b)
    return "" if i.size == 0 else f"{i.size} bytes differ; first at byte {i[0]}: {a[i[0]]:#x} vs {b[i[0]]:#x}"


def build_tool(src, build, work):
    """Compiles ggml_quantize_ref.c against the build's ggml (again when the source or library is newer)."""
    lib = os.path.join(build, "ggml", "src", "libggml-base.a")
    exe = os.path.join(work, "ggml_quantize_ref")
    me = os.path.join(REPO, "tests", "peer", "ggml_quantize_ref.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < max(os.path.getmtime(me), os.path.getmtime(lib)):
        obj = exe + ".o"
        run(["cc", "-O2", "-I", os.path.join(src, "ggml", "include"), "-c", me, "-o", obj])
        run(["c++", "-o", exe, obj, lib, "-fopenmp", "-lpthread", "-lm"])
    return exe


# --- data ---------------------------------------------------------------------------------------------

def test_matrices(rng):
    out = {}
    out["gaussian"] = rng.standard_normal((32, 1024)).astype(np.float32)
    out["student_t_rowscaled"] = (rng.standard_t(3, (48, 512)) * np.exp2(rng.integers(-20, 20, (48, 1)))).astype(np.float32)
    out["ggml_cosine"] = (0.1 + 2 * np.cos(np.arange(32 * 256, dtype=np.float32))).astype(np.float32).reshape(32, 256)
    z = rng.standard_normal((20, 512)).astype(np.float32)
    z[0] = 0                                   # zero block
    z[1, :256] = 3.0                           # constant super-block
    z[1, 256:] = -2.5
    z[2] = -np.abs(z[2])                       # one sign
    z[3, 16:32] = 0                            # zero sub-blocks inside a super-block (ggml's `if (!d) continue`)
    z[3, 64:128] = 0
    z[4, :] = 0
    z[4, 7] = 5.0                              # one spike
    z[4, 300] = -1e-3
    z[5] *= np.float32(1e-30)                  # tiny (fp16 scales underflow)
    z[6] *= np.float32(6e4)                    # near fp16's max
    z[7] *= np.float32(1e30)                   # overflow
    z[8] = np.round(z[8] * 4) / 4              # values on a coarse grid: exact ties
    z[9, :32] = np.arange(32) - 16
    z[10, 100] = np.nan                        # NaN and Inf
    z[11, 3] = np.inf
    z[12, 260] = -np.inf
    z[13, :256] = np.float32(1e-20) * rng.standard_normal(256).astype(np.float32)
    z[14] = np.abs(z[14])                      # one sign, min > 0
    z[15, ::2] = 0
    z[16] = np.float32(2.0 ** -14) * np.sign(z[16])  # fp16's smallest normal, both signs
    z[17, 0] = 100.0                           # the block maximum before a NaN (ggml's MAX forgets the NaN)
    z[17, 5] = np.nan
    z[17, 256 + 40] = np.nan                   # a NaN first in a K-quant sub-block
    out["edge"] = z
    return out


def importance(rng, cols):
    w = rng.gamma(0.5, 1.0, cols).astype(np.float32)
    w[::37] = 0.0   # columns without importance
    w[5] = 1e4      # one dominant column
    return w


# --- 1, 2: encoders and decoders -----------------------------------------------------------------------

def check_codecs(lowbit, tool, work, rng):
    for label, x in test_matrices(rng).items():
        rows, cols = x.shape
        inp, raw = os.path.join(work, "x.npy"), os.path.join(work, "x.f32")
        np.save(inp, x)
        x.tofile(raw)
        w = importance(rng, cols)
        wnpy, wraw = os.path.join(work, "w.npy"), os.path.join(work, "w.f32")
        np.save(wnpy, w)
        w.tofile(wraw)
        for fmt in ENCODERS:
            g = GGML_NAME.get(fmt, fmt)
            ours, theirs = os.path.join(work, "ours.bin"), os.path.join(work, "theirs.bin")
            run([lowbit, "formats", "pack", "--format", fmt, inp, ours])
            run([tool, "chunk", g, rows, cols, raw, theirs])
            a, b = np.fromfile(ours, np.uint8), np.fromfile(theirs, np.uint8)
            d = first_diff(a, b)
            check(f"{fmt} bytes vs ggml_quantize_chunk on {label}", not d, d)
            if fmt.endswith("_k"):
                run([tool, "ref", g, rows, cols, raw, theirs])
                d = first_diff(a, np.fromfile(theirs, np.uint8))
                check(f"{fmt} bytes vs quantize_row_{g}_ref on {label}", not d, d)
            # Decoder: ggml's to_float on our bytes against our roundtrip.
            deq_ours, deq_theirs = os.path.join(work, "deq.npy"), os.path.join(work, "deq.f32")
            run([lowbit, "formats", "roundtrip", "--format", fmt, inp, deq_ours])
            run([tool, "dequant", g, rows, cols, ours, deq_theirs])
            ok, why = same_bits(np.load(deq_ours), np.fromfile(deq_theirs, np.float32).reshape(rows, cols))
            check(f"{fmt} decoder vs ggml to_float on {label}", ok, why)
            if fmt in WEIGHTED:
                run([lowbit, "formats", "pack", "--format", fmt, "--imatrix", wnpy, inp, ours])
                run([tool, "chunk", g, rows, cols, raw, theirs, wraw])
                d = first_diff(np.fromfile(ours, np.uint8), np.fromfile(theirs, np.uint8))
                check(f"{fmt} bytes with an imatrix vs ggml_quantize_chunk on {label}", not d, d)


# --- 3: mixes -------------------------------------------------------------------------------------------

SHAPES = {  # name: (layers, d, ffn, heads, kv_heads, vocab rows, tied)
    "smollm2-135m": (30, 576, 1536, 9, 3, 8, True),
    "llama-16l": (16, 1024, 2816, 16, 4, 8, False),
    "llama-80l-gqa": (80, 512, 768, 64, 8, 8, False),
}
ROWS = 4  # llama.cpp's type choice reads only the row length (ne0); few rows keep the files small


def model_tensors(shape, rng):
    layers, d, ffn, heads, kv, vocab, tied = shape
    t = [("token_embd.weight", (vocab, d)), ("output_norm.weight", (d,))]
    if not tied:
        t.append(("output.weight", (vocab, d)))
    for l in range(layers):
        p = f"blk.{l}."
        t += [(p + "attn_norm.weight", (d,)), (p + "attn_q.weight", (ROWS, d)), (p + "attn_k.weight", (ROWS, d)),
              (p + "attn_v.weight", (ROWS, d)), (p + "attn_output.weight", (ROWS, d)), (p + "ffn_norm.weight", (d,)),
              (p + "ffn_gate.weight", (ROWS, d)), (p + "ffn_up.weight", (ROWS, d)), (p + "ffn_down.weight", (ROWS, ffn))]
    return [(n, (rng.standard_normal(s) * (1.0 if len(s) == 1 else 0.05)).astype(np.float32)) for n, s in t]


def write_model(path, shape, tensors):
    layers, d, ffn, heads, kv, vocab, tied = shape
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(2048)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(d // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    for name, data in tensors:
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_legacy_imatrix(path, entries):
    """llama-imatrix's legacy .dat: n, then per entry (len, name, ncall, nval, floats); ncall 1 = the values."""
    with open(path, "wb") as f:
        f.write(struct.pack("<i", len(entries)))
        for name, values in entries.items():
            b = name.encode()
            f.write(struct.pack("<i", len(b)) + b + struct.pack("<ii", 1, values.size))
            f.write(values.astype("<f4").tobytes())


def compare_types(tag, mix, lowbit, src, out, extra=()):
    """llama-quantize's type of every tensor (read from its output) against `lowbit formats mix` on the source."""
    theirs = {t.name: t for t in gguf.GGUFReader(out).tensors}
    ours = {t["name"]: t["type"] for t in json.loads(run([lowbit, "formats", "mix", "--mix", mix, "--json", src,
                                                            *extra]))["tensors"]}
    wrong = [f"{n}: {ours.get(n)} vs {t.tensor_type.name}" for n, t in theirs.items() if ours.get(n) != t.tensor_type.name]
    check(f"{tag}: types of {len(theirs)} tensors", not wrong and len(ours) == len(theirs),
          "; ".join(wrong[:6]) + (f" (+{len(wrong) - 6})" if len(wrong) > 6 else ""))
    return theirs


def compare_tensor_bytes(tag, lowbit, work, theirs, data, imatrix=None):
    """Each quantized tensor of llama-quantize's output against `lowbit formats pack` of its F32 source."""
    bad = []
    for name, t in theirs.items():
        x = data(name)
        fmt = t.tensor_type.name.lower()
        if x.ndim < 2 or fmt in ("f32", "f16", "bf16"):
            continue
        extra = []
        if imatrix is not None and fmt in WEIGHTED:
            np.save(os.path.join(work, "t_w.npy"), imatrix[name])
            extra = ["--imatrix", os.path.join(work, "t_w.npy")]
        elif imatrix is not None and fmt != "q8_0":
            continue  # lowbit has no imatrix search for this type (Q4_0 … Q5_1 with an imatrix)
        inp, packed = os.path.join(work, "t.npy"), os.path.join(work, "t.bin")
        np.save(inp, x)
        run([lowbit, "formats", "pack", "--format", fmt, *extra, inp, packed])
        d = first_diff(np.fromfile(packed, np.uint8), np.asarray(t.data).reshape(-1).view(np.uint8))
        if d:
            bad.append(f"{name} ({fmt}): {d}")
    check(f"{tag}: bytes of every quantized tensor", not bad, "; ".join(bad[:4]))


def check_real_model(lowbit, quantize, work, model):
    source = {t.name: t for t in gguf.GGUFReader(model).tensors}
    for mix in MIXES:
        out = os.path.join(work, "real_mixed.gguf")
        run([quantize, "--allow-requantize", model, out, mix, 2])
        theirs = compare_types(f"{os.path.basename(model)} {mix}", mix, lowbit, model, out)
        if mix == "Q4_K_M":
            compare_tensor_bytes(f"{os.path.basename(model)} {mix}", lowbit, work, theirs,
                                 lambda n: quants.dequantize(source[n].data, source[n].tensor_type).astype(np.float32))


def check_mixes(lowbit, quantize, work, rng):
    for model, shape in SHAPES.items():
        tensors = model_tensors(shape, rng)
        src = os.path.join(work, f"{model}.gguf")
        write_model(src, shape, tensors)
        imatrix = {n: importance(rng, a.shape[-1]) for n, a in tensors if a.ndim == 2}
        imat = os.path.join(work, f"{model}.imatrix.dat")
        write_legacy_imatrix(imat, imatrix)
        data = dict(tensors)
        for mix in MIXES:
            for with_imatrix in (False, True):
                tag = f"{model} {mix}{' --imatrix' if with_imatrix else ''}"
                out = os.path.join(work, "mixed.gguf")
                run([quantize, *(["--imatrix", imat] if with_imatrix else []), src, out, mix, 2])
                theirs = compare_types(tag, mix, lowbit, src, out, ["--imatrix-used"] if with_imatrix else [])
                if mix in BYTE_CHECKED_MIXES:
                    compare_tensor_bytes(tag, lowbit, work, theirs, data.get, imatrix if with_imatrix else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowbit", required=True)
    ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR", os.path.join(REPO, "build-peer")))
    ap.add_argument("--work", default="/tmp/lowbit_check_kquants")
    ap.add_argument("--require", action="store_true", help="fail instead of skipping when the build is absent")
    ap.add_argument("--no-mixes", action="store_true", help="only the encoders and decoders")
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/lowbit/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"),
        help="a real GGUF for step 4 (skipped when the file is absent)")
    args = ap.parse_args()
    srcs = sorted(glob.glob(os.path.join(args.peer_dir, "llama_cpp_python-*", "vendor", "llama.cpp")))
    build = os.path.join(args.peer_dir, "llama.cpp-build")
    lib = os.path.join(build, "ggml", "src", "libggml-base.a")
    quantize = os.path.join(build, "bin", "llama-quantize")
    if not srcs or not os.path.exists(lib):
        print(f"SKIP: no llama.cpp build under {args.peer_dir} (run: bash tests/peer/build_llama_cpp.sh)")
        sys.exit(1 if args.require else 0)
    os.makedirs(args.work, exist_ok=True)
    np.seterr(all="ignore")
    rng = np.random.default_rng(11)
    tool = build_tool(srcs[-1], build, args.work)
    info = os.path.join(build, "peer-build-info.txt")
    if os.path.exists(info):
        print(open(info).read().strip())
    check_codecs(args.lowbit, tool, args.work, rng)
    if args.no_mixes:
        pass
    elif os.path.exists(quantize):
        check_mixes(args.lowbit, quantize, args.work, rng)
        if os.path.exists(args.model):
            check_real_model(args.lowbit, quantize, args.work, args.model)
        else:
            print(f"(no {args.model}: the real-model step is skipped; scripts/fetch_model.sh fetches it)")
    else:
        check("llama-quantize built", False, f"{quantize} missing (bash tests/peer/build_llama_cpp.sh)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
