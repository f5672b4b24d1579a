"""test_ops_elem.py - the elementwise, cast, reduction, shape and index kernels against ONNX Runtime.

Every case is a one-node model built with tools/op_case.py (reference outputs from ONNX
Runtime); all cases are written first and checked with a single `kiln verify` run, so the
whole file takes a few seconds. Cases cover broadcasting, every dtype family, negative
axes, empty tensors, scalars, NaN/inf and integer edge semantics (truncating division,
modulo signs, wrapping).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
op_case = pytest.importorskip("op_case", reason="tools/op_case.py (from the runtime helper) is not in this checkout")

RNG = np.random.default_rng(1234)


def rnd(shape, dtype=np.float32, lo=-3.0, hi=3.0):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, int(lo * 10)), min(info.max, int(hi * 10)) + 1, size=shape).astype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) > 0.5
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def i64(*v):
    return np.array(v, dtype=np.int64)


CASES: list[tuple] = []  # (name, spec, inputs, opset, inputs_order)


def case(name, spec, inputs, opset=17, order=None):
    CASES.append((name, spec, inputs, opset, order))


# ---- binary arithmetic with broadcasting, all numeric dtypes ---------------------------
for op in ["Add", "Sub", "Mul", "Div"]:
    for dt in [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint32, np.float16]:
        a, b = rnd((2, 3, 4), dt, 1, 9), rnd((3, 1), dt, 1, 9)
        case(f"{op}_{np.dtype(dt).name}_bcast", {"op_type": op}, {"a": a, "b": b})
    case(f"{op}_scalar_rhs", {"op_type": op}, {"a": rnd((5, 7)), "b": np.array(2.5, np.float32)})
    case(f"{op}_empty", {"op_type": op}, {"a": rnd((0, 3)), "b": rnd((1, 3))})
case("Div_int_trunc", {"op_type": "Div"}, {"a": np.array([7, -7, 7, -7], np.int32), "b": np.array([2, 2, -2, -2], np.int32)})
case("Add_int8_wrap", {"op_type": "Add"}, {"a": np.array([127, -128], np.int8), "b": np.array([1, -1], np.int8)})
case("Mod_int_sign", {"op_type": "Mod"}, {"a": np.array([7, -7, 7, -7, 0], np.int64), "b": np.array([3, 3, -3, -3, 5], np.int64)})
case("Mod_fmod_float", {"op_type": "Mod", "attrs": {"fmod": 1}}, {"a": rnd((4, 5)), "b": rnd((5,), lo=0.5, hi=2)})
case("Mod_fmod_int", {"op_type": "Mod", "attrs": {"fmod": 1}}, {"a": np.array([7, -7, 7, -7], np.int32), "b": np.array([3, 3, -3, -3], np.int32)})
case("Pow_float", {"op_type": "Pow"}, {"a": rnd((3, 4), lo=0.1, hi=3), "b": rnd((4,), lo=-2, hi=2)})
case("Pow_square", {"op_type": "Pow"}, {"a": rnd((3, 4)), "b": np.array(2.0, np.float32)})
case("Pow_mixed_int_base", {"op_type": "Pow"}, {"a": np.array([1, 2, 3], np.int64), "b": np.array([2.0, 3.0, 0.0], np.float32)})
case("Pow_float_int_exp", {"op_type": "Pow"}, {"a": rnd((2, 3), lo=0.5, hi=2), "b": np.array([1, 2, 3], np.int32)})
for op in ["Max", "Min", "Sum", "Mean"]:
    case(f"{op}_3_inputs", {"op_type": op}, {"a": rnd((3, 1)), "b": rnd((1, 4)), "c": rnd((4,))})
    case(f"{op}_1_input", {"op_type": op}, {"a": rnd((2, 2))})
case("Max_int", {"op_type": "Max"}, {"a": rnd((3, 4), np.int32), "b": rnd((4,), np.int32)})
case("PRelu_bcast", {"op_type": "PRelu"}, {"x": rnd((2, 3, 4)), "slope": rnd((3, 1))})
for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]:
    for dt in [np.float32, np.int64, np.int8]:
        case(f"{op}_{np.dtype(dt).name}", {"op_type": op}, {"a": rnd((3, 4), dt, -2, 2), "b": rnd((4,), dt, -2, 2)})
case("Equal_bool", {"op_type": "Equal"}, {"a": rnd((5,), np.bool_), "b": rnd((5,), np.bool_)})
for op in ["And", "Or", "Xor"]:
    case(f"{op}_bcast", {"op_type": op}, {"a": rnd((2, 3, 4), np.bool_), "b": rnd((4,), np.bool_)})
for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]:
    case(f"{op}_i32", {"op_type": op}, {"a": rnd((3, 4), np.int32), "b": rnd((4,), np.int32)}, opset=18)
case("BitShift_left", {"op_type": "BitShift", "attrs": {"direction": "LEFT"}},
     {"a": np.array([1, 2, 3], np.uint32), "b": np.array([1, 4, 31], np.uint32)})
case("BitShift_right", {"op_type": "BitShift", "attrs": {"direction": "RIGHT"}},
     {"a": np.array([255, 16, 3], np.uint8), "b": np.array([1, 4, 1], np.uint8)})
case("Where_bcast", {"op_type": "Where"}, {"c": rnd((3, 1), np.bool_), "x": rnd((1, 4)), "w": rnd((3, 4))})
case("Where_int64", {"op_type": "Where"}, {"c": rnd((5,), np.bool_), "x": rnd((5,), np.int64), "w": np.array(7, np.int64)})

# ---- unary ------------------------------------------------------------------------------
UNARY = {
    "Abs": (-3, 3), "Neg": (-3, 3), "Floor": (-3, 3), "Ceil": (-3, 3), "Sqrt": (0, 9), "Reciprocal": (0.5, 3),
    "Exp": (-10, 10), "Log": (0.1, 9), "Sin": (-3, 3), "Cos": (-3, 3), "Tan": (-1, 1), "Asin": (-0.9, 0.9),
    "Acos": (-0.9, 0.9), "Atan": (-3, 3), "Sinh": (-3, 3), "Cosh": (-3, 3), "Asinh": (-3, 3), "Acosh": (1.1, 5),
    "Atanh": (-0.9, 0.9), "Erf": (-3, 3), "Sign": (-3, 3), "Relu": (-3, 3), "Sigmoid": (-20, 20),
    "Tanh": (-10, 10), "Softplus": (-10, 10), "Softsign": (-3, 3), "HardSwish": (-5, 5), "Mish": (-5, 5),
}
for op, (lo, hi) in UNARY.items():
    case(f"{op}_f32", {"op_type": op}, {"x": rnd((4, 33), lo=lo, hi=hi)}, opset=18)
    case(f"{op}_f64", {"op_type": op}, {"x": rnd((7,), np.float64, lo, hi)}, opset=18)
case("Round_half_even", {"op_type": "Round"}, {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6], np.float32)})
case("Exp_large_tensor", {"op_type": "Exp"}, {"x": rnd((70000,), lo=-80, hi=80)})
case("Sigmoid_f16", {"op_type": "Sigmoid"}, {"x": rnd((3, 5), np.float16)})
for op in ["Abs", "Neg", "Sign", "Relu"]:
    case(f"{op}_int32", {"op_type": op}, {"x": rnd((9,), np.int32)}, opset=18)
case("Not", {"op_type": "Not"}, {"x": rnd((3, 3), np.bool_)})
case("BitwiseNot_u8", {"op_type": "BitwiseNot"}, {"x": rnd((6,), np.uint8, 0, 25)}, opset=18)
case("LeakyRelu", {"op_type": "LeakyRelu", "attrs": {"alpha": 0.2}}, {"x": rnd((10,))})
case("Elu", {"op_type": "Elu", "attrs": {"alpha": 0.7}}, {"x": rnd((10,))})
case("Selu", {"op_type": "Selu"}, {"x": rnd((10,))})
case("Celu", {"op_type": "Celu", "attrs": {"alpha": 1.5}}, {"x": rnd((10,))})
case("HardSigmoid", {"op_type": "HardSigmoid", "attrs": {"alpha": 0.3, "beta": 0.4}}, {"x": rnd((10,))})
case("ThresholdedRelu", {"op_type": "ThresholdedRelu", "attrs": {"alpha": 0.5}}, {"x": rnd((10,))})
case("Shrink", {"op_type": "Shrink", "attrs": {"lambd": 1.0, "bias": 0.5}}, {"x": rnd((10,))})
case("Clip_inputs", {"op_type": "Clip"}, {"x": rnd((4, 5)), "lo": np.array(-1, np.float32), "hi": np.array(1, np.float32)})
case("Clip_int_min_only", {"op_type": "Clip"}, {"x": rnd((8,), np.int64), "lo": np.array(-5, np.int64)})
case("IsNaN", {"op_type": "IsNaN"}, {"x": np.array([1, np.nan, np.inf, -np.inf], np.float32)})
case("IsInf_pos", {"op_type": "IsInf", "attrs": {"detect_negative": 0}}, {"x": np.array([1, np.nan, np.inf, -np.inf], np.float32)})

# ---- cast -------------------------------------------------------------------------------
CAST_TYPES = {np.float32: 1, np.float64: 11, np.int32: 6, np.int64: 7, np.int8: 3, np.uint8: 2, np.float16: 10, np.bool_: 9}
for src in [np.float32, np.int64, np.uint8, np.float16, np.bool_]:
    for dst, code in CAST_TYPES.items():
        if src is dst:
            continue
        x = rnd((3, 4), src, 0, 9) if src is not np.bool_ else rnd((3, 4), np.bool_)
        case(f"Cast_{np.dtype(src).name}_{np.dtype(dst).name}", {"op_type": "Cast", "attrs": {"to": code}}, {"x": x})
case("Cast_float_trunc", {"op_type": "Cast", "attrs": {"to": 6}}, {"x": np.array([1.7, -1.7, 0.5, -0.5], np.float32)})
case("CastLike", {"op_type": "CastLike"}, {"x": rnd((4,)), "like": np.zeros((1,), np.float64)})

# ---- reductions -------------------------------------------------------------------------
for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSumExp", "ReduceSumSquare"]:
    case(f"{op}_axes_keep", {"op_type": op}, {"x": rnd((3, 4, 5)), "axes": i64(0, -1)}, opset=18)
    case(f"{op}_all_nokeep", {"op_type": op, "attrs": {"keepdims": 0}}, {"x": rnd((3, 4))}, opset=18)
    case(f"{op}_middle", {"op_type": op, "attrs": {"keepdims": 0}}, {"x": rnd((2, 6, 3)), "axes": i64(1)}, opset=18)
case("ReduceLogSum", {"op_type": "ReduceLogSum"}, {"x": rnd((3, 4), lo=0.1, hi=2), "axes": i64(1)}, opset=18)
case("ReduceSum_int64", {"op_type": "ReduceSum"}, {"x": rnd((3, 4), np.int64), "axes": i64(1)}, opset=13)
case("ReduceMax_int32", {"op_type": "ReduceMax"}, {"x": rnd((3, 4), np.int32), "axes": i64(0)}, opset=18)
case("ReduceMean_attr_axes_opset13", {"op_type": "ReduceMean", "attrs": {"axes": [1]}}, {"x": rnd((3, 4))}, opset=13)
case("ReduceSum_noop", {"op_type": "ReduceSum", "attrs": {"noop_with_empty_axes": 1}},
     {"x": rnd((3, 4)), "axes": np.zeros((0,), np.int64)}, opset=13)
case("ReduceSum_empty_axis", {"op_type": "ReduceSum"}, {"x": rnd((3, 0)), "axes": i64(1)}, opset=13)
case("ArgMax_last", {"op_type": "ArgMax", "attrs": {"axis": 1, "select_last_index": 1}},
     {"x": np.array([[1, 3, 3], [2, 2, 1]], np.float32)})
case("ArgMin_nokeep", {"op_type": "ArgMin", "attrs": {"axis": -1, "keepdims": 0}}, {"x": rnd((3, 5))})

# ---- shape / data movement ------------------------------------------------------------
case("Reshape_0_-1", {"op_type": "Reshape"}, {"x": rnd((2, 3, 4)), "s": i64(0, -1)})
case("Reshape_allowzero", {"op_type": "Reshape", "attrs": {"allowzero": 1}}, {"x": rnd((0, 3)), "s": i64(3, 0)}, opset=14)
case("Flatten_neg", {"op_type": "Flatten", "attrs": {"axis": -2}}, {"x": rnd((2, 3, 4))})
case("Squeeze", {"op_type": "Squeeze"}, {"x": rnd((1, 3, 1)), "axes": i64(-1)})
case("Unsqueeze", {"op_type": "Unsqueeze"}, {"x": rnd((3, 4)), "axes": i64(0, -1)})
for perm in [[1, 0, 2], [0, 2, 1], [2, 1, 0], [0, 2, 3, 1], [0, 3, 1, 2]]:
    shape = (2, 3, 4) if len(perm) == 3 else (2, 3, 4, 5)
    case("Transpose_" + "".join(map(str, perm)), {"op_type": "Transpose", "attrs": {"perm": perm}}, {"x": rnd(shape)})
case("Transpose_int8_default", {"op_type": "Transpose"}, {"x": rnd((3, 5), np.int8)})
case("Concat_axis1_empty", {"op_type": "Concat", "attrs": {"axis": 1}}, {"a": rnd((2, 3)), "b": rnd((2, 0)), "c": rnd((2, 2))})
case("Concat_neg_axis", {"op_type": "Concat", "attrs": {"axis": -1}}, {"a": rnd((2, 2, 1), np.int64), "b": rnd((2, 2, 3), np.int64)})
case("Split_input", {"op_type": "Split", "attrs": {"axis": 1}, "outputs": ["y0", "y1"]}, {"x": rnd((2, 5)), "s": i64(2, 3)}, opset=13)
case("Split_num_outputs", {"op_type": "Split", "attrs": {"axis": 0, "num_outputs": 3}, "outputs": ["a", "b", "c"]},
     {"x": rnd((7, 2))}, opset=18)
case("Expand", {"op_type": "Expand"}, {"x": rnd((3, 1)), "s": i64(2, 1, 4)})
case("Tile", {"op_type": "Tile"}, {"x": rnd((2, 3)), "r": i64(2, 3)})
for mode in ["constant", "reflect", "edge", "wrap"]:
    case(f"Pad_{mode}", {"op_type": "Pad", "attrs": {"mode": mode}}, {"x": rnd((3, 4)), "p": i64(1, 2, 2, 1)}, opset=19)
case("Pad_negative_value", {"op_type": "Pad"}, {"x": rnd((3, 4)), "p": i64(-1, 1, 0, 2), "v": np.array(9, np.float32)})
case("Shape_start_end", {"op_type": "Shape", "attrs": {"start": 1, "end": -1}}, {"x": rnd((2, 3, 4, 5))}, opset=15)
case("Size", {"op_type": "Size"}, {"x": rnd((2, 3))})
case("ConstantOfShape", {"op_type": "ConstantOfShape"}, {"s": i64(2, 3)})
case("Range_int", {"op_type": "Range"}, {"a": np.array(1, np.int64), "b": np.array(10, np.int64), "c": np.array(3, np.int64)})
case("Range_float_neg", {"op_type": "Range"}, {"a": np.array(5, np.float32), "b": np.array(1, np.float32), "c": np.array(-1.5, np.float32)})
case("DepthToSpace_DCR", {"op_type": "DepthToSpace", "attrs": {"blocksize": 2}}, {"x": rnd((1, 8, 2, 3))})
case("DepthToSpace_CRD", {"op_type": "DepthToSpace", "attrs": {"blocksize": 2, "mode": "CRD"}}, {"x": rnd((1, 8, 2, 3))})
case("SpaceToDepth", {"op_type": "SpaceToDepth", "attrs": {"blocksize": 2}}, {"x": rnd((1, 2, 4, 6))})
case("EyeLike_k", {"op_type": "EyeLike", "attrs": {"k": 1}}, {"x": rnd((3, 4))})

# ---- gather / scatter / index ops ------------------------------------------------------
case("Gather_neg_idx", {"op_type": "Gather", "attrs": {"axis": 1}}, {"x": rnd((3, 5)), "i": i64(-1, 0, 2)})
case("Gather_scalar_idx", {"op_type": "Gather"}, {"x": rnd((4, 2)), "i": np.array(2, np.int64)})
case("GatherElements", {"op_type": "GatherElements", "attrs": {"axis": 1}}, {"x": rnd((3, 4)), "i": i64(0, 3, -1, 1, 2, 0).reshape(3, 2)})
case("GatherND_batch", {"op_type": "GatherND", "attrs": {"batch_dims": 1}}, {"x": rnd((2, 3, 4)), "i": i64(1, 0, 2, 3).reshape(2, 1, 2)})
case("ScatterElements_add", {"op_type": "ScatterElements", "attrs": {"axis": 0, "reduction": "add"}},
     {"x": rnd((3, 3)), "i": i64(1, 0, 2, 1, 1, 1).reshape(2, 3), "u": rnd((2, 3))}, opset=18)
case("ScatterND", {"op_type": "ScatterND"}, {"x": rnd((4, 3)), "i": i64(1, 3).reshape(2, 1), "u": rnd((2, 3))})
case("Slice_neg_step", {"op_type": "Slice"}, {"x": rnd((5, 6)), "s": i64(-1, 1), "e": i64(-6, 100), "a": i64(0, 1), "st": i64(-2, 2)})
case("Slice_clamp", {"op_type": "Slice"}, {"x": rnd((4, 4)), "s": i64(-100), "e": i64(2), "a": i64(-1)})
case("TopK_smallest", {"op_type": "TopK", "attrs": {"largest": 0, "axis": 0}, "outputs": ["v", "i"]},
     {"x": rnd((5, 3)), "k": i64(2)})
case("TopK_ties", {"op_type": "TopK", "outputs": ["v", "i"]}, {"x": np.array([[1, 3, 3, 2]], np.float32), "k": i64(3)})
case("NonZero", {"op_type": "NonZero"}, {"x": np.array([[0, 1, 0], [2, 0, 3]], np.float32)})
case("Unique_axis", {"op_type": "Unique", "attrs": {"axis": 0}, "outputs": ["y", "i", "inv", "c"]},
     {"x": np.array([[1, 2], [3, 4], [1, 2]], np.int64)})
case("Unique_unsorted", {"op_type": "Unique", "attrs": {"sorted": 0}, "outputs": ["y", "i", "inv", "c"]},
     {"x": np.array([3, 1, 3, 2, 1], np.float32)})
case("Compress_axis", {"op_type": "Compress", "attrs": {"axis": 1}}, {"x": rnd((2, 3)), "c": np.array([True, False, True])})
case("OneHot_neg", {"op_type": "OneHot", "attrs": {"axis": 0}},
     {"i": i64(0, -1, 2), "d": np.array(4, np.int64), "v": np.array([0, 5], np.float32)})
case("Trilu_lower_k", {"op_type": "Trilu", "attrs": {"upper": 0}}, {"x": rnd((2, 3, 4)), "k": np.array(1, np.int64)})
case("CumSum_excl_rev", {"op_type": "CumSum", "attrs": {"exclusive": 1, "reverse": 1}}, {"x": rnd((3, 4)), "a": np.array(1, np.int32)})
case("ReverseSequence", {"op_type": "ReverseSequence", "attrs": {"time_axis": 1, "batch_axis": 0}},
     {"x": rnd((3, 4, 2)), "l": i64(4, 2, 1)})


@pytest.fixture(scope="module")
def verify_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("elem_cases")
    dirs, no_reference = [], {}
    for name, spec, inputs, opset, order in CASES:
        try:
            dirs.append(op_case.make_case(root / name, spec, inputs, opset=opset, inputs_order=order))
        except Exception as e:  # ONNX Runtime lacks a kernel for this dtype: no reference to compare with
            no_reference[name] = str(e).splitlines()[0][:200]
    report = op_case.run_verify(dirs)
    report["no_reference"] = no_reference
    return report


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_elem_op_matches_onnxruntime(verify_report, name):
    if name in verify_report["no_reference"]:
        pytest.skip(f"ONNX Runtime cannot compute the reference: {verify_report['no_reference'][name]}")
    c = op_case.case_status(verify_report, name)
    assert c["status"] == "pass", f"{name}: {c.get('reason')} {c.get('detail', '')}"


def test_gather_out_of_range_is_an_error(tmp_path):
    """A hostile index must fail with a message naming the node, never crash."""
    x = rnd((3, 4))
    d = op_case.make_case(tmp_path / "gather_oob", {"op_type": "Gather", "name": "bad_gather"},
                          {"x": x, "i": i64(0, 7)}, expected=[np.zeros((2, 4), np.float32)])
    rep = op_case.run_verify([d])
    c = rep["cases"][0]
    assert c["status"] == "fail"
    text = f"{c.get('reason')} {c.get('detail', '')}"
    assert "bad_gather" in text and "out of range" in text
