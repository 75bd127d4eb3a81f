"""The audit of decisions, read: each partition's hash chain (`core.audit_chain`), its head, a
person's latest decisions, every decision. Writing an entry is the scripts' that grant,
escalate, reveal and trim (`core.store.lua.APPEND_AUDIT`: the chain moves in the same atomic
step) and decide: a decision queues its entry (`QUEUE_AUDIT`), its place in the chain taken in
its step, and `Audit.chain` hashes the queue onto the chain after the click's ack. Every read
here chains what is queued first. The Store's `audit` room."""

from __future__ import annotations

import json
from typing import Any

from core.audit_chain import CHECKPOINT, entry_hash
from core.keys import Keys, Partition
from core.logs import get_logger
from core.store.approvals import FingerprintKey
from core.store.lua import APPEND_AUDIT, CHAIN_IN_LUA, NOW
from core.store.queue import Queue

# Someone opened an action's secret values ("Show secret values"): who and when, in the chain.
REVEALED = (
    NOW
    + APPEND_AUDIT
    + """
local approval, audit, audit_head, audit_queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local index, user = ARGV[1], ARGV[2]
if redis.call('EXISTS', approval) == 0 then return 0 end
local tool = redis.call('HGET', approval, 'tool:' .. index) or ''
append_audit(audit, audit_head, audit_queued, audit_fields(approval, index, tool, user, 'null', 'revealed'))
return 1
"""
)


# The entries a decision queued, hashed in Python (`Audit.chain`), onto the chain: only if its head
# is still the one they were hashed after (else another chainer, or an append, took them first).
CHAIN = """
local audit, audit_head, audit_queued = KEYS[1], KEYS[2], KEYS[3]
local prev = ARGV[1]
if (redis.call('GET', audit_head) or '') ~= prev then return 0 end
for n = 2, #ARGV do
  local fields = cjson.decode(redis.call('LPOP', audit_queued))
  fields[#fields + 1] = 'prev'
  fields[#fields + 1] = prev
  fields[#fields + 1] = 'hash'
  fields[#fields + 1] = ARGV[n]
  redis.call('XADD', audit, '*', unpack(fields))
  prev = ARGV[n]
end
redis.call('SET', audit_head, prev)
return #ARGV - 1
"""
log = get_logger("audit")

CHAINED_AT_ONCE = 100  # entries hashed per round trip
CHAIN_TRIES = 5


def _hashed(prev: str, queued: list[str]) -> list[str]:
    """The hash of each queued entry, in order, each after the one before (the first after
    `prev`); ValueError if one is not what the decide script wrote (JSON pairs of strings: bytes
    that were not UTF-8 come back from the client backslash-escaped, which is not JSON)."""
    hashes = []
    for item in queued:
        flat = json.loads(item)
        if not isinstance(flat, list) or len(flat) % 2 or not all(isinstance(x, str) for x in flat):
            raise ValueError("a queued audit entry is not pairs of strings")
        fields = dict(zip(flat[::2], flat[1::2], strict=True))
        fields["prev"] = prev
        prev = entry_hash(fields)
        hashes.append(prev)
    return hashes


class Audit:
    """The audit's entries and its chains' heads."""

    def __init__(self, redis: Any, keys: Keys, queue: Queue, fingerprints: FingerprintKey | None = None):
        self.redis, self.keys, self.queue = redis, keys, queue
        self.fingerprints = fingerprints or FingerprintKey(redis, keys)
        self._revealed = redis.register_script(REVEALED)
        self._chain = redis.register_script(CHAIN)
        self._chain_in_lua = redis.register_script(CHAIN_IN_LUA)

    async def chain(self, partition: Partition) -> int:
        """Hash the entries decisions queued in `partition` onto its chain, oldest first (the
        canonical encoding and SHA-256 of `core.audit_chain`, as the Lua appenders do); how
        many. Safe to run anywhere at once: an entry is chained once, in its queued order."""
        chained, tries = 0, 0
        while tries < CHAIN_TRIES:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.get(partition.audit_head)
                pipe.lrange(partition.audit_queued, 0, CHAINED_AT_ONCE - 1)
                head, queued = await pipe.execute()
            if not queued:
                return chained
            keys = [partition.audit, partition.audit_head, partition.audit_queued]
            try:
                hashes = _hashed(head or "", queued)
            except ValueError as exc:  # not read back as written (bytes that are not UTF-8)
                log.warning("audit_chained_in_lua", error=repr(exc))
                chained += int(await self._chain_in_lua(keys=keys))
                continue
            done = int(await self._chain(keys=keys, args=[head or "", *hashes]))
            chained += done
            if done and len(queued) < CHAINED_AT_ONCE:
                return chained  # (queued since: the next chaining takes them)
            tries += 0 if done else 1  # (another chainer moved the head first: read again)
        log.warning("audit_chaining_left", partition=partition.index)  # (the next chaining takes them)
        return chained

    async def chain_after(self, partition: Partition) -> int:
        """`chain`, after a decision already recorded: whatever it meets is logged, never raised
        (the decision stands; the partition's next chaining, append or read takes the entry)."""
        try:
            return await self.chain(partition)
        except Exception as exc:
            log.warning("audit_chaining_failed", partition=partition.index, error=repr(exc))
            return 0

    async def chain_all(self) -> None:
        """Every partition's queued entries onto its chain (before the audit is read)."""
        for partition in self.keys.partitions:
            await self.chain(partition)

    async def revealed(self, approval_id: str, index: int, user: str) -> bool:
        """Record that `user` opened action `index`'s secret values (False: no such approval)."""
        partition = self.keys.of_approval(approval_id)
        return bool(
            await self._revealed(
                keys=[
                    self.keys.approval(approval_id),
                    partition.audit,
                    partition.audit_head,
                    partition.audit_queued,
                ],
                args=[str(index), user],
            )
        )

    async def tail(self, partition: Partition) -> tuple[str | None, str | None]:
        """A partition's audit chain head and its newest entry's id, read together (None, None:
        no chain, no entries)."""
        await self.chain(partition)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(partition.audit_head)
            pipe.xrevrange(partition.audit, count=1)
            head, newest = await pipe.execute()
        return head, (newest[0][0] if newest else None)

    async def decisions_by(self, user: str, limit: int = 10, scan: int = 500) -> list[dict[str, Any]]:
        """A person's latest decisions, newest first, from the audit streams."""
        await self.chain_all()
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
        await self.chain_all()
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
