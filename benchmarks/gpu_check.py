"""Run gpucert's preflight, then every probe, on this machine's GPUs and print one table (PyTorch references beside).

The one prepared script for the first GPU the project is given time on: the preflight's rows come first, so a
machine that cannot run the probes says which step failed and the fix before anything else.

    python benchmarks/gpu_check.py                  # quick profile, all GPUs, every probe (DCGM level 1 if dcgmi)
    python benchmarks/gpu_check.py --device numpy   # the same path on the CPU (no GPU needed; figures mean nothing)
    python benchmarks/gpu_check.py --budget         # the quick profile's time budget on an 8-GPU node, worked out

Targets (issue 5, on an H200): copy bandwidth >= 90% of torch's copy_, bf16 GEMM >= 90% of torch.matmul, the
repetition spread (CV) of each probe under 2%, and the whole quick profile under 60 s. Exit 0 when all are met.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gpucert.measure.evidence import Health, NodeEvidence
from gpucert.measure.probes import nccl
from gpucert.measure.probes.health import NVLINK_ERROR_COUNTERS
from gpucert.measure.probes.runner import BudgetSpec, DcgmPlan, ProbePlan, run_plan
from gpucert.measure.targets.local import PROFILES
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe

TARGET_RATIO, TARGET_CV, TARGET_S = 0.90, 0.02, 60.0
ROOT = Path(__file__).resolve().parents[1]

# What the arithmetic assumes besides the baseline's rates (conservative, from CUDA/NCCL start-up on HGX nodes):
START_GPU_S = 0.5  # a CUDA context, a cuBLAS handle and the GEMM operands, per GPU
START_PROCESS_S = 2.0  # importing CuPy, NVML readings of every GPU, the first and last health pass
NCCL_INIT_S = 5.0  # ncclCommInitAll over 8 GPUs (topology detection, NVLS set-up)
LAUNCH_FLOOR_S = 30e-6  # no collective or copy completes faster than this, whatever its size
L2_BYTES = 50 << 20  # H100/H200 L2: the flush written before each repetition is twice this


def _region_s(rep_s: float, budget: BudgetSpec, flush_s: float) -> float:
    """One `time_region`: warm-up (at least one call, then until warmup_s), then repetitions until measure_s,
    never fewer than min_reps nor more than max_reps, each after an L2 flush."""
    warm = max(rep_s, budget.warmup_s)
    reps = min(budget.max_reps, max(budget.min_reps, math.ceil(budget.measure_s / (rep_s + flush_s))))
    return warm + reps * (rep_s + flush_s)


def budget_estimate(
    gpus: int = 8, profile: str = "quick", sku: str = "H200-SXM-141GB", samples: int = 0
) -> list[tuple[str, float]]:
    """Seconds each part of a profile takes on a node of `gpus` GPUs running at the SKU baseline's figures;
    `samples`: the repetitions the memory, compute and PCIe probes are asked for at least (the plan's
    certify.samples, which raise their min_reps and max_reps as node_run does)."""
    budget, sizes = PROFILES[profile]
    asked = budget.model_copy(
        update={"min_reps": max(budget.min_reps, samples), "max_reps": max(budget.max_reps, samples)}
    )
    rate = {m: b.expected for m, b in load_baseline(ROOT / "baselines" / "gpus" / f"{sku}.yaml").metrics.items()}
    flush_s = 2 * L2_BYTES / (rate["memory.bandwidth"] * 1e9)
    gemm_flop = 2 * sizes.gemm_n**3
    per_gpu = [
        ("memory.bandwidth", _region_s(2 * sizes.memory_bytes / (rate["memory.bandwidth"] * 1e9), asked, flush_s)),
        *(
            (f"compute.gemm.{t}", _region_s(gemm_flop / (rate[f"compute.gemm.{t}"] * 1e12), asked, flush_s))
            for t in ("fp16", "bf16", "tf32", "fp32", "fp64")
        ),
        *(
            (f"pcie.{d}", _region_s(sizes.pcie_bytes / (rate[f"pcie.{d}"] * 1e9), asked, flush_s))
            for d in ("h2d", "d2h")
        ),
    ]
    rows = [(f"{gpus} GPUs x {name}", gpus * s) for name, s in per_gpu]
    # every GPU at once, each direction: two GPUs behind one switch uplink get half of it each
    together = [_region_s(sizes.pcie_bytes / (rate[f"pcie.{d}"] / 2 * 1e9), asked, 0.0) for d in ("h2d", "d2h")]
    rows.append((f"pcie, {gpus} GPUs at once, h2d and d2h", sum(together)))
    pairs = gpus * (gpus - 1)
    rows.append(
        (
            f"p2p, {pairs} ordered pairs",
            pairs * _region_s(sizes.p2p_bytes / (rate["p2p.bandwidth"] * 1e9), budget, flush_s),
        )
    )
    rows.append(
        (
            f"p2p both ways, {pairs // 2} pairs",
            pairs // 2 * _region_s(sizes.p2p_bytes / (rate["p2p.bandwidth"] * 1e9), budget, 0.0),
        )
    )
    algbw = rate["nccl.all_reduce"] / nccl.busbw_factor(gpus) * 1e9
    # each repetition is nccl.DEFAULT_ITERS all-reduces back to back (as nccl-tests times them)
    sweep = sum(
        _region_s(nccl.DEFAULT_ITERS * max(LAUNCH_FLOOR_S, size / algbw), budget, 0.0) for size in sizes.nccl_sizes
    )
    rows.append((f"nccl sweep, {len(sizes.nccl_sizes)} sizes to {max(sizes.nccl_sizes) >> 30} GiB", sweep))
    rows.append(("nccl communicator set-up", NCCL_INIT_S))
    rows.append((f"start-up: process, then {gpus} GPUs", START_PROCESS_S + gpus * START_GPU_S))
    return rows


def cv(samples: list[float]) -> float:
    return statistics.pstdev(samples) / statistics.fmean(samples) if len(samples) > 1 else 0.0


def torch_reference(nbytes: int, n: int, reps: int = 20) -> dict[str, float] | str:
    """torch copy_ (read+write bytes) and bf16 matmul (2n³) on GPU 0, timed with CUDA events, median of reps."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed: no reference"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device: no reference"
    dev = torch.device("cuda:0")
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    a = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=dev)

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        return statistics.median(times)

    copy_s = timed(lambda: dst.copy_(src))
    mm_s = timed(lambda: torch.matmul(a, b))
    return {"memory.bandwidth": 2 * nbytes / copy_s / 1e9, "compute.gemm.bf16": 2 * n**3 / mm_s / 1e12}


