"""conformance.convert: bit-identical round trips, real modules loaded from the
converted arrays giving the reference output, and errors that say what is wrong."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from conformance.convert import (
    FORMATS, ConversionError, convert, from_bert, from_keras, from_llama, from_t5, from_torch,
    keras_weights, set_keras_weights, to_flax, to_gpt2, to_keras, to_matlab, to_t5, to_torch)
from conformance.oracle.reference import attention
from conformance.oracle.canonical import CanonicalWeights, case_data
from tests.helpers import make_case

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")
SHAPES = {  # attention sections; "general" uses every freedom of the canonical layout
    "general": {"num_heads": 2, "query_features": 8, "key_features": 6, "value_features": 5,
                "qk_head_dim": 3, "v_head_dim": 4, "output_features": 7},
    "square": {"num_heads": 2, "query_features": 8},
    "kdim_vdim": {"num_heads": 2, "query_features": 8, "key_features": 6, "value_features": 5},
    "grouped": {"num_heads": 4, "num_kv_heads": 2, "query_features": 8, "key_features": 6,
                "value_features": 5, "qk_head_dim": 3, "v_head_dim": 5, "output_features": 7},
}
LAYOUTS = {"torch": ["square", "kdim_vdim"], "keras": ["general"], "flax": ["general"],
           "matlab": ["general"], "bert": ["general"], "gpt2": ["square"], "t5": ["general"],
           "llama": ["general", "grouped"], "marian": ["general"], "gptj": ["general"],
           "gpt_neox": ["square"], "bloom": ["square"], "mpt": ["square"]}
NO_BIAS = ("t5", "gptj", "mpt")  # modules built without biases
ROUND_TRIPS = [(f, s, dt, bias) for f, shapes in LAYOUTS.items() for s in shapes
               for dt in ("float64", "float32") for bias in (True, False)
               if not (f in NO_BIAS and bias)]


def cast(w: CanonicalWeights, dtype: str) -> CanonicalWeights:
    return CanonicalWeights(**{n: None if getattr(w, n) is None else getattr(w, n).astype(dtype)
                               for n in NAMES})


def canonical(shape: str, dtype: str = "float64", bias: bool = True) -> CanonicalWeights:
    case = make_case(attention={**SHAPES[shape], "bias": bias}, inputs={"dtype": dtype})
    return cast(case_data(case).weights, dtype)


def assert_identical(a: CanonicalWeights, b: CanonicalWeights) -> None:
    for n in NAMES:
        x, y = getattr(a, n), getattr(b, n)
        assert (x is None) == (y is None), n
        if x is not None:
            assert (y.dtype, y.shape) == (x.dtype, x.shape), n
            assert y.tobytes() == x.tobytes(), f"{n} differs"


def flat(state) -> dict:
    """Flax's nested params as one level, for comparisons."""
    if all(isinstance(v, np.ndarray) for v in state.values()):
        return state
    return {f"{m}/{k}": a for m, inner in state.items() for k, a in inner.items()}


@pytest.mark.parametrize("fmt,shape,dtype,bias", ROUND_TRIPS,
                         ids=[f"{f}-{s}-{d}-{'bias' if b else 'nobias'}"
                              for f, s, d, b in ROUND_TRIPS])
def test_round_trip_is_bit_identical(fmt, shape, dtype, bias):
    to_x, from_x = FORMATS[fmt]
    w = canonical(shape, dtype, bias)
    state = to_x(w)
    assert all(a.dtype == np.dtype(dtype) for a in flat(state).values())
    back = from_x(state, w.wq.shape[0], w.wk.shape[0])
    assert_identical(w, back)
    again = flat(to_x(back))  # and the other way: state -> canonical -> state
    assert list(again) == list(flat(state))
    assert all(again[k].tobytes() == a.tobytes() for k, a in flat(state).items())


def test_torch_layout_choice_follows_the_module():
    assert set(to_torch(canonical("square"))) == {"in_proj_weight", "in_proj_bias",
                                                  "out_proj.weight", "out_proj.bias"}
    kv = to_torch(canonical("kdim_vdim", bias=False))
    assert {n: a.shape for n, a in kv.items()} == {
        "q_proj_weight": (8, 8), "k_proj_weight": (8, 6), "v_proj_weight": (8, 5),
        "out_proj.weight": (8, 8)}
    separate = to_torch(canonical("square"), packed=False)
    assert_identical(from_torch(separate, 2), canonical("square"))


