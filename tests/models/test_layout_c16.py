"""The CPU's C16 layout between channels-in-lanes convs (src/build/passes/layout_c16.c,
cpu_conv_c16_avx512.c, the C16 fallback in cpu_conv_p16.c).

The builder runs the pass after choosing tactics, on AVX-512F machines only, so every
test here skips (saying why) elsewhere. KILN_C16_MARGIN=1000 makes the builder take the C16
conv wherever it is a candidate, so the marks do not depend on tactic timings.

The graph holds each case the pass and the kernel must tell apart, on 14x14 and 7x7 maps
(small enough for the C16 1x1 conv) with channels in 16s:
  /a -> v1 -> /b (input and fused residual) -> v2 -> /c (3x3/2, padded: its copy is
  made from C16 rows) -> v3 -> /d (residual v3) -> v4 -> /e (residual v4, output a graph
  output: C16 residual into an NCHW output);
  /f adds the graph input x (NCHW residual into a C16 output) -> v5 -> /g;
  /k has a fused Sigmoid (applied after the C16 store) -> v6 -> /m;
  /n's output is also read by a ReduceMean: stays NCHW;
  v2 -> /w (3x3 stride 1: Winograd or the C16 kernel, whichever timed faster; both read
  and write C16) -> v8 -> /x (1x1 stride 2: reads v8 in place at its strides);
  v1 -> MaxPool /p (3x3/2, padded: the 16-channel kernel) -> v10 -> /q; v2 -> MaxPool /s
  whose output is a graph output (C16 in, NCHW out: the converting fallback).
The engine's per-node layout column (`kiln inspect ENGINE --json`) shows the marks; the
outputs of `kiln exec --exportOutput` must match ONNX Runtime at batch 1 and 3, on 1 and 2
threads, with the pass off (KILN_NO_C16_LAYOUT) and with the C16 kernel off at run time
(KILN_CONV_C16=0), where every marked conv converts instead. A second model has C16
MaxPools too wide (530 pixels) and too tall (66-row window) for the separable pool
kernel, so they take its window loop. (An engine built for AVX-512
does not load where it is missing: the engine's compatibility check refuses it.)"""
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kiln_cli import has_avx512f, run  # noqa: E402
FORCE = {"KILN_C16_MARGIN": "1000"}
OUTPUTS = {"out_e": (48, 7, 7), "out_g": (16, 14, 14), "out_m": (32, 14, 14), "out_r": (1, 14, 14),
           "out_x": (48, 7, 7), "out_q": (32, 7, 7), "out_s": (32, 13, 13)}


def out_shape(s, width):
    return (s[0] * width if s[0] > 1 else 1, *s[1:])  # out_r is a ReduceMean over channels


pytestmark = pytest.mark.skipif(not has_avx512f(), reason="the C16 layout is only chosen on AVX-512F CPUs; this one has none")


def build_model(path, width=1):
    """width multiplies every channel count (the AMX tests need 128 or more inputs)"""
    rng = np.random.default_rng(11)
    inits = []

    def weight(name, m, c, k=1):
        w = rng.standard_normal((m * width, c * width, k, k)) * 0.15 / np.sqrt(width)
        inits.append(numpy_helper.from_array(w.astype(np.float32), name))
        inits.append(numpy_helper.from_array((rng.standard_normal(m * width) * 0.1).astype(np.float32), f"{name}_b"))

    for name, m, c, k in (("Wa", 32, 32, 1), ("Wb", 32, 32, 1), ("Wc", 48, 32, 3), ("Wd", 48, 48, 1),
                          ("We", 48, 48, 1), ("Wf", 32, 32, 1), ("Wg", 16, 32, 1), ("Wk", 32, 32, 1),
                          ("Wm", 32, 32, 1), ("Wn", 32, 32, 1), ("Ww", 32, 32, 3), ("Wx", 48, 32, 1), ("Wq", 32, 32, 1)):
        weight(name, m, c, k)

    def conv(name, x, w, y, **attrs):
        return helper.make_node("Conv", [x, w, f"{w}_b"], [y], name=name, **attrs)

    def add(name, a, b, y):
        return helper.make_node("Add", [a, b], [y], name=name)

    def act(op, name, x, y):
        return helper.make_node(op, [x], [y], name=name)

    nodes = [
        conv("/a", "x", "Wa", "a0"), act("Relu", "/a_relu", "a0", "v1"),
        conv("/b", "v1", "Wb", "b0"), add("/b_add", "b0", "v1", "b1"), act("Relu", "/b_relu", "b1", "v2"),
        conv("/c", "v2", "Wc", "c0", strides=[2, 2], pads=[1, 1, 1, 1]), act("Relu", "/c_relu", "c0", "v3"),
        conv("/d", "v3", "Wd", "d0"), add("/d_add", "d0", "v3", "v4"),
        conv("/e", "v4", "We", "e0"), add("/e_add", "e0", "v4", "e1"), act("Relu", "/e_relu", "e1", "out_e"),
        conv("/f", "x", "Wf", "f0"), add("/f_add", "f0", "x", "v5"),
        conv("/g", "v5", "Wg", "out_g"),
        conv("/k", "x", "Wk", "k0"), act("Sigmoid", "/k_sigmoid", "k0", "v6"),
        conv("/m", "v6", "Wm", "m0"), add("/m_add", "m0", "v7", "out_m"),
        conv("/n", "x", "Wn", "v7"),
        helper.make_node("ReduceMean", ["v7"], ["out_r"], name="/r", axes=[1], keepdims=1),
        conv("/w", "v2", "Ww", "w0", pads=[1, 1, 1, 1]), act("Relu", "/w_relu", "w0", "v8"),
        conv("/x", "v8", "Wx", "out_x", strides=[2, 2]),
        helper.make_node("MaxPool", ["v1"], ["v10"], name="/p", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        conv("/q", "v10", "Wq", "out_q"),
        helper.make_node("MaxPool", ["v2"], ["out_s"], name="/s", kernel_shape=[2, 2]),
    ]
    batch = "N"
    g = helper.make_graph(nodes, "c16",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32 * width, 14, 14])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, *out_shape(s, width)])
                           for n, s in OUTPUTS.items()], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("c16")
    build_model(d / "model.onnx")
    return d


