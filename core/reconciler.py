"""A thread's state on an Agent Server, made Signoff's records (`Reconciler`).

The runner that sent a run reconciles when it ends; the bot does for the run
webhook and its poll (`bot.watch`). Whichever comes first, an interrupt gets
one approval record and a run's end is told once (`TELL_ONCE`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from core.agent_server import (
    ANSWERED_ELSEWHERE,
    MARK,
    AgentServer,
    RemoteThread,
    server_call,
)
from core.config import Settings
from core.logs import get_logger
from core.messages import RunFailed, RunFinished
from core.policy_file import seconds
from core.previews import MAX_CHARS, file_call, file_preview, state_file
from core.protocol import PendingRequest
from core.records import ApprovalStatus, Run, RunState, approval_for
from core.secrets import Redaction
from core.store import Store

log = get_logger("remote")


class Reconciler:
    """A thread's state on the server, made Signoff's: approvals, the answer, the failure."""

    def __init__(
        self,
        store: Store,
        server: AgentServer,
        watch_channel: str | None = None,
        ttl_s: int = 86_400,
        redact: Callable[[str], Sequence[Redaction]] | None = None,
        preview_chars: int = MAX_CHARS,
    ):
        self.store = store
        self.redact = redact  # the policy's `redact` paths of a tool (`PolicyFile.redactions`)
        self.server = server
        self.watch_channel = watch_channel  # adopt threads Signoff did not start (watch mode)
        self.ttl_s = ttl_s  # how long "this run's end was told" is remembered
        self.preview_chars = preview_chars

    async def reconcile(self, thread_id: str) -> RunState | None:
        with structlog.contextvars.bound_contextvars(thread_id=thread_id):
            return await self._reconcile(thread_id)

    async def _reconcile(self, thread_id: str) -> RunState | None:
        """Read the thread and act on it; returns the run's state (None: nothing of Signoff's).

        What it does is safe to do again and in any order: approvals are created once per
        interrupt, an end is told once per run, and a card is closed only when a second
        reading, taken just before, agrees that its interrupt is gone (a reading delivered late
        never closes the cards of a newer pause).
        """
        run = await self.store.runs.get(thread_id)
        thread = await self.server.read(thread_id)
        if thread is None:
            log.warning("remote_thread_gone", thread_id=thread_id)
            await self.store.remote.seen(thread_id)
            return None
        if thread.status == "busy":
            return RunState.RUNNING
        if run is None:
            run = await self._adopt(thread)
            if run is None:
                return None
        state = await self._apply(run, thread)
        await self.store.remote.seen(thread_id)
        return state

    async def _adopt(self, thread: RemoteThread) -> Run | None:
        """Watch mode: a paused thread nobody's Signoff started gets a run record (its cards go to
        the watch channel) and this Signoff's mark, so another watching one leaves it alone."""
        owner = thread.metadata.get(MARK)
        if (
            thread.status != "interrupted"
            or not self.watch_channel
            or owner not in (None, self.server.prefix)
        ):
            return None
        graph = await self.server.graph_of(thread.metadata)
        run = Run(thread_id=thread.thread_id, graph=graph, channel=self.watch_channel, task=thread.task)
        if await self.store.runs.save(run, only_new=True):
            log.info("remote_thread_adopted", thread_id=thread.thread_id, graph=graph)
            async with server_call("threads.update"):
                await self.server.client.threads.update(thread.thread_id, metadata={MARK: self.server.prefix})
        return await self.store.runs.get(thread.thread_id)

    async def _apply(self, run: Run, thread: RemoteThread) -> RunState | None:
        thread = thread.masked(self.redact)  # what the policy's `redact` names: masked in its answer too
        await self._close_answered_elsewhere(run, thread)
        if thread.status == "interrupted":
            if await self.store.runs.state(run.thread_id) is not RunState.WAITING:
                await self.store.runs.set_state(run.thread_id, RunState.WAITING, tasks=thread.tasks)
            for pending in thread.pending:
                asker = thread.origins.get(pending.interrupt_id)
                request = file_previews(pending, thread.values, self.preview_chars) if not asker else pending
                origin = asker or run.graph
                fresh = approval_for(request, run, origin, self.redact, thread.secrets)
                approval, created = await self.store.approvals.create(fresh)
                if not created and approval.status is ApprovalStatus.FAILED and not approval.replaced_by:
                    # still waited for, but its card was closed (a 409, a refused set): a new card
                    fresh, _ = await self.store.approvals.create(
                        approval_for(request, run, origin, self.redact, thread.secrets),
                        replaces=approval.approval_id,
                    )
                    await self.store.approvals.finish(
                        approval, ApprovalStatus.FAILED, approval.error, replaced_by=fresh.approval_id
                    )
            return RunState.WAITING
        if thread.last_run is None:  # a thread with no run yet: nothing ended
            return await self.store.runs.state(run.thread_id)
        key = f"remote-{thread.last_run}"
        if thread.status == "idle":
            told = await self._tell_once(
                thread.last_run, RunFinished(thread_id=run.thread_id, command_id=key, answer=thread.answer)
            )
            if told:
                await self.store.runs.set_state(run.thread_id, RunState.FINISHED, tasks=thread.tasks)
            return RunState.FINISHED
        error = (
            f"the run failed on the Agent Server (run {thread.last_run}); its logs have the details. "
            "Retry continues it from its last checkpoint."
        )
        failed = RunFailed(thread_id=run.thread_id, command_id=key, error=error)
        if await self._tell_once(thread.last_run, failed):
            await self.store.runs.set_state(run.thread_id, RunState.FAILED)
        return RunState.FAILED

    async def _close_answered_elsewhere(self, run: Run, thread: RemoteThread) -> None:
        """Cards of interrupts the thread no longer waits for (answered in Agent Inbox, Studio, a
        script) stop offering buttons; a decision already on its way is left to its resume.
        Closing is checked against a second reading, taken just before."""
        waiting = {request.interrupt_id for request in thread.pending}
        gone = [
            a
            for a in await self.store.approvals.of_thread(run.thread_id, limit=50)
            if a.status is ApprovalStatus.PENDING and a.interrupt_id not in waiting
        ]
        if not gone:
            return
        now = await self.server.read(run.thread_id)
        if now is None or now.status == "busy":
            return
        still = {request.interrupt_id for request in now.pending}
        for approval in gone:
            if approval.interrupt_id not in still:
                log.info("approval_answered_elsewhere", approval_id=approval.approval_id)
                await self.store.approvals.finish(approval, ApprovalStatus.FAILED, error=ANSWERED_ELSEWHERE)

    async def _tell_once(self, run_id: str, event: RunFinished | RunFailed) -> bool:
        return await self.store.remote.tell_once(run_id, event, self.ttl_s)


