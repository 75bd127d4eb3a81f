"""The bot's Slack Web API calls: posting once, in the run's thread, at Slack's pace.

Decisions live in Redis before any Slack call is made, and a card is always
rebuilt from the record, so a failed update loses nothing: the next one shows
the truth. Beyond that, three rules keep Slack traffic honest under load and
failure:

* Every message a run posts has a post id (its root, each card, each answer)
  and is made at most once: the poster claims it in Redis before posting and
  saves its ts after. A claim that lapsed (the poster died, or a 500 left it
  unsure whether Slack took the message) is followed by a look in the Slack
  thread, by message metadata, before posting again; a second copy found by a
  late poster is deleted. One card per approval, one root per run.
* Nothing a run says goes anywhere but its thread: the root is retried until
  it exists, and everything else waits for it.
* Slack's rate limits are shared by every replica (limiters in Redis, see
  `bot.slack.pacing`) and urgent traffic goes first: answers, cards and refusals
  before the status line. Card refreshes and status-line edits are coalesced
  marks drained by the `Refresher` at chat.update's rate, so a burst of them
  never holds up an answer.

The clients it is given are `bot.slack.clients`'s.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import ActionsBlock, ButtonElement, MarkdownTextObject, SectionBlock
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.clicks import Reply
from bot.slack.clients import RedactingClient
from bot.slack.pacing import EPHEMERAL_RATE, ROUTINE, UPDATE_RATE, URGENT, Limiter, Throttle
from bot.slack.posts import INTERNAL, HistoryLimits, Posts
from bot.slack.state import SlackState
from bot.slack.surfaces import Surfaces
from bot.views.card_words import settled
from bot.views.cards import CardView, approval_card
from bot.views.markdown import split_mrkdwn
from bot.views.text import cut, escape
from core.logs import get_logger, redact_deep
from core.records import Approval, Run, RunState
from core.store import Store

log = get_logger("slack")

DRAWN_KEPT = 5_000  # status messages whose last drawing this process remembers


def _digest(text: str, blocks: list[Any] | None) -> str:
    """What a status message shows, in 64 characters (its text and its blocks, as sent)."""
    sent = [b.to_dict() if hasattr(b, "to_dict") else b for b in blocks or []]
    return hashlib.sha256(json.dumps([text, sent], sort_keys=True).encode()).hexdigest()


OUTCOME_WORDS = {"auto": "decided by policy", "trusted": "approved under trust"}

STATUS = {
    RunState.RUNNING: "⏳ Working… {detail}",
    RunState.WAITING: "✋ Waiting for an approval",
    RunState.FINISHED: "✅ Finished",
    RunState.FAILED: "⚠️ Stopped with an error",
}


def root_line(run: Run, name: str = "", state: RunState | None = None) -> str:
    """The first line of a run's root when Signoff posts it (the status follows on the next).
    The requester by `name`, not a mention: she hears once, of each request's outcome. Once the
    run has ended (`state`) it no longer says it is working."""
    who = f" for *{escape(name or run.requester or '')}*" if run.requester else ""
    doing = "worked" if state in (RunState.FINISHED, RunState.FAILED) else "is working"
    return f"🤖 *{escape(run.graph)}* {doing} on this{who}: {escape(cut(run.task, 500))}"


def status_text(state: RunState | None, detail: str = "", tool: str = "") -> str:
    """The run's status line: what it is doing now."""
    if state is RunState.RUNNING and tool:
        return f"🔧 Running {escape(cut(tool, 80))}…"
    return STATUS.get(state or RunState.RUNNING, "").format(detail=escape(cut(detail, 80))).strip()


async def _plain_view(approval: Approval) -> CardView:
    return CardView()


async def _nothing(approval: Approval) -> None:
    return None


async def _as_is(user: str) -> str:
    return user


def _nobody(approval: Approval) -> list[tuple[str, ...]]:
    return [() for _ in approval.request.actions]


