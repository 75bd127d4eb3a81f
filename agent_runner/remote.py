"""Agents deployed on a LangGraph Agent Server, reached only through langgraph-sdk.

With `SIGNOFF_AGENT_SERVER_URL` set, the deployment's assistants are graphs
like the project's own: a run started from Slack starts (or continues) a
thread on the server, whose metadata names the Signoff and the Slack thread;
its pauses get cards; decisions resume it. The thread's checkpoints stay on
the server. Signoff's thread id *is* the server's (a UUID).

Three ways learn how a run on the server ended, all ending in `Reconciler`,
which turns the thread's state into Signoff's records as the local runner
does (an approval per pending interrupt, the answer, the failure):

* the runner that sent the run waits for it (`runs.join`) and reconciles;
* the run webhook, sent by the server to the bot when a run ends (a trigger
  only: it carries no interrupt), for runs whose runner died meanwhile;
* the bot's poll (`Watcher`): interrupted threads (`threads.search`), and the
  threads whose run Signoff sent and never saw end; with
  `SIGNOFF_AGENT_SERVER_WATCH`, every interrupted thread of the deployment, as
  Agent Inbox lists them, gets a card in `SIGNOFF_CHANNEL`.

Whichever comes first, an interrupt gets one approval record (the record is
keyed by interrupt id) and a run's end is told once (`TELL_ONCE`).

Sending is where a server differs from a local graph, so it is guarded:

* every run Signoff creates carries its command id in the run's metadata, so
  a command handed over after its runner died finds the run it already sent
  instead of sending it twice;
* before a resume, the server's pending interrupts are read and the answer is
  checked against them (`check_resume`); a stale one is never sent: with
  langgraph-api 0.16 a keyed resume for an interrupt that is no longer
  pending re-raises an interrupt already answered, and a malformed one is
  stored and replayed by every later resume;
* resumes are keyed by interrupt id (the plain form applies to whatever is
  pending now) and sent with `multitask_strategy="reject"`, after any run
  already going on the thread has ended: a 409 means someone else started a
  run meanwhile, and is reported on the card, never retried blindly.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import structlog
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError

from agent_runner.config import Settings
from agent_runner.idempotency import APPROVED
from agent_runner.logs import get_logger
from agent_runner.messages import RunFailed, RunFinished
from agent_runner.policy_file import seconds
from agent_runner.protocol import PendingRequest, check_resume, origin_of
from agent_runner.records import Approval, ApprovalStatus, Run, RunState, approval_for
from agent_runner.store import Store
from agent_runner.streams import TryLater

log = get_logger("remote")

ANSWERED_ELSEWHERE = "the agent is no longer waiting for this (it was answered or changed elsewhere)"
MARK = "signoff"  # thread and run metadata: the prefix of the Signoff that started it
COMMAND = "signoff_command"  # run metadata: the command that sent the run
GRAPH_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # what a graph name may be in Slack and POST /runs
ACTIVE = ("pending", "running")


class ServerAway(TryLater):
    """The Agent Server did not answer (unreachable, 5xx, 429): the work waits and is tried again."""


class Busy(RuntimeError):
    """The server refused a run with 409: another run on the thread started meanwhile."""


class Vanished(LookupError):
    """The interrupt an answer is for is no longer pending on the server (answered elsewhere)."""


@contextlib.asynccontextmanager
async def _server(what: str) -> AsyncIterator[None]:
    """Calls to the server: an outage becomes `ServerAway` (waited out), anything else is raised."""
    try:
        yield
    except httpx.HTTPStatusError as exc:
        status = exc.response.status_code
        if status >= 500 or status == 429:
            raise ServerAway(f"the Agent Server answered {status} to {what}") from exc
        raise
    except (httpx.TransportError, OSError) as exc:
        raise ServerAway(f"the Agent Server is unreachable ({what}): {type(exc).__name__}") from exc


@dataclass
class RemoteThread:
    """A thread on the server, as Signoff reads it."""

    thread_id: str
    status: str  # idle, busy, interrupted, error
    metadata: dict[str, Any]
    pending: list[PendingRequest] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # interrupt id -> a subagent ("": the graph)
    answer: str = ""
    task: str = ""  # the first thing a person asked in it
    last_run: str | None = None  # the run that left it as it is


def text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, Mapping) else str(part)
            for part in content
            if not isinstance(part, Mapping) or part.get("type", "text") == "text"
        )
    return ""


def answer_of(messages: Sequence[Mapping[str, Any]]) -> str:
    """The agent's answer: its last message that calls no tool (as `runner.final_answer`)."""
    for message in reversed(messages):
        if message.get("type") in ("ai", "AIMessage", "AIMessageChunk") and not message.get("tool_calls"):
            return text_of(message)
    return ""


