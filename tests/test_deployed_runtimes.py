"""The deployment runtimes' own pieces that need no runtime: the ExecuTorch artifact header
(read back from the cache as data) and the one-module-both-calls wrapper the ExecuTorch and
openvino.torch rows convert."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from conformance.runners.executorch.common import FIELDS, HEADER_LIMIT, split

INFO = {"delegated_ops": ["aten.bmm.default"], "portable_ops": ["aten.where.self_out"],
        "delegates": 2, "delegated_nodes": 9, "constant_elements": 288}


def blob(info, pte: bytes = b"PTE-BYTES") -> bytes:
    header = json.dumps(info).encode()
    return struct.pack("<Q", len(header)) + header + pte


def test_header_round_trip():
    info, pte = split(blob(INFO))
    assert info == INFO and pte == b"PTE-BYTES"
    assert set(info) == set(FIELDS)


@pytest.mark.parametrize("bad, words", [
    (b"\x01\x02", "shorter"),
    (struct.pack("<Q", HEADER_LIMIT + 1) + b"x" * (HEADER_LIMIT + 8), "limit"),
    (struct.pack("<Q", 100) + b"{}", "limit"),  # longer than the blob
    (blob({**INFO, "delegates": "2"}), "accounting fields"),
    (blob([1, 2]), "accounting fields"),
    (blob({k: v for k, v in INFO.items() if k != "constant_elements"}), "accounting fields"),
])
def test_header_planted_defects_are_refused(bad, words):
    with pytest.raises(ValueError, match=words):
        split(bad)


def test_extra_header_fields_are_dropped():
    info, _ = split(blob({**INFO, "<script>": "x" * 100}))
    assert set(info) == set(FIELDS)


def test_both_calls_match_the_separate_calls():
    torch = pytest.importorskip("torch")
    from conformance.runners._export.deployed import both_calls

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = torch.randn(2, 3, 8)
    kpm = torch.zeros(2, 3, dtype=torch.bool)
    kpm[1, 2] = True
    out, out_w, weights = both_calls(torch, mha, True, ("key_padding_mask",))(q, kpm)
    plain, _ = mha(q, q, q, key_padding_mask=kpm, need_weights=False)
    _, per_head = mha(q, q, q, key_padding_mask=kpm, average_attn_weights=False)
    assert torch.equal(out, plain)
    assert weights.shape == (2, 2, 3, 3) and torch.allclose(weights, per_head)
    assert np.allclose(out_w.detach().numpy(), out.detach().numpy(), atol=1e-6)
    assert float(weights[1, :, :, 2].detach().abs().max()) == 0.0  # the padded key: no weight


def test_a_native_execution_keeps_the_programs_dtype():
    """The ledger reads the dtype an ExecuTorch program gave its output (mixed_dtype): the
    rows' execute gives float64 arrays, the native one the program's own float32; a float64
    input into the float32 program is the runtime's own refusal, wrapped as not expressible
    with the runtime's error as its cause (torch_native_calls.unwrapped quotes that)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("executorch")
    from conformance.contract.runner import NotExpressibleError
    from conformance.runners.executorch.common import execute, lower

    program = lower(torch, torch.nn.Linear(4, 2).eval(), (torch.zeros(3, 4),))
    feed = {"x": np.ones((3, 4), np.float32)}
    assert execute(program, feed)[0].dtype == np.float64
    assert execute(program, feed, native=True)[0].dtype == np.float32
    with pytest.raises(NotExpressibleError) as refused:
        execute(program, {"x": np.ones((3, 4))}, native=True)
    assert "set_inputs" in str(refused.value.__cause__)
