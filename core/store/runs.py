"""Runs in Redis: where a LangGraph thread talks in Slack and who started it (its record), what it
is doing now and the tasks of its plan (its state, which its Slack status message shows), and a
Retry claimed once. The Store's `runs` room: its keys are `core.keys`' run and run_state, its
scripts the ones below.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from core import plan
from core.keys import Keys
from core.plan import MOST_TASKS
from core.records import Run, RunState
from core.store.client import now_ms

STATUS_DEBOUNCE_MS = 300  # a run's status message is drawn again this long after a change (coalesced)

# A run's plan tasks (`core.plan`): put the field / value pairs ARGV[from], ARGV[from + 1]… into
# the hash `key`. A value is `rank|at|json`: a lower rank never replaces a higher one, and a
# task keeps the time it was first noted. Nothing beyond MOST_TASKS is noted.
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


PUT_TASKS = (
    TASKS_LUA
    + """
local run_state, status_due = KEYS[1], KEYS[2]
local thread_id, due_ms = ARGV[1], ARGV[2]
-- ARGV[3…]: the task pairs

put_tasks(run_state, 3)
redis.call('ZADD', status_due, 'LT', due_ms, 'status:' .. thread_id)
return 1
"""
)


# What the run is doing (its status message follows), and the tasks its messages show.
SET_RUN_STATE = (
    TASKS_LUA
    + """
local run_state, idle, status_due = KEYS[1], KEYS[2], KEYS[3]
local state, detail, tool, is_idle, thread_id, now, due_ms = unpack(ARGV, 1, 7)
-- ARGV[8…]: the task pairs

redis.call('HSET', run_state, 'state', state, 'detail', detail, 'tool', tool)
if is_idle == '1' then redis.call('ZADD', idle, now, thread_id)
else redis.call('ZREM', idle, thread_id) end
put_tasks(run_state, 8)
redis.call('ZADD', status_due, 'LT', due_ms, 'status:' .. thread_id)
return 1
"""
)


# Retry on a failed run: failed -> running, once, whoever clicks how often.
CLAIM_RETRY = """
local run_state = KEYS[1]
if redis.call('HGET', run_state, 'state') == 'failed' then
  redis.call('HSET', run_state, 'state', 'running')
  return 1
end
return 0
"""


class Runs:
    """A run's record and state."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys
        self._set_state = redis.register_script(SET_RUN_STATE)
        self._put_tasks = redis.register_script(PUT_TASKS)
        self._claim_retry = redis.register_script(CLAIM_RETRY)

    async def save(self, run: Run, only_new: bool = False) -> bool:
        """Keep the run's record; `only_new`: unless it has one (True when written)."""
        return bool(
            await self.redis.set(self.keys.run(run.thread_id), run.model_dump_json(), nx=only_new or None)
        )

    async def get(self, thread_id: str) -> Run | None:
        raw = await self.redis.get(self.keys.run(thread_id))
        return Run.model_validate_json(raw) if raw else None

    async def thread_ids(self) -> set[str]:
        """The threads of every run this deployment (its prefix) keeps a record of: a scan, for
        operator commands (`signoff migrate --rekey`), never on a hot path."""
        found: set[str] = set()
        for partition in self.keys.partitions:
            head = f"{partition.base}:run:"
            async for key in self.redis.scan_iter(match=f"{head}*", count=1000):
                found.add(key[len(head) :])
        return found

    async def set_state(
        self,
        thread_id: str,
        state: RunState,
        detail: str = "",
        tool: str = "",
        debounce_ms: int = STATUS_DEBOUNCE_MS,
        tasks: Sequence[plan.PlanTask] = (),
    ) -> None:
        """What the run is doing, and the tasks of its plan it shows (`core.plan`); its Slack
        status message follows (coalesced: the latest state wins)."""
        partition = self.keys.of(thread_id)
        idle = state in (RunState.FINISHED, RunState.FAILED)  # idle from now: the retention counts
        await self._set_state(
            keys=[self.keys.run_state(thread_id), partition.idle, partition.refresh_due("status")],
            args=[
                state.value,
                detail,
                tool,
                "1" if idle else "0",
                thread_id,
                time.time(),
                now_ms() + debounce_ms,
                *_task_pairs(tasks),
            ],
        )

    async def note_tasks(
        self, thread_id: str, tasks: Sequence[plan.PlanTask], debounce_ms: int = STATUS_DEBOUNCE_MS
    ) -> None:
        """Tasks of the run's plan started, ended or failed; its status message follows."""
        if tasks:
            await self._put_tasks(
                keys=[self.keys.run_state(thread_id), self.keys.of(thread_id).refresh_due("status")],
                args=[thread_id, now_ms() + debounce_ms, *_task_pairs(tasks)],
            )

    async def plan_tasks(self, thread_id: str) -> list[plan.PlanTask]:
        """The run's plan, in the order its tasks were first noted."""
        fields = await self.redis.hgetall(self.keys.run_state(thread_id))
        tasks = [plan.PlanTask.decoded(v) for k, v in fields.items() if k.startswith(plan.FIELD)]
        return sorted(tasks, key=lambda task: task.at)

    async def state(self, thread_id: str) -> RunState | None:
        value = await self.redis.hget(self.keys.run_state(thread_id), "state")
        return RunState(value) if value else None

    async def state_detail(self, thread_id: str) -> tuple[RunState | None, str, str]:
        """(state, detail, tool being run) for the status line."""
        state, detail, tool = await self.redis.hmget(
            self.keys.run_state(thread_id), ["state", "detail", "tool"]
        )
        return (RunState(state) if state else None), detail or "", tool or ""

    async def claim_retry(self, thread_id: str) -> bool:
        """Failed -> running, once, whoever clicks Retry how often."""
        return bool(await self._claim_retry(keys=[self.keys.run_state(thread_id)]))


def _task_pairs(tasks: Sequence[plan.PlanTask]) -> list[str]:
    return [part for task in tasks for part in (plan.FIELD + task.key, task.encoded())]
