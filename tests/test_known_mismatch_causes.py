"""A known mismatch is keyed by its cause: where the cause does not bite, a case is judged
a plain pass (not a strict XPASS), so a new case needs no new pin.

The split float32 scale (onnxruntime's double Attention kernel multiplies q and k each by
float32(sqrt(float32(scale)))) is exact at head widths 1, 16 and 256 only; a `when:
{dtype: float64}` reaches those widths too, and there the system agrees with the oracle.
"""
from __future__ import annotations

import pytest

from conformance.case.expectations import CONDITIONS, KnownMismatch, declared
from conformance.case.loader import CaseError
from conformance.conventions.expectations import EXPECTATIONS_DIR, load_file
from tests.helpers import make_case

pytest_plugins = ["pytester"]

SPLIT = "split_scale_exact_in_float32"
SPLIT_SCALE_RUNNERS = ("onnx.attention-op.ort", "onnx.torch-export.opset23",
                       "onnx.torch-export.opset24")


def _float64_case(head_dim: int, heads: int = 2, **attention):
    return make_case(attention={"num_heads": heads, "query_features": heads * head_dim,
                                **attention},
                     inputs={"batch": 1, "query_len": 3, "self_attention": True,
                             "dtype": "float64"})


def test_split_scale_is_exact_at_widths_1_16_256_only():
    """Measured on onnxruntime's bare Attention-23 graph in double for d = 1..256: equal to
    the exact-scale reference (<= 2e-15) at d = 1, 16, 256, 1e-8 to 2e-7 off elsewhere."""
    read = CONDITIONS[SPLIT].read
    assert [d for d in range(1, 257) if read(_float64_case(d, heads=1))] == [1, 16, 256]
    # 1/sqrt(4) = 0.5 is a float32 number but its square root is not: the older word
    # scale_exact_in_float32 holds there, the split scale does not
    assert CONDITIONS["scale_exact_in_float32"].read(_float64_case(4))
    assert not read(_float64_case(4))


@pytest.mark.parametrize("scale, exact", [(0.25, True), (1.0, True), (4.0, True),
                                          (0.5, False), (0.01, False), (1 / 3, False)])
def test_split_scale_reads_a_set_scale(scale, exact):
    assert CONDITIONS[SPLIT].read(_float64_case(8, scale=scale)) is exact


@pytest.mark.parametrize("runner", SPLIT_SCALE_RUNNERS)
def test_split_scale_runners_declare_nothing_where_the_scale_is_exact(runner):
    """d = 16 and d = 1 in float64: no known mismatch applies (a pass is a plain pass);
    d = 4 and d = 8: the declared one does."""
    file = load_file(EXPECTATIONS_DIR / f"{runner}.yaml", runner)
    for d in (1, 16):
        assert declared(_float64_case(d), runner, file).known_mismatch == "", (runner, d)
    for d in (4, 8):
        assert "float32" in declared(_float64_case(d), runner, file).known_mismatch


def test_a_dtype_only_declaration_is_what_the_condition_fixes():
    """The planted over-general declaration matches the d = 16 case the system gets right;
    keyed by the cause it does not."""
    loose = KnownMismatch({"dtype": ("float64",)}, "split scale")
    keyed = KnownMismatch({"dtype": ("float64",), SPLIT: (False,)}, "split scale")
    assert loose.matches(_float64_case(16)) and not keyed.matches(_float64_case(16))
    assert keyed.matches(_float64_case(8))


@pytest.mark.parametrize("when, words", [
    ("{split_scale_exact_in_float32: 'no'}", "one of"),
    ("{split_scale_exact_in_float32: 0}", "one of"),
    ("{split_scale_exact: false}", "unknown condition"),
])
def test_a_bad_split_scale_word_names_file_field_and_fix(tmp_path, when, words):
    path = tmp_path / "onnx.attention-op.ort.yaml"
    path.write_text(f"known_mismatches: [{{when: {when}, reason: 'a reason, with a link'}}]\n")
    with pytest.raises(CaseError) as info:
        load_file(path, "onnx.attention-op.ort")
    key = when.strip("{}").split(":")[0]
    assert info.value.field_name == f"known_mismatches[0].when.{key}"
    assert words in str(info.value) and str(path) in str(info.value)
    if words == "unknown condition":
        assert SPLIT in str(info.value)  # the fix: the valid words


