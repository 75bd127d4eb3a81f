"""`signoff runner`: consume start / resume / continue commands, announce what happened.

Commands come from each partition's `commands` stream through the `runners` consumer
group (see `streams` for leases, side-by-side handling and reconnects), so
several runner replicas share them and each handles up to `concurrency`
threads at once.

One thread, one worker at a time: a command takes the thread's lock before it
touches the graph and waits (keeping its lease) while another command holds
it; the lock is renewed by the same heartbeat as the lease, so the two never
disagree, and a worker that loses either stops. Before any tool starts, the
worker checks in Redis that it still holds both (a fencing check, one script
that also extends them): a runner frozen past its lease (a GC pause, a stopped
VM) while another took its command over stops there instead of starting the
tool a second time. No command is ever queued a second time.

A runner told to stop (SIGTERM, a rolling deploy) takes nothing new, hands back
at once the commands it has not started, and finishes the ones it has, within
`SIGNOFF_STOP_GRACE`; a tool still running then is cut off with the process and
runs again on another runner once its lease lapses, as after a crash.

Every command has an id, and a command that already took effect is a no-op
whoever is handed it again: a finished one is marked done; a start whose
first message is in the thread's checkpoints continues that run instead of
starting it again; a resume whose interrupt is no longer pending (LangGraph
saved the answer) continues from the last checkpoint instead of answering
twice. A decision set the protocol refuses here is never sent: the pause is
offered again on a new card, and the run's thread says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import structlog
from aiohttp import web

from agent_runner.checkpointer import AsyncRedisCheckpointer, CheckpointKeys
from agent_runner.idempotency import approved_calls_of
from agent_runner.remote import RemoteRunner
from agent_runner.retention import Janitor
from agent_runner.runner import Runner, RunResult, StaleAnswer, runners_for
from agent_runner.task_notes import TaskNotes
from core import health as health_routes
from core import metrics
from core.agent_server import ANSWERED_ELSEWHERE, AgentServer, Busy, Vanished, agent_server
from core.config import Settings
from core.graphs import GraphLoadError, graph_specs
from core.health import Health
from core.keys import RUNNERS_GROUP
from core.logs import get_logger
from core.messages import (
    AnyCommand,
    ContinueRun,
    DecisionsRefused,
    Malformed,
    Resume,
    RunFailed,
    RunFinished,
    StartRun,
    decode_command,
)
from core.outages import OUTAGE, Backoff, LeaseLost, pause, until_redis
from core.plan import PlanTask
from core.policy_file import seconds
from core.protocol import DecisionRefused, PendingRequest, payload_from_decisions
from core.reconciler import reconciler
from core.records import Approval, ApprovalStatus, Run, RunState, approval_for
from core.secrets import Redaction
from core.store import LOCAL_REDIS, Store
from core.store.locks import Taken
from core.streams import Entry, EntryKey, StreamConsumer

log = get_logger("worker")


def boot_clock() -> float:
    """Seconds since boot, counting time the machine was suspended (unlike `time.monotonic`)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class UnknownGraph(LookupError):
    """A command for a graph this runner does not have."""


