"""check_tokenizer_hf.py — lowbit's tokenizer against Hugging Face `tokenizers` on the SOTU test split
(addresses of 2011–2021), token for token, on every vocabulary at hand:
  * GPT-2 from encoder.json + vocab.bpe (HF: BPE + ByteLevel); ours loaded from the same two files, and
    again from the tokenizer.json that HF saves (merges written as [a, b] pairs);
  * Llama 3 (llama.cpp's llama-bpe vocabulary GGUF; HF: Split(llama3 regex) + ByteLevel, ignore_merges);
  * SmolLM2-135M-Instruct when its GGUF is in the lowbit cache (scripts/fetch_model.sh); HF rebuilt from
    the GGUF metadata read by gguf-py: Digits(individual) + ByteLevel — llama.cpp's "smollm" id;
  * the pre-tokenizer scanners alone (gpt2, llama-bpe, qwen2, smollm) against HF's Split(regex), on the
    same texts and on every input of llama.cpp's tokenizer vectors.
Our ids come from `lowbit tokenize --json` where the CLI has that command (GGUF vocabularies) and from the
test tool tool_tokenize otherwise. Needs the shared data (skips without it)."""
import glob
import json
import os
import subprocess
import sys

# --tool TOOL is ours; crosscheck_common's parser knows only --lowbit and --tmp.
tool = None
if "--tool" in sys.argv:
    i = sys.argv.index("--tool")
    tool = sys.argv[i + 1]
    del sys.argv[i:i + 2]

from crosscheck_common import Checker  # noqa: E402

c = Checker(__doc__)

from gguf import GGUFReader  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

# The shared data as the library finds it (src/io/corpus.h): $LOWBIT_SHARED_DATA, else the nearest
# shared/data in this script's folder or a parent (<checkout>/shared/data or <checkout>/../shared/data).
here = os.path.dirname(os.path.abspath(__file__))
candidates = [os.environ.get("LOWBIT_SHARED_DATA", "")]
d = here
while True:
    candidates.append(os.path.join(d, "shared", "data"))
    if os.path.dirname(d) == d:
        break
    d = os.path.dirname(d)
data = next((d for d in candidates if d and os.path.isdir(os.path.join(d, "tokenizers"))), None)
if data is None:
    print("SKIP: shared data not found (set LOWBIT_SHARED_DATA to the shared/data folder)")
    c.finish()

files = sorted(f for f in glob.glob(os.path.join(data, "corpora", "sotu", "*.txt"))
               if 2011 <= int(os.path.basename(f)[:4]) <= 2021)
c.check("SOTU test split has the 11 addresses of 2011-2021", len(files) == 11, len(files))
texts = {f: open(f, encoding="utf-8").read() for f in files}

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

cli_has_tokenize = c.lowbit("tokenize", "--help", expect_rc=None).returncode == 0
totals = {}
used = {}


