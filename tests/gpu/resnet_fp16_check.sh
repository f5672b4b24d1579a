#!/usr/bin/env bash
# resnet_fp16_check.sh - ResNet-50 FP16 on the GPU machine in one call (session 3, issue 7).
# Correctness: the zoo conv models against ONNX Runtime (ZOO_VARIANTS, default fp16,tf32),
# the layout kernels' cases (tests/gpu/layout_cases.py), the transpose / pool node tests
# --gpu-only when NODE=DIR names the copied node tests, tests/gpu/exec_gpu.py (EXEC=1).
# Timings (`kiln exec`): batch 1, 8 and 128 (GPU compute, H2D, latency, throughput; per-layer
# profiles with PROFILE=1), --infStreams=2 at batch 128, the FP16 engine build at batch 1
# with a fresh and a warm timing cache; AB=1 adds KILN_STEM_PAD=8 and =0 runs and
# KILN_CUDA_CONV_GRAPH_TOP=24 at batch 8; RUN=1 adds `kiln run` at batch 1, 8, 128.
# Summary lines on stdout; logs in $OUT/logs.tgz.
set -uo pipefail
. tests/gpu/gpu_build.sh
M=/tmp/zoo/resnet50.onnx
python3 tools/make_zoo.py --out /tmp/zoo --models resnet50,mobilenetv2 > "$OUT/zoo.log" 2>&1
L=/tmp/rlogs; mkdir -p $L
sum() { grep -E "Engine built|Tactics:|Throughput|GPU Compute Time: min|H2D Latency|\[I\] Latency: min" "$1" |
        sed -E 's/\[[0-9/:-]+\] \[I\] //; s/, (percentile|max)[^,]*//g; s/min = [0-9.]+ ms, //' | sed "s/^/$2: /"; }
ex() { tag=$1; shift; timeout 120 $K exec --backend=cuda --duration=0 --warmUp=200 "$@" > $L/$tag.txt 2>&1
       echo "$tag: rc=$?"; sum $L/$tag.txt $tag; }
prof() { sed -n '/=== Profile/,$p' "$1" | sort -k3 -n -r | sed -n 2,${2}p | awk '{print $(NF-3), $NF}' | tr '\n' ';'; echo; }
S1=--shapes=input:1x3x224x224; S8=--shapes=input:8x3x224x224; S128=--shapes=input:128x3x224x224
P=${PROFILE:+--dumpProfile --separateProfileRun}
if [ -z "${NO_ZOO:-}" ]; then
  timeout 200 python3 tests/gpu/zoo_cases.py --kiln $K --out /tmp/zoo --models ${ZOO_MODELS:-resnet50,mobilenetv2} \
      --variants ${ZOO_VARIANTS:-fp16,tf32} 2>&1 | tail -20
fi
timeout 60 python3 tests/gpu/layout_cases.py --kiln $K 2>&1 | tail -12
if [ -n "${NODE:-}" ]; then
  for f in transpose pool flatten; do
    $K verify $NODE --backend cuda --gpu-only --fp16 --no-fork --filter $f 2>&1 | tail -1 | sed "s/^/node $f fp16: /"
  done
fi
[ -n "${EXEC:-}" ] && timeout 150 python3 tests/gpu/exec_gpu.py --kiln $K --models resnet50 2>&1 | tail -14
TC=/tmp/tc.cache; rm -f $TC
ex bfresh --onnx=$M --fp16 $S1 --timingCacheFile=$TC --skipInference
ex bwarm --onnx=$M --fp16 $S1 --timingCacheFile=$TC --skipInference
ex b1 --onnx=$M --fp16 $S1 --iterations=500 --timingCacheFile=$TC
ex b8 --onnx=$M --fp16 $S8 --iterations=300 --timingCacheFile=$TC $P
[ -n "${PROFILE:-}" ] && { echo -n "b8 top: "; prof $L/b8.txt 10; }
ex b128 --onnx=$M --fp16 $S128 --iterations=100 --timingCacheFile=$TC --saveEngine=/tmp/r128.engine $P
[ -n "${PROFILE:-}" ] && { echo -n "b128 top: "; prof $L/b128.txt 12; }
ex b128s2 --loadEngine=/tmp/r128.engine $S128 --iterations=200 --infStreams=2
if [ -n "${AB:-}" ]; then
  KILN_STEM_PAD=8 ex b1pad8 --onnx=$M --fp16 $S1 --iterations=500 --timingCacheFile=$TC
  KILN_STEM_PAD=8 ex b8pad8 --onnx=$M --fp16 $S8 --iterations=300 --timingCacheFile=$TC
  KILN_STEM_PAD=0 ex b8pad0 --onnx=$M --fp16 $S8 --iterations=300 --timingCacheFile=$TC
  KILN_CUDA_CONV_GRAPH_TOP=24 ex b8top24 --onnx=$M --fp16 $S8 --iterations=300
fi
if [ -n "${RUN:-}" ]; then
  for b in 1 8 128; do
    timeout 60 $K run $M --backend cuda --fp16 --shapes input:${b}x3x224x224 --iterations 200 --warmUp 30 > $L/run_b$b.txt 2>&1
    echo "run b$b: rc=$? $(grep -E '^(latency|cuda graph)' $L/run_b$b.txt | tr '\n' ';')"
  done
fi
cd $L && tar czf $OUT/logs.tgz *.txt
