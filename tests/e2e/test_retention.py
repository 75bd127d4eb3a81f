"""Bounded storage: a finished run's records, approvals and checkpoints go after the retention;
a run still in use stays whole; streams are trimmed, never past what a consumer still needs."""

from __future__ import annotations

import time
import uuid

import pytest

from agent_runner.checkpointer import AsyncRedisCheckpointer
from agent_runner.retention import Janitor
from core.store import Store
from signoff.commands.audit_verify import live_problem
from tests.support.harness import Harness, Later, eventually, start_scene
from tests.support.people import ALICE, RILEY


async def keys_of(store: Store, thread_id: str, approval_ids: list[str]) -> list[str]:
    found = []
    async for key in store.redis.scan_iter(f"{store.keys.prefix}:*"):
        if thread_id in key or any(a in key for a in approval_ids):
            found.append(key)
    return sorted(found)


async def checkpoint_keys(store: Store, thread_id: str) -> list[str]:
    return [k async for k in store.redis.scan_iter(f"*{thread_id}*") if not k.startswith(store.keys.prefix)]


async def test_a_finished_run_is_purged_after_the_retention_and_a_waiting_one_is_kept(redis_url):
    async with start_scene(redis_url, "demo") as scene:
        done = await scene.ask('Email finance@acme.com "numbers"', requester=RILEY)
        card = await scene.card(done)
        await scene.standin.click(ALICE, card, "approve:0")
        await scene.answer(done)
        waiting = await scene.ask('Email ops@acme.com "later"', requester=RILEY)
        await scene.card(waiting)
        done_approvals = [a.approval_id for a in await scene.store.approvals.of_thread(done)]
        waiting_approvals = [a.approval_id for a in await scene.store.approvals.of_thread(waiting)]
        assert await keys_of(scene.store, done, done_approvals)
        assert await checkpoint_keys(scene.store, done)
        run = await scene.store.runs.get(done)
        binding = scene.store.keys.slack_thread(run.channel, run.thread_ts)
        assert await scene.store.redis.exists(binding)

        async with AsyncRedisCheckpointer.from_conn_string(redis_url) as saver:
            soon = Janitor(scene.store, saver, retention_s=3600, audit_retention_s=3600)
            assert (await soon.sweep()).threads == 0  # within the retention: nothing goes
            janitor = Janitor(scene.store, saver, retention_s=60, audit_retention_s=3600, clock=Later(120))

            swept = await janitor.sweep()

            assert swept.threads == 1
            assert await keys_of(scene.store, done, done_approvals) == []
            assert await checkpoint_keys(scene.store, done) == []
            assert not await scene.store.redis.exists(binding)
            assert await saver.aget_tuple({"configurable": {"thread_id": done, "checkpoint_ns": ""}}) is None
            # the run waiting for a decision is in use: all of it stays
            assert await scene.store.approvals.get(waiting_approvals[0]) is not None
            assert await saver.aget_tuple({"configurable": {"thread_id": waiting, "checkpoint_ns": ""}})
            assert await scene.store.runs.get(waiting) is not None
            # the streams were trimmed to what consumers still need; the audit keeps its own retention
            assert await scene.store.queue.length(lambda p: p.commands) <= 1
            assert len(await scene.store.audit.entries()) == 1

            assert (await live_problem(scene.store))[0] is None

            gone = Janitor(scene.store, saver, retention_s=60, audit_retention_s=60, clock=Later(120))
            await gone.sweep()
            assert await scene.store.audit.entries() == []
            # what is left is the checkpoint the trim wrote: the chain still verifies
            assert [f["outcome"] for _, f in await scene.store.queue.entries(lambda p: p.audit)] == [
                "checkpoint"
            ]
            assert (await live_problem(scene.store))[0] is None


