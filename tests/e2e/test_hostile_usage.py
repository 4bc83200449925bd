"""The hostile-usage corpus: every command with every class of bad input it can be given. Each is one line on
stderr that names the file or the option and says the fix, exit 2 (3 for an interrupt), never a traceback, never a
run folder whose verdict reads PASS. Grow it when a new class is found: add the class to CLASSES or a case below.

The matrix runs in one child process (`corpus_driver.py` calls `gpucert.cli.main.main` once per case and reports what
each wrote and returned), so a hundred cases cost one interpreter start; Ctrl-C while importing needs its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

DRIVER = Path(__file__).with_name("corpus_driver.py")
SPEC = "examples/demo.yaml"
GATE = "examples/gate.yaml"
FLEET = "examples/fleets/pools-clean.yaml"
LONG = "n" * 300  # one path component past NAME_MAX (255 bytes on Linux): ENAMETOOLONG
UNDER_FILE = f"{SPEC}/x"  # a path under a regular file: ENOTDIR

# ---- paths: every argument that names a file or a folder, given a name too long and a path under a file -------

PATH_ARGS: list[tuple[str, ...]] = [
    ("configure", "{P}"),
    ("certify", "{P}"),
    ("evaluate", "{P}", "--evidence", "{P}"),
    ("evaluate", SPEC, "--evidence", "{P}"),
    ("configure", SPEC, "--reports", "{P}"),
    ("certify", SPEC, "--sign-key", "{P}"),
    ("demo", "--reports", "{P}"),
    ("recertify", "gpu-node-1", "--spec", "{P}"),
    ("baseline", "record", "{P}"),
    ("keygen", "{P}"),
    ("sign", "{P}", "--key", "{P}"),
    ("verify", "{P}", "--key", "{P}"),
    ("punchlist", "{P}"),
    ("accept", "{P}", "--sign-key", "{P}"),
    ("countersign", "{P}", "--key", "{P}"),
    ("metrics", "--reports", "{P}", "--textfile", "out.prom"),
    ("metrics", "--textfile", "{P}"),
    ("metrics", "--spec", "{P}", "--textfile", "out.prom"),
    ("init", "--simulated", "{P}"),
    ("init", "--simulated", FLEET, "--out", "{P}"),
    ("cleanup", "{P}"),
    ("report", "allure", "{P}"),
    ("schema", "--out", "{P}"),
    ("schedule", SPEC, "--max-nodes", "1", "--reports", "{P}"),
    ("configure", GATE, "--static", "--summary", "{P}"),
    ("configure", GATE, "--static", "--operator-values", "{P}"),
    ("configure", GATE, "--static", "--cluster-policy", "{P}"),
    ("preflight", "{P}"),
]
FIFO = "pipe.fifo"  # a FIFO no process reads: opening it blocks forever (a key, a summary, a spec)
BAD_PATHS = {"name-too-long": LONG, "under-a-file": UNDER_FILE, "empty": "", "fifo": FIFO}

# ---- numbers and texts on the command line ----------------------------------------------------------------------

NUMBERS: list[tuple[tuple[str, ...], str]] = [
    (("certify", SPEC, "-n", "-1"), "-n"),
    (("certify", SPEC, "-n", "nan"), "-n"),
    (("demo", "-n", "-3"), "-n"),
    (("evaluate", SPEC, "--evidence", "reports", "-n", "1.5"), "-n"),
    (("recertify", "gpu-node-1", "--spec", SPEC, "--wait-timeout", "nan"), "--wait-timeout"),
    (("recertify", "gpu-node-1", "--spec", SPEC, "--wait-timeout", "-5"), "--wait-timeout"),
    (("recertify", "gpu-node-1", "--spec", SPEC, "--wait-timeout", "inf"), "--wait-timeout"),
    (("schedule", SPEC, "--max-nodes", "-1"), "--max-nodes"),
    (("schedule", SPEC, "--max-nodes", "nan"), "--max-nodes"),
    (("schedule", SPEC, "--max-nodes", "1", "--max-cordoned-share", "nan"), "--max-cordoned-share"),
    (("schedule", SPEC, "--max-nodes", "1", "--max-cordoned-share", "2"), "--max-cordoned-share"),
    (("schedule", SPEC, "--max-nodes", "1", "--max-failure-share", "-0.1"), "--max-failure-share"),
    (("schedule", SPEC, "--max-nodes", "1", "--min-age-hours", "nan"), "--min-age-hours"),
    (("schedule", SPEC, "--max-nodes", "1", "--wait-timeout", "-inf"), "--wait-timeout"),
    (("schedule", SPEC, "--max-nodes", "1", "--drain=maybe"), "--drain"),
]
TEXTS: list[tuple[tuple[str, ...], str]] = [
    (
        ("configure", GATE, "--static", "--operator-values", "examples/operator/values.yaml", "--operator-release", ""),
        "--operator-release",
    ),
    (("configure", GATE, "--static", "--operator-release", " "), "--operator-release"),
    (("configure", GATE, "--static", "--base-ref", ""), "--base-ref"),
    (("baseline", "record", "reports", "--force", "--reason", ""), "--reason"),
    (("init", "--simulated", FLEET, "--name", ""), "--name"),
    (("certify", SPEC, "--reports", "reports\n"), "--reports"),
    (("recertify", "gpu-node-1\n", "--spec", SPEC), "node"),
    (("recertify", "gpu-node-1 ", "--spec", SPEC), "NODE"),
    (("recertify", "../gpu-node-1", "--spec", SPEC), "NODE"),
    (("preflight", SPEC, "--node", "gpu-node-1\n"), "--node"),
    (("preflight", SPEC, "--format", "yaml"), "--format"),
]


def _case_id(argv: list[str] | tuple[str, ...]) -> str:
    return " ".join(a if len(a) < 40 else f"{a[:8]}...({len(a)})" for a in argv).replace("\n", "<LF>") or "(none)"


def _cases() -> list[Any]:
    cases = []
    for args in PATH_ARGS:
        for kind, bad in BAD_PATHS.items():
            argv = [a.replace("{P}", bad) for a in args]
            # the one-line error names the path (its start) or the option that took it
            option = args[args.index("{P}") - 1] if args.index("{P}") > 0 else args[0]
            names = [bad[:20] or "empty", option if option.startswith("-") else "required"]
            cases.append(pytest.param(argv, names, id=f"{kind}: {_case_id(args)}"))
    for argv, key in NUMBERS + TEXTS:
        cases.append(pytest.param(list(argv), [key], id=_case_id(argv)))
    return cases


CASES = _cases()


def _run_corpus(project: Path, argvs: list[list[str]]) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(DRIVER)],
        input=json.dumps(argvs),
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(proc.stdout.splitlines()[-1])
    return results


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    from .conftest import ROOT

    project = tmp_path_factory.mktemp("hostile")
    for folder in ("examples", "baselines"):
        subprocess.run(["cp", "-r", str(ROOT / folder), str(project / folder)], check=True)
    os.mkfifo(project / FIFO)
    argvs = [p.values[0] for p in CASES]
    results = _run_corpus(project, argvs)
    runs = project / "reports"
    verdicts = [json.loads(v.read_text()) for v in runs.rglob("verdict.json")] if runs.is_dir() else []
    assert not [v for v in verdicts if v.get("result") == "pass"], "a refused command left a PASS verdict behind"
    return {p.id: r for p, r in zip(CASES, results, strict=True)}


def one_line(result: dict[str, Any], expected_exit: int = 2) -> str:
    err: str = result["stderr"]
    assert "Traceback" not in err + result["stdout"], err
    assert result["raised"] is None, result["raised"]
    assert result["code"] == expected_exit, (result["code"], err, result["stdout"][-500:])
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("argv", "names"), CASES)
def test_every_command_refuses_bad_input_in_one_line(
    corpus: dict[str, dict[str, Any]], request: pytest.FixtureRequest, argv: list[str], names: list[str]
) -> None:
    line = one_line(corpus[request.node.callspec.id])
    said = ["empty", "required", "is a folder"] if "" in argv else names
    assert any(name in line for name in said), line


# ---- documents: values YAML cannot construct, and values no model takes ----------------------------------------


def _edit(path: Path, change: Callable[[str], str]) -> None:
    path.write_text(change(path.read_text()))


DOCUMENTS: list[tuple[str, str, str, Callable[[str], str], list[str]]] = [
    # (file to edit, command, its argument, the edit, what the line names)
    (
        SPEC,
        "configure",
        SPEC,
        lambda t: t.replace("{name: demo-h100-pod-a}", "{name: 2020-02-30}"),
        ["demo.yaml:4", "name: 2020-02-30 is not a date"],
    ),
    (
        SPEC,
        "configure",
        SPEC,
        lambda t: t.replace('minVersion: "1.30"', "minVersion: 2023-02-29"),
        ["demo.yaml", "minVersion: 2023-02-29 is not a date", "YYYY-MM-DD"],
    ),
    (
        SPEC,
        "configure",
        SPEC,
        lambda t: t.replace('version: "570.124.06"', "version: latest"),
        ["demo.yaml:11", "stack.components[0].version", "'latest'"],
    ),
    (
        "examples/fleets/h100-4x8-faulty.yaml",
        "configure",
        SPEC,
        lambda t: t.replace("seed: 7", "seed: -7"),
        ["h100-4x8-faulty.yaml", "seed", "out of range; write a whole number from 0"],
    ),
    (
        "examples/fleets/h100-4x8-faulty.yaml",
        "configure",
        SPEC,
        lambda t: t + "\nwhen: 2021-13-01\n",
        ["h100-4x8-faulty.yaml", "2021-13-01 is not a date"],
    ),
    (
        "baselines/gpus/H100-SXM5-80GB.yaml",
        "configure",
        SPEC,
        lambda t: t + "\nreviewed: 2022-04-31\n",
        ["H100-SXM5-80GB.yaml", "reviewed: 2022-04-31 is not a date"],
    ),
    (
        "examples/handover/waivers.yaml",
        "configure",
        "examples/handover/spec-after-repair.yaml",
        lambda t: t.replace("expires: 2027-12-31", "expires: 2027-02-30"),
        ["waivers.yaml", "expires: 2027-02-30 is not a date"],
    ),
    (
        "examples/operator/values.yaml",
        "configure",
        GATE,
        lambda t: t + "\nreleased: 2025-06-31\n",
        ["values.yaml", "released: 2025-06-31 is not a date"],
    ),
]


@pytest.mark.parametrize(
    ("doc", "command", "arg", "change", "expected"),
    DOCUMENTS,
    ids=[f"{d[0].rsplit('/', 1)[-1]}-{i}" for i, d in enumerate(DOCUMENTS)],
)
def test_documents_yaml_cannot_read_are_one_line(
    project: Path, doc: str, command: str, arg: str, change: Callable[[str], str], expected: list[str]
) -> None:
    _edit(project / doc, change)
    extra = ["--static", "--operator-values", "examples/operator/values.yaml"] if arg == GATE else []
    (result,) = _run_corpus(project, [[command, arg, *extra, "--reports", "reports"]])
    line = one_line(result)
    for text in expected:
        assert text in line, line


@pytest.mark.parametrize("name", ["gpu-node-1\n", "gpu-node-1\n\n", "\ngpu-node-1", "gpu-node-1 "])
def test_node_names_are_matched_whole(name: str) -> None:
    from gpucert.spec.names import NameError_, check_node_name

    with pytest.raises(NameError_):
        check_node_name(name)  # `$` with re.match takes "gpu-node-1\n": only fullmatch refuses it


def test_a_node_name_with_a_newline_in_a_fleet_or_a_waiver(project: Path) -> None:
    fleet = project / "examples/fleets/h100-4x8-faulty.yaml"
    doc = yaml.safe_load(fleet.read_text())
    doc["faults"] = [{"kind": "unreachable", "node": "gpu-node-1\n"}]
    fleet.write_text(yaml.safe_dump(doc))
    waivers = project / "examples/handover/waivers.yaml"
    wdoc = yaml.safe_load(waivers.read_text())
    wdoc["waivers"][0]["select"] = {"node": "gpu-node-1\n", "gpu": 0}
    waivers.write_text(yaml.safe_dump(wdoc))
    first, second = _run_corpus(
        project,
        [
            ["configure", SPEC, "--reports", "reports"],
            ["configure", "examples/handover/spec-after-repair.yaml", "--reports", "r2"],
        ],
    )
    assert "faults[0]" in one_line(first)
    assert "waivers[0].select" in one_line(second)


# ---- a late output, and Ctrl-C ----------------------------------------------------------------------------------


def test_a_summary_that_cannot_be_written_is_refused_before_the_run(project: Path) -> None:
    (project / "summary.md").mkdir()
    (result,) = _run_corpus(
        project, [["configure", GATE, "--static", "--summary", "summary.md", "--reports", "reports"]]
    )
    assert "--summary" in one_line(result)
    reports = project / "reports"
    assert not reports.exists() or not list(reports.rglob("verdict.json")), "a verdict was written before the error"


def test_the_suites_refuse_a_path_the_system_refuses_as_a_usage_error(project: Path) -> None:
    from .conftest import ROOT

    suites = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(ROOT / "suites" / "configure")]
    for reports in (LONG, f"{SPEC}/reports"):
        proc = subprocess.run(
            [*suites, "--spec", SPEC, "--reports", reports, "-q"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        assert "INTERNALERROR" not in proc.stdout + proc.stderr
        assert [line for line in proc.stderr.splitlines() if line.strip()] == [
            line for line in proc.stderr.splitlines() if line.startswith("ERROR: ")
        ]


def test_a_summary_that_fails_after_the_run_leaves_no_verdict(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check before the run passed, and the write failed anyway (the folder appeared in between): the run's
    folder goes, so no verdict reading PASS stays behind the error."""
    from gpucert.cli import certify
    from gpucert.cli import main as cli

    monkeypatch.chdir(project)
    monkeypatch.setattr(certify, "output_file", lambda path, key: path)  # as if the early checks had passed
    monkeypatch.setattr(certify, "file_to_write", lambda text: text)
    (project / "summary.md").mkdir()
    argv = ["configure", GATE, "--static", "--summary", "summary.md", "--reports", "reports"]
    handler = signal.getsignal(signal.SIGTERM)
    try:
        assert cli.main(argv) == 2
    finally:
        signal.signal(signal.SIGTERM, handler)  # cli.main turns SIGTERM into Ctrl-C for its run
    assert "--summary: cannot write the summary" in capsys.readouterr().err
    assert not list((project / "reports").rglob("verdict.json"))


