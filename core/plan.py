"""A run's plan: one task per tool call the agent makes, as the runner saw it. Pure.

The runner notes each call when it starts, ends or fails (a LangChain callback), and again
from the thread's messages whenever the run pauses or finishes (which is all an Agent Server
run shows). The bot draws the plan in the run's status message (`bot.plan`), laying each
approval's actions over the tasks they gate: a gated call is matched to its task by tool
name and a digest of the arguments it runs with, so no argument is stored with a task.

A task's status only moves forward (pending → in progress → complete or error): notes
arrive from two sources, in any order, and the later one never undoes the earlier.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

FIELD = "task:"  # a task's field in the run's state hash: task:<key>
MOST_TASKS = 200  # tasks kept per run; calls beyond are not noted (the plan says how many)


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

    def encoded(self) -> str:
        """`rank|at|json`: what `core.scripts.PUT_TASKS` compares and keeps."""
        body = self.model_dump_json(exclude={"at"}, exclude_defaults=True)
        return f"{RANK[self.status]}|{self.at:.6f}|{body}"

    @classmethod
    def decoded(cls, value: str) -> PlanTask:
        _, at, body = value.split("|", 2)
        return cls.model_validate({**json.loads(body), "at": float(at)})


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
                    at=at + len(tasks) * 1e-6,
                )
            )
    return tasks


def subagent_of(name: str, args: Any) -> str:
    """The subagent a deepagents `task` call runs, else ""."""
    if name == "task" and isinstance(args, Mapping):
        return str(args.get("subagent_type") or "")
    return ""


# Lua: put the task pairs ARGV[from], ARGV[from + 1]… into hash `key`; a status never goes back
# and a task keeps the time it was first noted. Nothing beyond MOST_TASKS is noted.
TASKS_LUA = f"""
local function put_tasks(key, from)
  for n = from, #ARGV, 2 do
    local field, new = ARGV[n], ARGV[n + 1]
    local old = redis.call('HGET', key, field)
    if old then
      local rank, at = string.match(old, '^(%d)|([^|]*)|')
      if tonumber(rank) > tonumber(string.sub(new, 1, 1)) then
        new = nil
      else
        new = string.sub(new, 1, 2) .. at .. string.sub(new, string.find(new, '|', 3, true), -1)
      end
    elseif redis.call('HLEN', key) >= {MOST_TASKS} + 8 then
      new = nil
    end
    if new then redis.call('HSET', key, field, new) end
  end
end
"""

# KEYS: the run's state hash, the status lane's due set; ARGV: thread id, due (ms), task pairs
PUT_TASKS = (
    TASKS_LUA
    + """
put_tasks(KEYS[1], 3)
redis.call('ZADD', KEYS[2], 'LT', ARGV[2], 'status:' .. ARGV[1])
return 1
"""
)
