"""What the listeners share (`DecisionService`): the store, Slack I/O and the policy; the ack budget;
the work done after the ack (card refreshes, thread lines, refusals, modals, review pages)."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Coroutine
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError, SlackObjectFormationError
from slack_sdk.models.views import View

from bot.budget import Budget
from bot.chaining import Chaining
from bot.clicks import Click, Decision, Shown, answering, form_metadata
from bot.permissions import Permissions
from bot.routing import summary_line
from bot.slack.clients import unredacted
from bot.slack.io import SlackIO
from bot.step_up import Links
from bot.trust import offers
from bot.views import modals, previews
from bot.views.card_words import LABELS, outcome_told, require_progress, require_said, settled, tally
from bot.views.cards import approve_all_words, approve_words, button_value, withdraw_words
from bot.views.elicitation import answer_modal, not_acceptable
from bot.views.refusals import FORM_TOO_LATE, NOT_CONFIRMED, NOT_REVEALED, STILL_RECORDING, refusal_text
from bot.views.text import cut, escape
from bot.views.trust import trust_words
from core import metrics
from core.logs import get_logger
from core.outages import is_outage
from core.protocol import (
    Answer,
    Approve,
    Edit,
    PersonDecision,
    Reject,
    RequestKind,
    Respond,
    decision_payload,
)
from core.records import Approval, DecisionResult, Verdict
from core.secrets import audited_edit, conceal
from core.store import Store

log = get_logger("bot")


AFTER_ACK_S = 0.002


MODALS = {  # the views built from the record and an action's index alone
    "view_args": modals.args_modal,
    "preview": previews.preview_modal,  # View the whole change (`bot.views.previews`)
    "reveal": modals.secrets_modal,
    "edit": modals.edit_modal,
    "reject": modals.reject_modal,
    "respond": modals.respond_modal,
    "reject_all": modals.reject_all_modal,
}
FORMS = ("edit", "reject", "respond", "answer", "elicit", "reject_all")  # what a submission decides
WHOLE = ("answer", "elicit", "details", "sure:withdraw")  # clicks about the whole approval
BUTTONS = {  # the button that opens each modal, by its kind (to say "click it once more")
    "view_args": "View full arguments",
    "preview": "View the whole change",
    "reveal": "Show secret values",
    "review": "Review all",
    "details": "Details",
    "sure:approve": "Approve",
    "sure:trust": "Approve & trust",
    "sure:approve_all": "Approve all",
    "sure:withdraw": "Withdraw my request",
    "elicit": "Answer…",
}


DECIDE_TRIES = 2


class DecisionService:
    """What the listeners share: the store, Slack I/O and the policy."""

    def __init__(
        self,
        store: Store,
        slack: SlackIO,
        permissions: Permissions,
        ack_budget_s: float = 2.0,
        public_url: str | None = None,
    ):
        self.store = store
        self.links = Links(store, public_url)  # one-time links to the passkey pages (`bot.passkeys`)
        self.slack = slack
        self.permissions = permissions
        self.ack_budget_s = ack_budget_s
        self._tasks: set[asyncio.Task[Any]] = set()
        self._starting = 0  # work scheduled by `later` that has not started yet
        self._closed = False  # set when `drain` gave up: nothing more starts
        self._redrawing: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self.chaining = Chaining(store, self.later)  # the audit entries, after the acks

    def later(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        """Run Slack I/O after the ack; failures are logged, decisions are already safe.

        It starts a moment later (`AFTER_ACK_S`), once the ack is written. (Capping how many run
        at once was tried: under a burst of 200 clicks a card then waited its turn.)"""

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
        said = f"⚠️ {text}" if click.shown else text
        self.later(self.say_to(click.shown, click.approval_id, click.user, click.channel, said), "refusal")

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
                approval = await self.store.approvals.get(approval_id)
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
        decision: PersonDecision,
        user: str,
        team: str | None = None,
        seen: int | None = None,
        approval: Approval | None = None,
        proof: dict[str, str] | None = None,
    ) -> Verdict:
        """Record one decision (`approval`: its record, when the caller has it: an edit's secrets
        are kept in the audit as fingerprints; `proof`: a passkey's, verified by the step-up page)."""
        kept = await self.audited(approval, index, decision) if approval is not None else None
        for attempt in range(DECIDE_TRIES):
            try:
                verdict = await self.store.decisions.decide(
                    approval_id,
                    index,
                    decision,
                    user,
                    self.permissions.gate(user),
                    team=team,
                    seen=seen,
                    audited=kept,
                    proof=proof,
                    chain=False,  # (after the ack, below: the SHA-256 is not on its path)
                )
                break
            except Exception as exc:
                # A connection torn under load (redis-py's cluster client, its pool full) or a
                # failover: sent once more, as a double click would be (the record counts one).
                if attempt == DECIDE_TRIES - 1 or not is_outage(exc):
                    raise
                log.warning("decide_sent_again", error=repr(exc))
        metrics.DECISIONS.labels(decision.type, verdict.tool, verdict.result.value).inc()
        self.chaining.soon(self.store.keys.of_approval(approval_id))
        return verdict

    async def audited(
        self, approval: Approval, index: int, decision: PersonDecision
    ) -> dict[str, Any] | None:
        """An edit as the audit keeps it, when its arguments carry a secret (the call's own, one
        the policy's `redact` names, or one shaped like a secret): each as a keyed fingerprint."""
        if not isinstance(decision, Edit) or not 0 <= index < len(approval.request.actions):
            return None
        action = approval.request.actions[index]
        redact = self.permissions.rules.redactions(action.name)
        if not action.hidden and not conceal(decision.edited_action.args, redact)[1]:
            return None
        key = await self.store.audit.fingerprints.get()
        return audited_edit(decision_payload(decision), key, action.hidden, redact)

    async def card_changed(self, approval_id: str) -> Approval | None:
        """Show a decision on the card: at once through the response_url of the click being
        answered, when it was a click on the card (or a form opened from one); else, or when
        Slack refuses the URL, a mark in the card lane (chat.update, paced, before any status
        line). Returns the record as it is then (what the rest of the click's work reads), and
        binds its run's thread id to the click's log lines (a batch's click has no other read)."""
        reply = answering.get()
        approval = await self.slack.replace_card(approval_id, reply) if reply is not None else None
        if approval is None:
            await self.store.cards.touch(approval_id)
            approval = await self.store.approvals.get(approval_id)
        if approval is not None:  # the run's trace id in the click's log lines too
            structlog.contextvars.bind_contextvars(thread_id=approval.thread_id)
        return approval

    async def check(self, approval_id: str, index: int, kind: str, user: str) -> Verdict:
        """Whether `user` may decide the action so (`kind`), before a form opens; writes nothing."""
        return await self.store.decisions.check(approval_id, index, kind, user, self.permissions.gate(user))

    async def said(self, approval: Approval, index: int, decision: PersonDecision, user: str) -> None:
        """What the thread hears of one decision, once the card shows it (`approval`: the record
        `card_changed` read)."""
        approval_id = approval.approval_id
        if settled(approval) and outcome_told(approval):
            return  # its outcome line says it all, with the reasons (`Router.settled`)
        name = escape(approval.request.actions[index].name) if approval.request.actions else ""
        post_id = f"decision:{approval_id}:{index}"
        if isinstance(decision, Approve):
            if approval.card_where != approval.channel:  # the card is elsewhere: the run's thread hears
                # with a quorum, everyone whose approval counted is credited, not the last one only
                voters = [v.user for v in approval.votes.get(index, [])] or [user]
                who = ", ".join(f"<@{u}>" for u in dict.fromkeys(voters))
                await self.slack.thread_reply(approval, f"✅ {who} approved `{name}`", post_id)
            return  # else the card, in the thread, says it all
        if isinstance(decision, Reject) and decision.message:
            await self.slack.thread_reply(
                approval, f"❌ <@{user}> rejected `{name}`: {escape(decision.message)}", post_id
            )
        elif isinstance(decision, Respond):
            await self.slack.thread_reply(
                approval, f"💬 <@{user}> responded for `{name}`: {escape(decision.message)}", post_id
            )
        elif isinstance(decision, Answer):
            await self.slack.thread_reply(
                approval, f"💬 <@{user}> answered: {escape(cut(str(decision.answer), 2_000))}", post_id
            )

    async def all_answered(
        self,
        verdicts: Awaitable[list[tuple[int, Verdict]]] | list[tuple[int, Verdict]],
        click: Click,
        decision: PersonDecision,
    ) -> None:
        """After Approve all / Reject all: one card refresh, one line in the thread, the refusals
        said (a batch of 500 is one message, not 500)."""
        if not isinstance(verdicts, list):
            if click.channel:
                await self.slack.ephemeral(click.channel, click.user, STILL_RECORDING)
            verdicts = await verdicts
        refusals, taken = [], []
        approvers = await self.approvers(click.approval_id, verdicts)
        for index, verdict in verdicts:
            refusal = refusal_text(verdict, decision.type, approvers.get(index, ()))
            if refusal:
                refusals.append(refusal)
            else:
                taken.append((index, verdict))
        decided = [index for index, verdict in taken if verdict.result is not DecisionResult.VOTED]
        approval = await self.card_changed(click.approval_id) if taken else None
        if approval is not None:
            if any(verdict.result is DecisionResult.COMPLETE for _, verdict in taken):
                observe_completed(approval)
            if len(decided) == 1:
                await self.said(approval, decided[0], decision, click.user)
            elif decided:
                await self.said_together(approval, decided, decision, click.user)
        if refusals:
            await self.tell(click.approval_id, click.user, "\n".join(dict.fromkeys(refusals)), click.channel)

    async def said_together(
        self, approval: Approval, indices: list[int], decision: PersonDecision, user: str
    ) -> None:
        """What the thread hears of one decision taken on many actions at once: one line."""
        approval_id = approval.approval_id
        if settled(approval) and outcome_told(approval):
            return  # its outcome line says it, with the reasons (`Router.settled`)
        what = tally(approval, indices)
        post_id = f"decision:{approval_id}:all:{indices[0]}"  # each action is decided once
        if isinstance(decision, Approve) and approval.card_where != approval.channel:
            await self.slack.thread_reply(approval, f"✅ <@{user}> approved {what}", post_id)
        elif isinstance(decision, Reject) and decision.message:
            await self.slack.thread_reply(
                approval, f"❌ <@{user}> rejected {what}: {escape(decision.message)}", post_id
            )

    async def recorded_late(self, pending: asyncio.Task[Verdict], made: Decision) -> None:
        """The ack went out before Redis answered: say so, then finish when it does."""
        await self.say_to(made.shown, made.approval_id, made.user, made.channel, STILL_RECORDING)
        try:
            verdict = await asyncio.wait_for(pending, 60)
        except Exception as exc:  # Redis never answered: the card shows whatever was recorded
            log.error("decision_unconfirmed", error=repr(exc))
            await self.say_to(made.shown, made.approval_id, made.user, made.channel, NOT_CONFIRMED)
            return
        await self.answered(verdict, made)

    async def say_to(
        self, shown: Shown | None, approval_id: str, user: str, channel: str | None, text: str
    ) -> None:
        """A note for the person who clicked: at the top of the review modal they clicked in,
        else an ephemeral message where they clicked."""
        if shown:
            await self.show_review(shown, approval_id, text)
        elif channel:
            await self.slack.ephemeral(channel, user, text)

    async def answered(self, verdict: Verdict, made: Decision) -> None:
        """After a decision's ack: the person told when it was refused, else the card changed and
        the run's thread told (a counted vote: the people still needed)."""
        approval_id, index, decision, user = made.approval_id, made.index, made.decision, made.user
        channel, shown = made.channel, made.shown
        if await self.refused(verdict, approval_id, index, decision.type, user, channel, shown):
            return
        log.info("decision", result=verdict.result.value, index=index, tool=verdict.tool, votes=verdict.votes)
        voted = verdict.result is DecisionResult.VOTED
        if shown and not voted:  # the person is looking at it: before the thread, which waits its turn
            await self.show_review(shown, approval_id)
        approval = await self.card_changed(approval_id)
        if approval is None:
            return
        if voted:
            await self.after_vote(approval, index, decision, user, verdict, channel, shown)
            return
        if verdict.result is DecisionResult.COMPLETE:
            observe_completed(approval)
        await self.said(approval, index, decision, user)

    async def approvers(
        self, approval_id: str, verdicts: list[tuple[int, Verdict]]
    ) -> dict[int, tuple[str, ...]]:
        """Who may decide each action a person was refused as no approver of: the approvers of the
        rule its card went out with (the record is read only then)."""
        refused = [index for index, v in verdicts if v.result is DecisionResult.NOT_APPROVER]
        approval = await self.store.approvals.get(approval_id) if refused else None
        if approval is None:
            return {}
        routes = self.permissions.routes(approval)
        barred = approval.requester if any(not r.requester_may_approve for r in routes) else None
        listed = {i: routes[i].approvers for i in refused if 0 <= i < len(routes)}
        # a requester who may not decide is not named as an approver (unless no one else is)
        return {i: tuple(a for a in named if a != barred) or named for i, named in listed.items()}

    async def refused(
        self,
        verdict: Verdict,
        approval_id: str,
        index: int,
        kind: str,
        user: str,
        channel: str | None,
        shown: Shown | None = None,
    ) -> bool:
        """If the script refused a decision of `kind`, tell the person why (on the review page
        they look at, else privately); whether it did."""
        thread_id = await self.store.approvals.thread_of(approval_id)
        if thread_id:  # the run's trace id in the click's log lines too, from the first
            structlog.contextvars.bind_contextvars(thread_id=thread_id)
        if verdict.result is DecisionResult.STEP_UP and kind == "approve":  # with a passkey: their link
            await self.tell(
                approval_id, user, await self.links.step_up(approval_id, [index], kind, user), channel
            )
            return True
        approvers = (await self.approvers(approval_id, [(index, verdict)])).get(index, ())
        refusal = refusal_text(verdict, kind, approvers)  # (approvers: read only for a refusal)
        if not refusal:
            return False
        log.info("decision_refused", reason=refusal)
        if shown:
            await self.show_review(shown, approval_id, f"⚠️ {refusal}")
        else:
            await self.tell(approval_id, user, refusal, channel)
        return True

    async def after_vote(
        self,
        approval: Approval,
        index: int,
        decision: PersonDecision,
        user: str,
        verdict: Verdict,
        channel: str | None,
        shown: Shown | None = None,
    ) -> None:
        """An approval counted towards a quorum (or an edit proposed): the card shows the
        progress; the thread hears of a proposal; the person is told what happens next."""
        approval_id = approval.approval_id
        need = approval.quorum(index)
        name = escape(verdict.tool)
        if isinstance(decision, Edit):
            revision = approval.revisions.get(index, 0)
            await self.slack.thread_reply(
                approval,
                f"✏️ <@{user}> proposed new arguments for `{name}`: they run once {need} approvers agree "
                f"({verdict.votes} so far).",
                f"proposal:{approval_id}:{index}:{revision}",
            )
        if approval.required(index):  # who fills which entry, and who may still
            counted = f"{require_said(approval, index, user, name)}\n{require_progress(approval, index)}"
        else:
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
        await self.card_changed(click.approval_id)  # (its outcome line tells the thread: `Router.settled`)

    async def tell(self, approval_id: str, user: str, text: str, channel: str | None) -> None:
        """An ephemeral note for one person, in the card's thread when there is one."""
        approval = await self.store.approvals.get(approval_id)
        target = approval.card_where if approval else channel
        if target:
            await self.slack.ephemeral(target, user, text, approval.card_ts if approval else None)

    async def sure_view(self, approval: Approval, index: int, what: str) -> View:
        """The dialog confirming `what` on this approval, in the card's own words (from the policy
        in memory: no Slack call stands between the click and views.open's 3 s)."""
        if what == "withdraw":
            return modals.sure_modal(
                approval, index, what, "Withdraw your request?", withdraw_words(approval), "Withdraw"
            )
        if what == "approve_all":
            title, text = approve_all_words(approval, self.slack.destructive)
            return modals.sure_modal(approval, index, what, title, text, "Approve all")
        route = offers(self.permissions.rules, approval).get(index)
        if what == "trust" and route is not None:
            title, text = trust_words(approval, index, route)
            return modals.sure_modal(approval, index, what, title, text, "Approve & trust")
        routes = self.permissions.routes(approval)
        said = routes[index] if index < len(routes) else None
        summary = (
            escape(summary_line(approval.request.actions[index], said)) if said and said.summary else None
        )
        title, text = approve_words(approval, index, summary)
        return modals.sure_modal(approval, index, "approve", title, text, "Approve")

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
        approval = await self.store.approvals.get(approval_id)
        if approval is None:
            return
        whole = kind in WHOLE  # (a question's, an MCP server's: index 0, no action)
        if not 0 <= index < (approval.size if whole else len(approval.request.actions)):
            # a forged or stale index: no such action to show
            await self.say_to(shown, approval_id, user, channel, "That action is not part of this approval.")
            return
        if kind == "reveal" and not await self.revealed(approval, index, user):
            await self.say_to(shown, approval_id, user, channel, NOT_REVEALED)
            return
        try:
            view = await self.view_for(approval, index, kind)
        except SlackObjectFormationError as exc:  # (what an agent or a server sent breaks a limit)
            log.error("modal_not_built", error=str(exc)[:200], kind=kind)
            view = None
        if view is None:
            await self.say_to(
                shown, approval_id, user, channel, "This question cannot be answered in a form."
            )
            return
        reply = answering.get()
        if (
            (kind in FORMS or kind.startswith("sure:"))
            and reply is not None
            and reply.message_ts == approval.card_ts
        ):
            view.private_metadata = form_metadata(
                view.private_metadata or "", reply
            )  # its submission changes the card
        try:
            # The trigger must be used within 3 s: no waiting out a 429 here. Secret values reach
            # Slack only in the view made for them, for the approver it was checked for.
            if kind == "reveal":
                with unredacted():
                    await self.slack.prompt.views_open(trigger_id=trigger_id, view=view)
            elif shown:
                await self.slack.prompt.views_push(trigger_id=trigger_id, view=view)
            else:
                await self.slack.prompt.views_open(trigger_id=trigger_id, view=view)
        except SlackApiError as exc:
            log.warning("modal_not_opened", error=exc.response.get("error"), status=exc.response.status_code)
            label = BUTTONS.get(kind.split(":r")[0]) or LABELS.get(kind, "the button")
            await self.say_to(shown, approval_id, user, channel, FORM_TOO_LATE.format(label=label))

    async def revealed(self, approval: Approval, index: int, user: str) -> bool:
        """Whether `user` may open action `index`'s secret values: its rule says `reveal = true`
        (kept with the card), it still waits, and `user` may approve it; if so, it is audited."""
        if index not in (approval.terms.reveal if approval.terms else ()):
            return False
        action = approval.request.actions[index]
        kind = "approve" if "approve" in action.allowed_decisions else action.allowed_decisions[0]
        verdict = await self.check(approval.approval_id, index, kind, user)
        if verdict.result is not DecisionResult.ALLOWED:
            return False
        return await self.store.audit.revealed(approval.approval_id, index, user)

    async def view_for(self, approval: Approval, index: int, kind: str) -> View | None:
        """The view a click of `kind` opens (None: an MCP server's form Slack cannot show)."""
        if kind.startswith("sure:"):
            what, _, seen = kind.removeprefix("sure:").partition(":r")
            view = await self.sure_view(approval, index, what)
            view.callback_id = f"{view.callback_id}:r{seen}" if seen else view.callback_id
        elif kind == "details":
            view = modals.details_modal(approval, (await self.slack.card_view(approval)).rules)
        elif kind == "answer":
            view = modals.answer_modal(approval)
        elif kind == "elicit":
            if approval.request.kind is not RequestKind.ELICITATION or not_acceptable(approval.request):
                return None
            view = answer_modal(approval, button_value(approval, 0))
        elif kind == "review":  # where the work is: the page of the first action still waiting
            first = modals.first_undecided(approval) or 0
            view = modals.review_modal(
                approval, first, self.slack.destructive, await self.slack.card_view(approval)
            )
        else:
            view = MODALS[kind](approval, index)
        return view


def observe_completed(approval: Approval) -> None:
    """A decision completed the approval's set: how long it waited since its card asked."""
    metrics.CARD_TO_DECISION.observe(max(0.0, time.time() - approval.created_at))
