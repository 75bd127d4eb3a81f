"""Bolt listeners: authorise, check, record, ack; everything else after the ack.

The app runs with `process_before_response=True`, so Slack gets its answer
when a listener returns. An Approve click costs one Redis round trip before
that: the decide script checks that the approval exists and is pending, the
action exists and is undecided, the decision type is allowed for it and the
clicker may decide it, and records the decision, all in one atomic step.
Opening a modal runs the same checks without writing. Modal submissions load
the record too, to check edited arguments with the protocol. views.open,
chat.update and thread replies run as background tasks after the ack. A
refusal is an ephemeral message (or an inline modal error) and changes nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp

from agent_runner.logs import get_logger
from agent_runner.protocol import DecisionRefused, RequestKind, check_answer, check_decision
from agent_runner.store import Approval, DecisionResult, Gate, Store, Verdict
from bot import modals
from bot.cards import DONE, LABELS, cut, escape, parse_value, when
from bot.policy import Policy
from bot.slack_io import SlackIO

log = get_logger("bot")

MODALS = {"edit": modals.edit_modal, "reject": modals.reject_modal, "respond": modals.respond_modal}


def refusal_text(verdict: Verdict, kind: str) -> str | None:
    """What to tell the person whose decision was not taken; None when it was (or may be)."""
    tool = f"`{escape(verdict.tool)}`" if verdict.tool else "this question"
    match verdict.result:
        case DecisionResult.RECORDED | DecisionResult.COMPLETE | DecisionResult.ALLOWED:
            return None
        case DecisionResult.TAKEN if verdict.first is not None:
            verb = DONE.get(verdict.first.decision.get("type", ""), ("", "Answered"))[1]
            return f"Already decided: {verb.lower()} by <@{verdict.first.user}> {when(verdict.first.at)}. Nothing changed."
        case DecisionResult.NOT_PENDING:
            return "This approval is closed already. Nothing changed."
        case DecisionResult.NOT_ALLOWED:
            allowed = ", ".join(LABELS.get(k, k) for k in verdict.allowed)
            return f"{LABELS.get(kind, kind)} is not allowed for {tool} (allowed: {allowed})."
        case DecisionResult.REQUESTER:
            return "You started this run, so someone else has to decide its approvals."
        case DecisionResult.NOT_APPROVER:
            return f"You are not on the approver list for {tool}."
        case DecisionResult.NO_ACTION:
            return "That action is not part of this approval."
        case _:
            return "This approval no longer exists."


class ApprovalBot:
    """What the listeners share: the store, Slack I/O and the policy."""

    def __init__(self, store: Store, slack: SlackIO, policy: Policy):
        self.store = store
        self.slack = slack
        self.policy = policy
        self._tasks: set[asyncio.Task[Any]] = set()

    def later(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        """Run Slack I/O after the ack; failures are logged, decisions are already safe."""
        task = asyncio.create_task(work)
        self._tasks.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception():
                log.error("after_ack_failed", what=what, error=repr(finished.exception()))

        task.add_done_callback(done)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def gate(self, user: str) -> Gate | None:
        try:
            return await self.policy.gate(user)
        except Exception as exc:  # Slack could not list a group: refuse, change nothing
            log.warning("approver_groups_unavailable", error=repr(exc))
            return None

    async def decide(self, approval_id: str, index: int, decision: dict[str, Any], user: str,
                     check_only: bool = False) -> tuple[Verdict | None, str | None]:
        """(verdict, refusal text) for one decision; a None verdict means the policy was unavailable."""
        gate = await self.gate(user)
        if gate is None:
            return None, "Signoff could not check the approver groups just now; try again in a moment."
        verdict = await self.store.decide(approval_id, index, decision, user, gate, check_only=check_only)
        return verdict, refusal_text(verdict, str(decision.get("type", "answer")))

    async def after_decision(self, approval_id: str, index: int, decision: dict[str, Any], user: str) -> None:
        """Update the card and thread once a decision is recorded."""
        approval = await self.slack.refresh_card(approval_id)
        if approval is None:
            return
        name = escape(approval.request.actions[index].name) if approval.request.actions else ""
        if decision.get("type") == "reject" and decision.get("message"):
            await self.slack.thread_reply(approval, f"❌ <@{user}> rejected `{name}`: {escape(decision['message'])}")
        elif decision.get("type") == "respond":
            await self.slack.thread_reply(approval, f"💬 <@{user}> answered for `{name}`: {escape(decision['message'])}")
        elif "answer" in decision:
            await self.slack.thread_reply(approval, f"💬 <@{user}> answered: {escape(cut(str(decision['answer']), 2_000))}")

    async def tell(self, approval_id: str, user: str, text: str, channel: str | None) -> None:
        approval = await self.store.approval(approval_id)
        target = approval.channel if approval else channel
        if target:
            await self.slack.ephemeral(target, user, text, approval.card_ts if approval else None)

    async def open_modal(self, approval_id: str, index: int, kind: str, trigger_id: str) -> None:
        approval = await self.store.approval(approval_id)
        if approval is None:
            return
        if kind == "view_args":
            view = modals.args_modal(approval, index)
        elif kind == "answer":
            view = modals.answer_modal(approval)
        else:
            view = MODALS[kind](approval, index)
        await self.slack.client.views_open(trigger_id=trigger_id, view=view)


def checked(approval: Approval, index: int, kind: str, values: dict[str, str | None]) -> tuple[
        dict[str, Any], dict[str, str]]:
    """The decision a modal submission makes, checked by the protocol; or inline errors."""
    first_block = next(iter(values), "value")
    errors: dict[str, str] = {}
    if kind == "edit":
        decision, errors = modals.parse_edit(approval.request.actions[index], values)
    elif kind == "reject":
        decision = modals.parse_reject(values)
    elif kind == "respond":
        decision, errors = modals.parse_respond(values)
    else:
        schema = approval.request.answer_schema or {}
        decision = {"answer": modals.parse_answer(values, bool(schema) and schema.get("type") != "string")}
    if errors:
        return decision, errors
    try:
        if approval.request.kind is RequestKind.QUESTION:
            check_answer(approval.request, decision["answer"])
        else:
            check_decision(approval.request.actions[index], decision)
    except DecisionRefused as refused:
        errors[first_block] = cut(str(refused), 150)
    return decision, errors


def _channel(body: dict[str, Any]) -> str | None:
    return (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")


def register(app: AsyncApp, bot: ApprovalBot) -> None:
    """Attach the listeners: one per action_id / callback_id."""

    async def click(ack, body, kind: str, value: str) -> None:
        user = body["user"]["id"]
        approval_id, index = parse_value(value)
        with structlog.contextvars.bound_contextvars(approval_id=approval_id, slack_user=user, action=kind):
            if kind == "view_args":
                await ack()
                bot.later(bot.open_modal(approval_id, index, kind, body["trigger_id"]), "views_open")
                return
            decision = {"type": kind} if kind != "answer" else {"answer": None}
            verdict, refusal = await bot.decide(approval_id, index, decision, user, check_only=kind != "approve")
            await ack()
            if refusal:
                log.info("click_refused", reason=refusal)
                bot.later(bot.tell(approval_id, user, refusal, _channel(body)), "refusal")
            elif kind == "approve":
                log.info("decision", result=verdict.result.value, index=index, tool=verdict.tool)
                bot.later(bot.after_decision(approval_id, index, decision, user), "after_decision")
            else:
                bot.later(bot.open_modal(approval_id, index, kind, body["trigger_id"]), "views_open")

    async def on_button(ack, body) -> None:
        action = body["actions"][0]
        await click(ack, body, action["action_id"].split(":", 1)[0], action["value"])

    async def on_choose(ack, body) -> None:
        kind, _, value = body["actions"][0]["selected_option"]["value"].partition(":")
        await click(ack, body, kind, value)

    async def on_submit(ack, body, view) -> None:
        kind = view["callback_id"]
        user = body["user"]["id"]
        approval_id, index = parse_value(view["private_metadata"])
        values = modals.values_of(view["state"])
        first_block = next(iter(values), "value")
        with structlog.contextvars.bound_contextvars(approval_id=approval_id, slack_user=user, action=kind):
            approval = await bot.store.approval(approval_id)
            if approval is None:
                await ack(response_action="errors", errors={first_block: "This approval no longer exists."})
                return
            decision, errors = checked(approval, index, kind, values)
            if errors:
                await ack(response_action="errors", errors=errors)
                return
            verdict, refusal = await bot.decide(approval_id, index, decision, user)
            await ack()
            if refusal:
                log.info("submission_refused", reason=refusal)
                bot.later(bot.tell(approval_id, user, refusal, approval.channel), "refusal")
                return
            log.info("decision", result=verdict.result.value, index=index, tool=verdict.tool,
                     thread_id=approval.thread_id, interrupt_id=approval.interrupt_id)
            bot.later(bot.after_decision(approval_id, index, decision, user), "after_decision")

    async def just_ack(ack) -> None:
        await ack()

    app.action(re.compile(r"^(approve|edit|reject|respond|answer|view_args)(:\d+)?$"))(on_button)
    app.action(re.compile(r"^choose(:\d+)?$"))(on_choose)
    for callback_id in ("edit", "reject", "respond", "answer"):
        app.view(callback_id)(on_submit)
    app.view_closed(re.compile(".*"))(just_ack)
