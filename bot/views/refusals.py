"""What a person is told when a decision is not taken (and the notes that say a decision is late
or a form could not open): refusals people understand, each saying that nothing changed."""

from __future__ import annotations

from bot.views.card_words import DONE, LABELS, approvers_line, when
from bot.views.text import escape
from core.records import DecisionResult, Outcome, Verdict

STILL_RECORDING = (
    "⏳ Still recording your decision: Signoff's storage is slow right now. The card will show the result."
)


FORM_TOO_LATE = (
    "Slack could not open the form in time (it was busy), so nothing changed. Click {label} once more."
)


WITHDRAWN = "Withdrawn by the requester; the call was not run. Do not retry unless asked."


NOT_CONFIRMED = (
    "Signoff could not confirm your decision just now. The card shows what was recorded: "
    "if it still waits for you, try again."
)

NOT_REVEALED = (
    "Only someone who may approve this call, while it waits, can see its secret values "
    "(and only where the policy says `reveal = true`). Nothing was shown."
)


def refusal_text(verdict: Verdict, kind: str, approvers: tuple[str, ...] = ()) -> str | None:
    """What to tell the person whose decision was not taken; None when it was (or may be)."""
    tool = f"`{escape(verdict.tool)}`" if verdict.tool else "this question"
    match verdict.result:
        case (
            DecisionResult.RECORDED
            | DecisionResult.COMPLETE
            | DecisionResult.ALLOWED
            | DecisionResult.VOTED
            | DecisionResult.UNANSWERABLE  # closed, told nothing: it allows neither reject nor respond
        ):
            return None
        case DecisionResult.TAKEN if verdict.first is not None and verdict.first.outcome is Outcome.EXPIRED:
            return f"This request expired {when(verdict.first.at)} and was not run. Nothing changed."
        case DecisionResult.TAKEN if verdict.first is not None and verdict.first.outcome is Outcome.WITHDRAWN:
            return f"The requester withdrew this request {when(verdict.first.at)}. Nothing changed."
        case DecisionResult.TAKEN if verdict.first is not None:
            verb = DONE.get(verdict.first.decision.get("type", ""), ("", "Answered"))[1]
            who = f"<@{verdict.first.user}> {when(verdict.first.at)}"
            return f"Already decided: {verb.lower()} by {who}. Nothing changed."
        case DecisionResult.NOT_PENDING:
            return "This approval is closed already. Nothing changed."
        case DecisionResult.NOT_ALLOWED:
            allowed = ", ".join(LABELS.get(k, k) for k in verdict.allowed)
            return f"{LABELS.get(kind, kind)} is not allowed for {tool} (allowed: {allowed})."
        case DecisionResult.REQUESTER:
            return "You started this run, so someone else has to decide its approvals."
        case DecisionResult.NOT_APPROVER:
            who = approvers_line(approvers)
            return f"You are not on the approver list for {tool}." + (f" {who}." if who else "")
        case DecisionResult.GROUPS_UNKNOWN:
            return "Signoff could not check the approver groups just now; nothing changed. Try again in a moment."
        case DecisionResult.NO_ACTION:
            return "That action is not part of this approval."
        case DecisionResult.VOTED_ALREADY:
            return (
                f"Your approval of {tool} counts already ({verdict.votes} so far): another approver "
                "has to add theirs. Nothing changed."
            )
        case DecisionResult.CHANGED:
            return (
                f"The arguments of {tool} were edited since your card was drawn. Read them on the "
                "card, and approve again if you agree. Nothing changed."
            )
        case DecisionResult.POLICY_CHANGED:  # (asked again with the policy of now: never left so)
            return "Signoff's policy changed while this card waited; nothing changed. Try again."
        case DecisionResult.STEP_UP if kind == "edit":
            return f"An edit would run {tool}, which needs a passkey to approve: Approve or Reject it. Nothing changed."
        case DecisionResult.STEP_UP:  # (an Approve is told its link: `DecisionService.refused`)
            return f"Approving {tool} needs your passkey: click Approve on its own for your link. Nothing changed."
        case DecisionResult.NOT_REQUESTER:
            return f"Only <@{verdict.requester}>, who asked, may withdraw this request. Nothing changed."
        case _:
            return "This approval no longer exists."