Row = tuple[str, str, str, str, str, str, str]  # part, gpu, what, value, unit, CV / n, note


def preflight_rows(ev: NodeEvidence) -> list[Row]:
    """The preflight's steps, first: on a new machine the first failure and its fix are what matters."""
    rows: list[Row] = [
        ("preflight", "", s.step, "ok" if s.ok else "FAILED", "", "", s.detail if s.ok else f"{s.detail}; fix: {s.fix}")
        for s in ev.preflight
    ]
    return rows or [("preflight", "", "-", "none recorded", "", "", "")]


def measurement_rows(ev: NodeEvidence, ref: dict[str, float] | str) -> tuple[list[Row], bool]:
    """Each GPU's measurements (median, CV, count, against torch on GPU 0) and health; False when a target is missed."""
    rows, ok = [], True
    for g in ev.gpus:
        for metric, m in sorted(g.measurements.items()):
            med, spread = statistics.median(m.samples), cv(m.samples)
            note = ""
            if isinstance(ref, dict) and metric in ref and g.index == 0:
                ratio = med / ref[metric]
                note = f"{ratio:.1%} of torch {ref[metric]:.4g}"
                ok = ok and ratio >= TARGET_RATIO
            ok = ok and spread < TARGET_CV
            note += "" if spread < TARGET_CV else "  CV over 2%"
            rows.append(("probe", str(g.index), metric, f"{med:.4g}", m.unit, f"{spread:.2%} n={len(m.samples)}", note))
        if g.health is not None:
            h = g.health
            rows.append(
                (
                    "health",
                    str(g.index),
                    "nvml",
                    f"Gen{h.pcie.current_generation} x{h.pcie.current_width}",
                    "",
                    "",
                    f"max Gen{h.pcie.max_generation}; ECC unc {h.ecc.volatile_uncorrected}; remap failure "
                    f"{h.remapped_rows.failure}; reasons 0x{h.clock_event_reasons or 0:x}; {h.temperature_c} °C; "
                    f"{h.power_w} W / {h.power_limit_w} W",
                )
            )
            rows.append(("health", str(g.index), "nvlink, throttle", "", "", "", _links_and_throttling(h)))
    return rows, ok


def _links_and_throttling(h: Health) -> str:
    """What health.nvlink and health.throttle will judge: links active, link errors and throttling under load."""
    links = h.nvlink_active or []
    e = h.nvlink_errors
    if e is None:
        errors = "link errors not read"
    else:
        counts = {c: sum(link.get(c, 0) for link in e.links.values()) for c in NVLINK_ERROR_COUNTERS}
        refused = f", refused {len(e.unavailable)}" if e.unavailable else ""
        errors = f"link errors over {e.seconds:.3g} s {counts}{refused}"
    seconds = sum(w.seconds for w in h.throttle_under_load)
    held: dict[str, int] = {}
    for w in h.throttle_under_load:
        for reason, ns in w.reasons_ns.items():
            held[reason] = held.get(reason, 0) + ns
    shares = ", ".join(f"{r} {ns / 1e9 / seconds:.2%}" for r, ns in sorted(held.items())) if seconds > 0 else "none"
    return f"{sum(1 for x in links if x)}/{len(links)} links active, {errors}; throttled under load: {shares}"


