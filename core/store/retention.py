"""Bounded storage in Redis: threads idle past the retention found, one claimed for a purge
(`CLAIM_PURGE`), its records deleted, the streams trimmed and the audit with them, a checkpoint
keeping its chain verifiable (`TRIM_AUDIT`). The loop that does it is
`agent_runner.retention.Janitor`. The Store's `retention` room.
"""

from __future__ import annotations

import json
from typing import Any

from core.keys import Keys, Partition
from core.store.client import entry_order
from core.store.lua import APPEND_AUDIT, NOW

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
local audit, audit_head, audit_queued = KEYS[1], KEYS[2], KEYS[3]
local min_id = ARGV[1]

local last = redis.call('XREVRANGE', audit, '(' .. min_id, '-', 'COUNT', 1)[1]
if not last then return 0 end
local trimmed = ''
for n = 1, #last[2], 2 do
  if last[2][n] == 'hash' then trimmed = last[2][n + 1] end
end
local gone = redis.call('XTRIM', audit, 'MINID', min_id)
if gone > 0 then
  append_audit(audit, audit_head, audit_queued, {'approval_id', '', 'thread_id', '', 'interrupt_id', '', 'index', '-1',
    'tool', '', 'user', 'signoff', 'at', now, 'decision', 'null', 'outcome', 'checkpoint',
    'original_args', 'null', 'trimmed', trimmed})
end
return gone
"""
)


class Retention:
    """Idle threads found, claimed and purged; streams trimmed."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys
        self._claim_purge = redis.register_script(CLAIM_PURGE)
        self._trim_audit = redis.register_script(TRIM_AUDIT)

    async def purges_cut_off(self, partition: Partition, batch: int) -> list[tuple[str, str]]:
        """Purges claimed and never finished (a janitor killed mid-way): (thread id, binding)."""
        return list((await self.redis.hgetall(partition.purging)).items())[:batch]

    async def idle_threads(self, partition: Partition, before: float, batch: int) -> list[str]:
        """Threads of `partition` idle since before `before` (a time), oldest first."""
        return list(await self.redis.zrangebyscore(partition.idle, "-inf", before, 0, batch))

    async def idle_again(self, thread_id: str, now: float) -> None:
        """Count the thread idle from `now` (tried again a retention later)."""
        await self.redis.zadd(self.keys.of(thread_id).idle, {thread_id: now})

    async def claim_purge(self, thread_id: str, idle_before: float) -> tuple[bool, str]:
        """Take an idle thread out of reach of the bot (one script): after it, a reply or a
        Retry finds no run. (claimed, the key binding its Slack thread to it, or "")."""
        raw = await self.redis.get(self.keys.run(thread_id))
        binding = ""
        if raw:
            try:
                fields = json.loads(raw)
                if fields.get("channel") and fields.get("thread_ts"):
                    binding = self.keys.slack_thread(str(fields["channel"]), str(fields["thread_ts"]))
            except ValueError:
                pass  # an unreadable record: it goes all the same
        partition = self.keys.of(thread_id)
        claimed = await self._claim_purge(
            keys=[
                partition.idle,
                self.keys.run_state(thread_id),
                self.keys.run(thread_id),
                partition.purging,
            ],
            args=[thread_id, repr(idle_before), binding],
        )
        return bool(claimed), binding

    async def purge_done(self, thread_id: str) -> None:
        await self.redis.hdel(self.keys.of(thread_id).purging, thread_id)

    async def delete_thread_records(self, thread_id: str) -> None:
        """A thread's run record, state, Slack posts and every approval it had (record,
        decisions, votes, the interrupt lookup, its places in the pending and refresh sets)."""
        redis, keys = self.redis, self.keys
        partition = keys.of(thread_id)
        approvals = await redis.zrange(keys.thread_approvals(thread_id), 0, -1)
        doomed = [keys.posts(thread_id), keys.thread_approvals(thread_id)]
        pending: list[tuple[str, str]] = []
        for approval_id in approvals:
            channel = await redis.hget(keys.approval(approval_id), "record")
            if channel:
                try:
                    pending.append((approval_id, str(json.loads(channel).get("channel", ""))))
                except ValueError:
                    pass
            interrupt_id = await redis.hget(keys.approval(approval_id), "interrupt_id")
            if interrupt_id and await redis.get(keys.by_interrupt(thread_id, interrupt_id)) == approval_id:
                doomed.append(keys.by_interrupt(thread_id, interrupt_id))
            doomed += [
                keys.approval(approval_id),
                keys.decided(approval_id),
                keys.decisions(approval_id),
                keys.votes(approval_id),
                keys.command_done(thread_id, f"resume-{approval_id}"),
            ]
        async with redis.pipeline(transaction=True) as pipe:
            pipe.delete(*doomed)
            for approval_id, channel in pending:  # (one closed unanswered, or never resumed)
                pipe.zrem(partition.pending_all, approval_id)
                pipe.zrem(partition.pending(channel), approval_id)
            pipe.zrem(partition.refresh_due("status"), f"status:{thread_id}")
            if approvals:
                pipe.zrem(partition.refresh_due("card"), *(f"card:{a}" for a in approvals))
            await pipe.execute()

    async def trim_audit(self, partition: Partition, cutoff_ms: int) -> int:
        """Drop audit entries older than `cutoff_ms`; a checkpoint entry, appended in the same
        step, keeps the chain verifiable from the first entry left (`core.audit_chain`)."""
        return int(
            await self._trim_audit(
                keys=[partition.audit, partition.audit_head, partition.audit_queued], args=[f"{cutoff_ms}-0"]
            )
        )

    async def trim_stream(self, stream: str, group: str | None, cutoff_ms: int) -> int:
        """Drop entries older than `cutoff_ms`, keeping every entry `group` still needs."""
        redis = self.redis
        floor = (cutoff_ms, 0)
        if group is not None:
            try:
                groups = await redis.xinfo_groups(stream)
            except Exception:  # no such stream yet
                return 0
            for info in groups:
                if info["name"] != group:
                    continue
                floor = min(
                    floor, entry_order(info["last-delivered-id"]) if info["last-delivered-id"] else (0, 0)
                )
                pending = await redis.xpending(stream, group)
                if pending and pending.get("pending"):
                    floor = min(floor, entry_order(pending["min"]))
        if floor <= (0, 0):
            return 0
        return int(await redis.xtrim(stream, minid=f"{floor[0]}-{floor[1]}", approximate=False))
