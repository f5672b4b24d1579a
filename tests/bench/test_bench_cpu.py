"""bench/bench_cpu.py, kiln against ONNX Runtime on the zoo models: runs it on the smallest
zoo model (the embedding example) with few repetitions and checks the summary table users
paste into reports: one row per batch, both engines' figures, the ratio, the rounds kiln
won out of the rounds counted, and each round's ratio as median [quartiles] (lowest-highest),
in both timing modes (kiln kept loaded in build/kiln_step and alternating with ORT every
few inferences, the default; one `kiln exec` process per round)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
STEP = Path(KILN).parent / "kiln_step"

ROW_RATIO = re.compile(r"(\d+\.\d\d) \[(\d+\.\d\d)-(\d+\.\d\d)\] \((\d+\.\d\d)-(\d+\.\d\d)\)")


@pytest.mark.parametrize("mode", ["interleave", "process"])
def test_summary_table(mode):
    if not Path(KILN).exists():
        pytest.skip(f"kiln binary not found at {KILN}")
    if mode == "interleave" and not STEP.exists():
        pytest.skip(f"{STEP} not built")
    pytest.importorskip("onnxruntime")
    env = dict(os.environ, KILN_BIN=KILN, KILN_STEP_BIN=str(STEP))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_cpu.py"), "--models", "embedding", "--threads", "1",
                        "--reps", "4", "--rounds", "3", "--layers", "0", "--mode", mode, "--gap-ms", "1"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("kiln_step and ORT alternating" in r.stdout) == (mode == "interleave"), r.stdout
    header = [l for l in r.stdout.splitlines() if l.startswith("| model |")]
    assert header and header[0].endswith("| ratio per round: median [quartiles] (lowest-highest) |"), r.stdout
    rows = [l.strip("|").split("|") for l in r.stdout.splitlines() if l.startswith("| embedding |")]
    assert [c[2].strip() for c in rows] == ["1", "8"], r.stdout
    counted = 3 if mode == "interleave" else 2  # process mode drops round 0 (the engine build)
    for c in rows:
        ort_v, kiln_v, ratio = float(c[4]), float(c[5]), float(c[6])
        assert ort_v > 0 and kiln_v > 0 and ratio > 0
        assert re.fullmatch(rf"[0-{counted}] of {counted}", c[7].strip()), c
        m = ROW_RATIO.fullmatch(c[8].strip())
        assert m, c
        med, q1, q3, lo, hi = map(float, m.groups())
        assert 0 < lo <= q1 <= med <= q3 <= hi


def test_ort_nchwc_names_map_to_the_model_convs(tmp_path):
    """ORT's profile names a fused NCHWc conv after the last node it absorbed
    ('<node>_out_nchwc'); bench_cpu maps it back to the Conv heading that chain, so the
    per-layer table's ORT column lines up with kiln's layer names. An Add's conv input is
    the one computed last (a residual from earlier blocks is not it); names of no model
    node pass through."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_cpu
    w = numpy_helper.from_array(np.zeros((4, 4, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv_a"),
             helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
             helper.make_node("Conv", ["ar", "w"], ["b"], name="conv_b"),
             helper.make_node("Add", ["b", "ar"], ["s"], name="add_b"),
             helper.make_node("Relu", ["s"], ["y"], name="relu_b")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])], [w])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(g), path)
    assert bench_cpu.ort_to_model_node(path, "relu_a_out_nchwc") == "conv_a"
    assert bench_cpu.ort_to_model_node(path, "relu_b_out_nchwc") == "conv_b"  # not conv_a, the residual's
    assert bench_cpu.ort_to_model_node(path, "conv_b_out_nchwc") == "conv_b"
    assert bench_cpu.ort_to_model_node(path, "ReorderOutput") == "ReorderOutput"
