"""The CPU's P16 layout between 1x1 convs (src/build/passes/layout_p16.c, cpu_conv_p16.c).

A small graph with each case the pass must tell apart: a value read by 1x1 convs only (as
input and as fused residual) gets P16; one also read by a 3x3 conv, one that is a graph
output, and one whose H*W (36) is not a multiple of 16 stay NCHW. The engine's per-node
layout column (`kiln inspect ENGINE --json`) shows the marks, and `kiln verify` checks
the outputs against ONNX Runtime at batch 1 and 2, on 1 and 2 threads, with the pass off
(KILN_NO_P16), and with the AVX2 kernels off (KILN_CPU_ISA=scalar), where every marked
conv takes the converting fallback."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))


def conv(name, x, w, y, **attrs):
    return helper.make_node("Conv", [x, w, f"{w}_b"], [y], name=name, **attrs)


def build_model(path):
    rng = np.random.default_rng(7)
    inits = []

    def weight(name, m, c, k=1):
        inits.append(numpy_helper.from_array((rng.standard_normal((m, c, k, k)) * 0.2).astype(np.float32), name))
        inits.append(numpy_helper.from_array((rng.standard_normal(m) * 0.1).astype(np.float32), f"{name}_b"))

    weight("Wa", 48, 32)
    weight("Wb", 48, 48)
    weight("Wc", 40, 48)
    weight("Wd", 24, 48, 3)
    weight("We", 16, 40)
    weight("Wf", 24, 16)
    weight("Wg", 8, 24)
    nodes = [
        conv("/a", "x", "Wa", "a0"), helper.make_node("Relu", ["a0"], ["v1"], name="/a_relu"),
        # v1: read by /b as input and as its (fused) residual -> P16
        conv("/b", "v1", "Wb", "b0"), helper.make_node("Add", ["b0", "v1"], ["b1"], name="/b_add"),
        helper.make_node("Relu", ["b1"], ["v2"], name="/b_relu"),
        # v2: also read by the 3x3 /d -> stays NCHW
        conv("/c", "v2", "Wc", "v3"),
        conv("/d", "v2", "Wd", "out_d", pads=[1, 1, 1, 1]),
        # v3: read by the 1x1 /e only -> P16; /e's output is a graph output -> NCHW
        conv("/e", "v3", "We", "out_e"),
        # 6x6 = 36 positions: never P16
        conv("/f", "z", "Wf", "v6"), conv("/g", "v6", "Wg", "out_g"),
    ]
    batch = "N"
    g = helper.make_graph(
        nodes, "p16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32, 8, 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 16, 6, 6])],
        [helper.make_tensor_value_info("out_d", TensorProto.FLOAT, [batch, 24, 8, 8]),
         helper.make_tensor_value_info("out_e", TensorProto.FLOAT, [batch, 16, 8, 8]),
         helper.make_tensor_value_info("out_g", TensorProto.FLOAT, [batch, 8, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("p16")
    build_model(d / "model.onnx")
    return d


def run(args, env=None):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


def layouts(model, env=None):
    eng = model / "m.engine"
    run(["exec", f"--onnx={model / 'model.onnx'}", f"--saveEngine={eng}", "--shapes=x:1x32x8x8,z:1x16x6x6",
         "--skipInference"], env)
    j = json.loads(run(["inspect", "--json", eng]).stdout)
    return {n["name"]: n["layout"] for n in j["nodes"] if n["op"] == "Conv"}


def test_pass_marks_only_values_every_reader_takes(model):
    lay = layouts(model)
    assert lay["/a"] == "p16 out"  # v1
    assert lay["/b"] == "p16 in"   # reads v1 as input and residual; v2 has a 3x3 reader
    assert lay["/c"] == "p16 out"  # v3
    assert lay["/e"] == "p16 in"   # writes a graph output
    for name in ("/d", "/f", "/g"):
        assert lay[name] == "nchw", (name, lay[name])


def test_pass_off_leaves_nchw(model):
    assert set(layouts(model, {"KILN_NO_P16": "1"}).values()) == {"nchw"}


def write_case(model, batch):
    import onnxruntime as ort
    case = model / f"case_b{batch}"
    data = case / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    if not (case / "model.onnx").exists():
        os.symlink(model / "model.onnx", case / "model.onnx")
    rng = np.random.default_rng(batch)
    feeds = {"x": rng.standard_normal((batch, 32, 8, 8)).astype(np.float32),
             "z": rng.standard_normal((batch, 16, 6, 6)).astype(np.float32)}
    outs = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    for k, name in enumerate(("x", "z")):
        (data / f"input_{k}.pb").write_bytes(numpy_helper.from_array(feeds[name], name).SerializeToString())
    for k, (name, v) in enumerate(zip(("out_d", "out_e", "out_g"), outs)):
        (data / f"output_{k}.pb").write_bytes(numpy_helper.from_array(v, name).SerializeToString())
    (case / "data.json").write_text('{"atol": 1e-5, "rtol": 1e-4}\n')
    return case


@pytest.mark.parametrize("batch,threads,env", [
    (1, 1, {}), (2, 2, {}), (2, 1, {"KILN_NO_P16": "1"}), (2, 2, {"KILN_CPU_ISA": "scalar"})])
def test_outputs_match_onnxruntime(model, batch, threads, env):
    case = write_case(model, batch)
    out = run(["verify", f"--threads={threads}", case], env).stdout
    assert "1 passed, 0 failed, 0 skipped" in out, out[-2000:]
