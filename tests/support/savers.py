"""The checkpointer tests' agents and savers by name (bench/checkpointer_losses.py and
tests/support/resume_helper.py use them too)."""

from __future__ import annotations

import uuid

from deepagents import create_deep_agent
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.redis import AsyncRedisSaver, RedisSaver
from langgraph.types import Command

from agent_runner.checkpointer import AsyncRedisCheckpointer, RedisCheckpointer, slots
from core import connections
from signoff_demo.scripted_model import ScriptedChatModel, calls, tool_call

SERVERS = {"one server": "redis_url", "cluster": "cluster_url"}  # the session fixture of each kind of Redis
SAVERS = {
    ("ours", "sync"): RedisCheckpointer,
    ("ours", "async"): AsyncRedisCheckpointer,
    ("stock", "sync"): RedisSaver,
    ("stock", "async"): AsyncRedisSaver,
}
WRITE_NOTE = tool_call("write_file", {"file_path": "/notes/a.md", "content": "hello"}, "c0")
SIX_CALLS = [
    tool_call("write_file", {"file_path": "/a.md", "content": "A"}, "c0"),
    tool_call("ls", {"path": "/"}, "c1"),
    tool_call("read_file", {"file_path": "/missing.md"}, "c2"),
    tool_call("write_file", {"file_path": "/b.md", "content": "B"}, "c3"),
    tool_call("glob", {"pattern": "*.md"}, "c4"),
    tool_call("grep", {"pattern": "A"}, "c5"),
]


def write_agent(saver):
    model = ScriptedChatModel(turns=[calls(WRITE_NOTE), calls(content="Wrote it.")])
    return create_deep_agent(model=model, interrupt_on={"write_file": True}, checkpointer=saver)


def six_call_agent(saver):
    model = ScriptedChatModel(turns=[calls(*SIX_CALLS), calls(content="ok")])
    return create_deep_agent(model=model, interrupt_on={"write_file": True}, checkpointer=saver)


USER = {"messages": [{"role": "user", "content": "please write the note"}]}
APPROVE = Command(resume={"decisions": [{"type": "approve"}]})


def tool_order(messages) -> list[str]:
    return [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]


def summary(values: dict) -> dict:
    return {
        "messages": [type(m).__name__ for m in values["messages"]],
        "files": sorted(values.get("files", {})),
    }


def cfg(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def history_of(snapshots) -> list[tuple]:
    """Each checkpoint of a history: its step, what runs next, and its messages' types."""
    return [
        (s.metadata["step"], s.next, [type(m).__name__ for m in s.values.get("messages", [])])
        for s in snapshots
    ]


def in_memory_history() -> list[tuple]:
    """The history `InMemorySaver` gives a run of `write_agent` paused, then approved."""
    agent = write_agent(InMemorySaver())
    config = cfg(f"mem-{uuid.uuid4().hex}")
    agent.invoke(USER, config)
    agent.invoke(APPROVE, config)
    return history_of(agent.get_state_history(config))


def at_rest(url: str, thread_id: str) -> dict[bytes, bytes]:
    """Every key the checkpointer keeps for a thread (on one server or a cluster), with all it holds
    as raw bytes: a hash's fields and values, a sorted set's members, a string."""
    client = connections.sync_client(url, decode_responses=False)
    found: dict[bytes, bytes] = {}
    try:
        for key in client.scan_iter(match=f"{slots.base(thread_id)}*", count=1000):
            kind = client.type(key)
            if kind == b"hash":
                found[key] = b"\n".join(part for pair in client.hgetall(key).items() for part in pair)
            elif kind == b"zset":
                found[key] = b"\n".join(client.zrange(key, 0, -1))
            elif kind == b"string":
                found[key] = client.get(key) or b""
            else:
                raise AssertionError(f"{key!r}: a {kind!r}, which the checkpointer does not write")
    finally:
        client.close()
    return found
