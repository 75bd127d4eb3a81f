"""`signoff doctor`'s Slack checks: the token, its scopes, the channels the bot must be in, and
the user groups the policy names (a group Slack no longer knows grants nobody)."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

from bot.groups import NO_SUCH_GROUP
from core.config import Settings
from signoff.doctor import Check

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
# What Slack's agent surfaces need beyond those: without it they are off, nothing else is.
SURFACE_SCOPES = {"assistant:write": "the Messages tab's suggested prompts"}


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
    checks.append(_surfaces(granted))
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
    checks += await _group_checks(settings, slack)
    return checks


def _surfaces(granted: set[str]) -> Check:
    """Which of Slack's agent surfaces this token allows (none is required: each falls back)."""
    base = "the run's plan, streamed answers and a DM's session status"
    said = [f"{base}: on (chat:write)" if "chat:write" in granted else f"{base}: off (no chat:write)"]
    for scope, what in SURFACE_SCOPES.items():
        said.append(
            f"{what}: on" if scope in granted else f"{what}: off, add {scope} and reinstall to turn it on"
        )
    return Check("agent surfaces", True, "; ".join(said))


async def _group_checks(settings: Settings, slack: Any) -> list[Check]:
    """Each user group the policy (or SIGNOFF_STARTERS) names: does Slack know it, who is in it."""
    named = [*settings.policy.ids(), *(i for ids in settings.starters.values() for i in ids)]
    checks = []
    for group in sorted({i for i in named if i.startswith("S")}):
        try:
            reply = await slack.usergroups_users_list(usergroup=group)
            users = reply.get("users", [])
            checks.append(
                Check(
                    f"user group {group}", bool(users), f"{len(users)} members", "add people to it in Slack"
                )
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error"))
            gone = error in NO_SUCH_GROUP
            checks.append(
                Check(
                    f"user group {group}",
                    False,
                    f"Slack says it does not exist ({error}): it grants nobody"
                    if gone
                    else f"usergroups.users.list: {error}",
                    "name an existing group in the policy" if gone else "check the usergroups:read scope",
                )
            )
    return checks


def _policy_channels(settings: Settings) -> list[str]:
    return [rule.channel for rule in settings.policy.rules if rule.channel]
