#!/usr/bin/env bash
# conv_graph_check.sh - one GPU call for the cuDNN graph-API convolution path
# (src/backends/cuda/cuda_conv_graph.c): build, the ONNX Conv node tests on the GPU
# (TF32 and --fp16, --gpu-only), ResNet-50 / MobileNetV2 against ONNX Runtime in FP16
# (NCHW and channels-last), ResNet-50 FP16 latency with the graph path on/off in both
# layouts, the engine choices (KILN_CUDA_DEBUG_CONV=1) and a timing-cache round trip of
# a GPU engine build. Logs and summary.txt go to $OUT (default ./gpu-out).
# Usage (repository root): tests/gpu/conv_graph_check.sh [NODE_TEST_DIR]
set -uo pipefail
. "$(dirname "$0")/gpu_build.sh"   # OUT, log(), cJSON/cuDNN discovery, build-gpu, K
if [ -n "${QUICK:-}" ]; then # QUICK=1: only the default FP16 run and the engine round trip
    python3 tools/make_zoo.py --out /tmp/zoo --models resnet50 >"$OUT/make_zoo.log" 2>&1
    $K run /tmp/zoo/resnet50.onnx --backend cuda --shapes input:1x3x224x224 --fp16 --iterations 200 --warmUp 10 \
        >"$OUT/run.log" 2>&1
    log "resnet50 fp16: rc=$? $(grep -E 'median|diff' "$OUT/run.log" | tr '\n' ' ' | cut -c1-300)"
    EXEC_ARGS="--duration=0 --iterations=20 --warmUp=0"
else
NODE=${1:-testdata/node}
rm -rf /tmp/convnode && mkdir -p /tmp/convnode && cp -r "$NODE"/test_*conv* /tmp/convnode/ 2>/dev/null
for extra in "" "--fp16"; do
    KILN_CUDA_DEBUG_CONV=1 timeout 60 $K verify /tmp/convnode --backend cuda --gpu-only $extra --no-fork \
        >"$OUT/node${extra:+_fp16}.log" 2>"$OUT/node${extra:+_fp16}.err"
    log "conv node tests --gpu-only $extra: rc=$? $(tail -1 "$OUT/node${extra:+_fp16}.log")"
    grep -iE "^ *fail" "$OUT/node${extra:+_fp16}.log" | head -10 | tee -a "$OUT/summary.txt"
    grep -cE "chose position|cached position" "$OUT/node${extra:+_fp16}.err" | sed 's/^/   graph plans: /' | tee -a "$OUT/summary.txt"
