"""Health judged as a real GPU node reports it: the PCIe link read under load in every plan with `health`,
throttling per clock-event reason against the baseline's allowance, and `health.nvlink` (links and link errors).

The NVML behaviour relied on is nvidia-ml-py 13.615's (pynvml.py): clock-event reason bits
`nvmlClocksEventReason*` (HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, power brake 0x80; the deprecated
throttle set adds board limit 0x200 and reliability 0x400), cumulative counters in nanoseconds
`NVML_FI_DEV_CLOCKS_EVENT_REASON_*` (269..271) and `NVML_FI_DEV_PERF_POLICY_*` (74..79) with no counter for HW
slowdown, `nvmlDeviceGetNvLinkState(device, link)` returning 0 (inactive) or 1 (active), and
`nvmlDeviceGetNvLinkErrorCounter(device, link, counter)` with `NVML_NVLINK_ERROR_DL_REPLAY` 0, `_RECOVERY` 1,
`_CRC_FLIT` 2, `_CRC_DATA` 3: cumulative per link since the driver loaded, so only their increase over the load
says anything about this run.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.evaluate.rules.health import judge_health, pcie_link, throttle
from gpucert.evaluate.rules.nvlink import nvlink
from gpucert.measure.evidence import Health, NvlinkErrors, PcieLink, ThrottleWindow
from gpucert.measure.probes.device import NumpyDevice
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import load_spec

from .fake_nvml import NVMLError_NotSupported, eight_gpus, fake_nvml

BASELINES = Path(__file__).resolve().parents[2] / "baselines" / "gpus"
H100 = load_baseline(BASELINES / "H100-SXM5-80GB.yaml")
ZERO = {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}


def plan(gpus: int, probes: list[str]) -> ProbePlan:
    return ProbePlan.model_validate(
        {
            "run_id": "r",
            "node": "gpu-07",
            "device": "numpy",
            "gpus": gpus,
            "probes": probes,
            "budget": {"warmup_s": 0, "measure_s": 0.005, "min_reps": 3, "max_reps": 3},
            "sizes": {"memory_bytes": 1 << 16, "gemm_n": 16, "pcie_bytes": 1 << 14, "nccl_sizes": [1 << 12]},
        }
    )


def baseline_with(tmp_path: Path, health: str = "", nvlink: str | None = None) -> Any:
    """The H100 baseline with its health policy's extra lines and its `nvlink` section replaced."""
    text = (BASELINES / "H100-SXM5-80GB.yaml").read_text()
    head, _, rest = text.partition("nvlink:\n")
    _, _, metrics = rest.partition("metrics:\n")
    if health:  # in place of the committed allowance
        start = head.index("  throttleAllowance:")
        head = head[:start] + health + head[head.index("\n", start) :]
    body = head + (nvlink or "") + "metrics:\n" + metrics
    path = tmp_path / "H100.yaml"
    path.write_text(body)
    return load_baseline(path)


def loaded(reasons_ns: dict[str, int], seconds: float = 10.0, bitmask: int | None = 0x1) -> Health:
    """A GPU loaded for `seconds` by two probes, NVML counting `reasons_ns` in the second."""
    return Health(
        clock_event_reasons=bitmask,
        throttle_under_load=[
            ThrottleWindow(probe="memory.bandwidth", seconds=seconds / 2, reasons_ns=dict.fromkeys(reasons_ns, 0)),
            ThrottleWindow(probe="compute.gemm.bf16", seconds=seconds / 2, reasons_ns=reasons_ns),
        ],
    )


# ---- item 10: the PCIe link is read under load in every plan with `health` ----------------------------------------


def test_the_link_is_read_under_load_without_the_pcie_probe() -> None:
    """A plan with `health` but no `pcie` read the link at idle on main (Gen1 on most boards): now under load."""
    nvml = fake_nvml(*eight_gpus()[:2])
    in_flight: list[bool] = []

    class Watching(NumpyDevice):
        def h2d(self, dst: Any, src: Any) -> None:
            super().h2d(dst, src)
            in_flight.append(True)

    real = nvml.nvmlDeviceGetCurrPcieLinkGeneration
    nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5 if in_flight else real(h)  # trained up under traffic
    ev = run_plan(plan(2, ["health", "memory"]), nvml=nvml, open_device=Watching)
    for g in ev.gpus:
        assert g.health is not None
        assert g.health.pcie.under_load is True
        assert g.health.pcie.current_generation == 5
        assert judge_health("health.pcie_link", g.health, H100, "gpu-07", g.index).status.value == "pass"
    assert "pcie.h2d" not in ev.gpus[0].measurements  # the PCIe probe itself did not run


