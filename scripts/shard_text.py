#!/usr/bin/env python3
"""shard_text.py — UTF-8 text of documents from a token-shard set (docs/corpus.md), decoded with a GGUF's vocabulary.

Picks whole documents of one split, spread evenly over it (a split is in input order, so evenly spaced documents
sample every source), until about --tokens tokens, and writes them to --out separated by blank lines. The PTQ work
on a model lowbit trained uses it to calibrate and evaluate on in-domain text: calibration text from the train
split, evaluation text from the val split the training never saw. Deterministic: the same set gives the same text.

Decoding is GPT-2 byte-level BPE (SmolLM2's and GPT-2's tokenizers): each token's string is mapped back to bytes
through the inverse of the 256-entry byte-to-character table. A vocabulary of another kind is refused.

Usage: python3 scripts/shard_text.py SHARD_DIR --split val|train --vocab MODEL.gguf --tokens N [--doc-tokens D] --out FILE
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader

HEADER_BYTES = 128


def byte_decoder():
    """The inverse of GPT-2's bytes-to-unicode table: printable bytes map to themselves, the rest to 256 + i."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def vocabulary(path):
    reader = GGUFReader(path)
    model = reader.fields["tokenizer.ggml.model"]
    if bytes(model.parts[model.data[0]]).decode() != "gpt2":
        sys.exit(f"shard_text: {path}: not a GPT-2 byte-level vocabulary")
    field = reader.fields["tokenizer.ggml.tokens"]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def documents(path, separator):
    """The documents of one shard file as arrays of token ids (the header is checked by lowbit, not here)."""
    raw = open(path, "rb").read()
    width = int.from_bytes(raw[12:16], "little")
    ids = np.frombuffer(raw, dtype=np.uint16 if width == 2 else np.uint32, offset=HEADER_BYTES)
    cuts = np.flatnonzero(ids == separator)
    start = 0
    for cut in cuts:
        if cut > start:
            yield ids[start:cut]
        start = cut + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shards")
    ap.add_argument("--split", required=True)
    ap.add_argument("--vocab", required=True, help="a GGUF whose tokenizer made the shards")
    ap.add_argument("--tokens", type=int, required=True, help="stop once the picked documents hold this many")
    ap.add_argument("--doc-tokens", type=int, default=2048, help="cut each document to at most this many tokens")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(a.shards, "manifest.json"), encoding="utf-8"))
    entries = manifest["splits"].get(a.split)
    if not entries:
        sys.exit(f"shard_text: {a.shards} has no split '{a.split}'")
    docs = [d for e in entries for d in documents(os.path.join(a.shards, e["file"]), manifest["separator_id"])]
    tokens, to_byte = vocabulary(a.vocab), byte_decoder()
    if len(tokens) < manifest["vocab_size"]:
        sys.exit(f"shard_text: {a.vocab} has {len(tokens)} tokens, the shards {manifest['vocab_size']}")
    # Each document is cut to --doc-tokens, so that a few long ones cannot fill the text and its first windows (what
    # llama-imatrix reads) come from several sources.
    cap, picked, total = max(1, a.doc_tokens), [], 0
    stride = max(1, len(docs) // max(1, a.tokens // cap))  # about one document per cap tokens of budget
    first = list(range(stride // 2, len(docs), stride))
    order = first + sorted(set(range(len(docs))) - set(first))  # the rest only if the spread ones fall short
    for i in order:
        if total >= a.tokens:
            break
        doc = docs[i][:cap]
        picked.append(b"".join(bytes(to_byte[c] for c in tokens[t]) for t in doc.tolist()))
        total += len(doc)
    text = b"\n\n".join(picked)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(text)
    os.replace(tmp, a.out)
    print(f"shard_text: {len(picked)} of {len(docs)} {a.split} documents, {total} tokens, {len(text)} bytes -> {a.out}")


if __name__ == "__main__":
    main()
