"""Time limits that fail closed, quorum, escalation and withdraw: the decide script and the
deadline sweeper against a real Redis, on an injected clock."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.permissions import Permissions
from bot.sweeper import DeadlineSweeper, expiry_message
from core import policy_file
from core.protocol import (
    ActionReview,
    Approve,
    Edit,
    EditedAction,
    PendingRequest,
    PersonDecision,
    Reject,
    RequestKind,
    decision_payload,
)
from core.records import ApprovalStatus, DecisionResult, Gate, Outcome, Run, Terms, approval_for
from core.store import Store
from tests.support.files import write_policy
from tests.support.people import ALICE, BOB, CAROL, LEAD, RILEY
from tests.support.records import card_is_out


def action(name: str, allowed: tuple[str, ...] = ("approve", "edit", "reject"), **args: Any) -> ActionReview:
    return ActionReview(name=name, args=args or {"to": "a@acme.com"}, allowed_decisions=allowed)


async def pending(
    store: Store,
    *actions: ActionReview,
    terms: Terms | None = None,
    created: float = 0.0,
    card: bool = True,
    requester: str | None = RILEY,
):
    """A pending approval with `terms`; `card`: its card is out (its ts kept, its deadlines as
    the terms say: the tests' clocks count from them), else none is yet."""
    request = PendingRequest(interrupt_id=uuid.uuid4().hex, kind=RequestKind.BATCHED, actions=actions)
    run = Run(thread_id=f"t-{uuid.uuid4().hex[:8]}", graph="demo", channel="C1", requester=requester)
    approval = approval_for(request, run, "demo")
    approval.created_at = created or approval.created_at
    approval, _ = await store.approvals.create(approval)
    if terms is not None:
        assert await store.deadlines.set_terms(approval, terms)
    if card:
        await card_is_out(store, approval.approval_id)
    return await store.approvals.get(approval.approval_id)


async def resume_decisions(store: Store) -> list[list[dict[str, Any]]]:
    return [
        json.loads(f["decisions"])
        for _, f in await store.queue.entries(lambda p: p.commands)
        if "decisions" in f
    ]


APPROVE_DECISION = Approve()
REJECT = Reject(message="not today")


def edit(to: str) -> Edit:
    return Edit(edited_action=EditedAction(name="send_email", args={"to": to}))


def sent(decision: PersonDecision) -> dict[str, Any]:
    """A decision as the resume carries it."""
    return decision_payload(decision)


# --- the policy keys ----------------------------------------------------------------------


def policy_path(tmp_path: Path, text: str) -> Path:
    return Path(write_policy(tmp_path, text))


def test_durations_and_quorum_are_read_and_inherited(tmp_path):
    policy = policy_file.load(
        policy_path(
            tmp_path,
            '[defaults]\ntimeout = "24h"\nremind_every = "90s"\n'
            '[[rules]]\ntools = ["issue_refund"]\ntimeout = "30m"\nquorum = 2\n'
            'escalate_after = "2h"\nescalate_to = ["S0LEADS"]\n'
            '[questions]\ntimeout = "7d"\nanswer = "Go ahead without me."\n',
        )
    )
    refund, other = policy.route("issue_refund"), policy.route("send_email")
    assert (refund.timeout, refund.remind_every, refund.escalate_after, refund.quorum) == (1800, 90, 7200, 2)
    assert refund.escalate_to == ("S0LEADS",)
    assert (other.timeout, other.quorum, other.escalate_after) == (86_400, 1, None)
    assert policy.questions.timeout == "7d"
    unset = policy_file.PolicyFile().route("x")
    assert (unset.timeout, unset.remind_every, unset.escalate_after, unset.quorum) == (None, None, None, 1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('timeout = "2 hours"', "defaults.timeout: not a duration like 90s, 30m, 2h or 7d (given '2 hours')"),
        ('remind_every = "0s"', "defaults.remind_every: not a duration like 90s, 30m, 2h or 7d"),
        ('timeout = "1.5h"', "defaults.timeout: not a duration"),
        ("quorum = 0", "defaults.quorum: at least 1 (given 0)"),
        ('escalate_after = "1h"', "defaults.escalate_after: needs escalate_to"),
        ('approvers = ["U0ALICE"]\nquorum = 2', "defaults.quorum: 2 distinct approvers needed, 1 named"),
    ],
)
def test_a_malformed_limit_refuses_to_start_naming_the_key(tmp_path, text, problem):
    path = policy_path(tmp_path, f"[defaults]\n{text}\n")
    with pytest.raises(policy_file.PolicyError) as refused:
        policy_file.load(path)
    assert any(p.startswith(f"{path}: {problem}") for p in refused.value.problems), refused.value.problems


