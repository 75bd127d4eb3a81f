"""The decide script: first decision wins, every check in Redis, decisions sent as written."""

from __future__ import annotations

import json
import uuid

import pytest

from core.keys import RUNNERS_GROUP
from core.protocol import Approve, Edit, EditedAction, Reject
from core.records import DecisionResult, Gate, Run, approval_for
from core.store import Store
from tests.support.records import two_action_approval


async def resume_entries(store):
    return [
        (json.loads(f["command"]), json.loads(f["decisions"]))
        for _, f in await store.queue.entries(lambda p: p.commands)
        if "decisions" in f
    ]


async def test_the_set_completes_once_with_decisions_exactly_as_sent(store):
    approval = await two_action_approval(store)
    edit = Edit(
        edited_action=EditedAction(
            name="issue_refund", args={"order_id": "o1", "amount": 123456789012345678, "ratio": 0.1}
        )
    )

    first = await store.decisions.decide(approval.approval_id, 0, edit, "U0A")
    again = await store.decisions.decide(approval.approval_id, 0, Approve(), "U0B")
    last = await store.decisions.decide(approval.approval_id, 1, Reject(message="no"), "U0C")
    late = await store.decisions.decide(approval.approval_id, 1, Approve(), "U0D")

    assert [v.result for v in (first, again, last, late)] == [
        DecisionResult.RECORDED,
        DecisionResult.TAKEN,
        DecisionResult.COMPLETE,
        DecisionResult.TAKEN,
    ]
    assert again.first.user == "U0A" and late.first.user == "U0C"
    ((command, decisions),) = await resume_entries(store)
    assert command == {
        "type": "resume",
        "command_id": f"resume-{approval.approval_id}",
        "approval_id": approval.approval_id,
        "thread_id": "t1",
        "interrupt_id": approval.interrupt_id,
        "graph": "demo",
    }
    assert decisions == [edit.model_dump(), {"type": "reject", "message": "no"}]
    assert [e["original_args"] for e in await store.audit.entries()] == [
        {"order_id": "o1", "amount": 5000},
        {"to": "a@b.c"},
    ]


@pytest.mark.parametrize(
    "index, decision, gate, user, expected",
    [
        (0, Reject(), Gate(), "U0A", DecisionResult.NOT_ALLOWED),
        (5, Approve(), Gate(), "U0A", DecisionResult.NO_ACTION),
        (0, Approve(), Gate(requester_cannot_decide=True), "U0REQ", DecisionResult.REQUESTER),
        (0, Approve(), Gate(default=False), "U0A", DecisionResult.NOT_APPROVER),
        (
            1,
            Approve(),
            Gate(default=True, tools={"send_email": False}),
            "U0A",
            DecisionResult.NOT_APPROVER,
        ),
        (
            0,
            Approve(),
            Gate(default=False, tools={"issue_refund": True}),
            "U0A",
            DecisionResult.RECORDED,
        ),
    ],
)
async def test_refusals_change_nothing(store, index, decision, gate, user, expected):
    approval = await two_action_approval(store)

    verdict = await store.decisions.decide(approval.approval_id, index, decision, user, gate)

    assert verdict.result is expected
    written = await store.redis.hlen(store.keys.decided(approval.approval_id))
    assert written == (1 if expected is DecisionResult.RECORDED else 0)
    assert len(await store.audit.entries()) == written


async def test_a_check_writes_nothing_and_a_missing_approval_is_said(store):
    approval = await two_action_approval(store)

    checked = await store.decisions.check(approval.approval_id, 0, "edit", "U0A")
    missing = await store.decisions.decide("nope", 0, Approve(), "U0A")

    assert checked.result is DecisionResult.ALLOWED
    assert await store.redis.hlen(store.keys.decided(approval.approval_id)) == 0
    assert missing.result is DecisionResult.MISSING


async def test_an_interrupt_gets_one_approval_however_often_it_is_announced(store):
    approval = await two_action_approval(store)
    again = approval_for(approval.request, Run(thread_id="t1", graph="demo", channel="C1"), "demo")

    existing, created = await store.approvals.create(again)

    assert not created and existing.approval_id == approval.approval_id


async def test_a_failing_entry_does_not_stop_the_consumer_and_ends_in_dead_letters(store):
    import asyncio

    from core.streams import StreamConsumer

    p = store.keys.partitions[0]

    class Picky(StreamConsumer):
        group = "runners"

        def __init__(self, store):
            super().__init__(
                store, {p.commands: p.dead_letters}, consumer="picky", block_ms=100, max_deliveries=2
            )
            self.done: list[str] = []

        def decode(self, fields):
            return fields

        async def handle(self, entry, message):
            if entry.fields.get("bad"):
                raise RuntimeError("cannot read this")
            self.done.append(entry.fields["n"])

    await store.redis.xadd(p.commands, {"bad": "1"})
    await store.redis.xadd(p.commands, {"n": "after"})
    consumer, stop = Picky(store), asyncio.Event()
    serving = asyncio.create_task(consumer.serve(stop))
    for _ in range(200):
        if consumer.done and await store.redis.xlen(p.dead_letters):
            break
        await asyncio.sleep(0.02)
    stop.set()
    await serving

    assert consumer.done == ["after"]
    (dead,) = await store.redis.xrange(p.dead_letters)
    assert dead[1]["bad"] == "1" and dead[1]["stream"] == p.commands
    assert (await store.redis.xpending(p.commands, "runners"))["pending"] == 0


