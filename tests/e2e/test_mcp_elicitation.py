"""An MCP server's questions (`mcp_elicitation`) end to end: a FastMCP server in this process
(`signoff_demo.mcp_server`), its tools called through LangChain's own MCP adapter in a
`create_agent` graph, the real bot and runner, stand-in Slack. On one Redis and on a cluster.
"""

from __future__ import annotations

import textwrap

import pytest

from signoff_demo import mcp_server
from tests.support.harness import buttons, card_text, eventually, header, start_scene
from tests.support.people import ALICE, BOB

ASK_DEPLOY = "Deploy checkout to staging"
ASK_CONNECT = "Connect github"


@pytest.fixture(params=["node", "cluster"])
async def scene(request):
    async with start_scene(request.getfixturevalue(f"{request.param}_url"), "mcp") as running:
        yield running


def received(tool: str) -> list[dict]:
    return [r["answers"] for r in mcp_server.RECEIVED if r["tool"] == tool]


def inputs(modal: dict) -> dict[str, dict]:
    """The modal's input blocks by label: what the person sees and fills in."""
    return {b["label"]["text"]: b for b in modal["blocks"] if b["type"] == "input"}


async def test_a_form_is_answered_in_a_modal_and_the_tool_gets_typed_values(scene):
    mcp_server.RECEIVED.clear()
    thread_id = await scene.ask(ASK_DEPLOY, graph="mcp")
    card = await scene.card(thread_id)

    # who asks, the server's message, what it asks for; the round's three buttons
    assert header(card) == "Deploy service asks"
    assert card.text.startswith("Requester's agent calls deploy_service, which asks: Deploying checkout to")
    assert "The MCP tool `deploy_service` asks" in card_text(card)
    assert "*Replicas*, *Strategy* and *Tell #deploys* (optional)" in card_text(card)
    assert buttons(card) == ["elicit_accept", "elicit_decline", "elicit_cancel"]
    assert buttons(card, withdraw=True)[-1] == "withdraw"  # the requester may withdraw: it cancels

    modal = await scene.open_modal(ALICE, card, "elicit_accept")
    fields = inputs(modal)
    assert {label: b["element"]["type"] for label, b in fields.items()} == {
        "Replicas": "plain_text_input",  # (number_input renders badly on phones: checked here)
        "Strategy": "static_select",
        "Tell #deploys": "radio_buttons",
    }
    assert fields["Replicas"]["element"]["initial_value"] == "2"  # the schema's default, prefilled
    hint = fields["Replicas"]["hint"]["text"]
    assert hint == "How many copies run after the deploy. A whole number. From 1 to 20."
    assert fields["Strategy"]["element"]["initial_option"]["text"]["text"] == "Rolling (one at a time)"
    assert fields["Tell #deploys"]["optional"] is True

    submitted = await scene.standin.submit(
        ALICE,
        modal,
        {
            fields["Replicas"]["block_id"]: "3",
            fields["Strategy"]["block_id"]: "Canary (10% first)",
            fields["Tell #deploys"]["block_id"]: "No",
        },
    )
    assert submitted.acked and not submitted.body

    answer = await scene.answer(thread_id)
    assert (
        'Deployed checkout to staging with {"notify": false, "replicas": 3, "strategy": "canary"}' in answer
    )
    assert received("deploy_service") == [
        {"rollout": {"action": "accept", "content": {"replicas": 3, "strategy": "canary", "notify": False}}}
    ]
    updated = await scene.card_shows(card, "▶️ The tool has the answer and carries on")
    assert f"💬 Answered by <@{ALICE}>" in card_text(updated)
    assert "*Replicas* 3 · *Strategy* Canary (10% first) · *Tell #deploys* no" in card_text(updated)
    assert buttons(updated) == []

    # the thread hears who asked what, and who answered what
    line = (
        "<@U0REQUESTER>'s agent asked `deploy_service` for *Replicas*, *Strategy* and *Tell #deploys*: "
        "Alice answered *Replicas* 3"
    )
    await eventually(lambda: scene.says(thread_id, line), what="the answer in the thread")
    # audited as an edit is: who, when, what
    entries = await scene.store.audit.entries()
    assert len(entries) == 1
    entry = entries[0]
    assert (entry["user"], entry["tool"], entry["outcome"]) == (ALICE, "deploy_service", "decided")
    assert entry["decision"]["content"] == {"rollout": {"replicas": 3, "strategy": "canary", "notify": False}}


