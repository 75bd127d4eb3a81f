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

import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bot.ingress import Quiet
from core.agent_server import MARK, AgentServer, ServerAway
from core.health import Health
from core.logs import get_logger, redact
from core.loops import Loop
from core.outages import OUTAGE, Backoff, is_outage
from core.reconciler import Reconciler
from core.records import ApprovalStatus
from core.store import Store

log = get_logger("agent_server")

WEBHOOK_PATH = "/agent-server/webhook"
SECRET_HEADER = "X-Signoff-Webhook-Secret"


class Watcher(Loop):
    """Finds what no webhook told: paused threads, and runs that ended unseen."""

    name = "agent server watcher"
    backoff_cap = 30.0

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
        self._server_backoff = Backoff(cap=30.0)

    async def turn(self) -> float:
        """One sweep every `every_s`. The Agent Server being away or refusing (a rotated key) is
        logged and waited out: it never stops the loop, nor the bot's readiness (the bot serves
        everything else meanwhile); Redis being away is reported as for every loop."""
        try:
            await self.sweep()
        except ServerAway as away:
            log.warning("agent_server_unreachable", error=str(away))
            return min(self.every_s, self._server_backoff.next())
        except Exception as exc:  # e.g. 401 / 403 after a key rotation: say it, keep going
            if is_outage(exc):
                raise
            log.error("agent_server_poll_failed", error=f"{type(exc).__name__}: {redact(str(exc))}")
            return min(self.every_s, self._server_backoff.next())
        self._server_backoff.reset()
        return self.every_s

    async def sweep(self) -> None:
        """One look: the assistants, the interrupted threads, the runs whose end nobody saw."""
        graphs = await self.server.refresh()
        if self.on_graphs:
            self.on_graphs(list(graphs))
        for thread in await self.server.interrupted(self.watch):
            if await self._needs_reconcile(thread):
                await self._reconcile(str(thread["thread_id"]))
        # runs Signoff sent, not seen end for a while (the runner waiting for one reconciles it)
        for thread_id in await self.store.remote.unseen(time.time() - max(self.every_s, 5.0)):
            await self._reconcile(thread_id)

    async def _needs_reconcile(self, thread: dict[str, Any]) -> bool:
        """Whether an interrupted thread has a pause without an open card (none yet, or closed by a
        409 or a refused set), or an open card whose pause is gone (answered in another tool).
        Threads another Signoff started are its own."""
        owner = (thread.get("metadata") or {}).get(MARK)
        if owner is not None and owner != self.server.prefix:
            return False
        waiting = {str(i["id"]) for found in (thread.get("interrupts") or {}).values() for i in found}
        thread_id = str(thread["thread_id"])
        for interrupt_id in waiting:
            approval = await self.store.approvals.by_interrupt(thread_id, interrupt_id)
            if approval is None or approval.status is ApprovalStatus.FAILED:
                return True
        approvals = await self.store.approvals.of_thread(thread_id)
        return any(a.status is ApprovalStatus.PENDING and a.interrupt_id not in waiting for a in approvals)

    async def _reconcile(self, thread_id: str) -> None:
        try:
            await self.reconciler.reconcile(thread_id)
        except (ServerAway, *OUTAGE):
            raise
        except Exception:  # one odd thread never stops the poll
            log.exception("reconcile_failed", thread_id=thread_id)


def _thread_id(given: object) -> str | None:
    """A thread id as the server writes it (a UUID with dashes), else None."""
    if not isinstance(given, str) or len(given) != 36:
        return None
    try:
        canonical = str(uuid.UUID(given))
    except ValueError:
        return None
    return canonical if canonical == given.lower() else None


def webhook_thread(raw: bytes) -> str | None:
    """The thread a webhook body names, or None: a body that is not JSON (nested deeper than the
    parser goes is not JSON it can read either), not an object, or names no thread's UUID."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return _thread_id(body.get("thread_id")) if isinstance(body, dict) else None


def webhook_route(secret: str, reconciler: Reconciler) -> Callable[[web.Request], Awaitable[web.Response]]:
    """POST /agent-server/webhook: the server says a run ended; the bot reads its thread.
    Anyone can reach it: a wrong secret gets 401 and at most one log line per source per
    minute (`Quiet`), any body but an object naming a thread gets 400; neither reads Redis."""
    quiet = Quiet(log)

    async def webhook(request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), secret.encode()):
            quiet.note(request.remote or "unknown", "webhook_refused", reason="secret")
            return web.json_response(
                {"ok": False, "error": f"a valid {SECRET_HEADER} is required"}, status=401
            )
        thread_id = webhook_thread(await request.read())
        if thread_id is None:
            return web.json_response({"ok": False, "error": "thread_id: a thread's UUID"}, status=400)
        try:
            state = await reconciler.reconcile(thread_id)
        except (ServerAway, *OUTAGE) as exc:  # the server delivers it again (three times), then the poll
            log.warning("webhook_deferred", thread_id=thread_id, error=repr(exc))
            return web.json_response({"ok": False, "error": "try again"}, status=503)
        log.info("webhook_taken", thread_id=thread_id, state=state)
        return web.json_response({"ok": True, "state": state.value if state else None})

    return webhook
