"""The bot's side of an Agent Server: its run webhook, and the poll behind it.

The webhook (`POST /agent-server/webhook`, with the secret header the
server's langgraph.json `webhooks.headers` sends) is a trigger: it names the
thread whose run ended, and the bot reads that thread (`Reconciler`). The
server drops a webhook after three failed deliveries, so the poll (`Watcher`)
looks, every `SIGNOFF_AGENT_SERVER_POLL`, at the interrupted threads (Signoff's
own, or with `SIGNOFF_AGENT_SERVER_WATCH` every one of the deployment) and at
the threads whose run Signoff sent and has not seen end. It also keeps the
deployment's assistants current for mentions and `/signoff use`.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from agent_runner.health import Health
from agent_runner.logs import get_logger
from agent_runner.records import ApprovalStatus
from agent_runner.remote import AgentServer, Reconciler, ServerAway
from agent_runner.store import Store
from agent_runner.streams import OUTAGE, Backoff, pause

log = get_logger("agent_server")

WEBHOOK_PATH = "/agent-server/webhook"
SECRET_HEADER = "X-Signoff-Webhook-Secret"
UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


class Watcher:
    """Finds what no webhook told: paused threads, and runs that ended unseen."""

    name = "agent server watcher"

    def __init__(
        self,
        store: Store,
        server: AgentServer,
        reconciler: Reconciler,
        every_s: float,
        watch: bool = False,
        on_graphs: Callable[[list[str]], None] | None = None,
        health: Health | None = None,
    ):
        self.store = store
        self.server = server
        self.reconciler = reconciler
        self.every_s = every_s
        self.watch = watch
        self.on_graphs = on_graphs
        self.health = health or Health()

    async def serve(self, stop: asyncio.Event) -> None:
        backoff = Backoff(cap=30.0)
        while not stop.is_set():
            try:
                await self.sweep()
                backoff.reset()
                self.health.up(self.name)
                await pause(stop, self.every_s)
            except ServerAway as away:  # the bot serves everything else meanwhile
                self.health.up(self.name)
                log.warning("agent_server_unreachable", error=str(away))
                await pause(stop, min(self.every_s, backoff.next()))
            except OUTAGE as exc:
                self.health.down(self.name, f"Redis unavailable: {type(exc).__name__}")
                log.warning("redis_unavailable", loop=self.name, error=repr(exc))
                await pause(stop, backoff.next())

    async def sweep(self) -> int:
        """One look; returns how many threads were reconciled."""
        graphs = await self.server.refresh()
        if self.on_graphs:
            self.on_graphs(list(graphs))
        looked = 0
        for thread in await self.server.interrupted(self.watch):
            if not await self._news(thread):
                continue  # every pause has its approval, and every open card a pause
            looked += await self._reconcile(str(thread["thread_id"]))
        # runs Signoff sent, not seen end for a while (the runner waiting for one reconciles it)
        quiet = time.time() - max(self.every_s, 5.0)
        for thread_id in await self.store.redis.zrangebyscore(self.store.keys.remote_active, 0, quiet):
            looked += await self._reconcile(thread_id)
        return looked

    async def _news(self, thread: dict[str, Any]) -> bool:
        """Whether an interrupted thread has a pause without an approval, or an open card whose
        pause is gone (answered in another tool)."""
        waiting = {str(i["id"]) for found in (thread.get("interrupts") or {}).values() for i in found}
        for interrupt_id in waiting:
            if not await self.store.redis.exists(self.store.keys.by_interrupt(interrupt_id)):
                return True
        approvals = await self.store.thread_approvals(str(thread["thread_id"]))
        return any(a.status is ApprovalStatus.PENDING and a.interrupt_id not in waiting for a in approvals)

    async def _reconcile(self, thread_id: str) -> int:
        try:
            await self.reconciler.reconcile(thread_id)
        except (ServerAway, *OUTAGE):
            raise
        except Exception:  # one odd thread never stops the poll
            log.exception("reconcile_failed", thread_id=thread_id)
        return 1


def webhook_route(secret: str, reconciler: Reconciler) -> Callable[[web.Request], Awaitable[web.Response]]:
    """POST /agent-server/webhook: the server says a run ended; the bot reads its thread."""

    async def webhook(request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), secret.encode()):
            log.warning("webhook_refused", reason="secret")
            return web.json_response(
                {"ok": False, "error": f"a valid {SECRET_HEADER} is required"}, status=401
            )
        try:
            body = await request.json()
        except ValueError:
            body = None
        thread_id = body.get("thread_id") if isinstance(body, dict) else None
        if not isinstance(thread_id, str) or not UUID.fullmatch(thread_id):
            return web.json_response({"ok": False, "error": "thread_id: a thread's UUID"}, status=400)
        try:
            state = await reconciler.reconcile(thread_id)
        except (ServerAway, *OUTAGE) as exc:  # the server delivers it again (three times), then the poll
            log.warning("webhook_deferred", thread_id=thread_id, error=repr(exc))
            return web.json_response({"ok": False, "error": "try again"}, status=503)
        log.info("webhook_taken", thread_id=thread_id, state=state)
        return web.json_response({"ok": True, "state": state.value if state else None})

    return webhook
