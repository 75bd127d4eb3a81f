"""The agent bench/load.py runs: one tool that needs approval, and a ledger of its executions.

A real `create_agent` with `HumanInTheLoopMiddleware` on a scripted model: the
person's message names a build, the model asks to `deploy` it (which waits for
an Approve), then says it is done. Every execution of the tool appends one line
to the file named by SIGNOFF_LOAD_LEDGER: the thread id, the wall-clock time the
tool started (time.time(), comparable with the audit's decision time on the
same host) and the runner's pid. Two runner processes append to the same file;
each line is one O_APPEND write, so lines never interleave.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.config import get_config

from signoff_demo.scripted_model import ScriptedChatModel, calls, last_human_text, tool_call

LEDGER = "SIGNOFF_LOAD_LEDGER"


@tool
def deploy(build: str) -> str:
    """Deploy a build (needs approval); every execution is written to the ledger."""
    started = time.time()
    thread_id = get_config().get("configurable", {}).get("thread_id", "")
    line = json.dumps({"thread_id": thread_id, "build": build, "at": started, "pid": os.getpid()}) + "\n"
    ledger = os.environ.get(LEDGER)
    if ledger:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    return f"build {build} deployed"


def ask_to_deploy(messages: list[BaseMessage]) -> AIMessage:
    return calls(tool_call("deploy", {"build": last_human_text(messages)[-40:]}, "deploy-1"))


def build_load_agent(checkpointer: Any = None) -> Any:
    model = ScriptedChatModel(turns=[ask_to_deploy, calls(content="Deployed.")])
    return create_agent(
        model,
        tools=[deploy],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"deploy": True})],
        checkpointer=checkpointer,
    )


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Every execution the ledger holds (none if the file does not exist yet)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
