"""nn.MultiheadAttention deployed to OpenVINO's CPU plugin, two ways a user converts it.

`openvino.onnx` (`source="onnx"`): the very graphs `onnx.torch-export` exports (dynamo
exporter, one graph with need_weights=False for the output, one with per-head weights),
read by OpenVINO's ONNX frontend; they come from the same export cache, so they cost no
export when the onnx rows ran.  `openvino.torch` (`source="torch"`): `openvino.convert_model`
on `torch.export.export(module, args)` (OpenVINO's TorchScript path fails its own trace check
on nn.MultiheadAttention: "Graphs differed across invocations!"), the IR cached as bytes.
Its rows convert one model per case that makes both calls (deployed.both_calls): with one
model per call its conversions (and its probes') cost about 8 minutes on a cold 2-core run.
`openvino.onnx.f16` (not in the default registry: whether OpenVINO's CPU plugin compiles
a reduced-precision model depends on the CPU's instruction set: with AVX-512 it runs bf16,
3e-3 off; with oneDNN capped at SSE4.1 it refuses ("Supported primitive descriptors list is
empty"), so its rows would differ from one machine to the next; register it with
("conformance.runners.openvino.mha:OpenVINOMHA", {"source": "onnx", "precision": "f16"})):
the ONNX graphs compiled with INFERENCE_PRECISION_HINT=f16 (on a CPU
without native float16 arithmetic the plugin picks bf16 or f32; the row's extras quote
what the compiled model reports).  Masks are graph inputs in torch polarity (True =
blocked), as for the ONNX rows.  Each row reports the converted model's operations, the CPU
kernels they compiled into and its float constants (the parameters the artifact holds).
"""
from __future__ import annotations

from conformance.cache import BytesCache, key
from conformance.contract.runner import NotExpressible, NotExpressibleError, Observation, Runner
from conformance.contract.runner import Translation
from conformance.runners._export import onnx_accounting
from conformance.runners._export.deployed import RuntimeProbe, both_calls
from conformance.runners._export.onnx_runtime import check, combine_graphs
from conformance.runners._export.same_graph import SameGraph
from conformance.runners._export.torch_export_answers import (
    ANSWERS, answer, facts, signatures)
from conformance.runners._export.torch_mha import import_torch, mha_translation
from conformance.runners._export.torch_onnx import (
    VARIANTS, TorchOnnxExporter, framework_params, module_call, wrap_module)
from conformance.runners.openvino import common as ovc

IR_CACHE = BytesCache("openvino", ".ir", covers=("conformance/oracle/canonical.py",))
SAME_IR = SameGraph(IR_CACHE)  # cases with equal programs share one conversion
FORMAT = 1  # bump when what is converted changes


class _TorchConverter:
    """The artifact maker of openvino.torch: torch.export, then openvino.convert_model."""

    name = "openvino.torch"

    @staticmethod
    def _export(torch, module, args, names) -> bytes:
        import openvino as ov

        from conformance.runners._export.cia_once import cia_ops_listed_once

        try:
            program = torch.export.export(module, tuple(args))
            with cia_ops_listed_once():  # the frontend decomposes: the same IR, sooner
                return ovc.ir_bytes(ov.convert_model(program))
        except Exception as exc:  # the converter rejected this configuration
            raise NotExpressibleError(f"openvino.convert_model(torch.export.export(...)) "
                                      f"failed: {ovc.short(exc)}") from exc


