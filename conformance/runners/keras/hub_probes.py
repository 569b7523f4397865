"""Convention cells of the Keras Hub runners (keras.rope.*, keras.cached.*), in the worker of
their backend.

keras.rope runs Keras attention underneath (its subclass overrides _compute_attention only),
so every axis the plain layer settles is probed on that layer as the keras.<backend> rows
probe it (probes.layer_cells, MultiHeadAttention; the grouped mapping on
GroupQueryAttention).  keras.cached's CachedMultiHeadAttention replaces `call` (no
use_causal_mask, no value_mask, none of MultiHeadAttention's mask computation), so its
cells are probed on it (called without a cache where the axis needs none).  The Keras Hub
parts override their axes:
- keras.rope: rope_style (RotaryEmbedding at start_index 3 against both pairings of the
  oracle) and rope_partial (read from the signatures: RotaryEmbedding rotates the whole
  feature axis it is given and has no argument for a part of it; the rows' partial
  rotation is the runner's own slicing, hub.rotary_class, not the system's);
- keras.cached: cache_causal_alignment (a step at position 3 over a cache of 6 slots, with
  no attention_mask, as the layer's call allows, and with keras_hub's compute_causal_mask),
  cache_layout (the cache tensor's shape), causal_flag (its call has no use_causal_mask),
  window_width (sliding_window=3 given to its constructor, accepted, and the output
  unchanged from the layer without it, called plainly and through a cache: `ignored`).
Keras and keras_hub are imported inside the functions only.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract.axes import DEPENDS, FEATURE_ARGUMENTS, IGNORED, NA, NOT_PROBED
from conformance.contract.probing import (
    closest, distances, feature_cells, no_such_argument, probe_case, refusal)
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention, project
from conformance.runners.keras.common import numpy_zeros
from conformance.runners._export.keras_mha import load_weights, mha_translation, tensor
from conformance.runners.keras.hub import (
    CACHED_SRC, MASK_SRC, ROPE_SRC, decode, rotary_class)
from conformance.runners.keras.probes import Probe, kv_head_mapping, layer_cells

SLOTS = 6  # cache positions allocated for a prefill of 3 and one step: 2 stay empty


def _stand_in(layer_cls: str):
    """What probes.Probe reads of a runner, for the plain Keras layer underneath."""
    from conformance.runners.keras.gqa import gqa_translation

    return SimpleNamespace(layer_cls=layer_cls, scores=False, translate=(
        gqa_translation if layer_cls == "GroupQueryAttention" else mha_translation))


def layer_base(extra: list[Convention], layer: str = "MultiHeadAttention") -> list[Convention]:
    """The plain layer's cells (and its signature's feature cells) with `extra` in place."""
    import keras

    cls = getattr(keras.layers, layer)
    probed = layer_cells(_stand_in(layer)) + [kv_head_mapping(Probe(
        _stand_in("GroupQueryAttention")))]
    cells = probed + feature_cells(f"keras.layers.{layer}", cls.__init__, cls.call,
                                   skip=tuple(c.axis for c in probed))
    return cp.override(cells, extra)


def _rope_out(p: Probe, runner, case) -> np.ndarray:
    k, data = p.keras, case_data(case)
    layer = rotary_class(k, "MultiHeadAttention")(
        **runner.translate(case).plan, flash_attention=False, dtype="float32",
        kernel_initializer=numpy_zeros(k), bias_initializer=numpy_zeros(k))
    x = data.inputs
    layer.build(x.query.shape, x.value.shape, x.key.shape)
    load_weights(k, layer, data.weights, "float32")
    return p.call(layer, data)[0]


def rope_partial_cell(rotary=None, *layers) -> Convention:
    """rope_partial of RotaryEmbedding in front of Keras attention, from the signatures of
    what the system is driven through (default: keras_hub.layers.RotaryEmbedding,
    keras.layers.MultiHeadAttention and GroupQueryAttention).  RotaryEmbedding.call rotates
    the whole feature axis it is given (`rotary_dim = input_shape[feature_axis]`,
    keras_hub 0.32 rotary_embedding.py:151; `denominator_dim` changes the frequencies'
    denominator only); passing rotary_dim=4 raises Keras's "Unrecognized keyword
    arguments passed to RotaryEmbedding".  A slice rotated and concatenated back is the
    runner's work (hub.rotary_class), so it is no cell of the system."""
    if rotary is None:
        import keras
        import keras_hub

        rotary = keras_hub.layers.RotaryEmbedding
        layers = (keras.layers.MultiHeadAttention, keras.layers.GroupQueryAttention)
    names = [c.__name__ for c in (rotary, *layers)]
    cell = no_such_argument("rope_partial", FEATURE_ARGUMENTS["rope_partial"],
                            " + ".join(names), *(f for c in (rotary, *layers)
                                                 for f in (c.__init__, c.call)))
    if cell.value != NA:
        return cell  # an argument appeared: not_probed, naming it (a probe is needed)
    return replace(cell, evidence=f"{cell.evidence}: {names[0]}.call rotates the whole "
                   "feature axis it is given (rotary_dim = input_shape[feature_axis]); a "
                   "part rotates only if the caller slices the tensor (the runner's rows do, "
                   "as keras_hub's GPTNeoXAttention does with its own rotary_percentage)",
                   documented_source=ROPE_SRC)


