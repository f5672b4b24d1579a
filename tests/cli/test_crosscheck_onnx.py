"""test_crosscheck_onnx.py - kiln's ONNX reader against the onnx package, model by model.

For every ../shared/onnx-backend-tests/*/*/model.onnx (about 1900 models), runs
`kiln inspect --json --show nodes --show weights` and compares what kiln read with what
onnx.load reads: IR version, opsets, graph inputs/outputs with dtypes and dims
(dim_value/dim_param), value_info types, every node (name, op, domain, inputs, outputs,
attributes and their values, floats as float32), subgraphs recursively, functions, and every
initializer (dtype, dims, FNV-1a-64 of its packed bytes). A failure names the model and the
first field that differs. One test per suite directory; models run in a process pool.
Models the onnx package itself cannot load are skipped with the reason printed.
"""
import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx_expect  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "onnx-backend-tests"
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
SUITES = ["node", "simple", "pytorch-converted", "pytorch-operator"]


def check_one(path):
    """Returns (status, path, detail): status is 'ok', 'skip' or 'fail'."""
    import onnx

    try:
        m = onnx.load(path, load_external_data=False)
    except Exception as e:  # the reference itself cannot read it
        return "skip", path, f"onnx.load failed: {e}"
    p = subprocess.run([KILN, "inspect", "--json", "--show", "nodes", "--show", "weights", path],
                       capture_output=True, text=True)
    if not p.stdout.strip():
        return "fail", path, f"kiln inspect exit {p.returncode}, no JSON: {p.stderr.strip()[:500]}"
    try:
        got = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        return "fail", path, f"kiln printed invalid JSON: {e}"
    errors = [d for d in got.get("diagnostics", []) if d["severity"] == "error"]
    # exit 1 exactly when errors were reported; anything else (a sanitizer's report, a
    # crash after printing) is a failure
    if p.returncode != (1 if errors else 0):
        return "fail", path, f"kiln inspect exit {p.returncode} with {len(errors)} errors: {p.stderr.strip()[:500]}"
    if errors:
        # kiln refuses only what ONNX's own checker refuses too
        try:
            onnx.checker.check_model(m)
            return "fail", path, f"kiln reports [{errors[0]['code']}] {errors[0]['message']} but onnx.checker accepts it"
        except Exception:
            pass
    try:
        onnx_expect.compare_model(m, got, os.path.dirname(path))
    except onnx_expect.Mismatch as e:
        return "fail", path, str(e)
    except (KeyError, TypeError) as e:
        return "fail", path, f"kiln JSON lacks or mistypes a field: {e!r}"
    return "ok", path, ""


def models(suite):
    return sorted(str(p) for p in (SHARED / suite).glob("*/model.onnx"))


@pytest.mark.parametrize("suite", SUITES)
def test_crosscheck_suite(suite):
    paths = models(suite)
    if not paths:
        pytest.skip(f"no models under {SHARED / suite} (the shared ONNX backend test data is missing)")
    with ProcessPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        results = list(ex.map(check_one, paths, chunksize=16))
    skipped = [(p, d) for s, p, d in results if s == "skip"]
    failed = [(p, d) for s, p, d in results if s == "fail"]
    for p, d in skipped:
        print(f"skipped {os.path.relpath(p, SHARED)}: {d}")
    print(f"{suite}: {len(paths)} models, {len(paths) - len(skipped) - len(failed)} match, "
          f"{len(skipped)} skipped, {len(failed)} differ")
    assert not failed, "\n".join(f"{os.path.relpath(p, SHARED)}: {d}" for p, d in failed[:30]) + (
        f"\n... and {len(failed) - 30} more" if len(failed) > 30 else "")
