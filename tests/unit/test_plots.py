"""The per-GPU strip plot labels its nodes without writing one name over another."""

import itertools
import re

from gpucert.report.plots import LABEL_CHAR_PX, Point, strip


def _labels(svg: str) -> list[tuple[float, str]]:
    return [(float(x), name) for x, name in re.findall(r'<text x="([\d.]+)" y="\d+" fill="#666">([^<]+)</text>', svg)]


def test_node_names_never_overlap_and_the_first_is_always_written() -> None:
    for nodes in (4, 16, 40):
        groups = [(f"gpu-node-{i}", 8) for i in range(1, nodes + 1)]
        points = [Point(f"{n}/gpu{g}", 100.0, "pass") for n, _ in groups for g in range(8)]
        labels = _labels(strip("memory.bandwidth", "GB/s", points, 100.0, 92.0, groups))
        assert labels[0][1] == "gpu-node-1"
        for (x, name), (nx, _) in itertools.pairwise(labels):
            assert x + LABEL_CHAR_PX * len(name) < nx, (nodes, name)
        if nodes == 4:  # room for every name
            assert [n for _, n in labels] == [n for n, _ in groups]
        if nodes == 16:  # 16 names of 10-11 characters do not fit in 810 units: some are left out, not overprinted
            assert 1 < len(labels) < 16
