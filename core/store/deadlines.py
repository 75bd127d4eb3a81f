"""An approval's terms (quorum, time limits, escalations) and its deadlines, in Redis: the terms
kept for the decide script (`SET_TERMS`), an escalation (`ESCALATE`), and the deadlines that
fall due, taken on Redis's clock. The Store's `deadlines` room.
"""

from __future__ import annotations

from typing import Any

from core.keys import Keys
from core.records import Approval, Terms, expiry_decision
from core.store.client import dumps, each_partition
from core.store.lua import APPEND_AUDIT, DONE_DUE, NOW, TAKE_DUE, sooner

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
local approval, audit, audit_head, audit_queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
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
append_audit(audit, audit_head, audit_queued, audit_fields(approval, '-1', '', 'signoff', 'null', 'escalated'))
return 1
"""
)


class Deadlines:
    """An approval's terms and the deadlines they schedule, taken when due."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys
        self._turn = 0  # the partition `take` asks first next time
        self._set_terms = redis.register_script(SET_TERMS)
        self._escalate = redis.register_script(ESCALATE)
        self._take_due = redis.register_script(TAKE_DUE)
        self.next_due_ms: int | None = None  # when the next deadline comes due, as `take` last saw
        self._done_due = redis.register_script(DONE_DUE)

    async def set_terms(self, approval: Approval, terms: Terms) -> bool:
        """Keep the policy's terms with a pending approval and schedule its deadlines, once.

        Besides the terms (JSON, for people), the decide script gets per action: its quorum (or
        its `require` entries: count and ids),
        its time limit (ms, Redis's clock: `created_at` is Redis's) and what its expiry decides,
        the rule that routed it, its escalation, and whether its approval needs a passkey."""
        start = approval.created_at
        fields: dict[str, Any] = {"policy": terms.policy} if terms.policy else {}
        for i, q in terms.quorum.items():
            if q > 1:
                fields[f"quorum:{i}"] = q
        for i, entries in terms.require.items():  # who fills which entry: core.approval_requirements
            fields[f"require:{i}"] = dumps([{"count": e.count, "ids": list(e.approvers)} for e in entries])
        for i, at in terms.expires_at.items():
            decided = expiry_decision(approval, i, terms)
            if decided is not None:
                fields[f"expires:{i}"] = int(at * 1000)
                fields[f"expire_with:{i}"] = decided
        for i, rule in terms.rules.items():
            fields[f"rule:{i}"] = rule
        for i in terms.step_up:  # the decide script refuses an approval of it without the proof
            fields[f"step_up:{i}"] = "passkey"
        for i, after in terms.escalate_after.items():
            fields[f"esc_after:{i}"] = after
            fields[f"esc_to:{i}"] = ",".join(terms.escalate_to.get(i, ()))
        due = {f"expire:{approval.approval_id}:{i}": at for i, at in terms.expires_at.items()}
        if terms.remind_every:
            due[f"remind:{approval.approval_id}"] = start + terms.remind_every
        for after in terms.escalations:
            due[f"escalate:{approval.approval_id}:{after}"] = start + after
        pairs = [str(v) for item in fields.items() for v in item]
        deadlines = [v for member, at in due.items() for v in (member, str(int(at * 1000)))]
        return bool(
            await self._set_terms(
                keys=[
                    self.keys.approval(approval.approval_id),
                    self.keys.of_approval(approval.approval_id).deadlines,
                ],
                args=[terms.model_dump_json(), len(fields), *pairs, *deadlines],
            )
        )

    async def escalate(self, approval_id: str, after: int, told: tuple[str, ...] = ()) -> bool:
        """From now on the `escalate_to` stored with the card for the actions escalating after
        `after` seconds may decide them too; True the first time. `told`: who the notice tells,
        for terms stored before per-action escalation (they may then decide every action)."""
        return bool(
            await self._escalate(
                keys=[
                    self.keys.approval(approval_id),
                    self.keys.of_approval(approval_id).audit,
                    self.keys.of_approval(approval_id).audit_head,
                    self.keys.of_approval(approval_id).audit_queued,
                ],
                args=[after, ",".join(told)],
            )
        )

    async def time(self) -> float:
        """Redis's clock (seconds): every deadline and every recorded time is on it."""
        seconds, micros = await self.redis.time()
        return int(seconds) + int(micros) / 1_000_000

    async def take(self, lease_ms: int, count: int = 10, now: float | None = None) -> list[tuple[str, str]]:
        """Up to `count` (deadline, token) pairs due now, held for `lease_ms`: a sweeper that
        dies holding one lets it come due again, so each fires (its effects are idempotent).
        The partitions are asked in turn, from another one each time, so none waits behind a
        busy one and no more is taken than the sweeper fires within its lease."""
        at = "" if now is None else int(now * 1000)  # "": Redis's clock
        start, self._turn = self._turn, (self._turn + 1) % self.keys.count
        taken: list[tuple[str, str]] = []
        self.next_due_ms = None
        for n in range(self.keys.count):
            partition = self.keys.partitions[(start + n) % self.keys.count]
            reply = await self._take_due(
                keys=[partition.deadlines, partition.deadline_claims], args=[at, lease_ms, count - len(taken)]
            )
            taken += list(zip(reply[:-1:2], reply[1:-1:2], strict=True))
            self.next_due_ms = sooner(self.next_due_ms, reply[-1])
            if len(taken) >= count:
                break
        return taken

    async def done(self, item: str, token: str, again_at: float | None = None) -> None:
        """Done with a deadline; `again_at` (a time) schedules it once more (the next reminder)."""
        partition = self.keys.of_item(item)
        await self._done_due(
            keys=[partition.deadlines, partition.deadline_claims],
            args=[item, token, "" if again_at is None else int(again_at * 1000)],
        )

    async def count(self) -> int:
        return sum(await each_partition(self.keys, lambda p: self.redis.zcard(p.deadlines)))
