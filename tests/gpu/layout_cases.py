#!/usr/bin/env python3
"""layout_cases.py - GPU checks of the channels-last layout kernels (src/backends/cuda/cuda_layout.cu).

Writes small ONNX backend-test style cases (model + ONNX Runtime reference) and runs
`kiln verify --backend cuda --gpu-only` on them in FP16 (channels-last: the pooling runs in
NHWC between two tiled transposes) and TF32 (NCHW pooling; transposes through the tiled
kernel): MaxPool / AveragePool with 8-channel groups (the 16-byte half path, 3x3 unrolled
and general windows, pads, count_include_pad, ceil mode), channel counts that are not a
multiple of 8 (the scalar path), and Transposes that are batched 2-D, copies (only size-1
axes move) or general. Needs a GPU machine with onnxruntime.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def case(out, name, node, x_shape, y_rank):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], name, [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    d = os.path.join(out, "test_" + name)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    rng = np.random.default_rng(len(name))
    xv = rng.standard_normal(x_shape).astype(np.float32)
    ref = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
    open(os.path.join(ds, "input_0.pb"), "wb").write(numpy_helper.from_array(xv, "x").SerializeToString())
    open(os.path.join(ds, "output_0.pb"), "wb").write(numpy_helper.from_array(ref, "y").SerializeToString())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default="/tmp/layout-cases")
    a = ap.parse_args()
    P = helper.make_node
    pools = [
        ("maxpool_3x3_s2_p1_c16", P("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [2, 16, 15, 13]),
        ("maxpool_2x2_s2_c64", P("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [3, 64, 8, 10]),
        ("maxpool_3x3_ceil_c8", P("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), [1, 8, 10, 10]),
        ("avgpool_3x3_p1_c16", P("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [2, 16, 7, 9]),
        ("avgpool_3x3_p1_incl_c16", P("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), [2, 16, 7, 9]),
        ("avgpool_2x3_s2_c24", P("AveragePool", ["x"], ["y"], kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 0, 1]), [2, 24, 9, 9]),
        ("maxpool_3x3_s2_c12", P("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [2, 12, 9, 9]),
        ("avgpool_2x2_c5", P("AveragePool", ["x"], ["y"], kernel_shape=[2, 2]), [1, 5, 6, 6]),
    ]
    transposes = [
        ("transpose_nchw_nhwc", [0, 2, 3, 1], [2, 40, 7, 9]),
        ("transpose_nhwc_nchw", [0, 3, 1, 2], [2, 7, 9, 40]),
        ("transpose_2d_odd", [1, 0], [33, 65]),
        ("transpose_size1_axes", [0, 3, 1, 2], [4, 1, 1, 70]),
        ("transpose_general", [2, 1, 0], [3, 5, 7]),
        ("transpose_outer_block", [1, 0, 2], [3, 5, 7]),
        ("transpose_merge_batched", [2, 0, 1], [6, 5, 37]),
    ]
    for name, node, shape in pools:
        case(a.out, name, node, shape, 4)
    for name, perm, shape in transposes:
        case(a.out, name, P("Transpose", ["x"], ["y"], perm=perm), shape, len(shape))
    worst = 0
    for flags in (["--fp16"], []):
        r = subprocess.run([a.kiln, "verify", a.out, "--backend", "cuda", "--gpu-only", "--no-fork"] + flags,
                           capture_output=True, text=True)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        print(f"layout cases {' '.join(flags) or '(TF32)'}: rc={r.returncode} {last}")
        bad = [l for l in r.stdout.splitlines() if "FAIL" in l or "skip" in l.lower()]
        for l in bad[:20]:
            print("  ", l[:300])
        if r.returncode:
            print(r.stdout[-3000:], r.stderr[-2000:])
            worst = max(worst, r.returncode)
    sys.exit(worst)


if __name__ == "__main__":
    main()
