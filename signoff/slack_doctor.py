"""`signoff doctor`'s Slack checks: the token, its scopes, the app's features and events, the
channels the bot must be in, and the user groups the policy names (a group Slack no longer knows
grants nobody).

What a bot token can tell: its scopes (auth.test's X-OAuth-Scopes), and so whether the app has
Slack's Agents feature (Slack adds `assistant:write` with it). What only the app's configuration
tells (agent view or the earlier assistant view, the Home and Messages tabs, the command, the
events, interactivity): the app's manifest, which apps.manifest.export gives to an app
configuration token (SLACK_CONFIG_TOKEN, with SLACK_APP_ID). Each missing scope, feature and event
is one line."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

from bot.groups import NO_SUCH_GROUP
from bot.slack.app_needs import COMMAND, EVENT_SCOPES, EVENT_USES, SCOPE_USES, SURFACE_SCOPES, required_scopes
from core.config import Settings
from signoff.doctor import Check

# What the bot needs from Slack (deploy/slack-manifest.yml asks for these; a test keeps them equal).
REQUIRED_SCOPES = required_scopes()
REINSTALL = "add it in the app's OAuth & Permissions (deploy/slack-manifest.yml lists it) and reinstall"
MANIFEST = "deploy/slack-manifest.yml"


async def slack_checks(settings: Settings, slack: Any, config: Any = None) -> list[Check]:
    """`slack` is an AsyncWebClient, or None when there is no token; `config`, one with the app
    configuration token (SLACK_CONFIG_TOKEN), or None."""
    if slack is None:
        return [Check("Slack token", False, "SLACK_BOT_TOKEN is not set", "set the bot token (xoxb-…)")]
    return await _slack_checks(settings, slack) + await app_checks(settings, config)


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
    checks += scope_checks(granted)
    checks.append(_surfaces(granted))
    if not (settings.slack_config_token and settings.slack_app_id):  # (else the app's manifest tells)
        checks.append(_agent_feature(granted))
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


def scope_checks(granted: set[str]) -> list[Check]:
    """One line for the token's scopes when none is missing, else one line per missing scope."""
    missing = [s for s in REQUIRED_SCOPES if s not in granted]
    if not missing:
        return [Check("token scopes", True, f"{len(granted)} granted, none missing")]
    return [
        Check(f"scope {s}", False, f"missing: {SCOPE_USES.get(s, 'Signoff needs it')}", REINSTALL)
        for s in missing
    ]


def _agent_feature(granted: set[str]) -> Check:
    """Whether the app has Slack's Agents feature, as far as a bot token tells (optional)."""
    if "assistant:write" not in granted:
        return Check(
            "feature agent view",
            True,
            "off: the token has no assistant:write, which Slack adds with its Agents feature; runs in the"
            f" Messages tab work, without suggested prompts (turn on features.agent_view, {MANIFEST})",
        )
    return Check(
        "feature agent view",
        True,
        "on, as far as the token tells: it has assistant:write, which Slack adds with its Agents feature;"
        " whether it is the agent view or the earlier assistant view, SLACK_CONFIG_TOKEN and SLACK_APP_ID"
        " let doctor read (apps.manifest.export)",
    )


async def app_checks(settings: Settings, config: Any) -> list[Check]:
    """The app's own manifest (apps.manifest.export), read with a configuration token: each feature
    and event Signoff needs that it lacks, one line each. None without SLACK_CONFIG_TOKEN."""
    if config is None or not settings.slack_config_token:
        return []
    if not settings.slack_app_id:
        return [
            Check(
                "app manifest",
                False,
                "SLACK_CONFIG_TOKEN is set without SLACK_APP_ID",
                "set SLACK_APP_ID to the app's id (its Basic Information page)",
            )
        ]
    try:
        reply = await config.apps_manifest_export(app_id=settings.slack_app_id)
    except SlackApiError as exc:
        return [
            Check(
                "app manifest",
                False,
                f"apps.manifest.export: {exc.response.get('error')}",
                "make a new configuration token (api.slack.com/apps, Your App Configuration Tokens: they"
                " last 12 hours) for a workspace where the app is, and check SLACK_APP_ID",
            )
        ]
    except Exception as exc:
        return [
            Check("app manifest", False, f"Slack unreachable: {type(exc).__name__}", "check SLACK_API_URL")
        ]
    manifest = reply.get("manifest") or {}
    read = Check("app manifest", True, f"read {settings.slack_app_id}'s (apps.manifest.export)")
    return [read, *manifest_checks(manifest, socket_mode=bool(settings.slack_app_token))]


def manifest_checks(manifest: dict[str, Any], socket_mode: bool = False) -> list[Check]:
    """What an app's manifest lacks of what Signoff needs: one line per feature, then one per
    event missing (every line ✓ for deploy/slack-manifest.yml)."""
    features = manifest.get("features") or {}
    settings = manifest.get("settings") or {}
    home = features.get("app_home") or {}
    how = f"turn it on in the app's settings, as {MANIFEST} has it"
    checks = [_agent_view(features)]
    checks.append(
        Check("feature Home tab", True, "on")
        if home.get("home_tab_enabled")
        else Check("feature Home tab", False, "off: nobody sees the approvals waiting for them there", how)
    )
    if not home.get("messages_tab_enabled"):
        checks.append(
            Check("feature Messages tab", False, "off: nobody can start a run in the app's DM", how)
        )
    elif home.get("messages_tab_read_only_enabled"):
        checks.append(
            Check("feature Messages tab", False, "read-only: people cannot write to Signoff there", how)
        )
    else:
        checks.append(Check("feature Messages tab", True, "on"))
    commands = [c.get("command") for c in features.get("slash_commands") or []]
    checks.append(
        Check(f"feature {COMMAND}", True, "on")
        if COMMAND in commands
        else Check(f"feature {COMMAND}", False, "missing: the command does nothing", how)
    )
    interactive = (settings.get("interactivity") or {}).get("is_enabled")
    checks.append(
        Check("feature interactivity", True, "on")
        if interactive
        else Check("feature interactivity", False, "off: buttons and modals do nothing", how)
    )
    if socket_mode and not settings.get("socket_mode_enabled"):
        checks.append(
            Check("feature Socket Mode", False, "off in the app, while SLACK_APP_TOKEN is set", how)
        )
    subscribed = set((settings.get("event_subscriptions") or {}).get("bot_events") or [])
    missing = [event for event in EVENT_SCOPES if event not in subscribed]
    subscribe = (
        f"add it under Event Subscriptions, Subscribe to bot events ({MANIFEST} lists it), and reinstall"
    )
    checks += [Check(f"event {e}", False, f"not subscribed: {EVENT_USES[e]}", subscribe) for e in missing]
    if not missing:
        checks.append(Check("events", True, f"{len(EVENT_SCOPES)} subscribed, none missing"))
    return checks


def _agent_view(features: dict[str, Any]) -> Check:
    """Slack's agent view, the earlier assistant view, or neither (optional: prompts only)."""
    if "agent_view" in features:
        return Check("feature agent view", True, "on (agent_view)")
    if "assistant_view" in features:
        return Check(
            "feature agent view",
            True,
            "the app has Slack's earlier assistant view (assistant_view): Signoff handles it; Slack will"
            f" ask apps to move to agent_view ({MANIFEST}, docs/agent-surfaces.md)",
        )
    return Check(
        "feature agent view",
        True,
        f"off: runs in the Messages tab work, without suggested prompts (features.agent_view, {MANIFEST})",
    )


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
