#!/usr/bin/env python3
"""check_llama_cpp.py — peer check of `lowbit eval` against llama.cpp's own `llama-perplexity` on the same GGUF.

llama.cpp is built from the sources vendored in the PyPI sdist of llama-cpp-python by
tests/peer/build_llama_cpp.sh (CPU only). This script

  1. writes the text lowbit evaluates for `--corpus NAME` to a file, byte for byte (src/io/corpus.cpp,
     read_corpus_text: data/corpora/sotu/YEAR_*.txt in file-name order, trailing whitespace removed from
     each, joined with "\\n\\n", no trailing newline — llama-perplexity's -f drops one trailing "\\n", so
     the file must not end in one), and checks that `lowbit eval --text FILE` sees as many tokens as
     `lowbit eval --corpus NAME`;
  2. tokenizes the file with `llama-tokenize` and `lowbit tokenize` and compares the ids one by one;
  3. runs `llama-perplexity -m GGUF -f FILE -c CTX -b CTX -t THREADS [--chunks N]` and
     `lowbit eval --model GGUF --text FILE --ctx CTX --threads THREADS [--chunks N] --json` and compares
     chunks, scored tokens, PPL and speed; then runs llama-perplexity once more on f32.gguf, the same
     weights dequantized to F32 by `llama-quantize --allow-requantize GGUF f32.gguf F32` (exact; lowbit
     gets bit-identical logits from it), which takes llama.cpp's quantized dot products out: llama.cpp's
     CPU matmuls quantize the activations (to Q8_1 for Q4_1 weights, Q8_0 for the Q8_0 token embedding
     that is also the tied output layer), lowbit multiplies dequantized weights in F32;
  4. (unless --no-kld) has llama-perplexity write its KLD base file (--kl-divergence-base, interop §7.3),
     scores lowbit's logits against it with `lowbit eval --kld-base` (KLD, top-1 agreement; the token
     ids in the file must equal lowbit's), writes lowbit's own base file with --save-logits and
     compares the two files entry by entry (max |Δ log p| over the log-probabilities both store, i.e.
     those within 16 nats of the top; each file rounds to (max−min)/65535/2 ≈ 1.2e-4), and lets
     llama-perplexity --kl-divergence score its logits against lowbit's file (the other direction);
  5. (unless --decompose-chunks 0) splits the difference on the first K windows: llama.cpp with F32
     layers but the shipped Q8_0 output layer (re-quantizing the F32 copy gives back the same bytes),
     with all weights F32, with -ctk f32 -ctv f32 (no change under flash attention: llama-graph.cpp
     casts F32 K/V to F16 before the flash-attention op) and with -fa off as well; each against lowbit.

    bash tests/peer/build_llama_cpp.sh
    python3 tests/peer/check_llama_cpp.py --lowbit build-peer-lowbit/lowbit [--chunks N] [--threads 2] \\
        [--report bench/results/model_peer_check_llama_cpp.txt]

Exit status 0 when the token ids agree, the chunk/token counts agree and lowbit's PPL agrees to 3 significant
digits with llama.cpp's on the same weights (f32.gguf); the PPL of llama.cpp's default CPU path on the
quantized GGUF is reported beside it with the size of its activation-quantization effect. Needs numpy
(the project venv has it). The text, logs and GGUF re-writes stay in --work; the KLD files (4.2 GB each for
all of sotu-test at n_ctx 512) are deleted at the end unless --keep.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shlex
import struct
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.expanduser("~/.cache/lowbit/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")

log_lines = []


def say(line=""):
    print(line, flush=True)
    log_lines.append(line)


def run(cmd, log_path=None, env=None):
    """Runs cmd, returns (stdout+stderr text, wall seconds); the output is also saved to log_path."""
    say("$ " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    wall = time.monotonic() - t0
    out = p.stdout.decode("utf-8", errors="replace")
    if log_path:
        with open(log_path, "w") as f:
            f.write(out)
    if p.returncode != 0:
        sys.stderr.write(out[-4000:])
        raise SystemExit(f"command failed (exit {p.returncode}): {cmd[0]}")
    return out, wall


def run_json(cmd):
    """Runs a lowbit command with --json; its stdout is the report, stderr is passed through."""
    say("$ " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"command failed (exit {p.returncode}): {cmd[0]}")
    return json.loads(p.stdout), wall


# --- the corpus text, exactly as lowbit builds it ------------------------------------------------------

def shared_data_dir():
    """As the library finds it (src/io/corpus.h): $LOWBIT_SHARED_DATA, else the nearest shared/data in the
    checkout or one of its parents."""
    env = os.environ.get("LOWBIT_SHARED_DATA")
    if env:
        return env
    tried, d = [], REPO
    while True:
        tried.append(os.path.join(d, "shared", "data"))
        if os.path.isdir(tried[-1]):
            return tried[-1]
        if os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    raise SystemExit(f"shared data directory not found (tried {', '.join(tried)}); set LOWBIT_SHARED_DATA")


def corpus_text(name):
    ranges = {"sotu-test": (2011, 2021, False), "sotu-validation": (2001, 2010, False), "sotu-train": (2001, 2021, True)}
    lo, hi, complement = ranges[name]
    d = os.path.join(shared_data_dir(), "corpora", "sotu")
    files = []
    for f in os.listdir(d):
        if not f.endswith(".txt") or len(f) < 5 or f[4] != "_" or not f[:4].isdigit():
            continue
        year = int(f[:4])
        if year <= 0:
            continue
        if (lo <= year <= hi) != complement:
            files.append(f)
    parts = []
    for f in sorted(files, key=lambda s: s.encode()):  # std::sort on paths: byte order
        with open(os.path.join(d, f), "rb") as fh:
            parts.append(fh.read().rstrip(b" \t\n\v\f\r"))  # C isspace()
    return b"\n\n".join(parts), sorted(files)


# --- KLD base files -----------------------------------------------------------------------------------

def kld_header(path):
    with open(path, "rb") as f:
        if f.read(8) != b"_logits_":
            raise SystemExit(f"{path}: not a KLD base file")
        n_ctx, n_vocab, n_chunk = struct.unpack("<iii", f.read(12))
    return n_ctx, n_vocab, n_chunk


def kld_tokens(path):
    n_ctx, n_vocab, n_chunk = kld_header(path)
    return np.fromfile(path, dtype="<i4", count=n_ctx * n_chunk, offset=20)


def compare_kld_files(path_a, path_b, n_chunks=None):
    """Entry-by-entry comparison of two KLD base files (a = reference)."""
    ha, hb = kld_header(path_a), kld_header(path_b)
    assert ha[:2] == hb[:2], (ha, hb)
    n_ctx, n_vocab = ha[0], ha[1]
    n_chunk = min(ha[2], hb[2]) if n_chunks is None else min(ha[2], hb[2], n_chunks)
    ta, tb = kld_tokens(path_a), kld_tokens(path_b)
    n_tok = n_chunk * n_ctx
    tokens_equal = bool(np.array_equal(ta[:n_tok], tb[:n_tok]))
    first = n_ctx // 2
    n_score = n_ctx - 1 - first
    nv = 2 * ((n_vocab + 1) // 2) + 4
    ma = np.memmap(path_a, dtype="<u2", mode="r", offset=20 + 4 * ha[0] * ha[2]).reshape(ha[2], n_score, nv)
    mb = np.memmap(path_b, dtype="<u2", mode="r", offset=20 + 4 * hb[0] * hb[2]).reshape(hb[2], n_score, nv)
    r = dict(n_chunk=n_chunk, tokens_equal=tokens_equal, max_abs=0.0, max_abs_top=0.0, max_abs_nll=0.0,
             sum_abs=0.0, n_entries=0, max_half_step=0.0, same_top=0, count=0, sum_kld=0.0)
    for c in range(n_chunk):
        ra, rb = np.array(ma[c]), np.array(mb[c])
        hdr_a = ra[:, :4].copy().view("<f4")  # [n_score, 2]: scale, min_log_prob
        hdr_b = rb[:, :4].copy().view("<f4")
        qa, qb = ra[:, 4:4 + n_vocab], rb[:, 4:4 + n_vocab]
        lpa = hdr_a[:, :1] * qa.astype(np.float32) + hdr_a[:, 1:2]
        lpb = hdr_b[:, :1] * qb.astype(np.float32) + hdr_b[:, 1:2]
        both = (qa > 0) & (qb > 0)  # code 0 = at or below the 16-nat floor
        d = np.abs(lpa.astype(np.float64) - lpb)
        r["max_abs"] = max(r["max_abs"], float(d[both].max()))
        r["sum_abs"] += float(d[both].sum())
        r["n_entries"] += int(both.sum())
        top = both & (lpa > -5.0)
        if top.any():
            r["max_abs_top"] = max(r["max_abs_top"], float(d[top].max()))
        r["max_half_step"] = max(r["max_half_step"], float(hdr_a[:, 0].max() + hdr_b[:, 0].max()) / 2)
        tgt = ta[c * n_ctx + first + 1:(c + 1) * n_ctx]
        rows = np.arange(n_score)
        r["max_abs_nll"] = max(r["max_abs_nll"], float(np.abs(lpa[rows, tgt] - lpb[rows, tgt]).max()))
        r["same_top"] += int((lpa.argmax(1) == lpb.argmax(1)).sum())
        r["count"] += n_score
        pa = np.where(lpa > -16.0, np.exp(lpa.astype(np.float64)), 0.0)
        r["sum_kld"] += float((pa * (lpa - lpb.astype(np.float64))).sum())
    r["mean_abs"] = r["sum_abs"] / max(1, r["n_entries"])
    r["kld"] = r["sum_kld"] / max(1, r["count"])
    return r


# --- llama.cpp output parsing -------------------------------------------------------------------------

def parse_llama_perplexity(out):
    r = {}
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    if m:
        r["ppl"], r["ppl_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"(?:calculating perplexity|computing) over (\d+) chunks, n_ctx=(\d+), batch_size=(\d+), n_seq=(\d+)", out)
    if m:
        r["n_chunks"], r["n_ctx"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"prompt eval time =\s*([0-9.]+) ms /\s*(\d+) tokens \(\s*([0-9.]+) ms per token,\s*([0-9.]+) tokens per second\)", out)
    if m:
        r["prompt_eval_ms"], r["prompt_eval_tokens"], r["prompt_eval_tps"] = float(m.group(1)), int(m.group(2)), float(m.group(4))
    # llama.cpp's log timestamps (-lv 4: minutes.seconds.ms.µs): the evaluation loop runs from "calculating
    # perplexity over" to "Final estimate" — windows plus log-softmax, what lowbit's tokens_per_second times.
    # (llama_perf's "prompt eval" misses about one window's time: 2 windows of ~2 s report 1.96 s.)
    def stamp(pattern):
        m = re.search(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) I " + pattern, out, re.M)
        return None if not m else int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1e3 + int(m.group(4)) / 1e6
    t0, t1 = stamp(r"perplexity: calculating perplexity over"), stamp(r"Final estimate")
    if t0 is not None and t1 is not None and "n_chunks" in r and t1 > t0:
        r["loop_s"] = t1 - t0
        r["loop_tps"] = r["n_chunks"] * r["n_ctx"] / r["loop_s"]
    m = re.search(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)\s*±\s*([0-9.]+)", out)
    if m:
        r["ppl"], r["ppl_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Mean PPL\(base\)\s*:\s*([0-9.]+)\s*±\s*([0-9.]+)", out)
    if m:
        r["ppl_base"], r["ppl_base_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Mean\s+KLD:\s*([0-9.eE+-]+)\s*±\s*([0-9.eE+-]+)", out)
    if m:
        r["kld"], r["kld_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Maximum KLD:\s*([0-9.eE+-]+)", out)
    if m:
        r["kld_max"] = float(m.group(1))
    m = re.search(r"Same top p:\s*([0-9.]+)\s*±\s*([0-9.]+)\s*%", out)
    if m:
        r["same_top"], r["same_top_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"RMS Δp\s*:\s*([0-9.]+)\s*±\s*([0-9.]+)\s*%", out)
    if m:
        r["rms_dp"] = float(m.group(1))
    m = re.search(r"system_info: (.*)", out)
    if m:
        r["system_info"] = m.group(1).strip()
    m = re.search(r"Flash Attention (enabled|disabled)", out) or re.search(r"flash_attn\s*=\s*(\S+)", out)
    if m:
        r["flash_attn"] = m.group(1)
    m = re.search(r"K \((\w+)\):.*V \((\w+)\):", out)
    if m:
        r["kv_types"] = f"K {m.group(1)}, V {m.group(2)}"
    return r


def compare_token_ids(tokenize, lowbit, model, text_path):
    """Tokenizes text_path with `llama-tokenize` and `lowbit tokenize` on the same GGUF's vocabulary, prints the
    comparison (the first difference, if any) and returns (ids identical, llama.cpp's ids)."""
    out, _ = run([tokenize, "-m", model, "-f", text_path, "--ids", "--log-disable", "--no-escape"])
    m = re.search(r"\[([0-9, ]*)\]\s*$", out.strip())
    llama_ids = [int(x) for x in m.group(1).split(",")] if m and m.group(1).strip() else []
    tok_rep, _ = run_json([lowbit, "tokenize", "--model", model, "--text", text_path, "--json"])
    ours_ids = tok_rep["ids"]
    ids_equal = llama_ids == ours_ids
    say(f"llama-tokenize: {len(llama_ids)} tokens; lowbit tokenize: {len(ours_ids)} tokens; ids identical: {ids_equal}")
    if not ids_equal:
        n = min(len(llama_ids), len(ours_ids))
        i = next((k for k in range(n) if llama_ids[k] != ours_ids[k]), n)
        say(f"first difference at token {i}: llama.cpp {llama_ids[i:i + 8]} lowbit {ours_ids[i:i + 8]} "
            f"(lowbit pieces {tok_rep['tokens'][max(0, i - 4):i + 8]})")
        diffs = sum(1 for k in range(n) if llama_ids[k] != ours_ids[k])
        say(f"{diffs} differing positions among the first {n}")
    return ids_equal, llama_ids


def sig3_agree(a, b):
    """|a − b| within half a unit of the third significant digit of the larger."""
    unit = 10.0 ** (math.floor(math.log10(max(abs(a), abs(b)))) - 2)
    return abs(a - b) <= 0.5 * unit


def machine_line():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def git(*args):
    try:
        return subprocess.run(["git", "-C", REPO, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True).stdout.strip()
    except OSError:
        return "?"


def lowbit_source(lowbit):
    """Where the lowbit binary was built from: its CMake source folder and that folder's commit."""
    cache = os.path.join(os.path.dirname(os.path.abspath(lowbit)), "CMakeCache.txt")
    src = None
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                src = line.split("=", 1)[1].strip()
    if not src:
        return "unknown source"
    if os.path.exists(os.path.join(src, "COMMIT")):  # a `git archive` snapshot made for this check
        return f"built from {src} = git archive of commit {open(os.path.join(src, 'COMMIT')).read().strip()}"
    rev = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no"], stdout=subprocess.PIPE,
                           text=True).stdout.strip()
    return f"built from {src} at {rev}{' with uncommitted changes' if dirty else ''}"


def commands_last(lines):
    """The report with the commands it ran ("$ ..." lines) moved out of the tables into a list at the end."""
    body = [l for l in lines if not l.startswith("$ ")]
    cmds = [l for l in lines if l.startswith("$ ")]
    return body + (["", "## commands run, in order (stdout of the lowbit ones is their --json report)"] + cmds if cmds else [])


def write_report(args):
    if not args.report:
        return
    tmp = args.report + f".tmp-{os.getpid()}"
    old = open(args.report).read() if args.append and os.path.exists(args.report) else ""
    with open(tmp, "w") as f:
        f.write(old + ("\n" if old else "") + "\n".join(commands_last(log_lines)) + "\n")
    os.replace(tmp, args.report)


def speed_section(args, lowbit, perplexity, quantize, text_path, lv):
    """Alternates the three runs so that the machine's changing load hits all of them alike."""
    f32_gguf = os.path.join(args.work, "f32.gguf")
    if not os.path.exists(f32_gguf):
        run([quantize, "--allow-requantize", args.model, f32_gguf, "F32", "2"], os.path.join(args.work, "llama-quantize-f32.log"))
    kc, ctx = str(args.speed_chunks), str(args.ctx)
    say(f"## speed: {args.speed_reps} alternated repetitions of {kc} windows × {ctx} tokens each "
        f"(tokens/s of the evaluation loop, windows + log-softmax: llama.cpp from its log timestamps, lowbit from its "
        f"report)")
    say()
    say("| threads | llama-perplexity, GGUF | lowbit eval, GGUF | llama-perplexity, f32.gguf | lowbit / llama.cpp (GGUF) | load average (1 min) during |")
    say("|---|---|---|---|---|---|")
    for t in [int(x) for x in args.speed_threads.split(",")]:
        os.environ["OPENBLAS_NUM_THREADS"] = str(t)
        llama_q, ours, llama_f, loads = [], [], [], []
        for _ in range(args.speed_reps):
            for kind in ("llama_q", "lowbit", "llama_f"):
                loads.append(float(loadavg().split()[0]))
                if kind == "lowbit":
                    rep, _ = run_json([lowbit, "eval", "--model", args.model, "--text", text_path, "--ctx", ctx, "--chunks", kc,
                                       "--threads", str(t), "--no-progress", "--json"])
                    ours.append(rep["tokens_per_second"])
                else:
                    m = args.model if kind == "llama_q" else f32_gguf
                    out, _ = run([perplexity, "-m", m, "-f", text_path, "-c", ctx, "-b", ctx, "-t", str(t), "--chunks", kc, *lv])
                    (llama_q if kind == "llama_q" else llama_f).append(parse_llama_perplexity(out)["loop_tps"])

        def fmt(v):
            v = sorted(v)
            return f"{v[len(v) // 2]:.0f} ({v[0]:.0f}–{v[-1]:.0f})"
        ratio = sorted(o / q for o, q in zip(ours, llama_q))
        say(f"| {t} | {fmt(llama_q)} | {fmt(ours)} | {fmt(llama_f)} | {ratio[len(ratio) // 2]:.2f} ({ratio[0]:.2f}–{ratio[-1]:.2f}) "
            f"| {min(loads):.1f}–{max(loads):.1f} |")
    say("(median (min–max) tokens/s over the repetitions; the ratio is per repetition, pairing each lowbit run with the "
        "llama.cpp run just before it)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowbit", default=os.path.join(REPO, "build-peer-lowbit", "lowbit"))
    ap.add_argument("--llama-bin", default=os.path.join(REPO, "build-peer", "llama.cpp-build", "bin"))
    ap.add_argument("--model", default=DEFAULT_MODEL, help="the GGUF both run")
    ap.add_argument("--corpus", default="sotu-test")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1, help="windows to evaluate (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(REPO, "build-peer", "check"), help="work folder (text, logs, KLD files)")
    ap.add_argument("--no-kld", action="store_true", help="skip the KLD-file comparisons (4.2 GB per file for all of sotu-test)")
    ap.add_argument("--decompose-chunks", type=int, default=16, help="windows for the F32-weights / F32-KV runs (0: skip)")
    ap.add_argument("--keep", action="store_true", help="keep the KLD files")
    ap.add_argument("--report", default=None, help="also write the report to this file")
    ap.add_argument("--append", action="store_true", help="append to --report instead of replacing it")
    ap.add_argument("--speed-only", action="store_true",
                    help="after the text and token checks, only measure speed: llama-perplexity (GGUF and f32.gguf) and "
                         "lowbit eval alternated --speed-reps times on --speed-chunks windows, per --speed-threads")
    ap.add_argument("--speed-reps", type=int, default=3)
    ap.add_argument("--speed-chunks", type=int, default=16)
    ap.add_argument("--speed-threads", default="2", help="comma-separated thread counts for --speed-only")
    args = ap.parse_args()

    os.makedirs(args.work, exist_ok=True)
    lowbit, perplexity = args.lowbit, os.path.join(args.llama_bin, "llama-perplexity")
    lv = ["-lv", "4"]  # llama.cpp's context and timing lines (flash attention, KV types, llama_perf_context_print)
    tokenize, quantize = os.path.join(args.llama_bin, "llama-tokenize"), os.path.join(args.llama_bin, "llama-quantize")
    chunks = ["--chunks", str(args.chunks)] if args.chunks > 0 else []
    threads = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = threads  # lowbit's sgemm (OpenBLAS) uses the same number of threads
    ctx = str(args.ctx)

    say("# lowbit eval vs llama.cpp llama-perplexity — " + os.path.basename(args.model) + f", {args.corpus}, n_ctx {args.ctx}")
    say(f"command: python3 tests/peer/check_llama_cpp.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    say(f"date:    {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    say(f"machine: {machine_line()}; load average at start {loadavg()}")
    say(f"scripts: repository at {git('rev-parse', '--short', 'HEAD')}")
    say(f"lowbit:  {lowbit} ({lowbit_source(lowbit)}); --threads {threads}, "
        f"OPENBLAS_NUM_THREADS={threads}")
    info_path = os.path.join(os.path.dirname(args.llama_bin), "peer-build-info.txt")
    if os.path.exists(info_path):
        for line in open(info_path):
            say("llama.cpp: " + line.rstrip())
    else:
        ver, _ = run([perplexity, "--version"])
        say("llama.cpp: " + " | ".join(l.strip() for l in ver.splitlines() if "version" in l or "built with" in l))
    say()

    # 1. the text
    text, files = corpus_text(args.corpus)
    text_path = os.path.join(args.work, f"{args.corpus}.txt")
    with open(text_path, "wb") as f:
        f.write(text)
    say(f"## 1. text: {text_path} — {len(files)} files ({files[0]} … {files[-1]}) joined with \\n\\n, {len(text)} bytes")
    rep_corpus, _ = run_json([lowbit, "eval", "--model", args.model, "--corpus", args.corpus, "--ctx", ctx, "--chunks", "1",
                              "--threads", threads, "--no-progress", "--json"])
    rep_file, _ = run_json([lowbit, "eval", "--model", args.model, "--text", text_path, "--ctx", ctx, "--chunks", "1",
                            "--threads", threads, "--no-progress", "--json"])
    same_text = rep_corpus["n_text_tokens"] == rep_file["n_text_tokens"] and rep_corpus["ppl"] == rep_file["ppl"]
    say(f"lowbit --corpus {args.corpus}: {rep_corpus['n_text_tokens']} tokens; --text FILE: {rep_file['n_text_tokens']} tokens; "
        f"window-1 PPL {rep_corpus['ppl']:.6f} vs {rep_file['ppl']:.6f} -> {'same text' if same_text else 'DIFFERENT TEXT'}")
    say()

    # 2. token ids
    say("## 2. tokenization")
    ids_equal, llama_ids = compare_token_ids(tokenize, lowbit, args.model, text_path)
    say()

    if args.speed_only:
        speed_section(args, lowbit, perplexity, quantize, text_path, lv)
        write_report(args)
        return 0

    # 3. perplexity and speed
    say("## 3. perplexity (plain runs, also the speed measurement)")
    # The same weights for llama.cpp without its quantized dot products: every tensor dequantized to F32 by
    # llama-quantize (exact; lowbit gets bit-identical logits from this file, checked in section 5).
    f32_gguf = os.path.join(args.work, "f32.gguf")
    if not os.path.exists(f32_gguf):
        run([quantize, "--allow-requantize", args.model, f32_gguf, "F32", threads],
            os.path.join(args.work, "llama-quantize-f32.log"))
    say(f"load average before llama-perplexity: {loadavg()}")
    out, wall_llama = run([perplexity, "-m", args.model, "-f", text_path, "-c", ctx, "-b", ctx, "-t", threads, *chunks, *lv],
                          os.path.join(args.work, "llama-perplexity.log"))
    lp = parse_llama_perplexity(out)
    say(f"load average before lowbit eval: {loadavg()}")
    lb, wall_lowbit = run_json([lowbit, "eval", "--model", args.model, "--text", text_path, "--ctx", ctx, *chunks,
                                "--threads", threads, "--no-progress", "--json"])
    say(f"load average before llama-perplexity on f32.gguf: {loadavg()}")
    out, wall_llama32 = run([perplexity, "-m", f32_gguf, "-f", text_path, "-c", ctx, "-b", ctx, "-t", threads, *chunks, *lv],
                            os.path.join(args.work, "llama-perplexity-f32.log"))
    lp32 = parse_llama_perplexity(out)
    say(f"load average after: {loadavg()}")
    n_scored_llama = lp["n_chunks"] * (args.ctx - 1 - args.ctx // 2)
    ppl_ok = sig3_agree(lp["ppl"], lb["ppl"])
    ppl32_ok = sig3_agree(lp32["ppl"], lb["ppl"])
    counts_ok = lp["n_chunks"] == lb["n_chunks"] == lp32["n_chunks"] and len(llama_ids) == lb["n_text_tokens"]
    say(f"llama.cpp system_info: {lp.get('system_info', '?')}")
    say(f"llama.cpp context: flash attention {lp.get('flash_attn', '?')}, KV cache {lp.get('kv_types', '?')}")
    say()
    say(f"| | llama-perplexity, {os.path.basename(args.model)} | lowbit eval, same file | llama-perplexity, f32.gguf (same weights in F32) |")
    say("|---|---|---|---|")
    say(f"| text tokens | {len(llama_ids)} (llama-tokenize) | {lb['n_text_tokens']} | |")
    say(f"| windows × n_ctx | {lp['n_chunks']} × {lp['n_ctx']} | {lb['n_chunks']} × {lb['n_ctx']} | {lp32['n_chunks']} × {lp32['n_ctx']} |")
    say(f"| scored tokens | {n_scored_llama} | {lb['n_scored']} | {n_scored_llama} |")
    say(f"| BOS first | no (vocab add_bos false) | {lb['add_bos']} | |")
    say(f"| PPL | {lp['ppl']:.4f} ± {lp['ppl_err']:.5f} | {lb['ppl']:.4f} ± {lb['ppl_err']:.5f} | {lp32['ppl']:.4f} ± {lp32['ppl_err']:.5f} |")
    say(f"| PPL, 3 significant digits | {lp['ppl']:.3g} | {lb['ppl']:.3g} | {lp32['ppl']:.3g} |")
    say(f"| tokens/s, evaluation loop (windows + log-softmax) | {lp['loop_tps']:.1f} ({lp['loop_s']:.1f} s; llama_perf prompt eval "
        f"{lp.get('prompt_eval_tps', float('nan')):.1f}) | {lb['tokens_per_second']:.1f} ({lb['seconds']:.1f} s) "
        f"| {lp32['loop_tps']:.1f} ({lp32['loop_s']:.1f} s) |")
    say(f"| wall clock of the command | {wall_llama:.1f} s | {wall_lowbit:.1f} s | {wall_llama32:.1f} s |")
    say(f"| threads | {args.threads} | {lb['threads']} | {args.threads} |")
    say()
    say(f"PPL lowbit/llama.cpp − 1: {lb['ppl'] / lp['ppl'] - 1:+.3e} against the shipped GGUF (3 significant digits: "
        f"{ppl_ok}); {lb['ppl'] / lp32['ppl'] - 1:+.3e} against llama.cpp on the same weights in F32 (3 significant digits: "
        f"{ppl32_ok})")
    say(f"speed, evaluation loop: lowbit / llama.cpp {lb['tokens_per_second'] / lp['loop_tps']:.2f}x on the shipped GGUF, "
        f"{lb['tokens_per_second'] / lp32['loop_tps']:.2f}x against llama.cpp with F32 weights")
    say()

    if not args.no_kld:
        say("## 4. logits: llama.cpp's KLD base file vs lowbit")
        llama_kld = os.path.join(args.work, "llama.kld")
        lowbit_kld = os.path.join(args.work, "lowbit.kld")
        out, _ = run([perplexity, "-m", args.model, "-f", text_path, "-c", ctx, "-b", ctx, "-t", threads, *chunks, *lv,
                      "--kl-divergence-base", llama_kld], os.path.join(args.work, "llama-perplexity-base.log"))
        lpb = parse_llama_perplexity(out)
        say(f"llama-perplexity (writing the base file): PPL {lpb['ppl']:.4f} ± {lpb['ppl_err']:.5f}")
        kb, _ = run_json([lowbit, "eval", "--model", args.model, "--text", text_path, "--kld-base", llama_kld, *chunks,
                          "--threads", threads, "--no-progress", "--json"])
        k = kb["kld"]
        say(f"lowbit eval --kld-base llama.kld (token ids in the file checked against lowbit's): {kb['n_chunks']} windows, "
            f"{kb['n_scored']} positions")
        say(f"  KLD(llama.cpp || lowbit) {k['kld_mean']:.3e} ± {k['kld_err']:.1e} (median {k['kld_median']:.2e}, "
            f"99% {k['kld_p99']:.2e}, max {k['kld_max']:.2e})")
        say(f"  top-1 agreement {100 * k['top1_agreement']:.3f}% ± {100 * k['top1_err']:.3f}%")
        say(f"  PPL lowbit {kb['ppl']:.4f}, PPL(llama.cpp) from the file {k['ppl_base']:.4f}, ratio {k['ppl_ratio']:.6f} "
            f"(ln {k['ln_ppl_ratio']:+.2e} ± {k['ln_ppl_ratio_err']:.1e})")
        run_json([lowbit, "eval", "--model", args.model, "--text", text_path, "--ctx", ctx, *chunks, "--threads", threads,
                  "--save-logits", lowbit_kld, "--no-progress", "--json"])
        c = compare_kld_files(llama_kld, lowbit_kld)
        say(f"file vs file ({c['n_chunk']} windows, {c['n_entries']} log-probabilities stored by both): token ids equal "
            f"{c['tokens_equal']}; max |Δ log p| {c['max_abs']:.3e} (log p > −5: {c['max_abs_top']:.3e}; target token: "
            f"{c['max_abs_nll']:.3e}); mean |Δ log p| {c['mean_abs']:.2e}; rounding of the two files up to "
            f"{c['max_half_step']:.1e}; top-1 {100 * c['same_top'] / c['count']:.3f}%")
        out, _ = run([perplexity, "-m", args.model, "-f", text_path, "-c", ctx, "-b", ctx, "-t", threads, *chunks, *lv,
                      "--kl-divergence-base", lowbit_kld, "--kl-divergence"], os.path.join(args.work, "llama-perplexity-kld.log"))
        lk = parse_llama_perplexity(out)
        say(f"llama-perplexity --kl-divergence against lowbit.kld (llama.cpp's own statistics): PPL(Q = llama.cpp) "
            f"{lk.get('ppl', float('nan')):.4f}, PPL(base = lowbit) {lk.get('ppl_base', float('nan')):.4f}, "
            f"KLD {lk.get('kld', float('nan')):.3e} ± {lk.get('kld_err', float('nan')):.1e} (max {lk.get('kld_max', float('nan')):.2e}), "
            f"same top p {lk.get('same_top', float('nan')):.3f} ± {lk.get('same_top_err', float('nan')):.3f}%, "
            f"RMS Δp {lk.get('rms_dp', float('nan')):.3f}%")
        say()

        if args.decompose_chunks > 0:
            kc = str(args.decompose_chunks)
            say(f"## 5. where the difference comes from (first {kc} windows)")
            f32_q8_gguf = os.path.join(args.work, "f32-embq8.gguf")
            if not os.path.exists(f32_q8_gguf):  # Q8_0 -> F32 -> Q8_0 gives back the same bytes
                run([quantize, "--allow-requantize", "--token-embedding-type", "q8_0", f32_gguf, f32_q8_gguf, "F32", threads],
                    os.path.join(args.work, "llama-quantize-f32-embq8.log"))
            # lowbit dequantizes every weight to F32 itself: all three files must give it the same logits.
            lbq, _ = run_json([lowbit, "eval", "--model", args.model, "--text", text_path, "--ctx", ctx, "--chunks", kc,
                               "--threads", threads, "--no-progress", "--json"])
            same_weights = True
            for g in (f32_gguf, f32_q8_gguf):
                lbf, _ = run_json([lowbit, "eval", "--model", g, "--text", text_path, "--ctx", ctx, "--chunks", kc,
                                   "--threads", threads, "--no-progress", "--json"])
                same_weights &= lbf["ppl"] == lbq["ppl"]
                say(f"lowbit on {os.path.basename(g)}: PPL {lbf['ppl']:.9f}; on {os.path.basename(args.model)}: "
                    f"{lbq['ppl']:.9f} -> {'identical' if lbf['ppl'] == lbq['ppl'] else 'DIFFERENT'}")
            variants = [
                ("as shipped: Q4_1 layers × Q8_1 activations, Q8_0 output × Q8_0 activations; default attention", llama_kld,
                 None),
                ("F32 layers, Q8_0 output (same bytes) × Q8_0 activations; default attention",
                 os.path.join(args.work, "llama-f32-embq8.kld"), [perplexity, "-m", f32_q8_gguf]),
                ("all weights F32; default attention", os.path.join(args.work, "llama-f32.kld"), [perplexity, "-m", f32_gguf]),
                ("all weights F32; KV cache F32 (-ctk f32 -ctv f32)", os.path.join(args.work, "llama-f32-kvf32.kld"),
                 [perplexity, "-m", f32_gguf, "-ctk", "f32", "-ctv", "f32"]),
                ("all weights F32; KV cache F32, no flash attention (-fa off)", os.path.join(args.work, "llama-f32-kvf32-nofa.kld"),
                 [perplexity, "-m", f32_gguf, "-ctk", "f32", "-ctv", "f32", "-fa", "off"]),
            ]
            say(f"(default attention = {lp.get('flash_attn', '?')} flash attention, KV cache {lp.get('kv_types', '?')})")
            say()
            say("| llama.cpp variant | llama.cpp PPL | lowbit PPL | KLD(llama.cpp ‖ lowbit) | top-1 agreement | max |Δ log p| | max |Δ log p|, log p > −5 |")
            say("|---|---|---|---|---|---|---|")
            notes = []
            for name, kld_path, cmd in variants:
                if cmd is not None:
                    o, _ = run([*cmd, "-f", text_path, "-c", ctx, "-b", ctx, "-t", threads, "--chunks", kc, *lv,
                                "--kl-divergence-base", kld_path], kld_path + ".log")
                    pv = parse_llama_perplexity(o)
                    notes.append(f"{name}: flash attention {pv.get('flash_attn', '?')}, KV {pv.get('kv_types', '?')}, "
                                 f"PPL printed {pv.get('ppl', float('nan')):.4f}")
                kv, _ = run_json([lowbit, "eval", "--model", args.model, "--text", text_path, "--kld-base", kld_path,
                                  "--chunks", kc, "--threads", threads, "--no-progress", "--json"])
                cv = compare_kld_files(kld_path, lowbit_kld, args.decompose_chunks)
                kk = kv["kld"]
                say(f"| {name} | {kk['ppl_base']:.4f} | {kv['ppl']:.4f} | {kk['kld_mean']:.2e} ± {kk['kld_err']:.0e} | "
                    f"{100 * kk['top1_agreement']:.2f}% | {cv['max_abs']:.2e} | {cv['max_abs_top']:.2e} |")
            for n in notes:
                say("  " + n)
            if not same_weights:
                say("WARNING: lowbit's logits differ between the GGUF and its F32 re-writes")
            say("(llama.cpp PPL here is the one lowbit reads back from the 16-bit file: exp(mean of the rounded target "
                "log-probabilities).)")
            say()
        if not args.keep:
            for p in os.listdir(args.work):
                if p.endswith(".kld"):
                    os.remove(os.path.join(args.work, p))

    ok = ids_equal and counts_ok and same_text and ppl32_ok
    say(f"RESULT: {'PASS' if ok else 'FAIL'} — token ids equal: {ids_equal}; chunk/token counts equal: {counts_ok}; "
        f"same text as --corpus: {same_text}; PPL to 3 significant digits against llama.cpp on the same weights (F32): "
        f"{ppl32_ok}; against llama.cpp's default CPU path on the shipped quantized GGUF: {ppl_ok}"
        + ("" if ppl_ok else " (not required for PASS: llama.cpp quantizes the activations of quantized-weight matmuls; "
                            "section 5 measures it)"))
    write_report(args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
