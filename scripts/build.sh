#!/usr/bin/env bash
# Configures and builds kiln. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR is build/. Warnings are errors here, as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" "${gen[@]}" -DKILN_WERROR=ON "$@" >/dev/null
elif [ $# -gt 0 ]; then
    cmake -S . -B "$dir" "$@" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)"
