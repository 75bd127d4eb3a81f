"""What Signoff asks of an Agent Server, read from the calls it makes to langgraph-sdk.

A fake deployment stands in for the client (`AgentServer.client`): threads held in memory,
every call recorded. It checks what docs/agent-server.md says Signoff sends that a real `langgraph
dev` cannot show: the poll's cap of 500 interrupted threads a round, and a resume sent keyed
by interrupt id, with `multitask_strategy="reject"` and `strict_resume`.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from agent_runner.remote import RemoteRunner
from bot.watch import Watcher
from core.agent_server import MARK, AgentServer
from core.protocol import PendingRequest
from core.reconciler import Reconciler
from core.records import Run, approval_for
from core.store import Store

ASSISTANT = "00000000-0000-0000-0000-00000000a551"


def hitl_interrupt(interrupt_id: str) -> dict[str, Any]:
    """A batched HumanInTheLoopMiddleware pause, as the server's thread state holds it."""
    return {
        "id": interrupt_id,
        "value": {
            "action_requests": [
                {"name": "send_email", "args": {"to": "a@acme.com"}, "description": "Send an email"}
            ],
            "review_configs": [{"action_name": "send_email", "allowed_decisions": ["approve", "reject"]}],
        },
    }


class FakeDeployment:
    """The parts of langgraph-sdk's client Signoff calls, over interrupted threads in memory."""

    def __init__(self, interrupted: list[str]):
        self.interrupted = interrupted  # thread ids, in the order the server lists them
        self.interrupts = {thread_id: uuid.uuid4().hex for thread_id in interrupted}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.assistants = SimpleNamespace(search=self._assistants_search)
        self.threads = SimpleNamespace(
            search=self._threads_search,
            get=self._threads_get,
            get_state=self._get_state,
            create=self._threads_create,
            update=self._record("threads.update"),
        )
        self.runs = SimpleNamespace(list=self._runs_list, create=self._runs_create)

    def made(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for called, kwargs in self.calls if called == name]

    def _record(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, {"args": args, **kwargs}))

        return call

    async def _assistants_search(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(("assistants.search", kwargs))
        return [{"assistant_id": ASSISTANT, "name": "agent", "graph_id": "agent"}][kwargs["offset"] :]

    async def _threads_search(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(("threads.search", kwargs))
        assert kwargs["status"] == "interrupted"
        page = self.interrupted[kwargs["offset"] : kwargs["offset"] + kwargs["limit"]]
        return [self._thread(thread_id) for thread_id in page]

    def _thread(self, thread_id: str) -> dict[str, Any]:
        return {
            "thread_id": thread_id,
            "status": "interrupted",
            "metadata": {},
            "updated_at": "2025-01-01T00:00:00+00:00",
            "interrupts": {"task": [hitl_interrupt(self.interrupts[thread_id])]},
        }

    async def _threads_get(self, thread_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("threads.get", {"thread_id": thread_id, **kwargs}))
        return self._thread(thread_id)

    async def _get_state(self, thread_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("threads.get_state", {"thread_id": thread_id, **kwargs}))
        return {
            "values": {"messages": [{"type": "human", "content": "mail a@acme.com"}]},
            "tasks": [
                {
                    "name": "HumanInTheLoopMiddleware.after_model",
                    "path": ["__pregel_pull", "HumanInTheLoopMiddleware.after_model"],
                    "interrupts": [hitl_interrupt(self.interrupts[thread_id])],
                }
            ],
        }

    async def _threads_create(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("threads.create", kwargs))
        return {
            "thread_id": kwargs["thread_id"],
            "metadata": {**kwargs["metadata"], "assistant_id": ASSISTANT},
        }

    async def _runs_list(self, thread_id: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(("runs.list", {"thread_id": thread_id, **kwargs}))
        return []  # no run going on, none sent before

    async def _runs_create(self, thread_id: str, assistant_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("runs.create", {"thread_id": thread_id, "assistant_id": assistant_id, **kwargs}))
        return {"run_id": str(uuid.uuid4()), "thread_id": thread_id}

    async def aclose(self) -> None:
        pass


class Recorded:
    """Stands in for the Reconciler: the threads the poll decided to read."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    async def reconcile(self, thread_id: str) -> None:
        self.threads.append(thread_id)


@pytest.fixture
async def store(redis_url):
    instance = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    yield instance
    await instance.close()


def deployment(store: Store, interrupted: int = 0) -> tuple[AgentServer, FakeDeployment]:
    server = AgentServer("http://127.0.0.1:9", prefix=store.keys.prefix)
    fake = FakeDeployment([str(uuid.uuid4()) for _ in range(interrupted)])
    server.client = fake  # type: ignore[assignment]
    return server, fake


@pytest.mark.parametrize("watch", [False, True])
async def test_the_poll_reads_at_most_500_interrupted_threads_a_round(store, watch):
    server, fake = deployment(store, interrupted=1_234)
    reconciler = Recorded()
    watcher = Watcher(store, server, reconciler, every_s=1.0, watch=watch)  # type: ignore[arg-type]

    await watcher.sweep()

    searches = fake.made("threads.search")
    assert sum(search["limit"] for search in searches) <= 500  # asked for no more than 500…
    assert reconciler.threads == fake.interrupted[:500]  # …and each of the first 500 looked at once
    # Signoff's own threads, or (watching) every one of the deployment
    wanted = None if watch else {MARK: store.keys.prefix}
    assert [search["metadata"] for search in searches] == [wanted] * len(searches)


async def test_a_resume_is_sent_keyed_by_interrupt_with_reject_and_strict_resume(store):
    server, fake = deployment(store, interrupted=1)
    (thread_id,) = fake.interrupted
    interrupt_id = fake.interrupts[thread_id]
    run = Run(thread_id=thread_id, graph="agent", channel="C0APPROVALS", thread_ts="1.000")
    approval = approval_for(PendingRequest.from_interrupt(hitl_interrupt(interrupt_id)), run, "agent")
    runner = RemoteRunner(store, server, Reconciler(store, server))

    await runner.resume(approval, run, {"decisions": [{"type": "approve"}]}, "command-1", approved=[])

    (sent,) = fake.made("runs.create")
    assert sent["thread_id"] == thread_id and sent["assistant_id"] == ASSISTANT
    assert sent["command"] == {"resume": {interrupt_id: {"decisions": [{"type": "approve"}]}}}
    assert sent["multitask_strategy"] == "reject"
    assert sent.get("strict_resume") is True  # a server that knows it refuses a stale resume
