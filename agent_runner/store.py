"""Approval records, decisions, runs and the streams between runner and bot.

Everything the two sides share lives in Redis under one prefix; every key name
is made in `Keys`. Records are pydantic models, statuses are enums.

Streams (each consumed by a consumer group with work leases, see `streams`):

* `commands` (group `runners`): start a run, resume a pause, continue after a failure.
  Every command carries a `command_id`; a command that already took effect is a no-op.
* `events`   (group `bots`):    a pause needs a card; a run finished, failed, or
  refused a decision set.
* `audit`    (no group):        every decision, with the original and edited args.

Cosmetic Slack updates (a card re-rendered after a decision, the run's status
line) are not stream entries: they are marks in the `refresh` set, coalesced
(the latest state wins) and drained by the bot at Slack's update rate, behind
answers and cards.

A decision is recorded by one Lua script: the first decision for an action
wins, and the decision that completes the set also queues the resume command,
in the same atomic step. An approval record and its `approval` event are
written by one script too. That is what makes "exactly one resume" and "a
card for every approval" hold across double clicks, crashes and replicas.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from agent_runner.protocol import PendingRequest


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

    def thread_approvals(self, thread_id: str) -> str:
        """The thread's approvals by creation time (for tool idempotency keys)."""
        return f"{self.prefix}:thread:{thread_id}:approvals"

    def posts(self, thread_id: str) -> str:
        """Slack messages of one run: post id -> ts once posted, or the poster's claim while posting."""
        return f"{self.prefix}:posts:{thread_id}"

    def command_done(self, command_id: str) -> str:
        return f"{self.prefix}:done:{command_id}"

    def refresh_due(self, lane: str) -> str:
        """Cosmetic Slack updates waiting, by due time: lane `card` (card:<approval id>) goes
        before lane `status` (status:<thread id>)."""
        return f"{self.prefix}:refresh:{lane}"

    @property
    def refresh_claims(self) -> str:
        return f"{self.prefix}:refresh:claims"

    def rate(self, name: str) -> str:
        """A rate limiter shared by every bot replica (one Slack workspace)."""
        return f"{self.prefix}:rate:{name}"

    @property
    def groups(self) -> str:
        """User group id -> its members (JSON), refreshed from Slack in the background."""
        return f"{self.prefix}:groups"

    @property
    def groups_refresh(self) -> str:
        return f"{self.prefix}:groups:refreshing"


RUNNERS_GROUP = "runners"
BOTS_GROUP = "bots"


class ApprovalStatus(StrEnum):
    PENDING = "pending"      # waiting for decisions
    RESUMING = "resuming"    # every action decided; the resume command is queued
    RESUMED = "resumed"      # the runner resumed the thread with it
    FAILED = "failed"        # the runner refused the set (the error is on the record; offered again)


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
    replaced_by: str | None = None  # a refused set: the approval that offers the pause again

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
    GROUPS_UNKNOWN = "groups_unknown"  # the approver groups could not be loaded yet: try again


UNKNOWN = "unknown"  # a gate value: membership not known yet (a user group not fetched)


@dataclass(frozen=True)
class Gate:
    """Who may decide: `default` for any tool, `tools` overriding it per tool name.

    A value is True, False or UNKNOWN (refused, nothing written, "try again").
    """

    default: bool | str = True
    tools: dict[str, bool | str] = field(default_factory=dict)
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
if may == 'unknown' then return {'groups_unknown', tool, allowed} end
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


