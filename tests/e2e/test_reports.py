"""The reports as a person sees them: report.html rendered by a real headless browser, the Allure HTML report."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpucert.report.allure import find_allure

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("demo")
    r = subprocess.run(
        [sys.executable, "-m", "gpucert.cli.main", "demo", "-q"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    (run,) = (work / "reports").iterdir()
    return run


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (make test installs it: apt-get install chromium)")
    return exe


def test_report_renders_summary_and_plots_in_a_browser(demo_run: Path, tmp_path: Path) -> None:
    exe = chromium()
    url = (demo_run / "report.html").as_uri()
    common = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*common, "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    assert "Certification FAIL" in dom
    table = dom.split('id="gpucert-nodes"')[1].split("</table>")[0]
    # header and four nodes: the fleet's own checks passed, and a green "(fleet) PASS" row over failing nodes
    # would read as the fleet passing
    assert len(re.findall(r"<tr>", table)) == 1 + 4
    assert "(fleet)" not in table
    assert "570.124.06" in table
    assert "550.54.14" in table  # the node whose driver is off its pin shows it
    assert dom.count('class="gpucert-plot') >= 12  # 9 per-GPU metrics, the P2P matrix, two NCCL curves
    assert "NCCL all-reduce across nodes" in dom
    assert 'class="pt-fail"' in dom
    assert 'class="pt-straggler"' in dom
    assert 'class="pt-unstable"' in dom  # gpu-node-3/gpu5's fp16 is unstable, not a straggler
    # what failed, above the node table: node, GPU with its serial, check id and why, for each finding
    failures = dom.split('id="gpucert-failures"')[1].split("</table>")[0]
    assert dom.index('id="gpucert-failures"') < dom.index('id="gpucert-nodes"')
    assert len(re.findall(r"<tr>", failures)) == 1 + 10
    assert "<code>stability.compute.gemm.fp16</code>" in failures
    assert re.search(r"gpu5 \(serial \d+\)", failures)
    # the footer's time is the run's measurement, then pytest's evaluation
    assert re.search(r'class="run-count">\d+ checks [^<]*; measured in \d+ s \(', dom)
    # pytest-html's own table, built by its JavaScript: the failing checks are there, with their check ids
    assert "health.ecc" in dom.split('id="results-table"')[1]
    # pytest-html's environment block is moved below the verdict and the results (CSS order; the DOM is pytest-html's)
    assert "#environment-header,#environment{order:3}" in dom
    # the signing hint names the files `gpucert keygen KEYS` writes
    hint = dom.split('id="gpucert-signer"')[1].split("</p>")[0]
    assert "KEYS/gpucert.key" in hint
    assert "--key KEYS/gpucert.pub" in hint
    assert "PUBLIC_KEY.pem" not in hint
    shot = tmp_path / "report.png"
    subprocess.run(
        [*common, "--window-size=1400,2400", f"--screenshot={shot}", url], capture_output=True, timeout=120, check=False
    )
    assert shot.exists()
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
    print(f"screenshot of the rendered report: {shot}")


def test_failures_carry_their_evidence(demo_run: Path) -> None:
    html = (demo_run / "report.html").read_text()
    blob = html.split('data-jsonblob="')[1].split('"')[0]
    import html as htmlmod

    data = json.loads(htmlmod.unescape(blob))
    ecc = [t for tid, runs in data["tests"].items() for t in runs if "test_ecc" in tid and t["result"] == "Failed"]
    assert len(ecc) == 1
    # one item per check and node (issue 28): the evidence of each GPU of it that did not pass, named by the GPU
    (extra,) = [e for e in ecc[0]["extras"] if e["name"].startswith("evidence")]
    assert extra["name"] == "evidence gpu-node-1/gpu5"
    assert extra["format_type"] == "json"
    # the failure reads as the check and why, a line for each GPU that did not pass: no exception class, no frames
    # of gpucert's own
    log = ecc[0]["log"]
    assert log.strip().startswith("[health.ecc] gpu-node-1: 1 of 8 GPUs did not pass (1 fail)")
    assert "\n  [health.ecc] gpu5 fail: gpu-node-1/gpu5: 2 uncorrected ECC errors" in log
    assert "CheckFailed" not in log
    assert "gpucert/pytest/" not in log
    assert "Traceback" not in log


def test_allure_html_report_builds_as_one_file(demo_run: Path, tmp_path: Path) -> None:
    if find_allure() is None:
        pytest.skip("allure-commandline is not installed (make test installs it into .tools/ with npm)")
    if shutil.which("java") is None:
        pytest.skip("Java 17 is not installed (make test installs openjdk-17-jre-headless)")
    out = tmp_path / "allure"
    r = subprocess.run(
        [sys.executable, "-m", "gpucert.cli.main", "report", "allure", str(demo_run), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    index = out / "index.html"
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]
    results = list((demo_run / "allure-results").glob("*-result.json"))
    embedded = set(re.findall(r"data/test-cases/[0-9a-f]+\.json", index.read_text()))
    assert len(embedded) == len(results)
    failed = [json.loads(p.read_text()) for p in results if json.loads(p.read_text())["status"] == "failed"]
    # the certification itself is a result of its own (failed: the demo fleet is faulty); every check that
    # failed carries its evidence
    (cert,) = [x for x in failed if x["fullName"] == "gpucert.certification"]
    assert cert["name"] == "Certification of demo-h100-pod-a: FAIL"
    assert all(x["attachments"] for x in failed if x is not cert)


def test_allure_overview_does_not_read_as_a_pass_on_a_fail(demo_run: Path) -> None:
    """Allure's overview donut is the share of passed results: one result per passed check made the failing demo
    read 92.85% green. A node's passed checks are one result (each check a step), so the donut counts findings and
    nodes, and the title over it is the verdict."""
    folder = demo_run / "allure-results"
    results = [json.loads(p.read_text()) for p in folder.glob("*-result.json")]
    passed = [r for r in results if r["status"] == "passed"]
    assert len(passed) / len(results) < 0.5
    assert json.loads((folder / "executor.json").read_text())["reportName"].startswith("Certification FAIL (")


def test_allure_has_a_result_per_node_counted_as_the_verdict_counts(demo_run: Path) -> None:
    """Issue 28: on a run that did not pass too, each node's passed checks are one result of its own, found by the
    node's name; it counts checks as the verdict does (each GPU's check is one) and names the kinds (check ids)
    beside it, so the overview's results relate to the verdict's nodes."""
    verdict = json.loads((demo_run / "verdict.json").read_text())
    results = [json.loads(p.read_text()) for p in (demo_run / "allure-results").glob("*-result.json")]
    nodes = {
        r["fullName"].removeprefix("gpucert.passed[")[:-1]: r for r in results if r["labels"][0]["value"] == "passed"
    }
    assert sorted(nodes) == ["@fleet", *(f"gpu-node-{i}" for i in range(1, 5))]  # '@': no node's name
    for node, r in nodes.items():
        said = verdict["fleet"] if node == "@fleet" else verdict["nodes"][node]
        steps = [c for f in r["steps"] for c in f["steps"]]
        # each GPU's check one, and each detail's (a component's stack.version)
        n = sum(len(c["parameters"][0]["value"].split(",")) if c.get("parameters") else 1 for c in steps)
        assert n == said["passed"], node  # the verdict's count
        where = "the fleet" if node == "@fleet" else node
        kinds = f"{len(steps)} kind{'s' if len(steps) != 1 else ''}"
        assert r["name"].startswith(f"{n} check{'s' if n != 1 else ''} passed on {where} ({kinds})"), r["name"]
        assert " 1 checks" not in r["name"]
        assert "(1 kinds)" not in r["name"]
        assert r["status"] == "passed"  # every node of the demo ran every check; each failed
        assert r["name"].endswith("; the node FAILED (see its failing checks)") == (said["result"] == "fail")
    node1 = nodes["gpu-node-1"]
    # a node's passed checks by family, each check a step of its family with the GPUs it passed on
    families = {s["name"].split(":")[0]: s for s in node1["steps"]}
    assert {"health", "performance"} <= set(families)
    memory = {c["name"]: c for c in families["performance"]["steps"]}["memory.bandwidth (8 GPUs)"]
    assert memory["parameters"] == [{"name": "gpus", "value": "0,1,2,3,4,5,6,7"}]
    # gpu5's ECC failed (its own failed result): the node's other 7 GPUs passed health.ecc and are counted here
    ecc = {c["name"]: c for c in families["health"]["steps"]}["health.ecc (7 GPUs)"]
    assert ecc["parameters"] == [{"name": "gpus", "value": "0,1,2,3,4,6,7"}]
    assert families["health"]["name"].startswith("health: ")
    (failed,) = [r for r in results if r["name"] == "health.ecc on gpu-node-1"]
    assert failed["status"] == "failed"


def test_allure_report_without_the_commandline_says_how_to_install(
    demo_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpucert.errors import ConfigError
    from gpucert.report import allure

    monkeypatch.setattr(allure, "find_allure", lambda: None)
    with pytest.raises(ConfigError, match=r"npm install --prefix \.tools allure-commandline@2\.46\.1"):
        allure.build_html(demo_run / "allure-results", tmp_path / "x")
    monkeypatch.setattr(allure, "find_allure", lambda: "/bin/true")
    monkeypatch.setattr(allure, "_has_java", lambda: False)
    with pytest.raises(ConfigError, match=r"Java is not installed.*openjdk-17-jre-headless"):
        allure.build_html(demo_run / "allure-results", tmp_path / "x")


def test_allure_never_empties_a_folder_that_holds_more_than_a_report(demo_run: Path, tmp_path: Path) -> None:
    """`allure generate --clean` (allure-commandline 2.46.1, its GenerateCommand) deletes what the output folder
    holds before it writes: found by a hostile-input sweep, `--out` naming the run folder or the reports folder
    deleted them. The guard comes before Allure is looked for, so it holds on a machine without it."""
    from gpucert.errors import ConfigError
    from gpucert.report import allure

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "spec.yaml").write_text("keep me\n")
    for out in (demo_run, demo_run.parent, mine):
        before = sorted(p.name for p in out.iterdir())
        with pytest.raises(ConfigError, match=r"--out .*holds more than an earlier Allure report"):
            allure.build_html(demo_run / "allure-results", out)
        assert sorted(p.name for p in out.iterdir()) == before
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "index.html").write_text("<html></html>")
    allure._replaceable(earlier)  # an earlier single-file report is what --clean replaces
    allure._replaceable(tmp_path / "new")


def test_report_rows_and_footer_say_what_the_verdict_says(demo_run: Path) -> None:
    html = (demo_run / "report.html").read_text()
    verdict = json.loads((demo_run / "verdict.json").read_text())
    # a skip shows its reason and the check it follows from, not pytest's (path, line, reason) tuple
    assert "(follows from stack.version@gpu-node-3[driver])" in html
    assert "CheckSkipped" not in html
    assert "&#39;, 0, &#39;Skipped" not in html
    assert "', 0, 'Skipped" not in html
    # the footer counts every check the verdict decided, the skipped one too
    (footer,) = re.findall(r'class="run-count">([^<]*)<', html)
    # the driver pin's compat check, and the slow node's eight pcie.h2d checks that follow from its one finding
    assert verdict["summary"]["skipped"] == 9
    assert footer.startswith(f"{verdict['summary']['checks']} checks (9 skipped for a failing cause)")


def test_allure_results_carry_their_own_times_and_go_where_alluredir_says(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    import yaml

    from .conftest import SUITES, fleet_doc, spec_doc

    (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=11)))
    spec = spec_doc(probes=["health", "memory"], multinode=None)
    spec["expect"]["nodes"] = 11
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec))
    extra = tmp_path / "allure"
    result = pytester.runpytest(
        str(SUITES / "configure"),
        str(SUITES / "certify"),
        "--spec",
        str(pytester.path / "spec.yaml"),
        "--reports",
        str(pytester.path / "reports"),
        "--alluredir",
        str(extra),
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0
    (run,) = (pytester.path / "reports").iterdir()
    for folder in (run / "allure-results", extra):
        results = [json.loads(p.read_text()) for p in folder.glob("*-result.json")]
        (cert,) = [r for r in results if r["fullName"] == "gpucert.certification"]
        assert cert["status"] == "passed"
        assert cert["name"] == "Certification of demo-h100-pod-a: PASS"
        checks = [r for r in results if r is not cert]
        # each result spans its own tests, not the whole run
        assert all(r["start"] >= cert["start"] and r["stop"] <= cert["stop"] for r in checks)
        assert len({(r["start"], r["stop"]) for r in checks}) > 1
        assert sum(r["stop"] - r["start"] for r in checks) <= len(checks) * (cert["stop"] - cert["start"])
    # nodes sort by number, not as text: gpu-node-2 before gpu-node-10
    html = (run / "report.html").read_text()
    table = html[html.index("gpucert-nodes") :]
    order = re.findall(r"<tr><td>(gpu-node-\d+)</td>", table)
    assert order == [f"gpu-node-{i}" for i in range(1, 12)]


def test_allure_report_is_titled_by_its_verdict_and_carries_its_spec_trend(demo_run: Path, tmp_path: Path) -> None:
    """Allure's overview is headed by the verdict (its donut is the share of passed checks, which on a FAIL is
    mostly green), and each report of a spec carries the trend of the one before (Allure reads history/ from its
    results: here from the earlier single-file report), without touching the signed run folder."""
    if find_allure() is None or shutil.which("java") is None:
        pytest.skip("allure-commandline or Java 17 is not installed (make test installs both)")
    from gpucert.report.allure import history_of
    from gpucert.report.allure_history import usable

    reports = tmp_path / "reports"
    earlier, later = reports / "2000-01-01T00-00-00Z-demo-h100-pod-a", reports / demo_run.name
    shutil.copytree(demo_run, earlier)
    shutil.copytree(demo_run, later)
    before = sorted(p.name for p in (later / "allure-results").iterdir())
    said = []
    # the earlier report goes elsewhere (--out): its history is kept per spec all the same
    for run, out in ((earlier, ["--out", str(tmp_path / "elsewhere")]), (later, [])):
        r = subprocess.run(
            [sys.executable, "-m", "gpucert.cli.main", "report", "allure", str(run), *out],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        said.append(r.stdout)
    assert "open it from disk in a browser" in said[0]
    store = reports / ".history" / "demo-h100-pod-a" / "allure"
    assert f"trend carried on from {store}" in said[1]
    trend = json.loads(history_of(reports / f"{later.name}-allure" / "index.html")["history-trend.json"])
    assert len(trend) == 2
    assert all(t["reportName"].startswith("Certification FAIL (demo-h100-pod-a") for t in trend)
    # what Allure wrote is kept for the spec's next run, in the shape Allure reads back (report/allure_history.py)
    assert json.loads((store / "history-trend.json").read_text()) == trend
    assert json.loads((store / "source.json").read_text()) == {"spec": "demo-h100-pod-a", "run": later.name}
    kept = {p.name: p.read_bytes() for p in store.iterdir() if p.name != "source.json"}
    assert sorted(kept) == ["categories-trend.json", "duration-trend.json", "history-trend.json", "history.json",
                            "retry-trend.json"]  # fmt: skip
    assert usable(kept)[1] == []
    assert sorted(p.name for p in (later / "allure-results").iterdir()) == before
