#!/usr/bin/env python3
"""fetch_corpus.py — builds lowbit's real-text training corpus from Debian packages (docs/corpus.md).

Fetches a fixed list of Debian packages (`apt-get download`, the newest version in the configured archive),
unpacks them (`dpkg-deb -x`), keeps the text-like files of each package (books, manuals, dictionaries, source
code), cleans them, removes exact duplicates, and writes one JSON-lines file per package — one document per
line, {"text": ..., "source": "<package>:<path>"} — which `lowbit tokenize-corpus --input DIR` reads.

Cleaning, per document: UTF-8 (documents with more than 0.1 % NUL or undecodable bytes are dropped, the
rest decoded with replacement, control characters but tab and newline removed), CR LF / CR → LF, trailing
blanks removed, lines longer than 1000 characters dropped (minified code, data tables), runs of blank lines
squeezed to one, documents under 64 bytes dropped, documents that compress below 8 % with zlib (generated
register tables, data dumps) dropped, documents of which hex literals (0x…) make up 30 % or more dropped
(firmware blobs, register maps, lookup tables); test data folders (/testdata/) and binary or generated file types
(images, PDFs, object files, .po/.mo catalogues, JavaScript/CSS/JSON) are never read.
HTML is reduced to its text (script/style/head/nav left out); in HTML-derived documents lines that recur in
at least 50 documents and 20 % of the package's documents (navigation, footers) are removed. Documents over
256 KiB (the dictionaries) are cut at blank lines into pieces of at most 256 KiB. Deduplication: SHA-256 of
the cleaned document, across all packages, first occurrence kept (package order below, file-name order).

Idempotent: downloads, unpacked trees and finished package files are reused (a package's .jsonl is written
to a temporary name and renamed when complete). Output (outside the repository):
  ${LOWBIT_CACHE:-~/.cache/lowbit}/corpus/{debs,unpacked}/   the packages and their files
  ${LOWBIT_CACHE:-~/.cache/lowbit}/corpus/text/<package>.jsonl the documents
  ${LOWBIT_CACHE:-~/.cache/lowbit}/corpus/SOURCES.tsv           package, version, licence, sha256 of the .deb,
                                                                bytes, documents, files kept/dropped, duplicates
Usage: python3 scripts/fetch_corpus.py [--cache DIR] [--only PKG,...]
"""
import argparse
import fnmatch
import gzip
import hashlib
import html.parser
import io
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
import zlib
from collections import Counter

