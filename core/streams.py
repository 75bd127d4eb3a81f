"""Stream consumers with work leases: the framework under the runner and the bot.

Each side reads its streams (one per partition) through a Redis consumer group,
so replicas share the work. Who owns an entry is decided by a lease, not by a guess about how
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
* A consumer reads every stream it is given (one per partition, see `keys`),
  each with a reader of its own; an entry's dead letter goes to its own
  partition's dead-letter stream, so parking it and its ack are one step.
* An entry is acknowledged after `handle` returns. One that raises is retried
  with backoff; after `max_deliveries` failures (or deliveries, counting
  crashes) it goes to its partition's dead-letter stream. Lost Redis connections are not
  failures of the entry, nor is anything a handler calls `TryLater` (Slack
  down or answering 5xx): the entry waits and is tried again, as long as it
  takes; the consumer reports itself not ready while Redis is away (`Health`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from redis.exceptions import (
    ResponseError,
)

from core.health import Health
from core.logs import get_logger
from core.messages import Malformed
from core.outages import (
    Backoff,
    TryLater,
    is_lease_lost,
    is_missing_group,
    is_outage,
    pause,
    said_failed,
)

# Reset the idle time of each entry still owned by `consumer`; return the ids it no longer owns.
RENEW_ENTRIES = """
local stream = KEYS[1]
local group, consumer = ARGV[1], ARGV[2]
-- ARGV[3..]: entry ids

