"""Re-test choices: which nodes are measured again and why, which are carried over; and the acceptance record's
rules (the latest run per node wins; statuses; a waiver expired by acceptance). Pure, over small folders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpucert.acceptance.record import SeenRun, build_record
from gpucert.acceptance.retest import Source, choose, identity_change, prepare_retest, read_retest_record
from gpucert.measure.evidence import GpuEvidence, NodeEvidence, ProbeError, SystemFacts
from gpucert.measure.targets.base import EvidenceSink, MeasurePlan
from gpucert.plan.inventory import Inventory, Node
from gpucert.plan.records import Carried, RetestRecord, RetestSource
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict_model import parse_verdict
from gpucert.stack.observe import ComponentObservation, NodeStack, StackObservation

NOW = datetime(2027, 2, 1, 12, 0, tzinfo=UTC)


def evidence(node: str, *, finished: datetime = NOW - timedelta(days=2), **gpu: Any) -> NodeEvidence:
    stamp = finished.strftime("%Y-%m-%dT%H:%M:%SZ")
    gpus = [
        GpuEvidence(
            **{
                "index": i,
                "uuid": f"GPU-{node}-{i}",
                "serial": f"{node}-{i}",
                "pci_bus_id": f"00000000:{i:02X}:00.0",
                "vbios": "96.00.99.00.01",
                **(gpu if i == 1 else {}),
            }
        )
        for i in range(2)
    ]
    return NodeEvidence(
        node=node,
        target="simulated",
        probe_version="0",
        started=stamp,
        finished=stamp,
        system=SystemFacts(driver_version="570.124.06"),
        gpus=gpus,
    )


def stack(drivers: dict[str, str]) -> StackObservation:
    return StackObservation(
        nodes={
            n: NodeStack(
                node=n,
                ready=True,
                components={"driver": ComponentObservation(pod="d", image="i", version=v, ready=True)},
            )
            for n, v in drivers.items()
        }
    )


def source(tmp_path: Path, results: dict[str, str], **docs: NodeEvidence | None) -> Source:
    folder = RunFolder(tmp_path / "run1")
    folder.evidence_dir.mkdir(parents=True)
    folder.write_stack(stack({n: "570.124.06" for n in results}))
    for n in results:
        doc = docs.get(n.replace("-", "_"), evidence(n))
        if doc is not None:
            folder.write_evidence(doc)
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    verdict = {
        "run": "run1",
        "result": "fail",
        "nodes": {
            n: {"result": r, "failing": [] if r == "pass" else ["health.ecc"], **counts} for n, r in results.items()
        },
    }
    # the keys of a verdict these tests do not read, so that it parses as the typed Verdict
    verdict |= {"schema": "gpucert.io/verdict/v3", "spec": "s", "target": "simulated"}
    verdict |= {
        "coverage": {"required": 0, "ran": 0, "complete": True},
        "summary": {"nodes": 0, "gpus": 0, "checks": 0},
    }
    verdict["summary"] |= counts
    return Source(folder, parse_verdict(verdict, "run1"), {}, "sha256:0", None)


def test_only_what_did_not_pass_or_is_new_or_stale_or_changed_is_measured(tmp_path: Path) -> None:
    src = source(
        tmp_path,
        {"n1": "pass", "n2": "fail", "n3": "pass", "n4": "pass", "n5": "incomplete", "n6": "pass"},
        n3=evidence("n3", finished=NOW - timedelta(days=40)),
        n6=None,
    )
    now_stack = stack({"n1": "570.124.06", "n2": "570.124.06", "n3": "570.124.06", "n4": "575.1", "n5": "x"})
    measure, candidates = choose(["n1", "n2", "n3", "n4", "n5", "n6", "n7"], src, now_stack, NOW, 30 * 86400)
    assert candidates == ["n1"]
    assert measure["n2"] == "did not pass in run1 (fail: health.ecc)"
    assert measure["n3"].startswith("stale: measured 40.0 days ago")
    assert measure["n4"] == "changed: driver 570.124.06 -> 575.1 (the cluster's stack)"
    assert measure["n5"].startswith("did not pass in run1 (incomplete")
    assert measure["n6"] == "not measured in run1"
    assert measure["n7"] == "new: not in run1"
    # without a maximum age, old evidence is carried
    _, candidates = choose(["n1", "n3"], src, now_stack, NOW, None)
    assert candidates == ["n1", "n3"]


def test_unusable_source_evidence_is_measured_again(tmp_path: Path) -> None:
    src = source(tmp_path, {"n1": "pass"})
    src.folder.evidence_path("n1").write_text("{}")
    measure, candidates = choose(["n1"], src, stack({"n1": "570.124.06"}), NOW, None)
    assert candidates == []
    assert measure["n1"].startswith("its evidence in run1 cannot be used")


@pytest.mark.parametrize(
    ("now", "words"),
    [
        (evidence("n1", serial="OTHER"), "changed: gpu1 serial n1-1 -> OTHER"),
        (evidence("n1", vbios="96.00.AA.00.01"), "gpu1 VBIOS 96.00.99.00.01 -> 96.00.AA.00.01"),
        (evidence("n1", uuid="GPU-new"), "gpu1 UUID GPU-n1-1 -> GPU-new"),
        (evidence("n1", pci_bus_id="00000000:9A:00.0"), "gpu1 PCI bus id"),
    ],
)
def test_a_changed_identity_is_measured_again(now: NodeEvidence, words: str) -> None:
    why = identity_change(evidence("n1"), now)
    assert why is not None
    assert words in why


def test_identity_same_driver_count_and_unreadable() -> None:
    then = evidence("n1")
    assert identity_change(then, evidence("n1", finished=NOW)) is None
    newer = then.model_copy(update={"system": SystemFacts(driver_version="575.1")})
    assert identity_change(then, newer) == "changed: driver 570.124.06 -> 575.1"
    fewer = then.model_copy(update={"gpus": then.gpus[:1]})
    assert "2 GPUs -> 1" in (identity_change(then, fewer) or "")
    down = then.model_copy(update={"collected": False, "errors": [ProbeError(probe="*", message="node NotReady")]})
    assert identity_change(then, down) == "its identity could not be read now (node NotReady)"
    assert identity_change(then, None) == "its identity could not be read now (no answer)"


# ---- the acceptance record ------------------------------------------------------------------------------------------


def seen(
    run: str,
    started: str,
    nodes: dict[str, Any],
    *,
    fleet: str = "pass",
    signed: dict[str, dict[str, Any]] | None = None,
    **extra: Any,
) -> SeenRun:
    verdict = {
        "run": run,
        "result": "pass",
        "target": "simulated",
        "fleet": {"result": fleet, "failing": [] if fleet == "pass" else ["inventory.nodes"]},
        "nodes": {
            n: {"result": r if isinstance(r, str) else "pass", "failing": [], "waivedChecks": [], "carriedFrom": None}
            for n, r in nodes.items()
        },
        "findings": [],
        **extra,
    }
    for n, r in nodes.items():
        if isinstance(r, dict):  # a waived finding on the node, with its waiver
            verdict["nodes"][n]["waivedChecks"] = ["straggler.compute.gemm.bf16"]
            verdict["findings"].append(
                {"check": "straggler.compute.gemm.bf16", "node": n, "gpu": 6, "status": "waived", "waiver": r}
            )
    # the waivers as the run's own inputs state them: by default what the verdict quotes
    terms = signed if signed is not None else {r["id"]: r for r in nodes.values() if isinstance(r, dict)}
    # the keys of a verdict these tests do not read, so that it parses as the typed Verdict
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    verdict |= {"schema": "gpucert.io/verdict/v3", "spec": "s", "coverage": {"required": 0, "ran": 0, "complete": True}}
    verdict |= {"summary": {"nodes": len(nodes), "gpus": 0, "checks": 0, **counts}}
    verdict["fleet"] |= counts
    for v in verdict["nodes"].values():
        v |= counts
    typed = parse_verdict(verdict, run)
    return SeenRun(RunFolder(Path(run)), typed, f"sha256:{run}", ["SHA256:vendor"], started, terms)


WAIVER = {"id": "waivers[0]", "check": "straggler.compute.gemm.bf16", "expires": "2027-03-01", "reason": "PO 4411"}


def test_the_latest_run_per_node_wins_and_says_how_it_passed() -> None:
    first = seen("r1", "2027-01-01T00:00:00Z", {"n1": "pass", "n2": "fail", "n3": "fail", "n4": "fail"})
    retest = seen("r2", "2027-01-05T00:00:00Z", {"n1": "pass", "n2": "pass", "n3": WAIVER, "n4": "fail"})
    recert = seen("r3", "2027-01-09T00:00:00Z", {"n4": "pass"}, recertify={"node": "n4"})
    rec = build_record([first, retest, recert], expected=4, spec="s", now=NOW, id_="a")
    status = {n: v["status"] for n, v in rec["nodes"].items()}
    assert status == {"n1": "passed", "n2": "repaired", "n3": "waived", "n4": "repaired"}
    assert rec["nodes"]["n4"]["run"] == "r3"
    assert rec["nodes"]["n1"]["run"] == "r2"
    assert [h["run"] for h in rec["nodes"]["n4"]["history"]] == ["r1", "r2", "r3"]
    assert rec["result"] == "pass", rec["problems"]
    assert rec["totals"] == {"expected": 4, "nodes": 4, "passed": 1, "repaired": 2, "waived": 1, "failed": 0}
    (w,) = rec["waivers"]
    assert w["covers"] == ["straggler.compute.gemm.bf16@n3/gpu6"]
    assert w["inForce"] is True
    assert rec["fleet"] == {"run": "r2", "result": "pass", "failing": []}  # a recertification is not the fleet


def test_an_acceptance_fails_on_a_failed_node_a_missing_node_an_expired_waiver_or_the_fleet() -> None:
    runs = [seen("r1", "2027-01-01T00:00:00Z", {"n1": "pass", "n2": "fail"})]
    rec = build_record(runs, expected=3, spec="s", now=NOW, id_="a")
    assert rec["result"] == "fail"
    assert rec["nodes"]["n2"]["status"] == "failed"
    assert any("cover 2 nodes; the spec expects 3" in p for p in rec["problems"])
    late = NOW.replace(year=2027, month=3, day=2)
    rec = build_record([seen("r1", "t", {"n1": WAIVER})], expected=1, spec="s", now=late, id_="a")
    assert rec["nodes"]["n1"]["status"] == "failed"
    assert "expired on 2027-03-01" in rec["nodes"]["n1"]["why"]
    assert rec["waivers"][0]["inForce"] is False
    assert rec["result"] == "fail"
    rec = build_record([seen("r1", "t", {"n1": "pass"}, fleet="fail")], expected=1, spec="s", now=NOW, id_="a")
    assert rec["result"] == "fail"
    assert "cluster's own checks of r1 did not pass" in rec["problems"][0]
    only = [seen("r3", "t", {"n1": "pass"}, recertify={"node": "n1"})]
    rec = build_record(only, expected=1, spec="s", now=NOW, id_="a")
    assert rec["result"] == "fail"
    assert "no run certifies the cluster as a whole" in rec["problems"][0]


def test_a_waivers_terms_are_the_signed_inputs_not_the_verdicts_quote() -> None:
    """Issue 23 item 5: the verdict quotes a waiver; the run's inputs/waivers.yaml is what the parties signed."""
    late = NOW.replace(year=2027, month=3, day=2)
    quoted = {**WAIVER, "expires": "2099-12-31", "reason": "whatever"}
    rec = build_record(
        [seen("r1", "t", {"n1": quoted}, signed={"waivers[0]": WAIVER})], expected=1, spec="s", now=late, id_="a"
    )
    assert rec["nodes"]["n1"]["status"] == "failed"
    assert "expired on 2027-03-01" in rec["nodes"]["n1"]["why"]
    assert rec["waivers"][0]["expires"] == "2027-03-01"
    assert rec["waivers"][0]["reason"] == "PO 4411"
    assert rec["result"] == "fail"
    # a waiver the run's inputs do not hold covers nothing
    rec = build_record([seen("r1", "t", {"n1": WAIVER}, signed={})], expected=1, spec="s", now=NOW, id_="a")
    assert rec["nodes"]["n1"]["status"] == "failed"
    assert "not in that run's signed waivers" in rec["nodes"]["n1"]["why"]
    assert rec["waivers"][0]["inForce"] is False


