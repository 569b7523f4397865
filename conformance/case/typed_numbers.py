"""What a user typed, in one system's own words, and what those numbers mean.

A case's `typed` may name a `system` and give the numbers in that system's own
vocabulary, e.g. `{system: matlab, num_heads: 4, num_key_channels: 784,
input_features: 3136}`; `derive` turns them into the suite's canonical
`attention` mapping (loader.py reads it as if the case had stated it).  Each
system is one small table (VOCABULARIES): its words, which canonical quantity
each sets (a per-head width or a total over heads), which are required, and its
fixed facts (T5 has no biases).  `meaning` reads the same numbers in every
system's words: the call its user would write, the per-head and total widths,
the parameter count, or the system's refusal with the nearest call.

Canonical quantities a word may set: num_heads, num_kv_heads, query_features,
key_features, value_features, output_features, bias, and the widths qk_head /
qk_total, v_head / v_total (per head, or the total over the heads).  What no
word sets takes the suite's defaults (per-head width = query_features / heads,
value width = key width, output = query features), which are also every
system's defaults here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from conformance.case.typed_vocabularies import MORE_VOCABULARIES
from conformance.case.vocabulary import LLAMA_WORDS as _LLAMA_WORDS
from conformance.case.vocabulary import Vocabulary, Word
from conformance.case.vocabulary import word as _w

WIDTHS = ("qk_head", "qk_total")


class TypedError(ValueError):
    """Typed numbers that cannot be read; `field_name` is the dotted field."""

    def __init__(self, field_name: str, problem: str):
        super().__init__(f"{field_name}: {problem}")
        self.field_name, self.problem = field_name, problem


_MATLAB = "https://www.mathworks.com/help/deeplearning/ref/nnet.cnn.layer.selfattentionlayer.html"
_MLX = ("https://ml-explore.github.io/mlx/build/html/python/nn/_autosummary/"
        "mlx.nn.MultiHeadAttention.html")
VOCABULARIES: tuple[Vocabulary, ...] = (
    Vocabulary("matlab", "selfAttentionLayer", (
        _w("num_heads", "num_heads", req=True), _w("num_key_channels", "qk_total", req=True),
        _w("num_value_channels", "v_total"), _w("output_size", "output_features"),
        _w("input_features", "query_features", req=True, arg=False)),
        positional=2, fixed={"bias": True}, source=_MATLAB),
    Vocabulary("keras", "keras.layers.MultiHeadAttention", (
        _w("num_heads", "num_heads", req=True), _w("key_dim", "qk_head", req=True),
        _w("value_dim", "v_head"), _w("output_shape", "output_features"),
        _w("use_bias", "bias"), _w("features", "query_features", req=True, arg=False))),
    Vocabulary("keras.gqa", "keras.layers.GroupQueryAttention", (
        _w("head_dim", "qk_head", "v_head", req=True), _w("num_query_heads", "num_heads", req=True),
        _w("num_key_value_heads", "num_kv_heads", req=True), _w("use_bias", "bias"),
        _w("features", "query_features", req=True, arg=False))),
    Vocabulary("torch", "torch.nn.MultiheadAttention", (
        _w("embed_dim", "query_features", req=True), _w("num_heads", "num_heads", req=True),
        _w("kdim", "key_features"), _w("vdim", "value_features"), _w("bias", "bias"))),
    Vocabulary("flax", "flax.linen.MultiHeadDotProductAttention", (
        _w("num_heads", "num_heads", req=True), _w("qkv_features", "qk_total", "v_total"),
        _w("out_features", "output_features"), _w("use_bias", "bias"),
        _w("features", "query_features", req=True, arg=False))),
    Vocabulary("flax.nnx", "flax.nnx.MultiHeadAttention", (
        _w("num_heads", "num_heads", req=True), _w("in_features", "query_features", req=True),
        _w("qkv_features", "qk_total", "v_total"), _w("out_features", "output_features"),
        _w("use_bias", "bias"))),
    Vocabulary("mlx", "mlx.nn.MultiHeadAttention", (
        _w("dims", "qk_total", req=True), _w("num_heads", "num_heads", req=True),
        _w("query_input_dims", "query_features", req=True),
        _w("key_input_dims", "key_features"), _w("value_input_dims", "value_features"),
        _w("value_dims", "v_total"), _w("value_output_dims", "output_features"),
        _w("bias", "bias")), fixed={"bias": False}, source=_MLX),
    Vocabulary("hf.bert", "BertConfig", (
        _w("hidden_size", "query_features", req=True),
        _w("num_attention_heads", "num_heads", req=True)), fixed={"bias": True}),
    Vocabulary("hf.gpt2", "GPT2Config", (
        _w("n_embd", "query_features", req=True), _w("n_head", "num_heads", req=True)),
        fixed={"bias": True}),
    Vocabulary("hf.marian", "MarianConfig", (
        _w("d_model", "query_features", req=True),
        _w("encoder_attention_heads", "num_heads", req=True)), fixed={"bias": True}),
    Vocabulary("hf.t5", "T5Config", (
        _w("d_model", "query_features", req=True), _w("num_heads", "num_heads", req=True),
        _w("d_kv", "qk_head", "v_head", req=True)), fixed={"bias": False}),
    Vocabulary("hf.llama", "LlamaConfig", _LLAMA_WORDS, fixed={"bias": False}),
    Vocabulary("hf.mistral", "MistralConfig", _LLAMA_WORDS[:4], fixed={"bias": False}),
    Vocabulary("hf.gemma2", "Gemma2Config", _LLAMA_WORDS, fixed={"bias": False}),
    Vocabulary("hf.gpt_oss", "GptOssConfig", _LLAMA_WORDS, fixed={"bias": True}),
    Vocabulary("hf.gptj", "GPTJConfig", (
        _w("n_embd", "query_features", req=True), _w("n_head", "num_heads", req=True),
        _w("rotary_dim", "rotary_dim")), fixed={"bias": False}),
    Vocabulary("hf.gpt_neox", "GPTNeoXConfig", (
        _w("hidden_size", "query_features", req=True),
        _w("num_attention_heads", "num_heads", req=True), _w("rotary_pct", "rotary_pct"),
        _w("attention_bias", "bias"))),
    Vocabulary("hf.qwen3", "Qwen3Config", _LLAMA_WORDS, fixed={"bias": False}),
    Vocabulary("hf.olmo2", "Olmo2Config", (
        _w("hidden_size", "query_features", req=True),
        _w("num_attention_heads", "num_heads", req=True),
        _w("num_key_value_heads", "num_kv_heads"), _w("attention_bias", "bias")),
        fixed={"bias": False}),
    Vocabulary("hf.bloom", "BloomConfig", (
        _w("hidden_size", "query_features", req=True), _w("n_head", "num_heads", req=True)),
        fixed={"bias": True}),
    Vocabulary("hf.mpt", "MptConfig", (
        _w("d_model", "query_features", req=True), _w("n_heads", "num_heads", req=True)),
        fixed={"bias": False}),
    Vocabulary("marian", "marian --type transformer", (
        _w("dim_emb", "query_features", req=True), _w("transformer_heads", "num_heads", req=True)),
        fixed={"bias": True}, cli=True),
) + MORE_VOCABULARIES  # the systems of typed_vocabularies.py, after these
BY_KEY = {v.key: v for v in VOCABULARIES}
# Which runners speak a vocabulary is declared on the runner class (`typed_system`), as is
# the row label of a system that holds no parameters (`no_parameters_label`).


def _value(word: Word, value: Any) -> Any:
    if "rotary_pct" in word.sets:  # GPT-NeoX: the fraction of each head that rotates
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise TypedError(f"typed.{word.name}", f"must be a number in (0, 1], got {value!r}")
        return float(value)
    if "bias" in word.sets:
        if not isinstance(value, bool):
            raise TypedError(f"typed.{word.name}", f"must be true or false, got {value!r}")
        return value
    if type(value) is not int or value < 1:
        raise TypedError(f"typed.{word.name}", f"must be a positive integer, got {value!r}")
    return value


def _read(typed: Mapping[str, Any]) -> tuple[Vocabulary, dict[str, Any], dict[str, str]]:
    """The vocabulary, the canonical quantities the words set, and which word set each."""
    key = typed.get("system")
    if key not in BY_KEY:
        raise TypedError("typed.system", f"unknown system {key!r}; known: {sorted(BY_KEY)}")
    vocab = BY_KEY[key]
    names = [w.name for w in vocab.words]
    for name in typed:
        if name != "system" and name not in names:
            raise TypedError(f"typed.{name}", f"is not a word of {key} ({vocab.ctor}); its "
                             f"words are {names}")
    for w in vocab.words:
        if w.required and w.name not in typed:
            raise TypedError(f"typed.{w.name}", f"is required for system {key} "
                             f"({vocab.ctor}); required: "
                             f"{[x.name for x in vocab.words if x.required]}")
    quantities, source = dict(vocab.fixed), {}
    for w in vocab.words:
        if w.name in typed:
            for q in w.sets:
                quantities[q], source[q] = _value(w, typed[w.name]), w.name
    return vocab, quantities, source


def _per_head(q: dict, src: dict, kind: str, fallback: int, h: int, key: str) -> int:
    """The per-head width of `kind` ("qk" or "v") from a per-head word, a total, or
    `fallback` (the total split over the heads)."""
    if f"{kind}_head" in q:
        return q[f"{kind}_head"]
    total = q.get(f"{kind}_total", fallback)
    if total % h:
        word = src.get(f"{kind}_total") or src.get("query_features", "features")
        raise TypedError(f"typed.{word}", f"{word} = {total} is not divisible by the "
                         f"{h} heads: {key} splits it evenly over the heads (a total, not a "
                         "per-head width); choose a multiple of the number of heads")
    return total // h


def derive(typed: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical `attention` mapping (all nine fields) that `typed` (with a
    `system`) means; raises TypedError naming the typed field."""
    vocab, q, src = _read(typed)
    if vocab.refusal:
        raise TypedError("typed.system", vocab.refusal)
    h, eq = q["num_heads"], q["query_features"]
    hkv = q.get("num_kv_heads", h)
    if h % hkv:
        raise TypedError(f"typed.{src['num_kv_heads']}", f"the {h} query heads must be a "
                         f"multiple of the {hkv} key/value heads")
    dk = _per_head(q, src, "qk", eq, h, vocab.key)
    dv = dk if "v_head" not in q and "v_total" not in q else _per_head(
        q, src, "v", dk * h, h, vocab.key)
    ek = q.get("key_features", eq)
    return {"num_heads": h, "num_kv_heads": hkv, "query_features": eq, "key_features": ek,
            "value_features": q.get("value_features", ek), "qk_head_dim": dk,
            "v_head_dim": dv, "output_features": q.get("output_features", eq),
            "bias": q.get("bias", True)}


