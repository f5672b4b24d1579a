#!/usr/bin/env python3
"""bench_engine.py - kiln engines end to end, in one run: build time, load time, and
`kiln exec` speed against ONNX Runtime on the same models, shapes, inputs and threads.

For each model (ResNet-50 at 224x224, BERT-base at seq 128; tools/make_zoo.py, cached
under build/zoo):
  build   `kiln exec --onnx=M --min/opt/maxShapes (batch 1..8) --saveEngine=E
          --skipInference --json=J`: J's build.seconds (the builder: passes, kernel choice
          and tactic timing) and the wall time of the whole command (parse the ONNX file,
          build, serialize, write the file); median of --build-reps runs.
  load    `kiln exec --loadEngine=E --skipInference --json=J`: J's engine.load_ms, the
          in-process time of engine_read_file (map the file; header, section table and
          META/LAYERS/MEMPLAN/GRAPH checksums; compatibility; graph decode with every
          offset, size and wire checked). The weights are not read: they stay in the
          mapping, and their crc32 runs on a background thread (engine.weights_crc_ms,
          reported apart; contexts wait for it). Target: load under 20 ms. Median of
          --load-reps runs, wall time and the loading thread's CPU time (load_cpu_ms: on
          a loaded machine the wall time is mostly waiting for a core).
  exec    batch 1 latency (median ms) and batch 8 throughput (items/s) at 1 and 2
          threads: `kiln exec --loadEngine=E --shapes=... --threads=T --loadInputs=...`
          (J's runs[0].latency_ms.median) against ORT with intra_op_num_threads = T,
          inter_op 1, sequential execution, all graph optimisations (median of the same
          number of runs). Both get the same inputs (make_zoo.make_inputs, via .npy).
          Ratios are ORT time / kiln time: >= 1.0 means kiln is ahead.

Usage: python3 bench/bench_engine.py [--models resnet50,bert] [--threads 1,2]
                                     [--reps 10] [--build-reps 3] [--load-reps 9] [--no-exec]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_zoo  # noqa: E402

KILN = Path(os.environ.get("KILN_BIN", ROOT / "build" / "kiln"))
SEQ = 128


def shape_spec(model, batch):
    parts = []
    for name, spec in make_zoo.INPUTS[model].items():
        dims = [batch if d == "batch" else SEQ if d == "seq" else d for d in spec[1]]
        parts.append(f"{name}:" + "x".join(str(d) for d in dims))
    return ",".join(parts)


def kiln_exec(args, json_path):
    t0 = time.perf_counter()
    r = subprocess.run([str(KILN), "exec", *args, f"--json={json_path}"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"kiln exec {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    with open(json_path) as f:
        return json.load(f), wall


def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_median_ms(sess, feeds, reps):
    sess.run(None, feeds)  # warm-up, as kiln exec's warm-up query
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def kiln_median_ms(engine, model, batch, threads, reps, tmp):
    feeds = make_zoo.make_inputs(model, batch, SEQ)
    specs = []
    for name, arr in feeds.items():
        p = os.path.join(tmp, f"{model}_{batch}_{name}.npy")
        np.save(p, arr)
        specs.append(f"{name}:{p}")
    js, _ = kiln_exec([f"--loadEngine={engine}", f"--shapes={shape_spec(model, batch)}", f"--threads={threads}",
                       f"--iterations={reps}", "--duration=0", "--warmUp=0", "--loadInputs=" + ",".join(specs)],
                      os.path.join(tmp, "run.json"))
    return js["runs"][0]["latency_ms"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per exec measurement (batch 8 uses half)")
    ap.add_argument("--build-reps", type=int, default=3)
    ap.add_argument("--load-reps", type=int, default=9)
    ap.add_argument("--zoo", default=str(ROOT / "build" / "zoo"))
    ap.add_argument("--no-exec", action="store_true", help="build and load times only")
    a = ap.parse_args()
    if not KILN.exists():
        sys.exit(f"no kiln binary at {KILN}: build first (scripts/build.sh build) or set KILN_BIN")
    threads = [int(t) for t in a.threads.split(",")]
    print(f"kiln {KILN}; onnxruntime {ort.__version__}; {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.1f} (shared machine: numbers are medians and still noisy)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split(","):
            path = make_zoo.ensure(a.zoo, model)
            engine = os.path.join(a.zoo, f"{model}.engine")
            jpath = os.path.join(tmp, "b.json")
            build_s, build_wall = [], []
            for _ in range(a.build_reps):
                js, wall = kiln_exec([f"--onnx={path}", f"--minShapes={shape_spec(model, 1)}",
                                      f"--optShapes={shape_spec(model, 8)}", f"--maxShapes={shape_spec(model, 8)}",
                                      f"--saveEngine={engine}", "--skipInference"], jpath)
                build_s.append(js["build"]["seconds"])
                build_wall.append(wall)
            load_ms, load_cpu, crc_ms, load_wall = [], [], [], []
            for _ in range(a.load_reps):
                js, wall = kiln_exec([f"--loadEngine={engine}", "--skipInference"], jpath)
                load_ms.append(js["engine"]["load_ms"])
                load_cpu.append(js["engine"]["load_cpu_ms"])
                crc_ms.append(js["engine"]["weights_crc_ms"])
                load_wall.append(wall)
            size_mb = os.path.getsize(engine) / 2**20
            lm = statistics.median(load_ms)
            print(f"\n== {model}: engine {size_mb:.1f} MiB, {js['engine']['layers']} layers")
            print(f"build: builder {statistics.median(build_s) * 1e3:.1f} ms, whole command "
                  f"{statistics.median(build_wall):.2f} s (parse + build + serialize + write)")
            print(f"load:  {lm:.2f} ms in process ({'under' if lm < 20 else 'OVER'} the 20 ms target; "
                  f"min {min(load_ms):.2f}, max {max(load_ms):.2f}; CPU time of the loading thread "
                  f"{statistics.median(load_cpu):.2f} ms); weights crc32 in the background "
                  f"{statistics.median(crc_ms):.1f} ms; whole command {statistics.median(load_wall) * 1e3:.0f} ms")
            for t in ([] if a.no_exec else threads):
                sess = ort_session(path, t)
                o1 = ort_median_ms(sess, make_zoo.make_inputs(model, 1, SEQ), a.reps)
                k1 = kiln_median_ms(engine, model, 1, t, a.reps, tmp)
                r8 = max(3, a.reps // 2)
                o8 = ort_median_ms(sess, make_zoo.make_inputs(model, 8, SEQ), r8)
                k8 = kiln_median_ms(engine, model, 8, t, r8, tmp)
                del sess
                print(f"threads {t}: batch 1 latency ORT {o1:.1f} ms, kiln {k1:.1f} ms, ratio {o1 / k1:.2f}; "
                      f"batch 8 throughput ORT {8e3 / o8:.1f}/s, kiln {8e3 / k8:.1f}/s, ratio {o8 / k8:.2f}")
                rows.append((model, t, o1, k1, o8, k8))
    print("\n| model | threads | b1 ORT ms | b1 kiln ms | b1 ratio | b8 ORT items/s | b8 kiln items/s | b8 ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for model, t, o1, k1, o8, k8 in rows:
        print(f"| {model} | {t} | {o1:.1f} | {k1:.1f} | {o1 / k1:.2f} | {8e3 / o8:.1f} | {8e3 / k8:.1f} | {o8 / k8:.2f} |")


if __name__ == "__main__":
    main()
