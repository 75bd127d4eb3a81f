"""A decision's audit entry off the ack's path: the decide script queues it (its place in the
chain taken in the decision's step), `Audit.chain` hashes it moments later, in Python; an append
(a grant, an escalation) chains what is queued first; two chainers at once chain each entry once;
what a bot stopped before chaining left is chained before the audit is read or verified."""

from __future__ import annotations

import asyncio
import io
import json

from core.audit_chain import entry_hash
from core.protocol import Approve, Reject
from signoff.commands.audit import audit
from signoff.commands.audit_verify import live_problem
from tests.redis.test_audit_chain import audit_stream
from tests.support.records import two_action_approval


async def unchained(store, approvals: int) -> list[str]:
    """`approvals` two-action approvals of one thread, each action decided as a click does (its
    entry left queued); their approval ids."""
    ids = []
    for n in range(approvals):
        approval = await two_action_approval(store)
        await store.decisions.decide(approval.approval_id, 0, Approve(), "U0A", chain=False)
        await store.decisions.decide(approval.approval_id, 1, Reject(message=f"no {n}"), "U0B", chain=False)
        ids.append(approval.approval_id)
    return ids


def assert_chained(entries: list[tuple[str, dict[str, str]]]) -> None:
    assert entries[0][1]["prev"] == ""
    for (_, before), (_, after) in zip(entries, entries[1:], strict=False):
        assert after["prev"] == before["hash"]
    assert all(f["hash"] == entry_hash(f) for _, f in entries)


async def test_a_clicks_entry_waits_queued_in_its_place_then_is_chained_in_python(store):
    [approval_id] = await unchained(store, 1)
    partition = store.keys.of_approval(approval_id)
    assert await audit_stream(store) == []  # not hashed yet: queued, in order
    assert await store.redis.llen(partition.audit_queued) == 2

    assert await store.audit.chain(partition) == 2
    entries = await audit_stream(store)
    assert [(f["user"], f["outcome"]) for _, f in entries] == [("U0A", "decided"), ("U0B", "decided")]
    assert_chained(entries)
    assert await store.redis.get(partition.audit_head) == entries[-1][1]["hash"]
    assert not await store.redis.exists(partition.audit_queued)
    assert await store.audit.chain(partition) == 0  # nothing twice


async def test_an_append_chains_the_queued_entries_first_in_their_order(store):
    first, second = await unchained(store, 2)
    third = (await two_action_approval(store)).approval_id
    assert await store.deadlines.escalate(third, 60, ("U0ESC",))  # a Lua append, hashed there

    entries = await audit_stream(store)
    assert [f["approval_id"] for _, f in entries] == [first, first, second, second, third]
    assert [f["outcome"] for _, f in entries][-1] == "escalated"
    assert_chained(entries)
    broken, check = await live_problem(store)
    assert broken is None and check.chained == 5


async def test_chainers_at_once_chain_each_entry_once(store):
    await unchained(store, 30)
    partition = store.keys.of("t1")
    counts = await asyncio.gather(*(store.audit.chain(partition) for _ in range(4)))

    assert sum(counts) == 60
    entries = await audit_stream(store)
    assert len(entries) == 60 and len({f["hash"] for _, f in entries}) == 60
    assert_chained(entries)


async def test_what_a_stopped_bot_left_queued_is_verified_and_exported(store):
    await unchained(store, 2)  # (no chaining after: the bot died between the click and it)

    broken, check = await live_problem(store)
    assert broken is None and check.chained == 4
    out = io.StringIO()
    await audit(store, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()[1:-1]]  # (first, last: what it is)
    assert [row["entry"]["user"] for row in rows] == ["U0A", "U0B", "U0A", "U0B"]