# (package, what it is, globs of the files kept inside the unpacked package; "*" matches across "/").
# Archives (.tar.xz, .zip) that a glob names are opened and their members filtered by the same text rules;
# other archives are skipped.
PACKAGES = [
    ("python3.11-doc", "Python 3.11 documentation (reST sources)", ["usr/share/doc/python3.11/html/_sources/*.txt"]),
    ("debian-reference-en", "Debian Reference (book)", ["usr/share/debian-reference/*.en.html"]),
    ("debian-handbook", "The Debian Administrator's Handbook (English)", ["usr/share/doc/debian-handbook/html/en-US/*.html"]),
    ("gnu-standards", "GNU coding standards, maintainer information", ["usr/share/info/*.gz"]),
    ("perl-doc", "Perl documentation (POD) and manuals", ["usr/share/perl/*.pod", "usr/share/man/*.gz"]),
    ("git-doc", "Git manuals and guides", ["usr/share/doc/git-doc/*.txt"]),
    ("postgresql-doc-15", "PostgreSQL 15 manual", ["usr/share/doc/postgresql-doc-15/html/*.html"]),
    ("octave-doc", "GNU Octave manual", ["usr/share/doc/octave/*.html"]),
    ("maxima-doc", "Maxima manual", ["usr/share/doc/maxima-doc/html/*.html"]),
    ("erlang-doc", "Erlang/OTP documentation", ["usr/share/doc/erlang-doc/*.html", "usr/lib/erlang/*.html"]),
    ("rust-doc", "Rust books and standard-library documentation", ["usr/share/doc/rust-doc/html/*.html"]),
    ("manpages", "Linux man pages (sections 1, 4-8)", ["usr/share/man/*.gz"]),
    ("manpages-dev", "Linux man pages (sections 2, 3)", ["usr/share/man/*.gz"]),
    ("dict-gcide", "Collaborative International Dictionary of English (Webster 1913 + additions)", ["usr/share/dictd/*.dict.dz"]),
    ("dict-wn", "WordNet 3.0 as a dictionary", ["usr/share/dictd/*.dict.dz"]),
    ("dict-foldoc", "Free On-line Dictionary of Computing", ["usr/share/dictd/*.dict.dz"]),
    ("dict-jargon", "The Jargon File", ["usr/share/dictd/*.dict.dz"]),
    ("dict-devil", "The Devil's Dictionary (Ambrose Bierce)", ["usr/share/dictd/*.dict.dz"]),
    ("wamerican-huge", "American English word list", ["usr/share/dict/american-english-huge"]),
    ("fortunes", "fortune cookie quotations", ["usr/share/games/fortunes/*"]),
    ("libpython3.11-stdlib", "Python 3.11 standard library source", ["usr/lib/python3.11/*.py"]),
    ("python3-sympy", "SymPy source", ["usr/lib/python3/dist-packages/sympy/*.py"]),
    ("python3-django", "Django source", ["usr/lib/python3/dist-packages/django/*.py",
                                         "usr/lib/python3/dist-packages/django/*.html", "usr/lib/python3/dist-packages/django/*.txt"]),
    ("emacs-el", "GNU Emacs Lisp source", ["usr/share/emacs/*.el.gz"]),
    ("sbcl-source", "SBCL (Common Lisp) source", ["usr/share/sbcl-source/*"]),
    ("golang-1.19-src", "Go 1.19 toolchain and standard library source", ["usr/share/go-1.19/src/*"]),
    ("openjdk-17-source", "OpenJDK 17 class library source", ["usr/lib/jvm/openjdk-17/lib/src.zip"]),
    ("linux-source-6.1", "Linux 6.1 kernel source and documentation", ["usr/src/linux-source-6.1.tar.xz"]),
]

# Files (inside packages or archives) that are never text worth keeping, whatever their content.
SKIP_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".pdf", ".ps", ".eps", ".xpm", ".pbm", ".bmp",
                 ".so", ".o", ".a", ".elc", ".mo", ".po", ".pot", ".pyc", ".zip", ".jar", ".class", ".dat", ".bin",
                 ".golden", ".js", ".css", ".json", ".map", ".woff", ".woff2", ".ttf", ".otf", ".u", ".xz", ".bz2",
                 ".tgz", ".wasm", ".syso", ".fw", ".ri", ".chunk", ".eix")
MAX_LINE_CHARS = 1000
CONTROL_CHARS = {c: None for c in range(32) if c not in (9, 10, 13)} | {127: None}
MIN_DOC_BYTES = 64
MAX_DOC_BYTES = 256 * 1024
MIN_ZLIB_RATIO = 0.08
BOILERPLATE_MIN_DOCS = 50
BOILERPLATE_MIN_SHARE = 0.20
PART_BYTES = 512 * 1024 * 1024  # a package's output is split into .NNN.jsonl parts of at most this size


def cache_root(arg):
    if arg:
        return arg
    base = os.environ.get("LOWBIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lowbit")
    return os.path.join(base, "corpus")


def glob_match(path, patterns):
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


