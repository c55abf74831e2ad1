#!/usr/bin/env python3
"""slot_error_table.py — reads the slot-error probes of training runs (`lowbit train --probe-every N`,
DIR/slot_errors.jsonl, train/training_run.h) and prints Markdown tables:

  1. per projection and slot (mean over layers, at one probe step): the relative GEMM error against BF16 of
     the run's own strategy and of each MXFP4 strategy (plain, IHT, IHT+OE-left, IHT+OE-right);
  2. per probe step: the root-sum-square of the errors over all slots under the run's strategies and under
     each uniform strategy, and how many slots the run's strategy does worse on than plain MXFP4;
  3. the slots where the run's strategy loses most to plain MXFP4 (largest error difference);
  4. with probes that carry it (`--probe-batch train`), the wgrad error's consistency over the call's probes up to
     that step: per projection and strategy, consistency / summed error relative to the summed gradient / cosine.

Usage: bench/slot_error_table.py RUN_DIR [RUN_DIR ...] [--step S] [--top N]
(S: the probe step for tables 1 and 3, default the last one; N rows in table 3, default 10.)
"""
import argparse
import json
import math
import os
import sys

STRATEGIES = ["plain", "IHT", "IHT+OE-left", "IHT+OE-right"]
SLOTS = ["forward_y", "backward_gx", "backward_gw"]
SLOT_SHORT = {"forward_y": "fwd", "backward_gx": "dgrad", "backward_gw": "wgrad"}


def load(run_dir):
    path = os.path.join(run_dir, "slot_errors.jsonl")
    if not os.path.exists(path):
        sys.exit(f"slot_error_table: {path} does not exist (train with --probe-every N)")
    probes = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                probes.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"slot_error_table: {path}:{n}: not JSON ({e})")
    if not probes:
        sys.exit(f"slot_error_table: {path} holds no probe")
    precision = os.path.basename(run_dir.rstrip("/"))
    cfg = os.path.join(run_dir, "config.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            precision = json.load(f).get("recipe", {}).get("precision", precision)
    return precision, probes


def rss(values):
    return math.sqrt(sum(v * v for v in values))


def per_slot_table(precision, probe):
    rows = [f"### {precision}, probe at step {probe['step']} ({probe['batch']} batch): mean relative error over layers",
            "",
            "| projection | slot | run's strategies | run's error | " + " | ".join(STRATEGIES) + " |",
            "|---|---|---|---:|" + "---:|" * len(STRATEGIES)]
    projections = list(dict.fromkeys(e["projection"] for e in probe["slots"]))  # the model's order
    for p in projections:
        for s in SLOTS:
            cells = [e for e in probe["slots"] if e["projection"] == p and e["slot"] == s]
            if not cells:
                continue
            used = {}
            for e in cells:
                used[e["active"]] = used.get(e["active"], 0) + 1
            used_text = ", ".join(f"{k} {v}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]))
            mean = lambda key: sum(e[key] for e in cells) / len(cells)
            rows.append(f"| {p} | {SLOT_SHORT[s]} | {used_text} | {mean('active_error'):.4f} | " +
                        " | ".join(f"{mean(k):.4f}" for k in STRATEGIES) + " |")
    return rows


def over_steps_table(precision, probes):
    rows = [f"### {precision}: all slots, root-sum-square of the relative errors per probe",
            "",
            "| step | run's strategies | " + " | ".join(STRATEGIES) + " | slots where the run's strategy > plain |",
            "|---:|---:|" + "---:|" * len(STRATEGIES) + "---:|"]
    for pr in probes:
        sl = pr["slots"]
        worse = sum(1 for e in sl if e["active_error"] > e["plain"])
        rows.append(f"| {pr['step']} | {rss(e['active_error'] for e in sl):.4f} | " +
                    " | ".join(f"{rss(e[k] for e in sl):.4f}" for k in STRATEGIES) + f" | {worse} / {len(sl)} |")
    return rows


def worst_table(precision, probe, top):
    sl = sorted(probe["slots"], key=lambda e: e["plain"] - e["active_error"])[:top]
    rows = [f"### {precision}, step {probe['step']}: the {top} slots where the run's strategy loses most to plain MXFP4",
            "",
            "| layer | projection | slot | run's strategy | its error | plain | difference |",
            "|---:|---|---|---|---:|---:|---:|"]
    for e in sl:
        rows.append(f"| {e['layer']} | {e['projection']} | {SLOT_SHORT[e['slot']]} | {e['active']} | "
                    f"{e['active_error']:.4f} | {e['plain']:.4f} | {e['active_error'] - e['plain']:+.4f} |")
    return rows


def consistency_table(precision, probe):
    c = probe.get("wgrad_consistency")
    if not c or not c.get("by_projection"):
        return []
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    rows = [f"### {precision}, step {probe['step']}: wgrad error over {c['probes']} probes, consistency (1: independent, "
            f"{math.sqrt(c['probes']):.2f}: the same every probe) / relative / cosine, batch {probe.get('batch', '?')}",
            "",
            "| projection | " + " | ".join(STRATEGIES) + " |",
            "|---|" + "---|" * len(STRATEGIES)]
    for proj, by in c["by_projection"].items():
        cells = [f"{fmt(by[s]['consistency'])} / {fmt(by[s]['relative'])} / {fmt(by[s]['cosine'])}" if s in by else "-"
                 for s in STRATEGIES]
        rows.append(f"| {proj} | " + " | ".join(cells) + " |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    for run in a.runs:
        precision, probes = load(run)
        if a.step is None:
            probe = probes[-1]
        else:
            match = [p for p in probes if p["step"] == a.step]
            if not match:
                sys.exit(f"slot_error_table: {run} has no probe at step {a.step} "
                         f"(steps: {', '.join(str(p['step']) for p in probes)})")
            probe = match[0]
        for table in (per_slot_table(precision, probe), over_steps_table(precision, probes),
                      worst_table(precision, probe, a.top), consistency_table(precision, probe)):
            if table:
                print("\n".join(table))
                print()


if __name__ == "__main__":
    main()
