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


def run_side(side, args, profile):
    binary, engine = side.split(":", 1)
    cmd = [binary, "exec", f"--loadEngine={engine}", f"--shapes={args.shapes}", f"--threads={args.threads}",
           f"--iterations={args.iters}", f"--warmUp={args.warmup}", "--duration=0", f"--exportProfile={profile}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"\] Latency:.*?median = ([\d.]+)", r.stdout)
    if r.returncode != 0 or not m:
        sys.exit(f"{side} failed (rc {r.returncode}): {(r.stderr or r.stdout)[-500:]}")
    return float(m.group(1)), json.load(open(profile))[1:]


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
    args = p.parse_args()
    names = conv_classes(args.model) if args.model and args.by == "class" else {}
    sides = (args.a, args.b)
    lat = ([], [])  # per side (index 0 = A), one median per round
    per = ([], [])  # per side, one Counter of layer-class times per round
    with tempfile.TemporaryDirectory() as tmp:
        profile = os.path.join(tmp, "profile.json")
        for r in range(args.rounds):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                ms, layers = run_side(sides[i], args, profile)
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
