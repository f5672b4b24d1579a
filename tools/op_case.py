"""op_case.py - build ONNX backend-test style cases for kiln's op tests, and run kiln verify.

Kernel tests across kiln use this so that every op is checked the same way `kiln verify`
checks the ONNX backend tests: a case folder holds model.onnx and
test_data_set_0/input_K.pb, output_K.pb, with reference outputs from ONNX Runtime (CPU).

    from op_case import make_case, run_verify
    d = make_case(tmp / "relu", {"op_type": "Relu"}, {"x": np.random.randn(2, 3).astype(np.float32)})
    res = run_verify([d])
    assert res["cases"][0]["status"] == "pass", res["cases"][0]["reason"]

A node spec is an onnx.NodeProto, or a dict: op_type (required), attrs (dict), outputs
(names, default ["y"]), domain. Inputs map names to numpy arrays; a list of arrays is a
sequence input; the key order is the node's input order ("" keys are not allowed, use
inputs_order with "" for omitted optional inputs). A full onnx.ModelProto can be given
instead of a node spec; then inputs bind to its graph inputs by name.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent


def kiln_bin() -> str:
    """The kiln binary under test: $KILN_BIN, else <repo>/build/kiln."""
    return os.environ.get("KILN_BIN", str(REPO / "build" / "kiln"))


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if isinstance(value, list):
        elem = helper.np_dtype_to_tensor_dtype(value[0].dtype) if value else onnx.TensorProto.FLOAT
        return helper.make_tensor_sequence_value_info(name, elem, None)
    arr = np.asarray(value)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape))


def make_node_model(spec: Any, inputs: dict[str, Any], opset: int = 17,
                    inputs_order: list[str] | None = None, extra_opsets: dict[str, int] | None = None) -> onnx.ModelProto:
    """A one-node model: graph inputs are `inputs` (types from the arrays), outputs typed by
    ONNX shape inference (elem type only when inference cannot tell)."""
    if isinstance(spec, onnx.NodeProto):
        node = spec
    else:
        order = inputs_order if inputs_order is not None else list(inputs)
        node = helper.make_node(spec["op_type"], order, spec.get("outputs", ["y"]), domain=spec.get("domain", ""),
                                name=spec.get("name", spec["op_type"].lower() + "_node"), **spec.get("attrs", {}))
    graph_inputs = [_value_info(n, v) for n, v in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "op_case", graph_inputs, outs)
    opsets = [helper.make_opsetid("", opset)]
    for dom, ver in (extra_opsets or {}).items():
        opsets.append(helper.make_opsetid(dom, ver))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="kiln-op-case")
    model.ir_version = min(model.ir_version, 10)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        known = {vi.name: vi for vi in list(inferred.graph.output) + list(inferred.graph.value_info)}
        for i, o in enumerate(graph.output):
            if o.name in known and known[o.name].type.WhichOneof("value") is not None:
                model.graph.output[i].CopyFrom(known[o.name])
    except Exception:  # inference is only a convenience: ORT still runs the model
        pass
    return model


def _to_proto(value: Any, name: str):
    if isinstance(value, list):
        return numpy_helper.from_list([np.asarray(v) for v in value], name)
    if value is None:
        return numpy_helper.from_optional(None, name)
    return numpy_helper.from_array(np.asarray(value), name)


def reference_outputs(model: onnx.ModelProto, inputs: dict[str, Any]) -> list[Any]:
    """Runs the model with ONNX Runtime on CPU."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v for k, v in inputs.items()})


def make_case(case_dir: str | os.PathLike, model_or_node_spec: Any, inputs: dict[str, Any], opset: int = 17,
              expected: list[Any] | None = None, rtol: float | None = None, atol: float | None = None,
              inputs_order: list[str] | None = None, extra_opsets: dict[str, int] | None = None) -> Path:
    """Writes a backend-test case folder and returns its path.

    expected: reference outputs; default computed with ONNX Runtime. rtol/atol: written to
    data.json beside model.onnx (kiln verify reads it)."""
    d = Path(case_dir)
    (d / "test_data_set_0").mkdir(parents=True, exist_ok=True)
    if isinstance(model_or_node_spec, onnx.ModelProto):
        model = model_or_node_spec
    else:
        model = make_node_model(model_or_node_spec, inputs, opset, inputs_order, extra_opsets)
    onnx.save(model, str(d / "model.onnx"))
    if expected is None:
        expected = reference_outputs(model, inputs)
    init_names = {i.name for i in model.graph.initializer}
    feed = [i.name for i in model.graph.input if i.name not in init_names]
    for k, name in enumerate(feed):
        if name not in inputs:
            continue
        proto = _to_proto(inputs[name], name)
        (d / "test_data_set_0" / f"input_{k}.pb").write_bytes(proto.SerializeToString())
    for k, (out, value) in enumerate(zip(model.graph.output, expected)):
        proto = _to_proto(value, out.name)
        (d / "test_data_set_0" / f"output_{k}.pb").write_bytes(proto.SerializeToString())
    if rtol is not None or atol is not None:
        tol = {}
        if rtol is not None:
            tol["rtol"] = rtol
        if atol is not None:
            tol["atol"] = atol
        (d / "data.json").write_text(json.dumps(tol))
    return d


def run_verify(dirs: Iterable[str | os.PathLike], *args: str, kiln: str | None = None,
               timeout: float = 600) -> dict:
    """Runs `kiln verify --json` on the folders. Returns the JSON report plus
    "returncode" and "stdout"/"stderr"; cases are in "cases" (name, status pass|fail|skip,
    reason, detail, ops, seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [kiln or kiln_bin(), "verify", "--json", str(report), *args, *[str(d) for d in dirs]]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        data = json.loads(report.read_text()) if report.exists() else {"cases": []}
    data["returncode"] = p.returncode
    data["stdout"] = p.stdout
    data["stderr"] = p.stderr
    return data


def case_status(result: dict, name: str) -> dict:
    """The result entry for one case by name (KeyError if absent)."""
    for c in result["cases"]:
        if c["name"] == name:
            return c
    raise KeyError(name)
