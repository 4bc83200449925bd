"""The RBAC of deploy/ (rbac.yaml, and the exporter's in fleet/metrics.yaml) against the requests a run made: every
request granted, every grant of a role used."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = (ROOT / "deploy" / "rbac.yaml", ROOT / "deploy" / "fleet" / "metrics.yaml")
Request = tuple[str, str, str, str | None]  # (apiGroup, resource, verb, namespace or None for cluster scope)


def documents() -> list[dict[str, Any]]:
    return [d for path in MANIFESTS for d in _parsed(path, path.stat().st_mtime_ns)]


@functools.cache
def _parsed(path: Path, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    """A manifest's documents, parsed again only when the file changes: the fake API server answers every
    SelfSubjectAccessReview from them, and PyYAML took 24 ms to read the two (about 900 reviews in
    test_preflight.py alone, two reads each)."""
    return tuple(d for d in yaml.safe_load_all(path.read_text()) if d)


def roles_of(namespace: str, service_account: str) -> set[str]:
    """The Roles and ClusterRoles the manifests bind to the service account."""
    return {
        d["roleRef"]["name"]
        for d in documents()
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for s in d["subjects"]
        if s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == (namespace, service_account)
    }


def verb(method: str, path: str) -> Request:
    """One HTTP request as RBAC sees it."""
    route, _, query = path.partition("?")
    parts = route.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    ns = None
    if rest and rest[0] == "namespaces" and len(rest) > 2:
        ns, rest = rest[1], rest[2:]
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    v = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(method)
    if v is None:
        v = "get" if named else ("watch" if "watch=" in query else "list")
    return group, resource, v, ns


def grants(roles: set[str] | None = None) -> set[Request]:
    """What the manifest's Roles (in their namespace) and ClusterRoles (namespace None) grant."""
    out = set()
    for doc in documents():
        if doc["kind"] in ("ClusterRole", "Role") and (roles is None or doc["metadata"]["name"] in roles):
            ns = doc["metadata"].get("namespace")
            for rule in doc["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            out.add((g, r, v, ns))
    return out


# what every authenticated user may do without a grant of deploy/'s: ask what it may do (the system:basic-user
# ClusterRole of Kubernetes' bootstrap policy, plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go)
EVERYONE = {("authorization.k8s.io", "selfsubjectaccessreviews", "create", None)}


def not_granted(used: set[Request], roles: set[str] | None = None) -> set[Request]:
    """Requests no rule (of `roles`, when given) allows (a ClusterRole's rule allows its resource in every
    namespace)."""
    granted = grants(roles) | EVERYONE
    return {u for u in used if u not in granted and (*u[:3], None) not in granted}


def unused(used: set[Request], roles: set[str]) -> set[Request]:
    """Grants of `roles` that no request needed."""
    needed = used | {(*u[:3], None) for u in used}
    return grants(roles) - needed
