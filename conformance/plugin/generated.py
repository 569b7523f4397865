"""Generated cases (issue #12 part 5): `pytest --generated N --generated-seed S`.

A configuration is drawn as a *genome*: a flat mapping of small integers and
booleans (FIELDS), each field's simplest value being its lowest.  `build`
turns any genome into a case mapping that parse_case accepts (so the generator
can never produce what the loader refuses), with no fully masked query rows: a
random mask that masks a whole row gets another seed, and after 16 tries is
dropped.  Drawing is a `random.Random` seeded by (seed, index), so case 7 of
seed 3 is the same whatever N is and whichever runner runs it.

Each generated case runs through the chosen runners as ordinary matrix items
(`gen-S-0007[torch.mha]`, markers `generated` and the runner's framework),
judged by matrix.evaluate exactly as a shipped case.  A failing item is shrunk
with Hypothesis (`find` over genomes bounded by the failing one, the failing
runner's evaluate as predicate, bounded in examples and seconds) and written as
a case file that validates, under `--generated-dir` (default reports/generated/).

A generated run collects nothing else (cases/ and tests/ are left out), so it is
a subset: the committed reports/ are never written by it.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.case.loader import parse_case
from conformance.run.evaluate import evaluate, failure_message
from conformance.paths import REPORTS_DIR

# Runners a generated run uses unless --runner names others (or --generated-runners
# all): those that run a small case in milliseconds.  The export runners export a
# graph per case, JAX compiles a program per shape, HF builds a model per case.
FAST_RUNNERS = ("torch.mha", "torch.mha.fastpath", "torch.mha.no-weights", "torch.sdpa",
                "keras.tensorflow", "keras.torch", "onnx.attention-op.ort",
                "onnx.attention-op.reference", "onnx.contrib-mha.ort",
                "matlab.selfAttentionLayer", "marian.cpp")
DTYPES = ("float32", "float64")
SHRINK_EXAMPLES, SHRINK_SECONDS = 200, 60.0
DENSITIES = (None, 0.9, 0.7, 0.5)
CAUSAL = ("none", "upper_left", "lower_right")

# name: (lowest, highest); the lowest is the simplest.  0 in an "or same" field
# means "as the other width" (no field written).
FIELDS = {
    "kv_heads": (1, 4), "groups": (1, 4), "head_dim": (1, 8), "free_widths": (0, 1),
    "query_features": (1, 24), "v_head_dim": (0, 8), "self_attention": (0, 1),
    "key_features": (0, 24), "value_features": (0, 24), "output_features": (0, 24),
    "bias": (0, 1), "batch": (1, 3), "query_len": (1, 8), "key_len": (0, 8),
    "dtype": (0, 1), "causal": (0, 2), "padding": (0, 1), "pad1": (1, 8), "pad2": (1, 8),
    "pad3": (1, 8), "density": (0, 3), "seed": (0, 2**31 - 1),
}
# probability that an optional field keeps its simplest value when drawn
_PLAIN = {"free_widths": 0.75, "v_head_dim": 0.8, "self_attention": 0.6, "key_features": 0.5,
          "value_features": 0.6, "output_features": 0.85, "bias": 0.3, "key_len": 0.2,
          "causal": 0.7, "padding": 0.7, "density": 0.75, "groups": 0.75}


def draw_genome(seed: int, index: int, n_dtypes: int = 1) -> dict[str, int]:
    """Genome `index` of `seed`: independent of how many are drawn."""
    rng = random.Random(f"attention-conformance-generated:{seed}:{index}")
    genome = {}
    for name, (lo, hi) in FIELDS.items():
        if name == "dtype":
            hi = n_dtypes - 1
        plain = rng.random() < _PLAIN.get(name, 0.0)
        genome[name] = lo if plain else rng.randint(min(lo + (name in _PLAIN), hi), hi)
    return genome


def _attention(g: dict[str, int]) -> dict[str, Any]:
    h = g["kv_heads"] * g["groups"]
    att: dict[str, Any] = {"num_heads": h}
    if g["groups"] > 1:
        att["num_kv_heads"] = g["kv_heads"]
    if g["free_widths"]:
        att.update(query_features=g["query_features"], qk_head_dim=g["head_dim"])
    else:
        att["query_features"] = h * g["head_dim"]
    if g["v_head_dim"]:
        att["v_head_dim"] = g["v_head_dim"]
    if not g["self_attention"] and g["key_features"]:
        att["key_features"] = g["key_features"]
        if g["value_features"]:
            att["value_features"] = g["value_features"]
    if g["output_features"]:
        att["output_features"] = g["output_features"]
    att["bias"] = bool(g["bias"])
    return att


def _inputs_mask(g: dict[str, int], dtypes) -> tuple[dict, dict]:
    t = g["query_len"]
    s = t if g["self_attention"] or not g["key_len"] else g["key_len"]
    inputs = {"batch": g["batch"], "query_len": t, "key_len": s,
              "self_attention": bool(g["self_attention"]),
              "dtype": dtypes[min(g["dtype"], len(dtypes) - 1)], "seed": g["seed"]}
    mask: dict[str, Any] = {}
    causal = CAUSAL[g["causal"]]
    if causal == "lower_right" and s < t:  # its first rows would see no key at all
        causal = "upper_left"
    if causal != "none":
        mask["causal"] = causal
    if g["padding"]:
        mask["key_padding"] = [min(g[f"pad{i + 1}"], s) for i in range(g["batch"])]
    if DENSITIES[g["density"]] is not None:
        mask["attn_mask"] = {"random": DENSITIES[g["density"]]}
    return inputs, mask


def build(g: dict[str, int], case_id: str, dtypes=("float32",)) -> dict[str, Any]:
    """The case mapping of a genome: valid for parse_case, no fully masked row.  It pins
    nothing: each runner's known mismatches (float64 ones included) apply by condition
    from its expectations file."""
    inputs, mask = _inputs_mask(g, dtypes)
    raw = {"id": case_id, "title": f"generated case {case_id}", "tags": ["generated"],
           "attention": _attention(g), "inputs": inputs, "mask": mask}
    return _without_masked_rows(raw)


def _without_masked_rows(raw: dict[str, Any]) -> dict[str, Any]:
    from conformance.oracle.canonical import case_data

    if "attn_mask" not in raw["mask"]:
        return raw  # causal (upper left, or lower right with S >= T) and padding >= 1 keep key 0
    for _ in range(16):
        if not case_data(parse_case(raw, "<generated>")).inputs.fully_masked.any():
            return raw
        raw["inputs"]["seed"] = (raw["inputs"]["seed"] + 1) % 2**31
    del raw["mask"]["attn_mask"]
    return raw


# --- shrinking ---------------------------------------------------------------

def _bounded(g: dict[str, int]):
    """Genomes no more complex than `g`, field by field (Hypothesis shrinks each
    towards its lowest value); the data seed stays."""
    from hypothesis import strategies as st

    fields = {name: st.integers(lo, max(lo, g[name]))
              for name, (lo, _) in FIELDS.items() if name != "seed"}
    return st.fixed_dictionaries({**fields, "seed": st.just(g["seed"])})


def shrink(g: dict[str, int], fails, *, seed: int = 0, examples: int = SHRINK_EXAMPLES,
           seconds: float = SHRINK_SECONDS) -> dict[str, int]:
    """The simplest genome Hypothesis finds for which `fails(genome)` holds, within
    `examples` generated genomes and about `seconds`; `g` itself when none is found."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    seen: dict[str, bool] = {json.dumps(g, sort_keys=True): True}
    stop = time.monotonic() + seconds

    def predicate(genome):
        key = json.dumps(genome, sort_keys=True)
        if key not in seen:  # once out of time, nothing new counts as failing
            seen[key] = time.monotonic() < stop and bool(fails(genome))
        return seen[key]

    config = settings(max_examples=examples, database=None, deadline=None,
                      phases=[Phase.generate, Phase.shrink],
                      suppress_health_check=list(HealthCheck))
    try:
        return find(_bounded(g), predicate, settings=config, random=random.Random(seed))
    except NoSuchExample:
        return g


