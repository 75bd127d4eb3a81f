"""Build the Bolt app and run the bot: HTTP (or Socket Mode) plus its background loops.

The loops (the events consumer, the card and status refreshers, the deadline sweeper, the group directory)
survive Redis going away: each backs off, reconnects and carries on, and
`/readyz` says which one is not working meanwhile. The HTTP server answers
`/healthz` from the start, whatever Redis or Slack do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from bot.chatops import ChatOps
from bot.consumer import EventConsumer
from bot.groups import GroupDirectory
from bot.ingress import slack_events
from bot.listeners import register_listeners
from bot.passkeys.pages import PasskeyPages
from bot.payloads import Malformed, SlackId, UserId, parse, teams
from bot.permissions import Permissions
from bot.refresher import Refresher
from bot.routing import Router
from bot.service import DecisionService
from bot.slack.clients import prompt_client, stream_client, web_client
from bot.slack.io import SlackIO
from bot.slack.posts import history_limits
from bot.sweeper import DeadlineSweeper
from core import health as health_routes
from core import metrics
from core.condition_process import ConditionProcess
from core.config import Settings, StartupError, step_up_refusal
from core.graphs import default_graph, graph_specs
from core.health import Health
from core.logs import get_logger
from core.outages import Backoff, pause, until_redis
from core.policy_file import seconds
from core.producer import new_thread_id, start_run
from core.store import Store

if TYPE_CHECKING:
    from core.agent_server import AgentServer
    from core.loops import Loop
    from core.reconciler import Reconciler

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
                    enterprise_id=reply.get("enterprise_id"),
                    team_id=reply.get("team_id"),
                    bot_token=self.client.token,
                    bot_id=reply.get("bot_id"),
                    bot_user_id=reply.get("user_id"),
                )
        return self._result

    async def result(self) -> AuthorizeResult:
        return self._result or await self.load()


class _ExpectedBoltNotes(logging.Filter):
    """Bolt warns that the token is ignored when `authorize` is given: that is this app's design
    (one auth.test per process, see `BotIdentity`), not news worth a log line at every start."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.startswith(
            ("As `installation_store` or `authorize` has been used", "As you gave `client` as well")
        )


logging.getLogger("slack_bolt.AsyncApp").addFilter(_ExpectedBoltNotes())


@dataclass
class BotParts:
    app: AsyncApp
    service: DecisionService
    identity: BotIdentity
    directory: GroupDirectory
    chat: ChatOps
    router: Router


def build_bot(
    settings: Settings,
    store: Store,
    specs: dict[str, str],
    client: AsyncWebClient | None = None,
    health: Health | None = None,
) -> BotParts:
    client = client or web_client(settings.slack_bot_token, settings.slack_api_url)

    async def group_members(group: str) -> Iterable[str]:
        reply = await client.usergroups_users_list(usergroup=group)
        return reply.get("users", [])

    slack = SlackIO(
        client,
        store,
        settings.destructive_tools,
        prompt=prompt_client(settings.slack_bot_token, settings.slack_api_url),
        streams=stream_client(settings.slack_bot_token, settings.slack_api_url),
        lease_ms=settings.lease_ms,
        history=history_limits(settings.slack_app_distribution),
    )
    named = [*settings.policy.ids(), *(i for ids in settings.starters.values() for i in ids)]
    directory = GroupDirectory(
        slack.state,
        group_members,
        named,
        refresh_s=seconds(settings.group_refresh) or 300,
        health=health,
        stale_after_s=seconds(settings.group_stale_after) or 0,
    )
    # a policy's `when`s are evaluated in a child process, within a time budget, never on this loop
    policy = Permissions(
        settings.policy, directory, ConditionProcess() if _has_conditions(settings) else None
    )
    service = DecisionService(store, slack, policy, settings.ack_budget_ms / 1000, settings.public_url)
    identity = BotIdentity(client)

    async def authorize(
        enterprise_id: str | None, team_id: str | None, user_id: str | None
    ) -> AuthorizeResult:
        return await identity.result()

    app = AsyncApp(
        client=client,
        signing_secret=settings.slack_signing_secret,
        authorize=authorize,
        process_before_response=True,  # ack as soon as the listener returns; I/O runs after
        # HTTP requests are verified before anything parses them (`bot.ingress`); Socket Mode
        # needs no signature (Slack authenticates the WebSocket).
        request_verification_enabled=False,
    )
    app.middleware(typed_payloads(service, identity))
    chat = ChatOps(
        service, list(specs), default_graph(settings, specs), settings.starters, settings.channel_graphs
    )
    register_listeners(app, service, chat)
    router = Router(slack, policy)
    directory.on_change = router.groups_changed
    return BotParts(app, service, identity, directory, chat, router)


