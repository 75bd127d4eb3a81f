"""Bolt listeners: authorise, check, record, ack; everything else after the ack.

The app runs with `process_before_response=True`, so Slack gets its answer
when a listener returns. An Approve click costs one Redis round trip before
that: the decide script checks that the approval exists and is pending, the
action exists and is undecided, the decision type is allowed for it and the
clicker may decide it, and records the decision, all in one atomic step.
Who may decide comes from memory (group members are fetched in the
background), never from a Slack call on this path. Opening a modal runs the
same checks without writing. Modal submissions load the record too, to check
edited arguments with the protocol. views.open, card refreshes and thread
replies run after the ack. A refusal is an ephemeral message (or an inline
modal error) and changes nothing.

A batch of any size is decided from Slack: Approve all / Reject all… record
each undecided action on its own, through the same decide script, and say
what happened in one card refresh and one thread line. The review modal
(`bot.modals.review_modal`) shows every action a page at a time; a click in
it carries the view (`Shown`), and is answered there: the page is redrawn
from the record (views.update, with the click's hash; on `hash_conflict` it
is read again and redrawn unconditionally, and one process redraws a view
at a time), a refusal is a line at its top, and a form is pushed over it
(views.push: views.open from inside a modal shows nothing).

Slack gives the whole round trip 3 s. Everything before the ack shares a
budget (`ack_budget_s`, 2 s by default): when Redis is too slow to answer
within it, the bot acks anyway and tells the person the truth ("still
recording; the card will show the result"), then finishes when Redis answers,
instead of letting Slack show an error for a decision that may well be
recorded.

What the listeners share and do after the ack is `bot.service`; what a click says,
`bot.clicks`; what a person is told when nothing changed, `bot.refusals`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp

from bot import modals
from bot.card_words import LABELS
from bot.cards import parse_value
from bot.clicks import Click, Shown, answering, parse_form_metadata
from bot.payloads import INPUT_MAX, BlockActions, ViewSubmission
from bot.refusals import FORM_TOO_LATE, WITHDRAWN, refusal_text
from bot.service import DecisionService
from bot.text import cut
from bot.trust import grant_after, granted_line, revoke, revoked_line
from core.grants import Grant
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
from core.records import Approval, ApprovalStatus, DecisionResult, Outcome, Verdict

log = get_logger("bot")


def decision_from_form(
    approval: Approval, index: int, kind: str, values: dict[str, str | None]
) -> PersonDecision | dict[str, str]:
    """The decision a modal submission makes, checked by the protocol (typed); or inline errors
    (block id -> what to fix)."""
    first_block = next(iter(values), "value")
    raw: dict[str, Any]
    errors: dict[str, str] = {}
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


async def approve(service: DecisionService, ack: Any, click: Click) -> None:
    """Approve: one Redis round trip (checks and write), then the ack; the rest after."""
    decision = Approve()
    result = await service.budget().within(
        service.decide(click.approval_id, click.index, decision, click.user, team=click.team, seen=click.seen)
    )
    await ack()
    where = (click.approval_id, click.index, decision, click.user, click.channel, click.shown)
    if isinstance(result, asyncio.Task):
        log.warning("ack_budget_spent")
        service.later(service.recorded_late(result, *where), "late")
    else:
        service.later(service.answered(result, *where), "after_decision")


async def approve_and_trust(service: DecisionService, ack: Any, click: Click) -> None:
    """Approve & trust: the approval (one round trip) and, when it decided the call, the grant
    (one more), then the ack; the rest after (`bot.trust`)."""
    decision, policy = Approve(), service.permissions.rules

    async def both() -> tuple[Verdict, tuple[Grant | None, str]]:
        verdict = await service.decide(
            click.approval_id, click.index, decision, click.user, team=click.team, seen=click.seen
        )
        if verdict.result not in (DecisionResult.RECORDED, DecisionResult.COMPLETE):
            return verdict, (None, "")
        return verdict, await grant_after(service.store, policy, click.approval_id, click.index, click.user)

    result = await service.budget().within(both())
    await ack()
    if isinstance(result, asyncio.Task):
        log.warning("ack_budget_spent", trust=True)
    service.later(_trusted(service, result, click, decision), "after_decision")


async def _trusted(
    service: DecisionService,
    result: tuple[Verdict, tuple[Grant | None, str]] | asyncio.Task[tuple[Verdict, tuple[Grant | None, str]]],
    click: Click,
    decision: Approve,
) -> None:
    verdict, (grant, why) = result if isinstance(result, tuple) else await result
    await service.answered(
        verdict, click.approval_id, click.index, decision, click.user, click.channel, click.shown
    )
    approval = await service.store.approvals.get(click.approval_id)
    if approval is None:
        return
    if grant is not None:
        await service.slack.thread_reply(
            approval, granted_line(grant), f"trust:{click.approval_id}:{click.index}"
        )
    elif verdict.result is DecisionResult.VOTED:
        await service.tell(
            click.approval_id,
            click.user,
            "No trust was granted yet: trust is granted by the approval that completes the ones needed.",
            click.channel,
        )
    elif why:
        await service.tell(click.approval_id, click.user, why, click.channel)


async def open_form(service: DecisionService, ack: Any, click: Click, kind: str) -> None:
    """Edit, Reject, Respond, Answer: the same checks without a write, then the modal."""
    result = await service.budget().within(service.check(click.approval_id, click.index, kind, click.user))
    await ack()
    if isinstance(result, asyncio.Task):  # nothing was written; the trigger is stale by now
        log.warning("ack_budget_spent", check_only=True)
        result.cancel()
        late = FORM_TOO_LATE.format(label=LABELS.get(kind, "Answer"))
        service.later(
            service.say_to(click.shown, click.approval_id, click.user, click.channel, late), "too_late"
        )
        return
    refusal = refusal_text(result, kind)
    if refusal:
        service.later(
            service.refused(
                result, click.approval_id, click.index, kind, click.user, click.channel, click.shown
            ),
            "refusal",
        )
    else:
        service.later(open_for(service, click, kind), "views_open")


async def _revoked(service: DecisionService, user: str, grant_id: str | None, channel: str | None) -> None:
    """A Revoke button of `/signoff trust`: the grant gone, the person and its run's thread told."""
    grant, said = await revoke(service.store, service.permissions, grant_id or "", user)
    if channel:
        await service.slack.ephemeral(channel, user, said)
    approval = await service.store.approvals.get(grant.approval_id) if grant else None
    if grant is not None and approval is not None:
        await service.slack.thread_reply(approval, revoked_line(grant, user), f"revoked:{grant.id}")