def call_text(typed: Mapping[str, Any]) -> str:
    """The call a user of typed['system'] writes with these numbers, e.g.
    'selfAttentionLayer(4,784) on 3136 features'."""
    vocab = BY_KEY[typed["system"]]
    args = [(w, typed[w.name]) for w in vocab.words if w.arg and w.name in typed]
    if vocab.cli:
        return " ".join([vocab.ctor] + [f"--{w.name.replace('_', '-')} {v}" for w, v in args])
    shown = [repr(v) if i < vocab.positional else f"{w.name}={v!r}"
             for i, (w, v) in enumerate(args)]
    sep = "," if vocab.positional else ", "
    context = [f"{typed[w.name]} {w.name.replace('_', ' ')}" for w in vocab.words
               if not w.arg and w.name in typed]
    return f"{vocab.ctor}({sep.join(shown)})" + (f" on {', '.join(context)}" if context else "")


@dataclass(frozen=True)
class Meaning:
    """One system's reading of the typed numbers (a row of the typed-numbers table)."""

    system: str  # a VOCABULARIES key, or the label of a system holding no parameters
    call: str  # the call its user writes with the same numbers (or the nearest)
    per_head: int | None  # qk width per head
    total: int | None  # qk width over all heads
    parameters: int | None  # reference.formula_parameters of that reading
    note: str = ""  # the refusal, or what differs
    same_layer: str = ""  # the call that builds the typed configuration itself


