"""Time limits, reminders and escalations: durable deadlines, each fired once.

When a pause comes, the bot keeps the policy's terms with the approval and
schedules its deadlines in one sorted set in Redis (`Store.set_terms`), not in
a process's memory; when its card is first visible they are moved to count
from then (`Store.set_card`), and one due before the card is out waits for
it (Slack's pace may hold a card back: nobody is reminded of, escalated to or
expired on a card they could not see). Deadlines live in Redis: a restart of
every process loses none, and a deadline that passed while everything was down
fires on start. Every deadline is on Redis's clock (an approval's `created_at`
and `shown_at` are Redis's, and the sweeper takes what is due by Redis's time),
so a replica whose clock is off changes nothing.

A time limit is enforced where decisions are recorded: the decide script
expires an action clicked after its limit (`Store.decide`), so no click after
the limit counts, whatever this sweeper's lag. The sweeper expires the actions
nobody clicked (so the agent hears) and announces.

Every bot replica runs this sweeper; a deadline is taken with a lease (as card
refreshes are), so one replica fires it, and a replica that dies holding it
lets it come due again. Firing has two steps: what it records (Redis only, at
once, for every due deadline) and its note in Slack, posted in the background:
a slow or rate-limited note never delays another expiry. Both are idempotent:
an expiry goes through the decide script (an expiry racing a click ends in
exactly one outcome), and each note is posted once (`expired:<id>:<index>`,
`remind:<id>:<n>`, `escalate:<id>:<after>`).

* `expire:<approval>:<index>`: the action is rejected with a message the
  agent can act on, or (allowing no reject) responded with it; a question is
  answered with `[questions].answer`; the card says "Expired".
* `remind:<approval>`: the people who may still decide are notified again,
  with how long it has waited; then it is scheduled for the next period.
* `escalate:<approval>:<after>`: the `escalate_to` stored with the card for
  the actions escalating after that long may decide them from now on, and hear
  so: the notice and the permission come from the same terms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from bot.routing import Router
from bot.views.card_words import outcome_told
from bot.views.text import escape
from core.health import Health
from core.logs import get_logger
from core.loops import Loop, until_due
from core.metrics import OUTCOMES
from core.outages import is_outage
from core.policy_file import spoken
from core.protocol import RequestKind
from core.records import (
    Approval,
    ApprovalStatus,
    DecisionResult,
    Outcome,
    expiry_decision,
    expiry_message,
)
from core.store import Store

log = get_logger("deadlines")

__all__ = ["DeadlineSweeper", "expiry_message"]

Note = Coroutine[Any, Any, None]  # what a deadline says in Slack, once recorded
IDLE_MOST_S = 0.5  # with nothing due, the sweeper rests until the next deadline, this long at most
CARD_WAIT_S = 5  # a deadline due before its card is out looks again this much later


class DeadlineSweeper(Loop):
    name = "deadline sweeper"

    def __init__(
        self,
        store: Store,
        router: Router,
        health: Health | None = None,
        lease_ms: int = 30_000,
        batch: int = 10,
        clock: Callable[[], float] | None = None,
        notes_at_once: int = 50,
    ):
        self.store = store
        self.router = router
        self.health = health or Health()
        self.lease_ms = lease_ms
        self.batch = batch
        self.clock = clock  # None: Redis's clock (tests give one of their own)
        self.notes_at_once = notes_at_once
        self._failures: dict[str, int] = {}
        self._notes: set[asyncio.Task[None]] = set()

    async def now(self) -> float:
        return self.clock() if self.clock is not None else await self.store.deadlines.time()

    async def serve(self, stop: asyncio.Event) -> None:
        try:
            await super().serve(stop)
        finally:
            await self.quiet()

    async def settle(self) -> None:
        """Until every note being posted is out (or failed)."""
        while self._notes:
            await asyncio.wait(list(self._notes))

    async def quiet(self, timeout: float = 5.0) -> None:
        """Let the notes being posted finish (at most `timeout`): one cut short comes due again."""
        if self._notes:
            await asyncio.wait(list(self._notes), timeout=timeout)
        for note in list(self._notes):
            note.cancel()

    async def turn(self) -> float:
        if await self.sweep():
            return 0
        return 0.2 if self.clock is not None else until_due(self.store.deadlines.next_due_ms, IDLE_MOST_S)

    async def sweep(self) -> int:
        """Fire what is due now; returns how many deadlines were taken. What a deadline records
        is done here, for each in turn; its note goes out in the background."""
        now = self.clock() if self.clock is not None else None
        due = await self.store.deadlines.take(self.lease_ms, self.batch, now=now)
        for item, token in due:
            await self.fire(item, token)
        return len(due)

    async def fire(self, item: str, token: str) -> None:
        kind, _, rest = item.partition(":")
        approval_id, _, index = rest.partition(":")
        with structlog.contextvars.bound_contextvars(approval_id=approval_id, deadline=kind):
            again: float | None = None
            note: Note | None = None
            try:
                approval = await self.store.approvals.get(approval_id)
                if approval is not None and approval.terms:
                    with structlog.contextvars.bound_contextvars(
                        thread_id=approval.thread_id, interrupt_id=approval.interrupt_id
                    ):
                        if approval.status is ApprovalStatus.PENDING and approval.card_ts is None:
                            # due before its card is out: it waits for the card, and then counts
                            # from when the card is visible (`Store.set_card`)
                            log.info("deadline_waits_for_card")
                            again = await self.now() + CARD_WAIT_S
                        elif kind == "expire":  # (again after a failed notice: it is said once)
                            note = await self.expire(approval, int(index))
                        elif approval.status is not ApprovalStatus.PENDING:
                            pass  # decided: no reminder, no escalation
                        elif kind == "remind":
                            note, again = await self.remind(approval)
                        elif kind == "escalate":
                            note = await self.escalate(approval, int(index))
            except Exception as exc:
                if is_outage(exc):
                    raise
                again = self._again(item, repr(exc), await self.now())
            if note is None:
                self._failures.pop(item, None)
                await self.store.deadlines.done(item, token, again)
            elif len(self._notes) >= self.notes_at_once:  # Slack is that slow: say it a little later
                note.close()
                await self.store.deadlines.done(item, token, await self.now() + 5)
            else:
                task = asyncio.create_task(self._say(item, token, note, again))
                self._notes.add(task)
                task.add_done_callback(self._notes.discard)

    async def _say(self, item: str, token: str, note: Note, again: float | None) -> None:
        """Post a deadline's note; a failed one comes due again in a moment (a few times)."""
        try:
            await note
            self._failures.pop(item, None)
        except Exception as exc:  # Slack failed or refused: try again in a moment, a few times
            again = self._again(item, repr(exc), await self.now())
        try:
            await self.store.deadlines.done(item, token, again)
        except Exception as exc:  # Redis away: the lease lapses and the deadline comes due again
            log.warning("deadline_not_released", item=item, error=repr(exc))

    async def expire(self, approval: Approval, index: int) -> Note | None:
        """Expire the action unless it was decided (a click may have expired it already: the
        decide script does after the limit); the note says so once."""
        terms = approval.terms
        assert terms is not None
        limit = terms.timeout.get(index)
        question = approval.request.kind is RequestKind.QUESTION
        answer = terms.question_answer if question else None
        if (
            question
            and approval.status is ApprovalStatus.PENDING
            and expiry_decision(approval, index, terms) is None
        ):
            log.error("question_cannot_expire", reason="the configured answer does not fit its schema")
            return self.router.slack.thread_reply(  # never an answer the graph would refuse
                approval,
                f"⌛ This question is past its time limit ({spoken(limit or 0)}), but the configured "
                "answer does not fit the form it asks for, so it still waits for a person.",
                f"expired:{approval.approval_id}:{index}",
            )
        verdict = await self.store.decisions.decide_for_people(
            approval.approval_id, Outcome.EXPIRED, expiry_message(limit), index=index, answer=answer
        )
        if verdict.result in (DecisionResult.RECORDED, DecisionResult.COMPLETE, DecisionResult.UNANSWERABLE):
            log.info("approval_expired", index=index, result=verdict.result.value, limit_s=limit)
            OUTCOMES.labels("expired").inc()
        fresh = await self.store.approvals.get(approval.approval_id) or approval
        closed = fresh.status is ApprovalStatus.EXPIRED and (fresh.error or "").startswith("expired")
        earlier = fresh.decided.get(index)
        if not closed and (earlier is None or earlier.outcome is not Outcome.EXPIRED):
            return None  # decided in time (a click won)
        if closed:  # (closed by a click after the limit: off the lists, the run ended)
            await self.store.decisions.close_unanswered(approval.approval_id)
        await self.store.cards.touch(approval.approval_id)
        actions = approval.request.actions
        what = f"`{escape(actions[index].name)}`" if actions else "The question"
        within = f"within {spoken(limit)}" if limit else "in time"
        undecided = [i for i in range(fresh.size) if i not in fresh.decided]
        if closed:
            text = (
                f"⌛ No decision {within}, and {'this action' if fresh.size == 1 else 'an action here'} "
                "allows neither reject nor respond, so the agent was not resumed; nothing runs."
            )
        elif actions and undecided:  # the rest of the batch still waits
            text = (
                f"⌛ {what} expired: no decision {within}, so it will not run. "
                "The agent hears once the rest is decided."
            )
        elif not undecided and outcome_told(fresh):
            return None  # its outcome line says it (`Router.settled`), once the card shows it
        elif actions:
            text = f"⌛ {what} expired: no decision {within}, so it was not run. The agent was told."
        else:
            text = f"⌛ The question expired: no answer {within}. Signoff answered: {escape(answer or '')}"
        # (closed unanswered: said once for the approval, whichever action's deadline says it)
        said = f"expired:{approval.approval_id}:{'closed' if closed else index}"
        return self.router.slack.thread_reply(approval, text, said)

    async def remind(self, approval: Approval) -> tuple[Note, float]:
        """Notify who may still decide; returns the note and when the next reminder is due."""
        terms = approval.terms
        assert terms is not None and terms.remind_every
        waited = await self.now() - approval.visible_since
        number = max(1, int(waited // terms.remind_every))
        log.info("approval_reminded", number=number, waited_s=int(waited))

        async def note() -> None:  # (the phone line may ask Slack for a name: only in the note)
            line = await self.router.phone_line(approval)
            await self.router.notify(
                approval,
                f"⏰ Waiting {spoken(waited)} for a decision: {line}",
                f"remind:{approval.approval_id}:{number}",
                self.router.waiting_on(approval),
            )

        return note(), approval.visible_since + (number + 1) * terms.remind_every

    async def escalate(self, approval: Approval, after: int) -> Note:
        terms = approval.terms
        assert terms is not None
        to = terms.escalations.get(after, ())
        legacy = () if terms.escalate_after else to  # (terms stored before per-action escalation)
        if await self.store.deadlines.escalate(approval.approval_id, after, legacy):
            log.info("approval_escalated", to=list(to), after_s=after)
            await self.store.cards.touch(approval.approval_id)
        waited = spoken(await self.now() - approval.visible_since)

        async def note() -> None:
            line = await self.router.phone_line(approval)
            await self.router.notify(
                approval,
                f"⏫ Escalated after {waited} without a decision: {line}. You may decide it now",
                f"escalate:{approval.approval_id}:{after}",
                to,
            )

        return note()

    def _again(self, item: str, error: str, now: float, most: int = 10) -> float | None:
        """When to try a failed deadline again; None (dropped, logged) after `most` failures."""
        failures = self._failures[item] = self._failures.get(item, 0) + 1
        if failures >= most:
            del self._failures[item]
            log.error("deadline_dropped", item=item, error=error)
            return None
        log.warning("deadline_failed", item=item, error=error, failures=failures)
        return now + 5
