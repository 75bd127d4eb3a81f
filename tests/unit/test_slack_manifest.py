"""deploy/slack-manifest.yml, the app a team creates from it, checked twice:

* against Slack's published JSON schema for manifests (slackapi/manifest-schema, vendored in
  tests/support/slack_manifest_schema with its source; its `$ref`s resolved from the vendored
  files, never the network);
* against the code: every scope a Web API method the code calls needs (each `client.<method>(…)`
  in bot/ and signoff/, mapped to Slack's scopes by `bot.slack.app_needs`) and every scope an event
  it subscribes to needs is asked for; every event subscribed is handled by a listener in
  bot/listeners/ (each `app.event("…")`)."""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.exceptions import NoSuchResource
from referencing.jsonschema import DRAFT7
from slack_sdk.web.async_base_client import AsyncBaseClient
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent_threads import prompts
from bot.slack.app_needs import (
    EVENT_SCOPES,
    LEGACY_EVENTS,
    METHOD_SCOPES,
    OTHER_SCOPES,
    SURFACE_SCOPES,
    method_name,
)
from signoff.slack_doctor import REQUIRED_SCOPES, manifest_checks
from slack_standin.app_config import assistant_view_install
from tests.support.paths import ROOT, SUPPORT

MANIFEST = ROOT / "deploy" / "slack-manifest.yml"
SCHEMAS = SUPPORT / "slack_manifest_schema"
# what the vendored top-level schema `$ref`s (slackapi/manifest-schema's v0.5.0 release)
PUBLISHED = "https://raw.githubusercontent.com/slackapi/manifest-schema/v0.5.0/schemas/"
VERSIONED = ("manifest.schema.1.0.0.json", "manifest.schema.2.0.0.json")


def manifest() -> dict[str, Any]:
    return yaml.safe_load(MANIFEST.read_text())


