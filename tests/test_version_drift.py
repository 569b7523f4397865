"""The drift command's bisect, outcomes and report (conformance/history/).

The bisect test is offline: it writes four wheels of a toy dependency `toyattn`
(1.0, 1.1, 1.2, 1.3; 1.2 changes its fully-masked-row convention), installs them with
uv from a --find-links folder and checks that the bisect names 1.2 with evidence on
both sides.  Needs uv (the `drift` extra); without it that test is a skip.
"""
from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from conformance.history import bisect as bisecting
from conformance.history.envs import Probed
from conformance.history.render import as_json, as_markdown
from conformance.history.table import DEFAULT_TABLE, Library

TOY = Library("toy", "toyattn", "toy", ("1.0", "1.3"), ())


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
    cells = {} if status != "ok" else {"fully_masked_row": {"value": value,
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
    assert "'uniform'" in change.evidence_old and "'zeros'" in change.evidence_new
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
    assert "fully_masked_row` api added in 1.1" in md
    assert "**uniform** ⟵ added" in md


def test_report_marks_the_boundary_and_keeps_outcomes_apart():
    change = bisecting.Change("fully_masked_row", "1.0", "1.3", "uniform", "zeros", "1.2",
                              "1.1", "uniform in 1.1", "zeros in 1.2", ["1.1", "1.2"])
    releases = [_probed("1.0", "uniform"), _probed("1.1", "uniform"), _probed("1.2", "zeros"),
                _probed("1.3", None, status="broken")]
    doc = as_json([{"library": TOY, "releases": releases, "changes": [change]}])
    md = as_markdown(doc)
    assert "| `fully_masked_row` | uniform | uniform | **zeros** ⟵ changed | env broken |" in md
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


def _probe_common():
    """probes/common.py as the old envs import it (by path: it is a standalone script)."""
    import importlib.util
    import sys
    folder = Path(__file__).resolve().parent.parent / "conformance/history/probes"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("drift_probe_common", folder / "common.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def test_probe_classifiers_name_each_reading_and_reject_the_rest():
    import numpy as np
    c = _probe_common()
    q, kv = c.inputs()
    attend = np.ones((3, 4), bool)
    attend[0] = False
    out = c.attention(q, kv, kv, attend)
    uniform = kv.mean(axis=1)[0]
    unmasked = c.attention(q, kv, kv)[0, 0]
    assert c.row_kind(out[0, 0], uniform, unmasked) == "nan"  # 0 / 0: no key to attend
    zq = q.copy()
    zq[0, 0] = 0  # a zero query row: equal scores, the uniform row the layer probes use
    assert c.row_kind(c.attention(zq, kv, kv)[0, 0], uniform, unmasked) == "uniform"
    assert c.row_kind(np.zeros(8), uniform, unmasked) == "zeros"
    assert c.row_kind(np.full(8, np.nan), uniform, unmasked) == "nan"
    assert c.row_kind(unmasked, uniform, unmasked) == "unmasked"
    assert c.row_kind(uniform + 0.1, uniform, unmasked) == "finite_other"  # planted: no match
    m = c.float_mask(3, 4)
    added, as_bool = c.attention(q, kv, kv, m == 0), c.attention(q, kv, kv, m != 0)
    assert c.float_kind(c.attention(q, kv, kv, bias=m), added, as_bool) == "added"
    assert c.float_kind(as_bool, added, as_bool) == "cast_to_bool"
    assert c.float_kind(c.attention(q, kv, kv), added, as_bool) == "finite_other"
    upper, lower = c.causal_masks(2, 4)
    ups, lows = c.attention(q[:, :2], kv, kv, upper), c.attention(q[:, :2], kv, kv, lower)
    assert c.causal_kind(lows, ups, lows, c.attention(q[:, :2], kv, kv)) == "lower_right"
    assert not c.close(ups, lows)  # the probe's T != S really tells the two apart


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
