"""jax.dpa: the translation of each case part into jax.nn.dot_product_attention's own
arguments, runs against the oracle, and its window and mask cells, each with a planted
defect the comparison must catch."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.runners.flax.dpa import JaxDPA, dpa_plan
from tests.helpers import require

require("jax")


def _case(**sections):
    raw = {"id": "t-dpa", "attention": {"num_heads": 2, "query_features": 8},
           "inputs": {"batch": 2, "query_len": 8, "self_attention": True}}
    for k, v in sections.items():
        raw[k] = {**raw.get(k, {}), **v}
    return parse_case(raw, "<test>")


def _error(case) -> float:
    r = JaxDPA()
    out = r.run(case, r.translate(case), case_data(case)).output
    return float(np.nanmax(np.abs(out - attention(case).output)))


def test_arguments_read_from_the_case():
    plan = dpa_plan(_case(mask={"causal": "upper_left", "window": {"left": 2, "right": 0}}))
    assert (plan.is_causal, plan.window, plan.mask) == (True, (2, 0), "none")
    cross = _case(inputs={"self_attention": False, "query_len": 3, "key_len": 5},
                  mask={"causal": "lower_right", "key_padding": [5, 2]})
    plan = dpa_plan(cross)
    assert (plan.is_causal, plan.mask, plan.kv_lengths) == (False, "bool", True)
    filled = dpa_plan(_case(mask={"attn_mask": {"random": 0.7}, "fill": "-1e9"}))
    assert (filled.mask, filled.fill) == ("bias", "-1e9")
    # keys 0.., queries from position 4: the window (2, 0) on positions is (-2, 4) on indices
    step = _case(inputs={"self_attention": False, "query_len": 1, "key_len": 5,
                         "position_offset": 4, "key_position_offset": 0},
                 mask={"window": {"left": 2, "right": 0}})
    assert dpa_plan(step).window == (-2, 4)
    assert isinstance(dpa_plan(_case(attention={"v_head_dim": 3})), NotExpressible)


@pytest.mark.parametrize("sections", [
    {"mask": {"causal": "upper_left", "window": {"left": 2, "right": 0}}},
    {"mask": {"window": {"left": 2, "right": 2}}},
    {"mask": {"window": {"left": 1, "right": 3}}, "attention": {"num_heads": 4,
                                                               "num_kv_heads": 2,
                                                               "query_features": 16}},
    {"inputs": {"self_attention": False, "query_len": 3, "key_len": 6},
     "mask": {"causal": "lower_right", "key_padding": [6, 4]}},
    {"inputs": {"self_attention": False, "query_len": 1, "key_len": 5, "position_offset": 4,
                "key_position_offset": 0}, "mask": {"window": {"left": 2, "right": 0}}},
])
def test_runs_match_the_oracle(sections):
    assert _error(_case(**sections)) < 1e-5


def test_a_window_read_as_one_number_is_caught(monkeypatch):
    """The planted defect: the pair (left, right) passed as the int left, which JAX reads as
    (left, left): the causal-free window case then differs from the oracle."""
    import jax

    dpa = jax.nn.dot_product_attention

    def int_window(*a, local_window_size=None, **kw):
        w = None if local_window_size is None else local_window_size[0]
        return dpa(*a, local_window_size=w, **kw)

    monkeypatch.setattr(jax.nn, "dot_product_attention", int_window)
    case = _case(mask={"window": {"left": 2, "right": 0}}, inputs={"seed": 3})
    assert _error(case) > 1e-2


def test_fill_reaches_the_bias():
    """float16 with -inf in bias=: the fully masked row is NaN, as pinned in the case;
    with a boolean mask (no fill) it is uniform."""
    sections = {"attention": {"num_heads": 2, "query_features": 8},
                "inputs": {"batch": 2, "query_len": 4, "key_len": 5, "dtype": "float16",
                           "self_attention": False},
                "mask": {"attn_mask": {"random": 0.7}, "masked_rows": [1]}}
    r = JaxDPA()
    for fill, finite in (("-inf", False), (None, True)):
        case = _case(**{**sections, "mask": {**sections["mask"], "fill": fill}})
        out = r.run(case, r.translate(case), case_data(case)).output
        assert bool(np.isfinite(out[:, 1]).all()) is finite


def test_mixed_dtype_measured_at_jax_s_default_and_scale_precision_is_not_probed(
        monkeypatch):
    """The ledger asks jax.dpa a float64 NumPy q beside float32 k, v (RawCall input_dtype):
    at JAX's default (x64 off) JAX stores it as float32 before the function sees it,
    cast_to_layer, the switch quoted; under jax.enable_x64(True) the function's own dtype
    check refuses it, quoted.  Planted: a function that computes in float64 reads promoted.
    The ledger's scale_precision: the float32 arithmetic hides the scale's rounding,
    not_probed."""
    import jax
    import jax.numpy as jnp

    from conformance.conventions.probes.native_inputs import mixed_dtype_cell
    from conformance.conventions.probes.scores import scale_precision_cell

    assert not jax.config.jax_enable_x64  # JAX's default in this process
    mixed = mixed_dtype_cell(JaxDPA())
    assert mixed.value == "cast_to_layer", mixed.evidence
    assert "q <NumPy float64>" in mixed.evidence and "jax_enable_x64=False" in mixed.evidence
    with jax.enable_x64(True):
        on = mixed_dtype_cell(JaxDPA())
        assert on.value == "refused" and "query dtype should be float32" in on.evidence, on
        real = jax.nn.dot_product_attention
        with monkeypatch.context() as planted:
            planted.setattr(jax.nn, "dot_product_attention", lambda q, k, v, **kw: real(
                jnp.asarray(q, jnp.float64), jnp.asarray(k, jnp.float64),
                jnp.asarray(v, jnp.float64), **kw))
            assert mixed_dtype_cell(JaxDPA()).value == "promoted"
    cell = scale_precision_cell(JaxDPA())
    assert cell.value == "not_probed" and "below float64" in cell.evidence


def test_raw_answers_give_the_ledger_s_cells_and_a_planted_inversion_is_caught(monkeypatch):
    """JaxDPA.answer: a boolean mask to mask=, a float one to bias= (the ledger reads
    true_attends, added, upper_left); the same float array to mask= is the function's own
    refusal, and an answer planted to invert the boolean mask reads true_blocks."""
    from conformance.conventions.probes.flags import (
        attn_mask_polarity_cell, causal_flag_cell, float_mask_cell)

    r = JaxDPA()
    polarity, fmask, causal = (attn_mask_polarity_cell(r), float_mask_cell(r),
                               causal_flag_cell(r))
    assert (polarity.value, polarity.documented) == ("true_attends", "true_attends")
    assert (fmask.value, causal.value) == ("added", "upper_left"), (fmask, causal)
    assert "bias=<float32" in fmask.evidence and "is_causal=True" in causal.evidence

    class AsMask(JaxDPA):  # the float array given to mask= instead
        def answer(self, case, data, raw):
            import jax
            import jax.numpy as jnp

            m = jnp.asarray(np.asarray(raw.value, np.float32)[:, None])
            q = jnp.zeros((2, 3, 2, 4))
            jax.nn.dot_product_attention(q, jnp.zeros((2, 5, 2, 4)), jnp.zeros((2, 5, 2, 4)),
                                         mask=m)
            raise AssertionError("mask= took a float")

    refused = float_mask_cell(AsMask())
    assert refused.value == "refused" and "mask dtype should be bool" in refused.evidence
    real = JaxDPA.answer

    def inverted(self, case, data, raw):
        value = ~np.asarray(raw.value) if np.asarray(raw.value).dtype == bool else raw.value
        return real(self, case, data, type(raw)(raw.argument, value))

    monkeypatch.setattr(JaxDPA, "answer", inverted)
    assert attn_mask_polarity_cell(JaxDPA()).value == "true_blocks"
