"""A signed soak, and `accept` requiring a burn-in (spec `acceptance.soakHours`), through the `gpucert` command on
examples/soak.yaml: a 24 h soak in which two nodes leave (a board degrades at 10 h, an XID at 20 h)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.verdict_model import read_verdict

from ..in_process import gpucert_here, next_second


def ok(r: subprocess.CompletedProcess[str], code: int = 0) -> subprocess.CompletedProcess[str]:
    assert r.returncode == code, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def _only(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]  # not .history
    return run


def test_a_signed_soak_verifies_and_accept_requires_its_clean_hours(project: Path) -> None:
    spec = project / "examples" / "soak.yaml"
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["acceptance"] = {"soakHours": 24}
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    ok(gpucert_here("keygen", "keys", cwd=project))
    key, pub = project / "keys" / "gpucert.key", project / "keys" / "gpucert.pub"
    ok(gpucert_here("certify", str(spec), "--sign-key", str(key), "--reports", "certified", "-n", "0", cwd=project))
    next_second()  # the soak after the certification, as in the field
    ok(gpucert_here("soak", str(spec), "--sign-key", str(key), "--reports", "soaked", "-q", cwd=project), 1)
    certified, soaked = _only(project / "certified"), _only(project / "soaked")

    v = attest.verify(soaked, [pub])
    assert v.ok, v.problems()
    said = ok(gpucert_here("verify", str(soaked), "--key", str(pub), cwd=project)).stdout
    assert "soak of spec soak-h100-pod-a (simulated)" in said
    assert "24h in 1h rounds, result FAIL" in said
    verdict = read_verdict(RunFolder(soaked))
    assert verdict.what == "soak"
    assert verdict.result == "fail"
    assert {n: s.result for n, s in verdict.nodes.items()} == {
        "gpu-node-1": "pass",
        "gpu-node-2": "fail",
        "gpu-node-3": "pass",
        "gpu-node-4": "fail",
    }
    assert {(f.check, f.node, f.gpu) for f in verdict.findings} == {
        ("soak.drift.memory.bandwidth", "gpu-node-2", 3),
        ("soak.xid", "gpu-node-4", 6),
    }

    ok(gpucert_here("accept", str(certified), str(soaked), "--sign-key", str(key), "--out", "acc", cwd=project), 1)
    record = json.loads((_only(project / "acc") / "acceptance.json").read_text(encoding="utf-8"))
    assert record["result"] == "fail"
    assert {n: v["status"] for n, v in record["nodes"].items()} == {
        "gpu-node-1": "passed",
        "gpu-node-2": "failed",
        "gpu-node-3": "passed",
        "gpu-node-4": "failed",
    }
    assert record["soak"]["nodes"]["gpu-node-2"]["cleanHours"] == 10.0
    assert any("gpu-node-4: its soak" in p and "20 clean hours" in p for p in record["problems"])

    # the certification alone: no node has the burn-in the spec requires
    ok(gpucert_here("accept", str(certified), "--sign-key", str(key), "--out", "acc2", cwd=project), 1)
    record = json.loads((_only(project / "acc2") / "acceptance.json").read_text(encoding="utf-8"))
    assert {v["status"] for v in record["nodes"].values()} == {"failed"}
    assert all("no soak of it was given" in p for p in record["problems"])

    # a soak edited after it was signed is refused
    (soaked / "soak" / "result.json").write_text("{}", encoding="utf-8")
    r = ok(gpucert_here("accept", str(certified), str(soaked), "--sign-key", str(key), "--out", "acc3", cwd=project), 2)
    assert "changed: soak/result.json" in r.stderr
