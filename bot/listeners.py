"""Bolt listeners: authorise, check, record, ack; everything else after the ack.

The app runs with `process_before_response=True`, so Slack gets its answer
when a listener returns. A click costs one Redis round trip (the Lua script
that records the decision) before that; views.open, chat.update and thread
replies run as background tasks right after. Every payload is checked on the
server: the approval exists and is pending, the action index is valid, the
decision type is allowed for that action, the clicker is authorised, and the
decision passes the protocol's check. A refusal is an ephemeral message and
changes nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp

from agent_runner.logs import get_logger
from agent_runner.protocol import DecisionRefused, RequestKind, check_answer, check_decision
from agent_runner.store import Approval, ApprovalStatus, DecisionResult, Decided, Store
from bot import modals
from bot.cards import DONE, LABELS, cut, escape, parse_value, when
from bot.policy import Policy
from bot.slack_io import SlackIO

log = get_logger("bot")

MODALS = {"edit": modals.edit_modal, "reject": modals.reject_modal, "respond": modals.respond_modal}


class ApprovalBot:
    """What the listeners share: the store, Slack I/O, the policy, a record cache."""

    def __init__(self, store: Store, slack: SlackIO, policy: Policy, cache_size: int = 10_000):
        self.store = store
        self.slack = slack
        self.policy = policy
        self._cache: OrderedDict[str, Approval] = OrderedDict()
        self._cache_size = cache_size
        self._tasks: set[asyncio.Task[Any]] = set()

    async def approval(self, approval_id: str) -> Approval | None:
        """The record's fixed part (request, channel, requester) is cached per process;
        its status and decisions are always checked by the Lua script in Redis."""
        if approval_id in self._cache:
            self._cache.move_to_end(approval_id)
            return self._cache[approval_id]
        found = await self.store.approval(approval_id)
        if found is not None:
            self._cache[approval_id] = found
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return found

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

    async def refusal(self, approval: Approval | None, index: int, kind: str, user: str) -> str | None:
        if approval is None:
            return "This approval no longer exists."
        actions = approval.request.actions
        if kind == "answer":
            if approval.request.kind is not RequestKind.QUESTION or index != 0:
                return "This card does not ask a question."
        elif not 0 <= index < len(actions):
            return "That action is not part of this approval."
        elif kind not in actions[index].allowed_decisions:
            allowed = ", ".join(LABELS[k] for k in actions[index].allowed_decisions)
            return f"{LABELS.get(kind, kind)} is not allowed for `{escape(actions[index].name)}` (allowed: {allowed})."
        return await self.policy.refusal(user, approval, index)

    async def record(self, approval: Approval, index: int, decision: dict[str, Any], user: str) -> tuple[
            DecisionResult, Decided | None]:
        """Check one decision with the protocol, then record it atomically.

        A complete set is exactly one checked decision per action, in request
        order, so checking each decision for its own action checks the set; the
        runner checks the assembled set once more before LangGraph sees it.
        """
        actions = approval.request.actions
        if approval.request.kind is RequestKind.QUESTION:
            check_answer(approval.request, decision["answer"])
            original = None
        else:
            check_decision(actions[index], decision)
            original = actions[index].args
        return await self.store.decide(approval, index, decision, user, original_args=original)

    async def after_decision(self, approval: Approval, index: int, decision: dict[str, Any], user: str,
                             result: DecisionResult, first: Decided | None) -> None:
        if result is DecisionResult.TAKEN and first is not None:
            kind = first.decision.get("type", "answer")
            verb = DONE.get(kind, ("", "Answered"))[1]
            await self.slack.ephemeral(approval.channel, user,
                                       f"Already decided: {verb.lower()} by <@{first.user}> {when(first.at)}. "
                                       "Nothing changed.", approval.card_ts)
            return
        if result in (DecisionResult.NOT_PENDING, DecisionResult.MISSING):
            await self.slack.ephemeral(approval.channel, user,
                                       "This approval is closed already. Nothing changed.", approval.card_ts)
            return
        await self.slack.refresh_card(approval.approval_id)
        fresh = await self.store.approval(approval.approval_id) or approval
        name = escape(approval.request.actions[index].name) if approval.request.actions else "the question"
        if decision.get("type") == "reject" and decision.get("message"):
            await self.slack.thread_reply(fresh, f"❌ <@{user}> rejected `{name}`: {escape(decision['message'])}")
        elif decision.get("type") == "respond":
            await self.slack.thread_reply(fresh, f"💬 <@{user}> answered for `{name}`: {escape(decision['message'])}")
        elif "answer" in decision:
            await self.slack.thread_reply(fresh, f"💬 <@{user}> answered: {escape(cut(str(decision['answer']), 2_000))}")

    async def explain(self, approval: Approval | None, user: str, text: str, channel: str | None) -> None:
        target = approval.channel if approval else channel
        if target:
            await self.slack.ephemeral(target, user, text, approval.card_ts if approval else None)


def _channel(body: dict[str, Any]) -> str | None:
    return (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")


def register(app: AsyncApp, bot: ApprovalBot) -> None:
    """Attach the listeners: one per action_id / callback_id."""

    async def decide_now(ack, body, kind: str, value: str) -> None:
        user = body["user"]["id"]
        approval_id, index = parse_value(value)
        with structlog.contextvars.bound_contextvars(approval_id=approval_id, slack_user=user, action=kind):
            approval = await bot.approval(approval_id)
            refusal = await bot.refusal(approval, index, kind, user)
            if refusal:
                await ack()
                log.info("click_refused", reason=refusal)
                bot.later(bot.explain(approval, user, refusal, _channel(body)), "refusal")
                return
            decision = {"type": kind}
            result, first = await bot.record(approval, index, decision, user)
            await ack()
            log.info("decision", result=result.value, index=index, thread_id=approval.thread_id,
                     interrupt_id=approval.interrupt_id)
            bot.later(bot.after_decision(approval, index, decision, user, result, first), "after_decision")

    async def open_modal(ack, body, kind: str, value: str) -> None:
        user = body["user"]["id"]
        approval_id, index = parse_value(value)
        with structlog.contextvars.bound_contextvars(approval_id=approval_id, slack_user=user, action=kind):
            approval = await bot.approval(approval_id)
            refusal = await bot.refusal(approval, index, kind, user)
            if refusal is None:
                refusal = await _closed(bot.store, approval, index)
            await ack()
            if refusal:
                log.info("click_refused", reason=refusal)
                bot.later(bot.explain(approval, user, refusal, _channel(body)), "refusal")
                return
            view = modals.answer_modal(approval) if kind == "answer" else MODALS[kind](approval, index)
            bot.later(bot.slack.client.views_open(trigger_id=body["trigger_id"], view=view), "views_open")

    async def on_button(ack, body) -> None:
        action = body["actions"][0]
        kind = action["action_id"].split(":", 1)[0]
        if kind == "approve":
            await decide_now(ack, body, kind, action["value"])
        else:
            await open_modal(ack, body, kind, action["value"])

    async def on_choose(ack, body) -> None:
        kind, _, value = body["actions"][0]["selected_option"]["value"].partition(":")
        if kind == "view_args":
            await show_args(ack, body, value)
        elif kind == "approve":
            await decide_now(ack, body, kind, value)
        else:
            await open_modal(ack, body, kind, value)

    async def show_args(ack, body, value: str) -> None:
        await ack()
        approval_id, index = parse_value(value)
        approval = await bot.approval(approval_id)
        if approval is None or not 0 <= index < len(approval.request.actions):
            return
        bot.later(bot.slack.client.views_open(trigger_id=body["trigger_id"],
                                              view=modals.args_modal(approval, index)), "views_open")

    async def on_view_args(ack, body) -> None:
        await show_args(ack, body, body["actions"][0]["value"])

    async def on_submit(ack, body, view) -> None:
        kind = view["callback_id"]
        user = body["user"]["id"]
        approval_id, index = parse_value(view["private_metadata"])
        values = modals.values_of(view["state"])
        with structlog.contextvars.bound_contextvars(approval_id=approval_id, slack_user=user, action=kind):
            approval = await bot.approval(approval_id)
            first_block = next(iter(values), "value")
            refusal = await bot.refusal(approval, index, kind, user)
            if refusal:
                await ack(response_action="errors", errors={first_block: cut(refusal, 150)})
                return
            errors: dict[str, str] = {}
            if kind == "edit":
                decision, errors = modals.parse_edit(approval.request.actions[index], values)
            elif kind == "reject":
                decision = modals.parse_reject(values)
            elif kind == "respond":
                decision, errors = modals.parse_respond(values)
            else:
                expects_json = bool(approval.request.answer_schema) and \
                    approval.request.answer_schema.get("type") != "string"
                decision = {"answer": modals.parse_answer(values, expects_json)}
            if errors:
                await ack(response_action="errors", errors=errors)
                return
            try:
                result, first = await bot.record(approval, index, decision, user)
            except DecisionRefused as refused:
                await ack(response_action="errors", errors={first_block: cut(str(refused), 150)})
                return
            await ack()
            log.info("decision", result=result.value, index=index, thread_id=approval.thread_id,
                     interrupt_id=approval.interrupt_id)
            bot.later(bot.after_decision(approval, index, decision, user, result, first), "after_decision")

    app.action(re.compile(r"^(approve|edit|reject|respond|answer)(:\d+)?$"))(on_button)
    app.action(re.compile(r"^choose(:\d+)?$"))(on_choose)
    app.action(re.compile(r"^view_args(:\d+)?$"))(on_view_args)
    for callback_id in ("edit", "reject", "respond", "answer"):
        app.view(callback_id)(on_submit)

    async def closed_view(ack) -> None:
        await ack()

    app.view_closed(re.compile(".*"))(closed_view)


async def _closed(store: Store, approval: Approval, index: int) -> str | None:
    """Why a modal should not open: the action or the approval is decided already."""
    async with store.redis.pipeline(transaction=False) as pipe:
        pipe.hget(store.keys.approval(approval.approval_id), "status")
        pipe.hget(store.keys.decisions(approval.approval_id), str(index))
        status, decided = await pipe.execute()
    if decided:
        first = Decided.model_validate_json(decided)
        verb = DONE.get(first.decision.get("type", ""), ("", "Answered"))[1]
        return f"Already decided: {verb.lower()} by <@{first.user}> {when(first.at)}. Nothing changed."
    if status != ApprovalStatus.PENDING.value:
        return "This approval is closed already. Nothing changed."
    return None