class RunnerWorker(StreamConsumer[AnyCommand]):
    """Handles the `commands` streams (one per partition) for the graphs it was given, by name."""

    group = RUNNERS_GROUP
    kind = "command"
    marks_start = True  # a command whose graph began is never handed back at a stop

    def __init__(
        self,
        store: Store,
        runners: Mapping[str, Runner],
        consumer: str | None = None,
        lease_ms: int = 30_000,
        concurrency: int = 8,
        block_ms: int = 1_000,
        health: Health | None = None,
        done_ttl_s: int = 7 * 86_400,
        remote: RemoteRunner | None = None,
        checkpoints: AsyncRedisCheckpointer | None = None,
        redact: Callable[[str], Sequence[Redaction]] | None = None,
    ):
        super().__init__(
            store,
            store.keys.consumed("commands"),
            consumer,
            lease_ms=lease_ms,
            concurrency=concurrency,
            block_ms=block_ms,
            health=health,
        )
        self.done_ttl_s = done_ttl_s  # a command's done marker outlives its stream entry (the retention)
        self.runners = dict(runners)
        self.remote = remote  # graphs on an Agent Server (a local graph of the same name wins)
        # the graphs' saver: a thread this worker takes refuses the saves of whoever held it before
        self.checkpoints = checkpoints
        self.redact = redact  # the policy's `redact` paths of a tool: masked on the cards
        self._held: dict[str, tuple[str, EntryKey, int]] = {}  # lock key -> (token, entry, partition)
        # lock key -> when (boot clock) a renewal that succeeded was sent: it holds a lease from then
        self._confirmed: dict[str, float] = {}
        self._last_progress: dict[str, float] = {}
        self._decided_at: dict[str, float] = {}  # thread -> when its resumed decision was recorded
        self.notes = TaskNotes(self.store)  # the plan's notes, sent a few together
        for runner in self.runners.values():
            runner.on_tool = runner.on_tool or self._tool_started
            runner.on_task = runner.on_task or self._task_noted
            runner.fence = runner.fence or self.fence

    @property
    def name(self) -> str:
        return "runner commands consumer"

    # the thread lock --------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _thread(self, thread_id: str, entry: Entry, command_id: str) -> AsyncIterator[bool]:
        """Hold the thread's lock; wait (lease kept by the heartbeat) while another command has it.
        Gives True, holding nothing, once the command is done (by whoever held the thread before)."""
        lock = self.store.keys.thread_lock(thread_id)
        token = f"{self.consumer}:{entry.id}"
        wait = Backoff(first=0.05, cap=1.0)
        while True:
            asked = boot_clock()
            taken = await self.store.locks.take(thread_id, token, self.lease_ms, unless_done=command_id)
            if taken is Taken.DONE:
                yield True
                return
            if taken:
                break
            if wait.tries == 0:
                log.info("thread_busy_waiting", entry_id=entry.id)
            await asyncio.sleep(wait.next())
        self._held[lock] = (token, entry.key, self.store.keys.of(thread_id).index)
        self._confirmed[lock] = asked
        try:
            if self.checkpoints is not None:  # a runner that lost the thread saves nothing in it now
                await self.checkpoints.claim(thread_id, token)
            yield False
        finally:
            self._held.pop(lock, None)
            self._confirmed.pop(lock, None)
            with contextlib.suppress(*OUTAGE):
                await self.store.locks.release(lock, token)

    async def fence(self, thread_id: str, strict: bool = True) -> str:
        """Before a tool starts (`strict`: Redis is always asked) or a checkpoint is saved: this
        worker must still hold the thread's lock and its command's lease (both extended if so),
        else `LeaseLost`: another runner has the thread now. For a save, a lock confirmed less
        than half a lease ago (the heartbeat confirms it every third) cannot have lapsed since,
        by the boot clock, which counts a suspended or frozen machine's time too. Returns the
        lock's token, which a save names (Redis refuses it once another runner claimed the
        thread, however late the save arrives)."""
        lock = self.store.keys.thread_lock(thread_id)
        held = self._held.get(lock)
        if held is None:
            raise LeaseLost(f"thread {thread_id} is not locked by this runner")
        asked = boot_clock()
        token, (stream, entry_id), _ = held
        if not strict and asked - self._confirmed.get(lock, float("-inf")) < self.lease_ms / 2000:
            return token
        if not await self.store.locks.fence(
            thread_id, token, self.lease_ms, stream, self.group, self.consumer, entry_id
        ):
            raise LeaseLost(f"thread {thread_id}: the lease lapsed and another runner took it over")
        self._confirmed[lock] = asked
        return token

    async def renew(self) -> list[EntryKey]:
        """Extend the thread locks held (one script per partition: a script touches one slot)."""
        by_partition: dict[int, list[tuple[str, str, EntryKey]]] = {}
        for lock, (token, entry, partition) in self._held.items():
            by_partition.setdefault(partition, []).append((lock, token, entry))

        async def renewed(locks: list[tuple[str, str, EntryKey]]) -> list[EntryKey]:
            asked = boot_clock()
            try:
                lost = set(
                    await self.store.locks.renew([(lock, token) for lock, token, _ in locks], self.lease_ms)
                )
            except Exception as exc:  # that master is away: the others' locks are renewed all the same
                log.warning("lock_renewal_failed", locks=[lock for lock, _, _ in locks], error=repr(exc))
                return []
            for n, (lock, _, _) in enumerate(locks):
                if n in lost:
                    self._confirmed.pop(lock, None)
                elif lock in self._held:
                    self._confirmed[lock] = asked
            return [locks[n][2] for n in sorted(lost)]

        found = await asyncio.gather(*(renewed(locks) for locks in by_partition.values()))
        lost = [entry for entries in found for entry in entries]
        return lost

    async def dead_letter(self, entry: Entry, why: str) -> None:
        """A command no replica could carry out is parked; its run fails (said in Slack, with
        Retry) instead of showing "running" for ever and never being purged."""
        await super().dead_letter(entry, why)
        try:
            command = self.decode(dict(entry.fields))
        except Malformed:
            return
        if await self.store.runs.state(command.thread_id) in (RunState.RUNNING, None):
            await self.store.runs.set_state(command.thread_id, RunState.FAILED, why)
            await self.store.queue.send(
                RunFailed(thread_id=command.thread_id, error=f"Signoff could not carry this out ({why})")
            )

    # commands -----------------------------------------------------------------

    def decode(self, fields: dict[str, str]) -> AnyCommand:
        return decode_command(fields)

    async def handle(self, entry: Entry, command: AnyCommand) -> None:
        command_id = command.command_id or f"entry-{entry.id}"
        context = (
            {"approval_id": command.approval_id, "interrupt_id": command.interrupt_id}
            if isinstance(command, Resume)
            else {}
        )
        with structlog.contextvars.bound_contextvars(
            thread_id=command.thread_id, command_id=command_id, **context
        ):
            async with self._thread(command.thread_id, entry, command_id) as done:
                if done:  # (by whoever held the thread before, or by this command's earlier delivery)
                    log.info("command_already_done")
                    return  # (holding no working slot: it waits behind no running command)
                async with self.working:
                    entry.started = True  # from here a stop lets it finish (never hands it back)
                    try:
                        match command:
                            case StartRun():
                                await self._start(command, command_id)
                            case Resume():
                                await self._resume(command, command_id)
                            case ContinueRun():
                                await self._continue(command, command_id)
                    except UnknownGraph as missing:
                        # Never run another graph in its place: say so in the run's thread.
                        log.error("graph_unknown", error=str(missing))
                        await self.store.runs.set_state(command.thread_id, RunState.FAILED)
                        await self.store.queue.send(
                            RunFailed(thread_id=command.thread_id, error=str(missing), command_id=command_id)
                        )
                    await self.store.queue.mark_done(command.thread_id, command_id, self.done_ttl_s)

    async def _remote(self, graph: str) -> RemoteRunner | None:
        """The Agent Server's runner when `graph` is one of its assistants (and not a local graph)."""
        if graph in self.runners or self.remote is None:
            return None
        return self.remote if await self.remote.has(graph) else None

    def _runner(self, graph: str) -> Runner:
        try:
            return self.runners[graph]
        except KeyError:
            raise UnknownGraph(
                f"this runner has no graph {graph!r} (it has: {', '.join(self.runners)})"
            ) from None

    async def _start(self, command: StartRun, command_id: str) -> None:
        run = await self.store.runs.get(command.thread_id)
        if run is None:
            log.error("start_without_run")
            return
        approved = await self.approved_calls(run.thread_id)
        remote = await self._remote(run.graph)
        if remote is not None:
            await remote.follow(run.thread_id, await remote.start(run, command.text, command_id, approved))
            return
        runner = self._runner(run.graph)
        message_id = f"signoff-{command_id}"
        if await runner.has_message(run.thread_id, message_id):
            # Handed to us again after its runner died: never send the message twice, pick the run up.
            log.warning("start_already_applied")
            outcome = await runner.current(run.thread_id) or await runner.proceed(run.thread_id, approved)
        else:
            await self.store.runs.set_state(run.thread_id, RunState.RUNNING)
            outcome = await runner.start(
                run.thread_id, command.text, message_id=message_id, approved=approved
            )
        await self._announce(run, outcome, command_id)

    async def _continue(self, command: ContinueRun, command_id: str) -> None:
        """Retry after a failure: continue the run from its last checkpoint."""
        run = await self.store.runs.get(command.thread_id)
        if run is None:
            return
        await self.store.runs.set_state(run.thread_id, RunState.RUNNING, "retrying")
        approved = await self.approved_calls(run.thread_id)
        remote = await self._remote(run.graph)
        if remote is not None:
            await remote.follow(run.thread_id, await remote.proceed(run, command_id, approved))
            return
        outcome = await self._runner(run.graph).proceed(run.thread_id, approved)
        await self._announce(run, outcome, command_id)

    async def _resume(self, command: Resume, command_id: str) -> None:
        approval, run, thread, decided_at = await self.store.approvals.resume_reads(
            command.approval_id, command.thread_id
        )
        if approval is None or approval.status is not ApprovalStatus.RESUMING:
            log.info("resume_skipped", status=approval and approval.status)
            if approval is not None and approval.status is ApprovalStatus.RESUMED and run is not None:
                await self._told_again(approval, run, thread, command_id)
            return
        payload = payload_from_decisions(approval.request, command.decisions)
        approved = approved_calls_of(thread)
        remote = await self._remote(approval.graph)
        if remote is not None:
            if run is None:  # purged meanwhile: nothing to resume it for
                log.warning("resume_without_run")
                return
            decision_to_resume(decided_at)
            await self._resume_remote(remote, approval, run, payload, command_id, approved)
            return
        runner = self._runner(approval.graph)
        await self.store.runs.set_state(approval.thread_id, RunState.RUNNING, "resumed")
        decision_to_resume(decided_at)
        if decided_at is not None:  # the first tool after it measures decision -> tool start
            self._decided_at[approval.thread_id] = decided_at
        try:
            outcome = await runner.resume(approval.thread_id, {approval.interrupt_id: payload}, approved)
        except StaleAnswer:
            # A runner applied this resume and died before finishing: LangGraph saved the
            # answer, so continue what it started instead of answering twice.
            log.warning("resume_already_applied")
            outcome = await runner.current(approval.thread_id) or await runner.proceed(
                approval.thread_id, approved
            )
        except DecisionRefused as refused:
            log.error("resume_refused", reason=str(refused))
            pending_now = {r.interrupt_id: r for r in await runner.pending(approval.thread_id)}
            await self._offer_again(approval, run, pending_now, str(refused), command_id)
            return
        await self.store.approvals.finish(approval, ApprovalStatus.RESUMED)
        if run is not None:
            await self._announce(run, outcome, command_id)

    async def _told_again(
        self, approval: Approval, run: Run, thread: list[Approval], command_id: str
    ) -> None:
        """This resume was carried out, but its command came back undone: the run's end it told
        may have been lost (a master that failed over after the approval's status reached its
        replica, before the event did). Told again from the thread's state: the bot posts an end
        once per command, and an approval once per interrupt. Not when a later pause of the
        thread exists (then it was told), nor for an Agent Server's thread (its watch tells)."""
        if approval.graph not in self.runners or (thread and thread[0].approval_id != approval.approval_id):
            return
        outcome = await self.runners[approval.graph].current(approval.thread_id)
        if outcome is not None:  # (None: mid-run, its runner tells)
            log.warning("resume_end_told_again", state=outcome.state.value)
            await self._announce(run, outcome, command_id)

    async def _resume_remote(
        self,
        remote: RemoteRunner,
        approval: Approval,
        run: Run,
        payload: Any,
        command_id: str,
        approved: list[dict[str, Any]],
    ) -> None:
        """Resume a thread on the Agent Server: checked against its pending interrupts, sent once.
        Nothing is sent for an interrupt that is gone (said on the card), an answer the pause does
        not take (offered again now), or a thread someone else's run holds (offered again by the
        poll once it is free)."""
        try:
            run_id = await remote.resume(approval, run, payload, command_id, approved)
        except Vanished as gone:
            log.warning("resume_vanished", reason=str(gone))
            await self._offer_again(approval, run, {}, ANSWERED_ELSEWHERE, command_id)
            await remote.reconciler.reconcile(run.thread_id)  # whatever it waits for now gets its card
            return
        except DecisionRefused as refused:
            log.error("resume_refused", reason=str(refused))
            await self._offer_again(
                approval, run, await remote.pending(run.thread_id), str(refused), command_id
            )
            return
        except Busy as busy:
            log.warning("resume_busy", reason=str(busy))
            await self._offer_again(approval, run, {}, str(busy), command_id, offered_later=True)
            return
        await self.store.approvals.finish(approval, ApprovalStatus.RESUMED)
        await remote.follow(run.thread_id, run_id)

    async def _offer_again(
        self,
        approval: Approval,
        run: Run | None,
        pending_now: Mapping[str, PendingRequest],
        reason: str,
        command_id: str,
        offered_later: bool = False,
    ) -> None:
        """A decision set that was not sent (refused by the protocol here, or its thread changed
        on an Agent Server): the card says why, and the pause, if the graph still shows it in
        `pending_now`, gets a new card. `offered_later`: the Agent Server's poll will offer it
        once its thread is free."""
        request = pending_now.get(approval.interrupt_id)
        replacement = None
        if request is not None and run is not None:
            if approval.graph in self.runners:  # (an Agent Server's pause: previewed as it is read)
                (request,) = await self.runners[approval.graph].previewed(approval.thread_id, [request])
            fresh = approval_for(request, run, approval.origin, self.redact)
            replacement, _ = await self.store.approvals.create(fresh, replaces=approval.approval_id)
        await self.store.queue.send(
            DecisionsRefused(
                approval_id=approval.approval_id,
                thread_id=approval.thread_id,
                error=reason,
                command_id=command_id,
                offered_again=replacement is not None or offered_later,
            )
        )
        await self.store.approvals.finish(
            approval,
            ApprovalStatus.FAILED,
            error=reason,
            replaced_by=replacement.approval_id if replacement else None,
        )
        await self.store.runs.set_state(approval.thread_id, RunState.WAITING)

    async def approved_calls(self, thread_id: str) -> list[dict[str, Any]]:
        """The calls people let run in this thread, newest first (for tool idempotency keys)."""
        return approved_calls_of(await self.store.approvals.of_thread(thread_id))

    async def _announce(self, run: Run, outcome: RunResult, command_id: str) -> None:
        tasks = [*self.notes.take(run.thread_id), *outcome.tasks]  # (what the messages say, last)
        await self.store.runs.set_state(run.thread_id, outcome.state, tasks=tasks)
        metrics.RUNS.labels(outcome.state.value).inc()
        self._decided_at.pop(run.thread_id, None)
        if outcome.state is RunState.WAITING:
            for request in outcome.pending:  # (previewed by their runner: `agent_runner.previews`)
                origin = outcome.origins.get(request.interrupt_id, run.graph)
                # Record and event in one step; a record that has no card yet is announced again.
                await self.store.approvals.create(
                    approval_for(request, run, origin, self.redact, outcome.secrets)
                )
        elif outcome.state is RunState.FINISHED:
            await self.store.queue.send(
                RunFinished(thread_id=run.thread_id, command_id=command_id, answer=outcome.answer)
            )
        else:
            await self.store.queue.send(
                RunFailed(thread_id=run.thread_id, command_id=command_id, error=outcome.error)
            )

    async def _tool_started(self, thread_id: str, tool: str) -> None:
        decided_at = self._decided_at.pop(thread_id, None)
        if decided_at is not None:  # the first tool after a decision
            metrics.DECISION_TO_TOOL.observe(max(0.0, time.time() - decided_at))
        now = time.monotonic()
        if now - self._last_progress.get(thread_id, 0.0) < 1.0:
            return
        self._last_progress[thread_id] = now
        with contextlib.suppress(*OUTAGE):  # cosmetic: never fail a tool over its status line
            await self.store.runs.set_state(thread_id, RunState.RUNNING, tool=tool)

    async def _task_noted(self, thread_id: str, task: PlanTask) -> None:
        self.notes.note(thread_id, task)


