"""Redis access for the records and streams both sides share.

Records (runs, approvals, decisions, run states) and their statuses are in
`records`, key names in `keys`, the Lua in `scripts`, stream messages in
`messages`; this is the one place that reads and writes them (recording decisions, time
limits and escalations are its rooms in this package). The consumer
framework is `streams`; the bot's own Slack state is `bot.slack_state`.

Streams (one of each per partition, see `keys`; each consumed by a consumer
group with work leases, every partition read by every consumer):

* `commands` (group `runners`): start a run, resume a pause, continue after a failure.
  Every command carries a `command_id`; a command that already took effect is a no-op.
* `events`   (group `bots`):    a pause needs a card; a run finished, failed, or
  refused a decision set.
* `audit`    (no group):        every decision, with the original and edited args; each
  partition's is a hash chain (`core.audit_chain`), its head in `audit:head`.

A message goes to the streams of its thread's partition, so one thread's
commands (and events) keep their order. Reads that span partitions (pending
approvals, the audit, any stream's entries) merge them here.

Cosmetic Slack updates (a card re-rendered after a decision, the run's status
line) are not stream entries: they are marks in the two `refresh` lanes,
coalesced (the latest state wins) and drained by the bot at Slack's update
rate, behind answers and cards.

A decision is recorded by one Lua script: the first decision for an action
wins, and the decision that completes the set also queues the resume command,
in the same atomic step. An approval record and its `approval` event are
written by one script too. That is what makes "exactly one resume" and "a
card for every approval" hold across double clicks, crashes and replicas.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from core import plan
from core.config import Settings
from core.keys import Keys, Partition
from core.messages import ApprovalCreated, Resume, encode, resume_command
from core.plan import MOST_TASKS
from core.records import (
    Approval,
    ApprovalStatus,
    Run,
    RunState,
)
from core.store.agent_server_runs import TELL_ONCE, AgentServerRuns
from core.store.audit import Audit
from core.store.client import LOCAL_REDIS, default_partitions, dumps, now_ms, redis_client
from core.store.dead_letters import DeadLetters
from core.store.deadlines import ESCALATE, SET_TERMS, Deadlines
from core.store.decisions import DECIDE, Decisions
from core.store.grants import GRANT, REVOKE_GRANT, USE_GRANT, Grants
from core.store.layout import Layout
from core.store.locks import FENCE, RELEASE_LOCK, RENEW_LOCKS, TAKE_LOCK, Locks
from core.store.lua import DONE_DUE, NOW, TAKE_DUE
from core.store.migration import Migration
from core.store.retention import CLAIM_PURGE, TRIM_AUDIT, Retention
from core.store.server import Server

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


# Retry on a failed run: failed -> running, once, whoever clicks how often.
CLAIM_RETRY = """
local run_state = KEYS[1]
if redis.call('HGET', run_state, 'state') == 'failed' then
  redis.call('HSET', run_state, 'state', 'running')
  return 1
end
return 0
"""


# A run's plan tasks (`core.plan`): put the field / value pairs ARGV[from], ARGV[from + 1]… into
# the hash `key`. A value is `rank|at|json`: a lower rank never replaces a higher one, and a
# task keeps the time it was first noted. Nothing beyond MOST_TASKS is noted.
TASKS_LUA = f"""
local function put_tasks(key, from)
  for n = from, #ARGV, 2 do
    local field, new = ARGV[n], ARGV[n + 1]
    local old = redis.call('HGET', key, field)
    if old then
      local rank, at = string.match(old, '^(%d)|([^|]*)|')
      if tonumber(rank) > tonumber(string.sub(new, 1, 1)) then
        new = nil
      else
        new = string.sub(new, 1, 2) .. at .. string.sub(new, string.find(new, '|', 3, true), -1)
      end
    elseif redis.call('HLEN', key) >= {MOST_TASKS} + 8 then
      new = nil
    end
    if new then redis.call('HSET', key, field, new) end
  end
end
"""


PUT_TASKS = (
    TASKS_LUA
    + """
local run_state, status_due = KEYS[1], KEYS[2]
local thread_id, due_ms = ARGV[1], ARGV[2]
-- ARGV[3…]: the task pairs

put_tasks(run_state, 3)
redis.call('ZADD', status_due, 'LT', due_ms, 'status:' .. thread_id)
return 1
"""
)


# What the run is doing (its status message follows), and the tasks its messages show.
SET_RUN_STATE = (
    TASKS_LUA
    + """
