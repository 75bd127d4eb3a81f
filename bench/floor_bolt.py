"""The floor for bench/click_cpu.py: a bare Bolt AsyncApp that acks an Approve click, then does
what a person sees after one, with Signoff's payloads (no Signoff code).

    PORT=... SLACK_SIGNING_SECRET=... SLACK_API_URL=... FLOOR_PAYLOADS=file.json python bench/floor_bolt.py

After the ack, for each click:

* the card is replaced through the click's `response_url` (`replace_original`), with the text
  and blocks of Signoff's decided card;
* an outcome line is posted in the run's thread (the card's thread), at chat.postMessage's pace
  (one a second a channel, a short burst);
* the run's status message (the thread's root) is updated to the run's last state, with
  Signoff's status text and blocks (its plan), at chat.update's pace (Tier 3: 50+ a minute);
* the answer is streamed into the thread: `chat.startStream` (at the channel's post pace: a
  stream is a message), `chat.appendStream` a piece at a time (Tier 4, paced), `chat.stopStream`;
  where Slack refuses the stream, the answer is posted as a message instead, as Slack requires.

`FLOOR_PAYLOADS` is a JSON file: {"card": {"text", "blocks"}, "outcome": text,
"status": {"text", "blocks"}, "answer": markdown, "pieces": size of an append}, taken by the
bench from what Signoff sent in the same run, so both send payloads of the same size.

Written as a careful Bolt app would be: one aiohttp session for every Web API call and every
response_url, pacing that reserves each call's turn once and sleeps until it (no polling), 429s
waited out by slack_sdk's retry handler (Retry-After), nothing done twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

PAYLOADS: dict[str, Any] = json.loads(Path(os.environ.get("FLOOR_PAYLOADS", os.devnull)).read_text() or "{}")


class Pace:
    """Slack's pace for one method, in this process: `burst` calls at once, then `per_second`
    (per key: a channel, or the workspace). Each caller reserves its turn and sleeps until it."""

    def __init__(self, per_second: float, burst: int):
        self.interval, self.burst = 1 / per_second, burst
        self._due: dict[str, float] = {}

    async def turn(self, key: str = "") -> None:
        now = time.monotonic()
        due = max(self._due.get(key, now), now)
        self._due[key] = due + self.interval
        wait = due - self.interval * (self.burst - 1) - now
        if wait > 0:
            await asyncio.sleep(wait)


POSTS = Pace(1.0, 3)  # chat.postMessage and chat.startStream: about one a second a channel
UPDATES = Pace(0.8, 10)  # chat.update: Tier 3, 50+ a minute in the workspace
APPENDS = Pace(1.5, 10)  # chat.appendStream / stopStream: Tier 4, 100+ a minute


async def authorize(enterprise_id: Any, team_id: Any, user_id: Any) -> AuthorizeResult:
    return AuthorizeResult(
        enterprise_id=None, team_id=team_id, bot_token="xoxb-standin", bot_id="B0", bot_user_id="U0"
    )


app = AsyncApp(signing_secret=os.environ["SLACK_SIGNING_SECRET"], authorize=authorize)
_session: aiohttp.ClientSession | None = None
_client: AsyncWebClient | None = None


def client() -> tuple[aiohttp.ClientSession, AsyncWebClient]:
    """The one session and Web API client, made in the running loop at the first click."""
    global _session, _client
    if _session is None or _client is None:
        _session = aiohttp.ClientSession()
        _client = AsyncWebClient(
            token=os.environ.get("SLACK_BOT_TOKEN", "xoxb-standin"),
            base_url=os.environ.get("SLACK_API_URL", "https://slack.com/api/"),
            session=_session,
            retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=100)],
        )
    return _session, _client


def pieces(text: str, size: int) -> list[str]:
    """`text` in consecutive slices of at most `size` characters."""
    return [text[at : at + size] for at in range(0, len(text), size)] or [text]


async def stream_answer(web: AsyncWebClient, channel: str, thread_ts: str, user: str, team: str) -> None:
    """The answer streamed in the thread; posted as a message where Slack refuses a stream."""
    answer = str(PAYLOADS.get("answer") or "Done.")
    await POSTS.turn(channel)
    try:
        started = await web.chat_startStream(
            channel=channel, thread_ts=thread_ts, recipient_user_id=user, recipient_team_id=team
        )
        for part in pieces(answer, int(PAYLOADS.get("pieces") or 600)):
            await APPENDS.turn()
            await web.chat_appendStream(channel=channel, ts=started["ts"], markdown_text=part)
        await APPENDS.turn()
        await web.chat_stopStream(channel=channel, ts=started["ts"])
    except SlackApiError as exc:
        if exc.response.status_code != 200:
            raise
        await POSTS.turn(channel)
        await web.chat_postMessage(channel=channel, thread_ts=thread_ts, text=answer)


async def outcome_and_answer(web: AsyncWebClient, channel: str, thread_ts: str, user: str, team: str) -> None:
    await POSTS.turn(channel)
    await web.chat_postMessage(
        channel=channel, thread_ts=thread_ts, text=PAYLOADS.get("outcome") or "Approved"
    )
    await stream_answer(web, channel, thread_ts, user, team)


async def status(web: AsyncWebClient, channel: str, ts: str) -> None:
    said = PAYLOADS.get("status") or {"text": "Finished"}
    await UPDATES.turn()
    await web.chat_update(channel=channel, ts=ts, text=said["text"], blocks=said.get("blocks"))


@app.action(re.compile(r"^approve"))
async def approve(ack: Any, body: dict[str, Any]) -> None:
    """Ack, then the card, the outcome line, the status message and the answer."""
    await ack()
    session, web = client()
    channel, thread_ts = body["channel"]["id"], body["message"]["thread_ts"]
    card = PAYLOADS.get("card") or {"text": "Approved"}
    await AsyncWebhookClient(body["response_url"], session=session).send(
        text=card["text"], blocks=card.get("blocks"), replace_original=True
    )
    user, team = body["user"]["id"], body["team"]["id"]
    await asyncio.gather(
        outcome_and_answer(web, channel, thread_ts, user, team), status(web, channel, thread_ts)
    )


if __name__ == "__main__":
    app.start(port=int(os.environ["PORT"]), host="127.0.0.1")
