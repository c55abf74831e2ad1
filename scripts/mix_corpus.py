#!/usr/bin/env python3
"""mix_corpus.py — one JSON-lines file of the documents of several corpus packages, in a seeded random order.

`lowbit tokenize-corpus` writes shards in input order, so shards made from the package files one by one each hold
a few packages (docs/corpus.md, "The set the base headline trained on"). Shuffling the documents first makes
every shard, and so every subset a GPU host is given, a sample of all the packages named.

Usage: python3 scripts/mix_corpus.py --out FILE [--seed 0] [--cache DIR] PACKAGE...
Reads ${LOWBIT_CACHE:-~/.cache/lowbit}/corpus/text/PACKAGE.*.jsonl (scripts/fetch_corpus.py); writes FILE
through a temporary name, so it appears only complete. Idempotent for the same packages and seed.
"""
import argparse
import glob
import os
import random
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(os.environ.get("LOWBIT_CACHE", os.path.expanduser("~/.cache/lowbit")), "corpus"))
    ap.add_argument("packages", nargs="+")
    a = ap.parse_args()
    docs = []
    for p in a.packages:
        files = sorted(glob.glob(os.path.join(a.cache, "text", f"{p}.*.jsonl")))
        if not files:
            sys.exit(f"mix_corpus: no text of {p} in {a.cache}/text (run scripts/fetch_corpus.py --only {p})")
        for f in files:
            with open(f, encoding="utf-8") as fh:
                docs.extend(fh.readlines())
    random.Random(a.seed).shuffle(docs)
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as o:
        o.writelines(docs)
    os.replace(tmp, a.out)
    print(f"mix_corpus: {len(docs)} documents of {len(a.packages)} packages → {a.out}")


if __name__ == "__main__":
    main()
