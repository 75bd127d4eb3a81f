"""A card's life in Redis once its approval exists: where it is and the moment it is visible, from
which its deadlines count (`CARD_SHOWN`); the response_url of the card's last click, kept for its
next changes (`TAKE_REPLY`: Slack allows five uses within 30 minutes); and the refresh marks that
have the bot draw a card, or a run's status message, again (coalesced: the latest state wins).
The Store's `cards` room.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.keys import Keys
from core.records import Approval
from core.store.approvals import Approvals, approval_of, pairs
from core.store.client import now_ms
from core.store.lua import NOW
from core.store.runs import STATUS_DEBOUNCE_MS

# Slack's response_url: five uses within 30 minutes (a minute's margin for clocks and transit).
REPLY_USES, REPLY_TTL_MS = 5, 29 * 60_000

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


class Cards:
    """A card's place, its kept reply and its refreshes."""

    def __init__(self, redis: Any, keys: Keys, approvals: Approvals):
        self.redis, self.keys, self.approvals = redis, keys, approvals
        self._shown = redis.register_script(CARD_SHOWN)
        self._take_reply = redis.register_script(TAKE_REPLY)
        self.marked: list[Callable[[], None]] = []  # told of each mark this process makes (`bot.refresher`)

    async def set(self, approval: Approval, ts: str, channel: str | None = None) -> None:
        """Where the approval's card is (its ts, its channel when not the run's), and, the first
        time, that it is visible: its time limits, reminders and escalations count from now
        (`CARD_SHOWN`), not from the pause, however long Slack's pace held the card back."""
        terms = approval.terms
        shifts: list[tuple[str, str, int]] = []
        if terms is not None:
            ident = approval.approval_id
            for i, limit in terms.timeout.items():
                shifts += [
                    ("field", f"expires:{i}", limit * 1000),
                    ("item", f"expire:{ident}:{i}", limit * 1000),
                ]
            if terms.remind_every:
                shifts.append(("item", f"remind:{ident}", terms.remind_every * 1000))
            shifts += [("item", f"escalate:{ident}:{after}", after * 1000) for after in terms.escalations]
        await self._shown(
            keys=[
                self.keys.approval(approval.approval_id),
                self.keys.of_approval(approval.approval_id).deadlines,
            ],
            args=[ts, channel or "", *(str(v) for shift in shifts for v in shift)],
        )

    async def take_reply(
        self, approval_id: str, url: str = "", ts: str = ""
    ) -> tuple[Approval | None, str | None]:
        """The approval, and the response_url to change its card with now (a use of the one the
        card keeps, or of `url`, a new click's on message `ts`, which it keeps from now when `ts`
        is the card's), or None: none is left (five uses, 30 minutes) or it was not a click on
        the card. One round trip."""
        used, fields, decided, votes = await self._take_reply(
            keys=[
                self.keys.approval(approval_id),
                self.keys.decided(approval_id),
                self.keys.votes(approval_id),
            ],
            args=[url, ts, REPLY_TTL_MS, REPLY_USES],
        )
        return approval_of(pairs(fields), pairs(decided), pairs(votes)), str(used) if used else None

    async def sent(self, approval_id: str, thread_id: str) -> Approval | None:
        """After a card was sent: the run's status message marked to be drawn again (its plan
        shows the decision: `touch_status`), and the approval read as it is now; one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(*self._status_due(thread_id, STATUS_DEBOUNCE_MS), lt=True)
            self.approvals.queue_read(pipe, approval_id)
            _, fields, decided, votes = await pipe.execute()
        return approval_of(fields, decided, votes)

    async def touch(self, approval_id: str) -> None:
        """The card should be re-rendered from the record (coalesced: the latest state wins)."""
        lane = self.keys.of_approval(approval_id).refresh_due("card")
        await self.redis.zadd(lane, {f"card:{approval_id}": now_ms()}, lt=True)
        self._said()

    async def touch_status(self, thread_id: str, debounce_ms: int = STATUS_DEBOUNCE_MS) -> None:
        """The run's status message should be drawn again (its plan shows a decision)."""
        await self.redis.zadd(*self._status_due(thread_id, debounce_ms), lt=True)
        self._said()

    def _said(self) -> None:
        """A mark was made: this process's refreshers stop resting (`marked`)."""
        for nudge in self.marked:
            nudge()

    def _status_due(self, thread_id: str, debounce_ms: int) -> tuple[str, dict[str, int]]:
        return self.keys.of(thread_id).refresh_due("status"), {f"status:{thread_id}": now_ms() + debounce_ms}
