#!/usr/bin/env python3
"""make_zoo.py - generates kiln's model zoo: real layer structures with deterministic random
weights, so end-to-end tests and benchmarks need no downloads.

Models (all float32, symbolic batch):
  resnet50     ResNet-50 v1.5 (torchvision layout), opset 17, input "input" [batch,3,224,224].
               Conv+bias as torch.onnx.export writes it in eval mode (BN folded); with
               --with-bn the BatchNormalization nodes are kept instead (exercises the
               runtime's Conv+BN folding pass).
  mobilenetv2  MobileNetV2 1.0 (Clip(0,6) activations, depthwise convs), opset 17.
  bert         BERT-base encoder: 12 layers, hidden 768, 12 heads, FFN 3072, inputs
               input_ids / attention_mask int64 [batch, seq]; the op pattern torch.onnx
               exports (Gather embeddings, LayerNormalization, MatMul+Add, Reshape/Transpose
               heads, Softmax, GELU as Div/Erf/Add/Mul/Mul). Output last_hidden_state.
  embedding    Embedding 10000x64 -> Linear 64->256, input "ids" int64 [batch, seq].

Usage: python3 tools/make_zoo.py --out build/zoo [--models resnet50,bert] [--with-bn]
Writes OUT/<name>.onnx (skipped when present with the same generator version).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GEN_VERSION = "kiln-zoo-1"


class Builder:
    """Accumulates nodes and initializers with unique names and seeded weights."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], {}

    def name(self, base):
        self.count[base] = self.count.get(base, 0) + 1
        return f"{base}_{self.count[base]}"

    def const(self, base, arr):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def weight(self, base, shape, fan_in, gain=1.0):
        w = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(gain * np.sqrt(2.0 / fan_in))
        return self.const(base, w.astype(np.float32))

    def bias(self, base, n, scale=0.01):
        return self.const(base, (self.rng.standard_normal(n) * scale).astype(np.float32))

    def op(self, op_type, inputs, base=None, n_out=1, **attrs):
        nm = self.name(base or op_type)
        outs = [f"{nm}_out{i}" if n_out > 1 else f"{nm}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=nm, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs, outputs, name, opset=17):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name=GEN_VERSION)
        m.ir_version = 8
        return m


def conv(b, x, cin, cout, k, stride=1, pad=None, groups=1, with_bn=False, gain=1.0, tag="conv"):
    pad = k // 2 if pad is None else pad
    w = b.weight(f"{tag}.weight", (cout, cin // groups, k, k), cin // groups * k * k, gain)
    attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=groups)
    if not with_bn:
        return b.op("Conv", [x, w, b.bias(f"{tag}.bias", cout)], tag, **attrs)
    y = b.op("Conv", [x, w], tag, **attrs)
    scale = b.const("bn.scale", (1.0 + 0.1 * b.rng.standard_normal(cout)).astype(np.float32))
    shift = b.bias("bn.bias", cout)
    mean = b.bias("bn.mean", cout, 0.1)
    var = b.const("bn.var", (1.0 + 0.1 * np.abs(b.rng.standard_normal(cout))).astype(np.float32))
    return b.op("BatchNormalization", [y, scale, shift, mean, var], "bn", epsilon=1e-5)


def resnet50(with_bn=False):
    b = Builder(50)
    x = b.op("Relu", [conv(b, "input", 3, 64, 7, 2, 3, with_bn=with_bn, tag="conv1")])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate(zip([64, 128, 256, 512], [3, 4, 6, 3])):
        for i in range(blocks):
            stride = 2 if (i == 0 and stage > 0) else 1
            tag = f"layer{stage + 1}.{i}"
            y = b.op("Relu", [conv(b, x, cin, width, 1, 1, 0, with_bn=with_bn, tag=tag + ".conv1")])
            y = b.op("Relu", [conv(b, y, width, width, 3, stride, 1, with_bn=with_bn, tag=tag + ".conv2")])
            # small gain on the last conv of a block keeps the residual stream bounded
            y = conv(b, y, width, width * 4, 1, 1, 0, with_bn=with_bn, gain=0.3, tag=tag + ".conv3")
            sc = x
            if i == 0:
                sc = conv(b, x, cin, width * 4, 1, stride, 0, with_bn=with_bn, gain=0.5, tag=tag + ".downsample")
            x = b.op("Relu", [b.op("Add", [y, sc])])
            cin = width * 4
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1)
    w = b.weight("fc.weight", (1000, 2048), 2048)
    out = b.op("Gemm", [x, w, b.bias("fc.bias", 1000)], "fc", transB=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1000])], "resnet50")


