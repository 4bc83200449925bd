"""examples/ci run as copied: each step's shell, as GitHub Actions and GitLab CI run it, in a platform team's
repository on a merge-request branch, with gpucert cloned from a repository and installed with pip into a Python
of its own (what actions/setup-python and the python:3.11-slim image give).

Only what is not gpucert's is stood in for, each where the example uses it: actions/checkout (the checkout is made
here, full depth), actions/setup-python (a venv), the `gh` CLI and `apt-get` (recorded, not run), and the two
artifact actions, whose inputs are checked instead (the paths they would upload or parse exist and parse). pip runs
offline (PIP_NO_INDEX) without build isolation: the test environment already holds gpucert's dependencies and its
build backend (hatchling and editables, in the `test` extra).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT

CI = ROOT / "examples" / "ci"
OPERATOR = ROOT / "tests" / "fixtures" / "operator"


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    r = subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=120)
    return r.stdout.strip()


def tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def runner_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python of the job's own, with pip, as setup-python (or the python image) gives: a venv that sees this
    environment's packages (gpucert's dependencies, hatchling) but not gpucert itself."""
    pytest.importorskip("hatchling", reason="the test extra's build backend: pip install -e '.[test]'")
    pytest.importorskip("editables", reason="the test extra's build backend: pip install -e '.[test]'")
    where = tmp_path_factory.mktemp("runner") / "python"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, capture_output=True, timeout=300)
    purelib = sysconfig.get_paths()["purelib"]
    venv_lib = Path(
        subprocess.run(
            [str(where / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # a path line adds the folder, not its .pth files: this environment's editable gpucert stays out of sight
    (venv_lib / "zz-test-environment.pth").write_text(purelib + "\n")
    return where / "bin"


@pytest.fixture
def gpucert_repo(tmp_path: Path) -> tuple[str, str]:
    """gpucert as a repository to clone, and the commit to use: this checkout's working tree as a commit
    (`git stash create` writes it without touching the checkout), so the test covers the code as it is now."""
    if not (ROOT / ".git").exists():
        pytest.skip("gpucert is cloned from this checkout, and this is not a git checkout")
    commit = git(ROOT, "stash", "create") or git(ROOT, "rev-parse", "HEAD")  # `create` leaves the stash list alone
    mirror = tmp_path / "gpucert.git"
    git(tmp_path, "clone", "-q", "--bare", str(ROOT), str(mirror))
    git(ROOT, "push", "-q", str(mirror), f"{commit}:refs/heads/under-test")
    git(mirror, "symbolic-ref", "HEAD", "refs/heads/under-test")  # its default branch, cloned when no ref is set
    return mirror.as_uri(), commit


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A platform team's repository (spec, baselines, operator values on main) and a merge request's branch that
    changes the operator values: the checkout the job runs in, with `origin` holding main."""
    seed = tmp_path / "seed"
    shutil.copytree(ROOT / "baselines" / "gpus", seed / "baselines" / "gpus")
    (seed / "specs").mkdir()
    shutil.copy(ROOT / "examples" / "gate.yaml", seed / "specs" / "prod.yaml")
    (seed / "gpu-operator").mkdir()
    shutil.copy(OPERATOR / "values-v25.3.2.yaml", seed / "gpu-operator" / "values.yaml")
    shutil.copy(OPERATOR / "values-prod.yaml", seed / "gpu-operator" / "values-prod.yaml")
    git(tmp_path, "init", "-q", "-b", "main", str(seed))
    git(seed, "add", ".")
    git(seed, "commit", "-q", "-m", "the cluster as it is")
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(tmp_path / "origin.git"))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(tmp_path / "origin.git"), str(work))
    git(work, "checkout", "-q", "-b", "raise-upgrade-parallelism")
    prod = work / "gpu-operator" / "values-prod.yaml"
    prod.write_text(prod.read_text().replace("maxParallelUpgrades: 2", "maxParallelUpgrades: 4"))
    git(work, "commit", "-q", "-am", "upgrade four nodes at a time")
    return work


def stand_ins(tmp_path: Path) -> tuple[Path, Path]:
    """`gh` and `apt-get` as recorders, on a folder put first on PATH; and the log they write."""
    bin_ = tmp_path / "stand-ins"
    bin_.mkdir()
    log = tmp_path / "stand-ins.log"
    for name in ("gh", "apt-get"):
        tool(bin_, name, f'echo "{name} $*" >> "{log}"')
    return bin_, log


def shell(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A step's script as both runners run it: bash, stopping at the first failing command."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def junit_files(cwd: Path, pattern: str) -> list[Path]:
    found = [Path(p) for p in glob.glob(str(cwd / pattern))]
    for path in found:
        assert ET.parse(path).getroot().tag in {"testsuites", "testsuite"}, path
    return found


# ---- GitHub Actions ----------------------------------------------------------------------------------------------

_EXPR = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def github_expression(text: str, context: dict[str, str]) -> str:
    """`${{ ... }}` as GitHub substitutes it before the shell sees the script; an expression this test does not
    know fails it (a new one must be given a value here, not read as empty)."""

    def one(m: re.Match[str]) -> str:
        assert m.group(1) in context, f"no value for ${{{{ {m.group(1)} }}}} in the test"
        return context[m.group(1)]

    return _EXPR.sub(one, text)


def github_if(condition: str | None, cwd: Path, failed: bool) -> bool:
    """The step conditions the workflow uses (without one, a step runs only while all before it passed)."""
    if condition is None:
        return not failed
    parts = [p.strip() for p in condition.split("&&")]
    ok = True
    for part in parts:
        if part == "always()":
            continue
        m = re.fullmatch(r"hashFiles\('([^']+)'\) != ''", part)
        assert m is not None, f"the test does not know the condition {part!r}"
        ok = ok and bool(glob.glob(str(cwd / m.group(1))))
    return ok


def run_github_job(
    runner_python: Path, gpucert_repo: tuple[str, str], checkout: Path, tmp_path: Path
) -> tuple[dict[str, int], list[str], Path, Path]:
    """The gate job's steps in order, with GitHub's step conditions: each `run:` step's exit status by name, the
    third-party actions whose inputs were checked, RUNNER_TEMP, and the stand-ins' log."""
    doc = yaml.safe_load((CI / "github-actions.yml").read_text())
    repo_url, commit = gpucert_repo
    stand_in_bin, log = stand_ins(tmp_path)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    context = {
        "vars.GPUCERT_REPO": repo_url,
        "vars.GPUCERT_REF": commit,
        "github.base_ref": "main",
        "github.token": "ghs_test",
        "github.event.pull_request.number": "17",
    }
    env = {
        "PATH": f"{stand_in_bin}:{runner_python}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md"),
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
    }
    failed, ran, checked = False, {}, []
    for step in doc["jobs"]["gate"]["steps"]:
        if not github_if(step.get("if"), checkout, failed):
            continue
        uses = step.get("uses", "")
        if uses.startswith("actions/checkout@"):
            assert step["with"]["fetch-depth"] == 0  # --base-ref reads the base branch: the checkout has it
            assert git(checkout, "rev-parse", "--verify", "origin/main")
        elif uses.startswith("actions/setup-python@"):
            assert step["with"]["python-version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
        elif uses.startswith("actions/upload-artifact@"):
            assert any((checkout / step["with"]["path"]).iterdir()), step["with"]["path"]
            checked.append(uses)
        elif uses.startswith("mikepenz/action-junit-report@"):
            assert junit_files(checkout, step["with"]["report_paths"]), step["with"]["report_paths"]
            checked.append(uses)
        else:
            assert "run" in step, f"a step this test does not know: {step}"
            step_env = {**env, **{k: github_expression(str(v), context) for k, v in (step.get("env") or {}).items()}}
            r = shell(github_expression(step["run"], context), checkout, step_env)
            assert r.returncode in {0, 1}, f"{step.get('name')}: {r.stdout}{r.stderr}"  # 1: the gate's verdict
            ran[step["name"]] = r.returncode
            failed = failed or r.returncode != 0
    return ran, checked, runner_temp, log


INSTALL = "Install gpucert from its checkout (the suites live beside the package)"


def test_github_workflow_runs_as_copied(
    runner_python: Path, gpucert_repo: tuple[str, str], checkout: Path, tmp_path: Path
) -> None:
    doc = yaml.safe_load((CI / "github-actions.yml").read_text())
    # mikepenz/action-junit-report publishes its result as a check run (src/annotator.ts calls
    # octokit.rest.checks.create, or checks.update), which GitHub's REST API allows a job token only with
    # `checks: write`; the PR comment (gh pr comment) needs pull-requests: write
    assert doc["permissions"] == {"contents": "read", "pull-requests": "write", "checks": "write"}
    ran, checked, runner_temp, log = run_github_job(runner_python, gpucert_repo, checkout, tmp_path)
    assert ran == {INSTALL: 0, "Gate the change": 0, "Post the summary": 0}
    assert checked == ["actions/upload-artifact@v4", "mikepenz/action-junit-report@v4"]
    # the gpucert the job runs is the clone's, at the commit asked for
    where = subprocess.run(
        [str(runner_python / "python"), "-c", "import gpucert; print(gpucert.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},  # as on a runner: no PYTHONPATH of the test session's own
    ).stdout
    assert where.startswith(str(runner_temp / "gpucert"))
    assert git(runner_temp / "gpucert", "rev-parse", "HEAD") == gpucert_repo[1]
    summary = (checkout / "gpucert-summary.md").read_text()
    assert summary.startswith("## ✅ gpucert static gate: PASS")
    assert (tmp_path / "step-summary.md").read_text() == summary
    assert "gh pr comment 17 --body-file gpucert-summary.md --edit-last" in log.read_text()


def test_github_workflow_fails_a_bad_change_and_still_reports_it(
    runner_python: Path, gpucert_repo: tuple[str, str], checkout: Path, tmp_path: Path
) -> None:
    """A change that deploys another driver than the spec pins: the gate step fails the job, and the summary, the
    run folder and the JUnit report are still posted and kept (their steps run `if: always()`)."""
    prod = checkout / "gpu-operator" / "values-prod.yaml"
    values = yaml.safe_load(prod.read_text())
    values["driver"]["version"] = "570.158.01"
    prod.write_text(yaml.safe_dump(values))
    git(checkout, "commit", "-q", "-am", "a newer driver")
    ran, checked, _, log = run_github_job(runner_python, gpucert_repo, checkout, tmp_path)
    assert ran == {INSTALL: 0, "Gate the change": 1, "Post the summary": 0}
    assert checked == ["actions/upload-artifact@v4", "mikepenz/action-junit-report@v4"]
    summary = (checkout / "gpucert-summary.md").read_text()
    assert summary.startswith("## ❌ gpucert static gate: FAIL")
    assert "570.158.01" in summary
    assert "gh pr comment 17 --body-file gpucert-summary.md" in log.read_text()


def test_github_workflow_says_how_to_set_the_repository(runner_python: Path, checkout: Path, tmp_path: Path) -> None:
    """Copied without the repository variable set, the install step stops and names it."""
    doc = yaml.safe_load((CI / "github-actions.yml").read_text())
    (step,) = [s for s in doc["jobs"]["gate"]["steps"] if s.get("name", "").startswith("Install gpucert")]
    context = {"vars.GPUCERT_REPO": "", "vars.GPUCERT_REF": ""}  # what GitHub gives for an unset variable
    env = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path)}
    env |= {k: github_expression(str(v), context) for k, v in step["env"].items()}
    r = shell(github_expression(step["run"], context), checkout, env)
    assert r.returncode != 0
    assert "set the repository variable GPUCERT_REPO to the clone URL" in r.stderr


# ---- GitLab CI ---------------------------------------------------------------------------------------------------


def test_gitlab_job_runs_as_copied(
    runner_python: Path, gpucert_repo: tuple[str, str], checkout: Path, tmp_path: Path
) -> None:
    job: dict[str, Any] = yaml.safe_load((CI / "gitlab-ci.yml").read_text())["gpucert-gate"]
    assert job["image"] == f"python:{sys.version_info[0]}.{sys.version_info[1]}-slim"
    assert job["variables"]["GIT_DEPTH"] == "0"
    repo_url, commit = gpucert_repo
    stand_in_bin, log = stand_ins(tmp_path)
    opt = tmp_path / "opt"  # the image's /opt, which this machine may not let a test write
    env = {
        "PATH": f"{stand_in_bin}:{runner_python}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        **{k: str(v) for k, v in job["variables"].items()},
        # CI/CD variables the team sets, and those GitLab sets for a merge request pipeline
        "GPUCERT_REPO": repo_url,  # GPUCERT_REF unset: the repository's default branch
        "CI_PIPELINE_SOURCE": "merge_request_event",
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
        "CI_MERGE_REQUEST_IID": "17",
        "CI_PROJECT_ID": "4",
        "CI_API_V4_URL": "https://gitlab.invalid/api/v4",
    }
    # before_script and script share one shell; after_script runs in its own, whatever the script's outcome
    script = "\n".join([*job["before_script"], *job["script"]]).replace("/opt/", f"{opt}/")
    r = shell(script, checkout, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "apt-get install -y -qq git curl" in log.read_text()
    assert git(opt / "gpucert", "rev-parse", "HEAD") == commit
    after = shell("\n".join(job["after_script"]), checkout, env)  # no GPUCERT_NOTE_TOKEN: no comment, no failure
    assert after.returncode == 0, after.stdout + after.stderr
    assert (checkout / "gpucert-summary.md").read_text().startswith("## ✅ gpucert static gate: PASS")
    artifacts = job["artifacts"]
    assert artifacts["when"] == "always"
    for path in artifacts["paths"]:
        assert glob.glob(str(checkout / path)), path
    assert junit_files(checkout, artifacts["reports"]["junit"])
