"""`accept` trusts a soak only of the accepted spec and of the accepted boards (sweep defects 2 and 3): a soak run
under a laxer soak section of the same spec name is refused, and a node whose certified board is not the one the
soak burned in has no soak hours. A 2 x 2 fleet, 4 one-hour rounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli.main import main

from ..in_process import gpucert_here
from .conftest import BASELINES, fleet_doc


def _spec(fleet: str, **soak: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((Path(__file__).parents[2] / "examples" / "soak.yaml").read_text())
    doc["target"]["fleet"] = fleet
    doc["expect"].update(nodes=2, gpusPerNode=2)
    doc["certify"] = {"baseline": str(BASELINES / "H100-SXM5-80GB.yaml"), "probes": ["health", "compute"]}
    doc["soak"] = {"duration": "4h", "round": "1h", "probes": ["health", "compute"], "criteria": soak}
    doc["acceptance"] = {"soakHours": 4}
    return doc


def _run(capsys: pytest.CaptureFixture[str], *args: str, code: int) -> str:
    """In this process (a process of its own costs seconds on a loaded machine); certify runs its own pytest."""
    assert main(list(args)) == code
    out = capsys.readouterr()
    return out.out + out.err


def _only(folder: Path) -> str:
    (run,) = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return str(run)


def test_accept_needs_the_soak_of_its_spec_and_its_boards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, faults in (("clean", []), ("swapped", [{"kind": "swapped-gpu", "node": "gpu-node-1", "gpu": 1}])):
        fleet = fleet_doc(faults, nodes=2, gpus=2, soak={"timeScale": 0, "faults": []})
        (tmp_path / f"{name}.fleet.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(_spec(f"{name}.fleet.yaml")), encoding="utf-8")
    lax = _spec("clean.fleet.yaml", maxDrift=0.4)  # the same name, a laxer soak
    (tmp_path / "lax.yaml").write_text(yaml.safe_dump(lax), encoding="utf-8")
    _run(capsys, "keygen", "keys", code=0)
    key = str(tmp_path / "keys" / "gpucert.key")
    # the certification sees another board in gpu-node-1's slot 1 than the soak burns in
    r = gpucert_here("certify", "swapped.yaml", "--sign-key", key, "--reports", "cs", "-n", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for spec, out in (("clean", "s"), ("lax", "sl")):
        soak = ["soak", str(tmp_path / f"{spec}.yaml"), "--sign-key", key, "--reports", str(tmp_path / out), "-q"]
        _run(capsys, *soak, code=0)
    cs, s, sl = (_only(tmp_path / d) for d in ("cs", "s", "sl"))

    # defect 2: a soak under another soak section of the same spec name is refused, naming what differs
    said = _run(capsys, "accept", cs, sl, "--sign-key", key, "--out", str(tmp_path / "a2"), code=2)
    assert "soak section" in said
    assert "run the soak again with the certification's spec" in said

    # defect 3: the certified board of gpu-node-1 gpu1 is not the one the soak burned in
    said = _run(capsys, "accept", cs, s, "--sign-key", key, "--out", str(tmp_path / "a3"), code=1)
    assert "ACCEPTANCE FAIL" in said
    record = json.loads((Path(_only(tmp_path / "a3")) / "acceptance.json").read_text(encoding="utf-8"))
    assert record["nodes"]["gpu-node-1"]["status"] == "failed"
    assert "no hours of the accepted boards" in record["nodes"]["gpu-node-1"]["soak"]
    assert "gpu1" in record["soak"]["nodes"]["gpu-node-1"]["boardsDiffer"]
    assert record["soak"]["nodes"]["gpu-node-1"]["heldHours"] == 0.0
    assert record["nodes"]["gpu-node-2"]["status"] == "passed"
    assert record["soak"]["nodes"]["gpu-node-2"]["heldHours"] == 4.0

    # defect 16: the acceptance report and record show the soak per node (record v2)
    assert record["schema"] == "gpucert.io/acceptance/v2"
    html = (Path(_only(tmp_path / "a3")) / "report.html").read_text(encoding="utf-8")
    soak_table = html[html.index("<table id='soak'>") :]
    soak_table = soak_table[: soak_table.index("</table>")]
    rows = {r.split("</td>")[0].rsplit(">", 1)[-1]: r for r in soak_table.split("<tr")[2:]}
    assert Path(s).name in rows["gpu-node-1"]
    assert "0 of 4" in rows["gpu-node-1"]
    assert "no hours of the accepted boards" in rows["gpu-node-1"]
    assert "4 of 4" in rows["gpu-node-2"]
    assert "counts" in rows["gpu-node-2"]
