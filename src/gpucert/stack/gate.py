"""The static gate over the configuration that changes: what GPU Operator values (or a ClusterPolicy) would deploy,
judged against the spec with no cluster, and SKU baselines against their version at a base ref. Pure: each rule
takes the parsed inputs and the tables (gate_data.py) and returns one fleet-level Finding.

Per configuration N (detail `N` or `N:component`):
- `stack.version[N:c]`: the version N deploys of each component the spec pins, against every pool's pin;
- `stack.compat[N:driver]`: the driver it deploys supports each pool's GPU product (minimum driver named) and the
  CUDA the pool declares;
- `stack.release[N]`: every version N sets is one the operator release ships;
- `stack.known_bad[N]`: no known-bad version or combination would be deployed.
Per baseline file F: `baseline.change[F]`: no tolerance loosened and no expected figure lowered without a new
`source`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.spec.baseline import DEFAULT_THROTTLE_ALLOWANCE
from gpucert.spec.cluster import ClusterSpec, Pool
from gpucert.spec.versions import at_least, normalize, parse_version
from gpucert.stack.compat import COMPAT_SOURCE, min_driver_for_cuda
from gpucert.stack.gate_data import KnownBadEntry, Tables, canonical, in_range
from gpucert.stack.operator_values import OPERATOR_KEYS, Deployment

__all__ = ["BaselineReview", "Gate", "gate_keys"]

OK, FAIL, ERROR, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP
COMPONENTS = tuple(OPERATOR_KEYS.values())
# where a release missing from operator-releases.yaml is read from (named in the finding that asks for it)
CHART_VALUES = "https://github.com/NVIDIA/gpu-operator/blob/v{}/deployments/gpu-operator/values.yaml"
COMPONENT_MATRIX = "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/life-cycle-policy.html"


@dataclass(frozen=True)
class BaselineReview:
    """A SKU baseline as the change leaves it, and as it was at the base ref (None: the file is new there)."""

    name: str
    pools: tuple[str, ...]
    current: dict[str, Any]
    base: dict[str, Any] | None
    ref: str


def _pinned(spec: ClusterSpec) -> list[str]:
    return [c for c in COMPONENTS if spec.stack.component(c) is not None]


def gate_keys(
    spec: ClusterSpec, deployments: Mapping[str, Deployment], reviews: Mapping[str, BaselineReview]
) -> list[CheckKey]:
    """Every check the gate requires of these inputs."""
    keys = []
    for name, d in deployments.items():
        keys += [CheckKey("stack.version", None, None, f"{name}:{c}") for c in _pinned(spec)]
        if d.components["driver"].enabled:
            keys.append(CheckKey("stack.compat", None, None, f"{name}:driver"))
        keys += [CheckKey("stack.release", None, None, name), CheckKey("stack.known_bad", None, None, name)]
    keys += [CheckKey("baseline.change", None, None, name) for name in reviews]
    return keys


def _cause(check: str, detail: str) -> str:
    return str(CheckKey(check, None, None, detail))


def _finding(check: str, detail: str, status: CheckStatus, message: str, **kw: Any) -> Finding:
    return Finding(check, status, None, None, f"{detail}: {message}", **kw)


class Gate:
    """The gate's inputs and tables, deciding one key at a time."""

    def __init__(
        self,
        spec: ClusterSpec,
        deployments: Mapping[str, Deployment],
        reviews: Mapping[str, BaselineReview],
        tables: Tables,
        release: str | None = None,
    ) -> None:
        self.spec = spec
        self.deployments = deployments
        self.reviews = reviews
        self.tables = tables
        self.release = normalize(release) if release else None  # --operator-release, for files that name none

    def decide(self, key: CheckKey) -> Finding:
        assert key.detail is not None
        if key.check == "baseline.change":
            return self.baseline_change(key.detail)
        name, _, component = key.detail.partition(":")
        d = self.deployments[name]
        match key.check:
            case "stack.version":
                return self.version(d, component)
            case "stack.compat":
                return self.compat(d)
            case "stack.release":
                return self.in_release(d)
            case "stack.known_bad":
                return self.known_bad(d)
        raise ValueError(f"the static gate has no rule for {key}")

    # ---- what a configuration deploys --------------------------------------------------------------------------

    def release_of(self, d: Deployment) -> str | None:
        return d.release or self.release

    def deployed(self, d: Deployment, component: str) -> tuple[str | None, str, str | None]:
        """(version, where it comes from, why it is unknown) of a component the configuration deploys: what the
        files set, else the release's default."""
        c = d.components[component]
        if c.version is not None or c.problem is not None:
            return c.version, c.where, c.problem
        release = self.release_of(d)
        r = self.tables.releases.release(release) if release else None
        if r is not None and component in r.components:
            return r.components[component][0], f"the default of GPU Operator {release}", None
        unset = "the files set no version"
        if release is None:
            why = f"{unset} and do not name the operator release (operator.version); pass --operator-release"
        elif r is None:
            why = f"{unset} and GPU Operator {release} is not in {self.tables.file('operator-releases.yaml')}"
        else:
            why = f"{unset} and the table has no {component} versions for GPU Operator {release}"
        return None, "", why

    # ---- the rules ---------------------------------------------------------------------------------------------

    def version(self, d: Deployment, component: str) -> Finding:
        detail = f"{d.name}:{component}"
        pins = {p.name: c.version for p in self.spec.pools if (c := self.spec.stack_for(p.name).component(component))}
        if not d.components[component].enabled:
            message = f"disables {component}, which the spec pins: enable it or remove the pin"
            return _finding("stack.version", detail, FAIL, message)
        version, where, problem = self.deployed(d, component)
        if version is None:
            return _finding("stack.version", detail, ERROR, f"cannot tell which {component} it deploys: {problem}")
        have = canonical(version)
        off = {pool: pin for pool, pin in pins.items() if canonical(pin) != have}
        expected = ", ".join(sorted(set(pins.values())))
        if off:
            by_pin: dict[str, list[str]] = {}
            for pool, pin in off.items():
                by_pin.setdefault(pin, []).append(pool)
            pools = "; ".join(
                f"the spec pins {pin} (pool{'s' if len(ps) > 1 else ''} {', '.join(ps)})" for pin, ps in by_pin.items()
            )
            if len(set(pins.values())) > 1:
                pools += " (one configuration deploys one version: pools pinned apart need NVIDIADriver objects)"
            message = f"deploys {component} {have} ({where}); {pools}"
            return _finding("stack.version", detail, FAIL, message, observed=have, expected=expected)
        message = f"deploys {component} {have} ({where}), the pin"
        return _finding("stack.version", detail, OK, message, observed=have, expected=expected)

    def compat(self, d: Deployment) -> Finding:
        detail = f"{d.name}:driver"
        version, where, problem = self.deployed(d, "driver")
        if version is None:
            if self.spec.stack.component("driver") is not None:
                why = f"{detail}: which driver it deploys is unknown (see stack.version): {problem}"
                return Finding("stack.compat", SKIP, None, None, why, cause=_cause("stack.version", detail))
            return _finding("stack.compat", detail, ERROR, f"cannot tell which driver it deploys: {problem}")
        have = canonical(version)
        problems: dict[str, list[str]] = {}  # the problem, and the pools that have it
        unknown, fine = [], []
        for pool in self.spec.pools:
            kind, what = self._supports(pool, have)
            if kind == "unknown":
                unknown.append(what)
            elif kind == "fine":
                fine.append(what)
            else:
                problems.setdefault(what, []).append(pool.name)
            cuda = self._cuda_problem(pool, have)
            if cuda is not None:
                problems.setdefault(cuda, []).append(pool.name)
        if problems:
            said = [f"pool{'s' if len(ps) > 1 else ''} {', '.join(ps)}: {why}" for why, ps in problems.items()]
            message = f"deploys driver {have} ({where}): " + "; ".join(said)
            return _finding("stack.compat", detail, FAIL, message, observed=have)
        if unknown:
            return _finding(
                "stack.compat", detail, ERROR, f"deploys driver {have}: " + "; ".join(unknown), observed=have
            )
        message = f"driver {have} supports {', '.join(dict.fromkeys(fine))} and the declared CUDA"
        return _finding("stack.compat", detail, OK, message, observed=have)

    def _supports(self, pool: Pool, have: str) -> tuple[Literal["fine", "unknown", "problem"], str]:
        """Whether driver `have` supports the pool's GPU (and what it supports), is not known to (and why), or
        does not (the problem)."""
        product = pool.expect.gpu_product
        support = self.tables.drivers.minimum(product)
        if support is None:
            table = self.tables.file("driver-support.yaml")
            return "unknown", f"pool {pool.name}: no minimum driver known for {product} (add it to {table})"
        if not at_least(have, support.minimum_driver):
            branch = parse_version(support.minimum_driver)[0]
            return "problem", (
                f"driver {have} does not support {product}; the minimum is {support.minimum_driver} "
                f"(branch R{branch}; {support.source})"
            )
        return "fine", f"{product} (minimum {support.minimum_driver})"

    def _cuda_problem(self, pool: Pool, have: str) -> str | None:
        """Why driver `have` cannot run the CUDA the pool declares (None when it can, or none is declared)."""
        cuda = self.spec.stack_for(pool.name).component("cuda")
        if cuda is None:
            return None
        minimum = min_driver_for_cuda(cuda.version)
        if minimum is None:
            return f"CUDA {cuda.version} is not in the table ({COMPAT_SOURCE})"
        if not at_least(have, minimum):
            return f"driver {have} is older than {minimum}, the minimum for CUDA {cuda.version} ({COMPAT_SOURCE})"
        return None

    def in_release(self, d: Deployment) -> Finding:
        release = self.release_of(d)
        table = self.tables.file("operator-releases.yaml")
        if release is None:
            # the chart's own values.yaml leaves operator.version unset (Helm deploys the chart's version): which
            # release applies is the user's to say, never guessed from the versions the files set
            message = (
                "names no GPU Operator release (operator.version, which the chart's values.yaml leaves unset), so "
                "neither the release's defaults nor its versions are known; pass --operator-release VERSION (the "
                "chart version you install: helm install --version VERSION) or set operator.version"
            )
            same = self.releases_defaulting_to(d)
            if same:
                message += f"; the versions it sets are the defaults of GPU Operator {' and '.join(same)}"
            return _finding("stack.release", d.name, ERROR, message)
        if self.release and d.release and self.release != d.release:
            message = (
                f"the files name GPU Operator {d.release} ({d.release_where}) and --operator-release says "
                f"{self.release}: which one is installed cannot be told; make them agree (or drop one)"
            )
            return _finding("stack.release", d.name, ERROR, message)
        r = self.tables.releases.release(release)
        if r is None:
            known = ", ".join(x.release for x in self.tables.releases.releases)
            message = (
                f"GPU Operator {release} is not in {table} (known: {known}). Add it there with its source: its "
                f"components' versions from the chart's values.yaml at tag v{release} ({CHART_VALUES.format(release)}"
                f"), its other drivers from NVIDIA's component matrix ({COMPONENT_MATRIX}); no code changes"
            )
            return _finding("stack.release", d.name, ERROR, message)
        problems, unknown = _against_release(d, r.components, release)
        if problems:
            return _finding("stack.release", d.name, FAIL, "; ".join(problems) + f" ({r.source})")
        if unknown:
            return _finding("stack.release", d.name, ERROR, "cannot check " + "; ".join(unknown))
        return _finding("stack.release", d.name, OK, f"every version it sets is one GPU Operator {release} ships")

    def releases_defaulting_to(self, d: Deployment) -> list[str]:
        """The releases whose defaults are every version the files set (a hint, never taken as the release)."""
        set_ = {c: canonical(x.version) for c, x in d.components.items() if x.enabled and x.version is not None}
        if not set_:
            return []
        return [
            r.release
            for r in self.tables.releases.releases
            if all(c in r.components and r.components[c][0] == v for c, v in set_.items())
        ]

    def known_bad(self, d: Deployment) -> Finding:
        versions: dict[str, str] = {}
        unknown = []
        for component, c in d.components.items():
            if not c.enabled:
                continue
            version, _, problem = self.deployed(d, component)
            if version is None:
                unknown.append((component, problem))
            else:
                versions[component] = canonical(version)
        hits = [hit for e in self.tables.known_bad.entries if (hit := _known_bad_hit(e, versions)) is not None]
        if hits:
            return _finding("stack.known_bad", d.name, FAIL, "would deploy " + "; ".join(hits))
        if unknown:
            why = "; ".join(f"{c}: {p}" for c, p in unknown)
            release = self.release_of(d)
            if release is None or self.tables.releases.release(release) is None:  # stack.release says why
                message = f"{d.name}: versions unknown ({why})"
                return Finding("stack.known_bad", SKIP, None, None, message, cause=_cause("stack.release", d.name))
            return _finding("stack.known_bad", d.name, ERROR, f"cannot check every component: {why}")
        message = f"no known-bad version or combination among {len(versions)} components"
        return _finding("stack.known_bad", d.name, OK, message)

    # ---- baselines ----------------------------------------------------------------------------------------------

    def baseline_change(self, name: str) -> Finding:
        review = self.reviews[name]
        if review.base is None:
            return _finding("baseline.change", name, OK, f"a new baseline (not in {review.ref}), reviewed as new")
        try:
            loosened = _loosened(review.base, review.current)
        except (KeyError, TypeError, ValueError) as exc:
            message = f"the version at {review.ref} cannot be read as a baseline ({exc})"
            return _finding("baseline.change", name, ERROR, message)
        bad = [what for what, new_source in loosened if not new_source]
        said = [what for what, new_source in loosened if new_source]
        if bad:
            message = (
                f"loosened against {review.ref} without a new `source`: " + "; ".join(bad) + ". Say where the new "
                "figure comes from (a measurement on a named cluster and date, a datasheet) in its source"
            )
            return _finding("baseline.change", name, FAIL, message)
        if said:
            message = f"loosened against {review.ref}, each with a new source: " + "; ".join(said)
            return _finding("baseline.change", name, OK, message)
        return _finding("baseline.change", name, OK, f"nothing loosened against {review.ref}")


