"""Configure-phase rules: each takes the observed stack (and the spec) and returns one Finding. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime

from gpucert.measure.evidence import GpuEvidence
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.cluster import ClusterSpec, Expect, StackSpec
from gpucert.spec.versions import VersionError, at_least, normalize
from gpucert.stack.compat import COMPAT_SOURCE, min_driver_for_cuda
from gpucert.stack.observe import NodeStack

__all__ = [
    "SKEW_FIELDS",
    "compat",
    "duplicate_gpus",
    "gpu_count",
    "gpu_product",
    "kubernetes_version",
    "nameless_gpus",
    "node_count",
    "ordering",
    "pinned_components",
    "probe_products",
    "reachable",
    "runtime",
    "skew",
    "version",
]

OK, FAIL, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.SKIP
# node facts that carry no pin in the spec but must agree across the fleet
SKEW_FIELDS = {
    "kubelet": "kubelet_version",
    "container runtime": "container_runtime",
    "kernel": "kernel",
    "OS image": "os_image",
}
DRIVER_VERSION_LABEL = "nvidia.com/cuda.driver-version.full"
CUDA_VERSION_LABEL = "nvidia.com/cuda.runtime-version.full"


def pinned_components(spec: ClusterSpec, observable: set[str]) -> list[str]:
    """The spec's components whose version can be read on a node (`cuda` is the workloads' runtime: compat)."""
    return [c.name for c in spec.stack.components if c.name in observable]


def version(ns: NodeStack, stack: StackSpec, component: str) -> Finding:
    """The component runs on the node, Ready, at the version the node's pool pins (`stack` is the pool's)."""
    pin = stack.component(component)
    assert pin is not None
    obs = ns.components.get(component)
    if obs is None:
        return Finding(
            "stack.version",
            FAIL,
            ns.node,
            None,
            f"{ns.node}: no {component} pod runs on this node (expected {component} {pin.version})",
            observed=None,
            expected=pin.version,
        )
    have = normalize(obs.version or "")
    ok = have == normalize(pin.version)
    msg = (
        f"{ns.node}: {component} {have or '(no version in image tag)'} from {obs.image} "
        f"{'matches' if ok else 'does not match'} the pin {pin.version}"
    )
    if ok and not obs.ready:
        ok, msg = False, f"{ns.node}: {component} {have} is not Ready (pod {obs.pod}, phase {obs.phase})"
    return Finding("stack.version", OK if ok else FAIL, ns.node, None, msg, observed=have or None, expected=pin.version)


def skew_counts(fleet: Mapping[str, NodeStack]) -> dict[str, Counter[object]]:
    """Per fact without a pin, how many of the fleet's ready nodes run each value: counted once for the fleet (each
    node counting the whole fleet again grew with the square of the nodes)."""
    return {label: Counter(getattr(n, attr) for n in fleet.values() if n.ready) for label, attr in SKEW_FIELDS.items()}


def skew(
    ns: NodeStack, fleet: Mapping[str, NodeStack], counted: Mapping[str, Counter[object]] | None = None
) -> Finding:
    """Facts without a pin (kubelet, runtime, kernel, OS) must be the same on every node: minority values fail.
    `counted`: the fleet's `skew_counts`, when the caller judges every node of the same fleet."""
    odd = []
    counted = counted if counted is not None else skew_counts(fleet)
    for label, attr in SKEW_FIELDS.items():
        counts = counted[label]
        if len(counts) < 2:
            continue
        majority, _ = counts.most_common(1)[0]
        mine = getattr(ns, attr)
        if mine != majority:
            odd.append(f"{label} {mine} where {counts[majority]} of {sum(counts.values())} nodes run {majority}")
    if odd:
        return Finding("stack.skew", FAIL, ns.node, None, f"{ns.node}: " + "; ".join(odd))
    return Finding("stack.skew", OK, ns.node, None, f"{ns.node}: kubelet, runtime, kernel and OS agree with the fleet")