def assert_einsum_layout(state, w, out: str) -> None:
    """`state` holds `w` in the einsum layout, checked head by head from the canonical
    arrays (not by the converter): '<p>/kernel'[:, h, :] is W_p[h] (E_in x d), the
    output kernel is W_o (H, d_v, E_o) as is, biases (H, d) and (E_o,)."""
    assert set(state) == {f"{p}/{kind}" for p in ("query", "key", "value", out)
                          for kind in ("kernel", "bias")}
    for p, wk, bk in (("query", w.wq, w.bq), ("key", w.wk, w.bk), ("value", w.wv, w.bv)):
        assert state[f"{p}/kernel"].shape == (wk.shape[1], wk.shape[0], wk.shape[2])
        for h in range(wk.shape[0]):
            assert np.array_equal(state[f"{p}/kernel"][:, h, :], wk[h])
        assert np.array_equal(state[f"{p}/bias"], bk)
    for h in range(w.wo.shape[0]):
        assert np.array_equal(state[f"{out}/kernel"][h], w.wo[h])
    assert np.array_equal(state[f"{out}/bias"], w.bo)


def test_keras_and_matlab_layouts_match_the_runners():
    w = canonical("general")
    assert_einsum_layout(to_keras(w), w, "attention_output")  # what the Keras runners load
    # MATLAB (the model runner uses to_matlab): head i is the contiguous channel block i
    # of W*X weights (out x in); the output weights are OutputSize x NumValueChannels
    ours = to_matlab(w)
    h, d_k, d_v = w.wq.shape[0], w.wq.shape[2], w.wv.shape[2]
    for i in range(h):
        assert np.array_equal(ours["QueryWeights"][i * d_k:(i + 1) * d_k], w.wq[i].T)
        assert np.array_equal(ours["ValueWeights"][i * d_v:(i + 1) * d_v], w.wv[i].T)
        assert np.array_equal(ours["OutputWeights"][:, i * d_v:(i + 1) * d_v], w.wo[i].T)
        assert np.array_equal(ours["QueryBias"][i * d_k:(i + 1) * d_k, 0], w.bq[i])
    assert ours["OutputBias"].shape == (w.bo.shape[0], 1)


def test_flax_params_are_keras_kernels_under_other_names():
    """Flax's params hold the canonical arrays in the einsum layout under `out/`,
    checked head by head against the canonical arrays (not against to_keras)."""
    w = canonical("general")
    assert_einsum_layout(flat(to_flax(w)), w, "out")


def test_the_einsum_layout_check_rejects_a_planted_transpose():
    w = canonical("general")
    state = to_keras(w)
    state["key/kernel"] = np.ascontiguousarray(state["key/kernel"][:, ::-1, :])  # heads swapped
    with pytest.raises(AssertionError):
        assert_einsum_layout(state, w, "attention_output")


def test_convert_goes_through_the_canonical_set():
    w = canonical("square")
    keras_state = convert(to_torch(w), "torch", "keras", num_heads=2)
    assert_identical(from_keras(keras_state), w)
    gpt2 = convert(keras_state, "keras", "gpt2")
    assert gpt2["c_attn.weight"].shape == (8, 24)
    assert_identical(FORMATS["gpt2"][1](gpt2, 2), w)
    with pytest.raises(ConversionError, match="unknown format 'jax'.*torch, keras"):
        convert(keras_state, "keras", "jax")
    with pytest.raises(ConversionError, match="num_heads is needed"):
        convert(to_torch(w), "torch", "keras")


# -- real modules: converted weights give the reference output -----------------------

def float32_case(shape: str, bias: bool = True, self_attention: bool = False, **attention):
    inputs = {"dtype": "float32", "batch": 2, "query_len": 3, "key_len": 3 if self_attention
              else 4, "self_attention": self_attention}
    return make_case(attention={**SHAPES[shape], "bias": bias, **attention}, inputs=inputs)


