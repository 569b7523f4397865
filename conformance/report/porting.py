"""A porting guide between two systems: `python -m conformance diff A B`.

For every ledger axis where A and B differ (reports/conventions.json, compared
word by word as the tables show them): both values, the evidence of each and what
to do (ADVICE, per axis; the weight layout names the converter of each side).
Then, for a configuration typed in one system's words (`--typed
"MultiHeadAttention(num_heads=4, key_dim=784)" --features 3136`), what the same
numbers mean on each side and their parameter counts (case/typed_numbers.py), and
a converter snippet from A's weight layout to B's that runs as it is
(conformance.convert).  The data only: cli/diff.py prints it, report/answers_html.py
embeds the advice in index.html.
"""
from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field, replace

from conformance.oracle.chunked import temperature
from conformance.oracle.relative_bias import bucket as relative_bucket
from conformance.oracle.rope_scaling import yarn_get_mscale
from conformance.case.multi_axis_rope import interleaved_axes
from conformance.report.base import ledger_word
from conformance.report.ledger_groups import SILENT, cells_by_key, evidence_link



def _pairs(axis: int) -> str:
    """The pairs of Qwen3-VL's interleaved [24, 20, 20] over 64 pairs that take `axis`."""
    got = [i for i, a in enumerate(interleaved_axes((24, 20, 20), 64)) if a == axis]
    return f"{got[0]}, {got[1]}, ..., {got[-1]}"


