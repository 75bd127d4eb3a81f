"""The project's Redis checkpointer keeps approvals across resume and restart, on one Redis
server and on a Redis Cluster.

Each scenario runs against a real Redis with RedisJSON + RediSearch (one server, and a
local three-master cluster), for the sync and the async saver. The stock
langgraph-checkpoint-redis 0.5.2 savers run the scenarios where they fail
deterministically, marked `xfail(strict=True)`: if an upstream release fixes them,
these turn red and say the patch in `agent_runner/checkpointer/` can go.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.redis import AsyncRedisSaver, RedisSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_runner.checkpointer import AsyncRedisCheckpointer, RedisCheckpointer
from core import connections
from tests.support.paths import ROOT
from tests.support.savers import (
    APPROVE,
    SERVERS,
    USER,
    cfg,
    history_of,
    in_memory_history,
    six_call_agent,
    summary,
    tool_order,
    write_agent,
)

MODES = ("sync", "async")

STOCK_SYNC_LOSES = pytest.mark.xfail(
    strict=True, reason="stock RedisSaver hides pending writes behind the has_writes flag"
)
# How often the stock savers lose a whole approval end to end (a race, so a rate,
# not a test): `python bench/checkpointer_losses.py`.


APPROVE_TWO = Command(resume={"decisions": [{"type": "approve"}, {"type": "approve"}]})


def everywhere(*modes: str) -> list[Any]:
    """(mode, server) on both kinds of Redis."""
    return [pytest.param(mode, server, id=f"{server}-{mode}") for server in SERVERS for mode in modes]


def url_of(request, server: str) -> str:
    return request.getfixturevalue(SERVERS[server])


@contextmanager
def sync_saver(saver_name: str, url: str) -> Iterator[Any]:
    """Ours from any REDIS_URL (set up); the stock one from a one-server URL, set up."""
    if saver_name == "ours":
        with RedisCheckpointer.from_url(url) as saver:
            yield saver
        return
    with RedisSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def async_saver(saver_name: str, url: str) -> AsyncIterator[Any]:
    if saver_name == "ours":
        async with AsyncRedisCheckpointer.from_url(url) as saver:
            yield saver
        return
    async with AsyncRedisSaver.from_conn_string(url) as saver:
        await saver.asetup()
        yield saver


async def pause(saver_name: str, mode: str, url: str, thread_id: str, build=write_agent):
    """Start a run that pauses; return what get_state shows right after the pause."""
    if mode == "sync":
        with sync_saver(saver_name, url) as saver:
            agent = build(saver)
            agent.invoke(USER, cfg(thread_id))
            return agent.get_state(cfg(thread_id))
    async with async_saver(saver_name, url) as saver:
        agent = build(saver)
        await agent.ainvoke(USER, cfg(thread_id))
        return await agent.aget_state(cfg(thread_id))


async def resume_with_a_fresh_saver(mode: str, url: str, thread_id: str) -> dict:
    """Approve with our saver on a new client, in this process."""
    if mode == "sync":
        with sync_saver("ours", url) as saver:
            return summary(write_agent(saver).invoke(APPROVE, cfg(thread_id)))
    async with async_saver("ours", url) as saver:
        return summary(await write_agent(saver).ainvoke(APPROVE, cfg(thread_id)))


def resume_in_new_process(saver_name: str, mode: str, url: str, thread_id: str) -> dict:
    """A real restart (`tests/support/resume_helper.py`); the helper takes a one-server URL."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.resume_helper", saver_name, mode, url, thread_id],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def thread_keys(url: str, thread_id: str) -> dict[int, list[bytes]]:
    """Every key naming the thread, by node (one entry for a single server)."""
    found: dict[int, list[bytes]] = {}
    for node, client in enumerate(connections.server_clients(url)):
        try:
            keys = sorted(client.scan_iter(match=f"*{thread_id}*", count=1000))
        finally:
            client.close()
        if keys:
            found[node] = keys
    return found


def ours_everywhere(*modes: str) -> list[Any]:
    return [pytest.param("ours", *p.values, id=p.id) for p in everywhere(*modes)]


