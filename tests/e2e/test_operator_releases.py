"""The static gate knows the GPU Operator releases of the last two years (stack/data/operator-releases.yaml), says
how to add one it does not know, and says what to do with values that name no release (the chart's own
values.yaml leaves `operator.version` unset)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucert.plan.checks import CheckKey, CheckStatus
from gpucert.spec.cluster import load_spec
from gpucert.stack.gate import Gate
from gpucert.stack.gate_data import load_tables
from gpucert.stack.operator_values import read_values

from .conftest import ROOT
from .test_operator_gate import gate, repo  # noqa: F401  (the platform team's repository fixture)

# Each release's component versions exactly as the gpu-operator chart writes them in
# deployments/gpu-operator/values.yaml at the release's tag (github.com/NVIDIA/gpu-operator, tags v24.9.2 (2025-01-24)
# to v26.7.0 (2026-08-20): every release tagged in 2025 and 2026 up to the snapshot read). Keys are the chart's.
CHART_VALUES = {
    "24.9.2": ("550.144.03", "v1.17.4-ubuntu20.04", "v0.17.0", "3.3.9-3.6.1-ubuntu22.04", "3.3.9-1-ubuntu22.04",
               "v0.10.0-ubuntu20.04"),
    "25.3.0": ("570.124.06", "v1.17.5-ubuntu20.04", "v0.17.1", "4.1.1-4.0.4-ubuntu22.04", "4.1.1-2-ubuntu22.04",
               "v0.12.1-ubuntu20.04"),
    "25.3.1": ("570.148.08", "v1.17.8-ubuntu20.04", "v0.17.2", "4.2.3-4.1.3-ubuntu22.04", "4.2.3-1-ubuntu22.04",
               "v0.12.1-ubuntu20.04"),
    "25.3.2": ("570.148.08", "v1.17.8-ubuntu20.04", "v0.17.3", "4.2.3-4.1.3-ubuntu22.04", "4.2.3-1-ubuntu22.04",
               "v0.12.2-ubuntu20.04"),
    "25.3.3": ("580.82.07", "v1.17.8-ubuntu20.04", "v0.17.4", "4.3.1-4.4.0-ubuntu22.04", "4.3.1-1-ubuntu22.04",
               "v0.12.3-ubuntu20.04"),
    "25.3.4": ("580.82.07", "v1.17.8-ubuntu20.04", "v0.17.4", "4.3.1-4.4.0-ubuntu22.04", "4.3.1-1-ubuntu22.04",
               "v0.12.3-ubuntu20.04"),
    "25.10.0": ("580.95.05", "v1.18.0", "v0.18.0", "4.4.1-4.6.0-distroless", "4.4.1-2-ubuntu22.04", "v0.13.0"),
    "25.10.1": ("580.105.08", "v1.18.1", "v0.18.1", "4.4.2-4.7.0-distroless", "4.4.2-1-ubuntu22.04", "v0.13.1"),
    "26.3.0": ("580.126.20", "v1.19.0", "v0.19.0", "4.5.1-4.8.0-distroless", "4.5.2-1-ubuntu22.04", "v0.14.0"),
    "26.3.1": ("580.126.20", "v1.19.0", "v0.19.0", "4.5.1-4.8.0-distroless", "4.5.2-1-ubuntu22.04", "v0.14.0"),
    "26.3.2": ("580.126.20", "v1.19.1", "v0.19.2", "4.5.3-4.8.2-distroless", "4.5.2-1-ubuntu22.04", "v0.14.2"),
    "26.3.3": ("580.126.20", "v1.19.1", "v0.19.3", "4.5.3-4.8.2-distroless", "4.5.2-1-ubuntu22.04", "v0.14.2"),
    "26.7.0": ("595.91.07", "v1.20.0", "v0.20.0", "4.6.0-4.8.3-distroless", "4.6.0-1-ubuntu24.04", "v0.15.0"),
}  # fmt: skip


def chart_values(release: str, *, dcgm: bool = True) -> dict[str, dict[str, object]]:
    """The component sections of the chart's values.yaml at `release`'s tag (no operator.version, as there)."""
    driver, toolkit, plugin, exporter, dcgm_version, mig = CHART_VALUES[release]
    sections = {
        "driver": ("nvcr.io/nvidia", "driver", driver),
        "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", toolkit),
        "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", plugin),
        "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", plugin),
        "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", exporter),
        "dcgm": ("nvcr.io/nvidia/cloud-native", "dcgm", dcgm_version),
        "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", mig),
    }
    return {
        key: {"enabled": key != "dcgm" or dcgm, "repository": repository, "image": image, "version": version}
        for key, (repository, image, version) in sections.items()
    }


def decide(values: Path, check: str, release: str | None = None) -> tuple[CheckStatus, str]:
    d = read_values([values])
    g = Gate(load_spec(ROOT / "examples" / "gate.yaml"), {d.name: d}, {}, load_tables(), release=release)
    f = g.decide(CheckKey(check, None, None, d.name))
    return f.status, f.message


@pytest.mark.parametrize("release", list(CHART_VALUES))
def test_each_release_since_2025_is_known_with_the_versions_its_chart_sets(release: str, tmp_path: Path) -> None:
    """The chart's own values at each tag are, to the gate, that release: every version one it ships, the first
    its default, and every component (mig-manager and the standalone DCGM too) known to the known-bad check."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(release)))
    status, message = decide(values, "stack.release", release)
    assert status is CheckStatus.PASS, message
    r = load_tables().releases.release(release)
    assert r is not None
    assert {c: vs[0] for c, vs in r.components.items() if c != "driver"} == {
        c: x.version for c, x in read_values([values]).components.items() if c != "driver"
    }
    assert r.components["driver"][0] == CHART_VALUES[release][0]  # the chart's default driver comes first
    assert "github.com/NVIDIA/gpu-operator/blob/v" + release in r.source
    status, message = decide(values, "stack.known_bad", release)
    assert status in {CheckStatus.PASS, CheckStatus.FAIL}, message  # judged, not unknown


