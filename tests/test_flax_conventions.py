"""Flax convention probes (runners/flax/probes.py): every cell a word of its axis, with
figures.  Read where the ledger reads them: the runner's probes in its worker, answered
once per session (the matrix's own, warm in a full run), not a second probe run here."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.contract.axes import BY_ID, FEATURE_ARGUMENTS

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flax") is None or importlib.util.find_spec("jax") is None,
    reason="jax/flax not installed (pip install -e '.[flax]')")
AXES = ("key_padding_polarity", "weights_dropout", "causal_flag", "scale_precision",
        "float64_compute", "mixed_dtype", "implicit_mask", *FEATURE_ARGUMENTS)


def probed_in_worker(target: str) -> list:
    """The runner's ledger cells (its probes and the mask-encoding cells), from its worker."""
    from conformance.run import isolation, workers
    from conformance.runners import load

    runner = load(target)
    runner.worker = runner.worker or isolation.isolated_spec(runner)  # as the matrix runs it
    return workers.conventions_in_worker(runner)


@pytest.mark.parametrize("target, api, causal", [
    ("conformance.runners.flax.linen:FlaxLinen", "flax.linen.MultiHeadDotProductAttention",
     "not_applicable"),
    ("conformance.runners.flax.nnx:FlaxNnx", "flax.nnx.MultiHeadAttention", "upper_left")])
def test_flax_probe_cells_are_vocabulary_words(target, api, causal):
    probed = probed_in_worker(target)
    cells = {c.axis: c for c in probed if c.axis in AXES}
    assert tuple(cells) == AXES  # the probes' cells, in the probes' order, each once
    assert len(cells) == sum(c.axis in AXES for c in probed)
    for c in cells.values():  # a free-text axis (vocabulary None) takes any short text
        vocab = BY_ID[c.axis].words  # its own words and the universal ones
        assert c.evidence and (vocab is None or c.value in vocab), (c.axis, c.value)
    assert cells["causal_flag"].value == causal
    assert cells["qk_norm_scope"].value == "per_head"  # normalize_qk: LayerNorm over d
    assert cells["kv_head_mapping"].value == ("grouped" if "nnx" in api else "not_applicable")
    assert cells["weights_dropout"].value == "pre_dropout"
    assert "max |sum - 1|" in cells["weights_dropout"].evidence
    # x64 off (these runners): no float64 layer to read a scale in, a harness limit
    assert cells["scale_precision"].value == "not_probed"
    assert "jax_enable_x64=False" in cells["scale_precision"].evidence


def test_scale_precision_reads_a_float64_layer_and_rejects_a_blurred_one(monkeypatch):
    """The scale_precision probe on planted float64 outputs: the exact scale -> float64,
    the float32-rounded scale -> float32_rounded, both blurred by a float32 softmax
    (1e-7 off) -> not_probed (the rounding cannot show), a float32 output -> not_probed."""
    from conformance.contract.probing import output_with
    from conformance.runners.flax import probes

    seen = {}

    def fake(api, case, dtype="float32", **kw):
        seen["case"] = case
        return planted(case), None

    monkeypatch.setattr(probes, "run", fake)
    s32 = lambda c: float(np.float32(1 / np.sqrt(c.attention.qk_head_dim)))  # noqa: E731
    for planted, word in [(lambda c: output_with(c, None), "float64"),
                          (lambda c: output_with(c, None, scale=s32(c)), "float32_rounded"),
                          (lambda c: output_with(c, None) + 1e-7, "not_probed"),
                          (lambda c: output_with(c, None).astype(np.float32), "not_probed")]:
        assert probes.scale_precision(probes.LINEN).value == word