@pytest.mark.parametrize(
    "saver_name, mode, server",
    [
        *ours_everywhere(*MODES),
        pytest.param("stock", "sync", "one server", marks=STOCK_SYNC_LOSES, id="stock-sync"),
    ],
)
async def test_writes_saved_before_their_checkpoint_are_loaded(request, thread_id, saver_name, mode, server):
    """Cause 1, made deterministic: background saves land put_writes(C) before put(C)."""
    url = url_of(request, server)
    checkpoint = empty_checkpoint()
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    at_checkpoint = {"configurable": {**root["configurable"], "checkpoint_id": checkpoint["id"]}}
    writes = [("messages", "approved call result"), ("files", {"/a.md": "A"})]
    if mode == "sync":
        with sync_saver(saver_name, url) as saver:
            saver.put_writes(at_checkpoint, writes, task_id="task-1")
            saver.put(root, checkpoint, {"source": "loop", "step": 1}, {})
            found = saver.get_tuple(at_checkpoint)
            latest = saver.get_tuple(root)
    else:
        async with async_saver(saver_name, url) as saver:
            await saver.aput_writes(at_checkpoint, writes, task_id="task-1")
            await saver.aput(root, checkpoint, {"source": "loop", "step": 1}, {})
            found = await saver.aget_tuple(at_checkpoint)
            latest = await saver.aget_tuple(root)

    expected = [("task-1", "messages", "approved call result"), ("task-1", "files", {"/a.md": "A"})]
    assert found.pending_writes == expected
    assert latest.config["configurable"]["checkpoint_id"] == checkpoint["id"]
    assert latest.pending_writes == expected


STOCK_ORDER = pytest.mark.xfail(strict=True, reason="stock savers order writes by (idx, task id)")


