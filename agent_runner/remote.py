"""The runner's side of graphs on a LangGraph Agent Server (`core.agent_server`): runs
started, resumed and continued there, each sent once, then reconciled (`core.reconciler`).
"""

from __future__ import annotations

from typing import Any

from core.agent_server import (
    AgentServer,
    Busy,
    Vanished,
)
from core.logs import get_logger
from core.protocol import PendingRequest, check_resume
from core.reconciler import Reconciler
from core.records import Approval, Run, RunState
from core.store import Store

log = get_logger("remote")


class RemoteRunner:
    """The runner's side of a remote graph: starts, resumes and continues runs on the server,
    each sent once, then waits for the run and reconciles the thread."""

    def __init__(self, store: Store, server: AgentServer, reconciler: Reconciler):
        self.store = store
        self.server = server
        self.reconciler = reconciler

    async def has(self, graph: str) -> bool:
        return await self.server.assistant(graph) is not None

    async def start(self, run: Run, text: str, command_id: str, approved: list[dict[str, Any]]) -> str:
        """Send the person's message (once); returns the run's id."""
        message = {"role": "user", "content": text, "id": f"signoff-{command_id}"}
        return await self._already_sent(run, command_id) or await self._send(
            run, command_id, approved, graph_input={"messages": [message]}
        )

    async def proceed(self, run: Run, command_id: str, approved: list[dict[str, Any]]) -> str:
        """Retry: a run with no input continues the thread from its last checkpoint."""
        return await self._already_sent(run, command_id) or await self._send(run, command_id, approved)

    async def pending(self, thread_id: str) -> dict[str, PendingRequest]:
        thread = await self.server.read(thread_id)
        if thread is None or thread.status != "interrupted":
            return {}
        return {request.interrupt_id: request for request in thread.pending}

    async def resume(
        self, approval: Approval, run: Run, payload: Any, command_id: str, approved: list[dict[str, Any]]
    ) -> str:
        """Send the checked answer for the approval's interrupt, keyed by its id, once.

        Raises `Vanished` (the interrupt is no longer pending), `DecisionRefused`
        (the answer does not fit the pause as the server has it) or `Busy` (409);
        in all three, nothing was sent.
        """
        sent = await self._already_sent(run, command_id)
        if sent:
            return sent
        await self.server.settle(run.thread_id)
        thread = await self.server.read(run.thread_id)
        if thread is not None and thread.status == "busy":  # someone's run started meanwhile
            raise Busy("the Agent Server is running something else in this thread")
        waiting = {r.interrupt_id: r for r in thread.pending} if thread else {}
        request = waiting.get(approval.interrupt_id)
        if request is None:
            raise Vanished(f"interrupt {approval.interrupt_id} is no longer pending on the Agent Server")
        clean = check_resume(request, payload)
        command = {"resume": {approval.interrupt_id: clean}}
        return await self._send(run, command_id, approved, command=command, settled=True)

    async def follow(self, thread_id: str, run_id: str) -> RunState | None:
        """Wait for the run to end, then make the thread's state Signoff's."""
        await self.server.wait(thread_id, run_id)
        return await self.reconciler.reconcile(thread_id)

    async def _already_sent(self, run: Run, command_id: str) -> str | None:
        """A command handed over after its runner died finds the run it sent: never sent twice."""
        sent = await self.server.sent(run.thread_id, command_id)
        if sent is None:
            return None
        log.warning("remote_run_already_sent", run_id=sent["run_id"])
        return str(sent["run_id"])

    async def _send(
        self,
        run: Run,
        command_id: str,
        approved: list[dict[str, Any]],
        graph_input: Any = None,
        command: dict[str, Any] | None = None,
        settled: bool = False,
    ) -> str:
        if not settled:  # never beside a run going on (ours from before, or someone's)
            await self.server.settle(run.thread_id)
        assistant = await self.server.open_thread(run)
        await self.store.runs.set_state(run.thread_id, RunState.RUNNING)
        await self.store.remote.sent(run.thread_id)
        return await self.server.send(run, command_id, approved, graph_input, command, assistant)
