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
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import structlog
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from agent_runner import metrics
from agent_runner.logs import get_logger
from agent_runner.protocol import Answer, DecisionRefused, RequestKind, check_answer, check_decision
from agent_runner.records import Approval, DecisionResult, Outcome, Verdict
from agent_runner.store import Store
from bot import modals
from bot.card_words import DONE, LABELS, approvers_line, tally, when, withdrawal_line
from bot.cards import parse_value
from bot.payloads import INPUT_MAX, BlockActions, ViewSubmission
from bot.policy import Policy
from bot.slack_io import SlackIO
from bot.text import cut, escape

log = get_logger("bot")

AFTER_ACK_S = 0.002
MODALS = {
    "edit": modals.edit_modal,
    "reject": modals.reject_modal,
    "respond": modals.respond_modal,
    "reject_all": modals.reject_all_modal,
}
T = TypeVar("T")

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
        case DecisionResult.NOT_REQUESTER:
            return f"Only <@{verdict.requester}>, who asked, may withdraw this request. Nothing changed."
        case _:
            return "This approval no longer exists."


class Budget:
    """What is left of the time a listener may spend before it acks."""

    def __init__(self, seconds: float):
        self.deadline = asyncio.get_running_loop().time() + seconds

    def left(self) -> float:
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    async def within(self, work: Awaitable[T]) -> asyncio.Task[T] | T:
        """The work's result if it ends in time; else its task, still running."""
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({task}, timeout=self.left())
        return task.result() if done else task