async def test_an_outage_a_library_wrapped_is_waited_out_not_counted_as_the_entrys_failure(store):
    """redisvl wraps a lost connection in its own error: the entry waits and is handled once
    Redis is back, where counting it as a failure would dead-letter it (two, here)."""
    import asyncio

    from redis.exceptions import ConnectionError as RedisConnectionError

    from core.streams import StreamConsumer

    p = store.keys.partitions[0]

    class Wrapped(StreamConsumer):
        group = "runners"

        def __init__(self, store):
            super().__init__(
                store, {p.commands: p.dead_letters}, consumer="wrapped", block_ms=100, max_deliveries=2
            )
            self.tries, self.done = 0, []

        def decode(self, fields):
            return fields

        async def handle(self, entry, message):
            self.tries += 1
            if self.tries <= 2:
                raise RuntimeError("search failed") from RedisConnectionError("Connection closed by server.")
            self.done.append(entry.fields["n"])

    await store.redis.xadd(p.commands, {"n": "1"})
    consumer, stop = Wrapped(store), asyncio.Event()
    serving = asyncio.create_task(consumer.serve(stop))
    for _ in range(300):
        if consumer.done:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await serving

    assert consumer.done == ["1"]
    assert await store.redis.xlen(p.dead_letters) == 0


async def test_a_done_command_takes_no_lock_and_says_so_even_while_the_thread_is_busy(store):
    from core.store.locks import Taken

    assert await store.locks.take("t1", "runner-a", 5_000, unless_done="c1") is Taken.TAKEN
    assert await store.locks.take("t1", "runner-b", 5_000, unless_done="c2") is Taken.BUSY
    await store.queue.mark_done("t1", "c2")  # (as runner-a would, had it carried out c2 meanwhile)

    assert await store.locks.take("t1", "runner-b", 5_000, unless_done="c2") is Taken.DONE
    assert await store.locks.take("t1", "purge", 5_000) is Taken.BUSY  # (a purge asks no command)
    await store.locks.release(store.keys.thread_lock("t1"), "runner-a")
    assert await store.locks.take("t1", "runner-b", 5_000, unless_done="c2") is Taken.DONE
    assert await store.redis.get(store.keys.thread_lock("t1")) is None  # nothing was taken


async def test_a_click_keeps_its_response_url_only_when_it_was_on_the_card(store):
    approval = await two_action_approval(store)
    await store.cards.set(approval, "1700000000.000100")
    on_card, elsewhere = (
        "https://hooks.slack.com/actions/T1/1/on-card",
        "https://hooks.slack.com/actions/T1/2/x",
    )

    read, url = await store.cards.take_reply(approval.approval_id, on_card, "1700000000.000100")
    assert (read.card_ts, url) == ("1700000000.000100", on_card)  # the record comes with it

    # a click on another message (a notice's copy of the card): its URL is neither kept nor used
    read, url = await store.cards.take_reply(approval.approval_id, elsewhere, "1700000000.000200")
    assert read is not None and url is None
    assert (await store.cards.take_reply(approval.approval_id))[1] == on_card  # (its second use)

    for _ in range(3):  # five uses in all, as Slack allows
        assert (await store.cards.take_reply(approval.approval_id))[1] == on_card
    assert (await store.cards.take_reply(approval.approval_id))[1] is None

    gone = "0" * 20
    assert await store.cards.take_reply(gone, on_card, "1700000000.000100") == (None, None)
    assert not await store.redis.exists(store.keys.approval(gone))  # nothing written for it


@pytest.mark.parametrize("handed_over", ["the command", "the lock"])
async def test_the_fence_refuses_a_runner_that_lost_its_command_or_its_lock_whichever_it_kept(
    store, handed_over
):
    """Before a tool starts or a step is saved, the fence asks for both the thread's lock and the
    command's lease: a runner that still holds one of them, but not the other, is refused, and
    the fence takes nothing back from whoever has it now."""
    from core.store.locks import Taken

    commands, lock = store.keys.of("t1").commands, store.keys.thread_lock("t1")
    entry_id = await store.redis.xadd(commands, {"command": "{}"})
    await store.redis.xreadgroup(RUNNERS_GROUP, "runner-a", {commands: ">"}, count=1)
    assert await store.locks.take("t1", "runner-a:1", 5_000) is Taken.TAKEN

    async def fenced(lease_ms: int) -> bool:
        return await store.locks.fence(
            "t1", "runner-a:1", lease_ms, commands, RUNNERS_GROUP, "runner-a", entry_id
        )

    assert await fenced(5_000) is True
    if handed_over == "the command":  # runner-b claims the entry; runner-a's lock stays
        await store.redis.xclaim(commands, RUNNERS_GROUP, "runner-b", 0, [entry_id], justid=True)
    else:  # runner-b takes the thread's lock; the entry stays runner-a's
        await store.redis.set(lock, "runner-b:1", px=5_000)

    assert await fenced(60_000) is False
    (pending,) = await store.redis.xpending_range(commands, RUNNERS_GROUP, "-", "+", 10)
    owners = (pending["consumer"], await store.redis.get(lock))
    assert owners == (
        ("runner-b", "runner-a:1") if handed_over == "the command" else ("runner-a", "runner-b:1")
    )
    assert await store.redis.pttl(lock) <= 5_000  # (neither lease was extended)


async def test_a_prefix_without_signoff_data_names_the_prefixes_that_hold_some(store, layout_url):
    """What an operator's command under the wrong SIGNOFF_PREFIX warns of: one SCAN for the
    layout keys, on every master of a cluster."""
    empty = Store.from_url(layout_url, f"t{uuid.uuid4().hex[:10]}-empty")
    try:
        elsewhere = await empty.layout.elsewhere()
    finally:
        await empty.close()

    assert store.keys.prefix in elsewhere and empty.keys.prefix not in elsewhere
    assert await store.layout.elsewhere() == []  # its own data: nothing to warn of
