"""The door of /slack/events: a signed body is parsed once, and Bolt takes that parse as it is."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import slack_bolt.request.async_request as bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult

from bot.ingress import slack_events
from bot.payloads import Malformed, decode
from tests.support.standin_bot import standin_for


async def test_bolt_takes_the_doors_parse_and_never_reads_the_body_again(monkeypatch):
    def parsed_again(*args: object) -> None:
        raise AssertionError("Bolt parsed the body a second time")

    monkeypatch.setattr(bolt_request, "parse_body", parsed_again)

    async def authorize(enterprise_id, team_id, user_id):
        return AuthorizeResult(enterprise_id=None, team_id=team_id, bot_token="xoxb-t", bot_user_id="U0BOT")

    app = AsyncApp(
        signing_secret="secret",
        authorize=authorize,
        process_before_response=True,
        request_verification_enabled=False,
    )
    heard = []

    @app.command("/signoff")
    async def command(ack, command, context):
        heard.append((command["text"], command["user_id"], type(context["payload"]).__name__))
        await ack()

    async def refuse(malformed: Malformed):
        raise AssertionError(f"refused: {malformed}")

    async with standin_for(slack_events(app, "secret", refuse)) as (standin, _):
        reply = await standin.slash("U0ALICE", "C0OPS", "what is waiting for me?")

    assert reply.status == 200
    assert heard == [("what is waiting for me?", "U0ALICE", "SlashCommand")]


@pytest.mark.parametrize(
    ("spelled", "refused"),
    [
        ('{"type": "x", "text": "\\ud800"}', True),  # half a UTF-16 pair: no text holds one
        ('{"type": "x", "text": "\\uDBFF\\u0041"}', True),
        ('{"type": "x", "text": "\\ud83d\\ude00"}', False),  # a whole pair: 😀
        ('{"type": "x", "text": "\\\\ud800"}', False),  # a backslash, then the letters "ud800"
    ],
)
def test_a_lone_surrogate_is_refused_however_the_json_spells_it(spelled, refused):
    form = "payload=" + quote(spelled)
    for raw, content_type in ((spelled, "application/json"), (form, "application/x-www-form-urlencoded")):
        if refused:
            with pytest.raises(Malformed, match="surrogate"):
                decode(raw.encode(), content_type)
        else:
            assert decode(raw.encode(), content_type) == json.loads(spelled)
