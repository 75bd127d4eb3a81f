"""Slack's agent surfaces for a run: its plan, its streamed answer, its session's status.

* **The plan.** The run's status message carries, under its status line, a `plan` block of
  one task per tool call (`bot.views.plan`), redrawn by the status lane as the run goes: no post of
  its own, so a run posts no more messages than before.
* **The answer, streamed.** The agent's final answer goes into the run's thread through
  `chat.startStream` / `chat.appendStream` / `chat.stopStream`, in pieces of the finished
  answer, as Markdown rebuilt by `bot.views.markdown.to_markdown` (the same escaping as every other
  message). It is made once: the stream is claimed like any post (`Posts.once`); a
  stream cut off by a crash is deleted and streamed again; where Slack refuses a stream (a
  channel type, a workspace, a stream that ended early) the answer is posted as messages, as
  it was before streams.
* **The session.** In a DM with the app, the thread's status says what the run waits for ("is
  waiting for Alice's approval") and clears when it answers (`assistant.threads.setStatus`, which
  Slack bridges to the thread's agent session for an app with the agent view).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any, NoReturn

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import MarkdownTextObject, SectionBlock

from bot.slack.pacing import POST_RATE, ROUTINE, URGENT
from bot.slack.posts import ClaimLost, Held, PostClaim, claimed_since
from bot.views.markdown import to_markdown, to_mrkdwn
from bot.views.plan import GatedCall, plan_block
from bot.views.text import cut
from core.logs import get_logger
from core.records import Approval, ApprovalStatus, Run, RunState

if TYPE_CHECKING:
    from bot.slack.io import SlackIO

log = get_logger("slack")

PIECE = 600  # characters a streaming call adds of a finished answer, at least
MOST_PIECES = 20  # appends a stream makes at most (larger pieces for a long answer): well inside its claim
STREAM_MOST = 36_000  # a longer answer is posted as messages (a streamed answer is one message)
APPEND_RATE = (1.5, 10)  # chat.appendStream: Tier 4 (100+ a minute), shared by every stream
# Answers streamed a second, every replica together: each stream's append and stop draw on
# Slack's Tier 4 budgets (100+ a minute a method); an answer beyond this is posted at once instead
STREAMS = (1.5, 10)
REFUSED_FOR_S = 600.0  # a channel that refused a stream is not asked again for this long
AS_MESSAGES = "as-messages"  # an answer's post id when it went out as chat.postMessage
SESSION_WORDS = {RunState.RUNNING: "is working on it…", RunState.FAILED: ""}
SESSION_AGAIN_S = 100.0  # a waiting status is set again this often (Slack drops one after 2 minutes)
SESSION_RATE = (1.0, 5)  # assistant.threads.setStatus, shared by every replica


def pieces(text: str, size: int = PIECE) -> list[str]:
    """`text` in consecutive slices of at most `size` (more for a text longer than MOST_PIECES of
    them), cut after a line where one is near."""
    size = max(size, -(-len(text) // MOST_PIECES))
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
        self._no_sessions: set[str] = set()  # DMs whose threads are not assistant threads

    # the plan -------------------------------------------------------------------

    async def with_plan(self, thread_id: str, text: str) -> list[Any] | None:
        """The status message's blocks: its line, then the run's plan (None before any call)."""
        store = self.slack.store
        gates: list[GatedCall] = []
        for approval in await store.approvals.of_thread(thread_id, limit=50):
            if not approval.replaced_by:  # (a refused set: the approval that replaced it says)
                gates += await self._gates(approval)
        drawn = plan_block(await store.runs.state(thread_id), await store.runs.plan_tasks(thread_id), gates)
        if drawn is None:
            return None
        return [SectionBlock(text=MarkdownTextObject(text=cut(text, 3_000))), drawn]  # (a section's most)

    async def _gates(self, approval: Approval) -> list[GatedCall]:
        """Each action of `approval`, with who may decide it (by name) and its card's link (a
        question, an MCP server's too, is no gated call: its tool's task shows it running)."""
        if not approval.request.actions:
            return []
        slack = self.slack
        view = await slack.card_view(approval)
        link = await slack.card_link(approval)
        gates = []
        for index, ruled in enumerate(slack.deciders(approval)):
            ids = (*ruled, *(i for i in view.escalated_to if i not in ruled))  # (escalated: them too)
            named = [await slack.name_of(i) if i.startswith(("U", "W")) else f"@{i}" for i in ids]
            gates.append(GatedCall(approval, index, tuple(named), dict(view.names), link))
        return gates

    # the answer ------------------------------------------------------------------

    async def answer(self, thread_id: str, answer: str, post_id: str) -> None:
        """The run's answer in its thread, once: streamed where Slack takes it, else posted."""
        run = await self.slack.store.runs.get(thread_id)
        if run is None:
            log.warning("no_run_for_message", thread_id=thread_id)
            return
        thread_ts = await self.slack.run_thread(run)
        if not await self._streamed(run, thread_ts, answer, post_id):
            await self.slack.say_in_run(thread_id, to_mrkdwn(answer), "answer", post_id)

    async def _streamed(self, run: Run, thread_ts: str, answer: str, post_id: str) -> bool:
        """Whether the answer is in the thread as one streamed message (False: post it).

        The answer's post id is claimed as any post's (`Posts.once`); the claim is
        renewed before each call of the stream, and what became of the answer is recorded only
        while the claim holds. Every stream started is recorded (`stream:<post id>:<attempt>`):
        an attempt that finds the claim lapsed keeps a finished answer (found by its metadata)
        and deletes every stream recorded before it, then streams again."""
        slack, thread_id = self.slack, run.thread_id
        if not run.channel.startswith("D") and not run.requester:  # a channel's stream is for one person
            return False
        markdown = to_markdown(answer)
        if len(markdown) > STREAM_MOST:
            return False
        claim = _Claim(slack, thread_id, post_id)
        while True:
            state, value = await claim.take()
            if state is PostClaim.POSTED:
                return value != AS_MESSAGES
            if state is not PostClaim.BUSY:
                break
            await asyncio.sleep(0.2)
        if state is PostClaim.RETRY:
            try:
                if await self._recovered(run, thread_ts, claim):
                    return True
            except ClaimLost:  # another attempt holds the answer now: it answers
                return True
            except BaseException:  # not known to be missing: the next attempt looks again
                await asyncio.shield(claim.lapse())
                raise
        if time.monotonic() < self._refused.get(run.channel, 0.0):
            return await self._as_messages(claim)
        if await slack.state.rate_wait("streams", *STREAMS) > 0:  # a burst: no answer waits for a stream
            log.info("answer_not_streamed", thread_id=thread_id, channel=run.channel, error="streams_busy")
            return await self._as_messages(claim)
        started: list[str] = []  # the stream this attempt opened
        try:
            ts = await self._stream(run, thread_ts, markdown, claim, started)
        except _Refused as refused:
            log.info("answer_not_streamed", thread_id=thread_id, channel=run.channel, error=refused.error)
            if started:  # it ended early: the whole answer is posted instead
                await self._forget(run.channel, started[0])
            elif refused.error not in PER_MESSAGE:
                self._refused[run.channel] = time.monotonic() + REFUSED_FOR_S
            return await self._as_messages(claim)
        except ClaimLost:  # another attempt took over: this one's stream never stopped, so it goes
            log.warning("answer_claim_lost", thread_id=thread_id, post_id=post_id)
            if started:
                await self._forget(run.channel, started[0])
            return True
        except BaseException:
            await asyncio.shield(claim.lapse())
            raise
        held = await slack.posts.save_claimed(thread_id, post_id, claim.value, ts)
        if held is not None:  # taken over as it finished: the answer is the other attempt's
            log.warning("answer_claim_lost", thread_id=thread_id, post_id=post_id, held=held[:40])
            await self._forget(run.channel, ts)
        return True

    async def _recovered(self, run: Run, thread_ts: str, claim: _Claim) -> bool:
        """After a lapsed claim: a finished answer is kept (True); streams cut off are deleted."""
        slack, thread_id = self.slack, run.thread_id
        held = Held(slack.posts, thread_id, claim.post_id, claim.attempt, claim.value)
        try:
            finished = await slack.posts.find(
                run.channel, thread_ts, thread_id, claim.post_id, claimed_since(claim.value), held
            )
        finally:
            claim.value = held.claim
        for ts in (await slack.posts.under(thread_id, f"stream:{claim.post_id}:")).values():
            if ts != finished:
                log.warning("cut_off_stream_deleted", thread_id=thread_id, post_id=claim.post_id, ts=ts)
                await self._forget(run.channel, ts)
        if finished:
            await slack.posts.save_claimed(thread_id, claim.post_id, claim.value, finished)
            return True  # (kept; or another attempt took over meanwhile, and it finds the same)
        return False

    async def _as_messages(self, claim: _Claim) -> bool:
        """Mark the answer as posted as messages: False (post them); True when another attempt
        holds it now (it answers), or kept an answer meanwhile."""
        held = await self.slack.posts.save_claimed(claim.thread_id, claim.post_id, claim.value, AS_MESSAGES)
        return held is not None and held != AS_MESSAGES

    async def _forget(self, channel: str, ts: str) -> None:
        """Delete a stream that is not the answer; one Slack will not delete is left, and said."""
        try:
            await self.slack.posts.delete(channel, ts)
        except SlackApiError as exc:
            log.warning("stream_not_deleted", channel=channel, ts=ts, error=exc.response.get("error"))

    async def _stream(
        self, run: Run, thread_ts: str, markdown: str, claim: _Claim, started: list[str]
    ) -> str:
        slack, channel = self.slack, run.channel
        recipient: dict[str, Any] = {}
        if not channel.startswith("D"):
            recipient = {"recipient_user_id": run.requester, "recipient_team_id": await self.team()}
        await slack.limits.wait(f"post:{channel}", POST_RATE, URGENT)
        await claim.renew()

        async def opened() -> str:  # the stream and its record, together: a cancel stops neither
            reply = await slack.streams.chat_startStream(channel=channel, thread_ts=thread_ts, **recipient)
            started.append(str(reply["ts"]))
            await slack.posts.save(run.thread_id, f"stream:{claim.post_id}:{claim.attempt}", started[0])
            return started[0]

        try:
            ts = await asyncio.shield(opened())
            for part in pieces(markdown or "Done."):  # (as a model's tokens would come: it grows)
                await slack.limits.wait("append", APPEND_RATE, URGENT)
                await claim.renew()
                await slack.streams.chat_appendStream(channel=channel, ts=ts, markdown_text=part)
            await claim.renew()
            await slack.streams.chat_stopStream(
                channel=channel,
                ts=ts,
                metadata={
                    "event_type": "signoff_answer",
                    "event_payload": {"post_id": claim.post_id, "thread_id": run.thread_id},
                },
            )
        except SlackApiError as exc:
            _refused(exc)
        return ts

    async def team(self) -> str | None:
        """The workspace's id (auth.test, once)."""
        if self._team is None:
            self._team = (await self.slack.client.auth_test()).get("team_id")
        return self._team

    # the session -------------------------------------------------------------------

    async def session(self, run: Run) -> float | None:
        """A DM's agent thread says what the run does; returns when (epoch seconds) to come back.

        Slack drops a status two minutes after it is set, and when the app posts in the thread
        (`Posts.once` then forgets it): while the run waits, it is set again every
        SESSION_AGAIN_S; otherwise only when it changes. A refusal that says the thread (or
        the DM, the token) takes no status stops the asking there; any other is raised, and
        the status lane tries again."""
        slack = self.slack
        if not run.channel.startswith("D") or not run.thread_ts:
            return None
        if {run.channel, f"{run.channel}/{run.thread_ts}"} & self._no_sessions:
            return None
        state = await slack.store.runs.state(run.thread_id)
        if state is RunState.WAITING:
            names: list[str] = []
            for approval in await slack.store.approvals.of_thread(run.thread_id, limit=10):
                if approval.status is ApprovalStatus.PENDING and approval.request.actions:
                    names += [name for gate in await self._gates(approval) for name in gate.approvers]
            who = " or ".join(dict.fromkeys(names)) or "a person"
            status = cut(f"is waiting for {who}'s approval", 100)
        else:
            status = SESSION_WORDS.get(state or RunState.RUNNING, "")
        said, at = await slack.posts.session(run.thread_id)
        if said != status or (status and time.time() - at >= SESSION_AGAIN_S - 10):
            await slack.limits.wait("session", SESSION_RATE, ROUTINE)
            try:
                await slack.client.assistant_threads_setStatus(
                    channel_id=run.channel, thread_ts=run.thread_ts, status=status
                )
            except SlackApiError as exc:
                error = exc.response.get("error")
                if error not in NO_SESSIONS:
                    raise
                log.info("session_status_refused", channel=run.channel, error=error)
                where = f"{run.channel}/{run.thread_ts}" if error == "invalid_thread_ts" else run.channel
                self._no_sessions.add(where)
                return None
            await slack.posts.set_session(run.thread_id, status)
            at = time.time()
        return at + SESSION_AGAIN_S if state is RunState.WAITING else None