class HtmlText(html.parser.HTMLParser):
    """The visible text of an HTML page, one line per block element; <pre> keeps its layout."""
    BLOCK = {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "h1", "h2", "h3", "h4", "h5",
             "h6", "pre", "blockquote", "section", "article", "hr", "title", "caption", "figure"}
    HIDDEN = {"script", "style", "head", "nav", "noscript", "template"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.hidden, self.pre = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in self.HIDDEN:
            self.hidden += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in self.HIDDEN and self.hidden:
            self.hidden -= 1
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.hidden:
            return
        self.out.append(data if self.pre else re.sub(r"[ \t\r\n]+", " ", data))

    def text(self):
        return "".join(self.out)


def html_to_text(raw):
    p = HtmlText()
    p.feed(raw.decode("utf-8", errors="replace"))
    p.close()
    return "\n".join(line.strip() for line in p.text().split("\n")).encode("utf-8")


def decode_text(raw):
    """Text of a file's bytes, or None when it is not text (more than 0.1 % NUL bytes or invalid UTF-8).
    Control characters other than tab and newline (info files' node markers, form feeds) are removed."""
    text = raw.decode("utf-8", errors="replace")
    if raw.count(b"\0") + text.count("\ufffd") > len(raw) // 1000:
        return None
    return text.translate(CONTROL_CHARS)


def clean(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    kept, blank = [], True  # True: drops leading blank lines
    for line in lines:
        if len(line) > MAX_LINE_CHARS:
            continue
        if not line:
            if not blank:
                kept.append("")
            blank = True
            continue
        kept.append(line)
        blank = False
    while kept and not kept[-1]:
        kept.pop()
    return "\n".join(kept) + "\n" if kept else ""


def split_large(text):
    """Pieces of at most MAX_DOC_BYTES (UTF-8), cut at blank lines (at line ends when a paragraph is larger)."""
    if len(text.encode("utf-8")) <= MAX_DOC_BYTES:
        return [text]
    pieces, cur, cur_bytes = [], [], 0
    for para in re.split(r"(?<=\n)\n", text):
        units = [para] if len(para.encode("utf-8")) <= MAX_DOC_BYTES else para.splitlines(keepends=True)
        for u in units:
            n = len(u.encode("utf-8")) + 1
            if cur and cur_bytes + n > MAX_DOC_BYTES:
                pieces.append("\n".join(cur))
                cur, cur_bytes = [], 0
            cur.append(u)
            cur_bytes += n
    if cur:
        pieces.append("\n".join(cur))
    return [p.rstrip("\n") + "\n" for p in pieces if p.strip()]


HEX_LITERAL = re.compile(r"0[xX][0-9a-fA-F]{2,}")
MAX_HEX_SHARE = 0.30


def too_hexadecimal(text):
    """Firmware blobs, register maps and lookup tables: hex literals make up 30 % or more of the characters."""
    return sum(len(m) for m in HEX_LITERAL.findall(text)) >= MAX_HEX_SHARE * max(1, len(text))


def too_repetitive(text):
    raw = text.encode("utf-8")
    return len(raw) > 4096 and len(zlib.compress(raw, 1)) < MIN_ZLIB_RATIO * len(raw)


def members(root, patterns):
    """(path, bytes) of the kept files of an unpacked package, archives opened, in sorted path order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full) or not glob_match(rel, patterns):
                continue
            opened = [p[-7:] for p in patterns if p.endswith((".tar.xz", ".zip"))]  # archives a rule names
            if rel.endswith(".tar.xz") and ".tar.xz" in opened:
                with tarfile.open(full, "r:xz") as tar:
                    for m in tar:
                        if m.isfile():
                            yield rel + "/" + m.name, tar.extractfile(m).read()
            elif rel.endswith(".zip") and any(o.endswith(".zip") for o in opened):
                with zipfile.ZipFile(full) as z:
                    for n in sorted(z.namelist()):
                        if not n.endswith("/"):
                            yield rel + "/" + n, z.read(n)
            else:
                with open(full, "rb") as f:
                    yield rel, f.read()


def file_text(path, raw):
    """(text, from_html) of one file, or (None, False) when it is not kept."""
    lower = path.lower()
    if lower.endswith(".dz") or lower.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            return None, False
        lower = lower[:-3]
    if lower.endswith(SKIP_SUFFIXES) or "/testdata/" in lower:
        return None, False
    from_html = lower.endswith((".html", ".htm"))
    if from_html:
        raw = html_to_text(raw)
    text = decode_text(raw)
    return text, from_html


# Packages whose /usr/share/doc/<package> is a link into another package (so no copyright file of their own),
# with the licence that the linked package's copyright file gives for these files.
LICENCE_OF_LINKED_DOCS = {
    "libpython3.11-stdlib": "PSF-2.0 (Python Software Foundation License; copyright of libpython3.11-minimal)",
    "manpages-dev": "as manpages: GPL-2+; BSD-2/3/4-clause; Linux-man-pages-copyleft; Expat; …",
    "openjdk-17-source": "GPL-2 with the Classpath exception (copyright of openjdk-17-jdk)",
}


def licence_of(unpacked, package):
    """Short licence names from the package's copyright file (DEP-5 License: fields, else a keyword scan)."""
    if package in LICENCE_OF_LINKED_DOCS:
        return LICENCE_OF_LINKED_DOCS[package]
    path = os.path.join(unpacked, "usr", "share", "doc", package, "copyright")
    text = open(path, encoding="utf-8", errors="replace").read()
    names = []
    if text.startswith("Format:"):  # machine-readable (DEP-5)
        for m in re.finditer(r"^License:[ \t]*(\S.*)$", text, re.M):
            name = m.group(1).strip()
            if name not in names:
                names.append(name)
    if not names:
        flat = re.sub(r"\s+", " ", text)
        for pattern, name in [(r"Python Software Foundation", "PSF-2.0"), (r"GNU General Public License", "GPL"),
                              (r"GNU Free Documentation License", "GFDL"), (r"GNU (Lesser|Library) General Public", "LGPL"),
                              (r"[Pp]ublic [Dd]omain", "public domain"), (r"\bBSD\b", "BSD"),
                              (r"\bArtistic\b", "Artistic"), (r"\bMIT\b", "MIT")]:
            if re.search(pattern, flat) and name not in names:
                names.append(name)
    shown = names[:6]
    return "; ".join(shown) + (f"; … ({len(names)} in all)" if len(names) > len(shown) else "")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def fetch(debs, package):
    have = [f for f in os.listdir(debs) if f.startswith(package + "_") and f.endswith(".deb")]
    if not have:
        run(["apt-get", "download", package], cwd=debs, stdout=subprocess.DEVNULL)
        have = [f for f in os.listdir(debs) if f.startswith(package + "_") and f.endswith(".deb")]
    if len(have) != 1:
        sys.exit(f"fetch_corpus: expected one .deb of {package} in {debs}, found {have}")
    return os.path.join(debs, have[0])


def build_package(root, package, patterns, seen):
    """Writes text/<package>.NNN.jsonl; returns the SOURCES.tsv row as a dict."""
    debs, unpacked_root, text_dir = (os.path.join(root, d) for d in ("debs", "unpacked", "text"))
    deb = fetch(debs, package)
    version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True, capture_output=True, text=True).stdout.strip()
    unpacked = os.path.join(unpacked_root, package)
    if not os.path.exists(unpacked + ".done"):
        run(["rm", "-rf", unpacked])
        os.makedirs(unpacked)
        run(["dpkg-deb", "-x", deb, unpacked])
        open(unpacked + ".done", "w").close()
    sha = hashlib.sha256(open(deb, "rb").read()).hexdigest()

    files_kept = files_dropped = duplicates = 0
    docs = []  # (source, text, from_html)
    for path, raw in members(unpacked, patterns):
        text, from_html = file_text(path, raw)
        text = clean(text) if text is not None else ""
        if len(text.encode("utf-8")) < MIN_DOC_BYTES or too_repetitive(text) or too_hexadecimal(text):
            files_dropped += 1
            continue
        files_kept += 1
        for i, piece in enumerate(split_large(text)):
            docs.append((f"{package}:{path}" + (f"#{i}" if i else ""), piece, from_html))

    # Boilerplate lines of HTML-derived documents (navigation, footers), counted once per document.
    html_docs = [d for d in docs if d[2]]
    common = Counter()
    for _, text, _ in html_docs:
        common.update(set(line for line in text.split("\n") if line))
    limit = max(BOILERPLATE_MIN_DOCS, BOILERPLATE_MIN_SHARE * len(html_docs))
    boiler = {line for line, n in common.items() if n >= limit}

    tmp_paths, out, part, part_bytes = [], None, 0, 0
    total_bytes = n_docs = 0
    for source, text, from_html in docs:
        if from_html and boiler:
            text = clean("\n".join(line for line in text.split("\n") if line not in boiler))
            if len(text.encode("utf-8")) < MIN_DOC_BYTES:
                continue
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        if digest in seen:
            duplicates += 1
            continue
        seen.add(digest)
        line = json.dumps({"text": text, "source": source}, ensure_ascii=False) + "\n"
        if out is None or part_bytes + len(line) > PART_BYTES:
            if out:
                out.close()
            tmp_paths.append(os.path.join(text_dir, f"{package}.{part:03d}.jsonl.tmp"))
            out = open(tmp_paths[-1], "w", encoding="utf-8")
            part, part_bytes = part + 1, 0
        out.write(line)
        part_bytes += len(line)
        total_bytes += len(text.encode("utf-8"))
        n_docs += 1
    if out:
        out.close()
    for t in tmp_paths:
        os.replace(t, t[: -len(".tmp")])
    return {"package": package, "version": version, "licence": licence_of(unpacked, package), "deb_sha256": sha,
            "bytes": total_bytes, "documents": n_docs, "files_kept": files_kept, "files_dropped": files_dropped,
            "duplicates": duplicates, "boilerplate_lines": len(boiler)}


COLUMNS = ["package", "version", "licence", "deb_sha256", "bytes", "documents", "files_kept", "files_dropped",
           "duplicates", "boilerplate_lines", "description"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", help="corpus folder (default ${LOWBIT_CACHE:-~/.cache/lowbit}/corpus)")
    ap.add_argument("--only", help="comma-separated packages to (re)build; the others are left as they are")
    args = ap.parse_args()
    root = cache_root(args.cache)
    for d in ("debs", "unpacked", "text"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    sources_path = os.path.join(root, "SOURCES.tsv")
    rows = {}
    if os.path.exists(sources_path):
        with open(sources_path, encoding="utf-8") as f:
            header = f.readline().rstrip("\n").split("\t")
            for line in f:
                row = dict(zip(header, line.rstrip("\n").split("\t")))
                rows[row["package"]] = row

    # Dedup state: the hashes of every document already written, in package order, so a rebuild of one
    # package sees the packages before it exactly as a full run does.
    seen = set()
    for package, description, patterns in PACKAGES:
        parts = sorted(f for f in os.listdir(os.path.join(root, "text")) if f.startswith(package + ".") and f.endswith(".jsonl"))
        redo = (only is not None and package in only) or (only is None and (not parts or package not in rows))
        if redo:
            for f in parts:
                os.remove(os.path.join(root, "text", f))
            t0 = time.time()
            row = build_package(root, package, patterns, seen)
            row["description"] = description
            rows[package] = row
            print(f"{package:24s} {int(row['bytes']) / 1e6:9.1f} MB {row['documents']:>7} docs "
                  f"({row['files_dropped']} files dropped, {row['duplicates']} duplicates) {time.time() - t0:6.1f} s", flush=True)
            with open(sources_path + ".tmp", "w", encoding="utf-8") as f:
                f.write("\t".join(COLUMNS) + "\n")
                for p, _, _ in PACKAGES:
                    if p in rows:
                        f.write("\t".join(str(rows[p].get(c, "")) for c in COLUMNS) + "\n")
            os.replace(sources_path + ".tmp", sources_path)
        else:
            for f in parts:
                with open(os.path.join(root, "text", f), encoding="utf-8") as fh:
                    for line in fh:
                        seen.add(hashlib.sha256(json.loads(line)["text"].encode("utf-8")).digest())
            print(f"{package:24s} kept from an earlier run", flush=True)
    total = sum(int(rows[p]["bytes"]) for p, _, _ in PACKAGES if p in rows)
    print(f"total {total / 1e6:.1f} MB of text in {os.path.join(root, 'text')}; sources in {sources_path}")


if __name__ == "__main__":
    main()
