"""A node's history through the `gpucert` command: every signed certification and recertification adds to it, and
`gpucert history` prints it, each entry checked against its signed run."""

from __future__ import annotations

from pathlib import Path

from gpucert.fleet.history import history_path, load_history

from .conftest import gpucert

SPEC = "examples/clean.yaml"
NAME = "clean-h100-pod-a"


def test_certifications_and_recertifications_add_to_each_nodes_history(project: Path) -> None:
    assert gpucert("keygen", "keys", cwd=project).returncode == 0
    for _ in range(2):
        r = gpucert("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
        assert r.returncode == 0, r.stdout + r.stderr
    r = gpucert("certify", SPEC, "-q", cwd=project)  # unsigned: nothing to stand behind an entry
    assert r.returncode == 0, r.stdout + r.stderr
    r = gpucert(
        "recertify", "gpu-node-2", "--spec", SPEC, "-q", "--sign-key", "keys/gpucert.key", "--without-handover",
        cwd=project,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    reports = project / "reports"
    assert len(load_history(history_path(reports, NAME, "gpu-node-1"))) == 2
    entries = load_history(history_path(reports, NAME, "gpu-node-2"))
    assert len(entries) == 3
    assert entries[-1].run.endswith("recertify-gpu-node-2")
    r = gpucert(
        "history", "gpu-node-2", "--spec-name", NAME, "--metric", "memory.bandwidth", "--key", "keys/gpucert.pub",
        cwd=project,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("verified") == 3
    r = gpucert("history", "gpu-node-9", "--spec-name", NAME, cwd=project)
    assert r.returncode == 2
    assert "no history of gpu-node-9 under spec clean-h100-pod-a" in r.stderr