def _loosened(base: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, bool]]:
    """Each loosening of `new` against `base`, and whether it comes with a new source."""
    out: list[tuple[str, bool]] = []
    for metric, was in (base.get("metrics") or {}).items():
        now = (new.get("metrics") or {}).get(metric)
        if now is None:
            out.append((f"{metric}: removed (a figure no longer checked)", False))
            continue
        changed = now.get("source") != was.get("source")
        c0, c1 = was.get("comparison", "min"), now.get("comparison", "min")
        if c1 != c0:
            out.append((f"{metric}: comparison {c0} -> {c1}", changed))
            continue
        if float(now["tolerance"]) > float(was["tolerance"]):
            out.append((f"{metric}: tolerance {was['tolerance']} -> {now['tolerance']}", changed))
        e0, e1 = float(was["expected"]), float(now["expected"])
        if (e1 < e0) if c1 == "min" else (e1 > e0):
            unit = now.get("unit", "")
            out.append((f"{metric}: expected {was['expected']} -> {now['expected']} {unit}".rstrip(), changed))
    h0, h1 = base.get("health") or {}, new.get("health") or {}
    health_source = h1.get("source") != h0.get("source")
    ecc0, ecc1 = h0.get("maxVolatileCorrectedEcc", 0), h1.get("maxVolatileCorrectedEcc", 0)
    if int(ecc1) > int(ecc0):
        out.append((f"health.maxVolatileCorrectedEcc {ecc0} -> {ecc1}", health_source))
    t0, t1 = h0.get("temperatureMarginC", 0), h1.get("temperatureMarginC", 0)
    if float(t1) < float(t0):
        out.append((f"health.temperatureMarginC {t0} -> {t1}", health_source))
    added = sorted(set(h1.get("applicationXids") or []) - set(h0.get("applicationXids") or []))
    if added:
        out.append((f"health.applicationXids: {', '.join(map(str, added))} now excused", health_source))
    out += _loosened_throttle_and_nvlink(base, new)
    p0, p1 = base.get("pcie") or {}, new.get("pcie") or {}
    link0 = (int(p0.get("generation", 0)), int(p0.get("width", 0)))
    link1 = (int(p1.get("generation", 0)), int(p1.get("width", 0)))
    if link1 < link0:
        message = f"pcie: Gen{link0[0]} x{link0[1]} -> Gen{link1[0]} x{link1[1]}"
        out.append((message, p1.get("source") != p0.get("source")))
    return out