def ours_tool(source_args):
    r = subprocess.run([tool, *source_args, *files], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tool_tokenize {' '.join(source_args)} exited {r.returncode}: {r.stderr.strip()}")
    c.check(f"decode(encode(x)) == x with {' '.join(source_args)}", "round trip ok" in r.stderr, r.stderr.strip())
    return json.loads(r.stdout)


def ours_gguf(path):
    if cli_has_tokenize:
        try:
            out = {}
            for f in files:
                r = c.lowbit("tokenize", "--model", path, "--text", f, "--bos", "off", "--json")
                out[f] = json.loads(r.stdout)["ids"]
            used["lowbit tokenize"] = True
            return out
        except (RuntimeError, ValueError, KeyError) as e:
            print(f"note: lowbit tokenize failed on {os.path.basename(path)} ({e}); using tool_tokenize")
    used["tool_tokenize"] = True
    return ours_tool(["--gguf", path])


def compare(name, hf, ours):
    n_tokens = 0
    for f in files:
        theirs = hf.encode(texts[f], add_special_tokens=False).ids
        mine = ours[f]
        n_tokens += len(theirs)
        same = mine == theirs
        detail = ""
        if not same:
            k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            detail = (f"{len(mine)} vs {len(theirs)} tokens; first difference at {k}: ours {mine[k:k + 5]} "
                      f"HF {theirs[k:k + 5]} around {hf.decode(theirs[max(0, k - 5):k + 5])!r}")
        c.check(f"{name} on {os.path.basename(f)}", same, detail)
    totals[f"{name}: SOTU tokens"] = n_tokens


def hf_from_gguf(path, pre_tokenizer, ignore_merges=False):
    r = GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    vocab = {t: i for i, t in enumerate(strings("tokenizer.ggml.tokens"))}
    merges = []
    for m in strings("tokenizer.ggml.merges"):
        k = m.index(" ", 1)
        merges.append((m[:k], m[k + 1:]))
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    return tok


# GPT-2 from its original files
with open(os.path.join(data, "tokenizers", "gpt2", "encoder.json"), encoding="utf-8") as fh:
    gpt2_vocab = json.load(fh)
with open(os.path.join(data, "tokenizers", "gpt2", "vocab.bpe"), encoding="utf-8") as fh:
    gpt2_merges = [tuple(line.split(" ")) for line in fh.read().split("\n")[1:] if line]
gpt2 = Tokenizer(models.BPE(gpt2_vocab, gpt2_merges))
gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
gpt2.decoder = decoders.ByteLevel()
compare("gpt2 (encoder.json + vocab.bpe)", gpt2, ours_tool(["--gpt2", os.path.join(data, "tokenizers", "gpt2")]))
saved = c.path("gpt2_tokenizer.json")
gpt2.save(saved)
compare("gpt2 (HF-saved tokenizer.json)", gpt2, ours_tool(["--hf-json", saved]))

# Llama 3 (llama.cpp's llama-bpe vocabulary)
llama_bpe = os.path.join(data, "tokenizers", "llama-cpp-vectors", "ggml-vocab-llama-bpe.gguf")
llama3_pre = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
compare("llama-bpe (Llama 3)", hf_from_gguf(llama_bpe, llama3_pre, ignore_merges=True), ours_gguf(llama_bpe))

# SmolLM2, when fetched
cache = os.environ.get("LOWBIT_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "lowbit"))
smollm = os.path.join(cache, "models", "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf")
if os.path.isfile(smollm):
    smollm_pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                          pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    compare("smollm (SmolLM2-135M GGUF)", hf_from_gguf(smollm, smollm_pre), ours_gguf(smollm))
else:
    print(f"note: {smollm} not found (scripts/fetch_model.sh fetches it); SmolLM2 not compared")

# The pre-tokenizer scanners alone against HF's regex splitting, on the SOTU test split and on every input
# of llama.cpp's tokenizer vectors (exotic scripts, emoji, whitespace runs).
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
hf_pre = {
    "gpt2": pre_tokenizers.Split(Regex(GPT2_REGEX), behavior="isolated"),
    "llama-bpe": pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
    "qwen2": pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"),
    "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                       pre_tokenizers.Split(Regex(GPT2_REGEX), behavior="isolated")]),
}
cases = set()
for inp in glob.glob(os.path.join(data, "tokenizers", "llama-cpp-vectors", "*.inp")):
    with open(inp, encoding="utf-8") as fh:
        cases.update(fh.read().split("\n__ggml_vocab_test__\n"))
case_files = []
for k, text in enumerate(sorted(cases)):
    case_files.append(c.path(f"vector_case_{k}.txt"))
    with open(case_files[-1], "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
for pre, hf in hf_pre.items():
    r = subprocess.run([tool, "--gpt2", os.path.join(data, "tokenizers", "gpt2"), "--pre", pre, "--pre-tokens",
                        *files, *case_files], capture_output=True, text=True, encoding="utf-8")
    if r.returncode != 0:
        raise RuntimeError(f"tool_tokenize --pre {pre} exited {r.returncode}: {r.stderr.strip()}")
    ours = json.loads(r.stdout)
    n_words = 0
    for f in files + case_files:
        with open(f, encoding="utf-8", newline="") as fh:
            text = fh.read()
        theirs = [w for w, _ in hf.pre_tokenize_str(text)]
        n_words += len(theirs)
        c.check(f"pre-tokens of {pre} on {os.path.basename(f)}", ours[f] == theirs,
                f"ours {ours[f][:12]} HF {theirs[:12]}")
    totals[f"pre-tokenizer {pre} (SOTU + {len(case_files)} vector inputs), words"] = n_words

for name, n in totals.items():
    print(f"compared — {name}: {n}")
print(f"ids of the GGUF vocabularies from {' and '.join(used)}")
c.finish()
