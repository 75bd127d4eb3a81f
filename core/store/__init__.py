"""The one door to Redis for the records and streams both sides share (`Store`), in rooms:
the client (`client`), the layout check (`layout`), decisions (`decisions`), terms and
deadlines (`deadlines`), stream reads and the audit (`audit`), Agent Server runs
(`agent_server_runs`), thread locks (`locks`), the retention (`retention`), dead letters
(`dead_letters`), the migration (`migration`), what the server is (`server`). `store` has the
records themselves: runs, approvals, queued messages.
"""

from core.store.client import LOCAL_REDIS, default_partitions, dumps, entry_order, now_ms, redis_client
from core.store.decisions import SIGNOFF
from core.store.layout import LayoutError
from core.store.store import Store

__all__ = [
    "LOCAL_REDIS",
    "SIGNOFF",
    "LayoutError",
    "Store",
    "default_partitions",
    "dumps",
    "entry_order",
    "now_ms",
    "redis_client",
]
