"""Bad input, as a class: every field of every document a user writes (the models `gpucert schema` exports: spec,
fleet, SKU and handover baselines, waivers, with their target, pools, soak, fabric and gang sections), fed a wrong
type, a wrong choice, a negative, zero, NaN or huge number, and an unknown key beside it. Each refusal names the file
and the dotted key, says what the key takes and how to write it, in the user's words: no pydantic class or type
name, no traceback. The walk reads the models (tests/unit/document_sweep.py), so a field added later is swept too.

The loaders are called with the YAML already read (the YAML reader has tests of its own in test_documents.py), so
the two thousand cases take about a second; a sample goes through the CLI for its exit code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gpucert.cli.main import main
from gpucert.errors import ConfigError
from gpucert.spec import documents
from gpucert.spec.baseline import GpuBaseline, load_baseline
from gpucert.spec.cluster import ClusterSpec, load_spec
from gpucert.spec.handover import NodeBaseline, load_node_baseline
from gpucert.spec.simulated_fleet import SimulatedFleet, load_fleet
from gpucert.spec.waivers import Waivers, load_waivers
from tests.unit.document_sweep import Case, load, walk

ROOT = Path(__file__).resolve().parents[2]

NODE_BASELINE = {
    "apiVersion": "gpucert.io/v1alpha1",
    "kind": "NodeBaseline",
    "node": "gpu-node-1",
    "sku": "H100-SXM5-80GB",
    "recorded": {"run": "r1", "date": "2026-01-01", "result": "pass", "certificate": "ab", "spec": "s"},
    "gpus": [
        {
            "index": 0,
            "serial": "1",
            "metrics": {"memory.bandwidth": {"median": 3, "spread": 0.01, "n": 60, "unit": "TB/s"}},
        }
    ],
    "nodeMetrics": {"nccl.all_reduce": {"median": 3, "spread": 0.01, "n": 60, "unit": "GB/s"}},
}

# (name, model, its valid document, its loader)
DOCUMENTS: list[tuple[str, type[BaseModel], Any, Callable[[Path], Any]]] = [
    ("spec", ClusterSpec, load(ROOT / "examples/soak.yaml"), load_spec),
    ("spec-pools", ClusterSpec, load(ROOT / "examples/fabric.yaml"), load_spec),
    ("fleet", SimulatedFleet, load(ROOT / "examples/fleets/h100-4x8-soak.yaml"), load_fleet),
    ("fleet-fabric", SimulatedFleet, load(ROOT / "examples/fleets/h100-16x8-fabric.yaml"), load_fleet),
    ("baseline", GpuBaseline, load(ROOT / "baselines/gpus/H100-SXM5-80GB.yaml"), load_baseline),
    ("node-baseline", NodeBaseline, NODE_BASELINE, load_node_baseline),
    ("waivers", Waivers, load(ROOT / "examples/handover/waivers.yaml"), load_waivers),
]


def _cases() -> list[tuple[Case, Any, Callable[[Path], Any]]]:
    """Each wrong value at each key once (the second document of a kind adds the sections the first lacks)."""
    seen: set[tuple[str, str, str, str]] = set()
    out = []
    for name, model, base, loader in DOCUMENTS:
        for case in walk(name, model, base):
            key = (model.__name__, case.dotted, case.what, repr(case.setup))
            if key not in seen:
                seen.add(key)
                out.append((case, base, loader))
    return out


CASES = _cases()

# values a key of that type can take on purpose: a count of zero errors allowed, a seed of 0, a limit with no top
ACCEPTED = {"zero", "huge"}
NEGATIVE_ALLOWED = {"waivers[0].accept.min", "waivers[0].accept.max"}  # a figure's bound: its metric's sign

# what must not reach a user: pydantic's and Python's own words for types and errors
INTERNAL = re.compile(
    r"Input should|instance of|dictionary|pydantic|Traceback|NoneType|typing|Literal\[|Annotated|function-|"
    r"union_tag|validation error|\b(?:str|int|float|dict|bool)\b|literal\["
)
FIX = re.compile(r"\b(?:write|give|add|remove|use|set|name|choose|change|keep|move|list|quote|point|replace)\b")


def _classes(model: type[BaseModel], seen: set[str]) -> Iterator[str]:
    """The class names of `model` and every model under it, but those a document's `kind` also spells."""
    if model.__name__ in seen:
        return
    seen.add(model.__name__)
    yield model.__name__
    for field in model.model_fields.values():
        for inner in re.findall(r"\b[A-Z]\w+\b", repr(field.annotation)):
            sub = _known.get(inner)
            if sub is not None:
                yield from _classes(sub, seen)


