"""Build the Bolt app and run the bot: HTTP (or Socket Mode) plus the event consumer."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Iterable

from aiohttp import web
from pydantic import BaseModel, Field, ValidationError
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from agent_runner.config import Settings
from agent_runner.graphs import default_graph, graph_specs
from agent_runner.logs import get_logger
from agent_runner.store import Store
from agent_runner.worker import start_run
from bot.chatops import ChatOps, register_chatops
from bot.listeners import ApprovalBot, register
from bot.policy import Policy
from bot.slack_io import EventConsumer, SlackIO, web_client

log = get_logger("bot")


class BotIdentity:
    """Bolt's `authorize`: one auth.test per process, not one per request.

    Bolt's default single-team authorisation caches auth.test only after the
    first answer, so a burst of clicks on a fresh replica calls it once per
    click, on the path to the ack. `run_bot` calls `load()` at start, which
    also fails fast on a bad token.
    """

    def __init__(self, client: AsyncWebClient):
        self.client = client
        self._result: AuthorizeResult | None = None
        self._lock = asyncio.Lock()

    async def load(self) -> AuthorizeResult:
        async with self._lock:
            if self._result is None:
                reply = await self.client.auth_test()
                self._result = AuthorizeResult(
                    enterprise_id=reply.get("enterprise_id"), team_id=reply.get("team_id"),
                    bot_token=self.client.token, bot_id=reply.get("bot_id"), bot_user_id=reply.get("user_id"),
                )
        return self._result

    async def result(self) -> AuthorizeResult:
        return self._result or await self.load()


def build_bot(settings: Settings, store: Store, specs: dict[str, str],
              client: AsyncWebClient | None = None) -> tuple[AsyncApp, ApprovalBot, BotIdentity]:
    client = client or web_client(settings.slack_bot_token, settings.slack_api_url)

    async def group_members(group: str) -> Iterable[str]:
        reply = await client.usergroups_users_list(usergroup=group)
        return reply.get("users", [])

    policy = Policy(settings.approvers, settings.requester_cannot_approve, group_members)
    bot = ApprovalBot(store, SlackIO(client, store, settings.destructive_tools), policy)
    identity = BotIdentity(client)

    async def authorize(enterprise_id: str | None, team_id: str | None, user_id: str | None) -> AuthorizeResult:
        return await identity.result()

    app = AsyncApp(
        client=client,
        signing_secret=settings.slack_signing_secret,
        authorize=authorize,
        process_before_response=True,  # ack as soon as the listener returns; I/O runs after
        request_verification_enabled=True,
    )
    register(app, bot)
    register_chatops(app, ChatOps(bot, list(specs), default_graph(settings, specs), settings.starters,
                                  settings.channel_graphs))
    return app, bot, identity


class RunRequest(BaseModel):
    task: str = Field(min_length=1, max_length=20_000)
    channel: str = Field(min_length=1)
    graph: str | None = None
    requester: str | None = None


def http_app(app: AsyncApp, settings: Settings, store: Store, specs: dict[str, str]) -> web.Application:
    """Slack's events, interactivity and commands on POST /slack/events, GET /healthz,
    and POST /runs (bearer SIGNOFF_API_TOKEN) for runs started by cron jobs or webhooks."""
    web_app = app.web_app(path="/slack/events")

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def post_runs(request: web.Request) -> web.Response:
        if not settings.api_token:
            return web.json_response({"ok": False, "error": "the runs API is off: set SIGNOFF_API_TOKEN"}, status=404)
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {settings.api_token}".encode()):
            return web.json_response({"ok": False, "error": "a valid bearer token is required"}, status=401)
        try:
            wanted = RunRequest.model_validate_json(await request.read())
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return web.json_response({"ok": False, "error": problems}, status=400)
        graph = wanted.graph or default_graph(settings, specs)
        if graph not in specs:
            return web.json_response({"ok": False, "error": f"no graph {graph!r}; graphs: {sorted(specs)}"},
                                     status=400)
        thread_id = await start_run(store, wanted.task, wanted.channel, graph, requester=wanted.requester)
        return web.json_response({"ok": True, "thread_id": thread_id, "graph": graph}, status=202)

    web_app.router.add_get("/healthz", healthz)
    web_app.router.add_post("/runs", post_runs)
    return web_app


async def run_bot(settings: Settings, stop: asyncio.Event) -> None:
    store = Store.from_url(settings.redis_url or "redis://127.0.0.1:6379/0", settings.prefix)
    specs = graph_specs(settings)  # names only: the bot never imports a graph
    app, bot, identity = build_bot(settings, store, specs)
    await identity.load()
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
            runner = web.AppRunner(http_app(app, settings, store, specs), access_log=None)
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
