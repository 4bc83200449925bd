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
