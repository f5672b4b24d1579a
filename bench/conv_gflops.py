#!/usr/bin/env python3
"""conv_gflops.py - where an engine's conv time goes, in the network: `kiln exec
--dumpProfile` medians of one run per conv, summed by class, with each class's GFLOP/s
counted as direct convolution (so Winograd layers can exceed the machine's peak). A conv
named like ResNet-50's zoo layers ("layer3.4.conv2_1") falls in the class of its stage and
kind ("layer3.conv2"); any other conv is its own class.

Usage: python3 bench/conv_gflops.py ENGINE [--model build/zoo/resnet50.onnx]
                                           [--shapes input:1x3x224x224] [--threads 1] [--iters 40]
"""
import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import shape_inference

ROOT = Path(__file__).resolve().parent.parent
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))


def conv_flops(model_path, shapes):
    """FLOPs of each Conv node at the given input shapes (2 * Cin/group * k * Cout * OH*OW * N)."""
    m = onnx.load(model_path)
    for i in m.graph.input:
        if i.name in shapes:
            for d, v in zip(i.type.tensor_type.shape.dim, shapes[i.name]):
                d.ClearField("dim_param")
                d.dim_value = v
    m = shape_inference.infer_shapes(m)
    shp = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
           for vi in list(m.graph.value_info) + list(m.graph.output) + list(m.graph.input)}
    init = {i.name: list(i.dims) for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type == "Conv" and n.input[1] in init and n.output[0] in shp:
            w, y = init[n.input[1]], shp[n.output[0]]
            k = 1
            for d in w[2:]:
                k *= d
            pos = 1
            for d in y[2:]:
                pos *= d
            out[n.name] = 2 * w[0] * w[1] * k * pos * y[0]
    return out


def profile(engine, shapes_arg, threads, iters):
    r = subprocess.run([KILN, "exec", f"--loadEngine={engine}", f"--shapes={shapes_arg}", f"--threads={threads}",
                        f"--iterations={iters}", "--duration=0", "--dumpProfile"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kiln exec failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    med = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\S+ \[I\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)$", line)
        if m:
            med[m.group(5)] = float(m.group(3))
    return med


def class_of(name):
    parts = name.split(".")
    kind = re.sub(r"_\d+$", "", parts[-1])
    return f"{parts[0]}.{kind}" if len(parts) >= 3 else name


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("engine")
    p.add_argument("--model", default=str(ROOT / "build" / "zoo" / "resnet50.onnx"))
    p.add_argument("--shapes", default="input:1x3x224x224")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=40)
    a = p.parse_args()
    shapes = {s.split(":")[0]: [int(d) for d in s.split(":")[1].split("x")] for s in a.shapes.split(",")}
    flops = conv_flops(a.model, shapes)
    med = profile(a.engine, a.shapes, a.threads, a.iters)
    classes = collections.OrderedDict()
    for name, f in flops.items():
        if name in med:
            c = classes.setdefault(class_of(name), [0, 0.0])
            c[0] += f
            c[1] += med[name]
    print("| class | ms | GFLOP/s |")
    print("|---|---|---|")
    for c, (f, ms) in classes.items():
        print(f"| {c} | {ms:.2f} | {f / ms / 1e6:.1f} |" if ms > 0 else f"| {c} | {ms:.2f} | n/a |")
    print(f"total engine time (ms): {med.get('Total', float('nan')):.2f}")


if __name__ == "__main__":
    main()
