#!/usr/bin/env python3
"""exec_gpu.py - GPU checks of kiln's runtime side (needs an NVIDIA GPU; run_gpu.sh calls it).

For each zoo model (tools/make_zoo.py) at batch 1, with ONNX Runtime (CPU) as reference:
  * `kiln run --backend cuda`: the CUDA graph is replayed (BERT included: its shape nodes
    are evaluated on the host per input shape) and the replay check passes;
  * `kiln exec --backend=cuda --saveEngine`: builds, prints trtexec's GPU report lines
    (H2D Latency, GPU Compute Time, D2H Latency) and the device memory line, and its
    --exportOutput matches ONNX Runtime within verify's TF32 tolerance;
  * `--loadEngine` of that engine: the same outputs; `kiln inspect` shows the GPU;
  * `--noDataTransfers` and `--infStreams=2` runs;
  * ResNet-50: build time with a fresh and with a warm --timingCacheFile.
Then (last, so a slow run cannot hide the checks above; SKIP_FP16_ENGINE=1 skips):
  * FP16 engines, channels-last since branch s2-gpueng (`kiln exec --backend=cuda --fp16`):
    ResNet-50 and MobileNetV2 build with kiln.nhwc nodes in the saved graph, --loadEngine
    runs them (the load re-infers their types: ir/ops/ops_nhwc.c), `kiln inspect --json`
    shows half nhwc convolutions and their tactics, outputs of both vs ONNX
    Runtime within the FP16 tolerance (1e-2), GPU compute time against a KILN_NHWC=0 (NCHW)
    engine (reported, not asserted), and ResNet-50 FP16 build time with a warm
    --timingCacheFile (target < 2 s: reported; "0 timed" asserted).
Every command has a timeout, shortened to what is left of EXEC_TIMEOUT (run_gpu.sh's limit,
default 240 s; read from the environment), and any exception becomes a FAIL line, so these
checks cannot hang or stop the run, and the summary line always prints.
Prints one line per check and exits non-zero when any failed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import make_zoo  # noqa: E402

FAILED = []
# run_gpu.sh kills this script after EXEC_TIMEOUT seconds (default 240): the last checks
# shorten their command timeouts to what is left, so the summary line always prints
T0 = time.time()
BUDGET = float(os.environ.get("EXEC_TIMEOUT") or 240)


def time_left():
    return BUDGET - (time.time() - T0)


def check(ok, what, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}{(': ' + detail) if detail else ''}", flush=True)
    if not ok:
        FAILED.append(what)


def run(cmd, timeout=240):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return r, time.time() - t0


def exported(path):
    return [np.array(o["values"], dtype=np.float64) for o in json.load(open(path))]


def close(got, ref, rtol=5e-3, atol=5e-3):
    worst = 0.0
    for g, r in zip(got, ref):
        r = np.asarray(r, dtype=np.float64).ravel()
        if g.size != r.size:
            return False, f"size {g.size} vs {r.size}"
        excess = np.abs(g - r) - (atol + rtol * np.abs(r))
        worst = max(worst, float(np.max(np.abs(g - r))) if g.size else 0.0)
        if g.size and np.max(excess) > 0:
            return False, f"max |diff| {worst:.3g}"
    return True, f"max |diff| {worst:.3g}"


def run_safe(cmd, timeout=90, env=None):
    """run() that never raises: a timeout or a failure to start is returncode -1. The
    timeout shrinks to what is left of the script's budget (minus a margin)."""
    t0 = time.time()
    timeout = min(timeout, time_left() - 15)
    if timeout < 5:
        return subprocess.CompletedProcess(cmd, -1, "", f"not run: {time_left():.0f} s left of EXEC_TIMEOUT={BUDGET:.0f}"), 0.0
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        r = subprocess.CompletedProcess(cmd, -1, (e.stdout or b"").decode(errors="replace") if isinstance(
            e.stdout, bytes) else (e.stdout or ""), f"timed out after {timeout} s")
    except OSError as e:
        r = subprocess.CompletedProcess(cmd, -1, "", str(e))
    return r, time.time() - t0


