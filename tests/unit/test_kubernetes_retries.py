"""Retries against the Kubernetes API at fleet scale (issue 28): one retry budget for the run, backoff with jitter,
and what the `kubernetes` client's watch does with a 410 Gone, which the run's one watch relies on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from gpucert.errors import IncompleteRunError
from gpucert.measure.targets.kubernetes.api import Cluster, KubeApi, RetryBudget
from gpucert.measure.targets.kubernetes.watch import PodWatch
from gpucert.spec.cluster import KubernetesTargetSpec


class _Client:
    class configuration:  # noqa: N801 - the attribute KubeApi reads of an ApiClient
        host = "https://api.example:6443"


def kube(**kwargs: Any) -> KubeApi:
    return KubeApi(_Client(), identity="test", backoff_s=0.0, **kwargs)


def test_an_api_server_that_fails_everything_gets_a_few_retries_from_the_whole_run() -> None:
    api = kube()
    tries = 0

    def unavailable(**_: Any) -> Any:
        nonlocal tries
        tries += 1
        raise ApiException(status=503, reason="Service Unavailable")

    messages = []
    for _ in range(100):  # a run's requests, one after another, against an API server that is down
        with pytest.raises(IncompleteRunError) as err:
            api.call("create", "jobs in namespace gpucert", unavailable)
        messages.append(str(err.value))
    # without the shared budget: 100 x 5 tries; with it, the first two requests retry (4 each), then about one
    # more retry until more than half the budget is gone, then each request gets its one try
    assert tries <= 100 + 10
    assert "did not answer after 5 tries (HTTP 503" in messages[0]
    assert "after 1 tries" in messages[-1]
    assert "retry budget is spent" in messages[-1]


def test_successes_earn_the_budget_back() -> None:
    budget = RetryBudget(tokens=10, ratio=0.5)
    assert [budget.take() for _ in range(6)] == [True] * 4 + [False] * 2  # allowed while more than half is left
    for _ in range(5):  # tokens 4 -> 6.5: a take leaves 5.5, more than half
        budget.earn()
    assert budget.take()
    assert not budget.take()
    assert (budget.spent, budget.refused) == (5, 3)


def test_a_request_that_succeeds_after_a_retry_is_answered() -> None:
    api = kube()
    answers: list[Any] = [ApiException(status=500, reason="etcdserver: leader changed"), "answer"]

    def flaky(**_: Any) -> Any:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert api.call("list", "nodes", flaky) == "answer"


def test_backoff_is_exponential_with_jitter() -> None:
    api = KubeApi(_Client(), identity="test", backoff_s=0.5)
    for attempt, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0)):
        waits = [api.backoff(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)  # "equal jitter": never less than half
        assert len(set(waits)) > 100  # clients that failed together do not retry together


# ---- kubernetes 37.0.2, kubernetes/watch/watch.py (Watch.stream, unmarshal_event, _find_return_type) -------------


class _Response:
    """What `Watch.stream` reads of the urllib3 response a list call with `_preload_content=False` returns."""

    status = 200

    def __init__(self, *events: dict[str, Any]) -> None:
        self.body = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield self.body

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


GONE = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
POD = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7"}}}


def test_the_client_raises_410_gone_when_the_watch_has_a_timeout() -> None:
    """With `timeout_seconds`, Watch.stream disables its own retries (`disable_retries`) and turns an ERROR event into
    ApiException(status=code): the run's watch relists on it. Without, it would retry once, by itself, from the
    last resourceVersion, which the run could not see."""
    calls: list[dict[str, Any]] = []

    def lister(**kwargs: Any) -> _Response:  # no annotations, no docstring: events stay the API's JSON
        calls.append(kwargs)
        return _Response(POD, GONE) if len(calls) == 1 else _Response(GONE)

    events: list[dict[str, Any]] = []
    with pytest.raises(ApiException) as err:
        events.extend(watch.Watch().stream(lister, resource_version="5", timeout_seconds=300))
    assert err.value.status == 410
    assert len(calls) == 1
    assert events[0]["raw_object"] == POD["object"]
    assert isinstance(events[0]["object"], dict)  # not deserialized into a V1Pod: unmarshal_event's plain path

    calls.clear()
    with pytest.raises(ApiException):
        list(watch.Watch().stream(lister, resource_version="5"))
    assert len(calls) == 2  # its own retry: from the resourceVersion it was given, as it reads none of a raw event
    assert calls[1]["resource_version"] == "5"


# ---- the run's pod watch ------------------------------------------------------------------------------------------


class _Silent:
    """A watch the API server answered and then said nothing on, past the client's read timeout."""

    status = 200

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        raise ReadTimeoutError(None, "/api/v1/namespaces/gpucert/pods", "Read timed out.")  # type: ignore[arg-type]
        yield b""  # pragma: no cover

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class _Core:
    """A list of no pods, then `silent` watches that go quiet, then one that delivers a pod and ends."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.watches: list[str] = []

    def list_namespaced_pod(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            return type("Resp", (), {"data": json.dumps({"metadata": {"resourceVersion": "5"}, "items": []})})()
        self.watches.append(kwargs["resource_version"])
        if len(self.watches) <= self.silent:
            return _Silent()
        return _Response(POD)


def test_a_quiet_watch_is_resumed_not_counted_as_a_failure() -> None:
    """Probes that run for an hour leave the run's watch quiet that long: each silent watch is resumed from where it
    got to, as many times as it takes, and never spends the retries that a watch with no answer at all would."""
    api = kube()
    core = _Core(silent=3 * (api.retries + 1))
    api.__dict__["core"] = core  # KubeApi.core is a cached_property: this is the client's CoreV1Api for the test
    seen: list[dict[str, Any]] = []

    def handler(pod: dict[str, Any], deleted: bool) -> bool:
        seen.append(pod)
        return True

    cluster = Cluster(kube=api, options=KubernetesTargetSpec(kind="kubernetes"))
    PodWatch(cluster, "gpucert", "gpucert.io/run=r1").follow(handler, lambda: not seen)
    assert seen == [POD["object"]]
    n = 3 * (api.retries + 1) + 1
    assert core.watches[:n] == ["5"] * n  # each resumed from the list's resourceVersion (then, maybe, from "7")
    assert api.budget.spent == 0
