"""A pair's fabric, measured from inside its two pods (the pair's Indexed Job): the RDMA write bandwidth of every
rail from GPU memory, and each node's port counters around the pair's traffic.

Process 0 runs `ib_write_bw` servers (its address is the rendezvous host, `<job>-0.<service>`), process 1 the
clients, one per rail at once on their own TCP ports (perftest's 18515 + rail), from the GPU nearest each rail's
NIC (`--use_cuda`). Each repetition is one run of every rail; its `BW average` is a sample. The two processes keep
in step over the rendezvous connection: process 0 says when its servers listen, process 1 answers with its
clients' output, which process 0 parses (fabric_perftest.py) into the pair's evidence. Rail i is the i-th port of
each node in HCA order, the same rail on both nodes. Imports nothing of the harness but the evidence models.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gpucert.measure.evidence_fabric import RELATIONS, CounterWindow, NodeFabric, RdmaBandwidth, port_key
from gpucert.measure.probes.fabric_perftest import parse_ib_write_bw
from gpucert.measure.probes.fabric_sysfs import CounterSnapshot, counter_window, read_counters, read_node_fabric
from gpucert.measure.probes.probe_plan import FabricRails

__all__ = [
    "PERFTEST_PORT",
    "PairPlan",
    "Rail",
    "command",
    "measure_pair",
    "rails_of",
    "rdma_of",
    "run_rails",
]

PERFTEST_PORT = 18515  # perftest's default TCP port for the exchange of QP details; rail r uses + r
Launch = Callable[[list[str]], "subprocess.Popen[str]"]


@dataclass(frozen=True, slots=True)
class Rail:
    index: int
    hca: str
    port: int
    gpu: int | None  # the GPU nearest the NIC (PIX, then PXB, ...), None: no relation read (host memory then)
    gid_index: int | None  # RoCE: the RoCE v2 GID to use


@dataclass(frozen=True, slots=True)
class PairPlan:
    reps: int = 5
    duration_s: int = 2  # each run's measuring time (-D)
    size: int = 1 << 20  # bytes a message (-s)
    timeout_s: float = 120.0  # one repetition of every rail, connection and teardown included


def _natural(name: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def rails_of(fabric: NodeFabric, select: FabricRails | None = None) -> list[Rail]:
    """The node's rails as the pool's fabric section names them (`select`; the evaluator reads them the same way):
    its HCAs in rail order, else every port of its link layer in natural order (every port without `select`).
    Each with the GPU nearest its NIC and (RoCE) its RoCE v2 GID; a named HCA the node lacks has no rail here."""
    if select is not None and select.hcas is not None:
        named = [fabric.port(h, select.port) for h in select.hcas]
        ports = [(i, p) for i, p in enumerate(named) if p is not None]
    else:
        chosen = [
            p
            for p in fabric.ports
            if select is None or (p.port == select.port and select.link_layer in (None, p.link_layer))
        ]
        ports = list(enumerate(sorted(chosen, key=lambda q: (_natural(q.hca), q.port))))
    rails = []
    for i, p in ports:
        near = sorted(
            (RELATIONS.index(a.relation), a.gpu) for a in fabric.affinity if a.hca == p.hca and a.relation is not None
        )
        v2 = next((g.index for g in p.gids if g.type == "RoCE v2"), None)
        gid = p.gid_index if p.gid_index is not None else v2 if p.link_layer == "Ethernet" else None
        rails.append(Rail(i, p.hca, p.port, near[0][1] if near else None, gid))
    return rails


def command(rail: Rail, plan: PairPlan, peer: str | None) -> list[str]:
    """`ib_write_bw` for one rail: the server without `peer`, the client with it (perftest 6.29's options: -d
    device, -i port, -p TCP port, -s size, -D seconds, -x GID index, --report_gbits, --use_cuda=<gpu>, -F to go on
    when the CPU frequency cannot be read, as in a container)."""
    cmd = ["ib_write_bw", "-d", rail.hca, "-i", str(rail.port), "-p", str(PERFTEST_PORT + rail.index)]
    cmd += ["-s", str(plan.size), "-D", str(plan.duration_s), "--report_gbits", "-F"]
    if rail.gid_index is not None:
        cmd += ["-x", str(rail.gid_index)]
    if rail.gpu is not None:
        cmd.append(f"--use_cuda={rail.gpu}")
    return [*cmd, peer] if peer else cmd


def _popen(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_rails(
    rails: Sequence[Rail],
    plan: PairPlan,
    peer: str | None,
    launch: Launch = _popen,
    started: Callable[[], None] = lambda: None,
) -> list[str]:
    """One repetition of every rail at once (servers without `peer`); `started` is called once they are launched.
    Each rail's output, or what stopped it (not installed, past the timeout)."""
    procs: list[subprocess.Popen[str] | str] = []
    for rail in rails:
        try:
            procs.append(launch(command(rail, plan, peer)))
        except OSError as exc:
            procs.append(f"ib_write_bw could not start: {exc.strerror or exc}")
    started()
    deadline = time.monotonic() + plan.timeout_s
    out = []
    for p in procs:
        if isinstance(p, str):
            out.append(p)
            continue
        try:
            text, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            out.append(text or "")
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            out.append(f"{text or ''}\nib_write_bw did not finish in {plan.timeout_s:g} s")
    return out


