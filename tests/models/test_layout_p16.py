"""The CPU's P16 layout between 1x1 and depthwise convs (src/build/passes/layout_p16.c,
cpu_conv_p16.c, cpu_conv_dw_avx2.c).

A small graph with each case the pass must tell apart: a value read by 1x1 convs only (as
input and as fused residual) gets P16; one also read by a 3x3 conv, one that is a graph
output, and one whose H*W (36) is not a multiple of 16 stay NCHW. A MobileNet-style block
(1x1 expand, 3x3 stride-1 depthwise with ReLU6, 1x1 project adding the block input) runs
P16 inside; its output, read by a stride-2 depthwise conv, stays NCHW, as do the inputs
of a depthwise conv with a fused Sigmoid (not applied in the kernel's registers) and of
one whose rows (12) are not a multiple of 8 positions. The engine's per-node
layout column (`kiln inspect ENGINE --json`) shows the marks, and `kiln verify` checks
the outputs against ONNX Runtime at batch 1 and 2, on 1 and 2 threads, with the pass off
(KILN_NO_P16), and with the AVX2 kernels off (KILN_CPU_ISA=scalar), where every marked
conv takes the converting fallback."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kiln_cli import has_avx512f, run  # noqa: E402


INPUTS = {"x": (32, 8, 8), "z": (16, 6, 6), "y": (16, 16, 16), "u": (8, 16, 16), "t": (8, 12, 12)}
OUTPUTS = ("out_d", "out_e", "out_g", "out_s", "out_k", "out_n")


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

    def dw_weight(name, c):
        inits.append(numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32), name))
        inits.append(numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), f"{name}_b"))

    weight("Wp", 24, 16)
    dw_weight("Wq", 24)
    weight("Wr", 16, 24)
    dw_weight("Ws", 16)
    weight("Wh", 16, 8)
    dw_weight("Wk", 16)
    weight("Wm", 16, 8)
    dw_weight("Wn", 16)
    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "lo"))
    inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "hi"))
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
        # MobileNet-style block on 16x16: P16 from the expand conv's output to the project conv
        conv("/p", "y", "Wp", "p0"), helper.make_node("Relu", ["p0"], ["vp"], name="/p_relu"),
        conv("/q", "vp", "Wq", "q0", group=24, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["q0", "lo", "hi"], ["vq"], name="/q_clip"),
        conv("/r", "vq", "Wr", "r0"), helper.make_node("Add", ["r0", "y"], ["vr"], name="/r_add"),
        # stride 2: stays NCHW
        conv("/s", "vr", "Ws", "out_s", group=16, strides=[2, 2], pads=[1, 1, 1, 1]),
        # a depthwise conv with a fused Sigmoid, and one over 12-position rows: NCHW inputs
        conv("/h", "u", "Wh", "vh"),
        conv("/k", "vh", "Wk", "k0", group=16, pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["k0"], ["out_k"], name="/k_sigmoid"),
        conv("/m", "t", "Wm", "vm"),
        conv("/n", "vm", "Wn", "n0", group=16, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["n0"], ["out_n"], name="/n_relu"),
    ]
    batch = "N"
    g = helper.make_graph(
        nodes, "p16",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, *shape]) for name, shape in INPUTS.items()],
        [helper.make_tensor_value_info("out_d", TensorProto.FLOAT, [batch, 24, 8, 8]),
         helper.make_tensor_value_info("out_e", TensorProto.FLOAT, [batch, 16, 8, 8]),
         helper.make_tensor_value_info("out_g", TensorProto.FLOAT, [batch, 8, 6, 6]),
         helper.make_tensor_value_info("out_s", TensorProto.FLOAT, [batch, 16, 8, 8]),
         helper.make_tensor_value_info("out_k", TensorProto.FLOAT, [batch, 16, 16, 16]),
         helper.make_tensor_value_info("out_n", TensorProto.FLOAT, [batch, 16, 12, 12])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("p16")
    build_model(d / "model.onnx")
    return d


def layouts(model, env=None):
    """Conv name -> layout column. KILN_NO_C16_LAYOUT=1 unless env says otherwise: on
    AVX-512F the C16 layout (layout_c16.c) takes the dense 1x1 chains P16 gets elsewhere."""
    env = {"KILN_NO_C16_LAYOUT": "1", **(env or {})}
    eng = model / "m.engine"
    shapes = ",".join(f"{n}:1x" + "x".join(map(str, s)) for n, s in INPUTS.items())
    run(["exec", f"--onnx={model / 'model.onnx'}", f"--saveEngine={eng}", f"--shapes={shapes}", "--skipInference"],
        env)
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


def test_pass_runs_p16_through_stride1_depthwise_convs(model):
    lay = layouts(model)
    assert lay["/p"] == "p16 out"     # its reader is the stride-1 depthwise /q
    assert lay["/q"] == "p16 in+out"  # ReLU6 in registers, read by the 1x1 /r
    assert lay["/r"] == "p16 in"      # its output is read by the stride-2 /s
    for name in ("/s", "/h", "/k", "/m", "/n"):
        assert lay[name] == "nchw", (name, lay[name])


def test_avx512_builds_keep_p16_around_depthwise_convs(model):
    """With the C16 layout on (the default), an AVX-512F build marks P16 only where a
    depthwise conv reads or writes; elsewhere the same as without it."""
    lay = layouts(model, {"KILN_NO_C16_LAYOUT": None})
    assert lay["/p"] == "p16 out" and lay["/q"] == "p16 in+out" and lay["/r"] == "p16 in", lay
    if has_avx512f():
        assert not any(v.startswith("p16") for k, v in lay.items() if k in ("/a", "/b", "/c", "/e")), lay


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
    feeds = {n: rng.standard_normal((batch, *s)).astype(np.float32) for n, s in INPUTS.items()}
    outs = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    for k, name in enumerate(INPUTS):
        (data / f"input_{k}.pb").write_bytes(numpy_helper.from_array(feeds[name], name).SerializeToString())
    for k, (name, v) in enumerate(zip(OUTPUTS, outs)):
        (data / f"output_{k}.pb").write_bytes(numpy_helper.from_array(v, name).SerializeToString())
    (case / "data.json").write_text('{"atol": 1e-5, "rtol": 1e-4}\n')
    return case


@pytest.mark.parametrize("batch,threads,env", [
    (1, 1, {}), (2, 2, {}), (2, 1, {"KILN_NO_P16": "1"}), (2, 2, {"KILN_CPU_ISA": "scalar"})])
def test_outputs_match_onnxruntime(model, batch, threads, env):
    case = write_case(model, batch)
    out = run(["verify", f"--threads={threads}", case], env).stdout
    assert "1 passed, 0 failed, 0 skipped" in out, out[-2000:]
