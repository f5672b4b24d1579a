#!/usr/bin/env python3
"""zoo_cases.py - checks kiln's CUDA backend on the zoo models against ONNX Runtime (CPU).

For each model of tools/make_zoo.py it writes an ONNX backend-test style case
(OUT/<model>_b<batch>/model.onnx + test_data_set_0/input_K.pb, output_0.pb with ONNX
Runtime's outputs) and runs `kiln verify --backend cuda` on it, then again with
--noTF32, with --fp16 (verify's FP16 tolerances) and, for the conv models, --fp16 with
KILN_NHWC=1 (channels-last convolutions); --variants picks. One line per run. Needs a GPU machine with onnxruntime (tests/gpu/run_gpu.sh).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import make_zoo  # noqa: E402


def make_case(out, name, batch):
    model_path = make_zoo.ensure(out, name)
    case = os.path.join(out, f"case_{name}_b{batch}")
    ds = os.path.join(case, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    shutil.copy(model_path, os.path.join(case, "model.onnx"))
    feeds = make_zoo.make_inputs(name, batch)
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    outs = sess.run(None, {n: feeds[n] for n in names})
    for k, n in enumerate(names):
        t = numpy_helper.from_array(feeds[n], n)
        open(os.path.join(ds, f"input_{k}.pb"), "wb").write(t.SerializeToString())
    for k, o in enumerate(sess.get_outputs()):
        t = numpy_helper.from_array(np.asarray(outs[k]), o.name)
        open(os.path.join(ds, f"output_{k}.pb"), "wb").write(t.SerializeToString())
    return case


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/zoo")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", default="resnet50,mobilenetv2,bert,embedding")
    ap.add_argument("--variants", default="tf32,fp32,fp16,fp16nhwc",
                    help="comma list of tf32, fp32 (--noTF32), fp16, fp16nhwc (--fp16 with KILN_NHWC=1: channels-last "
                         "convolutions, conv models only)")
    a = ap.parse_args()
    worst = 0
    for name in a.models.split(","):
        for batch in (1, 2):
            case = make_case(a.out, name, batch)
            flags = {"tf32": [], "fp32": ["--noTF32"], "fp16": ["--fp16"], "fp16nhwc": ["--fp16"]}
            for v in a.variants.split(","):
                if v == "fp16nhwc" and name not in ("resnet50", "mobilenetv2"):
                    continue
                extra = flags[v]
                env = dict(os.environ, KILN_NHWC="1") if v == "fp16nhwc" else None
                cmd = [a.kiln, "verify", case, "--backend", "cuda", "--no-fork"] + extra
                r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if env:
                    extra = extra + ["KILN_NHWC=1"]
                last = (r.stdout.strip().splitlines() or [""])[-1]
                print(f"{name} b{batch} {' '.join(extra) or '(TF32)'}: rc={r.returncode} {last}")
                fb = [l for l in r.stderr.splitlines() if "of the main graph run on the" in l]
                if fb:  # per-node CPU fallback (FP16: nodes with no half kernel run float32 on the CPU)
                    print("  ", fb[0][:300])
                if r.returncode:
                    print(r.stdout[-2000:], r.stderr[-2000:])
                    worst = max(worst, r.returncode)
    sys.exit(worst)


if __name__ == "__main__":
    main()
