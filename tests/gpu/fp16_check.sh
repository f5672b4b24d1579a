#!/usr/bin/env bash
# fp16_check.sh - the FP16 work's checks in one GPU call (shorter than run_gpu.sh): build,
# node tests on the GPU (TF32 and --fp16, --gpu-only), zoo models against ONNX Runtime
# (TF32 and --fp16), then kiln's latency and a per-node GPU profile of ResNet-50 and BERT
# at batch 1 (FP16, and TF32 for comparison). Logs go to $OUT (default ./gpu-out).
#
# Usage (from the repository root): tests/gpu/fp16_check.sh [NODE_TEST_DIR]
#   env: MODELS (zoo models, default resnet50,bert,mobilenetv2,embedding), NO_NODE=1, NO_PROFILE=1,
#        ATT_NODE=DIR (ONNX Attention node tests, checked --gpu-only in FP32 and FP16),
#        AB_NHWC=1 (also time FP16 ResNet-50 with KILN_NHWC=1, the channels-last pass)
set -uo pipefail
. "$(dirname "$0")/gpu_build.sh"   # OUT, log(), cJSON/cuDNN discovery, build-gpu, K
NODE=${1:-testdata/node}
[ -d "$NODE" ] || NODE=../shared/onnx-backend-tests/node
if [ -z "${NO_NODE:-}" ] && [ -d "$NODE" ]; then
    for extra in "" "--fp16"; do
        t0=$(date +%s)
        timeout 90 $K verify "$NODE" --backend cuda --gpu-only $extra --no-fork >"$OUT/node${extra:+_fp16}.log" 2>&1
        log "node tests --gpu-only $extra: rc=$? $(tail -1 "$OUT/node${extra:+_fp16}.log") ($(( $(date +%s) - t0 )) s)"
        grep -iE "^ *fail" "$OUT/node${extra:+_fp16}.log" | head -15 | tee -a "$OUT/summary.txt"
    done
fi
if [ -n "${ATT_NODE:-}" ] && [ -d "$ATT_NODE" ]; then
    for extra in "" "--fp16"; do
        timeout 60 $K verify "$ATT_NODE" --backend cuda --gpu-only $extra --no-fork >"$OUT/att${extra:+_fp16}.log" 2>&1
        log "attention node tests --gpu-only $extra: rc=$? $(tail -1 "$OUT/att${extra:+_fp16}.log")"
        grep -iE "^ *fail" "$OUT/att${extra:+_fp16}.log" | head -10 | cut -c1-300 | tee -a "$OUT/summary.txt"
    done
fi
t0=$(date +%s)
PYTHONUNBUFFERED=1 timeout ${ZOO_TIMEOUT:-200} python3 tests/gpu/zoo_cases.py --out /tmp/zoo --kiln $K \
    --models "${MODELS:-resnet50,bert,mobilenetv2,embedding}" --variants "tf32,fp16" >"$OUT/zoo.log" 2>&1
log "zoo vs ONNX Runtime: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "rc=|max|worst" "$OUT/zoo.log" | head -40 | tee -a "$OUT/summary.txt"
if [ -n "${AB_NHWC:-}" ]; then # FP16 ResNet-50 with the channels-last pass (opt-in), for comparison
    KILN_NHWC=1 $K run /tmp/zoo/resnet50.onnx --backend cuda --iterations 200 --warmUp 20 --shapes input:1x3x224x224 \
        --fp16 >"$OUT/run_resnet50_fp16_nchw.log" 2>&1
    log "run resnet50 --fp16 KILN_NHWC=1: rc=$? $(grep -E 'median|replayed' "$OUT/run_resnet50_fp16_nchw.log" | tr '\n' ' ' | cut -c1-300)"
fi
for name in resnet50 bert; do
    shapes=input:1x3x224x224
    [ $name = bert ] && shapes=input_ids:1x128,attention_mask:1x128
    for extra in "" "--fp16"; do
        $K run /tmp/zoo/$name.onnx --backend cuda --iterations 200 --warmUp 20 --shapes $shapes $extra \
            >"$OUT/run_${name}${extra:+_fp16}.log" 2>&1
        log "run $name ${extra:-(TF32)}: rc=$? $(grep -E 'median|cuda graph|replay' "$OUT/run_${name}${extra:+_fp16}.log" | tr '\n' ' ' | cut -c1-400)"
        grep -i warning "$OUT/run_${name}${extra:+_fp16}.log" | head -3 | cut -c1-300 | tee -a "$OUT/summary.txt"
        if [ -z "${NO_PROFILE:-}" ]; then
            $K run /tmp/zoo/$name.onnx --backend cuda --iterations 300 --warmUp 5 --shapes $shapes $extra --profile \
                --noCudaGraph >"$OUT/profile_${name}${extra:+_fp16}.log" 2>&1
            sed -n '/by op type/,$p' "$OUT/profile_${name}${extra:+_fp16}.log" | head -14 | tee -a "$OUT/summary.txt"
        fi
    done
done
