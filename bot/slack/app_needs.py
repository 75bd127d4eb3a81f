"""What Signoff needs of its Slack app: the scopes of the Web API methods it calls and of the
events it handles, and the features it is built for. Pure data.

`deploy/slack-manifest.yml` asks for exactly this: tests/unit/test_slack_manifest.py finds the
methods the code calls (every `client.<method>(…)` in bot/ and signoff/) and the events its
listeners handle (every `app.event("…")` in bot/listeners/), and fails when one is missing here or
in the manifest. `signoff doctor` reads the same tables to say what a workspace's app lacks.

Scopes are Slack's method and event pages' (checked in December 2026), for the conversations
Signoff uses a method in: public and private channels, and the app's DM (its Messages tab).
"""

from __future__ import annotations

# Web API method -> the bot scopes Signoff's calls of it need. A method Slack accepts with either
# of two scopes names the one Slack's page says it will require.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.delete": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    "chat.getPermalink": (),
    "chat.startStream": ("chat:write",),
    "chat.appendStream": ("chat:write",),
    "chat.stopStream": ("chat:write",),
    # Slack's page: chat:write (assistant:write is still accepted, for now)
    "assistant.threads.setStatus": ("chat:write",),
    "assistant.threads.setSuggestedPrompts": ("assistant:write",),
    # a run's thread read back (lost-post recovery) in channels, private channels and the DM
    "conversations.history": ("channels:history", "groups:history", "im:history"),
    "conversations.replies": ("channels:history", "groups:history", "im:history"),
    # `signoff doctor`: is the bot in the channels the policy names
    "conversations.info": ("channels:read", "groups:read"),
    "users.info": ("users:read",),
    "usergroups.users.list": ("usergroups:read",),
    "views.open": (),
    "views.push": (),
    "views.update": (),
    "views.publish": (),
    # `signoff doctor` with SLACK_CONFIG_TOKEN: an app configuration token's, no bot scope
    "apps.manifest.export": (),
}

# The events the bot subscribes to (as the manifest names them) -> the scopes Slack sends them for.
EVENT_SCOPES: dict[str, tuple[str, ...]] = {
    "app_mention": ("app_mentions:read",),
    "app_home_opened": (),
    "message.channels": ("channels:history",),
    "message.groups": ("groups:history",),
    "message.im": ("im:history",),
}

EVENT_USES: dict[str, str] = {
    "app_mention": "a mention of the bot starts a run",
    "app_home_opened": "the Home tab and the Messages tab's suggested prompts",
    "message.channels": "a reply in a run's thread in a channel continues the run",
    "message.groups": "the same in private channels",
    "message.im": "a message in the Messages tab starts or continues a run",
}

# Events the bot handles without the manifest subscribing to them: an app installed from an
# earlier manifest (Slack's assistant view) still sends them.
LEGACY_EVENTS: dict[str, str] = {
    "assistant_thread_started": "an assistant-view install's new thread in the Messages tab",
}

# Scopes the manifest asks for that no method or event above needs, and why.
OTHER_SCOPES: dict[str, str] = {
    "commands": "the /signoff command",
    "im:read": "asked since the first manifest; no call Signoff makes needs it",
}

# Each scope in words, for `signoff doctor`'s lines.
SCOPE_USES: dict[str, str] = {
    "app_mentions:read": "a mention of the bot starts a run",
    "channels:history": "a reply in a run's thread in a channel continues the run",
    "groups:history": "the same in private channels",
    "im:history": "messages in the Messages tab (the app's DM)",
    "im:read": "the app's DM",
    "chat:write": "cards, answers, the run's plan and a DM's status",
    "commands": "the /signoff command",
    "usergroups:read": "approvers named by user group",
    "users:read": "people's names on cards",
    "channels:read": "doctor's check that the bot is in the policy's channels",
    "groups:read": "the same for private channels",
    "assistant:write": "the agent view's suggested prompts",
}

# Scopes whose absence turns one of Slack's agent surfaces off and nothing else.
SURFACE_SCOPES: dict[str, str] = {"assistant:write": "the Messages tab's suggested prompts"}

COMMAND = "/signoff"


def method_name(client_attribute: str) -> str:
    """slack_sdk's client method name -> the Web API method (`chat_postMessage` -> `chat.postMessage`)."""
    return client_attribute.replace("_", ".")


def needed_scopes() -> set[str]:
    """Every scope a method Signoff calls or an event it handles needs."""
    return {s for scopes in (*METHOD_SCOPES.values(), *EVENT_SCOPES.values()) for s in scopes}


def required_scopes() -> tuple[str, ...]:
    """The scopes without which Signoff does not work (the surfaces' are optional), sorted."""
    return tuple(sorted((needed_scopes() | set(OTHER_SCOPES)) - set(SURFACE_SCOPES)))
