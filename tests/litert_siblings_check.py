"""Run by tests/test_litert_siblings.py in a subprocess (Keras's backend is fixed per
process: this needs tensorflow): prints one JSON line comparing the sibling conversions of
litert/common.py with each precision's own `model.export(format="litert")`."""
from __future__ import annotations

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"


def main(plant: str) -> dict:
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
    again = ltc.tflite_bytes(model, "f32")
    if plant == "no_kwargs":  # the planted defect, after the plain exports: a converter's
        from keras.src.export.litert import LiteRTExporter  # precision settings dropped
        LiteRTExporter._apply_converter_kwargs = lambda self, converter: None
    result = {"deterministic": again == plain["f32"], "precisions_differ":
              plain["f32"] != plain["f16"]}
    for p in ltc.PRECISIONS:
        siblings: dict = {}
        own = ltc.tflite_bytes(model, p, siblings)
        (other, blob), = siblings.items()
        result[p] = {"own_equal": own == plain[p], "sibling": other,
                     "sibling_equal": blob == plain[other]}
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "")))