def node_rows(ev: NodeEvidence) -> list[Row]:
    """P2P, the all-reduce, DCGM and every error, after the GPUs."""
    rows: list[Row] = []
    if ev.p2p is not None and ev.p2p.pairs:
        meds = [statistics.median(p.samples) for p in ev.p2p.pairs if p.samples]
        access = sum(p.peer_access for p in ev.p2p.pairs)
        value = f"{statistics.median(meds):.4g}" if meds else "-"
        note = f"min {min(meds):.4g}; peer access {access}/{len(ev.p2p.pairs)}" if meds else "no pair measured"
        rows.append(("p2p", "all", f"{len(ev.p2p.pairs)} pairs", value, "GB/s", "", note))
    if ev.nccl is not None and ev.nccl.points:
        top = max(ev.nccl.points, key=lambda p: p.size_bytes)
        note = f"busbw at {top.size_bytes >> 20} MiB; correct {ev.nccl.correct}"
        rows.append(
            (
                "nccl",
                "all",
                f"all-reduce {ev.nccl.ranks} ranks",
                f"{statistics.median(top.busbw):.4g}",
                "GB/s",
                "",
                note,
            )
        )
    if ev.dcgm is not None:
        failed = sorted({t for t, r in ev.dcgm.results.items() for g in r.gpus.values() if g.status == "Fail"})
        note = ev.dcgm.runtime_error or (f"failed: {', '.join(failed)}" if failed else "")
        rows.append(("dcgm", "all", f"diag -r {ev.dcgm.level}", f"{len(ev.dcgm.results)} tests", "", "", note))
    rows += [
        (
            "skipped" if e.unavailable else "error",
            str(e.gpu if e.gpu is not None else ""),
            e.probe,
            "",
            "",
            "",
            e.message,
        )
        for e in ev.errors
    ]
    return rows


def print_table(rows: list[Row]) -> None:
    head: Row = ("part", "gpu", "what", "value", "unit", "CV / n", "note")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(6)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r[:6], widths, strict=True)) + "  " + r[6])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cupy", "numpy"], default="cupy")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument(
        "--dcgm",
        type=int,
        choices=[0, 1, 2, 3, 4],
        default=None,
        help="DCGM level (0: none; default: 1 where dcgmi is installed)",
    )
    ap.add_argument("--budget", action="store_true", help="print the profile's time budget on 8 GPUs and exit")
    ap.add_argument("--samples", type=int, default=0, help="--budget: memory, compute and PCIe samples at least")
    args = ap.parse_args()
    if args.budget:
        rows = budget_estimate(args.gpus or 8, args.profile, samples=args.samples)
        for what, seconds in rows:
            print(f"{what:<40}{seconds:>7.1f} s")
        total = sum(s for _, s in rows)
        target = f" (target under {TARGET_S:.0f} s)" if args.profile == "quick" else ""
        print(f"{'total':<40}{total:>7.1f} s{target}")
        return 0 if total < TARGET_S or args.profile != "quick" else 1
    budget, sizes = PROFILES[args.profile]
    level = args.dcgm if args.dcgm is not None else (1 if shutil.which("dcgmi") else 0)
    probes = [p for p in Probe if (p is not Probe.DCGM or level) and (args.device == "cupy" or p is not Probe.HEALTH)]
    plan = ProbePlan(
        run_id="gpu-check",
        node="this-host",
        probes=probes,
        device=args.device,
        gpus=args.gpus,
        budget=budget,
        sizes=sizes,
        dcgm=DcgmPlan(level=level or 1),
    )
    t0 = time.perf_counter()
    ev = run_plan(plan)  # the preflight first: when it fails, no probe runs and its rows say why
    wall = time.perf_counter() - t0
    on_gpu = args.device == "cupy" and ev.collected
    ref = torch_reference(sizes.memory_bytes, sizes.gemm_n) if on_gpu else "no GPU run: no reference"
    print(
        f"gpu_check: {len(ev.gpus)} device(s): {', '.join(sorted({g.product or '?' for g in ev.gpus})) or '-'}; "
        f"driver {ev.system.driver_version}, CUDA {ev.system.cuda_driver_version}; profile {args.profile}; "
        f"DCGM {f'level {level}' if level else 'not run (no dcgmi; --dcgm LEVEL to ask)'}"
    )
    measured, ok = measurement_rows(ev, ref)
    print_table([*preflight_rows(ev), *measured, *node_rows(ev)])
    if isinstance(ref, str):
        print(f"reference: {ref}")
    print(f"{args.profile} profile wall time {wall:.1f} s (target under {TARGET_S:.0f} s)")
    ok = ok and ev.collected and wall < TARGET_S and not [e for e in ev.errors if not e.unavailable]
    print("RESULT", "PASS" if ok else "FAIL" if ev.collected else "PREFLIGHT FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
