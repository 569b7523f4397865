"""Allocation-free parameter counts (Runner.count) for the systems that have a
way to build a layer without materialising its weights.

- torch: the module on the meta device (shapes and numel, no storage);
- Keras 3: the layer built inside `keras.StatelessScope(initialize_variables=False)`:
  its variables get shapes and deferred initialisers, never values (building
  outside that scope allocates every kernel; the default StatelessScope
  initialises the deferred variables on exit).
"""
from __future__ import annotations

from conformance.contract.runner import Count


def torch_module_count(module) -> Count:
    """Count and shapes of a torch module built on the meta device."""
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    return Count(sum(p.numel() for p in module.parameters()), shapes, "meta device")


def torch_mha_count(torch, case, plan: dict) -> Count:
    """nn.MultiheadAttention(**plan) on the meta device, in the case dtype."""
    dt = getattr(torch, case.inputs.dtype)
    return torch_module_count(torch.nn.MultiheadAttention(**plan, dtype=dt, device="meta"))


def keras_count(keras, layer_cls: str, case, plan: dict) -> Count:
    """A keras.layers attention layer built for the case's input shapes, with no
    variable initialised; the deferred variables are dropped from Keras's global
    list afterwards, so no later scope initialises (allocates) them.  The layer is named
    as Keras names the first one of its class (`grouped_query_attention`): its default
    name counts the layers the process built before, and the weight paths would say
    what ran earlier in the worker, not what this case asks."""
    import re

    from keras.src.backend.common import global_state

    a, i = case.attention, case.inputs
    q = (i.batch, i.query_len, a.query_features)
    k, v = (i.batch, i.key_len, a.key_features), (i.batch, i.key_len, a.value_features)
    layer = None
    try:
        with keras.StatelessScope(initialize_variables=False):
            cls = getattr(keras.layers, layer_cls)  # GroupQueryAttention: GroupedQueryAttention
            name = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
            layer = cls(**plan, dtype=case.inputs.dtype, name=name)
            layer.build(q, v, k)
            shapes = {w.path: tuple(int(d) for d in w.shape) for w in layer.weights}
            count = int(layer.count_params())
    finally:
        mine = {id(w) for w in (layer.weights if layer is not None else ())}
        pending = global_state.get_global_attribute("uninitialized_variables") or []
        global_state.set_global_attribute(
            "uninitialized_variables", [w for w in pending if id(w) not in mine])
    return Count(count, shapes, "keras.StatelessScope(initialize_variables=False)")
