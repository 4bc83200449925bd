"""The static gate's inputs: the GPU Operator files a change edits, and each SKU baseline as it was at the base ref
(read with git), validated before a run folder exists and copied into it (inputs/), so the gate's verdict
re-evaluates offline and is signed with what it judged. Reading them back is `gate_from`'s.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucert.documents import load_yaml
from gpucert.errors import ConfigError, EvidenceError
from gpucert.runfolder import RunFolder
from gpucert.spec import ClusterSpec
from gpucert.stack.gate import BaselineReview, Gate
from gpucert.stack.gate_data import load_tables
from gpucert.stack.operator_values import Deployment, read_cluster_policy, read_values

__all__ = ["GateInputs", "gate_from", "record_gate"]

GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class GateInputs:
    """What `gpucert configure --static` was given beside the spec."""

    operator_values: list[Path] = field(default_factory=list)
    cluster_policies: list[Path] = field(default_factory=list)
    operator_release: str | None = None
    base_ref: str | None = None

    @property
    def given(self) -> bool:
        return bool(self.operator_values or self.cluster_policies or self.base_ref)


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise ConfigError("--base-ref needs git, which is not installed", key="--base-ref") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"git {' '.join(args)} did not answer in {GIT_TIMEOUT_S} s", key="--base-ref") from None


def _at_ref(spec_dir: Path, ref: str, files: dict[str, Path]) -> tuple[str, dict[str, bytes | None]]:
    """The commit `ref` names, and each file's content there (None: not in that commit)."""
    top = _git(spec_dir, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise ConfigError(f"--base-ref needs a git checkout: {spec_dir} is not in one", key="--base-ref")
    root = Path(top.stdout.decode().strip())
    commit = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit.returncode != 0:
        raise ConfigError(
            f"{ref!r} is not a commit of {root} (fetch it first, e.g. git fetch origin main, and give origin/main)",
            key="--base-ref",
        )
    out: dict[str, bytes | None] = {}
    for name, path in files.items():
        try:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            raise ConfigError(f"the baseline {path} is outside the checkout {root}", key="--base-ref") from None
        shown = _git(root, "show", f"{commit.stdout.decode().strip()}:{rel}")
        out[name] = shown.stdout if shown.returncode == 0 else None
    return commit.stdout.decode().strip(), out


def _stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "file"


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def record_gate(
    spec: ClusterSpec, gate: GateInputs, baselines: dict[str, Path]
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Validate the gate's inputs (ConfigError naming the file and key, before any run folder exists) and return
    the record for inputs/gate.json with the bytes of every file to copy (by name under inputs/)."""
    for path in (*gate.operator_values, *gate.cluster_policies):
        if not path.exists():
            raise ConfigError("file not found; check the path (relative to where gpucert runs)", path=path)
    if gate.operator_values:
        read_values(gate.operator_values)  # a file that is not the chart's values stops here, named
    for path in gate.cluster_policies:
        read_cluster_policy(path)
    files: dict[str, bytes] = {}
    inputs: list[dict[str, str]] = []
    for i, path in enumerate(gate.operator_values, 1):
        copy = f"operator/values-{i}-{_stem(path.name)}"
        files[copy] = path.read_bytes()
        inputs.append({"kind": "values", "file": copy, "name": path.name})
    for i, (path, name) in enumerate(
        zip(gate.cluster_policies, _unique([p.name for p in gate.cluster_policies]), strict=True), 1
    ):
        copy = f"operator/clusterpolicy-{i}-{_stem(path.name)}"
        files[copy] = path.read_bytes()
        inputs.append({"kind": "clusterPolicy", "file": copy, "name": name})
    record: dict[str, Any] = {
        "inputs": inputs,
        "operatorRelease": gate.operator_release,
        "baseRef": None,
        "baselines": {},
    }
    if gate.base_ref is not None:
        by_file: dict[str, list[str]] = {}
        paths: dict[str, Path] = {}
        for pool, path in baselines.items():
            by_file.setdefault(path.name, []).append(pool)
            paths[path.name] = path
        spec_dir = spec.path.parent if spec.path is not None else Path.cwd()
        commit, contents = _at_ref(spec_dir, gate.base_ref, paths)
        record["baseRef"] = {"ref": gate.base_ref, "commit": commit}
        for name, pools in by_file.items():
            content = contents[name]
            if content is not None:
                files[f"base/{name}"] = content
            record["baselines"][name] = {"pools": pools, "base": f"base/{name}" if content is not None else None}
    return record, files


def _raw(path: Path) -> dict[str, Any]:
    data, _ = load_yaml(path)
    if not isinstance(data, dict):
        raise EvidenceError("not a mapping: not a baseline", path=path)
    return data


def gate_from(folder: RunFolder, spec: ClusterSpec) -> Gate | None:
    """The gate over what the run folder recorded, or None when the gate was given nothing but the spec."""
    record = folder.read_gate()
    if record is None:
        return None
    values = [i for i in record["inputs"] if i["kind"] == "values"]
    deployments: dict[str, Deployment] = {}
    if values:
        names = [i["name"] for i in values]
        d = read_values([folder.inputs / i["file"] for i in values], name="+".join(names), shown=names)
        deployments[d.name] = d
    for i in record["inputs"]:
        if i["kind"] == "clusterPolicy":
            deployments[i["name"]] = read_cluster_policy(folder.inputs / i["file"], name=i["name"])
    reviews = {}
    ref = (record.get("baseRef") or {}).get("ref", "")
    for name, b in (record.get("baselines") or {}).items():
        current = _raw(folder.baseline_copy_for(b["pools"][0]))
        base = _raw(folder.inputs / b["base"]) if b["base"] else None
        reviews[name] = BaselineReview(name, tuple(b["pools"]), current, base, ref)
    return Gate(spec, deployments, reviews, load_tables(), release=record.get("operatorRelease"))