ADVICE: dict[str, str] = {
    "attn_mask_polarity": "invert the boolean attention mask (mask = ~mask) when moving it "
                          "from one to the other",
    "key_padding_polarity": "invert the key-padding mask, or turn lengths into a mask "
                            "(arange(S) < length)",
    "argument_order": "Keras takes query, value, key (layer(query, value, key)); torch and "
                      "most others take query, key, value: swap the last two",
    "weight_layout": "convert the weights with conformance.convert (snippet below): "
                     "to_keras transposes and reshapes W_q from (H*d_k, E) out x in to "
                     "(E, H, d_k)",
    "returned_weights": "pass average_attn_weights=False to torch.nn.MultiheadAttention for "
                        "per-head weights (B, H, T, S), or average the other's over heads",
    "fully_masked_row": "a query row with no key to attend differs: mask those rows out "
                        "after the call, or keep one key open",
    "input_layout": "transpose the inputs (torch MHA: batch_first=True reads (B, T, E))",
    "unbatched_input": "add a batch axis (x[None]) where a 2-D input is refused",
    "float_mask": "pass a boolean mask: where a float mask is cast to bool, 0 blocks and "
                  "-1e9 attends (inverted)",
    "softmax_scale": "set the scale explicitly where it can be set, or fold it into W_q",
    "scale_precision": "expect 1e-8 differences in float64: the scale is rounded through "
                       "float32 on one side",
    "causal_flag": "for query_len != key_len build the causal mask yourself (lower right: "
                   "key j allowed when j <= i + S - T)",
    "size_arguments": "translate the head size: total over heads = per head x num_heads "
                      "(use --typed to see the numbers)",
    "parameter_formula": "the counts differ by construction (biases, norms): compare a "
                         "configuration with --typed",
    "dropout": "switch dropout the way each side does (training flag or not at all)",
    "weights_dropout": "returned weights include dropout on one side only: compare in "
                       "inference",
    "float64_compute": "one side computes float64 in lower precision: compare in float32",
    "mixed_dtype": "cast the input to the layer's dtype yourself",
    "implicit_mask": "pass the padding mask explicitly: one side reads a mask attached to "
                     "the input (Keras mask_zero), the other does not",
    "rope_style": "permute the W_q / W_k rows head by head with conformance.convert.rope "
                  "(interleaved_to_half_split / half_split_to_interleaved; W_k with the kv "
                  "head count)",
    "rope_partial": "rotate only the first rotary_dim dimensions by hand where partial "
                    "rotary is not supported",
    "kv_head_mapping": "reorder the kv heads: grouped reads kv head h // (H / H_kv), tiled "
                       "h % H_kv",
    "window_width": "translate the window number: w keys, w + 1 (w before and itself) or "
                    "2w + 1 (w on each side)",
    "cache_causal_alignment": "align the causal mask of a cached step to the lower right "
                              "yourself where the cache does not",
    "softcap_order": "apply the mask after the softcap on the side that caps first",
    "mask_fill": "expect different outputs only where every key is masked (the fill value "
                 "decides)",
    "rope_scaling_magnitude": "apply the attention factor once, where the target puts it: "
                              "YaRN at factor 40 is m = {m:.3f} on cos and sin (each rotated "
                              "dim of q and k), or m^2 = {m2:.3f} on the softmax scale; a port "
                              "applying both scales the rotated scores by m^4 = {m4:.3f}; with "
                              "every dim rotating the two places agree, with a partial rotary "
                              "width (MLA's rope slice) they do not".format(
                                  m=yarn_get_mscale(40), m2=yarn_get_mscale(40) ** 2,
                                  m4=yarn_get_mscale(40) ** 4),
    "rope_scaling_frequencies": "compute the frequencies the target's way for each type: "
                                "dynamic NTK recomputed from the largest position + 1, fixed "
                                "at construction, or every frequency divided alike part past "
                                "original_max_positions; YaRN's ramp edges rounded or not; "
                                "LongRoPE's switch to the long factors past the original "
                                "context (mlx-lm's YarnRoPE reads no truncate and rounds "
                                "always; its SuScaledRoPE takes the long factors at every "
                                "length); compare the evidence's distances per type",
    # M-RoPE and 2-D RoPE
    "mrope_layout": "hand the model (3, B, T) position ids and lay mrope_section the target's "
                    "way: Qwen2-VL-7B's [16, 24, 24] contiguous puts t on pairs 0-15, h on "
                    "16-39, w on 40-63; Qwen3-VL's [24, 20, 20] interleaved (keras_hub's Qwen3.5 "
                    "alike) puts h on pairs {h} and w on {w} (every third), t on the rest; "
                    "a port that takes no "
                    "position ids (mlx-lm's Qwen2-VL and Qwen3-VL text models: nn.RoPE at "
                    "cache.offset + t) or swaps the sections agrees on text-only prompts (t = h "
                    "= w) and is wrong on every image token".format(
                        h=_pairs(1), w=_pairs(2)),
    "vision_rope_layout": "lay the row and column frequencies the target's way: Pixtral's row "
                          "takes the even, its column the odd frequencies of the head_dim "
                          "ladder; Qwen2-VL's vision tower (and keras_hub's Qwen3.5 "
                          "encoder) gives both the ladder of a rope head_dim / 2 wide; the "
                          "row halves agree and the column half turns "
                          "base^(-2/d) = {r:.3f} times as fast in Pixtral (head_dim 64, base "
                          "1e4): recompute the cos / sin table, the weights need no "
                          "permutation".format(r=1e4 ** (-2 / 64)),
    # per-layer schedules
    "per_layer_rope": "build each layer from its own type: Gemma 3's layer i is sliding (rope "
                      "base 1e4, the causal window) unless (i + 1) % 6 == 0, then full (base "
                      "1e6, linear x8 on the 4B-27B checkpoints); transformers keys "
                      "rope_parameters by layer type ('sliding_attention', 'full_attention'; "
                      "the older rope_local_base_freq is the sliding base), keras_hub's "
                      "Gemma3Backbone fixes both bases and the i % 6 < 5 pattern; a port with "
                      "one rope_theta, or the pattern off by one, agrees on the layers it does "
                      "not mix up and is wrong on every other (compare the evidence per layer)",
    "nope_placement": "rotate exactly the layers the target rotates: transformers' and "
                      "mlx-lm's SmolLM3 (and Llama 4) hold no_rope_layers as one flag per "
                      "layer, 1 where the layer uses RoPE and 0 where it does not (SmolLM3's "
                      "default [1, 1, 1, 0, ...]: every fourth layer NoPE), so a port reading "
                      "the list as the NoPE layers rotates the wrong three layers of four; one "
                      "rotating every layer is wrong on the fourth",
    # chunked attention and temperature
    "chunk_mask": "build the chunk mask from absolute positions, blocks p // C == s // C ANDed "
                  "with the causal mask (Llama 4 Scout: C = 8192): a sliding window of C keys "
                  "agrees only on each block's last query; a system that counts blocks from "
                  "its own sequence index (transformers' create_chunked_causal_mask: q_idx, "
                  "kv_idx from the cache length, not position_ids) agrees while positions "
                  "and indices coincide (generation from position 0) and parts as soon as "
                  "positions are offset (packed or continued inputs): hand it the positions "
                  "through its cache, or start its chunks at the offset",
    "attention_temperature": "temper q at its absolute position p with log1p(floor((p + 1) / "
                             "floor_scale)) * attn_scale + 1: at Llama 4's 8192 and 0.1 the "
                             "multiplier is 1 through position 8190 and {t1:.4f} from 8191 "
                             "({t2:.4f} from 16383); floor(p / floor_scale) keeps 1 at 8191, its "
                             "{d:.4f} step one position late; transformers' Llama 4 counts p "
                             "as arange(T) + cache length, not position_ids, so positions "
                             "handed in without a cache read as 0..T-1".format(
                                 t1=temperature([8191], 8192, 0.1)[0],
                                 t2=temperature([16383], 8192, 0.1)[0],
                                 d=temperature([8191], 8192, 0.1)[0] - 1),
    # multi-head latent attention
    "mla_rope_slice": "split each query head as [nope | rope] and rotate the LAST "
                      "qk_rope_head_dim dims, with the key's rope slice one head (x W_kr, the "
                      "rows after the latent in kv_a_proj_with_mqa) broadcast to every head; "
                      "repack with conformance.convert.mla (from_deepseek_v3 then "
                      "to_deepseek_v3(w, 'materialised') for transformers' kv_b_proj, per "
                      "head [k_nope | v], or 'absorbed' for mlx-lm's embed_q / unembed_out; "
                      "a rope_interleave=False checkpoint into an interleaved-only system "
                      "through rope_rows(state, dims, 'interleaved')); "
                      "DeepSeek-V3's YaRN puts (0.1 ln 40 + 1)^2 = {m2:.4f} on the softmax "
                      "scale with cos and sin at 1; the materialised and absorbed forms agree "
                      "to rounding, so a difference between them is a packing, not the "
                      "form".format(m2=yarn_get_mscale(40) ** 2),
    # T5's relative bias
    "relative_bias_buckets": "bucket key - query (T5's memory_position - context_position) by "
                             "the rule the checkpoint was trained with: at 32 buckets and max "
                             "distance 128 the key one after the query is bucket {a}, one "
                             "before it bucket {b}, 20 before it {c} (encoder) or {d} "
                             "(decoder); a port with the sign flipped swaps the halves ({a} "
                             "for {b}), one reading the encoder as the decoder (is_decoder) "
                             "puts every key after the query in bucket 0 and re-bins the keys "
                             "before it; keras_hub's T5MultiHeadAttention fixes 32 / 128, "
                             "transformers' T5Config sets relative_attention_num_buckets and "
                             "relative_attention_max_distance".format(
                                 a=relative_bucket(1, 32, 128, True),
                                 b=relative_bucket(-1, 32, 128, True),
                                 c=relative_bucket(-20, 32, 128, True),
                                 d=relative_bucket(-20, 32, 128, False)),
    # gated head outputs
    "gate_packing": "repack q_proj with conformance.convert.gate (unpack(rows, H, d, "
                    "'<source>') then pack(q, g, '<target>')): Qwen3-Next's q_proj holds "
                    "[q_h | g_h] head by head (AFMoE keeps the gate in a gate_proj of its "
                    "own), so chunking the whole projection in halves "
                    "gives every head other rows for its query and its gate and is wrong at "
                    "any prompt, while one head hides it (the packings agree at H = 1); "
                    "the bias packs like the rows, and transformers stores q_norm / k_norm "
                    "as scale - 1 (Qwen3NextRMSNorm multiplies by 1 + weight) where mlx-lm "
                    "stores the scale",
}
GENERIC = "read both cells' evidence"
GROUPED = {"keras.gqa": ("keras", {"grouped": True})}  # typed system -> (format, options)