async def test_a_thread_continued_meanwhile_is_not_purged(redis_url):
    async with Harness(redis_url) as scene:
        store = scene.store
        await store.redis.zadd(store.keys.of("t-busy").idle, {"t-busy": time.time() - 500})
        await store.redis.hset(store.keys.run_state("t-busy"), "state", "running")
        await store.redis.set(store.keys.run("t-busy"), "{}")

        class NoSaver:
            async def adelete_thread(self, thread_id: str) -> None:
                raise AssertionError("a thread in use was deleted")

        swept = await Janitor(store, NoSaver(), retention_s=60, audit_retention_s=60).sweep()

        assert swept.threads == 0 and await store.redis.exists(store.keys.run("t-busy"))
        assert (
            await store.redis.zscore(store.keys.of("t-busy").idle, "t-busy") is None
        )  # put back when it ends


@pytest.mark.parametrize("acked", [False, True])
async def test_streams_are_never_trimmed_past_what_a_consumer_group_still_needs(redis_url, acked):
    store = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    stream, group = store.keys.partitions[0].commands, "runners"
    await store.redis.xgroup_create(stream, group, id="0", mkstream=True)
    ids = [await store.redis.xadd(stream, {"n": str(n)}) for n in range(3)]
    delivered = await store.redis.xreadgroup(group, "c1", {stream: ">"}, count=2)
    assert [entry_id for entry_id, _ in delivered[0][1]] == ids[:2]
    if acked:
        await store.redis.xack(stream, group, *ids[:2])

    trimmed = await Janitor(store, None, retention_s=1, audit_retention_s=1, clock=Later(60)).trim(
        stream, group, int((time.time() + 59) * 1000)
    )

    left = [entry_id for entry_id, _ in await store.redis.xrange(stream)]
    # unacknowledged: every entry stays; acknowledged: what was never delivered (and the last
    # delivered) stays, older ones go
    assert (left, trimmed) == ((ids, 0) if not acked else (ids[1:], 1))
    await store.close()


async def test_the_janitor_keeps_the_runner_ready_between_sweeps_an_hour_apart(redis_url):
    import asyncio

    from core.health import Health

    sweeps: list[float] = []
    turns: list[float] = []

    class Counted(Janitor):
        async def turn(self) -> float:
            turns.append(time.monotonic())
            return await super().turn()

        async def sweep(self, batch: int = 200):  # type: ignore[no-untyped-def]
            sweeps.append(time.monotonic())
            return await super().sweep(batch)

    store = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    health = Health(stale_after_s=6)  # a loop unseen for longer makes /readyz 503
    stop = asyncio.Event()
    janitor = Counted(store, None, retention_s=4 * 3600, audit_retention_s=3600, health=health)
    assert janitor.every_s == 60
    serving = asyncio.create_task(janitor.serve(stop))
    problems: list[dict] = []

    async def ready() -> bool:
        report = await health.readiness(store.redis, expected=(Janitor.name,))
        if not report["ok"]:
            problems.append(report["problems"])
        return report["ok"]

    async def swept() -> bool:
        return bool(sweeps) and await ready()

    async def went_round_between_sweeps() -> bool:
        ok = await ready()  # as a probe sees it, all along
        return ok and len(turns) >= 3 and time.monotonic() - sweeps[0] > 2 * health.stale_after_s

    await eventually(swept, what="the janitor's first sweep done")
    problems.clear()
    # Two turns of the janitor between its sweeps, and twice as long as readiness lets a loop go
    # unseen: a loop silent after its last word would have shown stale by then.
    await eventually(went_round_between_sweeps, timeout=40, what="the janitor going round between sweeps")

    assert problems == [] and len(sweeps) == 1
    stop.set()
    await serving
    await store.close()


async def finished_thread(store: Store, thread_id: str, idle_since: float) -> None:
    from core.records import Run

    await store.runs.save(Run(thread_id=thread_id, graph="demo", channel="C0X", thread_ts="1.000"))
    await store.redis.set(store.keys.slack_thread("C0X", "1.000"), thread_id)
    await store.redis.hset(store.keys.run_state(thread_id), "state", "finished")
    await store.redis.zadd(store.keys.of(thread_id).idle, {thread_id: idle_since})


