"""A run's plan tasks in Redis (core.plan, the runs room of core.store): notes from two sources, in any
order, on one server and on a cluster."""

from __future__ import annotations

from core.plan import TaskStatus
from core.records import RunState
from tests.support.records import task

RUNNING, COMPLETE, ERROR = TaskStatus.IN_PROGRESS, TaskStatus.COMPLETE, TaskStatus.ERROR


async def shown(store, thread_id: str = "t1") -> list[tuple[str, TaskStatus, float]]:
    return [(t.key, t.status, t.at) for t in await store.runs.plan_tasks(thread_id)]


async def test_a_status_never_goes_back_and_a_task_keeps_when_it_was_first_noted(store):
    await store.runs.set_state("t1", RunState.WAITING, tasks=[task(TaskStatus.PENDING, 1.0)])
    await store.runs.note_tasks("t1", [task(RUNNING, 5.0)])
    await store.runs.note_tasks("t1", [task(TaskStatus.PENDING, 6.0)])  # an older reading, arriving late
    assert await shown(store) == [("call_1", RUNNING, 1.0)]
    await store.runs.note_tasks("t1", [task(COMPLETE, 7.0)])
    await store.runs.note_tasks("t1", [task(RUNNING, 8.0)])
    assert await shown(store) == [("call_1", COMPLETE, 1.0)]


async def test_the_thread_s_messages_have_the_last_word_on_how_a_call_ended(store):
    await store.runs.set_state("t1", RunState.FINISHED, tasks=[task(ERROR, 1.0, settled=True)])
    await store.runs.note_tasks("t1", [task(COMPLETE, 2.0)])  # a callback's note, arriving after
    assert await shown(store) == [("call_1", ERROR, 1.0)]
    # run again (Retry): the messages say how it ended this time
    await store.runs.set_state("t1", RunState.FINISHED, tasks=[task(COMPLETE, 9.0, settled=True)])
    assert await shown(store) == [("call_1", COMPLETE, 1.0)]


async def test_tasks_come_back_in_the_order_they_were_first_noted_and_the_state_is_kept(store):
    await store.runs.note_tasks("t1", [task(RUNNING, 3.0, key="b"), task(RUNNING, 2.0, key="a")])
    await store.runs.set_state(
        "t1", RunState.RUNNING, tool="send_email", tasks=[task(COMPLETE, 9.0, key="c")]
    )
    assert [key for key, _, _ in await shown(store)] == ["a", "b", "c"]
    assert await store.runs.state_detail("t1") == (RunState.RUNNING, "", "send_email")
    assert await shown(store, "another") == []
