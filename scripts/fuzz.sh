#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR for SECONDS each, seeded with the test corpus.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-fuzz}
secs=${2:-30}
found=0
for f in "$dir"/fuzz_*; do
    [ -x "$f" ] || continue
    found=1
    name=$(basename "$f")
    corpus=$(mktemp -d)
    seeds=tests/fuzz/seeds/${name#fuzz_}
    [ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
    echo "fuzz: $name for ${secs}s"
    "$f" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=0 \
        "$corpus" 2>&1 | tail -n 3
    rm -rf "$corpus"
done
[ $found = 1 ] || echo "fuzz: no fuzz targets built in $dir"
