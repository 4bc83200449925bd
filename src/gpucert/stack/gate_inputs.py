"""The static gate's inputs: the GPU Operator files a change edits, and each SKU baseline as it was at the base ref
(read with git), validated before a run folder exists and copied into it (inputs/), so the gate's verdict
re-evaluates offline and is signed with what it judged. Reading them back is `gate_from`'s.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucert.errors import ConfigError, EvidenceError
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.cluster import DEFAULT_POOL, ClusterSpec
from gpucert.spec.documents import load_yaml
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


class _Checkout:
    """The git checkout the spec is in, at the commit the base ref names."""

    def __init__(self, spec_dir: Path, ref: str) -> None:
        top = _git(spec_dir, "rev-parse", "--show-toplevel")
        if top.returncode != 0:
            raise ConfigError(f"--base-ref needs a git checkout: {spec_dir} is not in one", key="--base-ref")
        self.root = Path(top.stdout.decode().strip()).resolve()
        commit = _git(self.root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if commit.returncode != 0:
            raise ConfigError(
                f"{ref!r} is not a commit of {self.root} (fetch it first, e.g. git fetch origin main, and give "
                "origin/main)",
                key="--base-ref",
            )
        self.ref, self.commit = ref, commit.stdout.decode().strip()
        self._shown: dict[str, bytes | None] = {}

    def rel(self, path: Path, what: str) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            raise ConfigError(f"the {what} {path} is outside the checkout {self.root}", key="--base-ref") from None

    def show(self, rel: str) -> bytes | None:
        """The file's content at the base commit (None: not in that commit), read from git once."""
        if rel not in self._shown:
            shown = _git(self.root, "show", f"{self.commit}:{rel}")
            self._shown[rel] = shown.stdout if shown.returncode == 0 else None
        return self._shown[rel]

    def document(self, rel: str) -> Any:
        """A YAML file at the base commit, read as strictly as gpucert reads its own (None: not there)."""
        content = self.show(rel)
        if content is None:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / Path(rel).name
            copy.write_bytes(content)
            try:
                data, _ = load_yaml(copy)
            except ConfigError as exc:
                raise ConfigError(
                    f"{rel} at {self.ref} cannot be read ({exc}); the gate needs it to find what each baseline was",
                    key="--base-ref",
                ) from None
        return data


def _predecessors(checkout: _Checkout, spec: ClusterSpec, baselines: dict[str, Path]) -> dict[str, str | None]:
    """Where each pool's baseline was at the base ref: the same file, else the baseline the spec named for that
    pool there, else one of the spec's baselines there of the same SKU (a renamed or moved file is still compared
    with what it replaces); None for a baseline with no predecessor."""
    then: dict[str, str] = {}  # pool -> the baseline path the spec at the base ref named
    if spec.path is not None:
        spec_rel = checkout.rel(spec.path, "spec")
        doc = checkout.document(spec_rel)
        here = posixpath.dirname(spec_rel)
        if isinstance(doc, dict):
            pools = doc.get("pools")
            certify = doc.get("certify")
            named = (
                [(p.get("name"), p.get("baseline")) for p in pools if isinstance(p, dict)]
                if isinstance(pools, list)
                else [(DEFAULT_POOL, certify.get("baseline") if isinstance(certify, dict) else None)]
            )
            for pool, rel in named:
                if isinstance(pool, str) and isinstance(rel, str):
                    then[pool] = posixpath.normpath(posixpath.join(here, rel))
    sku_then: dict[str, str] = {}
    for rel in then.values():
        doc = checkout.document(rel) if not rel.startswith("..") else None
        if isinstance(doc, dict) and isinstance(doc.get("sku"), str):
            sku_then.setdefault(doc["sku"], rel)
    out: dict[str, str | None] = {}
    for pool, path in baselines.items():
        rel = checkout.rel(path, "baseline")
        if checkout.show(rel) is not None:
            out[pool] = rel
            continue
        before = then.get(pool)
        if before is not None and not before.startswith("..") and checkout.show(before) is not None:
            out[pool] = before
            continue
        current = _raw(path) if path.is_file() else {}
        out[pool] = sku_then.get(str(current.get("sku")))
    return out


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
        _record_base(spec, gate.base_ref, baselines, record, files)
    return record, files


def _record_base(
    spec: ClusterSpec, base_ref: str, baselines: dict[str, Path], record: dict[str, Any], files: dict[str, bytes]
) -> None:
    """Each baseline as it was at `base_ref` (the predecessor the review compares with), copied under base/."""
    spec_dir = spec.path.parent if spec.path is not None else Path.cwd()
    checkout = _Checkout(spec_dir, base_ref)
    before = _predecessors(checkout, spec, baselines)
    record["baseRef"] = {"ref": base_ref, "commit": checkout.commit}
    by_path: dict[Path, list[str]] = {}
    for pool, path in baselines.items():
        by_path.setdefault(path.resolve(), []).append(pool)
    names = _unique([p.name for p in by_path])  # two folders' baselines of one name stay apart
    for name, (_path, pools) in zip(names, by_path.items(), strict=True):
        rel = before[pools[0]]
        content = checkout.show(rel) if rel is not None else None
        copy = f"base/{_stem(name)}"
        if content is not None:
            files[copy] = content
        record["baselines"][name] = {
            "pools": pools,
            "base": copy if content is not None else None,
            "baseFile": rel if content is not None else None,
        }


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
