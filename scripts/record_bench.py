#!/usr/bin/env python3
"""record_bench.py — keep a benchmark run in bench/results/: the report becomes the benchmark's current file
(provenance first: command, commit, machine, date) and each of its figures is appended as one line to
bench/results/history.jsonl ({"commit","machine","date","benchmark","metric","value","unit"}; lines that were
transcribed from a text record rather than a report also name it in "source").

    python3 scripts/record_bench.py REPORT.json --name gpu_kernels_h200 --machine h200 \
        --command "bash scripts/gpu_check.sh" [--commit C] [--date D] [--history-only]

REPORT is the --json output of bench_kernels, bench_adahop, bench_model, bench_cpu, bench_model_cpu,
`lowbit eval` (one model, or a --weights list) or `lowbit analyze pairs`. --commit, --machine and --date default to the report's own fields
(the benchmarks write commit and date; `lowbit eval` and `analyze pairs` write neither). The history
is append-only: a run (benchmark, commit, date) already in it is refused. Python standard library only.
"""
import argparse
import json
import os
import sys

PROVENANCE = ("command", "commit", "machine", "date")


def _unit_of(key):
    if key.endswith("_us") or key == "us":
        return "us"
    if key.endswith("_ms"):
        return "ms"
    if key.endswith("_gbps") or key == "gbps" or key.endswith("gb_per_s"):
        return "GB/s"
    if key.endswith("gflops"):
        return "GFLOP/s"
    if key == "tokens_per_second":
        return "tokens/s"
    if key.startswith("ratio") or key.startswith("vs_") or key.startswith("fraction"):
        return "ratio"
    return ""


def _kernel_metrics(kernels):
    # bench_kernels / bench_cpu: one entry per kernel; the minimum and byte count are not figures of merit.
    for k in kernels:
        for key, value in k.items():
            if key in ("name", "bytes") or key.startswith("min_") or not isinstance(value, (int, float)):
                continue
            yield f"{k['name']}: {key}", value, _unit_of(key)


def _row_metrics(rows):
    for r in rows:
        if "shape" in r and "us" in r:  # bench_adahop: the time of each extra (its share of the GEMM follows)
            yield f"{r['shape']} {r['what']}", r["us"], "us"
        elif "tokens_per_second" in r:  # bench_model
            yield f"{r['device']} {r['precision']} {r['what']}", r["tokens_per_second"], "tokens/s"


def _eval_metrics(result):
    for key in ("ppl", "ppl_err", "mean_nll", "tokens_per_second"):
        if key in result:
            yield key, result[key], "tokens/s" if key == "tokens_per_second" else ""


def _format_table_metrics(runs):
    # `lowbit eval --weights A,B,...`: one set of figures per weight format.
    for run in runs:
        for key, value, unit in _eval_metrics(run):
            yield f"{run['weights']}: {key}", value, unit
        yield f"{run['weights']}: linear_weight_bits", run["linear_weight_bits"], "bits"


def _pair_metrics(report):
    yield "detector correct", report["detector_correct"], f"of {report.get('detector_total', 18)}"
    for p in report["pairs"]:
        for strategy, db in p["sqnr_db"].items():
            yield f"{p['pair']} {strategy}: SQNR", db, "dB"


def _scalar_metrics(d, prefix=""):
    # A flat dict of results (bench_model_cpu's "result", bench_model's self checks): every number.
    for key, value in d.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            yield prefix + key, value, _unit_of(key)
        elif isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
            yield from _scalar_metrics(value, prefix + key + " ")