def build(model, batch, env, name, precision="--noTF32"):
    """FP32 (--noTF32) unless precision says otherwise: the AMX tactic is timed too, and
    the tests of the C16 kernels must not depend on whether it won"""
    eng = model / f"{name}_b{batch}.engine"
    run(["exec", f"--onnx={model / 'model.onnx'}", f"--saveEngine={eng}", f"--shapes=x:{batch}x32x14x14",
         "--skipInference", *([precision] if precision else [])], {**FORCE, **env})
    return eng


def layouts(eng):
    j = json.loads(run(["inspect", "--json", eng]).stdout)
    return {n["name"]: n["layout"] for n in j["nodes"] if n["op"] in ("Conv", "MaxPool")}


def test_pass_marks_the_c16_region(model):
    lay = layouts(build(model, 1, {}, "marks"))
    expect = {"/a": "c16 out", "/b": "c16 in+out", "/c": "c16 in+out", "/d": "c16 in+out", "/e": "c16 in",
              "/f": "c16 out", "/g": "c16 in", "/k": "c16 out", "/m": "c16 in", "/n": "nchw",
              "/w": "c16 in+out", "/x": "c16 in", "/p": "c16 in+out", "/q": "c16 in", "/s": "c16 in"}
    assert {k: lay.get(k) for k in expect} == expect


def test_pass_off_leaves_nchw(model):
    assert set(layouts(build(model, 1, {"KILN_NO_C16_LAYOUT": "1"}, "off")).values()) == {"nchw"}


def check_against_onnxruntime(model, eng, x, threads, run_env, atol):
    """Runs engine eng on x with `kiln exec --exportOutput`; every output must match ORT."""
    import onnxruntime as ort
    np.save(model / "x.npy", x)
    out = model / "out.json"
    run(["exec", f"--loadEngine={eng}", f"--shapes=x:{'x'.join(map(str, x.shape))}",
         f"--loadInputs=x:{model / 'x.npy'}", f"--threads={threads}", "--iterations=1", "--duration=0", "--warmUp=0",
         f"--exportOutput={out}"], run_env)
    got = {o["name"]: np.array(o["values"], np.float32) for o in json.loads(out.read_text())}
    ref = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, want in zip(OUTPUTS, ref):
        np.testing.assert_allclose(got[name].reshape(want.shape), want, rtol=1e-4, atol=atol, err_msg=name)


@pytest.mark.parametrize("batch,threads,build_env,run_env", [
    (1, 1, {}, {}), (3, 2, {}, {}), (3, 1, {"KILN_NO_C16_LAYOUT": "1"}, {}),
    (3, 2, {}, {"KILN_CONV_C16": "0"}), (1, 1, {}, {"KILN_CONV_C16": "0"})])