def open_for(service: DecisionService, click: Click, kind: str) -> Coroutine[Any, Any, None]:
    """The modal a click asks for: pushed over the review modal it came from, else opened."""
    return service.open_modal(
        click.approval_id, click.index, kind, click.trigger_id, click.user, click.channel, click.shown
    )


async def decide_all(service: DecisionService, ack: Any, click: Click, decision: PersonDecision) -> None:
    """Approve all / Reject all: each undecided action recorded on its own (the last one
    completes the set and queues the one resume), within the same ack budget."""

    async def each() -> list[tuple[int, Verdict]]:
        approval = await service.store.approvals.get(click.approval_id)
        if approval is None:
            return [(0, Verdict(DecisionResult.MISSING))]
        undecided = [i for i in range(len(approval.request.actions)) if i not in approval.decided]
        return [
            (
                i,
                await service.decide(
                    click.approval_id, i, decision, click.user, team=click.team, seen=click.seen
                ),
            )
            for i in undecided
        ]

    result = await service.budget().within(each())
    await ack()
    if isinstance(result, asyncio.Task):
        log.warning("ack_budget_spent", together=True)
        service.later(service.all_answered(result, click, decision), "late")
    else:
        service.later(service.all_answered(result, click, decision), "after_decision")


async def view_args(service: DecisionService, ack: Any, click: Click) -> None:
    await ack()
    service.later(open_for(service, click, "view_args"), "views_open")


def form_problem(approval: Approval, index: int, kind: str, values: dict[str, str | None]) -> dict[str, str]:
    """Inline errors for a submission that cannot apply to this approval, or is too long."""
    first_block = next(iter(values), "value")
    question = approval.request.kind is RequestKind.QUESTION
    if question != (kind == "answer") or not (question or 0 <= index < len(approval.request.actions)):
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
        decision = decision_from_form(approval, index, kind, values)
        if isinstance(decision, dict):  # what to fix, said on the form's fields
            await ack(response_action="errors", errors=decision)
            return
        result = await budget.within(service.decide(approval_id, index, decision, user, team=payload.team_id))
        await ack()  # the form closes; if it was pushed over a review page, that page shows again
        under = payload.view.previous_view_id
        shown = Shown(under, modals.review_start(index, approval.size)) if under else None
        where = (approval_id, index, decision, user, approval.channel, shown)
        with structlog.contextvars.bound_contextvars(
            thread_id=approval.thread_id, interrupt_id=approval.interrupt_id
        ):
            if isinstance(result, asyncio.Task):
                log.warning("ack_budget_spent")
                service.later(service.recorded_late(result, *where), "late")
            else:
                service.later(service.answered(result, *where), "after_decision")


