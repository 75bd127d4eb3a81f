"""User-group memberships, so that a click never waits on Slack to learn who is in a group.

Approver and starter lists may name Slack user groups (S…). Their members are
fetched from Slack in the background (every `refresh_s`, by one replica at a
time), kept in Redis so every replica and every restart starts warm, and read
from memory on the click path. A group nobody could fetch yet is "unknown":
a click that depends on it is refused with a plain "try again" and changes
nothing; it is never decided by a Slack call made before the ack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from agent_runner.health import Health
from agent_runner.logs import get_logger
from agent_runner.streams import OUTAGE, Backoff, pause
from bot.slack_state import SlackState

log = get_logger("groups")

GroupMembers = Callable[[str], Awaitable[Iterable[str]]]


class GroupDirectory:
    name = "group directory"

    def __init__(
        self,
        state: SlackState,
        fetch: GroupMembers | None,
        groups: Iterable[str],
        refresh_s: float = 300,
        health: Health | None = None,
    ):
        self.state = state
        self.fetch = fetch
        self.groups = sorted({g for g in groups if g.startswith("S")})
        self.refresh_s = refresh_s
        self.health = health or Health()
        self._members: dict[str, frozenset[str]] = {}

    def members(self, group: str) -> frozenset[str] | None:
        """The group's members as last fetched, or None when nobody could fetch them yet."""
        return self._members.get(group)

    async def load(self) -> None:
        """What any replica fetched last, from Redis."""
        self._members.update(await self.state.groups(self.groups))

    async def refresh(self, groups: Iterable[str] | None = None) -> None:
        """Ask Slack for each group's members (failures keep what was known)."""
        for group in groups if groups is not None else self.groups:
            if self.fetch is None:
                return
            try:
                members = sorted(await self.fetch(group))
            except Exception as exc:  # Slack unavailable or rate limited: keep the last known list
                log.warning("group_refresh_failed", group=group, error=repr(exc))
                continue
            await self.state.save_group(group, members)
            self._members[group] = frozenset(members)

    async def serve(self, stop: asyncio.Event) -> None:
        backoff = Backoff(cap=30.0)
        while not stop.is_set():
            try:
                await self.load()
                missing = [g for g in self.groups if g not in self._members]
                if missing:
                    await self.refresh(missing)
                elif self.groups and await self.state.my_turn_to_refresh_groups(self.refresh_s):
                    await self.refresh()
                self.health.up(self.name)
                still_missing = any(g not in self._members for g in self.groups)
                await pause(stop, backoff.next() if still_missing else min(30.0, self.refresh_s))
                if not still_missing:
                    backoff.reset()
            except OUTAGE as exc:
                self.health.down(self.name, f"Redis unavailable: {type(exc).__name__}")
                await pause(stop, backoff.next())