class OpenVINOMHA(Runner):
    framework = "openvino"
    system = "torch.nn.MultiheadAttention"
    path = "converted model"
    backend = "OpenVINO CPU"
    requires = ("torch", "onnx", "onnxscript", "openvino")
    extras = "openvino"
    seconds = 0.5
    typed_system = "torch"
    source = "onnx"  # "onnx": the dynamo ONNX export; "torch": convert_model on the module
    precision = "f32"  # INFERENCE_PRECISION_HINT

    def __init__(self, **params):
        super().__init__(**params)
        self.name = f"openvino.{self.source}" + ("" if self.precision == "f32"
                                                 else f".{self.precision}")
        self.description = {
            ("onnx", "f32"): "the `onnx.torch-export` graphs compiled by OpenVINO for CPU",
            ("onnx", "f16"): "the same graphs compiled with `INFERENCE_PRECISION_HINT=f16`",
            ("torch", "f32"): "`openvino.convert_model` on `torch.export` of the `torch.mha` "
                              "module, CPU"}[(self.source, self.precision)]
        self.exporter = TorchOnnxExporter()  # onnx.torch-export's: its name keys the shared cache

    def translate(self, case):
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            return t
        made = ("torch.onnx.export(module, args, dynamo=True); core.read_model('model.onnx')"
                if self.source == "onnx" else
                "openvino.convert_model(torch.export.export(module, args))")
        return Translation(f"{t.call}; {made}; core.compile_model(model, 'CPU', "
                           f"{{'INFERENCE_PRECISION_HINT': '{self.precision}'}})", t.plan)

    def _artifact(self, torch, case, module, call, variant) -> bytes:
        if self.source == "onnx":
            return self.exporter._graph(torch, case, module, call.args, call.names, variant)[0]
        import openvino as ov

        k = key(self.name, variant, case.fingerprint(), torch.__version__, ov.__version__,
                FORMAT)
        return SAME_IR.get_or_make(k, torch, module, call.args, lambda: _TorchConverter._export(
            torch, module, call.args, call.names), self.name, variant, call.names,
            torch.__version__, ov.__version__, FORMAT)[0]

    def execute(self, blob: bytes, feed: dict, one_thread: bool = True) -> list:
        model = ovc.read(blob, onnx=self.source == "onnx")
        return ovc.execute(ovc.compile_model(model, self.precision, one_thread), feed)

    # the ledger asks through translate/run and `answer` (RAW_PROBES): probe models
    # converted and compiled like the rows' (_export/torch_export_answers.py)
    probe_takes = frozenset({"float64"})
    answers = ANSWERS

    def probe(self):
        import openvino as ov

        exporter = self.exporter if self.source == "onnx" else _TorchConverter()
        return RuntimeProbe(exporter, self.execute, wrap_module,
                            f"{self.name} probe model (OpenVINO CPU, {self.precision})",
                            versions=() if self.source == "onnx" else (ov.__version__,),
                            native=lambda blob, feed: self.execute(blob, feed, False),
                            cache=None if self.source == "onnx" else IR_CACHE)

    def answer(self, case, data, raw):
        return answer(self.probe(), case, data, raw)

    def signatures(self):
        return signatures(import_torch())

    def conventions(self):
        """The converted module's API facts (_export/torch_export_answers.py): no oracle."""
        return facts(self.probe())

    def run(self, case, translation, data):
        torch = import_torch()
        call = module_call(torch, case, translation, data)
        if self.source == "torch":
            return self._run_converted(torch, case, call)
        import warnings

        params = framework_params(call.mha)
        graphs, results, accounts = {}, {}, {}
        for variant, kwargs in VARIANTS.items():
            module = wrap_module(torch, call.mha, case.inputs.self_attention,
                                 call.names[1 if case.inputs.self_attention else 3:], kwargs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                blob = self._artifact(torch, case, module, call, variant)
            graphs[variant] = onnx_accounting.account(check(blob), params)
            model = ovc.read(blob, onnx=True)
            compiled = ovc.compile_model(model, self.precision)
            accounts[variant] = ovc.accounting(model, compiled)
            results[variant] = ovc.execute(compiled, call.feed)
        notes: list[str] = []
        out, weights, delta = combine_graphs(results, graphs, notes, "torch", *VARIANTS)
        return self._observation(call, out, weights, delta, accounts[list(VARIANTS)[0]],
                                 notes, graphs)

    def _run_converted(self, torch, case, call):
        """openvino.torch: one model making both calls (deployed.both_calls), one
        conversion per case."""
        import warnings

        import numpy as np

        module = both_calls(torch, call.mha, case.inputs.self_attention,
                            call.names[1 if case.inputs.self_attention else 3:])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            blob = self._artifact(torch, case, module, call, "both calls")
        model = ovc.read(blob, onnx=False)
        compiled = ovc.compile_model(model, self.precision)
        out, out_w, weights = (np.asarray(r, np.float64)
                               for r in ovc.execute(compiled, call.feed))
        delta = float(np.nanmax(np.abs(out_w - out), initial=0.0))
        account = ovc.accounting(model, compiled)
        return self._observation(call, out, weights, delta, account, [], {})

    def _observation(self, call, out, weights, delta, account, notes, graphs):
        framework = sum(p.numel() for p in call.mha.parameters())
        if account["constant_elements"] != framework:
            notes.append(f"the converted model holds {account['constant_elements']} float "
                         f"constant elements; torch counts {framework} parameters")
        return Observation(
            output=out, attention_weights=weights, weights_returned="per_head",
            parameters=framework, weight_shapes=call.shapes, notes=notes,
            extras={"mask_polarity": "True = blocked (torch polarity, as model inputs)",
                    "model_inputs": list(call.names), "openvino": account,
                    "need_weights_output_delta": float(f"{delta:.2e}")},
            graphs=graphs)
