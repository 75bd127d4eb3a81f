"""Shared fixtures: one real Redis (with ReJSON + search) for the whole session.

When REDIS_URL is set the tests use that server and start nothing; otherwise
they start their own on a free port, without persistence, and stop it. The
cluster tests do the same with REDIS_CLUSTER_URL and a local three-master cluster.
"""

from __future__ import annotations

import os
import uuid

import pytest

from core.logs import configure_logging
from core.store import Store
from signoff_demo import redis_server

configure_logging()  # the processes' own pipeline (redaction included), whichever test runs first


@pytest.fixture(scope="session")
def node_url():
    with redis_server.running(os.environ.get("REDIS_URL"), appendonly=False) as url:
        yield url


@pytest.fixture(scope="session")
def redis_url(node_url):
    """The one-server Redis most tests use."""
    return node_url


@pytest.fixture(scope="session")
def cluster_url():
    """A local three-master Redis Cluster for the whole session (REDIS_CLUSTER_URL: use that one)."""
    given = os.environ.get("REDIS_CLUSTER_URL")
    if given:
        yield given
        return
    cluster = redis_server.start_cluster(3)
    try:
        yield cluster.url
    finally:
        cluster.stop()


LAYOUTS = ("node", "cluster")


@pytest.fixture(params=LAYOUTS)
def layout_url(request) -> str:
    """One server, then the three-master cluster: for the tests that must hold on both."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def thread_id() -> str:
    return f"test-{uuid.uuid4().hex}"


def thread_config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


@pytest.fixture
async def store(layout_url):
    """A Store under a key prefix of its own, on one server and on the cluster (the scripts and
    the partitioned layout must hold on both)."""
    instance = Store.from_url(layout_url, f"t{uuid.uuid4().hex[:10]}")
    await instance.layout.ensure_groups()
    yield instance
    await instance.close()
