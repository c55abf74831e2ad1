#!/usr/bin/env python3
"""check_fakequant_transformers.py — peer check of lowbit's fake-quant safetensors export (`lowbit quantize
--out DIR --packing fake-quant`, src/ptq/export_safetensors.h) against Hugging Face transformers.

lowbit quantizes the model (RTN to int4 g64 by default: any grid, GGUF ones included, exports this way) and
writes the dequantized FP32 checkpoint (model.safetensors + config.json, the quantization record under
"lowbit_quantization"); check_transformers.py's comparison then evaluates DIR with `lowbit eval
--save-logits --dump-logits` and runs the same windows through transformers' AutoModelForCausalLM
(float32, eager attention) loading DIR. It prints max|Δlogit|/max|logit|, the top-1 agreement, both
perplexities and KLD, and fails above the tolerances below. `--export DIR` checks an existing export
(e.g. a GPTQ or TurboBoA run) instead of quantizing.

GPTQ-packed exports (`--packing gptq`): transformers loads a GPTQ checkpoint only through its GPTQ quantizer,
which needs optimum plus gptqmodel (or the older auto-gptq) for the kernels; without them there is no
transformers-only path, so the check says SKIP and exits 0. (lowbit's own reading of that layout is checked
against GPTQModel's formulas by tests/crosscheck/check_gptq_safetensors.py.) Where those packages exist the
same comparison runs on the GPTQ directory, with the looser tolerance its FP16 kernels need (not run yet:
no host with those packages has been at hand).

Not part of CTest: it needs torch + transformers (the GPU host, or a CPU venv outside the repository):

    /tmp/peer-venv/bin/python tests/peer/check_fakequant_transformers.py --lowbit build/lowbit \
        --model smollm2-135m --corpus sotu-test --ctx 512 --chunks 2 [--device cuda] [--tmp /tmp/peer-fq]
"""
import argparse
import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_transformers as peer  # noqa: E402  (the comparison itself: one code path for both checks)

# FP32 on both sides over the same FP32 weights (the export holds exactly the values lowbit evaluates), so
# only summation order differs: export-hf's dense check measured max|Δ|/max|logit| = 1.2e-4/37.7 = 3e-6 on
# the CPU and 2.7e-4/41.9 = 6e-6 on the H200 (docs/model.md). 1e-4 leaves 15x headroom; a mis-scaled group,
# q/k rows in the wrong RoPE order or a transposed tensor move the logits by whole percents.
TOL_REL_FAKE_QUANT = 1e-4
# GPTQ kernels run FP16 (weights dequantized to FP16, FP16 activations): per-layer rounding near 2^-11
# compounds over 30 blocks to about 1e-2 of the largest logit.
TOL_REL_GPTQ = 3e-2
TOL_PPL_FAKE_QUANT, TOL_PPL_GPTQ = 1e-4, 1e-2  # relative PPL difference, the same reasoning


def gptq_loader_available():
    has = lambda m: importlib.util.find_spec(m) is not None  # noqa: E731
    return has("optimum") and (has("gptqmodel") or has("auto_gptq"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    peer.add_common_args(ap)
    ap.add_argument("--model", default="smollm2-135m", help="model to quantize (.gguf, HF dir or known name)")
    ap.add_argument("--export", default=None, help="check this existing export directory instead of quantizing")
    ap.add_argument("--packing", choices=["fake-quant", "gptq"], default="fake-quant")
    ap.add_argument("--method", default="rtn", help="lowbit quantize --method (rtn needs no calibration)")
    ap.add_argument("--format", default="int4", help="lowbit quantize --format")
    ap.add_argument("--group", type=int, default=64, help="lowbit quantize --group (int grids)")
    ap.add_argument("--tol-rel", type=float, default=None,
                    help=f"max |Δlogit| / max |logit| allowed (default {TOL_REL_FAKE_QUANT} fake-quant, {TOL_REL_GPTQ} gptq)")
    ap.set_defaults(tol_ppl=None)  # per packing, below
    args = ap.parse_args()
    peer.check_args(ap, args)
    if args.export is not None:
        if not peer.is_hf_dir(args.export):
            ap.error(f"--export {args.export}: no config.json there (not an HF checkpoint directory)")
        with open(os.path.join(args.export, "config.json")) as f:  # a GPTQ export says so in its config
            args.packing = "gptq" if "quantization_config" in json.load(f) else "fake-quant"
    gptq = args.packing == "gptq"
    if args.tol_rel is None:
        args.tol_rel = TOL_REL_GPTQ if gptq else TOL_REL_FAKE_QUANT
    if args.tol_ppl is None:
        args.tol_ppl = TOL_PPL_GPTQ if gptq else TOL_PPL_FAKE_QUANT
    if gptq and not gptq_loader_available():
        print("SKIP: transformers loads GPTQ checkpoints only through optimum + gptqmodel/auto-gptq, "
              "which are not installed here")
        return 0
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:  # before the long quantize
        sys.exit(f"check_fakequant_transformers: {' and '.join(missing)} not installed (see the header: a GPU host or a peer venv)")

    export = args.export
    if export is None:
        args.tokenizer = args.tokenizer or args.model  # the export holds no tokenizer: eval reads the source's
        export = os.path.join(args.tmp, "export")
        os.makedirs(args.tmp, exist_ok=True)
        grid = ["--format", args.format] + (["--group", str(args.group)] if args.format.startswith("int") else [])
        peer.run([args.lowbit, "quantize", "--model", args.model, "--method", args.method, *grid, "--out", export,
                  "--packing", args.packing, "--quiet"])
    r = peer.compare_with_transformers(args, export)
    rel = r["max_abs"] / r["max_logit"]
    print(f"{args.packing} export {export}: max|Δlogit|/max|logit| {rel:.3e} (tolerance {args.tol_rel:.0e}), "
          f"top-1 agreement {100.0 * r['top1']:.3f}%, PPL transformers/lowbit - 1 = {r['ppl_rel']:.2e} "
          f"(tolerance {args.tol_ppl:.0e})")
    ok = rel <= args.tol_rel and r["ppl_rel"] <= args.tol_ppl
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
