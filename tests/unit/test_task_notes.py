"""The plan's notes in the runner (`agent_runner/task_notes.py`): a thread's notes made close
together reach Redis in one call, and those still waiting go with the run's state."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_runner.task_notes import TaskNotes
from core.plan import PlanTask, TaskStatus
from tests.support.records import task


class NotedStore:
    """A store whose runs room keeps what it was asked to note."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[PlanTask]]] = []
        self.runs = self

    async def note_tasks(self, thread_id: str, tasks: list[PlanTask]) -> None:
        self.calls.append((thread_id, list(tasks)))


async def settled(notes: TaskNotes) -> None:
    await asyncio.sleep(notes.wait_s * 2)
    await asyncio.gather(*notes.sending)


async def test_a_fast_calls_start_and_end_are_one_note_with_its_first_time():
    store = NotedStore()
    notes = TaskNotes(store, wait_s=0.05)  # type: ignore[arg-type]
    notes.note("t1", task(TaskStatus.IN_PROGRESS, 1.0, key="c1"))
    notes.note("t1", task(TaskStatus.IN_PROGRESS, 2.0, key="c2"))
    notes.note("t1", task(TaskStatus.COMPLETE, 3.0, key="c1"))
    notes.note("t2", task(TaskStatus.IN_PROGRESS, 4.0, key="c9"))
    await settled(notes)

    assert sorted(store.calls, key=lambda c: c[0]) == [
        ("t1", [task(TaskStatus.COMPLETE, 1.0, key="c1"), task(TaskStatus.IN_PROGRESS, 2.0, key="c2")]),
        ("t2", [task(TaskStatus.IN_PROGRESS, 4.0, key="c9")]),
    ]


async def test_a_late_start_never_takes_back_an_end():
    store = NotedStore()
    notes = TaskNotes(store, wait_s=0.05)  # type: ignore[arg-type]
    notes.note("t1", task(TaskStatus.ERROR, 1.0, key="c1"))
    notes.note("t1", task(TaskStatus.IN_PROGRESS, 2.0, key="c1"))
    await settled(notes)

    assert store.calls == [("t1", [task(TaskStatus.ERROR, 1.0, key="c1")])]


async def test_notes_taken_with_the_runs_state_are_not_sent_again():
    store = NotedStore()
    notes = TaskNotes(store, wait_s=0.05)  # type: ignore[arg-type]
    notes.note("t1", task(TaskStatus.COMPLETE, 1.0, key="c1"))
    taken: list[Any] = notes.take("t1")
    await settled(notes)

    assert taken == [task(TaskStatus.COMPLETE, 1.0, key="c1")]
    assert store.calls == [] and notes.take("t1") == []
