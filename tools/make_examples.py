#!/usr/bin/env python3
"""make_examples.py - regenerates the small example models bundled in examples/.

The files are committed (so the quickstart works without Python); this script is how
they were made and how to remake them. Weights come from a fixed seed, so running it
again produces byte-identical files.

  examples/embed_proj.onnx         token ids int64[batch, seq_len] -> Gather(embedding)
                                   -> MatMul(proj) + Add(bias) -> float32[batch, seq_len, 256]
  examples/embed_proj_broken.onnx  the same, but the embedding was shrunk to width 64 while
                                   the projection still expects 128 (the classic
                                   "layer changed width" export bug that `kiln check` explains)
  examples/tiny_cnn.onnx           Conv/Relu/MaxPool/Conv/Relu/GlobalAveragePool/Flatten/Gemm
                                   on float32[batch, 3, 32, 32]

Node and value names follow the PyTorch exporter's style ('/fc/MatMul',
'/embedding/Gather_output_0') so messages look like what users see on real models.

Usage: python3 tools/make_examples.py [OUT_DIR]   (default: examples/ next to tools/)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what torch.onnx.export writes for opset 17


def _model(graph, doc):
    m = helper.make_model(
        graph,
        producer_name="kiln-examples",
        producer_version="1.0",
        opset_imports=[helper.make_opsetid("", OPSET)],
        doc_string=doc,
    )
    m.ir_version = IR_VERSION
    m.model_version = 1
    onnx.checker.check_model(m)
    return m


def embed_proj(vocab=1000, emb_width=64, proj_in=64, out_width=256, seed=0, name="embed_proj"):
    """Embedding lookup followed by a Linear layer, as torch exports nn.Embedding + nn.Linear."""
    rng = np.random.default_rng(seed)
    emb = (rng.standard_normal((vocab, emb_width)) * 0.02).astype(np.float32)
    w = (rng.standard_normal((proj_in, out_width)) / np.sqrt(proj_in)).astype(np.float32)
    b = (rng.standard_normal((out_width,)) * 0.01).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["embedding.weight", "input_ids"], ["/embedding/Gather_output_0"],
                         name="/embedding/Gather", axis=0),
        helper.make_node("MatMul", ["/embedding/Gather_output_0", "onnx::MatMul_8"], ["/fc/MatMul_output_0"],
                         name="/fc/MatMul"),
        helper.make_node("Add", ["fc.bias", "/fc/MatMul_output_0"], ["output"], name="/fc/Add"),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq_len"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq_len", out_width])],
        initializer=[
            numpy_helper.from_array(emb, "embedding.weight"),
            numpy_helper.from_array(w, "onnx::MatMul_8"),
            numpy_helper.from_array(b, "fc.bias"),
        ],
    )
    return graph


def tiny_cnn(seed=1):
    rng = np.random.default_rng(seed)

    def conv_w(cout, cin, k):
        return (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)

    c1w, c1b = conv_w(16, 3, 3), np.zeros(16, np.float32)
    c2w, c2b = conv_w(32, 16, 3), np.zeros(32, np.float32)
    fcw = (rng.standard_normal((10, 32)) / np.sqrt(32)).astype(np.float32)
    fcb = np.zeros(10, np.float32)
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["/conv1/Conv_output_0"],
                         name="/conv1/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["/conv1/Conv_output_0"], ["/relu1/Relu_output_0"], name="/relu1/Relu"),
        helper.make_node("MaxPool", ["/relu1/Relu_output_0"], ["/pool/MaxPool_output_0"], name="/pool/MaxPool",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["/pool/MaxPool_output_0", "conv2.weight", "conv2.bias"], ["/conv2/Conv_output_0"],
                         name="/conv2/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["/conv2/Conv_output_0"], ["/relu2/Relu_output_0"], name="/relu2/Relu"),
        helper.make_node("GlobalAveragePool", ["/relu2/Relu_output_0"], ["/gap/GlobalAveragePool_output_0"],
                         name="/gap/GlobalAveragePool"),
        helper.make_node("Flatten", ["/gap/GlobalAveragePool_output_0"], ["/Flatten_output_0"], name="/Flatten",
                         axis=1),
        helper.make_node("Gemm", ["/Flatten_output_0", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm",
                         alpha=1.0, beta=1.0, transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=[
            numpy_helper.from_array(c1w, "conv1.weight"),
            numpy_helper.from_array(c1b, "conv1.bias"),
            numpy_helper.from_array(c2w, "conv2.weight"),
            numpy_helper.from_array(c2b, "conv2.bias"),
            numpy_helper.from_array(fcw, "fc.weight"),
            numpy_helper.from_array(fcb, "fc.bias"),
        ],
    )
    return graph


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                             "examples")
    os.makedirs(out, exist_ok=True)
    models = {
        "embed_proj.onnx": _model(embed_proj(), "Token embedding followed by a Linear(64, 256) projection."),
        "embed_proj_broken.onnx": _model(
            embed_proj(emb_width=64, proj_in=128),
            "Broken on purpose: the embedding is 64 wide but the projection expects 128 inputs.",
        ),
        "tiny_cnn.onnx": _model(tiny_cnn(), "A tiny image classifier: two conv blocks and a linear head."),
    }
    # The broken model is structurally fine but fails shape inference; check_model without
    # full_check accepts it, which is what we want (kiln check is supposed to find it).
    for name, m in models.items():
        path = os.path.join(out, name)
        data = m.SerializeToString()
        with open(path, "wb") as f:
            f.write(data)
        print(f"wrote {path} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
