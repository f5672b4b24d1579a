"""bench/conv_gflops.py: per-class conv time and GFLOP/s of an engine, from `kiln exec
--dumpProfile`. On the bundled tiny CNN every conv gets a row with its time and a positive
rate, the FLOP count is the direct convolution's, and a missing engine fails with kiln's
error."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
MODEL = ROOT / "examples" / "tiny_cnn.onnx"
sys.path.insert(0, str(ROOT / "bench"))
import conv_gflops  # noqa: E402


def test_flops_are_the_direct_convolution_count():
    import onnx
    flops = conv_gflops.conv_flops(str(MODEL), {"input": [2, 3, 32, 32]})
    m = onnx.load(str(MODEL))
    convs = [n.name for n in m.graph.node if n.op_type == "Conv"]
    assert sorted(flops) == sorted(convs) and all(v > 0 for v in flops.values())
    # batch 2 counts twice batch 1's work
    one = conv_gflops.conv_flops(str(MODEL), {"input": [1, 3, 32, 32]})
    assert all(flops[k] == 2 * one[k] for k in one)


def test_rows_for_every_conv(tmp_path):
    if not Path(KILN).exists():
        pytest.skip(f"{KILN} not built")
    e = tmp_path / "tiny.engine"
    r = subprocess.run([KILN, "exec", f"--onnx={MODEL}", "--shapes=input:1x3x32x32", f"--saveEngine={e}",
                        "--skipInference"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "conv_gflops.py"), str(e), "--model", str(MODEL),
                        "--shapes", "input:1x3x32x32", "--iters", "5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [l.split("|") for l in r.stdout.splitlines() if l.startswith("| ") and not l.startswith("| class")]
    import onnx
    convs = [n.name for n in onnx.load(str(MODEL)).graph.node if n.op_type == "Conv"]
    assert len(rows) == len(convs), r.stdout
    for row in rows:
        assert float(row[2]) > 0 and float(row[3]) > 0, row
    assert "total engine time (ms):" in r.stdout


def test_missing_engine_fails(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "conv_gflops.py"), str(tmp_path / "none.engine"),
                        "--model", str(MODEL), "--shapes", "input:1x3x32x32"], capture_output=True, text=True)
    assert r.returncode != 0 and "kiln exec failed" in r.stderr
