"""check_cli.py — the `lowbit` command line as a user meets it: --help everywhere, exit codes
(0 ok, 2 usage, 3 bad input), clear messages, valid --json, and no partial output files on errors."""
import json
import os

import numpy as np

from crosscheck_common import Checker

c = Checker(__doc__)

for argv in (["--help"], ["formats", "--help"], ["formats", "roundtrip", "--help"], ["formats", "list", "--help"],
             ["formats", "pack", "--help"], ["formats", "cast", "--help"], ["formats", "codes", "--help"],
             ["hadamard", "--help"], ["demo", "--help"]):
    r = c.lowbit(*argv, expect_rc=None)
    c.check(f"{' '.join(argv)} exits 0", r.returncode == 0, r.stderr)
    c.check(f"{' '.join(argv)} prints usage", "Usage" in r.stdout or "usage" in r.stdout.lower(), r.stdout[:200])

r = c.lowbit("formats", "list", "--json")
names = [f["name"] for f in json.loads(r.stdout)]
c.check("formats list --json names every format", {"mxfp4", "nvfp4", "int4", "q4_0", "mxint8"} <= set(names), names)

x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
good = c.path("cli_good.npy")
np.save(good, x)
out = c.path("cli_out.npy")
r = c.lowbit("formats", "roundtrip", "--format", "mxfp4", "--json", good, out)
rep = json.loads(r.stdout)
c.check("roundtrip --json has the error statistics", {"mse", "sqnr_db", "bits_per_element"} <= set(rep), rep)
c.check("roundtrip writes a float32 .npy of the same shape", np.load(out).shape == (4, 64))

# usage errors → 2
r = c.lowbit("formats", "roundtrip", "--format", "nosuch", good, out, expect_rc=None)
c.check("unknown format exits 2", r.returncode == 2, r.returncode)
c.check("unknown format lists the known ones", "mxfp4" in r.stderr, r.stderr)
r = c.lowbit("formats", "roundtrip", "--format", "q4_0", "--rounding", "stochastic", good, out, expect_rc=None)
c.check("rounding on a GGUF format exits 2", r.returncode == 2, r.stderr)
r = c.lowbit("formats", "roundtrip", good, expect_rc=None)
c.check("missing arguments exit 2", r.returncode == 2, r.returncode)

# input errors → 3, no output left behind
for label, content in (("truncated", open(good, "rb").read()[:-7]), ("garbage", b"not an npy file at all")):
    bad, bad_out = c.path(f"cli_{label}.npy"), c.path(f"cli_{label}_out.npy")
    open(bad, "wb").write(content)
    if os.path.exists(bad_out):
        os.remove(bad_out)
    r = c.lowbit("formats", "roundtrip", "--format", "mxfp4", bad, bad_out, expect_rc=None)
    c.check(f"{label} input exits 3", r.returncode == 3, (r.returncode, r.stderr))
    c.check(f"{label} input names the file", bad in r.stderr, r.stderr)
    c.check(f"{label} input leaves no output", not os.path.exists(bad_out))
    c.check(f"{label} input leaves no temporary", not any(f.startswith(os.path.basename(bad_out) + ".tmp")
                                                          for f in os.listdir(c.args.tmp)))
odd = c.path("cli_odd.npy")
np.save(odd, np.ones((3, 48), np.float32))
r = c.lowbit("formats", "roundtrip", "--format", "mxfp4", odd, out, expect_rc=None)
c.check("non-divisible shape exits 3", r.returncode == 3, r.returncode)
c.check("non-divisible shape explains", "multiple of the block size 32" in r.stderr, r.stderr)
r = c.lowbit("formats", "roundtrip", "--format", "mxfp4", c.path("does_not_exist.npy"), out, expect_rc=None)
c.check("missing file exits 3", r.returncode == 3 and "cannot open" in r.stderr, r.stderr)

# hadamard: unsupported size gets advice
np.save(odd, np.ones((2, 23 * 16), np.float32))  # 368 = 23·16: no Hadamard order
r = c.lowbit("hadamard", odd, out, expect_rc=None)
c.check("hadamard of 368 columns exits 3", r.returncode == 3, (r.returncode, r.stderr))
c.check("hadamard suggests a block-diagonal transform", "block" in r.stderr, r.stderr)

# tokenize: an empty STRING is an empty token list (just BOS with BOS on); no text at all is a usage error.
# A tiny byte-level BPE tokenizer.json: GPT-2's byte characters, "ab", and "<s>" added by the post-processor.
def byte_chars():
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    extra = iter(range(0x100, 0x200))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