def parameters_of(attention: Mapping[str, Any]) -> int:
    """The analytic count (model.parameter_count) of a canonical attention mapping."""
    from conformance.case.model import Attention, parameter_count

    return parameter_count(Attention(**attention))


def _spelled(vocab: Vocabulary, c: Mapping[str, Any], width: int | None,
             bias: bool = False) -> dict[str, Any]:
    """`c`'s heads and features in `vocab`'s words, with `width` for its width word
    (None: the width of `c` in that word's unit); `bias`: also `c`'s bias where the
    system's default differs and a word can say it."""
    out: dict[str, Any] = {"system": vocab.key}
    for w in vocab.words:
        if "num_heads" in w.sets:
            out[w.name] = c["num_heads"]
        elif "num_kv_heads" in w.sets and (w.required or c["num_kv_heads"] != c["num_heads"]):
            out[w.name] = c["num_kv_heads"]
        elif "query_features" in w.sets:
            out[w.name] = c["query_features"]
        elif set(w.sets) & set(WIDTHS):
            per = "qk_head" in w.sets
            out[w.name] = width if width is not None else (
                c["qk_head_dim"] * (1 if per else c["num_heads"]))
        elif "bias" in w.sets and bias and c["bias"] != vocab.fixed.get("bias", True):
            out[w.name] = c["bias"]
    return out


