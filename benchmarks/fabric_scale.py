"""The fabric stage's cost at fleet scale: rounds of the pairing schedule x the time of one round, what a round
asks of the API server, and the controller's cost of isolating slow links over every pair of every rail.

    python benchmarks/fabric_scale.py [--nodes 64 256 1024] [--rails 8] [--per-round 20] [--request-ms 10]
                                      [--fabric-parallel 32] [--in-flight 16] [--retest 3]

A round's pairs are apart (each node in at most one pair: plan/pairs.py), every rail of a pair runs at once (each
rail its own NIC), and on Kubernetes every pair of a round runs at once (measure/targets/kubernetes/target.py
measure_fabrics; `target.fabricParallel` may bound it), so the stage takes rounds x the time of one round whatever
the number of pairs. A round's time is an input (`--per-round`, seconds: the pods' start, ib_write_bw's connection
setup and its timed repetitions) plus its API requests (REQUESTS_PER_PAIR each, `--request-ms` each): the pairs'
creates and the cleanup's deletes go `--in-flight` at once (measure/targets/kubernetes/runs.py IN_FLIGHT; a pair's
three creates in order, the deletes kind by kind), process 0's log reads one after another (the pod watch reads
each as its pod ends), so `request_time` counts the requests' round trips one after another. With
`--fabric-parallel` set (nodes at once), a round runs in ceil(pairs / (fabricParallel // 2)) batches one after
another, so the stage grows with pairs: both are printed. The schedule and the isolation are measured.

`--evidence`: the pairs' evidence documents (benchmarks/fabric_evidence.py): bytes written per round and in all,
one document a round against one pairs.json rewritten after every round, and the peak RSS of reading them.

`--retest K`: a re-test of the fleet with K nodes measured again (spread over it), against the full run: the pairs
it measures (plan/pairs.py `retest_rounds`: each of the K against RETEST_PEERS carried peers) and those it carries,
its rounds and stage time, and the controller's cost of holding one rail's pairs (carried and new) to the
re-test's schedule (evaluate/rules/fabric_schedule.py), which must find nothing missing.
"""

from __future__ import annotations

import argparse
import random
import resource
import time

import fabric_evidence

from gpucert.evaluate.rules.fabric_isolation import PairFigure, isolate_rail
from gpucert.evaluate.rules.fabric_schedule import check_schedule
from gpucert.measure.evidence_fabric import RdmaBandwidth
from gpucert.plan.pairs import pair_count, retest_rounds, round_count, rounds


def _hms(seconds: float) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


# the requests a pair costs the controller (tests/integration/test_fabric_round_whole.py counts them against the
# fake API): its ConfigMap, Service and Job created; process 0's log read; at the cleanup its Job, two pods,
# Service and ConfigMap deleted. A batch adds about ten (the admission dry run, the watch, the cleanup's lists)
REQUESTS_PER_PAIR = 3 + 1 + 5


