"""keras.layers.MultiHeadAttention converted to LiteRT (TFLite) and run in its interpreter:
`litert.keras` (float32) and `litert.keras.f16` (the float16 weight conversion), one class.

What a user shipping the Keras layer to a phone runs: the layer the `keras.tensorflow` rows
run (canonical weights, the merged (B, T, S) attention_mask with True = attend,
use_causal_mask for a causal case) in a functional model, converted by Keras 3's
`model.export(path, format="litert")` (TFLiteConverter.from_saved_model underneath; the
f16 row adds `optimizations=[tf.lite.Optimize.DEFAULT], target_spec={"supported_types":
[tf.float16]}`, which stores the weights as float16 and DEQUANTIZEs them to float32 at load)
and run by ai_edge_litert's interpreter through the model's serving signature
(litert/common.py says why that interpreter).  One model per case holds the layer twice
(same weights), called without and with return_attention_scores (Keras refuses one layer
called both ways in one functional model), so one conversion gives the output and the
per-head scores.  Models are cached under `.cache/litert/`, keyed by case content, format
and the keras / tensorflow / ai-edge-litert versions.  Each row reports the operators the
model became and its float constants (the parameters the artifact holds).  The probes are
onnx.keras-export's probe graphs (runners/_export/keras_export_probes.py), converted and run
this way, asked by the ledger (_export/keras_export_answers.py).

TensorFlow must be the Keras backend, so the rows run in the keras-tensorflow worker.
"""
from __future__ import annotations

import numpy as np

from conformance.cache import key
from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation)
from conformance.runners._export.keras_export import functional_model
from conformance.runners._export.keras_export_answers import ANSWERS, answer, facts
from conformance.runners._export.keras_mha import (
    classify_call_error, mha_translation, storage_dtype, worker_spec)
from conformance.runners.litert import common as ltc
from conformance.versions import package_versions


def _versions() -> list[str]:
    found = package_versions(("keras", "tensorflow-cpu", "tensorflow", "ai-edge-litert"))
    return [f"{pkg}=={version}" for pkg, version in found.items()]


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


class LiteRTKeras(Runner):
    framework = "litert"
    system = "keras.layers.MultiHeadAttention"
    path = "converted model"
    backend = "LiteRT interpreter"
    requires = ("keras", "tensorflow", "ai_edge_litert")
    extras = "litert"
    seconds = 0.5
    typed_system = "keras"
    worker = worker_spec("tensorflow")  # the keras.tensorflow rows' worker
    precision = "f32"  # "f16": the float16 weight conversion

    def __init__(self, **params):
        super().__init__(**params)
        self.name = ltc.runner_name(self.precision)
        self.description = (
            "Keras `MultiHeadAttention` converted by `model.export(format='litert')`, run in "
            "`ai_edge_litert`'s interpreter" if self.precision == "f32" else
            "the same with the float16 weight conversion (`supported_types=[tf.float16]`)")

    def translate(self, case):
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            return t
        f16 = (", optimizations=[tf.lite.Optimize.DEFAULT], target_spec={'supported_types': "
               "[tf.float16]}" if self.precision == "f16" else "")
        return Translation(f"keras.Model(..., {t.call}(...)).export('model.tflite', "
                           f"format='litert'{f16}); ai_edge_litert.interpreter.Interpreter("
                           "model_content=...).get_signature_runner()(**inputs)", t.plan)

    # the ledger asks through translate/run (the float64 probe case too, which the rows
    # only see as not expressible) and `answer` (RAW_PROBES): probe models converted like
    # the rows' (_export/keras_export_answers.py); the API facts are its own cells
    probe_takes = frozenset({"float64"})
    named_inputs = True  # the model's signature inputs are named (query, value, key)
    answers = ANSWERS

    def graphs(self):
        from conformance.runners._export.keras_export_probes import Graphs

        return Graphs(_versions(), what=f"{self.name} model in the LiteRT interpreter",
                      label=f"{self.name} probe", cache=ltc.CACHE, opener=ltc.open_session,
                      convert=lambda m: ltc.tflite_bytes(m, self.precision),
                      shared=lambda make, key_of: ltc.converted(  # both precisions at once
                          make, self.precision, lambda p: key_of(f"{ltc.runner_name(p)} probe")),
                      runtime="the LiteRT interpreter", artifact="LiteRT model")

    def answer(self, case, data, raw):
        return answer(self.graphs(), case, data, raw)

    def signatures(self):
        import keras

        mha = keras.layers.MultiHeadAttention
        return "keras.layers.MultiHeadAttention (converted)", (mha.__init__, mha.call)

    def conventions(self):
        """The converted layer's API facts (_export/keras_export_answers.py)."""
        return facts(self.graphs())

    def _model(self, keras, case, translation, data):
        try:
            model, layer, feeds, notes = functional_model(keras, case, translation, data,
                                                          (False, True))
            model(feeds if len(feeds) > 1 else feeds[0])  # the exporter needs a called model
        except (ValueError, TypeError) as exc:
            raise NotExpressibleError(f"keras rejected the configuration: {exc}") from exc
        except Exception as exc:
            raise classify_call_error(exc, case, "tensorflow", False) from exc
        return model, layer, feeds, notes

    def run(self, case, translation, data):
        import keras

        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(f"worker runs Keras backend {keras.backend.backend()!r}, "
                               "the LiteRT conversion needs 'tensorflow'")
        keras.config.disable_flash_attention()
        model, layer, feeds, notes = self._model(keras, case, translation, data)
        # both precisions from one SavedModel: the other LiteRT runner's row is then a hit
        blob = ltc.converted(lambda: model, self.precision, lambda p: key(
            ltc.runner_name(p), case.fingerprint(), _versions(), ltc.FORMAT))
        session = ltc.open_session(blob, "converted model")
        dtype = _numpy_dtype(case.inputs.dtype)
        named = {t.name: f if f.dtype == bool else f.astype(dtype)
                 for t, f in zip(model.inputs, feeds)}
        if set(session.inputs) != set(named):
            raise RuntimeError(f"the converted model's inputs {session.inputs} are not the "
                               f"Keras model's {sorted(named)}")
        try:
            out, out_w, weights = session.run(None, {n: named[n] for n in session.inputs})
        except Exception as exc:  # the interpreter's kernel refuses the model at run time
            raise NotExpressibleError(f"the LiteRT interpreter refuses to run the model: "
                                      f"{ltc.short(exc)}") from exc
        keras.backend.clear_session(free_memory=False)
        params = int(layer.count_params())
        held = ltc.constants(blob)  # two layers' (output, scores), same weights
        if sum(held.values()) != 2 * params:
            notes.append(f"the converted model holds {held} float constant elements for its "
                         f"two layers (output, scores); Keras counts {params} parameters each")
        delta = float(np.nanmax(np.abs(np.asarray(out_w, np.float64) - out), initial=0.0))
        return Observation(
            output=np.asarray(out, np.float64), attention_weights=np.asarray(weights, np.float64),
            weights_returned="per_head", parameters=params,
            held_scalars=ltc.held_scalars(blob), weights_dtype=ltc.weights_dtype(held),
            weight_shapes={w.path: tuple(int(d) for d in w.shape) for w in layer.weights},
            notes=notes,
            extras={"mask_polarity": "True = attend", "converter": "keras export(format='litert')",
                    "model_inputs": session.inputs, "layer_dtype": storage_dtype(
                        keras, layer.weights[0].value),
                    "litert": {"operators": session.operators(), "constants": held},
                    "scores_output_delta": float(f"{delta:.2e}")})