local lost = {}
for n = 3, #ARGV do
  local id = ARGV[n]
  local pending = redis.call('XPENDING', stream, group, id, id, 1)
  if pending[1] and pending[1][2] == consumer then
    redis.call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
  else
    lost[#lost + 1] = id
  end
end
return lost
"""


# Acknowledge an entry only if `consumer` still owns it (or nobody: already acknowledged).
ACK_OWN = """
local stream = KEYS[1]
local group, consumer, entry_id = ARGV[1], ARGV[2], ARGV[3]
local pending = redis.call('XPENDING', stream, group, entry_id, entry_id, 1)
if pending[1] and pending[1][2] ~= consumer then return 0 end
redis.call('XACK', stream, group, entry_id)
return 1
"""


if TYPE_CHECKING:
    from core.store import Store

M = TypeVar("M")  # what a consumer's entries carry (a command, an event)

log = get_logger("streams")


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Entry:
    """One stream entry as a consumer holds it."""

    id: str
    fields: Mapping[str, str]
    deliveries: int = 1
    stream: str = ""  # which stream (partition) it came from
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    finished: bool = False  # handled: being acknowledged, no lease to keep
    started: bool = False  # its work began (a runner: the graph runs): never handed back at a stop

    @property
    def key(self) -> EntryKey:
        return self.stream, self.id


EntryKey = tuple[str, str]  # (stream, entry id): ids are unique only within a stream


class StreamConsumer(ABC, Generic[M]):
    """One member of a consumer group on one or more streams (one per partition): leases,
    side-by-side handling, reconnects. Each stream has a reader of its own (on a cluster each
    stream may be on another node, and one read cannot span slots); the work, the concurrency
    and the heartbeat are shared.

    On a stop (SIGTERM, a rolling deploy) nothing new is read; entries not started are handed
    back at once, and started ones finish within the grace, their leases renewed meanwhile.
    A consumer whose handler marks when work starts (`marks_start`) never hands started work
    back: what outlives the grace is cut off with the process (`cut_off`), and its lease lapses
    only then, so no other replica runs it while this one still does."""

    group: str
    kind = "entry"  # what its entries are, in log lines ("command", "event")
    marks_start = False  # False: an entry counts as started once taken (its work is safe to redo)

    def __init__(
        self,
        store: Store,
        streams: Mapping[str, str],
        consumer: str | None = None,
        lease_ms: int = 30_000,
        concurrency: int = 8,
        block_ms: int = 1_000,
        max_deliveries: int = 5,
        health: Health | None = None,
    ):
        self.store = store
        # the consumer group's own calls (read, claim, acknowledge, renew): the streams' side of
        # the Store, which queues the entries (`Store.send`)
        self.redis: Any = store.redis
        self.streams = dict(streams)  # stream -> the dead-letter stream of its entries (same slot)
        self.consumer = consumer or default_consumer()
        self.lease_ms = lease_ms
        self.concurrency = concurrency
        self.block_ms = block_ms
        self.max_deliveries = max_deliveries
        self.health = health or Health()
        self.working = asyncio.Semaphore(concurrency)
        self._entries: dict[EntryKey, Entry] = {}
        self._renew = self.redis.register_script(RENEW_ENTRIES)
        self._ack_own = self.redis.register_script(ACK_OWN)

        self._troubles: dict[str, str] = {}  # stream -> why its reader waits (Redis away)
        self.cut_off: list[Entry] = []  # started work still running when the stop's grace ran out

    @property
    def name(self) -> str:
        return f"{self.group} consumer"

    @abstractmethod
    def decode(self, fields: dict[str, str]) -> M:
        """The entry's message, checked; `Malformed` parks the entry for an operator (never
        retried)."""

    @abstractmethod
    async def handle(self, entry: Entry, message: M) -> None:
        """Do what the message asks; raise to have it retried. It is acknowledged after."""

    async def renew(self) -> list[EntryKey]:
        """Extend what this consumer holds besides its entries; return entries to give up."""
        return []

    # the loop -------------------------------------------------------------

    async def serve(self, stop: asyncio.Event, grace_s: float = 20.0) -> None:
        """Consume until `stop`; then hand back what has not started, and let started work finish
        for up to `grace_s` (see the class)."""
        # A consumer whose heartbeat or a reader died is dead: its leases lapse while it works.
        heart = self.health.supervise(
            f"{self.name} heartbeat", asyncio.create_task(self._heartbeat(stop)), stop
        )
        readers = [
            self.health.supervise(self.name, asyncio.create_task(self._serve_stream(stream, stop)), stop)
            for stream in self.streams
        ]
        try:
            await asyncio.gather(*readers)
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            await self._wind_down(grace_s)
            heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heart

    async def _serve_stream(self, stream: str, stop: asyncio.Event) -> None:
        backoff = Backoff()
        fresh = True
        while not stop.is_set():
            try:
                await self.ensure_group(stream)
                connected_at = time.monotonic()
                if fresh:  # entries left pending under this consumer's name by an earlier life
                    await self._take(await self._read(stream, "0"))
                    fresh = False
                await self._consume(stream, stop, backoff, connected_at)
            except Exception as exc:  # whatever a failover raises: this reader never dies of it
                self._outage(stream, exc)
                await pause(stop, backoff.next())

    def _outage(self, stream: str, exc: BaseException) -> None:
        away = is_outage(exc) or is_missing_group(exc)
        self._troubles[stream] = said_failed(self.name, exc, away, consumer=self.consumer, stream=stream)
        self.health.down(self.name, self._troubles[stream])

    def _reading(self, stream: str) -> None:
        """A reader went round: the consumer is up once none of its readers waits out an outage."""
        self._troubles.pop(stream, None)
        if self._troubles:
            self.health.down(self.name, next(iter(self._troubles.values())))
        else:
            self.health.up(self.name)

    async def ensure_group(self, stream: str) -> None:
        try:
            await self.redis.xgroup_create(stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _consume(self, stream: str, stop: asyncio.Event, backoff: Backoff, connected_at: float) -> None:
        last_reclaim = 0.0
        while not stop.is_set():
            room = self._room()
            if room <= 0:  # busy with what it holds: alive, reading again once there is room
                await self._wait_for_room(stop)
                self._reading(stream)
                continue
            now = time.monotonic()
            # After a reconnect, wait one lease before taking anything over: owners cut off by
            # the same outage beat first.
            settled = now - connected_at > self.lease_ms / 1000
            if settled and now - last_reclaim > min(5.0, self.lease_ms / 4000):
                last_reclaim = now
                await self._reclaim(stream, room)
                room = self._room()
                if room <= 0:
                    continue
            await self._take(await self._read(stream, ">", room, self.block_ms))
            self._reading(stream)  # (after a read that worked: a reader failing every round backs off)
            backoff.reset()

    def _room(self) -> int:
        """How many entries one reader may take now: its streams' share of what is free, so the
        readers together never read far past `max_in_flight` (the rest stays for other replicas)."""
        free = self.max_in_flight - len(self._entries)
        return 0 if free <= 0 else max(1, free // len(self.streams))

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

    async def _read(self, stream: str, start: str, count: int = 100, block: int | None = None) -> list[Entry]:
        reply = await self.redis.xreadgroup(
            self.group, self.consumer, {stream: start}, count=count, block=block
        )
        return [
            Entry(entry_id, fields, stream=stream)
            for _, entries in reply or []
            for entry_id, fields in entries
            if fields
        ]

    async def _reclaim(self, stream: str, room: int) -> None:
        """Take over entries whose owner's lease ran out."""
        _, claimed, _ = await self.redis.xautoclaim(
            stream, self.group, self.consumer, min_idle_time=self.lease_ms, start_id="0-0", count=room
        )
        entries = []
        for entry_id, fields in claimed:
            if not fields or (stream, entry_id) in self._entries:
                continue
            (pending,) = await self.redis.xpending_range(stream, self.group, entry_id, entry_id, 1) or [{}]
            entry = Entry(entry_id, fields, deliveries=int(pending.get("times_delivered", 1)), stream=stream)
            log.warning(
                "lease_expired_taken_over", stream=stream, entry_id=entry_id, deliveries=entry.deliveries
            )
            if entry.deliveries > self.max_deliveries:
                await self.dead_letter(entry, "delivered too often without success")
                continue
            entries.append(entry)
        await self._take(entries)

    async def _take(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.key in self._entries:
                continue
            self._entries[entry.key] = entry
            entry.task = asyncio.create_task(self._work(entry))

    # one entry ------------------------------------------------------------

    async def _work(self, entry: Entry) -> None:
        failures = entry.deliveries - 1
        backoff = Backoff(first=0.5, cap=30.0)
        waiting = Backoff(first=0.5, cap=15.0)
        try:
            while True:
                try:
                    if not self.marks_start:
                        entry.started = True
                    try:
                        message = self.decode(dict(entry.fields))
                    except Malformed as exc:  # kept for an operator (`signoff deadletters`), never retried
                        log.error(f"{self.kind}_malformed", entry_id=entry.id, error=str(exc))
                        await self.dead_letter(entry, f"malformed: {exc}")
                        return
                    await self.handle(entry, message)
                    entry.finished = True
                    await self._ack(entry)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if is_lease_lost(exc):  # another replica has it now: acknowledging would be theirs
                        log.error(
                            "lease_lost_work_stopped", stream=entry.stream, entry_id=entry.id, why=str(exc)
                        )
                        return
                    # Redis away (even wrapped by a library: redisvl does) or Slack down: it waits
                    if isinstance(exc, TryLater) or is_outage(exc):
                        log.warning("entry_waits", stream=entry.stream, entry_id=entry.id, error=repr(exc))
                        await asyncio.sleep(waiting.next())
                        continue
                    failures += 1
                    log.exception(
                        "stream_entry_failed", stream=entry.stream, entry_id=entry.id, failures=failures
                    )
                    if failures >= self.max_deliveries:
                        await self.dead_letter(entry, f"failed too often: {type(exc).__name__}")
                        return
                    await asyncio.sleep(backoff.next())
        except asyncio.CancelledError:
            log.warning("entry_released", stream=entry.stream, entry_id=entry.id)
            raise
        finally:
            self._entries.pop(entry.key, None)

    async def _ack(self, entry: Entry) -> None:
        """Acknowledge, if the entry is still this consumer's (a consumer that was frozen past its
        lease must not acknowledge the new owner's entry); an outage here is waited out (the
        work is done and idempotent if redone)."""
        backoff = Backoff()
        while True:
            try:
                if not await self._ack_own(keys=[entry.stream], args=[self.group, self.consumer, entry.id]):
                    log.warning("entry_not_ours_to_acknowledge", stream=entry.stream, entry_id=entry.id)
                return
            except Exception as exc:
                if not is_outage(exc):
                    raise
                await asyncio.sleep(backoff.next())

    async def dead_letter(self, entry: Entry, why: str) -> None:
        """Park the entry on its partition's dead-letter stream and acknowledge it, in one step."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(
                self.streams[entry.stream],
                {**entry.fields, "stream": entry.stream, "entry_id": entry.id, "why": why},
            )
            pipe.xack(entry.stream, self.group, entry.id)
            await pipe.execute()
        log.error("stream_entry_dead", stream=entry.stream, entry_id=entry.id, why=why)

    # leases ---------------------------------------------------------------

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            held: dict[str, list[str]] = {}
            for entry in self._entries.values():
                if not entry.finished:
                    held.setdefault(entry.stream, []).append(entry.id)
            if not held:
                continue
            # Each partition's renewal side by side and on its own: a master away (failing over,
            # its calls waiting out their timeouts) never delays the leases held on the others.
            renewals = [
                self._renewed(
                    lambda stream=stream, ids=ids: self._renew(
                        keys=[stream], args=[self.group, self.consumer, *ids]
                    ),
                    stream,
                )
                for stream, ids in held.items()
            ]
            lost = [
                key
                for found in await asyncio.gather(*renewals, self._renewed(self.renew, "locks"))
                for key in found
            ]
            for key in lost:
                gave_up = self._entries.get(key)
                if gave_up and gave_up.task and not gave_up.task.done():
                    log.error("lease_lost_work_stopped", stream=gave_up.stream, entry_id=gave_up.id)
                    gave_up.task.cancel()

    async def _renewed(self, renew: Any, what: str) -> list[EntryKey]:
        """What one renewal reports lost: entry ids of `what` (a stream), or entry keys. A renewal
        that fails (Redis away, a failover) loses nothing: the next beat tries again, well
        within the lease; the heartbeat itself never dies of it."""
        try:
            found = await renew()
        except Exception as exc:
            if not (is_outage(exc) or is_missing_group(exc)):
                log.error("lease_renewal_failed", stream=what, error=repr(exc), exc_info=exc)
            else:
                log.warning("lease_renewal_failed", stream=what, error=repr(exc))
            return []
        return [item if isinstance(item, tuple) else (what, str(item)) for item in found]

    async def _wind_down(self, grace_s: float) -> None:
        """On shutdown: hand back at once what has not started; let started work finish within
        `grace_s` (the heartbeat still renews its leases). What is still running then is handed
        back too, unless this consumer marks starts: started work is cut off with the process
        (`cut_off`) and its lease lapses after it, never while it may still run here."""
        waiting = [e for e in self._entries.values() if not e.started and e.task and not e.task.done()]
        await self._hand_back(waiting)
        started = [e.task for e in self._entries.values() if e.task and not e.task.done()]
        if started:
            log.info("finishing_started_work", count=len(started), grace_s=grace_s)
            await asyncio.wait(started, timeout=grace_s)
        left = [e for e in self._entries.values() if e.task and not e.task.done()]
        if self.marks_start and left:
            self.cut_off = left
            log.error(
                "stop_grace_ran_out",
                entries=[e.id for e in left],
                grace_s=grace_s,
                then=f"cut off when this process exits; another replica runs them again once their "
                f"lease lapses ({self.lease_ms / 1000:g}s), as after a crash",
            )
            for entry in left:
                entry.task.cancel()  # type: ignore[union-attr]
            await asyncio.gather(*(e.task for e in left if e.task), return_exceptions=True)
            return
        await self._hand_back(left)

    async def _hand_back(self, entries: list[Entry]) -> None:
        """Stop these entries' work and make them idle as if their lease ran out: another
        consumer takes them at once."""
        for entry in entries:
            if entry.task and not entry.task.done():
                entry.task.cancel()
        for entry in entries:
            if entry.task:
                with contextlib.suppress(BaseException):
                    await entry.task
        by_stream: dict[str, list[str]] = {}
        for entry in entries:
            by_stream.setdefault(entry.stream, []).append(entry.id)
        for stream, ids in by_stream.items():
            with contextlib.suppress(Exception):  # Redis away: their leases lapse by themselves
                await self.redis.xclaim(
                    stream, self.group, self.consumer, 0, ids, idle=self.lease_ms + 1, justid=True
                )
        if entries:
            log.warning("entries_handed_back", count=len(entries))
