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

# analyze detect: the pattern, and the INT8 tensor-core window census (adahop/int8_window.h). Two channels 10 binades
# above the rest put the chunks holding them outside in every row tile as A (K = 768: chunks 0 and 1 of 3, 4 row
# tiles: 8 of 12), and their two 128-column tiles outside in both chunks as B (K = 512: 4 of 12); 60× (~6 binades)
# puts the same chunks out of one INT8 plane, most of them into two; Gaussian data none.
rng = np.random.default_rng(0)
act = rng.standard_normal((512, 768)).astype(np.float32)
act60 = act.copy()
act[:, [5, 300]] *= 1024
act60[:, [5, 300]] *= 60
for name, m, want_a, want_b, pattern, key in (
        ("cli_act.npy", act, 8, 4, "col", ("outside",)),
        ("cli_act60.npy", act60, 8, 4, "col", ("outside", "two_planes")),
        ("cli_gauss.npy", rng.standard_normal((512, 768)).astype(np.float32), 0, 0, "none", ("outside", "two_planes"))):
    np.save(c.path(name), m)
    rep = json.loads(c.lowbit("analyze", "detect", "--json", c.path(name)).stdout)
    w = rep["int8_window"]
    count = lambda j: sum(j[k] for k in key)
    c.check(f"analyze detect {name}: pattern {pattern}", rep["pattern"] == pattern, rep["pattern"])
    c.check(f"analyze detect {name}: {want_a} and {want_b} of 12 (tile, chunk) pairs {' or '.join(key)} as A and as B, plain and IHT",
            all(count(w["as_a"][s]) == want_a and count(w["as_b"][s]) == want_b and
                w["as_a"][s]["tile_chunks"] == 12 == w["as_b"][s]["tile_chunks"] for s in ("plain", "iht")), w)
