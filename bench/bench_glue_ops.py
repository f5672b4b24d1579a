#!/usr/bin/env python3
"""bench_glue_ops.py - the non-convolution ops of ResNet-50 one by one: kiln binaries
against ONNX Runtime on single-node models of ResNet's shapes.

Models (written to --dir): MaxPool 3x3/2 pad 1 over 64x112x112 at batch 1 and 8 ("maxpool",
"maxpool8"), and the classifier Gemm 2048 -> 1000 with transB=1 and a bias at batch 1 and 8
("fc1", "fc8"; constant weight, so kiln's GEMV / packed paths apply). Each round runs
every kiln binary in turn (`kiln run --iterations N`, its "min") and ORT in-process (min
over N runs), so all see the same load; the table gives the minimum over rounds, in ms.
Inside a network the fc weight (8 MB) comes from memory, here it stays in the L3 cache
between runs, so "fc" figures here are lower bounds of the in-network times.

Usage: python3 bench/bench_glue_ops.py --kiln build/kiln[,OTHER/kiln] [--threads 1]
                                       [--rounds 3] [--iters 200] [--models maxpool,fc1]
"""
import argparse
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper


def save(nodes, inputs, outputs, inits, path):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def make_models(d: Path):
    d.mkdir(parents=True, exist_ok=True)
    vi = helper.make_tensor_value_info
    for name, b in (("maxpool", 1), ("maxpool8", 8)):
        save([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
             [vi("x", T.FLOAT, [b, 64, 112, 112])], [vi("y", T.FLOAT, [b, 64, 56, 56])], [], d / f"{name}.onnx")
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((1000, 2048)) * 0.02).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal((1000,)).astype(np.float32), "B")
    for b in (1, 8):
        save([helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)], [vi("x", T.FLOAT, [b, 2048])],
             [vi("y", T.FLOAT, [b, 1000])], [w, bias], d / f"fc{b}.onnx")


def ort_min(path, threads, iters):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    feed = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)}
    for _ in range(5):
        s.run(None, feed)
    best = float("inf")
    for _ in range(iters):
        t = time.perf_counter()
        s.run(None, feed)
        best = min(best, (time.perf_counter() - t) * 1e3)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/kiln", help="comma-separated kiln binaries")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--models", default="maxpool,maxpool8,fc1,fc8")
    ap.add_argument("--dir", default="build/glue_ops")
    a = ap.parse_args()
    d = Path(a.dir)
    make_models(d)
    bins = a.kiln.split(",")
    models = a.models.split(",")
    res = {}
    for _ in range(a.rounds):
        for m in models:
            path = d / f"{m}.onnx"
            for b in bins:
                out = subprocess.run([b, "run", str(path), "--iterations", str(a.iters), "--threads", str(a.threads)],
                                     capture_output=True, text=True).stdout
                mm = re.search(r"min = ([\d.]+) ms", out)
                res.setdefault((m, b), []).append(float(mm.group(1)) if mm else float("nan"))
            res.setdefault((m, "ORT"), []).append(ort_min(path, a.threads, a.iters))
    print(f"threads {a.threads}, rounds {a.rounds}, load average {open('/proc/loadavg').read().split()[:3]}")
    cols = bins + ["ORT"]
    print("| model | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for m in models:
        print(f"| {m} | " + " | ".join(f"{min(res[(m, c)]):.3f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