def write_case(raw: dict[str, Any], directory, header: str) -> Path:
    import yaml

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{raw['id']}.yaml"
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    path.write_text(comment + yaml.safe_dump(raw, sort_keys=False, width=100))
    return path


# --- pytest ------------------------------------------------------------------

_KEY = pytest.StashKey[dict]()


def add_options(group) -> None:
    """The generated-run options (called from plugin.pytest_addoption)."""
    group.addoption("--generated", type=int, default=0, metavar="N",
                    help="run N generated cases through the runners instead of the suite "
                    "(conformance/generated.py); failures are shrunk into case files")
    group.addoption("--generated-seed", type=int, default=0, metavar="S",
                    help="seed of the generated cases (default 0): same seed, same items")
    group.addoption("--generated-dtypes", default="float32", metavar="LIST",
                    help="dtypes to draw, comma-separated from float32,float64 (default "
                    "float32; float64 items meet the runners' known float64 mismatches, "
                    "from expectations/)")
    group.addoption("--generated-runners", default="fast", choices=("fast", "all"),
                    help="runners of generated items when --runner names none: fast "
                    f"(default: {', '.join(FAST_RUNNERS)}) or all")
    group.addoption("--generated-shrink", type=float, default=SHRINK_SECONDS, metavar="SECONDS",
                    help=f"time to shrink each failure (default {SHRINK_SECONDS:g}; 0: write "
                    "the failing case as drawn)")
    group.addoption("--generated-dir", default=str(REPORTS_DIR / "generated"), metavar="DIR",
                    help="where shrunk failing cases are written (default reports/generated)")


