"""What a GPU Operator configuration would deploy: Helm values files of the `gpu-operator` chart (v24/v25 keys:
`driver`, `toolkit`, `devicePlugin`, `gfd`, `dcgmExporter`, `dcgm`, `migManager`, each with `enabled`,
`repository`, `image`, `version`; `operator.version`, else `validator.version`, names the release: the chart's own
values.yaml sets neither, its templates fall back to the chart's version) or a `ClusterPolicy` manifest (the same
keys under `spec`).

Several values files are merged in order, later keys winning (as `helm -f a.yaml -f b.yaml` does); each
ClusterPolicy stands alone. A version is read from `version` (`v1.17.8-ubuntu20.04` is 1.17.8), or from a tag in
`image`; a digest, a precompiled driver (a branch, not a version) or NVIDIADriver objects leave it unknown, and
say why. Reads the files and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucert.errors import ConfigError
from gpucert.spec.documents import load_yaml
from gpucert.spec.versions import normalize
from gpucert.stack.components import version_from_image

__all__ = ["DEFAULT_ENABLED", "OPERATOR_KEYS", "Deployed", "Deployment", "read_cluster_policy", "read_values"]

# the chart's (and ClusterPolicy's) key of each component gpucert pins
OPERATOR_KEYS = {
    "driver": "driver",
    "toolkit": "container-toolkit",
    "devicePlugin": "device-plugin",
    "gfd": "gpu-feature-discovery",
    "dcgmExporter": "dcgm-exporter",
    "dcgm": "dcgm",
    "migManager": "mig-manager",
}
# the chart's defaults for `enabled` (v24/v25): the standalone DCGM host engine is off, the exporter embeds one
DEFAULT_ENABLED = {c: c != "dcgm" for c in OPERATOR_KEYS.values()}


@dataclass(frozen=True, slots=True)
class Deployed:
    """One component as the files configure it."""

    component: str
    enabled: bool
    version: str | None = None  # None: the files set none (the release's default applies), or see `problem`
    where: str = ""  # the file and key the version came from
    problem: str | None = None  # why the version the files set cannot be known


@dataclass(frozen=True)
class Deployment:
    """One configuration: merged values files, or one ClusterPolicy."""

    name: str
    files: tuple[str, ...]
    components: dict[str, Deployed]
    release: str | None = None  # the operator release the files name (operator.version), normalised
    release_where: str = ""
    notes: list[str] = field(default_factory=list)


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _mapping(data: Any, path: Path, key: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping, got {type(data).__name__}", path=path, key=key or None)
    return data


def _string(value: Any, path: Path, key: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"expected a version string, got {type(value).__name__}", path=path, key=key)
    if isinstance(value, float):  # 1.10 reads as 1.1: the version meant cannot be known
        raise ConfigError(
            f'{value!r} is read as a number, not the version written (1.10 would be 1.1); quote it: "{value}"',
            path=path,
            key=key,
        )
    return str(value)


def _component(chart_key: str, section: dict[str, Any], path: Path, origin: dict[str, str]) -> Deployed:
    component = OPERATOR_KEYS[chart_key]
    enabled = section.get("enabled", DEFAULT_ENABLED[component])
    if not isinstance(enabled, bool):
        raise ConfigError(f"expected true or false, got {enabled!r}", path=path, key=f"{chart_key}.enabled")
    version = _string(section.get("version"), path, f"{chart_key}.version")
    image = _string(section.get("image"), path, f"{chart_key}.image")
    where_v = f"{origin.get(f'{chart_key}.version', path.name)}: {chart_key}.version {version}"
    if component == "driver" and section.get("usePrecompiled") is True:
        return Deployed(component, enabled, None, where_v, "precompiled driver: `version` is a branch, not a version")
    crd = section.get("nvidiaDriverCRD")
    if component == "driver" and isinstance(crd, dict) and crd.get("enabled") is True:
        return Deployed(component, enabled, None, where_v, "driver.nvidiaDriverCRD: NVIDIADriver objects set versions")
    if image is not None and ("@" in image or image.rfind(":") > image.rfind("/")):
        where = f"{origin.get(f'{chart_key}.image', path.name)}: {chart_key}.image {image}"
        if "@" in image:  # what is pulled is the digest, whatever tag stands beside it
            return Deployed(component, enabled, None, where, "the image is pinned by digest, not a version")
        found, why = _release(image)
        return Deployed(component, enabled, found, where, why)
    if version is None:
        return Deployed(component, enabled)
    if version.startswith("sha256:") or "@" in version:
        return Deployed(component, enabled, None, where_v, "the version is pinned by digest, not a version")
    found, why = _release(f"image:{version}")
    return Deployed(component, enabled, found, where_v, why)


_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # the OCI distribution spec's tag grammar
_PRE_RELEASE = re.compile(r"(?i)(?:^|[-.~+_])(rc|alpha|beta|pre|dev|snapshot|nightly)")


def _release(image: str) -> tuple[str | None, str | None]:
    """The release an image tag names, or None and why not: no version in it, or a pre-release (`v1.17.8-rc.1`
    is not 1.17.8, and no operator release ships it)."""
    tag = image[image.rfind(":") + 1 :]
    found = version_from_image(image)
    if found is None:
        return None, f"{tag!r} is not a version"
    if _PRE_RELEASE.search(tag.removeprefix("v")[len(found) :]):
        return None, f"{tag!r} is a pre-release, not a release the GPU Operator ships; pin a release"
    if not _TAG.fullmatch(tag):  # the numeric prefix alone would read "570.148.08\u202e" as 570.148.08
        return None, f"{tag!r} is not an image tag (OCI: [A-Za-z0-9_.-])"
    return found, None


def _origins(docs: list[tuple[Path, dict[str, Any]]]) -> dict[str, str]:
    """Which file set each component's `version` and `image` last (for the messages)."""
    out: dict[str, str] = {}
    for path, doc in docs:
        for key in OPERATOR_KEYS:
            section = doc.get(key)
            if isinstance(section, dict):
                for field_ in ("version", "image"):
                    if field_ in section:
                        out[f"{key}.{field_}"] = path.name
    return out


