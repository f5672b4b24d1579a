"""bench/conv1x1_stages.c, the leave-one-stage-out timing of kiln's 1x1 conv GEMM that
docs/BENCHMARKS.md ("Session 12") uses on machines without hardware counters: it must
build against build/libkiln.a with the command its header gives, print one line per
shape with every variant's median time and GFLOP/s, and refuse bad arguments."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "build" / "libkiln.a"


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    if not LIB.exists():
        pytest.skip(f"no {LIB} (run scripts/build.sh first)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler on PATH")
    out = tmp_path_factory.mktemp("stages") / "conv1x1_stages"
    r = subprocess.run([cc, "-O2", f"-I{ROOT / 'src'}", f"-I{ROOT / 'include'}", str(ROOT / "bench" / "conv1x1_stages.c"),
                        str(LIB), "-lopenblas", "-lcjson", "-lm", "-lpthread", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def variants(line):
    return {name: (float(ms), float(gf)) for name, ms, gf in re.findall(r"(\w+) ([\d.]+) ms \(([\d.]+) GF/s\)", line)}


@pytest.mark.parametrize("args,names", [
    (["32", "64", "40", "1", "1", "3"], {"full", "nores", "noep", "warm", "nchwC"}),  # P16, residual
    (["13", "49", "24", "0", "0", "3"], {"full", "nores", "noep", "warm"}),           # NCHW, a 1-column tail
])
def test_prints_every_variant(exe, args, names):
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
    if r.returncode == 1 and "no AVX2+FMA" in r.stderr:
        pytest.skip("this CPU has no AVX2+FMA: the packed GEMM is not used")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{args[0]}x{args[1]}x{args[2]} p16={args[3]} res={args[4]}:"), r.stdout
    v = variants(r.stdout)
    assert set(v) == names, r.stdout
    assert all(ms > 0 and gf > 0 for ms, gf in v.values()), r.stdout


def test_bad_arguments(exe):
    r = subprocess.run([str(exe), "32", "50", "40", "1", "0", "3"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "multiple of 16" in r.stderr
    r = subprocess.run([str(exe), "32"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage:" in r.stderr
