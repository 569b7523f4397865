"""The torch SDPA runners only answer: the ledger asks them (their translate/run, their
probe_translate for the cache's single calls, their raw answers), and a planted wrong
answer moves the ledger's cell."""
from __future__ import annotations

from tests.helpers import require

require("torch")

from conformance.conventions.probes import ledger_cells  # noqa: E402
from conformance.conventions.probes.heads import kv_head_mapping_cell  # noqa: E402
from conformance.conventions.probes.scores import softmax_scale_cell  # noqa: E402
from conformance.runners.torch.sdpa import TorchSDPA  # noqa: E402
from conformance.runners.torch.sdpa_cache import TorchSDPACache  # noqa: E402


def test_the_cache_answers_single_calls_with_the_op_its_steps_call():
    """probe_translate: a case without a decode is one SDPA call (the matrix rows still
    refuse it), so the ledger's single-call axes reach the cache runner."""
    from conformance.conventions.probes.probing import probe_case

    case = probe_case("x")
    runner = TorchSDPACache()
    assert "decode" in runner.translate(case).reason
    assert "scaled_dot_product_attention(q, k, v)" in runner.probe_translate(case).call
    cells = {c.axis: c.value for c in ledger_cells(runner)}
    assert cells["softmax_scale"] == "configurable"
    assert cells["cache_causal_alignment"] == "lower_right"
    assert cells["cache_layout"] == "not_applicable"  # the cache is the runner's, not SDPA's
    assert cells["fully_masked_row"] == "zeros"  # the decode's fully masked step (step_mask)


def test_a_planted_tiled_head_mapping_is_read_tiled(monkeypatch):
    """The planted defect: SDPA maps query head h to kv head h % H_kv (repeat, not
    repeat_interleave); the ledger's cell of torch.sdpa says tiled."""
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def tiled(q, k, v, **kw):
        if kw.pop("enable_gqa", False) and k.shape[1] != q.shape[1]:
            g = q.shape[1] // k.shape[1]
            k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
        return sdpa(q, k, v, **kw)

    assert kv_head_mapping_cell(TorchSDPA()).value == "grouped"
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", tiled)
    assert kv_head_mapping_cell(TorchSDPA()).value == "tiled"


def test_a_decode_that_drops_the_scale_reads_ignored(monkeypatch):
    """The planted defect: SDPA drops scale= (uses its default); the cache runner's
    softmax_scale cell is ignored, not configurable."""
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def no_scale(q, k, v, **kw):
        kw.pop("scale", None)
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_scale)
    assert softmax_scale_cell(TorchSDPACache()).value == "ignored"


def test_runner_cells_of_sdpa_hold_no_judged_axis():
    """The runner's own cells are API facts: the axes the ledger asks are not among the
    words it would keep (a planted own reading of a judged axis is never used)."""
    from conformance.conventions.probes.api_facts import own_cells

    runner = TorchSDPA()
    own = {c.axis for c in own_cells(runner)}
    assert not own & {"argument_order", "softmax_scale", "scale_precision",
                      "kv_head_mapping", "dropout", "causal_flag", "attn_mask_polarity"}
