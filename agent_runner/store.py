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
import os
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from agent_runner.logs import get_logger
from agent_runner.protocol import PendingRequest

_log = get_logger("streams")


class Keys:
    """Every Redis key Signoff uses, in one place."""

    def __init__(self, prefix: str = "signoff"):
        self.prefix = prefix
        self.commands = f"{prefix}:commands"
        self.events = f"{prefix}:events"
        self.audit = f"{prefix}:audit"
        self.dead_letters = f"{prefix}:deadletters"  # entries no consumer could handle

    def approval(self, approval_id: str) -> str:
        return f"{self.prefix}:approval:{approval_id}"

    def decisions(self, approval_id: str) -> str:
        return f"{self.prefix}:approval:{approval_id}:decisions"

    def choices(self, approval_id: str) -> str:
        """The decisions exactly as sent, for the resume command."""
        return f"{self.prefix}:approval:{approval_id}:choices"

    def by_interrupt(self, interrupt_id: str) -> str:
        return f"{self.prefix}:interrupt:{interrupt_id}"

    def run(self, thread_id: str) -> str:
        return f"{self.prefix}:run:{thread_id}"

    def pending(self, channel: str) -> str:
        return f"{self.prefix}:pending:{channel}"

    @property
    def pending_all(self) -> str:
        return f"{self.prefix}:pending"

    def run_state(self, thread_id: str) -> str:
        """The run's status (running / waiting / idle / failed) and its Slack status line."""
        return f"{self.prefix}:runstate:{thread_id}"

    def slack_thread(self, channel: str, root_ts: str) -> str:
        """A Slack thread -> the LangGraph thread it is bound to."""
        return f"{self.prefix}:slackthread:{channel}:{root_ts}"

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


