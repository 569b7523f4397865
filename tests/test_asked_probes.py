"""The ledger's asked probes (conventions/probes/: sizes, scores, heads, positions, cache,
features; ASKED_PROBES): a runner only runs the probe case through its translate and run;
the ledger names the reading.  A toy system (the float64 oracle, here the system's
arithmetic) answers right, and each planted wrong answer changes the word: key and value
swapped, a layout that is not the reading it reports, a scale ignored, a float32 scale,
arithmetic below float64, sinks dropped, tiled heads, one rotary pairing only, a dropped
rotary width, no ALiBi, a step that sees key 0 only, a cache without shapes."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.contract.api_facts import ApiFact
from conformance.conventions.probes.probe_cells import kv_mapping_candidates
from conformance.contract.runner import Observation, Runner, Translation
from conformance.conventions.axes import Convention
from conformance.conventions.probes import ASKED_PROBES, ledger_cells
from conformance.conventions.probes import cache, heads, positions, scores, sizes
from conformance.oracle.reference import attention


class Toy(Runner):
    """A system computing the oracle's attention, with one planted defect (`plant`)."""

    name, framework, system = "toy.asked", "toy", "toy"
    features = frozenset({"fill", "rope", "position_offset", "alibi", "sinks", "decode"})

    def __init__(self, plant: str = "", sets_scale: bool = False, own=(), takes=(),
                 decodes=False):
        super().__init__()
        self.plant, self.sets_scale, self.own = plant, sets_scale, list(own)
        self.probe_takes, self.decodes_only = frozenset(takes), decodes

    def translate(self, case):
        return Translation(f"toy({case.id})", None)

    def run(self, case, translation, data):
        return Observation(output=self.compute(case, data), extras=self.cache_extras(case))

    def compute(self, case, data):
        p, a = self.plant, case.attention
        if p == "swap":
            data = replace(data, inputs=replace(data.inputs, key=data.inputs.value,
                                                value=data.inputs.key))
        if p == "tiled" and case.grouped:
            return kv_mapping_candidates(case, data)["tiled"]
        if p == "no_sinks":
            data = replace(data, weights=replace(data.weights, sinks=None))
        if a.rope is not None and p in ("half_split_only", "all_dims"):
            rope = replace(a.rope, style="half_split") if p == "half_split_only" else \
                replace(a.rope, rotary_dim=a.qk_head_dim)
            case = replace(case, attention=replace(a, rope=rope))
        if p == "no_alibi":
            case = replace(case, attention=replace(a, alibi=False))
        scale = {"no_scale": 1.0, "default_scale": 1 / np.sqrt(a.qk_head_dim),
                 "rounded": float(np.float32(1 / np.sqrt(a.qk_head_dim)))}.get(p)
        out = attention(case, data, scale).output
        if p == "step_first_key" and case.decode is not None:
            first = np.zeros((case.inputs.query_len,) * 2, bool)
            first[np.tril_indices(case.inputs.query_len)] = True
            first[-1], first[-1, 0] = False, True
            inputs = replace(data.inputs, allowed=np.broadcast_to(first, (case.inputs.batch,
                                                                          *first.shape)))
            out = np.concatenate([out[:, :-1], attention(case, replace(
                data, inputs=inputs)).output[:, -1:]], 1)
        return out + {"off": 0.1, "blur": 1e-7}.get(p, 0.0)

    def cache_extras(self, case):
        if case.decode is None or self.plant == "no_shapes":
            return {}
        b, n = case.inputs.batch, case.inputs.query_len
        return {"cache_shapes": [[b, 2, n - 1, 4], [b, 2, n, 4]],
                "cache_tensors": "two arrays", "cache_note": "toy cache"}

    def conventions(self):
        return self.own


def word(probe, plant="", **kw) -> str:
    return probe(Toy(plant, **kw)).value


def test_argument_order_reads_a_swap():
    assert word(sizes.argument_order_cell) == "query_key_value"
    assert word(sizes.argument_order_cell, "swap") == "query_value_key"


def test_a_reported_reading_is_confirmed_or_not_probed():
    own = Convention("size_arguments", "total_over_heads", "toy(dims=6): w (6, 8)")
    assert sizes.size_arguments_cell(Toy(), own).value == "total_over_heads"
    cell = sizes.size_arguments_cell(Toy("off"), own)
    assert cell.value == "not_probed" and "is not what the system computes" in cell.evidence
    assert sizes.input_layout_cell(Toy(), None).value == "not_probed"  # nothing reported


