"""deploy/ for keeping a fleet certified in the cluster: the kustomization (CronJob, PVC, exporter Deployment and
Service, RBAC), the ServiceMonitor and the controller image, read as the API server, kustomize, `gpucert` and
Docker read them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpucert.cli import args as cli_args
from gpucert.cli import fleet as fleet_commands
from gpucert.cli import main as cli
from gpucert.spec.cluster import KubernetesTargetSpec, load_spec

from .test_deploy import instructions

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = "1.30.0"  # the oldest Kubernetes the examples' specs accept (stack.kubernetes.minVersion)
DIGEST = "sha256:" + "1" * 64


# where the manifests' paths are: the pod's mounted volumes and the controller image's checkout
CONTAINER_PATHS = ("/etc/gpucert/", "/opt/gpucert/", "/var/lib/gpucert/")


@pytest.fixture(autouse=True)
def _paths_as_the_container_has_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The command lines the manifests run name paths that exist in the container (mounted volumes, the image's
    checkout), not on this machine: the parser's check that a path is there (cli/args._path) is answered for them
    from a stand-in of the container's tree (a name with a suffix a file, else a folder); each test asserts the path
    is mounted, and every other path is checked as ever."""
    real = cli_args._path

    def in_container(text: str) -> Path:
        if not text.startswith(CONTAINER_PATHS):
            return real(text)
        there = tmp_path / "container" / text.lstrip("/")
        if there.suffix:
            there.parent.mkdir(parents=True, exist_ok=True)
            there.touch()
        else:
            there.mkdir(parents=True, exist_ok=True)
        return there

    monkeypatch.setattr(cli_args, "_path", in_container)


def kustomization() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return doc


