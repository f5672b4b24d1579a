#!/usr/bin/env python3
"""bench_load.py - model loading: kiln against onnx.load, in one run, on a ResNet-50-sized model.

Generates the model (tools/make_zoo_resnet50.py, ~100 MB, deterministic) into a cache
directory if it is not there yet, then measures:
  onnx.load   median wall time of N in-process loads (after one warm-up), and the peak
              RSS (VmHWM) of a fresh Python process across one load, minus its peak after
              `import onnx` (so interpreter + library overhead is not charged to loading);
  kiln        median of N `kiln inspect --time-load MODEL` runs: each child loads the
              model with the default options (read, import, structural validation) and
              prints the in-process load time and its own peak RSS (VmHWM), whole process.
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
    """Runs argv and returns its stdout; fails loudly on a non-zero exit."""
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr}")
    return p.stdout


def fields(text):
    """'key value' lines -> dict of floats."""
    return {k: float(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


# Peak RSS (VmHWM) is per address space, so it is reset by exec and not inherited from
# this (large) Python process, unlike wait4's ru_maxrss.
ONNX_CHILD = """
import sys, time
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) * 1024
import onnx
base = hwm()
t0 = time.perf_counter()
m = onnx.load(sys.argv[1])
t1 = time.perf_counter()
print('load_seconds', t1 - t0)
print('base_rss_bytes', base)
print('peak_rss_bytes', hwm())
"""


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
    child = fields(run_child([sys.executable, "-c", ONNX_CHILD, model]))
    rss_base, rss_onnx = child["base_rss_bytes"], child["peak_rss_bytes"]

    # kiln, one child per run
    t_kiln, rss_kiln, wall_kiln = [], [], []
    run_child([args.kiln, "inspect", "--time-load", model])  # warm-up
    for _ in range(args.runs):
        t0 = time.perf_counter()
        out = fields(run_child([args.kiln, "inspect", "--time-load", model]))
        wall_kiln.append(time.perf_counter() - t0)
        t_kiln.append(out["load_seconds"])
        rss_kiln.append(out["peak_rss_bytes"])
        rss_split = (out.get("rss_anon_bytes", 0), out.get("rss_file_bytes", 0))

    to, tk = statistics.median(t_onnx), statistics.median(t_kiln)
    onnx_mem = rss_onnx - rss_base
    kiln_mem = max(rss_kiln)
    print(f"model: {model} ({mib(size):.1f} MiB)")
    print(f"runs:  {args.runs} (median), {os.cpu_count()} CPUs")
    print(f"onnx.load            {to * 1e3:9.2f} ms   peak RSS +{mib(onnx_mem):7.1f} MiB "
          f"({onnx_mem / size:.2f}x file) over a Python that imported onnx ({mib(rss_base):.1f} MiB)")
    print(f"kiln load            {tk * 1e3:9.2f} ms   peak RSS  {mib(kiln_mem):7.1f} MiB "
          f"({kiln_mem / size:.2f}x file) whole process; after load: "
          f"{mib(rss_split[0]):.1f} MiB private, {mib(rss_split[1]):.1f} MiB mapped file pages")
    print(f"kiln inspect (wall)  {statistics.median(wall_kiln) * 1e3:9.2f} ms   process start to exit")
    print(f"speedup (onnx.load / kiln load): {to / tk:.1f}x")


if __name__ == "__main__":
    main()