@pytest.mark.parametrize("plant, sets, expected", [
    ("", False, "inv_sqrt_head_dim"), ("no_scale", False, "none"),
    ("", True, "configurable"), ("default_scale", True, "ignored")])
def test_softmax_scale(plant, sets, expected):
    assert word(scores.softmax_scale_cell, plant, sets_scale=sets) == expected


@pytest.mark.parametrize("plant, expected", [
    ("", "float64"), ("rounded", "float32_rounded"), ("blur", "not_probed")])
def test_scale_precision(plant, expected):
    assert word(scores.scale_precision_cell, plant) == expected


def test_float64_compute_and_sinks():
    assert word(scores.float64_compute_cell) == "float64"
    assert word(scores.float64_compute_cell, "blur") == "below_float64"
    assert word(scores.float64_compute_cell, "blur", decodes=True) == "below_float64"
    assert word(scores.sinks_cell) == "applied"
    assert word(scores.sinks_cell, "no_sinks") == "ignored"


def test_kv_head_mapping_reads_tiled_heads():
    assert word(heads.kv_head_mapping_cell) == "grouped"
    assert word(heads.kv_head_mapping_cell, "tiled") == "tiled"


def test_rope_and_alibi():
    assert word(positions.rope_style_cell) == "choosable"
    assert word(positions.rope_style_cell, "half_split_only") == "half_split"
    assert word(positions.rope_partial_cell) == "supported"
    assert word(positions.rope_partial_cell, "all_dims") == "ignored"
    assert word(positions.alibi_slopes_cell) == "paper"
    assert word(positions.alibi_slopes_cell, "no_alibi") == "ignored"
    assert word(positions.alibi_slopes_cell, "off") == "other"


def test_cache_alignment_and_layout():
    assert word(cache.cache_causal_alignment_cell) == "lower_right"
    assert word(cache.cache_causal_alignment_cell, "step_first_key") == "upper_left"
    assert word(cache.cache_layout_cell).startswith("BNSH, two arrays, growing")
    assert word(cache.cache_layout_cell, "no_shapes") == "not_probed"


def test_ledger_cells_ask_the_axes_whose_probe_case_the_runner_takes():
    """An axis whose probe case the runner takes (its features, its probe_takes) is asked
    (the runner's own stale cell is not used); another keeps the runner's cell; the
    feature axes come from the signatures it names."""
    facts = [ApiFact("mask_on_tensor", "none", "the runner's own")]
    toy = Toy(own=facts, takes={"grouped"})
    got = ledger_cells(toy)
    assert [c.value for c in got if c.axis == "kv_head_mapping"] == ["grouped"]
    cells = {c.axis: c for c in got}
    assert cells["implicit_mask"].evidence == "the runner's own"  # no way asks it
    assert cells["rope_style"].evidence.startswith("toy.asked")  # features: rope, asked
    assert "softcap" not in cells  # no signatures named

    def toy_call(q, k, v, softcap=None):
        return q

    toy.signatures = lambda: ("toy_call", (toy_call,))
    cells = {c.axis: c for c in ledger_cells(toy)}
    assert cells["softcap"].value == "not_probed"  # it takes softcap: a probe is needed
    assert cells["window_width"].value == "not_applicable"
    assert cells["kv_head_mapping"].value == "grouped"  # the probe's, not the signature's
    assert set(ASKED_PROBES) >= {"argument_order", "cache_layout", "rope_style"}


def test_a_long_refusal_keeps_its_head_and_its_end_within_the_limit():
    """A kernel's own words come after a long prefix: both ends are quoted, bounded."""
    from conformance.conventions.probes.request import REASON_LIMIT, quoted
    prefix = "InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : " + "x" * 300
    text = quoted(RuntimeError(prefix + " Status Message: q_norm_weight inputs are not "
                               "supported on CPU"))
    assert len(text) <= REASON_LIMIT and text.startswith("RuntimeError: InvalidArgument")
    assert text.endswith("are not supported on CPU") and " ... " in text
    assert quoted("short reason") == "short reason"


def test_reads_own_names_exactly_the_probes_that_read_the_runners_own_cell():
    """one_axis.axis_cell (the drift matrix) runs a runner's conventions() only for the
    READS_OWN axes: each of them must change with a planted own cell, no other may."""
    from conformance.conventions.probes import READS_OWN

    moved = set()
    for axis, probe in ASKED_PROBES.items():
        planted = Convention(axis, "planted_word", "PLANTED-OWN-EVIDENCE")
        if probe(Toy(), planted) != probe(Toy(), None):
            moved.add(axis)
    assert moved == set(READS_OWN)
