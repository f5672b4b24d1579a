#!/usr/bin/env bash
# The README's second command: installs what is needed, builds with warnings as errors,
# and runs every test: C unit tests (ctest) and the CLI/model tests (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
echo "== unit tests (ctest)"
ctest --test-dir build --output-on-failure -j "$(nproc)"
echo "== CLI and model tests (pytest)"
KILN_BIN="$PWD/build/kiln" python3 -m pytest -q -p no:cacheprovider tests
scripts/conformance.sh  # ONNX backend-test conformance: fails when a case in tests/conformance/passing_*.txt regresses
