"""batch_invariance, owned by the ledger: is item i of a batch computed as it would be alone?

One probe case (batch 3, cross-attention of 4 queries over 6 keys, no mask) is asked of the
runner whole, then once per item as a batch of one fed that item's own arrays (the same
weights, the same inputs, sliced from the batch's canonical data), through the runner's own
translate and run: its native calls, nothing else.

Whether the two are bitwise equal is the choice of a kernel, and CPUs choose differently:
a GEMM that folds the batch into its rows sums in an order its blocking picks, and the
library or code path is picked per CPU.  Measured (a Keras MultiHeadAttention on the
TensorFlow backend, 3 items against each alone): bitwise equal where TensorFlow runs its
oneDNN kernels, 6.0e-07 apart under Eigen (TF_ENABLE_ONEDNN_OPTS=0), which TensorFlow
picks by default on every CPU without AVX-512 VNNI, AVX-512 BF16, AVX-VNNI or AMX
(tensorflow/core/util/port.cc, DefaultOneDnnPolicy; the wheel's
libtensorflow_framework.so.2 reads TF_ENABLE_ONEDNN_OPTS over that default);
torch.nn.MultiheadAttention bitwise equal by default, 7.5e-08 apart under MKL_CBWR=COMPATIBLE
(MKL's code for older CPUs).  So a difference within FLOOR_EPS x the probe dtype's eps x the
output's largest |value| reads `within_rounding` on every CPU (this CPU's figure in the
evidence, where check-reports masks it); `differs` is named beyond that floor only, where
no CPU's summation order explains the difference.  More than HARNESS_GAP of the output's size is the
harness's doing (other arrays were run).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.case.loader import Case, parse_case
from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.conventions.probes.probing import PROBE_SOURCE
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.masks import unanswered
from conformance.conventions.probes.request import ask
from conformance.oracle.canonical import CaseData, case_data

AXIS = "batch_invariance"
BATCH = 3
HARNESS_GAP = 1e-3  # a batch kernel moves last bits; more than this is the harness's doing
# what a CPU's choice of kernel may move, in eps of the probe's dtype x the output's largest
# |value|: the probe's reductions are at most 8 terms long; measured moves are up to 6 eps
FLOOR_EPS = 32


def batch_case(batch: int = BATCH, self_attention: bool = False, causal: bool = False,
               decode: bool = False, **attention) -> Case:
    """The probe case (a batch of one stands for each item: the arrays it runs are the
    batch's item, given as data; one case, so a converting runner converts it once);
    `decode`: causal self-attention decoded, a prefill of 3 and one step (DECODE)."""
    raw = {"id": "probe-batch-invariance" + ("-decode" if decode else ""),
           "attention": {"num_heads": 2, "query_features": 8, **attention},
           "inputs": {"batch": batch, "query_len": 4, "key_len": 4 if self_attention else 6,
                      "seed": 7, "self_attention": self_attention}}
    if causal or decode:
        raw["mask"] = {"causal": "upper_left"}
    if decode:
        raw["decode"] = DECODE
    return parse_case(raw, PROBE_SOURCE)


# a decode-only runner's form (its translate takes decodes only): T = S = 4, prefill 3
DECODE = {"prefill": 3, "steps": 1}


# What a system may need of the case to run it at all (no judgement reads the oracle here,
# so any of the case features will do): a causal LM's mask, the rotation, QK-norm or ALiBi a
# module always applies
NEEDS = ({}, {"rope": {"style": "half_split"}}, {"rope": {"style": "interleaved"}},
         {"qk_norm": {"kind": "rms", "scope": "per_head"}},
         {"qk_norm": {"kind": "rms", "scope": "all_heads"}}, {"alibi": True})


def item_data(data: CaseData, i: int) -> CaseData:
    """The batch's data with item i alone (a batch of one): the same weights' arrays (in a
    weights object of its own: a runner may key what it built by the object) and the
    item's own inputs."""
    x = data.inputs
    one = {n: (None if getattr(x, n) is None else getattr(x, n)[i:i + 1])
           for n in ("query", "key", "value", "key_valid", "attn_mask", "allowed",
                     "fully_masked")}
    if x.key is x.query:  # self-attention: one array, as the canonical data has it
        one["key"] = one["value"] = one["query"]
    return replace(data, weights=replace(data.weights), inputs=replace(x, **one))


def _forms(decodes_only: bool = False):
    """The probe in the forms a system may take: cross-attention, then self-attention, then
    causal self-attention with each of NEEDS; with projection biases or without (and
    unscaled: T5).  A runner that decodes only is asked through its decode first (the
    prefill and the step, each item against itself decoded alone)."""
    shapes = [(False, False, {}), (True, False, {})] + [(True, True, n) for n in NEEDS]
    decoded = [(True, True, n, True) for n in NEEDS] if decodes_only else []
    for self_attention, causal, need, decode in decoded + [(*s, False) for s in shapes]:
        for attn in ({}, {"bias": False}, {"bias": False, "scale": 1.0},
                     {"query_features": 16, "bias": False}):  # heads of 8: ORT's CPU GQA
            yield lambda batch, s=self_attention, c=causal, d=decode, a={**attn, **need}: \
                batch_case(batch, s, c, d, **a)


def batch_invariance_cell(runner, what: str = "") -> Convention:
    """Every item of the batch against itself run alone, bitwise."""
    label = what or runner.name
    if not runner.executed:
        return Convention(AXIS, NOT_PROBED, f"{label}: a documented model: its arithmetic "
                          "is the suite's NumPy, not the system's")
    last = None
    for make in _forms(runner.decodes_only):
        whole = make(BATCH)
        got = ask(runner, whole)
        last = got
        if got.answered:
            return _compare(runner, label, make, whole, got)
    return unanswered(AXIS, label, "the batch probe", last)


def _compare(runner, label: str, make, whole: Case, got) -> Convention:
    alone_case, data = make(1), case_data(whole)
    worst = 0.0
    for i in range(BATCH):
        alone = ask(runner, alone_case, item_data(data, i))
        if not alone.answered:
            why = alone.raised or alone.inexpressible or alone.unasked
            return Convention(AXIS, NOT_PROBED, f"{label}: the batch of {BATCH} runs "
                              f"({got.call}) but item {i} alone does not: {why}")
        a, b = got.output[i], alone.output[0]
        if a.shape != b.shape:
            return Convention(AXIS, NOT_PROBED, f"{label}: item {i} alone gives shape "
                              f"{b.shape}, the batch's item {a.shape}")
        if not np.array_equal(a, b, equal_nan=True):
            worst = max(worst, float(np.nanmax(np.abs(a - b))))
    return judged(runner, worst, float(np.nanmax(np.abs(got.output))) or 1.0,
                  _described(label, whole, got.call), whole.inputs.dtype)


def _described(label: str, whole: Case, call: str) -> str:
    form = [w for w, on in (("causal", whole.mask.causal != "none"), (
            f"decoded: prefill {DECODE['prefill']}, then a step", whole.decode is not None), (
            "self-attention",
            whole.inputs.self_attention), ("rope", whole.attention.rope is not None),
            ("qk_norm", whole.attention.qk_norm is not None),
            ("alibi", bool(whole.attention.alibi))) if on]
    return (f"{label}, probe {whole.id} ({BATCH} items, T {whole.inputs.query_len}, S "
            f"{whole.inputs.key_len}, {whole.inputs.dtype}{', ' if form else ''}"
            f"{', '.join(form)}), each item against itself run "
            f"as a batch of one ({call}): ")


def judged(runner, worst: float, scale: float, text: str, dtype: str = "float32"
           ) -> Convention:
    """The cell of the largest |item alone - the batch's item| `worst` at an output of
    largest |value| `scale`: within the floor, the tie every CPU agrees on (the figure is
    this CPU's); beyond it, `differs`; beyond HARNESS_GAP, the harness's limit.  The text
    is the same words on every CPU, only figures move (no item index, no count)."""
    floor = FLOOR_EPS * float(np.finfo(np.dtype(dtype)).eps) * scale
    text += (f"largest |difference| over the {BATCH} items {worst:.1e}, floor {floor:.1e} "
             f"({FLOOR_EPS} x {dtype} eps x the output's largest |value| {scale:.1e})")
    if worst > HARNESS_GAP * scale:  # not a kernel's last bits: other arrays were run
        return Convention(AXIS, NOT_PROBED, text + f", beyond {HARNESS_GAP:g} of the "
                          "output's size: the runner did not run the arrays it was given "
                          "(a harness limit)")
    if worst > floor:
        return Convention(AXIS, "differs", text + ": beyond what a CPU's choice of "
                          "summation order moves")
    return Convention(AXIS, "within_rounding", text + ": within the floor, what a CPU's "
                      "choice of kernel moves (a summation order picked per instruction set "
                      "or library: bitwise equal on one CPU, apart on another)",
                      **documented(runner, AXIS))
