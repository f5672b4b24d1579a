#!/usr/bin/env bash
# cpu_check.sh - the CPU backend's checks on the GPU host's Xeon (a second AVX-512 machine,
# reached through the device tool), in one go: unpack the Debian packages it lacks from
# .debs/*.deb (cmocka, cJSON, OpenBLAS and its libgfortran; fetch them on the dev machine
# with `apt-get download libcmocka0 libcmocka-dev libcjson1 libcjson-dev libopenblas0
# libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5` into .debs,
# which .git/info/exclude ignores, and carry .debs) into a private prefix, build kiln
# without CUDA and with the unit tests, run ctest and the CPU pytest suites that compare
# against ONNX Runtime, then time kiln against ONNX Runtime on two pinned cores
# (bench/bench_cpu.py). Logs go to $OUT (default ./cpu-out); the summary is printed last.
#
# Usage (from the repository root): tests/gpu/cpu_check.sh
#   env: SKIP_TESTS=1 / SKIP_BENCH=1 skip those parts; BENCH_MODELS (resnet50,bert),
#   BENCH_REPS (24), BENCH_ROUNDS (12), CPUS (the cores to pin to, 2,4: two cores of
#   different physical cores on that host, as earlier sessions measured).
set -uo pipefail
OUT=${OUT:-$PWD/cpu-out}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
lscpu | grep -E "Model name|^CPU\(s\)|L2 cache|Flags" | cut -c1-200 | tee -a "$OUT/summary.txt"

P=/tmp/kiln-prefix
mkdir -p $P
for f in .debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" $P; done
L=$P/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$L:$L/openblas-pthread:${LD_LIBRARY_PATH:-}"
t0=$(date +%s)
PKG_CONFIG_PATH=/nonexistent cmake -S . -B build-cpu -G Ninja -DKILN_CUDA=OFF -DKILN_TESTS=ON \
    -DOPENBLAS_LIB=$L/openblas-pthread/libopenblas.so -DCJSON_LIB=$L/libcjson.so -DCMOCKA_LIB=$L/libcmocka.so \
    -DCMOCKA_INCLUDE=$P/usr/include \
    "-DCMAKE_C_FLAGS=-I$P/usr/include -I$P/usr/include/cjson -I$P/usr/include/x86_64-linux-gnu/openblas-pthread" \
    >"$OUT/build.log" 2>&1 && cmake --build build-cpu -j16 >>"$OUT/build.log" 2>&1
rc=$?
log "build rc=$rc in $(( $(date +%s) - t0 )) s"
grep -E "error:|OpenBLAS" "$OUT/build.log" | head -10 | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || { tail -30 "$OUT/build.log"; exit 1; }
K=$PWD/build-cpu/kiln

if [ -z "${SKIP_TESTS:-}" ]; then
    t0=$(date +%s)
    ctest --test-dir build-cpu -j16 >"$OUT/ctest.log" 2>&1
    log "ctest rc=$? $(grep 'tests passed' "$OUT/ctest.log") ($(( $(date +%s) - t0 )) s)"
    grep -h -E "AVX-512.*exercised|skipped" build-cpu/Testing/Temporary/LastTest.log | sort | uniq -c | head -10 \
        | tee -a "$OUT/summary.txt"
    t0=$(date +%s)
    KILN_BIN=$K timeout 400 python3 -m pytest -q -p no:cacheprovider -x tests/ops tests/models tests/cli/test_exec.py \
        tests/bench >"$OUT/pytest.log" 2>&1
    log "pytest ops, models, exec, bench: rc=$? $(tail -1 "$OUT/pytest.log") ($(( $(date +%s) - t0 )) s)"
fi

if [ -z "${SKIP_BENCH:-}" ]; then
    t0=$(date +%s)
    KILN_BIN=$K KILN_STEP_BIN=$PWD/build-cpu/kiln_step PYTHONUNBUFFERED=1 taskset -c "${CPUS:-2,4}" \
        python3 bench/bench_cpu.py --models "${BENCH_MODELS:-resnet50,bert}" --threads 1,2 \
        --reps "${BENCH_REPS:-24}" --rounds "${BENCH_ROUNDS:-12}" --layers 0 >"$OUT/bench.txt" 2>&1
    log "bench_cpu rc=$? ($(( $(date +%s) - t0 )) s)"
    grep -E "^#|^\|" "$OUT/bench.txt" | tee -a "$OUT/summary.txt"
fi
echo; cat "$OUT/summary.txt"