def rope_cells(runner) -> list[Convention]:
    p = Probe(_stand_in("MultiHeadAttention"))
    what = f"keras_hub.layers.RotaryEmbedding in keras.layers.MultiHeadAttention ({p.backend})"
    case = probe_case("keras-rope", attention={"qk_head_dim": 8, "v_head_dim": 8,
                                               "rope": {"style": "half_split"}},
                      inputs={"position_offset": 3})
    cands = {s: attention(replace(case, attention=replace(
        case.attention, rope=replace(case.attention.rope, style=s)))).output
        for s in ("half_split", "interleaved")}
    style = closest("rope_style", _rope_out(p, runner, case), cands,
                    f"{what}, start_index 3, head dim 8; no pairing argument",
                    documented="half_split", documented_source=ROPE_SRC)
    return [style, rope_partial_cell()]


def float64_cell(runner, case, what: str) -> Convention:
    """The runner's own row on a float64 probe case against the float64 oracle."""
    try:
        out = runner.run(case, runner.translate(case), case_data(case)).output
    except Exception as exc:
        return refusal("float64_compute", exc, what)
    d = float(np.max(np.abs(np.asarray(out, np.float64) - attention(case).output)))
    return Convention("float64_compute", "float64" if d <= 1e-12 else "below_float64",
                      f"probe_case {case.id}: {what} in float64, max |output - float64 "
                      f"oracle| {d:.1e} (float64 means <= 1e-12)")


def masked_row_cell(runner, case, what: str) -> Convention:
    """The runner's own row on a probe case whose query row 1 attends no key."""
    out = np.asarray(runner.run(case, runner.translate(case), case_data(case)).output)
    exp = attention(case)
    got = out[exp.fully_masked]
    if np.isnan(got).any():
        return Convention("fully_masked_row", "nan", f"probe_case {case.id}: {what}, query "
                          "row 1 fully masked: NaN")
    d = distances(got, {"zeros": exp.output_if_zeros[exp.fully_masked],
                        "uniform": exp.output_if_uniform[exp.fully_masked]})
    word = min(d, key=d.get) if min(d.values()) <= 1e-4 else "finite_other"
    return Convention("fully_masked_row", word, f"probe_case {case.id}: {what}, query row 1 "
                      "fully masked (masked_rows [1]): max |row - reading| " + "; ".join(
                          f"{k} {v:.1e}" for k, v in d.items()))


def rope_conventions(runner) -> list[Convention]:
    rope = {"qk_head_dim": 8, "v_head_dim": 8, "rope": {"style": "half_split"}}
    what = f"{runner.name}'s own row (RotaryEmbedding in MultiHeadAttention)"
    f64 = probe_case("keras-rope-64", attention=rope, inputs={"dtype": "float64"})
    row = probe_case("keras-rope-masked-row", attention=rope, mask={"masked_rows": [1]})
    return layer_base(rope_cells(runner) + [float64_cell(runner, f64, what),
                                            masked_row_cell(runner, row, what)])


# ---- keras.cached