def test_outputs_match_onnxruntime(model, batch, threads, build_env, run_env):
    eng = build(model, batch, build_env, f"run{len(build_env)}")
    x = np.random.default_rng(batch).standard_normal((batch, 32, 14, 14)).astype(np.float32)
    check_against_onnxruntime(model, eng, x, threads, run_env, 1e-5)


def test_dynamic_batch_profile_matches_onnxruntime(model):
    """One engine for batches 1-4 (built at 2): the C16 convs and pools take each run's
    batch, and the outputs still match ONNX Runtime at 1 and 4."""
    import onnxruntime as ort
    eng = model / "dyn.engine"
    run(["exec", f"--onnx={model / 'model.onnx'}", f"--saveEngine={eng}", "--minShapes=x:1x32x14x14",
         "--optShapes=x:2x32x14x14", "--maxShapes=x:4x32x14x14", "--skipInference", "--noTF32"], FORCE)
    assert "c16 in+out" in layouts(eng).values()
    sess = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 4):
        x = np.random.default_rng(10 + batch).standard_normal((batch, 32, 14, 14)).astype(np.float32)
        np.save(model / "xd.npy", x)
        out = model / "outd.json"
        run(["exec", f"--loadEngine={eng}", f"--shapes=x:{batch}x32x14x14", f"--loadInputs=x:{model / 'xd.npy'}",
             "--threads=2", "--iterations=1", "--duration=0", "--warmUp=0", f"--exportOutput={out}"])
        got = {o["name"]: np.array(o["values"], np.float32) for o in json.loads(out.read_text())}
        for name, want in zip(OUTPUTS, sess.run(None, {"x": x})):
            np.testing.assert_allclose(got[name].reshape(want.shape), want, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} batch {batch}")


# ---- the AMX bf16x3 1x1 conv (cpu_gemm_bf16x3.h) in and out of the C16 region ---------------

def has_amx():
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return " amx_bf16" in flags and " avx512bw" in flags


AMX = {"KILN_PREFER_TACTIC": "conv_amx_bf16x3"}
WIDE = 4  # 128-192 channels: the AMX conv takes 128 or more input channels


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    d = tmp_path_factory.mktemp("c16wide")
    build_model(d / "model.onnx", WIDE)
    return d


def build_wide(model, batch, env, name, precision=None):
    eng = model / f"{name}_b{batch}.engine"
    run(["exec", f"--onnx={model / 'model.onnx'}", f"--saveEngine={eng}", f"--shapes=x:{batch}x{32 * WIDE}x14x14",
         "--skipInference", *([precision] if precision else [])], {**FORCE, **env})
    return eng
POINTWISE = ("/a", "/b", "/d", "/e", "/f", "/g", "/k", "/m", "/n", "/x", "/q")


def tactics(eng):
    j = json.loads(run(["inspect", "--json", eng]).stdout)
    return {n["name"]: (n["tactic"], n["precision"]) for n in j["layers"] if n["op"] == "Conv"}


@pytest.mark.skipif(not has_amx(), reason="this CPU has no AMX-BF16: the bf16x3 conv is never offered")
def test_amx_convs_keep_the_c16_marks(wide):
    """Forced onto every 1x1 conv (strided /x included), the AMX tactic is recorded as tf32
    and the C16 region is the FP32 one: the AMX conv reads and writes C16 as the C16
    kernel does."""
    eng = build_wide(wide, 1, AMX, "amx_marks")
    t = tactics(eng)
    assert {k: t[k] for k in POINTWISE} == {k: ("conv_amx_bf16x3", "tf32") for k in POINTWISE}
    assert layouts(eng) == layouts(build_wide(wide, 1, {}, "fp32_marks", "--noTF32"))


@pytest.mark.skipif(not has_amx(), reason="this CPU has no AMX-BF16: the bf16x3 conv is never offered")
@pytest.mark.parametrize("batch,threads,build_env,run_env,tol", [
    (1, 1, {}, {}, 1e-4), (3, 2, {}, {}, 1e-4),
    (3, 1, {"KILN_NO_C16_LAYOUT": "1"}, {}, 1e-4),   # NCHW in and out: the gather/scatter paths
    (3, 2, {}, {"KILN_NO_AMX": "1"}, 1e-5)])          # AMX off at run time: the C16 kernel's FP32
def test_amx_outputs_match_onnxruntime(wide, batch, threads, build_env, run_env, tol):
    eng = build_wide(wide, batch, {**AMX, **build_env}, f"amx{len(build_env)}")
    x = np.random.default_rng(20 + batch).standard_normal((batch, 32 * WIDE, 14, 14)).astype(np.float32)
    check_against_onnxruntime(wide, eng, x, threads, run_env, tol)


