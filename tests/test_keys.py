"""The partitioned key layout: one slot per partition, spread over the cluster, found from an id."""

from __future__ import annotations

import uuid

import pytest
from redis.crc import key_slot

from agent_runner import connections
from agent_runner.keys import SLOTS, Keys, new_approval_id, partition_tags


@pytest.mark.parametrize("count", [1, 3, 12, 64])
def test_partition_k_lies_in_the_kth_slot_range(count):
    slots = [key_slot(tag.encode()) for tag in partition_tags(count)]
    assert [slot * count // SLOTS for slot in slots] == list(range(count))


def test_every_key_of_a_run_is_in_its_threads_slot():
    keys = Keys("signoff", 12)
    thread_id = str(uuid.uuid4())
    approval_id = new_approval_id(thread_id)
    partition = keys.of(thread_id)
    run_keys = [
        keys.run(thread_id),
        keys.run_state(thread_id),
        keys.thread_lock(thread_id),
        keys.thread_approvals(thread_id),
        keys.posts(thread_id),
        keys.by_interrupt(thread_id, "i1"),
        keys.command_done(thread_id, "c1"),
        keys.remote_told(thread_id, "r1"),
        keys.approval(approval_id),
        keys.decided(approval_id),
        keys.decisions(approval_id),
        keys.votes(approval_id),
        partition.commands,
        partition.events,
        partition.audit,
        partition.dead_letters,
        partition.pending("C1"),
        partition.deadlines,
        partition.refresh_due("card"),
    ]
    assert len({key_slot(key.encode()) for key in run_keys}) == 1
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
