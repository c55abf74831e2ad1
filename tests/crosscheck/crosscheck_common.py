"""crosscheck_common.py — shared helpers of the cross-checks: run the lowbit CLI, compare bit patterns,
count results and print the closing 'N passed, N failed' line."""
import argparse
import os
import subprocess
import sys

import numpy as np


class Checker:
    def __init__(self, description):
        p = argparse.ArgumentParser(description=description)
        p.add_argument("--lowbit", required=True, help="path to the lowbit binary")
        p.add_argument("--tmp", required=True, help="scratch directory")
        self.args = p.parse_args()
        os.makedirs(self.args.tmp, exist_ok=True)
        self.passed = 0
        self.failed = 0

    def path(self, name):
        return os.path.join(self.args.tmp, name)

    def lowbit(self, *argv, expect_rc=0):
        r = subprocess.run([self.args.lowbit, *map(str, argv)], capture_output=True, text=True)
        if expect_rc is not None and r.returncode != expect_rc:
            raise RuntimeError(f"lowbit {' '.join(map(str, argv))} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}", flush=True)

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def same_bits(a, b):
    """Bit-exact equality of two float32 arrays, NaN equal to any NaN."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    if a.shape != b.shape:
        return False, f"shape {a.shape} vs {b.shape}"
    nan = np.isnan(a) & np.isnan(b)
    diff = (a.view(np.uint32) != b.view(np.uint32)) & ~nan
    if diff.any():
        i = np.flatnonzero(diff)[0]
        return False, f"{diff.sum()} of {a.size} differ; first at {i}: {a.flat[i]!r} vs {b.flat[i]!r}"
    return True, ""


def adversarial_values(rng, grid_values):
    """Values that stress a rounding rule: exact grid points, midpoints, just around midpoints, zeros."""
    g = np.unique(np.abs(np.asarray(grid_values, np.float64)))
    g = g[np.isfinite(g)]
    mids = (g[:-1] + g[1:]) / 2
    vals = np.concatenate([g, mids, np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
                           np.nextafter(mids.astype(np.float32), np.float32(0))])
    vals = vals.astype(np.float32)
    return np.concatenate([vals, -vals, np.float32([0.0, -0.0])])
