"""The habits the lint enforces (issue 24, item 6): which room may import what, short functions, and a pre-commit
config that runs what CI runs. ruff is run as `make lint` runs it, on source given on stdin under a path in the
tree, so per-file-ignores apply as they would to a real file there and nothing is written into the tree."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GPU_LIBRARIES = ("cupy", "cupy_backends", "pynvml", "pynccl", "nvidia")
KUBERNETES_LIBRARIES = ("kubernetes", "urllib3")


def _ruff(path: str, source: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "--stdin-filename", path],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


IMPORTS = [
    ("src/gpucert/evaluation_new.py", "import cupy\n\nprint(cupy)\n", True),
    ("src/gpucert/report/new.py", "from pynvml import nvmlInit\n\nprint(nvmlInit)\n", True),
    ("src/gpucert/evaluate/rules/new.py", "from cupy_backends.cuda.libs import cublas\n\nprint(cublas)\n", True),
    ("src/gpucert/measure/targets/simulated/new.py", "import cupy\n\nprint(cupy)\n", True),
    ("src/gpucert/measure/targets/local_new.py", "from kubernetes import client\n\nprint(client)\n", True),
    ("src/gpucert/run_new.py", "from urllib3.exceptions import HTTPError\n\nprint(HTTPError)\n", True),
    ("suites/certify/test_new.py", "import cupy\n\nprint(cupy)\n", True),
    ("fixtures/new.py", "import kubernetes\n\nprint(kubernetes)\n", True),
    ("src/gpucert/measure/probes/new.py", "import cupy\nimport pynvml\n\nprint(cupy, pynvml)\n", False),
    ("src/gpucert/measure/targets/kubernetes/new.py", "from kubernetes import client\n\nprint(client)\n", False),
    ("src/gpucert/measure/targets/kubernetes/api.py", "from kubernetes import client\n\nprint(client)\n", False),
]


@pytest.mark.parametrize(("path", "source", "banned"), IMPORTS, ids=[f"{p}:{s.split()[1]}" for p, s, _ in IMPORTS])
def test_only_probes_import_gpu_libraries_and_only_the_kubernetes_target_imports_kubernetes(
    path: str, source: str, banned: bool
) -> None:
    rc, out = _ruff(path, source)
    assert ("TID251" in out) is banned, out
    assert (rc != 0) is banned, out


def test_complex_or_long_new_functions_fail_lint() -> None:
    branchy = "def f(x: int) -> int:\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(13))
    rc, out = _ruff("src/gpucert/new.py", branchy + "    return -1\n")
    assert rc != 0
    assert "C901" in out
    assert "PLR0912" in out
    long_ = "def g() -> list[int]:\n    out = []\n" + "".join(f"    out.append({i})\n" for i in range(50))
    rc, out = _ruff("src/gpucert/new.py", long_ + "    return out\n")
    assert rc != 0
    assert "PLR0915" in out


LINTED = ("src", "fixtures", "suites", "tests", "benchmarks")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 450  # a module of src/ is under this


def _python_files() -> list[Path]:
    return [p for d in LINTED for p in (ROOT / d).rglob("*.py")]


def _long_functions(source: str) -> dict[str, int]:
    """Each function of `source` over MAX_FUNCTION_LINES lines (def to end, decorators excluded): name -> lines."""
    return {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }


def test_the_length_finder_counts_from_def_to_end() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    assert _long_functions(f"@property\ndef f():\n{body}") == {}  # 80 lines with its def: the limit
    assert _long_functions(f"def f():\n{body}    return 1\n") == {"f": 81}
    nested = "".join(f"    {line}\n" for line in f"async def g(self):\n{body}    return 1".splitlines())
    assert _long_functions(f"class C:\n{nested}") == {"g": 81}


def test_no_function_over_80_lines() -> None:
    """Issue 24: no function over 80 lines. ruff counts statements (PLR0915), not lines, so this counts the lines."""
    files = _python_files()
    assert len(files) > 200
    long_ = {
        f"{path.relative_to(ROOT)}:{name}": n for path in files for name, n in _long_functions(path.read_text()).items()
    }
    assert long_ == {}, "split it: a helper per step of what it does"


def test_no_module_of_src_at_or_over_450_lines() -> None:
    modules = {str(p.relative_to(ROOT)): p.read_text().count("\n") for p in (ROOT / "src").rglob("*.py")}
    assert len(modules) > 100
    big = {m: n for m, n in modules.items() if n >= MAX_MODULE_LINES}
    assert big == {}, "split it: a module per concern"


SUBPROCESS_CALLS = {
    "subprocess.run",
    "subprocess.Popen",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "os.system",
    "os.popen",
    "os.execvp",
    "os.execv",
    "shutil.which",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _runs_dcgmi(source: str) -> list[int]:
    """Lines where `source` starts a process (or looks one up) whose command line names dcgmi."""
    lines = []
    for call in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)):
        if _dotted(call.func) not in SUBPROCESS_CALLS:
            continue
        words = [n.value for a in call.args for n in ast.walk(a) if isinstance(n, ast.Constant)]
        if any(isinstance(w, str) and w.split(" ")[0].rsplit("/", 1)[-1] == "dcgmi" for w in words):
            lines.append(call.lineno)
    return lines


def _imports(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_dcgmi_finder_finds_a_module_that_runs_dcgmi() -> None:
    source = 'import subprocess\nimport shutil\nsubprocess.run(["dcgmi", "diag", "-r", "1"])\nshutil.which("dcgmi")\n'
    assert _runs_dcgmi(source) == [3, 4]
    assert _runs_dcgmi('subprocess.run(["/usr/bin/dcgmi diag -r 1"], shell=True)\n') == [1]
    assert _runs_dcgmi('subprocess.run(["git", "status"])\nprint("dcgmi")\n') == []


def test_only_probes_run_dcgmi() -> None:
    """ruff's banned-api sees imports, not the strings of a command line; this walks the source for them."""
    probes = ROOT / "src" / "gpucert" / "measure" / "probes"
    outside = [p for p in (ROOT / "src" / "gpucert").rglob("*.py") if not p.is_relative_to(probes)]
    assert len(outside) > 50
    offenders = {str(p.relative_to(ROOT)): _runs_dcgmi(p.read_text()) for p in outside}
    assert {p: lines for p, lines in offenders.items() if lines} == {}


