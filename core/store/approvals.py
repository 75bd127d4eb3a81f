"""Approvals in Redis: one record per pending interrupt (its request, allowed decisions and
argument schema per action, who asked, where), written with its `approval` event in one step;
read whole (`approval_of`: the record, its decisions, its votes), by interrupt and by thread;
listed while pending, by channel; closed once resumed or failed. The Store's `approvals` room
(decisions themselves are the `decisions` room's).
"""

from __future__ import annotations

import heapq
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

from core.keys import Keys, Partition
from core.messages import ApprovalCreated, Resume, encode, resume_command
from core.protocol import RequestKind
from core.records import Approval, ApprovalStatus, Run
from core.secrets import audited
from core.store.client import dumps, each_partition, now_ms
from core.store.lua import NOW
from core.store.queue import Queue

# An approval record, its lookup by interrupt and its `approval` event, in one step.
# Returns {approval id, "created", when (Redis's clock: time limits count from it)}, or {the
# existing id, "exists"} when the interrupt has a record already (unless it is the one this
# record `replaces`: a refused set offered again). The event is written first: if it fails,
# nothing is written.
CREATE_APPROVAL = (
    NOW
    + """
local by_interrupt, approval, pending_here, pending_all, per_thread, events =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local approval_id, event, replaces = ARGV[1], ARGV[2], ARGV[3]
-- ARGV[4..]: the record's field / value pairs

local current = redis.call('GET', by_interrupt)
if current and current ~= replaces then return {current, 'exists'} end
redis.call('XADD', events, '*', 'event', event)
redis.call('SET', by_interrupt, approval_id)
local fields = {}
for n = 4, #ARGV do fields[#fields + 1] = ARGV[n] end
redis.call('HSET', approval, unpack(fields))
redis.call('HSET', approval, 'created_at', now)
redis.call('ZADD', pending_here, now, approval_id)
redis.call('ZADD', pending_all, now, approval_id)
redis.call('ZADD', per_thread, now, approval_id)
return {approval_id, 'created', now}
"""
)


