"""The Flax layers' ledger cells (the ledger's probes asking them, and their API facts,
runners/flax/observations.py): every cell a word of its axis, with figures.  Read where the
ledger reads them: in the runner's worker, answered once per session (the matrix's own,
warm in a full run), not a second probe run here."""
from __future__ import annotations

import importlib.util

import pytest

from conformance.conventions.axes import BY_ID, FEATURE_ARGUMENTS

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flax") is None or importlib.util.find_spec("jax") is None,
    reason="jax/flax not installed (pip install -e '.[flax]')")
AXES = ("key_padding_polarity", "weights_dropout", "causal_flag", "scale_precision",
        "float64_compute", "mixed_dtype", "implicit_mask", *FEATURE_ARGUMENTS)


def probed_in_worker(target: str) -> list:
    """The runner's ledger cells (the ledger's probes and its API facts), from its worker."""
    from conformance.conventions.probes import LEDGER_CELLS
    from conformance.run import isolation, workers
    from conformance.runners import load

    runner = load(target)
    runner.worker = runner.worker or isolation.isolated_spec(runner)  # as the matrix runs it
    return workers.conventions_in_worker(runner, LEDGER_CELLS)


@pytest.mark.parametrize("target, api, causal", [
    ("conformance.runners.flax.linen:FlaxLinen", "flax.linen.MultiHeadDotProductAttention",
     "not_applicable"),
    ("conformance.runners.flax.nnx:FlaxNnx", "flax.nnx.MultiHeadAttention", "upper_left")])
def test_flax_probe_cells_are_vocabulary_words(target, api, causal):
    probed = probed_in_worker(target)
    cells = {c.axis: c for c in probed if c.axis in AXES}
    assert set(cells) == set(AXES)  # every axis, each once
    assert len(cells) == sum(c.axis in AXES for c in probed)
    for c in cells.values():  # a free-text axis (vocabulary None) takes any short text
        vocab = BY_ID[c.axis].words  # its own words and the universal ones
        assert c.evidence and (vocab is None or c.value in vocab), (c.axis, c.value)
    assert cells["causal_flag"].value == causal
    assert cells["qk_norm_scope"].value == "per_head"  # normalize_qk: LayerNorm over d
    assert cells["kv_head_mapping"].value == ("grouped" if "nnx" in api else "not_applicable")
    assert cells["weights_dropout"].value == "pre_dropout"
    assert "max |sum - 1|" in cells["weights_dropout"].evidence
    # x64 off (these runners): the float64 case runs in float32, the rounding cannot show
    assert cells["scale_precision"].value == "not_probed"
    assert "below float64" in cells["scale_precision"].evidence