def compat(ns: NodeStack, stack: StackSpec) -> Finding:
    cuda = stack.component("cuda")
    if cuda is None:
        return Finding("stack.compat", SKIP, ns.node, None, "the spec declares no `cuda` component to check against")
    driver_pin = stack.component("driver")
    obs = ns.components.get("driver")
    driver = normalize(obs.version) if obs and obs.version else ns.labels.get(DRIVER_VERSION_LABEL)
    if driver is None:
        return Finding(
            "stack.compat", SKIP, ns.node, None, f"{ns.node}: driver version not observed (see stack.version)"
        )
    if driver_pin is not None and driver != normalize(driver_pin.version):
        return Finding(
            "stack.compat",
            SKIP,
            ns.node,
            None,
            f"{ns.node}: driver {driver} is not the pinned {driver_pin.version}; see stack.version",
        )
    minimum = min_driver_for_cuda(cuda.version)
    if minimum is None:
        return Finding(
            "stack.compat",
            FAIL,
            ns.node,
            None,
            f"CUDA {cuda.version} is not in the compatibility table ({COMPAT_SOURCE}); "
            "declare a CUDA release the table knows",
        )
    problems = []
    if not at_least(driver, minimum):
        problems.append(f"driver {driver} is older than {minimum}, the minimum for CUDA {cuda.version}")
    supported = ns.labels.get(CUDA_VERSION_LABEL)
    try:
        if supported is not None and not at_least(supported, cuda.version):
            problems.append(f"the driver reports CUDA {supported}, older than the declared CUDA {cuda.version}")
    except VersionError:
        problems.append(f"label {CUDA_VERSION_LABEL}={supported!r} is not a version")
    msg = f"{ns.node}: " + (
        "; ".join(problems)
        if problems
        else f"driver {driver} supports CUDA {cuda.version} (minimum {minimum}; {COMPAT_SOURCE})"
    )
    return Finding("stack.compat", FAIL if problems else OK, ns.node, None, msg, observed=driver, expected=minimum)


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def ordering(ns: NodeStack, stack: StackSpec) -> Finding:
    """Each component must have started after every component it is declared `after` was Ready on this node."""
    violations, checked = [], 0
    for comp in stack.components:
        mine = ns.components.get(comp.name)
        started = _time(mine.started_at) if mine else None
        for dep in comp.after:
            theirs = ns.components.get(dep)
            ready = _time(theirs.ready_at) if theirs else None
            if started is None or ready is None:
                continue  # a missing or unready component is stack.version's finding
            checked += 1
            if started < ready:
                violations.append(
                    f"{comp.name} started at {mine.started_at if mine else '?'}, before {dep} "
                    f"was Ready at {theirs.ready_at if theirs else '?'} "
                    f"({(ready - started).total_seconds():.0f} s early)"
                )
    if violations:
        return Finding("stack.ordering", FAIL, ns.node, None, f"{ns.node}: " + "; ".join(violations))
    return Finding("stack.ordering", OK, ns.node, None, f"{ns.node}: {checked} declared `after` edges respected")


def kubernetes_version(ns: NodeStack, stack: StackSpec) -> Finding:
    want = stack.kubernetes
    if want is None:
        return Finding("stack.kubernetes", SKIP, ns.node, None, "the spec sets no stack.kubernetes.minVersion")
    have = ns.kubelet_version
    ok = have is not None and at_least(have, want.min_version)
    return Finding(
        "stack.kubernetes",
        OK if ok else FAIL,
        ns.node,
        None,
        f"{ns.node}: kubelet {have}, minimum {want.min_version}",
        observed=have,
        expected=want.min_version,
    )


def runtime(ns: NodeStack, stack: StackSpec) -> Finding:
    want = stack.container_runtime
    if want is None:
        return Finding("stack.runtime", SKIP, ns.node, None, "the spec sets no stack.containerRuntime")
    have = ns.container_runtime or ""
    name = have.split("://", 1)[0] if "://" in have else ""
    ok = name == want.name and at_least(have, want.min_version)
    return Finding(
        "stack.runtime",
        OK if ok else FAIL,
        ns.node,
        None,
        f"{ns.node}: container runtime {have or 'unknown'}, expected {want.name} >= {want.min_version}",
        observed=have or None,
        expected=f"{want.name}://{want.min_version}",
    )


def reachable(ns: NodeStack | None, node: str, evidence_error: str | None) -> Finding:
    if ns is None:
        return Finding("node.reachable", FAIL, node, None, f"{node}: the cluster no longer lists this node")
    if not ns.ready:
        return Finding("node.reachable", FAIL, node, None, f"{node}: node is not Ready ({ns.ready_reason})")
    if evidence_error:
        return Finding("node.reachable", FAIL, node, None, f"{node}: no probe ran: {evidence_error}")
    return Finding(
        "node.reachable", OK, node, None, f"{node}: Ready" + (" and measured" if evidence_error == "" else "")
    )


