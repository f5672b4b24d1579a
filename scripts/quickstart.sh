#!/usr/bin/env bash
# The README's first command: installs what kiln needs, builds it, and runs the main job on
# the bundled example models: check a model, build and benchmark an engine the way trtexec
# does, inspect the saved engine, and show what kiln says about a broken model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build

run() {
    echo
    echo "\$ $*"
    "$@"
}

run build/kiln check examples/tiny_cnn.onnx --shapes=input:1x3x32x32
run build/kiln exec --onnx=examples/tiny_cnn.onnx --shapes=input:8x3x32x32 \
    --saveEngine=build/tiny_cnn.engine --duration=1 --warmUp=100
run build/kiln inspect build/tiny_cnn.engine
echo
echo "\$ build/kiln check examples/embed_proj_broken.onnx    # a model with a layer-width bug"
status=0
build/kiln check examples/embed_proj_broken.onnx || status=$?
if [ "$status" != 1 ]; then
    echo "quickstart: expected kiln check to report the broken model's error (exit 1), got $status" >&2
    exit 1
fi
echo
echo "quickstart: ok (the last check is meant to fail: it shows a diagnostic)"
