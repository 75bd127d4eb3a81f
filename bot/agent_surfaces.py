"""Slack's agent surfaces for a run: its plan, its streamed answer, its session's status.

* **The plan.** The run's status message carries, under its status line, a `plan` block of
  one task per tool call (`bot.plan`), redrawn by the status lane as the run goes: no post of
  its own, so a run posts no more messages than before.
* **The answer, streamed.** The agent's final answer goes into the run's thread through
  `chat.startStream` / `chat.appendStream` / `chat.stopStream`, in pieces of the finished
  answer, as Markdown rebuilt by `bot.markdown.to_markdown` (the same escaping as every other
  message). It is made once: the stream is claimed like any post (`SlackIO.post_once`); a
  stream cut off by a crash is deleted and streamed again; where Slack refuses a stream (a
  channel type, a workspace, a stream that ended early) the answer is posted as messages, as
  it was before streams.
* **The session.** In a DM with the app, the assistant thread's status says what the run
  waits for ("is waiting for Alice's approval") and clears when it answers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import MarkdownTextObject, SectionBlock

from bot.markdown import to_markdown, to_mrkdwn
from bot.pacing import POST_RATE, ROUTINE, URGENT
from bot.plan import Gate, plan_block
from bot.slack_state import PostClaim
from bot.text import cut
from core.logs import get_logger
from core.records import Approval, ApprovalStatus, Run, RunState

if TYPE_CHECKING:
    from bot.slack_io import SlackIO

log = get_logger("slack")

PIECE = 600  # characters a streaming call adds of a finished answer
APPEND_RATE = (1.5, 10)  # chat.appendStream: Tier 4 (100+ a minute), shared by every stream
REFUSED_FOR_S = 600.0  # a channel that refused a stream is not asked again for this long
AS_MESSAGES = "as-messages"  # an answer's post id when it went out as chat.postMessage
SESSION_WORDS = {RunState.RUNNING: "is working on it…", RunState.FAILED: ""}


def pieces(text: str, size: int = PIECE) -> list[str]:
    """`text` in consecutive slices of at most `size`, cut after a line where one is near."""
    out: list[str] = []
    while len(text) > size:
        at = text.rfind("\n", 0, size) + 1
        at = at if at > size // 2 else size
        out.append(text[:at])
        text = text[at:]
    return [*out, text] if text else out


class Surfaces:
    """What `SlackIO` draws on Slack's agent surfaces (one per SlackIO)."""

    def __init__(self, slack: SlackIO):
        self.slack = slack
        self._team: str | None = None
        self._refused: dict[str, float] = {}  # channel -> until when (monotonic) streams are not tried
        self._sessions: dict[str, str] = {}  # thread id -> the status its DM thread shows
        self._no_sessions: set[str] = set()  # DMs whose threads are not assistant threads

    # the plan -------------------------------------------------------------------

    async def with_plan(self, thread_id: str, text: str) -> list[Any] | None:
        """The status message's blocks: its line, then the run's plan (None before any call)."""
        store = self.slack.store
        gates: list[Gate] = []
        for approval in await store.thread_approvals(thread_id, limit=50):
            if not approval.replaced_by:  # (a refused set: the approval that replaced it says)
                gates += await self._gates(approval)
        drawn = plan_block(await store.run_state(thread_id), await store.plan_tasks(thread_id), gates)
        if drawn is None:
            return None
        return [SectionBlock(text=MarkdownTextObject(text=text)), drawn]

    async def _gates(self, approval: Approval) -> list[Gate]:
        slack = self.slack
        view = await slack.card_view(approval)
        approvers = tuple(
            [await slack.name_of(i) if i.startswith(("U", "W")) else f"@{i}" for i in view.approvers]
        )
        link = None
        if approval.card_ts:
            link = await slack.state.posted(approval.thread_id, f"link:{approval.approval_id}")
            if link is None and (link := await slack.permalink(approval.card_where, approval.card_ts)):
                await slack.state.save_post(approval.thread_id, f"link:{approval.approval_id}", link)
        return [
            Gate(approval, index, approvers, dict(view.names), link)
            for index in range(len(approval.request.actions))
        ]

    # the answer ------------------------------------------------------------------

    async def answer(self, thread_id: str, answer: str, post_id: str) -> None:
        """The run's answer in its thread, once: streamed where Slack takes it, else posted."""
        run = await self.slack.store.run(thread_id)
        if run is None:
            log.warning("no_run_for_message", thread_id=thread_id)
            return
        thread_ts = await self.slack.run_thread(run)
        if not await self._streamed(run, thread_ts, answer, post_id):
            await self.slack.say_in_run(thread_id, to_mrkdwn(answer), "answer", post_id)

    async def _streamed(self, run: Run, thread_ts: str, answer: str, post_id: str) -> bool:
        """Whether the answer is in the thread as one streamed message (False: post it)."""
        slack, thread_id = self.slack, run.thread_id
        direct = run.channel.startswith("D")
        if not direct and not run.requester:  # a stream in a channel is for one person
            return False
        attempt = f"{slack.owner}-{uuid.uuid4().hex[:8]}"
        while True:
            state, value = await slack.state.claim_post(thread_id, post_id, attempt, slack.lease_ms)
            if state is PostClaim.POSTED:
                return value != AS_MESSAGES
            if state is PostClaim.BUSY:
                await asyncio.sleep(0.2)
                continue
            break
        if state is PostClaim.RETRY and (cut_off := await slack.state.posted(thread_id, f"stream:{post_id}")):
            log.warning("cut_off_stream_deleted", thread_id=thread_id, post_id=post_id, ts=cut_off)
            await slack.delete(run.channel, cut_off)  # a stream a crash cut off: streamed again whole
        if time.monotonic() < self._refused.get(run.channel, 0.0):
            return await self._as_messages(thread_id, post_id)
        try:
            ts = await self._stream(run, thread_ts, to_markdown(answer), post_id)
        except SlackApiError as exc:
            if exc.response.status_code != 200:  # Slack did not answer (5xx): tried again later
                await asyncio.shield(slack.state.lapse_post(thread_id, post_id, value))
                raise
            error = exc.response.get("error")
            log.info("answer_not_streamed", thread_id=thread_id, channel=run.channel, error=error)
            self._refused[run.channel] = time.monotonic() + REFUSED_FOR_S
            if started := await slack.state.posted(thread_id, f"stream:{post_id}"):
                await slack.delete(run.channel, started)  # (one that ended early: posted whole instead)
            return await self._as_messages(thread_id, post_id)
        except BaseException:
            await asyncio.shield(slack.state.lapse_post(thread_id, post_id, value))
            raise
        await slack.keep(thread_id, post_id, run.channel, ts)
        return True

    async def _as_messages(self, thread_id: str, post_id: str) -> bool:
        await self.slack.state.save_post(thread_id, post_id, AS_MESSAGES)
        return False

    async def _stream(self, run: Run, thread_ts: str, markdown: str, post_id: str) -> str:
        slack, channel = self.slack, run.channel
        parts = pieces(markdown or "Done.")
        recipient: dict[str, Any] = {}
        if not channel.startswith("D"):
            recipient = {"recipient_user_id": run.requester, "recipient_team_id": await self.team()}
        await slack.limits.wait(f"post:{channel}", POST_RATE, URGENT)
        started = await slack.client.chat_startStream(channel=channel, thread_ts=thread_ts, **recipient)
        ts = str(started["ts"])
        await slack.state.save_post(run.thread_id, f"stream:{post_id}", ts)
        for part in parts:  # (as a model's tokens would come: the message grows as people watch)
            await slack.limits.wait("append", APPEND_RATE, URGENT)
            await slack.client.chat_appendStream(channel=channel, ts=ts, markdown_text=part)
        await slack.client.chat_stopStream(
            channel=channel,
            ts=ts,
            metadata={
                "event_type": "signoff_answer",
                "event_payload": {"post_id": post_id, "thread_id": run.thread_id},
            },
        )
        return ts

    async def team(self) -> str | None:
        """The workspace's id (auth.test, once)."""
        if self._team is None:
            self._team = (await self.slack.client.auth_test()).get("team_id")
        return self._team

    # the session -------------------------------------------------------------------

    async def session(self, run: Run) -> None:
        """A DM's assistant thread says what the run does, only when that changes."""
        if not run.channel.startswith("D") or not run.thread_ts or run.channel in self._no_sessions:
            return
        state = await self.slack.store.run_state(run.thread_id)
        if state is RunState.WAITING:
            names: list[str] = []
            for approval in await self.slack.store.thread_approvals(run.thread_id, limit=10):
                if approval.status is ApprovalStatus.PENDING:
                    names += (await self._gates(approval))[0].approvers if approval.request.actions else []
            who = " or ".join(dict.fromkeys(names)) or "a person"
            status = cut(f"is waiting for {who}'s approval", 100)
        else:
            status = SESSION_WORDS.get(state or RunState.RUNNING, "")
        if self._sessions.get(run.thread_id, "") == status:
            return
        await self.slack.limits.wait("update", (1.0, 5), ROUTINE)
        try:
            await self.slack.client.assistant_threads_setStatus(
                channel_id=run.channel, thread_ts=run.thread_ts, status=status
            )
        except SlackApiError as exc:  # not an assistant thread, no scope: a nicety, not tried again
            log.info("session_status_refused", channel=run.channel, error=exc.response.get("error"))
            self._no_sessions.add(run.channel)
            return
        if status:
            self._sessions[run.thread_id] = status
        else:
            self._sessions.pop(run.thread_id, None)
