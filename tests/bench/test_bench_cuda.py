"""The GPU benchmark script's host-side logic (bench/bench_cuda.py), without a GPU or torch:
the table's throughput / TFLOP/s / %-of-peak columns, and the torch.compile guard (each
compile in its own process group, killed when it overruns the model's budget, the model's
later compile rows skipped)."""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_cuda  # noqa: E402


def test_table_columns():
    rows = [("resnet50", 1, "fp16", "kiln (incl. H2D/D2H)", 2.0),
            ("resnet50", 1, "fp16", "torch CUDA graph", 1.0),
            ("resnet50", 128, "fp16", "kiln (incl. H2D/D2H)", 64.0),
            ("bert", 8, "tf32", "torch.compile default", None)]
    lines = bench_cuda.format_table(rows).splitlines()
    assert len(lines) == 5
    # batch 1 at 2 ms: 8.18 GFLOP / 2 ms = 4.09 TFLOP/s, 0.4 % of 989; 500 images/s
    k = lines[1].split()
    assert k[-4:] == ["500.0", "4.1", "0.4", "1.00"]
    t = lines[2].split()
    assert t[-1] == "2.00"  # kiln 2 ms / torch 1 ms
    assert t[-2] == "0.8" and t[-3] == "8.2"
    b = lines[3].split()
    assert b[1] == "128" and b[-4] == "2000.0"  # 128 images in 64 ms
    assert lines[4].split()[-1] == "n/a"
    assert bench_cuda.PEAK == {"fp32": 67e12, "tf32": 494e12, "fp16": 989e12}


def test_timeout_kills_the_process_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    child = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
             f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    t0 = time.time()
    out, why = bench_cuda.run_with_timeout([sys.executable, "-c", child], 2)
    assert "timed out" in why
    assert time.time() - t0 < 20
    gpid = int(pidfile.read_text())
    for _ in range(50):  # the grandchild (inductor's workers) went with it
        try:
            os.kill(gpid, 0)
        except ProcessLookupError:
            break
        try:  # reaped by init in a container? a zombie counts as gone
            if Path(f"/proc/{gpid}/stat").read_text().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the grandchild survived the timeout")


def test_compile_budget_per_model():
    def child(name, prec, mode):
        if prec == "fp16" and mode == "default":
            return [sys.executable, "-c", "print('RESULT ms=1.250000 compile_s=3.0')"]
        return [sys.executable, "-c", "import time; time.sleep(60)"]
    t0 = time.time()
    rows = bench_cuda.compile_rows("bert", 10, 3, child_cmd=child)
    assert time.time() - t0 < 20  # one budget for the model, not one per row
    assert rows[0] == ("fp16", "torch.compile default", 1.25)
    assert [r[2] for r in rows[1:]] == [None, None, None]
    assert len(rows) == 4


def test_failed_child_gives_no_row():
    out, why = bench_cuda.run_with_timeout([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], 10)
    assert why == "failed (rc=3)" and "boom" in out
    assert bench_cuda.parse_result("RESULT ms=2.5 compile_s=10.0") == (2.5, 10.0)
    assert bench_cuda.parse_result("nothing") is None
