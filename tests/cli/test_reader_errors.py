"""test_reader_errors.py - `kiln inspect` on the broken-file corpus of
tools/make_broken_models.py: every file fails cleanly (exit 1, no signal) and the message
names the file and says what is wrong, where (byte offset, field path) and what to do."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(REPO / "build" / "kiln"))

# case -> facts that must appear in stderr (besides the file's path, always checked).
# Decoding errors carry "byte N" and a field path; whole-file recognitions carry the fix.
EXPECT = {
    "empty.onnx": ["the file is empty (0 bytes)", "re-export or re-download"],
    "truncated.onnx": ["field graph.initializer[", ".raw_data at byte ", "needs ", "but the file ends after",
                       "truncated", "re-download or re-export"],
    "random.onnx": ["not an ONNX model (no ModelProto found)", "first bytes are f7"],
    "page.onnx": ["HTML page", "download the raw file"],
    "checkpoint.pt": ["PyTorch checkpoint", "torch.onnx.export(model, example_inputs, 'model.onnx')"],
    "legacy.pth": ["pickle", "torch.onnx.export(model, example_inputs, 'model.onnx')"],
    "lfs_pointer.onnx": ["Git LFS pointer", "git lfs pull", "102502400 bytes"],
    "saved_model.pb": ["TensorFlow SavedModel", "tf2onnx"],
    "savedmodel_dir": ["TensorFlow SavedModel directory", "tf2onnx"],
    "frozen_graph.pb": ["TensorFlow GraphDef", "tf2onnx"],
    "engine.kiln": ["kiln engine file", "--loadEngine"],
    "raw_short.onnx": ["field graph.initializer[0] 'fc.weight' .raw_data at byte ",
                       "has 16 bytes but dims [8] of float32 need 32 bytes (too short)", "re-export"],
    "raw_long.onnx": ["field graph.initializer[0] 'fc.weight' .raw_data at byte ", "(too long)", "re-export"],
    "two_data_fields.onnx": ["field graph.initializer[0] 'fc.weight' at byte ", "has both float_data and raw_data",
                             "re-export"],
    "dtype99.onnx": ["field graph.initializer[0] 'fc.weight' .data_type at byte ", "is 99", "1 float32", "26 int2"],
    "dims_overflow.onnx": ["field graph.initializer[0] 'fc.weight' .dims at byte ", "overflow", "re-export"],
    "deep_type.onnx": ["field graph.input[0] 'X' .type.sequence_type", "at byte ", "nested more than 100 deep"],
    "deep_subgraph.onnx": ["field graph.node[0] 'if_99' .attribute[0] 'then_branch' .g", "at byte ",
                           "subgraphs are nested more than 64 deep"],
    # external data is checked after loading (kiln inspect maps it lazily): the message
    # names the tensor and its byte offset rather than the full field path
    "ext_missing": ["'w'", "at byte ", "'missing.bin' is missing", "copy it next to the model"],
    "ext_absolute": ["field graph.initializer[0] 'w' .external_data at byte ", "'/etc/passwd' is an absolute path",
                     "relative path inside the model's folder"],
    "ext_dotdot": ["field graph.initializer[0] 'w' .external_data at byte ", "contains a '..' component"],
    "ext_symlink": ["'w'", "at byte ", "outside the model's folder", "copy the data file"],
    "ext_offset_past_end": ["'w'", "at byte ", "bytes 4096..4112",
                            "has only 24 bytes"],
    "ext_length_mismatch": ["length 12 does not match dims [4] of float32 (16 bytes)"],
    "ext_negative_offset": ["external_data[1] 'offset' at byte ", "offset '-8' is not a non-negative integer"],
    "empty_dir": ["is a directory", "pass the path of the .onnx file"],
}
HELPERS = {"outside_secret.bin"}  # targets of the symlink case, not cases themselves


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("broken")
    subprocess.run([sys.executable, str(REPO / "tools" / "make_broken_models.py"), str(out)], check=True)
    return out


def target(corpus, case):
    p = corpus / case
    if p.is_dir() and (p / "model.onnx").exists():
        return p / "model.onnx"
    return p


def test_every_generated_case_is_checked(corpus):
    made = {p.name for p in corpus.iterdir()} - HELPERS
    assert made == set(EXPECT), f"unchecked: {made - set(EXPECT)}, missing: {set(EXPECT) - made}"


@pytest.mark.parametrize("case", sorted(EXPECT))
def test_broken_file_is_explained(corpus, case):
    path = target(corpus, case)
    r = subprocess.run([KILN, "inspect", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode >= 0, f"kiln died with signal {-r.returncode}: {r.stderr}"
    assert r.returncode == 1, f"exit {r.returncode}: {r.stdout}{r.stderr}"
    # Load errors go to stderr; `kiln inspect` reports external-data problems it finds
    # after loading as diagnostics on stdout: the facts must be in one of the two.
    text = r.stderr + r.stdout
    assert str(path) in text
    for fact in EXPECT[case]:
        assert fact in text, f"missing {fact!r} in: {text}"


def test_valid_model_loads(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    path = tmp_path / "ok.onnx"
    # IR 10: onnx 1.23 would write IR 14, newer than kiln reads.
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    r = subprocess.run([KILN, "inspect", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
