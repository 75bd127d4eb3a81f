"""What the stand-in keeps: messages people see, calls the bot made, interactions Slack sent."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

ACK_LIMIT_S = 3.0
TRIGGER_TTL_S = 3.0
# Slack lets an app answer one interaction through its response_url at most 5 times, within
# 30 minutes of the interaction.
RESPONSE_URL_USES = 5
RESPONSE_URL_TTL_S = 30 * 60.0


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    status: int
    reply: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    user: str = "U0SIGNOFF"
    updates: int = 0
    metadata: dict[str, Any] | None = None
    broadcast: bool = False  # a thread reply also sent to the channel (reply_broadcast)
    # (time.monotonic() of the change, what changed it: "chat.update" or "response_url"), so a
    # benchmark can measure how long a click took to change the card the person looks at.
    changes: list[tuple[float, str]] = field(default_factory=list)
    # who it mentioned when it was posted (users, groups): Slack notifies of a mention when a
    # message is posted, never of one an edit adds
    pinged: frozenset[str] = frozenset()
    # a streamed message (chat.startStream): its Markdown so far (None: not streamed), whether
    # it still streams, and when it started (time.monotonic())
    markdown: str | None = None
    streaming: bool = False
    started: float = 0.0
    quiet: bool = False  # notifies nobody (an agent thread's root, which Slack makes as it opens)

    def __post_init__(self) -> None:
        if not self.pinged:
            self.pinged = self.mentioned(self.text + json.dumps(self.blocks))

    @staticmethod
    def mentioned(said: str) -> frozenset[str]:
        """The users and user groups a message's text mentions, Slack's way."""
        return frozenset(re.findall(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>", said)) | frozenset(
            re.findall(r"<!subteam\^([A-Z0-9]+)(?:\|[^>]*)?>", said)
        )

    def changed(self, source: str) -> None:
        """The message was edited in place (same ts): count it as Slack's clients redraw it."""
        self.updates += 1
        self.changes.append((time.monotonic(), source))

    @property
    def kind(self) -> str | None:
        """The Signoff message kind from its metadata (approval, answer, error, run)."""
        event = (self.metadata or {}).get("event_type", "")
        return event.removeprefix("signoff_") if event.startswith("signoff_") else None


@dataclass
class Interaction:
    """What Slack saw of one click or submission: the bot's answer and its latency."""

    status: int
    body: str
    seconds: float
    sent_at: float = 0.0  # time.monotonic() when Slack sent it (0: never sent, refused on screen)
    response_url: str | None = None  # the one its payload carried, if any

    @property
    def acked(self) -> bool:
        return self.status == 200 and self.seconds <= ACK_LIMIT_S

    def json(self) -> dict[str, Any]:
        return json.loads(self.body) if self.body.strip() else {}

    @property
    def said(self) -> str:
        """What Slack shows the person for a command's answer (JSON or plain text)."""
        try:
            return str(self.json().get("text", ""))
        except ValueError:
            return self.body


@dataclass
class ResponseUrl:
    """One response_url Slack issued with an interaction: what it answers, and how often it was used.

    `message_ts` is the message clicked (an ephemeral one when `ephemeral`); a slash command's URL
    has none until it answers, then its answer is the message a later replace or delete acts on.
    """

    id: str
    user: str
    channel: str
    message_ts: str | None
    ephemeral: bool = False
    issued: float = field(default_factory=time.monotonic)
    uses: int = 0
