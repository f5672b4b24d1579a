#!/usr/bin/env python3
"""bench_cpu.py - kiln's CPU runtime against ONNX Runtime on the zoo models, in one run.

For each model (ResNet-50, BERT-base seq 128, MobileNetV2) and thread count (1, 2):
  - latency at batch 1 (median ms) and throughput at batch 8 (items/s), ORT and kiln, with
    the ratio ORT time / kiln time (>= 1.0 means kiln is ahead);
  - the per-layer profile of the GEMM-class layers (Conv, MatMul, Gemm): kiln's kernels
    timed one by one by bench/bench_layers.c, next to ORT's per-node profile, with each
    layer's GFLOP/s and its distance from the machine's measured GEMM peak.
ORT runs with intra_op_num_threads = threads, inter_op 1, sequential execution and all
graph optimisations. kiln's engine is built once per configuration by `kiln exec` (tactic
timing included). ORT and kiln alternate in --rounds rounds per configuration, the reps
spread over them, and each side's figure is the median of its round medians: on a shared
VM the CPU's speed moves 10-50% within seconds, and alternating gives both engines the same
share of slow and fast phases. Two timing modes (--mode):
  interleave (default): the engine stays loaded in build/kiln_step (bench/kiln_step.c) and
    the two sides take turns every reps/rounds inferences; kiln's turn starts only once
    ORT's intra-op workers have stopped spinning (they spin ~50 ms after each run), plus
    --gap-ms of idle time before each turn;
  process: one `kiln exec --loadEngine` process per round (round 0 builds and is dropped),
    the method before session 13.
The last columns count the rounds in which kiln's median beat ORT's of the same round, and
give the per-round ratios as median [quartiles] (lowest-highest): the paired figure, each
round's two medians taken seconds apart, is steadier than the ratio of the two medians.

Usage: python3 bench/bench_cpu.py [--models resnet50,bert,mobilenetv2] [--threads 1,2]
                                  [--reps N] [--rounds R] [--mode interleave|process]
                                  [--gap-ms MS] [--quick] [--layers N]
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_zoo  # noqa: E402

BUILD = ROOT / "build"
KILN = Path(os.environ.get("KILN_BIN", BUILD / "kiln"))


# ---- machine ------------------------------------------------------------------------------

def machine_info():
    info = {"cpu": "?", "cores": os.cpu_count(), "flags": "", "mhz": None}
    try:
        txt = open("/proc/cpuinfo").read()
        m = re.search(r"model name\s*:\s*(.*)", txt)
        info["cpu"] = m.group(1) if m else "?"
        fl = re.search(r"flags\s*:\s*(.*)", txt).group(1).split()
        info["flags"] = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile") if f in fl)
        mhz = re.search(r"cpu MHz\s*:\s*([\d.]+)", txt)
        info["mhz"] = float(mhz.group(1)) if mhz else None
    except OSError:
        pass
    return info


# ---- ONNX Runtime -----------------------------------------------------------------------

def ort_session(path, threads, profile=False):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tempfile.gettempdir(), "kiln_ort_prof")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def time_runs(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def ort_profile(path, feeds, threads, reps):
    """Per-node mean time (ms) and op type from ORT's profiler."""
    s = ort_session(path, threads, profile=True)
    for _ in range(2 + reps):
        s.run(None, feeds)
    prof = s.end_profiling()
    data = json.load(open(prof))
    os.unlink(prof)
    per = {}
    for ev in data:
        if ev.get("cat") != "Node" or not ev["name"].endswith("_kernel_time"):
            continue
        name = ev["name"][: -len("_kernel_time")]
        d = per.setdefault(name, [ev["args"].get("op_name", "?"), []])
        d[1].append(ev["dur"] / 1e3)
    per = {k: (v[0], float(np.median(v[1][2:] or v[1]))) for k, v in per.items()}
    return {ort_to_model_node(path, k): v for k, v in per.items()}


