"""Decisions recorded in Redis: the decide script (below: one atomic step per decision, the first
wins, the one that completes the set queues the resume, an action past its limit is expired by
Redis's clock, a rule's `require` matched in the same step) and the calls that run it, for a
person, for the people (an expiry, a withdrawal), for the policy and under a trust grant. The
Store's `decisions` room (the terms and deadlines it reads are the `deadlines` room's).

Where a click is decided: the listener (`bot/listeners`), this room, and its script, here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from core.keys import Keys, Partition
from core.protocol import PersonDecision, decision_payload
from core.records import (
    ApprovalStatus,
    Decided,
    DecisionResult,
    Gate,
    Outcome,
    RunState,
    Verdict,
)
from core.store.approvals import Approvals
from core.store.client import dumps
from core.store.lua import NOW, QUEUE_AUDIT
from core.store.runs import Runs

# The same matching in Lua, for the decide script: `matched_count(counts, eligible)` with
# 1-based Lua arrays of 0-based entry numbers (as the votes store them).
MATCH_LUA = r"""
local function matched_count(counts, eligible)
  local holders, placed = {}, 0
  for k = 1, #counts do holders[k] = {} end
  local function place(v, seen)
    for _, e in ipairs(eligible[v]) do
      local k = e + 1
      if counts[k] and not seen[k] then
        seen[k] = true
        if #holders[k] < counts[k] then
          holders[k][#holders[k] + 1] = v
          return true
        end
        for n, other in ipairs(holders[k]) do
          if place(other, seen) then holders[k][n] = v return true end
        end
      end
    end
    return false
  end
  for v = 1, #eligible do
    if place(v, {}) then placed = placed + 1 end
  end
  return placed
end
"""


# Which entries of `entries` (the JSON stored with the terms: [{"count": n, "ids": [...]}, ...])
# a person may fill: those naming them or a user group they are in (the gate's `ids`); all of
# them for someone an escalation let decide. 'unknown' when the person fills no entry known and
# one names a group not read yet: the click is refused, nothing written. (Filling fewer entries
# than they might, while a group is unread, never counts anyone where they do not belong.)
ELIGIBLE_LUA = r"""
local function eligible_entries(entries, gate, user, everyone)
  local found, unknown = {}, false
  for k, entry in ipairs(entries) do
    local fits = everyone
    for _, id in ipairs(entry['ids']) do
      if id == user or gate['ids'][id] then fits = true break end
      if gate['unknown'][id] then unknown = true end
    end
    if fits then found[#found + 1] = k - 1 end
  end
  if #found == 0 and unknown then return 'unknown' end
  return found
end
"""


REQUIRE_LUA = MATCH_LUA + ELIGIBLE_LUA


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
# the set completes when every entry is met by distinct people (`core.approval_requirements`).
DECIDE = (
    NOW
    + QUEUE_AUDIT
    + REQUIRE_LUA
    + r"""
local approval, decided, decisions, commands, votes, audit_queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local index, kind, decision, user, team = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local gate_json, mode, seen, respond, auto_type, rule = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local grant = ARGV[12] or ''
local audited = ARGV[13] or ''  -- the person's decision as the audit keeps it (secrets fingerprinted)
-- a passkey's proof, verified by the bot's step-up page (JSON: method, credential, challenge): an
-- action whose terms say `step_up:<i>` is approved (or edited) with it only, never by a click
local proof = ARGV[14] or ''
-- mode "close" (a withdrawal, or the sweeper's expiry): `kind` is the outcome, `index` one
-- action or "*"; `decision` is the reject (or a question's answer) and `respond` the respond,
-- for an action that allows no reject; an MCP server's questions are cancelled. An expiry stored
-- with the terms (`expire_with:<i>`) wins.
-- `kind` "auto": the policy's `decision` (of type `auto_type`, by `rule`) for action `index`,
-- recorded only if the action allows that type and is undecided. `kind` "trusted": the same for
-- an approval under a trust grant (`grant`: its JSON, `core.grants`), by `rule`.

local function record_json(what, who, outcome)
  local parts = {'{"decision":', what, ',"user":', cjson.encode(who), ',"at":', now}
  if team ~= '' and who ~= 'signoff' then parts[#parts + 1] = ',"team":' .. cjson.encode(team) end
  if outcome ~= '' then parts[#parts + 1] = ',"outcome":' .. cjson.encode(outcome) end
  if outcome == 'auto' or outcome == 'trusted' then parts[#parts + 1] = ',"rule":' .. cjson.encode(rule) end
  if outcome == 'trusted' then parts[#parts + 1] = ',"grant":' .. grant end
  if proof ~= '' and who == user and outcome == '' then parts[#parts + 1] = ',"step_up":' .. proof end
  parts[#parts + 1] = '}'
  return table.concat(parts)
end

local function write_audit(i, tool, who, what, outcome)
  if audited ~= '' and what == decision then what = audited end
  local fields = audit_fields(approval, i, tool, who, what, outcome)
  if outcome == 'auto' or outcome == 'trusted' then fields[#fields + 1], fields[#fields + 2] = 'rule', rule end
  if outcome == 'trusted' then
    local g = cjson.decode(grant)
    for _, pair in ipairs({{'grant', g['id']}, {'granted_by', g['by']}, {'until', g['until']}}) do
      fields[#fields + 1], fields[#fields + 2] = pair[1], tostring(pair[2])
    end
  end
  if proof ~= '' and who == user and (outcome == 'decided' or outcome == 'vote' or outcome == 'quorum'
      or outcome == 'proposed') then
    local p = cjson.decode(proof)  -- inside the hash chain, as every field is
    for _, pair in ipairs({{'step_up', p['method']}, {'credential', p['credential']}, {'challenge', p['challenge']}}) do
      fields[#fields + 1], fields[#fields + 2] = pair[1], tostring(pair[2])
    end
  end
  queue_audit(audit_queued, fields)  -- hashed onto the chain after the ack (`Audit.chain`)
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
    elseif allowed == ',elicit,' then  -- an MCP server's questions: the tool call is cancelled
      plan[#plan + 1] = {i, '{"type":"elicit","action":"cancel","content":{}}', user, kind}
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
-- the person may approve, with their passkey: a click (or any request without the proof) may not
local unproven = (kind == 'approve' or kind == 'edit') and proof == ''
  and redis.call('HEXISTS', approval, 'step_up:' .. index) == 1

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
  if unproven then return {'step_up', tool, allowed} end
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
if unproven then return {'step_up', tool, allowed} end
if mode == 'check' then return {'allowed', tool, allowed} end

record(index, tool, decision, decided_json, user, 'decided')
if complete_if_whole() then return {'complete', tool, allowed} end
return {'recorded', tool, allowed}
"""
)


SIGNOFF = "signoff"  # who decided, when no person did (an expiry)


def _verdict(reply: list[str]) -> Verdict:
    result = DecisionResult(reply[0])
    tool = reply[1] if len(reply) > 1 else ""
    allowed = tuple(reply[2].split(",")) if len(reply) > 2 and reply[2] else ()
    first = Decided.model_validate_json(reply[3]) if result is DecisionResult.TAKEN else None
    votes = int(reply[4]) if len(reply) > 4 and reply[4] else 0
    requester = reply[3] if result is DecisionResult.NOT_REQUESTER and len(reply) > 3 else ""
    return Verdict(result, tool, allowed, first, votes, requester)


Chain = Callable[[Partition], Awaitable[int]]  # the audit room's `chain_after` (`core.store.audit`)


class Decisions:
    """Decisions, recorded by the decide script."""

    def __init__(self, redis: Any, keys: Keys, approvals: Approvals, runs: Runs, chain: Chain):
        self.redis, self.keys, self.approvals, self.runs, self.chain = redis, keys, approvals, runs, chain
        self._script = redis.register_script(DECIDE)

    async def _decide(self, approval_id: str, args: list[Any], chain: bool = True) -> Any:
        """The decide script, then (`chain`) the audit entry it queued chained (a click's: after its ack)."""
        reply = await self._script(keys=self._decide_keys(approval_id), args=args)
        if chain:
            await self.chain(self.keys.of_approval(approval_id))
        return reply

    def _decide_keys(self, approval_id: str) -> list[str]:
        partition = self.keys.of_approval(approval_id)
        return [
            self.keys.approval(approval_id),
            self.keys.decided(approval_id),
            self.keys.decisions(approval_id),
            partition.commands,
            self.keys.votes(approval_id),
            partition.audit_queued,
        ]

    async def decide(
        self,
        approval_id: str,
        index: int,
        decision: PersonDecision,
        user: str,
        gate: Gate | None = None,
        team: str | None = None,
        seen: int | None = None,
        audited: Mapping[str, Any] | None = None,
        proof: Mapping[str, str] | None = None,
        chain: bool = True,
    ) -> Verdict:
        """Check and record one decision in one atomic step (one round trip).

        The script refuses a missing approval or action, a decided action (the first decision
        wins), a closed approval, an action past its time limit (expiring it, by Redis's clock),
        a type the action does not allow, and a person the gate does not let decide. With a
        quorum, an approval is counted (once per person) until the quorum is reached, and an edit
        becomes a proposal that needs it; `seen` is the proposal the person's card showed (an
        approval of older arguments is refused). The decision that completes the set also queues
        the resume command. The caller has checked the decision with the protocol. A card routed
        under another policy (it changed since) is decided again with the gate's answer. `audited`:
        the decision as its audit entry keeps it, when that differs (an edit's secrets). `proof`:
        the passkey assertion the step-up page verified (method, credential, challenge), without
        which an action whose terms need one is refused as `step_up`; kept in the record and the
        audit entry. `chain`: False leaves the entry queued, for the caller to chain after its ack.
        """
        return await self._checked_or_decided(
            approval_id,
            index,
            decision.type,
            decision_payload(decision),
            user,
            gate,
            team=team,
            seen=seen,
            audited=audited,
            proof=proof,
            chain=chain,
        )

    async def check(
        self, approval_id: str, index: int, kind: str, user: str, gate: Gate | None = None
    ) -> Verdict:
        """The decide script's checks for a decision of `kind` by `user`, writing nothing (before
        a form opens: the person is refused at once rather than after filling it in)."""
        return await self._checked_or_decided(
            approval_id, index, kind, {"type": kind}, user, gate, check_only=True
        )

    async def _checked_or_decided(
        self,
        approval_id: str,
        index: int,
        kind: str,
        decision: Mapping[str, Any],
        user: str,
        gate: Gate | None,
        *,
        check_only: bool = False,
        team: str | None = None,
        seen: int | None = None,
        audited: Mapping[str, Any] | None = None,
        proof: Mapping[str, str] | None = None,
        chain: bool = True,
    ) -> Verdict:
        gate = gate or Gate()
        said = (team, seen, audited, proof, chain)
        verdict = await self._decided(approval_id, index, kind, decision, user, gate, check_only, *said)
        if verdict.result is DecisionResult.POLICY_CHANGED and gate.for_action is not None:
            approval = await self.approvals.get(approval_id)
            if approval is None or not 0 <= index < approval.size:
                return Verdict(DecisionResult.MISSING if approval is None else DecisionResult.NO_ACTION)
            retooled = gate.for_action(approval, index)
            verdict = await self._decided(
                approval_id, index, kind, decision, user, retooled, check_only, *said
            )
        return verdict

    async def _decided(
        self,
        approval_id: str,
        index: int,
        kind: str,
        decision: Mapping[str, Any],
        user: str,
        gate: Gate,
        check_only: bool,
        team: str | None,
        seen: int | None,
        audited: Mapping[str, Any] | None = None,
        proof: Mapping[str, str] | None = None,
        chain: bool = True,
    ) -> Verdict:
        extra = ["", "", "", "", dumps(audited) if audited is not None else ""]
        extra += [dumps(proof)] if proof is not None else []
        reply = await self._decide(
            approval_id,
            [
                str(index),
                kind,
                dumps(decision),
                user,
                team or "",
                dumps(gate.script_json()),
                "check" if check_only else "record",
                "" if seen is None else str(seen),
                *extra,
            ],
            chain and not check_only,  # (a check writes nothing)
        )
        return _verdict(reply)

    async def decide_for_people(
        self,
        approval_id: str,
        outcome: Outcome,
        message: str,
        user: str = SIGNOFF,
        index: int | None = None,
        answer: Any = None,
        team: str | None = None,
    ) -> Verdict:
        """Decide every undecided action (or action `index`) for the people: an expiry or a
        withdrawal, through the decide script, so it and any click end in exactly one outcome.

        Each action is rejected with `message` (or, allowing no reject, responded with it; a
        question gets `answer`); an action that allows neither closes the approval unanswered.
        What an expiry decides was stored with the terms (`set_terms`) and wins; an action past
        its time limit is expired, not withdrawn.
        """
        first = {"answer": answer} if answer is not None else {"type": "reject", "message": message}
        reply = await self._decide(
            approval_id,
            [
                "*" if index is None else str(index),
                outcome.value,
                dumps(first),
                user,
                team or "",  # (the requester's workspace, for a withdrawal)
                "{}",
                "close",
                "",
                dumps({"type": "respond", "message": message}),
            ],
        )
        verdict = _verdict(reply)
        if verdict.result is DecisionResult.UNANSWERABLE:
            await self.close_unanswered(approval_id)
        return verdict

    async def decide_by_policy(
        self, approval_id: str, index: int, decision: Mapping[str, Any], rule: str
    ) -> Verdict:
        """Record the policy's decision (a rule's `decide`) for action `index`, as `signoff` with
        outcome auto, naming `rule` in the record and the audit: through the decide script, so
        the first decision still wins (a second replica's is a no-op). Refused as not_allowed
        when the action does not allow that decision type: then people decide it."""
        return await self._unasked(approval_id, index, Outcome.AUTO, decision, rule)

    async def decide_trusted(
        self, approval_id: str, index: int, grant: Mapping[str, Any], rule: str
    ) -> Verdict:
        """Approve action `index` under a trust grant (`grant`: what `use_grant` returned), as
        `signoff` with outcome trusted, naming the grant, who granted it and `rule` in the record
        and the audit; through the decide script, so the first decision wins."""
        return await self._unasked(approval_id, index, Outcome.TRUSTED, {"type": "approve"}, rule, grant)

    async def _unasked(
        self,
        approval_id: str,
        index: int,
        outcome: Outcome,
        decision: Mapping[str, Any],
        rule: str,
        grant: Mapping[str, Any] | None = None,
    ) -> Verdict:
        """A decision no one was asked for (outcome auto or trusted), through the decide script."""
        args = [str(index), outcome.value, dumps(decision), SIGNOFF, "", "{}", "close", "", ""]
        args += [str(decision["type"]), rule, *([dumps(grant)] if grant is not None else [])]
        return _verdict(await self._decide(approval_id, args))

    async def close_unanswered(self, approval_id: str) -> None:
        """An approval the decide script closed unanswered (no action could be told): off the
        pending lists, its card refreshed, its run ended (it is never resumed; purged in time)."""
        approval = await self.approvals.get(approval_id)
        if approval is not None and approval.status is ApprovalStatus.EXPIRED:
            await self.approvals.finish(approval, ApprovalStatus.EXPIRED, approval.error)
            await self.runs.set_state(approval.thread_id, RunState.FINISHED, "closed unanswered")