@pytest.mark.parametrize("shape,self_attention", [("square", True), ("kdim_vdim", False)])
def test_torch_module_loads_the_state_and_matches_the_reference(shape, self_attention):
    torch = pytest.importorskip("torch", reason="torch not installed")
    case = float32_case(shape, self_attention=self_attention)
    data = case_data(case)
    a = case.attention
    mha = torch.nn.MultiheadAttention(8, 2, kdim=a.key_features, vdim=a.value_features,
                                      batch_first=True)
    state = to_torch(cast(data.weights, "float32"))
    mha.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    x = data.inputs
    with torch.no_grad():
        out, _ = mha(*(torch.from_numpy(t.astype(np.float32)) for t in (x.query, x.key, x.value)))
    np.testing.assert_allclose(out.numpy(), attention(case).output, rtol=1e-5, atol=1e-5)
    module_state = mha.state_dict()  # torch tensors in, NumPy out, bit for bit
    back = to_torch(from_torch(module_state, 2))
    assert list(back) == list(module_state)
    assert all(back[k].tobytes() == t.numpy().tobytes() for k, t in module_state.items())


def flax_round_trip() -> str:
    """In the flax runners' worker (jax and flax imported there once): the canonical
    weights as a linen module's params give the reference output, and back."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    case = float32_case("general", v_head_dim=3)
    data, x = case_data(case), case_data(case).inputs
    module = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=6, out_features=7)
    q, k, v = (jnp.asarray(t, jnp.float32) for t in (x.query, x.key, x.value))
    init = module.init(jax.random.key(0), q, k, v)
    params = to_flax(cast(data.weights, "float32"))
    shapes = jax.tree_util.tree_map(lambda t: tuple(t.shape), init["params"])
    assert shapes == jax.tree_util.tree_map(lambda t: t.shape, params)
    out = module.apply({"params": params}, q, k, v)
    np.testing.assert_allclose(np.asarray(out), attention(case).output, rtol=1e-5, atol=1e-5)
    back = FORMATS["flax"][1](init)  # jax arrays, with the 'params' level
    assert back.wq.shape == (2, 8, 3) and back.wo.shape == (2, 3, 7)
    return "flax ok"


def in_worker_of(target: str, function: str, *args):
    """`function(*args)` in the worker the matrix runs `target`'s runner in (its own, or
    its framework's isolated one): the framework is imported there once per session."""
    from conformance.run import isolation
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    runner = load(target)
    if runner.available():
        pytest.skip(runner.available())
    runner.worker = runner.worker or isolation.isolated_spec(runner)
    return call_in_worker(runner, function, *args)


def test_flax_module_takes_the_params_and_matches_the_reference():
    assert in_worker_of("conformance.runners.flax.linen:FlaxLinen",
                        "tests.test_convert:flax_round_trip") == "flax ok"


def keras_round_trip() -> str:
    """In a Keras worker (its backend fixed there): the canonical weights into a real
    MultiHeadAttention, its output against the reference, and back bit-identical."""
    import keras

    from conformance.convert import from_keras, keras_weights, set_keras_weights, to_keras

    case = float32_case("general")
    data = case_data(case)
    x = data.inputs
    q, k, v = (np.asarray(t, np.float32) for t in (x.query, x.key, x.value))
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3, value_dim=4, output_shape=7)
    layer(q, v, key=k)
    set_keras_weights(layer, to_keras(data.weights))
    out = keras.ops.convert_to_numpy(layer(q, v, key=k))
    np.testing.assert_allclose(out, attention(case).output, rtol=1e-5, atol=1e-5)
    back = from_keras(keras_weights(layer), num_heads=2)
    for n, a in data.weights.arrays().items():
        assert getattr(back, n).dtype == np.float32 and np.array_equal(getattr(back, n), a), n
    return "keras ok"


@pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="keras not installed")
def test_real_keras_layer_takes_the_weights_and_matches_the_reference():
    """In the keras.torch rows' worker: a Keras backend is fixed per process."""
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    if importlib.util.find_spec("torch") is None:
        pytest.skip("the Keras torch backend needs torch")
    assert call_in_worker(load("conformance.runners.keras.mha:KerasMHA", {"backend": "torch"}),
                          "tests.test_convert:keras_round_trip") == "keras ok"