def test_a_duration_is_said_the_way_people_say_it():
    assert [policy_file.spoken(s) for s in (3, 90, 1800, 7200, 5400, 86_400 * 7)] == [
        "3s",
        "1m 30s",
        "30m",
        "2h",
        "1h 30m",
        "7d",
    ]
    assert expiry_message(7200) == "No decision within 2h; the call was not run. Do not retry unless asked."


# --- quorum -----------------------------------------------------------------------------------


async def test_quorum_two_distinct_approvers_and_the_same_person_counts_once(store):
    approval = await pending(store, action("send_email"), terms=Terms(quorum={0: 2}))

    first = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE)
    again = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE)
    assert (first.result, first.votes) == (DecisionResult.VOTED, 1)
    assert (again.result, again.votes) == (DecisionResult.VOTED_ALREADY, 1)
    assert await resume_decisions(store) == []

    second = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, BOB)
    late = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, CAROL)
    assert (second.result, second.votes) == (DecisionResult.COMPLETE, 2)
    assert late.result is DecisionResult.TAKEN
    assert await resume_decisions(store) == [[sent(APPROVE_DECISION)]]
    stored = await store.approvals.get(approval.approval_id)
    assert [v.user for v in stored.votes[0]] == [ALICE, BOB]


async def test_one_reject_decides_at_once_whatever_the_quorum(store):
    approval = await pending(store, action("send_email"), terms=Terms(quorum={0: 3}))
    await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE)

    verdict = await store.decisions.decide(approval.approval_id, 0, REJECT, BOB)

    assert verdict.result is DecisionResult.COMPLETE
    assert await resume_decisions(store) == [[sent(REJECT)]]


async def test_an_edit_is_a_proposal_that_needs_the_quorum_and_the_editor_counts_as_one(store):
    approval = await pending(store, action("send_email"), terms=Terms(quorum={0: 2}))
    await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE)  # of the agent's arguments

    proposed = await store.decisions.decide(approval.approval_id, 0, edit("b@acme.com"), BOB)
    assert (proposed.result, proposed.votes) == (DecisionResult.VOTED, 1)  # Alice's approval was of others
    stale = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE, seen=0)
    assert stale.result is DecisionResult.CHANGED  # her card showed the agent's arguments
    editor_again = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, BOB, seen=1)
    assert editor_again.result is DecisionResult.VOTED_ALREADY
    assert await resume_decisions(store) == []

    agreed = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE, seen=1)

    assert agreed.result is DecisionResult.COMPLETE
    assert await resume_decisions(store) == [[sent(edit("b@acme.com"))]]  # what runs is what they agreed on
    stored = await store.approvals.get(approval.approval_id)
    assert stored.decided[0].user == BOB and stored.decided[0].decision == sent(edit("b@acme.com"))


async def test_a_barred_requester_never_counts_towards_the_quorum(store):
    approval = await pending(store, action("send_email"), terms=Terms(quorum={0: 2}))
    barred = Gate(requester_cannot_decide=True)

    assert (
        await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, RILEY, barred)
    ).result is DecisionResult.REQUESTER
    assert (await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE, barred)).votes == 1
    assert (await store.approvals.get(approval.approval_id)).votes[0][0].user == ALICE


# --- expiry -------------------------------------------------------------------------------------


@dataclass
class FakeSlack:
    replies: list[tuple[str, str]] = field(default_factory=list)

    async def thread_reply(self, approval: Any, text: str, post_id: str, broadcast: bool = False) -> None:
        self.replies.append((post_id, text))


