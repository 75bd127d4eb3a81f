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

from slack_standin.models import RESPONSE_URL_TTL_S, Call, Interaction, Message, ResponseUrl


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
        names: dict[str, str] | None = None,
        distributed: bool = False,
    ):
        self.signing_secret = signing_secret
        self.bot_url = bot_url
        self.token = token
        self.team_id = team_id
        self.groups = groups or {}
        self.names = names or {}
        self.rate_limits = rate_limits
        # an app commercially distributed outside the Marketplace: Slack's strict history limits
        # (`WebAPI.distributed_app`)
        self.distributed = distributed
        self.messages: list[Message] = []
        self.deleted: list[Message] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.views: dict[str, dict[str, Any]] = {}
        self.home: dict[str, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.interactions: list[Interaction] = []
        # trigger_id -> (user, issued at, the view the interaction came from, if any)
        self._triggers: dict[str, tuple[str, float, str | None]] = {}
        # response_url id -> what it answers and its uses (`responses` serves them)
        self.response_urls: dict[str, ResponseUrl] = {}
        self.response_url_ttl = RESPONSE_URL_TTL_S  # tests lower it to see a URL expire
        self._clock = itertools.count(1)
        self.base_url = ""
        self._session: aiohttp.ClientSession | None = None

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._clock):06d}"

    def _issue_trigger(self, user: str, view_id: str | None = None) -> str:
        """A trigger for one views.open / views.push, within 3 s; `view_id`: the interaction
        happened inside that modal (only such a trigger can push onto its stack)."""
        trigger = f"{next(self._clock)}.{uuid.uuid4().hex[:12]}"
        self._triggers[trigger] = (user, time.monotonic(), view_id)
        return trigger

    def _issue_response_url(
        self, user: str, channel: str, message_ts: str | None, ephemeral: bool = False
    ) -> str:
        """A response_url for one interaction by `user` in `channel` (on the message `message_ts`,
        if the interaction came from one), served at /response/<id> beside the Web API."""
        url_id = uuid.uuid4().hex
        self.response_urls[url_id] = ResponseUrl(url_id, user, channel, message_ts, ephemeral)
        return f"{self.base_url.removesuffix('/').removesuffix('/api')}/response/{url_id}"

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

    def stack(self, root_view_id: str) -> list[dict[str, Any]]:
        """A modal's open views, its root first and the one on screen last."""
        return [v for v in self.views.values() if v["open"] and v["root_view_id"] == root_view_id]

    def on_screen(self, user: str) -> dict[str, Any] | None:
        """The view `user` sees: the top of their open modal's stack (views under it are hidden)."""
        shown = self.open_views(user)
        return self.stack(shown[-1]["root_view_id"])[-1] if shown else None

    def ephemerals_for(self, user: str) -> list[str]:
        return [e["text"] for e in self.ephemerals if e["user"] == user]

    def ephemeral(self, channel: str, ts: str, user: str) -> dict[str, Any] | None:
        """The ephemeral message `ts` that `user` sees in `channel`, while they still see it."""
        return next(
            (e for e in self.ephemerals if (e["channel"], e["ts"], e["user"]) == (channel, ts, user)),
            None,
        )

    def add_ephemeral(
        self, channel: str, user: str, text: str, blocks: list[dict[str, Any]], thread_ts: str | None
    ) -> str:
        """Show `user` alone a message in `channel`; its ts."""
        ts = self._next_ts()
        shown = {"channel": channel, "user": user, "text": text, "thread_ts": thread_ts}
        self.ephemerals.append({**shown, "blocks": blocks, "ts": ts, "updates": 0})
        return ts

    def remove(self, message: Message) -> None:
        """A message is deleted: gone from the channel, kept in `deleted` for the tests."""
        self.messages.remove(message)
        self.deleted.append(message)

    # who Slack notifies ---------------------------------------------------------

    @staticmethod
    def dm_channel(user: str) -> str:
        """The app's direct-message channel with `user` (what posting to a user id opens)."""
        return f"D{user}"

    def name_of(self, user: str) -> str:
        """A person's display name: U0ALICE is Alice."""
        return self.names.get(user) or user.removeprefix("U0").removeprefix("U").capitalize()

    def mentions(self, message: Message, user: str) -> bool:
        """Whether `message` mentioned `user` when it was posted: directly, or through a user
        group they are in (an edit that adds a mention notifies nobody)."""
        if user in message.pinged:
            return True
        return any(group in message.pinged for group, members in self.groups.items() if user in members)

    def notifications_for(self, user: str) -> list[Message]:
        """The messages that buzz `user`'s phone, as Slack decides: a message in their DM with
        the app; a mention of them (or of a group they are in), top-level or in a thread (a
        mention in a thread notifies whoever it names, and makes them follow it; other replies
        reach only those who follow it, and nobody here is notified of those), as posted: an
        edit notifies nobody. Each item shows its message as it reads now (Activity does)."""
        return [
            message
            for message in self.messages
            if message.user != user
            and not message.quiet
            and (message.channel == self.dm_channel(user) or self.mentions(message, user))
        ]
