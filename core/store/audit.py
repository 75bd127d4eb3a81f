"""The audit of decisions, read: each partition's hash chain (`core.audit_chain`), its head, a
person's latest decisions, every decision. Writing an entry is the scripts' that decide, grant,
escalate and trim (`core.store.lua.APPEND_AUDIT`: the chain moves in the same atomic step). The
Store's `audit` room."""

from __future__ import annotations

import json
from typing import Any

from core.audit_chain import CHECKPOINT
from core.keys import Keys, Partition
from core.store.approvals import FingerprintKey
from core.store.lua import APPEND_AUDIT, NOW
from core.store.queue import Queue

# Someone opened an action's secret values ("Show secret values"): who and when, in the chain.
REVEALED = (
    NOW
    + APPEND_AUDIT
    + """
local approval, audit, audit_head = KEYS[1], KEYS[2], KEYS[3]
local index, user = ARGV[1], ARGV[2]
if redis.call('EXISTS', approval) == 0 then return 0 end
local tool = redis.call('HGET', approval, 'tool:' .. index) or ''
append_audit(audit, audit_head, audit_fields(approval, index, tool, user, 'null', 'revealed'))
return 1
"""
)


class Audit:
    """The audit's entries and its chains' heads."""

    def __init__(self, redis: Any, keys: Keys, queue: Queue, fingerprints: FingerprintKey | None = None):
        self.redis, self.keys, self.queue = redis, keys, queue
        self.fingerprints = fingerprints or FingerprintKey(redis, keys)
        self._revealed = redis.register_script(REVEALED)

    async def revealed(self, approval_id: str, index: int, user: str) -> bool:
        """Record that `user` opened action `index`'s secret values (False: no such approval)."""
        partition = self.keys.of_approval(approval_id)
        return bool(
            await self._revealed(
                keys=[self.keys.approval(approval_id), partition.audit, partition.audit_head],
                args=[str(index), user],
            )
        )

    async def tail(self, partition: Partition) -> tuple[str | None, str | None]:
        """A partition's audit chain head and its newest entry's id, read together (None, None:
        no chain, no entries)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(partition.audit_head)
            pipe.xrevrange(partition.audit, count=1)
            head, newest = await pipe.execute()
        return head, (newest[0][0] if newest else None)

    async def decisions_by(self, user: str, limit: int = 10, scan: int = 500) -> list[dict[str, Any]]:
        """A person's latest decisions, newest first, from the audit streams."""
        found = []
        for _, fields in await self.queue.entries(lambda p: p.audit, newest=scan):
            if fields.get("user") == user:
                found.append(
                    {**fields, "decision": json.loads(fields["decision"]), "at": float(fields["at"])}
                )
                if len(found) >= limit:
                    break
        return found

    async def entries(self) -> list[dict[str, Any]]:
        """Every decision: who, when, the action, the decision and the original arguments (the
        chain's checkpoints, which are none, left out)."""
        entries = []
        for _, fields in await self.queue.entries(lambda p: p.audit):
            if fields.get("outcome") == CHECKPOINT:
                continue
            entry: dict[str, Any] = dict(fields)
            entry.update(
                index=int(entry["index"]),
                at=float(entry["at"]),
                decision=json.loads(entry["decision"]),
                original_args=json.loads(entry["original_args"]),
            )
            entries.append(entry)
        return entries