@dataclass(frozen=True)
class AxisDifference:
    axis: str
    title: str
    a: str  # A's value (the full ledger value)
    b: str
    a_evidence: str
    b_evidence: str
    advice: str
    link: str  # the axis's evidence in conventions.md


@dataclass(frozen=True)
class Reading:
    """What the typed numbers mean on one side (case/typed_numbers.Meaning)."""

    system: str  # the ledger system id
    call: str
    per_head: int | None
    total: int | None
    parameters: int | None
    note: str = ""


@dataclass(frozen=True)
class Porting:
    a: str
    b: str
    differences: tuple[AxisDifference, ...]
    agreeing: int  # axes where both have the same word
    readings: tuple[Reading, ...] = ()
    snippet: str = ""
    snippet_note: str = ""
    typed: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


class PortingError(ValueError):
    """A system name or a typed call that cannot be read (the message says the fix)."""


def resolve(ledger: dict, name: str) -> str:
    """A ledger system id from a runner name or a system ('torch.nn.MultiheadAttention':
    its first runner)."""
    systems = ledger.get("systems", [])
    ids = [str(s["id"]) for s in systems]
    if name in ids:
        return name
    by_system = [str(s["id"]) for s in systems if s.get("system") == name]
    if by_system:
        return by_system[0]
    raise PortingError(f"no system or runner {name!r} in the ledger; known: {', '.join(ids)}")


