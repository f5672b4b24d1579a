"""CLI tests for trtexec's --inputIOFormats / --outputIOFormats in `kiln exec`.

The engine's interface types change, not the model's arithmetic: a float16 input is the
float32 model run on the half-rounded values, an int32 index input the int64 model on the
same indices, a float16 output the float32 result rounded once. Each case is checked
against ONNX Runtime on the original model, through a built and a reloaded engine, and
every refusal says which entry was wrong and what to write instead.
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
FAST = ["--duration=0", "--warmUp=0", "--iterations=2"]


def run(*args, check_rc=None):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert p.returncode == check_rc, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """y = Gather(table, idx) summed over the index axis + x @ W + b: one float input,
    one int64 input, one float output."""
    rng = np.random.default_rng(11)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    table = numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "table")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["lin"]),
        helper.make_node("Gather", ["table", "idx"], ["g"], axis=0),
        helper.make_node("ReduceSum", ["g", "axes"], ["gs"], keepdims=0),
        helper.make_node("Add", ["lin", "gs"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "io",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [w, b, table, axes])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    p = tmp_path_factory.mktemp("io") / "io.onnx"
    onnx.save(m, str(p))
    return p


def inputs(tmp_path, x_dtype, idx_dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 16)).astype(x_dtype)
    idx = rng.integers(0, 10, (4, 3)).astype(idx_dtype)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "idx.npy", idx)
    return x, idx, f"--loadInputs=x:{tmp_path / 'x.npy'},idx:{tmp_path / 'idx.npy'}"


def reference(model, x, idx):
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x.astype(np.float32), "idx": idx.astype(np.int64)})[0]


def exported(path):
    j = json.loads(Path(path).read_text())[0]
    return np.array(j["values"], dtype=np.float64).reshape([int(d) for d in j["dimensions"].split("x")])


def test_fp16_and_int32_inputs_match_the_model(model, tmp_path):
    x, idx, load = inputs(tmp_path, np.float16, np.int32)
    eng, out, out2 = tmp_path / "e.engine", tmp_path / "a.json", tmp_path / "b.json"
    p = run("exec", f"--onnx={model}", "--shapes=x:4x16,idx:4x3", "--inputIOFormats=fp16:chw,int32:chw", load,
            f"--saveEngine={eng}", f"--exportOutput={out}", *FAST, check_rc=0)
    assert "2 tensors retyped" in p.stdout, p.stdout
    assert "x: float16[4, 16], idx: int32[4, 3]" in p.stdout, p.stdout
    # the float32 model on the half-rounded inputs: only float32 rounding differs
    np.testing.assert_allclose(exported(out), reference(model, x, idx), rtol=1e-5, atol=1e-5)
    # the engine keeps its interface: inspect lists it, a reload gives the same bits
    ins = run("inspect", eng, check_rc=0).stdout
    assert "x  float16[n, 16]" in ins and "idx  int32[n, 3]" in ins, ins
    run("exec", f"--loadEngine={eng}", "--shapes=x:4x16,idx:4x3", load, f"--exportOutput={out2}", *FAST, check_rc=0)
    assert out.read_bytes() == out2.read_bytes()
    # a float32 file for the float16 input: the loader names both types
    np.save(tmp_path / "x32.npy", x.astype(np.float32))
    p = run("exec", f"--loadEngine={eng}", "--shapes=x:4x16,idx:4x3",
            f"--loadInputs=x:{tmp_path / 'x32.npy'},idx:{tmp_path / 'idx.npy'}", *FAST, check_rc=1)
    assert "float16" in p.stderr and "float32" in p.stderr, p.stderr
    # the flags cannot change a saved engine: said, and the engine's types are used
    p = run("exec", f"--loadEngine={eng}", "--shapes=x:4x16,idx:4x3", "--inputIOFormats=fp32:chw", load, *FAST,
            check_rc=0)
    assert "apply when building" in p.stdout + p.stderr


def test_one_entry_applies_to_every_tensor_and_fp16_output(model, tmp_path):
    x, idx, load = inputs(tmp_path, np.float32, np.int64)
    out = tmp_path / "o.json"
    # one entry for all outputs (here the one output) in float16
    p = run("exec", f"--onnx={model}", "--shapes=x:4x16,idx:4x3", "--outputIOFormats=fp16:chw", load,
            f"--exportOutput={out}", *FAST, check_rc=0)
    assert "1 tensor retyped" in p.stdout, p.stdout
    ref = reference(model, x, idx)
    np.testing.assert_array_equal(exported(out), ref.astype(np.float16).astype(np.float64))


@pytest.mark.parametrize("flag,why", [
    ("--inputIOFormats=fp16:chw,fp16:chw,fp16:chw", "gives 3 entries; the model has 2 inputs"),
    ("--inputIOFormats=fp16:chw", "input 'idx' is int64 in the model; it can be given as another integer type, not float16"),
    ("--inputIOFormats=int32:chw,int32:chw", "input 'x' is float32 in the model"),
    ("--outputIOFormats=int8:chw", "output 'y' is float32"),
])
def test_refusals_name_the_tensor(model, flag, why):
    p = run("exec", f"--onnx={model}", "--shapes=x:4x16,idx:4x3", flag, *FAST, check_rc=2)
    assert why in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.parametrize("spec,why", [
    ("fp16:hwc8", "format 'hwc8' is not supported"),
    ("fp8:chw", "unknown or unsupported type 'fp8'"),
    ("fp16", "entry 1 'fp16' is not type:format"),
    ("fp16:chw,", "entry 2 '' is not type:format"),
])
def test_malformed_specs_are_usage_errors(model, spec, why):
    p = run("exec", f"--onnx={model}", f"--inputIOFormats={spec}", *FAST, check_rc=2)
    assert why in p.stderr, p.stderr


def test_alternatives_with_chw_are_accepted(model, tmp_path):
    x, idx, load = inputs(tmp_path, np.float16, np.int64)
    run("exec", f"--onnx={model}", "--shapes=x:4x16,idx:4x3", "--inputIOFormats=fp16:chw+hwc8,int64:chw", load,
        *FAST, check_rc=0)
