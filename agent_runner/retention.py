"""Bounded storage: what a finished run leaves in Redis goes after `SIGNOFF_RETENTION`.

A run that finishes (or fails) is put in the `idle` sorted set with the time;
running or waiting again takes it out. Every runner replica runs this
janitor: a thread idle for longer than the retention is purged under the
thread's own lock (so a command that continues it meanwhile waits, and a
thread that is in use is never touched):

* its LangGraph checkpoints and writes (the saver's `adelete_thread`),
* its run record, state, Slack posts, Slack-thread binding, and every approval
  it had (record, decisions, votes, the interrupt lookup).

Each partition's `commands`, `events` and `deadletters` streams are trimmed
to the retention by entry id (time), never past an entry a consumer group has
not been given yet or has not acknowledged; `audit` keeps
`SIGNOFF_AUDIT_RETENTION`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_runner import scripts
from agent_runner.health import Health
from agent_runner.keys import BOTS_GROUP, RUNNERS_GROUP
from agent_runner.logs import get_logger
from agent_runner.metrics import REDIS_OUTAGES
from agent_runner.store import Store
from agent_runner.streams import OUTAGE, Backoff, pause

log = get_logger("retention")


@dataclass
class Swept:
    threads: int = 0  # threads purged
    entries: int = 0  # stream entries trimmed


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Janitor:
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

    async def serve(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
        due = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() >= due:
                    swept = await self.sweep()
                    due = time.monotonic() + self.every_s
                    if swept.threads or swept.entries:
                        log.info("retention_swept", threads=swept.threads, entries=swept.entries)
                else:
                    await self.store.redis.ping()
                self.health.up(self.name)  # (readiness wants every loop seen within seconds)
                backoff.reset()
                await pause(stop, min(5.0, self.every_s))
            except OUTAGE as exc:
                self.health.down(self.name, f"Redis unavailable: {type(exc).__name__}")
                log.warning("redis_unavailable", loop=self.name, error=repr(exc))
                REDIS_OUTAGES.labels(self.name).inc()
                await pause(stop, backoff.next())
            except Exception as exc:  # never the runner's end: said, and tried again at the next sweep
                log.error("retention_sweep_failed", error=repr(exc))
                due = time.monotonic() + self.every_s
                await pause(stop, min(5.0, self.every_s))

    async def sweep(self, batch: int = 200) -> Swept:
        now = self.clock()
        swept = Swept()
        cutoff = int((now - self.retention_s) * 1000)
        for partition in self.store.keys.partitions:
            idle = await self.store.redis.zrangebyscore(
                partition.idle, "-inf", now - self.retention_s, 0, batch
            )
            for thread_id in idle:
                try:
                    if await self.purge(thread_id, now):
                        swept.threads += 1
                except OUTAGE:
                    raise
                except Exception as exc:  # one unreadable thread never stops the janitor (or the runner)
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
        redis, keys = self.store.redis, self.store.keys
        lock = keys.thread_lock(thread_id)
        if not await self._take_lock(keys=[lock], args=[self.token, 120_000]):
            return False  # a command is working on it: not idle after all
        try:
            raw = await redis.get(keys.run(thread_id))
            binding = ""
            if raw:
                try:
                    fields = json.loads(raw)
                    if fields.get("channel") and fields.get("thread_ts"):
                        binding = keys.slack_thread(str(fields["channel"]), str(fields["thread_ts"]))
                except ValueError:
                    pass  # an unreadable record: it goes all the same
            claimed = await self._claim(
                keys=[keys.of(thread_id).idle, keys.run_state(thread_id), keys.run(thread_id)],
                args=[thread_id, repr(now - self.retention_s)],
            )
            if not claimed:
                return False  # continued meanwhile: it is put back in `idle` when it ends
            if binding:  # (a key of no run: its own slot) unless a new run was bound there since
                await self._release(keys=[binding], args=[thread_id])
            await self._delete_records(thread_id)
            await self.saver.adelete_thread(thread_id)
            log.info("thread_purged", thread_id=thread_id)
            return True
        finally:
            await self._release(keys=[lock], args=[self.token])

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
                    floor, _stream_id(info["last-delivered-id"]) if info["last-delivered-id"] else (0, 0)
                )
                pending = await redis.xpending(stream, group)
                if pending and pending.get("pending"):
                    floor = min(floor, _stream_id(pending["min"]))
        if floor <= (0, 0):
            return 0
        return int(await redis.xtrim(stream, minid=f"{floor[0]}-{floor[1]}", approximate=False))