def differences(ledger: dict, a: str, b: str) -> tuple[list[AxisDifference], int]:
    """The axes where A's and B's words differ (a silent cell on one side only counts:
    one side has the feature, the other not), and the number that agree."""
    cells = cells_by_key(ledger)
    out, same = [], 0
    for axis in ledger.get("axes", []):
        aid = str(axis["id"])
        ca, cb = cells.get((a, aid), {}), cells.get((b, aid), {})
        va, vb = str(ca.get("value", "")), str(cb.get("value", ""))
        if (not va or va in SILENT) and (not vb or vb in SILENT):
            continue
        if ledger_word(va) == ledger_word(vb):
            same += 1
            continue
        out.append(AxisDifference(aid, str(axis.get("title", aid)), va, vb,
                                  str(ca.get("evidence", "")), str(cb.get("evidence", "")),
                                  ADVICE.get(aid, GENERIC), evidence_link(aid)))
    return out, same


def parse_typed(text: str, features: int | None, prefer: tuple[str, ...] = ()) -> dict:
    """'MultiHeadAttention(num_heads=4, key_dim=784)' -> a typed mapping (case/typed_numbers)
    of the vocabulary whose constructor ends with that name (one of `prefer` first);
    `features`: the input width, for systems that infer it."""
    from conformance.case.typed_numbers import VOCABULARIES

    try:
        call = ast.parse(text.strip(), mode="eval").body
        if not isinstance(call, ast.Call):
            raise SyntaxError("not a call")
        name = ast.unparse(call.func)
        positional = [ast.literal_eval(v) for v in call.args]
        named = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError) as exc:
        raise PortingError(f"--typed {text!r}: not a call with literal numbers ({exc}); "
                           "write e.g. \"MultiHeadAttention(num_heads=4, key_dim=784)\"")
    found = [v for v in VOCABULARIES if v.ctor == name or v.ctor.endswith("." + name)]
    found.sort(key=lambda v: v.key not in prefer)
    if not found:
        raise PortingError(f"--typed: no system calls {name!r}; known: "
                           + ", ".join(v.ctor for v in VOCABULARIES))
    vocab = found[0]
    args = [w.name for w in vocab.words if w.arg]
    typed = {"system": vocab.key, **dict(zip(args, positional)), **named}
    inferred = [w.name for w in vocab.words if not w.arg]
    if inferred and features is not None:
        typed[inferred[0]] = features
    return typed


def readings(typed: dict, sides: dict[str, str]) -> list[Reading]:
    """What `typed` means for each side (`sides`: ledger id -> typed system)."""
    from conformance.case.typed_numbers import TypedError, meaning

    try:
        by = {m.system: m for m in meaning(typed)}
    except TypedError as exc:
        raise PortingError(f"--typed: {exc}")
    return [Reading(sid, m.call, m.per_head, m.total, m.parameters, m.note)
            for sid, ts in sides.items() if (m := by.get(ts)) is not None]


