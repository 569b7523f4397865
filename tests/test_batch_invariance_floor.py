"""batch_invariance across CPUs (conventions/probes/batch.py): whether a batch's item equals
the item run alone bitwise is a kernel's choice, and CPUs choose differently, so a difference
within the floor reads `within_rounding` on every CPU, never bitwise equality from one CPU's
run.

Planted here: a toy system whose batch path sums in another order on one "CPU" (a genuine
float32 rounding, not an added offset) and item by item on the other; the cell must be the
same on both, and its evidence must differ only by figures (what check-reports masks).  The
real case this stands for: keras.tensorflow's probe reads 0.0 with oneDNN on and 1.8e-07
with TF_ENABLE_ONEDNN_OPTS=0 (TensorFlow's default follows the CPU), the same word both
ways."""
from __future__ import annotations


import numpy as np

from conformance.contract.runner import Observation, Runner, Translation
from conformance.conventions.axes import Convention
from conformance.conventions.probes.batch import FLOOR_EPS, HARNESS_GAP, batch_invariance_cell
from conformance.conventions.probes.batch import judged
from conformance.conventions.probes.resolution import named_tie
from conformance.report.masking import texts_agree

F = np.float32


class Toy(Runner):
    """float32 attention; `cpu="eigen"` sums the output projection of a batch of several in
    reverse order (a kernel blocking by batch size), `cpu="onednn"` always in order."""

    name, framework, system = "toy.cpu", "toy", "toy"

    def __init__(self, cpu: str = "onednn", offset: float = 0.0):
        super().__init__()
        self.cpu, self.offset = cpu, F(offset)

    def translate(self, case):
        return Translation(f"toy(batch={case.inputs.batch})")

    def run(self, case, translation, data):
        w, x = data.weights, data.inputs
        q = np.einsum("ble,hed->bhld", x.query.astype(F), w.wq.astype(F)) + w.bq[:, None]
        k = np.einsum("ble,hed->bhld", x.key.astype(F), w.wk.astype(F)) + w.bk[:, None]
        v = np.einsum("ble,hed->bhld", x.value.astype(F), w.wv.astype(F)) + w.bv[:, None]
        q, k, v = q.astype(F), k.astype(F), v.astype(F)
        s = q @ k.transpose(0, 1, 3, 2) / F(np.sqrt(q.shape[-1]))
        p = np.exp(s - s.max(-1, keepdims=True))
        ctx = (p / p.sum(-1, keepdims=True)) @ v  # (b, h, t, d)
        terms = [(h, d) for h in range(ctx.shape[1]) for d in range(ctx.shape[3])]
        if self.cpu == "eigen" and ctx.shape[0] > 1:
            terms.reverse()
        out = np.zeros(ctx.shape[:1] + ctx.shape[2:3] + w.wo.shape[-1:], F)
        for h, d in terms:
            out += ctx[:, h, :, d, None] * w.wo[h, d].astype(F)
        out = out + w.bo.astype(F) + self.offset * (ctx.shape[0] > 1)
        return Observation(out.astype(np.float64))


def test_a_cpu_dependent_rounding_reads_the_same_tie_on_both_cpus():
    onednn, eigen = batch_invariance_cell(Toy("onednn")), batch_invariance_cell(Toy("eigen"))
    assert "items 0.0e+00" in onednn.evidence, onednn.evidence  # bitwise on this "CPU"
    worst = float(eigen.evidence.split("items ")[1].split(",")[0])
    assert 0 < worst < 1e-6, eigen.evidence  # the plant differs, by float32 rounding only
    assert onednn.value == eigen.value == "within_rounding"
    assert "bitwise equal on one CPU, apart on another" in eigen.evidence
    assert texts_agree(onednn.evidence, eigen.evidence)  # check-reports: figures only


def test_a_difference_beyond_the_floor_differs_on_every_cpu():
    """The floor is no blanket: an offset of the batch path 100x a float32 eps of the
    output is beyond any summation order, and named."""
    cell = batch_invariance_cell(Toy("onednn", offset=2e-5))
    assert cell.value == "differs", cell.evidence
    assert "beyond what a CPU's choice of summation order moves" in cell.evidence


def test_the_floor_is_its_stated_bound_at_the_probe_dtype():
    runner, eps32 = Toy(), float(np.finfo(np.float32).eps)
    floor = FLOOR_EPS * eps32 * 2.0
    assert judged(runner, floor * 0.99, 2.0, "").value == "within_rounding"
    assert judged(runner, floor * 1.01, 2.0, "").value == "differs"
    # float64 arithmetic: the same figure is far beyond its floor
    assert judged(runner, floor * 0.99, 2.0, "", "float64").value == "differs"
    assert judged(runner, 2.0 * HARNESS_GAP * 2.0, 2.0, "").value == "not_probed"


def test_a_tie_is_named_by_the_documented_word_only_where_it_is_tied():
    ties = ["within_rounding", "differs"]
    named = named_tie("batch_invariance", ties, "t", documented="within_rounding",
                      documented_source="https://example.org/doc")
    assert named.value == "within_rounding" and "documentation" in named.evidence
    other = named_tie("batch_invariance", ties, "t", documented="not_applicable")
    assert isinstance(other, Convention) and other.value == "not_probed"
