"""Records a test writes straight into a Store, as a runner would."""

from __future__ import annotations

import uuid
from typing import Any

from core.plan import PlanTask, TaskStatus
from core.protocol import ActionReview, PendingRequest, RequestKind
from core.records import Approval, Run, approval_for
from core.store import Store

EVIL = "<!channel> <@U0BOSS> <https://evil.example|your bank> & <!subteam^S1>"  # agent text


def task(status: TaskStatus, at: float, settled: bool = False, key: str = "call_1") -> PlanTask:
    """A tool call of a run's plan, as the runner notes it."""
    return PlanTask(key=key, name="send_email", status=status, at=at, settled=settled)


async def two_action_approval(store, requester="U0REQ"):
    request = PendingRequest(
        interrupt_id=uuid.uuid4().hex,
        kind=RequestKind.BATCHED,
        actions=(
            ActionReview(
                name="issue_refund",
                args={"order_id": "o1", "amount": 5000},
                allowed_decisions=("approve", "edit"),
            ),
            ActionReview(name="send_email", args={"to": "a@b.c"}, allowed_decisions=("approve", "reject")),
        ),
    )
    run = Run(thread_id="t1", graph="demo", channel="C1", requester=requester)
    approval, created = await store.approvals.create(approval_for(request, run, "demo"))
    assert created
    return approval


async def pending_batch(store, *actions: ActionReview, requester="U0RILEY"):
    """A pending batch of `actions`, written as the runner writes it."""
    request = PendingRequest(interrupt_id=uuid.uuid4().hex, kind=RequestKind.BATCHED, actions=actions)
    run = Run(thread_id=f"t-{uuid.uuid4().hex[:8]}", graph="demo", channel="C1", requester=requester)
    approval, _ = await store.approvals.create(approval_for(request, run, "demo"))
    return approval


async def audit_outcomes(store: Store) -> list[tuple[str, str]]:
    """(outcome, user) of every audit entry, oldest first."""
    return [(e["outcome"], e["user"]) for e in await store.audit.entries()]


async def card_is_out(store: Store, approval_id: str, ts: str = "1.000001") -> None:
    """Its card is out, as before cards said when (its deadlines stay as its terms set them): a
    deadline waits for the card otherwise."""
    await store.redis.hset(store.keys.approval(approval_id), "card_ts", ts)


def approval(*actions: ActionReview, **changes) -> Approval:
    request = PendingRequest(interrupt_id="i" * 32, kind=RequestKind.BATCHED, actions=actions)
    fields = dict(
        approval_id="a1",
        thread_id="t1",
        interrupt_id="i" * 32,
        graph="demo",
        request=request,
        origin="demo",
        channel="C1",
        created_at=1_700_000_000.0,
    )
    return Approval(**{**fields, **changes})


def email(to: str = "finance@acme.com", body: str = "hello") -> ActionReview:
    return ActionReview(
        name="send_email",
        args={"to": to, "subject": "Q3", "body": body},
        description="Tool execution requires approval\n\nTool: send_email\nArgs: {...}",
        allowed_decisions=("approve", "reject"),
    )


def task_words(task: dict[str, Any]) -> str:
    """What a task card of a plan says (details, output), its links' addresses included."""
    parts = []
    for key in ("details", "output"):
        for section in (task.get(key) or {}).get("elements", []):
            parts += [
                e.get("text", "") + (f" {e['url']}" if e.get("url") else "") for e in section["elements"]
            ]
    return " ".join(parts)