CASES = """cases:
  - id: split-exact-16
    attention: {num_heads: 2, query_features: 32}
    inputs: {batch: 1, query_len: 3, self_attention: true, dtype: float64}
  - id: split-inexact-4
    attention: {num_heads: 2, query_features: 8}
    inputs: {batch: 1, query_len: 3, self_attention: true, dtype: float64}
"""


def _run_ort(pytester, expectations=None):
    pytest.importorskip("onnxruntime", reason="needs the onnx extra: pip install -e '.[onnx]'")
    cases = pytester.path / "cases"
    cases.mkdir(exist_ok=True)
    (cases / "split.yaml").write_text(CASES)
    args = ["-p", "no:cacheprovider", "-p", "conformance.plugin", f"--cases-dir={cases}",
            "--runner", "onnx.attention-op.ort", "-q", "-m", "not conventions",
            "--no-progress", f"--report-dir={pytester.path / 'reports'}"]
    if expectations:
        mine = pytester.path / "expectations"
        mine.mkdir(exist_ok=True)
        (mine / "onnx.attention-op.ort.yaml").write_text(expectations)
        args += ["--expectations-dir", str(mine)]
    res = pytester.runpytest_inprocess(*args)
    return int(res.ret), res.stdout.str()


def test_onnxruntime_at_an_exact_split_scale_is_a_plain_pass(pytester):
    code, out = _run_ort(pytester)
    assert code == 0, out[-3000:]
    assert "1 passed" in out and "1 xfailed" in out, out[-1500:]


def test_a_planted_dtype_only_declaration_fails_as_xpass(pytester):
    """The defect the condition exists to remove, planted: `when: {dtype: float64}` makes
    the d = 16 case a strict XPASS failure."""
    code, out = _run_ort(pytester, "known_mismatches:\n  - when: {dtype: float64}\n"
                                   "    reason: 'a planted dtype-only reason'\n")
    assert code == 1 and "1 failed" in out, out[-2000:]
    assert ("split-exact-16[onnx.attention-op.ort] passed, but a known mismatch is declared "
            "(a planted dtype-only reason)") in out


# ---- an odd head width that was the suite's: the identity rotation of hf.llama's family --

@pytest.mark.parametrize("head_dim", [1, 3])
def test_identity_rotation_is_as_wide_as_the_head(head_dim):
    """A case without rope runs the rotating modules with cos = 1, sin = 0.  The model's
    rotary table is d + 1 wide at an odd head_dim (cat(freqs, freqs) of ceil(d/2)
    frequencies); planted here, an identity of that width broadcasts a width-1 head to 2
    columns (every score doubled: hf.llama 0.0586 off at one head of width 1) or fails to
    broadcast at 3."""
    torch = pytest.importorskip("torch", reason="needs the torch extra")
    from conformance.runners.hf.rotary import RotaryHFRunner

    class WideTable(RotaryHFRunner):
        name = "test.wide-table"

        def rotary(self, torch, config):
            width = 2 * ((head_dim + 1) // 2)  # LlamaRotaryEmbedding's, at an odd head_dim
            return lambda x, pos: (torch.rand(*pos.shape, width), torch.rand(*pos.shape, width))

    case = make_case(attention={"num_heads": 1, "query_features": head_dim},
                     inputs={"batch": 2, "query_len": 3, "self_attention": True})
    module = type("Module", (), {"config": None})()
    cos, sin = WideTable().embeddings(module, torch.zeros(2, 3, head_dim), case)
    assert cos.shape == sin.shape == (2, 3, head_dim)
    assert bool((cos == 1).all()) and bool((sin == 0).all())


def test_llama_rotary_table_is_one_wider_than_an_odd_head():
    """The upstream fact the runner works around (transformers/models/llama/
    modeling_llama.py: compute_default_rope_parameters, emb = torch.cat((freqs, freqs)))."""
    pytest.importorskip("torch", reason="needs the torch extra")
    pytest.importorskip("transformers", reason="needs the hf extra")
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=1, num_attention_heads=1, num_key_value_heads=1,
                         head_dim=1)
    cos, _ = LlamaRotaryEmbedding(config)(torch.zeros(1, 3, 1), torch.arange(3)[None])
    assert cos.shape[-1] == 2