def _full_candidate(case, slots: int) -> np.ndarray:
    """(B, 1, E): the step at position P attending its P + 1 keys and the unwritten slots
    (zero keys and values: score 0, value 0)."""
    data = case_data(case)
    x, w = data.inputs, data.weights
    q = project(x.query, w.wq, w.bq)[:, :, -1:]
    k, v = project(x.key, w.wk, w.bk), project(x.value, w.wv, w.bv)
    pad = [(0, 0), (0, 0), (0, slots - k.shape[2]), (0, 0)]
    k, v = np.pad(k, pad), np.pad(v, pad)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(case.attention.qk_head_dim)
    p = np.exp(s - s.max(-1, keepdims=True))
    out = np.einsum("bhtd,hde->bte", (p / p.sum(-1, keepdims=True)) @ v, w.wo)
    return out if w.bo is None else out + w.bo


def cache_cells(runner) -> list[Convention]:
    import keras
    import keras_hub

    case = cp.decode_case()
    data = case_data(case)
    layer = keras_hub.layers.CachedMultiHeadAttention(
        num_heads=2, key_dim=4, output_shape=8, dtype="float32",
        kernel_initializer=numpy_zeros(keras), bias_initializer=numpy_zeros(keras))
    x = data.inputs.query
    layer.build(x.shape, x.shape, x.shape)
    load_weights(keras, layer, data.weights, "float32")
    xt = tensor(keras, x, "float32")
    what = (f"keras_hub.layers.CachedMultiHeadAttention ({keras.backend.backend()}), cache "
            f"of {SLOTS} slots, prefill 3 then a step at position 3 (cache_update_index 3)")
    plain, shapes, _ = decode(keras, layer, xt, 3, SLOTS, masked=False)
    masked = decode(keras, layer, xt, 3, SLOTS, masked=True)[0]
    cands = {**cp.step_candidates(case), "full": _full_candidate(case, SLOTS)}
    # the users' call: keras_hub's decoders pass compute_causal_mask at every step
    align = closest("cache_causal_alignment", masked[-1], cands, f"{what}, attention_mask="
                    "compute_causal_mask(B, 6, 1, cache_index=3) (its decoders' mask, "
                    f"{MASK_SRC}; the call has no causal switch)", documented_source=CACHED_SRC)
    bare = distances(plain[-1], cands)
    align = replace(align, evidence=f"{align.evidence}; with attention_mask=None the step "
                    f"attends every slot, the {SLOTS - 4} unwritten zeros included: "
                    + "; ".join(f"{k} {v:.1e}" for k, v in bare.items()))
    layout = Convention("cache_layout", f"BSNH, one tensor (B, 2, S, H, d): keys and values "
                        f"stacked on axis 1, preallocated ({shapes[0]} -> {shapes[-1]})",
                        f"{what}: the cache argument and the returned cache, "
                        f"{' -> '.join(str(t) for t in shapes)} (updated by ops.slice_update "
                        "at cache_update_index)", documented_source=CACHED_SRC)
    causal = Convention("causal_flag", NA, "CachedMultiHeadAttention.call(query, value, key, "
                        "attention_mask, cache, cache_update_index, ...) has no "
                        "use_causal_mask (passing it raises TypeError): the caller builds the "
                        "mask (keras_hub's compute_causal_mask)", documented_source=CACHED_SRC)
    rows = Convention("fully_masked_row", NOT_PROBED, "a harness limit: the runner runs "
                      "causal decodes only (translate refuses any other mask), where every "
                      "query sees at least its own key; the layer itself takes other masks")
    return [align, layout, causal, rows]


