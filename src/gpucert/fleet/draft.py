"""`gpucert init`: a spec drafted from what a cluster runs, every value with a comment saying where it came from.

Pools from the GFD labels (one per `nvidia.com/gpu.product`, split by `nvidia.com/gpu.count` where one product
comes in several sizes), node and GPU counts as labelled, the component versions from the GPU Operator's pod
images (the driver from its node label when it runs on the host), their bring-up order as the pods came up, the
oldest kubelet and container runtime, and the committed baseline of each product (a TODO where there is none). It
never writes a pin it did not observe: what cannot be observed (the CUDA the workloads use, the probe image) is a
commented TODO. Pure: it reads a StackObservation (what `gpucert configure` reads too) and the baselines folder.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpucert.errors import GpucertError
from gpucert.spec.baseline import GpuBaseline, load_baseline
from gpucert.spec.cluster import API_VERSION, BASELINE_TODO, Probe, StragglerSpec
from gpucert.spec.versions import VersionError, normalize, parse_version
from gpucert.stack.components import DEFAULT_SOURCES, OPERATOR_DEPENDENCIES
from gpucert.stack.observe import NodeStack, StackObservation

__all__ = ["Draft", "draft_spec", "known_baselines"]

PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
CUDA_LABEL = "nvidia.com/cuda.runtime-version.full"
SHOWN_NODES = 4


_PLAIN = re.compile(r"^[A-Za-z][A-Za-z0-9._/-]*$")
_SPECIAL = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def _q(value: object) -> str:
    """A YAML flow value: names plain, anything YAML could read as another type (`12.8`, `true`) double-quoted."""
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value.lower() not in _SPECIAL:
        return value
    return json.dumps(value)


def _flow(mapping: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{k}: {_flow(v) if isinstance(v, Mapping) else _q(v)}" for k, v in mapping.items()) + "}"


def _names(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= SHOWN_NODES else f"{', '.join(nodes[:2])} ... {nodes[-1]}"


def _slug(product: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", product.lower().removeprefix("nvidia-")).strip("-")
    return s[:55].strip("-") or "gpus"


def known_baselines(folder: Path) -> dict[str, Path]:
    """The committed SKU baselines of `folder` by the GPU product they are for (the first file of a product)."""
    out: dict[str, Path] = {}
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            b: GpuBaseline = load_baseline(path)
        except GpucertError:
            continue  # a file that is not a valid baseline is no candidate
        out.setdefault(b.product, path)
    return out


@dataclass
class _Pool:
    name: str
    product: str
    gpus: int
    selector: dict[str, str]
    nodes: list[str] = field(default_factory=list)


@dataclass
class Draft:
    """The drafted spec as YAML text, and what the user must still do before it can be used."""

    text: str
    todos: list[str]


def _pools(nodes: Mapping[str, NodeStack]) -> tuple[list[_Pool], list[str]]:
    """One pool per GPU product, split by GPU count where a product comes in several; and the nodes with no
    product label (in no pool)."""
    by_product: dict[str, dict[int, list[str]]] = {}
    stray = []
    for name, ns in nodes.items():
        product = ns.labels.get(PRODUCT)
        try:
            count = int(ns.labels.get(COUNT, ""))
        except ValueError:
            count = ns.allocatable_gpus
        if not product or count < 1:
            stray.append(name)
            continue
        by_product.setdefault(product, {}).setdefault(count, []).append(name)
    pools = []
    for product, sizes in by_product.items():
        for count, members in sorted(sizes.items(), reverse=True):
            split = len(sizes) > 1
            pools.append(
                _Pool(
                    name=f"{_slug(product)}-{count}gpu" if split else _slug(product),
                    product=product,
                    gpus=count,
                    selector={PRODUCT: product, **({COUNT: str(count)} if split else {})},
                    nodes=members,
                )
            )
    return pools, stray


@dataclass
class _Seen:
    """One component as seen on one node: its version (None: no version in the image tag), and where from."""

    version: str | None
    where: str
    label: bool = False


def _seen(ns: NodeStack) -> dict[str, _Seen]:
    out = {c: _Seen(o.version, o.image) for c, o in ns.components.items() if c in DEFAULT_SOURCES}
    if "driver" not in out and DRIVER_LABEL in ns.labels:  # a driver installed on the host: GFD's label says it
        out["driver"] = _Seen(ns.labels[DRIVER_LABEL], f"label {DRIVER_LABEL}", label=True)
    return out


def _majority(values: Iterable[str]) -> tuple[str, int] | None:
    counts = Counter(values)
    return counts.most_common(1)[0] if counts else None


@dataclass
class _Pin:
    component: str
    version: str
    comment: str
    label: bool = False
    after: list[str] = field(default_factory=list)


def _pins(
    pools: list[_Pool], nodes: Mapping[str, NodeStack], todos: list[str]
) -> tuple[list[_Pin], dict[str, list[_Pin]], list[str]]:
    """The cluster's pins (the most common version over the pooled nodes), each pool's own where its nodes run
    another, and comments on what was seen but not pinned."""
    seen = {n: _seen(nodes[n]) for p in pools for n in p.nodes}
    placed = [n for p in pools for n in p.nodes]
    notes: list[str] = []
    cluster: list[_Pin] = []
    own: dict[str, list[_Pin]] = {p.name: [] for p in pools}
    for comp in [*DEFAULT_SOURCES]:
        on = [n for n in placed if comp in seen[n]]
        if not on:
            continue
        tagged = {n: v for n in on if (v := seen[n][comp].version)}
        untagged = [n for n in on if not seen[n][comp].version]
        if untagged:
            notes.append(
                f"{comp} on {_names(untagged)} runs {seen[untagged[0]][comp].where}: no version in its tag, so no pin"
            )
        top = _majority(tagged.values())
        if top is None:
            continue
        version, count = top
        label = any(seen[n][comp].label for n in on)
        where = seen[next(n for n in on if tagged.get(n) == version)][comp].where
        missing = [n for n in placed if comp not in seen[n]]
        comment = f"{comp}: {count} of {len(placed)} nodes, {where}"
        if missing:
            comment += f"; no {comp} on {_names(missing)}"
            todos.append(f"{comp} does not run on {_names(missing)}: `gpucert configure` will fail there")
        cluster.append(_Pin(comp, version, comment, label))
        for p in pools:
            mine = [tagged[n] for n in p.nodes if n in tagged]
            top_p = _majority(mine)
            if top_p is not None and top_p[0] != version:
                there = seen[next(n for n in p.nodes if tagged.get(n) == top_p[0])][comp].where
                own[p.name].append(_Pin(comp, top_p[0], f"{comp}: {top_p[1]} of {len(p.nodes)} nodes here, {there}"))
            odd = sorted(n for n in p.nodes if n in tagged and tagged[n] != (top_p[0] if top_p else version))
            if odd:
                todos.append(
                    f"{comp}: {_names(odd)} of pool {p.name} run {', '.join(sorted({tagged[n] for n in odd}))}, "
                    "not the pool's pin: `gpucert configure` will fail there until they are upgraded"
                )
    return cluster, own, notes


def _order(pins: list[_Pin], placed: list[str], nodes: Mapping[str, NodeStack], notes: list[str]) -> None:
    """`after` edges of the GPU Operator's dependencies that held on every node where both ran: the component
    started after the one it waits for was Ready."""
    names = {p.component for p in pins}
    for pin in pins:
        for dep in OPERATOR_DEPENDENCIES.get(pin.component, ()):
            if dep not in names:
                continue
            pairs = [
                (nodes[n].components[pin.component], nodes[n].components[dep])
                for n in placed
                if pin.component in nodes[n].components and dep in nodes[n].components
            ]
            timed = [(a.started_at, b.ready_at) for a, b in pairs if a.started_at and b.ready_at]
            if not timed:
                notes.append(f"{pin.component} after {dep}: no start and Ready times to observe the order by")
                continue
            early = [a < b for a, b in timed]
            if any(early):
                notes.append(
                    f"{pin.component} came up before {dep} was Ready on {sum(early)} of {len(timed)} nodes: not "
                    "declared `after`; find out why"
                )
                continue
            pin.after.append(dep)


def _oldest(values: Iterable[str | None]) -> str | None:
    parsed = []
    for v in values:
        if not v:
            continue
        try:
            parsed.append((parse_version(v), normalize(v)))
        except VersionError:
            continue
    return min(parsed)[1] if parsed else None


def draft_spec(
    stack: StackObservation,
    *,
    name: str,
    target: Mapping[str, Any],
    made_by: str,
    baselines: Mapping[str, Path],
    spec_dir: Path,
    when: datetime,
) -> Draft:
    """The spec for the cluster `stack` describes. `target` is the spec's target (written as given), `made_by`
    the command that read the cluster, `baselines` the committed baselines by product, `spec_dir` the folder the
    spec will be written to (paths in it are relative to it)."""
    todos: list[str] = []
    nodes = stack.nodes
    pools, stray = _pools(nodes)
    if not pools:
        raise GpucertError(
            f"{made_by} lists no GPU node with GFD labels (nvidia.com/gpu.product, nvidia.com/gpu.count): is the GPU "
            "Operator (or GPU feature discovery) installed, and does the selector match the GPU nodes?"
        )
    placed = [n for p in pools for n in p.nodes]
    cluster, own, notes = _pins(pools, nodes, todos)
    _order(cluster, placed, nodes, notes)
    out = [
        f"# Drafted by `{made_by}` at {when.strftime('%Y-%m-%dT%H:%M:%SZ')} from what the cluster runs, read only",
        "# (the requests `gpucert configure` makes). Each value says where it came from; review every TODO, then",
        "# `gpucert configure` checks the cluster against this spec.",
        f"apiVersion: {API_VERSION}",
        "kind: ClusterSpec",
        f"metadata: {{name: {name}}}",
        "target:",
        *(f"  {k}: {_flow(v) if isinstance(v, Mapping) else _q(v)}" for k, v in target.items()),
    ]
    if target.get("kind") == "kubernetes":
        out.append("  # image: REGISTRY/gpucert-probe@sha256:...  # TODO before `gpucert certify`: the probe image")
        todos.append("target.image: build the probe image (deploy/Dockerfile) and pin it by digest before certify")
    out += ["pools:", f"  # {len(placed)} GPU nodes by their GFD label {PRODUCT} (and {COUNT} where needed)"]
    for node in stray:
        out.append(f"  # TODO: {node} has no {PRODUCT} label (GPU feature discovery has not labelled it): in no pool")
        todos.append(f"{node} is in no pool (no {PRODUCT} label): `gpucert configure` will say so (pool.membership)")
    for p in pools:
        out += _pool_lines(p, baselines.get(p.product), own[p.name], spec_dir, todos)
    out += _stack_lines(cluster, notes, nodes, placed)
    if stack.cluster_policy:
        policy = stack.cluster_policy
        out.append(f"# the GPU Operator's ClusterPolicy {policy.get('name')}: state {policy.get('state')}")
    out += [
        "certify:  # gpucert's defaults, not observed: choose what to measure",
        "  dcgm: {level: 2}",
        f"  probes: [{', '.join(p.value for p in Probe)}]",
        f"  stragglers: {_flow({'maxDeviation': StragglerSpec().max_deviation})}",
    ]
    return Draft("\n".join(out) + "\n", todos)


def _pool_lines(p: _Pool, baseline: Path | None, own: list[_Pin], spec_dir: Path, todos: list[str]) -> list[str]:
    """One pool: its selector, what its nodes are, its baseline (a TODO where none is committed), its own pins."""
    out = [
        f"  - name: {p.name}",
        f"    nodeSelector: {_flow(p.selector)}",
        f"    # {len(p.nodes)} nodes ({_names(p.nodes)}), {COUNT}={p.gpus} on each",
        f"    expect: {_flow({'nodes': len(p.nodes), 'gpusPerNode': p.gpus, 'gpuProduct': p.product})}",
    ]
    if baseline is not None:
        rel = os.path.relpath(baseline, spec_dir)
        out += [f"    # the committed baseline for {p.product}", f"    baseline: {_q(rel)}"]
    else:
        out.append(f"    baseline: {_q(f'{BASELINE_TODO}: no committed baseline for {p.product}')}")
        out.append("    # TODO: write baselines/gpus/<SKU>.yaml (each figure with its source) and name it here")
        todos.append(f"pool {p.name}: no committed baseline for {p.product}; write one and name it")
    if own:
        out += ["    stack:", "      components:  # this pool's nodes run other versions than the cluster's"]
        for x in own:
            out += [f"        # {x.comment}", f"        - {_flow({'name': x.component, 'version': x.version})}"]
    return out


def _stack_lines(cluster: list[_Pin], notes: list[str], nodes: Mapping[str, NodeStack], placed: list[str]) -> list[str]:
    """The cluster's stack: each component's version and order, the CUDA to declare, the oldest kubelet and
    container runtime of the GPU nodes."""
    out = ["stack:", "  components:"]
    out.append(
        "    # versions from the image tags of the GPU Operator's pods; `after`: each started after the other was"
    )
    out.append("    # Ready, on every node where both run")
    for pin in cluster:
        item: dict[str, Any] = {"name": pin.component, "version": pin.version}
        if pin.label:
            item["source"] = {"label": DRIVER_LABEL}
        line = _flow(item)
        if pin.after:
            line = line[:-1] + f", after: [{', '.join(pin.after)}]}}"
        out += [f"    # {pin.comment}", f"    - {line}"]
    supported = _majority(nodes[n].labels[CUDA_LABEL] for n in placed if nodes[n].labels.get(CUDA_LABEL))
    hint = f"; the driver supports up to {supported[0]}" if supported else ""
    out.append(f"    # TODO: declare the CUDA your workloads use (not observable{hint}),")
    out.append("    # and stack.compat checks the driver against it:")
    out.append('    # - {name: cuda, version: "12.8"}')
    out += [f"    # {note}" for note in notes]
    kubelet = _oldest(nodes[n].kubelet_version for n in placed)
    if kubelet:
        out.append(f"  kubernetes: {_flow({'minVersion': kubelet})}  # the oldest kubelet of the GPU nodes")
    runtimes = [nodes[n].container_runtime or "" for n in placed]
    top = _majority(r.split("://", 1)[0] for r in runtimes if "://" in r)
    if top is not None and top[0] in ("containerd", "cri-o", "docker"):
        oldest = _oldest(r for r in runtimes if r.startswith(f"{top[0]}://"))
        if oldest:
            out.append(
                f"  containerRuntime: {_flow({'name': top[0], 'minVersion': oldest})}  # the oldest {top[0]} of "
                f"{top[1]} of {len(placed)} nodes"
            )
    return out
