#!/usr/bin/env bash
# Installs everything kiln needs to build and test, idempotently: Debian packages
# (compiler, CMake, BLAS, cmocka, cJSON) and the PyPI packages used by test and
# benchmark tooling (onnx, onnxruntime, numpy, pytest). Safe to run many times;
# it only installs what is missing.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

deb_packages=(build-essential cmake ninja-build pkg-config clang libopenblas-dev
              libcmocka-dev libcjson-dev zlib1g-dev)
missing=()
for p in "${deb_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
py_needed=()
for m in onnx:onnx onnxruntime:onnxruntime numpy:numpy pytest:pytest; do
    mod=${m%%:*}; pkg=${m##*:}
    $PY -c "import $mod" 2>/dev/null || py_needed+=("$pkg")
done
if [ ${#py_needed[@]} -gt 0 ]; then
    echo "setup: installing Python packages: ${py_needed[*]}"
    $PY -m pip install -q --disable-pip-version-check "${py_needed[@]}"
fi
echo "setup: all dependencies present"
