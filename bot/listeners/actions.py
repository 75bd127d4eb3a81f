"""Button and menu clicks: one small listener per action_id, as bolt-python's examples do; the
first line acks (or the decide script's round trip, then the ack). A card's decisions, Approve
all / Reject all, Withdraw, Approve & trust and Revoke, the review modal's pages, Retry, and link
buttons."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from bot.chatops import ChatOps
from bot.clicks import Click, Decision, answering
from bot.granted import trusted_after
from bot.payloads import BlockActions
from bot.service import DecisionService
from bot.trust import grant_after, revoke
from bot.views import previews
from bot.views.card_words import LABELS
from bot.views.elicitation import done_answers
from bot.views.home import passkey_link_view
from bot.views.refusals import FORM_TOO_LATE, WITHDRAWN, refusal_text
from bot.views.trust import revoked_line
from core.elicitation import ElicitAction
from core.grants import Grant
from core.logs import get_logger
from core.producer import continue_run
from core.protocol import (
    Approve,
    Elicited,
    PersonDecision,
    RequestKind,
)
from core.records import ApprovalStatus, DecisionResult, Outcome, Verdict

log = get_logger("bot")


def register(app: AsyncApp, service: DecisionService, chat: ChatOps) -> None:
    """Each listener reads its request's typed model (`context["payload"]`, see `bot.payloads`).

    Long: one small listener per action_id or callback_id, each a few lines, registered where it
    is defined (Bolt's template): split up, the registration would hide which one answers what."""

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

    @app.action("elicit_accept")
    async def on_elicit_accept(ack, context) -> None:
        """An MCP server's questions: Answer… opens the form built from their schemas."""
        await open_form(service, ack, clicked(context), "elicit")

    @app.action(re.compile(r"^elicit_(done|decline|cancel)$"))
    async def on_elicit(ack, context) -> None:
        """Done (a round of URLs, accepted), Decline, Cancel the call: one tap decides the round."""
        payload: BlockActions = context["payload"]
        action = ELICIT_ACTIONS[payload.action.action_id]
        await elicit(service, ack, clicked(context), Elicited(action=action))

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

    # A modal a button opens, after the ack: View the whole change (what the call will do, a page
    # at a time), Show secret values (the clicker checked and audited before it opens), Details.
    for pattern, kind in (
        (r"^preview(:\d+)?$", "preview"),
        (r"^reveal:\d+$", "reveal"),
        ("^details$", "details"),
    ):
        app.action(re.compile(pattern))(opens_after_ack(service, kind))

    @app.action(re.compile(r"^preview_page:\d{1,5}$"))
    async def on_preview_page(ack, context) -> None:
        """◀ / ▶ in View the whole change: the page its button names, in the same view."""
        payload: BlockActions = context["payload"]
        click = clicked(context)
        await ack()
        view = payload.view
        if view is None or not view.id or view.callback_id != "preview":
            service.refuse(click, "Signoff could not read this click; nothing changed.")
            return
        page = int(payload.action.action_id.partition(":")[2])
        service.later(preview_page(service, view.id, click, page), "views_update")

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

    service = chat.service

    async def on_retry(ack, context) -> None:
        await ack()
        payload: BlockActions = context["payload"]
        user, channel = payload.user.id, payload.channel_id
        thread_id = payload.action.value or ""
        run = await chat.store.runs.get(thread_id) if thread_id else None
        if channel is None:
            return
        refusal = await chat.start_refusal(user, channel, run.graph) if run else "This run no longer exists."
        if refusal is None and not await chat.store.runs.claim_retry(thread_id):
            refusal = "This run is not failed (any more): someone retried it already."
        if refusal:
            service.later(service.slack.ephemeral(channel, user, refusal), "refusal")
            return
        await continue_run(chat.store, thread_id)
        message = payload.container.message_ts
        if message:
            note = f"{payload.message.text if payload.message else ''}\n↻ Retried by <@{user}>"
            service.later(
                service.slack.client.chat_update(channel=channel, ts=message, text=note, blocks=[]),
                "retry_note",
            )

    @app.action("passkey_link")
    async def on_passkey_link(ack, context) -> None:
        """The Home tab's Passkeys: a modal with the person's one-time link to the passkey page."""
        payload: BlockActions = context["payload"]
        await ack()
        service.later(_passkey_link(service, payload.user.id, payload.trigger_id), "views_open")

    async def on_open(ack) -> None:
        await ack()  # a link button: Slack opens the URL, the bot only acks

    app.action("retry")(on_retry)
    app.action(re.compile(r"^open:"))(on_open)


async def approve(service: DecisionService, ack: Any, click: Click) -> None:
    """Approve: one Redis round trip (checks and write), then the ack; the rest after."""
    decision = Approve()
    result = await service.budget().within(
        service.decide(click.approval_id, click.index, decision, click.user, team=click.team, seen=click.seen)
    )
    await ack()
    made = Decision.of(click, decision)
    if isinstance(result, asyncio.Task):
        log.warning("ack_budget_spent")
        service.later(service.recorded_late(result, made), "late")
    else:
        service.later(service.answered(result, made), "after_decision")


ELICIT_ACTIONS: dict[str, ElicitAction] = {
    "elicit_done": "accept",
    "elicit_decline": "decline",
    "elicit_cancel": "cancel",
}


async def elicit(service: DecisionService, ack: Any, click: Click, decision: Elicited) -> None:
    """Done, Decline or Cancel the call on an MCP server's round: its one decision (one round
    trip), then the ack. Done answers only a round of URLs, all linked (a form needs Answer…)."""

    async def decided() -> Verdict | str:
        if decision.action == "accept":
            approval = await service.store.approvals.get(click.approval_id)
            if approval is None:
                return Verdict(DecisionResult.MISSING)
            if approval.request.kind is not RequestKind.ELICITATION or not done_answers(approval.request):
                return "This question needs its form: use Answer…. Nothing changed."
        return await service.decide(click.approval_id, 0, decision, click.user, team=click.team)

    result = await service.budget().within(decided())
    await ack()
    if isinstance(result, str):
        service.refuse(click, result)
        return
    made = Decision.of(click, decision)
    if isinstance(result, asyncio.Task):
        log.warning("ack_budget_spent")
        service.later(service.recorded_late(result, made), "late")  # type: ignore[arg-type]
    else:
        service.later(service.answered(result, made), "after_decision")


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
    service.later(trusted_after(service, result, click, decision), "after_decision")


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


async def preview_page(service: DecisionService, view_id: str, click: Click, page: int) -> None:
    """◀ / ▶ in **View the whole change**: the page the button names, from the record, in place."""
    approval = await service.store.approvals.get(click.approval_id)
    if approval is None or not 0 <= click.index < len(approval.request.actions):
        return
    try:
        view = previews.preview_modal(approval, click.index, page)
        await service.slack.prompt.views_update(view_id=view_id, view=view)
    except SlackApiError as exc:  # closed meanwhile
        log.info("preview_not_paged", error=exc.response.get("error"), view_id=view_id)


def opens_after_ack(service: DecisionService, kind: str) -> Callable[[Any, Any], Coroutine[Any, Any, None]]:
    """A listener that acks a click, then opens the modal of `kind` for it."""

    async def on_click(ack: Any, context: Any) -> None:
        click = clicked(context)
        await ack()
        service.later(open_for(service, click, kind), "views_open")

    return on_click


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
    if kind == "approve" and result.result in (DecisionResult.ALLOWED, DecisionResult.STEP_UP):
        service.later(confirm_or_step_up(service, click, what, result), "views_open")
        return
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


async def confirm_or_step_up(service: DecisionService, click: Click, what: str, result: Verdict) -> None:
    """The dialog confirming an Approve, Approve & trust or Approve all; or, when the call needs a
    passkey (`step_up`; for Approve & trust, `step_up_trust`; for Approve all, any action's), the
    clicker's one-time link to approve with it instead."""
    approval = await service.store.approvals.get(click.approval_id)
    terms = approval.terms if approval is not None else None
    indexes, needed = [click.index], result.result is DecisionResult.STEP_UP
    if approval is not None and terms is not None and what == "approve_all":
        indexes = [i for i in range(approval.size) if i not in approval.decided]
        needed = needed or any(i in terms.step_up for i in indexes)
    elif terms is not None and what == "trust":
        needed = needed or click.index in terms.step_up_trust
    if needed:
        said = await service.links.step_up(click.approval_id, indexes, what, click.user)
        await service.say_to(click.shown, click.approval_id, click.user, click.channel, said)
        return
    revision = f":r{click.seen}" if click.seen is not None else ""
    await open_for(service, click, f"sure:{what}{revision}")


async def _passkey_link(service: DecisionService, user: str, trigger_id: str) -> None:
    view = passkey_link_view(await service.links.enrol(user))
    await service.slack.prompt.views_open(trigger_id=trigger_id, view=view)


def clicked(context: dict[str, Any], value: str | None = None) -> Click:
    """The click a button's (or a menu's, with the chosen `value`) request carries; the work
    after its ack answers it (`answering`: the card changes through its response_url)."""
    payload: BlockActions = context["payload"]
    click = Click.of(payload, payload.action.value if value is None else value)
    answering.set(click.reply)
    return click