def mobilenetv2():
    b = Builder(2)
    zero, six = b.const("clip.min", np.float32(0)), b.const("clip.max", np.float32(6))

    def relu6(v):
        return b.op("Clip", [v, zero, six])

    x = relu6(conv(b, "input", 3, 32, 3, 2, tag="features.0"))
    cin = 32
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, c, n, s in cfg:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = relu6(conv(b, y, cin, hidden, 1, 1, 0, tag="expand"))
            y = relu6(conv(b, y, hidden, hidden, 3, stride, 1, groups=hidden, tag="dw"))
            y = conv(b, y, hidden, c, 1, 1, 0, gain=0.5, tag="project")
            x = b.op("Add", [x, y]) if (stride == 1 and cin == c) else y
            cin = c
    x = relu6(conv(b, x, cin, 1280, 1, 1, 0, tag="features.18"))
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.op("Gemm", [x, b.weight("classifier.weight", (1000, 1280), 1280), b.bias("classifier.bias", 1000)], "classifier",
         transB=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1000])], "mobilenetv2")


def bert(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, max_pos=512):
    b = Builder(110)
    hd = hidden // heads

    def linear(x, n_in, n_out, tag):
        w = b.const(f"{tag}.weight", (b.rng.standard_normal((n_in, n_out)) * 0.02).astype(np.float32))
        return b.op("Add", [b.op("MatMul", [x, w], tag + "/MatMul"), b.bias(f"{tag}.bias", n_out, 0.02)], tag + "/Add")

    def layernorm(x, tag):
        g = b.const(f"{tag}.weight", (1.0 + 0.05 * b.rng.standard_normal(hidden)).astype(np.float32))
        return b.op("LayerNormalization", [x, g, b.bias(f"{tag}.bias", hidden, 0.02)], tag, axis=-1, epsilon=1e-12)

    emb = lambda n, tag: b.const(tag, (b.rng.standard_normal((n, hidden)) * 0.02).astype(np.float32))
    word = b.op("Gather", [emb(vocab, "embeddings.word_embeddings.weight"), "input_ids"], "word_emb")
    # position ids: a slice of arange(max_pos) as long as the sequence (Shape -> Gather -> Slice)
    seq = b.op("Gather", [b.op("Shape", ["input_ids"]), b.const("one_idx", np.array(1, np.int64))], "seq_len")
    seq1 = b.op("Unsqueeze", [seq, b.const("axes0", np.array([0], np.int64))])
    pos_ids = b.op("Slice", [b.const("position_ids", np.arange(max_pos, dtype=np.int64)[None, :]),
                             b.const("zero1", np.array([0], np.int64)), seq1, b.const("axis1", np.array([1], np.int64))])
    pos = b.op("Gather", [emb(max_pos, "embeddings.position_embeddings.weight"), pos_ids], "pos_emb")
    tok = b.const("embeddings.token_type_row", (b.rng.standard_normal(hidden) * 0.02).astype(np.float32))
    x = layernorm(b.op("Add", [b.op("Add", [word, pos]), tok]), "embeddings.LayerNorm")
    # additive mask [batch, 1, 1, seq]: (1 - mask) * -10000
    m = b.op("Unsqueeze", ["attention_mask", b.const("axes12", np.array([1, 2], np.int64))])
    m = b.op("Cast", [m], to=TensorProto.FLOAT)
    m = b.op("Mul", [b.op("Sub", [b.const("one_f", np.float32(1.0)), m]), b.const("neg", np.float32(-10000.0))])
    split_shape = b.const("split_shape", np.array([0, 0, heads, hd], np.int64))
    merge_shape = b.const("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = b.const("sqrt_hd", np.float32(np.sqrt(hd)))
    for l in range(layers):
        t = f"encoder.layer.{l}"
        q = b.op("Transpose", [b.op("Reshape", [linear(x, hidden, hidden, t + ".attention.self.query"), split_shape])],
                 perm=[0, 2, 1, 3])
        k = b.op("Transpose", [b.op("Reshape", [linear(x, hidden, hidden, t + ".attention.self.key"), split_shape])],
                 perm=[0, 2, 3, 1])
        v = b.op("Transpose", [b.op("Reshape", [linear(x, hidden, hidden, t + ".attention.self.value"), split_shape])],
                 perm=[0, 2, 1, 3])
        s = b.op("Add", [b.op("Div", [b.op("MatMul", [q, k], t + "/scores"), scale]), m])
        p = b.op("Softmax", [s], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [p, v], t + "/context")], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, merge_shape])
        a = linear(ctx, hidden, hidden, t + ".attention.output.dense")
        x = layernorm(b.op("Add", [a, x]), t + ".attention.output.LayerNorm")
        h = linear(x, hidden, ffn, t + ".intermediate.dense")
        # GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt 2))
        e = b.op("Erf", [b.op("Div", [h, b.const("sqrt2", np.float32(np.sqrt(2.0)))])])
        h = b.op("Mul", [b.op("Mul", [h, b.op("Add", [e, b.const("one", np.float32(1.0))])]),
                         b.const("half", np.float32(0.5))])
        o = linear(h, ffn, hidden, t + ".output.dense")
        x = layernorm(b.op("Add", [o, x]), t + ".output.LayerNorm")
    b.nodes[-1].output[0] = "last_hidden_state"
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("input_ids", "attention_mask")]
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])]
    return b.model(ins, outs, "bert_base")


