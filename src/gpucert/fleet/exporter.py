"""The HTTP side of `gpucert metrics --serve`: /metrics and nothing else, a scrape that fails answered with its own
one-line 500 (and one line in the log, never a traceback), and the cluster read bounded by a deadline of its own.

prometheus_client's `start_http_server` answers every path with the metrics (exposition.py, `make_wsgi_app`:
"the URI path for GET is not constrained to the documented /metrics", prometheus_client 0.26.0), and a collector
that raises reaches wsgiref, which logs the traceback and answers a bare 500. Here its WSGI app serves /metrics
only, behind a wrapper that turns a failed scrape into one line; the server is wsgiref's, one thread per request.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from gpucert.errors import ConfigError, IncompleteRunError

__all__ = ["bounded", "metrics_app", "parse_listen", "serve"]

T = TypeVar("T")
StartResponse = Callable[..., Any]
PATH = "/metrics"


def bounded(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """`fn()`, or IncompleteRunError once `timeout_s` has passed: the client's own timeouts and retries can add up
    to far more than a scrape may take (five tries of a 3 s read took 15.8 s). The call goes on in its thread and
    its answer is dropped."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=call, name="gpucert-cluster-read", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise IncompleteRunError(f"{what} did not answer within {timeout_s:g} s (--cluster-timeout)")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def metrics_app(registry: CollectorRegistry, log: Callable[[str], None]) -> Callable[..., Iterable[bytes]]:
    """A WSGI app: GET /metrics is the registry's exposition; any other path 404; a failed scrape 500, one line."""
    inner = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"not found: gpucert serves {PATH} only\n".encode()]
        try:
            out: Iterable[bytes] = inner(environ, start_response)
        except Exception as exc:  # a failed scrape says why, in one line, and Prometheus marks the target down
            line = " ".join(f"scrape failed: {exc}".split())
            log(f"gpucert metrics: {line}")
            start_response("500 Internal Server Error", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{line}\n".encode()]
        return out

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress does not hold the exporter open at exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Every request is not news; a failed scrape logs its own line."""


def parse_listen(text: str) -> tuple[str, int]:
    """`[HOST]:PORT` (`:9400`, `127.0.0.1:9400`, `[::1]:9400`) as (host, port); every address when HOST is empty."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{text!r} is not [HOST]:PORT (e.g. :9400 or 127.0.0.1:9400)", key="--serve")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def serve(
    registry: CollectorRegistry,
    listen: str,
    *,
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = _log,
) -> None:
    """Serve /metrics on `listen` until interrupted (Ctrl-C or SIGTERM), or until `stop` is set."""
    host, port = parse_listen(listen)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

        class Server(_Server):
            address_family = family

        server = make_server(host, port, metrics_app(registry, log), Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror or exc}", key="--serve") from None
    thread = threading.Thread(target=server.serve_forever, name="gpucert-exporter", daemon=True)
    thread.start()
    if ready is not None:
        ready.set()
    try:
        while thread.is_alive() and not (stop is not None and stop.is_set()):
            thread.join(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
