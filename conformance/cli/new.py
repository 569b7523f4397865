"""`new`: write a commented case file, blank or from the numbers a user typed.

    new --from keras  num_heads=4 key_dim=784 features=3136 [value_dim= output_shape=]
    new --from torch  embed_dim=3136 num_heads=4 [kdim= vdim=]
    new --from matlab num_heads=4 num_key_channels=784 input_features=3136
                      [num_value_channels= output_size=]
The written file is validated before the command reports success.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from conformance.cli.text_safety import say

# framework -> (required names, optional names)
TYPED = {
    "keras": (("num_heads", "key_dim", "features"), ("value_dim", "output_shape")),
    "torch": (("embed_dim", "num_heads"), ("kdim", "vdim")),
    "matlab": (("num_heads", "num_key_channels", "input_features"),
               ("num_value_channels", "output_size")),
}
CALLS = {"keras": "keras.layers.MultiHeadAttention", "torch": "torch.nn.MultiheadAttention",
         "matlab": "selfAttentionLayer"}


class TypedError(ValueError):
    pass


def parse_numbers(source: str, items: list[str]) -> dict[str, int]:
    required, optional = TYPED[source]
    numbers = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in required + optional:
            raise TypedError(f"{item!r}: expected NAME=VALUE with NAME one of "
                             f"{', '.join(required + optional)}")
        try:
            numbers[name] = int(value)
        except ValueError:
            raise TypedError(f"{name}={value!r}: a positive integer, please") from None
        if numbers[name] <= 0:
            raise TypedError(f"{name}={value}: a positive integer, please")
    missing = [n for n in required if n not in numbers]
    if missing:
        raise TypedError(f"--from {source} needs {', '.join(missing)}")
    return numbers


def _per_head(total: int, heads: int, what: str) -> int:
    if total % heads:
        raise TypedError(f"{what}={total} is not divisible by num_heads={heads}")
    return total // heads


def attention_from(source: str, n: dict[str, int]) -> tuple[dict, str]:
    """(the case's attention mapping, what it means in words)."""
    h = n["num_heads"]
    if source == "keras":
        dv = n.get("value_dim", n["key_dim"])
        att = {"num_heads": h, "query_features": n["features"], "qk_head_dim": n["key_dim"],
               "v_head_dim": dv, "output_features": n.get("output_shape", n["features"])}
        return att, "Keras key_dim / value_dim are per head"
    if source == "torch":
        e = n["embed_dim"]
        d = _per_head(e, h, "embed_dim")
        att = {"num_heads": h, "query_features": e, "key_features": n.get("kdim", e),
               "value_features": n.get("vdim", e), "qk_head_dim": d, "v_head_dim": d}
        return att, "torch: per-head width is always embed_dim / num_heads"
    dk = _per_head(n["num_key_channels"], h, "num_key_channels")
    dv = _per_head(n.get("num_value_channels", n["num_key_channels"]), h, "num_value_channels")
    att = {"num_heads": h, "query_features": n["input_features"], "qk_head_dim": dk,
           "v_head_dim": dv, "output_features": n.get("output_size", n["input_features"])}
    return att, "MATLAB NumKeyChannels / NumValueChannels are totals over heads"


def _flow(mapping: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in mapping.items()) + "}"


def scaffold(case_id: str, source: str | None, numbers: dict, attention: dict,
             note: str) -> str:
    lines = ["# A case file (schema: conformance/case/case.schema.json). Check it with",
             "#   python -m conformance validate <this file>",
             f"# and run it with: python -m pytest cases --case {case_id}",
             "cases:",
             f"  - id: \"{case_id}\"   # lowercase slug, unique across cases/ (quoted: "
             "0 or true would not be a string)"]
    call = (f"{CALLS[source]}(" + ", ".join(f"{k}={v}" for k, v in numbers.items()) + ")"
            if source else "a new attention configuration")
    lines.append(f"    title: \"{call}\"")
    lines.append("    # source: \"https://...\"   # the question or issue it comes from")
    if source:
        lines.append(f"    typed: {_flow(numbers)}   # the numbers typed in {source}")
        lines.append(f"    # {note}")
    lines += [f"    attention: {_flow(attention)}",
              "    # optional: num_kv_heads, key_features, value_features, output_features, "
              "bias",
              "    inputs: {batch: 1, query_len: 4, self_attention: true}   # dtype, seed, "
              "key_len",
              "    # mask: {causal: upper_left}   # or key_padding: [3], attn_mask, "
              "masked_rows",
              "    # expect: {parameters: N}   # pin the analytic count the question expects",
              ""]
    return "\n".join(lines)


def _case_id_problem(case_id: str) -> str | None:
    """Why `case_id` is not a case id (the loader's rule, datafile.SLUG), else None: an
    id names the file, so `../x` or `a/b` would write outside the cases folder."""
    from conformance.datafile import MAX_ID, SLUG

    if SLUG.fullmatch(case_id) and len(case_id) <= MAX_ID:
        return None
    return (f"id {case_id!r} is not a case id: a lowercase slug (a-z, 0-9, '.', "
            f"'_', '-', starting with a letter or digit) of at most {MAX_ID} characters; "
            "choose --id")


def _target(args, case_id: str) -> tuple[Path, str | None]:
    """The file to write and why it cannot be written (None: it can).  The default,
    <cases-dir>/<id>.yaml, must sit directly in the cases folder; an existing entry
    of that name (a file, or a symlink even when dangling) is never replaced."""
    if args.output:
        path = Path(args.output)
    else:
        folder = Path(args.cases_dir)
        path = folder / f"{case_id}.yaml"
        if folder.is_dir() and path.parent.resolve() != folder.resolve():
            return path, f"{path} is not directly in {folder}; choose --id"
    if os.path.lexists(path):
        what = "a symlink" if path.is_symlink() else "exists"
        return path, f"{path}: {what}, not replaced; choose --id or --output"
    return path, None


def _write_new(path: Path, text: str) -> None:
    """Create `path` and write `text`: O_EXCL (never an existing file) and O_NOFOLLOW
    (never through a symlink, dangling or not, made after the check)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def _numbers(args) -> tuple[dict, dict, str]:
    """(the typed numbers, the attention mapping, its note); TypedError when bad."""
    numbers = parse_numbers(args.source, args.numbers) if args.source else {}
    if args.numbers and not args.source:
        raise TypedError("NAME=VALUE numbers need --from keras|torch|matlab")
    attention, note = (attention_from(args.source, numbers) if args.source
                       else ({"num_heads": 4, "query_features": 16}, ""))
    return numbers, attention, note


def new(args) -> int:
    from conformance.case.loader import CaseError, load_cases_report, load_file

    try:
        numbers, attention, note = _numbers(args)
    except TypedError as exc:
        say(f"new: {exc}", file=sys.stderr)
        return 2
    case_id = args.case_id or (f"{args.source}-" + "-".join(str(v) for v in numbers.values())
                               if args.source else "new-case")
    problem = _case_id_problem(case_id)  # an id names the file: checked first
    path, problem = (None, problem) if problem else _target(args, case_id)
    if problem:
        say(f"new: {problem}", file=sys.stderr)
        return 1
    if Path(args.cases_dir).is_dir() and case_id in {
            c.id for c in load_cases_report(args.cases_dir)[0]}:
        say(f"new: id {case_id!r} is taken in {args.cases_dir}; choose --id", file=sys.stderr)
        return 1
    try:
        _write_new(path, scaffold(case_id, args.source, numbers, attention, note))
    except OSError as exc:
        say(f"new: cannot write {path}: {exc.strerror}; choose --id or --output",
            file=sys.stderr)
        return 1
    try:
        load_file(path)
    except CaseError as exc:  # the scaffold must validate; never leave a bad file
        path.unlink()
        say(f"new: the scaffold did not validate ({exc}); nothing written", file=sys.stderr)
        return 1
    say(f"wrote {path} (id {case_id}); next: python -m conformance validate {path}")
    return 0
