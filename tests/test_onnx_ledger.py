"""The ONNX runners the ledger asks (issue #29, conventions/probes/): onnxruntime's
com.microsoft.GroupQueryAttention hands cache_causal_alignment and cache_layout to
conventions/probes/cache.py, which asks its own past/present decode (translate and run) at
2 heads of 8 (its `probe_needs`: the CPU kernel's head sizes).  The real runner gives the
pinned cells; a defect planted in the system (a step run without its past, present shapes
reported transposed) moves the ledger's cell; at the kernel's refused head size the cell is
`refused` with onnxruntime's own words, never not_applicable."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.axes import REFUSED
from conformance.contract.runner import Runner
from conformance.conventions.probes import ASKED_PROBES, cache
from tests.helpers import require

GQA = "conformance.runners.onnx.contrib_gqa:OnnxContribGQA"


def _gqa(**attrs):
    require("onnx", "onnxruntime")
    from conformance.runners import load

    runner = load(GQA)
    for k, v in attrs.items():
        setattr(runner, k, v)
    return runner


def test_gqa_hands_its_cache_axes_to_the_ledger():
    from conformance.runners.onnx.contrib_gqa import OnnxContribGQA

    from conformance.conventions.probes.table import asked_probes

    asked = set(asked_probes(OnnxContribGQA()))
    assert {"cache_causal_alignment", "cache_layout"} <= asked <= set(ASKED_PROBES)


def test_gqa_cache_cells_from_its_own_decode():
    runner = _gqa()
    align = cache.cache_causal_alignment_cell(runner)
    layout = cache.cache_layout_cell(runner)
    assert align.value == "lower_right", align.evidence
    assert "GroupQueryAttention" in align.evidence and "past_key" in align.evidence
    assert layout.value == ("BNSH, two tensors (present_key, present_value), growing "
                            "((2, 2, 3, 8) -> (2, 2, 4, 8))"), layout.evidence


def test_the_kernels_head_size_refusal_reads_refused_with_its_words():
    """Without the kernel's head size (2 heads of 4), onnxruntime's CPU kernel refuses the
    probe case: `refused`, its message quoted (the op's schema has the cache inputs)."""
    runner = _gqa(probe_needs={})
    cell = cache.cache_causal_alignment_cell(runner)
    assert cell.value == REFUSED, cell.evidence
    assert "GroupQueryAttention kernel" in cell.evidence
    assert "Status Message: head_size must be a" in cell.evidence  # quoted, bounded


def _no_past_decode(session, case, feed):
    """A planted system: every step run as a fresh prompt, its past dropped."""
    a, b = case.attention, case.inputs.batch
    x, p = feed["query"], case.decode.prefill
    empty = np.zeros((b, a.num_kv_heads, 0, a.qk_head_dim), x.dtype)
    outs, shapes = [], []
    for lo, hi in [(0, p)] + [(s, s + 1) for s in range(p, case.inputs.query_len)]:
        out, k, _ = session.run(["output", "present_key", "present_value"], {
            "query": x[:, lo:hi], "past_key": empty, "past_value": empty,
            "seqlens_k": np.full(b, hi - lo - 1, np.int32),
            "total_sequence_length": np.array(hi - lo, np.int32)})
        outs.append(out)
        shapes.append(tuple(k.shape))
    return np.concatenate(outs, axis=1), shapes


def test_a_step_without_its_past_moves_the_alignment(monkeypatch):
    from conformance.runners.onnx import contrib_gqa

    runner = _gqa()
    monkeypatch.setattr(contrib_gqa, "decode_run", _no_past_decode)
    cell = cache.cache_causal_alignment_cell(runner)
    # attending itself only is neither reading: the tie/resolution rule names neither
    assert cell.value not in ("lower_right", "upper_left"), cell.evidence


def test_transposed_present_shapes_move_the_layout(monkeypatch):
    from conformance.runners.onnx import contrib_gqa

    real = contrib_gqa.decode_run

    def bsnh(session, case, feed):
        out, shapes = real(session, case, feed)
        return out, [(s[0], s[2], s[1], s[3]) for s in shapes]

    runner = _gqa()
    monkeypatch.setattr(contrib_gqa, "decode_run", bsnh)
    cell = cache.cache_layout_cell(runner)
    assert cell.value.startswith("BSNH"), cell.value


def test_the_ledger_has_one_cell_of_each_handed_axis_its_own():
    """The runner's own cells of the handed axes (schema-read feature cells) give way: the
    ledger's cell is the asked probe's."""
    from conformance.conventions.probes import ledger_cells

    cells = ledger_cells(_gqa())
    for axis in ("cache_causal_alignment", "cache_layout"):
        mine = [c for c in cells if c.axis == axis]
        assert len(mine) == 1 and "probe_case probe-cache-step" in mine[0].evidence, mine


# -- onnx.contrib-mha.ort: the ledger asks it (translate/run, `answer`); it only calls ------

MHA = "conformance.runners.onnx.contrib_mha:OnnxContribMHA"


def _mha():
    require("onnx", "onnxruntime")
    from conformance.runners import load

    return load(MHA)


def test_contrib_mha_hands_its_axes_to_the_ledger():
    from conformance.conventions.probes.table import raw_probes
    from conformance.runners.onnx.contrib_mha import OnnxContribMHA

    from conformance.conventions.probes.table import asked_probes

    assert set(asked_probes(OnnxContribMHA())) <= set(ASKED_PROBES)
    assert set(raw_probes(OnnxContribMHA())) == {
        "attn_mask_polarity", "float_mask", "causal_flag", "mixed_dtype", "unbatched_input"}


def test_contrib_mha_cells_from_its_own_calls():
    from conformance.conventions.probes import flags

    runner = _mha()
    align, layout = cache.cache_causal_alignment_cell(runner), cache.cache_layout_cell(runner)
    assert align.value == "lower_right" and "past_key" in align.evidence, align.evidence
    assert layout.value == ("BNSH, two tensors (past_key, past_value in; present_key, "
                            "present_value out), growing ((2, 2, 3, 4) -> (2, 2, 4, 4))")
    pol = flags.attn_mask_polarity_cell(runner)
    assert pol.value == "true_attends" and "key_padding_mask (B, T, S) int32" in pol.evidence
    assert "a bool key_padding_mask refused" in pol.evidence  # onnxruntime's type check
    assert flags.float_mask_cell(runner).value == "added"
    assert ASKED_PROBES["softmax_scale"](runner).value == "configurable"
    precision = ASKED_PROBES["scale_precision"](runner)
    assert precision.value == REFUSED and "tensor(double)' of input parameter" in precision.evidence


def test_contrib_mha_unidirectional_reads_row_by_row():
    """onnxruntime's CPU kernel, unidirectional=1 on T 3 != S 5: rows 0 and 1 attend upper
    left, the last row every key (lower right = no mask there): `depends`, each row named."""
    from conformance.conventions.probes import flags

    cell = flags.causal_flag_cell(_mha())
    assert cell.value == "depends", cell.evidence
    assert "query row 0: upper_left; query row 1: upper_left; query row 2: lower_right = " \
        "ignored" in cell.evidence


def _planted_causal(out_of):
    """A runner answering is_causal with the oracle under `out_of(case)` (a (T, S) mask)."""
    from conformance.conventions.probes.probing import output_with

    class Planted(Runner):
        name, answers = "planted", frozenset({"is_causal"})

        def answer(self, case, data, raw):
            allowed = np.broadcast_to(out_of(case), (case.inputs.batch, *out_of(case).shape))
            return output_with(case, allowed.copy()), "planted(is_causal=True)"

    return Planted()


def test_a_planted_mixed_row_causal_switch_reads_depends():
    from conformance.conventions.probes import flags

    def tri(case, off):
        t, s = case.inputs.query_len, case.inputs.key_len
        return np.arange(s)[None, :] <= np.arange(t)[:, None] + off

    def last_row_all(case):
        m = tri(case, 0)
        m[-1] = True
        return m

    upper = flags.causal_flag_cell(_planted_causal(lambda c: tri(c, 0)))
    lower = flags.causal_flag_cell(_planted_causal(
        lambda c: tri(c, c.inputs.key_len - c.inputs.query_len)))
    mixed = flags.causal_flag_cell(_planted_causal(last_row_all))
    assert (upper.value, lower.value, mixed.value) == ("upper_left", "lower_right", "depends")
    assert "no reading matches" not in upper.evidence


def test_a_planted_contrib_graph_that_drops_unidirectional_reads_ignored(monkeypatch):
    from conformance.conventions.probes import flags
    from conformance.runners.onnx import contrib_mha_graph

    real = contrib_mha_graph.build_model
    monkeypatch.setattr(contrib_mha_graph, "build_model", lambda case, data, unidirectional=0:
                        real(case, data))
    assert flags.causal_flag_cell(_mha()).value == "ignored"


def test_contrib_mha_feature_cells_from_its_schema_names():
    from conformance.conventions.probes import ledger_cells

    cells = {c.axis: c for c in ledger_cells(_mha())}
    assert cells["softcap"].value == "not_applicable"
    assert "attributes and inputs (ContribOperators.md)" in cells["softcap"].evidence
    assert cells["cache_layout"].evidence.startswith("onnx.contrib-mha.ort, probe_case")


# -- onnx.attention-op.cache.* / .static-cache.*: the ledger asks the cache axes -----------

def _cache(kind: str, engine: str = "ort"):
    require("onnx", "onnxruntime")
    from conformance.runners import load

    return load("conformance.runners.onnx.attention_cache:OnnxAttentionCache",
                {"engine": engine, "cache": kind})


@pytest.mark.parametrize("kind, word", [
    ("past", "BNSH, two tensors (past_key, past_value in; present_key, present_value out), "
             "growing ((2, 2, 3, 4) -> (2, 2, 4, 4))"),
    ("static", "BNSH, two preallocated tensors (key and value caches written by "
               "TensorScatter, returned whole), preallocated ((2, 2, 4, 4) -> (2, 2, 4, 4))")])
def test_attention_cache_cells_from_its_own_decode(kind, word):
    runner = _cache(kind)
    assert cache.cache_causal_alignment_cell(runner).value == "lower_right"
    assert cache.cache_layout_cell(runner).value == word


def test_the_external_cache_answers_its_causal_switch_and_lengths():
    from conformance.conventions.probes import flags

    runner = _cache("static", "reference")
    cell = flags.causal_flag_cell(runner)
    assert cell.value == "lower_right" and "nonpad_kv_seqlen=[5, 5]" in cell.evidence
    row = ASKED_PROBES["fully_masked_row"](runner)
    assert row.value == "zeros" and "probe-fully-padded-item" in row.evidence, row.evidence
    from conformance.conventions.probes.api_facts import own_cells

    own = next(c for c in own_cells(runner) if c.axis == "key_padding_polarity")
    assert ASKED_PROBES["key_padding_polarity"](runner, own).value == "lengths"


def test_an_external_cache_aligned_top_left_moves_its_causal_flag(monkeypatch):
    """onnx.reference before the onnx/onnx#8068 errata: is_causal beside nonpad_kv_seqlen
    aligned top-left; planted as the plain causal graph, the cell reads upper_left."""
    from dataclasses import replace

    from conformance.conventions.probes import flags
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    real = OnnxAttentionOp.run

    def top_left(self, case, translation, data):
        return real(self, case, replace(translation, plan=replace(translation.plan,
                                                                  nonpad=None)), data)

    monkeypatch.setattr(OnnxAttentionOp, "run", top_left)
    assert flags.causal_flag_cell(_cache("static", "reference")).value == "upper_left"


def _lengths_only(row_of):
    """A runner taking valid key lengths only (no per-row mask): its fully padded item's
    rows are `row_of(expected attention)`."""
    from conformance.contract.runner import NotExpressible, Observation, Translation
    from conformance.oracle.reference import attention

    class LengthsOnly(Runner):
        name = "planted-lengths"

        def translate(self, case):
            if case.mask.masked_rows:
                return NotExpressible("valid key lengths only")
            return Translation("planted(lengths)", None)

        def run(self, case, translation, data):
            exp = attention(case, data)
            out = np.array(exp.output)
            out[exp.fully_masked] = row_of(exp)[exp.fully_masked]
            return Observation(output=out)

    return LengthsOnly()


@pytest.mark.parametrize("row_of, word", [
    (lambda e: e.output_if_zeros, "zeros"), (lambda e: e.output_if_uniform, "uniform"),
    (lambda e: np.full_like(e.output_if_zeros, np.nan), "nan"),
    (lambda e: e.output_if_zeros + 0.5, "finite_other")])
def test_a_lengths_only_system_is_asked_a_fully_padded_item(row_of, word):
    cell = ASKED_PROBES["fully_masked_row"](_lengths_only(row_of))
    assert cell.value == word, cell.evidence
    assert "asked as probe-fully-padded-item" in cell.evidence


# -- softcap_order (conventions/probes/softcap.py) and the Attention op's raw window -------

def _softcap_answering(word):
    """A runner answering attn_mask with the output of the softcap order `word`."""
    from conformance.conventions.probes import cache_probes as cp

    class Planted(Runner):
        name, answers = "planted-softcap", frozenset({"attn_mask"})

        def answer(self, case, data, raw):
            cap = case.attention.softcap
            return cp.softcap_order_candidates(case, cap, raw.value)[word], "planted(mask)"

    return Planted()


@pytest.mark.parametrize("word, cell", [("before_mask", "before_mask"),
                                        ("after_mask", "after_mask"), ("no softcap", "ignored")])
def test_a_planted_softcap_order_moves_the_cell(word, cell):
    from conformance.conventions.probes.softcap import softcap_order_cell

    got = softcap_order_cell(_softcap_answering(word))
    assert got.value == cell, got.evidence
    assert "softcap 1 with a finite float attn_mask 0 / -2" in got.evidence


def test_softcap_order_of_a_runner_passing_no_mask_is_not_probed():
    from conformance.conventions.probes.softcap import softcap_order_cell

    class NoMask(Runner):
        name, answers = "no-mask", frozenset()

        def translate(self, case):  # nor can it say the capped case
            from conformance.contract.runner import NotExpressible

            return NotExpressible("no softcap argument")

    assert softcap_order_cell(NoMask()).value == "not_probed"


def test_the_attention_op_answers_softcap_order_and_its_window():
    from conformance.conventions.probes import RAW_PROBES
    from conformance.conventions.probes.softcap import softcap_order_cell
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    require("onnx", "onnxruntime")
    for engine in ("ort", "reference"):
        r = OnnxAttentionOp(engine=engine)
        assert softcap_order_cell(r).value == "before_mask"
        cell = RAW_PROBES["window_width"][1](r)
        assert cell.value == "left_right", cell.evidence
        assert "left_window_size=2, right_window_size=1" in cell.evidence


def test_a_planted_window_read_right_left_is_not_left_right(monkeypatch):
    """A graph that swaps left_window_size and right_window_size: the pair (2, 1) no longer
    reads left_right."""
    from dataclasses import replace

    from conformance.conventions.probes import RAW_PROBES
    from conformance.runners.onnx import attention_op

    real = attention_op.build_model

    def swapped(case, data, plan, mask=None):
        if plan.window is not None:
            plan = replace(plan, window=plan.window[::-1])
        return real(case, data, plan, mask)

    monkeypatch.setattr(attention_op, "build_model", swapped)
    cell = RAW_PROBES["window_width"][1](attention_op.OnnxAttentionOp(engine="reference"))
    assert cell.value != "left_right", cell.evidence


# -- GroupQueryAttention's softcap, sinks, window and masked row: the ledger's (#29) -------
# forms.first_taken: a refusal at run time (the CPU kernel's head size) sends the probe on
# to the forms with the runner's probe_needs; softcap.py: a runner passing no raw mask is
# asked the case's mask with fill -1e4 through its translate and run

class _Kernel(Runner):
    """A planted system in the oracle's arithmetic: self-attention only, its 'kernel'
    refusing head sizes that are no multiple of 8 at run time (as onnxruntime's CPU
    GroupQueryAttention); `plant(case, data) -> output` replaces the arithmetic."""

    name = "planted-kernel"
    answers = frozenset()

    def __init__(self, plant=None, probe_needs=None):
        self.plant, self.probe_needs = plant, probe_needs or {}

    def translate(self, case):
        from conformance.contract.runner import NotExpressible, Translation

        if not case.inputs.self_attention:
            return NotExpressible("self-attention only")
        return Translation("planted(q, k, v)", None)

    def run(self, case, translation, data):
        from conformance.contract.runner import Observation
        from conformance.oracle.reference import attention

        if case.attention.qk_head_dim % 8:
            raise RuntimeError(f"head_size must be a multiple of 8. Got "
                               f"{case.attention.qk_head_dim}")
        out = self.plant(case, data) if self.plant else attention(case, data).output
        return Observation(output=out)


def _uncapped(case, data):
    from dataclasses import replace

    from conformance.oracle.reference import attention

    return attention(replace(case, attention=replace(case.attention, softcap=None)), data).output


def _unsunk(case, data):
    from dataclasses import replace

    from conformance.oracle.reference import attention

    return attention(case, replace(data, weights=replace(data.weights, sinks=None))).output


@pytest.mark.parametrize("plant, word", [(None, "applied"), (_uncapped, "ignored")])
def test_a_kernel_refusal_sends_softcap_on_to_the_form_of_its_needs(plant, word):
    from conformance.conventions.probes.capped import softcap_cell

    cell = softcap_cell(_Kernel(plant, {"query_features": 16}))
    assert cell.value == word, cell.evidence
    assert "asked as probe-softcap-with-needs-self-attention" in cell.evidence
    assert "probe-softcap-self-attention refused: RuntimeError: head_size must" in cell.evidence


@pytest.mark.parametrize("plant, word", [(None, "applied"), (_unsunk, "ignored")])
def test_a_kernel_refusal_sends_sinks_on_to_the_form_of_its_needs(plant, word):
    from conformance.conventions.probes.scores import sinks_cell

    cell = sinks_cell(_Kernel(plant, {"query_features": 16}))
    assert cell.value == word, cell.evidence


def test_a_refusal_on_every_form_is_refused_with_the_systems_words():
    """Without probe_needs (or with needs the kernel refuses too) nothing answers: the cell
    is the first refusal, quoted, never not_applicable nor not_probed."""
    from conformance.conventions.probes.capped import softcap_cell

    for needs in ({}, {"query_features": 12}):  # 2 heads of 6: refused as well
        cell = softcap_cell(_Kernel(None, needs))
        assert cell.value == REFUSED, cell.evidence
        assert "head_size must be a multiple of 8. Got 4" in cell.evidence


def _ordered(word):
    def plant(case, data):
        from conformance.conventions.probes import cache_probes as cp

        add = np.where(data.inputs.allowed, 0.0, -1e4)
        return cp.softcap_order_candidates(case, case.attention.softcap, add)[word]
    return plant


@pytest.mark.parametrize("word, cell", [("before_mask", "before_mask"),
                                        ("after_mask", "after_mask"), ("no softcap", "ignored")])
def test_softcap_order_of_a_runner_passing_no_raw_mask_reads_the_cases_mask(word, cell):
    from conformance.conventions.probes.softcap import softcap_order_cell

    got = softcap_order_cell(_Kernel(_ordered(word), {"query_features": 16}))
    assert got.value == cell, got.evidence
    assert "a random mask with fill -1e4" in got.evidence


def test_gqa_hands_softcap_sinks_window_and_masked_row_to_the_ledger():
    from conformance.conventions.probes import ledger_cells

    cells = {c.axis: c for c in ledger_cells(_gqa())}
    # window_width: under its causal mask 2w - 1 keys are the w keys a query sees, one
    # candidate (cache_probes.window_candidates), not a tie
    want = {"softcap": "applied", "softcap_order": "before_mask", "sinks": "applied",
            "window_width": "w_keys", "fully_masked_row": "nan"}
    assert "2w_minus_1_keys" not in cells["window_width"].evidence
    for axis, word in want.items():
        assert cells[axis].value == word, cells[axis].evidence
        assert cells[axis].evidence.startswith("onnx.contrib-gqa.ort"), cells[axis].evidence
    assert "causal=1, local_window_size=3" in cells["window_width"].evidence


def test_a_gqa_graph_dropping_head_sink_reads_sinks_ignored(monkeypatch):
    from dataclasses import replace

    from conformance.conventions.probes.scores import sinks_cell
    from conformance.runners.onnx import contrib_gqa

    real = contrib_gqa.build_model
    monkeypatch.setattr(contrib_gqa, "build_model", lambda case, data, plan, decode=False:
                        real(case, data, replace(plan, head_sink=False), decode))
    cell = sinks_cell(_gqa())
    assert cell.value == "ignored", cell.evidence


def test_a_gqa_window_one_key_wider_reads_w_plus_1_keys(monkeypatch):
    """The runner passes the number as given: a planted +1 (the kernel before #25927)
    moves the cell."""
    from dataclasses import replace

    from conformance.conventions.probes.window_settings import window_settings_cell
    from conformance.runners.onnx import contrib_gqa

    real = contrib_gqa.build_model

    def wider(case, data, plan, decode=False):
        w = plan.local_window_size
        return real(case, data, replace(plan, local_window_size=None if w is None else w + 1),
                    decode)

    monkeypatch.setattr(contrib_gqa, "build_model", wider)
    cell = window_settings_cell(_gqa())  # under the causal mask 2w + 1 is w + 1 keys seen
    assert cell.value == "w_plus_1_keys", cell.evidence


# -- GroupQueryAttention's heads, rotation and QK-norm: the ledger's (#29) ----------------
# needs.py: a runner's probe_head_size is asked last, after every other form was refused
# (the CPU kernel: head sizes multiples of 8, 16 to rotate, cos_cache widths of 8), a rotary
# width scaled with it; qk_norm.py: a run-time refusal of the one form the op has is
# `refused` beside the forms it cannot say

class _Rotating(_Kernel):
    """The planted kernel, refusing head sizes that are no multiple of 16 (and rotary
    widths that are no multiple of 16) at run time; QK-norm rms per_head only (at 2 heads
    of 8), refused at run time as onnxruntime's CPU kernel refuses q_norm_weight unless
    `norms`."""

    def __init__(self, plant=None, probe_head_size=32, norms=False):
        super().__init__(plant, {"query_features": 16})
        self.probe_head_size, self.norms = probe_head_size, norms

    def translate(self, case):
        from conformance.contract.runner import NotExpressible

        n = case.attention.qk_norm
        if n is not None and (n.kind, n.scope) != ("rms", "per_head"):
            return NotExpressible(f"QK-norm {n.kind} {n.scope}: per-head RMS only")
        return super().translate(case)

    def run(self, case, translation, data):
        a = case.attention
        if a.qk_norm is not None and not self.norms:
            raise RuntimeError("q_norm_weight / k_norm_weight inputs are not supported")
        if a.qk_norm is None and (a.qk_head_dim % 16 or (a.rope is not None
                                                         and a.rope.rotary_dim % 16)):
            raise RuntimeError(f"head_size shall be a multiple of 16. Got {a.qk_head_dim}")
        return super().run(case, translation, data)


def _tiled(case, data):
    from conformance.conventions.probes.probe_cells import kv_mapping_candidates

    return kv_mapping_candidates(case, data)["tiled"]


def _whole_head(case, data):
    from dataclasses import replace

    from conformance.oracle.reference import attention

    a = case.attention
    return attention(replace(case, attention=replace(a, rope=replace(
        a.rope, rotary_dim=a.qk_head_dim))), data).output


def _half_split_only(case, data):
    from dataclasses import replace

    from conformance.oracle.reference import attention

    a = case.attention
    return attention(replace(case, attention=replace(a, rope=replace(
        a.rope, style="half_split"))), data).output


@pytest.mark.parametrize("plant, word", [(None, "grouped"), (_tiled, "tiled")])
def test_a_kernel_refusing_the_probes_head_size_is_asked_at_its_own(plant, word):
    cell = ASKED_PROBES["kv_head_mapping"](_Rotating(plant))
    assert cell.value == word, cell.evidence
    assert "asked as probe-kv-head-mapping-with-needs-head-size-self-attention" in cell.evidence
    assert "head_size shall be a multiple of 16. Got 2" in cell.evidence  # the refusal quoted


def test_without_a_probe_head_size_the_kernels_refusal_is_the_cell():
    cell = ASKED_PROBES["kv_head_mapping"](_Rotating(probe_head_size=None))
    assert cell.value == REFUSED, cell.evidence
    assert "head_size shall be a multiple of 16. Got 2" in cell.evidence


@pytest.mark.parametrize("plant, word", [(None, "supported"), (_whole_head, "ignored")])
def test_rope_partial_at_the_kernels_head_size_scales_the_rotary_width(plant, word):
    """rotary_dim 4 of 8 is asked as 16 of 32; `ignored` is all 32 rotating (not 8)."""
    cell = ASKED_PROBES["rope_partial"](_Rotating(plant))
    assert cell.value == word, cell.evidence
    assert "rotary_dim 16 of head dim 32" in cell.evidence


@pytest.mark.parametrize("plant, word", [(None, "choosable"), (_half_split_only, "half_split")])
def test_rope_style_at_the_kernels_head_size(plant, word):
    cell = ASKED_PROBES["rope_style"](_Rotating(plant))
    assert cell.value == word, cell.evidence
    assert "rope-style-with-needs-head-size" in cell.evidence


def test_a_qk_norm_refused_at_run_time_is_refused_beside_inexpressible_scopes():
    cell = ASKED_PROBES["qk_norm_scope"](_Rotating())
    assert cell.value == REFUSED, cell.evidence
    assert "q_norm_weight / k_norm_weight inputs are not supported" in cell.evidence
    ran = ASKED_PROBES["qk_norm_scope"](_Rotating(norms=True))  # a kernel that runs it
    assert ran.value == "per_head", ran.evidence


def test_gqa_hands_its_heads_rotation_and_qk_norm_to_the_ledger():
    from conformance.conventions.probes import ledger_cells

    cells = {c.axis: c for c in ledger_cells(_gqa())}
    want = {"kv_head_mapping": "grouped", "rope_style": "choosable",
            "rope_partial": "supported", "qk_norm_scope": REFUSED}
    for axis, word in want.items():
        assert cells[axis].value == word, cells[axis].evidence
        assert cells[axis].evidence.startswith("onnx.contrib-gqa.ort"), cells[axis].evidence
    assert ("kv-head-mapping-self-attention refused: onnxruntime's CPU GroupQueryAttention "
            "kernel refuses the case") in cells["kv_head_mapping"].evidence
    assert ("rms per_head: not answered: onnxruntime's CPU GroupQueryAttention kernel "
            "refuses the case") in cells["qk_norm_scope"].evidence
