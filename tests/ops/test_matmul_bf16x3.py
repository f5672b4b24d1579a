"""test_matmul_bf16x3.py - MatMuls with a constant weight on the AMX bf16x3 tactic.

A model with the shapes transformers use, in small (MatMul -> Add(bias) -> Gelu, and
MatMul -> Add(bias) -> Add(residual), with M, N and K that are not multiples of 32), is
built with the tactic forced (KILN_PREFER_TACTIC), and its `kiln exec --exportOutput`
outputs must match ONNX Runtime within 5e-4 (mean error below 5e-5): the method's own error
on these sums is up to ~1e-4 (FP32's ~5e-6), one-pass bfloat16 would miss by ~3e-2.
--noTF32 must keep every MatMul on FP32; an AMX engine run with KILN_NO_AMX=1 (the
kernel's fallback) must match too, and so must the same engine loaded as on an AVX-512
CPU without AMX (KILN_CPU_ISA=avx512), which warns that those layers run FP32; one
engine with a dynamic row count runs M = 1 (the few-row kernel) up to M = 300. Skipped, with the reason, where AMX cannot run.
"""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln_cli import run

K, N, H = 100, 70, 48
TACTIC = {"KILN_PREFER_TACTIC": "matmul_amx_bf16x3"}


def has_amx():
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return " amx_bf16" in flags and " amx_tile" in flags and " avx512bw" in flags


pytestmark = pytest.mark.skipif(not has_amx(), reason="this CPU has no AMX-BF16: the bf16x3 tactic is never offered")


def build_model(path):
    rng = np.random.default_rng(7)

    def const(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="ffn1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Gelu", ["a1"], ["g1"], domain=""),
        helper.make_node("MatMul", ["g1", "w2"], ["m2"], name="ffn2"),
        helper.make_node("Add", ["m2", "b2"], ["a2"]),
        helper.make_node("Add", ["a2", "x"], ["y"]),
    ]
    g = helper.make_graph(nodes, "bf16x3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", K])],
                          [const("w1", K, H * 2 - 26), const("b1", H * 2 - 26), const("w2", H * 2 - 26, K),
                           const("b2", K)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    onnx.save(m, str(path))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("bf16x3")
    build_model(d / "model.onnx")
    return d


def build(model, name, extra=()):
    eng = model / f"{name}.engine"
    run(["exec", f"--onnx={model / 'model.onnx'}", f"--saveEngine={eng}", "--shapes=x:37x100", "--skipInference",
         *extra], TACTIC)
    return eng


def layers(eng):
    j = json.loads(run(["inspect", "--json", eng]).stdout)
    return {n["name"]: (n["tactic"], n["precision"]) for n in j["layers"] if n["op"] == "MatMul"}


def assert_close(got, want, what=""):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-4, err_msg=what)
    assert np.abs(got - want).mean() < 5e-5, what


def run_engine(model, eng, rows, env=None, threads=1):
    x = np.random.default_rng(rows).standard_normal((rows, K)).astype(np.float32)
    np.save(model / "x.npy", x)
    out = model / "out.json"
    run(["exec", f"--loadEngine={eng}", f"--shapes=x:{rows}x{K}", f"--loadInputs=x:{model / 'x.npy'}",
         f"--threads={threads}", "--iterations=1", "--duration=0", "--warmUp=0", f"--exportOutput={out}"], env)
    got = np.array(json.loads(out.read_text())[0]["values"], np.float32).reshape(rows, K)
    import onnxruntime as ort
    want = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return got, want


def test_tactic_is_recorded_as_tf32(model):
    assert layers(build(model, "forced")) == {"ffn1": ("matmul_amx_bf16x3", "tf32"),
                                              "ffn2": ("matmul_amx_bf16x3", "tf32")}


def test_no_tf32_keeps_fp32(model):
    assert set(layers(build(model, "strict", ["--noTF32"])).values()) == {("MatMul", "fp32")}


@pytest.mark.parametrize("threads", [1, 2])
def test_outputs_match_onnxruntime(model, threads):
    got, want = run_engine(model, build(model, "forced"), 37, threads=threads)
    assert_close(got, want)


def test_fallback_without_amx_matches(model):
    got, want = run_engine(model, build(model, "forced"), 37, env={"KILN_NO_AMX": "1"})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_loads_on_a_cpu_without_amx(model):
    """AMX is the one build-host feature an engine does not require: on an AVX-512 CPU
    without it (KILN_CPU_ISA=avx512) the engine loads, says its AMX layers run FP32, and
    matches ONNX Runtime as FP32 does."""
    eng = build(model, "forced")
    env = {"KILN_CPU_ISA": "avx512"}
    p = run(["exec", f"--loadEngine={eng}", "--iterations=1", "--duration=0", "--warmUp=0"], env)
    assert "2 of" in p.stdout and "layers were built for AMX" in p.stdout and "run their FP32 kernels" in p.stdout
    got, want = run_engine(model, eng, 37, env=env)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dynamic_rows(model):
    eng = model / "dynamic.engine"
    run(["exec", f"--onnx={model / 'model.onnx'}", f"--saveEngine={eng}", "--minShapes=x:1x100",
         "--optShapes=x:64x100", "--maxShapes=x:300x100", "--skipInference"], TACTIC)
    assert set(layers(eng).values()) == {("matmul_amx_bf16x3", "tf32")}
    for rows in (1, 5, 33, 300):
        got, want = run_engine(model, eng, rows, threads=2)
        assert_close(got, want, f"rows={rows}")
