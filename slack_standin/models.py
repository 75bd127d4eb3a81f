"""What the stand-in keeps: messages people see, calls the bot made, interactions Slack sent."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

ACK_LIMIT_S = 3.0
TRIGGER_TTL_S = 3.0


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
