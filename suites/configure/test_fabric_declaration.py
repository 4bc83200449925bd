"""A pool's fabric declaration is one its nodes can be held to, before anything is measured."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("pool.fabric")
def test_pool_fabric(pool: str, decision: Finding) -> None:
    """The rated speed is one a port of the link layer runs at, the pool's nodes offer an RDMA device plugin
    resource, and every node carries the rack label the fabric names."""
    expect(decision)
