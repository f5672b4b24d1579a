#!/usr/bin/env bash
# run_gpu.sh - the CUDA backend's checks on a machine with an NVIDIA GPU, in one go:
# build kiln with CUDA, run the ONNX node tests with --backend cuda (all, and those that
# run entirely on the GPU), check the zoo models against ONNX Runtime, then time kiln
# against PyTorch (bench/bench_cuda.py). Logs go to $OUT (default ./gpu-out).
#
# Usage (from the repository root): tests/gpu/run_gpu.sh [NODE_TEST_DIR]
#   env: SKIP_NOTF32=1 / SKIP_FALLBACK=1 skip those node-test runs; ZOO_TIMEOUT, BENCH_TIMEOUT,
#   EXEC_TIMEOUT (s); SKIP_NODE=1 / SKIP_ZOO=1 / SKIP_BENCH=1 / SKIP_EXEC=1 skip those parts.
#   BENCH_COMPILE=1 adds torch.compile rows to the benchmark (bench_cuda.py --compile; each
#   model's compiles get COMPILE_TIMEOUT s, default 240, and BENCH_TIMEOUT grows by twice that).
#   The exec part (tests/gpu/exec_gpu.py) checks CUDA graphs on every zoo model (BERT
#   included), kiln exec --backend=cuda engines (build, save, load, outputs vs ONNX Runtime,
#   inspect, --noDataTransfers, --infStreams=2) and ResNet-50 build times with a timing cache.
#   NODE_TEST_DIR: ONNX backend-test node cases (default testdata/node, else
#   ../shared/onnx-backend-tests/node).
# Without cJSON headers installed, debs in debs/*.deb (libcjson-dev, libcjson1) are
# unpacked into a private prefix (the GPU machines here have no network).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee -a "$OUT/summary.txt"

prefix_args=()
if [ ! -f /usr/include/cjson/cJSON.h ] && ls debs/*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/kiln-prefix
    for f in debs/*.deb; do dpkg -x "$f" /tmp/kiln-prefix; done
    lib=/tmp/kiln-prefix/usr/lib/x86_64-linux-gnu
    prefix_args+=(-DCJSON_LIB="$lib/libcjson.so" "-DCMAKE_C_FLAGS=-I/tmp/kiln-prefix/usr/include")
    export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
fi
# cuDNN: the system one, else the one PyTorch's wheels carry
if ! ldconfig -p | grep -q 'libcudnn\.so'; then
    d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null)
    if [ -n "$d" ] && [ -f "$d/lib/libcudnn.so.9" ]; then
        prefix_args+=(-DCUDNN_LIB="$d/lib/libcudnn.so.9" "-DCMAKE_CUDA_FLAGS=-I$d/include")
        [ -d "$d/include" ] && prefix_args+=("-DCMAKE_C_FLAGS=-I/tmp/kiln-prefix/usr/include -I$d/include")
        export LD_LIBRARY_PATH="$d/lib:${LD_LIBRARY_PATH:-}"
    fi
fi
log "configure: ${prefix_args[*]}"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DKILN_TESTS=OFF -DKILN_CUDA=ON -DKILN_WERROR=${KILN_GPU_WERROR:-OFF} "${prefix_args[@]}" \
    >"$OUT/build.log" 2>&1 && cmake --build build-gpu -j16 >>"$OUT/build.log" 2>&1
rc=$?
log "build rc=$rc in $(( $(date +%s) - t0 )) s"; grep -E "CUDA backend|cuDNN|error" "$OUT/build.log" | head -20 | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || exit 1
K=$PWD/build-gpu/kiln

NODE=${1:-testdata/node}
[ -d "$NODE" ] || NODE=../shared/onnx-backend-tests/node
if [ -z "${SKIP_NODE:-}" ] && [ -d "$NODE" ]; then
    t0=$(date +%s)
    if [ -z "${SKIP_FALLBACK:-}" ]; then
        timeout 120 $K verify "$NODE" --backend cuda --no-fork --json "$OUT/node_cuda.json" >"$OUT/node_cuda.log" 2>&1
        log "node tests --backend cuda (CPU fallback allowed): rc=$? $(tail -1 "$OUT/node_cuda.log") ($(( $(date +%s) - t0 )) s)"
    fi
    timeout 90 $K verify "$NODE" --backend cuda --gpu-only --no-fork --json "$OUT/node_gpu_only.json" \
        >"$OUT/node_gpu_only.log" 2>&1
    log "node tests --backend cuda --gpu-only: rc=$? $(tail -1 "$OUT/node_gpu_only.log")"
    if [ -z "${SKIP_NOTF32:-}" ]; then
        timeout 60 $K verify "$NODE" --backend cuda --gpu-only --noTF32 --no-fork >"$OUT/node_notf32.log" 2>&1
        log "node tests --backend cuda --gpu-only --noTF32: rc=$? $(tail -1 "$OUT/node_notf32.log")"
    fi
    timeout 90 $K verify "$NODE" --backend cuda --gpu-only --fp16 --no-fork >"$OUT/node_fp16.log" 2>&1
    log "node tests --backend cuda --gpu-only --fp16: rc=$? $(tail -1 "$OUT/node_fp16.log")"
    grep -E "^(FAIL|fail)" "$OUT/node_fp16.log" | head -20 | tee -a "$OUT/summary.txt"
    grep -E "^(FAIL|fail)" "$OUT/node_gpu_only.log" | head -40 | tee -a "$OUT/summary.txt"
fi

if [ -z "${SKIP_EXEC:-}" ]; then
    t0=$(date +%s)
    PYTHONUNBUFFERED=1 timeout ${EXEC_TIMEOUT:-240} python3 tests/gpu/exec_gpu.py --kiln $K --out /tmp/zoo-exec \
        >"$OUT/exec.log" 2>&1
    log "exec/run on the GPU (graphs, engines, flags): rc=$? ($(( $(date +%s) - t0 )) s)"
    tee -a "$OUT/summary.txt" <"$OUT/exec.log" | tail -60
fi

if [ -z "${SKIP_ZOO:-}" ]; then
    t0=$(date +%s)
    PYTHONUNBUFFERED=1 timeout ${ZOO_TIMEOUT:-180} python3 tests/gpu/zoo_cases.py --out /tmp/zoo --kiln $K >"$OUT/zoo.log" 2>&1
    log "zoo vs ONNX Runtime: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -24 "$OUT/zoo.log" | tee -a "$OUT/summary.txt"
fi

if [ -z "${SKIP_BENCH:-}" ] && [ -z "${SKIP_ZOO:-}" ]; then
    bench_args=()
    bench_timeout=${BENCH_TIMEOUT:-300}
    if [ -n "${BENCH_COMPILE:-}" ]; then
        bench_args+=(--compile --compile-timeout "${COMPILE_TIMEOUT:-240}")
        bench_timeout=${BENCH_TIMEOUT:-$(( 300 + 2 * ${COMPILE_TIMEOUT:-240} ))}
    fi
    PYTHONUNBUFFERED=1 timeout $bench_timeout python3 bench/bench_cuda.py --kiln $K --zoo /tmp/zoo ${bench_args[@]+"${bench_args[@]}"} \
        >"$OUT/bench.log" 2>&1
    log "bench rc=$?"; tail -60 "$OUT/bench.log" | tee -a "$OUT/summary.txt"
fi
