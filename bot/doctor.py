"""`signoff doctor`'s Slack checks: the token, its scopes, the channels the bot must be in."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

from agent_runner.config import Settings
from agent_runner.operate import Check

# What the bot needs from Slack (deploy/slack-manifest.yml asks for these; a test keeps them equal).
REQUIRED_SCOPES = (
    "app_mentions:read",
    "channels:history",
    "channels:read",
    "chat:write",
    "commands",
    "groups:history",
    "groups:read",
    "im:history",
    "im:read",
    "usergroups:read",
    "users:read",
)


async def slack_checks(settings: Settings, slack: Any) -> list[Check]:
    """`slack` is an AsyncWebClient, or None when there is no token."""
    if slack is None:
        return [Check("Slack token", False, "SLACK_BOT_TOKEN is not set", "set the bot token (xoxb-…)")]
    return await _slack_checks(settings, slack)


async def _slack_checks(settings: Settings, slack: Any) -> list[Check]:
    checks = []
    try:
        reply = await slack.auth_test()
    except SlackApiError as exc:
        error = exc.response.get("error")
        return [
            Check("Slack token", False, f"auth.test: {error}", "use the app's Bot User OAuth Token (xoxb-…)")
        ]
    except Exception as exc:
        return [
            Check("Slack token", False, f"Slack unreachable: {type(exc).__name__}", "check SLACK_API_URL")
        ]
    checks.append(Check("Slack token", True, f"bot {reply.get('user')} in team {reply.get('team')}"))
    granted = {s.strip() for s in reply.headers.get("x-oauth-scopes", "").split(",") if s.strip()}
    missing = [s for s in REQUIRED_SCOPES if s not in granted]
    checks.append(
        Check("token scopes", True, f"{len(granted)} granted, none missing")
        if not missing
        else Check(
            "token scopes",
            False,
            f"missing {', '.join(missing)}",
            "add them in the app's OAuth & Permissions (deploy/slack-manifest.yml lists them) and reinstall",
        )
    )
    channels = dict.fromkeys([*([settings.channel] if settings.channel else []), *_policy_channels(settings)])
    for channel in channels:
        try:
            info = await slack.conversations_info(channel=channel)
            member = bool(info["channel"].get("is_member"))
            detail = "the bot is a member" if member else "the bot is not a member: cards cannot be posted"
            checks.append(Check(f"channel {channel}", member, detail, f"/invite @yourbot in {channel}"))
        except SlackApiError as exc:
            checks.append(
                Check(f"channel {channel}", False, str(exc.response.get("error")), "check the channel id")
            )
    return checks


def _policy_channels(settings: Settings) -> list[str]:
    return [rule.channel for rule in settings.policy.rules if rule.channel]