class SlackIO:
    """A run's messages in Slack: posted once, in the run's thread, at Slack's pace; cards and
    status lines edited in place.

    `card_view` says what a card shows besides its record (approvers, summaries, names): plain
    until `bot.routing.Router` installs its `view`, which needs this object's client to look
    people's names up, so it cannot be given here."""

    def __init__(
        self,
        client: AsyncWebClient,
        store: Store,
        destructive: tuple[str, ...] = (),
        prompt: AsyncWebClient | None = None,
        lease_ms: int = 30_000,
        streams: AsyncWebClient | None = None,
        history: HistoryLimits = INTERNAL,
    ):
        self.client = client
        self.prompt = prompt or client
        self.streams = streams or self.prompt  # the streaming methods: nothing sent twice
        self.store = store
        self.state = SlackState(store.redis, store.keys)
        self.destructive = destructive
        self.limits = Limiter(self.state)
        self.ephemerals = Throttle(*EPHEMERAL_RATE)
        self.lease_ms = lease_ms
        # each of a run's messages made once (claim, find, post, save, lapse: one room); a lost
        # one is looked for within Slack's history limits (`history`), read through the prompt
        # client, which leaves waiting out a 429 to the look
        self.posts = Posts(
            store.redis, store.keys, client, self.limits, store.cards, lease_ms, self.prompt, history
        )
        self.card_view: Callable[[Approval], Awaitable[CardView]] = _plain_view  # the Router's
        self.on_settled: Callable[[Approval], Awaitable[None]] = _nothing  # the Router's: told once
        self.name_of: Callable[[str], Awaitable[str]] = _as_is  # the Router's: display names
        self.deciders: Callable[[Approval], list[tuple[str, ...]]] = _nobody  # the Router's: per action
        self._replies: aiohttp.ClientSession | None = None  # one pool for every response_url
        self.surfaces = Surfaces(self)  # the plan, the streamed answer, the DM session's status
        self._drawn: dict[str, str] = {}  # status message ts -> what this process last drew there

    # a run's thread -------------------------------------------------------------

    async def run_thread(self, run: Run) -> str:
        """The run's Slack thread, opened first: its root, which says what the run is doing too
        (unless a person's message is the root: then the status line is a reply the status lane
        posts, after any card waiting), posted once, and retried until it exists."""
        ts = run.thread_ts
        if not ts:  # its root says what the run is doing too: one post, not two
            text = f"{await self._root_line(run)}\n{await self.status_text(run.thread_id)}"
            ts = await self.posts.once(run.thread_id, "root", run.channel, text, kind="run")
            await self.state.set_status_line(run.thread_id, ts)  # (first: the run's thread_ts says "opened")
            current = await self.store.runs.get(run.thread_id) or run
            if current.thread_ts != ts:
                await self.store.runs.save(current.model_copy(update={"thread_ts": ts}))
            await self.state.bind_thread(run.channel, ts, run.thread_id)  # replies there continue the run
        return ts

    async def _root_line(self, run: Run) -> str:
        state, _, _ = await self.store.runs.state_detail(run.thread_id)
        return root_line(run, await self.name_of(run.requester) if run.requester else "", state)

    async def status_text(self, thread_id: str) -> str:
        state, detail, tool = await self.store.runs.state_detail(thread_id)
        text = status_text(state, detail, tool)
        if state is RunState.FINISHED:  # the truth about the outcome: what people stopped or changed
            counts: dict[str, int] = {}
            for approval in await self.store.approvals.of_thread(thread_id, limit=50):
                for decided in approval.decided.values():
                    kind = str(decided.decision.get("type"))
                    if decided.outcome is not None:  # expired, withdrawn: not a person's reject
                        word = OUTCOME_WORDS.get(decided.outcome.value, decided.outcome.value)
                        counts[word] = counts.get(word, 0) + 1
                    elif kind in ("reject", "edit", "respond"):
                        word = {"reject": "rejected", "edit": "edited", "respond": "responded"}[kind]
                        counts[word] = counts.get(word, 0) + 1
            if counts:
                text += " — " + ", ".join(f"{n} {word}" for word, n in counts.items())
            if set(counts) & {"rejected", "expired", "withdrawn", "responded"}:  # ✅ only if all ran
                text = text.replace("✅", "🏁", 1)
        return text

    async def _run(self, thread_id: str) -> Run | None:
        run = await self.store.runs.get(thread_id)
        if run is None:
            log.warning("no_run_for_message", thread_id=thread_id)
        return run

    async def post_card(
        self,
        approval: Approval,
        text: str,
        view: CardView,
        channel: str | None = None,
        broadcast: bool = False,
    ) -> str:
        """Post the approval's card (once): into its run's Slack thread, or as a message of its
        own in `channel` when the policy routes it there. `text` is what a phone shows."""
        shown = approval if approval.shown_at else approval.model_copy(update={"shown_at": time.time()})
        _, blocks = approval_card(shown, self.destructive, view)  # (its time limit counts from now)
        post_id = f"card:{approval.approval_id}"
        if channel is not None:
            ts = await self.posts.once(
                approval.thread_id,
                post_id,
                channel,
                text,
                None,
                blocks,
                kind="approval",
                approval_id=approval.approval_id,
            )
        else:
            run = await self.store.runs.get(approval.thread_id)
            thread_ts = await self.run_thread(run) if run else approval.thread_ts
            ts = await self.posts.once(
                approval.thread_id,
                post_id,
                approval.channel,
                text,
                thread_ts,
                blocks,
                kind="approval",
                broadcast=broadcast,
                approval_id=approval.approval_id,
            )
        await self.store.cards.set(approval, ts, channel)
        return ts

    async def permalink(self, channel: str, ts: str) -> str | None:
        try:
            reply = await self.client.chat_getPermalink(channel=channel, message_ts=ts)
            return reply.get("permalink")
        except Exception as exc:  # a link is a nicety: the message says where to look without it
            log.warning("permalink_failed", error=repr(exc))
            return None

    async def card_link(self, approval: Approval) -> str | None:
        """The permalink of the approval's card (asked of Slack once, kept with the run's posts)."""
        if not approval.card_ts:
            return None
        kept = f"permalink:{approval.approval_id}"
        link = await self.posts.posted(approval.thread_id, kept)
        if link is None and (link := await self.permalink(approval.card_where, approval.card_ts)):
            await self.posts.save(approval.thread_id, kept, link)
        return link

    async def thread_reply(
        self, approval: Approval, text: str, post_id: str, broadcast: bool = False, kind: str = "note"
    ) -> None:
        """A reply in the run's thread (decisions, reasons, links); `broadcast`: sent to the channel too."""
        thread_ts = approval.thread_ts  # the run's thread when the approval was made (it never moves)
        if not thread_ts:
            run = await self.store.runs.get(approval.thread_id)
            thread_ts = await self.run_thread(run) if run else approval.card_ts
        await self.posts.once(
            approval.thread_id, post_id, approval.channel, text, thread_ts, kind=kind, broadcast=broadcast
        )

    async def direct_message(self, thread_id: str, user: str, text: str, post_id: str) -> None:
        """A message in the app's direct messages with `user` (once)."""
        await self.posts.once(thread_id, post_id, user, text, kind="notice")

    async def say_in_run(self, thread_id: str, text: str, kind: str, post_id: str) -> None:
        run = await self._run(thread_id)
        if run is None:
            return
        thread_ts = await self.run_thread(run)
        for number, chunk in enumerate(split_mrkdwn(text)):
            await self.posts.once(thread_id, f"{post_id}:{number}", run.channel, chunk, thread_ts, kind=kind)

    async def failure(self, thread_id: str, error: str, post_id: str) -> None:
        """A failed run, in a sentence, with a Retry button that continues from the last checkpoint."""
        run = await self._run(thread_id)
        if run is None:
            return
        text = f"⚠️ The run failed: {escape(cut(error, 1_000))}"
        blocks = [
            SectionBlock(text=MarkdownTextObject(text=text)),
            ActionsBlock(
                block_id="retry",
                elements=[ButtonElement(text="Retry", action_id="retry", value=thread_id, style="primary")],
            ),
        ]
        await self.posts.once(
            thread_id, post_id, run.channel, text, await self.run_thread(run), blocks, kind="error"
        )

    async def ephemeral(
        self,
        channel: str,
        user: str,
        text: str,
        thread_ts: str | None = None,
        blocks: list[Any] | None = None,
    ) -> None:
        await self.ephemerals.wait("workspace")
        await self.client.chat_postEphemeral(
            channel=channel, user=user, text=text, thread_ts=thread_ts, blocks=blocks
        )

    # a clicked card, changed at once ---------------------------------------------

    def answerable(self, response_url: str) -> bool:
        """Whether `response_url` is Slack's (or the Slack this bot talks to: the stand-in's)."""
        given, api = urlsplit(response_url), urlsplit(self.client.base_url)
        if given.scheme == "https" and given.netloc == "hooks.slack.com":
            return True
        return (given.scheme, given.netloc) == (api.scheme, api.netloc) and given.scheme in ("http", "https")

    async def replace_card(self, approval_id: str, reply: Reply) -> Approval | None:
        """Show the card's state at once through the click's `response_url` (replace_original:
        Slack's own channel for answering an interaction, not paced like chat.update); returns the
        record as it is once the card is sent, or None when it cannot (not a click on the card,
        Slack refused the URL: used up, expired). The card keeps the URL for its next changes
        (`Store.take_reply`). If the record moved on while the card was sent, a card-lane mark
        follows, so the last word is the record's. Two round trips to Redis around Slack's one."""
        if not self.answerable(reply.response_url):
            return None
        approval, url = await self.store.cards.take_reply(approval_id, reply.response_url, reply.message_ts)
        if approval is None or url is None or not await self._replace(approval, url):
            return None
        now = await self.store.cards.sent(approval_id, approval.thread_id)  # its task in the plan too
        if now != approval:
            await self.store.cards.touch(approval_id)
        elif settled(approval):
            await self.on_settled(approval)
        return now

    async def _replace(self, approval: Approval, url: str) -> bool:
        """The card, rendered from `approval`, through a response_url (replace_original)."""
        text, blocks = approval_card(approval, self.destructive, await self.card_view(approval))
        body = redact_deep({"text": text, "blocks": [b.to_dict() for b in blocks]})
        if self._replies is None or self._replies.closed:
            self._replies = aiohttp.ClientSession()
        try:
            sent = await AsyncWebhookClient(url, timeout=5, session=self._replies).send(
                text=body["text"], blocks=body["blocks"], replace_original=True
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("card_reply_failed", approval_id=approval.approval_id, error=repr(exc))
            return False
        if sent.status_code != 200:
            log.info(
                "card_reply_refused",
                approval_id=approval.approval_id,
                status=sent.status_code,
                body=cut(sent.body, 80),
            )
            return False
        return True

    async def close(self) -> None:
        """Close the connections kept for response_urls and the Web API (at shutdown)."""
        if self._replies is not None:
            await self._replies.close()
        for client in {id(c): c for c in (self.client, self.prompt, self.streams)}.values():
            if isinstance(client, RedactingClient):
                await client.close()

    async def edit(self, channel: str, ts: str, text: str) -> None:
        """Change a message's text (a notice, once its request is decided), at chat.update's pace."""
        await self.limits.wait("update", UPDATE_RATE, ROUTINE)
        try:
            await self.prompt.chat_update(channel=channel, ts=ts, text=text, parse="none")
        except SlackApiError as exc:  # deleted meanwhile, say: a notice is a nicety
            log.info("notice_not_changed", error=exc.response.get("error"))

    # cosmetic updates (the Refresher calls these) --------------------------------

    async def refresh_card(self, approval_id: str) -> Approval | None:
        """Rebuild the card from the record and edit it in place (through the response_url the
        card keeps from its last click while it lasts, else chat.update at its workspace pace);
        returns the record read."""
        approval, url = await self.store.cards.take_reply(approval_id)  # the last click's, while it lasts
        if approval is None or approval.card_ts is None:
            return approval
        try:
            if not (url is not None and self.answerable(url) and await self._replace(approval, url)):
                text, blocks = approval_card(approval, self.destructive, await self.card_view(approval))
                await self.limits.wait("update", UPDATE_RATE, URGENT)
                await self.prompt.chat_update(
                    channel=approval.card_where, ts=approval.card_ts, text=text, blocks=blocks, parse="none"
                )
        finally:  # its outcome told, the notices that asked for it changed (once): even when the
            if settled(approval):  # card itself is gone (deleted, archived channel)
                await self.on_settled(approval)
            await self.store.cards.touch_status(approval.thread_id)  # and its task in the run's plan
        return approval

    async def status(self, thread_id: str) -> float | None:
        """The run's one status message in its thread, edited in place to its latest state: its
        line, and its plan under it (`bot.slack.surfaces`); in a DM, the session's status too.
        Returns when (epoch seconds) the lane should come back: a waiting DM's status is set again."""
        run = await self.store.runs.get(thread_id)
        if run is None:
            return None
        try:
            await self._status_message(run)
        finally:  # (after the message: Slack drops a status at the app's post)
            again = await self.surfaces.session(run)
        return again

    async def _status_message(self, run: Run) -> None:
        thread_id = run.thread_id
        ts = await self.state.status_line(thread_id)
        if not ts and not run.thread_ts:  # opening the thread posts its root, with the latest state
            await self.run_thread(run)
            return
        if not ts and (root := await self.posts.posted(thread_id, "root")):
            ts = root  # Signoff posted the root (cut off before it said so): it carries the status
            await self.state.set_status_line(thread_id, ts)
        text = await self.status_text(thread_id)
        if not ts:  # a person's message is the root: the line is a reply, after any card waiting
            assert run.thread_ts is not None
            line = await self.posts.once(
                thread_id,
                "status",
                run.channel,
                text,
                run.thread_ts,
                await self.surfaces.with_plan(thread_id, text),
                kind="status",
                priority=ROUTINE,
            )
            await self.state.set_status_line(thread_id, line)
            return
        if ts == run.thread_ts:  # Signoff's root carries the status
            text = f"{await self._root_line(run)}\n{text}"
        blocks = await self.surfaces.with_plan(thread_id, text)
        drawn = _digest(text, blocks)
        if self._drawn.get(ts) == drawn:  # drawn so already (a mark made while it was being drawn)
            return
        await self.limits.wait("update", UPDATE_RATE, ROUTINE)
        await self.prompt.chat_update(channel=run.channel, ts=ts, text=text, blocks=blocks, parse="none")
        self._drawn[ts] = drawn
        while len(self._drawn) > DRAWN_KEPT:
            self._drawn.pop(next(iter(self._drawn)))
