"""Conv tactic choice end to end: a 3x3 stride-1 conv has three CPU implementations
(Winograd F(4x4,3x3), Winograd F(2x2,3x3), implicit GEMM); the builder times all three,
records the winner in the engine, writes all three timings to the timing cache and takes
them from it on a rebuild; whichever wins, the engine's outputs match ONNX Runtime.
Convs outside Winograd's domain (stride 2, few channels) get one candidate only.
No timing thresholds: which tactic wins depends on the machine.
"""
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
FAST = ["--duration=0", "--warmUp=0", "--iterations=2"]
CONV_TACTICS = {"conv_winograd_f43", "conv_winograd_f23", "conv_im2col_gemm"}


def run(*args, check_rc=0):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == check_rc, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def avx2_fma():
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx2" in flags and " fma" in flags


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """3x3 conv (24 -> 40 channels, 13x11, bias) + Relu, then a stride-2 3x3 conv and a
    3x3 conv with 8 input channels (both outside Winograd's domain)."""
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((40, 24, 3, 3)).astype(np.float32) * 0.2, "W1")
    b1 = numpy_helper.from_array(rng.standard_normal(40).astype(np.float32), "B1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 40, 3, 3)).astype(np.float32) * 0.2, "W2")
    w3 = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2, "W3")
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="wino", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Conv", ["r1", "W2"], ["c2"], name="strided", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["c2", "W3"], ["y"], name="narrow", pads=[1, 1, 1, 1]),
    ]
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 24, 13, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 7, 6])], [w1, b1, w2, w3])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    path = tmp_path_factory.mktemp("ct") / "convs.onnx"
    onnx.save(m, str(path))
    return path


def layer_tactics(engine):
    """{layer name: tactic} from `kiln inspect ENGINE`'s layer table."""
    out = run("inspect", engine).stdout
    t = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("wino", "strided", "narrow") and parts[1] == "Conv":
            t[parts[0]] = parts[2]
    return t


def test_builder_times_conv_tactics_and_cache_round_trips(model, tmp_path):
    if not avx2_fma():
        pytest.skip("no AVX2+FMA on this CPU: the Winograd tactics are not offered")
    cache, engine = tmp_path / "t.cache", tmp_path / "convs.engine"
    p = run("exec", f"--onnx={model}", f"--timingCacheFile={cache}", f"--saveEngine={engine}", "--skipInference")
    assert "Tactics: 3 timed, 0 from the timing cache" in p.stdout  # wino x 3; the others have one candidate
    tactics = layer_tactics(engine)
    assert tactics["wino"] in CONV_TACTICS
    assert tactics["strided"] == "conv_im2col_gemm" and tactics["narrow"] == "conv_im2col_gemm"
    entries = json.loads(cache.read_text())["entries"]
    assert {e["tactic"] for e in entries} == CONV_TACTICS
    assert len({e["key"] for e in entries}) == 1 and all(e["ms"] > 0 for e in entries)
    assert entries[0]["key"].startswith("Conv|17|")
    best = min(entries, key=lambda e: e["ms"])["tactic"]
    assert tactics["wino"] == best
    # a rebuild takes all three from the cache and picks the same one
    engine2 = tmp_path / "convs2.engine"
    p = run("exec", f"--onnx={model}", f"--timingCacheFile={cache}", f"--saveEngine={engine2}", "--skipInference")
    assert "Tactics: 0 timed, 3 from the timing cache" in p.stdout
    assert layer_tactics(engine2)["wino"] == best
    # a cache that says another tactic is fastest makes the builder run that one; the
    # loaded engines compute differently (the three round differently), so each really
    # runs the tactic it recorded
    outs = {}
    for forced in sorted(CONV_TACTICS):
        j = json.loads(cache.read_text())
        for e in j["entries"]:
            e["ms"] = 0.001 if e["tactic"] == forced else 1000.0
        cache.write_text(json.dumps(j))
        engine3 = tmp_path / f"{forced}.engine"
        run("exec", f"--onnx={model}", f"--timingCacheFile={cache}", f"--saveEngine={engine3}", "--skipInference")
        assert layer_tactics(engine3)["wino"] == forced
        outs[forced] = check_outputs(model, engine3, tmp_path)
    vals = list(outs.values())
    assert all(not np.array_equal(vals[i], vals[j]) for i in range(3) for j in range(i + 1, 3))


def check_outputs(model, engine, tmp_path):
    import onnxruntime as ort
    x = np.random.default_rng(11).standard_normal((2, 24, 13, 11)).astype(np.float32)
    xf, out = tmp_path / "x.npy", tmp_path / "out.json"
    np.save(xf, x)
    run("exec", f"--loadEngine={engine}", f"--loadInputs=x:{xf}", f"--exportOutput={out}", *FAST)
    got = np.array(json.loads(out.read_text())[0]["values"], dtype=np.float32).reshape(2, 16, 7, 6)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)
    return got


def test_avg_timing_sets_the_rounds_and_rejects_bad_counts(model, tmp_path):
    if not avx2_fma():
        pytest.skip("no AVX2+FMA on this CPU: the Winograd tactics are not offered")
    engine = tmp_path / "e.engine"
    p = run("exec", f"--onnx={model}", f"--saveEngine={engine}", "--avgTiming=2", "--skipInference")
    assert "Tactics: 3 timed" in p.stdout
    assert "--avgTiming: a TensorRT" not in p.stdout + p.stderr  # taken, not ignored as a GPU-only flag
    assert layer_tactics(engine)["wino"] in CONV_TACTICS
    for bad in ("0", "65", "two"):
        p = run("exec", f"--onnx={model}", f"--avgTiming={bad}", "--skipInference", check_rc=2)
        assert f"--avgTiming: '{bad}' is not a count 1..64" in p.stderr
