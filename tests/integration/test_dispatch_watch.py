"""The run's pods are followed with one watch for the whole run (issue 28): resumed from its resourceVersion when it
drops, listed again only on 410 Gone; the real `kubernetes` client against the fake API server."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from gpucert.errors import IncompleteRunError

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .test_probe_jobs import measure


def pod_requests(cluster: FakeCluster) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The lists and the watches of the run's pods, each as its query (not the final sweep's paged list)."""
    lists, watches = [], []
    for method, path in cluster.requests:
        url = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if (
            method == "GET"
            and url.path == "/api/v1/namespaces/gpucert/pods"
            and "gpucert.io/run" in query.get("labelSelector", "")
        ):
            if query.get("watch") in ("true", "True"):
                watches.append(query)
            elif "limit" not in query:
                lists.append(query)
    return lists, watches


def measured(cluster: FakeCluster, tmp_path: Path, **kubelet: float) -> list[str]:
    k = FakeKubelet(cluster, **kubelet).start()
    try:
        _, ev, _ = measure(tmp_path)
    finally:
        k.close()
    return [n for n in (f"gpu-{i:02d}" for i in range(1, 17)) if ev.reachable(n).status.value != "pass"]


def test_one_watch_follows_the_whole_run(cluster: FakeCluster, tmp_path: Path) -> None:
    assert measured(cluster, tmp_path) == []
    lists, watches = pod_requests(cluster)
    assert len(lists) == 1  # 16 nodes, four at a time: one list, then one watch (it was one watch per pod)
    assert len(watches) == 1
    assert watches[0]["resourceVersion"]  # from the list's resourceVersion: nothing in between is missed
    assert watches[0]["allowWatchBookmarks"] == "true"
    assert 300 <= int(watches[0]["timeoutSeconds"]) <= 600  # as long as client-go's reflector asks for


def test_a_dropped_watch_resumes_where_it_got_to(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.dropped_watches = 3  # each cut after one event, as a proxy's idle timeout would
    assert measured(cluster, tmp_path) == []
    lists, watches = pod_requests(cluster)
    assert len(lists) == 1  # no list again: nothing was lost
    assert len(watches) == 4
    versions = [int(w["resourceVersion"]) for w in watches]
    assert versions == sorted(versions)
    assert len(set(versions)) == 4  # each resumed past the event it delivered


def test_a_watch_that_keeps_failing_stops_the_run_after_its_retries(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.failed_watches = 100
    k = FakeKubelet(cluster).start()
    try:
        with pytest.raises(
            IncompleteRunError, match=r"watching the probe pods at http://localhost:[0-9]+ failed 5 times"
        ):
            measure(tmp_path)
    finally:
        k.close()
    _, watches = pod_requests(cluster)
    assert len(watches) == 5  # one try and four retries, each after its backoff; no storm
    assert cluster.list("jobs", "gpucert") == []  # and the run's objects are gone


def test_410_gone_lists_the_pods_again(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.expired_watches = 1  # the list's resourceVersion was compacted before the watch began
    assert measured(cluster, tmp_path) == []
    assert cluster.expired_watches == 0
    lists, watches = pod_requests(cluster)
    assert (len(lists), len(watches)) == (2, 2)
