#!/usr/bin/env python3
"""make_check_models.py - builds the models `kiln check` is tested on.

Each model has exactly one kind of problem (or none), named after the everyday failure it
reproduces: an embedding that shrank while the projection did not, a Gemm(transB=1) with
the wrong in_features, Conv channel drift, a hard-coded Reshape, a bias of the wrong width,
custom-domain ops, NaN and fp16-overflowing weights, leftovers from graph surgery, and two
versions of a model whose interface changed. Output is deterministic (fixed seeds, no
timestamps), so tests can assert exact facts.

Usage: python3 tools/make_check_models.py OUT_DIR
"""
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def weight(name, shape, seed, scale=0.02):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(out, name, nodes, inputs, outputs, inits=(), extra_opsets=(), value_info=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits), value_info=list(value_info))
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="make_check_models")
    model.ir_version = IR_VERSION
    onnx.save(model, str(out / f"{name}.onnx"))


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def healthy(out):
    """A small MLP with a symbolic batch: no errors."""
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["h0"], name="/fc1/MatMul"),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"], name="/fc1/Add"),
        helper.make_node("Relu", ["h1"], ["h2"], name="/act/Relu"),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["y"], name="/fc2/MatMul"),
    ]
    inits = [weight("fc1.weight", (16, 32), 1), weight("fc1.bias", (32,), 2), weight("fc2.weight", (32, 8), 3)]
    save(out, "healthy", nodes, [vi("x", F, ["batch", 16])], [vi("y", F, ["batch", 8])], inits)


def matmul_mismatch(out):
    """Embedding shrank to 64 while the projection still expects 128 (MatMul)."""
    nodes = [
        helper.make_node("Gather", ["embedding.weight", "input_ids"], ["/embedding/Gather_output_0"],
                         name="/embedding/Gather"),
        helper.make_node("MatMul", ["/embedding/Gather_output_0", "fc.weight"], ["logits"], name="/fc/MatMul"),
    ]
    inits = [weight("embedding.weight", (1000, 64), 4), weight("fc.weight", (128, 256), 5)]
    save(out, "matmul_mismatch", nodes, [vi("input_ids", I64, ["batch", "seq_len"])],
         [vi("logits", F, ["batch", "seq_len", 256])], inits)


def gemm_mismatch(out):
    """Linear(128, 256) exported as Gemm(transB=1) after a 64-wide layer."""
    nodes = [
        helper.make_node("Relu", ["x"], ["/act/Relu_output_0"], name="/act/Relu"),
        helper.make_node("Gemm", ["/act/Relu_output_0", "head.weight", "head.bias"], ["y"], name="/head/Gemm",
                         transB=1),
    ]
    inits = [weight("head.weight", (256, 128), 6), weight("head.bias", (256,), 7)]
    save(out, "gemm_mismatch", nodes, [vi("x", F, ["batch", 64])], [vi("y", F, ["batch", 256])], inits)


def conv_channels(out):
    """conv1 produces 16 channels; conv2's weight expects 8."""
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "conv2.weight"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    inits = [weight("conv1.weight", (16, 3, 3, 3), 8), weight("conv2.weight", (32, 8, 3, 3), 9)]
    save(out, "conv_channels", nodes, [vi("image", F, ["N", 3, 32, 32])], [vi("c2", F, ["N", 32, 32, 32])], inits)


def reshape_volume(out):
    """12 heads x 64 = 768 reshaped to a hard-coded width of 512."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="Reshape_4")]
    save(out, "reshape_volume", nodes, [vi("x", F, ["batch", 12, 64])], [vi("y", F, ["batch", 512])],
         [ints("shape", [0, 512])])


def broadcast(out):
    """A bias of width 128 added to 256-wide features."""
    nodes = [helper.make_node("Add", ["x", "bias"], ["y"], name="Add_3")]
    save(out, "broadcast", nodes, [vi("x", F, ["batch", 16, 256])], [vi("y", F, ["batch", 16, 256])],
         [weight("bias", (128,), 10)])


def reshape_fixed_batch(out):
    """Reshape to a constant [1, 768]: fine at batch 1, wrong at any other batch size."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="/flatten/Reshape")]
    save(out, "reshape_fixed_batch", nodes, [vi("x", F, ["batch", 12, 64])], [vi("y", F, [1, 768])],
         [ints("shape", [1, 768])])


def profile_model(out):
    """Two dynamic inputs sharing 'batch', one static input, for profile flag tests."""
    nodes = [
        helper.make_node("ReduceMean", ["image"], ["pooled"], name="pool", axes=[2, 3], keepdims=0),
        helper.make_node("Cast", ["input_ids"], ["ids_f"], name="cast", to=F),
        helper.make_node("ReduceSum", ["ids_f", "axes1"], ["ids_sum"], name="ids_sum", keepdims=1),
        helper.make_node("Mul", ["pooled", "scale"], ["scaled"], name="scale_mul"),
        helper.make_node("Add", ["scaled", "ids_sum"], ["out"], name="combine"),
    ]
    save(out, "profile", nodes,
         [vi("input_ids", I64, ["batch", "seq_len"]), vi("image", F, ["batch", 3, 224, 224]), vi("scale", F, [1, 3])],
         [vi("out", F, ["batch", 3])], [ints("axes1", [1])])


