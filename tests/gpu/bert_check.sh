#!/usr/bin/env bash
# bert_check.sh - BERT-base/128 on the GPU in one call: build, timings, correctness,
# optional per-kernel times. Run from the repository root on the GPU machine:
#     OUT=$OUT bash tests/gpu/bert_check.sh [timings] [ab] [correct] [nodes] [torch] [ncu]
# timings: kiln run (CUDA graph, incl. H2D/D2H) and kiln exec (GPU Compute Time) medians,
#          FP16 batch 1 and 8, TF32 batch 1;
# ab:      the same FP16 runs without the Q/K/V merge (KILN_NO_MERGE_QKV=1) and with the
#          CUDA-core attention kernel (KILN_CUDA_ATT_SIMT=1);
# correct: tests/gpu/attention_cases.py, zoo_cases.py --models bert --variants fp16,tf32,
#          exec_gpu.py --models bert;
# nodes:   the ONNX Attention node tests (testdata/node/test_attention*) --gpu-only, TF32
#          and --fp16 (needs testdata/ copied next to the tree);
# torch:   torch CUDA-graph rows for BERT FP16 batch 1 and 8 (bench/bench_cuda.py);
# quick:   kiln run / kiln exec FP16 batch 1 and 8 only; tf32: the same at TF32 batch 1; attcases: attention_cases.py only;
# ncu:     per-kernel GPU times (ncu, warm caches, one node-by-node run after the first) at
#          the batches in NCU_BATCHES (default 8) -> $OUT/ncu_b<B>.csv.
OUT=${OUT:-$PWD/gpu-out}
. tests/gpu/gpu_build.sh
python3 tools/make_zoo.py --out /tmp/zoo --models bert >"$OUT/zoo.log" 2>&1 || log "make_zoo failed"
M=/tmp/zoo/bert.onnx
sh() { echo "input_ids:${1}x128,attention_mask:${1}x128"; }
krun() { # label env... -- args
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local o
    o=$(env "${envs[@]}" timeout 120 "$K" run "$M" --backend cuda --iterations 300 --warmUp 30 "$@" 2>&1)
    echo "$o" >>"$OUT/runs.log"
    log "run $label: $(echo "$o" | grep -oE 'median = [0-9.]+ ms' | head -1) | $(echo "$o" | grep -E '^cuda graph: replayed|compute' | head -1)"
}
kexec() { # label env... -- args
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local o
    o=$(env "${envs[@]}" timeout 120 "$K" exec --onnx=$M --backend=cuda --iterations=500 --warmUp=300 --duration=0 "$@" 2>&1)
    echo "$o" >>"$OUT/exec.log"
    log "exec $label: $(echo "$o" | grep -oE 'GPU Compute Time: min = [0-9.]+ ms, max = [0-9.]+ ms, mean = [0-9.]+ ms, median = [0-9.]+ ms' | head -1) | $(echo "$o" | grep -oE 'Latency: min = [0-9.]+ ms, max = [0-9.]+ ms, mean = [0-9.]+ ms, median = [0-9.]+ ms' | head -1)"
}
for what in "$@"; do
    case $what in
    timings)
        for b in 1 8; do
            krun "fp16 b$b" -- --fp16 --shapes "$(sh $b)"
            kexec "fp16 b$b" -- --fp16 --shapes="$(sh $b)"
        done
        krun "tf32 b1" -- --shapes "$(sh 1)"
        kexec "tf32 b1" -- --shapes="$(sh 1)"
        krun "tf32 b8" -- --shapes "$(sh 8)"
        ;;
    quick)
        for b in 1 8; do
            krun "fp16 b$b" -- --fp16 --shapes "$(sh $b)"
            kexec "fp16 b$b" -- --fp16 --shapes="$(sh $b)"
        done
        ;;
    tf32)
        krun "tf32 b1" -- --shapes "$(sh 1)"
        kexec "tf32 b1" -- --shapes="$(sh 1)"
        ;;
    attcases)
        timeout 150 python3 tests/gpu/attention_cases.py --kiln "$K" >"$OUT/attention_cases.txt" 2>&1
        log "attention cases rc=$?: $(grep -c '^PASS' "$OUT/attention_cases.txt") PASS lines, $(tail -1 "$OUT/attention_cases.txt")"
        ;;
    ab)
        for b in 1 8; do
            krun "fp16 b$b no-merge" KILN_NO_MERGE_QKV=1 -- --fp16 --shapes "$(sh $b)"
            krun "fp16 b$b simt-attention" KILN_CUDA_ATT_SIMT=1 -- --fp16 --shapes "$(sh $b)"
        done
        ;;
    correct)
        timeout 150 python3 tests/gpu/attention_cases.py --kiln "$K" >"$OUT/attention_cases.txt" 2>&1
        log "attention cases rc=$?: $(grep -c '^PASS' "$OUT/attention_cases.txt") PASS lines, $(tail -1 "$OUT/attention_cases.txt")"
        timeout 200 python3 tests/gpu/zoo_cases.py --kiln "$K" --models bert --variants fp16,tf32 --out /tmp/zoo \
            >"$OUT/zoo_cases.txt" 2>&1
        log "zoo_cases rc=$?"; grep -iE "pass|fail|max" "$OUT/zoo_cases.txt" | tail -8 | tee -a "$OUT/summary.txt"
        timeout 200 python3 tests/gpu/exec_gpu.py --kiln "$K" --models bert >"$OUT/exec_gpu.txt" 2>&1
        log "exec_gpu rc=$?"; tail -12 "$OUT/exec_gpu.txt" | tee -a "$OUT/summary.txt"
        ;;
    nodes)
        mkdir -p /tmp/attnodes
        for d in testdata/node/test_attention*; do [ -d "$d" ] && ln -sfn "$PWD/$d" /tmp/attnodes/; done
        log "attention node cases: $(ls /tmp/attnodes | wc -l)"
        for f in "" --fp16; do
            timeout 120 "$K" verify /tmp/attnodes --backend cuda --gpu-only --no-fork $f >"$OUT/nodes$f.txt" 2>&1
            log "node tests ${f:-tf32} rc=$?: $(tail -1 "$OUT/nodes$f.txt")"
        done
        ;;
    torch)
        timeout 150 python3 - >"$OUT/torch.txt" 2>&1 <<'EOF'
import sys
sys.path.insert(0, "bench"); sys.path.insert(0, "tools")
import bench_cuda
for b in (1, 8):
    for row in bench_cuda.torch_rows("bert", b, ("fp16",), 300, eager=False):
        print("torch bert b%d" % b, row)
EOF
        log "torch rc=$?"; tail -4 "$OUT/torch.txt" | tee -a "$OUT/summary.txt"
        ;;
    ncu)
        for b in ${NCU_BATCHES:-8}; do
            timeout 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --clock-control none \
                --cache-control none "$K" run "$M" --backend cuda --fp16 --shapes "$(sh $b)" --noCudaGraph \
                --iterations 2 --warmUp 0 >"$OUT/ncu_b$b.csv" 2>"$OUT/ncu_b$b.err"
            log "ncu b$b rc=$? lines $(wc -l <"$OUT/ncu_b$b.csv")"
        done
        ;;
    esac
done
log "done"
