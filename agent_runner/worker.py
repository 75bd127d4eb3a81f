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
import time
import uuid
from collections.abc import Mapping
from typing import Any

import structlog

from agent_runner.checkpointer import AsyncRedisCheckpointer
from agent_runner.config import Settings
from agent_runner.graphs import build_graph, graph_specs
from agent_runner.logs import get_logger
from agent_runner.protocol import DecisionRefused, resume_payload
from agent_runner.runner import Outcome, Runner, RunStatus, StaleAnswer
from agent_runner.store import (
    RUNNERS_GROUP,
    Approval,
    ApprovalStatus,
    Run,
    RunState,
    Store,
    StreamConsumer,
    approval_for,
)

log = get_logger("worker")

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class UnknownGraph(LookupError):
    """A command for a graph this runner does not have."""


class RunnerWorker(StreamConsumer):
    """Handles the `commands` stream for the graphs it was given, by name."""

    group = RUNNERS_GROUP

    def __init__(self, store: Store, runners: Mapping[str, Runner], consumer: str | None = None,
                 claim_idle_ms: int = 60_000, lock_ttl_ms: int = 30_000, block_ms: int = 1_000):
        super().__init__(store, consumer, claim_idle_ms, block_ms)
        self.stream = store.keys.commands
        self.runners = dict(runners)
        self.lock_ttl_ms = lock_ttl_ms
        self._release = store.redis.register_script(_RELEASE)
        self._last_progress: dict[str, float] = {}
        for runner in self.runners.values():
            runner.on_tool = runner.on_tool or self._tool_started

    async def progress(self, thread_id: str, state: str, detail: str = "", every_s: float = 0.0) -> None:
        """Tell the bot how the run is doing (its status line); `every_s` throttles chatty kinds."""
        now = time.monotonic()
        if every_s and now - self._last_progress.get(thread_id, 0.0) < every_s:
            return
        self._last_progress[thread_id] = now
        await self.store.announce({"type": "progress", "thread_id": thread_id, "state": state, "detail": detail})

    async def _tool_started(self, thread_id: str, tool: str) -> None:
        await self.progress(thread_id, "tool", tool, every_s=1.0)

    async def handle(self, entry_id: str, fields: Mapping[str, str]) -> None:
        try:
            command = json.loads(fields["command"])
            if "decisions" in fields:  # a resume: the decisions as they were sent
                command["decisions"] = json.loads(fields["decisions"])
            thread_id = command["thread_id"]
        except (KeyError, TypeError, ValueError):
            log.error("command_malformed", entry_id=entry_id, fields=dict(fields))
            await self.ack(entry_id)
            return
        context = {k: command[k] for k in ("approval_id", "interrupt_id") if command.get(k)}
        with structlog.contextvars.bound_contextvars(thread_id=thread_id, **context):
            token = uuid.uuid4().hex
            lock = self.store.keys.thread_lock(thread_id)
            if not await self._lock(lock, token):
                # Another runner holds this thread (a long run): queue the command again
                # rather than let it count as a failed delivery.
                log.info("thread_busy_requeued", entry_id=entry_id)
                await self.store.redis.xadd(self.stream, dict(fields))
                await self.ack(entry_id)
                return
            keeper = asyncio.create_task(self._keep_lock(lock, token))
            try:
                if command.get("type") == "start":
                    await self._start(entry_id, command)
                elif command.get("type") == "resume":
                    await self._resume(command)
                elif command.get("type") == "continue":
                    await self._continue(command)
                else:
                    log.error("command_unknown", type=command.get("type"))
                await self.ack(entry_id)
            except UnknownGraph as missing:
                # Never run another graph in its place: say so in the run's thread.
                log.error("graph_unknown", error=str(missing))
                await self.store.set_run_status(thread_id, RunState.FAILED)
                await self.store.announce({"type": "failed", "thread_id": thread_id, "error": str(missing)})
                await self.ack(entry_id)
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
                await self._release(keys=[lock], args=[token])

    async def _lock(self, lock: str, token: str, patience_s: float = 5.0) -> bool:
        # A resume often arrives while the run that paused is still wrapping up.
        deadline = asyncio.get_running_loop().time() + patience_s
        while not await self.store.redis.set(lock, token, nx=True, px=self.lock_ttl_ms):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _keep_lock(self, lock: str, token: str) -> None:
        while True:
            await asyncio.sleep(self.lock_ttl_ms / 3000)
            if await self.store.redis.get(lock) == token:
                await self.store.redis.pexpire(lock, self.lock_ttl_ms)

    def _runner(self, graph: str) -> Runner:
        try:
            return self.runners[graph]
        except KeyError:
            raise UnknownGraph(f"this runner has no graph {graph!r} (it has: {', '.join(self.runners)})") from None

    async def _start(self, entry_id: str, command: Mapping[str, Any]) -> None:
        run = await self.store.run(command["thread_id"])
        if run is None:
            log.error("start_without_run")
            return
        runner = self._runner(run.graph)
        await self.store.set_run_status(run.thread_id, RunState.RUNNING)
        await self.progress(run.thread_id, "started")
        if await self.store.once(f"start:{entry_id}"):
            outcome = await runner.start(run.thread_id, command["text"])
        else:
            # Reclaimed after a runner died: never send the message twice, pick the run up.
            outcome = await runner.current(run.thread_id) or await runner.proceed(run.thread_id)
        await self._announce(run, outcome)

    async def _continue(self, command: Mapping[str, Any]) -> None:
        """Retry after a failure: continue the run from its last checkpoint."""
        run = await self.store.run(command["thread_id"])
        if run is None:
            return
        await self.progress(run.thread_id, "started", "retrying")
        await self._announce(run, await self._runner(run.graph).proceed(run.thread_id))

    async def _resume(self, command: Mapping[str, Any]) -> None:
        approval = await self.store.approval(command["approval_id"])
        if approval is None or approval.status is not ApprovalStatus.RESUMING:
            log.info("resume_skipped", status=approval and approval.status)
            return
        run = await self.store.run(approval.thread_id)
        runner = self._runner(approval.graph)
        payload = resume_payload(approval.request, command["decisions"])
        await self.store.set_run_status(approval.thread_id, RunState.RUNNING)
        await self.progress(approval.thread_id, "started", "resumed")
        try:
            outcome = await runner.resume(approval.thread_id, {approval.interrupt_id: payload})
        except StaleAnswer:
            # A runner applied this resume and died before acknowledging it: LangGraph
            # saved the answer, so finish what it started instead of answering twice.
            log.warning("resume_already_applied")
            outcome = await runner.current(approval.thread_id) or await runner.proceed(approval.thread_id)
        except DecisionRefused as refused:
            # Cannot happen for sets the bot checked; never guess, never send it.
            log.error("resume_refused", reason=str(refused))
            await self.store.finish(approval, ApprovalStatus.FAILED, error=str(refused))
            await self.store.set_run_status(approval.thread_id, RunState.WAITING)
            await self.progress(approval.thread_id, "waiting")
            await self.store.announce({"type": "resume_failed", "approval_id": approval.approval_id,
                                       "thread_id": approval.thread_id, "error": str(refused)})
            return
        await self._resumed(approval, run, outcome)

    async def _resumed(self, approval: Approval, run: Run | None, outcome: Outcome) -> None:
        await self.store.finish(approval, ApprovalStatus.RESUMED)
        await self.store.announce({"type": "resumed", "approval_id": approval.approval_id,
                                   "thread_id": approval.thread_id})
        if run is not None:
            await self._announce(run, outcome)

    async def _announce(self, run: Run, outcome: Outcome) -> None:
        if outcome.status is RunStatus.PAUSED:
            await self.store.set_run_status(run.thread_id, RunState.WAITING)
            await self.progress(run.thread_id, "waiting")
            for request in outcome.pending:
                origin = outcome.origins.get(request.interrupt_id, run.graph)
                approval, created = await self.store.create_approval(approval_for(request, run, origin))
                if created:
                    await self.store.announce({"type": "approval", "approval_id": approval.approval_id,
                                               "thread_id": run.thread_id})
            return
        finished = outcome.status is RunStatus.FINISHED
        await self.store.set_run_status(run.thread_id, RunState.IDLE if finished else RunState.FAILED)
        await self.progress(run.thread_id, "done" if finished else "failed")
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
                             thread_ts=thread_ts, requester=requester, task=text))
    await store.set_run_status(thread_id, RunState.RUNNING)
    await store.send_command({"type": "start", "thread_id": thread_id, "text": text})
    return thread_id



async def run_runner(settings: Settings, stop: asyncio.Event) -> None:
    """The runner process: the configured graphs on the project's saver, serving commands."""
    url = settings.redis_url or "redis://127.0.0.1:6379/0"
    store = Store.from_url(url, settings.prefix)
    specs = graph_specs(settings)
    async with AsyncRedisCheckpointer.from_conn_string(url) as saver:
        await saver.asetup()
        runners = {name: Runner(build_graph(spec, saver), name) for name, spec in specs.items()}
        worker = RunnerWorker(store, runners, consumer=settings.consumer,
                              claim_idle_ms=settings.claim_idle_ms, lock_ttl_ms=settings.lock_ttl_ms)
        try:
            await worker.serve(stop)
        finally:
            await store.close()
