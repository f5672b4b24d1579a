#!/usr/bin/env python3
"""attention_cases.py - checks the CUDA backend's Attention kernels on shapes the ONNX node
tests do not reach: the tensor-core kernel (cuda_attention_mma.cu: float16, head sizes
32/64/128) with query and key lengths that are not multiples of its tiles, cross
attention (S != L), 3-D and 4-D layouts, grouped KV heads, causal masking, an explicit
scale, and additive float masks broadcast per key ([B,1,1,L], staged in shared memory)
or per query row ([B,1,S,L], [S,L]) with -10000 and -inf entries.

Each case is written in the ONNX backend-test layout (OUT/<case>/model.onnx +
test_data_set_0/input_K.pb, output_0.pb) with a float64 NumPy reference of ONNX
Attention (opset 23), then `kiln verify --backend cuda --gpu-only --no-fork` runs it
with --fp16 (verify's FP16 tolerances; the tensor-core kernel) and without (TF32: the
CUDA-core kernel). Needs a GPU machine; usage:
    python3 tests/gpu/attention_cases.py --kiln build-gpu/kiln [--out /tmp/attcases]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def reference(q, k, v, mask, hq, hkv, scale, causal):
    """ONNX Attention (no past/present), float64. 3-D inputs use hq/hkv heads."""
    three_d = q.ndim == 3
    if three_d:
        b, s, _ = q.shape
        q = q.reshape(b, s, hq, -1).transpose(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], hkv, -1).transpose(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], hkv, -1).transpose(0, 2, 1, 3)
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    d = q.shape[-1]
    sc = scale if scale is not None else 1.0 / np.sqrt(d)
    scores = np.einsum("bhsd,bhld->bhsl", q, k) * sc
    if mask is not None:
        scores = scores + mask.astype(np.float64)
    if causal:
        s, l = scores.shape[-2:]
        tri = np.triu(np.ones((s, l), dtype=bool), k=1)
        scores = np.where(tri, -np.inf, scores)
    m = scores.max(axis=-1, keepdims=True)
    p = np.exp(scores - m)
    p /= p.sum(axis=-1, keepdims=True)
    y = np.einsum("bhsl,bhld->bhsd", p, v)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y.astype(np.float32)


def make_case(out, name, q, k, v, mask, hq=None, hkv=None, scale=None, causal=False):
    case = os.path.join(out, name)
    ds = os.path.join(case, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    feeds = [("q", q), ("k", k), ("v", v)] + ([("mask", mask)] if mask is not None else [])
    attrs = {}
    if q.ndim == 3:
        attrs["q_num_heads"] = hq
        attrs["kv_num_heads"] = hkv
    if scale is not None:
        attrs["scale"] = scale
    if causal:
        attrs["is_causal"] = 1
    y = reference(q, k, v, mask, hq, hkv, scale, causal)
    node = helper.make_node("Attention", [n for n, _ in feeds], ["y"], **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(x.shape)) for n, x in feeds]
    graph = helper.make_graph([node], name, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    onnx.save(model, os.path.join(case, "model.onnx"))
    for i, (n, x) in enumerate(feeds):
        open(os.path.join(ds, f"input_{i}.pb"), "wb").write(numpy_helper.from_array(x, n).SerializeToString())
    open(os.path.join(ds, "output_0.pb"), "wb").write(numpy_helper.from_array(y, "y").SerializeToString())
    return case


def key_mask(rng, b, l):
    m = np.zeros((b, 1, 1, l), dtype=np.float32)
    for i in range(b):
        m[i, 0, 0, l - 1 - i * 5:] = -10000.0  # padding at the end, longer per batch
    m[0, 0, 0, 3] = -np.inf
    return m


def cases(out):
    rng = np.random.default_rng(7)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    yield make_case(out, "att3d_d64_cross_keymask", r(2, 100, 256), r(2, 77, 256), r(2, 77, 256),
                    key_mask(rng, 2, 77), hq=4, hkv=4)
    yield make_case(out, "att3d_d64_scale_keymask", r(2, 128, 256), r(2, 128, 256), r(2, 128, 256),
                    key_mask(rng, 2, 128), hq=4, hkv=4, scale=0.1)
    yield make_case(out, "att4d_d64_causal", r(1, 2, 130, 64), r(1, 2, 130, 64), r(1, 2, 130, 64), None, causal=True)
    m2 = (rng.random((40, 40)) < 0.2).astype(np.float32) * -10000.0
    yield make_case(out, "att3d_d32_rowmask", r(3, 40, 64), r(3, 40, 64), r(3, 40, 64), m2, hq=2, hkv=2)
    m4 = (rng.random((2, 1, 70, 70)) < 0.3).astype(np.float32) * -10000.0
    yield make_case(out, "att3d_d128_rowmask", r(2, 70, 256), r(2, 70, 256), r(2, 70, 256), m4, hq=2, hkv=2)
    yield make_case(out, "att3d_d64_gqa", r(1, 64, 256), r(1, 64, 128), r(1, 64, 128), None, hq=4, hkv=2)
    yield make_case(out, "att3d_d48_fallback", r(2, 33, 96), r(2, 33, 96), r(2, 33, 96), key_mask(rng, 2, 33),
                    hq=2, hkv=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default="/tmp/attcases")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for case in cases(a.out):
        for extra in (["--fp16"], []):
            cmd = [a.kiln, "verify", case, "--backend", "cuda", "--gpu-only", "--no-fork"] + extra
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            ok = p.returncode == 0
            bad += not ok
            last = (p.stdout.strip().splitlines() or [""])[-1]
            print(f"{'PASS' if ok else 'FAIL'} {os.path.basename(case)} {' '.join(extra) or 'tf32'}: {last}")
            if not ok:
                print(p.stdout[-2000:], p.stderr[-2000:])
    print(f"attention cases: {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