def reconciler(settings: Settings, store: Store, server: AgentServer, watch: bool = False) -> Reconciler:
    """The Reconciler of this install: "told once" remembered as long as the retention keeps
    runs; `watch`: adopts threads nobody's Signoff started (the bot, with watch mode on)."""
    channel = settings.channel if watch and settings.agent_server_watch else None
    return Reconciler(
        store,
        server,
        channel,
        ttl_s=max(60, seconds(settings.retention) or 0),
        redact=settings.policy.redactions,
        preview_chars=settings.preview_max_chars,
    )


def file_previews(
    request: PendingRequest, values: Mapping[str, Any], limit: int = MAX_CHARS
) -> PendingRequest:
    """`request` with a diff on each file call (`core.previews`), from the thread's state as the
    Agent Server has it: a state backend's files. Not the server's own disk (a filesystem
    backend's files are not Signoff's to read) and not a subagent's pause (its files are in its
    own state, which the server's API does not give): those get no preview, never a wrong one.
    Preview hooks run only for the runner's own graphs."""
    actions = []
    for action in request.actions:
        call = file_call(action.name, action.args)
        files = values.get(call.state_key) if call else None
        if call is None or not isinstance(files, Mapping):
            actions.append(action)
            continue
        preview = file_preview(call, action.args, state_file(values, call), limit)
        actions.append(action.model_copy(update={"preview": preview}))
    return request.model_copy(update={"actions": tuple(actions)}) if actions else request
