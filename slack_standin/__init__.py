"""A local Slack for the tests and the demo: the one stand-in (see `standin`)."""

from slack_standin.models import ACK_LIMIT_S, TRIGGER_TTL_S, Call, Interaction, Message
from slack_standin.standin import SlackStandin

__all__ = ["ACK_LIMIT_S", "TRIGGER_TTL_S", "Call", "Interaction", "Message", "SlackStandin"]
