"""The simulated fabric: a healthy fleet's raw fabric observations, and each fabric fault changing exactly the
observations it names and nothing else (the same fleet and seed measured with and without it, every field
compared). The evaluator must then find the fault from those observations alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.evaluate.stats import median
from gpucert.measure.evidence import FabricEvidence, NodeEvidence
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.plan.pairs import rounds
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe, load_spec
from gpucert.spec.simulated_fleet import load_fleet

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"
NODES = [f"gpu-node-{i}" for i in range(1, 17)]
FABRIC = {"rails": 8, "rateGbps": 400, "racks": {"label": "nvidia.com/gpu.clique", "size": 8}}
PLAN = MeasurePlan("r", (Probe.HEALTH,), 2)


def _fleet(tmp_path: Path, faults: list[dict[str, Any]], fabric: dict[str, Any] | None = None) -> Path:
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "t"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": len(NODES), "gpusPerNode": 8},
        "seed": 7,
        "fabric": fabric or FABRIC,
        "faults": faults,
    }
    path = tmp_path / f"fleet-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def target(tmp_path: Path, faults: list[dict[str, Any]] = ()) -> SimulatedTarget:  # type: ignore[assignment]
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    fleet = load_fleet(_fleet(tmp_path, list(faults)), spec)
    return SimulatedTarget(spec, fleet, {"H100-SXM5-80GB": load_baseline(BASELINE)})


def observations(t: SimulatedTarget) -> dict[str, Any]:
    """Every node's evidence and every pair's (the full round-robin) and the all-node collective, flattened to
    path -> value, times left out (they are the clock's)."""
    docs: dict[str, Any] = {n: t.measure_node(n, PLAN).model_dump(mode="json") for n in NODES}
    pairs = [list(p) for rnd in rounds(NODES) for p in rnd]
    docs |= {
        " + ".join(p): f.model_dump(mode="json") for p, f in zip(pairs, t.measure_fabrics(pairs, PLAN), strict=True)
    }
    docs["all"] = t.measure_fabrics([NODES], PLAN)[0].model_dump(mode="json")
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k not in ("started", "finished"):
                    walk(f"{prefix}.{k}", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(f"{prefix}[{i}]", v)
        else:
            flat[prefix] = value

    for name, doc in docs.items():
        walk(name, doc)
    return flat


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return observations(target(tmp_path_factory.mktemp("healthy")))


def test_a_healthy_fabric_reads_as_a_healthy_fabric(tmp_path: Path) -> None:
    t = target(tmp_path)
    ev = t.measure_node("gpu-node-1", PLAN)
    assert ev.fabric is not None
    assert [(p.key, p.state, p.phys_state, p.rate_gbps) for p in ev.fabric.ports][:2] == [
        ("mlx5_0/1", "4: ACTIVE", "5: LinkUp", 400.0),
        ("mlx5_1/1", "4: ACTIVE", "5: LinkUp", 400.0),
    ]
    assert ev.fabric.ports[0].rate == "400 Gb/sec (4X NDR)"
    window = ev.fabric.counters
    assert window is not None
    assert window.seconds() == 1800.0
    for port in ev.fabric.ports:
        deltas = window.deltas(port.key)
        assert deltas["link_downed"] == deltas["symbol_error"] == deltas["local_link_integrity_errors"] == 0
        assert deltas["port_xmit_data"] > 0  # the window carried traffic
    # each GPU's rail NIC under its own PCIe switch, the other socket's NICs across the CPUs
    relation = {(a.gpu, a.hca): a.relation for a in ev.fabric.affinity}
    assert all(relation[(g, f"mlx5_{g}")] == "PIX" for g in range(8))
    assert relation[(0, "mlx5_5")] == "SYS"
    assert relation[(0, "mlx5_1")] == "NODE"
    assert {a.pci_bus_id for a in ev.fabric.affinity if a.gpu == 0} == {"0000:18:00.0"}  # the GPU's own address
    assert ev.fabric.gdr is not None
    assert ev.fabric.gdr.peermem == ["/sys/module/nvidia_peermem/version"]
    labels = t.labels("gpu-node-9")
    assert labels["nvidia.com/gpu.clique"] == "rack-2"

    pair = t.measure_fabrics([["gpu-node-1", "gpu-node-2"]], PLAN)[0]
    assert [r.rail for r in pair.rdma] == list(range(8))
    assert all(r.error is None and 370 < median(r.samples) < 400 for r in pair.rdma)  # ~96% of 400 Gb/s
    assert pair.transport is not None
    assert pair.transport.network == "IB"
    assert {(c.transport, c.gdr) for c in pair.transport.channels} == {("NET/IB", True)}
    assert len(pair.transport.devices) == 16  # 8 per node


def test_a_fleet_without_a_fabric_reads_none(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    doc = yaml.safe_load(_fleet(tmp_path, []).read_text())
    del doc["fabric"]
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(doc))
    t = SimulatedTarget(spec, load_fleet(tmp_path / "plain.yaml", spec), {"H100-SXM5-80GB": load_baseline(BASELINE)})
    assert t.measure_node("gpu-node-1", PLAN).fabric is None
    pair = t.measure_fabrics([["gpu-node-1", "gpu-node-2"]], PLAN)[0]
    assert pair.rdma == []
    assert pair.transport is None


N3 = r"gpu-node-3"
PAIR_N3 = r"(gpu-node-3 \+ gpu-node-\d+|gpu-node-\d+ \+ gpu-node-3)"
RAIL2_RDMA = rf"{PAIR_N3}\.rdma\[2\]"
FAULTS = {
    "port-down": (
        {"kind": "port-down", "node": "gpu-node-3", "rail": 2},
        # the port's state and rate, its traffic, the rail's perftest between the node and every peer, NCCL's
        # device list and channel devices wherever the node is
        [
            rf"{N3}\.fabric\.ports\[2\]\.(state|phys_state|rate|rate_gbps)",
            rf"{N3}\.fabric\.counters\.after\.mlx5_2/1\.port_(xmit|rcv)_(data|packets)",
            rf"{N3}\.fabric\.counters\.after\.mlx5_2/1\.port_xmit_discards",
            rf"{RAIL2_RDMA}\.(samples|peak)\[\d\]",
            rf"{RAIL2_RDMA}\.error",
            rf"({PAIR_N3}|all)\.transport\..*",
        ],
    ),
    "port-rate": (
        {"kind": "port-rate", "node": "gpu-node-3", "rail": 2, "gbps": 200},
        [rf"{N3}\.fabric\.ports\[2\]\.(rate|rate_gbps)", rf"{RAIL2_RDMA}\.(samples|peak)\[\d\]"],
    ),
    "symbol-errors": (
        {"kind": "symbol-errors", "node": "gpu-node-3", "rail": 2, "perHour": 5000},
        [rf"{N3}\.fabric\.counters\.after\.mlx5_2/1\.symbol_error"],
    ),
    "link-downed": (
        {"kind": "link-downed", "node": "gpu-node-3", "rail": 2, "count": 2},
        [rf"{N3}\.fabric\.counters\.after\.mlx5_2/1\.link_downed"],
    ),
    "gdr-off": (
        {"kind": "gdr-off", "node": "gpu-node-3"},
        [
            rf"{N3}\.fabric\.gdr\..*",
            rf"{PAIR_N3}\.rdma\[\d\]\.(samples|peak)\[\d\]",
            rf"{PAIR_N3}\.rdma\[\d\]\.error",
            rf"({PAIR_N3}|all)\.transport\.channels\[\d+\]\.gdr",
        ],
    ),
    "nccl-socket": (
        {"kind": "nccl-socket", "node": "gpu-node-3"},
        [rf"({PAIR_N3}|all)\.transport\..*"],
    ),
    "nic-placement": (
        {"kind": "nic-placement", "node": "gpu-node-3", "rail": 2},
        [
            rf"{N3}\.fabric\.affinity\[\d+\]\.relation",
            rf"{N3}\.fabric\.ports\[2\]\.(pci_address|numa_node)",
            rf"{N3}\.fabric\.pci\..*",
        ],
    ),
    "slow-rail": (
        {"kind": "slow-rail", "node": "gpu-node-3", "peer": "gpu-node-11", "rail": 2, "factor": 0.7},
        [r"gpu-node-3 \+ gpu-node-11\.rdma\[2\]\.(samples|peak)\[\d\]"],
    ),
    "rack-link": (
        {"kind": "rack-link", "node": "gpu-node-1", "peer": "gpu-node-9", "factor": 0.6},
        [r"gpu-node-([1-8]) \+ gpu-node-(9|1[0-6])\.rdma\[\d\]\.(samples|peak)\[\d\]"],
    ),
}


@pytest.mark.parametrize("name", FAULTS)
def test_a_fabric_fault_changes_its_observations_and_nothing_else(
    name: str, healthy: dict[str, Any], tmp_path: Path
) -> None:
    fault, allowed = FAULTS[name]
    faulty = observations(target(tmp_path, [fault]))
    changed = sorted(k for k in healthy.keys() | faulty.keys() if healthy.get(k, "absent") != faulty.get(k, "absent"))
    assert changed, f"{name} changed nothing"
    stray = [k for k in changed if not any(re.fullmatch(p, k) for p in allowed)]
    assert stray == [], f"{name} changed more than its observations: {stray[:5]}"


def test_the_faults_read_as_the_real_tools_would_show_them(tmp_path: Path) -> None:
    faults = [spec for spec, _ in FAULTS.values() if spec["kind"] in ("port-down", "symbol-errors")]
    t = target(tmp_path, [{**faults[0], "node": "gpu-node-4"}, faults[1]])
    down = t.measure_node("gpu-node-4", PLAN).fabric
    assert down is not None
    assert (down.ports[2].state, down.ports[2].phys_state) == ("1: DOWN", "3: Disabled")
    errs = t.measure_node("gpu-node-3", PLAN).fabric
    assert errs is not None
    assert errs.counters is not None
    assert errs.counters.deltas("mlx5_2/1")["symbol_error"] == 2500  # 5,000 an hour over the 30-minute window
    pair = t.measure_fabrics([["gpu-node-4", "gpu-node-5"]], PLAN)[0]
    assert pair.rdma[2].samples == []
    assert pair.rdma[2].error is not None
    assert "Unable to Connect the HCA's through the link" in pair.rdma[2].error
    assert pair.transport is not None
    assert [d.hca for d in pair.transport.devices if d.node == "gpu-node-4"] == [
        f"mlx5_{r}" for r in range(8) if r != 2
    ]


@pytest.mark.parametrize(
    ("fault", "key", "message"),
    [
        ({"kind": "port-down", "node": "gpu-node-3", "rail": 8}, r"faults\[0\]\.rail", "rails are 0..7"),
        (
            {"kind": "slow-rail", "node": "gpu-node-3", "peer": "gpu-node-3", "rail": 1, "factor": 0.5},
            r"faults\[0\]\.peer",
            "not another node",
        ),
        (
            {"kind": "rack-link", "node": "gpu-node-1", "peer": "gpu-node-2", "factor": 0.5},
            r"faults\[0\]\.peer",
            "two racks",
        ),
    ],
)
def test_a_fabric_fault_that_cannot_happen_is_refused(
    tmp_path: Path, fault: dict[str, Any], key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{key}: .*{message}"):
        load_fleet(_fleet(tmp_path, [fault]))


def test_a_fabric_fault_needs_a_fabric(tmp_path: Path) -> None:
    doc = yaml.safe_load(_fleet(tmp_path, [{"kind": "gdr-off", "node": "gpu-node-1"}]).read_text())
    del doc["fabric"]
    (tmp_path / "nofabric.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"faults\[0\]\.kind: a gdr-off fault needs the fleet's `fabric` section"):
        load_fleet(tmp_path / "nofabric.yaml")


def test_evidence_of_a_simulated_fabric_reads_back(tmp_path: Path) -> None:
    t = target(tmp_path, [{"kind": "gdr-off", "node": "gpu-node-1"}])
    ev = t.measure_node("gpu-node-1", PLAN)
    assert NodeEvidence.model_validate(json.loads(ev.model_dump_json(by_alias=True)), strict=True) == ev
    pair = t.measure_fabrics([["gpu-node-1", "gpu-node-2"]], PLAN)[0]
    assert FabricEvidence.model_validate(json.loads(pair.model_dump_json(by_alias=True)), strict=True) == pair


def test_an_image_without_the_rdma_tools_is_the_preflight_finding(tmp_path: Path) -> None:
    t = target(tmp_path, [{"kind": "preflight", "node": "gpu-node-2", "step": "rdma"}])
    ev = t.measure_node("gpu-node-2", PLAN)
    assert not ev.collected
    failed = ev.preflight_failed
    assert [(s.step, s.detail) for s in failed] == [("rdma", "FileNotFoundError: ib_write_bw not found on PATH")]
    assert failed[0].fix is not None
    assert "perftest" in failed[0].fix
    assert all(s.ok for s in ev.preflight[:-1])


def test_the_example_fabric_fleet_loads_with_its_three_faults() -> None:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    fleet = load_fleet(ROOT / "examples" / "fleets" / "h100-16x8-fabric.yaml", spec)
    assert fleet.fabric is not None
    assert fleet.fabric.racks is not None
    assert [f.kind for f in fleet.faults] == ["port-rate", "symbol-errors", "rack-link"]
    assert {fleet.fabric.racks.of(i) for i in range(16)} == {"rack-1", "rack-2"}
