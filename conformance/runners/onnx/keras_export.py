"""keras.layers.MultiHeadAttention exported to ONNX by Keras 3, run in onnxruntime.

The converter: Keras 3's own `model.export(path, format="onnx")`, which on the
TensorFlow backend traces the model to a tf.function and converts it with
tf2onnx (`tf2onnx.convert.from_function`, patched by Keras for NumPy 2).
tf2onnx is not a dependency of keras: it must be installed (pip install
tf2onnx; 1.17.0 works with TensorFlow 2.21 / Keras 3.15 here).  If it is
missing or fails, the row is not expressible, quoting the converter.

The layer is the one the `keras.tensorflow` rows run: built, loaded with the
canonical weights and called by the shared helpers (_export/keras_mha.py: mha_translation,
load_weights, the merged (B, T, S) attention_mask, True = attend, and
use_causal_mask for the causal part), wrapped in a functional model whose
inputs are the query (value, key) and mask tensors.  Two graphs per case, as
for the torch export: `return_attention_scores=False` (the fused
dot-product-attention path) gives the output, `return_attention_scores=True`
(einsum + masked Softmax) gives the per-head weights.  Exports are cached
like the torch ones (conformance/cache.py).

TensorFlow must be imported before anything else decides the Keras backend,
so this runner runs in the "keras-tensorflow" worker (workers.py) shared with
the keras.tensorflow rows.  Keras, TensorFlow, onnx and onnxruntime are
imported inside `run` only.
"""
from __future__ import annotations


from conformance.runners._export import onnx_accounting
from conformance.cache import key
from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation)
from conformance.versions import package_versions
from conformance.runners._export.keras_export import (
    KERAS_EXPORT_FORMAT, functional_model, keras_onnx_bytes)
from conformance.runners._export.keras_export_answers import ANSWERS, answer, facts
from conformance.runners._export.keras_mha import (
    classify_call_error, mha_translation, storage_dtype, to_f64, worker_spec)
from conformance.runners._export.onnx_runtime import (
    CACHE, FORMAT, check, combine_graphs, numpy_dtype, ort_session, short)

VARIANTS = {"return_attention_scores=False": False, "return_attention_scores=True": True}


def _versions() -> list[str]:
    """What the export depends on, for the cache key: ["keras==3.15.0", ...]."""
    found = package_versions(("keras", "tensorflow-cpu", "tensorflow", "tf2onnx", "onnx"))
    return [f"{pkg}=={version}" for pkg, version in found.items()]


def _model(keras, case, translation, data, scores: bool):
    """A functional model around one layer loaded with the canonical weights."""
    return functional_model(keras, case, translation, data, (scores,))


class OnnxKerasExport(Runner):
    name = "onnx.keras-export"
    framework = "onnx"
    system = "keras.layers.MultiHeadAttention"
    path = "exported graph"
    backend = "onnxruntime"
    requires = ("keras", "tensorflow", "onnx", "onnxruntime", "tf2onnx")
    extras = "keras,onnx"
    description = "Keras `MultiHeadAttention` converted by tf2onnx, run in onnxruntime"
    seconds = 0.4
    typed_system = "keras"
    worker = worker_spec("tensorflow")  # the keras.tensorflow rows' worker

    def available(self):
        missing = super().available()
        if missing and "tf2onnx" in missing:
            return ("tf2onnx not installed: Keras 3's model.export(format='onnx') on the "
                    "TensorFlow backend converts with tf2onnx (pip install tf2onnx)")
        return missing

    def translate(self, case):
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            return t
        return Translation(f"keras.Model(..., {t.call}(...)).export('model.onnx', "
                           "format='onnx')  # TensorFlow backend, tf2onnx; onnxruntime CPU",
                           t.plan)

    def _export(self, model, variant: str) -> bytes:
        try:
            return keras_onnx_bytes(model)
        except Exception as exc:  # the converter rejected this configuration
            raise NotExpressibleError(f"keras model.export(format='onnx', {variant}) "
                                      f"failed: {short(exc)}") from exc

    # the ledger asks through translate/run and `answer` (RAW_PROBES): probe graphs
    # exported like the rows' (_export/keras_export_answers.py); the API facts are its own
    named_inputs = True  # the graph's inputs are named (query, value, key)
    answers = ANSWERS

    def graphs(self):
        from conformance.runners._export.keras_export_probes import Graphs

        return Graphs(_versions())

    def answer(self, case, data, raw):
        return answer(self.graphs(), case, data, raw)

    def signatures(self):
        import keras

        mha = keras.layers.MultiHeadAttention
        return "keras.layers.MultiHeadAttention (exported)", (mha.__init__, mha.call)

    def conventions(self):
        """The exported layer's API facts (_export/keras_export_answers.py)."""
        return facts(self.graphs())

    def run(self, case, translation, data):
        import keras

        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(f"worker runs Keras backend {keras.backend.backend()!r}, "
                               "the ONNX export needs 'tensorflow'")
        keras.config.disable_flash_attention()
        graphs, results, notes, held = {}, {}, [], set()
        for variant, scores in VARIANTS.items():
            try:
                model, layer, feeds, load_notes = _model(keras, case, translation, data, scores)
                model(feeds if len(feeds) > 1 else feeds[0])  # export needs a called model
            except (ValueError, TypeError) as exc:
                raise NotExpressibleError(f"keras rejected the configuration: {exc}") from exc
            except Exception as exc:
                raise classify_call_error(exc, case, "tensorflow", False) from exc
            params = {v.path: to_f64(keras, v.value) for v in layer.weights}
            k = key(self.name, variant, case.fingerprint(), _versions(), FORMAT,
                    KERAS_EXPORT_FORMAT)
            blob, _ = CACHE.get_or_make(k, lambda: self._export(model, variant))
            program = check(blob)
            graphs[variant] = onnx_accounting.account(program, params)
            held.update(onnx_accounting.held_scalars(program))  # both graphs' numbers
            session = ort_session(blob, f"graph exported with {variant}")
            npdt = numpy_dtype(case.inputs.dtype)
            names = [inp.name for inp in session.get_inputs()]
            named = dict(zip([t.name for t in model.inputs], feeds))
            ordered = [named[n] for n in names] if set(names) <= set(named) else feeds
            feed = {n: (f if f.dtype == bool else f.astype(npdt)) for n, f in zip(names, ordered)}
            results[variant] = session.run(None, feed)
            keras.backend.clear_session(free_memory=False)  # gc.collect() cost 0.16 s a call
        notes += load_notes
        out, weights, delta = combine_graphs(results, graphs, notes, "Keras",
                                             "return_attention_scores=False",
                                             "return_attention_scores=True")
        return Observation(
            output=out, attention_weights=weights, weights_returned="per_head",
            parameters=int(layer.count_params()),
            held_scalars=tuple(sorted(held)),
            weights_dtype=onnx_accounting.weights_dtype(program),
            weight_shapes={w.path: tuple(int(d) for d in w.shape) for w in layer.weights},
            notes=notes,
            extras={"mask_polarity": "True = attend", "converter": "tf2onnx (keras export)",
                    "graph_inputs": [i.name for i in session.get_inputs()],
                    "layer_dtype": storage_dtype(keras, layer.weights[0].value),
                    "need_weights_output_delta": float(f"{delta:.2e}")},
            graphs=graphs)
