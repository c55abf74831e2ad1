#!/usr/bin/env python3
"""check_trained_export.py — peer check of a model trained by `lowbit train`: its GGUF exports are loaded by
llama.cpp and its HF export by transformers, and both compute lowbit's function.

  1. `lowbit tokenize-corpus` on the SOTU train split (addresses before 2001, shared/data) with SmolLM2's
     tokenizer (the manifest's tokenizer_source is the cached SmolLM2 GGUF, so the exporter embeds it);
  2. per run (the `tiny` preset, tied embeddings; and the same with untied embeddings, unless --no-untied):
     `lowbit train --device cpu` for --steps steps, which writes DIR/hf and DIR/model.gguf (F32); then
     `lowbit train --resume --export-dtype f16` on the complete run exports F16 from the same final
     checkpoint (the HF folder written again must be byte-identical: checked);
  3. llama.cpp (tests/peer/build_llama_cpp.sh): `llama-tokenize` on the eval text (sotu-test, as lowbit reads
     it, and a short mixed-script sample) with the trained GGUF's embedded tokenizer gives lowbit's ids;
     `llama-perplexity -c CTX -b CTX --chunks N` vs `lowbit eval` of the same GGUF with the same windows: PPL
     to 3 significant digits on F32, within --tol-f16 on F16. PPL alone is too weak for a model this little
     trained (a GGUF with un-permuted q/k rows still agrees to 3 digits), so the log-probabilities are compared
     too: llama-perplexity's KLD base file against lowbit's --save-logits (check_llama_cpp.compare_kld_files,
     every log p within 16 nats of the top), max |Δ log p| <= --tol-logp (F32; both files round to ~8e-5) and
     --tol-logp-f16 (llama.cpp's CPU F16 matmul also rounds the activations to F16, 2^-11 relative);
  4. transformers (CPU, float32, eager attention): AutoModelForCausalLM.from_pretrained(DIR/hf) logits vs
     `lowbit eval --model DIR/hf --dump-logits` on the same windows (check_transformers.py's comparison),
     max |Δ logit| <= --tol-logit-rel · max(1, max |logit|): 1e-5 ≈ 80 float32 ulps of relative error, far
     above the reordered-sum noise of d = 64 / FFN 256 dot products (measured ~5e-7) and far below any layout
     error (q/k rows in the wrong pairing: 1.3e-2); and `lowbit eval` of DIR/hf and of the F32 GGUF (q/k rows
     permuted to GGUF's pairing) agree in PPL to --tol-ppl.

    bash tests/peer/build_llama_cpp.sh && bash scripts/fetch_model.sh
    .venv/bin/pip install torch transformers safetensors   # CPU is enough
    .venv/bin/python tests/peer/check_trained_export.py --lowbit build/lowbit \\
        [--report bench/results/train_export_peer_check.txt]

Exit status 0 when every check passes. Not part of CTest (it needs a llama.cpp build and torch). ~6 minutes on
the 2-core machine (mostly the two CPU training runs). The shards, runs, texts and logs stay in --work.
"""
import argparse
import datetime
import filecmp
import json
import os
import shlex
import shutil
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_llama_cpp as llc  # noqa: E402  (say, run, run_json, corpus_text, llama.cpp parsing, report)
from check_transformers import compare_with_transformers  # noqa: E402

REPO = llc.REPO
say = llc.say

# Text for the tokenizer check beside the SOTU text: what the pre-tokenizer splits (digits, contractions,
# punctuation runs, spaces, newlines, tabs) and non-ASCII in 2, 3 and 4 UTF-8 bytes.
MIXED_SAMPLE = ("Hello world! It's 2024: 1234567 apples, 3.14159 pies... \"Quoted\" (and [bracketed]) text.\n\n"
                "   Leading spaces\tand\ttabs; naïve café, Grüße, Ελληνικά, русский, 日本語のテキスト, 🚀🌍!\n"
                "e-mail: someone@example.org; C++ `code` x=y+1; ---\n")


def train_command(lowbit, shards, run_dir, config, steps, threads):
    return [lowbit, "train", "--config", config, "--data", shards, "--out", run_dir, "--steps", str(steps),
            "--device", "cpu", "--threads", threads, "--no-progress"]


