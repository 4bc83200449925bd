"""The all-reduce probes against CuPy's NCCL bindings as each CuPy major types them, and the sweep's sizes against
the size the baselines quote their bus bandwidth at."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.measure.probes import nccl
from gpucert.measure.probes.device import NumpyDevice
from gpucert.measure.targets.local import PROFILES

# ---- NCCL's unique id: CuPy 13 hands out a tuple of C chars, CuPy 14 bytes ------------------------------------


def fake_cupy_nccl(version: int, made: list[tuple[int, Any, int]]) -> Any:
    """cupy and cupy.cuda.nccl as CuPy `version` types them (Cython checks `commId`'s type before NCCL runs)."""
    uid_bytes = bytes(range(100, 228))  # values past 127 are negative as C chars

    def get_unique_id() -> Any:
        return uid_bytes if version >= 14 else tuple(b - 256 if b > 127 else b for b in uid_bytes)

    class NcclCommunicator:
        def __init__(self, ndev: int, comm_id: Any, rank: int) -> None:
            want = bytes if version >= 14 else tuple
            if not isinstance(comm_id, want):
                raise TypeError(f"Argument 'commId' has incorrect type (expected {want.__name__})")
            if version < 14 and not all(-128 <= x <= 127 for x in comm_id):
                raise OverflowError("value too large to convert to char")
            made.append((ndev, comm_id, rank))

    class Device:
        def __init__(self, index: int) -> None:
            self.index = index

        def __enter__(self) -> Device:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    nccl_mod = types.SimpleNamespace(
        get_unique_id=get_unique_id, NcclCommunicator=NcclCommunicator, groupStart=lambda: None, groupEnd=lambda: None
    )
    cuda = types.SimpleNamespace(nccl=nccl_mod, Device=Device, Stream=lambda non_blocking: object())
    return types.SimpleNamespace(cuda=cuda), nccl_mod


@pytest.mark.parametrize("version", [13, 14])
def test_the_unique_id_reaches_ncclcomminitrank_in_the_shape_cupy_takes(
    version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[int, Any, int]] = []
    cupy, nccl_mod = fake_cupy_nccl(version, made)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl_mod)
    # process 0 makes the id; JSON carries it to the other processes (the rendezvous)
    wire = json.loads(json.dumps(nccl.unique_id_wire(nccl_mod.get_unique_id())))
    assert wire == list(range(100, 228))
    coll = nccl.CupyNccl([NumpyDevice(0), NumpyDevice(1)], world=4, first_rank=2, uid=wire)
    assert [(n, r) for n, _, r in made] == [(4, 2), (4, 3)]
    assert all(c == nccl_mod.get_unique_id() for _, c, _ in made)  # the very id process 0 made
    assert coll.ranks == 4


def test_the_sweep_reaches_the_size_the_baselines_quote() -> None:
    assert nccl.BASELINE_SIZE == 8 << 30
    assert max(nccl.DEFAULT_SIZES) == nccl.BASELINE_SIZE
    assert max(PROFILES["quick"][1].nccl_sizes) == nccl.BASELINE_SIZE
    baselines = Path(__file__).resolve().parents[2] / "baselines" / "gpus"
    for path in baselines.glob("*.yaml"):
        source = yaml.safe_load(path.read_text())["metrics"]["nccl.all_reduce"]["source"]
        at = re.search(r"busbw at (\d+) GiB", source)
        assert at is not None, f"{path.name}: nccl.all_reduce.source must say the message size"
        assert int(at.group(1)) << 30 == nccl.BASELINE_SIZE, path.name
