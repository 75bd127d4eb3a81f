"""The checkpointer's own layout (`agent_runner/checkpointer/slots.py`): nothing indexed, a
thread's keys in one hash slot, memory given back whole; threads of the layout before (the
stock saver's documents, with the registry an earlier Signoff kept) still resumed, listed and
deleted; scripts sent again to a server that lost them; many threads saving at once on the
one connection the async saver keeps."""

from __future__ import annotations

import asyncio
import uuid
from typing import TypedDict

import pytest
from langgraph.checkpoint.redis import AsyncRedisSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from redis.asyncio import Redis
from redis.crc import key_slot

from agent_runner.checkpointer import AsyncRedisCheckpointer
from agent_runner.checkpointer.documents import member
from signoff_demo import redis_server
from tests.support.savers import APPROVE, USER, cfg, history_of, in_memory_history, summary, write_agent


@pytest.fixture(scope="module")
def fresh_url():
    """A Redis of its own: nothing the stock saver wrote, no index made by anyone."""
    with redis_server.running(None, appendonly=False) as url:
        yield url


async def used_memory(client: Redis) -> int:
    """`used_memory` once Redis has let go of what it frees lazily (its tables shrink on its
    timer, ten times a second), less its Lua interpreter's heap (which its garbage collector
    grows and shrinks by tens of kB whatever the data)."""
    await asyncio.sleep(0.5)
    await client.execute_command("MEMORY", "PURGE")
    memory = await client.info("memory")
    return int(memory["used_memory"]) - int(memory["used_memory_vm_eval"])


async def test_on_a_fresh_redis_nothing_is_indexed_and_a_deleted_thread_gives_every_byte_back(fresh_url):
    client = Redis.from_url(fresh_url)
    searches = (await client.info("commandstats")).get("cmdstat_ft.search", {}).get("calls", 0)
    async with AsyncRedisCheckpointer.from_url(fresh_url) as saver:
        agent = write_agent(saver)

        async def twenty_runs() -> tuple[dict, list[bytes], int]:
            threads = [f"t-{n}-{uuid.uuid4().hex}" for n in range(20)]
            for thread_id in threads:
                await agent.ainvoke(USER, cfg(thread_id))
                done = summary(await agent.ainvoke(APPROVE, cfg(thread_id)))
            keys = [key async for key in client.scan_iter(match=f"*{threads[0]}*")]
            during = await used_memory(client)
            for thread_id in threads:
                await saver.adelete_thread(thread_id)
            return done, keys, during

        await twenty_runs()  # a warm-up: scripts loaded, connections made, Redis's buffers grown
        before = await used_memory(client)
        done, keys, during = await twenty_runs()
        after = await used_memory(client)
        legacy = saver.legacy
    indexes = await client.execute_command("FT._LIST")
    left = await client.dbsize()
    after_searches = (await client.info("commandstats")).get("cmdstat_ft.search", {}).get("calls", 0)
    await client.aclose()

    assert done["files"] == ["/notes/a.md"]
    assert not legacy and indexes == [] and after_searches == searches
    assert len(keys) >= 4 and len({key_slot(key) for key in keys}) == 1  # a thread's keys: one hash slot
    assert left == 0
    assert during - before > 200_000
    print(f"used_memory: {before} before, {during} with twenty runs, {after} once they were deleted")
    assert abs(after - before) < before * 0.01  # memory back to where it was, within 1%


async def test_a_thread_paused_by_the_layout_before_resumes_with_its_history_whole(redis_url):
    """An upgrade: a thread paused by an earlier Signoff (the stock saver's documents, and the
    registry it kept beside them) is resumed, listed with its whole history, and deleted."""
    thread_id = f"old-{uuid.uuid4().hex}"
    async with AsyncRedisSaver.from_conn_string(redis_url) as stock:
        await stock.asetup()
        await write_agent(stock).ainvoke(USER, cfg(thread_id))
        written = [t.config["configurable"] async for t in stock.alist(cfg(thread_id))]
    async with AsyncRedisCheckpointer.from_url(redis_url) as saver:
        registry = saver._thread_key(thread_id)  # the registry an earlier Signoff wrote
        await saver._redis.zadd(
            registry, {member(c["checkpoint_ns"], c["checkpoint_id"]): 0 for c in written}
        )
        assert saver.legacy
        agent = write_agent(saver)
        done = summary(await agent.ainvoke(APPROVE, cfg(thread_id)))
        history = history_of([s async for s in agent.aget_state_history(cfg(thread_id))])
        await saver.adelete_thread(thread_id)
        left = [key async for key in saver._redis.scan_iter(match=f"*{thread_id}*")]

    assert done["messages"] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert history == in_memory_history()
    assert left == []