class RunState(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"   # an approval is pending
    IDLE = "idle"         # answered; a new message continues it
    FAILED = "failed"     # the last step raised; Retry continues it


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



class DecisionResult(StrEnum):
    RECORDED = "recorded"          # stored; more actions wait
    COMPLETE = "complete"          # stored, and the resume command is queued
    ALLOWED = "allowed"            # (check only) this person may decide this action now
    TAKEN = "taken"                # someone decided this action first
    NOT_PENDING = "not_pending"    # the approval is resuming or done
    MISSING = "missing"            # no such approval
    NO_ACTION = "no_action"        # no such action in it
    NOT_ALLOWED = "not_allowed"    # that decision type is not allowed for the action
    REQUESTER = "requester"        # the requester may not decide (when that rule is on)
    NOT_APPROVER = "not_approver"  # not on the approver list for the tool


@dataclass(frozen=True)
class Gate:
    """Who may decide: `default` for any tool, `tools` overriding it per tool name."""

    default: bool = True
    tools: dict[str, bool] = field(default_factory=dict)
    requester_cannot_decide: bool = False


@dataclass(frozen=True)
class Verdict:
    result: DecisionResult
    tool: str = ""
    allowed: tuple[str, ...] = ()
    first: Decided | None = None  # who decided first, when TAKEN


# Every check that depends on stored state, and the write, in one round trip.
# KEYS: approval hash, decisions hash, choices hash, commands stream, audit stream
# ARGV: index, kind, choice JSON (the decision as sent), decided JSON, user, now,
#       requester rule ("1"/"0"), gate JSON, mode ("record" / "check")
# Decisions travel as the JSON text they were written as: never re-encoded here,
# so cjson cannot round numbers in edited arguments.
_DECIDE = """
local h, i = KEYS[1], ARGV[1]
local status = redis.call('HGET', h, 'status')
if not status then return {'missing'} end
local allowed = redis.call('HGET', h, 'allowed:' .. i)
if not allowed then return {'no_action'} end
local tool = redis.call('HGET', h, 'tool:' .. i) or ''
local existing = redis.call('HGET', KEYS[2], i)
if existing then return {'taken', tool, allowed, existing} end
if status ~= 'pending' then return {'not_pending', tool, allowed} end
if not string.find(',' .. allowed .. ',', ',' .. ARGV[2] .. ',', 1, true) then
  return {'not_allowed', tool, allowed}
end
if ARGV[7] == '1' and redis.call('HGET', h, 'requester') == ARGV[5] then return {'requester', tool, allowed} end
local gate = cjson.decode(ARGV[8])
local may = gate['tools'][tool]
if may == nil then may = gate['default'] end
if not may then return {'not_approver', tool, allowed} end
if ARGV[9] == 'check' then return {'allowed', tool, allowed} end
redis.call('HSET', KEYS[2], i, ARGV[4])
redis.call('HSET', KEYS[3], i, ARGV[3])
redis.call('XADD', KEYS[5], '*', 'approval_id', redis.call('HGET', h, 'approval_id'),
  'thread_id', redis.call('HGET', h, 'thread_id'), 'interrupt_id', redis.call('HGET', h, 'interrupt_id'),
  'index', i, 'tool', tool, 'user', ARGV[5], 'at', ARGV[6], 'decision', ARGV[3],
  'original_args', redis.call('HGET', h, 'args:' .. i) or 'null')
local size = tonumber(redis.call('HGET', h, 'size'))
local count = redis.call('HLEN', KEYS[2])
if count < size then return {'recorded', tool, allowed} end
local ordered = {}
for n = 0, size - 1 do ordered[#ordered + 1] = redis.call('HGET', KEYS[3], tostring(n)) end
redis.call('HSET', h, 'status', 'resuming', 'completed_at', ARGV[6])
redis.call('XADD', KEYS[4], '*', 'command', redis.call('HGET', h, 'resume_command'),
  'decisions', '[' .. table.concat(ordered, ',') .. ']')
return {'complete', tool, allowed}
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
        self._claim_retry = client.register_script(
            "if redis.call('HGET', KEYS[1], 'status') == 'failed' then "
            "redis.call('HSET', KEYS[1], 'status', 'running') return 1 end return 0")

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
        fields: dict[str, Any] = {
            "record": approval.model_dump_json(exclude={"decisions", "status", "card_ts"}),
            "status": approval.status.value,
            "size": approval.size,
            "created_at": approval.created_at,
            "approval_id": approval.approval_id,
            "thread_id": approval.thread_id,
            "interrupt_id": approval.interrupt_id,
            "requester": approval.requester or "",
            "resume_command": dumps({"type": "resume", "approval_id": approval.approval_id,
                                     "thread_id": approval.thread_id, "interrupt_id": approval.interrupt_id,
                                     "graph": approval.graph}),
        }
        # What the decide script checks, per action.
        for index, action in enumerate(approval.request.actions):
            fields[f"tool:{index}"] = action.name
            fields[f"allowed:{index}"] = ",".join(action.allowed_decisions)
            fields[f"args:{index}"] = dumps(action.args)
        if not approval.request.actions:
            fields.update({"tool:0": "", "allowed:0": "answer"})
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.approval(approval.approval_id), mapping=fields)
            pipe.zadd(self.keys.pending(approval.channel), {approval.approval_id: approval.created_at})
            pipe.zadd(self.keys.pending_all, {approval.approval_id: approval.created_at})
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
            pipe.zrem(self.keys.pending_all, approval.approval_id)
            await pipe.execute()

    async def pending_in(self, channel: str | None = None, limit: int = 100) -> list[Approval]:
        """Pending approvals, newest first: in one channel, or everywhere."""
        key = self.keys.pending(channel) if channel else self.keys.pending_all
        ids = await self.redis.zrevrange(key, 0, limit - 1)
        found = [await self.approval(i) for i in ids]
        return [a for a in found if a and a.status is ApprovalStatus.PENDING]

    async def set_run_status(self, thread_id: str, status: RunState) -> None:
        await self.redis.hset(self.keys.run_state(thread_id), "status", status.value)

    async def run_status(self, thread_id: str) -> RunState | None:
        value = await self.redis.hget(self.keys.run_state(thread_id), "status")
        return RunState(value) if value else None

    async def claim_retry(self, thread_id: str) -> bool:
        """Failed -> running, once, whoever clicks Retry how often."""
        return bool(await self._claim_retry(keys=[self.keys.run_state(thread_id)]))

    async def status_line(self, thread_id: str) -> str | None:
        return await self.redis.hget(self.keys.run_state(thread_id), "status_ts")

    async def set_status_line(self, thread_id: str, ts: str) -> None:
        await self.redis.hset(self.keys.run_state(thread_id), "status_ts", ts)

    async def bind_thread(self, channel: str, root_ts: str, thread_id: str) -> None:
        await self.redis.set(self.keys.slack_thread(channel, root_ts), thread_id)

    async def thread_for(self, channel: str, root_ts: str) -> str | None:
        return await self.redis.get(self.keys.slack_thread(channel, root_ts))

    async def decisions_by(self, user: str, limit: int = 10, scan: int = 500) -> list[dict[str, Any]]:
        """A person's latest decisions, newest first, from the audit stream."""
        found = []
        for _, fields in await self.redis.xrevrange(self.keys.audit, count=scan):
            if fields.get("user") == user:
                found.append({**fields, "decision": json.loads(fields["decision"]), "at": float(fields["at"])})
                if len(found) >= limit:
                    break
        return found

    async def decide(
        self,
        approval_id: str,
        index: int,
        decision: Mapping[str, Any],
        user: str,
        gate: Gate = Gate(),
        check_only: bool = False,
    ) -> Verdict:
        """Check and record one decision in one atomic step (one round trip).

        The script refuses a missing approval or action, a decided action (the
        first decision wins), a closed approval, a type the action does not
        allow, and a person the gate does not let decide. The decision that
        completes the set also queues the resume command. `check_only` runs the
        checks and writes nothing (before opening a modal). The caller has
        checked the decision itself with the protocol.
        """
        kind = str(decision.get("type", "answer"))
        now = time.time()
        reply = await self._decide(
            keys=[self.keys.approval(approval_id), self.keys.decisions(approval_id),
                  self.keys.choices(approval_id), self.keys.commands, self.keys.audit],
            args=[str(index), kind, dumps(decision), Decided(decision=dict(decision), user=user, at=now).model_dump_json(),
                  user, repr(now), "1" if gate.requester_cannot_decide else "0",
                  dumps({"default": gate.default, "tools": gate.tools}),
                  "check" if check_only else "record"],
        )
        result = DecisionResult(reply[0])
        tool = reply[1] if len(reply) > 1 else ""
        allowed = tuple(reply[2].split(",")) if len(reply) > 2 else ()
        first = Decided.model_validate_json(reply[3]) if result is DecisionResult.TAKEN else None
        return Verdict(result, tool, allowed, first)

    async def audit_entries(self) -> list[dict[str, Any]]:
        """Every decision: who, when, the action, the decision and the original arguments."""
        entries = []
        for _, fields in await self.redis.xrange(self.keys.audit):
            entry: dict[str, Any] = dict(fields)
            entry.update(index=int(entry["index"]), at=float(entry["at"]), decision=json.loads(entry["decision"]),
                         original_args=json.loads(entry["original_args"]))
            entries.append(entry)
        return entries

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
                 block_ms: int = 1_000, max_deliveries: int = 5):
        self.store = store
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.claim_idle_ms = claim_idle_ms
        self.block_ms = block_ms
        self.max_deliveries = max_deliveries

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
        await asyncio.gather(*(self._guarded(i, f) for _, entries in reply or [] for i, f in entries))

    async def _reclaim(self) -> None:
        _, entries, _ = await self.store.redis.xautoclaim(
            self.stream, self.group, self.consumer, min_idle_time=self.claim_idle_ms, start_id="0-0", count=10
        )
        live = [(i, f) for i, f in entries if f and not await self._dead(i, f)]
        await asyncio.gather(*(self._guarded(i, f) for i, f in live))

    async def _dead(self, entry_id: str, fields: Mapping[str, str]) -> bool:
        """An entry delivered `max_deliveries` times without success goes to the dead-letter stream."""
        (pending,) = await self.store.redis.xpending_range(self.stream, self.group, entry_id, entry_id, 1) or [{}]
        if pending.get("times_delivered", 0) <= self.max_deliveries:
            return False
        await self.store.redis.xadd(self.store.keys.dead_letters, {**fields, "stream": self.stream,
                                                                    "entry_id": entry_id})
        await self.ack(entry_id)
        _log.error("stream_entry_dead", stream=self.stream, entry_id=entry_id,
                   deliveries=pending.get("times_delivered"))
        return True

    async def _guarded(self, entry_id: str, fields: Mapping[str, str]) -> None:
        """An entry that fails stays pending (and is retried later); the consumer goes on."""
        try:
            await self.handle(entry_id, fields)
        except Exception:
            _log.exception("stream_entry_failed", stream=self.stream, entry_id=entry_id)


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