def node_count(found: Mapping[str, list[str]], spec: ClusterSpec, stray: Sequence[str] = ()) -> Finding:
    """Each pool has the nodes it expects (`found`: the nodes in each pool and no other). One pool: the counts;
    several: a line per pool that is off, the counts as `pool=n` text."""
    counts = {p.name: (len(found.get(p.name, [])), p.expect.nodes) for p in spec.pools}
    off = {name: c for name, c in counts.items() if c[0] != c[1]}
    outside = f"; {len(stray)} GPU nodes are in no pool or in several (see pool.membership)" if stray else ""
    if len(spec.pools) == 1:
        ((have, want),) = counts.values()
        return Finding(
            "inventory.nodes",
            FAIL if off else OK,
            None,
            None,
            f"{have} GPU nodes found, {want} expected{outside}",
            observed=have,
            expected=want,
        )
    said = "; ".join(f"pool {n}: {h} nodes found, {w} expected" for n, (h, w) in (off or counts).items())
    return Finding(
        "inventory.nodes",
        FAIL if off else OK,
        None,
        None,
        said + outside,
        observed=", ".join(f"{n}={h}" for n, (h, _) in counts.items()),
        expected=", ".join(f"{n}={w}" for n, (_, w) in counts.items()),
    )


def gpu_count(ns: NodeStack, expect: Expect, measured: int | None) -> Finding:
    want = expect.gpus_per_node
    label = ns.labels.get("nvidia.com/gpu.count")
    if label is None:
        return Finding(
            "inventory.gpus",
            FAIL,
            ns.node,
            None,
            f"{ns.node}: no nvidia.com/gpu.count label: GPU feature discovery has not labelled this node",
            expected=want,
        )
    counts = {"labelled": int(label), "allocatable": ns.allocatable_gpus}
    if measured is not None:
        counts["seen by the probe"] = measured
    short = {k: v for k, v in counts.items() if v != want}
    detail = ", ".join(f"{v} {k}" for k, v in counts.items())
    return Finding(
        "inventory.gpus",
        FAIL if short else OK,
        ns.node,
        None,
        f"{ns.node}: {detail}; {want} expected",
        observed=min(counts.values()),
        expected=want,
    )


def gpu_product(ns: NodeStack, expect: Expect) -> Finding:
    want = expect.gpu_product
    have = ns.labels.get("nvidia.com/gpu.product")
    return Finding(
        "inventory.product",
        OK if have == want else FAIL,
        ns.node,
        None,
        f"{ns.node}: nvidia.com/gpu.product={have}, expected {want}",
        observed=have,
        expected=want,
    )


def duplicate_gpus(gpus_by_node: Mapping[str, Sequence[GpuEvidence]]) -> dict[str, list[str]]:
    """Per node, each GPU identity (UUID or serial) reported more than once in the fleet, with where."""
    seen: dict[tuple[str, str], list[str]] = {}
    for node, gpus in gpus_by_node.items():
        for g in gpus:
            for kind, value in (("UUID", g.uuid), ("serial", g.serial)):
                if value:
                    seen.setdefault((kind, value), []).append(f"{node}/gpu{g.index}")
    out: dict[str, list[str]] = {}
    for (kind, value), where in seen.items():
        if len(where) > 1:
            for w in sorted(set(where)):
                out.setdefault(w.split("/")[0], []).append(f"{kind} {value} is reported by {', '.join(where)}")
    return out


def nameless_gpus(node: str, gpus: Sequence[GpuEvidence]) -> str | None:
    """The GPUs that report neither a UUID nor a serial (None when every one has one): which board was measured,
    and whether it is the one measured before, cannot be told."""
    nameless = [g.index for g in gpus if not (g.uuid or "").strip() and not (g.serial or "").strip()]
    if not nameless:
        return None
    return f"{node}: GPUs {nameless} report neither a UUID nor a serial: which boards were measured cannot be told"


def probe_products(node: str, gpus: Sequence[GpuEvidence], want: str, memory_mib: int, sku: str) -> str | None:
    """What is wrong with the GPUs the probe saw (NVML's product name, and memory within 2 % of the SKU's), or
    None: the labels GFD put on the node are not the only word on what is in it."""
    odd = [
        f"gpu{g.index} is {g.product!r}"
        for g in gpus
        if g.product is not None and g.product.strip().replace(" ", "-") != want
    ]
    odd += [
        f"gpu{g.index} has {g.memory_mib} MiB (the {sku} has {memory_mib})"
        for g in gpus
        if g.memory_mib is not None and abs(g.memory_mib - memory_mib) > 0.02 * memory_mib
    ]
    return f"{node}: the probe saw other GPUs than {want}: {'; '.join(odd)}" if odd else None
