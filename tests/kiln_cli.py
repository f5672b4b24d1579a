"""kiln_cli.py - helpers the layout tests share (tests/models, tests/ops): the kiln binary
under test, a run that must succeed, and whether this CPU has AVX-512F (the C16 layout is
only chosen there)."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))


def run(args, env=None):
    """`kiln ARGS...` with env added to the environment (a None value unsets that name);
    fails the test with kiln's output unless it exits 0."""
    merged = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=300, env=merged)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


def has_avx512f():
    try:
        return " avx512f " in " " + open("/proc/cpuinfo").read().replace("\n", " ") + " "
    except OSError:
        return False
