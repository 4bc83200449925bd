"""The exporter at fleet scale: `gpucert metrics` over the run folder `fleet_scale.py` leaves behind.

    python benchmarks/fleet_scale.py --nodes 1024          # prints "(run folder /tmp/gpucert-fleet-XXXX/reports/RUN)"
    python benchmarks/metrics_scale.py /tmp/gpucert-fleet-XXXX

Three scrapes in one process, as the exporter's Deployment serves them: the first reads every node's evidence (the
ratios to the baseline), the next ones only list the folder. Prints each scrape's time and size, the series per
family, and the peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import Counter
from pathlib import Path

from prometheus_client import generate_latest

from gpucert.fleet.metrics import FleetCollector, registry_for
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import NodeTarget
from gpucert.spec.cluster import load_spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path, help="the folder fleet_scale.py worked in (spec.yaml, reports/)")
    ap.add_argument("--scrapes", type=int, default=3)
    args = ap.parse_args()
    spec = load_spec(args.work / "spec.yaml")
    target = open_target(spec)
    control = target.node_control(args.work / "reports") if isinstance(target, NodeTarget) else None
    registry = registry_for(FleetCollector(args.work / "reports", spec, control))
    text = b""
    for i in range(args.scrapes):
        start = time.perf_counter()
        text = generate_latest(registry)
        print(f"scrape {i + 1}: {time.perf_counter() - start:.2f} s, {len(text) / 2**20:.1f} MiB")
    series = Counter(line.split("{")[0].split(" ")[0] for line in text.decode().splitlines() if line[:1] != "#")
    for name, n in sorted(series.items()):
        print(f"  {name}: {n}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
