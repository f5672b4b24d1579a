#!/usr/bin/env python3
"""bench_cuda.py - kiln's CUDA backend against PyTorch on ResNet-50 and BERT-base (GPU machine).

kiln: `kiln run ZOO_MODEL --backend cuda` (tools/make_zoo.py models), median wall-clock
latency per inference *including* the host->device copy of the inputs, the device->host
copy of the outputs and the synchronisation (kiln has no device-resident input API yet).
PyTorch: the same architectures (torchvision resnet50; a BERT-base encoder from
transformers with 12 layers, hidden 768, 12 heads, FFN 3072, seq 128) with random weights
(the weights do not change the work), inputs already on the GPU, timed with CUDA events:
eager and CUDA graphs at batch 1 in FP32 (no TF32), TF32 and FP16; batch 8 (both models)
and batch 128 (ResNet-50) in FP16, kiln and torch CUDA graph.

--compile adds torch.compile rows (ResNet-50 and BERT at batch 1, FP16 and TF32, modes
"default" and "reduce-overhead" = with CUDA graphs; "max-autotune-no-cudagraphs" compiles
too slowly to be worth it here). Each compile runs in its own process with what is left
of a per-model budget (--compile-timeout seconds, default 240): a compile that overruns is
killed (its whole process group, inductor's workers too) and the model's remaining compile
rows are reported as skipped, so a slow compile cannot eat the run.

Every row prints TFLOP/s (multiply-adds x 2 of the GEMMs/convolutions, times the batch)
and the % of the H200's dense peak for its precision (FP16 989, TF32 494, FP32 67 TFLOP/s;
datasheet numbers without sparsity), and items/s (images or sequences).

Usage: python3 bench/bench_cuda.py --kiln build/kiln --zoo /tmp/zoo [--compile] [--iters 200]
       [--compile-timeout 240] [--compile-precs fp16,tf32] [--compile-only]
--compile-only times, at batch 1, kiln and torch's CUDA graph in those precisions and then the
compile rows (a short device call when the other rows are already measured).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))

PEAK = {"fp32": 67e12, "tf32": 494e12, "fp16": 989e12}
FLOPS = {  # multiply-adds x 2 of the GEMMs/convolutions per item (seq 128 for BERT)
    "resnet50": 2 * 4.09e9,
    "bert": 2 * (12 * (128 * 768 * 768 * 4 + 128 * 768 * 3072 * 2 + 2 * 128 * 128 * 768)),
}
COMPILE_MODES = ("default", "reduce-overhead")


def shapes_for(name, batch):
    if name == "resnet50":
        return f"input:{batch}x3x224x224"
    return f"input_ids:{batch}x128,attention_mask:{batch}x128"


def tflops(name, batch, ms):
    return FLOPS[name] * batch / (ms * 1e-3) / 1e12


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
            print(f"  kiln {shapes} {' '.join(extra) or '(TF32)'}: {line}")
    if r.returncode:
        print("kiln failed:", " ".join(cmd), r.stdout[-1500:], r.stderr[-1500:])
        return None
    return float(m.group(1))


def time_fn(fn, iters):
    import torch
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
    import torch
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


def set_precision(prec):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    return torch.float16 if prec == "fp16" else torch.float32


def torch_models(name, dtype, batch=1):
    import torch
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50().eval().cuda().to(dtype)
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
        return m, (x,)
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    m = BertModel(cfg, add_pooling_layer=False).eval().cuda().to(dtype)
    ids = torch.randint(0, 30522, (batch, 128), device="cuda")
    mask = torch.ones(batch, 128, dtype=torch.int64, device="cuda")
    return m, (ids, mask)


def torch_rows(name, batch, precs, iters, eager=True):
    """(prec, runner, ms) rows of torch eager / CUDA graph for one model and batch."""
    import torch
    out = []
    for prec in precs:
        dtype = set_precision(prec)
        m, args = torch_models(name, dtype, batch)
        with torch.inference_mode():
            fn = lambda: m(*args)  # noqa: E731
            if eager:
                out.append((prec, "torch eager", time_fn(fn, iters)))
            out.append((prec, "torch CUDA graph", time_fn(graphed(fn), iters)))
        del m, args
        torch.cuda.empty_cache()
    return out


# ---- torch.compile, one process per (model, precision, mode) ---------------------------

def compile_child(name, prec, mode, iters):
    """Runs in the child process: compiles, times, prints one RESULT line."""
    import torch
    dtype = set_precision(prec)
    m, args = torch_models(name, dtype)
    cm = torch.compile(m) if mode == "default" else torch.compile(m, mode=mode)
    with torch.inference_mode():
        t0 = time.time()
        for _ in range(3):  # compile, and reduce-overhead's recording runs
            cm(*args)
        torch.cuda.synchronize()
        compile_s = time.time() - t0
        ms = time_fn(lambda: cm(*args), iters)
    print(f"RESULT ms={ms:.6f} compile_s={compile_s:.1f}", flush=True)


def run_with_timeout(cmd, timeout):
    """Runs cmd in its own process group; (stdout, None) or (partial stdout, reason). On
    timeout the whole group is killed (torch.compile starts worker processes)."""
    if timeout <= 0:
        return "", "skipped: the model's compile budget is spent"
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        return out or "", f"timed out after {timeout:.0f} s (killed)"
    if p.returncode:
        return out, f"failed (rc={p.returncode})"
    return out, None


def parse_result(out):
    m = re.search(r"RESULT ms=([0-9.]+) compile_s=([0-9.]+)", out or "")
    return (float(m.group(1)), float(m.group(2))) if m else None


def compile_rows(name, iters, budget_s, child_cmd=None, precs=("fp16", "tf32")):
    """torch.compile rows of one model within budget_s seconds in all."""
    rows = []
    deadline = time.time() + budget_s
    for prec in precs:
        for mode in COMPILE_MODES:
            cmd = child_cmd(name, prec, mode) if child_cmd else [
                sys.executable, os.path.abspath(__file__), "--compile-child", name, prec, mode, "--iters", str(iters)]
            out, why = run_with_timeout(cmd, deadline - time.time())
            res = parse_result(out) if not why else None
            runner = f"torch.compile {mode}"
            if res is None:
                tail = (out or "").strip().splitlines()[-3:]
                print(f"  {name} {prec} {runner}: {why or 'no result'}" + (f" ({' | '.join(tail)[:400]})" if tail else ""))
                rows.append((prec, runner, None))
            else:
                print(f"  {name} {prec} {runner}: compiled in {res[1]:.1f} s")
                rows.append((prec, runner, res[0]))
    return rows


# ---- the table --------------------------------------------------------------------------

def format_table(rows):
    """rows: (model, batch, prec, runner, ms or None). kiln/this: kiln's ms (the graph row
    of the same model, batch and precision) over this row's."""
    lines = [f"{'model':9} {'batch':>5} {'prec':5} {'runner':30} {'ms':>8} {'items/s':>9} {'TFLOP/s':>8} "
             f"{'%peak':>6} {'kiln/this':>9}"]
    kiln = {(r[0], r[1], r[2]): r[4] for r in rows if r[3].startswith("kiln (") and r[4]}
    for name, batch, prec, runner, ms in rows:
        if ms is None:
            lines.append(f"{name:9} {batch:5d} {prec:5} {runner:30} {'n/a':>8}")
            continue
        tf = tflops(name, batch, ms)
        k = kiln.get((name, batch, prec))
        ratio = f"{k / ms:9.2f}" if k else "      n/a"
        lines.append(f"{name:9} {batch:5d} {prec:5} {runner:30} {ms:8.3f} {batch / (ms * 1e-3):9.1f} {tf:8.1f} "
                     f"{100 * tf * 1e12 / PEAK[prec]:6.1f} {ratio}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln")
    ap.add_argument("--zoo", default="/tmp/zoo")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--compile", action="store_true", help="add torch.compile rows (default, reduce-overhead)")
    ap.add_argument("--compile-timeout", type=float, default=240,
                    help="seconds of torch.compile (compiling and timing) per model; overruns are killed")
    ap.add_argument("--no-batch", action="store_true", help="batch 1 only")
    ap.add_argument("--compile-only", action="store_true",
                    help="batch 1: kiln and torch CUDA graph rows of --compile-precs, then the torch.compile rows")
    ap.add_argument("--compile-precs", default="fp16,tf32", help="precisions of the torch.compile rows")
    ap.add_argument("--compile-child", nargs=3, metavar=("MODEL", "PREC", "MODE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.compile_child:
        compile_child(*a.compile_child, a.iters)
        return
    if not a.kiln:
        ap.error("--kiln is required")
    import make_zoo
    rows = []
    cprecs = tuple(p for p in a.compile_precs.split(",") if p)
    if a.compile_only:  # a short device call: the compile rows next to kiln's and torch's graph rows
        for name in ("resnet50", "bert"):
            path = make_zoo.ensure(a.zoo, name)
            for prec in cprecs:
                extra = {"fp16": ["--fp16"], "fp32": ["--noTF32"]}.get(prec, [])
                rows.append((name, 1, prec, "kiln (incl. H2D/D2H)",
                             kiln_latency(a.kiln, path, shapes_for(name, 1), extra, a.iters)))
            rows += [(name, 1, p, r, ms) for p, r, ms in torch_rows(name, 1, cprecs, a.iters, eager=False)]
            print(f"\ntorch.compile (per model budget {a.compile_timeout:.0f} s):")
            rows += [(name, 1, p, r, ms) for p, r, ms in compile_rows(name, a.iters, a.compile_timeout, precs=cprecs)]
        print()
        print(format_table(rows))
        return
    for name in ("resnet50", "bert"):
        path = make_zoo.ensure(a.zoo, name)
        shapes = shapes_for(name, 1)
        for prec, extra in (("fp32", ["--noTF32"]), ("tf32", []), ("fp16", ["--fp16"])):
            rows.append((name, 1, prec, "kiln (incl. H2D/D2H)", kiln_latency(a.kiln, path, shapes, extra, a.iters)))
        rows.append((name, 1, "tf32", "kiln no CUDA graph",
                     kiln_latency(a.kiln, path, shapes, ["--noCudaGraph"], a.iters)))
        if name == "resnet50":  # FP16 with channels-last convolutions (opt-in, docs/CUDA.md "FP16")
            rows.append((name, 1, "fp16", "kiln KILN_NHWC=1",
                         kiln_latency(a.kiln, path, shapes, ["--fp16"], a.iters, {"KILN_NHWC": "1"})))
        rows += [(name, 1, p, r, ms) for p, r, ms in torch_rows(name, 1, ("fp32", "tf32", "fp16"), a.iters)]
        if not a.no_batch:
            # batch 8 (both models) and 128 (ResNet-50 throughput), FP16, kiln vs torch's CUDA graph
            for batch in (8, 128) if name == "resnet50" else (8,):
                it = a.iters if batch <= 8 else max(20, a.iters // 10)
                rows.append((name, batch, "fp16", "kiln (incl. H2D/D2H)",
                             kiln_latency(a.kiln, path, shapes_for(name, batch), ["--fp16"], it)))
                rows += [(name, batch, p, r, ms) for p, r, ms in torch_rows(name, batch, ("fp16",), it, eager=False)]
    if a.compile:
        print(f"\ntorch.compile (per model budget {a.compile_timeout:.0f} s):")
        for name in ("resnet50", "bert"):
            rows += [(name, 1, p, r, ms) for p, r, ms in compile_rows(name, a.iters, a.compile_timeout, precs=cprecs)]
    print()
    print(format_table(rows))


if __name__ == "__main__":
    main()
