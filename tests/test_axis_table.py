"""The table of axes (conventions/probes/table.py): every axis has one entry, and which
runners an axis is asked of follows from what each runner declares it takes natively
(features less harness_features, probe_takes, answers, probe_head_size, named_inputs),
never from a list of axis ids in the runner.  A scratch runner with no axis list is asked
exactly the axes whose probe case it declares; each declaration, planted away, takes its
axis with it."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from conformance.case.model import Case
from conformance.conventions.axes import AXIS_IDS
from conformance.contract.runner import RAW_ARGUMENTS, Runner
from conformance.conventions.probes import ASKED_PROBES, RAW_PROBES, one_axis, table

CASE_FEATURES = set(inspect.getsource(Case.features.fget).split("named = ")[1]
                    .split("}")[0].replace('"', " ").split()) & {
    "rope", "rope_scaling", "qk_norm", "alibi", "softcap", "sinks", "position_offset",
    "window", "fill", "decode"} | {  # and case/model.py POSITIONS_HEADS_FEATURES
    "chunk", "temperature", "layer_schedule", "relative_bias", "multi_axis_rope", "mla",
    "output_gate"}


class Scratch(Runner):
    """A runner declaring what its system takes and nothing about axes."""

    name, framework, system = "scratch.runner", "scratch", "scratch"
    features = frozenset({"fill", "rope", "softcap"})
    probe_takes = frozenset({"grouped"})
    answers = frozenset({"attn_mask"})


def test_every_axis_has_one_entry_and_every_way_names_what_a_runner_declares():
    assert list(table.TABLE) == list(AXIS_IDS)
    for axis, entry in table.TABLE.items():
        assert entry.axis.id == axis and entry.otherwise in (
            table.SIGNATURE, table.DERIVED, table.OBSERVED)
        for way in entry.ways:
            assert way.how in (table.UNIVERSAL, table.RAW, table.FEATURE), (axis, way)
            if way.how == table.RAW:
                assert set(way.takes) <= set(RAW_ARGUMENTS), (axis, way.takes)
            if way.how == table.FEATURE:
                assert set(way.takes) <= set(table.SHAPES) | CASE_FEATURES, (axis, way)


def test_a_scratch_runner_is_asked_what_its_declarations_take():
    runner = Scratch()
    asked = set(table.asked_probes(runner))
    assert {"rope_style", "softcap", "softcap_order", "kv_head_mapping", "softmax_scale",
            "scale_precision", "size_arguments", "input_layout", "argument_order"} <= asked
    assert not asked & {"alibi_slopes", "qk_norm_scope", "sinks", "rope_partial",
                        "cache_causal_alignment", "cache_layout", "float64_compute",
                        "fully_masked_row", "key_padding_polarity"}
    assert set(table.raw_probes(runner)) == {"attn_mask_polarity", "float_mask"}
    assert one_axis.source(runner, "mask_fill") == "owned"
    assert one_axis.source(runner, "rope_style") == "asked"
    assert one_axis.source(runner, "attn_mask_polarity") == "raw"
    assert one_axis.source(runner, "alibi_slopes") == "own"


@pytest.mark.parametrize("declared, axis", [
    ({"features": frozenset({"fill", "softcap"})}, "rope_style"),
    ({"harness_features": frozenset({"rope"})}, "rope_style"),  # the suite's rotation
    ({"probe_takes": frozenset()}, "kv_head_mapping"),
    ({"probe_head_size": 32}, "size_arguments"),  # its kernel refuses the written sizes
    ({"named_inputs": True}, "argument_order"),
    ({"executed": False}, "softmax_scale"),
])
def test_a_declaration_planted_away_takes_its_axis_with_it(declared, axis):
    assert axis in table.asked_probes(Scratch())
    assert axis not in table.asked_probes(Scratch(**declared))


def test_a_raw_argument_wins_over_the_asked_way_of_the_same_axis():
    runner = Scratch(answers=frozenset({"positional", "key_padding"}),
                     probe_takes=frozenset({"key_padding"}))
    assert table.way_for(runner, "argument_order").how == table.RAW
    assert table.way_for(runner, "key_padding_polarity").how == table.RAW
    assert "argument_order" not in table.asked_probes(runner)
    assert table.way_for(Scratch(probe_takes=frozenset({"key_padding"})),
                         "key_padding_polarity").how == table.FEATURE


def test_the_views_are_the_tables():
    assert ASKED_PROBES["rope_style"] is table.TABLE["rope_style"].ways[0].probe
    assert RAW_PROBES["window_width"][1] is table.TABLE["window_width"].ways[0].probe
    assert [w.takes for w in table.TABLE["window_width"].ways] == [("window",),
                                                                   ("window_setting",)]


def test_no_runner_module_lists_axes_for_the_ledger():
    runners = Path(__file__).resolve().parents[1] / "conformance" / "runners"
    named = [str(p.relative_to(runners)) for p in runners.rglob("*.py")
             if "ledger_axes" in p.read_text()]
    assert named == []
    assert not hasattr(Runner, "ledger_axes")


def test_every_case_feature_is_named_in_a_refusal():
    """A runner without a case feature refuses it in words (run/evaluate.FEATURE_WORDS):
    a feature added without its words would be refused with its bare name ("fill" is
    taken by every runner, so none refuses it)."""
    from conformance.run.evaluate import FEATURE_WORDS

    assert CASE_FEATURES - {"fill"} <= set(FEATURE_WORDS)
