"""The demo's MCP server (FastMCP, in process): tools that ask a person before they act.

`deploy_service` asks for the rollout in a form (replicas, strategy, whether to tell #deploys);
`connect_account` sends the person to a sign-in page (URL mode). Each asks the MCP way of
2026 (SEP-2322): the call returns an `InputRequiredResult` and is called again with the
answers. LangChain's adapter (`langchain.mcp.MCPAdapter`) turns each round into a LangGraph
pause, which Signoff puts on a card. What each tool received is kept in `RECEIVED` (and said in
its result), so a test can see the types an answer arrived with.
"""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastmcp import Context, FastMCP
from langchain_core._api import LangChainBetaWarning
from langchain_core.tools import BaseTool
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitRequestURLParams, InputRequiredResult

SIGN_IN = "https://auth.example.com/connect/{provider}"

server = FastMCP("deploys")
RECEIVED: list[dict[str, Any]] = []  # each call answered: its tool, and each key's action and content
_lock = threading.Lock()

ROLLOUT = {
    "type": "object",
    "properties": {
        "replicas": {
            "type": "integer",
            "title": "Replicas",
            "description": "How many copies run after the deploy.",
            "minimum": 1,
            "maximum": 20,
            "default": 2,
        },
        "strategy": {
            "type": "string",
            "title": "Strategy",
            "oneOf": [
                {"const": "rolling", "title": "Rolling (one at a time)"},
                {"const": "blue_green", "title": "Blue/green (switch at once)"},
                {"const": "canary", "title": "Canary (10% first)"},
            ],
            "default": "rolling",
        },
        "notify": {"type": "boolean", "title": "Tell #deploys", "default": True},
    },
    "required": ["replicas", "strategy"],
}


def _received(tool: str, answers: dict[str, Any]) -> dict[str, Any]:
    got = {key: {"action": answer.action, "content": answer.content} for key, answer in answers.items()}
    with _lock:
        RECEIVED.append({"tool": tool, "answers": got})
    return got


@server.tool
async def deploy_service(service: str, environment: str, ctx: Context) -> str | InputRequiredResult:
    """Deploy a service to an environment; asks for the rollout first."""
    answers = ctx.input_responses
    if not answers:
        message = f"Deploying {service} to {environment}: how should it roll out?"
        return InputRequiredResult(
            input_requests={
                "rollout": ElicitRequest(
                    params=ElicitRequestFormParams(message=message, requested_schema=ROLLOUT)
                )
            }
        )
    rollout = _received("deploy_service", dict(answers))["rollout"]
    if rollout["action"] == "decline":
        return f"Not deployed: the reviewer declined to choose a rollout for {service}."
    if rollout["action"] == "cancel":
        return f"Cancelled: {service} was not deployed."
    return f"Deployed {service} to {environment} with {json.dumps(rollout['content'], sort_keys=True)}"


@server.tool
async def connect_account(provider: str, ctx: Context) -> str | InputRequiredResult:
    """Connect the team's account at a provider; the person signs in on the provider's page."""
    answers = ctx.input_responses
    if not answers:
        url = SIGN_IN.format(provider=provider)
        message = f"Sign in to {provider} to connect it."
        return InputRequiredResult(
            input_requests={"sign_in": ElicitRequest(params=ElicitRequestURLParams(message=message, url=url))}
        )
    action = _received("connect_account", dict(answers))["sign_in"]["action"]
    return (
        f"Connected {provider}."
        if action == "accept"
        else f"Not connected: {provider} sign-in was {action}d."
    )


def mcp_tools(target: Any = None) -> list[BaseTool]:
    """The server's tools through LangChain's own MCP adapter, for `create_agent`. The adapter
    lists them asynchronously; a graph is built synchronously (inside a running event loop, in
    the runner), so the listing runs on a thread of its own. Each tool connects when called."""
    with warnings.catch_warnings():  # (its namespace warns it is beta, once per process)
        warnings.simplefilter("ignore", LangChainBetaWarning)
        from langchain.mcp import MCPAdapter

        adapter = MCPAdapter(server if target is None else target)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, adapter.list_tools()).result(timeout=30)
