"""CLI tests for `kiln exec` (trtexec-compatible) and `kiln inspect ENGINE`.

Small models are generated with onnx.helper; runs use --duration=0 --warmUp=0 and a few
iterations so the whole file takes seconds. Every test asserts facts users rely on:
the trtexec lines, the outputs (against ONNX Runtime, and byte-identical between a
built and a reloaded engine), and the facts in each error message.
"""
import json
import os
import random
import re
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
FAST = ["--duration=0", "--warmUp=0", "--iterations=3"]


def run(*args, check_rc=None):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert p.returncode == check_rc, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def save(model, path):
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """x[batch, 16] -> MatMul W[16, 32] -> Add b -> Relu -> MatMul W2[32, 4] -> y[batch, 4]"""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "W1")
    b1 = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 4)).astype(np.float32), "W2")
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="/fc1/MatMul"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="/fc1/Add"),
        helper.make_node("Relu", ["hb"], ["r"], name="/act/Relu"),
        helper.make_node("MatMul", ["r", "W2"], ["y"], name="/fc2/MatMul"),
    ]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
    m.ir_version = 8
    return save(m, tmp_path_factory.mktemp("m") / "mlp.onnx")


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    """A 3x3 conv whose im2col scratch is C*kh*kw*OH*OW*4 = 8*9*32*32*4 = 294912 bytes."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "W")
    n = helper.make_node("Conv", ["x", "W"], ["y"], name="/stem/conv", pads=[1, 1, 1, 1])
    g = helper.make_graph([n], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return save(m, tmp_path_factory.mktemp("c") / "conv.onnx")


@pytest.fixture(scope="module")
def engine(mlp, tmp_path_factory):
    path = tmp_path_factory.mktemp("e") / "mlp.engine"
    p = run("exec", f"--onnx={mlp}", f"--saveEngine={path}", "--minShapes=x:1x16", "--optShapes=x:4x16",
            "--maxShapes=x:8x16", "--skipInference", check_rc=0)
    assert "Engine built in" in p.stdout
    return path


def ort_run(model, feeds):
    import onnxruntime as ort
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


# ---- build, save, load, run ---------------------------------------------------------------

def test_trtexec_output_lines(mlp):
    p = run("exec", f"--onnx={mlp}", "--shapes=x:2x16", *FAST, check_rc=0)
    out = p.stdout
    assert out.startswith("&&&& RUNNING kiln.exec")
    for line in ["Engine built in", "Created engine with size:", "=== Performance summary ===", "Throughput:",
                 "Latency: min = ", "Enqueue Time: min = ", "GPU Compute Time: min = ", "Total Host Walltime:",
                 "Total GPU Compute Time:", "percentile(90%)", "percentile(99%)"]:
        assert line in out, line
    assert "H2D Latency: not applicable on the CPU backend" in out
    assert "D2H Latency: not applicable on the CPU backend" in out
    assert out.rstrip().splitlines()[-1].startswith("&&&& PASSED kiln.exec")
    assert f"--onnx={mlp}" in out.rstrip().splitlines()[-1]


def test_round_trip_identical_and_matches_onnxruntime(mlp, engine, tmp_path):
    x = np.random.default_rng(5).standard_normal((3, 16)).astype(np.float32)
    xf = tmp_path / "x.npy"
    np.save(xf, x)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    run("exec", f"--onnx={mlp}", "--shapes=x:3x16", f"--loadInputs=x:{xf}", f"--exportOutput={a}", *FAST, check_rc=0)
    run("exec", f"--loadEngine={engine}", "--shapes=x:3x16", f"--loadInputs=x:{xf}", f"--exportOutput={b}", *FAST,
        check_rc=0)
    assert a.read_bytes() == b.read_bytes()  # %.9g round-trips float32: equal text = equal bits
    got = np.array(json.loads(a.read_text())[0]["values"], dtype=np.float32).reshape(3, 4)
    assert json.loads(a.read_text())[0]["dimensions"] == "3x4"
    ref = ort_run(mlp, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_load_inputs_raw_and_pb(mlp, engine, tmp_path):
    x = np.random.default_rng(6).standard_normal((2, 16)).astype(np.float32)
    raw, pb = tmp_path / "x.bin", tmp_path / "x.pb"
    raw.write_bytes(x.tobytes())
    pb.write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    outs = []
    for f in (raw, pb):
        o = tmp_path / (f.name + ".json")
        run("exec", f"--loadEngine={engine}", "--shapes=x:2x16", f"--loadInputs=x:{f}", f"--exportOutput={o}", *FAST,
            check_rc=0)
        outs.append(o.read_bytes())
    assert outs[0] == outs[1]
    # a raw file of the wrong size says both sizes
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\0" * 12)
    p = run("exec", f"--loadEngine={engine}", "--shapes=x:2x16", f"--loadInputs=x:{bad}", *FAST, check_rc=1)
    assert "has 12 bytes" in p.stderr and "needs 128" in p.stderr


def test_inspect_engine(engine):
    p = run("inspect", engine, check_rc=0)
    assert "kiln engine format 1" in p.stdout
    assert "x  min 1x16  opt 4x16  max 8x16" in p.stdout
    assert "/fc1/MatMul" in p.stdout and "fp32" in p.stdout
    j = json.loads(run("inspect", "--json", engine, check_rc=0).stdout)
    assert j["loads_here"] is True
    assert j["profiles"][0]["inputs"][0] == {"name": "x", "min": [1, 16], "opt": [4, 16], "max": [8, 16]}
    # the build's passes fold fc1's bias Add (kiln_bias) and the Relu (kiln_activation) into fc1's MatMul
    assert [l["name"] for l in j["layers"]] == ["/fc1/MatMul", "/fc2/MatMul"]
    assert j["inputs"][0]["shape"] == ["batch", 16]
    assert j["memory"]["weights_bytes"] >= (16 * 32 + 32 * 4) * 4
    # a CPU engine records no GPU (GPU engines fill these; see docs/ENGINE_FORMAT.md)
    assert j["backend"] == "cpu"
    assert [j[k] for k in ("gpu_arch", "cuda_version", "cublas_version", "cudnn_version")] == ["", "", "", ""]
    assert "gpu         " not in p.stdout


def test_shape_outside_profile(engine):
    p = run("exec", f"--loadEngine={engine}", "--shapes=x:9x16", *FAST, check_rc=1)
    assert "outside the engine's profile 0" in p.stderr
    assert "dimension 0 is 9" in p.stderr and "1..8" in p.stderr
    assert "--maxShapes=x:9x16" in p.stderr
    assert "&&&& FAILED" in p.stdout


def test_several_shapes_one_run(mlp, tmp_path):
    rep = tmp_path / "r.json"
    p = run("exec", f"--onnx={mlp}", "--shapes=x:1x16", "--shapes=x:4x16;x:2x16", f"--json={rep}", *FAST,
            check_rc=0)
    assert p.stdout.count("=== Performance summary ===") == 3
    assert "--minShapes=x:1x16 --optShapes=x:1x16 --maxShapes=x:4x16" in p.stdout
    j = json.loads(rep.read_text())
    assert len(j["runs"]) == 3 and j["passed"] is True
    assert j["profiles"][0]["inputs"][0]["max"] == [4, 16]
    assert all(r["queries"] >= 3 for r in j["runs"])
    assert "float32[4, 16]" in j["runs"][1]["shapes"]


def test_dynamic_without_profile_defaults_to_one(mlp):
    p = run("exec", f"--onnx={mlp}", *FAST, check_rc=0)
    assert "no optimization profile was given" in p.stdout
    assert "--minShapes=x:1x16" in p.stdout
    assert "float32[1, 16]" in p.stdout


def test_profile_errors_stop_the_build(mlp):
    p = run("exec", f"--onnx={mlp}", "--minShapes=x:4x16", "--optShapes=x:2x16", "--maxShapes=x:8x16", *FAST,
            check_rc=1)
    assert "profile-order" in p.stdout + p.stderr
    p = run("exec", f"--onnx={mlp}", "--shapes=y:1x16", *FAST)
    assert p.returncode != 0
    assert "'y'" in p.stdout + p.stderr


def test_exports_and_profile(mlp, tmp_path):
    t, pr = tmp_path / "times.json", tmp_path / "prof.json"
    p = run("exec", f"--onnx={mlp}", "--shapes=x:2x16", f"--exportTimes={t}", f"--exportProfile={pr}", "--dumpProfile",
            "--separateProfileRun", "--dumpOutput", *FAST, check_rc=0)
    times = json.loads(t.read_text())
    assert len(times) >= 3
    assert {"startComputeMs", "endComputeMs", "computeMs", "latencyMs", "h2dMs", "d2hMs"} <= set(times[0])
    prof = json.loads(pr.read_text())
    assert prof[0]["count"] == 3
    # bias Add and Relu run inside fc1's MatMul epilogue (fuse_residual + fuse_activation passes)
    assert [x["name"] for x in prof[1:]] == ["/fc1/MatMul", "/fc2/MatMul"]
    assert abs(sum(x["percentage"] for x in prof[1:]) - 100) < 0.5
    assert "=== Profile (3 iterations ) ===" in p.stdout
    assert "Output Tensors:" in p.stdout and "y: (2x4)" in p.stdout


def test_streams_and_threads(mlp):
    p = run("exec", f"--onnx={mlp}", "--infStreams=2", "--threads=1", "--iterations=6", "--duration=0", "--warmUp=0",
            check_rc=0)
    assert "on 2 streams, 1 thread each" in p.stdout


def test_threads_line_and_json(conv, tmp_path):
    """The thread-pool report of the timed queries (CPU): parallel loops per query, the calling
    thread's share of the time in them and waiting, each worker's share running chunks; in
    the log and under "threads" in --json. One thread: no workers."""
    report = tmp_path / "r.json"
    p = run("exec", f"--onnx={conv}", "--threads=2", "--iterations=20", "--duration=0", "--warmUp=0",
            f"--json={report}", check_rc=0)
    m = re.search(r"Threads: 2 per context; ([\d.]+) parallel loops per query \(([\d.]+) more too small to share\); "
                  r"the calling thread was in them ([\d.]+)% of the time \(waiting for workers ([\d.]+)%\), each worker "
                  r"ran chunks ([\d.]+)% of the time; per query the caller blocked ([\d.]+) times waiting for workers "
                  r"and the workers ([\d.]+) times between loops", p.stdout)
    assert m, p.stdout
    loops, inline, caller, wait, worker, cblocks, wblocks = map(float, m.groups())
    assert loops >= 1 and inline >= 0
    # the worker may not get a core at all on a loaded machine: its share can be 0
    assert 0 <= wait <= caller <= 100.5 and 0 <= worker <= 100.5
    # a block is at most one per loop for the caller, one per loop and worker for the workers
    assert 0 <= cblocks <= loops and 0 <= wblocks <= loops + 1
    th = json.loads(report.read_text())["runs"][0]["threads"]
    assert th["per_context"] == 2 and abs(th["parallel_loops_per_query"] - loops) < 0.05
    assert abs(th["workers_busy"] * 100 - worker) < 0.06
    assert abs(th["caller_blocks_per_query"] - cblocks) < 0.06 and abs(th["worker_blocks_per_query"] - wblocks) < 0.06
    # without the spin (KILN_SPIN_US=0) the worker blocks after every loop it joins; 300
    # queries (tens of ms) so that a worker the OS does not schedule at once, on a busy
    # machine, still joins some of them
    # (the JSON's 3 decimals: the log's 1 rounds a few blocks in 300 queries to 0.0)
    p = subprocess.run([KILN, "exec", f"--onnx={conv}", "--threads=2", "--iterations=300", "--duration=0", "--warmUp=0",
                        f"--json={report}"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "KILN_SPIN_US": "0"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(report.read_text())["runs"][0]["threads"]["worker_blocks_per_query"] > 0, p.stdout
    p = run("exec", f"--onnx={conv}", "--threads=1", *FAST, f"--json={report}", check_rc=0)
    assert "Threads: 1 per context (no worker threads)" in p.stdout
    th = json.loads(report.read_text())["runs"][0]["threads"]
    assert th["per_context"] == 1 and th["parallel_loops_per_query"] == 0 and th["workers_busy"] == 0


def run_on_one_cpu(*args):
    """kiln pinned to CPU 0 (the first CPU of this process's own mask)."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no sched_getaffinity on this platform")
    cpu = min(os.sched_getaffinity(0))
    return subprocess.run(["taskset", "-c", str(cpu), KILN, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_default_threads_follow_the_affinity_mask(mlp):
    """Under taskset (or a cpuset / cgroup quota) the default is the CPUs the process may use,
    not the machine's count: one worker per usable CPU, and no oversubscription warning."""
    import shutil
    if not shutil.which("taskset"):
        pytest.skip("taskset (util-linux) is not installed")
    p = run_on_one_cpu("exec", f"--onnx={mlp}", *FAST)
    assert p.returncode == 0, p.stderr
    assert "threads per stream: 1" in p.stdout
    assert "usable CPU" not in p.stdout


def test_more_threads_than_usable_cpus_warns(mlp):
    import shutil
    if not shutil.which("taskset"):
        pytest.skip("taskset (util-linux) is not installed")
    p = run_on_one_cpu("exec", f"--onnx={mlp}", "--threads=2", *FAST)
    assert p.returncode == 0, p.stderr
    assert "[W] 2 threads per stream x 1 stream on 1 usable CPU (affinity mask, cgroup quota)" in p.stdout
    assert "--threads=1 fits" in p.stdout
    p = run_on_one_cpu("exec", f"--onnx={mlp}", "--infStreams=2", *FAST)
    assert p.returncode == 0, p.stderr
    assert "1 thread per stream x 2 streams on 1 usable CPU" in p.stdout
    assert "--infStreams=1 with --threads=1 fits" in p.stdout
    p = run_on_one_cpu("run", mlp, "--threads", "2", "--iterations", "2")
    assert p.returncode == 0, p.stderr
    assert "--threads 2 on 1 usable CPU(s)" in p.stderr


# ---- workspace and tactics --------------------------------------------------------------

def test_workspace_too_small_names_node_and_flag(conv):
    p = run("exec", f"--onnx={conv}", "--memPoolSize=workspace:64K", *FAST, check_rc=1)
    e = p.stderr
    assert "node '/stem/conv' (Conv)" in e
    assert "294912 bytes" in e and "65536 bytes" in e
    assert "--memPoolSize=workspace:1" in e
    assert "could not find any implementation" not in e.lower()
    run("exec", f"--onnx={conv}", "--memPoolSize=workspace:1G", *FAST, check_rc=0)
    run("exec", f"--onnx={conv}", "--workspace=1", *FAST, check_rc=0)  # 1 MiB: fits


def test_timing_cache_corrupt_is_rebuilt(conv, tmp_path):
    cache = tmp_path / "t.cache"
    cache.write_text("{ this is not json")
    p = run("exec", f"--onnx={conv}", f"--timingCacheFile={cache}", "--skipInference", check_rc=0)
    assert "is ignored because it is not valid JSON" in p.stdout
    j = json.loads(cache.read_text())
    assert j["format"] == "kiln-timing-cache" and j["version"] == 2
    assert all("|threads=" in e["key"] for e in j["entries"])


# ---- flags ----------------------------------------------------------------------------------

def test_unknown_flag_did_you_mean(mlp):
    p = run("exec", f"--onnx={mlp}", "--itertions=5", check_rc=2)
    assert "unknown flag '--itertions'; did you mean '--iterations'?" in p.stderr


def test_gpu_only_flags_are_noted(mlp):
    p = run("exec", f"--onnx={mlp}", "--useCudaGraph", "--noDataTransfers", "--memPoolSize=dlaSRAM:1", *FAST,
            check_rc=0)
    assert "--useCudaGraph: a TensorRT/GPU option" in p.stdout
    assert "dlaSRAM: that pool exists on NVIDIA GPUs/DLA only" in p.stdout


def test_precision_flags_warn_fp32(mlp):
    p = run("exec", f"--onnx={mlp}", "--fp16", "--int8", *FAST, check_rc=0)
    assert "FP32 kernels only" in p.stdout and "--int8 without --calib" in p.stdout


def test_bad_values(mlp):
    assert "--iterations: 'x'" in run("exec", f"--onnx={mlp}", "--iterations=x", check_rc=2).stderr
    assert "--memPoolSize: unknown pool 'workspac'; did you mean 'workspace'?" in run(
        "exec", f"--onnx={mlp}", "--memPoolSize=workspac:1", check_rc=2).stderr
    assert "not a size" in run("exec", f"--onnx={mlp}", "--memPoolSize=workspace:1Q", check_rc=2).stderr
    assert "--percentile: '101'" in run("exec", f"--onnx={mlp}", "--percentile=101", check_rc=2).stderr
    assert "give a model" in run("exec", "--iterations=2", check_rc=2).stderr
    assert "--onnx needs a value" in run("exec", "--onnx", check_rc=2).stderr


def test_cuda_without_gpu_is_a_clear_error(mlp, tmp_path):
    """CI has no GPU: building a cuda engine stops with the reason (no CUDA in this build,
    or no usable GPU) and the way out, never a crash, and writes no engine."""
    eng = tmp_path / "m.engine"
    p = run("exec", f"--onnx={mlp}", "--backend=cuda", f"--saveEngine={eng}", check_rc=1)
    out = p.stdout + p.stderr
    assert "--backend=cuda:" in out
    assert ("built without the CUDA backend" in out) or ("no usable NVIDIA GPU" in out)
    assert "--backend=cpu" in out
    assert "&&&& FAILED" in p.stdout
    assert not eng.exists()


def test_gpu_runtime_flags_on_cpu(mlp):
    """The GPU runtime flags parse, are noted as doing nothing on the CPU backend, and
    contradictions or values are errors."""
    p = run("exec", f"--onnx={mlp}", "--noDataTransfers", "--noCudaGraph", "--useSpinWait", *FAST, check_rc=0)
    for flag in ("--noDataTransfers", "--noCudaGraph", "--useSpinWait"):
        assert f"{flag}: a TensorRT/GPU option with no meaning on kiln's CPU backend" in p.stdout
    assert "H2D Latency: not applicable on the CPU backend" in p.stdout
    p = run("exec", f"--onnx={mlp}", "--useCudaGraph", "--noCudaGraph", check_rc=2)
    assert "--useCudaGraph and --noCudaGraph contradict" in p.stderr
    p = run("exec", f"--onnx={mlp}", "--noDataTransfers=1", check_rc=2)
    assert "--noDataTransfers takes no value" in p.stderr
    for bad in ("0", "257", "two", ""):
        p = run("exec", f"--onnx={mlp}", f"--infStreams={bad}", check_rc=2)
        assert "--infStreams" in p.stderr
    p = run("exec", f"--onnx={mlp}", "--backend=tpu", check_rc=2)
    assert "unknown backend 'tpu' (kiln has: cpu, cuda)" in p.stderr


def test_backend_flag_must_match_loaded_engine(mlp, tmp_path):
    """A CPU engine loaded with --backend=cuda is refused, naming the engine's backend and
    the rebuild command (the check happens before any GPU is looked for)."""
    eng = tmp_path / "m.engine"
    run("exec", f"--onnx={mlp}", f"--saveEngine={eng}", "--skipInference", check_rc=0)
    p = run("exec", f"--loadEngine={eng}", "--backend=cuda", *FAST, check_rc=1)
    assert "built for the cpu backend" in p.stdout + p.stderr
    assert "--backend=cuda --saveEngine=" in p.stdout + p.stderr


def test_percentiles_and_avgruns(mlp):
    p = run("exec", f"--onnx={mlp}", "--percentile=50,99.9", "--avgRuns=2", "--iterations=4", "--duration=0",
            "--warmUp=0", check_rc=0)
    assert "percentile(50%)" in p.stdout and "percentile(99.9%)" in p.stdout
    assert "Average on 2 runs" in p.stdout


def test_build_only_saves(mlp, tmp_path):
    e = tmp_path / "b.engine"
    p = run("exec", f"--onnx={mlp}", "--buildOnly", f"--saveEngine={e}", check_rc=0)
    assert e.stat().st_size > 0 and "Performance summary" not in p.stdout


# ---- bad engine files -----------------------------------------------------------------------

def test_onnx_given_to_load_engine(mlp):
    p = run("exec", f"--loadEngine={mlp}", *FAST, check_rc=1)
    assert "is an ONNX model, not a kiln engine" in p.stderr and f"--onnx={mlp}" in p.stderr


def test_random_and_empty_files(tmp_path):
    r = tmp_path / "r.engine"
    r.write_bytes(bytes(random.Random(3).randrange(1, 256) for _ in range(500)))
    p = run("exec", f"--loadEngine={r}", *FAST, check_rc=1)
    assert "not a kiln engine" in p.stderr
    e = tmp_path / "e.engine"
    e.write_bytes(b"")
    assert "empty" in run("exec", f"--loadEngine={e}", *FAST, check_rc=1).stderr


def sections(data):
    n = struct.unpack_from("<I", data, 72)[0]
    out = []
    for i in range(n):
        sid, _, off, size, _ = struct.unpack_from("<IIQQI", data, 128 + 32 * i)
        out.append((sid, off, size))
    return out


NAMES = {1: "META", 2: "GRAPH", 3: "LAYERS", 4: "MEMPLAN", 5: "WEIGHTS"}


def test_corrupt_each_section(engine, tmp_path):
    data = engine.read_bytes()
    for sid, off, size in sections(data):
        if size == 0:
            continue
        bad = bytearray(data)
        bad[off + size // 2] ^= 0xFF
        f = tmp_path / f"c{sid}.engine"
        f.write_bytes(bytes(bad))
        p = run("exec", f"--loadEngine={f}", *FAST, check_rc=1)
        assert f"the {NAMES[sid]} section" in p.stderr and "corrupt" in p.stderr, p.stderr
        assert "&&&& FAILED" in p.stdout


def test_corrupt_weights_fail_with_skip_inference(engine, tmp_path):
    # the weights' crc32 runs in the background at load; exec still waits for it
    data = engine.read_bytes()
    sid, off, size = [s for s in sections(data) if NAMES[s[0]] == "WEIGHTS"][0]
    bad = bytearray(data)
    bad[off + size - 1] ^= 0x01
    f = tmp_path / "w.engine"
    f.write_bytes(bytes(bad))
    p = run("exec", f"--loadEngine={f}", "--skipInference", check_rc=1)
    assert "the WEIGHTS section" in p.stderr and "corrupt" in p.stderr, p.stderr
    p = run("exec", f"--loadEngine={f}", f"--saveEngine={tmp_path / 'resigned.engine'}", "--skipInference", check_rc=1)
    assert not (tmp_path / "resigned.engine").exists()


def test_load_time_in_json(engine, tmp_path):
    js = tmp_path / "l.json"
    run("exec", f"--loadEngine={engine}", "--skipInference", f"--json={js}", check_rc=0)
    e = json.loads(js.read_text())["engine"]
    assert e["load_ms"] > 0 and e["weights_crc_ms"] >= 0 and e["weights_crc_wait_ms"] >= 0
    assert e["size_bytes"] == engine.stat().st_size


def seq_model(path):
    # out = SequenceAt(seq, 0) + x: a sequence input next to a tensor input
    g = helper.make_graph(
        [helper.make_node("SequenceAt", ["seq", "zero"], ["first"]), helper.make_node("Add", ["first", "x"], ["y"])],
        "seq",
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_sequence_input_from_pb(tmp_path):
    from onnx import numpy_helper as nh
    m = seq_model(tmp_path / "seq.onnx")
    seq = onnx.helper.make_sequence("seq", onnx.SequenceProto.TENSOR,
                                    [nh.from_array(np.array([1.5, -2.0], np.float32)),
                                     nh.from_array(np.array([7.0, 8.0], np.float32))])
    (tmp_path / "seq.pb").write_bytes(seq.SerializeToString())
    np.save(tmp_path / "x.npy", np.array([0.25, 1.0], np.float32))
    out = tmp_path / "out.json"
    run("exec", f"--onnx={m}", *FAST, f"--loadInputs=seq:{tmp_path / 'seq.pb'},x:{tmp_path / 'x.npy'}",
        f"--exportOutput={out}", check_rc=0)
    assert json.loads(out.read_text())[0]["values"] == [1.75, -1.0]
    # the same through a sequence output: named with its length by --dumpOutput
    p = run("exec", f"--onnx={m}", *FAST, f"--loadInputs=seq:{tmp_path / 'seq.pb'},x:{tmp_path / 'x.npy'}",
            "--dumpOutput", check_rc=0)
    assert "y: (2)" in p.stdout and "1.75 -1" in p.stdout, p.stdout
    # without a file, or from a file that cannot hold a sequence: a clear error
    p = run("exec", f"--onnx={m}", *FAST, check_rc=1)
    assert "input 'seq' is a sequence" in p.stderr and "--loadInputs=seq:FILE.pb" in p.stderr, p.stderr
    p = run("exec", f"--onnx={m}", *FAST, f"--loadInputs=seq:{tmp_path / 'x.npy'}", check_rc=1)
    assert "raw and .npy files cannot hold" in p.stderr, p.stderr


def test_truncated_samples(engine, tmp_path):
    data = engine.read_bytes()
    for n in sorted({0, 5, 8, 100, 127, 128, 200, len(data) // 2, len(data) - 1}):
        f = tmp_path / f"t{n}.engine"
        f.write_bytes(data[:n])
        p = run("inspect", f)
        assert p.returncode == 1
        if n > 0:
            assert "truncated" in p.stderr, (n, p.stderr)


def patch_header(data, off, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, off, value)
    struct.pack_into("<I", b, 124, zlib.crc32(bytes(b[:124])))
    return bytes(b)


def test_incompatible_version_and_cpu(engine, tmp_path):
    data = engine.read_bytes()
    f = tmp_path / "v.engine"
    f.write_bytes(patch_header(patch_header(data, 16, "<H", 0), 18, "<H", 9))
    p = run("exec", f"--loadEngine={f}", *FAST, check_rc=1)
    assert "built by kiln 0.9.0" in p.stderr and "rebuild the engine on this machine" in p.stderr
    assert "kiln exec --onnx=" in p.stderr and "mlp.onnx" in p.stderr
    # an engine that needs AMX (bit 9) and AVX-512 (bit 2): not on this CPU (or loads if it has them)
    f2 = tmp_path / "f.engine"
    f2.write_bytes(patch_header(data, 40, "<Q", (1 << 9) | (1 << 2)))
    p = run("exec", f"--loadEngine={f2}", *FAST)
    if p.returncode != 0:
        assert "for AVX-512 (avx512f amx)" in p.stderr and "missing:" in p.stderr
    # inspect still reads it and says whether it loads here
    j = json.loads(run("inspect", "--json", f2, check_rc=0).stdout)
    assert j["required_cpu_features"] == "avx512f amx"
    # a newer format
    f3 = tmp_path / "n.engine"
    f3.write_bytes(patch_header(data, 8, "<I", 2))
    assert "engine format 2" in run("exec", f"--loadEngine={f3}", *FAST, check_rc=1).stderr


def test_profile_covers_all_streams(mlp, tmp_path):
    prof = tmp_path / "p.json"
    p = run("exec", f"--onnx={mlp}", "--duration=0", "--warmUp=0", "--iterations=6", "--infStreams=2",
            f"--exportProfile={prof}", check_rc=0)
    assert "all 2 streams, 6 runs" in p.stdout, p.stdout
    assert json.loads(prof.read_text())[0]["count"] == 6
