"""Trust grants: "Approve & trust for 1h" lets the same call through again, unasked, for a while.

A rule with `trust` (`core.policy_file`) puts a second approve button on the card. The approval
that decides the call (with a quorum or `require`, the one that completes it) also writes a
grant: later calls of the same tool, by the same requester and graph, in the same channel (unless
the rule says `trust_scope = "anywhere"`), routed by the same rule (its content's fingerprint:
editing the rule ends its grants), whose compared arguments (all of them, or the rule's
`trust_args`) are equal, are approved without a card until the grant expires or has been used
`trust_uses` times. A grant never widens: the call must match it exactly, and its rule must
still offer trust.

Layout (`core.keys`): a grant lives in the partition of its match (the hash of what it
compares), so every grant for one match, its index and its use marks share a slot:

* `grant:<id>`: the grant (a hash), expiring with it;
* `grants:match:<match>`: the grants for one match, by expiry;
* `grants`: every grant of the partition, by expiry (`signoff trust list`, `/signoff trust`);
* `grantuse:<approval id>:<index>`: which grant an action used, so a second replica handling
  the same card uses the same grant (one use, not two).

Using a grant is two atomic steps in two slots: the use (here, in the grant's partition) and the
decision (the decide script, in the approval's, outcome `trusted`, naming the grant and who
granted it). A use whose decision then cannot be recorded (the action was decided another way
first) is not given back: a grant may lose a use to that race, never gain one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.audit_lua import APPEND_AUDIT
from core.conditions import Call
from core.keys import thread_hash
from core.routes import Route
from core.scripts import NOW  # (Redis's clock: every replica agrees on when a grant ends)


class Grant(BaseModel):
    """One trust grant, as stored."""

    model_config = ConfigDict(extra="ignore")

    id: str
    match: str
    tool: str
    requester: str
    graph: str
    channel: str = ""  # the channel it holds in ("": anywhere, `trust_scope = "anywhere"`)
    rule: str  # the rule's fingerprint
    rule_name: str  # the rule as people name it
    granted_by: str
    approval_id: str  # the approval whose decision granted it
    index: int
    compared: str  # JSON: the arguments a call must repeat
    approvers: str = ""  # the rule's approvers (ids, comma-separated): they may revoke it too
    created_at: float
    expires_at: int  # ms, Redis's clock
    uses: int | None = None  # how many calls it lets through (None: until it expires)
    uses_left: int | None = None
    used: int = 0

    @property
    def until(self) -> float:
        return self.expires_at / 1000


def compared(route: Route, args: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a grant under `route` compares of a call's arguments: all of them, or the rule's
    `trust_args` (None when one is missing: such a call is neither trusted nor a grant's source)."""
    if route.trust_args is None:
        return dict(args)
    if any(name not in args for name in route.trust_args):
        return None
    return {name: args[name] for name in route.trust_args}


def match_of(route: Route, call: Call) -> str | None:
    """The match a call has under `route`: equal for calls one grant covers, and only for them.
    None when the route offers no trust, the run has no requester, or an argument is missing."""
    shown = compared(route, call.args)
    if route.trust is None or shown is None or not call.requester:
        return None
    key = {"rule": route.fingerprint, "tool": call.tool, "requester": call.requester, "graph": call.graph}
    if route.trust_scope != "anywhere":  # a grant made in #ops lets nothing through in #general
        key["channel"] = call.channel
    text = json.dumps({**key, "args": shown}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def scope(match: str) -> str:
    """What places a match's keys in a partition (`Keys.of`), as a thread id places a run's."""
    return f"grant:{match}"


def grant_id(match: str, approval_id: str, index: int) -> str:
    """The id of the grant one action's approval makes: the same however often it is written
    (a retry, a second replica), and, like an approval id, it says its partition."""
    own = hashlib.sha256(f"{approval_id}:{index}".encode()).hexdigest()[:12]
    return f"{thread_hash(scope(match)):08x}{own}"


# Write a grant once, index it, audit it. The same id again, or any live grant for the same
# match (two identical cards trusted at once): that one stands, unchanged ({'exists', expiry, id}),
# so `trust_uses` caps the calls of one match, not of each card.
GRANT = (
    NOW
    + APPEND_AUDIT
    + r"""
local grant, match_index, all_index, audit, audit_head = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
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
append_audit(audit, audit_head, {'approval_id', f['approval_id'], 'thread_id', '', 'interrupt_id', '',
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
append_audit(audit, audit_head, {'approval_id', f['approval_id'] or '', 'thread_id', '', 'interrupt_id', '',
  'index', f['index'] or '0', 'tool', f['tool'] or '', 'user', user, 'at', now, 'decision', 'null',
  'outcome', 'revoked', 'original_args', f['compared'] or 'null', 'grant', id, 'granted_by', f['granted_by'] or ''})
return 1
"""
)