local run_state, idle, status_due = KEYS[1], KEYS[2], KEYS[3]
local state, detail, tool, is_idle, thread_id, now, due_ms = unpack(ARGV, 1, 7)
-- ARGV[8…]: the task pairs

redis.call('HSET', run_state, 'state', state, 'detail', detail, 'tool', tool)
if is_idle == '1' then redis.call('ZADD', idle, now, thread_id)
else redis.call('ZREM', idle, thread_id) end
put_tasks(run_state, 8)
redis.call('ZADD', status_due, 'LT', due_ms, 'status:' .. thread_id)
return 1
"""
)


# The card is visible (its ts is saved with it): from now on its deadlines count. Once per
# approval: `shown_at` is set, and every time limit (`expires:<i>`) and every deadline still
# waiting (`expire:…`, `remind:…`, `escalate:…`) is due its offset (ms) from now, Redis's clock.
# ARGV: the card's ts, its channel ("" : the run's), then triples kind ("field" | "item"),
# name, offset.
CARD_SHOWN = (
    NOW
    + """
local approval, deadlines = KEYS[1], KEYS[2]
local ts, channel = ARGV[1], ARGV[2]

redis.call('HSET', approval, 'card_ts', ts)
if channel ~= '' then redis.call('HSET', approval, 'card_channel', channel) end
if redis.call('HSETNX', approval, 'shown_at', now) == 0 then return 0 end
for n = 3, #ARGV, 3 do
  local kind, name, offset = ARGV[n], ARGV[n + 1], tonumber(ARGV[n + 2])
  if kind == 'field' then
    if redis.call('HEXISTS', approval, name) == 1 then redis.call('HSET', approval, name, now_ms + offset) end
  elseif redis.call('ZSCORE', deadlines, name) then
    redis.call('ZADD', deadlines, now_ms + offset, name)
  end
end
return 1
"""
)


# One use of the response_url a card keeps (the last click's on it: Slack allows five uses
# within 30 minutes): `url` (or "") is a new click's on message `ts`, which replaces the one kept
# when `ts` is the card's (a click elsewhere keeps nothing and uses nothing). Returns the URL to
# use, or false when none is left (then chat.update changes the card), and the approval's record,
# decisions and votes as this left them (`core.store.store.approval_of`): one round trip.
TAKE_REPLY = (
    NOW
    + """
local approval, decided, votes = KEYS[1], KEYS[2], KEYS[3]
local url, ts, ttl_ms, most = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local function take()
  local card = redis.call('HGET', approval, 'card_ts')
  if url ~= '' then
    if ts ~= card then return false end
    if redis.call('HGET', approval, 'reply_url') ~= url then
      redis.call('HSET', approval, 'reply_url', url, 'reply_ts', ts, 'reply_at', now_ms, 'reply_uses', 0)
    end
  end
  local kept = redis.call('HGET', approval, 'reply_url')
  if not kept or redis.call('HGET', approval, 'reply_ts') ~= card then return false end
  if now_ms - tonumber(redis.call('HGET', approval, 'reply_at')) >= ttl_ms then return false end
  if redis.call('HINCRBY', approval, 'reply_uses', 1) > most then return false end
  return kept
end

