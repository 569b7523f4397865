"""The runner contract: the types that runners, the worker transport and the matrix share.

A runner turns the framework-neutral Case into what a user of one system
would type (`translate`), loads the canonical weights into that system's own
layout and runs it (`run`), returning NumPy arrays and the system's own
accounting in an Observation.  Runners never assert and never compare: the
matrix (run/evaluate.py) judges and the report package tabulates.

This module imports nothing of the suite above the case layer, so every
runner, `workers` and `matrix` can import it without importing each other.
Frameworks are imported inside `run` only: listing runners, collecting the
pytest matrix and `--help` stay fast and work without any framework.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from conformance.contract.api_facts import ApiFact


@dataclass(frozen=True)
class WorkerSpec:
    """A runner that cannot share the pytest process (a Keras backend is fixed at
    import) declares one: every runner with the same `key` runs in ONE long-lived
    subprocess per session (workers.py), started with `env` set and the modules in
    `hide` made unimportable (optional packages a framework imports merely because
    they are installed: Keras imports jax and pandas on every backend)."""

    key: str  # e.g. "keras-jax"
    env: Mapping[str, str] = field(default_factory=dict)  # set before anything is imported
    hide: tuple[str, ...] = ()  # modules the worker must not import


@dataclass(frozen=True)
class Translation:
    """The native configuration: `call` is what a user of the system would type
    (for people and reports); `plan` is the typed plan `run` executes (a frozen
    dataclass of the runner's own, or a dict of native keyword arguments)."""

    call: str  # e.g. "torch.nn.MultiheadAttention(embed_dim=512, num_heads=8)"
    plan: Any = None


@dataclass(frozen=True)
class NotExpressible:
    """The system cannot express the case; `reason` quotes the limitation."""

    reason: str


HARNESS_LIMIT = "harness limit: "  # a reason that starts so is the suite's, not the system's


def harness_limit(reason: str) -> str:
    """A NotExpressible reason for what the suite's own harness (its graph, its model, its
    runner) does not do: the ledger's refusals cell reports it apart from what the system
    itself rejects."""
    return HARNESS_LIMIT + reason


class NotExpressibleError(Exception):
    """Raised from `run` when the limit shows only on trying (the framework's
    constructor rejected the configuration, a fast path did not engage...).
    The message should quote the framework's own words."""


@dataclass
class Observation:
    """What one system produced for one case, as plain NumPy and numbers."""

    output: np.ndarray  # (B, T, E_o) as float64 (converted from the native dtype)
    attention_weights: np.ndarray | None = None  # (B, H, T, S) per head, when returned
    weights_returned: str = "none"  # "per_head", "averaged" or "none": what the system gives
    parameters: int | None = None  # the system's own count; None = it holds no parameters
    projection_parameters: int | None = None  # for systems holding none: arrays we passed in
    weight_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # native names
    notes: list[str] = field(default_factory=list)  # facts worth a reader's attention
    executed: bool = True  # False for documented models of systems that cannot run here
    extras: dict[str, Any] = field(default_factory=dict)  # JSON-able details for results files
    # Typed data for report sections (select rows by these, never by runner name):
    graphs: dict[str, dict] = field(default_factory=dict)  # ONNX graph label -> accounting
    output_digest: dict | None = None  # compact output record for cross-backend tables
    # the dtype of the system's own output before its conversion to float64 (`output`),
    # where a probe asks for it (RAW_ARGUMENTS "input_dtype"): the ledger names what the
    # system did with the input's dtype from it
    native_dtype: str = ""
    # what an exported or converted program holds, read from the program itself (its
    # graph's constants, its flatbuffer's buffers), never from the framework it came from:
    # the distinct values of its scalar float constants (a fill, a scale), and the element
    # type its weights are stored in (float16 for a float16 weight conversion that computes
    # in float32); the ledger names a fill and sets its precision from them
    held_scalars: tuple[float, ...] = ()
    weights_dtype: str = ""


FORMULA = "formula (no allocation-free path)"


@dataclass(frozen=True)
class Count:
    """A system's parameter count and native weight shapes, obtained without
    materialising a weight: `method` says how ("meta device", "jax.eval_shape",
    "keras.StatelessScope"), or is a formula label where the system has no
    allocation-free path (then the figures are the suite's, not the system's)."""

    parameters: int | None  # None: the system holds none (see projection_parameters)
    weight_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    method: str = FORMULA
    projection_parameters: int | None = None  # for systems holding none: arrays passed in


# The native arguments a ledger probe may ask a runner to pass raw (Runner.answer), in the
# system's own terms: the probe, not the runner, then names the reading.
RAW_ARGUMENTS = {
    "attn_mask": "a (B, T, S) NumPy array, boolean or float, given as it is to the system's "
                 "attention-mask argument (broadcast over heads as the system needs)",
    "is_causal": "the system's causal switch set to `value`, with no mask",
    "step_is_causal": "a decode case run through the system's cache, its single-position "
                      "steps with the causal switch set to `value` (the prefill as it runs)",
    "dropout_training": "the system's attention dropout rate set to `value['rate']` and its "
                        "training switch to `value['training']` (a fixed seed), no mask; a "
                        "program that takes no training input is made with the switch so "
                        "(the module exported in train mode) and `answer` returns an "
                        "Observation whose extras hold {'training_set_at': 'export'}",
    "window": "the system's sliding-window argument set to `value` as it takes it (an int, "
              "or a pair), no mask; the case's causal mask, if any, as its causal switch",
    "positional": "the case's query, key and value arrays passed in this order as the "
                  "system's first three positional arguments, no mask",
    "key_padding": "a (B, S) boolean array given as it is to the system's separate "
                   "key-padding argument, no other mask",
    "key_lengths": "a (B,) integer array given as it is to the system's per-item "
                   "key-lengths argument (onnxruntime GroupQueryAttention's seqlens_k, ONNX "
                   "Attention-24's nonpad_kv_seqlen), no other mask",
    "marked_padding": "self-attention over the case's query with the (B, T) positions "
                      "`value` False marked as padding the system's own way (e.g. an "
                      "Embedding(mask_zero=True) in front), no mask argument",
    "causal_hint": "the system's causal switch on beside `value['attn_mask']` (a (B, T, S) "
                   "boolean array given as it is to its attention-mask argument) and, where "
                   "`value['pad_nothing']` is set, a key-padding mask that pads no key",
    "partial_rotary": "the system's own partial-rotary setting set to `value` (the fraction "
                      "of the head dim to rotate, as the system takes it, e.g. a config's "
                      "partial_rotary_factor) on the case as it translates it, no mask",
    "window_setting": "the system's window configured by `value['setting']` (one of the "
                      "runner's window_settings labels) with the number `value['window']`, "
                      "the mask from the system's own builder for it (the case's causal "
                      "mask, if any, as that builder makes it), no other mask",
    "step_mask": "a decode case run through the system's cache, the prefill as it runs, each "
                 "single-position step t given row t of the case's (B, T, S) boolean mask "
                 "(True = attend) over the keys its cache holds as the system's attention-"
                 "mask argument; `value` {'nan': 'key' or 'value', 'item': b, 'slot': s}: "
                 "NaN written into that cached tensor (every head) of item b at position s "
                 "after the prefill",
    "attention_function": "the module's own attention function (what its forward calls after "
                          "projecting, rotating and normalising) called directly with the "
                          "module, on the case's query, key and value projected by the "
                          "case's weights (no rotation, no norm), the case's (B, T, S) boolean "
                          "mask as the module's model builds it; the output projected back",
    "input_dtype": "the case's inputs cast to `value` (a NumPy dtype name, e.g. float64) "
                   "and given as they are to the system built in the case's dtype (a "
                   "function holding no weights: its query only), no mask; `answer` returns "
                   "an Observation whose native_dtype is the dtype of the system's output",
    "unbatched": "the case's first item alone, its inputs without the batch axis ((T, E) "
                 "for a layer; (H, T, d) for a function of per-head tensors), no mask; "
                 "the output as the system gave it, without the batch axis",
    "dropout_weights": "the system's attention dropout rate set to `value['rate']` and its "
                       "training switch on (a fixed seed), no mask, asking for the attention "
                       "weights it returns; `answer` returns an Observation whose "
                       "attention_weights are those weights (None where it returns none)",
    "packed_gate": "the case's canonical W_q and output gate W_g (and their biases) loaded "
                   "into the system's own weight names packed as `value` (convert/gate.py: "
                   "per_head, halves or separate), strictly, on the case as it translates",
}


@dataclass(frozen=True)
class RawCall:
    """A ledger probe's request: pass `argument` (a key of RAW_ARGUMENTS) raw with `value`,
    on the probe case's canonical weights and inputs, and return what the system gave."""

    argument: str
    value: Any = None


class Runner:
    """Base class: subclasses set the class attributes and implement two methods.

    Runners that differ only by a backend or a flag are one class with
    parameters: the registry holds `(target, params)` and `Runner(**params)`
    sets them as attributes (an unknown parameter is an error)."""

    name: str = ""  # the id in reports and pytest ids, e.g. "torch.mha"
    framework: str = ""  # the pytest marker and report family, e.g. "torch"
    system: str = ""  # the API it runs, e.g. "torch.nn.MultiheadAttention"
    path: str = "default"  # which code path of that API, e.g. "fast path", "scores"
    backend: str = ""  # the engine underneath, where a system has several
    requires: tuple[str, ...] = ()  # importable modules needed to run
    extras: str = ""  # the pip extras that bring them, when not just `framework`
    worker: WorkerSpec | None = None  # set: runs in that worker subprocess
    sets_scale: bool = False  # the system can set the softmax scale (attention.scale)
    # True: the scale is set by the harness (a wrapper the suite writes, e.g. Flax's
    # attention_fn pre-scaling the query), not by an argument of the system: the ledger's
    # softmax_scale probe then reads the default scale only (scores.py)
    harness_scale: bool = False
    executed: bool = True  # False: a documented model (its `run` is the suite's NumPy)
    pinned: bool = True  # False: its cells are reported, never pinned (a probe target:
    # the user's code has no expectations file; run/evaluate.py, conventions_items.py)
    # True: translate takes decode cases only (a harness choice: the system behind it takes
    # single calls too, which another runner covers); the ledger's single-call probes
    # then read not_probed, never the system's not_applicable
    decodes_only: bool = False
    # Case.attention fields the system applies on every call (keras.rope.*: its rotation, in
    # front of a plain layer its probe_translate answers other probe cases with): the
    # ledger's probes of the whole system's arithmetic (float64_compute, fully_masked_row)
    # carry them
    probe_needs: Mapping[str, Any] = {}
    # Case.mask fields the system applies on every call (GPT-2's causal mask: GPT2Model
    # always builds one), carried like probe_needs by the forms that carry the needs
    probe_mask_needs: Mapping[str, Any] = {}
    # a choice the harness makes for the system where its users' default may differ: a
    # runner parameter -> its alternatives (HF's attn_implementation: the runners build
    # "eager", a model built from a config gets "sdpa"); the ledger's probes of the axes a
    # choice can move measure each alternative, `depends` where they differ (choices.py)
    harness_choices: Mapping[str, tuple[Any, ...]] = {}
    # a head size its kernel accepts, asked only after the system refused a probe's own
    # (onnxruntime's CPU GroupQueryAttention: multiples of 8, 16 with rotation); needs.py
    probe_head_size: int | None = None
    # (word, source): the fill the system's source writes into masked scores, where the
    # ledger's fill probe sees a tie its outputs cannot break (finfo_min, -0.7*finfo_max)
    documented_fill: tuple[str, str] = ()
    # the case features it translates (rope, QK-norm, ALiBi, softcap, sinks, windows, fills,
    # decode: Case.features, case/features.py); a case asking for another is not
    # expressible.  Every runner takes mask.fill: one that takes only boolean masks ignores
    # it, one that takes a float mask must use that fill.
    features: frozenset[str] = frozenset({"fill"})
    # What the rest of the suite reads from the class, so that a new runner is its module,
    # a registry line and its expectations file (tests/test_toy_runner.py):
    description: str = ""  # one line for the README's runner table (what runs)
    seconds: float = 0.2  # expected seconds per item, to deal out shards before any timing
    typed_system: str = ""  # the `typed.system` its users type in (case/typed_numbers.py)
    no_parameters_label: str = ""  # holds no parameters: its typed-numbers row label
    target: str = ""  # "module:Class", filled in by the registry
    params: Mapping[str, Any] = {}  # the constructor parameters, filled in by __init__

    def __init__(self, **params: Any):
        for k, v in params.items():
            if k.startswith("_") or not hasattr(type(self), k):
                raise TypeError(f"{type(self).__name__} has no runner parameter {k!r}")
            setattr(self, k, v)
        self.params = dict(params)

    def available(self) -> str | None:
        """None when runnable here, else the reason to skip.  Looked up once per
        runner object (every item asks; find_spec reads the file system)."""
        if "_missing" not in self.__dict__:
            missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
            self._missing = (f"{', '.join(missing)} not installed "
                             f"(pip install -e '.[{self.extras or self.framework}]')"
                             if missing else None)
        return self._missing

    def translate(self, case) -> Translation | NotExpressible:
        raise NotImplementedError

    def run(self, case, translation: Translation, data) -> Observation:
        raise NotImplementedError

    def count(self, case) -> Count:
        """Parameters and weight shapes for `case` without allocating a weight (the
        matrix asks for it instead of `run` when a case is over the numbers budget).
        Default: the analytic count, labelled as such; runners with an
        allocation-free path (a meta device, shape inference) override it."""
        from conformance.case.model import sizes_counts

        return Count(sizes_counts(case.attention, case.inputs)["weights"])

    # the RAW_ARGUMENTS this runner's `answer` passes; the ledger probes those axes itself
    answers: frozenset[str] = frozenset()
    # What the system takes natively in the ledger's probe cases beyond its `features`: the
    # probe shapes of conventions/probes/table.py SHAPES ("grouped" heads, a "rotary_dim"
    # below the head dim, a "decode" through its own cache...).  The table of axes asks a
    # runner the axes whose probe case it takes; no runner names an axis
    probe_takes: frozenset[str] = frozenset()
    # case features its translate builds from the suite's own ops, not from an argument of
    # the system (mlx.sdpa's QK-norm): the ledger asks their axes of no such runner
    harness_features: frozenset[str] = frozenset()
    # its inputs are a converted graph's named inputs, with no positional order to ask
    named_inputs: bool = False

    def signatures(self) -> tuple:
        """(what, the callables its system is driven through): the ledger reads the feature
        axes' argument names from their signatures (conventions/probes/features.py); ()
        where the runner names none."""
        return ()

    def schema_names(self) -> tuple:
        """(what, names, where they are listed) for a system described by an operator schema
        rather than a Python signature (an ONNX op's attributes and inputs): the ledger reads
        the feature axes' argument names from them (features.py); () where none."""
        return ()

    def window_settings(self, window: int) -> dict[str, bool]:
        """label -> causal, for a system whose window is a configuration its own mask builder
        reads (RawCall window_setting, conventions/probes/window_settings.py); {} if none."""
        return {}

    # translate(case) for a probe case the matrix's translate refuses (a decode runner
    # answering a single call with the op every step calls); request.ask uses it when set
    probe_translate: Callable[..., Any] | None = None
    # run(case, translation, data) -> the raw output, without a guard of the matrix's rows
    # (one refusing a non-finite float32 output); request.ask uses it when set
    probe_output: Callable[..., Any] | None = None

    def answer(self, case, data, raw: RawCall) -> tuple[np.ndarray | Observation, str]:
        """The system run on `case` with `data` (its canonical weights and inputs) and one
        argument passed raw (`raw`): its (B, T, E_o) output as float64 and the call made,
        or (an Observation, the call) where the argument asks for more than the output
        (its native dtype, its returned weights: RAW_ARGUMENTS says which).
        The runner only calls; the ledger's probe (conventions/probes/) judges.  A system
        error propagates (it is the observation); an argument not in `answers` raises
        NotImplementedError."""
        raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")

    def conventions(self) -> list[ApiFact]:
        """What the runner reads of its system's API (ApiFact: its signature, its return,
        one native call on small seeded inputs), for the ledger to file under its axes.
        Runs where `run` runs (in the worker for worker runners).  Every measurement of a
        behaviour is the ledger's (conventions/probes/), asked through translate, run and
        `answer`."""
        return []


def to_numpy(x) -> np.ndarray:
    """Any framework tensor -> float64 NumPy (bfloat16 has no NumPy dtype)."""
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu()
        return x.double().numpy() if x.is_floating_point() else x.numpy()
    return np.asarray(x).astype(np.float64)



AGREEMENT_SAMPLE = 64  # output elements every row of a case keeps for the agreement clusters


def agreement_sample(out, dtype: str) -> list[float | None]:
    """AGREEMENT_SAMPLE evenly spaced elements of a (B, T, E_o) output, the same indices for
    every runner of a case (they depend on the size alone), float32-rounded unless the
    case is float64; None where not finite.  report/clusters.py compares them."""
    flat = np.asarray(out, dtype=np.float64).ravel()
    if flat.size > AGREEMENT_SAMPLE:
        flat = flat[np.linspace(0, flat.size - 1, AGREEMENT_SAMPLE).round().astype(int)]
    if dtype != "float64":
        flat = flat.astype(np.float32).astype(np.float64)
    digits = 17 if dtype == "float64" else 9
    return [float(f"{v:.{digits}g}") if np.isfinite(v) else None for v in flat]