@pytest.mark.parametrize(
    "saver_name, mode, server",
    [
        *ours_everywhere(*MODES),
        pytest.param("stock", "sync", "one server", marks=STOCK_ORDER, id="stock-sync"),
        pytest.param("stock", "async", "one server", marks=STOCK_ORDER, id="stock-async"),
    ],
)
async def test_writes_come_back_in_langgraph_order(request, thread_id, saver_name, mode, server):
    """Cause 2: pending writes must follow writes_sort_key (task_path, task_id, idx)."""
    url = url_of(request, server)
    checkpoint = empty_checkpoint()
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    at_checkpoint = {"configurable": {**root["configurable"], "checkpoint_id": checkpoint["id"]}}
    # Task ids sort the other way round from their paths, as parallel tool tasks' do.
    tasks = [("task-b", "~__pregel_push, 0", "first"), ("task-a", "~__pregel_push, 1", "second")]
    if mode == "sync":
        with sync_saver(saver_name, url) as saver:
            saver.put(root, checkpoint, {"source": "loop", "step": 1}, {})
            for task_id, path, value in reversed(tasks):
                saver.put_writes(at_checkpoint, [("messages", value)], task_id=task_id, task_path=path)
            found = saver.get_tuple(at_checkpoint)
    else:
        async with async_saver(saver_name, url) as saver:
            await saver.aput(root, checkpoint, {"source": "loop", "step": 1}, {})
            for task_id, path, value in reversed(tasks):
                await saver.aput_writes(at_checkpoint, [("messages", value)], task_id=task_id, task_path=path)
            found = await saver.aget_tuple(at_checkpoint)

    assert [value for _, _, value in found.pending_writes] == ["first", "second"]


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_the_latest_checkpoint_is_the_newest_saved_even_when_the_pointer_lags(
    request, thread_id, mode, server
):
    """The stock `put` writes the document, then the latest pointer: a crash between the two
    leaves the pointer one checkpoint behind, and a resume would run that step again. (The
    next step's writes may be stored already, their checkpoint not.)"""
    url = url_of(request, server)
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    checkpoints = [empty_checkpoint() for _ in range(2)]
    coming = {"configurable": {**root["configurable"], "checkpoint_id": empty_checkpoint()["id"]}}
    if mode == "sync":
        with sync_saver("ours", url) as saver:
            first = saver.put(root, checkpoints[0], {"source": "loop", "step": 0}, {})
            second = saver.put(first, checkpoints[1], {"source": "loop", "step": 1}, {})
            pointer = saver._make_redis_checkpoint_latest_key(thread_id, "")
            saver._redis.set(
                pointer,
                saver._make_redis_checkpoint_key(thread_id, "", first["configurable"]["checkpoint_id"]),
            )
            saver.put_writes(coming, [("messages", "next step")], "t")
            latest = saver.get_tuple(root)
    else:
        async with async_saver("ours", url) as saver:
            first = await saver.aput(root, checkpoints[0], {"source": "loop", "step": 0}, {})
            second = await saver.aput(first, checkpoints[1], {"source": "loop", "step": 1}, {})
            pointer = saver._make_redis_checkpoint_latest_key(thread_id, "")
            await saver._redis.set(
                pointer,
                saver._make_redis_checkpoint_key(thread_id, "", first["configurable"]["checkpoint_id"]),
            )
            await saver.aput_writes(coming, [("messages", "next step")], "t")
            latest = await saver.aget_tuple(root)

    assert latest.config["configurable"]["checkpoint_id"] == second["configurable"]["checkpoint_id"]
    assert latest.metadata["step"] == 1


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_writes_whose_checkpoint_never_came_are_skipped_and_deleted(request, thread_id, mode, server):
    """A runner that dies between `put_writes(C)` and `put(C)` (background saves) leaves writes,
    and the stock `{"has_writes": true}` stub, for a checkpoint that does not exist."""
    url = url_of(request, server)
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    never = {"configurable": {**root["configurable"], "checkpoint_id": empty_checkpoint()["id"]}}  # newer
    if mode == "sync":
        with sync_saver("ours", url) as saver:
            saved = saver.put(root, checkpoint, {"source": "loop", "step": 0}, {})
            saver.put_writes(never, [("messages", "lost")], "t")
            latest = saver.get_tuple(root)
            listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(thread_id))]
            saver.delete_thread(thread_id)
    else:
        async with async_saver("ours", url) as saver:
            saved = await saver.aput(root, checkpoint, {"source": "loop", "step": 0}, {})
            await saver.aput_writes(never, [("messages", "lost")], "t")
            latest = await saver.aget_tuple(root)
            listed = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(cfg(thread_id))]
            await saver.adelete_thread(thread_id)

    assert latest.config["configurable"]["checkpoint_id"] == saved["configurable"]["checkpoint_id"]
    assert listed == [saved["configurable"]["checkpoint_id"]]
    assert thread_keys(url, thread_id) == {}


@pytest.mark.parametrize("mode", MODES)
async def test_approval_survives_a_restart(redis_url, thread_id, mode):
    await pause("ours", mode, redis_url, thread_id)

    after = resume_in_new_process("ours", mode, redis_url, thread_id)

    assert after["files"] == ["/notes/a.md"]
    assert after["messages"] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


@pytest.mark.parametrize("mode", MODES)
async def test_approval_on_a_cluster_survives_a_fresh_saver(cluster_url, thread_id, mode):
    """The lost-approval regression on a cluster (the restart helper takes a one-server URL:
    here a new saver and client in this process stand for the restarted runner)."""
    await pause("ours", mode, cluster_url, thread_id)

    after = await resume_with_a_fresh_saver(mode, cluster_url, thread_id)

    assert after["files"] == ["/notes/a.md"]
    assert after["messages"] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_get_state_shows_the_pause_right_away(request, thread_id, mode, server):
    state = await pause("ours", mode, url_of(request, server), thread_id)

    assert len(state.interrupts) == 1
    assert state.interrupts[0].value["action_requests"][0]["args"]["file_path"] == "/notes/a.md"
    assert state.next == ("HumanInTheLoopMiddleware.after_model",)