def _loosened_throttle_and_nvlink(base: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, bool]]:
    """A larger throttle allowance (over the defaults where a side is silent), fewer NVLink links expected, higher
    NVLink error limits, or the NVLink expectation removed."""
    out: list[tuple[str, bool]] = []
    h0, h1 = base.get("health") or {}, new.get("health") or {}
    a0 = {**DEFAULT_THROTTLE_ALLOWANCE, **(h0.get("throttleAllowance") or {})}
    a1 = {**DEFAULT_THROTTLE_ALLOWANCE, **(h1.get("throttleAllowance") or {})}
    for reason in sorted(a1):
        if reason in a0 and float(a1[reason]) > float(a0[reason]):
            out.append(
                (
                    f"health.throttleAllowance.{reason} {a0[reason]} -> {a1[reason]}",
                    h1.get("source") != h0.get("source"),
                )
            )
    n0, n1 = base.get("nvlink"), new.get("nvlink")
    if n0 is None:
        return out
    if n1 is None:
        return [*out, ("nvlink: removed (health.nvlink can no longer be judged)", False)]
    said = n1.get("source") != n0.get("source")
    if int(n1.get("links", 0)) < int(n0.get("links", 0)):
        out.append((f"nvlink.links {n0['links']} -> {n1['links']}", said))
    for key, default in (("maxCrcErrorsPerSecond", 100), ("maxReplayErrors", 0), ("maxRecoveryErrors", 0)):
        v0, v1 = float(n0.get(key, default)), float(n1.get(key, default))
        if v1 > v0:
            out.append((f"nvlink.{key} {n0.get(key, default)} -> {n1.get(key, default)}", said))
    return out