def ort_to_model_node(path, name, _cache={}):
    """The model's own name for an ORT profile node: with its NCHWc layout pass on, ORT names a
    fused conv '<last fused node>_out_nchwc' (a Conv+Relu becomes 'Relu_7_out_nchwc'), so walk
    back from that node through the activation/Add it absorbed to the Conv that heads it,
    which is the name kiln's per-layer profile uses. Names that match no model node pass
    through unchanged."""
    if path not in _cache:
        g = onnx.load(path, load_external_data=False).graph
        producer = {o: (i, n) for i, n in enumerate(g.node) for o in n.output}
        _cache[path] = ({n.name: n for n in g.node}, producer)
    nodes, producer = _cache[path]
    base = name[: -len("_out_nchwc")] if name.endswith("_out_nchwc") else name
    n = nodes.get(base)
    for _ in range(4):  # Conv -> [BatchNormalization] -> [Add] -> Relu at most
        if n is None or n.op_type in ("Conv", "MatMul", "Gemm"):
            break
        if n.op_type not in ("Relu", "Add", "Sum", "BatchNormalization", "Clip", "Sigmoid", "HardSigmoid"):
            n = None
            break
        # an Add's conv input is the one computed last, in graph order (the residual was earlier)
        ins = [producer[i] for i in n.input if i in producer]
        convs = [(k, m) for k, m in ins if m.op_type in ("Conv", "Relu", "Add", "BatchNormalization", "Clip")]
        n = max(convs, key=lambda km: km[0])[1] if convs else None
    return n.name if n is not None and n.op_type in ("Conv", "MatMul", "Gemm") else name


# ---- kiln ---------------------------------------------------------------------------------

def kiln_has_exec():
    if not KILN.exists():
        return False
    r = subprocess.run([str(KILN), "exec", "--help"], capture_output=True, text=True)
    return r.returncode == 0


def kiln_shapes(model, batch):
    return ",".join(f"{n}:{'x'.join(str(batch if d == 'batch' else 128 if d == 'seq' else d) for d in spec[1])}"
                    for n, spec in make_zoo.INPUTS[model].items())


def kiln_e2e(path, model, batch, threads, reps, engine, build, warmup_ms):
    """Median ms of `reps` inferences from `kiln exec`, or None when failing (reason printed).

    With build, the engine is built from the model (tactic timing included) and saved to
    `engine`; without, it is loaded from there, so interleaved rounds time one set of
    tactics and do not pay the build again. warmup_ms should cover at least two
    inferences: the first run of a fresh process packs the weights and plans the
    activation arena, the second is the first to touch the arena."""
    src = [f"--onnx={path}", f"--saveEngine={engine}"] if build else [f"--loadEngine={engine}"]
    cmd = [str(KILN), "exec", *src, f"--shapes={kiln_shapes(model, batch)}", f"--threads={threads}",
           f"--iterations={reps}", f"--warmUp={warmup_ms}", "--duration=0"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"median\s*[=:]\s*([\d.]+)\s*ms", r.stdout)
    if r.returncode != 0 or not m:
        print(f"  kiln failed (rc {r.returncode}): {(r.stderr or r.stdout).strip()[:300]}", file=sys.stderr)
        return None
    return float(m.group(1))


# ---- kiln and ORT interleaved in one run ---------------------------------------------------

KILN_STEP = Path(os.environ.get("KILN_STEP_BIN", BUILD / "kiln_step"))
ONNX_DTYPE = {np.dtype(np.float32): 1, np.dtype(np.int64): 7, np.dtype(np.int32): 6, np.dtype(np.bool_): 9}


