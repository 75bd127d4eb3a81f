"""The queued audit entries against what a red team tried (issue 46): values cjson and Python
could read apart, bytes that are not UTF-8 (another writer's), a poisoned queue under a recorded
expiry, chainers and Lua appends racing, a chainer that died between its read and its write, and
a backlog a Lua append must not hold Redis's one thread for."""

from __future__ import annotations

import asyncio
import io
import json
import time
import uuid

import pytest

from core.audit_chain import entry_hash
from core.protocol import ActionReview, Approve, Edit, EditedAction, PendingRequest, Reject, RequestKind
from core.records import Outcome, Run, approval_for
from signoff.commands.audit import audit
from signoff.commands.audit_verify import live_problem


def partition_of(store, thread="t1"):
    return store.keys.of(thread)


async def chained_entries(store, thread="t1"):
    return list(await store.redis.xrange(partition_of(store, thread).audit))


async def approval_with(store, name: str, args: dict, thread: str = "t1", actions: int = 1):
    request = PendingRequest(
        interrupt_id=uuid.uuid4().hex,
        kind=RequestKind.BATCHED,
        actions=tuple(
            ActionReview(name=name, args=args, allowed_decisions=("approve", "edit", "reject"))
            for _ in range(actions)
        ),
    )
    run = Run(thread_id=thread, graph="demo", channel="C1", requester="U0REQ")
    approval, created = await store.approvals.create(approval_for(request, run, "demo"))
    assert created
    return approval


def assert_linked(entries) -> None:
    prev = ""
    for _, f in entries:
        assert f["prev"] == prev
        assert f["hash"] == entry_hash(f), f
        prev = f["hash"]


# --- Lua-encoded (cjson) vs Python-hashed bytes: values that could disagree ------------------------

TRICKY = [
    "émoji 🎉 — ünïcödé 中文",
    'slash / and \\ backslash \\/ and "quotes" and {braces} [brackets]',
    "null",
    "",
    "123",
    "1e400",
    "\x00nul\x01ctl\x7fdel\x1f",
    "line\nsep\u2028\u2029para\r\t",
    "x" * 200_000,
]


@pytest.mark.parametrize("value", TRICKY, ids=range(len(TRICKY)))
async def test_tricky_values_queued_then_chained_in_python_verify(store, value):
    approval = await approval_with(store, f"tool{value[:50]}", {"v": value, "n": 1.5, "k": [None, {}]})
    edit = Edit(edited_action=EditedAction(name=approval.request.actions[0].name, args={"v": value + "!"}))
    await store.decisions.decide(approval.approval_id, 0, edit, f"U0A{value[:300]}", chain=False)
    assert await store.audit.chain(partition_of(store)) == 1
    assert_linked(await chained_entries(store))
    broken, check = await live_problem(store)
    assert broken is None and check.chained == 1


@pytest.mark.parametrize("value", TRICKY[:4], ids=range(4))
async def test_tricky_values_queued_then_chained_by_a_lua_append_verify(store, value):
    approval = await approval_with(store, f"tool{value[:50]}", {"v": value})
    await store.decisions.decide(approval.approval_id, 0, Reject(message=value), "U0A", chain=False)
    other = await approval_with(store, "other", {})
    assert await store.deadlines.escalate(other.approval_id, 60, ("U0ESC",))
    entries = await chained_entries(store)
    assert [f["outcome"] for _, f in entries] == ["decided", "escalated"]
    assert_linked(entries)


# --- Poison: one queued entry Python cannot read -----------------------------------------------------


async def poisoned(store):
    """A queued entry whose bytes are not UTF-8 (an approval's field written as raw bytes: a
    record from before, a restore, or any other writer; the client reads it back-slash escaped)."""
    approval = await approval_with(store, "tool", {"a": 1})
    await store.redis.hset(store.keys.approval(approval.approval_id), "tool:0", b"caf\xe9")
    await store.decisions.decide(approval.approval_id, 0, Approve(), "U0A", chain=False)
    return approval


async def test_an_entry_not_utf8_does_not_stop_the_chaining_of_the_entries_after_it(store):
    await poisoned(store)
    later = await approval_with(store, "later", {})
    await store.decisions.decide(later.approval_id, 0, Approve(), "U0B", chain=False)
    try:
        await store.audit.chain(partition_of(store))
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Audit.chain raised on one queued entry: {exc!r}; every later entry stays queued")


async def test_an_entry_not_utf8_does_not_stop_verify_export_or_a_persons_decisions(store):
    await poisoned(store)
    failures = []
    for what, call in (
        ("verify", lambda: live_problem(store)),
        ("export", lambda: audit(store, io.StringIO())),
        ("decisions_by", lambda: store.audit.decisions_by("U0A")),
        ("entries", lambda: store.audit.entries()),
    ):
        try:
            await call()
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{what}: {exc!r}")
    assert failures == []


