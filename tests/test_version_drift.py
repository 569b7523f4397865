"""The drift command's bisect, outcomes and report (conformance/history/).

The bisect test is offline: it writes four wheels of a toy dependency `toyattn`
(1.0, 1.1, 1.2, 1.3; 1.2 changes its fully-masked-row convention), installs them with
uv from a --find-links folder, asks the ledger's fully_masked_row probe of the toy's
runner (tests/drift_toy.py) in each env and checks that the bisect names 1.2 with
evidence on both sides.  Needs uv (the `drift` extra); without it that test is a skip.
A drift cell is the ledger's cell: run_probes.py in this interpreter gives jax.dpa's and
onnx.attention-op.reference's cells as ledger_cells does.
"""
from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from conformance.history import bisect as bisecting
from conformance.history.envs import Probed
from conformance.history.render import as_json, as_markdown
from conformance.history.table import DEFAULT_TABLE, Library


def _site(module: str) -> str:
    """The folder this interpreter imports `module` from (its site-packages)."""
    import importlib
    return str(Path(importlib.import_module(module).__file__).resolve().parent.parent)


# the toy's env holds toyattn only: NumPy and PyYAML (the probe path's imports) come from
# this interpreter's site-packages, since no wheel of either is at hand offline
TOY = Library("toy", "toyattn", ("toy.attn",), ("1.0", "1.3"), (),
              env={"CONFORMANCE_EXTRA_RUNNERS": "tests.drift_toy:ToyRunner",
                   "PYTHONPATH": os.pathsep.join(dict.fromkeys((_site("numpy"),
                                                                _site("yaml"))))},
              imports=("toyattn",), packages=("toyattn",), axes=("fully_masked_row",),
              probe_deps=())
TOY_CELL = "toy.attn.fully_masked_row"


