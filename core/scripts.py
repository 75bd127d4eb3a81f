"""Every Lua script Signoff runs in Redis, in one place (but a card's terms, deadlines and reply,
`core.card_scripts`, and a trust grant's, with the rest of `core.grants`).

Each names its KEYS and ARGV as locals at the top (as arq's `lua.py` does), so
what a script touches can be read without counting indexes. A script is one
atomic step: that is what makes a decision, a record and its announcement, a
claim or a lease a single event that no crash or second replica can split.
"""

from __future__ import annotations

from core.audit_lua import APPEND_AUDIT
from core.requirements import REQUIRE_LUA

# Every time Signoff records (a decision, an expiry, an escalation, an approval's creation) is
# Redis's: one clock for every replica, whatever a process's own clock says.
NOW = """
local clock = redis.call('TIME')
local now = clock[1] .. '.' .. string.format('%06d', tonumber(clock[2]))
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""

# Record one decision, with every check that depends on stored state, in one round trip.
# The first decision per action wins; the decision that completes the set queues the resume
# command. Decisions travel as the JSON text they were written as (never re-encoded here, so
# cjson cannot round numbers in edited arguments). `mode` "check" runs the checks, writes nothing
# (but an expiry that is due). An action past its time limit (`expires:<i>`, set with the terms)
# is expired by the click itself, whatever the sweeper's lag: no click after the limit counts.
# Who may decide: the rule that routed the action when the card went out (`rule:<i>` under the
# policy `policy`), looked up in the person's gate; a card of another policy is refused as
# `policy_changed` and decided again with the gate's answer per tool. An escalation lets the
# people stored with the card (`esc_to:<i>`) decide once it happened. A rule's `require`
# (`require:<i>`, its entries) counts each approval toward the entries the person may fill, and
# the set completes when every entry is met by distinct people (`core.requirements`).
DECIDE = (
    NOW
    + APPEND_AUDIT
    + REQUIRE_LUA
    + r"""