def _same_layer(vocab: Vocabulary, c: Mapping[str, Any]) -> str:
    """The call giving configuration `c` in `vocab`, or why there is none."""
    try:
        spelled = _spelled(vocab, c, None, bias=True)
        got = derive(spelled)
    except TypedError as exc:
        return f"none: {exc.problem}"
    diff = [f"{k} {got[k]} (typed: {c[k]})" for k in c if k in got and got[k] != c[k]]
    return call_text(spelled) if not diff else "none: it gives " + ", ".join(diff)


def _reading(vocab: Vocabulary, c: Mapping[str, Any], width: int | None) -> Meaning:
    has_width = any(set(w.sets) & set(WIDTHS) for w in vocab.words)
    spelled = _spelled(vocab, c, width)
    note = vocab.note
    if width is not None and not has_width:
        note = (f"{vocab.ctor} has no head-size argument: the per-head width is "
                f"{c['query_features']} / {c['num_heads']}, so {width} cannot be typed; "
                "nearest shown") + (f"; {note}" if note else "")
    same = _same_layer(vocab, c)
    try:
        got = derive(spelled)
    except TypedError as exc:
        return Meaning(vocab.key, call_text(spelled), None, None, None, exc.problem, same)
    count = vocab.count(got) if vocab.count else parameters_of(got)
    return Meaning(vocab.key, call_text(spelled), got["qk_head_dim"],
                   got["qk_head_dim"] * got["num_heads"], count, note, same)


def typed_width(typed: Mapping[str, Any]) -> int | None:
    """The head-size number the user typed (per head or total), None if none."""
    vocab = BY_KEY[typed["system"]]
    words = [w.name for w in vocab.words if set(w.sets) & set(WIDTHS)]
    return next((typed[n] for n in words if n in typed), None)


def meaning(typed: Mapping[str, Any], no_parameters: tuple[str, ...] = ()) -> list[Meaning]:
    """What the same typed numbers mean in every system (VOCABULARIES order, then the
    systems labelled in `no_parameters`, which hold none: the report passes the
    registry's `no_parameters_label`s): heads, the head-size number and the features,
    each written in that system's own words.  `typed` needs a `system`."""
    c = derive(typed)
    width = typed_width(typed)
    rows = [_reading(vocab, c, width) for vocab in VOCABULARIES]
    rows += [Meaning(label, "", None, None, None, "holds no parameters: the caller passes "
                     "projected queries, keys and values") for label in no_parameters]
    return rows


