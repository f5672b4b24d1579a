"""onnx_expect.py - what `kiln inspect --json --show nodes --show weights` should say about a
model, computed independently from the onnx package, and a comparison that names the
first field that differs. Shared by test_inspect.py and test_crosscheck_onnx.py.

Tensors are compared by FNV-1a-64 over their packed little-endian bytes, packed here the
way the ONNX spec defines each TensorProto field (raw_data as is; typed fields narrowed to
the element width; 2- and 4-bit types and float16/bfloat16/float8 stored one packed byte or
bit pattern per int32_data entry). Strings: each string's length as 8 little-endian bytes
followed by its bytes.
"""
import math
import os
import struct

import numpy as np
from onnx import AttributeProto, TensorProto, external_data_helper

# kiln's names for ONNX TensorProto.DataType numbers (src/core/dtype.h)
DTYPE_NAMES = {
    0: "undefined", 1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
    7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
    14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
    19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
    24: "float8e8m0", 25: "uint2", 26: "int2",
}
DTYPE_BITS = {
    1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64,
    15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2,
}
ATTR_TYPE_NAMES = {
    AttributeProto.FLOAT: "float", AttributeProto.INT: "int", AttributeProto.STRING: "string",
    AttributeProto.TENSOR: "tensor", AttributeProto.GRAPH: "graph", AttributeProto.FLOATS: "floats",
    AttributeProto.INTS: "ints", AttributeProto.STRINGS: "strings", AttributeProto.TENSORS: "tensors",
    AttributeProto.GRAPHS: "graphs", AttributeProto.SPARSE_TENSOR: "sparse_tensor",
    AttributeProto.SPARSE_TENSORS: "sparse_tensors", AttributeProto.TYPE_PROTO: "type_proto",
    AttributeProto.TYPE_PROTOS: "type_protos",
}


def fnv1a64(data: bytes) -> str:
    """FNV-1a, 64-bit (kiln_fnv1a64 in src/core/hashmap.c), as 16 lowercase hex digits."""
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _count(t):
    n = 1
    for d in t.dims:
        n *= d
    return n


def _nbytes(dtype, count):
    return (count * DTYPE_BITS[dtype] + 7) // 8


def tensor_bytes(t, base_dir=None) -> bytes:
    """Packed little-endian bytes of a TensorProto's data, as kiln stores them."""
    dt = t.data_type
    if dt == TensorProto.STRING:
        out = bytearray()
        for s in t.string_data:
            out += struct.pack("<Q", len(s)) + s
        return bytes(out)
    if t.data_location == TensorProto.EXTERNAL:
        info = external_data_helper.ExternalDataInfo(t)
        with open(os.path.join(base_dir or ".", info.location), "rb") as f:
            f.seek(info.offset or 0)
            n = info.length if info.length else _nbytes(dt, _count(t))
            return f.read(n)
    if t.HasField("raw_data"):
        return t.raw_data
    count = _count(t)
    bits = DTYPE_BITS.get(dt, 0)
    if dt == TensorProto.FLOAT or dt == TensorProto.COMPLEX64:
        return np.asarray(t.float_data, dtype="<f4").tobytes()
    if dt == TensorProto.DOUBLE or dt == TensorProto.COMPLEX128:
        return np.asarray(t.double_data, dtype="<f8").tobytes()
    if dt == TensorProto.INT64:
        return np.asarray(t.int64_data, dtype="<i8").tobytes()
    if dt in (TensorProto.UINT32, TensorProto.UINT64):
        return np.asarray(t.uint64_data, dtype="<u8").astype("<u4" if dt == TensorProto.UINT32 else "<u8").tobytes()
    # everything else lives in int32_data, one element (or bit pattern) per entry, except
    # the sub-byte types: one packed byte per entry
    vals = np.asarray(t.int32_data, dtype=np.int64)
    if bits < 8:
        return (vals & 0xFF).astype(np.uint8).tobytes()[: _nbytes(dt, count)]
    width = {8: "<u1", 16: "<u2", 32: "<u4"}[bits]
    mask = (1 << bits) - 1
    return (vals & mask).astype(width).tobytes()


def tensor_expect(t, base_dir=None):
    return {
        "name": t.name,
        "dtype": DTYPE_NAMES.get(t.data_type, "invalid"),
        "dims": list(t.dims),
        "fnv1a64": fnv1a64(tensor_bytes(t, base_dir)),
    }