def metrics(report):
    """(metric, value, unit) for every figure in a benchmark report."""
    out = []
    if "kernels" in report:
        out += _kernel_metrics(report["kernels"])
        for key in ("copy_gbps", "baseline_gbps"):
            if key in report:
                out.append((key, report[key], "GB/s"))
    elif isinstance(report.get("runs"), list):
        out += _format_table_metrics(report["runs"])
    elif "pairs" in report:
        out += _pair_metrics(report)
    elif "ppl" in report or "ppl" in report.get("result", {}):
        out += _eval_metrics(report.get("result", report))
    elif isinstance(report.get("rows"), list):
        out += _row_metrics(report["rows"])
        if "device_copy_gb_per_s" in report:
            out.append(("device copy", report["device_copy_gb_per_s"], "GB/s"))
        for key in ("self_check_max_rel_logit_error", "device_scoring_abs_d_ln_ppl"):
            if isinstance(report.get(key), dict):
                out += _scalar_metrics(report[key], key + " ")
    elif isinstance(report.get("result"), dict):
        out += _scalar_metrics({k: v for k, v in report["result"].items() if k not in ("threads", "n_ctx")})
    if not out:
        raise SystemExit("record_bench: found no figures in the report (not a lowbit benchmark's --json output?)")
    return out


def with_provenance(report, prov):
    """The report with command, commit, machine and date as its first fields."""
    head = {k: prov[k] for k in PROVENANCE}
    return {**head, **{k: v for k, v in report.items() if k not in PROVENANCE}}


def history_lines(report, prov, benchmark):
    return [{"commit": prov["commit"], "machine": prov["machine"], "date": prov["date"], "benchmark": benchmark,
             "metric": m, "value": v, "unit": u} for m, v, u in metrics(report)]


def dump_report(report):
    """JSON text with one top-level field per line and one line per entry of a list (the tables' rows)."""
    parts = []
    for key, value in report.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            rows = ",\n".join("    " + json.dumps(v, ensure_ascii=False) for v in value)
            parts.append(f"  {json.dumps(key)}: [\n{rows}\n  ]")
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def recorded_runs(history_path):
    runs = set()
    if os.path.exists(history_path):
        with open(history_path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        h = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise SystemExit(f"record_bench: {history_path}:{n} is not JSON ({e}); fix the line first")
                    runs.add((h["benchmark"], h["commit"], h["date"]))
    return runs


def append_history(history_path, lines):
    with open(history_path, "a", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="a benchmark's --json output")
    ap.add_argument("--name", required=True, help="the benchmark's file stem in bench/results, e.g. gpu_kernels_h200")
    ap.add_argument("--command", required=True, help="the command line that produced the report")
    ap.add_argument("--commit", help="default: the report's 'commit'")
    ap.add_argument("--machine", help="short machine name, e.g. h200 or devbox (default: the report's 'machine')")
    ap.add_argument("--date", help="UTC, ISO 8601 (default: the report's 'date')")
    ap.add_argument("--results", default=os.path.join(here, "..", "bench", "results"), help="default: bench/results")
    ap.add_argument("--history-only", action="store_true", help="append to history.jsonl, leave the current file")
    args = ap.parse_args()

    with open(args.report, encoding="utf-8") as f:
        report = json.load(f)
    prov = {k: getattr(args, k) or report.get(k) for k in PROVENANCE}
    missing = [k for k in PROVENANCE if not prov[k]]
    if missing:
        raise SystemExit(f"record_bench: {args.report} does not say its {', '.join(missing)}; pass "
                         + " ".join(f"--{k} ..." for k in missing))
    history = os.path.join(args.results, "history.jsonl")
    if (args.name, prov["commit"], prov["date"]) in recorded_runs(history):
        raise SystemExit(f"record_bench: {args.name} at {prov['commit']}, {prov['date']} is already in {history}")
    lines = history_lines(report, prov, args.name)
    if not args.history_only:
        current = os.path.join(args.results, args.name + ".json")
        tmp = current + f".tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(dump_report(with_provenance(report, prov)))
        os.replace(tmp, current)
        print(f"record_bench: {current}")
    append_history(history, lines)
    print(f"record_bench: {len(lines)} figures appended to {history}")


if __name__ == "__main__":
    sys.exit(main())
