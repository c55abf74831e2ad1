#!/usr/bin/env bash
# pack_gpu.sh — on the dev machine (no GPU needed): builds the `h200` CMake preset (build-h200/: sm_90a
# only, portable binaries — see LOWBIT_PORTABLE_BINARIES in CMakeLists.txt) and packs what the GPU host
# runs into .gpu_pack/lowbit-gpu.tar.xz:
#   bin/                  every test labelled `gpu`, the benchmarks (bench_kernels … bench_linear_layer), lowbit, and
#                         the executables of dev/ targets when the tree has them
#   CTestTestfile.cmake   those tests, relocatable (see below), for `ctest --test-dir <unpacked> -L gpu`
#   PACK_INFO             commit, date, build host, compiler versions, file list
# Then, on the GPU host:  run(command="bash scripts/gpu_check.sh", carry=[".gpu_pack"])
#
# Why a CTestTestfile of our own: the build tree's CTest files hold absolute paths of this machine (and the
# CPU suites' gtest discovery), while the GPU host's checkout lives elsewhere. This script asks CTest for
# the `gpu` tests (`ctest --show-only=json-v1 -L gpu`: names, commands, properties) and writes them with
# executables as bin/NAME: ctest runs each test in the folder of its CTestTestfile (the working directory
# is left at that default; the GPU suites read no files), so they run wherever the pack is unpacked, with
# the same names, labels and properties.
# The CPU references inside the GPU tests are the same code as on this machine and in CI (OpenBLAS,
# linked statically): one build of everything.
#
# xz, single-threaded at -9: one solid stream whose 64 MiB window deduplicates the static OpenBLAS and CPU
# code that every binary carries (19 binaries of 3-50 MB, 410 MB, pack 15 MB); the runner
# unpacks it with python3's tarfile, which the GPU image has.
#
#   bash scripts/pack_gpu.sh            (LOWBIT_BUILD_JOBS=N to change the default -j2)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${LOWBIT_BUILD_JOBS:-2}
build=build-h200
pack=.gpu_pack/lowbit-gpu.tar.xz

cmake --preset h200 > /dev/null
# Only what the pack holds: the GPU tests (each test is its own target), the benchmarks and lowbit.
gpu_targets=$(ctest --test-dir "$build" -L gpu --show-only=json-v1 | python3 -c '
import json, sys
print(" ".join(t["name"] for t in json.load(sys.stdin)["tests"]))')
cmake --build "$build" -j"$jobs" --target $gpu_targets bench_kernels bench_adahop bench_model bench_ptq bench_train bench_flash_attention bench_mx_gemm bench_linear_layer lowbit
[ -x "$build/bench/bench_kernels" ] || { echo "pack_gpu: $build has no CUDA targets (nvcc missing at /usr/local/cuda?)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lowbit-gpu/bin" .gpu_pack
ctest --test-dir "$build" -L gpu --show-only=json-v1 > "$stage/gpu_tests.json"
python3 - "$PWD/$build" "$stage/lowbit-gpu" "$stage/gpu_tests.json" <<'EOF'
import json, os, shutil, sys
build, dest, tests_json = sys.argv[1:]
binaries = {}  # basename -> path in the build tree

def pack_binary(path):
    name = os.path.basename(path)
    if binaries.setdefault(name, path) != path:
        sys.exit(f"pack_gpu: two executables named {name}: {binaries[name]} and {path}; rename one target")

def bracket(s):  # a CMake bracket argument holding s verbatim
    eq = "="
    while f"]{eq}]" in s: eq += "="
    return f"[{eq}[{s}]{eq}]"

tests = json.load(open(tests_json))["tests"]
if not tests:
    sys.exit("pack_gpu: `ctest -L gpu` lists no tests in " + build)
lines = ["# GPU tests of lowbit, written by scripts/pack_gpu.sh. ctest runs each in this folder, so paths are relative."]
for t in tests:
    if "command" not in t:
        sys.exit(f"pack_gpu: test {t['name']} has no built executable in {build}")
    exe, *args = t["command"]
    for a in args:
        if build in a or os.path.dirname(build) in a:
            sys.exit(f"pack_gpu: test {t['name']} passes a path of this machine ({a}); the pack cannot relocate it")
    pack_binary(exe)
    command = " ".join([bracket("bin/" + os.path.basename(exe))] + [bracket(a) for a in args])
    lines.append(f"add_test({bracket(t['name'])} {command})")
    props = []
    for p in t.get("properties", []):
        if p["name"] == "WORKING_DIRECTORY":
            continue
        v = p["value"]
        v = ";".join(map(str, v)) if isinstance(v, list) else ("ON" if v is True else "OFF" if v is False else str(v))
        props.append(f"{p['name']} {bracket(v)}")
    if props:
        lines.append(f"set_tests_properties({bracket(t['name'])} PROPERTIES {' '.join(props)})")
open(os.path.join(dest, "CTestTestfile.cmake"), "w").write("\n".join(lines) + "\n")

for rel in ["bench/bench_kernels", "bench/bench_adahop", "bench/bench_model", "bench/bench_ptq", "bench/bench_train", "bench/bench_flash_attention", "bench/bench_mx_gemm", "bench/bench_linear_layer", "lowbit"]:
    path = os.path.join(build, rel)
    if not os.access(path, os.X_OK):
        sys.exit(f"pack_gpu: {path} was not built")
    pack_binary(path)
for root, dirs, files in os.walk(os.path.join(build, "dev")):  # lab programs, when dev/ has CMake targets
    dirs[:] = [d for d in dirs if d != "CMakeFiles"]
    for f in files:
        path = os.path.join(root, f)
        with open(path, "rb") as fh:
            if os.access(path, os.X_OK) and fh.read(4) == b"\x7fELF":
                pack_binary(path)
for name, path in sorted(binaries.items()):
    shutil.copy2(path, os.path.join(dest, "bin", name))
print(f"pack_gpu: {len(tests)} gpu tests, {len(binaries)} executables")
EOF

{
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo '+dirty')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
    echo "compilers: $(g++ --version | head -1); $(/usr/local/cuda/bin/nvcc --version | tail -1)"
    echo "preset: h200 (CMAKE_CUDA_ARCHITECTURES 90a-real, LOWBIT_PORTABLE_BINARIES ON)"
    (cd "$stage/lowbit-gpu" && ls -l bin | tail -n +2 | awk '{ printf "  %-28s %6.1f MB\n", $9, $5 / 1e6 }')
} > "$stage/lowbit-gpu/PACK_INFO"
cat "$stage/lowbit-gpu/PACK_INFO"

tar -C "$stage" -cf - lowbit-gpu | xz -9 -T1 > "$pack.tmp"
mv "$pack.tmp" "$pack"
echo "pack_gpu: $pack $(du -h "$pack" | cut -f1) (unpacked $(du -sh "$stage/lowbit-gpu" | cut -f1))"
echo "pack_gpu: on the GPU host: run(command=\"bash scripts/gpu_check.sh\", carry=[\".gpu_pack\"])"