done
python3 tools/make_zoo.py --out /tmp/zoo --models resnet50,mobilenetv2 >"$OUT/make_zoo.log" 2>&1
R="$K run /tmp/zoo/resnet50.onnx --backend cuda --shapes input:1x3x224x224 --fp16"
KILN_CUDA_DEBUG_CONV=1 $R --iterations 3 --warmUp 0 >"$OUT/debug_nhwc.log" 2>&1
log "nhwc plans: fused $(grep -c 'form 1: chose' "$OUT/debug_nhwc.log") conv-only $(grep -c 'form 0: chose' "$OUT/debug_nhwc.log") none $(grep -c 'no engine config' "$OUT/debug_nhwc.log") refused $(grep -c 'graph refused' "$OUT/debug_nhwc.log")"
KILN_NHWC=0 KILN_CUDA_DEBUG_CONV=1 $R --iterations 3 --warmUp 0 >"$OUT/debug_nchw.log" 2>&1
log "nchw plans: fused $(grep -c 'form 1: chose' "$OUT/debug_nchw.log") conv-only $(grep -c 'form 0: chose' "$OUT/debug_nchw.log") none $(grep -c 'no engine config' "$OUT/debug_nchw.log")"
# configurations timed (env assignments; "-" = defaults): channels-last is the --fp16 default of
# kiln run since this branch, KILN_NHWC=0 gives NCHW
CFGS=${CFGS:-"- KILN_CUDA_CONV_1X1_GEMM=1 KILN_CUDA_CONV_GRAPH=0 KILN_NHWC=0 KILN_NHWC=0,KILN_CUDA_CONV_GRAPH=0"}
for cfg0 in $CFGS; do
    cfg=${cfg0//,/ }; [ "$cfg" = "-" ] && cfg=""
    for rep in ${REPS:-1 2}; do
        env $cfg $R --iterations 300 --warmUp 30 >"$OUT/run.log" 2>&1
        log "resnet50 fp16 [$cfg] #$rep: rc=$? $(grep -E 'median|diff' "$OUT/run.log" | tr '\n' ' ' | cut -c1-300)"
    done
done
M="$K run /tmp/zoo/mobilenetv2.onnx --backend cuda --shapes input:1x3x224x224 --fp16 --iterations 300 --warmUp 30"
for cfg in "" "KILN_CUDA_CONV_GRAPH=0"; do
    env $cfg $M >"$OUT/run.log" 2>&1
    log "mobilenetv2 fp16 [$cfg]: rc=$? $(grep -E 'median|diff' "$OUT/run.log" | tr '\n' ' ' | cut -c1-300)"
done
$K run /tmp/zoo/resnet50.onnx --backend cuda --shapes input:1x3x224x224 --iterations 300 --warmUp 30 >"$OUT/run.log" 2>&1
log "resnet50 tf32: $(grep -E 'median' "$OUT/run.log" | tr '\n' ' ' | cut -c1-200)"
for cfg in "" "KILN_CUDA_CONV_GRAPH=0"; do # batch 32 throughput, channels-last
    env $cfg $K run /tmp/zoo/resnet50.onnx --backend cuda --shapes input:32x3x224x224 --fp16 --iterations 100 \
        --warmUp 10 >"$OUT/run.log" 2>&1
    log "resnet50 fp16 b32 [$cfg]: $(grep -E 'median' "$OUT/run.log" | tr '\n' ' ' | cut -c1-200)"
done
if [ -z "${NO_PROFILE:-}" ]; then
    $R --iterations 200 --warmUp 5 --profile --noCudaGraph >"$OUT/profile.log" 2>&1
    sed -n '/by op type/,$p' "$OUT/profile.log" | head -14 | tee -a "$OUT/summary.txt"
fi
if [ -z "${NO_ZOO:-}" ]; then
t0=$(date +%s)
PYTHONUNBUFFERED=1 timeout ${ZOO_TIMEOUT:-120} python3 tests/gpu/zoo_cases.py --out /tmp/zoo --kiln $K \
    --models resnet50,mobilenetv2 --variants "fp16,fp16nhwc" >"$OUT/zoo.log" 2>&1
log "zoo vs ONNX Runtime: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "rc=|max|worst" "$OUT/zoo.log" | head -20 | tee -a "$OUT/summary.txt"
fi
fi
rm -f /tmp/tc.cache
for i in 1 2; do
    t0=$(date +%s.%N)
    KILN_CUDA_DEBUG_CONV=1 $K exec --onnx=/tmp/zoo/resnet50.onnx --backend=cuda --fp16 --saveEngine=/tmp/r50.engine \
        --timingCacheFile=/tmp/tc.cache --shapes=input:1x3x224x224 ${EXEC_ARGS:-} >"$OUT/exec$i.log" 2>&1
    log "engine build $i: rc=$? $(python3 -c "import time;print(round(time.time()-$t0,2))") s; $(grep -iE 'tactics|built in' "$OUT/exec$i.log" | head -2 | tr '\n' ' ') graph-cached $(grep -c 'cached position' "$OUT/exec$i.log") timed $(grep -c 'chose position' "$OUT/exec$i.log")"
done
KILN_CUDA_DEBUG_CONV=1 $K exec --loadEngine=/tmp/r50.engine --shapes=input:1x3x224x224 ${EXEC_ARGS:-} >"$OUT/exec_load.log" 2>&1
log "engine load+run: rc=$? $(grep -E 'GPU Compute Time' "$OUT/exec_load.log" | head -1 | cut -c1-200) graph-cached $(grep -c 'cached position' "$OUT/exec_load.log") timed $(grep -c 'chose position' "$OUT/exec_load.log")"
grep -E "FAILED|error" "$OUT/exec_load.log" | head -3 | tee -a "$OUT/summary.txt"
