"""The table of axes: for every axis of conventions/axes.py (its id, title, words and meaning,
which runners and reports share), how the ledger asks it and the probe that measures it.

An entry lists the ways its axis is asked, in order; a runner is asked the first way it
takes, so which runners answer an axis follows from what each declares it can take
natively, never from a list of axis ids in the runner:
- universal: every executed runner, through its own translate and run (request.ask);
  `one_call` probes (the mask encodings, batch invariance) are the ledger's own
  (OWNED_AXES), read for a documented model from its cited documentation only;
- raw: a runner whose `answers` lists the native argument (contract RAW_ARGUMENTS)
  passes it raw (Runner.answer);
- feature: a runner whose system takes the probe case's shape natively (`takes`): a case
  feature of its `features` the runner does not build from the suite's own ops
  (`harness_features`), or a probe shape it declares in `probe_takes` (SHAPES).
Where a runner takes no way, the cell comes from `otherwise`: the signatures it names
(signature: features.py, not_applicable where no argument is there), this run's matrix
rows (derived: conventions/derived.py) or the runner's own observation of its API
(observed: Runner.conventions, no oracle).  A new universal axis is one Entry here, one
probe module, one test and one docs row (tests/test_scratch_axis.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from conformance.conventions.axes import AXES, Axis
from conformance.conventions.probes import (
    cache, flags, heads, implicit, key_padding, native_inputs, order, padding, partial,
    positions, qk_norm, returned, rows, scores, sizes, softcap, training, windows)
from conformance.conventions.probes.choices import chosen
from conformance.conventions.probes.batch import batch_invariance_cell
from conformance.conventions.probes.capped import softcap_cell
from conformance.conventions.probes import multi_axis
from conformance.conventions.probes.chunked import attention_temperature_cell, chunk_mask_cell
from conformance.conventions.probes.gate import gate_packing_cell
from conformance.conventions.probes.masks import (
    MASKED_AXES, mask_fill_cell, masked_nonfinite_cells)
from conformance.conventions.probes.layer_schedule import layer_schedule_cell
from conformance.conventions.probes.nope_layers import nope_placement_cell
from conformance.conventions.probes.relative_bias import relative_bias_buckets_cell
from conformance.conventions.probes.latent_attention import mla_rope_slice_cell
from conformance.conventions.probes.rope_magnitude import rope_scaling_magnitude_cell
from conformance.conventions.probes.rope_scaling import rope_scaling_frequencies_cell
from conformance.conventions.probes.window_settings import window_settings_cell

UNIVERSAL, RAW, FEATURE = "universal", "raw", "feature"  # the ways an axis is asked
SIGNATURE, DERIVED, OBSERVED = "signature", "derived", "observed"  # where none is taken
# The probe shapes a runner may declare in `probe_takes`, beyond the case features of its
# `features` (case/features.py), for the feature ways: what its system takes natively in
# a probe case, through its translate and run
SHAPES = {
    "grouped": "fewer key/value heads than query heads (its argument, or its shapes)",
    "rotary_dim": "a rotary width below the head dim",
    "decode": "a prefill and a step through the system's own cache (a single-call runner)",
    "cache_tensors": "its decode's cache tensors come back from its run (their shapes)",
    "key_padding": "per-item key padding through its own argument (a mask, or lengths)",
    "float64": "the float64 probe case, whose arithmetic its matrix rows do not settle",
    "masked_rows": "a query row no key may attend, which its matrix rows do not settle",
    "qk_norm": "QK-norm through its own setting, in probes beyond its matrix features",
    "alibi": "ALiBi through its own op, in probes beyond its matrix features",
}


@dataclass(frozen=True)
class Way:
    """One way an axis is asked: `probe(runner, own)` -> Convention (raw: probe(runner));
    a one_call probe returns the cells of several axes at once (LEDGER_PROBES)."""

    how: str  # UNIVERSAL, RAW or FEATURE
    probe: Callable[..., Any]
    takes: tuple[str, ...] = ()  # raw: the arguments (any one); feature: the shapes (any)
    reads_own: bool = False  # the probe confirms a reading of its API the runner reports
    one_call: bool = False  # the ledger's own universal probe (OWNED_AXES)
    when: Callable[[Any], bool] | None = None  # universal: a runner it cannot ask is skipped


@dataclass(frozen=True)
class Entry:
    axis: Axis  # id, title, words and meaning (conventions/axes.py)
    ways: tuple[Way, ...] = ()
    otherwise: str = OBSERVED  # where the cell comes from when no way is taken
    fact: str = ""  # the ApiFact (contract/api_facts.py) a runner reports of it, if any


def written_sizes(runner) -> bool:
    """The sizes probes need their written head sizes: a runner whose kernel refuses them
    (probe_head_size) reports its API reading, unconfirmed."""
    return runner.probe_head_size is None


def positional_call(runner) -> bool:
    """argument_order asks a call whose inputs are positional (not a converted graph's
    named inputs) at the written sizes."""
    return written_sizes(runner) and not runner.named_inputs


def _raw(argument, probe) -> Way:
    return Way(RAW, probe, (argument,) if isinstance(argument, str) else tuple(argument))


def _raws(*modules) -> dict[str, Way]:
    """axis -> the raw way of each probe module's RAW_PROBES (axis -> (argument, probe))."""
    return {a: _raw(arg, probe) for m in modules for a, (arg, probe) in m.RAW_PROBES.items()}


