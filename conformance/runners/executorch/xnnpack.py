"""nn.MultiheadAttention deployed with ExecuTorch: `executorch.xnnpack`.

What a user shipping the layer to a phone runs: the module `torch.mha` runs (canonical
weights, batch_first, masks as inputs in torch polarity, True = blocked), exported with
`torch.export.export`, lowered with `to_edge_transform_and_lower(...,
partitioner=[XnnpackPartitioner()])`, serialised to a .pte program and executed by
ExecuTorch's Python runtime (`executorch.runtime.Runtime`).  One program per case holds
both calls the ONNX rows export apart (need_weights=False for the output,
need_weights=True with average_attn_weights=False for per-head weights): lowering costs
seconds, so one lowering per case instead of two.  Programs are cached under
`.cache/executorch/` keyed by case content, this format and the torch / executorch
versions.  Each row reports the operators XNNPACK took, those left to ExecuTorch's portable
kernels and the float constants the program holds (its parameters).  The convention probes
are the export probes of runners/_export/deployed.py, lowered and run the same way.
"""
from __future__ import annotations

import functools

import numpy as np

from conformance.cache import BytesCache, key
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.runners._export.deployed import RuntimeProbe, both_calls
from conformance.runners._export.torch_export_answers import (
    ANSWERS, answer, facts, signatures)
from conformance.runners._export.same_graph import SameGraph
from conformance.runners._export.torch_mha import import_torch, mha_translation
from conformance.runners._export.torch_onnx import module_call, wrap_module
from conformance.runners.executorch import common as etc
from conformance.versions import package_versions

PTE_CACHE = BytesCache("executorch", ".pte", covers=("conformance/oracle/canonical.py",))
SAME_PTE = SameGraph(PTE_CACHE)  # cases with equal programs share one lowering
FORMAT = 1  # bump when what is lowered changes


def _versions() -> list[str]:
    return [f"{p}=={v}" for p, v in package_versions(("torch", "executorch")).items()]


class ExecuTorchXnnpack(Runner):
    name = "executorch.xnnpack"
    framework = "executorch"
    system = "torch.nn.MultiheadAttention"
    path = "lowered program"
    backend = "ExecuTorch XNNPACK"
    requires = ("torch", "executorch")
    extras = "executorch"
    description = ("the `torch.mha` module through `torch.export` and ExecuTorch's XNNPACK "
                   "delegate (`to_edge_transform_and_lower`), run in ExecuTorch's Python runtime")
    seconds = 0.5
    typed_system = "torch"

    def translate(self, case):
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            return t
        return Translation(f"{t.call}; to_edge_transform_and_lower(torch.export.export(module, "
                           "args), partitioner=[XnnpackPartitioner()]).to_executorch(); "
                           "Runtime.get().load_program(pte).load_method('forward').execute(args)",
                           t.plan)

    @staticmethod
    def _export(torch, module, args, names) -> bytes:
        """The artifact of a probe module (runners/_export/deployed.py): its lowered program."""
        return etc.lower(torch, module, args)

    execute = staticmethod(etc.execute)

    # the ledger asks through translate/run and `answer` (RAW_PROBES): probe modules
    # lowered and run like the rows' (_export/torch_export_answers.py)
    answers = ANSWERS

    def probe(self):
        return RuntimeProbe(self, functools.partial(etc.execute, native=True), wrap_module,
                            f"{self.name} probe program (ExecuTorch, XNNPACK)",
                            versions=_versions(), cache=PTE_CACHE)

    def answer(self, case, data, raw):
        return answer(self.probe(), case, data, raw)

    def signatures(self):
        return signatures(import_torch())

    def conventions(self):
        """The lowered module's API facts (_export/torch_export_answers.py): no oracle.
        It declares no "float64" probe shape, so the rows settle float64: the probe would read
        only the need_weights=False output, which is float64 (2.2e-16), while the rows also compare
        the need_weights=True per-head weights, which are not
        (expectations/executorch.xnnpack.yaml), and one cell cannot hold both."""
        return facts(self.probe())

    def run(self, case, translation, data):
        import warnings

        torch = import_torch()
        call = module_call(torch, case, translation, data)
        module = both_calls(torch, call.mha, case.inputs.self_attention,
                            call.names[1 if case.inputs.self_attention else 3:])
        k = key(self.name, case.fingerprint(), _versions(), FORMAT)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            blob, _ = SAME_PTE.get_or_make(k, torch, module, call.args,
                                           lambda: etc.lower(torch, module, call.args),
                                           self.name, call.names, _versions(), FORMAT)
        info, _ = etc.split(blob)
        out, out_w, weights = self.execute(blob, call.feed)
        framework = sum(p.numel() for p in call.mha.parameters())
        notes = []
        if info["constant_elements"] != framework:
            notes.append(f"the program holds {info['constant_elements']} float constant "
                         f"elements; torch counts {framework} parameters (the two calls' "
                         "delegates may each hold a copy)")
        delta = float(np.nanmax(np.abs(out_w - out), initial=0.0)) if np.isfinite(
            out).any() else float("nan")
        return Observation(
            output=out, attention_weights=weights, weights_returned="per_head",
            parameters=framework, weight_shapes=call.shapes, notes=notes,
            extras={"mask_polarity": "True = blocked (torch polarity, as program inputs)",
                    "program_inputs": list(call.names), "executorch": info,
                    "need_weights_output_delta": float(f"{delta:.2e}")})