def offline(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # (a `$ref` not vendored fails, never fetches)


def slack_schema() -> Draft7Validator:
    """Slack's top-level manifest schema, its versioned schemas served from the vendored files."""
    top = json.loads((SCHEMAS / "manifest.schema.json").read_text())
    versioned = [
        (PUBLISHED + name, DRAFT7.create_resource(json.loads((SCHEMAS / name).read_text())))
        for name in VERSIONED
    ]
    return Draft7Validator(top, registry=Registry(retrieve=offline).with_resources(versioned))  # type: ignore[call-arg]


def schema_problem(checked: dict[str, Any]) -> str | None:
    error = best_match(slack_schema().iter_errors(checked))
    if error is None:
        return None
    deepest = min(error.context or [error], key=lambda e: -len(e.absolute_path))
    return f"{'.'.join(map(str, deepest.absolute_path)) or 'manifest'}: {deepest.message}"


# the schema ---------------------------------------------------------------------------------


def test_the_manifest_validates_against_slacks_published_schema():
    assert schema_problem(manifest()) is None


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def test_every_schema_the_published_one_refers_to_is_vendored_as_slack_published_it():
    top = json.loads((SCHEMAS / "manifest.schema.json").read_text())
    assert set(refs(top)) == {PUBLISHED + name for name in VERSIONED}
    for name in VERSIONED:  # (theirs refer only inside themselves)
        assert all(ref.startswith("#") for ref in refs(json.loads((SCHEMAS / name).read_text())))
    readme = (SCHEMAS / "README.md").read_text()
    for name in ("manifest.schema.json", *VERSIONED, "LICENSE"):
        data = (SCHEMAS / name).read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # (git's id of the file)
        assert f"| `{name}` |" in readme and f"`{blob}` |" in readme, (
            f"{name} is not the file the README names"
        )


def test_the_schema_refuses_what_slack_refuses_so_the_check_is_live():
    wrong_feature = manifest()
    wrong_feature["features"]["agent_vieww"] = {}
    long_description = manifest()
    long_description["features"]["agent_view"]["agent_description"] = "x" * 301
    five_prompts = manifest()
    five_prompts["features"]["agent_view"]["suggested_prompts"] *= 3
    assert "agent_vieww" in str(schema_problem(wrong_feature))
    assert "features.agent_view.agent_description" in str(schema_problem(long_description))
    assert "features.agent_view.suggested_prompts" in str(schema_problem(five_prompts))


def test_a_new_app_gets_the_agent_view_with_signoffs_own_prompts():
    features = manifest()["features"]
    assert "assistant_view" not in features  # Slack gives new apps the agent view only
    agent = features["agent_view"]
    assert agent["agent_description"]
    assert agent["suggested_prompts"] == prompts([])  # the ones every person gets ("Use <graph>": per person)
    assert features["app_home"] == {
        "home_tab_enabled": True,
        "messages_tab_enabled": True,
        "messages_tab_read_only_enabled": False,
    }


# the code ------------------------------------------------------------------------------------


def python_files(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def called_methods() -> dict[str, set[str]]:
    """Web API method -> the files that call it: every attribute (or name in a string, for a
    `getattr`) of slack_sdk's client that the bot's and the doctor's code use."""
    client = {
        name
        for name, _ in inspect.getmembers(AsyncWebClient, inspect.iscoroutinefunction)
        if not name.startswith("_") and not hasattr(AsyncBaseClient, name)
    }
    called: dict[str, set[str]] = {}
    for path in python_files("bot", "signoff"):
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "value", None)
            if isinstance(name, str) and name in client:
                called.setdefault(method_name(name), set()).add(str(path.relative_to(ROOT)))
    return called


def handled_events() -> set[str]:
    """The event types the bot's listeners handle: every `app.event("…")` in bot/listeners/."""
    handled = set()
    for path in python_files("bot/listeners"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "event"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                handled.add(str(node.args[0].value))
    return handled


def scopes_of(app: dict[str, Any]) -> set[str]:
    return set(app["oauth_config"]["scopes"]["bot"])


def events_of(app: dict[str, Any]) -> list[str]:
    return list(app["settings"]["event_subscriptions"]["bot_events"])


def missing_scopes(app: dict[str, Any]) -> dict[str, list[str]]:
    """Scope -> what needs it, for each scope the code needs that the manifest lacks."""
    needs: dict[str, list[str]] = {}
    for method, where in sorted(called_methods().items()):
        for scope in METHOD_SCOPES.get(method, ()):
            needs.setdefault(scope, []).append(f"{method} (called in {', '.join(sorted(where))})")
    for event in events_of(app):
        for scope in EVENT_SCOPES.get(event, ()):
            needs.setdefault(scope, []).append(f"the {event} event")
    return {scope: why for scope, why in needs.items() if scope not in scopes_of(app)}


def unhandled_events(app: dict[str, Any]) -> list[str]:
    """The events the manifest subscribes to that no listener handles (`message.im` is Bolt's `message`)."""
    handled = handled_events()
    return [event for event in events_of(app) if event.split(".")[0] not in handled]


def test_every_method_the_code_calls_has_its_scopes_written_down():
    called = called_methods()
    unknown = {m: sorted(where) for m, where in called.items() if m not in METHOD_SCOPES}
    assert not unknown, (
        f"add these methods and their scopes (Slack's method pages) to bot/slack/app_needs.py: {unknown}"
    )
    assert set(METHOD_SCOPES) == set(called)  # (and nothing the code no longer calls)
    assert {
        "assistant.threads.setSuggestedPrompts",
        "assistant.threads.setStatus",
        "chat.startStream",
    } <= set(called)


def test_the_manifest_asks_for_every_scope_the_code_needs():
    assert missing_scopes(manifest()) == {}


def test_every_event_the_manifest_subscribes_to_is_handled():
    assert unhandled_events(manifest()) == []
    assert sorted(events_of(manifest())) == sorted(EVENT_SCOPES)
    # what the listeners handle beyond the manifest is what an earlier install still sends
    subscribed = {event.split(".")[0] for event in events_of(manifest())}
    assert handled_events() - subscribed == set(LEGACY_EVENTS)


def test_no_scope_is_asked_for_without_a_reason():
    needed = {s for m in called_methods() for s in METHOD_SCOPES[m]} | {
        s for e in EVENT_SCOPES.values() for s in e
    }
    assert scopes_of(manifest()) == needed | set(OTHER_SCOPES)
    assert scopes_of(manifest()) == {*REQUIRED_SCOPES, *SURFACE_SCOPES}  # (what `signoff doctor` checks)


def test_a_scope_the_code_needs_and_the_manifest_lacks_fails_and_so_does_an_unhandled_event():
    lacking = manifest()
    lacking["oauth_config"]["scopes"]["bot"].remove("chat:write")
    lacking["oauth_config"]["scopes"]["bot"].remove("im:history")
    missing = missing_scopes(lacking)
    assert set(missing) == {"chat:write", "im:history"}
    assert "chat.postMessage (called in bot/passkeys/pages.py, bot/slack/posts.py)" in missing["chat:write"]
    assert missing["im:history"][-1] == "the message.im event"
    subscribed = manifest()
    subscribed["settings"]["event_subscriptions"]["bot_events"] += ["reaction_added", "app_context_changed"]
    assert unhandled_events(subscribed) == ["reaction_added", "app_context_changed"]


# what `signoff doctor` says of an app's manifest (tests/e2e/test_operate.py: of a workspace's) -------


def said(app: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.ok, check.detail) for check in manifest_checks(app)}


def test_doctor_finds_nothing_missing_in_the_manifest():
    checks = manifest_checks(manifest(), socket_mode=True)
    assert all(check.ok for check in checks), [c for c in checks if not c.ok]
    assert said(manifest())["feature agent view"] == (True, "on (agent_view)")


def test_doctor_says_each_feature_and_event_an_app_lacks_on_a_line_of_its_own():
    earlier = said(assistant_view_install(manifest()))
    assert earlier["feature agent view"][0] and "earlier assistant view" in earlier["feature agent view"][1]

    broken = copy.deepcopy(manifest())
    broken["features"]["app_home"]["messages_tab_read_only_enabled"] = True
    broken["features"]["slash_commands"] = []
    broken["settings"]["interactivity"]["is_enabled"] = False
    broken["settings"]["event_subscriptions"]["bot_events"] = ["app_mention", "message.channels"]
    del broken["features"]["agent_view"]
    lines = said(broken)
    assert lines["feature Messages tab"] == (False, "read-only: people cannot write to Signoff there")
    assert lines["feature /signoff"][0] is False and lines["feature interactivity"][0] is False
    assert [name for name, (ok, _) in lines.items() if name.startswith("event") and not ok] == [
        "event app_home_opened",
        "event message.groups",
        "event message.im",
    ]
    assert lines["feature agent view"][0] and lines["feature agent view"][1].startswith("off")
