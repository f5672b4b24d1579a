"""bench/ab_kiln.py, the alternating A/B of two kiln builds or engines: runs on the bundled
tiny CNN with the same build on both sides and checks the report (both sides' medians and
per-round figures, one row per layer class with both sides' times and rounds won, Conv
classes named by kernel size and stride), and that a failing side stops it with a message."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
MODEL = ROOT / "examples" / "tiny_cnn.onnx"


def ab(*args):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "ab_kiln.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_report_rows(tmp_path):
    eng = tmp_path / "tiny.engine"
    r = subprocess.run([KILN, "exec", f"--onnx={MODEL}", f"--saveEngine={eng}", "--shapes=input:1x3x32x32",
                        "--skipInference"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    side = f"{KILN}:{eng}"
    r = ab("--shapes", "input:1x3x32x32", "--rounds", "2", "--iters", "3", "--warmup", "20", "--model", MODEL,
           side, side)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("A ") and "B faster in" in lines[0] and "of 2 rounds" in lines[0]
    assert len(lines[1].split()) == 3 + 2 and len(lines[2].split()) == 3 + 2  # "A per round:" + 2 figures
    rows = {l.split()[0]: l.split() for l in lines[4:]}
    assert any(k.startswith("conv3x3s1/") for k in rows), r.stdout
    for k, v in rows.items():
        assert v[-2] == "of" and v[-1] == "2", v
        assert float(v[1]) >= 0 and float(v[2]) >= 0


def test_failing_side_is_reported(tmp_path):
    r = ab("--shapes", "input:1x3x32x32", "--rounds", "1", f"{KILN}:{tmp_path / 'missing.engine'}",
           f"{KILN}:{tmp_path / 'missing.engine'}")
    assert r.returncode != 0 and "failed" in r.stderr


def test_step_mode_alternates_loaded_engines(tmp_path):
    """--step: both sides' engines loaded in kiln_step; the report gives both medians, the
    rounds B won and the per-round speed-up's median, quartiles and range. --env-b reaches
    side B only (an unknown kiln switch changes nothing, so the run must still succeed)."""
    eng = tmp_path / "tiny.engine"
    r = subprocess.run([KILN, "exec", f"--onnx={MODEL}", f"--saveEngine={eng}", "--shapes=input:1x3x32x32",
                        "--skipInference"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    side = f"{KILN}:{eng}"
    r = ab("--step", "--shapes", "input:1x3x32x32", "--rounds", "4", "--iters", "3", "--env-b", "KILN_GEMM_NT=0",
           side, side)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("A ") and "of 4 rounds" in lines[0], r.stdout
    med, rest = lines[1].split("median ")[1].split(" ", 1)
    assert float(med) > 0 and rest.startswith("[") and rest.endswith(")"), lines[1]


def test_step_mode_errors(tmp_path):
    r = ab("--step", "--shapes", "input:1x3x32x32", "--rounds", "1", f"{KILN}:{tmp_path / 'missing.engine'}",
           f"{KILN}:{tmp_path / 'missing.engine'}")
    assert r.returncode != 0 and "failed" in r.stderr, r.stderr
    r = ab("--step", "--shapes", "input:1x3x32x32", "--env-b", "NOEQUALS", f"{KILN}:x", f"{KILN}:x")
    assert r.returncode != 0 and "NAME=VALUE" in r.stderr, r.stderr
