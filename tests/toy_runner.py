"""A toy runner added the documented way (README "Add a framework"): a Runner
subclass, tried without editing the package through
CONFORMANCE_EXTRA_RUNNERS=tests.toy_runner:ToyRunner.  It "runs" the float64
reference in NumPy, so the report tests need no framework."""
from __future__ import annotations

from conformance.contract.runner import Observation, Runner, Translation
from conformance.oracle.reference import attention, formula_parameters


class ToyRunner(Runner):
    name = "toy.numpy"
    framework = "toy"
    system = "toy.Attention"

    def translate(self, case):
        a = case.attention
        return Translation(f"toy.Attention(heads={a.num_heads}, features={a.query_features})")

    def run(self, case, translation, data):
        exp = attention(case, data)
        a = case.attention
        shapes = {"w_query": (a.query_features, a.num_heads * a.qk_head_dim)}
        return Observation(output=exp.output, attention_weights=exp.weights,
                           weights_returned="per_head", parameters=formula_parameters(case),
                           weight_shapes=shapes)
