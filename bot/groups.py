"""User-group memberships, so that a click never waits on Slack to learn who is in a group.

Approver and starter lists may name Slack user groups (S…). Their members are
fetched from Slack in the background (every `refresh_s`, by one replica at a
time), kept in Redis so every replica and every restart starts warm, and read
from memory on the click path.

Membership fails closed:

* a group nobody could fetch yet is "unknown": a click that depends on it is
  refused with a plain "try again" and changes nothing; it is never decided by
  a Slack call made before the ack;
* a group Slack says does not exist (deleted or disabled: `no_such_subteam`)
  is "gone": it grants nobody, from the moment any replica hears so, across
  restarts (kept in Redis like members);
* a group whose members could not be read for longer than `stale_after_s`
  (Slack refusing or unreachable) is "unreadable": unknown again, so it grants
  nobody until a read succeeds; the last list is not trusted for ever.

`/metrics` (`signoff_approver_group_grants_nobody{group,reason}`), `signoff doctor`
and the cards say which group.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from slack_sdk.errors import SlackApiError

from bot.slack.state import SlackState
from core.health import Health
from core.logs import get_logger
from core.loops import Loop
from core.metrics import GROUPS_GRANTING_NOBODY
from core.outages import Backoff
from core.policy_file import spoken

log = get_logger("groups")

GroupMembers = Callable[[str], Awaitable[Iterable[str]]]

# What Slack answers for a user group that no longer exists (deleted, or disabled).
NO_SUCH_GROUP = ("no_such_subteam", "subteam_not_found")


class GroupState(StrEnum):
    OK = "ok"  # members read recently
    UNKNOWN = "unknown"  # never read yet: clicks that depend on it are refused, "try again"
    GONE = "gone"  # Slack says it does not exist: grants nobody
    UNREADABLE = "unreadable"  # not read for longer than the bound: grants nobody until it is


@dataclass(frozen=True)
class Group:
    """A group as last read from Slack (by any replica): members, when, whether it exists."""

    members: frozenset[str]
    at: float  # when Slack last answered for it
    gone: bool = False


class GroupDirectory(Loop):
    name = "group directory"
    backoff_cap = 30.0

    def __init__(
        self,
        state: SlackState,
        fetch: GroupMembers | None,
        groups: Iterable[str],
        refresh_s: float = 300,
        health: Health | None = None,
        stale_after_s: float = 3_600,
        clock: Callable[[], float] = time.time,
    ):
        self.state = state
        self.fetch = fetch
        self.groups = sorted({g for g in groups if g.startswith("S")})
        self.refresh_s = refresh_s
        self.health = health or Health()
        self.stale_after_s = stale_after_s
        self.clock = clock
        self._known: dict[str, Group] = {}
        self._missing = Backoff(cap=30.0)
        # told of groups whose grant changed (gone, unreadable, back): the cards naming them
        self.on_change: Callable[[set[str]], Awaitable[None]] | None = None
        self._reported: dict[str, GroupState] = {}  # each group's state at the last turn
        self.version = 0  # goes up whenever what a group grants may have changed

    def state_of(self, group: str) -> GroupState:
        known = self._known.get(group)
        if known is None:
            return GroupState.UNKNOWN
        if known.gone:
            return GroupState.GONE
        if self.clock() - known.at > self.stale_after_s:
            return GroupState.UNREADABLE
        return GroupState.OK

    def members(self, group: str) -> frozenset[str] | None:
        """The group's members; None while they are not known (never read, or not read for too
        long); none at all for a group Slack says does not exist."""
        state = self.state_of(group)
        if state is GroupState.GONE:
            return frozenset()
        return self._known[group].members if state is GroupState.OK else None

    def fresh_until(self) -> float:
        """When the first group read now turns unreadable (what a gate built now may trust)."""
        return min(
            (k.at + self.stale_after_s for g, k in self._known.items() if not k.gone and g in self.groups),
            default=float("inf"),
        )

    def problem(self, group: str) -> str | None:
        """Why a group grants nobody, in words for a card or a log line; None when it works."""
        state = self.state_of(group)
        if state is GroupState.GONE:
            return "no longer exists in Slack"
        if state is GroupState.UNREADABLE:
            since = spoken(self.clock() - self._known[group].at)
            return f"its members could not be read from Slack for {since}"
        return None

    async def load(self) -> None:
        """What any replica read last, from Redis."""
        for group, (members, at, gone) in (await self.state.groups(self.groups)).items():
            self._remember(group, Group(frozenset(members), at, gone))

    async def refresh(self, groups: Iterable[str] | None = None) -> None:
        """Ask Slack for each group's members. A group Slack says does not exist is kept as gone;
        any other failure keeps the last list, which expires after `stale_after_s`."""
        for group in groups if groups is not None else self.groups:
            if self.fetch is None:
                return
            try:
                found = Group(frozenset(await self.fetch(group)), self.clock())
            except SlackApiError as exc:
                if exc.response.get("error") not in NO_SUCH_GROUP:
                    log.warning("group_refresh_failed", group=group, error=repr(exc))
                    continue
                log.error("group_gone", group=group, error=exc.response.get("error"))
                found = Group(frozenset(), self.clock(), gone=True)
            except Exception as exc:  # Slack unreachable or rate limited: the last list, for a while
                log.warning("group_refresh_failed", group=group, error=repr(exc))
                continue
            await self.state.save_group(group, sorted(found.members), found.at, found.gone)
            self._remember(group, found)

    def _remember(self, group: str, found: Group) -> None:
        if self._known.get(group) != found:
            self._known[group] = found
            self.version += 1

    async def turn(self) -> float:
        await self.load()
        missing = [g for g in self.groups if g not in self._known]
        if missing:
            await self.refresh(missing)
        elif self.groups and await self.state.my_turn_to_refresh_groups(self.refresh_s):
            await self.refresh()
        changed = self.report()
        if changed and self.on_change is not None:
            await self.on_change(changed)
        if any(g not in self._known for g in self.groups):
            return self._missing.next()
        self._missing.reset()
        return min(30.0, self.refresh_s)

    def report(self) -> set[str]:
        """The groups whose state changed since the last turn (what the gate grants changed with
        them: `version`); the metric of those that grant nobody; a group turning unreadable is
        said once."""
        states = {g: self.state_of(g) for g in self.groups}
        changed = {g for g, state in states.items() if self._reported.get(g, GroupState.OK) != state}
        for group in sorted(g for g in changed if states[g] is GroupState.UNREADABLE):
            log.error("group_unreadable", group=group, problem=self.problem(group))
        if changed:
            self.version += 1
        self._reported = states
        for group, state in states.items():
            for reason in (GroupState.GONE, GroupState.UNREADABLE):
                GROUPS_GRANTING_NOBODY.labels(group, reason.value).set(1 if state is reason else 0)
        return changed