class KilnStep:
    """A kiln engine kept loaded in bench/kiln_step.c, run on request (see its header).
    binary: another kiln_step than KILN_STEP; env: extra environment variables for it."""

    def __init__(self, engine, threads, feeds, tmpdir, binary=None, env=None):
        args = [str(binary or KILN_STEP), engine, str(threads)]
        for i, (name, arr) in enumerate(feeds.items()):
            f = os.path.join(tmpdir, f"input{i}.bin")
            np.ascontiguousarray(arr).tofile(f)
            args.append(f"{name}:{ONNX_DTYPE[arr.dtype]}:{'x'.join(str(d) for d in arr.shape)}:{f}")
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, **(env or {})})
        line = self.p.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise RuntimeError(f"kiln_step: {line or 'exited'}")

    def run(self, n):
        self.p.stdin.write(f"run {n}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().split()
        if not line or line[0] != "ok":
            raise RuntimeError(f"kiln_step: {' '.join(line) or 'exited'}")
        return [float(x) for x in line[1:]]

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
            except OSError:
                pass
        self.p.wait()


def kiln_build_engine(path, model, batch, threads, engine):
    """Builds and saves kiln's engine (tactic timing included) with `kiln exec`; None when failing."""
    cmd = [str(KILN), "exec", f"--onnx={path}", f"--saveEngine={engine}", f"--shapes={kiln_shapes(model, batch)}",
           f"--threads={threads}", "--skipInference"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  kiln build failed (rc {r.returncode}): {(r.stderr or r.stdout).strip()[:300]}", file=sys.stderr)
        return None
    return engine


def process_cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def wait_ort_idle(limit_s=1.0):
    """Returns once this process (ORT's threads) has stopped using CPU. ORT's intra-op
    workers spin after a run: at 2 threads on the dev VM, ResNet-50's worker kept a core
    busy for ~50 ms after each run (24 ms of CPU time during a 20 ms sleep, 52 ms during
    100 ms), so a fixed short gap let it run into kiln's turn and take one of kiln's two
    cores. Polls in 5 ms steps until a step adds less than 0.5 ms of CPU time."""
    t_end = time.perf_counter() + limit_s
    while time.perf_counter() < t_end:
        c0 = process_cpu_s()
        time.sleep(0.005)
        if process_cpu_s() - c0 < 0.0005:
            return


def interleaved(session, feeds, step, rounds, per_round, gap_s):
    """Per-round medians (ms) of ORT and kiln, the two alternating every per_round inferences
    (which one goes first alternates too). Before kiln's turn ORT's spinning workers must
    have gone to sleep (wait_ort_idle); gap_s of idle time before each turn on top of that
    (kiln's own workers spin for at most 0.1 ms), so neither pays for the other's threads."""
    o_meds, k_meds = [], []
    for _ in range(2):  # warm-up: weights packed, arenas planned, caches and pages touched
        session.run(None, feeds)
        step.run(1)
    for rnd in range(rounds):
        def ort_turn():
            ts = []
            for _ in range(per_round):
                t0 = time.perf_counter()
                session.run(None, feeds)
                ts.append((time.perf_counter() - t0) * 1e3)
            return float(np.median(ts))
        turns = [("o", ort_turn), ("k", lambda: float(np.median(step.run(per_round))))]
        if rnd % 2:
            turns.reverse()
        got = {}
        for key, fn in turns:
            if key == "k":
                wait_ort_idle()
            time.sleep(gap_s)
            got[key] = fn()
        o_meds.append(got["o"])
        k_meds.append(got["k"])
    return o_meds, k_meds


def build_layer_bench():
    """Compiles bench/bench_layers.c against build/libkiln.a, or (no CMake build, e.g. on a
    bare benchmark machine) directly against the sources it needs."""
    lib = BUILD / "libkiln.a"
    exe = BUILD / "bench_layers"
    src = ROOT / "bench" / "bench_layers.c"
    BUILD.mkdir(exist_ok=True)
    cc = shutil.which("cc") or "gcc"
    inc = [f"-I{ROOT/'src'}", f"-I{ROOT/'include'}", "-I/usr/include/x86_64-linux-gnu/openblas-pthread"]
    if lib.exists():
        if exe.exists() and exe.stat().st_mtime > max(src.stat().st_mtime, lib.stat().st_mtime):
            return exe
        objs = [str(lib)]
    else:
        objs = []
        srcs = sorted((ROOT / "src/core").glob("*.c")) + [ROOT / "src/ir/graph.c", ROOT / "src/runtime/tensor.c"] + \
            sorted((ROOT / "src/backends/cpu").glob("*.c"))
        for c in srcs:
            if c.stem.endswith("_amx"):  # built without AMX (KILN_HAVE_AMX=0): the stubs serve
                continue
            o = BUILD / "bench_objs" / (c.stem + ".o")
            o.parent.mkdir(parents=True, exist_ok=True)
            extra = ["-mavx2", "-mfma", "-mf16c"] if c.stem.endswith("_avx2") else []
            if c.stem.endswith("_avx512"):
                extra = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c"]
            r = subprocess.run([cc, "-O3", "-std=c11", "-D_GNU_SOURCE", "-DKILN_HAVE_OPENBLAS=1", "-DKILN_HAVE_CUDA=0",
                                "-DKILN_HAVE_AMX=0", *inc, *extra, "-c", str(c), "-o", str(o)], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"could not compile {c}:\n{r.stderr[:1500]}", file=sys.stderr)
                return None
            objs.append(str(o))
    cmd = [cc, "-O2", "-std=c11", "-D_GNU_SOURCE", *inc, str(src), *objs, "-o", str(exe),
           "-lopenblas", "-lpthread", "-lm"]
    if lib.exists():
        cmd += ["-lcjson"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("could not build bench_layers:\n" + r.stderr[:2000], file=sys.stderr)
        return None
    return exe


def layer_specs(path, model, batch):
    """Spec lines for bench_layers from the model's Conv/MatMul/Gemm nodes."""
    m = onnx.load(str(path))
    feeds = make_zoo.make_inputs(model, batch)
    for inp in m.graph.input:
        if inp.name in feeds:
            dims = inp.type.tensor_type.shape.dim
            for d, v in zip(dims, feeds[inp.name].shape):
                d.ClearField("dim_param")
                d.dim_value = v
    m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    inits = {t.name: t for t in m.graph.initializer}
    # Shape inference leaves symbolic dims (dim_value 0) behind BERT's Reshapes, which made
    # every BERT MatMul a 0-row GEMM timed at 0 ms. Fill the missing shapes from one ORT run
    # that exposes the GEMM-class inputs as extra outputs.
    want = {i for n in m.graph.node if n.op_type in ("MatMul", "Conv", "Gemm") for i in n.input[:2]
            if i not in inits and (not shapes.get(i) or 0 in shapes[i])}
    if want:
        m2 = onnx.load(str(path))
        have = {o.name for o in m2.graph.output}
        for name in sorted(want - have):
            m2.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
        sess = ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        for name, val in zip(names, sess.run(None, feeds)):
            if name in want:
                shapes[name] = list(val.shape)
    consumers = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    order = {n.name: i for i, n in enumerate(m.graph.node)}
    lines = []
    for n in m.graph.node:
        outs = consumers.get(n.output[0], [])
        nxt = outs[0] if len(outs) == 1 else None
        if n.op_type == "Conv":
            x = shapes.get(n.input[0])
            w = inits[n.input[1]]
            a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
            k = a.get("kernel_shape", list(w.dims[2:]))
            s = a.get("strides", [1, 1])
            p = a.get("pads", [0, 0, 0, 0])
            d = a.get("dilations", [1, 1])
            act, res = "none", 0
            if nxt is not None and nxt.op_type == "Add":
                other = [i for i in nxt.input if i != n.output[0]][0]
                prod = [q for q in m.graph.node if other in q.output]
                # fuse into the later of the two producers, as a fusion pass would
                if not prod or order[prod[0].name] < order[n.name]:
                    res = 1
                    after = consumers.get(nxt.output[0], [])
                    if len(after) == 1 and after[0].op_type == "Relu":
                        act = "Relu"
            elif nxt is not None and nxt.op_type == "Relu":
                act = "Relu"
            elif nxt is not None and nxt.op_type == "Clip":
                act = "Clip6"
            lines.append(f"conv {n.name} {x[0]} {x[1]} {x[2]} {x[3]} {w.dims[0]} {k[0]} {k[1]} {s[0]} {s[1]} "
                         f"{p[0]} {p[1]} {p[2]} {p[3]} {d[0]} {d[1]} {a.get('group', 1)} {act} {res}")
        elif n.op_type == "MatMul":
            a, b = shapes.get(n.input[0]), (list(inits[n.input[1]].dims) if n.input[1] in inits else shapes.get(n.input[1]))
            if not a or not b:
                continue
            if n.input[1] in inits:
                bias = 1 if (nxt is not None and nxt.op_type == "Add" and any(i in inits for i in nxt.input)) else 0
                rows = int(np.prod(a[:-1]))
                # MatMul -> Add(bias) -> Erf-form GELU: kiln's fuse_gelu + fuse_activation put
                # the GELU into this MatMul's epilogue (the bias Add's output feeds an Erf chain)
                act = "none"
                if bias:
                    after = consumers.get(nxt.output[0], [])
                    if any(q.op_type in ("Div", "Mul") and any(r.op_type == "Erf" for r in consumers.get(q.output[0], []))
                           for q in after):
                        act = "Gelu"
                lines.append(f"matmul {n.name} 1 {rows} {a[-1]} {b[-1]} {bias} {act}")
            else:
                lines.append(f"bmm {n.name} {int(np.prod(a[:-2]))} {a[-2]} {a[-1]} {b[-1]}")
        elif n.op_type == "Gemm":
            a = shapes.get(n.input[0])
            w = inits[n.input[1]]
            lines.append(f"matmul {n.name} 1 {a[0]} {a[1]} {w.dims[0]} 1 none")
    return lines


def run_layers(exe, lines, threads, reps):
    with tempfile.NamedTemporaryFile("w", suffix=".spec", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        spec = f.name
    # OPENBLAS_NUM_THREADS=1: bench_layers creates a kiln pool per layer, and each one sets
    # OpenBLAS's thread count, which woke OpenBLAS's idle server thread into a sched_yield
    # spin (perf: ~1.3 CPUs busy during a 1-thread run on the 2-core dev machine). kiln's
    # own kernels do not use OpenBLAS threads (cpu_threadpool.c), so this only removes noise.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([str(exe), spec, str(threads), str(reps)], capture_output=True, text=True, env=env)
    os.unlink(spec)
    if r.returncode != 0:
        print("bench_layers failed: " + r.stderr[:500], file=sys.stderr)
        return {}, None
    res, total = {}, None
    for ln in r.stdout.splitlines():
        p = ln.split()
        if p[0] == "total":
            total = float(p[1])
        else:
            res[p[0]] = (p[1], float(p[2]), float(p[3]))
    return res, total


# ---- report -------------------------------------------------------------------------------

def rounds_by_process(a, s, feeds, path, model, batch, t, per_round, engine, have_exec):
    """The pre-session-13 method (--mode process): ORT in-process and one `kiln exec` process
    per round, alternating round by round; round 0 builds the engine and is not counted."""
    o_meds, k_meds = [], []
    for rnd in range(a.rounds):
        o_meds.append(time_runs(lambda: s.run(None, feeds), per_round, warmup=2 if rnd == 0 else 1))
        # round 0 builds the engine and sizes the later rounds' warm-up (2.5 inferences)
        warm = 200 if rnd == 0 else max(200, int(2.5 * k_meds[0]))
        k = kiln_e2e(path, model, batch, t, per_round, engine, build=rnd == 0, warmup_ms=warm) if have_exec else None
        if k is None:
            return o_meds, []
        k_meds.append(k)
    if len(k_meds) > 1:
        k_meds = k_meds[1:]  # round 0 ran right after the build, with too short a warm-up
        o_meds = o_meds[1:]
    return o_meds, k_meds


def main():
    ap = argparse.ArgumentParser(description="kiln vs ONNX Runtime on the CPU")
    ap.add_argument("--models", default="resnet50,bert,mobilenetv2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6,
                    help="ORT and kiln alternate this many rounds per configuration (reps spread over them); "
                         "each engine's figure is the median of its round medians (round 1, which builds kiln's engine, "
                         "is not counted)")
    ap.add_argument("--mode", choices=("interleave", "process"), default="interleave",
                    help="interleave (default): kiln kept loaded in build/kiln_step and ORT alternate every "
                         "reps/rounds inferences; process: one `kiln exec` process per round, as before session 13")
    ap.add_argument("--gap-ms", type=float, default=5.0,
                    help="idle time before each side's turn in interleave mode, after ORT's spinning workers have "
                         "gone to sleep (which kiln's turn always waits for)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions, batch-8 only at the highest thread count")
    ap.add_argument("--layers", type=int, default=12, help="hottest layers to list per model (0 = none)")
    a = ap.parse_args()
    reps = 3 if a.quick else a.reps
    threads = [int(t) for t in a.threads.split(",")]
    mi = machine_info()
    print(f"# machine: {mi['cpu']}, {mi['cores']} cores, {mi['flags']}, reported {mi['mhz']} MHz")
    print(f"# onnxruntime {ort.__version__}, kiln {KILN}")
    have_exec = kiln_has_exec()
    interleave = a.mode == "interleave" and KILN_STEP.exists()
    if a.mode == "interleave" and not interleave:
        print(f"# {KILN_STEP} not found (scripts/build.sh builds it): one kiln exec process per round instead")
    print(f"# timing: {'kiln_step and ORT alternating every reps/rounds inferences' if interleave else 'one kiln exec process per round'}")
    if not have_exec:
        print("# kiln end-to-end: `kiln exec` is not available in this build; kiln columns show n/a, per-layer "
              "kernel timings below are still measured")
    exe = build_layer_bench()
    zoo = BUILD / "zoo"
    peak = {}
    if exe:
        for t in threads:
            res, _ = run_layers(exe, ["matmul peak_sgemm_2048 1 2048 2048 2048 0 none"], t, max(3, reps // 2))
            if res:
                peak[t] = res["peak_sgemm_2048"][2]
        print("# practical peak (kiln sgemm 2048^3): " + ", ".join(f"{t} thread(s) {g:.1f} GFLOP/s" for t, g in peak.items()))
        if mi["mhz"]:
            lanes = 16 if "avx512f" in mi["flags"] else 8  # kiln's widest GEMM kernel on this CPU
            print(f"# theoretical peak per core at {mi['mhz']:.0f} MHz: {mi['mhz'] / 1e3 * lanes * 4:.1f} GFLOP/s "
                  f"({lanes} fp32 lanes x 2 (FMA) x 2 FMA pipes); boost clocks make the practical figure the honest one")
    rows = []
    for model in a.models.split(","):
        path = make_zoo.ensure(str(zoo), model)
        flop_per_item = None
        for t in threads:
            for batch, metric in ((1, "latency ms"), (8, "throughput/s")):
                if a.quick and batch == 8 and t != max(threads):
                    continue
                feeds = make_zoo.make_inputs(model, batch)
                s = ort_session(path, t)
                n = reps if batch == 1 else max(3, reps // 3)
                per_round = max(1, -(-n // a.rounds))
                engine = os.path.join(tempfile.gettempdir(), f"kiln_bench_{model}_b{batch}_t{t}_{os.getpid()}.engine")
                if interleave and have_exec:
                    o_meds, k_meds = [], []
                    with tempfile.TemporaryDirectory() as td:
                        if kiln_build_engine(path, model, batch, t, engine):
                            step = KilnStep(engine, t, feeds, td)
                            try:
                                o_meds, k_meds = interleaved(s, feeds, step, a.rounds, per_round, a.gap_ms / 1e3)
                            finally:
                                step.close()
                        if not k_meds:
                            o_meds = [time_runs(lambda: s.run(None, feeds), n)]
                else:
                    o_meds, k_meds = rounds_by_process(a, s, feeds, path, model, batch, t, per_round, engine, have_exec)
                if os.path.exists(engine):
                    os.unlink(engine)
                o_ms = float(np.median(o_meds))
                k_ms = float(np.median(k_meds)) if k_meds else None
                # rounds in which kiln's median beat ORT's of the same round, and the lowest and
                # highest ratio of one round: how firm the ratio is (on a noisy host a 0.9 whose
                # rounds span 0.7-1.2 says little)
                won = f"{sum(k < o for o, k in zip(o_meds, k_meds))} of {len(k_meds)}" if k_meds else "n/a"
                rr = [o / k for o, k in zip(o_meds, k_meds)]
                # the paired figure: each round's ratio compares two medians taken seconds
                # apart, so its median and quartiles are steadier than the ratio of the
                # two sides' medians when the machine's speed drifts
                spread = (f"{np.median(rr):.2f} [{np.percentile(rr, 25):.2f}-{np.percentile(rr, 75):.2f}] "
                          f"({min(rr):.2f}-{max(rr):.2f})") if rr else "n/a"
                if batch == 1:
                    rows.append((model, t, batch, metric, o_ms, k_ms, (o_ms / k_ms) if k_ms else None, won, spread))
                else:
                    rows.append((model, t, batch, metric, batch * 1e3 / o_ms, batch * 1e3 / k_ms if k_ms else None,
                                 (o_ms / k_ms) if k_ms else None, won, spread))
        print()
    print("| model | threads | batch | metric | ONNX Runtime | kiln | ratio (ORT time / kiln time) | kiln faster in rounds "
          "| ratio per round: median [quartiles] (lowest-highest) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        f = lambda v: "n/a" if v is None else f"{v:.1f}" if v >= 10 else f"{v:.3g}"  # small latencies keep 3 digits
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {f(r[4])} | {f(r[5])} | {'n/a' if r[6] is None else f'{r[6]:.2f}'} | {r[7]} | {r[8]} |")
    if not exe or a.layers == 0:
        return
    for model in a.models.split(","):
        path = make_zoo.ensure(str(zoo), model)
        lines = layer_specs(path, model, 1)
        for t in threads:
            res, total = run_layers(exe, lines, t, max(3, reps))
            prof = ort_profile(path, make_zoo.make_inputs(model, 1), t, max(3, reps // 2))
            ort_total = sum(v[1] for v in prof.values())
            ort_gemm = sum(v[1] for v in prof.values() if v[0] in ("Conv", "FusedConv", "MatMul", "FusedMatMul", "Gemm", "NchwcConv"))
            by_type = {}
            for op, ms in prof.values():
                by_type[op] = by_type.get(op, 0) + ms
            print(f"\n### {model}, batch 1, {t} thread(s): per-layer profile")
            print(f"kiln GEMM-class layers (Conv/MatMul/Gemm with fused epilogues): {total:.2f} ms; "
                  f"ORT same op types: {ort_gemm:.2f} ms of {ort_total:.2f} ms node time")
            print("ORT time per op type: " + ", ".join(f"{k} {v:.2f} ms" for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])))
            hot = sorted(res.items(), key=lambda kv: -kv[1][1])[: a.layers]
            pk = peak.get(t)
            print("| layer | op | kiln ms | kiln GFLOP/s | % of practical peak | ORT ms (same node) |")
            print("|---|---|---|---|---|---|")
            for name, (op, ms, gf) in hot:
                o = prof.get(name)
                print(f"| {name} | {op} | {ms:.3f} | {gf:.1f} | {100 * gf / pk:.0f}% | {('%.3f' % o[1]) if o else 'fused/renamed'} |"
                      if pk else f"| {name} | {op} | {ms:.3f} | {gf:.1f} | n/a | {('%.3f' % o[1]) if o else '-'} |")


if __name__ == "__main__":
    main()
