"""test_conv_strided.py - strided convolutions with constant weights against ONNX Runtime.

kiln packs constant Conv weights once and runs strided 2-D convs (and stride-1 ones the
GEMM takes) through a phase-split copy of the input (src/backends/cpu/cpu_conv_strided.h); the generic op tests feed W as a
graph input, which takes the other path. Here W and B are initializers, and the Conv is
followed by the Add / Relu that kiln's fusion pass folds into the GEMM's epilogue (as in
ResNet's stem, its 3x3/2 convs and its 1x1/2 downsample convs with the residual sum).
Each case is written in the ONNX backend-test layout under build/op_cases_strided/ with
ONNX Runtime's outputs, and `kiln verify` must report it as PASS.
"""
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", ROOT / "build" / "kiln"))
CASES = ROOT / "build" / "op_cases_strided"
F = TensorProto.FLOAT

rng = np.random.default_rng(11)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# name, X shape, W shape, attrs, epilogue: "" | "relu" | "add_relu" (residual is a graph input)
CASE_LIST = [
    ("stem_7x7s2_odd", (1, 3, 37, 41), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3]), "relu"),
    ("conv3x3s2_28", (2, 16, 56, 56), (24, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), "relu"),
    ("conv3x3s2_7_batch3", (3, 40, 14, 14), (32, 40, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), ""),
    ("conv3x3s2_odd_asym", (1, 8, 13, 10), (12, 8, 3, 3), dict(strides=[2, 2], pads=[0, 1, 2, 1]), "relu"),
    ("conv3x3s2_narrow", (2, 8, 9, 7), (6, 8, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), "add_relu"),
    ("conv5x5s3_dil", (1, 6, 29, 31), (8, 6, 5, 5), dict(strides=[3, 3], dilations=[2, 1], pads=[2, 2, 2, 2]), ""),
    ("conv3x3s2_groups", (2, 12, 20, 21), (12, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=3), "relu"),
    ("downsample_1x1s2", (2, 32, 28, 28), (48, 32, 1, 1), dict(strides=[2, 2]), "add_relu"),
    ("downsample_1x1s2_odd", (1, 24, 15, 13), (40, 24, 1, 1), dict(strides=[2, 2]), "add_relu"),
    ("conv1x1_pads", (1, 8, 9, 10), (12, 8, 1, 1), dict(pads=[1, 0, 0, 2]), "relu"),
    ("conv5x5s1_pad", (2, 10, 13, 17), (14, 10, 5, 5), dict(pads=[2, 1, 2, 3]), "add_relu"),
]


def out_hw(x, w, a):
    s = a.get("strides", [1, 1])
    d = a.get("dilations", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    return [(x[2 + i] + p[i] + p[i + 2] - (w[2 + i] - 1) * d[i] - 1) // s[i] + 1 for i in range(2)]


def build_case(name, xs, ws, attrs, ep):
    d = CASES / name
    data = d / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    x, w, b = r(*xs), r(*ws) * 0.2, r(ws[0])
    oh, ow = out_hw(xs, ws, attrs)
    feeds = {"X": x}
    ins = [helper.make_tensor_value_info("X", F, list(xs))]
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C"], kernel_shape=list(ws[2:]), **attrs)]
    last = "C"
    if ep == "add_relu":
        res = r(xs[0], ws[0], oh, ow)
        feeds["R"] = res
        ins.append(helper.make_tensor_value_info("R", F, list(res.shape)))
        nodes.append(helper.make_node("Add", ["C", "R"], ["S"]))
        last = "S"
    if ep in ("relu", "add_relu"):
        nodes.append(helper.make_node("Relu", [last], ["Y"]))
    else:
        nodes[-1].output[0] = "Y"
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    g = helper.make_graph(nodes, name, ins, [helper.make_tensor_value_info("Y", F, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    import onnxruntime as ort
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, feeds)
    onnx.save(m, str(d / "model.onnx"))
    for k, (n, v) in enumerate(feeds.items()):
        (data / f"input_{k}.pb").write_bytes(numpy_helper.from_array(v, n).SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(y, "Y").SerializeToString())
    # sums of up to 40*9 products of O(1) values in a different order than ORT's
    (d / "data.json").write_text('{"atol": 1e-4, "rtol": 1e-4}\n')


_results = None


def verify_all():
    global _results
    if _results is not None:
        return _results
    if not KILN.exists():
        _results = f"kiln binary not found at {KILN}"
        return _results
    for c in CASE_LIST:
        build_case(*c)
    status = {}
    for threads in (1, 2):
        r_ = subprocess.run([str(KILN), "verify", str(CASES), "--threads", str(threads)], capture_output=True, text=True,
                            timeout=300)
        for line in (r_.stdout + r_.stderr).splitlines():
            m = re.search(r"\b(PASS|FAIL|SKIP)\b", line)
            if not m:
                continue
            for c in CASE_LIST:
                if re.search(rf"\b{re.escape(c[0])}\b", line):
                    prev = status.get((c[0], threads))
                    if not prev or prev[0] == "PASS":
                        status[(c[0], threads)] = (m.group(1), line)
        if r_.returncode not in (0, 1) and not status:
            _results = f"kiln verify failed: {r_.stderr[:500]}"
            return _results
    _results = status
    return _results


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", [c[0] for c in CASE_LIST])
def test_strided_conv_matches_onnxruntime(name, threads):
    res = verify_all()
    if isinstance(res, str):
        pytest.skip(res)
    assert (name, threads) in res, f"kiln verify printed no result line for case {name} at {threads} threads"
    st, line = res[(name, threads)]
    assert st == "PASS", line
