"""Following a run's pods with one watch for the whole run: a list of them as they are now, then one watch from the
list's resourceVersion, read by a thread of its own while the run acts on what it says.

The watch lasts as long as the API server lets it (5 to 10 minutes, at random, as client-go's reflector asks:
tools/cache/reflector.go, minWatchTimeout x (1 + rand)); when it ends or drops, the next resumes from the last
resourceVersion it delivered, bookmarks included, and only a 410 Gone (that resourceVersion compacted away) lists
the pods again. A watch asks for bookmarks, which the API server sends about every minute and just before the
watch's deadline (k8s.io/apiserver pkg/storage/cacher/cacher.go, defaultBookmarkFrequency), so a watch silent for
twice the client's read timeout is hung and is dropped. A watch that fails before delivering anything is retried
with the API's backoff and jitter against the run's one retry budget; past its retries the run is incomplete.

The thread only reads: every pod it delivers is handled, and every API call made, on the caller's thread.
"""

from __future__ import annotations

import contextlib
import json
import queue
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpucert.errors import IncompleteRunError
from gpucert.measure.targets.kubernetes.api import Cluster

__all__ = ["STEP_S", "WATCH_TIMEOUT_S", "PodHandler", "PodWatch"]

WATCH_TIMEOUT_S = 300  # the shortest watch asked for; each asks for up to twice this (client-go's reflector)
STEP_S = 1.0  # how often the run looks at its clock (Pending timeouts, deadlines) when no pod changed

PodHandler = Callable[[dict[str, Any], bool], bool]  # (pod, deleted) -> act now (a slot is free, a run ended)


class _Closed(Exception):
    """The feed was closed while a watch was being opened (ends the thread quietly)."""


