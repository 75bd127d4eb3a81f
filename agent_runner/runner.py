"""Run a graph, report its pauses, resume it with checked answers.

The runner owns the LangGraph side of a thread: it starts runs, turns every
pending interrupt into a `PendingRequest`, and resumes only with answers that
the protocol accepted for an interrupt that is still pending. Whatever the
graph raises becomes a failed `RunResult` rather than a crash, except Redis
being away: that is not the run's failure, so it propagates and the command
is tried again once Redis is back.

A run's first message carries an id (`message_id`), so whoever is handed the
same start command again can tell from the thread's checkpoints that it
already began, and continue it instead of starting it twice.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import structlog
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_runner.checkpointer import WRITE_FENCE
from agent_runner.graphs import build_graph
from agent_runner.idempotency import APPROVED
from agent_runner.previews import Previewer
from core.config import Settings
from core.logs import get_logger
from core.outages import is_lease_lost, is_outage
from core.plan import PlanTask, TaskStatus, args_digest, subagent_of, tasks_from_messages, with_call_ids
from core.protocol import PendingRequest, check_resume, origin_of
from core.records import RunState
from core.secrets import Redaction, carried, mask_text

log = get_logger("runner")


@dataclass
class RunResult:
    thread_id: str
    state: RunState  # WAITING (paused: `pending` says for what), FINISHED or FAILED
    pending: list[PendingRequest] = field(default_factory=list)
    answer: str = ""
    error: str = ""
    # interrupt id -> which agent asked: the graph, or "subagent <name>" for deepagents
    origins: dict[str, str] = field(default_factory=dict)
    tasks: list[PlanTask] = field(default_factory=list)  # the plan its messages show (`core.plan`)
    # the secret values its tool calls carried: masked wherever the agent repeats one
    secrets: list[str] = field(default_factory=list)


class StaleAnswer(LookupError):
    """An answer for an interrupt that is not the thread's pending one (any more)."""


def thread_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def tools_of(graph: Any) -> dict[str, Any]:
    """The graph's tools (its tool nodes'), by name."""
    found: dict[str, Any] = {}
    for node in getattr(graph, "nodes", {}).values():
        found.update(getattr(getattr(node, "bound", None), "tools_by_name", None) or {})
    return found


def tool_schemas(graph: Any) -> dict[str, dict[str, Any]]:
    """JSON argument schemas of the graph's tools, by name (for edit checks)."""
    schemas: dict[str, dict[str, Any]] = {}
    for name, tool in tools_of(graph).items():
        schema = tool.tool_call_schema
        if isinstance(schema, dict):
            schemas[name] = schema
        elif hasattr(schema, "model_json_schema"):
            schemas[name] = schema.model_json_schema()
    return schemas


