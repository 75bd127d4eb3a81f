"""Compound approvals (a rule's `require`): every entry met by distinct people, decided by the
decide script (on one server and on the cluster), and the policy keys checked at start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.permissions import Permissions
from core import policy_file
from core.approval_requirements import matched
from core.records import DecisionResult
from tests.redis.test_time_limits import (
    APPROVE_DECISION,
    REJECT,
    action,
    edit,
    pending,
    resume_decisions,
    sent,
)
from tests.support.files import write_policy
from tests.support.people import ALICE, BOB, CAROL, LEAD, RILEY, Directory

DAN = "U0DAN"
# Finance: Alice, Bob (and the requester, Riley); Security: Bob, Carol.
MEMBERS = {"S0FIN": frozenset({ALICE, BOB, RILEY}), "S0SEC": frozenset({BOB, CAROL})}
TWO_GROUPS = """
[[rules]]
name = "Large refunds"
tools = ["issue_refund"]
requester_may_approve = false
require = [{ name = "Finance", approvers = ["S0FIN"], count = 1 },
           { name = "Security", approvers = ["S0SEC"], count = 1 }]
"""


def require_permissions(tmp_path: Path, text: str = TWO_GROUPS) -> Permissions:
    rules = policy_file.load(Path(write_policy(tmp_path, text)))
    return Permissions(rules, Directory(MEMBERS))  # type: ignore[arg-type]


async def refund(store, policy: Permissions):
    approval = await pending(store, action("issue_refund", amount=5000))
    assert await store.deadlines.set_terms(approval, policy.terms(approval))
    return await store.approvals.get(approval.approval_id)


async def approve(store, policy: Permissions, approval, user: str, seen: int | None = None):
    return await store.decisions.decide(
        approval.approval_id, 0, APPROVE_DECISION, user, policy.gate(user), seen=seen
    )


# --- the policy keys ------------------------------------------------------------------------------


def test_require_is_read_and_its_approvers_are_the_rules(tmp_path):
    route = require_permissions(tmp_path).rules.route("issue_refund")
    assert [(e.name, e.approvers, e.count) for e in route.require] == [
        ("Finance", ("S0FIN",), 1),
        ("Security", ("S0SEC",), 1),
    ]
    assert route.approvers == ("S0FIN", "S0SEC") and route.quorum == 1
    assert {"S0FIN", "S0SEC"} <= require_permissions(tmp_path).rules.ids()


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        (
            'require = [{ approvers = ["U0ALICE"], count = 1 }]\nquorum = 2',
            "rules[0] ('Refunds'): require: quorum is require's one-entry shorthand: set one of them, not both",
        ),
        (
            'require = [{ approvers = ["U0ALICE"], count = 1 }]\ndecide = "approve"',
            "rules[0] ('Refunds'): decide: a rule that decides asks no one, so it takes no require",
        ),
        (
            'require = [{ approvers = ["U0ALICE"], count = 1 }]\napprovers = ["U0BOB"]',
            "rules[0] ('Refunds'): require: each entry names its approvers: drop the rule's approvers",
        ),
        (
            "require = [{ count = 1 }]",
            "rules[0] ('Refunds').require[0].approvers: missing: this key is needed",
        ),
        (
            'require = [{ approvers = ["U0ALICE"], count = 0 }]',
            "rules[0] ('Refunds').require[0].count: at least 1 (given 0)",
        ),
        (
            'require = [{ approvers = ["U0ALICE", "U0BOB"], count = 3 }]',
            "rules[0] ('Refunds').require[0]: count: 3 distinct approvers needed, 2 named",
        ),
        (
            'require = [{ approvers = ["U0ALICE"], count = 1 }, { approvers = ["U0ALICE"], count = 1 }]',
            "rules[0] ('Refunds'): require: 2 approvals by distinct people cannot be found among those named",
        ),
        ("require = []", "rules[0] ('Refunds'): require: 1 to 10 entries (0 given)"),
    ],
)
def test_a_require_that_cannot_work_refuses_to_start_in_one_line(tmp_path, rule, problem):
    path = Path(write_policy(tmp_path, f'[[rules]]\nname = "Refunds"\ntools = ["issue_refund"]\n{rule}\n'))
    with pytest.raises(policy_file.PolicyError) as refused:
        policy_file.load(path)
    assert refused.value.problems == [f"{path}: {problem}"]


def test_a_policy_without_require_keeps_its_fingerprint(tmp_path):
    text = (
        '[defaults]\napprovers = ["U0ALICE", "U0BOB"]\nquorum = 2\n\n[[rules]]\nname = "Large refunds"\n'
        'tools = ["issue_refund"]\nwhen = \'args.amount > 1000\'\napprovers = ["S0FIN"]\n\n'
        '[[rules]]\ntools = ["lookup_order"]\ndecide = "approve"\n'
    )
    # the fingerprint main gave this file before `require` existed
    assert policy_file.load(Path(write_policy(tmp_path, text))).fingerprint == "1f086aa4c16242f7"


def test_the_matching_moves_a_person_who_fits_both_to_let_another_fill_the_scarce_entry():
    # Bob (either) approved first, then Alice (finance only): Bob counts for security.
    assert matched([1, 1], [[0, 1], [0]]) == (2, [1, 0])
    assert matched([1, 1], [[0], [0]]) == (1, [0, None])
    assert matched([2, 1], [[0, 1], [0, 1], [0]])[0] == 3


# --- the decide script ------------------------------------------------------------------------------


async def test_one_person_cannot_fill_both_entries_and_the_set_completes_when_each_is_met(store, tmp_path):
    policy = require_permissions(tmp_path)
    approval = await refund(store, policy)

    first = await approve(store, policy, approval, BOB)  # in both groups
    again = await approve(store, policy, approval, BOB)
    assert (first.result, first.votes) == (DecisionResult.VOTED, 1)
    assert (again.result, again.votes) == (DecisionResult.VOTED_ALREADY, 1)
    assert await resume_decisions(store) == []

    done = await approve(store, policy, approval, ALICE)  # finance only: Bob moves to security

    assert (done.result, done.votes) == (DecisionResult.COMPLETE, 2)
    assert await resume_decisions(store) == [[sent(APPROVE_DECISION)]]
    stored = await store.approvals.get(approval.approval_id)
    assert [(v.user, v.eligible) for v in stored.votes[0]] == [(BOB, (0, 1)), (ALICE, (0,))]


async def test_two_people_of_one_entry_do_not_complete_it(store, tmp_path):
    policy = require_permissions(
        tmp_path, TWO_GROUPS.replace('"S0SEC"', '"U0CAROL"').replace('"S0FIN"', '"S0FIN", "U0DAN"')
    )
    approval = await refund(store, policy)

    assert (await approve(store, policy, approval, ALICE)).votes == 1
    second = await approve(store, policy, approval, DAN)
    assert (second.result, second.votes) == (DecisionResult.VOTED, 1)  # finance is full; security waits
    assert await resume_decisions(store) == []
    assert (await approve(store, policy, approval, CAROL)).result is DecisionResult.COMPLETE


async def test_the_barred_requester_never_counts_and_someone_in_no_entry_may_not_approve(store, tmp_path):
    policy = require_permissions(tmp_path)
    approval = await refund(store, policy)

    assert (await approve(store, policy, approval, RILEY)).result is DecisionResult.REQUESTER
    assert (await approve(store, policy, approval, DAN)).result is DecisionResult.NOT_APPROVER
    assert (await store.approvals.get(approval.approval_id)).votes == {}

    allowed = require_permissions(tmp_path, TWO_GROUPS.replace("requester_may_approve = false", ""))
    other = await refund(store, allowed)
    assert (await approve(store, allowed, other, RILEY)).result is DecisionResult.VOTED
    assert (await approve(store, allowed, other, CAROL)).result is DecisionResult.COMPLETE


async def test_one_reject_decides_at_once_under_require(store, tmp_path):
    policy = require_permissions(tmp_path)
    approval = await refund(store, policy)
    await approve(store, policy, approval, ALICE)

    verdict = await store.decisions.decide(approval.approval_id, 0, REJECT, CAROL, policy.gate(CAROL))

    assert verdict.result is DecisionResult.COMPLETE
    assert await resume_decisions(store) == [[sent(REJECT)]]


async def test_an_edit_under_require_is_a_proposal_as_under_a_quorum(store, tmp_path):
    policy = require_permissions(tmp_path)
    approval = await refund(store, policy)
    await approve(store, policy, approval, CAROL)  # of the agent's arguments

    proposed = await store.decisions.decide(
        approval.approval_id, 0, edit("b@acme.com"), ALICE, policy.gate(ALICE)
    )
    assert (proposed.result, proposed.votes) == (DecisionResult.VOTED, 1)  # Carol's approval was of others
    assert (await approve(store, policy, approval, CAROL, seen=0)).result is DecisionResult.CHANGED
    assert (await approve(store, policy, approval, ALICE, seen=1)).result is DecisionResult.VOTED_ALREADY

    agreed = await approve(store, policy, approval, CAROL, seen=1)

    assert agreed.result is DecisionResult.COMPLETE
    assert await resume_decisions(store) == [[sent(edit("b@acme.com"))]]


async def test_racing_approvals_complete_the_set_once(store, tmp_path):
    policy = require_permissions(tmp_path)
    approval = await refund(store, policy)

    verdicts = await asyncio.gather(*(approve(store, policy, approval, u) for u in (ALICE, BOB, CAROL) * 3))

    assert [v.result for v in verdicts].count(DecisionResult.COMPLETE) == 1
    assert len(await resume_decisions(store)) == 1


async def test_someone_an_escalation_lets_decide_may_fill_any_entry(store, tmp_path):
    text = TWO_GROUPS + 'escalate_after = "1h"\nescalate_to = ["U0LEAD"]\n'
    policy = require_permissions(tmp_path, text)
    approval = await refund(store, policy)
    assert (await approve(store, policy, approval, LEAD)).result is DecisionResult.NOT_APPROVER

    assert await store.deadlines.escalate(approval.approval_id, 3600)

    assert (await approve(store, policy, approval, LEAD)).result is DecisionResult.VOTED
    assert (await approve(store, policy, approval, CAROL)).result is DecisionResult.COMPLETE


async def test_an_entry_whose_group_is_not_read_yet_refuses_only_who_fills_nothing_known(store, tmp_path):
    rules = policy_file.load(Path(write_policy(tmp_path, TWO_GROUPS)))
    policy = Permissions(rules, Directory({"S0FIN": MEMBERS["S0FIN"], "S0SEC": None}))  # type: ignore[arg-type]
    approval = await refund(store, policy)

    assert (await approve(store, policy, approval, CAROL)).result is DecisionResult.GROUPS_UNKNOWN
    assert (await approve(store, policy, approval, ALICE)).result is DecisionResult.VOTED
    assert [v.eligible for v in (await store.approvals.get(approval.approval_id)).votes[0]] == [(0,)]