def make_shards(lowbit, work, threads):
    """The SOTU train split (years before 2001) as SmolLM2-token shards."""
    text_dir = os.path.join(work, "sotu-train")
    shards = os.path.join(work, "shards")
    for d in (text_dir, shards):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(text_dir)
    sotu = os.path.join(llc.shared_data_dir(), "corpora", "sotu")
    files = sorted(f for f in os.listdir(sotu) if f.endswith(".txt") and f[:4].isdigit() and int(f[:4]) < 2001)
    for f in files:
        os.symlink(os.path.join(sotu, f), os.path.join(text_dir, f))
    llc.run([lowbit, "tokenize-corpus", "--model", "smollm2-135m", "--input", text_dir, "--out", shards,
             "--val-fraction", "0.02", "--threads", threads], os.path.join(work, "tokenize-corpus.log"))
    manifest = json.load(open(os.path.join(shards, "manifest.json")))
    source = manifest.get("info", {}).get("tokenizer_source", "")
    say(f"shards: {len(files)} addresses ({files[0]} … {files[-1]}), tokenizer_source {source}")
    return shards


def train_and_export(args, shards, name, config):
    """Trains one run; returns its directory, the GGUF paths per dtype and the trainer's report."""
    run_dir = os.path.join(args.work, name)
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = train_command(args.lowbit, shards, run_dir, config, args.steps, str(args.threads))
    llc.run(cmd, os.path.join(args.work, f"{name}-train.log"))
    report = json.load(open(os.path.join(run_dir, "report.json")))
    ggufs = {"f32": os.path.join(run_dir, "model-f32.gguf")}
    os.replace(os.path.join(run_dir, "model.gguf"), ggufs["f32"])
    hf_first = os.path.join(run_dir, "hf-first")
    shutil.copytree(os.path.join(run_dir, "hf"), hf_first)
    for dtype in ("f16",):
        llc.run(cmd + ["--resume", "--export-dtype", dtype], os.path.join(args.work, f"{name}-export-{dtype}.log"))
        ggufs[dtype] = os.path.join(run_dir, f"model-{dtype}.gguf")
        os.replace(os.path.join(run_dir, "model.gguf"), ggufs[dtype])
    match, mismatch, errors = filecmp.cmpfiles(hf_first, os.path.join(run_dir, "hf"), sorted(os.listdir(hf_first)),
                                               shallow=False)
    same_hf = not mismatch and not errors and bool(match)
    shutil.rmtree(hf_first)
    return run_dir, ggufs, report, same_hf


def check_llama_cpp(args, run_dir, ggufs, texts):
    """Token ids, perplexity and log-probabilities against llama.cpp; returns (ok, PPL of lowbit on the F32 GGUF)."""
    bin_dir = args.llama_bin
    tokenize, perplexity = os.path.join(bin_dir, "llama-tokenize"), os.path.join(bin_dir, "llama-perplexity")
    ok = True
    for label, path in texts.items():
        say(f"tokenizer embedded in {os.path.basename(ggufs['f32'])}, text {label}:")
        ids_equal, _ = llc.compare_token_ids(tokenize, args.lowbit, ggufs["f32"], path)
        ok &= ids_equal
    ctx, threads, text = str(args.ctx), str(args.threads), texts["sotu-test"]
    window = ["-f", text, "-c", ctx, "-b", ctx, "-t", threads]
    ours = [args.lowbit, "eval", "--text", text, "--ctx", ctx, "--threads", threads, "--no-progress", "--json"]
    say()
    say(f"| GGUF | llama-perplexity PPL | lowbit eval PPL | windows × n_ctx | PPL rel. diff. | max |Δ log p| "
        f"({args.kld_chunks} windows) | check |")
    say("|---|---|---|---|---|---|---|")
    ppl32 = None
    for dtype, gguf in ggufs.items():
        out, _ = llc.run([perplexity, "-m", gguf, *window, "--chunks", str(args.chunks)],
                         os.path.join(run_dir, f"llama-perplexity-{dtype}.log"))
        lp = llc.parse_llama_perplexity(out)
        lb, _ = llc.run_json(ours + ["--model", gguf, "--chunks", str(args.chunks)])
        # The logits themselves: llama.cpp's KLD base file against lowbit's (16-bit log-probabilities each).
        base_llama, base_ours = os.path.join(run_dir, f"llama-{dtype}.kld"), os.path.join(run_dir, f"lowbit-{dtype}.kld")
        llc.run([perplexity, "-m", gguf, *window, "--chunks", str(args.kld_chunks), "--kl-divergence-base",
                 base_llama], os.path.join(run_dir, f"llama-perplexity-kld-{dtype}.log"))
        llc.run_json(ours + ["--model", gguf, "--chunks", str(args.kld_chunks), "--save-logits", base_ours])
        c = llc.compare_kld_files(base_llama, base_ours)
        os.remove(base_llama)
        os.remove(base_ours)
        counts = lp.get("n_chunks") == lb["n_chunks"] and lp.get("n_ctx") == lb["n_ctx"] and c["tokens_equal"]
        rel = lb["ppl"] / lp["ppl"] - 1 if "ppl" in lp else float("inf")
        tol_logp = args.tol_logp if dtype == "f32" else args.tol_logp_f16
        if dtype == "f32":
            ppl32 = lb["ppl"]
            good, rule = "ppl" in lp and llc.sig3_agree(lp["ppl"], lb["ppl"]), "PPL to 3 significant digits"
        else:
            good, rule = abs(rel) <= args.tol_f16, f"PPL within {args.tol_f16:g}"
        good &= counts and c["max_abs"] <= tol_logp
        ok &= good
        say(f"| {dtype} | {lp.get('ppl', float('nan')):.4f} | {lb['ppl']:.4f} | {lp.get('n_chunks')} × {lp.get('n_ctx')}, "
            f"{lb['n_chunks']} × {lb['n_ctx']} | {rel:+.2e} | {c['max_abs']:.2e} (files round to "
            f"{c['max_half_step']:.1e}; top-1 {100 * c['same_top'] / c['count']:.2f}%) | {rule}, token ids and counts "
            f"equal, log p within {tol_logp:g}: {'ok' if good else 'FAIL'} |")
    return ok, ppl32


