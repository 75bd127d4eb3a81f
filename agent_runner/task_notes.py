"""A run's plan as its tool calls start and end (the `Runner`'s callback), sent to Redis
together: the notes of one thread made within `NOTE_WAIT_S` go in one script, and those still
waiting when the run pauses, ends or fails go with its state (`Store.set_run_state`). A fast
tool's start and end are then one write, or none, instead of two. The plan is cosmetic, as the
status line: a note lost to an outage or a crash is not retried, and the run's messages give
the plan again at its next pause or end."""

from __future__ import annotations

import asyncio
import contextlib

from core.outages import OUTAGE
from core.plan import PlanTask
from core.store import Store

# How long a tool call's note waits for the thread's next ones (its end, the calls beside it):
# about the debounce of the status message it feeds (`Store.note_tasks`).
NOTE_WAIT_S = 0.25


class TaskNotes:
    """One runner process's notes not yet in Redis, by thread."""

    def __init__(self, store: Store, wait_s: float = NOTE_WAIT_S) -> None:
        self.store = store
        self.wait_s = wait_s
        self.waiting: dict[str, dict[str, PlanTask]] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.sending: set[asyncio.Task[None]] = set()  # (kept: the loop holds weak references)

    def note(self, thread_id: str, task: PlanTask) -> None:
        tasks = self.waiting.setdefault(thread_id, {})
        old = tasks.get(task.key)
        if old is None or old.rank <= task.rank:  # (as `TASKS_LUA` will keep it)
            tasks[task.key] = task if old is None else task.model_copy(update={"at": old.at})
        if thread_id not in self.timers:
            self.timers[thread_id] = asyncio.get_running_loop().call_later(self.wait_s, self._send, thread_id)

    def take(self, thread_id: str) -> list[PlanTask]:
        """The thread's notes not sent yet: the caller sends them (with the run's state)."""
        timer = self.timers.pop(thread_id, None)
        if timer is not None:
            timer.cancel()
        return list(self.waiting.pop(thread_id, {}).values())

    def _send(self, thread_id: str) -> None:
        tasks = self.take(thread_id)
        if tasks:
            sending = asyncio.create_task(self._sent(thread_id, tasks))
            self.sending.add(sending)
            sending.add_done_callback(self.sending.discard)

    async def _sent(self, thread_id: str, tasks: list[PlanTask]) -> None:
        with contextlib.suppress(*OUTAGE):
            await self.store.runs.note_tasks(thread_id, tasks)
