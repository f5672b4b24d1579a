#!/usr/bin/env python3
"""io_formats_gpu.py - --inputIOFormats=fp16:chw on the GPU (needs an NVIDIA GPU).

ResNet-50 (tools/make_zoo.py) FP16 engines at batch B built twice, with float32 inputs and
with `--inputIOFormats=fp16:chw`, fed the same half-representable image: both outputs
must match ONNX Runtime (FP16 tolerance) and each other; the half-input engine must have
no Cast left in front of its stem (`kiln inspect --json`: the first layer reads the graph
input; `nodes` is the engine's graph after the device passes). Prints H2D / GPU compute / latency of both (reported, not asserted) and exits
non-zero when a check failed.

Usage: io_formats_gpu.py --kiln build-gpu/kiln --zoo /tmp/zoo [--batch 8]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

FAILED = []


def check(ok, what, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}{(': ' + detail) if detail else ''}", flush=True)
    if not ok:
        FAILED.append(what)


def stat(text, label):
    m = re.search(label + r": min = [0-9.]+ ms, max = [0-9.]+ ms, mean = ([0-9.]+) ms, median = ([0-9.]+) ms", text)
    return float(m.group(2)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    model = os.path.join(a.zoo, "resnet50.onnx")
    b = a.batch
    tmp = tempfile.mkdtemp()
    x16 = np.random.default_rng(1).standard_normal((b, 3, 224, 224)).astype(np.float16)
    np.save(os.path.join(tmp, "x16.npy"), x16)
    np.save(os.path.join(tmp, "x32.npy"), x16.astype(np.float32))
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"input": x16.astype(np.float32)})[0]
    outs = {}
    for tag, extra, xf in (("fp32-in", [], "x32.npy"), ("fp16-in", ["--inputIOFormats=fp16:chw"], "x16.npy")):
        eng, out = os.path.join(tmp, tag + ".engine"), os.path.join(tmp, tag + ".json")
        cmd = [a.kiln, "exec", f"--onnx={model}", "--backend=cuda", "--fp16", f"--shapes=input:{b}x3x224x224",
               f"--saveEngine={eng}", f"--loadInputs=input:{os.path.join(tmp, xf)}", f"--exportOutput={out}",
               "--iterations=300", "--warmUp=300", "--duration=0"] + extra
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"{tag} engine builds and runs", r.stderr[-400:] if r.returncode else "")
        if r.returncode:
            continue
        j = json.loads(open(out).read())[0]
        got = np.array(j["values"], np.float32).reshape(ref.shape)
        err = float(np.max(np.abs(got - ref)))
        check(err <= 1e-2 * max(1.0, float(np.max(np.abs(ref)))), f"{tag} output vs ONNX Runtime", f"max |diff| {err:.5f}")
        outs[tag] = got
        print(f"     {tag} batch {b}: latency median {stat(r.stdout, 'Latency'):.4f} ms, H2D {stat(r.stdout, 'H2D Latency'):.4f}"
              f" ms, GPU compute {stat(r.stdout, 'GPU Compute Time'):.4f} ms", flush=True)
        if tag == "fp16-in":
            ins = subprocess.run([a.kiln, "inspect", "--json", eng], capture_output=True, text=True, timeout=60)
            try:
                js = json.loads(ins.stdout)
                first = js["nodes"][0]  # the engine's graph after the device passes ("layers": the plan)
                check(first.get("op") != "Cast", "fp16-in: no Cast before the stem", f"first layer {first.get('name')} ({first.get('op')})")
                check("float16" in json.dumps(js.get("inputs", js.get("io", ""))), "fp16-in: engine input is float16")
            except (ValueError, KeyError, IndexError) as e:
                check(False, "fp16-in: kiln inspect --json", str(e))
    if len(outs) == 2:
        d = float(np.max(np.abs(outs["fp32-in"] - outs["fp16-in"])))
        check(d <= 1e-2, "fp16-in equals fp32-in on the same image", f"max |diff| {d:.5f}")
    print(f"{len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
