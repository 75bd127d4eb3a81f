"""Redis access for the records and streams both sides share.

Records (runs, approvals, decisions, run states) and their statuses are in
`records`, key names in `keys`, the Lua in `scripts`, stream messages in
`messages`; this is the one place that reads and writes them (recording decisions, time
limits and escalations is `core.decisions`, a part of `Store`). The consumer
framework is `streams`; the bot's own Slack state is `bot.slack_state`.

Streams (one of each per partition, see `keys`; each consumed by a consumer
group with work leases, every partition read by every consumer):

* `commands` (group `runners`): start a run, resume a pause, continue after a failure.
  Every command carries a `command_id`; a command that already took effect is a no-op.
* `events`   (group `bots`):    a pause needs a card; a run finished, failed, or
  refused a decision set.
* `audit`    (no group):        every decision, with the original and edited args.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from core import connections, scripts
from core.config import Settings, StartupError
from core.decisions import Decisions, dumps
from core.keys import BOTS_GROUP, LAYOUT_VERSION, RUNNERS_GROUP, Keys, Partition
from core.messages import ApprovalCreated, Resume, RunFailed, RunFinished, encode, resume_command
from core.records import (
    Approval,
    ApprovalStatus,
    Run,
    RunState,
)


def now_ms() -> int:
    return int(time.time() * 1000)


T = TypeVar("T")

LOCAL_REDIS = "redis://127.0.0.1:6379/0"  # when REDIS_URL is not set
DEFAULT_CLUSTER_PARTITIONS = 12  # spreads evenly over 1, 2, 3, 4, 6 or 12 masters


def redis_client(url: str) -> Any:
    """A client for Signoff's loops and listeners (a cluster client for a cluster).

    Bounded waits: a Redis that is away makes calls fail within seconds (loops
    then back off and reconnect) instead of hanging; 5 s is above the 1 s stream
    blocks. A burst waits for a free connection instead of failing with "Too
    many connections". A pooled connection idle for a few seconds is checked
    (PING) before use, so the first click after a Redis restart does not meet a
    connection the server closed; nothing is ever sent twice. Bytes that are not UTF-8 (written
    by something else: Signoff writes only text) are read with backslash escapes instead of
    failing the whole reply, so one such stream entry cannot stop a consumer or an operator's
    listing.
    """
    return connections.async_client(
        url,
        encoding_errors="backslashreplace",
        socket_timeout=5,
        socket_connect_timeout=2,
        max_connections=64,
        timeout=5,
        health_check_interval=2,
    )


def default_partitions(url: str) -> int:
    """One partition on a single server (or Sentinel's master); on a cluster, enough to spread."""
    return DEFAULT_CLUSTER_PARTITIONS if connections.parse(url).is_cluster else 1


# Keys only the layout before partitions had: one of them there means a migration is due.
LEGACY_MARKS = ("commands", "events", "audit", "pending", "deadletters")


class LayoutError(StartupError):
    """This Redis holds Signoff data laid out otherwise than this process would read it."""


def _merge_newest(batches: Iterable[list[tuple[str, dict[str, str]]]]) -> list[tuple[str, dict[str, str]]]:
    """Stream entries of several partitions, newest first (by entry id: time, then sequence)."""
    return list(heapq.merge(*batches, key=lambda item: entry_order(item[0]), reverse=True))


def _merge_oldest(batches: Iterable[list[tuple[str, dict[str, str]]]]) -> list[tuple[str, dict[str, str]]]:
    return list(heapq.merge(*batches, key=lambda item: entry_order(item[0])))


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry's place: (milliseconds, sequence)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Store(Decisions):
    """Async access to records and streams; shared by runner and bot. Its decisions, time limits
    and escalations are `core.decisions`' part of it."""

    def __init__(self, client: Any, prefix: str = "signoff", partitions: int = 1):
        # Any: redis-py's types cannot tell that decode_responses=True makes every reply a str,
        # and the client is a `Redis` or a `RedisCluster`.
        self.redis: Any = client
        self.keys = Keys(prefix, partitions)
        self._deadline_turn = 0  # the partition `take_deadlines` asks first next time
        self._decide = client.register_script(scripts.DECIDE)
        self._create_approval = client.register_script(scripts.CREATE_APPROVAL)
        self._claim_retry = client.register_script(scripts.CLAIM_RETRY)
        self._set_terms = client.register_script(scripts.SET_TERMS)
        self._escalate = client.register_script(scripts.ESCALATE)
        self._take_due = client.register_script(scripts.TAKE_DUE)
        self._done_due = client.register_script(scripts.DONE_DUE)
        self._tell_once = client.register_script(scripts.TELL_ONCE)

    @classmethod
    def from_url(cls, url: str, prefix: str = "signoff", partitions: int | None = None) -> Store:
        return cls(redis_client(url), prefix, partitions or default_partitions(url))

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        return cls.from_url(settings.redis_url or LOCAL_REDIS, settings.prefix, settings.partitions)

    async def close(self) -> None:
        await self.redis.aclose()

    async def each_partition(self, call: Callable[[Partition], Awaitable[T]]) -> list[T]:
        """`call` on every partition at once (on a cluster, each goes to the node holding it)."""
        return list(await asyncio.gather(*(call(p) for p in self.keys.partitions)))

    async def check_layout(self, record: bool = True) -> None:
        """Refuse to run on keys laid out otherwise: another partition count (this process would
        not see the others' work), the layout before partitions (a migration is due first), or a
        migration cut off halfway. The first process to look records the layout (`record`; an
        operator's read-only command leaves that to the bot or runner)."""
        wanted = {"version": LAYOUT_VERSION, "partitions": self.keys.count}
        if not isinstance(self.redis, AsyncRedisCluster) and await self._is_cluster_node():
            raise LayoutError(connections.CLUSTER_NODE)
        raw = await self.redis.get(self.keys.layout)
        if raw is None:
            legacy = [f"{self.keys.prefix}:{name}" for name in LEGACY_MARKS]
            if any([await self.redis.exists(key) for key in legacy]):
                raise LayoutError(
                    f"Redis holds Signoff data from before partitioned keys (prefix {self.keys.prefix!r}): "
                    "stop every bot and runner and run `signoff migrate` once (see the README, "
                    "'Redis: one server, a cluster, or Sentinel')"
                )
            if not record:
                return
            await self.redis.set(self.keys.layout, dumps(wanted), nx=True)
            raw = await self.redis.get(self.keys.layout)
        found = json.loads(raw)
        if found.get("migrating"):
            raise LayoutError(
                f"a `signoff migrate` of prefix {self.keys.prefix!r} did not finish: run it again "
                "(every bot and runner stopped)"
            )
        if found != wanted:
            raise LayoutError(
                f"Redis holds Signoff data in {found.get('partitions')} partitions (prefix "
                f"{self.keys.prefix!r}) but this process uses {self.keys.count}: set "
                f"SIGNOFF_PARTITIONS={found.get('partitions')} on every bot and runner"
            )

    async def _is_cluster_node(self) -> bool:
        """Whether a one-server client talks to a node of a Redis Cluster (a redis:// URL at one:
        only the keys that node serves would answer, the rest MOVED)."""
        try:
            return int((await self.redis.info("cluster")).get("cluster_enabled", 0)) == 1
        except aioredis.ResponseError:  # INFO refused (a managed Redis): the commands will say
            return False

    async def layout_checked(self) -> bool:
        await self.check_layout()
        return True

    async def ensure_groups(self) -> None:
        await self.check_layout()

        async def create(partition: Partition) -> None:
            for stream, group in ((partition.commands, RUNNERS_GROUP), (partition.events, BOTS_GROUP)):
                try:
                    await self.redis.xgroup_create(stream, group, id="0", mkstream=True)
                except aioredis.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

        await self.each_partition(create)

    # runs ---------------------------------------------------------------

    async def save_run(self, run: Run, only_new: bool = False) -> bool:
        """Keep the run's record; `only_new`: unless it has one (True when written)."""
        return bool(
            await self.redis.set(self.keys.run(run.thread_id), run.model_dump_json(), nx=only_new or None)
        )

    async def run(self, thread_id: str) -> Run | None:
        raw = await self.redis.get(self.keys.run(thread_id))
        return Run.model_validate_json(raw) if raw else None

    async def set_run_state(
        self, thread_id: str, state: RunState, detail: str = "", tool: str = "", debounce_ms: int = 300
    ) -> None:
        """What the run is doing; its Slack status line follows (coalesced: the latest state wins)."""
        partition = self.keys.of(thread_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                self.keys.run_state(thread_id), mapping={"state": state.value, "detail": detail, "tool": tool}
            )
            if state in (RunState.FINISHED, RunState.FAILED):  # idle from now: the retention counts
                pipe.zadd(partition.idle, {thread_id: time.time()})
            else:
                pipe.zrem(partition.idle, thread_id)
            pipe.zadd(
                partition.refresh_due("status"), {f"status:{thread_id}": now_ms() + debounce_ms}, lt=True
            )
            await pipe.execute()

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

    # approvals ----------------------------------------------------------

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
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.approval(approval_id))
            pipe.hgetall(self.keys.decided(approval_id))
            pipe.hgetall(self.keys.votes(approval_id))
            fields, decided, votes = await pipe.execute()
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
            revisions={
                int(k.removeprefix("rev:")): int(v) for k, v in fields.items() if k.startswith("rev:")
            },
        )
        return Approval.model_validate(record)

    async def by_interrupt(self, thread_id: str, interrupt_id: str) -> Approval | None:
        """The approval of one interrupt (the latest, when a refused set was offered again)."""
        approval_id = await self.redis.get(self.keys.by_interrupt(thread_id, interrupt_id))
        return await self.approval(approval_id) if approval_id else None

    async def thread_approvals(self, thread_id: str, limit: int = 20) -> list[Approval]:
        """The thread's latest approvals, newest first."""
        ids = await self.redis.zrevrange(self.keys.thread_approvals(thread_id), 0, limit - 1)
        found = [await self.approval(i) for i in ids]
        return [a for a in found if a]

    async def set_card(self, approval_id: str, ts: str, channel: str | None = None) -> None:
        """Where the approval's card is: its ts, and its channel when not the run's."""
        fields = {"card_ts": ts, **({"card_channel": channel} if channel else {})}
        await self.redis.hset(self.keys.approval(approval_id), mapping=fields)

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

    async def pending_ids(self, channel: str | None = None, limit: int = 100) -> list[str]:
        """Ids of pending approvals, newest first (every partition's, merged): in one channel, or
        everywhere."""

        async def newest(partition: Partition) -> list[tuple[str, float]]:
            key = partition.pending(channel) if channel else partition.pending_all
            return list(await self.redis.zrevrange(key, 0, limit - 1, withscores=True))

        merged = heapq.merge(*await self.each_partition(newest), key=lambda item: item[1], reverse=True)
        return [approval_id for approval_id, _ in merged][:limit]

    async def pending_in(self, channel: str | None = None, limit: int = 100) -> list[Approval]:
        """Pending approvals, newest first: in one channel, or everywhere."""
        found = [await self.approval(i) for i in await self.pending_ids(channel, limit)]
        return [a for a in found if a and a.status is ApprovalStatus.PENDING]

    async def entries(
        self, stream: Callable[[Partition], str], newest: int | None = None, since: str = "-"
    ) -> list[tuple[str, dict[str, str]]]:
        """One stream's entries from every partition, merged: oldest first from `since`, or the
        `newest` of each partition, newest first."""
        if newest is not None:
            return _merge_newest(
                await self.each_partition(lambda p: self.redis.xrevrange(stream(p), count=newest))
            )
        return _merge_oldest(await self.each_partition(lambda p: self.redis.xrange(stream(p), min=since)))

    async def stream_length(self, stream: Callable[[Partition], str]) -> int:
        """Entries in one stream, over every partition."""
        return sum(await self.each_partition(lambda p: self.redis.xlen(stream(p))))

    async def paged(
        self, stream: Callable[[Partition], str], page: int = 500
    ) -> AsyncIterator[tuple[str, dict[str, str]]]:
        """One stream's entries from every partition, oldest first, read a page at a time."""
        starts = {p.index: "-" for p in self.keys.partitions}
        buffers: dict[int, list[tuple[str, dict[str, str]]]] = {}
        while starts or any(buffers.values()):
            for index in [i for i in starts if not buffers.get(i)]:
                found = await self.redis.xrange(
                    stream(self.keys.partitions[index]), min=starts[index], count=page
                )
                buffers[index] = list(found)
                if len(found) < page:
                    del starts[index]  # nothing after this page
                else:
                    ms, seq = entry_order(found[-1][0])
                    starts[index] = f"{ms}-{seq + 1}"
            ready = [i for i, b in buffers.items() if b]
            if not ready:
                return
            index = min(ready, key=lambda i: entry_order(buffers[i][0][0]))
            yield buffers[index].pop(0)

    async def decisions_by(self, user: str, limit: int = 10, scan: int = 500) -> list[dict[str, Any]]:
        """A person's latest decisions, newest first, from the audit streams."""
        found = []
        for _, fields in await self.entries(lambda p: p.audit, newest=scan):
            if fields.get("user") == user:
                found.append(
                    {**fields, "decision": json.loads(fields["decision"]), "at": float(fields["at"])}
                )
                if len(found) >= limit:
                    break
        return found

    async def audit_entries(self) -> list[dict[str, Any]]:
        """Every decision: who, when, the action, the decision and the original arguments."""
        entries = []
        for _, fields in await self.entries(lambda p: p.audit):
            entry: dict[str, Any] = dict(fields)
            entry.update(
                index=int(entry["index"]),
                at=float(entry["at"]),
                decision=json.loads(entry["decision"]),
                original_args=json.loads(entry["original_args"]),
            )
            entries.append(entry)
        return entries

    # streams ------------------------------------------------------------

    async def send(self, message: Any) -> str:
        """Queue a command (on `commands`) or an event (on `events`) of its thread's partition."""
        fields = encode(message)
        partition = self.keys.of(message.thread_id)
        return await self.redis.xadd(partition.commands if "command" in fields else partition.events, fields)

    # runs on an Agent Server (`remote`) ---------------------------------------

    async def remote_sent(self, thread_id: str) -> None:
        """A run Signoff sent to an Agent Server is going on in the thread."""
        await self.redis.zadd(self.keys.of(thread_id).remote_active, {thread_id: time.time()})

    async def remote_seen(self, thread_id: str) -> None:
        """How the thread's last run ended has been seen."""
        await self.redis.zrem(self.keys.of(thread_id).remote_active, thread_id)

    async def remote_unseen(self, sent_before: float) -> list[str]:
        """Threads with a run sent before `sent_before` whose end nobody has seen yet."""
        found = await self.each_partition(lambda p: self.redis.zrangebyscore(p.remote_active, 0, sent_before))
        return [thread_id for threads in found for thread_id in threads]

    async def tell_once(self, run_id: str, event: RunFinished | RunFailed, ttl_seconds: int) -> bool:
        """Queue how an Agent Server run ended, unless someone did (True when this call did)."""
        return bool(
            await self._tell_once(
                keys=[self.keys.remote_told(event.thread_id, run_id), self.keys.of(event.thread_id).events],
                args=[ttl_seconds, encode(event)["event"]],
            )
        )

    async def mark_done(self, thread_id: str, command_id: str, ttl_seconds: int = 7 * 86_400) -> None:
        await self.redis.set(self.keys.command_done(thread_id, command_id), "1", ex=ttl_seconds)

    async def is_done(self, thread_id: str, command_id: str) -> bool:
        return bool(await self.redis.exists(self.keys.command_done(thread_id, command_id)))