def in_memory_order() -> list[str]:
    agent = six_call_agent(InMemorySaver())
    config = cfg(f"mem-{uuid.uuid4().hex}")
    agent.invoke(USER, config)
    agent.invoke(APPROVE_TWO, config)
    return tool_order(agent.get_state(config).values["messages"])


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_parallel_results_keep_the_live_order(request, thread_id, mode, server):
    url = url_of(request, server)
    expected = in_memory_order()
    assert sorted(expected) == ["c0", "c1", "c2", "c3", "c4", "c5"]
    await pause("ours", mode, url, thread_id, build=six_call_agent)

    if mode == "sync":
        with sync_saver("ours", url) as saver:
            agent = six_call_agent(saver)
            live = tool_order(agent.invoke(APPROVE_TWO, cfg(thread_id))["messages"])
            stored = tool_order(agent.get_state(cfg(thread_id)).values["messages"])
    else:
        async with async_saver("ours", url) as saver:
            agent = six_call_agent(saver)
            live = tool_order((await agent.ainvoke(APPROVE_TWO, cfg(thread_id)))["messages"])
            stored = tool_order((await agent.aget_state(cfg(thread_id))).values["messages"])

    assert live == expected
    assert stored == expected


@pytest.mark.parametrize("mode", MODES)
async def test_thread_paused_by_stock_saver_resumes_with_ours(redis_url, thread_id, mode):
    # Paused with the stock async saver (whose pause is visible), resumed with ours.
    await pause("stock", "async", redis_url, thread_id)

    after = resume_in_new_process("ours", mode, redis_url, thread_id)

    assert after["files"] == ["/notes/a.md"]
    assert after["messages"] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


async def test_a_thread_the_stock_saver_wrote_is_listed_and_deleted_whole_by_ours(redis_url, thread_id):
    """Ours keeps no registry of a stock thread: it finds it by the stock search, and takes
    its checkpoints into the registry it starts when it first writes to the thread."""
    await pause("stock", "async", redis_url, thread_id)
    async with async_saver("stock", redis_url) as stock:
        written = [t.config["configurable"]["checkpoint_id"] async for t in stock.alist(cfg(thread_id))]

    async with async_saver("ours", redis_url) as saver:
        found = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(cfg(thread_id))]
        await write_agent(saver).ainvoke(APPROVE, cfg(thread_id))
        after = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(cfg(thread_id))]
        await saver.adelete_thread(thread_id)

    assert len(written) >= 3 and found == written
    assert after[len(after) - len(written) :] == written and len(after) > len(written)
    assert thread_keys(redis_url, thread_id) == {}


async def test_concurrent_first_writes_to_a_stock_thread_take_its_history_in(redis_url, thread_id):
    """LangGraph saves a step's writes and its checkpoint concurrently: whichever of our writes
    comes first to a thread the stock saver wrote, its older checkpoints stay listed."""
    config: dict = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    async with async_saver("stock", redis_url) as stock:
        for step in range(3):
            config = await stock.aput(config, empty_checkpoint(), {"source": "loop", "step": step}, {})

    async with async_saver("ours", redis_url) as saver:
        await asyncio.gather(
            *(saver.aput_writes(config, [("messages", n)], f"task-{n}") for n in range(8)),
            saver.aput(config, empty_checkpoint(), {"source": "loop", "step": 3}, {}),
        )
        await saver.aput(config, empty_checkpoint(), {"source": "loop", "step": 4}, {})  # a registry now
        steps = [t.metadata["step"] async for t in saver.alist(cfg(thread_id))]

    assert steps == [4, 3, 2, 1, 0]


