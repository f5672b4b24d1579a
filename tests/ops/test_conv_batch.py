"""test_conv_batch.py - batched convolutions on several threads against ONNX Runtime.

The op tests mostly run batch 1 or 2; the zoo models run batch 1 and 8 at 1 and 2
threads. Here one model has every conv kind of ResNet-50 (a strided stem, 1x1 convs on
the P16 layout with a fused residual, 1x1 convs at 8x8 and 4x4 positions, 3x3 and 1x1
stride-2 convs, a grouped 3x3, a Winograd 3x3), and batches of 1 to 9 images run on 1 to 3
threads, so that the per-image loops, the task splits that do not divide evenly and the
scratch shared by the layers all meet a batch. Each run must match ONNX Runtime.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kiln_cli import has_avx512f  # noqa: E402
F = TensorProto.FLOAT


def conv(nodes, inits, rng, x, cin, cout, k, name, stride=1, group=1, relu=True, residual=None):
    w = rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * np.float32(1.0 / np.sqrt(cin // group * k * k))
    b = rng.standard_normal(cout).astype(np.float32) * np.float32(0.1)
    inits += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
    p = k // 2
    nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"], name=name, strides=[stride] * 2,
                                  pads=[p] * 4, group=group, kernel_shape=[k, k]))
    out = f"{name}_c"
    if residual:
        nodes.append(helper.make_node("Add", [out, residual], [f"{name}_s"], name=f"{name}_add"))
        out = f"{name}_s"
    if relu:
        nodes.append(helper.make_node("Relu", [out], [f"{name}_r"], name=f"{name}_relu"))
        out = f"{name}_r"
    return out


def model(path):
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    s = conv(nodes, inits, rng, "x", 3, 16, 7, "stem", stride=2)                # 32x32 -> 16x16
    a = conv(nodes, inits, rng, s, 16, 32, 1, "expand")                         # P16 output
    b = conv(nodes, inits, rng, a, 32, 32, 1, "mid")                            # P16 in and out
    c = conv(nodes, inits, rng, b, 32, 32, 1, "proj", residual=a)               # P16 residual
    d = conv(nodes, inits, rng, c, 32, 32, 3, "wino")                           # Winograd
    e = conv(nodes, inits, rng, d, 32, 48, 3, "down3", stride=2)                # 3x3/2 -> 8x8
    f = conv(nodes, inits, rng, d, 32, 48, 1, "down1", stride=2, relu=False)    # 1x1/2
    g = conv(nodes, inits, rng, e, 48, 48, 1, "pw8", residual=f)                # 64 positions
    h = conv(nodes, inits, rng, g, 48, 48, 3, "grouped", stride=2, group=4)     # -> 4x4
    y = conv(nodes, inits, rng, h, 48, 40, 1, "pw4", relu=False)                # 16 positions
    nodes[-1].output[0] = "y"
    gr = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", F, ["N", 3, 32, 32])],
                           [helper.make_tensor_value_info("y", F, ["N", 40, 4, 4])], inits)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two engines of the model: the default one (on AVX-512F the C16 region,
    layout_c16.c) and one with KILN_NO_C16_LAYOUT=1 (the P16 layout between the 1x1
    convs, as on AVX2 machines)."""
    if not Path(KILN).exists():
        pytest.skip(f"kiln binary not found at {KILN}")
    d = tmp_path_factory.mktemp("convbatch")
    m = model(d / "convs.onnx")
    engines = {}
    for kind, env in (("default", {}), ("p16", {"KILN_NO_C16_LAYOUT": "1"})):
        engine = d / f"convs_{kind}.engine"
        p = subprocess.run([KILN, "exec", f"--onnx={m}", f"--saveEngine={engine}", "--minShapes=x:1x3x32x32",
                            "--optShapes=x:8x3x32x32", "--maxShapes=x:9x3x32x32", "--iterations=1", "--duration=0",
                            "--warmUp=0"], capture_output=True, text=True, timeout=300, env={**os.environ, **env})
        assert p.returncode == 0, p.stdout + p.stderr
        engines[kind] = engine
    return d, m, engines


