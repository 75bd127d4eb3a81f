"""Stream consumers with work leases: the framework under the runner and the bot.

Each side reads its stream through a Redis consumer group, so replicas share
the work. Who owns an entry is decided by a lease, not by a guess about how
long work takes:

* An entry read (or reclaimed) by a consumer is its own while it works on it:
  every `lease_ms / 3` a heartbeat resets the entry's idle time (XCLAIM to
  itself, JUSTID, in one script that first checks the entry is still its own).
  A 75-second tool keeps its command; nobody else starts it a second time.
* Only an entry idle for longer than `lease_ms` (its owner stopped beating:
  it died, or lost Redis for that long) is taken over (XAUTOCLAIM). An owner
  whose lease was taken stops its work for that entry.
* After a reconnect a consumer waits one lease before taking anything over,
  so owners that were cut off by the same outage can beat first.
* Entries are handled side by side up to `concurrency`, each in its own task:
  one slow entry never holds up the next one (no head-of-line blocking).
* An entry is acknowledged after `handle` returns. One that raises is retried
  with backoff; after `max_deliveries` failures (or deliveries, counting
  crashes) it goes to the dead-letter stream. Lost Redis connections are not
  failures of the entry, nor is anything a handler calls `TryLater` (Slack
  down or answering 5xx): the entry waits and is tried again, as long as it
  takes; the consumer reports itself not ready while Redis is away (`Health`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_runner import scripts
from agent_runner.health import Health
from agent_runner.logs import get_logger
from agent_runner.metrics import REDIS_OUTAGES

log = get_logger("streams")

# Redis being away (restarted, paused, failing over, connection killed) is not an
# entry's fault: wait and try again. BusyLoadingError is a ConnectionError.
OUTAGE = (RedisConnectionError, RedisTimeoutError, ConnectionError)


class TryLater(Exception):
    """A handler's way to say: a dependency is down, not this entry's fault; try again later."""


def is_outage(exc: BaseException) -> bool:
    """Redis being away, even when a library wrapped the error (redisvl does)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OUTAGE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def is_missing_group(exc: BaseException) -> bool:
    """NOGROUP: the stream or its group vanished (a Redis restarted without persistence)."""
    return isinstance(exc, ResponseError) and "NOGROUP" in str(exc)


class Backoff:
    """Exponential backoff with jitter: 0.1 s doubling up to `cap` seconds."""

    def __init__(self, first: float = 0.1, cap: float = 5.0):
        self.first, self.cap, self.tries = first, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2**self.tries)
        self.tries += 1
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.tries = 0


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep, but wake up at once when `stop` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


@dataclass
class Entry:
    """One stream entry as a consumer holds it."""

    id: str
    fields: Mapping[str, str]
    deliveries: int = 1
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    finished: bool = False  # handled: being acknowledged, no lease to keep


