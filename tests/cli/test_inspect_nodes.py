"""`kiln inspect ENGINE` per-node table (src/engine/engine_nodes.c): precision, layout and
chosen tactic per node, in text and --json. Checked on a CPU-built engine for the fields
that exist there (float precision, nchw for layout-sensitive ops, the CPU kernel the build
chose); the GPU fields (half, nhwc, graph-API/cuBLASLt tactics) are unit-tested in
tests/unit/test_engine_nhwc.c and checked on a GPU by tests/gpu/exec_gpu.py."""
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))


def run(*args):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """x[1, 8, 16, 16] -> Conv 3x3 -> MaxPool 2x2 -> Flatten -> MatMul -> y[1, 4]"""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "W")
    fc = numpy_helper.from_array(rng.standard_normal((8 * 8 * 8, 4)).astype(np.float32), "FC")
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], name="/conv", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["p"], name="/pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="/flat"),
        helper.make_node("MatMul", ["f", "FC"], ["y"], name="/fc"),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w, fc])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    d = tmp_path_factory.mktemp("n")
    onnx.save(m, str(d / "cnn.onnx"))
    eng = d / "cnn.engine"
    run("exec", f"--onnx={d / 'cnn.onnx'}", f"--saveEngine={eng}", "--skipInference")
    return eng


def test_nodes_json_cpu_engine(engine):
    j = json.loads(run("inspect", "--json", engine).stdout)
    nodes = {n["name"]: n for n in j["nodes"]}
    assert set(nodes) == {"/conv", "/pool", "/flat", "/fc"}
    assert all(n["precision"] == "float" and n["domain"] == "" for n in nodes.values())
    assert nodes["/conv"]["layout"] == "nchw" and nodes["/pool"]["layout"] == "nchw"
    assert nodes["/flat"]["layout"] == "-" and nodes["/fc"]["layout"] == "-"
    # a CPU engine's tactic is the kernel its LAYERS entry records for that node
    layers = {l["name"]: l for l in j["layers"]}
    for name, n in nodes.items():
        assert n["tactic"] == layers[name]["tactic"], name
        assert n["tactic_ms"] is None or n["tactic_ms"] > 0


def test_nodes_text_cpu_engine(engine):
    out = run("inspect", engine).stdout
    assert "\nnodes (4)\n" in out
    table = out.split("\nnodes (4)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0].split() == ["#", "name", "op", "prec", "layout", "tactic"]
    row = {l.split()[1]: l.split() for l in table[1:]}
    assert [int(r[0]) for r in row.values()] == [0, 1, 2, 3]  # node index first
    assert row["/conv"][2:5] == ["Conv", "float", "nchw"]
    assert row["/flat"][2:5] == ["Flatten", "float", "-"]


def test_corrupt_graph_is_reported_not_fatal(engine, tmp_path):
    """inspect reads the metadata sections first; a GRAPH section that does not decode (a
    flipped byte: its checksum fails) is named in the nodes line, and nodes is null in the
    JSON, while the rest still prints."""
    data = bytearray(engine.read_bytes())
    graph = None
    for k in range(8):  # section table at 128, 32-byte entries (src/engine/format.h)
        sid, _flags, off, size = struct.unpack_from("<IIQQ", data, 128 + 32 * k)
        if sid == 2:  # ENGINE_SEC_GRAPH
            graph = (off, size)
            break
    assert graph and graph[1] > 16
    data[graph[0] + graph[1] // 2] ^= 0xFF
    bad = tmp_path / "bad.engine"
    bad.write_bytes(bytes(data))
    j = json.loads(run("inspect", "--json", bad).stdout)
    assert j["nodes"] is None
    assert "GRAPH" in j["nodes_error"] and "corrupt" in j["nodes_error"]
    assert [l["name"] for l in j["layers"]]  # the metadata still prints
    out = run("inspect", bad).stdout
    assert "nodes      (graph not decoded: " in out
