"""kiln verify: PASS/FAIL/SKIP lines, the closing counts, tolerances, exit codes, and the
runtime-owned ops (Identity, If, Loop, Scan, sequences) checked against ONNX Runtime."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from op_case import case_status, kiln_bin, make_case, run_verify  # noqa: E402

SHARED = REPO.parent / "shared" / "onnx-backend-tests"
rng = np.random.default_rng(0)


def verify(*args):
    return subprocess.run([kiln_bin(), "verify", *map(str, args)], capture_output=True, text=True, timeout=300)


def model(nodes, inputs, outputs, opset=17, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def fvi(name, shape=None, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


# ---- ops owned by the runtime, against ONNX Runtime -------------------------------------

def test_identity_and_constant(tmp_path):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a = make_case(tmp_path / "identity", {"op_type": "Identity"}, {"x": x})
    c = model([helper.make_node("Constant", [], ["y"], value_ints=[3, 1, 4])], [], [fvi("y", [3], TensorProto.INT64)])
    b = make_case(tmp_path / "constant_ints", c, {})
    res = run_verify([a, b])
    assert res["returncode"] == 0, res["stdout"]
    assert [c["status"] for c in res["cases"]] == ["pass", "pass"]
    assert res["stdout"].splitlines()[-1] == "2 passed, 0 failed, 0 skipped"


def test_if_reads_outer_scope(tmp_path):
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [fvi("t")])
    else_g = helper.make_graph([helper.make_node("Identity", ["w"], ["e"])], "else", [], [fvi("e")])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [fvi("c", [], TensorProto.BOOL), fvi("x", [2]), fvi("w", [3])], [fvi("y")])
    x = np.array([1, 2], np.float32)
    w = np.array([7, 8, 9], np.float32)
    d1 = make_case(tmp_path / "if_true", m, {"c": np.array(True), "x": x, "w": w})
    d2 = make_case(tmp_path / "if_false", m, {"c": np.array(False), "x": x, "w": w})
    res = run_verify([d1, d2])
    assert [c["status"] for c in res["cases"]] == ["pass", "pass"], res["stdout"]


def test_loop_carries_a_sequence_and_stacks_scan_outputs(tmp_path):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("SequenceInsert", ["seq_in", "x"], ["seq_out"]),
         helper.make_node("Identity", ["i"], ["i_out"])],
        "body",
        [fvi("i", [], TensorProto.INT64), fvi("cond_in", [], TensorProto.BOOL),
         helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, None)],
        [fvi("cond_out", [], TensorProto.BOOL), helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, None),
         fvi("i_out", [], TensorProto.INT64)])
    m = model([helper.make_node("SequenceEmpty", [], ["s0"], dtype=TensorProto.FLOAT),
               helper.make_node("Loop", ["M", "cond", "s0"], ["seq", "iters"], body=body),
               helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1)],
              [fvi("M", [], TensorProto.INT64), fvi("cond", [], TensorProto.BOOL), fvi("x", [2])],
              [fvi("y"), fvi("iters", None, TensorProto.INT64)])
    d = make_case(tmp_path / "loop_seq", m, {"M": np.array(4, np.int64), "cond": np.array(True),
                                             "x": np.array([5, 6], np.float32)})
    res = run_verify([d])
    assert res["cases"][0]["status"] == "pass", res["stdout"]


def test_scan_directions_and_axes(tmp_path):
    body = helper.make_graph([helper.make_node("Identity", ["s"], ["s_out"]), helper.make_node("Identity", ["x"], ["y"])],
                             "body", [fvi("s", [2]), fvi("x", [2])], [fvi("s_out", [2]), fvi("y", [2])])
    m = model([helper.make_node("Scan", ["s0", "xs"], ["s_final", "ys"], body=body, num_scan_inputs=1,
                                scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1])],
              [fvi("s0", [2]), fvi("xs", [2, 3])], [fvi("s_final", [2]), fvi("ys", [2, 3])], opset=16)
    d = make_case(tmp_path / "scan_rev", m, {"s0": np.array([1, 2], np.float32),
                                             "xs": rng.standard_normal((2, 3)).astype(np.float32)})
    res = run_verify([d])
    assert res["cases"][0]["status"] == "pass", res["stdout"]


def test_sequence_ops(tmp_path):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["seq"], axis=1),
        helper.make_node("SequenceErase", ["seq", "p0"], ["seq2"]),
        helper.make_node("SequenceInsert", ["seq2", "x", "p0"], ["seq3"]),
        helper.make_node("SequenceAt", ["seq3", "pm1"], ["last"]),
        helper.make_node("SequenceLength", ["seq3"], ["n"]),
        helper.make_node("SequenceConstruct", ["last", "last"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["cat"], axis=1),
    ]
    inits = [helper.make_tensor("split", TensorProto.INT64, [2], [1, 3]),
             helper.make_tensor("p0", TensorProto.INT64, [], [0]),
             helper.make_tensor("pm1", TensorProto.INT64, [], [-1])]
    m = model(nodes, [fvi("x", [3, 4])], [fvi("last"), fvi("n", None, TensorProto.INT64), fvi("cat")], inits=inits)
    d = make_case(tmp_path / "seq_ops", m, {"x": x})
    seq_in = model([helper.make_node("SequenceLength", ["s"], ["n"])],
                   [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)], [fvi("n", None, TensorProto.INT64)])
    d2 = make_case(tmp_path / "seq_input", seq_in, {"s": [x, x[:1]]})
    res = run_verify([d, d2])
    assert [c["status"] for c in res["cases"]] == ["pass", "pass"], res["stdout"]


def test_optional_ops(tmp_path):
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    m = model([helper.make_node("Optional", ["x"], ["o"]),
               helper.make_node("OptionalHasElement", ["o"], ["has"]),
               helper.make_node("OptionalGetElement", ["o"], ["y"])],
              [fvi("x", [2])], [fvi("has", None, TensorProto.BOOL), fvi("y")], opset=18)
    d = make_case(tmp_path / "optional", m, {"x": np.array([1, 2], np.float32)})
    empty = model([helper.make_node("Optional", [], ["o"], type=opt_t.optional_type.elem_type),
                   helper.make_node("OptionalHasElement", ["o"], ["has"])],
                  [], [fvi("has", None, TensorProto.BOOL)], opset=18)
    d2 = make_case(tmp_path / "optional_empty", empty, {}, expected=[np.array(False)])
    res = run_verify([d, d2])
    assert [c["status"] for c in res["cases"]] == ["pass", "pass"], res["stdout"]


# ---- verify's behaviour -----------------------------------------------------------------

def identity_case(path, x, expected):
    return make_case(path, {"op_type": "Identity"}, {"x": x}, expected=[expected])


def test_fail_line_names_output_element_and_tolerance(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    e = x.copy()
    e[2, 3] = 1.25
    d = identity_case(tmp_path / "bad_value", x, e)
    p = verify(d)
    assert p.returncode == 1
    line = p.stdout.splitlines()[0]
    assert line.startswith("FAIL bad_value: output 0 'y' element [2, 3] (flat 11): got 11, expected 1.25")
    assert "tolerance" in line
    assert p.stdout.splitlines()[-1] == "0 passed, 1 failed, 0 skipped"


def test_shape_dtype_and_integer_mismatch(tmp_path):
    x = np.ones((2, 3), np.float32)
    shape = identity_case(tmp_path / "bad_shape", x, np.ones((3, 2), np.float32))
    dtype = identity_case(tmp_path / "bad_dtype", x, np.ones((2, 3), np.float64))
    xi = np.array([1, 2, 3], np.int64)
    ints = identity_case(tmp_path / "bad_int", xi, np.array([1, 2, 4], np.int64))
    res = run_verify([shape, dtype, ints])
    assert "shape float32[2, 3], expected float32[3, 2]" in case_status(res, "bad_shape")["reason"]
    assert "dtype float32, expected float64" in case_status(res, "bad_dtype")["reason"]
    assert "element [2] (flat 2): got 3, expected 4" in case_status(res, "bad_int")["reason"]
    assert res["returncode"] == 1


def test_nan_matches_nan_and_inf_must_match(tmp_path):
    x = np.array([np.nan, np.inf, 1.0], np.float32)
    ok = identity_case(tmp_path / "nan_ok", x, x.copy())
    bad = identity_case(tmp_path / "inf_bad", x, np.array([np.nan, -np.inf, 1.0], np.float32))
    res = run_verify([ok, bad])
    assert case_status(res, "nan_ok")["status"] == "pass"
    assert case_status(res, "inf_bad")["status"] == "fail"
    assert "element [1]" in case_status(res, "inf_bad")["reason"]


def test_tolerances_flags_and_data_json(tmp_path):
    x = np.full((4,), 100.0, np.float32)
    e = x * (1 + 5e-4)  # within the default rtol 1e-3, not within 1e-4
    d = identity_case(tmp_path / "near", x, e.astype(np.float32))
    assert verify(d).returncode == 0
    p = verify("--rtol", "1e-4", "--atol", "0", d)
    assert p.returncode == 1 and "FAIL near" in p.stdout
    assert verify("--atol", "0.1", "--rtol", "0", d).returncode == 0
    # data.json tightens the tolerance for this case; the flag overrides data.json
    (d / "data.json").write_text('{"rtol": 1e-5, "atol": 0}')
    assert verify(d).returncode == 1
    assert verify("--rtol", "1e-3", d).returncode == 0


def test_skip_unsupported_op_and_summary(tmp_path):
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")
    m = helper.make_model(helper.make_graph([node], "g", [fvi("x", [2])], [fvi("y", [2])]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    m.ir_version = 8
    x = np.ones(2, np.float32)
    d = make_case(tmp_path / "fancy", m, {"x": x}, expected=[x])
    ok = identity_case(tmp_path / "fine", x, x)
    p = verify(d, ok)
    assert p.returncode == 0, p.stdout  # skips do not fail the run
    lines = p.stdout.splitlines()
    assert "SKIP fancy: unsupported op: FancyOp" in lines
    assert "PASS fine" in lines
    assert lines[-2] == "skip reasons: unsupported op FancyOp (1)"
    assert lines[-1] == "1 passed, 0 failed, 1 skipped"


def test_folder_of_cases_filter_quiet_json(tmp_path):
    x = np.ones((2,), np.float32)
    identity_case(tmp_path / "suite" / "case_a", x, x)
    identity_case(tmp_path / "suite" / "case_b", x, x + 1)
    identity_case(tmp_path / "suite" / "other", x, x)
    (tmp_path / "suite" / "not_a_case").mkdir()
    p = verify(tmp_path / "suite")
    assert p.stdout.splitlines()[-1] == "2 passed, 1 failed, 0 skipped"
    assert p.returncode == 1
    q = verify("--quiet", tmp_path / "suite")
    assert q.stdout.splitlines()[0].startswith("FAIL case_b:")
    assert not any(line.startswith("PASS") for line in q.stdout.splitlines())
    res = run_verify([tmp_path / "suite"], "--filter", "case_", "-j", "2")
    assert [c["name"] for c in res["cases"]] == ["case_a", "case_b"]
    assert (res["passed"], res["failed"], res["skipped"]) == (1, 1, 0)
    assert res["cases"][0]["ops"] == ["Identity"]


def test_bad_test_data_fails_cleanly(tmp_path):
    x = np.ones((2, 2), np.float32)
    corrupt = identity_case(tmp_path / "corrupt", x, x)
    raw = (corrupt / "test_data_set_0" / "input_0.pb").read_bytes()
    (corrupt / "test_data_set_0" / "input_0.pb").write_bytes(raw[: len(raw) // 2] + b"\xff\xff\xff")
    missing = identity_case(tmp_path / "missing_input", x, x)
    (missing / "test_data_set_0" / "input_0.pb").unlink()
    fine = identity_case(tmp_path / "fine", x, x)
    res = run_verify([corrupt, missing, fine])
    c = case_status(res, "corrupt")
    assert c["status"] == "fail" and "bad test data: input_0.pb" in c["reason"]
    m = case_status(res, "missing_input")
    assert m["status"] == "fail" and "missing input 'x'" in m["reason"]
    assert case_status(res, "fine")["status"] == "pass"


def test_model_load_error_is_a_skip_with_reason(tmp_path):
    x = np.ones((2,), np.float32)
    d = identity_case(tmp_path / "truncated", x, x)
    raw = (d / "model.onnx").read_bytes()
    (d / "model.onnx").write_bytes(raw[:10])
    p = verify(d)
    line = p.stdout.splitlines()[0]
    assert line.startswith("SKIP truncated: ")
    assert p.stdout.splitlines()[-1] == "0 passed, 0 failed, 1 skipped"


def test_usage_errors():
    p = verify()
    assert p.returncode == 2 and "usage: kiln verify" in p.stderr
    p = verify("--rtoll", "1", ".")
    assert p.returncode == 2 and "did you mean '--rtol'" in p.stderr
    p = verify("--backend", "cuda", ".")
    assert p.returncode == 2 and "--backend cpu" in p.stderr
    p = verify("/nonexistent/folder")
    assert p.returncode == 2 and "not a folder" in p.stderr
    p = verify("--threads", "zero", ".")
    assert p.returncode == 2
    # --name=value works like --name value; a flag without a value refuses one
    p = verify("--threads=zero", ".")
    assert p.returncode == 2 and "--threads expects a positive integer, got 'zero'" in p.stderr
    p = verify("--quiet=1", ".")
    assert p.returncode == 2 and "--quiet takes no value" in p.stderr


@pytest.mark.skipif(not (SHARED / "node").is_dir(), reason="ONNX backend test data not found at ../shared")
def test_backend_node_cases_for_runtime_ops():
    res = run_verify([SHARED / "node"], "--filter", "test_if")
    names = {c["name"]: c["status"] for c in res["cases"]}
    for case in ("test_if", "test_if_seq", "test_if_opt"):
        assert names.get(case) == "pass", res["stdout"]
    res = run_verify([SHARED / "node" / "test_identity_sequence", SHARED / "node" / "test_identity_opt"])
    assert [c["status"] for c in res["cases"]] == ["pass", "pass"], res["stdout"]
