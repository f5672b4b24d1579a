#!/usr/bin/env python3
"""bench_load.py - model loading: kiln against onnx.load, in one run, on a ResNet-50-sized model.

Generates the model (tools/make_zoo_resnet50.py, ~100 MB, deterministic) into a cache
directory if it is not there yet, then measures:
  onnx.load   median wall time of N in-process loads (after one warm-up), and the peak
              RSS of a fresh Python process doing one load, minus that of one that only
              imports onnx (so interpreter + library overhead is not charged to loading);
  kiln        median of N `kiln inspect --time-load MODEL` runs: each child loads the
              model with the default options (read, import, structural validation) and
              prints the in-process load time; its peak RSS comes from wait4().
It prints both times, the ratio, and peak memory relative to the file size. Both sides
read a file that is in the page cache (the warm-up loads put it there), which is the
common case for a model that is loaded repeatedly.

Usage: python3 bench/bench_load.py [--kiln build/kiln] [--runs 5] [--cache DIR]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ensure_model(cache):
    path = os.path.join(cache, "resnet50_random.onnx")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        tmp = path + ".tmp"
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_zoo_resnet50.py"), tmp], check=True)
        os.replace(tmp, path)
    return path


def run_child(argv):
    """Runs argv, returns (stdout, peak RSS in bytes) using wait4's rusage of that child."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {err.decode(errors='replace')}")
    return out.decode(), ru.ru_maxrss * 1024  # Linux reports KiB


def mib(b):
    return b / (1024 * 1024)


def main():
    ap = argparse.ArgumentParser(description="kiln vs onnx.load model loading benchmark")
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", os.path.join(ROOT, "build", "kiln")))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cache", default=os.path.join(ROOT, "build", "bench-cache"))
    args = ap.parse_args()

    import onnx  # imported here so --help works without it

    model = ensure_model(args.cache)
    size = os.path.getsize(model)

    # onnx.load, in-process
    onnx.load(model)  # warm-up: page cache, lazy imports
    t_onnx = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        m = onnx.load(model)
        t_onnx.append(time.perf_counter() - t0)
        del m
    _, rss_base = run_child([sys.executable, "-c", "import onnx"])
    _, rss_onnx = run_child([sys.executable, "-c", f"import onnx; m = onnx.load({model!r})"])

    # kiln, one child per run
    t_kiln, rss_kiln, wall_kiln = [], [], []
    run_child([args.kiln, "inspect", "--time-load", model])  # warm-up
    for _ in range(args.runs):
        t0 = time.perf_counter()
        out, rss = run_child([args.kiln, "inspect", "--time-load", model])
        wall_kiln.append(time.perf_counter() - t0)
        t_kiln.append(float(out.split()[1]))
        rss_kiln.append(rss)

    to, tk = statistics.median(t_onnx), statistics.median(t_kiln)
    onnx_mem = rss_onnx - rss_base
    kiln_mem = max(rss_kiln)
    print(f"model: {model} ({mib(size):.1f} MiB)")
    print(f"runs:  {args.runs} (median), {os.cpu_count()} CPUs")
    print(f"onnx.load            {to * 1e3:9.2f} ms   peak RSS +{mib(onnx_mem):7.1f} MiB "
          f"({onnx_mem / size:.2f}x file) over a Python that imported onnx ({mib(rss_base):.1f} MiB)")
    print(f"kiln load            {tk * 1e3:9.2f} ms   peak RSS  {mib(kiln_mem):7.1f} MiB "
          f"({kiln_mem / size:.2f}x file) whole process")
    print(f"kiln inspect (wall)  {statistics.median(wall_kiln) * 1e3:9.2f} ms   process start to exit")
    print(f"speedup (onnx.load / kiln load): {to / tk:.1f}x")


if __name__ == "__main__":
    main()
