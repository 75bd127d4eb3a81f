"""The Lua of a card's life once its approval exists: the policy's terms and their deadlines
(`SET_TERMS`), the moment the card is visible, from which its deadlines count (`CARD_SHOWN`),
an escalation (`ESCALATE`), and the click's response_url a card keeps for its next changes
(`TAKE_REPLY`). Each names its KEYS and ARGV at the top, as `core.scripts` does.
"""

from __future__ import annotations

from core.audit_lua import APPEND_AUDIT
from core.scripts import NOW

# The policy's terms for a pending approval (quorum per action, time limits), and its deadlines,
# once: the first writer wins, whichever replica delivers the card. Deadlines are members of one
# sorted set (score: when, in ms), taken by the bots' deadline sweepers as refreshes are.
SET_TERMS = """
local approval, deadlines = KEYS[1], KEYS[2]
local terms = ARGV[1]
-- ARGV[2..]: how many field/value pairs of the record follow (quorum, time limits and what an
-- expiry decides, the routing rule and escalation per action), the pairs, then the deadlines'
-- member/score pairs

if redis.call('HGET', approval, 'status') ~= 'pending' then return 0 end
if redis.call('HSETNX', approval, 'terms', terms) == 0 then return 0 end
local pairs_count = tonumber(ARGV[2])
for n = 3, 2 + pairs_count * 2, 2 do redis.call('HSET', approval, ARGV[n], ARGV[n + 1]) end
for n = 3 + pairs_count * 2, #ARGV, 2 do redis.call('ZADD', deadlines, ARGV[n + 1], ARGV[n]) end
return 1
"""

# Escalate a pending approval: from now on the `escalate_to` of the rules escalating `after` seconds
# may decide it too. Returns 1 the first time.
ESCALATE = (
    NOW
    + APPEND_AUDIT
    + """
local approval, audit, audit_head = KEYS[1], KEYS[2], KEYS[3]
local after, told = ARGV[1], ARGV[2]
-- `told`: who the notice tells (comma list), for approvals whose terms name no action's
-- escalation (stored before per-action escalation): every action is theirs to decide too
if redis.call('HGET', approval, 'status') ~= 'pending' then return 0 end
if redis.call('HSETNX', approval, 'escalated:' .. after, '1') == 0 then return 0 end
if told ~= '' then
  for n = 0, tonumber(redis.call('HGET', approval, 'size')) - 1 do
    if redis.call('HEXISTS', approval, 'esc_after:' .. n) == 0 then
      redis.call('HSET', approval, 'esc_after:' .. n, after, 'esc_to:' .. n, told)
    end
  end
end
append_audit(audit, audit_head, audit_fields(approval, '-1', '', 'signoff', 'null', 'escalated'))
return 1
"""
)

# The card is visible (its ts is saved with it): from now on its deadlines count. Once per
# approval: `shown_at` is set, and every time limit (`expires:<i>`) and every deadline still
# waiting (`expire:…`, `remind:…`, `escalate:…`) is due its offset (ms) from now, Redis's clock.
# ARGV: the card's ts, its channel ("" : the run's), then triples kind ("field" | "item"),
# name, offset.
CARD_SHOWN = (
    NOW
    + """
local approval, deadlines = KEYS[1], KEYS[2]
local ts, channel = ARGV[1], ARGV[2]

redis.call('HSET', approval, 'card_ts', ts)
if channel ~= '' then redis.call('HSET', approval, 'card_channel', channel) end
if redis.call('HSETNX', approval, 'shown_at', now) == 0 then return 0 end
for n = 3, #ARGV, 3 do
  local kind, name, offset = ARGV[n], ARGV[n + 1], tonumber(ARGV[n + 2])
  if kind == 'field' then
    if redis.call('HEXISTS', approval, name) == 1 then redis.call('HSET', approval, name, now_ms + offset) end
  elseif redis.call('ZSCORE', deadlines, name) then
    redis.call('ZADD', deadlines, now_ms + offset, name)
  end
end
return 1
"""
)

# One use of the response_url a card keeps (the last click's on it: Slack allows five uses
# within 30 minutes): `url` (or "") is a new click's on message `ts`, which replaces the one kept
# when `ts` is the card's (a click elsewhere keeps nothing and uses nothing). Returns the URL to
# use, or false when none is left (then chat.update changes the card), and the approval's record,
# decisions and votes as this left them (`core.store.store.approval_of`): one round trip.
TAKE_REPLY = (
    NOW
    + """
local approval, decided, votes = KEYS[1], KEYS[2], KEYS[3]
local url, ts, ttl_ms, most = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local function take()
  local card = redis.call('HGET', approval, 'card_ts')
  if url ~= '' then
    if ts ~= card then return false end
    if redis.call('HGET', approval, 'reply_url') ~= url then
      redis.call('HSET', approval, 'reply_url', url, 'reply_ts', ts, 'reply_at', now_ms, 'reply_uses', 0)
    end
  end
  local kept = redis.call('HGET', approval, 'reply_url')
  if not kept or redis.call('HGET', approval, 'reply_ts') ~= card then return false end
  if now_ms - tonumber(redis.call('HGET', approval, 'reply_at')) >= ttl_ms then return false end
  if redis.call('HINCRBY', approval, 'reply_uses', 1) > most then return false end
  return kept
end

local kept = take()
return {kept, redis.call('HGETALL', approval), redis.call('HGETALL', decided), redis.call('HGETALL', votes)}
"""
)
