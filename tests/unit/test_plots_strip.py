"""report.html's strip of every GPU's figure (report/plots.py `strip`): a point says its GPU and figure on hover in a
strip of at most LABELLED points, and in a larger one (a fleet: 8,192 points at 1,024 x 8) only where it is flagged,
so report.html stays small; the flagged points are larger and coloured by their finding."""

from __future__ import annotations

import re

from gpucert.report.plots import LABELLED, Point, strip


def _circles(svg: str) -> list[str]:
    return re.findall(r"<circle [^>]*>(?:<title>[^<]*</title>)?</circle>", svg)


def test_a_small_strip_labels_every_point() -> None:
    points = [Point(f"n{i // 8}/gpu{i % 8}", 1000.0 + i, "pass") for i in range(16)]
    points[3] = Point("n0/gpu3", 700.0, "straggler")
    circles = _circles(strip("memory.bandwidth per GPU", "GB/s", points, 1000.0, 900.0, [("n0", 8), ("n1", 8)]))
    assert len(circles) == 16
    assert "<title>n1/gpu7: 1015 GB/s</title>" in circles[15]
    assert 'r="5.6" fill="#e67e22" class="pt-straggler"><title>n0/gpu3: 700 GB/s</title>' in circles[3]
    assert 'r="3.5" fill="#2e86de" class="pt-pass"' in circles[0]


def test_a_fleet_strip_labels_the_flagged_points_only() -> None:
    n = LABELLED + 8
    points = [Point("", 1000.0, "pass") for _ in range(n)]  # a pass's label is never written here
    points[100] = Point("n12/gpu4", 650.5, "fail")
    points[200] = Point("n25/gpu0", 990.0, "waived")
    circles = _circles(strip("memory.bandwidth per GPU", "GB/s", points, 1000.0, 900.0))
    assert len(circles) == n
    titled = [c for c in circles if "<title>" in c]
    assert titled == [circles[100], circles[200]]
    assert 'r="2.6" fill="#c0392b" class="pt-fail"><title>n12/gpu4: 650.5 GB/s</title>' in circles[100]
    assert "<title>n25/gpu0: 990 GB/s</title>" in circles[200]
    assert 'r="1.6" fill="#2e86de" class="pt-pass"></circle>' in circles[0]


def test_each_strip_places_its_points_by_its_own_count() -> None:
    """A point's x is written once per strip size (plots._centres, kept for a report's strips of as many GPUs): a
    strip of another size between two of the same size takes its own, and the first size's are the same again."""
    from gpucert.report.plots import L, R, W

    def xs(n: int) -> list[float]:
        svg = strip("m per GPU", "GB/s", [Point("", 1000.0 + i, "pass") for i in range(n)], 1000.0, 900.0)
        return [float(x) for x in re.findall(r'<circle cx="([0-9.]+)"', svg)]

    first, other, again = xs(LABELLED + 8), xs(16), xs(LABELLED + 8)
    step = (W - L - R) / 16
    assert other == [round(L + (i + 0.5) * step, 1) for i in range(16)]
    assert first == again
    assert len(first) == LABELLED + 8
    assert first[-1] < W - R < first[-1] + (W - L - R) / len(first)
