#!/usr/bin/env python3
"""ptq_matrix_table.py — the results table of bench/ptq_matrix.sh's cells (a folder of cells, each holding the
quantize_*.json and eval_*.json that scripts/ptq_table.sh wrote), as Markdown, in the cells file's order.

    python3 bench/ptq_matrix_table.py CELLS_DIR [--cells bench/ptq_matrix_cells.txt] [--json-out DIR]

--json-out writes each cell's two reports compactly (one line per key, one per layer) as
DIR/NAME.quantize.json and DIR/NAME.eval.json, for bench/results/.
"""
import argparse
import glob
import json
import os
import re
import sys


def cell_names(cells_file):
    names = []
    for line in open(cells_file):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        names.append(line.split("|", 1)[0].strip())
    return names


def compact_json(obj):
    """One line per top-level key; lists of objects one element per line."""
    lines = []
    for i, (k, v) in enumerate(obj.items()):
        comma = "," if i + 1 < len(obj) else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            inner = ",\n".join("  " + json.dumps(e, ensure_ascii=False, sort_keys=True) for e in v)
            lines.append(f" {json.dumps(k)}: [\n{inner}\n ]{comma}")
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False, sort_keys=True)}{comma}")
    return "{\n" + "\n".join(lines) + "\n}\n"


def grid_label(args):
    fmt = re.search(r"--format (\S+)", args).group(1)
    group = re.search(r"--group (\d+)", args)
    if fmt.startswith("int"):
        label = fmt.upper() + (f" g{group.group(1)}" if group else " per channel")
    else:
        label = fmt.upper()
    acts = re.search(r"--act-bits (\S+)", args)
    if acts:  # W·A quantization: the activations' per-token format
        a = acts.group(1)
        label += f", activations {'INT' + a if a.isdigit() else a.upper()}"
    return label


def method_label(q):
    names = {"rtn": "RTN", "gptq": "GPTQ", "boa": "BoA", "turboboa": "TurboBoA"}
    m = names.get(q["method"], q["method"])
    if q["method"] == "turboboa" and q.get("features"):
        m += " " + q["features"]
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cells_dir")
    ap.add_argument("--cells", default=os.path.join(os.path.dirname(__file__), "ptq_matrix_cells.txt"))
    ap.add_argument("--json-out")
    a = ap.parse_args()
    rows = []
    for name in cell_names(a.cells):
        d = os.path.join(a.cells_dir, name)
        qs = glob.glob(os.path.join(d, "quantize_*.json"))
        es = [e for e in glob.glob(os.path.join(d, "eval_*.json")) if not e.endswith("eval_base.json")]
        if not qs or not es:
            state = "failed" if os.path.exists(os.path.join(d, "failed")) else "not run"
            rows.append(f"| {name} | | | {state} | | | | | |")
            continue
        q, e = json.load(open(qs[0])), json.load(open(es[0]))
        args = open(os.path.join(d, "args.txt")).read().strip()
        kld = e.get("kld") or {}
        top1 = kld.get("top1_agreement")
        rot = "hadamard" if q.get("rotation", "none") != "none" else "—"
        peak = q.get("peak_device_bytes") or 0
        rows.append(
            f"| {grid_label(args)} | {rot} | {method_label(q)} | {q['file_bytes'] / 1e6:.2f} | "
            f"{e['ppl']:.3f} ± {e['ppl_err']:.3f} | {kld.get('kld_mean', float('nan')):.4f} | "
            + (f"{100 * top1:.1f} % | " if top1 is not None else "— | ")
            + f"{q['seconds']:.1f} | {peak / 2**30:.2f} |")
        if a.json_out:
            os.makedirs(a.json_out, exist_ok=True)
            with open(os.path.join(a.json_out, f"{name}.quantize.json"), "w") as f:
                f.write(compact_json(q))
            with open(os.path.join(a.json_out, f"{name}.eval.json"), "w") as f:
                f.write(compact_json(e))
    print("| grid | rotation | method | file MB | PPL | KLD | top-1 agree | quantize s | peak GPU GiB |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
