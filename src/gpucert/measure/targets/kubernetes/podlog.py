"""A probe pod's log read with limits: one GET per pod, `limitBytes` on the request, the body streamed in chunks
into a FrameReader (framing.py), so the controller holds the frames' payloads and the last lines of other output,
never the log as one string.

The limit is framing.READ_LIMIT (16 MiB): twice the probe's frame budget, so a log the probe wrote is read whole
with room for what else the pod printed, and a log longer than that is refused rather than judged on its first
part. The API server may send "slightly more or slightly less than the specified limit" (PodLogOptions.limitBytes,
k8s.io/api core/v1 types.go; the kubelet cuts the line that passes it, pkg/kubelet/kuberuntime/logs/logs.go
logWriter.write), so the reader stops at the limit itself too.
"""

from __future__ import annotations

from typing import Any

from gpucert.errors import IncompleteRunError
from gpucert.measure.probes import framing
from gpucert.measure.probes.framing import FramedLog, FrameReader
from gpucert.measure.targets.kubernetes.api import KubeApi

__all__ = ["CHUNK", "read_pod_log"]

CHUNK = 64 << 10


def _chunks(resp: Any) -> Any:
    stream = getattr(resp, "stream", None)
    return stream(CHUNK) if stream is not None else [bytes(resp.data)]


def read_pod_log(kube: KubeApi, core: Any, ns: str, pod: str, limit: int | None = None) -> FramedLog:
    """The frames of `pod`'s log, read up to `limit` bytes (framing.READ_LIMIT); ClusterAccessError and
    IncompleteRunError as `call` raises them, and IncompleteRunError when the stream breaks half-way."""
    from urllib3.exceptions import HTTPError

    limit = framing.READ_LIMIT if limit is None else limit
    resp = kube.call(
        "get", f"the log of pod {pod}", core.read_namespaced_pod_log, name=pod, namespace=ns, limit_bytes=limit
    )
    reader = FrameReader(limit)
    try:
        for chunk in _chunks(resp):
            reader.feed(chunk[: limit - reader.read])
            if reader.read >= limit:
                break
    except (HTTPError, OSError) as exc:
        raise IncompleteRunError(
            f"cannot read the log of pod {pod}: the stream broke after {reader.read} bytes "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    finally:
        release = getattr(resp, "release_conn", None)
        if release is not None:
            release()
    return reader.close()
