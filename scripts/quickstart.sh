#!/usr/bin/env bash
# The README's first command: installs what kiln needs, builds it, and runs kiln on the
# bundled example model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
model=examples/embed_proj.onnx
echo
echo "\$ build/kiln inspect $model"
build/kiln inspect "$model"
