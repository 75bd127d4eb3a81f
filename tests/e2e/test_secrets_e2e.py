"""Secrets in a tool call's arguments, end to end: an API key, an Authorization header holding a
BEARER_JWT and a card number the policy's `redact` names reach no part of Slack (every message, update,
view, ephemeral, response_url answer), no log line and no `signoff audit` output; the tool gets
every value as asked, after an Approve, an Edit that leaves them untouched and an Edit that types
a new key; an approver may open "Show secret values" where the policy allows it, audited.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.harness import (
    APPROVE_BUTTON,
    CHANNEL,
    Harness,
    card_text,
    eventually,
    signoff,
    start_scene,
)
from tests.support.people import ALICE, BOB
from tests.support.secret_graph import ARGS, BEARER_JWT, CARD_NUMBER, PAYMENTS_KEY, REDACT, SECRETS

NEW_KEY = "sk-proj-Hn4Jw8Qe2Rt6Yu1Io5Pa9Sd3"  # what an approver types over the agent's key
REQUESTER = "U0REQUESTER"


def secret_policy(tmp_path, reveal: bool = False):
    path = tmp_path / "signoff.toml"
    path.write_text(f"[defaults]\napprovers = ['{ALICE}']\n{REDACT}\nreveal = {str(reveal).lower()}\n")
    return path


@pytest.fixture
def charges(tmp_path, monkeypatch):
    path = tmp_path / "charges.jsonl"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(path))
    return path


def charged(charges) -> list[dict[str, Any]]:
    return [json.loads(line) for line in charges.read_text().splitlines()]


def slack_saw(scene: Harness) -> str:
    """Everything Slack was sent or holds: every Web API and response_url call's arguments (posts,
    updates, views, ephemerals, streams, statuses), and the messages, views and Home tabs as kept."""
    return json.dumps(
        [
            [call.args for call in scene.standin.calls],
            [(m.text, m.blocks, m.metadata) for m in scene.standin.messages],
            list(scene.standin.views.values()),
            scene.standin.ephemerals,
            list(scene.standin.home.values()),
        ],
        ensure_ascii=False,
        default=str,
    )


def every_button(card) -> list[str]:
    return [e["action_id"] for b in card.blocks if b.get("type") == "actions" for e in b["elements"]]


def leaked(text: str, *secrets: str) -> list[str]:
    """The secrets found in `text`, whole or all but their last 4 characters (the mask shows those)."""
    return [s for s in secrets if s in text or s[:-4] in text]


async def test_secrets_reach_no_slack_surface_log_or_audit_and_the_tool_gets_them(
    redis_url, tmp_path, charges, capfd
):
    async with start_scene(redis_url, "secret", policy=secret_policy(tmp_path)) as scene:
        thread_id = await scene.ask("charge Ada", graph="secret")
        card = await scene.card(thread_id)
        shown = card_text(card)
        assert "https://payments.example.com/v1/charges" in shown and "ticket 4411" in shown
        assert "••••" in shown and "Ada Lovelace" in shown  # masked where they sit, the rest as is
        assert "reveal:0" not in every_button(card)  # reveal is off
        await scene.standin.open_home(ALICE)  # where else the waiting call is listed
        await eventually(lambda: scene.standin.home.get(ALICE), what="the Home tab")
        await scene.standin.slash(ALICE, CHANNEL, "pending")
        await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="/signoff pending")
        pending = await signoff(scene, "pending")
        assert "charge" in pending.stdout

        await scene.standin.click(ALICE, card, APPROVE_BUTTON)
        answer = await scene.answer(thread_id)
        assert answer.startswith("Charged Ada, with the key ••••")  # the agent repeated the key
        audit = await signoff(scene, "audit")
        csv = await signoff(scene, "audit", "--format", "csv")

    assert charged(charges) == [ARGS]  # every value as the agent asked
    assert leaked(slack_saw(scene), *SECRETS) == []
    logged = "".join(capfd.readouterr())
    assert "run_started" in logged or "approval" in logged  # (the logs were captured)
    assert leaked(logged, *SECRETS) == []
    assert audit.returncode == 0, audit.stderr
    assert leaked(audit.stdout + csv.stdout + pending.stdout, *SECRETS) == []
    [row] = [json.loads(line) for line in audit.stdout.splitlines() if '"approval_id"' in line]
    original = row["original_args"]
    assert re.fullmatch(r"fp:[0-9a-f]{16}", original["api_key"])  # told apart, never shown
    assert re.fullmatch(r"fp:[0-9a-f]{16}", original["customer"]["card_number"])
    assert original["headers"][0]["value"].startswith("fp:")
    assert original["note"] == "ticket 4411" and original["customer"]["name"] == "Ada Lovelace"


async def edit_in_the_form(scene: Harness, card, typed: dict[str, str]) -> dict[str, Any]:
    """ALICE opens Edit, checks that the form shows no secret, and submits `typed` over it."""
    modal = await scene.open_modal(ALICE, card, "edit:0")
    assert leaked(json.dumps(modal), *SECRETS) == []
    submitted = await scene.standin.submit(ALICE, modal, typed)
    assert submitted.acked and "errors" not in submitted.body, submitted.body
    return modal


async def test_an_edit_keeps_untouched_secrets_and_takes_a_typed_one_without_showing_either(
    redis_url, tmp_path, charges, capfd
):
    async with start_scene(redis_url, "secret", policy=secret_policy(tmp_path)) as scene:
        untouched = await scene.ask("charge Ada", graph="secret")
        await edit_in_the_form(scene, await scene.card(untouched), {"note": "ticket 4412"})
        assert await scene.answer(untouched)

        retyped = await scene.ask("charge Ada again", graph="secret")
        card = await scene.card(retyped)
        await edit_in_the_form(scene, card, {"api_key": NEW_KEY})
        assert await scene.answer(retyped)
        edited = await scene.card_shows(card, "Edited")
        audit = await signoff(scene, "audit")

    assert charged(charges) == [{**ARGS, "note": "ticket 4412"}, {**ARGS, "api_key": NEW_KEY}]
    assert "ticket 4412" not in json.dumps(charged(charges)[1])
    assert "••••" in card_text(edited)
    everywhere = slack_saw(scene) + "".join(capfd.readouterr()) + audit.stdout
    assert leaked(everywhere, *SECRETS, NEW_KEY) == []
    rows = [json.loads(line) for line in audit.stdout.splitlines() if '"approval_id"' in line]
    new, old = rows[1]["edited_args"]["api_key"], rows[1]["original_args"]["api_key"]
    assert new.startswith("fp:") and old.startswith("fp:") and new != old  # a different key, told apart
    assert rows[0]["edited_args"]["api_key"] == rows[0]["original_args"]["api_key"]  # the same key


async def test_reveal_opens_the_values_to_an_approver_only_and_is_audited(redis_url, tmp_path, charges):
    async with start_scene(redis_url, "secret", policy=secret_policy(tmp_path, reveal=True)) as scene:
        thread_id = await scene.ask("charge Ada", graph="secret", requester=REQUESTER)
        card = await scene.card(thread_id)
        assert "reveal:0" in every_button(card)

        await scene.standin.click(REQUESTER, card, "reveal:0")  # not an approver: refused, nothing shown
        refusal = await eventually(lambda: scene.standin.ephemerals_for(REQUESTER), what="the refusal")
        modal = await scene.open_modal(ALICE, card, "reveal:0")
        entries = await scene.store.audit.entries()

    assert refusal[0].startswith("Only someone who may approve this call")
    assert scene.standin.open_views(REQUESTER) == []
    shown = json.dumps(modal, ensure_ascii=False)
    assert PAYMENTS_KEY in shown and BEARER_JWT in shown and CARD_NUMBER in shown
    assert "Only you see this" in shown
    assert [(e["outcome"], e["user"], e["index"]) for e in entries] == [("revealed", ALICE, 0)]
    assert not charges.exists()  # nothing ran: a look decides nothing


async def test_a_dead_letter_shows_a_resumes_edited_secret_masked(redis_url, tmp_path):
    import io
    import uuid

    from core.config import Settings
    from core.store import Store
    from signoff.commands.deadletters import deadletters_show

    store = Store.from_url(redis_url, f"t{uuid.uuid4().hex[:10]}")
    partition = store.keys.partitions[0]
    edited = {"type": "edit", "edited_action": {"name": "charge", "args": {**ARGS, "api_key": NEW_KEY}}}
    fields = {"stream": partition.commands, "why": "failed too often", "decisions": json.dumps([edited])}
    await store.redis.xadd(partition.dead_letters, fields, id="5-1")
    shown = io.StringIO()
    redact = Settings.from_env({"SIGNOFF_POLICY": str(secret_policy(tmp_path))}).policy.redactions
    assert await deadletters_show(store, "5-1", shown, redact) == 0
    await store.close()

    assert leaked(shown.getvalue(), *SECRETS, NEW_KEY) == []
    assert json.loads(shown.getvalue())["decisions"][0]["edited_action"]["args"]["note"] == "ticket 4411"


async def test_view_full_arguments_of_a_proposed_edit_shows_no_secret(redis_url, tmp_path):
    """A quorum of 2: Alice proposes an edit, Bob opens "View full arguments" (the call's
    description too: LangChain's middleware writes the real arguments into it)."""
    policy = tmp_path / "signoff.toml"
    policy.write_text(f"[defaults]\napprovers = ['{ALICE}', '{BOB}']\nquorum = 2\n{REDACT}\n")
    async with start_scene(redis_url, "secret", policy=policy) as scene:
        thread_id = await scene.ask("charge Ada", graph="secret")
        card = await scene.card(thread_id)
        form = await scene.open_modal(ALICE, card, "edit:0")
        submitted = await scene.standin.submit(ALICE, form, {"note": "ticket 4412"})
        assert submitted.acked and "errors" not in submitted.body, submitted.body
        card = await scene.card_shows(card, "View full arguments")
        view = await scene.open_modal(BOB, card, "view_args:0")

    assert "ticket 4412" in json.dumps(view, ensure_ascii=False)  # the proposal, in full
    assert leaked(slack_saw(scene), *SECRETS) == []
