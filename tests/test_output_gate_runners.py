"""The output gate's witnesses against the float64 oracle (oracle/output_gate.py):
transformers' and mlx-lm's Qwen3NextAttention, each built at tiny widths with the canonical
W_q and W_g packed per head into q_proj, and transformers' AfmoeAttention with its own
gate_proj; the same weights split in halves (the port gate_packing exists
to catch) land far from the oracle on the real module; the module's own state converts
back bit for bit; the ledger reads per_head from both; and what each cannot say is refused
in its own words."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import load_file, parse_case
from conformance.contract.runner import NotExpressible, RawCall
from conformance.conventions.probes.gate import gate_packing_cell
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.paths import ROOT

AGREE, DIFFER = 1e-5, 1e-2  # float32 modules; a wrong packing moves the output by O(0.1)
CASES = load_file(ROOT / "cases" / "output_gate_qwen3_next.yaml")


def needs(*modules: str) -> None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")


def hf():
    needs("torch", "transformers")
    from conformance.runners.hf.qwen3_next import HFQwen3Next

    return HFQwen3Next()


def afmoe():
    needs("torch", "transformers")
    from conformance.runners.hf.afmoe import HFAfmoe

    return HFAfmoe()


def mlx():
    needs("mlx", "mlx_lm")
    from conformance.runners.mlx.qwen3_next import MlxLmQwen3Next

    return MlxLmQwen3Next()


def packed_distance(runner, case, packing: str) -> float:
    data = case_data(case)
    out, _ = runner.answer(case, data, RawCall("packed_gate", packing))
    return float(np.abs(out - attention(case, data).output).max())


@pytest.mark.parametrize("make", [hf, mlx], ids=["hf", "mlx"])
@pytest.mark.parametrize("case", [c for c in CASES if not c.inputs.position_offset],
                         ids=lambda c: c.id)
def test_per_head_agrees_and_halves_is_caught(make, case):
    runner = make()
    assert packed_distance(runner, case, "per_head") < AGREE
    assert packed_distance(runner, case, "halves") > DIFFER  # planted: split in halves


def test_hf_far_positions_agree():
    runner, case = hf(), next(c for c in CASES if c.inputs.position_offset)
    t = runner.translate(case)
    data = case_data(case)
    out = runner.run(case, t, data).output
    assert np.abs(out - attention(case, data).output).max() < AGREE


def test_hf_module_state_converts_back_bit_for_bit():
    runner, case = hf(), CASES[1]  # with biases: q_proj.bias packed too
    from conformance.convert.gate import from_qwen3_next
    from conformance.runners.hf.common import import_torch

    torch = import_torch()
    data = case_data(case)
    module = runner.module_for(torch, case, runner.translate(case).plan, data.weights)
    back = from_qwen3_next(module.state_dict(), 2, 2)
    for name in ("wq", "wg", "bq", "bg", "q_norm", "k_norm", "wo"):
        assert np.array_equal(getattr(back, name), getattr(data.weights, name)), name


@pytest.mark.parametrize("make", [hf, mlx], ids=["hf", "mlx"])
def test_the_ledger_reads_per_head_from_both_witnesses(make):
    cell = gate_packing_cell(make())
    assert cell.value == "per_head", cell.evidence
    assert "refused separate" in cell.evidence  # no gate_proj: the module's own error


def test_afmoe_holds_the_gate_in_its_own_projection():
    """AfmoeAttention's gate_proj: the canonical weights loaded apart agree, packed into
    q_proj they do not fit (its own error), and the ledger reads separate."""
    runner = afmoe()
    case = next(c for c in load_file(ROOT / "cases" / "output_gate_afmoe.yaml"))
    assert packed_distance(runner, case, "separate") < AGREE
    with pytest.raises(RuntimeError, match="gate_proj"):
        packed_distance(runner, case, "per_head")
    cell = gate_packing_cell(runner)
    assert cell.value == "separate", cell.evidence
    biased = replace(case, attention=replace(case.attention, bias=True))
    assert "bias=False" in runner.translate(biased).reason


def test_what_each_cannot_say_is_refused_in_its_words():
    plain = parse_case({"id": "no-gate", "attention": {
        "num_heads": 2, "query_features": 8, "qk_norm": {"kind": "rms", "scope": "per_head"},
        "rope": {"style": "half_split"}}, "inputs": {"batch": 1, "query_len": 3,
                                                      "self_attention": True}}, "<test>")
    for runner in (hf(), mlx(), afmoe()):
        t = runner.translate(plain)
        assert isinstance(t, NotExpressible) and "no attention.output_gate" in t.reason
        assert "sigmoid(gate" in t.reason
    interleaved = replace(CASES[0], attention=replace(CASES[0].attention, rope=replace(
        CASES[0].attention.rope, style="interleaved")))
    assert "traditional=False" in mlx().translate(interleaved).reason
    assert "rotate_half" in hf().translate(interleaved).reason


def keras_readings() -> dict:
    """In the Keras JAX worker: the gate_packing cell of keras_hub's Qwen3_5Attention and,
    on the Qwen3-Next case, its distance from the oracle per head and in halves."""
    from conformance.runners.keras.hub_qwen3_5 import KerasHubQwen35

    runner = KerasHubQwen35()
    cell = gate_packing_cell(runner)
    return {"word": cell.value, "evidence": cell.evidence,
            **{p: packed_distance(runner, CASES[0], p) for p in ("per_head", "halves")}}


def test_keras_hub_packs_the_gate_per_head_in_its_query_kernel():
    """keras_hub's query kernel (E, H, 2 d) holds [q_h | g_h] head by head: the ledger reads
    per_head, and the same weights in halves are far from the oracle (planted)."""
    needs("keras", "jax", "keras_hub")
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    runner = load("conformance.runners.keras.hub_qwen3_5:KerasHubQwen35")
    found = call_in_worker(runner, "tests.test_output_gate_runners:keras_readings")
    assert found["word"] == "per_head", found["evidence"]
    assert found["per_head"] < AGREE and found["halves"] > DIFFER
