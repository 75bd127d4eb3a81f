"""Approval records, decisions, runs and the streams between runner and bot.

Everything the two sides share lives in Redis under one prefix; every key name
is made in `Keys`. Records are pydantic models, statuses are enums.

Streams (each consumed by a consumer group, so replicas share the work and a
crashed consumer's entries are reclaimed):

* `commands` (group `runners`): start a run, resume a pause.
* `events`   (group `bots`):    a pause needs a card, a run resumed / finished / failed.
* `audit`    (no group):        every decision, with the original and edited args.

A decision is recorded by one Lua script: the first decision for an action
wins, and the decision that completes the set also queues the resume command,
in the same atomic step. That is what makes "exactly one resume" hold across
double clicks, two people at once and several bot replicas.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
import os
import socket
import time
import uuid
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from agent_runner.protocol import PendingRequest, RequestKind


class Keys:
    """Every Redis key Signoff uses, in one place."""

    def __init__(self, prefix: str = "signoff"):
        self.prefix = prefix
        self.commands = f"{prefix}:commands"
        self.events = f"{prefix}:events"
        self.audit = f"{prefix}:audit"

    def approval(self, approval_id: str) -> str:
        return f"{self.prefix}:approval:{approval_id}"

    def decisions(self, approval_id: str) -> str:
        return f"{self.prefix}:approval:{approval_id}:decisions"

    def by_interrupt(self, interrupt_id: str) -> str:
        return f"{self.prefix}:interrupt:{interrupt_id}"

    def run(self, thread_id: str) -> str:
        return f"{self.prefix}:run:{thread_id}"

    def pending(self, channel: str) -> str:
        return f"{self.prefix}:pending:{channel}"

    def thread_lock(self, thread_id: str) -> str:
        return f"{self.prefix}:lock:thread:{thread_id}"

    def dedupe(self, name: str) -> str:
        return f"{self.prefix}:dedupe:{name}"


RUNNERS_GROUP = "runners"
BOTS_GROUP = "bots"


class ApprovalStatus(StrEnum):
    PENDING = "pending"      # waiting for decisions
    RESUMING = "resuming"    # every action decided; the resume command is queued
    RESUMED = "resumed"      # the runner resumed the thread with it
    FAILED = "failed"        # the runner could not resume (the error is on the record)


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Run(_Record):
    """Where a LangGraph thread talks in Slack, and who started it."""

    thread_id: str
    graph: str
    channel: str
    thread_ts: str | None = None
    requester: str | None = None
    task: str = ""


class Decided(_Record):
    """One person's decision on one action."""

    decision: dict[str, Any]
    user: str
    at: float


class Approval(_Record):
    """One pending interrupt, as the bot shows it and the runner resumes it."""

    approval_id: str
    thread_id: str
    interrupt_id: str
    graph: str
    request: PendingRequest
    origin: str
    channel: str
    thread_ts: str | None = None
    requester: str | None = None
    created_at: float
    status: ApprovalStatus = ApprovalStatus.PENDING
    card_ts: str | None = None
    decisions: dict[int, Decided] = {}
    resumed_at: float | None = None
    error: str | None = None

    @property
    def size(self) -> int:
        """How many decisions complete it (a question takes one answer)."""
        return max(1, len(self.request.actions))

    def decided_count(self) -> int:
        return len(self.decisions)

    def complete_set(self, index: int, decision: Mapping[str, Any]) -> list[Any]:
        """The decisions in request order if `decision` filled slot `index` now."""
        filled = {i: d.decision for i, d in self.decisions.items()}
        filled[index] = dict(decision)
        return [filled.get(i) for i in range(self.size)]


class DecisionResult(StrEnum):
    RECORDED = "recorded"      # stored; more actions wait
    COMPLETE = "complete"      # stored, and the resume command is queued
    TAKEN = "taken"            # someone decided this action first
    NOT_PENDING = "not_pending"
    MISSING = "missing"