def custom_ops(out):
    """Three FancyAttention and one FastGelu from a custom domain, plus a standard Relu."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0")]
    prev = "r"
    for i in range(3):
        nodes.append(helper.make_node("FancyAttention", [prev], [f"a{i}"], name=f"attn{i}", domain="com.example"))
        prev = f"a{i}"
    nodes.append(helper.make_node("FastGelu", [prev], ["y"], name="gelu0", domain="com.example"))
    save(out, "custom_ops", nodes, [vi("x", F, ["batch", 64])], [vi("y", F, ["batch", 64])],
         extra_opsets=[("com.example", 1)])


def nan_weights(out):
    """layer3.bias has NaNs (a diverged checkpoint) and one +inf."""
    b = np.linspace(-1, 1, 256).astype(np.float32)
    b[17] = np.nan
    b[40:51] = np.nan
    b[200] = np.inf
    nodes = [helper.make_node("Add", ["x", "layer3.bias"], ["y"], name="/layer3/Add")]
    save(out, "nan_weights", nodes, [vi("x", F, ["batch", 256])], [vi("y", F, ["batch", 256])],
         [numpy_helper.from_array(b, "layer3.bias")])


def inf_mask(out):
    """A causal-mask fill exported as a Constant -inf: intentional, so only a warning."""
    fill = helper.make_tensor("fill", F, [], [float("-inf")])
    nodes = [
        helper.make_node("Constant", [], ["neg_inf"], name="mask_fill_const", value=fill),
        helper.make_node("Where", ["mask", "x", "neg_inf"], ["y"], name="apply_mask"),
    ]
    save(out, "inf_mask", nodes, [vi("mask", TensorProto.BOOL, ["batch", 8]), vi("x", F, ["batch", 8])],
         [vi("y", F, ["batch", 8])])


def fp16_range(out):
    """A -1e9 attention-mask fill and tiny values: fine in fp32, broken in fp16."""
    m = np.zeros((4, 8), dtype=np.float32)
    m[0, 3] = -1e9
    m[1, 0] = 70000.0
    m[2, 2] = 1e-9  # non-zero, becomes 0 in fp16
    nodes = [helper.make_node("Add", ["x", "mask_fill"], ["y"], name="/attn/mask_add")]
    save(out, "fp16_range", nodes, [vi("x", F, ["batch", 4, 8])], [vi("y", F, ["batch", 4, 8])],
         [numpy_helper.from_array(m, "mask_fill")])


def unused_initializer(out):
    """A removed head left its weight behind."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    save(out, "unused_initializer", nodes, [vi("x", F, ["batch", 8])], [vi("y", F, ["batch", 8])],
         [weight("old_head.weight", (128, 64), 11)])


def dead_node(out):
    """A debugging branch whose output was dropped from graph.output."""
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Mul", ["x", "x"], ["sq"], name="debug_square"),
        helper.make_node("Sigmoid", ["sq"], ["dbg"], name="debug_Sigmoid"),
    ]
    save(out, "dead_node", nodes, [vi("x", F, ["batch", 8])], [vi("y", F, ["batch", 8])])


def contract_models(out):
    """v1 and v2 of one model: v2's output width shrank 256 -> 128 and attention_mask is gone."""
    for version, width, with_mask in (("v1", 256, True), ("v2", 128, False)):
        nodes = [helper.make_node("Gather", ["embedding.weight", "input_ids"], ["emb"], name="embed")]
        inputs = [vi("input_ids", I64, ["batch", "seq_len"])]
        last = "emb"
        if with_mask:
            inputs.append(vi("attention_mask", F, ["batch", "seq_len"]))
            nodes += [
                helper.make_node("Unsqueeze", ["attention_mask", "axes_m1"], ["mask3"], name="mask_unsqueeze"),
                helper.make_node("Mul", ["emb", "mask3"], ["masked"], name="mask_mul"),
            ]
            last = "masked"
        nodes.append(helper.make_node("MatMul", [last, "proj.weight"], ["logits"], name="proj"))
        inits = [weight("embedding.weight", (100, 32), 12), weight("proj.weight", (32, width), 13),
                 ints("axes_m1", [-1])]
        if not with_mask:
            inits = inits[:2]
        save(out, f"contract_{version}", nodes, inputs, [vi("logits", F, ["batch", "seq_len", width])], inits)


ALL = [healthy, matmul_mismatch, gemm_mismatch, conv_channels, reshape_volume, broadcast, reshape_fixed_batch,
       profile_model, custom_ops, nan_weights, inf_mask, fp16_range, unused_initializer, dead_node, contract_models]


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for make in ALL:
        make(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