def gpu_compute(out):
    m = re.search(r"GPU Compute Time: min = [0-9.e+-]+ ms, max = [0-9.e+-]+ ms, mean = ([0-9.e+-]+) ms", out)
    return m.group(1) if m else "?"


def fp16_engine_checks(K, out_dir, name):
    """FP16 GPU engines: channels-last by default (kiln.nhwc nodes saved), load and run."""
    model = make_zoo.ensure(out_dir, name)
    feeds = make_zoo.make_inputs(name, 1)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    loads, shapes = [], []
    for n, v in feeds.items():
        p = os.path.join(out_dir, f"{name}_{n}.npy")
        np.save(p, v)
        loads.append(f"{n}:{p}")
        shapes.append(f"{n}:{'x'.join(map(str, v.shape))}")
    io = [f"--shapes={','.join(shapes)}", f"--loadInputs={','.join(loads)}"]
    fast = ["--iterations=20", "--duration=0", "--warmUp=50"]
    eng = os.path.join(out_dir, f"{name}_fp16.engine")
    o1, o2 = os.path.join(out_dir, f"{name}_fp16_built.json"), os.path.join(out_dir, f"{name}_fp16_loaded.json")
    r, dt = run_safe([K, "exec", f"--onnx={model}", "--backend=cuda", "--fp16", f"--saveEngine={eng}",
                      f"--exportOutput={o1}"] + io + fast)
    check(r.returncode == 0, f"{name}: exec --backend=cuda --fp16 builds and saves",
          f"GPU compute mean {gpu_compute(r.stdout)} ms" if r.returncode == 0 else (r.stdout + r.stderr)[-1200:])
    if r.returncode != 0:
        return
    with open(eng, "rb") as f:
        nhwc = f.read().count(b"kiln.nhwc")
    check(nhwc > 0, f"{name}: FP16 engine is channels-last (kiln.nhwc nodes saved)", f"{nhwc} mentions")
    ok, d = close(exported(o1), ref, 1e-2, 1e-2)
    check(ok, f"{name}: FP16 built engine's outputs vs ONNX Runtime", d)
    r, _ = run_safe([K, "inspect", "--json", eng])
    try:
        nodes = json.loads(r.stdout).get("nodes") or [] if r.returncode == 0 else []
    except ValueError:
        nodes = []
    convs = [n for n in nodes if n["op"] == "Conv"]
    tac = {}
    for n in convs:
        k = n["tactic"].split("#")[0]
        tac[k] = tac.get(k, 0) + 1
    check(bool(convs) and all(n["precision"] == "half" for n in convs) and
          any(n["layout"] == "nhwc" for n in convs),
          f"{name}: inspect shows half channels-last convolutions and their tactics",
          f"{len(convs)} Conv: layouts {sorted(set(n['layout'] for n in convs))}, tactics by kind {tac}"
          if convs else (r.stdout + r.stderr)[-600:])
    r, _ = run_safe([K, "exec", f"--loadEngine={eng}", f"--exportOutput={o2}"] + io + fast)
    check(r.returncode == 0, f"{name}: --loadEngine of the channels-last FP16 engine runs",
          f"GPU compute mean {gpu_compute(r.stdout)} ms" if r.returncode == 0 else (r.stdout + r.stderr)[-1200:])
    if r.returncode == 0:
        ok, d = close(exported(o2), ref, 1e-2, 1e-2)
        check(ok, f"{name}: FP16 loaded engine's outputs vs ONNX Runtime", d)
        nhwc_ms = gpu_compute(r.stdout)
        env = dict(os.environ, KILN_NHWC="0")
        e2 = os.path.join(out_dir, f"{name}_fp16_nchw.engine")
        r2, _ = run_safe([K, "exec", f"--onnx={model}", "--backend=cuda", "--fp16", f"--saveEngine={e2}"] + io + fast,
                         env=env)
        r3, _ = run_safe([K, "exec", f"--loadEngine={e2}"] + io + fast) if r2.returncode == 0 else (r2, 0)
        print(f"info {name}: loaded FP16 engine GPU compute mean: channels-last {nhwc_ms} ms, "
              f"NCHW (KILN_NHWC=0) {gpu_compute(r3.stdout) if r3.returncode == 0 else 'failed'} ms", flush=True)
    if name == "resnet50":
        tc = os.path.join(out_dir, "resnet50_fp16.timing")
        if os.path.exists(tc):
            os.remove(tc)
        for label in ("fresh timing cache", "warm timing cache"):
            r, dt = run_safe([K, "exec", f"--onnx={model}", "--backend=cuda", "--fp16", f"--saveEngine={eng}",
                              f"--timingCacheFile={tc}", "--skipInference"] + io[:1])
            m = re.search(r"Engine built in ([0-9.e+-]+) sec", r.stdout)
            t = re.search(r"Tactics: (\d+) timed, (\d+) from the timing cache", r.stdout)
            ok = r.returncode == 0 and t is not None and (label.startswith("fresh") or t.group(1) == "0")
            check(ok, f"resnet50: FP16 build with {label} (target warm < 2 s)",
                  f"Engine built in {m.group(1) if m else '?'} s (process {dt:.2f} s); "
                  f"{t.group(0) if t else 'no Tactics line'}" + ("" if r.returncode == 0 else r.stdout[-800:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default="/tmp/zoo-exec")
    ap.add_argument("--models", default="bert,resnet50,mobilenetv2,embedding")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    K = a.kiln
    for name in a.models.split(","):
        model = make_zoo.ensure(a.out, name)
        feeds = make_zoo.make_inputs(name, 1)
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)
        loads, shapes = [], []
        for n, v in feeds.items():
            p = os.path.join(a.out, f"{name}_{n}.npy")
            np.save(p, v)
            loads.append(f"{n}:{p}")
            shapes.append(f"{n}:{'x'.join(map(str, v.shape))}")
        io = [f"--shapes={','.join(shapes)}", f"--loadInputs={','.join(loads)}"]

        # kiln run: graph replayed and checked
        r, dt = run([K, "run", model, "--backend", "cuda", "--iterations", "20", "--shapes", ",".join(shapes)])
        out = r.stdout + r.stderr
        check(r.returncode == 0 and "cuda graph: replayed" in out and "cuda graph check: replay" in out,
              f"{name}: kiln run --backend cuda replays its CUDA graph",
              "; ".join(l for l in out.splitlines() if l.startswith(("cuda graph", "device memory", "latency")))
              or out[-600:])

        eng = os.path.join(a.out, f"{name}.engine")
        o1, o2 = os.path.join(a.out, f"{name}_built.json"), os.path.join(a.out, f"{name}_loaded.json")
        fast = ["--iterations=50", "--duration=0", "--warmUp=100"]
        jr = os.path.join(a.out, f"{name}_report.json")
        r, dt = run([K, "exec", f"--onnx={model}", "--backend=cuda", f"--saveEngine={eng}", f"--exportOutput={o1}",
                     f"--json={jr}"] + io + fast)
        out = r.stdout + r.stderr
        lines = [l for l in out.splitlines() if re.search(r"Engine built|H2D Latency|GPU Compute Time:|D2H Latency|"
                                                          r"Device memory|CUDA graph|Throughput", l)]
        check(r.returncode == 0 and "H2D Latency: min" in out and "D2H Latency: min" in out and
              "Device memory:" in out, f"{name}: exec --backend=cuda builds, saves and reports",
              " | ".join(l.split("] ", 2)[-1] for l in lines) if r.returncode == 0 else out[-1500:])
        if r.returncode == 0:
            ok, d = close(exported(o1), ref)
            check(ok, f"{name}: built engine's outputs vs ONNX Runtime", d)
            rep = json.load(open(jr))
            run0 = rep["runs"][0]
            check(rep["backend"] == "cuda" and "gpu" in rep and (run0.get("h2d_ms") or {}).get("mean", 0) > 0,
                  f"{name}: --json has the GPU and the H2D/D2H statistics",
                  f"h2d mean {(run0.get('h2d_ms') or {}).get('mean')} ms, d2h mean "
                  f"{(run0.get('d2h_ms') or {}).get('mean')} ms")
        r, dt = run([K, "exec", f"--loadEngine={eng}", f"--exportOutput={o2}"] + io + fast)
        check(r.returncode == 0, f"{name}: --loadEngine runs", "" if r.returncode == 0 else (r.stdout + r.stderr)[-800:])
        if r.returncode == 0:
            ok, d = close(exported(o2), ref)
            check(ok, f"{name}: loaded engine's outputs vs ONNX Runtime", d)
        r, _ = run([K, "inspect", eng])
        check(r.returncode == 0 and "gpu         " in r.stdout and "compatible" in r.stdout,
              f"{name}: inspect shows the GPU", next((l for l in r.stdout.splitlines() if l.startswith("gpu")), ""))
        r, _ = run([K, "exec", f"--loadEngine={eng}", "--noDataTransfers"] + io + fast)
        out = r.stdout + r.stderr
        gc = next((l.split("] ", 2)[-1] for l in out.splitlines() if "GPU Compute Time:" in l), "")
        check(r.returncode == 0 and "H2D Latency: not measured" in out, f"{name}: --noDataTransfers", gc)
        w1 = re.search(r"Device memory: weights ([0-9.]+) MiB", out)
        r, _ = run([K, "exec", f"--loadEngine={eng}", "--infStreams=2"] + io + fast)
        out = r.stdout + r.stderr
        tp = next((l.split("] ", 2)[-1] for l in out.splitlines() if "Throughput" in l), "")
        check(r.returncode == 0 and "Throughput" in out, f"{name}: --infStreams=2", tp)
        # the two contexts share one device copy of the weights (runtime/weight_share.h)
        w2 = re.search(r"Device memory: weights ([0-9.]+) MiB", out)
        mem = next((l.split("] ", 2)[-1] for l in out.splitlines() if "Device memory" in l), "")
        check(bool(w1 and w2) and abs(float(w1.group(1)) - float(w2.group(1))) < 0.01,
              f"{name}: --infStreams=2 holds one copy of the weights",
              f"1 stream {w1.group(1) if w1 else '?'} MiB; {mem}")

        if name == "resnet50":
            tc = os.path.join(a.out, "resnet50.timing")
            if os.path.exists(tc):
                os.remove(tc)
            for label in ("fresh timing cache", "warm timing cache"):
                r, dt = run([K, "exec", f"--onnx={model}", "--backend=cuda", f"--saveEngine={eng}",
                             f"--timingCacheFile={tc}", "--skipInference"] + io[:1])
                m = re.search(r"Engine built in ([0-9.e+-]+) sec", r.stdout)
                t = re.search(r"Tactics: (\d+) timed, (\d+) from the timing cache", r.stdout)
                ok = r.returncode == 0 and t is not None and (label.startswith("fresh") or t.group(1) == "0")
                check(ok, f"resnet50: build with {label}",
                      f"Engine built in {m.group(1) if m else '?'} s (process {dt:.2f} s); "
                      f"{t.group(0) if t else 'no Tactics line'}" + ("" if r.returncode == 0 else r.stdout[-800:]))
    if not os.environ.get("SKIP_FP16_ENGINE"):
        for name in ("resnet50", "mobilenetv2"):
            if name not in a.models.split(","):
                continue
            if time_left() < 45:
                check(False, f"{name}: FP16 channels-last engine checks",
                      f"not run: {time_left():.0f} s left of EXEC_TIMEOUT={BUDGET:.0f} (raise EXEC_TIMEOUT)")
                continue
            try:
                fp16_engine_checks(K, a.out, name)
            except Exception as e:  # never let these checks stop the report
                check(False, f"{name}: FP16 channels-last engine checks", f"{type(e).__name__}: {e}")
    print(f"{len(FAILED)} failed" + (": " + ", ".join(FAILED) if FAILED else ""))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
