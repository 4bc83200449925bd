"""The JobSet and Kueue CRDs of the pinned releases (tests/fixtures/gang/, README there: source, version, digest)
and their schemas as JSON Schema, to validate what gpucert sends as a real API server validates a custom resource.

A structural schema's OpenAPI v3 subset reads as JSON Schema draft 4; the `x-kubernetes-*` extensions are left for
jsonschema to ignore (it ignores unknown keywords), CEL rules (`x-kubernetes-validations`) included. One change:
every object that declares its properties and neither preserves unknown fields nor allows more gets
`additionalProperties: false`, where the API server would prune (drop silently) an undeclared field."""

from __future__ import annotations

import functools
import gzip
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "gang"
FILES = {
    "jobsets.jobset.x-k8s.io": "jobset.x-k8s.io_jobsets.yaml.gz",
    "workloads.kueue.x-k8s.io": "kueue.x-k8s.io_workloads.yaml.gz",
    "localqueues.kueue.x-k8s.io": "kueue.x-k8s.io_localqueues.yaml",
}


@functools.cache
def crd(name: str) -> dict[str, Any]:
    """The CustomResourceDefinition `name` as its release ships it."""
    path = FIXTURES / FILES[name]
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    doc: dict[str, Any] = yaml.load(text, Loader=yaml.CSafeLoader)
    return doc


def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _validator(name: str, version: str) -> jsonschema.Draft4Validator:
    doc = crd(name)
    found = next(v for v in doc["spec"]["versions"] if v["name"] == version)
    schema = _strict(found["schema"]["openAPIV3Schema"])
    return jsonschema.Draft4Validator(schema)


def problems(obj: dict[str, Any]) -> list[str]:
    """What the CRD of `obj`'s kind refuses in it (its apiVersion names the version), one line each."""
    group, _, version = obj["apiVersion"].partition("/")
    name = next(n for n in FILES if crd(n)["spec"]["group"] == group and crd(n)["spec"]["names"]["kind"] == obj["kind"])
    errors = _validator(name, version).iter_errors(obj)
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors)


def plural_of(obj_kind: str) -> str:
    return next(crd(n)["spec"]["names"]["plural"] for n in FILES if crd(n)["spec"]["names"]["kind"] == obj_kind)