def test_an_idle_reading_below_the_link_cannot_fail_the_link() -> None:
    """Gen1 at idle is a power-saving state, not a fault: without a reading under load the check is an error."""
    idle = Health(pcie=PcieLink(current_generation=1, current_width=16, max_generation=5, max_width=16))
    f = pcie_link(idle, H100, "n", 0)
    assert f.status.value == "error"
    assert "read at idle" in f.message
    loaded_gen1 = Health(pcie=idle.pcie.model_copy(update={"under_load": True}))
    assert pcie_link(loaded_gen1, H100, "n", 0).status.value == "fail"


# ---- item 11: throttling per reason against the baseline's allowance ---------------------------------------------


def test_a_little_software_thermal_slowdown_is_within_the_default_allowance() -> None:
    """2% of the loaded time in SW thermal slowdown: main failed it on the first nanosecond."""
    f = throttle(loaded({"sw_thermal": 200_000_000, "hw_thermal": 0}), H100, "n", 0)
    assert f.status.value == "pass", f.message
    assert "sw_thermal 2%" in f.message
    assert f.observed == pytest.approx(0.02)
    assert f.limit == pytest.approx(0.05)


def test_any_hardware_thermal_slowdown_fails_and_reports_its_share() -> None:
    f = throttle(loaded({"hw_thermal": 1_000_000, "sw_thermal": 0}), H100, "n", 3)
    assert f.status.value == "fail"
    assert "hw_thermal 0.01% of the loaded time (allowance 0%; longest during compute.gemm.bf16)" in f.message
    assert f.observed == pytest.approx(0.0001)
    assert f.limit == 0


def test_the_baseline_states_each_reasons_allowance(tmp_path: Path) -> None:
    strict = baseline_with(tmp_path, "  throttleAllowance: {sw_thermal: 0.01, sw_power_cap: 0.5}")
    assert strict.health.allowances()["hw_power_brake"] == 0  # the defaults stand where the baseline is silent
    f = throttle(loaded({"sw_thermal": 200_000_000, "sw_power_cap": 4_000_000_000}), strict, "n", 0)
    assert f.status.value == "fail"
    assert "sw_thermal 2% of the loaded time (allowance 1%" in f.message
    assert "sw_power_cap" not in f.message.split("(")[0]  # 40% of the time, within its 50%


def test_a_power_cap_under_a_full_load_is_reported_not_judged() -> None:
    f = throttle(loaded({"sw_power_cap": 6_000_000_000}), H100, "n", 0)
    assert f.status.value == "pass"
    assert "sw_power_cap 60%" in f.message


def test_hw_slowdown_has_no_counter_and_fails_from_the_reading() -> None:
    """NVML keeps no nanosecond counter of HW slowdown: its bit after the load is all there is, and it fails."""
    f = throttle(loaded({"hw_thermal": 0}, bitmask=0x8 | 0x4), H100, "n", 0)
    assert f.status.value == "fail"
    assert "hw_slowdown holding the clocks down at the reading after the load" in f.message


def test_a_reason_without_a_counter_is_not_passed_on_its_allowance() -> None:
    """SW thermal active at the reading, and no counter to measure its share (an older driver): fail."""
    f = throttle(Health(clock_event_reasons=0x20), H100, "n", 0)
    assert f.status.value == "fail"
    assert "sw_thermal holding the clocks down" in f.message


def test_nothing_to_judge_throttling_by_is_an_error() -> None:
    assert throttle(Health(), H100, "n", 0).status.value == "error"


def test_an_allowance_for_an_unknown_reason_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="throttleAllowance"):
        baseline_with(tmp_path, "  throttleAllowance: {hw_sloowdown: 0.5}")
    with pytest.raises(ConfigError, match="throttleAllowance"):
        baseline_with(tmp_path, "  throttleAllowance: {sw_thermal: 1.5}")


# ---- item 12: health.nvlink -----------------------------------------------------------------------------------


def nvlink_health(active: list[bool | None] | None, **errors: int) -> Health:
    links = {i: dict(ZERO) for i in range(len(active or []))}
    for name, n in errors.items():
        links[0][name] = n
    return Health(nvlink_active=active, nvlink_errors=NvlinkErrors(seconds=10.0, links=links) if active else None)


def test_seventeen_of_eighteen_links_fails() -> None:
    state: list[bool | None] = [True] * 18
    state[5] = False
    f = nvlink(nvlink_health(state), H100, "n", 2)
    assert f.status.value == "fail"
    assert "17 of 18 NVLink links active; inactive: link 5" in f.message
    assert (f.observed, f.expected, f.unit) == (17, 18, "links")


