"""structlog, configured once at the process edge.

JSON lines when `LOG_FORMAT=json` (the Procfile sets it), readable key=value
otherwise. Context such as thread_id, interrupt_id, approval_id and the Slack
user is bound with `structlog.contextvars.bound_contextvars(...)` or
`log.bind(...)`, never formatted into the message.

Credentials in URLs (`redis://:secret@host`, `postgres://user:pw@db`) never
reach a log line: one processor redacts every value, and a filter does the
same for the standard library's loggers (Bolt, redis-py, aiohttp). The bot's
Slack client applies the same `redact` to everything it sends.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import sys
from collections.abc import Callable, MutableMapping
from contextvars import ContextVar
from typing import Any

import structlog

from core.secrets import mask_text

_configured = False

# scheme://user:password@host: the user info runs to the authority's last "@" (a password may
# hold one); key=value secrets (password=…, as DSNs and connection strings write them); Slack tokens.
_URL_CREDENTIALS = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]{1,30}://)[^\s/?#<>\"`]*@")
# A Redis URL's credentials end at its last "@" (a password may hold / ? #): REDIS_URL's forms.
_REDIS_CREDENTIALS = re.compile(r"\b(rediss?(?:\+cluster|\+sentinel)?://)[^\s<>\"'`]*@")
_KEY_VALUE = re.compile(
    r"(?i)\b(password|passwd|pwd(?=\s*[=:])|(?:secret|token|api_?key)(?=\s*=))(\s*[=:]\s*)"
    r"('[^']*'|\"[^\"]*\"|[^\s;,&\"']+)"
)
_LINKS = re.compile(r"(/(?:step-up|passkeys)/)[A-Za-z0-9_\-]{8,}")  # one-time links: a passkey's page
_TOKENS = re.compile(r"\b(xox[abposre]|xapp)-[A-Za-z0-9-]{8,}")


def redact(text: str) -> str:
    """`text` with URL credentials, key=value secrets and Slack tokens replaced by `***`, and
    anything else shaped like a secret masked (`core.secrets.mask_text`: keys, tokens, JWTs)."""
    if "@" in text:
        text = _REDIS_CREDENTIALS.sub(r"\1***@", text)
        text = _URL_CREDENTIALS.sub(r"\1***@", text)
    if "=" in text or ":" in text:
        text = _KEY_VALUE.sub(r"\1\2***", text)
    if "-" in text:
        text = _TOKENS.sub(r"\1-***", text)
    return mask_text(text)


def redact_deep(value: Any, clean: Callable[[str], str] = redact) -> Any:
    """Every string in nested dicts and lists redacted (`clean`)."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {k: redact_deep(v, clean) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_deep(v, clean) for v in value]
    return value


def redact_for_logs(text: str) -> str:
    """`redact`, and a passkey page's one-time link cut to its path: a log reader never holds
    one (the link itself goes to its person, in Slack)."""
    text = redact(text)
    return _LINKS.sub(r"\1***", text) if "/step-up/" in text or "/passkeys/" in text else text


# What structlog and Signoff themselves write into every line (no agent text, no secret): not
# searched for secrets (an id of 20-32 hex digits costs the shape search ~5 µs, on every line)
_OURS = frozenset({"event", "level", "timestamp", "component", "approval_id", "interrupt_id", "trace_id"})


def _redact_event(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    return {
        k: redact_deep(v, redact_for_logs)
        if k not in _OURS and isinstance(v, str | dict | list | tuple)
        else v
        for k, v in event.items()
    }


class _Stderr(io.TextIOWrapper):
    """Whatever `sys.stderr` is when a line is written (a test may have swapped it)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO())

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


# Set only around the one Slack call sent unredacted ("Show secret values": a view meant to hold
# them, for the approver it was checked for; `bot.slack.clients.unredacted`): slack_sdk's own
# lines about it (at DEBUG it logs each request's body) are dropped.
UNREDACTED: ContextVar[bool] = ContextVar("unredacted", default=False)


class RedactingFilter(logging.Filter):
    """The standard library's log records, redacted like structlog's."""

    def filter(self, record: logging.LogRecord) -> bool:
        if UNREDACTED.get() and record.name.startswith("slack_sdk"):
            return False
        message = record.getMessage()
        clean = redact_for_logs(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact_for_logs(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def trace_id(thread_id: str) -> str:
    """A W3C-shaped trace id (32 hex) for one LangGraph thread: the same in every process, so one
    run, its approvals and its resumes can be followed across the bot and the runner."""
    return hashlib.sha256(thread_id.encode()).hexdigest()[:32]


def add_trace_id(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: `trace_id` beside every line that names a thread."""
    thread_id = event.get("thread_id")
    if isinstance(thread_id, str) and "trace_id" not in event:
        event["trace_id"] = trace_id(thread_id)
    return event


def configure_logging(fmt: str | None = None, level: str | None = None) -> None:
    global _configured
    if _configured:
        return
    fmt = (fmt or os.environ.get("LOG_FORMAT", "console")).lower()
    level_name = (level or os.environ.get("LOG_LEVEL", "INFO")).upper()
    numeric = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.processors.KeyValueRenderer(
            key_order=["timestamp", "level", "component", "event"], drop_missing=True
        )
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_id,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),
        cache_logger_on_first_use=True,
    )
    redacting = RedactingFilter()
    for handler in [*logging.getLogger().handlers, logging.lastResort]:
        if handler is not None:
            handler.addFilter(redacting)
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(component=name)
