"""`gpucert preflight`: will a certification of this cluster run, and if not, why, before anything is created.

Read-only. It asks the API server, as the identity the run will use: a SelfSubjectAccessReview for every verb and
resource the run needs; the run namespace and its Pod Security labels, and a server-side dry run of the pods the
spec will create (admission runs in full, nothing is stored); per node of the spec's pools, the allocatable GPUs
against the pool's count, GFD's MIG and replica labels, a cordon, the GPU pods already there, taints no toleration
covers, the RDMA resource a fabric check needs; the RuntimeClass; the probe image's pin and its pull secrets.
Every problem is a Check naming what to fix; `certify` and `recertify` on a kubernetes target run it first.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from gpucert.errors import AdmissionError, ClusterAccessError, IncompleteRunError
from gpucert.measure.targets.kubernetes.admission import PSA_LABEL, admission_fix, dry_run_pod
from gpucert.measure.targets.kubernetes.api import RBAC_HINT, KubeApi, status_of
from gpucert.measure.targets.kubernetes.gang import gang_readiness
from gpucert.measure.targets.kubernetes.nodes import holds_gpus
from gpucert.measure.targets.kubernetes.podspec import CORDON_TOLERATION, fabric_level, pod_spec, spec_tolerations
from gpucert.measure.targets.kubernetes.sharing import refusal
from gpucert.spec.cluster import ClusterSpec, KubernetesTargetSpec, Pool
from gpucert.spec.kubernetes import topology_key

__all__ = ["GROUPS", "Check", "Preflight", "needed_access"]

GROUPS = ("credentials and RBAC", "namespace and Pod Security", "nodes", "image")
OK, FAIL, WARN = "ok", "fail", "warn"
LEVELS = ("privileged", "baseline", "restricted")  # each admits what the ones after it admit
# taints the node lifecycle controller and cloud providers set for a node's state (k8s.io/api core/v1
# well_known_taints.go: not-ready, unreachable, memory-, disk-, pid-pressure, network-unavailable, out-of-service;
# node.cloudprovider.kubernetes.io/uninitialized, shutdown): tolerating one would hide a broken node
CONDITION_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
# the pods that may hold GPUs: a finished pod holds none (k8s.io/kubernetes pkg/registry/core/pod/strategy.go,
# PodToSelectableFields: status.phase is a pod's selectable field; `!=` terms are ANDed)
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
Access = tuple[str, str, str, str | None]  # (apiGroup, resource[/subresource], verb, namespace or None)


@dataclass(frozen=True, slots=True)
class Check:
    group: str
    item: str
    status: str  # ok | fail | warn
    detail: str = ""
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def needed_access(spec: ClusterSpec, *, recertify: bool = False, drain: bool = False) -> list[Access]:
    """Every (group, resource, verb, namespace) a run of `spec` uses: deploy/rbac.yaml grants exactly these."""
    t = spec.target
    assert isinstance(t, KubernetesTargetSpec)
    ns = t.namespace
    out: list[Access] = [("", "nodes", "list", None), ("nvidia.com", "clusterpolicies", "list", None)]
    for stack_ns in sorted({s.namespace for s in spec.stack.sources().values() if s.label is None}):
        out.append(("", "pods", "list", stack_ns))
    out += [("", "configmaps", v, ns) for v in ("create", "list", "delete")]
    out += [("batch", "jobs", v, ns) for v in ("create", "get", "list", "delete")]
    out += [("", "pods", v, ns) for v in ("create", "list", "watch", "delete")]
    out += [("", "pods/log", "get", ns), ("", "nodes", "get", None), ("", "pods", "list", None)]
    if spec.certify.multinode is not None:
        out += [("", "services", v, ns) for v in ("create", "list", "delete")]
        if t.gang is not None:  # gang.py: the CRDs that say JobSet and Kueue are there, the JobSet, its queue
            out.append(("apiextensions.k8s.io", "customresourcedefinitions", "get", None))
            out += [("jobset.x-k8s.io", "jobsets", v, ns) for v in ("create", "get", "delete")]
            out += [("kueue.x-k8s.io", "localqueues", "get", ns), ("kueue.x-k8s.io", "workloads", "list", ns)]
    out.append(("", "namespaces", "get", None))  # preflight's own reads: the namespace's labels
    if t.runtime_class_name:
        out.append(("node.k8s.io", "runtimeclasses", "get", None))
    if recertify:
        out += [("coordination.k8s.io", "leases", v, ns) for v in ("create", "get", "update", "patch", "delete")]
        out += [("", "nodes", "patch", None), ("", "pods", "watch", None)]
        if drain:
            out.append(("", "pods/eviction", "create", None))
    return out


class Preflight:
    def __init__(self, spec: ClusterSpec, kube: KubeApi, *, recertify: bool = False, drain: bool = False) -> None:
        assert isinstance(spec.target, KubernetesTargetSpec)
        self.spec, self.kube, self.t = spec, kube, spec.target
        self.recertify, self.drain = recertify, drain
        self.checks: list[Check] = []
        self.allowed: dict[Access, bool] = {}
        self._holders: dict[str, list[str]] | None = None  # node -> its GPU pods, from one list for the preflight

    def add(self, group: int, item: str, status: str, detail: str = "", fix: str = "") -> None:
        self.checks.append(Check(GROUPS[group], item, status, detail, fix))

    def run(self, nodes: list[str] | None = None) -> list[Check]:
        """Every check (of `nodes` only, when given); an API that refuses the credentials or does not answer is one
        failed check, and the rest are not asked."""
        try:
            self.access()
            runtime_class = self.runtime_class()  # a missing one refuses every pod: the dry runs would say only that
            self.namespace(dry_run=runtime_class)
            self.gang()
            self.node_checks(nodes)
            self.image()
        except (ClusterAccessError, IncompleteRunError) as exc:
            self.add(0, "the API server", FAIL, str(exc), "point $KUBECONFIG or target.context at the cluster")
        return self.checks

    @property
    def ready(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    # ---- credentials and RBAC ------------------------------------------------------------------------------------

    def can(self, group: str, resource: str, verb: str, namespace: str | None) -> bool:
        key = (group, resource, verb, namespace)
        if key not in self.allowed:
            res, _, sub = resource.partition("/")
            attrs = {"group": group, "resource": res, "verb": verb, **({"subresource": sub} if sub else {})}
            if namespace:
                attrs["namespace"] = namespace
            if resource == "namespaces":  # deploy/rbac.yaml grants the run namespace only (resourceNames)
                attrs["name"] = self.t.namespace
            body = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs},
            }
            review = self.kube.json(
                "create",
                "selfsubjectaccessreviews",
                self.kube.authorization.create_self_subject_access_review,
                body=body,
            )
            self.allowed[key] = bool((review.get("status") or {}).get("allowed"))
        return self.allowed[key]

    def access(self) -> None:
        for group, resource, verb, ns in needed_access(self.spec, recertify=self.recertify, drain=self.drain):
            where = f"in namespace {ns}" if ns else "cluster-wide"
            item = f"{verb} {resource}{f'.{group}' if group else ''} {where}"
            if self.can(group, resource, verb, ns):
                self.add(0, item, OK, "allowed")
            else:
                self.add(0, item, FAIL, f"denied for {self.kube.identity}", RBAC_HINT)

    # ---- namespace and Pod Security ------------------------------------------------------------------------------

    def namespace(self, dry_run: bool = True) -> None:
        ns = self.t.namespace
        try:
            obj = self.kube.json("get", f"namespace {ns}", self.kube.core.read_namespace, name=ns)
        except ClusterAccessError as exc:
            if status_of(exc) == 404:
                self.add(1, f"namespace {ns}", FAIL, "does not exist", "kubectl apply -f deploy/rbac.yaml creates it")
                return
            self.add(1, f"namespace {ns}", WARN, f"cannot be read ({exc})", "grant get namespaces (deploy/rbac.yaml)")
            obj = {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        enforce = labels.get(PSA_LABEL, "")  # "": the cluster's default (its AdmissionConfiguration), unknown here
        kinds = [("the probe pods", "restricted", self.probe_pod())]
        if self.spec.certify.multinode is not None or self._pool_rdma():
            level, why = fabric_level(self.t, rdma=True if self._pool_rdma() else None)
            kinds.append((f"the all-reduce pods{f' ({why})' if why else ''}", level, self.fabric_pod()))
        for what, level, pod in kinds:
            self.admits(what, level, enforce, pod, dry_run)

    def gang(self) -> None:
        """Where target.gang is set: a JobSet Kueue admits, the Indexed Job it falls back to, or no queue."""
        g = self.t.gang
        if g is not None and self.spec.certify.multinode is not None:
            status, detail, fix = gang_readiness(self.kube, self.t.namespace, g)
            self.add(1, f"gang admission (target.gang, LocalQueue {g.local_queue})", status, detail, fix)

    def probe_pod(self) -> dict[str, Any]:
        return pod_spec(
            self.t, spec_tolerations(self.spec), "gpucert-preflight", self.spec.pools[0].expect.gpus_per_node
        )

    def _pool_rdma(self) -> dict[str, str]:
        """The first fabric pool's RDMA resource request (its pairs' pods carry it), {} where none names one."""
        named = next((p.fabric.rails.resource for p in self.spec.pools if p.fabric and p.fabric.rails.resource), None)
        return {named: "1"} if named else {}

    def fabric_pod(self) -> dict[str, Any]:
        from gpucert.measure.targets.kubernetes.podspec import fabric_security

        limits = self._pool_rdma() or self.t.fabric_resources
        pod = pod_spec(
            self.t,
            spec_tolerations(self.spec),
            "gpucert-preflight",
            self.spec.pools[0].expect.gpus_per_node,
            limits=limits,
        )
        pod["containers"][0]["securityContext"] = fabric_security(self.t, rdma=bool(limits))
        if self.t.fabric_host_network:
            pod["hostNetwork"] = True
        return pod

    def admits(self, what: str, level: str, enforce: str, pod: dict[str, Any], dry_run: bool) -> None:
        """A dry run of the pod when RBAC allows one (admission's own answer), else the labels' arithmetic."""
        ns = self.t.namespace
        item = f"{what}: Pod Security `{level}`"
        if dry_run and self.can("", "pods", "create", ns):
            try:
                dry_run_pod(self.kube, ns, "gpucert-preflight", pod)
            except AdmissionError as exc:
                fix = admission_fix(exc.said, ns, level, what).partition("; ")[2]
                self.add(1, item, FAIL, f"the API server refuses them: {exc.said}", fix)
                return
            except ClusterAccessError as exc:
                if status_of(exc) not in (400, 422):  # BadRequest, Invalid: the pod, not the API, is at fault
                    raise
                fix = (
                    "correct the spec key it names (target.resources, tolerations, imagePullSecrets, runtimeClassName)"
                )
                self.add(1, item, FAIL, f"the API server finds the pod invalid: {exc}", fix)
                return
            self.add(1, item, OK, f"admitted (namespace {ns} enforces `{enforce or 'the cluster default'}`; a dry run)")
        elif not enforce and level != "restricted":  # every default admits `restricted` pods, not the others
            fix = f"kubectl label namespace {ns} {PSA_LABEL}={level}, or grant create pods (dry runs: deploy/rbac.yaml)"
            detail = f"not known: namespace {ns} has no {PSA_LABEL} label (the cluster's default level applies)"
            self.add(1, item, WARN, detail, fix)
        elif LEVELS.index(enforce if enforce in LEVELS else "restricted") > LEVELS.index(level):
            fix = f"kubectl label namespace {ns} --overwrite {PSA_LABEL}={level}"
            self.add(1, item, FAIL, f"namespace {ns} enforces `{enforce}`", fix)
        else:
            self.add(1, item, OK, f"namespace {ns} enforces `{enforce or 'the cluster default'}`")

    # ---- nodes ---------------------------------------------------------------------------------------------------

    def runtime_class(self) -> bool:
        name = self.t.runtime_class_name
        if not name:
            return True
        try:
            self.kube.call("get", f"runtimeclass {name}", self.kube.node.read_runtime_class, name=name)
        except ClusterAccessError as exc:
            if status_of(exc) != 404:
                raise
            fix = "create it (the GPU Operator makes `nvidia`), or correct target.runtimeClassName"
            self.add(2, f"RuntimeClass {name}", FAIL, "does not exist: every pod naming it is refused", fix)
            return False
        self.add(2, f"RuntimeClass {name}", OK, "exists")
        return True

    def node_checks(self, only: list[str] | None) -> None:
        selector = ",".join(f"{k}={v}" for k, v in self.t.node_selector.items())
        listed = list(self.kube.pages("list", "nodes", self.kube.core.list_node, label_selector=selector))
        ready = 0
        seen = 0
        for node in listed:
            name = node["metadata"]["name"]
            if only is not None and name not in only:
                continue
            seen += 1
            problems = self.node_problems(node)
            for what, detail, fix in problems:
                self.add(2, f"{name}: {what}", FAIL, detail, fix)
            ready += not problems
        if not seen:
            where = ", ".join(only) if only else f"target.nodeSelector {selector or '(none)'}"
            self.add(2, "GPU nodes", FAIL, f"no node matches {where}", "check the selector and the nodes' GFD labels")
        elif ready:
            self.add(2, f"{ready} of {seen} nodes", OK, "GPUs free and whole, schedulable, every taint tolerated")

    def node_problems(self, node: dict[str, Any]) -> list[tuple[str, str, str]]:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        pools = [(i, p) for i, p in enumerate(self.spec.pools) if p.selects(labels)]
        if not pools:
            return []  # in no pool: the run leaves it alone (inventory says so)
        i, pool = pools[0]
        alloc = (node.get("status") or {}).get("allocatable") or {}
        out = _gpus_problems(name, labels, pool, alloc)
        spec = node.get("spec") or {}
        if spec.get("unschedulable") and not self.recertify:
            fix = f"uncordon it when its maintenance is over (kubectl uncordon {name}), or certify without it"
            out.append(("cordoned", "someone took it out of service (spec.unschedulable)", fix))
        out += _not_ready(node)
        out += self._untolerated(name, i, spec.get("taints") or [])
        if not self.recertify and not out and self.t.busy_timeout_seconds == 0:  # else the run waits for them
            holders = self.holders(name)
            if holders:
                fix = "free the node, or let the run wait for it with target.busyTimeoutSeconds"
                out.append(("GPU pods", f"its GPUs are held by {', '.join(holders)}", fix))
        multinode = self.spec.certify.multinode  # its pods ask for the fabric: on the nodes of a pool with a ring
        if multinode is not None and pool.name in dict(multinode.rings(self.spec.pool_names)):
            for res, amount in self.t.fabric_resources.items():
                if _count(alloc.get(res)) < _count(amount):
                    fix = f"install the RDMA device plugin for {res} on the node, or correct target.fabricResources"
                    out.append(("RDMA", f"allocatable {res} {_count(alloc.get(res))} of the {amount} needed", fix))
            key = topology_key(self.t)
            if key and not labels.get(key):  # in no domain: on no ring (the run's `no domain` error)
                fix = f"kubectl label node {name} {key}=DOMAIN, or remove target.gang.topologyKey"
                out.append(("topology domain", f"no {key} label: no all-reduce across nodes would measure it", fix))
        return out

    def _untolerated(self, name: str, pool_index: int, taints: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        """The node's NoSchedule and NoExecute taints that no toleration of gpucert's pods covers."""
        out = []
        tolerations = [*spec_tolerations(self.spec), CORDON_TOLERATION]
        for taint in taints:
            if taint.get("effect") not in ("NoSchedule", "NoExecute") or any(_tolerates(t, taint) for t in tolerations):
                continue
            said = f"{taint['key']}={taint.get('value', '')}:{taint['effect']}"
            fix = f"declare it in pools[{pool_index}].taints (its pods then tolerate it), or remove it from the node"
            if taint["key"].startswith(CONDITION_TAINTS):  # the node's state, not a taint to tolerate
                fix = f"the node controller set it: kubectl describe node {name}, repair it, or certify without it"
            out.append(("taint", f"{said}: no toleration of gpucert's pods covers it", fix))
        return out

    def holders(self, node: str) -> list[str]:
        """`namespace/name` of the GPU pods on `node`, from one paged list of the cluster's unfinished pods for the
        whole preflight, grouped by node; only the GPU holders' names are kept. A field selector takes one
        spec.nodeName, not a set, and no label marks a GPU pod, so the choice was one list or one a node: 4,096
        lists on a 4,096-node cluster. An API server that reads a consistent list from etcd (before Kubernetes
        1.31's ConsistentListFromCache: k8s.io/apiserver pkg/storage/cacher/cacher.go, shouldDelegateList) ranges
        over every pod of the cluster for each of them and filters after decoding (pkg/storage/etcd3/store.go,
        GetList: appendListItem keeps what pred.Matches): the cluster's pods read 4,096 times. Where the watch cache
        answers by its spec.nodeName index, the lists are cheap, but still 4,096 requests for what one list's pages
        (500 pods each) carry; it costs the pods of nodes outside the pools, read once."""
        if self._holders is None:
            self._holders = {}
            pods = self.kube.pages(
                "list",
                "pods in all namespaces",
                self.kube.core.list_pod_for_all_namespaces,
                field_selector=UNFINISHED,
            )
            for pod in pods:
                where = (pod.get("spec") or {}).get("nodeName")
                if where and holds_gpus(pod):
                    meta = pod["metadata"]
                    self._holders.setdefault(where, []).append(f"{meta.get('namespace')}/{meta['name']}")
        return self._holders.get(node, [])

    # ---- image ---------------------------------------------------------------------------------------------------

    def image(self) -> None:
        image = self.t.image
        if not image:
            self.add(3, "target.image", FAIL, "not set", "set it to the probe image built from deploy/Dockerfile")
            return
        last = image.rsplit("/", 1)[-1]
        tag = last.partition("@")[0].partition(":")[2]
        if DIGEST.search(image):
            self.add(3, image, OK, "pinned by digest")
        elif self.t.image_pin == "digest":
            fix = "write it as REF@sha256:DIGEST (docker buildx imagetools inspect REF), or set target.imagePin: tag"
            self.add(3, image, FAIL, "not pinned by digest, as target.imagePin requires", fix)
        elif not tag or tag == "latest":
            self.add(3, image, FAIL, "no tag, or `latest`: nodes may run different images", "name a version tag")
        else:
            self.add(3, image, OK, f"pinned by tag {tag} (target.imagePin: tag)")
        ns = self.t.namespace
        for secret in self.t.image_pull_secrets:
            item = f"imagePullSecret {secret}"
            if not self.can("", "secrets", "get", ns):
                self.add(
                    3, item, WARN, "not checked: gpucert may not read secrets", f"kubectl -n {ns} get secret {secret}"
                )
                continue
            try:
                self.kube.call(
                    "get", f"secret {secret}", self.kube.core.read_namespaced_secret, name=secret, namespace=ns
                )
            except ClusterAccessError as exc:
                if status_of(exc) != 404:
                    raise
                fix = f"kubectl -n {ns} create secret docker-registry {secret} ..."
                self.add(3, item, FAIL, f"does not exist in namespace {ns}", fix)
                continue
            self.add(3, item, OK, "exists")


def _gpus_problems(name: str, labels: dict[str, str], pool: Pool, alloc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Shared GPUs (gpucert certifies whole GPUs), or fewer allocatable than the pool expects."""
    need = pool.expect.gpus_per_node
    why = refusal(name, labels, pool.expect.gpu_sharing)
    if why:
        found, _, fix = why.partition("gpucert certifies whole GPUs only; ")
        return [("shared GPUs", found.rstrip(": "), fix)]
    if _count(alloc.get("nvidia.com/gpu")) < need:
        return [
            (
                "short of GPUs",
                f"allocatable nvidia.com/gpu {_count(alloc.get('nvidia.com/gpu'))} of the {need} pool "
                f"{pool.name} expects",
                "a GPU is missing or the device plugin marked it unhealthy: kubectl describe node "
                f"{name}, and nvidia-smi on the node",
            )
        ]
    return []


def _not_ready(node: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A node whose Ready condition is False or Unknown (a kubelet down or unreachable): no pod starts there."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            why = f"condition Ready={cond.get('status')} ({cond.get('reason', '')}: {cond.get('message', '')})"
            name = node["metadata"]["name"]
            return [
                ("not Ready", why, f"kubectl describe node {name}; repair it (kubelet, network), or certify without it")
            ]
    return []


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _tolerates(toleration: dict[str, str], taint: dict[str, Any]) -> bool:
    """Whether a toleration covers a taint, as the scheduler decides (k8s.io/api core/v1 toleration.go)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return bool(toleration.get("key")) and toleration.get("value", "") == taint.get("value", "")
