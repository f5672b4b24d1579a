#!/usr/bin/env python3
"""make_broken_models.py - writes a corpus of broken and foreign files that users feed to
kiln by mistake, to check that kiln's ONNX reader explains each one.

Usage: tools/make_broken_models.py OUT_DIR

Each case is one file (or a folder, for external data and SavedModel cases) directly in
OUT_DIR; the names are stable so tests/cli/test_reader_errors.py can expect facts per case.
Built with the onnx package plus byte surgery; protobuf messages that onnx's Python API
cannot build (1000-deep types, TensorFlow formats) are hand-encoded.
"""
import io
import os
import pickle
import random
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN_ENGINE_MAGIC = b"KILNENG1"  # src/engine/magic.h
IR_VERSION = 10  # onnx 1.23 writes IR 14 by default, newer than kiln reads: keep cases to one problem


# ---- a tiny protobuf encoder for what onnx cannot build -------------------------------
def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, data):
    return varint((num << 3) | 2) + varint(len(data)) + data


# ---- models -----------------------------------------------------------------------------
def resnetish():
    """A small ResNet-like stack (conv-bn-relu x4 + fc) with raw-data weights, ~150 KB."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x, c = "input", 3
    for i in range(4):
        co = 32
        w = numpy_helper.from_array(rng.standard_normal((co, c, 3, 3)).astype(np.float32), f"layer{i}.conv.weight")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [x, w.name], [f"c{i}"], name=f"/layer{i}/conv/Conv", pads=[1, 1, 1, 1]))
        bn = [numpy_helper.from_array(rng.standard_normal(co).astype(np.float32), f"layer{i}.bn.{k}")
              for k in ("scale", "bias", "mean", "var")]
        inits.extend(bn)
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}"] + [t.name for t in bn], [f"b{i}"],
                                      name=f"/layer{i}/bn/BatchNormalization"))
        nodes.append(helper.make_node("Relu", [f"b{i}"], [f"r{i}"], name=f"/layer{i}/relu/Relu"))
        x, c = f"r{i}", co
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="/pool/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="/Flatten"))
    fc = numpy_helper.from_array(rng.standard_normal((10, c)).astype(np.float32), "fc.weight")
    inits.append(fc)
    nodes.append(helper.make_node("Gemm", ["flat", "fc.weight"], ["logits"], name="/fc/Gemm", transB=1))
    g = helper.make_graph(nodes, "resnetish", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def with_initializer(t):
    """Relu over one initializer tensor `t`: the smallest model that carries a tensor."""
    g = helper.make_graph([helper.make_node("Relu", [t.name], ["y"], name="relu")], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[t])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def raw_tensor(name, dtype, dims, raw):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def external_tensor(name, location, offset=None, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend([4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def external_case(out, name, location, offset=None, length=None, data=True):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    if data:
        write(os.path.join(d, "weights.bin"), np.arange(6, dtype=np.float32).tobytes())  # 24 bytes
    m = with_initializer(external_tensor("w", location, offset, length))
    write(os.path.join(d, "model.onnx"), m.SerializeToString())
    return d


def deep_type_model(depth):
    """graph input X of type seq(seq(...(float)...)) nested `depth` deep, hand-encoded."""
    tp = field_bytes(1, field_varint(1, 1))  # TypeProto{tensor_type{elem_type=float}}
    for _ in range(depth):
        tp = field_bytes(4, field_bytes(1, tp))  # TypeProto{sequence_type{elem_type=tp}}
    vi = field_bytes(1, b"X") + field_bytes(2, tp)
    graph = field_bytes(2, b"deep") + field_bytes(11, vi)
    return field_varint(1, 8) + field_bytes(7, graph) + field_bytes(8, field_varint(2, 17))


def deep_subgraph_model(depth):
    """If inside If ... `depth` deep (then_branch only), hand-encoded."""
    g = field_bytes(2, b"leaf")
    for i in range(depth):
        attr = field_bytes(1, b"then_branch") + field_varint(20, 5) + field_bytes(6, g)
        node = field_bytes(1, b"cond") + field_bytes(2, b"out") + field_bytes(3, f"if_{i}".encode()) + \
            field_bytes(4, b"If") + field_bytes(5, attr)
        g = field_bytes(1, node) + field_bytes(2, f"g{i}".encode())
    return field_varint(1, 8) + field_bytes(7, g) + field_bytes(8, field_varint(2, 17))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    write(os.path.join(out, "empty.onnx"), b"")
    good = resnetish().SerializeToString()
    write(os.path.join(out, "truncated.onnx"), good[: len(good) // 2])
    rnd = random.Random(1234)
    write(os.path.join(out, "random.onnx"), bytes([0xF7]) + bytes(rnd.getrandbits(8) for _ in range(4095)))
    write(os.path.join(out, "page.onnx"), b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>\n")

    # PyTorch: a torch.save-style zip checkpoint, and a legacy raw pickle
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"fc.weight": [1.0, 2.0]}, protocol=2))
        z.writestr("archive/version", "3\n")
    write(os.path.join(out, "checkpoint.pt"), buf.getvalue())
    write(os.path.join(out, "legacy.pth"), pickle.dumps({"state_dict": {"w": [1, 2, 3]}}, protocol=2))

    write(os.path.join(out, "lfs_pointer.onnx"),
          b"version https://git-lfs.github.com/spec/v1\n"
          b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 102502400\n")

    # TensorFlow: SavedModel {1: schema version, 2: MetaGraphDef{1: MetaInfoDef, 2: GraphDef}}
    node_def = field_bytes(1, b"input") + field_bytes(2, b"Placeholder")
    graph_def = field_bytes(1, node_def) + field_bytes(4, field_varint(1, 27))
    saved = field_varint(1, 1) + field_bytes(2, field_bytes(1, field_bytes(1, b"serve")) + field_bytes(2, graph_def))
    write(os.path.join(out, "saved_model.pb"), saved)
    os.makedirs(os.path.join(out, "savedmodel_dir", "variables"), exist_ok=True)
    write(os.path.join(out, "savedmodel_dir", "saved_model.pb"), saved)
    write(os.path.join(out, "frozen_graph.pb"), graph_def)

    write(os.path.join(out, "engine.kiln"), KILN_ENGINE_MAGIC + bytes(56))

    # tensor data problems
    four = np.arange(4, dtype=np.float32).tobytes()
    write(os.path.join(out, "raw_short.onnx"),
          with_initializer(raw_tensor("fc.weight", TensorProto.FLOAT, [8], four)).SerializeToString())
    write(os.path.join(out, "raw_long.onnx"),
          with_initializer(raw_tensor("fc.weight", TensorProto.FLOAT, [2], four)).SerializeToString())
    t = raw_tensor("fc.weight", TensorProto.FLOAT, [4], four)
    t.float_data.extend([1, 2, 3, 4])
    write(os.path.join(out, "two_data_fields.onnx"), with_initializer(t).SerializeToString())
    write(os.path.join(out, "dtype99.onnx"),
          with_initializer(raw_tensor("fc.weight", 99, [4], four)).SerializeToString())
    write(os.path.join(out, "dims_overflow.onnx"),
          with_initializer(raw_tensor("fc.weight", TensorProto.FLOAT, [1 << 40, 1 << 40], four)).SerializeToString())
    write(os.path.join(out, "deep_type.onnx"), deep_type_model(1000))
    write(os.path.join(out, "deep_subgraph.onnx"), deep_subgraph_model(100))

    # external data
    external_case(out, "ext_missing", "missing.bin")
    external_case(out, "ext_absolute", "/etc/passwd")
    external_case(out, "ext_dotdot", "../weights.bin")
    d = external_case(out, "ext_symlink", "link.bin")
    outside = os.path.join(out, "outside_secret.bin")
    write(outside, bytes(64))
    link = os.path.join(d, "link.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.abspath(outside), link)
    external_case(out, "ext_offset_past_end", "weights.bin", offset=4096)
    external_case(out, "ext_length_mismatch", "weights.bin", offset=0, length=12)
    external_case(out, "ext_negative_offset", "weights.bin", offset=-8)

    os.makedirs(os.path.join(out, "empty_dir"), exist_ok=True)


if __name__ == "__main__":
    main()
