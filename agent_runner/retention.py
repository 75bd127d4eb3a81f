"""Bounded storage: what a finished run leaves in Redis goes after `SIGNOFF_RETENTION`.

A run that finishes (or fails) is put in the `idle` sorted set with the time;
running or waiting again takes it out. Every runner replica runs this
janitor: a thread idle for longer than the retention is purged under the
thread's own lock (so a command that continues it meanwhile waits, and a
thread that is in use is never touched):

* its LangGraph checkpoints and writes (the saver's `adelete_thread`),
* its run record, state, Slack posts, Slack-thread binding, and every approval
  it had (record, decisions, votes, the interrupt lookup).

A purge is noted in the partition's `purging` hash from its claim to its end: one cut
off (the runner killed, Redis away half-way) is finished by a later sweep, once the
thread's lock has lapsed, so no checkpoint is left behind for ever.

Each partition's `commands`, `events` and `deadletters` streams are trimmed
to the retention by entry id (time), never past an entry a consumer group has
not been given yet or has not acknowledged; `audit` keeps
`SIGNOFF_AUDIT_RETENTION`.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core import scripts
from core.health import Health
from core.keys import BOTS_GROUP, RUNNERS_GROUP
from core.logs import get_logger
from core.loops import Loop
from core.store import Store, entry_order
from core.streams import is_outage

log = get_logger("retention")


@dataclass
class Swept:
    threads: int = 0  # threads purged
    entries: int = 0  # stream entries trimmed


class Janitor(Loop):
    name = "retention janitor"

    def __init__(
        self,
        store: Store,
        saver: Any,
        retention_s: int,
        audit_retention_s: int,
        health: Health | None = None,
        every_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.saver = saver  # the checkpointer: `adelete_thread(thread_id)`
        self.retention_s = retention_s
        self.audit_retention_s = audit_retention_s
        self.health = health or Health()
        self.every_s = every_s if every_s is not None else min(60.0, max(1.0, retention_s / 4))
        self.clock = clock
        self.token = f"janitor:{uuid.uuid4().hex[:12]}"
        self._take_lock = store.redis.register_script(scripts.TAKE_LOCK)
        self._release = store.redis.register_script(scripts.RELEASE_LOCK)
        self._claim = store.redis.register_script(scripts.CLAIM_PURGE)
        self._due = 0.0

    async def turn(self) -> float:
        if time.monotonic() >= self._due:
            self._due = time.monotonic() + self.every_s
            swept = await self.sweep()
            if swept.threads or swept.entries:
                log.info("retention_swept", threads=swept.threads, entries=swept.entries)
        else:
            await self.store.redis.ping()  # (readiness wants every loop seen within seconds)
        return min(5.0, self.every_s)

    async def sweep(self, batch: int = 200) -> Swept:
        now = self.clock()
        swept = Swept()
        cutoff = int((now - self.retention_s) * 1000)
        for partition in self.store.keys.partitions:
            # purges cut off before (a janitor killed mid-way), then threads idle long enough
            unfinished = await self.store.redis.hgetall(partition.purging)
            for thread_id, binding in list(unfinished.items())[:batch]:
                try:
                    if await self._purging(thread_id, functools.partial(self._finish, thread_id, binding)):
                        swept.threads += 1
                except Exception as exc:  # tried again at the next sweep; the others go on
                    if is_outage(exc):
                        raise
                    log.error("thread_purge_failed", thread_id=thread_id, error=repr(exc), resumed=True)
            idle = await self.store.redis.zrangebyscore(
                partition.idle, "-inf", now - self.retention_s, 0, batch
            )
            for thread_id in idle:
                try:
                    if await self.purge(thread_id, now):
                        swept.threads += 1
                except Exception as exc:  # one unreadable thread never stops the janitor (or the runner)
                    if is_outage(exc):
                        raise
                    log.error("thread_purge_failed", thread_id=thread_id, error=repr(exc))
                    await self.store.redis.zadd(partition.idle, {thread_id: now})  # again in a retention
            swept.entries += await self.trim(partition.commands, RUNNERS_GROUP, cutoff)
            swept.entries += await self.trim(partition.events, BOTS_GROUP, cutoff)
            swept.entries += await self.trim(partition.dead_letters, None, cutoff)
            swept.entries += await self.trim(
                partition.audit, None, int((now - self.audit_retention_s) * 1000)
            )
        return swept

    async def purge(self, thread_id: str, now: float) -> bool:
        """Delete a thread idle past the retention; False if it is in use.

        The thread's lock keeps the runner away meanwhile; the claim (one script) takes the
        thread out of reach of the bot first: after it, a reply or a Retry finds no run (a
        reply in a Slack thread bound to a thread without a run starts a new one).
        """

        async def claimed_then_finished() -> bool:
            redis, keys = self.store.redis, self.store.keys
            raw = await redis.get(keys.run(thread_id))
            binding = ""
            if raw:
                try:
                    fields = json.loads(raw)
                    if fields.get("channel") and fields.get("thread_ts"):
                        binding = keys.slack_thread(str(fields["channel"]), str(fields["thread_ts"]))
                except ValueError:
                    pass  # an unreadable record: it goes all the same
            partition = keys.of(thread_id)
            claimed = await self._claim(
                keys=[partition.idle, keys.run_state(thread_id), keys.run(thread_id), partition.purging],
                args=[thread_id, repr(now - self.retention_s), binding],
            )
            if not claimed:
                return False  # continued meanwhile: it is put back in `idle` when it ends
            return await self._finish(thread_id, binding)

        return await self._purging(thread_id, claimed_then_finished)

    async def _purging(self, thread_id: str, work: Callable[[], Awaitable[bool]]) -> bool:
        """`work` under the thread's lock; False when a command (or another janitor) holds it."""
        lock = self.store.keys.thread_lock(thread_id)
        if not await self._take_lock(keys=[lock], args=[self.token, 120_000]):
            return False  # a command is working on it: not idle after all
        try:
            return await work()
        finally:
            await self._release(keys=[lock], args=[self.token])

    async def _finish(self, thread_id: str, binding: str) -> bool:
        """Everything of a claimed thread goes (each step safe to repeat), then its `purging` note."""
        if binding:  # (a key of no run: its own slot) unless a new run was bound there since
            await self._release(keys=[binding], args=[thread_id])
        await self._delete_records(thread_id)
        await self.saver.adelete_thread(thread_id)
        await self.store.redis.hdel(self.store.keys.of(thread_id).purging, thread_id)
        log.info("thread_purged", thread_id=thread_id)
        return True

    async def _delete_records(self, thread_id: str) -> None:
        redis, keys = self.store.redis, self.store.keys
        partition = keys.of(thread_id)
        approvals = await redis.zrange(keys.thread_approvals(thread_id), 0, -1)
        doomed = [keys.posts(thread_id), keys.thread_approvals(thread_id)]
        pending: list[tuple[str, str]] = []
        for approval_id in approvals:
            channel = await redis.hget(keys.approval(approval_id), "record")
            if channel:
                try:
                    pending.append((approval_id, str(json.loads(channel).get("channel", ""))))
                except ValueError:
                    pass
            interrupt_id = await redis.hget(keys.approval(approval_id), "interrupt_id")
            if interrupt_id and await redis.get(keys.by_interrupt(thread_id, interrupt_id)) == approval_id:
                doomed.append(keys.by_interrupt(thread_id, interrupt_id))
            doomed += [
                keys.approval(approval_id),
                keys.decided(approval_id),
                keys.decisions(approval_id),
                keys.votes(approval_id),
                keys.command_done(thread_id, f"resume-{approval_id}"),
            ]
        async with redis.pipeline(transaction=True) as pipe:
            pipe.delete(*doomed)
            for approval_id, channel in pending:  # (one closed unanswered, or never resumed)
                pipe.zrem(partition.pending_all, approval_id)
                pipe.zrem(partition.pending(channel), approval_id)
            pipe.zrem(partition.refresh_due("status"), f"status:{thread_id}")
            if approvals:
                pipe.zrem(partition.refresh_due("card"), *(f"card:{a}" for a in approvals))
            await pipe.execute()

    async def trim(self, stream: str, group: str | None, cutoff_ms: int) -> int:
        """Drop entries older than `cutoff_ms`, keeping every entry `group` still needs."""
        redis = self.store.redis
        floor = (cutoff_ms, 0)
        if group is not None:
            try:
                groups = await redis.xinfo_groups(stream)
            except Exception:  # no such stream yet
                return 0
            for info in groups:
                if info["name"] != group:
                    continue
                floor = min(
                    floor, entry_order(info["last-delivered-id"]) if info["last-delivered-id"] else (0, 0)
                )
                pending = await redis.xpending(stream, group)
                if pending and pending.get("pending"):
                    floor = min(floor, entry_order(pending["min"]))
        if floor <= (0, 0):
            return 0
        return int(await redis.xtrim(stream, minid=f"{floor[0]}-{floor[1]}", approximate=False))
