#!/usr/bin/env bash
# resnet_fp16_check.sh - ResNet-50 FP16 on the GPU machine in one call (session 3, issue 7):
# build, the zoo conv models against ONNX Runtime (FP16, TF32), the pooling / transpose /
# conv node tests --gpu-only in FP16 (when NODE=DIR names the copied node tests), then
# `kiln exec` timings: batch 1, 8 and 128 (GPU compute, H2D, latency, throughput), the
# padded stem against KILN_STEM_PAD=4 and =0 (NCHW stem) at batch 128, --infStreams=2 at
# batch 128, and per-layer profiles (PROFILE=1). Summary lines on stdout; logs in
# $OUT/logs.tgz. QUICK=1 skips the A/B runs.
set -uo pipefail
. tests/gpu/gpu_build.sh
M=/tmp/zoo/resnet50.onnx
python3 tools/make_zoo.py --out /tmp/zoo --models resnet50,mobilenetv2 > "$OUT/zoo.log" 2>&1
L=/tmp/rlogs; mkdir -p $L
sum() { grep -E "Engine built|Tactics:|Throughput|GPU Compute Time|H2D Latency|\[I\] Latency: min" "$1" |
        sed -E 's/\[[0-9/:-]+\] \[I\] //; s/, (percentile|max)[^,]*//g' | grep -v '\[W\]' | sed "s/^/$2: /"; }
ex() { tag=$1; shift; timeout 120 $K exec --onnx=$M --backend=cuda --fp16 --duration=0 --warmUp=200 "$@" > $L/$tag.txt 2>&1
       echo "$tag: rc=$?"; sum $L/$tag.txt $tag; }
prof() { sed -n '/=== Profile/,$p' "$1" | sort -k3 -n -r | sed -n 2,${2}p | awk '{print $(NF-3), $NF}' | tr '\n' ';'; echo; }
if [ -z "${NO_ZOO:-}" ]; then
  timeout 200 python3 tests/gpu/zoo_cases.py --kiln $K --out /tmp/zoo --models ${ZOO_MODELS:-resnet50} \
      --variants ${ZOO_VARIANTS:-fp16} 2>&1 | tail -20
fi
if [ -n "${NODE:-}" ]; then
  for f in transpose pool conv; do
    $K verify $NODE --backend cuda --gpu-only --fp16 --no-fork --filter $f 2>&1 | tail -1 | sed "s/^/node $f fp16: /"
    $K verify $NODE --backend cuda --gpu-only --no-fork --filter $f 2>&1 | tail -1 | sed "s/^/node $f tf32: /"
  done
fi
TC=/tmp/tc.cache; rm -f $TC
ex b1 --shapes=input:1x3x224x224 --iterations=500 --timingCacheFile=$TC
ex b8 --shapes=input:8x3x224x224 --iterations=300 --timingCacheFile=$TC ${PROFILE:+--dumpProfile --separateProfileRun}
[ -n "${PROFILE:-}" ] && { echo -n "b8 top: "; prof $L/b8.txt 12; }
ex b128 --shapes=input:128x3x224x224 --iterations=100 --timingCacheFile=$TC --saveEngine=/tmp/r128.engine ${PROFILE:+--dumpProfile --separateProfileRun}
[ -n "${PROFILE:-}" ] && { echo -n "b128 top: "; prof $L/b128.txt 16; }
ex b128s2 --loadEngine=/tmp/r128.engine --shapes=input:128x3x224x224 --iterations=200 --infStreams=2
if [ -z "${QUICK:-}" ]; then
  KILN_STEM_PAD=4 ex b128pad4 --shapes=input:128x3x224x224 --iterations=100 --timingCacheFile=$TC ${PROFILE:+--dumpProfile --separateProfileRun}
  [ -n "${PROFILE:-}" ] && { echo -n "pad4 top: "; prof $L/b128pad4.txt 5; }
  KILN_STEM_PAD=0 ex b128pad0 --shapes=input:128x3x224x224 --iterations=100 --timingCacheFile=$TC ${PROFILE:+--dumpProfile --separateProfileRun}
  [ -n "${PROFILE:-}" ] && { echo -n "pad0 top: "; prof $L/b128pad0.txt 5; }
  KILN_STEM_PAD=0 ex b8pad0 --shapes=input:8x3x224x224 --iterations=300 --timingCacheFile=$TC
  KILN_STEM_PAD=0 ex b1pad0 --shapes=input:1x3x224x224 --iterations=500 --timingCacheFile=$TC
fi
if [ -n "${TOP24:-}" ]; then
  KILN_CUDA_CONV_GRAPH_TOP=24 ex b128top24 --shapes=input:128x3x224x224 --iterations=100 --dumpProfile --separateProfileRun
  echo -n "top24 top: "; prof $L/b128top24.txt 16
fi
cd $L && tar czf $OUT/logs.tgz *.txt