class RecordingSaver:
    def __init__(self, store: Store):
        self.store = store
        self.seen: list[tuple[str, bool, bool]] = []

    async def adelete_thread(self, thread_id: str) -> None:
        # What a reply arriving now would find: no binding to continue, no run to resume.
        binding = await self.store.redis.exists(self.store.keys.slack_thread("C0X", "1.000"))
        run = await self.store.redis.exists(self.store.keys.run(thread_id))
        self.seen.append((thread_id, bool(binding), bool(run)))


async def test_a_purge_takes_the_thread_out_of_reach_before_deleting_its_checkpoints(redis_url):
    store = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    await finished_thread(store, "t-old", time.time() - 500)
    saver = RecordingSaver(store)

    assert (await Janitor(store, saver, retention_s=60, audit_retention_s=60).sweep()).threads == 1

    # a reply (or a Retry) after the claim finds no thread: it starts afresh instead of
    # continuing a thread whose checkpoints are going
    assert saver.seen == [("t-old", False, False)]
    await store.close()


async def test_one_unreadable_thread_never_stops_the_janitor(redis_url):
    store = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    await finished_thread(store, "t-good", time.time() - 500)
    await store.redis.zadd(store.keys.of("t-bad").idle, {"t-bad": time.time() - 900})
    await store.redis.set(store.keys.thread_approvals("t-bad"), "not a sorted set")  # WRONGTYPE on read

    swept = await Janitor(store, RecordingSaver(store), retention_s=60, audit_retention_s=60).sweep()

    assert swept.threads == 1  # the good one went; the bad one waits a retention and is said in the log
    assert await store.redis.zscore(store.keys.of("t-bad").idle, "t-bad") > time.time() - 10
    await store.close()


async def test_a_purge_takes_its_approvals_out_of_the_pending_lists(redis_url):
    from core.protocol import ActionReview, PendingRequest, RequestKind
    from core.records import Run, approval_for

    store = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    request = PendingRequest(
        interrupt_id=uuid.uuid4().hex,
        kind=RequestKind.BATCHED,
        actions=(ActionReview(name="send_email", args={}, allowed_decisions=("approve",)),),
    )
    approval, _ = await store.approvals.create(
        approval_for(request, Run(thread_id="t-old", graph="d", channel="C0X"), "d")
    )
    await finished_thread(store, "t-old", time.time() - 500)
    assert approval.approval_id in await store.approvals.pending_ids()

    await Janitor(store, RecordingSaver(store), retention_s=60, audit_retention_s=60).sweep()

    assert approval.approval_id not in await store.approvals.pending_ids()
    assert approval.approval_id not in await store.approvals.pending_ids("C0X")
    assert await store.approvals.get(approval.approval_id) is None
    await store.close()


async def test_a_command_no_runner_could_carry_out_fails_its_run_so_it_is_said_and_later_purged(redis_url):
    import json

    from agent_runner.worker import RunnerWorker
    from core.records import Run, RunState
    from core.streams import Entry

    store = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    await store.layout.ensure_groups()
    await store.runs.save(Run(thread_id="t-stuck", graph="demo", channel="C0X"))
    await store.runs.set_state("t-stuck", RunState.RUNNING)
    command = {"type": "start", "command_id": "c1", "thread_id": "t-stuck", "text": "hi"}
    entry_id = await store.redis.xadd(store.keys.of("t-stuck").commands, {"command": json.dumps(command)})
    worker = RunnerWorker(store, {}, consumer="r1")

    await worker.dead_letter(
        Entry(
            entry_id, {"command": json.dumps(command)}, deliveries=6, stream=store.keys.of("t-stuck").commands
        ),
        "delivered too often",
    )

    assert await store.runs.state("t-stuck") is RunState.FAILED
    assert await store.redis.zscore(store.keys.of("t-stuck").idle, "t-stuck") is not None
    events = [f["event"] for _, f in await store.queue.entries(lambda p: p.events)]
    assert any('"failed"' in e and "t-stuck" in e for e in events)
    assert await store.queue.length(lambda p: p.dead_letters) == 1
    await store.close()
