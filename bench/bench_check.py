#!/usr/bin/env python3
"""bench_check.py - how long `kiln check` takes on a 1,000-node model.

Builds a transformer-ish chain with a symbolic batch and sequence length (blocks of
MatMul -> Add(bias) -> Relu -> MatMul -> Add(residual), hidden width 64, so weights stay
small and the time measured is the checking, not disk reads), then runs
`kiln check --time` with a three-point profile (so inference runs 4 times: symbolic plus
min/opt/max) and reports the phase times kiln prints, the median of several runs, and
the process wall time next to that of a 1-node model (process start-up baseline).

Usage: python3 bench/bench_check.py [--kiln build/kiln] [--runs 15] [--nodes 1000]
No thresholds here: results go to docs/BENCHMARKS.md ("Model checking").
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = 64


def make_chain(path, n_nodes):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    blocks = max(1, n_nodes // 5)
    for b in range(blocks):
        w1 = numpy_helper.from_array((rng.standard_normal((HIDDEN, HIDDEN)) * 0.05).astype(np.float32), f"b{b}.w1")
        b1 = numpy_helper.from_array(np.zeros(HIDDEN, np.float32), f"b{b}.b1")
        w2 = numpy_helper.from_array((rng.standard_normal((HIDDEN, HIDDEN)) * 0.05).astype(np.float32), f"b{b}.w2")
        inits += [w1, b1, w2]
        p = f"/blocks.{b}"
        nodes += [
            helper.make_node("MatMul", [prev, w1.name], [f"{p}/fc1"], name=f"{p}/fc1/MatMul"),
            helper.make_node("Add", [f"{p}/fc1", b1.name], [f"{p}/fc1b"], name=f"{p}/fc1/Add"),
            helper.make_node("Relu", [f"{p}/fc1b"], [f"{p}/act"], name=f"{p}/act/Relu"),
            helper.make_node("MatMul", [f"{p}/act", w2.name], [f"{p}/fc2"], name=f"{p}/fc2/MatMul"),
            helper.make_node("Add", [prev, f"{p}/fc2"], [f"{p}/out"], name=f"{p}/residual/Add"),
        ]
        prev = f"{p}/out"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq_len", HIDDEN])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq_len", HIDDEN])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench_check")
    m.ir_version = 8
    onnx.save(m, str(path))
    return len(nodes)


def make_tiny(path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


PHASE = re.compile(r"([a-z+]+) ([0-9.]+) ms")


def run(kiln, model, flags):
    t = time.perf_counter()
    p = subprocess.run([kiln, "check", str(model), "--time", *flags], capture_output=True, text=True)
    wall = (time.perf_counter() - t) * 1e3
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("time:")]
    if p.returncode not in (0, 1) or not line:
        sys.exit(f"kiln check failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}")
    return wall, dict((k, float(v)) for k, v in PHASE.findall(line[0])), p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln")))
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--nodes", type=int, default=1000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        model, tiny = Path(d) / "chain.onnx", Path(d) / "tiny.onnx"
        n = make_chain(model, a.nodes)
        make_tiny(tiny)
        size_mib = os.path.getsize(model) / 2**20
        flags = ["--minShapes=x:1x1x64", "--optShapes=x:8x128x64", "--maxShapes=x:32x512x64"]
        _, _, first = run(a.kiln, model, flags)  # warm the page cache
        summary = first.stdout.strip().splitlines()[-1]
        results = [run(a.kiln, model, flags) for _ in range(a.runs)]
        base = [run(a.kiln, tiny, [])[0] for _ in range(a.runs)]
    phases = {k: statistics.median(r[1][k] for r in results) for k in results[0][1]}
    wall = statistics.median(r[0] for r in results)
    print(f"model: {n} nodes, hidden {HIDDEN}, {size_mib:.1f} MiB, symbolic [batch, seq_len], profile "
          f"min/opt/max; {a.runs} runs, medians")
    print(f"kiln says: {summary}")
    best = {k: min(r[1][k] for r in results) for k in results[0][1]}
    print(f"  {'phase':16s} {'median':>8s}    {'min':>8s}")
    for k, v in phases.items():
        print(f"  {k:16s} {v:8.2f} ms {best[k]:8.2f} ms")
    print(f"  process wall     {wall:8.2f} ms (1-node model: {statistics.median(base):.2f} ms; "
          f"difference {wall - statistics.median(base):.2f} ms)")


if __name__ == "__main__":
    main()
