"""After an approval that also grants trust (Approve & trust, on the card or with a passkey on the
step-up page): the decision said as any other, then the grant in the run's thread, or why none
was granted."""

from __future__ import annotations

import asyncio

from bot.clicks import Click, Decision
from bot.service import DecisionService
from bot.views.trust import granted_line
from core.grants import Grant
from core.protocol import Approve
from core.records import DecisionResult, Verdict


async def trusted_after(
    service: DecisionService,
    result: tuple[Verdict, tuple[Grant | None, str]] | asyncio.Task[tuple[Verdict, tuple[Grant | None, str]]],
    click: Click,
    decision: Approve,
) -> None:
    verdict, (grant, why) = result if isinstance(result, tuple) else await result
    await service.answered(verdict, Decision.of(click, decision))
    approval = await service.store.approvals.get(click.approval_id)
    if approval is None:
        return
    if grant is not None:
        await service.slack.thread_reply(
            approval, granted_line(grant), f"trust:{click.approval_id}:{click.index}"
        )
    elif verdict.result is DecisionResult.VOTED:
        await service.tell(
            click.approval_id,
            click.user,
            "No trust was granted yet: trust is granted by the approval that completes the ones needed.",
            click.channel,
        )
    elif why:
        await service.tell(click.approval_id, click.user, why, click.channel)
