"""Redis failing under a test: a master killed once its replicas caught up, the master of a key."""

from __future__ import annotations

import redis

from core import connections
from signoff_demo import redis_server

LEDGER = "tests.support.graphs:build_ledger_agent"  # send_email writes each execution to a ledger


def caught_up_then_killed(server: redis_server.LocalRedis, wait_ms: int = 5_000) -> int:
    """kill -9 `server` once a replica holds what it holds (`WAIT`, at most `wait_ms`): a failover
    keeps what was written, not its last moment. Returns how many replicas had caught up."""
    with redis.Redis(host="127.0.0.1", port=server.port) as master:
        replicas = int(master.execute_command("WAIT", 1, wait_ms))
    server.process.kill()
    server.process.wait(10)
    return replicas


def master_of(cluster: redis_server.LocalCluster, key: str) -> redis_server.LocalRedis:
    """The master of `cluster` holding `key`'s slot."""
    client = connections.sync_client(cluster.url)
    port = client.get_node_from_key(key).port
    client.close()
    (master,) = [node for node in cluster.masters if node.port == port]
    return master
