"""The app as the workspace has it configured: its manifest.

By default, what "Create New App" makes from `deploy/slack-manifest.yml`: Slack's agent view
(`features.agent_view`), the only agent experience Slack gives a new app since June 2026. An app
installed before that has the assistant view instead (`assistant_view_install`): Slack then starts
a thread of its own in the Messages tab and sends `assistant_thread_started`. The stand-in
behaves as the manifest says (`experience`), and apps.manifest.export returns it to an app
configuration token, as Slack does.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).resolve().parent.parent / "deploy" / "slack-manifest.yml"


def manifest_scopes(manifest: Path = MANIFEST) -> tuple[str, ...]:
    """The bot scopes the app's manifest asks for: what installing it grants."""
    if not manifest.is_file():
        return ()
    bot = manifest.read_text().split("bot:", 1)[-1].split("settings:", 1)[0]
    return tuple(re.findall(r"^\s+- ([a-z_.:]+)", bot, re.M))


def load_manifest(manifest: Path = MANIFEST) -> dict[str, Any] | None:
    """The manifest as a dict (None without the file, or without PyYAML: then apps.manifest.export
    answers app_not_found and the stand-in plays the agent view)."""
    try:
        import yaml
    except ImportError:
        return None
    if not manifest.is_file():
        return None
    loaded = yaml.safe_load(manifest.read_text())
    return loaded if isinstance(loaded, dict) else None


def assistant_view_install(manifest: dict[str, Any]) -> dict[str, Any]:
    """The same app as installed from Signoff's manifest before Slack's agent view: the assistant
    view (its description, no prompts), subscribed to assistant_thread_started besides."""
    earlier = copy.deepcopy(manifest)
    features = earlier.setdefault("features", {})
    agent = features.pop("agent_view", {}) or {}
    features["assistant_view"] = {"assistant_description": agent.get("agent_description", "Signoff")}
    events = earlier.setdefault("settings", {}).setdefault("event_subscriptions", {})
    events["bot_events"] = [*events.get("bot_events", []), "assistant_thread_started"]
    return earlier