MALFORMED = "Signoff could not read this request from Slack, so nothing changed."
FOREIGN = (
    "This Signoff serves one workspace; requests from other workspaces or organisations are not taken. "
    "Nothing changed."
)


def refusal(service: DecisionService, body: dict[str, Any], text: str) -> BoltResponse:
    """How a request that is not taken is acked: a command's reply, a modal's inline error,
    an ephemeral note for a click, or a bare 200 (events)."""
    if "command" in body:
        return BoltResponse(status=200, body=json.dumps({"response_type": "ephemeral", "text": text}))
    kind = body.get("type")
    if kind == "view_submission":
        view = body.get("view")
        state = view.get("state") if isinstance(view, dict) else None
        values = state.get("values") if isinstance(state, dict) else None
        block = next(iter(values), None) if isinstance(values, dict) and values else None
        if isinstance(block, str):
            errors = {"response_action": "errors", "errors": {block: text}}
            return BoltResponse(status=200, body=json.dumps(errors), headers=JSON)
    if kind == "block_actions":
        user = _id(body.get("user"), "id")
        channel = _id(body.get("channel"), "id") or _id(body.get("container"), "channel_id")
        if user and channel:
            service.later(service.slack.ephemeral(channel, user, text), "refusal")
    return BoltResponse(status=200, body="")


JSON: dict[str, str | Sequence[str]] = {"content-type": ["application/json;charset=utf-8"]}


def _id(holder: Any, field: str) -> str | None:
    value = holder.get(field) if isinstance(holder, dict) else None
    return value if isinstance(value, str) and re.fullmatch(r"[A-Z0-9]{2,32}", value) else None


