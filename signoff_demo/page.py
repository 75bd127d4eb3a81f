"""`signoff demo`: the whole loop on one machine, in a local Slack you can click.

Starts (or uses) Redis, the runner with the demo agent, the bot, and the Slack
stand-in with its page (default http://127.0.0.1:3000). The page talks to the
bot exactly as Slack does: the bot's Web API calls land in the stand-in and
clicks reach the bot's /slack/events as signed requests. Like `signoff serve`,
this wires both sides together in one process.

With SLACK_BOT_TOKEN and SLACK_APP_TOKEN set, the same bot and demo agent
connect to a real workspace over Socket Mode instead (see deploy/slack-manifest.yml).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from agent_runner.worker import run_runner
from bot.app import run_bot
from core.config import Settings, StartupError
from core.logs import redact
from signoff_demo import agent_server as local_agent_server
from signoff_demo import redis_server
from slack_standin import SlackStandin

SIGNING_SECRET = "signoff-demo-signing-secret"
# Alice and Riley approve; Bob does not; nobody approves their own request; refunds go to #finance.
POLICY = Path(__file__).resolve().parent / "signoff.toml"
GRAPH = "signoff_demo.agent:build_demo_agent"
# The workspace's user groups, as the README's example policy names them (S0FINANCE, S0SECURITY),
# so a policy written for Slack runs on the page as written.
GROUPS = {"S0FINANCE": ["U0ALICE", "U0DANA"], "S0SECURITY": ["U0BOB"]}
# The demo's keys live under their own prefix, apart from a `signoff serve` on the same Redis.
PREFIX = "signoff-demo"


@dataclass
class Demo:
    url: str
    standin: SlackStandin
    redis_url: str


async def _on_a_local_agent_server(servers: contextlib.ExitStack, bot_port: int) -> dict[str, str]:
    """A local Agent Server (`langgraph dev`) running the demo agent, kept by `servers`; the
    settings that point the bot and runner at it."""
    secret = secrets.token_urlsafe(24)
    try:
        local = await asyncio.to_thread(
            servers.enter_context, local_agent_server.running(env={local_agent_server.SECRET_ENV: secret})
        )
    except local_agent_server.AgentServerError as exc:
        raise StartupError(str(exc)) from None
    return {
        "SIGNOFF_GRAPH": "",
        "SIGNOFF_AGENT_SERVER_URL": local.url,
        "SIGNOFF_WEBHOOK_URL": f"http://127.0.0.1:{bot_port}/agent-server/webhook",
        "SIGNOFF_WEBHOOK_SECRET": secret,
        "SIGNOFF_DEFAULT_GRAPH": "demo",
    }


@contextlib.asynccontextmanager
async def running_demo(
    redis_url: str,
    page_port: int = 3000,
    bot_port: int | None = None,
    prefix: str = PREFIX,
    agent_server: bool = False,
    policy: Path | None = POLICY,
    graph: str = GRAPH,
) -> AsyncIterator[Demo]:
    """The stand-in page, the bot and the runner running `graph`, until the block exits; with
    `agent_server`, the demo agent runs on a local Agent Server (`langgraph dev`) instead."""
    bot_port = bot_port or redis_server.free_port()
    servers = contextlib.ExitStack()
    graphs = {"SIGNOFF_GRAPH": graph}
    if agent_server:
        graphs = await _on_a_local_agent_server(servers, bot_port)
    standin = SlackStandin(SIGNING_SECRET, bot_url=f"http://127.0.0.1:{bot_port}/slack/events", groups=GROUPS)
    try:
        await standin.start(port=page_port, page=True)
    except OSError as exc:
        servers.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"port {page_port} is in use by another process: pick another one with "
                f"`make demo PORT=3200` (or `signoff demo --port 3200`)"
            ) from None
        raise
    settings = Settings.from_env(
        {
            **os.environ,
            "REDIS_URL": redis_url,
            "SIGNOFF_PREFIX": prefix,
            "SLACK_BOT_TOKEN": standin.token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": standin.base_url,
            "PORT": str(bot_port),
            # the passkey pages (step_up), on the bot's port: localhost, where browsers take passkeys
            "SIGNOFF_PUBLIC_URL": f"http://localhost:{bot_port}",
            "SIGNOFF_CHANNEL": standin.page_channel,
            "SIGNOFF_POLICY": str(policy or ""),  # none: ./signoff.toml when it exists
            "SIGNOFF_APPROVERS": "",
            "SIGNOFF_REQUESTER_CANNOT_APPROVE": "",
            "SIGNOFF_GRAPHS_FILE": os.devnull,
            **graphs,
            "SLACK_APP_TOKEN": "",
        }
    )
    stop = asyncio.Event()
    tasks = [asyncio.create_task(run_bot(settings, stop)), asyncio.create_task(run_runner(settings, stop))]
    try:
        await _wait_for_bot(bot_port, tasks)
        yield Demo(url=standin.base_url.removesuffix("api/"), standin=standin, redis_url=redis_url)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await standin.stop()
        await asyncio.to_thread(servers.close)


async def _wait_for_bot(port: int, tasks: list[asyncio.Task[None]]) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for _ in range(400):
            for task in tasks:
                if task.done() and task.exception():
                    raise task.exception()  # type: ignore[misc]
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as reply:
                    if reply.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the bot did not start")


def operator_settings(redis_url: str, prefix: str = PREFIX) -> str:
    """What an operator's command (`signoff trust list`, `audit`, `pending`) needs to read this
    demo's Redis, and one line to copy. A URL with a password is not printed: the line then
    reads it from the shell, where it was set."""
    shown = redact(redis_url)
    url = shown if shown == redis_url else '"$REDIS_URL"'
    return (
        f"Operator settings: REDIS_URL={shown}, key prefix {prefix} (SIGNOFF_PREFIX). To see its "
        f"trust grants, audit or what waits, in another shell:\n"
        f"  SIGNOFF_PREFIX={prefix} REDIS_URL={url} signoff trust list"
    )


async def serve(port: int, agent_server: bool = False) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    with redis_server.running(os.environ.get("REDIS_URL")) as redis_url:
        async with running_demo(redis_url, page_port=port, agent_server=agent_server) as demo:
            where = " The agent runs on a local LangGraph Agent Server." if agent_server else ""
            print(f"Signoff demo: open {demo.url} (Ctrl-C stops it).{where}", flush=True)
            print(operator_settings(redis_url), flush=True)
            print(
                "As Riley, write to @signoff (e.g. 'Refund order 1235 for 5000'); switch to Alice to "
                "decide, or to Bob to see a refusal.",
                flush=True,
            )
            await stop.wait()
