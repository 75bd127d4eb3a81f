"""All of the bot's Slack Web API calls, and the consumer of the runner's events.

The Web API client retries 429 (honouring Retry-After), 5xx and dropped
connections (slack_sdk's retry handlers); posts are throttled per channel to
about one a second. Decisions live in Redis before any Slack call is made, and
a card is always rebuilt from the record, so a failed update loses nothing:
the next one shows the truth.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.models.blocks import ActionsBlock, ButtonElement, MarkdownTextObject, SectionBlock
from slack_sdk.web.async_client import AsyncWebClient

from agent_runner.logs import get_logger
from agent_runner.store import BOTS_GROUP, Approval, Run, Store, StreamConsumer
from bot.cards import approval_card, cut, escape
from bot.markdown import split_mrkdwn, to_mrkdwn

log = get_logger("slack")

STATUS = {
    "started": "⏳ Working… {detail}",
    "tool": "🔧 Running {detail}…",
    "waiting": "✋ Waiting for an approval",
    "done": "✅ Done",
    "failed": "⚠️ Stopped with an error",
}


def web_client(token: str, base_url: str) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        retry_handlers=[
            AsyncRateLimitErrorRetryHandler(max_retry_count=12),  # replicas share one rate limit
            AsyncServerErrorRetryHandler(max_retry_count=3),
            AsyncConnectionErrorRetryHandler(max_retry_count=3),
        ],
    )


class Throttle:
    """A token bucket per key (a channel, a method): `burst` calls at once, then `rate` a second."""

    def __init__(self, rate: float = 1.0, burst: int = 3):
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait(self, key: str) -> None:
        async with self._locks.setdefault(key, asyncio.Lock()):
            now = time.monotonic()
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1:
                await asyncio.sleep((1 - tokens) / self.rate)
                now, tokens = time.monotonic(), 1.0
            self._buckets[key] = (tokens - 1, now)


class SlackIO:
    def __init__(self, client: AsyncWebClient, store: Store, destructive: tuple[str, ...] = ()):
        self.client = client
        self.store = store
        self.destructive = destructive
        # chat.postMessage: about 1 a second per channel; chat.postEphemeral: tier 4 (100+/min)
        self.posts = Throttle(rate=1.0, burst=3)
        self.ephemerals = Throttle(rate=1.5, burst=20)

    async def post(self, channel: str, text: str, thread_ts: str | None = None,
                   blocks: list[Any] | None = None, kind: str | None = None, **payload: Any) -> str:
        """Post a message; `kind` tags it with Slack message metadata (signoff_<kind>)."""
        await self.posts.wait(channel)
        metadata = {"event_type": f"signoff_{kind}", "event_payload": payload} if kind else None
        reply = await self.client.chat_postMessage(
            channel=channel, text=text, blocks=blocks, thread_ts=thread_ts,
            unfurl_links=False, unfurl_media=False, metadata=metadata,
        )
        return reply["ts"]

    async def run_thread(self, run: Run | None) -> str | None:
        """The run's Slack thread, starting one with a "working on" message if it has none.

        Several events of one run may reach several bot replicas at once: one of
        them claims the right to post the root, the others wait for it.
        """
        if run is None:
            return None
        thread_id = run.thread_id
        if run.thread_ts:
            return run.thread_ts
        if await self.store.once(f"root:{thread_id}", ttl_seconds=3_600):
            who = f" for <@{run.requester}>" if run.requester else ""
            ts = await self.post(run.channel, f"🤖 *{escape(run.graph)}* is working on this{who}: "
                                 f"{escape(cut(run.task, 500))}", kind="run", thread_id=thread_id)
            await self.store.save_run(run.model_copy(update={"thread_ts": ts}))
            await self.store.bind_thread(run.channel, ts, thread_id)  # replies there continue the run
            return ts
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            run = await self.store.run(thread_id)
            if run and run.thread_ts:
                return run.thread_ts
        return None

    async def post_card(self, approval: Approval) -> str:
        """Post the approval's card into its run's Slack thread."""
        text, blocks = approval_card(approval, self.destructive)
        thread_ts = await self.run_thread(await self.store.run(approval.thread_id)) or approval.thread_ts
        ts = await self.post(approval.channel, text, thread_ts, blocks, kind="approval",
                             approval_id=approval.approval_id, thread_id=approval.thread_id)
        await self.store.set_card(approval.approval_id, ts)
        return ts

    async def refresh_card(self, approval_id: str) -> Approval | None:
        """Rebuild the card from the record and edit it in place; returns the record read."""
        approval = await self.store.approval(approval_id)
        if approval is None or approval.card_ts is None:
            return approval
        text, blocks = approval_card(approval, self.destructive)
        await self.client.chat_update(channel=approval.channel, ts=approval.card_ts, text=text,
                                      blocks=blocks, parse="none")
        return approval

    async def thread_reply(self, approval: Approval, text: str) -> None:
        """A reply in the thread the card lives in (the run's thread)."""
        thread_ts = await self.run_thread(await self.store.run(approval.thread_id)) or approval.card_ts
        await self.post(approval.channel, text, thread_ts)

    async def ephemeral(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> None:
        await self.ephemerals.wait("workspace")
        await self.client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)

    async def say_in_run(self, thread_id: str, text: str, kind: str) -> None:
        run = await self.store.run(thread_id)
        if run is None:
            log.warning("no_run_for_message", thread_id=thread_id)
            return
        thread_ts = await self.run_thread(run)
        for chunk in split_mrkdwn(text):
            await self.post(run.channel, chunk, thread_ts, kind=kind, thread_id=thread_id)

    async def status(self, thread_id: str, state: str, detail: str = "") -> None:
        """The run's one status line in its thread, edited in place."""
        run = await self.store.run(thread_id)
        if run is None:
            return
        text = STATUS.get(state, "{detail}").format(detail=escape(cut(detail, 80)) if detail else "")
        ts = await self.store.status_line(thread_id)
        if ts:
            await self.client.chat_update(channel=run.channel, ts=ts, text=text, parse="none")
            return
        thread_ts = await self.run_thread(run)
        await self.store.set_status_line(thread_id, await self.post(run.channel, text, thread_ts, kind="status",
                                                                   thread_id=thread_id))

    async def failure(self, thread_id: str, error: str) -> None:
        """A failed run, in a sentence, with a Retry button that continues from the last checkpoint."""
        run = await self.store.run(thread_id)
        if run is None:
            return
        text = f"⚠️ The run failed: {escape(cut(error, 1_000))}"
        blocks = [
            SectionBlock(text=MarkdownTextObject(text=text)),
            ActionsBlock(block_id="retry", elements=[ButtonElement(
                text="Retry", action_id="retry", value=thread_id, style="primary")]),
        ]
        await self.post(run.channel, text, await self.run_thread(run), blocks,
                        kind="error", thread_id=thread_id)


class EventConsumer(StreamConsumer):
    """Turns the runner's announcements into Slack messages (the `bots` group)."""

    group = BOTS_GROUP

    def __init__(self, store: Store, slack: SlackIO, **options: Any):
        super().__init__(store, **options)
        self.stream = store.keys.events
        self.slack = slack
        self._locks: dict[str, asyncio.Lock] = {}

    async def handle(self, entry_id: str, fields: Mapping[str, str]) -> None:
        try:
            event = json.loads(fields["event"])
            kind = event["type"]
        except (KeyError, TypeError, ValueError):
            log.error("event_malformed", entry_id=entry_id)
            await self.ack(entry_id)
            return
        try:
            # One run's events in order (per replica): its card before its answer.
            async with self._locks.setdefault(event.get("thread_id", ""), asyncio.Lock()):
                await self._dispatch(kind, event)
        except Exception:
            # Left pending: reclaimed and retried after claim_idle_ms.
            log.exception("event_failed", type=kind, entry_id=entry_id)
            return
        await self.ack(entry_id)

    async def _dispatch(self, kind: str, event: dict[str, Any]) -> None:
        if kind == "approval":
            approval = await self.store.approval(event["approval_id"])
            if approval is None:
                return
            if approval.card_ts:  # delivered again after a crash: never post twice
                await self.slack.refresh_card(approval.approval_id)
            else:
                await self.slack.post_card(approval)
            log.info("card_posted", approval_id=approval.approval_id, thread_id=approval.thread_id)
        elif kind in ("resumed", "resume_failed"):
            await self.slack.refresh_card(event["approval_id"])
            if kind == "resume_failed":
                approval = await self.store.approval(event["approval_id"])
                if approval:
                    await self.slack.thread_reply(
                        approval, f"⚠️ The agent could not be resumed: {escape(cut(event.get('error', ''), 500))}")
        elif kind == "progress":
            await self.slack.status(event["thread_id"], event.get("state", ""), event.get("detail", ""))
        elif kind == "finished":
            await self.slack.say_in_run(event["thread_id"], to_mrkdwn(event.get("answer") or "Done."), "answer")
        elif kind == "failed":
            await self.slack.failure(event["thread_id"], event.get("error", ""))