def _feature(probe, *shapes: str, reads_own: bool = False) -> Way:
    return Way(FEATURE, probe, shapes, reads_own=reads_own)


# (axes it settles, probe(runner, the runner's own cells of them) -> cells).  A runner's own
# cell is never the word, but where it read the number itself (onnxruntime's
# qk_matmul_output shows the masked scores) it breaks a tie the outputs cannot
LEDGER_PROBES: tuple[tuple[tuple[str, ...], Callable[..., list]], ...] = (
    (("mask_fill",), lambda r, own: [mask_fill_cell(r, reading=own.get("mask_fill"))]),
    (tuple(MASKED_AXES.values()), lambda r, own: masked_nonfinite_cells(r)),
    (("batch_invariance",), lambda r, own: [batch_invariance_cell(r)]),
)
RAW_WAYS = _raws(flags, training, windows, order, key_padding, implicit, partial,
                 native_inputs)
WAYS: dict[str, tuple[Way, ...]] = {
    **{a: (Way(UNIVERSAL, probe, one_call=True),) for axes, probe in LEDGER_PROBES
       for a in axes},
    "softmax_scale": (Way(UNIVERSAL, scores.softmax_scale_cell),),
    "scale_precision": (Way(UNIVERSAL, scores.scale_precision_cell),),
    "size_arguments": (Way(UNIVERSAL, sizes.size_arguments_cell, reads_own=True,
                           when=written_sizes),),
    "input_layout": (Way(UNIVERSAL, sizes.input_layout_cell, reads_own=True,
                         when=written_sizes),),
    "argument_order": (RAW_WAYS["argument_order"],
                       Way(UNIVERSAL, sizes.argument_order_cell, when=positional_call)),
    "key_padding_polarity": (RAW_WAYS["key_padding_polarity"],
                             _feature(padding.key_padding_polarity_cell, "key_padding",
                                      reads_own=True)),
    "window_width": (RAW_WAYS["window_width"], _raw("window_setting", window_settings_cell)),
    "rope_partial": (RAW_WAYS["rope_partial"],
                     _feature(positions.rope_partial_cell, "rotary_dim")),
    "rope_style": (_feature(positions.rope_style_cell, "rope"),),
    "alibi_slopes": (_feature(positions.alibi_slopes_cell, "alibi"),),
    "rope_scaling_frequencies": (_feature(rope_scaling_frequencies_cell, "rope_scaling"),),
    "rope_scaling_magnitude": (_feature(rope_scaling_magnitude_cell, "rope_scaling"),),
    # M-RoPE and 2-D RoPE
    "mrope_layout": (_feature(multi_axis.mrope_layout_cell, "multi_axis_rope"),),
    "vision_rope_layout": (_feature(multi_axis.vision_rope_layout_cell, "multi_axis_rope"),),
    # per-layer schedules
    "per_layer_rope": (_feature(layer_schedule_cell, "layer_schedule"),),
    "nope_placement": (_feature(nope_placement_cell, "layer_schedule"),),
    # chunked attention and temperature
    "chunk_mask": (_feature(chunk_mask_cell, "chunk"),),  # chunked.py
    "attention_temperature": (_feature(attention_temperature_cell, "temperature"),),
    # multi-head latent attention
    "mla_rope_slice": (_feature(mla_rope_slice_cell, "mla"),),
    # T5's relative bias
    "relative_bias_buckets": (_feature(relative_bias_buckets_cell, "relative_bias"),),
    # gated head outputs
    "gate_packing": (_raw("packed_gate", gate_packing_cell),),  # gate.py
    "kv_head_mapping": (_feature(heads.kv_head_mapping_cell, "grouped"),),
    "qk_norm_scope": (_feature(qk_norm.qk_norm_scope_cell, "qk_norm"),),
    "sinks": (_feature(scores.sinks_cell, "sinks"),),
    "softcap": (_feature(softcap_cell, "softcap"),),  # capped.py
    "softcap_order": (_feature(softcap.softcap_order_cell, "softcap"),),
    "cache_causal_alignment": (_feature(cache.cache_causal_alignment_cell, "decode"),),
    "cache_layout": (_feature(cache.cache_layout_cell, "cache_tensors"),),
    "float64_compute": (_feature(scores.float64_compute_cell, "float64"),),
    # rows run under the harness's own choice only describe it: asked under each (choices.py)
    "fully_masked_row": (_feature(rows.fully_masked_row_cell, "masked_rows"),
                         Way(UNIVERSAL, rows.fully_masked_row_cell, when=chosen)),
    "returned_weights": (Way(UNIVERSAL, returned.returned_weights_cell, when=chosen),),
}
WAYS.update({a: (w,) for a, w in RAW_WAYS.items() if a not in WAYS})
FEATURE_AXES = ("softcap", "rope_style", "rope_partial", "kv_head_mapping", "qk_norm_scope",
                "alibi_slopes", "cache_causal_alignment", "cache_layout", "window_width",
                "softcap_order", "sinks", "rope_scaling_frequencies", "per_layer_rope",
                "nope_placement",
                "rope_scaling_magnitude", "mrope_layout", "vision_rope_layout",
                "gate_packing", "chunk_mask",
                "attention_temperature",
                "relative_bias_buckets",
                "mla_rope_slice")  # axes.FEATURE_ARGUMENTS: the signature fallback