class FakeVariable:
    def __init__(self, path, shape):
        self.path, self.shape, self.dtype, self.value = path, shape, "float32", None

    def assign(self, value):
        self.value = value

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype=dtype)


def test_keras_layer_helpers_match_variables_by_path_suffix():
    w = canonical("general", dtype="float32")
    state = to_keras(w)
    layer = type("Layer", (), {})()
    layer.weights = [FakeVariable(f"mha/{k}", a.shape) for k, a in state.items()]
    set_keras_weights(layer, state)
    assert_identical(from_keras(keras_weights(layer)), w)
    layer.weights[0].shape = (8, 2, 4)
    with pytest.raises(ConversionError, match=r"mha/query/kernel: expected shape \(8, 2, 4\), "
                                              r"found \(8, 2, 3\)"):
        set_keras_weights(layer, state)


# -- HuggingFace modules built from config objects (never from the hub) ---------------

def _hf_module(name: str, case):
    """(module, forward(module, x) -> output) for a small config of `name`."""
    import torch
    import transformers as tf
    from transformers.models.bert.modeling_bert import BertAttention
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.marian.modeling_marian import MarianAttention
    from transformers.models.t5.modeling_t5 import T5Attention

    a = case.attention
    if name == "bert":
        cfg = tf.BertConfig(hidden_size=8, num_attention_heads=2, intermediate_size=8)
        return cfg, BertAttention, lambda m, x: m.output.dense(m.self(x)[0])
    if name == "gpt2":
        cfg = tf.GPT2Config(n_embd=8, n_head=2)
        return cfg, GPT2Attention, lambda m, x: m(x)[0]
    if name == "t5":
        cfg = tf.T5Config(d_model=8, d_kv=4, num_heads=2)
        return cfg, T5Attention, lambda m, x: m(x)[0]
    if name == "marian":
        cfg = tf.MarianConfig(d_model=8, encoder_attention_heads=2)
        return cfg, lambda c: MarianAttention(8, 2, config=c), lambda m, x: m(x)[0]
    cfg = tf.LlamaConfig(hidden_size=a.query_features, num_attention_heads=a.num_heads,
                         num_key_value_heads=a.num_kv_heads, head_dim=a.qk_head_dim,
                         attention_bias=True)

    def llama(m, x):  # rotary embedding at angle 0 (cos 1, sin 0) is the identity
        cos = torch.ones(*x.shape[:2], a.qk_head_dim)
        return m(x, position_embeddings=(cos, torch.zeros_like(cos)), attention_mask=None)[0]
    return cfg, lambda c: LlamaAttention(c, layer_idx=0), llama


HF = {"bert": {}, "gpt2": {}, "t5": {"bias": False}, "marian": {},
      "llama": {"num_heads": 4, "num_kv_heads": 2, "query_features": 16}}


def hf_round_trip(name: str) -> str:
    """In the HF runners' worker (torch and transformers imported there once): the
    canonical weights in a module built from a config give the reference output, and the
    module's own state converts back bit for bit."""
    import torch

    case = float32_case("square", self_attention=True, **HF[name])
    data = case_data(case)
    w = cast(data.weights, "float32")
    cfg, build, forward = _hf_module(name, case)
    cfg._attn_implementation = "eager"  # no implicit causal mask (SDPA paths add one)
    module = build(cfg).eval()
    if name == "t5":  # T5 does not scale scores: fold 1/sqrt(d_k) = 1/2 (exact) into wq
        w = CanonicalWeights(**{**vars(w), "wq": w.wq / 2})
    state = FORMATS[name][0](w)
    missing, unexpected = module.load_state_dict({k: torch.from_numpy(v)
                                                  for k, v in state.items()}, strict=False)
    assert unexpected == [] and set(missing) <= {"output.LayerNorm.weight",
                                                 "output.LayerNorm.bias"}
    with torch.no_grad():
        out = forward(module, torch.from_numpy(data.inputs.query.astype(np.float32)))
    np.testing.assert_allclose(out.numpy(), attention(case).output, rtol=1e-5, atol=1e-5)
    module_state = module.state_dict()  # the module's own dict converts back, bit for bit
    back = FORMATS[name][1](module_state, case.attention.num_heads, case.attention.num_kv_heads)
    assert_identical(back, w)
    return f"{name} ok"


