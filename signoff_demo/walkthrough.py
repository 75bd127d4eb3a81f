"""`signoff demo --walkthrough`: the runner on the demo agent, cards printed.

No Slack at all (the clickable loop is `signoff demo`): this walks through the
production example's scenarios (docs/hitl-semantics.md) in the terminal with a
scripted reviewer: every pause is printed as the approval card it becomes, the
reviewer's decisions go through the protocol's checks (one refused on
purpose, to show that a bad answer never reaches LangGraph), and the thread is
resumed from Redis by a fresh checkpointer, as after a restart.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable
from typing import Any, TextIO

from deepagents.backends.utils import create_file_data

from agent_runner.checkpointer import AsyncRedisCheckpointer
from agent_runner.runner import Runner, RunResult
from core.protocol import DecisionRefused, PendingRequest, RequestKind, preview_args
from core.records import RunState
from signoff_demo.agent import build_self_gated_agent

Reviewer = Callable[[PendingRequest], Any]

BUTTONS = {"approve": "[Approve]", "edit": "[Edit]", "reject": "[Reject]", "respond": "[Respond]"}


def card_text(request: PendingRequest) -> str:
    """A plain-text rendering of the approval card the bot will post."""
    if request.kind is RequestKind.QUESTION:
        return f"  ┌ The agent asks: {request.question}\n  └ [Answer]"
    actions = request.actions
    title = (
        f"The agent wants to run {actions[0].name}"
        if len(actions) == 1
        else f"{len(actions)} actions need review"
    )
    lines = [f"  ┌ {title}"]
    for number, action in enumerate(actions, 1):
        if len(actions) > 1:
            lines.append(f"  │ {number}. {action.name}")
        for preview in preview_args(action.args, limit=80):
            size = f"  ({preview.length} chars)" if preview.cut else ""
            lines.append(f"  │   {preview.name}: {preview.text.replace(chr(10), ' ⏎ ')}{size}")
        lines.append("  │   " + " ".join(BUTTONS[d] for d in action.allowed_decisions))
    lines.append("  └")
    return "\n".join(lines)


def approve_all(request: PendingRequest) -> Any:
    return {"decisions": [{"type": "approve"} for _ in request.actions]}


# Files the demo agent's workspace starts with, so there is something to delete.
WORKSPACE = {"/reports/old.pdf": "Q2 report, superseded by Q3."}

SCENARIOS: list[tuple[str, list[Reviewer]]] = [
    ('Email finance@acme.com "Q3 numbers are in"', [approve_all]),
    ("Refund order 1234 for 500", []),
    (
        "Refund order 1235 for 5000",
        [lambda r: {"decisions": [{"type": "reject", "message": "Over the monthly limit; ask Dana first."}]}],
    ),
    (
        'Write "Launch on Monday, announce Tuesday." to /plans/launch.md',
        [
            lambda r: {"decisions": [{"type": "accept"}]},  # the old docs' name: refused
            lambda r: {
                "decisions": [
                    {
                        "type": "edit",
                        "edited_action": {
                            "name": "write_file",
                            "args": {**r.actions[0].args, "file_path": "/plans/launch-v2.md"},
                        },
                    }
                ]
            },
        ],
    ),
    (
        "Delete /reports/old.pdf and email team@acme.com that the old report is gone",
        [lambda r: {"decisions": [{"type": "approve"}, {"type": "reject"}]}],
    ),
    ("Ask the bookkeeper to refund order 77 for 2500", [approve_all]),
]


async def run_scenario(redis_url: str, text: str, reviewers: list[Reviewer], out: TextIO) -> RunResult:
    thread_id = f"demo-{uuid.uuid4().hex[:8]}"
    out.write(f"\n▶ requester: {text}\n")
    async with AsyncRedisCheckpointer.from_url(redis_url) as saver:
        files = {path: create_file_data(body) for path, body in WORKSPACE.items()}
        outcome = await Runner(build_self_gated_agent(saver), "demo").start(thread_id, text, files=files)
    for reviewer in reviewers:
        if outcome.state is not RunState.WAITING:
            break
        request = outcome.pending[0]
        out.write(card_text(request) + "\n")
        payload = reviewer(request)
        out.write(f"  reviewer answers: {payload}\n")
        # A fresh saver and graph, as a restarted runner would have.
        async with AsyncRedisCheckpointer.from_url(redis_url) as saver:
            runner = Runner(build_self_gated_agent(saver), "demo")
            try:
                outcome = await runner.resume(thread_id, {request.interrupt_id: payload})
            except DecisionRefused as refused:
                out.write(f"  ✗ refused before reaching LangGraph: {refused}\n")
    if outcome.state is RunState.FINISHED:
        out.write("  agent: " + outcome.answer.replace("\n", "\n         ") + "\n")
    elif outcome.state is RunState.FAILED:
        out.write(f"  run failed: {outcome.error}\n")
    return outcome


async def walkthrough(redis_url: str, out: TextIO = sys.stdout) -> list[RunResult]:
    out.write("Signoff walkthrough: the runner on the demo agent; cards printed, the reviewer scripted.\n")
    return [await run_scenario(redis_url, text, reviewers, out) for text, reviewers in SCENARIOS]


def main(redis_url: str) -> int:
    outcomes = asyncio.run(walkthrough(redis_url))
    failed = [o for o in outcomes if o.state is not RunState.FINISHED]
    return 1 if failed else 0