async def test_a_thread_the_stock_saver_put_on_a_cluster_is_found_by_its_parents(cluster_url, thread_id):
    """On a cluster the stock saver can still `put`; ours follows such a thread's parent links
    from its latest pointer (there is no search to ask), and takes it into its registry."""
    client = connections.async_client(cluster_url, decode_responses=False)
    stock = AsyncRedisSaver(redis_client=client)
    config: dict = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    written = []
    try:
        for step in range(3):
            config = await stock.aput(config, empty_checkpoint(), {"source": "loop", "step": step}, {})
            written.append(config["configurable"]["checkpoint_id"])
    finally:
        await client.aclose()

    async with async_saver("ours", cluster_url) as saver:
        found = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(cfg(thread_id))]
        newest = await saver.aput(config, empty_checkpoint(), {"source": "loop", "step": 3}, {})
        after = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(cfg(thread_id))]
        await saver.adelete_thread(thread_id)

    assert found == written[::-1]
    assert after == [newest["configurable"]["checkpoint_id"], *written[::-1]]
    assert thread_keys(cluster_url, thread_id) == {}


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_list_filters_namespace_before_and_custom_metadata(request, thread_id, mode, server):
    url = url_of(request, server)
    saved = []
    for_list = [
        ({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}, None, None, None),  # root
        (cfg(thread_id), {"score": 3}, None, None),
        (cfg(thread_id), None, 1, None),  # before the second
        (cfg(thread_id), None, None, 1),
        ({"configurable": {"thread_id": thread_id, "checkpoint_ns": "tools:abc"}}, None, None, None),
    ]
    rows = [("", 1), ("", 2), ("tools:abc", 3)]
    if mode == "sync":
        with sync_saver("ours", url) as saver:
            for ns, score in rows:
                config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
                meta = {"source": "loop", "step": score, "score": score}
                saved.append(saver.put(config, empty_checkpoint(), meta, {}))
            listed = [
                [
                    t.metadata["score"]
                    for t in saver.list(c, filter=f, before=saved[b] if b else None, limit=n)
                ]
                for c, f, b, n in for_list
            ]
    else:
        async with async_saver("ours", url) as saver:
            for ns, score in rows:
                config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
                meta = {"source": "loop", "step": score, "score": score}
                saved.append(await saver.aput(config, empty_checkpoint(), meta, {}))
            listed = [
                [
                    t.metadata["score"]
                    async for t in saver.alist(c, filter=f, before=saved[b] if b else None, limit=n)
                ]
                for c, f, b, n in for_list
            ]

    assert listed == [[2, 1], [3], [1], [3], [3]]


@pytest.mark.parametrize("server", SERVERS)
async def test_list_without_a_thread_finds_every_thread(request, server):
    url = url_of(request, server)
    marker = uuid.uuid4().hex
    threads = [f"test-{uuid.uuid4().hex}" for _ in range(3)]
    async with async_saver("ours", url) as saver:
        for n, thread_id in enumerate(threads):
            root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            await saver.aput(root, empty_checkpoint(), {"source": "loop", "step": n, "marker": marker}, {})
        found = [
            t.config["configurable"]["thread_id"] async for t in saver.alist(None, filter={"marker": marker})
        ]
        first = [t async for t in saver.alist(None, filter={"marker": marker}, limit=1)]

    assert found == threads[::-1]  # newest first, across threads
    assert len(first) == 1


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_state_history_is_the_one_in_memory_gives(request, thread_id, mode, server):
    url = url_of(request, server)
    expected = in_memory_history()
    await pause("ours", mode, url, thread_id)
    if mode == "sync":
        with sync_saver("ours", url) as saver:
            agent = write_agent(saver)
            agent.invoke(APPROVE, cfg(thread_id))
            history = history_of(agent.get_state_history(cfg(thread_id)))
    else:
        async with async_saver("ours", url) as saver:
            agent = write_agent(saver)
            await agent.ainvoke(APPROVE, cfg(thread_id))
            history = history_of([s async for s in agent.aget_state_history(cfg(thread_id))])

    assert len(expected) >= 5
    assert history == expected


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_delete_thread_leaves_no_key_of_the_thread_on_any_node(request, mode, server):
    url = url_of(request, server)
    gone, kept = f"test-{uuid.uuid4().hex}", f"test-{uuid.uuid4().hex}"
    for thread_id in (gone, kept):
        await pause("ours", mode, url, thread_id)
    spread = thread_keys(url, gone)
    if mode == "sync":
        with sync_saver("ours", url) as saver:
            saver.delete_thread(gone)
            state = write_agent(saver).get_state(cfg(kept))
    else:
        async with async_saver("ours", url) as saver:
            await saver.adelete_thread(gone)
            state = await write_agent(saver).aget_state(cfg(kept))

    assert len(spread) == 1  # a thread's keys share one hash slot, so one node, on a cluster too
    assert thread_keys(url, gone) == {}
    assert len(state.interrupts) == 1 and len(state.values["messages"]) == 2  # the other thread is whole


def extend(items: list, batches: list) -> list:
    return [*items, *(item for batch in batches for item in batch)]