class AgentServer:
    """One deployment, through the official client: its assistants, threads and runs."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        webhook_url: str | None = None,
        prefix: str = "signoff",
        join_timeout_s: float = 120.0,
    ):
        key: dict[str, Any] = {"api_key": api_key} if api_key else {}  # else LANGGRAPH_API_KEY & co.
        self.client = get_client(url=url, timeout=(5.0, join_timeout_s, 30.0, 5.0), **key)
        self.webhook_url = webhook_url
        self.prefix = prefix
        self.assistants: dict[str, str] = {}  # graph name -> assistant id
        self._names: dict[str, str] = {}  # assistant id -> graph name

    # assistants --------------------------------------------------------------

    async def refresh(self) -> dict[str, str]:
        """The deployment's assistants by name (the names Slack uses), read again."""
        found: dict[str, str] = {}
        offset = 0
        async with _server("assistants.search"):
            while True:
                page = await self.client.assistants.search(limit=100, offset=offset)
                for assistant in page:
                    name = str(assistant.get("name") or assistant.get("graph_id") or "")
                    if not GRAPH_NAME.fullmatch(name):
                        log.warning("assistant_name_unusable", assistant_id=assistant["assistant_id"])
                        continue
                    if name in found:  # the thread's own assistant id is what resumes use
                        log.warning(
                            "assistant_name_shared", name=name, assistant_id=assistant["assistant_id"]
                        )
                        continue
                    found[name] = str(assistant["assistant_id"])
                if len(page) < 100:
                    break
                offset += 100
        found = dict(sorted(found.items()))  # the first is the default graph when none is set
        if found != self.assistants:
            log.info("agent_server_assistants", graphs=list(found))
        self.assistants = found
        self._names = {assistant: name for name, assistant in found.items()}
        return found

    async def assistant(self, graph: str) -> str | None:
        if graph not in self.assistants:
            await self.refresh()
        return self.assistants.get(graph)

    async def graph_of(self, metadata: Mapping[str, Any]) -> str:
        """The graph name of a thread Signoff did not start (from the server's own metadata)."""
        assistant = str(metadata.get("assistant_id") or "")
        if assistant and assistant not in self._names:
            await self.refresh()
        return self._names.get(assistant) or str(metadata.get("graph_id") or "agent")

    # threads -----------------------------------------------------------------

    async def read(self, thread_id: str, tries: int = 3) -> RemoteThread | None:
        """The thread's status, pending requests (with who asked) and answer; None if it is gone.

        Three calls make one reading, so it is taken again when the thread changed between
        them (its status or updated_at); a thread that keeps changing reads as busy.
        """
        for _ in range(tries):
            async with _server("threads.get"):
                try:
                    thread = await self.client.threads.get(thread_id)
                    if thread["status"] == "busy":
                        return RemoteThread(thread_id, "busy", dict(thread.get("metadata") or {}))
                    state = await self.client.threads.get_state(thread_id)
                    runs = await self.client.runs.list(thread_id, limit=1)
                    after = await self.client.threads.get(thread_id)
                except NotFoundError:
                    return None
            if (after["status"], after.get("updated_at")) == (thread["status"], thread.get("updated_at")):
                return self._reading(thread, state, runs)
        return RemoteThread(thread_id, "busy", {})

    def _reading(
        self, thread: Mapping[str, Any], state: Mapping[str, Any], runs: Sequence[Any]
    ) -> RemoteThread:
        found = RemoteThread(
            str(thread["thread_id"]),
            str(thread["status"]),
            dict(thread.get("metadata") or {}),
        )
        values = state.get("values")
        messages = values.get("messages", []) if isinstance(values, Mapping) else []
        messages = [m for m in messages if isinstance(m, Mapping)]
        found.task = next((text_of(m) for m in messages if m.get("type") in ("human", "user")), "")
        found.last_run = str(runs[0]["run_id"]) if runs else None
        if found.status == "interrupted":
            calls: list[Mapping[str, Any]] = next(
                (list(m["tool_calls"]) for m in reversed(messages) if m.get("tool_calls")), []
            )
            for task in state.get("tasks") or []:
                path = task.get("path")
                origin = origin_of(str(task.get("name")), path if isinstance(path, list) else (), calls, "")
                for interrupt in task.get("interrupts") or []:
                    request = PendingRequest.from_interrupt(interrupt)
                    found.pending.append(request)
                    found.origins[request.interrupt_id] = origin
        elif found.status == "idle":
            found.answer = answer_of(messages)
        return found

    async def interrupted(self, watch: bool, limit: int = 500) -> list[dict[str, Any]]:
        """Interrupted threads: Signoff's own, or (watching) every one of the deployment."""
        metadata = None if watch else {MARK: self.prefix}
        found: list[dict[str, Any]] = []
        async with _server("threads.search"):
            while len(found) < limit:
                page = await self.client.threads.search(
                    status="interrupted", metadata=metadata, limit=100, offset=len(found)
                )
                found.extend(dict(thread) for thread in page)
                if len(page) < 100:
                    break
        return found

    # runs --------------------------------------------------------------------

    async def sent(self, thread_id: str, command_id: str) -> dict[str, Any] | None:
        """The run this command already created (a handed-over command), if any."""
        async with _server("runs.list"):
            try:
                runs = await self.client.runs.list(thread_id, limit=100)
            except NotFoundError:
                return None
        mine = (dict(r) for r in runs if (r.get("metadata") or {}).get(COMMAND) == command_id)
        return next(mine, None)

    async def settle(self, thread_id: str) -> None:
        """Wait for runs going on in the thread (anyone's) to end."""
        async with _server("runs.list"):
            try:
                runs = await self.client.runs.list(thread_id, limit=20)
            except NotFoundError:
                return
        for run in runs:
            if run.get("status") in ACTIVE:
                await self.wait(thread_id, str(run["run_id"]))

    async def wait(self, thread_id: str, run_id: str) -> None:
        """Until the run ended (joins again after a read timeout: runs may take long)."""
        while True:
            try:
                async with _server("runs.join"):
                    await self.client.runs.join(thread_id, run_id)
                return
            except ServerAway as away:
                if not isinstance(away.__cause__, httpx.TimeoutException):
                    raise
                async with _server("runs.get"):
                    run = await self.client.runs.get(thread_id, run_id)
                if run.get("status") not in ACTIVE:
                    return

    async def open_thread(self, run: Run) -> str | None:
        """The run's thread on the server, created once; its metadata names Signoff and Slack.
        Returns the assistant its runs have used (None before its first run)."""
        metadata = {
            MARK: self.prefix,
            "signoff_channel": run.channel,
            "signoff_slack_thread": run.thread_ts or "",
            "signoff_requester": run.requester or "",
        }
        async with _server("threads.create"):
            thread = await self.client.threads.create(
                thread_id=run.thread_id, metadata=metadata, if_exists="do_nothing"
            )
            had = thread.get("metadata") or {}
            if had.get(MARK) == self.prefix and any(had.get(k) != v for k, v in metadata.items()):
                await self.client.threads.update(run.thread_id, metadata=metadata)
        return str(had["assistant_id"]) if had.get("assistant_id") else None

    async def send(
        self,
        run: Run,
        command_id: str,
        approved: list[dict[str, Any]],
        graph_input: Any = None,
        command: dict[str, Any] | None = None,
        assistant: str | None = None,
    ) -> str:
        """Create a run on the thread (never beside another one); returns its id. Busy on 409.
        `assistant`: the thread's own (its runs go on with the assistant that started them,
        whatever the names); else the one named as the run's graph."""
        assistant = assistant or await self.assistant(run.graph)
        if assistant is None:
            raise LookupError(f"the Agent Server has no assistant {run.graph!r}")
        async with _server("runs.create"):
            try:
                created = await self.client.runs.create(
                    run.thread_id,
                    assistant,
                    input=cast(Any, graph_input),
                    command=cast(Any, command),
                    metadata={MARK: self.prefix, COMMAND: command_id},
                    config={"configurable": {APPROVED: approved}},
                    webhook=self.webhook_url,
                    multitask_strategy="reject",
                    # servers that know it refuse an answer to an interrupt that is not waiting
                    # (Signoff checked it just before; this closes the gap on such servers)
                    strict_resume=True if command else None,
                )
            except ConflictError as exc:
                raise Busy("the Agent Server is running something else in this thread") from exc
        log.info("remote_run_sent", run_id=created["run_id"], assistant_id=assistant)
        return str(created["run_id"])

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.aclose()