async def test_an_invalid_answer_is_refused_on_its_field_and_nothing_resumes(scene):
    mcp_server.RECEIVED.clear()
    thread_id = await scene.ask(ASK_DEPLOY, graph="mcp")
    card = await scene.card(thread_id)
    modal = await scene.open_modal(ALICE, card, "elicit_accept")
    replicas = inputs(modal)["Replicas"]["block_id"]

    for sent, said in (("50", "At most 20."), ("2.5", "A whole number."), ("many", "A number.")):
        refused = await scene.standin.submit(ALICE, modal, {replicas: sent})
        assert refused.json() == {"response_action": "errors", "errors": {replicas: said}}, sent
    # …and so is a forged submission no client would send: an option that is not offered
    strategy = inputs(modal)["Strategy"]["block_id"]
    payload = scene.standin.view_submission_payload(ALICE, modal, {replicas: "3"})
    payload["view"]["state"]["values"][strategy]["v"]["selected_option"] = {
        "value": "9",
        "text": {"type": "plain_text", "text": "x"},
    }
    forged = await scene.standin.send(payload)
    assert forged.json() == {"response_action": "errors", "errors": {strategy: "Not one of the choices."}}

    assert not await scene.store.audit.entries()
    assert received("deploy_service") == []
    assert buttons(scene.fresh(card)) == ["elicit_accept", "elicit_decline", "elicit_cancel"]


@pytest.mark.parametrize("button", ["elicit_decline", "elicit_cancel"])
async def test_decline_and_cancel_reach_the_server_as_such(scene, button):
    mcp_server.RECEIVED.clear()
    thread_id = await scene.ask(ASK_DEPLOY, graph="mcp")
    card = await scene.card(thread_id)

    await scene.standin.click(ALICE, card, button)

    action = button.removeprefix("elicit_")
    told = "declined to choose a rollout" if action == "decline" else "Cancelled: checkout was not deployed"
    assert told in await scene.answer(thread_id)
    assert received("deploy_service") == [{"rollout": {"action": action, "content": None}}]
    shown = "🙅 Declined by" if action == "decline" else "✖️ Cancelled by"
    await scene.card_shows(card, shown)


async def test_a_url_request_links_out_and_done_accepts_it(scene):
    mcp_server.RECEIVED.clear()
    thread_id = await scene.ask(ASK_CONNECT, graph="mcp")
    card = await scene.card(thread_id)

    assert "🔗 Opens *auth.example.com* in your browser" in card_text(card)
    link = next(
        e for b in card.blocks if b.get("accessory") for e in [b["accessory"]] if e.get("url")
    )  # a link button, never a text field
    assert link["url"] == "https://auth.example.com/connect/github"
    assert not any(b["type"] == "input" for b in card.blocks)
    assert buttons(card) == ["elicit_done", "elicit_decline", "elicit_cancel"]
    opened = await scene.standin.click(ALICE, card, "open:elicit:0")  # Slack tells the app; it acks
    assert opened.acked
    details = await scene.open_modal(BOB, card, "details")  # the card's Details, as on any card
    assert details["callback_id"] == "details"

    await scene.standin.click(ALICE, card, "elicit_done")

    assert "Connected github." in await scene.answer(thread_id)
    assert received("connect_account") == [{"sign_in": {"action": "accept", "content": None}}]


async def test_only_the_rules_approvers_answer_and_a_time_limit_cancels_the_call(node_url, tmp_path):
    policy = tmp_path / "signoff.toml"
    policy.write_text(
        textwrap.dedent(
            """
            [[rules]]
            tools = ["deploy_service"]
            approvers = ["U0ALICE"]
            timeout = "2s"
            """
        )
    )
    mcp_server.RECEIVED.clear()
    async with start_scene(node_url, "mcp", policy=policy) as scene:
        thread_id = await scene.ask(ASK_DEPLOY, graph="mcp")
        card = await scene.card(thread_id)
        assert "Expires" in card_text(card) and "then the call is cancelled" in card_text(card)

        await scene.standin.click(BOB, card, "elicit_decline")  # not an approver of the rule
        said = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="the refusal")
        assert "You are not on the approver list for `deploy_service`" in said[0]

        assert "Cancelled: checkout was not deployed" in await scene.answer(thread_id, timeout=30)
        assert received("deploy_service") == [{"rollout": {"action": "cancel", "content": None}}]
        await scene.card_shows(card, "⌛ No answer in time")


async def test_the_requester_withdrawing_cancels_the_call(scene):
    mcp_server.RECEIVED.clear()
    thread_id = await scene.ask(ASK_DEPLOY, graph="mcp", requester="U0RILEY")
    card = await scene.card(thread_id)

    assert (await scene.confirm("U0RILEY", card, "withdraw")).acked

    assert "Cancelled: checkout was not deployed" in await scene.answer(thread_id)
    assert received("deploy_service") == [{"rollout": {"action": "cancel", "content": None}}]
    await scene.card_shows(card, "↩️ Withdrawn by the requester")