class Counted(TypedDict):
    items: Annotated[list, DeltaChannel(extend, snapshot_frequency=3)]


def counting_graph(saver):
    """Each run adds its input and one item: a DeltaChannel with a snapshot every third update."""
    graph = StateGraph(Counted)
    graph.add_node("add", lambda state: {"items": [f"added after {len(state['items'])}"]})
    graph.add_edge(START, "add")
    graph.add_edge("add", END)
    return graph.compile(checkpointer=saver)


STOCK_PRUNE_EMPTIES = pytest.mark.xfail(
    strict=True, reason="the stock prune keeps only the latest checkpoint: a DeltaChannel's value is lost"
)


@pytest.mark.parametrize(
    "saver_name, mode, server",
    [
        *ours_everywhere(*MODES),
        pytest.param("stock", "async", "one server", marks=STOCK_PRUNE_EMPTIES, id="stock-async"),
    ],
)
async def test_prune_keeps_what_a_delta_channel_replays(request, thread_id, saver_name, mode, server):
    url = url_of(request, server)
    runs = [{"items": [f"input {n}"]} for n in range(5)]
    if mode == "sync":
        with sync_saver(saver_name, url) as saver:
            graph = counting_graph(saver)
            for run in runs:
                graph.invoke(run, cfg(thread_id))
            before = graph.get_state(cfg(thread_id)).values["items"]
            stored = len(list(saver.list(cfg(thread_id))))
            saver.prune([thread_id], strategy="keep_latest")
            left = len(list(saver.list(cfg(thread_id))))
            after = graph.get_state(cfg(thread_id)).values.get("items")
    else:
        async with async_saver(saver_name, url) as saver:
            graph = counting_graph(saver)
            for run in runs:
                await graph.ainvoke(run, cfg(thread_id))
            before = (await graph.aget_state(cfg(thread_id))).values["items"]
            stored = len([t async for t in saver.alist(cfg(thread_id))])
            await saver.aprune([thread_id], strategy="keep_latest")
            left = len([t async for t in saver.alist(cfg(thread_id))])
            after = (await graph.aget_state(cfg(thread_id))).values.get("items")

    assert len(before) == 10
    assert after == before
    assert 1 < left < stored  # the ancestors back to the snapshot stay; older ones go


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_prune_spares_the_writes_of_a_checkpoint_on_its_way(request, thread_id, mode, server):
    """Pruning a running thread: the writes of the step whose `put` has not landed yet stay."""
    url = url_of(request, server)
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    checkpoints = [empty_checkpoint() for _ in range(3)]
    coming = {"configurable": {**root["configurable"], "checkpoint_id": checkpoints[2]["id"]}}
    if mode == "sync":
        with sync_saver("ours", url) as saver:
            first = saver.put(root, checkpoints[0], {"source": "loop", "step": 0}, {})
            second = saver.put(first, checkpoints[1], {"source": "loop", "step": 1}, {})
            saver.put_writes(coming, [("messages", "in flight")], "t")
            saver.prune([thread_id])
            saver.put(second, checkpoints[2], {"source": "loop", "step": 2}, {})
            found = saver.get_tuple(coming)
            left = [t.metadata["step"] for t in saver.list(cfg(thread_id))]
    else:
        async with async_saver("ours", url) as saver:
            first = await saver.aput(root, checkpoints[0], {"source": "loop", "step": 0}, {})
            second = await saver.aput(first, checkpoints[1], {"source": "loop", "step": 1}, {})
            await saver.aput_writes(coming, [("messages", "in flight")], "t")
            await saver.aprune([thread_id])
            await saver.aput(second, checkpoints[2], {"source": "loop", "step": 2}, {})
            found = await saver.aget_tuple(coming)
            left = [t.metadata["step"] async for t in saver.alist(cfg(thread_id))]

    assert found.pending_writes == [("t", "messages", "in flight")]
    assert left == [2, 1]  # the first went; the second was the latest stored when pruned


