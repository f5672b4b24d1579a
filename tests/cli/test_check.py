"""test_check.py - `kiln check`, `kiln contract` and `kiln explain`.

Models come from tools/make_check_models.py (one problem each). Tests assert the facts a
user needs from each message: the code, the node and op, the dimensions in the model's own
names, where a value came from, the hint, and the exit status. Shape/type checks rely on
src/ir/infer.c; profile, weight, contract and operator checks do not.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("check_models")
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_check_models.py"), str(out)], check=True)
    return out


def run(*args):
    return subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120)


def check(models, name, *flags):
    return run("check", models / f"{name}.onnx", *flags)


def blocks(text, code):
    """The text of every diagnostic with this code (header line plus indented lines)."""
    out = []
    for block in re.split(r"\n(?=(?:error|warning|note)\[)", text):
        if re.match(rf"(error|warning|note)\[{re.escape(code)}\]", block):
            out.append(block)
    return out


def one(text, code):
    found = blocks(text, code)
    assert len(found) == 1, f"expected one {code} diagnostic, got {len(found)}:\n{text}"
    return found[0]


def check_json(models, name, *flags):
    p = run("check", models / f"{name}.onnx", "--json", "-", *flags)
    assert p.stdout, p.stderr
    return p, json.loads(p.stdout)


# ---- shapes (need inference) ----------------------------------------------------------

def test_matmul_embedding_projection_mismatch(models):
    p = check(models, "matmul_mismatch")
    assert p.returncode == 1, p.stdout + p.stderr
    d = one(p.stdout, "shape-matmul-inner")
    assert d.startswith("error[shape-matmul-inner]: node '/fc/MatMul' (MatMul)")
    assert "64" in d and "128" in d
    assert "[batch, seq_len, 64]" in d          # the model's own dim names
    assert "embedding.weight" in d              # provenance: the Gather's initializer
    assert "[128, 256]" in d
    assert "hint:" in d
    assert p.stdout.rstrip().endswith("1 error, 1 warning")  # + profile-missing


def test_gemm_transb_mismatch(models):
    p = check(models, "gemm_mismatch")
    assert p.returncode == 1
    d = one(p.stdout, "shape-gemm-inner")
    assert "node '/head/Gemm' (Gemm)" in d
    assert "64" in d and "128" in d
    assert "[256, 128]" in d                    # the weight as stored (transB=1)
    assert "hint:" in d


def test_conv_channel_mismatch(models):
    p = check(models, "conv_channels")
    assert p.returncode == 1
    d = one(p.stdout, "shape-conv-channels")
    assert "node 'conv2' (Conv)" in d
    assert "16" in d and "8" in d
    assert "conv2.weight" in d
    assert "hint:" in d


def test_reshape_volume_mismatch(models):
    # [batch, 12, 64] -> [0, 512]: wrong for every batch size, so it is found on the
    # symbolic model already, in the model's own dim names, without any profile.
    p = check(models, "reshape_volume")
    assert p.returncode == 1
    d = one(p.stdout, "shape-reshape-volume")
    assert "node 'Reshape_4' (Reshape)" in d
    assert "768*batch" in d and "512*batch" in d and "[batch, 512]" in d
    assert "hint:" in d
    # at a concrete profile point the same node is reported once, not again per point
    p = check(models, "reshape_volume", "--shapes=x:2x12x64")
    assert p.returncode == 1
    assert p.stdout.count("error[shape-reshape-volume]") == 1


def test_broadcast_mismatch(models):
    p = check(models, "broadcast")
    assert p.returncode == 1
    d = one(p.stdout, "shape-broadcast")
    assert "node 'Add_3' (Add)" in d
    assert "256" in d and "128" in d
    assert "[batch, 16, 256]" in d


def test_shape_error_found_at_profile_point(models):
    """Reshape to a constant [1, 768]: only batch sizes other than 1 break it."""
    ok = check(models, "reshape_fixed_batch", "--shapes=x:1x12x64")
    assert "error[shape-reshape-volume]" not in ok.stdout, ok.stdout
    p = check(models, "reshape_fixed_batch", "--minShapes=x:1x12x64", "--optShapes=x:4x12x64",
              "--maxShapes=x:8x12x64")
    assert p.returncode == 1, p.stdout
    d = one(p.stdout, "shape-reshape-volume")
    assert "node '/flatten/Reshape' (Reshape)" in d
    assert "at profile 0 opt shapes (x=[4, 12, 64])" in d
    assert "also at profile 0 max shapes (x=[8, 12, 64]): cannot reshape [8, 12, 64] (6144 elements)" in d


# ---- profiles -----------------------------------------------------------------------------

def test_profile_unknown_input_suggests(models):
    p = check(models, "profile", "--minShapes=input_id:1x1", "--optShapes=input_id:2x8", "--maxShapes=input_id:4x16")
    assert p.returncode == 1
    d = one(p.stdout, "profile-unknown-input")
    assert "'input_id'" in d and "no input of that name" in d
    assert "did you mean 'input_ids'?" in d
    assert "'image' [batch, 3, 224, 224]" in d  # lists the real inputs with their dims


def test_profile_wrong_rank(models):
    p = check(models, "profile", "--minShapes=image:1x3x224", "--optShapes=image:1x3x224x224",
              "--maxShapes=image:2x3x224x224")
    assert p.returncode == 1
    d = one(p.stdout, "profile-rank-mismatch")
    assert "input 'image' has 4 dimensions [batch, 3, 224, 224] but --minShapes gives 3: 1x3x224" in d


def test_profile_static_dim_contradiction(models):
    p = check(models, "profile", "--minShapes=image:1x3x224x224", "--optShapes=image:1x4x224x224",
              "--maxShapes=image:2x3x224x224")
    assert p.returncode == 1
    d = one(p.stdout, "profile-static-dim-conflict")
    assert "dimension 1 of 'image' is fixed at 3 in the model but --optShapes gives 4" in d


def test_profile_min_greater_than_opt_and_opt_greater_than_max(models):
    p = check(models, "profile", "--minShapes", "input_ids:8x1", "--optShapes", "input_ids:4x64",
              "--maxShapes", "input_ids:16x32")
    assert p.returncode == 1
    found = blocks(p.stdout, "profile-order")
    assert len(found) == 2, p.stdout
    text = "\n".join(found)
    assert "input 'input_ids' dimension 0 (batch): min 8 > opt 4" in text
    assert "input 'input_ids' dimension 1 (seq_len): opt 64 > max 32" in text


def test_profile_missing_partner(models):
    p = check(models, "profile", "--minShapes=input_ids:1x1", "--optShapes=input_ids:2x8")
    assert p.returncode == 1
    d = one(p.stdout, "profile-missing-shape")
    assert "input 'input_ids' has --minShapes and --optShapes but no --maxShapes" in d
    assert "require all three" in d
    assert "add --maxShapes=input_ids:2x8" in d


def test_dynamic_input_without_profile_gives_pasteable_line(models):
    p = check(models, "profile")
    assert p.returncode == 0  # a warning, not an error
    d = one(p.stdout, "profile-missing") if len(blocks(p.stdout, "profile-missing")) == 1 else \
        blocks(p.stdout, "profile-missing")[0]
    assert "input 'input_ids' [batch, seq_len] has dynamic dimensions [batch, seq_len]" in d
    m = re.search(r"for all dynamic inputs at once: (--minShapes=\S+ --optShapes=\S+ --maxShapes=\S+)", d)
    assert m, d
    # pasting the line makes the warning go away
    q = check(models, "profile", *shlex.split(m.group(1)))
    assert q.returncode == 0, q.stdout
    assert "profile-missing" not in q.stdout
    # per-input lines use the model's fixed dims and 1 for the dynamic ones
    image = [b for b in blocks(p.stdout, "profile-missing") if "'image'" in b][0]
    assert "--minShapes=image:1x3x224x224 --optShapes=image:1x3x224x224 --maxShapes=image:1x3x224x224" in image


def test_profile_for_static_input_is_a_warning(models):
    p = check(models, "profile", "--shapes=scale:1x3,input_ids:2x4,image:2x3x224x224")
    assert p.returncode == 0, p.stdout
    d = one(p.stdout, "profile-static-input")
    assert d.startswith("warning[") and "'scale'" in d
    assert check(models, "profile", "--shapes=scale:1x3,input_ids:2x4,image:2x3x224x224", "--Werror").returncode == 1


def test_second_profile_and_missing_input_there(models):
    p = check(models, "profile", "--shapes=input_ids:2x4,image:2x3x224x224", "--profile=1",
              "--optShapes=input_ids:4x8")
    d = [b for b in blocks(p.stdout, "profile-missing") if "profile 1" in b]
    assert d and "'image'" in d[0], p.stdout
    assert "after --profile=1" in d[0]


def test_malformed_spec_is_usage_error(models):
    p = check(models, "profile", "--minShapes=input_ids:1x1x")
    assert p.returncode == 2
    assert "--minShapes: malformed shape spec at column 15" in p.stderr
    assert "^" in p.stderr
    p = check(models, "profile", "--shapes=input_ids:0x4")
    assert p.returncode == 2 and "at least 1" in p.stderr


def test_usage_errors(models):
    p = check(models, "profile", "--minshapes=x:1")
    assert p.returncode == 2 and "did you mean '--minShapes'?" in p.stderr
    p = check(models, "profile", "--json")
    assert p.returncode == 2 and "--json needs a value" in p.stderr
    p = check(models, "profile", "--profile=two")
    assert p.returncode == 2 and "profile number" in p.stderr
    p = check(models, "profile", "--profile=3")
    assert p.returncode == 2 and "--profile=1" in p.stderr
    p = run("check")
    assert p.returncode == 2 and "expected a model path" in p.stderr
    assert run("check", "--help").returncode == 0


# ---- operators and weights ----------------------------------------------------------------

def test_unknown_custom_ops_listed_together(models):
    p = check(models, "custom_ops")
    assert p.returncode == 1
    d = one(p.stdout, "unsupported-op")
    assert "2 operators (4 nodes)" in d
    assert "com.example::FancyAttention (opset 1): 3 nodes: 'attn0', 'attn1', 'attn2'" in d
    assert "com.example::FastGelu (opset 1): 1 node: 'gelu0'" in d
    assert "custom domain 'com.example'" in d
    assert re.search(r"kiln supports: .*\bRelu\b", d), d


def test_nan_weights(models):
    p = check(models, "nan_weights")
    assert p.returncode == 1
    d = one(p.stdout, "weights-nan-inf")
    assert "initializer 'layer3.bias' has 12 NaN and 1 infinite values of 256 (first at index 17)" in d
    assert "used by node '/layer3/Add' (Add) input 1" in d


def test_inf_only_mask_constant_is_a_warning(models):
    p = check(models, "inf_mask", "--shapes=mask:2x8,x:2x8")
    assert p.returncode == 0, p.stdout
    d = one(p.stdout, "weights-nan-inf")
    assert d.startswith("warning[weights-nan-inf]: Constant node 'mask_fill_const' has 1 infinite value of 1")
    assert "intentional -inf mask" in d


def test_fp16_range_only_with_fp16(models):
    p = check(models, "fp16_range")
    assert "weights-fp16" not in p.stdout
    p = check(models, "fp16_range", "--fp16")
    assert p.returncode == 1
    d = one(p.stdout, "weights-fp16-range")
    assert "initializer 'mask_fill' has 2 values outside the float16 range (largest magnitude 1e+09 > 65504)" in d
    assert "1 non-zero value also becomes 0 in float16" in d
    assert "first is at [0, 3]" in d


def test_unused_initializer(models):
    p = check(models, "unused_initializer", "--shapes=x:1x8")
    assert p.returncode == 0
    d = one(p.stdout, "unused-initializer")
    assert d.startswith("warning[unused-initializer]: initializer 'old_head.weight' is not used by any node")
    assert "float32[128, 64] (32.0 KiB)" in d
    assert check(models, "unused_initializer", "--shapes=x:1x8", "--Werror").returncode == 1


def test_dead_node(models):
    p = check(models, "dead_node", "--shapes=x:1x8")
    assert p.returncode == 0
    d = one(p.stdout, "dead-node")
    assert d.startswith("warning[dead-node]: node 'debug_Sigmoid' (Sigmoid)")
    assert "'debug_square' (Mul)" in d
    assert "'dbg'" in d


# ---- contracts --------------------------------------------------------------------------

def test_contract_diff(models, tmp_path):
    c = tmp_path / "contract.json"
    p = run("contract", models / "contract_v1.onnx", "-o", c)
    assert p.returncode == 0, p.stderr
    doc = json.loads(c.read_text())
    assert doc["kiln_contract"] == 1
    assert [i["name"] for i in doc["inputs"]] == ["input_ids", "attention_mask"]
    assert doc["inputs"][0]["shape"] == ["batch", "seq_len"]
    assert doc["outputs"][0]["shape"] == ["batch", "seq_len", 256]
    assert doc["opsets"] == [{"domain": "ai.onnx", "version": 17}]

    same = check(models, "contract_v1", "--contract", c)
    assert "contract-" not in same.stdout

    p = check(models, "contract_v2", f"--contract={c}")
    assert p.returncode == 1
    found = "\n".join(blocks(p.stdout, "contract-mismatch"))
    assert "output 'logits' dim 2 changed: 256 -> 128" in found
    assert "input 'attention_mask' float32[batch, seq_len] was removed" in found
    assert "contract: float32[batch, seq_len, 256]" in found


def test_contract_rename_and_static(models, tmp_path):
    c = tmp_path / "contract.json"
    assert run("contract", models / "contract_v1.onnx", "-o", c).returncode == 0
    doc = json.loads(c.read_text())
    doc["inputs"][0]["name"] = "ids"
    doc["inputs"][1]["shape"] = ["batch", 128]  # v1 made it dynamic: compatible for callers
    doc["outputs"][0]["shape"][0] = 1           # ... but an output that became dynamic is not
    c.write_text(json.dumps(doc))
    p = check(models, "contract_v1", "--contract", c)
    assert p.returncode == 1
    mism = "\n".join(blocks(p.stdout, "contract-mismatch"))
    assert "input 'ids' was renamed to 'input_ids'? (same position 0" in mism
    assert "output 'logits' dim 0 changed: 1 -> batch (static -> dynamic)" in mism
    changed = "\n".join(blocks(p.stdout, "contract-changed"))
    assert "input 'attention_mask' dim 1 changed: 128 -> seq_len (static -> dynamic)" in changed


def test_malformed_contract_is_usage_error(models, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"kiln_contract": 1,\n "inputs": [\n')
    p = check(models, "contract_v1", "--contract", bad)
    assert p.returncode == 2
    assert "not valid JSON" in p.stderr and "line" in p.stderr
    bad.write_text('{"inputs": []}')
    p = check(models, "contract_v1", "--contract", bad)
    assert p.returncode == 2 and "not a kiln contract" in p.stderr
    p = check(models, "contract_v1", "--contract", tmp_path / "missing.json")
    assert p.returncode == 2 and "cannot open contract" in p.stderr


# ---- JSON, healthy models, unreadable files ----------------------------------------------

def test_json_report_has_the_same_facts(models, tmp_path):
    p, doc = check_json(models, "nan_weights", "--shapes=x:2x256")
    assert p.returncode == 1
    assert doc["ok"] is False and doc["errors"] == 1
    d = [x for x in doc["diagnostics"] if x["code"] == "weights-nan-inf"]
    assert len(d) == 1
    assert d[0]["severity"] == "error"
    assert "initializer 'layer3.bias' has 12 NaN" in d[0]["message"]
    assert any("'/layer3/Add'" in f for f in d[0]["facts"])
    assert d[0]["hint"] and "checkpoint" in d[0]["hint"]
    assert set(d[0]) == {"severity", "code", "node", "op_type", "graph", "message", "facts", "hint"}
    assert doc["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 256], "type": "float32[batch, 256]"}]
    assert doc["profiles"][0]["inputs"][0] == {"name": "x", "min": [2, 256], "opt": [2, 256], "max": [2, 256],
                                              "valid": True}
    # --json FILE writes the same document; text still goes to stdout
    out = tmp_path / "r.json"
    q = check(models, "nan_weights", "--shapes=x:2x256", "--json", out)
    assert json.loads(out.read_text())["diagnostics"] == doc["diagnostics"]
    assert "error[weights-nan-inf]" in q.stdout


def test_json_shape_diagnostic(models):
    p, doc = check_json(models, "matmul_mismatch")
    d = [x for x in doc["diagnostics"] if x["code"] == "shape-matmul-inner"]
    assert len(d) == 1
    assert d[0]["node"] == "/fc/MatMul" and d[0]["op_type"] == "MatMul"
    text = d[0]["message"] + "\n".join(d[0]["facts"])
    assert "64" in text and "128" in text and "embedding.weight" in text


def test_healthy_model_passes(models):
    p = check(models, "healthy", "--minShapes=x:1x16", "--optShapes=x:8x16", "--maxShapes=x:32x16", "--fp16")
    assert p.returncode == 0, p.stdout
    assert p.stdout.strip().endswith("0 errors, 0 warnings - ok"), p.stdout
    p, doc = check_json(models, "healthy", "--shapes=x:4x16")
    assert doc["ok"] is True and doc["errors"] == 0 and doc["diagnostics"] == []
    assert doc["outputs"][0]["shape"] == ["batch", 8]


def test_unreadable_model(tmp_path):
    p = run("check", tmp_path / "nope.onnx")
    assert p.returncode == 1 and "nope.onnx" in p.stderr
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n")
    p = run("check", junk)
    assert p.returncode == 1 and p.stderr.strip()


# ---- explain and the code catalogue ---------------------------------------------------------

def catalogue():
    text = (ROOT / "src" / "diag" / "codes.def").read_text()
    return re.findall(r'^X\("([a-z0-9-]+)", DIAG_(ERROR|WARNING|NOTE)', text, re.M)


def test_explain(models):
    p = run("explain", "shape-matmul-inner")
    assert p.returncode == 0
    assert p.stdout.startswith("shape-matmul-inner (error): MatMul inner dimensions differ")
    assert "Causes:" in p.stdout and "Fix:" in p.stdout and "Example" in p.stdout
    assert run("explain", "error[weights-nan-inf]").returncode == 0  # pasted from a report
    p = run("explain", "shape-matmul-iner")
    assert p.returncode == 2 and "did you mean 'shape-matmul-inner'?" in p.stderr
    p = run("explain", "--list")
    assert p.returncode == 0
    assert len(p.stdout.strip().splitlines()) == len(catalogue())


def test_every_code_used_in_src_is_catalogued():
    known = {c for c, _ in catalogue()}
    assert len(known) == len(catalogue()), "duplicate code in codes.def"
    pattern = re.compile(r'"((?:structure|shape|type|infer|profile|weights|contract|unsupported|unused|dead)'
                         r'-[a-z0-9-]+)"')
    used = {}
    for path in (ROOT / "src").rglob("*.[ch]"):
        for code in pattern.findall(path.read_text(errors="replace")):
            used.setdefault(code, path.relative_to(ROOT))
    missing = {c: str(p) for c, p in used.items() if c not in known}
    assert not missing, f"codes used in src/ without a codes.def entry: {missing}"
    # the brief's shared codes are all there
    for code in ["structure-duplicate-producer", "structure-missing-producer", "structure-output-not-produced",
                 "structure-cycle", "structure-ir-version", "structure-opset-version",
                 "structure-missing-opset-import", "structure-initializer-is-input", "shape-matmul-inner",
                 "shape-gemm-inner", "shape-conv-channels", "shape-conv-rank", "shape-reshape-volume",
                 "shape-broadcast", "shape-concat", "shape-rank", "shape-attr-invalid", "type-mismatch",
                 "type-unsupported", "shape-declared-conflict", "infer-unknown-op"]:
        assert code in known


def test_every_code_is_documented():
    doc = (ROOT / "docs" / "CHECK.md").read_text()
    missing = [c for c, _ in catalogue() if f"`{c}`" not in doc]
    assert not missing, f"docs/CHECK.md does not describe: {missing}"
