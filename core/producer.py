"""Starting runs from anywhere: the bot, the CLI, a web hook, your own code.

Only Redis is needed here (as arq's `enqueue_job` lives apart from its
worker): importing this loads no LangGraph, so the bot and `signoff run`
start quickly and never run an agent themselves. A runner replica picks the
command up.
"""

from __future__ import annotations

import uuid

from core.messages import ContinueRun, StartRun
from core.records import Run, RunState, new_id
from core.store import Store


def new_thread_id() -> str:
    """A new run's thread id: a UUID, as an Agent Server requires of its threads."""
    return str(uuid.uuid4())


async def start_run(
    store: Store,
    text: str,
    channel: str,
    graph: str,
    thread_id: str | None = None,
    thread_ts: str | None = None,
    requester: str | None = None,
    grants: bool = True,
) -> str:
    """Record where the run talks in Slack and queue its start; returns the thread id. `grants`:
    whether its calls may use and make its requester's trust grants."""
    thread_id = thread_id or new_thread_id()
    await store.runs.save(
        Run(
            thread_id=thread_id,
            graph=graph,
            channel=channel,
            thread_ts=thread_ts,
            requester=requester,
            task=text,
            grants=grants,
        )
    )
    await store.runs.set_state(thread_id, RunState.RUNNING)
    await store.queue.send(StartRun(command_id=new_id(), thread_id=thread_id, text=text))
    return thread_id


async def continue_run(store: Store, thread_id: str) -> None:
    """Queue a failed run's continuation from its last checkpoint (Retry)."""
    await store.queue.send(ContinueRun(command_id=new_id(), thread_id=thread_id))