def _wheel(folder: Path, version: str, body: str) -> Path:
    """A minimal valid pure-Python wheel of toyattn (the wheel format, written by hand)."""
    dist = f"toyattn-{version}.dist-info"
    files = {"toyattn/__init__.py": body,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: toyattn\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    path = folder / f"toyattn-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def _probed(version, value, status="ok"):
    cells = {} if status != "ok" else {TOY_CELL: {"value": value,
                                                  "evidence": f"{value} in {version}"}}
    return Probed(version, [f"toyattn=={version}"], status=status, cells=cells,
                  error="" if status == "ok" else "install failed: no such release")


def test_bisect_names_the_planted_release_with_uv(tmp_path, monkeypatch):
    from conformance.cli.version_drift import survey
    from conformance.history.envs import find_uv, probe_release
    try:
        find_uv()
    except SystemExit:
        pytest.skip("uv is not installed (pip install uv, or the drift extra)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version, value in (("1.0", "uniform"), ("1.1", "uniform"), ("1.2", "zeros"),
                           ("1.3", "zeros")):
        _wheel(wheels, version, f"def masked_row():\n    return {value!r}\n")
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    offline = ["--no-index", "--find-links", str(wheels)]
    releases = bisecting.release_list("toyattn", offline)
    assert releases == ["1.0", "1.1", "1.2", "1.3"]
    seen = []

    def probe(version):
        seen.append(version)
        return probe_release(TOY, version, offline)
    entry = survey(TOY, True, probe=probe, releases=releases, say=lambda *_: None)
    [change] = entry["changes"]
    assert (change.first_release, change.last_old_release) == ("1.2", "1.1")
    assert (change.old_value, change.new_value) == ("uniform", "zeros")
    assert change.cell == TOY_CELL  # the ledger's probe (rows.py) named both, distances quoted
    assert "uniform 0.0e+00" in change.evidence_old and "zeros 0.0e+00" in change.evidence_new
    assert [r.version for r in entry["releases"]] == ["1.0", "1.1", "1.2", "1.3"]
    assert sorted(seen) == ["1.0", "1.1", "1.2", "1.3"]
    broken = probe_release(TOY, "9.9", offline)  # not in the folder: env broken, not raised
    assert broken.status == "broken" and "install failed" in broken.error


@pytest.mark.parametrize("planted", ["1.1", "1.2", "1.3", "1.4"])
def test_bisect_finds_any_planted_boundary(planted):
    releases = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"]

    def probe(v):
        return _probed(v, "zeros" if v >= planted else "uniform")
    memo = {v: probe(v) for v in ("1.0", "1.5")}
    [change] = bisecting.changes([memo["1.0"], memo["1.5"]])
    change = bisecting.bisect(change, releases, probe, memo)
    assert change.first_release == planted
    assert change.last_old_release == releases[releases.index(planted) - 1]
    assert change.evidence_new == f"zeros in {planted}"


def test_bisect_skips_a_broken_release_and_reports_it():
    releases = ["1.0", "1.1", "1.2", "1.3", "1.4"]

    def probe(v):
        if v == "1.2":
            return _probed(v, None, status="broken")
        return _probed(v, "zeros" if v >= "1.3" else "uniform")
    memo = {v: probe(v) for v in ("1.0", "1.4")}
    [change] = bisecting.changes([memo["1.0"], memo["1.4"]])
    change = bisecting.bisect(change, releases, probe, memo)
    assert change.first_release == "1.3" and "1.2" in change.skipped


def test_errors_are_stepped_over_and_absent_apis_are_kept_apart():
    rows = [_probed("1.0", "api_absent"), _probed("1.1", "uniform"),
            _probed("1.2", "probe_error"), _probed("1.3", "uniform"),
            _probed("1.4", None, status="broken"), _probed("1.5", "nan")]
    found = bisecting.changes(rows)
    # the error (1.2) and the broken env (1.4) are stepped over: 1.1 -> 1.3 is no change
    assert [(c.before, c.after, c.kind) for c in found] == [
        ("1.0", "1.1", "api_added"), ("1.3", "1.5", "convention")]
    doc = as_json([{"library": TOY, "releases": rows, "changes": found}])
    md = as_markdown(doc)
    assert "`nan` from **1.5** on" in md  # the convention change is a headline
    assert "`uniform` from **1.1**" not in md  # the API's arrival is not
    assert f"{TOY_CELL}` api added in 1.1" in md
    assert "**uniform** ⟵ added" in md


def test_report_marks_the_boundary_and_keeps_outcomes_apart():
    change = bisecting.Change(TOY_CELL, "1.0", "1.3", "uniform", "zeros", "1.2",
                              "1.1", "uniform in 1.1", "zeros in 1.2", ["1.1", "1.2"])
    releases = [_probed("1.0", "uniform"), _probed("1.1", "uniform"), _probed("1.2", "zeros"),
                _probed("1.3", None, status="broken")]
    doc = as_json([{"library": TOY, "releases": releases, "changes": [change]}])
    md = as_markdown(doc)
    assert f"| `{TOY_CELL}` | uniform | uniform | **zeros** ⟵ changed | env broken |" in md
    assert "`uniform` up to 1.1, `zeros` from **1.2** on" in md
    assert "1.3: env broken: install failed" in md
    assert "seconds" not in str(doc)  # wall times are CPU-dependent: never committed


def test_default_table_spans_four_releases_per_library_and_pins_torch():
    for lib in DEFAULT_TABLE:
        assert len(lib.versions) >= 4, lib.id
        for version in lib.versions:
            reqs = " ".join(lib.companions(version))
            assert "torch" not in reqs or "torch==2.13.0" in reqs, (lib.id, version)
    keras = next(lib for lib in DEFAULT_TABLE if lib.id == "keras.jax")
    assert "numpy<2" in keras.companions("3.0.5") and "numpy<2" not in keras.companions("3.15.1")


def test_unknown_library_is_a_clear_error():
    from conformance.cli.version_drift import _selection
    with pytest.raises(SystemExit, match="unknown library 'kerass'.*keras.jax"):
        _selection(["kerass==3.0.5"])
    with pytest.raises(SystemExit, match="keras.jax==3.0.5,three.*LIB==1.2.3"):
        _selection(["keras.jax==3.0.5,three"])
    [lib] = _selection(["keras.jax==3.8.0,3.0.5"])
    assert lib.versions == ("3.0.5", "3.8.0")  # oldest first, whatever the order typed


def test_survey_bisects_until_every_change_is_between_adjacent_releases():
    """A value that comes back (u, u, nan, u, zeros) is found in full: bisecting the
    table's one change reveals two more, which are bisected in turn."""
    from conformance.cli.version_drift import survey
    values = {"1.0": "uniform", "1.1": "uniform", "1.2": "nan", "1.3": "uniform",
              "1.4": "zeros"}
    library = Library("toy", "toyattn", "toy", ("1.0", "1.4"), ())
    entry = survey(library, True, probe=lambda v: _probed(v, values[v]),
                   releases=list(values), say=lambda *_: None)
    assert [(c.last_old_release, c.first_release, c.new_value) for c in entry["changes"]] == \
        [("1.1", "1.2", "nan"), ("1.2", "1.3", "uniform"), ("1.3", "1.4", "zeros")]
    entry = survey(library, False, probe=lambda v: _probed(v, values[v]), say=lambda *_: None)
    assert [(c.before, c.after) for c in entry["changes"]] == [("1.0", "1.4")]


def test_a_release_without_the_toys_api_is_api_absent_with_uv(tmp_path, monkeypatch):
    """A release whose API the runner's call needs is missing (toyattn 0.9 has no
    masked_row): the ledger's refusal becomes api_absent, never a crash or a change."""
    from conformance.history.envs import find_uv, probe_release
    try:
        find_uv()
    except SystemExit:
        pytest.skip("uv is not installed (pip install uv, or the drift extra)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "0.9", "VERSION = '0.9'\n")
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    got = probe_release(TOY, "0.9", ["--no-index", "--find-links", str(wheels)])
    assert got.status == "ok", got.error
    cell = got.cells[TOY_CELL]
    assert cell["value"] == "api_absent"
    assert "has no attribute 'masked_row'" in cell["evidence"] and "refused" in cell["evidence"]


def _ledger_and_drift(name: str, axes: tuple[str, ...]):
    from conformance.conventions.probes import ledger_cells
    from conformance.history.probes.run_probes import _runners, main
    [runner] = _runners([name])
    if runner.available():
        pytest.skip(runner.available())
    spec = {"runners": [name], "axes": list(axes), "imports": [], "packages": ["numpy"]}
    drift = main(spec)["cells"]
    ledger = {c.axis: c for c in ledger_cells(runner) if c.axis in axes}
    return ledger, drift


@pytest.mark.parametrize("name, axes", [
    ("jax.dpa", ("attn_mask_polarity", "float_mask", "causal_flag", "key_padding_polarity")),
    ("onnx.attention-op.reference", ("attn_mask_polarity", "float_mask", "causal_flag",
                                     "key_padding_polarity")),
])
def test_a_drift_cell_is_the_ledgers_cell_at_the_installed_release(name, axes):
    """run_probes.py in this interpreter (the installed releases): each drift cell has the
    ledger's word and evidence (ledger_cells, what the conventions items pin)."""
    ledger, drift = _ledger_and_drift(name, axes)
    assert set(ledger) == set(axes)  # every asked axis is a probe cell of the ledger here
    for axis in axes:
        cell = drift[f"{name}.{axis}"]
        assert (cell["value"], cell["evidence"]) == (ledger[axis].value, ledger[axis].evidence)


def test_a_planted_wrong_classification_fails_the_equality(monkeypatch):
    """A drift judge of its own (the old standalone scripts' shape) that names jax.dpa's
    float mask otherwise than the ledger is caught by the same comparison."""
    from conformance.conventions.probes import one_axis
    real = one_axis.axis_cell

    def planted(runner, axis, own=None):
        cell = real(runner, axis, own)
        return cell if axis != "float_mask" else type(cell)(axis, "cast_to_bool", cell.evidence)
    monkeypatch.setattr(one_axis, "axis_cell", planted)
    ledger, drift = _ledger_and_drift("jax.dpa", ("float_mask",))
    assert drift["jax.dpa.float_mask"]["value"] != ledger["float_mask"].value


def test_drift_cells_keep_the_ledgers_word_but_name_a_missing_api():
    from conformance.history.probes.cells import drift_cell
    gap = "probe_case x: the system raised: AttributeError: module 'keras.config' has no " \
          "attribute 'disable_flash_attention'"
    assert drift_cell("refused", gap)["value"] == "api_absent"
    assert "the ledger reads refused" in drift_cell("refused", gap)["evidence"]
    assert drift_cell("probe_error", "Unsupported model IR version: 10, max supported IR "
                      "version: 9")["value"] == "api_absent"
    real = "probe_case x: the system raised: ValueError: mask must be boolean"
    assert drift_cell("refused", real) == {"value": "refused", "evidence": real}
    assert drift_cell("uniform", "row 1: uniform 1.4e-07")["value"] == "uniform"


def test_prune_removes_the_envs_and_prunes_uvs_cache(tmp_path, monkeypatch):
    from conformance.history import envs
    try:
        envs.find_uv()
    except SystemExit:
        pytest.skip("uv is not installed (pip install uv, or the drift extra)")
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path))
    (envs.drift_root() / "envs" / "toy-1.0").mkdir(parents=True)
    envs.uv_cache().mkdir(parents=True)
    envs.prune()
    assert not (envs.drift_root() / "envs").exists()
    assert str(envs.uv_cache()).startswith(str(tmp_path))  # under the project's cache