def decision_to_resume(decided_at: float | None) -> None:
    """Observes decision -> resume, given when the decision set was completed."""
    if decided_at is not None:
        metrics.DECISION_TO_RESUME.observe(max(0.0, time.time() - decided_at))


async def run_runner(settings: Settings, stop: asyncio.Event, health: Health | None = None) -> None:
    """The runner process: the configured graphs on the project's saver, serving commands."""
    url = settings.redis_url or LOCAL_REDIS
    health = health or Health()
    store = Store.from_settings(settings)
    specs = graph_specs(settings)
    if not specs and not settings.agent_server_url:
        raise GraphLoadError(
            "no graphs to run: set SIGNOFF_GRAPH=module:attr (a compiled graph or a factory), "
            "start the runner where your langgraph.json is (or set SIGNOFF_GRAPHS_FILE), "
            "or set SIGNOFF_AGENT_SERVER_URL"
        )
    site = None
    if settings.runner_port:
        site = web.AppRunner(_health_app(health, store), access_log=None)
        await site.setup()
        await health_routes.listen(site, settings.runner_port, "SIGNOFF_RUNNER_PORT")
    server = agent_server(settings)
    opened = contextlib.AsyncExitStack()
    worker: RunnerWorker | None = None
    try:

        async def setup() -> AsyncRedisCheckpointer:
            await store.layout.check()  # keys laid out as this process reads them
            keys = CheckpointKeys.from_settings(settings)  # SIGNOFF_CHECKPOINT_KEY: encrypted at rest
            return await opened.enter_async_context(AsyncRedisCheckpointer.from_url(url, keys=keys))

        # Redis may not be up yet (or be restarting): wait for it rather than exit.
        saver = await until_redis("checkpointer setup", stop, setup)
        if saver is None:
            return
        worker, janitor = _loops(settings, store, specs, saver, server, health)
        grace = seconds(settings.stop_grace) or 0
        watching = asyncio.create_task(_stop_when_a_loop_dies(health, stop))
        await asyncio.gather(
            health.supervise(worker.name, asyncio.create_task(worker.serve(stop, grace)), stop),
            health.supervise(janitor.name, asyncio.create_task(janitor.serve(stop)), stop),
            return_exceptions=True,
        )
        watching.cancel()
    finally:
        if server is not None:
            await server.close()
        await opened.aclose()
        if site is not None:
            await site.cleanup()
        await store.close()
    if health.dead:  # exit with an error: whatever runs this process (serve, Kubernetes) starts it again
        raise RuntimeError(f"a loop of this runner died: {health.dead}")
    if worker is not None and worker.cut_off:
        # tools outlived the grace: their threads would keep the process (and themselves) alive
        log.error("runner_exits_cutting_off_tools", commands=len(worker.cut_off))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _loops(
    settings: Settings,
    store: Store,
    specs: dict[str, str],
    saver: AsyncRedisCheckpointer,
    server: AgentServer | None,
    health: Health,
) -> tuple[RunnerWorker, Janitor]:
    """The runner's two loops: the commands consumer (the graphs on `saver`, and the Agent
    Server's if any) and the retention janitor."""
    worker = RunnerWorker(
        store,
        runners_for(specs, saver, settings),
        consumer=settings.consumer,
        lease_ms=settings.lease_ms,
        concurrency=settings.concurrency,
        health=health,
        done_ttl_s=max(60, seconds(settings.retention) or 0),
        remote=RemoteRunner(store, server, reconciler(settings, store, server)) if server else None,
        checkpoints=saver,
        redact=settings.policy.redactions,
    )
    janitor = Janitor(
        store, saver, seconds(settings.retention) or 0, seconds(settings.audit_retention) or 0, health
    )
    return worker, janitor


async def _stop_when_a_loop_dies(health: Health, stop: asyncio.Event) -> None:
    """A runner with a dead loop does nothing useful: stop it (gracefully) so it is started again."""
    while not stop.is_set() and not health.dead:
        await pause(stop, 1.0)
    if health.dead and not stop.is_set():
        log.error("loop_died_runner_stops", dead=health.dead)
        stop.set()


def _health_app(health: Health, store: Store) -> web.Application:
    app = web.Application()
    health_routes.add_routes(app, health, store, expected=("runner commands consumer", "retention janitor"))
    metrics.add_route(app, store.queue)
    return app