# KEYS: approval hash, decisions hash, commands stream, audit stream
# ARGV: index, decided JSON, audit JSON, now, resume command JSON
_DECIDE = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then return {'taken', existing} end
if status ~= 'pending' then return {'not_pending', status} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[4], '*', 'entry', ARGV[3])
local size = tonumber(redis.call('HGET', KEYS[1], 'size'))
local count = redis.call('HLEN', KEYS[2])
if count < size then return {'recorded', tostring(count)} end
local ordered = {}
for i = 0, size - 1 do
  ordered[#ordered + 1] = cjson.decode(redis.call('HGET', KEYS[2], tostring(i)))['decision']
end
local command = cjson.decode(ARGV[5])
command['decisions'] = ordered
redis.call('HSET', KEYS[1], 'status', 'resuming', 'completed_at', ARGV[4])
redis.call('XADD', KEYS[3], '*', 'command', cjson.encode(command))
return {'complete', tostring(count)}
"""


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class Store:
    """Async access to records and streams; shared by runner and bot."""

    def __init__(self, client: aioredis.Redis, prefix: str = "signoff"):
        self.redis = client
        self.keys = Keys(prefix)
        self._decide = client.register_script(_DECIDE)

    @classmethod
    def from_url(cls, url: str, prefix: str = "signoff") -> Store:
        return cls(aioredis.Redis.from_url(url, decode_responses=True), prefix)

    async def close(self) -> None:
        await self.redis.aclose()

    async def ensure_groups(self) -> None:
        for stream, group in ((self.keys.commands, RUNNERS_GROUP), (self.keys.events, BOTS_GROUP)):
            try:
                await self.redis.xgroup_create(stream, group, id="0", mkstream=True)
            except aioredis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    # runs ---------------------------------------------------------------

    async def save_run(self, run: Run) -> None:
        await self.redis.set(self.keys.run(run.thread_id), run.model_dump_json())

    async def run(self, thread_id: str) -> Run | None:
        raw = await self.redis.get(self.keys.run(thread_id))
        return Run.model_validate_json(raw) if raw else None

    # approvals ----------------------------------------------------------

    async def create_approval(self, approval: Approval) -> tuple[Approval, bool]:
        """Store a new approval unless its interrupt already has one (then return that)."""
        claimed = await self.redis.set(
            self.keys.by_interrupt(approval.interrupt_id), approval.approval_id, nx=True
        )
        if not claimed:
            existing_id = await self.redis.get(self.keys.by_interrupt(approval.interrupt_id))
            existing = await self.approval(existing_id) if existing_id else None
            if existing:
                return existing, False
        fields = {
            "record": approval.model_dump_json(exclude={"decisions", "status", "card_ts"}),
            "status": approval.status.value,
            "size": approval.size,
            "created_at": approval.created_at,
        }
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.approval(approval.approval_id), mapping=fields)
            pipe.zadd(self.keys.pending(approval.channel), {approval.approval_id: approval.created_at})
            await pipe.execute()
        return approval, True

    async def approval(self, approval_id: str) -> Approval | None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.approval(approval_id))
            pipe.hgetall(self.keys.decisions(approval_id))
            fields, decisions = await pipe.execute()
        if not fields or "record" not in fields:
            return None
        record = json.loads(fields["record"])
        record.update(
            status=fields["status"],
            card_ts=fields.get("card_ts"),
            resumed_at=fields.get("resumed_at"),
            error=fields.get("error"),
            decisions={int(i): json.loads(d) for i, d in decisions.items()},
        )
        return Approval.model_validate(record)

    async def set_card(self, approval_id: str, ts: str) -> None:
        await self.redis.hset(self.keys.approval(approval_id), "card_ts", ts)

    async def finish(self, approval: Approval, status: ApprovalStatus, error: str | None = None) -> None:
        fields: dict[str, Any] = {"status": status.value, "resumed_at": time.time()}
        if error:
            fields["error"] = error
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.approval(approval.approval_id), mapping=fields)
            pipe.zrem(self.keys.pending(approval.channel), approval.approval_id)
            await pipe.execute()

    async def pending_in(self, channel: str) -> list[Approval]:
        ids = await self.redis.zrevrange(self.keys.pending(channel), 0, 99)
        found = [await self.approval(i) for i in ids]
        return [a for a in found if a and a.status is ApprovalStatus.PENDING]

    async def decide(
        self,
        approval: Approval,
        index: int,
        decision: Mapping[str, Any],
        user: str,
        original_args: Mapping[str, Any] | None = None,
    ) -> tuple[DecisionResult, Decided | None]:
        """Record one decision atomically; the one that completes the set queues the resume.

        The caller has checked the decision and the complete set with the protocol.
        Returns who decided first when the action was taken already.
        """
        now = time.time()
        decided = Decided(decision=dict(decision), user=user, at=now)
        audit = {
            "approval_id": approval.approval_id,
            "thread_id": approval.thread_id,
            "interrupt_id": approval.interrupt_id,
            "index": index,
            "tool": approval.request.actions[index].name if approval.request.actions else None,
            "user": user,
            "at": now,
            "decision": dict(decision),
            "original_args": dict(original_args) if original_args is not None else None,
        }
        command = {
            "type": "resume",
            "approval_id": approval.approval_id,
            "thread_id": approval.thread_id,
            "interrupt_id": approval.interrupt_id,
            "graph": approval.graph,
        }
        reply = await self._decide(
            keys=[
                self.keys.approval(approval.approval_id),
                self.keys.decisions(approval.approval_id),
                self.keys.commands,
                self.keys.audit,
            ],
            args=[str(index), decided.model_dump_json(), dumps(audit), str(now), dumps(command)],
        )
        result = DecisionResult(reply[0])
        if result is DecisionResult.TAKEN:
            return result, Decided.model_validate_json(reply[1])
        return result, decided

    async def audit_entries(self) -> list[dict[str, Any]]:
        return [json.loads(fields["entry"]) for _, fields in await self.redis.xrange(self.keys.audit)]

    # streams ------------------------------------------------------------

    async def send_command(self, command: Mapping[str, Any]) -> str:
        return await self.redis.xadd(self.keys.commands, {"command": dumps(command)})

    async def announce(self, event: Mapping[str, Any]) -> str:
        return await self.redis.xadd(self.keys.events, {"event": dumps(event)})

    async def once(self, name: str, ttl_seconds: int = 86_400) -> bool:
        """True the first time `name` is seen (dedupe of retried deliveries)."""
        return bool(await self.redis.set(self.keys.dedupe(name), "1", nx=True, ex=ttl_seconds))


class StreamConsumer(ABC):
    """One member of a consumer group: own leftovers first, then reclaim and read.

    An entry is acknowledged by `handle` once its work is done; if the process
    dies first, the entry stays pending and is handled again: by this consumer
    after a restart (same name), or by another after `claim_idle_ms`.
    """

    stream: str
    group: str

    def __init__(self, store: Store, consumer: str | None = None, claim_idle_ms: int = 60_000,
                 block_ms: int = 1_000):
        self.store = store
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.claim_idle_ms = claim_idle_ms
        self.block_ms = block_ms

    @abstractmethod
    async def handle(self, entry_id: str, fields: Mapping[str, str]) -> None:
        """Do what the entry asks, then `ack` it."""

    async def ack(self, entry_id: str) -> None:
        await self.store.redis.xack(self.stream, self.group, entry_id)

    async def serve(self, stop: asyncio.Event) -> None:
        await self.store.ensure_groups()
        await self._read("0")
        while not stop.is_set():
            await self._reclaim()
            await self._read(">", block=self.block_ms)

    async def _read(self, start: str, block: int | None = None) -> None:
        reply = await self.store.redis.xreadgroup(
            self.group, self.consumer, {self.stream: start}, count=10, block=block
        )
        # Entries of one batch run side by side, so one slow entry does not hold up the rest.
        await asyncio.gather(*(self.handle(i, f) for _, entries in reply or [] for i, f in entries))

    async def _reclaim(self) -> None:
        _, entries, _ = await self.store.redis.xautoclaim(
            self.stream, self.group, self.consumer, min_idle_time=self.claim_idle_ms, start_id="0-0", count=10
        )
        await asyncio.gather(*(self.handle(i, f) for i, f in entries if f))


def approval_for(
    request: PendingRequest,
    run: Run,
    origin: str,
) -> Approval:
    return Approval(
        approval_id=new_id(),
        thread_id=run.thread_id,
        interrupt_id=request.interrupt_id,
        graph=run.graph,
        request=request,
        origin=origin,
        channel=run.channel,
        thread_ts=run.thread_ts,
        requester=run.requester,
        created_at=time.time(),
    )


def is_question(approval: Approval) -> bool:
    return approval.request.kind is RequestKind.QUESTION
