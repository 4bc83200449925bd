"""Run every gpucert probe on this machine's GPUs and print one table, with PyTorch references from the same run.

    python benchmarks/gpu_check.py                  # quick profile, all GPUs, all probes but DCGM
    python benchmarks/gpu_check.py --device numpy   # the same path on the CPU (no GPU needed; figures mean nothing)

Targets (issue 5, on an H200): copy bandwidth >= 90% of torch's copy_, bf16 GEMM >= 90% of torch.matmul, the
repetition spread (CV) of each probe under 2%, and the whole quick profile under 60 s. Exit 0 when all are met.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from gpucert.probes.runner import ProbePlan, run_plan
from gpucert.spec import Probe
from gpucert.targets.local import PROFILES

TARGET_RATIO, TARGET_CV, TARGET_S = 0.90, 0.02, 60.0


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cupy", "numpy"], default="cupy")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    ap.add_argument("--gpus", type=int, default=None)
    args = ap.parse_args()
    budget, sizes = PROFILES[args.profile]
    probes = [p for p in Probe if p is not Probe.DCGM and (args.device == "cupy" or p is not Probe.HEALTH)]
    plan = ProbePlan(
        run_id="gpu-check",
        node="this-host",
        probes=probes,
        device=args.device,
        gpus=args.gpus,
        budget=budget,
        sizes=sizes,
    )
    t0 = time.perf_counter()
    ev = run_plan(plan)
    wall = time.perf_counter() - t0
    ref = torch_reference(sizes.memory_bytes, sizes.gemm_n) if args.device == "cupy" else "CPU run: no reference"

    ok = True
    print(
        f"gpu_check: {len(ev.gpus)} device(s): {', '.join(sorted({g.product or '?' for g in ev.gpus}))}; "
        f"driver {ev.system.driver_version}, CUDA {ev.system.cuda_driver_version}; profile {args.profile}"
    )
    print(f"{'gpu':<5}{'metric':<22}{'median':>12} {'unit':<8}{'CV':>7}{'n':>5}  {'vs reference':<22}")
    for g in ev.gpus:
        for metric, m in sorted(g.measurements.items()):
            med = statistics.median(m.samples)
            spread = cv(m.samples)
            note = ""
            if isinstance(ref, dict) and metric in ref and g.index == 0:
                ratio = med / ref[metric]
                note = f"{ratio:.1%} of torch {ref[metric]:.4g}"
                ok = ok and ratio >= TARGET_RATIO
            ok = ok and spread < TARGET_CV
            flag = "" if spread < TARGET_CV else "  CV over 2%"
            print(f"{g.index:<5}{metric:<22}{med:>12.4g} {m.unit:<8}{spread:>7.2%}{len(m.samples):>5}  {note}{flag}")
        if g.health is not None:
            h = g.health
            print(
                f"{g.index:<5}{'health':<22} ECC unc {h.ecc.volatile_uncorrected}, remap failure "
                f"{h.remapped_rows.failure}, PCIe Gen{h.pcie.current_generation} x{h.pcie.current_width} "
                f"(max Gen{h.pcie.max_generation}), reasons 0x{h.clock_event_reasons or 0:x}, "
                f"{h.temperature_c} °C, {h.power_w} W / {h.power_limit_w} W"
            )
    if ev.p2p is not None and ev.p2p.pairs:
        meds = [statistics.median(p.samples) for p in ev.p2p.pairs]
        print(
            f"p2p   {len(meds)} pairs: median {statistics.median(meds):.4g} GB/s, min {min(meds):.4g}, "
            f"peer access {sum(p.peer_access for p in ev.p2p.pairs)}/{len(meds)}"
        )
    if ev.nccl is not None:
        top = max(ev.nccl.points, key=lambda p: p.size_bytes)
        print(
            f"nccl  all-reduce {ev.nccl.ranks} ranks: busbw {statistics.median(top.busbw):.4g} GB/s at "
            f"{top.size_bytes >> 20} MiB, correct {ev.nccl.correct}"
        )
    for e in ev.errors:
        print(f"{'skipped' if e.unavailable else 'error'} {e.probe}: {e.message}")
    if isinstance(ref, str):
        print(f"reference: {ref}")
    print(f"quick profile wall time {wall:.1f} s (target under {TARGET_S:.0f} s)")
    ok = ok and wall < TARGET_S and not [e for e in ev.errors if not e.unavailable]
    print("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
