"""DCGM's per-GPU results charged to the right board: dcgmi numbers GPUs by its own ids, which are not NVML's
indexes once its engine has re-attached a board (DcgmCacheManager::MergeNewlyDetectedGpuList, dcgmlib/src/
DcgmCacheManager.cpp, DCGM 4.5.2) or when it is another engine. The serial dcgmi reports (4.x `entity_groups`,
dcgmi/Diag.cpp HelperJsonAddEntities, 4.5.2; 3.3 `"GPU Device Serials"`, HelperJsonBuildOutput, 3.3.9) is what
ties an entry to a board; where nothing does, the board's check is an error naming DCGM's entries, never a pass."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gpucert.evaluate.rules.dcgm import judge_dcgm
from gpucert.measure.evidence import DcgmEvidence
from gpucert.measure.probes.dcgm import run_diag
from gpucert.plan.checks import CheckStatus

from .test_dcgm_parser import SAMPLES, sample
from .test_probes import SERIALS, install_dcgmi

FOUR = {i: SERIALS[i] for i in range(4)}  # NVML index -> serial, the order NVML (and CUDA) number the boards


def install_doc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: dict, code: int) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    exe = tmp_path / "bin" / "dcgmi"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat '{path}'\nexit {code}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")


def statuses(test: str, d: DcgmEvidence, boards: int, level: int = 2) -> dict[int, CheckStatus]:
    return {g: judge_dcgm(test, "n1", g, d, level, serial=SERIALS.get(g)).status for g in range(boards)}


def test_dcgm4_ids_that_are_not_nvml_indexes_are_charged_by_serial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DCGM GPU 3 is board 1 (its serial says so): its memory failure is board 1's, and the other three boards pass
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-r2-ids-not-nvml-order.json", 226)
    d = run_diag(2, serials=FOUR)
    assert d.runtime_error is None
    assert statuses("memory", d, 4) == {0: "pass", 1: "fail", 2: "pass", 3: "pass"}
    assert statuses("software", d, 4) == dict.fromkeys(range(4), "pass")
    board1 = d.results["memory"].gpus[1]
    assert (board1.dcgm_id, board1.serial) == (3, SERIALS[1])  # DCGM's own id kept beside the board it is
    finding = judge_dcgm("memory", "n1", 1, d, 2, serial=SERIALS[1])
    assert "DCGM_FR_MEMORY_MISMATCH" in finding.message


def test_dcgm33_serials_at_the_root_tie_entries_to_boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm33-r2-serials-at-root.json", 226)
    d = run_diag(2, serials={0: SERIALS[0], 1: SERIALS[1]})
    assert d.runtime_error is None
    assert d.version == "3.3.9"
    assert statuses("memory", d, 2) == {0: "pass", 1: "fail"}  # DCGM GPU 0 is board 1


def test_entries_without_a_serial_are_charged_to_no_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the 8-GPU DCGM 4.x fragment (DCGM issue 215) has no entity_groups: nothing says which board each id is
    path = SAMPLES / "dcgm4-r3-diagnostic-fragment.txt"
    if not path.exists():
        pytest.skip(f"reference sample {path} is absent (it lives in the shared/ folder beside the checkout)")
    test = json.loads(path.read_text().strip().rstrip(","))
    doc = {
        "DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]},
        "metadata": {"version": "4.1.1"},
    }
    install_doc(tmp_path, monkeypatch, doc, 0)
    d = run_diag(3, serials=SERIALS)
    assert d.runtime_error is None
    assert d.results["diagnostic"].gpus == {}
    assert sorted(d.results["diagnostic"].untied) == list(range(8))
    findings = [judge_dcgm("diagnostic", "n1", g, d, 3, serial=SERIALS[g]) for g in range(8)]
    assert {f.status for f in findings} == {"error"}
    assert "DCGM GPU 0 Pass" in findings[5].message
    assert "no serial ties them to boards" in findings[5].message


def test_one_gpu_without_a_serial_on_this_nodes_engine_is_that_board(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = sample("dcgm4-r1-fail-gb10.json")  # serial <<<NOT_SUPPORTED>>>, as NVML has none on a GB10 either
    install_doc(tmp_path, monkeypatch, doc, 226)
    d = run_diag(1, serials={0: None})
    assert judge_dcgm("software", "n1", 0, d, 1).status == "fail"
    assert "DCGM_FR_PERSISTENCE_MODE" in judge_dcgm("software", "n1", 0, d, 1).message


def test_one_gpu_without_a_serial_on_another_engine_is_not_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_doc(tmp_path, monkeypatch, sample("dcgm4-r1-fail-gb10.json"), 226)
    d = run_diag(1, serials={0: None}, host="10.0.0.9")  # --host: that engine numbers the GPUs it sees
    finding = judge_dcgm("software", "n1", 0, d, 1)
    assert finding.status == "error"
    assert "DCGM GPU 0 Fail" in finding.message


def test_dcgm3_without_serials_on_two_boards_is_not_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # DCGM 3.0-3.2 report no serial at all: with two boards, DCGM GPU 0 could be either
    install_doc(tmp_path, monkeypatch, sample("dcgm3-r3-pass.json"), 0)
    d = run_diag(3, serials={0: SERIALS[0], 1: SERIALS[1]})
    assert statuses("pcie", d, 2, level=3) == {0: "error", 1: "error"}
    assert statuses("software", d, 2, level=3) == {0: "pass", 1: "pass"}  # 3.x deployment checks: the node's
    one = run_diag(3, serials={0: SERIALS[0]})
    assert statuses("pcie", one, 1, level=3) == {0: "pass"}


def test_more_gpus_than_boards_is_the_diagnostics_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-r2-ids-not-nvml-order.json", 226)
    d = run_diag(2, serials={0: SERIALS[0], 1: SERIALS[1], 2: SERIALS[2]})  # board 3 not this pod's: a 4th serial
    assert d.runtime_error is not None
    assert "not this node's" in d.runtime_error
    assert judge_dcgm("memory", "n1", 0, d, 2).status == "error"


def test_a_board_nvml_gave_no_serial_is_not_guessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-r2-ids-not-nvml-order.json", 226)
    d = run_diag(2, serials={**FOUR, 1: None})  # NVML could not read board 1's serial; DCGM GPU 3 has one
    assert d.runtime_error is None
    assert statuses("memory", d, 4) == {0: "pass", 1: "error", 2: "pass", 3: "pass"}
    assert sorted(d.results["memory"].untied) == [3]
    assert "DCGM GPU 3 Fail" in judge_dcgm("memory", "n1", 1, d, 2).message
