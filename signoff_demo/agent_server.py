"""A local LangGraph Agent Server (`langgraph dev`), for `signoff demo --agent-server` and the tests.

`langgraph dev` (langgraph-cli[inmem]) serves a project's langgraph.json offline,
keeping threads and checkpoints in memory. The project's `webhooks` block has the
server send `X-Signoff-Webhook-Secret` (from `LG_WEBHOOK_SIGNOFF_SECRET`) with every
run webhook, and lets it call a loopback URL (the bot on this machine).

langgraph-api, which `langgraph dev` runs, is under the Elastic License 2.0: it is a
development and test tool here; Signoff itself talks to any Agent Server through
langgraph-sdk only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.config import SECRETS
from core.health import free_port

DEMO_PROJECT = Path(__file__).resolve().parent / "server_project"
SECRET_ENV = "LG_WEBHOOK_SIGNOFF_SECRET"


class AgentServerError(RuntimeError):
    """The local Agent Server did not start; the message says why (and where its log is)."""


@dataclass
class LocalAgentServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def running(
    project: Path = DEMO_PROJECT, env: dict[str, str] | None = None, timeout_s: float = 90.0
) -> Iterator[LocalAgentServer]:
    """`langgraph dev` serving `project` on a free port, stopped when the block exits."""
    langgraph = Path(sys.executable).parent / "langgraph"
    if not langgraph.exists():
        raise AgentServerError(
            "`langgraph dev` is missing: install langgraph-cli[inmem] (`make install` does)"
        )
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="signoff-agent-server-", suffix=".log")[1])
    # `langgraph dev` keeps its threads in .langgraph_api under its working directory and loads
    # them at the next start: a copy of the project in a fresh directory starts empty.
    workdir = Path(tempfile.mkdtemp(prefix="signoff-agent-server-"))
    config = json.loads((project / "langgraph.json").read_text())
    config["dependencies"] = [str((project / d).resolve()) for d in config.get("dependencies", [])]
    (workdir / "langgraph.json").write_text(json.dumps(config))
    for source in project.glob("*.py"):
        shutil.copy(source, workdir / source.name)
    quiet = {"LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(langgraph),
                "dev",
                "--no-browser",
                "--no-reload",
                "--allow-blocking",  # the demo's payment API and the tests' ledgers write files
                "--port",
                str(port),
                "--config",
                "langgraph.json",
            ],
            cwd=workdir,
            env={**agent_environment(), **quiet, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its workers go with it
        )
    server = LocalAgentServer(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_until_up(server, timeout_s)
        yield server
    finally:
        _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
        log.unlink(missing_ok=True)


def agent_environment() -> dict[str, str]:
    """This process's environment without what the agents on the server have no business reading:
    every secret setting (`config.SECRETS`), anything of Slack's, and where Redis is."""
    private = SECRETS | {"REDIS_URL"}
    return {
        name: value
        for name, value in os.environ.items()
        if name not in private and not name.startswith("SLACK_")
    }


def _wait_until_up(server: LocalAgentServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = server.log.read_text(errors="replace")[-2000:]
            raise AgentServerError(
                f"`langgraph dev` exited ({server.process.returncode}); its log ends:\n{tail}"
            )
        try:
            with urllib.request.urlopen(f"{server.url}/ok", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    tail = server.log.read_text(errors="replace")[-2000:]
    raise AgentServerError(f"`langgraph dev` did not answer within {timeout_s:.0f} s; its log ends:\n{tail}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    for signum, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