async def test_a_poisoned_queue_does_not_fail_a_recorded_expiry(store):
    """decide_for_people (an expiry, a withdrawal) chains in line: the decision is recorded, then
    the call raises, so its caller believes it failed."""
    await poisoned(store)
    victim = await approval_with(store, "victim", {})
    try:
        await store.decisions.decide_for_people(
            victim.approval_id, Outcome.WITHDRAWN, "withdrawn", user="U0REQ"
        )
    except Exception as exc:  # noqa: BLE001
        after = await store.approvals.get(victim.approval_id)
        pytest.fail(f"raised {exc!r} although the decision was recorded (status {after.status.value})")


# --- Races ------------------------------------------------------------------------------------------


async def test_chainers_and_lua_appends_racing_leave_one_chain_in_queued_order(store):
    approvals = [await approval_with(store, f"tool{n}", {"n": n}) for n in range(40)]
    others = [await approval_with(store, "esc", {}) for _ in range(10)]
    order: list[str] = []

    async def click(a):
        await store.decisions.decide(a.approval_id, 0, Approve(), "U0A", chain=False)

    async def chainer():
        for _ in range(20):
            await store.audit.chain(partition_of(store))
            await asyncio.sleep(0)

    async def escalations():
        for o in others:
            await store.deadlines.escalate(o.approval_id, 60, ("U0ESC",))
            await asyncio.sleep(0)

    async def trims():
        for _ in range(5):
            await store.retention.trim_audit(partition_of(store), int(time.time() * 1000) - 50)
            await asyncio.sleep(0.001)

    async def clicks():
        for a in approvals:
            await click(a)
            order.append(a.approval_id)
            await asyncio.sleep(0)

    await asyncio.gather(clicks(), chainer(), chainer(), escalations(), trims())
    await store.audit.chain(partition_of(store))
    broken, _ = await live_problem(store)
    assert broken is None, str(broken)
    decided = [f["approval_id"] for _, f in await chained_entries(store) if f["outcome"] == "decided"]
    assert decided[-len(decided) :] == order[-len(decided) :]
    assert not await store.redis.exists(partition_of(store).audit_queued)


async def test_a_chainer_that_read_then_died_leaves_nothing_wrong(store):
    from core.store import audit as audit_mod

    a = await approval_with(store, "tool", {})
    await store.decisions.decide(a.approval_id, 0, Approve(), "U0A", chain=False)
    partition = partition_of(store)
    # A chainer reads, hashes, and its CAS arrives late: after another chainer and a new click.
    head = await store.redis.get(partition.audit_head)
    [item] = await store.redis.lrange(partition.audit_queued, 0, -1)
    flat = json.loads(item)
    fields = dict(zip(flat[::2], flat[1::2], strict=True))
    fields["prev"] = head or ""
    stale = entry_hash(fields)
    assert await store.audit.chain(partition) == 1
    b = await approval_with(store, "tool2", {})
    await store.decisions.decide(b.approval_id, 0, Approve(), "U0B", chain=False)
    script = store.redis.register_script(audit_mod.CHAIN)
    keys = [partition.audit, partition.audit_head, partition.audit_queued]
    assert int(await script(keys=keys, args=[head or "", stale])) == 0
    assert await store.audit.chain(partition) == 1
    broken, check = await live_problem(store)
    assert broken is None and check.chained == 2


# --- A backlog: a Lua append hashes at most 100 queued entries, then queues its own behind them ----


async def test_a_lua_append_after_a_backlog_hashes_a_bounded_part_and_keeps_the_order(store):
    """While Python chaining is stalled (a bot down), every click's entry piles up; the next
    grant/escalation/reveal/trim hashes 100 of them in Lua (never the whole backlog in one step of
    Redis's one thread) and queues its own entry behind the rest, in its place."""
    partition = partition_of(store)
    a = await approval_with(store, "tool", {"blob": "y" * 2000})
    await store.decisions.decide(a.approval_id, 0, Approve(), "U0A", chain=False)
    [item] = await store.redis.lrange(partition.audit_queued, 0, -1)
    await store.redis.rpush(partition.audit_queued, *([item] * 299))  # 300 clicks' entries
    other = await approval_with(store, "esc", {})
    assert await store.deadlines.escalate(other.approval_id, 60, ("U0ESC",))

    assert len(await chained_entries(store)) == 100
    assert await store.redis.llen(partition.audit_queued) == 201  # the 200 left, then its own
    await store.audit.chain_all()
    entries = await chained_entries(store)
    assert [f["outcome"] for _, f in entries] == ["decided"] * 300 + ["escalated"]
    assert_linked(entries)
