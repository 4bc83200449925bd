"""Spec, fleet and baseline documents: typed, unknown keys rejected, errors naming file, key and line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import ClusterSpec, load_spec
from gpucert.spec.simulated_fleet import load_fleet

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def demo_text() -> str:
    return (ROOT / "examples" / "demo.yaml").read_text()


def test_demo_spec_loads_and_resolves_relative_paths() -> None:
    spec = load_spec(ROOT / "examples" / "demo.yaml")
    assert spec.metadata.name == "demo-h100-pod-a"
    (pool,) = spec.pools  # a v1alpha1 spec is one pool that selects every node
    assert (pool.name, pool.node_selector, pool.expect.gpus_per_node) == ("default", {}, 8)
    assert spec.resolve(pool.baseline) == ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"
    assert [c.name for c in spec.stack.components][:2] == ["driver", "cuda"]


def test_unknown_key_names_file_key_and_line(tmp_path: Path) -> None:
    text = demo_text().replace("  dcgm: {level: 2}", "  dcgm: {level: 2, levle: 3}")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_spec(path)
    e = exc.value
    assert e.path == path
    assert e.key == "certify.dcgm.levle"
    assert e.line == text.splitlines().index("  dcgm: {level: 2, levle: 3}") + 1
    assert "unknown key" in str(e)
    assert str(e).startswith(f"{path}:{e.line}: certify.dcgm.levle:")


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, demo_text().replace("gpusPerNode: 8", "gpusPerNode: eight"))
    with pytest.raises(ConfigError, match=r"expect\.gpusPerNode: .*eight"):
        load_spec(path)


def test_target_union_error_names_the_document_key(tmp_path: Path) -> None:
    path = write(tmp_path, demo_text().replace("  fleet: fleets/h100-4x8-faulty.yaml\n", "  flet: x.yaml\n"))
    with pytest.raises(ConfigError) as exc:
        load_spec(path)
    assert exc.value.key in ("target.flet", "target.fleet")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_spec(tmp_path / "nope.yaml")


def test_yaml_syntax_error_gives_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "apiVersion: gpucert.io/v1alpha1\nkind: [ClusterSpec\nmetadata: {}\n")
    with pytest.raises(ConfigError, match="YAML syntax error") as exc:
        load_spec(path)
    assert exc.value.line is not None


def test_bad_version_string_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, demo_text().replace('version: "570.124.06"', 'version: "latest"'))
    with pytest.raises(ConfigError, match=r"stack\.components\[0\]\.version"):
        load_spec(path)


def test_duplicate_component(tmp_path: Path) -> None:
    text = demo_text().replace(
        '    - {name: cuda, version: "12.8"}\n',
        '    - {name: cuda, version: "12.8"}\n    - {name: cuda, version: "12.9"}\n',
    )
    with pytest.raises(ConfigError, match="declared twice"):
        load_spec(write(tmp_path, text))


def test_fleet_fault_on_unknown_node_and_gpu(tmp_path: Path) -> None:
    base = (ROOT / "examples" / "fleets" / "h100-4x8.yaml").read_text()
    text = base + "faults:\n  - {kind: ecc, node: gpu-node-9, gpu: 1, uncorrected: 1}\n"
    with pytest.raises(ConfigError, match=r"faults\[0\]\.node: no node 'gpu-node-9'") as exc:
        load_fleet(write(tmp_path, text, "fleet.yaml"))
    assert exc.value.line == len(text.splitlines())
    text = base + "faults:\n  - {kind: ecc, node: gpu-node-1, gpu: 8, uncorrected: 1}\n"
    with pytest.raises(ConfigError, match=r"faults\[0\]\.gpu: GPU 8 does not exist"):
        load_fleet(write(tmp_path, text, "fleet.yaml"))


def test_unknown_fault_kind(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "fleets" / "h100-4x8.yaml").read_text() + "faults:\n  - {kind: melted, node: x}\n"
    with pytest.raises(ConfigError, match=r"faults\[0\]"):
        load_fleet(write(tmp_path, text, "fleet.yaml"))


@pytest.mark.parametrize("sku", ["H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-80GB"])
def test_committed_baselines_load_and_cite_sources(sku: str) -> None:
    b = load_baseline(ROOT / "baselines" / "gpus" / f"{sku}.yaml")
    assert b.sku == sku
    assert set(b.metrics) >= {"memory.bandwidth", "compute.gemm.bf16", "pcie.h2d", "p2p.bandwidth", "nccl.all_reduce"}
    assert all(len(m.source) > 20 for m in b.metrics.values())


def test_baseline_unknown_metric(tmp_path: Path) -> None:
    text = (
        (ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
        .read_text()
        .replace("  memory.bandwidth:", "  memory.bandwith:")
    )
    with pytest.raises(ConfigError, match=r"metrics\.memory\.bandwith: unknown metric"):
        load_baseline(write(tmp_path, text, "b.yaml"))


def _h100(change: object) -> dict:
    doc = yaml.safe_load((ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml").read_text())
    change(doc)  # type: ignore[operator]
    return doc


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        # issue 23 item 2: figures that would pass anything, refused by the check vocabulary's direction and limits
        (
            lambda d: d["metrics"]["memory.bandwidth"].update(tolerance=0.4),
            "metrics.memory.bandwidth.tolerance",
            "0.4 passes a GPU at 60% of the figure; at most 0.25",
        ),
        (lambda d: d["metrics"]["nccl.all_reduce"].update(tolerance=0.26), "metrics.nccl.all_reduce.tolerance", "0.25"),
        (
            lambda d: d["metrics"]["compute.gemm.bf16"].update(comparison="max"),
            "metrics.compute.gemm.bf16.comparison",
            "max would pass any GPU slower than the figure",
        ),
        (lambda d: d["metrics"]["p2p.bandwidth"].update(comparison="max"), "metrics.p2p.bandwidth.comparison", "min"),
        (lambda d: d["health"].update(applicationXids=[13, 79]), "health.applicationXids[1]", "XID 79 is a fault"),
        (lambda d: d["health"].update(applicationXids=[48]), "health.applicationXids[0]", "double-bit"),
        (lambda d: d["health"].update(applicationXids=[31, 95]), "health.applicationXids[1]", "uncontained memory"),
        (lambda d: d["health"].update(applicationXids=[74]), "health.applicationXids[0]", "NVLink"),
        (
            lambda d: d["metrics"]["pcie.h2d"].update(tolerance=0.5, loosened={"reason": "  ", "approvedBy": "x"}),
            "metrics.pcie.h2d.loosened.reason",
            "",
        ),
    ],
)
def test_a_baseline_that_would_pass_anything_is_refused(tmp_path: Path, change: object, key: str, words: str) -> None:
    path = write(tmp_path, yaml.safe_dump(_h100(change)), "b.yaml")
    with pytest.raises(ConfigError) as exc:
        load_baseline(path)
    assert exc.value.key == key, str(exc.value)
    assert words in str(exc.value)


def test_a_tolerance_loosened_on_purpose_says_why_and_who(tmp_path: Path) -> None:
    from gpucert.evaluate.rules.performance import Sampled, against_baseline
    from gpucert.evaluate.xids import APPLICATION_XIDS, HARDWARE_XIDS

    loosened = {"reason": "PCIe riser on this SKU trains at Gen4; agreed in PO 4411", "approvedBy": "buyer: j.doe"}
    doc = _h100(lambda d: d["metrics"]["pcie.h2d"].update(tolerance=0.5, loosened=loosened))
    b = load_baseline(write(tmp_path, yaml.safe_dump(doc), "b.yaml"))
    found = against_baseline("pcie.h2d", ("n1", 0), Sampled(30.0, 10, "GB/s"), b.metrics["pcie.h2d"])
    assert found.status.value == "pass"
    assert "[tolerance loosened on purpose: PCIe riser on this SKU" in found.message
    assert "approved by buyer: j.doe]" in found.message
    assert not set(APPLICATION_XIDS) & set(HARDWARE_XIDS)
    for sku in ("H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-80GB"):
        assert not set(load_baseline(ROOT / "baselines" / "gpus" / f"{sku}.yaml").health.application_xids) & set(
            HARDWARE_XIDS
        )


def test_json_schema_exports() -> None:
    schema = ClusterSpec.model_json_schema(by_alias=True)
    assert "apiVersion" in schema["properties"]
    assert schema["additionalProperties"] is False


POOLS = ROOT / "examples" / "pools.yaml"


def pools_error(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> ConfigError:
    doc = yaml.safe_load(POOLS.read_text())
    doc["target"]["fleet"] = str(ROOT / "examples" / "fleets" / "pools.yaml")
    for pool in doc["pools"]:
        pool["baseline"] = str(ROOT / "baselines" / "gpus" / Path(pool["baseline"]).name)
    edit(doc)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as exc:
        load_spec(path)
    return exc.value


def test_the_two_pool_example_loads_with_its_pools() -> None:
    spec = load_spec(POOLS)
    assert spec.pool_names == ["train", "infer"]
    infer = spec.stack_for("infer")
    assert (infer.component("driver").version, infer.component("cuda").version) == ("550.127.05", "12.4")  # type: ignore[union-attr]
    assert spec.stack_for("train").component("driver").version == "570.124.06"  # type: ignore[union-attr]
    assert spec.stragglers_for("infer").max_deviation == 0.04
    assert spec.stragglers_for("train").max_deviation == 0.05
    assert spec.selector_labels() == {"nvidia.com/gpu.product"}


@pytest.mark.parametrize(
    ("edit", "key", "says"),
    [
        (lambda d: d.update(expect={"nodes": 1, "gpusPerNode": 8, "gpuProduct": "x"}), "expect", "move it under pools"),
        (lambda d: d["certify"].update(baseline="b.yaml"), "certify.baseline", "pools[].baseline"),
        (lambda d: d.pop("pools"), "pools", "declare at least one pool"),
        (lambda d: d.update(apiVersion="gpucert.io/v1alpha1"), "pools", "needs apiVersion gpucert.io/v1alpha2"),
        (lambda d: d["pools"][1].update(name="train"), "pools[1].name", "declared twice"),
        (lambda d: d["pools"][1].update(nodeSelector={}), "pools[1].nodeSelector", "selects every node"),
        (
            lambda d: d["pools"][1].update(nodeSelector=dict(d["pools"][0]["nodeSelector"])),
            "pools[1].nodeSelector",
            "same nodes as pool 'train'",
        ),
        (
            lambda d: d["pools"][1]["stack"]["components"][0].update(name="drivr"),
            "pools[1].stack.components[0].name",
            "did you mean 'driver'?",
        ),
        (
            lambda d: d["certify"].update(multinode={"pools": {"trian": {}}}),
            "certify.multinode.pools.trian",
            "'trian' is not a pool of this spec (train, infer): did you mean 'train'?",
        ),
        (
            lambda d: d["certify"].update(multinode={"pools": {"train": {"maxNodes": 1}}}),
            "certify.multinode.pools.train.maxNodes",
            "out of range; write a whole number of at least 2",
        ),
        (lambda d: d["certify"].update(multinode={"pools": {}}), "certify.multinode.pools", "at least 1 item"),
        (
            lambda d: d["pools"][0].update(baseline="TODO: write one"),
            "pools[0].baseline",
            "TODO left by `gpucert init`",
        ),
        (lambda d: d["pools"][0].update(nodeSelectr={}), "pools[0].nodeSelectr", "did you mean nodeSelector?"),
    ],
)
def test_pool_mistakes_name_the_key(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], key: str, says: str
) -> None:
    e = pools_error(tmp_path, edit)
    assert e.key == key, str(e)
    assert says in str(e)
    assert "spec.yaml" in str(e)  # naming the file
    assert "\n" not in str(e)  # in one line


@pytest.mark.parametrize(
    ("edit", "key", "says"),
    [
        (lambda d: d.update(sku="H100-SXM5-80GB"), "sku", "not both"),
        (lambda d: d["pools"][1]["nodes"].update(namePrefix="h100-"), "pools[1].nodes.namePrefix", "would be in pools"),
        (lambda d: d["faults"][1].update(gpu=6), "faults[1].gpu", "GPU 6 does not exist on h200-2; GPUs are 0..3"),
        (lambda d: d.pop("pools"), "sku", "required key is missing"),
    ],
)
def test_fleet_pool_mistakes_name_the_key(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], key: str, says: str
) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "fleets" / "pools.yaml").read_text())
    edit(doc)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as exc:
        load_fleet(path)
    assert exc.value.key == key, str(exc.value)
    assert says in str(exc.value)


def test_a_v1alpha1_spec_refuses_a_multinode_pool_other_than_its_one(tmp_path: Path) -> None:
    """A v1alpha1 spec's one pool is `default`: `certify.multinode.pools: {train: {}}` named no pool of it, so the
    all-reduce was listed as not required and the run passed (hostile sweep of 93f6c9a, item 1)."""
    text = demo_text().replace("multinode: {pairs: true}", "multinode: {pairs: true, pools: {train: {}}}")
    with pytest.raises(ConfigError) as exc:
        load_spec(write(tmp_path, text))
    assert exc.value.key == "certify.multinode.pools.train", str(exc.value)
    assert "'train' is not a pool of this spec (default)" in str(exc.value)
    assert "\n" not in str(exc.value)
    named = demo_text().replace("multinode: {pairs: true}", "multinode: {pairs: true, pools: {default: {}}}")
    assert load_spec(write(tmp_path, named)).certify.multinode is not None  # its own pool's name still loads
