"""Socket Mode, as Slack speaks it: the app dials in over a WebSocket instead of exposing a URL.

* `apps.connections.open` (with the app-level `xapp-` token) answers a
  WebSocket URL here; the connection gets a `hello` first.
* Events, interactions and slash commands are sent as envelopes
  (`{"envelope_id", "type": "events_api" | "interactive" | "slash_commands",
  "payload", "accepts_response_payload"}`); the app acks each with its
  `envelope_id` and, where Slack accepts one, a response payload (modal
  errors, a command's answer). An ack later than 3 s counts as failed, as over
  HTTP. With several connections (replicas), each envelope goes to one.
* `disconnect(reason)` sends `{"type": "disconnect"}`: the app reconnects,
  as it must when Slack refreshes a connection.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import uuid
from typing import Any

from aiohttp import WSMsgType, web

from slack_standin.models import ACK_LIMIT_S, Interaction
from slack_standin.workspace import Workspace


class SocketMode(Workspace):
    app_token = "xapp-standin"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.connections_opened = 0
        self._socket_url = ""
        self._envelopes = itertools.count(1)

    @property
    def socket_connected(self) -> bool:
        return bool(self._sockets)

    def _apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        self.connections_opened += 1
        return {"ok": True, "url": f"{self._socket_url}?ticket={ticket}"}

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets) + 1,
                "connection_info": {"app_id": "A0SIGNOFF"},
                "debug_info": {"host": "standin", "approximate_connection_time": 3600},
            }
        )
        self._sockets.append(socket)
        try:
            async for message in socket:
                if message.type != WSMsgType.TEXT:
                    continue
                ack = json.loads(message.data)
                waiting = self._acks.pop(str(ack.get("envelope_id")), None)
                if waiting and not waiting.done():
                    waiting.set_result(ack)
        finally:
            if socket in self._sockets:
                self._sockets.remove(socket)
        return socket

    async def over_socket(self, kind: str, payload: dict[str, Any], retry: int = 0) -> Interaction:
        """Send one envelope to one connected app; its ack (and response payload) is the answer."""
        envelope_id = f"{next(self._envelopes)}-{uuid.uuid4().hex[:8]}"
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
        }
        if kind == "events_api":
            envelope.update(retry_attempt=retry, retry_reason="timeout" if retry else "")
        acked: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._acks[envelope_id] = acked
        sent_at, started = time.monotonic(), time.perf_counter()
        socket = random.choice(self._sockets)
        await socket.send_json(envelope)
        try:
            ack = await asyncio.wait_for(acked, ACK_LIMIT_S + 2)
        except TimeoutError:
            interaction = Interaction(0, "", time.perf_counter() - started, sent_at)
        else:
            body = json.dumps(ack["payload"]) if ack.get("payload") else ""
            interaction = Interaction(200, body, time.perf_counter() - started, sent_at)
        finally:
            self._acks.pop(envelope_id, None)
        self.interactions.append(interaction)
        return interaction

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask every connected app to reconnect (Slack does this every few hours)."""
        for socket in list(self._sockets):
            await socket.send_json(
                {"type": "disconnect", "reason": reason, "debug_info": {"host": "standin"}}
            )

    async def close_sockets(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
