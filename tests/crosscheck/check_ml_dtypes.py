"""check_ml_dtypes.py — lowbit's element codecs and MX/NVFP4 block formats against ml_dtypes (an
independent implementation of FP4/FP6/FP8/E8M0/BF16 casts) plus NumPy's float16, bit for bit.
MX and NVFP4 are rebuilt here from ml_dtypes element casts and the scale rules written in NumPy."""
import numpy as np
import ml_dtypes as md

from crosscheck_common import Checker, adversarial_values, same_bits

np.seterr(over="ignore")  # casts of out-of-range values are part of the test
c = Checker(__doc__)
rng = np.random.default_rng(20261130)

TYPES = {  # lowbit element → (dtype, bits, has NaN or Inf)
    "e2m1": (md.float4_e2m1fn, 4, False),
    "e2m3": (md.float6_e2m3fn, 6, False),
    "e3m2": (md.float6_e3m2fn, 6, False),
    "e4m3": (md.float8_e4m3fn, 8, True),
    "e5m2": (md.float8_e5m2, 8, True),
    "bf16": (md.bfloat16, 16, True),
    "fp16": (np.float16, 16, True),
}


def codes_as(dtype, bits):
    raw = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    return raw.view(dtype).astype(np.float32)


# 1. every code decoded
for name, (dt, bits, _) in TYPES.items():
    out = c.path(f"codes_{name}.npy")
    c.lowbit("formats", "codes", "--element", name, out)
    ok, why = same_bits(np.load(out), codes_as(dt, bits))
    c.check(f"codes {name}", ok, why)

# 2. casts with RNE and the IEEE/OCP overflow rule (--overflow special)
for name, (dt, bits, has_special) in TYPES.items():
    grid = codes_as(dt, bits)
    fin = grid[np.isfinite(grid)]
    top = float(np.abs(fin).max())
    logs = rng.uniform(np.log2(np.abs(fin[fin != 0]).min()) - 3, np.log2(top) + 2, 20000)
    rand = (np.sign(rng.standard_normal(20000)) * np.exp2(logs)).astype(np.float32)
    vals = np.concatenate([rand, adversarial_values(rng, fin), np.float32([np.inf, -np.inf, top * 1.01, -top * 3])])
    if has_special:
        vals = np.concatenate([vals, np.float32([np.nan])])
    if bits == 16:  # whole float32 range as raw bits
        raw = rng.integers(0, 2**32, 50000, dtype=np.uint64).astype(np.uint32).view(np.float32)
        vals = np.concatenate([vals, raw[~np.isnan(raw)]])
    inp, out = c.path(f"cast_in_{name}.npy"), c.path(f"cast_out_{name}.npy")
    np.save(inp, vals)
    c.lowbit("formats", "cast", "--element", name, "--rounding", "rne", "--overflow", "special", inp, out)
    ok, why = same_bits(np.load(out), vals.astype(dt).astype(np.float32))
    c.check(f"cast {name} rne", ok, why)

# 3. MX block formats rebuilt from ml_dtypes element casts
MX = {"mxfp4": (md.float4_e2m1fn, 2, 6.0), "mxfp6_e2m3": (md.float6_e2m3fn, 2, 7.5),
      "mxfp6_e3m2": (md.float6_e3m2fn, 4, 28.0), "mxfp8_e4m3": (md.float8_e4m3fn, 8, 448.0),
      "mxfp8_e5m2": (md.float8_e5m2, 15, 57344.0), "mxint8": (None, 0, 127.0 / 64.0)}


def mx_reference(x, fmt, rule):
    dt, emax, maxv = MX[fmt]
    b = x.reshape(-1, 32).astype(np.float64)
    amax = np.abs(b).max(axis=1)
    bad = ~np.isfinite(amax)
    safe = np.where(bad | (amax == 0), 1.0, amax)
    mant, e = np.frexp(safe)            # safe = mant·2^e, mant in [0.5, 1)
    e = e - 1                           # floor(log2 amax)
    s = e - emax
    if rule == "rceil":
        s = s + (safe > maxv * np.exp2(s))
    elif rule == "midmax":
        max_mant = maxv / 2.0 ** emax
        s = s + (safe / np.exp2(e) >= (max_mant + 2) / 2)
    biased = np.clip(s + 127, 0, 254)
    biased = np.where(amax == 0, 0, biased)
    X = np.exp2(biased - 127.0)[:, None]
    v = b / X
    if dt is None:
        q = np.clip(np.round(v * 64), -127, 127) / 64 + 0.0  # int8 has no -0
    else:
        q = np.clip(v, -maxv, maxv).astype(np.float32).astype(dt).astype(np.float64)
    y = (q * X).astype(np.float32)
    y[bad] = np.nan
    return y.reshape(x.shape)


def test_inputs():
    g = rng.standard_normal((64, 256)).astype(np.float32)
    t = (rng.standard_t(3, (64, 256)) * np.exp2(rng.integers(-40, 40, (64, 1)))).astype(np.float32)
    z = rng.standard_normal((8, 128)).astype(np.float32)
    z[0, :32] = 0
    z[1, 5] = np.nan
    z[2, 70] = np.inf
    z[3, :] *= np.float32(1e30)
    z[4, :] *= np.float32(1e-38)
    # exact ties of the FP4 grid: amax 6·2^k with elements at midpoints of the grid
    ties = np.tile(np.float32([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5] * 4), (4, 1)) * np.float32(4.0)
    return {"gaussian": g, "student_t": t, "edge": z, "ties": ties}


for label, x in test_inputs().items():
    for fmt in MX:
        for rule in ("floor", "rceil", "midmax"):
            for axis in (1, 0):
                if x.shape[1 - axis] % 32 and axis == 0:
                    pass
                xin = x if axis == 1 else np.ascontiguousarray(x.T)
                if xin.shape[0] % 32 and axis == 0:
                    continue
                inp, out = c.path("mx_in.npy"), c.path("mx_out.npy")
                np.save(inp, xin)
                c.lowbit("formats", "roundtrip", "--format", fmt, "--scale-rule", rule, "--axis", axis, inp, out)
                ref = mx_reference(xin if axis == 1 else np.ascontiguousarray(xin.T), fmt, rule)
                if axis == 0:
                    ref = np.ascontiguousarray(ref.T)
                ok, why = same_bits(np.load(out), ref)
                c.check(f"{fmt} {rule} axis {axis} on {label}", ok, why)


# 4. NVFP4 rebuilt from ml_dtypes casts (FP32 arithmetic in the same order as nvfp4.h)
def nvfp4_reference(x):
    f = np.float32
    amax = f(np.abs(x).max())
    ts = amax / f(6.0 * 448.0)
    b = x.reshape(-1, 16)
    if ts == 0:
        return np.zeros_like(x)
    target = (np.abs(b).max(axis=1) / f(6.0)) / ts
    sc = np.minimum(target, f(448.0)).astype(md.float8_e4m3fn).astype(np.float32)
    denom = (sc * ts)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(b / denom, -6, 6).astype(md.float4_e2m1fn).astype(np.float32)
    y = np.where(denom == 0, f(0), q * denom)
    return y.reshape(x.shape).astype(np.float32)


for label, x in test_inputs().items():
    if not np.isfinite(x).all():
        continue
    inp, out = c.path("nv_in.npy"), c.path("nv_out.npy")
    np.save(inp, x)
    c.lowbit("formats", "roundtrip", "--format", "nvfp4", inp, out)
    ok, why = same_bits(np.load(out), nvfp4_reference(x))
    c.check(f"nvfp4 on {label}", ok, why)

c.finish()
