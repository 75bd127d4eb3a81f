"""`signoff pending`: what waits for a decision, where, for whom, how long; every pending
approval, read a page at a time, never cut at a count."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, TextIO

from core import policy_file
from core.records import Approval, ApprovalStatus, rules_of
from core.store import Store
from signoff.commands.printing import table


def pending_rows(
    approvals: Iterable[Approval], policy: policy_file.PolicyFile, now: float
) -> list[dict[str, Any]]:
    """What waits, where, for whom, how long: one row per pending approval, oldest first."""
    rows = []
    for approval in sorted(approvals, key=lambda a: a.created_at):
        actions = approval.request.actions
        approvers = stored_approvers(approval, policy) or ["anyone"]
        votes = sum(len(v) for v in approval.votes.values())
        expires = min(
            (
                at
                for i, at in (approval.terms.expires_at.items() if approval.terms else ())
                if i not in approval.decided
            ),
            default=None,
        )
        rows.append(
            {
                "approval_id": approval.approval_id,
                "waiting": policy_file.spoken(now - approval.created_at),
                "what": ", ".join(a.name for a in actions) or "question",
                "where": approval.card_where,
                "requester": approval.requester or "",
                "approvers": ",".join(approvers + list(approval.escalated_to())),
                "decided": f"{len(approval.decided)}/{approval.size}"
                + (f" ({votes} votes)" if votes else ""),
                "expires_in": policy_file.spoken(expires - now) if expires else "never",
                "thread_id": approval.thread_id,
            }
        )
    return rows


def stored_approvers(approval: Approval, policy: policy_file.PolicyFile) -> list[str]:
    """Who the card names as approvers: as its terms keep them, from the policy it went out
    under (this shell's policy file may be another, or none); for a card from before they
    were kept, the rules its terms name, in this policy."""
    if approval.terms is not None and approval.terms.approvers is not None:
        named = list(approval.terms.approvers.values())
    else:
        named = [policy.route_at(n).approvers for n in rules_of(approval, policy)]
    return list(dict.fromkeys(i for ids in named for i in ids))


async def pending_approvals(store: Store, page: int = 500) -> AsyncIterator[list[Approval]]:
    """Every pending approval, oldest first, a page at a time. Each partition's index is read
    with ZSCAN (it returns every id held from its start to its end, whatever changes meanwhile),
    then the records a page at a time: an operator's listing is where everything shows, so it
    has no cap (the Slack command shows the newest and points here)."""
    created: dict[str, float] = {}
    for partition in store.keys.partitions:
        created.update(await store.approvals.pending_since(partition, page))
    ids = sorted(created, key=lambda i: (created[i], i))
    for start in range(0, len(ids), page):
        found = await asyncio.gather(*(store.approvals.get(i) for i in ids[start : start + page]))
        yield [a for a in found if a and a.status is ApprovalStatus.PENDING]


async def pending(store: Store, policy: policy_file.PolicyFile, out: TextIO) -> int:
    now, rows = time.time(), []
    async for approvals in pending_approvals(store):
        rows += pending_rows(approvals, policy, now)
    table(rows, out)
    return 0
