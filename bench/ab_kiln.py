#!/usr/bin/env python3
"""A/B of two kiln builds (or two engines) on one model, alternating, per layer class.

On a shared machine whose speed drifts by 10-100% within minutes, a change is judged by
running the two sides in alternation (ABBA: A first in even rounds, B first in odd ones)
and comparing per-round medians and per-layer-class sums of per-node medians (from
`kiln exec --exportProfile`), with the rounds each side won. A layer class the change does
not touch is the control: when it moves too, the difference is the machine.

Each side is BINARY:ENGINE. Build the two engines from one timing cache so both run the
same tactics (an older kiln needs the cache's "kiln" version edited to its own):

    kiln exec --onnx=M.onnx --saveEngine=new.engine --timingCacheFile=tc.json --shapes=input:1x3x224x224
    python3 bench/ab_kiln.py --shapes input:1x3x224x224 --threads 1 --rounds 10 \\
        --model M.onnx old/kiln:old.engine build/kiln:new.engine

--by node lists single nodes instead of classes (Conv classes are named by kernel size and
stride, e.g. conv1x1s1, plus the kernel the engine chose).

--step measures end to end instead, and finer: each side's engine stays loaded in a
build/kiln_step process (next to BINARY) and the two alternate every --iters inferences,
so a drift of the machine's speed lands on both (float inputs from --shapes, random).
--env-a / --env-b set environment variables for one side (an A/B of a runtime switch on
one engine: `--env-b KILN_GEMM_NT=0 build/kiln:e.engine build/kiln:e.engine`).
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def conv_classes(model_path):
    """Node name -> "conv<kh>x<kw>s<stride>" for the model's Conv nodes."""
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name: i for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type == "Conv" and n.input[1] in inits:
            a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            w = inits[n.input[1]]
            out[n.name] = f"conv{w.dims[2]}x{w.dims[3]}s{a.get('strides', [1, 1])[0]}"
    return out


def run_side(side, args, profile, env):
    binary, engine = side.split(":", 1)
    cmd = [binary, "exec", f"--loadEngine={engine}", f"--shapes={args.shapes}", f"--threads={args.threads}",
           f"--iterations={args.iters}", f"--warmUp={args.warmup}", "--duration=0", f"--exportProfile={profile}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    m = re.search(r"\] Latency:.*?median = ([\d.]+)", r.stdout)
    if r.returncode != 0 or not m:
        sys.exit(f"{side} failed (rc {r.returncode}): {(r.stderr or r.stdout)[-500:]}")
    return float(m.group(1)), json.load(open(profile))[1:]


def parse_env(spec):
    """"A=1,B=2" -> {"A": "1", "B": "2"}; None or "" -> {}."""
    out = {}
    for kv in filter(None, (spec or "").split(",")):
        if "=" not in kv:
            sys.exit(f"--env-a/--env-b take NAME=VALUE[,NAME=VALUE...], got {kv!r}")
        k, v = kv.split("=", 1)
        out[k] = v
    return out


def parse_shapes(shapes):
    """kiln exec's --shapes ("input:1x3x224x224,mask:1x128") -> {name: dims}."""
    out = {}
    for part in shapes.split(","):
        name, _, dims = part.rpartition(":")
        try:
            out[name] = [int(d) for d in dims.split("x")]
        except ValueError:
            sys.exit(f"--shapes: cannot read the dimensions of {part!r} (want NAME:D1xD2x...)")
    return out


