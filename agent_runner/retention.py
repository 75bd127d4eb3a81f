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
`SIGNOFF_AUDIT_RETENTION`, and a checkpoint entry written with each trim keeps its hash
chain verifiable (`core.audit_chain`).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core.health import Health
from core.keys import BOTS_GROUP, RUNNERS_GROUP
from core.logs import get_logger
from core.loops import Loop
from core.outages import is_outage
from core.store import Store

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
        self._due = 0.0

    async def turn(self) -> float:
        if time.monotonic() >= self._due:
            self._due = time.monotonic() + self.every_s
            swept = await self.sweep()
            if swept.threads or swept.entries:
                log.info("retention_swept", threads=swept.threads, entries=swept.entries)
        else:
            await self.store.ping()  # (readiness wants every loop seen within seconds)
        return min(5.0, self.every_s)

    async def sweep(self, batch: int = 200) -> Swept:
        now = self.clock()
        swept = Swept()
        cutoff = int((now - self.retention_s) * 1000)
        for partition in self.store.keys.partitions:
            # purges cut off before (a janitor killed mid-way), then threads idle long enough
            for thread_id, binding in await self.store.retention.purges_cut_off(partition, batch):
                try:
                    if await self._purging(thread_id, functools.partial(self._finish, thread_id, binding)):
                        swept.threads += 1
                except Exception as exc:  # tried again at the next sweep; the others go on
                    if is_outage(exc):
                        raise
                    log.error("thread_purge_failed", thread_id=thread_id, error=repr(exc), resumed=True)
            for thread_id in await self.store.retention.idle_threads(
                partition, now - self.retention_s, batch
            ):
                try:
                    if await self.purge(thread_id, now):
                        swept.threads += 1
                except Exception as exc:  # one unreadable thread never stops the janitor (or the runner)
                    if is_outage(exc):
                        raise
                    log.error("thread_purge_failed", thread_id=thread_id, error=repr(exc))
                    await self.store.retention.idle_again(thread_id, now)  # again in a retention
            swept.entries += await self.trim(partition.commands, RUNNERS_GROUP, cutoff)
            swept.entries += await self.trim(partition.events, BOTS_GROUP, cutoff)
            swept.entries += await self.trim(partition.dead_letters, None, cutoff)
            swept.entries += await self.store.retention.trim_audit(
                partition, int((now - self.audit_retention_s) * 1000)
            )
        return swept

    async def purge(self, thread_id: str, now: float) -> bool:
        """Delete a thread idle past the retention; False if it is in use.

        The thread's lock keeps the runner away meanwhile; the claim (one script) takes the
        thread out of reach of the bot first: after it, a reply or a Retry finds no run (a
        reply in a Slack thread bound to a thread without a run starts a new one).
        """

        async def claimed_then_finished() -> bool:
            claimed, binding = await self.store.retention.claim_purge(thread_id, now - self.retention_s)
            if not claimed:
                return False  # continued meanwhile: it is put back in `idle` when it ends
            return await self._finish(thread_id, binding)

        return await self._purging(thread_id, claimed_then_finished)

    async def _purging(self, thread_id: str, work: Callable[[], Awaitable[bool]]) -> bool:
        """`work` under the thread's lock; False when a command (or another janitor) holds it."""
        if not await self.store.locks.take(thread_id, self.token, 120_000):
            return False  # a command is working on it: not idle after all
        try:
            return await work()
        finally:
            await self.store.locks.release(self.store.keys.thread_lock(thread_id), self.token)

    async def _finish(self, thread_id: str, binding: str) -> bool:
        """Everything of a claimed thread goes (each step safe to repeat), then its `purging` note."""
        if binding:  # (a key of no run: its own slot) unless a new run was bound there since
            await self.store.locks.release(binding, thread_id)
        await self.store.retention.delete_thread_records(thread_id)
        await self.saver.adelete_thread(thread_id)
        await self.store.retention.purge_done(thread_id)
        log.info("thread_purged", thread_id=thread_id)
        return True

    async def trim(self, stream: str, group: str | None, cutoff_ms: int) -> int:
        """Drop entries older than `cutoff_ms`, keeping every entry `group` still needs."""
        return await self.store.retention.trim_stream(stream, group, cutoff_ms)