class SameNodes:
    """A target whose nodes answer the identity read as they were measured."""

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        for n in nodes:
            sink(evidence(n))


def test_a_retest_of_a_retest_reads_its_sources_record_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each carried node says where it was first measured, from the source's own re-test record: read once, not
    once a node (a 1,024-node record takes 7.5 ms to read: 7.7 s of a re-test of a re-test, issue 28)."""
    names = ["n1", "n2", "n3"]
    src = source(tmp_path, dict.fromkeys(names, "pass"))
    first = {n: Carried(run="run0", measured_in="run0", file=f"evidence/{n}.json", sha256="0") for n in names[:2]}
    src.folder.write_retest(RetestRecord(source=RetestSource(run="run0"), carried=first).to_json())
    src.folder.envelope_path.write_text("{}")
    folder = RunFolder(tmp_path / "run2")
    folder.path.mkdir()
    folder.write_stack(stack(dict.fromkeys(names, "570.124.06")))
    reads: list[Path] = []
    real = RunFolder.read_retest

    def counted(self: RunFolder) -> dict[str, Any] | None:
        reads.append(self.path)
        return real(self)

    monkeypatch.setattr(RunFolder, "read_retest", counted)
    spec = SimpleNamespace(
        acceptance=SimpleNamespace(max_evidence_age_s=None, max_evidence_age=None),
        certify=SimpleNamespace(dcgm=SimpleNamespace(level=1)),
        pools=[],  # no fabric: no pairs to carry
    )
    inventory = Inventory("simulated", tuple(Node(n, 2, "H100", 2, True) for n in names))
    assert prepare_retest(cast(Any, SameNodes()), inventory, cast(Any, spec), folder, src) == {}
    assert reads.count(src.folder.path) == 1
    record = read_retest_record(folder)
    assert record is not None
    assert {n: c.measured_in for n, c in record.carried.items()} == {"n1": "run0", "n2": "run0", "n3": "run1"}