local kept = take()
return {kept, redis.call('HGETALL', approval), redis.call('HGETALL', decided), redis.call('HGETALL', votes)}
"""
)


T = TypeVar("T")

# Slack's response_url: five uses within 30 minutes (a minute's margin for clocks and transit).
REPLY_USES, REPLY_TTL_MS = 5, 29 * 60_000
STATUS_DEBOUNCE_MS = 300  # a run's status message is drawn again this long after a change (coalesced)


class Store(
    Layout,
    Decisions,
    Deadlines,
    Grants,
    Audit,
    AgentServerRuns,
    Locks,
    Retention,
    DeadLetters,
    Migration,
    Server,
):
    """Async access to records and streams; shared by runner and bot, the one door to Redis. Its
    rooms: the layout check (`layout`), decisions (`decisions`), terms and deadlines
    (`deadlines`), trust grants (`grants`), stream reads and the audit (`audit`), Agent Server
    runs (`agent_server_runs`), thread locks (`locks`), the retention (`retention`), dead
    letters (`dead_letters`), the migration (`migration`), what the server is (`server`)."""

    def __init__(self, client: Any, prefix: str = "signoff", partitions: int = 1):
        # Any: redis-py's types cannot tell that decode_responses=True makes every reply a str,
        # and the client is a `Redis` or a `RedisCluster`.
        self.redis: Any = client
        self.keys = Keys(prefix, partitions)
        self._deadline_turn = 0  # the partition `take_deadlines` asks first next time
        self._decide = client.register_script(DECIDE)
        self._create_approval = client.register_script(CREATE_APPROVAL)
        self._claim_retry = client.register_script(CLAIM_RETRY)
        self._set_terms = client.register_script(SET_TERMS)
        self._escalate = client.register_script(ESCALATE)
        self._card_shown = client.register_script(CARD_SHOWN)
        self._take_reply = client.register_script(TAKE_REPLY)
        self._take_due = client.register_script(TAKE_DUE)
        self._done_due = client.register_script(DONE_DUE)
        self._tell_once = client.register_script(TELL_ONCE)
        self._set_run_state = client.register_script(SET_RUN_STATE)
        self._put_tasks = client.register_script(PUT_TASKS)
        self._take_lock = client.register_script(TAKE_LOCK)
        self._release_lock = client.register_script(RELEASE_LOCK)
        self._renew_locks = client.register_script(RENEW_LOCKS)
        self._fence = client.register_script(FENCE)
        self._claim_purge = client.register_script(CLAIM_PURGE)
        self._trim_audit = client.register_script(TRIM_AUDIT)
        self._grant = client.register_script(GRANT)
        self._use_grant = client.register_script(USE_GRANT)
        self._revoke_grant = client.register_script(REVOKE_GRANT)

    @classmethod
    def from_url(cls, url: str, prefix: str = "signoff", partitions: int | None = None) -> Store:
        return cls(redis_client(url), prefix, partitions or default_partitions(url))

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        return cls.from_url(settings.redis_url or LOCAL_REDIS, settings.prefix, settings.partitions)

    async def close(self) -> None:
        await self.redis.aclose()

    async def ping(self) -> bool:
        """Whether Redis answers (readiness, and loops that report in between their work)."""
        return bool(await self.redis.ping())

    async def each_partition(self, call: Callable[[Partition], Awaitable[T]]) -> list[T]:
        """`call` on every partition at once (on a cluster, each goes to the node holding it)."""
        return list(await asyncio.gather(*(call(p) for p in self.keys.partitions)))

    async def save_run(self, run: Run, only_new: bool = False) -> bool:
        """Keep the run's record; `only_new`: unless it has one (True when written)."""
        return bool(
            await self.redis.set(self.keys.run(run.thread_id), run.model_dump_json(), nx=only_new or None)
        )

    async def run(self, thread_id: str) -> Run | None:
        raw = await self.redis.get(self.keys.run(thread_id))
        return Run.model_validate_json(raw) if raw else None

    async def set_run_state(
        self,
        thread_id: str,
        state: RunState,
        detail: str = "",
        tool: str = "",
        debounce_ms: int = STATUS_DEBOUNCE_MS,
        tasks: Sequence[plan.PlanTask] = (),
    ) -> None:
        """What the run is doing, and the tasks of its plan it shows (`core.plan`); its Slack
        status message follows (coalesced: the latest state wins)."""
        partition = self.keys.of(thread_id)
        idle = state in (RunState.FINISHED, RunState.FAILED)  # idle from now: the retention counts
        await self._set_run_state(
            keys=[self.keys.run_state(thread_id), partition.idle, partition.refresh_due("status")],
            args=[
                state.value,
                detail,
                tool,
                "1" if idle else "0",
                thread_id,
                time.time(),
                now_ms() + debounce_ms,
                *_task_pairs(tasks),
            ],
        )

    async def note_tasks(
        self, thread_id: str, tasks: Sequence[plan.PlanTask], debounce_ms: int = STATUS_DEBOUNCE_MS
    ) -> None:
        """Tasks of the run's plan started, ended or failed; its status message follows."""
        if tasks:
            await self._put_tasks(
                keys=[self.keys.run_state(thread_id), self.keys.of(thread_id).refresh_due("status")],
                args=[thread_id, now_ms() + debounce_ms, *_task_pairs(tasks)],
            )

    async def plan_tasks(self, thread_id: str) -> list[plan.PlanTask]:
        """The run's plan, in the order its tasks were first noted."""
        fields = await self.redis.hgetall(self.keys.run_state(thread_id))
        tasks = [plan.PlanTask.decoded(v) for k, v in fields.items() if k.startswith(plan.FIELD)]
        return sorted(tasks, key=lambda task: task.at)

    async def run_state(self, thread_id: str) -> RunState | None:
        value = await self.redis.hget(self.keys.run_state(thread_id), "state")
        return RunState(value) if value else None

    async def run_state_detail(self, thread_id: str) -> tuple[RunState | None, str, str]:
        """(state, detail, tool being run) for the status line."""
        state, detail, tool = await self.redis.hmget(
            self.keys.run_state(thread_id), ["state", "detail", "tool"]
        )
        return (RunState(state) if state else None), detail or "", tool or ""

    async def claim_retry(self, thread_id: str) -> bool:
        """Failed -> running, once, whoever clicks Retry how often."""
        return bool(await self._claim_retry(keys=[self.keys.run_state(thread_id)]))

    async def create_approval(self, approval: Approval, replaces: str | None = None) -> tuple[Approval, bool]:
        """Store a new approval and announce it, in one step, unless its interrupt has one.

        An existing record still waiting for its card is announced again (the
        bot posts a card at most once), so no crash between the two steps can
        leave an approval without a card. `replaces` names an earlier record of
        the same interrupt that this one supersedes (a decision set offered again).
        """
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
        # What the decide script checks, per action.
        for index, action in enumerate(approval.request.actions):
            fields[f"tool:{index}"] = action.name
            fields[f"allowed:{index}"] = ",".join(action.allowed_decisions)
            fields[f"args:{index}"] = dumps(action.args)
        if not approval.request.actions:
            fields.update({"tool:0": "", "allowed:0": "answer"})
        event = encode(ApprovalCreated(approval_id=approval.approval_id, thread_id=approval.thread_id))[
            "event"
        ]
        pairs = [str(v) for item in fields.items() for v in item]
        partition = self.keys.of(approval.thread_id)
        if self.keys.of_approval(approval.approval_id) is not partition:
            raise ValueError(f"approval {approval.approval_id} is not in its thread's partition")
        approval_id, outcome, *created = await self._create_approval(
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
        existing = await self.approval(approval_id)
        if existing is None:
            raise LookupError(f"interrupt {approval.interrupt_id} points at a missing approval {approval_id}")
        if existing.status is ApprovalStatus.PENDING and existing.card_ts is None:
            await self.announce_approval(existing)
        return existing, False

    async def announce_approval(self, approval: Approval) -> None:
        await self.send(ApprovalCreated(approval_id=approval.approval_id, thread_id=approval.thread_id))

    async def approval(self, approval_id: str) -> Approval | None:
        return (await self.approvals([approval_id]))[0]

    async def approvals(self, approval_ids: Sequence[str]) -> list[Approval | None]:
        """Approvals by id, read in one pipeline (None for one that is gone)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for approval_id in approval_ids:
                self._read_approval(pipe, approval_id)
            found = await pipe.execute()
        return [approval_of(*found[n : n + 3]) for n in range(0, len(found), 3)]

    def _read_approval(self, pipe: Any, approval_id: str) -> None:
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
            self._read_approval(pipe, approval_id)
            pipe.get(self.keys.run(thread_id))
            pipe.zrevrange(self.keys.thread_approvals(thread_id), 0, limit - 1)
            fields, decided, votes, run, ids = await pipe.execute()
        approval = approval_of(fields, decided, votes)
        others = [i for i in ids if i != approval_id]
        found = dict(zip(others, await self.approvals(others), strict=True)) if others else {}
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
        return sum(await self.each_partition(lambda p: self.redis.zcard(p.pending(channel))))

    async def by_interrupt(self, thread_id: str, interrupt_id: str) -> Approval | None:
        """The approval of one interrupt (the latest, when a refused set was offered again)."""
        approval_id = await self.redis.get(self.keys.by_interrupt(thread_id, interrupt_id))
        return await self.approval(approval_id) if approval_id else None

    async def thread_approvals(self, thread_id: str, limit: int = 20) -> list[Approval]:
        """The thread's latest approvals, newest first."""
        ids = await self.redis.zrevrange(self.keys.thread_approvals(thread_id), 0, limit - 1)
        return [a for a in await self.approvals(ids) if a]

    async def set_card(self, approval: Approval, ts: str, channel: str | None = None) -> None:
        """Where the approval's card is (its ts, its channel when not the run's), and, the first
        time, that it is visible: its time limits, reminders and escalations count from now
        (`CARD_SHOWN`), not from the pause, however long Slack's pace held the card back."""
        terms = approval.terms
        shifts: list[tuple[str, str, int]] = []
        if terms is not None:
            ident = approval.approval_id
            for i, limit in terms.timeout.items():
                shifts += [
                    ("field", f"expires:{i}", limit * 1000),
                    ("item", f"expire:{ident}:{i}", limit * 1000),
                ]
            if terms.remind_every:
                shifts.append(("item", f"remind:{ident}", terms.remind_every * 1000))
            shifts += [("item", f"escalate:{ident}:{after}", after * 1000) for after in terms.escalations]
        await self._card_shown(
            keys=[
                self.keys.approval(approval.approval_id),
                self.keys.of_approval(approval.approval_id).deadlines,
            ],
            args=[ts, channel or "", *(str(v) for shift in shifts for v in shift)],
        )

    async def take_reply(
        self, approval_id: str, url: str = "", ts: str = ""
    ) -> tuple[Approval | None, str | None]:
        """The approval, and the response_url to change its card with now (a use of the one the
        card keeps, or of `url`, a new click's on message `ts`, which it keeps from now when `ts`
        is the card's), or None: none is left (five uses, 30 minutes) or it was not a click on
        the card. One round trip."""
        used, fields, decided, votes = await self._take_reply(
            keys=[
                self.keys.approval(approval_id),
                self.keys.decided(approval_id),
                self.keys.votes(approval_id),
            ],
            args=[url, ts, REPLY_TTL_MS, REPLY_USES],
        )
        return approval_of(_pairs(fields), _pairs(decided), _pairs(votes)), str(used) if used else None

    async def card_sent(self, approval_id: str, thread_id: str) -> Approval | None:
        """After a card was sent: the run's status message marked to be drawn again (its plan
        shows the decision: `touch_status`), and the approval read as it is now; one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(*self._status_due(thread_id, STATUS_DEBOUNCE_MS), lt=True)
            self._read_approval(pipe, approval_id)
            _, fields, decided, votes = await pipe.execute()
        return approval_of(fields, decided, votes)

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

    async def touch_card(self, approval_id: str) -> None:
        """The card should be re-rendered from the record (coalesced: the latest state wins)."""
        lane = self.keys.of_approval(approval_id).refresh_due("card")
        await self.redis.zadd(lane, {f"card:{approval_id}": now_ms()}, lt=True)

    async def touch_status(self, thread_id: str, debounce_ms: int = STATUS_DEBOUNCE_MS) -> None:
        """The run's status message should be drawn again (its plan shows a decision)."""
        await self.redis.zadd(*self._status_due(thread_id, debounce_ms), lt=True)

    def _status_due(self, thread_id: str, debounce_ms: int) -> tuple[str, dict[str, int]]:
        return self.keys.of(thread_id).refresh_due("status"), {f"status:{thread_id}": now_ms() + debounce_ms}

    async def pending_ids(self, channel: str | None = None, limit: int = 100) -> list[str]:
        """Ids of pending approvals, newest first (every partition's, merged): in one channel, or
        everywhere."""

        async def newest(partition: Partition) -> list[tuple[str, float]]:
            key = partition.pending(channel) if channel else partition.pending_all
            return list(await self.redis.zrevrange(key, 0, limit - 1, withscores=True))

        merged = heapq.merge(*await self.each_partition(newest), key=lambda item: item[1], reverse=True)
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
        found = [await self.approval(i) for i in await self.pending_ids(channel, limit)]
        return [a for a in found if a and a.status is ApprovalStatus.PENDING]

    async def send(self, message: Any) -> str:
        """Queue a command (on `commands`) or an event (on `events`) of its thread's partition."""
        fields = encode(message)
        partition = self.keys.of(message.thread_id)
        return await self.redis.xadd(partition.commands if "command" in fields else partition.events, fields)

    async def mark_done(self, thread_id: str, command_id: str, ttl_seconds: int = 7 * 86_400) -> None:
        await self.redis.set(self.keys.command_done(thread_id, command_id), "1", ex=ttl_seconds)

    async def is_done(self, thread_id: str, command_id: str) -> bool:
        return bool(await self.redis.exists(self.keys.command_done(thread_id, command_id)))


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


def _pairs(flat: list[str]) -> dict[str, str]:
    """A hash as a script returns it (HGETALL in Lua: field, value, field, value, ...)."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _task_pairs(tasks: Sequence[plan.PlanTask]) -> list[str]:
    return [part for task in tasks for part in (plan.FIELD + task.key, task.encoded())]