class Reconciler:
    """A thread's state on the server, made Signoff's: approvals, the answer, the failure."""

    def __init__(
        self, store: Store, server: AgentServer, watch_channel: str | None = None, ttl_s: int = 86_400
    ):
        self.store = store
        self.server = server
        self.watch_channel = watch_channel  # adopt threads Signoff did not start (watch mode)
        self.ttl_s = ttl_s  # how long "this run's end was told" is remembered

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
        run = await self.store.run(thread_id)
        thread = await self.server.read(thread_id)
        if thread is None:
            log.warning("remote_thread_gone", thread_id=thread_id)
            await self.store.remote_seen(thread_id)
            return None
        if thread.status == "busy":
            return RunState.RUNNING
        if run is None:
            run = await self._adopt(thread)
            if run is None:
                return None
        state = await self._apply(run, thread)
        await self.store.remote_seen(thread_id)
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
        if await self.store.save_run(run, only_new=True):
            log.info("remote_thread_adopted", thread_id=thread.thread_id, graph=graph)
            async with _server("threads.update"):
                await self.server.client.threads.update(thread.thread_id, metadata={MARK: self.server.prefix})
        return await self.store.run(thread.thread_id)

    async def _apply(self, run: Run, thread: RemoteThread) -> RunState | None:
        await self._close_answered_elsewhere(run, thread)
        if thread.status == "interrupted":
            if await self.store.run_state(run.thread_id) is not RunState.WAITING:
                await self.store.set_run_state(run.thread_id, RunState.WAITING)
            for request in thread.pending:
                origin = thread.origins.get(request.interrupt_id) or run.graph
                approval, created = await self.store.create_approval(approval_for(request, run, origin))
                if not created and approval.status is ApprovalStatus.FAILED and not approval.replaced_by:
                    # still waited for, but its card was closed (a 409, a refused set): a new card
                    fresh, _ = await self.store.create_approval(
                        approval_for(request, run, origin), replaces=approval.approval_id
                    )
                    await self.store.finish(
                        approval, ApprovalStatus.FAILED, approval.error, replaced_by=fresh.approval_id
                    )
            return RunState.WAITING
        if thread.last_run is None:  # a thread with no run yet: nothing ended
            return await self.store.run_state(run.thread_id)
        key = f"remote-{thread.last_run}"
        if thread.status == "idle":
            told = await self._tell_once(
                thread.last_run, RunFinished(thread_id=run.thread_id, command_id=key, answer=thread.answer)
            )
            if told:
                await self.store.set_run_state(run.thread_id, RunState.FINISHED)
            return RunState.FINISHED
        error = (
            f"the run failed on the Agent Server (run {thread.last_run}); its logs have the details. "
            "Retry continues it from its last checkpoint."
        )
        failed = RunFailed(thread_id=run.thread_id, command_id=key, error=error)
        if await self._tell_once(thread.last_run, failed):
            await self.store.set_run_state(run.thread_id, RunState.FAILED)
        return RunState.FAILED

    async def _close_answered_elsewhere(self, run: Run, thread: RemoteThread) -> None:
        """Cards of interrupts the thread no longer waits for (answered in Agent Inbox, Studio, a
        script) stop offering buttons; a decision already on its way is left to its resume.
        Closing is checked against a second reading, taken just before."""
        waiting = {request.interrupt_id for request in thread.pending}
        gone = [
            a
            for a in await self.store.thread_approvals(run.thread_id, limit=50)
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
                await self.store.finish(approval, ApprovalStatus.FAILED, error=ANSWERED_ELSEWHERE)

    async def _tell_once(self, run_id: str, event: RunFinished | RunFailed) -> bool:
        return await self.store.tell_once(run_id, event, self.ttl_s)


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
        await self.store.set_run_state(run.thread_id, RunState.RUNNING)
        await self.store.remote_sent(run.thread_id)
        return await self.server.send(run, command_id, approved, graph_input, command, assistant)


def reconciler(settings: Settings, store: Store, server: AgentServer, watch: bool = False) -> Reconciler:
    """The Reconciler of this install: "told once" remembered as long as the retention keeps
    runs; `watch`: adopts threads nobody's Signoff started (the bot, with watch mode on)."""
    channel = settings.channel if watch and settings.agent_server_watch else None
    return Reconciler(store, server, channel, ttl_s=max(60, seconds(settings.retention) or 0))


def agent_server(settings: Settings) -> AgentServer | None:
    """The Agent Server of SIGNOFF_AGENT_SERVER_URL, if set."""
    if not settings.agent_server_url:
        return None
    return AgentServer(
        settings.agent_server_url,
        settings.agent_server_api_key,
        settings.webhook_url,
        settings.prefix,
    )
