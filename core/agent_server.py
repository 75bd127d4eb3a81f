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
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError

from core.config import Settings
from core.logs import get_logger
from core.outages import TryLater
from core.plan import PlanTask, tasks_from_messages, with_call_ids
from core.protocol import APPROVED, PendingRequest, origin_of
from core.records import Run
from core.secrets import Redaction, carried, mask_text

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
async def server_call(what: str) -> AsyncIterator[None]:
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
    tasks: list[PlanTask] = field(default_factory=list)  # the plan its messages show (`core.plan`)
    secrets: list[str] = field(default_factory=list)  # what its tool calls carried (`core.secrets`)
    values: Mapping[str, Any] = field(default_factory=dict)  # its state (the previews read its files)
    messages: list[Mapping[str, Any]] = field(default_factory=list)  # its messages, as the server gave them

    def masked(self, redact: Callable[[str], Sequence[Redaction]] | None) -> RemoteThread:
        """With what its calls carried at the policy's `redact` paths too (only the reconciler
        knows the policy): among its secrets, and masked in its answer."""
        if redact is None:
            return self
        more = [s for s in carried(self.messages, redact) if s not in self.secrets]
        if more:
            self.secrets = [*self.secrets, *more]
            self.answer = mask_text(self.answer, self.secrets)
        return self


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
        async with server_call("assistants.search"):
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
            async with server_call("threads.get"):
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
        found.values = values if isinstance(values, Mapping) else {}
        messages = values.get("messages", []) if isinstance(values, Mapping) else []
        messages = [m for m in messages if isinstance(m, Mapping)]
        found.task = next((text_of(m) for m in messages if m.get("type") in ("human", "user")), "")
        found.last_run = str(runs[0]["run_id"]) if runs else None
        found.tasks = tasks_from_messages(messages, time.time())
        found.messages = messages
        found.secrets = carried(messages)  # (by name and shape: the reconciler adds the policy's: `masked`)
        if found.status == "interrupted":
            calls: list[Mapping[str, Any]] = next(
                (list(m["tool_calls"]) for m in reversed(messages) if m.get("tool_calls")), []
            )
            for task in state.get("tasks") or []:
                path = task.get("path")
                origin = origin_of(str(task.get("name")), path if isinstance(path, list) else (), calls, "")
                for interrupt in task.get("interrupts") or []:
                    request = with_call_ids(PendingRequest.from_interrupt(interrupt), messages)
                    found.pending.append(request)
                    found.origins[request.interrupt_id] = origin
        elif found.status == "idle":
            found.answer = mask_text(answer_of(messages), found.secrets)
        return found

    async def interrupted(self, watch: bool, limit: int = 500) -> list[dict[str, Any]]:
        """Interrupted threads: Signoff's own, or (watching) every one of the deployment."""
        metadata = None if watch else {MARK: self.prefix}
        found: list[dict[str, Any]] = []
        async with server_call("threads.search"):
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
        async with server_call("runs.list"):
            try:
                runs = await self.client.runs.list(thread_id, limit=100)
            except NotFoundError:
                return None
        mine = (dict(r) for r in runs if (r.get("metadata") or {}).get(COMMAND) == command_id)
        return next(mine, None)

    async def settle(self, thread_id: str) -> None:
        """Wait for runs going on in the thread (anyone's) to end."""
        async with server_call("runs.list"):
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
                async with server_call("runs.join"):
                    await self.client.runs.join(thread_id, run_id)
                return
            except ServerAway as away:
                if not isinstance(away.__cause__, httpx.TimeoutException):
                    raise
                async with server_call("runs.get"):
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
        async with server_call("threads.create"):
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
        async with server_call("runs.create"):
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