def _why(typed: Mapping[str, Any], key: str, derived: Mapping[str, Any]) -> str:
    """Which typed word gives attention.`key`, and whether it is per head or a total."""
    vocab = BY_KEY[typed["system"]]
    kind = {"qk_head_dim": "qk", "v_head_dim": "v"}.get(key)
    for w in vocab.words:
        if kind and w.name in typed and f"{kind}_total" in w.sets:
            return (f"{w.name} = {typed[w.name]} is the total over the "
                    f"{derived['num_heads']} heads in {vocab.key}: {derived[key]} per head")
        if kind and w.name in typed and f"{kind}_head" in w.sets:
            return f"{w.name} = {typed[w.name]} is per head in {vocab.key}"
    return f"{call_text(typed)} gives {key} = {derived[key]!r}"


def with_attention(r, raw: Mapping[str, Any], typed: Mapping[str, Any]) -> Mapping[str, Any]:
    """`raw` with its `attention` section derived from `typed` (loader.py's reader `r`
    builds the CaseError).  Without a `system`, `typed` is free numbers: `raw` as is.
    Stated attention fields must agree with the derivation; fields it has no word
    for (scale) pass through."""
    if "system" not in typed:
        return raw
    try:
        derived = derive(typed)
    except TypedError as exc:
        raise r.fail(exc.field_name, exc.problem) from None
    stated = dict(r.section("attention"))
    rope = _typed_rotary(typed, derived)
    if rope is not None:
        stated["rope"] = _rope_with(r, stated.get("rope"), rope, typed)
    for key, value in stated.items():
        if key in derived and (value != derived[key] or type(value) is not type(derived[key])):
            raise r.fail(f"attention.{key}", f"states {value!r}, but typed "
                         f"({call_text(typed)}) means {derived[key]!r} "
                         f"({_why(typed, key, derived)}); fix: remove attention.{key} (the "
                         "loader derives it from typed) or correct the typed numbers")
    return {**raw, "attention": {**derived, **stated}}


ROTARY = {"rotary_dim": "rotary_dim", "rotary_pct": "rotary_pct"}  # words setting rope.rotary_dim


def _typed_rotary(typed: Mapping[str, Any], derived: Mapping[str, Any]) -> int | None:
    """attention.rope.rotary_dim from GPT-J's rotary_dim (dimensions per head) or
    GPT-NeoX's rotary_pct (int(head_size * rotary_pct), as GPTNeoXAttention computes it)."""
    vocab = BY_KEY[typed["system"]]
    word = next((w for w in vocab.words if set(w.sets) & set(ROTARY) and w.name in typed), None)
    if word is None:
        return None
    d = derived["qk_head_dim"]
    value = _value(word, typed[word.name])
    dim = value if "rotary_dim" in word.sets else int(d * value)
    if dim % 2 or not 0 < dim <= d:
        raise TypedError(f"typed.{word.name}", f"{word.name} = {typed[word.name]} gives "
                         f"{dim} rotating dimensions of a head of {d}: must be even and at "
                         "most the head size (pairs rotate)")
    return dim


def _rope_with(r, stated: Any, dim: int, typed: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(stated, Mapping):
        raise r.fail("attention.rope", f"typed ({call_text(typed)}) sets the rotary width "
                     f"({dim} per head); give attention.rope with its style, e.g. "
                     "{style: interleaved}")
    if stated.get("rotary_dim", dim) != dim:
        raise r.fail("attention.rope.rotary_dim", f"states {stated['rotary_dim']!r}, but "
                     f"typed ({call_text(typed)}) means {dim}; fix: remove it (the loader "
                     "derives it from typed) or correct the typed numbers")
    return {**stated, "rotary_dim": dim}
