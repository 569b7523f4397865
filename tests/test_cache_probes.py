"""The #20 probes (conventions/probes/cache_probes.py) name what a system does: NumPy stand-ins for
a decode step that aligns its causal mask upper-left, a window that reads w as a
symmetric band, a softcap applied after the mask, each get the word of what they do,
never the correct one; and the runners' own probes give their systems' words."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.probes import cache_probes as cp
from conformance.contract.runner import NotExpressible
from conformance.conventions.axes import Convention
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import project


def _attend(case, allowed, query_rows=None, cap=None, add=None, cap_after=False):
    """Brute-force attention of the canonical layer: allowed (T, S) True = attend; an
    additive float mask `add` (B, T, S) with softcap `cap` before or after it."""
    d, a = case_data(case), case.attention
    x, w = d.inputs, d.weights
    q, k, v = (project(x.query, w.wq, w.bq), project(x.key, w.wk, w.bk),
               project(x.value, w.wv, w.bv))
    s = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(a.qk_head_dim)
    if add is not None and cap is None:
        s = s + add[:, None]
    elif add is not None:
        s = cap * np.tanh((s + add[:, None]) / cap) if cap_after else \
            cap * np.tanh(s / cap) + add[:, None]
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("bhtd,hde->bte", p @ v, w.wo) + w.bo
    return out if query_rows is None else out[:, query_rows]


def _step(case, upper_left: bool):
    """A one-query step over the whole cache: upper-left sees key 0 only."""
    n = case.inputs.query_len
    row = np.tril(np.ones((n, n), bool))
    if upper_left:
        row[-1, 1:] = False
    return _attend(case, row, slice(n - 1, n))


def test_an_upper_left_step_is_named_so():
    case = cp.decode_case()
    assert cp.cache_alignment(case, _step(case, True), "stand-in").value == "upper_left"
    good = cp.cache_alignment(case, _step(case, False), "stand-in")
    assert good.value == "lower_right"
    assert "lower_right" in good.evidence and "upper_left" in good.evidence


def test_a_wrong_prefill_is_quoted():
    case = cp.decode_case()
    n = case.inputs.query_len
    causal = _attend(case, np.tril(np.ones((n, n), bool)), slice(0, n - 1))
    wrong = _attend(case, None, slice(0, n - 1))  # the prefill forgot the causal mask
    ok = cp.cache_alignment(case, _step(case, False), "s", causal).evidence
    bad = cp.cache_alignment(case, _step(case, False), "s", wrong).evidence
    assert float(ok.rsplit("prefill rows ", 1)[1].split()[0]) < 1e-9
    assert float(bad.rsplit("prefill rows ", 1)[1].split()[0]) > 1e-2


def test_the_flag_fact_names_the_reading_of_the_step():
    """A step run with a causal flag: a stand-in that sees key 0 only is worded as the
    flag's upper-left reading, one that sees the cache as its lower-right reading; the
    fact joins the cell's evidence and leaves its value alone."""
    case = cp.decode_case()
    upper = cp.flag_fact(case, _step(case, True), "is_causal=True")
    lower = cp.flag_fact(case, _step(case, False), "mask='causal'")
    assert upper.startswith("with is_causal=True passed at the step, it attends key 0 only: "
                            "that is the flag's upper-left reading, causal_flag")
    assert "lower-right reading" in lower and "upper-left" not in lower
    cell = cp.cache_alignment(case, _step(case, False), "s")
    noted = cp.with_fact(cell, upper)
    assert noted.value == "lower_right" and noted.evidence.endswith(upper)


def test_layout_words_read_the_shape():
    case = cp.decode_case()  # B 2, H_kv 2, d 4
    assert cp.layout_words(case, [(2, 2, 3, 4), (2, 2, 4, 4)], "two").startswith(
        "BNSH, two, growing")
    assert cp.layout_words(case, [(2, 6, 2, 4), (2, 6, 2, 4)], "two",
                           preallocated=True).startswith("BSNH, two, preallocated")
    assert cp.layout_words(case, [(2, 3, 8), (2, 4, 8)], "one").startswith("shape (2, 4, 8)")


@pytest.mark.parametrize("left,right,word", [(2, 2, "2w_minus_1_keys"), (3, 3, "2w_plus_1_keys"),
                                             (3, 0, "w_plus_1_keys"), (2, 0, "w_keys")])