@dataclass
class _Feed:
    """The thread that lists and watches; what it learns goes to `inbox` in the order the API served it:
    ("stale", None) before a list again, ("list", pods) after every list, ("event", (pod, deleted)), and
    ("error", exception) once, as its last."""

    pods: PodWatch
    inbox: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)
    stopped: threading.Event = field(default_factory=threading.Event)
    watches: int = 0  # watch requests made
    lists: int = 0  # lists made (the first, and one after each 410 Gone)
    _watch: Any = None
    _resp: Any = None  # the open watch's urllib3 response
    _thread: threading.Thread | None = None

    def start(self) -> _Feed:
        self._thread = threading.Thread(target=self._run, name="gpucert-pod-watch", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.stopped.set()
        w, resp = self._watch, self._resp
        if w is not None:
            w.stop()
        with contextlib.suppress(Exception):  # released already: the stream ended by itself
            resp.shutdown()  # urllib3 2.x: wakes the read blocked in the thread (SHUT_RD on its socket)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        if hasattr(signal, "pthread_sigmask"):  # Ctrl-C and SIGTERM go to the run's thread, which cleans up at once
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._follow()
        except Exception as exc:  # the run's to raise, on its own thread
            if not self.stopped.is_set():
                self.inbox.put(("error", exc))

    def _follow(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kube = self.pods.cluster.kube
        rv: str | None = None
        failures = 0
        while not self.stopped.is_set():
            if rv is None:
                if self.lists:
                    self.inbox.put(("stale", None))  # what the run knows may be old until the list arrives
                self.lists += 1
                items, rv = self.pods.read()
                self.inbox.put(("list", items))
            try:
                delivered, rv = self._stream(rv)
            except (ApiException, HTTPError, OSError) as exc:
                if self.stopped.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    rv = None  # compacted away: list again (kubernetes/watch/watch.py raises it, see _stream)
                    continue
                failures += 1
                if failures > kube.retries or not kube.budget.take():
                    why = "" if failures > kube.retries else " (the run's retry budget is spent)"
                    raise IncompleteRunError(
                        f"watching the probe pods at {kube.endpoint} failed {failures} times{why}: {exc}"
                    ) from exc
                self.stopped.wait(kube.backoff(failures))
                continue
            if delivered:
                failures = 0
                kube.budget.earn()

    def _stream(self, rv: str) -> tuple[bool, str]:
        """One watch from `rv` until the API server ends it; whether it delivered anything, and where it got to.

        The kubernetes client (37.0.2, kubernetes/watch/watch.py, Watch.stream) raises an ERROR event as an
        ApiException with the event's code when `timeout_seconds` is given (it then never retries by itself), so a
        410 Gone reaches `_follow` as ApiException(status=410); and a watch the server ended in time just ends.
        It deserializes each event into the model its function's annotations or docstring name (_find_return_type);
        `lister` names none, so events stay the API's JSON (unmarshal_event returns them as parsed), as a list's.
        """
        from kubernetes import watch
        from urllib3.exceptions import ReadTimeoutError

        kube = self.pods.cluster.kube
        connect, read = kube.timeout_s
        self._watch = w = watch.Watch()
        if self.stopped.is_set():
            return False, rv
        self.watches += 1
        delivered = opened = False

        def lister(**kwargs: Any) -> Any:
            nonlocal opened
            self._resp = resp = kube.core.list_namespaced_pod(**kwargs)
            opened = True
            if self.stopped.is_set():  # closed while this watch was being opened: close() found no response to wake
                resp.release_conn()
                raise _Closed
            return resp

        stream = w.stream(
            lister,
            namespace=self.pods.ns,
            label_selector=self.pods.selector,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=int(WATCH_TIMEOUT_S * (1 + random.random())),
            _request_timeout=(connect, 2 * read),  # silent past a bookmark's minute (at 60 s): hung
        )
        try:
            for event in stream:
                if self.stopped.is_set():
                    w.stop()
                    break
                delivered = True
                raw = event.get("raw_object") or {}
                rv = (raw.get("metadata") or {}).get("resourceVersion") or rv
                if event.get("type") != "BOOKMARK":
                    self.inbox.put(("event", (raw, event.get("type") == "DELETED")))
        except ReadTimeoutError:
            if not opened:
                raise  # no answer at all: a failure, retried against the budget
            # answered, then silent past a bookmark's interval: resumed from where it got to, not a failure (probes
            # that take an hour are quiet that long, and not every API server sends bookmarks while nothing
            # changes); the run's own clock and requests still judge every node meanwhile
        return delivered, rv


@dataclass(frozen=True)
class PodWatch:
    """The pods of one namespace that `selector` (a label selector) picks."""

    cluster: Cluster
    ns: str
    selector: str

    def read(self) -> tuple[list[dict[str, Any]], str]:
        """The run's pods as they are now, and the list's resourceVersion to watch from.

        Watch events come in resourceVersion order, so a watch stopped half-way resumes from the last event it
        delivered; the objects of a list do not, which is why (re)starting is a list followed by a watch.
        """
        resp = self.cluster.kube.call(
            "list",
            f"pods in namespace {self.ns}",
            self.cluster.kube.core.list_namespaced_pod,
            namespace=self.ns,
            label_selector=self.selector,
        )
        data = json.loads(resp.data)
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion", ""))

    def follow(self, handler: PodHandler, step: Callable[[], bool]) -> _Feed:
        """Watch the run's pods with `handler` while `step()` says there is more to do; `step` runs after the first
        list, whenever `handler` says to act, and at least every STEP_S seconds. Returns the finished feed (its
        counts of lists and watches)."""
        feed = _Feed(self).start()
        try:
            _loop(feed, handler, step)
        finally:
            feed.close()
        return feed


def _loop(feed: _Feed, handler: PodHandler, step: Callable[[], bool]) -> None:
    listed = False  # nothing is judged (a Pending timeout) before the pods as they are now are known
    next_step = 0.0
    while True:
        # never an unbounded wait: the run's thread comes back to Python at least every STEP_S to take a signal
        timeout = max(0.0, next_step - time.monotonic()) if listed else STEP_S
        try:
            kind, payload = feed.inbox.get(timeout=timeout)
        except queue.Empty:
            kind, payload = "tick", None
        act = False
        if kind == "error":
            raise payload
        if kind == "stale":
            listed = False
        elif kind == "list":
            listed = act = True
            for pod in payload:
                handler(pod, False)
        elif kind == "event":
            act = handler(*payload)
        if listed and (act or time.monotonic() >= next_step):
            if not step():
                return
            next_step = time.monotonic() + STEP_S
