"""Command line: `python -m conformance COMMAND` (or `attention-conformance COMMAND`).

The matrix itself runs under pytest (`python -m pytest`); these commands are
the tools around it:
  validate [FILE or DIR ...]  check case files (every file, each reported), run nothing
  list                        each case and the native call each runner would make
  show CASE                   one case: its configuration, each runner's call or
                              refusal, parameter counts, figures of the last run
  new                         write a commented case file (also from typed numbers:
                              new --from keras num_heads=4 key_dim=784 features=3136)
  report                      re-render every report from reports/results.json
  check-reports               compare reports with the committed ones (figures by
                              their rule, everything else exactly)
  merge DIR... --out DIR      merge the shards of a --shard I/N run into one run's reports
  drift [--bisect]            probe past releases in uv envs: which release changed
                              which convention (reports/drift.md, drift.json)
  probe TARGET --kind KIND    your attention, judged: its ledger column, its rows and
                              the nearest known system (runs your code; docs/probe.md)
  diff A B                    what differs between two systems or runners and what to do
                              (--typed "MultiHeadAttention(num_heads=4, key_dim=784)"
                              --features 3136: the numbers on both sides; --json)
Nothing here imports a framework until a command needs one (--help never does).
"""
from __future__ import annotations

import argparse
import os
import sys

from conformance.paths import CASES_DIR, REPORTS_DIR
from conformance.cli.text_safety import say  # untrusted text: shown, not obeyed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attention-conformance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("validate", help="check case files (files or folders), run nothing")
    p.add_argument("paths", nargs="*", metavar="FILE_OR_DIR",
                   help=f"case files or folders of them (default: {CASES_DIR})")
    p.add_argument("--json", action="store_true", help="one JSON report on stdout")
    p = sub.add_parser("list", help="each case and what each runner makes of it")
    p.add_argument("--cases-dir", default=str(CASES_DIR))
    p = sub.add_parser("show", help="one case: configuration, calls, counts, last figures")
    p.add_argument("case", metavar="CASE")
    p.add_argument("--cases-dir", default=str(CASES_DIR))
    p.add_argument("--results", default=str(REPORTS_DIR / "results.json"),
                   help="the results.json to read figures from (default: reports/)")
    _new_parser(sub)
    p = sub.add_parser("report", help="re-render every report from results.json, run nothing")
    p.add_argument("--results", default=str(REPORTS_DIR / "results.json"))
    p.add_argument("--out", default=None, help="report folder (default: the results' folder)")
    p = sub.add_parser("check-reports",
                       help="fail if reports changed (figures by their rule, the rest exactly)")
    p.add_argument("reports", nargs="?", default=str(REPORTS_DIR))
    p.add_argument("--against", help="another report folder (default: the committed version)")
    p.add_argument("--rev", default="HEAD", help="git revision to compare with (default HEAD)")
    p = sub.add_parser("merge", help="merge shard report folders (--shard I/N) into one run's")
    p.add_argument("shards", nargs="+", metavar="DIR", help="each shard's --report-dir")
    p.add_argument("--out", required=True, help="the merged report folder")
    p.add_argument("--cases-dir", default=str(CASES_DIR),
                   help="the shards' --cases-dir (default: cases/)")
    from conformance.cli.version_drift import add_parser
    add_parser(sub, REPORTS_DIR)
    _diff_parser(sub)
    from conformance.cli.probe import add_parser as add_probe
    add_probe(sub)
    return parser


def _diff_parser(sub) -> None:
    p = sub.add_parser("diff", help="what differs between two systems, and what to do")
    p.add_argument("a", metavar="A", help="a runner (torch.mha) or a system "
                   "(torch.nn.MultiheadAttention)")
    p.add_argument("b", metavar="B")
    p.add_argument("--typed", help='a call in one system\'s words, e.g. '
                   '"MultiHeadAttention(num_heads=4, key_dim=784)"')
    p.add_argument("--features", type=int, help="the input width, for systems that infer it")
    p.add_argument("--ledger", default=str(REPORTS_DIR / "conventions.json"),
                   help="the conventions ledger to read (default: reports/)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _new_parser(sub) -> None:
    p = sub.add_parser(
        "new", help="write a commented case file",
        description="Write a commented case file that validates. With --from, the sizes come "
        "from what a user typed: keras num_heads=4 key_dim=784 features=3136 [value_dim= "
        "output_shape=]; torch embed_dim=3136 num_heads=4 [kdim= vdim=]; matlab num_heads=4 "
        "num_key_channels=784 input_features=3136 [num_value_channels= output_size=].")
    p.add_argument("--from", dest="source", choices=("keras", "torch", "matlab"))
    p.add_argument("numbers", nargs="*", metavar="NAME=VALUE")
    p.add_argument("--id", dest="case_id", help="the case id (default: from the numbers)")
    p.add_argument("--output", help="file to write (default: cases/<id>.yaml)")
    p.add_argument("--cases-dir", default=str(CASES_DIR))


def _command(name: str):
    if name == "drift":
        from conformance.cli import version_drift as module
    elif name in ("report", "check-reports", "merge"):
        from conformance.cli import reports as module
    elif name == "diff":
        from conformance.cli import diff as module
    elif name == "probe":
        from conformance.cli import probe as module
    else:
        from conformance.cli import cases as module
    return getattr(module, {"list": "list_cases"}.get(name, name.replace("-", "_")))


def main(argv: list[str] | None = None) -> int:
    from conformance.datafile import DataFileError
    from conformance.settings import SettingError

    args = _parser().parse_args(argv)
    try:
        code = _command(args.command)(args)
        sys.stdout.flush()
        return code
    except (DataFileError, SettingError) as exc:  # a bad file or variable: one clear line
        say(f"{args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `... | head`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
