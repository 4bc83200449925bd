"""The stack recipe a ClusterSpec declares (`stack:`): its version-pinned components, their order (`after`), where
each one's version is read, the Kubernetes and container-runtime minimums, and a pool's own pins."""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gpucert.spec.documents import Document, Key, Problem
from gpucert.spec.versions import checked_version
from gpucert.stack.components import DEFAULT_SOURCES, ComponentSource

__all__ = [
    "Component",
    "ContainerRuntime",
    "MinVersion",
    "PoolPin",
    "PoolStack",
    "StackSpec",
    "VersionSource",
    "after_problems",
]


class VersionSource(Document):
    """Where to read a component's version on a stack that is not the GPU Operator's defaults."""

    namespace: str = "gpu-operator"
    app: str | None = None
    daemon_set: str | None = Field(None, alias="daemonSet")
    container: str | None = None
    label: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> VersionSource:
        if self.label is None and (self.container is None or (self.app is None) == (self.daemon_set is None)):
            raise ValueError(
                "give either `label` (a node label holding the version), or `container` with one of "
                "`app` (pod label app=...) or `daemonSet`"
            )
        return self


class Component(Document):
    # a name is a check id's part and a label's: a control character or a bidi override would forge either
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$")]
    version: str
    after: list[str] = Field(default_factory=list)
    source: VersionSource | None = None

    _v = field_validator("version")(checked_version)


class MinVersion(Document):
    min_version: str = Field(alias="minVersion")

    _v = field_validator("min_version")(checked_version)


class ContainerRuntime(Document):
    name: Literal["containerd", "cri-o", "docker"] = "containerd"
    min_version: str = Field(alias="minVersion")

    _v = field_validator("min_version")(checked_version)


class StackSpec(Document):
    components: list[Component] = Field(default_factory=list)
    kubernetes: MinVersion | None = None
    container_runtime: ContainerRuntime | None = Field(None, alias="containerRuntime")

    @model_validator(mode="after")
    def _unique(self) -> StackSpec:
        seen: set[str] = set()
        for c in self.components:
            if c.name in seen:
                raise ValueError(f"component {c.name!r} is declared twice; declare each component once")
            seen.add(c.name)
        return self

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)

    def sources(self) -> dict[str, ComponentSource]:
        """Where each declared component's version is read: the GPU Operator's defaults or the spec's `source`."""
        out: dict[str, ComponentSource] = {}
        for c in self.components:
            if c.source is not None:
                s = c.source
                out[c.name] = ComponentSource(
                    app=s.app, container=s.container, namespace=s.namespace, daemonset=s.daemon_set, label=s.label
                )
            elif c.name in DEFAULT_SOURCES:
                out[c.name] = DEFAULT_SOURCES[c.name]
        return out


class PoolPin(Document):
    """A pool's own version of a component the cluster's stack declares (a pool on an older driver branch)."""

    name: Annotated[str, Field(min_length=1)]
    version: str

    _v = field_validator("version")(checked_version)


class PoolStack(Document):
    components: Annotated[list[PoolPin], Field(min_length=1)]


def after_problems(components: list[Component]) -> list[Problem]:
    """Every `after` of stack.components names a declared component other than itself: a misspelt name is an
    error, never dropped."""
    declared = [c.name for c in components]
    problems: list[Problem] = []
    for i, c in enumerate(components):
        for j, dep in enumerate(c.after):
            key: Key = ("stack", "components", i, "after", j)
            if dep == c.name:
                problems.append((key, f"component {c.name!r} is `after` itself; remove it from its own `after`"))
            elif dep not in declared:
                close = difflib.get_close_matches(dep, declared, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"declared components: {', '.join(declared)}"
                problems.append((key, f"`after` names {dep!r}, which the spec does not declare; {hint}"))
    return problems