def run_step(sides, args, envs):
    """--step: both engines loaded in kiln_step, alternating every --iters inferences."""
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_cpu
    rng = np.random.default_rng(0)
    shapes = parse_shapes(args.shapes)
    if args.zoo:  # the zoo model's own inputs (BERT's are int64 token ids and masks)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
        import make_zoo
        feeds = make_zoo.make_inputs(args.zoo, next(iter(shapes.values()))[0])
    else:
        feeds = {n: rng.standard_normal(d).astype(np.float32) for n, d in shapes.items()}
    steps = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for i, side in enumerate(sides):
                binary, engine = side.split(":", 1)
                step_bin = os.path.join(os.path.dirname(binary) or ".", "kiln_step")
                try:
                    steps.append(bench_cpu.KilnStep(engine, args.threads, feeds, tmp, binary=step_bin, env=envs[i]))
                except (RuntimeError, OSError) as e:
                    sys.exit(f"{side} failed: {e}")
            for s in steps:
                s.run(2)
            lat = ([], [])
            for r in range(args.rounds):
                for i in (0, 1) if r % 2 == 0 else (1, 0):
                    time.sleep(0.005)
                    lat[i].append(statistics.median(steps[i].run(args.iters)))
        finally:
            for s in steps:
                s.close()
    a, b = lat
    ratios = sorted(x / y for x, y in zip(a, b))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    print(f"A {args.a}: median {statistics.median(a):.3f} ms   B {args.b}: median {statistics.median(b):.3f} ms   "
          f"B faster in {sum(y < x for x, y in zip(a, b))} of {args.rounds} rounds")
    print(f"speed-up of B (A time / B time) per round: median {statistics.median(ratios):.3f} "
          f"[{q[0]:.3f}-{q[2]:.3f}] ({ratios[0]:.3f}-{ratios[-1]:.3f})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a", help="side A: BINARY:ENGINE")
    p.add_argument("b", help="side B: BINARY:ENGINE")
    p.add_argument("--shapes", required=True, help="kiln exec --shapes, e.g. input:1x3x224x224")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--iters", type=int, default=10, help="inferences per side per round")
    p.add_argument("--warmup", type=int, default=1000, help="ms of warm-up per run")
    p.add_argument("--model", help="the ONNX model, to name Conv classes by kernel and stride")
    p.add_argument("--by", choices=["class", "node"], default="class")
    p.add_argument("--top", type=int, default=14, help="rows to print")
    p.add_argument("--step", action="store_true", help="end to end, engines kept loaded in kiln_step")
    p.add_argument("--zoo", help="with --step: feed this zoo model's inputs (tools/make_zoo.py), e.g. bert; "
                                 "default float32 normal values")
    p.add_argument("--env-a", help="NAME=VALUE[,...] for side A")
    p.add_argument("--env-b", help="NAME=VALUE[,...] for side B")
    args = p.parse_args()
    envs = (parse_env(args.env_a), parse_env(args.env_b))
    if args.step:
        return run_step((args.a, args.b), args, envs)
    names = conv_classes(args.model) if args.model and args.by == "class" else {}
    sides = (args.a, args.b)
    lat = ([], [])  # per side (index 0 = A), one median per round
    per = ([], [])  # per side, one Counter of layer-class times per round
    with tempfile.TemporaryDirectory() as tmp:
        profile = os.path.join(tmp, "profile.json")
        for r in range(args.rounds):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                ms, layers = run_side(sides[i], args, profile, envs[i])
                lat[i].append(ms)
                c = collections.Counter()
                for x in layers:
                    key = x["name"] if args.by == "node" else names.get(x["name"], x["op"]) + "/" + x.get("tactic", "")
                    c[key] += x["medianMs"]
                per[i].append(c)
    a, b = lat
    print(f"A {args.a}: median {statistics.median(a):.3f} ms   B {args.b}: median {statistics.median(b):.3f} ms   "
          f"B faster in {sum(y < x for x, y in zip(a, b))} of {args.rounds} rounds")
    print("A per round:", " ".join(f"{x:.3f}" for x in a))
    print("B per round:", " ".join(f"{x:.3f}" for x in b))
    keys = sorted(set().union(*per[0]), key=lambda k: -statistics.median(c[k] for c in per[0]))
    print(f"{'layer ' + args.by:<44} {'A ms':>8} {'B ms':>8} {'B-A':>7}  B faster")
    for k in keys[:args.top]:
        ka = statistics.median(c[k] for c in per[0])
        kb = statistics.median(c[k] for c in per[1])
        wins = sum(y[k] < x[k] for x, y in zip(per[0], per[1]))
        print(f"{k:<44} {ka:8.3f} {kb:8.3f} {100 * (kb - ka) / ka if ka else 0:+6.1f}%  {wins} of {args.rounds}")

if __name__ == "__main__":
    main()
