"""The Flax, JAX and MLX runners report ApiFacts of their API, never a ledger cell; their
documented words come from their expectations files; and the decode-only runners, which
report no cell of a fully masked row, get it measured through their own decode
(conventions/probes/decode_masks.py, RawCall step_mask)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.contract.api_facts import ApiFact


def _runner(kind: str):
    if kind == "jax.dpa":
        from conformance.runners.flax.dpa import JaxDPA

        return JaxDPA()
    if kind.startswith("flax."):
        from conformance.runners.flax.linen import FlaxLinen
        from conformance.runners.flax.nnx import FlaxNnx

        return FlaxLinen() if kind == "flax.linen" else FlaxNnx(
            decode=True, name="flax.nnx.decode")
    from conformance.runners.mlx.mha import MlxMHA
    from conformance.runners.mlx.sdpa_cache import MlxSDPACache

    return MlxMHA() if kind == "mlx.mha" else MlxSDPACache()


def _needs(kind: str) -> None:
    modules = ("mlx",) if kind.startswith("mlx") else ("jax", "flax")
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[{modules[-1]}]')")


@pytest.mark.parametrize("kind", ["jax.dpa", "flax.linen", "flax.nnx.decode", "mlx.mha",
                                  "mlx.sdpa.cache"])
def test_runners_report_api_facts_only(kind):
    _needs(kind)
    facts = _runner(kind).conventions()
    assert facts and all(isinstance(f, ApiFact) for f in facts), [
        type(f).__name__ for f in facts]
    assert "no_key_row" not in {f.about for f in facts}  # the ledger measures that row


def test_jax_dpa_documented_words_come_from_its_expectations():
    _needs("jax.dpa")
    from conformance.conventions.probes.api_facts import own_cells

    cells = {c.axis: c for c in own_cells(_runner("jax.dpa"))}
    assert (cells["size_arguments"].documented, cells["key_padding_polarity"].documented) == (
        "given_tensors", "lengths")
    assert cells["dropout"].documented is None  # documented without one of its words
    assert cells["dropout"].documented_source.startswith("https://docs.jax.dev/")
    assert "mixed_dtype" not in cells  # measured by the ledger's input_dtype probe


@pytest.mark.parametrize("kind", ["mlx.sdpa.cache", "flax.nnx.decode"])
def test_decode_only_runner_s_fully_masked_step_is_measured(kind):
    """No own cell of the row: the step probe reads uniform (the mean of the cached values
    both systems give a step that masks every key).  Planted: the step's heads zeroed where
    the mask row is all False (the output then holds the output bias only) reads zeros."""
    _needs(kind)
    from conformance.conventions.probes.api_facts import own_cells
    from conformance.conventions.probes.decode_masks import decode_mask_cells

    runner = _runner(kind)
    row = {c.axis: c for c in decode_mask_cells(runner, own_cells(runner))}
    assert row["fully_masked_row"].value == "uniform", row["fully_masked_row"].evidence
    assert "masks all" in row["fully_masked_row"].evidence

    class Zeroing(type(runner)):
        def answer(self, case, data, raw):
            out, call = super().answer(case, data, raw)
            if raw.argument == "step_mask":
                bias = 0.0 if data.weights.bo is None else data.weights.bo  # heads of 0
                out = np.where(data.inputs.allowed.any(-1)[..., None], out, bias)
            return out, call

    planted = Zeroing(**runner.params)
    planted.name = runner.name
    got = {c.axis: c for c in decode_mask_cells(planted, [])}
    assert got["fully_masked_row"].value == "zeros", got["fully_masked_row"].evidence