def window_reading(windowed: dict, plain: dict, cell: Convention, w: int,
                   held) -> Convention:
    """window_width of a layer given sliding_window=w: `windowed` and `plain` map each
    condition to the output with and without the argument (same weights); `cell` is the
    plain call's reading against the oracle's windows.  Unmoved everywhere: `ignored`,
    quoting the argument and the distance; moved everywhere: the measured reading; else
    `depends`, each condition with its distance."""
    moved = {k: float(np.max(np.abs(windowed[k] - plain[k]))) for k in windowed}
    figures = "; ".join(f"{k}: {v:.1e}" for k, v in moved.items())
    if all(v > UNMOVED for v in moved.values()):
        return replace(cell, evidence=f"{cell.evidence}; output moved by sliding_window={w}: "
                       f"{figures}")
    if all(v <= UNMOVED for v in moved.values()):
        return Convention("window_width", IGNORED, f"sliding_window={w} accepted (the layer "
                          f"holds _sliding_window={held}): output from the same layer built "
                          f"without it {figures}; {cell.evidence}", documented_source=CACHED_SRC)
    return Convention("window_width", DEPENDS, f"sliding_window={w} (the layer holds "
                      f"_sliding_window={held}), output moved from the layer without it: "
                      f"{figures}; {cell.evidence}", documented_source=CACHED_SRC)


UNMOVED = 1e-6  # the same weights and inputs: an ignored argument leaves the output bit-equal


def _cached_window(p: Probe, w: int = 3) -> Convention:
    """sliding_window=w given to the constructor (inherited from MultiHeadAttention): the
    layer called with no cache, and prefilled through a cache of 8 slots with keras_hub's
    compute_causal_mask, against the same layer without it.  CachedMultiHeadAttention.call
    (keras_hub 0.32 cached_multi_head_attention.py:70-145) goes straight to
    _compute_attention: MultiHeadAttention's _compute_attention_mask, where the window
    is applied (keras 3.15 multi_head_attention.py:763), is never called."""
    from conformance.runners.keras.window import SOURCE

    case = cp.window_case(causal=False)
    data = case_data(case)
    k = p.keras
    layers = {"windowed": p.layer(case, data, sliding_window=w), "plain": p.layer(case, data)}
    outs = {name: {"no cache": p.call(layer, data)[0]} for name, layer in layers.items()}
    x = tensor(k, data.inputs.query, "float32")
    n = int(x.shape[1])
    for name, layer in layers.items():
        steps = decode(k, layer, x, n, n, masked=True)[0]  # one prefill of all 8
        outs[name]["prefill through a cache of 8 slots"] = np.concatenate(steps, axis=1)
    cell = closest("window_width", outs["windowed"]["no cache"], cp.window_candidates(case, w),
                   f"{p.what}(sliding_window={w}), self-attention over 8 positions, no cache",
                   documented_source=SOURCE)
    return window_reading(outs["windowed"], outs["plain"], cell, w,
                          getattr(layers["windowed"], "_sliding_window", "?"))


def cached_conventions(runner) -> list[Convention]:
    """The cells of CachedMultiHeadAttention itself (called without a cache where a probe
    needs no cache), the cache cells in place of the signature's."""
    import keras_hub

    from conformance.runners.keras.probes import (
        attention_mask_cells, base_case, dropout_cells, dtype_cells, implicit_mask,
        layout_cells, scale_precision)

    cls = keras_hub.layers.CachedMultiHeadAttention
    p = Probe(SimpleNamespace(layer_cls=cls, scores=False, translate=mha_translation))
    case = base_case()
    layer, data = p.layer(case), case_data(case)
    masks = attention_mask_cells(p, case, lambda **kw: p.call(layer, data, **kw)[0])
    padding = Convention("key_padding_polarity", NA, "CachedMultiHeadAttention.call(query, "
                         "value, key, attention_mask, cache, cache_update_index, ...) has no "
                         "value_mask / key-padding argument: padding goes into attention_mask",
                         documented_source=CACHED_SRC)
    probed = (layout_cells(p, case) + masks + [padding] + dropout_cells(p, case)
              + [scale_precision(p)] + dtype_cells(p, case) + [implicit_mask(p),
                                                               _cached_window(p)])
    cells = probed + feature_cells("keras_hub.layers.CachedMultiHeadAttention",
                                   cls.__init__, cls.call, skip=tuple(c.axis for c in probed))
    f64 = probe_case("keras-cached-64", mask={"causal": "upper_left"}, inputs={
        "self_attention": True, "query_len": 4, "key_len": 4, "dtype": "float64"},
        decode={"prefill": 3, "steps": 1})
    return cp.override(cells, cache_cells(runner) + [float64_cell(
        runner, f64, f"{runner.name}'s own decode (prefill 3, one step)")])