np.save(odd, np.ones((40, 64), np.float32))  # K = 40 rows as B: not a multiple of 32
w = json.loads(c.lowbit("analyze", "detect", "--json", odd).stdout)["int8_window"]
c.check("analyze detect: no census where K is not a multiple of 32", w["as_b"] is None and w["as_a"]["plain"]["outside"] == 0, w)

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
    # --acts without --weights: the activations per token over the weights as loaded (W4A4 of a quantized file).
    r = c.lowbit(*base, "--acts", "int4", "--json", expect_rc=None)
    rep = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("eval --acts int4 without --weights quantizes only the activations",
            rep.get("linears", "").startswith("weights as loaded, activations int4") and
            rep.get("linear_weight_bits") == 32 and len(runs) == 2 and abs(rep.get("ppl", 0) / runs[0]["ppl"] - 1) > 1e-3,
            (r.returncode, rep.get("linears"), rep.get("ppl"), r.stderr[-300:]))
    # --kv: the KV cache quantized per token and KV head (W4A4KV4 with --acts 4); not with --adahop.
    r = c.lowbit(*base, "--acts", "int4", "--kv", "int4", "--json", expect_rc=None)
    kv = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("eval --acts int4 --kv int4 reports the KV cache and moves the perplexity",
            "KV cache int4" in kv.get("linears", "") and abs(kv.get("ppl", 0) / rep.get("ppl", 1) - 1) > 1e-4,
            (r.returncode, kv.get("linears"), kv.get("ppl"), rep.get("ppl"), r.stderr[-300:]))
    r = c.lowbit(*base, "--kv", "int4", "--device", "cuda", expect_rc=None)
    c.check("eval --kv runs on --device cuda too (without a GPU: refused for the device, not for --kv)",
            r.returncode == 0 or ("cuda" in r.stderr.lower() and "--kv" not in r.stderr), (r.returncode, r.stderr[-300:]))
    r = c.lowbit(*base, "--kv", "int3x", expect_rc=None)
    c.check("eval --kv with an unknown format exits 2", r.returncode == 2 and "int3x" in r.stderr, (r.returncode, r.stderr))
    r = c.lowbit(*base, "--adahop", "hadamard", "--acts", "int8", expect_rc=None)
    c.check("eval --adahop with --acts exits 2", r.returncode == 2 and "--adahop" in r.stderr, (r.returncode, r.stderr))
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
            (["--format", "int4", "--group", "128", "--out", c.path("x")], 2, "multiple", "a group that does not divide 576"),
            (["--format", "q4_0", "--act-bits", "9"], 2, "2 to 8", "--act-bits 9"),
            (["--method", "gptq", "--format", "q4_0", "--act-order-row"], 2, "two-sided", "--act-order-row with gptq"),
            (["--method", "rtn", "--format", "q4_0", "--act-order-row"], 2, "two-sided", "--act-order-row with rtn"),
            (["--method", "turboboa", "--format", "q4_0", "--act-order"], 2, "F2", "--act-order with TurboBoA's F2"),
            (["--method", "rtn", "--format", "q4_0", "--true-sequential"], 2, "rtn", "--true-sequential with rtn"),
            (["--method", "boa", "--format", "q4_0", "--static-groups", "off"], 2, "adaptive", "--static-groups off with boa"),
            (["--method", "gptq", "--format", "q4_0", "--static-groups", "off", "--act-order"], 2, "--act-order",
             "--static-groups off with --act-order"),
            (["--method", "gptq", "--format", "q4_0", "--static-groups", "maybe"], 2, "on | off", "--static-groups maybe")]:
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
    r = c.lowbit("eval", "--model", out, *base[3:], "--acts", "int8", "--json", expect_rc=None)
    w8a8 = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("the RTN q8_0 GGUF with --acts int8 (its weights as loaded) is within 5 % of its own perplexity, not equal",
            r.returncode == 0 and rep.get("ppl") and 0 < abs(w8a8.get("ppl", 0) / rep["ppl"] - 1) < 0.05,
            (r.returncode, w8a8.get("ppl"), rep.get("ppl"), r.stderr[-300:]))
    # --act-bits: recorded in the file and applied by eval (RTN quantizes no calibration activations, so the
    # weights are the ones above: with the recorded int8 activations eval gives the --acts int8 number, and
    # --acts none gives the plain file's)
    out_a8 = c.path("cli_rtn_q8_0_a8.gguf")
    r = c.lowbit(*q, "--method", "rtn", "--format", "q8_0", "--act-bits", "8", "--out", out_a8, expect_rc=None)
    c.check("quantize rtn q8_0 --act-bits 8 writes a GGUF", r.returncode == 0 and os.path.exists(out_a8), (r.returncode, r.stderr[-300:]))
    r = c.lowbit("eval", "--model", out_a8, *base[3:], "--json", expect_rc=None)
    recorded = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("eval applies the recorded int8 activations (the --acts int8 perplexity, and says so)",
            r.returncode == 0 and "as recorded" in r.stderr and recorded.get("ppl") == w8a8.get("ppl"),
            (r.returncode, recorded.get("ppl"), w8a8.get("ppl"), r.stderr[-300:]))
    r = c.lowbit("eval", "--model", out_a8, *base[3:], "--acts", "none", "--json", expect_rc=None)
    plain = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check("eval --acts none evaluates the same file without them", r.returncode == 0 and plain.get("ppl") == rep.get("ppl"),
            (r.returncode, plain.get("ppl"), rep.get("ppl")))
    r = c.lowbit("info", "--model", out, "--json", expect_rc=None)
    types = json.loads(r.stdout).get("tensor_types", {}) if r.returncode == 0 else {}
    c.check("its 210 projections are Q8_0 (and the Q8_0 token embedding, copied)", types.get("Q8_0", {}).get("tensors") == 211, types)
else:
    print("SKIP: eval --weights, --protocol and quantize checks (smollm2-135m not fetched: scripts/fetch_model.sh)")

