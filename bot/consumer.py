"""The bot's side of the events stream: the runner's announcements become Slack messages.

A pause becomes its card (the calls the policy decides, and those a trust grant covers, are
decided first, and only the asked ones are on it: `bot.policy_decisions`, `bot.trust`), a
finished run its answer, a failed run a message with Retry, a refused decision set a note
(its pause comes back on a new card). Every message is posted once (`Posts.once`), into the run's
thread. Slack being down or answering 5xx is waited out (`TryLater`), not
counted as the entry's failure.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

from bot.policy_decisions import decide_by_policy, say_decided
from bot.routing import Router
from bot.slack.io import SlackIO
from bot.trust import use_grants
from bot.views.text import cut, escape
from core.keys import BOTS_GROUP
from core.logs import get_logger
from core.messages import (
    AnyEvent,
    ApprovalCreated,
    DecisionsRefused,
    RunFailed,
    RunFinished,
    decode_event,
)
from core.outages import TryLater
from core.store import Store
from core.streams import Entry, StreamConsumer

log = get_logger("slack")


class EventConsumer(StreamConsumer[AnyEvent]):
    """Turns the runner's announcements into Slack messages (the `bots` group)."""

    group = BOTS_GROUP
    kind = "event"

    def __init__(self, store: Store, slack: SlackIO, router: Router, **options: Any):
        super().__init__(store, store.keys.consumed("events"), **options)
        self.slack = slack
        self.router = router
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # thread id -> (lock, entries using it)

    @property
    def name(self) -> str:
        return "bot events consumer"

    def decode(self, fields: dict[str, str]) -> AnyEvent:
        return decode_event(fields)

    async def handle(self, entry: Entry, event: AnyEvent) -> None:
        # One run's events in order (per replica): its card before its answer.
        thread_id = event.thread_id
        lock, users = self._locks.get(thread_id) or (asyncio.Lock(), 0)
        self._locks[thread_id] = (lock, users + 1)
        try:
            async with lock:
                await self._dispatch(event, entry.id)
        except SlackApiError as exc:
            if exc.response.status_code >= 500 or exc.response.status_code == 429:
                raise TryLater(f"Slack answered {exc.response.status_code}") from exc
            raise  # Slack refused the call itself: counted, dead-lettered after a few tries
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TryLater(f"Slack unreachable: {exc!r}") from exc
        finally:
            lock, users = self._locks[thread_id]
            if users == 1:
                del self._locks[thread_id]
            else:
                self._locks[thread_id] = (lock, users - 1)

    async def _dispatch(self, event: AnyEvent, entry_id: str) -> None:
        post_key = getattr(event, "command_id", None) or entry_id
        match event:
            case ApprovalCreated():
                approval = await self.store.approvals.get(event.approval_id)
                if approval is None:
                    return
                if approval.terms is None:  # the policy's quorum and time limits, before any click
                    permissions = self.router.permissions
                    terms = permissions.terms(approval, await permissions.matches(approval))
                    await self.store.deadlines.set_terms(approval, terms)
                    approval = await self.store.approvals.get(event.approval_id) or approval
                policy = self.router.permissions.rules
                approval = await decide_by_policy(self.store, policy, approval)  # before any card
                approval = await use_grants(self.store, self.router.permissions, approval)  # (`bot.trust`)
                await say_decided(self.slack, policy, approval)
                if len(approval.by_policy()) == approval.size:  # the policy decided it all: no card
                    return
                await self.router.deliver(approval)
                # the run's plan links the call's task to its card: drawn again now the card has one
                await self.store.cards.touch_status(approval.thread_id)
                log.info("card_posted", approval_id=approval.approval_id, thread_id=approval.thread_id)
            case RunFinished():
                await self.slack.surfaces.answer(
                    event.thread_id, event.answer or "Done.", f"answer:{post_key}"
                )
            case RunFailed():
                await self.slack.failure(event.thread_id, event.error, f"failed:{post_key}")
            case DecisionsRefused():
                await self._refused(event)

    async def _refused(self, event: DecisionsRefused) -> None:
        """The runner refused a decision set: nothing was sent; the pause comes back on a new card."""
        approval = await self.store.approvals.get(event.approval_id)
        if approval is None:
            return
        await self.store.cards.touch(approval.approval_id)
        reason = escape(cut(event.error, 500))
        then = (
            "It is offered again on a new card."
            if event.offered_again
            else "Whatever the agent waits for now has a card of its own."
        )
        await self.slack.thread_reply(
            approval,
            f"⚠️ The agent could not take the decisions on this approval, so nothing was sent: {reason}. {then}",
            f"refused:{approval.approval_id}",
        )