vocab = {ch: i for i, ch in enumerate(byte_chars())}
vocab.update({"ab": 256, "<s>": 257})
tok_json = c.path("cli_tokenizer.json")
with open(tok_json, "w") as f:
    json.dump({"added_tokens": [{"id": 257, "content": "<s>", "special": True}],
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
               "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}]},
               "model": {"type": "BPE", "vocab": vocab, "merges": ["a b"]}}, f)
r = c.lowbit("tokenize", "--model", tok_json, "--bos", "off", "ab")
c.check("tokenize of 'ab' merges", r.stdout == "256\n", repr(r.stdout))
r = c.lowbit("tokenize", "--model", tok_json, "--bos", "off", "", expect_rc=None)
c.check("tokenize '' exits 0", r.returncode == 0, (r.returncode, r.stderr))
c.check("tokenize '' prints an empty token list", r.stdout == "\n" and "0 tokens" in r.stderr, (r.stdout, r.stderr))
r = c.lowbit("tokenize", "--model", tok_json, "--bos", "off", "--json", "", expect_rc=None)
c.check("tokenize '' --json has no ids", r.returncode == 0 and json.loads(r.stdout)["ids"] == [] and
        json.loads(r.stdout)["n_tokens"] == 0, (r.stdout, r.stderr))
for bos in ("on", "auto"):  # the post-processor adds <s>, so auto means on here
    r = c.lowbit("tokenize", "--model", tok_json, "--bos", bos, "", expect_rc=None)
    c.check(f"tokenize '' with --bos {bos} prints just BOS", r.returncode == 0 and r.stdout == "257\n", (r.stdout, r.stderr))
    r = c.lowbit("tokenize", "--model", tok_json, "--bos", bos, "--json", "", expect_rc=None)
    c.check(f"tokenize '' --json with --bos {bos} has just BOS", r.returncode == 0 and json.loads(r.stdout)["ids"] == [257],
            (r.stdout, r.stderr))
empty_file = c.path("cli_empty.txt")
open(empty_file, "w").close()
r = c.lowbit("tokenize", "--model", tok_json, "--bos", "off", "--text", empty_file, expect_rc=None)
c.check("tokenize of an empty --text file prints an empty token list", r.returncode == 0 and r.stdout == "\n",
        (r.stdout, r.stderr))
r = c.lowbit("tokenize", "--model", tok_json, expect_rc=None)
c.check("tokenize without text exits 2", r.returncode == 2 and "--text FILE or a STRING" in r.stderr, (r.returncode, r.stderr))
r = c.lowbit("tokenize", "--model", tok_json, "--text", empty_file, "", expect_rc=None)
c.check("tokenize with --text and a STRING exits 2", r.returncode == 2, (r.returncode, r.stderr))