def test_eighteen_clean_links_pass() -> None:
    f = nvlink(nvlink_health([True] * 18, crc_flit=500), H100, "n", 0)  # 50 CRC errors/s: under DCGM's 100/s
    assert f.status.value == "pass", f.message
    assert "18 of 18" in f.message
    assert "500 CRC" in f.message


@pytest.mark.parametrize(
    ("errors", "words"),
    [
        ({"crc_flit": 800, "crc_data": 400}, "1200 CRC errors, 120/s (limit 100/s)"),
        ({"replay": 1}, "1 replay errors (limit 0)"),
        ({"recovery": 2}, "2 recovery errors (limit 0)"),
    ],
)
def test_link_errors_under_load_past_the_baseline_fail(errors: dict[str, int], words: str) -> None:
    f = nvlink(nvlink_health([True] * 18, **errors), H100, "n", 0)
    assert f.status.value == "fail"
    assert words in f.message


@pytest.mark.parametrize(
    ("health", "words"),
    [
        (Health(), "NVLink state was not reported"),
        (Health(not_supported=["nvlink.0"]), "NVML: nvlink.0"),
        (nvlink_health([False] * 18), "all 18 NVLink links are inactive"),
        (nvlink_health([True, None, *[True] * 16]), "did not give the state of link(s) 1"),
        (Health(nvlink_active=[True] * 18), "error counters were not read"),
        (
            Health(nvlink_active=[True] * 18, nvlink_errors=NvlinkErrors(seconds=10, links={0: {"replay": -4}})),
            "out of range",
        ),
        (  # an active link whose counters NVML refused altogether is not judged clean
            Health(
                nvlink_active=[True] * 18, nvlink_errors=NvlinkErrors(seconds=10, links={i: ZERO for i in range(17)})
            ),
            "no NVLink error counters of active link(s) 17",
        ),
    ],
)
def test_nvlink_that_cannot_be_judged_is_an_error(health: Health, words: str) -> None:
    f = nvlink(health, H100, "n", 0)
    assert f.status.value == "error"
    assert words in f.message


def _without(counter: str, answer: str, **errors: int) -> Health:
    """18 active links whose `counter` NVML refused on every link with `answer` (pynvml's `NVMLError_<name>: ...`
    as the probe records it, probes/health.py `_why`); `errors` added on link 0."""
    links = {i: {c: 0 for c in ZERO if c != counter} for i in range(18)}
    links[0].update(errors)
    unavailable = {f"{i}.{counter}": answer for i in range(18)}
    return Health(
        nvlink_active=[True] * 18, nvlink_errors=NvlinkErrors(seconds=10, links=links, unavailable=unavailable)
    )


NOT_SUPPORTED = "NVMLError_NotSupported: Not Supported"


def test_a_crc_counter_the_gpu_does_not_keep_is_not_an_error_on_every_gpu() -> None:
    """nvmlDeviceGetNvLinkErrorCounter answers NVML_ERROR_NOT_SUPPORTED for a counter the device does not keep
    (nvml.h; DCGM 4.5.2 caches that answer per counter, DcgmCacheManager::ReadAndCacheNvLinkData). Which counters
    a GPU keeps depends on its NVLink generation (Hopper's NVLink 4 carries data under ECC; nvidia-smi nvlink -e
    shows one CRC count, and the per-link set agents read on Hopper is replay, recovery, CRC flit and ECC data).
    Review of issue 21 item 12: a refused crc_data on every link made health.nvlink an error on every GPU."""
    f = nvlink(_without("crc_data", NOT_SUPPORTED), H100, "n", 0)
    assert f.status.value == "pass", f.message
    assert "NVML keeps no crc_data counter" in f.message
    bad = nvlink(_without("crc_data", NOT_SUPPORTED, crc_flit=1200), H100, "n", 0)
    assert bad.status.value == "fail"  # the CRC counter it does keep is still judged
    assert "1200 CRC errors" in bad.message


@pytest.mark.parametrize(
    "health",
    [
        _without("crc_data", "NVMLError_Unknown: Unknown Error"),  # a refusal that is not "the GPU has none"
        _without("replay", NOT_SUPPORTED),  # replay and recovery are never optional
        Health(  # neither CRC counter: CRC errors would not be counted at all
            nvlink_active=[True] * 18,
            nvlink_errors=NvlinkErrors(
                seconds=10,
                links={i: {"replay": 0, "recovery": 0} for i in range(18)},
                unavailable={f"{i}.{c}": NOT_SUPPORTED for i in range(18) for c in ("crc_flit", "crc_data")},
            ),
        ),
    ],
)
def test_other_missing_link_counters_still_cannot_pass(health: Health) -> None:
    f = nvlink(health, H100, "n", 0)
    assert f.status.value == "error", f.message
    assert "did not give the NVLink error counters" in f.message