class StreamConsumer(ABC):
    """One member of a consumer group: leases, side-by-side handling, reconnects."""

    stream: str
    group: str

    def __init__(
        self,
        client: aioredis.Redis,
        dead_letters: str,
        consumer: str | None = None,
        lease_ms: int = 30_000,
        concurrency: int = 8,
        block_ms: int = 1_000,
        max_deliveries: int = 5,
        health: Health | None = None,
    ):
        self.redis: Any = client  # replies are str (decode_responses=True), which redis-py's types cannot say
        self.dead_letters = dead_letters
        self.consumer = consumer or default_consumer()
        self.lease_ms = lease_ms
        self.concurrency = concurrency
        self.block_ms = block_ms
        self.max_deliveries = max_deliveries
        self.health = health or Health()
        self.working = asyncio.Semaphore(concurrency)
        self._entries: dict[str, Entry] = {}
        self._renew = client.register_script(scripts.RENEW_ENTRIES)
        self._connected_at = 0.0

    @property
    def name(self) -> str:
        return f"{self.group} consumer"

    @abstractmethod
    async def handle(self, entry: Entry) -> None:
        """Do what the entry asks; raise to have it retried. It is acknowledged after."""

    async def renew(self) -> list[str]:
        """Extend what this consumer holds besides its entries; return entry ids to give up."""
        return []

    # the loop -------------------------------------------------------------

    async def serve(self, stop: asyncio.Event, grace_s: float = 20.0) -> None:
        """Consume until `stop`; then finish in-flight work for up to `grace_s`, hand back the rest."""
        heart = asyncio.create_task(self._heartbeat(stop))
        backoff = Backoff()
        fresh = True
        try:
            while not stop.is_set():
                try:
                    await self.ensure_group()
                    self._connected_at = time.monotonic()
                    if fresh:  # entries left pending under this consumer's name by an earlier life
                        await self._take(await self._read("0"))
                        fresh = False
                    await self._consume(stop, backoff)
                except OUTAGE as exc:
                    self._outage(exc)
                    await pause(stop, backoff.next())
                except ResponseError as exc:
                    if not is_missing_group(exc):
                        raise
                    self._outage(exc)
                    await pause(stop, backoff.next())
        finally:
            await self._wind_down(grace_s)
            heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heart

    def _outage(self, exc: BaseException) -> None:
        self.health.down(self.name, f"Redis unavailable: {type(exc).__name__}")
        log.warning("redis_unavailable", consumer=self.consumer, stream=self.stream, error=repr(exc))
        REDIS_OUTAGES.labels(self.name).inc()

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _consume(self, stop: asyncio.Event, backoff: Backoff) -> None:
        last_reclaim = 0.0
        while not stop.is_set():
            self.health.up(self.name)
            backoff.reset()
            room = self.max_in_flight - len(self._entries)
            if room <= 0:
                await self._wait_for_room(stop)
                continue
            now = time.monotonic()
            settled = now - self._connected_at > self.lease_ms / 1000
            if settled and now - last_reclaim > min(5.0, self.lease_ms / 4000):
                last_reclaim = now
                await self._reclaim(room)
                room = self.max_in_flight - len(self._entries)
                if room <= 0:
                    continue
            await self._take(await self._read(">", room, self.block_ms))

    @property
    def max_in_flight(self) -> int:
        # Entries waiting on a busy thread hold no working slot, so read ahead a little.
        return self.concurrency * 4

    async def _wait_for_room(self, stop: asyncio.Event) -> None:
        tasks = [e.task for e in self._entries.values() if e.task]
        if tasks:
            await asyncio.wait(tasks, timeout=self.block_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
        else:
            await pause(stop, self.block_ms / 1000)

    async def _read(self, start: str, count: int = 100, block: int | None = None) -> list[Entry]:
        reply = await self.redis.xreadgroup(
            self.group, self.consumer, {self.stream: start}, count=count, block=block
        )
        return [
            Entry(entry_id, fields) for _, entries in reply or [] for entry_id, fields in entries if fields
        ]

    async def _reclaim(self, room: int) -> None:
        """Take over entries whose owner's lease ran out."""
        _, claimed, _ = await self.redis.xautoclaim(
            self.stream, self.group, self.consumer, min_idle_time=self.lease_ms, start_id="0-0", count=room
        )
        entries = []
        for entry_id, fields in claimed:
            if not fields or entry_id in self._entries:
                continue
            (pending,) = await self.redis.xpending_range(self.stream, self.group, entry_id, entry_id, 1) or [
                {}
            ]
            entry = Entry(entry_id, fields, deliveries=int(pending.get("times_delivered", 1)))
            log.warning(
                "lease_expired_taken_over", stream=self.stream, entry_id=entry_id, deliveries=entry.deliveries
            )
            if entry.deliveries > self.max_deliveries:
                await self.dead_letter(entry, "delivered too often without success")
                continue
            entries.append(entry)
        await self._take(entries)

    async def _take(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.id in self._entries:
                continue
            self._entries[entry.id] = entry
            entry.task = asyncio.create_task(self._work(entry))

    # one entry ------------------------------------------------------------

    async def _work(self, entry: Entry) -> None:
        failures = entry.deliveries - 1
        backoff = Backoff(first=0.5, cap=30.0)
        waiting = Backoff(first=0.5, cap=15.0)
        try:
            while True:
                try:
                    await self.handle(entry)
                    entry.finished = True
                    await self._ack(entry)
                    return
                except asyncio.CancelledError:
                    raise
                except (*OUTAGE, TryLater) as exc:
                    log.warning("entry_waits", stream=self.stream, entry_id=entry.id, error=repr(exc))
                    await asyncio.sleep(waiting.next())
                except Exception:
                    failures += 1
                    log.exception(
                        "stream_entry_failed", stream=self.stream, entry_id=entry.id, failures=failures
                    )
                    if failures >= self.max_deliveries:
                        await self.dead_letter(entry, "failed too often")
                        return
                    await asyncio.sleep(backoff.next())
        except asyncio.CancelledError:
            log.warning("entry_released", stream=self.stream, entry_id=entry.id)
            raise
        finally:
            self._entries.pop(entry.id, None)

    async def _ack(self, entry: Entry) -> None:
        """Acknowledge; an outage here is waited out (the work is done and idempotent if redone)."""
        backoff = Backoff()
        while True:
            try:
                await self.redis.xack(self.stream, self.group, entry.id)
                return
            except OUTAGE:
                await asyncio.sleep(backoff.next())

    async def dead_letter(self, entry: Entry, why: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(
                self.dead_letters, {**entry.fields, "stream": self.stream, "entry_id": entry.id, "why": why}
            )
            pipe.xack(self.stream, self.group, entry.id)
            await pipe.execute()
        log.error("stream_entry_dead", stream=self.stream, entry_id=entry.id, why=why)

    # leases ---------------------------------------------------------------

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            held = [entry_id for entry_id, entry in self._entries.items() if not entry.finished]
            if not held:
                continue
            try:
                lost = [
                    str(i)
                    for i in await self._renew(keys=[self.stream], args=[self.group, self.consumer, *held])
                ]
                lost += await self.renew()
            except OUTAGE as exc:
                log.warning("lease_renewal_failed", stream=self.stream, error=repr(exc))
                continue
            except ResponseError as exc:
                if not is_missing_group(exc):
                    raise
                continue
            for entry_id in lost:
                entry = self._entries.get(entry_id)
                if entry and entry.task and not entry.task.done():
                    log.error("lease_lost_work_stopped", stream=self.stream, entry_id=entry_id)
                    entry.task.cancel()

    async def _wind_down(self, grace_s: float) -> None:
        """On shutdown: let in-flight work finish, then hand the rest back for others to take."""
        tasks = [e.task for e in self._entries.values() if e.task and not e.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        left = list(self._entries.values())
        for entry in left:
            if entry.task and not entry.task.done():
                entry.task.cancel()
        for entry in left:
            if entry.task:
                with contextlib.suppress(BaseException):
                    await entry.task
        if left:
            with contextlib.suppress(*OUTAGE, ResponseError):
                # Idle as if the lease ran out: another consumer takes them at once.
                await self.redis.xclaim(
                    self.stream,
                    self.group,
                    self.consumer,
                    0,
                    [e.id for e in left],
                    idle=self.lease_ms + 1,
                    justid=True,
                )
            log.warning("entries_handed_back", stream=self.stream, count=len(left))