# The approval record, its lookup by interrupt and its `approval` event, in one step.
# KEYS: by-interrupt key, approval hash, pending-in-channel zset, pending zset, thread approvals zset,
#       events stream
# ARGV: approval id, created_at, event JSON, replaced approval id ("" when none), then field/value pairs
# Returns {approval id, "created"} or, when the interrupt has a live record already, {its id, "exists"}.
_CREATE_APPROVAL = """
local by_interrupt, hash, pending_here, pending_all, per_thread, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local approval_id, created_at, event, replaces = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local current = redis.call('GET', by_interrupt)
if current and current ~= replaces then return {current, 'exists'} end
redis.call('SET', by_interrupt, approval_id)
local fields = {}
for n = 5, #ARGV do fields[#fields + 1] = ARGV[n] end
redis.call('HSET', hash, unpack(fields))
redis.call('ZADD', pending_here, created_at, approval_id)
redis.call('ZADD', pending_all, created_at, approval_id)
redis.call('ZADD', per_thread, created_at, approval_id)
redis.call('XADD', events, '*', 'event', event)
return {approval_id, 'created'}
"""

# Claim the right to make one Slack post, or learn that it exists.
# KEYS: posts hash; ARGV: post id, claim ("claim:<owner>:<deadline ms>"), now ms
# Returns {"posted", ts} | {"busy", deadline ms} | {"new"} | {"retry"} (an earlier claim lapsed:
# the message may exist in Slack already, look before posting again).
_CLAIM_POST = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and string.sub(current, 1, 6) ~= 'claim:' then return {'posted', current} end
local now = tonumber(ARGV[3])
if current then
  local owner, deadline = string.match(current, '^claim:(.*):(%d+)$')
  local mine = string.match(ARGV[2], '^claim:(.*):%d+$')
  if owner ~= mine and tonumber(deadline) > now then return {'busy', deadline} end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if current then return {'retry'} end
return {'new'}
"""

# A poster that failed lets its claim lapse at once (Slack may have taken the message: the next
# attempt looks first). KEYS: posts hash; ARGV: post id, the claim it made, the lapsed claim
_LAPSE_POST = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 1
"""

# Record the ts of a post this poster made. KEYS: posts hash; ARGV: post id, ts
# Returns {"saved"} or {"duplicate", ts of the post that was saved first}.
_SAVE_POST = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and string.sub(current, 1, 6) ~= 'claim:' and current ~= ARGV[2] then return {'duplicate', current} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'saved'}
"""

# Cosmetic updates: take up to ARGV[3] due items not claimed by a live claimer.
# KEYS: due zset, claims hash; ARGV: now ms, lease ms, count
# A taken item's due time moves to now + lease: if the taker dies, it comes due again.
_TAKE_DUE = """
local now, lease, count = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local taken = {}
for _, item in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, count * 4)) do
  local claim = tonumber(redis.call('HGET', KEYS[2], item) or '0')
  if claim <= now then
    redis.call('HSET', KEYS[2], item, now + lease)
    redis.call('ZADD', KEYS[1], now + lease, item)
    taken[#taken + 1] = item
    taken[#taken + 1] = tostring(now + lease)
    if #taken >= count * 2 then break end
  end
end
return taken
"""

# Done with an item: remove it unless it was marked again meanwhile (its due time changed).
# KEYS: due zset, claims hash; ARGV: item, token (due time set when taken), retry-at ms or ""
_DONE_DUE = """
redis.call('HDEL', KEYS[2], ARGV[1])
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '-1') == tonumber(ARGV[2]) then
  if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1])
  else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
end
return 1
"""

# GCRA rate limiter on Redis time, shared by every replica.
# KEYS: limiter key; ARGV: interval between calls (ms), burst
# Returns 0 when a call may go now, else how many ms to wait.
_RATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat - interval * (burst - 1) - now
if wait > 0 then return wait end
redis.call('SET', KEYS[1], tat + interval, 'PX', math.ceil(tat + interval - now + interval * burst) + 1000)
return 0
"""

_CLAIM_RETRY = """
if redis.call('HGET', KEYS[1], 'status') == 'failed' then
  redis.call('HSET', KEYS[1], 'status', 'running')
  return 1
end
return 0
"""


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def now_ms() -> int:
    return int(time.time() * 1000)


