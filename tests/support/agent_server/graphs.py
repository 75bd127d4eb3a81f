"""The agents of the test Agent Server: compiled graphs, as `langgraph dev` serves them.

The server keeps their checkpoints itself (in memory); Signoff reaches them only through
langgraph-sdk. Tools write every execution to ledgers the tests read (SIGNOFF_DEMO_PAYMENTS
for refunds, SIGNOFF_TEST_LEDGER for the per_call agent's tools).
"""

from __future__ import annotations

import os
from pathlib import Path

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

from signoff_demo.agent import build_self_gated_agent, demo_script
from signoff_demo.mcp_server import mcp_tools
from signoff_demo.scripted_model import (
    ScriptedChatModel,
    calls,
    last_human_text,
    tool_call,
    turns_since_human,
)


def _record(line: str) -> None:
    ledger = os.environ.get("SIGNOFF_TEST_LEDGER")
    if ledger:
        with Path(ledger).open("a") as out:
            out.write(line + "\n")


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    _record(f"write_file {path} {content}")
    return f"wrote {len(content)} chars to {path}"


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email."""
    _record(f"send_email {to}")
    return f"sent to {to}"


def per_call_turn(messages: list[BaseMessage]) -> AIMessage:
    """Asks to write /notes/<tag>.md and to email <tag>@acme.com (the tag: what the person said),
    one approval each (per_call); then reports what the tools said."""
    if turns_since_human(messages) == 0:
        tag = last_human_text(messages).strip() or "note"
        return calls(
            tool_call("write_file", {"path": f"/notes/{tag}.md", "content": tag}, "c0"),
            tool_call("send_email", {"to": f"{tag}@acme.com", "subject": "hi", "body": tag}, "c1"),
        )
    results = [m.text for m in messages[-2:] if isinstance(m, ToolMessage)]
    return AIMessage(content="All done: " + "; ".join(results))


def build_per_call() -> object:
    return create_agent(
        ScriptedChatModel(script=per_call_turn),
        tools=[write_file, send_email],
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={"write_file": True, "send_email": {"allowed_decisions": ["approve", "reject"]}},
                interrupt_mode="per_call",
            )
        ],
    )


def flaky_turn(messages: list[BaseMessage]) -> AIMessage:
    """Fails while the file SIGNOFF_TEST_FAIL names exists (a provider outage)."""
    flag = os.environ.get("SIGNOFF_TEST_FAIL")
    if flag and Path(flag).exists():
        raise RuntimeError("the model provider is unavailable")
    return AIMessage(content="Recovered and done.")


demo = build_self_gated_agent()
flaky = create_agent(ScriptedChatModel(script=flaky_turn), tools=[])
per_call = build_per_call()
# an MCP server's tools (in the server's process) through LangChain's adapter: their questions pause
mcp = create_agent(ScriptedChatModel(script=demo_script), tools=mcp_tools(), name="mcp")
