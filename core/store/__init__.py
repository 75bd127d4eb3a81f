"""The one door to Redis for the records and streams both sides share (`Store`), built of rooms:
`runs`, `queue`, `approvals`, `decisions`, `deadlines`, `cards`, `grants`, `audit`, `locks`,
`retention`, `dead_letters`, `layout`, `migration`, `server`, `remote` (one module each, with
its keys and its scripts), on one client (`client`); the Lua fragments they share are `lua`.
"""

from core.store.client import (
    LOCAL_REDIS,
    default_partitions,
    dumps,
    each_partition,
    entry_order,
    now_ms,
    redis_client,
)
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
    "each_partition",
    "entry_order",
    "now_ms",
    "redis_client",
]
