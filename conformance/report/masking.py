"""What the CPU moves, and how check-reports leaves it out.

A report holds two kinds of content.  What belongs to the systems (outcomes,
within-tolerance verdicts, counts, names, shapes, behaviours, ledger words,
refusal kinds) is the same on every machine.  What CPU kernels move is not:
on an AVX-512 machine against the AVX2 one that made the committed reports,
a float32 max_rel_error moved 25x (it is driven by the smallest reference
element), bfloat16 outputs moved in their last bit, and TensorFlow named its
einsum kernel `__MklEinsum` instead of `Einsum` in an error message.  So:

- a *figure* (an error magnitude, a digest value, an evidence distance) is
  display only: check-reports compares only its KIND (missing, a number, NaN,
  +inf, -inf).  Whether it is within the row's tolerance is the row's outcome
  and failures, which are compared exactly.
- a *text* that quotes figures or framework messages (a row's reason and
  notes, ledger evidence, every line of index.md, index.html with its
  embedded JSON, cases/*.md, conventions.md) is compared after `mask`:
  figures, addresses, TensorFlow node annotations, graph node names, absolute
  paths and numeric counter suffixes become placeholders; the exception type
  and the rest of the message stay.
- the *element counts* of a tolerance verdict ("80 of 100 values differ",
  "3 of 12 values are NaN/inf") are figures too: how many elements sit beyond
  the tolerance, and how many finite ones are compared where a NaN spreads,
  move with the kernels (OpenVINO's NaN-spread weights: 80 of 100 on
  AVX-512, 60 of 80 under oneDNN SSE4.1).  Which tensor failed and how
  (failure_kinds, the words of the failure) stay exact.
- a figure *cut* by a page's length limit ("deterministic=True 1.…", from
  "1.0e-07", in index.html's ledger evidence) is a figure: the digits before
  the ellipsis are masked.

One function per rule, used for every file, so every rendered file masks the
same fields.
"""
from __future__ import annotations

import math
import re

# A figure: a decimal or scientific number, or a lone 0 (fmt writes a zero figure as "0").
# Integers other than 0 (parameter counts, shapes) are never figures; element counts only
# in a tolerance verdict's phrase (ELEMENT_COUNT).
FIGURE = re.compile(r"(?<![\w.])-?(?:\d+\.\d+(?:e[+-]?\d+)?|\d+e[+-]?\d+|0)(?![\w.])")
# A figure cut by a length limit: digits (with a point or an exponent begun) right before
# the ellipsis the cut appends.  Only the cut form: the whole text is compared elsewhere.
CUT_FIGURE = re.compile(r"(?<![\w.])-?\d+(?:\.\d*)?(?:e[+-]?\d*)?(?=…)")
# How many elements of a tensor a tolerance verdict counts (compare/agreement.py).
ELEMENT_COUNT = re.compile(r"\b\d+ of \d+ (values|weights)\b")
# TensorFlow's op annotation, e.g. {{function_node __wrapped__Einsum_N_2_device_/job:...}}:
# the kernel's name depends on whether oneDNN rewrote the op (__MklEinsum on AVX-512).
TF_NODE = re.compile(r"\{\{[^{}]*\}\}")
# A graph node's name, e.g. onnxruntime's "Name:'node_scaled_dot_product_attention'".
NODE_NAME = re.compile(r"""(\bname\s*[:=]\s*)(['"])[^'"]*\2""", re.IGNORECASE)
ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
# An absolute path of two or more parts (site-packages, temporary files).
PATH = re.compile(r"(?<![\w.:/])/(?:[\w.+@-]+/)+[\w.+@-]*")
# A numeric counter suffix of a generated name: val_0, tensor_12, __wrapped_N_2.
COUNTER = re.compile(r"(?<=_)\d+\b")
QUOTE_LIMIT = 300  # characters of a framework message a cell or reason quotes
MASKS = ((TF_NODE, "{{…}}"), (NODE_NAME, r"\1\2…\2"), (PATH, "/…"), (ADDRESS, "0x…"),
         (ELEMENT_COUNT, r"‹n› of ‹n› \1"), (CUT_FIGURE, "‹f›"), (FIGURE, "‹f›"),
         (COUNTER, "#"))


def mask(text: str) -> str:
    """`text` with every CPU- or run-dependent detail replaced by a placeholder."""
    for pattern, placeholder in MASKS:
        text = pattern.sub(placeholder, text)
    return text


def texts_agree(a, b) -> bool:
    """Two texts (or lists of texts) equal once masked.  A quoted framework message is cut
    at QUOTE_LIMIT characters (conventions/probes/probing.py), so when a masked detail
    changes length the cut moves: two texts both longer than the limit agree when one
    masked text is a prefix of the other (TensorFlow's `__MklEinsum` against `Einsum`)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(texts_agree(x, y) for x, y in zip(a, b))
    if not (isinstance(a, str) and isinstance(b, str)):
        return a == b
    if a == b:
        return True
    ma, mb = mask(a), mask(b)
    if ma == mb:
        return True
    short, long_ = sorted((ma, mb), key=len)
    return min(len(a), len(b)) > QUOTE_LIMIT and long_.startswith(short)


def kind(value) -> object:
    """What of a figure is compared: missing, a number, or which non-finite value.
    (Strict JSON writes an infinity as the string 'inf' / '-inf'.)"""
    if value is None:
        return None
    if isinstance(value, str):
        return value if value in ("inf", "-inf", "nan") else ("text", value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ("other", value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return "number"


def figures_agree(a, b) -> bool:
    """The figure rule: the same kind (both missing, both numbers, or the same
    non-finite value); the value itself is display only."""
    return kind(a) == kind(b)


def structures_agree(a, b) -> bool:
    """Exact, except that any float inside (a figure: extras' deltas, digest values) is
    compared by its kind.  Integers (counts, shapes) and strings stay exact."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(structures_agree(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(structures_agree(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return figures_agree(a, b)
    return a == b
