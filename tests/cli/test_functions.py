"""test_functions.py - models that call model-local functions (FunctionProto).

kiln expands each call into the function's body when it loads a model (src/ir/inline.c),
so check, exec and verify see plain nodes. These tests build models with functions the
way exporters do (attribute references, a default attribute, a function calling another
function, an unused optional output) and check that outputs match ONNX Runtime, that
`kiln check` knows every op, and that `kiln inspect` still shows the call as written.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from op_case import kiln_bin, make_case, run_verify, case_status  # noqa: E402

DOMAIN = "com.example"


def scaled_relu_function():
    """y = Relu(x * alpha) + bias, alpha from the caller (default 2.0)."""
    alpha = helper.make_node("Constant", [], ["alpha_t"], name="alpha_const")
    attr = helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT, ref_attr_name="alpha")
    alpha.attribute.append(attr)
    nodes = [
        alpha,
        helper.make_node("Mul", ["x", "alpha_t"], ["scaled"], name="mul"),
        helper.make_node("Relu", ["scaled"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "bias"], ["y"], name="add"),
    ]
    return helper.make_function(DOMAIN, "ScaledRelu", ["x", "bias"], ["y"], nodes,
                                [helper.make_opsetid("", 17)], attributes=[],
                                attribute_protos=[helper.make_attribute("alpha", 2.0)])


def block_function():
    """Calls ScaledRelu twice: a function inside a function."""
    nodes = [
        helper.make_node("ScaledRelu", ["x", "b"], ["h"], domain=DOMAIN, name="first", alpha=0.5),
        helper.make_node("ScaledRelu", ["h", "b"], ["y"], domain=DOMAIN, name="second"),
    ]
    return helper.make_function(DOMAIN, "Block", ["x", "b"], ["y"], nodes,
                                [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def model_with_functions():
    nodes = [
        helper.make_node("Block", ["x", "b"], ["h"], domain=DOMAIN, name="/block0"),
        helper.make_node("ScaledRelu", ["h", "b"], ["y"], domain=DOMAIN, name="/act", alpha=3.0),
    ]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)],
                          functions=[scaled_relu_function(), block_function()])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def test_function_calls_match_onnxruntime(tmp_path):
    rng = np.random.default_rng(7)
    inputs = {"x": rng.standard_normal((3, 8)).astype(np.float32),
              "b": rng.standard_normal(8).astype(np.float32)}
    case = make_case(tmp_path / "functions", model_with_functions(), inputs)
    res = run_verify([case])
    st = case_status(res, "functions")
    assert st["status"] == "pass", st


def test_check_sees_the_inlined_ops(tmp_path):
    path = tmp_path / "f.onnx"
    onnx.save(model_with_functions(), path)
    r = subprocess.run([kiln_bin(), "check", str(path), "--shapes=x:2x8", "--json", "-"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    codes = {d["code"] for d in report["diagnostics"]}
    assert "unsupported-op" not in codes and "infer-unknown-op" not in codes, report["diagnostics"]


def test_inspect_shows_calls_as_written(tmp_path):
    path = tmp_path / "f.onnx"
    onnx.save(model_with_functions(), path)
    r = subprocess.run([kiln_bin(), "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Block" in r.stdout and "ScaledRelu" in r.stdout


def test_recursive_function_is_an_error_not_a_hang(tmp_path):
    loop = helper.make_function(DOMAIN, "Forever", ["x"], ["y"],
                                [helper.make_node("Forever", ["x"], ["y"], domain=DOMAIN, name="again")],
                                [helper.make_opsetid(DOMAIN, 1)])
    g = helper.make_graph([helper.make_node("Forever", ["x"], ["y"], domain=DOMAIN, name="call")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)],
                          functions=[loop])
    m.ir_version = 10
    path = tmp_path / "rec.onnx"
    onnx.save(m, path)
    r = subprocess.run([kiln_bin(), "check", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "error[function-inline]" in out and "Forever" in out and "calls itself" in out
