"""`signoff runner`: consume start / resume commands, announce what happened.

Commands come from the `commands` stream through the `runners` consumer
group, so several runner replicas share them. A command is acknowledged only
after its outcome is announced; if a runner dies first, its entry stays
pending and another runner (or the same one, restarted) reclaims it after
`claim_idle_ms`. A per-thread lock keeps two runners off one thread, and a
resume is applied only while its interrupt is still the thread's pending one,
so a reclaimed command resumes a thread at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from agent_runner.logs import get_logger
from agent_runner.protocol import DecisionRefused, resume_payload
from agent_runner.runner import Outcome, Runner, RunStatus, StaleAnswer
from agent_runner.store import (
    RUNNERS_GROUP,
    ApprovalStatus,
    Run,
    Store,
    approval_for,
)

log = get_logger("worker")

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass
class WorkerSettings:
    consumer: str = f"{socket.gethostname()}-{os.getpid()}"
    claim_idle_ms: int = 60_000
    lock_ttl_ms: int = 30_000
    block_ms: int = 1_000


class RunnerWorker:
    def __init__(self, store: Store, runners: Mapping[str, Runner], settings: WorkerSettings | None = None):
        self.store = store
        self.runners = dict(runners)
        self.settings = settings or WorkerSettings()
        self._release = store.redis.register_script(_RELEASE)

    async def serve(self, stop: asyncio.Event) -> None:
        await self.store.ensure_groups()
        log.info("runner_started", consumer=self.settings.consumer, graphs=list(self.runners))
        # First whatever this consumer had in flight before a restart.
        await self._drain("0")
        while not stop.is_set():
            await self._reclaim()
            await self._drain(">", block=self.settings.block_ms)

    async def _drain(self, start: str, block: int | None = None) -> None:
        reply = await self.store.redis.xreadgroup(
            RUNNERS_GROUP, self.settings.consumer, {self.store.keys.commands: start}, count=10, block=block
        )
        # Entries of one batch run side by side: a long run does not hold up
        # the resumes of other threads (the thread lock keeps one thread serial).
        await asyncio.gather(
            *(self.handle(entry_id, fields) for _, entries in reply or [] for entry_id, fields in entries)
        )

    async def _reclaim(self) -> None:
        _, entries, _ = await self.store.redis.xautoclaim(
            self.store.keys.commands, RUNNERS_GROUP, self.settings.consumer,
            min_idle_time=self.settings.claim_idle_ms, start_id="0-0", count=10,
        )
        for entry_id, fields in entries:
            if fields:
                log.warning("command_reclaimed", entry_id=entry_id)
                await self.handle(entry_id, fields)

    async def handle(self, entry_id: str, fields: Mapping[str, str]) -> None:
        try:
            command = json.loads(fields["command"])
            thread_id = command["thread_id"]
        except (KeyError, TypeError, ValueError):
            log.error("command_malformed", entry_id=entry_id, fields=dict(fields))
            await self._ack(entry_id)
            return
        with structlog.contextvars.bound_contextvars(
            thread_id=thread_id, approval_id=command.get("approval_id"), interrupt_id=command.get("interrupt_id")
        ):
            token = uuid.uuid4().hex
            lock = self.store.keys.thread_lock(thread_id)
            if not await self._lock(lock, token):
                log.info("thread_busy_later", entry_id=entry_id)
                return  # left pending: reclaimed once the other runner is done
            keeper = asyncio.create_task(self._keep_lock(lock, token))
            try:
                if command.get("type") == "start":
                    await self._start(command)
                elif command.get("type") == "resume":
                    await self._resume(command)
                else:
                    log.error("command_unknown", type=command.get("type"))
                await self._ack(entry_id)
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
                await self._release(keys=[lock], args=[token])

    async def _lock(self, lock: str, token: str, patience_s: float = 5.0) -> bool:
        # A resume often arrives while the run that paused is still wrapping up.
        deadline = asyncio.get_running_loop().time() + patience_s
        while not await self.store.redis.set(lock, token, nx=True, px=self.settings.lock_ttl_ms):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _keep_lock(self, lock: str, token: str) -> None:
        while True:
            await asyncio.sleep(self.settings.lock_ttl_ms / 3000)
            if await self.store.redis.get(lock) == token:
                await self.store.redis.pexpire(lock, self.settings.lock_ttl_ms)

    async def _ack(self, entry_id: str) -> None:
        await self.store.redis.xack(self.store.keys.commands, RUNNERS_GROUP, entry_id)

    def _runner(self, graph: str) -> Runner:
        return self.runners.get(graph) or next(iter(self.runners.values()))

    async def _start(self, command: Mapping[str, Any]) -> None:
        run = await self.store.run(command["thread_id"])
        if run is None:
            log.error("start_without_run")
            return
        outcome = await self._runner(run.graph).start(run.thread_id, command["text"])
        await self._announce(run, outcome)

    async def _resume(self, command: Mapping[str, Any]) -> None:
        approval = await self.store.approval(command["approval_id"])
        if approval is None or approval.status is not ApprovalStatus.RESUMING:
            log.info("resume_skipped", status=approval and approval.status)
            return
        run = await self.store.run(approval.thread_id)
        runner = self._runner(approval.graph)
        pending = {r.interrupt_id for r in await runner.pending(approval.thread_id)}
        if approval.interrupt_id not in pending:
            # Resumed already (a runner died before acknowledging) or superseded.
            log.warning("resume_stale")
            await self.store.finish(approval, ApprovalStatus.STALE)
            await self.store.announce({"type": "resumed", "approval_id": approval.approval_id, "stale": True})
            return
        payload = resume_payload(approval.request, command["decisions"])
        try:
            outcome = await runner.resume(approval.thread_id, {approval.interrupt_id: payload})
        except (DecisionRefused, StaleAnswer) as refused:
            # Cannot happen for sets the bot checked; never guess, never send it.
            log.error("resume_refused", reason=str(refused))
            await self.store.finish(approval, ApprovalStatus.FAILED, error=str(refused))
            await self.store.announce({"type": "resume_failed", "approval_id": approval.approval_id,
                                       "error": str(refused)})
            return
        await self.store.finish(approval, ApprovalStatus.RESUMED)
        await self.store.announce({"type": "resumed", "approval_id": approval.approval_id})
        if run is not None:
            await self._announce(run, outcome)

    async def _announce(self, run: Run, outcome: Outcome) -> None:
        if outcome.status is RunStatus.PAUSED:
            for request in outcome.pending:
                origin = outcome.origins.get(request.interrupt_id, run.graph)
                approval, created = await self.store.create_approval(approval_for(request, run, origin))
                if created:
                    await self.store.announce({"type": "approval", "approval_id": approval.approval_id})
            return
        event: dict[str, Any] = {"type": outcome.status.value, "thread_id": run.thread_id}
        event["answer" if outcome.status is RunStatus.FINISHED else "error"] = outcome.answer or outcome.error
        await self.store.announce(event)


async def start_run(
    store: Store,
    text: str,
    channel: str,
    graph: str,
    thread_id: str | None = None,
    thread_ts: str | None = None,
    requester: str | None = None,
) -> str:
    """Record where the run talks in Slack and queue its start; returns the thread id."""
    thread_id = thread_id or f"run-{uuid.uuid4().hex[:12]}"
    await store.save_run(Run(thread_id=thread_id, graph=graph, channel=channel,
                             thread_ts=thread_ts, requester=requester))
    await store.send_command({"type": "start", "thread_id": thread_id, "text": text})
    return thread_id