def register(app: AsyncApp, service: DecisionService) -> None:
    """One small listener per action_id / callback_id, as bolt-python's examples do.

    Each reads its request's typed model (`context["payload"]`, see `bot.payloads`).
    """
    _register_decisions(app, service)
    _register_confirmations(app, service)
    _register_trust(app, service)
    _register_navigation(app, service)
    _register_forms(app, service)


def clicked(context: dict[str, Any], value: str | None = None) -> Click:
    """The click a button's (or a menu's, with the chosen `value`) request carries; the work
    after its ack answers it (`answering`: the card changes through its response_url)."""
    payload: BlockActions = context["payload"]
    click = Click.of(payload, payload.action.value if value is None else value)
    answering.set(click.reply)
    return click


def _register_decisions(app: AsyncApp, service: DecisionService) -> None:
    """The card's decision buttons, Approve all / Reject all, and Withdraw."""

    @app.action(re.compile(r"^approve(:\d+)?$"))
    async def on_approve(ack, context) -> None:
        click = clicked(context)
        with structlog.contextvars.bound_contextvars(
            approval_id=click.approval_id, slack_user=click.user, action="approve"
        ):
            if click.sure:  # a destructive tool: the clicker checked, then a dialog confirms
                await confirm_first(service, ack, click, "approve")
            else:
                await approve(service, ack, click)

    @app.action(re.compile(r"^edit(:\d+)?$"))
    async def on_edit(ack, context) -> None:
        await open_form(service, ack, clicked(context), "edit")

    @app.action(re.compile(r"^reject(:\d+)?$"))
    async def on_reject(ack, context) -> None:
        await open_form(service, ack, clicked(context), "reject")

    @app.action(re.compile(r"^respond(:\d+)?$"))
    async def on_respond(ack, context) -> None:
        await open_form(service, ack, clicked(context), "respond")

    @app.action(re.compile(r"^answer(:\d+)?$"))
    async def on_answer(ack, context) -> None:
        await open_form(service, ack, clicked(context), "answer")

    @app.action("approve_all")
    async def on_approve_all(ack, context) -> None:
        await confirm_first(service, ack, clicked(context), "approve_all")

    @app.action("reject_all")
    async def on_reject_all(ack, context) -> None:
        click = clicked(context)
        await ack()
        service.later(open_for(service, click, "reject_all"), "views_open")

    @app.action("withdraw")
    async def on_withdraw(ack, context) -> None:
        await confirm_first(service, ack, clicked(context), "withdraw")


def _register_confirmations(app: AsyncApp, service: DecisionService) -> None:
    """The dialogs Signoff opens to confirm a click once the clicker may (`confirm_first`)."""

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
            payload.user.id,
            None,
            approval_id,
            index,
            "",
            payload.team_id,
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


async def withdraw(service: DecisionService, ack: Any, click: Click) -> None:
    """Withdraw, confirmed by the requester: every undecided action rejected for people."""
    result = await service.budget().within(
        service.store.decisions.decide_for_people(
            click.approval_id, Outcome.WITHDRAWN, WITHDRAWN, user=click.user, team=click.team
        )
    )
    await ack()
    service.later(service.withdrawn(result, click), "withdrawn")


async def confirm_first(service: DecisionService, ack: Any, click: Click, what: str) -> None:
    """A click to confirm (a destructive Approve, Approve & trust, Approve all, Withdraw): the
    clicker is checked first, without a write, so a person who may not do it is told so before
    any dialog; then Signoff opens the dialog (`sure:<what>`), whose submission does it."""

    async def check() -> Verdict:
        if what == "withdraw":
            approval = await service.store.approvals.get(click.approval_id)
            if approval is None:
                return Verdict(DecisionResult.MISSING)
            if approval.status is not ApprovalStatus.PENDING:
                return Verdict(DecisionResult.NOT_PENDING)
            if approval.requester != click.user:
                return Verdict(DecisionResult.NOT_REQUESTER, requester=approval.requester or "")
            return Verdict(DecisionResult.ALLOWED)
        index = click.index
        if what == "approve_all":  # the first undecided action says whether they may
            approval = await service.store.approvals.get(click.approval_id)
            undecided = [i for i in range(approval.size) if i not in approval.decided] if approval else []
            index = undecided[0] if undecided else 0
        return await service.check(click.approval_id, index, "approve", click.user)

    result = await service.budget().within(check())
    await ack()
    if isinstance(result, asyncio.Task):  # nothing was written; the trigger is stale by now
        result.cancel()
        late = FORM_TOO_LATE.format(label=LABELS.get(what, "the button"))
        service.later(
            service.say_to(click.shown, click.approval_id, click.user, click.channel, late), "too_late"
        )
        return
    kind = "withdraw" if what == "withdraw" else "approve"
    if refusal_text(result, kind):
        service.later(
            service.refused(
                result, click.approval_id, click.index, kind, click.user, click.channel, click.shown
            ),
            "refusal",
        )
        return
    revision = f":r{click.seen}" if click.seen is not None and what != "withdraw" else ""
    service.later(open_for(service, click, f"sure:{what}{revision}"), "views_open")


