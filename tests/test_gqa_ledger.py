"""The ledger's judgements onnxruntime's com.microsoft.GroupQueryAttention hands its axes to:
per-item key counts passed raw (key_padding.py, RawCall "key_lengths": seqlens_k read as
the valid length - 1), its causal attribute on a prompt (causal_self.py, after the CPU
kernel refused heads of 4), and the op's schema facts and the engine's refusals
(gqa_facts.py, no oracle).  A toy system answers each raw argument right, then with a
planted defect the cell must name."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.axes import IGNORED, NOT_PROBED, REFUSED
from conformance.conventions.probes.probing import output_with
from conformance.contract.runner import Runner
from conformance.conventions.probes import key_padding
from conformance.conventions.probes.causal_self import causal_self_attention_cell
from conformance.oracle.canonical import causal_mask
from tests.helpers import require


class ToyLengths(Runner):
    """The oracle as a system with a per-item key-count argument; `offset` what a count
    means (0: the valid length, 1: the valid length - 1), `plant` a defect ("inverted":
    the counted keys are the masked ones, "dropped": the counts never reach the scores)."""

    name, framework, system = "toy.lengths", "toy", "toy"
    answers = frozenset({"key_lengths"})

    def __init__(self, offset: int = 0, plant: str = ""):
        super().__init__()
        self.offset, self.plant = offset, plant

    def answer(self, case, data, raw):
        i = case.inputs
        valid = np.arange(i.key_len)[None, :] < (np.asarray(raw.value) + self.offset)[:, None]
        keys = np.broadcast_to(valid[:, None, :], (i.batch, i.query_len, i.key_len))
        mask = {"": keys, "inverted": ~keys, "dropped": None}[self.plant]
        return output_with(case, mask), f"toy(lengths={list(raw.value)})"


@pytest.mark.parametrize("offset, plant, word", [
    (0, "", "lengths"), (1, "", "lengths"), (0, "inverted", "true_blocks"),
    (1, "inverted", "true_blocks"), (0, "dropped", IGNORED)])
def test_key_counts_are_read_with_their_offset(offset, plant, word):
    cell = key_padding.key_padding_polarity_cell(ToyLengths(offset, plant))
    assert cell.value == word, cell.evidence
    if not plant:
        said = "valid length - 1" if offset else "valid length:"
        assert said in cell.evidence, cell.evidence


def test_a_runner_without_counts_is_asked_its_boolean_padding():
    class Bool(ToyLengths):
        answers = frozenset({"key_padding"})

        def answer(self, case, data, raw):
            return output_with(case, raw.value[:, None, :]), "toy(key_padding_mask=...)"
    assert key_padding.key_padding_polarity_cell(Bool()).value == "true_attends"


class ToyCausalKernel(Runner):
    """A self-attention system whose kernel refuses heads that are no multiple of 8 and
    whose causal switch `switch` ("applies" or "ignored") does what it says."""

    name, framework, system = "toy.kernel", "toy", "toy"
    answers = frozenset({"is_causal"})
    probe_needs = {"query_features": 16}

    def __init__(self, switch: str = "applies"):
        super().__init__()
        self.switch, self.asked = switch, []

    def answer(self, case, data, raw):
        self.asked.append(case.id)
        a, i = case.attention, case.inputs
        if a.qk_head_dim % 8:
            raise ValueError(f"head_size must be a multiple of 8, got {a.qk_head_dim}")
        allowed = causal_mask(i.query_len, i.key_len, "upper_left") if (
            raw.value and self.switch == "applies") else None
        return output_with(case, allowed), "toy(causal=1)"


def test_a_kernel_refusal_sends_the_causal_switch_on_to_the_needs():
    """The plain T = S form is refused (heads of 4), the form with the needs (heads of 8)
    answers: the switch applies (not_probed: T = S hides the alignment); planted, a switch
    that does nothing reads ignored; a kernel refusing every form reads its words."""
    r = ToyCausalKernel()
    cell = causal_self_attention_cell(r, "self-attention only")
    assert cell.value == NOT_PROBED and "the switch applies" in cell.evidence, cell.evidence
    assert len(r.asked) == 2 and r.asked[-1].endswith("-with-needs"), r.asked
    assert causal_self_attention_cell(ToyCausalKernel("ignored"), "").value == IGNORED

    class Always(ToyCausalKernel):
        probe_needs = {"query_features": 12}  # heads of 6: refused too
    cell = causal_self_attention_cell(Always(), "")
    assert cell.value == REFUSED and "multiple of 8, got 4" in cell.evidence, cell.evidence


# ---- the runner itself


@pytest.fixture(scope="module")
def gqa_cells():
    require("onnx", "onnxruntime")
    from conformance.conventions.probes import ledger_cells
    from conformance.runners.onnx.contrib_gqa import OnnxContribGQA

    return {c.axis: c for c in ledger_cells(OnnxContribGQA())}


def test_gqa_seqlens_k_and_causal_attribute(gqa_cells):
    cell = gqa_cells["key_padding_polarity"]
    assert cell.value == "lengths" and "seqlens_k=[3, 2]" in cell.evidence
    assert "valid length - 1" in cell.evidence, cell.evidence  # "total_sequence_lengths - 1"
    cell = gqa_cells["causal_flag"]
    assert cell.value == NOT_PROBED and "causal=1" in cell.evidence, cell.evidence


def test_gqa_refusals_are_the_engines_words(gqa_cells):
    for axis in ("unbatched_input", "mixed_dtype", "scale_precision", "float64_compute"):
        assert gqa_cells[axis].value == REFUSED, gqa_cells[axis].evidence
    assert "expected to have 3 dimensions" in gqa_cells["unbatched_input"].evidence
    assert gqa_cells["softmax_scale"].value == "configurable"
    assert gqa_cells["alibi_slopes"].value == "not_applicable"  # the schema's names