local approval, decided, decisions, commands, audit, votes, audit_head =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local index, kind, decision, user, team = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local gate_json, mode, seen, respond, auto_type, rule = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local grant = ARGV[12] or ''
-- mode "close" (a withdrawal, or the sweeper's expiry): `kind` is the outcome, `index` one
-- action or "*"; `decision` is the reject (or a question's answer) and `respond` the respond,
-- for an action that allows no reject. An expiry stored with the terms (`expire_with:<i>`) wins.
-- `kind` "auto": the policy's `decision` (of type `auto_type`, by `rule`) for action `index`,
-- recorded only if the action allows that type and is undecided. `kind` "trusted": the same for
-- an approval under a trust grant (`grant`: its JSON, `core.grants`), by `rule`.

local function record_json(what, who, outcome)
  local parts = {'{"decision":', what, ',"user":', cjson.encode(who), ',"at":', now}
  if team ~= '' and who ~= 'signoff' then parts[#parts + 1] = ',"team":' .. cjson.encode(team) end
  if outcome ~= '' then parts[#parts + 1] = ',"outcome":' .. cjson.encode(outcome) end
  if outcome == 'auto' or outcome == 'trusted' then parts[#parts + 1] = ',"rule":' .. cjson.encode(rule) end
  if outcome == 'trusted' then parts[#parts + 1] = ',"grant":' .. grant end
  parts[#parts + 1] = '}'
  return table.concat(parts)
end

local function write_audit(i, tool, who, what, outcome)
  local fields = audit_fields(approval, i, tool, who, what, outcome)
  if outcome == 'auto' or outcome == 'trusted' then fields[#fields + 1], fields[#fields + 2] = 'rule', rule end
  if outcome == 'trusted' then
    local g = cjson.decode(grant)
    for _, pair in ipairs({{'grant', g['id']}, {'granted_by', g['by']}, {'until', g['until']}}) do
      fields[#fields + 1], fields[#fields + 2] = pair[1], tostring(pair[2])
    end
  end
  append_audit(audit, audit_head, fields)
end

local function record(i, tool, what, written, who, outcome)
  redis.call('HSET', decided, i, written)
  redis.call('HSET', decisions, i, what)
  write_audit(i, tool, who, what, outcome)
end

-- The set is complete: queue the one resume command.
local function complete_if_whole()
  local size = tonumber(redis.call('HGET', approval, 'size'))
  if redis.call('HLEN', decided) < size then return false end
  local ordered = {}
  for n = 0, size - 1 do ordered[#ordered + 1] = redis.call('HGET', decisions, tostring(n)) end
  redis.call('HSET', approval, 'status', 'resuming', 'completed_at', now)
  redis.call('XADD', commands, '*', 'command', redis.call('HGET', approval, 'resume_command'),
    'decisions', '[' .. table.concat(ordered, ',') .. ']')
  return true
end

local function votes_for(i)
  local found = {}
  for _, field in ipairs(redis.call('HKEYS', votes)) do
    if string.sub(field, 1, #i + 1) == i .. ':' then found[#found + 1] = field end
  end
  return found
end

-- A `require`: how many approvals of action i count (the largest matching), of how many needed.
local function require_met(i, entries)
  local counts, eligible, need = {}, {}, 0
  for k, entry in ipairs(entries) do counts[k], need = entry['count'], need + entry['count'] end
  for _, field in ipairs(votes_for(i)) do
    eligible[#eligible + 1] = cjson.decode(redis.call('HGET', votes, field))['eligible'] or {}
  end
  return matched_count(counts, eligible), need
end

-- Whether action i's time limit has passed, by Redis's clock.
local function past_limit(i)
  local limit = redis.call('HGET', approval, 'expires:' .. i)
  return limit and now_ms >= tonumber(limit)
end

-- Close an approval that cannot be answered: nothing the agent can be told, nothing runs.
local function unanswerable(i, outcome, who)
  local tool = redis.call('HGET', approval, 'tool:' .. i) or ''
  redis.call('HSET', approval, 'status', 'expired', 'error', outcome ..
    ': an action allows neither reject nor respond, so the agent was not resumed')
  write_audit(i, tool, who, 'null', outcome)
  return {'unanswerable', tool}
end

-- Expire action i as its terms say; returns the reply, and whether it closed the approval.
local function expire(i)
  local what = redis.call('HGET', approval, 'expire_with:' .. i)
  if what == 'unanswerable' then return unanswerable(i, 'expired', 'signoff'), true end
  local written = record_json(what, 'signoff', 'expired')
  record(i, redis.call('HGET', approval, 'tool:' .. i) or '', what, written, 'signoff', 'expired')
  complete_if_whole()
  return written, false
end

local status = redis.call('HGET', approval, 'status')
if not status then return {'missing'} end

if mode == 'close' then
  if status ~= 'pending' then return {'not_pending'} end
  if kind == 'auto' or kind == 'trusted' then
    local allowed = redis.call('HGET', approval, 'allowed:' .. index)
    if not allowed then return {'no_action'} end
    local tool = redis.call('HGET', approval, 'tool:' .. index) or ''
    local first = redis.call('HGET', decided, index)
    if first then return {'taken', tool, allowed, first} end
    if not string.find(',' .. allowed .. ',', ',' .. auto_type .. ',', 1, true) then
      return {'not_allowed', tool, allowed}
    end
    record(index, tool, decision, record_json(decision, user, kind), user, kind)
    if complete_if_whole() then return {'complete', tool, allowed} end
    return {'recorded', tool, allowed}
  end
  if kind == 'withdrawn' and redis.call('HGET', approval, 'requester') ~= user then
    return {'not_requester', '', '', redis.call('HGET', approval, 'requester') or ''}
  end
  if kind == 'withdrawn' and redis.call('HGET', approval, 'allowed:0') == 'answer' then
    return {'not_allowed', '', 'answer'}  -- a question is answered, not withdrawn
  end
  local size = tonumber(redis.call('HGET', approval, 'size'))
  local targets = {}
  for n = 0, size - 1 do
    local i = tostring(n)
    if (index == '*' or index == i) and redis.call('HEXISTS', decided, i) == 0 then targets[#targets + 1] = i end
  end
  -- every target must be answerable, or none is touched
  local plan = {}
  for _, i in ipairs(targets) do
    local allowed = ',' .. (redis.call('HGET', approval, 'allowed:' .. i) or '') .. ','
    local stored = redis.call('HGET', approval, 'expire_with:' .. i)
    if (kind == 'expired' or past_limit(i)) and stored then
      if stored == 'unanswerable' then return unanswerable(i, 'expired', 'signoff') end
      plan[#plan + 1] = {i, stored, 'signoff', 'expired'}  -- (a withdrawal after the limit)
    elseif string.find(allowed, ',reject,', 1, true) or allowed == ',answer,' then
      plan[#plan + 1] = {i, decision, user, kind}
    elseif string.find(allowed, ',respond,', 1, true) then
      plan[#plan + 1] = {i, respond, user, kind}
    else
      return unanswerable(i, kind, user)
    end
  end
  for _, step in ipairs(plan) do
    record(step[1], redis.call('HGET', approval, 'tool:' .. step[1]) or '', step[2],
      record_json(step[2], step[3], step[4]), step[3], step[4])
  end
  if #plan == 0 then return {'not_pending'} end
  if complete_if_whole() then return {'complete'} end
  return {'recorded'}
end

local allowed = redis.call('HGET', approval, 'allowed:' .. index)
if not allowed then return {'no_action'} end
local tool = redis.call('HGET', approval, 'tool:' .. index) or ''
local first = redis.call('HGET', decided, index)
if first then return {'taken', tool, allowed, first} end
if status ~= 'pending' then return {'not_pending', tool, allowed} end
if past_limit(index) and redis.call('HEXISTS', approval, 'expire_with:' .. index) == 1 then
  local written, closed = expire(index)
  if closed then return {'not_pending', tool, allowed} end
  return {'taken', tool, allowed, written}
end
if not string.find(',' .. allowed .. ',', ',' .. kind .. ',', 1, true) then
  return {'not_allowed', tool, allowed}
end

-- the gate: the rule that routed this action, else the answer per tool, else the default
local gate = cjson.decode(gate_json)
local may, barred = gate['default'], gate['requester']
local rule = redis.call('HGET', approval, 'rule:' .. index)
if gate['tools'][tool] ~= nil then
  may, barred = gate['tools'][tool][1], gate['tools'][tool][2]
elseif gate['policy'] ~= '' then
  if not rule or redis.call('HGET', approval, 'policy') ~= gate['policy'] then
    return {'policy_changed', tool, allowed}
  end
  local k = tonumber(rule)
  if k >= 0 then
    local found = string.sub(gate['routes'], k + 1, k + 1)
    may = (found == 'T') or (found == 'U' and 'unknown')
    barred = string.sub(gate['barred'], k + 1, k + 1) == '1'
  end
end
if barred and redis.call('HGET', approval, 'requester') == user then
  return {'requester', tool, allowed}
end
local after = redis.call('HGET', approval, 'esc_after:' .. index)
local escalated_in = false  -- may decide by an escalation: fills any entry of a `require`
if may ~= true and after and redis.call('HGET', approval, 'escalated:' .. after) == '1' then
  for id in string.gmatch(redis.call('HGET', approval, 'esc_to:' .. index) or '', '[^,]+') do
    if id == user or gate['ids'][id] then may, escalated_in = true, true break end
    if gate['unknown'][id] then may = 'unknown' end
  end
end
if may == 'unknown' then return {'groups_unknown', tool, allowed} end
if not may then return {'not_approver', tool, allowed} end

local decided_json = record_json(decision, user, '')
local quorum = tonumber(redis.call('HGET', approval, 'quorum:' .. index) or '1')
local entries = redis.call('HGET', approval, 'require:' .. index)
if (quorum > 1 or entries) and (kind == 'approve' or kind == 'edit') then
  local vote_json = decided_json
  if entries then
    entries = cjson.decode(entries)
    local fits = eligible_entries(entries, gate, user, escalated_in)
    if fits == 'unknown' then return {'groups_unknown', tool, allowed} end
    if #fits == 0 then return {'not_approver', tool, allowed} end
    vote_json = string.sub(decided_json, 1, -2) .. ',"eligible":' .. cjson.encode(fits) .. '}'
  end
  if kind == 'approve' then
    -- an approval is of what the card showed: not of an edit proposed since
    if seen ~= '' and seen ~= (redis.call('HGET', approval, 'rev:' .. index) or '0') then
      return {'changed', tool, allowed}
    end
    if redis.call('HEXISTS', votes, index .. ':' .. user) == 1 then
      local counted = entries and require_met(index, entries) or #votes_for(index)
      return {'voted_already', tool, allowed, '', tostring(counted)}
    end
  end
  if mode == 'check' then return {'allowed', tool, allowed} end
  local outcome = 'vote'
  if kind == 'edit' then
    -- new arguments: the approvals so far were of other ones; the editor counts as one
    for _, field in ipairs(votes_for(index)) do redis.call('HDEL', votes, field) end
    redis.call('HSET', approval, 'proposal:' .. index, decision, 'proposer:' .. index, decided_json)
    redis.call('HINCRBY', approval, 'rev:' .. index, 1)
    outcome = 'proposed'
  end
  redis.call('HSET', votes, index .. ':' .. user, vote_json)
  write_audit(index, tool, user, decision, outcome)
  local count = #votes_for(index)
  if entries then count, quorum = require_met(index, entries) end
  if count < quorum then return {'voted', tool, allowed, '', tostring(count)} end
  local final = redis.call('HGET', approval, 'proposal:' .. index) or decision
  local final_record = redis.call('HGET', approval, 'proposer:' .. index) or decided_json
  record(index, tool, final, final_record, user, 'quorum')
  if complete_if_whole() then return {'complete', tool, allowed, '', tostring(count)} end
  return {'recorded', tool, allowed, '', tostring(count)}
end
if mode == 'check' then return {'allowed', tool, allowed} end

record(index, tool, decision, decided_json, user, 'decided')
if complete_if_whole() then return {'complete', tool, allowed} end
return {'recorded', tool, allowed}
"""
)

# An approval record, its lookup by interrupt and its `approval` event, in one step.
# Returns {approval id, "created", when (Redis's clock: time limits count from it)}, or {the
# existing id, "exists"} when the interrupt has a record already (unless it is the one this
# record `replaces`: a refused set offered again). The event is written first: if it fails,
# nothing is written.
CREATE_APPROVAL = (
    NOW
    + """
local by_interrupt, approval, pending_here, pending_all, per_thread, events =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local approval_id, event, replaces = ARGV[1], ARGV[2], ARGV[3]
-- ARGV[4..]: the record's field / value pairs

local current = redis.call('GET', by_interrupt)
if current and current ~= replaces then return {current, 'exists'} end
redis.call('XADD', events, '*', 'event', event)
redis.call('SET', by_interrupt, approval_id)
local fields = {}
for n = 4, #ARGV do fields[#fields + 1] = ARGV[n] end
redis.call('HSET', approval, unpack(fields))
redis.call('HSET', approval, 'created_at', now)
redis.call('ZADD', pending_here, now, approval_id)
redis.call('ZADD', pending_all, now, approval_id)
redis.call('ZADD', per_thread, now, approval_id)
return {approval_id, 'created', now}
"""
)

# The retention janitor claims a thread for purging: only if it is still idle since before
# `idle_before` and finished (or failed). Its state and run record go in the same step, so a
# reply or a Retry that comes after finds no run to continue (it starts afresh), and one that
# came before has made it busy (the claim fails). The thread is noted in `purging` (with its
# Slack-thread binding, which dies with the run record) until the purge is complete, so a purge
# cut off half-way is finished later. Returns 1 when claimed.
CLAIM_PURGE = """
local idle, run_state, run, purging = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local thread_id, idle_before, binding = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local since = redis.call('ZSCORE', idle, thread_id)
if not since or tonumber(since) > idle_before then return 0 end
local state = redis.call('HGET', run_state, 'state')
redis.call('ZREM', idle, thread_id)
if state and state ~= 'finished' and state ~= 'failed' then return 0 end
redis.call('DEL', run_state, run)
redis.call('HSET', purging, thread_id, binding)
return 1
"""

# The retention trims a partition's audit chain to the entries from `min_id` on, and appends a
# checkpoint naming the hash of the last entry trimmed ("" if it had none: written before the
# chain), from which the first entry left verifies. Returns how many entries went.
TRIM_AUDIT = (
    NOW
    + APPEND_AUDIT
    + """
local audit, audit_head = KEYS[1], KEYS[2]
local min_id = ARGV[1]

local last = redis.call('XREVRANGE', audit, '(' .. min_id, '-', 'COUNT', 1)[1]
if not last then return 0 end
local trimmed = ''
for n = 1, #last[2], 2 do
  if last[2][n] == 'hash' then trimmed = last[2][n + 1] end
end
local gone = redis.call('XTRIM', audit, 'MINID', min_id)
if gone > 0 then
  append_audit(audit, audit_head, {'approval_id', '', 'thread_id', '', 'interrupt_id', '', 'index', '-1',
    'tool', '', 'user', 'signoff', 'at', now, 'decision', 'null', 'outcome', 'checkpoint',
    'original_args', 'null', 'trimmed', trimmed})
end
return gone
"""
)

# Retry on a failed run: failed -> running, once, whoever clicks how often.
CLAIM_RETRY = """
local run_state = KEYS[1]
if redis.call('HGET', run_state, 'state') == 'failed' then
  redis.call('HSET', run_state, 'state', 'running')
  return 1
end
return 0
"""

# --- leases (streams) -------------------------------------------------------------------

# Reset the idle time of each entry still owned by `consumer`; return the ids it no longer owns.
RENEW_ENTRIES = """
local stream = KEYS[1]
local group, consumer = ARGV[1], ARGV[2]
-- ARGV[3..]: entry ids

local lost = {}
for n = 3, #ARGV do
  local id = ARGV[n]
  local pending = redis.call('XPENDING', stream, group, id, id, 1)
  if pending[1] and pending[1][2] == consumer then
    redis.call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
  else
    lost[#lost + 1] = id
  end
end
return lost
"""

# Acknowledge an entry only if `consumer` still owns it (or nobody: already acknowledged).
ACK_OWN = """
local stream = KEYS[1]
local group, consumer, entry_id = ARGV[1], ARGV[2], ARGV[3]
local pending = redis.call('XPENDING', stream, group, entry_id, entry_id, 1)
if pending[1] and pending[1][2] ~= consumer then return 0 end
redis.call('XACK', stream, group, entry_id)
return 1
"""

# Take a thread's lock, or find it ours already (a restart under the same consumer name): 1;
# 0 while another holds it; 2, taking nothing, when the command's done marker (KEYS[2]) exists.
TAKE_LOCK = """
local lock, done = KEYS[1], KEYS[2]  -- done: the command's done marker (optional)
local token, lease_ms = ARGV[1], ARGV[2]

if done and redis.call('EXISTS', done) == 1 then return 2 end
local holder = redis.call('GET', lock)
if holder == token then redis.call('PEXPIRE', lock, lease_ms) return 1 end
if holder then return 0 end
redis.call('SET', lock, token, 'PX', lease_ms)
return 1
"""

# Extend the thread locks still held; return the (1-based) indexes of the ones lost.
RENEW_LOCKS = """
-- KEYS: the locks
local lease_ms = ARGV[1]
-- ARGV[2..]: one token per lock

local lost = {}
for n = 1, #KEYS do
  if redis.call('GET', KEYS[n]) == ARGV[n + 1] then redis.call('PEXPIRE', KEYS[n], lease_ms)
  else lost[#lost + 1] = n end
end
return lost
"""

# Before a tool starts: is the thread's lock still `token`'s and the command's entry still
# `consumer`'s? If so both are extended (a fencing check: a runner frozen past its lease, whose
# work another runner took over, must not start the tool too). Lock and stream share a slot.
FENCE = """
local lock, stream = KEYS[1], KEYS[2]
local token, lease_ms, group, consumer, entry_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', lock) ~= token then return 0 end
local pending = redis.call('XPENDING', stream, group, entry_id, entry_id, 1)
if not pending[1] or pending[1][2] ~= consumer then return 0 end
redis.call('PEXPIRE', lock, lease_ms)
redis.call('XCLAIM', stream, group, consumer, 0, entry_id, 'JUSTID')
return 1
"""

# Delete a key if it still holds `token`: a lock, or a binding that no one has rebound.
RELEASE_LOCK = """
local lock = KEYS[1]
local token = ARGV[1]
if redis.call('GET', lock) == token then return redis.call('DEL', lock) end
return 0
"""

# --- the bot's Slack state ---------------------------------------------------------------

# May this attempt make the post `post_id` now, or does it exist?
# Returns {"posted", ts} | {"busy", claim} | {"new"} | {"retry"} (an earlier claim lapsed: the
# message may exist in Slack already, look before posting again).
CLAIM_POST = (
    NOW
    + """
local posts = KEYS[1]
local post_id, owner, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- a claim is `claim:<owner>:<until, ms by Redis's clock>`; it is returned with the answer

local current = redis.call('HGET', posts, post_id)
if current and string.sub(current, 1, 6) ~= 'claim:' then return {'posted', current} end
if current then
  local holder, deadline = string.match(current, '^claim:(.*):(%d+)$')
  if holder ~= owner and tonumber(deadline) > now_ms then return {'busy', current} end
end
local claim = 'claim:' .. owner .. ':' .. string.format('%d', now_ms + lease_ms)
redis.call('HSET', posts, post_id, claim)
if current and string.match(current, '^claim:(.*):%d+$') == owner then return {'renewed', claim} end
if current then return {'retry', claim} end
return {'new', claim}
"""
)

# A poster that failed lets its claim lapse at once: Slack may have taken the message, so the
# next attempt looks before posting.
LAPSE_POST = """
local posts = KEYS[1]
local post_id, claim, lapsed = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', posts, post_id) == claim then redis.call('HSET', posts, post_id, lapsed) end
return 1
"""

# Record the ts of a post; returns {"saved"} or {"duplicate", ts of the copy saved first}.
SAVE_POST = """
local posts = KEYS[1]
local post_id, ts = ARGV[1], ARGV[2]

local current = redis.call('HGET', posts, post_id)
if current and string.sub(current, 1, 6) ~= 'claim:' and current ~= ts then return {'duplicate', current} end
redis.call('HSET', posts, post_id, ts)
return {'saved'}
"""

# Record what became of a post only while `claim` still holds it: returns {"saved"}, or
# {"lost", what holds it now} (another attempt's claim, a ts, a mark).
SAVE_CLAIMED = """
local posts = KEYS[1]
local post_id, claim, value = ARGV[1], ARGV[2], ARGV[3]

local current = redis.call('HGET', posts, post_id)
if current ~= claim then return {'lost', current or ''} end
redis.call('HSET', posts, post_id, value)
return {'saved'}
"""

# Take up to `count` due items (cosmetic updates, deadlines) not held by a live taker. A taken
# item's due time moves to now + lease: if the taker dies, it comes due again. `now` (ms) is
# Redis's clock unless given (deadlines always use Redis's: one clock for every replica).
TAKE_DUE = (
    NOW
    + """
local due, claims = KEYS[1], KEYS[2]
local lease, count = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else now = now_ms end

local taken = {}
for _, item in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, count * 4)) do
  local claim = tonumber(redis.call('HGET', claims, item) or '0')
  if claim <= now then
    redis.call('HSET', claims, item, now + lease)
    redis.call('ZADD', due, now + lease, item)
    taken[#taken + 1] = item
    taken[#taken + 1] = tostring(now + lease)
    if #taken >= count * 2 then break end
  end
end
return taken
"""
)

# Done with an item: remove it, unless it was marked again meanwhile (its due time changed);
# `retry_at` (ms, or "") puts it back for later instead.
DONE_DUE = """
local due, claims = KEYS[1], KEYS[2]
local item, token, retry_at = ARGV[1], ARGV[2], ARGV[3]

redis.call('HDEL', claims, item)
if tonumber(redis.call('ZSCORE', due, item) or '-1') == tonumber(token) then
  if retry_at == '' then redis.call('ZREM', due, item)
  else redis.call('ZADD', due, retry_at, item) end
end
return 1
"""

# GCRA rate limiter on Redis time, shared by every replica. Returns 0 when a call may go
# now, else how many ms to wait.
RATE = """
local limiter = KEYS[1]
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', limiter) or '0')
if tat < now then tat = now end
local wait = tat - interval * (burst - 1) - now
if wait > 0 then return wait end
redis.call('SET', limiter, tat + interval, 'PX', math.ceil(tat + interval - now + interval * burst) + 1000)
return 0
"""

# The end of an Agent Server run is told once, whoever sees it (the runner that waited for it,
# the webhook, the poll, on any replica): the mark and the event in one step.
TELL_ONCE = """
local told, events = KEYS[1], KEYS[2]
local ttl, event = ARGV[1], ARGV[2]
if not redis.call('SET', told, '1', 'NX', 'EX', ttl) then return 0 end
redis.call('XADD', events, '*', 'event', event)
return 1
"""