async def test_a_server_that_lost_the_scripts_is_sent_them_again(fresh_url):
    thread_id = f"t-{uuid.uuid4().hex}"
    async with AsyncRedisCheckpointer.from_url(fresh_url) as saver:
        agent = write_agent(saver)
        await agent.ainvoke(USER, cfg(thread_id))
        await saver._redis.script_flush()  # as after a restart without persistence of scripts
        done = summary(await agent.ainvoke(APPROVE, cfg(thread_id)))

    assert done["files"] == ["/notes/a.md"]


async def test_many_threads_saving_at_once_each_keep_their_own_run(fresh_url):
    """Forty runs on one saver at once: their saves share its connection, many in one
    pipeline; each run pauses, resumes and ends as it does alone."""
    threads = [f"t-{n}-{uuid.uuid4().hex}" for n in range(40)]
    async with AsyncRedisCheckpointer.from_url(fresh_url) as saver:
        agent = write_agent(saver)
        sizes: list[int] = []
        together = saver._together.together

        async def counted(batch):
            sizes.append(len(batch))
            await together(batch)

        saver._together.together = counted
        paused = await asyncio.gather(*(agent.ainvoke(USER, cfg(t)) for t in threads))
        done = await asyncio.gather(*(agent.ainvoke(APPROVE, cfg(t)) for t in threads))
        states = [await agent.aget_state(cfg(t)) for t in threads]

    assert all(p["__interrupt__"] for p in paused)
    assert [summary(d)["messages"] for d in done] == [
        ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    ] * 40
    assert all(len(s.values["messages"]) == 4 and not s.next for s in states)
    assert max(sizes) > 1  # requests made while one was in flight went together


async def test_a_tasks_writes_go_to_redis_with_the_steps_checkpoint(fresh_url, monkeypatch):
    """A run alone: a task's writes wait a moment for the checkpoint LangGraph saves after the
    step, and the two go in one round trip; the run's last writes go alone. (LangGraph saves the
    checkpoint only once a task's writes to a DeltaChannel, such as a deep agent's messages, are
    in: those go alone. Either run is what it is without the wait: this module's other tests and
    `test_checkpointer`.)"""
    from agent_runner.checkpointer import batches
    from agent_runner.checkpointer.base import SCRIPTS
    from tests.support.agents import EMAIL, hitl_agent, scripted

    # (a wait that a busy host's scheduling cannot outlast: the test counts, it does not time)
    monkeypatch.setattr(batches, "LINGER_S", 0.5)
    names = {key: name for name, (sha, text) in SCRIPTS.items() for key in (sha, text)}
    thread_id = f"t-{uuid.uuid4().hex}"
    async with AsyncRedisCheckpointer.from_url(fresh_url) as saver:
        agent = hitl_agent(scripted(EMAIL), {"send_email": True}, saver)
        warm = f"warm-{thread_id}"  # (the server has seen every script: none is sent again)
        await agent.ainvoke(USER, cfg(warm))
        await agent.ainvoke(APPROVE, cfg(warm))
        trips: list[list[str]] = []
        exchange = saver._together.exchange

        async def counted(commands):
            trips.append([names[command[1]] for command in commands])
            return await exchange(commands)

        saver._together.exchange = counted
        agent = hitl_agent(scripted(EMAIL), {"send_email": True}, saver)
        await agent.ainvoke(USER, cfg(thread_id))
        started, trips[:] = list(trips), []
        done = await agent.ainvoke(APPROVE, cfg(thread_id))

    assert [type(m).__name__ for m in done["messages"]][-2:] == ["ToolMessage", "AIMessage"]
    for run in (started, trips):
        writes = [trip for trip in run if "writes" in trip]
        assert len(writes) >= 2, run
        assert [trip for trip in writes[:-1] if "put" not in trip] == [], run  # with a checkpoint
    assert (len(started), len(trips)) == (5, 5)  # of 7 and 10 calls


class Noted(TypedDict, total=False):
    note: str
    answer: str


def noting_graph(saver):
    """Sets `note`, pauses, then writes `answer` only: `note` is never written again."""

    def ask(state: Noted) -> Noted:
        return {"answer": interrupt("what now?")}

    graph = StateGraph(Noted)
    graph.add_node("note", lambda state: {"note": "kept across the upgrade"})
    graph.add_node("ask", ask)
    graph.add_edge(START, "note")
    graph.add_edge("note", "ask")
    graph.add_edge("ask", END)
    return graph.compile(checkpointer=saver)


