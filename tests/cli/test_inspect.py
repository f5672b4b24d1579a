"""test_inspect.py - `kiln inspect`: what it prints about models (text and JSON), exit codes,
usage errors, and the structural problems it reports. Expected values are computed from
the models with the onnx package, not copied from kiln's output."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx_expect  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
EXAMPLE = ROOT / "examples" / "embed_proj.onnx"


def kiln(*args):
    return subprocess.run([KILN, "inspect", *map(str, args)], capture_output=True, text=True)


def inspect_json(*args):
    p = kiln("--json", *args)
    assert p.stdout, p.stderr
    return p, json.loads(p.stdout)


def save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def make_model(nodes, inputs, outputs, inits=(), opset=17, ir=8, **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], **kw)
    m.ir_version = ir
    return m


# ---- the bundled example ------------------------------------------------------------------

def test_example_text_summary():
    p = kiln(EXAMPLE)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    m = onnx.load(str(EXAMPLE))
    assert f"file        {EXAMPLE}" in out
    assert f"producer    {m.producer_name} {m.producer_version}" in out
    assert f"ir_version  {m.ir_version}" in out
    assert "opsets      ai.onnx 17" in out
    assert "input_ids  int64[batch, seq_len]" in out
    assert "output  float32[batch, seq_len, 256]" in out
    assert "operators: 3 nodes, 3 distinct" in out
    for op in ("Gather", "MatMul", "Add"):
        assert any(line.split() == [op, "1"] for line in out.splitlines()), op
    n_params = sum(int(np.prod(t.dims)) for t in m.graph.initializer)
    assert f"parameters: {n_params:,} in 3 tensors" in out
    assert "validation: ok" in out


def test_example_json_summary_matches_onnx():
    p, j = inspect_json(EXAMPLE)
    assert p.returncode == 0
    m = onnx.load(str(EXAMPLE))
    assert j["format"] == "onnx"
    assert j["file_size"] == EXAMPLE.stat().st_size
    assert j["ir_version"] == m.ir_version
    assert j["opsets"] == [{"domain": "", "version": 17}]
    assert j["inputs"] == [{"name": "input_ids",
                            "type": {"kind": "tensor", "dtype": "int64", "shape": ["batch", "seq_len"]}}]
    assert j["outputs"][0]["type"]["shape"] == ["batch", "seq_len", 256]
    assert sorted((o["op_type"], o["count"]) for o in j["operators"]) == [("Add", 1), ("Gather", 1), ("MatMul", 1)]
    n_params = sum(int(np.prod(t.dims)) for t in m.graph.initializer)
    assert j["parameters"]["count"] == n_params
    assert j["parameters"]["bytes"] == 4 * n_params
    assert j["parameters"]["by_dtype"] == [{"dtype": "float32", "count": n_params, "bytes": 4 * n_params, "tensors": 3}]
    assert j["errors"] == 0 and j["diagnostics"] == []
    # no --show: no per-node or per-weight arrays
    assert "graph" not in j


def test_example_show_nodes_and_weights_match_onnx():
    m = onnx.load(str(EXAMPLE))
    for args in (["--show", "nodes", "--show", "weights"], ["--show=nodes,weights"]):
        p, j = inspect_json(EXAMPLE, *args)
        assert p.returncode == 0
        onnx_expect.compare_model(m, j, str(EXAMPLE.parent))
    names = [n["name"] for n in j["graph"]["nodes"]]
    assert names == ["/embedding/Gather", "/fc/MatMul", "/fc/Add"]
    w = {t["name"]: t for t in j["graph"]["initializers"]}
    assert w["embedding.weight"]["dims"] == [1000, 64]
    assert w["embedding.weight"]["bytes"] == 1000 * 64 * 4
    assert w["embedding.weight"]["where"] == "inline"


def test_show_text_lists_nodes_and_weights():
    p = kiln(EXAMPLE, "--show", "nodes", "--show", "weights")
    assert p.returncode == 0
    assert "[1] /fc/MatMul  MatMul  (/embedding/Gather_output_0, onnx::MatMul_8) -> (/fc/MatMul_output_0)" in p.stdout
    assert "[0] /embedding/Gather  Gather  (embedding.weight, input_ids) -> (/embedding/Gather_output_0)  axis=0" \
        in p.stdout
    assert "embedding.weight  float32[1000, 64]  250.0 KiB  inline @ " in p.stdout


def test_tiny_cnn_attributes():
    p, j = inspect_json(ROOT / "examples" / "tiny_cnn.onnx", "--show", "nodes")
    assert p.returncode == 0
    conv = j["graph"]["nodes"][0]
    attrs = {a["name"]: a for a in conv["attributes"]}
    assert attrs["kernel_shape"] == {"name": "kernel_shape", "type": "ints", "value": [3, 3]}
    assert attrs["pads"]["value"] == [1, 1, 1, 1]
    gemm = j["graph"]["nodes"][-1]
    assert {a["name"]: a["value"] for a in gemm["attributes"]}["transB"] == 1
    assert j["inputs"][0]["type"]["shape"] == ["batch", 3, 32, 32]


# ---- usage and bad files -------------------------------------------------------------------

def test_help_and_usage_errors():
    p = kiln("--help")
    assert p.returncode == 0 and "usage: kiln inspect" in p.stdout and "--show" in p.stdout
    p = kiln(EXAMPLE, "--jsno")
    assert p.returncode == 2
    assert "unknown option '--jsno'; did you mean '--json'?" in p.stderr
    p = kiln(EXAMPLE, "--show", "weigths")
    assert p.returncode == 2
    assert "did you mean 'weights'?" in p.stderr
    p = kiln(EXAMPLE, "--show")
    assert p.returncode == 2
    p = kiln()
    assert p.returncode == 2 and "expected a model path" in p.stderr
    p = kiln(EXAMPLE, EXAMPLE)
    assert p.returncode == 2 and "more than one file" in p.stderr


def test_missing_and_garbage_files(tmp_path):
    p = kiln(tmp_path / "nope.onnx")
    assert p.returncode == 1
    assert p.stderr.startswith("kiln inspect: error: ")
    assert "nope.onnx" in p.stderr
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12345\n")
    p = kiln(bad)
    assert p.returncode == 1
    assert p.stderr.startswith("kiln inspect: error: ")
    assert p.stdout == ""


# ---- structure: validation results, subgraphs, domains, external data ------------------------

def test_structural_errors_are_reported(tmp_path):
    m = make_model(
        [helper.make_node("Relu", ["input_x"], ["h"], name="first"),
         helper.make_node("Relu", ["h"], ["out"], name="second")],
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])
    path = save(tmp_path, m)
    p = kiln(path)
    assert p.returncode == 1
    assert "error[structure-missing-producer]: node 'first' (Relu): input 0 'input_x' is not produced" in p.stdout
    assert "did you mean 'input'?" in p.stdout
    p, j = inspect_json(path)
    assert p.returncode == 1
    assert j["errors"] == 1
    d = j["diagnostics"][0]
    assert (d["severity"], d["code"], d["node"], d["op_type"]) == ("error", "structure-missing-producer", "first", "Relu")


def test_initializer_that_is_an_input_is_flagged(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
                    helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits=[w])
    path = save(tmp_path, m)
    p = kiln(path)
    assert p.returncode == 0, p.stdout
    assert "w  float32[2, 2]  (has an initializer: an overridable default)" in p.stdout
    assert "warning[structure-initializer-is-input]" in p.stdout
    _, j = inspect_json(path)
    assert [i.get("initializer", False) for i in j["inputs"]] == [False, True]
    assert j["warnings"] == 1 and j["errors"] == 0


def test_subgraphs_and_custom_domains_in_histogram(tmp_path):
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="t_relu"),
                                helper.make_node("Neg", ["t"], ["t2"], name="t_neg")], "then", [],
                               [helper.make_tensor_value_info("t2", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="e_relu")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
             helper.make_node("MyOp", ["y"], ["z"], name="custom", domain="com.example")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                       helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    m.ir_version = 8
    path = save(tmp_path, m)
    p = kiln(path)
    assert p.returncode == 0, p.stdout
    assert "operators: 5 nodes (3 in 2 subgraphs), 4 distinct" in p.stdout
    assert any(line.split() == ["com.example.MyOp", "1"] for line in p.stdout.splitlines())
    assert "opsets      ai.onnx 17, com.example 1" in p.stdout
    _, j = inspect_json(path, "--show", "nodes")
    assert (j["node_count"], j["subgraph_node_count"], j["subgraph_count"]) == (5, 3, 2)
    assert {(o["domain"], o["op_type"]): o["count"] for o in j["operators"]}[("", "Relu")] == 2
    onnx_expect.compare_model(m, j, str(tmp_path))
    p = kiln(path, "--show", "nodes")
    assert "then_branch:" in p.stdout and "t_neg  Neg  (t) -> (t2)" in p.stdout


def test_external_data_is_listed_and_hashed(tmp_path):
    rng = np.random.default_rng(3)
    big = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "big")
    small = numpy_helper.from_array(np.arange(4, dtype=np.int64), "small")
    m = make_model([helper.make_node("MatMul", ["x", "big"], ["y"], name="mm")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], inits=[big, small])
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="ext.bin", size_threshold=1024)
    p = kiln(path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "external data (1 file)" in p.stdout
    assert "ext.bin  8.0 KiB, 1 tensor, 8.0 KiB referenced" in p.stdout
    p, j = inspect_json(path, "--show", "weights")
    assert j["external_data"] == [{"location": "ext.bin", "file_size": 64 * 32 * 4, "tensors": 1, "bytes": 64 * 32 * 4}]
    w = {t["name"]: t for t in j["graph"]["initializers"]}
    assert w["big"]["where"] == "external" and w["big"]["location"] == "ext.bin" and w["big"]["offset"] == 0
    assert w["small"]["where"] == "inline"
    onnx_expect.compare_model(onnx.load(str(path), load_external_data=False), j, str(tmp_path))


def test_metadata_functions_and_doc(tmp_path):
    fn = helper.make_function("local", "Double", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    m = make_model([helper.make_node("Double", ["x"], ["y"], name="call", domain="local")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                   functions=[fn], doc_string="A model with a function.\nSecond line.")
    m.opset_import.append(helper.make_opsetid("local", 1))
    helper.set_model_props(m, {"author": "kiln tests", "license": "MIT"})
    path = save(tmp_path, m)
    p = kiln(path)
    assert p.returncode == 0, p.stdout
    assert "doc         A model with a function...." in p.stdout
    assert "metadata (2)\n  author: kiln tests\n  license: MIT" in p.stdout
    assert "functions (1)\n  local.Double  1 nodes" in p.stdout
    _, j = inspect_json(path, "--show", "nodes")
    assert j["metadata"] == [{"key": "author", "value": "kiln tests"}, {"key": "license", "value": "MIT"}]
    assert j["functions"][0]["name"] == "Double" and j["functions"][0]["node_count"] == 1
    onnx_expect.compare_model(m, j, str(tmp_path))


def test_attribute_values_round_trip(tmp_path):
    t = helper.make_tensor("c", TensorProto.FLOAT16, [3], np.array([1.5, -2.0, 65504], np.float16))
    s = helper.make_tensor("s", TensorProto.STRING, [2], [b"ab", b"\xff\x00z"])
    n = helper.make_node("Custom", ["x"], ["y"], name="c", domain="test",
                         f=0.1, fl=[1e-7, float("inf"), float("nan")], i=-(2 ** 62), il=[1, -1],
                         st="h\u00e9\"llo\n", sl=[b"a", b"\xfe"], t=t, ts=[t, s])
    m = make_model([n], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m.opset_import.append(helper.make_opsetid("test", 1))
    path = save(tmp_path, m)
    p, j = inspect_json(path, "--show", "nodes")
    onnx_expect.compare_model(m, j, str(tmp_path))
    attrs = {a["name"]: a for a in j["graph"]["nodes"][0]["attributes"]}
    assert attrs["f"]["value"] == 0.100000001
    assert attrs["fl"]["value"][1:] == ["inf", "nan"]
    assert attrs["i"]["value"] == -(2 ** 62)
    assert attrs["t"]["value"]["fnv1a64"] == onnx_expect.fnv1a64(np.array([1.5, -2.0, 65504], "<f2").tobytes())


def test_time_load_flag():
    p = kiln("--time-load", EXAMPLE)
    assert p.returncode == 0, p.stderr
    fields = dict(line.split() for line in p.stdout.splitlines())
    assert float(fields["load_seconds"]) >= 0
    if Path("/proc/self/status").exists():
        assert int(fields["peak_rss_bytes"]) > 0


def test_missing_external_file_is_reported_not_fatal(tmp_path):
    big = numpy_helper.from_array(np.ones((64, 32), np.float32), "big")
    m = make_model([helper.make_node("MatMul", ["x", "big"], ["y"], name="mm")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], inits=[big])
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    p = kiln(path)
    assert p.returncode == 1
    # everything else is still shown, and the problem names the file
    assert "input" in p.stdout and "x  float32[n, 64]" in p.stdout
    assert "error[external-data-unreadable]" in p.stdout and "weights.bin" in p.stdout
    assert "weights.bin  (missing or empty), 1 tensor, 8.0 KiB referenced" in p.stdout


def test_unsorted_model_is_sorted_and_cycles_are_named(tmp_path):
    nodes = [helper.make_node("Neg", ["b"], ["y"], name="last"),
             helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Abs", ["a"], ["b"], name="middle")]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = make_model(nodes, *io)
    path = save(tmp_path, m)
    p, j = inspect_json(path, "--show", "nodes")
    assert p.returncode == 0
    assert [(n["name"], n["source_index"]) for n in j["graph"]["nodes"]] == [("first", 1), ("middle", 2), ("last", 0)]
    onnx_expect.compare_model(m, j, str(tmp_path))

    cyc = make_model([helper.make_node("Relu", ["x", "c"], ["a"], name="A"),
                      helper.make_node("Abs", ["a"], ["b"], name="B"),
                      helper.make_node("Neg", ["b"], ["c"], name="C"),
                      helper.make_node("Neg", ["c"], ["y"], name="D")], *io)
    p = kiln(save(tmp_path, cyc, "cycle.onnx"))
    assert p.returncode == 1
    assert "error[structure-cycle]: the graph has a cycle: 'A' (Relu) -> 'B' (Abs) -> 'C' (Neg) -> 'A' (Relu)" \
        in p.stdout


def test_old_ir_initializers_as_inputs_are_counted_not_listed(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
                    helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits=[w], opset=8, ir=3)
    p = kiln(save(tmp_path, m))
    assert p.returncode == 0, p.stdout
    assert "inputs (1)\n  x  float32[2, 2]\n  + 1 input that carries initializers (required for IR version < 4)" \
        in p.stdout
    assert "warning" not in p.stdout