@pytest.mark.skipif(not has_amx(), reason="this CPU has no AMX-BF16: the bf16x3 conv is never offered")
def test_region_timings_choose_between_amx_and_c16(wide):
    """Inside a C16 region the C16 kernel and the AMX conv are chosen by their timings over
    C16 data (the timing cache's `|c16region` entries), not over NCHW. Two builds from the
    same cache, edited so that one tactic or the other wins every region timing, must put
    the region's convs on C16 in the first and more of them on AMX in the second."""
    cache = wide / "region.cache"
    build_wide(wide, 1, {}, "region0", f"--timingCacheFile={cache}")
    entries = json.loads(cache.read_text())["entries"]
    region = [e for e in entries if e["key"].endswith("|c16region")]
    assert {e["tactic"] for e in region} == {"conv_c16_direct", "conv_amx_bf16x3"}, "no region timings cached"
    chosen = {}
    for winner in ("conv_c16_direct", "conv_amx_bf16x3"):
        for e in region:
            e["ms"] = 0.001 if e["tactic"] == winner else 1000.0
        edited = wide / f"{winner}.cache"
        edited.write_text(json.dumps({**json.loads(cache.read_text()), "entries": entries}))
        chosen[winner] = tactics(build_wide(wide, 1, {}, f"region_{winner}", f"--timingCacheFile={edited}"))
    c16_or_amx = ("conv_c16_direct", "conv_amx_bf16x3")
    assert {k for k, v in chosen["conv_c16_direct"].items() if v[0] in c16_or_amx} == \
        {k for k, v in chosen["conv_amx_bf16x3"].items() if v[0] in c16_or_amx}
    n_amx = {w: sum(v[0] == "conv_amx_bf16x3" for v in t.values()) for w, t in chosen.items()}
    assert n_amx["conv_amx_bf16x3"] > n_amx["conv_c16_direct"], chosen
    assert all(v[1] == ("tf32" if v[0] == "conv_amx_bf16x3" else "fp32")
               for t in chosen.values() for v in t.values() if v[0] in c16_or_amx)


def build_pool_model(path):
    """Two C16 MaxPools that take the 16-channel window loop instead of the separable
    kernel (cpu_pool_avx512.c): /wide on rows of 530 pixels (the separable kernel holds
    512) and /tall with a 66-row window (it gathers 64 rows); each between C16 convs."""
    rng = np.random.default_rng(5)
    inits = []
    for name in ("Wa", "Wb", "Wc"):
        inits.append(numpy_helper.from_array((rng.standard_normal((16, 16, 1, 1)) * 0.3).astype(np.float32), name))
    conv = lambda name, x, w, y: helper.make_node("Conv", [x, w], [y], name=name)  # noqa: E731
    nodes = [conv("/a", "x", "Wa", "v1"),
             helper.make_node("MaxPool", ["v1"], ["v2"], name="/wide", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             conv("/b", "v2", "Wb", "out_wide"),
             helper.make_node("MaxPool", ["v1"], ["v3"], name="/tall", kernel_shape=[66, 2], strides=[1, 2],
                              pads=[1, 0, 1, 0]),
             conv("/c", "v3", "Wc", "out_tall")]
    g = helper.make_graph(nodes, "c16pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 70, 530])],
                          [helper.make_tensor_value_info("out_wide", TensorProto.FLOAT, [1, 16, 70, 530]),
                           helper.make_tensor_value_info("out_tall", TensorProto.FLOAT, [1, 16, 7, 265])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_maxpool_window_loop_matches_onnxruntime(tmp_path):
    import onnxruntime as ort
    build_pool_model(tmp_path / "model.onnx")
    eng = tmp_path / "pool.engine"
    run(["exec", f"--onnx={tmp_path / 'model.onnx'}", f"--saveEngine={eng}", "--skipInference", "--noTF32"], FORCE)
    lay = layouts(eng)
    assert (lay["/wide"], lay["/tall"]) == ("c16 in+out", "c16 in+out"), lay
    x = np.random.default_rng(7).standard_normal((1, 16, 70, 530)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.json"
    run(["exec", f"--loadEngine={eng}", f"--loadInputs=x:{tmp_path / 'x.npy'}", "--iterations=1", "--duration=0",
         "--warmUp=0", f"--exportOutput={out}"])
    got = {o["name"]: np.array(o["values"], np.float32) for o in json.loads(out.read_text())}
    ref = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, want in zip(("out_wide", "out_tall"), ref):
        np.testing.assert_allclose(got[name].reshape(want.shape), want, rtol=1e-5, atol=1e-5, err_msg=name)
