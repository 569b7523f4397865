"""What the LiteRT runners share: Keras 3's own conversion (`model.export(path,
format="litert")`: an ExportArchive SavedModel, then TFLiteConverter.from_saved_model), with
the float16 weight conversion a user asks for (`optimizations=[tf.lite.Optimize.DEFAULT]`,
`target_spec={"supported_types": [tf.float16]}`), the model run by `ai_edge_litert`'s
interpreter through its signature runner, and the model's own accounting (the operators it
became and the float constants its flatbuffer holds).

The interpreter: `ai_edge_litert.interpreter.Interpreter` (ai-edge-litert 2.3.0).  TensorFlow
2.21 still bundles `tf.lite.Interpreter`, which warns that it "is deprecated and is scheduled
for deletion" and points to ai_edge_litert; on a probe model both gave bit-identical outputs
(3.6e-7 from Keras, float32; 4.7e-4 for the float16 conversion), so the row runs the
supported one.  tensorflow, keras and ai_edge_litert are imported inside the functions.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from types import SimpleNamespace

import numpy as np

from conformance.cache import BytesCache
from conformance.contract.runner import NotExpressibleError

CACHE = BytesCache("litert", ".tflite", covers=("conformance/oracle/canonical.py",))
FORMAT = 1  # bump when what is converted changes
DOC = "https://ai.google.dev/edge/litert/models/post_training_float16_quant"
CONVERTER_DOC = "https://keras.io/api/models/model_saving_apis/export/"


def short(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def export_kwargs(precision: str) -> dict:
    import tensorflow as tf

    if precision == "f16":
        return {"optimizations": [tf.lite.Optimize.DEFAULT],
                "target_spec": {"supported_types": [tf.float16]}}
    return {}


PRECISIONS = ("f32", "f16")


def tflite_bytes(model, precision: str, siblings: dict | None = None) -> bytes:
    """Keras 3's `model.export(..., format="litert")` as bytes.  With `siblings` (a dict),
    the other precision is converted from the same SavedModel inside the same export and
    put there (precision -> bytes; left out where its converter fails: that runner then
    converts on its own and meets its own error): see `_converting_siblings`."""
    try:
        with tempfile.TemporaryDirectory(prefix="conformance-litert-") as tmp:
            path = os.path.join(tmp, "model.tflite")
            with _converting_siblings(model, precision, siblings):
                model.export(path, format="litert", verbose=False, **export_kwargs(precision))
            with open(path, "rb") as fh:
                return fh.read()
    except Exception as exc:  # the converter rejected this configuration
        raise NotExpressibleError(f"keras model.export(format='litert'"
                                  f"{', float16' if precision == 'f16' else ''}) failed: "
                                  f"{short(exc)}") from exc


@contextlib.contextmanager
def _converting_siblings(model, precision: str, siblings: dict | None):
    """Keras's LiteRT export writes a SavedModel (1.1 s of CPU for a small layer) and hands
    it to `TFLiteConverter.from_saved_model` (0.9 s): the two precisions' runners convert the
    same model, so while the export's converter runs, the other precision's converter runs
    on the same SavedModel with the settings Keras gives every converter (its builtin and
    select ops, resource variables: LiteRTExporter._convert_to_tflite in Keras) and that
    precision's kwargs applied by Keras's own LiteRTExporter.  tests/test_litert_siblings.py
    checks the sibling's bytes against its own `model.export`."""
    if siblings is None:
        yield
        return
    import tensorflow as tf
    from keras.src.export.litert import LiteRTExporter

    converter_class = tf.lite.TFLiteConverter
    original = converter_class.from_saved_model  # bound: called as Keras calls it
    own = vars(converter_class).get("from_saved_model")  # the classmethod itself

    def from_saved_model(saved_model_dir, *args, **kwargs):
        converter = original(saved_model_dir, *args, **kwargs)
        own_convert = converter.convert

        def convert():
            blob = own_convert()
            for other in PRECISIONS:
                if other == precision:
                    continue
                sibling = original(saved_model_dir, *args, **kwargs)
                sibling.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                                     tf.lite.OpsSet.SELECT_TF_OPS]
                sibling.experimental_enable_resource_variables = True
                try:
                    LiteRTExporter(model, **export_kwargs(other))._apply_converter_kwargs(
                        sibling)
                    siblings[other] = sibling.convert()
                except Exception:  # noqa: BLE001 - that runner converts and reports it
                    pass
            return blob

        converter.convert = convert
        return converter

    converter_class.from_saved_model = staticmethod(from_saved_model)
    try:
        yield
    finally:
        if own is not None:
            converter_class.from_saved_model = own
        else:
            del converter_class.from_saved_model