# eval through the model's Linear seam (the real SmolLM2 model, when scripts/fetch_model.sh has fetched it):
# a --weights list gives one table, a single format reports its linears and bits, --adahop runs, and bad
# combinations are refused before anything long starts.
if c.lowbit("info", "--model", "smollm2-135m", expect_rc=None).returncode == 0:
    text = c.path("cli_eval.txt")
    open(text, "w").write("The state of the union is strong, and the work of the people goes on. " * 40)
    base = ["eval", "--model", "smollm2-135m", "--text", text, "--ctx", "64", "--chunks", "2", "--no-progress"]
    r = c.lowbit(*base, "--weights", "none,q8_0", "--json", expect_rc=None)
    rep = json.loads(r.stdout) if r.returncode == 0 else {}
    runs = rep.get("runs", [])
    c.check("eval --weights none,q8_0 gives two runs", r.returncode == 0 and [x["weights"] for x in runs] == ["none", "q8_0"],
            (r.returncode, r.stderr[-300:]))
    if len(runs) == 2:
        c.check("eval --weights: 32 and 8.5 bits per weight", runs[0]["linear_weight_bits"] == 32 and
                runs[1]["linear_weight_bits"] == 8.5, runs)
        c.check("eval --weights: q8_0 stays within 5 % of the unquantized perplexity",
                abs(runs[1]["ppl"] / runs[0]["ppl"] - 1) < 0.05, runs)
    r = c.lowbit(*base, "--weights", "q4_0", "--acts", "int8", "--json", expect_rc=None)
    rep = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("eval --weights q4_0 --acts int8 reports its linears", "q4_0" in rep.get("linears", "") and
            "int8" in rep.get("linears", "") and rep.get("linear_weight_bits") == 4.5, (r.returncode, rep, r.stderr[-300:]))
    r = c.lowbit(*base, "--adahop", "hadamard", "--json", expect_rc=None)
    c.check("eval --adahop hadamard runs every projection through lp_matmul", r.returncode == 0 and
            "IHT" in json.loads(r.stdout).get("linears", ""), (r.returncode, r.stderr[-300:]))
    r = c.lowbit(*base, "--acts", "int8", expect_rc=None)
    c.check("eval --acts without --weights exits 2", r.returncode == 2, (r.returncode, r.stderr))
    r = c.lowbit(*base, "--weights", "none,int4", "--group", "128", expect_rc=None)
    c.check("eval --weights int4 --group 128 on 576 columns exits 3 before evaluating",
            r.returncode == 3 and "multiple of the block size 128" in r.stderr and "eval: dense" not in r.stderr,
            (r.returncode, r.stderr))
    # --protocol hf (the GPTQ papers'): every token of a window after its first is scored, default ctx 2048.
    r = c.lowbit(*base, "--protocol", "hf", "--json", expect_rc=None)
    rep = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("eval --protocol hf scores 63 tokens in each of 2 windows of 64", rep.get("protocol") == "hf" and
            rep.get("n_chunks") == 2 and rep.get("n_scored") == 2 * 63 and rep.get("ppl", 0) > 1, (r.returncode, rep, r.stderr[-300:]))
    r = c.lowbit("eval", "--model", "smollm2-135m", "--text", text, "--protocol", "hf", "--no-progress", expect_rc=None)
    c.check("eval --protocol hf defaults to windows of 2048", r.returncode == 3 and "context of 2048" in r.stderr,
            (r.returncode, r.stderr[-300:]))
    r = c.lowbit(*base, "--protocol", "hf", "--save-logits", c.path("cli_hf.kld"), expect_rc=None)
    c.check("eval --protocol hf --save-logits exits 2", r.returncode == 2 and "--protocol llama" in r.stderr,
            (r.returncode, r.stderr[-300:]))
    # quantize: refusals before any work, then RTN into GGUF read back by eval (the calibrated methods and the
    # safetensors path are covered by test_ptq_* and check_gptq_safetensors).
    q = ["quantize", "--model", "smollm2-135m", "--quiet"]
    for args, rc, needle, what in [
            ([], 2, "--format", "neither --format nor --mix"),
            (["--format", "q4_0", "--mix", "q4_k_m"], 2, "--mix", "both --format and --mix"),
            (["--format", "int4", "--out", c.path("x.gguf")], 2, "Hugging Face", "an int grid into a .gguf"),
            (["--method", "awq", "--format", "q4_0"], 2, "rtn | gptq", "an unknown method"),
            (["--features", "f4", "--format", "q4_0"], 2, "f4", "an unknown feature"),
            (["--format", "int4", "--group", "128", "--out", c.path("x")], 2, "multiple", "a group that does not divide 576")]:
        extra = [] if "--out" in args else ["--out", c.path("x.gguf")]
        r = c.lowbit(*q, *args, *extra, expect_rc=None)
        c.check(f"quantize with {what} exits {rc}", r.returncode == rc and needle in r.stderr, (r.returncode, r.stderr[-300:]))
    out = c.path("cli_rtn_q8_0.gguf")
    r = c.lowbit(*q, "--method", "rtn", "--format", "q8_0", "--out", out, expect_rc=None)
    c.check("quantize rtn q8_0 writes a GGUF", r.returncode == 0 and os.path.exists(out), (r.returncode, r.stderr[-300:]))
    r = c.lowbit(*base, "--json", expect_rc=None)
    ppl_base = json.loads(r.stdout)["ppl"] if r.returncode == 0 else 0
    r = c.lowbit("eval", "--model", out, *base[3:], "--json", expect_rc=None)
    rep = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("the RTN q8_0 GGUF evaluates within 5 % of the unquantized perplexity",
            r.returncode == 0 and abs(rep.get("ppl", 0) / ppl_base - 1) < 0.05, (r.returncode, rep.get("ppl"), ppl_base))
    r = c.lowbit("info", "--model", out, "--json", expect_rc=None)
    types = json.loads(r.stdout).get("tensor_types", {}) if r.returncode == 0 else {}
    c.check("its 210 projections are Q8_0 (and the Q8_0 token embedding, copied)", types.get("Q8_0", {}).get("tensors") == 211, types)
else:
    print("SKIP: eval --weights, --protocol and quantize checks (smollm2-135m not fetched: scripts/fetch_model.sh)")

c.finish()
