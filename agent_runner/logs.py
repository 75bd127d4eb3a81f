"""structlog, configured once at the process edge.

JSON lines when `LOG_FORMAT=json` (the Procfile sets it), readable key=value
otherwise. Context such as thread_id, interrupt_id, approval_id and the Slack
user is bound with `structlog.contextvars.bound_contextvars(...)` or
`log.bind(...)`, never formatted into the message.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False


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
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(component=name)