def _against_release(d: Deployment, ships: Mapping[str, list[str]], release: str) -> tuple[list[str], list[str]]:
    """The versions the files set that the release does not ship, and the components that cannot be checked."""
    problems, unknown = [], []
    for component, c in d.components.items():
        if not c.enabled or (c.version is None and c.problem is None):
            continue  # off, or the release's own default
        if c.version is None:
            unknown.append(f"{component}: {c.problem} ({c.where})")
            continue
        versions = ships.get(component)
        if versions is None:
            unknown.append(f"{component}: the table lists no {component} versions for {release}; add them")
        elif canonical(c.version) not in versions:
            problems.append(
                f"{component} {canonical(c.version)} ({c.where}) is not a version of GPU Operator {release}, "
                f"which ships {', '.join(versions)}"
            )
    return problems, unknown


def _known_bad_hit(e: KnownBadEntry, versions: Mapping[str, str]) -> str | None:
    """What the known-bad entry `e` says of these versions, when they are the ones it names (or mismatch as it
    warns); None otherwise."""
    if e.components and all(c in versions and in_range(versions[c], r) for c, r in e.components.items()):
        said = ", ".join(f"{c} {versions[c]}" for c in e.components)
        return f"{said}: {e.id}: {e.reason} ({e.source})"
    if e.same_version and all(c in versions for c in e.same_version):
        found = {versions[c] for c in e.same_version}
        if len(found) > 1 and (e.since is None or any(at_least(v, e.since) for v in found)):
            said = ", ".join(f"{c} {versions[c]}" for c in e.same_version)
            return f"{said}: {e.id}: {e.reason} ({e.source})"
    return None
