"""`python -m conformance probe TARGET --kind KIND [--array LIB] [--name NAME] [--out DIR]`:
your attention, judged.

Runs the matrix of cases/ with TARGET as its one runner (the same pytest run as `python -m
pytest cases --attention TARGET --attention-kind KIND --runner NAME`), so every ledger axis
is asked of it and every case its kind can express is a row, then writes into DIR the run's
conventions.json and results.json (the suite's schemas, its details.md and case pages) and
index.md: each axis with the known systems that share it, the nearest known system with the
porting guide against it and against torch.sdpa, and how many cases match the oracle.

TARGET runs your code by design (it is imported and called); every file the suite reads
stays untrusted data.  A target that fails to import, raises or returns the wrong shape on a
first small call is one line naming it (exit 2), never a traceback.
"""
from __future__ import annotations

from conformance.cli.text_safety import say  # untrusted text: shown, not obeyed
import os
import sys
from pathlib import Path


def probe(args) -> int:
    from conformance.runners.target import TargetError, TargetSpec, check_spec
    from conformance.runners.target.checks import first_call

    try:
        spec = check_spec(TargetSpec(args.target, args.kind, args.array, args.name or "",
                                     os.getcwd()))
        first_call(spec)
    except TargetError as exc:
        say(f"probe: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out or f"attention-report-{spec.runner_name()}").resolve()
    from conformance.report.staging import check_writable

    check_writable(out, "--out")  # a file, or a folder that cannot be written: one line
    code = run_matrix(spec, out, quiet=not args.verbose)
    index = out / "index.md"
    if not index.is_file():
        say(f"probe: the run ended (pytest exit {code}) without writing {index}",
              file=sys.stderr)
        return 1
    from conformance.report.target import judge_files, sentences

    j = judge_files(out, spec.runner_name(), spec.target, spec.kind)
    for line in sentences(j):
        say(line.replace("**", ""))
    say(f"probe: wrote {out / 'index.md'}, {out / 'conventions.json'}, "
          f"{out / 'results.json'}")
    return 0


def pytest_arguments(spec, out: Path, quiet: bool = True) -> list[str]:
    """The pytest run of the probe: the shipped cases, the target alone, reports in `out`."""
    from conformance.paths import CASES_DIR, ROOT

    return [str(CASES_DIR), "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
            "-p", "no:cacheprovider", "-q" if quiet else "-v", "--no-header",
            "-o", "console_output_style=classic",
            "--attention", spec.target, "--attention-kind", spec.kind,
            "--attention-array", spec.array, "--attention-name", spec.runner_name(),
            "--runner", spec.runner_name(), "--report-dir", str(out)]


def run_matrix(spec, out: Path, quiet: bool = True) -> int:
    """pytest in this process (the frameworks' imports are paid once); its exit status (1
    when a case does not match the oracle: that is a finding, not an error)."""
    import pytest

    out.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("CONFORMANCE_FIGURES")
    os.environ.setdefault("CONFORMANCE_FIGURES", "0")  # no plots: the judgement is text
    try:
        return int(pytest.main(pytest_arguments(spec, out, quiet)))
    finally:
        if old is None:
            os.environ.pop("CONFORMANCE_FIGURES", None)


def add_parser(sub) -> None:
    p = sub.add_parser("probe", help="your attention, judged: its ledger column, its matrix "
                       "rows and the nearest known system (runs your code)")
    p.add_argument("target", metavar="TARGET", help="module:function (sdpa), module:Class "
                   "(torch-mha), a .onnx file (onnx) or a transformers model_type (hf)")
    p.add_argument("--kind", required=True, choices=("sdpa", "torch-mha", "onnx", "hf"))
    p.add_argument("--array", default="numpy", choices=("numpy", "torch", "jax", "mlx"),
                   help="the arrays an sdpa target takes (default numpy)")
    p.add_argument("--name", help="its column in the reports (default target.<function>)")
    p.add_argument("--out", help="the report folder (default attention-report-<name>)")
    p.add_argument("--verbose", action="store_true", help="pytest's item lines")