def check_transformers(args, run_dir, ggufs, texts, ppl32):
    """transformers on DIR/hf vs lowbit on DIR/hf; lowbit on DIR/hf vs lowbit on the F32 GGUF."""
    hf_dir = os.path.join(run_dir, "hf")
    ns = types.SimpleNamespace(lowbit=args.lowbit, tokenizer=ggufs["f32"], corpus=None, text=texts["sotu-test"],
                               ctx=args.ctx, chunks=args.hf_chunks, device="cpu", tmp=os.path.join(run_dir, "tf"))
    say(f"$ (check_transformers.compare_with_transformers) {args.lowbit} eval --model {hf_dir} --tokenizer "
        f"{ggufs['f32']} --text {ns.text} --ctx {args.ctx} --chunks {args.hf_chunks} --dump-logits …; "
        f"AutoModelForCausalLM.from_pretrained({hf_dir})")
    r = compare_with_transformers(ns, hf_dir)
    tol = args.tol_logit_rel * max(1.0, r["max_logit"])
    logits_ok = r["max_abs"] <= tol and r["ppl_rel"] <= args.tol_ppl
    say(f"transformers vs lowbit, DIR/hf, {r['count']} scored positions of {args.hf_chunks} windows: max |Δ logit| "
        f"{r['max_abs']:.2e} (largest |logit| {r['max_logit']:.2f}; tolerance {tol:.1e}), PPL {r['ppl_hf']:.6f} vs "
        f"{r['ppl_lowbit']:.6f} (rel {r['ppl_rel']:.1e}), KLD {r['kld']:.1e}, top-1 {100 * r['top1']:.2f}% -> "
        f"{'ok' if logits_ok else 'FAIL'}")
    lb, _ = llc.run_json([args.lowbit, "eval", "--model", hf_dir, "--tokenizer", ggufs["f32"], "--text", texts["sotu-test"],
                          "--ctx", str(args.ctx), "--chunks", str(args.chunks), "--threads", str(args.threads),
                          "--no-progress", "--json"])
    rel = abs(lb["ppl"] / ppl32 - 1) if ppl32 else float("inf")
    same_ok = rel <= args.tol_ppl
    say(f"lowbit eval, DIR/hf vs model-f32.gguf ({args.chunks} windows): PPL {lb['ppl']:.6f} vs {ppl32:.6f} "
        f"(rel {rel:.1e}) -> {'ok' if same_ok else 'FAIL'}")
    return logits_ok and same_ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowbit", default=os.path.join(REPO, "build", "lowbit"))
    ap.add_argument("--llama-bin", default=os.path.join(REPO, "build-peer", "llama.cpp-build", "bin"))
    ap.add_argument("--work", default=os.path.join(REPO, "build-peer", "trained-export"), help="work folder")
    ap.add_argument("--steps", type=int, default=60, help="training steps per run")
    ap.add_argument("--ctx", type=int, default=64, help="evaluation window (the tiny preset's context length)")
    ap.add_argument("--chunks", type=int, default=200, help="windows for the perplexity comparisons")
    ap.add_argument("--hf-chunks", type=int, default=4, help="windows for the logit comparison with transformers")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kld-chunks", type=int, default=16, help="windows for the log-probability comparison")
    ap.add_argument("--tol-f16", type=float, default=2e-3, help="max relative PPL difference on the F16 GGUF")
    ap.add_argument("--tol-logp", type=float, default=1e-3, help="max |Δ log p| against llama.cpp, F32")
    ap.add_argument("--tol-logp-f16", type=float, default=3e-3, help="the same on the F16 GGUF")
    ap.add_argument("--tol-logit-rel", type=float, default=1e-5,
                    help="max |Δ logit| against transformers, relative to max(1, largest |logit|)")
    ap.add_argument("--tol-ppl", type=float, default=1e-5, help="max relative PPL difference of two FP32 paths")
    ap.add_argument("--no-untied", action="store_true", help="skip the run with untied embeddings")
    ap.add_argument("--report", default=None, help="also write the report to this file")
    args = ap.parse_args()
    args.append = False  # for llc.write_report
    args.lowbit = os.path.abspath(args.lowbit)
    for tool in ("llama-tokenize", "llama-perplexity"):
        if not os.access(os.path.join(args.llama_bin, tool), os.X_OK):
            ap.error(f"{args.llama_bin}/{tool} missing: run tests/peer/build_llama_cpp.sh (or give --llama-bin)")
    if not os.access(args.lowbit, os.X_OK):
        ap.error(f"--lowbit {args.lowbit}: not an executable file")
    os.makedirs(args.work, exist_ok=True)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    import torch
    import transformers

    say(f"# peer check of models trained by `lowbit train`: GGUF (F32, F16) in llama.cpp, HF folder in transformers")
    say(f"command: python3 tests/peer/check_trained_export.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    say(f"date:    {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    say(f"commit:  {llc.git('rev-parse', '--short', 'HEAD')}; lowbit {args.lowbit} ({llc.lowbit_source(args.lowbit)})")
    say(f"machine: {llc.machine_line()}")
    info_path = os.path.join(os.path.dirname(args.llama_bin), "peer-build-info.txt")
    if os.path.exists(info_path):
        say("llama.cpp: " + " | ".join(line.strip() for line in open(info_path)))
    say(f"transformers {transformers.__version__}, torch {torch.__version__} (CPU, float32, eager attention)")
    say()

    shards = make_shards(args.lowbit, args.work, str(args.threads))
    text, files = llc.corpus_text("sotu-test")
    texts = {"sotu-test": os.path.join(args.work, "sotu-test.txt"), "mixed sample": os.path.join(args.work, "mixed.txt")}
    with open(texts["sotu-test"], "wb") as f:
        f.write(text)
    with open(texts["mixed sample"], "w", encoding="utf-8") as f:
        f.write(MIXED_SAMPLE)
    say(f"eval text: sotu-test as lowbit reads it ({len(files)} addresses, {len(text)} bytes); n_ctx {args.ctx}, "
        f"{args.chunks} windows for PPL, {args.hf_chunks} for logits")

    runs = [("tied", "tiny")]
    if not args.no_untied:
        cfg = os.path.join(args.work, "tiny-untied.json")
        with open(cfg, "w") as f:
            json.dump({"preset": "tiny", "model": {"tie_word_embeddings": False}}, f)
        runs.append(("untied", cfg))
    results = {}
    for name, config in runs:
        say()
        say(f"## run '{name}': lowbit train --config {os.path.basename(config)} --steps {args.steps} --device cpu")
        run_dir, ggufs, report, same_hf = train_and_export(args, shards, name, config)
        m = report["config"]["model"]
        say(f"{report['parameters']} parameters (d {m.get('hidden_size')}, {m.get('num_hidden_layers')} layers, "
            f"heads {m.get('num_attention_heads')}/{m.get('num_key_value_heads')}, FFN {m.get('intermediate_size')}, "
            f"vocab {m.get('vocab_size')}, tie_word_embeddings {m.get('tie_word_embeddings')}); final train loss "
            f"{report.get('final_train_loss', float('nan')):.4f}, validation loss "
            f"{report.get('validation_loss', {}).get('loss', float('nan')):.4f}")
        say(f"HF folder written again by the --resume export: byte-identical {same_hf}")
        ok_llama, ppl32 = check_llama_cpp(args, run_dir, ggufs, texts)
        ok_tf = check_transformers(args, run_dir, ggufs, texts, ppl32)
        results[name] = same_hf and ok_llama and ok_tf

    ok = all(results.values())
    say()
    say(f"RESULT: {'PASS' if ok else 'FAIL'} — " + "; ".join(f"{k}: {'pass' if v else 'FAIL'}" for k, v in results.items()))
    llc.write_report(args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
