"""check_gguf_file.py — lowbit's GGUF container code (io/gguf_file.h, driven through the test helper
tool_gguf_dump) against the PyPI package `gguf` (llama.cpp's gguf-py):
  * files written by gguf-py's GGUFWriter are read by ours: metadata (every value type), tensor infos, tensor
    bytes, and every tensor dequantized bit for bit against gguf-py's `quants.dequantize`;
  * our writer rewrites them byte for byte (raw copy, and re-encoding F16/BF16/Q4_0/Q4_1/Q8_0/MXFP4 from the
    F32 source with our own conversions), and gguf-py's GGUFReader reads what our writer wrote;
  * if the SmolLM2-135M GGUF is in the lowbit cache (scripts/fetch_model.sh), its metadata and all its
    tensors, dequantized by us, are compared with gguf-py the same way; otherwise that part is skipped."""
import glob
import json
import os
import shutil
import subprocess

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V
from gguf import quants

from crosscheck_common import Checker, same_bits

np.seterr(all="ignore")
c = Checker(__doc__)
rng = np.random.default_rng(2024)
TOOL = os.path.join(os.path.dirname(os.path.abspath(c.args.lowbit)), "tool_gguf_dump")

VALUE_TYPE_NAMES = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32", V.INT32: "i32",
                    V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array", V.UINT64: "u64",
                    V.INT64: "i64", V.FLOAT64: "f64"}