@dataclass
class FakeRouter:
    """The Slack side of the sweeper, recorded: what a deadline posts, not how."""

    slack: FakeSlack = field(default_factory=FakeSlack)
    notices: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    async def phone_line(self, approval: Any) -> str:
        return "Riley's agent wants to run send_email"

    def waiting_on(self, approval: Any) -> tuple[str, ...]:
        return (ALICE,)

    async def notify(self, approval: Any, text: str, post_id: str, ids: tuple[str, ...]) -> None:
        self.notices.append((post_id, text, ids))


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def sweeper(store: Store, clock: Clock, router: FakeRouter | None = None) -> DeadlineSweeper:
    return DeadlineSweeper(store, router or FakeRouter(), lease_ms=30_000, clock=clock)  # type: ignore[arg-type]


async def test_an_undecided_action_expires_rejected_and_a_decided_one_keeps_its_decision(store):
    start = await store.deadlines.time()  # (Redis's clock: the decide script checks limits on it)
    terms = Terms(expires_at={0: start + 7200, 1: start + 7200}, timeout={0: 7200, 1: 7200})
    approval = await pending(store, action("send_email"), action("issue_refund"), terms=terms)
    await store.decisions.decide(approval.approval_id, 1, APPROVE_DECISION, ALICE)
    clock = Clock(start + 7199)
    deadlines = sweeper(store, clock)

    assert await deadlines.sweep() == 0  # not yet
    clock.now = start + 7201
    assert await deadlines.sweep() == 2

    expired = {"type": "reject", "message": expiry_message(7200)}
    assert await resume_decisions(store) == [[expired, sent(APPROVE_DECISION)]]  # once, in order
    stored = await store.approvals.get(approval.approval_id)
    assert stored.status is ApprovalStatus.RESUMING
    assert stored.decided[0].outcome is Outcome.EXPIRED and stored.decided[1].user == ALICE
    late = await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, BOB)
    assert late.result is DecisionResult.TAKEN and late.first.outcome is Outcome.EXPIRED
    audit = [(e["outcome"], e["user"]) for e in await store.audit.entries()]
    assert audit == [("decided", ALICE), ("expired", "signoff")]
    assert await deadlines.sweep() == 0  # fired once, gone


async def test_an_action_that_allows_no_reject_is_told_through_respond(store):
    terms = Terms(expires_at={0: 1.0}, timeout={0: 60})
    approval = await pending(store, action("send_email", ("approve", "respond")), terms=terms)

    await sweeper(store, Clock(time.time())).sweep()

    assert await resume_decisions(store) == [[{"type": "respond", "message": expiry_message(60)}]]
    assert (await store.approvals.get(approval.approval_id)).status is ApprovalStatus.RESUMING


async def test_an_action_that_allows_neither_is_closed_unanswered_and_never_runs(store):
    terms = Terms(expires_at={0: 1.0}, timeout={0: 60})
    approval = await pending(store, action("send_email", ("approve",)), terms=terms)

    await sweeper(store, Clock(time.time())).sweep()

    assert await resume_decisions(store) == []
    stored = await store.approvals.get(approval.approval_id)
    assert stored.status is ApprovalStatus.EXPIRED
    assert approval.approval_id not in await store.approvals.pending_ids()
    assert (
        await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE)
    ).result is DecisionResult.NOT_PENDING


async def test_a_question_expires_only_when_its_rule_sets_a_timeout_then_answers_the_configured_text(
    store, tmp_path
):
    request = PendingRequest(interrupt_id=uuid.uuid4().hex, kind=RequestKind.QUESTION, question="Budget?")
    run = Run(thread_id="tq", graph="question", channel="C1", requester=RILEY)
    question, _ = await store.approvals.create(approval_for(request, run, "question"))
    silent = Permissions(policy_file.load(policy_path(tmp_path, '[defaults]\ntimeout = "1s"\n')))
    assert silent.terms(question).expires_at == {}  # [defaults] times tool calls, not questions

    asks = Permissions(
        policy_file.load(policy_path(tmp_path, '[questions]\ntimeout = "1s"\nanswer = "Use last year\'s."\n'))
    )
    await store.deadlines.set_terms(question, asks.terms(question))
    await store.redis.hset(
        store.keys.approval(question.approval_id), "card_ts", "1.000001"
    )  # its card is out
    await sweeper(store, Clock(time.time() + 2)).sweep()

    assert await resume_decisions(store) == [[{"answer": "Use last year's."}]]


