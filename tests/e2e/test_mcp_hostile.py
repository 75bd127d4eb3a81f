"""A hostile MCP server's questions end to end: the real bot and runner, stand-in Slack, a FastMCP
server that asks whatever a test sets (`tests.support.hostile_mcp`) or the demo's. Found by a
red-team pass; each failed before."""

from __future__ import annotations

import asyncio
import textwrap

from signoff_demo import mcp_server
from tests.e2e.test_mcp_elicitation import inputs
from tests.support import hostile_mcp as hostile
from tests.support.harness import eventually, start_scene
from tests.support.people import ALICE, BOB


async def test_a_20_digit_integer_is_refused_before_the_server_acts_and_the_run_fails(node_url):
    """A person types 99999999999999999999 (20 of the input's 40 characters) in an integer field
    with no maximum: jsonschema and MCP accept it, so the resume goes out, the MCP server acts on
    it, and then LangGraph's checkpointer (ormsgpack) raises "Integer exceeds 64-bit range": the
    run fails after the tool's side effect."""
    hostile.RECEIVED.clear()
    hostile.ROUND[:] = [
        (
            "k",
            {
                "message": "How many?",
                "requested_schema": {
                    "type": "object",
                    "properties": {"n": {"type": "integer", "title": "N"}},
                    "required": ["n"],
                },
            },
        )
    ]
    async with start_scene(node_url, "hostile") as scene:
        thread_id = await scene.ask("go", graph="hostile")
        card = await scene.card(thread_id)
        modal = await scene.open_modal(ALICE, card, "elicit_accept")
        submitted = await scene.standin.submit(
            ALICE, modal, {inputs(modal)["N"]["block_id"]: "99999999999999999999"}
        )
        await asyncio.sleep(3)
        failed = [t for t in await scene.thread_texts(thread_id) if "The run failed" in t]
        assert not failed, (failed, hostile.RECEIVED)
        assert submitted.body and submitted.json()["response_action"] == "errors"


async def test_a_long_message_on_a_url_request_still_gets_a_card(node_url):
    """A URL request whose message is 2,500 '<' (escaped to 10,000 characters, never cut again):
    slack_sdk refuses the section, the events stream gives up after 5 tries, and no card is
    ever posted: nobody can Decline or Cancel; the run waits."""
    hostile.ROUND[:] = [("k", {"mode": "url", "message": "<" * 2500, "url": "https://auth.example.com/x"})]
    async with start_scene(node_url, "hostile") as scene:
        thread_id = await scene.ask("go", graph="hostile")
        await scene.card(thread_id, timeout=15)


async def test_a_when_that_can_read_no_arguments_cannot_route_the_question_to_anyone(node_url, tmp_path):
    """docs/policy.md: "A `when` sees the call with no arguments ... so a condition on the
    arguments cannot be read and the strictest rule the tool could match applies". A `when`
    written with has() reads empty args as false: the staging deploy's question goes to the
    fallthrough rule, and Bob (not Alice, the staging rule's approver) cancels it."""
    policy = tmp_path / "signoff.toml"
    policy.write_text(
        textwrap.dedent(
            """
            [[rules]]
            tools = ["deploy_service"]
            when = 'has(args.environment) && args.environment == "staging"'
            approvers = ["U0ALICE"]

            [[rules]]
            tools = ["deploy_service"]
            approvers = []
            fallthrough = "deliberate"
            """
        )
    )
    mcp_server.RECEIVED.clear()
    async with start_scene(node_url, "mcp", policy=policy) as scene:
        thread_id = await scene.ask("Deploy checkout to staging", graph="mcp")
        card = await scene.card(thread_id)
        await scene.standin.click(BOB, card, "elicit_cancel")
        said = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="Bob refused", timeout=5)
        assert "not on the approver list" in said[0]
