"""Trust grants (`core.grants`, `bot.trust`) in Redis, on one server and on the cluster: a grant
is written once, lets through only the same call, is used once per action whoever asks twice,
expires, is used up, is revoked, and every change is in the audit chain; two bots and a click
racing one trusted call end in one outcome."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from bot.permissions import Permissions
from bot.trust import grant_after, offered, use_grants
from core import policy_file
from core.config import SettingsError
from core.protocol import ActionReview, Approve
from core.records import DecisionResult, Outcome
from core.store import Store
from signoff.commands.audit_verify import verify_live
from tests.support.files import policy_permissions, write_policy
from tests.support.people import ALICE, BOB, Directory
from tests.support.records import pending_batch

GRANT_POLICY = (
    "[defaults]\napprovers = ['U0ALICE', 'U0BOB']\n"
    "[[rules]]\nname = 'Deploys'\ntools = ['deploy']\ntrust = '1h'\ntrust_uses = 2\n"
    "[[rules]]\nname = 'Refunds'\ntools = ['issue_refund']\ntrust = '1h'\ntrust_args = ['order_id']\n"
    "[[rules]]\nname = 'Quick'\ntools = ['restart']\ntrust = '1s'\n"
)


def gated(name: str, **args) -> ActionReview:
    return ActionReview(name=name, args=args, allowed_decisions=("approve", "reject"))


async def with_terms_set(store: Store, policy: Permissions, action: ActionReview, requester: str = "U0RILEY"):
    approval = await pending_batch(store, action, requester=requester)
    assert await store.deadlines.set_terms(approval, policy.terms(approval))
    return await store.approvals.get(approval.approval_id)


async def trusted_by(store: Store, policy: Permissions, action: ActionReview, user: str = ALICE):
    """A call approved with Approve & trust: (the grant, the approval)."""
    approval = await with_terms_set(store, policy, action)
    verdict = await store.decisions.decide(approval.approval_id, 0, Approve(), user, policy.gate(user))
    assert verdict.result is DecisionResult.COMPLETE
    grant, why = await grant_after(store, policy.rules, approval.approval_id, 0, user)
    assert grant is not None, why
    return grant, approval


async def asked_again(store: Store, policy: Permissions, action: ActionReview, requester: str = "U0RILEY"):
    approval = await with_terms_set(store, policy, action, requester)
    return await use_grants(store, policy, approval)


async def test_a_grant_approves_the_same_call_unasked_and_nothing_wider(tmp_path, store):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    grant, _ = await trusted_by(store, policy, gated("deploy", service="api", version="1.2"))

    same = await asked_again(store, policy, gated("deploy", service="api", version="1.2"))
    other_args = await asked_again(store, policy, gated("deploy", service="api", version="1.3"))
    other_requester = await asked_again(
        store, policy, gated("deploy", service="api", version="1.2"), "U0DANA"
    )

    assert same.decided[0].outcome is Outcome.TRUSTED
    assert same.decided[0].grant is not None and same.decided[0].grant["id"] == grant.id
    assert same.decided[0].grant["by"] == ALICE and same.decided[0].rule == "Deploys"
    assert other_args.decided == {} and other_requester.decided == {}
    resumes = [json.loads(f["decisions"]) for _, f in await store.queue.entries(lambda p: p.commands)]
    assert resumes == [[{"type": "approve"}], [{"type": "approve"}]]  # the click's, the grant's
    audit = await store.audit.entries()
    assert [(e["outcome"], e["user"]) for e in audit if e["outcome"] != "decided"] == [
        ("granted", ALICE),
        ("trusted", "signoff"),
    ]
    used = next(e for e in audit if e["outcome"] == "trusted")
    assert (used["grant"], used["granted_by"], used["rule"]) == (grant.id, ALICE, "Deploys")


async def test_trust_args_compare_only_the_named_arguments(tmp_path, store):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    await trusted_by(store, policy, gated("issue_refund", order_id="1235", amount=5000))

    other_amount = await asked_again(store, policy, gated("issue_refund", order_id="1235", amount=6000))
    other_order = await asked_again(store, policy, gated("issue_refund", order_id="77", amount=5000))
    no_order = await asked_again(store, policy, gated("issue_refund", amount=5000))

    assert other_amount.decided[0].outcome is Outcome.TRUSTED
    assert other_order.decided == {} and no_order.decided == {}
    assert offered(policy.rules, no_order, 0) is None  # nothing to compare: no trust button either


async def test_a_grant_is_used_up_and_a_second_replica_asking_for_the_same_card_uses_nothing(tmp_path, store):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    grant, _ = await trusted_by(store, policy, gated("deploy", service="api"))
    first = await with_terms_set(store, policy, gated("deploy", service="api"))

    twice = await asyncio.gather(*(use_grants(store, policy, first) for _ in range(2)))

    assert [a.decided[0].outcome for a in twice] == [Outcome.TRUSTED, Outcome.TRUSTED]
    assert (await store.grants.get(grant.id)).uses_left == 1  # one use for one card, however often asked
    second = await asked_again(store, policy, gated("deploy", service="api"))
    third = await asked_again(store, policy, gated("deploy", service="api"))
    assert second.decided[0].outcome is Outcome.TRUSTED
    assert third.decided == {}  # trust_uses = 2: the third call asks
    assert await store.grants.get(grant.id) is None and await store.grants.live() == []


async def test_a_grant_expires_on_redis_s_clock(tmp_path, store):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    await trusted_by(store, policy, gated("restart", service="api"))

    await asyncio.sleep(1.2)
    late = await asked_again(store, policy, gated("restart", service="api"))

    assert late.decided == {}
    assert await store.grants.live() == []


async def test_a_revoked_grant_lets_nothing_through_and_the_chain_still_verifies(tmp_path, store):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    grant, _ = await trusted_by(store, policy, gated("deploy", service="api"))
    assert [g.id for g in await store.grants.live()] == [grant.id]

    assert await store.grants.revoke(grant.id, BOB)
    assert not await store.grants.revoke(grant.id, BOB)  # once
    after = await asked_again(store, policy, gated("deploy", service="api"))

    assert after.decided == {}
    revoked = [e for e in await store.audit.entries() if e["outcome"] == "revoked"]
    assert [(e["grant"], e["user"], e["granted_by"]) for e in revoked] == [(grant.id, BOB, ALICE)]
    out = io.StringIO()
    assert await verify_live(store, out) == 0, out.getvalue()


async def test_a_quorum_grants_only_with_the_approval_that_completes_it(tmp_path, store):
    text = GRANT_POLICY.replace("trust_uses = 2\n", "trust_uses = 2\nquorum = 2\n")
    policy = policy_permissions(tmp_path, text)
    approval = await with_terms_set(store, policy, gated("deploy", service="api"))

    first = await store.decisions.decide(approval.approval_id, 0, Approve(), ALICE, policy.gate(ALICE))
    assert first.result is DecisionResult.VOTED
    grant, why = await grant_after(store, policy.rules, approval.approval_id, 0, ALICE)
    assert grant is None and "did not decide" in why
    last = await store.decisions.decide(approval.approval_id, 0, Approve(), BOB, policy.gate(BOB))
    assert last.result is DecisionResult.COMPLETE
    grant, _ = await grant_after(store, policy.rules, approval.approval_id, 0, BOB)

    assert grant is not None and grant.granted_by == BOB


async def test_two_bots_and_a_click_racing_a_trusted_call_end_in_one_outcome(tmp_path, store, layout_url):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    grant, _ = await trusted_by(store, policy, gated("deploy", service="api"))
    other = Store.from_url(layout_url, store.keys.prefix)  # a second replica, its own connections
    try:
        for _ in range(5):
            approval = await with_terms_set(store, policy, gated("deploy", service="api"))
            await asyncio.gather(
                use_grants(store, policy, approval),
                use_grants(other, policy, approval),
                store.decisions.decide(approval.approval_id, 0, Approve(), BOB, policy.gate(BOB)),
            )
            record = await store.approvals.get(approval.approval_id)
            assert len(record.decided) == 1
            entries = [e for e in await store.audit.entries() if e["approval_id"] == approval.approval_id]
            assert len(entries) == 1  # one outcome, audited once
            resumes = [
                f
                for _, f in await store.queue.entries(lambda p: p.commands)
                if approval.approval_id in f["command"]
            ]
            assert len(resumes) == 1
            if (await store.grants.get(grant.id)) is None:
                break  # used up (trust_uses = 2): later calls are asked, the click decides
    finally:
        await other.close()


def test_trust_keys_are_checked_at_start(tmp_path):
    for text, problem in [
        ("[[rules]]\ntools = ['x']\ntrust_uses = 3\n", "trust_uses: only with trust"),
        ("[[rules]]\ntools = ['x']\ntrust = '31d'\n", "trust: at most 30d"),
        ("[[rules]]\ntools = ['x']\ntrust = '1h'\ndecide = 'approve'\n", "takes no trust"),
        ("[[rules]]\ntools = ['x']\ntrust = '1h'\ntrust_args = ['a b']\n", "trust_args"),
    ]:
        with pytest.raises(SettingsError, match=problem):
            policy_permissions(tmp_path, text)


async def test_a_grant_stops_when_its_granter_may_no_longer_approve_or_the_defaults_change(tmp_path, store):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    await trusted_by(store, policy, gated("deploy", service="api"), user=BOB)
    without_bob = policy_permissions(
        tmp_path, GRANT_POLICY.replace("'U0ALICE', 'U0BOB'", "'U0ALICE', 'U0CAROL'")
    )

    after = await asked_again(store, without_bob, gated("deploy", service="api"))

    assert after.decided == {}  # (the defaults it inherits changed: its grants ended too)
    same_rules = policy_permissions(tmp_path, GRANT_POLICY)
    assert (await asked_again(store, same_rules, gated("deploy", service="api"))).decided[0].outcome is (
        Outcome.TRUSTED
    )


async def test_one_grant_stands_per_call_however_many_identical_cards_trust_it(tmp_path, store):
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    first, second = [await with_terms_set(store, policy, gated("deploy", service="api")) for _ in range(2)]
    for approval in (first, second):
        await store.decisions.decide(approval.approval_id, 0, Approve(), ALICE, policy.gate(ALICE))

    made = [await grant_after(store, policy.rules, a.approval_id, 0, ALICE) for a in (first, second)]

    assert made[0][0] is not None and made[1][0] is None and "trusted already" in made[1][1]
    assert [g.id for g in await store.grants.live()] == [made[0][0].id]  # trust_uses = 2 in all, not 4


async def test_a_grant_stops_when_its_granter_leaves_the_rule_s_group(tmp_path, store):
    """The rule names a group, and `[defaults]` stays as it was: Bob's grant lets the same call
    through while he is in the group, and not from the moment a refresh reads him out of it."""
    text = GRANT_POLICY.replace("name = 'Deploys'\n", "name = 'Deploys'\napprovers = ['S0PLATFORM']\n")
    text = text.replace("trust_uses = 2\n", "")
    platform = Directory({"S0PLATFORM": frozenset({ALICE, BOB})})
    policy = Permissions(policy_file.load(Path(write_policy(tmp_path, text))), platform)  # type: ignore[arg-type]
    grant, _ = await trusted_by(store, policy, gated("deploy", service="api"), user=BOB)
    while_in = await asked_again(store, policy, gated("deploy", service="api"))
    assert while_in.decided[0].outcome is Outcome.TRUSTED

    platform.change("S0PLATFORM", frozenset({ALICE}))  # Bob left the group in Slack
    after = await asked_again(store, policy, gated("deploy", service="api"))

    assert after.decided == {}  # asked: a card, which Bob may no longer decide either
    assert not policy.may_decide(after, 0, BOB) and policy.may_decide(after, 0, ALICE)
    used = [e for e in await store.audit.entries() if e["outcome"] == "trusted"]
    assert [e["approval_id"] for e in used] == [while_in.approval_id]


async def test_no_trust_is_offered_or_used_for_a_call_an_earlier_rule_s_when_could_not_read(tmp_path, store):
    """A deploy without `env` cannot be read by the prod rule's `when`, and goes to the stricter
    of the two rules it could have matched, one that offers trust (it bars the requester): it is
    asked all the same, with no Approve & trust, and a live grant for the same call (the same
    service) is not used for it."""
    prod = "[[rules]]\nname = 'Prod'\ntools = ['deploy']\nwhen = 'args.env == \"prod\"'\napprovers = ['U0LEAD']\n"
    barred = "[[rules]]\nname = 'Deploys'\nrequester_may_approve = false\n"
    text = GRANT_POLICY.replace("[[rules]]\nname = 'Deploys'\n", prod + barred)
    text = text.replace("trust_uses = 2\n", "trust_args = ['service']\n")
    policy = policy_permissions(tmp_path, text)
    grant, _ = await trusted_by(store, policy, gated("deploy", service="api", env="staging"))

    unread = await with_terms_set(store, policy, gated("deploy", service="api"))
    after = await use_grants(store, policy, unread)

    assert unread.terms is not None and unread.terms.rules == {0: 1}  # routed by 'Deploys', which trusts
    assert unread.terms.unread == {0: "Prod: the call has no 'env'"}
    assert after.decided == {}  # asked
    assert offered(policy.rules, unread, 0) is None  # no Approve & trust on its card
    assert (await store.grants.get(grant.id)).used == 0
    approved = await store.decisions.decide(unread.approval_id, 0, Approve(), ALICE, policy.gate(ALICE))
    assert approved.result is DecisionResult.COMPLETE
    assert await grant_after(store, policy.rules, unread.approval_id, 0, ALICE) == (
        None,
        "This call's rule does not offer trust now, so none was granted.",
    )
    readable = await asked_again(store, policy, gated("deploy", service="api", env="dev"))
    assert readable.decided[0].outcome is Outcome.TRUSTED  # (the grant works for a call it can read)


async def test_a_rule_tightened_to_step_up_makes_no_grant_from_a_card_posted_before(tmp_path, store):
    """A red team's finding: a card posted under the old rule (no step_up) is approved by a click,
    as its terms say; Approve & trust on it, under the rule now stepping up, grants nothing, so no
    later step-up call of the rule is let through without a passkey."""
    before = (
        "[defaults]\napprovers = ['U0ALICE', 'U0BOB']\n"
        "[[rules]]\nname = 'Deploys'\ntools = ['deploy']\ntrust = '1h'\n"
    )
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = policy_permissions(tmp_path / "old", before)
    new = policy_permissions(tmp_path / "new", before + "step_up = 'passkey'\n")
    deploy = ActionReview(name="deploy", args={"service": "api"}, allowed_decisions=("approve", "reject"))
    card = await pending_batch(store, deploy)
    assert await store.deadlines.set_terms(card, old.terms(card))

    clicked = await store.decisions.decide(card.approval_id, 0, Approve(), ALICE, new.gate(ALICE))
    grant, said = await grant_after(store, new.rules, card.approval_id, 0, ALICE)
    later = await pending_batch(store, deploy)
    assert await store.deadlines.set_terms(later, new.terms(later))
    later = await use_grants(store, new, (await store.approvals.get(later.approval_id)) or later)

    assert clicked.result is DecisionResult.COMPLETE  # (the card's own terms: posted before the change)
    assert grant is None and said.startswith("Trust on this call needs your passkey")
    assert later.decided == {}  # it waits for a person with a passkey
