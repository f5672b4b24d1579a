#!/usr/bin/env python3
"""make_zoo_resnet50.py - writes a ResNet-50-sized ONNX model for benchmarks.

The layer structure is torchvision's ResNet-50 (v1.5: stride on the 3x3 conv of each
bottleneck), exported the way the ONNX model zoo's resnet50 is: Conv + BatchNormalization +
Relu unfused, residual Add, MaxPool, GlobalAveragePool, Flatten, Gemm. Weights are
deterministic random numbers (fixed seed), so the file is about 100 MB and the same on
every run; the numbers are not a trained network, which a loading benchmark does not need.

Usage: python3 tools/make_zoo_resnet50.py OUT.onnx [--batch-dim N|batch]
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed=0, batch="batch"):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def param(name, shape, scale):
        a = (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)
        inits.append(numpy_helper.from_array(a, name))
        return name

    def conv_bn(x, prefix, bn, cin, cout, k, stride, relu):
        w = param(f"{prefix}.weight", (cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        pad = k // 2
        y = f"/{prefix}/Conv_output_0"
        nodes.append(helper.make_node("Conv", [x, w], [y], name=f"/{prefix}/Conv", kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[pad] * 4, dilations=[1, 1], group=1))
        scale = param(f"{bn}.weight", (cout,), 0.1)
        bias = param(f"{bn}.bias", (cout,), 0.1)
        mean = param(f"{bn}.running_mean", (cout,), 0.1)
        var = f"{bn}.running_var"
        inits.append(numpy_helper.from_array(np.abs(rng.standard_normal(cout, dtype=np.float32)) + 0.5, var))
        z = f"/{bn}/BatchNormalization_output_0"
        nodes.append(helper.make_node("BatchNormalization", [y, scale, bias, mean, var], [z],
                                      name=f"/{bn}/BatchNormalization", epsilon=1e-5, momentum=0.9))
        if not relu:
            return z
        r = f"/{prefix}/Relu_output_0"
        nodes.append(helper.make_node("Relu", [z], [r], name=f"/{prefix}/Relu"))
        return r

    x = conv_bn("input", "conv1", "bn1", 3, 64, 7, 2, True)
    nodes.append(helper.make_node("MaxPool", [x], ["/maxpool/MaxPool_output_0"], name="/maxpool/MaxPool",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x = "/maxpool/MaxPool_output_0"
    cin = 64
    for li, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1):
        for bi in range(blocks):
            p = f"layer{li}.{bi}"
            s = stride if bi == 0 else 1
            cout = width * 4
            h = conv_bn(x, f"{p}.conv1", f"{p}.bn1", cin, width, 1, 1, True)
            h = conv_bn(h, f"{p}.conv2", f"{p}.bn2", width, width, 3, s, True)
            h = conv_bn(h, f"{p}.conv3", f"{p}.bn3", width, cout, 1, 1, False)
            if bi == 0:
                sc = conv_bn(x, f"{p}.downsample.0", f"{p}.downsample.1", cin, cout, 1, s, False)
            else:
                sc = x
            a = f"/{p}/Add_output_0"
            nodes.append(helper.make_node("Add", [h, sc], [a], name=f"/{p}/Add"))
            r = f"/{p}/Relu_output_0"
            nodes.append(helper.make_node("Relu", [a], [r], name=f"/{p}/relu/Relu"))
            x, cin = r, cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["/avgpool/GlobalAveragePool_output_0"],
                                  name="/avgpool/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["/avgpool/GlobalAveragePool_output_0"], ["/Flatten_output_0"],
                                  name="/Flatten", axis=1))
    fw = param("fc.weight", (1000, 2048), np.sqrt(1.0 / 2048))
    fb = param("fc.bias", (1000,), 0.01)
    nodes.append(helper.make_node("Gemm", ["/Flatten_output_0", fw, fb], ["output"], name="/fc/Gemm",
                                  alpha=1.0, beta=1.0, transB=1))
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 1000])],
        initializer=inits)
    m = helper.make_model(graph, producer_name="kiln-bench", producer_version="1.0",
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    m = build(args.seed)
    onnx.save(m, args.out)
    n = sum(int(np.prod(t.dims)) for t in m.graph.initializer)
    print(f"wrote {args.out}: {len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers, {n:,} parameters")


if __name__ == "__main__":
    main()
