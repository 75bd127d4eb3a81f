"""Policy rules with conditions (`when`, CEL), through the real bot, runner and Redis.

Each test runs on one Redis server and on a three-master Redis Cluster (the partitioned layout).
The demo agent asks for refunds over 1,000 only (its own `when`), so the policy splits those it
asks for at 3,000.
"""

from __future__ import annotations

import pytest

from core import policy_file
from tests.support.files import write_policy
from tests.support.harness import CHANNEL, Harness, card_text, eventually, signoff, start_scene, with_a_vote
from tests.support.people import ALICE, RILEY

FINANCE_ROOM, DANA = "C0FINANCE", "U0DANA"
WHEN_POLICY = (
    "[defaults]\napprovers = ['U0ALICE']\nrequester_may_approve = false\n"
    # refunds carry no currency: this rule's `when` says no to every call (it reads it), so it
    # never applies
    "[[rules]]\nname = 'Refunds in euros'\ntools = ['issue_refund']\n"
    "when = 'has(args.currency) && args.currency == \"EUR\"'\nchannel = 'C0EUROS'\n"
    "[[rules]]\nname = 'Large refunds'\ntools = ['issue_refund']\nwhen = 'args.amount > 3000'\n"
    f"approvers = ['{DANA}']\nchannel = '{FINANCE_ROOM}'\nsummary = 'Refund {{amount}} on order {{order_id}}'\n"
)


@pytest.fixture(params=["node", "cluster"])
async def scene(request, tmp_path, monkeypatch):
    told: list[dict] = []
    monkeypatch.setattr(policy_file.log, "warning", lambda event, **kw: told.append({"event": event, **kw}))
    policy = write_policy(tmp_path, WHEN_POLICY)
    async with start_scene(request.getfixturevalue(f"{request.param}_url"), "demo", policy=policy) as running:
        running.told = told  # type: ignore[attr-defined]
        yield running


async def test_a_when_rule_routes_a_refund_by_its_amount(scene):
    large = await scene.ask("Refund order 1235 for 5000", requester=RILEY)
    card = await scene.card(large)

    assert (card.channel, card.thread_ts) == (FINANCE_ROOM, None)  # `when` held: #finance, Dana decides
    assert card.text == f"<@{DANA}> Riley's agent wants to refund 5,000 on order 1235"
    assert "Rule: Large refunds · Approvers: <@U0DANA>" in card_text(card)
    await scene.standin.click(ALICE, card, "approve:0")  # the defaults' approver: not this rule's
    refusal = await eventually(lambda: scene.standin.ephemerals, what="Alice refused")
    assert "You are not on the approver list for `issue_refund`. Approvers: <@U0DANA>" in refusal[0]["text"]
    await scene.standin.click(DANA, card, "approve:0")
    assert "Refunded 5000 on order 1235" in await scene.answer(large)

    small = await scene.ask("Refund order 77 for 2000", requester=RILEY)
    card = await scene.card(small)

    assert card.channel == CHANNEL and card.thread_ts is not None  # `when` did not hold: the defaults
    assert "Rule:" not in card_text(card) and "Approvers: <@U0ALICE>" in card_text(card)
    await scene.standin.click(ALICE, card, "approve:0")
    assert "Refunded 2000 on order 77" in await scene.answer(small)


async def test_a_when_that_cannot_read_a_call_sends_it_to_the_strictest_rule_says_why_and_is_logged_once(
    request, tmp_path, monkeypatch
):
    told: list[dict] = []
    monkeypatch.setattr(policy_file.log, "warning", lambda event, **kw: told.append({"event": event, **kw}))
    # The euros rule cannot read a refund without a currency: such a call goes to the stricter
    # of the rules it could have matched (two approvers in #euros), never to a weaker one below.
    policy = write_policy(
        tmp_path,
        WHEN_POLICY.replace(
            "when = 'has(args.currency) && args.currency == \"EUR\"'\nchannel = 'C0EUROS'\n",
            f"when = 'args.currency == \"EUR\"'\nchannel = 'C0EUROS'\napprovers = ['{ALICE}', '{DANA}']\n"
            "quorum = 2\n",
        ).replace(
            "requester_may_approve = false\n",
            "requester_may_approve = false\nfallthrough = 'deliberate'\n",
            1,
        ),
    )
    async with start_scene(request.getfixturevalue("node_url"), "demo", policy=policy) as scene:
        for order, amount in (("1", 5000), ("2", 2000)):
            thread_id = await scene.ask(f"Refund order {order} for {amount}", requester=RILEY)
            card = await scene.card(thread_id)
            assert card.channel == "C0EUROS"
            assert (
                "⚠️ A rule could not read this call: Refunds in euros: the call has no 'currency'. "
                "The strictest rule it could fall under applies"
            ) in card_text(card)
            await scene.standin.click(ALICE, card, "approve:0")
            await eventually(lambda a=card: with_a_vote(scene, a), what="Alice's approval counted")
            assert not await scene.messages(thread_id, "answer")  # one of two approvals: not yet
            await scene.standin.click(DANA, card, "approve:0")
            assert f"Refunded {amount} on order {order}" in await scene.answer(thread_id)

    assert told == [
        {
            "event": "policy_condition_failed",
            "rule": "rules[0]",
            "name": "Refunds in euros",
            "when": 'args.currency == "EUR"',
            "tool": "issue_refund",
            "problem": "the call has no 'currency'",
        }
    ]


@pytest.mark.parametrize("layout", ["node", "cluster"])
async def test_a_when_that_does_not_compile_stops_the_bot_naming_the_file_and_the_rule(
    request, tmp_path, layout
):
    policy = write_policy(tmp_path, WHEN_POLICY.replace("args.amount > 3000", "args.amount >"))
    async with Harness(request.getfixturevalue(f"{layout}_url")) as harness:
        for command in ("bot", "runner"):
            refused = await signoff(harness, command, SIGNOFF_POLICY=policy)

            assert refused.returncode == 2, refused
            problem = (
                f"{policy}: rules[1] ('Large refunds').when: not CEL: a syntax error at '>' (column 13) "
                "(given 'args.amount >')"
            )
            assert [line.strip() for line in refused.stderr.splitlines() if "rules[" in line] == [problem]