def configure(config) -> None:
    """Called from plugin.pytest_configure: the marker, and this module's hooks
    when --generated asks for cases."""
    config.addinivalue_line("markers", "generated: an item of a generated case")
    n = config.getoption("generated", 0) or 0
    if n < 0 or config.getoption("generated_seed", 0) < 0:
        raise pytest.UsageError("--generated and --generated-seed take integers >= 0")
    if n == 0:
        return
    dtypes = [d for d in config.getoption("generated_dtypes").split(",") if d]
    if not dtypes or set(dtypes) - set(DTYPES):
        raise pytest.UsageError(f"--generated-dtypes: choose from {list(DTYPES)}, got {dtypes}")
    config.stash[_KEY] = {"dtypes": tuple(dtypes), "rows": {}, "written": [], "start": None}
    import sys

    config.pluginmanager.register(sys.modules[__name__], "conformance-generated")


def pytest_ignore_collect(collection_path, config):
    return True  # a generated run is the generated items alone


def _runners(config, all_runners) -> list:
    chosen = [n for v in config.getoption("runner") for n in v.split(",") if n]
    if chosen:
        return [r for r in all_runners if r.name in chosen]
    if config.getoption("generated_runners") == "all":
        return list(all_runners)
    return [r for r in all_runners if r.name in FAST_RUNNERS]


def generated_cases(config) -> list:
    """The N cases of this run's seed, validated by parse_case."""
    state = config.stash[_KEY]
    seed, dtypes = config.getoption("generated_seed"), state["dtypes"]
    cases = []
    for i in range(config.getoption("generated")):
        g = draw_genome(seed, i, len(dtypes))
        case = parse_case(build(g, f"gen-{seed}-{i:04d}", dtypes), "<generated>")
        cases.append((case, g))
    return cases


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect: they select among these too
def pytest_collection_modifyitems(session, config, items):
    from conformance.runners import all_runners

    runners = _runners(config, all_runners())
    for case, genome in generated_cases(config):
        for runner in runners:
            name = f"{case.id}[{runner.name}]"
            item = GeneratedItem.from_parent(session, name=name, nodeid=name, case=case,
                                             runner=runner, genome=genome)
            item.add_marker(runner.framework)
            item.add_marker("generated")
            items.append(item)