def typed_systems() -> dict[str, str]:
    """Runner name -> its typed-numbers vocabulary (the runner class's `typed_system`)."""
    from conformance.runners import all_runners

    return {r.name: r.typed_system for r in all_runners()}


def weight_format(typed_system: str) -> tuple[str, dict] | None:
    """The conformance.convert format of a system's weights, or None when it has none."""
    from conformance.convert import FORMATS

    if typed_system in GROUPED:
        return GROUPED[typed_system]
    name = typed_system.removeprefix("hf.")
    return (name, {}) if name in FORMATS else None


def snippet(src: tuple[str, dict], dst: tuple[str, dict], heads: int, features: int,
            head_dim: int, bias: bool) -> str:
    """Python that builds weights of the given sizes in A's layout and converts them to
    B's (runs as it is; a layout that cannot hold the sizes raises ConversionError)."""
    b = ("bq=w(H, D), bk=w(H, D), bv=w(H, D), bo=w(E)" if bias
         else "bq=None, bk=None, bv=None, bo=None")
    opts = "".join(f", {k}={v!r}" for k, v in dst[1].items())
    return "\n".join([
        "import numpy as np",
        "from conformance.convert import convert, to_format",
        "from conformance.oracle.canonical import CanonicalWeights",
        "",
        f"H, E, D = {heads}, {features}, {head_dim}  # heads, features, width per head",
        "rng = np.random.default_rng(0)",
        "def w(*shape):",
        "    return rng.standard_normal(shape).astype(np.float32)",
        "weights = CanonicalWeights(wq=w(H, E, D), wk=w(H, E, D), wv=w(H, E, D), "
        f"wo=w(H, D, E), {b})",
        f"state = to_format(weights, {src[0]!r})  # stands for your {src[0]} weights",
        f"native = convert(state, {src[0]!r}, {dst[0]!r}, num_heads=H{opts})",
        "for name, array in native.items():",
        "    print(name, array.shape)",
        ""])


DEFAULT_SIZES = (2, 8, 4, True)  # heads, features, width per head, bias: without --typed


def porting(ledger: dict, a: str, b: str, typed_text: str = "", features: int | None = None,
            systems: dict[str, str] | None = None) -> Porting:
    """The porting guide from A to B (names: runners or systems).  `systems`: runner name
    -> typed system (default: the registry's)."""
    from conformance.case.typed_numbers import derive

    a, b = resolve(ledger, a), resolve(ledger, b)
    found, same = differences(ledger, a, b)
    systems = typed_systems() if systems is None else systems
    sides = {s: systems.get(s, "") for s in (a, b)}
    typed, read = {}, []
    heads, width, per_head, bias = DEFAULT_SIZES
    if typed_text:
        typed = parse_typed(typed_text, features, tuple(sides.values()))
        read = readings(typed, {k: v for k, v in sides.items() if v})
        c = derive(typed)
        heads, width, bias = c["num_heads"], c["query_features"], c["bias"]
        per_head = read[0].per_head if read and read[0].per_head else c["qk_head_dim"]
    fa, fb = (weight_format(sides[s]) for s in (a, b))
    code, note = "", ""
    if fa and fb:
        code = snippet(fa, fb, heads, width, per_head, bias)
    else:
        missing = [s for s, f in ((a, fa), (b, fb)) if f is None]
        note = (f"no weight converter for {', '.join(missing)} (conformance.convert formats: "
                "torch, keras, flax, matlab, bert, gpt2, t5, llama, marian)")
    if fa and fb:
        how = (f"convert the weights: conformance.convert.convert(state, {fa[0]!r}, {fb[0]!r}, "
               "num_heads=H) (snippet below)")
        if "keras" in (fa[0], fb[0]):
            how += "; to_keras transposes and reshapes W_q to (E, H, d_k)"
        found = [replace(d, advice=how) if d.axis == "weight_layout" else d for d in found]
    return Porting(a, b, tuple(found), same, tuple(read), code, note, typed)