def tool(*argv):
    r = subprocess.run([TOOL, *map(str, argv)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tool_gguf_dump {' '.join(map(str, argv))} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def checksum(b):
    """sum_i w_i·(2i+1) mod 2^64 over little-endian u64 words, zero-padded (as tool_gguf_dump computes it)."""
    b = bytes(b)
    w = np.frombuffer(b + bytes((-len(b)) % 8), dtype="<u8")
    return int((w * (np.arange(len(w), dtype=np.uint64) * np.uint64(2) + np.uint64(1))).sum(dtype=np.uint64))


def float_bits(x, type_name):
    return int(np.float32(x).view(np.uint32)) if type_name == "f32" else int(np.float64(x).view(np.uint64))


def py_scalar(x, type_name):
    if type_name in ("f32", "f64"):
        return float_bits(x, type_name)
    return bool(x) if type_name == "bool" else (x if type_name == "string" else int(x))


def field_as_ours(field):
    """A gguf-py ReaderField in tool_gguf_dump's JSON form (None for nested arrays, which gguf-py cannot list)."""
    main = VALUE_TYPE_NAMES[field.types[0]]
    if main != "array":
        return main, py_scalar(field.contents(), main)
    if len(field.types) > 2 or (len(field.types) == 2 and field.types[1] == V.ARRAY):
        return main, None
    sub = VALUE_TYPE_NAMES[field.types[-1]] if len(field.types) > 1 else None
    return main, {"elem_type": sub, "items": [py_scalar(v, sub) for v in field.contents()]}


def compare_with_reader(label, path, ours):
    """Our JSON dump of `path` against gguf-py's GGUFReader of the same file."""
    r = gguf.GGUFReader(path)
    fields = [f for f in r.fields.values() if not f.name.startswith("GGUF.")]
    c.check(f"{label}: metadata keys in order", [f.name for f in fields] == [m["key"] for m in ours["metadata"]],
            f"{[f.name for f in fields]} vs {[m['key'] for m in ours['metadata']]}")
    for f, m in zip(fields, ours["metadata"]):
        t, v = field_as_ours(f)
        c.check(f"{label}: type of {f.name}", t == m["type"], f"{t} vs {m['type']}")
        if v is not None:
            c.check(f"{label}: value of {f.name}", v == m["value"], f"{str(v)[:200]} vs {str(m['value'])[:200]}")
    c.check(f"{label}: tensor count", len(r.tensors) == len(ours["tensors"]))
    for t, o in zip(r.tensors, ours["tensors"]):
        ok = (t.name == o["name"] and int(t.tensor_type) == o["type"] and [int(d) for d in t.shape] == o["ne"]
              and int(t.data_offset) == ours["data_offset"] + o["offset"] and int(t.n_bytes) == o["n_bytes"])
        c.check(f"{label}: info of {t.name}", ok, f"gguf-py {t.name} {t.tensor_type.name} {list(t.shape)} "
                f"@{t.data_offset} {t.n_bytes} B vs ours {o}")
        c.check(f"{label}: bytes of {t.name}", checksum(t.data.tobytes()) == o["checksum"])
    return r


def compare_dequantized(label, path, reader, batch=16):
    """Every tensor gguf-py can dequantize, dequantized by us (tool_gguf_dump --npy-dir), bit for bit."""
    names = [t for t in reader.tensors if t.tensor_type in quants._type_traits or t.tensor_type in (T.F32, T.F16)]
    out = c.path("deq")
    n_ok = 0
    for i in range(0, len(names), batch):
        chunk = names[i:i + batch]
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        tool(path, "--npy-dir", out, *[t.name for t in chunk])
        for k, t in enumerate(chunk):
            theirs = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            ours = np.load(os.path.join(out, f"{k}.npy"))
            ok, why = same_bits(ours, theirs.reshape(ours.shape)) if ours.size == theirs.size else (False, "size")
            c.check(f"{label}: dequantized {t.name} ({t.tensor_type.name})", ok, why)
            n_ok += ok
    shutil.rmtree(out, ignore_errors=True)
    return n_ok, len(names)


def write_sample(path, alignment=None):
    w = gguf.GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("v.u8", 200)
    w.add_int8("v.i8", -100)
    w.add_uint16("v.u16", 60000)
    w.add_int16("v.i16", -30000)
    w.add_uint32("v.u32", 4000000000)
    w.add_int32("v.i32", -2000000000)
    w.add_float32("v.f32", 0.1)
    w.add_uint64("v.u64", 2**64 - 1)
    w.add_int64("v.i64", -2**63)
    w.add_float64("v.f64", 2.0 / 3.0)
    w.add_bool("v.true", True)
    w.add_bool("v.false", False)
    w.add_string("v.string", "h\u00e9llo \u2581w\u00f6rld \u65e5\u672c \"q\"\n")
    w.add_array("v.strings", ["<s>", "a b", "\u2581the", "\u65e5\u672c", "\u0120t"])
    w.add_key_value("v.u8s", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_array("v.i32s", [-1, 0, 7])
    w.add_array("v.f32s", [0.5, -1e30, float("inf")])
    w.add_array("v.bools", [True, False, True])
    w.add_key_value("v.u64s", [0, 2**63], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("v.f64s", [1.5, -0.0], V.ARRAY, sub_type=V.FLOAT64)
    w.add_array("v.nested", [[1, 2], [3]])
    x = rng.standard_normal((3, 256)).astype(np.float32)
    x[0, :32] *= np.float32(1e-6)
    w.add_tensor("t:F32", x)
    w.add_tensor("t:F16", x.astype(np.float16))
    for qt in (T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4):
        w.add_tensor(f"t:{qt.name}", quants.quantize(x, qt), raw_dtype=qt)
    k = rng.integers(0, 256, (2, 210), dtype=np.uint8)  # Q6_K: random codes and sub-scales, sane fp16 d
    k[:, 208:210] = np.float16(rng.uniform(1e-3, 1e-2, 2)).view(np.uint8).reshape(2, 2)
    w.add_tensor("k6", k, raw_dtype=T.Q6_K)
    w.add_tensor("v4:F32", rng.standard_normal((2, 1, 3, 32)).astype(np.float32))
    w.add_tensor("one:F32", np.float32([3.5]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


if not os.path.exists(TOOL):
    c.check("tool_gguf_dump built next to lowbit", False, f"{TOOL} missing (cmake --build ... --target tool_gguf_dump)")
    c.finish()

for alignment in (None, 64):
    label = f"gguf-py sample (alignment {alignment or 32})"
    a = c.path(f"sample_{alignment or 32}.gguf")
    write_sample(a, alignment)
    ours = json.loads(tool(a))
    c.check(f"{label}: version and alignment", ours["version"] == 3 and ours["alignment"] == (alignment or 32))
    reader = compare_with_reader(label, a, ours)
    nested = next(m for m in ours["metadata"] if m["key"] == "v.nested")["value"]
    c.check(f"{label}: nested array", nested == {"elem_type": "array", "items": [
        {"elem_type": "i32", "items": [1, 2]}, {"elem_type": "i32", "items": [3]}]}, str(nested))
    n_ok, n = compare_dequantized(label, a, reader)
    c.check(f"{label}: all tensors dequantized", n == len(reader.tensors), f"{n} of {len(reader.tensors)}")

    # Our writer: raw copy, then re-encoding from the F32 source — both byte-identical to gguf-py's file.
    for mode in ("raw", "encode"):
        b = c.path(f"copy_{mode}_{alignment or 32}.gguf")
        tool("--copy", a, b, *(["--encode"] if mode == "encode" else []))
        same = read_bytes(a) == read_bytes(b)
        detail = ""
        if not same:
            x, y = read_bytes(a), read_bytes(b)
            i = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
            detail = f"sizes {len(x)} vs {len(y)}, first difference at byte {i}"
        c.check(f"{label}: our writer ({mode}) reproduces gguf-py's bytes", same, detail)
        compare_with_reader(f"{label}, written by us ({mode})", b, json.loads(tool(b)))

cache = os.environ.get("LOWBIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lowbit")
models = sorted(glob.glob(os.path.join(cache, "models", "smollm2-135m", "*.gguf")))
if models:
    path = models[0]
    ours = json.loads(tool(path))
    reader = compare_with_reader("SmolLM2", path, ours)
    n_ok, n = compare_dequantized("SmolLM2", path, reader)
    print(f"SmolLM2 ({os.path.basename(path)}): {n_ok} of {n} tensors dequantized bit-exactly "
          f"({len(reader.tensors)} tensors in the file)")
    c.check("SmolLM2: every tensor dequantizable", n == len(reader.tensors))
else:
    print(f"skipped the SmolLM2 comparison: no {cache}/models/smollm2-135m/*.gguf (run scripts/fetch_model.sh)")
c.finish()
