"""A run is judged by the spec and baselines it was prepared with: the copies in its inputs/ (signed with it), read
once per process through `Evaluation.from_run`, never the user's files again (issue 24, step 3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import gpucert.plan.inputs
from gpucert import ConfigError, EvidenceError
from gpucert.cli import certify
from gpucert.errors import IncompleteRunError
from gpucert.evaluate.evaluation import Evaluation
from gpucert.plan.runfolder import RunFolder

from .conftest import SUITES


def _configure(pytester: pytest.Pytester, spec: Path) -> Path:
    """A plan-only run of the configure suite (no measurement: quick), and its run folder."""
    reports = pytester.path / "reports"
    result = pytester.runpytest(
        str(SUITES / "configure"),
        "--spec",
        str(spec),
        "--no-measure",
        "--reports",
        str(reports),
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    (run,) = reports.iterdir()
    return run


def test_a_run_is_judged_by_its_own_inputs_read_once(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _configure(pytester, project / "examples" / "clean.yaml")
    # the user's spec and baselines are gone: the run folder holds what it was prepared with
    shutil.rmtree(project / "examples")
    shutil.rmtree(project / "baselines")
    (run / "verdict.json").unlink()
    specs: list[Path] = []
    baselines: list[Path] = []

    def load_spec(path: Path) -> object:
        specs.append(Path(path))
        return real_spec(path)

    def load_baseline(path: Path) -> object:
        baselines.append(Path(path))
        return real_baseline(path)

    real_spec, real_baseline = gpucert.plan.inputs.load_spec, gpucert.plan.inputs.load_baseline
    monkeypatch.setattr(gpucert.plan.inputs, "load_spec", load_spec)
    monkeypatch.setattr(gpucert.plan.inputs, "load_baseline", load_baseline)
    result = pytester.runpytest(str(SUITES / "configure"), "--run-dir", str(run), "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["gpucert: spec clean-h100-pod-a, run folder *", "CONFIGURATION PASS*"])
    assert (run / "verdict.json").is_file()
    assert specs == [run / "inputs" / "spec.yaml"]
    assert baselines == [run / "inputs" / "baseline.yaml"]


def test_from_run_validates_the_inputs_as_when_they_were_given(pytester: pytest.Pytester, project: Path) -> None:
    run = _configure(pytester, project / "examples" / "clean.yaml")
    ev = Evaluation.from_run(run)
    assert ev.spec.path == run / "inputs" / "spec.yaml"
    assert ev.baselines["default"].product == "NVIDIA-H100-80GB-HBM3"
    # a baseline copy for other GPUs than the pool expects is refused, naming the copy
    copy = run / "inputs" / "baseline.yaml"
    doc = yaml.safe_load(copy.read_text())
    doc["product"] = "NVIDIA-H200"
    copy.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"inputs/baseline\.yaml"):
        Evaluation.from_run(RunFolder(run))
    (run / "inputs" / "spec.yaml").unlink()
    with pytest.raises(EvidenceError, match=r"no spec.yaml in inputs/: not a run folder gpucert prepared"):
        Evaluation.from_run(run)


def test_a_spec_beside_run_dir_must_name_the_same_baselines(pytester: pytest.Pytester, project: Path) -> None:
    run = _configure(pytester, project / "examples" / "clean.yaml")
    # the same spec text in another folder names other baseline files: those must be the run's too
    other = pytester.path / "elsewhere" / "examples"
    other.mkdir(parents=True)
    shutil.copy(project / "examples" / "clean.yaml", other / "clean.yaml")
    gpus = pytester.path / "elsewhere" / "baselines" / "gpus"
    gpus.mkdir(parents=True)
    text = (project / "baselines" / "gpus" / "H100-SXM5-80GB.yaml").read_text()
    (gpus / "H100-SXM5-80GB.yaml").write_text(text + "# edited after the run was prepared\n")
    result = pytester.runpytest(
        str(SUITES / "configure"), "--spec", str(other / "clean.yaml"), "--run-dir", str(run), "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not the baseline.yaml this run was prepared with" in result.stderr.str()
    # the spec and baselines it was prepared with are accepted beside it
    same = pytester.runpytest(
        str(SUITES / "configure"),
        "--spec",
        str(project / "examples" / "clean.yaml"),
        "--run-dir",
        str(run),
        "-p",
        "no:cacheprovider",
    )
    assert same.ret == 0, same.stdout.str()[-2000:]


def test_the_command_hands_the_suites_the_run_folder_alone(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpucert certify` (configure, evaluate, recertify) copied the spec and baselines into the run folder it
    prepared: the suites it runs get the folder, not the spec again (which the session would read a second time)."""
    run = _configure(pytester, project / "examples" / "clean.yaml")
    seen: list[list[str]] = []

    def main(args: list[str], plugins: object = None) -> int:
        seen.append(list(args))
        return int(pytest.ExitCode.OK)

    monkeypatch.setattr(certify.pytest, "main", main)
    with pytest.raises(IncompleteRunError, match=r"wrote no verdict\.json"):  # the stand-in ran nothing
        certify.evaluate_run(RunFolder(run), workers=None, quiet=True, signer=None)
    (args,) = seen
    assert "--spec" not in args
    assert args[args.index("--run-dir") + 1] == str(run)