def rdma_of(
    client: str, server: str, rails: Sequence[tuple[Rail, Rail]], runs: Sequence[Sequence[str]], plan: PairPlan
) -> list[RdmaBandwidth]:
    """The pair's evidence: per rail (client's, server's), every repetition's output parsed; a rail that failed in
    any repetition is its error (the samples it did give are kept)."""
    found = []
    for r, (mine, theirs) in enumerate(rails):
        parsed = [parse_ib_write_bw(run[r]) for run in runs]
        rows = [p.largest for p in parsed if p.largest is not None]
        error = next((p.error for p in parsed if p.error is not None), None)
        found.append(
            RdmaBandwidth(
                rail=mine.index,
                client=client,
                server=server,
                client_hca=port_key(mine.hca, mine.port),
                server_hca=port_key(theirs.hca, theirs.port),
                gpu=mine.gpu,
                samples=[row.average_gbps for row in rows],
                peak=[row.peak_gbps for row in rows],
                params={"size": plan.size, "duration_s": plan.duration_s, "reps": plan.reps}
                | ({"perftest": parsed[0].version} if parsed and parsed[0].version else {}),
                error=f"ib_write_bw: {error}" if error else None,
            )
        )
    return found


def rails_json(rails: Sequence[Rail]) -> bytes:
    return json.dumps([asdict(r) for r in rails]).encode()


def rails_from(payload: bytes) -> list[Rail]:
    return [Rail(**r) for r in json.loads(payload)]


def window_of(root: Path, load: str, before: CounterSnapshot) -> CounterWindow:
    """The node's counters from `before` to now."""
    return counter_window(load, before, read_counters(root))


def measure_pair(
    rank: int,
    nodes: tuple[str, str],
    link: tuple[Callable[[bytes], None], Callable[[], bytes]],
    root: Path,
    gpus: Mapping[int, str],
    plan: PairPlan,
    server_host: str,
    launch: Launch = _popen,
    select: FabricRails | None = None,
) -> list[RdmaBandwidth] | None:
    """This process's part of the pair's RDMA per rail (rank 0 the servers, rank 1 the clients); `link` sends to
    and receives from the other process; `gpus`: CUDA ordinal -> PCI address (with CUDA_DEVICE_ORDER=PCI_BUS_ID,
    the ordinal `--use_cuda` takes). Rank 0 returns the pair's evidence, rank 1 None."""
    send, recv = link
    own = rails_of(read_node_fabric(root, gpus), select)
    if rank != 0:
        send(rails_json(own))
        mine, _ = _common(own, rails_from(recv()))
        for _ in range(plan.reps):
            recv()  # the servers were launched
            time.sleep(1.0)  # and listen
            send(json.dumps(run_rails(mine, plan, server_host, launch)).encode())
        return None
    peer = rails_from(recv())
    send(rails_json(own))
    mine, theirs = _common(own, peer)
    runs = []
    for _ in range(plan.reps):
        run_rails(mine, plan, None, launch, started=lambda: send(b"go"))
        runs.append(json.loads(recv()))
    return rdma_of(nodes[1], nodes[0], list(zip(theirs, mine, strict=True)), runs, plan)


def _common(mine: Sequence[Rail], theirs: Sequence[Rail]) -> tuple[list[Rail], list[Rail]]:
    """The rails both nodes have, by rail index, in rail order (a rail one node lacks is its fabric.port's)."""
    a, b = {r.index: r for r in mine}, {r.index: r for r in theirs}
    both = sorted(a.keys() & b.keys())
    return [a[i] for i in both], [b[i] for i in both]
