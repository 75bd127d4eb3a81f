"""The checkpointer with checkpoint keys (`agent_runner.checkpointer.encryption`), sync and async,
on one server and on a cluster: a key being rotated out is read and never written, `rekey` writes
every value again under the current key (or in the clear), a value saved meanwhile is left as
saved, a thread the stock saver wrote is still read, and without a key the bytes are as before.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.redis import AsyncRedisSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agent_runner.checkpointer import (
    AsyncRedisCheckpointer,
    CheckpointKeyError,
    CheckpointKeys,
    RedisCheckpointer,
    slots,
)
from agent_runner.checkpointer.encryption import reseal
from core import connections
from tests.support.savers import APPROVE, SERVERS, USER, at_rest, cfg, summary, write_agent

NOTE = b"hello"  # what write_agent's call writes: in its checkpoints' values and writes


@asynccontextmanager
async def keyed_saver(mode: str, url: str, keys: CheckpointKeys | None) -> AsyncIterator[Any]:
    if mode == "sync":
        with RedisCheckpointer.from_url(url, keys=keys) as saver:
            yield saver
        return
    async with AsyncRedisCheckpointer.from_url(url, keys=keys) as saver:
        yield saver


async def run_write_agent(mode: str, saver: Any, command: Any, thread_id: str) -> dict:
    agent = write_agent(saver)
    if mode == "sync":
        return summary(agent.invoke(command, cfg(thread_id)))
    return summary(await agent.ainvoke(command, cfg(thread_id)))


async def rekeyed(mode: str, saver: Any, thread_id: str) -> Any:
    return saver.rekey([thread_id]) if mode == "sync" else await saver.arekey([thread_id])


def stored_values(url: str, thread_id: str) -> list[bytes]:
    """Every typed value the checkpointer stores for the thread (`<type>\\0<bytes>`)."""
    client = connections.sync_client(url, decode_responses=False)
    found: list[bytes] = []
    try:
        for key in client.scan_iter(match=f"{slots.base(thread_id)}*"):
            if client.type(key) != b"hash":
                continue
            for field, value in client.hgetall(key).items():
                if b":w:" in key:
                    found.append(value.split(b"\x00", 2)[2])
                elif b":b:" in key or field in (b"c", b"m"):
                    found.append(value)
    finally:
        client.close()
    return [value for value in found if not value.startswith(b"empty\x00")]


def sealed(value: bytes) -> bool:
    """A typed value as `EncryptedSerializer` stores it: `<type>+aes\0<nonce><tag><ciphertext>`."""
    return value.partition(b"\x00")[0].endswith(b"+aes")


@pytest.mark.parametrize(
    "mode, server", [pytest.param(m, s, id=f"{s}-{m}") for s in SERVERS for m in ("sync", "async")]
)
async def test_a_key_rotated_out_is_read_not_written_and_rekey_frees_it(request, thread_id, mode, server):
    url = request.getfixturevalue(SERVERS[server])
    old, new = os.urandom(32), os.urandom(32)
    async with keyed_saver(mode, url, CheckpointKeys(old)) as saver:
        await run_write_agent(mode, saver, USER, thread_id)
    async with keyed_saver(mode, url, CheckpointKeys(new, [old])) as saver:
        done = await run_write_agent(mode, saver, APPROVE, thread_id)  # read under the old key
        under = [
            CheckpointKeys(new, [old]).opened("aes", v.split(b"\x00", 1)[1])[0]
            for v in stored_values(url, thread_id)
        ]
        first = await rekeyed(mode, saver, thread_id)
        again = await rekeyed(mode, saver, thread_id)
    async with keyed_saver(mode, url, CheckpointKeys(new)) as saver:  # the old key gone
        agent = write_agent(saver)
        history = (
            [s async for s in agent.aget_state_history(cfg(thread_id))]
            if mode == "async"
            else list(agent.get_state_history(cfg(thread_id)))
        )
    async with keyed_saver(mode, url, CheckpointKeys(old)) as saver:
        with pytest.raises(CheckpointKeyError, match="SIGNOFF_CHECKPOINT_OLD_KEYS"):
            await run_write_agent(mode, saver, APPROVE, thread_id)

    assert done["messages"] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert set(under) == {0, 1}  # written under the new key since, under the old one before
    assert first.values == under.count(1) and first.unreadable == [] and first.threads == 1
    assert again.values == 0
    assert len(history) >= 4 and len(history[0].values["messages"]) == 4  # every checkpoint read
    assert all(map(sealed, stored_values(url, thread_id)))
    assert all(NOTE not in raw for raw in at_rest(url, thread_id).values())


async def test_with_old_keys_alone_rekey_stores_them_in_the_clear_again(redis_url, thread_id):
    old = os.urandom(32)
    async with AsyncRedisCheckpointer.from_url(redis_url, keys=CheckpointKeys(old)) as saver:
        await run_write_agent("async", saver, USER, thread_id)
    async with AsyncRedisCheckpointer.from_url(redis_url, keys=CheckpointKeys(None, [old])) as saver:
        turned_off = await saver.arekey([thread_id])
    async with AsyncRedisCheckpointer.from_url(redis_url) as saver:  # no key at all now
        done = await run_write_agent("async", saver, APPROVE, thread_id)

    assert turned_off.values > 0
    assert not any(map(sealed, stored_values(redis_url, thread_id)))
    assert done["files"] == ["/notes/a.md"]


async def test_a_value_saved_while_rekeying_is_left_as_it_was_saved(redis_url, thread_id):
    """The rekey reads a thread, then writes each value only if it still holds what it read:
    a runner with the new key that saves meanwhile is never overwritten with an older value."""
    old, new = os.urandom(32), os.urandom(32)
    with RedisCheckpointer.from_url(redis_url, keys=CheckpointKeys(old)) as saver:
        write_agent(saver).invoke(USER, cfg(thread_id))
    with RedisCheckpointer.from_url(redis_url, keys=CheckpointKeys(new, [old])) as saver:
        body = saver._reseal(thread_id)
        reply: Any = None
        request = body.send(reply)
        while not any(isinstance(queue, slots.Script) for queue in request):
            request = body.send(saver._execute(request))
        client = connections.sync_client(redis_url, decode_responses=False)
        values_key = slots.values_key(thread_id, "")
        field, value = next(
            (f, v) for f, v in client.hgetall(values_key).items() if not v.startswith(b"empty\x00")
        )
        meanwhile = reseal(CheckpointKeys(new), reseal(CheckpointKeys(None, [old]), value) or b"")
        client.hset(values_key, field, meanwhile)  # as a runner with the new key saves it
        with pytest.raises(StopIteration) as done:
            body.send(saver._execute(request))
        assert client.hget(values_key, field) == meanwhile
        client.close()
    resealed, changed = done.value.value
    assert changed == 1 and resealed > 0


async def test_a_thread_the_stock_saver_wrote_is_read_and_continued_encrypted(redis_url, thread_id):
    """The stock-saver-compatible read path under a key: what the stock saver wrote is read (it
    stays in the clear: Signoff never writes that layout, the rekey says so), what follows is
    encrypted."""
    async with AsyncRedisSaver.from_conn_string(redis_url) as stock:
        await stock.asetup()
        await write_agent(stock).ainvoke(USER, cfg(thread_id))
    keys = CheckpointKeys(os.urandom(32))
    async with AsyncRedisCheckpointer.from_url(redis_url, keys=keys) as saver:
        done = await run_write_agent("async", saver, APPROVE, thread_id)
        report = await saver.arekey([thread_id])

    assert done["files"] == ["/notes/a.md"]
    assert done["messages"] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert stored_values(redis_url, thread_id)  # the new checkpoints, in the project's layout
    assert all(map(sealed, stored_values(redis_url, thread_id)))
    assert report.legacy == [thread_id]


def test_without_a_key_every_value_is_stored_as_before_byte_for_byte(redis_url, thread_id):
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"note": "sk-live-in-the-clear"}
    checkpoint["channel_versions"] = {"note": "0000000001.000001"}
    with RedisCheckpointer.from_url(redis_url) as saver:
        saved = saver.put(config, checkpoint, {"source": "input", "step": -1}, checkpoint["channel_versions"])
        saver.put_writes(saved, [("note", "a write")], "task-1")
    client = connections.sync_client(redis_url, decode_responses=False)
    values = client.hgetall(slots.values_key(thread_id, ""))
    writes = client.hgetall(slots.writes_key(thread_id, "", checkpoint["id"]))
    client.close()
    plain = JsonPlusSerializer()

    assert values == {
        b"note\x000000000001.000001": b"msgpack\x00" + plain.dumps_typed("sk-live-in-the-clear")[1]
    }
    assert writes == {b"task-1\x000": b"\x00note\x00msgpack\x00" + plain.dumps_typed("a write")[1]}


async def test_an_encrypted_checkpoint_read_without_a_key_says_which_setting(redis_url, thread_id):
    async with AsyncRedisCheckpointer.from_url(redis_url, keys=CheckpointKeys(os.urandom(32))) as saver:
        await run_write_agent("async", saver, USER, thread_id)
    async with AsyncRedisCheckpointer.from_url(redis_url) as saver:
        with pytest.raises(
            CheckpointKeyError, match="encrypted .msgpack\\+aes. and SIGNOFF_CHECKPOINT_KEY is not set"
        ):
            await saver.aget_tuple(cfg(thread_id))