def embedding():
    b = Builder(64)
    e = b.op("Gather", [b.const("embedding.weight", b.rng.standard_normal((10000, 64)).astype(np.float32)), "ids"],
             "embedding")
    w = b.weight("linear.weight", (64, 256), 64)
    b.op("Add", [b.op("MatMul", [e, w], "linear/MatMul"), b.bias("linear.bias", 256)], "linear/Add")
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq", 256])], "embedding")


MODELS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2, "bert": bert, "embedding": embedding}

# Example inputs for tests and benchmarks: name -> (dtype, shape with "batch"/"seq" placeholders, value range)
INPUTS = {
    "resnet50": {"input": ("float32", ["batch", 3, 224, 224])},
    "mobilenetv2": {"input": ("float32", ["batch", 3, 224, 224])},
    "bert": {"input_ids": ("int64", ["batch", "seq"], 30522), "attention_mask": ("mask", ["batch", "seq"])},
    "embedding": {"ids": ("int64", ["batch", "seq"], 10000)},
}


def make_inputs(model, batch, seq=128, seed=0):
    """Deterministic example inputs as {name: ndarray}."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in INPUTS[model].items():
        shape = [batch if d == "batch" else seq if d == "seq" else d for d in spec[1]]
        if spec[0] == "float32":
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
        elif spec[0] == "int64":
            feeds[name] = rng.integers(0, spec[2], size=shape, dtype=np.int64)
        else:  # attention mask: the last 1/8 of each sequence padded
            mask = np.ones(shape, np.int64)
            mask[:, shape[1] - shape[1] // 8:] = 0
            feeds[name] = mask
    return feeds


def ensure(out_dir, name, with_bn=False):
    """Path of the model, generating it when missing or stale."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}{'_bn' if with_bn else ''}.onnx")
    stamp = path + ".version"
    if os.path.exists(path) and os.path.exists(stamp) and open(stamp).read() == GEN_VERSION:
        return path
    m = resnet50(with_bn) if name == "resnet50" else MODELS[name]()
    onnx.checker.check_model(m)
    onnx.save(m, path)
    with open(stamp, "w") as f:
        f.write(GEN_VERSION)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="build/zoo")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--with-bn", action="store_true", help="resnet50 with BatchNormalization nodes kept")
    a = ap.parse_args()
    for name in a.models.split(","):
        if name not in MODELS:
            sys.exit(f"unknown model '{name}'; choose from {', '.join(MODELS)}")
        print(ensure(a.out, name, a.with_bn and name == "resnet50"))


if __name__ == "__main__":
    main()