async def test_an_expiry_racing_twenty_clicks_ends_in_exactly_one_outcome(store, redis_url):
    for _ in range(5):
        terms = Terms(expires_at={0: 1.0}, timeout={0: 60})
        approval = await pending(store, action("send_email"), terms=terms)
        clickers = [Store.from_url(redis_url, store.keys.prefix) for _ in range(4)]
        before = len(await resume_decisions(store))

        outcomes = await asyncio.gather(
            sweeper(store, Clock(time.time())).sweep(),
            *(
                clickers[n % 4].decisions.decide(approval.approval_id, 0, APPROVE_DECISION, f"U0P{n}")
                for n in range(20)
            ),
        )

        won = [v for v in outcomes[1:] if v.result is DecisionResult.COMPLETE]
        stored = await store.approvals.get(approval.approval_id)
        assert len(await resume_decisions(store)) == before + 1
        if stored.decided[0].outcome is Outcome.EXPIRED:
            assert won == []
        else:  # a click won: exactly one, and the expiry changed nothing
            assert len(won) == 1 and stored.decided[0].decision == sent(APPROVE_DECISION)
        entries = [e for e in await store.audit.entries() if e["approval_id"] == approval.approval_id]
        assert len(entries) == 1
        for clicker in clickers:
            await clicker.close()


# --- withdraw, escalation, reminders ----------------------------------------------------------------


async def test_the_requester_may_withdraw_and_nobody_else(store):
    approval = await pending(store, action("send_email"), action("issue_refund"))
    await store.decisions.decide(approval.approval_id, 1, APPROVE_DECISION, ALICE)

    other = await store.decisions.decide_for_people(
        approval.approval_id, Outcome.WITHDRAWN, "withdrawn", user=BOB
    )
    assert (other.result, other.requester) == (DecisionResult.NOT_REQUESTER, RILEY)
    assert await resume_decisions(store) == []

    mine = await store.decisions.decide_for_people(
        approval.approval_id, Outcome.WITHDRAWN, "withdrawn", user=RILEY
    )

    assert mine.result is DecisionResult.COMPLETE
    assert await resume_decisions(store) == [
        [{"type": "reject", "message": "withdrawn"}, sent(APPROVE_DECISION)]
    ]
    assert [e["outcome"] for e in await store.audit.entries()] == ["decided", "withdrawn"]


async def test_escalation_lets_the_escalation_group_decide(store, tmp_path):
    policy = Permissions(
        policy_file.load(
            policy_path(
                tmp_path,
                '[defaults]\napprovers = ["U0ALICE"]\nescalate_after = "2s"\nescalate_to = ["U0LEAD"]\n',
            )
        )
    )
    approval = await pending(store, action("send_email"))
    terms = policy.terms(approval)
    await store.deadlines.set_terms(approval, terms)
    assert (
        await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, LEAD, policy.gate(LEAD))
    ).result is (DecisionResult.NOT_APPROVER)
    router = FakeRouter()
    deadlines = sweeper(store, Clock(approval.created_at + 1), router)
    assert await deadlines.sweep() == 0
    deadlines.clock = Clock(approval.created_at + 2.5)

    assert await deadlines.sweep() == 1
    await deadlines.settle()

    assert router.notices == [(f"escalate:{approval.approval_id}:2", router.notices[0][1], (LEAD,))]
    assert "Escalated after 2s" in router.notices[0][1]
    assert (
        await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, LEAD, policy.gate(LEAD))
    ).result is (DecisionResult.COMPLETE)
    assert [e["outcome"] for e in await store.audit.entries()] == ["escalated", "decided"]


async def test_reminders_repeat_while_it_waits_and_stop_once_decided(store):
    approval = await pending(store, action("send_email"), terms=Terms(remind_every=60))
    router = FakeRouter()
    clock = Clock(approval.created_at + 61)
    deadlines = sweeper(store, clock, router)

    assert await deadlines.sweep() == 1
    assert await deadlines.sweep() == 0  # the next one is at two periods
    clock.now = approval.created_at + 125
    assert await deadlines.sweep() == 1
    await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE)
    clock.now = approval.created_at + 185
    await deadlines.sweep()
    await deadlines.settle()

    assert [(post_id, ids) for post_id, _, ids in router.notices] == [
        (f"remind:{approval.approval_id}:1", (ALICE,)),
        (f"remind:{approval.approval_id}:2", (ALICE,)),
    ]
    assert "Waiting 1m 1s for a decision" in router.notices[0][1]
    assert await store.deadlines.count() == 0