async def test_sync_writes_through_the_async_saver_keep_their_order(redis_url, thread_id):
    """A sync graph on the async saver calls `put_writes` from a worker thread: the stock
    wrapper dropped `task_path`, which the order of parallel results depends on."""
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    at_checkpoint = {"configurable": {**root["configurable"], "checkpoint_id": checkpoint["id"]}}
    async with async_saver("ours", redis_url) as saver:
        await saver.aput(root, checkpoint, {"source": "loop", "step": 1}, {})
        for task_id, path, value in [
            ("task-a", "~__pregel_push, 1", "second"),
            ("task-b", "~__pregel_push, 0", "first"),
        ]:
            await asyncio.to_thread(saver.put_writes, at_checkpoint, [("messages", value)], task_id, path)
        found = await saver.aget_tuple(at_checkpoint)

    assert [value for _, _, value in found.pending_writes] == ["first", "second"]


@pytest.mark.parametrize("server", SERVERS)
async def test_with_a_ttl_every_key_of_the_thread_expires(request, thread_id, server):
    url = url_of(request, server)
    async with AsyncRedisCheckpointer.from_url(url, ttl={"default_ttl": 60}) as saver:
        await write_agent(saver).ainvoke(USER, cfg(thread_id))

    lives = []
    for client in connections.server_clients(url):
        try:
            lives += [client.ttl(key) for key in client.scan_iter(match=f"*{thread_id}*", count=1000)]
        finally:
            client.close()
    assert len(lives) >= 5
    assert all(0 < left <= 3600 for left in lives)  # none left without an expiry


@pytest.mark.parametrize("mode, server", everywhere(*MODES))
async def test_from_url_closes_the_client_it_made(request, mode, server):
    url = url_of(request, server)
    name = f"test-{uuid.uuid4().hex[:12]}"

    def connected() -> int:
        count = 0
        for client in connections.server_clients(url):
            try:
                count += sum(1 for c in client.client_list() if c.get("name") == name)
            finally:
                client.close()
        return count

    if mode == "sync":
        with RedisCheckpointer.from_url(url, client_name=name) as saver:
            saver.get_tuple(cfg(f"test-{name}"))
            during = connected()
    else:
        async with AsyncRedisCheckpointer.from_url(url, client_name=name) as saver:
            await saver.aget_tuple(cfg(f"test-{name}"))
            during = connected()

    assert during >= 1
    assert connected() == 0


STOCK_SENDS = pytest.mark.xfail(
    strict=True, reason="the stock saver looks for 'TASKS' in the write keys' names"
)


