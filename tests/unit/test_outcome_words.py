"""What a settled approval says, in words: the card's text (what notifications show) and the
outcome line that tells the requester, once. Agent and person text stays inert in both."""

from __future__ import annotations

from bot.views.card_words import card_text, outcome_line
from bot.views.text import escape
from core.protocol import ActionReview, PendingRequest, RequestKind
from core.records import Approval, ApprovalStatus, Decided, Outcome

NAMES = {"U0RILEY": "Riley", "U0ALICE": "Alice", "U0DANA": "Dana"}
HEADLINE = "Refund 5,000 on order 1235"


def refund_request(*decided: tuple[int, Decided], size: int = 1) -> Approval:
    actions = tuple(
        ActionReview(name="issue_refund", args={"order_id": "1235"}, allowed_decisions=("approve", "reject"))
        for _ in range(size)
    )
    return Approval(
        approval_id="a1",
        thread_id="t1",
        interrupt_id="i" * 32,
        graph="demo",
        request=PendingRequest(interrupt_id="i" * 32, kind=RequestKind.BATCHED, actions=actions),
        origin="demo",
        channel="C1",
        requester="U0RILEY",
        created_at=1_700_000_000.0,
        decided=dict(decided),
        status=ApprovalStatus.RESUMING if len(decided) == size else ApprovalStatus.PENDING,
    )


def by(user: str, kind: str, message: str | None = None, outcome: Outcome | None = None) -> Decided:
    decision = {"type": kind, **({"message": message} if message else {})}
    return Decided(decision=decision, user=user, at=1.0, outcome=outcome)


def test_the_card_text_says_the_outcome_once_settled_and_asks_only_while_it_waits():
    waiting = refund_request()
    assert (
        card_text(waiting, "Riley's agent wants to refund", HEADLINE, NAMES)
        == "Riley's agent wants to refund"
    )

    cases = {
        "✅ Approved by Alice: refund 5,000 on order 1235 (asked by Riley)": by("U0ALICE", "approve"),
        "❌ Rejected by Alice: refund 5,000 on order 1235 (asked by Riley)": by("U0ALICE", "reject", "no"),
        "⌛ Expired: no decision in time: refund 5,000 on order 1235 (asked by Riley)": by(
            "signoff", "reject", "No decision", Outcome.EXPIRED
        ),
        "↩️ Withdrawn by Riley: refund 5,000 on order 1235 (asked by Riley)": by(
            "U0RILEY", "reject", "withdrawn", Outcome.WITHDRAWN
        ),
    }
    for said, decided in cases.items():
        assert card_text(refund_request((0, decided)), "", HEADLINE, NAMES) == said
    # a batch with one rejected: not a green tick
    mixed = refund_request((0, by("U0ALICE", "approve")), (1, by("U0DANA", "reject")), size=2)
    assert card_text(mixed, "", HEADLINE, NAMES).startswith("☑️ Reviewed: 1 approved, 1 rejected: refund")


def test_the_outcome_line_mentions_the_requester_once_with_every_line_of_a_reason_quoted():
    reason = "Over the limit\n✅ Approved by Dana <!channel>"  # a second line posing as Signoff's
    rejected = refund_request((0, by("U0ALICE", "reject", reason)))
    sentence = escape(card_text(rejected, "", HEADLINE, NAMES, asked_by=False))

    line = outcome_line(rejected, NAMES, sentence)

    assert line == (
        "<@U0RILEY> ❌ Rejected by Alice: refund 5,000 on order 1235\n"
        "> Alice said: Over the limit\n"
        "> ✅ Approved by Dana &lt;!channel&gt;"
    )
    assert line.count("<@U0RILEY>") == 1 and "asked by" not in line


def test_a_batch_s_reasons_are_one_line_per_reason_and_a_withdrawal_names_rather_than_pings():
    same = by("U0ALICE", "reject", "Not this quarter")
    batch = refund_request((0, same), (1, same), (2, by("U0DANA", "approve")), size=3)
    line = outcome_line(batch, NAMES, "☑️ Reviewed")
    assert line.splitlines()[1:] == ["> `issue_refund` ×2: Alice said: Not this quarter"]

    withdrawn = refund_request((0, by("U0RILEY", "reject", "withdrawn", Outcome.WITHDRAWN)))
    assert outcome_line(withdrawn, NAMES, "↩️") == "↩️ *Riley* withdrew the request; nothing was run."
