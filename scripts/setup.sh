#!/usr/bin/env bash
# setup.sh — installs everything lowbit needs on a fresh Debian 12 machine. Idempotent.
#   Debian packages: build tools and header-only/compiled libraries the C++ code uses.
#   PyPI packages (into .venv/, test-time cross-checks only): numpy, scipy, gguf, ml_dtypes, tokenizers.
# The CUDA 13 toolkit is expected at /usr/local/cuda (it is not a Debian package); without it the
# build skips the CUDA targets and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(cmake g++ make pkg-config
              libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libopenblas-dev
              python3-venv clang libclang-rt-14-dev)
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

pip_packages=(numpy scipy "gguf==0.19.0" "ml_dtypes==0.6.0" "tokenizers==0.23.3")
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -c "import numpy, scipy, gguf, ml_dtypes, tokenizers" 2>/dev/null; then
    echo "setup: installing PyPI packages into .venv: ${pip_packages[*]}"
    .venv/bin/python -m pip install -q --disable-pip-version-check "${pip_packages[@]}"
fi
echo "setup: ok"
