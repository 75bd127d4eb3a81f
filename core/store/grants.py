"""Trust grants in Redis (`core.grants` says which calls one covers): written when an approval
trusts (`GRANT`), used once per action when the same call comes again (`USE_GRANT`), listed,
revoked (`REVOKE_GRANT`), each write audited in the same step. The Store's `grants` room."""

from __future__ import annotations

import json
from typing import Any

from core.grants import Grant
from core.keys import Keys, Partition
from core.store.client import dumps, each_partition
from core.store.deadlines import Deadlines
from core.store.lua import APPEND_AUDIT, NOW

# Write a grant once, index it, audit it. The same id again, or any live grant for the same
# match (two identical cards trusted at once): that one stands, unchanged ({'exists', expiry, id}),
# so `trust_uses` caps the calls of one match, not of each card.
GRANT = (
    NOW
    + APPEND_AUDIT
    + r"""
local grant, match_index, all_index, audit, audit_head = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local audit_queued = KEYS[6]
local id, fields_json, ttl_ms, uses = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('EXISTS', grant) == 1 then return {'exists', redis.call('HGET', grant, 'expires_at'), id} end
redis.call('ZREMRANGEBYSCORE', match_index, '-inf', now_ms)
local live = redis.call('ZRANGE', match_index, 0, 0, 'WITHSCORES')  -- one grant per match: it stands
if live[1] then return {'exists', live[2], live[1]} end
local expires = now_ms + tonumber(ttl_ms)
local f = cjson.decode(fields_json)
redis.call('HSET', grant, 'id', id, 'created_at', now, 'expires_at', expires, 'used', 0)
for name, value in pairs(f) do redis.call('HSET', grant, name, tostring(value)) end
if uses ~= '' then redis.call('HSET', grant, 'uses', uses, 'uses_left', uses) end
redis.call('PEXPIREAT', grant, expires)
redis.call('ZADD', match_index, expires, id)
if redis.call('PEXPIRETIME', match_index) < expires then redis.call('PEXPIREAT', match_index, expires) end
redis.call('ZREMRANGEBYSCORE', all_index, '-inf', now_ms)
redis.call('ZADD', all_index, expires, id)
append_audit(audit, audit_head, audit_queued, {'approval_id', f['approval_id'],
  'thread_id', '', 'interrupt_id', '',
  'index', f['index'], 'tool', f['tool'], 'user', f['granted_by'], 'at', now,
  'decision', '{"type":"approve"}', 'outcome', 'granted', 'original_args', f['compared'],
  'grant', id, 'until', expires, 'rule', f['rule_name']})
return {'granted', tostring(expires), id}
"""
)


# Use grant `id` for action `index` of an approval, once: a second call for the same action
# (another replica) gets the same grant back and uses nothing. `id` "": only that question.
USE_GRANT = (
    NOW
    + r"""
local marker, grant, match_index, all_index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, marker_ttl_ms = ARGV[1], ARGV[2]

local was = redis.call('GET', marker)
if was then return {'used', was} end
if id == '' then return {'none'} end
local expires = tonumber(redis.call('HGET', grant, 'expires_at') or '0')
if expires <= now_ms then  -- expired (its key may outlive it by a moment), revoked, used up
  redis.call('DEL', grant)
  redis.call('ZREM', match_index, id)
  redis.call('ZREM', all_index, id)
  return {'none'}
end
local left = redis.call('HGET', grant, 'uses_left')
local used = {id = id, by = redis.call('HGET', grant, 'granted_by'), ['until'] = expires,
  rule = redis.call('HGET', grant, 'rule_name')}
if left then
  left = tonumber(left) - 1
  used['uses_left'] = left
  if left <= 0 then
    redis.call('DEL', grant)
    redis.call('ZREM', match_index, id)
    redis.call('ZREM', all_index, id)
  else
    redis.call('HSET', grant, 'uses_left', left)
  end
end
if redis.call('EXISTS', grant) == 1 then redis.call('HINCRBY', grant, 'used', 1) end
local text = cjson.encode(used)
redis.call('SET', marker, text, 'PX', marker_ttl_ms)
return {'used', text}
"""
)


# Revoke a grant: gone for the next call (a call that used it already keeps its approval).
REVOKE_GRANT = (
    NOW
    + APPEND_AUDIT
    + r"""
local grant, match_index, all_index, audit, audit_head = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local audit_queued = KEYS[6]
local id, user = ARGV[1], ARGV[2]

if redis.call('EXISTS', grant) == 0 then
  redis.call('ZREM', all_index, id)
  return 0
end
local f = {}
local flat = redis.call('HGETALL', grant)
for n = 1, #flat, 2 do f[flat[n]] = flat[n + 1] end
redis.call('DEL', grant)
redis.call('ZREM', match_index, id)
redis.call('ZREM', all_index, id)
append_audit(audit, audit_head, audit_queued, {'approval_id', f['approval_id'] or '',
  'thread_id', '', 'interrupt_id', '',
  'index', f['index'] or '0', 'tool', f['tool'] or '', 'user', user, 'at', now, 'decision', 'null',
  'outcome', 'revoked', 'original_args', f['compared'] or 'null', 'grant', id, 'granted_by', f['granted_by'] or ''})
return 1
"""
)


USE_MARK_MS = 7 * 86_400_000  # how long an action remembers the grant it used (past any retry)


class Grants:
    """Trust grants: written, used once per action, revoked, listed."""

    def __init__(self, redis: Any, keys: Keys, deadlines: Deadlines):
        self.redis, self.keys = redis, keys
        self.deadlines = deadlines  # (Redis's clock)
        self._grant = redis.register_script(GRANT)
        self._use_grant = redis.register_script(USE_GRANT)
        self._revoke_grant = redis.register_script(REVOKE_GRANT)

    async def add(self, grant: Grant, ttl_s: int) -> tuple[bool, int, str]:
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
                partition.audit_queued,
            ],
            args=[grant.id, dumps(fields), ttl_s * 1000, "" if grant.uses is None else grant.uses],
        )
        return reply[0] == "granted", int(reply[1]), str(reply[2])

    async def use(self, match: str, approval_id: str, index: int) -> dict[str, Any] | None:
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

    async def revoke(self, grant_id: str, user: str) -> bool:
        """Revoke a grant, for the next call on (audited as `revoked` by `user`); False: there
        was none (expired, used up, revoked already)."""
        grant = await self.get(grant_id)
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
                    partition.audit_queued,
                ],
                args=[grant_id, user],
            )
        )

    async def get(self, grant_id: str) -> Grant | None:
        fields = await self.redis.hgetall(self.keys.grant(grant_id))
        return Grant.model_validate(fields) if fields else None

    async def live(self) -> list[Grant]:
        """Every live grant, soonest to expire first."""
        now_ms = int(await self.deadlines.time() * 1000)  # (Redis's clock, as the scripts' expiries)

        async def live_ids(partition: Partition) -> list[str]:
            return list(await self.redis.zrangebyscore(partition.grants, now_ms, "+inf"))

        found = [
            g
            for ids in await each_partition(self.keys, live_ids)
            for g in [await self.get(i) for i in ids]
            if g
        ]
        return sorted(found, key=lambda g: g.expires_at)
