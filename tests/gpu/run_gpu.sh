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
. "$(dirname "$0")/gpu_build.sh"   # OUT, log(), cJSON/cuDNN discovery, build-gpu, K

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
    PYTHONUNBUFFERED=1 timeout ${EXEC_TIMEOUT:-240} python3 tests/gpu/exec_gpu.py --kiln $K --out /tmp/zoo \
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
