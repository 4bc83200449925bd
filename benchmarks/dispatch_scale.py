"""The kubernetes target's dispatch path at fleet scale: API requests per node, watches, time and controller memory.

    python benchmarks/dispatch_scale.py [--nodes 256 1024 4096] [--max-parallel 32]
    python benchmarks/dispatch_scale.py --smoke      # 16 and 32 nodes in one process; asserts the per-node cost
    python benchmarks/dispatch_scale.py --nodes 1024 --fail-rate 0.02   # a flaky API server: 2% of node requests 503

Each size plans and measures a fleet the way `gpucert certify` does on a kubernetes target (runner.prepare: list
the nodes, the admission dry run, the run's ConfigMap, one probe Job per node, the watch, each pod's log, the
Jobs' deletion, the final sweep), with the real `kubernetes` client against an in-process fake API
(dispatch_fake.py) whose kubelet answers at once: each pod succeeds with the recorded evidence of a simulated
H100 node, so what is timed is the controller and the API round trips, not probes.

The controller runs in a child process per size, so its peak RSS is its own (the fake API stays in this one);
`--smoke` keeps both in one process to stay fast, and asserts what the issue asks: the requests a node adds are
the same at both sizes (create, one log read, delete), with one watch per run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from dispatch_fake import FastFakeApi, gpu_node, serve

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "@@gpucert-bench-node@@"
PER_NODE = (("create", "jobs"), ("get", "pods/log"), ("delete", "jobs"))


def evidence_logs(count: int = 4) -> list[str]:
    """The probe pod's log of `count` simulated clean H100 nodes, with a placeholder for the node's name."""
    from gpucert.measure.targets import open_target
    from gpucert.measure.targets.base import MeasurePlan
    from gpucert.spec.cluster import load_spec

    spec = load_spec(ROOT / "examples" / "clean.yaml")
    target: Any = open_target(spec)
    plan = MeasurePlan("bench", tuple(spec.certify.probes), spec.certify.dcgm.level)
    out = []
    for name in list(target.names)[:count]:
        ev = target.measure_node(name, plan).model_copy(update={"node": PLACEHOLDER, "target": "kubernetes"})
        out.append(ev.model_dump_json(by_alias=True))
    return out


def spec_doc(nodes: int, max_parallel: int) -> dict[str, Any]:
    return {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "ClusterSpec",
        "metadata": {"name": "dispatch-scale"},
        "target": {
            "kind": "kubernetes",
            "context": "bench",
            "namespace": "gpucert",
            "maxParallel": max_parallel,
            "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
        },
        "expect": {"nodes": nodes, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
        "certify": {
            "baseline": str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"),
            "probes": ["health", "dcgm", "memory", "compute", "pcie", "p2p", "nccl"],
        },
    }


def kubeconfig(path: Path, endpoint: str) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": endpoint}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
    }
    path.write_text(yaml.safe_dump(doc))


def controller(spec_path: Path, reports: Path) -> dict[str, Any]:
    """What `gpucert certify` does before its evaluation: plan and measure (no preflight, no pytest)."""
    from gpucert.plan import run as runner
    from gpucert.spec.cluster import load_spec

    spec = load_spec(spec_path)
    t0 = time.perf_counter()
    folder = runner.prepare(spec, reports, runner.Mode.MEASURE)
    seconds = time.perf_counter() - t0
    collected = sum(1 for p in folder.evidence_dir.glob("*.json") if json.loads(p.read_text()).get("collected"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "collected": collected, "rss_mib": rss}


def run_size(
    nodes: int, max_parallel: int, logs: list[str], *, in_process: bool, fail_rate: float = 0.0
) -> dict[str, Any]:
    from gpucert.measure.probes.framing import frame

    names = [f"gpu-{i:05d}" for i in range(nodes)]
    index = {n: i for i, n in enumerate(names)}

    def log_of(node: str) -> str:
        return "probe: starting\n" + frame(logs[index[node] % len(logs)].replace(PLACEHOLDER, node))

    api = FastFakeApi([gpu_node(n) for n in names], log_of, fail_rate)
    server, url = serve(api)
    try:
        with tempfile.TemporaryDirectory(prefix="dispatch-scale-") as tmp:
            work = Path(tmp)
            kubeconfig(work / "kubeconfig", url)
            (work / "spec.yaml").write_text(yaml.safe_dump(spec_doc(nodes, max_parallel)))
            env = {**os.environ, "KUBECONFIG": str(work / "kubeconfig")}
            if in_process:
                before = os.environ.get("KUBECONFIG")
                os.environ["KUBECONFIG"] = env["KUBECONFIG"]
                try:
                    result = controller(work / "spec.yaml", work / "reports")
                finally:
                    os.environ.pop("KUBECONFIG") if before is None else os.environ.update(KUBECONFIG=before)
            else:
                cmd = [sys.executable, __file__, "--controller", str(work / "spec.yaml"), str(work / "reports")]
                done = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)
                if done.returncode == 0:
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                else:  # the run stopped (it fails closed): what it said
                    said = (done.stderr.strip().splitlines() or ["?"])[-1]
                    result = {"seconds": 0.0, "collected": 0, "rss_mib": 0.0, "stopped": said}
    finally:
        server.shutdown()
    dispatch = api.jobs_span[-1] - api.jobs_span[0] if api.jobs_span else 0.0
    return {
        **result,
        "failed": api.failed,
        "nodes": nodes,
        "requests": api.requests,
        "max_watches_open": api.max_watches_open,
        "dispatch": dispatch,
    }


def row(r: dict[str, Any]) -> str:
    n, req = r["nodes"], r["requests"]
    total = sum(req.values())
    per = " / ".join(f"{req[k] / n:.2f}" for k in PER_NODE)
    return (
        f"| {n:,} | {per} | {req['watch', 'pods']} | {r['max_watches_open']} | {total:,} | {total / n:.3f} | "
        f"{r['seconds']:.1f} s | {r['dispatch']:.1f} s | {r['dispatch'] / n * 1000:.1f} ms | {r['rss_mib']:.0f} MiB |"
    )


def faults(r: dict[str, Any]) -> str:
    """What a flaky API server cost: its 503s, the requests, the nodes collected, and why the run stopped if it did."""
    n, failed = r["nodes"], sum(r["failed"].values())
    total = sum(r["requests"].values())
    stopped = f"; the run stopped: {r['stopped']}" if "stopped" in r else ""
    return (
        f"  {failed:,} requests answered 503; {total:,} requests in all ({total / n:.3f} a node); "
        f"{r['collected']:,} of {n:,} nodes collected{stopped}"
    )


HEADER = (
    "| nodes | per node: create Job / read log / delete Job | watches | most open at once | requests | per node | "
    "plan and measure | dispatch and collect | per node | controller peak RSS |\n"
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def smoke(max_parallel: int) -> int:
    """16 and 32 nodes: every node measured, and the requests a node adds are the same at both sizes."""
    logs = evidence_logs()
    results = [run_size(n, max_parallel, logs, in_process=True) for n in (16, 32)]
    print(HEADER)
    for r in results:
        print(row(r))
        assert r["collected"] == r["nodes"], r
        for key in PER_NODE:
            assert r["requests"][key] == r["nodes"], (key, r["requests"])
        assert r["requests"]["watch", "pods"] == 1, ("one watch per run", r["requests"])
        # evidence stays off etcd: the run's one ConfigMap holds the probe plan; nodes' evidence comes in pod logs
        assert r["requests"]["create", "configmaps"] == 1, r["requests"]
    a, b = results
    extra: Counter[tuple[str, str]] = b["requests"] - a["requests"]
    per_node = {k: v / (b["nodes"] - a["nodes"]) for k, v in extra.items()}
    assert per_node == {k: 1.0 for k in PER_NODE}, ("what a node adds", per_node)
    print(f"each node adds: {', '.join(f'{v:g} {verb} {res}' for (verb, res), v in sorted(per_node.items()))}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--max-parallel", type=int, default=32)
    ap.add_argument("--smoke", action="store_true", help="16 and 32 nodes in one process, with assertions")
    ap.add_argument("--fail-rate", type=float, default=0.0, help="answer this share of node requests with 503")
    ap.add_argument("--controller", nargs=2, metavar=("SPEC", "REPORTS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.controller:
        print(json.dumps(controller(Path(args.controller[0]), Path(args.controller[1]))))
        return 0
    if args.smoke:
        return smoke(args.max_parallel)
    logs = evidence_logs()
    print(HEADER, flush=True)
    for n in args.nodes:
        r = run_size(n, args.max_parallel, logs, in_process=False, fail_rate=args.fail_rate)
        print(row(r), flush=True)
        if args.fail_rate:
            print(faults(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
