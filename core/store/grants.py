"""Trust grants in Redis (`core.grants`): written when an approval trusts, used when the same
call comes again, listed, revoked. `Store` is the door; this is one of its rooms."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from core.grants import Grant
from core.keys import Keys, Partition
from core.store.client import dumps

T = TypeVar("T")

USE_MARK_MS = 7 * 86_400_000  # how long an action remembers the grant it used (past any retry)


class Grants:
    """The trust grants of `Store` (its scripts are registered there)."""

    redis: Any
    keys: Keys
    _grant: Any
    _use_grant: Any
    _revoke_grant: Any

    if TYPE_CHECKING:  # Store's own, which this is a part of

        async def each_partition(self, call: Callable[[Partition], Awaitable[T]]) -> list[T]: ...

        async def time(self) -> float: ...

    async def add_grant(self, grant: Grant, ttl_s: int) -> tuple[bool, int, str]:
        """Write `grant` for `ttl_s` seconds from now (Redis's clock), audited as `granted`; once,
        and one live grant per match: (whether this wrote it, when the grant that stands expires
        (ms), its id)."""
        partition = self.keys.of_match(grant.match)
        fields = grant.model_dump(
            mode="json", exclude={"id", "created_at", "expires_at", "uses", "uses_left", "used"}
        )
        reply = await self._grant(
            keys=[
                self.keys.grant(grant.id),
                self.keys.grant_match(grant.match),
                partition.grants,
                partition.audit,
                partition.audit_head,
            ],
            args=[grant.id, dumps(fields), ttl_s * 1000, "" if grant.uses is None else grant.uses],
        )
        return reply[0] == "granted", int(reply[1]), str(reply[2])

    async def use_grant(self, match: str, approval_id: str, index: int) -> dict[str, Any] | None:
        """Use a live grant for `match` for action `index` of an approval, once (asked again for
        the same action, the grant it used): {id, by, until (ms), rule, uses_left?}; None: none."""
        marker = self.keys.grant_use(match, approval_id, index)
        partition = self.keys.of_match(match)
        # the grant lasting longest first: it is the one people expect ("trusted until 16:00")
        ids = await self.redis.zrevrange(self.keys.grant_match(match), 0, 9)
        for grant_id in [*ids, ""]:
            reply = await self._use_grant(
                keys=[
                    marker,
                    self.keys.grant(grant_id) if grant_id else marker,
                    self.keys.grant_match(match),
                    partition.grants,
                ],
                args=[grant_id, USE_MARK_MS],
            )
            if reply[0] == "used":
                used: dict[str, Any] = json.loads(reply[1])
                return used
        return None

    async def revoke_grant(self, grant_id: str, user: str) -> bool:
        """Revoke a grant, for the next call on (audited as `revoked` by `user`); False: there
        was none (expired, used up, revoked already)."""
        grant = await self.grant(grant_id)
        if grant is None:
            return False
        partition = self.keys.of_match(grant.match)
        return bool(
            await self._revoke_grant(
                keys=[
                    self.keys.grant(grant_id),
                    self.keys.grant_match(grant.match),
                    partition.grants,
                    partition.audit,
                    partition.audit_head,
                ],
                args=[grant_id, user],
            )
        )

    async def grant(self, grant_id: str) -> Grant | None:
        fields = await self.redis.hgetall(self.keys.grant(grant_id))
        return Grant.model_validate(fields) if fields else None

    async def grants(self) -> list[Grant]:
        """Every live grant, soonest to expire first."""
        now_ms = int(await self.time() * 1000)  # (Redis's clock, as the scripts' expiries)

        async def live(partition: Partition) -> list[str]:
            return list(await self.redis.zrangebyscore(partition.grants, now_ms, "+inf"))

        found = [
            g for ids in await self.each_partition(live) for g in [await self.grant(i) for i in ids] if g
        ]
        return sorted(found, key=lambda g: g.expires_at)
