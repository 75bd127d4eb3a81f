"""A local Slack for the tests and the demo: the one stand-in (see `standin`)."""

from slack_standin.models import (
    ACK_LIMIT_S,
    RESPONSE_URL_TTL_S,
    RESPONSE_URL_USES,
    TRIGGER_TTL_S,
    Call,
    Interaction,
    Message,
    ResponseUrl,
)
from slack_standin.standin import SlackStandin

__all__ = [
    "ACK_LIMIT_S",
    "RESPONSE_URL_TTL_S",
    "RESPONSE_URL_USES",
    "TRIGGER_TTL_S",
    "Call",
    "Interaction",
    "Message",
    "ResponseUrl",
    "SlackStandin",
]
