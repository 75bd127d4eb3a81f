"""A resume carried out whose command comes back: its run's end is told again if it was lost."""

from __future__ import annotations

from agent_runner.checkpointer import AsyncRedisCheckpointer
from agent_runner.graphs import build_graph
from agent_runner.runner import Runner
from agent_runner.worker import RunnerWorker
from core.keys import RUNNERS_GROUP
from core.messages import AnyCommand, Resume, RunFinished, StartRun, decode_command, decode_event
from core.producer import start_run
from core.protocol import Approve
from core.records import ApprovalStatus
from core.streams import Entry
from tests.support.harness import GRAPHS


async def test_a_resume_whose_end_was_lost_in_a_failover_is_told_again_once_it_comes_back(store, layout_url):
    """A master fails over after the approval's status reached its replica, before the run's end
    did; the command comes back undone. Before, it was skipped (already resumed): the run had
    finished and nobody heard."""

    async def commands() -> list[tuple[Entry, AnyCommand]]:
        """The new commands of the run's partition, delivered to this runner as its group would."""
        stream = store.keys.of(thread_id).commands
        [(_, entries)] = await store.redis.xreadgroup(RUNNERS_GROUP, "r1", {stream: ">"})
        return [
            (Entry(entry_id, fields, stream=stream), decode_command(fields)) for entry_id, fields in entries
        ]

    async def ends() -> list[tuple[str, RunFinished]]:
        found = [(i, decode_event(f)) for i, f in await store.queue.entries(lambda p: p.events)]
        return [(i, e) for i, e in found if isinstance(e, RunFinished)]

    async with AsyncRedisCheckpointer.from_url(layout_url) as saver:
        worker = RunnerWorker(
            store, {"demo": Runner(build_graph(GRAPHS["demo"], saver), "demo")}, consumer="r1"
        )
        thread_id = await start_run(store, "Refund order 7 for 5000", "C0OPS", "demo", requester="U0RILEY")
        [start] = [(e, c) for e, c in await commands() if isinstance(c, StartRun)]
        await worker.handle(*start)
        [approval] = await store.approvals.of_thread(thread_id)
        await store.decisions.decide(approval.approval_id, 0, Approve(), "U0ALICE")
        [(entry, resume)] = [(e, c) for e, c in await commands() if isinstance(c, Resume)]

        await worker.handle(entry, resume)
        [(entry_id, told)] = await ends()
        assert told.command_id == resume.command_id and told.answer
        assert (await store.approvals.get(approval.approval_id)).status is ApprovalStatus.RESUMED

        async def lost() -> None:  # with the master: its replica never had them
            for partition in store.keys.partitions:
                await store.redis.xdel(partition.events, entry_id)
            await store.redis.delete(store.keys.command_done(thread_id, resume.command_id))

        await lost()
        await worker.handle(entry, resume)  # the command, back undone

        [(_, again)] = await ends()
        assert (again.command_id, again.answer) == (told.command_id, told.answer)  # (the bot posts it once)
        await worker.handle(entry, resume)  # back once more, done this time: nothing more is told
        assert len(await ends()) == 1
