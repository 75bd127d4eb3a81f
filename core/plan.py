"""A run's plan: one task per tool call the agent makes, as the runner saw it. Pure.

The runner notes each call when it starts, ends or fails (a LangChain callback), and again
from the thread's messages whenever the run pauses or finishes (which is all an Agent Server
run shows). The bot draws the plan in the run's status message (`bot.views.plan`), laying each
approval's actions over the tasks they gate: a gated call is matched to its task by tool
name and a digest of the arguments it runs with, so no argument is stored with a task.

A task's status only moves forward (pending → in progress → complete or error): notes
arrive from two sources, in any order, and a later one never undoes an earlier one. What the
thread's messages say of a call that ended is the last word (`settled`): the checkpoint holds
it, so a callback's note arriving late changes nothing, and a call run again (a Retry) says
how it ended this time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.protocol import PendingRequest

FIELD = "task:"  # a task's field in the run's state hash: task:<key>
MOST_TASKS = 1_000  # tasks kept per run: later calls are not noted (the plan shows the latest 30)


class TaskStatus(StrEnum):
    """Slack's task_card statuses."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    ERROR = "error"


RANK = {TaskStatus.PENDING: 0, TaskStatus.IN_PROGRESS: 1, TaskStatus.COMPLETE: 2, TaskStatus.ERROR: 2}


class PlanTask(BaseModel):
    """One tool call. `key` is its tool call id, under its subagent's (`<parent>/<id>`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str
    name: str
    digest: str = ""  # `args_digest` of the arguments it runs with
    status: TaskStatus = TaskStatus.PENDING
    group: str = ""  # the key of the subagent call it runs under
    label: str = ""  # a subagent call's subagent (`task` with `subagent_type`)
    at: float = 0.0  # when it was first noted (the plan's order)
    settled: bool = False  # read from the thread's messages: how the call ended, for good

    @property
    def rank(self) -> int:
        """A note of a lower rank never replaces one of a higher (a status never goes back)."""
        return RANK[self.status] + (1 if self.settled and RANK[self.status] == 2 else 0)

    def encoded(self) -> str:
        """`rank|at|json`: what `TASKS_LUA` compares (a higher rank replaces) and keeps."""
        body = self.model_dump_json(exclude={"at"}, exclude_defaults=True)
        return f"{self.rank}|{self.at:.6f}|{body}"

    @classmethod
    def decoded(cls, value: str) -> PlanTask:
        _, at, body = value.split("|", 2)
        return cls.model_validate({**json.loads(body), "at": float(at)})


STEP_S = 1e-5  # calls noted at one moment are this far apart: `encoded`'s six decimals keep them


def nth(at: float, index: int) -> float:
    """When the `index`-th of calls noted together at `at` was noted: apart from its
    neighbours and after them once `encoded` rounds it to the microsecond (1e-6 apart merged
    one pair in twenty, and the plan then showed them in Redis's hash order)."""
    return round(at, 5) + index * STEP_S


def args_digest(args: Any) -> str:
    """The same twelve characters for the same arguments, on either side."""
    text = json.dumps(args or {}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _get(message: Any, name: str, default: Any = None) -> Any:
    return message.get(name, default) if isinstance(message, Mapping) else getattr(message, name, default)


def tasks_from_messages(messages: Iterable[Any], at: float) -> list[PlanTask]:
    """The tasks the thread's messages show (LangChain messages or their dict form): each AI
    message's tool calls, complete or failed once a tool message answers them."""
    messages = list(messages)
    answered: dict[str, str] = {}
    for message in messages:
        if _get(message, "type") == "tool" and _get(message, "tool_call_id"):
            answered[str(_get(message, "tool_call_id"))] = str(_get(message, "status") or "success")
    tasks: list[PlanTask] = []
    for message in messages:
        if _get(message, "type") not in ("ai", "AIMessageChunk"):
            continue
        for call in _get(message, "tool_calls") or []:
            call_id, name = str(call.get("id") or ""), str(call.get("name") or "")
            if not call_id:
                continue
            said = answered.get(call_id)
            status = (
                TaskStatus.PENDING
                if said is None
                else TaskStatus.ERROR
                if said == "error"
                else TaskStatus.COMPLETE
            )
            tasks.append(
                PlanTask(
                    key=call_id,
                    name=name,
                    digest=args_digest(call.get("args")),
                    status=status,
                    label=subagent_of(name, call.get("args")),
                    at=nth(at, len(tasks)),
                    settled=said is not None,
                )
            )
    return tasks


def with_call_ids(request: PendingRequest, messages: Iterable[Any]) -> PendingRequest:
    """`request` with each action's tool call id, from the thread's last AI message that called
    tools: the middleware asks for its calls in their order, so each action takes the first
    call left of the same name and arguments. A subagent's action finds none (its calls are in
    the subagent's messages): it is matched by name and arguments (`bot.views.plan`)."""
    calls: list[Any] = next(
        (list(_get(m, "tool_calls")) for m in reversed(list(messages)) if _get(m, "tool_calls")), []
    )
    actions = []
    for action in request.actions:
        found = next(
            (c for c in calls if c.get("name") == action.name and c.get("args") == action.args), None
        )
        if found is not None:
            calls.remove(found)
            if not action.tool_call_id and found.get("id"):
                action = action.model_copy(update={"tool_call_id": str(found["id"])})
        actions.append(action)
    return request.model_copy(update={"actions": tuple(actions)})


def subagent_of(name: str, args: Any) -> str:
    """The subagent a deepagents `task` call runs, else ""."""
    if name == "task" and isinstance(args, Mapping):
        return str(args.get("subagent_type") or "")
    return ""
