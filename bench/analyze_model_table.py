"""analyze_model_table.py — the short tables of bench/results/analyze_model_*.md from `lowbit analyze model --report`
files: per report, the slots' MX error summed over the model (root-sum-square of the relative errors under the
planner's strategies, plain, IHT and the best low-precision strategy of each slot; how often the planner's is the
best, and how often IHT is worse than plain), and the INT8 window census totals per slot.

    python bench/analyze_model_table.py R.json [R2.json ...]
"""
import json
import math
import sys

SLOTS = [("forward_y", "fwd"), ("backward_gx", "dgrad"), ("backward_gw", "wgrad")]


def main(paths):
    reports = [(p, json.load(open(p))) for p in paths]
    print("| report | slot | slots | RSS planned | RSS plain | RSS IHT | RSS best | planned is best | IHT > plain |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for path, r in reports:
        low = [s for s in r["strategies"] if s != "BF16"]
        for key, name in SLOTS:
            ss = [p["slots"][key] for p in r["projections"]]
            ss = [s for s in ss if s["relative_error"]["plain"] is not None]
            rss = lambda f: math.sqrt(sum(f(s) ** 2 for s in ss))
            best = lambda s: min(s["relative_error"][k] for k in low)
            planned_best = sum(1 for s in ss if s["relative_error"][s["planned"]] == best(s))
            iht_worse = sum(1 for s in ss if s["relative_error"]["IHT"] > s["relative_error"]["plain"])
            print(f"| {path.split('/')[-1]} | {name} | {len(ss)} | {rss(lambda s: s['relative_error'][s['planned']]):.3f} | "
                  f"{rss(lambda s: s['relative_error']['plain']):.3f} | {rss(lambda s: s['relative_error']['IHT']):.3f} | "
                  f"{rss(best):.3f} | {planned_best} | {iht_worse} |")
    print()
    print("INT8 window census: (128 × 128 output tile, 256-deep chunk) pairs computed block by block, all projections and "
          "blocks; B's bases per 128-line tile (int8_stages) / per line (int8_stages_columns)")
    print()
    print("| report | window (binades) | slot | pairs | plain: per tile | plain: per line | IHT: per tile | IHT: per line |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for path, r in reports:
        for key, name in SLOTS:
            tot = {rot: [0, 0, 0] for rot in ("plain", "iht")}
            for p in r["projections"]:
                for rot in tot:
                    c = p["slots"][key]["int8_window"][rot]
                    if c is None:
                        continue
                    tot[rot][0] += c["pairs"]
                    tot[rot][1] += c["slow_pairs_tile"]
                    tot[rot][2] += c["slow_pairs_line"]
            pct = lambda t, i: f"{100 * t[i] / t[0]:.1f} %" if t[0] else "-"
            print(f"| {path.split('/')[-1]} | {r.get('window_binades', 3)} | {name} | {tot['plain'][0]} | "
                  f"{pct(tot['plain'], 1)} | {pct(tot['plain'], 2)} | {pct(tot['iht'], 1)} | {pct(tot['iht'], 2)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
