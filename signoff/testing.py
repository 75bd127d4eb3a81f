"""A fake model for trying your own graph with `signoff try`, no provider and no key needed.

`scripted_model` is a LangChain chat model that asks for the tool calls you list, one turn
each, in order, and then answers with what the last tool returned (after every message a
person writes, it starts the list again). Pass it where your graph takes its model:

    from signoff.testing import scripted_model

    FAKE = scripted_model([{"name": "issue_refund", "args": {"order_id": 1235, "amount": 5000}}])

    def build(model=FAKE):  # in production: build("anthropic:claude-sonnet-4-6")
        return create_agent(model=model, tools=[issue_refund], middleware=[...])

An item may also be a list of calls, asked for together in one turn (a batch on one card).
It is the model the demo's agent runs on (`signoff_demo.scripted_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from signoff_demo.scripted_model import ScriptedChatModel, calls, tool_call

ToolCall = Mapping[str, Any]

__all__ = ["ScriptedChatModel", "scripted_model"]


def scripted_model(tool_calls: Sequence[ToolCall | Sequence[ToolCall]]) -> ScriptedChatModel:
    """A chat model whose turns ask for `tool_calls` (`{"name": ..., "args": {...}}` each)."""
    numbers = iter(range(1, 1_000_000))

    def turn(item: ToolCall | Sequence[ToolCall]) -> Any:
        batch = [item] if isinstance(item, Mapping) else list(item)
        return calls(
            *(tool_call(c["name"], dict(c.get("args") or {}), f"call_{next(numbers)}") for c in batch)
        )

    return ScriptedChatModel(turns=[*(turn(item) for item in tool_calls), _last_tool_result])


def _last_tool_result(messages: list[BaseMessage]) -> AIMessage:
    """The answer after the calls: what the last tool said (a rejected call's reason, too)."""
    said = next((m.text for m in reversed(messages) if isinstance(m, ToolMessage)), "")
    return AIMessage(content=said or "Done.")
