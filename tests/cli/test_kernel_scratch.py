"""Host memory of CPU runs: kernel scratch is one set per execution context, shared by all
layers (cpu_scratch.h), and the buffer pool lets go of what the activation arena took over.

A chain of convolutions that each need scratch (Winograd or im2col for the 3x3s, the
phase-split copy and packed B panels for the strided ones) must hold no more scratch than
one link of the chain, and the layers must still compute what ONNX Runtime computes while
they take turns with the same buffers. `kiln exec` reports all of it.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))


def chain_model(path, links):
    """`links` x (3x3 conv 32 -> 32 at 24x24, Relu), then a 3x3 stride-2 conv and a 1x1
    stride-2 conv; every link has its own weights."""
    rng = np.random.default_rng(7)
    nodes, inits, cur = [], [], "x"
    for i in range(links):
        w = numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1, f"W{i}")
        b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32) * 0.1, f"B{i}")
        inits += [w, b]
        nodes.append(helper.make_node("Conv", [cur, f"W{i}", f"B{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        cur = f"r{i}"
    ws = numpy_helper.from_array(rng.standard_normal((48, 32, 3, 3)).astype(np.float32) * 0.1, "WS")
    wd = numpy_helper.from_array(rng.standard_normal((16, 48, 1, 1)).astype(np.float32) * 0.1, "WD")
    inits += [ws, wd]
    nodes.append(helper.make_node("Conv", [cur, "WS"], ["s"], name="strided3x3", pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Conv", ["s", "WD"], ["y"], name="strided1x1", strides=[2, 2]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 24, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def scratch_mib(model):
    p = subprocess.run([KILN, "run", str(model), "--inputs-random", "--iterations", "2", "--threads", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"kernel scratch: ([\d.]+) MiB, one set shared by all layers", p.stdout)
    assert m, p.stdout
    return float(m.group(1))


def test_a_chain_of_convs_holds_one_links_scratch(tmp_path):
    one = scratch_mib(chain_model(tmp_path / "one.onnx", 1))
    six = scratch_mib(chain_model(tmp_path / "six.onnx", 6))
    assert one > 0  # the convs do take scratch
    # kept per node, six links held about six times as much
    assert six == pytest.approx(one, abs=0.01)


def test_layers_sharing_scratch_match_onnxruntime(tmp_path):
    import onnxruntime as ort
    model = chain_model(tmp_path / "six.onnx", 6)
    x = np.random.default_rng(1).standard_normal((1, 32, 24, 24)).astype(np.float32)
    xf, out = tmp_path / "x.npy", tmp_path / "out.json"
    np.save(xf, x)
    p = subprocess.run([KILN, "exec", f"--onnx={model}", f"--loadInputs=x:{xf}", f"--exportOutput={out}",
                        "--threads=2", "--iterations=3", "--duration=0", "--warmUp=0"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = np.array(json.loads(out.read_text())[0]["values"], dtype=np.float32).reshape(1, 16, 6, 6)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def test_exec_reports_host_memory_and_the_pool_lets_go(tmp_path):
    model = chain_model(tmp_path / "six.onnx", 6)
    report = tmp_path / "r.json"
    p = subprocess.run([KILN, "exec", f"--onnx={model}", f"--json={report}", "--threads=2", "--iterations=5",
                        "--duration=0", "--warmUp=0"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"Host memory: activations ([\d.]+) MiB \(arena ([\d.]+), buffer pool ([\d.]+)\), kernel scratch "
                  r"([\d.]+) MiB .*process peak RSS ([\d.]+) MiB", p.stdout)
    assert m, p.stdout
    mem = json.loads(report.read_text())["runs"][0]["host_memory"]
    assert mem["kernel_scratch_bytes"] > 0
    assert mem["activation_arena_bytes"] > 0
    # every intermediate has a place in the arena after the first run: the pool's buffers
    # from that run are freed, not kept next to the arena; the pool keeps only the graph
    # output's buffer (y, 16x6x6 floats), which serves every run's output in turn
    assert mem["buffer_pool_bytes"] == 16 * 6 * 6 * 4 and float(m.group(3)) == 0
    assert mem["peak_rss_bytes"] > mem["kernel_scratch_bytes"] + mem["activation_arena_bytes"]
    assert abs(float(m.group(4)) - mem["kernel_scratch_bytes"] / 2**20) < 0.01
    r = subprocess.run([KILN, "run", str(model), "--inputs-random", "--iterations", "3"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "buffer pool holds 0.00 MiB" in r.stdout, r.stdout
