"""The HF attention runners' base class as the ledger asks it: a CacheDecoding HFRunner
(cache_decode.py) whose `probe_takes` name the probe cases the ledger asks through its
translate and run (conventions/probes/: the cache, the fully masked row, float64_compute,
softmax_scale, scale_precision).  Nothing here judges: the cells are the ledger's.
"""
from __future__ import annotations

from conformance.runners.hf.cache_decode import CacheDecoding
from conformance.runners.hf.common import HFRunner


class ProbedHFRunner(CacheDecoding, HFRunner):
    """An HFRunner the ledger asks its cache axes through its own decode (cache_decode.py),
    and float64_compute, softmax_scale and scale_precision through translate/run: a probe
    case in the first form the module takes (its probe_needs: the rotation, QK-norm or
    ALiBi it always applies; probe_mask_needs: GPT-2's causal mask), at probe_head_size
    where the written head size 3 cannot carry the rotation."""

    probe_takes = CacheDecoding.probe_takes | {"float64"}
    probe_head_size = 6  # even (a rotation pairs dimensions), and 1/sqrt(6) is no float32