# ---- the other entries tightened to their cause -----------------------------------------

def _nan_key(position: int, batch: int = 1, **mask):
    return make_case(inputs={"batch": 2, "query_len": 3, "key_len": 4, "nonfinite": [
        {"tensor": "key", "batch": batch, "position": position, "feature": 0,
         "value": "nan"}]}, mask=mask)


def test_nonfinite_key_masked_reads_where_the_key_is():
    masked = CONDITIONS["nonfinite_key_masked"].read
    assert not masked(_nan_key(2))  # no mask: every query attends it
    assert masked(_nan_key(3, key_padding=[4, 3]))  # behind item 1's padding
    assert not masked(_nan_key(3, batch=0, key_padding=[4, 3]))  # item 0 keeps all 4
    assert masked(_nan_key(1, causal="upper_left"))  # row 0 sees key 0 only
    assert not masked(_nan_key(0, causal="upper_left"))
    rows = [[1, 1, 0, 1], [1, 1, 1, 1], [1, 0, 1, 1]]
    assert masked(_nan_key(2, attn_mask=rows)) and not masked(_nan_key(3, attn_mask=rows))
    per_item = [[[1, 1, 1, 1]] * 3, [[1, 1, 1, 0]] * 3]
    assert masked(_nan_key(3, attn_mask=per_item))
    assert not masked(_nan_key(3, batch=0, attn_mask=per_item))
    assert masked(_nan_key(2, masked_rows=[1]))


@pytest.mark.parametrize("runner", ["openvino.onnx", "openvino.torch"])
def test_openvino_nan_key_mismatch_needs_a_masked_key(runner):
    """OpenVINO spreads a masked-out key's NaN into the weights; a NaN key every query
    attends is NaN in the reference too (measured: the attended case passes once its
    answer, nan_propagates, is declared), so the entry must not reach it."""
    file = load_file(EXPECTATIONS_DIR / f"{runner}.yaml", runner)
    assert declared(_nan_key(2), runner, file).known_mismatch == ""
    assert "NaN" in declared(_nan_key(3, key_padding=[4, 3]), runner, file).known_mismatch


def _fill_case(fill: str, dtype: str, masked_row: bool):
    rows = [[1, 0, 1, 1], [0, 0, 0, 0] if masked_row else [0, 1, 1, 0], [1, 1, 0, 1]]
    return make_case(inputs={"batch": 1, "query_len": 3, "key_len": 4, "dtype": dtype},
                     mask={"attn_mask": rows, "fill": fill})


@pytest.mark.parametrize("fill, dtype, applies", [
    ("-inf", "float32", True), ("-1e9", "float16", True), ("-1e9", "bfloat16", False),
    ("-1e4", "float32", True), ("finfo_min", "float16", True),
    ("finfo_min", "bfloat16", False)])
def test_jax_dpa_fill_mismatches_need_a_fully_masked_row(fill, dtype, applies):
    """bias= and mask= agree on every row that keeps a key (0 apart, measured); on an empty
    row -inf gives NaN (-1e9 only where float16 makes it -inf) and a fill that keeps the
    scores apart (-1e4; -65504) attends unmasked, where -3.4e38 or -1e9 are uniform."""
    file = load_file(EXPECTATIONS_DIR / "jax.dpa.yaml", "jax.dpa")
    assert declared(_fill_case(fill, dtype, False), "jax.dpa", file).known_mismatch == ""
    reason = declared(_fill_case(fill, dtype, True), "jax.dpa", file).known_mismatch
    assert ("bias=" in reason) is applies, reason
