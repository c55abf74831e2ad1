# changed_positions.py — the share of a row's integer offsets u that change from one shrink to the next along each zero
# rule's chain of the int grid search (SmolLM2 Q4_1, block 5). Run: .venv/bin/python changed_positions.py
import numpy as np, gguf
from gguf import GGUFReader
from gguf.quants import dequantize
r = GGUFReader('/root/.cache/lowbit/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf')
ts = {t.name: t for t in r.tensors}
def W(name):
    t = ts[name]; return dequantize(t.data, t.tensor_type).reshape(t.shape[::-1]).astype(np.float32)
def frac(w, bits, group):
    maxq = 2**bits - 1
    rows, cols = w.shape
    g = cols if group == 0 else group
    wg = w.reshape(rows, cols // g, g).reshape(-1, g)
    lo = np.minimum(wg.min(1), 0); hi = np.maximum(wg.max(1), 0)
    changed = []
    for zf in (np.floor, np.ceil):
      prev = None
      for i in range(100):
        p = 1 - i/100
        lo2, hi2 = p*lo, p*hi
        s = (hi2 - lo2) / maxq; s[s == 0] = 1
        z = zf(-lo2 / s)
        v = np.clip(np.round(wg / s[:, None]), -z[:, None], maxq - z[:, None])
        if prev is not None: changed.append((v != prev).mean())
        prev = v
    c = np.array(changed)
    return c.mean(), c[:40].mean(), c[50:99].mean()
for name in ['blk.5.attn_q.weight', 'blk.5.ffn_down.weight', 'blk.5.ffn_up.weight']:
    w = W(name)
    for bits, group in [(4,0),(3,0),(2,64)]:
        print(name, w.shape, bits, group, ['%.3f' % x for x in frac(w, bits, group)])
