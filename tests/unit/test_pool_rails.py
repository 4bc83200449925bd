"""Each fabric pool's rails in the plan (issue 25): a pool's fabric pods measure its own HCAs, never the first
fabric pool's; the probe pod's `--pool` picks them from the plan, and a pool the plan lacks is an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucert.measure.probes import __main__ as probes_main
from gpucert.measure.probes.probe_plan import FabricRails, ProbePlan
from gpucert.measure.targets.base import MeasurePlan

TRAIN = FabricRails(hcas=["mlx5_0", "mlx5_1"], link_layer="InfiniBand")
INFER = FabricRails(hcas=["mlx5_4", "mlx5_5"], link_layer="InfiniBand")


def test_a_node_gets_its_own_pools_rails_and_none_outside_a_fabric_pool() -> None:
    plan = MeasurePlan(
        run_id="r",
        probes=(),
        dcgm_level=1,
        rails={"train": TRAIN, "infer": INFER},
        pools={"a": "train", "b": "infer", "c": "other"},
    )
    assert (plan.rails_for("a"), plan.rails_for("b")) == (TRAIN, INFER)
    assert plan.rails_for("c") is None  # a pool without a fabric section
    assert plan.rails_for("d") is None  # in no pool


def _plan_file(tmp_path: Path) -> Path:
    plan = ProbePlan(run_id="r", node="x", pool_rails={"train": TRAIN, "infer": INFER})
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json(by_alias=True))
    return path


def test_pool_picks_that_pools_rails_from_the_plan(tmp_path: Path) -> None:
    plan = probes_main._load_plan(str(_plan_file(tmp_path)), "node-1", "infer")
    assert plan.node == "node-1"
    assert plan.fabric_rails == INFER


def test_a_pool_the_plan_has_no_rails_for_is_an_error_not_every_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _plan_file(tmp_path)
    assert probes_main.main(["--plan", str(path), "--pool", "spare", "--processes", "2", "--rendezvous", "h:1"]) == 2
    err = capsys.readouterr().err
    assert "pool_rails has no rails for pool 'spare' (--pool); it has: infer, train" in err
    assert json.loads(path.read_text())["fabric_rails"] is None