def runner_name(precision: str) -> str:
    """The LiteRT runner converting at `precision` (litert.keras, litert.keras.f16)."""
    return "litert.keras" + ("" if precision == "f32" else f".{precision}")


def converted(make_model, precision: str, key_for) -> bytes:
    """This precision's model from the cache, else converted with its sibling precisions
    (tflite_bytes) from `make_model()`, each stored under `key_for(precision)`: the other
    runner's key, so its first request is a hit."""
    k = key_for(precision)
    blob = CACHE.get(k)
    if blob is not None:
        return blob
    siblings: dict[str, bytes] = {}
    blob = tflite_bytes(make_model(), precision, siblings)
    CACHE.put(k, blob)
    for other, data in siblings.items():
        if CACHE.get(key_for(other)) is None:
            CACHE.put(key_for(other), data)
    return blob


class Session:
    """A LiteRT model's serving signature with an onnxruntime-like face: get_inputs() (each
    with .name) and run(None, feed) -> outputs in the signature's order (output_0, ...)."""

    def __init__(self, blob: bytes, what: str):
        from ai_edge_litert.interpreter import Interpreter

        try:
            self.interpreter = Interpreter(model_content=blob, num_threads=1)
            signature = self.interpreter.get_signature_list()
            (name, io), = signature.items()
            self.runner = self.interpreter.get_signature_runner(name)
        except Exception as exc:  # the interpreter refuses the model
            raise NotExpressibleError(f"the LiteRT interpreter refuses the {what}: "
                                      f"{short(exc)}") from exc
        self.inputs = list(io["inputs"])
        self.outputs = sorted(io["outputs"], key=lambda n: (len(n), n))

    def get_inputs(self):
        return [SimpleNamespace(name=n) for n in self.inputs]

    def run(self, _names, feed: dict) -> list[np.ndarray]:
        result = self.runner(**feed)
        return [np.asarray(result[n]) for n in self.outputs]

    def operators(self) -> list[str]:
        return sorted({d["op_name"] for d in self.interpreter._get_ops_details()})


def open_session(blob: bytes, what: str) -> Session:
    return Session(blob, what)


def constants(blob: bytes) -> dict[str, int]:
    """Elements of the flatbuffer's float constants of rank >= 1 (tensors backed by a
    buffer holding data), by element type: the weights the converted model stores."""
    from ai_edge_litert import schema_py_generated as schema

    names = {getattr(schema.TensorType, k): k.lower() for k in dir(schema.TensorType)
             if k.isupper() and k.startswith(("FLOAT", "BFLOAT"))}
    model = schema.Model.GetRootAs(blob, 0)
    counts: dict[str, int] = {}
    seen: set[int] = set()
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            b = tensor.Buffer()
            if tensor.Type() not in names or b in seen or tensor.ShapeLength() == 0:
                continue
            buffer = model.Buffers(b)
            if b == 0 or (buffer.DataLength() == 0 and buffer.Size() == 0):
                continue
            seen.add(b)
            n = int(np.prod(tensor.ShapeAsNumpy()))
            counts[names[tensor.Type()]] = counts.get(names[tensor.Type()], 0) + n
    return counts


_FLOAT_TYPES = {"FLOAT16": np.float16, "FLOAT32": np.float32, "FLOAT64": np.float64}


def held_scalars(blob: bytes) -> tuple[float, ...]:
    """The distinct values of the flatbuffer's one-element float constants (a fill, a scale:
    what the program holds, e.g. a fill saturated to float16 by the float16 conversion)."""
    from ai_edge_litert import schema_py_generated as schema

    types = {getattr(schema.TensorType, k): t for k, t in _FLOAT_TYPES.items()}
    model = schema.Model.GetRootAs(blob, 0)
    found: set[float] = set()
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            kind, b = types.get(tensor.Type()), tensor.Buffer()
            if kind is None or b == 0 or int(np.prod(tensor.ShapeAsNumpy() if
                                                     tensor.ShapeLength() else [1])) != 1:
                continue
            data = model.Buffers(b).DataAsNumpy()
            if not isinstance(data, np.ndarray) or data.size != np.dtype(kind).itemsize:
                continue
            found.add(float(data.view(kind)[0]))
    return tuple(sorted(found))


def weights_dtype(held: dict[str, int]) -> str:
    """The element type holding most of the model's float constant elements (constants())."""
    return max(held, key=held.get) if held else ""
