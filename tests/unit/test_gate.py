"""The static gate's parts: reading GPU Operator values and ClusterPolicies, the data tables, and the baseline
review, as pure functions."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.stack.gate import _loosened
from gpucert.stack.gate_data import DATA, Tables, in_range
from gpucert.stack.operator_values import read_cluster_policy, read_values

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "tests" / "fixtures" / "operator"


def versions(d: Any) -> dict[str, str | None]:
    return {c: x.version for c, x in d.components.items() if x.enabled}


def test_chart_values_give_each_components_version_and_the_release() -> None:
    d = read_values([OPERATOR / "values-v25.3.2.yaml", OPERATOR / "values-prod.yaml"])
    assert d.name == "values-v25.3.2.yaml+values-prod.yaml"
    assert d.release == "25.3.2"
    assert versions(d) == {
        "driver": "570.148.08",
        "container-toolkit": "1.17.8",
        "device-plugin": "0.17.3",
        "gpu-feature-discovery": "0.17.3",
        "dcgm-exporter": "4.2.3-4.1.3",
        "mig-manager": "0.12.2",
    }
    assert not d.components["dcgm"].enabled  # the chart's standalone host engine is off
    assert d.components["driver"].where == "values-v25.3.2.yaml: driver.version 570.148.08"


def test_a_later_values_file_wins(tmp_path: Path) -> None:
    (tmp_path / "bump.yaml").write_text("toolkit:\n  version: v1.17.9-ubuntu22.04\ndcgm:\n  enabled: true\n")
    d = read_values([OPERATOR / "values-v25.3.2.yaml", tmp_path / "bump.yaml"])
    assert d.components["container-toolkit"].version == "1.17.9"
    assert d.components["container-toolkit"].where == "bump.yaml: toolkit.version v1.17.9-ubuntu22.04"
    assert d.components["dcgm"].enabled
    assert d.components["dcgm"].version == "4.2.3"  # its image tag 4.2.3-1-ubuntu22.04 reads as 4.2.3


@pytest.mark.parametrize(
    ("driver", "problem"),
    [
        ({"usePrecompiled": True, "version": "535"}, "precompiled driver"),
        ({"nvidiaDriverCRD": {"enabled": True}}, "NVIDIADriver objects"),
        ({"image": "nvcr.io/nvidia/driver@sha256:" + "a" * 64}, "pinned by digest"),
        ({"version": "sha256:" + "b" * 64}, "pinned by digest"),
        ({"version": "latest"}, "is not a version"),
        # a tag beside a digest: the digest is what is pulled, the tag proves nothing
        ({"image": "nvcr.io/nvidia/driver:570.148.08@sha256:" + "c" * 64}, "pinned by digest"),
        ({"version": "570.148.08@sha256:" + "d" * 64}, "pinned by digest"),
        # a pre-release is not the release its numbers name
        ({"version": "570.148.08-rc.1"}, "pre-release"),
        ({"version": "570.148.08~pre1"}, "pre-release"),
        ({"image": "nvcr.io/nvidia/driver:v570.148.08-beta.2-ubuntu22.04"}, "pre-release"),
        # a bidi override or a control character after the numbers: no registry serves that tag (OCI tag grammar)
        ({"version": "570.148.08\u202e"}, "is not an image tag"),
        ({"image": "nvcr.io/nvidia/driver:570.148.08\x07"}, "is not an image tag"),
    ],
)
def test_a_driver_whose_version_cannot_be_known_says_why(tmp_path: Path, driver: dict[str, Any], problem: str) -> None:
    (tmp_path / "v.yaml").write_text(yaml.safe_dump({"driver": driver}))
    c = read_values([tmp_path / "v.yaml"]).components["driver"]
    assert c.version is None
    assert c.problem is not None
    assert problem in c.problem


def test_an_image_with_a_tag_gives_the_version(tmp_path: Path) -> None:
    (tmp_path / "v.yaml").write_text(
        yaml.safe_dump({"devicePlugin": {"image": "registry.local/k8s-device-plugin:v0.17.2"}})
    )
    assert read_values([tmp_path / "v.yaml"]).components["device-plugin"].version == "0.17.2"


def test_a_cluster_policy_of_another_api_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load((OPERATOR / "clusterpolicy.yaml").read_text())
    doc["apiVersion"] = "foo.example/v9"
    (tmp_path / "cp.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as exc:
        read_cluster_policy(tmp_path / "cp.yaml")
    assert exc.value.key == "apiVersion"
    assert "nvidia.com/v1" in str(exc.value)


def test_cluster_policy_reads_spec_and_names_its_release() -> None:
    d = read_cluster_policy(OPERATOR / "clusterpolicy.yaml")
    assert d.release == "25.3.2"
    assert d.release_where == "validator.version"
    assert versions(d)["container-toolkit"] == "1.17.8"


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("driver:\n  version: [570]\n", "driver.version", "expected a version string"),
        ("toolkit:\n  version: 1.10\n", "toolkit.version", "quote it"),
        ("toolkit:\n  enabled: maybe\n", "toolkit.enabled", "expected true or false"),
        ("- a list\n", None, "expected a mapping"),
        ("driver: {version: 1}\ndriver: {version: 2}\n", None, "written twice"),
    ],
)
def test_bad_values_name_the_file_and_key(tmp_path: Path, text: str, key: str | None, says: str) -> None:
    (tmp_path / "v.yaml").write_text(text)
    with pytest.raises(ConfigError) as exc:
        read_values([tmp_path / "v.yaml"])
    assert exc.value.path == tmp_path / "v.yaml"
    assert exc.value.key == key
    assert says in str(exc.value)


def test_ranges() -> None:
    assert in_range("1.17.4", ">=1.17.4,<1.17.5")
    assert not in_range("1.17.5", ">=1.17.4,<1.17.5")
    assert in_range("1.16.1", "<1.16.2")
    assert not in_range("1.17.8", "<1.17.8")
    assert in_range("570.148.08", "!=570.124.06")


def test_the_shipped_tables_load_and_a_broken_one_names_file_and_key(tmp_path: Path) -> None:
    t = Tables()
    assert t.releases.release("v25.3.2") is not None
    assert t.drivers.minimum("NVIDIA-B200").minimum_driver == "570.133.20"  # type: ignore[union-attr]
    shutil.copytree(DATA, tmp_path / "data")
    bad = tmp_path / "data" / "known-bad.yaml"
    bad.write_text(bad.read_text().replace('container-toolkit: "<1.16.2"', 'container-tolkit: "<1.16.2"'))
    with pytest.raises(ConfigError) as exc:
        Tables(tmp_path / "data")
    assert exc.value.path == bad
    assert exc.value.key == "entries[0].components.container-tolkit"


BASE: dict[str, Any] = {
    "pcie": {"generation": 5, "width": 16, "source": "datasheet"},
    "health": {"maxVolatileCorrectedEcc": 1000, "temperatureMarginC": 5, "applicationXids": [13], "source": "policy"},
    "nvlink": {"links": 18, "maxReplayErrors": 0, "source": "datasheet"},
    "metrics": {
        "memory.bandwidth": {"expected": 2900, "tolerance": 0.08, "comparison": "min", "source": "estimate"},
        "pcie.h2d": {"expected": 50, "tolerance": 0.1, "comparison": "min", "source": "estimate"},
    },
}


def changed(**edits: Any) -> dict[str, Any]:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    for dotted, value in edits.items():
        *parents, last = dotted.split("/")
        node = doc
        for p in parents:
            node = node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return doc


@pytest.mark.parametrize(
    ("edits", "found"),
    [
        ({"metrics/memory.bandwidth/tolerance": 0.1}, [("memory.bandwidth: tolerance 0.08 -> 0.1", False)]),
        ({"metrics/memory.bandwidth/expected": 2800}, [("memory.bandwidth: expected 2900 -> 2800", False)]),
        (
            {"metrics/memory.bandwidth/expected": 2800, "metrics/memory.bandwidth/source": "measured on pod-a"},
            [("memory.bandwidth: expected 2900 -> 2800", True)],
        ),
        ({"metrics/memory.bandwidth/expected": 3000, "metrics/memory.bandwidth/tolerance": 0.05}, []),
        ({"metrics/memory.bandwidth/comparison": "max"}, [("memory.bandwidth: comparison min -> max", False)]),
        ({"metrics/pcie.h2d": None}, [("pcie.h2d: removed (a figure no longer checked)", False)]),
        ({"health/maxVolatileCorrectedEcc": 5000}, [("health.maxVolatileCorrectedEcc 1000 -> 5000", False)]),
        ({"health/applicationXids": [13, 79]}, [("health.applicationXids: 79 now excused", False)]),
        ({"pcie/generation": 4, "pcie/source": "our boards are Gen4"}, [("pcie: Gen5 x16 -> Gen4 x16", True)]),
        (  # over the default where the old side was silent
            {"health/throttleAllowance": {"hw_thermal": 0.01, "sw_thermal": 0.02}},
            [("health.throttleAllowance.hw_thermal 0.0 -> 0.01", False)],
        ),
        ({"nvlink/links": 17}, [("nvlink.links 18 -> 17", False)]),
        ({"nvlink/maxReplayErrors": 5}, [("nvlink.maxReplayErrors 0 -> 5", False)]),
        ({"nvlink": None}, [("nvlink: removed (health.nvlink can no longer be judged)", False)]),
    ],
)
def test_what_counts_as_loosening_a_baseline(edits: dict[str, Any], found: list[tuple[str, bool]]) -> None:
    assert _loosened(BASE, changed(**edits)) == found
