"""Run a graph, report its pauses, resume it with checked answers.

The runner owns the LangGraph side of a thread: it starts runs, turns every
pending interrupt into a `PendingRequest`, and resumes only with answers that
the protocol accepted for an interrupt that is still pending. Whatever the
graph raises becomes a failed `Outcome` rather than a crash.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import structlog
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage
from langgraph.types import Command

from agent_runner.logs import get_logger
from agent_runner.protocol import PendingRequest, check_resume

log = get_logger("runner")


class RunStatus(StrEnum):
    PAUSED = "paused"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass
class Outcome:
    thread_id: str
    status: RunStatus
    pending: list[PendingRequest] = field(default_factory=list)
    answer: str = ""
    error: str = ""
    # interrupt id -> which agent asked: the graph, or "subagent <name>" for deepagents
    origins: dict[str, str] = field(default_factory=dict)


class StaleAnswer(LookupError):
    """An answer for an interrupt that is not the thread's pending one (any more)."""


def thread_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def tool_schemas(graph: Any) -> dict[str, dict[str, Any]]:
    """JSON argument schemas of the graph's tools, by name (for edit checks)."""
    schemas: dict[str, dict[str, Any]] = {}
    for node in getattr(graph, "nodes", {}).values():
        tools = getattr(getattr(node, "bound", None), "tools_by_name", None) or {}
        for name, tool in tools.items():
            schema = tool.tool_call_schema
            if isinstance(schema, dict):
                schemas[name] = schema
            elif hasattr(schema, "model_json_schema"):
                schemas[name] = schema.model_json_schema()
    return schemas


def final_answer(values: Mapping[str, Any]) -> str:
    for message in reversed(values.get("messages", [])):
        if isinstance(message, AIMessage) and not message.tool_calls:
            return message.text
    return ""


ToolStarted = Callable[[str, str], Awaitable[None]]  # (thread_id, tool name)


class _ToolWatcher(AsyncCallbackHandler):
    """Tells the runner's owner which tool is running (for the run's status line)."""

    def __init__(self, thread_id: str, on_tool: ToolStarted):
        self.thread_id = thread_id
        self.on_tool = on_tool

    async def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        await self.on_tool(self.thread_id, (serialized or {}).get("name") or kwargs.get("name") or "a tool")


class Runner:
    """Runs one compiled graph that already has the project's checkpointer."""

    def __init__(self, graph: Any, name: str = "graph", on_tool: ToolStarted | None = None):
        self.graph = graph
        self.name = name
        self.on_tool = on_tool
        self.tool_schemas = tool_schemas(graph)

    async def start(self, thread_id: str, text: str, **state: Any) -> Outcome:
        """Start (or continue) the thread with a user message; `state` adds other keys."""
        with structlog.contextvars.bound_contextvars(thread_id=thread_id, graph=self.name):
            log.info("run_started")
            graph_input = {**state, "messages": [{"role": "user", "content": text}]}
            return await self._run(graph_input, thread_id)

    async def proceed(self, thread_id: str) -> Outcome:
        """Continue a run that stopped mid-step (its runner died) from its last checkpoint."""
        with structlog.contextvars.bound_contextvars(thread_id=thread_id, graph=self.name):
            log.warning("run_continued")
            return await self._run(None, thread_id)

    async def current(self, thread_id: str) -> Outcome | None:
        """The thread's state as an outcome, or None while it is mid-run (see `proceed`)."""
        state = await self.graph.aget_state(thread_config(thread_id))
        if state.interrupts:
            return Outcome(thread_id, RunStatus.PAUSED, pending=self._requests(state.interrupts),
                           origins=await self.origins(thread_id))
        if state.next:
            return None
        return Outcome(thread_id, RunStatus.FINISHED, answer=final_answer(state.values))

    async def pending(self, thread_id: str) -> list[PendingRequest]:
        state = await self.graph.aget_state(thread_config(thread_id))
        return self._requests(state.interrupts)

    def _requests(self, interrupts: Any) -> list[PendingRequest]:
        return [PendingRequest.from_interrupt(i, self.tool_schemas) for i in interrupts]

    async def origins(self, thread_id: str) -> dict[str, str]:
        """Which agent raised each pending interrupt.

        A deepagents subagent's interrupt only carries the namespace
        `tools:<task id>`; the parent's pending `task` tool call, at the index of
        the tools node's push task, names the subagent.
        """
        state = await self.graph.aget_state(thread_config(thread_id), subgraphs=True)
        calls = next(
            (m.tool_calls for m in reversed(state.values.get("messages", []))
             if isinstance(m, AIMessage) and m.tool_calls),
            [],
        )
        found: dict[str, str] = {}
        for task in state.tasks:
            origin = self.name
            path = task.path
            if task.name == "tools" and len(path) >= 2 and path[0] == "__pregel_push" and isinstance(path[1], int):
                if path[1] < len(calls) and calls[path[1]]["name"] == "task":
                    origin = f"subagent {calls[path[1]]['args'].get('subagent_type', '?')}"
            for interrupt in task.interrupts:
                found[interrupt.id] = origin
        return found

    async def resume(self, thread_id: str, answers: Mapping[str, Any]) -> Outcome:
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
            return await self._run(Command(resume=clean), thread_id)

    async def _run(self, graph_input: Any, thread_id: str) -> Outcome:
        config: dict[str, Any] = thread_config(thread_id)
        if self.on_tool:
            config["callbacks"] = [_ToolWatcher(thread_id, self.on_tool)]
        try:
            result = await self.graph.ainvoke(graph_input, config, version="v2")
        except Exception as exc:  # the graph's failure is the run's outcome, not ours
            log.exception("run_failed")
            return Outcome(thread_id, RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        if result.interrupts:
            pending = self._requests(result.interrupts)
            origins = await self.origins(thread_id)
            for request in pending:
                log.info("paused", interrupt_id=request.interrupt_id, kind=request.kind.value,
                         actions=[a.name for a in request.actions], origin=origins.get(request.interrupt_id))
            return Outcome(thread_id, RunStatus.PAUSED, pending=pending, origins=origins)
        log.info("run_finished")
        return Outcome(thread_id, RunStatus.FINISHED, answer=final_answer(result.value))