async def test_a_value_the_resumed_run_never_writes_again_survives_the_upgrade(redis_url):
    """The first checkpoint after the layout before stores every channel's value: the versions
    it did not change are in the old layout, not in this one."""
    thread_id = f"old-{uuid.uuid4().hex}"
    async with AsyncRedisSaver.from_conn_string(redis_url) as stock:
        await stock.asetup()
        await noting_graph(stock).ainvoke({}, cfg(thread_id))
    async with AsyncRedisCheckpointer.from_url(redis_url) as saver:
        graph = noting_graph(saver)
        done = await graph.ainvoke(Command(resume="ship it"), cfg(thread_id))
        state = await graph.aget_state(cfg(thread_id))
        await saver.adelete_thread(thread_id)

    assert done == {"note": "kept across the upgrade", "answer": "ship it"}
    assert state.values == {"note": "kept across the upgrade", "answer": "ship it"}


async def test_a_flusher_cancelled_mid_send_leaves_no_caller_waiting_and_no_timer_behind(fresh_url):
    """The loop shutting down cancels a flusher while its pipeline is out, and a task's writes
    arrive before its callback ran: every caller hears of it, and no lingering timer is left to
    start a second flusher beside a request sent later on the same connection."""
    from agent_runner.checkpointer.slots import Script

    def lingering() -> Script:
        script = Script("0" * 40, "return 1", [], [], "writes")
        script.lingers = True
        return script

    async with AsyncRedisCheckpointer.from_url(fresh_url) as saver:
        together, sent = saver._together, saver._together.sent
        out = asyncio.Event()

        async def never_answered(scripts, text=False):
            out.set()
            await asyncio.Event().wait()

        together.sent = never_answered
        first = asyncio.create_task(together.send([lingering()]))
        await out.wait()  # its timer fired: the flusher's pipeline is out
        together.flusher.cancel()
        second = asyncio.create_task(together.send([lingering()]))  # before the flusher's callback
        results = await asyncio.gather(first, second, return_exceptions=True)
        await asyncio.sleep(0)

        assert [type(r).__name__ for r in results] == ["CancelledError", "CancelledError"]
        assert together.lingering is None and not together.in_flight and not together.waiting
        together.sent = sent
        assert await saver.aget_tuple(cfg(f"none-{uuid.uuid4().hex}")) is None  # the line is free


@pytest.mark.parametrize(
    ("versions", "left_out"),
    [
        ({"messages": "0000000002.a1b2c3", "files": "0000000001.d4e5f6"}, True),  # as this saver makes them
        ({"messages": 2, "files": 1}, False),  # another type: `n` would give them back as text
    ],
)
async def test_channel_versions_are_stored_once_and_read_back_as_they_were_saved(
    fresh_url, versions, left_out
):
    """A checkpoint's channel versions are in its `n` fields; the stored checkpoint leaves them
    out when those give them back whole, and keeps them otherwise. Either way the checkpoint
    read back is the one saved, versions' types and order included."""
    from langgraph.checkpoint.base import empty_checkpoint

    from agent_runner.checkpointer import slots

    thread_id = f"t-{uuid.uuid4().hex}"
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = versions
    checkpoint["versions_seen"] = {"model": dict(versions)}
    checkpoint["channel_values"] = {"messages": ["hi"], "files": {"/a.md": "x"}}
    async with AsyncRedisCheckpointer.from_url(fresh_url) as saver:
        saved = await saver.aput(cfg(thread_id), checkpoint, {"step": 1}, versions)
        found = await saver.aget_tuple(saved)
        stored = await saver._redis.hget(slots.checkpoint_key(thread_id, "", checkpoint["id"]), "c")
        await saver.adelete_thread(thread_id)

    assert found is not None and found.checkpoint == checkpoint
    assert list(found.checkpoint["channel_versions"].items()) == list(versions.items())
    assert (b"channel_versions" not in stored) is left_out


def test_versions_whose_names_hold_a_separator_stay_in_the_checkpoint():
    """`n` cannot give back a channel or version holding NUL or \\x01: those are kept."""
    from agent_runner.checkpointer import slots

    def fields(versions: dict) -> bytes:
        return slots.LIST_SEP.join(slots.value_field(k, v) for k, v in versions.items())

    for versions in ({"a\x00b": "1"}, {"a": "1\x01x"}, {"a": "1", "b\x01": "2"}):
        assert not slots.versions_as_text(versions, fields(versions))
    for versions in ({}, {"a": "1"}, {"a": "1", "b": "0000000002.abcdef"}):
        assert slots.versions_as_text(versions, fields(versions))
        assert slots.decode_versions(fields(versions)) == versions