def test_probes_and_the_kubernetes_target_keep_to_their_own_libraries() -> None:
    """What per-file-ignores cannot say (they lift TID251 as a whole): probes import no Kubernetes client, the
    Kubernetes target no GPU library."""
    kube = list((ROOT / "src" / "gpucert" / "measure" / "targets" / "kubernetes").rglob("*.py"))
    probes = list((ROOT / "src" / "gpucert" / "measure" / "probes").rglob("*.py"))
    assert len(kube) > 3
    assert len(probes) > 10
    wrong = {str(p.relative_to(ROOT)): _imports(p.read_text()) & set(GPU_LIBRARIES) for p in kube}
    wrong |= {str(p.relative_to(ROOT)): _imports(p.read_text()) & set(KUBERNETES_LIBRARIES) for p in probes}
    assert {p: libs for p, libs in wrong.items() if libs} == {}


def _recipe(makefile: str, target: str) -> list[str]:
    lines = makefile.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip().replace("$(BIN)/", ".venv/bin/"))
    return recipe


def test_pre_commit_runs_what_ci_runs() -> None:
    """CI runs `make test` (.ci/run): lint and typecheck, then the unit tests. The pre-commit hooks run the same lint
    and typecheck lines, with the project's venv, from local hooks (nothing fetched at commit time)."""
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "test: lint typecheck docs unit" in makefile
    ci = _recipe(makefile, "lint") + _recipe(makefile, "typecheck")
    assert len(ci) == 3
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [r["repo"] for r in config["repos"]] == ["local"]
    hooks = [h for r in config["repos"] for h in r["hooks"]]
    assert [" ".join([h["entry"], *h.get("args", [])]) for h in hooks] == ci
    assert all(h["language"] == "system" and h["pass_filenames"] is False for h in hooks)


def test_mypy_is_strict_on_suites_and_fixtures_too() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["strict"] is True
    assert {"src/gpucert", "suites", "fixtures", "conftest.py"} <= set(mypy["files"])