ROW_AXES = ("fully_masked_row", "returned_weights", "float64_compute", "parameter_formula",
            "weight_layout", "refusals")  # derived.DERIVERS: the matrix rows' fallback
# axis -> the ApiFact a runner reports of it (API_FACTS): its reading of its own API, which
# the axis's way confirms where the runner takes one (reads_own) and is the cell otherwise
FACTS = {"size_arguments": "head_size_from", "input_layout": "tensor_layout",
         "argument_order": "inputs_order", "returned_weights": "weights_returned",
         "implicit_mask": "mask_on_tensor", "key_padding_polarity": "padding_argument",
         "attn_mask_polarity": "mask_argument", "float_mask": "float_mask_argument",
         "causal_flag": "causal_argument", "parameter_formula": "parameter_count",
         "weight_layout": "weight_names", "cache_layout": "cache_tensor_layout",
         "alibi_slopes": "alibi_argument", "mask_fill": "masked_score",
         "dropout": "dropout_argument", "weights_dropout": "weights_under_dropout",
         "unbatched_input": "unbatched_call", "mixed_dtype": "dtype_mixing",
         "window_width": "window_argument", "fully_masked_row": "no_key_row"}
TABLE: dict[str, Entry] = {
    a.id: Entry(a, WAYS.get(a.id, ()), SIGNATURE if a.id in FEATURE_AXES else
                DERIVED if a.id in ROW_AXES else OBSERVED, FACTS.get(a.id, ""))
    for a in AXES}
FACT_AXES = {e.fact: axis for axis, e in TABLE.items() if e.fact}  # ApiFact.about -> axis


def shapes(runner) -> frozenset[str]:
    """What `runner`'s system takes natively in a probe case: its case features less the
    ones it builds from the suite's own ops, and the probe shapes it declares."""
    return (frozenset(runner.features) - frozenset(runner.harness_features)) | frozenset(
        runner.probe_takes)


def takes(runner, way: Way) -> bool:
    """Whether `runner` is asked `way`."""
    if way.how == RAW:
        return any(a in runner.answers for a in way.takes)
    if way.how == FEATURE:
        return bool(shapes(runner) & set(way.takes))
    if way.one_call:  # owned: a documented model's cell says why it is not probed
        return True
    return runner.executed and (way.when is None or way.when(runner))


def way_for(runner, axis: str) -> Way | None:
    """The way `axis` is asked of `runner` (the first of its entry's ways it takes), or
    None: the cell then comes from the entry's `otherwise`."""
    entry = TABLE.get(axis)
    return next((w for w in entry.ways if takes(runner, w)), None) if entry else None


def raw_probes(runner) -> dict[str, Callable]:
    """axis -> probe(runner), for the axes asked of `runner` through a raw argument."""
    return {a: w.probe for a in TABLE if (w := way_for(runner, a)) and w.how == RAW}


def asked_probes(runner) -> dict[str, Callable]:
    """axis -> probe(runner, own), for the axes asked of `runner` through its translate and
    run one axis at a time (not raw, not the ledger's one_call probes)."""
    return {a: w.probe for a in TABLE
            if (w := way_for(runner, a)) and w.how != RAW and not w.one_call}


def reads_own(axis: str) -> bool:
    """Whether an asked probe of `axis` confirms the runner's own reading of its API."""
    return any(w.reads_own for w in TABLE[axis].ways) if axis in TABLE else False