class FingerprintKey:
    """The deployment's key for the audit's fingerprints of secrets (`core.secrets.audited`):
    made once (32 random bytes, the first process to need it wins), read once per process."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys
        self._key: bytes | None = None

    async def get(self) -> bytes:
        if self._key is None:
            await self.redis.set(self.keys.fingerprint_key, secrets.token_hex(32), nx=True)
            stored = await self.redis.get(self.keys.fingerprint_key)
            self._key = bytes.fromhex(stored.decode() if isinstance(stored, bytes) else stored)
        return self._key


class Approvals:
    """Approval records: written, read, listed while pending, closed."""

    def __init__(self, redis: Any, keys: Keys, queue: Queue, fingerprints: FingerprintKey | None = None):
        self.redis, self.keys, self.queue = redis, keys, queue
        self.fingerprints = fingerprints or FingerprintKey(redis, keys)
        self._create = redis.register_script(CREATE_APPROVAL)

    async def _fields(self, approval: Approval) -> dict[str, Any]:
        """The record's hash: the record, what the decide script checks per action, and each
        action's arguments as its audit entries keep them (secrets as keyed fingerprints)."""
        resume = Resume(
            command_id=f"resume-{approval.approval_id}",
            approval_id=approval.approval_id,
            thread_id=approval.thread_id,
            interrupt_id=approval.interrupt_id,
            graph=approval.graph,
        )
        fields: dict[str, Any] = {
            "record": approval.model_dump_json(exclude={"decided", "status", "card_ts", "card_channel"}),
            "status": approval.status.value,
            "size": approval.size,
            "approval_id": approval.approval_id,
            "thread_id": approval.thread_id,
            "interrupt_id": approval.interrupt_id,
            "requester": approval.requester or "",
            "resume_command": resume_command(resume),
        }
        key = await self.fingerprints.get() if any(a.hidden for a in approval.request.actions) else b""
        for index, action in enumerate(approval.request.actions):
            fields[f"tool:{index}"] = action.name
            fields[f"allowed:{index}"] = ",".join(action.allowed_decisions)
            kept = audited(action.real_args, key, action.hidden) if action.hidden else action.args
            fields[f"args:{index}"] = dumps(kept)
            if action.preview is not None:  # audited with each decision: what the card showed
                fields[f"preview:{index}"] = action.preview.sha256
        if approval.request.kind is RequestKind.ELICITATION:  # one answer for the round
            fields.update({"tool:0": approval.request.tool_name, "allowed:0": "elicit"})
        elif not approval.request.actions:
            fields.update({"tool:0": "", "allowed:0": "answer"})
        return fields

    async def create(self, approval: Approval, replaces: str | None = None) -> tuple[Approval, bool]:
        """Store a new approval and announce it, in one step, unless its interrupt has one.

        An existing record still waiting for its card is announced again (the
        bot posts a card at most once), so no crash between the two steps can
        leave an approval without a card. `replaces` names an earlier record of
        the same interrupt that this one supersedes (a decision set offered again).
        """
        fields = await self._fields(approval)
        event = encode(ApprovalCreated(approval_id=approval.approval_id, thread_id=approval.thread_id))[
            "event"
        ]
        pairs = [str(v) for item in fields.items() for v in item]
        partition = self.keys.of(approval.thread_id)
        if self.keys.of_approval(approval.approval_id) is not partition:
            raise ValueError(f"approval {approval.approval_id} is not in its thread's partition")
        approval_id, outcome, *created = await self._create(
            keys=[
                self.keys.by_interrupt(approval.thread_id, approval.interrupt_id),
                self.keys.approval(approval.approval_id),
                partition.pending(approval.channel),
                partition.pending_all,
                self.keys.thread_approvals(approval.thread_id),
                partition.events,
            ],
            args=[approval.approval_id, event, replaces or "", *pairs],
        )
        if outcome == "created":  # created now, by Redis's clock: its time limits count from then
            return approval.model_copy(update={"created_at": float(created[0])}), True
        existing = await self.get(approval_id)
        if existing is None:
            raise LookupError(f"interrupt {approval.interrupt_id} points at a missing approval {approval_id}")
        if existing.status is ApprovalStatus.PENDING and existing.card_ts is None:
            await self.announce(existing)
        return existing, False

    async def announce(self, approval: Approval) -> None:
        await self.queue.send(ApprovalCreated(approval_id=approval.approval_id, thread_id=approval.thread_id))

    async def get(self, approval_id: str) -> Approval | None:
        return (await self.many([approval_id]))[0]

    async def many(self, approval_ids: Sequence[str]) -> list[Approval | None]:
        """Approvals by id, read in one pipeline (None for one that is gone)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for approval_id in approval_ids:
                self.queue_read(pipe, approval_id)
            found = await pipe.execute()
        return [approval_of(*found[n : n + 3]) for n in range(0, len(found), 3)]

    def queue_read(self, pipe: Any, approval_id: str) -> None:
        """Queue on `pipe` the three reads `approval_of` makes an approval of."""
        pipe.hgetall(self.keys.approval(approval_id))
        pipe.hgetall(self.keys.decided(approval_id))
        pipe.hgetall(self.keys.votes(approval_id))

    async def resume_reads(
        self, approval_id: str, thread_id: str, limit: int = 20
    ) -> tuple[Approval | None, Run | None, list[Approval], float | None]:
        """What a resume reads, in one round trip (two when the thread has other approvals): the
        approval, its run, the thread's latest approvals (newest first: `thread_approvals`) and
        when the decision that completed its set was recorded (Redis's clock)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            self.queue_read(pipe, approval_id)
            pipe.get(self.keys.run(thread_id))
            pipe.zrevrange(self.keys.thread_approvals(thread_id), 0, limit - 1)
            fields, decided, votes, run, ids = await pipe.execute()
        approval = approval_of(fields, decided, votes)
        others = [i for i in ids if i != approval_id]
        found = dict(zip(others, await self.many(others), strict=True)) if others else {}
        thread = [approval if i == approval_id else found[i] for i in ids]
        completed = fields.get("completed_at")
        return (
            approval,
            Run.model_validate_json(run) if run else None,
            [a for a in thread if a],
            float(completed) if completed else None,
        )

    async def thread_of(self, approval_id: str) -> str | None:
        """The thread an approval belongs to (read without its whole record)."""
        return await self.redis.hget(self.keys.approval(approval_id), "thread_id") or None

    async def pending_count(self, channel: str) -> int:
        """How many approvals wait in `channel`: every partition's index of it, counted."""
        return sum(await each_partition(self.keys, lambda p: self.redis.zcard(p.pending(channel))))

    async def by_interrupt(self, thread_id: str, interrupt_id: str) -> Approval | None:
        """The approval of one interrupt (the latest, when a refused set was offered again)."""
        approval_id = await self.redis.get(self.keys.by_interrupt(thread_id, interrupt_id))
        return await self.get(approval_id) if approval_id else None

    async def of_thread(self, thread_id: str, limit: int = 20) -> list[Approval]:
        """The thread's latest approvals, newest first."""
        ids = await self.redis.zrevrange(self.keys.thread_approvals(thread_id), 0, limit - 1)
        return [a for a in await self.many(ids) if a]

    async def finish(
        self,
        approval: Approval,
        status: ApprovalStatus,
        error: str | None = None,
        replaced_by: str | None = None,
    ) -> None:
        """Close an approval (resumed, or failed) and mark its card for a refresh."""
        fields: dict[str, Any] = {"status": status.value, "resumed_at": time.time()}
        if error:
            fields["error"] = error
        if replaced_by:
            fields["replaced_by"] = replaced_by
        partition = self.keys.of_approval(approval.approval_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.approval(approval.approval_id), mapping=fields)
            pipe.zrem(partition.pending(approval.channel), approval.approval_id)
            pipe.zrem(partition.pending_all, approval.approval_id)
            pipe.zadd(partition.refresh_due("card"), {f"card:{approval.approval_id}": now_ms()}, lt=True)
            await pipe.execute()

    async def pending_ids(self, channel: str | None = None, limit: int = 100) -> list[str]:
        """Ids of pending approvals, newest first (every partition's, merged): in one channel, or
        everywhere."""

        async def newest(partition: Partition) -> list[tuple[str, float]]:
            key = partition.pending(channel) if channel else partition.pending_all
            return list(await self.redis.zrevrange(key, 0, limit - 1, withscores=True))

        merged = heapq.merge(*await each_partition(self.keys, newest), key=lambda item: item[1], reverse=True)
        return [approval_id for approval_id, _ in merged][:limit]

    async def pending_since(self, partition: Partition, page: int = 500) -> dict[str, float]:
        """Every approval id in `partition`'s pending index, with when it was created. Read with
        ZSCAN: it returns every id held from its start to its end, whatever changes meanwhile."""
        return {
            approval_id: at
            async for approval_id, at in self.redis.zscan_iter(partition.pending_all, count=page)
        }

    async def pending_in(self, channel: str | None = None, limit: int = 100) -> list[Approval]:
        """Pending approvals, newest first: in one channel, or everywhere."""
        found = [await self.get(i) for i in await self.pending_ids(channel, limit)]
        return [a for a in found if a and a.status is ApprovalStatus.PENDING]


def approval_of(fields: dict[str, str], decided: dict[str, str], votes: dict[str, str]) -> Approval | None:
    """An approval from its record's hash, its decisions' and its votes' (None when gone)."""
    if not fields or "record" not in fields:
        return None
    record = json.loads(fields["record"])
    counted: dict[int, list[Any]] = {}
    for key, vote in sorted(votes.items(), key=lambda item: json.loads(item[1])["at"]):
        counted.setdefault(int(key.partition(":")[0]), []).append(json.loads(vote))
    record.update(
        created_at=float(fields.get("created_at") or record["created_at"]),  # (Redis's clock)
        status=fields["status"],
        card_ts=fields.get("card_ts"),
        shown_at=fields.get("shown_at"),
        card_channel=fields.get("card_channel"),
        resumed_at=fields.get("resumed_at"),
        error=fields.get("error"),
        replaced_by=fields.get("replaced_by"),
        decided={int(i): json.loads(d) for i, d in decided.items()},
        terms=json.loads(fields["terms"]) if fields.get("terms") else None,
        escalated=sorted(int(k.removeprefix("escalated:")) for k in fields if k.startswith("escalated:")),
        votes=counted,
        proposals={
            int(key.removeprefix("proposer:")): json.loads(value)
            for key, value in fields.items()
            if key.startswith("proposer:")
        },
        revisions={int(k.removeprefix("rev:")): int(v) for k, v in fields.items() if k.startswith("rev:")},
    )
    return Approval.model_validate(record)


def pairs(flat: list[str]) -> dict[str, str]:
    """A hash as a script returns it (HGETALL in Lua: field, value, field, value, ...)."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
