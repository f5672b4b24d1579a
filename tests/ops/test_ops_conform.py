"""test_ops_conform.py - the long-tail conformance kernels against ONNX Runtime (or numpy).

One-node models built with tools/op_case.py: string ops, NonMaxSuppression, Det,
CenterCropPad, TensorScatter, Swish, the ai.onnx.ml ops, TfIdfVectorizer, MaxUnpool with
output_shape, legacy PRelu, BatchNormalization in training mode and the float16/float64/
uint8 paths of pooling and softmax. References come from ONNX Runtime where it has the
op, else from a numpy formula written here (say so in the case name: *_np). All cases are
checked with a single `kiln verify` run, so the file takes a few seconds.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
op_case = pytest.importorskip("op_case", reason="tools/op_case.py is not in this checkout")

RNG = np.random.default_rng(20240607)
CASES: list[tuple] = []  # (name, spec, inputs, opset, order, expected, extra_opsets)


def case(name, spec, inputs, opset=17, order=None, expected=None, extra=None):
    CASES.append((name, spec, inputs, opset, order, expected, extra))


def f32(*shape, lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def strs(*v):
    return np.array(v, dtype=object)


# ---- string ops ------------------------------------------------------------------------
case("StringConcat_bcast", {"op_type": "StringConcat"}, {"a": strs("ab", "", "ü"), "b": strs("x")}, opset=20)
case("StringConcat_2d", {"op_type": "StringConcat"},
     {"a": np.array([["a", "b"], ["c", "d"]], dtype=object), "b": strs("1", "2")}, opset=20)
for name, attrs, x in [
    # no delimiter: runs of whitespace split (ONNX's reference uses str.split(); ONNX Runtime
    # splits on ' ' only, so these inputs use spaces)
    ("ws", {}, strs("  a  b ", "", "c d  e")),
    ("dot", {"delimiter": "."}, strs("a.b..c.", ".", "abc")),
    ("maxsplit", {"delimiter": "-", "maxsplit": 1}, strs("a-b-c", "x")),
    ("ws_maxsplit", {"maxsplit": 1}, strs(" a b  c ", "q")),
    ("multichar", {"delimiter": "<>"}, strs("a<>b<><>c", "<>")),
]:
    case(f"StringSplit_{name}", {"op_type": "StringSplit", "attrs": attrs, "outputs": ["y", "n"]}, {"x": x},
         opset=20)
for name, attrs, x in [
    ("lower_stop_ci", {"case_change_action": "LOWER", "stopwords": ["the", "A"]}, strs("The", "cat", "a", "SAT")),
    ("upper_cs", {"case_change_action": "UPPER", "is_case_sensitive": 1, "stopwords": ["The"]},
     strs("The", "the", "dog")),
    ("none_2d", {"stopwords": ["x"]}, np.array([["x", "Y", "z"]], dtype=object)),
    ("all_removed", {"stopwords": ["a"]}, strs("a", "A")),
]:
    # locale C: ONNX Runtime's default en_US needs that locale installed on the machine
    case(f"StringNormalizer_{name}", {"op_type": "StringNormalizer", "attrs": {**attrs, "locale": "C"}}, {"x": x},
         opset=10)
for name, pat, x in [
    ("digits", r"\d+-\d{2}", strs("123-45", "12-345", "-45", "9-99")),
    ("class_in_bracket", r"[\w.-]+@[a-z]+\.(com|org)", strs("a.b-c@x.com", "a b@x.com", "q@y.org", "q@y.net")),
    ("alternation_anchor", r"(cat|dog)s?", strs("cats", "dog", "cow", "catss", "")),
    ("negated_space", r"\S+\s\S+", strs("ab cd", "ab  cd", "x y")),
]:
    case(f"RegexFullMatch_{name}", {"op_type": "RegexFullMatch", "attrs": {"pattern": pat}}, {"x": x}, opset=20)

# ---- detection / linear algebra / tensor ops ------------------------------------------
def boxes(b, n):
    y1, x1 = RNG.uniform(0, 10, (b, n)), RNG.uniform(0, 10, (b, n))
    h, w = RNG.uniform(0.5, 4, (b, n)), RNG.uniform(0.5, 4, (b, n))
    return np.stack([y1, x1, y1 + h, x1 + w], axis=-1).astype(np.float32)


for name, attrs, b, c, n, mo, iou, sc in [
    ("basic", {}, 1, 1, 20, 5, 0.5, 0.0),
    ("multi", {}, 2, 3, 30, 4, 0.3, 0.2),
    ("center", {"center_point_box": 1}, 1, 2, 15, 10, 0.4, 0.1),
    ("zero_max", {}, 1, 1, 5, 0, 0.5, 0.0),
]:
    case(f"NonMaxSuppression_{name}", {"op_type": "NonMaxSuppression", "attrs": attrs},
         {"boxes": boxes(b, n), "scores": RNG.uniform(0, 1, (b, c, n)).astype(np.float32),
          "m": np.array([mo], np.int64), "iou": np.array([iou], np.float32), "s": np.array([sc], np.float32)},
         opset=11)
for shape in [(3, 3), (2, 4, 4), (1, 1), (5, 6, 6)]:
    x = f32(*shape)
    case(f"Det_{'x'.join(map(str, shape))}", {"op_type": "Det"}, {"x": x}, opset=11)
case("Det_singular", {"op_type": "Det"}, {"x": np.array([[1, 2], [2, 4]], np.float32)}, opset=11)
xd = RNG.uniform(-2, 2, (3, 4, 4))
case("Det_double_np", {"op_type": "Det"}, {"x": xd}, opset=11, expected=[np.linalg.det(xd)])
for name, xs, target, axes in [
    ("crop_pad_all", (7, 6, 3), [4, 9, 3], None),
    ("axes_neg", (2, 9, 5), [4, 8], [-2, -1]),
    ("odd_pad", (3, 3), [6, 2], None),
]:
    attrs = {"axes": axes} if axes else {}
    case(f"CenterCropPad_{name}", {"op_type": "CenterCropPad", "attrs": attrs},
         {"x": f32(*xs), "shape": np.array(target, np.int64)}, opset=18)
x = f32(4, 5)
case("Swish_np", {"op_type": "Swish", "attrs": {"alpha": 0.7}}, {"x": x}, opset=24,
     expected=[(x / (1 + np.exp(-0.7 * x))).astype(np.float32)])


def tensor_scatter_ref(past, upd, idx, axis, circular):
    out = past.copy()
    s, S = upd.shape[axis], past.shape[axis]
    for b in range(past.shape[0]):
        for j in range(s):
            pos = (idx[b] + j) % S if circular else idx[b] + j
            src = [b] + [slice(None)] * (past.ndim - 1)
            dst = list(src)
            src[axis], dst[axis] = j, pos
            out[tuple(dst)] = upd[tuple(src)]
    return out


for name, ps, us, idx, axis, mode in [
    ("linear", (2, 3, 6, 4), (2, 3, 2, 4), [1, 4], -2, "linear"),
    ("circular", (3, 5, 2), (3, 3, 2), [4, 0, 3], 1, "circular"),
]:
    past, upd, ix = f32(*ps), f32(*us), np.array(idx, np.int64)
    case(f"TensorScatter_{name}_np", {"op_type": "TensorScatter", "attrs": {"axis": axis, "mode": mode}},
         {"past": past, "upd": upd, "i": ix}, opset=24,
         expected=[tensor_scatter_ref(past, upd, ix, axis % past.ndim, mode == "circular")])

# ---- ai.onnx.ml ------------------------------------------------------------------------
ML = {"ai.onnx.ml": 3}
case("Binarizer", {"op_type": "Binarizer", "domain": "ai.onnx.ml", "attrs": {"threshold": 0.25}},
     {"x": f32(3, 7)}, extra=ML)
case("ArrayFeatureExtractor", {"op_type": "ArrayFeatureExtractor", "domain": "ai.onnx.ml"},
     {"x": f32(2, 3, 5), "i": np.array([4, 0, 4], np.int64)}, extra=ML)
case("LabelEncoder_str_to_int", {"op_type": "LabelEncoder", "domain": "ai.onnx.ml",
                                 "attrs": {"keys_strings": ["b", "a", "zz"], "values_int64s": [7, 8, 9],
                                           "default_int64": -5}},
     {"x": strs("a", "q", "zz", "b", "")}, extra=ML)
case("LabelEncoder_int_to_str", {"op_type": "LabelEncoder", "domain": "ai.onnx.ml",
                                 "attrs": {"keys_int64s": [3, -1, 10], "values_strings": ["x", "y", "z"]}},
     {"x": np.array([[3, 4], [10, -1]], np.int64)}, extra=ML)
case("LabelEncoder_float_to_float", {"op_type": "LabelEncoder", "domain": "ai.onnx.ml",
                                     "attrs": {"keys_floats": [0.5, 1.5], "values_floats": [10.0, 20.0],
                                               "default_float": 3.0}},
     {"x": np.array([0.5, 2.0, 1.5], np.float32)}, extra=ML)

# ---- TfIdfVectorizer ------------------------------------------------------------------
pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 2, 9]
for name, attrs in [
    ("tf_uni_bi_skip2", {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 2}),
    ("idf_bi", {"mode": "IDF", "min_gram_length": 2, "max_gram_length": 2, "max_skip_count": 1,
                "weights": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]}),
    ("tfidf_all", {"mode": "TFIDF", "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 3,
                   "weights": [0.5] * 9}),
]:
    a = {"ngram_counts": [0, 4, 10], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6, 7, 8], "pool_int64s": pool, **attrs}
    case(f"TfIdfVectorizer_{name}", {"op_type": "TfIdfVectorizer", "attrs": a},
         {"x": RNG.integers(2, 10, (3, 12)).astype(np.int32)}, opset=9)
case("TfIdfVectorizer_strings", {"op_type": "TfIdfVectorizer",
                                 "attrs": {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2,
                                           "max_skip_count": 0, "ngram_counts": [0, 2], "ngram_indexes": [0, 1, 2],
                                           "pool_strings": ["a", "b", "a", "b"]}},
     {"x": strs("a", "b", "a", "b", "c", "a")}, opset=9)

# ---- fixes in existing kernels ---------------------------------------------------------
xt = np.array([[[[5, 6], [7, 8]]]], np.float32)
# output_shape larger than the default: indices address the default [1, 1, 4, 4] shape and
# keep their coordinates (ONNX's test_maxunpool_export_with_output_shape; ONNX Runtime
# scatters flat indices instead, so the reference is written here)
yu = np.zeros((1, 1, 5, 6), np.float32)
yu[0, 0, 1, 1], yu[0, 0, 1, 3], yu[0, 0, 3, 1], yu[0, 0, 3, 3] = 5, 6, 7, 8
case("MaxUnpool_output_shape_np", {"op_type": "MaxUnpool", "attrs": {"kernel_shape": [2, 2], "strides": [2, 2]}},
     {"x": xt, "i": np.array([[[[5, 7], [13, 15]]]], np.int64), "s": np.array([1, 1, 5, 6], np.int64)}, opset=11,
     expected=[yu])
x, slope = f32(2, 3, 4, 5), f32(3, lo=0, hi=1)
case("PRelu_opset6_per_channel_np", {"op_type": "PRelu"}, {"x": x, "slope": slope}, opset=6,
     expected=[np.where(x > 0, x, x * slope.reshape(3, 1, 1)).astype(np.float32)])
xb = f32(3, 4, 2, 2)
sc, bi, mu, va = f32(4), f32(4), f32(4), f32(4, lo=0.1, hi=2)
mean, var = xb.mean(axis=(0, 2, 3)), xb.var(axis=(0, 2, 3))
yb = (xb - mean.reshape(1, 4, 1, 1)) / np.sqrt(var.reshape(1, 4, 1, 1) + 1e-5) * sc.reshape(1, 4, 1, 1) \
    + bi.reshape(1, 4, 1, 1)
case("BatchNormalization_training_np", {"op_type": "BatchNormalization", "attrs": {"training_mode": 1, "momentum": 0.8},
                                        "outputs": ["y", "rm", "rv"]},
     {"x": xb, "s": sc, "b": bi, "m": mu, "v": va}, opset=15,
     expected=[yb.astype(np.float32), (mu * 0.8 + mean * 0.2).astype(np.float32),
               (va * 0.8 + var * 0.2).astype(np.float32)])
case("MaxPool_uint8", {"op_type": "MaxPool", "attrs": {"kernel_shape": [2, 2], "strides": [1, 2]}},
     {"x": RNG.integers(0, 256, (1, 2, 5, 6)).astype(np.uint8)}, opset=12)
case("MaxPool_int8", {"op_type": "MaxPool", "attrs": {"kernel_shape": [3], "pads": [1, 1]}},
     {"x": RNG.integers(-128, 128, (2, 3, 7)).astype(np.int8)}, opset=12)
case("MaxPool_float16", {"op_type": "MaxPool", "attrs": {"kernel_shape": [2, 2]}},
     {"x": f32(1, 2, 4, 4).astype(np.float16)}, opset=12)
case("AveragePool_float16", {"op_type": "AveragePool", "attrs": {"kernel_shape": [2, 2]}},
     {"x": f32(1, 2, 4, 4).astype(np.float16)}, opset=12)
case("GlobalAveragePool_float16", {"op_type": "GlobalAveragePool"}, {"x": f32(2, 3, 4, 4).astype(np.float16)})
for dt in [np.float16, np.float64]:
    for op in ["Softmax", "LogSoftmax"]:
        case(f"{op}_{np.dtype(dt).name}", {"op_type": op, "attrs": {"axis": 1}}, {"x": f32(3, 5, 2).astype(dt)},
             opset=13)
    xh = f32(3, 5, 2).astype(dt)
    yh = (np.arange(5).reshape(1, 5, 1) == xh.argmax(axis=1)[:, None, :]).astype(dt)
    case(f"Hardmax_{np.dtype(dt).name}_np", {"op_type": "Hardmax", "attrs": {"axis": 1}}, {"x": xh}, opset=13,
         expected=[yh])


@pytest.fixture(scope="module")
def verify_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("conform_cases")
    dirs, no_reference = [], {}
    for name, spec, inputs, opset, order, expected, extra in CASES:
        try:
            dirs.append(op_case.make_case(root / name, spec, inputs, opset=opset, inputs_order=order,
                                          expected=expected, extra_opsets=extra))
        except Exception as e:  # ONNX Runtime lacks this op or dtype: no reference to compare with
            no_reference[name] = str(e).splitlines()[0][:200]
    report = op_case.run_verify(dirs)
    report["no_reference"] = no_reference
    return report


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_conform_op_matches_reference(verify_report, name):
    if name in verify_report["no_reference"]:
        pytest.skip(f"ONNX Runtime cannot compute the reference: {verify_report['no_reference'][name]}")
    c = op_case.case_status(verify_report, name)
    assert c["status"] == "pass", f"{name}: {c.get('reason')} {c.get('detail', '')}"


def test_regex_re2_only_syntax_is_skipped_with_reason(tmp_path):
    """RE2 syntax POSIX lacks must be refused (a skip naming the construct), never matched wrongly."""
    d = op_case.make_case(tmp_path / "regex_lazy", {"op_type": "RegexFullMatch", "attrs": {"pattern": "a+?b"}},
                          {"x": strs("aab")}, opset=20, expected=[np.array([True])])
    c = op_case.run_verify([d])["cases"][0]
    assert c["status"] == "skip"
    assert "non-greedy" in c["reason"]


def test_nms_bad_boxes_shape_is_an_error(tmp_path):
    d = op_case.make_case(tmp_path / "nms_bad", {"op_type": "NonMaxSuppression"},
                          {"boxes": f32(1, 4, 3), "scores": f32(1, 1, 4)}, opset=11,
                          expected=[np.zeros((0, 3), np.int64)])
    c = op_case.run_verify([d])["cases"][0]
    assert c["status"] == "fail" and "[B, N, 4]" in c["reason"]
