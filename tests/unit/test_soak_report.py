"""soak/report.html draws a GPU red only on the charts of the metric its finding is about, with a legend naming
the flagged GPUs (sweep defect 15: an XID made its GPU red on every chart, and no legend said what red was)."""

from __future__ import annotations

from typing import Any

from gpucert.report.soak_html import FLAGGED, SoakSeries, render_soak_report


def _gpu(index: int, bandwidth: float, temperature: float) -> dict[str, Any]:
    return {
        "index": index,
        "medians": {"memory.bandwidth": bandwidth, "compute.gemm.bf16": 700.0},
        "temperatureC": temperature,
        "loadedS": 10.0,
        "throttleNs": {},
    }


def _chart(html: str, title: str) -> str:
    chart = html[html.index(f"<title>{title}</title>") :]
    return chart[: chart.index("</svg>")]


def _finding(check: str, node: str, gpu: int) -> dict[str, Any]:
    return {"check": check, "node": node, "gpu": gpu, "status": "fail", "message": f"{node}/gpu{gpu}: {check}"}


def test_red_only_on_the_charts_of_the_findings_metric_with_a_legend() -> None:
    series = SoakSeries()
    pools = {"n1": "default", "n2": "default"}
    for k in range(4):
        gpus = {"n1": [_gpu(0, 2900.0, 62.0), _gpu(1, 2900.0 * (0.9 if k else 1), 62.0)], "n2": [_gpu(0, 2900.0, 62.0)]}
        rounds = {n: {"endH": k + 1.0, "gpus": g, "nodeMedians": {}} for n, g in gpus.items()}
        series.add_round({"nodes": rounds}, pools)
    nodes = {
        "n1": {"result": "fail", "pool": "default", "cleanHours": 1.0, "requiredHours": 4.0, "leftRound": 1,
               "findings": [_finding("soak.drift.memory.bandwidth", "n1", 1)]},
        "n2": {"result": "fail", "pool": "default", "cleanHours": 2.0, "requiredHours": 4.0, "leftRound": 2,
               "findings": [_finding("soak.xid", "n2", 0)]},
    }  # fmt: skip
    html = render_soak_report(run="r", spec="s", result="fail", hours=4.0, nodes=nodes, series=series)
    bandwidth = _chart(html, "memory.bandwidth, pool default")
    assert bandwidth.count(f'stroke="{FLAGGED}"') == 1  # the drifting board alone: the XID is no bandwidth finding
    assert "<title>n1/gpu1</title>" in bandwidth
    assert "red: a finding on this metric: n1/gpu1</tspan>" in bandwidth
    assert "faint: 2 clean" in bandwidth
    for other in ("compute.gemm.bf16, pool default", "temperature (°C), pool default"):
        chart = _chart(html, other)
        assert f'stroke="{FLAGGED}"' not in chart, other  # n2/gpu0's XID is about no plotted metric
        assert "no finding on this metric" in chart
    assert "n2/gpu0: soak.xid" in html  # said in the table instead
