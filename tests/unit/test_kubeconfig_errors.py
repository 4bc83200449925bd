"""A kubeconfig that is not YAML, or not UTF-8, is one line naming it (exit 2), not a traceback.

kubernetes 37.0.2, config/kube_config.py, KubeConfigMerger.load_config: `with open(path) as f: config =
yaml.safe_load(f)`, so a broken file raises yaml.YAMLError or UnicodeDecodeError out of new_client_from_config;
neither is the client's ConfigException, and a hostile-input sweep saw both end preflight, configure and init with
a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpucert.errors import ConfigError
from gpucert.measure.targets.kubernetes.api import KubeApi


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"garbage: [\n", r"it is not YAML \(expected the node content.* at line 2, column 1\)"),
        (b"\xff\xfe\x00garbage\n", r"it is not UTF-8 text"),
    ],
)
@pytest.mark.parametrize("context", [None, "prod"])
def test_a_kubeconfig_that_cannot_be_read_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, why: str, context: str | None
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(content)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    with pytest.raises(ConfigError) as err:
        KubeApi.connect(context, tmp_path / "spec.yaml")
    assert err.value.path == kubeconfig
    assert err.value.key == "KUBECONFIG"
    message = str(err.value)
    assert "\n" not in message
    assert "fix the file, or point $KUBECONFIG at the cluster's kubeconfig" in message
    assert re.search(why, message)


def test_the_client_keeps_a_connection_for_every_request_a_round_has_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes 37.0.2 client/configuration.py sizes the connection pool at cpu_count() * 5 (10 on a 2-core
    controller) and urllib3 2.x drops every connection past it with a "Connection pool is full" warning: a fabric
    round's creates and deletes (runs.IN_FLIGHT at once) beside the watch and log reads need more."""
    import multiprocessing

    from gpucert.measure.targets.kubernetes.runs import IN_FLIGHT

    monkeypatch.setattr(multiprocessing, "cpu_count", lambda: 2)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    api = KubeApi.connect(None, tmp_path / "spec.yaml")
    kept = api.client.rest_client.pool_manager.connection_pool_kw["maxsize"]
    assert kept > IN_FLIGHT + 2  # a round's requests, the run's watch and a log read