async def test_two_sweepers_fire_each_deadline_once(store, redis_url):
    approvals = [
        # (no requester: the expiry line is what the thread hears; with one, her outcome line is)
        await pending(
            store, action("send_email"), terms=Terms(expires_at={0: 1.0}, timeout={0: 60}), requester=None
        )
        for _ in range(30)
    ]
    other = Store.from_url(redis_url, store.keys.prefix)
    routers = [FakeRouter(), FakeRouter()]
    first, second = (
        sweeper(store, Clock(time.time()), routers[0]),
        sweeper(other, Clock(time.time()), routers[1]),
    )

    for _ in range(5):
        await asyncio.gather(first.sweep(), second.sweep())
    await asyncio.gather(first.settle(), second.settle())

    replies = [post_id for r in routers for post_id, _ in r.slack.replies]
    assert sorted(replies) == sorted(f"expired:{a.approval_id}:0" for a in approvals)
    assert len(await resume_decisions(store)) == 30
    await other.close()


async def test_the_home_tab_lists_an_approval_for_the_escalation_group_once_escalated_and_not_for_a_voter(
    store, tmp_path
):
    from bot.chatops import ChatOps

    policy = Permissions(
        policy_file.load(
            policy_path(
                tmp_path,
                '[defaults]\napprovers = ["U0ALICE", "U0BOB"]\nquorum = 2\n'
                'escalate_after = "1h"\nescalate_to = ["U0LEAD"]\n',
            )
        )
    )
    approval = await pending(store, action("send_email"))
    await store.deadlines.set_terms(approval, policy.terms(approval))
    waiting = await store.approvals.get(approval.approval_id)
    assert [ChatOps.may_decide(waiting, u, policy) for u in (ALICE, LEAD)] == [True, False]

    await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE, policy.gate(ALICE))
    await store.deadlines.escalate(approval.approval_id, 3600)
    later = await store.approvals.get(approval.approval_id)

    assert [ChatOps.may_decide(later, u, policy) for u in (ALICE, BOB, LEAD)] == [False, True, True]


async def test_a_batch_mixing_rules_escalates_each_rule_at_its_own_time_for_its_own_actions(store, tmp_path):
    policy = Permissions(
        policy_file.load(
            policy_path(
                tmp_path,
                '[defaults]\napprovers = ["U0ALICE"]\n'
                '[[rules]]\ntools = ["send_email"]\nescalate_after = "2s"\nescalate_to = ["U0LEAD"]\n'
                '[[rules]]\ntools = ["issue_refund"]\nescalate_after = "7d"\nescalate_to = ["U0BOSS"]\n'
                '[[rules]]\ntools = ["delete"]\nescalate_to = ["U0CAROL"]\n',  # never escalates
            )
        )
    )
    approval = await pending(store, action("send_email"), action("issue_refund"), action("delete"))
    await store.deadlines.set_terms(approval, policy.terms(approval))
    router = FakeRouter()

    deadlines = sweeper(store, Clock(approval.created_at + 3), router)
    await deadlines.sweep()
    await deadlines.settle()

    assert [ids for _, _, ids in router.notices] == [(LEAD,)]  # not the refund's escalation, 7 days early
    results = [
        (
            await store.decisions.decide(approval.approval_id, i, APPROVE_DECISION, who, policy.gate(who))
        ).result
        for i, who in ((1, "U0BOSS"), (2, CAROL), (0, LEAD))
    ]
    assert results == [DecisionResult.NOT_APPROVER, DecisionResult.NOT_APPROVER, DecisionResult.RECORDED]


async def test_terms_are_set_once_whichever_replica_delivers_the_card(store):
    approval = await pending(store, action("send_email"))

    assert await store.deadlines.set_terms(approval, Terms(quorum={0: 2}))
    assert not await store.deadlines.set_terms(
        approval, Terms(quorum={0: 5})
    )  # a second delivery changes nothing

    assert (await store.approvals.get(approval.approval_id)).quorum(0) == 2