def test_the_table_names_every_release_from_2025_with_its_drivers() -> None:
    known = [r.release for r in load_tables().releases.releases]
    assert set(CHART_VALUES) <= set(known)
    # a driver the component matrix lists beside the default is a version of the release (26.3.3's column)
    r = load_tables().releases.release("26.3.3")
    assert r is not None
    assert {"580.126.20", "580.178.04", "595.91.07", "610.57.04", "535.288.01"} <= set(r.components["driver"])


def test_an_unknown_release_is_a_finding_that_says_how_to_add_it(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"operator": {"version": "v27.1.0"}, **chart_values("26.7.0")}))
    status, message = decide(values, "stack.release")
    assert status is CheckStatus.ERROR
    assert "GPU Operator 27.1.0 is not in " in message
    assert "operator-releases.yaml" in message
    assert "known: 24.6.1, 24.9.2, 25.3.0" in message
    assert "Add it there with its source" in message
    assert "https://github.com/NVIDIA/gpu-operator/blob/v27.1.0/deployments/gpu-operator/values.yaml" in message


def test_values_without_a_release_say_how_and_name_the_releases_they_match(repo: Path) -> None:  # noqa: F811
    """The chart's values.yaml sets no operator.version: a finding (not a crash, not a guess) that says to pass
    --operator-release, naming the releases whose defaults the files set; with it, the gate judges them."""
    values = repo / "gpu-operator" / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values("26.3.1")))
    r, verdict, _ = gate(repo, "--operator-values", "gpu-operator/values.yaml")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    (finding,) = [f for f in verdict["findings"] if f["check"] == "stack.release"]
    assert finding["status"] == "error"
    assert "names no GPU Operator release" in finding["message"]
    assert "pass --operator-release VERSION" in finding["message"]
    assert "the versions it sets are the defaults of GPU Operator 26.3.0 and 26.3.1" in finding["message"]
    r, verdict, _ = gate(repo, "--operator-values", "gpu-operator/values.yaml", "--operator-release", "26.3.1")
    assert not [f for f in verdict["findings"] if f["check"] in {"stack.release", "stack.known_bad"}], verdict


def test_a_release_named_twice_apart_is_an_error(tmp_path: Path) -> None:
    """operator.version in the files and --operator-release disagree: neither is taken on trust."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"operator": {"version": "v26.3.1"}, **chart_values("26.3.1")}))
    status, message = decide(values, "stack.release", "26.7.0")
    assert status is CheckStatus.ERROR
    assert "the files name GPU Operator 26.3.1 (operator.version) and --operator-release says 26.7.0" in message
    assert decide(values, "stack.release", "26.3.1")[0] is CheckStatus.PASS