def batches(nodes: int, fabric_parallel: int) -> int:
    """How many batches one round of `nodes` runs in, at most `fabric_parallel` nodes busy at once
    (measure/targets/kubernetes/target.py measure_fabrics)."""
    pairs = nodes // 2
    return max(1, -(-pairs // max(1, fabric_parallel // 2)))


def request_time(pairs: int, in_flight: int) -> int:
    """Round trips one after another for a round of `pairs`: three creates a pair in waves of `in_flight` pairs, one
    log read a pair, and the deletes kind by kind (Jobs, two pods a pair, Services, ConfigMaps) in waves."""
    waves = -(-pairs // in_flight)
    return 3 * waves + pairs + 3 * waves + -(-2 * pairs // in_flight)


def _port(node: str, rail: int) -> str:
    return f"mlx5_{rail}/1"


def retest(sizes: list[int], again: int, args: argparse.Namespace) -> None:
    """The re-test's fabric stage against the full run's, per fleet size."""
    req_s = args.request_ms / 1000
    print(
        f"\n| nodes | full run: rounds, pairs | re-test of {again}: rounds | pairs measured | pairs carried "
        "| measured / full | stage, full | stage, re-test | schedule | schedule check, one rail |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        nodes = [f"node-{i:04d}" for i in range(n)]
        repaired = set(nodes[n // (2 * again) :: max(1, n // again)][:again])
        carried = frozenset(x for x in nodes if x not in repaired)
        t0 = time.perf_counter()
        schedule = retest_rounds(nodes, carried)
        t_schedule = time.perf_counter() - t0
        measured = [p for r in schedule for p in r]
        kept = [p for r in rounds(sorted(carried, key=nodes.index)) for p in r]
        records = [
            ([a, b], RdmaBandwidth(rail=0, client=a, server=b, client_hca="mlx5_0/1", server_hca="mlx5_0/1"))
            for a, b in kept + measured
        ]
        t0 = time.perf_counter()
        found = check_schedule(records, "pool", nodes, set(nodes), 1, _port, carried)
        t_check = time.perf_counter() - t0
        assert not found.problems, list(found.problems.items())[:3]
        full = round_count(n) * (args.per_round + request_time(n // 2, args.in_flight) * req_s)
        mine = sum(args.per_round + request_time(len(r), args.in_flight) * req_s for r in schedule)
        print(
            f"| {n} | {round_count(n)}, {pair_count(n):,} | {len(schedule)} | {len(measured)} | {len(kept):,} "
            f"| {100 * len(measured) / pair_count(n):.2g}% | {_hms(full)} | {_hms(mine)} | {t_schedule:.3f} s "
            f"| {t_check:.2f} s |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--per-round", type=float, default=20.0, help="seconds one batch of pairs takes on the cluster")
    ap.add_argument("--request-ms", type=float, default=10.0, help="milliseconds one API request takes")
    ap.add_argument("--fabric-parallel", type=int, default=32, help="a target.fabricParallel to compare (nodes)")
    ap.add_argument("--in-flight", type=int, default=16, help="API requests of a round in flight at once")
    ap.add_argument("--retest", type=int, metavar="K", help="a re-test of K nodes against the full run, only")
    ap.add_argument("--evidence", action="store_true", help="the pairs' evidence: bytes written, reading's peak RSS")
    ap.add_argument("--read", choices=("none", "now", "both"), default="now", help="with --evidence: what to read")
    args = ap.parse_args()
    if args.evidence:
        fabric_evidence.main(args.nodes, read_old=args.read == "both", read_new=args.read != "none")
        return 0
    if args.retest:
        retest(args.nodes, args.retest, args)
        print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        return 0
    req_s = args.request_ms / 1000
    head = f"stage, each round whole ({args.per_round:g} s + its requests, {args.in_flight} in flight)"
    serial = "stage, requests one at a time (before)"
    cap = f"stage at fabricParallel {args.fabric_parallel}"
    print(
        f"| nodes | rounds | pairs per rail | requests a round | round trips a round | {head} | {serial} | {cap} "
        "| schedule | isolation, one clean rail | one faulty rail |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.nodes:
        nodes = [f"node-{i:04d}" for i in range(n)]
        racks = {node: f"rack-{i // 32}" for i, node in enumerate(nodes)}
        t0 = time.perf_counter()
        schedule = rounds(nodes)
        t_schedule = time.perf_counter() - t0
        assert len(schedule) == round_count(n)
        rng = random.Random(n)
        pairs = [PairFigure(0, a, b, 385 * (1 + rng.gauss(0, 0.01))) for r in schedule for a, b in r]
        assert len(pairs) == pair_count(n)
        t0 = time.perf_counter()
        isolate_rail(0, pairs, 360.0, nodes, racks)
        t_isolate = time.perf_counter() - t0
        # the worst case: a slow link between two racks and a bad cable, so every node has slow pairs to weigh
        bad = {racks[nodes[0]], racks[nodes[-1]]}
        faulty = [
            PairFigure(0, p.a, p.b, (p.gbps or 0) * (0.6 if {racks[p.a], racks[p.b]} == bad else 1.0)) for p in pairs
        ]
        faulty = [PairFigure(0, p.a, p.b, (p.gbps or 0) * (0.5 if nodes[1] in (p.a, p.b) else 1.0)) for p in faulty]
        t0 = time.perf_counter()
        iso = isolate_rail(0, faulty, 360.0, nodes, racks)
        t_faulty = time.perf_counter() - t0
        assert list(iso.racks) == [tuple(sorted(bad))], iso.racks
        assert list(iso.nodes) == [nodes[1]], iso.nodes
        requests = REQUESTS_PER_PAIR * (n // 2)
        trips = request_time(n // 2, args.in_flight)
        stage = round_count(n) * (args.per_round + trips * req_s)
        before = round_count(n) * (args.per_round + requests * req_s)
        capped = round_count(n) * (batches(n, args.fabric_parallel) * args.per_round + trips * req_s)
        print(
            f"| {n} | {round_count(n)} | {pair_count(n):,} | {requests:,} | {trips:,} | {_hms(stage)} | "
            f"{_hms(before)} | {_hms(capped)} | "
            f"{t_schedule:.2f} s | "
            f"{t_isolate:.2f} s | {t_faulty:.2f} s |"
        )
    print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