def type_expect(tp):
    which = tp.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(tp, which)
        shape = None
        if tt.HasField("shape"):
            shape = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                elif d.HasField("dim_param") and d.dim_param:
                    shape.append(d.dim_param)
                else:
                    shape.append(None)
        r = {"kind": "tensor" if which == "tensor_type" else "sparse_tensor",
             "dtype": DTYPE_NAMES.get(tt.elem_type) if tt.elem_type else None, "shape": shape}
    elif which in ("sequence_type", "optional_type"):
        e = getattr(tp, which)
        r = {"kind": "sequence" if which == "sequence_type" else "optional",
             "elem": type_expect(e.elem_type) if e.HasField("elem_type") else None}
    elif which == "map_type":
        r = {"kind": "map", "key": DTYPE_NAMES.get(tp.map_type.key_type),
             "value": type_expect(tp.map_type.value_type) if tp.map_type.HasField("value_type") else None}
    else:
        r = {"kind": "unknown"}
    if tp.denotation:
        r["denotation"] = tp.denotation
    return r


def json_text(b: bytes) -> str:
    """What kiln's JSON writer makes of bytes: UTF-8 kept, invalid bytes as U+00XX."""
    s = b.decode("utf-8", errors="surrogateescape")
    return "".join(chr(ord(c) - 0xDC00) if 0xDC80 <= ord(c) <= 0xDCFF else c for c in s)


class Mismatch(Exception):
    pass


def _eq(path, want, got):
    if want != got:
        raise Mismatch(f"{path}: onnx says {want!r}, kiln says {got!r}")


