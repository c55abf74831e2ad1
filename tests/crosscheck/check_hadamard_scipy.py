"""check_hadamard_scipy.py — `lowbit hadamard` against scipy.linalg.hadamard (Sylvester order), in float64:
full transforms for every power of two 1…4096 along both axes, block-diagonal transforms, the seeded
randomized variant (signs and permutation re-derived here from the documented counter RNG), inverses, and
orthonormality of the non-power-of-two orders (m·2^k, m in 12…172; scipy has no such matrices, so their
rows are checked for M·Mᵀ = I and against the inverse).

Usage: python check_hadamard_scipy.py --lowbit PATH_TO_lowbit_BINARY --tmp DIR"""
import numpy as np
import scipy.linalg

from crosscheck_common import Checker

c = Checker(__doc__)
rng = np.random.default_rng(20240611)
TOL = 1e-6  # relative Frobenius error of a float32 transform vs float64 (expected ~1e-7)
M64 = (1 << 64) - 1


def rel_fro(got, want):
    want = np.asarray(want, np.float64)
    den = np.linalg.norm(want)
    return np.linalg.norm(np.asarray(got, np.float64) - want) / (den if den > 0 else 1.0)


def run(x, *flags):
    """Writes x, runs `lowbit hadamard FLAGS in out`, returns the output array."""
    src, dst = c.path("hadamard_in.npy"), c.path("hadamard_out.npy")
    np.save(src, np.asarray(x, np.float32))
    c.lowbit("hadamard", *flags, src, dst)
    y = np.load(dst)
    if y.dtype != np.float32 or y.shape != x.shape:
        raise RuntimeError(f"lowbit hadamard wrote {y.dtype} {y.shape}, expected float32 {x.shape}")
    return y


def sylvester(n):
    return scipy.linalg.hadamard(n).astype(np.float64) / np.sqrt(n)


def block_diag(n, block):
    """Orthonormal block-diagonal Hadamard of size n (blocks of `block`), float64."""
    return np.kron(np.eye(n // block), sylvester(block))


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def counter_random24(seed, index):
    """src/core/counter_rng.h, in Python integers."""
    z = mix64((seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & M64) ^ ((index * 0x9E3779B97F4A7C15) & M64)
    return mix64(z) >> 40


def random_signs(seed, dim):
    return np.array([-1.0 if counter_random24(seed, j) & 1 else 1.0 for j in range(dim)])


def random_permutation(seed, dim, block):
    """hadamard.h: per block at j0, Fisher–Yates with r = (counter_random24(seed ^ 0x5045524D, j0+i)·(i+1)) >> 24."""
    out = np.empty(dim, np.int64)
    for j0 in range(0, dim, block):
        p = list(range(block))
        for i in range(block - 1, 0, -1):
            r = (counter_random24(seed ^ 0x5045524D, j0 + i) * (i + 1)) >> 24
            p[i], p[r] = p[r], p[i]
        out[j0:j0 + block] = j0 + np.array(p)
    return out


def check_close(name, got, want, tol=TOL):
    err = rel_fro(got, want)
    c.check(name, err < tol, f"relative Frobenius error {err:.3g} >= {tol:g}")


# 1. Full transforms, every power of two 1…4096, both axes.
for k in range(13):
    n = 1 << k
    x = rng.standard_normal((5, n)).astype(np.float32)
    check_close(f"axis 1 n={n}", run(x), x.astype(np.float64) @ sylvester(n).T)
    xt = rng.standard_normal((n, 3)).astype(np.float32)
    check_close(f"axis 0 n={n}", run(xt, "--axis", "0"), sylvester(n) @ xt.astype(np.float64))

# 2. Block-diagonal transforms along both axes.
for n, block in ((1024, 16), (1024, 32), (1024, 64), (1024, 128), (1024, 256), (4096, 512), (768, 256), (96, 32)):
    x = rng.standard_normal((4, n)).astype(np.float32)
    check_close(f"axis 1 n={n} block {block}", run(x, "--block", block), x.astype(np.float64) @ block_diag(n, block).T)
    xt = rng.standard_normal((n, 5)).astype(np.float32)
    check_close(f"axis 0 n={n} block {block}", run(xt, "--block", block, "--axis", "0"),
                block_diag(n, block) @ xt.astype(np.float64))

# 3. Inverse of the plain transform (Sylvester H is symmetric: H·H = I).
x = rng.standard_normal((3, 2048)).astype(np.float32)
check_close("inverse(forward) n=2048", run(run(x), "--inverse"), x)

# 4. Randomized: y = H·D·P·x per block, with signs and permutation re-derived from the documented RNG.
for n, block, seed, permute in ((256, 256, 7, False), (256, 64, 7, True), (512, 128, 123456789, True),
                                (4096, 4096, 2**63 + 5, True)):
    flags = ["--seed", seed, "--block", block] + (["--permute"] if permute else [])
    x = rng.standard_normal((3, n)).astype(np.float32)
    s = random_signs(seed, n)
    p = random_permutation(seed, n, block) if permute else np.arange(n)
    want = (x.astype(np.float64)[:, p] * s) @ block_diag(n, block).T
    y = run(x, *flags)
    check_close(f"randomized n={n} block {block} seed {seed} permute {permute}", y, want)
    check_close(f"randomized inverse n={n} block {block}", run(y, *flags, "--inverse"), x)
    xt = np.ascontiguousarray(x.T)
    want_t = block_diag(n, block) @ (xt.astype(np.float64)[p, :] * s[:, None])
    check_close(f"randomized axis 0 n={n} block {block}", run(xt, *flags, "--axis", "0"), want_t)

# 5. Non-power-of-two orders: orthonormal (transform of the identity has M·Mᵀ = I) and invertible.
for n in (12, 20, 24, 28, 36, 40, 52, 60, 108, 140, 156, 172, 344, 768):
    m = run(np.eye(n, dtype=np.float32)).astype(np.float64)  # row i = (H e_i)ᵀ
    err = np.abs(m @ m.T - np.eye(n)).max()
    c.check(f"order {n} orthonormal", err < 1e-5, f"max |M·Mᵀ − I| = {err:.3g}")
    c.check(f"order {n} is ±1/sqrt(n)", np.allclose(np.abs(m), 1 / np.sqrt(n), rtol=1e-6), "entries")
    x = rng.standard_normal((2, n)).astype(np.float32)
    check_close(f"order {n} inverse(forward)", run(run(x), "--inverse"), x, 1e-5)
for n in (11008, 14336):
    x = rng.standard_normal((2, n)).astype(np.float32)
    y = run(x)
    check_close(f"order {n} preserves norms", np.linalg.norm(y.astype(np.float64), axis=1),
                np.linalg.norm(x.astype(np.float64), axis=1), 1e-5)
    check_close(f"order {n} inverse(forward)", run(y, "--inverse"), x, 1e-5)

# 6. Unsupported sizes are refused with advice (exit 3) and leave no output.
bad = c.path("hadamard_bad.npy")
np.save(bad, np.ones((2, 5888), np.float32))
r = c.lowbit("hadamard", bad, c.path("hadamard_bad_out.npy"), expect_rc=None)
c.check("size 5888 exits 3", r.returncode == 3, (r.returncode, r.stderr))
c.check("size 5888 gives advice", "--block 256" in r.stderr and "pad to 6144" in r.stderr, r.stderr)

c.finish()
