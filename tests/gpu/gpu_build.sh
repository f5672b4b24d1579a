# gpu_build.sh - sourced by the GPU check scripts (run_gpu.sh, fp16_check.sh,
# conv_graph_check.sh): sets OUT and log(), prints the GPU, finds cJSON and cuDNN on a
# machine without network (cJSON from debs/*.deb unpacked into a private prefix; cuDNN
# from the system, else the one PyTorch's wheels carry), builds kiln with CUDA into
# build-gpu and sets K to the binary. Exits the calling script when the build fails.
# Warnings are not errors there (that machine's gcc flags a maybe-uninitialized in
# cpu_rnn.c); KILN_GPU_WERROR=ON restores -Werror.
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee -a "$OUT/summary.txt"

prefix_args=()
if [ ! -f /usr/include/cjson/cJSON.h ] && ls debs/*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/kiln-prefix
    for f in debs/*.deb; do dpkg -x "$f" /tmp/kiln-prefix; done
    lib=/tmp/kiln-prefix/usr/lib/x86_64-linux-gnu
    prefix_args+=(-DCJSON_LIB="$lib/libcjson.so" "-DCMAKE_C_FLAGS=-I/tmp/kiln-prefix/usr/include")
    export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
fi
if ! ldconfig -p | grep -q 'libcudnn\.so'; then
    d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null)
    if [ -n "$d" ] && [ -f "$d/lib/libcudnn.so.9" ]; then
        prefix_args+=(-DCUDNN_LIB="$d/lib/libcudnn.so.9" "-DCMAKE_CUDA_FLAGS=-I$d/include")
        [ -d "$d/include" ] && prefix_args+=("-DCMAKE_C_FLAGS=-I/tmp/kiln-prefix/usr/include -I$d/include")
        export LD_LIBRARY_PATH="$d/lib:${LD_LIBRARY_PATH:-}"
        grep -h "define CUDNN_M[AI][JN]OR" "$d/include/cudnn_version.h" 2>/dev/null | tr '\n' ' ' | tee -a "$OUT/summary.txt"; echo
    fi
fi
log "configure: ${prefix_args[*]}"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DKILN_TESTS=OFF -DKILN_CUDA=ON -DKILN_WERROR=${KILN_GPU_WERROR:-OFF} "${prefix_args[@]}" \
    >"$OUT/build.log" 2>&1 && cmake --build build-gpu -j16 >>"$OUT/build.log" 2>&1
rc=$?
log "build rc=$rc in $(( $(date +%s) - t0 )) s"; grep -E "CUDA backend|cuDNN|error:" "$OUT/build.log" | head -20 | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || exit 1
K=$PWD/build-gpu/kiln
