#!/usr/bin/env python3
"""train_runs_table.py — the markdown table of several `lowbit train` runs (the headline and ablation results).

For each run directory (config.json, metrics.jsonl, report.json as `lowbit train` writes them): its recipe (precision
and, where set, the slot and projection masks), the last validation loss, the mean train loss of the logged steps
from --train-from on, both against the reference run (--ref, the directory name; default bf16), the median tokens/s
of the logged steps and the strategy counts of the last line.

With --by-seed: one row per recipe over all the runs given, its last validation loss per seed as the gap to the
BF16 run of the same seed (a paired difference: same initialization and batches), and the mean gap ± its standard
error (the seeds' standard deviation / √n). --paired A B (repeatable; recipes as the table names them) adds the paired
difference A − B of their validation losses over the seeds both have: per seed, mean ± s.e., and in how many seeds A
is lower.

Usage: python3 bench/train_runs_table.py RUN_DIR... [--ref NAME] [--train-from STEP] [--by-seed [--paired A B]...]
"""
import argparse
import json
import os
import statistics


def load(run):
    with open(os.path.join(run, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return cfg, lines


def recipe_text(cfg):
    r = cfg["recipe"]
    parts = [r["precision"]]
    if "mx_slots" in r:
        parts.append("slots " + r["mx_slots"])
    if "mx_projections" in r:
        parts.append("projections " + r["mx_projections"])
    if "mx_layers" in r:
        parts.append("layers " + r["mx_layers"])
    if "mx_scale_rule" in r:
        parts.append("scale rule " + r["mx_scale_rule"])
    seed = cfg["train_config"].get("seed")
    return ", ".join(parts), seed


def mean_se(xs):
    if len(xs) == 1:
        return "%+.3f" % xs[0]
    return "%+.3f ± %.3f" % (statistics.mean(xs), statistics.stdev(xs) / len(xs) ** 0.5)


def by_seed(runs, pairs):
    val = {}  # (recipe text, seed) -> last validation loss
    for run in runs:
        cfg, lines = load(run)
        vals = [l["val_loss"] for l in lines if "val_loss" in l]
        if vals:
            val[recipe_text(cfg)] = vals[-1]
    seeds = sorted({seed for _, seed in val})
    recipes = []
    for recipe, _ in val:
        if recipe not in recipes:
            recipes.append(recipe)
    print("| recipe | " + " | ".join("seed %s" % s for s in seeds) + " | mean gap ± s.e. |")
    print("|---|" + "---:|" * (len(seeds) + 1))
    for recipe in recipes:
        cells, gaps = [], []
        for s in seeds:
            v, ref = val.get((recipe, s)), val.get(("bf16", s))
            if v is None:
                cells.append("")
            elif recipe == "bf16":
                cells.append("%.4f" % v)
            elif ref is None:
                cells.append("(%.4f, no bf16)" % v)
            else:
                gaps.append(v - ref)
                cells.append("%+.4f" % (v - ref))
        mean = "—" if recipe == "bf16" or not gaps else mean_se(gaps)
        print("| %s | %s | %s |" % (recipe, " | ".join(cells), mean))
    print("\nbf16: its validation loss; the others: their gap to bf16 of the same seed (nats).")
    if not pairs:
        return
    print("\n| paired difference | per seed | mean ± s.e. | A lower in |")
    print("|---|---|---:|---:|")
    for a, b in pairs:
        common = [s for s in seeds if (a, s) in val and (b, s) in val]
        if not common:
            raise SystemExit("--paired %r %r: no seed has both (recipes: %s)" % (a, b, "; ".join(recipes)))
        d = [val[(a, s)] - val[(b, s)] for s in common]
        per = ", ".join("%s: %+.3f" % (s, x) for s, x in zip(common, d))
        print("| %s − %s | %s | %s | %d of %d |" % (a, b, per, mean_se(d), sum(x < 0 for x in d), len(d)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--ref", default="bf16")
    ap.add_argument("--train-from", type=int, default=None, help="first step of the train-loss mean (default: the last eighth)")
    ap.add_argument("--by-seed", action="store_true", help="one row per recipe: validation-loss gaps to BF16 per seed")
    ap.add_argument("--paired", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="with --by-seed: the paired difference A − B of two recipes' validation losses")
    a = ap.parse_args()
    if a.by_seed:
        return by_seed(a.runs, a.paired)
    rows = {}
    for run in a.runs:
        name = os.path.basename(os.path.normpath(run))
        cfg, lines = load(run)
        vals = [l for l in lines if "val_loss" in l]
        last = lines[-1]["step"]
        start = a.train_from if a.train_from is not None else last - (last + 1) // 8
        train = [l["loss"] for l in lines if l["step"] >= start]
        speed = [l["tokens_per_s"] for l in lines if "tokens_per_s" in l]
        rows[name] = dict(recipe=recipe_text(cfg), val=vals[-1]["val_loss"] if vals else float("nan"),
                          val_step=vals[-1]["step"] if vals else -1, train=statistics.mean(train) if train else float("nan"),
                          n_train=len(train), start=start, speed=statistics.median(speed) if speed else float("nan"),
                          strategies=lines[-1].get("strategies", {}))
    ref = rows.get(a.ref)
    print("| run | recipe | seed | train loss | Δ vs %s | val loss | Δ vs %s | tokens/s | strategies |" % (a.ref, a.ref))
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name, r in rows.items():
        dt = "" if ref is None or name == a.ref else "%+.4f" % (r["train"] - ref["train"])
        dv = "" if ref is None or name == a.ref else "%+.4f" % (r["val"] - ref["val"])
        strat = ", ".join("%s %d" % (k, v) for k, v in sorted(r["strategies"].items()))
        print("| %s | %s | %s | %.4f | %s | %.4f | %s | %.0f | %s |" % (name, r["recipe"][0], r["recipe"][1], r["train"], dt,
                                                                     r["val"], dv, r["speed"], strat))
    any_row = next(iter(rows.values()))
    print("\nTrain loss: mean of the %d logged steps from step %d on; val loss at step %d." %
          (any_row["n_train"], any_row["start"], any_row["val_step"]))


if __name__ == "__main__":
    main()
