"""Calls the policy decides (a rule's `decide`): checked at start, recorded by the decide script
(first decision wins, only a type the action allows, only where the action's own rule says so),
audited with outcome auto and the rule named; on one server and on the cluster."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from bot.permissions import Permissions
from bot.policy_decisions import decide_by_policy, decided_lines
from core.config import Settings, SettingsError
from core.protocol import ActionReview, Approve
from core.records import DecisionResult, Outcome
from core.store import SIGNOFF
from tests.support.files import policy_permissions, write_policy
from tests.support.paths import ROOT
from tests.support.records import pending_batch

POLICY = (
    "[defaults]\napprovers = ['U0ALICE']\n"
    "[[rules]]\nname = 'Refunds up to 100'\ntools = ['issue_refund']\ndecide = 'approve'\n"
    "summary = 'Refund {amount} on order {order_id}'\n"
    "[[rules]]\ntools = ['delete']\ndecide = 'reject'\nmessage = 'Deletes need a ticket'\n"
    "[[rules]]\ntools = ['send_email']\napprovers = ['U0BOB']\n"
    "[[rules]]\ntools = ['send_*']\ndecide = 'approve'\n"
)


def permissions(tmp_path, text: str = POLICY) -> Permissions:
    return policy_permissions(tmp_path, text)


def call(name: str, allowed: tuple[str, ...] = ("approve", "reject"), **args) -> ActionReview:
    return ActionReview(name=name, args=args or {"n": 1}, allowed_decisions=allowed)


async def with_terms(store, policy: Permissions, *actions: ActionReview):
    approval = await pending_batch(store, *actions)
    assert await store.deadlines.set_terms(approval, policy.terms(approval))
    return await store.approvals.get(approval.approval_id)


async def test_decide_approves_and_rejects_audited_and_the_asked_call_completes_one_resume_in_order(
    tmp_path, store
):
    policy = permissions(tmp_path)
    approval = await with_terms(
        store, policy, call("send_email"), call("issue_refund", order_id="A1", amount=50), call("delete")
    )

    approval = await decide_by_policy(store, policy.rules, approval)

    assert approval.by_policy() == (1, 2)
    assert approval.decided[1].decision == {"type": "approve"}
    assert approval.decided[2].decision == {"type": "reject", "message": "Deletes need a ticket"}
    assert {d.outcome for d in approval.decided.values()} == {Outcome.AUTO}
    assert [approval.decided[i].rule for i in (1, 2)] == ["Refunds up to 100", "the rule for delete"]
    assert 0 not in approval.decided
    assert await store.queue.entries(lambda p: p.commands) == []  # the asked call still waits
    audit = await store.audit.entries()
    assert [(e["index"], e["user"], e["outcome"], e["rule"]) for e in audit] == [
        (1, SIGNOFF, "auto", "Refunds up to 100"),
        (2, SIGNOFF, "auto", "the rule for delete"),
    ]
    lines = decided_lines(policy.rules, approval).split("\n")
    assert lines == [
        "🤖✅ Approved by policy: Refunds up to 100 · Refund 50 on order A1",
        "🤖❌ Rejected by policy: the rule for delete · delete: n 1: Deletes need a ticket",
    ]

    bob = await store.decisions.decide(approval.approval_id, 0, Approve(), "U0BOB", policy.gate("U0BOB"))

    assert bob.result is DecisionResult.COMPLETE
    resumes = [f for _, f in await store.queue.entries(lambda p: p.commands) if "decisions" in f]
    assert [json.loads(f["decisions"]) for f in resumes] == [
        [{"type": "approve"}, {"type": "approve"}, {"type": "reject", "message": "Deletes need a ticket"}]
    ]


async def test_a_batch_the_policy_decides_whole_resumes_at_once_and_a_second_replica_records_nothing(
    tmp_path, store
):
    policy = permissions(tmp_path)
    approval = await with_terms(store, policy, call("issue_refund"), call("send_sms"))

    first = await decide_by_policy(store, policy.rules, approval)
    again = await decide_by_policy(store, policy.rules, approval)  # a second replica, same event

    assert first.by_policy() == again.by_policy() == (0, 1)
    assert len(await store.audit.entries()) == 2
    resumes = [f for _, f in await store.queue.entries(lambda p: p.commands) if "decisions" in f]
    assert len(resumes) == 1
    verdict = await store.decisions.decide_by_policy(approval.approval_id, 0, {"type": "approve"}, "x")
    assert verdict.result is DecisionResult.NOT_PENDING


async def test_decide_never_applies_to_a_call_whose_own_rule_does_not_say_so(tmp_path, store):
    policy = permissions(tmp_path)
    # send_email's rule asks Bob (the later send_* rule decides, but the first match wins);
    # [defaults] never decides; a card routed under another policy decides nothing
    approval = await with_terms(store, policy, call("send_email"), call("other_tool"), call("send_sms"))

    approval = await decide_by_policy(store, policy.rules, approval)

    assert approval.by_policy() == (2,)
    older = permissions(tmp_path, "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE']\n")
    routed_before = await with_terms(store, older, call("issue_refund"))
    assert (await decide_by_policy(store, policy.rules, routed_before)).decided == {}


async def test_a_call_an_earlier_when_cannot_read_is_asked_not_decided_by_a_later_rule(tmp_path, store):
    # Large refunds need Alice; the rest the policy approves. A refund whose amount is missing
    # (or not a number) cannot be read by the first rule: it fails closed, to the stricter of
    # the two (Alice asks), never to the rule that approves.
    policy = permissions(
        tmp_path,
        "[[rules]]\ntools = ['issue_refund']\nwhen = 'args.amount > 1000'\napprovers = ['U0ALICE']\n"
        "[[rules]]\nname = 'Small refunds'\ntools = ['issue_refund']\ndecide = 'approve'\n"
        "fallthrough = 'deliberate'\n",
    )
    approval = await with_terms(
        store,
        policy,
        call("issue_refund", amount=50),
        call("issue_refund", order_id="o1"),
        call("issue_refund", amount="5000"),
    )

    approval = await decide_by_policy(store, policy.rules, approval)

    assert approval.by_policy() == (0,)
    assert approval.terms.rules == {0: 1, 1: 0, 2: 0}
    assert approval.terms.unread == {
        1: "the rule for issue_refund: the call has no 'amount'",
        2: "the rule for issue_refund: `>` cannot take text and a whole number",
    }
    bob = await store.decisions.check(approval.approval_id, 1, "approve", "U0BOB", policy.gate("U0BOB"))
    assert bob.result is DecisionResult.NOT_APPROVER


async def test_a_call_no_deciding_rule_can_read_is_asked_not_decided(tmp_path, store):
    policy = permissions(
        tmp_path,
        "[[rules]]\nname = 'Tiny refunds'\ntools = ['issue_refund']\nwhen = 'args.amount < 10'\n"
        "decide = 'approve'\n"
        "[[rules]]\nname = 'No refunds'\ntools = ['issue_refund']\ndecide = 'reject'\n",
    )
    approval = await with_terms(store, policy, call("issue_refund", order_id="o1"))

    with capture_logs() as logs:
        approval = await decide_by_policy(store, policy.rules, approval)

    assert approval.by_policy() == ()
    assert [e["index"] for e in logs if e["event"] == "policy_decision_withheld"] == [0]


async def test_a_decision_the_action_does_not_allow_is_asked_and_logged(tmp_path, store):
    policy = permissions(tmp_path)
    approval = await with_terms(store, policy, call("delete", allowed=("approve",)))

    with capture_logs() as logs:
        approval = await decide_by_policy(store, policy.rules, approval)

    assert approval.decided == {} and await store.audit.entries() == []
    refused = [e for e in logs if e["event"] == "policy_decision_not_allowed"]
    assert refused and refused[0]["rule"] == "the rule for delete" and refused[0]["allowed"] == "approve"
    alice = await store.decisions.decide(
        approval.approval_id, 0, Approve(), "U0ALICE", policy.gate("U0ALICE")
    )
    assert alice.result is DecisionResult.COMPLETE  # asked of [defaults]' approvers


async def test_an_expiry_or_a_person_first_wins_over_the_policy_and_the_policy_over_them(tmp_path, store):
    policy = permissions(tmp_path)
    approval = await with_terms(store, policy, call("issue_refund"), call("delete"))
    await store.decisions.decide_for_people(approval.approval_id, Outcome.EXPIRED, "too late", index=0)

    approval = await decide_by_policy(store, policy.rules, approval)

    assert approval.decided[0].outcome is Outcome.EXPIRED and approval.decided[2 - 1].outcome is Outcome.AUTO
    after = await store.decisions.decide_for_people(
        approval.approval_id, Outcome.WITHDRAWN, "no", user="U0RILEY"
    )
    assert after.result is DecisionResult.NOT_PENDING  # complete already: one outcome each


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ("decide = 'maybe'", "rules[0].decide: not one of 'approve' or 'reject' (given 'maybe')"),
        ("message = 'why'", 'rules[0]: message: only with decide = "reject" (what the agent is told)'),
        ("decide = 'approve'\nmessage = 'why'", 'rules[0]: message: only with decide = "reject"'),
        (
            "decide = 'approve'\napprovers = ['U0ALICE']\ntimeout = '2h'\nquorum = 2",
            "rules[0]: decide: a rule that decides asks no one, so it takes no approvers, timeout, quorum",
        ),
    ],
)
def test_decide_keys_are_checked_at_start_one_line_naming_the_file_and_rule(tmp_path, rule, problem):
    path = write_policy(tmp_path, f"[[rules]]\ntools = ['issue_refund']\n{rule}\n")

    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": path})

    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].startswith(f"{path}: {problem}")


def test_an_old_policy_file_keeps_its_fingerprint_and_the_example_shows_decide_require_and_trust():
    policy = Settings.from_env({"SIGNOFF_POLICY": str(ROOT / "deploy" / "signoff.toml")}).policy

    assert any(rule.decide for rule in policy.rules)
    assert any(rule.require for rule in policy.rules)
    assert any(rule.trust for rule in policy.rules)
    later_keys = {"step_up": None, "step_up_trust": None}  # (added since, as the ones below)
    older = tuple(
        r.model_copy(update=later_keys)
        for r in policy.rules
        if not (r.decide or r.require or r.trust or r.fallthrough)
    )
    defaults = policy.defaults.model_copy(
        update={"fallthrough": None, "redact": [], "reveal": False, **later_keys}
    )
    without = policy.model_copy(update={"rules": older, "defaults": defaults})
    # what main named the same file before decide, require, trust and fallthrough (main at b38336c,
    # on this file's rules without those keys)
    assert without.fingerprint == "257553553efbbedd"
