"""What the HuggingFace Transformers runners share: the import, the limits read
from the case, the canonical weights in torch's (out, in) layout, the 4-D mask
an HF model hands its attention modules, and one base runner.

Every module is built from a config object (never from the hub: nothing is
downloaded), loaded with the canonical weights with strict=True, and called
the way its model calls it.  The masks follow transformers' own mask builders:
eager gets an additive float (B, 1, T, S) mask (0 / finfo.min), sdpa a boolean
(B, 1, T, S) mask, True = attend.  torch and transformers are imported inside
functions only.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from conformance.case.loader import parse_case
from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation, to_numpy)
from conformance.runners.hf import observations
from conformance.runners.hf.declared import ConfigBuild, Refusals, mask_fill

DOCS = "https://huggingface.co/docs/transformers/v5.24.0/en/model_doc/"
SOURCE = "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/"


def import_torch():
    """torch with one intra-op thread (identical figures on every machine), and
    transformers' logging quiet (standalone modules warn on every call)."""
    import torch
    from transformers.utils import logging

    torch.set_num_threads(1)
    logging.set_verbosity_error()
    return torch


def default_scale(case) -> bool:
    s = getattr(case.attention, "scale", None)
    return s is None or abs(s - case.attention.qk_head_dim ** -0.5) < 1e-15


def cross_reason(case, how: str) -> str | None:
    """HF attention modules take one tensor for keys and values (key_value_states,
    encoder_hidden_states): the suite's cross-attention cases have two."""
    if case.inputs.self_attention:
        return None
    return (f"query, key and value are three tensors here; {how}, so keys and values come "
            "from one tensor (cross-attention with key is value only)")


def width_limits(case, fixed: str) -> str | None:
    """Systems with no head-size argument: d_k = d_v = width / heads, output = width."""
    a = case.attention
    d = a.query_features // a.num_heads
    if a.query_features % a.num_heads or a.qk_head_dim != d or a.v_head_dim != d:
        return (f"qk_head_dim={a.qk_head_dim}, v_head_dim={a.v_head_dim}: {fixed} (no head-size "
                f"setting: {a.query_features} / {a.num_heads}"
                + (f" gives {d} per head; a head size other than width / heads is impossible "
                   "by construction)" if not a.query_features % a.num_heads else
                   " does not divide, and the constructor raises)"))
    return None


def shape_limits(case, *, gqa: bool, equal_dims: bool) -> str | None:
    a = case.attention
    if a.num_kv_heads != a.num_heads and not gqa:
        return (f"grouped-query (num_kv_heads={a.num_kv_heads} < num_heads={a.num_heads}): "
                "one key/value head per query head")
    if equal_dims and a.qk_head_dim != a.v_head_dim:
        return (f"qk_head_dim={a.qk_head_dim} != v_head_dim={a.v_head_dim}: one head size "
                "serves queries, keys and values")
    if a.output_features != a.query_features:
        return (f"output_features={a.output_features} != query_features={a.query_features}: "
                "the output projection maps back to the hidden size")
    if a.key_features != a.query_features or a.value_features != a.query_features:
        return "key/value widths differ from the hidden size: one width for every input"
    return None


def out_in(w: np.ndarray) -> np.ndarray:
    """(H, E_in, d) -> (H*d, E_in): nn.Linear's (out, in) weight, head h = rows h*d:(h+1)*d."""
    return np.ascontiguousarray(w.transpose(0, 2, 1).reshape(-1, w.shape[1]))


def out_proj(wo: np.ndarray) -> np.ndarray:
    """(H, d_v, E_o) -> (E_o, H*d_v)."""
    return np.ascontiguousarray(wo.reshape(-1, wo.shape[-1]).T)


class SizeFacts(NamedTuple):
    """The size cells of a system: size_arguments, parameter_formula, weight_layout."""

    word: str  # what its size arguments count (ApiFact head_size_from)
    source: str  # the upstream source line that shows it, cited in the fact's evidence
    first_weight: str  # the parameter whose shape shows the layout
    layout: str  # its layout, after its name and shape
    layout_why: str
    formula: str  # the parameter_formula
    formula_evidence: str = "probe E=8: {n}"  # `n`: the probe module's parameter count


def linear_state(weights, names: tuple[str, ...], bias: bool) -> dict[str, np.ndarray]:
    """Canonical -> the state of four nn.Linear modules `names` (q, k, v, output), (out, in)
    weights and, with `bias`, their biases."""
    state = {f"{n}.weight": w for n, w in zip(names, (out_in(weights.wq), out_in(weights.wk),
                                                      out_in(weights.wv), out_proj(weights.wo)))}
    if bias:
        state.update({f"{n}.bias": b for n, b in zip(names, (
            weights.bq.ravel(), weights.bk.ravel(), weights.bv.ravel(), weights.bo))})
    return state