class PostClaim(StrEnum):
    POSTED = "posted"  # the message exists (its ts is known)
    BUSY = "busy"      # another poster is making it now
    NEW = "new"        # nobody tried: post it
    RETRY = "retry"    # an earlier attempt lapsed: look in Slack before posting


class Store:
    """Async access to records and streams; shared by runner and bot."""

    def __init__(self, client: aioredis.Redis, prefix: str = "signoff"):
        self.redis = client
        self.keys = Keys(prefix)
        self._decide = client.register_script(_DECIDE)
        self._create_approval = client.register_script(_CREATE_APPROVAL)
        self._claim_post = client.register_script(_CLAIM_POST)
        self._save_post = client.register_script(_SAVE_POST)
        self._lapse_post = client.register_script(_LAPSE_POST)
        self._take_due = client.register_script(_TAKE_DUE)
        self._done_due = client.register_script(_DONE_DUE)
        self._rate = client.register_script(_RATE)
        self._claim_retry = client.register_script(_CLAIM_RETRY)

    @classmethod
    def from_url(cls, url: str, prefix: str = "signoff") -> Store:
        # Bounded waits: a Redis that is away makes calls fail within seconds (loops then
        # back off and reconnect) instead of hanging; 5 s is above the 1 s stream blocks.
        # A burst waits for a free connection instead of failing with "Too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(url, decode_responses=True, socket_timeout=5,
                                                        socket_connect_timeout=2, max_connections=64, timeout=5)
        return cls(aioredis.Redis(connection_pool=pool), prefix)

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

    async def create_approval(self, approval: Approval, replaces: str | None = None) -> tuple[Approval, bool]:
        """Store a new approval and announce it, in one step, unless its interrupt has one.

        An existing record still waiting for its card is announced again (the
        bot posts a card at most once), so no crash between the two steps can
        leave an approval without a card. `replaces` names an earlier record of
        the same interrupt that this one supersedes (a decision set offered again).
        """
        fields: dict[str, Any] = {
            "record": approval.model_dump_json(exclude={"decisions", "status", "card_ts"}),
            "status": approval.status.value,
            "size": approval.size,
            "created_at": approval.created_at,
            "approval_id": approval.approval_id,
            "thread_id": approval.thread_id,
            "interrupt_id": approval.interrupt_id,
            "requester": approval.requester or "",
            "resume_command": dumps({"type": "resume", "command_id": f"resume-{approval.approval_id}",
                                     "approval_id": approval.approval_id, "thread_id": approval.thread_id,
                                     "interrupt_id": approval.interrupt_id, "graph": approval.graph}),
        }
        # What the decide script checks, per action.
        for index, action in enumerate(approval.request.actions):
            fields[f"tool:{index}"] = action.name
            fields[f"allowed:{index}"] = ",".join(action.allowed_decisions)
            fields[f"args:{index}"] = dumps(action.args)
        if not approval.request.actions:
            fields.update({"tool:0": "", "allowed:0": "answer"})
        event = approval_event(approval.approval_id, approval.thread_id)
        pairs = [str(v) for item in fields.items() for v in item]
        approval_id, outcome = await self._create_approval(
            keys=[self.keys.by_interrupt(approval.interrupt_id), self.keys.approval(approval.approval_id),
                  self.keys.pending(approval.channel), self.keys.pending_all,
                  self.keys.thread_approvals(approval.thread_id), self.keys.events],
            args=[approval.approval_id, repr(approval.created_at), event, replaces or "", *pairs],
        )
        if outcome == "created":
            return approval, True
        existing = await self.approval(approval_id)
        if existing is None:
            raise LookupError(f"interrupt {approval.interrupt_id} points at a missing approval {approval_id}")
        if existing.status is ApprovalStatus.PENDING and existing.card_ts is None:
            await self.announce_approval(existing)
        return existing, False

    async def announce_approval(self, approval: Approval) -> None:
        await self.redis.xadd(self.keys.events, {"event": approval_event(approval.approval_id, approval.thread_id)})

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
            replaced_by=fields.get("replaced_by"),
            decisions={int(i): json.loads(d) for i, d in decisions.items()},
        )
        return Approval.model_validate(record)

    async def thread_approvals(self, thread_id: str, limit: int = 20) -> list[Approval]:
        """The thread's latest approvals, newest first."""
        ids = await self.redis.zrevrange(self.keys.thread_approvals(thread_id), 0, limit - 1)
        found = [await self.approval(i) for i in ids]
        return [a for a in found if a]

    async def set_card(self, approval_id: str, ts: str) -> None:
        await self.redis.hset(self.keys.approval(approval_id), "card_ts", ts)

    async def finish(self, approval: Approval, status: ApprovalStatus, error: str | None = None,
                     replaced_by: str | None = None) -> None:
        """Close an approval (resumed, or failed) and mark its card for a refresh."""
        fields: dict[str, Any] = {"status": status.value, "resumed_at": time.time()}
        if error:
            fields["error"] = error
        if replaced_by:
            fields["replaced_by"] = replaced_by
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.approval(approval.approval_id), mapping=fields)
            pipe.zrem(self.keys.pending(approval.channel), approval.approval_id)
            pipe.zrem(self.keys.pending_all, approval.approval_id)
            pipe.zadd(self.keys.refresh_due("card"), {f"card:{approval.approval_id}": now_ms()}, lt=True)
            await pipe.execute()

    async def pending_in(self, channel: str | None = None, limit: int = 100) -> list[Approval]:
        """Pending approvals, newest first: in one channel, or everywhere."""
        key = self.keys.pending(channel) if channel else self.keys.pending_all
        ids = await self.redis.zrevrange(key, 0, limit - 1)
        found = [await self.approval(i) for i in ids]
        return [a for a in found if a and a.status is ApprovalStatus.PENDING]

    # run state and the status line ----------------------------------------

    async def set_run_status(self, thread_id: str, status: RunState) -> None:
        await self.redis.hset(self.keys.run_state(thread_id), "status", status.value)

    async def run_status(self, thread_id: str) -> RunState | None:
        value = await self.redis.hget(self.keys.run_state(thread_id), "status")
        return RunState(value) if value else None

    async def claim_retry(self, thread_id: str) -> bool:
        """Failed -> running, once, whoever clicks Retry how often."""
        return bool(await self._claim_retry(keys=[self.keys.run_state(thread_id)]))

    async def set_progress(self, thread_id: str, progress: str, detail: str = "", debounce_ms: int = 300) -> None:
        """What the run's status line should say; the bot shows the latest (coalesced)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.run_state(thread_id), mapping={"progress": progress, "detail": detail})
            pipe.zadd(self.keys.refresh_due("status"), {f"status:{thread_id}": now_ms() + debounce_ms}, lt=True)
            await pipe.execute()

    async def progress(self, thread_id: str) -> tuple[str, str]:
        progress, detail = await self.redis.hmget(self.keys.run_state(thread_id), ["progress", "detail"])
        return progress or "", detail or ""

    async def status_line(self, thread_id: str) -> str | None:
        return await self.redis.hget(self.keys.run_state(thread_id), "status_ts")

    async def set_status_line(self, thread_id: str, ts: str) -> None:
        await self.redis.hset(self.keys.run_state(thread_id), "status_ts", ts)

    # Slack threads and posts ------------------------------------------------

    async def bind_thread(self, channel: str, root_ts: str, thread_id: str) -> None:
        await self.redis.set(self.keys.slack_thread(channel, root_ts), thread_id)

    async def thread_for(self, channel: str, root_ts: str) -> str | None:
        return await self.redis.get(self.keys.slack_thread(channel, root_ts))

    async def claim_post(self, thread_id: str, post_id: str, owner: str, lease_ms: int) -> tuple[PostClaim, str]:
        """May `owner` (one attempt) make the post `post_id` now?

        Returns (state, the ts when POSTED, else the claim made or met).
        """
        now = now_ms()
        claim = f"claim:{owner}:{now + lease_ms}"
        reply = await self._claim_post(keys=[self.keys.posts(thread_id)], args=[post_id, claim, now])
        state = PostClaim(reply[0])
        return state, reply[1] if state is PostClaim.POSTED else claim

    async def lapse_post(self, thread_id: str, post_id: str, claim: str) -> None:
        """Give up a claim after a failed post; the next attempt looks in Slack before posting."""
        lapsed = claim.rsplit(":", 1)[0] + ":0"
        await self._lapse_post(keys=[self.keys.posts(thread_id)], args=[post_id, claim, lapsed])

    async def save_post(self, thread_id: str, post_id: str, ts: str) -> str | None:
        """Record a post's ts; returns the ts of an earlier copy if someone saved one first."""
        reply = await self._save_post(keys=[self.keys.posts(thread_id)], args=[post_id, ts])
        return reply[1] if reply[0] == "duplicate" else None

    async def posted(self, thread_id: str, post_id: str) -> str | None:
        value = await self.redis.hget(self.keys.posts(thread_id), post_id)
        return value if value and not value.startswith("claim:") else None

    # cosmetic refreshes ------------------------------------------------------

    async def touch_card(self, approval_id: str) -> None:
        """The card should be re-rendered from the record (coalesced: the latest state wins)."""
        await self.redis.zadd(self.keys.refresh_due("card"), {f"card:{approval_id}": now_ms()}, lt=True)

    async def take_due(self, lease_ms: int, count: int = 10) -> list[tuple[str, str]]:
        """Up to `count` (item, token) pairs due now, cards first, claimed for `lease_ms`."""
        taken: list[tuple[str, str]] = []
        for lane in ("card", "status"):
            reply = await self._take_due(keys=[self.keys.refresh_due(lane), self.keys.refresh_claims],
                                         args=[now_ms(), lease_ms, count - len(taken)])
            taken += list(zip(reply[::2], reply[1::2], strict=True))
            if len(taken) >= count:
                break
        return taken

    async def done_due(self, item: str, token: str, retry_at_ms: int | None = None) -> None:
        lane = item.partition(":")[0]
        await self._done_due(keys=[self.keys.refresh_due(lane), self.keys.refresh_claims],
                             args=[item, token, "" if retry_at_ms is None else retry_at_ms])

    async def rate_wait(self, name: str, per_second: float, burst: int) -> float:
        """0 if a call limited to `per_second` (shared by all replicas) may go now, else seconds to wait."""
        waited = await self._rate(keys=[self.keys.rate(name)], args=[max(1, round(1000 / per_second)), burst])
        return int(waited) / 1000

    # decisions ------------------------------------------------------------

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
        """Queue a command; each gets a `command_id` (kept if given) that makes redelivery a no-op."""
        command = {"command_id": new_id(), **command}
        return await self.redis.xadd(self.keys.commands, {"command": dumps(command)})

    async def announce(self, event: Mapping[str, Any]) -> str:
        return await self.redis.xadd(self.keys.events, {"event": dumps(event)})

    async def mark_done(self, command_id: str, ttl_seconds: int = 7 * 86_400) -> None:
        await self.redis.set(self.keys.command_done(command_id), "1", ex=ttl_seconds)

    async def is_done(self, command_id: str) -> bool:
        return bool(await self.redis.exists(self.keys.command_done(command_id)))

    async def once(self, name: str, ttl_seconds: int = 86_400) -> bool:
        """True the first time `name` is seen (dedupe of retried deliveries)."""
        return bool(await self.redis.set(self.keys.dedupe(name), "1", nx=True, ex=ttl_seconds))


def approval_event(approval_id: str, thread_id: str) -> str:
    return dumps({"type": "approval", "approval_id": approval_id, "thread_id": thread_id})


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