INTERRUPT_ON_IMPORT = """
import sys
import time
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "rich":
            raise KeyboardInterrupt  # as Ctrl-C lands while the CLI's libraries load
        return None
sys.meta_path.insert(0, Interrupt())
from gpucert.__main__ import main
sys.exit(main())
"""


def test_ctrl_c_while_importing_is_an_interrupt_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPT_ON_IMPORT, "configure", SPEC],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["gpucert: interrupted while starting; nothing was run"]


def test_the_console_script_is_the_guarded_entry_point() -> None:
    import tomllib

    from .conftest import ROOT

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpucert"] == "gpucert.__main__:main"


def test_a_summary_into_a_fifo_with_a_reader_is_written(project: Path) -> None:
    """`--summary /dev/stdout | tee` and a named FIFO with its reader still get the summary: only a FIFO that no
    process reads is refused (it blocked forever), and the check is made at the write, since an open and a close
    before the run would end the reader's input."""
    fifo = project / "summary.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)  # cat has the FIFO open for reading
        (result,) = _run_corpus(project, [["configure", GATE, "--static", "--summary", fifo.name, "--reports", "r"]])
        got, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
    assert result["code"] == 0, result["stderr"]
    assert "acme-prod" in got, got
    assert "3 of 3 required checks ran" in got, got


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--reports", ""], "--reports"),  # the CLI refuses it; under pytest it wrote into the working folder
        (["--spec", " "], "--spec"),
        (["--signer", "me\nSHA256:forged"], "--signer"),  # the report shows the signer: only a fingerprint
        (["--static", "--evidence", "reports"], "--static and --evidence"),  # --static won without a word
        (["--no-measure", "--evidence", "reports"], "--evidence and --no-measure"),
    ],
)
def test_the_suites_refuse_bad_options_as_a_usage_error(project: Path, options: list[str], named: str) -> None:
    from .conftest import ROOT

    spec = [] if "--spec" in options else ["--spec", SPEC]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(ROOT / "suites" / "configure"), *spec, *options],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert named in proc.stderr, proc.stderr
    assert not (project / "reports").exists()