def resources() -> list[dict[str, Any]]:
    """The objects the kustomization lists, as written (before kustomize names the generated ConfigMaps)."""
    return [d for f in kustomization()["resources"] for d in yaml.safe_load_all((DEPLOY / f).read_text()) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def validate(doc: dict[str, Any]) -> None:
    """The object against Kubernetes' OpenAPI schema, strictly: a misspelt or misplaced key is an error."""
    problem = None
    try:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as exc:
        problem = f"{'/'.join(str(p) for p in exc.path)}: {exc.message}"
    assert problem is None, f"{doc['kind']} {doc['metadata']['name']}: {problem}"


def test_every_object_is_what_the_api_server_accepts() -> None:
    docs = resources()
    assert {d["kind"] for d in docs} >= {"CronJob", "Deployment", "Service", "PersistentVolumeClaim", "ClusterRole"}
    for doc in docs:
        validate(doc)


def literals() -> dict[str, str]:
    gen = next(g for g in kustomization()["configMapGenerator"] if g["name"] == "gpucert-schedule")
    return dict(item.split("=", 1) for item in gen["literals"])


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """$(VAR) as the kubelet expands it in a container's args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


def container(pod: dict[str, Any]) -> dict[str, Any]:
    assert len(pod["containers"]) == 1
    c: dict[str, Any] = pod["containers"][0]
    return c


def mounted(pod: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume mounted where `path` lies."""
    mounts = container(pod)["volumeMounts"]
    m = next((m for m in mounts if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")), None)
    assert m is not None, f"nothing is mounted at {path}"
    v: dict[str, Any] = next(v for v in pod["volumes"] if v["name"] == m["name"])
    return v


def test_the_cronjob_runs_what_gpucert_schedule_takes() -> None:
    cron = one(resources(), "CronJob", "gpucert-recertify")
    job = cron["spec"]["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    c = container(pod)
    assert c["envFrom"] == [{"configMapRef": {"name": "gpucert-schedule"}}]
    args = cli._parser().parse_args(expand(c["args"], literals()))
    assert args.func is fleet_commands.cmd_schedule
    assert (args.max_nodes, args.max_cordoned_share, args.max_failure_share) == (2, 0.25, 0.5)
    assert args.drain is False  # never drains unless configured
    assert (args.min_age_hours, args.wait_timeout) == (168, 600)
    assert mounted(pod, args.spec)["configMap"] == {"name": "gpucert-spec"}
    assert mounted(pod, args.reports)["persistentVolumeClaim"] == {"claimName": "gpucert-reports"}
    assert mounted(pod, args.sign_key)["secret"]["secretName"] == "gpucert-signing-key"
    assert args.handover.startswith("/opt/gpucert/")  # the controller image's checkout
    with_drain = cli._parser().parse_args(expand(c["args"], {**literals(), "DRAIN": "true"}))
    assert with_drain.drain is True
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert job["backoffLimit"] == 0
    assert pod["serviceAccountName"] == "gpucert"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert mounted(pod, "/tmp")["emptyDir"] == {}


def test_the_exporter_serves_what_gpucert_metrics_takes_to_the_service() -> None:
    docs = resources()
    deployment = one(docs, "Deployment", "gpucert-metrics")
    pod = deployment["spec"]["template"]["spec"]
    c = container(pod)
    args = cli._parser().parse_args(c["args"])
    assert args.func is fleet_commands.cmd_metrics
    assert args.serve == ":9400"
    assert mounted(pod, args.reports)["persistentVolumeClaim"] == {"claimName": "gpucert-reports"}
    assert next(m for m in c["volumeMounts"] if m["mountPath"] == args.reports)["readOnly"] is True
    assert mounted(pod, args.spec)["configMap"] == {"name": "gpucert-spec"}
    port = next(p for p in c["ports"] if p["name"] == "metrics")
    assert port["containerPort"] == 9400
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = one(docs, "Service", "gpucert-metrics")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    # the CronJob's pod runs beside the exporter's: the ReadWriteOnce volume is attached to one node at a time
    pvc = one(docs, "PersistentVolumeClaim", "gpucert-reports")
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    cron_pod = one(docs, "CronJob", "gpucert-recertify")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    term = cron_pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    # its own service account, which may list nodes and nothing else
    assert pod["serviceAccountName"] == "gpucert-metrics"
    binding = one(docs, "ClusterRoleBinding", "gpucert-metrics")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpucert-metrics", "namespace": "gpucert"}]
    role = one(docs, "ClusterRole", "gpucert-metrics")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]


def test_the_service_monitor_selects_the_exporters_service() -> None:
    monitor = yaml.safe_load((DEPLOY / "fleet" / "servicemonitor.yaml").read_text())
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["kind"] == "ServiceMonitor"
    service = one(resources(), "Service", "gpucert-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert "servicemonitor.yaml" not in " ".join(kustomization()["resources"])  # optional: needs the operator's CRD


def test_the_in_cluster_spec_talks_to_the_api_as_the_pod() -> None:
    spec = load_spec(DEPLOY / "fleet" / "spec.yaml")
    assert isinstance(spec.target, KubernetesTargetSpec)
    assert spec.target.context is None  # in the pod: its service account
    assert spec.target.namespace == "gpucert"  # where deploy/rbac.yaml grants Jobs and Leases
    baseline = Path(spec.pools[0].baseline)  # a v1alpha1 spec: one pool
    assert baseline.is_absolute()
    assert (ROOT / baseline.relative_to("/opt/gpucert")).is_file()  # the controller image's checkout holds it


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize FOLDER`: the objects kubectl would apply (skips when kubectl is not installed)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (make tools installs Debian's kubernetes-client): no kustomize build")
    out = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_kustomize_builds_what_the_api_server_accepts() -> None:
    docs = kustomize(DEPLOY)
    for doc in docs:
        validate(doc)
    generated = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    spec_cm = next(n for n in generated if n.startswith("gpucert-spec-"))
    schedule_cm = next(n for n in generated if n.startswith("gpucert-schedule-"))
    cron_pod = one(docs, "CronJob", "gpucert-recertify")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert container(cron_pod)["envFrom"] == [{"configMapRef": {"name": schedule_cm}}]
    assert mounted(cron_pod, "/etc/gpucert/spec/spec.yaml")["configMap"]["name"] == spec_cm
    metrics_pod = one(docs, "Deployment", "gpucert-metrics")["spec"]["template"]["spec"]
    assert mounted(metrics_pod, "/etc/gpucert/spec/spec.yaml")["configMap"]["name"] == spec_cm
    assert {container(p)["image"] for p in (cron_pod, metrics_pod)} == {"gpucert-controller"}  # named by an overlay
    spec_doc = yaml.safe_load(one(docs, "ConfigMap", "gpucert-spec")["data"]["spec.yaml"])
    assert spec_doc == yaml.safe_load((DEPLOY / "fleet" / "spec.yaml").read_text())
    namespaces = {(d["kind"], d["metadata"].get("namespace")) for d in docs}
    assert ("Role", "gpu-operator") in namespaces  # configure's read of the operator's pods stays where it was
    assert ("RoleBinding", "gpu-operator") in namespaces
    assert "gpucert-settings" not in {n[: len("gpucert-settings")] for n in generated}  # a setting, never applied
    ns = one(docs, "Namespace", "gpucert")["metadata"]["labels"]
    assert ns["pod-security.kubernetes.io/enforce"] == "restricted"  # what probe pods, CronJob and exporter meet


def test_an_overlay_as_the_readme_writes_it(tmp_path: Path) -> None:
    """Your spec, your settings and your image over deploy/, without editing the checkout."""
    kubectl = shutil.which("kubectl")
    version = subprocess.run([kubectl or "kubectl", "version", "--client"], capture_output=True, text=True, check=False)
    if kubectl is None or re.search(r"v1\.(1\d|20)\.", version.stdout):
        pytest.skip("kubectl older than 1.21 (kustomize v2) takes a base folder only under `bases:`")
    site = tmp_path / "site"
    site.mkdir()
    spec = yaml.safe_load((DEPLOY / "fleet" / "spec.yaml").read_text())
    spec["metadata"]["name"] = "site-a"
    (site / "spec.yaml").write_text(yaml.safe_dump(spec))
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY, site)],
        "configMapGenerator": [
            {"name": "gpucert-spec", "namespace": "gpucert", "behavior": "replace", "files": ["spec.yaml"]},
            {"name": "gpucert-schedule", "namespace": "gpucert", "behavior": "merge", "literals": ["MAX_NODES=4"]},
            {"name": "gpucert-settings", "behavior": "merge", "literals": ["gpuOperatorNamespace=nvidia-gpu-operator"]},
        ],
        "components": [os.path.relpath(DEPLOY / "gpu-operator-namespace", site)],
        "images": [{"name": "gpucert-controller", "newName": "registry.local/gpucert-controller", "digest": DIGEST}],
    }
    (site / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    docs = kustomize(site)
    settings = one(docs, "ConfigMap", "gpucert-schedule")["data"]
    assert settings == {**literals(), "MAX_NODES": "4"}
    assert yaml.safe_load(one(docs, "ConfigMap", "gpucert-spec")["data"]["spec.yaml"])["metadata"]["name"] == "site-a"
    cron_pod = one(docs, "CronJob", "gpucert-recertify")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    metrics_pod = one(docs, "Deployment", "gpucert-metrics")["spec"]["template"]["spec"]
    assert {container(p)["image"] for p in (cron_pod, metrics_pod)} == {f"registry.local/gpucert-controller@{DIGEST}"}
    args = cli._parser().parse_args(expand(container(cron_pod)["args"], settings))
    assert args.max_nodes == 4
    # the GPU Operator's namespace is a setting (OpenShift's is nvidia-gpu-operator): configure reads pods there
    for kind in ("Role", "RoleBinding"):
        assert one(docs, kind, "gpucert-configure")["metadata"]["namespace"] == "nvidia-gpu-operator"
    for doc in docs:
        validate(doc)


def test_the_controller_image_holds_a_checkout_gpucert_can_run_its_suites_from() -> None:
    steps = instructions(DEPLOY / "controller.Dockerfile")
    copied = {rest.split()[0] for word, rest in steps if word == "COPY"}
    copied |= {p for word, rest in steps if word == "COPY" for p in rest.split()[:-1]}
    for needed in ("conftest.py", "pyproject.toml", "src", "suites", "fixtures", "baselines"):
        assert needed in copied, needed
    assert "." not in copied, "the whole checkout (a signing key in keys/, a .venv) never goes into the image"
    run = " ".join(rest for word, rest in steps if word == "RUN")
    assert "pip install -e /opt/gpucert" in run  # project_root() is the checkout the package runs from
    user = next(rest for word, rest in steps if word == "USER")
    assert user.split(":")[0] not in ("0", "root")
