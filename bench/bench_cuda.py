#!/usr/bin/env python3
"""bench_cuda.py - kiln's CUDA backend against PyTorch on ResNet-50 and BERT-base (GPU machine).

kiln: `kiln run ZOO_MODEL --backend cuda` (tools/make_zoo.py models), median wall-clock
latency per inference *including* the host->device copy of the inputs, the device->host
copy of the outputs and the synchronisation (kiln has no device-resident input API yet).
PyTorch: the same architectures (torchvision resnet50; a BERT-base encoder from
transformers with 12 layers, hidden 768, 12 heads, FFN 3072, seq 128) with random weights
(the weights do not change the work), inputs already on the GPU, timed with CUDA events:
eager, CUDA graphs, and (with --compile) torch.compile. FP32 (no TF32), TF32 and FP16.
Prints a table with FLOP/s and the fraction of the H200's dense peak (FP32 67 TFLOP/s,
TF32 495, FP16 990; datasheet numbers, leads only).

Usage: python3 bench/bench_cuda.py --kiln build/kiln --zoo /tmp/zoo [--compile] [--iters 200]
"""
import argparse
import os
import re
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import make_zoo  # noqa: E402

PEAK = {"fp32": 67e12, "tf32": 495e12, "fp16": 990e12}
FLOPS = {  # multiply-adds x 2 of the GEMMs/convolutions at batch 1 (seq 128 for BERT)
    "resnet50": 2 * 4.09e9,
    "bert": 2 * (12 * (128 * 768 * 768 * 4 + 128 * 768 * 3072 * 2 + 2 * 128 * 128 * 768)),
}


def kiln_latency(kiln, model, shapes, extra, iters, env=None):
    cmd = [kiln, "run", model, "--backend", "cuda", "--iterations", str(iters), "--warmUp", "20", "--shapes", shapes]
    cmd += extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env) if env else None)
    m = re.search(r"median = ([0-9.]+) ms", r.stdout)
    if not m:
        print("kiln failed:", " ".join(cmd), r.stdout[-1500:], r.stderr[-1500:])
        return None
    fb = [l for l in r.stderr.splitlines() if "warning" in l]
    if fb:
        print("  kiln:", fb[0][:300])
    for line in r.stdout.splitlines():
        if line.startswith("cuda graph"):
            print(f"  kiln {' '.join(extra) or '(TF32)'}: {line}")
    if r.returncode:
        print("kiln failed:", " ".join(cmd), r.stdout[-1500:], r.stderr[-1500:])
        return None
    return float(m.group(1))


def time_fn(fn, iters):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def graphed(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def torch_models(name, dtype):
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50().eval().cuda().to(dtype)
        x = torch.randn(1, 3, 224, 224, device="cuda", dtype=dtype)
        return m, (x,)
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    m = BertModel(cfg, add_pooling_layer=False).eval().cuda().to(dtype)
    ids = torch.randint(0, 30522, (1, 128), device="cuda")
    mask = torch.ones(1, 128, dtype=torch.int64, device="cuda")
    return m, (ids, mask)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--zoo", default="/tmp/zoo")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    rows = []
    for name, shapes in (("resnet50", "input:1x3x224x224"), ("bert", "input_ids:1x128,attention_mask:1x128")):
        path = make_zoo.ensure(a.zoo, name)
        for prec, extra in (("fp32", ["--noTF32"]), ("tf32", []), ("fp16", ["--fp16"])):
            ms = kiln_latency(a.kiln, path, shapes, extra, a.iters)
            rows.append((name, prec, "kiln (incl. H2D/D2H)", ms))
        ms = kiln_latency(a.kiln, path, shapes, ["--noCudaGraph"], a.iters)
        rows.append((name, "tf32", "kiln no CUDA graph", ms))
        if name == "resnet50":  # FP16 with channels-last convolutions (opt-in, docs/CUDA.md "FP16")
            ms = kiln_latency(a.kiln, path, shapes, ["--fp16"], a.iters, {"KILN_NHWC": "1"})
            rows.append((name, "fp16", "kiln KILN_NHWC=1", ms))
        for prec in ("fp32", "tf32", "fp16"):
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
            torch.backends.cudnn.allow_tf32 = prec == "tf32"
            dtype = torch.float16 if prec == "fp16" else torch.float32
            m, args = torch_models(name, dtype)
            with torch.inference_mode():
                fn = lambda: m(*args)  # noqa: E731
                rows.append((name, prec, "torch eager", time_fn(fn, a.iters)))
                rows.append((name, prec, "torch CUDA graph", time_fn(graphed(fn), a.iters)))
                if a.compile and prec == "fp16":
                    cm = torch.compile(m)
                    rows.append((name, prec, "torch.compile", time_fn(lambda: cm(*args), a.iters)))
            del m
            torch.cuda.empty_cache()
    print(f"\n{'model':9} {'prec':5} {'runner':22} {'ms':>8} {'TFLOP/s':>8} {'%peak':>6} {'kiln/this':>9}")
    kiln = {(r[0], r[1]): r[3] for r in rows if r[2].startswith("kiln (")}
    for name, prec, runner, ms in rows:
        if ms is None:
            print(f"{name:9} {prec:5} {runner:22} {'n/a':>8}")
            continue
        tf = FLOPS[name] / (ms * 1e-3) / 1e12
        k = kiln.get((name, prec))
        ratio = f"{k / ms:9.2f}" if k else "      n/a"
        print(f"{name:9} {prec:5} {runner:22} {ms:8.3f} {tf:8.1f} {100 * tf * 1e12 / PEAK[prec]:6.1f} {ratio}")


if __name__ == "__main__":
    main()
