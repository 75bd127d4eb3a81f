"""A stand-in Slack wired to a small fake bot (an aiohttp handler), for the stand-in's own tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from signoff_demo.redis_server import free_port
from slack_standin import SlackStandin


@contextlib.asynccontextmanager
async def standin_for(
    events: Callable[[web.Request], Awaitable[web.StreamResponse]], page: bool = False
) -> AsyncIterator[tuple[SlackStandin, AsyncWebClient]]:
    """The stand-in (with its clickable page, `page`), sending its payloads to `events` (served
    at /slack/events), and a Web API client of it; both stopped on the way out."""
    app = web.Application()
    app.router.add_post("/slack/events", events)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    standin = SlackStandin("secret", bot_url=f"http://127.0.0.1:{port}/slack/events")
    client = AsyncWebClient(token=standin.token, base_url=await standin.start(page=page))
    try:
        yield standin, client
    finally:
        await standin.stop()
        await runner.cleanup()
