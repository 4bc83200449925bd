"""The punch list as a repair ticket reads it (issue 23 item 16): an unstable GPU with the performance faults,
figures to 3 significant digits, an ECC line that says the fault, natural node order, a documented exit status."""

from __future__ import annotations

import csv
import io
import json
import re

from gpucert.acceptance.punchlist import figure

from ..in_process import gpucert_here
from .conftest import fleet_doc, spec_doc

FAULTS = [
    {"kind": "ecc", "node": "gpu-node-10", "gpu": 1, "uncorrected": 1},
    {"kind": "ecc", "node": "gpu-node-2", "gpu": 3, "uncorrected": 2},
    {
        "kind": "intermittent",
        "node": "gpu-node-5",
        "gpu": 5,
        "metric": "compute.gemm.fp16",
        "factor": 0.7,
        "fraction": 0.3,
    },
    {"kind": "slow", "node": "gpu-node-11", "gpu": 2, "metric": "memory.bandwidth", "factor": 0.85},
    {"kind": "slow", "node": "gpu-node-3", "gpu": 4, "metric": "memory.bandwidth", "factor": 0.85},
]


def test_punch_list_rows_figures_and_exit_status(certify) -> None:  # type: ignore[no-untyped-def]
    spec = spec_doc(probes=["health", "memory", "compute"], multinode=None)
    spec["expect"]["nodes"] = 11
    run = certify(fleet_doc(FAULTS, nodes=11), spec=spec)
    assert run.result.ret == 1
    r = gpucert_here("punchlist", str(run.run_dir), "--format", "csv", cwd=run.run_dir.parent)
    assert r.returncode == 1, r.stderr  # rows on it: 1, as `gpucert punchlist --help` says
    assert "0 when the list is empty" in gpucert_here("punchlist", "--help", cwd=run.run_dir.parent).stdout
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(x["severity"], x["node"], x["gpu"], x["checks"]) for x in rows] == [
        ("hardware", "gpu-node-2", "3", "health.ecc"),
        ("hardware", "gpu-node-10", "1", "health.ecc"),  # natural order: 2 before 10
        ("performance", "gpu-node-3", "4", "memory.bandwidth"),
        ("performance", "gpu-node-5", "5", "stability.compute.gemm.fp16"),  # unstable: a performance fault
        ("performance", "gpu-node-11", "2", "memory.bandwidth"),
    ]
    # the ECC line says the fault: uncorrected errors, none allowed (not "2 errors" against a limit of 1000)
    assert rows[0]["observed"] == "2 uncorrected ECC errors"
    assert rows[0]["message"].startswith("gpu-node-2/gpu3: 2 uncorrected ECC errors since the driver loaded")
    assert "none is allowed" in rows[0]["message"]
    # figures to 3 significant digits in the table, as measured in the JSON
    js = json.loads(gpucert_here("punchlist", str(run.run_dir), "--format", "json", cwd=run.run_dir.parent).stdout)
    for row, full in zip(rows[2:], js["rows"][2:], strict=True):
        (f,) = full["findings"]
        for key in ("observed", "expected", "limit"):
            assert row[key] == f"{figure(f[key])} {f['unit']}"
            assert len(re.sub(r"[^0-9]", "", row[key]).strip("0")) <= 3, row[key]
    assert any(len(str(f["observed"]).replace(".", "")) > 3 for r_ in js["rows"][2:] for f in r_["findings"])
