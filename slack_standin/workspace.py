"""The workspace the stand-in plays: its people's messages, views, ephemerals and Home tabs.

`Workspace` holds the state; the Web API (`webapi`), the people and Slack's
deliveries to the bot (`people`) and the page (`page`) act on it.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import aiohttp

from slack_standin.models import Call, Interaction, Message


class Workspace:
    """One Slack workspace with one app installed: what it holds, and what people see of it."""

    def __init__(
        self,
        signing_secret: str,
        bot_url: str | None = None,
        token: str = "xoxb-standin",
        team_id: str = "T0STANDIN",
        groups: dict[str, list[str]] | None = None,
        rate_limits: bool = True,
    ):
        self.signing_secret = signing_secret
        self.bot_url = bot_url
        self.token = token
        self.team_id = team_id
        self.groups = groups or {}
        self.rate_limits = rate_limits
        self.messages: list[Message] = []
        self.deleted: list[Message] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.views: dict[str, dict[str, Any]] = {}
        self.home: dict[str, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.interactions: list[Interaction] = []
        self._triggers: dict[str, tuple[str, float]] = {}
        self._clock = itertools.count(1)
        self.base_url = ""
        self._session: aiohttp.ClientSession | None = None

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._clock):06d}"

    def _issue_trigger(self, user: str) -> str:
        trigger = f"{next(self._clock)}.{uuid.uuid4().hex[:12]}"
        self._triggers[trigger] = (user, time.monotonic())
        return trigger

    # what people see --------------------------------------------------------

    def message(self, channel: str, ts: str) -> Message | None:
        return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        return [m for m in self.messages if m.channel == channel and thread_ts in (m.ts, m.thread_ts)]

    def cards(self) -> list[Message]:
        return [
            m
            for m in self.messages
            if any(
                b.get("type") == "actions" or str(b.get("block_id", "")).startswith("action:")
                for b in m.blocks
            )
        ]

    def open_views(self, user: str) -> list[dict[str, Any]]:
        return [v for v in self.views.values() if v["user"] == user and v["open"]]

    def ephemerals_for(self, user: str) -> list[str]:
        return [e["text"] for e in self.ephemerals if e["user"] == user]
