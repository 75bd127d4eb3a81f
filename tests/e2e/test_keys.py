"""The partitioned key layout: one slot per partition, spread over the cluster, found from an id."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.crc import key_slot

from core import connections
from core.keys import SLOTS, Keys, new_approval_id, partition_tags
from tests.support.harness import CHANNEL, Harness, consumed, eventually


@pytest.mark.parametrize("count", [1, 3, 12, 64])
def test_partition_k_lies_in_the_kth_slot_range(count):
    slots = [key_slot(tag.encode()) for tag in partition_tags(count)]
    assert [slot * count // SLOTS for slot in slots] == list(range(count))


async def test_every_key_of_a_run_is_in_its_threads_slot(redis_url, tmp_path, monkeypatch):
    """Every key a real run writes (its record and state, lock, card, votes, decisions,
    deadlines, Slack posts, refreshes, commands, events, audit…), as Redis tells each write and
    as a SCAN finds them, is in its thread's slot; only the keys of no run (a Slack thread's
    binding, dedupe marks, rate limiters, groups, the layout) may be elsewhere."""
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    policy = tmp_path / "signoff.toml"
    policy.write_text(
        '[defaults]\napprovers = ["U0ALICE", "U0BOB"]\n'
        '[[rules]]\ntools = ["send_email"]\nquorum = 2\ntimeout = "1h"\nremind_every = "30m"\n'
        'escalate_after = "45m"\nescalate_to = ["U0LEAD"]\n'
    )
    env = {"SIGNOFF_PARTITIONS": "12", "SIGNOFF_POLICY": str(policy)}
    async with Harness(redis_url, env=env) as scene:
        async with written_keys(scene) as written:
            await scene.start_bot()
            await scene.start_runner("ledger")
            thread_id = await scene.ask("send the mail", graph="ledger", requester="U0RILEY")
            card = await scene.card(thread_id)
            await scene.standin.click("U0ALICE", card, "approve:0")
            await scene.card_shows(card, "1 of 2 approvals")
            scanned = await every_key(scene)  # the card waiting: its index, deadlines, a vote
            await scene.standin.click("U0BOB", scene.fresh(card), "approve:0")
            await scene.answer(thread_id, "Sent.")
            await scene.card_shows(card, "Approved by")
            await eventually(lambda: handled(scene), what="every command and event handled")
            scanned |= await every_key(scene)

        keys = scene.store.keys
        partition = keys.of(thread_id)
        slot = key_slot(partition.base.encode())
        (approval_id,) = await scene.store.redis.zrange(keys.thread_approvals(thread_id), 0, -1)
        # what this run is known to write was seen (the look cannot come back empty)
        assert {
            keys.run(thread_id),
            keys.run_state(thread_id),
            keys.thread_lock(thread_id),
            keys.thread_approvals(thread_id),
            keys.posts(thread_id),
            keys.approval(approval_id),
            keys.decided(approval_id),
            keys.decisions(approval_id),
            keys.votes(approval_id),
            partition.commands,
            partition.events,
            partition.audit,
            partition.pending(CHANNEL),
            partition.deadlines,
            partition.refresh_due("card"),
        } <= set(written) | scanned

        def elsewhere(key: str) -> bool:
            return key_slot(key.encode()) != slot and not of_no_run(keys, key)

        # (every consumer joins every partition's groups: that bookkeeping is not the run's)
        assert sorted(k for k, events in written.items() if elsewhere(k) and events - GROUP_BOOKKEEPING) == []
        # (and the streams of the other partitions exist for their groups, holding nothing)
        assert [k for k in sorted(scanned) if elsewhere(k) and not await empty_stream(scene, k)] == []


GROUP_BOOKKEEPING = {"xgroup-create", "xgroup-createconsumer"}


async def handled(scene: Harness) -> bool:
    return await consumed(scene.store) and await consumed(scene.store, "events")


def of_no_run(keys: Keys, key: str) -> bool:
    """Keys that belong to no run: each used alone, they may live in any slot."""
    alone = (f"{keys.prefix}:slackthread:", f"{keys.prefix}:dedupe:", f"{keys.prefix}:rate:")
    return key in (keys.layout, keys.groups, keys.groups_refresh) or key.startswith(alone)


async def every_key(scene: Harness) -> set[str]:
    return {key async for key in scene.store.redis.scan_iter(f"{scene.prefix}:*", count=1_000)}


async def empty_stream(scene: Harness, key: str) -> bool:
    redis = scene.store.redis
    return await redis.type(key) == "stream" and await redis.xlen(key) == 0


@contextlib.asynccontextmanager
async def written_keys(scene: Harness) -> AsyncIterator[dict[str, set[str]]]:
    """Every key of the scene's prefix written while inside -> how (Redis's keyspace
    notifications: a key that lives for a moment, such as a thread's lock, is seen too)."""
    redis = scene.store.redis
    before = (await redis.config_get("notify-keyspace-events"))["notify-keyspace-events"]
    await redis.config_set("notify-keyspace-events", "KA")
    written: dict[str, set[str]] = {}
    end = f"{scene.prefix}-written-keys-end"
    pubsub = redis.pubsub()
    await pubsub.psubscribe(f"__keyspace@*__:{scene.prefix}:*")
    await pubsub.subscribe(end)

    async def listen() -> None:
        async for message in pubsub.listen():
            if message["type"] == "pmessage":
                written.setdefault(message["channel"].split(":", 1)[1], set()).add(message["data"])
            elif message["type"] == "message":
                return  # every write before the end mark was told before it

    listening = asyncio.create_task(listen())
    try:
        yield written
        await redis.publish(end, "end")
        await asyncio.wait_for(listening, 30)
    finally:
        await redis.config_set("notify-keyspace-events", before)
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening
        await pubsub.aclose()


def test_an_approval_and_a_deadline_find_their_threads_partition():
    keys = Keys("signoff", 12)
    thread_id = str(uuid.uuid4())
    approval_id = new_approval_id(thread_id)
    partition = keys.of(thread_id)
    assert keys.of_approval(approval_id) is partition
    assert keys.of_item(f"expire:{approval_id}:0") is partition
    assert keys.of_item(f"status:{thread_id}") is partition


def test_a_forged_approval_id_is_looked_for_in_the_first_partition():
    keys = Keys("signoff", 12)
    assert keys.of_approval("../../etc") is keys.partitions[0]
    assert keys.of_approval("") is keys.partitions[0]


def test_twelve_partitions_spread_evenly_over_three_masters(cluster_url):
    client = connections.sync_client(cluster_url)
    try:
        owners = [client.get_node_from_key(p.commands).port for p in Keys("signoff", 12).partitions]
    finally:
        client.close()
    assert sorted(owners.count(port) for port in set(owners)) == [4, 4, 4]
