#!/usr/bin/env python3
"""subset_shards.py — a smaller token-shard set to carry to a GPU host that has no network (docs/corpus.md).

Copies N train shards of a set made by `lowbit tokenize-corpus`, spread evenly over it (the set is in input
order, so evenly spaced shards sample every part of the corpus), and all its val shards, renumbered
train_000.bin …, with a manifest.json listing exactly those shards (their counts and checksums unchanged),
which `TokenShardSet::open` (the training loader) accepts like any set. With --xz each shard is also
written as SHARD.xz (the command on the GPU host runs `xz -d DIR/*.xz` first).

Usage: python3 scripts/subset_shards.py SRC_DIR DST_DIR --train N [--xz]
"""
import argparse
import json
import lzma
import os
import shutil
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--train", type=int, required=True, help="number of train shards to keep")
    ap.add_argument("--xz", action="store_true", help="write SHARD.xz instead of SHARD (xz -6)")
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(a.src, "manifest.json"), encoding="utf-8"))
    if manifest.get("format") != "lowbit-token-shards":
        sys.exit(f"subset_shards: {a.src}/manifest.json is not a lowbit token-shard manifest")
    train = manifest["splits"]["train"]
    if not 1 <= a.train <= len(train):
        sys.exit(f"subset_shards: --train must be between 1 and {len(train)}")
    if os.path.exists(os.path.join(a.dst, "manifest.json")):
        sys.exit(f"subset_shards: {a.dst} already holds a shard set")
    os.makedirs(a.dst, exist_ok=True)
    picked = [train[(2 * i + 1) * len(train) // (2 * a.train)] for i in range(a.train)]  # centres of N equal parts
    splits = {"train": picked}
    splits.update({name: entries for name, entries in manifest["splits"].items() if name != "train"})
    out_splits, total = {}, 0
    for name, entries in splits.items():
        out_splits[name] = []
        for k, e in enumerate(entries):
            new = dict(e, file=f"{name}_{k:03d}.bin")
            src, dst = os.path.join(a.src, e["file"]), os.path.join(a.dst, new["file"])
            if a.xz:
                with open(src, "rb") as f, lzma.open(dst + ".xz", "wb", preset=6) as g:
                    shutil.copyfileobj(f, g, 1 << 20)
                total += os.path.getsize(dst + ".xz")
            else:
                shutil.copyfile(src, dst)
                total += os.path.getsize(dst)
            out_splits[name].append(new)
    manifest["splits"] = out_splits
    manifest["info"] = {"subset_of": os.path.abspath(a.src), "train_shards_of_source": [e["file"] for e in picked],
                        "source_info": manifest.get("info", {})}
    with open(os.path.join(a.dst, "manifest.json.tmp"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(a.dst, "manifest.json.tmp"), os.path.join(a.dst, "manifest.json"))
    tokens = {n: sum(e["tokens"] for e in es) for n, es in out_splits.items()}
    print(f"{a.dst}: {tokens} tokens in {sum(len(es) for es in out_splits.values())} shards, {total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