def _deployment(name: str, docs: list[tuple[Path, dict[str, Any]]], merged: dict[str, Any]) -> Deployment:
    last = docs[-1][0]
    origin = _origins(docs)
    components = {
        OPERATOR_KEYS[k]: _component(k, _mapping(merged.get(k), last, k), last, origin) for k in OPERATOR_KEYS
    }
    # the release: the operator's image version, else the validator's (it is the operator's release too)
    release, where = None, ""
    for key in ("operator", "validator"):
        found = _string(_mapping(merged.get(key), last, key).get("version"), last, f"{key}.version")
        if found:
            release, where = found, f"{key}.version"
            break
    return Deployment(
        name=name,
        files=tuple(str(p) for p, _ in docs),
        components=components,
        release=normalize(release) if release else None,
        release_where=where,
    )


def read_values(paths: list[Path], name: str | None = None, shown: list[str] | None = None) -> Deployment:
    """The gpu-operator chart's values files, merged in order (later wins). `shown` are the names the messages
    give the files (their names as the user gave them, where `paths` are copies)."""
    docs = []
    for path, label in zip(paths, shown or [p.name for p in paths], strict=True):
        data, _ = load_yaml(path)
        docs.append((path.with_name(label) if label != path.name else path, _mapping(data, path, "")))
    merged: dict[str, Any] = {}
    for _, doc in docs:
        merged = _merge(merged, doc)
    return _deployment(name or "+".join(p.name for p in paths), docs, merged)


def read_cluster_policy(path: Path, name: str | None = None) -> Deployment:
    """A ClusterPolicy manifest (nvidia.com/v1): the same component keys under `spec`."""
    data, _ = load_yaml(path)
    doc = _mapping(data, path, "")
    if doc.get("kind") != "ClusterPolicy":
        raise ConfigError(
            f"kind is {doc.get('kind')!r}, expected ClusterPolicy (nvidia.com/v1); pass Helm values with "
            "--operator-values",
            path=path,
            key="kind",
        )
    if doc.get("apiVersion") != "nvidia.com/v1":
        raise ConfigError(
            f"apiVersion is {doc.get('apiVersion')!r}: the GPU Operator's ClusterPolicy is nvidia.com/v1",
            path=path,
            key="apiVersion",
        )
    spec = _mapping(doc.get("spec"), path, "spec")
    return _deployment(name or path.name, [(path, spec)], spec)