def test_window_readings_are_told_apart(left, right, word):
    """w = 3: a stand-in attending keys i - left .. i + right is named by what it counts."""
    case = cp.window_case()
    n = case.inputs.query_len
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    out = _attend(case, (j >= i - left) & (j <= i + right))
    cell = cp.window_width(3, {"stand-in": (case, lambda: out)}, "stand-in")
    assert cell.value == word


def test_a_window_accepted_and_not_applied_is_ignored():
    """The probe passes the window number: a system that takes it and masks nothing has
    silently dropped it (ignored), which is not a system without the argument."""
    case = cp.window_case()
    cell = cp.window_width(3, {"stand-in": (case, lambda: _attend(case, None))}, "ignored")
    assert cell.value == "ignored" and "accepted" in cell.evidence


def test_softcap_after_the_mask_is_named_so():
    from conformance.conventions.probes.probing import probe_case, probe_mask

    case = probe_case("softcap-order")
    add = np.where(probe_mask(case), 0.0, -2.0)
    after = _attend(case, None, cap=1.0, add=add, cap_after=True)
    before = _attend(case, None, cap=1.0, add=add)
    assert cp.softcap_order(case, 1.0, add, after, "s").value == "after_mask"
    assert cp.softcap_order(case, 1.0, add, before, "s").value == "before_mask"
    plain = _attend(case, None, add=add)  # the softcap setting ignored
    assert cp.softcap_order(case, 1.0, add, plain, "s").value == "ignored"


def test_override_replaces_in_place():
    cells = [Convention("a", "1", ""), Convention("b", "not_probed", ""), Convention("c", "3", "")]
    got = cp.override(cells, [Convention("b", "2", "probed"), Convention("d", "4", "")])
    assert [(c.axis, c.value) for c in got] == [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]


def test_keras_sliding_window_translation():
    from conformance.case.loader import load_file
    from conformance.runners._export.keras_mha import sliding_window

    left, sym = (load_file(f"cases/window_{n}.yaml")[0] for n in ("left", "symmetric"))
    assert sliding_window(left) == {"sliding_window": 3}  # causal, keys i-2..i
    assert sliding_window(sym) == {"sliding_window": 3}  # |i - j| < 3
    from dataclasses import replace

    from conformance.case.model import Window

    lopsided = replace(sym, mask=replace(sym.mask, window=Window(2, 1)))
    refused = sliding_window(lopsided)
    assert isinstance(refused, NotExpressible) and "one number" in refused.reason


def test_onnx_reference_attention_cells():
    """The Attention op's cache, softcap-order and window cells, asked by the ledger of
    onnx.attention-op.reference (its own decode, a raw float mask beside softcap, a raw
    window): tests/test_onnx_ledger.py plants the wrong answers."""
    pytest.importorskip("onnx")
    from conformance.conventions.probes import ASKED_PROBES, RAW_PROBES
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    r = OnnxAttentionOp(engine="reference")
    cells = {a: ASKED_PROBES[a](r) for a in ("cache_causal_alignment", "cache_layout",
                                             "softcap_order")}
    assert cells["cache_causal_alignment"].value == "lower_right"
    assert cells["cache_layout"].value.startswith("BNSH, two tensors")
    assert cells["softcap_order"].value == "before_mask"
    assert RAW_PROBES["window_width"][1](r).value == "left_right"


def test_causal_window_readings_that_leave_the_same_keys_are_one_candidate():
    """Under a causal mask the symmetric readings leave the keys the one-sided ones do: one
    candidate each, named by the keys a query sees; without the mask all five part."""
    from conformance.conventions.probes import cache_probes as cp
    from conformance.conventions.probes.probing import probe_case

    causal = probe_case("window", inputs={"self_attention": True, "query_len": 8,
                                          "key_len": 8}, mask={"causal": "upper_left"})
    plain = probe_case("window", inputs={"self_attention": True, "query_len": 8,
                                         "key_len": 8})
    assert set(cp.window_candidates(causal, 3)) == {"w_keys", "w_plus_1_keys", "no window"}
    assert set(cp.window_candidates(plain, 3)) == set(cp.window_readings(3))
