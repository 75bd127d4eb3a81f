"""An MCP server that asks whatever a test sets: its one tool `question` sends the round `ROUND`
holds (a list of (key, request params)), and records what it received in `RECEIVED`."""

from __future__ import annotations

import json
from typing import Any

from fastmcp import Context, FastMCP
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitRequestURLParams, InputRequiredResult

from signoff_demo.mcp_server import mcp_tools
from signoff_demo.scripted_model import ScriptedChatModel, turns_since_human

server = FastMCP("hostile")
ROUND: list[tuple[str, dict[str, Any]]] = []
RECEIVED: list[dict[str, Any]] = []


@server.tool
async def question(ctx: Context) -> str | InputRequiredResult:
    """Asks whatever ROUND says."""
    answers = ctx.input_responses
    if not answers:
        requests = {}
        for key, params in ROUND:
            if params.get("mode") == "url":
                requests[key] = ElicitRequest(
                    params=ElicitRequestURLParams(message=params["message"], url=params["url"])
                )
            else:
                requests[key] = ElicitRequest(
                    params=ElicitRequestFormParams(
                        message=params["message"], requested_schema=params["requested_schema"]
                    )
                )
        return InputRequiredResult(input_requests=requests)
    got = {k: {"action": a.action, "content": a.content} for k, a in answers.items()}
    RECEIVED.append(got)
    return "RECEIVED " + json.dumps(got, sort_keys=True, default=str)


def script(messages):
    if turns_since_human(messages) == 0:
        return AIMessage(content="", tool_calls=[{"name": "question", "args": {}, "id": f"c{len(messages)}"}])
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            return AIMessage(content=f"TOOL SAID: {message.text}")
    return AIMessage(content="Done.")


def build(checkpointer=None):
    return create_agent(
        ScriptedChatModel(script=script), tools=mcp_tools(server), checkpointer=checkpointer, name="hostile"
    )