# tokenize-corpus: GPT-2's own tokenizer from the shared data; the shards are read back here from the
# documented layout (docs/corpus.md) and decoded with GPT-2's encoder.json, so every document must come back
# byte for byte, once, in one split. Then the refusals, none of which may leave a shard behind.
here = os.path.dirname(os.path.abspath(__file__))
gpt2_dirs = [os.path.join(os.environ.get("LOWBIT_SHARED_DATA", ""), "tokenizers", "gpt2")]
d = here
while os.path.dirname(d) != d:
    gpt2_dirs.append(os.path.join(d, "shared", "data", "tokenizers", "gpt2"))
    d = os.path.dirname(d)
gpt2 = next((g for g in gpt2_dirs if os.path.exists(os.path.join(g, "encoder.json"))), None)
if gpt2:
    import shutil
    import struct

    def fnv1a64(data):
        h = 0xcbf29ce484222325
        for b in data:
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        return h

    def read_shard(path):
        raw = open(path, "rb").read()
        magic, version, width, vocab, sep, n, docs, payload_sum = struct.unpack_from("<8sIIIiQQQ", raw, 0)
        tokenizer = raw[48:112].rstrip(b"\0").decode()
        ok = (magic == b"LBTOK001" and version == 1 and width == 2 and len(raw) == 128 + 2 * n
              and struct.unpack_from("<Q", raw, 112)[0] == fnv1a64(raw[:112]) and fnv1a64(raw[128:]) == payload_sum)
        return ok, np.frombuffer(raw[128:], "<u2"), sep, docs, tokenizer

    byte_decoder = {ch: b for b, ch in enumerate(byte_chars())}
    encoder = json.load(open(os.path.join(gpt2, "encoder.json"), encoding="utf-8"))
    decoder = {i: t for t, i in encoder.items()}

    def gpt2_decode(ids):
        return bytes(byte_decoder[ch] for i in ids for ch in decoder[int(i)]).decode("utf-8")

    src = c.path("tc_src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(os.path.join(src, "sub"))
    docs = [f"Document {i}: the quick brown fox jumps over the lazy dog, {i * 7} times.\nIt ends here.\n" for i in range(60)]
    docs.append("Ünïcödé — “quotes” and 日本語.\n")
    for i, t in enumerate(docs[:10]):
        open(os.path.join(src, f"doc_{i:02d}.txt"), "w", encoding="utf-8").write(t)
    with open(os.path.join(src, "sub", "rest.jsonl"), "w", encoding="utf-8") as f:
        for t in docs[10:]:
            f.write(json.dumps({"text": t, "source": "check_cli"}) + "\n\n")
    open(os.path.join(src, "ignored.md"), "w").write("not read: neither .txt nor .jsonl\n")
    out = c.path("tc_out")
    shutil.rmtree(out, ignore_errors=True)
    r = c.lowbit("tokenize-corpus", "--tokenizer", "gpt2", "--input", src, "--out", out, "--val-fraction", "0.2",
                 "--shard-tokens", "500", "--seed", "3", "--json", expect_rc=None)
    c.check("tokenize-corpus exits 0", r.returncode == 0, r.stderr[-400:])
    if r.returncode == 0:
        rep = json.loads(r.stdout)
        man = json.load(open(os.path.join(out, "manifest.json")))
        c.check("tokenize-corpus --json agrees with the manifest",
                rep["tokens"] == sum(e["tokens"] for s in man["splits"].values() for e in s), (rep, man["splits"]))
        got = {}
        for split, entries in man["splits"].items():
            texts = []
            for e in entries:
                ok, ids, sep, ndocs, tokenizer = read_shard(os.path.join(out, e["file"]))
                c.check(f"{e['file']}: header, size and checksums as documented", ok)
                c.check(f"{e['file']}: the manifest's tokens, documents and checksum",
                        (len(ids), ndocs, tokenizer) == (e["tokens"], e["documents"], man["tokenizer"])
                        and e["checksum"] == f"{fnv1a64(ids.tobytes()):016x}", e)
                c.check(f"{e['file']}: documents end with <|endoftext|>", sep == 50256 and ids[-1] == 50256
                        and int((ids == 50256).sum()) == ndocs)
                cut = np.flatnonzero(ids == sep)
                texts += [gpt2_decode(ids[a + 1 if k else 0:b]) for k, (a, b) in enumerate(zip(np.r_[-1, cut[:-1]], cut))]
            got[split] = texts
        c.check("every document comes back byte for byte, once, in input order within its split",
                sorted(got["train"] + got.get("val", [])) == sorted(docs)
                and got["train"] == [t for t in docs if t in got["train"]], {k: len(v) for k, v in got.items()})
        c.check("--val-fraction 0.2 puts some documents in val and most in train",
                0 < len(got.get("val", [])) < len(got["train"]), {k: len(v) for k, v in got.items()})
        c.check("--shard-tokens 500 starts new train shards", len(man["splits"]["train"]) >= 3, man["splits"]["train"])
        again = c.path("tc_again")
        shutil.rmtree(again, ignore_errors=True)
        c.lowbit("tokenize-corpus", "--tokenizer", "gpt2", "--input", src, "--out", again, "--val-fraction", "0.2",
                 "--shard-tokens", "500", "--seed", "3", "--threads", "1")
        c.check("a re-run (one thread) writes the same shards",
                all(open(os.path.join(out, e["file"]), "rb").read() == open(os.path.join(again, e["file"]), "rb").read()
                    for s in man["splits"].values() for e in s))
        r = c.lowbit("tokenize-corpus", "--tokenizer", "gpt2", "--input", src, "--out", out, expect_rc=None)
        c.check("tokenize-corpus into an existing set exits 2", r.returncode == 2 and "manifest.json" in r.stderr, r.stderr)
        # train on those shards: two steps of the tiny preset (4 sequences) in micro-batches of 2, and a refusal
        run = c.path("train_run")
        shutil.rmtree(run, ignore_errors=True)
        r = c.lowbit("train", "--config", "tiny", "--data", out, "--out", run, "--steps", "2", "--grad-accum", "2",
                     "--val-windows", "2", "--no-progress", expect_rc=None)
        c.check("train --grad-accum 2 exits 0", r.returncode == 0, r.stderr[-400:])
        c.check("train --grad-accum 2 says how the steps are split", "(2 micro-batches of 2)" in r.stderr, r.stderr[:400])
        if r.returncode == 0:
            rep = json.load(open(os.path.join(run, "report.json")))
            c.check("the report records grad_accum", rep["config"]["grad_accum"] == 2 and rep["config"]["batch_size"] == 4,
                    rep["config"])
            # analyze model on the trained model: every projection's three slots, the plan file, and refusals
            text = c.path("am_text.txt")
            open(text, "w").write(" ".join(open(os.path.join(src, f)).read() for f in sorted(os.listdir(src))
                                           if f.endswith(".txt")) * 4)
            plan = c.path("am_plan.json")
            r = c.lowbit("analyze", "model", "--model", os.path.join(run, "model.gguf"), "--text", text, "--windows", "2",
                         "--ctx", "32", "--batches", "2", "--json", "--plan-out", plan, "--threads", "1", expect_rc=None)
            c.check("analyze model on the trained tiny model exits 0", r.returncode == 0, r.stderr[-400:])
            if r.returncode == 0:
                am = json.loads(r.stdout)
                slots = [s for p in am["projections"] for s in p["slots"].values()]
                c.check("analyze model: 2 layers x 7 projections x 3 slots, each with its error per strategy and a census",
                        len(am["projections"]) == 14 and len(slots) == 42
                        and all(s["relative_error"]["plain"] > 0 and s["int8_window"]["plain"] is not None for s in slots),
                        (len(am["projections"]), slots[:1]))
                c.check("analyze model: the batch's loss is finite", 0 < am["loss"] < 20, am["loss"])
                cons = am["wgrad_consistency"]["by_projection"]
                c.check("analyze model --batches 2: wgrad's error consistency per projection and strategy, within [0, sqrt 2]",
                        am["batches"] == 2 and am["windows"] == 4 and len(cons) == 7
                        and all(0 <= v["consistency"] <= 2 ** 0.5 + 1e-6 for p in cons.values() for v in p.values()), cons)
                saved = json.load(open(plan))
                c.check("analyze model --plan-out writes the report's plan",
                        saved == am["plan"] and len(saved["per_layer_modes"]) == 14, list(saved)[:4])
            for args, rc, needle, what in [
                    (["--ctx", "100000"], 2, "context length", "a window longer than the model's context"),
                    (["--windows", "0"], 2, "--windows", "no windows"),
                    (["--table", c.path("no_such_table.json")], 3, "no_such_table.json", "a missing plan table")]:
                r = c.lowbit("analyze", "model", "--model", os.path.join(run, "model.gguf"), "--text", text, *args,
                             expect_rc=None)
                c.check(f"analyze model with {what} exits {rc} and says why", r.returncode == rc and needle in r.stderr,
                        (r.returncode, r.stderr[-300:]))
        refused = c.path("train_refused")
        shutil.rmtree(refused, ignore_errors=True)
        r = c.lowbit("train", "--config", "tiny", "--data", out, "--out", refused, "--steps", "2", "--grad-accum", "3",
                     expect_rc=None)
        c.check("train --grad-accum 3 with 4 sequences exits 2", r.returncode == 2 and "grad_accum 3" in r.stderr
                and "batch_size 4" in r.stderr, (r.returncode, r.stderr))
        c.check("a refused train leaves no run directory", not os.path.exists(refused))
        for args, needle, what in [
                (["--mx-gemm", "tensor-cores"], "runs on the CUDA engine only", "tensor cores on the CPU"),
                (["--mx-gemm", "int4"], "--mx-gemm int4: emulated, tensor-cores or tensor-cores-columns", "an unknown --mx-gemm"),
                (["--mx-gemm", "tensor-cores-columns"], "runs on the CUDA engine only", "column bases on the CPU"),
                (["--probe-batch", "test"], "--probe-batch", "an unknown probe batch"),
                (["--mx-census"], "needs --mx-gemm tensor-cores", "a census without the tensor cores"),
                (["--precision", "mxfp4", "--mx-slots", "fwd,bwd"], "slot 'bwd'", "an unknown slot"),
                (["--precision", "mxfp4", "--mx-projections", "attn,mlp"], "projection 'mlp'", "an unknown projection"),
                (["--precision", "mxfp4", "--mx-layers", "1-5"], "not all blocks of this model (0-1)", "a layer beyond the model"),
                (["--precision", "mxfp4", "--mx-layers", "a"], "layer 'a'", "a malformed layer list"),
                (["--precision", "mxfp4", "--mx-scale-rule", "ceil"], "MX scale rule 'ceil'", "an unknown scale rule"),
                (["--mx-scale-rule", "rceil"], "recipe bf16 quantizes no GEMM", "a scale rule on bf16"),
                (["--mx-slots", "fwd"], "recipe bf16 quantizes no GEMM", "a slot mask on bf16")]:
            r = c.lowbit("train", "--config", "tiny", "--data", out, "--out", refused, "--steps", "2", *args,
                         expect_rc=None)
            c.check(f"train refuses {what} (exit 2, says why, no run directory)", r.returncode == 2
                    and needle in r.stderr and not os.path.exists(refused), (r.returncode, r.stderr[-300:]))
        # masks: MXFP4 only in the FFN weight gradients; recorded in the run, named in the log, kept by --resume
        masked = c.path("train_masked")
        shutil.rmtree(masked, ignore_errors=True)
        r = c.lowbit("train", "--config", "tiny", "--data", out, "--out", masked, "--steps", "2", "--stop-at", "1",
                     "--precision", "mxfp4", "--mx-slots", "wgrad", "--mx-projections", "ffn", "--mx-layers", "1",
                     "--val-windows", "2", "--no-progress", expect_rc=None)
        c.check("train --mx-slots wgrad --mx-projections ffn --mx-layers 1 exits 0 and names the masks",
                r.returncode == 0 and "mxfp4 (MXFP4 only in slots wgrad, projections gate,up,down, layers 1)" in r.stderr,
                r.stderr[-400:])
        if r.returncode == 0:
            rec = json.load(open(os.path.join(masked, "config.json")))["recipe"]
            c.check("config.json records the masks", rec.get("mx_slots") == "wgrad"
                    and rec.get("mx_projections") == "gate,up,down" and rec.get("mx_layers") == "1", rec)
            r = c.lowbit("train", "--config", "tiny", "--data", out, "--out", masked, "--steps", "2", "--resume",
                         "--precision", "mxfp4", "--mx-slots", "fwd", "--mx-projections", "ffn", "--mx-layers", "1",
                         "--val-windows", "2",
                         "--no-progress", expect_rc=None)
            c.check("--resume with other masks exits 2 naming mx_slots", r.returncode == 2 and "mx_slots" in r.stderr,
                    (r.returncode, r.stderr[-300:]))
            r = c.lowbit("train", "--config", "tiny", "--data", out, "--out", masked, "--steps", "2", "--resume",
                         "--precision", "mxfp4", "--mx-slots", "wgrad", "--mx-projections", "ffn", "--mx-layers", "1",
                         "--val-windows", "2", "--no-progress", expect_rc=None)
            c.check("--resume with the same masks finishes the run", r.returncode == 0
                    and os.path.exists(os.path.join(masked, "report.json")), r.stderr[-300:])
    empty = c.path("tc_empty")
    os.makedirs(empty, exist_ok=True)
    open(os.path.join(empty, "empty.txt"), "w").close()
    bad = os.path.join(src, "sub", "zz_bad.jsonl")
    open(bad, "w").write('{"text": "fine"}\n{"txt": "no text key"}\n')
    for args, rc, needle, what in [
            (["--input", src], 3, "zz_bad.jsonl:2", "a JSON-lines document without \"text\""),
            (["--input", c.path("tc_nothing_here")], 3, "no such file", "a missing input"),
            (["--input", empty], 3, "no documents", "only empty files"),
            (["--input", os.path.join(src, "doc_00.txt"), "--shard-tokens", "lots"], 2, "--shard-tokens", "a bad shard size"),
            (["--input", os.path.join(src, "doc_00.txt"), "--val-fraction", "1"], 2, "--val-fraction", "a val fraction of 1"),
            (["--input", os.path.join(src, "doc_00.txt"), "--separator", "<nosuch>"], 2, "<nosuch>", "an unknown separator")]:
        failed = c.path("tc_failed")
        shutil.rmtree(failed, ignore_errors=True)
        r = c.lowbit("tokenize-corpus", "--tokenizer", "gpt2", *args, "--out", failed, expect_rc=None)
        c.check(f"tokenize-corpus with {what} exits {rc}", r.returncode == rc and needle in r.stderr, (r.returncode, r.stderr))
        c.check(f"tokenize-corpus with {what} leaves no shard", not os.path.isdir(failed) or not os.listdir(failed),
                os.listdir(failed) if os.path.isdir(failed) else None)
    r = c.lowbit("tokenize-corpus", "--input", src, "--out", c.path("tc_failed"), expect_rc=None)
    c.check("tokenize-corpus without --model or --tokenizer exits 2", r.returncode == 2 and "--tokenizer" in r.stderr, r.stderr)
else:
    print("SKIP: tokenize-corpus checks (GPT-2's tokenizer files not found: set LOWBIT_SHARED_DATA)")

c.finish()
