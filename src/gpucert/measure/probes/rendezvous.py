"""The rendezvous of the processes of a run across nodes: process 0 listens, the others connect; each says its
rank, node and GPU count, and process 0 answers with the world and the NCCL unique id. Length-prefixed messages
over TCP; nothing here touches a GPU."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Peer", "Rendezvous", "recv_msg", "send_msg"]

_LEN = struct.Struct("!Q")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"the peer closed the connection after {got} of {n} bytes")
        got += k
    return bytes(buf)


def send_msg(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LEN.pack(len(payload)) + payload)


# the largest frame a peer may announce: the sweep's biggest buffer on the NumPy device is far below it; a length
# past it is a stream read out of step (or a hostile peer), never a reason to allocate
MAX_FRAME = 1 << 32


def recv_msg(sock: socket.socket, limit: int = MAX_FRAME) -> bytes:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > limit:
        raise ValueError(f"a peer announced a frame of {n} bytes, over the {limit} this read allows")
    return _recv_exact(sock, n)


@dataclass(frozen=True, slots=True)
class Peer:
    rank: int  # the process's rank (its pod's completion index)
    node: str
    gpus: int


class Rendezvous:
    """Process 0 listens on `port`; the others connect to `host:port`, retrying until `timeout_s`
    (process 0's pod may start last, and its DNS name only resolves once it runs)."""

    def __init__(self, rank: int, processes: int, host: str, port: int, timeout_s: float = 600) -> None:
        self.rank, self.processes, self.host, self.port, self.timeout_s = rank, processes, host, port, timeout_s
        self.peers: list[Peer] = []
        self.uid: Any = None
        self.socks: dict[int, socket.socket] = {}  # process 0: every other process's connection; else: {0: ...}

    def join(self, node: str, gpus: int, make_uid: Callable[[], Any]) -> Rendezvous:
        deadline = time.monotonic() + self.timeout_s
        me = Peer(self.rank, node, gpus)
        if self.rank == 0:
            with socket.create_server(("", self.port), reuse_port=False) as server:
                peers = {0: me}
                while len(peers) < self.processes:
                    server.settimeout(max(0.1, deadline - time.monotonic()))
                    try:
                        conn, _ = server.accept()
                    except TimeoutError:
                        missing = sorted(set(range(self.processes)) - set(peers))
                        came = ", ".join(f"process {r} on {p.node}" for r, p in sorted(peers.items()))
                        raise TimeoutError(
                            f"rendezvous: processes {missing} did not join within {self.timeout_s:g} s (joined: {came})"
                        ) from None
                    with contextlib.ExitStack() as unless_kept:
                        unless_kept.callback(conn.close)
                        conn.settimeout(self.timeout_s)
                        hello = json.loads(recv_msg(conn))
                        peers[hello["rank"]] = Peer(hello["rank"], hello["node"], hello["gpus"])
                        self.socks[hello["rank"]] = conn
                        unless_kept.pop_all()
            self.peers = [peers[r] for r in range(self.processes)]
            self.uid = make_uid()
            world = json.dumps({"peers": [[p.rank, p.node, p.gpus] for p in self.peers], "uid": self.uid})
            for conn in self.socks.values():
                send_msg(conn, world.encode())
        else:
            conn = self.socks[0] = self._connect(deadline)  # kept first, so close() closes it whatever follows
            send_msg(conn, json.dumps({"rank": self.rank, "node": node, "gpus": gpus}).encode())
            world_doc = json.loads(recv_msg(conn))
            self.peers = [Peer(r, n, g) for r, n, g in world_doc["peers"]]
            self.uid = world_doc["uid"]
        return self

    def _connect(self, deadline: float) -> socket.socket:
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                conn = socket.create_connection((self.host, self.port), timeout=5)
                conn.settimeout(self.timeout_s)
                return conn
            except OSError as exc:  # not resolvable yet, refused: process 0 is not up yet
                last = exc
                time.sleep(0.2)
        raise TimeoutError(f"rendezvous: could not reach {self.host}:{self.port} in {self.timeout_s:g} s: {last}")

    @property
    def world(self) -> int:
        return sum(p.gpus for p in self.peers)

    @property
    def first_rank(self) -> int:
        return sum(p.gpus for p in self.peers[: self.rank])

    def gather_flags(self, mine: bool) -> bool:
        """Every process's flag, and-ed at process 0 (the others get their own back)."""
        if self.rank != 0:
            send_msg(self.socks[0], b"1" if mine else b"0")
            return mine
        return mine and all(recv_msg(c) == b"1" for c in self.socks.values())

    def gather(self, mine: bytes) -> list[bytes]:
        """Every process's payload at process 0, in rank order (the others get their own back)."""
        if self.rank != 0:
            send_msg(self.socks[0], mine)
            return [mine]
        return [mine, *(recv_msg(self.socks[r]) for r in sorted(self.socks))]

    def link(self, peer: int) -> tuple[Callable[[bytes], None], Callable[[], bytes]]:
        """Send to and receive from process `peer` over the rendezvous connection (process 0 and one other)."""
        sock = self.socks[peer]
        return (lambda data: send_msg(sock, data), lambda: recv_msg(sock))

    def close(self) -> None:
        for conn in self.socks.values():
            conn.close()
        self.socks.clear()