def hf_mask(torch, allowed: np.ndarray | None, dtype, impl: str, fill: str | None = None):
    """Canonical (B, T, S) True = attend -> what transformers' mask builders give
    the attention module: (B, 1, T, S) additive float (eager) or boolean (sdpa).  The
    eager mask's fill is the case's mask.fill in the layer's dtype (-1e9 is -inf in
    float16), else transformers' own finfo(dtype).min."""
    if allowed is None:
        return None
    m = torch.from_numpy(np.ascontiguousarray(allowed[:, None]))
    if impl == "sdpa":
        return m
    if fill is None:  # finfo(dtype).min made in the dtype: the builders' torch.full(..., dtype)
        return torch.where(m, torch.tensor(0.0, dtype=dtype),
                           torch.tensor(torch.finfo(dtype).min, dtype=dtype))
    value = {"finfo_min": torch.finfo(dtype).min, "-inf": float("-inf"), "-1e9": -1e9,
             "-1e4": -1e4}[fill]
    return torch.where(m, torch.tensor(0.0, dtype=dtype), torch.tensor(value, dtype=dtype))


class HFRunner(Runner):
    """A transformers attention module run on the case: subclasses give the limits,
    the config call, the module, its native state and the forward call."""

    framework = "hf"
    seconds = 0.15
    requires = ("torch", "transformers")
    attn_implementation = "eager"
    documented_fill = property(lambda self: mask_fill(self.attn_implementation))
    probe_attention: dict = {}  # probe_case overrides (T5: no bias)

    refusals: Refusals  # what the system cannot express beyond the shapes
    linear_names: tuple[str, ...] = ()  # the q, k, v and output nn.Linear modules

    def limits(self, case) -> str | None:
        r = self.refusals
        return (cross_reason(case, r.cross_how)
                or (width_limits(case, r.width_fixed) if r.width_fixed else None)
                or self.model_limits(case)
                or shape_limits(case, gqa=r.gqa, equal_dims=True)
                or self.bias_limits(case)
                or self.scale_limits(case))

    def model_limits(self, case) -> str | None:
        """A system's own limit, checked before the shapes (GPT-2: causal only)."""
        return None

    def bias_limits(self, case) -> str | None:
        bias, fixed = case.attention.bias, self.refusals.fixed_bias
        if fixed is None or bias == fixed[0]:
            return None
        return f"bias={bias}: {fixed[1]}"

    def scale_limits(self, case) -> str | None:
        return None if default_scale(case) else self.refusals.scale_why

    # -- hooks -------------------------------------------------------------
    config_fields: dict[str, str] = {}  # the config's keyword -> the case's attention field
    # the call a user types: {args} the config's keywords, {<keyword>} each, {impl}
    call_template = ""
    config_build: ConfigBuild | None = None  # the module as data (declared.py), for build

    def config_call(self, case) -> tuple[str, dict]:
        """(the call's text, the plan: the config's keywords and values)."""
        cfg = {k: getattr(case.attention, f) for k, f in self.config_fields.items()}
        args = ", ".join(f"{k}={v}" for k, v in cfg.items())
        return self.call_template.format(args=args, impl=self.attn_implementation, **cfg), cfg

    def build(self, torch, plan: dict):
        """The module for the plan; by default as `config_build` declares it."""
        if self.config_build is None:
            raise NotImplementedError
        return self.config_build.build(plan, self.config_fields)

    def state(self, case, weights) -> dict[str, np.ndarray]:
        return linear_state(weights, self.linear_names, case.attention.bias)

    def forward(self, module, x, mask, **kw):
        """-> (output, attention weights or None); `kw` go to the module's forward (and on
        to the attention interface: is_causal).  By default the BART-style call."""
        out, weights = module(x, attention_mask=mask, **kw)[:2]
        return out, weights

    def counted(self, module):
        return module

    def notes(self, case, module) -> list[str]:
        return []

    # -- contract ----------------------------------------------------------
    def translate(self, case):
        reason = self.limits(case)
        if reason:
            return NotExpressible(reason)
        call, plan = self.config_call(case)
        return Translation(call, {**plan, "attn_implementation": self.attn_implementation,
                                  "dropout": 0.0})

    def module_for(self, torch, case, plan, weights):
        dt = getattr(torch, case.inputs.dtype)
        try:
            module = self.build(torch, plan).to(dt)
        except Exception as exc:  # config validators raise their own error types
            why = exc.__cause__ or exc
            text = " ".join(f"{type(why).__name__}: {why}".split())
            raise NotExpressibleError(f"transformers rejected the config: {text}") from exc
        module.load_state_dict({n: torch.tensor(a, dtype=dt)
                                for n, a in self.state(case, weights).items()}, strict=True)
        return module.eval()

    def count(self, case):
        """The module built from its config on the meta device (shapes, no storage),
        counted over the modules `run` counts, with the names `run` reports."""
        from conformance.runners.counting import torch_module_count

        torch = import_torch()
        with torch.device("meta"):
            module = self.build(torch, self.translate(case).plan)
        return torch_module_count(self.counted(module.to(getattr(torch, case.inputs.dtype))))

    def run(self, case, translation, data):
        torch = import_torch()
        dt = getattr(torch, case.inputs.dtype)
        module = self.module_for(torch, case, translation.plan, data.weights)
        x = torch.tensor(data.inputs.query, dtype=dt)
        with torch.no_grad():
            out, weights = self.call(torch, case, data, module, x)
        counted = self.counted(module)
        return Observation(
            output=to_numpy(out),
            attention_weights=None if weights is None else to_numpy(weights),
            weights_returned="none" if weights is None else "per_head",
            parameters=sum(p.numel() for p in counted.parameters()),
            weight_shapes={n: tuple(p.shape) for n, p in counted.named_parameters()},
            notes=self.notes(case, module),
            extras={"attn_implementation": self.attn_implementation,
                    "mask": "additive float (B, 1, T, S), 0 / finfo.min" if self.attn_implementation
                    == "eager" else "boolean (B, 1, T, S), True = attend",
                    "mask_passed": "boolean mask" if self.attn_implementation != "eager" else
                    f"additive {case.mask.fill or 'finfo_min'} mask in {case.inputs.dtype}",
                    **getattr(module, "conformance_extras", {})})  # a decode's cache shapes

    def call(self, torch, case, data, module, x):
        """-> (output, weights): the module on the case's input with the case's mask in
        the form the model's mask builder gives it (hf_mask)."""
        mask = hf_mask(torch, data.inputs.allowed, x.dtype, self.attn_implementation,
                       case.mask.fill)
        return self.forward(module, x, mask)

    # -- conventions -------------------------------------------------------
    # the raw arguments `answer` passes (the ledger's flags.py, training.py judge them)
    # (attention_function: the module's own attention function called directly, for the
    # mask probes a module that always rotates or normalises cannot carry: attention_function.py)
    answers = frozenset({"attn_mask", "is_causal", "dropout_training", "attention_function",
                         "input_dtype", "unbatched", "dropout_weights"})

    def probe(self, name: str, **inputs):
        """A seeded self-attention probe case (2 heads, 8 features, batch 2, T = S = 3) with
        the module's fixed settings (`probe_attention`), for the API facts it shows."""
        raw = {"id": f"probe-{name}", "attention": {"num_heads": 2, "query_features": 8,
                                                   **self.probe_attention},
               "inputs": {"batch": 2, "query_len": 3, "key_len": 3, "seed": 7,
                          "self_attention": True, **inputs}}
        return parse_case(raw, "<probe>")

    def probe_module(self, case, dropout: float = 0.0):
        """The module on a probe case (its config call, limits bypassed: T5's probe
        cases have the default scale) and the probe inputs as a float32 tensor."""
        torch = import_torch()
        from conformance.oracle.canonical import case_data

        data = case_data(case)
        plan = {**self.config_call(case)[1], "attn_implementation": self.attn_implementation,
                "dropout": dropout}
        module = self.module_for(torch, case, plan, data.weights)
        return module, torch.tensor(data.inputs.query, dtype=torch.float32)

    def raw_limits(self, case) -> str | None:
        """Why `answer` cannot pass a raw argument on `case`: the case's own limits (a
        module that always applies QK-norm, ALiBi or a rotation takes only the probe case
        that carries them: probe_needs)."""
        return self.limits(case)

    def answer(self, case, data, raw):
        """The module of the case's config call on its canonical weights with one argument
        passed raw (the ledger judges): attn_mask, a (B, T, S) array as the (B, 1, T, S)
        attention_mask (float as the input's dtype); is_causal, forwarded to the attention
        interface with attention_mask=None; dropout_training, the config's attention
        dropout at value['rate'], train() or eval(), torch.manual_seed(0), no mask."""
        if raw.argument == "attention_function":
            from conformance.runners.hf.attention_function import answer_function

            return answer_function(self, import_torch(), case, data)
        if raw.argument in ("input_dtype", "unbatched", "dropout_weights"):
            from conformance.runners.hf.native_calls import native_call

            return native_call(self, import_torch(), case, data, raw)
        if raw.argument not in self.answers or raw.argument not in (
                "attn_mask", "is_causal", "dropout_training"):
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        reason = self.raw_limits(case)
        if reason:
            raise NotImplementedError(f"{self.name} cannot build {case.id}: {reason}")
        from conformance.runners.hf.native_calls import built

        torch = import_torch()
        rate = raw.value["rate"] if raw.argument == "dropout_training" else 0.0
        call, module, x = built(self, torch, case, data, rate)
        mask, kw, said = None, {}, "attention_mask=None"
        if raw.argument == "attn_mask":
            mask = torch.from_numpy(np.ascontiguousarray(raw.value[:, None]))
            mask = mask.to(x.dtype) if mask.is_floating_point() else mask
            said = f"attention_mask=<{str(mask.dtype)[6:]} (B, 1, T, S)>"
        elif raw.argument == "is_causal":
            kw = {"is_causal": bool(raw.value)}
            said += f", is_causal={bool(raw.value)}"
        else:
            module.train(bool(raw.value["training"]))
            said += (f") with attention dropout {rate} in the config, "
                     f"{'train' if raw.value['training'] else 'eval'}() (seed 0")
        torch.manual_seed(0)
        with torch.no_grad():
            out = self.forward(module, x, mask, **kw)[0]
        return to_numpy(out), f"{call}: forward(hidden_states, {said})"

    def signatures(self):
        """The attention class and its config (BERT: the self-attention part): the ledger
        reads the feature axes' argument names from them (features.py)."""
        torch = import_torch()
        case = self.probe("signatures")
        with torch.device("meta"):
            module = self.build(torch, {**self.config_call(case)[1], "dropout": 0.0,
                                        "attn_implementation": self.attn_implementation})
        if hasattr(module, "values"):  # a ModuleDict of parts (BERT): the attention is first
            module = next(iter(module.values()))
        cls, config = type(module), type(getattr(module, "config", None) or module)
        return f"{cls.__name__} and {config.__name__}", (cls.__init__, cls.forward,
                                                         config.__init__)

    sizes: SizeFacts

    def size_evidence(self, case, module, shape: tuple) -> str:
        """What the probe module's size attributes and `first_weight` `shape` show; by
        default, for a module `config_build` builds with head_dim derived from the width,
        the config call of the probe case and the head_dim that follows."""
        if self.config_build is None or self.sizes.word != "derived_from_width":
            raise NotImplementedError
        args = ", ".join(f"{k}={getattr(case.attention, f)}" for k, f in self.config_fields.items())
        return (f"{self.config_build.config}({args}): head_dim {module.head_dim}, "
                f"{self.sizes.first_weight} {shape}; no head-size field")

    def size_facts(self, case) -> list[ApiFact]:
        """What the probe module shows of its sizes: the first weight's shape under its size
        arguments, its own parameter count, its query projection's name and shape."""
        f = self.sizes
        module, _ = self.probe_module(case)
        shape = tuple(module.get_parameter(f.first_weight).shape)
        n = sum(p.numel() for p in module.parameters())
        return [ApiFact("head_size_from", f.word,
                        f"{self.size_evidence(case, module, shape)} ({f.source})"),
                ApiFact("parameter_count", f.formula, f.formula_evidence.format(n=n)),
                ApiFact("weight_names", f"{f.first_weight} {shape} {f.layout}", f.layout_why)]

    def conventions(self) -> list[ApiFact]:
        """What the module's API shows, with no oracle (observations.py): its sizes, one
        input tensor, the layout, the weights it returns, no key-padding argument, no
        implicit mask (a float64 input, a 2-D input and the weights under dropout are
        native calls: native_calls.py).  The ledger asks the masks and the dropout
        (`answers`) and the axes of `probe_takes`."""
        case = self.probe("layout")
        facts = self.size_facts(case)
        facts.append(ApiFact("inputs_order", "single_input",
                             f"{self.system}.forward({observations.forward_parameters(self)}):"
                             " one input tensor; keys and values come from it (or from one "
                             "encoder tensor)"))
        module, x = self.probe_module(case)
        torch = import_torch()
        return (facts + observations.api_facts(torch, self, case, module, x)
                + observations.signature_facts(self) + observations.tensor_facts(self))
