"""Run by tests/test_litert_siblings.py in a subprocess (Keras's backend is fixed per
process: this needs tensorflow): prints one JSON line comparing the sibling conversions of
litert/common.py with each precision's own `model.export(format="litert")`."""
from __future__ import annotations

import json
import os

os.environ["KERAS_BACKEND"] = "tensorflow"


def main() -> dict:
    import keras
    import numpy as np

    from conformance.runners.litert import common as ltc

    keras.utils.set_random_seed(0)
    q = keras.Input((3, 8), name="query")
    kv = keras.Input((4, 8), name="value")
    out = keras.layers.MultiHeadAttention(2, 4)(q, kv)
    model = keras.Model([q, kv], out)
    model([np.zeros((1, 3, 8), np.float32), np.zeros((1, 4, 8), np.float32)])
    plain = {p: ltc.tflite_bytes(model, p) for p in ltc.PRECISIONS}
    siblings: dict = {}
    own = ltc.tflite_bytes(model, "f32", siblings)  # f32 converted again: deterministic?
    result = {"precisions_differ": plain["f32"] != plain["f16"], "own_equal":
              own == plain["f32"], "siblings": sorted(siblings),
              "sibling_equal": siblings.get("f16") == plain["f16"]}
    # the planted defect, after the plain exports: a converter's precision settings dropped
    from keras.src.export.litert import LiteRTExporter
    LiteRTExporter._apply_converter_kwargs = lambda self, converter: None
    planted: dict = {}
    ltc.tflite_bytes(model, "f32", planted)
    result["planted_sibling_equal"] = planted.get("f16") == plain["f16"]
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main()))