def test_a_baseline_without_nvlink_cannot_pass_the_check(tmp_path: Path) -> None:
    f = nvlink(nvlink_health([True] * 18), baseline_with(tmp_path), "n", 0)
    assert f.status.value == "error"
    assert "key `nvlink`" in f.message
    pcie_card = baseline_with(tmp_path, nvlink="nvlink: {links: 0, source: a PCIe card without NVLink}\n")
    assert nvlink(Health(not_supported=["nvlink.0"]), pcie_card, "n", 0).status.value == "pass"


def test_the_runner_counts_link_errors_over_the_load_only() -> None:
    """Counters from before the run (a link that replayed last week) are not this run's: only the increase."""
    gpus = eight_gpus()[:2]
    gpus[0].down_links = {17}
    for g in gpus:
        g.nvlink_errors = {(3, 0): 7}  # 7 replays already on the counter before the probes start

    class Replaying(NumpyDevice):
        def gemm(self, a: Any, b: Any, c: Any, n: int, dtype: str) -> None:
            if self.index == 1 and dtype == "bf16":
                gpus[1].nvlink_errors[(3, 0)] += 1  # NVML_NVLINK_ERROR_DL_REPLAY on link 3
            super().gemm(a, b, c, n, dtype)

    ev = run_plan(plan(2, ["health", "compute"]), nvml=fake_nvml(*gpus), open_device=Replaying)
    h0, h1 = ev.gpus[0].health, ev.gpus[1].health
    assert h0 is not None
    assert h1 is not None
    assert h1.nvlink_errors is not None
    assert h1.nvlink_errors.links[3]["replay"] == 4  # warm-up + 3 repetitions
    assert h1.nvlink_errors.seconds > 0
    assert nvlink(h1, H100, "gpu-07", 1).status.value == "fail"
    f0 = nvlink(h0, H100, "gpu-07", 0)
    assert f0.status.value == "fail"
    assert "17 of 18" in f0.message


def test_link_error_counters_nvml_refuses_are_named() -> None:
    gpus = eight_gpus()[:1]
    gpus[0].fail = {"nvmlDeviceGetNvLinkErrorCounter": NVMLError_NotSupported}
    ev = run_plan(plan(1, ["health", "memory"]), nvml=fake_nvml(*gpus), open_device=NumpyDevice)
    h = ev.gpus[0].health
    assert h is not None
    assert h.nvlink_errors is not None
    assert h.nvlink_errors.unavailable["0.replay"] == "NVMLError_NotSupported: Not Supported"
    f = nvlink(h, H100, "gpu-07", 0)
    assert f.status.value == "error"
    assert "gave no NVLink error counters of any active link (0.crc_data: NVMLError_NotSupported" in f.message


def test_the_gpu_check_table_shows_what_nvlink_and_throttle_will_judge() -> None:
    """benchmarks/gpu_check.py, the first script on a real GPU, prints the links, link errors and throttle shares."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check_health", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    h = nvlink_health([True] * 17 + [False], replay=2).model_copy(
        update={"throttle_under_load": loaded({"hw_thermal": 10_000_000}).throttle_under_load}
    )
    line = module._links_and_throttling(h)
    assert "17/18 links active" in line
    assert "'replay': 2" in line
    assert "hw_thermal 0.10%" in line


@pytest.mark.parametrize(
    ("fault", "key"),
    [
        ({"kind": "nvlink-down", "node": "gpu-node-1", "gpu": 0, "links": 19}, "faults[0].links"),
        (
            {"kind": "nvlink-errors", "node": "gpu-node-1", "gpu": 0, "counter": "replay", "count": 1, "link": 18},
            "faults[0].link",
        ),
    ],
)
def test_an_nvlink_fault_on_a_link_the_sku_lacks_is_refused(tmp_path: Path, fault: dict[str, Any], key: str) -> None:
    """A fault the simulator could not show would pass silently: refused, naming the fleet file and key."""
    root = Path(__file__).resolve().parents[2]
    spec = yaml.safe_load((root / "examples" / "clean.yaml").read_text())
    fleet = yaml.safe_load((root / "examples" / "fleets" / "h100-4x8.yaml").read_text())
    fleet["faults"] = [fault]
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    spec["target"]["fleet"] = str(tmp_path / "fleet.yaml")
    spec["certify"]["baseline"] = str(BASELINES / "H100-SXM5-80GB.yaml")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="have 18 NVLink links") as exc:
        SimulatedTarget.from_spec(load_spec(tmp_path / "spec.yaml"))
    assert exc.value.key == key
    assert exc.value.path == tmp_path / "fleet.yaml"
