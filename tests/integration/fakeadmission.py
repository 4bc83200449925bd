"""Pod Security admission as the fake API server applies it: the namespace's `pod-security.kubernetes.io/enforce`
label picks the level, the pod is checked as kubernetes/pod-security-admission checks it, and a refusal is the
API's Forbidden status with the real message.

Transcribed (not copied) from kubernetes/pod-security-admission at 8f84a87 (July 2026): policy/check_*.go for each
check's reason and detail, policy/registry.go for the order (baseline checks, then restricted ones, each sorted by
check id; a restricted check replaces the baseline one it overrides), policy/checks.go (ForbiddenDetail: `reason
(detail)` joined by ", "), admission/admission.go (`violates PodSecurity "LEVEL:VERSION": DETAIL`) and
admission/response.go (apierrors.NewForbidden: `pods "NAME" is forbidden: ...`, reason Forbidden, code 403).
Modelled: every check on a pod's spec (AppArmor, capabilities, host namespaces, hostPath volumes, host ports,
privileged, /proc mount, SELinux, seccomp, sysctls, privilege escalation, volume types, runAsNonRoot, runAsUser=0).
Not modelled: the deprecated seccomp and AppArmor annotations, probes' and lifecycle hooks' `host`, Windows host
process, user-namespace relaxations (`hostUsers: false`), exemptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

LABEL = "pod-security.kubernetes.io/enforce"
VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPS = {
    *("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE"),
    *("SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"),
}
RESTRICTED_VOLUMES = {
    *("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected"),
    "secret",
}
Result = tuple[str, str] | None  # (reason, detail) when the check forbids the pod


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod.get("initContainers") or []
    yield from pod.get("containers") or []
    yield from pod.get("ephemeralContainers") or []


def _sc(c: dict[str, Any]) -> dict[str, Any]:
    return c.get("securityContext") or {}


def _quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _who(names: list[str]) -> str:
    return f"{'container' if len(names) == 1 else 'containers'} {_quote(names)}"


def capabilities_baseline(pod: dict[str, Any]) -> Result:
    bad, caps = [], set()
    for c in _containers(pod):
        added = set((_sc(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPS
        if added:
            bad.append(c["name"])
            caps |= added
    if bad:
        return "non-default capabilities", f"{_who(bad)} must not include {_quote(sorted(caps))} in " + (
            "securityContext.capabilities.add"
        )
    return None


def host_namespaces(pod: dict[str, Any]) -> Result:
    on = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]
    return ("host namespaces", ", ".join(on)) if on else None


def host_path_volumes(pod: dict[str, Any]) -> Result:
    names = [v["name"] for v in pod.get("volumes") or [] if "hostPath" in v]
    return ("hostPath volumes", f"{'volume' if len(names) == 1 else 'volumes'} {_quote(names)}") if names else None


def host_ports(pod: dict[str, Any]) -> Result:
    bad, ports = [], set()
    for c in _containers(pod):
        mine = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if mine:
            bad.append(c["name"])
            ports |= mine
    if not bad:
        return None
    uses = "uses" if len(bad) == 1 else "use"
    return "hostPort", f"{_who(bad)} {uses} {'hostPort' if len(ports) == 1 else 'hostPorts'} {', '.join(sorted(ports))}"


def privileged(pod: dict[str, Any]) -> Result:
    bad = [c["name"] for c in _containers(pod) if _sc(c).get("privileged")]
    return ("privileged", f"{_who(bad)} must not set securityContext.privileged=true") if bad else None


def allow_privilege_escalation(pod: dict[str, Any]) -> Result:
    bad = [c["name"] for c in _containers(pod) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if bad:
        return (
            "allowPrivilegeEscalation != false",
            f"{_who(bad)} must set securityContext.allowPrivilegeEscalation=false",
        )
    return None


def capabilities_restricted(pod: dict[str, Any]) -> Result:
    no_drop, adding, caps = [], [], set()
    for c in _containers(pod):
        cap = _sc(c).get("capabilities")
        if cap is None:
            no_drop.append(c["name"])
            continue
        if "ALL" not in (cap.get("drop") or []):
            no_drop.append(c["name"])
        extra = set(cap.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            adding.append(c["name"])
            caps |= extra
    details = []
    if no_drop:
        details.append(f'{_who(no_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_who(adding)} must not include {_quote(sorted(caps))} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def restricted_volumes(pod: dict[str, Any]) -> Result:
    bad = [v["name"] for v in pod.get("volumes") or [] if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES]
    if bad:
        kinds = sorted({k for v in pod["volumes"] if v["name"] in bad for k in v if k != "name"})
        return "restricted volume types", f"{'volume' if len(bad) == 1 else 'volumes'} {_quote(bad)} " + (
            f"{'uses' if len(bad) == 1 else 'use'} restricted volume {'type' if len(kinds) == 1 else 'types'} "
            + _quote(kinds)
        )
    return None


def _pod_or_containers(pod: dict[str, Any], key: str, bad_value: Callable[[Any], bool]) -> tuple[list[str], list[str]]:
    """(explicit bad setters: "pod" and/or `containers "a"`, containers neither they nor the pod set well)."""
    setters, explicit, implicit = [], [], []
    pod_value = (pod.get("securityContext") or {}).get(key)
    pod_ok = pod_value is not None and not bad_value(pod_value)
    if pod_value is not None and bad_value(pod_value):
        setters.append("pod")
    for c in _containers(pod):
        value = _sc(c).get(key)
        if value is not None and bad_value(value):
            explicit.append(c["name"])
        elif value is None and not pod_ok:
            implicit.append(c["name"])
    if explicit:
        setters.append(_who(explicit))
    return setters, implicit


def run_as_non_root(pod: dict[str, Any]) -> Result:
    setters, implicit = _pod_or_containers(pod, "runAsNonRoot", lambda v: v is not True)
    if setters:
        return "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return "runAsNonRoot != true", f"pod or {_who(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def run_as_user(pod: dict[str, Any]) -> Result:
    setters = ["pod"] if (pod.get("securityContext") or {}).get("runAsUser") == 0 else []
    bad = [c["name"] for c in _containers(pod) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_who(bad))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_restricted(pod: dict[str, Any]) -> Result:
    def bad(v: Any) -> bool:
        return (v or {}).get("type") not in ("RuntimeDefault", "Localhost")

    setters, implicit = _pod_or_containers(pod, "seccompProfile", bad)
    if setters:
        values = sorted(
            {str(p.get("type")) for p in [(pod.get("securityContext") or {}).get("seccompProfile")] if p and bad(p)}
            | {
                str(_sc(c)["seccompProfile"].get("type"))
                for c in _containers(pod)
                if bad(_sc(c).get("seccompProfile")) and _sc(c).get("seccompProfile")
            }
        )
        return "seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to " + (
            _quote(values)
        )
    if implicit:
        return "seccompProfile", (
            f'pod or {_who(implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
        )
    return None


# check_sysctls.go: the safe set as of v1.37
SAFE_SYSCTLS = {
    *("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies"),
    *("net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports"),
    *("net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl"),
    *("net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"),
    *("net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"),
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def _explicit(pod: dict[str, Any], key: str, bad: Callable[[Any], bool]) -> tuple[list[str], list[str]]:
    """(setters that set `key` to a bad value: "pod" and/or `containers "a"`, the bad values' types, sorted)."""
    setters, values, names = [], set(), []
    pod_value = (pod.get("securityContext") or {}).get(key)
    if pod_value is not None and bad(pod_value):
        setters.append("pod")
        values.add(str(pod_value.get("type", "")))
    for c in _containers(pod):
        value = _sc(c).get(key)
        if value is not None and bad(value):
            names.append(c["name"])
            values.add(str(value.get("type", "")))
    if names:
        setters.append(_who(names))
    return setters, sorted(values)


def _profile_bad(v: Any) -> bool:
    return (v or {}).get("type") not in ("RuntimeDefault", "Localhost")


def app_armor(pod: dict[str, Any]) -> Result:
    setters, values = _explicit(pod, "appArmorProfile", _profile_bad)
    if not setters:
        return None
    reason = "forbidden AppArmor profile" + ("s" if len(values) > 1 else "")
    return reason, f"{' and '.join(setters)} must not set AppArmor profile type to {_quote(values)}"


def proc_mount(pod: dict[str, Any]) -> Result:
    bad = [c for c in _containers(pod) if _sc(c).get("procMount") not in (None, "Default")]
    if not bad:
        return None
    kinds = sorted({str(_sc(c)["procMount"]) for c in bad})
    return "procMount", f"{_who([c['name'] for c in bad])} must not set securityContext.procMount to {_quote(kinds)}"


def se_linux_options(pod: dict[str, Any]) -> Result:
    types: set[str] = set()
    user = role = False

    def bad(opts: dict[str, Any]) -> bool:
        nonlocal user, role
        valid = True
        if opts.get("type", "") not in SELINUX_TYPES:
            types.add(opts.get("type", ""))
            valid = False
        if opts.get("user"):
            user, valid = True, False
        if opts.get("role"):
            role, valid = True, False
        return not valid

    setters = ["pod"] if bad((pod.get("securityContext") or {}).get("seLinuxOptions") or {}) else []
    names = [c["name"] for c in _containers(pod) if bad(_sc(c).get("seLinuxOptions") or {})]
    if names:
        setters.append(_who(names))
    if not setters:
        return None
    data = [f"{'type' if len(types) == 1 else 'types'} {_quote(sorted(types))}"] if types else []
    data += ["user may not be set"] * user + ["role may not be set"] * role
    return "seLinuxOptions", f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"


def seccomp_baseline(pod: dict[str, Any]) -> Result:
    setters, values = _explicit(pod, "seccompProfile", _profile_bad)
    if not setters:
        return None
    return "seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to " + (
        _quote(values)
    )


def sysctls(pod: dict[str, Any]) -> Result:
    bad = [s["name"] for s in (pod.get("securityContext") or {}).get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


# registry.go's order: baseline ids sorted, then restricted ids sorted (capabilities_restricted overrides
# capabilities_baseline, procMount_restricted procMount, seccompProfile_restricted seccompProfile_baseline)
BASELINE = [app_armor, capabilities_baseline, host_namespaces, host_path_volumes, host_ports, privileged]
BASELINE += [proc_mount, se_linux_options, seccomp_baseline, sysctls]
RESTRICTED = [app_armor, host_namespaces, host_path_volumes, host_ports, privileged, se_linux_options, sysctls]
RESTRICTED += [allow_privilege_escalation, capabilities_restricted, proc_mount, restricted_volumes, run_as_non_root]
RESTRICTED += [run_as_user, seccomp_restricted]


def level_of(namespace: dict[str, Any] | None) -> tuple[str, str]:
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL, "privileged"), labels.get(VERSION_LABEL, "latest")


def violations(level: str, pod: dict[str, Any]) -> str:
    """checks.go's ForbiddenDetail of `pod` at `level` ("" when the level admits it)."""
    checks = {"privileged": [], "baseline": BASELINE, "restricted": RESTRICTED}[level]
    found = [r for r in (check(pod) for check in checks) if r is not None]
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in found)


def forbidden(namespace: dict[str, Any] | None, pod: dict[str, Any]) -> str:
    """The API's message refusing `pod` in `namespace`, or "" when Pod Security admits it."""
    level, version = level_of(namespace)
    detail = violations(level, pod.get("spec") or {})
    if not detail:
        return ""
    return f'pods "{pod["metadata"]["name"]}" is forbidden: violates PodSecurity "{level}:{version}": {detail}'
