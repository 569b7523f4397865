"""batch_invariance (conventions/probes/batch.py): each item of a batch against itself run
alone, bitwise, through a runner's own translate and run.  Checked against toy systems
written here: one computing each item on its own, one whose arithmetic depends on the
batch size (a planted last-bit difference the probe must see), one refusing a batch of one."""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes.batch import BATCH, batch_invariance_cell, item_data
from conformance.conventions.probes.batch import batch_case
from conformance.oracle.canonical import case_data


class Toy(Runner):
    """float32 NumPy attention over each item; `drift` adds batch * drift to every output
    (a kernel whose blocking follows the batch size)."""

    name, framework, system = "toy.batch", "toy", "toy"

    def __init__(self, drift: float = 0.0, min_batch: int = 1):
        super().__init__()
        self.drift, self.min_batch = np.float32(drift), min_batch

    def translate(self, case):
        if case.inputs.batch < self.min_batch:
            return NotExpressible(f"batches of at least {self.min_batch}")
        return Translation(f"toy(batch={case.inputs.batch})")

    def run(self, case, translation, data):
        w, x = data.weights, data.inputs
        f = np.float32
        q = np.einsum("ble,hed->bhld", x.query.astype(f), w.wq.astype(f)) + w.bq[:, None].astype(f)
        k = np.einsum("ble,hed->bhld", x.key.astype(f), w.wk.astype(f)) + w.bk[:, None].astype(f)
        v = np.einsum("ble,hed->bhld", x.value.astype(f), w.wv.astype(f)) + w.bv[:, None].astype(f)
        s = q @ k.transpose(0, 1, 3, 2) / f(np.sqrt(q.shape[-1]))
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.einsum("bhtd,hde->bte", p @ v, w.wo.astype(f)) + w.bo.astype(f)
        return Observation((out + self.drift * x.query.shape[0]).astype(np.float64))


def test_item_data_slices_one_item_with_its_own_arrays():
    case = batch_case()
    data = case_data(case)
    one = item_data(data, 2)
    assert one.inputs.query.shape[0] == 1
    assert np.array_equal(one.inputs.query[0], data.inputs.query[2])
    assert np.array_equal(one.inputs.value[0], data.inputs.value[2])
    assert one.weights is not data.weights and one.weights.wq is data.weights.wq


def test_an_item_computed_alone_is_equal_here_and_within_rounding_across_cpus():
    """Bitwise equal on this CPU, which another CPU's kernels need not be: within_rounding,
    with this CPU's figure (test_batch_invariance_floor tests the floor)."""
    cell = batch_invariance_cell(Toy())
    assert cell.value == "within_rounding", cell.evidence
    assert f"over the {BATCH} items 0.0e+00" in cell.evidence and "toy(batch=3)" in cell.evidence


def test_a_planted_batch_dependence_is_seen_with_its_size():
    cell = batch_invariance_cell(Toy(drift=1e-5))
    assert cell.value == "differs", cell.evidence
    assert f"over the {BATCH} items 2.0e-05" in cell.evidence


def test_a_batch_of_one_the_runner_cannot_express_is_not_probed():
    """The batch runs but the item alone does not: the probe cannot compare (not a cell
    of the system's batch arithmetic)."""
    cell = batch_invariance_cell(Toy(min_batch=2))
    assert cell.value == "not_probed" and "batches of at least 2" in cell.evidence


def test_a_runner_that_takes_no_batch_form_and_a_model_are_not_probed():
    cell = batch_invariance_cell(Toy(min_batch=9))
    assert cell.value == "not_probed" and "batches of at least 9" in cell.evidence

    class Model(Toy):
        executed = False

    assert batch_invariance_cell(Model()).value == "not_probed"


def test_a_runner_that_runs_other_arrays_is_a_harness_limit_not_a_batch_cell():
    """A runner that regenerates the arrays from the case instead of running the ones it
    is given (or hands one item's cached tensors to the next) is off by O(1): that is the
    harness's doing, never the system's batch arithmetic."""
    class Regenerates(Toy):
        def run(self, case, translation, data):
            return super().run(case, translation, case_data(case))

    cell = batch_invariance_cell(Regenerates())
    assert cell.value == "not_probed" and "did not run the arrays" in cell.evidence


def test_a_build_cache_keyed_by_case_and_weights_gets_each_item_s_own_arrays():
    """Like the Keras runners' layer cache: (case fingerprint, id(weights)) -> the first
    inputs built.  Each item's batch of one is a case and a weights object of its own."""
    class Caching(Toy):
        def __init__(self):
            super().__init__()
            self.built = {}

        def run(self, case, translation, data):
            key = (case.fingerprint(), id(data.weights))
            self.built.setdefault(key, data)
            return super().run(case, translation, self.built[key])

    assert "items 0.0e+00" in batch_invariance_cell(Caching()).evidence


def test_a_module_that_always_rotates_gets_a_form_it_takes():
    """A runner whose translate needs causal self-attention with a rotation (an HF decoder
    that always applies RoPE) is asked in that form; judged against itself, not the oracle."""
    class Rotating(Toy):
        def translate(self, case):
            if case.attention.rope is None or case.mask.causal == "none":
                return NotExpressible("no attention.rope: it rotates on every call")
            return super().translate(case)

    cell = batch_invariance_cell(Rotating())
    assert "items 0.0e+00" in cell.evidence and "rope" in cell.evidence, cell.evidence
