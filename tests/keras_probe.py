"""A runner that probes the Keras runners' own machinery inside a Keras worker
(tests/test_keras_runner.py): layer sharing between a case's rows, and the
weight readback that must reject values the layer does not hold exactly.
It runs in the keras.jax rows' worker (warm in a full run); its request is urgent, so it
never queues behind the matrix's prefetched Keras items (workers.URGENT)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.runner import Observation, Runner
from conformance.runners.keras.common import built_layer
from conformance.runners._export.keras_mha import load_weights, mha_translation, worker_spec


class KerasProbe(Runner):
    name, framework = "keras.probe", "keras"
    requires = ("keras", "jax")
    worker = worker_spec("jax")

    def translate(self, case):
        return mha_translation(case)

    def run(self, case, translation, data):
        import keras

        # the keras.jax row and its .scores row build under one layer name
        first = built_layer(keras, "mha", "MultiHeadAttention", case, translation, data)
        second = built_layer(keras, "mha", "MultiHeadAttention", case, translation, data)
        other = replace(case, inputs=replace(case.inputs, seed=case.inputs.seed + 1))
        third = built_layer(keras, "mha", "MultiHeadAttention", other, translation, data)
        notes = [f"scores row shares the layer: {second[0] is first[0]}",
                 f"another case shares it: {third[0] is first[0]}"]
        # float16 cannot hold these values exactly: the readback must refuse them
        layer = keras.layers.MultiHeadAttention(**translation.plan, dtype="float16")
        q = data.inputs.query
        layer.build(q.shape, q.shape, q.shape)
        off = replace(data.weights, wq=data.weights.wq + 1e-3 * np.pi)
        try:
            load_weights(keras, layer, off, "float16")
            notes.append("readback accepted unrepresentable weights")
        except RuntimeError as exc:
            notes.append(f"readback refused: {exc}")
        return Observation(output=np.zeros(1), notes=notes)