class ApprovalBot:
    """What the listeners share: the store, Slack I/O and the policy."""

    def __init__(self, store: Store, slack: SlackIO, policy: Policy, ack_budget_s: float = 2.0):
        self.store = store
        self.slack = slack
        self.policy = policy
        self.ack_budget_s = ack_budget_s
        self._tasks: set[asyncio.Task[Any]] = set()
        self._starting = 0  # work scheduled by `later` that has not started yet
        self._closed = False  # set when `drain` gave up: nothing more starts
        self._redrawing: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def later(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        """Run Slack I/O after the ack; failures are logged, decisions are already safe.

        It starts a moment later (`AFTER_ACK_S`): by then the listener has returned and
        the ack is written, so this work never competes with it for the event loop.
        """

        def start() -> None:
            task = asyncio.create_task(work)
            self._tasks.add(task)
            task.add_done_callback(done)

        def done(finished: asyncio.Task[Any]) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception():
                log.error("after_ack_failed", what=what, error=repr(finished.exception()))

        def begin() -> None:
            self._starting -= 1
            if self._closed:  # drained already: Slack and Redis are being closed
                work.close()
                log.warning("after_ack_work_dropped", what=what)
                return
            start()

        self._starting += 1
        asyncio.get_running_loop().call_later(AFTER_ACK_S, begin)

    async def drain(self, timeout: float = 5.0) -> None:
        """At shutdown: let after-ack work finish, for at most `timeout` seconds (refusals
        queued behind Slack's ephemeral rate limit must not hold a replica up); then cancel it.
        Decisions are recorded before the ack, so what is cut short is only Slack I/O."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._tasks or self._starting:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                self._closed = True
                for task in list(self._tasks):
                    task.cancel()
                log.warning("after_ack_work_cut_short", tasks=len(self._tasks))
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
                return
            await asyncio.sleep(AFTER_ACK_S)
            await asyncio.wait(list(self._tasks) or [asyncio.ensure_future(asyncio.sleep(0))], timeout=left)

    def budget(self) -> Budget:
        return Budget(self.ack_budget_s)

    def refuse(self, click: Click, text: str) -> None:
        """After the ack: tell the person who clicked why nothing changed (in the modal they
        clicked in, if any)."""
        if click.shown:
            self.later(self.show_review(click.shown, click.approval_id, f"⚠️ {text}"), "refusal")
        elif click.channel:
            self.later(self.slack.ephemeral(click.channel, click.user, text), "refusal")

    async def show_review(self, shown: Shown, approval_id: str, notice: str | None = None) -> None:
        """Redraw the review page `shown` from the record, with `notice` at its top.

        One redraw of a view at a time here, each reading the record when its turn comes, so
        the last to land read last. `shown.hash` is the view the click came from: if another
        redraw landed since (Slack says hash_conflict), the record is read again and the page
        redrawn without it, after that one.
        """
        lock = self._redrawing.get(shown.view_id)
        if lock is None:
            lock = self._redrawing[shown.view_id] = asyncio.Lock()
        async with lock:
            seen = shown.hash
            while True:
                approval = await self.store.approval(approval_id)
                if approval is None or not approval.request.actions:
                    return
                view = modals.review_modal(
                    approval,
                    shown.start,
                    self.slack.destructive,
                    await self.slack.card_view(approval),
                    notice,
                )
                try:
                    await self.slack.prompt.views_update(view_id=shown.view_id, hash=seen, view=view)
                    return
                except SlackApiError as exc:
                    error = exc.response.get("error")
                    if error != "hash_conflict" or seen is None:  # closed meanwhile, say
                        log.info("review_not_redrawn", error=error, view_id=shown.view_id)
                        return
                    seen = None

    async def decide(
        self,
        approval_id: str,
        index: int,
        decision: dict[str, Any],
        user: str,
        check_only: bool = False,
        team: str | None = None,
        seen: int | None = None,
    ) -> Verdict:
        verdict = await self.store.decide(
            approval_id,
            index,
            decision,
            user,
            self.policy.gate(user),
            check_only=check_only,
            team=team,
            seen=seen,
        )
        if not check_only:
            kind = str(decision.get("type", "answer"))
            metrics.DECISIONS.labels(kind, verdict.tool, verdict.result.value).inc()
        return verdict

    async def after_decision(self, approval_id: str, index: int, decision: dict[str, Any], user: str) -> None:
        """Refresh the card and say what needs saying in the thread, once a decision is recorded."""
        await self.store.touch_card(approval_id)
        approval = await self.store.approval(approval_id)
        if approval is None:
            return
        name = escape(approval.request.actions[index].name) if approval.request.actions else ""
        post_id = f"decision:{approval_id}:{index}"
        if decision.get("type") == "approve":
            if approval.card_where != approval.channel:  # the card is elsewhere: the run's thread hears
                # with a quorum, everyone whose approval counted is credited, not the last one only
                voters = [v.user for v in approval.votes.get(index, [])] or [user]
                who = ", ".join(f"<@{u}>" for u in dict.fromkeys(voters))
                await self.slack.thread_reply(approval, f"✅ {who} approved `{name}`", post_id)
            return  # else the card, in the thread, says it all
        if decision.get("type") == "reject" and decision.get("message"):
            await self.slack.thread_reply(
                approval, f"❌ <@{user}> rejected `{name}`: {escape(decision['message'])}", post_id
            )
        elif decision.get("type") == "respond":
            await self.slack.thread_reply(
                approval, f"💬 <@{user}> responded for `{name}`: {escape(decision['message'])}", post_id
            )
        elif "answer" in decision:
            await self.slack.thread_reply(
                approval, f"💬 <@{user}> answered: {escape(cut(str(decision['answer']), 2_000))}", post_id
            )

    async def all_answered(
        self,
        verdicts: Awaitable[list[tuple[int, Verdict]]] | list[tuple[int, Verdict]],
        click: Click,
        decision: dict[str, Any],
    ) -> None:
        """After Approve all / Reject all: one card refresh, one line in the thread, the refusals
        said (a batch of 500 is one message, not 500)."""
        if not isinstance(verdicts, list):
            if click.channel:
                await self.slack.ephemeral(click.channel, click.user, STILL_RECORDING)
            verdicts = await verdicts
        refusals, taken = [], []
        for index, verdict in verdicts:
            refusal = refusal_text(verdict, str(decision["type"]), self.policy.route(verdict.tool).approvers)
            if refusal:
                refusals.append(refusal)
            else:
                taken.append((index, verdict))
        if any(verdict.result is DecisionResult.COMPLETE for _, verdict in taken):
            await self.observe_completed(click.approval_id)
        decided = [index for index, verdict in taken if verdict.result is not DecisionResult.VOTED]
        if len(decided) == 1:
            await self.after_decision(click.approval_id, decided[0], decision, click.user)
        elif taken:
            await self.store.touch_card(click.approval_id)
            if decided:
                await self.said_together(click.approval_id, decided, decision, click.user)
        if refusals:
            await self.tell(click.approval_id, click.user, "\n".join(dict.fromkeys(refusals)), click.channel)

    async def said_together(
        self, approval_id: str, indices: list[int], decision: dict[str, Any], user: str
    ) -> None:
        """What the thread hears of one decision taken on many actions at once: one line."""
        approval = await self.store.approval(approval_id)
        if approval is None:
            return
        what = tally(approval, indices)
        post_id = f"decision:{approval_id}:all:{indices[0]}"  # each action is decided once
        if decision.get("type") == "approve" and approval.card_where != approval.channel:
            await self.slack.thread_reply(approval, f"✅ <@{user}> approved {what}", post_id)
        elif decision.get("type") == "reject" and decision.get("message"):
            await self.slack.thread_reply(
                approval, f"❌ <@{user}> rejected {what}: {escape(decision['message'])}", post_id
            )

    async def recorded_late(
        self,
        pending: asyncio.Task[Verdict],
        approval_id: str,
        index: int,
        decision: dict[str, Any],
        user: str,
        channel: str | None,
        shown: Shown | None = None,
    ) -> None:
        """The ack went out before Redis answered: say so, then finish when it does."""
        await self.say_to(shown, approval_id, user, channel, STILL_RECORDING)
        try:
            verdict = await asyncio.wait_for(pending, 60)
        except Exception as exc:  # Redis never answered: the card shows whatever was recorded
            log.error("decision_unconfirmed", error=repr(exc))
            await self.say_to(shown, approval_id, user, channel, NOT_CONFIRMED)
            return
        await self.answered(verdict, approval_id, index, decision, user, channel, shown)

    async def say_to(
        self, shown: Shown | None, approval_id: str, user: str, channel: str | None, text: str
    ) -> None:
        """A note for the person who clicked: at the top of the review modal they clicked in,
        else an ephemeral message where they clicked."""
        if shown:
            await self.show_review(shown, approval_id, text)
        elif channel:
            await self.slack.ephemeral(channel, user, text)

    async def answered(
        self,
        verdict: Verdict,
        approval_id: str,
        index: int,
        decision: dict[str, Any],
        user: str,
        channel: str | None,
        shown: Shown | None = None,
    ) -> None:
        approvers = self.policy.route(verdict.tool).approvers
        refusal = refusal_text(verdict, str(decision.get("type", "answer")), approvers)
        thread_id = await self.store.redis.hget(self.store.keys.approval(approval_id), "thread_id")
        if thread_id:  # the run's trace id in the click's log lines too
            structlog.contextvars.bind_contextvars(thread_id=thread_id)
        if refusal:
            log.info("decision_refused", reason=refusal)
            if shown:
                await self.show_review(shown, approval_id, f"⚠️ {refusal}")
            else:
                await self.tell(approval_id, user, refusal, channel)
            return
        log.info("decision", result=verdict.result.value, index=index, tool=verdict.tool, votes=verdict.votes)
        if verdict.result is DecisionResult.VOTED:
            await self.after_vote(approval_id, index, decision, user, verdict, channel, shown)
            return
        if verdict.result is DecisionResult.COMPLETE:
            await self.observe_completed(approval_id)
        if shown:  # the person is looking at it: before the thread, which waits its turn to post
            await self.show_review(shown, approval_id)
        await self.after_decision(approval_id, index, decision, user)

    async def observe_completed(self, approval_id: str) -> None:
        approval = await self.store.approval(approval_id)
        if approval is not None:
            metrics.CARD_TO_DECISION.observe(max(0.0, time.time() - approval.created_at))

    async def after_vote(
        self,
        approval_id: str,
        index: int,
        decision: dict[str, Any],
        user: str,
        verdict: Verdict,
        channel: str | None,
        shown: Shown | None = None,
    ) -> None:
        """An approval counted towards a quorum (or an edit proposed): the card shows the
        progress; the thread hears of a proposal; the person is told what happens next."""
        await self.store.touch_card(approval_id)
        approval = await self.store.approval(approval_id)
        if approval is None:
            return
        need = approval.quorum(index)
        name = escape(verdict.tool)
        if decision.get("type") == "edit":
            revision = approval.revisions.get(index, 0)
            await self.slack.thread_reply(
                approval,
                f"✏️ <@{user}> proposed new arguments for `{name}`: they run once {need} approvers agree "
                f"({verdict.votes} so far).",
                f"proposal:{approval_id}:{index}:{revision}",
            )
        more = need - verdict.votes
        counted = (
            f"Your approval of `{name}` is counted: {verdict.votes} of {need}. It runs once "
            f"{more} more approver{'s' if more > 1 else ''} agree{'s' if more == 1 else ''}."
        )
        if shown:
            await self.show_review(shown, approval_id, f"👥 {counted}")
        else:
            await self.tell(approval_id, user, counted, channel)

    async def withdrawn(self, result: Verdict | asyncio.Task[Verdict], click: Click) -> None:
        """After Withdraw: the refusal, or the card refreshed and the thread told."""
        verdict = result if isinstance(result, Verdict) else await result
        refusal = refusal_text(verdict, "withdraw")
        if refusal:
            await self.tell(click.approval_id, click.user, refusal, click.channel)
            return
        log.info("approval_withdrawn", result=verdict.result.value)
        metrics.OUTCOMES.labels("withdrawn").inc()
        await self.store.touch_card(click.approval_id)
        approval = await self.store.approval(click.approval_id)
        if approval is not None:
            await self.slack.thread_reply(
                approval, withdrawal_line(approval, click.user), f"withdrawn:{click.approval_id}"
            )

    async def tell(self, approval_id: str, user: str, text: str, channel: str | None) -> None:
        """An ephemeral note for one person, in the card's thread when there is one."""
        approval = await self.store.approval(approval_id)
        target = approval.card_where if approval else channel
        if target:
            await self.slack.ephemeral(target, user, text, approval.card_ts if approval else None)

    async def open_modal(
        self,
        approval_id: str,
        index: int,
        kind: str,
        trigger_id: str,
        user: str,
        channel: str | None,
        shown: Shown | None = None,
    ) -> None:
        """The form (or the full arguments, or the review) for a click: opened, or pushed over
        the review modal the click came from (`shown`)."""
        approval = await self.store.approval(approval_id)
        if approval is None:
            return
        if kind != "answer" and not 0 <= index < len(approval.request.actions):
            # a forged or stale index: no such action to show
            await self.say_to(shown, approval_id, user, channel, "That action is not part of this approval.")
            return
        if kind == "view_args":
            view = modals.args_modal(approval, index)
        elif kind == "answer":
            view = modals.answer_modal(approval)
        elif kind == "review":  # where the work is: the page of the first action still waiting
            first = modals.first_undecided(approval) or 0
            view = modals.review_modal(
                approval, first, self.slack.destructive, await self.slack.card_view(approval)
            )
        else:
            view = MODALS[kind](approval, index)
        try:
            # The trigger must be used within 3 s: no waiting out a 429 here.
            if shown:
                await self.slack.prompt.views_push(trigger_id=trigger_id, view=view)
            else:
                await self.slack.prompt.views_open(trigger_id=trigger_id, view=view)
        except SlackApiError as exc:
            log.warning("modal_not_opened", error=exc.response.get("error"), status=exc.response.status_code)
            label = {"view_args": "View full arguments", "review": "Review all"}.get(kind) or LABELS.get(
                kind, "the button"
            )
            await self.say_to(shown, approval_id, user, channel, FORM_TOO_LATE.format(label=label))


def checked(
    approval: Approval, index: int, kind: str, values: dict[str, str | None]
) -> tuple[dict[str, Any], dict[str, str]]:
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
        parsed = modals.parse_answer(values, bool(schema) and schema.get("type") != "string")
        decision = Answer(answer=parsed).model_dump()
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


@dataclass(frozen=True)
class Shown:
    """The review modal a click came from, or a form was pushed over: where to answer."""

    view_id: str
    start: int  # the first action of the page it shows
    hash: str | None = None  # the view as the click saw it


@dataclass(frozen=True)
class Click:
    """What a button or menu click says: who, where, which approval and action."""

    user: str
    channel: str | None
    approval_id: str
    index: int
    trigger_id: str
    team: str | None = None
    seen: int | None = None  # the proposal the card showed (its block id's `r<n>`), when it says
    shown: Shown | None = None  # the review modal it was clicked in

    @classmethod
    def of(cls, payload: BlockActions, value: str | None) -> Click:
        approval_id, index = parse_value(value or "")
        block = payload.action.block_id or ""
        seen = None
        if block == "decide:all":  # "Approve all" is only shown while no edit is proposed
            seen = 0
        elif match := re.fullmatch(r"(?:decide|action):\d{1,4}:r(\d{1,6})", block):
            seen = int(match.group(1))
        shown = None
        view = payload.view
        if payload.container.type == "view" and view and view.id and view.callback_id == "review":
            reviewed, start = parse_value(view.private_metadata)
            if reviewed == approval_id:  # a page of this approval (else: nothing of it to redraw)
                shown = Shown(view.id, start, view.hash)
        return cls(
            payload.user.id,
            payload.channel_id,
            approval_id,
            index,
            payload.trigger_id,
            payload.team_id,
            seen,
            shown,
        )


async def approve(bot: ApprovalBot, ack: Any, click: Click) -> None:
    """Approve: one Redis round trip (checks and write), then the ack; the rest after."""
    decision = {"type": "approve"}
    result = await bot.budget().within(
        bot.decide(click.approval_id, click.index, decision, click.user, team=click.team, seen=click.seen)
    )
    await ack()
    where = (click.approval_id, click.index, decision, click.user, click.channel, click.shown)
    if isinstance(result, asyncio.Task):
        log.warning("ack_budget_spent")
        bot.later(bot.recorded_late(result, *where), "late")
    else:
        bot.later(bot.answered(result, *where), "after_decision")


async def open_form(bot: ApprovalBot, ack: Any, click: Click, kind: str) -> None:
    """Edit, Reject, Respond, Answer: the same checks without a write, then the modal."""
    probe = {"type": kind}
    result = await bot.budget().within(
        bot.decide(click.approval_id, click.index, probe, click.user, check_only=True)
    )
    await ack()
    if isinstance(result, asyncio.Task):  # nothing was written; the trigger is stale by now
        log.warning("ack_budget_spent", check_only=True)
        result.cancel()
        late = FORM_TOO_LATE.format(label=LABELS.get(kind, "Answer"))
        bot.later(bot.say_to(click.shown, click.approval_id, click.user, click.channel, late), "too_late")
        return
    refusal = refusal_text(result, kind)
    if refusal:
        bot.later(
            bot.answered(
                result, click.approval_id, click.index, probe, click.user, click.channel, click.shown
            ),
            "refusal",
        )
    else:
        bot.later(open_for(bot, click, kind), "views_open")


def open_for(bot: ApprovalBot, click: Click, kind: str) -> Coroutine[Any, Any, None]:
    """The modal a click asks for: pushed over the review modal it came from, else opened."""
    return bot.open_modal(
        click.approval_id, click.index, kind, click.trigger_id, click.user, click.channel, click.shown
    )


async def decide_all(bot: ApprovalBot, ack: Any, click: Click, decision: dict[str, Any]) -> None:
    """Approve all / Reject all: each undecided action recorded on its own (the last one
    completes the set and queues the one resume), within the same ack budget."""

    async def each() -> list[tuple[int, Verdict]]:
        approval = await bot.store.approval(click.approval_id)
        if approval is None:
            return [(0, Verdict(DecisionResult.MISSING))]
        undecided = [i for i in range(len(approval.request.actions)) if i not in approval.decided]
        return [
            (
                i,
                await bot.decide(
                    click.approval_id, i, decision, click.user, team=click.team, seen=click.seen
                ),
            )
            for i in undecided
        ]

    result = await bot.budget().within(each())
    await ack()
    if isinstance(result, asyncio.Task):
        log.warning("ack_budget_spent", together=True)
        bot.later(bot.all_answered(result, click, decision), "late")
    else:
        bot.later(bot.all_answered(result, click, decision), "after_decision")


async def view_args(bot: ApprovalBot, ack: Any, click: Click) -> None:
    await ack()
    bot.later(open_for(bot, click, "view_args"), "views_open")


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


async def submitted(bot: ApprovalBot, ack: Any, payload: ViewSubmission, kind: str) -> None:
    """A modal's decision: checked by the protocol (inline errors), recorded, then the ack."""
    budget = bot.budget()
    user = payload.user.id
    approval_id, index = parse_value(payload.view.private_metadata)
    values = payload.values()
    first_block = next(iter(values), "value")
    with structlog.contextvars.bound_contextvars(approval_id=approval_id, slack_user=user, action=kind):
        approval = await budget.within(bot.store.approval(approval_id))
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
        decision, errors = checked(approval, index, kind, values)
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        result = await budget.within(bot.decide(approval_id, index, decision, user, team=payload.team_id))
        await ack()  # the form closes; if it was pushed over a review page, that page shows again
        under = payload.view.previous_view_id
        shown = Shown(under, modals.review_start(index, approval.size)) if under else None
        where = (approval_id, index, decision, user, approval.channel, shown)
        with structlog.contextvars.bound_contextvars(
            thread_id=approval.thread_id, interrupt_id=approval.interrupt_id
        ):
            if isinstance(result, asyncio.Task):
                log.warning("ack_budget_spent")
                bot.later(bot.recorded_late(result, *where), "late")
            else:
                bot.later(bot.answered(result, *where), "after_decision")


def register(app: AsyncApp, bot: ApprovalBot) -> None:
    """One small listener per action_id / callback_id, as bolt-python's examples do.

    Each reads its request's typed model (`context["payload"]`, see `bot.payloads`).
    """

    def clicked(context: dict[str, Any]) -> Click:
        payload: BlockActions = context["payload"]
        return Click.of(payload, payload.action.value)

    @app.action(re.compile(r"^approve(:\d+)?$"))
    async def on_approve(ack, context) -> None:
        click = clicked(context)
        with structlog.contextvars.bound_contextvars(
            approval_id=click.approval_id, slack_user=click.user, action="approve"
        ):
            await approve(bot, ack, click)

    @app.action(re.compile(r"^edit(:\d+)?$"))
    async def on_edit(ack, context) -> None:
        await open_form(bot, ack, clicked(context), "edit")

    @app.action(re.compile(r"^reject(:\d+)?$"))
    async def on_reject(ack, context) -> None:
        await open_form(bot, ack, clicked(context), "reject")

    @app.action(re.compile(r"^respond(:\d+)?$"))
    async def on_respond(ack, context) -> None:
        await open_form(bot, ack, clicked(context), "respond")

    @app.action(re.compile(r"^answer(:\d+)?$"))
    async def on_answer(ack, context) -> None:
        await open_form(bot, ack, clicked(context), "answer")

    @app.action("approve_all")
    async def on_approve_all(ack, context) -> None:
        await decide_all(bot, ack, clicked(context), {"type": "approve"})

    @app.action("reject_all")
    async def on_reject_all(ack, context) -> None:
        click = clicked(context)
        await ack()
        bot.later(open_for(bot, click, "reject_all"), "views_open")

    @app.action("review")
    async def on_review(ack, context) -> None:
        """ "Review all N actions": the batch a page at a time, every action with its choices."""
        click = clicked(context)
        await ack()
        bot.later(open_for(bot, click, "review"), "views_open")

    @app.action(re.compile(r"^page:\d{1,4}$"))
    async def on_page(ack, context) -> None:
        """◀ / ▶ in the review modal: the page its button names."""
        click = clicked(context)
        await ack()
        if click.shown is None:  # not from a review page of this approval
            bot.refuse(click, "Signoff could not read this click; nothing changed.")
            return
        bot.later(bot.show_review(replace(click.shown, start=click.index), click.approval_id), "views_update")

    @app.action("withdraw")
    async def on_withdraw(ack, context) -> None:
        click = clicked(context)
        with structlog.contextvars.bound_contextvars(
            approval_id=click.approval_id, slack_user=click.user, action="withdraw"
        ):
            result = await bot.budget().within(
                bot.store.decide_for_people(
                    click.approval_id, Outcome.WITHDRAWN, WITHDRAWN, user=click.user, team=click.team
                )
            )
            await ack()
            bot.later(bot.withdrawn(result, click), "withdrawn")

    @app.action(re.compile(r"^view_args(:\d+)?$"))
    async def on_view_args(ack, context) -> None:
        await view_args(bot, ack, clicked(context))

    @app.action(re.compile(r"^choose(:\d+)?$"))
    async def on_choose(ack, context) -> None:
        """A large batch's overflow menu: `<kind>:<approval id>:<index>`."""
        payload: BlockActions = context["payload"]
        chosen = payload.action.selected_option
        kind, _, value = (chosen.value if chosen else "").partition(":")
        click = Click.of(payload, value)
        if kind == "approve":
            await approve(bot, ack, click)
        elif kind == "view_args":
            await view_args(bot, ack, click)
        elif kind in LABELS or kind == "answer":
            await open_form(bot, ack, click, kind)
        else:
            await ack()
            bot.refuse(click, "Signoff could not read this choice; nothing changed.")

    @app.view("edit")
    async def on_edit_submitted(ack, context) -> None:
        await submitted(bot, ack, context["payload"], "edit")

    @app.view("reject")
    async def on_reject_submitted(ack, context) -> None:
        await submitted(bot, ack, context["payload"], "reject")

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
        approval_id, index = parse_value(payload.view.private_metadata)
        click = Click(payload.user.id, None, approval_id, index, "", payload.team_id)
        decision = {"type": "reject", "message": reason} if reason else {"type": "reject"}
        await decide_all(bot, ack, click, decision)

    @app.view("respond")
    async def on_respond_submitted(ack, context) -> None:
        await submitted(bot, ack, context["payload"], "respond")

    @app.view("answer")
    async def on_answer_submitted(ack, context) -> None:
        await submitted(bot, ack, context["payload"], "answer")

    @app.view_closed(re.compile(".*"))
    async def on_closed(ack) -> None:
        await ack()