def _f32(x):
    if isinstance(x, str):
        return {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[x]
    return float(np.float32(x))


def _eq_float(path, want, got):
    w, g = float(np.float32(want)), _f32(got)
    if (math.isnan(w) and math.isnan(g)) or w == g:
        return
    raise Mismatch(f"{path}: onnx says {w!r}, kiln says {g!r}")


def _cmp_tensor(path, t, got, base_dir):
    want = tensor_expect(t, base_dir)
    for k in ("name", "dtype", "dims"):
        _eq(f"{path}.{k}", want[k], got.get(k))
    if "error" in got:
        raise Mismatch(f"{path}: kiln could not read the data: {got['error']}")
    _eq(f"{path}.fnv1a64", want["fnv1a64"], got.get("fnv1a64"))


def _cmp_sparse(path, sp, got, base_dir):
    _eq(f"{path}.dims", list(sp.dims), got["dims"])
    _cmp_tensor(f"{path}.values", sp.values, got["values"], base_dir)
    _cmp_tensor(f"{path}.indices", sp.indices, got["indices"], base_dir)


def _cmp_attr(path, a, got, base_dir):
    _eq(f"{path}.name", a.name, got["name"])
    _eq(f"{path}.type", ATTR_TYPE_NAMES.get(a.type, "undefined"), got["type"])
    if a.ref_attr_name:
        _eq(f"{path}.ref_attr_name", a.ref_attr_name, got.get("ref_attr_name"))
        return
    v = got["value"]
    T = AttributeProto
    if a.type == T.FLOAT:
        _eq_float(f"{path}.value", a.f, v)
    elif a.type == T.INT:
        _eq(f"{path}.value", a.i, v)
    elif a.type == T.STRING:
        _eq(f"{path}.value", json_text(a.s), v)
    elif a.type == T.TENSOR:
        _cmp_tensor(f"{path}.value", a.t, v, base_dir)
    elif a.type == T.GRAPH:
        compare_graph(f"{path}.value", a.g, v, base_dir)
    elif a.type == T.SPARSE_TENSOR:
        _cmp_sparse(f"{path}.value", a.sparse_tensor, v, base_dir)
    elif a.type == T.TYPE_PROTO:
        _eq(f"{path}.value", type_expect(a.tp), v)
    else:
        lists = {T.FLOATS: a.floats, T.INTS: a.ints, T.STRINGS: a.strings, T.TENSORS: a.tensors,
                 T.GRAPHS: a.graphs, T.SPARSE_TENSORS: a.sparse_tensors, T.TYPE_PROTOS: a.type_protos}
        items = lists.get(a.type, [])
        _eq(f"{path}.value length", len(items), len(v))
        for i, (x, y) in enumerate(zip(items, v)):
            p = f"{path}.value[{i}]"
            if a.type == T.FLOATS:
                _eq_float(p, x, y)
            elif a.type == T.INTS:
                _eq(p, x, y)
            elif a.type == T.STRINGS:
                _eq(p, json_text(x), y)
            elif a.type == T.TENSORS:
                _cmp_tensor(p, x, y, base_dir)
            elif a.type == T.GRAPHS:
                compare_graph(p, x, y, base_dir)
            elif a.type == T.SPARSE_TENSORS:
                _cmp_sparse(p, x, y, base_dir)
            else:
                _eq(p, type_expect(x), y)


def _cmp_values(path, vis, got):
    _eq(f"{path} names", [v.name for v in vis], [g["name"] for g in got])
    for v, g in zip(vis, got):
        _eq(f"{path}['{v.name}'].type", type_expect(v.type), g["type"])


def compare_nodes(path, nodes, got_nodes, base_dir):
    _eq(f"{path} count", len(nodes), len(got_nodes))
    by_src = {n["source_index"]: n for n in got_nodes}
    for i, n in enumerate(nodes):
        g = by_src.get(i)
        p = f"{path}[{i}] '{n.name}'"
        if g is None:
            raise Mismatch(f"{p}: kiln has no node with source_index {i}")
        _eq(f"{p}.name", n.name, g["name"])
        _eq(f"{p}.op_type", n.op_type, g["op_type"])
        _eq(f"{p}.domain", "" if n.domain == "ai.onnx" else n.domain, g["domain"])
        _eq(f"{p}.inputs", list(n.input), g["inputs"])
        _eq(f"{p}.outputs", list(n.output), g["outputs"])
        _eq(f"{p}.attribute names", [a.name for a in n.attribute], [a["name"] for a in g["attributes"]])
        for a, ga in zip(n.attribute, g["attributes"]):
            _cmp_attr(f"{p}.attribute '{a.name}'", a, ga, base_dir)


def compare_graph(path, g, got, base_dir):
    _eq(f"{path}.name", g.name, got["name"])
    _cmp_values(f"{path}.inputs", g.input, got["inputs"])
    _cmp_values(f"{path}.outputs", g.output, got["outputs"])
    io = {v.name for v in g.input} | {v.name for v in g.output}
    if "value_info" in got:
        got_vi = {v["name"]: v["type"] for v in got["value_info"]}
        for vi in g.value_info:
            if vi.name in io:
                continue
            if vi.name not in got_vi:
                raise Mismatch(f"{path}.value_info: kiln lacks '{vi.name}'")
            _eq(f"{path}.value_info['{vi.name}'].type", type_expect(vi.type), got_vi[vi.name])
    if "nodes" in got:
        compare_nodes(f"{path}.nodes", g.node, got["nodes"], base_dir)
    if "initializers" in got:
        _eq(f"{path}.initializers count", len(g.initializer), len(got["initializers"]))
        for i, (t, gt) in enumerate(zip(g.initializer, got["initializers"])):
            _cmp_tensor(f"{path}.initializers[{i}]", t, gt, base_dir)
        sp = got.get("sparse_initializers", [])
        _eq(f"{path}.sparse_initializers count", len(g.sparse_initializer), len(sp))
        for i, (t, gt) in enumerate(zip(g.sparse_initializer, sp)):
            _cmp_sparse(f"{path}.sparse_initializers[{i}]", t, gt, base_dir)


def compare_model(m, got, base_dir):
    """Raises Mismatch naming the first field where kiln's JSON differs from onnx's model."""
    _eq("ir_version", m.ir_version, got["ir_version"])
    _eq("opsets", [("" if o.domain == "ai.onnx" else o.domain, o.version) for o in m.opset_import],
        [(o["domain"], o["version"]) for o in got["opsets"]])
    _eq("producer_name", m.producer_name, got["producer_name"])
    _eq("producer_version", m.producer_version, got["producer_version"])
    _eq("model_version", m.model_version, got["model_version"])
    _eq("metadata", [(p.key, p.value) for p in m.metadata_props], [(p["key"], p["value"]) for p in got["metadata"]])
    _cmp_values("inputs", m.graph.input, got["inputs"])
    _cmp_values("outputs", m.graph.output, got["outputs"])
    compare_graph("graph", m.graph, got["graph"], base_dir)
    _eq("functions", [(f.domain, f.name) for f in m.functions], [(f["domain"], f["name"]) for f in got["functions"]])
    for f, gf in zip(m.functions, got["functions"]):
        p = f"function '{f.name}'"
        _eq(f"{p}.node_count", len(f.node), gf["node_count"])
        if "body" in gf:
            _eq(f"{p}.inputs", list(f.input), [v["name"] for v in gf["body"]["inputs"]])
            _eq(f"{p}.outputs", list(f.output), [v["name"] for v in gf["body"]["outputs"]])
            compare_nodes(f"{p}.nodes", f.node, gf["body"]["nodes"], base_dir)
