"""The bot's Slack Web API clients: every call's arguments redacted first, Slack's errors and
429s counted for /metrics, and the retry policy of each client (`web_client` for messages
people wait for, `prompt_client` for calls that are useless late and for history reads)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from core.logs import UNREDACTED as _UNREDACTED
from core.logs import redact_deep
from core.metrics import SLACK_429, SLACK_ERRORS


@contextmanager
def unredacted() -> Iterator[None]:
    """The calls made inside send their arguments as they are (nothing else does)."""
    token = _UNREDACTED.set(True)
    try:
        yield
    finally:
        _UNREDACTED.reset(token)


class RedactingClient(AsyncWebClient):
    """Every Web API call's arguments pass through `redact` first: whatever a tool's error, an
    answer or an argument says, no URL's credentials reach Slack. And every call goes through
    one aiohttp session, made at the first call: without one, slack_sdk makes a session (a
    new connection, a new TLS handshake with slack.com) for each call and closes it after
    (`close` ends it)."""

    async def api_call(
        self,
        api_method: str,
        *,
        data: Any = None,
        params: dict[str, Any] | None = None,
        json: dict[str, Any] | None = None,
        **rest: Any,
    ) -> Any:
        if self.session is None or self.session.closed:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout), trust_env=self.trust_env_in_session
            )
        clean = (lambda v: v) if _UNREDACTED.get() else redact_deep
        try:
            return await super().api_call(
                api_method,
                data=clean(data) if isinstance(data, dict) else data,
                params=clean(params),
                json=clean(json),
                **rest,
            )
        except SlackApiError as exc:
            SLACK_ERRORS.labels(api_method, str(exc.response.get("error") or exc.response.status_code)).inc()
            raise

    async def close(self) -> None:
        if self.session is not None and not self.session.closed:
            await self.session.close()


class Counting429(AsyncRetryHandler):
    """Counts every 429 (retried or not) for /metrics; retries nothing itself. (slack_sdk stops
    asking a handler once the call's attempts reach its `max_retry_count`: hence no cap here.)"""

    def __init__(self) -> None:
        super().__init__(max_retry_count=1_000_000)

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is not None and response.status_code == 429:
            SLACK_429.labels(request.url.rsplit("/", 1)[-1]).inc()
        return False


def web_client(token: str, base_url: str) -> RedactingClient:
    """The client for messages people wait for: retries 429 (Retry-After), 5xx and dropped connections."""
    return RedactingClient(
        token=token,
        base_url=base_url,
        retry_handlers=[
            Counting429(),
            AsyncRateLimitErrorRetryHandler(max_retry_count=12),  # replicas share one rate limit
            AsyncServerErrorRetryHandler(max_retry_count=3),
            AsyncConnectionErrorRetryHandler(max_retry_count=3),
        ],
    )


def stream_client(token: str, base_url: str) -> RedactingClient:
    """For the streaming methods: a 429 is waited out (Slack applied nothing), anything else is
    not sent again: a retried chat.appendStream whose first try Slack applied would add its text
    twice, a retried chat.startStream would open a second stream (`bot.slack.surfaces` recovers)."""
    return RedactingClient(
        token=token,
        base_url=base_url,
        retry_handlers=[Counting429(), AsyncRateLimitErrorRetryHandler(max_retry_count=12)],
    )


def prompt_client(token: str, base_url: str) -> RedactingClient:
    """For calls that are useless late (views.open's trigger lives 3 s; card refreshes are
    re-queued with Retry-After instead), and for reading history, whose 429s `Posts.find` waits
    out itself within its bound, keeping its claim (waited out here, one call could sit through
    12 Retry-Afters of a minute each): no waiting out 429s."""
    return RedactingClient(
        token=token,
        base_url=base_url,
        retry_handlers=[Counting429(), AsyncConnectionErrorRetryHandler(max_retry_count=1)],
    )
