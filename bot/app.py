"""Build the Bolt app and run the bot: HTTP (or Socket Mode) plus the event consumer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent_runner.config import Settings
from agent_runner.logs import get_logger
from agent_runner.store import Store
from bot.listeners import ApprovalBot, register
from bot.policy import Policy
from bot.slack_io import EventConsumer, SlackIO, web_client

log = get_logger("bot")


def build_bot(settings: Settings, store: Store, client: AsyncWebClient | None = None) -> tuple[AsyncApp, ApprovalBot]:
    client = client or web_client(settings.slack_bot_token, settings.slack_api_url)

    async def group_members(group: str) -> Iterable[str]:
        reply = await client.usergroups_users_list(usergroup=group)
        return reply.get("users", [])

    policy = Policy(settings.approvers, settings.requester_cannot_approve, group_members)
    bot = ApprovalBot(store, SlackIO(client, store, settings.destructive_tools), policy)
    app = AsyncApp(
        client=client,
        signing_secret=settings.slack_signing_secret,
        process_before_response=True,  # ack as soon as the listener returns; I/O runs after
        request_verification_enabled=True,
    )
    register(app, bot)
    return app, bot


def http_app(app: AsyncApp) -> web.Application:
    """Slack's events, interactivity and commands on POST /slack/events, plus GET /healthz."""
    web_app = app.web_app(path="/slack/events")

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    web_app.router.add_get("/healthz", healthz)
    return web_app


async def run_bot(settings: Settings, stop: asyncio.Event) -> None:
    store = Store.from_url(settings.redis_url or "redis://127.0.0.1:6379/0", settings.prefix)
    app, bot = build_bot(settings, store)
    events = EventConsumer(store, bot.slack, consumer=settings.consumer, claim_idle_ms=settings.claim_idle_ms)
    consumer_task = asyncio.create_task(events.serve(stop))
    runner: web.AppRunner | None = None
    socket_handler = None
    try:
        if settings.slack_app_token:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            socket_handler = AsyncSocketModeHandler(app, settings.slack_app_token)
            await socket_handler.connect_async()
            log.info("bot_started", mode="socket")
        else:
            runner = web.AppRunner(http_app(app), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "0.0.0.0", settings.port).start()
            log.info("bot_started", mode="http", port=settings.port)
        await stop.wait()
    finally:
        if socket_handler is not None:
            await socket_handler.close_async()
        if runner is not None:
            await runner.cleanup()
        await bot.drain()
        consumer_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer_task
        await store.close()