async def test_after_an_approval_closed_unanswered_a_withdraw_changes_nothing(store):
    approval = await pending(store, action("send_email", ("approve",)), terms=Terms(expires_at={0: 1.0}))
    await sweeper(store, Clock(time.time())).sweep()

    again = await store.decisions.decide_for_people(
        approval.approval_id, Outcome.WITHDRAWN, "withdrawn", user=RILEY
    )

    assert again.result is DecisionResult.NOT_PENDING
    assert await resume_decisions(store) == []


async def test_a_question_is_not_withdrawn_and_an_answer_that_does_not_fit_is_never_sent(store):
    request = PendingRequest(
        interrupt_id=uuid.uuid4().hex,
        kind=RequestKind.QUESTION,
        question="Budget?",
        answer_schema={
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"],
        },
    )
    run = Run(thread_id="tq2", graph="question", channel="C1", requester=RILEY)
    question, _ = await store.approvals.create(approval_for(request, run, "question"))
    await store.deadlines.set_terms(
        question, Terms(expires_at={0: 1.0}, timeout={0: 60}, question_answer="no one said")
    )
    await card_is_out(store, question.approval_id)
    router = FakeRouter()

    withdrawn = await store.decisions.decide_for_people(
        question.approval_id, Outcome.WITHDRAWN, "withdrawn", user=RILEY
    )
    deadlines = sweeper(store, Clock(time.time()), router)
    await deadlines.sweep()
    await deadlines.settle()

    assert withdrawn.result is DecisionResult.NOT_ALLOWED
    assert await resume_decisions(store) == []
    assert (await store.approvals.get(question.approval_id)).status is ApprovalStatus.PENDING
    assert "does not fit the form it asks for" in router.slack.replies[0][1]


async def test_an_expiry_notice_that_failed_is_posted_when_the_deadline_comes_again(store):
    approval = await pending(  # (no requester: the expiry line is what the thread hears)
        store, action("send_email"), terms=Terms(expires_at={0: 1.0}, timeout={0: 60}), requester=None
    )

    class Failing(FakeSlack):
        async def thread_reply(self, approval: Any, text: str, post_id: str, broadcast: bool = False) -> None:
            raise RuntimeError("Slack answered 500")

    router = FakeRouter(slack=Failing())
    clock = Clock(time.time())
    deadlines = sweeper(store, clock, router)
    await deadlines.sweep()  # recorded; the notice failed: it comes back in 5 s
    await deadlines.settle()
    deadlines.router = FakeRouter()
    clock.now += 6

    assert await deadlines.sweep() == 1
    await deadlines.settle()

    assert [post_id for post_id, _ in deadlines.router.slack.replies] == [f"expired:{approval.approval_id}:0"]
    assert len(await resume_decisions(store)) == 1


def test_a_click_names_the_proposal_its_card_showed():
    from bot.clicks import Click
    from bot.payloads import BlockActions

    def click(block_id: str | None) -> Click:
        payload = BlockActions.model_validate(
            {
                "type": "block_actions",
                "user": {"id": ALICE},
                "actions": [{"action_id": "approve:0", "block_id": block_id, "value": "a1:0"}],
            }
        )
        return Click.of(payload, "a1:0")

    assert [click(b).seen for b in ("decide:0:r3", "action:17:r0", "decide:all", "decide:0", None)] == [
        3,
        0,
        0,  # "Approve all" is only offered while no edit is proposed
        None,
        None,
    ]


async def test_who_may_still_approve_leaves_out_voters_and_a_barred_requester(store, tmp_path):
    from bot.routing import Router

    class NoSlack:
        card_view = None

    policy = Permissions(
        policy_file.load(
            policy_path(
                tmp_path,
                '[defaults]\napprovers = ["U0ALICE", "U0BOB", "U0RILEY"]\nrequester_may_approve = false\n'
                'quorum = 2\nescalate_after = "1h"\nescalate_to = ["U0LEAD"]\n',
            )
        )
    )
    router = Router(NoSlack(), policy)  # type: ignore[arg-type]
    approval = await pending(store, action("send_email"))
    await store.deadlines.set_terms(approval, policy.terms(approval))
    await store.decisions.decide(approval.approval_id, 0, APPROVE_DECISION, ALICE, policy.gate(ALICE))

    assert router.waiting_on(await store.approvals.get(approval.approval_id)) == (BOB,)
    await store.deadlines.escalate(approval.approval_id, 3600)
    assert router.waiting_on(await store.approvals.get(approval.approval_id)) == (BOB, LEAD)


