"""Shared fixtures: one real Redis (with ReJSON + search) for the whole session.

When REDIS_URL is set the tests use that server and start nothing; otherwise
they start their own on a free port, without persistence, and stop it. The
cluster tests do the same with REDIS_CLUSTER_URL and a local three-master cluster.
"""

from __future__ import annotations

import os
import uuid

import pytest

from agent_runner import redis_server
from agent_runner.logs import configure_logging
from agent_runner.store import Store

configure_logging()  # the processes' own pipeline (redaction included), whichever test runs first


@pytest.fixture(scope="session")
def redis_url():
    with redis_server.running(os.environ.get("REDIS_URL"), appendonly=False) as url:
        yield url


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


@pytest.fixture
def thread_id() -> str:
    return f"test-{uuid.uuid4().hex}"


def thread_config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


@pytest.fixture
async def store(redis_url):
    """A Store on the test Redis, under a key prefix of its own."""
    instance = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    await instance.ensure_groups()
    yield instance
    await instance.close()