def _register_trust(app: AsyncApp, service: DecisionService) -> None:
    """Approve & trust on a card, and Revoke in `/signoff trust`'s list (`bot.trust`)."""

    @app.action(re.compile(r"^trust(:\d+)?$"))
    async def on_trust(ack, context) -> None:
        click = clicked(context)
        with structlog.contextvars.bound_contextvars(
            approval_id=click.approval_id, slack_user=click.user, action="trust"
        ):
            await confirm_first(service, ack, click, "trust")

    @app.action("trust_revoke")
    async def on_revoke(ack, context) -> None:
        payload: BlockActions = context["payload"]
        await ack()
        service.later(_revoked(service, payload.user.id, payload.action.value, payload.channel_id), "revoke")


def _register_navigation(app: AsyncApp, service: DecisionService) -> None:
    """What shows more without deciding: the review modal and its pages, a call's arguments,
    and a large batch's menu of choices."""

    @app.action("review")
    async def on_review(ack, context) -> None:
        """ "Review all N actions": the batch a page at a time, every action with its choices."""
        click = clicked(context)
        await ack()
        service.later(open_for(service, click, "review"), "views_open")

    @app.action(re.compile(r"^page:\d{1,4}$"))
    async def on_page(ack, context) -> None:
        """◀ / ▶ in the review modal: the page its button names."""
        click = clicked(context)
        await ack()
        if click.shown is None:  # not from a review page of this approval
            service.refuse(click, "Signoff could not read this click; nothing changed.")
            return
        service.later(
            service.show_review(replace(click.shown, start=click.index), click.approval_id), "views_update"
        )

    @app.action(re.compile(r"^view_args(:\d+)?$"))
    async def on_view_args(ack, context) -> None:
        await view_args(service, ack, clicked(context))

    @app.action("details")
    async def on_details(ack, context) -> None:
        """The card's Details: graph, thread and ids, in a modal."""
        click = clicked(context)
        await ack()
        service.later(open_for(service, click, "details"), "views_open")

    @app.action(re.compile(r"^choose(:\d+)?$"))
    async def on_choose(ack, context) -> None:
        """A large batch's overflow menu: `<kind>:<approval id>:<index>`."""
        payload: BlockActions = context["payload"]
        chosen = payload.action.selected_option
        kind, _, value = (chosen.value if chosen else "").partition(":")
        click = clicked(context, value)
        if kind == "approve" and click.sure:  # a destructive tool: checked, then confirmed
            await confirm_first(service, ack, click, "approve")
        elif kind == "approve":
            await approve(service, ack, click)
        elif kind == "view_args":
            await view_args(service, ack, click)
        elif kind in LABELS or kind == "answer":
            await open_form(service, ack, click, kind)
        else:
            await ack()
            service.refuse(click, "Signoff could not read this choice; nothing changed.")


def _register_forms(app: AsyncApp, service: DecisionService) -> None:
    """The forms' submissions (edit, reject, reject all, respond, answer) and their closing."""

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
        click = Click(payload.user.id, None, approval_id, index, "", payload.team_id, reply=reply)
        decision = Reject(message=reason or None)
        await decide_all(service, ack, click, decision)

    @app.view("respond")
    async def on_respond_submitted(ack, context) -> None:
        await submitted(service, ack, context["payload"], "respond")

    @app.view("answer")
    async def on_answer_submitted(ack, context) -> None:
        await submitted(service, ack, context["payload"], "answer")

    @app.view_closed(re.compile(".*"))
    async def on_closed(ack) -> None:
        await ack()