def run(d, engine, x, threads):
    xf, out = d / f"x{len(x)}.npy", d / f"out_{len(x)}_{threads}_{engine.stem}.json"
    np.save(xf, x)
    p = subprocess.run([KILN, "exec", f"--loadEngine={engine}", f"--shapes=x:{len(x)}x3x32x32", f"--loadInputs=x:{xf}",
                        f"--exportOutput={out}", f"--threads={threads}", "--iterations=2", "--duration=0",
                        "--warmUp=0"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return np.array(json.loads(out.read_text())[0]["values"], dtype=np.float32).reshape(len(x), 40, 4, 4)


@pytest.mark.parametrize("kind", ["default", "p16"])
@pytest.mark.parametrize("batch,threads", [(8, 1), (8, 2), (9, 2), (9, 3), (8, 3), (3, 2), (1, 2)])
def test_batched_convs_match_onnxruntime(built, batch, threads, kind):
    import onnxruntime as ort
    d, m, engines = built
    x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
    got = run(d, engines[kind], x, threads)
    ref = ort.InferenceSession(str(m), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def conv_rows(engine):
    p = subprocess.run([KILN, "inspect", str(engine)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {}
    for line in p.stdout.splitlines():
        m = re.match(r"\s*\d+\s+(\S+)\s+Conv\s+\S+\s+(nchw|[pc]16 in\+out|[pc]16 in|[pc]16 out)\s+(\S+)", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows, p.stdout


def test_model_covers_the_conv_kinds(built):
    """The kinds the docstring names are the ones kiln picked (kiln inspect's layer table),
    so a change in the layout passes or the tactics cannot quietly take coverage away."""
    _, _, engines = built
    rows, out = conv_rows(engines["p16"])
    assert rows.get("expand", ("",))[0] == "p16 out", out
    assert rows.get("mid", ("",))[0] == "p16 in+out", out
    assert rows.get("proj", ("",))[0] == "p16 in", out
    # the 3x3 stride-1 conv: Winograd, or on AVX-512 the channels-in-lanes direct conv where
    # the builder timed that faster (tests/unit/test_conv_winograd.c covers Winograd at
    # batch 3 either way)
    assert rows.get("wino", ("", ""))[1].startswith(("conv_winograd", "conv_c16_direct")), out
    assert rows.get("grouped", ("", ""))[1] == "conv_im2col_gemm", out
    # the stem, the 3x3/2 and 1x1/2 convs: on AVX-512 the builder times the
    # channels-in-lanes direct conv against the implicit GEMM and keeps the faster
    # (tests/unit/test_conv_c16.c checks the former at batch 2 and 1-3 threads against a
    # reference); the 1x1 convs over 8x8 and 4x4 images likewise against the pointwise GEMM
    for name in ("stem", "down3", "down1"):
        assert rows.get(name, ("", ""))[1] in ("conv_im2col_gemm", "conv_c16_direct"), (name, out)
    for name in ("pw8", "pw4"):
        assert rows.get(name, ("", ""))[1] in ("conv_pointwise_gemm", "conv_c16_direct"), (name, out)
    if not has_avx512f():
        print("no AVX-512F here: the default engine has no C16 region to check")
        return
    # the default engine on AVX-512F: the chain of dense convs from the stem on is one C16
    # region (the C16 kernel or Winograd), up to the grouped conv
    rows, out = conv_rows(engines["default"])
    for name in ("expand", "mid", "proj", "wino", "down3", "down1"):
        assert rows.get(name, ("", ""))[0] == "c16 in+out", (name, out)
    assert rows.get("stem", ("", ""))[0] == "c16 out", out
    assert rows.get("pw8", ("", ""))[0] == "c16 in", out
