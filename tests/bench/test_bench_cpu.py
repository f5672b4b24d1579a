"""bench/bench_cpu.py, kiln against ONNX Runtime on the zoo models: runs it on the smallest
zoo model (the embedding example) with few repetitions and checks the summary table users
paste into reports: one row per batch, both engines' figures, the ratio, the rounds kiln
won out of the rounds counted, and the lowest and highest ratio of a single round."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))


def test_summary_table():
    if not Path(KILN).exists():
        pytest.skip(f"kiln binary not found at {KILN}")
    pytest.importorskip("onnxruntime")
    env = dict(os.environ, KILN_BIN=KILN)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_cpu.py"), "--models", "embedding", "--threads", "1",
                        "--reps", "4", "--rounds", "3", "--layers", "0"], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    header = [l for l in r.stdout.splitlines() if l.startswith("| model |")]
    assert header and header[0].endswith("| ratio per round, lowest-highest |"), r.stdout
    rows = [l.strip("|").split("|") for l in r.stdout.splitlines() if l.startswith("| embedding |")]
    assert [c[2].strip() for c in rows] == ["1", "8"], r.stdout
    for c in rows:
        ort_v, kiln_v, ratio = float(c[4]), float(c[5]), float(c[6])
        assert ort_v > 0 and kiln_v > 0 and ratio > 0
        # round 0 (the engine build) is not counted: 2 of the 3 rounds are
        assert re.fullmatch(r"[0-2] of 2", c[7].strip()), c
        lo, hi = map(float, c[8].strip().split("-"))
        assert 0 < lo <= hi
