"""The door of POST /slack/events: verify Slack's signature before anything reads the body.

An HTTP request that is not signed with the app's signing secret within the
last five minutes gets 401 and an empty body: nothing parses it, nothing
reaches Bolt or Redis, and the log gets at most one line per source per
minute however many arrive, the next one saying how many were muted (`Quiet`,
which the Agent Server webhook's door uses too). A signed request is decoded
and parsed into its typed model (`bot.payloads`) once, before Bolt sees it,
and handed to Bolt in its context; one that cannot be read is acked and
refused (`refuse`), never a 500.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from structlog.typing import FilteringBoundLogger

from bot.payloads import Malformed, decode, parse
from core.logs import get_logger
from core.metrics import ACK_SECONDS

log = get_logger("ingress")

Refuse = Callable[[Malformed], Awaitable[web.Response]]
MAX_AGE_S = 300


class Quiet:
    """One log line per source per `every` seconds on `log`; the rest are counted into the next
    line (`muted_since_last`). For a door that refuses requests anyone can send: a flood of them
    must not become a flood of log lines. At most `sources` sources are remembered."""

    def __init__(
        self,
        log: FilteringBoundLogger,
        every: float = 60.0,
        sources: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.log = log
        self.every = every
        self.sources = sources
        self.clock = clock
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def note(self, source: str, event: str, **fields: object) -> None:
        now = self.clock()
        last, muted = self._seen.get(source, (float("-inf"), 0))
        if now - last < self.every:
            self._seen[source] = (last, muted + 1)
            return
        self._seen[source] = (now, 0)
        self._seen.move_to_end(source)
        while len(self._seen) > self.sources:
            self._seen.popitem(last=False)
        self.log.warning(event, source=source, muted_since_last=muted, **fields)


KIND = web.RequestKey("signoff_kind", str)  # what a request was (for the ack histogram)


def signed(secret: bytes, raw: bytes, stamp: str, signature: str) -> bool:
    """Slack's v0 signature over the raw bytes (slack_sdk's verifier decodes them first, and
    raises on a body that is not UTF-8), made within the last five minutes."""
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12 and signature.isascii()):
        return False
    if abs(time.time() - int(stamp)) > MAX_AGE_S:
        return False
    expected = "v0=" + hmac.new(secret, b"v0:" + stamp.encode() + b":" + raw, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def slack_events(
    app: AsyncApp, signing_secret: str, refuse: Refuse
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The POST /slack/events handler: the signature first, then one parse into the typed model,
    handed to Bolt in the request's context (`context["payload"]`) so nothing parses it again;
    Bolt's own signature check is off (`bot.app` turns it off: this is the check)."""
    secret = signing_secret.encode()
    quiet = Quiet(log)

    async def handler(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        reply = await answer(request)
        ACK_SECONDS.labels(kind(request)).observe(time.perf_counter() - started)
        return reply

    def kind(request: web.Request) -> str:
        return request.get(KIND, "refused")

    async def answer(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        stamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        if not signed(secret, raw, stamp, signature):
            quiet.note(request.remote or "unknown", "slack_request_unsigned", path=request.path)
            return web.Response(status=401)
        body: dict[str, object] = {}
        try:
            body = decode(raw, request.content_type)
            payload = parse(body)
            request[KIND] = "command" if "command" in body else str(body.get("type", "other"))
            # Bolt is handed the body parsed: "socket_mode" is the mode in which it takes a dict
            # as it is (in "http" mode it parses the raw text again: the form's url-decoding is
            # the largest part of an ack's CPU). Its only other effects (slack_bolt 1.30): Bolt's
            # own signature check is skipped (`bot.app` turns it off: the check above is the
            # one), and `raw_body` is empty (only that check reads it).
            bolt_request = AsyncBoltRequest(
                body=body,
                query=request.query_string,
                headers=dict(request.headers),
                context={"payload": payload},
                mode="socket_mode",
            )
        except Malformed as exc:
            log.warning("slack_request_malformed", reason=str(exc))
            return await refuse(exc)
        except Exception as exc:  # Bolt cannot build its context from it: the body is what is wrong
            log.warning("slack_request_malformed", reason=f"Bolt cannot read it ({type(exc).__name__})")
            return await refuse(Malformed("unreadable", body))  # a click still hears why
        return await to_aiohttp_response(await app.async_dispatch(bolt_request))

    return handler
