"""Modal submissions: the edit, reject, respond and answer forms, the confirm dialogs, a batch's
reject-all reason; each checked (the protocol, the form's limits) before the decide script, an
invalid one refused inline on its field."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp

from bot.chatops import ChatOps
from bot.clicks import Click, Decision, Shown, answering, parse_form_metadata
from bot.listeners.actions import approve, approve_and_trust, decide_all, withdraw
from bot.payloads import INPUT_MAX, ViewSubmission
from bot.service import DecisionService
from bot.views import elicitation, modals
from bot.views.cards import parse_value
from bot.views.text import cut
from core.logs import get_logger
from core.protocol import (
    Answer,
    Approve,
    DecisionRefused,
    PersonDecision,
    Reject,
    RequestKind,
    check_answer,
    check_decision,
)
from core.records import Approval

log = get_logger("bot")


def register(app: AsyncApp, service: DecisionService, chat: ChatOps) -> None:
    """Each listener reads its request's typed model (`context["payload"]`, see `bot.payloads`).

    Long: one small listener per action_id or callback_id, each a few lines, registered where it
    is defined (Bolt's template): split up, the registration would hide which one answers what."""

    @app.view(re.compile(r"^sure:(approve|trust|approve_all|withdraw)(:r\d{1,6})?$"))
    async def on_confirmed(ack, context) -> None:
        payload: ViewSubmission = context["payload"]
        value, reply = parse_form_metadata(payload.view.private_metadata)
        answering.set(reply)  # the click that opened the dialog: the card changes through it
        approval_id, index = parse_value(value)
        # the proposal the card showed when the person tapped: an edit proposed since is refused
        what, _, seen = payload.view.callback_id.removeprefix("sure:").partition(":r")
        under = payload.view.previous_view_id  # pushed over a review page: that page is redrawn
        shown = Shown(under, modals.review_start(index, index + 1)) if under else None
        click = Click(
            user=payload.user.id,
            channel=None,
            approval_id=approval_id,
            index=index,
            trigger_id="",
            team=payload.team_id,
            seen=int(seen) if seen else None,
            shown=shown,
            reply=reply,
        )
        with structlog.contextvars.bound_contextvars(
            approval_id=approval_id, slack_user=click.user, action=what
        ):
            if what == "approve":
                await approve(service, ack, click)
            elif what == "trust":
                await approve_and_trust(service, ack, click)
            elif what == "approve_all":
                await decide_all(service, ack, click, Approve())
            else:
                await withdraw(service, ack, click)

    @app.view("edit")
    async def on_edit_submitted(ack, context) -> None:
        await submitted(service, ack, context["payload"], "edit")

    @app.view("reject")
    async def on_reject_submitted(ack, context) -> None:
        await submitted(service, ack, context["payload"], "reject")

    @app.view("reject_all")
    async def on_reject_all_submitted(ack, context) -> None:
        payload: ViewSubmission = context["payload"]
        values = payload.values()
        reason = (values.get("reason") or "").strip()
        if len(reason) > INPUT_MAX:
            await ack(
                response_action="errors",
                errors={"reason": f"At most {INPUT_MAX:,} characters ({len(reason):,} given)."},
            )
            return
        value, reply = parse_form_metadata(payload.view.private_metadata)
        answering.set(reply)
        approval_id, index = parse_value(value)
        click = Click(
            user=payload.user.id,
            channel=None,
            approval_id=approval_id,
            index=index,
            trigger_id="",
            team=payload.team_id,
            reply=reply,
        )
        decision = Reject(message=reason or None)
        await decide_all(service, ack, click, decision)

    @app.view("respond")
    async def on_respond_submitted(ack, context) -> None:
        await submitted(service, ack, context["payload"], "respond")

    @app.view("answer")
    async def on_answer_submitted(ack, context) -> None:
        await submitted(service, ack, context["payload"], "answer")

    @app.view("elicit")
    async def on_elicit_submitted(ack, context) -> None:
        """An MCP server's form: typed values, checked against its schema, else errors inline."""
        await submitted(service, ack, context["payload"], "elicit")

    @app.view_closed(re.compile(".*"))
    async def on_closed(ack) -> None:
        await ack()


def decision_from_form(
    approval: Approval,
    index: int,
    kind: str,
    values: dict[str, str | None],
    inputs: dict[str, dict[str, Any]] | None = None,
) -> PersonDecision | dict[str, str]:
    """The decision a modal submission makes, checked by the protocol (typed); or inline errors
    (block id -> what to fix). `inputs`: each input's whole state (an MCP server's form)."""
    first_block = next(iter(values), "value")
    raw: dict[str, Any]
    errors: dict[str, str] = {}
    if kind == "elicit":
        return elicitation.read_answer(approval, inputs or {})
    if kind == "edit":
        raw, errors = modals.parse_edit(approval.request.actions[index], values)
    elif kind == "reject":
        raw = modals.parse_reject(values)
    elif kind == "respond":
        raw, errors = modals.parse_respond(values)
    else:
        schema = approval.request.answer_schema or {}
        answer = modals.parse_answer(values, bool(schema) and schema.get("type") != "string")
        raw = {"answer": answer}
    if errors:
        return errors
    try:
        if approval.request.kind is RequestKind.QUESTION:
            check_answer(approval.request, raw["answer"])
            return Answer(answer=raw["answer"])
        return check_decision(approval.request.actions[index], raw)
    except DecisionRefused as refused:
        return {first_block: cut(str(refused), 150)}


def form_problem(approval: Approval, index: int, kind: str, values: dict[str, str | None]) -> dict[str, str]:
    """Inline errors for a submission that cannot apply to this approval, or is too long."""
    first_block = next(iter(values), "value")
    question = approval.request.kind is RequestKind.QUESTION
    asked = approval.request.kind is RequestKind.ELICITATION
    if (
        question != (kind == "answer")
        or asked != (kind == "elicit")
        or (asked and elicitation.not_acceptable(approval.request) is not None)
        or not (question or asked or 0 <= index < len(approval.request.actions))
    ):
        return {first_block: "This form does not match the approval any more; nothing was recorded."}
    return {
        block: f"At most {INPUT_MAX:,} characters ({len(text):,} given)."
        for block, text in values.items()
        if text is not None and len(text) > INPUT_MAX
    }


async def submitted(service: DecisionService, ack: Any, payload: ViewSubmission, kind: str) -> None:
    """A modal's decision: checked by the protocol (inline errors), recorded, then the ack."""
    budget = service.budget()
    user = payload.user.id
    value, reply = parse_form_metadata(payload.view.private_metadata)
    answering.set(reply)  # the click that opened the form: the card changes through it
    approval_id, index = parse_value(value)
    values = payload.values()
    first_block = next(iter(values), "value")
    with structlog.contextvars.bound_contextvars(approval_id=approval_id, slack_user=user, action=kind):
        approval = await budget.within(service.store.approvals.get(approval_id))
        if isinstance(approval, asyncio.Task):
            approval.cancel()
            await ack(
                response_action="errors",
                errors={
                    first_block: "Signoff is slow to answer right now; nothing was recorded. Submit again in a moment."
                },
            )
            return
        if approval is None:
            await ack(response_action="errors", errors={first_block: "This approval no longer exists."})
            return
        errors = form_problem(approval, index, kind, values)
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        decision = decision_from_form(approval, index, kind, values, payload.inputs())
        if isinstance(decision, dict):  # what to fix, said on the form's fields
            await ack(response_action="errors", errors=decision)
            return
        result = await budget.within(
            service.decide(approval_id, index, decision, user, team=payload.team_id, approval=approval)
        )
        await ack()  # the form closes; if it was pushed over a review page, that page shows again
        under = payload.view.previous_view_id
        shown = Shown(under, modals.review_start(index, approval.size)) if under else None
        made = Decision(
            approval_id=approval_id,
            index=index,
            decision=decision,
            user=user,
            channel=approval.channel,
            shown=shown,
        )
        with structlog.contextvars.bound_contextvars(
            thread_id=approval.thread_id, interrupt_id=approval.interrupt_id
        ):
            if isinstance(result, asyncio.Task):
                log.warning("ack_budget_spent")
                service.later(service.recorded_late(result, made), "late")
            else:
                service.later(service.answered(result, made), "after_decision")