async def test_a_sweep_takes_no_more_deadlines_than_its_batch_whatever_the_partitions(store):
    start = 1_000_000.0
    for _ in range(6):  # each its own thread: spread over the partitions there are
        terms = Terms(expires_at={0: start + 60}, timeout={0: 60})
        await pending(store, action("send_email"), terms=terms, created=start)

    taken = await store.deadlines.take(30_000, count=4, now=start + 61)
    more = await store.deadlines.take(30_000, count=4, now=start + 61)

    assert len(taken) == 4 and len(more) == 2  # the rest, on the next sweep; none taken twice
    assert not {item for item, _ in taken} & {item for item, _ in more}


async def test_a_click_after_the_limit_expires_the_action_itself_even_opening_a_form(store):
    approval = await pending(
        store, action("send_email"), action("issue_refund"), terms=Terms(expires_at={0: 1.0}, timeout={0: 60})
    )

    opening = await store.decisions.check(approval.approval_id, 0, "edit", ALICE)
    other = await store.decisions.decide(
        approval.approval_id, 1, APPROVE_DECISION, ALICE
    )  # no limit: decided as asked

    assert opening.result is DecisionResult.TAKEN and opening.first.outcome is Outcome.EXPIRED
    assert other.result is DecisionResult.COMPLETE
    assert await resume_decisions(store) == [
        [{"type": "reject", "message": expiry_message(60)}, sent(APPROVE_DECISION)]
    ]
    assert [(e["outcome"], e["user"]) for e in await store.audit.entries()] == [
        ("expired", "signoff"),
        ("decided", ALICE),
    ]


async def test_a_withdrawal_after_the_limit_records_the_expiry_it_is(store):
    approval = await pending(store, action("send_email"), terms=Terms(expires_at={0: 1.0}, timeout={0: 60}))

    verdict = await store.decisions.decide_for_people(
        approval.approval_id, Outcome.WITHDRAWN, "withdrawn", user=RILEY
    )

    assert verdict.result is DecisionResult.COMPLETE
    assert (await store.approvals.get(approval.approval_id)).decided[0].outcome is Outcome.EXPIRED
    assert await resume_decisions(store) == [[{"type": "reject", "message": expiry_message(60)}]]


async def test_a_deadline_due_before_its_card_waits_for_it_then_counts_from_when_it_is_visible(store):
    start = await store.deadlines.time()
    terms = Terms(expires_at={0: start + 2}, timeout={0: 2}, remind_every=3)
    approval = await pending(store, action("send_email"), terms=terms, card=False)

    assert await sweeper(store, Clock(start + 10)).sweep() == 2  # due, but no card is out: it waits
    assert (
        await resume_decisions(store) == []
        and (await store.approvals.get(approval.approval_id)).decided == {}
    )
    shown = await store.deadlines.time()
    await store.cards.set(approval, "1.000002")

    record = await store.approvals.get(approval.approval_id)
    assert record.shown_at is not None and abs(record.shown_at - shown) < 1
    assert record.expires(0) == pytest.approx(record.shown_at + 2)
    due = dict(
        await store.redis.zrange(
            store.keys.of_approval(approval.approval_id).deadlines, 0, -1, withscores=True
        )
    )
    assert due[f"expire:{approval.approval_id}:0"] == pytest.approx((record.shown_at + 2) * 1000, abs=5)
    assert due[f"remind:{approval.approval_id}"] == pytest.approx((record.shown_at + 3) * 1000, abs=5)
    assert await sweeper(store, Clock(record.shown_at + 2.5)).sweep() == 1  # the expiry, from the card
    assert [d["type"] for d in (await resume_decisions(store))[0]] == ["reject"]