def typed_payloads(service: DecisionService, identity: BotIdentity) -> Callable[..., Awaitable[BoltResponse]]:
    """Bolt middleware (HTTP and Socket Mode): the request's typed model into
    `context["payload"]`; a malformed request, or one from another workspace, refused."""

    async def middleware(body: dict[str, Any], context: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        try:
            payload = context.get("payload") or parse(body)  # parsed once already over HTTP
        except Malformed as exc:
            log.warning("slack_request_malformed", reason=str(exc))
            return refusal(service, body, MALFORMED)
        ours = await identity.result()
        foreign = teams(payload) - {ours.team_id, ours.enterprise_id}
        if foreign:
            log.warning("slack_request_foreign", teams=sorted(foreign))
            return refusal(service, body, FOREIGN)
        context["payload"] = payload
        return await next()

    return middleware


class RunRequest(BaseModel):
    """POST /runs: start a run as `/signoff` does, under the same allow-lists."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=20_000)
    channel: SlackId
    graph: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = None
    requester: UserId | None = None


IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


def request_digest(wanted: RunRequest) -> str:
    """What an Idempotency-Key is bound to: the request as parsed, so the order of its fields,
    its spacing and an optional field sent as null rather than left out make no difference."""
    canonical = json.dumps(wanted.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _refused(status: int, error: str) -> web.Response:
    return web.json_response({"ok": False, "error": error}, status=status)


class RunsApi:
    """POST /runs (bearer SIGNOFF_API_TOKEN): a run started by a cron job or a webhook, once per
    Idempotency-Key (bound to the request it was first used with). Its runs are the API's own
    (no requester), or SIGNOFF_API_REQUESTER's: whoever holds the token never starts a run as
    anyone they name, and such runs use no trust grant unless SIGNOFF_API_GRANTS says so."""

    def __init__(self, settings: Settings, store: Store, parts: BotParts):
        self.settings = settings
        self.store = store
        self.parts = parts

    async def post(self, request: web.Request) -> web.Response:
        if not self.settings.api_token:
            return _refused(404, "the runs API is off: set SIGNOFF_API_TOKEN")
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.settings.api_token}".encode()):
            return _refused(401, "a valid bearer token is required")
        key = request.headers.get("Idempotency-Key")
        if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
            return _refused(400, "Idempotency-Key: 1 to 255 visible ASCII characters")
        try:
            wanted = RunRequest.model_validate_json(await request.read())
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
            )
            return _refused(400, problems)
        allowed = self.settings.api_requester
        if wanted.requester is not None and wanted.requester != allowed:
            whom = f"as {allowed} only (SIGNOFF_API_REQUESTER)" if allowed else "as the API only"
            return _refused(403, f"requester: this token starts runs {whom}, not as {wanted.requester}")
        wanted = wanted.model_copy(update={"requester": allowed})
        chat = self.parts.chat
        graph = wanted.graph or chat.graph_here(wanted.channel)
        if graph is not None and graph not in chat.graphs:
            return _refused(400, f"graph: no graph {graph!r}; graphs: {sorted(chat.graphs)}")
        refusal_text = await chat.start_refusal(wanted.requester or "", wanted.channel, graph)
        if refusal_text:
            return _refused(403, refusal_text)
        assert graph is not None  # start_refusal refuses when there is no graph
        return await self._start(wanted, graph, key)

    async def _start(self, wanted: RunRequest, graph: str, key: str | None) -> web.Response:
        thread_id = new_thread_id()
        state = self.parts.service.slack.state
        if key is not None:
            digest = request_digest(wanted)
            claimed = await state.claim(f"runs:{key}", f"{digest} {thread_id}")
            first_digest, _, first = claimed.rpartition(" ")
            if first != thread_id:  # the key was used before: for this request, or another one
                # (a key claimed before keys were bound to requests names only its run: the same)
                if first_digest not in ("", digest):
                    return _refused(
                        422,
                        f"Idempotency-Key {key!r} was first used with another request (its run: {first}); "
                        "a new request needs a new key",
                    )
                return web.json_response({"ok": True, "thread_id": first, "graph": graph, "repeated": True})
        try:
            await start_run(
                self.store,
                wanted.task,
                wanted.channel,
                graph,
                thread_id,
                requester=wanted.requester,
                grants=self.settings.api_grants,
            )
        except BaseException:
            if key is not None:
                await state.forget(f"runs:{key}")
            raise
        log.info(
            "run_requested",
            thread_id=thread_id,
            graph=graph,
            slack_user=wanted.requester,
            channel=wanted.channel,
            source="api",
        )
        return web.json_response({"ok": True, "thread_id": thread_id, "graph": graph}, status=202)


def http_app(
    settings: Settings,
    store: Store,
    parts: BotParts,
    health: Health,
    loops: tuple[str, ...] = (),
    reconciler: Reconciler | None = None,
) -> web.Application:
    """Slack's events, interactivity and commands on POST /slack/events, GET /healthz and /readyz,
    POST /runs (`RunsApi`), and the Agent Server's run webhook (`bot.watch`) when
    SIGNOFF_WEBHOOK_SECRET is set."""
    web_app = web.Application()

    async def refuse_malformed(exc: Malformed) -> web.Response:
        return await to_aiohttp_response(refusal(parts.service, exc.body, MALFORMED))

    web_app.router.add_post(
        "/slack/events", slack_events(parts.app, settings.slack_signing_secret, refuse_malformed)
    )
    health_routes.add_routes(web_app, health, store, loops)
    metrics.add_route(web_app, store.queue)
    web_app.router.add_post("/runs", RunsApi(settings, store, parts).post)
    if settings.public_url:  # the passkey pages: approve with a passkey, add one (`bot.passkeys`)
        PasskeyPages(parts.service, settings.public_url).add_routes(web_app)
    if reconciler is not None and settings.webhook_secret:
        from bot.watch import WEBHOOK_PATH, webhook_route

        web_app.router.add_post(WEBHOOK_PATH, webhook_route(settings.webhook_secret, reconciler))
    return web_app


BOT_LOOPS = (
    "bot events consumer",
    "card refresher",
    "status refresher",
    "deadline sweeper",
    "group directory",
)


async def run_bot(
    settings: Settings, stop: asyncio.Event, health: Health | None = None, loops: tuple[str, ...] = BOT_LOOPS
) -> None:
    """The bot process; `health` and `loops` are shared with the runner under `signoff serve`."""
    refusal = step_up_refusal(settings)
    if refusal:
        raise StartupError(refusal)
    health = health or Health()
    store = Store.from_settings(settings)
    specs = graph_specs(settings)  # names only: the bot never imports a graph
    parts = build_bot(settings, store, specs, health=health)
    app, service, identity = parts.app, parts.service, parts.identity
    loops_to_start = _bot_loops(settings, store, parts, health)
    background: list[asyncio.Task[None]] = []
    server, reconciler, watcher = _agent_server_side(settings, store, parts, health)
    if watcher is not None:
        loops_to_start.append((watcher.name, watcher.serve))
        loops = (*loops, watcher.name)
    # HTTP in both modes: Slack's requests (HTTP mode), /healthz, /readyz, POST /runs, the webhook.
    runner = web.AppRunner(http_app(settings, store, parts, health, loops, reconciler), access_log=None)
    socket_handler = None
    try:
        await runner.setup()
        await health_routes.listen(runner, settings.port, "PORT")
        # No loop reads Redis before its keys are known to be laid out as this process reads them
        # (Redis may not be up yet: wait for it; /healthz answers meanwhile, /readyz says why not).
        if not await until_redis("layout check", stop, store.layout.checked):
            return
        # A loop that ends while the process runs makes /healthz fail: restart the process.
        background += [
            health.supervise(name, asyncio.create_task(serve(stop)), stop) for name, serve in loops_to_start
        ]
        await _until_slack_answers(identity, stop)
        if settings.slack_app_token:
            socket_handler = _socket_mode(app, settings.slack_app_token, health)
            await socket_handler.connect_async()  # (closed in `finally` even if this fails)
        log.info("bot_started", mode="socket" if socket_handler else "http", port=settings.port)
        if settings.policy_missing:  # (once started: a refusal to start stays one line)
            log.warning("policy_missing", problem=settings.policy_missing)
        await stop.wait()
    finally:
        if socket_handler is not None:
            await socket_handler.close_async()
        await runner.cleanup()
        await service.drain()
        stop.set()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await service.slack.close()
        if parts.router.permissions.conditions is not None:
            await parts.router.permissions.conditions.close()
        if server is not None:
            await server.close()
        await store.close()


def _has_conditions(settings: Settings) -> bool:
    """Whether the policy has a `when` to evaluate (else no condition process is started)."""
    return any(rule.when is not None for rule in settings.policy.rules)


async def _until_slack_answers(identity: BotIdentity, stop: asyncio.Event) -> None:
    """auth.test once at start: a bad token fails here, an unreachable Slack is waited for."""
    from slack_sdk.errors import SlackApiError

    backoff = Backoff(cap=30.0)
    while not stop.is_set():
        try:
            await identity.load()
            return
        except SlackApiError:
            raise  # invalid_auth and friends: nothing to wait for
        except Exception as exc:  # Slack unreachable: wait and try again
            log.warning("slack_unreachable", error=repr(exc))
            await pause(stop, backoff.next())


def _bot_loops(
    settings: Settings, store: Store, parts: BotParts, health: Health
) -> list[tuple[str, Callable[[asyncio.Event], Coroutine[Any, Any, None]]]]:
    """The bot's background loops, by name: the events consumer, the card refresher, the
    deadline sweeper and the group directory."""
    events = EventConsumer(
        store,
        parts.service.slack,
        parts.router,
        consumer=settings.consumer,
        lease_ms=settings.lease_ms,
        concurrency=settings.concurrency,
        health=health,
    )
    cards, statuses = (
        Refresher(parts.service.slack, health, lease_ms=settings.lease_ms, lanes=(lane,))
        for lane in ("card", "status")
    )
    deadlines = DeadlineSweeper(store, parts.router, health, lease_ms=settings.lease_ms)
    grace = seconds(settings.stop_grace) or 0
    return [
        (events.name, functools.partial(events.serve, grace_s=grace)),
        *((loop.name, loop.serve) for loop in (cards, statuses, deadlines, parts.directory)),
    ]


def _agent_server_side(
    settings: Settings, store: Store, parts: BotParts, health: Health
) -> tuple[AgentServer | None, Reconciler | None, Loop | None]:
    """With agents on an Agent Server: the server, the Reconciler its webhook uses, and the poll
    behind the webhook (`bot.watch.Watcher`); nothing otherwise."""
    if not settings.agent_server_url:
        return None, None, None
    # imported here: langgraph-sdk loads langchain_core, which a bot without one never needs
    from bot.watch import Watcher
    from core.agent_server import agent_server
    from core.reconciler import reconciler as build_reconciler

    server = agent_server(settings)
    assert server is not None
    reconciler = build_reconciler(settings, store, server, watch=True)
    watcher = Watcher(
        store,
        server,
        reconciler,
        seconds(settings.agent_server_poll) or 15,
        watch=settings.agent_server_watch,
        on_graphs=parts.chat.remote_graphs,
        health=health,
    )
    return server, reconciler, watcher


def _socket_mode(app: AsyncApp, app_token: str, health: Health) -> Any:
    """A Socket Mode handler for the app, not yet connected; /readyz says so while its socket is
    down."""
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    handler = AsyncSocketModeHandler(app, app_token)
    client = handler.client

    async def socket_problem() -> str | None:
        return None if await client.is_connected() else "Socket Mode is not connected to Slack"

    health.check("slack socket", socket_problem)
    return handler
