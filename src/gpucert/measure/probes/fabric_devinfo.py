"""Each RDMA port's active and largest MTU, as rdma-core's `ibv_devinfo` prints them from ibv_query_port.

The kernel's port sysfs has no MTU (drivers/infiniband/core/sysfs.c's port attributes are state, lid,
lid_mask_count, sm_lid, sm_sl, cap_mask, rate, phys_state, link_layer), so the RDMA MTU fabric.port judges comes
from the verbs. One `ibv_devinfo` (no -d, no -v) prints every port of every adapter, one process a node.

The format parsed is rdma-core's libibverbs/examples/devinfo.c (linux-rdma/rdma-core v64.0-61-g691953d8d,
commit 691953d8d502f54088f776c5ba2aeed0a5ac945d), print_hca_cap:
    "hca_id:\\t%s\\n"                               one adapter begins
    "\\t\\tport:\\t%u\\n"                             one of its ports begins
    "\\t\\t\\tmax_mtu:\\t\\t%s (%d)\\n"               mtu_str(max_mtu), the enum ibv_mtu value
    "\\t\\t\\tactive_mtu:\\t\\t%s (%d)\\n"            mtu_str(active_mtu): "256" .. "4096", else "invalid MTU"
where enum ibv_mtu is IBV_MTU_256 = 1 .. IBV_MTU_4096 = 5 (bytes = 128 << value). Other lines are not needed and
are passed over. A port whose MTU line is missing or does not read is an error naming the HCA and port, never a
guess; an adapter ibv_devinfo could not print (exit status, "Failed to query port") carries its stderr.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from gpucert.measure.evidence_fabric import port_key

__all__ = ["DEVINFO", "DevinfoPorts", "PortMtu", "parse_devinfo", "read_devinfo"]

DEVINFO = ("ibv_devinfo",)
_MTU = re.compile(r"^(256|512|1024|2048|4096|invalid MTU) \((-?\d+)\)$")
_TIMEOUT_S = 60


@dataclass(frozen=True, slots=True)
class PortMtu:
    """One port's MTUs in bytes, or why they could not be read (`error`, with both None)."""

    active: int | None = None
    maximum: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DevinfoPorts:
    """What ibv_devinfo said, by `hca/port`; `missing`: why a port it did not print has no MTU."""

    ports: dict[str, PortMtu]
    missing: str

    def of(self, hca: str, port: int) -> PortMtu:
        key = port_key(hca, port)
        return self.ports.get(key) or PortMtu(error=f"ibv_devinfo printed no port {port} of {hca} ({self.missing})")


def _mtu(hca: str, port: int, name: str, value: str | None) -> tuple[int | None, str | None]:
    if value is None:
        return None, f"ibv_devinfo printed no {name} for {hca} port {port}"
    found = _MTU.match(value)
    if found is None or found.group(1) == "invalid MTU" or int(found.group(1)) != 128 << int(found.group(2)):
        return None, f"ibv_devinfo's {name} for {hca} port {port} does not read as an MTU: {value!r}"
    return int(found.group(1)), None


def _port(hca: str, port: int, fields: dict[str, str]) -> PortMtu:
    active, why = _mtu(hca, port, "active_mtu", fields.get("active_mtu"))
    if why is not None:
        return PortMtu(error=why)
    maximum, why = _mtu(hca, port, "max_mtu", fields.get("max_mtu"))
    return PortMtu(active=active, maximum=maximum, error=why) if why is None else PortMtu(error=why)


def parse_devinfo(text: str, missing: str = "not in its output") -> DevinfoPorts:
    """Every port block of `ibv_devinfo`'s output (see the module's docstring for the format)."""
    ports: dict[str, PortMtu] = {}
    blocks: list[tuple[str, str, dict[str, str]]] = []  # (hca, port as printed, its fields)
    hca: str | None = None
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            hca = value
        elif key == "port" and hca is not None:
            blocks.append((hca, value, {}))
        elif blocks and blocks[-1][0] == hca and key in ("active_mtu", "max_mtu"):
            blocks[-1][2][key] = value
    for name, number, fields in blocks:
        if number.isdigit():  # else the sysfs port finds nothing printed for it, and says so
            ports[port_key(name, int(number))] = _port(name, int(number), fields)
    return DevinfoPorts(ports=ports, missing=missing)


def read_devinfo(command: tuple[str, ...] = DEVINFO) -> DevinfoPorts:
    """Run `ibv_devinfo` once for every adapter and port of the node."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return DevinfoPorts({}, "ibv_devinfo is not installed: install rdma-core's ibverbs-utils")
    except subprocess.TimeoutExpired:
        return DevinfoPorts({}, f"ibv_devinfo did not finish in {_TIMEOUT_S} s")
    except OSError as exc:
        return DevinfoPorts({}, f"ibv_devinfo could not run: {exc.strerror or type(exc).__name__}")
    if done.returncode == 0:
        return parse_devinfo(done.stdout)
    said = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
    return parse_devinfo(done.stdout, f"ibv_devinfo exited {done.returncode}: {said}")