@pytest.mark.parametrize(
    "saver_name, server",
    [
        *(pytest.param("ours", server, id=server) for server in SERVERS),
        pytest.param("stock", "one server", marks=STOCK_SENDS, id="stock"),
    ],
)
async def test_a_checkpoint_of_the_old_format_gets_its_parents_sends(request, thread_id, saver_name, server):
    """Before format 4 a checkpoint's sends were its parent's `TASKS` writes (LangGraph moves
    them into the TASKS channel when it loads such a checkpoint); from format 4 on, they are not."""
    from langgraph.constants import TASKS
    from langgraph.types import Send

    url = url_of(request, server)
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    old = empty_checkpoint()  # langgraph.checkpoint.base makes format 2
    new = {**empty_checkpoint(), "v": 4}
    async with async_saver(saver_name, url) as saver:
        parent = await saver.aput(root, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        await saver.aput_writes(parent, [(TASKS, Send("tool", {"call": 1})), ("messages", "m")], "t1")
        await saver.aput_writes(parent, [(TASKS, Send("tool", {"call": 2}))], "t2")
        of_old = await saver.aget_tuple(await saver.aput(parent, old, {"source": "loop", "step": 1}, {}))
        of_new = await saver.aget_tuple(await saver.aput(parent, new, {"source": "loop", "step": 1}, {}))

    assert old["v"] < 4
    assert of_old.checkpoint["pending_sends"] == [Send("tool", {"call": 1}), Send("tool", {"call": 2})]
    assert of_new.checkpoint["pending_sends"] == []


class CutOff:
    """The saver's client, cut off (as when Redis restarts: the next command on an old
    connection fails) at its `at`-th round trip: a command or a pipeline, through the client
    or on the connection the saver keeps for its scripts."""

    def __init__(self, saver: Any):
        self.calls, self.at = 0, 0
        client, together = saver._redis, saver._together
        command, pipeline, sent = client.execute_command, client.pipeline, together.sent

        def cut() -> None:
            self.calls += 1
            if self.calls == self.at:
                raise RedisConnectionError("Connection closed by server.")

        async def cut_command(*args: Any, **options: Any) -> Any:
            cut()
            return await command(*args, **options)

        def cut_pipeline(*args: Any, **options: Any) -> Any:
            pipe = pipeline(*args, **options)
            execute = pipe.execute

            async def cut_execute(*args: Any, **options: Any) -> Any:
                cut()
                return await execute(*args, **options)

            pipe.execute = cut_execute
            return pipe

        async def cut_sent(*args: Any, **options: Any) -> Any:
            cut()
            return await sent(*args, **options)

        client.execute_command, client.pipeline, together.sent = cut_command, cut_pipeline, cut_sent

    def arm(self, at: int) -> None:
        self.calls, self.at = 0, at


async def test_a_run_cut_off_by_redis_at_any_of_its_calls_continues_to_the_same_pause(redis_url):
    """Redis lost mid-run at each of the run's Redis round trips in turn (the library's own
    writes, the registry, the reads); then what the runner does with the command handed to it
    again: continue the run that began (its message is saved), or start it. Every time the
    agent ends up asking for the same refund: never a run that reads as finished without it,
    which a step saved after a failed one, or a last step saved without the next, looked like."""
    from agent_runner.graphs import build_graph
    from agent_runner.runner import Runner
    from core.outages import is_outage
    from tests.support.harness import GRAPHS

    outcomes = []
    async with AsyncRedisCheckpointer.from_url(redis_url) as saver:
        runner = Runner(build_graph(GRAPHS["demo"], saver), "demo")
        cut = CutOff(saver)
        for at in range(1, 200):
            cut.arm(at)
            thread_id = f"cut-{uuid.uuid4().hex}"
            try:
                outcome = await runner.start(thread_id, "Refund order 1 for 5000", message_id="m1")
                cut_off = False
            except Exception as exc:  # as the runner's worker takes it: Redis away, maybe wrapped
                if not is_outage(exc):
                    raise
                cut_off = True
                cut.arm(0)
                if await runner.has_message(thread_id, "m1"):
                    outcome = await runner.current(thread_id) or await runner.proceed(thread_id)
                else:
                    outcome = await runner.start(thread_id, "Refund order 1 for 5000", message_id="m1")
            asked = [a.name for request in outcome.pending for a in request.actions]
            outcomes.append((at, outcome.state.value, asked))
            if not cut_off:
                break  # past the run's last round trip: it was cut at every one

    assert not cut_off and len(outcomes) > 10  # every round trip of a start: 14 (one script per call)
    assert [o for o in outcomes if o[1:] != ("waiting", ["issue_refund"])] == []


@pytest.mark.parametrize("layout", ["node", "cluster"])
async def test_a_checkpoint_whose_parent_was_never_saved_is_refused(layout, request):
    """LangGraph saves the next step's checkpoint even when the last save failed; stored, it
    would leave a hole in the thread's chain. It is refused, as a Redis error (tried again)."""
    from agent_runner.checkpointer import ParentNotSaved

    url = request.getfixturevalue(f"{layout}_url")
    thread_id = f"orphan-{uuid.uuid4().hex}"
    async with AsyncRedisCheckpointer.from_url(url) as saver:
        first = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        saved = await saver.aput(first, empty_checkpoint(), {"step": -1}, {})
        lost = {**empty_checkpoint(), "id": "1f0000000-lost"}  # its save "failed": never stored
        after_lost = {"configurable": {**saved["configurable"], "checkpoint_id": lost["id"]}}
        with pytest.raises(ParentNotSaved):
            await saver.aput(after_lost, empty_checkpoint(), {"step": 1}, {})
        listed = [c async for c in saver.alist({"configurable": {"thread_id": thread_id}})]

    assert [c.config["configurable"]["checkpoint_id"] for c in listed] == [
        saved["configurable"]["checkpoint_id"]
    ]
