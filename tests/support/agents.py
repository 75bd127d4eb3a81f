"""Small real agents for the tests, on scripted models (zero tokens)."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool

from signoff_demo.scripted_model import ScriptedChatModel, calls, tool_call


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {len(content)} chars to {path}"


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@tool
def issue_refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


TOOLS = [write_file, send_email, read_file, issue_refund]


def scripted(*first_turn_calls: dict[str, Any], answer: str = "All done.") -> ScriptedChatModel:
    """A model that makes the given calls once, then answers."""
    return ScriptedChatModel(turns=[calls(*first_turn_calls), calls(content=answer)])


def hitl_agent(model, interrupt_on, checkpointer, mode: str = "batched", tools=TOOLS):
    return create_agent(
        model,
        tools=tools,
        middleware=[HumanInTheLoopMiddleware(interrupt_on=interrupt_on, interrupt_mode=mode)],
        checkpointer=checkpointer,
    )


WRITE = tool_call("write_file", {"path": "/notes/a.md", "content": "hello"}, "c0")
EMAIL = tool_call("send_email", {"to": "a@acme.com", "subject": "hi", "body": "hello"}, "c1")
REFUND = tool_call("issue_refund", {"order_id": "o1", "amount": 5000}, "c2")