def as_received(tool: Any, args: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments as `tool` will receive them, checked and converted by its own schema as
    LangChain does before it runs it ("50000" is 50000 for an `int`), and None; or None and why
    the schema refuses them (the tool would fail). (None, None) when the tool has no pydantic
    schema to ask (a JSON-schema tool): the policy then sees the arguments as asked.

    The schema LangChain runs a tool on is its `args_schema`, validators included; a tool with
    arguments LangChain injects (a `ToolRuntime`, an `InjectedState`…) has those in it, which a
    call does not carry, so such a tool is checked with its `tool_call_schema` (the same fields
    without them, and without the model's own validators). A `Decimal` is judged as the number
    it is (a `when` compares numbers), not as the text JSON would make of it."""
    schema = getattr(tool, "args_schema", None)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)) or _injected(tool):
        schema = getattr(tool, "tool_call_schema", None)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return None, None
    try:
        validated = schema.model_validate(dict(args))
    except ValidationError as exc:
        return None, "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'the arguments'}: {error['msg']}"
            for error in exc.errors()[:5]
        )
    except Exception as exc:  # a validator of the tool's that raised something else: it would fail too
        return None, f"the arguments: {type(exc).__name__}"
    return to_jsonable_python(_numbers(validated.model_dump()), fallback=str), None


def _injected(tool: Any) -> bool:
    """Whether LangChain injects arguments into `tool` that a call does not carry."""
    try:
        return bool(getattr(tool, "_injected_args_keys", frozenset())) or any(
            "Injected" in repr(annotation)
            for annotation in getattr(tool.args_schema, "__annotations__", {}).values()
        )
    except Exception:  # a tool whose signature LangChain cannot read: ask its call schema
        return True


def _numbers(value: Any) -> Any:
    """A dump's `Decimal`s as numbers (whole ones as ints), everything else as it is."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_numbers(v) for v in value]
    return value


def _tasks(values: Any) -> list[PlanTask]:
    messages = values.get("messages", []) if isinstance(values, Mapping) else []
    return tasks_from_messages(messages, time.time())


def final_answer(values: Mapping[str, Any]) -> str:
    for message in reversed(values.get("messages", [])):
        if isinstance(message, AIMessage) and not message.tool_calls:
            return message.text
    return ""


ToolStarted = Callable[[str, str], Coroutine[Any, Any, None]]  # (thread_id, tool name)
TaskNoted = Callable[[str, PlanTask], Coroutine[Any, Any, None]]  # (thread_id, the call's task)
Fence = Callable[[str, bool], Coroutine[Any, Any, str]]  # (thread_id, strict): the lock's token, or LeaseLost
FENCE_WAIT_S = 30.0  # a fencing check that takes longer: Redis is away; the tool waits for it


class _ToolWatcher(BaseCallbackHandler):
    """Before each tool starts: the fencing check (may this runner still run the thread?), then
    tells the runner's owner which tool is running (for the run's status line). The fence's
    refusal is raised (`raise_error`): the tool does not start.

    A sync handler on purpose: LangChain runs a sync tool's `invoke` in a thread, where errors of
    async handlers are logged and swallowed; a sync handler's are raised, in that path and (run
    in an executor) in the async one, off the event loop, waiting for the loop to do the check. A
    tool a node calls synchronously on the event loop itself is not fenced (waiting there would
    wait for itself; such a call holds the whole loop anyway)."""

    raise_error = True
    # only tools: every other event (chains, model tokens) would cost an executor hop for nothing
    ignore_llm = ignore_chain = ignore_retriever = ignore_chat_model = True  # (tools come under "agent")
    ignore_custom_event = ignore_retry = True

    def __init__(
        self,
        thread_id: str,
        on_tool: ToolStarted | None,
        fence: Fence | None,
        on_task: TaskNoted | None = None,
    ):
        self.thread_id = thread_id
        self.on_tool = on_tool
        self.fence = fence
        self.on_task = on_task
        self.loop = asyncio.get_running_loop()
        self.tasks: dict[Any, PlanTask] = {}  # run id -> the task of the call it runs
        self.subagents: dict[str, str] = {}  # a subagent call's namespace -> its task key

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        try:
            on_the_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_the_loop = False
        name = (serialized or {}).get("name") or kwargs.get("name") or "a tool"
        self._note(kwargs.get("run_id"), self._task(name, kwargs))
        if on_the_loop:
            return
        if self.fence is not None:
            checked = asyncio.run_coroutine_threadsafe(self.fence(self.thread_id, True), self.loop)
            try:
                checked.result(FENCE_WAIT_S)
            except TimeoutError:  # (concurrent.futures raises the builtin one)
                checked.cancel()
                raise RedisTimeoutError("the fencing check before a tool did not finish") from None
        if self.on_tool is not None:  # a status line: said without waiting, never stops a tool
            asyncio.run_coroutine_threadsafe(self.on_tool(self.thread_id, name), self.loop)

    def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        self._ended(kwargs.get("run_id"), TaskStatus.COMPLETE)

    def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
        # a pause (an interrupt raised through a subagent's call) is not the call failing
        self._ended(kwargs.get("run_id"), None if isinstance(error, GraphBubbleUp) else TaskStatus.ERROR)

    def _task(self, name: str, kwargs: dict[str, Any]) -> PlanTask | None:
        """The call's task: keyed by its tool call id, under the subagent call whose namespace
        it runs in (deepagents runs a subagent inside its `task` call's namespace)."""
        call_id = kwargs.get("tool_call_id")
        if not call_id:
            return None
        namespace = str((kwargs.get("metadata") or {}).get("langgraph_checkpoint_ns") or "")
        outer, _, inner = namespace.partition("|")
        group = self.subagents.get(outer, "") if inner else ""
        key = f"{group}/{call_id}" if group else str(call_id)
        inputs = kwargs.get("inputs")
        label = subagent_of(name, inputs)
        if label and not inner:
            self.subagents[outer] = key
        return PlanTask(
            key=key,
            name=name,
            digest=args_digest(inputs) if isinstance(inputs, dict) else "",
            status=TaskStatus.IN_PROGRESS,
            group=group,
            label=label,
            at=time.time(),
        )

    def _ended(self, run_id: Any, status: TaskStatus | None) -> None:
        task = self.tasks.pop(run_id, None)
        if task is not None and status is not None:
            self._note(None, task.model_copy(update={"status": status}))

    def _note(self, run_id: Any, task: PlanTask | None) -> None:
        """Said without waiting, never stops a tool (as the status line)."""
        if task is None or self.on_task is None:
            return
        if run_id is not None:
            self.tasks[run_id] = task
        asyncio.run_coroutine_threadsafe(self.on_task(self.thread_id, task), self.loop)


class Runner:
    """Runs one compiled graph that already has the project's checkpointer."""

    def __init__(
        self,
        graph: Any,
        name: str = "graph",
        on_tool: ToolStarted | None = None,
        fence: Fence | None = None,
        on_task: TaskNoted | None = None,
        redact: Callable[[str], Sequence[Redaction]] | None = None,
        previews: Previewer | None = None,
    ):
        self.graph = graph
        self.name = name
        self.redact = redact  # the policy's `redact` paths of a tool (`PolicyFile.redactions`)
        self.previews = previews or Previewer()  # what each paused call will do, for its card
        self.on_tool = on_tool
        self.on_task = on_task  # each call's task as it starts, ends or fails (the run's plan)
        self.fence = fence  # before a tool starts: raises LeaseLost when the thread is not ours
        self.tool_schemas = tool_schemas(graph)
        self.tools = tools_of(graph)

    async def start(
        self,
        thread_id: str,
        text: str,
        message_id: str | None = None,
        approved: list[dict[str, Any]] | None = None,
        **state: Any,
    ) -> RunResult:
        """Start (or continue) the thread with a user message; `state` adds other keys."""
        with structlog.contextvars.bound_contextvars(thread_id=thread_id, graph=self.name):
            log.info("run_started")
            message: dict[str, Any] = {"role": "user", "content": text}
            if message_id:
                message["id"] = message_id
            graph_input = {**state, "messages": [message]}
            return await self._run(graph_input, thread_id, approved)

    async def has_message(self, thread_id: str, message_id: str) -> bool:
        """Whether the thread's checkpoints hold the message `message_id` (its run began)."""
        state = await self.graph.aget_state(thread_config(thread_id))
        for message in (state.values or {}).get("messages", []) if isinstance(state.values, dict) else []:
            found = message.get("id") if isinstance(message, dict) else getattr(message, "id", None)
            if found == message_id:
                return True
        return False

    async def proceed(self, thread_id: str, approved: list[dict[str, Any]] | None = None) -> RunResult:
        """Continue a run that stopped mid-step (its runner died) from its last checkpoint."""
        with structlog.contextvars.bound_contextvars(thread_id=thread_id, graph=self.name):
            log.warning("run_continued")
            return await self._run(None, thread_id, approved)

    async def current(self, thread_id: str) -> RunResult | None:
        """The thread's state as an outcome, or None while it is mid-run (see `proceed`)."""
        state = await self.graph.aget_state(thread_config(thread_id))
        secrets = self.secrets_of(state.values)
        if state.interrupts:
            return RunResult(
                thread_id,
                RunState.WAITING,
                pending=await self.previewed(thread_id, self._requests(state.interrupts)),
                origins=await self.origins(thread_id),
            )
        if state.next or state.tasks:  # (tasks whose writes were saved, but no step after them)
            return None
        answer = mask_text(final_answer(state.values), secrets)
        return RunResult(thread_id, RunState.FINISHED, answer=answer, secrets=secrets)

    async def pending(self, thread_id: str) -> list[PendingRequest]:
        state = await self.graph.aget_state(thread_config(thread_id))
        return self._requests(state.interrupts)

    async def previewed(self, thread_id: str, requests: list[PendingRequest]) -> list[PendingRequest]:
        """`requests` with each action's preview (`agent_runner.previews`), before their approvals
        are made: never fails, never waits longer than the preview time limit (per call)."""
        return await self.previews.previewed(self.graph, self.tools, thread_id, requests)

    def _requests(self, interrupts: Any) -> list[PendingRequest]:
        return [self._checked(PendingRequest.from_interrupt(i, self.tool_schemas)) for i in interrupts]

    def _checked(self, request: PendingRequest) -> PendingRequest:
        """Each action with its arguments as its tool will receive them, or why the tool's own
        schema refuses them (`as_received`): the policy judges the call the tool would run."""
        actions = []
        for action in request.actions:
            tool = self.tools.get(action.name)
            received, refused = as_received(tool, action.args) if tool is not None else (None, None)
            actions.append(action.model_copy(update={"received": received, "refused": refused}))
        return request.model_copy(update={"actions": tuple(actions)}) if actions else request

    def secrets_of(self, values: Any) -> list[str]:
        """The secret values the thread's tool calls carried (`core.secrets.carried`)."""
        messages = values.get("messages", []) if isinstance(values, Mapping) else []
        return carried(messages, self.redact)

    async def origins(self, thread_id: str) -> dict[str, str]:
        """Which agent raised each pending interrupt.

        A deepagents subagent's interrupt only carries the namespace
        `tools:<task id>`; the parent's pending `task` tool call, at the index of
        the tools node's push task, names the subagent.
        """
        state = await self.graph.aget_state(thread_config(thread_id), subgraphs=True)
        calls = next(
            (
                m.tool_calls
                for m in reversed(state.values.get("messages", []))
                if isinstance(m, AIMessage) and m.tool_calls
            ),
            [],
        )
        found: dict[str, str] = {}
        for task in state.tasks:
            origin = origin_of(task.name, task.path, calls, self.name)
            for interrupt in task.interrupts:
                found[interrupt.id] = origin
        return found

    async def resume(
        self, thread_id: str, answers: Mapping[str, Any], approved: list[dict[str, Any]] | None = None
    ) -> RunResult:
        """Resume with `{interrupt_id: payload}`; every payload is checked first.

        Raises `StaleAnswer` when an interrupt is not pending, and
        `DecisionRefused` when a payload would be refused by the middleware;
        in both cases nothing reaches LangGraph.
        """
        with structlog.contextvars.bound_contextvars(thread_id=thread_id, graph=self.name):
            pending = {request.interrupt_id: request for request in await self.pending(thread_id)}
            stale = [interrupt_id for interrupt_id in answers if interrupt_id not in pending]
            if stale:
                log.warning("resume_refused_stale", interrupt_ids=stale)
                raise StaleAnswer(f"not pending on thread {thread_id}: {', '.join(stale)}")
            clean = {
                interrupt_id: check_resume(pending[interrupt_id], payload)
                for interrupt_id, payload in answers.items()
            }
            log.info("resuming", interrupt_ids=list(clean))
            return await self._run(Command(resume=clean), thread_id, approved)

    async def _run(
        self, graph_input: Any, thread_id: str, approved: list[dict[str, Any]] | None = None
    ) -> RunResult:
        config: dict[str, Any] = thread_config(thread_id)
        # Tools read it through `idempotency_key(runtime)`: the same key on every re-execution.
        config["configurable"][APPROVED] = approved or []
        if self.fence is not None:  # checked before each checkpoint is saved, as before each tool
            config["configurable"][WRITE_FENCE] = functools.partial(self.fence, thread_id)
        if self.on_tool or self.fence or self.on_task:
            config["callbacks"] = [_ToolWatcher(thread_id, self.on_tool, self.fence, self.on_task)]
        try:
            result = await self.graph.ainvoke(graph_input, config, version="v2")
        except Exception as exc:  # the graph's failure is the run's outcome, not ours
            if is_outage(exc) or is_lease_lost(exc):  # tried again (Redis away) / not ours
                raise
            # Slack sees the error's type and a reference; its text (which may hold anything a
            # tool touched) goes only to the log, under that reference.
            ref = uuid.uuid4().hex[:8]
            log.exception("run_failed", ref=ref)
            return RunResult(
                thread_id, RunState.FAILED, error=f"{type(exc).__name__} — details in the logs, ref {ref}"
            )
        if result.interrupts:
            messages = result.value.get("messages", []) if isinstance(result.value, Mapping) else []
            pending = [with_call_ids(request, messages) for request in self._requests(result.interrupts)]
            origins = await self.origins(thread_id)
            for request in pending:
                log.info(
                    "paused",
                    interrupt_id=request.interrupt_id,
                    kind=request.kind.value,
                    actions=[a.name for a in request.actions],
                    origin=origins.get(request.interrupt_id),
                )
            return RunResult(
                thread_id,
                RunState.WAITING,
                pending=await self.previewed(thread_id, pending),  # what each call will do, for its card
                origins=origins,
                tasks=_tasks(result.value),
                secrets=self.secrets_of(result.value),
            )
        log.info("run_finished")
        return RunResult(
            thread_id,
            RunState.FINISHED,
            answer=mask_text(final_answer(result.value), self.secrets_of(result.value)),
            tasks=_tasks(result.value),
        )


def runners_for(specs: Mapping[str, str], saver: Any, settings: Settings) -> dict[str, Runner]:
    """A runner per graph of `specs`, on `saver`: each with the policy's `redact` paths and the
    preview hooks `settings` name (imported once, here: one that cannot be stops the start)."""
    previews = Previewer.from_settings(settings)
    redact = settings.policy.redactions
    return {
        name: Runner(build_graph(spec, saver), name, redact=redact, previews=previews)
        for name, spec in specs.items()
    }