def pytest_collection_finish(session):
    """Queue worker items now, as the plugin does for the shipped matrix."""
    if session.config.option.collectonly:
        return
    from conformance.run.evaluate import prefetch

    for item in session.items:
        if isinstance(item, GeneratedItem):
            prefetch(item.case, item.runner)
    session.config.stash[_KEY]["start"] = time.monotonic()


class GeneratedFailure(Exception):
    pass


class GeneratedItem(pytest.Item):
    def __init__(self, *, case, runner, genome, **kwargs):
        super().__init__(**kwargs)
        self.case, self.runner, self.genome = case, runner, genome

    @property
    def expected(self):
        """The runner's expectations (expectations/<runner>.yaml, --expectations-dir)."""
        from conformance.plugin.items import session_expectations

        return session_expectations(self.config).get(self.runner.name)

    def runtest(self):
        state = self.config.stash[_KEY]
        row = evaluate(self.case, self.runner, self.expected)
        state["rows"][(self.case.id, self.runner.name)] = row
        if row.outcome.skips:
            pytest.skip(f"{self.runner.name}: {row.outcome.cell}: {row.reason}")
        if row.outcome.failed and row.known_mismatch:  # not strict: a generated shape
            pytest.xfail(f"known mismatch: {row.known_mismatch} | observed: {row.reason}")
        if row.outcome.failed:
            path = self.shrink_to_file(row)
            state["written"].append(path)
            raise GeneratedFailure(failure_message(self.case, row, self.nodeid)
                                   + f"\n  shrunk case: {path}")

    def shrink_to_file(self, row) -> Path:
        """Shrink this failure and write it as a case file; its path."""
        state, runner, outcome = self.config.stash[_KEY], self.runner, row.outcome
        dtypes, expected = state["dtypes"], self.expected
        case_id = f"{self.case.id}-{runner.name}"

        def fails(genome) -> bool:
            case = parse_case(build(genome, case_id, dtypes), "<generated>")
            again = evaluate(case, runner, expected)
            return again.outcome is outcome and not again.known_mismatch

        seconds = self.config.getoption("generated_shrink")
        small = self.genome if seconds <= 0 else shrink(
            self.genome, fails, seed=self.config.getoption("generated_seed"), seconds=seconds)
        raw = build(small, case_id, dtypes)
        final = evaluate(parse_case(raw, "<generated>"), runner, expected)
        raw["title"] = f"generated case {self.case.id}, shrunk: {runner.name} {final.outcome}"
        raw["description"] = final.reason[:800]
        seed, n = self.config.getoption("generated_seed"), self.config.getoption("generated")
        header = (f"Shrunk from {self.case.id}[{runner.name}] (--generated {n} "
                  f"--generated-seed {seed}).\nReproduce: python -m pytest -p "
                  f"conformance.plugin --cases-dir=DIR --runner {runner.name}; "
                  "move it to cases/ to keep it.")
        return write_case(raw, self.config.getoption("generated_dir"), header)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, (GeneratedFailure, pytest.xfail.Exception)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, self.name


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = config.stash.get(_KEY, None)
    if not state or not state["rows"]:
        return
    rows = list(state["rows"].values())
    cases = len({r.case for r in rows})
    elapsed = time.monotonic() - (state["start"] or time.monotonic())
    counts: dict[str, int] = {}
    for r in rows:
        word = "known mismatch" if r.outcome.failed and r.known_mismatch else str(r.outcome)
        counts[word] = counts.get(word, 0) + 1
    terminalreporter.write_line(
        f"conformance generated: {cases} cases, {len(rows)} items in {elapsed:.1f} s "
        f"({cases / max(elapsed, 1e-9):.1f} cases/s); "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + "; reports/ left unchanged (a generated run is a subset)")
    for path in state["written"]:
        terminalreporter.write_line(f"conformance generated: shrunk case written to {path}")
