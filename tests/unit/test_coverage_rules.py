"""The plan (what a spec requires) and the verdict's rules over it: pure functions, no pytest session."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.required import plan_checks
from gpucert.report.html import natural_key
from gpucert.report.verdict import Outcome, build_verdict
from gpucert.spec.cluster import load_spec
from gpucert.spec.names import NameError_, check_file_stem, check_node_name, inside

ROOT = Path(__file__).resolve().parents[2]


def spec_with(tmp_path: Path, **certify: object) -> object:
    doc = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    doc["certify"].update(certify)
    doc["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    doc["target"]["fleet"] = str(ROOT / "examples" / "fleets" / "h100-4x8-faulty.yaml")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    return load_spec(tmp_path / "spec.yaml")


NODES = ["n1", "n2", "n3", "n4"]
COMPONENTS = ["driver", "container-toolkit"]


def test_the_plan_counts_checks_nodes_gpus_metrics_and_dcgm_tests(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, multinode=None)
    plan = plan_checks(spec, NODES, ["configure", "certify"], components=COMPONENTS)  # type: ignore[arg-type]
    per_gpu = 7 + 3 + 1 + 5 + 2 + 1  # health (with nvlink), DCGM level 2, memory, GEMM dtypes, PCIe directions, P2P
    # reachable, gpus, product, skew, ordering, compat, kubernetes, runtime, and a version per pinned component
    per_node = 8 + len(COMPONENTS)
    configure = 1 + len(NODES) * per_node
    node_level = 9  # each per-GPU metric: the node as a whole against the other nodes
    preflight = 1  # probe.preflight: the probe pod could run the probes
    combined = 1  # straggler.combined: each GPU on every per-GPU metric at once
    assert len(plan) == configure + len(NODES) * (8 * (per_gpu + combined) + 1 + node_level + preflight)
    assert CheckKey("probe.preflight", "n2") in plan
    assert CheckKey("dcgm.memory", "n3", 7) in plan
    assert CheckKey("straggler.memory.bandwidth", "n3") in plan
    assert CheckKey("straggler.combined", "n3", 5) in plan
    assert CheckKey("stack.version", "n2", None, "driver") in plan
    assert ("nccl.all_reduce.multinode", "certify.multinode is not set: no all-reduce across nodes was asked") in (
        plan.not_required
    )


def test_probes_the_spec_leaves_out_are_not_required_and_say_why(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, probes=["health"], multinode=None)
    plan = plan_checks(spec, NODES, ["certify"], components=[])  # type: ignore[arg-type]
    assert {k.check for k in plan.required} == {
        "probe.preflight",
        *(f"health.{c}" for c in ("ecc", "remapped_rows", "pcie_link", "throttle", "xid", "temperature", "nvlink")),
    }
    assert ("compute.*", "probe 'compute' is not in certify.probes") in plan.not_required


def test_pairs_need_four_nodes_on_the_ring(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, multinode={"pairs": True, "maxNodes": 3})
    plan = plan_checks(spec, NODES, ["certify"], components=[])  # type: ignore[arg-type]
    assert CheckKey("nccl.all_reduce.multinode") in plan
    assert not any(k.check == "straggler.nccl.all_reduce.multinode" for k in plan.required)
    assert any("it takes 4" in why for _, why in plan.not_required)


def keys(*names: str) -> list[CheckKey]:
    return [CheckKey("node.reachable", n) for n in names]


def verdict(plan_keys: list[CheckKey], outcomes: dict[CheckKey, Finding], selected: set[CheckKey] | None) -> dict:
    from gpucert.plan.required import Plan

    plan = Plan(("configure",), frozenset(plan_keys))
    return build_verdict(
        run="r",
        spec="s",
        target="simulated",
        nodes=sorted({k.node for k in plan_keys if k.node}),
        gpus=0,
        plan=plan,
        outcomes={k: Outcome(f) for k, f in outcomes.items()},
        selected=selected,
    ).to_json()


def ok(key: CheckKey) -> Finding:
    return Finding(key.check, CheckStatus.PASS, key.node, key.gpu)


def test_pass_needs_every_required_check() -> None:
    a, b = keys("a", "b")
    assert verdict([a, b], {a: ok(a), b: ok(b)}, {a, b})["result"] == "pass"
    v = verdict([a, b], {a: ok(a)}, {a})
    assert (v["result"], v["coverage"]["deselected"], v["coverage"]["notReached"]) == ("incomplete", 1, 0)
    v = verdict([a, b], {a: ok(a)}, {a, b})
    assert (v["result"], v["coverage"]["deselected"], v["coverage"]["notReached"]) == ("incomplete", 0, 1)
    assert v["nodes"]["a"]["result"] == "pass"
    assert v["nodes"]["b"]["result"] == "incomplete"
    # a failure outranks incompleteness
    v = verdict([a, b], {a: Finding(a.check, CheckStatus.FAIL, "a")}, {a})
    assert v["result"] == "fail"


def test_a_skip_counts_only_when_its_cause_failed() -> None:
    cause, dependent = CheckKey("node.reachable", "a"), CheckKey("health.ecc", "a", 0)
    skip = Finding(dependent.check, CheckStatus.SKIP, "a", 0, "not measured", cause=str(cause))
    failed = Finding(cause.check, CheckStatus.FAIL, "a")
    v = verdict([cause, dependent], {cause: failed, dependent: skip}, {cause, dependent})
    assert (v["result"], v["summary"]["skipped"], v["coverage"]["complete"]) == ("fail", 1, True)
    # the cause passed: the skip was wrong, and it is an error in the verdict
    v = verdict([cause, dependent], {cause: ok(cause), dependent: skip}, {cause, dependent})
    assert v["result"] == "fail"
    assert [f["status"] for f in v["findings"]] == ["error"]
    assert "which did not fail" in v["findings"][0]["message"]
    # the cause never ran (deselected): the dependent's skip settles nothing
    v = verdict([cause, dependent], {dependent: skip}, {dependent})
    assert (v["result"], v["coverage"]["skippedWithoutCause"]) == ("incomplete", 1)


def test_node_names_and_paths_stay_inside(tmp_path: Path) -> None:
    assert check_node_name("gpu-node-1.rack-2") == "gpu-node-1.rack-2"
    for bad in ("../../x", "Gpu-Node", "a/b", "", "-a", "a" * 254, "node_1"):
        with pytest.raises(NameError_):
            check_node_name(bad)
    for bad in ("..", "../etc", "a/b", ""):
        with pytest.raises(NameError_):
            check_file_stem(bad)
    assert inside(tmp_path, "a.json") == (tmp_path / "a.json").resolve()
    with pytest.raises(NameError_):
        inside(tmp_path, "../a.json")
    (tmp_path / "out").symlink_to("/etc")
    with pytest.raises(NameError_):
        inside(tmp_path, "out/passwd")
    # one plain name is taken as it stands only where it is no symlink: a node's file that is one is resolved
    (tmp_path / "gpu-node-1.json").symlink_to("/etc/passwd")
    with pytest.raises(NameError_, match="leads outside"):
        inside(tmp_path, "gpu-node-1.json")
    (tmp_path / "gpu-node-2.json").symlink_to("a.json")  # a link that stays inside is its target
    assert inside(tmp_path, "gpu-node-2.json") == (tmp_path / "a.json").resolve()


def test_natural_sort() -> None:
    names = ["gpu-node-10", "gpu-node-2", "gpu-node-1", "gpu-node-100"]
    assert sorted(names, key=natural_key) == ["gpu-node-1", "gpu-node-2", "gpu-node-10", "gpu-node-100"]


def test_a_node_is_compared_with_the_other_nodes_from_four_and_says_why_not_below(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, multinode=None)
    two = plan_checks(spec, NODES[:2], ["certify"], components=[])  # type: ignore[arg-type]
    assert not any(k.check.startswith("straggler.") and k.gpu is None for k in two.required)
    assert CheckKey("straggler.combined", "n2", 7) in two  # a GPU against its own node's peers: any node count
    why = dict(two.not_required)["straggler.<metric>@<node>"]
    assert "2 node(s): a node is compared with the others as a whole from 4" in why
    # recertifying one node against three from the fleet's latest evidence: four to compare
    alone = plan_checks(spec, ["n3"], ["certify"], components=[], fleet_peers=3)  # type: ignore[arg-type]
    assert CheckKey("straggler.compute.gemm.bf16", "n3") in alone
    assert "straggler.<metric>@<node>" not in dict(alone.not_required)


# ---- a verdict's counts add up from its own checks (issue 23 item 5) ---------------------------------------------


def _mixed() -> dict:
    """A verdict gpucert writes: passes, a failure and an error on nodes, a waived failure, a skip, a fleet check."""
    from gpucert.plan.required import Plan

    reach = [CheckKey("node.reachable", n) for n in ("a", "b", "c")]
    ecc = [CheckKey("health.ecc", n, 0) for n in ("a", "b", "c")]
    fleet = CheckKey("inventory.nodes")
    findings = {
        reach[0]: ok(reach[0]),
        reach[1]: ok(reach[1]),
        reach[2]: Finding("node.reachable", CheckStatus.FAIL, "c", None, "down"),
        ecc[0]: Finding("health.ecc", CheckStatus.ERROR, "a", 0, "unreadable"),
        ecc[1]: Finding("health.ecc", CheckStatus.WAIVED, "b", 0, "accepted", waiver="waivers[0]"),
        ecc[2]: Finding("health.ecc", CheckStatus.SKIP, "c", 0, "down", cause=str(reach[2])),
        fleet: Finding("inventory.nodes", CheckStatus.FAIL, None, None, "3 of 4"),
    }
    plan = Plan(("certify",), frozenset(findings))
    return build_verdict(
        run="r",
        spec="s",
        target="simulated",
        nodes=["a", "b", "c"],
        gpus=3,
        plan=plan,
        outcomes={k: Outcome(f) for k, f in findings.items()},
        selected=set(findings),
    ).to_json()


def test_every_verdict_gpucert_writes_adds_up() -> None:
    from gpucert.report.verdict import count_problems, verdict_problems

    v = _mixed()
    assert v["summary"] | {} == {
        "nodes": 3,
        "gpus": 3,
        "checks": 7,
        "passed": 2,
        "failed": 2,
        "errors": 1,
        "skipped": 1,
        "waived": 1,
    }
    assert count_problems(v) == []
    assert verdict_problems(v) == []
    a, b = keys("a", "b")
    for made in (verdict([a, b], {a: ok(a), b: ok(b)}, {a, b}), verdict([a, b], {a: ok(a)}, {a})):
        assert count_problems(made) == []


def _drop_findings(v: dict) -> None:
    v["findings"] = [f for f in v["findings"] if f["node"] != "a"]
    v["summary"]["errors"] -= 1


def _waive_the_failure(v: dict) -> None:
    f = next(f for f in v["findings"] if f["node"] == "c")
    f["status"] = "waived"
    v["summary"].update(failed=v["summary"]["failed"] - 1, waived=v["summary"]["waived"] + 1)


def _node_passes(v: dict) -> None:
    v["nodes"]["c"].update(result="pass")


def _summary_only(v: dict) -> None:
    v["summary"].update(failed=0, errors=0, passed=v["summary"]["passed"] + 3)


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (_drop_findings, "nodes.a counts 1 errors, its findings list 0"),
        (_waive_the_failure, "nodes.c counts 1 failed, its findings list 0"),
        (_node_passes, "nodes.c is pass with 1 failed or errored checks"),
        (_summary_only, "the summary's counts are not its checks': passed 5 (its groups add up to 2)"),
        (lambda v: v["summary"].update(checks=99), "summary.checks is 99"),
        (lambda v: v["nodes"]["b"].update(waived=-1), "nodes.b's counts are not whole numbers"),
        (lambda v: v["nodes"]["b"].update(waived=True), "nodes.b's counts are not whole numbers"),
        (lambda v: v["nodes"]["b"].pop("skipped"), "nodes.b has no count of skipped"),
        (lambda v: v["fleet"].update(failed=0, result="pass"), "fleet counts 0 failed, its findings list 1"),
    ],
)
def test_a_verdict_whose_counts_do_not_add_up_is_refused(tamper: object, words: str) -> None:
    from gpucert.report.verdict import verdict_problems

    v = _mixed()
    tamper(v)  # type: ignore[operator]
    problems = verdict_problems(v)
    assert any(words in p for p in problems), problems
