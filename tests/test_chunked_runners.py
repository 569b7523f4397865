"""hf.llama4 and mlx_lm.llama4 against the chunk and temperature oracle: transformers'
Llama4TextAttention with the mask its model builds and mlx-lm's Llama 4 Attention with its
LlamaModel's mask agree with the oracle within the span, where positions and indices are
the same; past it (positions through position_ids) transformers follows the sequence
index, which the relative readings reproduce exactly; the ledger reads each system's word,
and ports planted on the real modules are caught: transformers' own sliding-window
builder in place of the chunked one (a chunk read as a window), and the temperature handed
positions one short (floor(p / F))."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conformance.case.loader import load_file
from conformance.conventions.probes import chunked
from conformance.conventions.probes.probing import output_with
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.paths import ROOT

CASES = {c.id: c for c in load_file(Path(ROOT) / "cases" / "chunk_llama4.yaml")}


def run(runner, case):
    t = runner.translate(case)
    assert hasattr(t, "call"), getattr(t, "reason", t)
    return runner.run(case, t, case_data(case)).output


def gap(a, b) -> float:
    return float(np.max(np.abs(a - b)))


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("transformers")
    from conformance.runners.hf.llama4 import HFLlama4

    return HFLlama4()


@pytest.fixture(scope="module")
def lm():
    pytest.importorskip("mlx_lm")
    from conformance.runners.mlx.lm_llama4 import MlxLmLlama4

    return MlxLmLlama4()


@pytest.mark.parametrize("cid", ["chunk-llama4-boundary", "temperature-llama4-small-floor"])
def test_transformers_agrees_within_the_span(hf, cid):
    assert gap(run(hf, CASES[cid]), attention(CASES[cid]).output) < 2e-6


def test_transformers_counts_chunks_and_temperature_from_the_first_query(hf):
    """At positions 8190.. given as position_ids the chunk mask and the temperature follow
    the index 0..T-1: the oracle with blocks counted from the first query (one block) and
    with the temperature at offset 0 (every multiplier 1) are the output; the absolute
    readings are far from it."""
    far = CASES["chunk-llama4-far"]
    t = np.arange(far.inputs.query_len)
    relative = output_with(far, (t[None, :] <= t[:, None]) & (t[:, None] // 8192 ==
                                                              t[None, :] // 8192))
    out = run(hf, far)
    assert gap(out, relative) < 2e-6 and gap(out, attention(far).output) > 0.5
    warm = CASES["temperature-llama4-far"]
    at_zero = replace(warm, inputs=replace(warm.inputs, position_offset=0,
                                           key_position_offset=0))
    out = run(hf, warm)
    assert gap(out, attention(at_zero).output) < 2e-6
    assert gap(out, attention(warm).output) > 1e-2


@pytest.mark.parametrize("cid", sorted(CASES))
def test_mlx_lm_agrees_at_every_position(lm, cid):
    assert gap(run(lm, CASES[cid]), attention(CASES[cid]).output) < 2e-6


def test_the_ledger_reads_each_system(hf, lm):
    assert chunked.chunk_mask_cell(hf).value == "block_relative"
    assert chunked.attention_temperature_cell(hf).value == "log_floor_relative"
    assert chunked.chunk_mask_cell(lm).value == "block"
    assert chunked.attention_temperature_cell(lm).value == "log_floor"


def test_a_chunk_read_as_a_window_is_caught_on_transformers(hf):
    """The port that builds a chunked layer's mask with transformers' sliding-window
    builder (sliding_window = chunk: the query and chunk - 1 keys before it)."""
    from conformance.runners.hf.llama4 import HFLlama4

    class WindowPort(HFLlama4):
        def call(self, torch, case, data, module, x):
            from transformers.masking_utils import create_sliding_window_causal_mask

            module.config.sliding_window = case.mask.chunk
            mask = create_sliding_window_causal_mask(
                config=module.config, inputs_embeds=x, attention_mask=None, cache=None,
                position_ids=torch.arange(x.shape[1])[None])
            return self.forward(module, x, mask)

    port = WindowPort()
    case = CASES["chunk-llama4-boundary"]
    assert gap(run(port, case), attention(case).output) > 0.1
    assert chunked.chunk_mask_cell(port).value == "window"


def test_the_temperature_one_position_late_is_caught_on_mlx_lm(lm):
    """The port that hands mlx-lm's layer the offset one short: floor(p / F), the
    temperature applied from position 0 where Llama 4 applies it from position 1."""
    from conformance.runners.mlx.lm_llama4 import MlxLmLlama4

    class LatePort(MlxLmLlama4):
        def run(self, case, translation, data):
            i = case.inputs
            shifted = replace(i, position_offset=i.position_offset - 1,
                              key_position_offset=i.key_position_offset - 1)
            return super().run(replace(case, inputs=shifted), translation, data)

    assert chunked.attention_temperature_cell(LatePort()).value == "off_by_one"


def test_each_refuses_what_its_layers_cannot_say(hf, lm):
    both = CASES["temperature-llama4-small-floor"]
    a = both.attention
    rotated = replace(both, attention=replace(a, rope=CASES["chunk-llama4-boundary"]
                                              .attention.rope))
    assert "only a layer without RoPE" in hf.translate(rotated).reason
    assert "rotates exactly its chunked layers" in lm.translate(rotated).reason
    half = replace(CASES["chunk-llama4-boundary"], attention=replace(
        CASES["chunk-llama4-boundary"].attention, rope=replace(
            CASES["chunk-llama4-boundary"].attention.rope, style="half_split")))
    assert "interleaved pairs only" in hf.translate(half).reason
    assert "traditional=True" in lm.translate(half).reason
