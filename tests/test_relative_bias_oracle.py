"""Closed-form checks of T5's relative-bias oracle (oracle/relative_bias.py), no forward
pass: its bucket ids over relative positions -300..300 against transformers'
T5Attention._relative_position_bucket (transformers/models/t5/modeling_t5.py#L218) and
keras-hub's T5MultiHeadAttention._relative_position_bucket (keras_hub/src/models/t5/
t5_multi_head_attention.py#L138) at T5's table and at other sizes, with the paper's
figures by hand; a port with the sign flipped, or the encoder's buckets computed as the
decoder's, is caught.  The case reader's limits and the parameter count come last."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.case.model import CaseError
from conformance.oracle import relative_bias as oracle
from conformance.oracle.reference import formula_parameters

DISTANCES = np.arange(-300, 301)
# (num_buckets, max_distance): T5's own, the small table of the cases, and sizes whose
# logarithmic edges fall on whole numbers (16 / 32, 64 / 256: powers of two)
TABLES = ((32, 128), (8, 6), (16, 32), (64, 256), (33, 100))


def hf_buckets(rel: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int):
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    return t5.T5Attention._relative_position_bucket(
        torch.tensor(rel), bidirectional=bidirectional, num_buckets=num_buckets,
        max_distance=max_distance).numpy()


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("table", TABLES, ids=[f"{n}-{d}" for n, d in TABLES])
def test_transformers_buckets_are_the_oracles(table, bidirectional):
    num_buckets, max_distance = table
    ours = oracle.buckets(DISTANCES, num_buckets, max_distance, bidirectional)
    assert np.array_equal(hf_buckets(DISTANCES, bidirectional, *table), ours)


def test_the_papers_buckets_by_hand():
    """32 buckets, max distance 128, encoder: 16 a side, 8 exact; 8 + floor(8 log(d / 8) /
    log 16) beyond, the upper half for keys after the query; the decoder's 32 face back."""
    enc = {-1: 1, -7: 7, -8: 8, -15: 9, -16: 10, -32: 12, -64: 14, -127: 15, -300: 15,
           0: 0, 1: 17, 7: 23, 8: 24, 16: 26, 32: 28, 64: 30, 128: 31, 300: 31}
    dec = {0: 0, 5: 0, 300: 0, -1: 1, -15: 15, -16: 16, -32: 21, -64: 26, -128: 31}
    for table, bidirectional in ((enc, True), (dec, False)):
        rel = np.array(list(table))
        assert oracle.buckets(rel, 32, 128, bidirectional).tolist() == list(table.values())


_KERAS_WITNESS = """
import json, numpy as np
from keras_hub.src.models.t5.t5_multi_head_attention import T5MultiHeadAttention
d = np.arange(-300, 301, dtype="int32")
out = {f"{n}-{m}-{b}": np.asarray(T5MultiHeadAttention._relative_position_bucket(
           d, bidirectional=b, num_buckets=n, max_distance=m)).tolist()
       for n, m in %r for b in (True, False)}
print(json.dumps(out))
"""


def test_keras_hub_buckets_are_the_oracles():
    """keras-hub's bucket function in a fresh process on the numpy backend (Keras fixes its
    backend at import), every table of TABLES both ways."""
    pytest.importorskip("keras_hub", reason="keras-hub not installed")
    env = {**os.environ, "KERAS_BACKEND": "numpy", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", _KERAS_WITNESS % (TABLES,)], env=env,
                          capture_output=True, text=True, timeout=240, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for (n, m) in TABLES:
        for b in (True, False):
            assert seen[f"{n}-{m}-{b}"] == oracle.buckets(DISTANCES, n, m, b).tolist(), (n, m, b)


def test_a_port_with_the_sign_flipped_is_caught():
    """transformers' function handed query - key (a port's arange operands swapped)."""
    flipped = hf_buckets(-DISTANCES, True, 32, 128)
    ours = oracle.buckets(DISTANCES, 32, 128, True)
    assert (flipped != ours).sum() == 600  # every pair but distance 0


def test_bidirectional_read_as_unidirectional_is_caught():
    """The encoder's buckets computed as the decoder's (is_decoder taken the wrong way)."""
    decoders = hf_buckets(DISTANCES, False, 32, 128)
    ours = oracle.buckets(DISTANCES, 32, 128, True)
    wrong = DISTANCES[decoders != ours]
    assert wrong.size > 300 and (wrong > 0).sum() == 300  # every key after the query


def _case(**relative_bias):
    return parse_case({"id": "rb", "attention": {
        "num_heads": 2, "query_features": 8, "bias": False, "scale": 1.0,
        "relative_bias": relative_bias}, "inputs": {"batch": 1, "query_len": 3}}, "<test>")


def test_the_table_is_counted_and_drawn_per_head():
    from conformance.oracle.canonical import case_data

    case = _case(num_buckets=8, max_distance=6)
    assert formula_parameters(case) == 4 * 8 * 8 + 8 * 2
    assert case_data(case).weights.relative_bias.shape == (8, 2)
    assert "relative_bias" in case.features


@pytest.mark.parametrize("fields, where", [
    ({"num_buckets": 2}, "num_buckets"),  # one bucket a side: no exact one
    ({"num_buckets": 32, "max_distance": 8}, "max_distance"),  # 8 exact: no log bins
    ({"relative_position": "i_minus_j"}, "relative_position"),
    ({"buckets": 32}, "buckets"),
])
def test_the_reader_names_the_field(fields, where):
    with pytest.raises(CaseError, match=where):
        _case(**fields)
