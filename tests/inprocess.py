"""`python -m conformance ...` called in this process: what a subprocess would return
(exit code, stdout, stderr) without a second interpreter and its imports (~2 s each on
2 cores).  Tests that prove the command line itself starts (`python -m conformance`)
keep a real subprocess; the rest judge the command's work and use this."""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str) -> CliResult:
    """conformance.__main__.main(args), its output captured; SystemExit (argparse) is a code.
    As in a fresh process, the figures follow CONFORMANCE_FIGURES, not the setting the
    session's plugin fixed for itself (plots.configure)."""
    from conformance.__main__ import main
    from conformance.report import plots

    out, err = io.StringIO(), io.StringIO()
    session = plots.configure(None)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        finally:
            plots.configure(session)
    return CliResult(int(code or 0), out.getvalue(), err.getvalue())