def _all_models() -> dict[str, type[BaseModel]]:
    out: dict[str, type[BaseModel]] = {}
    stack: list[type] = [documents.Document]
    while stack:
        cls = stack.pop()
        out[cls.__name__] = cls
        stack += cls.__subclasses__()
    return out


_known = _all_models()
KINDS = {"ClusterSpec", "SimulatedFleet", "GpuBaseline", "NodeBaseline", "Waivers"}
CLASS_NAMES = sorted({c for _, m, _, _ in DOCUMENTS for c in _classes(m, set())} - KINDS)
CLASS_WORD = re.compile(r"\b(?:" + "|".join(CLASS_NAMES) + r")\b")


@pytest.fixture
def no_yaml(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The loaders read this document instead of parsing a file (same data, without YAML's cost)."""
    given: dict[str, Any] = {}
    monkeypatch.setattr(documents, "load_yaml", lambda path: (given["data"], {}))
    return given


def _refusal(case: Case, base: Any, loader: Callable[[Path], Any], given: dict[str, Any], path: Path) -> str | None:
    given["data"] = case.written(base)
    try:
        loader(path)
    except ConfigError as exc:
        return str(exc)
    return None


def test_the_sweep_covers_every_section() -> None:
    keys = {(c.document.split("-")[0], c.dotted) for c, _, _ in CASES}
    for section in (
        "target.gang.localQueue",
        "soak.criteria.maxDrift",
        "pools[0].fabric.rails.count",
        "certify.samples",
    ):
        assert ("spec", section) in keys
    for section in ("soak.faults[0].factor", "noise.runToRun.cv", "fabric.racks.size", "faults[0].factor"):
        assert ("fleet", section) in keys, section
    assert ("node", "gpus[0].metrics.memory.bandwidth.median") in keys
    assert ("waivers", "waivers[0].accept.min") in keys
    assert len(CASES) > 2000


def test_every_wrong_value_names_the_file_the_key_and_the_fix(no_yaml: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "doc.yaml"
    bad: list[str] = []
    for case, base, loader in CASES:
        message = _refusal(case, base, loader, no_yaml, path)
        may_take = case.what in ACCEPTED or (case.what == "negative" and case.dotted in NEGATIVE_ALLOWED)
        if message is None:
            if not may_take:
                bad.append(f"{case.id()}: accepted")
            continue
        said = message.removeprefix(f"{path}: ")
        if may_take and not said.startswith(f"{case.dotted}: "):
            continue  # a value the key takes, in a section the case left without its other keys: said for those
        named = CLASS_WORD.search(said)
        problems = [
            "no file" * (not message.startswith(f"{path}: ")),
            "no key" * (not said.startswith(f"{case.dotted}: ")),
            "internal words" * bool(INTERNAL.search(said)),
            f"class name {named.group(0)}" if named else "",
            "no fix" * (not FIX.search(said)),
            "more than one line" * ("\n" in said),
        ]
        if any(problems):
            bad.append(f"{case.id()}: {', '.join(p for p in problems if p)}: {said}")
    assert not bad, f"{len(bad)} of {len(CASES)}:\n" + "\n".join(bad[:400])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        # issue 27's sweep: each said in pydantic's words, or not said at all
        (lambda d: d["certify"].update(samples=60), "certify.samples: 60 is a number; write a mapping"),
        (
            lambda d: d["certify"].update(drift=5),
            "certify.drift: 5 is a number; write a mapping with the key confidence",
        ),
        (
            lambda d: d["target"].update(gang={"localQueue": "q"}),
            "target.gang: gang applies to the kubernetes target only (kind: kubernetes), and this target is kind: "
            "simulated",
        ),
        (
            lambda d: d["certify"]["stragglers"].update(maxDeviation="2%"),
            "maxDeviation: '2%' is text, not a number; write the share as a fraction: 0.02 for 2%",
        ),
        (
            lambda d: d["certify"]["stragglers"].update(maxDeviation="1e3"),
            "YAML 1.1 reads an exponent only with a dot and a sign (1.0e+3); write 1000",
        ),
        (lambda d: d["certify"]["dcgm"].update(level="2"), "level: '2' is text, not a number; write it without quotes"),
        (
            lambda d: d["target"].update(kind="simulate"),
            "target.kind: 'simulate' is not a kind this key takes; write one of",
        ),
        (lambda d: d["expect"].update(nodes=2**60), "more than 2^53"),
        # a key in the wrong section is told where it goes
        (lambda d: d["expect"].update(gang={}), "expect.gang: unknown key here; gang belongs under target: move it"),
        # hostile sweep of 93f6c9a, item 6: a duration said as "text", and a zero one without its least value
        (
            lambda d: d.update(acceptance={"maxEvidenceAge": 30}),
            "acceptance.maxEvidenceAge: 30 is a number; write a duration such as 30d",
        ),
        (
            lambda d: d.update(acceptance={"maxEvidenceAge": "0d"}),
            "acceptance.maxEvidenceAge: '0d' is not a duration of 1 or more: the least value is 1d",
        ),
        (lambda d: d.update(soak={"duration": 72}), "soak.duration: 72 is a number; write a duration such as 30d"),
    ],
)
def test_the_sweeps_instances_are_said_plainly(tmp_path: Path, change: Callable[[Any], None], words: str) -> None:
    doc = load(ROOT / "examples/demo.yaml")
    change(doc)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_spec(path)
    assert words in str(exc.value)


@pytest.mark.parametrize(
    ("gang", "multinode", "words"),
    [
        (None, True, "target.gang: it is empty: give its localQueue"),  # `gang:` left empty read as no gang
        ({"localQueue": "q"}, False, "target.gang: gang admits the all-reduce across nodes, which this spec does not"),
        ({"localQueue": "q"}, True, None),
    ],
)
def test_a_gang_that_would_do_nothing_is_refused(
    tmp_path: Path, gang: dict[str, str] | None, multinode: bool, words: str | None
) -> None:
    """Hostile sweep of 93f6c9a, item 6: `gang:` left empty, or a gang with no all-reduce across nodes to admit,
    loaded without a word; the user would believe the collective gang-admitted."""
    doc = load(ROOT / "examples/demo.yaml")
    doc["target"] = {"kind": "kubernetes", "gang": gang}
    if not multinode:
        doc["certify"].pop("multinode")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    if words is None:
        assert load_spec(path).target.gang is not None  # type: ignore[union-attr]
        return
    with pytest.raises(ConfigError) as exc:
        load_spec(path)
    assert exc.value.key == "target.gang"
    assert words in str(exc.value)


def test_a_sample_through_the_cli_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "fleets").mkdir()
    (tmp_path / "fleets/fleet.yaml").write_text((ROOT / "examples/fleets/h100-4x8.yaml").read_text(), encoding="utf-8")
    refused = [c for c, _, _ in CASES if c.document == "spec" and c.what not in {"zero", "huge", "negative"}]
    spec_cases = refused[::40]
    assert len(spec_cases) > 10
    base = load(ROOT / "examples/demo.yaml")
    base["target"]["fleet"] = "fleets/fleet.yaml"
    base["certify"]["baseline"] = str(ROOT / "baselines/gpus/H100-SXM5-80GB.yaml")
    for case in spec_cases:
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(case.written(base)), encoding="utf-8")
        code = main(["certify", str(path), "--reports", str(tmp_path / "reports")])
        err = capsys.readouterr().err
        assert code == 2, (case.id(), err)
        assert err.startswith(f"gpucert: error: {path}:"), (case.id(), err)
        assert err.count("\n") == 1, (case.id(), err)
        assert "Traceback" not in err
