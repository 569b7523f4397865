"""keras.cached.* (keras_hub's CachedMultiHeadAttention) reports only what it reads of its
API (runners/keras/hub_observations.py: its call's signature, the layer's sizes and layout);
the ledger measures its cache layout from the caches the layer returns (the runner's run,
conventions/probes/cache.py) and its fully masked row through its decode's step mask
(decode_masks.py).  Planted: a signature that has the arguments (no fact is made up), a
layer that returns a cache other than the one it was given (the shapes read are the
returned ones, never the runner's own tensor)."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from conformance.contract.api_facts import ApiFact
from conformance.conventions.axes import NA
from conformance.runners.keras import hub
from conformance.runners.keras.hub_observations import signature_facts

# CachedMultiHeadAttention.call in keras_hub 0.32 (inspect.signature, checked in a script)
CALL = ("self", "query", "value", "key", "attention_mask", "cache", "cache_update_index",
        "return_attention_scores", "training")


def test_the_missing_arguments_are_read_from_the_signature():
    facts = {f.about: f for f in signature_facts(CALL)}
    assert set(facts) == {"padding_argument", "causal_argument"}
    assert all(isinstance(f, ApiFact) and f.value == NA for f in facts.values())
    assert "cache_update_index" in facts["causal_argument"].evidence  # the signature quoted
    # planted: a call that takes both, as keras.layers.MultiHeadAttention's does
    assert signature_facts(CALL + ("value_mask", "use_causal_mask")) == []


def fake_keras():
    """The four keras calls hub.decode makes, on NumPy (no backend)."""
    ops = SimpleNamespace(zeros=lambda shape, dtype=None: np.zeros(shape, dtype),
                          convert_to_numpy=np.asarray)
    return SimpleNamespace(ops=ops, backend=SimpleNamespace(backend=lambda: "numpy"))


@pytest.mark.parametrize("grows", [False, True])
def test_decode_reports_the_caches_the_layer_returns(monkeypatch, grows):
    """hub.decode's shapes are those of the caches the call returns: a layer that keeps its
    cache gives the allocated shape after each call; one that returns a cache one slot
    longer each call (planted) shows it, and the zeros the runner allocated are never
    among them."""
    def call(x, cache, mask, index):
        if grows:
            cache = np.concatenate([cache, cache[:, :, :1]], axis=2)
        return np.zeros(x.shape), cache

    monkeypatch.setattr(hub, "cached_call", lambda layer, jit: call)
    monkeypatch.setattr(hub, "causal_mask", lambda *a: None)
    layer = SimpleNamespace(num_heads=2, key_dim=4, compute_dtype="float32")
    outs, shapes, held = hub.decode(fake_keras(), layer, np.zeros((2, 5, 8)), 3, 6)
    assert len(outs) == len(shapes) == 3 and held == "float64"
    slots = [7, 8, 9] if grows else [6, 6, 6]
    assert shapes == [(2, 2, s, 2, 4) for s in slots]


def cached_ledger_cells() -> dict:
    """In a Keras worker: keras.cached.torch's own cells and the ledger's cache_layout and
    step-mask cells."""
    from conformance.conventions.probes.api_facts import own_cells
    from conformance.conventions.probes.cache import cache_layout_cell
    from conformance.conventions.probes.decode_masks import decode_mask_cells
    from conformance.runners import load

    runner = load("conformance.runners.keras.cached:KerasCached", {"backend": "torch"})
    own = own_cells(runner)
    return {"own": sorted(c.axis for c in own), "cache_layout": cache_layout_cell(runner),
            **{c.axis: c for c in decode_mask_cells(runner, own)}}


def test_the_ledger_measures_the_cache_and_the_fully_masked_step():
    if any(importlib.util.find_spec(m) is None for m in ("keras", "keras_hub", "torch")):
        pytest.skip(f"keras, keras_hub or torch not installed ({hub.INSTALL})")
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    cached = load("conformance.runners.keras.cached:KerasCached", {"backend": "torch"})
    got = call_in_worker(cached, "tests.test_keras_cached_facts:cached_ledger_cells")
    assert not {"cache_layout", "fully_masked_row"} & set(got["own"])
    layout = got["cache_layout"]
    # the probe case: B=2, 2 heads of 4, 4 slots; the key half (B, S, H, d) of each return
    assert layout.value.startswith("BSNH, one tensor (B, 2, S, H, d)"), layout.value
    assert "(2, 4, 2, 4) -> (2, 4, 2, 4)" in layout.value
    assert got["fully_masked_row"].value == "uniform", got["fully_masked_row"].evidence