@pytest.mark.parametrize("name", list(HF))
def test_hf_module_loads_the_state_and_matches_the_reference(name):
    assert in_worker_of("conformance.runners.hf.bert:HFBert", "tests.test_convert:hf_round_trip",
                        name) == f"{name} ok"


# -- errors name the tensor, the expected and the found shape -------------------------

def test_wrong_shape_names_tensor_expected_and_found():
    state = to_torch(canonical("square"))
    state["in_proj_weight"] = state["in_proj_weight"][:, :7]
    with pytest.raises(ConversionError, match=r"in_proj_weight: expected shape \(24, 8\), "
                                              r"found \(24, 7\)"):
        from_torch(state, 2)
    llama = FORMATS["llama"][0](canonical("grouped"))
    llama["k_proj.weight"] = llama["k_proj.weight"][:5]
    with pytest.raises(ConversionError, match=r"k_proj.weight: expected shape \(6, 6\), "
                                              r"found \(5, 6\)"):
        from_llama(llama, 4, 2)
    with pytest.raises(ConversionError, match=r"q_proj.weight: .*found \(12, 8\): 12 rows do "
                                              r"not split into 5 heads"):
        from_llama(FORMATS["llama"][0](canonical("grouped")), 5, 5)
    bad = CanonicalWeights(**{**vars(canonical("general")), "bv": np.zeros((2, 3))})
    with pytest.raises(ConversionError, match=r"bv: expected shape \(2, 4\), found \(2, 3\)"):
        to_keras(bad)
    assert issubclass(ConversionError, ValueError)


def test_missing_and_unexpected_keys_list_the_layout():
    state = FORMATS["bert"][0](canonical("general"))
    del state["self.key.weight"]
    with pytest.raises(ConversionError, match=r"missing key 'self.key.weight'; expected keys: "
                                              r"'self.query.weight', 'self.key.weight'"):
        from_bert(state, 2)
    t5 = to_t5(canonical("general", bias=False))
    t5["q.bias"] = np.zeros(6)
    with pytest.raises(ConversionError, match=r"unexpected key 'q.bias'; expected keys: "
                                              r"'q.weight', 'k.weight', 'v.weight', 'o.weight'"):
        from_t5(t5, 2)


def test_layouts_that_cannot_hold_the_weights_refuse():
    with pytest.raises(ConversionError, match="num_kv_heads=2 != num_heads=4"):
        to_torch(canonical("grouped"))
    with pytest.raises(ConversionError, match="T5Attention has no bq bias"):
        to_t5(canonical("general"))
    with pytest.raises(ConversionError, match="one width E"):
        to_gpt2(canonical("kdim_vdim"))
    with pytest.raises(ConversionError, match="key width 6 and value width 5"):
        to_torch(canonical("kdim_vdim"), packed=True)
    partial = CanonicalWeights(**{**vars(canonical("square")), "bo": None})
    with pytest.raises(ConversionError, match="all or none; the weights have only bq, bk, bv"):
        to_torch(partial)


# -- the documented example runs as written --------------------------------------------

@pytest.mark.parametrize("doc, heading", [("docs/converters.md", "## Example")])
def test_documented_example_runs_as_written(doc, heading):
    pytest.importorskip("torch", reason="torch not installed")
    text = (ROOT / doc).read_text()
    section = text.split(heading, 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(block.strip().splitlines()) <= 6  # five statements and a blank line
    namespace: dict = {}
    exec(compile(block, doc, "exec"), namespace)
    weights, mha = namespace["weights"], namespace["mha"]
    assert_einsum_layout(weights, from_torch(mha.state_dict(), 2), "attention_output")
    assert weights["query/kernel"].shape == (8, 2, 4)
    assert weights["attention_output/kernel"].shape == (2, 4, 8)
