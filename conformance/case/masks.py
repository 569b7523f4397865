"""Which query rows a case's mask leaves with no key to attend, read from the case alone.

A fully masked row is a property of the mask, not a declaration: per-item zero rows of
an `attn_mask` matrix, `causal: lower_right` with query_len > key_len (its first rows
see no key), a key padding length of 0 (the item is fully padded) and `masked_rows`
(a way to ask for such rows) all make one.  Judging reads the exact rows from the
oracle (canonical.py, which also sees what a random mask drew); this module answers
"does the case have one?" without NumPy, so the loader and the reports may ask it
before anything is allocated.  The cost is O(batch) plus the size of an explicit
matrix (bounded by the case file's size).
"""
from __future__ import annotations


def _visible_keys(causal: str, row: int, query_len: int, key_len: int) -> int:
    """How many leading keys query `row` may see under the causal part alone."""
    if causal == "none":
        return key_len
    offset = 0 if causal == "upper_left" else key_len - query_len
    return max(0, min(key_len, row + offset + 1))


def _has_empty_row(mask, valid: int, rows, query_len: int, key_len: int) -> bool:
    """One batch item: `valid` keys after padding, `rows` its 0/1 matrix (or None)."""
    if mask.masked_rows or valid == 0 or _visible_keys(mask.causal, 0, query_len, key_len) == 0:
        return True  # row 0 sees the fewest keys under a causal mask
    if rows is None:
        return False
    for t, row in enumerate(rows):
        seen = min(valid, _visible_keys(mask.causal, t, query_len, key_len))
        if not any(row[:seen]):
            return True
    return False


def has_fully_masked_rows(case) -> bool:
    """Some query row of some batch item may attend to no key, by the case's
    deterministic mask parts (a random mask's draws are the oracle's to find)."""
    i, m = case.inputs, case.mask
    matrix = m.attn_mask_matrix
    if matrix is not None and isinstance(matrix[0][0], tuple):  # (B, T, S): item by item
        items = [(i.key_len if m.key_padding is None else m.key_padding[b], matrix[b])
                 for b in range(i.batch)]
    else:  # one (T, S) matrix or none: items differ by their padding length alone
        lengths = {i.key_len} if m.key_padding is None else set(m.key_padding)
        items = [(valid, matrix) for valid in sorted(lengths)]
    return any(_has_empty_row(m, valid, rows, i.query_len, i.key_len) for valid, rows in items)
