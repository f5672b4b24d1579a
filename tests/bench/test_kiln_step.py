"""build/kiln_step (bench/kiln_step.c), the engine kept loaded for interleaved benchmarks:
its protocol (ready, `run N` -> `ok` and N times, quit) and its errors, which name what
was wrong: bad arguments (exit 2), an engine that does not load, an input the engine does
not have or of the wrong size, an unknown command."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
STEP = Path(KILN).parent / "kiln_step"
MODEL = ROOT / "examples" / "tiny_cnn.onnx"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    if not STEP.exists() or not Path(KILN).exists():
        pytest.skip(f"{STEP} or {KILN} not built")
    e = tmp_path_factory.mktemp("step") / "tiny.engine"
    r = subprocess.run([KILN, "exec", f"--onnx={MODEL}", "--shapes=input:2x3x32x32", f"--saveEngine={e}",
                        "--skipInference"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return e


def start(engine, tmp_path, spec_dims="2x3x32x32", name="input", n=2 * 3 * 32 * 32):
    f = tmp_path / "x.bin"
    np.ones(n, np.float32).tofile(f)
    return subprocess.Popen([str(STEP), str(engine), "1", f"{name}:1:{spec_dims}:{f}"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def test_runs_and_times(engine, tmp_path):
    p = start(engine, tmp_path)
    assert p.stdout.readline().strip() == "ready"
    p.stdin.write("run 3\n")
    p.stdin.flush()
    words = p.stdout.readline().split()
    assert words[0] == "ok" and len(words) == 4 and all(float(w) > 0 for w in words[1:])
    p.stdin.write("quit\n")
    p.stdin.flush()
    assert p.wait(timeout=30) == 0


def test_unknown_command(engine, tmp_path):
    p = start(engine, tmp_path)
    assert p.stdout.readline().strip() == "ready"
    out, _ = p.communicate("jump\n", timeout=30)
    assert p.returncode == 1 and "unknown command" in out


def test_wrong_input(engine, tmp_path):
    p = start(engine, tmp_path, name="nope")
    out, _ = p.communicate("", timeout=30)
    assert p.returncode == 1 and "error setting input 'nope'" in out


def test_short_file(engine, tmp_path):
    p = start(engine, tmp_path, n=10)
    out, _ = p.communicate("", timeout=30)
    assert p.returncode == 2 and "shorter than its DIMS" in out


def test_bad_arguments(tmp_path):
    if not STEP.exists():
        pytest.skip(f"{STEP} not built")
    r = subprocess.run([str(STEP)], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr
    r = subprocess.run([str(STEP), str(tmp_path / "missing.engine"), "1"], capture_output=True, text=True)
    assert r.returncode == 1 and "error loading" in r.stdout
    r = subprocess.run([str(STEP), "x.engine", "1", "input:99:1x2:f"], capture_output=True, text=True)
    assert r.returncode == 2 and "unsupported DTYPE" in r.stdout
