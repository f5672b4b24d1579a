#!/usr/bin/env python3
"""bench_ab.py - A/B of two kiln binaries against ONNX Runtime on a zoo model, built for a
shared, loaded machine.

bench_cpu.py gives one median per engine; when other jobs share the cores those medians
swing by 30% between runs and a before/after comparison drowns in the noise. This script
interleaves the engines round by round, so all of them see the same load, and reports two
figures per configuration:
  - wall: the minimum single-inference latency over all rounds (`kiln run`'s "min",
    ORT timed in-process), i.e. the run that was disturbed least;
  - wall median: the median over rounds of each round's median latency (what
    bench_cpu.py reports, with the load spread evenly over the engines);
  - cpu (1 thread only): CPU time per inference (user + sys). For kiln: the CPU time of
    `kiln run --iterations N+1` minus that of `--iterations 1`, divided by N, which cancels
    loading and the first run; for ORT, getrusage around N runs in this process. CPU time
    does not count the time a process waited for a core, so it is the steadiest 1-thread
    figure under load (cache sharing still inflates it somewhat). At 2 threads CPU time
    is not comparable (ORT's workers spin, kiln's sleep), so only wall is reported.
The load average is printed with the results.

Usage: python3 bench/bench_ab.py --a OLD_KILN --b NEW_KILN [--model bert] [--batches 1,8]
                                 [--threads 1,2] [--rounds 3] [--iters 3]
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_zoo  # noqa: E402


def shapes_arg(model, batch):
    return ",".join(f"{n}:{'x'.join(str(batch if d == 'batch' else 128 if d == 'seq' else d) for d in spec[1])}"
                    for n, spec in make_zoo.INPUTS[model].items())


# kiln never uses OpenBLAS threads when its own AVX2 GEMM runs (cpu_threadpool.c), but
# OpenBLAS starts an idle server thread at load that spins with sched_yield for a while:
# it added a variable ~0.1-0.3 s of CPU to each short `kiln run`, which made the
# difference-based CPU figure below swing (even negative). Keep it from starting.
KILN_ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def kiln_wall_min(exe, path, model, batch, threads, iters):
    cmd = [exe, "run", str(path), "--inputs-random", "--iterations", str(iters), "--warmUp", "1",
           "--threads", str(threads), "--shapes", shapes_arg(model, batch)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=KILN_ENV).stdout
    m = re.search(r"min = ([\d.]+) ms", out)
    md = re.search(r"median = ([\d.]+) ms", out)
    return (float(m.group(1)) if m else float("nan")), (float(md.group(1)) if md else float("nan"))


def kiln_cpu_per_run(exe, path, model, batch, iters):
    def cpu_of(n):
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([exe, "run", str(path), "--inputs-random", "--iterations", str(n), "--warmUp", "0",
                        "--threads", "1", "--shapes", shapes_arg(model, batch)], capture_output=True, env=KILN_ENV)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    return (cpu_of(iters + 1) - cpu_of(1)) / iters * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="kiln binary A (e.g. before)")
    ap.add_argument("--b", required=True, help="kiln binary B (e.g. after)")
    ap.add_argument("--model", default="bert")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    path = Path(make_zoo.ensure(str(ROOT / "build" / "zoo"), a.model))
    batches = [int(x) for x in a.batches.split(",")]
    threads = [int(x) for x in a.threads.split(",")]
    engines = {"A": a.a, "B": a.b}
    wall, cpu, sess, med = {}, {}, {}, {}
    for _ in range(a.rounds):
        for b in batches:
            feeds = make_zoo.make_inputs(a.model, b)
            for t in threads:
                if (b, t) not in sess:
                    so = ort.SessionOptions()
                    so.intra_op_num_threads = t
                    so.inter_op_num_threads = 1
                    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                    sess[(b, t)] = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
                    sess[(b, t)].run(None, feeds)
                s = sess[(b, t)]
                ts = []
                r0 = resource.getrusage(resource.RUSAGE_SELF)
                for _ in range(a.iters):
                    t0 = time.perf_counter()
                    s.run(None, feeds)
                    ts.append((time.perf_counter() - t0) * 1e3)
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                wall.setdefault(("ORT", b, t), []).append(min(ts))
                med.setdefault(("ORT", b, t), []).append(statistics.median(ts))
                if t == 1:
                    c = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                    cpu.setdefault(("ORT", b, t), []).append(c / a.iters * 1e3)
                for name, exe in engines.items():
                    w_min, w_med = kiln_wall_min(exe, path, a.model, b, t, a.iters)
                    wall.setdefault((name, b, t), []).append(w_min)
                    med.setdefault((name, b, t), []).append(w_med)
                    if t == 1:
                        cpu.setdefault((name, b, t), []).append(kiln_cpu_per_run(exe, path, a.model, b, a.iters))
    print(f"# {a.model}; A = {a.a}; B = {a.b}; {a.rounds} rounds x {a.iters} inferences; "
          f"load average after: {open('/proc/loadavg').read().split()[:3]}")
    print("| batch | threads | figure | ORT ms | A ms | ORT/A | B ms | ORT/B |")
    print("|---|---|---|---|---|---|---|---|")
    for b in batches:
        for t in threads:
            for fig, d in (("wall min", wall), ("wall median", med), ("cpu min", cpu)):
                if ("ORT", b, t) not in d:
                    continue
                agg = statistics.median if fig == "wall median" else min
                o, x, y = (agg(d[(k, b, t)]) for k in ("ORT", "A", "B"))
                print(f"| {b} | {t} | {fig} | {o:.1f} | {x:.1f} | {o / x:.2f} | {y:.1f} | {o / y:.2f} |")


if __name__ == "__main__":
    main()