NO_SESSIONS = {  # the thread (invalid_thread_ts), the DM or the token takes no status
    "channel_not_found",
    "invalid_thread_ts",
    "missing_scope",
    "not_allowed_token_type",
    "method_not_supported_for_channel_type",
}


PER_MESSAGE = {"thread_not_found", "missing_recipient_user_id", "missing_recipient_team_id", "msg_too_long"}


class _Refused(Exception):
    """Slack answered a streaming call with an error (HTTP 200, ok false): no stream here."""

    def __init__(self, error: str):
        super().__init__(error)
        self.error = error


def _refused(exc: SlackApiError) -> NoReturn:
    """Raise Slack's refusal as `_Refused`; a call Slack did not answer (5xx) as it is: tried again."""
    if exc.response.status_code != 200:
        raise exc
    raise _Refused(str(exc.response.get("error"))) from exc


class _Claim:
    """One attempt's claim on the answer's post id, renewed as the stream goes."""

    def __init__(self, slack: SlackIO, thread_id: str, post_id: str):
        self.slack, self.thread_id, self.post_id = slack, thread_id, post_id
        self.attempt = f"{slack.posts.owner}-{uuid.uuid4().hex[:8]}"
        self.value = ""

    async def take(self) -> tuple[PostClaim, str]:
        state, self.value = await self.slack.posts.claim(
            self.thread_id, self.post_id, self.attempt, self.slack.lease_ms
        )
        return state, self.value

    async def renew(self) -> None:
        """Extend this attempt's claim; ClaimLost when another attempt took it over."""
        state, _ = await self.take()
        if state is not PostClaim.RENEWED:
            raise ClaimLost(self.post_id)

    async def lapse(self) -> None:
        await self.slack.posts.lapse(self.thread_id, self.post_id, self.value)
